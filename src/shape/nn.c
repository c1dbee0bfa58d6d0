/* nn.c: shape functions for convolution, pooling, normalization, recurrent and vision/audio ops. */
#include "dnnmem-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------- */

/* dims joined by sep ("3x5x5", "1,3,224,224") for messages. */
static const char *dims_str(char buf[128], int r, const int64_t *d, char sep)
{
    char s[2] = {sep, '\0'};
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < r && len < 100; k++)
        len += (size_t)snprintf(buf + len, 128 - len, "%s%lld", k ? s : "", (long long)d[k]);
    return buf;
}

/* Input i when given (an omitted optional output feeding it counts as omitted). */
static const struct dm_tinfo *opt_in(struct dm_infer *ctx, const struct dm_node *n, int i)
{
    const struct dm_tinfo *t = dm_in(ctx, n, i);
    return t && !t->absent && t->rank >= 0 ? t : NULL;
}

/* Required input i (named `what` in messages) with a rank in [lo, hi]. */
static enum dnnmem_status req_in(struct dm_infer *ctx, const struct dm_node *n, int i,
                                 const char *what, int lo, int hi, const struct dm_tinfo **out)
{
    const struct dm_tinfo *t = opt_in(ctx, n, i);
    if (!t)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input %d (%s) is required", i, what);
    if (t->rank < lo || t->rank > hi)
        return lo == hi ? dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "%s has rank %d; rank %d expected",
                                         what, t->rank, lo)
                        : dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                         "%s has rank %d; rank %d to %d expected", what, t->rank,
                                         lo, hi);
    *out = t;
    return DNNMEM_OK;
}

/* Error unless t has exactly the shape [dims]. */
static enum dnnmem_status expect_shape(struct dm_infer *ctx, const struct dm_node *n,
                                       const struct dm_tinfo *t, const char *what, int r,
                                       const int64_t *dims)
{
    bool same = t->rank == r;
    for (int k = 0; same && k < r; k++)
        same = t->dims[k] == dims[k];
    char a[128], b[128];
    return same ? DNNMEM_OK
                : dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "%s has shape [%s]; [%s] expected", what,
                                 dims_str(a, t->rank, t->dims, ','), dims_str(b, r, dims, ','));
}

/* INTS attribute of per*ns values, each >= lo; dflt fills it when absent or empty. */
static enum dnnmem_status attr_ints(struct dm_infer *ctx, const struct dm_node *n, const char *name,
                                    int ns, int per, int64_t lo, int64_t dflt, int64_t *out)
{
    int64_t c;
    const int64_t *v = dm_attr_ints(n, name, &c);
    for (int k = 0; k < per * ns; k++)
        out[k] = c > 0 && c == per * ns ? v[k] : dflt;
    if (c > 0 && c != per * ns)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "%s has %lld values; %d expected for %d spatial axes", name,
                              (long long)c, per * ns, ns);
    for (int k = 0; k < per * ns; k++)
        if (out[k] < lo)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "%s[%d] is %lld; at least %lld expected",
                                  name, k, (long long)out[k], (long long)lo);
    return DNNMEM_OK;
}

/* The value of a one-element integer input. */
static enum dnnmem_status scalar_in(struct dm_infer *ctx, const struct dm_node *n, int i,
                                    const char *what, int64_t *out)
{
    const int64_t *v;
    int64_t c;
    DM_TRY(dm_in_ints(ctx, n, i, &v, &c));
    if (c != 1)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "%s must be a scalar, but has %lld values",
                              what, (long long)c);
    *out = v[0];
    return DNNMEM_OK;
}

/* ---- convolution and pooling windows ----------------------------------- */

/* Kernel, strides, dilations, pads (begins then ends) and auto_pad over ns spatial axes. */
struct win {
    int ns;
    bool same, valid; /* auto_pad SAME_UPPER/SAME_LOWER, VALID; otherwise explicit pads */
    int64_t k[DM_MAX_DIMS], s[DM_MAX_DIMS], d[DM_MAX_DIMS], pad[2 * DM_MAX_DIMS];
};

/* Read a window; kernel_shape defaults to wk (W's spatial dims) and must match it. */
static enum dnnmem_status read_win(struct dm_infer *ctx, const struct dm_node *n, int ns,
                                   const int64_t *wk, struct win *w)
{
    char a[128], b[128];
    int64_t c;
    w->ns = ns;
    dm_attr_ints(n, "kernel_shape", &c);
    if (c <= 0 && !wk)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "the kernel_shape attribute is required");
    DM_TRY(attr_ints(ctx, n, "kernel_shape", ns, 1, 1, 1, w->k));
    for (int i = 0; wk && i < ns; i++) {
        if (c <= 0)
            w->k[i] = wk[i];
        else if (w->k[i] != wk[i])
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "kernel_shape %s does not match W's kernel %s",
                                  dims_str(a, ns, w->k, 'x'), dims_str(b, ns, wk, 'x'));
        if (w->k[i] < 1)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "W's kernel %s has an empty axis",
                                  dims_str(a, ns, wk, 'x'));
    }
    DM_TRY(attr_ints(ctx, n, "strides", ns, 1, 1, 1, w->s));
    DM_TRY(attr_ints(ctx, n, "dilations", ns, 1, 1, 1, w->d));
    DM_TRY(attr_ints(ctx, n, "pads", ns, 2, 0, 0, w->pad));
    const char *ap = dm_attr_str(n, "auto_pad", "NOTSET");
    w->same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
    w->valid = !strcmp(ap, "VALID");
    if (!w->same && !w->valid && *ap && strcmp(ap, "NOTSET"))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              "auto_pad '%s' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER", ap);
    return DNNMEM_OK;
}

