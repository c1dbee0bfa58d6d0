/*
 * lift.c: undo exporters' decompositions of ops the framework runs whole.
 *
 * torch.onnx below opset 17 writes nn.LayerNorm as nine elementwise ops,
 * below opset 20 writes the exact GELU as five (the tanh GELU as ten), and writes avg_pool2d with
 * zero padding (count_include_pad) as Pad then AveragePool. PyTorch runs one kernel for
 * each (native_layer_norm, gelu), whose autograd node keeps the input and
 * small statistics, where the decomposed graph would keep three full-size
 * intermediates. Memory follows what runs, so the decompositions are lifted
 * back into single LayerNormalization and Gelu nodes. The same holds for
 * F.silu, which exporters write as x * Sigmoid(x) (PyTorch runs one kernel,
 * whose SiluBackward0 keeps x; torchvision's EfficientNet and RegNet use it),
 * and hardswish, written as x * HardSigmoid(x, 1/6, 1/2) below opset 14.
 * Dropout with a constant ratio of 0 is lifted away: ATen's dropout returns
 * its input when p == 0 (aten/src/ATen/native/Dropout.cpp, _dropout_impl and
 * the fused kernel's p > 0 condition), with no mask and nothing saved, in
 * training as in inference (torchvision's ViT and Swin default to 0.0).
 * nn.GroupNorm, written as Reshape, InstanceNormalization, Reshape, Mul and
 * Add, is lifted back into one GroupNormalization (native_group_norm);
 * torch.var's ReduceMean, Sub, Mul, ReduceMean into one var (lift_var).
 * A pattern matches only
 * when every intermediate has a single reader and is no graph output, so the
 * rewrite never changes what the graph computes.
 */
#include "dnnmem-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lift {
    struct dm_graph *g;
    int32_t *readers;   /* per tensor: reading nodes */
    int32_t *producer;  /* per tensor: producing node (live nodes only), or -1 */
    bool *dead;         /* per node: removed by a rewrite */
};

static const struct dm_node *prod(const struct lift *l, int32_t x, enum dm_op op)
{
    if (x < 0 || l->producer[x] < 0)
        return NULL;
    const struct dm_node *n = &l->g->nodes[l->producer[x]];
    return n->op == op && !l->dead[l->producer[x]] ? n : NULL;
}

/* x is an intermediate the pattern may swallow: read `reads` times, no output. */
static bool private_(const struct lift *l, int32_t x, int32_t reads)
{
    return x >= 0 && l->readers[x] == reads && !l->g->tensors[x].is_output;
}

static bool is_const(const struct lift *l, int32_t x)
{
    if (x < 0)
        return false;
    const struct dm_tensor *t = &l->g->tensors[x];
    return t->role == DM_ROLE_WEIGHT || t->role == DM_ROLE_CONSTANT;
}

/* The other input of a binary node, given one. */
static int32_t other(const struct dm_node *n, int32_t x)
{
    if (n->n_in != 2)
        return -1;
    return n->in[0] == x ? n->in[1] : n->in[1] == x ? n->in[0] : -1;
}

static void kill(struct lift *l, const struct dm_node *n)
{
    l->dead[n - l->g->nodes] = true;
}

/* Node z becomes the one op `op` over ins[0..n_in) with attrs[0..n_attr)
 * (copied into the graph's arena); false when out of memory. */
static bool become(struct lift *l, struct dm_node *z, enum dm_op op, const int32_t *ins, int n_in,
                   const struct dm_attr *attrs, int n_attr)
{
    int32_t *in = dm_arena_array(&l->g->arena, (size_t)n_in, sizeof *in);
    struct dm_attr *at = n_attr > 0 ? dm_arena_array(&l->g->arena, (size_t)n_attr, sizeof *at) : NULL;
    if (!in || (n_attr > 0 && !at))
        return false;
    memcpy(in, ins, (size_t)n_in * sizeof *in);
    if (n_attr > 0)
        memcpy(at, attrs, (size_t)n_attr * sizeof *at);
    z->op = op;
    z->in = in;
    z->n_in = n_in;
    z->attrs = at;
    z->n_attr = z->cap_attr = n_attr;
    return true;
}

