/*
 * bert.c (src/load/hf/): BERT, RoBERTa, ALBERT, DistilBERT.
 */
#include "hf.h"

enum bert_kind { K_BERT, K_ROBERTA, K_ALBERT, K_DISTIL };

enum bert_head { HEAD_BASE, HEAD_MLM, HEAD_SEQCLS, HEAD_QA, HEAD_TOKCLS, HEAD_MC };

struct bert {
    enum bert_kind kind;
    enum bert_head head;
    int64_t vocab, hidden, inter, layers, heads, positions, types;
    int64_t emb;           /* ALBERT's factorised embedding size (else hidden) */
    int64_t groups, inner; /* ALBERT: num_hidden_groups, inner_group_num */
    int64_t pad;           /* RoBERTa: padding_idx, the base of position ids */
    int64_t labels;        /* a classification head's num_labels */
    int32_t choices;       /* ForMultipleChoice: the [choices] shape (hf_choice_ids) */
    double eps, attn_drop, hidden_drop, cls_drop;
    double qa_drop, seq_drop; /* DistilBERT: qa_dropout, seq_classif_dropout */
    const char *act;
};

/* q, k and v of an encoder: hf_linear(x) viewed [B, S, H, D] and permuted to
 * [B, H, S, D] (BERT's transpose_for_scores, DistilBERT's shape()). */
static void encoder_heads(struct hf *h, int32_t x, int64_t E, int64_t H,
                          const char *const proj[3], int32_t qkv[3])
{
    for (int j = 0; j < 3; j++) {
        size_t t = hf_enter(h, "%s", proj[j]);
        int32_t y = hf_linear(h, x, E, E, true, -1, NULL);
        hf_leave(h, t);
        y = hf_reshape(h, y, INTS(0, 0, H, E / H));
        qkv[j] = hf_transpose(h, y, INTS(0, 2, 1, 3));
    }
}

/* The eager attention core of BERT and ALBERT: softmax(q k^T / sqrt(D) +
 * mask), dropout, times v, back to [B, S, E] (.permute(0, 2, 1, 3) and a
 * contiguous copy: BERT's .contiguous().view(), ALBERT's .transpose(2,
 * 1).flatten(2)). sdpa: the fused kernel; BERT passes no mask (None from
 * _prepare_4d_attention_mask_for_sdpa when the mask is all ones), ALBERT
 * passes its extended mask, which rules out the flash kernel. */
static int32_t encoder_core(struct hf *h, const struct bert *c, const int32_t qkv[3], int32_t mask,
                            int32_t *probs)
{
    int64_t H = c->heads, D = c->hidden / c->heads;
    int32_t o;
    *probs = -1;
    if (h->sdpa) {
        bool masked = c->kind == K_ALBERT && mask >= 0;
        o = hf_sdpa_attention(h, qkv, masked ? mask : -1, false, H, H, D, D, 0, c->attn_drop);
    } else if (c->kind == K_ALBERT && h->albert_interface) {
        /* transformers 4.54+ (PR #38301): AlbertAttention calls the shared
         * eager_attention_forward: torch.matmul(query, key.transpose(2, 3))
         * copies q and k^T (non-contiguous views) into its bmm operands at
         * that call, attn_weights * scaling, the mask only if one was
         * given, softmax, dropout, and torch.matmul(attn_weights, value)
         * copies v only there (traced: the v copy follows the softmax) */
        int32_t q = hf_matmul_fold(h, qkv[0], H, D);
        int32_t k = hf_matmul_fold(h, qkv[1], H, D);
        int32_t w = hf_op(h, DM_OP_MatMul, 2, q, hf_transpose(h, k, INTS(0, 1, 3, 2)));
        w = hf_op(h, DM_OP_Mul, 2, w, hf_const_f(h, 1.0 / sqrt((double)D))); /* * scaling */
        if (mask >= 0)
            w = hf_op(h, DM_OP_Add, 2, w, mask);
        w = hf_op(h, DM_OP_Softmax, 1, w);
        hf_attr_i(h, "axis", -1);
        w = hf_dropout(h, w, c->attn_drop);
        *probs = w;
        o = hf_op(h, DM_OP_MatMul, 2, w, hf_matmul_fold(h, qkv[2], H, D));
    } else {
        int32_t c3[3];
        hf_heads_fold(h, qkv, H, D, c3);
        int32_t kt = hf_transpose(h, c3[1], INTS(0, 1, 3, 2));
        int32_t w = hf_op(h, DM_OP_MatMul, 2, c3[0], kt);
        w = hf_op(h, DM_OP_Div, 2, w, hf_const_f(h, sqrt((double)D))); /* / math.sqrt(D) */
        w = hf_op(h, DM_OP_Add, 2, w, mask);
        w = hf_op(h, DM_OP_Softmax, 1, w);
        hf_attr_i(h, "axis", -1);
        w = hf_dropout(h, w, c->attn_drop);
        *probs = w;
        o = hf_op(h, DM_OP_MatMul, 2, w, c3[2]);
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3));
    return hf_reshape(h, o, INTS(0, 0, -1));
}

