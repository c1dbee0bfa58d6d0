/*
 * test-estimate.c: inference estimates of small graphs, worked out by hand,
 * and binding rules. Sizes: PyTorch rounds each request up to 512 B.
 */
#include "util.h"

#include <jansson.h>

enum { F32 = 1, I64 = 7 };

/* The schedule dnnmem builds for graph `b` (every symbol bound to `batch`),
 * for inspecting the order of its events; `*g` and `*t` are for the caller
 * to release with schedule_done. */
struct sched {
    dnnmem_model *m;
    struct dm_arena arena;
    struct dm_tinfo *t;
    struct dm_schedule s;
};

static void schedule_of(struct tb *b, int64_t batch, const struct dm_run *run, struct sched *out)
{
    struct dnnmem_error err;
    if (tb_load(b, &out->m, &err) != DNNMEM_OK)
        fail_msg("load: %s", err.message);
    tb_free(b);
    const struct dm_graph *g = dm_model_graph(out->m);
    dm_arena_init(&out->arena);
    out->t = calloc((size_t)g->n_tensors + 1, sizeof *out->t);
    int64_t *syms = calloc((size_t)g->n_symbols + 1, sizeof *syms);
    assert_non_null(out->t);
    assert_non_null(syms);
    for (int32_t k = 0; k < g->n_symbols; k++)
        syms[k] = batch;
    struct dm_infer ctx = {.g = g, .arena = &out->arena, .t = out->t, .sym_values = syms,
                           .err = &err};
    if (dm_infer_shapes(&ctx) != DNNMEM_OK)
        fail_msg("shapes: %s", err.message);
    free(syms);
    if (dm_schedule_build(g, out->t, run, &out->s, &err) != DNNMEM_OK)
        fail_msg("schedule: %s", err.message);
}

static void schedule_done(struct sched *x)
{
    dm_schedule_free(&x->s);
    free(x->t);
    dm_arena_free(&x->arena);
    dnnmem_model_free(x->m);
}

/* The events of buffers named `what` (or graph tensors when NULL) and of
 * `bytes`, in order, as a string: 'A' per allocation, 'F' per free. */
static void events_of(const struct sched *x, const char *const *whats, size_t n_whats,
                      char *out, size_t cap)
{
    size_t n = 0;
    for (size_t e = 0; e < x->s.n_ev && n + 2 < cap; e++) {
        const struct dm_buffer *bf = &x->s.buf[x->s.ev[e].buf];
        for (size_t k = 0; k < n_whats; k++)
            if (bf->what && strcmp(bf->what, whats[k]) == 0) {
                out[n++] = x->s.ev[e].kind == DM_EV_ALLOC ? (char)('A' + k) : (char)('a' + k);
                break;
            }
    }
    out[n] = 0;
}

/* The estimate fails with `want` and a message containing `needle`. */
static void expect_estimate_error(struct tb *b, const struct dnnmem_config *cfg,
                                  enum dnnmem_status want, const char *needle)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_result *r = NULL;
    assert_int_equal(dnnmem_estimate(m, cfg, &r, &err), want);
    assert_msg_has(err, needle);
    assert_null(r);
    dnnmem_model_free(m);
    tb_free(b);
}

/* Inference with every op allocating its output (the hand computations
 * below count each output). */
static struct dnnmem_result *estimate(struct tb *b, int64_t batch, const char *dim, int64_t dimv)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (tb_load(b, &m, &err) != DNNMEM_OK)
        fail_msg("load: %s", err.message);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = batch;
    cfg.inplace = DNNMEM_INPLACE_NONE;
    struct dnnmem_dim_binding bind = {dim, dimv};
    if (dim) {
        cfg.dims = &bind;
        cfg.n_dims = 1;
    }
    struct dnnmem_result *r = NULL;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    dnnmem_model_free(m);
    tb_free(b);
    return r;
}

/* x[2,3] @ W[3,4] -> h[2,4]; relu(h) -> y[2,4].
 * Step 0: W (48 B) and x (24 B); step 1: the cuBLAS workspace of PyTorch 2.x
 * on compute capability 8.0 (2 x 4 MiB + 8 x 16 KiB = 8,519,680 B, kept),
 * then h (32 B); step 2: y (32 B), then h is freed. Peak right after y: four
 * 512-byte blocks and the workspace. The small blocks share one 2 MiB
 * small-pool segment; the workspace (1 MiB < size < 10 MiB) gets a 20 MiB
 * large-pool segment. */
static void test_mlp_by_hand(void **state)
{
    (void)state;
    struct dnnmem_result *r = estimate(tb_small_mlp(), 2, NULL, 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], 48);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_INPUT], 24);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_ACTIVATION], 64);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WORKSPACE], 8519680);
    assert_int_equal(r->peak_allocated, 2048 + 8519680);
    assert_int_equal(r->rounding_bytes, 2048 - 136);
    assert_int_equal(r->peak_step, 2);
    assert_string_equal(r->peak_node, "relu");
    assert_int_equal(r->peak_reserved, (2 << 20) + (20 << 20));
    assert_int_equal(r->slack_bytes, (22 << 20) - 2048 - 8519680);
    assert_int_equal(r->context_bytes, dnnmem_cuda_context_default(0, 0, 80));
    assert_int_equal(r->total_bytes, (22 << 20) + dnnmem_cuda_context_default(0, 0, 80));
    assert_int_equal(r->n_live_total, 5);
    dnnmem_result_free(r);
}

/* x[1000,8] -> Reshape [-1,2,4] (view) -> Transpose (strided view) ->
 * Reshape [-1,8] (a copy: torch.reshape of a non-contiguous tensor) -> c;
 * c + x -> y. The shape vectors are metadata, not weights.
 * 32000 B each for x, c, y; 32000 rounds to 32256. Peak at the Add:
 * x + c + y = 96768 B allocated, 96000 requested. */
static struct tb *view_graph(bool transpose)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,8");
    tb_init_i64(b, "s1", 3, (int64_t[]){-1, 2, 4});
    tb_init_i64(b, "s2", 2, (int64_t[]){-1, 8});
    tb_node(b, "Reshape", "r1", "x,s1", "a");
    if (transpose) {
        tb_node(b, "Transpose", "t", "a", "bt");
        tb_attr_ints(b, "perm", 3, (int64_t[]){0, 2, 1});
    }
    tb_node(b, "Reshape", "r2", transpose ? "bt,s2" : "a,s2", "c");
    tb_node(b, "Add", "add", "c,x", "y");
    tb_output(b, "y");
    return b;
}

static void test_views_and_copies_by_hand(void **state)
{
    (void)state;
    struct dnnmem_result *r = estimate(view_graph(true), 1000, NULL, 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_INPUT], 32000);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_ACTIVATION], 64000);
    assert_int_equal(r->peak_allocated, 3 * 32256);
    assert_int_equal(r->rounding_bytes, 768);
    assert_string_equal(r->peak_node, "add");
    dnnmem_result_free(r);

    /* without the transpose both reshapes are views: only y is allocated */
    r = estimate(view_graph(false), 1000, NULL, 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_ACTIVATION], 32000);
    assert_int_equal(r->peak_allocated, 2 * 32256);
    dnnmem_result_free(r);
}

/* Dropout in eval mode returns its input: no allocation; its mask output is
 * not produced. x[4,256] (4096 B) -> Dropout -> d -> Relu -> y. */
static void test_dropout_is_identity_in_eval(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,256");
    tb_node(b, "Dropout", "drop", "x", "d,mask");
    tb_node(b, "Relu", "relu", "d", "y");
    tb_output(b, "y");
    struct dnnmem_result *r = estimate(b, 4, NULL, 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_ACTIVATION], 4096);
    assert_int_equal(r->peak_allocated, 8192);
    dnnmem_result_free(r);
}

/* Dropout in training: x[64,16] -> MatMul W[16,4096] -> h (1 MiB) ->
 * Dropout -> d. PyTorch on CUDA keeps a bool mask (1 B per element:
 * 256 KiB); TensorFlow's tf.nn.dropout keeps x * scale and a float32 mask
 * (1 MiB each). Both are alive at the peak (the loss, before Dropout's
 * backward frees them). */
static struct tb *dropout_mlp(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,16");
    tb_init(b, "W", F32, 2, (int64_t[]){16, 4096});
    tb_node(b, "MatMul", "mm", "x,W", "h");
    tb_node(b, "Dropout", "drop", "h", "d,m");
    tb_output(b, "d");
    return b;
}

/* One training step without an optimizer, loss = output.sum(), at `batch`. */
static struct dnnmem_config sum_step(int64_t batch)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_NONE;
    cfg.loss = DNNMEM_LOSS_SUM;
    cfg.iterations = 1;
    cfg.batch_size = batch;
    return cfg;
}

/* y = (x W1) W2 with x [batch, 16], W1 [16, 16], W2 [16, n], all float32:
 * h = x W1 and y the graph's output. */
static struct tb *two_matmuls(int64_t n)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "batch,16");
    tb_init(b, "W1", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){16, 16});
    tb_init(b, "W2", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){16, n});
    tb_node(b, "MatMul", "mm1", "x,W1", "h");
    tb_node(b, "MatMul", "mm2", "h,W2", "y");
    tb_output(b, "y");
    return b;
}

static const struct dnnmem_tensor_info *live_named(const struct dnnmem_result *r, const char *name)
{
    for (size_t k = 0; k < r->n_live; k++)
        if (strcmp(r->live[k].name, name) == 0)
            return &r->live[k];
    return NULL;
}

static void test_dropout_saved_by_framework(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_SGD;
    cfg.loss = DNNMEM_LOSS_SUM;
    cfg.batch_size = 64;
    cfg.n_top_tensors = 20;
    cfg.cuda_context_bytes = 0;
    struct dnnmem_result *r = estimate_cfg(dropout_mlp(), &cfg);
    const struct dnnmem_tensor_info *m = live_named(r, "drop.mask");
    assert_non_null(m);
    assert_string_equal(m->dtype, "bool");
    assert_int_equal(m->bytes, 64 * 4096);
    assert_null(live_named(r, "drop.scaled"));
    dnnmem_result_free(r);

    cfg.framework = DNNMEM_FW_TENSORFLOW;
    cfg.tf_execution = DNNMEM_TF_EAGER;
    r = estimate_cfg(dropout_mlp(), &cfg);
    m = live_named(r, "drop.mask");
    assert_non_null(m);
    assert_string_equal(m->dtype, "float32");
    assert_int_equal(m->bytes, 64 * 4096 * 4);
    m = live_named(r, "drop.scaled");
    assert_non_null(m);
    assert_string_equal(m->dtype, "float32");
    assert_int_equal(m->bytes, 64 * 4096 * 4);
    /* the tape also holds h, the first Mul's (x * scale) input
     * (tf_tape.def: Mul is in no exclusion list) */
    m = live_named(r, "h");
    assert_non_null(m);
    assert_int_equal(m->category, DNNMEM_CAT_SAVED);
    uint64_t eager = r->peak_requested;
    dnnmem_result_free(r);

    /* under tf.function (the default) the gradient graph prunes the mask's
     * grad, x * scale's only reader: the float mask alone. Eager's peak, at
     * drop's backward: W 256 KiB, x 4 KiB, h (the tape's), d, scaled, mask,
     * h.grad (1 MiB each), loss and its grad (4 B each). The graph's: W, x,
     * h, d and the mask at drop's forward (the backward has no scaled, and d
     * goes once the loss is made: the step returns no outputs): 2 MiB + 8 B
     * less. */
    cfg.tf_execution = DNNMEM_TF_GRAPH;
    r = estimate_cfg(dropout_mlp(), &cfg);
    m = live_named(r, "drop.mask");
    assert_non_null(m);
    assert_string_equal(m->dtype, "float32");
    assert_int_equal(m->bytes, 64 * 4096 * 4);
    assert_null(live_named(r, "drop.scaled"));
    assert_int_equal(eager - r->peak_requested, 2 * 64 * 4096 * 4 + 8);
    assert_string_equal(r->peak_phase, "forward");
    dnnmem_result_free(r);
}

/* ---- TensorFlow's eager GradientTape (src/train/tf_tape.def) ---------------
 * x [4, 256] float32 (an input), W1..W3 [256, 256] weights: h1..h3 = x @ Wk,
 * [4, 256] float32, 4,096 B each. Each case puts one op on them; loss = the
 * output's sum (which saves nothing), plain SGD. Measured: the SAVED bytes at
 * the loss step of step 2, every forward op done and nothing released yet:
 * what the tape holds (x and the W's are an input and weights, never SAVED). */

static void tb_scalar_f32(struct tb *b, const char *name, float v)
{
    Onnx__TensorProto *t = tb_init(b, name, F32, 0, NULL);
    t->n_float_data = 1;
    t->float_data = tb_calloc(b, 1, sizeof *t->float_data);
    t->float_data[0] = v;
}

static void tb_attr_str(struct tb *b, const char *key, const char *v)
{
    Onnx__AttributeProto *a = tb_attr_new(b, key, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = strlen(v);
    a->s.data = (uint8_t *)tb_str(b, v);
}

/* x, and h1..h<n> = x @ W<k> */
static struct tb *tape_mlp(int n)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,256");
    for (int k = 1; k <= n; k++) {
        char w[8], mm[8], h[8], ins[16];
        snprintf(w, sizeof w, "W%d", k);
        snprintf(mm, sizeof mm, "mm%d", k);
        snprintf(h, sizeof h, "h%d", k);
        snprintf(ins, sizeof ins, "x,%s", w);
        tb_init(b, w, F32, 2, (int64_t[]){256, 256});
        tb_node(b, "MatMul", mm, ins, h);
    }
    return b;
}

/* x [4, 4, 8, 8], h1 = conv1x1(x, W1): [4, 4, 8, 8] float32, 4,096 B */
static struct tb *tape_cnn(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,4,8,8");
    tb_init(b, "W1", F32, 4, (int64_t[]){4, 4, 1, 1});
    tb_node(b, "Conv", "conv", "x,W1", "h1");
    return b;
}

/* One training step of SGD on a sum loss at batch 4, no context, with the
 * timeline: the rule tests' setting. */
static void step_cfg(struct dnnmem_config *cfg, enum dnnmem_framework fw,
                     enum dnnmem_tf_execution exec)
{
    dnnmem_config_init(cfg);
    cfg->mode = DNNMEM_MODE_TRAIN;
    cfg->optimizer = DNNMEM_OPT_SGD;
    cfg->loss = DNNMEM_LOSS_SUM;
    cfg->batch_size = 4;
    cfg->cuda_context_bytes = 0;
    cfg->framework = fw;
    cfg->tf_execution = exec;
    cfg->timeline = true;
}

