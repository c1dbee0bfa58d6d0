/*
 * test-keras.c: the Keras model JSON front end (src/load/keras/).
 *
 * Parameter counts are pinned on the real files of tests/models/keras (see
 * its SOURCES.md), worked out by hand below; the keras.applications ones
 * equal the published totals. "Trainable" is what model.summary() calls
 * trainable: every weight but BatchNormalization's moving statistics and the
 * weights of layers saved with trainable: false.
 */
#include "util.h"

#include <zip.h>

static dnnmem_model *load(const char *path)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK)
        fail_msg("load %s: %s", path, err.message);
    return m;
}

static dnnmem_model *load_json(const char *json)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load_buffer(json, strlen(json), "tiny.json", &m, &err) != DNNMEM_OK)
        fail_msg("load: %s", err.message);
    return m;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

struct counts {
    int64_t total, trainable, bn;
};

/* Weight elements of the graph: all, trainable, BatchNorms. */
static struct counts count(const dnnmem_model *m)
{
    const struct dm_graph *g = dm_model_graph(m);
    struct counts c = {0, 0, 0};
    for (int32_t i = 0; i < g->n_tensors; i++) {
        const struct dm_tensor *t = &g->tensors[i];
        if (t->role != DM_ROLE_WEIGHT)
            continue;
        assert_int_equal(t->dtype, DM_FLOAT);
        int64_t n = 1;
        for (int d = 0; d < t->rank; d++)
            n *= t->dims[d].value;
        c.total += n;
        bool stat = ends_with(t->name, "/moving_mean") || ends_with(t->name, "/moving_variance");
        c.bn += ends_with(t->name, "/moving_mean");
        if (!stat && !t->frozen)
            c.trainable += n;
    }
    return c;
}

static struct dnnmem_result *estimate(const dnnmem_model *m, enum dnnmem_mode mode, int64_t batch,
                                      const struct dnnmem_dim_binding *dims, size_t n_dims)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = mode;
    cfg.batch_size = batch;
    cfg.dims = dims;
    cfg.n_dims = n_dims;
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    return r;
}

/* Published and hand-computed counts (params; trainable; BatchNorm layers):
 *  - ResNet50 (keras.applications, ImageNet top): 25,636,712 total,
 *    25,583,592 trainable, 53,120 non-trainable (53 BatchNorms' moving
 *    mean and variance: 2 x 26,560 channels).
 *  - MobileNet v1 (alpha 1.0, 224): 4,253,864 total, 4,231,976 trainable,
 *    21,888 non-trainable (27 BatchNorms, 10,944 channels).
 *  - InceptionV3: 23,851,784 total, 23,817,352 trainable, 34,432
 *    non-trainable (94 BatchNorms with scale=False: beta, mean, variance).
 *  - vgg16_functional (a transfer head on VGG16's convolutions): the
 *    13 convolutions 14,714,688 (VGG16 without top), fc1 25088 * 4096 +
 *    4096 = 102,764,544, fc2 4096 * 4096 + 4096 = 16,781,312, dense_5
 *    4096 * 2 + 2 = 8,194: 134,268,738 (the full ImageNet VGG16's
 *    138,357,544 less its 1000-way head 4,097,000 plus dense_5's 8,194).
 *  - mnist_small_cnn: conv2d_2 3*3*1*32 + 32 = 320; conv2d_3 3*3*32*64 + 64
 *    = 18,496; Flatten 24*24*64 = 36,864; dense_5 36,864*128 + 128 =
 *    4,718,720; dense_6 128*10 + 10 = 1,290: 4,738,826.
 *  - lstm_sentiment: Embedding 20000*128 = 2,560,000; LSTM(128) on 128
 *    features 4*(128*(128+128) + 128) = 131,584; LSTM(64) on 128
 *    4*(64*(128+64) + 64) = 49,408; Dense(64) 64*64 + 64 = 4,160; Dense(1)
 *    65: 2,745,217.
 *  - fashion_mnist_mlp (Keras 3): 784*1024 + 1024 = 803,840; 1024*512 + 512
 *    = 524,800; 512*256 + 256 = 131,328; 256*128 + 128 = 32,896; 128*10 +
 *    10 = 1,290: 1,494,154.
 *  - resnet50_nested_in_sequential (Keras 2.7): ResNet50 without top
 *    23,587,712 (frozen), Dense(512) on 2048: 1,049,088, Dense(2) 1,026:
 *    24,637,826, trainable 1,050,114.
 *  - resnet50_transfer (Keras 3): the same base 23,587,712 + Dense(512)
 *    1,049,088 + Dense(10) 5,130 = 24,641,930; the base is frozen except
 *    conv5_block3_3_conv (512*2048 + 2048 = 1,050,624) and
 *    conv5_block3_3_bn's gamma and beta (4,096): trainable 1,050,624 +
 *    4,096 + 1,054,218 = 2,108,938.
 *  - mobilenet_nested_in_sequential (Keras 2.7; the base is MobileNetV2,
 *    2,257,984 without top, frozen): GlobalAveragePooling 1280, Dense(512)
 *    655,872, Dense(2) 1,026: 2,914,882, trainable 656,898. */
static void test_parameter_counts(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        int64_t total, trainable, bn;
    } cases[] = {
        {"resnet50_keras2.1.6.json", 25636712, 25583592, 53},
        {"mobilenet_keras2.1.6.json", 4253864, 4231976, 27},
        {"inceptionv3_keras2.1.6.json", 23851784, 23817352, 94},
        {"vgg16_functional_keras2.6.json", 134268738, 134268738, 0},
        {"mnist_small_cnn_keras2.15.json", 4738826, 4738826, 0},
        {"lstm_sentiment_keras2.10.json", 2745217, 2745217, 0},
        {"fashion_mnist_mlp_keras3.json", 1494154, 1494154, 0},
        {"resnet50_nested_in_sequential_keras2.7.json", 24637826, 1050114, 53},
        {"resnet50_transfer_keras3.json", 24641930, 2108938, 53},
        {"mobilenet_nested_in_sequential_keras2.7.json", 2914882, 656898, 52},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, "tests/models/keras/%s", cases[k].file);
        dnnmem_model *m = load(path);
        struct counts c = count(m);
        if (c.total != cases[k].total || c.trainable != cases[k].trainable || c.bn != cases[k].bn)
            fail_msg("%s: %lld params, %lld trainable, %lld BatchNorms; want %lld, %lld, %lld",
                     cases[k].file, (long long)c.total, (long long)c.trainable, (long long)c.bn,
                     (long long)cases[k].total, (long long)cases[k].trainable,
                     (long long)cases[k].bn);
        /* the weights figure: 4 bytes a parameter, and the int64
         * num_batches_tracked PyTorch keeps per BatchNorm */
        struct dnnmem_dim_binding hw[2] = {{"height", 299}, {"width", 299}};
        bool inception = strstr(cases[k].file, "inception") != NULL;
        struct dnnmem_result *r = estimate(m, DNNMEM_MODE_INFER, 1, hw, inception ? 2 : 0);
        assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT],
                         4 * (uint64_t)cases[k].total + 8 * (uint64_t)cases[k].bn);
        dnnmem_result_free(r);
        dnnmem_model_free(m);
    }
}

/* Format, inputs, symbols, weight names. */
static void test_model_info(void **state)
{
    (void)state;
    dnnmem_model *m = load("tests/models/keras/resnet50_keras2.1.6.json");
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    assert_string_equal(info.format, "keras");
    assert_non_null(strstr(info.producer, "Keras 2.1.6-tf Model"));
    assert_int_equal(info.n_inputs, 1);
    assert_int_equal(info.n_symbols, 1);
    assert_string_equal(dnnmem_model_symbol(m, 0), "batch");
    /* 53 convolutions with bias, 53 BatchNorms of 4 tensors, fc1000 */
    assert_int_equal(info.n_weights, 53 * 2 + 53 * 4 + 2);
    const struct dm_graph *g = dm_model_graph(m);
    int32_t x = dm_graph_find(g, "input_1");
    assert_true(x >= 0);
    assert_int_equal(g->tensors[x].rank, 4);
    assert_int_equal(g->tensors[x].dims[1].value, 224);
    assert_int_equal(g->tensors[x].dims[3].value, 3);
    int32_t w = dm_graph_find(g, "conv1/kernel");
    assert_true(w >= 0); /* [filters, in, kh, kw] */
    assert_int_equal(g->tensors[w].dims[0].value, 64);
    assert_int_equal(g->tensors[w].dims[1].value, 3);
    assert_int_equal(g->tensors[w].dims[2].value, 7);
    assert_true(dm_graph_find(g, "bn_conv1/moving_variance") >= 0);
    assert_true(dm_graph_find(g, "fc1000/kernel") >= 0);
    dnnmem_model_free(m);

    /* nested models: weights under the model's name; InceptionV3's free
     * spatial dims are "height" and "width" */
    m = load("tests/models/keras/resnet50_transfer_keras3.json");
    g = dm_model_graph(m);
    assert_true(dm_graph_find(g, "resnet50/conv1_conv/kernel") >= 0);
    assert_true(dm_graph_find(g, "dense_1/bias") >= 0);
    dnnmem_model_get_info(m, &info);
    assert_non_null(strstr(info.producer, "Keras 3 Sequential"));
    dnnmem_model_free(m);
    /* a mixed-precision policy: float32 variables, and the producer says so */
    m = load_json("{\"class_name\": \"Sequential\", \"keras_version\": \"2.15.0\", \"config\": "
                  "{\"name\": \"s\", \"layers\": [{\"class_name\": \"Dense\", \"config\": "
                  "{\"name\": \"d\", \"units\": 3, \"batch_input_shape\": [null, 4], \"dtype\": "
                  "{\"class_name\": \"Policy\", \"config\": {\"name\": \"mixed_float16\"}}}}]}}");
    dnnmem_model_get_info(m, &info);
    assert_non_null(strstr(info.producer, "dtype policy mixed_float16, built float32 (use "
                                          "--precision amp-fp16)"));
    assert_int_equal(count(m).total, 15);
    dnnmem_model_free(m);
    m = load("tests/models/keras/inceptionv3_keras2.1.6.json");
    dnnmem_model_get_info(m, &info);
    assert_int_equal(info.n_symbols, 3);
    assert_string_equal(dnnmem_model_symbol(m, 1), "height");
    assert_string_equal(dnnmem_model_symbol(m, 2), "width");
    dnnmem_model_free(m);
}

