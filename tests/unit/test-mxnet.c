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

/* Parameters and BatchNorm buffers of every file, each worked out by hand
 * from the symbol (conv weights have no bias unless said; BN: gamma + beta,
 * and as many buffers, moving_mean + moving_var).
 *
 *  - resnet-18 (MXNet model zoo, example/image-classification/symbols/
 *    resnet.py: pre-activation "v2" units, bn_data on the input, a final
 *    bn1, and a 1x1 projection shortcut without BN at the first unit of
 *    EVERY stage, stage 1 included). Against torchvision's 11,689,512:
 *    the convolutions add stage 1's 64x64 shortcut, 4,096; BN params are
 *    bn_data 6 + bn0 128 + per unit bn1 on its input and bn2 on its width
 *    (stage 1: 2 x (128 + 128); stage 2: 128 + 256 + 256 + 256; stage 3:
 *    256 + 512 + 512 + 512; stage 4: 512 + 1024 + 1024 + 1024) + bn1 1,024 =
 *    7,942 where torchvision has 9,600 (a BN after every conv and on each
 *    downsample): 11,689,512 + 4,096 - 1,658 = 11,691,950, buffers 7,942.
 *  - resnet-50 (the same v2 design; 0.8 layout, an 11,586-class ImageNet-11k
 *    head, BN aux states not listed in the file): convolutions equal
 *    torchvision's; BN params are bn_data 6 + bn0 128 + units (bn1 on the
 *    unit's input, bn2 and bn3 on its bottleneck width; stage 1: 2 x (64 +
 *    2 x 256) + 3 x 256 = 1,920; stage 2: 2 x (256 + 3 x 512) + 4 x 512 =
 *    5,632; stage 3: 2 x (512 + 5 x 1024) + 6 x 1024 = 17,408; stage 4:
 *    2 x (1024 + 2 x 2048) + 3 x 2048 = 16,384) + bn1 4,096 = 45,574, where
 *    torchvision has 53,120: a 1000-class head gives 25,557,032 - 7,546 =
 *    25,549,486; the file's head is 2048 x 11,586 + 11,586 = 23,739,714
 *    instead of 2,049,000: 47,240,200. Buffers 45,574 (the 0.8 file lists
 *    none; MXNet allocates them all the same).
 *  - resnet-50 fine-tuned (1.2 layout, 12 classes): the same body,
 *    25,549,486 - 2,049,000 + 2048 x 12 + 12 = 23,525,074; buffers 45,574.
 *  - squeezenet v1.2 (SqueezeNet 1.1's layers): conv1 3x3x3x64 + 64 = 1,792;
 *    fires (squeeze s, expand e, input c: c*s + s + s*e + e + 9*s*e + e):
 *    fire2 (64; 16, 64) 11,408, fire3 (128; 16, 64) 12,432, fire4 (128; 32,
 *    128) 45,344, fire5 (256; 32, 128) 49,440, fire6 (256; 48, 192) 104,880,
 *    fire7 (384; 48, 192) 111,024, fire8 (384; 64, 256) 188,992, fire9 (512;
 *    64, 256) 197,184; conv10 512 x 1000 + 1000 = 513,000: 1,235,496
 *    (torchvision squeezenet1_1's count), no buffers.
 *  - mobilenet v1 (1.0, 224): conv1 864; 13 separable pairs (c_in, c_out)
 *    (32,64) (64,128) (128,128) (128,256) (256,256) (256,512) 5 x (512,512)
 *    (512,1024) (1024,1024): depthwise 9 x 4,960 = 44,640, pointwise
 *    3,139,584; BN 64 + 2 x 4,960 + 2 x 5,952 = 21,888; fc7 (a 1x1 conv
 *    with bias) 1,025,000: 4,231,976 and buffers 21,888 (Keras's MobileNet:
 *    4,231,976 trainable, 21,888 non-trainable).
 *  - mobilefacenet (112x112 input): 1,003,264 and 19,584 buffers, checked
 *    against the file itself: its fc1 weight states __shape__ (128, 512),
 *    which the shape inference must agree with.
 *  - gluon lenet (1x28x28): conv0 5x1x5x5 + 5 = 130, conv1 5x5x5x5 + 5 =
 *    630, dense0 (5 x 4 x 4 = 80 in) 80 x 32 + 32 = 2,592, dense1 330: 3,682.
 *  - gluon 3-D resnet-50 (UCF101 head and a 26-way second dense): every
 *    __shape__ that is fully known adds up to 27,430,847 (running stats
 *    excluded); the deferred ones are batchnorm1 on the 3-channel input, 6,
 *    and dense1 26 x 101 = 2,626: 27,433,479; buffers 53,126.
 *  - mlp 0.8 (784 inputs): fc1 784 x 128 + 128 = 100,480, fc2 8,256, fc3
 *    650, BatchNorm(10) 20: 109,406; buffers 20 (not in the file).
 *  - lstm ocr (2 unrolled LSTM layers of 128, 80 features, 63 classes):
 *    l0 i2h 512 x 80 + 512 = 41,472, l0 h2h 512 x 128 + 512 = 66,048, l1
 *    i2h and h2h 66,048 each, fc 63 x 128 + 63 = 8,127: 247,743 (each
 *    shared over the 30 steps, counted once). */
