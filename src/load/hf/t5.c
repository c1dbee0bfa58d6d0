/*
 * t5.c (src/load/hf/): T5 (and mT5).
 */
#include "hf.h"

struct t5 {
    const char *type;
    int64_t vocab, d_model, d_kv, d_ff, layers, dec_layers, heads, buckets, max_distance;
    double eps, drop;
    const char *act; /* dense_act_fn: relu, gelu, gelu_new, silu */
    bool gated, tie, use_cache;
};

/* T5LayerNorm: an RMS norm without bias,
 *   variance = x.to(float32).pow(2).mean(-1, keepdim=True)
 *   x = x * torch.rsqrt(variance + eps)
 *   if weight is float16/bfloat16: x = x.to(weight.dtype)
 *   return weight * x
 * The variance is float32 whatever x is, and x * rsqrt(...) promotes to
 * float32 too (a half x times a float32 [.., 1]); the cast back only when the
 * weights are half (the result's CastLike to x is a no-op in float32). */
static int32_t t5_norm(struct hf *h, int32_t x, int64_t dim, double eps)
{
    int32_t w = hf_param(h, "weight", DM_FLOAT, 1, &dim);
    int32_t x32 = hf_op(h, DM_OP_Cast, 1, x);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, x32);
    int32_t p = hf_op(h, DM_OP_Pow, 2, x32, hf_const_f(h, 2.0));
    hf_keep32(h, p);
    int32_t m = hf_op(h, DM_OP_ReduceMean, 1, p);
    hf_attr_ints(h, "axes", INTS(-1));
    hf_attr_i(h, "keepdims", 1);
    hf_keep32(h, m);
    int32_t a = hf_op(h, DM_OP_Add, 2, m, hf_const_f(h, eps));
    hf_keep32(h, a);
    int32_t s = hf_op(h, DM_OP_Sqrt, 1, a);
    hf_keep32(h, s);
    int32_t r = hf_op(h, DM_OP_Reciprocal, 1, s);
    hf_keep32(h, r);
    int32_t y = hf_op(h, DM_OP_Mul, 2, x, r);
    hf_keep32(h, y);
    y = hf_op(h, DM_OP_CastLike, 2, y, x);
    return hf_op(h, DM_OP_Mul, 2, w, y);
}

/* T5Attention._relative_position_bucket(memory - context) and
 * relative_attention_bias: int64 [q, k] temporaries (the bucket arithmetic
 * of transformers' code, each op a tensor), the embedding lookup [q, k, H],
 * permute([2, 0, 1]).unsqueeze(0): a [1, H, q, k] view. `rq`, `rk`: the
 * positions, int64 [q] and [k]. */