static struct dnnmem_result *tf_train(struct tb *b, enum dnnmem_framework fw,
                                      enum dnnmem_tf_execution exec)
{
    struct dnnmem_config cfg;
    step_cfg(&cfg, fw, exec);
    return estimate_cfg(b, &cfg);
}

/* The last timeline point of `phase` (at `node`, or any when NULL). */
static const struct dnnmem_timeline_point *last_point(const struct dnnmem_result *r,
                                                      const char *phase, const char *node)
{
    const struct dnnmem_timeline_point *p = NULL;
    for (size_t k = 0; k < r->n_timeline; k++)
        if (!strcmp(r->timeline[k].phase, phase) && (!node || !strcmp(r->timeline[k].node, node)))
            p = &r->timeline[k];
    if (!p)
        fail_msg("no %s step%s%s", phase, node ? " at " : "", node ? node : "");
    return p;
}

static uint64_t saved_bytes(struct tb *b, enum dnnmem_framework fw, enum dnnmem_tf_execution exec)
{
    struct dnnmem_result *r = tf_train(b, fw, exec);
    uint64_t v = last_point(r, "loss", NULL)->category_bytes[DNNMEM_CAT_SAVED];
    dnnmem_result_free(r);
    return v;
}

static uint64_t tape_saved(struct tb *b)
{
    return saved_bytes(b, DNNMEM_FW_TENSORFLOW, DNNMEM_TF_EAGER);
}

/* Exporters' decompositions of one PyTorch kernel, lifted back (lift.c), as
 * the zoo's misses showed them (docs/validation-zoo.md): what PyTorch eager
 * saves for backward after h1 = x W1, h1 [4, 256] float32 = H. */
static void test_lifted_kernels(void **state)
{
    (void)state;
    const uint64_t H = 4096;
    struct tb *b;
    /* x * Sigmoid(x) is F.silu: SiluBackward0 keeps x (H); left as exported,
     * Sigmoid keeps its output and Mul both operands (2 H; EfficientNet
     * +11..+21%) */
    /* and without grad SiLU(inplace=True) writes into x: the peak is one H
     * below --inplace none's (timm's BatchNormAct2d: tinynet_e +5.9% before) */
    uint64_t peak[3];
    for (int k = 0; k < 3; k++) {
        b = tape_mlp(1);
        tb_node(b, "Sigmoid", "sig", "h1", "s");
        tb_node(b, "Mul", "op", "h1,s", "y");
        tb_output(b, "y");
        if (k == 2) {
            assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), H);
            break;
        }
        struct dnnmem_config cfg;
        step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
        cfg.mode = DNNMEM_MODE_INFER;
        cfg.inplace = k ? DNNMEM_INPLACE_NONE : DNNMEM_INPLACE_AUTO;
        struct dnnmem_result *r = estimate_cfg(b, &cfg);
        peak[k] = r->peak_allocated;
        dnnmem_result_free(r);
    }
    assert_int_equal(peak[1], peak[0] + H);
    /* x * HardSigmoid(x, 1/6, 1/2) is hardswish (keeps x); with ONNX's
     * default alpha 0.2 it is not, and stays two ops */
    for (int hs = 0; hs <= 1; hs++) {
        b = tape_mlp(1);
        tb_node(b, "HardSigmoid", "hsig", "h1", "s");
        if (hs)
            tb_attr_float(b, "alpha", 1.0f / 6);
        tb_node(b, "Mul", "op", "h1,s", "y");
        tb_output(b, "y");
        assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), hs ? H : 2 * H);
    }
    /* Dropout(p = 0) in training returns its input: no mask; p = 0.5 keeps
     * its bool mask, [4, 256] = 1,024 B (swin_t +7..+20% before) */
    for (int p = 0; p <= 1; p++) {
        b = tape_mlp(1);
        tb_scalar_f32(b, "ratio", p ? 0.5f : 0.0f);
        tb_node(b, "Dropout", "op", "h1,ratio", "y");
        tb_output(b, "y");
        assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), p ? 1024 : 0);
    }
}

/* A Constant node making the float32 scalar v (torch.onnx's scalar constants). */
static void tb_const_node_f32(struct tb *b, const char *out, float v)
{
    tb_node(b, "Constant", out, "", out);
    Onnx__AttributeProto *a = tb_attr_new(b, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    Onnx__TensorProto *t = tb_calloc(b, 1, sizeof *t);
    onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = F32;
    t->n_float_data = 1;
    t->float_data = tb_calloc(b, 1, sizeof *t->float_data);
    t->float_data[0] = v;
    a->t = t;
}

/* F.gelu(h1, approximate="tanh") (timm's gelu_tanh) as torch.onnx 2.14.1
 * exports it at opset 14, node for node (checked on nn.GELU("tanh") after a
 * Linear): Mul(x, x), Mul(x, .), Mul(0.044715, .), Add(x, .),
 * Mul(0.7978846, .), Tanh, Add(1, .), Mul(x, .), Mul(0.5, .), each constant a
 * Constant node.  PyTorch runs one gelu kernel: GeluBackward0 keeps self
 * alone (measured, 2.14.1, h [4, 256]: `_saved_self` [4, 256], forward +4096
 * B, the output), so SAVED is H; lifted to Gelu (lift.c lift_gelu_tanh).
 * With any other kappa it is not a GELU and stays ten ops, which keep x, x * x,
 * tanh's result and 1 + tanh: 4 H (as eager's MulBackward0 and TanhBackward0
 * would). */
static void test_lifted_gelu_tanh(void **state)
{
    (void)state;
    const uint64_t H = 4096;
    for (int k = 0; k < 2; k++) {
        struct tb *b = tape_mlp(1);
        tb_node(b, "Mul", "g/Mul", "h1,h1", "a");
        tb_node(b, "Mul", "g/Mul_1", "h1,a", "c");
        tb_const_node_f32(b, "kappa", k ? 0.05f : 0.044715f);
        tb_node(b, "Mul", "g/Mul_2", "kappa,c", "kc");
        tb_node(b, "Add", "g/Add", "h1,kc", "s");
        tb_const_node_f32(b, "beta", 0.7978846f);
        tb_node(b, "Mul", "g/Mul_3", "beta,s", "i");
        tb_node(b, "Tanh", "g/Tanh", "i", "t");
        tb_const_node_f32(b, "one", 1.0f);
        tb_node(b, "Add", "g/Add_1", "one,t", "p");
        tb_node(b, "Mul", "g/Mul_4", "h1,p", "m");
        tb_const_node_f32(b, "half", 0.5f);
        tb_node(b, "Mul", "g/Mul_5", "half,m", "y");
        tb_output(b, "y");
        assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), k ? 4 * H : H);
    }
}

/* F.scaled_dot_product_attention(q, k, v) as torch.onnx's TorchScript
 * exporter writes it (2.13 and 2.14.1, opsets 14-18): q, k, v viewed out of
 * three projections h1..h3 [4, 256] as [B 4, S 16, H 2, D 8] and transposed
 * to [B, H, S, D] (k's transpose fused with k.transpose(-2, -1): perm
 * [0, 2, 3, 1]), each of q and k^T times its own Sqrt of one scale, MatMul,
 * Softmax, MatMul, then transpose(1, 2).reshape(B, 256). PyTorch's CPU
 * kernel (_scaled_dot_product_flash_attention_for_cpu) keeps q, k, v (views
 * of h1..h3: 3 H), its output (H, written [B, S, H, D], so the reshape after
 * the transpose is a view) and the float32 logsumexp [B, H, S] (512 B):
 * 4 H + 512, lifted (lift.c lift_sdpa). A hand-written attention (timm with
 * fused_attn off: q * scale, q @ k^T, softmax, @ v) is left as separate ops,
 * which keep the scaled q (H), k^T's and v's contiguous copies for bmm
 * (2 H) and the softmax [4, 2, 16, 16] (2 H): 5 H. */
static void test_lifted_sdpa(void **state)
{
    (void)state;
    const uint64_t H = 4096;
    for (int c = 0; c < 4; c++) {
        int k = c / 2, cuda = c % 2;
        struct tb *b = tb_new(14);
        tb_input(b, "x", F32, "batch,256");
        tb_init_i64(b, "shp", 4, (int64_t[]){4, 16, 2, 8});
        tb_init_i64(b, "flat", 2, (int64_t[]){4, 256});
        static const char *const w[3] = {"Wq", "Wk", "Wv"}, *const h[3] = {"hq", "hk", "hv"},
                          *const r[3] = {"rq", "rk", "rv"};
        for (int j = 0; j < 3; j++) {
            char ins[16], nm[16], rin[16];
            snprintf(ins, sizeof ins, "x,%s", w[j]);
            snprintf(nm, sizeof nm, "%s/MatMul", w[j]);
            tb_init(b, w[j], F32, 2, (int64_t[]){256, 256});
            tb_node(b, "MatMul", nm, ins, h[j]);
            snprintf(rin, sizeof rin, "%s,shp", h[j]);
            snprintf(nm, sizeof nm, "%s/Reshape", w[j]);
            tb_node(b, "Reshape", nm, rin, r[j]);
        }
        tb_node(b, "Transpose", "tq", "rq", "q");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 1, 3});
        tb_node(b, "Transpose", "tk", "rk", "kt");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 3, 1});
        tb_node(b, "Transpose", "tv", "rv", "v");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 1, 3});
        tb_const_node_f32(b, "scale", 0.35355339f);
        if (!k) {
            tb_node(b, "Sqrt", "Sqrt_1", "scale", "sq");
            tb_node(b, "Mul", "Mul", "q,sq", "qs");
            tb_node(b, "Sqrt", "Sqrt_2", "scale", "sk");
            tb_node(b, "Mul", "Mul_1", "kt,sk", "ks");
            tb_node(b, "MatMul", "MatMul", "qs,ks", "s");
        } else {
            tb_node(b, "Mul", "Mul", "q,scale", "qs");
            tb_node(b, "MatMul", "MatMul", "qs,kt", "s");
        }
        tb_node(b, "Softmax", "Softmax", "s", "p");
        tb_attr_int(b, "axis", -1);
        tb_node(b, "MatMul", "MatMul_1", "p,v", "o");
        tb_node(b, "Transpose", "to", "o", "ot");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 1, 3});
        tb_node(b, "Reshape", "Reshape_3", "ot,flat", "y");
        tb_output(b, "y");
        struct dnnmem_config cfg;
        step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
        cfg.device = cuda ? DNNMEM_DEVICE_CUDA : DNNMEM_DEVICE_CPU;
        struct dnnmem_result *res = estimate_cfg(b, &cfg);
        uint64_t saved = last_point(res, "loss", NULL)->category_bytes[DNNMEM_CAT_SAVED];
        dnnmem_result_free(res);
        /* float32 on CUDA: the memory-efficient kernel, whose logsumexp
         * has S rounded up to 32 rows (kAlignLSE): 1024 B */
        assert_int_equal(saved, k ? 5 * H : 4 * H + (cuda ? 1024 : 512));
    }
}

/* torch.var(h1, 1, unbiased=False, keepdim=True) as torch.onnx writes it:
 * ReduceMean, Sub, Mul(d, d), ReduceMean, then y = h1 + v. PyTorch runs one
 * var kernel (measured, 2.14.1: +16 B, the [4, 1] result alone;
 * VarBackward0's `_saved_self` is h1), lifted (lift.c lift_var) to a node
 * shaped like h1's mean: the inference peak is that of y = h1 + mean(h1)
 * (x - mean and its square, 2 H, were live at once before), and it keeps h1
 * (H) where the mean keeps nothing. */
static void test_lifted_var(void **state)
{
    (void)state;
    const uint64_t H = 4096;
    uint64_t peak[2], saved[2];
    for (int k = 0; k < 2; k++) {
        for (int train = 0; train < 2; train++) {
            struct tb *b = tape_mlp(1);
            tb_node(b, "ReduceMean", "var/ReduceMean", "h1", k ? "v" : "m");
            tb_attr_ints(b, "axes", 1, (int64_t[]){1});
            if (!k) {
                tb_node(b, "Sub", "var/Sub", "h1,m", "d");
                tb_node(b, "Mul", "var/Mul", "d,d", "q");
                tb_node(b, "ReduceMean", "var/ReduceMean_1", "q", "v");
                tb_attr_ints(b, "axes", 1, (int64_t[]){1});
            }
            tb_node(b, "Add", "add", "h1,v", "y");
            tb_output(b, "y");
            if (train) {
                saved[k] = saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
                continue;
            }
            struct dnnmem_config cfg;
            step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
            cfg.mode = DNNMEM_MODE_INFER;
            struct dnnmem_result *r = estimate_cfg(b, &cfg);
            peak[k] = r->peak_allocated;
            dnnmem_result_free(r);
        }
    }
    assert_int_equal(peak[0], peak[1]);
    assert_int_equal(saved[0], H);
    assert_int_equal(saved[1], 0);
}

/* In-place hardtanh_ (ReLU6) and hardswish_ in training: autograd clones
 * the input their backward reads (original_self); relu_ reads its result
 * and clones nothing. h1 [4, 256] float32 = H: at the loss, everything
 * allocated is that of relu_ plus one H for the clone, or exactly relu_'s
 * under --inplace none (the op's own output then, and its input kept). */
static void test_inplace_clone(void **state)
{
    (void)state;
    const uint64_t H = 4096;
    uint64_t at_loss[4];
    static const char *const ops[4] = {"Relu", "Clip", "HardSwish", "Clip"};
    for (int k = 0; k < 4; k++) {
        struct tb *b = tape_mlp(1);
        if (k == 1 || k == 3) {
            tb_scalar_f32(b, "lo", 0.0f);
            tb_scalar_f32(b, "hi", 6.0f);
            tb_node(b, ops[k], "op", "h1,lo,hi", "y");
        } else
            tb_node(b, ops[k], "op", "h1", "y");
        tb_output(b, "y");
        struct dnnmem_config cfg;
        step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
        if (k == 3)
            cfg.inplace = DNNMEM_INPLACE_NONE;
        struct dnnmem_result *r = estimate_cfg(b, &cfg);
        at_loss[k] = last_point(r, "loss", NULL)->allocated;
        dnnmem_result_free(r);
    }
    assert_int_equal(at_loss[1], at_loss[0] + H);
    assert_int_equal(at_loss[2], at_loss[0] + H);
    assert_int_equal(at_loss[3], at_loss[0] + H);
}

