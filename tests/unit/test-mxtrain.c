/*
 * test-mxtrain.c: MXNet's training rules under --framework mxnet
 * (src/train/train.c, the "MXNet" section: what each op's FGradient reads,
 * SoftmaxOutput as the loss, gradient aggregation by ElementWiseSum and
 * kAddTo) on small symbols written by hand. Every byte count is worked out
 * in the comments from those rules (float32: 4 bytes an element).
 */
#include "util.h"

/* A 1.x symbol: variables and operators, nodes in order, one head. */
#define NODE(op, name, attrs, inputs)                                                              \
    "{\"op\": \"" op "\", \"name\": \"" name "\", \"attrs\": {" attrs "}, \"inputs\": [" inputs "]}"
#define VAR(name) "{\"op\": \"null\", \"name\": \"" name "\", \"inputs\": []}"

struct built {
    dnnmem_model *m;
    struct dm_tinfo *t;
    struct dm_arena arena;
    struct dm_schedule s;
};

/* Load `json`, shape it with data's dims, build one training step (no
 * optimizer, one iteration, no in-place activations) with MXNet's rules
 * (mx_ops) or PyTorch's. */
static void build_run(struct built *bt, const char *json, int rank, const int64_t *dims, bool mx,
                      int mx_version, int cap, bool mirror)
{
    struct dnnmem_error err;
    memset(bt, 0, sizeof *bt);
    if (dnnmem_model_load_buffer(json, strlen(json), "t-symbol.json", &bt->m, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    const struct dm_graph *g = dm_model_graph(bt->m);
    dm_arena_init(&bt->arena);
    bt->t = calloc((size_t)g->n_tensors + 1, sizeof *bt->t);
    struct dm_shape *sh = calloc((size_t)g->n_tensors + 1, sizeof *sh);
    assert_non_null(bt->t);
    assert_non_null(sh);
    for (int32_t i = 0; i < g->n_tensors; i++)
        sh[i].rank = -1;
    int32_t id = dm_graph_find(g, "data");
    assert_true(id >= 0);
    sh[id].rank = rank;
    memcpy(sh[id].dims, dims, (size_t)rank * sizeof *dims);
    struct dm_infer ctx = {.g = g, .arena = &bt->arena, .t = bt->t, .input_shapes = sh, .err = &err};
    if (dm_infer_shapes(&ctx) != DNNMEM_OK)
        fail_msg("%s", err.message);
    free(sh);
    struct dm_run run = {.train = true, .cuda = true, .inplace = false, .torch_version = 206,
                         .iterations = 1, .grad_accum = 1, .optimizer = DNNMEM_OPT_NONE,
                         .loss = DNNMEM_LOSS_CE, .amp = DM_UNDEFINED, .mx_ops = mx,
                         .mx_version = mx_version, .mx_grad_sum_cap = cap,
                         .mx_mirror = mirror};
    if (dm_schedule_build(g, bt->t, &run, &bt->s, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
}

static void build(struct built *bt, const char *json, int rank, const int64_t *dims, bool mx,
                  int mx_version, int cap)
{
    build_run(bt, json, rank, dims, mx, mx_version, cap, false);
}

static void unbuild(struct built *bt)
{
    dm_schedule_free(&bt->s);
    free(bt->t);
    dm_arena_free(&bt->arena);
    dnnmem_model_free(bt->m);
}

/* Bytes of the buffers kept for backward (category "saved"). */
static uint64_t saved_bytes(const struct built *bt)
{
    uint64_t sum = 0;
    for (int32_t k = 0; k < bt->s.n_buf; k++)
        if (bt->s.buf[k].category == DNNMEM_CAT_SAVED)
            sum += bt->s.buf[k].bytes;
    return sum;
}

static bool has_buffer(const struct built *bt, const char *what)
{
    for (int32_t k = 0; k < bt->s.n_buf; k++)
        if (bt->s.buf[k].what && strcmp(bt->s.buf[k].what, what) == 0)
            return true;
    return false;
}

/* The most bytes of temporaries (gradients) of tensor `name` live at once. */
static uint64_t max_live_grads(const struct built *bt, const char *name)
{
    int32_t x = dm_graph_find(dm_model_graph(bt->m), name);
    assert_true(x >= 0);
    uint64_t live = 0, peak = 0;
    for (size_t e = 0; e < bt->s.n_ev; e++) {
        const struct dm_buffer *b = &bt->s.buf[bt->s.ev[e].buf];
        if (b->tensor != x || b->category != DNNMEM_CAT_TEMPORARY)
            continue;
        if (bt->s.ev[e].kind == DM_EV_ALLOC)
            live += b->bytes;
        else
            live -= b->bytes;
        if (live > peak)
            peak = live;
    }
    return peak;
}

/* data [2, 1, 8, 8] -> Convolution 4 filters 1x1 (no bias) [2, 4, 8, 8] ->
 * Activation sigmoid -> Pooling max 2x2 stride 2 [2, 4, 4, 4] -> Dropout ->
 * FullyConnected 3 [2, 3] -> SoftmaxOutput */
static const char CNN[] =
    "{\"nodes\": [" VAR("data") ", " VAR("conv_weight") ", "
    NODE("Convolution", "conv", "\"num_filter\": \"4\", \"kernel\": \"(1, 1)\", \"no_bias\": \"True\"",
         "[0, 0, 0], [1, 0, 0]") ", "
    NODE("Activation", "sig", "\"act_type\": \"sigmoid\"", "[2, 0, 0]") ", "
    NODE("Pooling", "pool", "\"kernel\": \"(2, 2)\", \"stride\": \"(2, 2)\", \"pool_type\": \"max\"",
         "[3, 0, 0]") ", "
    NODE("Dropout", "drop", "\"p\": \"0.5\"", "[4, 0, 0]") ", "
    VAR("fc_weight") ", " VAR("fc_bias") ", "
    NODE("FullyConnected", "fc", "\"num_hidden\": \"3\"", "[5, 0, 0], [6, 0, 0], [7, 0, 0]") ", "
    VAR("softmax_label") ", "
    NODE("SoftmaxOutput", "softmax", "", "[8, 0, 0], [9, 0, 0]")
    "], \"arg_nodes\": [0, 1, 6, 7, 9], \"heads\": [[10, 0, 0]], "
    "\"attrs\": {\"mxnet_version\": [\"int\", 10300]}}";

static void test_kept_per_op(void **state)
{
    (void)state;
    const int64_t dims[] = {2, 1, 8, 8};
    struct built bt;
    /* MXNet 1.9: the convolution's output (2 x 4 x 8 x 8 x 4 = 2048 B: the
     * cuDNN sigmoid's input), the sigmoid's output (2048 B, read by its
     * backward and the pooling's), the pooling's output (2 x 4 x 4 x 4 x 4 =
     * 512 B), Dropout's float32 mask (512 B), its output (512 B,
     * FullyConnected's data), SoftmaxOutput's output (2 x 3 x 4 = 24 B) and
     * the max pool's hidden workspace output of the oneDNN build (int32 of the
     * pooling output's shape, 512 B; pooling.cc GetNumOutputs): 6168 B; no
     * log-softmax of dnnmem's loss */
    build(&bt, CNN, 4, dims, true, 109, 8);
    assert_int_equal(saved_bytes(&bt), 2048 + 2048 + 512 + 512 + 512 + 24 + 512);
    assert_false(has_buffer(&bt, "loss.log_softmax"));
    assert_false(has_buffer(&bt, "target"));
    assert_true(has_buffer(&bt, "mask"));
    unbuild(&bt);
    /* MXNet 2.0: the mask packed to (128 + 7) / 8 = 16 uint8: 6168 - 512 + 16 */
    build(&bt, CNN, 4, dims, true, 200, 8);
    assert_int_equal(saved_bytes(&bt), 6168 - 512 + 16);
    unbuild(&bt);
    /* PyTorch's rules for the same graph: the sigmoid's output (2048), the
     * max pool's int64 indices (128 x 8 = 1024), a bool mask (128), the
     * dropout output (512), the softmax output (24), and the loss's
     * log_softmax (24) and total_weight (4): 3764 B */
    build(&bt, CNN, 4, dims, false, 109, 8);
    assert_int_equal(saved_bytes(&bt), 2048 + 1024 + 128 + 512 + 24 + 24 + 4);
    assert_true(has_buffer(&bt, "loss.log_softmax"));
    unbuild(&bt);
}

/* data [1, 16] -> FullyConnected 16 (no bias): x [1, 16] (64 B), read by
 * three activations (relu, sigmoid, tanh) whose outputs are added and fed
 * to FullyConnected 3 and SoftmaxOutput: x takes three gradient
 * contributions of 64 B each */
static const char FAN[] =
    "{\"nodes\": [" VAR("data") ", " VAR("fc1_weight") ", "
    NODE("FullyConnected", "x", "\"num_hidden\": \"16\", \"no_bias\": \"True\"", "[0, 0, 0], [1, 0, 0]") ", "
    NODE("Activation", "a", "\"act_type\": \"relu\"", "[2, 0, 0]") ", "
    NODE("Activation", "b", "\"act_type\": \"sigmoid\"", "[2, 0, 0]") ", "
    NODE("Activation", "c", "\"act_type\": \"tanh\"", "[2, 0, 0]") ", "
    NODE("elemwise_add", "ab", "", "[3, 0, 0], [4, 0, 0]") ", "
    NODE("elemwise_add", "abc", "", "[6, 0, 0], [5, 0, 0]") ", "
    VAR("fc2_weight") ", "
    NODE("FullyConnected", "fc2", "\"num_hidden\": \"3\", \"no_bias\": \"True\"", "[7, 0, 0], [8, 0, 0]") ", "
    VAR("softmax_label") ", "
    NODE("SoftmaxOutput", "softmax", "", "[9, 0, 0], [10, 0, 0]")
    "], \"arg_nodes\": [0, 1, 8, 10], \"heads\": [[11, 0, 0]], "
    "\"attrs\": {\"mxnet_version\": [\"int\", 10300]}}";

static void test_grad_aggregation(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 16};
    struct built bt;
    /* 3 contributions, below the cap of 8: one ElementWiseSum reads all
     * three after the last is made, its sum in place of the first: 3 x 64 B
     * live at once */
    build(&bt, FAN, 2, dims, true, 109, 8);
    assert_int_equal(max_live_grads(&bt, "x_output"), 3 * 64);
    unbuild(&bt);
    /* the cap at 2 (MXNET_EXEC_INPLACE_GRAD_SUM_CAP=2): a _grad_add chain
     * turned into kAddTo writes; the later contributions are written into
     * the first's buffer and never allocated: 64 B */
    build(&bt, FAN, 2, dims, true, 109, 2);
    assert_int_equal(max_live_grads(&bt, "x_output"), 64);
    unbuild(&bt);
    /* the cap at 4 (above 3): the ElementWiseSum again */
    build(&bt, FAN, 2, dims, true, 109, 4);
    assert_int_equal(max_live_grads(&bt, "x_output"), 3 * 64);
    unbuild(&bt);
    /* PyTorch: the first held, each later one added in place as it comes
     * (InputBuffer::accumulate): 2 x 64 B at most */
    build(&bt, FAN, 2, dims, false, 109, 8);
    assert_int_equal(max_live_grads(&bt, "x_output"), 2 * 64);
    unbuild(&bt);
}

/* SoftmaxOutput's backward makes its data's gradient with no head gradient
 * and no loss value; the regression outputs likewise */
static void test_loss_heads(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 16};
    struct built bt;
    build(&bt, FAN, 2, dims, true, 109, 8);
    assert_false(has_buffer(&bt, "loss.grad"));
    assert_false(has_buffer(&bt, "loss"));
    /* fc2's output [1, 3] gets its gradient from SoftmaxOutput's backward */
    assert_int_equal(max_live_grads(&bt, "fc2_output"), 12);
    unbuild(&bt);
    static const char REG[] =
        "{\"nodes\": [" VAR("data") ", " VAR("fc_weight") ", "
        NODE("FullyConnected", "fc", "\"num_hidden\": \"5\", \"no_bias\": \"True\"",
             "[0, 0, 0], [1, 0, 0]") ", " VAR("lro_label") ", "
        NODE("LinearRegressionOutput", "lro", "", "[2, 0, 0], [3, 0, 0]")
        "], \"arg_nodes\": [0, 1, 3], \"heads\": [[4, 0, 0]], "
        "\"attrs\": {\"mxnet_version\": [\"int\", 10300]}}";
    /* the regression output keeps its output (1 x 5 x 4 = 20 B) */
    build(&bt, REG, 2, dims, true, 109, 8);
    assert_int_equal(saved_bytes(&bt), 20);
    assert_int_equal(max_live_grads(&bt, "fc_output"), 20);
    assert_false(has_buffer(&bt, "loss.grad"));
    unbuild(&bt);
}

/* ---- backward mirroring (MXNET_BACKWARD_DO_MIRROR) --------------------------- */

static bool persistent_cat(uint8_t c)
{
    return c == DNNMEM_CAT_WEIGHT || c == DNNMEM_CAT_INPUT || c == DNNMEM_CAT_GRADIENT ||
           c == DNNMEM_CAT_OPTIMIZER;
}

/* Bytes of activations, kept tensors and temporaries live when the loss
 * step opens: what the forward left for the backward. */
static uint64_t live_after_forward(const struct built *bt)
{
    uint64_t live = 0;
    for (size_t e = 0; e < bt->s.n_ev; e++) {
        const struct dm_event *ev = &bt->s.ev[e];
        uint8_t ph = bt->s.steps[ev->step].phase;
        if (ph == DM_PHASE_LOSS || ph == DM_PHASE_BACKWARD)
            break;
        const struct dm_buffer *b = &bt->s.buf[ev->buf];
        if (persistent_cat(b->category))
            continue;
        live = ev->kind == DM_EV_ALLOC ? live + b->bytes : live - b->bytes;
    }
    return live;
}

/* The copies' outputs (what "recomputed (mirror)"): how many, their bytes,
 * and whether each was made after the backward began and freed by the end. */
static void recomputed(const struct built *bt, int *count, uint64_t *bytes)
{
    *count = 0;
    *bytes = 0;
    bool bw = false;
    for (size_t e = 0; e < bt->s.n_ev; e++) {
        const struct dm_event *ev = &bt->s.ev[e];
        bw |= bt->s.steps[ev->step].phase == DM_PHASE_BACKWARD;
        const struct dm_buffer *b = &bt->s.buf[ev->buf];
        if (!b->what || strcmp(b->what, "recomputed (mirror)") != 0)
            continue;
        if (ev->kind == DM_EV_ALLOC) {
            assert_true(bw); /* made in the backward */
            (*count)++;
            *bytes += b->bytes;
        } else {
            (*count)--; /* freed: the count ends at 0 when every copy is freed */
        }
    }
}

/* data [2, 1, 8, 8] -> Convolution 4 filters 1x1 [2, 4, 8, 8] -> Activation
 * relu -> Convolution 4 filters 1x1 -> FullyConnected 3 -> SoftmaxOutput;
 * relu and conv2 may carry attributes */
#define CHAIN(relu_attrs)                                                                          \
    "{\"nodes\": [" VAR("data") ", " VAR("conv1_weight") ", "                                       \
    NODE("Convolution", "conv1", "\"num_filter\": \"4\", \"kernel\": \"(1, 1)\", \"no_bias\": \"True\"", \
         "[0, 0, 0], [1, 0, 0]") ", "                                                              \
    NODE("Activation", "relu", "\"act_type\": \"relu\"" relu_attrs, "[2, 0, 0]") ", "             \
    VAR("conv2_weight") ", "                                                                       \
    NODE("Convolution", "conv2", "\"num_filter\": \"4\", \"kernel\": \"(1, 1)\", \"no_bias\": \"True\"", \
         "[3, 0, 0], [4, 0, 0]") ", "                                                              \
    VAR("fc_weight") ", "                                                                          \
    NODE("FullyConnected", "fc", "\"num_hidden\": \"3\", \"no_bias\": \"True\"", "[5, 0, 0], [6, 0, 0]") ", " \
    VAR("softmax_label") ", "                                                                      \
    NODE("SoftmaxOutput", "softmax", "", "[7, 0, 0], [8, 0, 0]")                                   \
    "], \"arg_nodes\": [0, 1, 4, 6, 8], \"heads\": [[9, 0, 0]], "                                  \
    "\"attrs\": {\"mxnet_version\": [\"int\", 10900]}}"

static void test_mirror_chain(void **state)
{
    (void)state;
    const int64_t dims[] = {2, 1, 8, 8};
    static const char plain[] = CHAIN("");
    struct built bt;
    int count;
    uint64_t bytes;
    /* Off: after the forward, the relu's output (2 x 4 x 8 x 8 x 4 = 2048 B:
     * its own gradient's and conv2's), conv2's output (2048 B, fc's data)
     * and SoftmaxOutput's (2 x 3 x 4 = 24 B): 4120 B; conv1's output died
     * at the relu; nothing recomputed */
    build_run(&bt, plain, 4, dims, true, 109, 8, false);
    assert_int_equal(live_after_forward(&bt), 2048 + 2048 + 24);
    recomputed(&bt, &count, &bytes);
    assert_int_equal(bytes, 0);
    unbuild(&bt);
    /* On: only the relu is mirrored. conv2 is never mirrored, so its
     * gradient still reads the relu's forward output (2048 B kept); the
     * relu's copy reads conv1's output, kept from the forward (2048 B):
     * 6168 B, 2048 more (the baseline algorithm costs memory here). Its
     * recomputed output (2048 B) is made in the backward and freed there */
    build_run(&bt, plain, 4, dims, true, 109, 8, true);
    assert_int_equal(live_after_forward(&bt), 2048 + 2048 + 2048 + 24);
    recomputed(&bt, &count, &bytes);
    assert_int_equal(bytes, 2048);
    assert_int_equal(count, 0);
    unbuild(&bt);
    /* Off, but the relu carries __force_mirroring__: mirrored all the same */
    static const char forced[] = CHAIN(", \"__force_mirroring__\": \"True\"");
    build_run(&bt, forced, 4, dims, true, 109, 8, false);
    assert_int_equal(live_after_forward(&bt), 2048 + 2048 + 2048 + 24);
    recomputed(&bt, &count, &bytes);
    assert_int_equal(bytes, 2048);
    unbuild(&bt);
}

static void test_mirror_cnn(void **state)
{
    (void)state;
    const int64_t dims[] = {2, 1, 8, 8};
    struct built bt;
    int count;
    uint64_t bytes;
    /* Off: what test_kept_per_op keeps, all live after the forward: 6168 B */
    build_run(&bt, CNN, 4, dims, true, 109, 8, false);
    assert_int_equal(live_after_forward(&bt), 6168);
    unbuild(&bt);
    /* On: the sigmoid and the max pool are mirrored (Convolution, Dropout,
     * FullyConnected, SoftmaxOutput never). The sigmoid's copy reads the
     * convolution's output (2048 B, kept); the pool's copy reads the
     * sigmoid's copy; Dropout keeps its mask (512 B) and fc its output
     * (512 B); the softmax output (24 B): 3096 B. The sigmoid's and the
     * pool's forward outputs died with their forward readers. In the
     * backward the two copies are recomputed, 2048 + 512 B */
    build_run(&bt, CNN, 4, dims, true, 109, 8, true);
    assert_int_equal(live_after_forward(&bt), 2048 + 512 + 512 + 24);
    recomputed(&bt, &count, &bytes);
    assert_int_equal(bytes, 2048 + 512);
    assert_int_equal(count, 0);
    unbuild(&bt);
    /* Dropout is never mirrored, __force_mirroring__ or not */
    static const char DROP[] =
        "{\"nodes\": [" VAR("data") ", "
        NODE("Dropout", "drop", "\"p\": \"0.5\", \"__force_mirroring__\": \"True\"", "[0, 0, 0]") ", "
        VAR("fc_weight") ", "
        NODE("FullyConnected", "fc", "\"num_hidden\": \"3\", \"no_bias\": \"True\"", "[1, 0, 0], [2, 0, 0]") ", "
        VAR("softmax_label") ", "
        NODE("SoftmaxOutput", "softmax", "", "[3, 0, 0], [4, 0, 0]")
        "], \"arg_nodes\": [0, 2, 4], \"heads\": [[5, 0, 0]], "
        "\"attrs\": {\"mxnet_version\": [\"int\", 10900]}}";
    const int64_t d2[] = {2, 16};
    build_run(&bt, DROP, 2, d2, true, 109, 8, true);
    recomputed(&bt, &count, &bytes);
    assert_int_equal(bytes, 0);
    unbuild(&bt);
}

/* BatchNorm is mirrored from MXNet 1.6, spared before: data [2, 4, 8, 8] ->
 * BatchNorm -> Activation relu -> Convolution 4 filters 1x1 -> FullyConnected
 * 3 -> SoftmaxOutput */
static void test_mirror_batchnorm(void **state)
{
    (void)state;
    static const char BN[] =
        "{\"nodes\": [" VAR("data") ", " VAR("bn_gamma") ", " VAR("bn_beta") ", "
        VAR("bn_moving_mean") ", " VAR("bn_moving_var") ", "
        NODE("BatchNorm", "bn", "\"fix_gamma\": \"False\"",
             "[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0]") ", "
        NODE("Activation", "relu", "\"act_type\": \"relu\"", "[5, 0, 0]") ", "
        VAR("conv_weight") ", "
        NODE("Convolution", "conv", "\"num_filter\": \"4\", \"kernel\": \"(1, 1)\", \"no_bias\": \"True\"",
             "[6, 0, 0], [7, 0, 0]") ", " VAR("fc_weight") ", "
        NODE("FullyConnected", "fc", "\"num_hidden\": \"3\", \"no_bias\": \"True\"", "[8, 0, 0], [9, 0, 0]") ", "
        VAR("softmax_label") ", "
        NODE("SoftmaxOutput", "softmax", "", "[10, 0, 0], [11, 0, 0]")
        "], \"arg_nodes\": [0, 1, 2, 3, 4, 7, 9, 11], \"heads\": [[12, 0, 0]], "
        "\"attrs\": {\"mxnet_version\": [\"int\", 10900]}}";
    const int64_t dims[] = {2, 4, 8, 8};
    struct built bt;
    int count;
    uint64_t bytes;
    /* Off: BatchNorm's mean and var ([4] float32, 16 B each), the relu's
     * output (2048 B), the convolution's (2048 B), the softmax output
     * (24 B): 4152 B */
    build_run(&bt, BN, 4, dims, true, 109, 8, false);
    assert_int_equal(live_after_forward(&bt), 16 + 16 + 2048 + 2048 + 24);
    unbuild(&bt);
    /* 1.9, on: BatchNorm and the relu mirrored. BatchNorm's copy reads the
     * data and parameters (bound, not counted); the relu's forward output
     * stays for the convolution's gradient: 2048 + 2048 + 24 B. Recomputed:
     * BatchNorm's output and the relu's, 2048 B each (the copy's mean and
     * var are made with it) */
    build_run(&bt, BN, 4, dims, true, 109, 8, true);
    assert_int_equal(live_after_forward(&bt), 2048 + 2048 + 24);
    recomputed(&bt, &count, &bytes);
    assert_int_equal(bytes, 2048 + 2048);
    unbuild(&bt);
    /* 1.5, on: BatchNorm spared; it keeps its mean and var (32 B), and its
     * output is kept for the relu's copy (2048 B): 6200 B; only the relu
     * is recomputed */
    build_run(&bt, BN, 4, dims, true, 105, 8, true);
    assert_int_equal(live_after_forward(&bt), 32 + 2048 + 2048 + 2048 + 24);
    recomputed(&bt, &count, &bytes);
    assert_int_equal(bytes, 2048);
    unbuild(&bt);
}

/* The real symbols train with mirroring under both executors; ResNet-50 at
 * batch 32 gives the README's figures (peak in use) */
static uint64_t resnet_peak(bool mirror, enum dnnmem_mxnet_executor ex)
{
    struct dnnmem_error err;
    dnnmem_model *m = NULL;
    if (dnnmem_model_load("tests/models/mxnet/resnet-50-symbol.json", &m, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    static const int64_t dims[] = {32, 3, 224, 224};
    struct dnnmem_input_shape in = {.name = "data", .rank = 4, .dims = dims};
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.framework = DNNMEM_FW_MXNET;
    cfg.mxnet_executor = ex;
    cfg.mxnet_mirror = mirror;
    cfg.optimizer = DNNMEM_OPT_SGD_MOMENTUM;
    cfg.input_shapes = &in;
    cfg.n_input_shapes = 1;
    struct dnnmem_result *r = NULL;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    uint64_t peak = r->peak_allocated;
    dnnmem_result_free(r);
    dnnmem_model_free(m);
    return peak;
}

static void test_mirror_real_symbols(void **state)
{
    (void)state;
    uint64_t p0 = resnet_peak(false, DNNMEM_MXNET_EXEC_PLANNED);
    uint64_t p1 = resnet_peak(true, DNNMEM_MXNET_EXEC_PLANNED);
    uint64_t n0 = resnet_peak(false, DNNMEM_MXNET_EXEC_NAIVE);
    uint64_t n1 = resnet_peak(true, DNNMEM_MXNET_EXEC_NAIVE);
    print_message("resnet-50 b32: planned %.2f -> %.2f GiB, naive %.2f -> %.2f GiB\n",
                  p0 / 1073741824.0, p1 / 1073741824.0, n0 / 1073741824.0, n1 / 1073741824.0);
    /* the pre-activation blocks (BatchNorm, relu, Convolution): the
     * convolutions' gradients keep the relus' forward outputs, and the
     * BatchNorm and relu copies are recomputed in the backward: mirroring
     * costs memory here */
    assert_true(p1 > p0);
    assert_true(n1 > n0);
}

/* The table names the MXNet operator behind each rule */
static void test_rule_table(void **state)
{
    (void)state;
    assert_string_equal(dm_mx_rule_name(DM_OP_Dropout), "Dropout");
    assert_string_equal(dm_mx_rule_name(DM_OP_Gather), "Embedding");
    assert_null(dm_mx_rule_name(DM_OP_MxRNN)); /* PyTorch's cuDNN rule stands */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_per_op),
        cmocka_unit_test(test_grad_aggregation),
        cmocka_unit_test(test_loss_heads),
        cmocka_unit_test(test_rule_table),
        cmocka_unit_test(test_mirror_chain),
        cmocka_unit_test(test_mirror_cnn),
        cmocka_unit_test(test_mirror_batchnorm),
        cmocka_unit_test(test_mirror_real_symbols),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
