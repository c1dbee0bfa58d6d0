/*
 * moe.c (src/load/hf/): mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE; DeepSeek's
 * block and multi-head latent attention are deepseek.c's); the MoE families' configs
 * are moe_config.c's.
 */
#include "hf.h"

/* The MoE families share the Llama decoder (embeddings, rotary embedding,
 * masks, norms, lm_head) and differ in the layer's feed-forward and, for
 * DeepSeek, in the attention:
 *  - "mixtral": MixtralSparseMoeBlock (block_sparse_moe in 4.x, mlp in 5.x);
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
 * bound (--dim expert_tokens=N, at most the tokens of the batch).
 * That loop is 4.x's. From 5.0 every family's experts are one module with
 * 3-D parameters (gate_up_proj, down_proj) that the grouped_mm experts
 * implementation runs on all tokens at once (hf_grouped_experts: no routing
 * assumption, _grouped_mm's rows are the tokens x top_k however they are
 * routed). */

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

/* Clamp with the bounds as attributes; out of place (Tensor.clamp). */
static int32_t clamp(struct hf *h, int32_t x, bool lower, double lo, double hi)
{
    int32_t y = hf_op(h, DM_OP_Clip, 1, x);
    if (lower)
        hf_attr_f(h, "min", lo);
    hf_attr_f(h, "max", hi);
    hf_attr_i(h, "inplace", 0);
    return y;
}

/* gpt_oss (gptoss.c): GptOssExperts._apply_gate on gate_up [n, 2I] (gate and up interleaved,
 * strided views here as two narrows of the same bytes, each with its own
 * SliceBackward0); returns (up + 1) * glu [n, I]. locals[3]: the clamped gate
 * and up and glu, bound until the caller's scope ends (the function's return
 * in 5.x, the next iteration of 4.56's loop). */
int32_t hf_gptoss_gate(struct hf *h, int32_t gu, int64_t I, int32_t locals[3])
{
    /* swiglu_limit 7.0, swiglu_alpha 1.702 (GptOssExperts of 4.56; config
     * fields from 5.0): values only, no tensor depends on them */
    int32_t gate = hf_narrow(h, gu, -1, 0, I), up = hf_narrow(h, gu, -1, I, I);
    gate = clamp(h, gate, false, 0, 7.0);
    up = clamp(h, up, true, -7.0, 7.0);
    int32_t sg = hf_op(h, DM_OP_Sigmoid, 1, hf_op(h, DM_OP_Mul, 2, gate, hf_const_f(h, 1.702)));
    int32_t glu = hf_op(h, DM_OP_Mul, 2, gate, sg);
    int32_t up1 = hf_op(h, DM_OP_Add, 2, up, hf_const_f(h, 1.0));
    int32_t r = hf_op(h, DM_OP_Mul, 2, up1, glu);
    locals[0] = gate;
    locals[1] = up;
    locals[2] = glu;
    return r;
}


/* One grouped projection of transformers 5's experts: the 3-D parameter
 * `name` [E, out, in] (nn.Parameter, not nn.Linear: PEFT's target_modules
 * do not reach it), transposed (a view) and run by torch._grouped_mm on the
 * token rows x [S, in] sorted by expert. */
static int32_t grouped_proj(struct hf *h, const struct moe *m, const char *name, int32_t x,
                            int64_t in, int64_t out, int32_t offs, int32_t ids_g, int32_t *bias_g)
{
    *bias_g = -1;
    int64_t E = m->experts;
    if (m->kind == MOE_GPTOSS) {
        /* gpt_oss (is_transposed, has_bias): the weight [E, in, out] as stored;
         * `name`_bias[expert_ids_g] [S, out] gathered and added (out.add_) */
        int32_t w = hf_param(h, name, DM_FLOAT, 3, (int64_t[]){E, in, out});
        int32_t y = hf_op(h, DM_OP_GroupedMatMul, 3, x, w, offs);
        char bias[64];
        snprintf(bias, sizeof bias, "%s_bias", name);
        int32_t b = hf_param(h, bias, DM_FLOAT, 2, (int64_t[]){E, out});
        b = hf_op(h, DM_OP_Gather, 2, b, ids_g);
        hf_attr_i(h, "axis", 0);
        y = hf_op(h, DM_OP_Add, 2, y, b);
        hf_attr_i(h, "inplace", 1);
        /* selected_biases: bound until the down projection's rebinds it, that
         * one until the function returns (hf_grouped_experts holds it) */
        *bias_g = b;
        return y;
    }
    int32_t w = hf_param(h, name, DM_FLOAT, 3, (int64_t[]){E, out, in});
    int32_t wt = hf_transpose(h, w, INTS(0, 2, 1));
    return hf_op(h, DM_OP_GroupedMatMul, 3, x, wt, offs);
}

