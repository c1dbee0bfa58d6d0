/* elementwise.c: shape functions for elementwise ops, casts, generators of constants.
 *
 * Every function sets its outputs' dtype and dims and, when the inputs it
 * reads have known values and the result is small, folds the output's value:
 * integers (and bools) in int64 wrapped to the output's width, floating point
 * in double rounded to float32 for float outputs. */
#include "dnnmem-impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- inputs, attributes, values ------------------------------------------ */

/* Input i, or NULL when it is omitted or its producer left it out. */
static const struct dm_tinfo *opt_in(struct dm_infer *ctx, const struct dm_node *n, int i)
{
    const struct dm_tinfo *t = dm_in(ctx, n, i);
    return t && !t->absent && t->rank >= 0 ? t : NULL;
}

static enum dnnmem_status req_in(struct dm_infer *ctx, const struct dm_node *n, int i,
                                 const struct dm_tinfo **t)
{
    *t = opt_in(ctx, n, i);
    return *t ? DNNMEM_OK : dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input %d is required", i);
}

/* Input i, when present, holds one element (rank 0, or 1-D of one). */
static enum dnnmem_status scalar_in(struct dm_infer *ctx, const struct dm_node *n, int i,
                                    const char *what)
{
    const struct dm_tinfo *t = opt_in(ctx, n, i);
    if (t && (t->numel != 1 || t->rank > 1))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "input %d (%s) must be a scalar, but has rank %d and %lld elements",
                              i, what, t->rank, (long long)t->numel);
    return DNNMEM_OK;
}

/* Inputs i and j have one element type. */
static enum dnnmem_status same_type(struct dm_infer *ctx, const struct dm_node *n, int i,
                                    const struct dm_tinfo *a, int j, const struct dm_tinfo *b)
{
    if (a->dtype == b->dtype)
        return DNNMEM_OK;
    return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input %d is %s, but input %d is %s", j,
                          dm_dtype_name(b->dtype), i, dm_dtype_name(a->dtype));
}

static bool same_shape(int ra, const int64_t *a, int rb, const int64_t *b)
{
    if (ra != rb)
        return false;
    for (int k = 0; k < ra; k++)
        if (a[k] != b[k])
            return false;
    return true;
}

/* A data type attribute, dflt when absent; Cast before opset 6 names it ("FLOAT"). */
static enum dnnmem_status attr_dtype(struct dm_infer *ctx, const struct dm_node *n,
                                     const char *name, enum dm_dtype dflt, enum dm_dtype *out)
{
    static const char *const names[DM_DTYPE_COUNT] = {
        "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64",
        "STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64",
        "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ", "UINT4", "INT4"};
    const struct dm_attr *a = dm_node_attr(n, name);
    int64_t v = a ? 0 : dflt;
    if (a && a->kind == DM_ATTR_INT)
        v = a->i;
    for (int k = 1; a && a->kind == DM_ATTR_STRING && k < DM_DTYPE_COUNT; k++)
        if (strcmp(a->s, names[k]) == 0)
            v = k;
    if (v <= 0 || v >= DM_DTYPE_COUNT)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attribute '%s' %s", name,
                              a ? "is not a valid data type" : "is required");
    *out = (enum dm_dtype)v;
    return DNNMEM_OK;
}

static double getf(const struct dm_value *v, int64_t k)
{
    return v->is_float ? v->f[k] : (double)v->i[k];
}

static int64_t geti(const struct dm_value *v, int64_t k)
{
    if (!v->is_float)
        return v->i[k];
    double d = v->f[k]; /* truncated and saturated like a C cast that cannot trap */
    return isnan(d) ? 0 : d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : (int64_t)d;
}

/* The value of a tensor when known and consistent with its shape and dtype. */
static const struct dm_value *val(const struct dm_tinfo *t)
{
    return t && t->value && t->value->n == t->numel &&
                   t->value->is_float == dm_dtype_is_float(t->dtype)
               ? t->value
               : NULL;
}

/* An integer as a tensor of integer type t stores it (narrow types wrap). */
static int64_t wrap_int(enum dm_dtype t, int64_t x)
{
    switch (t) {
    case DM_INT8: return (int8_t)x;
    case DM_UINT8: return (uint8_t)x;
    case DM_INT16: return (int16_t)x;
    case DM_UINT16: return (uint16_t)x;
    case DM_INT32: return (int32_t)x;
    case DM_UINT32: return (uint32_t)x;
    case DM_BOOL: return x != 0;
    default: return x;
    }
}

/* x rounded to nearest even in a binary format of `mant` fraction bits, least
 * normal exponent emin and largest finite value max (float32, float16, bfloat16). */
static double round_fp(double x, int mant, int emin, double max)
{
    int e;
    if (!isfinite(x) || x == 0)
        return x;
    (void)frexp(x, &e);
    e = (e - 1 < emin ? emin : e - 1) - mant;
    x = ldexp(nearbyint(ldexp(x, -e)), e);
    return fabs(x) > max ? copysign(INFINITY, x) : x;
}

/* x as a tensor of floating point type t stores it (float8 is not modelled). */
static double round_float(enum dm_dtype t, double x)
{
    switch (t) {
    case DM_FLOAT: return round_fp(x, 23, -126, FLT_MAX);
    case DM_FLOAT16: return round_fp(x, 10, -14, 65504.0);
    case DM_BFLOAT16: return round_fp(x, 7, -126, 3.3895313892515355e38);
    default: return x;
    }
}

/* Attach a freshly computed value to output i, stored as the output's dtype
 * holds it; dtypes whose values are not tracked (strings, complex, 4-bit) get none. */
