/*
 * moe.c (src/load/hf/): mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE; DeepSeek's
 * block and multi-head latent attention are deepseek.c's); the MoE families' configs
 * are moe_config.c's.
 */
#include "hf.h"

/* The MoE families share the Llama decoder (embeddings, rotary embedding,
 * masks, norms, lm_head) and differ in the layer's feed-forward and, for
 * DeepSeek, in the attention:
 *  - "mixtral": MixtralSparseMoeBlock (block_sparse_moe) of transformers 4.51;
 *  - "qwen2_moe", "qwen3_moe": Qwen2MoeSparseMoeBlock (with the shared expert
 *    and its sigmoid gate) and Qwen3MoeSparseMoeBlock of 4.51, on the layers
 *    that decoder_sparse_step and mlp_only_layers choose;
 *  - "deepseek_v2", "deepseek_v3": DeepseekV3Attention (MLA) and
 *    DeepseekV3MoE / DeepseekV3TopkRouter as transformers' native
 *    modeling_deepseek_v3.py runs them (4.51-4.57, one nn.Module per
 *    expert), with V2's softmax scoring and greedy or group-limited-greedy
 *    top-k in the same module; first_k_dense_replace dense layers.
 * The expert loop: for each expert, torch.where on its slice of the one-hot
 * expert mask gives the tokens routed to it (nonzero: an int64 [n, 2]),
 * x[tokens] gathers them, the expert MLP runs on them, the result is scaled
 * by their routing weights and index_add_ed into a zeros [tokens, hidden]
 * in place. How many tokens each expert gets depends on the data: the
 * ExpertTokens op assumes uniform routing, ceil(tokens * top_k / experts)
 * for every expert in every MoE layer, unless the dim "expert_tokens" is
 * bound (--dim expert_tokens=N, at most the tokens of the batch). */

/* Whether decoder layer i has the sparse MoE block. */
bool hf_moe_layer(const struct moe *m, int64_t i)
{
    if (m->kind == MOE_DEEPSEEK)
        return i >= m->first_dense && i % m->freq == 0;
    size_t k;
    json_t *v;
    json_array_foreach(m->mlp_only, k, v)
    {
        if (json_is_integer(v) && json_integer_value(v) == i)
            return false;
    }
    return (i + 1) % m->sparse_step == 0;
}

/* act_fn(gate(x)) * up(x) then down, the MLP of every expert (Mixtral's
 * w1, w3, w2); names: gate, up, down. */
int32_t hf_swiglu(struct hf *h, int32_t x, int64_t hidden, int64_t inter,
                  const char *const names[3])
{
    size_t s = hf_enter(h, "%s", names[0]);
    int32_t gate = hf_linear(h, x, hidden, inter, false, -1, NULL);
    hf_leave(h, s);
    s = hf_enter(h, "act_fn");
    int32_t act = hf_op(h, DM_OP_Silu, 1, gate);
    hf_leave(h, s);
    s = hf_enter(h, "%s", names[1]);
    int32_t up = hf_linear(h, x, hidden, inter, false, -1, NULL);
    hf_leave(h, s);
    int32_t m = hf_op(h, DM_OP_Mul, 2, act, up);
    s = hf_enter(h, "%s", names[2]);
    m = hf_linear(h, m, inter, hidden, false, -1, NULL);
    hf_leave(h, s);
    return m;
}

/* TopK along the last axis: values in *values (or NULL), indices returned. */
int32_t hf_topk(struct hf *h, int32_t x, int64_t k, int32_t *values)
{
    int32_t kk = hf_const_ints(h, INTS(k));
    struct dm_node *n = hf_node(h, DM_OP_TopK, 2, (int32_t[]){x, kk}, 2);
    if (!n)
        return -1;
    int32_t v = n->out[0], i = n->out[1];
    hf_attr_i(h, "axis", -1);
    if (values)
        *values = v;
    return i;
}