/* A float initializer of n copies of v (the exporter's Constant ones/zeros). */
static void tb_fill_f32(struct tb *b, const char *name, int64_t n, float v)
{
    Onnx__TensorProto *t = tb_init(b, name, F32, 1, &n);
    t->n_float_data = (size_t)n;
    t->float_data = tb_calloc(b, (size_t)n + 1, sizeof *t->float_data);
    for (int64_t k = 0; k < n; k++)
        t->float_data[k] = v;
}

/* nn.GroupNorm(2, 8) on h1 = conv1x1(x) [2, 8, 8, 8] float32 (4,096 B), as
 * the TorchScript exporter writes it (opset 14): Reshape(h1, [0, 2, -1]),
 * InstanceNormalization(ones[2], zeros[2]), Reshape(Shape(h1)), Mul by
 * Unsqueeze(weight, [1, 2]), Add of Unsqueeze(bias, [1, 2]); lifted to one
 * GroupNormalization unless `affine_bias` is a weight it cannot unsqueeze.
 * x of `xdims`; nhwc: x is NHWC, transposed and ReLU'd (a view with
 * channels-last strides) before the conv, whose output h1 is then
 * channels-last too. */
static struct tb *groupnorm_after(const char *xdims, bool nhwc)
{
    struct tb *b = tb_new(14);
    tb_input(b, "x", F32, xdims);
    if (nhwc) {
        tb_node(b, "Transpose", "perm", "x", "xc");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
        tb_node(b, "Relu", "act", "xc", "xr");
    }
    tb_init(b, "W1", F32, 4, (int64_t[]){8, 8, 1, 1});
    tb_node(b, "Conv", "conv", nhwc ? "xr,W1" : "x,W1", "h1");
    tb_init_i64(b, "to_groups", 3, (int64_t[]){0, 2, -1});
    tb_node(b, "Reshape", "gn/Reshape", "h1,to_groups", "r");
    tb_fill_f32(b, "ones", 2, 1.0f);
    tb_fill_f32(b, "zeros", 2, 0.0f);
    tb_node(b, "InstanceNormalization", "gn/InstanceNormalization", "r,ones,zeros", "in");
    tb_attr_float(b, "epsilon", 1e-5f);
    tb_node(b, "Shape", "gn/Shape", "h1", "shape");
    tb_node(b, "Reshape", "gn/Reshape_1", "in,shape", "r1");
    tb_init_i64(b, "axes", 2, (int64_t[]){1, 2});
    tb_init(b, "gn.weight", F32, 1, (int64_t[]){8});
    tb_init(b, "gn.bias", F32, 1, (int64_t[]){8});
    tb_node(b, "Unsqueeze", "gn/Unsqueeze", "gn.weight,axes", "wu");
    tb_node(b, "Mul", "gn/Mul", "r1,wu", "m");
    tb_node(b, "Unsqueeze", "gn/Unsqueeze_1", "gn.bias,axes", "bu");
    tb_node(b, "Add", "gn/Add", "m,bu", "y");
    tb_output(b, "y");
    return b;
}

static struct tb *exported_groupnorm(void)
{
    return groupnorm_after("batch,8,8,8", false);
}

/* The exported GroupNorm pattern is one native_group_norm (lift.c), checked
 * against PyTorch 2.14.1's allocation events for this module (CPU, one
 * thread): forward Y 4,096 B, mean and rstd [N, G] 16 B each; backward dX
 * 4,096 B, dgamma and dbeta 32 B, then ds and db [N, C] 64 B each, freed
 * when native_group_norm_backward returns. Saved at the loss: h1 and mean
 * and rstd (4,096 + 2 x 16); as exported, InstanceNormalization keeps h1
 * and the Mul its normalized operand (2 x 4,096). */
static void test_lifted_groupnorm(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
    cfg.batch_size = 2;
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.cpu_threads = 1;
    cfg.events = true;
    struct dnnmem_result *r = estimate_cfg(exported_groupnorm(), &cfg);
    assert_int_equal(last_point(r, "loss", NULL)->category_bytes[DNNMEM_CAT_SAVED], 4096 + 2 * 16);
    /* the backward of gn/Add (the lifted node): dX, dgamma, dbeta, ds, db */
    static const uint64_t want[] = {4096, 32, 32, 64, 64};
    size_t got = 0;
    for (size_t k = 0; k < r->n_events; k++) {
        const struct dnnmem_event *e = &r->events[k];
        const struct dnnmem_timeline_point *p = &r->timeline[e->step];
        if (e->alloc && p->iteration == 1 && !strcmp(p->phase, "backward") &&
            !strcmp(p->node, "gn/Add")) {
            assert_true(got < 5);
            assert_int_equal(e->bytes, want[got]);
            got++;
        }
    }
    assert_int_equal(got, 5);
    dnnmem_result_free(r);
    /* a bias that is no weight: left as exported; at batch 4, h1 and the
     * Mul's normalized operand, and the InstanceNormalization's mean and
     * rstd [N, G] (save.c, keep_instance_norm: native_group_norm's) */
    struct tb *b = exported_groupnorm();
    b->g.initializer[b->g.n_initializer - 1]->name = tb_str(b, "gn.bias.unused");
    tb_input(b, "gn.bias", F32, "8");
    assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER),
                     2 * 4 * 8 * 8 * 8 * 4 + 2 * 4 * 2 * 4);
}

/* F.group_norm(h1, 2, weight, None) (timm's GroupNorm1NoBias, PoolFormerV2):
 * the exporter writes the absent bias as a constant [0.0], which lift.c
 * drops (it was refused before: "scale and bias of shape [C]"); measured,
 * 2.14.1: the backward makes dX 4,096 B, dgamma 32 B, ds and db [N, C] 64 B
 * each, and no dbeta. */
static void test_lifted_groupnorm_no_bias(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
    cfg.batch_size = 2;
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.cpu_threads = 1;
    cfg.events = true;
    struct tb *b = exported_groupnorm();
    b->g.initializer[b->g.n_initializer - 1]->name = tb_str(b, "gn.bias.unused");
    tb_fill_f32(b, "gn.bias", 1, 0.0f);
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    static const uint64_t want[] = {4096, 32, 64, 64};
    size_t got = 0;
    for (size_t k = 0; k < r->n_events; k++) {
        const struct dnnmem_event *e = &r->events[k];
        const struct dnnmem_timeline_point *p = &r->timeline[e->step];
        if (e->alloc && p->iteration == 1 && !strcmp(p->phase, "backward") &&
            !strcmp(p->node, "gn/Add")) {
            assert_true(got < 4);
            assert_int_equal(e->bytes, want[got]);
            got++;
        }
    }
    assert_int_equal(got, 4);
    dnnmem_result_free(r);
}

/* h1 = x W1 [4, 256] float32 (4,096 B), s = h1[:, 128:] by Slice, read by
 * a MatMul that keeps it for W2's grad. PyTorch's slice is a view: the saved
 * s keeps all of h1 (4,096 B); a step of -1 (the exporter's torch.flip)
 * copies, and the copy [4, 128] is kept (2,048 B). ShuffleNetV2's channel
 * split, measured on 2.14 (the zoo): training at batch 2 -4.06% with every
 * Slice a copy, 0.00% with the views. */
static void test_slice_view(void **state)
{
    (void)state;
    for (int flip = 0; flip <= 1; flip++) {
        struct tb *b = tape_mlp(1);
        tb_init_i64(b, "starts", 1, (int64_t[]){flip ? 255 : 128});
        tb_init_i64(b, "ends", 1, (int64_t[]){flip ? 127 : 256});
        tb_init_i64(b, "axes", 1, (int64_t[]){1});
        tb_init_i64(b, "steps", 1, (int64_t[]){flip ? -1 : 1});
        tb_node(b, "Slice", "slice", "h1,starts,ends,axes,steps", "s");
        tb_init(b, "W2", F32, 2, (int64_t[]){128, 256});
        tb_node(b, "MatMul", "mm2", "s,W2", "y");
        tb_output(b, "y");
        assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), flip ? 2048 : 4096);
    }
}

/* A float32 Conv named "conv" on input x of `xdims` (through a Transpose
 * (0, 3, 1, 2) of it when `nhwc`: channels-last strides, no copy), weight
 * [oc, ic/g, k, k], pads k/2, `stride`, `g` groups, with a bias or not. */
static struct tb *conv_graph(const char *xdims, bool nhwc, int64_t oc, int64_t icg, int64_t k,
                             int64_t stride, int64_t g, bool bias)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, xdims);
    tb_init(b, "W", F32, 4, (int64_t[]){oc, icg, k, k});
    if (bias)
        tb_init(b, "B", F32, 1, (int64_t[]){oc});
    if (nhwc) {
        tb_node(b, "Transpose", "perm", "x", "xc");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
        tb_node(b, "Relu", "act", "xc", "xr"); /* keeps the strides */
    }
    tb_node(b, "Conv", "conv", nhwc ? (bias ? "xr,W,B" : "xr,W") : (bias ? "x,W,B" : "x,W"), "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){k / 2, k / 2, k / 2, k / 2});
    tb_attr_ints(b, "strides", 2, (int64_t[]){stride, stride});
    tb_attr_int(b, "group", g);
    tb_output(b, "y");
    return b;
}

static struct dnnmem_result *cpu_conv_isa(struct tb *b, int torch, bool train, enum dnnmem_cpu_isa isa)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    if (train) {
        step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
        cfg.iterations = 1;
    }
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = torch;
    cfg.cpu_threads = 1;
    cfg.cpu_isa = isa;
    cfg.batch_size = 0;
    cfg.timeline = true;
    return estimate_cfg(b, &cfg);
}

static struct dnnmem_result *cpu_conv(struct tb *b, int torch, bool train)
{
    return cpu_conv_isa(b, torch, train, DNNMEM_CPU_ISA_DEFAULT);
}

/* oneDNN's buffers around a CPU convolution, PyTorch 2.x (workspace.c),
 * against the profiler's allocation events of torch 2.14.1 (one thread,
 * AVX-512), op by op. */
static void test_onednn_conv_2x(void **state)
{
    (void)state;
    struct dnnmem_result *r;
    /* depthwise 3x3 stride 2 on [2,96,112,112] (x 9633792 B, W 3456 B): the
     * input reordered (9633792), the weight (3456), the blocked output
     * (2408448); then the ATen output. Peak: x + W + the three. 1.13.0
     * (Debian's python3-torch) on AVX-512 the same, measured 2026-12-04:
     * +9633792 +3456 +2408448 -3456 -9633792 +2408448 -2408448 */
    r = cpu_conv(conv_graph("2,96,112,112", false, 96, 1, 3, 2, 96, false), 214, false);
    assert_int_equal(r->peak_allocated, 9633792 + 3456 + 9633792 + 3456 + 2408448);
    dnnmem_result_free(r);
    r = cpu_conv(conv_graph("2,96,112,112", false, 96, 1, 3, 2, 96, false), 113, false);
    assert_int_equal(r->peak_allocated, 9633792 + 3456 + 9633792 + 3456 + 2408448);
    dnnmem_result_free(r);
    /* dense 3x3, 20 -> 40 channels with a bias on [2,20,16,16]: x 40960,
     * W 28800, B 160; measured +320 (scratchpad: the bias padded to 48
     * floats + 128), +65536 (input, 32 channels), +55296 (weight 48x32x9),
     * +98304 (output, 48 channels), -55296, -65536, -320, +81920 (output),
     * -98304 */
    r = cpu_conv(conv_graph("2,20,16,16", false, 40, 20, 3, 1, 1, true), 214, false);
    assert_int_equal(r->peak_allocated, 40960 + 28800 + 160 + 320 + 65536 + 55296 + 98304);
    dnnmem_result_free(r);
    /* 20 -> 36 channels with a bias: AVX-512 +320 (48 floats + 128),
     * +65536 (32 channels), +55296 (48 x 32 x 9), +98304 (48 channels); AVX2
     * (ONEDNN_MAX_CPU_ISA=AVX2) blocks of 8: +288 (40 floats + 128), +49152
     * (24 channels), +34560 (40 x 24 x 9), +81920 (40 channels). x 40960,
     * W 25920, B 144 */
    r = cpu_conv_isa(conv_graph("2,20,16,16", false, 36, 20, 3, 1, 1, true), 214, false,
                     DNNMEM_CPU_ISA_AVX512);
    assert_int_equal(r->peak_allocated, 40960 + 25920 + 144 + 320 + 65536 + 55296 + 98304);
    dnnmem_result_free(r);
    r = cpu_conv_isa(conv_graph("2,20,16,16", false, 36, 20, 3, 1, 1, true), 214, false,
                     DNNMEM_CPU_ISA_AVX2);
    assert_int_equal(r->peak_allocated, 40960 + 25920 + 144 + 288 + 49152 + 34560 + 81920);
    dnnmem_result_free(r);
    /* fewer than 16 in channels (12 -> 16, no bias): the input is read as it
     * is, the weight blocked on the out channels only: +W, +y', -W, +y, -y'
     * (x 24576, W 6912, y 32768) */
    r = cpu_conv(conv_graph("2,12,16,16", false, 16, 12, 3, 1, 1, false), 214, false);
    assert_int_equal(r->peak_allocated, 24576 + 6912 + 32768 + 32768);
    dnnmem_result_free(r);
    /* 2 groups of 10 -> 20 channels (out channels per group not a multiple
     * of 8: gemm_convolution) on [2,20,16,16]: +92288 (im2col: 10 x 9 x 256
     * floats + 128), +y', -92288, +y, -y' (x 40960, W 14400, y 81920) */
    r = cpu_conv(conv_graph("2,20,16,16", false, 40, 10, 3, 1, 2, false), 214, false);
    assert_int_equal(r->peak_allocated, 40960 + 14400 + 92288 + 81920);
    dnnmem_result_free(r);
}

/* The workspace at the last step of `node` in `phase`, on the CPU. */
static uint64_t step_workspace(struct tb *b, int torch, bool train, const char *phase,
                               const char *node)
{
    struct dnnmem_result *r = cpu_conv(b, torch, train);
    uint64_t v = last_point(r, phase, node)->category_bytes[DNNMEM_CAT_WORKSPACE];
    dnnmem_result_free(r);
    return v;
}

