/* tensor.c: shape functions for tensor manipulation, indexing, reductions, matrix products. */
#include "dnnmem-impl.h"

#include <stdio.h>
#include <string.h>

#define MAXD DM_MAX_DIMS
typedef enum dnnmem_status status;

/* ---- helpers -------------------------------------------------------------- */

/* Input i, which the op requires: present, and not an omitted optional output. */
static status req(struct dm_infer *ctx, const struct dm_node *n, int i, const struct dm_tinfo **t)
{
    *t = dm_in(ctx, n, i);
    if (!*t || (*t)->absent || (*t)->rank < 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input %d is required", i);
    return DNNMEM_OK;
}

/* Optional input i, or NULL when omitted. */
static const struct dm_tinfo *opt(struct dm_infer *ctx, const struct dm_node *n, int i)
{
    const struct dm_tinfo *t = dm_in(ctx, n, i);
    return t && !t->absent && t->rank >= 0 ? t : NULL;
}

/* INTS attribute `name`: *count = -1 when absent; an error when of another kind. */
static status attr_ints(struct dm_infer *ctx, const struct dm_node *n, const char *name,
                        const int64_t **v, int64_t *count)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    *v = NULL;
    *count = -1;
    if (!a)
        return DNNMEM_OK;
    if (a->kind != DM_ATTR_INTS)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attribute '%s' must be a list of ints",
                              name);
    *v = a->ints;
    *count = a->n;
    return DNNMEM_OK;
}

/* An int list that is attribute `name` before opset `since` (or an input there, as in Split-1)
 * and input i from then on; *count = -1 when absent. */
static status list_arg(struct dm_infer *ctx, const struct dm_node *n, const char *name,
                       int64_t since, int i, const int64_t **v, int64_t *count)
{
    bool attr = dm_node_attr(n, name) != NULL;
    if (attr && ctx->g->opset >= since)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              "'%s' is input %d from opset %lld on, not an attribute", name, i,
                              (long long)since);
    if (attr || !opt(ctx, n, i))
        return attr_ints(ctx, n, name, v, count);
    return dm_in_ints(ctx, n, i, v, count);
}

/* Input i's values, without which the output shape is unknown. */
static status data_arg(struct dm_infer *ctx, const struct dm_node *n, int i,
                       const struct dm_value **v)
{
    const struct dm_tinfo *t;
    DM_TRY(req(ctx, n, i, &t));
    *v = t->value;
    if (!t->value || t->value->n != t->numel)
        return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED,
                              "output shape depends on the values of input %d ('%s'), which are "
                              "computed at run time; only constant values are supported here",
                              i, ctx->g->tensors[n->in[i]].name);
    return DNNMEM_OK;
}

/* The bit set of `count` axes normalized for rank r; a repeated axis is an error if strict. */
static status axes_mask(struct dm_infer *ctx, const struct dm_node *n, const int64_t *axes,
                        int64_t count, int r, bool strict, unsigned *mask)
{
    *mask = 0;
    for (int64_t k = 0; k < count; k++) {
        int a;
        DM_TRY(dm_axis(ctx, n, axes[k], r, &a));
        if (strict && (*mask >> a & 1u))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "axis %lld is listed twice",
                                  (long long)axes[k]);
        *mask |= 1u << a;
    }
    return DNNMEM_OK;
}

/* Error unless a rank fits the library's limit. */
static status rank_ok(struct dm_infer *ctx, const struct dm_node *n, int64_t r)
{
    if (r > MAXD)
        return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED,
                              "the output would have rank %lld; at most %d is supported",
                              (long long)r, MAXD);
    return DNNMEM_OK;
}

/* "[2,-1,3]" into buf, cut short when long. */
static const char *dstr(char *buf, size_t cap, int64_t count, const int64_t *d)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int64_t k = 0; k < count && k < 8 && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", k ? "," : "", (long long)d[k]);
    if (len < cap)
        snprintf(buf + len, cap - len, "%s]", count > 8 ? ",..." : "");
    return buf;
}
#define DSTR(b, count, d) dstr(b, sizeof b, count, d)

/* Product of d[from..to) into *out; false on overflow. */
static bool prod(const int64_t *d, int from, int to, int64_t *out)
{
    *out = 1;
    for (int k = from; k < to; k++)
        if (!dm_mul_ok(*out, d[k], out))
            return false;
    return true;
}

/* Wrapping multiply: strides of value-carrying tensors, exact whenever they hold elements. */
static int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

/* Row-major element strides of dims d. */
static void strides(int r, const int64_t *d, int64_t *s)
{
    int64_t acc = 1;
    for (int k = r - 1; k >= 0; k--) {
        s[k] = acc;
        acc = wmul(acc, d[k]);
    }
}

/* Copy element k of s into element j of d (both of one kind). */
static void vcopy(struct dm_value *d, int64_t j, const struct dm_value *s, int64_t k)
{
    if (s->is_float)
        d->f[j] = s->f[k];
    else
        d->i[j] = s->i[k];
}

/* Output oi holds the input's elements in the same row-major order (reshapes). */
static status same_value(struct dm_infer *ctx, const struct dm_node *n, int oi,
                         const struct dm_tinfo *in)
{
    if (!in->value || !dm_has_out(n, oi) || in->value->n != ctx->t[n->out[oi]].numel)
        return DNNMEM_OK;
    return dm_set_out_value(ctx, n, oi, in->value);
}

/* Fold output oi (already set, dims d) from src: the element at output coords c is
 * src[off + sum((c[k] % mod[k]) * stride[k])], mod NULL for none. */
static status fold_strided(struct dm_infer *ctx, const struct dm_node *n, int oi,
                           const struct dm_value *src, const int64_t *d, int64_t off,
                           const int64_t *stride, const int64_t *mod)
{
    if (!src || !dm_has_out(n, oi))
        return DNNMEM_OK;
    const struct dm_tinfo *o = &ctx->t[n->out[oi]];
    struct dm_value *v = dm_value_new(ctx, o->numel, src->is_float);
    if (!v)
        return DNNMEM_OK;
    int64_t c[MAXD] = {0};
    for (int64_t j = 0; j < o->numel; j++) {
        int64_t s = off;
        for (int k = 0; k < o->rank; k++)
            s += (mod && mod[k] > 0 ? c[k] % mod[k] : c[k]) * stride[k];
        if (s < 0 || s >= src->n)
            return DNNMEM_OK; /* inconsistent value: fold nothing */
        vcopy(v, j, src, s);
        for (int k = o->rank - 1; k >= 0 && ++c[k] == d[k]; k--)
            c[k] = 0;
    }
    return dm_set_out_value(ctx, n, oi, v);
}

/* ---- reshapes ------------------------------------------------------------ */

/* Reshape: 0 copies the input dim (unless allowzero=1), one -1 takes the rest; the target is
 * attribute `shape` before opset 5, input 1 since. */
