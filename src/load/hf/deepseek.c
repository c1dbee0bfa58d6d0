/*
 * deepseek.c (src/load/hf/): DeepSeek-V2/V3's routed MoE block and multi-head latent
 * attention (see moe.c's top).
 */
#include "hf.h"

/* DeepseekV3TopkRouter (and V2's softmax / greedy routing) on x2 [N, hidden]:
 * the routing weights, float32 [N, k], and *sel, the experts. */
static int32_t deepseek_router(struct hf *h, const struct moe *m, int64_t E, int32_t x2,
                               int32_t *sel)
{
    size_t s = hf_enter(h, "gate");
    int32_t w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){m->experts, E});
    int32_t bias = -1;
    if (m->method == TOPK_NOAUX_TC) { /* a registered buffer */
        bias = hf_param(h, "e_score_correction_bias", DM_FLOAT, 1, (int64_t[]){m->experts});
        if (bias >= 0)
            h->g->tensors[bias].frozen = true;
    }
    /* F.linear(hidden_states.type(float32), weight.type(float32)) */
    int32_t x32 = hf_op(h, DM_OP_Cast, 1, x2);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, x32);
    int32_t w32 = hf_op(h, DM_OP_Cast, 1, w);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, w32);
    int32_t logits = hf_op(h, DM_OP_MatMul, 2, x32, hf_transpose(h, w32, INTS(1, 0)));
    hf_keep32(h, logits);
    int32_t scores = m->sigmoid ? hf_op(h, DM_OP_Sigmoid, 1,
                                        logits) : hf_op(h, DM_OP_Softmax, 1, logits);
    if (!m->sigmoid)
        hf_attr_i(h, "axis", -1);
    hf_keep32(h, scores);
    int64_t G = m->groups, per = m->experts / m->groups;
    int32_t rw = -1;
    if (m->method == TOPK_GREEDY) {
        *sel = hf_topk(h, scores, m->top_k, &rw);
        hf_keep32(h, rw);
    } else {
        /* noaux_tc: get_topk_indices runs under torch.no_grad() */
        int32_t sc = m->method == TOPK_NOAUX_TC ? hf_op(h, DM_OP_Detach, 1, scores) : scores;
        if (m->method == TOPK_NOAUX_TC) {
            sc = hf_op(h, DM_OP_Add, 2, sc, hf_unsqueeze(h, bias, INTS(0)));
            hf_keep32(h, sc);
        }
        int32_t gs = hf_reshape(h, sc, INTS(-1, G, per)), top2 = -1;
        if (m->method == TOPK_NOAUX_TC) { /* .topk(2, dim=-1)[0].sum(dim=-1) */
            hf_topk(h, gs, 2, &top2);
            hf_keep32(h, top2);
            gs = hf_sum_last(h, top2, false);
        } else { /* .max(dim=-1).values */
            gs = hf_op(h, DM_OP_ReduceMax, 2, gs, hf_const_ints(h, INTS(-1)));
            hf_attr_i(h, "keepdims", 0);
        }
        hf_keep32(h, gs);
        hf_topk(h, gs, m->topk_group, NULL); /* group_idx */
        /* hf_zeros_like(group_scores).scatter_(1, group_idx, 1): the scatter is
         * in place, with a scalar, so the zeros are the only tensor */
        int32_t gm = hf_zeros_like(h, gs, true);
        gm = hf_unsqueeze(h, gm, INTS(-1));
        gm = hf_op(h, DM_OP_Expand, 2, gm, hf_const_ints(h, INTS(1, 1, per)));
        hf_keep32(h, gm);
        gm = hf_reshape(h, gm, INTS(-1, m->experts));
        int32_t b = hf_op(h, DM_OP_Cast, 1, gm); /* ~score_mask.bool() */
        hf_attr_i(h, "to", DM_BOOL);
        b = hf_op(h, DM_OP_Not, 1, b);
        int32_t masked = hf_op(h, DM_OP_Where, 3, b, hf_const_f(h, 0.0), sc); /* masked_fill */
        hf_keep32(h, masked);
        int32_t v;
        *sel = hf_topk(h, masked, m->top_k, &v);
        hf_keep32(h, v);
        if (m->method == TOPK_NOAUX_TC) { /* topk_weights = scores.gather(1, topk_indices) */
            rw = hf_op(h, DM_OP_GatherElements, 2, scores, *sel);
            hf_attr_i(h, "axis", 1);
        } else {
            rw = v;
        }
        hf_keep32(h, rw);
    }
    /* DeepseekV2MoEGate (4.54-4.57) has no renormalisation */
    bool v2_gate = m->v2 && h->transformers >= 454 && h->transformers < 500;
    if (m->norm_topk && !v2_gate && (m->method == TOPK_NOAUX_TC || m->top_k > 1)) {
        int32_t den = hf_op(h, DM_OP_Add, 2, hf_sum_last(h, rw, true), hf_const_f(h, 1e-20));
        hf_keep32(h, den);
        rw = hf_op(h, DM_OP_Div, 2, rw, den);
        hf_keep32(h, rw);
    }
    rw = hf_op(h, DM_OP_Mul, 2, rw, hf_const_f(h, m->scale));
    hf_keep32(h, rw);
    hf_leave(h, s);
    return rw;
}

