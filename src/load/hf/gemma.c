/*
 * gemma.c (src/load/hf/): Gemma, Gemma 2, Gemma 3.
 */
#include "hf.h"

/* GemmaRMSNorm: x.float(), x * rsqrt(x.pow(2).mean(-1, keepdim) + eps),
 * times (1.0 + weight.float()), .type_as(x): in float32 whatever the run's
 * dtype (the casts are no-ops in float32 runs). */
static int32_t gemma_norm(struct hf *h, const char *name, int32_t x, int64_t dim, double eps)
{
    size_t sc = hf_enter(h, "%s", name);
    int32_t w = hf_param(h, "weight", DM_FLOAT, 1, &dim);
    int32_t xf = hf_op(h, DM_OP_Cast, 1, x);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, xf);
    int32_t p = hf_op(h, DM_OP_Pow, 2, xf, hf_const_f(h, 2.0));
    hf_keep32(h, p);
    int32_t m = hf_op(h, DM_OP_ReduceMean, 1, p);
    hf_attr_ints(h, "axes", INTS(-1));
    hf_attr_i(h, "keepdims", 1);
    hf_keep32(h, m);
    int32_t a = hf_op(h, DM_OP_Add, 2, m, hf_const_f(h, eps));
    hf_keep32(h, a);
    int32_t r = hf_op(h, DM_OP_Reciprocal, 1, hf_op(h, DM_OP_Sqrt, 1, a));
    hf_keep32(h, r);
    int32_t y = hf_op(h, DM_OP_Mul, 2, xf, r);
    hf_keep32(h, y);
    int32_t wf = hf_op(h, DM_OP_Cast, 1, w);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, wf);
    int32_t w1 = hf_op(h, DM_OP_Add, 2, wf, hf_const_f(h, 1.0));
    hf_keep32(h, w1);
    y = hf_op(h, DM_OP_Mul, 2, y, w1);
    hf_keep32(h, y);
    y = hf_op(h, DM_OP_CastLike, 2, y, x);
    hf_leave(h, sc);
    return y;
}

/* The prefill's view of one layer's HybridCache (NULL: a DynamicCache).
 * cache_utils.HybridCache.update (4.51): a global layer's _static_update
 * writes the keys and values into its cache in place (index_put_) and returns
 * the whole cache; a sliding layer's _sliding_update, for a prompt longer
 * than its cache, adds the last positions into the cache in place and
 * returns the prompt's own keys and values, else returns rolled copies of
 * the cache (k_out[:, :, indices]) written in place. */
struct gemma_cache {
    int32_t key, value; /* the layer's cache tensors [B, K, len, D] */
    int64_t len;        /* their positions */
    bool copy;          /* the rolled copies are returned */
    bool prompt;        /* the prompt's keys and values are returned */
};

/* GemmaAttention / Gemma2Attention / Gemma3Attention (4.51), as
 * LlamaAttention (rotary on [B, S, H, D], see llama_attention) with
 * Gemma 3's q_norm / k_norm, the query_pre_attn_scalar scaling, softcapping
 * and the sliding-window mask of its layer. */
