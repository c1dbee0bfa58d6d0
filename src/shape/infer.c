/*
 * infer.c: shape inference under one binding of the symbolic dims.
 *
 * Walks the nodes in execution order and calls each op's shape function from
 * the op table. Shape functions set output dtype and dims, and, when every
 * input value is known and the output is small, the output's value: that is
 * how the int64 shape chains exporters emit (Shape -> Gather -> Unsqueeze ->
 * Concat -> Reshape, ConstantOfShape, Range) fold to constants. Errors name
 * the file and node and never guess.
 */
#include "dnnmem-impl.h"

#include <math.h>
#include <string.h>

/* Set the facts a tensor of rank `rank` with dims `given` (or, when NULL,
 * its declared dims) starts with. */
static enum dnnmem_status init_shape(struct dm_infer *ctx, int32_t id, int rank,
                                     const int64_t *given)
{
    const struct dm_tensor *tt = &ctx->g->tensors[id];
    struct dm_tinfo *t = &ctx->t[id];
    const char *path = ctx->g->path;
    if (!dm_dtype_valid((int32_t)tt->dtype))
        return dm_fail(ctx->err, DNNMEM_E_MODEL, "%s: input '%s' declares no element type", path,
                       tt->name);
    if (rank > DM_MAX_DIMS)
        return dm_fail(ctx->err, DNNMEM_E_UNSUPPORTED, "%s: '%s' has rank %d; at most %d is supported",
                       path, tt->name, rank, DM_MAX_DIMS);
    int64_t numel = 1;
    for (int k = 0; k < rank; k++) {
        int64_t d = given ? given[k] : tt->dims[k].value;
        if (!given && tt->dims[k].sym >= 0) {
            d = ctx->sym_values[tt->dims[k].sym];
            const char *sym = ctx->g->symbols[tt->dims[k].sym];
            /* a batch or sequence axis has its own options; any other one
             * (an image's height, a Keras input left open) is the model's
             * input size, which --input-shape gives whole */
            bool bs = strstr(sym, "batch") || strstr(sym, "seq");
            if (d < 0)
                return dm_fail(ctx->err, DNNMEM_E_UNBOUND,
                               "%s: dim '%s' (axis %d of input '%s') is not bound; pass --dim "
                               "%s=N%s%s%s",
                               path, sym, k, tt->name, sym,
                               bs ? " (or --batch-size / --seq-len)"
                                  : " (the model leaves its input size open; or --input-shape ",
                               bs ? "" : tt->name, bs ? "" : "=... for the whole shape)");
        }
        t->dims[k] = d;
        if (!dm_mul_ok(numel, d, &numel))
            return dm_fail(ctx->err, DNNMEM_E_SHAPE, "%s: the element count of '%s' overflows",
                           path, tt->name);
    }
    t->dtype = tt->dtype;
    t->rank = rank;
    t->numel = numel;
    if (!dm_dtype_bytes(t->dtype, numel, &t->bytes) || t->bytes > DM_MAX_TENSOR_BYTES)
        return dm_fail(ctx->err, DNNMEM_E_SHAPE, "%s: '%s' would take an absurd %lld elements",
                       path, tt->name, (long long)numel);
    t->value = tt->value;
    if (ctx->input_values && ctx->input_values[id])
        t->value = ctx->input_values[id];
    t->is_const = tt->role != DM_ROLE_INPUT;
    return DNNMEM_OK;
}

/* Tensor parallelism: this rank's shard of a weight (src/graph/tp.c), dim
 * split[id] divided by the ranks; a dim that does not divide is an error
 * (Megatron's divide() asserts it; DTensor would pad the last shard). */
static enum dnnmem_status split_shape(struct dm_infer *ctx, int32_t id)
{
    struct dm_tinfo *t = &ctx->t[id];
    int k = ctx->split[id];
    int64_t n = ctx->split_ranks;
    if (k >= t->rank || n < 1 || t->dims[k] % n != 0)
        return dm_fail(ctx->err, DNNMEM_E_USAGE,
                       "%s: --tp %lld: dim %d of parameter '%s' (%lld) does not divide by %lld",
                       ctx->g->path, (long long)n, k, ctx->g->tensors[id].name,
                       k < t->rank ? (long long)t->dims[k] : -1LL, (long long)n);
    t->dims[k] /= n;
    t->numel /= n;
    if (!dm_dtype_bytes(t->dtype, t->numel, &t->bytes))
        return dm_fail(ctx->err, DNNMEM_E_SHAPE, "%s: '%s' overflows", ctx->g->path,
                       ctx->g->tensors[id].name);
    t->value = NULL; /* a shard's values are not the file's */
    return DNNMEM_OK;
}