/* Begin/end pads of axis i and the dilated kernel extent (k-1)*d+1; false on overflow. */
static bool win_axis(const struct win *w, int i, int64_t *pb, int64_t *pe, int64_t *ek)
{
    *pb = w->valid || w->same ? 0 : w->pad[i];
    *pe = w->valid || w->same ? 0 : w->pad[w->ns + i];
    return dm_mul_ok(w->k[i] - 1, w->d[i], ek) && dm_add_ok(*ek, 1, ek);
}

/* ONNX conv/pool output size: SAME_* ceil(in/s); else floor((in + pads - ek)/s) + 1, or with
 * ceil_mode ceil(...) + 1 where the last window must start inside the input or left padding. */
static enum dnnmem_status win_out(struct dm_infer *ctx, const struct dm_node *n,
                                  const struct win *w, const int64_t *in, bool ceil_mode,
                                  int64_t *out)
{
    int64_t ek[DM_MAX_DIMS], padded[DM_MAX_DIMS];
    bool fits = true;
    for (int i = 0; i < w->ns; i++) {
        int64_t pb, pe, start_lim;
        if (!win_axis(w, i, &pb, &pe, &ek[i]) || !dm_add_ok(in[i], pb, &start_lim) ||
            !dm_add_ok(start_lim, pe, &padded[i]))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "the window of spatial axis %d overflows",
                                  i);
        if (w->same) {
            out[i] = in[i] / w->s[i] + (in[i] % w->s[i] != 0);
            continue;
        }
        if (padded[i] < ek[i]) {
            fits = false;
            continue;
        }
        int64_t span = padded[i] - ek[i];
        out[i] = span / w->s[i] + 1;
        if (ceil_mode && span % w->s[i] && out[i] <= (start_lim - 1) / w->s[i])
            out[i]++;
    }
    char a[128], b[128];
    return fits ? DNNMEM_OK
                : dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                 "kernel %s (dilated) larger than the padded input %s",
                                 dims_str(a, w->ns, ek, 'x'), dims_str(b, w->ns, padded, 'x'));
}

/* ONNX ConvTranspose/MaxUnpool output size: SAME_* in*s; else s*(in-1) + out_pad + ek - pads. */
static enum dnnmem_status win_out_t(struct dm_infer *ctx, const struct dm_node *n,
                                    const struct win *w, const int64_t *in, const int64_t *opad,
                                    int64_t *out)
{
    for (int i = 0; i < w->ns; i++) {
        int64_t pb = 0, pe = 0, ek, v;
        bool ok = w->same ? dm_mul_ok(in[i], w->s[i], &v)
                          : win_axis(w, i, &pb, &pe, &ek) && dm_mul_ok(in[i] - 1, w->s[i], &v) &&
                                dm_add_ok(v, opad[i], &v) && dm_add_ok(v, ek, &v) &&
                                dm_add_ok(v, -pb, &v) && dm_add_ok(v, -pe, &v);
        if (!ok)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "the output size of spatial axis %d overflows", i);
        if (v < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "pads %lld+%lld exceed the output of spatial axis %d",
                                  (long long)pb, (long long)pe, i);
        out[i] = v;
    }
    return DNNMEM_OK;
}

/* Conv/ConvInteger (W at 1, B at 2) and QLinearConv (W at 3, B at 8): Y [N, M, spatial...] with
 * M = W[0] and X's C = W[1] * group; dt DM_UNDEFINED means X's type. */
static enum dnnmem_status conv_out(struct dm_infer *ctx, const struct dm_node *n, int wi, int bi,
                                   enum dm_dtype dt)
{
    const struct dm_tinfo *x, *w, *b;
    DM_TRY(req_in(ctx, n, 0, "X", 3, DM_MAX_DIMS, &x));
    const struct dm_tinfo *wk = opt_in(ctx, n, wi);
    if (wk && wk->rank >= 3 && wk->rank != x->rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "X has rank %d but W has rank %d: a %d-D convolution reads "
                              "[N, C, %s] data; check the input shape",
                              x->rank, wk->rank, wk->rank - 2,
                              wk->rank == 3 ? "L" : wk->rank == 4 ? "H, W" : "D, H, W");
    DM_TRY(req_in(ctx, n, wi, "W", x->rank, x->rank, &w));
    int64_t g = dm_attr_int(n, "group", 1), m = w->dims[0], cw;
    if (g < 1)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "group %lld must be at least 1",
                              (long long)g);
    if (m % g)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "W has %lld output channels, not a multiple of group %lld",
                              (long long)m, (long long)g);
    if (!dm_mul_ok(w->dims[1], g, &cw) || cw != x->dims[1])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "input has %lld channels but W expects %lld (group %lld)",
                              (long long)x->dims[1], (long long)cw, (long long)g);
    if (bi >= 0 && (b = opt_in(ctx, n, bi)))
        DM_TRY(expect_shape(ctx, n, b, "B", 1, &m));
    struct win win;
    DM_TRY(read_win(ctx, n, x->rank - 2, w->dims + 2, &win));
    int64_t dims[DM_MAX_DIMS] = {x->dims[0], m};
    DM_TRY(win_out(ctx, n, &win, x->dims + 2, false, dims + 2));
    return dm_set_out(ctx, n, 0, dt == DM_UNDEFINED ? x->dtype : dt, x->rank, dims);
}