/* Shapes under batch 2 and the given other symbols. */
static struct dm_tinfo *infer(const dnnmem_model *m, struct dm_arena *a, const int64_t *syms)
{
    const struct dm_graph *g = dm_model_graph(m);
    struct dm_tinfo *t = calloc((size_t)g->n_tensors + 1, sizeof *t);
    assert_non_null(t);
    struct dnnmem_error err;
    struct dm_infer ctx = {.g = g, .arena = a, .t = t, .sym_values = syms, .err = &err};
    if (dm_infer_shapes(&ctx) != DNNMEM_OK)
        fail_msg("shapes: %s", err.message);
    return t;
}

static void assert_dims(const dnnmem_model *m, const struct dm_tinfo *t, const char *name,
                        int rank, const int64_t *dims)
{
    int32_t x = dm_graph_find(dm_model_graph(m), name);
    if (x < 0)
        fail_msg("no tensor '%s'", name);
    if (t[x].rank != rank)
        fail_msg("%s: rank %d, want %d", name, t[x].rank, rank);
    for (int k = 0; k < rank; k++)
        if (t[x].dims[k] != dims[k])
            fail_msg("%s: dim %d is %lld, want %lld", name, k, (long long)t[x].dims[k],
                     (long long)dims[k]);
}

#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* A Keras 2 functional model of image layers (8x8x3 input):
 *   c1  Conv2D(4, 3, strides 2, same): [4, 4, 4], 3*3*3*4 + 4 = 112
 *   bn  BatchNormalization(scale=False): beta, mean, variance 3*4 = 12
 *   dw  DepthwiseConv2D(3, same, depth_multiplier 2, no bias): [4, 4, 8], 72
 *   sep SeparableConv2D(6, 3, valid): [2, 2, 6], 3*3*8 + 8*6 + 6 = 126
 *   zp  ZeroPadding2D(((1, 0), (0, 2))): [3, 4, 6]
 *   mp  MaxPooling2D(2): [1, 2, 6]
 *   gap GlobalAveragePooling2D(zp): [6]; flat Flatten(mp): [12]
 *   cat Concatenate([flat, gap]): [18]; d Dense(5, relu): 18*5 + 5 = 95
 * Total 417, trainable 409 (the moving statistics are not). */
static const char *const tiny_image =
    "{\"class_name\": \"Functional\", \"keras_version\": \"2.6.0\", \"config\": {\"name\": \"m\","
    " \"input_layers\": [[\"img\", 0, 0]], \"output_layers\": [[\"sm\", 0, 0]], \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"name\": \"img\", \"config\": {\"name\": \"img\","
    "  \"batch_input_shape\": [null, 8, 8, 3], \"dtype\": \"float32\"}, \"inbound_nodes\": []},"
    "{\"class_name\": \"Conv2D\", \"name\": \"c1\", \"config\": {\"name\": \"c1\", \"filters\": 4,"
    "  \"kernel_size\": [3, 3], \"strides\": [2, 2], \"padding\": \"same\", \"use_bias\": true},"
    "  \"inbound_nodes\": [[[\"img\", 0, 0, {}]]]},"
    "{\"class_name\": \"BatchNormalization\", \"name\": \"bn\", \"config\": {\"name\": \"bn\","
    "  \"axis\": -1, \"scale\": false}, \"inbound_nodes\": [[[\"c1\", 0, 0, {}]]]},"
    "{\"class_name\": \"DepthwiseConv2D\", \"name\": \"dw\", \"config\": {\"name\": \"dw\","
    "  \"kernel_size\": 3, \"padding\": \"same\", \"depth_multiplier\": 2, \"use_bias\": false},"
    "  \"inbound_nodes\": [[[\"bn\", 0, 0, {}]]]},"
    "{\"class_name\": \"SeparableConv2D\", \"name\": \"sep\", \"config\": {\"name\": \"sep\","
    "  \"filters\": 6, \"kernel_size\": [3, 3], \"padding\": \"valid\"},"
    "  \"inbound_nodes\": [[[\"dw\", 0, 0, {}]]]},"
    "{\"class_name\": \"ZeroPadding2D\", \"name\": \"zp\", \"config\": {\"name\": \"zp\","
    "  \"padding\": [[1, 0], [0, 2]]}, \"inbound_nodes\": [[[\"sep\", 0, 0, {}]]]},"
    "{\"class_name\": \"MaxPooling2D\", \"name\": \"mp\", \"config\": {\"name\": \"mp\","
    "  \"pool_size\": [2, 2], \"strides\": null}, \"inbound_nodes\": [[[\"zp\", 0, 0, {}]]]},"
    "{\"class_name\": \"GlobalAveragePooling2D\", \"name\": \"gap\", \"config\": {\"name\": \"gap\"},"
    "  \"inbound_nodes\": [[[\"zp\", 0, 0, {}]]]},"
    "{\"class_name\": \"Flatten\", \"name\": \"flat\", \"config\": {\"name\": \"flat\"},"
    "  \"inbound_nodes\": [[[\"mp\", 0, 0, {}]]]},"
    "{\"class_name\": \"Concatenate\", \"name\": \"cat\", \"config\": {\"name\": \"cat\", \"axis\": -1},"
    "  \"inbound_nodes\": [[[\"flat\", 0, 0, {}], [\"gap\", 0, 0, {}]]]},"
    "{\"class_name\": \"Dense\", \"name\": \"d\", \"config\": {\"name\": \"d\", \"units\": 5,"
    "  \"activation\": \"relu\"}, \"inbound_nodes\": [[[\"cat\", 0, 0, {}]]]},"
    "{\"class_name\": \"Softmax\", \"name\": \"sm\", \"config\": {\"name\": \"sm\"},"
    "  \"inbound_nodes\": [[[\"d\", 0, 0, {}]]]}]}}";

static void test_tiny_image(void **state)
{
    (void)state;
    dnnmem_model *m = load_json(tiny_image);
    struct counts c = count(m);
    assert_int_equal(c.total, 417);
    assert_int_equal(c.trainable, 409);
    struct dm_arena a;
    dm_arena_init(&a);
    int64_t syms[1] = {2};
    struct dm_tinfo *t = infer(m, &a, syms);
    /* channels first in the IR: [N, C, H, W] */
    assert_dims(m, t, "/c1/Conv_output_0", DIMS(2, 4, 4, 4));
    assert_dims(m, t, "/dw/Conv_output_0", DIMS(2, 8, 4, 4));
    assert_dims(m, t, "/sep/Conv_1_output_0", DIMS(2, 6, 2, 2));
    assert_dims(m, t, "/zp/Pad_output_0", DIMS(2, 6, 3, 4));
    assert_dims(m, t, "/mp/MaxPool_output_0", DIMS(2, 6, 1, 2));
    assert_dims(m, t, "/gap/Flatten_output_0", DIMS(2, 6));
    assert_dims(m, t, "/cat/Concat_output_0", DIMS(2, 18));
    assert_dims(m, t, "/sm/Softmax_output_0", DIMS(2, 5));
    const struct dm_graph *g = dm_model_graph(m);
    assert_int_equal(g->n_outputs, 1);
    assert_string_equal(g->tensors[g->outputs[0]].name, "/sm/Softmax_output_0");
    /* the input is NHWC as Keras declares it; the one Transpose to NCHW is a view */
    int transposes = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        transposes += g->nodes[i].op == DM_OP_Transpose;
    assert_int_equal(transposes, 1);
    free(t);
    dm_arena_free(&a);
    dnnmem_model_free(m);
}