/* transformers 5's experts (MixtralExperts, Qwen2MoeExperts, Qwen3MoeExperts,
 * DeepseekV2Experts, DeepseekV3Experts: gate_up_proj [E, 2I, H], down_proj
 * [E, H, I]) as grouped_mm_experts_forward runs them (integrations/moe.py,
 * 5.24.0). grouped_mm is the default experts implementation
 * (PreTrainedModel.get_correct_experts_implementation) and runs on the CPU
 * with torch > 2.10 (_can_use_grouped_mm); the "eager" per-expert loop and
 * "batched_mm" are other settings. On x2 [N, H], routing weights rw [N, k]
 * and the experts sel [N, k] (S = N * k rows):
 *   torch.sort(expert_ids): int64 values and permutation [S];
 *   hidden_states[perm // k] [S, H]; sample_weights[perm] [S];
 *   histc of the float ids [S]: tokens_per_expert float [E], its int32
 *   cumsum the offsets [E];
 *   _grouped_mm up [S, 2I]; chunk (views); act_fn(gate) * up [S, I];
 *   _grouped_mm down [S, H]; * sample_weights [S, H] (float32 where rw is:
 *   Mixtral's router returns float32 weights, DeepSeek's too);
 *   inv_perm = empty_like(perm) filled by inv_perm[perm] = arange [S];
 *   weighted_out[inv_perm] [S, H]; .view(N, k, H).sum(dim=1) [N, H];
 *   .to(hidden_states.dtype).
 * The function's locals (the sorted ids and permutation, the gathered rows
 * and weights, histc's input and output, the offsets, inv_perm, the down
 * projection, the restored weighted_out) live until it returns. Measured
 * (torch 2.13 CPU, the profiler's allocation events, MixtralSparseMoeBlock
 * N 256, H 256, I 512, E 8, k 2): forward 512 KiB index, 2 MiB grouped_mm,
 * 1 MiB silu, 1 MiB mul, 512 KiB grouped_mm, ...; GroupedMmBackward0 the
 * 4 MiB down_proj grad, then the 1 MiB input grad; SplitBackward0's cat
 * [S, 2I]; the 8 MiB gate_up_proj grad. Every expert's rows are counted:
 * _grouped_mm's output has all S rows however the tokens are routed. */
/* top_k_index [N, k] again, as a view of the flat ids [S] */
static int32_t sel_k(struct hf *h, int32_t ids, const struct moe *m)
{
    return hf_reshape(h, ids, INTS(-1, m->top_k));
}

/* The rows sorted by expert (see hf_grouped_experts): *cur [S, H], *sw_g
 * [S], *perm, *ids_g; *token_idx and *selected where 5.0-5.7 make them. */
