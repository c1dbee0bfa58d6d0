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
static void build(struct built *bt, const char *json, int rank, const int64_t *dims, bool mx,
                  int mx_version, int cap)
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
                         .mx_version = mx_version, .mx_grad_sum_cap = cap};
    if (dm_schedule_build(g, bt->t, &run, &bt->s, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
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
     * FullyConnected's data) and SoftmaxOutput's output (2 x 3 x 4 = 24 B):
     * 5656 B; no log-softmax of dnnmem's loss */
    build(&bt, CNN, 4, dims, true, 109, 8);
    assert_int_equal(saved_bytes(&bt), 2048 + 2048 + 512 + 512 + 512 + 24);
    assert_false(has_buffer(&bt, "loss.log_softmax"));
    assert_false(has_buffer(&bt, "target"));
    assert_true(has_buffer(&bt, "mask"));
    unbuild(&bt);
    /* MXNet 2.0: the mask packed to (128 + 7) / 8 = 16 uint8: 5656 - 512 + 16 */
    build(&bt, CNN, 4, dims, true, 200, 8);
    assert_int_equal(saved_bytes(&bt), 5656 - 512 + 16);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