/* A Keras 3 functional model of sequence layers, token ids [batch, seq]:
 *   emb  Embedding(50, 8): [S, 8], 400
 *   bi   Bidirectional(LSTM(6, return_sequences)), concat: [S, 12],
 *        2 * 4 * (6 * (8 + 6) + 6) = 720
 *   gru  GRU(5) (reset_after, two biases): [5], 3*5*(12 + 5) + 2*3*5 = 285
 *   rep  RepeatVector(4): [4, 5]
 *   rnn  SimpleRNN(3, return_sequences): [4, 3], 3*(5 + 3) + 3 = 27
 *   perm Permute((2, 1)): [3, 4]
 *   ln   LayerNormalization(): 2*4 = 8
 *   rs   Reshape((12,)); out Dense(2): 12*2 + 2 = 26
 * Total 1466. */
#define KT(layer) "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null], "       \
                  "\"dtype\": \"float32\", \"keras_history\": [\"" layer "\", 0, 0]}}"
#define K3(cls, name, cfg, in)                                                                     \
    "{\"module\": \"keras.layers\", \"class_name\": \"" cls "\", \"registered_name\": null, "      \
    "\"name\": \"" name "\", \"config\": {\"name\": \"" name "\", \"trainable\": true, "           \
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": "            \
    "{\"name\": \"float32\"}, \"registered_name\": null}" cfg "}, \"inbound_nodes\": "            \
    "[{\"args\": [" KT(in) "], \"kwargs\": {}}]}"
static const char *const tiny_seq =
    "{\"module\": \"keras\", \"class_name\": \"Functional\", \"registered_name\": \"Functional\","
    " \"config\": {\"name\": \"s\", \"trainable\": true, \"input_layers\": [[\"tok\", 0, 0]],"
    " \"output_layers\": [[\"out\", 0, 0]], \"layers\": ["
    "{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"registered_name\": null,"
    " \"name\": \"tok\", \"config\": {\"batch_shape\": [null, null], \"dtype\": \"int32\","
    " \"sparse\": false, \"name\": \"tok\"}, \"inbound_nodes\": []},"
    K3("Embedding", "emb", ", \"input_dim\": 50, \"output_dim\": 8", "tok") ","
    K3("Bidirectional", "bi", ", \"merge_mode\": \"concat\", \"layer\": {\"module\": "
       "\"keras.layers\", \"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm\", \"units\": 6,"
       " \"return_sequences\": true}}", "emb") ","
    K3("GRU", "gru", ", \"units\": 5, \"reset_after\": true", "bi") ","
    K3("RepeatVector", "rep", ", \"n\": 4", "gru") ","
    K3("SimpleRNN", "rnn", ", \"units\": 3, \"return_sequences\": true", "rep") ","
    K3("Permute", "perm", ", \"dims\": [2, 1]", "rnn") ","
    K3("LayerNormalization", "ln", ", \"axis\": -1, \"epsilon\": 0.001", "perm") ","
    K3("Reshape", "rs", ", \"target_shape\": [12]", "ln") ","
    K3("Dense", "out", ", \"units\": 2, \"activation\": \"sigmoid\"", "rs") "]}}";

static void test_tiny_sequence(void **state)
{
    (void)state;
    dnnmem_model *m = load_json(tiny_seq);
    assert_int_equal(count(m).total, 1466);
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    assert_int_equal(info.n_symbols, 2);
    assert_string_equal(dnnmem_model_symbol(m, 0), "batch");
    assert_string_equal(dnnmem_model_symbol(m, 1), "seq");
    struct dm_arena a;
    dm_arena_init(&a);
    int64_t syms[2] = {2, 7};
    struct dm_tinfo *t = infer(m, &a, syms);
    assert_dims(m, t, "/emb/Gather_output_0", DIMS(2, 7, 8));
    assert_dims(m, t, "/bi/LSTM_output_0", DIMS(2, 7, 2, 6)); /* [batch, seq, dirs, units] */
    assert_dims(m, t, "/bi/Reshape_output_0", DIMS(2, 7, 12));
    assert_dims(m, t, "/gru/Reshape_output_0", DIMS(2, 5));
    assert_dims(m, t, "/rep/Tile_output_0", DIMS(2, 4, 5));
    assert_dims(m, t, "/rnn/Reshape_output_0", DIMS(2, 4, 3));
    assert_dims(m, t, "/perm/Transpose_output_0", DIMS(2, 3, 4));
    assert_dims(m, t, "/rs/Reshape_output_0", DIMS(2, 12));
    assert_dims(m, t, "/out/Sigmoid_output_0", DIMS(2, 2));
    free(t);
    dm_arena_free(&a);
    /* --seq-len binds the sequence; training runs end to end */
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.batch_size = 4;
    cfg.seq_len = 16;
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    /* the int32 ids: 4 x 16 x 4 bytes */
    assert_int_equal(r->category_bytes[DNNMEM_CAT_INPUT] >= 4 * 16 * 4, true);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
}

#define SEQ_HEAD                                                                                   \
    "{\"class_name\": \"Sequential\", \"keras_version\": \"2.15.0\", \"config\": {\"name\": "      \
    "\"s\", \"layers\": ["

/* A Keras 2 transformer block on [batch, 16, 32] (self-attention: the
 * value passed by keyword):
 *   mha MultiHeadAttention(4 heads, key_dim 8): query, key, value kernels
 *       [32, 4, 8] + biases [4, 8]: 3 * 1056; attention_output [4, 8, 32] +
 *       [32]: 1056; 4224 in all
 *   add, ln1 LayerNormalization 2*32 = 64, ff1 Dense(64) 32*64 + 64 = 2112,
 *   ff2 Dense(32) 64*32 + 32 = 2080, add2, ln2 64, GlobalAveragePooling1D,
 *   out Dense(2) 66: 8610. */
#define K2(cls, name, cfg, in)                                                                     \
    "{\"class_name\": \"" cls "\", \"name\": \"" name "\", \"config\": {\"name\": \"" name    \
    "\"" cfg "}, \"inbound_nodes\": [[" in "]]}"