static uint64_t conv_bwd_workspace(struct tb *b, int torch)
{
    return step_workspace(b, torch, true, "backward", "conv");
}

/* A depthwise conv whose input has channels-last strides (layout.c) goes
 * back through oneDNN's backward-weights kernel with whole 16x16 blocks per
 * group: 384 x 256 x 49 floats = 19267584 B for the 7x7 conv of ConvNeXt-T
 * on [1,384,10,10] (measured: 2.14.1, one thread, the block ConvNeXt's
 * LayerNorm2d feeds); Goihw16g, 384 x 9 floats = 13824 B, for a 3x3 one;
 * beside it a second weight-sized tensor (75264 B, 13824 B: +w +w -w next
 * to the weight's grad). The same conv on an NCHW input: the weight- and
 * input-sized scratch (75264 + 153600), and so under 1.13 at the default
 * ISA (AVX-512: 1.13's channels-last backward blocks, cpuconv.c
 * onednn_cl_grad_113, are AVX2's, measured there; test-cpu.c
 * test_onednn_cl_bwd_113). Each also holds the grad_output copy
 * (workspace.c grad_output_copy, 153600 B): .sum()'s grad is an expand,
 * dense in neither format. */
static void test_channels_last_conv_bwd(void **state)
{
    (void)state;
    assert_int_equal(conv_bwd_workspace(conv_graph("1,10,10,384", true, 384, 1, 7, 1, 384, true), 214),
                     19267584 + 75264 + 153600);
    assert_int_equal(conv_bwd_workspace(conv_graph("1,10,10,384", true, 384, 1, 3, 1, 384, true), 214),
                     13824 + 13824 + 153600);
    assert_int_equal(conv_bwd_workspace(conv_graph("1,384,10,10", false, 384, 1, 7, 1, 384, true), 214),
                     75264 + 153600 + 153600);
    assert_int_equal(conv_bwd_workspace(conv_graph("1,10,10,384", true, 384, 1, 7, 1, 384, true), 113),
                     75264 + 153600 + 153600);
}

/* exported_groupnorm's module on a channels-last h1 (x an NHWC input
 * transposed, conv1x1 8 -> 8: h1 [2,8,8,8] channels-last, 4,096 B), trained
 * on .sum() (its grad an expand, contiguous in neither format). PyTorch
 * 1.13's CPU native_group_norm_backward clones X and dY to contiguous first
 * (workspace.c group_norm_113_copies; measured, 1.13.0: two aten::clone of
 * 196,608 B for a channels-last [2,96,16,16] and its channels-last grad):
 * 4,096 + 4,096 B of workspace at its backward's last point; 2.x's kernel
 * reads them as they are: none. */
static void test_group_norm_113_copies(void **state)
{
    (void)state;
    for (int torch = 113; torch <= 214; torch += 101) {
        struct tb *b = groupnorm_after("2,8,8,8", true);
        assert_int_equal(step_workspace(b, torch, true, "backward", "gn/Add"),
                         torch == 113 ? 4096 + 4096 : 0);
    }
}

/* torch.cat is channels-last when all its inputs are (layout.c; checked on
 * 2.14.1, mixed inputs give a contiguous result): InstanceNorm copies the
 * [2,48,32,32] cat of two channels-last halves (393216 B), not the cat of a
 * channels-last half and an NCHW one. */
static void test_cat_channels_last(void **state)
{
    (void)state;
    for (int both = 0; both <= 1; both++) {
        struct tb *b = tb_new(17);
        tb_input(b, "a", F32, "2,32,32,24");
        tb_input(b, "c", F32, both ? "2,32,32,24" : "2,24,32,32");
        tb_init(b, "S", F32, 1, (int64_t[]){48});
        tb_init(b, "B", F32, 1, (int64_t[]){48});
        tb_node(b, "Transpose", "pa", "a", "ta");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
        if (both) {
            tb_node(b, "Transpose", "pc", "c", "tc");
            tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
        }
        tb_node(b, "Concat", "cat", both ? "ta,tc" : "ta,c", "h");
        tb_attr_int(b, "axis", 1);
        tb_node(b, "InstanceNormalization", "norm", "h,S,B", "y");
        tb_output(b, "y");
        assert_int_equal(step_workspace(b, 214, false, "forward", "norm"), both ? 393216 : 0);
    }
}

/* A grad that arrives as a slice of a Concat's grad, grad.narrow(1, ...),
 * is not dense at batch > 1, so x's next grad is not added into it in place
 * (input_buffer.cpp, can_accumulate_inplace): accumulate takes the new,
 * dense grad as the sum (var.add_(old_var)) and the view, with the whole cat
 * grad, goes (train/backward.c, dm_deliver_slice; measured on rand43 b2,
 * torch 2.14.1). h1 = conv(x) [4, 4, 8, 8] (4,096 B) is read by
 * Concat(h1, sigmoid(relu(h1))) and Relu; the cat's grad [4, 8, 8, 8]
 * (8,192 B) reaches h1 first, its other slice is gone after the Sigmoid's
 * backward, then Relu's grad arrives: at conv's backward only h1's grad
 * (4,096 B) is a temporary, not the cat grad it was added into before. */
static void test_cat_grad_slice_not_accumulated_in_place(void **state)
{
    (void)state;
    struct tb *b = tape_cnn();
    tb_init(b, "W2", F32, 4, (int64_t[]){4, 8, 1, 1});
    tb_node(b, "Relu", "relu", "h1", "t");
    tb_node(b, "Sigmoid", "sig", "t", "r");
    tb_node(b, "Concat", "cat", "h1,r", "c");
    tb_attr_int(b, "axis", 1);
    tb_node(b, "Conv", "conv2", "c,W2", "y");
    tb_output(b, "y");
    struct dnnmem_config cfg;
    step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    /* and the sum loss's 4-byte grad */
    assert_int_equal(last_point(r, "backward", "conv")->category_bytes[DNNMEM_CAT_TEMPORARY],
                     4096 + 4);
    dnnmem_result_free(r);
}

/* 2.x's NCHW backward, pass by pass (workspace.c dm_sb_workspace_grad): a
 * dense 3x3 conv, 40 -> 48 channels with a bias, on h [2,40,16,16] (made by
 * a first conv, so its grad is needed). Measured (torch 2.14.1): +gy' +w'
 * +gx' -w' -gy' +gx -gx', then +gy' +x' +dw' +db' -x' -gy' +gb +gw -dw' -db'
 * with gy' 98304 (48 channels), x' 98304 (40 padded to 48), dw' 48 x 48 x 9
 * floats = 82944, db' 192: at the step's peak, in the second pass, the
 * workspaces are gy' + x' + dw' + db'. Both hold the grad_output copy
 * (workspace.c grad_output_copy, y's 98304 B): .sum()'s grad is an
 * expand, dense in neither format. */
static struct tb *conv_bwd_2x_graph(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,8,16,16");
    tb_init(b, "W1", F32, 4, (int64_t[]){40, 8, 3, 3});
    tb_init(b, "W", F32, 4, (int64_t[]){48, 40, 3, 3});
    tb_init(b, "B", F32, 1, (int64_t[]){48});
    tb_node(b, "Conv", "pre", "x,W1", "h");
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_node(b, "Conv", "conv", "h,W,B", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_output(b, "y");
    return b;
}

static void test_onednn_conv_bwd_2x(void **state)
{
    (void)state;
    assert_int_equal(step_workspace(conv_bwd_2x_graph(), 214, true, "backward", "conv"),
                     98304 + 98304 + 82944 + 192 + 98304);
    /* 1.13.0 (Debian's python3-torch) on AVX-512, measured 2026-12-04 with
     * the profiler, (conv(h) + b).sum().backward(): +4 (the sum's grad),
     * +98304 (the grad_output copy), +98304 +82944 +98304 -82944 -98304,
     * +81920 (grad_input) -98304, +98304 +98304 +82944 +192 -98304 -98304,
     * +192 +69120 (the ATen grads) -82944 -192, -98304: the two passes
     * (cpuconv.c onednn_113_phased), where dnnmem had taken weight- and
     * input-sized scratch (69120 + 81920) */
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    step_cfg(&cfg, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER);
    cfg.iterations = 1;
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 113;
    cfg.cpu_threads = 1;
    cfg.cpu_isa = DNNMEM_CPU_ISA_AVX512;
    cfg.batch_size = 0;
    cfg.events = true;
    struct dnnmem_result *r = estimate_cfg(conv_bwd_2x_graph(), &cfg);
    char got[2048];
    size_t n = 0;
    bool bwd = false;
    got[0] = 0;
    for (size_t e = 0; e < r->n_events; e++) {
        const char *buf = r->events[e].buffer;
        if (r->events[e].category != DNNMEM_CAT_WORKSPACE || !buf || strncmp(buf, "conv.", 5))
            continue;
        bwd |= strcmp(buf, "conv.grad_output.contiguous()") == 0;
        if (bwd && n + 80 < sizeof got)
            n += (size_t)snprintf(got + n, sizeof got - n, "%c%llu\n", r->events[e].alloc ? '+' : '-',
                                  (unsigned long long)r->events[e].bytes);
    }
    dnnmem_result_free(r);
    assert_string_equal(got, "+98304\n+98304\n+82944\n+98304\n-82944\n-98304\n-98304\n"
                             "+98304\n+98304\n+82944\n+192\n-98304\n-98304\n-82944\n-192\n"
                             "-98304\n");
}

/* LayerNorm on a [2,32,32,48] permute(0, 2, 3, 1) view: native_layer_norm's
 * expect_contiguous() copies an NCHW tensor's view (measured, 2.14.1: +393216
 * clone, +393216 output, -393216) and not a channels-last tensor's, which is
 * dense in that order (layout.c: the Transpose (0, 3, 1, 2) of an NHWC input,
 * through a Relu). InstanceNorm copies a channels-last input (instance_norm's
 * input.contiguous()), not an NCHW one. */
static void test_contiguous_copies(void **state)
{
    (void)state;
    for (int cl = 0; cl <= 1; cl++)
        for (int ln = 0; ln <= 1; ln++) {
            struct tb *b = tb_new(17);
            tb_input(b, "x", F32, cl ? "2,32,32,48" : "2,48,32,32");
            tb_init(b, "S", F32, 1, (int64_t[]){48});
            tb_init(b, "B", F32, 1, (int64_t[]){48});
            const char *h = "x";
            if (cl) {
                tb_node(b, "Transpose", "perm", "x", "xc");
                tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
                tb_node(b, "Relu", "act", "xc", "h");
                h = "h";
            }
            if (ln) {
                tb_node(b, "Transpose", "nhwc", h, "t");
                tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 3, 1});
                tb_node(b, "LayerNormalization", "norm", "t,S,B", "y");
                tb_attr_int(b, "axis", -1);
            } else {
                tb_node(b, "InstanceNormalization", "norm", cl ? "h,S,B" : "x,S,B", "y");
            }
            tb_output(b, "y");
            /* and, for the LayerNorm, its unsaved mean and rstd (2048 rows,
             * 8192 B each: keep.c dm_norm_unsaved_rows) */
            uint64_t copy = step_workspace(b, 214, false, "forward", "norm");
            assert_int_equal(copy, ((ln ? !cl : cl) ? 393216 : 0) + (ln ? 2 * 8192 : 0));
        }
}

static void test_tf_tape_rules(void **state)
{
    (void)state;
    const uint64_t H = 4096; /* one [4, 256] float32 */
    struct tb *b;
    /* Relu, Softmax: the output (Relu, Softmax: all inputs unused) */
    b = tape_mlp(1);
    tb_node(b, "Relu", "op", "h1", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), H);
    b = tape_mlp(1);
    tb_node(b, "Softmax", "op", "h1", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), H);
    /* AddV2, Sub, Mul, RealDiv, ConcatV2, Maximum: both inputs (in no input
     * exclusion list; _AddGrad reads their shapes). PyTorch's add and cat
     * keep nothing, its mul both operands. */
    static const char *const binary[] = {"Add", "Sub", "Mul", "Div", "Concat", "Max"};
    for (size_t k = 0; k < sizeof binary / sizeof *binary; k++) {
        b = tape_mlp(2);
        tb_node(b, binary[k], "op", "h1,h2", "y");
        if (!strcmp(binary[k], "Concat"))
            tb_attr_int(b, "axis", 1);
        tb_output(b, "y");
        assert_int_equal(tape_saved(b), 2 * H);
    }
    b = tape_mlp(2);
    tb_node(b, "Add", "op", "h1,h2", "y");
    tb_output(b, "y");
    assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), 0);
    b = tape_mlp(2);
    tb_node(b, "Concat", "op", "h1,h2", "y");
    tb_attr_int(b, "axis", 1);
    tb_output(b, "y");
    assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), 0);
    /* tf.function prunes _AddGrad to shapes: nothing kept (PyTorch's rule) */
    b = tape_mlp(2);
    tb_node(b, "Add", "op", "h1,h2", "y");
    tb_output(b, "y");
    assert_int_equal(saved_bytes(b, DNNMEM_FW_TENSORFLOW, DNNMEM_TF_GRAPH), 0);
    /* BiasAdd (an Add the Keras front end marks: Dense's bias): nothing;
     * the same Add as AddV2 holds h1 (the bias is a weight) */
    for (int bias_add = 0; bias_add <= 1; bias_add++) {
        b = tape_mlp(1);
        tb_init(b, "bias", F32, 1, (int64_t[]){256});
        tb_node(b, "Add", "op", "bias,h1", "y");
        if (bias_add)
            tb_attr_int(b, "tf_bias_add", 1);
        tb_output(b, "y");
        assert_int_equal(tape_saved(b), bias_add ? 0 : H);
    }
    /* Keras' merge layers fold pairwise: Add of 3 (AddV2 twice) holds the 3
     * inputs and the partial sum; Average of 2 (AddV2, RealDiv) the 2 inputs
     * and their sum */
    b = tape_mlp(3);
    tb_node(b, "Sum", "op", "h1,h2,h3", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), 4 * H);
    b = tape_mlp(2);
    tb_node(b, "Mean", "op", "h1,h2", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), 3 * H);
    /* Neg, Transpose: nothing. Reshape: its input (the output's buffer too) */
    b = tape_mlp(1);
    tb_node(b, "Neg", "op", "h1", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), 0);
    b = tape_mlp(1);
    tb_node(b, "Transpose", "op", "h1", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), 0);
    b = tape_mlp(1);
    tb_init_i64(b, "shape", 3, (int64_t[]){4, 16, 16});
    tb_node(b, "Reshape", "op", "h1,shape", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), H);
    /* tf.nn.gelu's chain: the input and 4 intermediates (exact), 6 (tanh) */
    for (int tanh = 0; tanh <= 1; tanh++) {
        b = tape_mlp(1);
        tb_node(b, "Gelu", "op", "h1", "y");
        if (tanh)
            tb_attr_str(b, "approximate", "tanh");
        tb_output(b, "y");
        assert_int_equal(tape_saved(b), (tanh ? 7 : 5) * H);
    }
    /* tf.nn.dropout: x (the first Mul's), x * scale and the float mask */
    b = tape_mlp(1);
    tb_scalar_f32(b, "ratio", 0.5f);
    tb_node(b, "Dropout", "op", "h1,ratio", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), 3 * H);
    /* Clip to [0, 6] is Relu6: its output; to [-1, 1] clip_by_value:
     * minimum(x, 1) holds x and 1, maximum(., -1) that result */
    for (int relu6 = 0; relu6 <= 1; relu6++) {
        b = tape_mlp(1);
        tb_scalar_f32(b, "lo", relu6 ? 0.0f : -1.0f);
        tb_scalar_f32(b, "hi", relu6 ? 6.0f : 1.0f);
        tb_node(b, "Clip", "op", "h1,lo,hi", "y");
        tb_output(b, "y");
        assert_int_equal(tape_saved(b), (relu6 ? 1 : 2) * H);
    }
    /* 4-D, h1 [4, 4, 8, 8] (4,096 B). MaxPool 2x2: input and output
     * ([4, 4, 4, 4], 1,024 B); PyTorch keeps int64 indices (2,048 B) instead
     * of the output. GlobalAveragePool (Mean): input and output (64 B).
     * Pad (ZeroPadding2D): its input; PyTorch's nothing. */
    b = tape_cnn();
    tb_node(b, "MaxPool", "op", "h1", "y");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){2, 2});
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), H + 1024);
    b = tape_cnn();
    tb_node(b, "MaxPool", "op", "h1", "y");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){2, 2});
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), H + 2048);
    b = tape_cnn();
    tb_node(b, "GlobalAveragePool", "op", "h1", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), H + 64);
    b = tape_cnn();
    tb_init_i64(b, "pads", 8, (int64_t[]){0, 0, 1, 1, 0, 0, 1, 1});
    tb_node(b, "Pad", "op", "h1,pads", "y");
    tb_output(b, "y");
    assert_int_equal(tape_saved(b), H);
    b = tape_cnn();
    tb_init_i64(b, "pads", 8, (int64_t[]){0, 0, 1, 1, 0, 0, 1, 1});
    tb_node(b, "Pad", "op", "h1,pads", "y");
    tb_output(b, "y");
    assert_int_equal(saved_bytes(b, DNNMEM_FW_PYTORCH, DNNMEM_TF_EAGER), 0);
}