/* DeepseekV2MoE.moe of transformers 4.54-4.57 (modeling_deepseek_v2.py,
 * read in the 4.54.0, 4.56.2 and 4.57.0 wheels: the same ops) on x2 [N, E],
 * the gate's float32 weights rw [N, k] and experts sel [N, k], S = N k:
 *  - cnts = topk_ids.new_zeros((N, experts)) int64, scatter_ in place;
 *    tokens_per_expert = cnts.sum(dim=0) [experts] int64;
 *  - indicies = topk_ids.view(-1).argsort() [S] int64 (sort's values go);
 *    sorted_tokens = hidden_states[indicies // k] [S, E];
 *  - per expert with tokens: its rows sorted_tokens[start:end] (a view)
 *    through its MLP, each output appended to the `outputs` list (all of
 *    them live until moe returns); here every expert gets S / experts rows
 *    (uniform routing: expert e the rows [S e / X, S (e + 1) / X) of X
 *    experts). Each slice's SliceBackward0 makes a zeros [S, E] grad
 *    (slice_backward) added into sorted_tokens' (measured at 4.56: two
 *    such [S, E] blocks live at the training peak);
 *  - outs = torch.cat(outputs) [S, E]; new_x = torch.empty_like(outs),
 *    new_x[indicies] = outs (index_put_, in place; IndexPutBackward0 keeps
 *    the indices, not outs);
 *  - new_x.view(N, k, E).type(float32) (a copy for a 16-bit model),
 *    .mul_(topk_weight.unsqueeze(-1)): in place, and under autograd
 *    MulBackward0 saves a clone of its self (measured: torch 2.13 CPU,
 *    x.mul_(w) with both requiring grad allocates one x-sized tensor), so
 *    the product is a new tensor in training and none in inference;
 *  - .sum(dim=1) [N, E] float32, .type(new_x.dtype).
 * moe's locals (cnts, tokens_per_expert, indicies, sorted_tokens, the
 * outputs list, outs, new_x) live until it returns. */
