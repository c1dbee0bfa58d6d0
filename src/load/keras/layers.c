/* layers.c: Keras layers: Dense, normalization, dropout, activations, merging and
 * reshaping (keras.h). */

#include "keras.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dm_kr_dense_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, 2, DM_MAX_DIMS))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank;
    int64_t units = dm_kr_get_int(k, cfg, "units", INT64_MIN, 1);
    bool bias = dm_kr_get_bool(k, cfg, "use_bias", true);
    int64_t in = dm_kr_known(k, x, r - 1, "last dim");
    if (k->st != DNNMEM_OK)
        return;
    int32_t xi = dm_kr_keras_order(k, x);
    int32_t w = dm_kr_weight(k, "kernel", 2, (int64_t[]){in, units});
    int32_t b = bias ? dm_kr_weight(k, "bias", 1, &units) : -1;
    struct kt *y = &io->out[0];
    *y = *x;
    dm_kr_perm_identity(r, y->perm);
    y->dim[r - 1] = units;
    if (r == 2) { /* F.linear on 2-D: one addmm */
        y->id = dm_kr_op(k, DM_OP_Gemm, b >= 0 ? 3 : 2, xi, w, b);
    } else { /* matmul, then the bias added in place */
        y->id = dm_kr_op(k, DM_OP_MatMul, 2, xi, w);
        if (b >= 0) {
            /* Keras 2 runs Dense's bias as tf.nn.bias_add (keras/layers/core/
             * dense.py), whose gradient reads nothing (src/train/tf_tape.def);
             * so does Keras 3 on TF: its ops.add of a bias-shaped operand is
             * tf.nn.bias_add (keras/src/backend/tensorflow/numpy.py add) */
            y->id = dm_kr_op(k, DM_OP_Add, 2, b, y->id);
            dm_kr_attr_i(k, "tf_bias_add", 1);
        }
    }
    io->n_out = 1;
    dm_kr_activation(k, dm_kr_activation_name(k, cfg, "activation", "linear"), y);
}

void dm_kr_batchnorm_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, 2, DM_MAX_DIMS))
        return;
    json_t *cfg = io->cfg;
    int a = dm_kr_keras_axis(k, dm_kr_axis_field(k, cfg, -1), x->rank, false);
    bool center = dm_kr_get_bool(k, cfg, "center", true);
    bool scale = dm_kr_get_bool(k, cfg, "scale", true);
    int64_t ch = dm_kr_known(k, x, a, "channel count");
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    dm_kr_perm_channels_first(x->rank, a, cf);
    int32_t xi = dm_kr_arrange(k, x, cf);
    int32_t gamma = scale ? dm_kr_weight(k, "gamma", 1, &ch) : -1;
    int32_t beta = center ? dm_kr_weight(k, "beta", 1, &ch) : -1;
    int32_t mean = dm_kr_weight(k, "moving_mean", 1, &ch);
    int32_t var = dm_kr_weight(k, "moving_variance", 1, &ch);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    y->id = dm_kr_op(k, DM_OP_BatchNormalization, 5, xi, gamma, beta, mean, var);
    dm_kr_attr_f(k, "epsilon", dm_kr_get_num(k, cfg, "epsilon", 1e-3, 0, 1e3));
    /* Keras 2 runs this layer as TensorFlow's FusedBatchNormV3 on
     * channels-last data (keras/layers/normalization/batch_normalization.py:
     * fused when the rank is 4 or 5, the axis 1 or the last, and no renorm,
     * virtual_batch_size, adjustment or synchronized; data_format NHWC /
     * NDHWC for the last axis), in training mode unless the layer is frozen
     * (trainable False runs it in inference mode). --framework tensorflow
     * adds the kernel's layout transposes (src/train/train.c); Keras 3 does
     * not fuse (ops.moments + ops.batch_normalization). */
    const char *dt = dm_kr_policy_name(cfg);
    bool fused = !k->keras3 && (x->rank == 4 || x->rank == 5) && a == x->rank - 1 &&
                 !k->frozen && dm_kr_get_bool(k, cfg, "fused", true) &&
                 !dm_kr_get_bool(k, cfg, "renorm", false) &&
                 !dm_kr_field(cfg, "virtual_batch_size") &&
                 !dm_kr_get_bool(k, cfg, "synchronized", false) &&
                 strcmp(k->cls ? k->cls : "", "SyncBatchNormalization") != 0 &&
                 !(dt && !strcmp(dt, "float64"));
    if (fused)
        dm_kr_attr_i(k, "tf_fused_nhwc", 1);
    io->n_out = 1;
}

