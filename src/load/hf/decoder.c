/*
 * decoder.c (src/load/hf/): the decoder-only causal LMs of opt.c, neox.c and
 * gemma.c: the pieces they share, their config readers' common checks and the
 * dispatch. Each is built op by op as transformers' eager PyTorch forward runs
 * it, with the same conventions as hf_build_llama (see hf.c's top): called as
 * model(input_ids) in float32, use_cache from the config (presents named
 * present.N.key / present.N.value), attn_implementation eager or sdpa.
 *
 *  - "opt": modeling_opt.py of the attention-interface version (4.50 to
 *    4.56): OPTDecoder makes attention_mask = ones(B, S) itself, position ids
 *    from its cumsum, offset 2; the eager 4-D mask is the
 *    _prepare_4d_causal_attention_mask_with_cache_position clone, [B, 1, S, S];
 *    q_proj(x) * scaling, then eager_attention_forward(scaling=1.0);
 *  - "biogpt": modeling_biogpt.py of the modular version on BART (4.52 to
 *    4.56): OPT's layout (learned positions with offset 2 from the cumsum of
 *    an all-ones mask, pre-LayerNorm layers, fc1/fc2) with BART's attention
 *    (eager_attention_forward with head_dim**-0.5), scaled embeddings
 *    (BioGptScaledWordEmbedding) and dropout after the position sum; the
 *    probabilities live as in 4.51's BioGptAttention (BART's copied, on the
 *    past_key_value tuple), which returns them only with output_attentions,
 *    so they go when the attention returns (the 4.52 decoder layer keeps
 *    them); generation is 4.51's (dec_generation);
 *  - "gpt_neox": modeling_gpt_neox.py (4.51): fused query_key_value viewed
 *    [B, S, H, 3D] and chunked, partial rotary through cat, parallel residual;
 *  - "falcon": modeling_falcon.py (4.51 to 4.56): fused query_key_value
 *    (multi-query, grouped new_decoder_architecture, or per-head q/k/v),
 *    rotary (alibi is not modelled), parallel attention/MLP; its
 *    `mlp_output += attention_output` is an Add here (one transient
 *    [B, S, E] more than PyTorch's in-place sum);
 *  - "phi": modeling_phi.py (4.51): partial rotary through cat, q/k/v/dense
 *    with biases, parallel attention and MLP from one LayerNorm, gelu_new,
 *    final_layernorm, lm_head with bias;
 *  - "phi3": modeling_phi3.py (4.51): fused qkv_proj sliced into q, k, v,
 *    rotary through cat (partial_rotary_factor), fused gate_up_proj chunked;
 *  - "gemma", "gemma2", "gemma3_text" (and the multimodal "gemma3" wrapper's
 *    text_config, the language model alone): modeling_gemma*.py (4.51):
 *    embeddings times sqrt(hidden), GemmaRMSNorm in float32 times
 *    (1 + weight), GeGLU; Gemma 2/3: four norms per layer, sliding window on
 *    alternate layers (Gemma 3: 5 of 6), query_pre_attn_scalar, Gemma 2's
 *    tanh softcapping of attention and final logits, Gemma 3's q/k norms and
 *    local/global rotary embeddings.
 * Gemma 2/3 in transformers allocate a HybridCache (static shapes) in an
 * inference forward and no cache in training; a plain forward models it as
 * the DynamicCache of the others (the presents are the rotated keys and the
 * values: the same bytes as the cache while the sequence fits the window,
 * 2 x [B, K, S, D] per layer more than transformers in training). In
 * --mode generate (the loader told the prompt and the new tokens) the
 * prefill is built as generate() runs it with the HybridCache of the config's
 * cache_implementation "hybrid" (transformers 4.51.3, modeling_gemma2.py /
 * modeling_gemma3.py and cache_utils.HybridCache, read in copies of 4.51.3's
 * Gemma3ForCausalLM and the 4.51-era HybridCache): the per-layer caches are
 * graph inputs, global [B, K, M, D] and sliding [B, K, min(window, M), D]
 * with M = P + T - 1, the 4-D mask [B, 1, P, M], each layer attending over
 * what the cache update returns (struct gemma_cache), the lm_head on the
 * last position only; src/schedule/generate.c runs the decode steps.
 */