static int32_t v2_moe(struct hf *h, const struct moe *m, int64_t E, int32_t x2, int32_t rw,
                      int32_t sel)
{
    int64_t X = m->experts, k = m->top_k;
    if (X < 1 || X > INT32_MAX / 2) { /* read_moe bounds it (1 << 16) */
        hf_fail(h, DNNMEM_E_MODEL, "config field 'n_routed_experts' (%lld) is out of range",
                (long long)X);
        return -1;
    }
    int32_t n = hf_op(h, DM_OP_Gather, 2, hf_op(h, DM_OP_Shape, 1, sel), hf_const_ints(h, INTS(0)));
    int32_t cshape = hf_op(h, DM_OP_Concat, 2, n, hf_const_ints(h, INTS(X)));
    hf_attr_i(h, "axis", 0);
    /* the zeros and the scattered ones are host-side values here (known
     * from the dims); the scatter's result is cnts, the one tensor */
    int32_t ones = hf_dec_fill(h, hf_op(h, DM_OP_Shape, 1, sel), DM_INT64, 1);
    int32_t cnts = hf_op(h, DM_OP_ScatterElements, 3, hf_dec_fill(h, cshape, DM_INT64, 0), sel,
                         ones);
    hf_attr_i(h, "axis", 1);
    int32_t tpe = hf_op(h, DM_OP_ReduceSum, 2, cnts, hf_const_ints(h, INTS(0)));
    hf_attr_i(h, "keepdims", 0);
    int32_t ids = hf_reshape(h, sel, INTS(-1));
    struct dm_node *sn = hf_node(h, DM_OP_TopK, 2, (int32_t[]){ids, hf_op(h, DM_OP_Shape, 1, ids)},
                                 2);
    if (!sn)
        return -1;
    int32_t idx = sn->out[1];
    hf_attr_i(h, "axis", -1);
    hf_attr_i(h, "largest", 0);
    int32_t sorted = hf_op(h, DM_OP_Gather, 2, x2, hf_op(h, DM_OP_Div, 2, idx, hf_const_i(h, k)));
    hf_attr_i(h, "axis", 0);
    h->g->moe_routing = "uniform: DeepseekV2MoE (4.54-4.57) sorts the batch x seq x top_k rows "
                        "by expert and runs each expert's MLP on an equal share of them (the "
                        "sorted rows, the expert outputs and their cat do not depend on it)";
    int32_t *outs = malloc((size_t)X * sizeof *outs);
    if (!outs)
        return hf_oom(h);
    /* expert e's rows [S e / X, S (e + 1) / X): the bounds are host-side
     * values of the dims */
    int32_t rows_n = hf_op(h, DM_OP_Gather, 2, hf_op(h, DM_OP_Shape, 1, sorted),
                           hf_const_ints(h, INTS(0)));
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int64_t e = 0; e < X && h->st == DNNMEM_OK; e++) {
        int32_t lo = hf_op(h, DM_OP_Div, 2, hf_op(h, DM_OP_Mul, 2, rows_n, hf_const_ints(h, INTS(e))),
                           hf_const_ints(h, INTS(X)));
        int32_t hi = hf_op(h, DM_OP_Div, 2,
                           hf_op(h, DM_OP_Mul, 2, rows_n, hf_const_ints(h, INTS(e + 1))),
                           hf_const_ints(h, INTS(X)));
        int32_t part = hf_op(h, DM_OP_Slice, 4, sorted, lo, hi, hf_const_ints(h, INTS(0)));
        size_t s = hf_enter(h, "experts.%lld", (long long)e);
        outs[e] = hf_swiglu(h, part, E, m->inter, proj);
        hf_leave(h, s);
    }
    struct dm_node *cat = h->st == DNNMEM_OK ? hf_node(h, DM_OP_Concat, (int)X, outs, 1) : NULL;
    int32_t out = cat ? cat->out[0] : -1;
    hf_attr_i(h, "axis", 0);
    /* new_x = empty_like(outs); new_x[indicies] = outs: one [S, E] tensor,
     * whose IndexPutBackward0 keeps the indices only and gives outs the grad
     * grad[indicies]; a gather of outs by the indices (IndexBackward0: the
     * indices kept, an [S, E] grad) has those bytes */
    int32_t new_x = hf_op(h, DM_OP_Gather, 2, out, idx);
    hf_attr_i(h, "axis", 0);
    int32_t y = hf_reshape(h, new_x, INTS(-1, k, E));
    y = hf_op(h, DM_OP_Cast, 1, y);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, y);
    if (h->train) {
        y = hf_op(h, DM_OP_Mul, 2, y, hf_unsqueeze(h, rw, INTS(-1)));
        hf_keep32(h, y);
    }
    y = hf_op(h, DM_OP_ReduceSum, 2, y, hf_const_ints(h, INTS(1)));
    hf_attr_i(h, "keepdims", 0);
    hf_keep32(h, y);
    y = hf_op(h, DM_OP_CastLike, 2, y, x2);
    int32_t end = hf_last_node(h);
    int32_t locals[] = {cnts, tpe, idx, sorted, out, new_x};
    for (size_t j = 0; j < sizeof locals / sizeof locals[0]; j++)
        hf_hold(h, locals[j], end);
    for (int64_t e = 0; e < X && h->st == DNNMEM_OK; e++)
        hf_hold(h, outs[e], end);
    free(outs);
    return y;
}

/* DeepseekV3MoE.forward on x [B, S, hidden]: the router, the routed experts
 * (moe(), into a float32 zeros_like, cast back), then + shared_experts(x). */
