/*
 * neox.c (src/load/hf/): GPT-NeoX, Falcon, Phi, Phi-3.
 */
#include "hf.h"

/* The cache's value is a view of the fused q/k/v projection, so the whole
 * output lives as long as the cache: with use_cache, the q and k parts
 * (copies here) are returned too, as views named present.N.qkv.0 and
 * present.N.qkv.1, held by the caller as the presents are (in training,
 * until `del out` after the backward). */
static void fused_parts_out(struct hf *h, const struct dec *c, int layer, const int32_t parts[3])
{
    if (h->cache_copy) /* the cache holds copies (cache_update) */
        return;
    for (int j = 0; c->use_cache && j < 2 && h->st == DNNMEM_OK; j++) {
        h->out_name = dm_arena_printf(&h->g->arena, "present.%d.qkv.%d", layer, j);
        if (!h->out_name) {
            hf_oom(h);
            return;
        }
        hf_op(h, DM_OP_Identity, 1, parts[j]);
    }
}

/* query_key_value's fused projection [B, S, H, 3D] split into its three
 * [B, S, H, D] parts (copies here, held as long as their views), and q and k
 * as [B, H, S, D] views; -1 on failure. */
static int split_qkv(struct hf *h, const struct dec *c, int32_t x, int32_t parts[3], int32_t *q,
                     int32_t *k)
{
    int64_t E = c->hidden, H = c->heads, D = c->head_dim;
    int32_t qkv = hf_lin(h, "query_key_value", x, E, 3 * E, c->bias);
    qkv = hf_reshape(h, qkv, INTS(0, 0, H, 3 * D));
    struct dm_node *n = hf_node(h, DM_OP_Split, 2,
                                (int32_t[]){qkv, hf_const_ints(h, INTS(D, D, D))}, 3);
    if (!n)
        return -1;
    hf_attr_i(h, "axis", 3);
    for (int j = 0; j < 3; j++)
        parts[j] = h->g->nodes[h->g->n_nodes - 1].out[j];
    *q = hf_transpose(h, parts[0], INTS(0, 2, 1, 3));
    *k = hf_transpose(h, parts[1], INTS(0, 2, 1, 3));
    return 0;
}

/* GPTNeoXAttention.forward (4.51): query_key_value(x).view(B, S, H, 3D)
 * .transpose(1, 2).chunk(3, -1): three views of the fused output, which
 * stays alive while any of them does (the value until the attention's
 * matmul copies it; with use_cache, in the cache to the end). Split copies
 * here, and the parts are held as long. */
static int32_t neox_attention(struct hf *h, const struct dec *c, int layer, int32_t x, int32_t cos,
                              int32_t sin, int32_t mask, int32_t *pw, int32_t parts[3])
{
    int64_t E = c->hidden, D = c->head_dim;
    int32_t q, k;
    if (split_qkv(h, c, x, parts, &q, &k) < 0)
        return -1;
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "value"));
    int32_t v = hf_transpose(h, parts[2], INTS(0, 2, 1, 3));
    q = hf_rope_cat(h, q, cos, sin, c->rot, D, NULL);
    k = hf_rope_cat(h, k, cos, sin, c->rot, D,
                    hf_cache_at_make(h, hf_present_name(h, c, layer, "key")));
    hf_dec_cache_update(h, c, layer, &k, &v);
    int32_t o = hf_dec_core(h, c, q, k, v, mask, c->scaling, pw);
    fused_parts_out(h, c, layer, parts);
    o = hf_lin(h, "dense", o, E, E, c->bias);
    hf_hold_all(h, parts, 3, hf_last_node(h)); /* forward's local qkv, until it returns */
    hf_hold_qkv(h, q, k, v);
    return o;
}

/* ---- GPT-NeoX before the attention interface (transformers 4.40 to 4.48) ---- */

/* A non-persistent float32 buffer of an old GPT-NeoX module (not in the
 * checkpoint, so no grad, and made with .float() under from_pretrained's
 * default dtype: torch_dtype leaves it float32, as --precision does here). */
static int32_t buffer32(struct hf *h, int32_t t)
{
    if (t >= 0 && h->st == DNNMEM_OK) {
        h->g->tensors[t].frozen = true;
        h->g->tensors[t].keep_fp32 = true;
    }
    return t;
}

/* t, a float32 result of the float32 rotary caches (type promotion keeps it
 * float32 in a 16-bit run). */
static int32_t f32(struct hf *h, int32_t t)
{
    hf_keep32(h, t);
    return t;
}

/* GPTNeoXRotaryEmbedding of 4.40-4.44, one per attention module (modeling_
 * gpt_neox.py 4.42.4, _set_cos_sin_cache): inv_freq [rot/2] and cos_cached,
 * sin_cached [max_position_embeddings, rot], float32; forward returns
 * cos_cached[:S] (a view), and apply_rotary_pos_emb gathers
 * cos[position_ids].unsqueeze(1): [1, 1, S, rot] float32 per layer. */
static void neox_rotary32(struct hf *h, const struct dec *c, int32_t pos_ids, int32_t *cos,
                          int32_t *sin)
{
    size_t s = hf_enter(h, "rotary_emb");
    int64_t half = c->rot / 2;
    buffer32(h, hf_param(h, "inv_freq", DM_FLOAT, 1, &half));
    int32_t cc = buffer32(h, hf_param(h, "cos_cached", DM_FLOAT, 2,
                                      (int64_t[]){c->positions, c->rot}));
    int32_t sc = buffer32(h, hf_param(h, "sin_cached", DM_FLOAT, 2,
                                      (int64_t[]){c->positions, c->rot}));
    hf_leave(h, s);
    *cos = f32(h, hf_unsqueeze(h, f32(h, hf_op(h, DM_OP_Gather, 2, cc, pos_ids)), INTS(1)));
    *sin = f32(h, hf_unsqueeze(h, f32(h, hf_op(h, DM_OP_Gather, 2, sc, pos_ids)), INTS(1)));
}

