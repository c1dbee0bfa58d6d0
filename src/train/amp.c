/*
 * amp.c: automatic mixed precision (torch.autocast on CUDA) as types.
 *
 * Facts (aten/src/ATen/autocast_mode.cpp; docs.pytorch.org amp.html;
 * runtime-facts.md §7.1):
 *  - ops on the lower-precision list (convolutions, matmul, addmm/linear,
 *    RNN cells) cast their floating inputs to fp16/bf16 and produce it;
 *  - ops on the fp32 list (softmax, log_softmax, layer_norm, exp, log, pow,
 *    sum, norms, losses) cast to fp32 and produce it;
 *  - promote ops (cat) run in the widest input type; everything else follows
 *    its inputs by ordinary type promotion (a Python scalar does not
 *    promote);
 *  - a cast of a parameter (an fp32 leaf that requires grad) is cached until
 *    autocast exits, one copy per parameter; other casts are fresh tensors;
 *  - parameters, their .grad and the optimizer state stay fp32;
 *  - an explicit x.to(dtype) is not autocast's business: it makes that dtype
 *    (Qwen3's q_norm under bf16 autocast: .to(float32) of the bf16 q_proj
 *    output, then .to(input_dtype) back to bf16 before the fp32 weight's
 *    multiply, which so keeps a bf16 operand).
 * F.linear's bias is cast with the weight: an Add of a weight onto a matmul
 * result is the bias of a linear layer (as in src/schedule/forward.c).
 */
#include "schedule/builder.h"

static bool is_float(enum dm_dtype d)
{
    return d == DM_FLOAT || d == DM_FLOAT16 || d == DM_BFLOAT16 || d == DM_DOUBLE;
}

/* A data input that takes part in type promotion: floating, and not a
 * constant scalar (torch: tensor op Python number keeps the tensor's type). */
static bool promotes(const struct dm_graph *g, const struct dm_tinfo *t, int32_t x)
{
    return x >= 0 && is_float(t[x].dtype) &&
           !(t[x].is_const && t[x].numel <= 1 && g->tensors[x].role != DM_ROLE_WEIGHT);
}

/* Add(bias weight, MatMul result): the bias add of F.linear. */
static bool linear_bias(const struct dm_graph *g, const struct dm_node *n)
{
    if (n->op != DM_OP_Add || n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0)
        return false;
    for (int k = 0; k < 2; k++) {
        int32_t w = n->in[1 - k], p = g->tensors[n->in[k]].producer;
        if (g->tensors[w].role == DM_ROLE_WEIGHT && p >= 0 && g->nodes[p].op == DM_OP_MatMul)
            return true;
    }
    return false;
}

/* The type node n runs in under autocast, or DM_UNDEFINED when it follows
 * its input 0 (unary ops). */
static enum dm_dtype run_type(const struct dm_graph *g, const struct dm_tinfo *t,
                              const struct dm_node *n, enum dm_dtype low)
{
    unsigned f = dm_ops[n->op].flags;
    if ((f & DM_F_AMP_LOW) || linear_bias(g, n))
        return low;
    if (f & DM_F_AMP_FP32)
        return DM_FLOAT;
    bool binary = f & DM_F_AMP_PROMOTE || n->op == DM_OP_Add || n->op == DM_OP_Sub ||
                  n->op == DM_OP_Mul || n->op == DM_OP_Div || n->op == DM_OP_Max ||
                  n->op == DM_OP_Min || n->op == DM_OP_Sum || n->op == DM_OP_Mean ||
                  n->op == DM_OP_Where || n->op == DM_OP_PRelu;
    if (!binary)
        return DM_UNDEFINED;
    enum dm_dtype wide = DM_UNDEFINED;
    for (int k = 0; k < n->n_in; k++)
        if (!dm_meta_slot(n, k) && promotes(g, t, n->in[k]) &&
            (wide == DM_UNDEFINED || t[n->in[k]].dtype == DM_FLOAT))
            wide = t[n->in[k]].dtype;
    return wide;
}

void dm_amp_retype(const struct dm_graph *g, struct dm_tinfo *t, enum dm_dtype low)
{
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        /* an explicit .to(dtype) is kept: Cast makes its "to" type, CastLike
         * input 1's (already retyped: nodes run in order) */
        if (n->op == DM_OP_Cast)
            continue;
        enum dm_dtype rt = n->op == DM_OP_CastLike && dm_has_in(n, 1) ? t[n->in[1]].dtype
                                                                        : run_type(g, t, n, low);
        if (rt == DM_UNDEFINED)
            rt = dm_has_in(n, 0) && is_float(t[n->in[0]].dtype) ? t[n->in[0]].dtype : DM_UNDEFINED;
        if (rt == DM_UNDEFINED)
            continue;
        for (int k = 0; k < n->n_out; k++) {
            int32_t o = n->out[k];
            if (o < 0 || t[o].absent || t[o].rank < 0 || t[o].dtype != DM_FLOAT)
                continue;
            if (n->op == DM_OP_BatchNormalization && k > 0)
                continue; /* running statistics stay fp32 */
            t[o].dtype = rt;
            dm_dtype_bytes(rt, t[o].numel, &t[o].bytes);
        }
    }
}

enum dm_dtype dm_amp_cast(const struct dm_graph *g, const struct dm_tinfo *t,
                          const struct dm_node *n, int k, enum dm_dtype low)
{
    int32_t x = dm_has_in(n, k) ? n->in[k] : -1;
    if (x < 0 || dm_meta_slot(n, k) || !promotes(g, t, x))
        return DM_UNDEFINED;
    unsigned f = dm_ops[n->op].flags;
    enum dm_dtype want = DM_UNDEFINED;
    if ((f & DM_F_AMP_LOW) || linear_bias(g, n))
        want = low;
    else if (f & DM_F_AMP_FP32)
        want = DM_FLOAT;
    else if (f & DM_F_AMP_PROMOTE)
        want = run_type(g, t, n, low);
    /* BatchNorm's scale, bias and statistics stay fp32 with fp16 inputs (cuDNN) */
    return want != DM_UNDEFINED && want != t[x].dtype ? want : DM_UNDEFINED;
}