status dm_shape_reshape(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *s;
    int64_t cnt, d[MAXD], known = 1;
    char b[96], bx[96];
    DM_TRY(req(ctx, n, 0, &x));
    if (ctx->g->opset < 5) {
        DM_TRY(attr_ints(ctx, n, "shape", &s, &cnt));
        if (cnt < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attribute 'shape' is required");
    } else {
        DM_TRY(dm_in_ints(ctx, n, 1, &s, &cnt));
    }
    DM_TRY(rank_ok(ctx, n, cnt));
    bool allowzero = dm_attr_int(n, "allowzero", 0) != 0, zero = false;
    int infer = -1;
    for (int k = 0; k < cnt; k++) {
        d[k] = s[k];
        if (d[k] == 0 && !allowzero) {
            if (k >= x->rank)
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                      "Reshape to %s: 0 at index %d copies a dim the rank-%d input "
                                      "lacks", DSTR(b, cnt, s), k, x->rank);
            d[k] = x->dims[k];
        } else if (d[k] == 0) {
            zero = true;
        }
        if (d[k] == -1) {
            if (infer >= 0)
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Reshape to %s: more than one -1",
                                      DSTR(b, cnt, s));
            infer = k;
        } else if (d[k] < 0) {
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Reshape to %s: invalid dim %lld",
                                  DSTR(b, cnt, s), (long long)d[k]);
        } else if (!dm_mul_ok(known, d[k], &known)) {
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Reshape to %s: element count overflows",
                                  DSTR(b, cnt, s));
        }
    }
    if (infer >= 0) {
        if (zero)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "Reshape to %s: allowzero=1 forbids both 0 and -1", DSTR(b, cnt, s));
        if (known == 0 || x->numel % known)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "Reshape %s to %s: -1 cannot be inferred from %lld elements",
                                  DSTR(bx, x->rank, x->dims), DSTR(b, cnt, s),
                                  (long long)x->numel);
        d[infer] = x->numel / known;
    } else if (known != x->numel) {
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "Reshape %s to %s: %lld elements cannot become %lld",
                              DSTR(bx, x->rank, x->dims), DSTR(b, cnt, s), (long long)x->numel,
                              (long long)known);
    }
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, (int)cnt, d));
    return same_value(ctx, n, 0, x);
}

/* Flatten: [prod(d[:axis]), prod(d[axis:])], axis (default 1) in [-r, r]. */
status dm_shape_flatten(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req(ctx, n, 0, &x));
    int64_t axis = dm_attr_int(n, "axis", 1), d[2];
    if (axis < 0)
        axis += x->rank;
    if (axis < 0 || axis > x->rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Flatten: axis %lld is out of range for rank %d",
                              (long long)dm_attr_int(n, "axis", 1), x->rank);
    if (!prod(x->dims, 0, (int)axis, &d[0]) || !prod(x->dims, (int)axis, x->rank, &d[1]))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Flatten: element count overflows");
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, 2, d));
    return same_value(ctx, n, 0, x);
}

/* Squeeze: drop the listed axes (each of dim 1), or every dim of 1 when no axes are given;
 * axes are an attribute before opset 13, input 1 since. */
status dm_shape_squeeze(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *ax;
    int64_t cnt, d[MAXD];
    unsigned m = 0;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(list_arg(ctx, n, "axes", 13, 1, &ax, &cnt));
    if (cnt >= 0)
        DM_TRY(axes_mask(ctx, n, ax, cnt, x->rank, true, &m));
    int r = 0;
    for (int k = 0; k < x->rank; k++) {
        bool drop = cnt < 0 ? x->dims[k] == 1 : (m >> k & 1u);
        if (drop && x->dims[k] != 1)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Squeeze: axis %d has dim %lld, not 1", k,
                                  (long long)x->dims[k]);
        if (!drop)
            d[r++] = x->dims[k];
    }
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, r, d));
    return same_value(ctx, n, 0, x);
}

/* Unsqueeze: insert dims of 1 at the axes, which index the output; axes are an attribute
 * before opset 13, input 1 since. */
status dm_shape_unsqueeze(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *ax;
    int64_t cnt, d[MAXD];
    unsigned m;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(list_arg(ctx, n, "axes", 13, 1, &ax, &cnt));
    if (cnt < 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "Unsqueeze needs axes");
    DM_TRY(rank_ok(ctx, n, cnt + x->rank));
    int r = (int)cnt + x->rank;
    DM_TRY(axes_mask(ctx, n, ax, cnt, r, true, &m));
    for (int k = 0, j = 0; k < r; k++)
        d[k] = (m >> k & 1u) ? 1 : x->dims[j++];
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, r, d));
    return same_value(ctx, n, 0, x);
}

/* Transpose: out[k] = in[perm[k]]; perm defaults to the axes reversed. */
status dm_shape_transpose(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *perm;
    int64_t cnt, d[MAXD], is[MAXD], st[MAXD];
    unsigned seen = 0;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(attr_ints(ctx, n, "perm", &perm, &cnt));
    if (cnt >= 0 && cnt != x->rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Transpose: perm has %lld entries for rank %d",
                              (long long)cnt, x->rank);
    strides(x->rank, x->dims, is);
    for (int k = 0; k < x->rank; k++) {
        int64_t p = cnt >= 0 ? perm[k] : x->rank - 1 - k;
        if (p < 0 || p >= x->rank || (seen >> p & 1u))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "Transpose: perm entry %lld is out of range or repeated",
                                  (long long)p);
        seen |= 1u << p;
        d[k] = x->dims[p];
        st[k] = is[p];
    }
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, d));
    return fold_strided(ctx, n, 0, x->value, d, 0, st, NULL);
}

/* DepthToSpace [N,C,H,W] -> [N,C/b^2,H*b,W*b], SpaceToDepth the reverse (blocksize b). */
static status space_depth(struct dm_infer *ctx, const struct dm_node *n, bool to_space)
{
    const struct dm_tinfo *x;
    DM_TRY(req(ctx, n, 0, &x));
    int64_t b = dm_attr_int(n, "blocksize", 0), bb, d[4];
    if (x->rank != 4)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "input has rank %d, not 4", x->rank);
    if (b < 1 || !dm_mul_ok(b, b, &bb))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "blocksize %lld is invalid",
                              (long long)b);
    memcpy(d, x->dims, sizeof d);
    bool ok = to_space ? d[1] % bb == 0 && dm_mul_ok(d[2], b, &d[2]) && dm_mul_ok(d[3], b, &d[3])
                       : d[2] % b == 0 && d[3] % b == 0 && dm_mul_ok(d[1], bb, &d[1]);
    if (!ok)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "blocksize %lld does not fit input %s",
                              (long long)b, DSTR((char[96]){0}, 4, x->dims));
    const char *mode = dm_attr_str(n, "mode", "DCR");
    if (to_space && strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "mode '%.20s' is neither DCR nor CRD", mode);
    if (to_space)
        d[1] /= bb;
    else
        d[2] /= b, d[3] /= b;
    return dm_set_out(ctx, n, 0, x->dtype, 4, d);
}