/* Eager attention probabilities held past the attention, by release:
 *  - 4.54 to 4.57 (4.54.0's and 4.57.6's modeling_bert.py, RoBERTa's
 *    copy): BertSelfAttention returns (context_layer, attention_probs)
 *    whatever output_attentions says, BertLayer returns them in its
 *    outputs, and BertEncoder's loop variable layer_outputs keeps layer i's
 *    until layer i + 1 returns (4.53.3 kept them only with
 *    output_attentions);
 *  - from 5.0 (5.24's modeling files) every encoder layer (BertLayer,
 *    RoBERTa's, AlbertLayer, DistilBERT's TransformerBlock) unpacks
 *    `attention_output, _ = self.attention(...)`: `_` stays bound until
 *    the layer returns.
 * probs: the dropout's output, else the softmax's. *prev: the previous
 * layer's (4.54-4.57), held to this layer's end. Measured with real
 * transformers 4.56.2 and 5.24.0 on the CPU: BERT inference peaks in the
 * second layer's FFN with these live. */
static void hold_probs(struct hf *h, const struct bert *c, int32_t probs, int32_t *prev)
{
    bool tuple = h->transformers >= 454 && h->transformers < 500 &&
                 (c->kind == K_BERT || c->kind == K_ROBERTA);
    if (probs >= 0 && (tuple || h->transformers >= 500))
        hf_hold(h, probs, hf_last_node(h));
    if (tuple && *prev >= 0)
        hf_hold(h, *prev, hf_last_node(h));
    *prev = tuple ? probs : -1;
}

/* BertAttention (self: BertSelfAttention or BertSdpaSelfAttention, then
 * output: BertSelfOutput), RoBERTa's copy of it, or AlbertAttention (query,
 * key, value, dense and LayerNorm in one module). */
static int32_t bert_attention(struct hf *h, const struct bert *c, int32_t x, int32_t mask,
                              int32_t *probs)
{
    int64_t E = c->hidden;
    int32_t qkv[3];
    static const char *const proj[3] = {"query", "key", "value"};
    bool albert = c->kind == K_ALBERT;
    size_t s = albert ? h->scope_len : hf_enter(h, "self");
    encoder_heads(h, x, E, c->heads, proj, qkv);
    int32_t o = encoder_core(h, c, qkv, mask, probs);
    hf_leave(h, s);
    s = albert ? h->scope_len : hf_enter(h, "output");
    size_t t = hf_enter(h, "dense");
    o = hf_linear(h, o, E, E, true, -1, NULL);
    hf_leave(h, t);
    o = hf_dropout(h, o, c->hidden_drop);
    int32_t dense = o;
    o = albert ? hf_op(h, DM_OP_Add, 2, x, o) : hf_op(h, DM_OP_Add, 2, o, x);
    t = hf_enter(h, "LayerNorm");
    o = hf_layer_norm(h, o, E, c->eps);
    hf_leave(h, t);
    hf_leave(h, s);
    if (albert && !h->sdpa && h->albert_interface) {
        /* 4.54+'s AlbertAttention.forward: query_layer, key_layer and
         * value_layer (views of the projections) are locals until it
         * returns, and attn_output (the dense output) is rebound only by
         * the LayerNorm's statement (traced: all four freed after it) */
        for (int j = 0; j < 3; j++)
            hf_hold(h, qkv[j], hf_last_node(h));
        hf_hold(h, dense, hf_last_node(h));
    }
    return o;
}

/* BertLayer's feed-forward (intermediate, output) or AlbertLayer's
 * (ffn, activation, ffn_output, full_layer_layer_norm: no dropout). */
static int32_t encoder_ffn(struct hf *h, const struct bert *c, int32_t a)
{
    int64_t E = c->hidden;
    bool albert = c->kind == K_ALBERT;
    size_t s = albert ? h->scope_len : hf_enter(h, "intermediate");
    size_t t = hf_enter(h, albert ? "ffn" : "dense");
    int32_t y = hf_linear(h, a, E, c->inter, true, -1, NULL);
    hf_leave(h, t);
    y = hf_gpt2_act(h, c->act, y);
    hf_leave(h, s);
    s = albert ? h->scope_len : hf_enter(h, "output");
    t = hf_enter(h, albert ? "ffn_output" : "dense");
    y = hf_linear(h, y, c->inter, E, true, -1, NULL);
    hf_leave(h, t);
    if (!albert)
        y = hf_dropout(h, y, c->hidden_drop);
    int32_t ffn_out = y;
    y = hf_op(h, DM_OP_Add, 2, y, a);
    t = hf_enter(h, albert ? "full_layer_layer_norm" : "LayerNorm");
    y = hf_layer_norm(h, y, E, c->eps);
    hf_leave(h, t);
    hf_leave(h, s);
    /* 4.54+'s AlbertLayer.forward: ffn_output is a local until it returns */
    if (albert && !h->sdpa && h->albert_interface)
        hf_hold(h, ffn_out, hf_last_node(h));
    return y;
}

/* hidden[:, 0], [B, E]. PyTorch's select is a view that keeps the whole
 * hidden state alive while the next linear keeps it for backward; modelled
 * as a copy (the hidden state is freed earlier: B x S x E bytes, before the
 * head's backward). */
