/*
 * contrib.c: shape functions for ONNX Runtime's com.microsoft transformer ops
 * (schemas: onnxruntime/core/graph/contrib_ops/bert_defs.cc). B = batch,
 * S = sequence, P = past sequence, N = heads, H = head size.
 */
#include "dnnmem-impl.h"

static enum dnnmem_status need(struct dm_infer *ctx, const struct dm_node *n, int i, int rank,
                               const char *what, const struct dm_tinfo **out)
{
    const struct dm_tinfo *t = dm_in(ctx, n, i);
    if (!t || t->absent)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "input %d (%s) is required", i, what);
    if (rank >= 0 && t->rank != rank)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "%s has rank %d; %d expected", what, t->rank,
                              rank);
    *out = t;
    return DNNMEM_OK;
}

/* Attention: input [B,S,Din], weights [Din,3*D] (or qkv_hidden_sizes),
 * optional past [2,B,N,P,H] -> output [B,S,Dv], present [2,B,N,P+S,H]. */
enum dnnmem_status dm_shape_ms_attention(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x = NULL, *w = NULL;
    DM_TRY(need(ctx, n, 0, 3, "input", &x));
    DM_TRY(need(ctx, n, 1, 2, "weights", &w));
    int64_t heads = dm_attr_int(n, "num_heads", 0), cnt;
    const int64_t *qkv = dm_attr_ints(n, "qkv_hidden_sizes", &cnt);
    if (heads <= 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "num_heads must be positive");
    if (w->dims[0] != x->dims[2])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "weights have %lld rows; input has %lld features",
                              (long long)w->dims[0], (long long)x->dims[2]);
    int64_t dq = w->dims[1] / 3, dk = dq, dv = dq;
    if (cnt == 3) {
        dq = qkv[0], dk = qkv[1], dv = qkv[2];
        if (dq < 0 || dk < 0 || dv < 0 || dq + dk + dv != w->dims[1])
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "qkv_hidden_sizes do not sum to %lld",
                                  (long long)w->dims[1]);
    } else if (w->dims[1] % 3) {
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "weights width %lld is not 3 x hidden",
                              (long long)w->dims[1]);
    }
    if (dk % heads || dv % heads)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "hidden size is not a multiple of %lld heads",
                              (long long)heads);
    int64_t out[3] = {x->dims[0], x->dims[1], dv};
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, 3, out));
    if (dm_has_out(n, 1)) {
        int64_t past = 0;
        const struct dm_tinfo *p = dm_in(ctx, n, 4);
        if (p && !p->absent) {
            if (p->rank != 5 || p->dims[0] != 2 || p->dims[1] != x->dims[0])
                return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "past must be [2,batch,heads,past,head]");
            past = p->dims[3];
        }
        int64_t total;
        if (!dm_add_ok(past, x->dims[1], &total))
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "sequence length overflows");
        int64_t present[5] = {2, x->dims[0], heads, total, dk / heads};
        DM_TRY(dm_set_out(ctx, n, 1, x->dtype, 5, present));
    }
    return DNNMEM_OK;
}

/* MatMulNBits (matmul_nbits.cc): A [..., K], B uint8 [N, ceil(K / block),
 * block * bits / 8] -> Y [..., N] of A's dtype; attributes K, N, bits,
 * block_size (a power of two, >= 16). */
enum dnnmem_status dm_shape_ms_matmul_nbits(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *a = NULL, *b = NULL;
    DM_TRY(need(ctx, n, 0, -1, "A", &a));
    DM_TRY(need(ctx, n, 1, 3, "B", &b));
    int64_t K = dm_attr_int(n, "K", 0), N = dm_attr_int(n, "N", 0);
    int64_t bits = dm_attr_int(n, "bits", 4), block = dm_attr_int(n, "block_size", 0);
    if (K <= 0 || N <= 0 || (bits != 4 && bits != 8) || block < 16 || (block & (block - 1)))
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              "needs K, N > 0, bits 4 or 8 and a power-of-two block_size >= 16");
    if (a->rank < 1 || a->dims[a->rank - 1] != K)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "A's last dim is not K (%lld)", (long long)K);
    if (b->dims[0] != N || b->dims[1] != (K + block - 1) / block || b->dims[2] != block * bits / 8)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE,
                              "B must be [N, ceil(K / block_size), block_size * bits / 8]");
    int64_t y[DM_MAX_DIMS];
    for (int k = 0; k < a->rank; k++)
        y[k] = k == a->rank - 1 ? N : a->dims[k];
    return dm_set_out(ctx, n, 0, a->dtype, a->rank, y);
}

/* EmbedLayerNormalization: input_ids [B,S], word_embedding [V,D] ->
 * output [B,S,D], mask_index [B] int32, embedding_sum [B,S,D]. */