/* z = ((x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)) * gamma + beta */
static bool lift_layernorm(struct lift *l, struct dm_node *z)
{
    if (z->op != DM_OP_Add || z->n_in != 2)
        return false;
    for (int side = 0; side < 2; side++) {
        int32_t y = z->in[side], beta = z->in[1 - side];
        const struct dm_node *mul = prod(l, y, DM_OP_Mul);
        if (!mul || !private_(l, y, 1))
            continue;
        for (int ms = 0; ms < 2; ms++) {
            int32_t nrm = mul->in[ms], gamma = mul->in[1 - ms];
            const struct dm_node *div = prod(l, nrm, DM_OP_Div);
            if (!div || !private_(l, nrm, 1) || div->n_in != 2)
                continue;
            int32_t d = div->in[0], s = div->in[1];
            const struct dm_node *sq = prod(l, s, DM_OP_Sqrt), *sub = prod(l, d, DM_OP_Sub);
            if (!sq || !sub || !private_(l, s, 1) || !private_(l, d, 2))
                continue;
            int32_t e = sq->in[0];
            const struct dm_node *add = prod(l, e, DM_OP_Add);
            if (!add || !private_(l, e, 1))
                continue;
            int32_t v = is_const(l, add->in[1]) ? add->in[0] : add->in[1];
            const struct dm_node *var = prod(l, v, DM_OP_ReduceMean);
            if (!var || !private_(l, v, 1) || !is_const(l, other(add, v)))
                continue;
            int32_t p = var->in[0];
            const struct dm_node *pow = prod(l, p, DM_OP_Pow);
            if (!pow || !private_(l, p, 1) || pow->in[0] != d || !is_const(l, pow->in[1]))
                continue;
            int32_t x = sub->in[0], m = sub->in[1];
            const struct dm_node *mean = prod(l, m, DM_OP_ReduceMean);
            if (!mean || !private_(l, m, 1) || mean->in[0] != x)
                continue;
            /* rewrite z in place: LayerNormalization(x, gamma, beta), axis -1 */
            const struct dm_attr axis = {.name = "axis", .kind = DM_ATTR_INT, .i = -1};
            if (!become(l, z, DM_OP_LayerNormalization, (int32_t[]){x, gamma, beta}, 3, &axis, 1))
                return false;
            kill(l, mul), kill(l, div), kill(l, sq), kill(l, add), kill(l, var);
            kill(l, pow), kill(l, sub), kill(l, mean);
            return true;
        }
    }
    return false;
}

/* o = (x * (erf(x / c) + 1)) * 0.5, the exact GELU */
static bool lift_gelu(struct lift *l, struct dm_node *o)
{
    if (o->op != DM_OP_Mul || o->n_in != 2)
        return false;
    for (int side = 0; side < 2; side++) {
        int32_t h = o->in[side];
        const struct dm_node *mul = prod(l, h, DM_OP_Mul);
        if (!mul || !private_(l, h, 1) || !is_const(l, o->in[1 - side]))
            continue;
        for (int ms = 0; ms < 2; ms++) {
            int32_t x = mul->in[ms], a = mul->in[1 - ms];
            const struct dm_node *add = prod(l, a, DM_OP_Add);
            if (!add || !private_(l, a, 1))
                continue;
            int32_t e = is_const(l, add->in[1]) ? add->in[0] : add->in[1];
            const struct dm_node *erf = prod(l, e, DM_OP_Erf);
            if (!erf || !private_(l, e, 1) || !is_const(l, other(add, e)))
                continue;
            int32_t q = erf->in[0];
            const struct dm_node *div = prod(l, q, DM_OP_Div);
            if (!div || !private_(l, q, 1) || div->in[0] != x || !is_const(l, div->in[1]))
                continue;
            if (!become(l, o, DM_OP_Gelu, &x, 1, NULL, 0))
                return false;
            kill(l, mul), kill(l, add), kill(l, erf), kill(l, div);
            return true;
        }
    }
    return false;
}

/* The value of a constant input: an initializer's, or a Constant node's. */
static const struct dm_value *const_value(const struct lift *l, int32_t x)
{
    if (x < 0)
        return NULL;
    if (l->g->tensors[x].value)
        return l->g->tensors[x].value;
    int32_t p = l->producer[x];
    if (p < 0 || l->g->nodes[p].op != DM_OP_Constant)
        return NULL;
    const struct dm_attr *a = dm_node_attr(&l->g->nodes[p], "value");
    return a && a->kind == DM_ATTR_TENSOR && a->t ? a->t->value : NULL;
}

/* AveragePool(Pad(x, zeros on N and C, constant 0)) = avg_pool2d(x, padding),
 * count_include_pad=True, which pads inside the kernel */