static enum dnnmem_status put(struct dm_infer *ctx, const struct dm_node *n, int i,
                              struct dm_value *v)
{
    if (!v || !dm_has_out(n, i))
        return DNNMEM_OK;
    enum dm_dtype dt = ctx->t[n->out[i]].dtype;
    if (dm_dtype_bits(dt) < 8 || dt == DM_COMPLEX64 || dt == DM_COMPLEX128)
        return DNNMEM_OK;
    DM_TRY(dm_set_out_value(ctx, n, i, v));
    struct dm_value *w = ctx->t[n->out[i]].value;
    for (int64_t k = 0; w && k < w->n; k++) {
        if (!w->is_float)
            w->i[k] = wrap_int(dt, w->i[k]);
        else
            w->f[k] = round_float(dt, w->f[k]);
    }
    return DNNMEM_OK;
}

/* Output i is input x, value included (Identity, Dropout at inference). */
static enum dnnmem_status pass(struct dm_infer *ctx, const struct dm_node *n, int i,
                               const struct dm_tinfo *x)
{
    DM_TRY(dm_set_out(ctx, n, i, x->dtype, x->rank, x->dims));
    return dm_set_out_value(ctx, n, i, (struct dm_value *)val(x));
}

/* ---- elementwise evaluation ------------------------------------------------ */

/* One operand of an elementwise op: its shape (right-aligned to the output's) and value. */
struct opnd {
    int rank;
    const int64_t *dims;
    const struct dm_value *v;
};

/* Flat index into operand o of output element k. */
static int64_t bidx(const struct opnd *o, int ro, const int64_t *od, int64_t k)
{
    int64_t idx = 0, stride = 1;
    for (int j = ro - 1; j >= 0; j--) {
        int64_t c = k % od[j];
        k /= od[j];
        int jo = j - (ro - o->rank);
        if (jo >= 0) {
            idx += o->dims[jo] == 1 ? 0 : c * stride;
            stride *= o->dims[jo];
        }
    }
    return idx;
}

/* a op b in doubles; false when not folded. */
static bool eval_f(enum dm_op op, double a, double b, double *r)
{
    switch (op) {
    case DM_OP_Add: case DM_OP_Sum: *r = a + b; return true;
    case DM_OP_Sub: *r = a - b; return true;
    case DM_OP_Mul: *r = a * b; return true;
    case DM_OP_Div: *r = a / b; return true;
    case DM_OP_Mod: *r = fmod(a, b); return true; /* float Mod requires fmod=1 */
    case DM_OP_Pow: *r = pow(a, b); return true;
    case DM_OP_PRelu: *r = a < 0 ? a * b : a; return true;
    case DM_OP_Max: *r = (a > b || isnan(a)) ? a : b; return true;
    case DM_OP_Min: *r = (a < b || isnan(a)) ? a : b; return true;
    case DM_OP_Equal: *r = a == b; return true;
    case DM_OP_Greater: *r = a > b; return true;
    case DM_OP_GreaterOrEqual: *r = a >= b; return true;
    case DM_OP_Less: *r = a < b; return true;
    case DM_OP_LessOrEqual: *r = a <= b; return true;
    default: return false;
    }
}

/* a ** b in wrapping int64; false for negative exponents other bases than +-1 give 0 for. */
static bool ipow(int64_t a, int64_t b, int64_t *r)
{
    if (b < 0) {
        if (a != 1 && a != -1)
            return false;
        *r = (a == -1 && (b & 1)) ? -1 : 1;
        return true;
    }
    int64_t acc = 1;
    for (; b; b >>= 1) {
        if (b & 1)
            (void)__builtin_mul_overflow(acc, a, &acc);
        (void)__builtin_mul_overflow(a, a, &a);
    }
    *r = acc;
    return true;
}

/* a op b in wrapping int64 (integer Div truncates toward zero); false when
 * undefined (division by zero) or not folded. `mode`: Mod's fmod, BitShift right. */
static bool eval_i(enum dm_op op, int mode, int64_t a, int64_t b, int64_t *r)
{
    switch (op) {
    case DM_OP_Add: case DM_OP_Sum: (void)__builtin_add_overflow(a, b, r); return true;
    case DM_OP_Sub: (void)__builtin_sub_overflow(a, b, r); return true;
    case DM_OP_Mul: (void)__builtin_mul_overflow(a, b, r); return true;
    case DM_OP_Div:
        if (b == 0 || (a == INT64_MIN && b == -1))
            return false;
        *r = a / b;
        return true;
    case DM_OP_Mod: /* fmod=1: sign of the dividend (C's %); 0: sign of the divisor */
        if (b == 0)
            return false;
        *r = b == -1 ? 0 : a % b;
        if (!mode && *r != 0 && ((*r < 0) != (b < 0)))
            *r += b;
        return true;
    case DM_OP_Pow: return ipow(a, b, r);
    case DM_OP_PRelu: *r = a; if (a < 0) (void)__builtin_mul_overflow(a, b, r); return true;
    case DM_OP_BitShift:
        *r = b < 0 || b >= 64 ? 0 : (int64_t)(mode ? (uint64_t)a >> b : (uint64_t)a << b);
        return true;
    case DM_OP_And: *r = a && b; return true;
    case DM_OP_Or: *r = a || b; return true;
    case DM_OP_Xor: *r = !a != !b; return true;
    case DM_OP_Max: *r = a > b ? a : b; return true;
    case DM_OP_Min: *r = a < b ? a : b; return true;
    case DM_OP_Equal: *r = a == b; return true;
    case DM_OP_Greater: *r = a > b; return true;
    case DM_OP_GreaterOrEqual: *r = a >= b; return true;
    case DM_OP_Less: *r = a < b; return true;
    case DM_OP_LessOrEqual: *r = a <= b; return true;
    default: return false;
    }
}

/* The value of a binary op (or Where: cond, x, y) over broadcast operands,
 * computed in doubles when fl; NULL when an operand's value is unknown, the
 * result is large, undefined or not folded. */