static int32_t gemma_attention(struct hf *h, const struct dec *c, int layer, int32_t x,
                               int32_t cos, int32_t sin, int32_t mask, const struct gemma_cache *gc,
                               int32_t *pw)
{
    int64_t E = c->hidden, H = c->heads, KV = c->kv_heads, D = c->head_dim;
    int32_t q = hf_reshape(h, hf_lin(h, "q_proj", x, E, H * D, c->bias), INTS(0, 0, -1, D));
    int32_t k = hf_reshape(h, hf_lin(h, "k_proj", x, E, KV * D, c->bias), INTS(0, 0, -1, D));
    int32_t v = hf_reshape(h, hf_lin(h, "v_proj", x, E, KV * D, c->bias), INTS(0, 0, -1, D));
    if (c->kind == DK_GEMMA3) {
        q = gemma_norm(h, "q_norm", q, D, c->eps);
        k = gemma_norm(h, "k_norm", k, D, c->eps);
    }
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "value"));
    v = hf_transpose(h, v, INTS(0, 2, 1, 3));
    q = hf_transpose(h, hf_rope(h, q, cos, sin, D, NULL), INTS(0, 2, 1, 3));
    k = hf_rope(h, k, cos, sin, D, NULL);
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "key"));
    k = hf_transpose(h, k, INTS(0, 2, 1, 3));
    if (gc && !gc->prompt) {
        /* the cache (global layer) or its rolled copies (sliding layer) are
         * the keys and values attended to; the rotated k and v, written into
         * the cache in place, are let go (key_states is rebound) */
        k = gc->key;
        v = gc->value;
        if (gc->copy) { /* k_out[:, :, indices], indices made from arange(len) */
            int32_t idx = hf_op(h, DM_OP_Range, 3, hf_const_i(h, 0), hf_const_i(h, gc->len),
                                hf_const_i(h, 1));
            k = hf_op(h, DM_OP_Gather, 2, k, idx);
            hf_attr_i(h, "axis", 2);
            v = hf_op(h, DM_OP_Gather, 2, v, idx);
            hf_attr_i(h, "axis", 2);
        }
    }
    int64_t keys = gc ? (gc->prompt ? h->gen_prompt : gc->len) : 0;
    if (!gc)
        hf_dec_cache_update(h, c, layer, &k, &v);
    int32_t o = hf_dec_core(h, c, q, k, v, gc ? hf_narrow(h, mask, 3, 0, keys) : mask, c->scaling,
                            pw);
    o = hf_lin(h, "o_proj", o, H * D, E, c->bias);
    hf_hold_qkv(h, q, k, v);
    return o;
}

/* The prefill's 4-D mask with a HybridCache: Gemma2ForCausalLM /
 * Gemma3ForCausalLM.prepare_inputs_for_generation (4.51.3) makes it with
 * _prepare_4d_causal_attention_mask_with_cache_position(attention_mask,
 * target_length=cache.get_max_cache_shape()): torch.full((P, M), min), triu
 * (P > 1), *= arange(M) > cache_position.reshape(-1, 1) (the comparison a
 * bool [P, M], the product in place), [None, None].expand(B, 1, -1,
 * -1).clone(), then the padding: mask[..., :P] + attention_mask[:, None,
 * None, :], == 0, masked_fill, three [B, 1, P, P] transients (the fill
 * written back in place). [B, 1, P, M], held to the forward's end. */
static int32_t gemma_static_mask(struct hf *h, int32_t ids, int32_t seq, int32_t pos, int64_t P,
                                 int64_t M)
{
    int32_t pm = hf_op(h, DM_OP_Concat, 2, seq, hf_const_ints(h, INTS(M)));
    hf_attr_i(h, "axis", 0);
    int32_t full = hf_dec_fill(h, pm, DM_FLOAT, -FLT_MAX);
    if (P != 1) {
        full = hf_op(h, DM_OP_Trilu, 2, full, hf_const_i(h, 1));
        hf_attr_i(h, "upper", 1);
    }
    int32_t ar = hf_op(h, DM_OP_Range, 3, hf_const_i(h, 0), hf_const_i(h, M), hf_const_i(h, 1));
    hf_op(h, DM_OP_Greater, 2, ar, hf_unsqueeze(h, pos, INTS(1)));
    int32_t bsz = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 0);
    hf_attr_i(h, "end", 1);
    int32_t shape4 = hf_op(h, DM_OP_Concat, 4, bsz, hf_const_ints(h, INTS(1)), seq,
                           hf_const_ints(h, INTS(M)));
    hf_attr_i(h, "axis", 0);
    int32_t full4 = hf_unsqueeze(h, full, INTS(0, 1));
    h->out_name = "causal_mask_4d";
    int32_t mask = hf_op(h, DM_OP_Expand, 2, full4, shape4);
    int32_t head = hf_narrow(h, mask, 3, 0, P);
    int32_t sum = hf_op(h, DM_OP_Add, 2, head, hf_const_f(h, 0.0));
    int32_t eq = hf_op(h, DM_OP_Equal, 2, sum, hf_const_f(h, 0.0));
    hf_op(h, DM_OP_Where, 3, eq, hf_const_f(h, -FLT_MAX), head);
    return mask;
}