/* 4.40-4.44's apply_rotary_pos_emb on x [B, H, S, D] (a 16-bit view in a
 * 16-bit run) with float32 cos and sin: x_rot * cos and rotate_half(x_rot) *
 * sin promote to float32, and so does the cat with x_pass: a float32
 * [B, H, S, D] (hf_rope_cat's ops otherwise). */
static int32_t rope_cat32(struct hf *h, int32_t x, int32_t cos, int32_t sin, int64_t rot,
                          int64_t d, const char *name)
{
    int32_t ax = hf_const_ints(h, INTS(-1));
    int32_t xr = hf_op(h, DM_OP_Slice, 4, x, hf_const_ints(h, INTS(0)), hf_const_ints(h, INTS(rot)),
                       ax);
    int32_t xp = hf_op(h, DM_OP_Slice, 4, x, hf_const_ints(h, INTS(rot)), hf_const_ints(h, INTS(d)),
                       ax);
    int32_t a = f32(h, hf_op(h, DM_OP_Mul, 2, xr, cos));
    int32_t b = f32(h, hf_op(h, DM_OP_Mul, 2, hf_rotate_half(h, xr, rot), sin));
    int32_t e = f32(h, hf_op(h, DM_OP_Add, 2, a, b));
    h->out_name = name;
    int32_t y = f32(h, hf_op(h, DM_OP_Concat, 2, e, xp));
    hf_attr_i(h, "axis", -1);
    return y;
}

/* GPTNeoXAttention._attn (4.40-4.48) on q, k [B, H, S, D] (cat results,
 * contiguous: their .view(B * H, S, D) copies nothing) and v (the fused
 * output's view): attn_scores = torch.zeros(B * H, S, S, dtype=q.dtype),
 * then baddbmm(attn_scores, q, k^T, alpha=norm_factor) into a new tensor
 * while the zeros live; torch.where(bias[:, :, :S, :S], scores, finfo.min)
 * (the per-layer bool buffer's view); + the model's causal mask (4.45-4.48;
 * none in 4.40-4.44 without an attention_mask); softmax in the scores'
 * dtype (float32 when the rotary caches made q float32), .to(v.dtype),
 * dropout, torch.matmul with v (its fold copies a strided v, hf_matmul_fold).
 * The last scores live until _attn returns; *pw: the probabilities, _attn's
 * returned attn_weights, a local of forward until it returns. */
static int32_t neox_attn_legacy(struct hf *h, const struct dec *c, int32_t q, int32_t k,
                                int32_t v, int32_t bias, int32_t seq, int32_t mask, bool fp32,
                                int32_t *pw)
{
    int64_t H = c->heads, D = c->head_dim;
    int32_t bhs = hf_op(h, DM_OP_Shape, 1, q);
    hf_attr_i(h, "start", 0);
    hf_attr_i(h, "end", 3);
    int32_t shape = hf_op(h, DM_OP_Concat, 2, bhs, seq);
    hf_attr_i(h, "axis", 0);
    int32_t zeros = hf_dec_fill(h, shape, DM_FLOAT, 0.0);
    if (fp32)
        hf_keep32(h, zeros);
    int32_t s = hf_op(h, DM_OP_MatMul, 2, q, hf_transpose(h, k, INTS(0, 1, 3, 2)));
    if (fp32)
        hf_keep32(h, s);
    hf_hold(h, zeros, hf_last_node(h)); /* baddbmm's self, until it returns */
    int32_t ends = hf_op(h, DM_OP_Concat, 2, seq, seq);
    hf_attr_i(h, "axis", 0);
    int32_t cm = hf_op(h, DM_OP_Slice, 4, bias, hf_const_ints(h, INTS(0, 0)), ends,
                       hf_const_ints(h, INTS(2, 3)));
    s = hf_op(h, DM_OP_Where, 3, cm, s, hf_const_f(h, -FLT_MAX));
    if (fp32)
        hf_keep32(h, s);
    if (mask >= 0)
        s = hf_op(h, DM_OP_Add, 2, s, mask);
    int32_t p = hf_op(h, DM_OP_Softmax, 1, s);
    hf_attr_i(h, "axis", -1);
    if (fp32)
        hf_keep32(h, p);
    p = hf_op(h, DM_OP_CastLike, 2, p, v);
    p = hf_dropout(h, p, c->attn_drop);
    *pw = p;
    int32_t o = hf_op(h, DM_OP_MatMul, 2, p, hf_matmul_fold(h, v, H, D));
    /* attn_scores, a local of _attn rebound last by where (or + mask), lives
     * until _attn returns (measured: 4.42.4's where output is live at the
     * final matmul, tiny-neox inference) */
    hf_hold(h, s, hf_last_node(h));
    return o;
}

/* GPTNeoXAttention.forward / GPTNeoXSdpaAttention.forward of 4.40-4.48
 * (modeling_gpt_neox.py 4.42.4, 4.46.3): per module, the registered `bias`
 * bool [1, 1, P, P] causal mask and `masked_bias` buffers, and a rotary_emb
 * (4.40-4.44 its float32 caches, used; 4.45-4.48 its inv_freq only, the
 * model's cos and sin used); the fused projection's views rotated through
 * cat; the presents a tuple (the key, the value view), as 4.51's cache
 * holds them. sdpa (4.42+): query and key .to(value.dtype) (copies of the
 * float32 ones in 4.42-4.44), no .contiguous() (require_contiguous_qkv is
 * for PyTorch before 2.2 with an attention_mask), is_causal; its output's
 * .transpose(1, 2).contiguous() and eager's _merge_heads copy. */