static int32_t t5_compute_bias(struct hf *h, const struct t5 *c, bool bidirectional, int32_t rq,
                               int32_t rk)
{
    int32_t w = hf_param(h, "relative_attention_bias.weight", DM_FLOAT, 2,
                         (int64_t[]){c->buckets, c->heads});
    int32_t ctx = hf_unsqueeze(h, rq, INTS(1));
    int32_t mem = hf_unsqueeze(h, rk, INTS(0));
    int32_t rp = hf_op(h, DM_OP_Sub, 2, mem, ctx);
    int64_t nb = c->buckets;
    int32_t rb = -1;
    if (bidirectional) {
        nb /= 2;
        int32_t gt = hf_op(h, DM_OP_Greater, 2, rp, hf_const_i(h, 0));
        gt = hf_op(h, DM_OP_Cast, 1, gt);
        hf_attr_i(h, "to", DM_INT64);
        rb = hf_op(h, DM_OP_Mul, 2, gt, hf_const_i(h, nb));
        rb = hf_op(h, DM_OP_Add, 2, rb, hf_const_i(h, 0)); /* relative_buckets (0) += ... */
        rp = hf_op(h, DM_OP_Abs, 1, rp);
    } else {
        rp = hf_op(h, DM_OP_Neg, 1, hf_op(h, DM_OP_Min, 2, rp, hf_const_i(h, 0)));
    }
    int64_t max_exact = nb / 2;
    int32_t small = hf_op(h, DM_OP_Less, 2, rp, hf_const_i(h, max_exact));
    int32_t f = hf_op(h, DM_OP_Cast, 1, rp);
    hf_attr_i(h, "to", DM_FLOAT);
    f = hf_op(h, DM_OP_Div, 2, f, hf_const_f(h, (double)max_exact));
    f = hf_op(h, DM_OP_Log, 1, f);
    f = hf_op(h, DM_OP_Div, 2, f, hf_const_f(h, log((double)c->max_distance / (double)max_exact)));
    f = hf_op(h, DM_OP_Mul, 2, f, hf_const_f(h, (double)(nb - max_exact)));
    int32_t large = hf_op(h, DM_OP_Cast, 1, f);
    hf_attr_i(h, "to", DM_INT64);
    large = hf_op(h, DM_OP_Add, 2, large, hf_const_i(h, max_exact));
    large = hf_op(h, DM_OP_Min, 2, large, hf_const_i(h, nb - 1));
    int32_t wh = hf_op(h, DM_OP_Where, 3, small, rp, large);
    rb = rb >= 0 ? hf_op(h, DM_OP_Add, 2, rb, wh) : hf_op(h, DM_OP_Add, 2, wh, hf_const_i(h, 0));
    size_t s = hf_enter(h, "relative_attention_bias");
    int32_t v = hf_op(h, DM_OP_Gather, 2, w, rb); /* [q, k, H] */
    hf_leave(h, s);
    v = hf_transpose(h, v, INTS(2, 0, 1));
    return hf_unsqueeze(h, v, INTS(0));
}

/* q, k or v: hf_linear (no bias) viewed [B, L, H, D] and transposed to
 * [B, H, L, D]; `name` names the transposed view (the cache keeps it). */
static int32_t t5_heads(struct hf *h, const struct t5 *c, int32_t x, const char *proj,
                        const char *name)
{
    int64_t inner = c->heads * c->d_kv;
    size_t s = hf_enter(h, "%s", proj);
    int32_t y = hf_linear(h, x, c->d_model, inner, false, -1, NULL);
    hf_leave(h, s);
    y = hf_reshape(h, y, INTS(0, 0, c->heads, c->d_kv));
    h->out_name = name;
    return hf_transpose(h, y, INTS(0, 2, 1, 3));
}

/* softmax(scores.float(), dim=-1).type_as(scores) (modeling_t5.py 4.46-4.57;
 * 5.x's eager_attention_forward calls softmax(attn_weights) as it is):
 * .float() copies a 16-bit scores tensor to float32 on any device (it is not
 * softmax's dtype argument, so no half_to_float), the float32 probabilities
 * are what SoftmaxBackward keeps, and type_as casts them back (all no-ops in
 * float32). Measured: tiny-t5 bf16 inference with transformers 4.51.3 on the
 * CPU peaks in the encoder with the float32 copy and the float32 softmax
 * [B, H, S, S] both live (tests/validation/hf-real-cpu-detail.jsonl). */
static int32_t t5_softmax(struct hf *h, int32_t sc)
{
    if (h->transformers >= 500) {
        int32_t p = hf_op(h, DM_OP_Softmax, 1, sc);
        hf_attr_i(h, "axis", -1);
        return p;
    }
    int32_t s32 = hf_op(h, DM_OP_Cast, 1, sc);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, s32);
    int32_t p = hf_op(h, DM_OP_Softmax, 1, s32);
    hf_attr_i(h, "axis", -1);
    hf_keep32(h, p);
    return hf_op(h, DM_OP_CastLike, 2, p, sc);
}

/* T5Attention.forward (eager; transformers has no other T5 attention):
 * scores = matmul(q, k^T) (no scaling: Mesh TensorFlow's initialisation
 * absorbs it), scores += position_bias, softmax(scores.float()).type_as,
 * dropout, matmul with v, hf_transpose(1, 2).contiguous().view, o. The
 * position bias is made by the first call of the stack (the layer with
 * relative_attention_bias: compute_bias; a cross-attention: zeros
 * (1, H, q, k)), with the mask added: [B, H, q, k] (the mask is never None:
 * T5Stack makes one from torch.ones), and reused by every later layer.
 * `kv`: the encoder states for a cross-attention, else -1. `pos`:
 * in/out, the shared bias; `names`: the cache's key and value, or NULL. */