static const char *const OCR_SHAPES = "data=1,30,80 l0_init_h=1,128 l0_init_c=1,128 "
                                      "l1_init_h=1,128 l1_init_c=1,128 label=1,4";

static const struct {
    const char *file, *shapes;
    int64_t params, buffers;
} FILES[] = {
    {"resnet-18-symbol.json", "data=1,3,224,224", 11691950, 7942},
    {"resnet-50-symbol.json", "data=1,3,224,224", 47240200, 45574},
    {"resnet-50-finetuned-mxnet1.2-symbol.json", "data=1,3,224,224", 23525074, 45574},
    {"squeezenet_v1.2-symbol.json", "data=1,3,224,224", 1235496, 0},
    {"mobilenet-symbol.json", "data=1,3,224,224", 4231976, 21888},
    {"mobilefacenet-symbol.json", "data=1,3,112,112", 1003264, 19584},
    {"gluon-hybridsequential-lenet-symbol.json", "data=1,1,28,28", 3682, 0},
    {"gluon-resnet50-3d-video-symbol.json", "data=1,3,16,112,112", 27433479, 53126},
    {"mlp-legacy-v0.8-symbol.json", "data=1,784", 109406, 20},
    {"lstm-ocr-ctc-symbol.json", NULL, 247743, 0},
    /* the same with the begin states and the label derived (test_begin_states) */
    {"lstm-ocr-ctc-symbol.json", "data=1,30,80", 247743, 0},
};
#define N_FILES (sizeof FILES / sizeof FILES[0])

static void test_param_counts(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_FILES; k++) {
        int64_t p, b;
        counts_of(FILES[k].file, FILES[k].shapes ? FILES[k].shapes : OCR_SHAPES, &p, &b);
        if (p != FILES[k].params || b != FILES[k].buffers)
            fail_msg("%s: %lld params and %lld buffers, want %lld and %lld", FILES[k].file,
                     (long long)p, (long long)b, (long long)FILES[k].params,
                     (long long)FILES[k].buffers);
    }
}

static struct dnnmem_result *estimate(const dnnmem_model *m, const char *spec,
                                      enum dnnmem_mode mode, int64_t batch)
{
    struct shapes s;
    parse_shapes(spec, &s);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = mode;
    cfg.batch_size = batch;
    cfg.input_shapes = s.in;
    cfg.n_input_shapes = s.n;
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    return r;
}

/* Training under --framework mxnet with backward mirroring (MXNET_BACKWARD_DO_MIRROR)
 * on one executor: it estimates */
static void estimate_mirrored(const dnnmem_model *m, const char *spec,
                              enum dnnmem_mxnet_executor ex)
{
    struct shapes s;
    parse_shapes(spec, &s);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.batch_size = 2;
    cfg.framework = DNNMEM_FW_MXNET;
    cfg.mxnet_executor = ex;
    cfg.mxnet_mirror = true;
    cfg.input_shapes = s.in;
    cfg.n_input_shapes = s.n;
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate (mxnet, mirrored): %s", err.message);
    assert_true(r->peak_allocated > 0);
    dnnmem_result_free(r);
}

/* Every file estimates end to end, inference and training (and under MXNet's
 * rules with mirroring, both executors); the weights at
 * an inference peak are every parameter and buffer, 4 bytes each. */