#include "hf.h"

/* ---- shared pieces ---- */

/* A ConstantOfShape filled with `v` of `dtype`. */
int32_t hf_dec_fill(struct hf *h, int32_t shape, enum dm_dtype dtype, double v)
{
    int32_t t = hf_op(h, DM_OP_ConstantOfShape, 1, shape);
    if (h->st != DNNMEM_OK)
        return -1;
    struct dm_tensor *fill = dm_arena_alloc(&h->g->arena, sizeof *fill);
    struct dm_dim *fd = dm_arena_alloc(&h->g->arena, sizeof *fd);
    struct dm_value *fv = dm_arena_alloc(&h->g->arena, sizeof *fv);
    double *ff = dm_arena_alloc(&h->g->arena, sizeof *ff);
    int64_t *fi = dm_arena_alloc(&h->g->arena, sizeof *fi);
    if (!fill || !fd || !fv || !ff || !fi)
        return hf_oom(h);
    bool fl = dm_dtype_is_float(dtype);
    *ff = v;
    *fi = fl || !(fabs(v) < 9e18) ? 0 : (int64_t)v; /* an integer fill in int64's range */
    *fv = fl ? (struct dm_value){.n = 1, .is_float = true, .f = ff}
             : (struct dm_value){.n = 1, .is_float = false, .i = fi};
    *fd = (struct dm_dim){1, -1};
    *fill = (struct dm_tensor){.name = "value", .dtype = dtype, .rank = 1, .dims = fd,
                               .role = DM_ROLE_CONSTANT, .producer = -1, .value = fv};
    struct dm_attr *fa = hf_attr(h, "value", DM_ATTR_TENSOR);
    if (fa)
        fa->t = fill;
    return t;
}

/* seq = S as a 1-D shape tensor; pos = arange(S) (cache_position) and
 * pos_ids = pos.unsqueeze(0). */
void hf_dec_positions(struct hf *h, int32_t ids, int32_t *seq, int32_t *pos, int32_t *pos_ids)
{
    *seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t zero = hf_const_i(h, 0), one = hf_const_i(h, 1);
    *pos = hf_op(h, DM_OP_Range, 3, zero, *seq, one);
    *pos_ids = hf_unsqueeze(h, *pos, INTS(0));
}

/* The 4-D causal mask of LlamaModel._update_causal_mask (4.51) without an
 * attention_mask: one [S, S] tensor of finfo.min above the diagonal, seen as
 * [1, 1, S, S] (see build_llama). `name` (or NULL) names the [1, 1, S, S]
 * view: "causal_mask" lets --mode generate find the [S, S] tensor, which
 * generate's 2-D attention_mask makes a [B, 1, S, S] clone
 * (src/schedule/generate.c, prefill_batch). */
int32_t hf_dec_causal_mask(struct hf *h, int32_t seq, const char *name)
{
    int32_t ss = hf_op(h, DM_OP_Concat, 2, seq, seq);
    hf_attr_i(h, "axis", 0);
    int32_t full = hf_dec_fill(h, ss, DM_FLOAT, -FLT_MAX);
    int32_t tri = hf_op(h, DM_OP_Trilu, 2, full, hf_const_i(h, 1));
    hf_attr_i(h, "upper", 1);
    int32_t axes = hf_const_ints(h, INTS(0, 1));
    h->out_name = name;
    return hf_op(h, DM_OP_Unsqueeze, 2, tri, axes);
}

/* create_causal_mask for eager attention (masking_utils.py, 4.56.2 and 5.24.0;
 * gpt_oss and Whisper): the boolean mask, then eager_mask's torch.where(mask,
 * 0.0, finfo.min), a [B, 1, S, S] tensor of the model's dtype (measured: such
 * aten::where blocks of [2, 1, 128, 128] float32 live through the layers,
 * tiny-gpt-oss at both releases); the bool intermediates go at once. Made
 * here as hf_dec_causal_mask's triangle expanded to the batch of `ids` (the
 * triangle freed after); `name` names the [B, 1, S, S] tensor. */