int32_t hf_deepseek_moe(struct hf *h, const struct llama *c, const struct moe *m, int32_t x)
{
    int64_t E = c->hidden;
    int32_t sel = -1;
    int32_t x2r = hf_reshape(h, x, INTS(-1, E)); /* the router's view(-1, hidden) */
    int32_t rw = deepseek_router(h, m, E, x2r, &sel);
    int32_t x2 = hf_reshape(h, x, INTS(-1, E)), final;
    if (m->v2 && h->transformers >= 454 && h->transformers < 500) {
        final = v2_moe(h, m, E, x2, rw, sel);
    } else if (h->transformers >= 500) {
        /* DeepseekV2Experts / DeepseekV3Experts (3-D parameters, moe.c's
         * hf_grouped_experts) on the router's float32 weights */
        final = hf_grouped_experts(h, m, E, x2, rw, sel, true);
    } else {
        final = hf_zeros_like(h, x2, true);
        int32_t locals[LOOP_LOCALS] = {-1, -1, -1, -1, -1, -1};
        final = hf_expert_loop(h, m, E, x2, rw, sel, final, locals);
        final = hf_op(h, DM_OP_CastLike, 2, final, x2); /* .type(hidden_states.dtype) */
        for (int j = 0; j < LOOP_LOCALS; j++) /* moe()'s locals until it returns */
            hf_hold(h, locals[j], hf_last_node(h));
    }
    final = hf_op(h, DM_OP_Reshape, 2, final, hf_op(h, DM_OP_Shape, 1, x));
    if (m->shared_inter) {
        static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
        size_t s = hf_enter(h, "shared_experts");
        int32_t sh = hf_swiglu(h, x, E, m->shared_inter, proj);
        hf_leave(h, s);
        final = hf_op(h, DM_OP_Add, 2, final, sh);
    }
    hf_hold(h, rw, hf_last_node(h));
    hf_hold(h, sel, hf_last_node(h));
    return final;
}

/* DeepseekV3Attention.forward (multi-head latent attention). q from q_proj,
 * or q_a_proj, q_a_layernorm, q_b_proj; the compressed kv_a_proj_with_mqa
 * split into kv_lora_rank (normalised, decompressed by kv_b_proj into each
 * head's qk_nope keys and v_head_dim values) and one shared qk_rope key; the
 * rotary embedding on the rope parts; query and key concatenated
 * [B, H, S, qk_nope + qk_rope]. The cache holds these decompressed keys and
 * the values [B, H, S, v_head_dim] (past_key_value.update(key_states,
 * value_states)), not the latent vector; the values are a view of
 * kv_b_proj's whole output, which the cache thus keeps. torch.split's parts
 * are views (Narrow); the rope parts are built on [B, S, H, D] as the Llama
 * family's are, after the copy apply_rotary_pos_emb_interleave makes
 * (rope_interleave, DeepseekV3Config's default; V2's complex rotation
 * copies likewise). */
static int32_t mla_heads_first(struct hf *h, const struct llama *c, int layer, int32_t x,
                               int32_t cos, int32_t sin, int32_t mask, bool latent,
                               int32_t *attn_weights);