static int32_t neox_attention_legacy(struct hf *h, const struct dec *c, int layer, int32_t x,
                                     int32_t cos, int32_t sin, int32_t mask, int32_t seq,
                                     int32_t pos_ids, int32_t *pw, int32_t parts[3])
{
    int64_t E = c->hidden, H = c->heads, D = c->head_dim, P = c->positions;
    int32_t bias = hf_param(h, "bias", DM_BOOL, 4, (int64_t[]){1, 1, P, P});
    hf_param(h, "masked_bias", DM_FLOAT, 0, NULL);
    bool fp32 = h->transformers < 445;
    if (fp32) {
        neox_rotary32(h, c, pos_ids, &cos, &sin);
    } else {
        size_t s = hf_enter(h, "rotary_emb");
        int64_t half = c->rot / 2;
        hf_param(h, "inv_freq", DM_FLOAT, 1, &half);
        hf_leave(h, s);
    }
    int32_t q, k;
    if (split_qkv(h, c, x, parts, &q, &k) < 0)
        return -1;
    h->out_name = hf_present_name(h, c, layer, "value");
    int32_t v = hf_transpose(h, parts[2], INTS(0, 2, 1, 3));
    const char *key = hf_present_name(h, c, layer, "key");
    if (fp32) {
        q = rope_cat32(h, q, cos, sin, c->rot, D, NULL);
        k = rope_cat32(h, k, cos, sin, c->rot, D, key);
    } else {
        q = hf_rope_cat(h, q, cos, sin, c->rot, D, NULL);
        k = hf_rope_cat(h, k, cos, sin, c->rot, D, key);
    }
    int32_t o, q16 = -1, k16 = -1;
    if (h->sdpa) {
        q16 = hf_op(h, DM_OP_CastLike, 2, q, v);
        k16 = hf_op(h, DM_OP_CastLike, 2, k, v);
        o = hf_sdpa_attention(h, (int32_t[]){q16, k16, v}, -1, true, H, H, D, D, c->scaling,
                              c->attn_drop);
        *pw = -1;
    } else {
        o = neox_attn_legacy(h, c, q, k, v, bias, seq, mask, fp32, pw);
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3));
    o = hf_reshape(h, o, INTS(0, 0, -1));
    fused_parts_out(h, c, layer, parts);
    o = hf_lin(h, "dense", o, E, E, c->bias);
    hf_hold_all(h, parts, 3, hf_last_node(h));
    hf_hold_qkv(h, q, k, v);
    hf_hold(h, q16, hf_last_node(h));
    hf_hold(h, k16, hf_last_node(h));
    hf_hold(h, *pw, hf_last_node(h)); /* attn_weights: forward's local */
    *pw = -1;
    return o;
}

/* PhiAttention (4.51): q, k, v projections viewed and transposed, partial
 * rotary through cat, dense. */
/* The rotated half that hf_rope_cat's Concat `y` joined (its first input). */
static int32_t phi_rotated(struct hf *h, int32_t y)
{
    if (h->st != DNNMEM_OK || y < 0)
        return -1;
    int32_t p = h->g->tensors[y].producer;
    return p >= 0 && h->g->nodes[p].op == DM_OP_Concat ? h->g->nodes[p].in[0] : -1;
}

static int32_t phi_attention(struct hf *h, const struct dec *c, int layer, int32_t x, int32_t cos,
                             int32_t sin, int32_t mask, int32_t *pw)
{
    int64_t E = c->hidden, H = c->heads, KV = c->kv_heads, D = c->head_dim;
    int32_t q = hf_lin(h, "q_proj", x, E, H * D, true);
    q = hf_transpose(h, hf_reshape(h, q, INTS(0, 0, -1, D)), INTS(0, 2, 1, 3));
    int32_t k = hf_lin(h, "k_proj", x, E, KV * D, true);
    k = hf_transpose(h, hf_reshape(h, k, INTS(0, 0, -1, D)), INTS(0, 2, 1, 3));
    int32_t v = hf_reshape(h, hf_lin(h, "v_proj", x, E, KV * D, true), INTS(0, 0, -1, D));
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "value"));
    v = hf_transpose(h, v, INTS(0, 2, 1, 3));
    int32_t q_states = q, k_states = k;
    q = hf_rope_cat(h, q, cos, sin, c->rot, D, NULL);
    int32_t q_rot = phi_rotated(h, q);
    k = hf_rope_cat(h, k, cos, sin, c->rot, D,
                    hf_cache_at_make(h, hf_present_name(h, c, layer, "key")));
    int32_t k_rot = phi_rotated(h, k);
    hf_dec_cache_update(h, c, layer, &k, &v);
    int32_t o = hf_dec_core(h, c, q, k, v, mask, c->scaling, pw);
    o = hf_lin(h, "dense", o, H * D, E, true);
    hf_hold_qkv(h, q, k, v);
    /* PhiAttention.forward's locals query_rot, query_pass, key_rot and
     * key_pass (modeling_phi.py 4.51.3, 4.56.2, 5.24.0) live until it
     * returns: the rotated halves, and through the pass views the q_proj
     * and k_proj outputs (measured: tiny-phi bf16 inference -3.3% / -3.6%
     * while they went at the cat, exactly 2 x 128 KiB + 2 x 64 KiB) */
    if (c->rot < D) {
        hf_hold(h, q_states, hf_last_node(h));
        hf_hold(h, k_states, hf_last_node(h));
        hf_hold(h, q_rot, hf_last_node(h));
        hf_hold(h, k_rot, hf_last_node(h));
    }
    return o;
}

/* Phi3Attention (4.51): qkv_proj(x) sliced [..., :H*D], then K*D, then K*D:
 * views of the fused output (held as for NeoX); rotary through cat. */