status dm_shape_depth_to_space(struct dm_infer *ctx, const struct dm_node *n)
{
    return space_depth(ctx, n, true);
}

status dm_shape_space_to_depth(struct dm_infer *ctx, const struct dm_node *n)
{
    return space_depth(ctx, n, false);
}

/* ---- slicing and joining ----------------------------------------------- */

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Slice: per axis, starts/ends count from the end when negative and clamp like Python slices
 * (to [0,dim] for positive steps, [-1,dim-1] for negative ones); attributes before opset 10
 * (no steps), inputs 1-4 since. */
status dm_shape_slice(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *st, *en, *ax = NULL, *sp = NULL;
    int64_t ns, ne, na = -1, np = -1, d[MAXD], is[MAXD], str[MAXD], off = 0;
    unsigned seen = 0;
    DM_TRY(req(ctx, n, 0, &x));
    if (ctx->g->opset < 10) {
        DM_TRY(attr_ints(ctx, n, "starts", &st, &ns));
        DM_TRY(attr_ints(ctx, n, "ends", &en, &ne));
        DM_TRY(attr_ints(ctx, n, "axes", &ax, &na));
        if (ns < 0 || ne < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attributes starts and ends are required");
    } else {
        DM_TRY(dm_in_ints(ctx, n, 1, &st, &ns));
        DM_TRY(dm_in_ints(ctx, n, 2, &en, &ne));
        if (opt(ctx, n, 3))
            DM_TRY(dm_in_ints(ctx, n, 3, &ax, &na));
        if (opt(ctx, n, 4))
            DM_TRY(dm_in_ints(ctx, n, 4, &sp, &np));
    }
    if (ns != ne || (na >= 0 && na != ns) || (np >= 0 && np != ns) || (na < 0 && ns > x->rank))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "Slice of rank %d: %lld starts, %lld ends, %lld axes, %lld steps",
                              x->rank, (long long)ns, (long long)ne, (long long)na, (long long)np);
    memcpy(d, x->dims, sizeof d);
    strides(x->rank, x->dims, is);
    memcpy(str, is, sizeof str);
    for (int k = 0; k < ns; k++) {
        int a = k;
        if (na >= 0)
            DM_TRY(dm_axis(ctx, n, ax[k], x->rank, &a));
        int64_t step = np >= 0 ? sp[k] : 1, dim = x->dims[a], s = st[k], e = en[k];
        if (seen >> a & 1u)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Slice: axis %d is listed twice", a);
        if (step == 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Slice: step 0 on axis %d", a);
        seen |= 1u << a;
        s = clamp(s < 0 ? s + dim : s, 0, step > 0 ? dim : dim - 1);
        e = clamp(e < 0 ? e + dim : e, step > 0 ? 0 : -1, step > 0 ? dim : dim - 1);
        uint64_t mag = step > 0 ? (uint64_t)step : -(uint64_t)step;
        int64_t span = dim == 0 ? 0 : step > 0 ? e - s : s - e;
        d[a] = span > 0 ? (int64_t)(((uint64_t)span - 1) / mag + 1) : 0;
        off += wmul(s, is[a]);
        str[a] = d[a] > 1 ? wmul(step, is[a]) : 0;
    }
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, d));
    return fold_strided(ctx, n, 0, x->value, d, off, str, NULL);
}

/* Split: along axis, into the `split` sizes (attribute before opset 13, input 1 since), or into
 * equal parts: num_outputs (opset 18) rounds the part up and makes the last one smaller,
 * otherwise the dim must divide evenly. */
status dm_shape_split(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *sp;
    int64_t cnt, is[MAXD], d[MAXD], no = n->n_out, sum = 0, start = 0;
    int a;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &a));
    DM_TRY(list_arg(ctx, n, "split", 13, 1, &sp, &cnt));
    int64_t dim = x->dims[a], num = dm_attr_int(n, "num_outputs", -1), part = no ? dim / no : 0;
    if (no < 1)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "Split has no outputs");
    if (cnt >= 0) {
        for (int64_t k = 0; k < cnt; k++)
            if (sp[k] < 0 || !dm_add_ok(sum, sp[k], &sum))
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Split: invalid size %lld",
                                      (long long)sp[k]);
        if (cnt != no || sum != dim)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "Split: %lld sizes adding up to %lld for %lld outputs and dim %lld",
                                  (long long)cnt, (long long)sum, (long long)no, (long long)dim);
    } else if (num >= 0) {
        part += dim % no != 0;
        if (num != no || part * (no - 1) > dim)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "Split: dim %lld cannot make num_outputs=%lld parts for %lld outputs",
                                  (long long)dim, (long long)num, (long long)no);
    } else if (dim % no) {
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "Split: dim %lld of axis %d does not split into %lld equal parts",
                              (long long)dim, a, (long long)no);
    }
    memcpy(d, x->dims, sizeof d);
    strides(x->rank, x->dims, is);
    for (int j = 0; j < no; j++) {
        d[a] = cnt >= 0 ? sp[j] : j + 1 < no ? part : dim - part * (no - 1);
        DM_TRY(dm_set_out(ctx, n, j, x->dtype, x->rank, d));
        DM_TRY(fold_strided(ctx, n, j, x->value, d, wmul(start, is[a]), is, NULL));
        start += d[a];
    }
    return DNNMEM_OK;
}

/* Concat: inputs agree on rank, dtype and every dim but axis, whose dims add up
 * (axis defaults to 1 before opset 4). */