/* ---- TensorFlow under tf.function: buffer forwarding in the backward -------
 * (src/train/train.c, tf_grad_target). The graphs above with the op's output
 * through a Relu (whose dx, made from the loss's expanded scalar grad, is a
 * full [4, 256] buffer nothing else holds: the op's dy). Measured: the bytes
 * requested and live at the op's backward step of step 2 (where the step's
 * allocations peak; a step that allocates nothing shows where it ends), W's
 * 262,144 B each and x's 4,096 B included; the op's grads are [4, 256]
 * float32 (4,096 B) and the graph keeps what PyTorch's rule keeps (Mul, Div:
 * both operands) but for Clip (below). */

static uint64_t point_bytes(const struct dnnmem_timeline_point *p)
{
    uint64_t v = 0;
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        v += p->category_bytes[c];
    return v;
}

/* At `node`'s backward step; `*before`, when given: at the Relu's (the step
 * before), which a step with no allocation and no free repeats. */
static uint64_t graph_backward_bytes(struct tb *b, const char *node, uint64_t *before)
{
    struct dnnmem_result *r = tf_train(b, DNNMEM_FW_TENSORFLOW, DNNMEM_TF_GRAPH);
    uint64_t v = point_bytes(last_point(r, "backward", node));
    if (before)
        *before = point_bytes(last_point(r, "backward", "relu"));
    dnnmem_result_free(r);
    return v;
}

static struct tb *through_relu(struct tb *b, const char *op, const char *ins)
{
    tb_node(b, op, "op", ins, "y");
    tb_node(b, "Relu", "relu", "y", "z");
    tb_output(b, "z");
    return b;
}

static void test_tf_graph_grad_forwarding(void **state)
{
    (void)state;
    const uint64_t H = 4096, W = 262144, X = 4096;
    struct tb *b;
    /* Mul(h1, h2): x's grad mul(dy, h2) takes h2's buffer (kept for this
     * node alone, read by no later grad), y's grad mul(dy, h1) takes dy's
     * (its last reader): nothing allocated, and the step ends with W1, W2,
     * x and the two grads (h1 freed). Without forwarding it would peak at
     * h1, h2, dy and two new grads: 5 x 4,096. */
    b = through_relu(tape_mlp(2), "Mul", "h1,h2");
    assert_int_equal(graph_backward_bytes(b, "op", NULL), 2 * W + X + 2 * H);
    /* Div(h1, h2): x's grad realdiv(dy, h2) can take neither dy nor h2 (y's
     * grad reads both next): one new buffer; y's takes dy's. */
    b = through_relu(tape_mlp(2), "Div", "h1,h2");
    assert_int_equal(graph_backward_bytes(b, "op", NULL), 2 * W + X + 4 * H);
    /* Sub(h1, h2): x's grad is dy itself, so y's -dy (a Neg) cannot take
     * it: one new buffer beside dy (Sub keeps nothing). Sub(x, h2), x
     * needing no grad: -dy takes dy's buffer, and the step neither allocates
     * nor frees: it repeats the Relu's peak (z kept, its dx, the loss's 4 B
     * grad). */
    b = through_relu(tape_mlp(2), "Sub", "h1,h2");
    assert_int_equal(graph_backward_bytes(b, "op", NULL), 2 * W + X + 2 * H);
    uint64_t relu_step = 0;
    b = through_relu(tape_mlp(2), "Sub", "x,h2");
    assert_int_equal(graph_backward_bytes(b, "op", &relu_step), 2 * W + X + 2 * H + 4);
    assert_int_equal(relu_step, 2 * W + X + 2 * H + 4);
    /* Clip to [0, 6] (Relu6): the graph keeps its output, Relu6Grad writes
     * dx into dy: nothing allocated, the step ends with W1, x, dx. Clip to [-1, 1] (clip_by_value): the graph
     * keeps x and minimum(x, 1); the select takes dy's buffer, beside the
     * zeros (4,096 B) and the bool mask (1,024 B) of the grad. */
    for (int relu6 = 0; relu6 <= 1; relu6++) {
        b = tape_mlp(1);
        tb_scalar_f32(b, "lo", relu6 ? 0.0f : -1.0f);
        tb_scalar_f32(b, "hi", relu6 ? 6.0f : 1.0f);
        through_relu(b, "Clip", "h1,lo,hi");
        assert_int_equal(graph_backward_bytes(b, "op", NULL),
                         relu6 ? W + X + H : W + X + 4 * H + 1024);
    }
}

/* A chain a -> b -> c -> d of 1 MiB tensors frees each input after use:
 * at most two activations plus the input are live. */
static void test_chain_frees_dead_tensors(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,1024");
    tb_node(b, "Relu", "r1", "x", "a");
    tb_node(b, "Sigmoid", "r2", "a", "b");
    tb_node(b, "Tanh", "r3", "b", "c");
    tb_node(b, "Relu", "r4", "c", "d");
    tb_output(b, "d");
    struct dnnmem_result *r = estimate(b, 256, NULL, 0);
    assert_int_equal(r->peak_allocated, 3 * (1 << 20));
    assert_int_equal(r->category_bytes[DNNMEM_CAT_ACTIVATION], 2 * (1 << 20));
    assert_string_equal(r->peak_node, "r2"); /* first time three are live */
    dnnmem_result_free(r);
}

/* Autocast (amp-fp16) on the small MLP, batch 2: MatMul is on the fp16 list,
 * so x[2,3] (24 B fp32) is cast to a fresh fp16 copy (12 B) and W[3,4] to a
 * cached one (24 B); h[2,4] is fp16 (16 B); Relu follows its input's type and
 * runs in place on h. Activations at the peak: 12 + 24 + 16 = 52 B; blocks:
 * x, W, the two casts and h at 512 B each, plus the cuBLAS workspace. */
static void test_autocast_by_hand(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = 2;
    cfg.precision = DNNMEM_PRECISION_AMP_FP16;
    struct dnnmem_result *r = estimate_cfg(tb_small_mlp(), &cfg);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_ACTIVATION], 52);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], 48);
    assert_int_equal(r->peak_allocated, 5 * 512 + 8519680);
    dnnmem_result_free(r);
}

/* The type of the log-probabilities cross_entropy keeps, from a result's
 * tensors live at the peak; 0 when they are not live there. */
static uint64_t log_softmax_at_peak(const struct dnnmem_result *r, const char **dtype)
{
    for (size_t i = 0; i < r->n_live; i++)
        if (strcmp(r->live[i].name, "loss.log_softmax") == 0) {
            *dtype = r->live[i].dtype;
            return r->live[i].bytes;
        }
    return 0;
}

/* The loss in pure bf16 (model.to(torch.bfloat16)) stays bf16: F.cross_entropy
 * runs log_softmax in its input's type. Under autocast it is on the fp32
 * list: the log-probabilities are fp32. x[64,16] @ W[16,65536] -> y: the
 * logits (4 Mi elements) dwarf everything else, so the peak is in the loss's
 * backward, with the log-probabilities, their grad and the logits' grad live. */
static void test_loss_dtype(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    for (int amp = 0; amp < 2; amp++) {
        struct tb *b = tb_new(13);
        tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "batch,16");
        tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){16, 65536});
        tb_node(b, "MatMul", "mm", "x,W", "y");
        tb_output(b, "y");
        dnnmem_config_init(&cfg);
        cfg.mode = DNNMEM_MODE_TRAIN;
        cfg.optimizer = DNNMEM_OPT_SGD;
        cfg.batch_size = 64;
        cfg.n_top_tensors = 100;
        cfg.precision = amp ? DNNMEM_PRECISION_AMP_BF16 : DNNMEM_PRECISION_BF16;
        struct dnnmem_result *r = estimate_cfg(b, &cfg);
        const char *dtype = "";
        assert_int_equal(log_softmax_at_peak(r, &dtype), (uint64_t)64 * 65536 * (amp ? 4 : 2));
        assert_string_equal(dtype, amp ? "float32" : "bfloat16");
        assert_string_equal(r->peak_phase, "backward");
        dnnmem_result_free(r);
    }
}

/* loss = y.sum() on CUDA: SumBackward's grad is an expanded scalar, and the
 * matmul's backward clones it into a dense [64, 65536] fp32 matrix before
 * cuBLAS reads it (4 MiB at the peak, with W's grad, 4 MiB); on the CPU it
 * does not. */
static void test_sum_grad_dense_for_cublas(void **state)
{
    (void)state;
    for (int cuda = 0; cuda < 2; cuda++) {
        struct tb *b = tb_new(13);
        tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "batch,16");
        tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){16, 65536});
        tb_node(b, "MatMul", "mm", "x,W", "y");
        tb_output(b, "y");
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.mode = DNNMEM_MODE_TRAIN;
        cfg.optimizer = DNNMEM_OPT_NONE;
        cfg.loss = DNNMEM_LOSS_SUM;
        cfg.batch_size = 64;
        cfg.n_top_tensors = 100;
        cfg.device = cuda ? DNNMEM_DEVICE_CUDA : DNNMEM_DEVICE_CPU;
        struct dnnmem_result *r = estimate_cfg(b, &cfg);
        const struct dnnmem_tensor_info *dense = live_named(r, "y.grad (contiguous)");
        assert_int_equal(dense ? dense->bytes : 0, cuda ? (uint64_t)64 * 65536 * 4 : 0);
        dnnmem_result_free(r);
    }
}

/* h = x W1, y = h W2 trained on CUDA with loss = y.sum() (no optimizer, one
 * step): y's grad is SumBackward's expanded scalar, so each mm of y's
 * MatMulBackward clones it contiguous after making its own result and frees
 * it when it returns (H200 allocator traces of ALBERT and DistilBERT,
 * PyTorch 2.11, there through addmm: grad_input, clone, free; grad_weight,
 * clone, free). A bias-free mm makes mat2's grad first (derivatives.yaml's
 * names sorted): W2's grad, clone, free; h's grad, clone, free. With
 * B = 64, W2 [16, 196608] fp32 (12 MiB) and y [64, 196608] (48 MiB), by the
 * caching allocator's rules:
 *   forward: a 2 MiB small segment (x, W1, h, the loss); W2's 12 MiB
 *     segment (>= 10 MiB: rounded to 2 MiB); the main thread's cuBLAS
 *     workspace (8 MiB + 128 KiB at compute capability 8.0) in a 20 MiB
 *     segment, 11.875 MiB left free; y, a 48 MiB segment;
 *   backward: the autograd thread's workspace takes the front of that
 *     11.875 MiB block (3.75 MiB left); W2's grad (12 MiB) fits no free
 *     block: a 12 MiB segment; clone 1, a new 48 MiB segment, is freed; h's
 *     grad is small (the small pool); clone 2 takes clone 1's block.
 * Reserved: 2 + 12 + 20 + 48 + 12 + 48 = 142 MiB. (Made in the other order,
 * as an addmm does, W2's grad would split clone 1's freed block and clone 2
 * need a third 48 MiB segment: 178 MiB.) */