static int32_t t5_attention(struct hf *h, const struct t5 *c, bool dec, int32_t x, int32_t kv,
                            int32_t mask, int32_t *pos, bool has_bias, int32_t rq, int32_t rk,
                            const char *const names[2])
{
    int64_t H = c->heads, D = c->d_kv;
    int32_t qkv[3];
    int32_t src = kv >= 0 ? kv : x;
    qkv[0] = t5_heads(h, c, x, "q", NULL);
    qkv[1] = t5_heads(h, c, src, "k", names ? hf_cache_at_make(h, names[0]) : NULL);
    qkv[2] = t5_heads(h, c, src, "v", names ? hf_cache_at_make(h, names[1]) : NULL);
    /* from 4.56 the EncoderDecoderCache's DynamicLayers return contiguous
     * copies (hf_cache_update), which key_states and value_states are
     * rebound to and the matmuls read without copying (measured: tiny-t5
     * 4.56.2 training 2.25 MiB under 4.51.3, every decoder layer's self-
     * and cross-attention k and v, +1.9% and LoRA +3.4% without) */
    if (names) {
        qkv[1] = hf_cache_update(h, qkv[1], names[0]);
        qkv[2] = hf_cache_update(h, qkv[2], names[1]);
    }
    int32_t c3[3];
    hf_heads_fold(h, qkv, H, D, c3); /* torch.matmul copies the transposed views */
    int32_t kt = hf_transpose(h, c3[1], INTS(0, 1, 3, 2));
    int32_t sc = hf_op(h, DM_OP_MatMul, 2, c3[0], kt);
    if (*pos < 0) {
        int32_t pb;
        if (has_bias) {
            pb = t5_compute_bias(h, c, !dec, rq, rk);
        } else { /* torch.zeros((1, H, q, k)) */
            int32_t s4 = hf_op(h, DM_OP_Shape, 1, sc);
            int32_t tail = hf_op(h, DM_OP_Slice, 4, s4, hf_const_ints(h, INTS(1)),
                                 hf_const_ints(h, INTS(4)),
                                 hf_const_ints(h, INTS(0)));
            int32_t shp = hf_op(h, DM_OP_Concat, 2, hf_const_ints(h, INTS(1)), tail);
            hf_attr_i(h, "axis", 0);
            pb = hf_op(h, DM_OP_ConstantOfShape, 1, shp);
        }
        *pos = hf_op(h, DM_OP_Add, 2, pb, mask); /* position_bias + causal_mask */
    }
    sc = hf_op(h, DM_OP_Add, 2, sc, *pos);
    int32_t w = t5_softmax(h, sc);
    w = hf_dropout(h, w, c->drop);
    int32_t o = hf_op(h, DM_OP_MatMul, 2, w, c3[2]);
    o = hf_transpose(h, o, INTS(0, 2, 1, 3));
    o = hf_reshape(h, o, INTS(0, 0, -1));
    size_t s = hf_enter(h, "o");
    o = hf_linear(h, o, H * D, c->d_model, false, -1, NULL);
    hf_leave(h, s);
    /* the forward's locals query_states, key_states, value_states (views
     * of the projections), scores (added to in place) and attn_weights
     * live until it returns */
    for (int j = 0; j < 3; j++)
        hf_hold(h, qkv[j], hf_last_node(h));
    hf_hold(h, sc, hf_last_node(h));
    hf_hold(h, w, hf_last_node(h));
    return o;
}

/* The dense_act_fn of T5's feed-forward (ACT2FN). */
static int32_t t5_act(struct hf *h, const char *act, int32_t x)
{
    if (strcmp(act, "relu") == 0)
        return hf_op(h, DM_OP_Relu, 1, x);
    if (strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0)
        return hf_op(h, DM_OP_Silu, 1, x);
    return hf_gpt2_act(h, act, x); /* gelu, gelu_new */
}