static struct dm_value *fold(struct dm_infer *ctx, enum dm_op op, int mode, int nops,
                             const struct opnd *o, bool fl, int ro, const int64_t *od)
{
    int64_t numel = 1;
    for (int j = 0; j < ro; j++)
        if (!dm_mul_ok(numel, od[j], &numel))
            return NULL;
    for (int j = 0; j < nops; j++)
        if (!o[j].v)
            return NULL;
    struct dm_value *r = dm_value_new(ctx, numel, fl);
    for (int64_t k = 0; r && k < numel; k++) {
        const struct opnd *a = &o[0], *b = &o[1];
        if (op == DM_OP_Where) {
            a = geti(o[0].v, bidx(&o[0], ro, od, k)) ? &o[1] : &o[2];
            int64_t ia = bidx(a, ro, od, k);
            if (fl)
                r->f[k] = getf(a->v, ia);
            else
                r->i[k] = geti(a->v, ia);
            continue;
        }
        int64_t ia = bidx(a, ro, od, k), ib = bidx(b, ro, od, k);
        if (!(fl ? eval_f(op, getf(a->v, ia), getf(b->v, ib), &r->f[k])
                 : eval_i(op, mode, geti(a->v, ia), geti(b->v, ib), &r->i[k])))
            return NULL;
    }
    return r;
}

/* f(x) in doubles; false when not folded. */
static bool eval1_f(enum dm_op op, double x, double *r)
{
    switch (op) {
    case DM_OP_Abs: *r = fabs(x); return true;
    case DM_OP_Neg: *r = -x; return true;
    case DM_OP_Floor: *r = floor(x); return true;
    case DM_OP_Ceil: *r = ceil(x); return true;
    case DM_OP_Round: *r = nearbyint(x); return true; /* half to even */
    case DM_OP_Sqrt: *r = sqrt(x); return true;
    case DM_OP_Relu: *r = x > 0 ? x : 0; return true;
    case DM_OP_Sign: *r = isnan(x) ? x : (x > 0) - (x < 0); return true;
    case DM_OP_Reciprocal: *r = 1 / x; return true;
    case DM_OP_Exp: *r = exp(x); return true;
    case DM_OP_Log: *r = log(x); return true;
    case DM_OP_Sin: *r = sin(x); return true;
    case DM_OP_Cos: *r = cos(x); return true;
    case DM_OP_Tan: *r = tan(x); return true;
    case DM_OP_Tanh: *r = tanh(x); return true;
    case DM_OP_Sigmoid: *r = 1 / (1 + exp(-x)); return true;
    case DM_OP_Erf: *r = erf(x); return true;
    default: return false;
    }
}

/* f(x) in wrapping int64; false when not folded. */
static bool eval1_i(enum dm_op op, int64_t x, int64_t *r)
{
    uint64_t neg = 0 - (uint64_t)x;
    switch (op) {
    case DM_OP_Abs: *r = x < 0 ? (int64_t)neg : x; return true;
    case DM_OP_Neg: *r = (int64_t)neg; return true;
    case DM_OP_Floor: case DM_OP_Ceil: case DM_OP_Round: *r = x; return true;
    case DM_OP_Relu: *r = x > 0 ? x : 0; return true;
    case DM_OP_Sign: *r = (x > 0) - (x < 0); return true;
    case DM_OP_Not: *r = !x; return true;
    default: return false;
    }
}

/* ---- elementwise ops --------------------------------------------------------- */

/* Before opset 7, B combines with A only when broadcast=1, its dims aligned
 * with A's from `axis` (default: trailing); writes B's shape padded to A's rank. */
static enum dnnmem_status legacy_b(struct dm_infer *ctx, const struct dm_node *n,
                                   const struct dm_tinfo *a, const struct dm_tinfo *b,
                                   int64_t *bd)
{
    if (!dm_attr_int(n, "broadcast", 0)) {
        if (!same_shape(a->rank, a->dims, b->rank, b->dims))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "before opset 7 the inputs must have one shape unless "
                                  "broadcast=1");
        memcpy(bd, b->dims, sizeof *bd * (size_t)b->rank);
        return DNNMEM_OK;
    }
    int64_t axis = dm_attr_int(n, "axis", a->rank - b->rank);
    if (b->rank > a->rank || axis < 0 || axis > a->rank - b->rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "B (rank %d) cannot broadcast to A (rank %d) at axis %lld", b->rank,
                              a->rank, (long long)axis);
    for (int k = 0; k < a->rank; k++)
        bd[k] = 1;
    for (int k = 0; k < b->rank; k++) {
        int64_t da = a->dims[axis + k];
        if (b->dims[k] != da && b->dims[k] != 1)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "B's dim %d is %lld, but A's dim %lld is %lld", k,
                                  (long long)b->dims[k], (long long)(axis + k), (long long)da);
        bd[axis + k] = b->dims[k];
    }
    return DNNMEM_OK;
}

/* Inputs 0 and 1 combined elementwise into output 0 of dtype dt (UNDEFINED:
 * input 0's): numpy broadcasting (legacy rules before opset 7; PRelu's slope
 * broadcasts to X); one input type except Pow's exponent; folded when known. */
static enum dnnmem_status ew2(struct dm_infer *ctx, const struct dm_node *n, enum dm_dtype dt)
{
    const struct dm_tinfo *a, *b;
    DM_TRY(req_in(ctx, n, 0, &a));
    DM_TRY(req_in(ctx, n, 1, &b));
    if (n->op != DM_OP_Pow)
        DM_TRY(same_type(ctx, n, 0, a, 1, b));
    int64_t bd[DM_MAX_DIMS], od[DM_MAX_DIMS];
    struct opnd o[2] = {{a->rank, a->dims, val(a)}, {b->rank, b->dims, val(b)}};
    if (ctx->g->opset < 7 && n->op != DM_OP_PRelu) {
        DM_TRY(legacy_b(ctx, n, a, b, bd));
        o[1] = (struct opnd){a->rank, bd, val(b)};
    }
    int ro;
    DM_TRY(dm_broadcast(ctx, n, o[0].rank, o[0].dims, o[1].rank, o[1].dims, &ro, od));
    if (n->op == DM_OP_PRelu && !same_shape(ro, od, a->rank, a->dims))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "slope does not broadcast to X's shape");
    int mode = 0;
    if (n->op == DM_OP_Mod)
        mode = dm_attr_int(n, "fmod", 0) != 0;
    if (n->op == DM_OP_BitShift) {
        const char *dir = dm_attr_str(n, "direction", "");
        if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
            return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                                  "attribute 'direction' must be LEFT or RIGHT");
        mode = dir[0] == 'R';
    }
    DM_TRY(dm_set_out(ctx, n, 0, dt ? dt : a->dtype, ro, od));
    bool fl = dm_dtype_is_float(a->dtype) || dm_dtype_is_float(b->dtype);
    return put(ctx, n, 0, fold(ctx, n->op, mode, 2, o, fl, ro, od));
}

