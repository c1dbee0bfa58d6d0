/*
 * vit.c (src/load/hf/): ViT.
 */
#include "hf.h"

struct vit {
    int64_t hidden, layers, heads, inter, image, patch, channels, labels, pool_out;
    double eps, attn_drop, hidden_drop;
    const char *act;
    bool qkv_bias, classify;
};

/* ViTSelfAttention (eager_attention_forward: softmax(q k^T * D**-0.5),
 * dropout, times v) or ViTSdpaSelfAttention (one fused kernel, no mask), on
 * [B, H, N, D] views of query, key and value; then ViTSelfOutput (dense,
 * dropout; the residual is the layer's). transformers 4.53-4.57. */
static int32_t vit_attention(struct hf *h, const struct vit *c, int32_t x)
{
    int64_t E = c->hidden, H = c->heads, D = c->hidden / c->heads;
    static const char *const proj[3] = {"query", "key", "value"};
    int32_t qkv[3], c3[3];
    size_t s = hf_enter(h, "attention");
    for (int j = 0; j < 3; j++) {
        size_t t = hf_enter(h, "%s", proj[j]);
        int32_t y = hf_linear(h, x, E, E, c->qkv_bias, -1, NULL);
        hf_leave(h, t);
        y = hf_reshape(h, y, INTS(0, 0, H, D));
        qkv[j] = hf_transpose(h, y, INTS(0, 2, 1, 3));
    }
    /* eager: torch.matmul copies the transposed operands; sdpa:
     * sdpa_attention_forward makes them .contiguous() (the same copies) up to
     * 4.55 and passes them as they are from 4.56; flash_attention_forward
     * transposes the views back to [B, N, H, D] (no copies) */
    int32_t o;
    if (h->flash) {
        o = hf_flash_attention(h, qkv[0], qkv[1], qkv[2], 1.0 / sqrt((double)D), false);
    } else if (h->sdpa && h->sdpa_as_is) {
        o = hf_sdpa_attention(h, qkv, -1, false, H, H, D, D, 1.0 / sqrt((double)D), c->attn_drop);
    } else if (h->sdpa) {
        hf_heads_copy(h, qkv, H, D, c3);
        o = hf_sdpa_attention(h, c3, -1, false, H, H, D, D, 1.0 / sqrt((double)D), c->attn_drop);
    } else {
        hf_heads_fold(h, qkv, H, D, c3);
        int32_t kt = hf_transpose(h, c3[1], INTS(0, 1, 3, 2));
        int32_t w = hf_op(h, DM_OP_MatMul, 2, c3[0], kt);
        w = hf_op(h, DM_OP_Mul, 2, w, hf_const_f(h, 1.0 / sqrt((double)D)));
        /* softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
         * (modeling_vit.py 4.51.3, 4.56.2, 5.24.0): float32 probabilities in
         * bf16 (measured: tiny-vit bf16 inference on the CPU peaks at the
         * float32 copy and softmax, -4.5% while they were 16-bit) */
        w = hf_softmax_f32(h, w, c3[0]);
        w = hf_dropout(h, w, c->attn_drop);
        o = hf_op(h, DM_OP_MatMul, 2, w, c3[2]);
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3)); /* .transpose(1, 2).contiguous() */
    o = hf_reshape(h, o, INTS(0, 0, -1));
    /* ViTSelfAttention.forward's locals query_layer, key_layer, value_layer */
    for (int j = 0; j < 3; j++)
        hf_hold(h, qkv[j], hf_last_node(h));
    hf_leave(h, s);
    s = hf_enter(h, "output");
    size_t t = hf_enter(h, "dense");
    o = hf_linear(h, o, E, E, true, -1, NULL);
    hf_leave(h, t);
    o = hf_dropout(h, o, c->hidden_drop);
    hf_leave(h, s);
    return o;
}

/* ViTModel (embeddings, pre-LN encoder, layernorm, pooler) or
 * ViTForImageClassification (ViTModel without pooler, classifier on the
 * [CLS] token), called as model(pixel_values): pixel_values float32
 * [batch, num_channels, image_size, image_size]. */