/* Conv: Y like X's type; ConvInteger: int32. */
enum dnnmem_status dm_shape_conv(struct dm_infer *ctx, const struct dm_node *n)
{
    bool integer = n->op == DM_OP_ConvInteger;
    return conv_out(ctx, n, 1, integer ? -1 : 2, integer ? DM_INT32 : DM_UNDEFINED);
}

/* QLinearConv: inputs x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B; Y has y_zp's type. */
enum dnnmem_status dm_shape_qlinear_conv(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *yzp;
    DM_TRY(req_in(ctx, n, 7, "y_zero_point", 0, 1, &yzp));
    return conv_out(ctx, n, 3, 8, yzp->dtype);
}

/* ConvTranspose: Y [N, W[1] * group, spatial...] with X's C = W[0]; spatial dims from the
 * output_shape attribute when given (output_padding is then ignored), else win_out_t. */
enum dnnmem_status dm_shape_conv_transpose(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *w, *b;
    DM_TRY(req_in(ctx, n, 0, "X", 3, DM_MAX_DIMS, &x));
    DM_TRY(req_in(ctx, n, 1, "W", x->rank, x->rank, &w));
    int ns = x->rank - 2;
    int64_t g = dm_attr_int(n, "group", 1), c = x->dims[1], m;
    if (g < 1)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "group %lld must be at least 1",
                              (long long)g);
    if (w->dims[0] != c)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "input has %lld channels but W expects %lld",
                              (long long)c, (long long)w->dims[0]);
    if (c % g)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "input has %lld channels, not a multiple of group %lld", (long long)c,
                              (long long)g);
    if (!dm_mul_ok(w->dims[1], g, &m))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "the output channel count overflows");
    if ((b = opt_in(ctx, n, 2)))
        DM_TRY(expect_shape(ctx, n, b, "B", 1, &m));
    struct win win;
    int64_t opad[DM_MAX_DIMS], dims[DM_MAX_DIMS] = {x->dims[0], m}, cnt;
    DM_TRY(read_win(ctx, n, ns, w->dims + 2, &win));
    DM_TRY(attr_ints(ctx, n, "output_padding", ns, 1, 0, 0, opad));
    const int64_t *os = dm_attr_ints(n, "output_shape", &cnt);
    if (cnt <= 0)
        DM_TRY(win_out_t(ctx, n, &win, x->dims + 2, opad, dims + 2));
    else if (cnt == ns || cnt == ns + 2) /* spatial dims, or the full shape */
        memcpy(dims + 2, os + (cnt - ns), (size_t)ns * sizeof *dims);
    else
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "output_shape has %lld values; %d expected",
                              (long long)cnt, ns);
    return dm_set_out(ctx, n, 0, x->dtype, x->rank, dims);
}

/* MaxPool/AveragePool/LpPool: Y [N, C, spatial...] by win_out with ceil_mode; MaxPool's optional
 * Indices output is int64 like Y (storage_order changes only the index values). */
enum dnnmem_status dm_shape_pool(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    struct win win;
    DM_TRY(req_in(ctx, n, 0, "X", 3, DM_MAX_DIMS, &x));
    DM_TRY(read_win(ctx, n, x->rank - 2, NULL, &win));
    int64_t dims[DM_MAX_DIMS] = {x->dims[0], x->dims[1]};
    DM_TRY(win_out(ctx, n, &win, x->dims + 2, dm_attr_int(n, "ceil_mode", 0) != 0, dims + 2));
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, dims));
    return n->op == DM_OP_MaxPool ? dm_set_out(ctx, n, 1, DM_INT64, x->rank, dims) : DNNMEM_OK;
}

/* GlobalAveragePool/GlobalMaxPool/GlobalLpPool: Y [N, C, 1, ...]. */
enum dnnmem_status dm_shape_global_pool(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, "X", 2, DM_MAX_DIMS, &x));
    int64_t dims[DM_MAX_DIMS];
    for (int k = 0; k < x->rank; k++)
        dims[k] = k < 2 ? x->dims[k] : 1;
    return dm_set_out(ctx, n, 0, x->dtype, x->rank, dims);
}

/* MaxUnpool: Y is the output_shape input when given, else [N, C, (in-1)*s + k - pads...];
 * the indices I have X's shape. */
enum dnnmem_status dm_shape_max_unpool(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *ind;
    DM_TRY(req_in(ctx, n, 0, "X", 3, DM_MAX_DIMS, &x));
    DM_TRY(req_in(ctx, n, 1, "I", 0, DM_MAX_DIMS, &ind));
    DM_TRY(expect_shape(ctx, n, ind, "I", x->rank, x->dims));
    int64_t dims[DM_MAX_DIMS] = {x->dims[0], x->dims[1]}, zeros[DM_MAX_DIMS] = {0}, cnt;
    if (opt_in(ctx, n, 2)) {
        const int64_t *v;
        DM_TRY(dm_in_ints(ctx, n, 2, &v, &cnt));
        if (cnt != x->rank)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "output_shape has %lld values; %d expected", (long long)cnt,
                                  x->rank);
        return dm_set_out(ctx, n, 0, x->dtype, x->rank, v);
    }
    struct win win;
    DM_TRY(read_win(ctx, n, x->rank - 2, NULL, &win));
    DM_TRY(win_out_t(ctx, n, &win, x->dims + 2, zeros, dims + 2));
    return dm_set_out(ctx, n, 0, x->dtype, x->rank, dims);
}