static void test_sum_grad_clone_per_mm(void **state)
{
    (void)state;
    struct tb *b = two_matmuls(196608);
    struct dnnmem_config cfg = sum_step(64);
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    assert_int_equal(r->peak_reserved, (uint64_t)142 << 20);
    dnnmem_result_free(r);

    /* the order itself: grad, clone made and freed, grad, clone made and freed */
    b = two_matmuls(196608);
    struct dm_run run = {.train = true, .cuda = true, .inplace = true, .torch_version = 206,
                         .iterations = 1, .grad_accum = 1, .optimizer = DNNMEM_OPT_NONE,
                         .loss = DNNMEM_LOSS_SUM, .compute_capability = 80};
    struct sched x;
    schedule_of(b, 64, &run, &x);
    static const char *const whats[] = {"grad", "grad (contiguous)"};
    char ev[64];
    events_of(&x, whats, 2, ev, sizeof ev);
    /* y's backward: W2.grad, clone made and freed, h.grad, clone made and
     * freed; then mm1's W1.grad (h's grad is dense: no clone), after which
     * h's grad goes (the parameters' stay) */
    assert_string_equal(ev, "ABbABbAa");
    schedule_done(&x);
}

/* setReduceConfig's split of a sum over rows across blocks (Reduce.cuh),
 * worked by hand for [2048, 768] fp16 on an H200 (cc 9.0: 132 SMs, 2048
 * threads each): outputs vectorized by 4 (768 % 4 == 0), so 128 threads a
 * block: 32 wide, 4 high; 2048 rows >= min(4 x 16, 256): split across the 4
 * warps, 512 a thread; grid 768 / 4 / 32 = 6 columns, target 132 x 2048 /
 * 128 = 2112 blocks; blocks per output max(min(ceil(2112 / 6) = 352,
 * 512 / 16 = 32), 512 / 256 = 2) = 32: buffer 4 x 768 x 32 x 32 x 4 =
 * 12582912 B, semaphores 4 x 6 = 24 B, as the ALBERT trace shows; 3072
 * outputs: 24 columns, 50331648 and 96 B; 128: one column, 2097152 and 4 B.
 * An expanded [2048, 30000] (loss = logits.sum()): no vectorization, 512
 * threads (32 x 16), 938 columns > 132 x 4: no split, nothing allocated. */
static void test_cuda_sum_rows_buffers(void **state)
{
    (void)state;
    uint64_t buf, sem;
    dm_cuda_sum_rows_buffers(2048, 768, false, 90, &buf, &sem);
    assert_int_equal(buf, 12582912);
    assert_int_equal(sem, 24);
    dm_cuda_sum_rows_buffers(2048, 3072, false, 90, &buf, &sem);
    assert_int_equal(buf, 50331648);
    assert_int_equal(sem, 96);
    dm_cuda_sum_rows_buffers(2048, 128, false, 90, &buf, &sem);
    assert_int_equal(buf, 2097152);
    assert_int_equal(sem, 4);
    dm_cuda_sum_rows_buffers(2048, 30000, true, 90, &buf, &sem);
    assert_int_equal(buf, 0);
    assert_int_equal(sem, 0);
    /* few rows a thread (64 rows: 16 a warp < 256): no split */
    dm_cuda_sum_rows_buffers(64, 768, false, 90, &buf, &sem);
    assert_int_equal(buf, 0);
}

/* nn.Linear with a bias on 2-D input is one addmm: AddmmBackward0 makes
 * mat1's grad, then mat2's (the weight's, through TBackward), and the
 * engine sums the grad to the bias last (validate_outputs' sum_to), with
 * the sum's staging buffer and semaphores made and freed around it; a
 * bias-free matmul's mm makes mat2's grad before self's (derivatives.yaml
 * names sorted). relu(relu(x W1^T + b) W2): h = relu(.) [2048, 768] fp32.
 * Backward: r2's grad (dense), mm2 (no bias): W2's grad, then h's; r1's
 * grad; then addmm1: x has none, W1^T's (named W1: its .grad), then b's,
 * buffer, semaphores. */
static void test_addmm_bias_grad_order(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,768");
    tb_init(b, "W1", F32, 2, (int64_t[]){768, 768});
    tb_init(b, "b1", F32, 1, (int64_t[]){768});
    tb_init(b, "W2", F32, 2, (int64_t[]){768, 4});
    tb_node(b, "Transpose", "t1", "W1", "W1t");
    tb_attr_ints(b, "perm", 2, (int64_t[]){1, 0});
    tb_node(b, "MatMul", "mm1", "x,W1t", "z1");
    tb_node(b, "Add", "add1", "z1,b1", "a1");
    tb_node(b, "Relu", "r1", "a1", "h");
    tb_node(b, "MatMul", "mm2", "h,W2", "z2");
    tb_node(b, "Relu", "r2", "z2", "y");
    tb_output(b, "y");
    struct dm_run run = {.train = true, .cuda = true, .inplace = true, .torch_version = 211,
                         .iterations = 1, .grad_accum = 1, .optimizer = DNNMEM_OPT_NONE,
                         .loss = DNNMEM_LOSS_SUM, .compute_capability = 90};
    struct sched x;
    schedule_of(b, 2048, &run, &x);
    const struct dm_graph *g = dm_model_graph(x.m);
    char seq[256];
    size_t n = 0;
    for (size_t e = 0; e < x.s.n_ev && n + 12 < sizeof seq; e++) {
        const struct dm_buffer *bf = &x.s.buf[x.s.ev[e].buf];
        if (x.s.ev[e].kind != DM_EV_ALLOC || !bf->what)
            continue;
        const char *w = bf->what;
        const char *tn = bf->tensor >= 0 ? g->tensors[bf->tensor].name : "?";
        if (strcmp(w, "grad") == 0)
            n += (size_t)snprintf(seq + n, sizeof seq - n, "%s ", tn);
        else if (strcmp(w, "sum: global reduce buffer") == 0)
            n += (size_t)snprintf(seq + n, sizeof seq - n, "buf%llu ",
                                  (unsigned long long)bf->bytes);
        else if (strcmp(w, "sum: semaphores") == 0)
            n += (size_t)snprintf(seq + n, sizeof seq - n, "sem%llu ",
                                  (unsigned long long)bf->bytes);
    }
    seq[n] = 0;
    assert_string_equal(seq, "z2 W2 h a1 W1 b1 buf12582912 sem24 ");
    schedule_done(&x);
}

/* softmax_backward_cuda_out computes grad * output into a temporary before
 * its kernel (aten/src/ATen/native/cuda/SoftMax.cu): p = softmax(x W) with
 * loss = p.sum(), B 64, p [64, 65536] fp32 (16 MiB). On CUDA the softmax's
 * backward holds its output (kept), its result and the temporary: three
 * 16 MiB buffers, the temporary live at the peak; the CPU kernel has none. */
static void test_softmax_backward_temporary(void **state)
{
    (void)state;
    for (int cuda = 0; cuda < 2; cuda++) {
        struct tb *b = tb_new(13);
        tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "batch,16");
        tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){16, 65536});
        tb_node(b, "MatMul", "mm", "x,W", "z");
        tb_node(b, "Softmax", "sm", "z", "p");
        tb_attr_int(b, "axis", -1);
        tb_output(b, "p");
        struct dnnmem_config cfg = sum_step(64);
        cfg.n_top_tensors = 100;
        cfg.device = cuda ? DNNMEM_DEVICE_CUDA : DNNMEM_DEVICE_CPU;
        struct dnnmem_result *r = estimate_cfg(b, &cfg);
        const struct dnnmem_tensor_info *tmp = live_named(r, "p.grad * output");
        assert_int_equal(tmp ? tmp->bytes : 0, cuda ? (uint64_t)64 * 65536 * 4 : 0);
        assert_string_equal(r->peak_phase, "backward");
        dnnmem_result_free(r);
    }
}

/* The CPU BatchNorm backward makes grad_input twice and lets the first go
 * (batch_norm_backward_cpu_template's contiguous path). y = relu(bn(x W)),
 * loss y.sum(), B 64, z = x W [64, 65536] fp32 (16 MiB): ReluBackward's
 * result is a dense grad, so on the CPU the BN backward holds, besides its
 * kept input z and that grad, its result and the first grad_input: the
 * temporary is live at the peak; on CUDA there is none. With the loss on
 * the BatchNorm itself, its output grad is sum's expanded scalar and the
 * kernel takes the strided path: one block. */
static void test_cpu_batchnorm_backward_twice(void **state)
{
    (void)state;
    for (int v = 0; v < 3; v++) { /* CPU, CUDA, CPU without the ReLU */
        struct tb *b = tb_new(13);
        tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "batch,16");
        tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){16, 65536});
        static const char *const stats[] = {"scale", "bias", "mean", "var"};
        for (int k = 0; k < 4; k++)
            tb_init(b, stats[k], ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){65536});
        tb_node(b, "MatMul", "mm", "x,W", "z");
        tb_node(b, "BatchNormalization", "bn", "z,scale,bias,mean,var", v == 2 ? "y" : "n");
        if (v != 2)
            tb_node(b, "Relu", "relu", "n", "y");
        tb_output(b, "y");
        struct dnnmem_config cfg = sum_step(64);
        cfg.n_top_tensors = 100;
        cfg.device = v == 1 ? DNNMEM_DEVICE_CUDA : DNNMEM_DEVICE_CPU;
        struct dnnmem_result *r = estimate_cfg(b, &cfg);
        const struct dnnmem_tensor_info *tmp =
            live_named(r, v == 2 ? "y.grad_input (first empty_like)" : "n.grad_input (first empty_like)");
        assert_int_equal(tmp ? tmp->bytes : 0, v == 0 ? (uint64_t)64 * 65536 * 4 : 0);
        dnnmem_result_free(r);
    }
}

/* y = relu(x W) in inference, B 64, z = x W [64, 65536] fp32 (16 MiB):
 * PyTorch's default runs the ReLU in place (as torchvision's inplace=True),
 * so --inplace none costs one more 16 MiB buffer at the ReLU; eager
 * TensorFlow never forwards a Keras layer's input (ExecuteNodeArgs protects
 * an input the caller holds), so its default equals --inplace none. */
static void test_tf_eager_not_inplace(void **state)
{
    (void)state;
    uint64_t peak[2][2];
    for (int tf = 0; tf < 2; tf++)
        for (int none = 0; none < 2; none++) {
            struct tb *b = tb_new(13);
            tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "batch,16");
            tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){16, 65536});
            tb_node(b, "MatMul", "mm", "x,W", "z");
            tb_node(b, "Relu", "relu", "z", "y");
            tb_output(b, "y");
            struct dnnmem_config cfg;
            dnnmem_config_init(&cfg);
            cfg.batch_size = 64;
            cfg.inplace = none ? DNNMEM_INPLACE_NONE : DNNMEM_INPLACE_AUTO;
            if (tf) {
                cfg.framework = DNNMEM_FW_TENSORFLOW;
                cfg.tf_execution = DNNMEM_TF_EAGER;
            }
            struct dnnmem_result *r = estimate_cfg(b, &cfg);
            peak[tf][none] = r->peak_requested;
            dnnmem_result_free(r);
        }
    assert_int_equal(peak[0][1] - peak[0][0], (uint64_t)64 * 65536 * 4);
    assert_int_equal(peak[1][1], peak[1][0]);
}

/* Adam's foreach step on CUDA: torch._foreach_sqrt(exp_avg_sqs) returns one
 * list, a local of _multi_tensor_adam, which CPython's list_dealloc empties
 * from the last item to the first when the function returns: the last
 * parameter's temporary is freed first (H200 allocator trace of
 * Llama-3.2-1B, PyTorch 2.11: the frees run down the layers and end with
 * embed_tokens'). Here W1 [16, 16] then W2 [16, 4096]: made W1, W2; freed
 * W2, W1. */
static void test_foreach_temporaries_freed_last_first(void **state)
{
    (void)state;
    struct tb *b = two_matmuls(4096);
    struct dm_run run = {.train = true, .cuda = true, .inplace = true, .torch_version = 206,
                         .iterations = 1, .grad_accum = 1, .optimizer = DNNMEM_OPT_ADAM,
                         .loss = DNNMEM_LOSS_SUM, .compute_capability = 80};
    struct sched x;
    schedule_of(b, 4, &run, &x);
    uint64_t order[4];
    int n = 0;
    for (size_t e = 0; e < x.s.n_ev && n < 4; e++) {
        const struct dm_buffer *bf = &x.s.buf[x.s.ev[e].buf];
        if (bf->what && strcmp(bf->what, "sqrt") == 0)
            order[n++] = (x.s.ev[e].kind == DM_EV_ALLOC ? 0 : 1u << 31) | bf->bytes;
    }
    assert_int_equal(n, 4);
    assert_int_equal(order[0], 16 * 16 * 4);
    assert_int_equal(order[1], 16 * 4096 * 4);
    assert_int_equal(order[2], (1u << 31) | (16 * 4096 * 4));
    assert_int_equal(order[3], (1u << 31) | (16 * 16 * 4));
    schedule_done(&x);
}

/* The for-loop optimizers on the CPU keep a parameter's last temporary in a
 * loop local (Adam's `denom`, RMSprop's `avg`, Adagrad's `std`) until the
 * next parameter's is made (torch/optim/adam.py _single_tensor_adam, 2.14.1
 * and 1.13.0; measured with the profiler on both). W1 [16, 16] then W2
 * [16, 4096]: Adam makes W1's sqrt (A) and denom (B), frees the sqrt (a),
 * makes W2's two, frees W2's sqrt and then W1's denom, and W2's at the end:
 * 1 KiB + 2 x 256 KiB live at once. RMSprop's one sqrt: W2's made before
 * W1's is freed. */
static void test_loop_local_temporary_held(void **state)
{
    (void)state;
    static const char *const adam_whats[] = {"sqrt", "denom"};
    for (int v = 0; v < 3; v++) {
        static const enum dnnmem_optimizer opts[] = {DNNMEM_OPT_ADAM, DNNMEM_OPT_RMSPROP,
                                                     DNNMEM_OPT_ADAGRAD};
        struct dm_run run = {.train = true, .inplace = true, .torch_version = 214,
                             .iterations = 1, .grad_accum = 1, .optimizer = opts[v],
                             .loss = DNNMEM_LOSS_SUM};
        struct sched x;
        schedule_of(two_matmuls(4096), 4, &run, &x);
        char ev[32];
        events_of(&x, adam_whats, v == 0 ? 2 : 1, ev, sizeof ev);
        assert_string_equal(ev, v == 0 ? "ABaABabb" : "AAaa");
        uint64_t live = 0, most = 0;
        for (size_t e = 0; e < x.s.n_ev; e++) {
            const struct dm_buffer *bf = &x.s.buf[x.s.ev[e].buf];
            if (bf->category != DNNMEM_CAT_TEMPORARY || !bf->what ||
                (strcmp(bf->what, "sqrt") != 0 && strcmp(bf->what, "denom") != 0))
                continue;
            live = x.s.ev[e].kind == DM_EV_ALLOC ? live + bf->bytes : live - bf->bytes;
            most = live > most ? live : most;
        }
        assert_int_equal(most, v == 0 ? 16 * 16 * 4 + 2 * 16 * 4096 * 4
                                       : 16 * 16 * 4 + 16 * 4096 * 4);
        schedule_done(&x);
    }
}

