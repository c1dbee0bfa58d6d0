/* sequence.c: Keras layers over sequences: TimeDistributed, Embedding, the recurrent
 * layers, Bidirectional, MultiHeadAttention (keras.h). */

#include "keras.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TimeDistributed(layer): the layer on every step of [batch, T, ...] at once.
 * Dense applies to the last axis anyway; other layers see [batch * T, ...]
 * (a Reshape view before and after). */
void dm_kr_time_distributed_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, 3, DM_MAX_DIMS))
        return;
    json_t *inner = dm_kr_field(io->cfg, "layer");
    const char *cls = json_string_value(dm_kr_field(inner, "class_name"));
    if (!cls || !json_is_object(dm_kr_field(inner, "config"))) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'layer' (the wrapped layer) is missing");
        return;
    }
    if (!strcmp(cls, "Dense")) {
        struct layer_io lio = {.in = x, .n_in = 1};
        k->call_layer(k, inner, &lio);
        memcpy(io->out, lio.out, sizeof lio.out);
        io->n_out = lio.n_out;
        return;
    }
    int64_t T = dm_kr_known(k, x, 1, "time axis");
    struct kt in = *x;
    int64_t shape[DM_MAX_DIMS];
    in.rank = x->rank - 1;
    in.dim[0] = -1;
    shape[0] = -1;
    for (int a = 2; a < x->rank; a++) {
        in.dim[a - 1] = dm_kr_known(k, x, a, "step shape");
        shape[a - 1] = in.dim[a - 1];
    }
    if (k->st != DNNMEM_OK)
        return;
    dm_kr_perm_identity(in.rank, in.perm);
    in.id = dm_kr_op(k, DM_OP_Reshape, 2, dm_kr_keras_order(k, x),
                     dm_kr_const_ints(k, in.rank, shape));
    struct layer_io lio = {.in = &in, .n_in = 1};
    k->call_layer(k, inner, &lio);
    if (k->st != DNNMEM_OK)
        return;
    if (lio.n_out != 1) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "a wrapped layer with %d outputs", lio.n_out);
        return;
    }
    const struct kt *o = &lio.out[0];
    if (o->rank + 1 > DM_MAX_DIMS) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "the output has too many dims");
        return;
    }
    struct kt *y = &io->out[0];
    *y = *o;
    y->rank = o->rank + 1;
    y->dim[0] = x->dim[0];
    y->dim[1] = T;
    shape[0] = -1;
    shape[1] = T;
    for (int a = 1; a < o->rank; a++) {
        y->dim[a + 1] = o->dim[a];
        shape[a + 1] = o->dim[a];
        if (o->dim[a] < 0) {
            dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "the wrapped layer's output has a None dim");
            return;
        }
    }
    dm_kr_perm_identity(y->rank, y->perm);
    y->id = dm_kr_op(k, DM_OP_Reshape, 2, dm_kr_keras_order(k, o),
                     dm_kr_const_ints(k, y->rank, shape));
    io->n_out = 1;
}

/* Embedding(input_dim, output_dim): a lookup of [batch, ...] indices. */
void dm_kr_embedding_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, 1, DM_MAX_DIMS - 1))
        return;
    int64_t vocab = dm_kr_get_int(k, io->cfg, "input_dim", INT64_MIN, 1);
    int64_t dim = dm_kr_get_int(k, io->cfg, "output_dim", INT64_MIN, 1);
    if (k->st != DNNMEM_OK)
        return;
    int32_t xi = dm_kr_keras_order(k, x);
    if (dm_dtype_is_float(x->dtype)) { /* Keras casts float ids to int32 first */
        xi = dm_kr_op(k, DM_OP_Cast, 1, xi);
        dm_kr_attr_i(k, "to", DM_INT32);
    }
    int32_t w = dm_kr_weight(k, "embeddings", 2, (int64_t[]){vocab, dim});
    struct kt *y = &io->out[0];
    *y = *x;
    y->dtype = DM_FLOAT;
    y->rank = x->rank + 1;
    y->dim[x->rank] = dim;
    dm_kr_perm_identity(y->rank, y->perm);
    y->id = dm_kr_op(k, DM_OP_Gather, 2, w, xi);
    io->n_out = 1;
}