/* MaxRoiPool (rois [R, 5]) and RoiAlign (rois [R, 4], batch_indices [R]): Y [R, C, h, w]. */
static enum dnnmem_status roi_out(struct dm_infer *ctx, const struct dm_node *n, int64_t cols,
                                  int64_t h, int64_t w)
{
    const struct dm_tinfo *x, *rois, *bi;
    DM_TRY(req_in(ctx, n, 0, "X", 4, 4, &x));
    DM_TRY(req_in(ctx, n, 1, "rois", 2, 2, &rois));
    int64_t shape[2] = {rois->dims[0], cols};
    DM_TRY(expect_shape(ctx, n, rois, "rois", 2, shape));
    if (cols == 4) {
        DM_TRY(req_in(ctx, n, 2, "batch_indices", 1, 1, &bi));
        DM_TRY(expect_shape(ctx, n, bi, "batch_indices", 1, shape));
    }
    if (h < 1 || w < 1)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "the pooled size %lldx%lld is empty",
                              (long long)h, (long long)w);
    int64_t dims[4] = {rois->dims[0], x->dims[1], h, w};
    return dm_set_out(ctx, n, 0, x->dtype, 4, dims);
}

/* MaxRoiPool: pooled_shape [h, w] is required. */
enum dnnmem_status dm_shape_max_roi_pool(struct dm_infer *ctx, const struct dm_node *n)
{
    int64_t c;
    const int64_t *ps = dm_attr_ints(n, "pooled_shape", &c);
    if (c != 2)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              "the pooled_shape attribute must hold 2 values");
    return roi_out(ctx, n, 5, ps[0], ps[1]);
}

/* RoiAlign: output_height and output_width default to 1. */
enum dnnmem_status dm_shape_roi_align(struct dm_infer *ctx, const struct dm_node *n)
{
    return roi_out(ctx, n, 4, dm_attr_int(n, "output_height", 1),
                   dm_attr_int(n, "output_width", 1));
}

/* ---- normalization ----------------------------------------------------- */

/* BatchNormalization: Y like X [N, C, ...]; scale, B, mean, var are [C] (opset < 9 with spatial=0:
 * X's dims after N); scale and B may be omitted. The optional statistics outputs (running mean/var, only with training_mode
 * from opset 14; opset < 14 also saved mean/var) take mean's shape and type. */
enum dnnmem_status dm_shape_batchnorm(struct dm_infer *ctx, const struct dm_node *n)
{
    static const char *const names[5] = {"X", "scale", "B", "input_mean", "input_var"};
    const struct dm_tinfo *x, *t[5];
    DM_TRY(req_in(ctx, n, 0, "X", 2, DM_MAX_DIMS, &x));
    bool spatial = ctx->g->opset >= 9 || dm_attr_int(n, "spatial", 1) != 0;
    for (int i = 1; i < 5; i++) {
        /* scale and B may be omitted: a BatchNorm without them (PyTorch's
         * affine=False, Keras' scale=False or center=False) */
        if (i < 3 && !opt_in(ctx, n, i))
            continue;
        DM_TRY(req_in(ctx, n, i, names[i], 0, DM_MAX_DIMS, &t[i]));
        DM_TRY(expect_shape(ctx, n, t[i], names[i], spatial ? 1 : x->rank - 1, x->dims + 1));
    }
    if (ctx->g->opset >= 14 && !dm_attr_int(n, "training_mode", 0) &&
        (dm_has_out(n, 1) || dm_has_out(n, 2)))
        return dm_shape_error(
            ctx, n, DNNMEM_E_MODEL,
            "running_mean and running_var are produced only with training_mode=1");
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, x->dims));
    for (int k = 1; k < n->n_out && k < 5; k++)
        DM_TRY(dm_set_out(ctx, n, k, t[3]->dtype, t[3]->rank, t[3]->dims));
    return DNNMEM_OK;
}

/* LayerNormalization: Y like X; Scale and B broadcast to X[axis:]; Mean and InvStdDev are X's
 * dims with the normalized axes (axis and after) set to 1, of stash_type (default float). */
enum dnnmem_status dm_shape_layernorm(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *p;
    int axis;
    DM_TRY(req_in(ctx, n, 0, "X", 1, DM_MAX_DIMS, &x));
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", -1), x->rank, &axis));
    for (int i = 1; i < 3; i++) {
        if (!(p = opt_in(ctx, n, i))) {
            if (i == 1)
                return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input 1 (Scale) is required");
            continue;
        }
        bool ok = p->rank <= x->rank - axis;
        for (int k = 1; ok && k <= p->rank; k++)
            ok = p->dims[p->rank - k] == 1 || p->dims[p->rank - k] == x->dims[x->rank - k];
        char a[128], b[128];
        if (!ok)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "%s has shape [%s]; it must broadcast to [%s]",
                                  i == 1 ? "Scale" : "B", dims_str(a, p->rank, p->dims, ','),
                                  dims_str(b, x->rank - axis, x->dims + axis, ','));
    }
    int64_t st = dm_attr_int(n, "stash_type", DM_FLOAT), dims[DM_MAX_DIMS];
    if (!dm_dtype_valid((int32_t)st) || st != (int32_t)st)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "stash_type %lld is not a data type",
                              (long long)st);
    for (int k = 0; k < x->rank; k++)
        dims[k] = k < axis ? x->dims[k] : 1;
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, x->dims));
    DM_TRY(dm_set_out(ctx, n, 1, (enum dm_dtype)st, x->rank, dims));
    return dm_set_out(ctx, n, 2, (enum dm_dtype)st, x->rank, dims);
}