status dm_shape_concat(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x0, *x;
    int64_t d[MAXD];
    int a;
    char b0[96], b1[96];
    DM_TRY(req(ctx, n, 0, &x0));
    if (!dm_node_attr(n, "axis") && ctx->g->opset >= 4)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attribute 'axis' is required");
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 1), x0->rank, &a));
    memcpy(d, x0->dims, sizeof d);
    bool fold = true;
    for (int i = 1; i < n->n_in; i++) {
        DM_TRY(req(ctx, n, i, &x));
        if (x->rank != x0->rank)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "Concat: input %d has rank %d, input 0 has rank %d", i, x->rank,
                                  x0->rank);
        if (x->dtype != x0->dtype)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Concat: input %d is %s, input 0 is %s",
                                  i, dm_dtype_name(x->dtype), dm_dtype_name(x0->dtype));
        for (int k = 0; k < x->rank; k++)
            if (k != a && x->dims[k] != x0->dims[k])
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                      "Concat on axis %d: input %d is %s, input 0 is %s", a, i,
                                      DSTR(b1, x->rank, x->dims), DSTR(b0, x0->rank, x0->dims));
        if (!dm_add_ok(d[a], x->dims[a], &d[a]))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Concat: axis %d overflows", a);
        fold = fold && x->value && x0->value && x->value->is_float == x0->value->is_float &&
               x->value->n == x->numel;
    }
    DM_TRY(dm_set_out(ctx, n, 0, x0->dtype, x0->rank, d));
    if (!fold || !x0->value || x0->value->n != x0->numel || !dm_has_out(n, 0))
        return DNNMEM_OK;
    int64_t total = ctx->t[n->out[0]].numel, inner = 1, j = 0;
    struct dm_value *v = dm_value_new(ctx, total, x0->value->is_float);
    if (!v)
        return DNNMEM_OK;
    if (total > 0) {
        prod(d, a + 1, x0->rank, &inner); /* total > 0: every product fits */
        for (int64_t o = 0; o < total / (inner * d[a]); o++)
            for (int i = 0; i < n->n_in; i++) {
                x = dm_in(ctx, n, i);
                int64_t len = x->dims[a] * inner;
                for (int64_t k = 0; k < len; k++)
                    vcopy(v, j++, x->value, o * len + k);
            }
    }
    return dm_set_out_value(ctx, n, 0, v);
}

/* Pad: out[a] = in[a] + begin pad + end pad; pads are attribute `paddings` (opset 1) or `pads`
 * (2-10), input 1 since 11, on the axes of input 3 from opset 18 (all axes by default). */
status dm_shape_pad(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *p, *ax = NULL;
    int64_t np, na, d[MAXD];
    unsigned seen = 0;
    DM_TRY(req(ctx, n, 0, &x));
    if (ctx->g->opset < 11)
        DM_TRY(attr_ints(ctx, n, ctx->g->opset < 2 ? "paddings" : "pads", &p, &np));
    else
        DM_TRY(dm_in_ints(ctx, n, 1, &p, &np));
    na = x->rank;
    if (ctx->g->opset >= 18 && opt(ctx, n, 3))
        DM_TRY(dm_in_ints(ctx, n, 3, &ax, &na));
    if (np < 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "Pad needs pads");
    if (np != 2 * na)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Pad: %lld pads for %lld axes",
                              (long long)np, (long long)na);
    memcpy(d, x->dims, sizeof d);
    for (int k = 0; k < na; k++) {
        int a = k;
        if (ax)
            DM_TRY(dm_axis(ctx, n, ax[k], x->rank, &a));
        if (seen >> a & 1u)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Pad: axis %d is listed twice", a);
        seen |= 1u << a;
        if (!dm_add_ok(d[a], p[k], &d[a]) || !dm_add_ok(d[a], p[k + na], &d[a]) || d[a] < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "Pad: pads %lld and %lld make dim %lld of axis %d invalid",
                                  (long long)p[k], (long long)p[k + na], (long long)x->dims[a], a);
    }
    return dm_set_out(ctx, n, 0, x->dtype, x->rank, d);
}

/* Expand: numpy-broadcast the input's shape with the `shape` input. */
status dm_shape_expand(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *s;
    int64_t cnt, d[MAXD], is[MAXD], st[MAXD], mod[MAXD];
    int r;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(dm_in_ints(ctx, n, 1, &s, &cnt));
    DM_TRY(rank_ok(ctx, n, cnt));
    for (int k = 0; k < cnt; k++)
        if (s[k] < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Expand to %s: negative dim",
                                  DSTR((char[96]){0}, cnt, s));
    DM_TRY(dm_broadcast(ctx, n, x->rank, x->dims, (int)cnt, s, &r, d));
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, r, d));
    strides(x->rank, x->dims, is);
    for (int k = 0; k < r; k++) {
        int i = k - (r - x->rank);
        mod[k] = i >= 0 ? x->dims[i] : 1;
        st[k] = i >= 0 ? is[i] : 0;
    }
    return fold_strided(ctx, n, 0, x->value, d, 0, st, mod);
}

/* Tile: out[k] = in[k] * repeats[k]; opset < 6 repeats one axis (inputs tiles, axis). */
status dm_shape_tile(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *rep, *ax;
    int64_t cnt, na, d[MAXD], is[MAXD], r1[MAXD];
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(dm_in_ints(ctx, n, 1, &rep, &cnt));
    if (ctx->g->opset < 6) {
        int a;
        DM_TRY(dm_in_ints(ctx, n, 2, &ax, &na));
        if (cnt != 1 || na != 1)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Tile: tiles and axis must be scalars");
        DM_TRY(dm_axis(ctx, n, ax[0], x->rank, &a));
        for (int k = 0; k < x->rank; k++)
            r1[k] = k == a ? rep[0] : 1;
        rep = r1;
        cnt = x->rank;
    }
    if (cnt != x->rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Tile: %lld repeats for rank %d",
                              (long long)cnt, x->rank);
    for (int k = 0; k < x->rank; k++)
        if (rep[k] < 0 || !dm_mul_ok(x->dims[k], rep[k], &d[k]))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Tile: invalid repeat %lld on axis %d",
                                  (long long)rep[k], k);
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, d));
    strides(x->rank, x->dims, is);
    return fold_strided(ctx, n, 0, x->value, d, 0, is, x->dims);
}

/* ---- indexing ------------------------------------------------------------ */

/* Gather: out = data.shape[:axis] + indices.shape + data.shape[axis+1:]. */
status dm_shape_gather(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *ix;
    int64_t d[MAXD];
    int a;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(req(ctx, n, 1, &ix));
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &a));
    DM_TRY(rank_ok(ctx, n, x->rank - 1 + ix->rank));
    int r = 0;
    for (int k = 0; k < x->rank; k++)
        if (k != a)
            d[r++] = x->dims[k];
        else
            for (int q = 0; q < ix->rank; q++)
                d[r++] = ix->dims[q];
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, r, d));
    const struct dm_value *xv = x->value, *iv = ix->value;
    if (!xv || !iv || xv->n != x->numel || iv->n != ix->numel || iv->is_float || !dm_has_out(n, 0))
        return DNNMEM_OK;
    int64_t total = ctx->t[n->out[0]].numel, dim = x->dims[a], inner = 1, j = 0;
    struct dm_value *v = dm_value_new(ctx, total, xv->is_float);
    if (!v)
        return DNNMEM_OK;
    if (total > 0) {
        prod(x->dims, a + 1, x->rank, &inner);
        for (int64_t o = 0; o < total / (inner * iv->n); o++)
            for (int64_t q = 0; q < iv->n; q++) {
                int64_t t = iv->i[q] < 0 ? iv->i[q] + dim : iv->i[q];
                if (t < 0 || t >= dim)
                    return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                          "Gather: index %lld is out of range for dim %lld",
                                          (long long)iv->i[q], (long long)dim);
                for (int64_t k = 0; k < inner; k++)
                    vcopy(v, j++, xv, (o * dim + t) * inner + k);
            }
    }
    return dm_set_out_value(ctx, n, 0, v);
}