static void build_vit(struct hf *h, const struct vit *c)
{
    struct dm_graph *g = h->g;
    int64_t E = c->hidden, P = c->patch, n = c->image / c->patch;
    int64_t N = n * n + 1; /* patches and [CLS] */
    int32_t pix = hf_declare_input(h, "pixel_values", DM_FLOAT, 4,
                                   (const char *[]){"batch", NULL, NULL, NULL},
                                   (int64_t[]){0, c->channels, c->image, c->image});
    g->outputs = dm_arena_array(&g->arena, 2, sizeof *g->outputs);
    if (!g->outputs) {
        hf_oom(h);
        return;
    }
    size_t top = c->classify ? hf_enter(h, "vit") : h->scope_len;
    size_t s = hf_enter(h, "embeddings");
    int32_t cls = hf_param(h, "cls_token", DM_FLOAT, 3, (int64_t[]){1, 1, E});
    int32_t pe = hf_param(h, "position_embeddings", DM_FLOAT, 3, (int64_t[]){1, N, E});
    size_t t = hf_enter(h, "patch_embeddings");
    size_t u = hf_enter(h, "projection");
    int32_t w = hf_param(h, "weight", DM_FLOAT, 4, (int64_t[]){E, c->channels, P, P});
    int32_t b = hf_param(h, "bias", DM_FLOAT, 1, &E);
    int32_t y = hf_op(h, DM_OP_Conv, 3, pix, w, b);
    hf_attr_ints(h, "kernel_shape", INTS(P, P));
    hf_attr_ints(h, "strides", INTS(P, P));
    hf_leave(h, u);
    y = hf_reshape(h, y, INTS(0, E, -1));   /* .flatten(2) */
    y = hf_transpose(h, y, INTS(0, 2, 1)); /* .transpose(1, 2): [B, n*n, E], a view */
    hf_leave(h, t);
    /* cat((cls_token.expand(B, -1, -1), embeddings), dim=1) + position_embeddings */
    int32_t b1 = hf_op(h, DM_OP_Slice, 4, hf_op(h, DM_OP_Shape, 1, pix), hf_const_ints(h, INTS(0)),
                       hf_const_ints(h, INTS(1)), hf_const_ints(h, INTS(0)));
    int32_t shp = hf_op(h, DM_OP_Concat, 2, b1, hf_const_ints(h, INTS(1, 1)));
    hf_attr_i(h, "axis", 0);
    int32_t ce = hf_op(h, DM_OP_Expand, 2, cls, shp);
    int32_t x = hf_op(h, DM_OP_Concat, 2, ce, y);
    hf_attr_i(h, "axis", 1);
    x = hf_op(h, DM_OP_Add, 2, x, pe);
    x = hf_dropout(h, x, c->hidden_drop);
    int32_t emb = x;
    hf_leave(h, s);
    size_t enc = hf_enter(h, "encoder");
    for (int64_t i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layer.%lld", (long long)i);
        t = hf_enter(h, "layernorm_before");
        y = hf_layer_norm(h, x, E, c->eps);
        hf_leave(h, t);
        int32_t norm = y;
        t = hf_enter(h, "attention");
        y = vit_attention(h, c, y);
        hf_leave(h, t);
        int32_t attn = y;
        x = hf_op(h, DM_OP_Add, 2, y, x); /* attention_output + hidden_states */
        t = hf_enter(h, "layernorm_after");
        y = hf_layer_norm(h, x, E, c->eps);
        hf_leave(h, t);
        t = hf_enter(h, "intermediate");
        u = hf_enter(h, "dense");
        y = hf_linear(h, y, E, c->inter, true, -1, NULL);
        hf_leave(h, u);
        y = hf_gpt2_act(h, c->act, y);
        hf_leave(h, t);
        t = hf_enter(h, "output");
        u = hf_enter(h, "dense");
        y = hf_linear(h, y, c->inter, E, true, -1, NULL);
        hf_leave(h, u);
        y = hf_dropout(h, y, c->hidden_drop);
        x = hf_op(h, DM_OP_Add, 2, y, x); /* hidden_states + input_tensor */
        hf_leave(h, t);
        /* ViTLayer.forward's locals hidden_states_norm and attention_output
         * live until it returns */
        hf_hold(h, norm, hf_last_node(h));
        hf_hold(h, attn, hf_last_node(h));
        hf_leave(h, ls);
    }
    hf_leave(h, enc);
    s = hf_enter(h, "layernorm");
    x = hf_layer_norm(h, x, E, c->eps);
    hf_leave(h, s);
    hf_hold(h, emb, hf_last_node(h)); /* ViTModel.forward's embedding_output */
    int32_t pooled = -1;
    if (!c->classify) { /* ViTPooler: activation(dense(hidden[:, 0])) */
        s = hf_enter(h, "pooler");
        int32_t f = hf_first_token(h, x);
        t = hf_enter(h, "dense");
        h->last_linear = true; /* ViTModel's last parameters */
        f = hf_linear(h, f, E, c->pool_out, true, -1, NULL);
        h->last_linear = false;
        hf_leave(h, t);
        t = hf_enter(h, "activation");
        pooled = hf_op(h, DM_OP_Tanh, 1, f);
        hf_leave(h, t);
        hf_leave(h, s);
    }
    hf_leave(h, top);
    if (c->classify) {
        s = hf_enter(h, "classifier");
        x = hf_linear(h, hf_first_token(h, x), E, c->labels, true, -1, "logits");
        hf_leave(h, s);
    }
    hf_add_output(h, x, 2);
    hf_add_output(h, pooled, 2);
}

