/*
 * gptoss.c (src/load/hf/): gpt_oss, GptOssForCausalLM as transformers 4.56.2
 * and 5.24.0 run it (modeling_gpt_oss.py, read in both wheels, and in 4.55.4's
 * and 5.0.0's to set the range), on the CPU and in training:
 *  - the decoder is Llama's (embeddings, pre-norm layers, final norm, untied
 *    lm_head) with GptOssRMSNorm ((weight * x).to(input_dtype),
 *    hf_rms_norm_olmo) and biases on q, k, v and o (GptOssConfig sets
 *    attention_bias True);
 *  - the rotary embedding without the cat of the frequencies: cos and sin
 *    [1, S, D/2] (emb = freqs), applied as _apply_rotary_emb does:
 *    torch.chunk(x, 2) (views), first * cos - second * sin, second * cos +
 *    first * sin, torch.cat (the YaRN rope_scaling changes inv_freq's values
 *    and attention_scaling, not the tensors);
 *  - eager_attention_forward with attention sinks: repeat_kv's copies, the
 *    scores (q k^T * scaling + mask), module.sinks [H] reshaped and expanded
 *    to [B, H, S, 1], torch.cat([scores, sinks], -1) [B, H, S, S+1], minus
 *    its max over the last dim (torch.max: values and int64 indices, which
 *    MaxBackward0 keeps), softmax in that dtype (no float32 upcast),
 *    probs[..., :-1] (a view: the sink dropped), dropout (none at p 0),
 *    matmul with the values; its attn_weights (the view, which keeps the
 *    probabilities alive) is bound to the decoder layer's `_` until the MLP's
 *    call rebinds it;
 *  - layer_types: sliding_attention layers read the sliding-window mask (the
 *    same [S, S] tensor size as the causal one); their DynamicSlidingWindowLayer
 *    keeps a view of the full cat at the prefill (the same bytes as a
 *    DynamicLayer) and only window - 1 positions in decode, which the
 *    decode steps do not model (they grow every layer's cache);
 *  - the MLP: GptOssTopKRouter (F.linear with bias to [N, E] logits, topk,
 *    softmax of the top values; 4.56 scatters them into zeros_like(logits)
 *    [N, E], 5.x keeps [N, k]); the experts' 3-D parameters gate_up_proj
 *    [E, H, 2I] (gate and up interleaved: gate_up[..., ::2] and [..., 1::2],
 *    strided views), gate_up_proj_bias [E, 2I], down_proj [E, I, H],
 *    down_proj_bias [E, H]; the gate clamp(max=limit), up clamp(-limit,
 *    limit), glu = gate * sigmoid(gate * alpha), (up + 1) * glu.
 *    4.56 on the CPU or in training (`hidden_states.device.type == "cpu" or
 *    self.training`; 4.55 tested self.training only, and is not modelled):
 *    the loop over the experts that got tokens (expert_loop: uniform routing
 *    gives every expert tokens), each expert's weights selected by
 *    gate_up_proj[expert_idx] (a select: a view, whose SelectBackward0 makes
 *    a zero gradient of the whole 3-D parameter per expert, added into its
 *    .grad); 5.x: grouped_mm_experts_forward (moe.c, hf_grouped_experts with
 *    the biases gathered per row and added in place, the weights used as
 *    stored, is_transposed).
 * GptOssPreTrainedModel sets _supports_sdpa False (4.55-5.24): from_config
 * raises for attn_implementation "sdpa", auto is eager (the graph is
 * eager_only); flash (its kernels take the sinks as s_aux) is not modelled.
 * PEFT 0.21.2 has no default target modules for gpt_oss (--lora-targets).
 */
#include "hf.h"

struct goss {
    int64_t vocab, hidden, inter, layers, heads, kv, D, E, k, window;
    double eps, drop, theta;
    bool tie, use_cache;
    unsigned char *sliding; /* per layer: layer_types[i] is "sliding_attention" */
};

/* param[expert_idx]: a select of the 3-D parameter (a view). */
static int32_t select_expert(struct hf *h, int32_t w, int64_t e)
{
    int32_t y = hf_op(h, DM_OP_Gather, 2, w, hf_const_i(h, e));
    hf_attr_i(h, "axis", 0);
    return y;
}

/* 4.56's loop (header) on x2 [N, H] with router_scores rw [N, E] and the
 * indices sel [N, k]; returns next_states [N, H]. */