/* T5LayerFF: x + hf_dropout(DenseReluDense(hf_layer_norm(x))), DenseReluDense
 * being T5DenseActDense (wi, act, dropout, wo) or T5DenseGatedActDense
 * (act(wi_0(x)) * wi_1(x), dropout, wo). */
static int32_t t5_ff(struct hf *h, const struct t5 *c, int32_t x)
{
    size_t s = hf_enter(h, "layer_norm");
    int32_t y = t5_norm(h, x, c->d_model, c->eps);
    hf_leave(h, s);
    s = hf_enter(h, "DenseReluDense");
    size_t t = hf_enter(h, c->gated ? "wi_0" : "wi");
    int32_t a = hf_linear(h, y, c->d_model, c->d_ff, false, -1, NULL);
    hf_leave(h, t);
    a = t5_act(h, c->act, a);
    if (c->gated) {
        t = hf_enter(h, "wi_1");
        int32_t b = hf_linear(h, y, c->d_model, c->d_ff, false, -1, NULL);
        hf_leave(h, t);
        a = hf_op(h, DM_OP_Mul, 2, a, b);
    }
    a = hf_dropout(h, a, c->drop);
    t = hf_enter(h, "wo");
    a = hf_linear(h, a, c->d_ff, c->d_model, false, -1, NULL);
    hf_leave(h, t);
    hf_leave(h, s);
    return hf_op(h, DM_OP_Add, 2, x, hf_dropout(h, a, c->drop));
}

/* One T5Stack (the encoder, or with `enc` >= 0 the decoder) on token ids
 * `ids`, embedded by the shared embedding `emb_w`. The decoder's caches
 * (self-attention key and value, cross-attention key and value per layer)
 * are named "past_key_values.N.{self,cross}.{key,value}" when use_cache. */
