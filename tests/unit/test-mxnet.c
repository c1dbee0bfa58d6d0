/*
 * test-mxnet.c: the MXNet symbol JSON front end (src/load/mxnet.c) and
 * --input-shape (dnnmem_config.input_shapes).
 */
#include "util.h"

#define M "tests/models/mxnet/"

static dnnmem_model *load(const char *path)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK)
        fail_msg("load %s: %s", path, err.message);
    return m;
}

/* Parameters (trainable) and buffers (BatchNorm's moving_mean and
 * moving_var: the inputs 3 and 4 of BatchNormalization) of a symbol under
 * input shapes, from shape inference. */
static void count(const char *path, const struct dnnmem_input_shape *in, size_t n_in,
                  int64_t *params, int64_t *buffers)
{
    dnnmem_model *m = load(path);
    const struct dm_graph *g = dm_model_graph(m);
    struct dm_arena arena;
    dm_arena_init(&arena);
    struct dm_tinfo *t = calloc((size_t)g->n_tensors + 1, sizeof *t);
    struct dm_shape *sh = calloc((size_t)g->n_tensors + 1, sizeof *sh);
    bool *buf = calloc((size_t)g->n_tensors + 1, sizeof *buf);
    assert_non_null(t);
    assert_non_null(sh);
    assert_non_null(buf);
    for (int32_t i = 0; i < g->n_tensors; i++)
        sh[i].rank = -1;
    for (size_t k = 0; k < n_in; k++) {
        int32_t id = dm_graph_find(g, in[k].name);
        assert_true(id >= 0);
        sh[id].rank = (int)in[k].rank;
        memcpy(sh[id].dims, in[k].dims, in[k].rank * sizeof(int64_t));
    }
    struct dnnmem_error err;
    struct dm_infer ctx = {.g = g, .arena = &arena, .t = t, .sym_values = NULL,
                           .input_shapes = sh, .err = &err};
    if (dm_infer_shapes(&ctx) != DNNMEM_OK)
        fail_msg("%s: %s", path, err.message);
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == DM_OP_BatchNormalization)
            buf[g->nodes[i].in[3]] = buf[g->nodes[i].in[4]] = true;
    *params = *buffers = 0;
    for (int32_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].role == DM_ROLE_WEIGHT)
        {
            *(buf[i] ? buffers : params) += t[i].numel;
            if (getenv("MX_DUMP"))
                printf("W %s %lld\n", g->tensors[i].name, (long long)t[i].numel);
        }
    free(t);
    free(sh);
    free(buf);
    dm_arena_free(&arena);
    dnnmem_model_free(m);
}

/* Input shapes from "data=1,3,224,224 label=1,4". */
struct shapes {
    struct dnnmem_input_shape in[8];
    int64_t dims[8][DNNMEM_MAX_DIMS];
    char names[8][32];
    size_t n;
};

static void parse_shapes(const char *spec, struct shapes *s)
{
    memset(s, 0, sizeof *s);
    const char *p = spec;
    while (*p) {
        assert_true(s->n < 8);
        size_t k = s->n++, len = strcspn(p, "=");
        assert_true(len < 32);
        memcpy(s->names[k], p, len);
        p += len + 1;
        size_t r = 0;
        for (;;) {
            char *end;
            s->dims[k][r++] = strtoll(p, &end, 10);
            p = end;
            if (*p != ',')
                break;
            p++;
        }
        s->in[k] = (struct dnnmem_input_shape){s->names[k], r, s->dims[k]};
        while (*p == ' ')
            p++;
    }
}

static void counts_of(const char *file, const char *spec, int64_t *params, int64_t *buffers)
{
    char path[256];
    snprintf(path, sizeof path, M "%s", file);
    struct shapes s;
    parse_shapes(spec, &s);
    count(path, s.in, s.n, params, buffers);
}

static void print_counts(void **state)
{
    (void)state;
    static const char *const c[][2] = {
        {"resnet-18-symbol.json", "data=1,3,224,224"},
        {"resnet-50-symbol.json", "data=1,3,224,224"},
        {"resnet-50-finetuned-mxnet1.2-symbol.json", "data=1,3,224,224"},
        {"squeezenet_v1.2-symbol.json", "data=1,3,224,224"},
        {"mobilenet-symbol.json", "data=1,3,224,224"},
        {"mobilefacenet-symbol.json", "data=1,3,112,112"},
        {"gluon-hybridsequential-lenet-symbol.json", "data=1,1,28,28"},
        {"gluon-resnet50-3d-video-symbol.json", "data=1,3,32,224,224"},
        {"mlp-legacy-v0.8-symbol.json", "data=1,784"},
        {"lstm-ocr-ctc-symbol.json", "data=1,30,80 l0_init_h=1,128 l0_init_c=1,128 l1_init_h=1,128 l1_init_c=1,128 label=1,4"},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        int64_t p, b;
        counts_of(c[k][0], c[k][1], &p, &b);
        printf("%s params %lld buffers %lld\n", c[k][0], (long long)p, (long long)b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(print_counts),
    };
    return cmocka_run_group_tests_name("mxnet", tests, NULL, NULL);
}