int32_t hf_mla_attention(struct hf *h, const struct llama *c, int layer, int32_t x, int32_t cos,
                         int32_t sin, int32_t mask, int32_t *attn_weights)
{
    /* DeepSeek-V2 natively from 4.54 (modeling_deepseek_v2.py; 4.51-4.53
     * need the hub's remote code), both with the latent cache from 5.15 */
    bool latent = h->transformers >= 515;
    if (latent || (c->mla->complex_rope && h->transformers >= 454))
        return mla_heads_first(h, c, layer, x, cos, sin, mask, latent, attn_weights);
    const struct mla *a = c->mla;
    struct dm_graph *g = h->g;
    int64_t H = c->heads, E = c->hidden, Dq = a->nope + a->rope;
    const char *kname = NULL, *vname = NULL;
    if (c->use_cache) {
        kname = dm_arena_printf(&g->arena, "present.%d.key", layer);
        vname = dm_arena_printf(&g->arena, "present.%d.value", layer);
        if (!kname || !vname)
            return hf_oom(h);
    }
    int32_t q;
    size_t s;
    if (!a->q_lora) {
        s = hf_enter(h, "q_proj");
        q = hf_linear(h, x, E, H * Dq, false, -1, NULL);
        hf_leave(h, s);
    } else {
        s = hf_enter(h, "q_a_proj");
        q = hf_linear(h, x, E, a->q_lora, a->bias, -1, NULL);
        hf_leave(h, s);
        s = hf_enter(h, "q_a_layernorm");
        q = hf_rms_norm(h, q, a->q_lora, 1e-6);
        hf_leave(h, s);
        s = hf_enter(h, "q_b_proj");
        q = hf_linear(h, q, a->q_lora, H * Dq, false, -1, NULL);
        hf_leave(h, s);
    }
    q = hf_reshape(h, q, INTS(0, 0, H, Dq));
    int32_t q_pass = hf_narrow(h, q, 3, 0, a->nope), q_rot = hf_narrow(h, q, 3, a->nope, a->rope);
    s = hf_enter(h, "kv_a_proj_with_mqa");
    int32_t ckv = hf_linear(h, x, E, a->kv_lora + a->rope, a->bias, -1, NULL);
    hf_leave(h, s);
    int32_t k_lat = hf_narrow(h, ckv, 2, 0,
                              a->kv_lora), k_rot = hf_narrow(h, ckv, 2, a->kv_lora, a->rope);
    s = hf_enter(h, "kv_a_layernorm");
    k_lat = hf_rms_norm(h, k_lat, a->kv_lora, 1e-6);
    hf_leave(h, s);
    s = hf_enter(h, "kv_b_proj");
    int32_t kv = hf_linear(h, k_lat, a->kv_lora, H * (a->nope + a->v), false, -1, NULL);
    hf_leave(h, s);
    kv = hf_reshape(h, kv, INTS(0, 0, H, a->nope + a->v));
    int32_t k_pass = hf_narrow(h, kv, 3, 0, a->nope), v = hf_narrow(h, kv, 3, a->nope, a->v);
    h->out_name = hf_cache_at_make(h, vname);
    v = hf_transpose(h, v, INTS(0, 2, 1, 3));
    /* the interleave's .reshape copies the strided rope parts (k_rot's
     * view(B, 1, S, rope) is the same copy here) */
    q_rot = hf_reshape(h, q_rot, INTS(0, 0, H, a->rope));
    k_rot = hf_reshape(h, k_rot, INTS(0, 0, 1, a->rope));
    q_rot = hf_rope(h, q_rot, cos, sin, a->rope, NULL);
    k_rot = hf_rope(h, k_rot, cos, sin, a->rope, NULL);
    int32_t k_rot_emb = k_rot;
    k_rot = hf_op(h, DM_OP_Expand, 2, k_rot, hf_const_ints(h, INTS(1, 1, H, 1))); /* .expand(.., H, ..) */
    int32_t qs = hf_op(h, DM_OP_Concat, 2, q_pass, q_rot);
    hf_attr_i(h, "axis", -1);
    int32_t q_states = q;
    q = hf_transpose(h, qs, INTS(0, 2, 1, 3));
    int32_t k = hf_op(h, DM_OP_Concat, 2, k_pass, k_rot);
    hf_attr_i(h, "axis", -1);
    h->out_name = hf_cache_at_make(h, kname);
    k = hf_transpose(h, k, INTS(0, 2, 1, 3));
    k = hf_cache_update(h, k, kname);
    v = hf_cache_update(h, v, vname);
    /* query_states and key_states are torch.cat results, contiguous
     * [B, H, S, D] in PyTorch: the matmul folds them without a copy; the
     * values are a strided view of kv_b_proj's output, copied by matmul's
     * hf_reshape (eager, a temporary of the second matmul) or .contiguous()
     * (sdpa) */
    int32_t o, p = -1;
    double scale = 1.0 / sqrt((double)Dq);
    if (h->sdpa) {
        int32_t vc = hf_reshape(h, v, INTS(0, H, -1, a->v));
        o = hf_sdpa_attention(h, (int32_t[]){q, k, vc}, -1, true, H, H, Dq, a->v, scale,
                              c->attn_drop);
    } else {
        int32_t kt = hf_transpose(h, k, INTS(0, 1, 3, 2));
        int32_t sc = hf_op(h, DM_OP_MatMul, 2, q, kt);
        sc = hf_op(h, DM_OP_Mul, 2, sc, hf_const_f(h, scale));
        sc = hf_op(h, DM_OP_Add, 2, sc, mask);
        p = hf_softmax_f32(h, sc, q);
        p = hf_dropout(h, p, c->attn_drop);
        o = hf_op(h, DM_OP_MatMul, 2, p, hf_matmul_fold(h, v, H, a->v));
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3));
    o = hf_reshape(h, o, INTS(0, 0, -1));
    s = hf_enter(h, "o_proj");
    o = hf_linear(h, o, H * a->v, E, a->bias, -1, NULL);
    hf_leave(h, s);
    /* the forward's locals live until it returns: q_states, compressed_kv,
     * k_pass and value_states (kv_b_proj's output), the rotated q_rot and
     * k_rot, query_states, key_states */
    int32_t locals[] = {q_states, ckv, k_pass, v, q_rot, k_rot_emb, qs, k};
    for (size_t j = 0; j < sizeof locals / sizeof locals[0]; j++)
        hf_hold(h, locals[j], hf_last_node(h));
    *attn_weights = p;
    return o;
}