static int32_t sort_rows(struct hf *h, const struct moe *m, int32_t x2, int32_t sw, int32_t ids,
                         int32_t out[6])
{
    int32_t sz = hf_op(h, DM_OP_Shape, 1, ids);
    struct dm_node *n = hf_node(h, DM_OP_TopK, 2, (int32_t[]){ids, sz}, 2); /* torch.sort */
    if (!n)
        return -1;
    int32_t ids_g = n->out[0], perm = n->out[1], tok_idx = -1, sel_x = -1, cur;
    hf_attr_i(h, "axis", -1);
    hf_attr_i(h, "largest", 0);
    if (h->transformers >= 508) { /* hidden_states[perm // k] */
        int32_t tok = hf_op(h, DM_OP_Div, 2, perm, hf_const_i(h, m->top_k));
        cur = hf_op(h, DM_OP_Gather, 2, x2, tok);
        hf_attr_i(h, "axis", 0);
    } else {
        /* 5.0-5.7: token_idx = arange(N).unsqueeze(1).expand(-1, k).reshape(-1)
         * (int64 [S], a copy of the expanded view); selected_hidden_states =
         * hidden_states[token_idx]; perm = argsort(expert_ids) (sort's
         * values freed); expert_ids[perm]; selected_hidden_states[perm] */
        /* the arange [N] (shaped [N, 1] here), then the reshape's copy */
        hf_dec_fill(h, hf_op(h, DM_OP_Shape, 1, hf_narrow(h, sel_k(h, ids, m), 1, 0, 1)), DM_INT64,
                    0);
        tok_idx = hf_dec_fill(h, sz, DM_INT64, 0);
        sel_x = hf_op(h, DM_OP_Gather, 2, x2, tok_idx);
        hf_attr_i(h, "axis", 0);
        ids_g = hf_op(h, DM_OP_Gather, 2, ids, perm);
        hf_attr_i(h, "axis", 0);
        cur = hf_op(h, DM_OP_Gather, 2, sel_x, perm);
        hf_attr_i(h, "axis", 0);
    }
    int32_t sw_g = hf_op(h, DM_OP_Gather, 2, sw, perm);
    hf_attr_i(h, "axis", 0);
    int32_t r[6] = {cur, sw_g, perm, ids_g, tok_idx, sel_x};
    memcpy(out, r, sizeof r);
    return cur;
}

/* transformers 5's experts (MixtralExperts, Qwen2MoeExperts, Qwen3MoeExperts,
 * DeepseekV2Experts, DeepseekV3Experts: gate_up_proj [E, 2I, H], down_proj
 * [E, H, I]; 4.57 has none) as grouped_mm_experts_forward runs them
 * (integrations/moe.py). grouped_mm is the default experts implementation
 * (PreTrainedModel.get_correct_experts_implementation); from 5.3 it runs
 * torch._grouped_mm where _can_use_grouped_mm allows (5.24: the CPU from
 * torch 2.9, CUDA sm80+ from 2.9) and else transformers::grouped_mm_fallback,
 * which allocates the same: a zeros [S, N] output, and in backward
 * zeros_like of the input and of the weight, filled by torch.mm per expert.
 * 5.0-5.2 take the "eager" experts implementation below torch 2.9 (the
 * caller refuses it). On x2 [N, H], routing weights rw [N, k] and the
 * experts sel [N, k] (S = N * k rows), 5.8-5.24:
 *   torch.sort(expert_ids): int64 values and permutation [S];
 *   hidden_states[perm // k] [S, H]; sample_weights[perm] [S];
 *   histc of the float ids [S]: tokens_per_expert float [E], its int32
 *   cumsum the offsets [E];
 *   _grouped_mm up [S, 2I]; chunk (views); act_fn(gate) * up [S, I];
 *   _grouped_mm down [S, H]; * sample_weights [S, H] (float32 where rw is:
 *   Mixtral's router returns float32 weights, DeepSeek's too);
 *   inv_perm = empty_like(perm) filled by inv_perm[perm] = arange [S];
 *   weighted_out[inv_perm] [S, H]; .view(N, k, H).sum(dim=1) [N, H];
 *   .to(hidden_states.dtype).
 * 5.4-5.7 gather the rows through token_idx first (sort_rows); 5.0-5.3
 * too, and take inv_perm = argsort(perm), histc of a temporary, and keep
 * every step's output in its own local (gate_up_out, gated_out,
 * out_per_sample_g, out_per_sample).
 * The function's locals live until it returns. Measured at 5.24 (torch 2.13
 * CPU, the profiler's allocation events, MixtralSparseMoeBlock N 256,
 * H 256, I 512, E 8, k 2): forward 512 KiB index, 2 MiB grouped_mm, 1 MiB
 * silu, 1 MiB mul, 512 KiB grouped_mm, ...; GroupedMmBackward0 the 4 MiB
 * down_proj grad, then the 1 MiB input grad; SplitBackward0's cat [S, 2I];
 * the 8 MiB gate_up_proj grad. Every expert's rows are counted:
 * _grouped_mm's output has all S rows however the tokens are routed. */
