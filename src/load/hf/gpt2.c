/*
 * gpt2.c (src/load/hf/): GPT-2.
 */
#include "hf.h"

struct gpt2 {
    int64_t vocab, embd, layers, heads, positions, inner;
    double eps, attn_drop, resid_drop, embd_drop;
    const char *act;
    bool tie, scale, scale_by_layer, use_cache;
};

/* The MLP activation as ACT2FN runs it. gelu_new (NewGELUActivation) is
 *   0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3.0))))
 * in that evaluation order, eight elementwise ops; gelu and
 * gelu_pytorch_tanh are one F.gelu. */
int32_t hf_gpt2_act(struct hf *h, const char *act, int32_t x)
{
    if (strcmp(act, "gelu_new") == 0) {
        int32_t c05 = hf_const_f(h, 0.5);
        int32_t t1 = hf_op(h, DM_OP_Mul, 2, x, c05);
        int32_t c3 = hf_const_f(h, 3.0);
        int32_t p = hf_op(h, DM_OP_Pow, 2, x, c3);
        int32_t ck = hf_const_f(h, 0.044715);
        int32_t t2 = hf_op(h, DM_OP_Mul, 2, p, ck);
        int32_t t3 = hf_op(h, DM_OP_Add, 2, x, t2);
        int32_t cs = hf_const_f(h, sqrt(2.0 / PI));
        int32_t t4 = hf_op(h, DM_OP_Mul, 2, t3, cs);
        int32_t t5 = hf_op(h, DM_OP_Tanh, 1, t4);
        int32_t c1 = hf_const_f(h, 1.0);
        int32_t t6 = hf_op(h, DM_OP_Add, 2, t5, c1);
        return hf_op(h, DM_OP_Mul, 2, t1, t6);
    }
    int32_t y = hf_op(h, DM_OP_Gelu, 1, x);
    if (strcmp(act, "gelu_pytorch_tanh") == 0)
        hf_attr_s(h, "approximate", "tanh");
    return y;
}

