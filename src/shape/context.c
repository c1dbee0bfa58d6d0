/*
 * context.c: what shape functions (elementwise.c, tensor.c, nn.c, contrib.c,
 * mxnet.c) stand on: their inputs' shapes and values, their outputs, axes,
 * broadcasting and the one-line error naming the node. infer.c's walk calls
 * the shape functions through the op table, above all of them.
 */
#include "dnnmem-impl.h"

#include <math.h>
#include <string.h>

enum dnnmem_status dm_shape_error(struct dm_infer *ctx, const struct dm_node *n,
                                  enum dnnmem_status s, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dm_fail(ctx->err, s, "%s: node '%s' (%s): %s", ctx->g->path, n->name,
                   dm_ops[n->op].name, msg);
}

const struct dm_tinfo *dm_in(struct dm_infer *ctx, const struct dm_node *n, int i)
{
    return dm_has_in(n, i) ? &ctx->t[n->in[i]] : NULL;
}

enum dnnmem_status dm_set_out(struct dm_infer *ctx, const struct dm_node *n, int i,
                              enum dm_dtype dtype, int rank, const int64_t *dims)
{
    if (!dm_has_out(n, i))
        return DNNMEM_OK;
    if (rank < 0 || rank > DM_MAX_DIMS)
        return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED,
                              "output %d would have rank %d; at most %d is supported", i, rank,
                              DM_MAX_DIMS);
    if (!dm_dtype_valid((int32_t)dtype))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "output %d has an invalid data type %d", i,
                              (int)dtype);
    struct dm_tinfo *t = &ctx->t[n->out[i]];
    int64_t numel = 1;
    for (int k = 0; k < rank; k++) {
        if (dims[k] < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "output %d gets a negative dim %lld", i,
                                  (long long)dims[k]);
        if (!dm_mul_ok(numel, dims[k], &numel))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "the element count of output %d overflows int64", i);
    }
    uint64_t bytes;
    /* 2^50 B = 1 PiB: no device holds a tensor that size; it is a bad model or binding */
    if (!dm_dtype_bytes(dtype, numel, &bytes) || bytes > DM_MAX_TENSOR_BYTES)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "output %d would take an absurd %lld elements",
                              i, (long long)numel);
    t->dtype = dtype;
    t->rank = rank;
    for (int k = 0; k < rank; k++)
        t->dims[k] = dims[k];
    t->numel = numel;
    t->bytes = bytes;
    t->value = NULL;
    t->absent = false;
    return DNNMEM_OK;
}

struct dm_value *dm_value_new(struct dm_infer *ctx, int64_t n, bool is_float)
{
    if (n < 0 || n > DM_VALUE_MAX_ELEMS)
        return NULL;
    struct dm_value *v = dm_arena_alloc(ctx->arena, sizeof *v);
    if (!v)
        return NULL;
    v->n = n;
    v->is_float = is_float;
    if (is_float)
        v->f = dm_arena_array(ctx->arena, (size_t)n + 1, sizeof *v->f);
    else
        v->i = dm_arena_array(ctx->arena, (size_t)n + 1, sizeof *v->i);
    return (v->f || v->i) ? v : NULL;
}

enum dnnmem_status dm_set_out_value(struct dm_infer *ctx, const struct dm_node *n, int i,
                                    struct dm_value *v)
{
    if (!dm_has_out(n, i) || !v)
        return DNNMEM_OK;
    struct dm_tinfo *t = &ctx->t[n->out[i]];
    if (t->rank < 0 || v->n != t->numel)
        return dm_fail(ctx->err, DNNMEM_E_INTERNAL,
                       "%s: node '%s': value of output %d has %lld elements, shape says %lld",
                       ctx->g->path, n->name, i, (long long)v->n, (long long)t->numel);
    /* integer outputs hold integers; float outputs hold doubles */
    if (v->is_float != dm_dtype_is_float(t->dtype)) {
        struct dm_value *c = dm_value_new(ctx, v->n, !v->is_float);
        if (!c)
            return DNNMEM_OK;
        for (int64_t k = 0; k < v->n; k++) {
            if (c->is_float)
                c->f[k] = (double)v->i[k];
            else {
                double d = v->f[k];
                c->i[k] = isnan(d) ? 0 : d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : (int64_t)d;
            }
        }
        v = c;
    }
    if (t->dtype == DM_BOOL && !v->is_float)
        for (int64_t k = 0; k < v->n; k++)
            v->i[k] = v->i[k] != 0;
    t->value = v;
    return DNNMEM_OK;
}

static enum dnnmem_status need_value(struct dm_infer *ctx, const struct dm_node *n, int i)
{
    const struct dm_tinfo *t = dm_in(ctx, n, i);
    if (!t)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input %d is required", i);
    if (!t->value)
        return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED,
                              "input %d ('%s') sets the output shape, but its value is computed at "
                              "run time; only constant values are supported here",
                              i, ctx->g->tensors[n->in[i]].name);
    return DNNMEM_OK;
}

enum dnnmem_status dm_in_ints(struct dm_infer *ctx, const struct dm_node *n, int i,
                              const int64_t **v, int64_t *count)
{
    DM_TRY(need_value(ctx, n, i));
    struct dm_value *val = ctx->t[n->in[i]].value;
    if (val->is_float) {
        struct dm_value *c = dm_value_new(ctx, val->n, false);
        if (!c)
            return dm_fail(ctx->err, DNNMEM_E_NOMEM, "out of memory");
        for (int64_t k = 0; k < val->n; k++) {
            double d = val->f[k];
            if (!(d == floor(d)) || fabs(d) > 9e18)
                return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                                      "input %d must hold integers, but holds %g", i, d);
            c->i[k] = (int64_t)d;
        }
        val = c;
    }
    *v = val->i;
    *count = val->n;
    return DNNMEM_OK;
}

enum dnnmem_status dm_in_floats(struct dm_infer *ctx, const struct dm_node *n, int i,
                                const double **v, int64_t *count)
{
    DM_TRY(need_value(ctx, n, i));
    struct dm_value *val = ctx->t[n->in[i]].value;
    if (!val->is_float) {
        struct dm_value *c = dm_value_new(ctx, val->n, true);
        if (!c)
            return dm_fail(ctx->err, DNNMEM_E_NOMEM, "out of memory");
        for (int64_t k = 0; k < val->n; k++)
            c->f[k] = (double)val->i[k];
        val = c;
    }
    *v = val->f;
    *count = val->n;
    return DNNMEM_OK;
}

enum dnnmem_status dm_axis(struct dm_infer *ctx, const struct dm_node *n, int64_t axis, int rank,
                           int *out)
{
    if (axis < -(int64_t)rank || axis >= rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "axis %lld is out of range for rank %d",
                              (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return DNNMEM_OK;
}

enum dnnmem_status dm_broadcast(struct dm_infer *ctx, const struct dm_node *n, int ra,
                                const int64_t *a, int rb, const int64_t *b, int *rout,
                                int64_t *out)
{
    int r = ra > rb ? ra : rb;
    for (int k = 0; k < r; k++) {
        int ia = k - (r - ra), ib = k - (r - rb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da == db || db == 1)
            out[k] = da;
        else if (da == 1)
            out[k] = db;
        else
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "shapes do not broadcast: dim %d is %lld in one input and %lld "
                                  "in the other",
                                  k, (long long)da, (long long)db);
    }
    *rout = r;
    return DNNMEM_OK;
}