static int32_t t5_stack(struct hf *h, const struct t5 *c, int32_t ids, int32_t emb_w, int32_t enc,
                        int32_t enc_ids)
{
    struct dm_graph *g = h->g;
    bool dec = enc >= 0;
    size_t s = hf_enter(h, "embed_tokens");
    int32_t emb = hf_op(h, DM_OP_Gather, 2, emb_w, ids);
    hf_leave(h, s);
    /* cache_position = arange(L); attention_mask = torch.ones(B, L) */
    int32_t len = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t pos = hf_op(h, DM_OP_Range, 3, hf_const_i(h, 0), len, hf_const_i(h, 1));
    int32_t ones = hf_op(h, DM_OP_ConstantOfShape, 1, hf_op(h, DM_OP_Shape, 1, ids));
    int32_t mask, enc_mask = -1, enc_pos = -1;
    if (!dec) {
        /* (1.0 - attention_mask[:, None, None, :]) * finfo.min: [B, 1, 1, S] */
        mask = hf_unsqueeze(h, ones, INTS(1, 2));
        mask = hf_op(h, DM_OP_Sub, 2, hf_const_f(h, 1.0), mask);
        mask = hf_op(h, DM_OP_Mul, 2, mask, hf_const_f(h, -FLT_MAX));
    } else {
        /* _update_causal_mask with the 2-D ones mask (eager):
         * full((T, T), min).triu(1), *= arange > cache_position, expanded
         * to [B, 1, T, T] and cloned (padding with the ones changes nothing) */
        int32_t tt = hf_op(h, DM_OP_Concat, 2, len, len);
        hf_attr_i(h, "axis", 0);
        int32_t full = hf_op(h, DM_OP_ConstantOfShape, 1, tt);
        int32_t tri = hf_op(h, DM_OP_Trilu, 2, full, hf_const_i(h, 1));
        hf_attr_i(h, "upper", 1);
        int32_t b1 = hf_op(h, DM_OP_Slice, 4, hf_op(h, DM_OP_Shape, 1, ids),
                           hf_const_ints(h, INTS(0)),
                           hf_const_ints(h, INTS(1)), hf_const_ints(h, INTS(0)));
        int32_t shp = hf_op(h, DM_OP_Concat, 4, b1, hf_const_ints(h, INTS(1)), len, len);
        hf_attr_i(h, "axis", 0);
        mask = hf_op(h, DM_OP_Expand, 2, hf_unsqueeze(h, tri, INTS(0, 1)), shp);
        /* invert_attention_mask(torch.ones((B, S), long)): [B, 1, 1, S] */
        int32_t eo = hf_op(h, DM_OP_ConstantOfShape, 1, hf_op(h, DM_OP_Shape, 1, enc_ids));
        struct dm_tensor *one = dm_arena_alloc(&g->arena, sizeof *one);
        struct dm_dim *od = dm_arena_alloc(&g->arena, sizeof *od);
        struct dm_value *ov = dm_arena_alloc(&g->arena, sizeof *ov);
        int64_t *oi = dm_arena_alloc(&g->arena, sizeof *oi);
        if (!one || !od || !ov || !oi)
            return hf_oom(h);
        *oi = 1;
        *ov = (struct dm_value){.n = 1, .i = oi};
        *od = (struct dm_dim){1, -1};
        *one = (struct dm_tensor){.name = "value", .dtype = DM_INT64, .rank = 1, .dims = od,
                                  .role = DM_ROLE_CONSTANT, .producer = -1, .value = ov};
        struct dm_attr *fa = hf_attr(h, "value", DM_ATTR_TENSOR);
        if (fa)
            fa->t = one;
        enc_mask = hf_op(h, DM_OP_Cast, 1, hf_unsqueeze(h, eo, INTS(1, 2)));
        hf_attr_i(h, "to", DM_FLOAT);
        enc_mask = hf_op(h, DM_OP_Sub, 2, hf_const_f(h, 1.0), enc_mask);
        enc_mask = hf_op(h, DM_OP_Mul, 2, enc_mask, hf_const_f(h, -FLT_MAX));
    }
    int32_t x = hf_dropout(h, emb, c->drop);
    int32_t pb = -1;
    int64_t n = dec ? c->dec_layers : c->layers;
    for (int64_t i = 0; i < n && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "block.%lld", (long long)i);
        const char *kvn[2] = {NULL, NULL}, *xkvn[2] = {NULL, NULL};
        if (dec && c->use_cache) {
            kvn[0] = dm_arena_printf(&g->arena, "past_key_values.%lld.self.key", (long long)i);
            kvn[1] = dm_arena_printf(&g->arena, "past_key_values.%lld.self.value", (long long)i);
            xkvn[0] = dm_arena_printf(&g->arena, "past_key_values.%lld.cross.key", (long long)i);
            xkvn[1] = dm_arena_printf(&g->arena, "past_key_values.%lld.cross.value", (long long)i);
            if (!kvn[0] || !kvn[1] || !xkvn[0] || !xkvn[1])
                return hf_oom(h);
        }
        /* layer.0: T5LayerSelfAttention */
        size_t l0 = hf_enter(h, "layer.0");
        size_t t = hf_enter(h, "layer_norm");
        int32_t y = t5_norm(h, x, c->d_model, c->eps);
        hf_leave(h, t);
        t = hf_enter(h, "SelfAttention");
        y = t5_attention(h, c, dec, y, -1, mask, &pb, i == 0, pos, pos,
                         dec && c->use_cache ? kvn : NULL);
        hf_leave(h, t);
        x = hf_op(h, DM_OP_Add, 2, x, hf_dropout(h, y, c->drop));
        hf_leave(h, l0);
        /* T5Block.forward's self_attention_outputs and cross_attention_outputs
         * tuples hold each sub-layer's output until the block returns */
        int32_t sa = x, ca = -1;
        if (dec) { /* layer.1: T5LayerCrossAttention on the encoder's states */
            size_t l1 = hf_enter(h, "layer.1");
            t = hf_enter(h, "layer_norm");
            y = t5_norm(h, x, c->d_model, c->eps);
            hf_leave(h, t);
            t = hf_enter(h, "EncDecAttention");
            y = t5_attention(h, c, true, y, enc, enc_mask, &enc_pos, false, -1, -1,
                             c->use_cache ? xkvn : NULL);
            hf_leave(h, t);
            x = hf_op(h, DM_OP_Add, 2, x, hf_dropout(h, y, c->drop));
            ca = x;
            hf_leave(h, l1);
        }
        size_t lf = hf_enter(h, "layer.%d", dec ? 2 : 1);
        x = t5_ff(h, c, x);
        hf_leave(h, lf);
        hf_hold(h, sa, hf_last_node(h));
        hf_hold(h, ca, hf_last_node(h));
        hf_leave(h, ls);
    }
    s = hf_enter(h, "final_layer_norm");
    x = t5_norm(h, x, c->d_model, c->eps);
    hf_leave(h, s);
    x = hf_dropout(h, x, c->drop);
    /* T5Stack.forward's locals live until it returns */
    hf_hold(h, emb, hf_last_node(h));
    hf_hold(h, pos, hf_last_node(h));
    hf_hold(h, ones, hf_last_node(h));
    hf_hold(h, mask, hf_last_node(h));
    hf_hold(h, enc_mask, hf_last_node(h));
    hf_hold(h, pb, hf_last_node(h));
    hf_hold(h, enc_pos, hf_last_node(h));
    return x;
}