static int32_t phi3_attention(struct hf *h, const struct dec *c, int layer, int32_t x, int32_t cos,
                              int32_t sin, int32_t mask, int32_t *pw, int32_t parts[3])
{
    int64_t E = c->hidden, H = c->heads, KV = c->kv_heads, D = c->head_dim;
    int32_t qkv = hf_lin(h, "qkv_proj", x, E, (H + 2 * KV) * D, c->bias);
    struct dm_node *n =
        hf_node(h, DM_OP_Split, 2, (int32_t[]){qkv, hf_const_ints(h, INTS(H * D, KV * D, KV * D))},
                3);
    if (!n)
        return -1;
    hf_attr_i(h, "axis", 2);
    for (int j = 0; j < 3; j++)
        parts[j] = h->g->nodes[h->g->n_nodes - 1].out[j];
    int32_t q = hf_transpose(h, hf_reshape(h, parts[0], INTS(0, 0, -1, D)), INTS(0, 2, 1, 3));
    int32_t k = hf_transpose(h, hf_reshape(h, parts[1], INTS(0, 0, -1, D)), INTS(0, 2, 1, 3));
    int32_t v = hf_reshape(h, parts[2], INTS(0, 0, -1, D));
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "value"));
    v = hf_transpose(h, v, INTS(0, 2, 1, 3));
    q = hf_rope_cat(h, q, cos, sin, c->rot, D, NULL);
    k = hf_rope_cat(h, k, cos, sin, c->rot, D,
                    hf_cache_at_make(h, hf_present_name(h, c, layer, "key")));
    hf_dec_cache_update(h, c, layer, &k, &v);
    int32_t o = hf_dec_core(h, c, q, k, v, mask, c->scaling, pw);
    fused_parts_out(h, c, layer, parts);
    o = hf_lin(h, "o_proj", o, H * D, E, false);
    hf_hold_all(h, parts, 3, hf_last_node(h)); /* forward's local qkv, until it returns */
    hf_hold_qkv(h, q, k, v);
    return o;
}

/* Falcon's query_key_value and its split into q, k and v (parts): per head
 * ([B, S, H, 3D], the old architecture), or per group of the new one (KV
 * groups of H/KV queries, a key and a value) or of multi-query (one group);
 * with `view` the parts are views of the fused output (5.25's narrow()s and
 * unbind), else Split's outputs. The fused output, or -1. */
static int32_t falcon_qkv(struct hf *h, const struct dec *c, int32_t x, bool view, int32_t parts[3])
{
    int64_t E = c->hidden, H = c->heads, KV = c->kv_heads, D = c->head_dim;
    int64_t out = c->new_arch ? (H + 2 * KV) * D : c->multi_query ? E + 2 * D : 3 * E;
    bool per_head = !c->new_arch && !c->multi_query;
    int32_t qkv = hf_lin(h, "query_key_value", x, E, out, c->bias);
    int64_t g = c->new_arch ? KV : 1, per = per_head ? 1 : H / g;
    int32_t r = per_head ? hf_reshape(h, qkv, INTS(0, 0, H, 3 * D))
                         : hf_reshape(h, qkv, INTS(0, 0, g, per + 2, D));
    int32_t sp = per_head ? hf_const_ints(h, INTS(D, D, D)) : hf_const_ints(h, INTS(per, 1, 1));
    struct dm_node *n = hf_node(h, DM_OP_Split, 2, (int32_t[]){r, sp}, 3);
    if (!n)
        return -1;
    hf_attr_i(h, "axis", 3);
    if (view)
        hf_attr_i(h, "view", 1);
    for (int j = 0; j < 3; j++)
        parts[j] = h->g->nodes[h->g->n_nodes - 1].out[j];
    return qkv;
}

/* FalconAttention from 5.25 (modeling_falcon.py 5.25.0, moved onto the
 * attention interface; 5.24.0's _split_heads, own eager / sdpa code and
 * FalconFlashAttention2 are gone): fused_qkv = query_key_value(x).view(B, S,
 * -1, D); the new architecture's grouped view [B, S, KV, H/KV + 2, D] gives
 * the queries by flatten(-3, -2) (a copy: the groups are strided) and the key
 * and value as views [B, S, KV, D] (5.24 broadcast them to every head and
 * flattened them: copies); multi-query splits views [H, 1, 1] (5.24 indexed
 * k and v with [-2], [-1]); the others unflatten(-2, (H, 3)).unbind(-2),
 * views as before. transpose(1, 2), apply_rotary_pos_emb on q and k (in
 * their [B, S, H, D] memory order, as LlamaAttention's), the cache update,
 * then the shared eager_attention_forward (repeat_kv, scores * scaling, +
 * mask, float32 softmax cast back, dropout(attention_dropout), @ v; 5.24:
 * scores /= sqrt(D) in place and a softmax in the run's dtype) or
 * sdpa_attention_forward (FalconModel always passes a mask,
 * allow_is_causal_skip=False, so use_gqa_in_sdpa is false and repeat_kv
 * copies k and v to every head). attn_output.reshape(B, S, -1).contiguous()
 * (a view of the interface's contiguous output), dense. The eager
 * probabilities are returned as 5.24's were (the decoder layer's outputs). */
