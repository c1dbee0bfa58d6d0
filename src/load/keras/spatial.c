/* spatial.c: Keras layers over 1 to 3 spatial axes: convolution, pooling, padding,
 * cropping, upsampling (keras.h). */

#include "keras.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Output dims of a window over `in` (-1: None): valid floor((in - ek) / s) + 1,
 * same ceil(in / s), causal (in - 1) / s + 1. */
static int64_t window_out(struct keras *k, int64_t in, int64_t kk, int64_t s, int64_t d,
                          const char *pad)
{
    if (in < 0)
        return -1;
    int64_t ek;
    if (!dm_mul_ok(kk - 1, d, &ek) || !dm_add_ok(ek, 1, &ek)) {
        dm_kr_fail(k, DNNMEM_E_SHAPE, "the dilated kernel overflows");
        return 1;
    }
    if (!strcmp(pad, "same"))
        return in / s + (in % s != 0);
    if (!strcmp(pad, "causal"))
        return in < 1 ? 0 : (in - 1) / s + 1;
    if (in < ek) {
        dm_kr_fail(k, DNNMEM_E_SHAPE, "the window (%lld) is larger than the input (%lld)",
                   (long long)ek, (long long)in);
        return 1;
    }
    return (in - ek) / s + 1;
}

static const char *padding_mode(struct keras *k, json_t *cfg, bool causal_ok)
{
    const char *p = dm_kr_get_str(k, cfg, "padding", "valid");
    if (strcmp(p, "valid") && strcmp(p, "same") && (!causal_ok || strcmp(p, "causal")))
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "padding '%s' is not supported (valid, same%s)", p,
                   causal_ok ? ", causal" : "");
    return p;
}

/* Window attributes of a Conv or pooling node just made. */
static void window_attrs(struct keras *k, int ns, const int64_t *kk, const int64_t *s,
                         const int64_t *d, const char *pad, bool conv)
{
    dm_kr_attr_ints(k, "kernel_shape", ns, kk);
    dm_kr_attr_ints(k, "strides", ns, s);
    if (conv)
        dm_kr_attr_ints(k, "dilations", ns, d);
    if (!strcmp(pad, "same"))
        dm_kr_attr_s(k, "auto_pad", "SAME_UPPER"); /* TensorFlow's SAME: the extra pad at the end */
    else if (!strcmp(pad, "causal")) {
        int64_t pads[2 * DM_MAX_DIMS] = {0};
        for (int i = 0; i < ns; i++)
            pads[i] = (kk[i] - 1) * d[i];
        dm_kr_attr_ints(k, "pads", 2 * ns, pads);
    } else
        dm_kr_attr_s(k, "auto_pad", "VALID");
}