static bool lift_padded_pool(struct lift *l, struct dm_node *pool)
{
    if (pool->op != DM_OP_AveragePool || pool->n_in != 1)
        return false;
    int32_t y = pool->in[0];
    const struct dm_node *pad = prod(l, y, DM_OP_Pad);
    if (!pad || !private_(l, y, 1) || pad->n_in < 2 || pad->n_in > 3 ||
        strcmp(dm_attr_str(pad, "mode", "constant"), "constant") != 0 ||
        dm_attr_int(pool, "count_include_pad", 0) != 0 || dm_node_attr(pool, "auto_pad"))
        return false;
    const struct dm_value *pv = const_value(l, pad->in[1]);
    if (!pv || pv->is_float || pv->n != 8 || pv->i[0] || pv->i[1] || pv->i[4] || pv->i[5])
        return false;
    if (pad->n_in == 3 && pad->in[2] >= 0) {
        const struct dm_value *cv = const_value(l, pad->in[2]);
        if (!cv || cv->n != 1 || (cv->is_float ? cv->f[0] != 0 : cv->i[0] != 0))
            return false;
    }
    int64_t cnt;
    const int64_t *old = dm_attr_ints(pool, "pads", &cnt);
    for (int64_t k = 0; old && k < cnt; k++)
        if (old[k])
            return false;
    struct dm_graph *g = l->g;
    struct dm_attr *attrs = dm_arena_array(&g->arena, (size_t)pool->n_attr + 2, sizeof *attrs);
    int64_t *pads = dm_arena_array(&g->arena, 4, sizeof *pads);
    if (!attrs || !pads)
        return false;
    pads[0] = pv->i[2], pads[1] = pv->i[3], pads[2] = pv->i[6], pads[3] = pv->i[7];
    int na = 0;
    for (int k = 0; k < pool->n_attr; k++)
        if (strcmp(pool->attrs[k].name, "pads") != 0 &&
            strcmp(pool->attrs[k].name, "count_include_pad") != 0)
            attrs[na++] = pool->attrs[k];
    attrs[na++] = (struct dm_attr){.name = "pads", .kind = DM_ATTR_INTS, .n = 4, .ints = pads};
    attrs[na++] = (struct dm_attr){.name = "count_include_pad", .kind = DM_ATTR_INT, .i = 1};
    pool->cap_attr = pool->n_attr + 2;
    pool->attrs = attrs;
    pool->n_attr = na;
    pool->in[0] = pad->in[0];
    kill(l, pad);
    return true;
}

/* Whether x is a one-value float constant within 1e-6 (relative) of v: the
 * exporter's float32 rounding of a double. */
static bool const_near(const struct lift *l, int32_t x, double v)
{
    const struct dm_value *c = const_value(l, x);
    return c && c->n == 1 && c->is_float && fabs(c->f[0] - v) <= 1e-6 * fabs(v);
}

/* y = op(c, z) or op(z, c), y private, c the constant v: the node, z in *z */
static const struct dm_node *with_const(const struct lift *l, int32_t y, enum dm_op op,
                                        double v, int32_t *z)
{
    const struct dm_node *n = prod(l, y, op);
    if (!n || !private_(l, y, 1) || n->n_in != 2)
        return NULL;
    for (int k = 0; k < 2; k++)
        if (const_near(l, n->in[k], v)) {
            *z = n->in[1 - k];
            return n;
        }
    return NULL;
}

/* o = 0.5 * (x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * (x * (x * x)))))):
 * F.gelu(x, approximate="tanh") as torch.onnx writes it below opset 20
 * (torch/onnx/symbolic_opset9.py, gelu: kBeta = sqrt(2 / pi), kKappa =
 * 0.044715; timm's act_layer="gelu_tanh"; 0.79788456 = sqrt(2 / pi)).  PyTorch runs one gelu kernel
 * whose GeluBackward0 keeps x alone (tools/autograd/derivatives.yaml, gelu:
 * self, approximate), as for the exact GELU; lifted to Gelu, approximate
 * "tanh" (ONNX opset 20's Gelu). */
static bool lift_gelu_tanh(struct lift *l, struct dm_node *o)
{
    if (o->op != DM_OP_Mul || o->n_in != 2 || !is_const(l, o->in[0]) == !is_const(l, o->in[1]))
        return false;
    int32_t m = is_const(l, o->in[0]) ? o->in[1] : o->in[0];
    if (!const_near(l, other(o, m), 0.5))
        return false;
    const struct dm_node *mul = prod(l, m, DM_OP_Mul);
    if (!mul || !private_(l, m, 1) || mul->n_in != 2)
        return false;
    for (int ms = 0; ms < 2; ms++) {
        int32_t x = mul->in[ms], t, s, c;
        const struct dm_node *add1 = with_const(l, mul->in[1 - ms], DM_OP_Add, 1.0, &t);
        const struct dm_node *tanh = add1 ? prod(l, t, DM_OP_Tanh) : NULL;
        if (!tanh || !private_(l, t, 1))
            continue;
        const struct dm_node *beta = with_const(l, tanh->in[0], DM_OP_Mul, 0.7978845608028654, &s);
        const struct dm_node *add = beta ? prod(l, s, DM_OP_Add) : NULL;
        if (!add || !private_(l, s, 1) || other(add, x) < 0)
            continue;
        const struct dm_node *kappa = with_const(l, other(add, x), DM_OP_Mul, 0.044715, &c);
        const struct dm_node *cube = kappa ? prod(l, c, DM_OP_Mul) : NULL;
        if (!cube || !private_(l, c, 1) || other(cube, x) < 0)
            continue;
        int32_t a = other(cube, x);
        const struct dm_node *sq = prod(l, a, DM_OP_Mul);
        if (!sq || !private_(l, a, 1) || sq->n_in != 2 || sq->in[0] != x || sq->in[1] != x)
            continue;
        const struct dm_attr approx = {.name = "approximate", .kind = DM_ATTR_STRING, .s = "tanh"};
        if (!become(l, o, DM_OP_Gelu, &x, 1, &approx, 1))
            return false;
        kill(l, mul), kill(l, add1), kill(l, tanh), kill(l, beta), kill(l, add);
        kill(l, kappa), kill(l, cube), kill(l, sq);
        return true;
    }
    return false;
}