static void test_end_to_end(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_FILES; k++) {
        char path[256];
        snprintf(path, sizeof path, M "%s", FILES[k].file);
        dnnmem_model *m = load(path);
        const char *spec = FILES[k].shapes ? FILES[k].shapes : OCR_SHAPES;
        struct dnnmem_result *r = estimate(m, spec, DNNMEM_MODE_INFER, 0);
        /* PyTorch's BatchNorm also keeps num_batches_tracked, one int64 */
        const struct dm_graph *g = dm_model_graph(m);
        uint64_t n_bn = 0;
        for (int32_t i = 0; i < g->n_nodes; i++)
            n_bn += g->nodes[i].op == DM_OP_BatchNormalization;
        assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT],
                         4 * (FILES[k].params + FILES[k].buffers) + 8 * n_bn);
        assert_true(r->category_bytes[DNNMEM_CAT_INPUT] > 0);
        dnnmem_result_free(r);
        r = estimate(m, spec, DNNMEM_MODE_TRAIN, 2);
        assert_true(r->category_bytes[DNNMEM_CAT_GRADIENT] + r->category_bytes[DNNMEM_CAT_SAVED] > 0);
        dnnmem_result_free(r);
        estimate_mirrored(m, spec, DNNMEM_MXNET_EXEC_PLANNED);
        estimate_mirrored(m, spec, DNNMEM_MXNET_EXEC_NAIVE);
        dnnmem_model_free(m);
    }
}

/* Each layout is recognised and read: 0.8 "param" (+ heads of two), 0.9
 * "attr" with mxnet_version 903, 0.11+ "attrs" (1101, 10300), Gluon. */
static void test_layouts(void **state)
{
    (void)state;
    static const struct { const char *file, *producer; size_t inputs; } c[] = {
        {"mlp-legacy-v0.8-symbol.json", "mxnet symbol JSON, 'param' layout (0.8)", 2},
        {"resnet-50-symbol.json", "mxnet symbol JSON, 'param' layout (0.8)", 2},
        {"squeezenet_v1.2-symbol.json", "mxnet 0.9.3 (symbol JSON, 'attr')", 2},
        {"lstm-ocr-ctc-symbol.json", "mxnet 0.9.1 (symbol JSON, 'attr')", 6},
        {"mobilenet-symbol.json", "mxnet 0.11.1 (symbol JSON, 'attr')", 1},
        {"resnet-18-symbol.json", "mxnet 1.3.0 (symbol JSON, 'attrs')", 2},
        {"gluon-hybridsequential-lenet-symbol.json", "mxnet 1.4.1 (symbol JSON, 'attrs')", 1},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, M "%s", c[k].file);
        dnnmem_model *m = load(path);
        struct dnnmem_model_info info;
        dnnmem_model_get_info(m, &info);
        assert_string_equal(info.format, "mxnet");
        assert_string_equal(info.producer, c[k].producer);
        assert_int_equal(info.n_inputs, c[k].inputs);
        assert_int_equal(info.n_symbols, 0);
        dnnmem_model_free(m);
    }
    /* the 0.8 MLP: BatchNorm's aux states come back, named as MXNet names them */
    dnnmem_model *m = load(M "mlp-legacy-v0.8-symbol.json");
    const struct dm_graph *g = dm_model_graph(m);
    int32_t mm = dm_graph_find(g, "batchnorm0_moving_mean");
    assert_true(mm >= 0);
    assert_int_equal(g->tensors[mm].role, DM_ROLE_WEIGHT);
    /* softmax_label: an input the loss op leaves unread, shaped [batch] */
    int32_t lab = dm_graph_find(g, "softmax_label");
    assert_true(lab >= 0);
    assert_int_equal(g->tensors[lab].role, DM_ROLE_INPUT);
    assert_non_null(g->tensors[lab].derive);
    assert_int_equal(g->tensors[lab].derive->rule, DM_DERIVE_FIRST);
    dnnmem_model_free(m);
}

static enum dnnmem_status load_text(const char *json, dnnmem_model **m, struct dnnmem_error *err)
{
    return dnnmem_model_load_buffer(json, strlen(json), "t-symbol.json", m, err);
}

/* A symbol of one op on data: '{"nodes": [data, <extra vars>, op], ...}'. */
#define SYM(vars, op, inputs)                                                                      \
    "{\"nodes\": [{\"op\": \"null\", \"name\": \"data\", \"inputs\": []}" vars ", " op            \
    "], \"arg_nodes\": [0], \"heads\": [[" inputs ", 0, 0]]}"

