/*
 * whisper.c (src/load/hf/): Whisper (WhisperForConditionalGeneration).
 *
 * As modeling_whisper.py runs it in transformers 4.56.2 and 5.24.0, which
 * were read side by side. Their forwards allocate the same tensors (4.56
 * draws a 0-dim torch.rand([]) per layer in training for the layerdrop
 * test, 5.24 only when layerdrop > 0; 5.24 adds the cache length to
 * arange(T), an int64 [T]: a few bytes either way, not modelled), but hold
 * the eager attention probabilities differently (4.x's layers return them:
 * whisper_encoder, whisper_decoder). The
 * encoder's length is fixed by the config: input_features [batch,
 * num_mel_bins, 2 * max_source_positions] (WhisperEncoder.forward raises on
 * any other length); the decoder's length is the seq dim.
 */
#include "hf.h"

struct whisper {
    int64_t vocab, d, mel, src, tgt, enc_layers, dec_layers, enc_heads, dec_heads, enc_ffn,
        dec_ffn;
    double drop, attn_drop, act_drop;
    const char *act;
    bool tie, use_cache;
};

/* The activation_function (ACT2FN): gelu (nn.functional.gelu), gelu_new,
 * gelu_pytorch_tanh, relu. */
static int32_t whisper_act(struct hf *h, const char *act, int32_t x)
{
    if (strcmp(act, "relu") == 0)
        return hf_op(h, DM_OP_Relu, 1, x);
    return hf_gpt2_act(h, act, x);
}

/* One projection of WhisperAttention: Linear, .view(B, L, H, D),
 * .transpose(1, 2).contiguous() (a copy [B, H, L, D]); q is scaled by
 * head_dim**-0.5 after the projection, a tensor of its own. */
static int32_t whisper_proj(struct hf *h, int32_t x, int64_t E, int64_t H, const char *name,
                            bool bias, double scale, const char *out)
{
    size_t s = hf_enter(h, "%s", name);
    int32_t y = hf_linear(h, x, E, E, bias, -1, NULL);
    hf_leave(h, s);
    if (scale > 0)
        y = hf_op(h, DM_OP_Mul, 2, y, hf_const_f(h, scale));
    y = hf_reshape(h, y, INTS(0, 0, H, E / H));
    y = hf_transpose(h, y, INTS(0, 2, 1, 3));
    h->out_name = out;
    return hf_reshape(h, y, INTS(0, H, -1, E / H)); /* .contiguous() */
}

/* WhisperAttention.forward: q, k, v (k without bias; a cross-attention's k
 * and v from the encoder's states `kv`), the cache's update (names: the
 * cache layer's keys and values, or NULL without a cache: from 4.56 the
 * DynamicLayer's first update is a copy, which the attention reads
 * (hf_cache_update); the graph as loaded, built as 4.51's, names the
 * projections' copies instead), then
 * eager_attention_forward (matmul(q, k^T) * scaling, where the module passes
 * scaling=1.0 (q is scaled already): a tensor all the same; + the mask;
 * softmax in the states' dtype, no float32 upcast; dropout; matmul with v;
 * transpose(1, 2).contiguous()) or sdpa_attention_forward (one
 * F.scaled_dot_product_attention, is_causal where no mask is passed and the
 * module is causal: the decoder's self-attention), reshape, out_proj.
 * *weights: eager's attention probabilities, which the caller's `_` holds. */