int32_t hf_first_token(struct hf *h, int32_t x)
{
    int32_t f = hf_op(h, DM_OP_Gather, 2, x, hf_const_i(h, 0));
    hf_attr_i(h, "axis", 1);
    return f;
}

/* RoBERTa's create_position_ids_from_input_ids(input_ids, padding_idx):
 * mask = ids.ne(pad).int(); (cumsum(mask, 1).type_as(mask) + 0) * mask,
 * .long() + pad: small int [B, S] temporaries. */
static int32_t roberta_position_ids(struct hf *h, int32_t ids, int64_t pad)
{
    int32_t eq = hf_op(h, DM_OP_Equal, 2, ids, hf_const_i(h, pad));
    int32_t m = hf_op(h, DM_OP_Not, 1, eq);
    m = hf_op(h, DM_OP_Cast, 1, m);
    hf_attr_i(h, "to", DM_INT32);
    int32_t cs = hf_op(h, DM_OP_CumSum, 2, m, hf_const_i(h, 1)); /* int64 in torch */
    cs = hf_op(h, DM_OP_Cast, 1, cs);
    hf_attr_i(h, "to", DM_INT64);
    cs = hf_op(h, DM_OP_Cast, 1, cs); /* .type_as(mask) */
    hf_attr_i(h, "to", DM_INT32);
    int32_t zero = hf_op(h, DM_OP_Cast, 1, hf_const_i(h, 0)); /* + past_key_values_length */
    hf_attr_i(h, "to", DM_INT32);
    cs = hf_op(h, DM_OP_Add, 2, cs, zero);
    cs = hf_op(h, DM_OP_Cast, 1, hf_op(h, DM_OP_Mul, 2, cs, m));
    hf_attr_i(h, "to", DM_INT64);
    return hf_op(h, DM_OP_Add, 2, cs, hf_const_i(h, pad));
}

/* A classifier Linear(E, out) after dropout p, named "logits" unless a view
 * of it is (multiple choice). */
static int32_t classifier(struct hf *h, int32_t x, int64_t E, int64_t out, double p, bool named)
{
    x = hf_dropout(h, x, p);
    size_t s = hf_enter(h, "classifier");
    int32_t y = hf_linear(h, x, E, out, true, -1, named ? "logits" : NULL);
    hf_leave(h, s);
    return y;
}

/* The task heads of BERT, RoBERTa and ALBERT (5.24's modeling files; the
 * same graph from 4.51): ForQuestionAnswering (hf_qa_logits on the sequence
 * output, no pooler); ForTokenClassification: dropout (classifier_dropout,
 * else hidden_dropout_prob; ALBERT's classifier_dropout_prob) and classifier
 * on the sequence output [B, S, labels]; ForMultipleChoice: dropout (RoBERTa:
 * hidden_dropout_prob) and classifier Linear(E, 1) on the pooled output of
 * the flattened [B x C, S] input, viewed [B, C] (logits.view(-1,
 * num_choices)). *second: the end logits (QA), else -1. */
static int32_t task_head(struct hf *h, const struct bert *c, int32_t x, int32_t pooled,
                         int32_t *second)
{
    int64_t E = c->hidden;
    *second = -1;
    if (c->head == HEAD_QA)
        return hf_qa_logits(h, x, E, second);
    if (c->head == HEAD_TOKCLS)
        return classifier(h, x, E, c->labels, c->cls_drop, true);
    int32_t y = classifier(h, pooled, E, 1, c->kind == K_ROBERTA ? c->hidden_drop : c->cls_drop,
                           false);
    int32_t shape = hf_op(h, DM_OP_Concat, 2, hf_const_ints(h, INTS(-1)), c->choices);
    hf_attr_i(h, "axis", 0);
    h->out_name = "logits";
    return hf_op(h, DM_OP_Reshape, 2, y, shape);
}

/* BertModel / RobertaModel / AlbertModel (embeddings, encoder, pooler) with
 * a head: none, the MLM head (decoder tied to the word embeddings), or
 * sequence classification. Transformers 4.38-4.48, called as
 * model(input_ids): token_type_ids from the registered zeros buffer,
 * attention_mask all ones. */
