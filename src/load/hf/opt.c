/*
 * opt.c (src/load/hf/): OPT and BioGPT.
 */
#include "hf.h"

/* OPTAttention: q_proj(x) * scaling, k, v viewed and transposed (the
 * presents), eager_attention_forward(scaling=1.0); BioGptAttention (BART's,
 * 4.52+): q not pre-scaled, the scores times head_dim**-0.5. */
static int32_t opt_attention(struct hf *h, const struct dec *c, int layer, int32_t x, int32_t mask,
                             int32_t *pw)
{
    int64_t E = c->hidden, H = c->heads, D = c->head_dim;
    bool opt = c->kind == DK_OPT;
    int32_t q = hf_lin(h, "q_proj", x, E, E, c->bias);
    if (opt)
        q = hf_op(h, DM_OP_Mul, 2, q, hf_const_f(h, c->scaling));
    q = hf_transpose(h, hf_reshape(h, q, INTS(0, 0, H, D)), INTS(0, 2, 1, 3));
    int32_t k = hf_reshape(h, hf_lin(h, "k_proj", x, E, E, c->bias), INTS(0, 0, H, D));
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "key"));
    k = hf_transpose(h, k, INTS(0, 2, 1, 3));
    int32_t v = hf_reshape(h, hf_lin(h, "v_proj", x, E, E, c->bias), INTS(0, 0, H, D));
    h->out_name = hf_cache_at_make(h, hf_present_name(h, c, layer, "value"));
    v = hf_transpose(h, v, INTS(0, 2, 1, 3));
    hf_dec_cache_update(h, c, layer, &k, &v);
    /* 4.49-4.51's OPTSdpaAttention hands the transposed views to
     * F.scaled_dot_product_attention as they are (modeling_opt.py 4.49.0,
     * 4.51.3; measured 4.51.3 on the CPU: no clone before the kernel) */
    struct dec cc = *c;
    cc.sdpa_views = opt && h->transformers < 452;
    int32_t o = hf_dec_core(h, &cc, q, k, v, mask, opt ? 1.0 : c->scaling, pw);
    o = hf_lin(h, "out_proj", o, E, E, c->bias);
    hf_hold_qkv(h, q, k, v);
    /* 4.51's BioGptAttention returns attn_weights only with
     * output_attentions: the probabilities go when it returns; so does
     * 4.52-4.57's OPTAttention ("if not output_attentions: attn_weights =
     * None", modeling_opt.py 4.52.4-4.56.2; 4.51.3's returned attn_probs,
     * 5.x's layer keeps them in `_`): measured 4.56.2 tiny-opt fp32
     * inference +5.4% while the layer held them */
    if (!opt || (h->transformers >= 452 && h->transformers < 500)) {
        hf_hold(h, *pw, hf_last_node(h));
        *pw = -1;
    }
    return o;
}

/* OPTAttention / OPTSdpaAttention of transformers 4.40-4.48 (modeling_opt.py
 * 4.46.3): q_proj(x) * scaling, and q, k, v through _shape:
 * .view(B, S, H, D).transpose(1, 2).contiguous(), copies (k's and v's are
 * the presents, the tuple past_key_value). eager: bmm(q, k^T) on their
 * [B * H, S, D] views; + the [B, 1, S, S] mask (OPTDecoder always makes one);
 * torch.max(scores, finfo.min), whose backward keeps its input; softmax
 * (dim=-1, dtype=float32).to(float16) when the scores are float16, else
 * softmax in their dtype; dropout; bmm with v; attn_weights returned only
 * with output_attentions (a local until forward returns). sdpa (4.46+):
 * no mask (_prepare_4d_causal_attention_mask_for_sdpa drops the all-ones
 * one), is_causal, scale=1.0; its output's .transpose(1, 2).contiguous(). */
static int32_t opt_attention_legacy(struct hf *h, const struct dec *c, int layer, int32_t x,
                                    int32_t mask, int32_t *pw)
{
    int64_t E = c->hidden, H = c->heads, D = c->head_dim;
    int32_t q = hf_op(h, DM_OP_Mul, 2, hf_lin(h, "q_proj", x, E, E, c->bias),
                      hf_const_f(h, c->scaling));
    int32_t kv[2];
    for (int j = 0; j < 2; j++) {
        int32_t t = hf_lin(h, j ? "v_proj" : "k_proj", x, E, E, c->bias);
        t = hf_transpose(h, hf_reshape(h, t, INTS(0, 0, H, D)), INTS(0, 2, 1, 3));
        int32_t shape = hf_const_ints(h, INTS(0, H, -1, D));
        h->out_name = hf_present_name(h, c, layer, j ? "value" : "key");
        kv[j] = hf_op(h, DM_OP_Reshape, 2, t, shape); /* .contiguous() */
    }
    q = hf_transpose(h, hf_reshape(h, q, INTS(0, 0, H, D)), INTS(0, 2, 1, 3));
    q = hf_reshape(h, q, INTS(0, H, -1, D));
    int32_t o, p = -1;
    if (h->sdpa) {
        o = hf_sdpa_attention(h, (int32_t[]){q, kv[0], kv[1]}, -1, true, H, H, D, D, 1.0,
                              c->attn_drop);
    } else {
        int32_t s = hf_op(h, DM_OP_MatMul, 2, q, hf_transpose(h, kv[0], INTS(0, 1, 3, 2)));
        s = hf_op(h, DM_OP_Add, 2, s, mask);
        s = hf_op(h, DM_OP_Max, 2, s, hf_const_f(h, -FLT_MAX));
        if (h->half && !h->bf16) {
            p = hf_softmax_f32(h, s, q);
        } else {
            p = hf_op(h, DM_OP_Softmax, 1, s);
            hf_attr_i(h, "axis", -1);
        }
        p = hf_dropout(h, p, c->attn_drop);
        o = hf_op(h, DM_OP_MatMul, 2, p, kv[1]);
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3));
    o = hf_reshape(h, o, INTS(0, 0, -1));
    o = hf_lin(h, "out_proj", o, E, E, c->bias);
    hf_hold_qkv(h, q, kv[0], kv[1]);
    hf_hold(h, p, hf_last_node(h));
    *pw = -1;
    return o;
}