int32_t hf_grouped_experts(struct hf *h, const struct moe *m, int64_t hidden, int32_t x2,
                           int32_t rw, int32_t sel, bool w32)
{
    int64_t E = m->experts, I = m->inter;
    bool v50 = h->transformers < 504; /* 5.0-5.3's locals */
    if (h->transformers < 503 && h->torch < 209) {
        hf_refuse(h, DM_REFUSE_MOE_EAGER, NULL, NULL);
        return -1;
    }
    if (h->q.method != Q_NONE) {
        hf_refuse(h, DM_REFUSE_MOE_QUANT, NULL, NULL);
        return -1;
    }
    if (h->batched_decode) { /* what generate.c's decode steps run (moe_decode) */
        h->g->moe_dec_top_k = m->top_k;
        h->g->moe_dec_hidden = hidden;
        h->g->moe_dec_inter = I;
        h->g->moe_dec_w32 = w32;
        h->g->moe_dec_release = h->transformers;
    }
    size_t s = hf_enter(h, "experts");
    int32_t sw = hf_reshape(h, rw, INTS(-1)), ids = hf_reshape(h, sel, INTS(-1));
    int32_t rows[6];
    int32_t cur = sort_rows(h, m, x2, sw, ids, rows);
    if (cur < 0) {
        hf_leave(h, s);
        return -1;
    }
    int32_t sw_g = rows[1], perm = rows[2], ids_g = rows[3];
    if (w32)
        hf_keep32(h, sw_g);
    int32_t hin = hf_op(h, DM_OP_Cast, 1, ids_g); /* expert_ids_g.float() */
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, hin);
    int32_t hist = hf_dec_fill(h, hf_const_ints(h, INTS(E)), DM_FLOAT, 0); /* histc's [E] */
    hf_keep32(h, hist);
    int32_t offs = hf_dec_fill(h, hf_const_ints(h, INTS(E)), DM_INT32, 0); /* the int32 cumsum */
    int32_t bias_up, bias_down;
    int32_t up = grouped_proj(h, m, "gate_up_proj", cur, hidden, 2 * I, offs, ids_g, &bias_up), act;
    int32_t act_node = -1;
    if (m->kind == MOE_GPTOSS) {
        int32_t gl[3]; /* _apply_gate's locals, until it returns */
        act = hf_gptoss_gate(h, up, I, gl);
        act_node = hf_last_node(h);
        for (int j = 0; j < 3; j++)
            hf_hold(h, gl[j], act_node);
    } else {
        struct dm_node *n = hf_node(h, DM_OP_Split, 2,
                                    (int32_t[]){up, hf_const_ints(h, INTS(I, I))}, 2);
        if (!n) {
            hf_leave(h, s);
            return -1;
        }
        int32_t gate = n->out[0], upv = n->out[1];
        hf_attr_i(h, "axis", -1);
        hf_attr_i(h, "view", 1); /* chunk's parts are views */
        act = hf_op(h, DM_OP_Mul, 2, hf_op(h, DM_OP_Silu, 1, gate), upv);
    }
    int32_t down = grouped_proj(h, m, "down_proj", act, I, hidden, offs, ids_g, &bias_down);
    hf_hold(h, bias_up, hf_last_node(h));
    /* gpt_oss: proj_out (the up projection) until _apply_gate's result rebinds it */
    if (m->kind == MOE_GPTOSS)
        hf_hold(h, up, act_node);
    int32_t y = hf_op(h, DM_OP_Mul, 2, down, hf_unsqueeze(h, sw_g, INTS(-1)));
    if (w32)
        hf_keep32(h, y);
    int32_t inv;
    if (v50) { /* inv_perm = torch.argsort(perm): sort's values freed */
        struct dm_node *n = hf_node(h, DM_OP_TopK, 2, (int32_t[]){perm, hf_op(h, DM_OP_Shape, 1, perm)}, 2);
        if (!n) {
            hf_leave(h, s);
            return -1;
        }
        inv = n->out[1];
        hf_attr_i(h, "axis", -1);
        hf_attr_i(h, "largest", 0);
    } else {
        int32_t shape = hf_op(h, DM_OP_Shape, 1, perm);
        inv = hf_dec_fill(h, shape, DM_INT64, 0); /* torch.empty_like(perm) */
        /* inv_perm[perm] = arange(S): index_put_ in place, the int64 arange
         * [S] its source (here a fill of the same size: only its bytes count) */
        inv = hf_op(h, DM_OP_IndexAdd, 3, inv, perm, hf_dec_fill(h, shape, DM_INT64, 0));
        hf_attr_i(h, "axis", 0);
    }
    int32_t yr = hf_op(h, DM_OP_Gather, 2, y, inv); /* weighted_out[inv_perm] */
    hf_attr_i(h, "axis", 0);
    if (w32)
        hf_keep32(h, yr);
    int32_t f = hf_reshape(h, yr, INTS(-1, m->top_k, hidden));
    f = hf_op(h, DM_OP_ReduceSum, 2, f, hf_const_ints(h, INTS(1)));
    hf_attr_i(h, "keepdims", 0);
    if (w32)
        hf_keep32(h, f);
    f = hf_op(h, DM_OP_CastLike, 2, f, x2); /* .to(hidden_states.dtype) */
    int32_t locals[] = {ids_g, perm, cur, sw_g, v50 ? -1 : hin, hist, offs, v50 ? y : down, inv, yr,
                        rows[4], rows[5], v50 ? up : -1, v50 ? act : -1, bias_down};
    for (size_t j = 0; j < sizeof locals / sizeof locals[0]; j++)
        hf_hold(h, locals[j], hf_last_node(h));
    hf_leave(h, s);
    return f;
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
    bool tf5 = h->transformers >= 500;
    int32_t shared = -1;
    size_t s;
    if (m->shared_inter && tf5) {
        static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
        s = hf_enter(h, "shared_expert");
        shared = hf_swiglu(h, x2, E, m->shared_inter, proj);
        hf_leave(h, s);
    }
    s = hf_enter(h, "gate");
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
    /* 5.x's MixtralTopKRouter returns its float32 weights as they are;
     * Qwen's routers and 4.x's blocks cast them to the hidden type */
    bool w32 = tf5 && m->kind == MOE_MIXTRAL;
    if (!w32)
        rw = hf_op(h, DM_OP_CastLike, 2, rw, x2);
    int32_t final = -1;
    int32_t locals[LOOP_LOCALS] = {-1, -1, -1, -1, -1, -1};
    if (tf5) {
        final = hf_grouped_experts(h, m, E, x2, rw, sel, w32);
    } else {
        final = hf_zeros_like(h, x2, false);
        final = hf_expert_loop(h, m, E, x2, rw, sel, final, locals);
    }
    if (m->shared_inter && tf5) {
        /* 5.x's Qwen2MoeSparseMoeBlock runs the shared expert first and
         * gates it after the routed experts */
        if (m->shared_gate) {
            s = hf_enter(h, "shared_expert_gate");
            int32_t g = hf_linear(h, x2, E, 1, false, -1, NULL);
            hf_leave(h, s);
            shared = hf_op(h, DM_OP_Mul, 2, hf_op(h, DM_OP_Sigmoid, 1, g), shared);
        }
        final = hf_op(h, DM_OP_Add, 2, final, shared);
    } else if (m->shared_inter) {
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