/* LSTM, GRU, SimpleRNN (and CuDNNLSTM, CuDNNGRU), one or two directions. */
struct rnn {
    enum dm_op op;
    int64_t gates, units;
    int n_bias;          /* bias vectors per direction: 0, 1 or 2 */
    bool seq, state, backwards;
};

static void read_rnn(struct keras *k, json_t *cfg, const char *cls, struct rnn *r)
{
    memset(r, 0, sizeof *r);
    bool cudnn = !strncmp(cls, "CuDNN", 5);
    const char *base = cudnn ? cls + 5 : cls;
    if (!strcmp(base, "LSTM")) {
        r->op = DM_OP_LSTM;
        r->gates = 4;
    } else if (!strcmp(base, "GRU")) {
        r->op = DM_OP_GRU;
        r->gates = 3;
    } else if (!strcmp(cls, "SimpleRNN")) {
        r->op = DM_OP_RNN;
        r->gates = 1;
    } else {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "recurrent layer '%s' is not supported (LSTM, GRU, "
                   "SimpleRNN, CuDNNLSTM, CuDNNGRU)", cls);
        return;
    }
    r->units = dm_kr_get_int(k, cfg, "units", INT64_MIN, 1);
    bool bias = cudnn || dm_kr_get_bool(k, cfg, "use_bias", true);
    /* GRU's reset_after: false in Keras 2 before 2.3, true after (and in
     * Keras 3); it gives GRU a second bias vector */
    bool two = cudnn || (r->op == DM_OP_GRU && dm_kr_get_bool(k, cfg, "reset_after", true));
    r->n_bias = bias ? (two ? 2 : 1) : 0;
    r->seq = dm_kr_get_bool(k, cfg, "return_sequences", false);
    r->state = dm_kr_get_bool(k, cfg, "return_state", false);
    r->backwards = dm_kr_get_bool(k, cfg, "go_backwards", false);
    if (dm_kr_get_bool(k, cfg, "time_major", false))
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "time_major true is not supported");
}

/* The recurrent node over x [batch, seq, input] (Keras order); dirs 1 or 2.
 * Outputs: Y [batch, seq, dirs, units], Y_h (and Y_c) [batch, dirs, units]. */
static struct dm_node *rnn_node(struct keras *k, const struct rnn *r, int32_t x, int64_t in,
                                int dirs, const char *wprefix)
{
    int64_t gu;
    if (!dm_mul_ok(r->gates, r->units, &gu)) {
        dm_kr_fail(k, DNNMEM_E_SHAPE, "units overflow");
        return NULL;
    }
    char wn[3][64];
    snprintf(wn[0], sizeof wn[0], "%skernel", wprefix);
    snprintf(wn[1], sizeof wn[1], "%srecurrent_kernel", wprefix);
    snprintf(wn[2], sizeof wn[2], "%sbias", wprefix);
    const char *wname[3];
    for (int i = 0; i < 3; i++)
        wname[i] = dm_arena_strdup(&k->g->arena, wn[i]);
    if (!wname[0] || !wname[1] || !wname[2]) {
        dm_kr_oom(k);
        return NULL;
    }
    int32_t w = dm_kr_weight(k, wname[0], 3, (int64_t[]){dirs, gu, in});
    int32_t rr = dm_kr_weight(k, wname[1], 3, (int64_t[]){dirs, gu, r->units});
    int32_t b = r->n_bias ? dm_kr_weight(k, wname[2], 2, (int64_t[]){dirs, r->n_bias * gu}) : -1;
    int32_t in4[4] = {x, w, rr, b};
    struct dm_node *n = dm_kr_node(k, r->op, b >= 0 ? 4 : 3, in4, r->op == DM_OP_LSTM ? 3 : 2);
    if (!n)
        return NULL;
    dm_kr_attr_i(k, "hidden_size", r->units);
    dm_kr_attr_i(k, "layout", 1);
    dm_kr_attr_s(k, "direction",
                 dirs == 2 ? "bidirectional" : r->backwards ? "reverse" : "forward");
    if (r->op == DM_OP_GRU && r->n_bias == 2)
        dm_kr_attr_i(k, "linear_before_reset", 1);
    return &k->g->nodes[k->g->n_nodes - 1];
}