enum dnnmem_status dm_shape_ms_embed_layernorm(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *ids = NULL, *we = NULL;
    DM_TRY(need(ctx, n, 0, 2, "input_ids", &ids));
    DM_TRY(need(ctx, n, 2, 2, "word_embedding", &we));
    int64_t out[3] = {ids->dims[0], ids->dims[1], we->dims[1]};
    DM_TRY(dm_set_out(ctx, n, 0, we->dtype, 3, out));
    DM_TRY(dm_set_out(ctx, n, 1, DM_INT32, 1, out));
    return dm_set_out(ctx, n, 2, we->dtype, 3, out);
}

/* SkipLayerNormalization: input [B,S,D] (+ skip, gamma, beta, bias) ->
 * output like input, mean and inv_std_var [B,S,1] float, input+skip+bias sum. */
enum dnnmem_status dm_shape_ms_skip_layernorm(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *x = NULL, *skip = NULL;
    DM_TRY(need(ctx, n, 0, -1, "input", &x));
    DM_TRY(need(ctx, n, 1, -1, "skip", &skip));
    if (x->rank < 2 || x->dims[x->rank - 1] != skip->dims[skip->rank - 1])
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "input and skip differ in hidden size");
    int64_t stat[DM_MAX_DIMS];
    for (int k = 0; k < x->rank; k++)
        stat[k] = k == x->rank - 1 ? 1 : x->dims[k];
    DM_TRY(dm_set_out(ctx, n, 0, x->dtype, x->rank, x->dims));
    DM_TRY(dm_set_out(ctx, n, 1, DM_FLOAT, x->rank, stat));
    DM_TRY(dm_set_out(ctx, n, 2, DM_FLOAT, x->rank, stat));
    return dm_set_out(ctx, n, 3, x->dtype, x->rank, x->dims);
}

/* GroupQueryAttention: query [B,S,N*H] (key, value [B,S,Nkv*H]; without
 * them query packs all three), past_key/value [B,Nkv,P,H] -> output
 * [B,S,N*H], present_key/value [B,Nkv,T,H] with T the value of
 * total_sequence_length when known, else P + S. */
enum dnnmem_status dm_shape_ms_gqa(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *q = NULL;
    DM_TRY(need(ctx, n, 0, 3, "query", &q));
    int64_t heads = dm_attr_int(n, "num_heads", 0), kv = dm_attr_int(n, "kv_num_heads", 0);
    if (heads <= 0 || kv <= 0 || heads % kv)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL,
                              "num_heads (%lld) must be a positive multiple of kv_num_heads (%lld)",
                              (long long)heads, (long long)kv);
    const struct dm_tinfo *k = dm_in(ctx, n, 1);
    bool packed = !k || k->absent;
    int64_t width = q->dims[2], div = packed ? heads + 2 * kv : heads;
    if (width % div)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "query width %lld does not split into %lld heads",
                              (long long)width, (long long)div);
    int64_t head = width / div;
    int64_t out[3] = {q->dims[0], q->dims[1], heads * head};
    DM_TRY(dm_set_out(ctx, n, 0, q->dtype, 3, out));
    int64_t past = 0, total;
    const struct dm_tinfo *pk = dm_in(ctx, n, 3);
    if (pk && !pk->absent) {
        if (pk->rank != 4)
            return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "past_key must be [batch,kv_heads,past,head]");
        past = pk->dims[2];
    }
    const struct dm_tinfo *ts = dm_in(ctx, n, 6);
    if (ts && ts->value && ts->value->n == 1 && !ts->value->is_float)
        total = ts->value->i[0] > past ? ts->value->i[0] : past;
    else if (!dm_add_ok(past, q->dims[1], &total))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "sequence length overflows");
    int64_t present[4] = {q->dims[0], kv, total, head};
    DM_TRY(dm_set_out(ctx, n, 1, q->dtype, 4, present));
    return dm_set_out(ctx, n, 2, q->dtype, 4, present);
}

/* QuantLinear (dnnmem's, ops.def): A [..., K], W in any layout, bias [N]
 * (optional) -> Y [..., N] of A's dtype. */
enum dnnmem_status dm_shape_quant_linear(struct dm_infer *ctx, const struct dm_node *n)
{
    const struct dm_tinfo *a = NULL, *w = NULL;
    DM_TRY(need(ctx, n, 0, -1, "A", &a));
    DM_TRY(need(ctx, n, 1, -1, "W", &w));
    int64_t K = dm_attr_int(n, "K", 0), N = dm_attr_int(n, "N", 0);
    if (K <= 0 || N <= 0)
        return dm_shape_error(ctx, n, DNNMEM_E_MODEL, "needs K, N > 0");
    if (a->rank < 1 || a->dims[a->rank - 1] != K)
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "A's last dim is not K (%lld)", (long long)K);
    const struct dm_tinfo *b = dm_in(ctx, n, 2);
    if (b && !b->absent && (b->rank != 1 || b->dims[0] != N))
        return dm_shape_error(ctx, n, DNNMEM_E_SHAPE, "bias must be [N] (%lld)", (long long)N);
    int64_t y[DM_MAX_DIMS];
    for (int k = 0; k < a->rank; k++)
        y[k] = k == a->rank - 1 ? N : a->dims[k];
    return dm_set_out(ctx, n, 0, a->dtype, a->rank, y);
}