/* GPT2Attention.forward with _attn (eager). */
static int32_t gpt2_attention(struct hf *h, const struct gpt2 *c, int layer, int32_t x,
                              int32_t ss, int32_t mask, int32_t *probs)
{
    struct dm_graph *g = h->g;
    int64_t E = c->embd, nh = c->heads, hd = c->embd / c->heads, P = c->positions;
    /* registered buffers up to 4.57: the causal mask and an unused scalar;
     * 5.x's GPT2Attention registers neither (modeling_gpt2.py 5.24.0) and
     * takes the model's causal mask (`mask`) */
    int32_t bias = -1;
    if (!h->gpt2_v5) {
        bias = hf_param(h, "bias", DM_BOOL, 4, (int64_t[]){1, 1, P, P});
        hf_param(h, "masked_bias", DM_FLOAT, 0, NULL);
    }
    size_t s = hf_enter(h, "c_attn");
    int32_t qkv = hf_conv1d(h, x, E, 3 * E);
    hf_leave(h, s);
    /* the fused kernel reads q as it is, a permuted view of the c_attn
     * output, and keeps it for backward, so the whole [B, S, 3E] buffer
     * lives to the backward: flash_attention_forward (no copies), and sdpa
     * from 4.56, whose sdpa_attention_forward no longer makes q, k and v
     * .contiguous() (PR #40315, "Remove unnecessary contiguous calls for
     * modern torch"). Measured: GPT-2 bf16 b4 s1024 sdpa training with
     * transformers 5.17 on the H200 (tools/gpu/results/traces-fresh.tar.gz):
     * each layer's 18 MiB c_attn output (Conv1D, pytorch_utils.py) is live
     * when the forward ends, and no q copy is made */
    bool views = h->flash || (h->sdpa && h->sdpa_as_is);
    /* .split(E, dim=2): three views in PyTorch; where nothing keeps them,
     * Split copies here (the c_attn output is freed right after, so only
     * transiently more) */
    int32_t sp = hf_const_ints(h, INTS(E, E, E));
    struct dm_node *n = hf_node(h, DM_OP_Split, 2, (int32_t[]){qkv, sp}, 3);
    if (!n)
        return -1;
    int32_t part[3] = {n->out[0], n->out[1], n->out[2]};
    hf_attr_i(h, "axis", 2);
    if (views)
        hf_attr_i(h, "view", 1);
    int32_t qkvh[3];
    for (int j = 0; j < 3; j++) { /* _split_heads: view, permute(0, 2, 1, 3) */
        int32_t r = hf_reshape(h, part[j], INTS(0, 0, nh, hd));
        const char *pn = NULL;
        if (c->use_cache && j > 0) { /* present = (key, value) */
            pn = dm_arena_printf(&g->arena, "present.%d.%s", layer, j == 1 ? "key" : "value");
            if (!pn)
                return hf_oom(h);
        }
        h->out_name = hf_cache_at_make(h, pn);
        qkvh[j] = hf_cache_update(h, hf_transpose(h, r, INTS(0, 2, 1, 3)), pn);
    }
    int32_t o, w = -1;
    if (h->flash) {
        /* flash_attention_2 through the same interface: flash_attention_forward
         * on the permuted views (no copies), flash_attn_func's default scale
         * (GPT2Attention passes none) */
        o = hf_flash_attention(h, qkvh[0], qkvh[1], qkvh[2], 1.0 / sqrt((double)hd), true);
    } else if (h->sdpa) {
        /* GPT-2 runs the shared attention interface from 4.48 (4.51's
         * GPT2Attention.forward: ALL_ATTENTION_FUNCTIONS["sdpa"]), whose
         * sdpa_attention_forward makes query, key and value .contiguous()
         * up to 4.55 (from 4.56 it passes the views, above): copies of the
         * permuted views, which the kernel's backward keeps;
         * is_causal without a mask, dropout_p = attn_pdrop in training;
         * nothing of [S, S] is made */
        int32_t c3[3];
        if (views)
            memcpy(c3, qkvh, sizeof c3); /* 4.56+: the views as they are */
        else
            hf_heads_copy(h, qkvh, nh, hd, c3);
        o = hf_sdpa_attention(h, c3, -1, true, nh, nh, hd, hd, 0, c->attn_drop);
    } else if (h->gpt2_v5) {
        /* 5.x's eager_attention_forward: matmul(q, k^T) * scaling (the
         * module's head_dim**-0.5 and 1 / (layer + 1) in one factor), + the
         * model's causal mask, softmax, .type(value.dtype), dropout */
        int32_t c3[3];
        hf_heads_copy(h, qkvh, nh, hd, c3);
        int32_t kt = hf_transpose(h, c3[1], INTS(0, 1, 3, 2));
        w = hf_op(h, DM_OP_MatMul, 2, c3[0], kt);
        double scaling = (c->scale ? 1.0 / sqrt((double)hd) : 1.0) /
                         (c->scale_by_layer ? (double)(layer + 1) : 1.0);
        w = hf_op(h, DM_OP_Mul, 2, w, hf_const_f(h, scaling));
        w = hf_op(h, DM_OP_Add, 2, w, mask);
        w = hf_op(h, DM_OP_Softmax, 1, w);
        hf_attr_i(h, "axis", -1);
        s = hf_enter(h, "attn_dropout");
        w = hf_dropout(h, w, c->attn_drop);
        hf_leave(h, s);
        o = hf_op(h, DM_OP_MatMul, 2, w, c3[2]);
    } else {
        /* q, k.transpose(-1, -2) and v are permuted views of the c_attn output */
        int32_t c3[3];
        hf_heads_fold(h, qkvh, nh, hd, c3);
        int32_t kt = hf_transpose(h, c3[1], INTS(0, 1, 3, 2));
        w = hf_op(h, DM_OP_MatMul, 2, c3[0], kt);
        if (c->scale) {
            int32_t d = hf_const_f(h, sqrt((double)hd)); /* torch.full([], D ** 0.5) */
            w = hf_op(h, DM_OP_Div, 2, w, d);
        }
        if (c->scale_by_layer) {
            int32_t d = hf_const_f(h, (double)(layer + 1));
            w = hf_op(h, DM_OP_Div, 2, w, d);
        }
        /* causal_mask = self.bias[:, :, k - q : k, :k], a view; where(mask, w, min) */
        int32_t st = hf_const_ints(h, INTS(0, 0)), ax = hf_const_ints(h, INTS(2, 3));
        int32_t cm = hf_op(h, DM_OP_Slice, 4, bias, st, ss, ax);
        int32_t mv = hf_const_f(h, -FLT_MAX);
        w = hf_op(h, DM_OP_Where, 3, cm, w, mv);
        w = hf_op(h, DM_OP_Softmax, 1, w);
        hf_attr_i(h, "axis", -1);
        s = hf_enter(h, "attn_dropout");
        w = hf_dropout(h, w, c->attn_drop);
        hf_leave(h, s);
        o = hf_op(h, DM_OP_MatMul, 2, w, c3[2]);
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3)); /* _merge_heads: permute(...).contiguous() */
    o = hf_reshape(h, o, INTS(0, 0, -1));
    s = hf_enter(h, "c_proj");
    o = hf_conv1d(h, o, E, E);
    hf_leave(h, s);
    s = hf_enter(h, "resid_dropout");
    o = hf_dropout(h, o, c->resid_drop);
    hf_leave(h, s);
    /* _attn's attn_weights is a local of forward until it returns; from
     * 4.52 GPT2Attention returns (attn_output, attn_weights) and GPT2Block
     * keeps them in self_attn_weights (5.x: `_`) until it returns
     * (modeling_gpt2.py 4.52.4-4.56.2, 5.24.0; 4.51.3's returned them only
     * with output_attentions): measured 4.56.2 tiny-gpt2 fp32 inference
     * -4.9% while they went with the attention */
    hf_hold(h, w, hf_last_node(h));
    *probs = h->gpt2_cache ? w : -1;
    /* present = (key, value) are views of the c_attn output, so with
     * use_cache the whole [B, S, 3E] buffer lives while the caller holds
     * the presents (in training until `del out`, past the backward). Split
     * copies here: k and v are the presents, and q's part is returned with
     * them, as a view named present.N.qkv.0 */
    if (c->use_cache && !h->cache_copy) {
        h->out_name = dm_arena_printf(&g->arena, "present.%d.qkv.0", layer);
        if (!h->out_name)
            return hf_oom(h);
        hf_op(h, DM_OP_Identity, 1, part[0]);
    }
    return o;
}

