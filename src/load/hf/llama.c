/*
 * llama.c (src/load/hf/): the Llama family (Llama, Mistral, Qwen2, Qwen3, Granite), whose
 * decoder the MoE families (moe.c, deepseek.c) share.
 *
 * Granite (modeling_granite.py, the same in 4.51, 4.56 and 5.24) is Llama's
 * graph with four multipliers, each an op of its own whatever its value
 * (x * 1.0 is a new tensor): inputs_embeds * embedding_multiplier (the
 * product rebinds inputs_embeds, which the model's forward then keeps),
 * attention_multiplier as the attention's scaling (in place of
 * head_dim**-0.5), residual + out * residual_multiplier after the attention
 * and after the MLP, and logits / logits_scaling (a second [B, S, V]
 * tensor; the first goes as the division makes it).
 *
 * OLMo 2 (modeling_olmo2.py, 4.51-5.24): Llama's graph with its norms moved:
 * no input_layernorm; x + post_attention_layernorm(attn(x)), then
 * x + post_feedforward_layernorm(mlp(x)); q_norm and k_norm over the whole
 * q_proj and k_proj outputs (before the view into heads); every norm an
 * Olmo2RMSNorm: from 4.52 (4.52.4's modeling_olmo2.py) (weight *
 * hidden_states).to(input_dtype), hf_rms_norm_olmo; 4.51's is LlamaRMSNorm.
 *
 * StarCoder2 (modeling_starcoder2.py, 4.51-5.24): Llama's attention with
 * biases on q, k, v, o (use_bias) and dropout(residual_dropout) on o_proj's
 * output; nn.LayerNorm (with bias) for input_layernorm,
 * post_attention_layernorm and norm; the MLP c_fc, act (gelu_pytorch_tanh),
 * c_proj, dropout(residual_dropout); dropout(embedding_dropout) on the
 * embeddings; tied embeddings by default.
 *
 * Their task heads (the registry's heads) are frame.c's hf_task_head on
 * the model's last hidden state.
 */
#include "hf.h"

/* Olmo2RMSNorm, by release (header). */
static int32_t olmo_norm(struct hf *h, int32_t x, int64_t dim, double eps)
{
    return h->transformers >= 452 ? hf_rms_norm_olmo(h, x, dim, eps) : hf_rms_norm(h, x, dim, eps);
}

/* One of q, k, v: proj(x).view(B, S, -1, D) [-> norm] .transpose(1, 2). With
 * `bshd`, the transpose is left to the caller (see llama_attention). */
static int32_t head_proj(struct hf *h, const struct llama *c, int32_t x, const char *proj,
                         const char *norm, int64_t heads, const char *name, bool bshd)
{
    size_t s = hf_enter(h, "%s", proj);
    int32_t y = hf_linear(h, x, c->hidden, heads * c->head_dim, c->qkv_bias, -1, NULL);
    hf_leave(h, s);
    if (c->olmo2 && norm) { /* self.q_norm(self.q_proj(hidden_states)), then the view */
        s = hf_enter(h, "%s", norm);
        y = olmo_norm(h, y, heads * c->head_dim, c->eps);
        hf_leave(h, s);
    }
    y = hf_reshape(h, y, INTS(0, 0, -1, c->head_dim));
    if (c->qk_norm && norm && !c->olmo2) {
        s = hf_enter(h, "%s", norm);
        y = hf_rms_norm(h, y, c->head_dim, c->eps);
        hf_leave(h, s);
    }
    if (bshd)
        return y;
    h->out_name = name;
    return hf_transpose(h, y, INTS(0, 2, 1, 3));
}