/* GatherElements: the output takes the indices' shape; data and indices have one rank. */
status dm_shape_gather_elements(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *ix;
    int a;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(req(ctx, n, 1, &ix));
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &a));
    if (ix->rank != x->rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "GatherElements: indices have rank %d, data rank %d", ix->rank,
                              x->rank);
    return dm_set_out(ctx, n, 0, x->dtype, ix->rank, ix->dims);
}

/* GatherND: out = indices.shape[:-1] + data.shape[batch_dims + k:], k = indices.shape[-1];
 * the first batch_dims dims of data and indices agree. */
status dm_shape_gather_nd(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *ix;
    int64_t d[MAXD];
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(req(ctx, n, 1, &ix));
    int64_t b = dm_attr_int(n, "batch_dims", 0), q = ix->rank, k = q ? ix->dims[q - 1] : -1;
    if (b < 0 || b >= q || b >= x->rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "GatherND: batch_dims %lld must be below both ranks (%d, %d)",
                              (long long)b, x->rank, ix->rank);
    for (int i = 0; i < b; i++)
        if (x->dims[i] != ix->dims[i])
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "GatherND: batch dim %d is %lld in data, %lld in indices", i,
                                  (long long)x->dims[i], (long long)ix->dims[i]);
    if (k > x->rank - b)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "GatherND: index tuples of %lld for %lld non-batch data dims",
                              (long long)k, (long long)(x->rank - b));
    DM_TRY(rank_ok(ctx, n, q - 1 + x->rank - b - k));
    int r = 0;
    for (int i = 0; i < q - 1; i++)
        d[r++] = ix->dims[i];
    for (int64_t i = b + k; i < x->rank; i++)
        d[r++] = x->dims[i];
    return dm_set_out(ctx, n, 0, x->dtype, r, d);
}

/* OneHot: a dim of size depth inserted at axis (default -1, in [-(r+1), r]); the output takes
 * the dtype of `values`; depth may be any numeric type. */
status dm_shape_onehot(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *ix, *vals;
    const double *dv;
    int64_t cnt, d[MAXD];
    int a;
    DM_TRY(req(ctx, n, 0, &ix));
    DM_TRY(req(ctx, n, 2, &vals));
    DM_TRY(dm_in_floats(ctx, n, 1, &dv, &cnt));
    if (cnt != 1 || !(dv[0] >= 1 && dv[0] < 1e15))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "OneHot: depth must be one positive number");
    DM_TRY(rank_ok(ctx, n, ix->rank + 1));
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", -1), ix->rank + 1, &a));
    for (int k = 0, j = 0; k <= ix->rank; k++)
        d[k] = k == a ? (int64_t)dv[0] : ix->dims[j++];
    return dm_set_out(ctx, n, 0, vals->dtype, ix->rank + 1, d);
}

/* True if element k of v is nonzero. */
static bool nonzero(const struct dm_value *v, int64_t k)
{
    return v->is_float ? v->f[k] != 0 : v->i[k] != 0;
}

/* NonZero: int64 [max(rank,1), count of nonzero elements], from X's values. */
status dm_shape_nonzero(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const struct dm_value *xv;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(data_arg(ctx, n, 0, &xv));
    int64_t d[2] = {x->rank ? x->rank : 1, 0}, c[MAXD] = {0};
    for (int64_t k = 0; k < xv->n; k++)
        d[1] += nonzero(xv, k);
    DM_TRY(dm_set_out(ctx, n, 0, DM_INT64, 2, d));
    struct dm_value *v = dm_value_new(ctx, d[0] * d[1], false);
    if (!v)
        return DNNMEM_OK;
    for (int64_t k = 0, j = 0; k < xv->n; k++) {
        if (nonzero(xv, k)) {
            for (int a = 0; a < x->rank; a++)
                v->i[a * d[1] + j] = c[a];
            j++;
        }
        for (int a = x->rank - 1; a >= 0 && ++c[a] == x->dims[a]; a--)
            c[a] = 0;
    }
    return dm_set_out_value(ctx, n, 0, v);
}

/* Compress: keep the slices along axis (or, without axis, the flattened elements) whose
 * condition is true; the condition may be shorter than the dim, never longer. */
status dm_shape_compress(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *c;
    const struct dm_value *cv;
    int64_t d[MAXD], keep = 0;
    int a = -1;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(req(ctx, n, 1, &c));
    bool has_axis = dm_node_attr(n, "axis") != NULL;
    if (has_axis)
        DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &a));
    int64_t dim = has_axis ? x->dims[a] : x->numel;
    if (c->rank != 1 || c->dims[0] > dim)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "Compress: condition must be 1-D and at most %lld long", (long long)dim);
    DM_TRY(data_arg(ctx, n, 1, &cv));
    for (int64_t k = 0; k < cv->n; k++)
        keep += nonzero(cv, k);
    memcpy(d, x->dims, sizeof d);
    d[has_axis ? a : 0] = keep;
    return dm_set_out(ctx, n, 0, x->dtype, has_axis ? x->rank : 1, d);
}

/* True if slices s and t of v (outer x dim x inner, sliced on the middle) are equal. */
static bool same_slice(const struct dm_value *v, int64_t outer, int64_t dim, int64_t inner,
                       int64_t s, int64_t t)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) {
            int64_t i = (o * dim + s) * inner + k, j = (o * dim + t) * inner + k;
            if (v->is_float ? v->f[i] != v->f[j] : v->i[i] != v->i[j])
                return false;
        }
    return true;
}

/* Unique: Y holds the u distinct elements (or slices along axis); indices and counts are [u],
 * inverse_indices one per element (slice); all int64 but Y; from X's values. */
status dm_shape_unique(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const struct dm_value *xv;
    int64_t d[MAXD], outer = 1, inner = 1, u = 0;
    int a = -1;
    DM_TRY(req(ctx, n, 0, &x));
    bool has_axis = dm_node_attr(n, "axis") != NULL;
    if (has_axis)
        DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &a));
    DM_TRY(data_arg(ctx, n, 0, &xv));
    int64_t dim = has_axis ? x->dims[a] : x->numel;
    if (has_axis && x->numel == 0)
        inner = 0; /* every slice is empty, so all are equal */
    else if (has_axis) {
        prod(x->dims, 0, a, &outer);
        prod(x->dims, a + 1, x->rank, &inner);
    }
    for (int64_t s = 0; s < dim; s++) {
        int64_t t = 0;
        while (t < s && !same_slice(xv, outer, dim, inner, s, t))
            t++;
        u += t == s;
    }
    memcpy(d, x->dims, sizeof d);
    d[has_axis ? a : 0] = u;
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, has_axis ? x->rank : 1, d));
    DM_TRY(dm_set_out(ctx, n, 1, DM_INT64, 1, &u));
    DM_TRY(dm_set_out(ctx, n, 2, DM_INT64, 1, &dim));
    return dm_set_out(ctx, n, 3, DM_INT64, 1, &u);
}