/* Arithmetic, logical, bitwise binary ops and PRelu: input 0's dtype, broadcast shape. */
enum dnnmem_status dm_shape_binary(struct dm_infer *ctx, const struct dm_node *n)
{
    return ew2(ctx, n, DM_UNDEFINED);
}

/* Equal, Greater, Less...: bool, broadcast shape. */
enum dnnmem_status dm_shape_compare(struct dm_infer *ctx, const struct dm_node *n)
{
    return ew2(ctx, n, DM_BOOL);
}

/* Pow(X, Y): X's dtype (Y may have another type), broadcast shape. */
enum dnnmem_status dm_shape_pow(struct dm_infer *ctx, const struct dm_node *n)
{
    return ew2(ctx, n, DM_UNDEFINED);
}

/* Max/Min/Sum/Mean: every input broadcast together (one shape before opset 8),
 * input 0's dtype; folded pairwise. */
enum dnnmem_status dm_shape_variadic(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *t0, *t;
    DM_TRY(req_in(ctx, n, 0, &t0));
    if (n->n_in == 1)
        return pass(ctx, n, 0, t0);
    int64_t dims[2][DM_MAX_DIMS];
    int r = t0->rank, cur = 0;
    memcpy(dims[0], t0->dims, sizeof dims[0]);
    const struct dm_value *v = val(t0);
    struct dm_value *acc = NULL;
    bool fl = dm_dtype_is_float(t0->dtype);
    for (int i = 1; i < n->n_in; i++) {
        DM_TRY(req_in(ctx, n, i, &t));
        DM_TRY(same_type(ctx, n, 0, t0, i, t));
        if (ctx->g->opset < 8 && !same_shape(r, dims[cur], t->rank, t->dims))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "before opset 8 every input must have input 0's shape; "
                                  "input %d differs", i);
        struct opnd o[2] = {{r, dims[cur], v}, {t->rank, t->dims, val(t)}};
        DM_TRY(dm_broadcast(ctx, n, r, dims[cur], t->rank, t->dims, &r, dims[!cur]));
        cur = !cur;
        v = acc = fold(ctx, n->op == DM_OP_Mean ? DM_OP_Sum : n->op, 0, 2, o, fl, r, dims[cur]);
    }
    if (n->op == DM_OP_Mean && !fl)
        acc = NULL; /* Mean is defined for floats only */
    for (int64_t k = 0; acc && n->op == DM_OP_Mean && k < acc->n; k++)
        acc->f[k] /= n->n_in;
    DM_TRY(dm_set_out(ctx, n, 0, t0->dtype, r, dims[cur]));
    return put(ctx, n, 0, acc);
}

/* Where(cond, X, Y): the three shapes broadcast together, X's dtype (Y's too). */
enum dnnmem_status dm_shape_where(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *c, *x, *y;
    DM_TRY(req_in(ctx, n, 0, &c));
    DM_TRY(req_in(ctx, n, 1, &x));
    DM_TRY(req_in(ctx, n, 2, &y));
    DM_TRY(same_type(ctx, n, 1, x, 2, y));
    if (c->dtype != DM_BOOL)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "condition must be bool, not %s",
                              dm_dtype_name(c->dtype));
    int64_t d1[DM_MAX_DIMS], d2[DM_MAX_DIMS];
    int r1, r2;
    DM_TRY(dm_broadcast(ctx, n, c->rank, c->dims, x->rank, x->dims, &r1, d1));
    DM_TRY(dm_broadcast(ctx, n, r1, d1, y->rank, y->dims, &r2, d2));
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, r2, d2));
    struct opnd o[3] = {{c->rank, c->dims, val(c)}, {x->rank, x->dims, val(x)},
                        {y->rank, y->dims, val(y)}};
    return put(ctx, n, 0, fold(ctx, DM_OP_Where, 0, 3, o, dm_dtype_is_float(x->dtype), r2, d2));
}