static int32_t build_bert(struct hf *h, const struct bert *c, int32_t ids, int32_t *pooled)
{
    *pooled = -1;
    static const char *const prefix[] = {"bert", "roberta", "albert"};
    int64_t E = c->hidden, EMB = c->emb, P = c->positions;
    bool albert = c->kind == K_ALBERT;
    size_t top = c->head != HEAD_BASE ? hf_enter(h, "%s", prefix[c->kind]) : h->scope_len;
    size_t s = hf_enter(h, "embeddings");
    int32_t word = hf_param(h, "word_embeddings.weight", DM_FLOAT, 2, (int64_t[]){c->vocab, EMB});
    int32_t posw = hf_param(h, "position_embeddings.weight", DM_FLOAT, 2, (int64_t[]){P, EMB});
    int32_t typw = hf_param(h, "token_type_embeddings.weight", DM_FLOAT, 2,
                            (int64_t[]){c->types, EMB});
    /* non-persistent buffers, on the device: position_ids, token_type_ids */
    int32_t pos_buf = hf_param(h, "position_ids", DM_INT64, 2, (int64_t[]){1, P});
    int32_t typ_buf = hf_param(h, "token_type_ids", DM_INT64, 2, (int64_t[]){1, P});
    int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t shape = hf_op(h, DM_OP_Shape, 1, ids);
    int32_t st = hf_const_ints(h, INTS(0)), ax = hf_const_ints(h, INTS(1));
    int32_t pos_ids = c->kind == K_ROBERTA ? roberta_position_ids(h, ids, c->pad)
                                           : hf_op(h, DM_OP_Slice, 4, pos_buf, st, seq, ax); /* a view */
    int32_t typ_ids = hf_op(h, DM_OP_Slice, 4, typ_buf, st, seq, ax);
    typ_ids = hf_op(h, DM_OP_Expand, 2, typ_ids, shape);                /* .expand(B, S) */
    /* inputs_embeds, a local of the embeddings' forward: freed when it
     * returns (measured with real transformers 4.51 and 5.24 on the CPU:
     * not live at an inference peak in the second layer's FFN) */
    int32_t x = hf_op(h, DM_OP_Gather, 2, word, ids);
    int32_t te = hf_op(h, DM_OP_Gather, 2, typw, typ_ids);
    x = hf_op(h, DM_OP_Add, 2, x, te);
    int32_t pe = hf_op(h, DM_OP_Gather, 2, posw, pos_ids);
    x = hf_op(h, DM_OP_Add, 2, x, pe); /* embeddings += position_embeddings */
    size_t t = hf_enter(h, "LayerNorm");
    x = hf_layer_norm(h, x, EMB, c->eps);
    hf_leave(h, t);
    x = hf_dropout(h, x, c->hidden_drop);
    hf_leave(h, s);

    /* the extended mask (1 - ones(B, S)[:, None, None, :]) * finfo.min,
     * [B, 1, 1, S] in the model's dtype; BERT's and RoBERTa's sdpa need none */
    int32_t mask = -1;
    /* 4.54+ (PR #38301): AlbertModel's _update_full_mask leaves a mask
     * that was not given None (traced, eager: no mask and no mask add).
     * sdpa keeps the 4.51 mask here: without it the measured sdpa rows
     * are mixed (b8 x 512 reserved -0.4% -> +8.4%), not traced yet */
    if ((!h->sdpa && !(albert && h->albert_interface)) || (h->sdpa && albert)) {
        int32_t one = hf_const_ints(h, INTS(1, 1));
        int32_t b1 = hf_op(h, DM_OP_Slice, 4, shape, hf_const_ints(h, INTS(0)),
                           hf_const_ints(h, INTS(1)), hf_const_ints(h, INTS(0)));
        int32_t ms = hf_op(h, DM_OP_Concat, 3, b1, one, seq);
        hf_attr_i(h, "axis", 0);
        mask = hf_op(h, DM_OP_ConstantOfShape, 1, ms);
    }

    size_t enc = hf_enter(h, "encoder");
    if (albert) {
        t = hf_enter(h, "embedding_hidden_mapping_in");
        x = hf_linear(h, x, EMB, E, true, -1, NULL);
        hf_leave(h, t);
    }
    /* ALBERT: layer i runs group i / (layers / groups), whose inner layers
     * share their weights across every call: scopes carry the call ("#i"),
     * parameter names do not */
    int32_t prev_probs = -1;
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = albert ? hf_enter(h, "albert_layer_groups.%lld#%d",
                                      (long long)(i * c->groups / c->layers), i)
                           : hf_enter(h, "layer.%d", i);
        h->share = albert;
        for (int64_t j = 0; j < (albert ? c->inner : 1) && h->st == DNNMEM_OK; j++) {
            size_t il = albert ? hf_enter(h, "albert_layers.%lld", (long long)j) : h->scope_len;
            s = hf_enter(h, "attention");
            int32_t probs;
            int32_t a = bert_attention(h, c, x, mask, &probs);
            hf_leave(h, s);
            x = encoder_ffn(h, c, a);
            hold_probs(h, c, probs, &prev_probs);
            hf_leave(h, il);
        }
        h->share = false;
        hf_leave(h, ls);
    }
    hf_leave(h, enc);
    hf_hold(h, mask, hf_last_node(h));
    bool pooler = c->head == HEAD_BASE || c->head == HEAD_MC ||
                  (c->head == HEAD_SEQCLS && c->kind != K_ROBERTA);
    if (pooler) { /* the pooler: tanh(dense(hidden[:, 0])) */
        s = hf_enter(h, "pooler");
        int32_t first = hf_first_token(h, x);
        if (!albert)
            t = hf_enter(h, "dense");
        h->last_linear = c->head == HEAD_BASE; /* the model's last parameters */
        int32_t p = hf_linear(h, first, E, E, true, -1, NULL);
        h->last_linear = false;
        if (!albert)
            hf_leave(h, t);
        *pooled = hf_op(h, DM_OP_Tanh, 1, p);
        hf_leave(h, s);
    }
    hf_leave(h, top);
    if (c->head == HEAD_BASE)
        return x;
    if (c->head == HEAD_QA || c->head == HEAD_TOKCLS || c->head == HEAD_MC) {
        int32_t y = task_head(h, c, x, *pooled, pooled);
        return y;
    }
    if (c->head == HEAD_SEQCLS) {
        int32_t y;
        if (c->kind == K_ROBERTA) { /* RobertaClassificationHead on hidden[:, 0] */
            s = hf_enter(h, "classifier");
            int32_t p = hf_dropout(h, hf_first_token(h, x), c->cls_drop);
            t = hf_enter(h, "dense");
            p = hf_linear(h, p, E, E, true, -1, NULL);
            hf_leave(h, t);
            p = hf_dropout(h, hf_op(h, DM_OP_Tanh, 1, p), c->cls_drop);
            t = hf_enter(h, "out_proj");
            y = hf_linear(h, p, E, c->labels, true, -1, "logits");
            hf_leave(h, t);
        } else {
            int32_t p = hf_dropout(h, *pooled, c->cls_drop);
            s = hf_enter(h, "classifier");
            y = hf_linear(h, p, E, c->labels, true, -1, "logits");
        }
        hf_leave(h, s);
        *pooled = -1;
        return y;
    }
    /* the MLM head: BERT's cls.predictions (transform: dense, act,
     * LayerNorm; decoder), RoBERTa's lm_head (dense, gelu, layer_norm,
     * decoder), ALBERT's predictions (dense to the embedding size) */
    static const char *const head[] = {"cls", "lm_head", "predictions"};
    s = hf_enter(h, "%s", head[c->kind]);
    size_t p1 = c->kind == K_BERT ? hf_enter(h, "predictions") : h->scope_len;
    size_t u = c->kind == K_BERT ? hf_enter(h, "transform") : h->scope_len;
    size_t v = hf_enter(h, "dense");
    int32_t y = hf_linear(h, x, E, EMB, true, -1, NULL);
    hf_leave(h, v);
    y = hf_gpt2_act(h, c->kind == K_ROBERTA ? "gelu" : c->act, y);
    v = hf_enter(h, c->kind == K_ROBERTA ? "layer_norm" : "LayerNorm");
    y = hf_layer_norm(h, y, EMB, c->eps);
    hf_leave(h, v);
    hf_leave(h, u);
    int32_t bias = hf_param(h, "bias", DM_FLOAT, 1, &c->vocab);
    u = hf_enter(h, "decoder"); /* tied to the word embeddings; its bias is the head's bias */
    y = hf_linear(h, y, EMB, c->vocab, false, word, NULL);
    hf_leave(h, u);
    h->out_name = "logits";
    y = hf_op(h, DM_OP_Add, 2, bias, y);
    hf_leave(h, p1);
    hf_leave(h, s);
    return y;
}