static void expect_error(const char *json, enum dnnmem_status want, const char *needle)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    enum dnnmem_status s = load_text(json, &m, &err);
    if (s == DNNMEM_OK) {
        dnnmem_model_free(m);
        fail_msg("loaded, expected an error with '%s'", needle);
    }
    if (s != want || !strstr(err.message, needle))
        fail_msg("status %d '%s', want %d with '%s'", (int)s, err.message, (int)want, needle);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error(SYM("", "{\"op\": \"FancyOp\", \"name\": \"f1\", \"inputs\": [[0, 0, 0]]}", "1"),
                 DNNMEM_E_UNSUPPORTED, "node 'f1': op 'FancyOp' is not supported");
    expect_error(SYM(", {\"op\": \"null\", \"name\": \"c_weight\", \"inputs\": []}",
                     "{\"op\": \"Convolution\", \"name\": \"c\", \"attrs\": {\"kernel\": \"(3, x)\", "
                     "\"num_filter\": \"8\", \"no_bias\": \"True\"}, \"inputs\": [[0, 0, 0], [1, 0, 0]]}",
                     "2"),
                 DNNMEM_E_MODEL, "node 'c' (Convolution): attribute 'kernel' is \"(3, x)\"");
    expect_error(SYM(", {\"op\": \"null\", \"name\": \"c_weight\", \"inputs\": []}",
                     "{\"op\": \"Convolution\", \"name\": \"c\", \"attrs\": {\"kernel\": \"(3, 3)\", "
                     "\"num_filter\": \"8\", \"no_bias\": \"maybe\"}, \"inputs\": [[0, 0, 0], [1, 0, 0]]}",
                     "2"),
                 DNNMEM_E_MODEL, "attribute 'no_bias' is \"maybe\"; expected True or False");
    expect_error(SYM("", "{\"op\": \"Activation\", \"name\": \"a\", \"attrs\": {\"act_type\": \"swish\"}, "
                         "\"inputs\": [[0, 0, 0]]}", "1"),
                 DNNMEM_E_MODEL, "node 'a' (Activation): attribute 'act_type' is \"swish\"");
    expect_error(SYM("", "{\"op\": \"Activation\", \"name\": \"a\", \"attrs\": {\"act_type\": \"relu\"}, "
                         "\"inputs\": [[5, 0, 0]]}", "1"),
                 DNNMEM_E_MODEL, "node 'a' input 0: refers to node 5, which is not an earlier node");
    expect_error(SYM("", "{\"op\": \"Activation\", \"name\": \"a\", \"attrs\": {\"act_type\": \"relu\"}, "
                         "\"inputs\": [[0, 0, 0]]}", "7"),
                 DNNMEM_E_MODEL, "heads: refers to node 7");
    expect_error(SYM("", "{\"op\": \"Activation\", \"name\": \"a\", \"attrs\": {\"act_type\": 1}, "
                         "\"inputs\": [[0, 0, 0]]}", "1"),
                 DNNMEM_E_MODEL, "node 'a': attribute 'act_type' must be a string");
    expect_error(SYM("", "{\"op\": \"Pooling\", \"name\": \"p\", \"attrs\": {\"kernel\": \"(2, 2)\", "
                         "\"stride\": \"(2, 2, 2)\"}, \"inputs\": [[0, 0, 0]]}", "1"),
                 DNNMEM_E_MODEL, "attribute 'stride' has 3 values for a 2-D kernel");
    expect_error("{\"nodes\": [], \"heads\": []}", DNNMEM_E_MODEL, "the symbol has 0 nodes");
    expect_error("{\"nodes\": [{\"op\": \"null\"}], \"heads\": [[0, 0]]}", DNNMEM_E_PARSE,
                 "node 0: needs a string 'op', a string 'name'");
    expect_error("{\"nodes\": [1], \"heads\": [x]}", DNNMEM_E_PARSE, "not valid JSON");

    /* the data needs a shape; an unknown input name; a rank that disagrees */
    dnnmem_model *m = load(M "resnet-18-symbol.json");
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_UNBOUND);
    assert_non_null(strstr(err.message, "input 'data' declares no shape; give it one with "
                                        "--input-shape data=D1,D2,..."));
    struct dnnmem_input_shape in = {"image", 4, (const int64_t[]){1, 3, 224, 224}};
    cfg.input_shapes = &in;
    cfg.n_input_shapes = 1;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_USAGE);
    assert_non_null(strstr(err.message, "--input-shape image: "));
    assert_non_null(strstr(err.message, "has no input of that name (its inputs: data, softmax_label)"));
    in.name = "data";
    in.dims = (const int64_t[]){1, 3, 0, 224};
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_USAGE);
    assert_non_null(strstr(err.message, "dim 2 is 0; every dim must be >= 1"));
    in.rank = 3;
    in.dims = (const int64_t[]){3, 224, 224};
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_SHAPE);
    dnnmem_model_free(m);
}

/* --input-shape on an ONNX input [batch, 3, 224, 224]: binds batch; the
 * rank and fixed dims must agree; --batch-size on top of it is refused. */