/* Checks of ops that share dm_shape_unary but take more inputs or an axis. */
static enum dnnmem_status unary_checks(struct dm_infer *ctx, const struct dm_node *n,
                                       const struct dm_tinfo *x)
{
    const struct dm_tinfo *a = NULL, *b = NULL;
    const struct dm_attr *axis = dm_node_attr(n, "axis");
    int ax;
    switch (n->op) {
    case DM_OP_Scatter:
    case DM_OP_ScatterElements: /* indices: data's rank; updates: indices' shape */
        DM_TRY(req_in(ctx, n, 1, &a));
        DM_TRY(req_in(ctx, n, 2, &b));
        if (a->rank != x->rank || !same_shape(a->rank, a->dims, b->rank, b->dims))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "indices must have data's rank and updates indices' shape");
        return dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &ax);
    case DM_OP_ScatterND: { /* updates: indices.shape[:-1] + data.shape[indices.shape[-1]:] */
        DM_TRY(req_in(ctx, n, 1, &a));
        DM_TRY(req_in(ctx, n, 2, &b));
        int64_t k = a->rank ? a->dims[a->rank - 1] : -1, want[2 * DM_MAX_DIMS];
        if (k < 0 || k > x->rank)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "indices' last dim must be at most data's rank %d", x->rank);
        int r = 0;
        for (int j = 0; j < a->rank - 1; j++)
            want[r++] = a->dims[j];
        for (int j = (int)k; j < x->rank; j++)
            want[r++] = x->dims[j];
        if (!same_shape(r, want, b->rank, b->dims))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "updates' shape does not match indices and data");
        return DNNMEM_OK;
    }
    case DM_OP_Trilu:
        if (x->rank < 2)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "input must have rank >= 2, not %d",
                                  x->rank);
        return scalar_in(ctx, n, 1, "k");
    case DM_OP_CumSum:
        DM_TRY(req_in(ctx, n, 1, &a));
        DM_TRY(scalar_in(ctx, n, 1, "axis"));
        return val(a) ? dm_axis(ctx, n, geti(val(a), 0), x->rank, &ax) : DNNMEM_OK;
    case DM_OP_ReverseSequence: { /* sequence_lens: [batch] */
        DM_TRY(req_in(ctx, n, 1, &a));
        int64_t bx = dm_attr_int(n, "batch_axis", 1), tx = dm_attr_int(n, "time_axis", 0);
        if (x->rank < 2 || bx == tx || (bx != 0 && bx != 1) || (tx != 0 && tx != 1))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "needs rank >= 2 and batch_axis, time_axis in {0, 1}");
        if (a->rank != 1 || a->dims[0] != x->dims[bx])
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "sequence_lens must be 1-D of the batch size %lld",
                                  (long long)x->dims[bx]);
        return DNNMEM_OK;
    }
    case DM_OP_InstanceNormalization: /* scale, B: [C] */
        DM_TRY(req_in(ctx, n, 1, &a));
        DM_TRY(req_in(ctx, n, 2, &b));
        if (x->rank < 2 || a->rank != 1 || b->rank != 1 || a->dims[0] != x->dims[1] ||
            b->dims[0] != x->dims[1])
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "needs input rank >= 2 and scale, B of shape [C]");
        return DNNMEM_OK;
    case DM_OP_GroupNormalization: { /* scale, bias: [C]; num_groups divides C */
        DM_TRY(req_in(ctx, n, 1, &a));
        /* the bias is omitted only by lift.c's nn.GroupNorm without one */
        if (dm_attr_int(n, "dnnmem_no_bias", 0))
            b = a;
        else
            DM_TRY(req_in(ctx, n, 2, &b));
        int64_t groups = dm_attr_int(n, "num_groups", 0);
        if (x->rank < 2 || a->rank != 1 || b->rank != 1 || a->dims[0] != x->dims[1] ||
            b->dims[0] != x->dims[1] || groups <= 0 || x->dims[1] % groups != 0)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "needs input rank >= 2, scale and bias of shape [C] and "
                                  "num_groups dividing C");
        return DNNMEM_OK;
    }
    case DM_OP_Softmax:
    case DM_OP_LogSoftmax:
    case DM_OP_Hardmax:
    case DM_OP_LpNormalization:
        return axis ? dm_axis(ctx, n, dm_attr_int(n, "axis", 0), x->rank, &ax) : DNNMEM_OK;
    default:
        return DNNMEM_OK;
    }
}

/* Unary math ops and every op whose output 0 is input 0's dtype and shape. */
enum dnnmem_status dm_shape_unary(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(unary_checks(ctx, n, x));
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, x->dims));
    const struct dm_value *v = val(x);
    bool fl = dm_dtype_is_float(x->dtype);
    struct dm_value *r = v ? dm_value_new(ctx, v->n, fl) : NULL;
    for (int64_t k = 0; r && k < v->n; k++)
        if (!(fl ? eval1_f(n->op, getf(v, k), &r->f[k]) : eval1_i(n->op, geti(v, k), &r->i[k])))
            r = NULL;
    return put(ctx, n, 0, r);
}

/* IsNaN, IsInf (detect_positive, detect_negative): bool, input's shape. */
enum dnnmem_status dm_shape_unary_bool(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(dm_set_out(ctx, n, 0, DM_BOOL, x->rank, x->dims));
    const struct dm_value *v = val(x);
    struct dm_value *r = v ? dm_value_new(ctx, v->n, false) : NULL;
    bool pos = dm_attr_int(n, "detect_positive", 1), neg = dm_attr_int(n, "detect_negative", 1);
    for (int64_t k = 0; r && k < v->n; k++) {
        double d = getf(v, k);
        r->i[k] = n->op == DM_OP_IsNaN ? isnan(d) : isinf(d) && (d > 0 ? pos : neg);
    }
    return put(ctx, n, 0, r);
}

/* ---- casts, clips, pass-throughs ---------------------------------------------- */

/* Output 0: x's shape as dtype `to`, values converted (float to bool: x != 0). */
static enum dnnmem_status cast_to(struct dm_infer *ctx, const struct dm_node *n,
                                  const struct dm_tinfo *x, enum dm_dtype to)
{
    DM_TRY(dm_set_out(ctx, n, 0, to, x->rank, x->dims));
    const struct dm_value *v = val(x);
    bool fl = dm_dtype_is_float(to);
    struct dm_value *r = v && x->dtype != DM_STRING ? dm_value_new(ctx, v->n, fl) : NULL;
    for (int64_t k = 0; r && k < v->n; k++) {
        if (fl)
            r->f[k] = getf(v, k);
        else
            r->i[k] = to == DM_BOOL ? getf(v, k) != 0 : geti(v, k);
    }
    return put(ctx, n, 0, r);
}

/* Cast: input's shape, dtype `to` (a type name before opset 6). */
enum dnnmem_status dm_shape_cast(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    enum dm_dtype to;
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(attr_dtype(ctx, n, "to", DM_UNDEFINED, &to));
    return cast_to(ctx, n, x, to);
}

/* CastLike(x, target): x's shape, target's dtype. */
enum dnnmem_status dm_shape_castlike(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *like;
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(req_in(ctx, n, 1, &like));
    return cast_to(ctx, n, x, like->dtype);
}

/* Clip: input's dtype and shape; bounds are attributes min, max before opset
 * 11, optional scalar inputs 1, 2 of the input's type after; min(max(x, lo), hi). */