/* LlamaAttention.forward with eager_attention_forward. */
static int32_t llama_attention(struct hf *h, const struct llama *c, int layer, int32_t x,
                               int32_t cos, int32_t sin, int32_t mask, int32_t *attn_weights)
{
    struct dm_graph *g = h->g;
    int64_t D = c->head_dim, H = c->heads, KV = c->kv_heads;
    double scaling = c->granite ? c->attn_mult : 1.0 / sqrt((double)D);
    const char *kname = NULL, *vname = NULL;
    if (c->use_cache) { /* past_key_value.update(k, v) keeps them in the returned cache */
        kname = dm_arena_printf(&g->arena, "present.%d.key", layer);
        vname = dm_arena_printf(&g->arena, "present.%d.value", layer);
        if (!kname || !vname)
            return hf_oom(h);
    }
    /* q and k are transposed views when apply_rotary_pos_emb runs, and
     * elementwise ops give their results the input's memory order
     * (TensorIterator), so q_embed and k_embed are [B, S, H, D] in memory,
     * seen as [B, H, S, D]: the rotary embedding is built on the
     * [B, S, H, D] tensors (cos, sin unsqueezed at 2) and transposed after,
     * the same bytes, and the transposed views stay non-contiguous */
    int32_t q = head_proj(h, c, x, "q_proj", "q_norm", H, NULL, true);
    int32_t k = head_proj(h, c, x, "k_proj", "k_norm", KV, NULL, true);
    int32_t v = head_proj(h, c, x, "v_proj", NULL, KV, hf_cache_at_make(h, vname), false);
    int32_t q_states = q, k_states = k;
    q = hf_rope(h, q, cos, sin, D, NULL);
    int32_t q_embed = q;
    q = hf_transpose(h, q, INTS(0, 2, 1, 3));
    k = hf_rope(h, k, cos, sin, D, NULL);
    h->out_name = hf_cache_at_make(h, kname);
    k = hf_transpose(h, k, INTS(0, 2, 1, 3));
    /* query_states, key_states = apply_rotary_pos_emb(...): the projections
     * are let go when it returns, after both rotations (measured: the H200
     * trace of Llama-3.2-1B frees q_proj's and k_proj's outputs together,
     * after k's rotation) */
    hf_hold(h, q_states, hf_last_node(h));
    hf_hold(h, k_states, hf_last_node(h));
    int32_t k_embed = k, v_states = v;
    k = hf_cache_update(h, k, kname);
    v = hf_cache_update(h, v, vname);
    /* key_states, value_states = past_key_values.update(...) (5.x: copies):
     * the rotated k and v_proj's output go when update returns, after both
     * copies (the same trace) */
    if (h->cache_copy && c->use_cache) {
        hf_hold(h, k_embed, hf_last_node(h));
        hf_hold(h, v_states, hf_last_node(h));
    }
    int32_t o, p = -1;
    int32_t kr = k, vr = v, k_local = k, v_local = v;
    if ((o = hf_gqa_attention(h, q, k, v, H, KV, D, scaling, c->attn_drop)) >= 0)
        goto out;
    /* flash_attention_forward takes grouped heads; 4.51's own
     * Qwen2MoeFlashAttention2 (modeling_qwen2_moe.py, copied from the old
     * Qwen2FlashAttention2) still runs repeat_kv first, then transposes the
     * repeated tensors into flash_attn_func as views */
    bool grouped = h->flash && strcmp(c->type, "qwen2_moe") != 0;
    kr = grouped ? k : hf_repeat_kv(h, k, H / KV, H, D);
    vr = grouped ? v : hf_repeat_kv(h, v, H / KV, H, D);
    /* eager_attention_forward's locals key_states, value_states: the
     * repeat_kv results (k and v themselves without GQA), not the folds */
    k_local = kr;
    v_local = vr;
    /* torch.matmul folds a 4-D operand to [B * H, ., .] with reshape, which
     * copies a non-contiguous one, and BmmBackward keeps the copy: always q
     * (the rope result in [B, S, H, D] order), and without GQA k and v (the
     * repeated tensors of repeat_kv are contiguous). Each fold is made inside
     * its own matmul call (_matmul_impl), so without grad it is a temporary
     * of that call: v's only when attn_weights @ v runs (below), after the
     * softmax (measured: tf4.51 tiny-olmo2 bf16 eager inference, whose 4.51
     * DynamicCache keeps the strided k and v, +2.3% while both folds were
     * live at the softmax) */
    /* 4.56+ sdpa: no .contiguous(), the kernel takes the views */
    bool as_is = h->flash || (h->sdpa && h->sdpa_as_is);
    if (!as_is) /* sdpa: .contiguous(); eager: torch.matmul's fold (hf_matmul_fold) */
        q = h->sdpa ? hf_reshape(h, q, INTS(0, H, -1, D)) : hf_matmul_fold(h, q, H, D);
    if (H == KV && !as_is) {
        kr = h->sdpa ? hf_reshape(h, k, INTS(0, H, -1, D)) : hf_matmul_fold(h, k, H, D);
        if (h->sdpa)
            vr = hf_reshape(h, v, INTS(0, H, -1, D));
    }
    if (h->flash) {
        o = hf_flash_attention(h, q, kr, vr, scaling, true);
    } else if (h->sdpa) {
        /* sdpa_attention_forward: query, key and value .contiguous() (the
         * same copies), then one F.scaled_dot_product_attention(is_causal,
         * dropout_p = attention_dropout in training, scale = head_dim**-0.5):
         * no mask, no scores, no probabilities; its output is the [B, S, H, D]
         * buffer the kernel wrote, so .transpose(1, 2).contiguous() copies
         * nothing */
        o = hf_sdpa_attention(h, (int32_t[]){q, kr, vr}, -1, true, H, H, D, D, scaling,
                              c->attn_drop);
    } else {
        int32_t kt = hf_transpose(h, kr, INTS(0, 1, 3, 2));
        int32_t s = hf_op(h, DM_OP_MatMul, 2, q, kt);
        int32_t scale = hf_const_f(h, scaling); /* self.scaling = head_dim**-0.5 */
        s = hf_op(h, DM_OP_Mul, 2, s, scale);
        s = hf_op(h, DM_OP_Add, 2, s, mask);
        p = hf_softmax_f32(h, s, q);
        p = hf_dropout(h, p, c->attn_drop);
        if (H == KV)
            vr = hf_matmul_fold(h, v, H, D);
        o = hf_op(h, DM_OP_MatMul, 2, p, vr);
    }
out:
    o = hf_transpose(h, o, INTS(0, 2, 1, 3)); /* .transpose(1, 2).contiguous() */
    o = hf_reshape(h, o, INTS(0, 0, -1));      /* eager: copies the transposed tensor */
    /* the attention function's locals key_states, value_states (the
     * repeat_kv results) live until it returns */
    hf_hold(h, k_local, hf_last_node(h));
    hf_hold(h, v_local, hf_last_node(h));
    size_t sc = hf_enter(h, "o_proj");
    o = hf_linear(h, o, H * D, c->hidden, c->o_bias, -1, NULL);
    hf_leave(h, sc);
    if (c->starcoder2)
        o = hf_dropout(h, o, c->resid_drop);
    /* and LlamaAttention.forward's query_states (the rotated q, which the
     * matmul copies) until it returns */
    hf_hold(h, q_embed, hf_last_node(h));
    /* 4.x's Qwen2MoeAttention (the class before the attention interface,
     * modeling_qwen2_moe.py 4.51.3 and 4.56.2) sets attn_weights = None
     * unless output_attentions before it returns: the probabilities go with
     * it, not with the decoder layer (measured: tiny-qwen2-moe fp32
     * inference +4.0% while they were kept through the MoE block) */
    if (strcmp(c->type, "qwen2_moe") == 0 && h->transformers < 500) {
        hf_hold(h, p, hf_last_node(h));
        p = -1;
    }
    *attn_weights = p;
    return o;
}