static const char *const tiny_transformer =
    "{\"class_name\": \"Functional\", \"keras_version\": \"2.13.1\", \"config\": {\"name\": \"t\","
    " \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]], \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": {\"name\": \"x\","
    "  \"batch_input_shape\": [null, 16, 32], \"dtype\": \"float32\"}, \"inbound_nodes\": []},"
    K2("MultiHeadAttention", "mha", ", \"num_heads\": 4, \"key_dim\": 8, \"value_dim\": 8,"
       " \"dropout\": 0.1, \"use_bias\": true, \"output_shape\": null, \"attention_axes\": null",
       "[\"x\", 0, 0, {\"value\": [\"x\", 0, 0]}]") ","
    K2("Add", "add", "", "[\"x\", 0, 0, {}], [\"mha\", 0, 0, {}]") ","
    K2("LayerNormalization", "ln1", ", \"axis\": [2], \"epsilon\": 1e-6", "[\"add\", 0, 0, {}]") ","
    K2("Dense", "ff1", ", \"units\": 64, \"activation\": \"gelu\"", "[\"ln1\", 0, 0, {}]") ","
    K2("Dense", "ff2", ", \"units\": 32", "[\"ff1\", 0, 0, {}]") ","
    K2("Add", "add2", "", "[\"ln1\", 0, 0, {}], [\"ff2\", 0, 0, {}]") ","
    K2("LayerNormalization", "ln2", ", \"axis\": -1", "[\"add2\", 0, 0, {}]") ","
    K2("GlobalAveragePooling1D", "gap", "", "[\"ln2\", 0, 0, {}]") ","
    K2("Dense", "out", ", \"units\": 2, \"activation\": \"softmax\"", "[\"gap\", 0, 0, {}]")
    "]}}";

static void test_tiny_transformer(void **state)
{
    (void)state;
    dnnmem_model *m = load_json(tiny_transformer);
    assert_int_equal(count(m).total, 8610);
    const struct dm_graph *g = dm_model_graph(m);
    int32_t w = dm_graph_find(g, "mha/query/kernel");
    assert_true(w >= 0);
    assert_int_equal(g->tensors[w].rank, 3);
    assert_true(dm_graph_find(g, "mha/attention_output/bias") >= 0);
    struct dm_arena a;
    dm_arena_init(&a);
    int64_t syms[1] = {2};
    struct dm_tinfo *t = infer(m, &a, syms);
    assert_dims(m, t, "/mha/MatMul_3_output_0", DIMS(2, 4, 16, 16)); /* the scores */
    assert_dims(m, t, "/mha/Add_3_output_0", DIMS(2, 16, 32));
    assert_dims(m, t, "/gap/Flatten_output_0", DIMS(2, 32));
    free(t);
    dm_arena_free(&a);
    struct dnnmem_result *r = estimate(m, DNNMEM_MODE_TRAIN, 8, NULL, 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 4 * 8610);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
}

/* Wrappers and resampling, on 5 frames of 9x9x3:
 *   td  TimeDistributed(Conv2D(4, 3)): [5, 7, 7, 4], 3*3*3*4 + 4 = 112
 *   td2 TimeDistributed(Flatten()): [5, 196]
 *   td3 TimeDistributed(Dense(6)): [5, 6], 196*6 + 6 = 1182
 *   r   Reshape((5, 6, 1)); up UpSampling2D((2, 3)): [10, 18, 1]
 *   cr  Cropping2D(((1, 2), (0, 3))): [7, 15, 1]
 * Total 1294. */
static const char *const tiny_wrappers =
    SEQ_HEAD "{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\":"
    " [null, 5, 9, 9, 3]}},"
    "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"td\", \"layer\": {\"class_name\":"
    " \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 4, \"kernel_size\": 3}}}},"
    "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"td2\", \"layer\": {\"class_name\":"
    " \"Flatten\", \"config\": {\"name\": \"f\"}}}},"
    "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"td3\", \"layer\": {\"class_name\":"
    " \"Dense\", \"config\": {\"name\": \"d\", \"units\": 6}}}},"
    "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", \"target_shape\": [5, 6, 1]}},"
    "{\"class_name\": \"UpSampling2D\", \"config\": {\"name\": \"up\", \"size\": [2, 3]}},"
    "{\"class_name\": \"Cropping2D\", \"config\": {\"name\": \"cr\", \"cropping\": [[1, 2], [0, 3]]}}"
    "]}}";

static void test_tiny_wrappers(void **state)
{
    (void)state;
    dnnmem_model *m = load_json(tiny_wrappers);
    assert_int_equal(count(m).total, 1294);
    assert_true(dm_graph_find(dm_model_graph(m), "td/kernel") >= 0);
    struct dm_arena a;
    dm_arena_init(&a);
    int64_t syms[1] = {2};
    struct dm_tinfo *t = infer(m, &a, syms);
    assert_dims(m, t, "/td/Conv_output_0", DIMS(10, 4, 7, 7));
    assert_dims(m, t, "/td/Reshape_1_output_0", DIMS(2, 5, 7, 7, 4));
    assert_dims(m, t, "/td2/Reshape_1_output_0", DIMS(2, 5, 196));
    assert_dims(m, t, "/td3/Add_output_0", DIMS(2, 5, 6));
    assert_dims(m, t, "/up/Resize_output_0", DIMS(2, 1, 10, 18));
    assert_dims(m, t, "/cr/Slice_output_0", DIMS(2, 1, 7, 15));
    free(t);
    dm_arena_free(&a);
    dnnmem_model_free(m);
}

/* Training: every estimate runs end to end; frozen layers get no optimizer
 * state (SGD momentum: one buffer per trainable parameter). */
static void test_train(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        int64_t trainable;
    } cases[] = {
        {"mnist_small_cnn_keras2.15.json", 4738826},
        {"lstm_sentiment_keras2.10.json", 2745217},
        {"fashion_mnist_mlp_keras3.json", 1494154},
        {"resnet50_transfer_keras3.json", 2108938},
        {"mobilenet_nested_in_sequential_keras2.7.json", 656898},
        {"resnet50_keras2.1.6.json", 25583592},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, "tests/models/keras/%s", cases[k].file);
        dnnmem_model *m = load(path);
        struct dnnmem_result *r = estimate(m, DNNMEM_MODE_TRAIN, 32, NULL, 0);
        if (r->category_bytes[DNNMEM_CAT_OPTIMIZER] != 4 * (uint64_t)cases[k].trainable)
            fail_msg("%s: optimizer state %llu B, want 4 x %lld", cases[k].file,
                     (unsigned long long)r->category_bytes[DNNMEM_CAT_OPTIMIZER],
                     (long long)cases[k].trainable);
        assert_true(r->peak_allocated > 4 * (uint64_t)cases[k].trainable);
        dnnmem_result_free(r);
        dnnmem_model_free(m);
    }
}

static void expect_error(const char *json, enum dnnmem_status want, const char *needle)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    enum dnnmem_status s = dnnmem_model_load_buffer(json, strlen(json), "k.json", &m, &err);
    if (s != want || !strstr(err.message, needle) || strncmp(err.message, "k.json: ", 8) != 0 ||
        strchr(err.message, '\n'))
        fail_msg("%.80s...: got status %d '%s', want %d with '%s'", json, (int)s,
                 s ? err.message : "", (int)want, needle);
    assert_null(m);
}

#define SEQ(layers)                                                                                \
    "{\"class_name\": \"Sequential\", \"keras_version\": \"2.15.0\", \"config\": {\"name\": "      \
    "\"s\", \"layers\": [" layers "]}}"
#define INPUT(shape)                                                                               \
    "{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\": "      \
    shape ", \"dtype\": \"float32\"}}"

static void test_errors(void **state)
{
    (void)state;
    expect_error(SEQ(INPUT("[null, 4]") ", {\"class_name\": \"Lambda\", \"config\": {\"name\": "
                     "\"my_lambda\", \"function\": \"x\"}}"),
                 DNNMEM_E_UNSUPPORTED, "layer 'my_lambda' (Lambda): class 'Lambda' is not supported");
    expect_error(SEQ(INPUT("[null, 8, 8, 3]") ", {\"class_name\": \"Conv2D\", \"config\": "
                     "{\"name\": \"c\", \"kernel_size\": 3}}"),
                 DNNMEM_E_MODEL, "layer 'c' (Conv2D): config field 'filters' is missing");
    expect_error(SEQ(INPUT("[null, 4]") ", {\"class_name\": \"Dense\", \"config\": {\"name\": "
                     "\"d\", \"units\": 1000000000000}}"),
                 DNNMEM_E_SHAPE, "layer 'd' (Dense): config field 'units' is 1000000000000, an absurd size");
    expect_error(SEQ(INPUT("[null, 99999999999]")), DNNMEM_E_SHAPE, "input 'in' dim 1 is not a size");
    expect_error(SEQ(INPUT("[null, -3]")), DNNMEM_E_MODEL, "input 'in' dim 1 is not a size");
    expect_error(SEQ(INPUT("[null, 4]") ", {\"class_name\": \"Dense\", \"config\": {\"name\": "
                     "\"d\", \"units\": 3, \"activation\": \"mish\"}}"),
                 DNNMEM_E_UNSUPPORTED, "layer 'd' (Dense): activation 'mish' is not supported");
    /* no input shape anywhere: named, not guessed */
    expect_error(SEQ("{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}"),
                 DNNMEM_E_MODEL, "the input shape is missing: the Sequential model has no "
                 "InputLayer, its first layer 'd' no 'batch_input_shape'");
    /* a weight that depends on a None dim */
    expect_error(SEQ(INPUT("[null, null]") ", {\"class_name\": \"Dense\", \"config\": {\"name\": "
                     "\"d\", \"units\": 3}}"),
                 DNNMEM_E_SHAPE, "layer 'd' (Dense): the input's last dim (axis 1) is None");
    expect_error(SEQ(INPUT("[null, 2, 2, 3]") ", {\"class_name\": \"Conv2D\", \"config\": "
                     "{\"name\": \"c\", \"filters\": 4, \"kernel_size\": 3}}"),
                 DNNMEM_E_SHAPE, "the window (3) is larger than the input (2)");
    expect_error("{\"class_name\": \"Functional\", \"keras_version\": \"2.6.0\", \"config\": "
                 "{\"name\": \"f\", \"input_layers\": [[\"a\", 0, 0]], \"output_layers\": "
                 "[[\"b\", 0, 0]], \"layers\": [{\"class_name\": \"InputLayer\", \"name\": \"a\", "
                 "\"config\": {\"name\": \"a\", \"batch_input_shape\": [null, 3]}, "
                 "\"inbound_nodes\": []}, {\"class_name\": \"Dense\", \"name\": \"b\", \"config\": "
                 "{\"name\": \"b\", \"units\": 2}, \"inbound_nodes\": [[[\"zz\", 0, 0, {}]]]}]}}",
                 DNNMEM_E_MODEL, "the input 'zz' (call 0) is no layer output of the model");
    expect_error("{\"class_name\": \"Sequential\", \"config\": {\"layers\": [", DNNMEM_E_PARSE,
                 "not valid JSON");
}

/* ---- .keras archives --------------------------------------------------------------
 * Archives are written here with libzip into memory (its in-memory source,
 * as libzip's examples/in-memory.c does), so each case states its members. */

struct member {
    const char *name;
    const void *data;
    size_t size;
};