static int32_t falcon_attention_525(struct hf *h, const struct dec *c, int layer, int32_t x,
                                    int32_t cos, int32_t sin, int32_t mask, int32_t *pw,
                                    int32_t parts[3])
{
    int64_t E = c->hidden, H = c->heads, KV = c->kv_heads, D = c->head_dim;
    bool per_head = !c->new_arch && !c->multi_query;
    int64_t g = c->new_arch ? KV : 1;
    /* narrow()s, unbind: views of the fused output */
    int32_t qkv = falcon_qkv(h, c, x, true, parts);
    if (qkv < 0)
        return -1;
    int32_t q = parts[0], k = parts[1], v = parts[2];
    if (!per_head) {
        /* q: flatten(-3, -2), a copy of the strided groups (a view of the one
         * group of multi-query); k, v: the group's index, views */
        int32_t one = hf_const_ints(h, INTS(c->new_arch ? 3 : 2));
        q = g > 1 ? hf_reshape(h, q, INTS(0, 0, H, D)) : hf_op(h, DM_OP_Squeeze, 2, q, one);
        one = hf_const_ints(h, INTS(3));
        k = hf_op(h, DM_OP_Squeeze, 2, k, one);
        v = hf_op(h, DM_OP_Squeeze, 2, v, one);
    }
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "value"));
    v = hf_transpose(h, v, INTS(0, 2, 1, 3));
    int32_t q_states = q;
    q = hf_transpose(h, hf_rope(h, q, cos, sin, D, NULL), INTS(0, 2, 1, 3));
    k = hf_rope(h, k, cos, sin, D, NULL);
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "key"));
    k = hf_transpose(h, k, INTS(0, 2, 1, 3));
    /* the query copy goes when apply_rotary_pos_emb returns, after both */
    hf_hold(h, q_states, hf_last_node(h));
    int32_t k_embed = k, v_states = v;
    hf_dec_cache_update(h, c, layer, &k, &v);
    if (h->cache_copy && c->use_cache) { /* rebound when update returns, after both copies */
        hf_hold(h, k_embed, hf_last_node(h));
        hf_hold(h, v_states, hf_last_node(h));
    }
    struct dec cc = *c;
    cc.shared_core = true;
    cc.sdpa_views = false;
    /* F.scaled_dot_product_attention turns a bool mask into one of q's dtype
     * per call (convert_boolean_attn_mask, aten/src/ATen/native/transformers/
     * attention.cpp: where(mask.logical_not(), -inf, 0)), the tensor the
     * kernel gets and, in training, keeps for backward: one [B, 1, S, S] per
     * layer (measured: 5.25.0 tiny-falcon fp32 sdpa training, -0.70% while
     * the bool mask went to the kernel) */
    int32_t m = mask;
    if (h->sdpa && mask >= 0)
        m = hf_op(h, DM_OP_CastLike, 2, mask, q);
    int32_t o = hf_dec_core(h, &cc, q, k, v, m, 1.0 / sqrt((double)D), pw);
    if (per_head)
        fused_parts_out(h, c, layer, parts);
    o = hf_lin(h, "dense", o, E, E, c->bias);
    hf_hold(h, qkv, hf_last_node(h)); /* fused_qkv, a local until forward returns */
    hf_hold(h, *pw, hf_last_node(h));
    hf_hold_all(h, parts, 3, hf_last_node(h));
    hf_hold_qkv(h, q, k, v);
    return o;
}

/* FalconAttention (4.51-4.56): query_key_value, then _split_heads: per-head
 * q/k/v views of the fused output (which the cached value keeps alive, as
 * for NeoX), or multi-query (q a view, k and v indexed copies), or the
 * grouped new architecture (flatten copies of q and of k, v broadcast to
 * every head); .transpose(1, 2).reshape(B, H, S, D) is a view (the same
 * shape), so the rotary embedding runs on [B, S, H, D]-ordered tensors (see
 * llama_attention) and torch.matmul copies q, k and v. Scores / sqrt(D) in
 * place, softmax(scores + mask), no dropout, times v. */
static int32_t falcon_attention(struct hf *h, const struct dec *c, int layer, int32_t x,
                                int32_t cos, int32_t sin, int32_t mask, int32_t *pw,
                                int32_t parts[3])
{
    int64_t E = c->hidden, H = c->heads, D = c->head_dim;
    bool per_head = !c->new_arch && !c->multi_query;
    int32_t qkv = falcon_qkv(h, c, x, false, parts);
    if (qkv < 0)
        return -1;
    int64_t kvh = c->multi_query && !c->new_arch ? 1 : H;
    int32_t q = parts[0], k = parts[1], v = parts[2];
    if (!per_head) {
        q = hf_reshape(h, q, INTS(0, 0, H, D));
        if (c->new_arch) { /* broadcast_to(query.shape).flatten(2, 3): copies */
            int32_t sh = hf_op(h, DM_OP_Shape, 1, parts[0]);
            k = hf_op(h, DM_OP_Expand, 2, k, sh);
            v = hf_op(h, DM_OP_Expand, 2, v, sh);
        }
        k = hf_reshape(h, k, INTS(0, 0, kvh, D));
        v = hf_reshape(h, v, INTS(0, 0, kvh, D));
    }
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "value"));
    v = hf_transpose(h, v, INTS(0, 2, 1, 3));
    q = hf_transpose(h, hf_rope(h, q, cos, sin, D, NULL), INTS(0, 2, 1, 3));
    k = hf_rope(h, k, cos, sin, D, NULL);
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "key"));
    k = hf_transpose(h, k, INTS(0, 2, 1, 3));
    struct dec cc = *c;
    cc.kv_heads = kvh;
    cc.attn_drop = 0; /* no dropout on the rotary path's probabilities */
    /* FalconAttention hands its views to F.scaled_dot_product_attention as
     * they are, except on CUDA with an attention_mask, where 4.x copies them
     * (.contiguous(), "SDPA with memory-efficient backend is bugged with
     * non-contiguous inputs": modeling_falcon.py 4.51.3, 4.56.2; 5.24.0 has
     * no copy) */
    cc.sdpa_views = h->cpu || mask < 0 || h->transformers >= 500;
    hf_dec_cache_update(h, c, layer, &k, &v);
    int32_t o = hf_dec_core(h, &cc, q, k, v, mask, 1.0 / sqrt((double)D), pw);
    if (per_head) /* views of the fused output, as GPT-NeoX's */
        fused_parts_out(h, c, layer, parts);
    o = hf_lin(h, "dense", o, E, E, c->bias);
    /* forward's locals live until it returns: fused_qkv, the query, key and
     * value layers, and attention_scores (the probabilities): 4.51's
     * FalconAttention returns (attn_output, layer_past), the scores only
     * with output_attentions, so the decoder layer does not keep them */
    hf_hold(h, qkv, hf_last_node(h));
    hf_hold(h, *pw, hf_last_node(h));
    /* from 4.54 the rotary branch returns (attn_output, attention_scores)
     * whatever output_attentions says (modeling_falcon.py 4.54.1, 4.55.4,
     * 4.56.2; 4.53.3 returned them only with it), FalconDecoderLayer returns
     * them and FalconModel's loop variable `outputs` keeps layer i's until
     * layer i + 1 returns (build_neox): measured 4.56.2 / 5.24.0 tiny-falcon
     * inference -7.7% / -8.2% while they went with the attention */
    if (h->transformers < 454)
        *pw = -1;
    if (per_head)
        hf_hold_all(h, parts, 3, hf_last_node(h));
    else /* copied out of the fused output: nothing else keeps the parts */
        parts[0] = parts[1] = parts[2] = -1;
    hf_hold_qkv(h, q, k, v);
    return o;
}