int32_t hf_dec_causal_mask_batch(struct hf *h, int32_t ids, int32_t seq, const char *name)
{
    int32_t m = hf_dec_causal_mask(h, seq, NULL);
    int32_t b = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "end", 1);
    int32_t shape = hf_op(h, DM_OP_Concat, 4, b, hf_const_ints(h, INTS(1)), seq, seq);
    hf_attr_i(h, "axis", 0);
    h->out_name = name;
    return hf_op(h, DM_OP_Expand, 2, m, shape);
}

/* A rotary embedding module (LlamaRotaryEmbedding and its copies): the
 * inv_freq buffer [rot/2] (a weight no node reads, see build_llama), cos and
 * sin [1, S, rot] computed once per forward, unsqueezed at `axis` (1: for q
 * and k as [B, H, S, D]; 2: as [B, S, H, D]). rope_scaling "linear" divides
 * inv_freq by its factor (values only). */
void hf_dec_rotary(struct hf *h, const char *scope, int64_t rot, double theta, double factor,
                   int32_t pos_ids, int axis, const char *name, int32_t *cos, int32_t *sin)
{
    size_t s = hf_enter(h, "%s", scope);
    int64_t half = rot / 2;
    hf_param(h, "inv_freq", DM_FLOAT, 1, &half);
    double *inv = malloc((size_t)half * sizeof *inv);
    if (!inv) {
        hf_oom(h);
        return;
    }
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0 / pow(theta, (double)(2 * i) / (double)rot) / factor;
    int32_t invf = hf_constant(h);
    hf_attr_floats(h, "value_floats", (int)half, inv);
    free(inv);
    int32_t inv3 = hf_unsqueeze(h, invf, INTS(0, 2));
    int32_t pos3 = hf_unsqueeze(h, pos_ids, INTS(1));
    int32_t posf = hf_op(h, DM_OP_Cast, 1, pos3);
    hf_attr_i(h, "to", DM_FLOAT);
    int32_t freqs = hf_op(h, DM_OP_MatMul, 2, inv3, posf);
    freqs = hf_transpose(h, freqs, INTS(0, 2, 1));
    int32_t embf = hf_op(h, DM_OP_Concat, 2, freqs, freqs);
    hf_attr_i(h, "axis", -1);
    int32_t scaling = hf_const_f(h, 1.0);
    int32_t c = hf_op(h, DM_OP_Cos, 1, embf);
    c = hf_op(h, DM_OP_Mul, 2, c, scaling);
    int32_t sn = hf_op(h, DM_OP_Sin, 1, embf);
    sn = hf_op(h, DM_OP_Mul, 2, sn, scaling);
    hf_leave(h, s);
    int32_t ax = hf_const_ints(h, 1, (int64_t[]){axis});
    h->out_name = dm_arena_printf(&h->g->arena, "%s.cos", name);
    *cos = hf_op(h, DM_OP_Unsqueeze, 2, c, ax);
    h->out_name = dm_arena_printf(&h->g->arena, "%s.sin", name);
    *sin = hf_op(h, DM_OP_Unsqueeze, 2, sn, ax);
}

/* apply_rotary_pos_emb of NeoX, Phi and Phi-3 on x [B, H, S, D] (a view):
 * x_rot, x_pass = x[..., :rot], x[..., rot:]; cat((x_rot * cos) +
 * (rotate_half(x_rot) * sin), x_pass). cat makes a new contiguous
 * [B, H, S, D] tensor, also when x_pass is empty (full rotary, Phi-3). The
 * slices are views in PyTorch and copies here (transient). */
int32_t hf_rope_cat(struct hf *h, int32_t x, int32_t cos, int32_t sin, int64_t rot, int64_t d,
                    const char *name)
{
    int32_t xr = x, xp = -1;
    if (rot < d) {
        int32_t ax = hf_const_ints(h, INTS(-1));
        xr = hf_op(h, DM_OP_Slice, 4, x, hf_const_ints(h, INTS(0)), hf_const_ints(h, INTS(rot)),
                   ax);
        xp = hf_op(h, DM_OP_Slice, 4, x, hf_const_ints(h, INTS(rot)), hf_const_ints(h, INTS(d)),
                   ax);
    }
    int32_t e = hf_rope(h, xr, cos, sin, rot, NULL);
    h->out_name = name;
    int32_t y = xp >= 0 ? hf_op(h, DM_OP_Concat, 2, e, xp) : hf_op(h, DM_OP_Concat, 1, e);
    hf_attr_i(h, "axis", -1);
    return y;
}