/* Whether ReduceMean nodes a and b reduce the same axes (opset < 18's
 * attribute), b keeping them. */
static bool same_mean_axes(const struct dm_node *a, const struct dm_node *b)
{
    int64_t na = 0, nb = 0;
    const int64_t *xa = dm_attr_ints(a, "axes", &na), *xb = dm_attr_ints(b, "axes", &nb);
    if (!xa || !xb || na != nb || a->n_in != 1 || b->n_in != 1 ||
        dm_attr_int(b, "keepdims", 1) != 1)
        return false;
    for (int64_t k = 0; k < na; k++)
        if (xa[k] != xb[k])
            return false;
    return true;
}

/* v = mean((x - mean(x, A))^2, A): torch.var(x, A, unbiased=False) as
 * torch.onnx writes it (symbolic_opset9.py, _var_mean: ReduceMean, Sub,
 * Mul(d, d), ReduceMean; timm's EvoNorm group_std). PyTorch runs one var
 * kernel whose VarBackward0 keeps self (measured, 2.14.1: h.var(dim=1,
 * unbiased=False, keepdim=True) of h [4, 256] allocates the [4, 1] result
 * alone, 16 B; `_saved_self` is h). Lifted to v's ReduceMean of x marked
 * `dnnmem_var` (src/train/save.c keeps its input). */
static bool lift_var(struct lift *l, struct dm_node *v)
{
    if (v->op != DM_OP_ReduceMean || v->n_in != 1)
        return false;
    int32_t q = v->in[0];
    const struct dm_node *sq = prod(l, q, DM_OP_Mul);
    if (!sq || !private_(l, q, 1) || sq->n_in != 2 || sq->in[0] != sq->in[1])
        return false;
    int32_t d = sq->in[0];
    const struct dm_node *sub = prod(l, d, DM_OP_Sub);
    if (!sub || !private_(l, d, 2) || sub->n_in != 2)
        return false;
    int32_t x = sub->in[0], m = sub->in[1];
    const struct dm_node *mean = prod(l, m, DM_OP_ReduceMean);
    if (!mean || !private_(l, m, 1) || mean->in[0] != x || !same_mean_axes(v, mean))
        return false;
    struct dm_graph *g = l->g;
    struct dm_attr *attrs = dm_arena_array(&g->arena, (size_t)v->n_attr + 1, sizeof *attrs);
    if (!attrs)
        return false;
    for (int k = 0; k < v->n_attr; k++)
        attrs[k] = v->attrs[k];
    attrs[v->n_attr] = (struct dm_attr){.name = "dnnmem_var", .kind = DM_ATTR_INT, .i = 1};
    v->attrs = attrs;
    v->n_attr = v->cap_attr = v->n_attr + 1;
    v->in[0] = x;
    kill(l, sq), kill(l, sub), kill(l, mean);
    return true;
}

/* Whether constant x holds n values, each v. */
static bool const_all(const struct lift *l, int32_t x, int64_t n, double v)
{
    const struct dm_value *c = const_value(l, x);
    if (!c || c->n != n)
        return false;
    for (int64_t k = 0; k < n; k++)
        if ((c->is_float ? c->f[k] : (double)c->i[k]) != v)
            return false;
    return true;
}

/* Unsqueeze(w, axes) of a weight or constant, read only here: w, else -1 */
static int32_t unsqueezed_weight(const struct lift *l, int32_t u, const struct dm_node **node)
{
    const struct dm_node *n = prod(l, u, DM_OP_Unsqueeze);
    if (!n || !private_(l, u, 1) || n->n_in < 1 || !is_const(l, n->in[0]))
        return -1;
    *node = n;
    return n->in[0];
}

/* z = Reshape(InstanceNormalization(Reshape(x, [0, G, -1]), ones[G], zeros[G]),
 * Shape(x)) * Unsqueeze(weight) + Unsqueeze(bias): nn.GroupNorm as torch.onnx
 * (the TorchScript exporter, opset < 18: symbolic_opset9's group_norm) writes
 * it. PyTorch runs one native_group_norm (aten/src/ATen/native/group_norm.cpp:
 * Y, mean and rstd [N, G]), whose backward keeps x, the weight, mean and rstd;
 * left as exported, the InstanceNormalization's output and the Mul's operands
 * would be kept too. nn.GroupNorm(affine=False) has no Mul and Add and is left
 * as exported (an over-estimate of one activation per GroupNorm in training). */