void dm_kr_rnn_layer(struct keras *k, struct layer_io *io, const char *cls)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, 3, 3))
        return;
    struct rnn r;
    read_rnn(k, io->cfg, cls, &r);
    int64_t in = dm_kr_known(k, x, 2, "feature dim");
    if (k->st != DNNMEM_OK)
        return;
    int32_t xi = dm_kr_keras_order(k, x);
    struct dm_node *n = rnn_node(k, &r, xi, in, 1, "");
    if (!n)
        return;
    int32_t yo = n->out[0], yh = n->out[1], yc = r.op == DM_OP_LSTM ? n->out[2] : -1;
    struct kt *y = &io->out[0];
    *y = *x;
    dm_kr_perm_identity(3, y->perm);
    if (r.seq) { /* [batch, seq, 1, units] -> [batch, seq, units]: a view */
        y->dim[2] = r.units;
        y->id = dm_kr_op(k, DM_OP_Reshape, 2, yo, dm_kr_const_ints(k, INTS(0, 0, r.units)));
    } else {
        y->rank = 2;
        y->dim[1] = r.units;
        y->id = dm_kr_op(k, DM_OP_Reshape, 2, yh, dm_kr_const_ints(k, INTS(0, r.units)));
    }
    io->n_out = 1;
    if (r.state) { /* [output, state_h(, state_c)] */
        int32_t hs[2] = {yh, yc};
        for (int i = 0; i < (yc >= 0 ? 2 : 1); i++) {
            struct kt *s = &io->out[1 + i];
            *s = *x;
            s->rank = 2;
            s->dim[1] = r.units;
            dm_kr_perm_identity(2, s->perm);
            s->id = dm_kr_op(k, DM_OP_Reshape, 2, hs[i], dm_kr_const_ints(k, INTS(0, r.units)));
            io->n_out++;
        }
    }
}

void dm_kr_bidirectional_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = dm_kr_one_input(k, io);
    if (!x || !dm_kr_need_rank(k, x, 3, 3))
        return;
    json_t *inner = dm_kr_field(io->cfg, "layer");
    const char *cls = json_string_value(dm_kr_field(inner, "class_name"));
    json_t *icfg = dm_kr_field(inner, "config");
    if (!cls || !json_is_object(icfg)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'layer' (the wrapped layer) is missing");
        return;
    }
    if (dm_kr_field(io->cfg, "backward_layer")) {
        json_t *bl = dm_kr_field(io->cfg, "backward_layer");
        const char *bc = json_string_value(dm_kr_field(bl, "class_name"));
        json_t *bcfg = dm_kr_field(bl, "config");
        if (!bc || strcmp(bc, cls) ||
            dm_kr_get_int(k, bcfg, "units", INT64_MIN, 1) !=
                dm_kr_get_int(k, icfg, "units", INT64_MIN, 1)) {
            if (k->st == DNNMEM_OK)
                dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "a backward_layer unlike the forward one "
                           "is not supported");
            return;
        }
    }
    struct rnn r;
    read_rnn(k, icfg, cls, &r);
    const char *mode = dm_kr_get_str(k, io->cfg, "merge_mode", "concat");
    int64_t in = dm_kr_known(k, x, 2, "feature dim");
    if (k->st != DNNMEM_OK)
        return;
    if (r.state) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED,
                   "return_state in a Bidirectional layer is not supported");
        return;
    }
    int32_t xi = dm_kr_keras_order(k, x);
    /* the forward and backward layers' variables, one tensor each of kernel,
     * recurrent_kernel, bias with a leading direction axis of 2 */
    struct dm_node *n = rnn_node(k, &r, xi, in, 2, "");
    if (!n)
        return;
    int32_t yo = n->out[0], yh = n->out[1];
    struct kt *y = &io->out[0];
    *y = *x;
    dm_kr_perm_identity(3, y->perm);
    int32_t base = r.seq ? yo : yh; /* [batch, (seq,) 2, units] */
    int dax = r.seq ? 2 : 1;
    if (!r.seq)
        y->rank = 2;
    if (!strcmp(mode, "concat")) {
        y->dim[dax] = 2 * r.units;
        y->id = dm_kr_op(k, DM_OP_Reshape, 2, base,
                         r.seq ? dm_kr_const_ints(k, INTS(0, 0, 2 * r.units))
                               : dm_kr_const_ints(k, INTS(0, 2 * r.units)));
    } else if (!strcmp(mode, "sum") || !strcmp(mode, "ave") || !strcmp(mode, "mul")) {
        y->dim[dax] = r.units;
        if (!strcmp(mode, "sum")) {
            y->id = dm_kr_op(k, DM_OP_ReduceSum, 2, base, dm_kr_const_ints(k, INTS(dax)));
        } else {
            y->id = dm_kr_op(k, !strcmp(mode, "ave") ? DM_OP_ReduceMean : DM_OP_ReduceProd, 1,
                             base);
            dm_kr_attr_ints(k, "axes", INTS(dax));
        }
        dm_kr_attr_i(k, "keepdims", 0);
    } else {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED,
                   "merge_mode '%s' is not supported (concat, sum, ave, mul)", mode);
        return;
    }
    io->n_out = 1;
}