static int32_t whisper_attention(struct hf *h, const struct whisper *c, int64_t H, int32_t x,
                                 int32_t kv, int32_t mask, bool causal,
                                 const char *const names[2], int32_t *weights)
{
    int64_t E = c->d, D = c->d / H;
    int32_t src = kv >= 0 ? kv : x;
    int32_t qkv[3];
    qkv[0] = whisper_proj(h, x, E, H, "q_proj", true, 1.0 / sqrt((double)D), NULL);
    qkv[1] = whisper_proj(h, src, E, H, "k_proj", false, 0,
                          names ? hf_cache_at_make(h, names[0]) : NULL);
    qkv[2] = whisper_proj(h, src, E, H, "v_proj", true, 0,
                          names ? hf_cache_at_make(h, names[1]) : NULL);
    if (names) {
        qkv[1] = hf_cache_update(h, qkv[1], names[0]);
        qkv[2] = hf_cache_update(h, qkv[2], names[1]);
    }
    *weights = -1;
    int32_t o;
    if (h->sdpa) {
        o = hf_sdpa_attention(h, qkv, -1, causal, H, H, D, D, 1.0, c->attn_drop);
    } else {
        int32_t kt = hf_transpose(h, qkv[1], INTS(0, 1, 3, 2));
        int32_t w = hf_op(h, DM_OP_MatMul, 2, qkv[0], kt);
        w = hf_op(h, DM_OP_Mul, 2, w, hf_const_f(h, 1.0));
        if (mask >= 0)
            w = hf_op(h, DM_OP_Add, 2, w, mask);
        w = hf_op(h, DM_OP_Softmax, 1, w);
        hf_attr_i(h, "axis", -1);
        w = hf_dropout(h, w, c->attn_drop);
        o = hf_op(h, DM_OP_MatMul, 2, w, qkv[2]);
        *weights = w;
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3)); /* .transpose(1, 2).contiguous() */
    o = hf_reshape(h, o, INTS(0, 0, -1));
    size_t s = hf_enter(h, "out_proj");
    o = hf_linear(h, o, E, E, true, -1, NULL);
    hf_leave(h, s);
    /* the forward's locals query_states, key_states, value_states live
     * until it returns */
    for (int j = 0; j < 3; j++)
        hf_hold(h, qkv[j], hf_last_node(h));
    return o;
}

/* LayerNorm `name`, then the sub-layer's input. */
static int32_t whisper_ln(struct hf *h, const struct whisper *c, const char *name, int32_t x)
{
    size_t s = hf_enter(h, "%s", name);
    x = hf_layer_norm(h, x, c->d, 1e-5); /* nn.LayerNorm's default eps */
    hf_leave(h, s);
    return x;
}

/* The feed-forward half of a layer: x + dropout(fc2(dropout(act(fc1(
 * final_layer_norm(x)))))); then, in float16 only, the encoder layer's
 * torch.clamp to finfo.max - 1000 (a new tensor). */
static int32_t whisper_ffn(struct hf *h, const struct whisper *c, int32_t x, int64_t ffn)
{
    int32_t n = whisper_ln(h, c, "final_layer_norm", x);
    size_t s = hf_enter(h, "fc1");
    int32_t y = hf_linear(h, n, c->d, ffn, true, -1, NULL);
    hf_leave(h, s);
    y = whisper_act(h, c->act, y);
    /* `hidden_states = self.activation_fn(self.fc1(hidden_states))`: the
     * norm's output stays bound until the activation returns (measured: the
     * sdpa inference of tiny-whisper peaks at the first encoder layer's
     * GELU with it live) */
    hf_hold(h, n, hf_last_node(h));
    y = hf_dropout(h, y, c->act_drop);
    s = hf_enter(h, "fc2");
    y = hf_linear(h, y, ffn, c->d, true, -1, NULL);
    hf_leave(h, s);
    y = hf_dropout(h, y, c->drop);
    return hf_op(h, DM_OP_Add, 2, x, y);
}

/* WhisperEncoder: gelu(conv1(input_features)), gelu(conv2(.)) (kernel 3,
 * padding 1, conv2 of stride 2: [B, d, max_source_positions]), permuted to
 * [B, S, d] (a view), plus embed_positions(arange(S)) (an nn.Embedding
 * frozen by requires_grad_(False), filled with sinusoids: the lookup makes an
 * [S, d] tensor), dropout, the pre-LN layers, layer_norm. */