static int32_t expert_loop(struct hf *h, const struct goss *c, int32_t x2, int32_t rw, int32_t sel)
{
    int64_t H = c->hidden, I = c->inter, E = c->E;
    size_t s = hf_enter(h, "experts");
    int32_t gu_w = hf_param(h, "gate_up_proj", DM_FLOAT, 3, (int64_t[]){E, H, 2 * I});
    int32_t gu_b = hf_param(h, "gate_up_proj_bias", DM_FLOAT, 2, (int64_t[]){E, 2 * I});
    int32_t dn_w = hf_param(h, "down_proj", DM_FLOAT, 3, (int64_t[]){E, I, H});
    int32_t dn_b = hf_param(h, "down_proj_bias", DM_FLOAT, 2, (int64_t[]){E, H});
    int32_t next = hf_zeros_like(h, x2, false); /* torch.zeros_like(hidden_states) */
    /* no_grad: one_hot(router_indices, E) [N, k, E] int64, permute(2, 1, 0) */
    int32_t mask = hf_op(h, DM_OP_OneHot, 3, sel, hf_const_i(h, E), hf_const_i(h, 1));
    hf_attr_i(h, "axis", -1);
    mask = hf_transpose(h, mask, INTS(2, 1, 0));
    /* expert_hit = greater(mask.sum(dim=(-1, -2)), 0).nonzero(): [E] int64,
     * bool, [hit, 1] int64 (every expert under uniform routing) */
    int32_t per = hf_op(h, DM_OP_ReduceSum, 2, mask, hf_const_ints(h, INTS(-1, -2)));
    hf_attr_i(h, "keepdims", 0);
    int32_t hit = hf_op(h, DM_OP_Greater, 2, per, hf_const_i(h, 0));
    hit = hf_op(h, DM_OP_Cast, 1, hit);
    hf_attr_i(h, "to", DM_INT64);
    hit = hf_unsqueeze(h, hit, INTS(1));
    int32_t sym = dm_graph_symbol(h->g, "expert_tokens");
    if (sym < 0)
        return hf_oom(h);
    int32_t last[10] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    for (int64_t e = 0; e < E && h->st == DNNMEM_OK; e++) {
        struct dm_node *n = hf_node(h, DM_OP_ExpertTokens, 1, &mask, 2);
        if (!n)
            break;
        int32_t tok = n->out[1], at[10];
        at[0] = hf_last_node(h);
        hf_attr_i(h, "token_axis", 2);
        hf_attr_i(h, "sym", sym);
        int32_t cur = hf_op(h, DM_OP_Gather, 2, x2, tok); /* hidden_states[token_idx] */
        hf_attr_i(h, "axis", 0);
        at[1] = hf_last_node(h);
        int32_t gu = hf_op(h, DM_OP_MatMul, 2, cur, select_expert(h, gu_w, e));
        gu = hf_op(h, DM_OP_Add, 2, gu, select_expert(h, gu_b, e));
        at[2] = at[7] = at[8] = hf_last_node(h);
        int32_t gl[3];
        int32_t gated = hf_gptoss_gate(h, gu, I, gl);
        at[3] = hf_last_node(h);
        at[9] = at[3] - 2; /* glu: (up + 1) and its product follow it */
        int32_t out = hf_op(h, DM_OP_MatMul, 2, gated, select_expert(h, dn_w, e));
        out = hf_op(h, DM_OP_Add, 2, out, select_expert(h, dn_b, e));
        at[4] = hf_last_node(h);
        /* routing_weights[token_idx, expert_idx, None]: [n, 1] */
        int32_t w = hf_op(h, DM_OP_Gather, 2, select_expert(h, hf_transpose(h, rw, INTS(1, 0)), e),
                          tok);
        hf_attr_i(h, "axis", 0);
        w = hf_unsqueeze(h, w, INTS(-1));
        at[5] = hf_last_node(h);
        int32_t y = hf_op(h, DM_OP_Mul, 2, out, w);
        at[6] = hf_last_node(h);
        next = hf_op(h, DM_OP_IndexAdd, 3, next, tok, y);
        hf_attr_i(h, "axis", 0);
        /* the loop's locals, bound until the next iteration rebinds them
         * (the last iteration's until forward returns) */
        int32_t now[10] = {tok, cur, gu, gated, out, w, y, gl[0], gl[1], gl[2]};
        /* the previous iteration's binding goes when this one's is made (the
         * clamped gate and up when gate_up is: their views rebind next) */
        for (int j = 0; j < 10; j++)
            hf_hold(h, last[j], at[j]);
        memcpy(last, now, sizeof now);
    }
    for (int j = 0; j < 10; j++)
        hf_hold(h, last[j], hf_last_node(h));
    hf_hold(h, mask, hf_last_node(h));
    hf_hold(h, hit, hf_last_node(h));
    hf_leave(h, s);
    return next;
}