/* Conv1D/2D/3D, DepthwiseConv1D/2D, SeparableConv1D/2D, Conv*DTranspose. */
void dm_kr_conv_layer(struct keras *k, struct layer_io *io, int ns, char kind)
{
    /* kind: 'c' conv, 'd' depthwise, 's' separable, 't' transpose */
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, ns + 2, ns + 2))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank, c = dm_kr_channel_axis(k, cfg, r);
    int64_t cin = dm_kr_known(k, x, c, "channel count");
    int64_t kk[DM_MAX_DIMS], s[DM_MAX_DIMS], d[DM_MAX_DIMS];
    dm_kr_get_ints(k, cfg, "kernel_size", ns, -1, 1, kk);
    dm_kr_get_ints(k, cfg, "strides", ns, 1, 1, s);
    dm_kr_get_ints(k, cfg, "dilation_rate", ns, 1, 1, d);
    const char *pad = padding_mode(k, cfg, kind == 'c' && ns == 1);
    bool bias = dm_kr_get_bool(k, cfg, "use_bias", true);
    int64_t groups = kind == 'c' ? dm_kr_get_int(k, cfg, "groups", 1, 1) : 1;
    int64_t mult = kind == 'd' || kind == 's' ? dm_kr_get_int(k, cfg, "depth_multiplier", 1, 1) : 1;
    int64_t filters = kind == 'd' ? 1 : dm_kr_get_int(k, cfg, "filters", INT64_MIN, 1);
    if (k->st != DNNMEM_OK)
        return;
    if (cin % groups || filters % groups) {
        dm_kr_fail(k, DNNMEM_E_SHAPE, "groups %lld does not divide the %lld input channels "
                   "and %lld filters", (long long)groups, (long long)cin, (long long)filters);
        return;
    }
    int8_t cf[DM_MAX_DIMS];
    dm_kr_perm_channels_first(r, c, cf);
    int32_t xi = dm_kr_arrange(k, x, cf);
    int64_t wd[DM_MAX_DIMS], mid, cout;
    if (kind == 'd' || kind == 's') {
        if (!dm_mul_ok(cin, mult, &mid)) {
            dm_kr_fail(k, DNNMEM_E_SHAPE, "the channel count overflows");
            return;
        }
        wd[0] = mid;
        wd[1] = 1;
        memcpy(wd + 2, kk, (size_t)ns * sizeof *kk);
        int32_t w = dm_kr_weight(k, "depthwise_kernel", ns + 2, wd);
        int32_t b = kind == 'd' && bias ? dm_kr_weight(k, "bias", 1, &mid) : -1;
        int32_t y = dm_kr_op(k, DM_OP_Conv, b >= 0 ? 3 : 2, xi, w, b);
        window_attrs(k, ns, kk, s, d, pad, true);
        dm_kr_attr_i(k, "group", cin);
        xi = y;
        cout = mid;
        if (kind == 's') { /* the pointwise 1x1 convolution */
            int64_t pd[DM_MAX_DIMS], ones[DM_MAX_DIMS];
            pd[0] = filters;
            pd[1] = mid;
            for (int i = 0; i < ns; i++)
                pd[2 + i] = ones[i] = 1;
            w = dm_kr_weight(k, "pointwise_kernel", ns + 2, pd);
            b = bias ? dm_kr_weight(k, "bias", 1, &filters) : -1;
            y = dm_kr_op(k, DM_OP_Conv, b >= 0 ? 3 : 2, xi, w, b);
            window_attrs(k, ns, ones, ones, ones, "valid", true);
            xi = y;
            cout = filters;
        }
    } else if (kind == 't') {
        wd[0] = cin;
        wd[1] = filters;
        memcpy(wd + 2, kk, (size_t)ns * sizeof *kk);
        int32_t w = dm_kr_weight(k, "kernel", ns + 2, wd);
        int32_t b = bias ? dm_kr_weight(k, "bias", 1, &filters) : -1;
        if (dm_kr_field(cfg, "output_padding")) {
            dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "output_padding is not supported");
            return;
        }
        xi = dm_kr_op(k, DM_OP_ConvTranspose, b >= 0 ? 3 : 2, xi, w, b);
        window_attrs(k, ns, kk, s, d, pad, true);
        cout = filters;
    } else {
        wd[0] = filters;
        wd[1] = cin / groups;
        memcpy(wd + 2, kk, (size_t)ns * sizeof *kk);
        int32_t w = dm_kr_weight(k, "kernel", ns + 2, wd);
        int32_t b = bias ? dm_kr_weight(k, "bias", 1, &filters) : -1;
        xi = dm_kr_op(k, DM_OP_Conv, b >= 0 ? 3 : 2, xi, w, b);
        window_attrs(k, ns, kk, s, d, pad, true);
        dm_kr_attr_i(k, "group", groups);
        cout = filters;
    }
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    y->id = xi;
    y->dim[c] = cout;
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        if (kind == 't') {
            int64_t v = -1, ek = (kk[i] - 1) * d[i] + 1;
            if (x->dim[a] >= 0) {
                bool ok = !strcmp(pad, "same") ? dm_mul_ok(x->dim[a], s[i], &v)
                                               : dm_mul_ok(x->dim[a] - 1, s[i], &v) &&
                                                     dm_add_ok(v, ek, &v);
                if (!ok || v > MAX_DIM) {
                    dm_kr_fail(k, DNNMEM_E_SHAPE, "the output size overflows");
                    return;
                }
            }
            y->dim[a] = v;
        } else
            y->dim[a] = window_out(k, x->dim[a], kk[i], s[i], d[i], pad);
    }
    io->n_out = 1;
    dm_kr_activation(k, dm_kr_activation_name(k, cfg, "activation", "linear"), y);
}