/* The attention core of eager_attention_forward (4.51) and its sdpa
 * counterpart on q [B, H, S, D] and k, v [B, KV, S, D] (views or not):
 * torch.matmul copies non-contiguous operands (Reshape here), scores times
 * `scale` (a new tensor even at 1.0), optional tanh softcapping, the mask,
 * the fp32 softmax, dropout, times v; back to [B, S, H * D]. *pw: the
 * probabilities (eager), which the caller holds. */
int32_t hf_dec_core(struct hf *h, const struct dec *c, int32_t q, int32_t k, int32_t v,
                    int32_t mask, double scale, int32_t *pw)
{
    int64_t H = c->heads, KV = c->kv_heads, D = c->head_dim;
    if (h->flash) { /* softcapping and the sliding window are kernel arguments */
        int32_t o = hf_flash_attention(h, q, k, v, scale, true);
        o = hf_transpose(h, o, INTS(0, 2, 1, 3));
        *pw = -1;
        return hf_reshape(h, o, INTS(0, 0, -1));
    }
    int32_t o, p = -1;
    if (h->sdpa && c->kind == DK_FALCON && !c->shared_core && KV < H) { /* multi-query, broadcast */
        *pw = -1;
        o = hf_sdpa_broadcast(h, q, k, v, mask, H, KV, D, scale);
        o = hf_transpose(h, o, INTS(0, 2, 1, 3));
        return hf_reshape(h, o, INTS(0, 0, -1));
    }
    if (mask < 0 && (o = hf_gqa_attention(h, q, k, v, H, KV, D, scale, c->attn_drop)) >= 0) {
        *pw = -1;
        o = hf_transpose(h, o, INTS(0, 2, 1, 3));
        return hf_reshape(h, o, INTS(0, 0, -1));
    }
    /* eager_attention_forward's repeat_kv of a single key/value head
     * (multi-query: Falcon-7B from 5.25, Gemma-2B): expand(B, 1, H, S, D)
     * .reshape(B, H, S, D) only drops the size-1 dim, a view with stride 0
     * on the heads (computeStride, TensorShape.cpp), and each torch.matmul's
     * fold of it into [B * H, ., .] is the copy, a temporary of that call
     * (kept by BmmBackward in training): k's made with the scores, v's only
     * after the softmax. Measured: 5.25.0 small-falcon-7b bf16 eager
     * inference, +3.1% while both were held through the softmax. With a
     * mask (no enable_gqa: sdpa_attention_forward's use_gqa_in_sdpa) sdpa
     * gets the stride-0 views as they are (measured: 5.25.0 small-falcon-7b
     * fp32 sdpa training, +1.6% while the two copies were made and kept).
     * Falcon's own 4.x-5.24 code indexes k and v with [-2], [-1]: copies */
    bool kv_view = (!h->sdpa || mask >= 0) && KV == 1 && H > 1 && !(c->kind == DK_FALCON && !c->shared_core);
    int32_t kr = kv_view ? k : hf_repeat_kv(h, k, H / KV, H, D);
    int32_t vr = kv_view ? v : hf_repeat_kv(h, v, H / KV, H, D);
    /* sdpa: .contiguous() (sdpa_attention_forward), or the views as they are
     * (c->sdpa_views); eager: torch.matmul's fold (hf_matmul_fold) */
    bool views = h->sdpa && (c->sdpa_views || h->sdpa_as_is);
    if (!views)
        q = h->sdpa ? hf_reshape(h, q, INTS(0, H, -1, D)) : hf_matmul_fold(h, q, H, D);
    if (H == KV && !views) /* each matmul's own copy of a strided operand (v's: below) */
        kr = h->sdpa ? hf_reshape(h, k, INTS(0, H, -1, D)) : hf_matmul_fold(h, k, H, D);
    if (H == KV && h->sdpa && !views)
        vr = hf_reshape(h, v, INTS(0, H, -1, D));
    if (h->sdpa && mask >= 0) { /* an explicit mask: not is_causal, no flash kernel */
        o = hf_sdpa_attention(h, (int32_t[]){q, kr, vr}, mask, false, H, H, D, D, scale,
                              c->attn_drop);
    } else if (h->sdpa) {
        o = hf_sdpa_attention(h, (int32_t[]){q, kr, vr}, -1, true, H, H, D, D, scale, c->attn_drop);
    } else {
        if (kv_view)
            kr = hf_repeat_kv(h, k, H, H, D);
        int32_t kt = hf_transpose(h, kr, INTS(0, 1, 3, 2));
        int32_t s = hf_op(h, DM_OP_MatMul, 2, q, kt);
        bool own = c->kind == DK_FALCON && !c->shared_core; /* Falcon's own code */
        if (!own) /* Falcon: scores /= sqrt(D), in place */
            s = hf_op(h, DM_OP_Mul, 2, s, hf_const_f(h, scale));
        if (c->attn_cap > 0) { /* Gemma 2: / cap, tanh, * cap */
            s = hf_op(h, DM_OP_Div, 2, s, hf_const_f(h, c->attn_cap));
            s = hf_op(h, DM_OP_Tanh, 1, s);
            s = hf_op(h, DM_OP_Mul, 2, s, hf_const_f(h, c->attn_cap));
        }
        int32_t scores = s;
        if (mask >= 0)
            s = hf_op(h, DM_OP_Add, 2, s, mask);
        if (own || c->kind == DK_BIOGPT) {
            /* Falcon: softmax(scores + mask, dtype=hidden_states.dtype), BART's
             * (BioGPT) plain softmax: in the run's dtype */
            p = hf_op(h, DM_OP_Softmax, 1, s);
            hf_attr_i(h, "axis", -1);
        } else { /* the others' eager_attention_forward (4.51): float32 */
            p = hf_softmax_f32(h, s, q);
        }
        /* Falcon: scores = softmax(scores + mask): the variable holds the
         * scores until softmax returns */
        if (own)
            hf_hold(h, scores, hf_last_node(h));
        p = hf_dropout(h, p, c->attn_drop);
        if (H == KV)
            vr = hf_matmul_fold(h, v, H, D);
        else if (kv_view)
            vr = hf_repeat_kv(h, v, H, H, D);
        o = hf_op(h, DM_OP_MatMul, 2, p, vr);
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3));
    o = hf_reshape(h, o, INTS(0, 0, -1));
    if (H != KV && !kv_view) { /* the repeat_kv results, eager_attention_forward's locals */
        hf_hold(h, kr, hf_last_node(h));
        hf_hold(h, vr, hf_last_node(h));
    }
    *pw = p;
    return o;
}