/* q = the query projection(s) of x [B, S, E]: q_proj, or q_a_proj,
 * q_a_layernorm, q_b_proj; [B, S, H * (qk_nope + qk_rope)]. */
static int32_t mla_query(struct hf *h, const struct llama *c, int32_t x)
{
    const struct mla *a = c->mla;
    int64_t HDq = c->heads * (a->nope + a->rope);
    size_t s;
    if (!a->q_lora) {
        s = hf_enter(h, "q_proj");
        int32_t q = hf_linear(h, x, c->hidden, HDq, false, -1, NULL);
        hf_leave(h, s);
        return q;
    }
    s = hf_enter(h, "q_a_proj");
    int32_t q = hf_linear(h, x, c->hidden, a->q_lora, a->bias, -1, NULL);
    hf_leave(h, s);
    s = hf_enter(h, "q_a_layernorm");
    q = hf_rms_norm(h, q, a->q_lora, 1e-6);
    hf_leave(h, s);
    s = hf_enter(h, "q_b_proj");
    q = hf_linear(h, q, a->q_lora, HDq, false, -1, NULL);
    hf_leave(h, s);
    return q;
}

/* x[..., start::2] on the last dim of x (d long): a strided view. */
static int32_t every_other(struct hf *h, int32_t x, int64_t start, int64_t d)
{
    return hf_op(h, DM_OP_Slice, 5, x, hf_const_ints(h, INTS(start)), hf_const_ints(h, INTS(d)),
                 hf_const_ints(h, INTS(-1)), hf_const_ints(h, INTS(2)));
}

/* The rotary embedding of one latent-attention part x [B, H or 1, S, R] (a
 * view) with cos and sin [1, 1, S, R] (views of the model's), as each
 * release's modeling file computes it (transformers 5.24.0):
 *  - DeepSeek-V3 with rope_interleave (modeling_deepseek_v3.py,
 *    apply_rotary_pos_emb_interleave): cos[..., :R/2] and sin[..., :R/2]
 *    (views), x1, x2 = x[..., 0::2], x[..., 1::2] (strided views),
 *    cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin]): no copy of x;
 *  - DeepSeek-V3 without it: apply_rotary_pos_emb (x * cos +
 *    rotate_half(x) * sin);
 *  - DeepSeek-V2 (modeling_deepseek_v2.py, apply_rotary_emb):
 *    view_as_complex(x.float().reshape(..., -1, 2)) (x.float() copies a
 *    16-bit x, then a view), times freqs_cis [1, 1, S, R/2] complex64, then
 *    view_as_real(...).flatten(3) (views) and .type_as(x) (a copy for a
 *    16-bit x): the product is one [.., R/2] complex64 tensor, the bytes of
 *    a float32 [.., R] one, which the product of the float32 x and cos
 *    stands for here. DeepseekV2RotaryEmbedding's freqs_cis [1, S, R/2]
 *    complex64 (torch.polar, times attention_scaling) is built here as cos
 *    and sin, [1, S, R] float32 each: 4 R S bytes over, once per forward. */
static int32_t mla_rope(struct hf *h, const struct mla *a, int32_t x, int32_t cos, int32_t sin)
{
    int64_t R = a->rope;
    if (a->complex_rope) {
        int32_t xf = hf_op(h, DM_OP_Cast, 1, x);
        hf_attr_i(h, "to", DM_FLOAT);
        hf_keep32(h, xf);
        int32_t p = hf_op(h, DM_OP_Mul, 2, xf, cos);
        hf_keep32(h, p);
        return hf_op(h, DM_OP_CastLike, 2, p, x);
    }
    if (!a->interleave)
        return hf_rope(h, x, cos, sin, R, NULL);
    int32_t ch = hf_narrow(h, cos, 3, 0, R / 2), sh = hf_narrow(h, sin, 3, 0, R / 2);
    int32_t x1 = every_other(h, x, 0, R), x2 = every_other(h, x, 1, R);
    int32_t lo = hf_op(h, DM_OP_Sub, 2, hf_op(h, DM_OP_Mul, 2, x1, ch),
                       hf_op(h, DM_OP_Mul, 2, x2, sh));
    int32_t hi = hf_op(h, DM_OP_Add, 2, hf_op(h, DM_OP_Mul, 2, x2, ch),
                       hf_op(h, DM_OP_Mul, 2, x1, sh));
    int32_t y = hf_op(h, DM_OP_Concat, 2, lo, hi);
    hf_attr_i(h, "axis", -1);
    return y;
}