static bool lift_groupnorm(struct lift *l, struct dm_node *z)
{
    if (z->op != DM_OP_Add || z->n_in != 2)
        return false;
    for (int side = 0; side < 2; side++) {
        const struct dm_node *mul = prod(l, z->in[side], DM_OP_Mul), *ub = NULL;
        int32_t bias = unsqueezed_weight(l, z->in[1 - side], &ub);
        if (!mul || !private_(l, z->in[side], 1) || bias < 0 || mul->n_in != 2)
            continue;
        for (int ms = 0; ms < 2; ms++) {
            const struct dm_node *uw = NULL;
            int32_t r1 = mul->in[ms], weight = unsqueezed_weight(l, mul->in[1 - ms], &uw);
            const struct dm_node *back = prod(l, r1, DM_OP_Reshape);
            if (weight < 0 || !back || !private_(l, r1, 1) || back->n_in != 2)
                continue;
            const struct dm_node *in = prod(l, back->in[0], DM_OP_InstanceNormalization);
            if (!in || !private_(l, back->in[0], 1) || in->n_in != 3)
                continue;
            const struct dm_node *to = prod(l, in->in[0], DM_OP_Reshape);
            if (!to || !private_(l, in->in[0], 1) || to->n_in != 2)
                continue;
            int32_t x = to->in[0];
            const struct dm_node *shape = prod(l, back->in[1], DM_OP_Shape);
            const struct dm_value *tv = const_value(l, to->in[1]);
            if (!shape || !private_(l, back->in[1], 1) || shape->in[0] != x || !tv ||
                tv->is_float || tv->n != 3 || tv->i[0] != 0 || tv->i[1] <= 0 || tv->i[2] != -1)
                continue;
            int64_t groups = tv->i[1];
            if (!const_all(l, in->in[1], groups, 1.0) || !const_all(l, in->in[2], groups, 0.0))
                continue;
            /* F.group_norm(x, G, weight, None) (timm's GroupNorm1NoBias):
             * symbolic_opset9's group_norm writes the absent bias as the
             * constant [0.0]; native_group_norm takes none, and no bias
             * grad is made. The lifted node omits it (dnnmem_no_bias). */
            bool no_bias = const_all(l, bias, 1, 0.0);
            /* rewrite z in place: GroupNormalization(x, weight, bias) */
            const struct dm_attr attr[3] = {
                {.name = "num_groups", .kind = DM_ATTR_INT, .i = groups},
                {.name = "epsilon", .kind = DM_ATTR_FLOAT, .f = dm_attr_float(in, "epsilon", 1e-5)},
                {.name = "dnnmem_no_bias", .kind = DM_ATTR_INT, .i = no_bias}};
            if (!become(l, z, DM_OP_GroupNormalization,
                        (int32_t[]){x, weight, no_bias ? -1 : bias}, 3, attr, 3))
                return false;
            kill(l, mul), kill(l, uw), kill(l, ub), kill(l, back), kill(l, in), kill(l, to);
            kill(l, shape);
            return true;
        }
    }
    return false;
}

/* o = x * f(x) with f's output read only here: the single kernel g(x) */
static bool lift_gated(struct lift *l, struct dm_node *o)
{
    if (o->op != DM_OP_Mul || o->n_in != 2)
        return false;
    for (int side = 0; side < 2; side++) {
        int32_t x = o->in[side], gx = o->in[1 - side];
        const struct dm_node *f = prod(l, gx, DM_OP_Sigmoid);
        enum dm_op op = DM_OP_Silu;
        if (!f) {
            /* hardswish = x * relu6(x + 3) / 6 = x * HardSigmoid(x, 1/6, 1/2) */
            f = prod(l, gx, DM_OP_HardSigmoid);
            op = DM_OP_HardSwish;
            if (f && (fabs(dm_attr_float(f, "alpha", 0.2) - 1.0 / 6) > 1e-6 ||
                      fabs(dm_attr_float(f, "beta", 0.5) - 0.5) > 1e-6))
                f = NULL;
        }
        if (!f || f->n_in != 1 || f->in[0] != x || !private_(l, gx, 1))
            continue;
        o->op = op;
        o->in[0] = x;
        o->n_in = 1;
        o->n_attr = 0;
        kill(l, f);
        return true;
    }
    return false;
}