/* The rotary-embedding models with LayerNorm or RMSNorm: GPTNeoXForCausalLM,
 * FalconForCausalLM, PhiForCausalLM, Phi3ForCausalLM. */
static int32_t build_rotary_lm(struct hf *h, const struct dec *c, int32_t ids)
{
    enum dec_kind k = c->kind;
    int64_t E = c->hidden;
    const char *top_name = k == DK_NEOX ? "gpt_neox" : k == DK_FALCON ? "transformer" : "model";
    size_t top = hf_enter(h, "%s", top_name);
    size_t s = hf_enter(h, "%s", k == DK_NEOX ? "embed_in" : k == DK_FALCON ? "word_embeddings"
                                                                        : "embed_tokens");
    int32_t emb_w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, E});
    int32_t x = hf_op(h, DM_OP_Gather, 2, emb_w, ids);
    int32_t emb = x;
    hf_leave(h, s);
    s = hf_enter(h, "%s", k == DK_NEOX ? "emb_dropout" : "embed_dropout");
    x = hf_dropout(h, x, c->emb_drop);
    hf_leave(h, s);
    int32_t seq, pos, pos_ids;
    hf_dec_positions(h, ids, &seq, &pos, &pos_ids);
    /* GPT-NeoX before 4.49 (neox_attention_legacy): 4.40-4.44 rotate in each
     * layer and mask with the layers' bool buffers alone (no attention_mask
     * given); 4.45-4.48 add the model's causal mask in eager */
    bool legacy = k == DK_NEOX && h->transformers < 449;
    bool layer_rope = legacy && h->transformers < 445;
    /* FalconModel's create_causal_mask(allow_is_causal_skip=False) always
     * makes the mask; from 5.25 sdpa_attention_forward hands it to the kernel
     * (not is_causal, no enable_gqa: falcon_attention_525) */
    bool falcon_sdpa_mask = k == DK_FALCON && h->sdpa && h->transformers >= 525;
    /* 5.24 and 5.25's FalconModel: create_causal_mask (masking_utils.py),
     * a [B, 1, S, S] mask: eager_mask's float one of the run's dtype, or
     * sdpa_mask's bool one (hf_dec_causal_mask_batch) */
    bool falcon_batch_mask = k == DK_FALCON && h->transformers >= 524;
    int32_t mask = (h->sdpa && !falcon_sdpa_mask) || layer_rope ? -1
                   : falcon_batch_mask ? hf_dec_causal_mask_batch(h, ids, seq, "causal_mask")
                                       : hf_dec_causal_mask(h, seq, "causal_mask");
    if (falcon_sdpa_mask) {
        mask = hf_op(h, DM_OP_Cast, 1, mask);
        hf_attr_i(h, "to", DM_BOOL);
    }
    int32_t cos = -1, sin = -1;
    /* Falcon rotates q, k in [B, S, H, D] order, the others through cat */
    if (!layer_rope)
        hf_dec_rotary(h, "rotary_emb", c->rot, c->theta, c->rope_factor, pos_ids,
                      k == DK_FALCON ? 2 : 1, "position_embeddings", &cos, &sin);
    int32_t *held = calloc((size_t)c->layers * 3, sizeof *held);
    if (!held)
        return hf_oom(h);
    for (int64_t i = 0; i < c->layers * 3; i++)
        held[i] = -1;
    int32_t prev_w = -1; /* Falcon 4.54+: the previous layer's returned scores */
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "%s.%d", k == DK_FALCON ? "h" : "layers", i);
        int32_t residual = x, w = -1, a, y, m;
        int32_t *parts = &held[3 * i];
        if (k == DK_NEOX) {
            y = hf_ln(h, "input_layernorm", x, E, c->eps);
            s = hf_enter(h, "attention");
            a = legacy ? neox_attention_legacy(h, c, i, y, cos, sin, mask, seq, pos_ids, &w, parts)
                       : neox_attention(h, c, i, y, cos, sin, mask, &w, parts);
            hf_leave(h, s);
            a = hf_dropout(h, a, c->drop); /* post_attention_dropout */
            if (!c->parallel)
                a = hf_op(h, DM_OP_Add, 2, a, x);
            m = hf_ln(h, "post_attention_layernorm", c->parallel ? x : a, E, c->eps);
            s = hf_enter(h, "mlp");
            m = hf_lin(h, "dense_h_to_4h", m, E, c->inter, true);
            m = hf_dec_act(h, c->act, m);
            m = hf_lin(h, "dense_4h_to_h", m, c->inter, E, true);
            hf_leave(h, s);
            m = hf_dropout(h, m, c->drop); /* post_mlp_dropout */
            if (c->parallel) {
                x = hf_op(h, DM_OP_Add, 2, m, a); /* mlp_output + attn_output + hidden_states */
                x = hf_op(h, DM_OP_Add, 2, x, residual);
            } else {
                x = hf_op(h, DM_OP_Add, 2, m, a);
            }
        } else if (k == DK_FALCON) {
            int32_t ma = -1;
            if (c->new_arch && c->two_ln) {
                y = hf_ln(h, "ln_attn", x, E, c->eps);
                ma = hf_ln(h, "ln_mlp", x, E, c->eps);
            } else {
                y = hf_ln(h, "input_layernorm", x, E, c->eps);
            }
            s = hf_enter(h, "self_attention");
            a = h->transformers >= 525
                    ? falcon_attention_525(h, c, i, y, cos, sin, mask, &w, parts)
                    : falcon_attention(h, c, i, y, cos, sin, mask, &w, parts);
            hf_leave(h, s);
            if (!c->new_arch && !c->parallel) {
                residual = hf_op(h, DM_OP_Add, 2, x, hf_dropout(h, a, c->attn_drop));
                ma = hf_ln(h, "post_attention_layernorm", residual, E, c->eps);
            } else if (ma < 0) {
                ma = y;
            }
            s = hf_enter(h, "mlp");
            m = hf_lin(h, "dense_h_to_4h", ma, E, c->inter, c->bias);
            m = hf_dec_act(h, c->act, m);
            m = hf_lin(h, "dense_4h_to_h", m, c->inter, E, c->bias);
            hf_leave(h, s);
            if (c->new_arch || c->parallel) /* mlp_output += attention_output: in place */
                m = hf_op(h, DM_OP_Add, 2, m, a);
            m = hf_dropout(h, m, c->drop);
            x = hf_op(h, DM_OP_Add, 2, m, residual); /* dropout_add */
            hf_hold(h, y, hf_last_node(h));
        } else if (k == DK_PHI) {
            y = hf_ln(h, "input_layernorm", x, E, c->eps);
            s = hf_enter(h, "self_attn");
            a = phi_attention(h, c, i, y, cos, sin, mask, &w);
            hf_leave(h, s);
            a = hf_dropout(h, a, c->drop); /* resid_dropout */
            s = hf_enter(h, "mlp");
            m = hf_lin(h, "fc1", y, E, c->inter, true);
            m = hf_dec_act(h, c->act, m);
            m = hf_lin(h, "fc2", m, c->inter, E, true);
            hf_leave(h, s);
            m = hf_dropout(h, m, c->drop);
            x = hf_op(h, DM_OP_Add, 2, a, m); /* attn_outputs + feed_forward + residual */
            x = hf_op(h, DM_OP_Add, 2, x, residual);
        } else { /* Phi-3 */
            s = hf_enter(h, "input_layernorm");
            y = hf_rms_norm(h, x, E, c->eps);
            hf_leave(h, s);
            s = hf_enter(h, "self_attn");
            a = phi3_attention(h, c, i, y, cos, sin, mask, &w, parts);
            hf_leave(h, s);
            a = hf_dropout(h, a, c->drop); /* resid_attn_dropout */
            x = hf_op(h, DM_OP_Add, 2, residual, a);
            residual = x;
            s = hf_enter(h, "post_attention_layernorm");
            y = hf_rms_norm(h, x, E, c->eps);
            hf_leave(h, s);
            s = hf_enter(h, "mlp");
            int32_t gu = hf_lin(h, "gate_up_proj", y, E, 2 * c->inter, false);
            struct dm_node *n = hf_node(h, DM_OP_Split, 2,
                                        (int32_t[]){gu, hf_const_ints(h, INTS(c->inter,
                                                                              c->inter))}, 2);
            if (!n)
                break;
            hf_attr_i(h, "axis", -1);
            int32_t gate = h->g->nodes[h->g->n_nodes - 1].out[0];
            int32_t up = h->g->nodes[h->g->n_nodes - 1].out[1];
            size_t t = hf_enter(h, "activation_fn");
            gate = hf_op(h, DM_OP_Silu, 1, gate);
            hf_leave(h, t);
            m = hf_op(h, DM_OP_Mul, 2, up, gate);
            m = hf_lin(h, "down_proj", m, c->inter, E, false);
            hf_leave(h, s);
            m = hf_dropout(h, m, c->drop); /* resid_mlp_dropout */
            x = hf_op(h, DM_OP_Add, 2, residual, m);
        }
        hf_hold(h, w, hf_last_node(h));
        if (k == DK_FALCON && h->transformers >= 454) {
            hf_hold(h, prev_w, hf_last_node(h));
            prev_w = w;
        }
        hf_leave(h, ls);
    }
    if (k == DK_PHI3) {
        s = hf_enter(h, "norm");
        x = hf_rms_norm(h, x, E, c->eps);
        hf_leave(h, s);
    } else {
        x = hf_ln(h,
                  k == DK_NEOX ? "final_layer_norm" : k == DK_FALCON ? "ln_f" : "final_layernorm",
                  x, E, c->eps);
    }
    hf_hold(h, emb, hf_last_node(h));
    hf_hold(h, pos, hf_last_node(h));
    hf_hold(h, mask, hf_last_node(h));
    hf_hold(h, cos, hf_last_node(h));
    hf_hold(h, sin, hf_last_node(h));
    hf_leave(h, top);
    x = hf_dec_head(h, c, k == DK_NEOX ? "embed_out" : "lm_head", x, E, emb_w);
    free(held);
    return x;
}