/* DistilBERT's MultiHeadSelfAttention (eager: q scaled before the product,
 * masked_fill by a bool mask) or DistilBertSdpaAttention, then out_lin. */
static int32_t distil_attention(struct hf *h, const struct bert *c, int32_t x, int32_t mask,
                                int32_t *probs)
{
    *probs = -1;
    int64_t E = c->hidden, H = c->heads, D = c->hidden / c->heads;
    int32_t qkv[3];
    static const char *const proj[3] = {"q_lin", "k_lin", "v_lin"};
    encoder_heads(h, x, E, H, proj, qkv);
    int32_t o;
    if (h->flash) {
        /* DistilBertFlashAttention2: q_lin, k_lin, v_lin viewed [B, S, H, D]
         * (no copies) into flash_attn_func, not causal; DistilBertModel passes
         * no mask without padding (an all-ones attention_mask becomes None) */
        o = hf_flash_attention(h, qkv[0], qkv[1], qkv[2], 1.0 / sqrt((double)D), false);
    } else if (h->sdpa) {
        o = hf_sdpa_attention(h, qkv, -1, false, H, H, D, D, 0, c->attn_drop);
    } else {
        /* q / sqrt(D) keeps q's memory order (still permuted) */
        int32_t c3[3], scaled[3] = {hf_op(h, DM_OP_Div, 2, qkv[0], hf_const_f(h, sqrt((double)D))),
                                    qkv[1], qkv[2]};
        hf_heads_fold(h, scaled, H, D, c3);
        int32_t kt = hf_transpose(h, c3[1], INTS(0, 1, 3, 2));
        int32_t w = hf_op(h, DM_OP_MatMul, 2, c3[0], kt);
        w = hf_op(h, DM_OP_Where, 3, mask, hf_const_f(h, -FLT_MAX), w); /* masked_fill(mask, min) */
        w = hf_op(h, DM_OP_Softmax, 1, w);
        hf_attr_i(h, "axis", -1);
        w = hf_dropout(h, w, c->attn_drop);
        *probs = w;
        o = hf_op(h, DM_OP_MatMul, 2, w, c3[2]);
    }
    o = hf_transpose(h, o, INTS(0, 2, 1, 3)); /* unshape: hf_transpose(1, 2).contiguous() */
    o = hf_reshape(h, o, INTS(0, 0, -1));
    size_t t = hf_enter(h, "out_lin");
    o = hf_linear(h, o, E, E, true, -1, NULL);
    hf_leave(h, t);
    return o;
}