/* x [batch, len, d] by a weight of Keras' shape [d, a, b] (EinsumDense
 * "abc,cde->abde"), plus a bias [a, b]: a MatMul by the weight seen as
 * [d, a*b] (a view), the bias added (seen as [a*b]). */
static int32_t einsum_dense(struct keras *k, int32_t x, const char *name, int64_t d, int64_t a,
                            int64_t b, bool bias)
{
    char wn[2][48];
    snprintf(wn[0], sizeof wn[0], "%s/kernel", name);
    snprintf(wn[1], sizeof wn[1], "%s/bias", name);
    const char *kn = dm_arena_strdup(&k->g->arena, wn[0]);
    const char *bn = dm_arena_strdup(&k->g->arena, wn[1]);
    if (!kn || !bn)
        return dm_kr_oom(k);
    int32_t w = dm_kr_weight(k, kn, 3, (int64_t[]){d, a, b});
    int32_t w2 = dm_kr_op(k, DM_OP_Reshape, 2, w, dm_kr_const_ints(k, INTS(d, a * b)));
    int32_t y = dm_kr_op(k, DM_OP_MatMul, 2, x, w2);
    if (bias) {
        int32_t bb = dm_kr_weight(k, bn, 2, (int64_t[]){a, b});
        int32_t b1 = dm_kr_op(k, DM_OP_Reshape, 2, bb, dm_kr_const_ints(k, INTS(a * b)));
        y = dm_kr_op(k, DM_OP_Add, 2, y, b1);
    }
    return y;
}

/* MultiHeadAttention(num_heads, key_dim, value_dim, output_shape, use_bias,
 * dropout) over query [batch, T, dq], value [batch, S, dv] and key (value by
 * default), as Keras computes it: the projections, the query scaled by
 * 1/sqrt(key_dim), scores [batch, heads, T, S], softmax, dropout, the
 * weighted values, the output projection. */