void dm_kr_layernorm_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, 2, DM_MAX_DIMS))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank, first = r - 1;
    json_t *v = dm_kr_field(cfg, "axis");
    if (json_is_array(v) && json_array_size(v) > 1) { /* trailing axes, in order */
        size_t n = json_array_size(v);
        first = r - (int)n;
        for (size_t i = 0; i < n && k->st == DNNMEM_OK; i++) {
            int64_t ai;
            if (!dm_kr_json_int(json_array_get(v, i), &ai) ||
                dm_kr_keras_axis(k, ai, r, false) != first + (int)i)
                dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "axis must be the trailing axes in order");
        }
    } else
        first = dm_kr_keras_axis(k, dm_kr_axis_field(k, cfg, -1), r, false);
    if (first != r - 1 && !(json_is_array(v) && json_array_size(v) > 1))
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "normalizing axis %d, not the last, is not supported",
                   first);
    bool center = dm_kr_get_bool(k, cfg, "center", true);
    bool scale = dm_kr_get_bool(k, cfg, "scale", true);
    if (!scale && k->st == DNNMEM_OK)
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "scale false is not supported");
    int64_t wd[DM_MAX_DIMS];
    for (int i = first; i < r; i++)
        wd[i - first] = dm_kr_known(k, x, i, "normalized dim");
    if (k->st != DNNMEM_OK)
        return;
    int32_t xi = dm_kr_keras_order(k, x);
    int32_t gamma = dm_kr_weight(k, "gamma", r - first, wd);
    int32_t beta = center ? dm_kr_weight(k, "beta", r - first, wd) : -1;
    struct kt *y = &io->out[0];
    *y = *x;
    dm_kr_perm_identity(r, y->perm);
    y->id = dm_kr_op(k, DM_OP_LayerNormalization, beta >= 0 ? 3 : 2, xi, gamma, beta);
    dm_kr_attr_i(k, "axis", first);
    double eps = dm_kr_get_num(k, cfg, "epsilon", 1e-3, 0, 1e3);
    dm_kr_attr_f(k, "epsilon", eps);
    /* Keras 2's fused path (keras/layers/normalization/layer_normalization.py,
     * _fused_can_be_used): trailing axes, epsilon >= 1.001e-5 (fused batch
     * norm raises a smaller one) and float32 variables (a float32 or mixed_*
     * policy). It runs tf.compat.v1.nn.fused_batch_norm on the input reshaped
     * to [1, rows, D, 1] NCHW with scale ones([rows]), then `* gamma` and
     * `+ beta` as separate ops; --framework tensorflow models what that keeps
     * (src/train/train.c). Keras 3 has no such path. */
    const char *dt = dm_kr_policy_name(cfg);
    bool f32 = !dt || !strcmp(dt, "float32") || !strncmp(dt, "mixed_", 6);
    if (!k->keras3 && eps >= 1.001e-5 && f32)
        dm_kr_attr_i(k, "tf_fused_ln", 1);
    io->n_out = 1;
}

void dm_kr_dropout_layer(struct keras *k, struct layer_io *io, const char *key, double dflt)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x)
        return;
    /* rate in [0, 1]; GaussianNoise's stddev: any size (its ratio is moot) */
    double rate = dm_kr_get_num(k, io->cfg, key, dflt, 0, strcmp(key, "rate") ? 1e30 : 1);
    if (rate <= 0 || k->st != DNNMEM_OK) { /* no node: the identity */
        dm_kr_same_out(io, x, x->id);
        return;
    }
    int32_t ratio = dm_kr_const_f(k, rate < 1 ? rate : 0.5);
    dm_kr_same_out(io, x, dm_kr_op(k, DM_OP_Dropout, 2, x->id, ratio));
}

void dm_kr_relu_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x)
        return;
    json_t *cfg = io->cfg;
    double maxv = dm_kr_get_num(k, cfg, "max_value", INFINITY, 0, INFINITY);
    double slope = dm_kr_get_num(k, cfg, "negative_slope", 0, 0, 1e9);
    double thr = dm_kr_get_num(k, cfg, "threshold", 0, -1e30, 1e30);
    if (k->st != DNNMEM_OK)
        return;
    if (thr != 0 || (slope > 0 && isfinite(maxv))) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "a threshold, or a negative_slope with a max_value, is "
                   "not supported");
        return;
    }
    int32_t y;
    if (slope > 0) {
        y = dm_kr_op(k, DM_OP_LeakyRelu, 1, x->id);
        dm_kr_attr_f(k, "alpha", slope);
    } else if (isfinite(maxv)) { /* ReLU(6.) is relu6 */
        int32_t lo = dm_kr_const_f(k, 0.0), hi = dm_kr_const_f(k, maxv);
        y = dm_kr_op(k, DM_OP_Clip, 3, x->id, lo, hi);
    } else
        y = dm_kr_op(k, DM_OP_Relu, 1, x->id);
    dm_kr_same_out(io, x, y);
}