/* GptOssMLP on x [B, S, H]: router, experts, back to [B, S, H]; *scores: the
 * router scores the decoder layer's `_` holds until it returns. */
static int32_t oss_mlp(struct hf *h, const struct goss *c, int32_t x, int32_t *scores)
{
    int64_t H = c->hidden, E = c->E;
    int32_t x2 = hf_reshape(h, x, INTS(-1, H));
    size_t s = hf_enter(h, "router");
    int32_t logits = hf_linear(h, x2, H, E, true, -1, NULL); /* F.linear(x, weight, bias) */
    int32_t vals;
    int32_t sel = hf_topk(h, logits, c->k, &vals);
    int32_t rw = hf_op(h, DM_OP_Softmax, 1, vals);
    hf_attr_i(h, "axis", 1);
    bool v5 = h->transformers >= 500;
    if (!v5) { /* zeros_like(router_logits).scatter_(1, router_indices, top values) */
        int32_t z = hf_zeros_like(h, logits, false);
        rw = hf_op(h, DM_OP_ScatterElements, 3, z, sel, rw);
        hf_attr_i(h, "axis", 1);
    }
    hf_hold(h, logits, hf_last_node(h));
    hf_leave(h, s);
    int32_t y;
    if (v5) {
        struct moe m = {.kind = MOE_GPTOSS, .experts = E, .top_k = c->k, .inter = c->inter};
        y = hf_grouped_experts(h, &m, H, x2, rw, sel, false);
        if (y < 0)
            return -1;
    } else {
        y = expert_loop(h, c, x2, rw, sel);
    }
    y = hf_op(h, DM_OP_Reshape, 2, y, hf_op(h, DM_OP_Shape, 1, x));
    *scores = rw;
    return y;
}

/* _apply_rotary_emb on x [B, n, S, D] with cos, sin [1, 1, S, D/2]. */
static int32_t oss_rope(struct hf *h, int32_t x, int32_t cos, int32_t sin, int64_t D,
                        const char *name)
{
    int32_t x1 = hf_narrow(h, x, -1, 0, D / 2), x2 = hf_narrow(h, x, -1, D / 2, D - D / 2);
    int32_t a = hf_op(h, DM_OP_Sub, 2, hf_op(h, DM_OP_Mul, 2, x1, cos),
                      hf_op(h, DM_OP_Mul, 2, x2, sin));
    int32_t b = hf_op(h, DM_OP_Add, 2, hf_op(h, DM_OP_Mul, 2, x2, cos),
                      hf_op(h, DM_OP_Mul, 2, x1, sin));
    h->out_name = name;
    int32_t y = hf_op(h, DM_OP_Concat, 2, a, b);
    hf_attr_i(h, "axis", -1);
    return y;
}

static int32_t proj(struct hf *h, const char *name, int32_t x, int64_t in, int64_t out)
{
    size_t s = hf_enter(h, "%s", name);
    int32_t y = hf_linear(h, x, in, out, true, -1, NULL);
    hf_leave(h, s);
    return y;
}

/* GptOssAttention with eager_attention_forward (header); *probs: what the
 * returned attn_weights view keeps alive. */