static enum dnnmem_status init_declared(struct dm_infer *ctx, int32_t id)
{
    const struct dm_tensor *tt = &ctx->g->tensors[id];
    const struct dm_shape *given = ctx->input_shapes ? &ctx->input_shapes[id] : NULL;
    if (tt->rank < 0 && given && given->rank >= 0)
        return init_shape(ctx, id, given->rank, given->dims);
    if (tt->rank < 0 && tt->derive)
        return DNNMEM_OK; /* shaped when first needed (derive_shape) */
    if (tt->rank < 0)
        return dm_fail(ctx->err, DNNMEM_E_UNBOUND,
                       "%s: input '%s' declares no shape; give it one with --input-shape %s=D1,D2,...",
                       ctx->g->path, tt->name, tt->name);
    DM_TRY(init_shape(ctx, id, tt->rank, NULL));
    return ctx->split && ctx->split[id] >= 0 ? split_shape(ctx, id) : DNNMEM_OK;
}

/* The shape of a tensor that follows from another's (struct dm_derive). */
static enum dnnmem_status derive_shape(struct dm_infer *ctx, int32_t id)
{
    const struct dm_tensor *tt = &ctx->g->tensors[id];
    const struct dm_derive *dv = tt->derive;
    const struct dm_tinfo *f = &ctx->t[dv->from];
    const char *path = ctx->g->path, *fname = ctx->g->tensors[dv->from].name;
    if (f->rank < 0)
        return dm_fail(ctx->err, DNNMEM_E_INTERNAL, "%s: '%s' is needed before '%s', its shape's source",
                       path, tt->name, fname);
    int axis = dv->axis < 0 ? f->rank + dv->axis : dv->axis;
    bool axis_ok = axis >= 0 && axis < f->rank;
    int64_t d[DM_MAX_DIMS], v = 1;
    int rank = dv->rank;
    switch (dv->rule) {
    case DM_DERIVE_DIM:
    case DM_DERIVE_FLAT:
        if (!axis_ok || dv->at < 0 || dv->at >= rank || rank > DM_MAX_DIMS)
            goto bad_rank;
        memcpy(d, dv->dims, sizeof d);
        if (dv->rule == DM_DERIVE_FLAT) {
            for (int k = axis; k < f->rank; k++)
                if (!dm_mul_ok(v, f->dims[k], &v))
                    goto overflow;
        } else {
            v = f->dims[axis];
            if (dv->div < 1 || v % dv->div)
                return dm_fail(ctx->err, DNNMEM_E_SHAPE,
                               "%s: '%s': dim %d of '%s' is %lld, not a multiple of %lld groups", path,
                               tt->name, axis, fname, (long long)v, (long long)dv->div);
            v /= dv->div;
            if (dv->mul > 0 && !dm_mul_ok(v, dv->mul, &v))
                goto overflow;
        }
        d[dv->at] = v;
        break;
    case DM_DERIVE_BCAST:
        if (f->rank < 2)
            goto bad_rank;
        rank = f->rank - 1;
        for (int k = 0; k < rank; k++)
            d[k] = k ? 1 : f->dims[1];
        break;
    case DM_DERIVE_DROP:
        if (!axis_ok)
            goto bad_rank;
        rank = 0;
        for (int k = 0; k < f->rank; k++)
            if (k != axis)
                d[rank++] = f->dims[k];
        break;
    case DM_DERIVE_SAME:
        rank = f->rank;
        memcpy(d, f->dims, sizeof d);
        break;
    case DM_DERIVE_FIRST:
        if (f->rank < 1)
            goto bad_rank;
        rank = 1;
        d[0] = f->dims[0];
        break;
    case DM_DERIVE_RNN: {
        /* per direction: layer 0 has gates * H * (I + H + 2) weights and
         * biases (i2h weight, h2h weight, two biases), each later layer
         * gates * H * (dirs * H + H + 2) */
        if (f->rank < 1)
            goto bad_rank;
        int64_t in = f->dims[f->rank - 1], gh, a, b;
        if (!dm_mul_ok(dv->gates, dv->hidden, &gh) || !dm_add_ok(in, dv->hidden + 2, &a) ||
            !dm_mul_ok(gh, a, &a) || !dm_mul_ok(dv->dirs, dv->hidden, &b) ||
            !dm_add_ok(b, dv->hidden + 2, &b) || !dm_mul_ok(gh, b, &b) ||
            !dm_mul_ok(b, dv->layers - 1, &b) || !dm_add_ok(a, b, &v) ||
            !dm_mul_ok(v, dv->dirs, &v))
            goto overflow;
        rank = 1;
        d[0] = v;
        break;
    }
    default:
        goto bad_rank;
    }
    return init_shape(ctx, id, rank, d);
bad_rank:
    return dm_fail(ctx->err, DNNMEM_E_SHAPE, "%s: the shape of '%s' cannot follow from '%s' of rank %d",
                   path, tt->name, fname, f->rank);
overflow:
    return dm_fail(ctx->err, DNNMEM_E_SHAPE, "%s: the element count of '%s' overflows", path,
                   tt->name);
}