/* 5.x's create_causal_mask for the eager attention without an
 * attention_mask: [S, S] of finfo.min above the diagonal, seen as [1, 1, S,
 * S], named "causal_mask" as hf_dec_causal_mask's (--mode generate finds it)
 * and built here alike, the fill an expanded scalar. */
static int32_t gpt2_causal_mask(struct hf *h, int32_t ss)
{
    int32_t full = hf_op(h, DM_OP_Expand, 2, hf_const_f(h, -FLT_MAX), ss);
    int32_t tri = hf_op(h, DM_OP_Trilu, 2, full, hf_const_i(h, 1));
    hf_attr_i(h, "upper", 1);
    h->out_name = "causal_mask";
    return hf_op(h, DM_OP_Unsqueeze, 2, tri, hf_const_ints(h, INTS(0, 1)));
}

/* GPT2LMHeadModel. */
static int32_t build_gpt2(struct hf *h, const struct gpt2 *c, int32_t ids)
{
    int64_t E = c->embd;
    size_t top = hf_enter(h, "transformer");
    size_t s = hf_enter(h, "wte");
    int32_t wte = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, E});
    int32_t x = hf_op(h, DM_OP_Gather, 2, wte, ids);
    int32_t embeds = x;
    hf_leave(h, s);
    /* position_ids = arange(S).unsqueeze(0) */
    int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t zero = hf_const_i(h, 0), one = hf_const_i(h, 1);
    int32_t pos = hf_op(h, DM_OP_Range, 3, zero, seq, one);
    int32_t pos_ids = hf_unsqueeze(h, pos, INTS(0));
    s = hf_enter(h, "wpe");
    int32_t wpe = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->positions, E});
    h->out_name = "position_embeds"; /* [B, S, E] where generate passes position_ids */
    int32_t pe = hf_op(h, DM_OP_Gather, 2, wpe, pos_ids);
    hf_leave(h, s);
    x = hf_op(h, DM_OP_Add, 2, x, pe);
    s = hf_enter(h, "drop");
    x = hf_dropout(h, x, c->embd_drop);
    hf_leave(h, s);
    int32_t ss = hf_op(h, DM_OP_Concat, 2, seq, seq); /* [S, S]: the mask slice's ends */
    hf_attr_i(h, "axis", 0);
    /* 5.x: GPT2Model's create_causal_mask, for the eager attention (the
     * fused kernels take is_causal), held by the forward */
    int32_t mask = h->gpt2_v5 && !h->sdpa && !h->flash ? gpt2_causal_mask(h, ss) : -1;

    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "h.%d", i);
        int32_t residual = x;
        s = hf_enter(h, "ln_1");
        int32_t y = hf_layer_norm(h, x, E, c->eps);
        hf_leave(h, s);
        s = hf_enter(h, "attn");
        int32_t probs = -1;
        y = gpt2_attention(h, c, i, y, ss, mask, &probs);
        hf_leave(h, s);
        int32_t attn_out = y;
        x = hf_op(h, DM_OP_Add, 2, y, residual); /* attn_output + residual */
        residual = x;
        s = hf_enter(h, "ln_2");
        y = hf_layer_norm(h, x, E, c->eps);
        hf_leave(h, s);
        s = hf_enter(h, "mlp");
        size_t t = hf_enter(h, "c_fc");
        y = hf_conv1d(h, y, E, c->inner);
        hf_leave(h, t);
        t = hf_enter(h, "act");
        y = hf_gpt2_act(h, c->act, y);
        hf_leave(h, t);
        t = hf_enter(h, "c_proj");
        y = hf_conv1d(h, y, c->inner, E);
        hf_leave(h, t);
        t = hf_enter(h, "dropout");
        y = hf_dropout(h, y, c->resid_drop);
        hf_leave(h, t);
        hf_leave(h, s);
        x = hf_op(h, DM_OP_Add, 2, residual, y);
        /* GPT2Block.forward's attn_outputs / attn_output live until it returns */
        hf_hold(h, attn_out, hf_last_node(h));
        hf_hold(h, probs, hf_last_node(h));
        hf_leave(h, ls);
    }
    s = hf_enter(h, "ln_f");
    x = hf_layer_norm(h, x, E, c->eps);
    hf_leave(h, s);
    /* GPT2Model.forward's locals live until it returns: inputs_embeds,
     * position_embeds, position_ids */
    hf_hold(h, embeds, hf_last_node(h));
    hf_hold(h, pe, hf_last_node(h));
    hf_hold(h, mask, hf_last_node(h));
    hf_hold(h, pos, hf_last_node(h));
    hf_leave(h, top);
    if (h->task.kind != HF_TASK_LM)
        return hf_task_head(h, x, E);
    s = hf_enter(h, "lm_head");
    x = hf_linear(h, x, E, c->vocab, false, c->tie ? wte : -1, "logits");
    hf_leave(h, s);
    return x;
}