enum dnnmem_status dm_shape_clip(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, &x));
    double flo = dm_attr_float(n, "min", -INFINITY), fhi = dm_attr_float(n, "max", INFINITY);
    int64_t ilo = INT64_MIN, ihi = INT64_MAX;
    bool known = true;
    for (int j = 1; ctx->g->opset >= 11 && j <= 2; j++) {
        const struct dm_tinfo *b = opt_in(ctx, n, j);
        if (!b)
            continue;
        DM_TRY(scalar_in(ctx, n, j, j == 1 ? "min" : "max"));
        DM_TRY(same_type(ctx, n, 0, x, j, b));
        known = known && val(b);
        if (!val(b))
            continue;
        *(j == 1 ? &flo : &fhi) = getf(val(b), 0);
        *(j == 1 ? &ilo : &ihi) = geti(val(b), 0);
    }
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, x->dims));
    const struct dm_value *v = val(x);
    bool fl = dm_dtype_is_float(x->dtype);
    struct dm_value *r = v && known ? dm_value_new(ctx, v->n, fl) : NULL;
    for (int64_t k = 0; r && k < v->n; k++) {
        if (fl) {
            double d = getf(v, k) < flo ? flo : getf(v, k);
            r->f[k] = d > fhi ? fhi : d;
        } else {
            int64_t i = geti(v, k) < ilo ? ilo : geti(v, k);
            r->i[k] = i > ihi ? ihi : i;
        }
    }
    return put(ctx, n, 0, r);
}

/* Dropout: output 0 is the input (the identity at inference); the optional
 * mask has its shape, bool from opset 10 (the input's dtype before). ratio and
 * training_mode: attributes before opset 12, optional scalar inputs after. */
enum dnnmem_status dm_shape_dropout(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *mode = opt_in(ctx, n, 2);
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(scalar_in(ctx, n, 1, "ratio"));
    DM_TRY(scalar_in(ctx, n, 2, "training_mode"));
    DM_TRY(dm_set_out(ctx, n, 1, ctx->g->opset >= 10 ? DM_BOOL : x->dtype, x->rank, x->dims));
    if (mode && (!val(mode) || geti(val(mode), 0)))
        return dm_set_out(ctx, n, 0, x->dtype, x->rank, x->dims); /* training: random */
    return pass(ctx, n, 0, x);
}

/* Identity: the input, value included. */
enum dnnmem_status dm_shape_identity(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, &x));
    return pass(ctx, n, 0, x);
}

/* ---- quantization ------------------------------------------------------------- */

/* Quantization parameters (scale s, zero point z) for x: a scalar, 1-D of x's
 * dim at `axis` (default 1), or blocked with x's rank and ceil(dim / block_size)
 * at `axis`; z has s's shape. */
static enum dnnmem_status quant_params(struct dm_infer *ctx, const struct dm_node *n,
                                       const struct dm_tinfo *x, const struct dm_tinfo *s,
                                       const struct dm_tinfo *z)
{
    if (z && !same_shape(s->rank, s->dims, z->rank, z->dims))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "zero point's shape must be scale's");
    if (s->rank == 0 || (s->rank == 1 && s->numel == 1))
        return DNNMEM_OK;
    int ax;
    int64_t block = dm_attr_int(n, "block_size", 0);
    DM_TRY(dm_axis(ctx, n, dm_attr_int(n, "axis", 1), x->rank, &ax));
    if (s->rank == 1 && block <= 0) {
        if (s->dims[0] != x->dims[ax])
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "scale has %lld elements, but x's axis %d has %lld",
                                  (long long)s->dims[0], ax, (long long)x->dims[ax]);
        return DNNMEM_OK;
    }
    bool ok = s->rank == x->rank && block > 0;
    for (int k = 0; ok && k < x->rank; k++)
        ok = s->dims[k] == (k == ax ? x->dims[k] / block + (x->dims[k] % block != 0) : x->dims[k]);
    return ok ? DNNMEM_OK
              : dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                               "scale must be a scalar, 1-D of x's axis, or blocked with x's rank");
}

/* QuantizeLinear(x, scale, zero_point): x's shape; zero_point's dtype, else
 * attribute output_dtype (opset 21), else uint8. */
enum dnnmem_status dm_shape_quantize(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *s, *z = opt_in(ctx, n, 2);
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(req_in(ctx, n, 1, &s));
    DM_TRY(quant_params(ctx, n, x, s, z));
    enum dm_dtype dt = DM_UINT8;
    if (z)
        dt = z->dtype;
    else if (dm_attr_int(n, "output_dtype", 0))
        DM_TRY(attr_dtype(ctx, n, "output_dtype", DM_UINT8, &dt));
    return dm_set_out(ctx, n, 0, dt, x->rank, x->dims);
}

/* DequantizeLinear(x, scale, zero_point): x's shape; attribute output_dtype
 * when set, else scale's dtype (float before opset 19). */
enum dnnmem_status dm_shape_dequantize(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x, *s, *z = opt_in(ctx, n, 2);
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(req_in(ctx, n, 1, &s));
    DM_TRY(quant_params(ctx, n, x, s, z));
    enum dm_dtype dt = s->dtype;
    if (dm_attr_int(n, "output_dtype", 0))
        DM_TRY(attr_dtype(ctx, n, "output_dtype", s->dtype, &dt));
    return dm_set_out(ctx, n, 0, dt, x->rank, x->dims);
}

/* DynamicQuantizeLinear(x): y uint8 of x's shape, scale float scalar, zero point uint8 scalar. */
enum dnnmem_status dm_shape_dynamic_quantize(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(dm_set_out(ctx, n, 0, DM_UINT8, x->rank, x->dims));
    DM_TRY(dm_set_out(ctx, n, 1, DM_FLOAT, 0, NULL));
    return dm_set_out(ctx, n, 2, DM_UINT8, 0, NULL);
}

/* ---- random generators ---------------------------------------------------------- */