/* ---- metadata -------------------------------------------------------------- */

/* Shape: int64 dims[start:end]; start and end (opset 15) count from the end when negative and
 * clamp to [0, rank]. */
status dm_shape_shape(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req(ctx, n, 0, &x));
    int64_t s = dm_attr_int(n, "start", 0), e = dm_attr_int(n, "end", x->rank), len;
    s = clamp(s < 0 ? s + x->rank : s, 0, x->rank);
    e = clamp(e < 0 ? e + x->rank : e, 0, x->rank);
    len = e > s ? e - s : 0;
    DM_TRY(dm_set_out(ctx, n, 0, DM_INT64, 1, &len));
    struct dm_value *v = dm_value_new(ctx, len, false);
    if (v)
        memcpy(v->i, x->dims + s, (size_t)len * sizeof *v->i);
    return dm_set_out_value(ctx, n, 0, v);
}

/* Size: the int64 scalar element count. */
status dm_shape_size(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(dm_set_out(ctx, n, 0, DM_INT64, 0, NULL));
    struct dm_value *v = dm_value_new(ctx, 1, false);
    if (v)
        v->i[0] = x->numel;
    return dm_set_out_value(ctx, n, 0, v);
}

/* ---- reductions ------------------------------------------------------------ */

/* x's dims with the axes in mask set to 1 (keep) or removed; returns the rank. */
static int reduce_dims(const struct dm_tinfo *x, unsigned mask, bool keep, int64_t *d)
{
    int r = 0;
    for (int k = 0; k < x->rank; k++)
        if (!(mask >> k & 1u))
            d[r++] = x->dims[k];
        else if (keep)
            d[r++] = 1;
    return r;
}

/* TopK: values and int64 indices, dim axis (default -1) cut to k (attribute before opset 10,
 * input 1 since); k <= dim. */
status dm_shape_topk(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *kv;
    int64_t cnt = 1, k = dm_attr_int(n, "k", -1), d[MAXD];
    int a;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", -1), x->rank, &a));
    if (ctx->g->opset >= 10) {
        DM_TRY(dm_in_ints(ctx, n, 1, &kv, &cnt));
        k = cnt == 1 ? kv[0] : -1;
    }
    if (k < 0 || k > x->dims[a])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "TopK: k must be one value in [0, %lld]",
                              (long long)x->dims[a]);
    memcpy(d, x->dims, sizeof d);
    d[a] = k;
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, d));
    return dm_set_out(ctx, n, 1, DM_INT64, x->rank, d);
}

/* ArgMax/ArgMin: int64, axis (default 0) kept as 1 (keepdims, default) or removed. */
status dm_shape_argminmax(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    int64_t d[MAXD];
    int a;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &a));
    int r = reduce_dims(x, 1u << a, dm_attr_int(n, "keepdims", 1) != 0, d);
    return dm_set_out(ctx, n, 0, DM_INT64, r, d);
}

/* Fold ReduceSum/Prod/Min/Max over integer values; nothing on overflow or another op. */
static status reduce_fold(struct dm_infer *ctx, const struct dm_node *n, const struct dm_tinfo *x,
                          unsigned mask)
{
    const struct dm_value *xv = x->value;
    enum dm_op op = n->op;
    if (!xv || xv->is_float || xv->n != x->numel || !dm_has_out(n, 0) ||
        (op != DM_OP_ReduceSum && op != DM_OP_ReduceProd && op != DM_OP_ReduceMin &&
         op != DM_OP_ReduceMax) ||
        ((op == DM_OP_ReduceMin || op == DM_OP_ReduceMax) && xv->n == 0))
        return DNNMEM_OK;
    int64_t od[MAXD], os[MAXD], c[MAXD] = {0};
    int r = reduce_dims(x, mask, true, od);
    struct dm_value *v = dm_value_new(ctx, ctx->t[n->out[0]].numel, false);
    if (!v)
        return DNNMEM_OK;
    strides(r, od, os);
    for (int64_t j = 0; j < v->n; j++)
        v->i[j] = op == DM_OP_ReduceSum ? 0 : op == DM_OP_ReduceProd ? 1
                : op == DM_OP_ReduceMin ? INT64_MAX : INT64_MIN;
    for (int64_t k = 0; k < xv->n; k++) {
        int64_t j = 0, e = xv->i[k];
        for (int a = 0; a < x->rank; a++)
            j += (mask >> a & 1u) ? 0 : c[a] * os[a];
        int64_t *acc = &v->i[j];
        if ((op == DM_OP_ReduceSum && !dm_add_ok(*acc, e, acc)) ||
            (op == DM_OP_ReduceProd && !dm_mul_ok(*acc, e, acc)))
            return DNNMEM_OK;
        if ((op == DM_OP_ReduceMin && e < *acc) || (op == DM_OP_ReduceMax && e > *acc))
            *acc = e;
        for (int a = x->rank - 1; a >= 0 && ++c[a] == x->dims[a]; a--)
            c[a] = 0;
    }
    return dm_set_out_value(ctx, n, 0, v);
}

/* Reduce*: the axes kept as 1 (keepdims, default) or removed; no axes means all of them, or
 * none with noop_with_empty_axes; axes are input 1 for ReduceSum >= 13 and the others >= 18. */
status dm_shape_reduce(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *ax;
    int64_t cnt, d[MAXD];
    unsigned mask = (1u << MAXD) - 1;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(list_arg(ctx, n, "axes", n->op == DM_OP_ReduceSum ? 13 : 18, 1, &ax, &cnt));
    if (cnt <= 0 && dm_attr_int(n, "noop_with_empty_axes", 0)) {
        DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, x->dims));
        return same_value(ctx, n, 0, x);
    }
    if (cnt > 0)
        DM_TRY(axes_mask(ctx, n, ax, cnt, x->rank, false, &mask));
    int r = reduce_dims(x, mask, dm_attr_int(n, "keepdims", 1) != 0, d);
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, r, d));
    return reduce_fold(ctx, n, x, mask);
}

/* ---- matrix products ------------------------------------------------------- */

/* numpy matmul of shapes a and b: batch dims broadcast, a 1-D operand gains and then loses a
 * dim of 1 (prepended for a, appended for b). */