/* ViTConfig's defaults (ViT-Base/16 at 224). */
static void read_vit(struct hf *h, struct vit *c)
{
    c->hidden = hf_get_int(h, "hidden_size", 768, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", 12, MAX_LAYERS);
    c->heads = hf_get_int(h, "num_attention_heads", 12, MAX_SIZE);
    c->inter = hf_get_int(h, "intermediate_size", 3072, MAX_SIZE);
    c->image = hf_get_int(h, "image_size", 224, 1 << 20);
    c->patch = hf_get_int(h, "patch_size", 16, 1 << 20);
    c->channels = hf_get_int(h, "num_channels", 3, 1 << 20);
    c->pool_out = hf_get_int(h, "pooler_output_size", h->st == DNNMEM_OK ? c->hidden : 1, MAX_SIZE);
    c->eps = hf_get_num(h, "layer_norm_eps", 1e-12, 0, 1);
    c->attn_drop = hf_get_num(h, "attention_probs_dropout_prob", 0.0, 0, 1);
    c->hidden_drop = hf_get_num(h, "hidden_dropout_prob", 0.0, 0, 1);
    c->qkv_bias = hf_get_bool(h, "qkv_bias", true);
    c->act = hf_get_str(h, "hidden_act", "gelu");
    const char *pact = hf_get_str(h, "pooler_act", "tanh");
    if (h->st != DNNMEM_OK)
        return;
    if (c->hidden % c->heads)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' (%lld)",
                (long long)c->hidden, (long long)c->heads);
    else if (c->patch > c->image)
        hf_fail(h, DNNMEM_E_MODEL, "config field 'patch_size' (%lld) exceeds 'image_size' (%lld)",
                (long long)c->patch, (long long)c->image);
    else if (strcmp(c->act, "gelu") != 0 && strcmp(c->act, "gelu_new") != 0 &&
             strcmp(c->act, "gelu_pytorch_tanh") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'hidden_act' is '%s'; modelled for vit: gelu, gelu_new, "
                "gelu_pytorch_tanh", c->act);
    else if (strcmp(pact, "tanh") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED, "config field 'pooler_act' is '%s'; only tanh is modelled",
                pact);
    json_t *arch = json_object_get(h->root, "architectures");
    if (h->st != DNNMEM_OK || !arch || json_is_null(arch))
        return;
    if (!json_is_array(arch)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field 'architectures' must be a list");
        return;
    }
    size_t i;
    json_t *a;
    json_array_foreach(arch, i, a)
    {
        const char *s = json_is_string(a) ? json_string_value(a) : "";
        if (strcmp(s, "ViTModel") == 0)
            return;
        if (strcmp(s, "ViTForImageClassification") == 0) {
            c->classify = true;
            c->labels = hf_num_labels(h);
            return;
        }
    }
    a = json_array_get(arch, 0);
    hf_fail(h, DNNMEM_E_UNSUPPORTED,
            "config field 'architectures' names %s; the heads built are ViTModel and "
            "ViTForImageClassification",
            json_is_string(a) ? json_string_value(a) : "a non-string");
}

enum dnnmem_status hf_vit(struct hf *h, const char *type)
{
    struct vit c = {0};
    if (!hf_check(h, type) || !hf_begin(h, type))
        return h->st;
    read_vit(h, &c);
    if (h->st == DNNMEM_OK)
        build_vit(h, &c);
    return hf_finish(h);
}