/* Dropout(x, ratio 0) = x: a view of its input, no mask */
static bool lift_dropout0(struct lift *l, struct dm_node *d)
{
    if (d->op != DM_OP_Dropout || d->n_in < 1 || d->n_out < 1)
        return false;
    double ratio = dm_attr_float(d, "ratio", 0.5); /* an attribute before opset 12 */
    if (d->n_in >= 2 && d->in[1] >= 0) {
        const struct dm_value *v = const_value(l, d->in[1]);
        if (!v || v->n != 1)
            return false;
        ratio = v->is_float ? v->f[0] : (double)v->i[0];
    }
    if (ratio != 0)
        return false;
    if (d->n_out >= 2 && d->out[1] >= 0 &&
        (l->readers[d->out[1]] || l->g->tensors[d->out[1]].is_output))
        return false; /* the mask is used: leave it to the model */
    if (d->n_out >= 2 && d->out[1] >= 0)
        l->g->tensors[d->out[1]].producer = -1;
    d->op = DM_OP_Identity;
    d->n_in = 1;
    d->n_out = 1;
    d->n_attr = 0;
    return true;
}

/* The factor x is multiplied by at Mul node m, m = Mul(x, f) as the exporter
 * writes it: f, else -1. */
static int32_t scaled_by(const struct lift *l, int32_t y, const struct dm_node **mul, int32_t *x)
{
    const struct dm_node *m = prod(l, y, DM_OP_Mul);
    if (!m || !private_(l, y, 1) || m->n_in != 2)
        return -1;
    *mul = m;
    *x = m->in[0];
    return m->in[1];
}

/* Whether the Mul factors fq and fk are torch.onnx's two Sqrt(scale): Sqrt
 * nodes of one scale tensor (the default scale, 1 / sqrt(E) computed from
 * Shape(q)) or of two equal constants (scale= given), or, constant-folded,
 * one float constant. */
static bool sdpa_scales(const struct lift *l, int32_t fq, int32_t fk, const struct dm_node **sq,
                        const struct dm_node **sk)
{
    const struct dm_node *cq = prod(l, fq, DM_OP_Cast), *ck = prod(l, fk, DM_OP_Cast);
    if (cq && ck && cq->n_in == 1 && ck->n_in == 1) {
        /* scale= given, not constant-folded: Cast(Sqrt(scale)) on each
         * side (2.14.1, opset 14); the scalar nodes are left as they are */
        bool same = sdpa_scales(l, cq->in[0], ck->in[0], sq, sk);
        *sq = *sk = NULL;
        return same;
    }
    *sq = prod(l, fq, DM_OP_Sqrt), *sk = prod(l, fk, DM_OP_Sqrt);
    if (*sq && *sk) {
        if ((*sq)->n_in != 1 || (*sk)->n_in != 1 || !private_(l, fq, 1) || !private_(l, fk, 1))
            return false;
        if ((*sq)->in[0] == (*sk)->in[0])
            return true;
        /* scale= given, not constant-folded: a Constant node for each Sqrt */
        const struct dm_value *a = const_value(l, (*sq)->in[0]), *b = const_value(l, (*sk)->in[0]);
        return a && b && a->n == 1 && b->n == 1 && a->is_float && b->is_float && a->f[0] == b->f[0];
    }
    *sq = *sk = NULL;
    const struct dm_value *a = const_value(l, fq), *b = const_value(l, fk);
    return a && b && a->n == 1 && b->n == 1 && a->is_float && b->is_float && a->f[0] == b->f[0];
}

/* The causal mask torch.onnx writes for is_causal=True (symbolic_opset14.py,
 * _causal_attention_mask: Where(Equal(Trilu(Expand(1, [L, S]), upper=0), 0),
 * -inf, 0)): its Where node, else NULL. */
static const struct dm_node *causal_mask(const struct lift *l, int32_t m)
{
    const struct dm_node *w = prod(l, m, DM_OP_Where);
    if (!w || !private_(l, m, 1) || w->n_in != 3)
        return NULL;
    const struct dm_node *eq = prod(l, w->in[0], DM_OP_Equal);
    if (!eq || eq->n_in != 2)
        return NULL;
    for (int k = 0; k < 2; k++) {
        const struct dm_node *tr = prod(l, eq->in[k], DM_OP_Trilu);
        if (tr && dm_attr_int(tr, "upper", 1) == 0 && const_all(l, eq->in[1 - k], 1, 0.0))
            return w;
    }
    return NULL;
}

/* Whether tensor x is computed from a trainable weight (a learned attention
 * bias: timm's relative-position tables): a DFS over producers. -1 when out
 * of memory. */