static int32_t oss_attention(struct hf *h, const struct goss *c, int layer, int32_t x, int32_t cos,
                             int32_t sin, int32_t mask, int32_t *probs)
{
    struct dm_graph *g = h->g;
    int64_t D = c->D, H = c->heads, KV = c->kv;
    const char *kname = NULL, *vname = NULL;
    if (c->use_cache) {
        kname = dm_arena_printf(&g->arena, "present.%d.key", layer);
        vname = dm_arena_printf(&g->arena, "present.%d.value", layer);
        if (!kname || !vname)
            return hf_oom(h);
    }
    int32_t q = proj(h, "q_proj", x, c->hidden, H * D);
    q = hf_transpose(h, hf_reshape(h, q, INTS(0, 0, -1, D)), INTS(0, 2, 1, 3));
    int32_t k = proj(h, "k_proj", x, c->hidden, KV * D);
    k = hf_transpose(h, hf_reshape(h, k, INTS(0, 0, -1, D)), INTS(0, 2, 1, 3));
    h->out_name = hf_cache_at_make(h, vname);
    int32_t v = proj(h, "v_proj", x, c->hidden, KV * D);
    v = hf_transpose(h, hf_reshape(h, v, INTS(0, 0, -1, D)), INTS(0, 2, 1, 3));
    q = oss_rope(h, q, cos, sin, D, NULL);
    k = oss_rope(h, k, cos, sin, D, hf_cache_at_make(h, kname));
    int32_t k_embed = k, v_states = v;
    k = hf_cache_update(h, k, kname);
    v = hf_cache_update(h, v, vname);
    if (h->cache_copy && c->use_cache) {
        hf_hold(h, k_embed, hf_last_node(h));
        hf_hold(h, v_states, hf_last_node(h));
    }
    int32_t kr = hf_repeat_kv(h, k, H / KV, H, D), vr = hf_repeat_kv(h, v, H / KV, H, D);
    int32_t s = hf_op(h, DM_OP_MatMul, 2, q, hf_transpose(h, kr, INTS(0, 1, 3, 2)));
    s = hf_op(h, DM_OP_Mul, 2, s, hf_const_f(h, 1.0 / sqrt((double)D)));
    s = hf_op(h, DM_OP_Add, 2, s, mask);
    /* sinks.reshape(1, -1, 1, 1).expand(B, -1, S, -1) */
    int32_t sk = hf_param(h, "sinks", DM_FLOAT, 1, &H);
    sk = hf_reshape(h, sk, INTS(1, -1, 1, 1));
    int32_t bhs1 = hf_op(h, DM_OP_Shape, 1, hf_narrow(h, s, -1, 0, 1));
    int32_t skx = hf_op(h, DM_OP_Expand, 2, sk, bhs1);
    int32_t cat = hf_op(h, DM_OP_Concat, 2, s, skx);
    hf_attr_i(h, "axis", -1);
    int32_t mx;
    hf_topk(h, cat, 1, &mx); /* combined_logits.max(dim=-1, keepdim=True) */
    int32_t z = hf_op(h, DM_OP_Sub, 2, cat, mx);
    int32_t p = hf_op(h, DM_OP_Softmax, 1, z);
    hf_attr_i(h, "axis", -1);
    /* probs[..., :-1]: a view */
    int32_t sc = hf_op(h, DM_OP_Slice, 4, p, hf_const_ints(h, INTS(0)), hf_const_ints(h, INTS(-1)),
                       hf_const_ints(h, INTS(-1)));
    sc = hf_dropout(h, sc, c->drop);
    int32_t o = hf_op(h, DM_OP_MatMul, 2, sc, vr);
    o = hf_transpose(h, o, INTS(0, 2, 1, 3));
    o = hf_reshape(h, o, INTS(0, 0, -1));
    hf_hold(h, kr, hf_last_node(h));
    hf_hold(h, vr, hf_last_node(h));
    o = proj(h, "o_proj", o, H * D, c->hidden);
    *probs = sc;
    return o;
}

static int32_t norm(struct hf *h, const struct goss *c, int32_t x, const char *name)
{
    size_t s = hf_enter(h, "%s", name);
    x = hf_rms_norm_olmo(h, x, c->hidden, c->eps);
    hf_leave(h, s);
    return x;
}

