/*
 * shape/mxnet.c: shape functions of the ops only MXNet symbols need.
 *
 * MxReshape is MXNet's Reshape with its special values (the operator's
 * documentation, "Reshape", MXNet 1.x): in `shape`,
 *    0  copies the input dim at the same position,
 *   -1  is inferred from the remaining element count (at most one),
 *   -2  copies every remaining input dim,
 *   -3  merges the next two input dims into one,
 *   -4  splits the next input dim into the two values that follow (one of
 *       them may be -1).
 * Plain shapes of positive values, 0 and -1 become an ONNX Reshape; only the
 * others come here. A view, like Reshape.
 *
 * MxRNN is one layer of MXNet's fused RNN op (src/operator/rnn-inl.h): the
 * data is [T, N, C] (layout TNC), the output [T, N, dirs * H], the state
 * outputs [L * dirs, N, H]; every layer reads the op's one flat parameter
 * vector, whose size the loader derives from the first layer's input.
 */
#include "dnnmem-impl.h"

#include <string.h>

enum dnnmem_status dm_shape_mx_reshape(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x = dm_in(ctx, n, 0);
    int64_t cnt;
    const int64_t *s = dm_attr_ints(n, "shape", &cnt);
    if (!x || x->rank < 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input 0 is required");
    if (!s || cnt < 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attribute 'shape' is required");
    int64_t d[DM_MAX_DIMS];
    int r = 0, src = 0, infer = -1;
#define PUT(v)                                                                                     \
    do {                                                                                           \
        if (r >= DM_MAX_DIMS)                                                                      \
            return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "the result has over %d dims",     \
                                  DM_MAX_DIMS);                                                    \
        d[r++] = (v);                                                                              \
    } while (0)
#define NEED(k)                                                                                    \
    do {                                                                                           \
        if (src + (k) > x->rank)                                                                   \
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,                                          \
                                  "shape value %lld at position %lld reads past the input's %d "   \
                                  "dims",                                                          \
                                  (long long)v, (long long)i, x->rank);                            \
    } while (0)
    for (int64_t i = 0; i < cnt; i++) {
        int64_t v = s[i];
        if (v > 0) {
            PUT(v);
            src++;
        } else if (v == 0) {
            NEED(1);
            PUT(x->dims[src]);
            src++;
        } else if (v == -1) {
            if (infer >= 0)
                return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "more than one -1 in 'shape'");
            infer = r;
            PUT(1);
            src++;
        } else if (v == -2) {
            while (src < x->rank)
                PUT(x->dims[src++]);
        } else if (v == -3) {
            NEED(2);
            int64_t m;
            if (!dm_mul_ok(x->dims[src], x->dims[src + 1], &m))
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "a merged dim overflows");
            PUT(m);
            src += 2;
        } else if (v == -4) {
            NEED(1);
            if (i + 2 >= cnt)
                return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "-4 must be followed by two values");
            int64_t a = s[i + 1], b = s[i + 2], whole = x->dims[src];
            if (a == -1 && b > 0 && whole % b == 0)
                a = whole / b;
            else if (b == -1 && a > 0 && whole % a == 0)
                b = whole / a;
            if (a < 1 || b < 1 || a * b != whole)
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "-4 cannot split dim %lld into %lld x %lld",
                                      (long long)whole, (long long)s[i + 1], (long long)s[i + 2]);
            PUT(a);
            PUT(b);
            src++;
            i += 2;
        } else {
            return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "invalid value %lld in 'shape'", (long long)v);
        }
    }
#undef PUT
#undef NEED
    int64_t known = 1;
    for (int k = 0; k < r; k++)
        if (k != infer && !dm_mul_ok(known, d[k], &known))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "the target shape overflows");
    if (infer >= 0) {
        if (known == 0 || x->numel % known)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "cannot infer -1: %lld elements into %lld",
                                  (long long)x->numel, (long long)known);
        d[infer] = x->numel / known;
        known = x->numel;
    }
    if (known != x->numel)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "%lld elements cannot take a shape of %lld",
                              (long long)x->numel, (long long)known);
    return dm_set_out(ctx, n, 0, x->dtype, r, d);
}

enum dnnmem_status dm_shape_mx_rnn(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x = dm_in(ctx, n, 0), *p = dm_in(ctx, n, 1);
    if (!x || x->rank != 3)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "the data must be [T, N, C] (rank 3), not rank %d",
                              x ? x->rank : -1);
    if (!p || p->rank != 1)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "the parameters must be one flat vector");
    int64_t h = dm_attr_int(n, "hidden_size", 0), layers = dm_attr_int(n, "num_layers", 1);
    int64_t dirs = strcmp(dm_attr_str(n, "direction", "forward"), "bidirectional") == 0 ? 2 : 1;
    int64_t y[3] = {x->dims[0], x->dims[1], dirs * h}, s[3] = {layers * dirs, x->dims[1], h};
    if (h < 1 || layers < 1)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "hidden_size and num_layers must be positive");
    for (int k = 2; k < 4; k++) {
        const struct dm_tinfo *st = dm_in(ctx, n, k);
        if (st && (st->rank != 3 || st->dims[0] != s[0] || st->dims[1] != s[1] || st->dims[2] != s[2]))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "begin state %d must be [%lld, %lld, %lld]", k - 2, (long long)s[0],
                                  (long long)s[1], (long long)s[2]);
    }
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, 3, y));
    for (int k = 1; k < n->n_out; k++)
        DM_TRY(dm_set_out(ctx, n, k, x->dtype, 3, s));
    return DNNMEM_OK;
}