static void test_onnx_input_shape(void **state)
{
    (void)state;
    dnnmem_model *m = load("tests/models/fixtures/resnet50.onnx");
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    struct dnnmem_input_shape in = {"input", 4, (const int64_t[]){4, 3, 224, 224}};
    cfg.input_shapes = &in;
    cfg.n_input_shapes = 1;
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_INPUT], 4 * 3 * 224 * 224 * 4);
    bool said = false;
    for (size_t k = 0; k < r->n_assumptions; k++)
        said = said || (!strcmp(r->assumptions[k].key, "dims.batch") &&
                        !strcmp(r->assumptions[k].value, "4 (--input-shape input)"));
    assert_true(said);
    dnnmem_result_free(r);
    in.rank = 3;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_USAGE);
    assert_non_null(strstr(err.message, "--input-shape input: 3 dims given, but"));
    assert_non_null(strstr(err.message, "declares the input with 4: [batch,3,224,224]"));
    in.rank = 4;
    in.dims = (const int64_t[]){4, 3, 200, 224};
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_USAGE);
    assert_non_null(strstr(err.message, "dim 2 is 200, but"));
    in.dims = (const int64_t[]){4, 3, 224, 224};
    cfg.batch_size = 8;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_USAGE);
    assert_non_null(strstr(err.message, "--batch-size: the batch dim 'batch' is set by --input-shape input"));
    cfg.batch_size = 0;
    struct dnnmem_dim_binding d = {"batch", 2};
    cfg.dims = &d;
    cfg.n_dims = 1;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_USAGE);
    assert_non_null(strstr(err.message, "--dim batch=2 disagrees with --input-shape input"));
    dnnmem_model_free(m);
}

/* --batch-size replaces the first dim of a shape given to an undeclared
 * input: the inputs grow 8-fold from data=1,784 (and the derived label). */
static void test_batch_size_first_dim(void **state)
{
    (void)state;
    dnnmem_model *m = load(M "mlp-legacy-v0.8-symbol.json");
    struct dnnmem_result *r = estimate(m, "data=1,784", DNNMEM_MODE_INFER, 8);
    /* data [8, 784] and softmax_label [8], float32 */
    assert_int_equal(r->category_bytes[DNNMEM_CAT_INPUT], 8 * 784 * 4 + 8 * 4);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
}