static int32_t whisper_encoder(struct hf *h, const struct whisper *c, int32_t feats)
{
    int64_t E = c->d;
    size_t s = hf_enter(h, "conv1");
    int32_t w = hf_param(h, "weight", DM_FLOAT, 3, (int64_t[]){E, c->mel, 3});
    int32_t b = hf_param(h, "bias", DM_FLOAT, 1, &E);
    int32_t x = hf_op(h, DM_OP_Conv, 3, feats, w, b);
    hf_attr_ints(h, "kernel_shape", INTS(3));
    hf_attr_ints(h, "pads", INTS(1, 1));
    hf_leave(h, s);
    x = hf_op(h, DM_OP_Gelu, 1, x);
    int32_t g1 = x;
    s = hf_enter(h, "conv2");
    w = hf_param(h, "weight", DM_FLOAT, 3, (int64_t[]){E, E, 3});
    b = hf_param(h, "bias", DM_FLOAT, 1, &E);
    x = hf_op(h, DM_OP_Conv, 3, x, w, b);
    hf_attr_ints(h, "kernel_shape", INTS(3));
    hf_attr_ints(h, "strides", INTS(2));
    hf_attr_ints(h, "pads", INTS(1, 1));
    hf_leave(h, s);
    x = hf_op(h, DM_OP_Gelu, 1, x);
    hf_hold(h, g1, hf_last_node(h)); /* inputs_embeds, rebound when the second GELU returns */
    x = hf_transpose(h, x, INTS(0, 2, 1));
    int32_t emb = x;
    s = hf_enter(h, "embed_positions");
    int32_t pw = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->src, E});
    if (h->st == DNNMEM_OK)
        h->g->tensors[pw].frozen = true;
    int32_t all = hf_op(h, DM_OP_Range, 3, hf_const_i(h, 0), hf_const_i(h, c->src),
                        hf_const_i(h, 1));
    int32_t pos = hf_op(h, DM_OP_Gather, 2, pw, all);
    hf_leave(h, s);
    x = hf_op(h, DM_OP_Add, 2, x, pos);
    x = hf_dropout(h, x, c->drop);
    int32_t prev = -1; /* 4.x: the previous layer's attention probabilities */
    for (int64_t i = 0; i < c->enc_layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layers.%lld", (long long)i);
        int32_t y = whisper_ln(h, c, "self_attn_layer_norm", x);
        size_t t = hf_enter(h, "self_attn");
        int32_t pw_ = -1;
        y = whisper_attention(h, c, c->enc_heads, y, -1, -1, false, NULL, &pw_);
        hf_leave(h, t);
        y = hf_dropout(h, y, c->drop);
        x = hf_op(h, DM_OP_Add, 2, x, y);
        x = whisper_ffn(h, c, x, c->enc_ffn);
        if (h->half && !h->bf16 && !h->amp) {
            x = hf_op(h, DM_OP_Clip, 3, x, hf_const_f(h, -(65504.0 - 1000.0)),
                      hf_const_f(h, 65504.0 - 1000.0));
        }
        /* 5.x: WhisperEncoderLayer.forward's `hidden_states, _ =
         * self.self_attn(...)`: `_` holds the attention probabilities until
         * it returns. 4.x: the layer returns (hidden_states, attn_weights),
         * and WhisperEncoder.forward's `layer_outputs` holds them until the
         * next layer returns, the last layer's to the end of the forward
         * (measured, 4.56.2: tiny-whisper's eager inference peaks in the
         * second layer's scores with the first layer's probabilities live,
         * +45% over 5.24.0) */
        if (h->transformers >= 500) {
            hf_hold(h, pw_, hf_last_node(h));
        } else {
            hf_hold(h, prev, hf_last_node(h));
            prev = pw_;
        }
        hf_leave(h, ls);
    }
    x = whisper_ln(h, c, "layer_norm", x);
    hf_hold(h, prev, hf_last_node(h));
    hf_hold(h, emb, hf_last_node(h)); /* inputs_embeds */
    hf_hold(h, all, hf_last_node(h));
    return x;
}

/* The cache layer's tensor names of decoder layer i (j: 0 self key, 1 self
 * value, 2 cross key, 3 cross value). */
static const char *cache_name(struct hf *h, int64_t i, int j)
{
    const char *n = dm_arena_printf(&h->g->arena, "past_key_values.%lld.%s.%s", (long long)i,
                                    j < 2 ? "self" : "cross", j % 2 ? "value" : "key");
    if (!n)
        hf_oom(h);
    return n;
}