static uint8_t *make_zip(const struct member *mem, int n, size_t *size)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(NULL, 0, 0, &ze);
    assert_non_null(src);
    zip_t *za = zip_open_from_source(src, ZIP_TRUNCATE, &ze);
    assert_non_null(za);
    zip_source_keep(src);
    for (int i = 0; i < n; i++) {
        zip_source_t *body = zip_source_buffer(za, mem[i].data, mem[i].size, 0);
        assert_non_null(body);
        assert_true(zip_file_add(za, mem[i].name, body, ZIP_FL_OVERWRITE) >= 0);
    }
    assert_int_equal(zip_close(za), 0);
    zip_stat_t st;
    assert_int_equal(zip_source_stat(src, &st), 0);
    assert_int_equal(zip_source_open(src), 0);
    uint8_t *buf = malloc(st.size);
    assert_non_null(buf);
    assert_int_equal(zip_source_read(src, buf, st.size), (zip_int64_t)st.size);
    zip_source_close(src);
    zip_source_free(src);
    zip_error_fini(&ze);
    *size = st.size;
    return buf;
}

static char *read_text(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *size = (size_t)n;
    return buf;
}

static void expect_archive_error(const uint8_t *zip, size_t size, enum dnnmem_status want,
                                 const char *needle)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    enum dnnmem_status s = dnnmem_model_load_buffer(zip, size, "m.keras", &m, &err);
    if (s != want || !strstr(err.message, needle) || strncmp(err.message, "m.keras: ", 9) != 0 ||
        strchr(err.message, '\n'))
        fail_msg("archive: got status %d '%s', want %d with '%s'", (int)s, s ? err.message : "",
                 (int)want, needle);
    assert_null(m);
}

/* The same model from its bare config JSON and from an archive: the same
 * graph, parameter count and estimate; the archive is found by its magic
 * whatever its name. */
static void test_archive(void **state)
{
    (void)state;
    size_t n_cfg;
    char *cfg = read_text("tests/models/keras/fashion_mnist_mlp_keras3.json", &n_cfg);
    /* synthetic metadata.json, in saving_lib.py's layout */
    static const char meta[] = "{\"keras_version\": \"3.9.9\", \"date_saved\": \"2024-01-01@00:00:00\"}";
    static const char weights[] = "\x89HDF\r\n\x1a\n not read";
    struct member mem[] = {{"metadata.json", meta, sizeof meta - 1},
                           {"config.json", cfg, n_cfg},
                           {"model.weights.h5", weights, sizeof weights - 1}};
    size_t n_zip;
    uint8_t *zip = make_zip(mem, 3, &n_zip);
    dnnmem_model *a, *b = load_json(cfg);
    struct dnnmem_error err;
    if (dnnmem_model_load_buffer(zip, n_zip, "fashion.bin", &a, &err) != DNNMEM_OK)
        fail_msg("archive: %s", err.message);
    assert_int_equal(count(a).total, 1494154);
    assert_int_equal(count(a).total, count(b).total);
    struct dnnmem_model_info info;
    dnnmem_model_get_info(a, &info);
    assert_string_equal(info.format, "keras");
    assert_non_null(strstr(info.producer, "Keras 3.9.9 Sequential"));
    struct dnnmem_result *ra = estimate(a, DNNMEM_MODE_TRAIN, 32, NULL, 0);
    struct dnnmem_result *rb = estimate(b, DNNMEM_MODE_TRAIN, 32, NULL, 0);
    assert_int_equal(ra->peak_allocated, rb->peak_allocated);
    assert_int_equal(ra->peak_reserved, rb->peak_reserved);
    assert_int_equal(ra->total_bytes, rb->total_bytes);
    assert_memory_equal(ra->category_bytes, rb->category_bytes, sizeof ra->category_bytes);
    dnnmem_result_free(ra);
    dnnmem_result_free(rb);
    dnnmem_model_free(a);
    dnnmem_model_free(b);

    /* without metadata.json: Keras 3 from the layout */
    size_t n1;
    uint8_t *z1 = make_zip(mem + 1, 1, &n1);
    if (dnnmem_model_load_buffer(z1, n1, "m.keras", &a, &err) != DNNMEM_OK)
        fail_msg("archive: %s", err.message);
    dnnmem_model_get_info(a, &info);
    assert_non_null(strstr(info.producer, "Keras 3 Sequential"));
    dnnmem_model_free(a);
    free(z1);

    /* no config.json (a zip that is not a Keras archive) */
    z1 = make_zip(mem, 1, &n1);
    expect_archive_error(z1, n1, DNNMEM_E_MODEL, "m.keras: config.json: no such member");
    free(z1);
    /* truncated: no central directory */
    expect_archive_error(zip, n_zip / 2, DNNMEM_E_PARSE,
                         "a zip archive (a .keras model?) that cannot be read");
    expect_archive_error((const uint8_t *)"PK\003\004 zip bytes", 14, DNNMEM_E_PARSE,
                         "that cannot be read");
    /* corrupt: a byte of config.json's compressed data flipped (CRC or
     * inflate error). Its local header: name length at 26, extra at 28,
     * compressed size at 18, data after the 30-byte header, name, extra. */
    uint8_t *bad = malloc(n_zip);
    assert_non_null(bad);
    memcpy(bad, zip, n_zip);
    size_t h = 0;
    while (h + 30 < n_zip && !(memcmp(bad + h, "PK\003\004", 4) == 0 &&
                               memcmp(bad + h + 30, "config.json", 11) == 0))
        h++;
    assert_true(h + 30 < n_zip);
    size_t data = h + 30 + (bad[h + 26] | bad[h + 27] << 8) + (bad[h + 28] | bad[h + 29] << 8);
    uint32_t csize = (uint32_t)bad[h + 18] | (uint32_t)bad[h + 19] << 8 |
                     (uint32_t)bad[h + 20] << 16 | (uint32_t)bad[h + 21] << 24;
    assert_true(csize > 16 && data + csize <= n_zip);
    bad[data + csize / 2] ^= 0x55;
    expect_archive_error(bad, n_zip, DNNMEM_E_PARSE, "m.keras: config.json: ");
    free(bad);
    free(zip);

    /* config.json that is not JSON: the member named */
    struct member notjson[] = {{"config.json", "{\"class_name\": ", 15}};
    zip = make_zip(notjson, 1, &n_zip);
    expect_archive_error(zip, n_zip, DNNMEM_E_PARSE, "m.keras: config.json: not valid JSON");
    free(zip);

    /* oversized: valid JSON padded past the 64 MiB cap (spaces deflate to
     * ~64 KB); refused from the stated size, before any allocation */
    size_t big = (size_t)(64 << 20) + 1;
    char *pad = malloc(big);
    assert_non_null(pad);
    memset(pad, ' ', big);
    memcpy(pad, cfg, n_cfg);
    struct member huge[] = {{"config.json", pad, big}};
    zip = make_zip(huge, 1, &n_zip);
    free(pad);
    assert_true(n_zip < big / 100);
    expect_archive_error(zip, n_zip, DNNMEM_E_PARSE,
                         "m.keras: config.json: 67108865 bytes uncompressed, over the "
                         "67108864-byte cap for this member");
    free(zip);
    free(cfg);
}

/* ---- TensorFlow's per-op rules (--framework tensorflow; src/train/train.c) ----
 * Each case compares the same network with the Keras 2 layer TF would run
 * fused and with it unfused (a config field that turns the fused kernel off),
 * under the TF profile, at the layer's own steps of the timeline: the bytes
 * requested and live where the step's allocation is highest (BFC hands out
 * unsplit chunks, so allocated bytes would add its slack). */

static struct dnnmem_result *estimate_tf(const dnnmem_model *m, enum dnnmem_mode mode,
                                         enum dnnmem_framework fw, int64_t batch,
                                         enum dnnmem_tf_execution exec,
                                         enum dnnmem_precision precision)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = mode;
    cfg.batch_size = batch;
    cfg.framework = fw;
    cfg.tf_execution = exec;
    cfg.precision = precision;
    cfg.timeline = true;
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    return r;
}

/* The eager rules (--tf-execution eager) at float32. */
static struct dnnmem_result *estimate_fw(const dnnmem_model *m, enum dnnmem_mode mode,
                                         enum dnnmem_framework fw, int64_t batch)
{
    return estimate_tf(m, mode, fw, batch, DNNMEM_TF_EAGER, DNNMEM_PRECISION_FP32);
}

/* Requested bytes live at the step of `node` in `phase` of the last iteration. */
static uint64_t at_step(const struct dnnmem_result *r, const char *phase, const char *node)
{
    int it = 0;
    uint64_t v = 0;
    for (size_t k = 0; k < r->n_timeline; k++) {
        const struct dnnmem_timeline_point *p = &r->timeline[k];
        if (!strcmp(p->phase, phase) && !strcmp(p->node, node) && p->iteration >= it) {
            it = p->iteration;
            v = 0;
            for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
                v += p->category_bytes[c];
        }
    }
    if (!it)
        fail_msg("no %s step at %s", phase, node);
    return v;
}