static int from_weight(const struct lift *l, int32_t x)
{
    const struct dm_graph *g = l->g;
    int32_t *stack = malloc(((size_t)g->n_tensors + 1) * sizeof *stack);
    bool *seen = calloc((size_t)g->n_tensors + 1, sizeof *seen);
    int found = 0, n = 0;
    if (!stack || !seen) {
        found = -1;
        goto out;
    }
    stack[n++] = x;
    seen[x] = true;
    while (n > 0 && !found) {
        int32_t t = stack[--n];
        if (g->tensors[t].role == DM_ROLE_WEIGHT && !g->tensors[t].frozen) {
            found = 1;
            break;
        }
        int32_t p = l->producer[t];
        if (p < 0)
            continue;
        for (int k = 0; k < g->nodes[p].n_in; k++) {
            int32_t u = g->nodes[p].in[k];
            if (u >= 0 && !seen[u]) {
                seen[u] = true;
                stack[n++] = u;
            }
        }
    }
out:
    free(stack);
    free(seen);
    return found;
}

/* o = Softmax(MatMul(q * Sqrt(s), Transpose(k) * Sqrt(s)) [+ mask]) @ v:
 * F.scaled_dot_product_attention as the TorchScript exporter writes it at
 * every opset (torch/onnx/_internal/torchscript_exporter/symbolic_opset14.py,
 * scaled_dot_product_attention, PyTorch 2.13 and 2.14.1; checked at opsets
 * 14, 17 and 18: the same nodes). The signature that tells it from a
 * hand-written softmax(q @ k^T * c) @ v (timm with fused_attn off, which
 * PyTorch runs as separate ops and this leaves alone): both operands of the
 * scores' MatMul scaled, each by its own Sqrt node of one scale tensor (or,
 * constant-folded, by one equal constant), q first. A float attn_mask is an
 * Add of the scores; a bool one is converted before the Add (Where) and the
 * softmax followed by Where(IsNaN(p), 0, p); is_causal=True is the Add of
 * _causal_attention_mask's Where(Equal(Trilu(..)), -inf, 0), lifted to
 * is_causal with no mask. The exporter's transpose of k is fused with the
 * head transpose before it (k's Transpose perm [0, 2, 3, 1] on [B, S, H, D]),
 * so the lifted node's k is that Transpose with its last two dims swapped
 * back, or its input when that is the identity. A dropout_p > 0 (a Dropout
 * before the second MatMul) is not lifted: the CPU runs the math kernel then
 * (hf/attention.c, cpu_flash); nor is a mask computed from a weight (below).
 * Not certain, and lifted anyway: a float mask of rank 3, which the CPU
 * runs with the math kernel too (measured: [H, S, S] takes
 * _scaled_dot_product_attention_math; [S, S], [1, 1, S, S], [1, H, S, S],
 * [B, H, S, S] and a bool [S, S] take the flash kernel); shapes are not
 * known when graphs are lifted. The dynamo exporter's sdpa (onnxscript's
 * torchlib, opset 18: k reshaped, transposed and reshaped back, CastLike
 * of the scale) is a different signature, not lifted. PyTorch runs one kernel: on the CPU
 * _scaled_dot_product_flash_attention_for_cpu, whose output is
 * empty_like(q) and whose backward keeps q, k, v, the output and the
 * logsumexp (src/schedule/forward.c, fused_attention_strided; src/train/
 * save.c, DM_T_SDPA); on CUDA flash or memory-efficient (dm_sdpa_flash). */