static void read_neox(struct hf *h, struct dec *c)
{
    c->kind = DK_NEOX;
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", REQUIRED, MAX_SIZE);
    c->inter = hf_get_int(h, "intermediate_size", REQUIRED, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", REQUIRED, MAX_LAYERS);
    hf_dec_heads(h, c, "num_attention_heads", NULL);
    c->head_dim = h->st == DNNMEM_OK ? c->hidden / c->heads : 2;
    double pct = hf_get_num(h, "rotary_pct", 0.25, 0, 1);
    c->rot = (int64_t)((double)c->head_dim * pct);
    c->theta = hf_get_num(h, "rotary_emb_base", hf_get_num(h, "rope_theta", 10000.0, 1e-30, 1e30),
                          1e-30,
                          1e30);
    c->rope_factor = hf_dec_rope_scaling(h, false);
    c->act = hf_get_str(h, "hidden_act", "gelu");
    hf_dec_check_act(h, "hidden_act", c->act, false);
    c->eps = hf_get_num(h, "layer_norm_eps", 1e-5, 0, 1);
    c->attn_drop = hf_get_num(h, "attention_dropout", 0.0, 0, 1);
    c->drop = hf_get_num(h, "hidden_dropout", 0.0, 0, 1);
    c->emb_drop = c->drop;
    c->bias = hf_get_bool(h, "attention_bias", true);
    c->parallel = hf_get_bool(h, "use_parallel_residual", true);
    c->tie = hf_get_bool(h, "tie_word_embeddings", false);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    c->scaling = 1.0 / sqrt((double)c->head_dim);
    /* GPTNeoXConfig's default; before 4.49 each layer's buffers are this long */
    c->positions = hf_get_int(h, "max_position_embeddings", 2048, MAX_SIZE);
    if (h->st == DNNMEM_OK && (c->rot < 2 || c->rot % 2))
        hf_fail(h, DNNMEM_E_MODEL, "config field 'rotary_pct' gives %lld rotary dims; not even",
                (long long)c->rot);
    /* generate() before 4.49: 4.40-4.44's tuple cache and 4.45-4.48's
     * DynamicCache with GPT-NeoX's own masks, not measured */
    if (h->st == DNNMEM_OK && h->gen_tokens > 0 && h->transformers < 449)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "--mode generate with transformers %d.%d's GPT-NeoX is not modelled (from "
                "4.49)",
                h->transformers / 100, h->transformers % 100);
    /* GPTNeoXSdpaAttention came with 4.42 (before: eager, _supports_sdpa false) */
    h->g->sdpa_since = 442;
    if (h->st == DNNMEM_OK && h->sdpa && h->transformers < 442)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "--attn sdpa: transformers %d.%d's GPT-NeoX has no sdpa attention (from 4.42); "
                "use --attn eager",
                h->transformers / 100, h->transformers % 100);
}