/* OLMo 2's norm of a sublayer's output, before the residual add. */
static int32_t post_norm(struct hf *h, const struct llama *c, int32_t y, const char *name)
{
    size_t s = hf_enter(h, "%s", name);
    y = olmo_norm(h, y, c->hidden, c->eps);
    hf_leave(h, s);
    return y;
}

/* Granite's hidden_states * residual_multiplier before the residual add. */
static int32_t residual_scaled(struct hf *h, const struct llama *c, int32_t y)
{
    return c->granite ? hf_op(h, DM_OP_Mul, 2, y, hf_const_f(h, c->resid_mult)) : y;
}

/* A decoder layer's norm: RMSNorm, or StarCoder2's nn.LayerNorm. */
static int32_t layer_norm(struct hf *h, const struct llama *c, int32_t x, const char *name)
{
    size_t s = hf_enter(h, "%s", name);
    x = c->starcoder2 ? hf_layer_norm(h, x, c->hidden, c->eps) : hf_rms_norm(h, x, c->hidden, c->eps);
    hf_leave(h, s);
    return x;
}

/* Starcoder2MLP: c_fc, act, c_proj, dropout. */
static int32_t starcoder2_mlp(struct hf *h, const struct llama *c, int32_t x)
{
    size_t s = hf_enter(h, "c_fc");
    int32_t y = hf_linear(h, x, c->hidden, c->inter, c->mlp_bias, -1, NULL);
    hf_leave(h, s);
    s = hf_enter(h, "act");
    y = hf_dec_act(h, c->act, y);
    hf_leave(h, s);
    s = hf_enter(h, "c_proj");
    y = hf_linear(h, y, c->inter, c->hidden, c->mlp_bias, -1, NULL);
    hf_leave(h, s);
    return hf_dropout(h, y, c->resid_drop);
}