/* A weight read twice, y = (x W) W, trained with two micro-batches on the
 * CPU (exact bytes): in the second backward .grad exists, so the engine
 * holds the first of W's two grads until the second arrives and adds their
 * sum into .grad: W, .grad and both grads (4 MiB each) are live at once,
 * 16 MiB plus the small activations; adding each grad into .grad at once
 * would peak at 12 MiB. */
static void test_tied_weight_input_buffer(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "batch,1024");
    tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){1024, 1024});
    tb_node(b, "MatMul", "mm1", "x,W", "h");
    tb_node(b, "MatMul", "mm2", "h,W", "y");
    tb_output(b, "y");
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_SGD;
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.grad_accum = 2;
    cfg.batch_size = 1;
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    assert_true(r->peak_allocated >= 16 * (1 << 20));
    assert_true(r->peak_allocated < 16 * (1 << 20) + 64 * 1024);
    assert_string_equal(r->peak_phase, "backward");
    dnnmem_result_free(r);
}

/* In-place activations: Relu writes into its input when nothing else holds
 * it (torchvision's inplace=True). x (1 MiB) -> Sigmoid -> a -> Relu -> y:
 * in place, y shares a's block: peak x + a = 2 MiB; without, x + a + y. */
static struct tb *sigmoid_relu(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,1024");
    tb_node(b, "Sigmoid", "sig", "x", "a");
    tb_node(b, "Relu", "relu", "a", "y");
    tb_output(b, "y");
    return b;
}

static void test_inplace_relu(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg); /* inplace auto is the default */
    cfg.batch_size = 256;
    struct dnnmem_result *r = estimate_cfg(sigmoid_relu(), &cfg);
    assert_int_equal(r->peak_allocated, 2 * (1 << 20));
    dnnmem_result_free(r);
    cfg.inplace = DNNMEM_INPLACE_NONE;
    r = estimate_cfg(sigmoid_relu(), &cfg);
    assert_int_equal(r->peak_allocated, 3 * (1 << 20));
    dnnmem_result_free(r);
}

/* Weights made by ConstantOfShape (ONNX's "light" zoo models) are weights:
 * a [16,3,3,3] conv weight = 1728 B. */
static void test_constant_of_shape_weights(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,3,8,8");
    tb_init_i64(b, "wshape", 4, (int64_t[]){16, 3, 3, 3});
    tb_node(b, "ConstantOfShape", "mkw", "wshape", "w");
    tb_node(b, "Conv", "conv", "x,w", "y");
    tb_output(b, "y");
    struct dnnmem_result *r = estimate(b, 1, NULL, 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], 1728);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_ACTIVATION], 16 * 6 * 6 * 4);
    dnnmem_result_free(r);
}

static void test_binding_errors(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "ids", I64, "batch,seq");
    tb_node(b, "Relu", "r", "ids", "y");
    tb_output(b, "y");
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    struct dnnmem_result *r = NULL;
    /* seq has no default */
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_UNBOUND);
    assert_msg_has(err, "dim 'seq' (axis 1 of input 'ids') is not bound");
    /* an unknown --dim names the dims the model has */
    struct dnnmem_dim_binding bad = {"sequence", 5};
    cfg.dims = &bad;
    cfg.n_dims = 1;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_USAGE);
    assert_msg_has(err, "it has: batch, seq");
    /* --seq-len binds seq; batch defaults to 1 */
    cfg.n_dims = 0;
    cfg.seq_len = 7;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_INPUT], 56);
    bool saw_default = false;
    for (size_t k = 0; k < r->n_assumptions; k++)
        if (strcmp(r->assumptions[k].key, "dims.batch") == 0)
            saw_default = strcmp(r->assumptions[k].source, "default") == 0;
    assert_true(saw_default);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
    tb_free(b);

    /* --batch-size on a model without a symbolic batch dim is an error */
    b = tb_new(13);
    tb_input(b, "x", F32, "1,3");
    tb_node(b, "Relu", "r", "x", "y");
    tb_output(b, "y");
    dnnmem_config_init(&cfg);
    cfg.batch_size = 8;
    expect_estimate_error(b, &cfg, DNNMEM_E_USAGE, "--batch-size");
}

/* Shape errors name the node. */
static void test_shape_error_names_node(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,3");
    tb_init(b, "W", F32, 2, (int64_t[]){5, 4});
    tb_node(b, "MatMul", "proj", "x,W", "y");
    tb_output(b, "y");
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    expect_estimate_error(b, &cfg, DNNMEM_E_SHAPE, "node 'proj' (MatMul)");
}

/* A declared output shape that disagrees with inference is an error naming
 * the tensor: the model is inconsistent, or dnnmem is wrong; neither is
 * silently ignored. */
static void test_declared_shape_checked(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,3");
    tb_init(b, "W", F32, 2, (int64_t[]){3, 4});
    tb_node(b, "MatMul", "mm", "x,W", "y");
    Onnx__ValueInfoProto *vi = tb_value_info(b, "y", F32, "batch,5");
    TB_PUSH(b, &b->g.output, &b->g.n_output, vi);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = 2;
    expect_estimate_error(b, &cfg, DNNMEM_E_SHAPE,
                          "'y' is declared float32[2,5] (-1: any) but infers as float32[2,4]");
}

/* Training through an op without a backward rule is an error naming it,
 * never a guess. */
static void test_train_unmodelled_op(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,3,3");
    tb_init(b, "W", F32, 2, (int64_t[]){3, 3});
    tb_node(b, "MatMul", "mm", "x,W", "h");
    tb_node(b, "Det", "det", "h", "y");
    tb_output(b, "y");
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    expect_estimate_error(b, &cfg, DNNMEM_E_UNSUPPORTED,
                          "node 'det': training through Det is not modelled yet");
}

/* The weights figure of each fixture equals the bytes of the PyTorch model's
 * parameters and buffers (tools/export_fixtures.py recorded them). */
static void test_fixture_weights_match_pytorch(void **state)
{
    (void)state;
    static const char *const names[] = {"resnet50", "vgg16",        "inception_v3",
                                        "lstm_lm",  "bert_encoder", "bert_large_encoder"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        char path[256];
        snprintf(path, sizeof path, "tests/models/fixtures/%s.json", names[k]);
        json_error_t je;
        json_t *meta = json_load_file(path, 0, &je);
        if (!meta)
            fail_msg("%s: %s", path, je.text);
        json_int_t params = json_integer_value(json_object_get(meta, "param_bytes"));
        json_int_t buffers = json_integer_value(json_object_get(meta, "buffer_bytes"));
        assert_true(params > 0);
        snprintf(path, sizeof path, "tests/models/fixtures/%s.onnx", names[k]);
        dnnmem_model *m;
        struct dnnmem_error err;
        if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK)
            fail_msg("%s", err.message);
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.batch_size = 2;
        if (strstr(names[k], "lstm") || strstr(names[k], "bert"))
            cfg.seq_len = 16;
        struct dnnmem_result *r;
        if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
            fail_msg("%s", err.message);
        if (r->category_bytes[DNNMEM_CAT_WEIGHT] != (uint64_t)(params + buffers))
            fail_msg("%s: weights %llu, PyTorch params+buffers %lld", names[k],
                     (unsigned long long)r->category_bytes[DNNMEM_CAT_WEIGHT],
                     (long long)(params + buffers));
        dnnmem_result_free(r);
        dnnmem_model_free(m);
        json_decref(meta);
    }
}

/* Activation checkpointing of BERT's layers: one segment per layer keeps
 * least, grouping 2 or 4 layers per segment keeps more, one segment of all
 * 12 layers recomputes everything at once and keeps as much as no
 * checkpointing. Host-side nodes between a layer's nodes do not split it. */
static void test_checkpoint_grouping(void **state)
{
    (void)state;
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load("tests/models/fixtures/bert_encoder.onnx", &m, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    static const char *const specs[] = {"/layers.*", "/layers.*:2", "/layers.*:4", "/layers.*:12"};
    uint64_t saved[5];
    for (int k = 0; k < 5; k++) {
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.mode = DNNMEM_MODE_TRAIN;
        cfg.batch_size = 16;
        cfg.seq_len = 512;
        if (k < 4) {
            cfg.checkpoint = &specs[k];
            cfg.n_checkpoint = 1;
        }
        struct dnnmem_result *r;
        if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
            fail_msg("%s", err.message);
        saved[k] = r->category_bytes[DNNMEM_CAT_SAVED];
        dnnmem_result_free(r);
    }
    assert_true(saved[0] < saved[1]);
    assert_true(saved[1] < saved[2]);
    assert_true(saved[2] < saved[3]);
    assert_true(saved[3] == saved[4]);
    dnnmem_model_free(m);
}

/* ONNX's "light" zoo models make every weight with ConstantOfShape; the
 * weights figure still equals the published parameter counts x 4 B:
 * VGG-19 143,667,240 and BVLC AlexNet 60,965,224 parameters. */
static void test_light_zoo_weights(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        uint64_t params;
    } cases[] = {{"tests/models/onnx/light_vgg19.onnx", 143667240},
                 {"tests/models/onnx/light_bvlc_alexnet.onnx", 60965224}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        dnnmem_model *m;
        struct dnnmem_error err;
        if (dnnmem_model_load(cases[k].path, &m, &err) != DNNMEM_OK)
            fail_msg("%s", err.message);
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        struct dnnmem_result *r;
        if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
            fail_msg("%s", err.message);
        assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], cases[k].params * 4);
        dnnmem_result_free(r);
        dnnmem_model_free(m);
    }
}

/* Framework runtimes on view_graph(true) at batch 1000: x, c, y of 32000 B
 * each are live at the Add (no matmul, so no workspace). 32000 = 125 x 256
 * takes no BFC rounding; MXNet's Naive pool rounds it to 8 pages = 32768.
 * Context 100 MiB, device 1 GiB. */
static struct dnnmem_config fw_cfg(enum dnnmem_framework fw)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = 1000;
    cfg.inplace = DNNMEM_INPLACE_NONE;
    cfg.framework = fw;
    cfg.tf_execution = DNNMEM_TF_EAGER; /* the schedule above, without TF's buffer forwarding */
    cfg.cuda_context_bytes = 100 << 20;
    cfg.capacity_bytes = 1 << 30;
    return cfg;
}