/* T5ForConditionalGeneration (MT5ForConditionalGeneration is the same
 * module), called as model(input_ids, decoder_input_ids=labels shifted
 * right): the shared embedding, encoder and decoder T5Stacks, the lm_head
 * (tied to the shared embedding, the decoder output rescaled by
 * d_model**-0.5 first, when tie_word_embeddings). Outputs: the logits
 * [batch, target_seq, vocab], with use_cache every decoder layer's
 * self-attention key and value and cross-attention key and value (the
 * EncoderDecoderCache returned as past_key_values holds the transposed views
 * of the k and v projections), and encoder_last_hidden_state. */
static void build_t5(struct hf *h, const struct t5 *c)
{
    struct dm_graph *g = h->g;
    int32_t ids = hf_declare_input(h, "input_ids", DM_INT64, 2, (const char *[]){"batch", "seq"},
                                   NULL);
    /* --mode generate: the prefill is the encoder and the first decoder
     * forward, on generate's decoder_input_ids [batch, 1] of
     * decoder_start_token_id (_prepare_decoder_input_ids_for_generation,
     * transformers 4.51); src/schedule/generate.c runs the rest */
    bool gen = h->gen_tokens > 0;
    if (gen && !c->use_cache) {
        hf_refuse(h, DM_REFUSE_GEN_NO_USE_CACHE, NULL, NULL);
        return;
    }
    int32_t dec_ids = hf_declare_input(h, "decoder_input_ids", DM_INT64, 2,
                                       (const char *[]){"batch", gen ? NULL : "target_seq"},
                                       (const int64_t[]){0, 1});
    int32_t cap = 2 + (c->use_cache ? 4 * (int32_t)c->dec_layers : 0);
    g->outputs = dm_arena_array(&g->arena, (size_t)cap, sizeof *g->outputs);
    if (!g->outputs) {
        hf_oom(h);
        return;
    }
    size_t s = hf_enter(h, "shared");
    int32_t shared = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, c->d_model});
    hf_leave(h, s);
    s = hf_enter(h, "encoder");
    int32_t enc = t5_stack(h, c, ids, shared, -1, -1);
    hf_leave(h, s);
    s = hf_enter(h, "decoder");
    int32_t dec = t5_stack(h, c, dec_ids, shared, enc, ids);
    hf_leave(h, s);
    int32_t y = dec;
    if (c->tie) /* sequence_output * (self.model_dim**-0.5) */
        y = hf_op(h, DM_OP_Mul, 2, y, hf_const_f(h, pow((double)c->d_model, -0.5)));
    s = hf_enter(h, "lm_head");
    int32_t logits = hf_linear(h, y, c->d_model, c->vocab, false, c->tie ? shared : -1, "logits");
    hf_leave(h, s);
    /* the forward's locals: hidden_states (the encoder's) and sequence_output */
    hf_hold(h, dec, hf_last_node(h));
    hf_hold(h, enc, hf_last_node(h));
    hf_add_output(h, logits, cap);
    for (int64_t i = 0; c->use_cache && i < c->dec_layers && h->st == DNNMEM_OK; i++)
        for (int j = 0; j < 4; j++) {
            char name[96];
            snprintf(name, sizeof name, "past_key_values.%lld.%s.%s", (long long)i,
                     j < 2 ? "self" : "cross", j % 2 ? "value" : "key");
            int32_t t = dm_graph_find(g, name);
            if (t < 0) {
                hf_fail(h, DNNMEM_E_INTERNAL, "no tensor '%s'", name);
                return;
            }
            hf_add_output(h, t, cap);
        }
    hf_add_output(h, enc, cap); /* encoder_last_hidden_state */
    g->encoder_decoder = true;
    g->eager_only = true;
}