/* WhisperDecoder: embed_tokens, position_ids = arange(T) repeated over the
 * batch ([B, T] int64), embed_positions.weight[position_ids] (learned:
 * [B, T, d]), their sum, dropout, the causal mask, the layers (self-attention
 * with the cache, cross-attention on the encoder's states, whose k and v the
 * cross-attention cache keeps, the feed-forward), layer_norm. */
static int32_t whisper_decoder(struct hf *h, const struct whisper *c, int32_t ids, int32_t enc,
                               int32_t emb_w)
{
    int64_t E = c->d;
    size_t s = hf_enter(h, "embed_tokens");
    int32_t x = hf_op(h, DM_OP_Gather, 2, emb_w, ids);
    hf_leave(h, s);
    int32_t emb = x;
    int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t pos = hf_op(h, DM_OP_Range, 3, hf_const_i(h, 0), seq, hf_const_i(h, 1));
    int32_t b1 = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "end", 1);
    int32_t reps = hf_op(h, DM_OP_Concat, 2, b1, hf_const_ints(h, INTS(1)));
    hf_attr_i(h, "axis", 0);
    int32_t pos_ids = hf_op(h, DM_OP_Tile, 2, hf_unsqueeze(h, pos, INTS(0)), reps);
    s = hf_enter(h, "embed_positions");
    int32_t pw = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->tgt, E});
    int32_t pe = hf_op(h, DM_OP_Gather, 2, pw, pos_ids);
    hf_leave(h, s);
    x = hf_op(h, DM_OP_Add, 2, x, pe);
    x = hf_dropout(h, x, c->drop);
    /* create_causal_mask: the eager attention's [B, 1, T, T] mask; the fused
     * kernels take is_causal (no mask) */
    int32_t mask = h->sdpa ? -1 : hf_dec_causal_mask_batch(h, ids, seq, "causal_mask");
    for (int64_t i = 0; i < c->dec_layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layers.%lld", (long long)i);
        const char *names[4] = {NULL, NULL, NULL, NULL};
        for (int j = 0; c->use_cache && j < 4; j++)
            names[j] = cache_name(h, i, j);
        if (h->st != DNNMEM_OK)
            return -1;
        int32_t y = whisper_ln(h, c, "self_attn_layer_norm", x);
        size_t t = hf_enter(h, "self_attn");
        int32_t sw = -1, xw = -1;
        y = whisper_attention(h, c, c->dec_heads, y, -1, mask, true,
                              c->use_cache ? names : NULL, &sw);
        hf_leave(h, t);
        x = hf_op(h, DM_OP_Add, 2, x, hf_dropout(h, y, c->drop));
        y = whisper_ln(h, c, "encoder_attn_layer_norm", x);
        /* 5.x: `hidden_states, _ = self.self_attn(...)`: `_` holds the
         * self-attention's probabilities until the cross-attention rebinds
         * it; 4.x binds self_attn_weights and cross_attn_weights, both held
         * until the layer returns */
        t = hf_enter(h, "encoder_attn");
        y = whisper_attention(h, c, c->dec_heads, y, enc, -1, false,
                              c->use_cache ? names + 2 : NULL, &xw);
        hf_leave(h, t);
        if (h->transformers >= 500)
            hf_hold(h, sw, hf_last_node(h));
        x = hf_op(h, DM_OP_Add, 2, x, hf_dropout(h, y, c->drop));
        x = whisper_ffn(h, c, x, c->dec_ffn);
        hf_hold(h, xw, hf_last_node(h));
        hf_hold(h, sw, hf_last_node(h));
        hf_leave(h, ls);
    }
    x = whisper_ln(h, c, "layer_norm", x);
    /* WhisperDecoder.forward's locals inputs_embeds, position_ids, positions
     * and causal_mask live until it returns */
    int32_t held[] = {emb, pos, pos_ids, pe, mask};
    hf_hold_all(h, held, (int)(sizeof held / sizeof *held), hf_last_node(h));
    return x;
}