static int32_t build(struct hf *h, const struct goss *c, int32_t ids)
{
    int64_t D = c->D, half = c->D / 2;
    size_t top = hf_enter(h, "model");
    size_t s = hf_enter(h, "embed_tokens");
    int32_t emb_w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, c->hidden});
    int32_t x = hf_op(h, DM_OP_Gather, 2, emb_w, ids);
    hf_leave(h, s);
    int32_t emb = x;
    int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t pos = hf_op(h, DM_OP_Range, 3, hf_const_i(h, 0), seq, hf_const_i(h, 1));
    int32_t pos_ids = hf_unsqueeze(h, pos, INTS(0));
    /* create_causal_mask and create_sliding_window_causal_mask: one [B, 1,
     * S, S] mask each (a window of S or more masks as the causal one) */
    int32_t full = hf_dec_causal_mask_batch(h, ids, seq, "causal_mask");
    int32_t slide = hf_dec_causal_mask_batch(h, ids, seq, "sliding_mask");
    /* GptOssRotaryEmbedding: cos and sin [1, S, D/2] (no cat), float32, then
     * .to(x.dtype) */
    s = hf_enter(h, "rotary_emb");
    hf_param(h, "inv_freq", DM_FLOAT, 1, &half);
    double *inv = malloc((size_t)half * sizeof *inv);
    if (!inv)
        return hf_oom(h);
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0 / pow(c->theta, (double)(2 * i) / (double)D);
    int32_t invf = hf_constant(h);
    hf_attr_floats(h, "value_floats", (int)half, inv);
    free(inv);
    int32_t posf = hf_op(h, DM_OP_Cast, 1, hf_unsqueeze(h, pos_ids, INTS(1)));
    hf_attr_i(h, "to", DM_FLOAT);
    int32_t freqs = hf_op(h, DM_OP_MatMul, 2, hf_unsqueeze(h, invf, INTS(0, 2)), posf);
    freqs = hf_transpose(h, freqs, INTS(0, 2, 1));
    int32_t one = hf_const_f(h, 1.0); /* attention_scaling (YaRN's value: no tensor) */
    int32_t cos = hf_op(h, DM_OP_Mul, 2, hf_op(h, DM_OP_Cos, 1, freqs), one);
    hf_keep32(h, cos);
    int32_t sin = hf_op(h, DM_OP_Mul, 2, hf_op(h, DM_OP_Sin, 1, freqs), one);
    hf_keep32(h, sin);
    cos = hf_op(h, DM_OP_CastLike, 2, cos, x);
    sin = hf_op(h, DM_OP_CastLike, 2, sin, x);
    hf_leave(h, s);
    /* cos.unsqueeze(1) in each layer: views, made once */
    h->out_name = "position_embeddings.cos";
    int32_t cos4 = hf_unsqueeze(h, cos, INTS(1));
    h->out_name = "position_embeddings.sin";
    int32_t sin4 = hf_unsqueeze(h, sin, INTS(1));
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layers.%d", i);
        int32_t residual = x;
        int32_t y = norm(h, c, x, "input_layernorm");
        s = hf_enter(h, "self_attn");
        int32_t probs = -1, scores = -1;
        y = oss_attention(h, c, i, y, cos4, sin4, c->sliding[i] ? slide : full, &probs);
        hf_leave(h, s);
        x = hf_op(h, DM_OP_Add, 2, residual, y);
        residual = x;
        y = norm(h, c, x, "post_attention_layernorm");
        s = hf_enter(h, "mlp");
        y = oss_mlp(h, c, y, &scores);
        hf_leave(h, s);
        /* `hidden_states, _ = self.self_attn(...)`: `_` holds the attention
         * weights until `hidden_states, _ = self.mlp(...)` rebinds it to the
         * router scores, held until the layer returns */
        hf_hold(h, probs, hf_last_node(h));
        x = hf_op(h, DM_OP_Add, 2, residual, y);
        hf_hold(h, scores, hf_last_node(h));
        hf_leave(h, ls);
    }
    x = norm(h, c, x, "norm");
    int32_t held[] = {emb, pos, full, slide, cos4, sin4};
    for (size_t j = 0; j < sizeof held / sizeof *held; j++)
        hf_hold(h, held[j], hf_last_node(h));
    hf_leave(h, top);
    s = hf_enter(h, "lm_head");
    x = hf_linear(h, x, c->hidden, c->vocab, false, c->tie ? emb_w : -1, "logits");
    hf_leave(h, s);
    return x;
}

/* layer_types (default: sliding where (i + 1) % 2, GptOssConfig), each
 * "sliding_attention" or "full_attention". */