static void read_falcon(struct hf *h, struct dec *c)
{
    c->kind = DK_FALCON;
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", REQUIRED, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", REQUIRED, MAX_LAYERS);
    c->new_arch = hf_get_bool(h, "new_decoder_architecture", false);
    c->multi_query = hf_get_bool(h, "multi_query", true);
    hf_dec_heads(h, c, "num_attention_heads", c->new_arch ? "num_kv_heads" : NULL);
    c->kv_heads = c->new_arch ? c->kv_heads : c->multi_query ? 1 : c->heads;
    c->head_dim = hf_get_int(h, "head_dim", h->st == DNNMEM_OK ? c->hidden / c->heads : 2,
                             MAX_SIZE);
    c->inter = hf_get_int(h, "ffn_hidden_size", 4 * c->hidden, MAX_SIZE);
    c->rot = c->head_dim;
    c->theta = hf_get_num(h, "rope_theta", 10000.0, 1e-30, 1e30);
    c->rope_factor = hf_dec_rope_scaling(h, false);
    c->act = hf_get_str(h, "activation", "gelu");
    hf_dec_check_act(h, "activation", c->act, false);
    c->eps = hf_get_num(h, "layer_norm_epsilon", 1e-5, 0, 1);
    c->attn_drop = hf_get_num(h, "attention_dropout", 0.0, 0, 1);
    c->drop = hf_get_num(h, "hidden_dropout", 0.0, 0, 1);
    c->bias = hf_get_bool(h, "bias", false);
    c->parallel = hf_get_bool(h, "parallel_attn", true);
    c->two_ln = hf_get_int(h, "num_ln_in_parallel_attn", 2, 2) == 2;
    c->tie = hf_get_bool(h, "tie_word_embeddings", true);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    if (hf_get_bool(h, "alibi", false))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'alibi' is true; only rotary Falcon is modelled");
    if (h->st == DNNMEM_OK && c->head_dim % 2)
        hf_fail(h, DNNMEM_E_MODEL, "config field 'head_dim' (%lld) must be even",
                (long long)c->head_dim);
    if (h->st == DNNMEM_OK && !c->new_arch && c->head_dim * c->heads != c->hidden)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'head_dim' must be hidden_size / num_attention_heads");
}

static void read_phi(struct hf *h, bool phi3, struct dec *c)
{
    c->kind = phi3 ? DK_PHI3 : DK_PHI;
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", REQUIRED, MAX_SIZE);
    c->inter = hf_get_int(h, "intermediate_size", REQUIRED, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", REQUIRED, MAX_LAYERS);
    hf_dec_heads(h, c, "num_attention_heads", "num_key_value_heads");
    c->head_dim = h->st == DNNMEM_OK ? c->hidden / c->heads : 2;
    double pf = hf_get_num(h, "partial_rotary_factor", phi3 ? 1.0 : 0.5, 0, 1);
    c->rot = (int64_t)((double)c->head_dim * pf);
    c->theta = hf_get_num(h, "rope_theta", 10000.0, 1e-30, 1e30);
    c->rope_factor = hf_dec_rope_scaling(h, false);
    c->act = hf_get_str(h, "hidden_act", phi3 ? "silu" : "gelu_new");
    if (phi3 && h->st == DNNMEM_OK && strcmp(c->act, "silu") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'hidden_act' is '%s'; only silu is modelled for phi3",
                c->act);
    if (!phi3)
        hf_dec_check_act(h, "hidden_act", c->act, true);
    c->eps = hf_get_num(h, phi3 ? "rms_norm_eps" : "layer_norm_eps", 1e-5, 0, 1);
    c->attn_drop = hf_get_num(h, "attention_dropout", 0.0, 0, 1);
    c->drop = hf_get_num(h, "resid_pdrop", phi3 ? 0.0 : 0.0, 0, 1);
    c->emb_drop = phi3 ? 0 : hf_get_num(h, "embd_pdrop", 0.0, 0, 1);
    c->tie = hf_get_bool(h, "tie_word_embeddings", false);
    c->head_bias = !phi3;
    c->use_cache = hf_get_bool(h, "use_cache", true);
    c->scaling = 1.0 / sqrt((double)c->head_dim);
    if (!phi3 && hf_get_bool(h, "qk_layernorm", false))
        hf_fail(h, DNNMEM_E_UNSUPPORTED, "config field 'qk_layernorm' is true; not modelled");
    if (h->st == DNNMEM_OK && (c->rot < 2 || c->rot % 2))
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'partial_rotary_factor' gives %lld rotary dims; not even",
                (long long)c->rot);
}

enum dnnmem_status hf_neox(struct hf *h, const char *type)
{
    struct dec c = {.type = type, .rope_factor = 1.0};
    if (strcmp(type, "gpt_neox") == 0)
        read_neox(h, &c);
    else if (strcmp(type, "falcon") == 0)
        read_falcon(h, &c);
    else
        read_phi(h, strcmp(type, "phi3") == 0, &c);
    return hf_dec_lm(h, type, &c, build_rotary_lm);
}