void dm_kr_mha_layer(struct keras *k, struct layer_io *io)
{
    if (io->n_in < 2 || io->n_in > 3) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "%d inputs; MultiHeadAttention takes query, value and "
                   "optionally key", io->n_in);
        return;
    }
    const struct kt *q = &io->in[0], *v = &io->in[1], *kk = io->n_in == 3 ? &io->in[2] : v;
    json_t *cfg = io->cfg;
    if (!dm_kr_need_rank(k, q, 3, 3) || !dm_kr_need_rank(k, v, 3, 3) ||
        !dm_kr_need_rank(k, kk, 3, 3))
        return;
    json_t *axes = dm_kr_field(cfg, "attention_axes");
    if (axes && !(json_is_array(axes) && json_array_size(axes) == 1 &&
                  json_integer_value(json_array_get(axes, 0)) == 1)) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "attention_axes other than the sequence axis");
        return;
    }
    int64_t H = dm_kr_get_int(k, cfg, "num_heads", INT64_MIN, 1);
    int64_t dk = dm_kr_get_int(k, cfg, "key_dim", INT64_MIN, 1);
    int64_t dv = dm_kr_get_int(k, cfg, "value_dim", dk, 1);
    bool bias = dm_kr_get_bool(k, cfg, "use_bias", true);
    double drop = dm_kr_get_num(k, cfg, "dropout", 0, 0, 1);
    int64_t qd = dm_kr_known(k, q, 2, "query width"), vd = dm_kr_known(k, v, 2, "value width"),
            kd = dm_kr_known(k, kk, 2, "key width");
    int64_t out = qd;
    json_t *os = dm_kr_field(cfg, "output_shape");
    if (os) {
        if (json_is_array(os) && json_array_size(os) == 1)
            os = json_array_get(os, 0);
        if (!dm_kr_json_int(os, &out) || out < 1 || out > MAX_DIM) {
            dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "output_shape must be one size");
            return;
        }
    }
    int64_t hk, hv;
    if (k->st != DNNMEM_OK || !dm_mul_ok(H, dk, &hk) || !dm_mul_ok(H, dv, &hv) || hk > MAX_DIM ||
        hv > MAX_DIM) {
        dm_kr_fail(k, DNNMEM_E_SHAPE, "num_heads x key_dim is an absurd size");
        return;
    }
    int32_t xq = dm_kr_keras_order(k, q), xv = dm_kr_keras_order(k, v);
    int32_t xk = dm_kr_keras_order(k, kk);
    int32_t pq = einsum_dense(k, xq, "query", qd, H, dk, bias);
    int32_t pk = einsum_dense(k, xk, "key", kd, H, dk, bias);
    int32_t pv = einsum_dense(k, xv, "value", vd, H, dv, bias);
    pq = dm_kr_op(k, DM_OP_Reshape, 2, pq, dm_kr_const_ints(k, INTS(0, 0, H, dk)));
    pq = dm_kr_op(k, DM_OP_Mul, 2, pq, dm_kr_const_f(k, 1.0 / sqrt((double)dk)));
    pk = dm_kr_op(k, DM_OP_Reshape, 2, pk, dm_kr_const_ints(k, INTS(0, 0, H, dk)));
    pv = dm_kr_op(k, DM_OP_Reshape, 2, pv, dm_kr_const_ints(k, INTS(0, 0, H, dv)));
    int32_t tq = dm_kr_op(k, DM_OP_Transpose, 1, pq);
    dm_kr_attr_ints(k, "perm", INTS(0, 2, 1, 3)); /* [B, H, T, dk] */
    int32_t tk = dm_kr_op(k, DM_OP_Transpose, 1, pk);
    dm_kr_attr_ints(k, "perm", INTS(0, 2, 3, 1)); /* [B, H, dk, S] */
    int32_t tv = dm_kr_op(k, DM_OP_Transpose, 1, pv);
    dm_kr_attr_ints(k, "perm", INTS(0, 2, 1, 3)); /* [B, H, S, dv] */
    int32_t sc = dm_kr_op(k, DM_OP_MatMul, 2, tq, tk);
    int32_t p = dm_kr_op(k, DM_OP_Softmax, 1, sc);
    dm_kr_attr_i(k, "axis", -1);
    if (drop > 0)
        p = dm_kr_op(k, DM_OP_Dropout, 2, p, dm_kr_const_f(k, drop < 1 ? drop : 0.5));
    int32_t o = dm_kr_op(k, DM_OP_MatMul, 2, p, tv); /* [B, H, T, dv] */
    o = dm_kr_op(k, DM_OP_Transpose, 1, o);
    dm_kr_attr_ints(k, "perm", INTS(0, 2, 1, 3));
    o = dm_kr_op(k, DM_OP_Reshape, 2, o, dm_kr_const_ints(k, INTS(0, 0, hv)));
    int32_t wo = dm_kr_weight(k, "attention_output/kernel", 3, (int64_t[]){H, dv, out});
    int32_t wo2 = dm_kr_op(k, DM_OP_Reshape, 2, wo, dm_kr_const_ints(k, INTS(hv, out)));
    o = dm_kr_op(k, DM_OP_MatMul, 2, o, wo2);
    if (bias)
        o = dm_kr_op(k, DM_OP_Add, 2, dm_kr_weight(k, "attention_output/bias", 1, &out), o);
    struct kt *y = &io->out[0];
    *y = *q;
    dm_kr_perm_identity(3, y->perm);
    y->dim[2] = out;
    y->id = o;
    io->n_out = 1;
}