/* WhisperForConditionalGeneration, called as model(input_features,
 * decoder_input_ids=shift_tokens_right(labels)) (or with labels, which
 * forward shifts itself): input_features [batch, num_mel_bins, 2 *
 * max_source_positions] (the model's dtype: Conv1d takes no other), the
 * encoder, the decoder on decoder_input_ids [batch, seq], proj_out (tied to
 * the decoder's embed_tokens when tie_word_embeddings). Outputs: the logits
 * [batch, seq, vocab], with use_cache the EncoderDecoderCache's self- and
 * cross-attention keys and values per layer, and
 * encoder_last_hidden_state. */
static void build_whisper(struct hf *h, const struct whisper *c)
{
    struct dm_graph *g = h->g;
    /* --mode generate: WhisperGenerationMixin.generate's short-form path
     * (generation_whisper.py, 4.56.2 and 5.24.0): _get_input_segment's
     * torch.cat of the batch's [1, mel, 3000] slices (a copy of
     * input_features, measured: 1.92 MB live at tiny-whisper's peak) goes to
     * GenerationMixin.generate, whose prefill is the encoder and the first
     * decoder forward on decoder_input_ids [batch, 1] (the init tokens: the
     * decoder_start_token_id without forced language or task tokens);
     * src/schedule/generate.c (whisper_decode) runs the rest */
    bool gen = h->gen_tokens > 0;
    if (gen && !c->use_cache) {
        hf_refuse(h, DM_REFUSE_GEN_NO_USE_CACHE, NULL, NULL);
        return;
    }
    int32_t feats = hf_declare_input(h, "input_features", DM_FLOAT, 3,
                                     (const char *[]){"batch", NULL, NULL},
                                     (const int64_t[]){0, c->mel, 2 * c->src});
    int32_t ids = hf_declare_input(h, "decoder_input_ids", DM_INT64, 2,
                                   (const char *[]){"batch", gen ? NULL : "seq"},
                                   (const int64_t[]){0, 1});
    int32_t seg = -1;
    if (gen) {
        h->out_name = "segment_input";
        seg = hf_op(h, DM_OP_Concat, 1, feats);
        hf_attr_i(h, "axis", 0);
        feats = seg;
    }
    int32_t cap = 3 + (c->use_cache ? 4 * (int32_t)c->dec_layers : 0);
    g->outputs = dm_arena_array(&g->arena, (size_t)cap, sizeof *g->outputs);
    if (!g->outputs) {
        hf_oom(h);
        return;
    }
    size_t top = hf_enter(h, "model");
    size_t s = hf_enter(h, "encoder");
    int32_t enc = whisper_encoder(h, c, feats);
    hf_leave(h, s);
    s = hf_enter(h, "decoder");
    size_t t = hf_enter(h, "embed_tokens");
    int32_t emb_w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, c->d});
    hf_leave(h, t);
    int32_t dec = whisper_decoder(h, c, ids, enc, emb_w);
    hf_leave(h, s);
    hf_leave(h, top);
    if (h->st != DNNMEM_OK)
        return;
    s = hf_enter(h, "proj_out");
    int32_t logits = hf_linear(h, dec, c->d, c->vocab, false, c->tie ? emb_w : -1, "logits");
    hf_leave(h, s);
    hf_add_output(h, logits, cap);
    for (int64_t i = 0; c->use_cache && i < c->dec_layers && h->st == DNNMEM_OK; i++)
        for (int j = 0; j < 4; j++) {
            const char *name = cache_name(h, i, j);
            int32_t x = name ? dm_graph_find(g, name) : -1;
            if (x < 0) {
                hf_fail(h, DNNMEM_E_INTERNAL, "no tensor '%s'", name ? name : "?");
                return;
            }
            hf_add_output(h, x, cap);
        }
    hf_add_output(h, enc, cap); /* encoder_last_hidden_state */
    hf_add_output(h, seg, cap); /* generate: the segment, held to the end */
    g->encoder_decoder = true;
    g->whisper = true;
}