/* DistilBERT's task heads (modeling_distilbert.py, 4.51-5.24): for
 * sequence classification and multiple choice hidden[:, 0], pre_classifier,
 * ReLU, dropout (seq_classif_dropout), classifier (num_labels; 1, viewed
 * [B, C]); for question answering dropout (qa_dropout), then hf_qa_logits; for
 * token classification dropout (dropout) and classifier. */
static int32_t distil_head(struct hf *h, const struct bert *c, int32_t x, int32_t *second)
{
    int64_t E = c->hidden;
    *second = -1;
    if (c->head == HEAD_QA)
        return hf_qa_logits(h, hf_dropout(h, x, c->qa_drop), E, second);
    if (c->head == HEAD_TOKCLS)
        return classifier(h, x, E, c->labels, c->hidden_drop, true);
    size_t s = hf_enter(h, "pre_classifier");
    int32_t p = hf_linear(h, hf_first_token(h, x), E, E, true, -1, NULL);
    hf_leave(h, s);
    p = hf_op(h, DM_OP_Relu, 1, p);
    bool mc = c->head == HEAD_MC;
    int32_t y = classifier(h, p, E, mc ? 1 : c->labels, c->seq_drop, !mc);
    if (!mc)
        return y;
    int32_t shape = hf_op(h, DM_OP_Concat, 2, hf_const_ints(h, INTS(-1)), c->choices);
    hf_attr_i(h, "axis", 0);
    h->out_name = "logits";
    return hf_op(h, DM_OP_Reshape, 2, y, shape);
}

/* DistilBertModel, or DistilBertForMaskedLM (vocab_transform, gelu,
 * vocab_layer_norm, vocab_projector tied to the word embeddings), as of
 * transformers 4.40-4.48, called as model(input_ids) (attention_mask ones). */
static int32_t build_distilbert(struct hf *h, const struct bert *c, int32_t ids, int32_t *second)
{
    int64_t E = c->hidden, P = c->positions;
    size_t top = c->head != HEAD_BASE ? hf_enter(h, "distilbert") : h->scope_len;
    size_t s = hf_enter(h, "embeddings");
    int32_t word = hf_param(h, "word_embeddings.weight", DM_FLOAT, 2, (int64_t[]){c->vocab, E});
    int32_t posw = hf_param(h, "position_embeddings.weight", DM_FLOAT, 2, (int64_t[]){P, E});
    int32_t pos_buf = hf_param(h, "position_ids", DM_INT64, 2, (int64_t[]){1, P});
    int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t pos_ids = hf_op(h, DM_OP_Slice, 4, pos_buf, hf_const_ints(h, INTS(0)), seq,
                            hf_const_ints(h, INTS(1)));
    /* inputs_embeds, a local of the embeddings' forward: freed when it
     * returns (measured with real transformers 4.51 and 5.24 on the CPU:
     * not live at an inference peak in the second layer's FFN) */
    int32_t x = hf_op(h, DM_OP_Gather, 2, word, ids);
    int32_t pe = hf_op(h, DM_OP_Gather, 2, posw, pos_ids);
    x = hf_op(h, DM_OP_Add, 2, x, pe);
    size_t t = hf_enter(h, "LayerNorm");
    x = hf_layer_norm(h, x, E, c->eps);
    hf_leave(h, t);
    x = hf_dropout(h, x, c->hidden_drop);
    hf_leave(h, s);
    /* eager: (ones(B, S) == 0).view(B, 1, 1, S), expanded: a bool [B, S] */
    int32_t mask = -1;
    if (!h->sdpa) {
        int32_t shape = hf_op(h, DM_OP_Shape, 1, ids);
        int32_t ones = hf_op(h, DM_OP_ConstantOfShape, 1, shape);
        int32_t zero = hf_const_f(h, 0.0);
        mask = hf_op(h, DM_OP_Equal, 2, ones, zero);
        mask = hf_unsqueeze(h, mask, INTS(1, 2));
    }
    size_t tr = hf_enter(h, "transformer");
    int32_t prev_probs = -1;
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layer.%d", i);
        s = hf_enter(h, "attention");
        int32_t probs;
        int32_t a = distil_attention(h, c, x, mask, &probs);
        hf_leave(h, s);
        a = hf_op(h, DM_OP_Add, 2, a, x);
        s = hf_enter(h, "sa_layer_norm");
        a = hf_layer_norm(h, a, E, c->eps);
        hf_leave(h, s);
        s = hf_enter(h, "ffn");
        t = hf_enter(h, "lin1");
        int32_t y = hf_linear(h, a, E, c->inter, true, -1, NULL);
        hf_leave(h, t);
        y = hf_gpt2_act(h, c->act, y);
        t = hf_enter(h, "lin2");
        y = hf_linear(h, y, c->inter, E, true, -1, NULL);
        hf_leave(h, t);
        y = hf_dropout(h, y, c->hidden_drop);
        hf_leave(h, s);
        y = hf_op(h, DM_OP_Add, 2, y, a);
        s = hf_enter(h, "output_layer_norm");
        x = hf_layer_norm(h, y, E, c->eps);
        hf_leave(h, s);
        hold_probs(h, c, probs, &prev_probs);
        hf_leave(h, ls);
    }
    hf_leave(h, tr);
    hf_hold(h, mask, hf_last_node(h));
    hf_leave(h, top);
    if (c->head == HEAD_BASE)
        return x;
    if (c->head != HEAD_MLM)
        return distil_head(h, c, x, second);
    s = hf_enter(h, "vocab_transform");
    int32_t y = hf_linear(h, x, E, E, true, -1, NULL);
    hf_leave(h, s);
    y = hf_gpt2_act(h, c->act, y);
    s = hf_enter(h, "vocab_layer_norm");
    y = hf_layer_norm(h, y, E, c->eps);
    hf_leave(h, s);
    s = hf_enter(h, "vocab_projector"); /* weight tied to the word embeddings */
    y = hf_linear(h, y, E, c->vocab, true, word, "logits");
    hf_leave(h, s);
    return y;
}