/* ---- recurrent --------------------------------------------------------- */

/* LSTM/GRU/RNN with G = 4/3/1 gates: X [seq, batch, input], W [dirs, G*hidden, input],
 * R [dirs, G*hidden, hidden], B [dirs, 2*G*hidden] (or [dirs, G*hidden]: one bias); Y [seq, dirs, batch, hidden] and
 * Y_h/Y_c [dirs, batch, hidden]; layout 1 puts batch first in X, Y and Y_h/Y_c. */
enum dnnmem_status dm_shape_rnn(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *w, *r, *b;
    DM_TRY(req_in(ctx, n, 0, "X", 3, 3, &x));
    DM_TRY(req_in(ctx, n, 1, "W", 3, 3, &w));
    DM_TRY(req_in(ctx, n, 2, "R", 3, 3, &r));
    int64_t gates = n->op == DM_OP_LSTM ? 4 : n->op == DM_OP_GRU ? 3 : 1, dirs = 1;
    const char *dir = dm_attr_str(n, "direction", "forward");
    if (!strcmp(dir, "bidirectional"))
        dirs = 2;
    else if (strcmp(dir, "forward") && strcmp(dir, "reverse"))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              "direction '%s' is not forward, reverse or bidirectional", dir);
    int64_t layout = dm_attr_int(n, "layout", 0),
            hidden = dm_attr_int(n, "hidden_size", r->dims[2]);
    if (layout != 0 && layout != 1)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "layout %lld is not 0 or 1",
                              (long long)layout);
    int64_t seq = x->dims[layout], batch = x->dims[1 - layout], gh, gh2;
    if (hidden < 1 || !dm_mul_ok(gates, hidden, &gh) || !dm_mul_ok(gh, 2, &gh2))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "hidden_size %lld is invalid",
                              (long long)hidden);
    int64_t ws[3] = {dirs, gh, x->dims[2]}, rs[3] = {dirs, gh, hidden}, bs[2] = {dirs, gh2};
    DM_TRY(expect_shape(ctx, n, w, "W", 3, ws));
    DM_TRY(expect_shape(ctx, n, r, "R", 3, rs));
    if ((b = opt_in(ctx, n, 3))) {
        /* one bias vector per gate ([dirs, G*hidden], as Keras keeps it) is
         * accepted too, so a front end can state a model's exact parameters */
        if (!(b->rank == 2 && b->dims[0] == dirs && b->dims[1] == gh))
            DM_TRY(expect_shape(ctx, n, b, "B", 2, bs));
    }
    int64_t y0[4] = {seq, dirs, batch, hidden}, y1[4] = {batch, seq, dirs, hidden};
    int64_t h0[3] = {dirs, batch, hidden}, h1[3] = {batch, dirs, hidden};
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, 4, layout ? y1 : y0));
    DM_TRY(dm_set_out(ctx, n, 1, x->dtype, 3, layout ? h1 : h0));
    return n->op == DM_OP_LSTM ? dm_set_out(ctx, n, 2, x->dtype, 3, layout ? h1 : h0) : DNNMEM_OK;
}

/* ---- resampling -------------------------------------------------------- */

/* Resize/Upsample: each resized axis becomes floor(in * scale), computed in float as ONNX's own
 * inference and onnxruntime do, or sizes (opset 18: over `axes`, with keep_aspect_ratio_policy
 * not_larger/not_smaller scaling all of them by one min/max ratio, rounded half up). Scales are
 * input 1 for Resize-10 and Upsample-9, the `scales` attribute for Upsample-7; Resize-11+ takes
 * X, roi, scales, sizes, an empty scales or sizes counting as omitted. */