static int count_attr(const dnnmem_model *m, const char *attr)
{
    const struct dm_graph *g = dm_model_graph(m);
    int c = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        c += dm_attr_int(&g->nodes[i], attr, 0) != 0;
    return c;
}

#define TF_CNN(bn)                                                                                 \
    SEQ(INPUT("[null, 16, 16, 8]") ", {\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "  \
        "\"filters\": 8, \"kernel_size\": 1}}, {\"class_name\": \"BatchNormalization\", \"config\": " \
        "{\"name\": \"bn\"" bn "}}, {\"class_name\": \"GlobalAveragePooling2D\", \"config\": "     \
        "{\"name\": \"g\"}}, {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "            \
        "\"units\": 2}}")
#define TF_LN(ln)                                                                                  \
    SEQ(INPUT("[null, 16, 32]") ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d0\", "       \
        "\"units\": 32}}, {\"class_name\": \"LayerNormalization\", \"config\": {\"name\": \"ln\""   \
        ln "}}, {\"class_name\": \"GlobalAveragePooling1D\", \"config\": {\"name\": \"g\"}}, "      \
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}}")

#define TF_CHAIN(bias, act)                                                                        \
    SEQ(INPUT("[null, 16, 16, 8]") ", {\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "  \
        "\"filters\": 8, \"kernel_size\": 1, \"use_bias\": " bias "}}, {\"class_name\": "         \
        "\"Activation\", \"config\": {\"name\": \"a\", \"activation\": \"" act "\"}}, "          \
        "{\"class_name\": \"GlobalAveragePooling2D\", \"config\": {\"name\": \"g\"}}, "           \
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}}")

/* Eager TF's op chains (src/train/tf_eager.def), inference at batch 4:
 * x and each [4, 16, 16, 8] float32 tensor are 32,768 B; the weights 256 B
 * (kernel) + 64 + 8 (Dense) + 32 (a bias). With a linear activation the
 * peak is the biased convolution's step: its pre-bias output, then
 * BiasAdd's (x + 2 tensors; without a bias x + 1 and the pooled output). With
 * an activation the peak is its step, its input the conv's output: relu
 * adds its output (x + 2 tensors); exact gelu has
 * 0.5 * x, -x and -x * 0.7071 live at once (x + 4). The PyTorch profile
 * runs neither chain. */
static void test_tf_chains(void **state)
{
    (void)state;
    dnnmem_model *b = load_json(TF_CHAIN("true", "linear")), *n = load_json(TF_CHAIN("false", "linear"));
    dnnmem_model *re = load_json(TF_CHAIN("false", "relu")), *ge = load_json(TF_CHAIN("false", "gelu"));
    struct dnnmem_result *rb = estimate_fw(b, DNNMEM_MODE_INFER, DNNMEM_FW_TENSORFLOW, 4);
    struct dnnmem_result *rn = estimate_fw(n, DNNMEM_MODE_INFER, DNNMEM_FW_TENSORFLOW, 4);
    struct dnnmem_result *rr = estimate_fw(re, DNNMEM_MODE_INFER, DNNMEM_FW_TENSORFLOW, 4);
    struct dnnmem_result *rg = estimate_fw(ge, DNNMEM_MODE_INFER, DNNMEM_FW_TENSORFLOW, 4);
    assert_int_equal(rb->peak_requested, 3 * 32768 + 328 + 32);
    assert_int_equal(rr->peak_requested, 3 * 32768 + 328);
    assert_int_equal(rg->peak_requested, 5 * 32768 + 328);
    dnnmem_result_free(rb);
    dnnmem_result_free(rn);
    dnnmem_result_free(rr);
    dnnmem_result_free(rg);
    rr = estimate_fw(re, DNNMEM_MODE_INFER, DNNMEM_FW_PYTORCH, 4);
    rg = estimate_fw(ge, DNNMEM_MODE_INFER, DNNMEM_FW_PYTORCH, 4);
    assert_int_equal(rg->peak_requested, rr->peak_requested);
    dnnmem_result_free(rr);
    dnnmem_result_free(rg);
    dnnmem_model_free(b);
    dnnmem_model_free(n);
    dnnmem_model_free(re);
    dnnmem_model_free(ge);
}

static void test_tf_rules(void **state)
{
    (void)state;
    const char *bn = "/bn/BatchNormalization", *ln = "/ln/LayerNormalization";
    /* BatchNormalization, Keras 2 channels-last: FusedBatchNormV3 on NHWC
     * data transposes around cuDNN in training. x = [4, 16, 16, 8] float32
     * = 32,768 B: forward x_transformed and y_transformed (2 x 32,768 =
     * 65,536 B at the BN's forward step), backward
     * y_backprop_transformed, x_transformed, x_backprop_transformed (3 x
     * 32,768 = 98,304 B more at its backward step); nothing in inference
     * (the kernel's NHWC path) nor under the PyTorch profile. */
    dnnmem_model *f = load_json(TF_CNN("")), *u = load_json(TF_CNN(", \"fused\": false"));
    assert_int_equal(count_attr(f, "tf_fused_nhwc"), 1);
    assert_int_equal(count_attr(u, "tf_fused_nhwc"), 0);
    struct dnnmem_result *rf = estimate_fw(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4);
    struct dnnmem_result *ru = estimate_fw(u, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4);
    /* the unfused layer (tf.nn.moments, tf.nn.batch_normalization) keeps two
     * more x-sized tensors on the tape (squared difference, x * inv:
     * tf_tape.def), the fused one its [8] float32 reserve spaces (2 x 32 B) */
    assert_int_equal(at_step(rf, "forward", bn) - at_step(ru, "forward", bn),
                     2 * 32768 + 64 - 2 * 32768);
    assert_int_equal(at_step(rf, "backward", bn) - at_step(ru, "backward", bn),
                     3 * 32768 + 64 - 2 * 32768);
    assert_string_equal(rf->peak_node, bn);
    assert_string_equal(rf->peak_phase, "backward");
    dnnmem_result_free(rf);
    dnnmem_result_free(ru);
    /* eager inference: the fused kernel writes y alone; the unfused layer's
     * tf.nn.batch_normalization makes x * inv (32,768 B) before `+ shift`
     * makes y (tf_eager.def): one x-sized tensor more at the BN's step */
    rf = estimate_fw(f, DNNMEM_MODE_INFER, DNNMEM_FW_TENSORFLOW, 4);
    ru = estimate_fw(u, DNNMEM_MODE_INFER, DNNMEM_FW_TENSORFLOW, 4);
    assert_int_equal(ru->peak_requested - rf->peak_requested, 32768);
    assert_int_equal(ru->peak_allocated - rf->peak_allocated, 32768);
    dnnmem_result_free(rf);
    dnnmem_result_free(ru);
    rf = estimate_fw(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_PYTORCH, 4);
    ru = estimate_fw(u, DNNMEM_MODE_TRAIN, DNNMEM_FW_PYTORCH, 4);
    assert_int_equal(rf->peak_allocated, ru->peak_allocated);
    assert_int_equal(rf->total_bytes, ru->total_bytes);
    dnnmem_result_free(rf);
    dnnmem_result_free(ru);
    dnnmem_model_free(f);
    dnnmem_model_free(u);
    /* not fused: channels_first is NCHW already; frozen runs in inference
     * mode; renorm; Keras 3 (moments + batch_normalization) */
    static const char *const unfused[] = {
        ", \"axis\": 1", ", \"trainable\": false", ", \"renorm\": true",
        ", \"virtual_batch_size\": 2"};
    for (size_t k = 0; k < sizeof unfused / sizeof unfused[0]; k++) {
        char json[2048];
        snprintf(json, sizeof json, TF_CNN("%s"), unfused[k]);
        f = load_json(json);
        assert_int_equal(count_attr(f, "tf_fused_nhwc"), 0);
        dnnmem_model_free(f);
    }
    f = load("tests/models/keras/resnet50_keras2.1.6.json");
    assert_int_equal(count_attr(f, "tf_fused_nhwc"), 53);
    dnnmem_model_free(f);
    f = load("tests/models/keras/resnet50_transfer_keras3.json");
    assert_int_equal(count_attr(f, "tf_fused_nhwc"), 0);
    dnnmem_model_free(f);
    f = load("tests/models/keras/resnet50_nested_in_sequential_keras2.7.json"); /* base frozen */
    assert_int_equal(count_attr(f, "tf_fused_nhwc"), 0);
    dnnmem_model_free(f);

    /* LayerNormalization, Keras 2's fused path (epsilon >= 1.001e-5): the
     * output [4, 16, 32] float32 = 8,192 B, 64 rows. Training keeps, beyond
     * PyTorch's input, mean and rstd: ones([64]) (256 B), the normalized
     * output and `* gamma`'s (2 x 8,192), so the LN's forward step has
     * 16,640 B more; at its backward, grad * gamma (8,192) is live with dx
     * besides those: 24,832 B. Without beta one output-sized tensor fewer.
     * Inference: one output-sized transient (8,192). epsilon 1e-6 is below
     * the fused kernel's floor: the unfused layer (PyTorch's rule). */
    for (int center = 1; center >= 0; center--) {
        f = load_json(center ? TF_LN("") : TF_LN(", \"center\": false"));
        u = load_json(center ? TF_LN(", \"epsilon\": 1e-6")
                             : TF_LN(", \"center\": false, \"epsilon\": 1e-6"));
        assert_int_equal(count_attr(f, "tf_fused_ln"), 1);
        assert_int_equal(count_attr(u, "tf_fused_ln"), 0);
        uint64_t kept = 256 + (center ? 2 : 1) * 8192;
        rf = estimate_fw(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4);
        ru = estimate_fw(u, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4);
        assert_int_equal(at_step(rf, "forward", ln) - at_step(ru, "forward", ln), kept);
        assert_int_equal(at_step(rf, "backward", ln) - at_step(ru, "backward", ln), kept + 8192);
        dnnmem_result_free(rf);
        dnnmem_result_free(ru);
        rf = estimate_fw(f, DNNMEM_MODE_INFER, DNNMEM_FW_TENSORFLOW, 4);
        ru = estimate_fw(u, DNNMEM_MODE_INFER, DNNMEM_FW_TENSORFLOW, 4);
        assert_int_equal(at_step(rf, "forward", ln) - at_step(ru, "forward", ln), 8192);
        dnnmem_result_free(rf);
        dnnmem_result_free(ru);
        rf = estimate_fw(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_PYTORCH, 4);
        ru = estimate_fw(u, DNNMEM_MODE_TRAIN, DNNMEM_FW_PYTORCH, 4);
        assert_int_equal(rf->peak_allocated, ru->peak_allocated);
        dnnmem_result_free(rf);
        dnnmem_result_free(ru);
        dnnmem_model_free(f);
        dnnmem_model_free(u);
    }
    /* Dense on a rank-3 input adds its bias with tf.nn.bias_add, whose
     * gradient reads nothing (src/train/tf_tape.def): d0's Add is marked,
     * d's (a Gemm, rank 2) needs no mark */
    f = load_json(TF_LN(""));
    assert_int_equal(count_attr(f, "tf_bias_add"), 1);
    dnnmem_model_free(f);
    /* a float16 layer policy is not fused (float32 variables needed) */
    f = load_json(TF_LN(", \"dtype\": \"float16\""));
    assert_int_equal(count_attr(f, "tf_fused_ln"), 0);
    dnnmem_model_free(f);
}