/* OPTForCausalLM / BioGptForCausalLM. */
static int32_t build_opt(struct hf *h, const struct dec *c, int32_t ids)
{
    bool opt = c->kind == DK_OPT;
    int64_t E = c->hidden, W = c->word_dim;
    size_t top = hf_enter(h, opt ? "model" : "biogpt");
    size_t dec = opt ? hf_enter(h, "decoder") : h->scope_len;
    size_t s = hf_enter(h, "embed_tokens");
    int32_t emb_w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, W});
    int32_t x = hf_op(h, DM_OP_Gather, 2, emb_w, ids);
    if (c->scale_emb) /* BioGptScaledWordEmbedding: embedding * sqrt(hidden) */
        x = hf_op(h, DM_OP_Mul, 2, x, hf_const_f(h, sqrt((double)E)));
    hf_leave(h, s);
    int32_t emb = x;
    /* attention_mask = torch.ones(B, S) (float32); the positions are
     * (cumsum(mask, 1) * mask - 1).long(), the embedding reads them + 2 */
    int32_t shape = hf_op(h, DM_OP_Shape, 1, ids);
    int32_t am = hf_dec_fill(h, shape, DM_FLOAT, 1.0);
    int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t mask = -1;
    if (!h->sdpa) {
        /* _prepare_4d_causal_attention_mask_with_cache_position with the 2-D
         * mask: triu(full((S, S), min), 1) expanded to [B, 1, S, S] and
         * cloned, padding = clone + mask[:, None, None, :] == 0, the clone
         * masked_fill'ed (a new tensor copied back into it): [B, 1, S, S] */
        int32_t tri = hf_dec_causal_mask(h, seq, NULL);
        int32_t bsz = hf_op(h, DM_OP_Shape, 1, ids);
        hf_attr_i(h, "start", 0);
        hf_attr_i(h, "end", 1);
        int32_t full = hf_op(h, DM_OP_Concat, 4, bsz, hf_const_ints(h, INTS(1)), seq, seq);
        hf_attr_i(h, "axis", 0);
        int32_t cl = hf_op(h, DM_OP_Expand, 2, tri, full);
        int32_t pad = hf_op(h, DM_OP_Add, 2, cl, hf_unsqueeze(h, am, INTS(1, 2)));
        int32_t eq = hf_op(h, DM_OP_Equal, 2, pad, hf_const_f(h, 0.0));
        int32_t mn = hf_const_f(h, -FLT_MAX);
        h->out_name = "causal_mask";
        mask = hf_op(h, DM_OP_Where, 3, eq, mn, cl);
    }
    int32_t cs = hf_op(h, DM_OP_CumSum, 2, am, hf_const_i(h, 1));
    int32_t pid = hf_op(h, DM_OP_Mul, 2, cs, am);
    pid = hf_op(h, DM_OP_Sub, 2, pid, hf_const_f(h, 1.0));
    pid = hf_op(h, DM_OP_Cast, 1, pid);
    hf_attr_i(h, "to", DM_INT64);
    s = hf_enter(h, "embed_positions");
    int32_t pw = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->positions + 2, E});
    int32_t p2 = hf_op(h, DM_OP_Add, 2, pid, hf_const_i(h, 2));
    int32_t pe = hf_op(h, DM_OP_Gather, 2, pw, p2);
    hf_leave(h, s);
    if (opt && W != E) /* inputs_embeds = project_in(inputs_embeds): the raw lookup is freed */
        emb = x = hf_lin(h, "project_in", x, W, E, false);
    x = hf_op(h, DM_OP_Add, 2, x, pe);
    x = hf_dropout(h, x, c->emb_drop);
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layers.%d", i);
        int32_t residual = x, y = x, w = -1;
        if (c->pre_norm)
            y = hf_ln(h, "self_attn_layer_norm", x, E, c->eps);
        s = hf_enter(h, "self_attn");
        y = opt && h->transformers < 449 ? opt_attention_legacy(h, c, i, y, mask, &w)
                                         : opt_attention(h, c, i, y, mask, &w);
        hf_leave(h, s);
        y = hf_dropout(h, y, c->drop);
        x = hf_op(h, DM_OP_Add, 2, residual, y);
        if (!c->pre_norm)
            x = hf_ln(h, "self_attn_layer_norm", x, E, c->eps);
        residual = x;
        y = c->pre_norm ? hf_ln(h, "final_layer_norm", x, E, c->eps) : x;
        y = hf_lin(h, "fc1", y, E, c->inter, c->bias);
        y = hf_dec_act(h, c->act, y);
        y = hf_lin(h, "fc2", y, c->inter, E, c->bias);
        y = hf_dropout(h, y, c->drop);
        x = hf_op(h, DM_OP_Add, 2, residual, y);
        if (!c->pre_norm)
            x = hf_ln(h, "final_layer_norm", x, E, c->eps);
        hf_hold(h, w, hf_last_node(h));
        hf_leave(h, ls);
    }
    if (c->pre_norm || !opt)
        x = hf_ln(h, opt ? "final_layer_norm" : "layer_norm", x, E, c->eps);
    if (opt && W != E)
        x = hf_lin(h, "project_out", x, E, W, false);
    /* the decoder's locals live until it returns */
    hf_hold(h, emb, hf_last_node(h));
    hf_hold(h, am, hf_last_node(h));
    hf_hold(h, mask, hf_last_node(h));
    hf_hold(h, pe, hf_last_node(h));
    hf_leave(h, dec);
    hf_leave(h, top);
    return hf_dec_head(h, c, opt ? "lm_head" : "output_projection", x, W, emb_w);
}