/* The head `architectures` names for a family whose classes start with
 * `cls` ("Bert", "DistilBert"): <cls>Model, <cls>ForMaskedLM or
 * <cls>ForSequenceClassification (num_labels from id2label, as
 * PretrainedConfig reads it, else 2); none named: the bare model. */

static void read_head(struct hf *h, struct bert *c, const char *cls)
{
    static const struct {
        const char *suffix;
        enum bert_head head;
    } heads[] = {{"Model", HEAD_BASE},
                 {"ForMaskedLM", HEAD_MLM},
                 {"ForSequenceClassification", HEAD_SEQCLS},
                 {"ForQuestionAnswering", HEAD_QA},
                 {"ForTokenClassification", HEAD_TOKCLS},
                 {"ForMultipleChoice", HEAD_MC}};
    json_t *arch = json_object_get(h->root, "architectures");
    size_t i, n = strlen(cls);
    json_t *a;
    c->head = HEAD_BASE;
    if (!json_is_array(arch) || json_array_size(arch) == 0)
        return;
    json_array_foreach(arch, i, a)
    {
        const char *s = json_is_string(a) ? json_string_value(a) : "";
        for (size_t k = 0; strncmp(s, cls, n) == 0 && k < sizeof heads / sizeof *heads; k++)
            if (strcmp(s + n, heads[k].suffix) == 0) {
                c->head = heads[k].head;
                c->labels = hf_num_labels(h);
                if (c->head == HEAD_QA && c->labels != 2)
                    hf_fail(h, DNNMEM_E_MODEL,
                            "%s: num_labels is %lld; its logits split into start and end (2)", s,
                            (long long)c->labels);
                if (c->head != HEAD_BASE && c->head != HEAD_MLM)
                    h->g->head = dm_arena_strdup(&h->g->arena, s);
                return;
            }
    }
    a = json_array_get(arch, 0);
    hf_fail(h, DNNMEM_E_UNSUPPORTED,
            "config field 'architectures' names %s; the heads built are %sModel, %sForMaskedLM, "
            "%sForSequenceClassification, %sForQuestionAnswering, %sForTokenClassification and "
            "%sForMultipleChoice (name one of them in 'architectures')",
            json_is_string(a) ? json_string_value(a) : "a non-string", cls, cls, cls, cls, cls, cls);
}

static void read_distilbert(struct hf *h, struct bert *c)
{
    c->kind = K_DISTIL;
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = c->emb = hf_get_int(h, "dim", 768, MAX_SIZE);
    c->inter = hf_get_int(h, "hidden_dim", 3072, MAX_SIZE);
    c->layers = hf_get_int(h, "n_layers", 6, MAX_LAYERS);
    c->heads = hf_get_int(h, "n_heads", 12, MAX_SIZE);
    c->positions = hf_get_int(h, "max_position_embeddings", 512, MAX_SIZE);
    if (h->st == DNNMEM_OK && c->hidden % c->heads)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'dim' (%lld) is not a multiple of 'n_heads' (%lld)",
                (long long)c->hidden, (long long)c->heads);
    if (h->st == DNNMEM_OK && hf_get_bool(h, "sinusoidal_pos_embds", false))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'sinusoidal_pos_embds' is true; not modelled");
    c->act = hf_get_str(h, "activation", "gelu");
    if (h->st == DNNMEM_OK && strcmp(c->act, "gelu") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'activation' is '%s'; only gelu is modelled for distilbert", c->act);
    c->eps = 1e-12; /* nn.LayerNorm(dim, eps=1e-12), not a config field */
    c->attn_drop = hf_get_num(h, "attention_dropout", 0.1, 0, 1);
    c->hidden_drop = hf_get_num(h, "dropout", 0.1, 0, 1);
    c->qa_drop = hf_get_num(h, "qa_dropout", 0.1, 0, 1);
    c->seq_drop = hf_get_num(h, "seq_classif_dropout", 0.2, 0, 1);
    if (h->st == DNNMEM_OK)
        read_head(h, c, "DistilBert");
}