/* Output 0 of x's shape, dtype attribute `dtype` defaulting to x's. */
static enum dnnmem_status like_input(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    enum dm_dtype dt;
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(attr_dtype(ctx, n, "dtype", x->dtype, &dt));
    return dm_set_out(ctx, n, 0, dt, x->rank, x->dims);
}

/* Bernoulli(p): p's shape, dtype attribute (default p's). */
enum dnnmem_status dm_shape_bernoulli(struct dm_infer *ctx, const struct dm_node *n)
{
    return like_input(ctx, n);
}

/* RandomNormalLike, RandomUniformLike: the input's shape, dtype attribute (default the input's). */
enum dnnmem_status dm_shape_random_like(struct dm_infer *ctx, const struct dm_node *n)
{
    return like_input(ctx, n);
}

/* RandomNormal, RandomUniform: attribute `shape`, dtype attribute (default float). */
enum dnnmem_status dm_shape_random(struct dm_infer *ctx, const struct dm_node *n)
{
    int64_t rank;
    const int64_t *shape = dm_attr_ints(n, "shape", &rank);
    enum dm_dtype dt;
    if (!shape)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attribute 'shape' is required");
    DM_TRY(attr_dtype(ctx, n, "dtype", DM_FLOAT, &dt));
    return dm_set_out(ctx, n, 0, dt, rank > DM_MAX_DIMS ? DM_MAX_DIMS + 1 : (int)rank, shape);
}

/* Multinomial(input [batch, classes]): [batch, sample_size], dtype int32 or int64 (default int32). */
enum dnnmem_status dm_shape_multinomial(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    enum dm_dtype dt;
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(attr_dtype(ctx, n, "dtype", DM_INT32, &dt));
    if (x->rank != 2)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "input must be [batch, classes], not rank %d",
                              x->rank);
    if (dt != DM_INT32 && dt != DM_INT64)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "dtype must be int32 or int64, not %s",
                              dm_dtype_name(dt));
    int64_t dims[2] = {x->dims[0], dm_attr_int(n, "sample_size", 1)};
    return dm_set_out(ctx, n, 0, dt, 2, dims);
}

/* ---- constants and generators ----------------------------------------------------- */

/* The dims and element count of a tensor attribute. */
static int64_t tensor_dims(const struct dm_tensor *t, int64_t *dims)
{
    int64_t numel = 1;
    for (int k = 0; k < t->rank && k < DM_MAX_DIMS; k++) {
        dims[k] = t->dims[k].value;
        numel *= dims[k]; /* the loader checked it does not overflow */
    }
    return numel;
}

/* Constant: exactly one attribute: value (a tensor), value_float, value_int,
 * value_string (scalars), value_floats, value_ints, value_strings (1-D), or sparse_value. */
enum dnnmem_status dm_shape_constant(struct dm_infer *ctx, const struct dm_node *n)
{
    static const struct {
        const char *name;
        enum dm_attr_kind kind;
        enum dm_dtype dtype;
    } forms[] = {
        {"value", DM_ATTR_TENSOR, DM_UNDEFINED},   {"value_float", DM_ATTR_FLOAT, DM_FLOAT},
        {"value_floats", DM_ATTR_FLOATS, DM_FLOAT}, {"value_int", DM_ATTR_INT, DM_INT64},
        {"value_ints", DM_ATTR_INTS, DM_INT64},     {"value_string", DM_ATTR_STRING, DM_STRING},
        {"value_strings", DM_ATTR_STRINGS, DM_STRING}, {"sparse_value", DM_ATTR_OTHER, DM_UNDEFINED},
    };
    const struct dm_attr *a = NULL;
    int found = 0, f = 0;
    for (int k = 0; k < (int)(sizeof forms / sizeof forms[0]); k++) {
        const struct dm_attr *ak = dm_node_attr(n, forms[k].name);
        if (ak) {
            a = ak;
            f = k;
            found++;
        }
    }
    if (found != 1)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              "needs exactly one value attribute, has %d", found);
    if (a->kind != forms[f].kind || (a->kind == DM_ATTR_TENSOR && !a->t))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "attribute '%s' has the wrong type",
                              a->name);
    if (a->kind == DM_ATTR_OTHER)
        return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED,
                              "a sparse_value constant is not supported");
    if (a->kind == DM_ATTR_TENSOR) {
        int64_t dims[DM_MAX_DIMS];
        int64_t numel = tensor_dims(a->t, dims);
        DM_TRY(dm_set_out(ctx, n, 0, a->t->dtype, a->t->rank, dims));
        struct dm_value *v = a->t->value;
        return dm_set_out_value(ctx, n, 0, v && v->n == numel ? v : NULL);
    }
    bool list = a->kind == DM_ATTR_FLOATS || a->kind == DM_ATTR_INTS || a->kind == DM_ATTR_STRINGS;
    int64_t len = list ? a->n : 1;
    DM_TRY(dm_set_out(ctx, n, 0, forms[f].dtype, list, &len));
    struct dm_value *v = a->kind == DM_ATTR_STRING || a->kind == DM_ATTR_STRINGS
                             ? NULL
                             : dm_value_new(ctx, len, forms[f].dtype == DM_FLOAT);
    for (int64_t k = 0; v && k < len; k++) {
        if (v->is_float)
            v->f[k] = list ? a->floats[k] : a->f;
        else
            v->i[k] = list ? a->ints[k] : a->i;
    }
    return put(ctx, n, 0, v);
}

/* ConstantOfShape(shape): dims = the 1-D input's values; dtype and fill value
 * of the one-element tensor attribute `value` (default float 0). */
