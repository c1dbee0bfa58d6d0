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

bool dm_has_in(const struct dm_node *n, int i) { return i >= 0 && i < n->n_in && n->in[i] >= 0; }

bool dm_has_out(const struct dm_node *n, int i)
{
    return i >= 0 && i < n->n_out && n->out[i] >= 0;
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
    if (!dm_dtype_bytes(dtype, numel, &bytes) || bytes > (UINT64_C(1) << 50))
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

int64_t dm_attr_int(const struct dm_node *n, const char *name, int64_t dflt)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    return a && a->kind == DM_ATTR_INT ? a->i : a && a->kind == DM_ATTR_FLOAT ? (int64_t)a->f : dflt;
}

double dm_attr_float(const struct dm_node *n, const char *name, double dflt)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    return a && a->kind == DM_ATTR_FLOAT ? a->f : a && a->kind == DM_ATTR_INT ? (double)a->i : dflt;
}

const char *dm_attr_str(const struct dm_node *n, const char *name, const char *dflt)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    return a && a->kind == DM_ATTR_STRING ? a->s : dflt;
}

const int64_t *dm_attr_ints(const struct dm_node *n, const char *name, int64_t *count)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    if (!a || a->kind != DM_ATTR_INTS) {
        *count = -1;
        return NULL;
    }
    *count = a->n;
    return a->ints;
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
            if (d < 0)
                return dm_fail(ctx->err, DNNMEM_E_UNBOUND,
                               "%s: dim '%s' (axis %d of input '%s') is not bound; pass --dim "
                               "%s=N%s",
                               path, ctx->g->symbols[tt->dims[k].sym], k, tt->name,
                               ctx->g->symbols[tt->dims[k].sym],
                               " (or --batch-size / --seq-len)");
        }
        t->dims[k] = d;
        if (!dm_mul_ok(numel, d, &numel))
            return dm_fail(ctx->err, DNNMEM_E_SHAPE, "%s: the element count of '%s' overflows",
                           path, tt->name);
    }
    t->dtype = tt->dtype;
    t->rank = rank;
    t->numel = numel;
    if (!dm_dtype_bytes(t->dtype, numel, &t->bytes) || t->bytes > (UINT64_C(1) << 50))
        return dm_fail(ctx->err, DNNMEM_E_SHAPE, "%s: '%s' would take an absurd %lld elements",
                       path, tt->name, (long long)numel);
    t->value = tt->value;
    if (ctx->input_values && ctx->input_values[id])
        t->value = ctx->input_values[id];
    t->is_const = tt->role != DM_ROLE_INPUT;
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
    return init_shape(ctx, id, tt->rank, NULL);
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
        DM_TRY(dm_ops[n->op].shape(ctx, n));
        bool is_const = n->op != DM_OP_RandomNormal && n->op != DM_OP_RandomUniform &&
                        n->op != DM_OP_RandomNormalLike && n->op != DM_OP_RandomUniformLike &&
                        n->op != DM_OP_Bernoulli && n->op != DM_OP_Multinomial;
        for (int k = 0; k < n->n_in; k++) {
            const struct dm_tinfo *t = dm_in(ctx, n, k);
            if (!t)
                continue;
            /* Shape and Size read only metadata: their result is constant once dims are bound */
            bool meta = (dm_ops[n->op].meta_inputs >> k) & 1u;
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