enum dnnmem_status dm_shape_resize(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, "X", 1, DM_MAX_DIMS, &x));
    int rank = x->rank, na = rank, axes[DM_MAX_DIMS];
    int64_t cnt, nsc = 0, nsz = 0, dims[DM_MAX_DIMS];
    const int64_t *ax = dm_attr_ints(n, "axes", &cnt), *sz = NULL;
    if (cnt > rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "axes has %lld values for rank %d",
                              (long long)cnt, rank);
    na = cnt > 0 ? (int)cnt : rank;
    for (int k = 0; k < na; k++) {
        if (cnt > 0)
            DM_TRY(dm_axis(ctx, n, ax[k], rank, &axes[k]));
        else
            axes[k] = k;
        for (int j = 0; j < k; j++)
            if (axes[j] == axes[k])
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "axis %d is listed twice", axes[k]);
    }
    bool old = n->op == DM_OP_Upsample || ctx->g->opset < 11;
    const double *sc = NULL;
    const struct dm_tinfo *ts = opt_in(ctx, n, old ? 1 : 2), *tz = old ? NULL : opt_in(ctx, n, 3);
    const struct dm_attr *sa = dm_node_attr(n, "scales");
    if (ts && ts->numel > 0)
        DM_TRY(dm_in_floats(ctx, n, old ? 1 : 2, &sc, &nsc));
    else if (!ts && n->op == DM_OP_Upsample && sa && sa->kind == DM_ATTR_FLOATS)
        sc = sa->floats, nsc = sa->n;
    if (tz && tz->numel > 0)
        DM_TRY(dm_in_ints(ctx, n, 3, &sz, &nsz));
    if ((nsc > 0) == (nsz > 0))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              nsc > 0 ? "scales and sizes are both given"
                                      : "scales or sizes is required");
    if ((nsc > 0 ? nsc : nsz) != na)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "%s has %lld values for %d axes",
                              nsc > 0 ? "scales" : "sizes", (long long)(nsc > 0 ? nsc : nsz), na);
    memcpy(dims, x->dims, (size_t)rank * sizeof *dims);
    const char *pol = dm_attr_str(n, "keep_aspect_ratio_policy", "stretch");
    bool not_larger = !strcmp(pol, "not_larger"), keep = nsz > 0 && strcmp(pol, "stretch");
    if (keep && !not_larger && strcmp(pol, "not_smaller"))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "keep_aspect_ratio_policy '%s' is unknown",
                              pol);
    double ratio = not_larger ? INFINITY : 0;
    for (int k = 0; k < na; k++) {
        double in = (double)x->dims[axes[k]];
        if (nsc > 0 && !(sc[k] > 0 && isfinite(sc[k])))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "scales[%d] is %g; it must be positive and finite", k, sc[k]);
        if (nsz > 0 && sz[k] < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "sizes[%d] is %lld; it must not be negative", k,
                                  (long long)sz[k]);
        if (keep && in == 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "axis %d is empty; its aspect ratio is undefined", axes[k]);
        if (keep)
            ratio = not_larger ? fmin(ratio, (double)sz[k] / in) : fmax(ratio, (double)sz[k] / in);
    }
    for (int k = 0; k < na; k++) {
        double in = (double)x->dims[axes[k]];
        double v = nsc > 0 ? floorf((float)in * (float)sc[k])
                   : keep  ? floor(ratio * in + 0.5)
                           : (double)sz[k];
        if (!(v < 9e18))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "the size of axis %d overflows", axes[k]);
        dims[axes[k]] = (int64_t)v;
    }
    return dm_set_out(ctx, n, 0, x->dtype, rank, dims);
}

/* GridSample: X [N, C, D1...], grid [N, H1..., r-2] -> Y [N, C, H1...]. */
enum dnnmem_status dm_shape_grid_sample(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *g;
    DM_TRY(req_in(ctx, n, 0, "X", 3, DM_MAX_DIMS, &x));
    DM_TRY(req_in(ctx, n, 1, "grid", x->rank, x->rank, &g));
    int r = x->rank;
    if (g->dims[0] != x->dims[0] || g->dims[r - 1] != r - 2)
        return dm_shape_error(
            ctx, n, DNNMEM_E_SHAPE,
            "grid must be [%lld, ..., %d] for X of rank %d, but is [%lld, ..., %lld]",
            (long long)x->dims[0], r - 2, r, (long long)g->dims[0], (long long)g->dims[r - 1]);
    int64_t dims[DM_MAX_DIMS] = {x->dims[0], x->dims[1]};
    memcpy(dims + 2, g->dims + 1, (size_t)(r - 2) * sizeof *dims);
    return dm_set_out(ctx, n, 0, x->dtype, r, dims);
}

/* ---- NonMaxSuppression ------------------------------------------------- */

struct nms_cand {
    double score;
    int64_t box;
};

/* Higher score first, then lower box index (onnxruntime's order). */
static int nms_cmp(const void *pa, const void *pb)
{
    const struct nms_cand *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return (a->box > b->box) - (a->box < b->box);
}

/* Box edges {ymin, xmin, ymax, xmax} from [y1, x1, y2, x2] (any diagonal) or [xc, yc, w, h]. */
static void nms_edges(const double *b, bool center, double e[4])
{
    if (center) {
        e[0] = b[1] - b[3] / 2, e[2] = b[1] + b[3] / 2, e[1] = b[0] - b[2] / 2,
        e[3] = b[0] + b[2] / 2;
    } else {
        e[0] = fmin(b[0], b[2]), e[2] = fmax(b[0], b[2]), e[1] = fmin(b[1], b[3]),
        e[3] = fmax(b[1], b[3]);
    }
}

/* ONNX NMS: box b suppresses a when their IoU exceeds the threshold. */
static bool nms_suppressed(const double *a, const double *b, bool center, double iou)
{
    double ea[4], eb[4];
    nms_edges(a, center, ea);
    nms_edges(b, center, eb);
    double ih = fmin(ea[2], eb[2]) - fmax(ea[0], eb[0]),
           iw = fmin(ea[3], eb[3]) - fmax(ea[1], eb[1]);
    if (!(ih > 0 && iw > 0))
        return false;
    double inter = ih * iw, aa = (ea[2] - ea[0]) * (ea[3] - ea[1]),
           ab = (eb[2] - eb[0]) * (eb[3] - eb[1]), uni = aa + ab - inter;
    return aa > 0 && ab > 0 && uni > 0 && inter / uni > iou;
}

/* NonMaxSuppression: selected_indices [num_selected, 3] int64 ([batch, class, box] rows). The
 * count depends on the values of boxes and scores, so it runs the selection itself: per batch and
 * class, boxes scoring above score_threshold in descending score order, each kept unless a kept
 * box overlaps it with IoU > iou_threshold, at most max_output_boxes_per_class. */