/* The attention module's forward holds its query, key and value states
 * (locals) until it returns, after the output projection. */
void hf_hold_qkv(struct hf *h, int32_t q, int32_t k, int32_t v)
{
    hf_hold(h, q, hf_last_node(h));
    hf_hold(h, k, hf_last_node(h));
    hf_hold(h, v, hf_last_node(h));
}

const char *hf_present_name(struct hf *h, const struct dec *c, int layer, const char *kv)
{
    if (!c->use_cache || h->st != DNNMEM_OK)
        return NULL;
    const char *n = dm_arena_printf(&h->g->arena, "present.%d.%s", layer, kv);
    if (!n)
        hf_oom(h);
    return n;
}

/* The cache's copies of k and v from transformers 5 (hf_cache_update, builder.c). */
void hf_dec_cache_update(struct hf *h, const struct dec *c, int layer, int32_t *k, int32_t *v)
{
    if (!h->cache_copy || !c->use_cache)
        return;
    *k = hf_cache_update(h, *k, hf_present_name(h, c, layer, "key"));
    *v = hf_cache_update(h, *v, hf_present_name(h, c, layer, "value"));
}

/* A linear module `name` in the current scope. */
int32_t hf_lin(struct hf *h, const char *name, int32_t x, int64_t in, int64_t out, bool bias)
{
    size_t s = hf_enter(h, "%s", name);
    int32_t y = hf_linear(h, x, in, out, bias, -1, NULL);
    hf_leave(h, s);
    return y;
}