static void read_gpt2(struct hf *h, struct gpt2 *c)
{
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->embd = hf_get_int(h, "n_embd", REQUIRED, MAX_SIZE);
    c->layers = hf_get_int(h, "n_layer", REQUIRED, MAX_LAYERS);
    c->heads = hf_get_int(h, "n_head", REQUIRED, MAX_SIZE);
    c->positions = hf_get_int(h, "n_positions", REQUIRED, 1 << 20);
    if (h->st == DNNMEM_OK && c->embd % c->heads)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'n_embd' (%lld) is not a multiple of 'n_head' (%lld)",
                (long long)c->embd, (long long)c->heads);
    c->inner = hf_get_int(h, "n_inner", h->st == DNNMEM_OK ? 4 * c->embd : 1, MAX_SIZE);
    c->act = hf_get_str(h, "activation_function", "gelu_new");
    if (h->st == DNNMEM_OK && strcmp(c->act, "gelu_new") != 0 && strcmp(c->act, "gelu") != 0 &&
        strcmp(c->act, "gelu_pytorch_tanh") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'activation_function' is '%s'; modelled: gelu_new, gelu, gelu_pytorch_tanh",
                c->act);
    c->eps = hf_get_num(h, "layer_norm_epsilon", 1e-5, 0, 1);
    c->attn_drop = hf_get_num(h, "attn_pdrop", 0.1, 0, 1);
    c->resid_drop = hf_get_num(h, "resid_pdrop", 0.1, 0, 1);
    c->embd_drop = hf_get_num(h, "embd_pdrop", 0.1, 0, 1);
    c->scale = hf_get_bool(h, "scale_attn_weights", true);
    c->scale_by_layer = hf_get_bool(h, "scale_attn_by_inverse_layer_idx", false);
    c->tie = hf_get_bool(h, "tie_word_embeddings", true);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    if (hf_get_bool(h, "reorder_and_upcast_attn", false))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'reorder_and_upcast_attn' is true; only the plain _attn is modelled");
    if (hf_get_bool(h, "add_cross_attention", false))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'add_cross_attention' is true; only the causal LM is modelled");
}

enum dnnmem_status hf_gpt2(struct hf *h, const char *type)
{
    struct gpt2 c = {0};
    if (!hf_check(h, type))
        return h->st;
    read_gpt2(h, &c);
    if (!hf_begin(h, type))
        return h->st;
    int32_t ids = hf_causal_ids(h, c.layers, c.use_cache, true);
    if (ids < 0)
        return h->st;
    int32_t logits = build_gpt2(h, &c, ids);
    struct dm_graph *g = h->g;
    /* GPT2LMHeadModel's logits_to_keep is transformers 5's (measured, 5.17
     * on the H200: its prefill peak is the last position's logits, not
     * every position's) */
    g->logits_to_keep = h->gpt2_v5;
    /* GPT2PreTrainedModel in 4.51 sets no _supports_cache_class: generate
     * prepares no Cache and GPT2Attention concatenates onto the layer_past
     * tuple; its eager forward inverts generate's 2-D attention_mask. From
     * 4.52 (PR #35761) GPT2Model takes a DynamicCache and builds its mask as
     * Llama does (measured with 5.17 on the H200: +8.0% as a legacy tuple,
     * +1.7% so) */
    g->legacy_cache = !h->gpt2_cache;
    g->gen_mask = !h->gpt2_cache ? DM_GEN_MASK_INVERTED : DM_GEN_MASK_CAUSAL;
    return hf_causal_outputs(h, logits, c.layers, c.use_cache, true);
}