void dm_kr_pool_layer(struct keras *k, struct layer_io *io, int ns, bool max)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, ns + 2, ns + 2))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank, c = dm_kr_channel_axis(k, cfg, r);
    int64_t kk[DM_MAX_DIMS], s[DM_MAX_DIMS], d[DM_MAX_DIMS];
    dm_kr_get_ints(k, cfg, "pool_size", ns, 2, 1, kk);
    if (dm_kr_field(cfg, "strides"))
        dm_kr_get_ints(k, cfg, "strides", ns, 1, 1, s);
    else
        memcpy(s, kk, sizeof s);
    for (int i = 0; i < ns; i++)
        d[i] = 1;
    const char *pad = padding_mode(k, cfg, false);
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    dm_kr_perm_channels_first(r, c, cf);
    int32_t xi = dm_kr_arrange(k, x, cf);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    y->id = dm_kr_op(k, max ? DM_OP_MaxPool : DM_OP_AveragePool, 1, xi);
    window_attrs(k, ns, kk, s, d, pad, false);
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        y->dim[a] = window_out(k, x->dim[a], kk[i], s[i], 1, pad);
    }
    io->n_out = 1;
}

void dm_kr_global_pool_layer(struct keras *k, struct layer_io *io, int ns, bool max)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, ns + 2, ns + 2))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank, c = dm_kr_channel_axis(k, cfg, r);
    bool keep = dm_kr_get_bool(k, cfg, "keepdims", false);
    int8_t cf[DM_MAX_DIMS];
    dm_kr_perm_channels_first(r, c, cf);
    int32_t xi = dm_kr_arrange(k, x, cf);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    y->id = dm_kr_op(k, max ? DM_OP_GlobalMaxPool : DM_OP_GlobalAveragePool, 1, xi);
    for (int a = 1; a < r; a++)
        if (a != c)
            y->dim[a] = 1;
    if (!keep) { /* [N, C, 1, ...] -> [N, C]: a view */
        y->id = dm_kr_op(k, DM_OP_Flatten, 1, y->id);
        dm_kr_attr_i(k, "axis", 1);
        y->rank = 2;
        y->dim[1] = x->dim[c];
        dm_kr_perm_identity(2, y->perm);
    }
    io->n_out = 1;
}

/* Per-axis pairs of a padding or cropping field: an integer, one per axis,
 * or (begin, end) per axis ("padding", "cropping"). */
static void axis_pairs(struct keras *k, json_t *cfg, const char *key, int ns, int64_t dflt,
                       int64_t *pb, int64_t *pe)
{
    json_t *v = dm_kr_field(cfg, key);
    int64_t one;
    for (int i = 0; i < ns; i++)
        pb[i] = pe[i] = dflt;
    if (!v)
        return;
    if (dm_kr_json_int(v, &one)) {
        for (int i = 0; i < ns; i++)
            pb[i] = pe[i] = one;
    } else if (json_is_array(v) && ns == 1 && json_array_size(v) == 2 &&
               dm_kr_json_int(json_array_get(v, 0), &pb[0]) &&
               dm_kr_json_int(json_array_get(v, 1), &pe[0])) {
    } else if (json_is_array(v) && json_array_size(v) == (size_t)ns) {
        for (int i = 0; i < ns; i++) {
            json_t *e = json_array_get(v, (size_t)i);
            if (dm_kr_json_int(e, &pb[i]))
                pe[i] = pb[i];
            else if (!json_is_array(e) || json_array_size(e) != 2 ||
                     !dm_kr_json_int(json_array_get(e, 0), &pb[i]) ||
                     !dm_kr_json_int(json_array_get(e, 1), &pe[i]))
                dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' is malformed", key);
        }
    } else
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' is malformed", key);
    for (int i = 0; i < ns; i++)
        if (pb[i] < 0 || pe[i] < 0 || pb[i] > MAX_DIM || pe[i] > MAX_DIM)
            dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' holds a negative or absurd size", key);
}