/* BERT, RoBERTa (BERT's fields; RobertaConfig's defaults are BertConfig's,
 * pad_token_id 1) and ALBERT (AlbertConfig: embedding_size 128,
 * num_hidden_groups 1, inner_group_num 1, hidden_act gelu_new, no dropout). */
static void read_bert(struct hf *h, enum bert_kind kind, struct bert *c)
{
    bool albert = kind == K_ALBERT;
    c->kind = kind;
    c->vocab = hf_get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", albert ? 4096 : 768, MAX_SIZE);
    c->inter = hf_get_int(h, "intermediate_size", albert ? 16384 : 3072, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", 12, MAX_LAYERS);
    c->heads = hf_get_int(h, "num_attention_heads", albert ? 64 : 12, MAX_SIZE);
    c->positions = hf_get_int(h, "max_position_embeddings", 512, MAX_SIZE);
    c->types = hf_get_int(h, "type_vocab_size", 2, MAX_SIZE);
    c->emb = albert ? hf_get_int(h, "embedding_size", 128, MAX_SIZE) : c->hidden;
    c->groups = albert ? hf_get_int(h, "num_hidden_groups", 1, MAX_LAYERS) : 1;
    c->inner = albert ? hf_get_int(h, "inner_group_num", 1, MAX_LAYERS) : 1;
    c->pad = kind == K_ROBERTA ? hf_get_int(h, "pad_token_id", 1, MAX_SIZE) : 0;
    if (h->st == DNNMEM_OK && c->hidden % c->heads)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' (%lld)",
                (long long)c->hidden, (long long)c->heads);
    if (h->st == DNNMEM_OK && (c->groups < 1 || c->groups > c->layers || c->layers % c->groups))
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'num_hidden_groups' (%lld) must divide 'num_hidden_layers' (%lld)",
                (long long)c->groups, (long long)c->layers);
    if (h->st == DNNMEM_OK && c->inner < 1)
        hf_fail(h, DNNMEM_E_MODEL, "config field 'inner_group_num' must be at least 1");
    if (h->st == DNNMEM_OK && kind == K_ROBERTA && c->pad >= c->positions)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'pad_token_id' (%lld) leaves no position below "
                "'max_position_embeddings' (%lld)",
                (long long)c->pad, (long long)c->positions);
    c->act = hf_get_str(h, "hidden_act", albert ? "gelu_new" : "gelu");
    if (h->st == DNNMEM_OK && strcmp(c->act, "gelu") != 0 && strcmp(c->act, "gelu_new") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'hidden_act' is '%s'; only gelu and gelu_new "
                "are modelled", c->act);
    const char *pet = hf_get_str(h, "position_embedding_type", "absolute");
    if (h->st == DNNMEM_OK && strcmp(pet, "absolute") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'position_embedding_type' is '%s'; only 'absolute' is modelled", pet);
    c->eps = hf_get_num(h, "layer_norm_eps", 1e-12, 0, 1);
    c->attn_drop = hf_get_num(h, "attention_probs_dropout_prob", albert ? 0 : 0.1, 0, 1);
    c->hidden_drop = hf_get_num(h, "hidden_dropout_prob", albert ? 0 : 0.1, 0, 1);
    /* classifier_dropout (BERT, RoBERTa; null: hidden_dropout_prob) or
     * ALBERT's classifier_dropout_prob */
    json_t *cd = json_object_get(h->root,
                                 albert ? "classifier_dropout_prob" : "classifier_dropout");
    c->cls_drop = cd && !json_is_null(cd)
                      ? hf_get_num(h, albert ? "classifier_dropout_prob" : "classifier_dropout",
                                   0, 0, 1)
                      : albert ? 0.1 : c->hidden_drop;
    static const char *const cls[] = {"Bert", "Roberta", "Albert"};
    if (h->st == DNNMEM_OK)
        read_head(h, c, cls[kind]);
}

/* An encoder's config read and model built: last_hidden_state and
 * pooler_output, or the head's logits. */
static enum dnnmem_status encoder(struct hf *h, const char *type, enum bert_kind kind)
{
    struct bert c = {0};
    if (!hf_check(h, type))
        return h->st;
    if (kind == K_DISTIL)
        read_distilbert(h, &c);
    else
        read_bert(h, kind, &c);
    if (!hf_begin(h, type))
        return h->st;
    int32_t ids = c.head == HEAD_MC ? hf_choice_ids(h, 2, &c.choices) : hf_input_ids(h, 2);
    int32_t pooled = -1;
    if (ids < 0)
        return h->st;
    int32_t x = kind == K_DISTIL ? build_distilbert(h, &c, ids, &pooled)
                                 : build_bert(h, &c, ids, &pooled);
    return hf_encoder_outputs(h, x, pooled);
}

enum dnnmem_status hf_bert(struct hf *h, const char *type)
{
    return encoder(h, type,
                   strcmp(type, "roberta") == 0  ? K_ROBERTA
                   : strcmp(type, "albert") == 0 ? K_ALBERT
                                                 : K_BERT);
}

enum dnnmem_status hf_distilbert(struct hf *h, const char *type)
{
    return encoder(h, type, K_DISTIL);
}