enum dnnmem_status dm_shape_constant_of_shape(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *s;
    const int64_t *dims;
    int64_t rank, d1[DM_MAX_DIMS];
    DM_TRY(req_in(ctx, n, 0, &s));
    if (s->rank != 1)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "the shape input must be 1-D, not rank %d",
                              s->rank);
    DM_TRY(dm_in_ints(ctx, n, 0, &dims, &rank));
    const struct dm_attr *a = dm_node_attr(n, "value");
    if (a && (a->kind != DM_ATTR_TENSOR || !a->t || tensor_dims(a->t, d1) != 1))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              "attribute 'value' must be a one-element tensor");
    enum dm_dtype dt = a ? a->t->dtype : DM_FLOAT;
    DM_TRY(dm_set_out(ctx, n, 0, dt, rank > DM_MAX_DIMS ? DM_MAX_DIMS + 1 : (int)rank, dims));
    const struct dm_value *fill = a ? a->t->value : NULL;
    if (a && (!fill || fill->n != 1))
        return DNNMEM_OK;
    bool fl = dm_dtype_is_float(dt);
    struct dm_value *v = dm_has_out(n, 0) ? dm_value_new(ctx, ctx->t[n->out[0]].numel, fl) : NULL;
    for (int64_t k = 0; v && k < v->n; k++) {
        if (fl)
            v->f[k] = fill ? getf(fill, 0) : 0;
        else
            v->i[k] = fill ? geti(fill, 0) : 0;
    }
    return put(ctx, n, 0, v);
}

/* Range(start, limit, delta): scalars of one type; 1-D of
 * max(ceil((limit - start) / delta), 0) elements, start's dtype. */
enum dnnmem_status dm_shape_range(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *t[3];
    static const char *const what[3] = {"start", "limit", "delta"};
    for (int j = 0; j < 3; j++) {
        DM_TRY(req_in(ctx, n, j, &t[j]));
        DM_TRY(scalar_in(ctx, n, j, what[j]));
        DM_TRY(same_type(ctx, n, 0, t[0], j, t[j]));
    }
    bool fl = dm_dtype_is_float(t[0]->dtype);
    const double *f[3];
    const int64_t *i[3];
    int64_t len, cnt;
    for (int j = 0; j < 3; j++)
        DM_TRY(fl ? dm_in_floats(ctx, n, j, &f[j], &cnt) : dm_in_ints(ctx, n, j, &i[j], &cnt));
    if (fl) {
        /* limit - start is computed in the input type */
        double q = ceil(round_float(t[0]->dtype, *f[1] - *f[0]) / *f[2]);
        if (!(fabs(q) < 4e18))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "start %g, limit %g, delta %g give no finite length", *f[0],
                                  *f[1], *f[2]);
        len = q > 0 ? (int64_t)q : 0;
    } else {
        int64_t diff, d = *i[2];
        if (d == 0 || __builtin_sub_overflow(*i[1], *i[0], &diff) || (diff == INT64_MIN && d == -1))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                                  "start %lld, limit %lld, delta %lld give no valid length",
                                  (long long)*i[0], (long long)*i[1], (long long)d);
        len = diff / d + (diff % d != 0 && (diff < 0) == (d < 0));
        len = len > 0 ? len : 0;
    }
    DM_TRY(dm_set_out(ctx, n, 0, t[0]->dtype, 1, &len));
    struct dm_value *v = dm_value_new(ctx, len, fl);
    for (int64_t k = 0; v && k < len; k++) {
        if (fl)
            v->f[k] = *f[0] + (double)k * *f[2];
        else
            v->i[k] = *i[0] + k * *i[2]; /* within [start, limit) */
    }
    return put(ctx, n, 0, v);
}

/* EyeLike(x): 2-D x's shape, ones on diagonal k; dtype attribute (default x's). */
enum dnnmem_status dm_shape_eyelike(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    DM_TRY(req_in(ctx, n, 0, &x));
    if (x->rank != 2)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "input must be 2-D, not rank %d", x->rank);
    DM_TRY(like_input(ctx, n));
    const struct dm_tinfo *y = dm_has_out(n, 0) ? &ctx->t[n->out[0]] : NULL;
    struct dm_value *v = y ? dm_value_new(ctx, y->numel, false) : NULL;
    int64_t k = dm_attr_int(n, "k", 0);
    for (int64_t e = 0; v && e < v->n; e++)
        v->i[e] = e % x->dims[1] - e / x->dims[1] == k;
    return put(ctx, n, 0, v);
}

/* Hann, Hamming, BlackmanWindow(size): 1-D [size], dtype output_datatype (default float). */
enum dnnmem_status dm_shape_window(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x;
    const int64_t *size;
    int64_t cnt;
    enum dm_dtype dt;
    DM_TRY(req_in(ctx, n, 0, &x));
    DM_TRY(scalar_in(ctx, n, 0, "size"));
    DM_TRY(dm_in_ints(ctx, n, 0, &size, &cnt));
    DM_TRY(attr_dtype(ctx, n, "output_datatype", DM_FLOAT, &dt));
    return dm_set_out(ctx, n, 0, dt, 1, size);
}

/* MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
 * upper_edge_hertz): [dft_length / 2 + 1, num_mel_bins], dtype output_datatype (default float). */
enum dnnmem_status dm_shape_mel_weight_matrix(struct dm_infer *ctx, const struct dm_node *n)
{
    static const char *const what[5] = {"num_mel_bins", "dft_length", "sample_rate",
                                        "lower_edge_hertz", "upper_edge_hertz"};
    const struct dm_tinfo *x;
    const int64_t *bins, *dft;
    int64_t cnt;
    enum dm_dtype dt;
    for (int j = 0; j < 5; j++) {
        DM_TRY(req_in(ctx, n, j, &x));
        DM_TRY(scalar_in(ctx, n, j, what[j]));
    }
    DM_TRY(dm_in_ints(ctx, n, 0, &bins, &cnt));
    DM_TRY(dm_in_ints(ctx, n, 1, &dft, &cnt));
    DM_TRY(attr_dtype(ctx, n, "output_datatype", DM_FLOAT, &dt));
    if (*dft < 0)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "dft_length %lld is negative",
                              (long long)*dft);
    int64_t dims[2] = {*dft / 2 + 1, *bins};
    return dm_set_out(ctx, n, 0, dt, 2, dims);
}