/* ---- TensorFlow under tf.function (--tf-execution graph, the default) ----
 * The same fixtures against the eager rules above, worked by hand. */
static void test_tf_graph(void **state)
{
    (void)state;
    const char *bn = "/bn/BatchNormalization", *ln = "/ln/LayerNormalization";
    const enum dnnmem_tf_execution G = DNNMEM_TF_GRAPH;
    const enum dnnmem_precision F32 = DNNMEM_PRECISION_FP32, A16 = DNNMEM_PRECISION_AMP_FP16;
    /* layout: fp32 convolutions with their fp32 Conv2DBackprop* grads make
     * Grappler run the graph NCHW: the fused BatchNorm does not transpose,
     * so fused and unfused have the same bytes at its steps. With amp-fp16
     * (one fp16 Conv2D of one, sm80) the graph stays NHWC: x [4, 16, 16, 8]
     * is fp16 under autocast, 16,384 B: 2 x 16,384 more forward, 3 x 16,384
     * backward, as eagerly. */
    dnnmem_model *f = load_json(TF_CNN("")), *u = load_json(TF_CNN(", \"fused\": false"));
    struct dnnmem_result *rf = estimate_tf(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4, G, F32);
    struct dnnmem_result *ru = estimate_tf(u, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4, G, F32);
    assert_int_equal(at_step(rf, "forward", bn), at_step(ru, "forward", bn));
    assert_int_equal(at_step(rf, "backward", bn), at_step(ru, "backward", bn));
    assert_int_equal(rf->peak_requested, ru->peak_requested);
    dnnmem_result_free(rf);
    dnnmem_result_free(ru);
    rf = estimate_tf(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4, G, A16);
    ru = estimate_tf(u, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4, G, A16);
    assert_int_equal(at_step(rf, "forward", bn) - at_step(ru, "forward", bn), 2 * 16384);
    assert_int_equal(at_step(rf, "backward", bn) - at_step(ru, "backward", bn), 3 * 16384);
    dnnmem_result_free(rf);
    dnnmem_result_free(ru);
    dnnmem_model_free(f);
    dnnmem_model_free(u);

    /* buffer forwarding: Dense(32) (Gemm, bias included: MatMul + BiasAdd,
     * which forwards) then Activation sigmoid on [4, 32] float32 = 512 B.
     * Inference: eagerly the sigmoid's output is allocated beside its input
     * (1,024 B of activations at its step); in the graph it takes the
     * dying input's buffer (512 B). Training: Sigmoid's grad reads its
     * output, not its input, so the input still dies there: 512 B less too. */
    static const char mlp[] = SEQ(INPUT("[null, 16]") ", {\"class_name\": \"Dense\", "
                                  "\"config\": {\"name\": \"d0\", \"units\": 32}}, "
                                  "{\"class_name\": \"Activation\", \"config\": {\"name\": "
                                  "\"a\", \"activation\": \"sigmoid\"}}, {\"class_name\": "
                                  "\"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}}");
    f = load_json(mlp);
    for (int train = 0; train <= 1; train++) {
        enum dnnmem_mode mode = train ? DNNMEM_MODE_TRAIN : DNNMEM_MODE_INFER;
        rf = estimate_tf(f, mode, DNNMEM_FW_TENSORFLOW, 4, DNNMEM_TF_EAGER, F32);
        ru = estimate_tf(f, mode, DNNMEM_FW_TENSORFLOW, 4, G, F32);
        /* in training the graph's step has also made `m * momentum` of every
         * variable before the forward (tf_fit.c): d0's [16, 32] kernel and
         * [32] bias, d's [32, 2] and [2], 4 x (512 + 32 + 64 + 2) = 2,440 B */
        assert_int_equal(at_step(rf, "forward", "/a/Sigmoid") - at_step(ru, "forward", "/a/Sigmoid"),
                         train ? 512 - 2440 : 512);
        dnnmem_result_free(rf);
        dnnmem_result_free(ru);
    }
    /* PyTorch's profile is untouched by the option */
    rf = estimate_tf(f, DNNMEM_MODE_INFER, DNNMEM_FW_PYTORCH, 4, DNNMEM_TF_EAGER, F32);
    ru = estimate_tf(f, DNNMEM_MODE_INFER, DNNMEM_FW_PYTORCH, 4, G, F32);
    assert_int_equal(rf->peak_requested, ru->peak_requested);
    dnnmem_result_free(rf);
    dnnmem_result_free(ru);
    dnnmem_model_free(f);

    /* forwarding in backward: at the activation's backward step (Sigmoid's,
     * ReLU's; [4, 32] float32 = 512 B), eagerly dx is allocated beside dy
     * (SigmoidGrad and ReluGrad forward too, but the tape holds dy) and the
     * kept y: the step peaks with SAVED 512 (y) and TEMPORARY 1,028 (dy, dx
     * and the loss grad's 4 B scalar), ACTIVATION 32 (the [4, 2] logits the
     * eager step returns). Under tf.function the grad kernel writes dx into
     * dy's buffer, whose only holder it is: nothing is allocated, and a step
     * that only frees shows where it ends: y freed, dx in dy's 512 B, the
     * loss grad and the logits gone (dataflow). Graph minus eager: 32 + 4
     * (lifetimes, as before this rule) + 512 (dx) + 512 (y freed by the
     * step's end rather than beside dx) = 1,060 B. Keras' SGD in the graph
     * (tf_fit.c): d0's `m * momentum` ([16, 32] and [32], 2,176 B, made as
     * the step started, m's value once the update has run: optimizer
     * state) is still live; d's update has run, so
     * its grads (256 + 8 B), which the eager step still holds, are gone:
     * 1,060 - 2,176 + 264; d's bias update is left to the backward's end
     * (tf_fit.c), so d's output grad (32 B) is still held and its bias's old
     * m (8 B) still live beside the product: -852 - 40 = -892 B. */
    static const char *const act[] = {"sigmoid", "/a/Sigmoid", "relu", "/a/Relu"};
    for (int k = 0; k < 2; k++) {
        char json[2048];
        snprintf(json, sizeof json,
                 SEQ(INPUT("[null, 16]") ", {\"class_name\": \"Dense\", \"config\": {\"name\": "
                     "\"d0\", \"units\": 32}}, {\"class_name\": \"Activation\", \"config\": "
                     "{\"name\": \"a\", \"activation\": \"%s\"}}, {\"class_name\": \"Dense\", "
                     "\"config\": {\"name\": \"d\", \"units\": 2}}"),
                 act[2 * k]);
        f = load_json(json);
        rf = estimate_tf(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4, DNNMEM_TF_EAGER, F32);
        ru = estimate_tf(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4, G, F32);
        const char *node = act[2 * k + 1];
        assert_int_equal(at_step(rf, "backward", node) - at_step(ru, "backward", node),
                         1060 - 2176 + 264 - 32 - 8);
        const struct dnnmem_timeline_point *pe = NULL, *pg = NULL;
        for (size_t q = 0; q < rf->n_timeline; q++)
            if (!strcmp(rf->timeline[q].phase, "backward") && !strcmp(rf->timeline[q].node, node))
                pe = &rf->timeline[q];
        for (size_t q = 0; q < ru->n_timeline; q++)
            if (!strcmp(ru->timeline[q].phase, "backward") && !strcmp(ru->timeline[q].node, node))
                pg = &ru->timeline[q];
        assert_non_null(pe);
        assert_non_null(pg);
        assert_int_equal(pe->category_bytes[DNNMEM_CAT_SAVED], 512);
        assert_int_equal(pe->category_bytes[DNNMEM_CAT_TEMPORARY], 1028);
        assert_int_equal(pg->category_bytes[DNNMEM_CAT_SAVED], 0);
        assert_int_equal(pg->category_bytes[DNNMEM_CAT_TEMPORARY], 512 + 32);
        /* the product becomes m's value: counted as optimizer state */
        assert_int_equal(pg->category_bytes[DNNMEM_CAT_OPTIMIZER] -
                             pe->category_bytes[DNNMEM_CAT_OPTIMIZER], 2176 + 8);
        dnnmem_result_free(rf);
        dnnmem_result_free(ru);
        /* PyTorch's profile: the option changes nothing, in training too */
        rf = estimate_tf(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_PYTORCH, 4, DNNMEM_TF_EAGER, F32);
        ru = estimate_tf(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_PYTORCH, 4, G, F32);
        assert_int_equal(rf->peak_requested, ru->peak_requested);
        assert_int_equal(at_step(rf, "backward", node), at_step(ru, "backward", node));
        dnnmem_result_free(rf);
        dnnmem_result_free(ru);
        dnnmem_model_free(f);
    }

    /* Keras 2's fused LayerNorm: AddV2's grad reads only shapes, so the
     * graph keeps ones([64]) (256 B) and the normalized output (8,192 B)
     * but not `* gamma`'s result: fused minus unfused is 8,448 B at the
     * forward step (eager: 16,640), 16,640 B at the backward (grad * gamma
     * besides; eager: 24,832). */
    f = load_json(TF_LN(""));
    u = load_json(TF_LN(", \"epsilon\": 1e-6"));
    rf = estimate_tf(f, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4, G, F32);
    ru = estimate_tf(u, DNNMEM_MODE_TRAIN, DNNMEM_FW_TENSORFLOW, 4, G, F32);
    assert_int_equal(at_step(rf, "forward", ln) - at_step(ru, "forward", ln), 256 + 8192);
    assert_int_equal(at_step(rf, "backward", ln) - at_step(ru, "backward", ln), 256 + 2 * 8192);
    dnnmem_result_free(rf);
    dnnmem_result_free(ru);
    dnnmem_model_free(f);
    dnnmem_model_free(u);
}