/* A layerdrop of the config (a layer skipped at random in training): only 0. */
static void check_zero(struct hf *h, const char *key)
{
    double v = hf_get_num(h, key, 0.0, 0, 1);
    if (h->st == DNNMEM_OK && v != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field '%s' is %g; only 0 is modelled (a layer skipped at random)", key, v);
}

/* WhisperConfig's defaults (whisper-tiny's shapes, configuration_whisper.py
 * 5.24.0). */
static void read_whisper(struct hf *h, struct whisper *c)
{
    c->vocab = hf_get_int(h, "vocab_size", 51865, MAX_SIZE);
    c->d = hf_get_int(h, "d_model", 384, MAX_SIZE);
    c->mel = hf_get_int(h, "num_mel_bins", 80, MAX_SIZE);
    c->src = hf_get_int(h, "max_source_positions", 1500, MAX_SIZE);
    c->tgt = hf_get_int(h, "max_target_positions", 448, MAX_SIZE);
    c->enc_layers = hf_get_int(h, "encoder_layers", 4, MAX_LAYERS);
    c->dec_layers = hf_get_int(h, "decoder_layers", 4, MAX_LAYERS);
    c->enc_heads = hf_get_int(h, "encoder_attention_heads", 6, MAX_SIZE);
    c->dec_heads = hf_get_int(h, "decoder_attention_heads", 6, MAX_SIZE);
    c->enc_ffn = hf_get_int(h, "encoder_ffn_dim", 1536, MAX_SIZE);
    c->dec_ffn = hf_get_int(h, "decoder_ffn_dim", 1536, MAX_SIZE);
    c->drop = hf_get_num(h, "dropout", 0.0, 0, 1);
    c->attn_drop = hf_get_num(h, "attention_dropout", 0.0, 0, 1);
    c->act_drop = hf_get_num(h, "activation_dropout", 0.0, 0, 1);
    c->act = hf_get_str(h, "activation_function", "gelu");
    c->tie = hf_get_bool(h, "tie_word_embeddings", true);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    check_zero(h, "encoder_layerdrop");
    check_zero(h, "decoder_layerdrop");
    bool spec = hf_get_bool(h, "apply_spec_augment", false);
    if (h->st != DNNMEM_OK)
        return;
    if (spec) {
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'apply_spec_augment' is true; only false is modelled");
        return;
    }
    if (c->d % c->enc_heads || c->d % c->dec_heads) {
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'd_model' (%lld) is not a multiple of 'encoder_attention_heads' "
                "(%lld) and 'decoder_attention_heads' (%lld)",
                (long long)c->d, (long long)c->enc_heads, (long long)c->dec_heads);
        return;
    }
    if (strcmp(c->act, "gelu") != 0 && strcmp(c->act, "gelu_new") != 0 &&
        strcmp(c->act, "gelu_pytorch_tanh") != 0 && strcmp(c->act, "relu") != 0) {
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'activation_function' is '%s'; modelled for whisper: gelu, "
                "gelu_new, gelu_pytorch_tanh, relu", c->act);
        return;
    }
    json_t *arch = json_object_get(h->root, "architectures");
    if (!arch || json_is_null(arch))
        return;
    if (!json_is_array(arch)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field 'architectures' must be a list");
        return;
    }
    size_t i;
    json_t *a;
    json_array_foreach(arch, i, a)
    {
        if (json_is_string(a) && strcmp(json_string_value(a), "WhisperForConditionalGeneration") == 0)
            return;
    }
    a = json_array_get(arch, 0);
    hf_fail(h, DNNMEM_E_UNSUPPORTED,
            "config field 'architectures' names %s; only WhisperForConditionalGeneration is built",
            json_is_string(a) ? json_string_value(a) : "a non-string");
}

enum dnnmem_status hf_whisper(struct hf *h, const char *type)
{
    struct whisper c = {0};
    if (!hf_check(h, type) || !hf_begin(h, type))
        return h->st;
    read_whisper(h, &c);
    if (h->st == DNNMEM_OK)
        build_whisper(h, &c);
    return hf_finish(h);
}