static bool gemma_sliding(const struct dec *c, int i)
{
    if (!c->window)
        return false;
    return c->kind == DK_GEMMA2 ? i % 2 == 0 : (i + 1) % c->pattern != 0;
}

/* GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM. */
static int32_t build_gemma(struct hf *h, const struct dec *c, int32_t ids)
{
    int64_t E = c->hidden, D = c->head_dim;
    bool g1 = c->kind == DK_GEMMA;
    size_t top = hf_enter(h, "model");
    size_t s = hf_enter(h, "embed_tokens");
    int32_t emb_w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, E});
    if (c->kind == DK_GEMMA3) /* Gemma3TextScaledWordEmbedding's embed_scale buffer */
        hf_param(h, "embed_scale", DM_FLOAT, 0, NULL);
    int32_t x = hf_op(h, DM_OP_Gather, 2, emb_w, ids);
    if (c->kind == DK_GEMMA3)
        x = hf_op(h, DM_OP_Mul, 2, x, hf_const_f(h, sqrt((double)E)));
    int32_t emb = x; /* inputs_embeds */
    hf_leave(h, s);
    int32_t seq, pos, pos_ids;
    hf_dec_positions(h, ids, &seq, &pos, &pos_ids);
    /* generate() with a HybridCache: the caches, made before the prefill,
     * are inputs of the forward (see struct gemma_cache) */
    int64_t P = h->gen_prompt, M = 0, Ws = 0;
    int32_t *caches = NULL;
    if (!g1 && c->hybrid && h->gen_tokens > 0 && P <= 0) {
        hf_refuse(h, DM_REFUSE_HYBRID_PROMPT, NULL, NULL);
        return -1;
    }
    if (!g1 && c->hybrid && h->gen_tokens > 0 && h->flash) {
        hf_refuse(h, DM_REFUSE_HYBRID_FLASH, NULL, NULL);
        return -1;
    }
    if (!g1 && c->hybrid && h->gen_tokens > 0) {
        if (P > MAX_SIZE) {
            hf_refuse(h, DM_REFUSE_HYBRID_LONG, NULL, NULL);
            h->g->refusal.value = P; /* the check row's figures */
            h->g->refusal.limit = MAX_SIZE;
            return -1;
        }
        M = P + h->gen_tokens - 1; /* generate(): max_cache_length = max_length - 1 */
        Ws = c->window < M ? c->window : M;
        caches = dm_arena_array(&h->g->arena, 2 * (size_t)c->layers, sizeof *caches);
        if (!caches) {
            hf_oom(h);
            return -1;
        }
        /* HybridCache.__init__ (4.51): is_sliding, a bool tensor of the
         * layers, then per layer torch.zeros of its key and value cache */
        hf_declare_input(h, "cache.is_sliding", DM_BOOL, 1, (const char *[]){NULL},
                         (int64_t[]){c->layers});
        for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++)
            for (int j = 0; j < 2; j++) {
                char name[64];
                snprintf(name, sizeof name, "cache.%d.%s", i, j ? "value" : "key");
                caches[2 * i + j] = hf_declare_input(
                    h, name, DM_FLOAT, 4,
                    (const char *[]){"batch", NULL, NULL, NULL},
                    (int64_t[]){0, c->kv_heads, gemma_sliding(c, i) ? Ws : M, D});
            }
        h->g->cache_len = M;
        h->g->cache_window = c->window;
        h->g->cache_pattern = c->kind == DK_GEMMA2 ? 2 : c->pattern;
        h->g->attn_softcap = c->attn_cap > 0 && !h->sdpa; /* dec_core: eager only */
        h->g->final_softcap = c->final_cap > 0;
    }
    /* Gemma 2/3's _update_causal_mask builds the 4-D mask for sdpa too
     * (the static HybridCache rules out is_causal): the fused kernel gets it;
     * flash_attention_2 gets the 2-D attention_mask as given (none here),
     * and sliding layers pass their window to the kernel */
    int32_t mask = M ? gemma_static_mask(h, ids, seq, pos, P, M)
                   : (h->sdpa && g1) || h->flash ? -1 : hf_dec_causal_mask(h, seq, "causal_mask");
    int32_t mshape = -1;
    if (!g1 && !M) {
        int32_t bsz = hf_op(h, DM_OP_Shape, 1, ids);
        hf_attr_i(h, "start", 0);
        hf_attr_i(h, "end", 1);
        mshape = hf_op(h, DM_OP_Concat, 4, bsz, hf_const_ints(h, INTS(1)), seq, seq);
        hf_attr_i(h, "axis", 0);
    }
    int32_t cos, sin, lcos = -1, lsin = -1;
    hf_dec_rotary(h, "rotary_emb", D, c->theta, c->rope_factor, pos_ids, 2, "position_embeddings",
                  &cos, &sin);
    if (c->kind == DK_GEMMA3)
        hf_dec_rotary(h, "rotary_emb_local", D, c->theta_local, 1.0, pos_ids, 2,
                      "position_embeddings_local", &lcos, &lsin);
    if (c->kind != DK_GEMMA3) /* hidden_states * normalizer (a 0-d tensor of hidden**0.5) */
        x = hf_op(h, DM_OP_Mul, 2, x, hf_const_f(h, sqrt((double)E)));
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layers.%d", i);
        int32_t residual = x, w = -1, m = mask, sm = -1;
        bool slide = gemma_sliding(c, i);
        struct gemma_cache gcache, *gc = NULL;
        if (M) {
            gcache = (struct gemma_cache){.key = caches[2 * i], .value = caches[2 * i + 1],
                                          .len = slide ? Ws : M, .copy = slide && P <= Ws,
                                          .prompt = slide && P > Ws};
            gc = &gcache;
        }
        if (slide && M) {
            /* Gemma2DecoderLayer / Gemma3DecoderLayer (4.51.3): where(tril(
             * ones_like(mask, bool), -window), min, mask) over [B, 1, P, M],
             * then attention_mask[:, :, :, offset : offset + max(P, window)]
             * with offset max(0, last_cache_position - max(P, window)) = 0
             * in the prefill: a view; the where result held to the layer's end */
            int32_t b = hf_op(h, DM_OP_Cast, 1, mask);
            hf_attr_i(h, "to", DM_BOOL);
            int32_t tr = hf_op(h, DM_OP_Trilu, 2, b, hf_const_i(h, -c->window));
            hf_attr_i(h, "upper", 0);
            sm = m = hf_op(h, DM_OP_Where, 3, tr, hf_const_f(h, -FLT_MAX), mask);
            int64_t eff = P > c->window ? P : c->window;
            m = hf_narrow(h, m, 3, 0, eff < M ? eff : M);
        } else if (slide && mask >= 0) {
            /* the decoder layer's sliding mask: where(tril(ones_like(mask,
             * bool), -window), min, mask), [B, 1, S, S] (ones_like of the
             * expanded mask is dense), then mask[:, :, :, indexes], a copy */
            int32_t b = hf_op(h, DM_OP_Cast, 1, mask);
            hf_attr_i(h, "to", DM_BOOL);
            b = hf_op(h, DM_OP_Expand, 2, b, mshape);
            int32_t tr = hf_op(h, DM_OP_Trilu, 2, b, hf_const_i(h, -c->window));
            hf_attr_i(h, "upper", 0);
            m = hf_op(h, DM_OP_Where, 3, tr, hf_const_f(h, -FLT_MAX), mask);
            sm = m = hf_op(h, DM_OP_Slice, 4, m, hf_const_ints(h, INTS(0)), seq,
                           hf_const_ints(h, INTS(3)));
        }
        int32_t y = gemma_norm(h, "input_layernorm", x, E, c->eps);
        s = hf_enter(h, "self_attn");
        y = gemma_attention(h, c, i, y, slide && lcos >= 0 ? lcos : cos,
                            slide && lsin >= 0 ? lsin : sin, m, gc, &w);
        hf_leave(h, s);
        if (!g1)
            y = gemma_norm(h, "post_attention_layernorm", y, E, c->eps);
        x = hf_op(h, DM_OP_Add, 2, residual, y);
        residual = x;
        y = gemma_norm(h, g1 ? "post_attention_layernorm" : "pre_feedforward_layernorm", x, E,
                       c->eps);
        s = hf_enter(h, "mlp");
        int32_t gate = hf_lin(h, "gate_proj", y, E, c->inter, false);
        size_t t = hf_enter(h, "act_fn");
        gate = hf_dec_act(h, c->act, gate);
        hf_leave(h, t);
        int32_t up = hf_lin(h, "up_proj", y, E, c->inter, false);
        y = hf_lin(h, "down_proj", hf_op(h, DM_OP_Mul, 2, gate, up), c->inter, E, false);
        hf_leave(h, s);
        if (!g1)
            y = gemma_norm(h, "post_feedforward_layernorm", y, E, c->eps);
        x = hf_op(h, DM_OP_Add, 2, residual, y);
        hf_hold(h, w, hf_last_node(h));
        hf_hold(h, sm, hf_last_node(h));
        hf_leave(h, ls);
    }
    x = gemma_norm(h, "norm", x, E, c->eps);
    if (M) /* logits_to_keep=1: lm_head(hidden_states[:, -1:, :]) */
        x = hf_narrow(h, x, 1, P - 1, 1);
    hf_hold(h, emb, hf_last_node(h));
    hf_hold(h, pos, hf_last_node(h));
    hf_hold(h, mask, hf_last_node(h));
    hf_hold(h, cos, hf_last_node(h));
    hf_hold(h, sin, hf_last_node(h));
    hf_hold(h, lcos, hf_last_node(h));
    hf_hold(h, lsin, hf_last_node(h));
    hf_leave(h, top);
    return hf_dec_head(h, c, "lm_head", x, E, emb_w);
}