void dm_kr_zeropad_layer(struct keras *k, struct layer_io *io, int ns)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, ns + 2, ns + 2))
        return;
    json_t *cfg = io->cfg;
    int64_t pb[DM_MAX_DIMS], pe[DM_MAX_DIMS];
    int c = dm_kr_channel_axis(k, cfg, x->rank);
    axis_pairs(k, cfg, "padding", ns, 1, pb, pe);
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    dm_kr_perm_channels_first(x->rank, c, cf);
    int32_t xi = dm_kr_arrange(k, x, cf);
    int64_t pads[2 * DM_MAX_DIMS] = {0};
    int r = x->rank;
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        pads[2 + i] = pb[i];
        pads[r + 2 + i] = pe[i];
        if (x->dim[a] >= 0)
            y->dim[a] = x->dim[a] + pb[i] + pe[i];
    }
    int32_t p = dm_kr_const_ints(k, 2 * r, pads);
    y->id = dm_kr_op(k, DM_OP_Pad, 2, xi, p);
    io->n_out = 1;
}

/* Cropping1D/2D/3D: a Slice of the spatial axes (channels first). */
void dm_kr_crop_layer(struct keras *k, struct layer_io *io, int ns)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, ns + 2, ns + 2))
        return;
    int64_t cb[DM_MAX_DIMS], ce[DM_MAX_DIMS];
    int c = dm_kr_channel_axis(k, io->cfg, x->rank);
    axis_pairs(k, io->cfg, "cropping", ns, ns == 1 ? 1 : 0, cb, ce);
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    dm_kr_perm_channels_first(x->rank, c, cf);
    int32_t xi = dm_kr_arrange(k, x, cf);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    int64_t st[DM_MAX_DIMS], en[DM_MAX_DIMS], ax[DM_MAX_DIMS];
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        st[i] = cb[i];
        en[i] = ce[i] ? -ce[i] : INT64_MAX;
        ax[i] = 2 + i;
        if (x->dim[a] >= 0) {
            y->dim[a] = x->dim[a] - cb[i] - ce[i];
            if (y->dim[a] < 0) {
                dm_kr_fail(k, DNNMEM_E_SHAPE, "cropping %lld + %lld exceeds the input's %lld",
                           (long long)cb[i], (long long)ce[i], (long long)x->dim[a]);
                return;
            }
        }
    }
    int32_t ts = dm_kr_const_ints(k, ns, st), te = dm_kr_const_ints(k, ns, en);
    int32_t ta = dm_kr_const_ints(k, ns, ax);
    y->id = dm_kr_op(k, DM_OP_Slice, 4, xi, ts, te, ta);
    io->n_out = 1;
}

/* UpSampling1D/2D/3D: a Resize of the spatial axes by integer factors. */
void dm_kr_upsample_layer(struct keras *k, struct layer_io *io, int ns)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, ns + 2, ns + 2))
        return;
    int64_t f[DM_MAX_DIMS];
    int c = ns == 1 ? 2 : dm_kr_channel_axis(k, io->cfg, x->rank);
    dm_kr_get_ints(k, io->cfg, "size", ns, 2, 1, f);
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    dm_kr_perm_channels_first(x->rank, c, cf);
    int32_t xi = dm_kr_arrange(k, x, cf);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    double sc[DM_MAX_DIMS];
    sc[0] = sc[1] = 1;
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        sc[2 + i] = (double)f[i];
        if (x->dim[a] >= 0 && !dm_mul_ok(x->dim[a], f[i], &y->dim[a])) {
            dm_kr_fail(k, DNNMEM_E_SHAPE, "the upsampled size overflows");
            return;
        }
    }
    int32_t scales = dm_kr_constant(k);
    dm_kr_attr_floats(k, "value_floats", x->rank, sc);
    y->id = dm_kr_op(k, DM_OP_Resize, 3, xi, -1, scales);
    dm_kr_attr_s(k, "mode", "nearest");
    io->n_out = 1;
}