void dm_kr_merge_layer(struct keras *k, struct layer_io *io, enum dm_op o, bool pairwise)
{
    if (io->n_in < 2 || io->n_in > MAX_IN) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "%d inputs; a merge layer takes 2 or more", io->n_in);
        return;
    }
    const struct kt *x = &io->in[0];
    int32_t ids[MAX_IN];
    for (int i = 0; i < io->n_in; i++) {
        const struct kt *xi = &io->in[i];
        if (xi->rank != x->rank) {
            dm_kr_fail(k, DNNMEM_E_SHAPE, "input %d has rank %d, input 0 rank %d", i, xi->rank,
                       x->rank);
            return;
        }
        ids[i] = dm_kr_arrange(k, xi, x->perm);
    }
    struct kt *y = &io->out[0];
    *y = *x;
    for (int a = 1; a < x->rank; a++) /* broadcasting: a 1 takes the other size */
        for (int i = 1; i < io->n_in; i++)
            if (y->dim[a] == 1 || y->dim[a] < 0)
                y->dim[a] = io->in[i].dim[a] >= 0 || y->dim[a] < 0 ? io->in[i].dim[a] : y->dim[a];
    if (o == DM_OP_Sub && io->n_in != 2) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "Subtract takes exactly 2 inputs");
        return;
    }
    if (pairwise) {
        y->id = ids[0];
        for (int i = 1; i < io->n_in; i++)
            y->id = dm_kr_op(k, o, 2, y->id, ids[i]);
    } else {
        struct dm_node *n = dm_kr_node(k, o, io->n_in, ids, 1);
        y->id = n ? n->out[0] : -1;
    }
    io->n_out = 1;
}

void dm_kr_concat_layer(struct keras *k, struct layer_io *io)
{
    if (io->n_in < 1 || io->n_in > MAX_IN) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "%d inputs; Concatenate takes 1 to %d", io->n_in, MAX_IN);
        return;
    }
    const struct kt *x = &io->in[0];
    int a = dm_kr_keras_axis(k, dm_kr_axis_field(k, io->cfg, -1), x->rank, false);
    int32_t ids[MAX_IN];
    struct kt *y = &io->out[0];
    *y = *x;
    y->dim[a] = 0;
    for (int i = 0; i < io->n_in && k->st == DNNMEM_OK; i++) {
        const struct kt *xi = &io->in[i];
        if (xi->rank != x->rank) {
            dm_kr_fail(k, DNNMEM_E_SHAPE, "input %d has rank %d, input 0 rank %d", i, xi->rank,
                       x->rank);
            return;
        }
        ids[i] = dm_kr_arrange(k, xi, x->perm);
        if (y->dim[a] < 0 || xi->dim[a] < 0)
            y->dim[a] = -1;
        else if (!dm_add_ok(y->dim[a], xi->dim[a], &y->dim[a])) {
            dm_kr_fail(k, DNNMEM_E_SHAPE, "the concatenated size overflows");
            return;
        }
    }
    if (k->st != DNNMEM_OK)
        return;
    struct dm_node *n = dm_kr_node(k, DM_OP_Concat, io->n_in, ids, 1);
    y->id = n ? n->out[0] : -1;
    dm_kr_attr_i(k, "axis", dm_kr_ir_axis(x, a));
    io->n_out = 1;
}

/* Reshape: [batch] + target_shape (one -1 allowed), a view of any arrangement. */
void dm_kr_reshape_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x)
        return;
    json_t *ts = dm_kr_field(io->cfg, "target_shape");
    if (!json_is_array(ts)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'target_shape' is missing or not a list");
        return;
    }
    size_t n = json_array_size(ts);
    if (n + 1 > DM_MAX_DIMS) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "target_shape has %zu dims; at most %d are supported",
                   n, DM_MAX_DIMS - 1);
        return;
    }
    int64_t shape[DM_MAX_DIMS], total = 1, prod = 1;
    int infer = -1;
    bool in_known = true;
    for (int a = 1; a < x->rank; a++)
        if (x->dim[a] < 0 || !dm_mul_ok(total, x->dim[a], &total))
            in_known = false;
    shape[0] = 0; /* Reshape's 0: the batch dim as it is */
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (!dm_kr_json_int(json_array_get(ts, i), &v) || v < -1 || v > MAX_DIM) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "target_shape[%zu] is not a size", i);
            return;
        }
        if (v == -1) {
            if (infer >= 0) {
                dm_kr_fail(k, DNNMEM_E_MODEL, "target_shape has two -1 dims");
                return;
            }
            infer = (int)i + 1;
        } else if (!dm_mul_ok(prod, v, &prod)) {
            dm_kr_fail(k, DNNMEM_E_SHAPE, "target_shape's size overflows");
            return;
        }
        shape[i + 1] = v;
    }
    struct kt *y = &io->out[0];
    *y = *x;
    y->rank = (int)n + 1;
    dm_kr_perm_identity(y->rank, y->perm);
    for (int a = 1; a < y->rank; a++)
        y->dim[a] = shape[a];
    if (in_known) {
        if (infer >= 0 && prod > 0 && total % prod == 0)
            y->dim[infer] = total / prod;
        else if (infer >= 0 || prod != total) {
            dm_kr_fail(k, DNNMEM_E_SHAPE, "cannot reshape %lld elements per sample to target_shape",
                       (long long)total);
            return;
        }
    } else if (infer >= 0) {
        y->dim[infer] = -1;
    }
    int32_t s = dm_kr_const_ints(k, y->rank, shape);
    y->id = dm_kr_op(k, DM_OP_Reshape, 2, x->id, s);
    io->n_out = 1;
}