static status matmul_dims(struct dm_infer *ctx, const struct dm_node *n, const struct dm_tinfo *a,
                          const struct dm_tinfo *b, int *r, int64_t *d)
{
    char ba[96], bb[96];
    if (a->rank < 1 || b->rank < 1 ||
        a->dims[a->rank - 1] != b->dims[b->rank == 1 ? 0 : b->rank - 2])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "cannot multiply %s by %s",
                              DSTR(ba, a->rank, a->dims), DSTR(bb, b->rank, b->dims));
    int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0;
    DM_TRY(dm_broadcast(ctx, n, ra, a->dims, rb, b->dims, r, d));
    if (a->rank >= 2)
        d[(*r)++] = a->dims[a->rank - 2];
    if (b->rank >= 2)
        d[(*r)++] = b->dims[b->rank - 1];
    return DNNMEM_OK;
}

/* MatMul (numpy semantics); MatMulInteger outputs int32. */
status dm_shape_matmul(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *a, *b;
    int64_t d[MAXD];
    int r;
    DM_TRY(req(ctx, n, 0, &a));
    DM_TRY(req(ctx, n, 1, &b));
    DM_TRY(matmul_dims(ctx, n, a, b, &r, d));
    return dm_set_out(ctx, n, 0, n->op == DM_OP_MatMulInteger ? DM_INT32 : a->dtype, r, d);
}

/* QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): MatMul shape, y_zp's dtype. */
status dm_shape_qlinear_matmul(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *a, *b, *yz;
    int64_t d[MAXD];
    int r;
    DM_TRY(req(ctx, n, 0, &a));
    DM_TRY(req(ctx, n, 3, &b));
    DM_TRY(req(ctx, n, 7, &yz));
    DM_TRY(matmul_dims(ctx, n, a, b, &r, d));
    return dm_set_out(ctx, n, 0, yz->dtype, r, d);
}

/* Gemm: op(A) [M,K] x op(B) [K,N] (op transposes with transA/transB), C broadcasts to [M,N]. */
status dm_shape_gemm(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *a, *b, *c;
    char ba[96], bb[96];
    int64_t d[MAXD];
    int r;
    DM_TRY(req(ctx, n, 0, &a));
    DM_TRY(req(ctx, n, 1, &b));
    if (a->rank != 2 || b->rank != 2)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Gemm needs 2-D A and B, got %s and %s",
                              DSTR(ba, a->rank, a->dims), DSTR(bb, b->rank, b->dims));
    int ta = dm_attr_int(n, "transA", 0) != 0, tb = dm_attr_int(n, "transB", 0) != 0;
    int64_t mn[2] = {a->dims[ta], b->dims[!tb]};
    if (a->dims[!ta] != b->dims[tb]) {
        /* a weight whose shape the file fixes (an MXNet __shape__, an ONNX
         * initializer): the input is not the size the model was saved for */
        const struct dm_tensor *w = &ctx->g->tensors[n->in[1]];
        bool fixed = w->role == DM_ROLE_WEIGHT && w->rank >= 0 && !w->derive;
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Gemm: cannot multiply %s%s by %s%s%s%s%s",
                              DSTR(ba, 2, a->dims), ta ? "^T" : "", DSTR(bb, 2, b->dims),
                              tb ? "^T" : "", fixed ? "; the file fixes the shape of '" : "",
                              fixed ? w->name : "",
                              fixed ? "', so the data reaching it is not the size the model was "
                                      "saved for: check the input shape" : "");
    }
    if ((c = opt(ctx, n, 2))) {
        DM_TRY(dm_broadcast(ctx, n, 2, mn, c->rank, c->dims, &r, d));
        if (r != 2 || d[0] != mn[0] || d[1] != mn[1])
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Gemm: C %s does not broadcast to %s",
                                  DSTR(ba, c->rank, c->dims), DSTR(bb, 2, mn));
    }
    return dm_set_out(ctx, n, 0, a->dtype, 2, mn);
}

/* Det: [*, M, M] -> [*]. */
status dm_shape_det(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req(ctx, n, 0, &x));
    if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "Det needs square matrices, got %s",
                              DSTR((char[96]){0}, x->rank, x->dims));
    return dm_set_out(ctx, n, 0, x->dtype, x->rank - 2, x->dims);
}

/* Parse one Einsum term (letters and at most one "...", spaces ignored) up to ',', '-' or the
 * end; *ell is the label index of the ellipsis or -1. Returns the letter count, -1 if bad. */
static int einsum_term(const char **s, char *lab, int *ell)
{
    int nl = 0;
    *ell = -1;
    for (const char *p = *s;; p++) {
        if (*p == ',' || *p == '-' || !*p) {
            *s = p;
            return nl;
        }
        if (*p == '.') {
            if (*ell >= 0 || strncmp(p, "...", 3) != 0)
                return -1;
            *ell = nl;
            p += 2;
        } else if (((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) && nl < MAXD) {
            lab[nl++] = *p;
        } else if (*p != ' ') {
            return -1;
        }
    }
}

/* Einsum: each label names one dim (dims of 1 broadcast), "..." dims broadcast like numpy;
 * without "->" the output is the ellipsis dims, then the labels used once in ASCII order. */
status dm_shape_einsum(struct dm_infer *ctx, const struct dm_node *n)
{
    const char *eq = dm_attr_str(n, "equation", NULL), *p = eq;
    int64_t ldim[128], ed[MAXD] = {0}, tmp[MAXD], d[MAXD];
    int lcnt[128] = {0}, er = 0, r = 0, ni = 0, nl, ell;
    char lab[MAXD];
    const struct dm_tinfo *x0 = NULL;
    if (!eq)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attribute 'equation' is required");
    for (;; p++) {
        const struct dm_tinfo *x;
        if ((nl = einsum_term(&p, lab, &ell)) < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "bad equation '%.80s'", eq);
        if (ni >= n->n_in)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "equation '%.80s' has more terms "
                                  "than the %d inputs", eq, n->n_in);
        DM_TRY(req(ctx, n, ni, &x));
        x0 = x0 ? x0 : x;
        int ne = x->rank - nl;
        if (ell < 0 ? ne != 0 : ne < 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "equation '%.80s': term %d has %d labels, input %d rank %d", eq,
                                  ni, nl, ni, x->rank);
        for (int k = 0; k < nl; k++) {
            unsigned char c = (unsigned char)lab[k];
            int64_t v = x->dims[ell < 0 || k < ell ? k : k + ne];
            if (lcnt[c]++ == 0 || ldim[c] == 1)
                ldim[c] = v;
            else if (v != ldim[c] && v != 1)
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                      "equation '%.80s': label '%c' is %lld and %lld", eq, c,
                                      (long long)ldim[c], (long long)v);
        }
        if (ell >= 0) {
            memcpy(tmp, ed, sizeof tmp);
            DM_TRY(dm_broadcast(ctx, n, er, tmp, ne, x->dims + ell, &er, ed));
        }
        ni++;
        if (*p != ',')
            break;
    }
    if (ni != n->n_in)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "equation '%.80s' has %d terms for %d inputs",
                              eq, ni, n->n_in);
    for (int k = 0; k < er; k++)
        d[r++] = ed[k];
    if (*p == '-') {
        p += 2;
        if (p[-1] != '>' || (nl = einsum_term(&p, lab, &ell)) < 0 || *p)
            return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "bad equation '%.80s'", eq);
        DM_TRY(rank_ok(ctx, n, nl + (ell >= 0 ? er : 0)));
        r = 0;
        for (int k = 0; k <= nl; k++) {
            if (k == ell)
                for (int e = 0; e < er; e++)
                    d[r++] = ed[e];
            if (k == nl)
                break;
            unsigned char c = (unsigned char)lab[k];
            if (lcnt[c] <= 0)
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                      "equation '%.80s': output label '%c' is in no input or "
                                      "repeated", eq, c);
            lcnt[c] = -1;
            d[r++] = ldim[c];
        }
    } else {
        for (int c = 'A'; c <= 'z'; c++)
            if (lcnt[c] == 1) {
                DM_TRY(rank_ok(ctx, n, r + 1));
                d[r++] = ldim[c];
            }
    }
    return dm_set_out(ctx, n, 0, x0->dtype, r, d);
}