enum dnnmem_status dm_shape_nms(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *bt, *st;
    DM_TRY(req_in(ctx, n, 0, "boxes", 3, 3, &bt));
    DM_TRY(req_in(ctx, n, 1, "scores", 3, 3, &st));
    int64_t nb = bt->dims[0], ns = bt->dims[1], nc = st->dims[1], bs[3] = {nb, ns, 4};
    int64_t ss[3] = {nb, nc, ns};
    DM_TRY(expect_shape(ctx, n, bt, "boxes", 3, bs));
    DM_TRY(expect_shape(ctx, n, st, "scores", 3, ss));
    for (int i = 0; i < 5; i++)
        if ((i < 2 || opt_in(ctx, n, i)) && !ctx->t[n->in[i]].value)
            return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED,
                                  "the number of boxes kept depends on the input values");
    const double *boxes, *scores, *thr;
    int64_t cb, cs, cnt, maxo = 0;
    double iou = 0, score_thr = 0;
    bool has_thr = opt_in(ctx, n, 4) != NULL;
    DM_TRY(dm_in_floats(ctx, n, 0, &boxes, &cb));
    DM_TRY(dm_in_floats(ctx, n, 1, &scores, &cs));
    if (cb != bt->numel || cs != st->numel)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "the values of boxes or scores do not match their shapes");
    if (opt_in(ctx, n, 2))
        DM_TRY(scalar_in(ctx, n, 2, "max_output_boxes_per_class", &maxo));
    for (int i = 3; i < 5; i++) {
        if (!opt_in(ctx, n, i))
            continue;
        DM_TRY(dm_in_floats(ctx, n, i, &thr, &cnt));
        if (cnt != 1)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "input %d must be a scalar", i);
        *(i == 3 ? &iou : &score_thr) = thr[0];
    }
    int64_t center = dm_attr_int(n, "center_point_box", 0);
    if (center != 0 && center != 1)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "center_point_box %lld is not 0 or 1",
                              (long long)center);
    if (!(iou >= 0 && iou <= 1))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "iou_threshold %g is not in [0, 1]", iou);
    struct nms_cand *cand = dm_arena_array(ctx->arena, (size_t)ns + 1, sizeof *cand);
    int64_t *sel = dm_arena_array(ctx->arena, (size_t)(nb * nc * ns) * 3 + 1, sizeof *sel);
    if (!cand || !sel)
        return dm_fail(ctx->err, DNNMEM_E_NOMEM, "out of memory");
    int64_t total = 0;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t c = 0; c < nc; c++) {
            int64_t m = 0, first = total;
            for (int64_t s = 0; s < ns; s++) {
                double v = scores[(b * nc + c) * ns + s];
                if (!has_thr || v > score_thr)
                    cand[m++] = (struct nms_cand){isnan(v) ? -INFINITY : v, s};
            }
            qsort(cand, (size_t)m, sizeof *cand, nms_cmp);
            for (int64_t i = 0; i < m && total - first < maxo; i++) {
                const double *box = boxes + (b * ns + cand[i].box) * 4;
                bool keep = true;
                for (int64_t j = first; keep && j < total; j++)
                    keep = !nms_suppressed(box, boxes + (b * ns + sel[3 * j + 2]) * 4, center, iou);
                if (keep) {
                    sel[3 * total] = b, sel[3 * total + 1] = c, sel[3 * total + 2] = cand[i].box;
                    total++;
                }
            }
        }
    int64_t dims[2] = {total, 3};
    DM_TRY(dm_set_out(ctx, n, 0, DM_INT64, 2, dims));
    struct dm_value *v = dm_value_new(ctx, 3 * total, false);
    if (v)
        memcpy(v->i, sel, (size_t)(3 * total) * sizeof *sel);
    return dm_set_out_value(ctx, n, 0, v);
}

/* ---- losses ------------------------------------------------------------ */

/* NegativeLogLikelihoodLoss/SoftmaxCrossEntropyLoss: input [N, C, d...], target [N, d...],
 * weight [C]; the loss has target's shape with reduction none, else is a scalar; SCE's optional
 * log_prob is like the input. */
static enum dnnmem_status loss_out(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *t, *w;
    DM_TRY(req_in(ctx, n, 0, "input", 2, DM_MAX_DIMS, &x));
    DM_TRY(req_in(ctx, n, 1, "target", 0, DM_MAX_DIMS, &t));
    int64_t td[DM_MAX_DIMS] = {x->dims[0]};
    memcpy(td + 1, x->dims + 2, (size_t)(x->rank - 2) * sizeof *td);
    DM_TRY(expect_shape(ctx, n, t, "target", x->rank - 1, td));
    if ((w = opt_in(ctx, n, 2)))
        DM_TRY(expect_shape(ctx, n, w, "weight", 1, x->dims + 1));
    const char *red = dm_attr_str(n, "reduction", "mean");
    bool none = !strcmp(red, "none");
    if (!none && strcmp(red, "sum") && strcmp(red, "mean"))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "reduction '%s' is not none, sum or mean",
                              red);
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, none ? t->rank : 0, td));
    return n->op == DM_OP_SoftmaxCrossEntropyLoss
               ? dm_set_out(ctx, n, 1, x->dtype, x->rank, x->dims)
               : DNNMEM_OK;
}

enum dnnmem_status dm_shape_nll_loss(struct dm_infer *ctx, const struct dm_node *n)
{
    return loss_out(ctx, n);
}

enum dnnmem_status dm_shape_sce_loss(struct dm_infer *ctx, const struct dm_node *n)
{
    return loss_out(ctx, n);
}