static int32_t llama_mlp(struct hf *h, const struct llama *c, int32_t x)
{
    if (c->starcoder2)
        return starcoder2_mlp(h, c, x);
    size_t s = hf_enter(h, "gate_proj");
    int32_t gate = hf_linear(h, x, c->hidden, c->inter, c->mlp_bias, -1, NULL);
    hf_leave(h, s);
    /* ACT2FN["silu"] = nn.SiLU: one op keeping its input (SiluBackward0) */
    s = hf_enter(h, "act_fn");
    int32_t act = hf_op(h, DM_OP_Silu, 1, gate);
    hf_leave(h, s);
    s = hf_enter(h, "up_proj");
    int32_t up = hf_linear(h, x, c->hidden, c->inter, c->mlp_bias, -1, NULL);
    hf_leave(h, s);
    int32_t m = hf_op(h, DM_OP_Mul, 2, act, up);
    s = hf_enter(h, "down_proj");
    m = hf_linear(h, m, c->inter, c->hidden, c->mlp_bias, -1, NULL);
    hf_leave(h, s);
    return m;
}

/* LlamaForCausalLM (and Mistral, Qwen2, Qwen3). */
static int32_t build_llama(struct hf *h, const struct llama *c, int32_t ids)
{
    int64_t D = c->head_dim;
    if (c->moe && c->moe->aux) {
        h->g->router = dm_arena_array(&h->g->arena, (size_t)c->layers, sizeof *h->g->router);
        if (!h->g->router)
            return hf_oom(h);
        h->g->router_top_k = c->moe->top_k;
        h->g->router_aux_coef = c->moe->aux_coef;
    }
    if (c->moe && h->batched_decode) { /* the decode steps' batched_mm layers (moe.c) */
        if (c->layers > INT32_MAX)
            return hf_oom(h);
        h->g->moe_dec_layer = dm_arena_array(&h->g->arena, (size_t)c->layers,
                                             sizeof *h->g->moe_dec_layer);
        if (!h->g->moe_dec_layer)
            return hf_oom(h);
        h->g->n_moe_dec = (int32_t)c->layers;
        for (int64_t i = 0; i < c->layers; i++)
            h->g->moe_dec_layer[i] = hf_moe_layer(c->moe, i);
    }
    size_t top = hf_enter(h, "model");
    size_t s = hf_enter(h, "embed_tokens");
    int32_t emb_w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, c->hidden});
    int32_t x = hf_op(h, DM_OP_Gather, 2, emb_w, ids);
    hf_leave(h, s);
    if (c->granite)
        x = hf_op(h, DM_OP_Mul, 2, x, hf_const_f(h, c->emb_mult));
    int32_t emb = x;
    if (c->starcoder2) /* hidden_states = dropout(inputs_embeds): emb stays the local */
        x = hf_dropout(h, x, c->emb_drop);

    /* cache_position = arange(S); position_ids = cache_position.unsqueeze(0) */
    int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t zero = hf_const_i(h, 0), one = hf_const_i(h, 1);
    int32_t pos = hf_op(h, DM_OP_Range, 3, zero, seq, one);
    int32_t pos_ids = hf_unsqueeze(h, pos, INTS(0));

    /* with sdpa and no attention_mask, _update_causal_mask returns None
     * (_ignore_causal_mask_sdpa): the kernel applies is_causal itself */
    int32_t mask = -1;
    if (!h->sdpa) {
        /* the 4-D causal mask: full((S, S), finfo.min).triu(1)[None, None]
         * expanded to [B, 1, S, S] (a view): one [S, S] tensor of the model's
         * dtype, made once per forward (the in-place multiply by the cache-position
         * comparison makes no tensor that outlives it) */
        int32_t ss = hf_op(h, DM_OP_Concat, 2, seq, seq);
        hf_attr_i(h, "axis", 0);
        int32_t full = hf_op(h, DM_OP_ConstantOfShape, 1, ss);
        struct dm_tensor *fill = dm_arena_alloc(&h->g->arena, sizeof *fill);
        struct dm_dim *fd = dm_arena_alloc(&h->g->arena, sizeof *fd);
        struct dm_value *fv = dm_arena_alloc(&h->g->arena, sizeof *fv);
        double *ff = dm_arena_alloc(&h->g->arena, sizeof *ff);
        if (!fill || !fd || !fv || !ff)
            return hf_oom(h);
        *ff = -FLT_MAX;
        *fv = (struct dm_value){.n = 1, .is_float = true, .f = ff};
        *fd = (struct dm_dim){1, -1};
        *fill = (struct dm_tensor){.name = "value", .dtype = DM_FLOAT, .rank = 1, .dims = fd,
                                   .role = DM_ROLE_CONSTANT, .producer = -1, .value = fv};
        struct dm_attr *fa = hf_attr(h, "value", DM_ATTR_TENSOR);
        if (fa)
            fa->t = fill;
        int32_t k1 = hf_const_i(h, 1);
        int32_t tri = hf_op(h, DM_OP_Trilu, 2, full, k1);
        hf_attr_i(h, "upper", 1);
        int32_t axm = hf_const_ints(h, INTS(0, 1));
        h->out_name = "causal_mask";
        mask = hf_op(h, DM_OP_Unsqueeze, 2, tri, axm);
    }

    /* LlamaRotaryEmbedding: inv_freq is a non-persistent buffer on the
     * device, counted as a weight. The schedule treats whatever is computed
     * from a weight as a parameter view (no memory) and training would give
     * it a gradient, so the buffer is a weight no node reads, and the
     * computation reads the same values through a Constant (host-side, as
     * every input of this chain is known from the dims). forward runs under
     * no_grad: cos and sin are allocated once per forward, [1, S, D] each. */
    s = hf_enter(h, "rotary_emb");
    int64_t half = D / 2;
    hf_param(h, "inv_freq", DM_FLOAT, 1, &half);
    double *inv = malloc((size_t)half * sizeof *inv);
    if (!inv)
        return hf_oom(h);
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0 / pow(c->theta, (double)(2 * i) / (double)D);
    int32_t invf = hf_constant(h);
    hf_attr_floats(h, "value_floats", (int)half, inv);
    free(inv);
    int32_t inv3 = hf_unsqueeze(h, invf, INTS(0, 2));           /* [1, D/2, 1] */
    int32_t pos3 = hf_unsqueeze(h, pos_ids, INTS(1));           /* [1, 1, S] */
    int32_t posf = hf_op(h, DM_OP_Cast, 1, pos3);
    hf_attr_i(h, "to", DM_FLOAT);
    int32_t freqs = hf_op(h, DM_OP_MatMul, 2, inv3, posf);    /* [1, D/2, S] */
    freqs = hf_transpose(h, freqs, INTS(0, 2, 1));
    int32_t embf = hf_op(h, DM_OP_Concat, 2, freqs, freqs);
    hf_attr_i(h, "axis", -1);
    int32_t scaling = hf_const_f(h, 1.0);                     /* attention_scaling */
    int32_t cos = hf_op(h, DM_OP_Cos, 1, embf);
    cos = hf_op(h, DM_OP_Mul, 2, cos, scaling);
    int32_t sin = hf_op(h, DM_OP_Sin, 1, embf);
    sin = hf_op(h, DM_OP_Mul, 2, sin, scaling);
    hf_leave(h, s);
    /* cos.unsqueeze(1) in every layer is a view of the same tensor: made
     * once here; [1, S, 1, D] as the rotary embedding is built on
     * [B, S, H, D] (llama_attention) */
    int32_t ax1 = hf_const_ints(h, INTS(2));
    h->out_name = "position_embeddings.cos";
    cos = hf_op(h, DM_OP_Unsqueeze, 2, cos, ax1);
    h->out_name = "position_embeddings.sin";
    sin = hf_op(h, DM_OP_Unsqueeze, 2, sin, ax1);

    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layers.%d", i);
        int32_t residual = x, y = x;
        if (!c->olmo2)
            y = layer_norm(h, c, x, "input_layernorm");
        s = hf_enter(h, "self_attn");
        int32_t attn_w = -1, router = -1;
        y = c->mla ? hf_mla_attention(h, c, i, y, cos, sin, mask, &attn_w)
                   : llama_attention(h, c, i, y, cos, sin, mask, &attn_w);
        hf_leave(h, s);
        if (c->olmo2)
            y = post_norm(h, c, y, "post_attention_layernorm");
        x = hf_op(h, DM_OP_Add, 2, residual, residual_scaled(h, c, y));
        residual = x;
        y = x;
        if (!c->olmo2)
            y = layer_norm(h, c, x, "post_attention_layernorm");
        bool sparse = c->moe && hf_moe_layer(c->moe, i);
        /* 4.x's MixtralDecoderLayer.block_sparse_moe is 5.x's .mlp */
        s = hf_enter(h, "%s",
                     sparse && c->moe->kind == MOE_MIXTRAL && h->transformers < 500
                         ? "block_sparse_moe"
                         : "mlp");
        y = !sparse                         ? llama_mlp(h, c, y)
            : c->moe->kind == MOE_DEEPSEEK ? hf_deepseek_moe(h, c, c->moe, y)
                                           : hf_sparse_moe(h, c, c->moe, y, &router);
        hf_leave(h, s);
        if (c->olmo2)
            y = post_norm(h, c, y, "post_feedforward_layernorm");
        x = hf_op(h, DM_OP_Add, 2, residual, residual_scaled(h, c, y));
        /* the decoder layer's self_attn_weights: the attention probabilities
         * live until the layer returns, whatever output_attentions says;
         * likewise the router logits of a MoE block */
        hf_hold(h, attn_w, hf_last_node(h));
        hf_hold(h, router, hf_last_node(h));
        if (router >= 0 && c->moe->aux && h->st == DNNMEM_OK) /* returned by the model */
            h->g->router[h->g->n_router++] = router;
        hf_leave(h, ls);
    }
    if (c->olmo2) {
        s = hf_enter(h, "norm");
        x = olmo_norm(h, x, c->hidden, c->eps);
        hf_leave(h, s);
    } else {
        x = layer_norm(h, c, x, "norm");
    }
    /* LlamaModel.forward's locals live until it returns: inputs_embeds,
     * cache_position, the causal mask and position_embeddings */
    hf_hold(h, emb, hf_last_node(h));
    hf_hold(h, pos, hf_last_node(h));
    hf_hold(h, mask, hf_last_node(h));
    hf_hold(h, cos, hf_last_node(h));
    hf_hold(h, sin, hf_last_node(h));
    hf_leave(h, top);
    if (h->task.kind != HF_TASK_LM)
        return hf_task_head(h, x, c->hidden);
    s = hf_enter(h, "lm_head");
    x = hf_linear(h, x, c->hidden, c->vocab, false, c->tie ? emb_w : -1,
                  c->granite ? NULL : "logits");
    hf_leave(h, s);
    if (c->granite) {
        int32_t by = hf_const_f(h, c->logits_scale); /* made before out_name names the next */
        h->out_name = "logits";
        x = hf_op(h, DM_OP_Div, 2, x, by);
    }
    return x;
}