static void read_gemma(struct hf *h, const char *type, struct dec *c)
{
    bool g3 = strcmp(type, "gemma3_text") == 0, g2 = strcmp(type, "gemma2") == 0;
    c->kind = g3 ? DK_GEMMA3 : g2 ? DK_GEMMA2 : DK_GEMMA;
    /* Gemma3TextConfig's defaults (gemma-3-4b's config leaves heads and vocab to them) */
    c->vocab = hf_get_int(h, "vocab_size", g3 ? 262208 : REQUIRED, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", g3 ? 2304 : REQUIRED, MAX_SIZE);
    c->inter = hf_get_int(h, "intermediate_size", g3 ? 9216 : REQUIRED, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", g3 ? 26 : REQUIRED, MAX_LAYERS);
    c->heads = hf_get_int(h, "num_attention_heads", g3 ? 8 : REQUIRED, MAX_SIZE);
    c->kv_heads = hf_get_int(h, "num_key_value_heads", g3 ? 4 : c->heads, MAX_SIZE);
    c->head_dim = hf_get_int(h, "head_dim", 256, MAX_SIZE);
    if (h->st == DNNMEM_OK && c->heads % c->kv_heads)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'num_key_value_heads' (%lld) does not divide 'num_attention_heads' (%lld)",
                (long long)c->kv_heads, (long long)c->heads);
    if (h->st == DNNMEM_OK && c->head_dim % 2)
        hf_fail(h, DNNMEM_E_MODEL, "config field 'head_dim' (%lld) must be even",
                (long long)c->head_dim);
    c->rot = c->head_dim;
    /* GemmaMLP: ACT2FN[hidden_activation], else hidden_act */
    const char *key = hf_field(h, "hidden_activation") ? "hidden_activation" : "hidden_act";
    c->act = hf_get_str(h, key, "gelu_pytorch_tanh");
    if (h->st == DNNMEM_OK && strcmp(c->act,
                                     "gelu") != 0 && strcmp(c->act, "gelu_pytorch_tanh") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field '%s' is '%s'; modelled: gelu_pytorch_tanh, gelu",
                key, c->act);
    c->eps = hf_get_num(h, "rms_norm_eps", 1e-6, 0, 1);
    c->attn_drop = hf_get_num(h, "attention_dropout", 0.0, 0, 1);
    c->theta = hf_get_num(h, "rope_theta", g3 ? 1e6 : 10000.0, 1e-30, 1e30);
    c->theta_local = hf_get_num(h, "rope_local_base_freq", 10000.0, 1e-30, 1e30);
    c->rope_factor = hf_dec_rope_scaling(h, g3);
    c->bias = hf_get_bool(h, "attention_bias", false);
    c->tie = hf_get_bool(h, "tie_word_embeddings", true);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    /* Gemma2Model / Gemma3TextModel of 4.x make their cache only "if
     * use_cache and past_key_values is None and not self.training"
     * (modeling_gemma2.py and modeling_gemma3.py, 4.51.3 and 4.56.2): a
     * training forward returns none; 5.x makes a DynamicCache whenever
     * use_cache (measured on the CPU: gemma-2-9b small +2.2% / +2.6% Adam /
     * SGD, tiny Gemma 3 LoRA +3.1% while every layer's k and v were held) */
    if ((g2 || g3) && h->train && h->transformers < 500)
        c->use_cache = false;
    h->g->train_graph = g2 || g3;
    double qs = g2 || g3 ? hf_get_num(h, "query_pre_attn_scalar", 256, 1e-30, 1e30)
                         : (double)c->head_dim;
    c->scaling = 1.0 / sqrt(qs);
    c->attn_cap = g2 ? hf_get_num(h, "attn_logit_softcapping", 50.0, 0, 1e30)
                : g3 ? hf_get_num(h, "attn_logit_softcapping", 0, 0, 1e30) : 0;
    c->final_cap = g2 ? hf_get_num(h, "final_logit_softcapping", 30.0, 0, 1e30)
                 : g3 ? hf_get_num(h, "final_logit_softcapping", 0, 0, 1e30) : 0;
    c->window = g2 || g3 ? hf_get_int(h, "sliding_window", 4096, MAX_SIZE) : 0;
    c->pattern = g3 ? hf_get_int(h, "sliding_window_pattern", 6, MAX_LAYERS) : 2;
    /* Gemma2Config / Gemma3TextConfig (4.51): cache_implementation="hybrid";
     * generate() takes it from the (text) config (_prepare_cache_for_generation) */
    const char *ci = g2 || g3 ? hf_get_str(h, "cache_implementation", "hybrid") : "dynamic";
    c->hybrid = h->st == DNNMEM_OK && strcmp(ci, "hybrid") == 0;
    if (h->st == DNNMEM_OK && h->gen_tokens > 0 && !c->hybrid && strcmp(ci, "dynamic") != 0)
        hf_refuse(h, DM_REFUSE_GEN_CACHE_IMPL, ci, NULL);
}

/* Gemma 1-3, and the multimodal Gemma 3 wrapper's text_config: its
 * language model alone. */
enum dnnmem_status hf_gemma(struct hf *h, const char *type)
{
    bool wrapper = h->arch->flags & HF_TEXT_CONFIG;
    json_t *text = wrapper ? json_object_get(h->root, "text_config") : NULL;
    if (wrapper && !json_is_object(text))
        return hf_fail(h, DNNMEM_E_MODEL,
                       "config field 'text_config' is missing (model_type gemma3)");
    struct dec c = {.type = text ? "gemma3_text" : type, .rope_factor = 1.0};
    json_t *outer = h->root;
    if (text)
        h->root = text;
    read_gemma(h, c.type, &c);
    h->root = outer;
    return hf_dec_lm(h, type, &c, build_gemma);
}