static void read_layer_types(struct hf *h, struct goss *c)
{
    c->sliding = dm_arena_alloc(&h->g->arena, (size_t)(c->layers > 0 ? c->layers : 1));
    if (!c->sliding) {
        hf_oom(h);
        return;
    }
    json_t *lt = hf_field(h, "layer_types");
    if (lt && (!json_is_array(lt) || (int64_t)json_array_size(lt) != c->layers)) {
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'layer_types' must be a list of %lld entries (one per layer)",
                (long long)c->layers);
        return;
    }
    for (int64_t i = 0; i < c->layers; i++) {
        const char *t = lt ? json_string_value(json_array_get(lt, (size_t)i)) : NULL;
        if (lt && (!t || (strcmp(t, "sliding_attention") != 0 && strcmp(t, "full_attention") != 0))) {
            hf_fail(h, DNNMEM_E_MODEL,
                    "config field 'layer_types' entry %lld must be \"sliding_attention\" or "
                    "\"full_attention\"",
                    (long long)i);
            return;
        }
        c->sliding[i] = lt ? strcmp(t, "sliding_attention") == 0 : (i + 1) % 2 != 0;
    }
}

static void read_config(struct hf *h, struct goss *c)
{
    c->vocab = hf_get_int(h, "vocab_size", 201088, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", 2880, MAX_SIZE);
    c->inter = hf_get_int(h, "intermediate_size", 2880, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", 36, MAX_LAYERS);
    c->heads = hf_get_int(h, "num_attention_heads", 64, MAX_SIZE);
    c->kv = hf_get_int(h, "num_key_value_heads", 8, MAX_SIZE);
    c->D = hf_get_int(h, "head_dim", 64, MAX_SIZE);
    c->E = hf_get_int(h, "num_local_experts", 128, 1 << 16);
    c->k = hf_get_int(h, "num_experts_per_tok", 4, 1 << 16);
    c->window = hf_get_int(h, "sliding_window", 128, MAX_SIZE);
    c->eps = hf_get_num(h, "rms_norm_eps", 1e-5, 0, 1);
    c->drop = hf_get_num(h, "attention_dropout", 0.0, 0, 1);
    c->theta = hf_get_num(h, "rope_theta", 150000.0, 1e-30, 1e30);
    c->tie = hf_get_bool(h, "tie_word_embeddings", false);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    if (h->st != DNNMEM_OK)
        return;
    if (c->heads % c->kv)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'num_key_value_heads' (%lld) does not divide 'num_attention_heads' "
                "(%lld)",
                (long long)c->kv, (long long)c->heads);
    else if (c->D % 2)
        hf_fail(h, DNNMEM_E_MODEL, "config field 'head_dim' (%lld) must be even for the rotary "
                "embedding", (long long)c->D);
    else if (c->k > c->E)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'num_experts_per_tok' (%lld) exceeds 'num_local_experts' (%lld)",
                (long long)c->k, (long long)c->E);
    else if (hf_get_bool(h, "output_router_logits", false))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'output_router_logits' is true; gpt_oss's load-balancing loss is "
                "not modelled (modelled: false, GptOssConfig's default)");
    json_t *rs = hf_field(h, "rope_scaling");
    json_t *t = json_is_object(rs) ? json_object_get(rs, "rope_type") : NULL;
    if (json_is_object(rs) && !t)
        t = json_object_get(rs, "type");
    const char *kind = t ? json_string_value(t) : "default";
    if (h->st == DNNMEM_OK && rs && !json_is_null(rs) &&
        (!kind || (strcmp(kind, "yarn") != 0 && strcmp(kind, "default") != 0)))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'rope_scaling' has type '%s'; modelled for gpt_oss: yarn, default",
                kind ? kind : "?");
    if (h->st == DNNMEM_OK)
        read_layer_types(h, c);
}

enum dnnmem_status hf_gptoss(struct hf *h, const char *type)
{
    struct goss c = {0};
    if (!hf_check(h, type))
        return h->st;
    read_config(h, &c);
    if (h->st != DNNMEM_OK || !hf_begin(h, type))
        return h->st;
    h->g->eager_only = true; /* _supports_sdpa = False */
    int64_t least = c.layers * (54 + c.E * 11), budget = h->g->max_nodes;
    if (h->transformers < 500 && budget > 0 && least > budget)
        return hf_fail(h, DNNMEM_E_LIMIT,
                       "the config implies at least %lld graph nodes (%lld layers of %lld experts), "
                       "beyond the budget of %lld (--max-nodes)",
                       (long long)least, (long long)c.layers, (long long)c.E, (long long)budget);
    int32_t ids = hf_causal_ids(h, c.layers, c.use_cache, false);
    if (ids < 0)
        return h->st;
    int32_t logits = build(h, &c, ids);
    return hf_causal_outputs(h, logits, c.layers, c.use_cache, false);
}