/* ---- spectral ---------------------------------------------------------- */

/* DFT: like X [batch, signal..., 1 or 2] with the last dim 2 (complex); the signal axis becomes
 * dft_length (input 1, default its size), or dft_length/2 + 1 when onesided. The axis is the
 * `axis` attribute (default 1) before opset 20, input 2 (default -2) from opset 20; negative axes
 * count from the back and the last dim is not an axis. */
enum dnnmem_status dm_shape_dft(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, "input", 3, DM_MAX_DIMS, &x));
    int r = x->rank;
    int64_t axis = ctx->g->opset >= 20 ? -2 : dm_attr_int(n, "axis", 1), len, dims[DM_MAX_DIMS];
    if (ctx->g->opset >= 20 && opt_in(ctx, n, 2))
        DM_TRY(scalar_in(ctx, n, 2, "axis", &axis));
    if (axis < -r || axis > r - 2 || axis == -1)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "axis %lld is out of range for rank %d",
                              (long long)axis, r);
    axis += axis < 0 ? r : 0;
    if (x->dims[r - 1] != 1 && x->dims[r - 1] != 2)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "the last dim is %lld; 1 (real) or 2 (complex) expected",
                              (long long)x->dims[r - 1]);
    len = x->dims[axis];
    if (opt_in(ctx, n, 1)) {
        DM_TRY(scalar_in(ctx, n, 1, "dft_length", &len));
        if (len < 1)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "dft_length %lld must be positive",
                                  (long long)len);
    }
    memcpy(dims, x->dims, (size_t)r * sizeof *dims);
    dims[axis] = dm_attr_int(n, "onesided", 0) ? len / 2 + 1 : len;
    dims[r - 1] = 2;
    return dm_set_out(ctx, n, 0, x->dtype, r, dims);
}

/* STFT: signal [batch, length, 1 or 2], frame_step (input 1), window [frame_length] (input 2)
 * and/or frame_length (input 3) -> [batch, (length - frame_length)/frame_step + 1, bins, 2] with
 * bins frame_length/2 + 1 when onesided (the default), else frame_length. */
enum dnnmem_status dm_shape_stft(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *win = opt_in(ctx, n, 2);
    DM_TRY(req_in(ctx, n, 0, "signal", 3, 3, &x));
    int64_t step, fl = -1;
    if (!opt_in(ctx, n, 1))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input 1 (frame_step) is required");
    DM_TRY(scalar_in(ctx, n, 1, "frame_step", &step));
    if (opt_in(ctx, n, 3))
        DM_TRY(scalar_in(ctx, n, 3, "frame_length", &fl));
    if (win && (win->rank != 1 || (fl >= 0 && win->dims[0] != fl)))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "window must be [frame_length%s]",
                              fl >= 0 ? ", as given by input 3" : "");
    if (win)
        fl = win->dims[0];
    if (fl < 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "window or frame_length is required");
    if (x->dims[2] != 1 && x->dims[2] != 2)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "the last dim is %lld; 1 (real) or 2 (complex) expected",
                              (long long)x->dims[2]);
    if (step < 1 || fl < 1 || fl > x->dims[1])
        return dm_shape_error(
            ctx, n, DNNMEM_E_SHAPE,
            "frame_step %lld and frame_length %lld do not fit a signal of length %lld",
            (long long)step, (long long)fl, (long long)x->dims[1]);
    int64_t dims[4] = {x->dims[0], (x->dims[1] - fl) / step + 1,
                       dm_attr_int(n, "onesided", 1) ? fl / 2 + 1 : fl, 2};
    return dm_set_out(ctx, n, 0, x->dtype, 4, dims);
}

/* Attention (opset 23), 4-D form: Q [B,Hq,S,D], K [B,Hkv,L,D], V [B,Hkv,L,Dv]
 * with Hq a multiple of Hkv -> Y [B,Hq,S,Dv] in Q's type. The 3-D form (heads
 * packed in the last dim), masks' shapes, the past/present cache outputs and
 * the scores output are not modelled. */
enum dnnmem_status dm_shape_attention(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *q, *k, *v;
    DM_TRY(req_in(ctx, n, 0, "Q", 4, 4, &q));
    DM_TRY(req_in(ctx, n, 1, "K", 4, 4, &k));
    DM_TRY(req_in(ctx, n, 2, "V", 4, 4, &v));
    if (n->n_out > 1)
        return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED,
                              "only output Y is modelled (no present_key/value, qk_matmul_output)");
    if (k->dims[0] != q->dims[0] || v->dims[0] != q->dims[0] || k->dims[1] != v->dims[1] ||
        k->dims[2] != v->dims[2] || k->dims[3] != q->dims[3] || k->dims[1] <= 0 ||
        q->dims[1] % k->dims[1])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "Q [%lld,%lld,%lld,%lld], K [%lld,%lld,%lld,%lld] and V "
                              "[%lld,%lld,%lld,%lld] do not make an attention",
                              (long long)q->dims[0], (long long)q->dims[1], (long long)q->dims[2],
                              (long long)q->dims[3], (long long)k->dims[0], (long long)k->dims[1],
                              (long long)k->dims[2], (long long)k->dims[3], (long long)v->dims[0],
                              (long long)v->dims[1], (long long)v->dims[2], (long long)v->dims[3]);
    int64_t y[4] = {q->dims[0], q->dims[1], q->dims[2], v->dims[3]};
    return dm_set_out(ctx, n, 0, q->dtype, 4, y);
}