static void shape_str(char *buf, size_t cap, int rank, const int64_t *dims)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int k = 0; k < rank && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", k ? "," : "", (long long)dims[k]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* An output or value_info the model declares must agree with inference:
 * dtype, rank, and every dim that is a number or a bound input symbol. */
static enum dnnmem_status check_declared(struct dm_infer *ctx, const struct dm_node *n, int32_t id)
{
    const struct dm_tensor *tt = &ctx->g->tensors[id];
    const struct dm_tinfo *t = &ctx->t[id];
    bool ok = tt->dtype == DM_UNDEFINED || tt->dtype == t->dtype;
    int64_t want[DM_MAX_DIMS];
    if (tt->rank >= 0) {
        ok = ok && tt->rank == t->rank;
        for (int k = 0; k < tt->rank && k < DM_MAX_DIMS; k++) {
            want[k] = tt->dims[k].sym >= 0 ? ctx->sym_values[tt->dims[k].sym] : tt->dims[k].value;
            if (ok && want[k] >= 0 && want[k] != t->dims[k])
                ok = false;
        }
    }
    if (ok)
        return DNNMEM_OK;
    char decl[160] = "[?]", got[160];
    if (tt->rank >= 0)
        shape_str(decl, sizeof decl, tt->rank, want);
    shape_str(got, sizeof got, t->rank, t->dims);
    return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                          "'%s' is declared %s%s (-1: any) but infers as %s%s", tt->name,
                          dm_dtype_name(tt->dtype), decl, dm_dtype_name(t->dtype), got);
}

enum dnnmem_status dm_infer_shapes(struct dm_infer *ctx)
{
    const struct dm_graph *g = ctx->g;
    for (int32_t i = 0; i < g->n_tensors; i++) {
        memset(&ctx->t[i], 0, sizeof ctx->t[i]);
        ctx->t[i].rank = -1;
        if (g->tensors[i].role == DM_ROLE_WEIGHT || g->tensors[i].role == DM_ROLE_INPUT)
            DM_TRY(init_declared(ctx, i));
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (dm_has_in(n, k) && ctx->t[n->in[k]].rank < 0 && g->tensors[n->in[k]].derive)
                DM_TRY(derive_shape(ctx, n->in[k]));
        DM_TRY(dm_shape_fns[n->op](ctx, n));
        bool is_const = n->op != DM_OP_RandomNormal && n->op != DM_OP_RandomUniform &&
                        n->op != DM_OP_RandomNormalLike && n->op != DM_OP_RandomUniformLike &&
                        n->op != DM_OP_Bernoulli && n->op != DM_OP_Multinomial;
        for (int k = 0; k < n->n_in; k++) {
            const struct dm_tinfo *t = dm_in(ctx, n, k);
            if (!t)
                continue;
            /* Shape and Size read only metadata: their result is constant once dims are bound */
            bool meta = k < 32 && ((dm_ops[n->op].meta_inputs >> k) & 1u);
            if (!t->is_const && !(meta && (n->op == DM_OP_Shape || n->op == DM_OP_Size)))
                is_const = false;
        }
        for (int k = 0; k < n->n_out; k++) {
            if (!dm_has_out(n, k))
                continue;
            struct dm_tinfo *t = &ctx->t[n->out[k]];
            if (t->rank < 0) {
                /* an optional output the op does not produce in this configuration */
                if (k > 0) {
                    t->absent = true;
                    t->rank = 0;
                    t->dtype = DM_FLOAT;
                    continue;
                }
                return dm_fail(ctx->err, DNNMEM_E_INTERNAL,
                               "%s: node '%s' (%s): output %d has no inferred shape", g->path,
                               n->name, dm_ops[n->op].name, k);
            }
            t->is_const = is_const;
            DM_TRY(check_declared(ctx, n, n->out[k]));
        }
    }
    /* derived tensors no node reads (an MXNet label the loss op drops) */
    for (int32_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].derive && ctx->t[i].rank < 0)
            DM_TRY(derive_shape(ctx, i));
    return DNNMEM_OK;
}