static void test_framework_runtimes(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    assert_int_equal(cfg.framework, DNNMEM_FW_PYTORCH);
    assert_true(cfg.jax_preallocate);
    assert_true(cfg.tf_memory_limit_bytes < 0 && cfg.mxnet_reserve_percent < 0);

    /* TensorFlow, no growth: limit = (1024 - 100) MiB free - 24 MiB
     * MinSystemMemory = 900 MiB, one region of all of it; every chunk split
     * off it: in use 96000; the process takes 900 + 100 MiB */
    cfg = fw_cfg(DNNMEM_FW_TENSORFLOW);
    cfg.tf_min_system_memory_bytes = 24 << 20;
    cfg.framework_version = "2.15";
    struct dnnmem_result *r = estimate_cfg(view_graph(true), &cfg);
    assert_int_equal(r->framework, DNNMEM_FW_TENSORFLOW);
    assert_string_equal(r->framework_version, "2.15");
    assert_int_equal(r->peak_allocated, 96000);
    assert_int_equal(r->rounding_bytes, 0);
    assert_int_equal(r->needed_bytes, 96000 + (100 << 20));
    assert_int_equal(r->limit_bytes, 900 << 20);
    assert_true(r->reserved_is_limit && !r->limit_unknown);
    assert_int_equal(r->peak_reserved, 900 << 20);
    assert_int_equal(r->total_bytes, 1000 << 20);
    assert_int_equal(r->verdict, DNNMEM_VERDICT_FITS);
    assert_int_equal(r->margin_bytes, (900 << 20) - 96000);
    dnnmem_result_free(r);

    /* allow_growth: one 2 MiB region holds all three */
    cfg = fw_cfg(DNNMEM_FW_TENSORFLOW);
    cfg.tf_allow_growth = true;
    r = estimate_cfg(view_graph(true), &cfg);
    assert_false(r->reserved_is_limit);
    assert_int_equal(r->peak_reserved, 2 << 20);
    assert_int_equal(r->total_bytes, (2 << 20) + (100 << 20));
    dnnmem_result_free(r);

    /* no device: the limit is unknown; the process figure is the need */
    cfg = fw_cfg(DNNMEM_FW_TENSORFLOW);
    cfg.capacity_bytes = 0;
    r = estimate_cfg(view_graph(true), &cfg);
    assert_true(r->limit_unknown);
    assert_int_equal(r->limit_bytes, 0);
    assert_int_equal(r->total_bytes, 96000 + (100 << 20));
    assert_int_equal(r->verdict, DNNMEM_VERDICT_NONE);
    dnnmem_result_free(r);

    /* JAX with fraction 0.5: 512 MiB preallocated */
    cfg = fw_cfg(DNNMEM_FW_JAX);
    cfg.jax_mem_fraction = 0.5;
    r = estimate_cfg(view_graph(true), &cfg);
    assert_int_equal(r->limit_bytes, 512 << 20);
    assert_int_equal(r->peak_reserved, 512 << 20);
    assert_int_equal(r->total_bytes, 612 << 20);
    dnnmem_result_free(r);

    /* MXNet, the eager schedule (--mxnet-executor naive) through the Naive
     * pool: three 32768 B buffers, nothing reused before the peak */
    cfg = fw_cfg(DNNMEM_FW_MXNET);
    cfg.mxnet_executor = DNNMEM_MXNET_EXEC_NAIVE;
    r = estimate_cfg(view_graph(true), &cfg);
    assert_int_equal(r->peak_allocated, 3 * 32768);
    assert_int_equal(r->rounding_bytes, 3 * 32768 - 96000);
    assert_int_equal(r->peak_reserved, 3 * 32768);
    assert_int_equal(r->limit_bytes, 924 << 20);
    assert_int_equal(r->total_bytes, 3 * 32768 + (100 << 20));
    dnnmem_result_free(r);

    /* MXNet's planned executor (default): c (the reshape's copy, 32000 B)
     * gets storage 0; the Add's output takes it in place (elementwise
     * binary, c dies there, same size): one storage of 32000 B, in the Naive
     * pool 32768, plus the input x (32768): 65536 in use, never freed */
    cfg = fw_cfg(DNNMEM_FW_MXNET);
    r = estimate_cfg(view_graph(true), &cfg);
    assert_int_equal(r->peak_allocated, 2 * 32768);
    assert_int_equal(r->rounding_bytes, 2 * 32768 - 64000);
    assert_int_equal(r->peak_reserved, 2 * 32768);
    assert_int_equal(r->total_bytes, 2 * 32768 + (100 << 20));
    dnnmem_result_free(r);

    /* TF limit 64000 B: one region of 64000 (a multiple of 256) holds x and
     * c; y does not fit: does not fit, the peaks from the unlimited replay */
    cfg = fw_cfg(DNNMEM_FW_TENSORFLOW);
    cfg.tf_memory_limit_bytes = 64000; /* room for two of the three */
    r = estimate_cfg(view_graph(true), &cfg);
    assert_int_equal(r->verdict, DNNMEM_VERDICT_DOES_NOT_FIT);
    assert_int_equal(r->peak_allocated, 96000); /* from the unlimited replay */
    assert_int_equal(r->peak_reserved, 64000);
    assert_int_equal(r->margin_bytes, 64000 - 96000);
    dnnmem_result_free(r);

    /* bad settings */
    cfg = fw_cfg(DNNMEM_FW_MXNET);
    cfg.mxnet_pool = DNNMEM_MXNET_POOL_ROUND;
    cfg.mxnet_round_cutoff = 19;
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE, "--mxnet-round-cutoff 19");
    cfg = fw_cfg(DNNMEM_FW_MXNET);
    cfg.mxnet_executor = (enum dnnmem_mxnet_executor)7;
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE, "unknown MXNet executor 7");
    cfg = fw_cfg(DNNMEM_FW_JAX);
    cfg.framework_version = "0.4.x";
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE, "jax@0.4.x");
    cfg = fw_cfg(DNNMEM_FW_TENSORFLOW);
    cfg.capacity_bytes = 200 << 20; /* 100 MiB free < 2 GiB: MinSystemMemory 225 MiB */
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE,
                          "--framework tensorflow: the device (200.00 MiB) leaves nothing to "
                          "TensorFlow after the CUDA context (100.00 MiB) and MinSystemMemory "
                          "(225.00 MiB)");
    cfg.tf_min_system_memory_bytes = 99 << 20; /* 100 MiB free, 99 MiB left to the system */
    struct dnnmem_result *fits = estimate_cfg(view_graph(true), &cfg);
    assert_int_equal(fits->limit_bytes, 1 << 20);
    dnnmem_result_free(fits);
    cfg.tf_min_system_memory_bytes = 100 << 20; /* nothing left */
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE, "MinSystemMemory (100.00 MiB)");
    /* the runtimes' settings through the library (the CLI refuses them
     * earlier, with its own messages) */
    cfg = fw_cfg(DNNMEM_FW_TENSORFLOW);
    cfg.tf_memory_limit_bytes = 0;
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE, "--tf-memory-limit: must be positive");
    cfg = fw_cfg(DNNMEM_FW_JAX);
    cfg.jax_mem_fraction = 1.5;
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE,
                          "--jax-mem-fraction 1.5: expected a fraction in (0, 1]");
    cfg = fw_cfg(DNNMEM_FW_MXNET);
    cfg.mxnet_page_size = 48; /* not a power of two: Naive takes it, Round does not */
    fits = estimate_cfg(view_graph(true), &cfg);
    dnnmem_result_free(fits);
    cfg.mxnet_pool = DNNMEM_MXNET_POOL_ROUND;
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE,
                          "--mxnet-page-size 48: expected at least 32 (a power of two with Round)");
    cfg = fw_cfg(DNNMEM_FW_MXNET);
    cfg.mxnet_reserve_percent = 101;
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE,
                          "--mxnet-reserve 101: expected a percentage 0..100");
    cfg = fw_cfg(DNNMEM_FW_MXNET);
    cfg.capacity_bytes = 100 << 20; /* the context's size: nothing left */
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE,
                          "--framework mxnet: the device (100.00 MiB) leaves nothing after the "
                          "CUDA context (100.00 MiB)");
    /* TensorFlow on the CPU: the CPU BFC allocator of TF_CPU_ALLOCATOR_USE_BFC
     * (allow_growth, TF_CPU_BFC_MEM_LIMIT_IN_MB's 64 GiB; process_state.cc), no
     * CUDA context: what the job needs is the peak in use */
    cfg = fw_cfg(DNNMEM_FW_TENSORFLOW);
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.cuda_context_bytes = -1;
    struct dnnmem_result *cpu = estimate_cfg(view_graph(true), &cfg);
    assert_int_equal(cpu->limit_bytes, (uint64_t)1 << 36);
    assert_int_equal(cpu->context_bytes, 0);
    assert_int_equal(cpu->needed_bytes, cpu->peak_allocated);
    dnnmem_result_free(cpu);
    cfg = fw_cfg(DNNMEM_FW_JAX);
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.jax_execution = DNNMEM_JAX_EAGER;
    expect_estimate_error(view_graph(true), &cfg, DNNMEM_E_USAGE,
                          "--framework jax --jax-execution eager: on the CPU only JAX's jitted step is modelled");
}

/* THNN's im2col columns (workspace.c, thnn_columns): at one thread a 3x3
 * conv, padding 1, of x [1,20,32,32] (81920 B) with W [24,20,3,3] (17280 B)
 * and a bias (96 B) goes to Slow2d (batch 1, ungrouped, 20480 input
 * elements: not more), which makes the columns [1, 20*3*3, 32*32] float32 =
 * 737280 B before its output y [1,24,32,32] (98304 B): inference peaks at
 * 81920 + 17280 + 96 + 737280 + 98304 = 934880 B, the profiler's peak for
 * this conv (PyTorch 2.14.1, 1 thread: +737280 +98304 -737280 on 99296 B).
 * A 1x1 kernel's columns are a view of x: 81920 + 1920 + 96 + 98304. In
 * training the weight's grad makes them again, after the grads: 737280 B of
 * workspace at the conv's backward, and beside them slow_conv2d_backward's
 * copy of .sum()'s expanded grad (98304 B; measured, 2.13.0, one thread:
 * +17280 grad_weight, +98304 clone, +737280, -737280, -98304; cpuconv.c
 * thnn_grad_output_copy), none at the step after. At batch 2 the
 * conv is oneDNN's: no columns (2 * 737280 B). A 1-D conv runs as its
 * [N, C, 1, L] view: [1,16,64] with W [24,16,3], padding 1, makes columns
 * [1, 48, 64] (12288 B): 4096 + 4608 + 96 + 12288 + 6144 = 27232 B, the
 * profiler's peak too. */
static struct tb *thnn_conv(int64_t k)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,20,32,32");
    tb_init(b, "W", F32, 4, (int64_t[]){24, 20, k, k});
    tb_init(b, "B", F32, 1, (int64_t[]){24});
    tb_node(b, "Conv", "conv", "x,W,B", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){k / 2, k / 2, k / 2, k / 2});
    tb_output(b, "y");
    return b;
}

static void test_thnn_columns(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 214;
    cfg.cpu_threads = 1;
    cfg.batch_size = 1;
    struct dnnmem_result *r = estimate_cfg(thnn_conv(3), &cfg);
    assert_int_equal(r->peak_allocated, 934880);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WORKSPACE], 737280);
    dnnmem_result_free(r);
    r = estimate_cfg(thnn_conv(1), &cfg);
    assert_int_equal(r->peak_allocated, 81920 + 1920 + 96 + 98304);
    dnnmem_result_free(r);
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,16,64");
    tb_init(b, "W", F32, 3, (int64_t[]){24, 16, 3});
    tb_init(b, "B", F32, 1, (int64_t[]){24});
    tb_node(b, "Conv", "conv", "x,W,B", "y");
    tb_attr_ints(b, "pads", 2, (int64_t[]){1, 1});
    tb_output(b, "y");
    r = estimate_cfg(b, &cfg);
    assert_int_equal(r->peak_allocated, 27232);
    dnnmem_result_free(r);
    cfg.batch_size = 2;
    r = estimate_cfg(thnn_conv(3), &cfg);
    assert_true(r->category_bytes[DNNMEM_CAT_WORKSPACE] < 2 * 737280);
    dnnmem_result_free(r);
    cfg.batch_size = 1;
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_SGD;
    cfg.loss = DNNMEM_LOSS_SUM;
    cfg.iterations = 1;
    cfg.timeline = true;
    r = estimate_cfg(thnn_conv(3), &cfg);
    size_t at = r->n_timeline;
    for (size_t k = 0; k < r->n_timeline; k++)
        if (!strcmp(r->timeline[k].phase, "backward") && !strcmp(r->timeline[k].node, "conv"))
            at = k;
    assert_true(at + 1 < r->n_timeline);
    assert_int_equal(r->timeline[at].category_bytes[DNNMEM_CAT_WORKSPACE], 737280 + 98304);
    assert_int_equal(r->timeline[at + 1].category_bytes[DNNMEM_CAT_WORKSPACE], 0);
    dnnmem_result_free(r);
}

/* Reentrant checkpointing holds the segment outputs' incoming grads (`args`
 * of CheckpointFunction.backward) until the segment's backward is done
 * (measured: checkpointed ResNet-50 on the CPU, -3.1% -> -1.6%).
 * x [256] -> /pre/Mul (* W) -> h -> /seg/Sigmoid -> s -> /seg/Tanh -> t ->
 * /post/Mul (* W2) -> y, loss = y.sum(), SGD, CPU (exact bytes), PyTorch
 * 1.13, checkpoint "/seg"; every tensor 1024 B. At the recomputed sigmoid's
 * backward: x, W, W2 (3072), h (the segment's kept input), y (the output),
 * the loss (4 B), W2.grad, t.grad (held as args), t' (the recomputed output,
 * held), s' (kept by SigmoidBackward), s'.grad and h.grad: 11268 B, the
 * peak. Without the hold, t.grad would go after the tanh's backward:
 * 10244 B there. */
static void test_checkpoint_holds_incoming_grad(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "256");
    tb_init(b, "W", F32, 1, (int64_t[]){256});
    tb_init(b, "W2", F32, 1, (int64_t[]){256});
    tb_node(b, "Mul", "/pre/Mul", "x,W", "h");
    tb_node(b, "Sigmoid", "/seg/Sigmoid", "h", "s");
    tb_node(b, "Tanh", "/seg/Tanh", "s", "t");
    tb_node(b, "Mul", "/post/Mul", "t,W2", "y");
    tb_output(b, "y");
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 113;
    cfg.loss = DNNMEM_LOSS_SUM;
    cfg.optimizer = DNNMEM_OPT_SGD;
    cfg.iterations = 1;
    cfg.timeline = true;
    const char *spec = "/seg";
    cfg.checkpoint = &spec;
    cfg.n_checkpoint = 1;
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    assert_int_equal(r->peak_allocated, 11268);
    uint64_t at_sigmoid = 0;
    for (size_t i = 0; i < r->n_timeline; i++)
        if (strcmp(r->timeline[i].phase, "backward") == 0 &&
            strcmp(r->timeline[i].node, "/seg/Sigmoid") == 0)
            at_sigmoid = r->timeline[i].allocated;
    assert_int_equal(at_sigmoid, 11268);
    dnnmem_result_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_by_hand),
        cmocka_unit_test(test_views_and_copies_by_hand),
        cmocka_unit_test(test_dropout_is_identity_in_eval),
        cmocka_unit_test(test_chain_frees_dead_tensors),
        cmocka_unit_test(test_inplace_relu),
        cmocka_unit_test(test_autocast_by_hand),
        cmocka_unit_test(test_constant_of_shape_weights),
        cmocka_unit_test(test_binding_errors),
        cmocka_unit_test(test_shape_error_names_node),
        cmocka_unit_test(test_declared_shape_checked),
        cmocka_unit_test(test_train_unmodelled_op),
        cmocka_unit_test(test_fixture_weights_match_pytorch),
        cmocka_unit_test(test_light_zoo_weights),
        cmocka_unit_test(test_checkpoint_grouping),
        cmocka_unit_test(test_checkpoint_holds_incoming_grad),
        cmocka_unit_test(test_loss_dtype),
        cmocka_unit_test(test_sum_grad_dense_for_cublas),
        cmocka_unit_test(test_sum_grad_clone_per_mm),
        cmocka_unit_test(test_softmax_backward_temporary),
        cmocka_unit_test(test_cpu_batchnorm_backward_twice),
        cmocka_unit_test(test_tf_eager_not_inplace),
        cmocka_unit_test(test_foreach_temporaries_freed_last_first),
        cmocka_unit_test(test_loop_local_temporary_held),
        cmocka_unit_test(test_tied_weight_input_buffer),
        cmocka_unit_test(test_cuda_sum_rows_buffers),
        cmocka_unit_test(test_addmm_bias_grad_order),
        cmocka_unit_test(test_framework_runtimes),
        cmocka_unit_test(test_dropout_saved_by_framework),
        cmocka_unit_test(test_tf_tape_rules),
        cmocka_unit_test(test_lifted_kernels),
        cmocka_unit_test(test_lifted_gelu_tanh),
        cmocka_unit_test(test_lifted_var),
        cmocka_unit_test(test_lifted_sdpa),
        cmocka_unit_test(test_inplace_clone),
        cmocka_unit_test(test_lifted_groupnorm),
        cmocka_unit_test(test_slice_view),
        cmocka_unit_test(test_thnn_columns),
        cmocka_unit_test(test_lifted_groupnorm_no_bias),
        cmocka_unit_test(test_onednn_conv_2x),
        cmocka_unit_test(test_channels_last_conv_bwd),
        cmocka_unit_test(test_group_norm_113_copies),
        cmocka_unit_test(test_contiguous_copies),
        cmocka_unit_test(test_onednn_conv_bwd_2x),
        cmocka_unit_test(test_cat_grad_slice_not_accumulated_in_place),
        cmocka_unit_test(test_cat_channels_last),
        cmocka_unit_test(test_tf_graph_grad_forwarding),
    };
    return cmocka_run_group_tests_name("estimate", tests, NULL, NULL);
}