void hf_read_llama(struct hf *h, const char *type, struct llama *c)
{
    bool granite = strcmp(type, "granite") == 0, olmo2 = strcmp(type, "olmo2") == 0;
    bool llama = strcmp(type, "llama") == 0 || granite || olmo2, qwen2 = strcmp(type, "qwen2") == 0,
         qwen3 = strcmp(type, "qwen3") == 0;
    c->type = type;
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", REQUIRED, MAX_SIZE);
    c->inter = hf_get_int(h, "intermediate_size", REQUIRED, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", REQUIRED, MAX_LAYERS);
    c->heads = hf_get_int(h, "num_attention_heads", REQUIRED, MAX_SIZE);
    c->kv_heads = hf_get_int(h, "num_key_value_heads", c->heads, MAX_SIZE);
    if (h->st == DNNMEM_OK && !hf_field(h, "head_dim") && c->hidden % c->heads)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' "
                "(%lld), and 'head_dim' is missing",
                (long long)c->hidden, (long long)c->heads);
    c->head_dim = hf_get_int(h, "head_dim", h->st == DNNMEM_OK ? c->hidden / c->heads : 1,
                             MAX_SIZE);
    if (h->st == DNNMEM_OK && c->heads % c->kv_heads)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'num_key_value_heads' (%lld) does not divide 'num_attention_heads' (%lld)",
                (long long)c->kv_heads, (long long)c->heads);
    if (h->st == DNNMEM_OK && c->head_dim % 2)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'head_dim' (%lld) must be even for the rotary embedding",
                (long long)c->head_dim);
    bool sc2 = strcmp(type, "starcoder2") == 0;
    const char *act = hf_get_str(h, "hidden_act", sc2 ? "gelu_pytorch_tanh" : "silu");
    if (sc2)
        hf_dec_check_act(h, "hidden_act", act, true);
    else if (h->st == DNNMEM_OK && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'hidden_act' is '%s'; only 'silu' is modelled for %s", act, type);
    c->eps = hf_get_num(h, sc2 ? "norm_epsilon" : "rms_norm_eps", sc2 ? 1e-5 : 1e-6, 0, 1);
    c->attn_drop = hf_get_num(h, "attention_dropout", 0.0, 0, 1);
    c->theta = hf_get_num(h, "rope_theta", 10000.0, 1e-30, 1e30);
    c->tie = hf_get_bool(h, "tie_word_embeddings", sc2); /* Starcoder2Config: True */
    c->use_cache = hf_get_bool(h, "use_cache", true);
    /* projections' biases: Llama and Qwen3 follow attention_bias (q, k, v, o)
     * and Llama mlp_bias; Qwen2 has q, k, v biases; Mistral none */
    bool attn_bias = (llama || qwen3) && hf_get_bool(h, "attention_bias", false);
    c->qkv_bias = attn_bias || qwen2;
    c->o_bias = attn_bias;
    c->mlp_bias = llama && !olmo2 && hf_get_bool(h, "mlp_bias", false); /* Olmo2MLP: none */
    c->qk_norm = qwen3 || olmo2;
    c->olmo2 = olmo2;
    /* Starcoder2Config: use_bias True (every projection), the dropouts 0 */
    c->starcoder2 = sc2;
    c->act = act;
    if (sc2) {
        c->qkv_bias = c->o_bias = c->mlp_bias = hf_get_bool(h, "use_bias", true);
        c->resid_drop = hf_get_num(h, "residual_dropout", 0.0, 0, 1);
        c->emb_drop = hf_get_num(h, "embedding_dropout", 0.0, 0, 1);
    }
    /* GraniteConfig's multipliers, each 1.0 by default */
    c->granite = granite;
    c->emb_mult = granite ? hf_get_num(h, "embedding_multiplier", 1.0, -1e30, 1e30) : 1.0;
    c->resid_mult = granite ? hf_get_num(h, "residual_multiplier", 1.0, -1e30, 1e30) : 1.0;
    c->attn_mult = granite ? hf_get_num(h, "attention_multiplier", 1.0, -1e30, 1e30) : 1.0;
    c->logits_scale = granite ? hf_get_num(h, "logits_scaling", 1.0, 1e-30, 1e30) : 1.0;
}