/* ---- mixture of experts (the HuggingFace front end's ops) ----------------- */

/* IndexAdd(self, index, source) along axis 0: self's shape and type. */
status dm_shape_index_add(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *ix, *src;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(req(ctx, n, 1, &ix));
    DM_TRY(req(ctx, n, 2, &src));
    if (x->rank < 1 || ix->rank != 1 || src->rank != x->rank || src->dims[0] != ix->dims[0])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "IndexAdd: source [%lld, ...] must have one row per index (%lld) "
                              "and self's rank %d",
                              (long long)(src->rank ? src->dims[0] : 0),
                              (long long)(ix->rank ? ix->dims[0] : 0), x->rank);
    for (int k = 1; k < x->rank; k++)
        if (src->dims[k] != x->dims[k])
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "IndexAdd: source dim %d is %lld, self's %lld", k,
                                  (long long)src->dims[k], (long long)x->dims[k]);
    return dm_set_out(ctx, n, 0, x->dtype, x->rank, x->dims);
}

/* ExpertTokens(expert_mask): the mask is the one-hot of the chosen experts
 * permuted to [experts, ., .], its other two dims the tokens (attribute
 * token_axis, 1 or 2) and the top-k slots. Tokens routed to one expert:
 * the bound value of the dim that attribute `sym` names (at most the token
 * count), else uniform routing, ceil(tokens * top_k / experts). Outputs
 * int64 [n, 2] (nonzero's result) and [n] (the token indices). */
status dm_shape_expert_tokens(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *m;
    DM_TRY(req(ctx, n, 0, &m));
    int64_t axis = dm_attr_int(n, "token_axis", 2), sym = dm_attr_int(n, "sym", -1);
    if (m->rank != 3 || (axis != 1 && axis != 2) || m->dims[0] < 1)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "ExpertTokens: the mask must be [experts, ., .] with the tokens "
                              "on axis 1 or 2");
    int64_t tokens = m->dims[axis], k = m->dims[3 - axis], e = m->dims[0], per;
    if (sym >= 0 && sym < ctx->g->n_symbols && ctx->sym_values && ctx->sym_values[sym] >= 0) {
        per = ctx->sym_values[sym] < tokens ? ctx->sym_values[sym] : tokens;
    } else {
        int64_t slots;
        if (!dm_mul_ok(tokens, k, &slots) || slots > INT64_MAX - e)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "ExpertTokens: the token count overflows");
        per = (slots + e - 1) / e;
    }
    DM_TRY(dm_set_out(ctx, n, 0, DM_INT64, 2, (int64_t[]){per, 2}));
    return dm_set_out(ctx, n, 1, DM_INT64, 1, (int64_t[]){per});
}

/* GroupedMatMul(input [S, K], weight [E, K, N], offs [E]): [S, N] in input's
 * type (torch._grouped_mm's 2-D x 3-D form; ops.def). */
status dm_shape_grouped_matmul(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *w, *offs;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(req(ctx, n, 1, &w));
    DM_TRY(req(ctx, n, 2, &offs));
    if (x->rank != 2 || w->rank != 3 || offs->rank != 1 || w->dims[1] != x->dims[1] ||
        offs->dims[0] != w->dims[0])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "GroupedMatMul: needs input [S, K], weight [E, K, N] and offs [E] "
                              "(ranks %d, %d, %d)",
                              x->rank, w->rank, offs->rank);
    return dm_set_out(ctx, n, 0, x->dtype, 2, (int64_t[]){x->dims[0], w->dims[2]});
}

/* SelectiveScan(dA [B, D, L, N], dBu [B, D, L, N], C [B, L, N]): y [B, D, L]
 * and the last state [B, D, N], in dA's type (ops.def). */
status dm_shape_selective_scan(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *a, *u, *c;
    DM_TRY(req(ctx, n, 0, &a));
    DM_TRY(req(ctx, n, 1, &u));
    DM_TRY(req(ctx, n, 2, &c));
    bool ok = a->rank == 4 && u->rank == 4 && c->rank == 3 && c->dims[0] == a->dims[0] &&
              c->dims[1] == a->dims[2] && c->dims[2] == a->dims[3];
    for (int k = 0; ok && k < 4; k++)
        ok = u->dims[k] == a->dims[k];
    if (!ok)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "SelectiveScan: needs dA and dBu [B, D, L, N] and C [B, L, N] "
                              "(got %s, %s, %s)",
                              DSTR((char[96]){0}, a->rank, a->dims),
                              DSTR((char[96]){0}, u->rank, u->dims),
                              DSTR((char[96]){0}, c->rank, c->dims));
    DM_TRY(dm_set_out(ctx, n, 0, a->dtype, 3, (int64_t[]){a->dims[0], a->dims[1], a->dims[2]}));
    return dm_set_out(ctx, n, 1, a->dtype, 3, (int64_t[]){a->dims[0], a->dims[1], a->dims[3]});
}

/* Narrow(x): axis, start, length attributes; x's shape with length at axis. */
status dm_shape_narrow(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    int a;
    DM_TRY(req(ctx, n, 0, &x));
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &a));
    int64_t start = dm_attr_int(n, "start", 0), len = dm_attr_int(n, "length", -1), d[MAXD];
    if (start < 0 || len < 0 || start > x->dims[a] || len > x->dims[a] - start)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "Narrow: [%lld, %lld + %lld) is not within dim %d of size %lld",
                              (long long)start, (long long)start, (long long)len, a,
                              (long long)x->dims[a]);
    memcpy(d, x->dims, sizeof d);
    d[a] = len;
    return dm_set_out(ctx, n, 0, x->dtype, x->rank, d);
}