/* The multi-head latent attention of DeepseekV2Attention from transformers
 * 4.54 (read in 4.56.2's and 5.0.0's modeling_deepseek_v2.py) and of both
 * DeepseekV2Attention and DeepseekV3Attention from 5.15 (latent: read in
 * 5.24.0's; expand_kv is first in 5.15.0's wheel, 5.14.0's caches the
 * decompressed keys and values), the queries transposed before the split:
 *  - q [B, S, H * Dq] viewed [B, S, H, Dq] and transposed to [B, H, S, Dq]
 *    (a view), split into q_pass and q_rot (views);
 *  - compressed_kv = kv_a_proj_with_mqa(x) [B, S, L + R] split: the first L
 *    normalised by kv_a_layernorm (a new [B, S, L]); the last R viewed
 *    [B, 1, S, R] (k_rot, a view); the rotary embedding on q_rot and k_rot
 *    (mla_rope); query_states = cat(q_pass, q_rot) [B, H, S, Dq];
 *  - not latent (4.54-5.14): kv_b_proj on the normalised [B, S, L],
 *    [B, S, H * (nope + v)] viewed [B, S, H, nope + v] and transposed,
 *    split into k_nope and the values (views, which keep kv_b_proj's output);
 *    k_rot expanded to H heads (a view); key_states = cat(k_nope, k_rot)
 *    [B, H, S, Dq]; use_cache: cache.update(key_states, value_states) copies
 *    both (from 4.56, hf_cache_update) and the names are rebound to them;
 *  - latent (5.15-5.24): the normalised part viewed [B, 1, S, L] (kv_nope);
 *    use_cache: cache.update(kv_nope, k_rot) copies both (present.N.key
 *    [B, 1, S, L], present.N.value [B, 1, S, R]) and the names are rebound
 *    to the copies (the normalised kv_nope and the rotated k_rot go); then
 *    expand_kv: kv_b_proj(kv_nope) [B, 1, S, H * (nope + v)] viewed and
 *    transposed as above, k_rot expanded, key_states = new_empty [B, H, S,
 *    Dq] filled by two copy_ (one allocation, as a cat);
 *  - the attention (eager or sdpa) on those, reshape, o_proj.
 * The forward's locals live until it returns: the query projection's
 * output, compressed_kv, kv_nope (latent), k_nope (kv_b_proj's output),
 * k_rot, the rotated q_rot, query_states, key_states and value_states (the
 * cache's copies where they are rebound to them). */