static bool lift_sdpa(struct lift *l, struct dm_node *o)
{
    if (o->op != DM_OP_MatMul || o->n_in != 2)
        return false;
    int32_t p = o->in[0], v = o->in[1];
    const struct dm_node *isnan = NULL, *nanw = NULL;
    const struct dm_node *sm = prod(l, p, DM_OP_Softmax);
    if (!sm && (nanw = prod(l, p, DM_OP_Where)) && private_(l, p, 1) && nanw->n_in == 3 &&
        const_all(l, nanw->in[1], 1, 0.0) && (isnan = prod(l, nanw->in[0], DM_OP_IsNaN)) &&
        private_(l, nanw->in[0], 1) && isnan->in[0] == nanw->in[2] &&
        private_(l, nanw->in[2], 2)) {
        sm = prod(l, nanw->in[2], DM_OP_Softmax); /* a bool mask's */
        p = nanw->in[2];
    } else if (!private_(l, p, 1))
        return false;
    if (!sm || sm->n_in != 1 || dm_attr_int(sm, "axis", -1) != -1)
        return false;
    int32_t s = sm->in[0], mask = -1;
    const struct dm_node *add = prod(l, s, DM_OP_Add), *mm = NULL;
    if (add) {
        if (!private_(l, s, 1) || add->n_in != 2 || !prod(l, add->in[0], DM_OP_MatMul))
            return false;
        mask = add->in[1];
        s = add->in[0];
    }
    mm = prod(l, s, DM_OP_MatMul);
    if (!mm || !private_(l, s, 1) || mm->n_in != 2 || (nanw && mask < 0))
        return false;
    const struct dm_node *mq = NULL, *mk = NULL, *sq, *sk;
    int32_t q, kt;
    int32_t fq = scaled_by(l, mm->in[0], &mq, &q), fk = scaled_by(l, mm->in[1], &mk, &kt);
    if (fq < 0 || fk < 0 || !sdpa_scales(l, fq, fk, &sq, &sk))
        return false;
    const struct dm_node *tr = prod(l, kt, DM_OP_Transpose);
    int64_t rank;
    const int64_t *perm = tr ? dm_attr_ints(tr, "perm", &rank) : NULL;
    if (!tr || !private_(l, kt, 1) || !perm || rank != 4 || tr->n_in != 1)
        return false;
    int64_t back[4] = {perm[0], perm[1], perm[3], perm[2]};
    bool identity = back[0] == 0 && back[1] == 1 && back[2] == 2 && back[3] == 3;
    const struct dm_node *causal = mask >= 0 ? causal_mask(l, mask) : NULL;
    /* an attn_mask that requires grad runs the math kernel (measured,
     * 2.13 and 2.14.1 CPU, profiler: a [S, S] mask with requires_grad takes
     * _scaled_dot_product_attention_math, the same mask without takes the
     * flash kernel): a learned bias stays decomposed */
    if (mask >= 0 && !causal) {
        int w = from_weight(l, mask);
        if (w != 0)
            return false;
    }
    struct dm_graph *g = l->g;
    int32_t k = tr->in[0];
    if (!identity) {
        /* the Transpose now makes k [B, H, S, D] */
        struct dm_node *t = &g->nodes[l->producer[kt]];
        int64_t *np = dm_arena_array(&g->arena, 4, sizeof *np);
        struct dm_attr *at = dm_arena_array(&g->arena, 1, sizeof *at);
        if (!np || !at)
            return false;
        memcpy(np, back, sizeof back);
        *at = (struct dm_attr){.name = "perm", .kind = DM_ATTR_INTS, .n = 4, .ints = np};
        t->attrs = at;
        t->n_attr = t->cap_attr = 1;
        k = kt;
    }
    const struct dm_attr attr = {.name = "is_causal", .kind = DM_ATTR_INT, .i = causal != NULL};
    int n_in = mask >= 0 && !causal ? 4 : 3;
    if (!become(l, o, DM_OP_Attention, (int32_t[]){q, k, v, mask}, n_in, &attr, 1))
        return false;
    if (identity)
        kill(l, tr);
    if (causal)
        kill(l, causal);
    if (nanw)
        kill(l, nanw), kill(l, isnan);
    if (sq)
        kill(l, sq), kill(l, sk);
    if (add)
        kill(l, add);
    kill(l, sm), kill(l, mm), kill(l, mq), kill(l, mk);
    return true;
}

enum dnnmem_status dm_graph_lift(struct dm_graph *g, struct dnnmem_error *err)
{
    struct lift l = {g, calloc((size_t)g->n_tensors + 1, sizeof(int32_t)),
                     malloc(((size_t)g->n_tensors + 1) * sizeof(int32_t)),
                     calloc((size_t)g->n_nodes + 1, sizeof(bool))};
    enum dnnmem_status s = DNNMEM_OK;
    if (!l.readers || !l.producer || !l.dead) {
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
        goto out;
    }
    for (int32_t x = 0; x < g->n_tensors; x++)
        l.producer[x] = g->tensors[x].producer;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0)
                l.readers[g->nodes[i].in[k]]++;
    int32_t lifted = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        lifted += lift_layernorm(&l, &g->nodes[i]) || lift_gelu(&l, &g->nodes[i]) ||
                  lift_padded_pool(&l, &g->nodes[i]) || lift_gated(&l, &g->nodes[i]) ||
                  lift_dropout0(&l, &g->nodes[i]) || lift_groupnorm(&l, &g->nodes[i]) ||
                  lift_gelu_tanh(&l, &g->nodes[i]) || lift_var(&l, &g->nodes[i]) ||
                  lift_sdpa(&l, &g->nodes[i]);
    if (!lifted)
        goto out;
    /* drop the swallowed nodes; tensors they made keep no producer and are
     * never read */
    int32_t w = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (l.dead[i]) {
            for (int k = 0; k < g->nodes[i].n_out; k++)
                if (g->nodes[i].out[k] >= 0)
                    g->tensors[g->nodes[i].out[k]].producer = -1;
            continue;
        }
        g->nodes[w] = g->nodes[i];
        for (int k = 0; k < g->nodes[w].n_out; k++)
            if (g->nodes[w].out[k] >= 0)
                g->tensors[g->nodes[w].out[k]].producer = w;
        w++;
    }
    g->n_nodes = w;
    s = dm_graph_find_scopes(g, err);
out:
    free(l.readers);
    free(l.producer);
    free(l.dead);
    return s;
}