/* T5Config / MT5Config: their defaults (t5-small's shapes; mT5's vocabulary
 * 250112, d_ff 1024, 8 layers, 6 heads, gated-gelu, untied lm_head). */
static void read_t5(struct hf *h, const char *type, struct t5 *c)
{
    bool mt5 = strcmp(type, "mt5") == 0;
    c->type = type;
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->d_model = hf_get_int(h, "d_model", 512, MAX_SIZE);
    c->d_kv = hf_get_int(h, "d_kv", 64, MAX_SIZE);
    c->d_ff = hf_get_int(h, "d_ff", mt5 ? 1024 : 2048, MAX_SIZE);
    c->layers = hf_get_int(h, "num_layers", mt5 ? 8 : 6, MAX_LAYERS);
    c->dec_layers = hf_get_int(h, "num_decoder_layers", c->layers, MAX_LAYERS);
    c->heads = hf_get_int(h, "num_heads", mt5 ? 6 : 8, MAX_SIZE);
    c->buckets = hf_get_int(h, "relative_attention_num_buckets", 32, MAX_SIZE);
    c->max_distance = hf_get_int(h, "relative_attention_max_distance", 128, MAX_SIZE);
    c->drop = hf_get_num(h, "dropout_rate", 0.1, 0, 1);
    c->eps = hf_get_num(h, "layer_norm_epsilon", 1e-6, 0, 1);
    c->tie = hf_get_bool(h, "tie_word_embeddings", !mt5);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    if (h->st == DNNMEM_OK && c->buckets < 4)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'relative_attention_num_buckets' is %lld; at least 4 is modelled",
                (long long)c->buckets);
    /* feed_forward_proj "ACT" or "gated-ACT"; "gated-gelu" means gelu_new */
    const char *ffp = hf_get_str(h, "feed_forward_proj", mt5 ? "gated-gelu" : "relu");
    if (h->st != DNNMEM_OK)
        return;
    c->gated = strncmp(ffp, "gated-", 6) == 0;
    c->act = c->gated ? ffp + 6 : ffp;
    if (strcmp(ffp, "gated-gelu") == 0)
        c->act = "gelu_new";
    if (strcmp(c->act, "relu") != 0 && strcmp(c->act, "gelu") != 0 &&
        strcmp(c->act, "gelu_new") != 0 && strcmp(c->act, "silu") != 0 &&
        strcmp(c->act, "swish") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'feed_forward_proj' is '%s'; modelled: relu, gelu, gelu_new, silu, "
                "each optionally 'gated-'", ffp);
    json_t *arch = json_object_get(h->root, "architectures");
    if (h->st == DNNMEM_OK && arch && !json_is_null(arch)) {
        size_t i;
        json_t *a;
        const char *want = mt5 ? "MT5ForConditionalGeneration" : "T5ForConditionalGeneration";
        if (!json_is_array(arch)) {
            hf_fail(h, DNNMEM_E_MODEL, "config field 'architectures' must be a list");
            return;
        }
        json_array_foreach(arch, i, a)
        {
            if (json_is_string(a) && strcmp(json_string_value(a), want) == 0)
                return;
        }
        a = json_array_get(arch, 0);
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'architectures' names %s; only %s is built",
                json_is_string(a) ? json_string_value(a) : "a non-string", want);
    }
}

enum dnnmem_status hf_t5(struct hf *h, const char *type)
{
    struct t5 c = {0};
    if (!hf_check(h, type) || !hf_begin(h, type))
        return h->st;
    read_t5(h, type, &c);
    if (h->st == DNNMEM_OK)
        build_t5(h, &c);
    return hf_finish(h);
}