/* Small symbols: shapes of MXNet's special ops through inference. */
static void shapes_of(const char *json, const char *spec, const char *tensor, int rank,
                      const int64_t *dims)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    if (load_text(json, &m, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    const struct dm_graph *g = dm_model_graph(m);
    struct shapes s;
    parse_shapes(spec, &s);
    struct dm_arena arena;
    dm_arena_init(&arena);
    struct dm_tinfo *t = calloc((size_t)g->n_tensors, sizeof *t);
    struct dm_shape *sh = calloc((size_t)g->n_tensors, sizeof *sh);
    for (int32_t i = 0; i < g->n_tensors; i++)
        sh[i].rank = -1;
    for (size_t k = 0; k < s.n; k++) {
        int32_t id = dm_graph_find(g, s.in[k].name);
        assert_true(id >= 0);
        sh[id].rank = (int)s.in[k].rank;
        memcpy(sh[id].dims, s.in[k].dims, s.in[k].rank * sizeof(int64_t));
    }
    struct dm_infer ctx = {.g = g, .arena = &arena, .t = t, .input_shapes = sh, .err = &err};
    if (dm_infer_shapes(&ctx) != DNNMEM_OK)
        fail_msg("%s", err.message);
    int32_t id = dm_graph_find(g, tensor);
    if (id < 0)
        fail_msg("no tensor '%s'", tensor);
    bool same = t[id].rank == rank;
    for (int k = 0; same && k < rank; k++)
        same = t[id].dims[k] == dims[k];
    if (!same)
        fail_msg("%s: '%s' has rank %d, dims %lld %lld %lld ...", json, tensor, t[id].rank,
                 (long long)t[id].dims[0], (long long)t[id].dims[1], (long long)t[id].dims[2]);
    free(t);
    free(sh);
    dm_arena_free(&arena);
    dnnmem_model_free(m);
}

#define OP1(op, attrs) "{\"op\": \"" op "\", \"name\": \"y\", \"attrs\": {" attrs "}, \"inputs\": [[0, 0, 0]]}"

static void test_op_shapes(void **state)
{
    (void)state;
    /* Reshape's special values on [2, 3, 4, 5] */
    shapes_of(SYM("", OP1("Reshape", "\"shape\": \"(0, -3, -2)\""), "1"), "data=2,3,4,5",
              "y_output", 3, (const int64_t[]){2, 12, 5});
    shapes_of(SYM("", OP1("Reshape", "\"shape\": \"(-4, 1, -1, -2)\""), "1"), "data=2,3,4,5",
              "y_output", 5, (const int64_t[]){1, 2, 3, 4, 5});
    shapes_of(SYM("", OP1("Reshape", "\"shape\": \"(-1,)\""), "1"), "data=2,3,4,5", "y_output", 1,
              (const int64_t[]){120});
    /* SliceChannel with squeeze_axis: [2, 3, 4] -> 3 x [2, 4] */
    shapes_of(SYM("", OP1("SliceChannel", "\"num_outputs\": \"3\", \"axis\": \"1\", \"squeeze_axis\": \"1\""),
                  "1"),
              "data=2,3,4", "y_output2", 2, (const int64_t[]){2, 4});
    shapes_of(SYM("", OP1("SliceChannel", "\"num_outputs\": \"2\", \"axis\": \"-1\""), "1"),
              "data=2,3,4", "y_output1", 3, (const int64_t[]){2, 3, 2});
    /* Pooling: valid floors, full rounds up: (7 - 2) / 2 + 1 = 3.5 */
    shapes_of(SYM("", OP1("Pooling", "\"kernel\": \"(2, 2)\", \"stride\": \"(2, 2)\", \"pool_type\": \"avg\""),
                  "1"),
              "data=1,1,7,7", "y_output", 4, (const int64_t[]){1, 1, 3, 3});
    shapes_of(SYM("", OP1("Pooling", "\"kernel\": \"(2, 2)\", \"stride\": \"(2, 2)\", "
                                      "\"pooling_convention\": \"full\""),
                  "1"),
              "data=1,1,7,7", "y_output", 4, (const int64_t[]){1, 1, 4, 4});
    shapes_of(SYM("", OP1("Pooling", "\"kernel\": \"(3, 3)\", \"global_pool\": \"True\""), "1"),
              "data=2,8,7,7", "y_output", 4, (const int64_t[]){2, 8, 1, 1});
    /* expand_dims, transpose, sum, clip, softmax */
    shapes_of(SYM("", OP1("expand_dims", "\"axis\": \"1\""), "1"), "data=2,3", "y_output", 3,
              (const int64_t[]){2, 1, 3});
    shapes_of(SYM("", OP1("transpose", "\"axes\": \"(0, 2, 1)\""), "1"), "data=2,3,4", "y_output", 3,
              (const int64_t[]){2, 4, 3});
    shapes_of(SYM("", OP1("transpose", ""), "1"), "data=2,3,4", "y_output", 3, (const int64_t[]){4, 3, 2});
    shapes_of(SYM("", OP1("sum", "\"axis\": \"(1, 2)\", \"keepdims\": \"True\""), "1"), "data=2,3,4",
              "y_output", 3, (const int64_t[]){2, 1, 1});
    shapes_of(SYM("", OP1("mean", "\"axis\": \"1\""), "1"), "data=2,3,4", "y_output", 2,
              (const int64_t[]){2, 4});
    shapes_of(SYM("", OP1("clip", "\"a_min\": \"0\", \"a_max\": \"6\""), "1"), "data=2,3", "y_output", 2,
              (const int64_t[]){2, 3});
    shapes_of(SYM("", OP1("_rminus_scalar", "\"scalar\": \"1\""), "1"), "data=2,3", "y_output", 2,
              (const int64_t[]){2, 3});
    /* grouped, dilated, strided 2-D convolution: weight [16, 8 / 2, 3, 3];
     * out (10 + 2 - 2 x 2 - 1) / 2 + 1 = 4 */
    shapes_of(SYM(", {\"op\": \"null\", \"name\": \"c_weight\", \"inputs\": []}, "
                  "{\"op\": \"null\", \"name\": \"c_bias\", \"inputs\": []}",
                  "{\"op\": \"Convolution\", \"name\": \"c\", \"attrs\": {\"kernel\": \"(3, 3)\", "
                  "\"num_filter\": \"16\", \"num_group\": \"2\", \"stride\": \"(2, 2)\", \"pad\": \"(1, 1)\", "
                  "\"dilate\": \"(2, 2)\"}, \"inputs\": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}",
                  "3"),
              "data=1,8,10,10", "c_weight", 4, (const int64_t[]){16, 4, 3, 3});
    shapes_of(SYM(", {\"op\": \"null\", \"name\": \"c_weight\", \"inputs\": []}",
                  "{\"op\": \"Convolution\", \"name\": \"c\", \"attrs\": {\"kernel\": \"(3, 3)\", "
                  "\"num_filter\": \"16\", \"num_group\": \"2\", \"stride\": \"(2, 2)\", \"pad\": \"(1, 1)\", "
                  "\"dilate\": \"(2, 2)\", \"no_bias\": \"True\"}, \"inputs\": [[0, 0, 0], [1, 0, 0]]}",
                  "2"),
              "data=1,8,10,10", "c_output", 4, (const int64_t[]){1, 16, 4, 4});
    /* Deconvolution: weight [C, num_filter, k]; out (5 - 1) x 2 + 4 - 2 = 10 */
    shapes_of(SYM(", {\"op\": \"null\", \"name\": \"d_weight\", \"inputs\": []}",
                  "{\"op\": \"Deconvolution\", \"name\": \"d\", \"attrs\": {\"kernel\": \"(4, 4)\", "
                  "\"num_filter\": \"6\", \"stride\": \"(2, 2)\", \"pad\": \"(1, 1)\"}, "
                  "\"inputs\": [[0, 0, 0], [1, 0, 0]]}",
                  "2"),
              "data=1,3,5,5", "d_output", 4, (const int64_t[]){1, 6, 10, 10});
    /* FullyConnected without flatten: weight [8, last dim] */
    shapes_of(SYM(", {\"op\": \"null\", \"name\": \"f_weight\", \"inputs\": []}, "
                  "{\"op\": \"null\", \"name\": \"f_bias\", \"inputs\": []}",
                  "{\"op\": \"FullyConnected\", \"name\": \"f\", \"attrs\": {\"num_hidden\": \"8\", "
                  "\"flatten\": \"False\"}, \"inputs\": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}",
                  "3"),
              "data=2,5,7", "f_output", 3, (const int64_t[]){2, 5, 8});
    /* PReLU: gamma [C, 1, 1] broadcast over [N, C, H, W] */
    shapes_of(SYM(", {\"op\": \"null\", \"name\": \"p_gamma\", \"inputs\": []}",
                  "{\"op\": \"LeakyReLU\", \"name\": \"p\", \"attrs\": {\"act_type\": \"prelu\"}, "
                  "\"inputs\": [[0, 0, 0], [1, 0, 0]]}",
                  "2"),
              "data=2,6,4,4", "p_gamma", 3, (const int64_t[]){6, 1, 1});
    /* fused RNN, a 2-layer bidirectional LSTM of 8 on [T 5, N 2, C 10]: the
     * flat vector (MXNet's GetRnnParamSize, cuDNN's layout) per direction
     * 4 x 8 x (10 + 8 + 2) = 640 for layer 0 and 4 x 8 x (2 x 8 + 8 + 2) =
     * 832 for layer 1: 2 x 1472 = 2944; out [5, 2, 16]; begin states
     * [L * dirs 4, N 2, H 8] from the data; state outputs likewise */
#define LSTM_SYM                                                                                   \
    SYM(", {\"op\": \"null\", \"name\": \"r_parameters\", \"inputs\": []}, "                  \
        "{\"op\": \"null\", \"name\": \"r_state\", \"inputs\": []}, "                           \
        "{\"op\": \"null\", \"name\": \"r_state_cell\", \"inputs\": []}",                       \
        "{\"op\": \"RNN\", \"name\": \"r\", \"attrs\": {\"mode\": \"lstm\", \"state_size\": \"8\", " \
        "\"num_layers\": \"2\", \"bidirectional\": \"True\", \"state_outputs\": \"True\", "       \
        "\"p\": \"0.2\"}, \"inputs\": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]}",             \
        "4")
    shapes_of(LSTM_SYM, "data=5,2,10", "r_parameters", 1, (const int64_t[]){2944});
    shapes_of(LSTM_SYM, "data=5,2,10", "r_output", 3, (const int64_t[]){5, 2, 16});
    shapes_of(LSTM_SYM, "data=5,2,10", "r_state_cell", 3, (const int64_t[]){4, 2, 8});
    shapes_of(LSTM_SYM, "data=5,2,10", "r_statecell_output", 3, (const int64_t[]){4, 2, 8});
    /* regression outputs: the label shaped like the data; CTCLoss: [N] */
#define REG_SYM                                                                                    \
    SYM(", {\"op\": \"null\", \"name\": \"lab\", \"inputs\": []}",                                \
        "{\"op\": \"LogisticRegressionOutput\", \"name\": \"y\", \"inputs\": [[0, 0, 0], [1, 0, 0]]}", \
        "2")
    shapes_of(REG_SYM, "data=4,3", "lab", 2, (const int64_t[]){4, 3});
    shapes_of(REG_SYM, "data=4,3", "y_output", 2, (const int64_t[]){4, 3});
    shapes_of(SYM(", {\"op\": \"null\", \"name\": \"lab\", \"inputs\": []}",
                  "{\"op\": \"_contrib_CTCLoss\", \"name\": \"ctc\", \"inputs\": [[0, 0, 0], [1, 0, 0]]}",
                  "2"),
              "data=30,4,20 lab=4,5", "ctc_output", 1, (const int64_t[]){4});
    /* Embedding: weight [input_dim, output_dim]; out [N, T, output_dim] */
    shapes_of(SYM(", {\"op\": \"null\", \"name\": \"e_weight\", \"inputs\": []}",
                  "{\"op\": \"Embedding\", \"name\": \"e\", \"attrs\": {\"input_dim\": \"100\", "
                  "\"output_dim\": \"16\"}, \"inputs\": [[0, 0, 0], [1, 0, 0]]}",
                  "2"),
              "data=2,7", "e_output", 3, (const int64_t[]){2, 7, 16});
}

static void file_shapes_of(const char *file, const char *spec, const char *tensor, int rank,
                           const int64_t *dims)
{
    char path[256];
    snprintf(path, sizeof path, M "%s", file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc((size_t)n + 1, 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    shapes_of(text, spec, tensor, rank, dims);
    free(text);
}

/* Begin states and the WarpCTC label MXNet itself leaves to the caller,
 * derived from the cell (src/load/mxnet.c, derive_begin_states). */
static void test_begin_states(void **state)
{
    (void)state;
    /* lstm-ocr, data [2, 30, 80]: SliceChannel(axis 1, squeeze) gives 30
     * steps of [2, 80]; t0_l0_i2h makes [2, 512]; t0_l0_h2h (num_hidden 512)
     * is summed with it and split into 4 gates: h is [2, 512 / 4 = 128]; c
     * is multiplied by the forget gate sigmoid([2, 128]): [2, 128]. The 30
     * hidden states [2, 128] concatenated on axis 0 are [60, 128], the FC
     * [60, 63]; WarpCTC's label: 60 / input_length 30 = 2 rows of
     * label_length 4: [2, 4] */
    const char *ocr = "lstm-ocr-ctc-symbol.json";
    file_shapes_of(ocr, "data=2,30,80", "l0_init_h", 2, (const int64_t[]){2, 128});
    file_shapes_of(ocr, "data=2,30,80", "l0_init_c", 2, (const int64_t[]){2, 128});
    file_shapes_of(ocr, "data=2,30,80", "l1_init_h", 2, (const int64_t[]){2, 128});
    file_shapes_of(ocr, "data=2,30,80", "l1_init_c", 2, (const int64_t[]){2, 128});
    file_shapes_of(ocr, "data=2,30,80", "label", 2, (const int64_t[]){2, 4});
    /* a shape the caller gives wins */
    file_shapes_of(ocr, "data=2,30,80 l0_init_c=2,128 label=8", "label", 1, (const int64_t[]){8});
    /* a GRU-style cell: i2h and h2h (num_hidden 12) each split into 3
     * gates, gate 0 of each summed: h is [batch 3 of the i2h gate, 12 / 3] */
    shapes_of(SYM(", {\"op\": \"null\", \"name\": \"a_weight\", \"inputs\": []}, "
                  "{\"op\": \"FullyConnected\", \"name\": \"a\", \"attrs\": {\"num_hidden\": \"12\", "
                  "\"no_bias\": \"True\"}, \"inputs\": [[0, 0, 0], [1, 0, 0]]}, "
                  "{\"op\": \"SliceChannel\", \"name\": \"as\", \"attrs\": {\"num_outputs\": \"3\"}, "
                  "\"inputs\": [[2, 0, 0]]}, "
                  "{\"op\": \"null\", \"name\": \"h0\", \"inputs\": []}, "
                  "{\"op\": \"null\", \"name\": \"b_weight\", \"inputs\": []}, "
                  "{\"op\": \"FullyConnected\", \"name\": \"b\", \"attrs\": {\"num_hidden\": \"12\", "
                  "\"no_bias\": \"True\"}, \"inputs\": [[4, 0, 0], [5, 0, 0]]}, "
                  "{\"op\": \"SliceChannel\", \"name\": \"bs\", \"attrs\": {\"num_outputs\": \"3\"}, "
                  "\"inputs\": [[6, 0, 0]]}",
                  "{\"op\": \"elemwise_add\", \"name\": \"r\", \"inputs\": [[3, 0, 0], [7, 0, 0]]}",
                  "8"),
              "data=3,5", "h0", 2, (const int64_t[]){3, 4});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_counts),
        cmocka_unit_test(test_end_to_end),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_onnx_input_shape),
        cmocka_unit_test(test_batch_size_first_dim),
        cmocka_unit_test(test_op_shapes),
        cmocka_unit_test(test_begin_states),
    };
    return cmocka_run_group_tests_name("mxnet", tests, NULL, NULL);
}