void dm_kr_flatten_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x)
        return;
    struct kt *y = &io->out[0];
    *y = *x;
    int64_t total = 1;
    for (int a = 1; a < x->rank; a++)
        if (total >= 0 && (x->dim[a] < 0 || !dm_mul_ok(total, x->dim[a], &total)))
            total = -1;
    y->rank = 2;
    y->dim[1] = total;
    dm_kr_perm_identity(2, y->perm);
    if (x->rank == 2) { /* Flatten of [batch, n] is [batch, n] itself */
        y->id = x->id;
    } else {
        y->id = dm_kr_op(k, DM_OP_Flatten, 1, x->id);
        dm_kr_attr_i(k, "axis", 1);
    }
    io->n_out = 1;
}

void dm_kr_permute_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x)
        return;
    json_t *dims = dm_kr_field(io->cfg, "dims");
    if (!json_is_array(dims) || json_array_size(dims) != (size_t)(x->rank - 1)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'dims' must list the %d non-batch axes",
                   x->rank - 1);
        return;
    }
    int8_t want[DM_MAX_DIMS]; /* output Keras axis i is input Keras axis want[i] */
    unsigned seen = 0;
    want[0] = 0;
    for (int i = 1; i < x->rank; i++) {
        int64_t v;
        if (!dm_kr_json_int(json_array_get(dims, (size_t)i - 1), &v) || v < 1 || v >= x->rank ||
            (seen >> v & 1u)) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'dims' is not a permutation of 1..%d",
                       x->rank - 1);
            return;
        }
        seen |= 1u << v;
        want[i] = (int8_t)v;
    }
    struct kt *y = &io->out[0];
    *y = *x;
    /* one Transpose from x's arrangement to the permuted Keras order */
    int64_t p[DM_MAX_DIMS];
    for (int i = 0; i < x->rank; i++) {
        p[i] = dm_kr_ir_axis(x, want[i]);
        y->dim[i] = x->dim[want[i]];
    }
    dm_kr_perm_identity(x->rank, y->perm);
    y->id = dm_kr_op(k, DM_OP_Transpose, 1, x->id);
    dm_kr_attr_ints(k, "perm", x->rank, p);
    io->n_out = 1;
}

void dm_kr_repeat_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, 2, 2))
        return;
    int64_t n = dm_kr_get_int(k, io->cfg, "n", INT64_MIN, 1);
    if (k->st != DNNMEM_OK)
        return;
    int32_t ax = dm_kr_const_ints(k, INTS(1));
    int32_t u = dm_kr_op(k, DM_OP_Unsqueeze, 2, x->id, ax);
    int32_t rep = dm_kr_const_ints(k, INTS(1, n, 1));
    struct kt *y = &io->out[0];
    *y = *x;
    y->rank = 3;
    y->dim[1] = n;
    y->dim[2] = x->dim[1];
    dm_kr_perm_identity(3, y->perm);
    y->id = dm_kr_op(k, DM_OP_Tile, 2, u, rep);
    io->n_out = 1;
}

void dm_kr_softmax_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x)
        return;
    int a = dm_kr_keras_axis(k, dm_kr_axis_field(k, io->cfg, -1), x->rank, false);
    if (k->st != DNNMEM_OK)
        return;
    dm_kr_same_out(io, x, dm_kr_op(k, DM_OP_Softmax, 1, x->id));
    dm_kr_attr_i(k, "axis", dm_kr_ir_axis(x, a));
}

void dm_kr_rescaling_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x)
        return;
    double scale = dm_kr_get_num(k, io->cfg, "scale", 1, -1e30, 1e30);
    double offset = dm_kr_get_num(k, io->cfg, "offset", 0, -1e30, 1e30);
    int32_t y = dm_kr_op(k, DM_OP_Mul, 2, x->id, dm_kr_const_f(k, scale));
    if (offset != 0)
        y = dm_kr_op(k, DM_OP_Add, 2, y, dm_kr_const_f(k, offset));
    dm_kr_same_out(io, x, y);
}