/* LlamaForCausalLM, and the MoE families' (moe.c), from the config *c. */
/* Nodes the graph will have at least, from the config alone: with its
 * fields each under their cap, only experts times layers can take a graph
 * beyond any budget (issue 17: DeepSeek with 65,536 experts, ~128 GB).
 * The fewest any builder makes (measured on tests/models/hf, one layer more
 * or 256 experts more): 54 per layer (BERT), 11 per routed expert
 * (DeepSeek-V3). dm_graph_add_node still enforces the exact budget. */
#define MIN_NODES_PER_LAYER 54
#define MIN_NODES_PER_EXPERT 11

static bool within_budget(struct hf *h, const struct llama *c)
{
    int64_t budget = h->g->max_nodes, moe_layers = 0;
    for (int64_t i = 0; c->moe && i < c->layers; i++)
        moe_layers += hf_moe_layer(c->moe, i);
    /* layers <= 4096 and experts <= 65536: no overflow */
    int64_t least = c->layers * MIN_NODES_PER_LAYER +
                    moe_layers * (c->moe ? c->moe->experts : 0) * MIN_NODES_PER_EXPERT;
    if (budget <= 0 || least <= budget)
        return true;
    hf_fail(h, DNNMEM_E_LIMIT,
            "the config implies at least %lld graph nodes (%lld layers, %lld of them MoE with "
            "%lld experts each), beyond the budget of %lld (--max-nodes)",
            (long long)least, (long long)c->layers, (long long)moe_layers,
            (long long)(c->moe ? c->moe->experts : 0), (long long)budget);
    return false;
}

enum dnnmem_status hf_llama_lm(struct hf *h, const char *type, const struct llama *c)
{
    if (h->st != DNNMEM_OK || !within_budget(h, c) || !hf_begin(h, type))
        return h->st;
    /* the heads' forward computes no auxiliary loss of the router logits */
    if (c->moe && c->moe->aux && h->task.kind != HF_TASK_LM)
        return hf_fail(h, DNNMEM_E_UNSUPPORTED,
                       "config field 'output_router_logits' is true with the head %s: modelled "
                       "with the causal LM only",
                       h->g->head);
    int32_t ids = hf_causal_ids(h, c->layers, c->use_cache, false);
    if (ids < 0)
        return h->st;
    int32_t logits = build_llama(h, c, ids);
    return hf_causal_outputs(h, logits, c->layers, c->use_cache, false);
}

enum dnnmem_status hf_llama(struct hf *h, const char *type)
{
    struct llama c = {0};
    if (!hf_check(h, type))
        return h->st;
    hf_read_llama(h, type, &c);
    return hf_llama_lm(h, type, &c);
}
