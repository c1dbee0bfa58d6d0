/*
 * util.h: helpers for unit tests: cmocka, and a builder that writes small
 * ONNX models with the generated protobuf-c code, so each test states its
 * graph in a few lines and gets real ONNX bytes.
 */
#ifndef DNNMEM_TEST_UTIL_H
#define DNNMEM_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "dnnmem-impl.h"
#include "onnx.pb-c.h"

/* Everything the builder allocates is listed and freed by tb_free. */
struct tb {
    Onnx__ModelProto m;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto opset;
    Onnx__OperatorSetIdProto *opsets[1];
    void **owned;
    size_t n_owned, cap_owned;
    Onnx__NodeProto *last;
};

static inline void *tb_own(struct tb *b, void *p)
{
    if (b->n_owned == b->cap_owned) {
        b->cap_owned = b->cap_owned ? b->cap_owned * 2 : 64;
        b->owned = realloc(b->owned, b->cap_owned * sizeof *b->owned);
        assert_non_null(b->owned);
    }
    assert_non_null(p);
    b->owned[b->n_owned++] = p;
    return p;
}

static inline void *tb_calloc(struct tb *b, size_t n, size_t size)
{
    return tb_own(b, calloc(n ? n : 1, size));
}

static inline char *tb_str(struct tb *b, const char *s) { return tb_own(b, strdup(s)); }

/* Append p to a protobuf-c repeated field (*arr, *n). */
#define TB_PUSH(b, arr, n, p)                                                                      \
    do {                                                                                           \
        void *np_ = tb_calloc((b), (*(n)) + 1, sizeof **(arr));                                    \
        if (*(n))                                                                                  \
            memcpy(np_, *(arr), (*(n)) * sizeof **(arr));                                          \
        *(void **)(arr) = np_;                                                                     \
        (*(arr))[(*(n))++] = (p);                                                                  \
    } while (0)

static inline struct tb *tb_new(int64_t opset)
{
    struct tb *b = calloc(1, sizeof *b);
    assert_non_null(b);
    onnx__model_proto__init(&b->m);
    onnx__graph_proto__init(&b->g);
    onnx__operator_set_id_proto__init(&b->opset);
    b->m.has_ir_version = 1;
    b->m.ir_version = 8;
    b->m.graph = &b->g;
    b->g.name = (char *)"test";
    if (opset > 0) {
        b->opset.domain = (char *)"";
        b->opset.has_version = 1;
        b->opset.version = opset;
        b->opsets[0] = &b->opset;
        b->m.n_opset_import = 1;
        b->m.opset_import = b->opsets;
    }
    return b;
}

static inline void tb_free(struct tb *b)
{
    for (size_t i = 0; i < b->n_owned; i++)
        free(b->owned[i]);
    free(b->owned);
    free(b);
}