static void read_opt(struct hf *h, bool opt, struct dec *c)
{
    c->kind = opt ? DK_OPT : DK_BIOGPT;
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", REQUIRED, MAX_SIZE);
    c->inter = hf_get_int(h, opt ? "ffn_dim" : "intermediate_size", REQUIRED, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", REQUIRED, MAX_LAYERS);
    hf_dec_heads(h, c, "num_attention_heads", NULL);
    c->head_dim = h->st == DNNMEM_OK ? c->hidden / c->heads : 1;
    c->positions = hf_get_int(h, "max_position_embeddings", REQUIRED, MAX_SIZE);
    c->word_dim = opt ? hf_get_int(h, "word_embed_proj_dim", c->hidden, MAX_SIZE) : c->hidden;
    c->act = hf_get_str(h, opt ? "activation_function" : "hidden_act", opt ? "relu" : "gelu");
    hf_dec_check_act(h, opt ? "activation_function" : "hidden_act", c->act, true);
    c->eps = opt ? 1e-5 : hf_get_num(h, "layer_norm_eps", 1e-12, 0, 1);
    c->attn_drop = hf_get_num(h, opt ? "attention_dropout" : "attention_probs_dropout_prob",
                              opt ? 0.0 : 0.1, 0, 1);
    c->drop = hf_get_num(h, opt ? "dropout" : "hidden_dropout_prob", 0.1, 0, 1);
    c->emb_drop = opt ? 0 : c->drop;
    c->bias = !opt || hf_get_bool(h, "enable_bias", true);
    c->pre_norm = !opt || hf_get_bool(h, "do_layer_norm_before", true);
    c->scale_emb = !opt && hf_get_bool(h, "scale_embedding", true);
    c->scaling = 1.0 / sqrt((double)c->head_dim);
    c->tie = hf_get_bool(h, "tie_word_embeddings", true);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    if (h->st == DNNMEM_OK && hf_get_num(h, "activation_dropout", 0.0, 0, 1) > 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'activation_dropout' is non-zero; not modelled");
    if (opt && !hf_get_bool(h, "layer_norm_elementwise_affine", true))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'layer_norm_elementwise_affine' is false; not modelled");
    if (opt && hf_get_bool(h, "_remove_final_layer_norm", false))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field '_remove_final_layer_norm' is true; not modelled");
    if (h->st == DNNMEM_OK && c->word_dim != c->hidden && !c->tie)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'tie_word_embeddings' is false; not modelled");
}

enum dnnmem_status hf_opt(struct hf *h, const char *type)
{
    struct dec c = {.type = type, .rope_factor = 1.0};
    bool opt = strcmp(type, "opt") == 0;
    read_opt(h, opt, &c);
    /* OPTSdpaAttention came with 4.46 (before: eager, _supports_sdpa false) */
    if (opt)
        h->g->sdpa_since = 446;
    if (opt && h->st == DNNMEM_OK && h->sdpa && h->transformers < 446)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "--attn sdpa: transformers %d.%d's OPT has no sdpa attention (from 4.46); use "
                "--attn eager",
                h->transformers / 100, h->transformers % 100);
    return hf_dec_lm(h, type, &c, build_opt);
}