int32_t hf_ln(struct hf *h, const char *name, int32_t x, int64_t dim, double eps)
{
    size_t s = hf_enter(h, "%s", name);
    int32_t y = hf_layer_norm(h, x, dim, eps);
    hf_leave(h, s);
    return y;
}

/* The activations of ACT2FN these models use: relu (nn.ReLU), gelu
 * (GELUActivation: F.gelu), gelu_new, gelu_pytorch_tanh. */
int32_t hf_dec_act(struct hf *h, const char *act, int32_t x)
{
    if (strcmp(act, "relu") == 0) { /* nn.ReLU(): not in place */
        int32_t y = hf_op(h, DM_OP_Relu, 1, x);
        hf_attr_i(h, "inplace", 0);
        return y;
    }
    return hf_gpt2_act(h, act, x);
}

static bool act_known(const char *act)
{
    return strcmp(act, "relu") == 0 || strcmp(act, "gelu") == 0 || strcmp(act, "gelu_new") == 0 ||
           strcmp(act, "gelu_pytorch_tanh") == 0;
}

/* The lm_head (or embed_out / output_projection), then Gemma 2's final
 * softcapping; or the task head (hf_task_head) on x. */
int32_t hf_dec_head(struct hf *h, const struct dec *c, const char *name, int32_t x, int64_t in,
                    int32_t tied)
{
    if (h->task.kind != HF_TASK_LM)
        return hf_task_head(h, x, in);
    size_t s = hf_enter(h, "%s", name);
    bool cap = c->final_cap > 0;
    x = hf_linear(h, x, in, c->vocab, c->head_bias, c->tie ? tied : -1, cap ? NULL : "logits");
    hf_leave(h, s);
    if (cap) {
        x = hf_op(h, DM_OP_Div, 2, x, hf_const_f(h, c->final_cap));
        x = hf_op(h, DM_OP_Tanh, 1, x);
        int32_t k = hf_const_f(h, c->final_cap);
        h->out_name = "logits";
        x = hf_op(h, DM_OP_Mul, 2, x, k);
    }
    return x;
}

/* Hold the tensors in `held` (the parts of a fused projection that its
 * views keep alive in PyTorch) until node `until`. */
void hf_hold_all(struct hf *h, const int32_t *held, int n, int32_t until)
{
    for (int j = 0; j < n; j++)
        hf_hold(h, held[j], until);
}

/* ---- reading the configs ---- */

/* rope_scaling: null, "default" or (Gemma 3) "linear"; anything else is an error. */
double hf_dec_rope_scaling(struct hf *h, bool linear_ok)
{
    json_t *rs = hf_field(h, "rope_scaling");
    if (!rs || h->st != DNNMEM_OK)
        return 1.0;
    json_t *t = json_object_get(rs, "rope_type");
    if (!t)
        t = json_object_get(rs, "type");
    const char *ty = json_is_string(t) ? json_string_value(t) : "?";
    if (strcmp(ty, "default") == 0)
        return 1.0;
    if (linear_ok && strcmp(ty, "linear") == 0) {
        json_t *f = json_object_get(rs, "factor");
        if (!json_is_number(f) || json_number_value(f) <= 0) {
            hf_fail(h, DNNMEM_E_MODEL,
                    "config field 'rope_scaling.factor' must be a positive number");
            return 1.0;
        }
        return json_number_value(f);
    }
    hf_fail(h, DNNMEM_E_UNSUPPORTED,
            "config field 'rope_scaling' has type '%s'; not modelled for %s",
            ty, json_string_value(json_object_get(h->root, "model_type")));
    return 1.0;
}