/* A value info; dims are strings: "3" or a symbol name "batch". */
static inline Onnx__ValueInfoProto *tb_value_info(struct tb *b, const char *name, int dtype,
                                                  const char *dims)
{
    Onnx__ValueInfoProto *vi = tb_calloc(b, 1, sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = tb_str(b, name);
    Onnx__TypeProto *tp = tb_calloc(b, 1, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = tb_calloc(b, 1, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = dtype;
    Onnx__TensorShapeProto *sp = tb_calloc(b, 1, sizeof *sp);
    onnx__tensor_shape_proto__init(sp);
    char *copy = tb_str(b, dims), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        Onnx__TensorShapeProto__Dimension *d = tb_calloc(b, 1, sizeof *d);
        onnx__tensor_shape_proto__dimension__init(d);
        if (tok[0] == '-' || (tok[0] >= '0' && tok[0] <= '9')) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = strtoll(tok, NULL, 10);
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = tok;
        }
        TB_PUSH(b, &sp->dim, &sp->n_dim, d);
    }
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    return vi;
}

static inline void tb_input(struct tb *b, const char *name, int dtype, const char *dims)
{
    Onnx__ValueInfoProto *vi = tb_value_info(b, name, dtype, dims);
    TB_PUSH(b, &b->g.input, &b->g.n_input, vi);
}

static inline void tb_output(struct tb *b, const char *name)
{
    Onnx__ValueInfoProto *vi = tb_calloc(b, 1, sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = tb_str(b, name);
    TB_PUSH(b, &b->g.output, &b->g.n_output, vi);
}

/* An initializer with dims (n_dims entries) and no data, or int64 values. */
static inline Onnx__TensorProto *tb_init(struct tb *b, const char *name, int dtype, size_t n_dims,
                                         const int64_t *dims)
{
    Onnx__TensorProto *t = tb_calloc(b, 1, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = tb_str(b, name);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = n_dims;
    t->dims = tb_calloc(b, n_dims + 1, sizeof *t->dims);
    if (n_dims)
        memcpy(t->dims, dims, n_dims * sizeof *dims);
    TB_PUSH(b, &b->g.initializer, &b->g.n_initializer, t);
    return t;
}

static inline void tb_init_i64(struct tb *b, const char *name, size_t n, const int64_t *vals)
{
    int64_t dim = (int64_t)n;
    Onnx__TensorProto *t = tb_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, &dim);
    t->n_int64_data = n;
    t->int64_data = tb_calloc(b, n + 1, sizeof *t->int64_data);
    memcpy(t->int64_data, vals, n * sizeof *vals);
}

/* A node; inputs and outputs as comma-separated names ("" items allowed via ",,"). */
static inline Onnx__NodeProto *tb_node(struct tb *b, const char *op, const char *name,
                                       const char *ins, const char *outs)
{
    Onnx__NodeProto *n = tb_calloc(b, 1, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = tb_str(b, op);
    n->name = tb_str(b, name);
    const char *lists[2] = {ins, outs};
    for (int l = 0; l < 2; l++) {
        char *copy = tb_str(b, lists[l]);
        char *p = copy;
        while (*p || l == 0) {
            char *comma = strchr(p, ',');
            if (comma)
                *comma = '\0';
            if (*p || comma) {
                if (l == 0)
                    TB_PUSH(b, &n->input, &n->n_input, p);
                else
                    TB_PUSH(b, &n->output, &n->n_output, p);
            }
            if (!comma)
                break;
            p = comma + 1;
        }
    }
    TB_PUSH(b, &b->g.node, &b->g.n_node, n);
    b->last = n;
    return n;
}

/* A new attribute `key` of `type` on the last node; the caller sets its value. */
static inline Onnx__AttributeProto *tb_attr_new(struct tb *b, const char *key,
                                                Onnx__AttributeProto__AttributeType type)
{
    Onnx__AttributeProto *a = tb_calloc(b, 1, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = tb_str(b, key);
    a->has_type = 1;
    a->type = type;
    TB_PUSH(b, &b->last->attribute, &b->last->n_attribute, a);
    return a;
}

static inline void tb_attr_ints(struct tb *b, const char *key, size_t n, const int64_t *v)
{
    Onnx__AttributeProto *a = tb_attr_new(b, key, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = n;
    a->ints = tb_calloc(b, n + 1, sizeof *a->ints);
    memcpy(a->ints, v, n * sizeof *v);
}

static inline void tb_attr_int(struct tb *b, const char *key, int64_t v)
{
    Onnx__AttributeProto *a = tb_attr_new(b, key, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static inline void tb_attr_float(struct tb *b, const char *key, float v)
{
    Onnx__AttributeProto *a = tb_attr_new(b, key, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
}

/* Serialize; the caller frees the returned buffer. */
static inline uint8_t *tb_pack(struct tb *b, size_t *len)
{
    *len = onnx__model_proto__get_packed_size(&b->m);
    uint8_t *p = malloc(*len + 1);
    assert_non_null(p);
    onnx__model_proto__pack(&b->m, p);
    return p;
}

/* x[batch,3] @ W[3,4] -> h; relu(h) -> y: the small graph several tests use. */
static inline struct tb *tb_small_mlp(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "batch,3");
    tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){3, 4});
    tb_node(b, "MatMul", "mm", "x,W", "h");
    tb_node(b, "Relu", "relu", "h", "y");
    tb_output(b, "y");
    return b;
}

/* Load packed bytes through the public API. */
static inline enum dnnmem_status tb_load(struct tb *b, dnnmem_model **m, struct dnnmem_error *err)
{
    size_t len;
    uint8_t *p = tb_pack(b, &len);
    enum dnnmem_status s = dnnmem_model_load_buffer(p, len, "t.onnx", m, err);
    free(p);
    return s;
}

/* The estimate of b's model under cfg (which must succeed); b is freed. */
static inline struct dnnmem_result *estimate_cfg(struct tb *b, struct dnnmem_config *cfg)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (tb_load(b, &m, &err) != DNNMEM_OK)
        fail_msg("load: %s", err.message);
    struct dnnmem_result *r = NULL;
    if (dnnmem_estimate(m, cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    dnnmem_model_free(m);
    tb_free(b);
    return r;
}

/* The error message must contain `needle`. */
#define assert_msg_has(err, needle)                                                                \
    do {                                                                                           \
        if (!strstr((err).message, (needle)))                                                      \
            fail_msg("message '%s' lacks '%s'", (err).message, (needle));                          \
    } while (0)

/* Allocator simulators (tests of src/alloc): a request that must succeed,
 * its handle (and the bytes granted); a free; the statistics. */
static inline uint64_t get(struct dm_allocator *a, uint64_t bytes, uint64_t *granted)
{
    uint64_t h, g;
    assert_int_equal(a->alloc(a->self, bytes, &h, &g), DNNMEM_OK);
    if (granted)
        *granted = g;
    return h;
}

static inline void put(struct dm_allocator *a, uint64_t h) { a->free(a->self, h); }

static inline struct dm_alloc_stats stats(const struct dm_allocator *a)
{
    struct dm_alloc_stats s;
    a->stats(a->self, &s);
    return s;
}

#endif