/* x.sum(dim=-1, keepdim) */
int32_t hf_sum_last(struct hf *h, int32_t x, bool keepdims)
{
    int32_t r = hf_op(h, DM_OP_ReduceSum, 2, x, hf_const_ints(h, INTS(-1)));
    hf_attr_i(h, "keepdims", keepdims);
    return r;
}
int32_t hf_expert_loop(struct hf *h, const struct moe *m, int64_t hidden, int32_t x2, int32_t rw,
                       int32_t sel, int32_t final, int32_t locals[LOOP_LOCALS])
{
    bool ds = m->kind == MOE_DEEPSEEK;
    /* one_hot(selected, num_classes=E): int64 [N, k, E]; the values input
     * gives OneHot its type only, a scalar here (PyTorch makes no such
     * tensor, and a one-element constant stays on the host) */
    int32_t depth = hf_const_i(h, m->experts), vals = hf_const_i(h, 1);
    int32_t mask = hf_op(h, DM_OP_OneHot, 3, sel, depth, vals);
    hf_attr_i(h, "axis", -1);
    mask = ds ? hf_transpose(h, mask, INTS(2, 0, 1)) : hf_transpose(h, mask, INTS(2, 1, 0));
    int32_t last = hf_const_ints(h, INTS(-1));
    int32_t sym = dm_graph_symbol(h->g, "expert_tokens"); /* after batch and seq */
    if (sym < 0)
        return hf_oom(h);
    static const char *const mixtral[3] = {"w1", "w3", "w2"}, *const proj[3] = {"gate_proj", "up_proj",
                                                                               "down_proj"};
    for (int64_t e = 0; e < m->experts && h->st == DNNMEM_OK; e++) {
        size_t s = hf_enter(h, "experts.%lld", (long long)e);
        struct dm_node *n = hf_node(h, DM_OP_ExpertTokens, 1, &mask, 2);
        if (!n)
            break;
        int32_t nz = n->out[0], tok = n->out[1];
        hf_attr_i(h, "token_axis", ds ? 1 : 2);
        hf_attr_i(h, "sym", sym);
        int32_t w = -1;
        if (ds) /* expert_weights = topk_weights[token_indices, weight_indices] */
            w = hf_op(h, DM_OP_GatherND, 2, rw, nz);
        int32_t cur = hf_op(h, DM_OP_Gather, 2, x2, tok); /* hidden_states[top_x] */
        int32_t out = hf_swiglu(h, cur, hidden, m->inter, m->kind == MOE_MIXTRAL ? mixtral : proj);
        if (!ds) /* routing_weights[top_x, idx, None] */
            w = hf_op(h, DM_OP_GatherND, 2, rw, nz);
        int32_t w1 = hf_op(h, DM_OP_Unsqueeze, 2, w, last);
        int32_t y = hf_op(h, DM_OP_Mul, 2, out, w1);
        if (ds)
            hf_keep32(h, y); /* bf16 output times float32 weights: float32 */
        final = hf_op(h, DM_OP_IndexAdd, 3, final, tok, y);
        hf_attr_i(h, "axis", 0);
        if (ds)
            hf_keep32(h, final);
        hf_leave(h, s);
        /* DeepSeek binds expert_weights, expert_input, expert_output and
         * weighted_output; Mixtral and Qwen current_state and
         * current_hidden_states (the weighted output) */
        int32_t last_iter[LOOP_LOCALS] = {mask, nz, cur, y, ds ? w : -1, ds ? out : -1};
        memcpy(locals, last_iter, sizeof last_iter);
    }
    if (m->experts < 1)
        locals[0] = mask;
    return final;
}

/* zeros [N, hidden] like x2 (torch.zeros / zeros_like), float32 with `f32` */
int32_t hf_zeros_like(struct hf *h, int32_t x2, bool f32)
{
    int32_t shape = hf_op(h, DM_OP_Shape, 1, x2);
    int32_t z = hf_op(h, DM_OP_ConstantOfShape, 1, shape);
    if (f32)
        hf_keep32(h, z);
    return z;
}

/* MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock
 * on x [B, S, hidden]; *router: the router logits, which the decoder layer
 * holds until it returns. */
int32_t hf_sparse_moe(struct hf *h, const struct llama *c, const struct moe *m, int32_t x,
                      int32_t *router)
{
    int64_t E = c->hidden;
    int32_t x2 = hf_reshape(h, x, INTS(-1, E)); /* hidden_states.view(-1, hidden_dim) */
    size_t s = hf_enter(h, "gate");
    int32_t logits = hf_linear(h, x2, E, m->experts, false, -1, NULL);
    hf_leave(h, s);
    /* F.softmax(router_logits, dim=1, dtype=torch.float): a float32 copy
     * first in a 16-bit run; topk; the in-place renormalisation; .to(dtype) */
    int32_t l32 = hf_op(h, DM_OP_Cast, 1, logits);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, l32);
    int32_t rw = hf_op(h, DM_OP_Softmax, 1, l32);
    hf_attr_i(h, "axis", 1);
    hf_keep32(h, rw);
    int32_t vals;
    int32_t sel = hf_topk(h, rw, m->top_k, &vals);
    hf_keep32(h, vals);
    rw = vals;
    if (m->norm_topk) {
        rw = hf_op(h, DM_OP_Div, 2, rw, hf_sum_last(h, rw, true));
        hf_keep32(h, rw);
    }
    rw = hf_op(h, DM_OP_CastLike, 2, rw, x2);
    int32_t final = hf_zeros_like(h, x2, false);
    int32_t locals[LOOP_LOCALS] = {-1, -1, -1, -1, -1, -1};
    final = hf_expert_loop(h, m, E, x2, rw, sel, final, locals);
    if (m->shared_inter) {
        static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
        s = hf_enter(h, "shared_expert");
        int32_t sh = hf_swiglu(h, x2, E, m->shared_inter, proj);
        hf_leave(h, s);
        if (m->shared_gate) {
            s = hf_enter(h, "shared_expert_gate");
            int32_t g = hf_linear(h, x2, E, 1, false, -1, NULL);
            hf_leave(h, s);
            sh = hf_op(h, DM_OP_Mul, 2, hf_op(h, DM_OP_Sigmoid, 1, g), sh);
        }
        final = hf_op(h, DM_OP_Add, 2, final, sh);
    }
    final = hf_op(h, DM_OP_Reshape, 2, final, hf_op(h, DM_OP_Shape, 1, x));
    /* the block's locals (routing weights, selected experts, the expert
     * mask, the last expert's loop variables) until it returns */
    hf_hold(h, rw, hf_last_node(h));
    hf_hold(h, sel, hf_last_node(h));
    for (int j = 0; j < LOOP_LOCALS; j++)
        hf_hold(h, locals[j], hf_last_node(h));
    *router = logits;
    return final;
}