static int32_t mla_heads_first(struct hf *h, const struct llama *c, int layer, int32_t x,
                               int32_t cos, int32_t sin, int32_t mask, bool latent,
                               int32_t *attn_weights)
{
    const struct mla *a = c->mla;
    struct dm_graph *g = h->g;
    int64_t H = c->heads, E = c->hidden, L = a->kv_lora, R = a->rope, Dq = a->nope + a->rope;
    const char *kname = NULL, *vname = NULL;
    if (c->use_cache) {
        kname = dm_arena_printf(&g->arena, "present.%d.key", layer);
        vname = dm_arena_printf(&g->arena, "present.%d.value", layer);
        if (!kname || !vname)
            return hf_oom(h);
    }
    if (latent && c->use_cache) { /* generate.c's decode steps */
        g->mla_dec_heads = H;
        g->mla_dec_kv = a->nope + a->v;
        g->mla_dec_qk = Dq;
        g->mla_dec_v = a->v;
    }
    int32_t q_states = mla_query(h, c, x);
    int32_t q = hf_transpose(h, hf_reshape(h, q_states, INTS(0, 0, H, Dq)), INTS(0, 2, 1, 3));
    int32_t q_pass = hf_narrow(h, q, 3, 0, a->nope), q_rot = hf_narrow(h, q, 3, a->nope, R);
    size_t s = hf_enter(h, "kv_a_proj_with_mqa");
    int32_t ckv = hf_linear(h, x, E, L + R, a->bias, -1, NULL);
    hf_leave(h, s);
    int32_t kv_nope = hf_narrow(h, ckv, 2, 0, L), k_rot = hf_narrow(h, ckv, 2, L, R);
    s = hf_enter(h, "kv_a_layernorm");
    kv_nope = hf_rms_norm(h, kv_nope, L, 1e-6);
    hf_leave(h, s);
    int32_t kv = -1;
    if (!latent) {
        s = hf_enter(h, "kv_b_proj");
        kv = hf_linear(h, kv_nope, L, H * (a->nope + a->v), false, -1, NULL);
        hf_leave(h, s);
        kv_nope = -1;
    } else {
        kv_nope = hf_unsqueeze(h, kv_nope, INTS(1));
    }
    k_rot = hf_unsqueeze(h, k_rot, INTS(1));
    /* cos.unsqueeze(1) on [B, H, S, R]: the model's [1, S, 1, R] viewed */
    int32_t cos4 = hf_reshape(h, cos, INTS(1, 1, -1, R)), sin4 = hf_reshape(h, sin, INTS(1, 1, -1, R));
    q_rot = mla_rope(h, a, q_rot, cos4, sin4);
    k_rot = mla_rope(h, a, k_rot, cos4, sin4);
    if (latent) {
        kv_nope = hf_cache_update(h, kv_nope, kname);
        k_rot = hf_cache_update(h, k_rot, vname);
    }
    int32_t qs = hf_op(h, DM_OP_Concat, 2, q_pass, q_rot);
    hf_attr_i(h, "axis", -1);
    if (latent) { /* expand_kv */
        s = hf_enter(h, "kv_b_proj");
        kv = hf_linear(h, kv_nope, L, H * (a->nope + a->v), false, -1, NULL);
        hf_leave(h, s);
    }
    kv = hf_transpose(h, hf_reshape(h, kv, INTS(0, -1, H, a->nope + a->v)), INTS(0, 2, 1, 3));
    int32_t k_nope = hf_narrow(h, kv, 3, 0, a->nope), v = hf_narrow(h, kv, 3, a->nope, a->v);
    int32_t k_exp = hf_op(h, DM_OP_Expand, 2, k_rot, hf_const_ints(h, INTS(1, H, 1, 1)));
    if (!latent)
        h->out_name = hf_cache_at_make(h, kname);
    int32_t k = hf_op(h, DM_OP_Concat, 2, k_nope, k_exp);
    hf_attr_i(h, "axis", -1);
    if (!latent) {
        k = hf_cache_update(h, k, kname);
        v = hf_cache_update(h, v, vname);
    }
    /* the attention core as hf_mla_attention's */
    int32_t o, p = -1;
    double scale = 1.0 / sqrt((double)Dq);
    if (h->sdpa) {
        int32_t vc = hf_reshape(h, v, INTS(0, H, -1, a->v));
        o = hf_sdpa_attention(h, (int32_t[]){qs, k, vc}, -1, true, H, H, Dq, a->v, scale,
                              c->attn_drop);
    } else {
        int32_t kt = hf_transpose(h, k, INTS(0, 1, 3, 2));
        int32_t sc = hf_op(h, DM_OP_MatMul, 2, qs, kt);
        sc = hf_op(h, DM_OP_Mul, 2, sc, hf_const_f(h, scale));
        sc = hf_op(h, DM_OP_Add, 2, sc, mask);
        p = hf_softmax_f32(h, sc, qs);
        p = hf_dropout(h, p, c->attn_drop);
        o = hf_op(h, DM_OP_MatMul, 2, p, hf_matmul_fold(h, v, H, a->v));
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3));
    o = hf_reshape(h, o, INTS(0, 0, -1));
    s = hf_enter(h, "o_proj");
    o = hf_linear(h, o, H * a->v, E, a->bias, -1, NULL);
    hf_leave(h, s);
    int32_t locals[] = {q_states, ckv, kv_nope, k_nope, k_rot, q_rot, qs, k, v};
    for (size_t j = 0; j < sizeof locals / sizeof locals[0]; j++)
        hf_hold(h, locals[j], hf_last_node(h));
    *attn_weights = p;
    return o;
}