void hf_dec_heads(struct hf *h, struct dec *c, const char *hk, const char *kvk)
{
    c->heads = hf_get_int(h, hk, REQUIRED, MAX_SIZE);
    c->kv_heads = kvk ? hf_get_int(h, kvk, c->heads, MAX_SIZE) : c->heads;
    if (h->st == DNNMEM_OK && !hf_field(h, "head_dim") && c->hidden % c->heads)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'hidden_size' (%lld) is not a multiple of '%s' (%lld)",
                (long long)c->hidden, hk, (long long)c->heads);
    if (h->st == DNNMEM_OK && c->heads % c->kv_heads)
        hf_fail(h, DNNMEM_E_MODEL, "config field '%s' (%lld) does not divide '%s' (%lld)", kvk,
                (long long)c->kv_heads, hk, (long long)c->heads);
}

void hf_dec_check_act(struct hf *h, const char *key, const char *act, bool relu)
{
    if (h->st == DNNMEM_OK && (!act_known(act) || (!relu && strcmp(act, "relu") == 0)))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field '%s' is '%s'; modelled: %sgelu, gelu_new, gelu_pytorch_tanh", key, act,
                relu ? "relu, " : "");
}

/* Sizes built from several config fields stay within the limit of one
 * field: the fused projections' widths (heads + 2 x KV heads) x head_dim and
 * the rest of products of two fields fit int64. */
static void dec_check_sizes(struct hf *h, const struct dec *c)
{
    int64_t w;
    if (h->st == DNNMEM_OK &&
        (!dm_mul_ok(c->heads + 2 * c->kv_heads, c->head_dim, &w) || w > MAX_SIZE))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config fields 'num_attention_heads' (%lld), key-value heads (%lld) and the head "
                "dim (%lld) give a projection wider than %lld",
                (long long)c->heads, (long long)c->kv_heads, (long long)c->head_dim,
                (long long)MAX_SIZE);
}

/* What transformers 4.51's generate() runs for these families (the sources
 * and how sure: the table at the top of src/schedule/generate.c):
 *  - BioGPT: BioGptPreTrainedModel sets no _supports_cache_class (its
 *    attention is BART's with the past_key_value tuple; the Cache classes
 *    came with "Bart: new cache format", May 2025, after 4.51), so the cache
 *    is the presents tuple (g->legacy_cache); BioGptForCausalLM.forward takes
 *    no logits_to_keep; the eager 4-D mask is
 *    _prepare_4d_causal_attention_mask's, whose _expand_mask inverts the 2-D
 *    attention_mask (to(dtype), 1 - m, masked_fill with finfo.min);
 *  - OPT: a Cache class (OPTDecoder.forward makes or takes a DynamicCache,
 *    OPTAttention calls past_key_value.update), but OPTForCausalLM.forward
 *    has no logits_to_keep (none yet in 4.54's; added later): its
 *    lm_head(outputs[0]) computes every position's logits;
 *  - GPT-NeoX, Falcon, Phi, Phi-3, Gemma 1-3: a Cache class and
 *    logits_to_keep (as set by the caller). */
static void dec_generation(struct dm_graph *g, const struct dec *c, int transformers)
{
    /* OPT before 4.49 (modeling_opt.py 4.46.3): no Cache class, the
     * past_key_value tuples, and _prepare_4d_causal_attention_mask's
     * inverted 2-D mask, as BioGPT's */
    bool tuples = c->kind == DK_BIOGPT || (c->kind == DK_OPT && transformers < 449);
    if (c->kind == DK_BIOGPT || c->kind == DK_OPT)
        g->logits_to_keep = false;
    g->legacy_cache = tuples;
    g->gen_mask = tuples ? DM_GEN_MASK_INVERTED : DM_GEN_MASK_CAUSAL;
}

/* A decoder family's causal LM from its config *c (read by the family's
 * entry), built by `build`. */
enum dnnmem_status hf_dec_lm(struct hf *h, const char *type, const struct dec *c,
                             int32_t (*build)(struct hf *h, const struct dec *c, int32_t ids))
{
    dec_check_sizes(h, c);
    if (!hf_check(h, type) || !hf_begin(h, type))
        return h->st;
    int32_t ids = hf_causal_ids(h, c->layers, c->use_cache, true);
    if (ids < 0)
        return h->st;
    int32_t logits = build(h, c, ids);
    dec_generation(h->g, c, h->transformers);
    return hf_causal_outputs(h, logits, c->layers, c->use_cache, true);
}