/* ---- Keras' SGD step under tf.function (src/train/tf_fit.c) ----
 * Two Dense layers, [4, 16] -> d0 (32 units) -> d (2 units), float32: the
 * variables are d0's [16, 32] kernel (2,048 B) and [32] bias (128 B), d's
 * [32, 2] (256 B) and [2] (8 B), 2,440 B in all; d0's output and its grad
 * are [4, 32] (512 B), d's [4, 2] (32 B). With momentum the graph's step
 * makes every variable's `m * momentum` before the forward, and each
 * variable's update runs when its grad is complete: the grad and m's old
 * value go, the product becomes m (so it counts as optimizer state). The
 * Dense bias grads run at the backward's end, first layer first, each
 * holding its layer's output grad until then. Plain SGD has no slot and no
 * product; its updates free the grads the same way. */
static struct dnnmem_result *estimate_fit(const dnnmem_model *m, enum dnnmem_optimizer opt)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.batch_size = 4;
    cfg.framework = DNNMEM_FW_TENSORFLOW;
    cfg.device = DNNMEM_DEVICE_CPU; /* as measured (docs/validation-tf.md) */
    cfg.tf_execution = DNNMEM_TF_GRAPH;
    cfg.optimizer = opt;
    cfg.timeline = true;
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    return r;
}

/* The nth (0-based) step at `node` in `phase` of the last iteration. */
static const struct dnnmem_timeline_point *step_of(const struct dnnmem_result *r,
                                                   const char *phase, const char *node, int nth)
{
    int it = 0;
    for (size_t k = 0; k < r->n_timeline; k++)
        if (r->timeline[k].iteration > it)
            it = r->timeline[k].iteration;
    for (size_t k = 0; k < r->n_timeline; k++)
        if (r->timeline[k].iteration == it && !strcmp(r->timeline[k].phase, phase) &&
            !strcmp(r->timeline[k].node, node) && nth-- == 0)
            return &r->timeline[k];
    fail_msg("no %s step at %s", phase, node);
    return NULL;
}

static uint64_t point_bytes(const struct dnnmem_timeline_point *p)
{
    uint64_t v = 0;
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        v += p->category_bytes[c];
    return v;
}

static void test_tf_fit_sgd(void **state)
{
    (void)state;
    static const char json[] = SEQ(INPUT("[null, 16]") ", {\"class_name\": \"Dense\", "
                                   "\"config\": {\"name\": \"d0\", \"units\": 32}}, "
                                   "{\"class_name\": \"Dense\", \"config\": {\"name\": "
                                   "\"d\", \"units\": 2}}");
    dnnmem_model *f = load_json(json);
    struct dnnmem_result *mo = estimate_fit(f, DNNMEM_OPT_SGD_MOMENTUM);
    struct dnnmem_result *pl = estimate_fit(f, DNNMEM_OPT_SGD);
    const char *d0 = "/d0/Gemm", *d = "/d/Gemm";
    /* the forward of d0: m (2,440 B) and `m * momentum` (2,440 B) of every
     * variable live */
    assert_int_equal(point_bytes(step_of(mo, "forward", d0, 0)) -
                         point_bytes(step_of(pl, "forward", d0, 0)), 2 * 2440);
    /* d's backward, the first: its high point is d's kernel grad (256 B),
     * made before d's update, beside d0's output grad (512) and d's (32,
     * held for its bias grad), every slot and every product live */
    const struct dnnmem_timeline_point *p = step_of(mo, "backward", d, 0);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_GRADIENT], 256);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_TEMPORARY], 512 + 32);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_OPTIMIZER], 2 * 2440);
    /* d0's backward: d's kernel update has run (its grad freed, in both);
     * d0's kernel grad (2,048 B) is made while m and the products of d0's
     * kernel and bias and d's bias (2,048 + 128 + 8) are live, and both
     * output grads are held for the bias grads */
    p = step_of(mo, "backward", d0, 0);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_GRADIENT], 2048);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_TEMPORARY], 512 + 32);
    assert_int_equal(point_bytes(p) - point_bytes(step_of(pl, "backward", d0, 0)),
                     2440 + 2048 + 128 + 8);
    assert_int_equal(step_of(pl, "backward", d0, 0)->category_bytes[DNNMEM_CAT_GRADIENT], 2048);
    /* the backward's end: d0's bias grad (128 B), both output grads still
     * held; then d's (8 B), d0's output grad gone */
    p = step_of(mo, "backward", d0, 1);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_GRADIENT], 128);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_TEMPORARY], 512 + 32);
    p = step_of(mo, "backward", d, 1);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_GRADIENT], 8);
    assert_int_equal(p->category_bytes[DNNMEM_CAT_TEMPORARY], 32);
    dnnmem_result_free(mo);
    dnnmem_result_free(pl);
    dnnmem_model_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parameter_counts),
        cmocka_unit_test(test_model_info),
        cmocka_unit_test(test_tiny_image),
        cmocka_unit_test(test_tiny_sequence),
        cmocka_unit_test(test_tiny_transformer),
        cmocka_unit_test(test_tiny_wrappers),
        cmocka_unit_test(test_train),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_archive),
        cmocka_unit_test(test_tf_rules),
        cmocka_unit_test(test_tf_chains),
        cmocka_unit_test(test_tf_graph),
        cmocka_unit_test(test_tf_fit_sgd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
