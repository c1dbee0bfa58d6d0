/*
 * test-xla.c: JAX's jitted step. XLA's heap simulator (src/alloc/heap.c) on
 * intervals placed by hand, the fusion and buffer-sharing rules of
 * src/schedule/xla.c on tiny ONNX graphs (which values get no buffer, which
 * share one, where each lands in the temp buffer), and whole estimates with
 * --framework jax worked out from those rules and the BFC allocator's.
 */
#include "util.h"

/* ---- the heap simulator --------------------------------------------------- */

static struct dm_heap_buf hv(uint64_t size, int64_t start, int64_t end, int32_t id)
{
    return (struct dm_heap_buf){size, start, end, end, id, 0};
}

/* Best fit, not first fit. Sizes all differ, so the spatial order is the
 * list's (A 100 [0,10], B 60 [0,1], C 50 [0,10], D 40 [0,1]):
 *   A -> 0 (heap 100); B overlaps A -> 100 (160); C overlaps A, B -> 160
 *   (210); D overlaps all three -> 210 (250).
 *   E 30 [5,10] overlaps A [0,100) and C [160,210) only: the gaps are
 *   [100,160) (60) and, below the top, [210,250) (40): the smaller wins, 210.
 *   F 20 [2,3] overlaps A and C (not E, B, D): the same gaps, 210.
 * Temporal order (duration, then size): A, C, E (5), then B, D, F (1):
 *   A -> 0 (100); C -> 100 (150); E overlaps A, C -> 150 (180); B [0,1]
 *   overlaps A, C: 30 left below the top is too small -> 150 (210); D
 *   overlaps A, C, B -> 210 (250); F overlaps A, C: 150 (100 free up to 250).
 * Both 250: ChooseBestHeapAlgorithm keeps the spatial one (strictly smaller
 * wins, spatial comes first). */
static void test_heap_best_fit(void **state)
{
    (void)state;
    struct dm_heap_buf b[6] = {hv(100, 0, 10, 0), hv(60, 0, 1, 1), hv(50, 0, 10, 2),
                               hv(40, 0, 1, 3),   hv(30, 5, 10, 4), hv(20, 2, 3, 5)};
    struct dm_heap_buf c[6];
    memcpy(c, b, sizeof b);
    uint64_t heap;
    assert_int_equal(dm_heap_fit(c, 6, 1, DM_HEAP_SPATIAL, &heap), DNNMEM_OK);
    assert_int_equal(heap, 250);
    static const uint64_t spatial[6] = {0, 100, 160, 210, 210, 210};
    for (int k = 0; k < 6; k++)
        assert_int_equal(c[k].offset, spatial[k]);
    memcpy(c, b, sizeof b);
    assert_int_equal(dm_heap_fit(c, 6, 1, DM_HEAP_TEMPORAL, &heap), DNNMEM_OK);
    assert_int_equal(heap, 250);
    static const uint64_t temporal[6] = {0, 150, 100, 210, 150, 150};
    for (int k = 0; k < 6; k++)
        assert_int_equal(c[k].offset, temporal[k]);
    struct dm_heap_result r;
    assert_int_equal(dm_heap_choose_best(b, 6, 1, &r), DNNMEM_OK);
    assert_int_equal(r.heap_bytes, 250);
    assert_int_equal(r.chosen, DM_HEAP_SPATIAL);
    for (int k = 0; k < 6; k++)
        assert_int_equal(b[k].offset, spatial[k]);
}

/* Where the temporal order wins: v0 10 [1,5], v1 40 [2,2], v2 40 [6,7],
 * v3 20 [5,6].
 * Spatial (size, then duration): v2, v1, v3, v0. v2 -> 0 (40); v1 overlaps
 *   nothing placed -> 0; v3 overlaps v2 -> 40 (60); v0 overlaps v1 [0,40)
 *   and v3 [40,60) -> 60: 70.
 * Temporal (duration, then size): v0 (4), v2 (1, 40), v3 (1, 20), v1 (0).
 *   v0 -> 0 (10); v2 overlaps nothing, but 10 below the top is too small ->
 *   0, the heap grows to 40; v3 overlaps v0 and v2 -> 40 (60); v1 overlaps
 *   v0 only: 50 free above it up to 60 -> 10: 60. */
static void test_heap_temporal_wins(void **state)
{
    (void)state;
    struct dm_heap_buf b[4] = {hv(10, 1, 5, 0), hv(40, 2, 2, 1), hv(40, 6, 7, 2), hv(20, 5, 6, 3)};
    struct dm_heap_result r;
    assert_int_equal(dm_heap_choose_best(b, 4, 1, &r), DNNMEM_OK);
    assert_int_equal(r.spatial_bytes, 70);
    assert_int_equal(r.temporal_bytes, 60);
    assert_int_equal(r.heap_bytes, 60);
    assert_int_equal(r.chosen, DM_HEAP_TEMPORAL);
    static const uint64_t off[4] = {0, 10, 0, 40};
    for (int k = 0; k < 4; k++)
        assert_int_equal(b[k].offset, off[k]);
}

/* Chunk starts are aligned (128 B on the GPU), sizes are not: 100 [0,3] ->
 * 0; 100 [2,5] overlaps it -> 128 (heap 228); 60 [4,6] overlaps only the
 * second: the gap [0,128) holds it -> 0. A group of values sharing one
 * buffer is one interval, placed against everything any member overlaps. */
static void test_heap_alignment_and_errors(void **state)
{
    (void)state;
    struct dm_heap_buf b[3] = {hv(100, 0, 3, 0), hv(100, 2, 5, 1), hv(60, 4, 6, 2)};
    struct dm_heap_result r;
    assert_int_equal(dm_heap_choose_best(b, 3, 128, &r), DNNMEM_OK);
    assert_int_equal(r.heap_bytes, 228);
    assert_int_equal(b[0].offset, 0);
    assert_int_equal(b[1].offset, 128);
    assert_int_equal(b[2].offset, 0);
    uint64_t heap;
    struct dm_heap_buf bad = hv(8, 5, 4, 0);
    assert_int_equal(dm_heap_fit(&bad, 1, 1, DM_HEAP_SPATIAL, &heap), DNNMEM_E_USAGE);
    assert_int_equal(dm_heap_fit(b, 3, 0, DM_HEAP_SPATIAL, &heap), DNNMEM_E_USAGE);
    assert_int_equal(dm_heap_fit(NULL, 0, 128, DM_HEAP_TEMPORAL, &heap), DNNMEM_OK);
    assert_int_equal(heap, 0);
    /* values of 0 bytes take no room */
    struct dm_heap_buf z[2] = {hv(0, 0, 9, 0), hv(16, 0, 9, 1)};
    assert_int_equal(dm_heap_choose_best(z, 2, 128, &r), DNNMEM_OK);
    assert_int_equal(r.heap_bytes, 16);
    assert_int_equal(z[1].offset, 0);
}

/* ---- the plan on real graphs ------------------------------------------------ */

struct planned {
    dnnmem_model *m;
    const struct dm_graph *g;
    struct dm_tinfo *t;
    struct dm_arena arena;
    struct dm_schedule in, out;
    struct dm_xla_stats st;
    int64_t *off;
};

/* Load, infer, build the dataflow schedule (one step; plain SGD, the sum of
 * the outputs as the loss when training) and plan it. */
static void plan_dev(struct tb *b, bool train, bool donate, bool xla, bool cpu,
                     struct planned *p);

static void plan_run(struct tb *b, bool train, bool donate, bool xla, struct planned *p)
{
    plan_dev(b, train, donate, xla, false, p);
}

static void plan_dev_loss(struct tb *b, bool train, bool donate, bool xla, bool cpu,
                          enum dnnmem_loss loss, struct planned *p);

/* As plan_run, on the GPU or (cpu) XLA's CPU backend. */
static void plan_dev(struct tb *b, bool train, bool donate, bool xla, bool cpu,
                     struct planned *p)
{
    plan_dev_loss(b, train, donate, xla, cpu, DNNMEM_LOSS_SUM, p);
}

static void plan_dev_opt(struct tb *b, bool train, bool donate, bool xla, bool cpu,
                         enum dnnmem_loss loss, enum dnnmem_optimizer opt, struct planned *p);

/* As plan_dev, with the loss given. */
static void plan_dev_loss(struct tb *b, bool train, bool donate, bool xla, bool cpu,
                          enum dnnmem_loss loss, struct planned *p)
{
    plan_dev_opt(b, train, donate, xla, cpu, loss, DNNMEM_OPT_SGD, p);
}

/* As plan_dev_loss, with the optimizer given. */
static void plan_dev_opt(struct tb *b, bool train, bool donate, bool xla, bool cpu,
                         enum dnnmem_loss loss, enum dnnmem_optimizer opt, struct planned *p)
{
    memset(p, 0, sizeof *p);
    struct dnnmem_error err;
    if (tb_load(b, &p->m, &err) != DNNMEM_OK)
        fail_msg("load: %s", err.message);
    tb_free(b);
    p->g = dm_model_graph(p->m);
    dm_arena_init(&p->arena);
    p->t = calloc((size_t)p->g->n_tensors + 1, sizeof *p->t);
    assert_non_null(p->t);
    struct dm_infer ctx = {.g = p->g, .arena = &p->arena, .t = p->t, .err = &err};
    if (dm_infer_shapes(&ctx) != DNNMEM_OK)
        fail_msg("infer: %s", err.message);
    struct dm_run run = {.train = train, .cuda = !cpu, .torch_version = 206, .iterations = 1,
                         .grad_accum = 1, .optimizer = opt, .loss = loss,
                         .compute_capability = 80, .dataflow = true, .xla = xla};
    if (dm_schedule_build(p->g, p->t, &run, &p->in, &err) != DNNMEM_OK)
        fail_msg("schedule: %s", err.message);
    p->off = calloc((size_t)p->in.n_buf + 1, sizeof *p->off);
    assert_non_null(p->off);
    struct dm_xla_opts o = {.train = train, .donate = donate, .offsets = p->off, .cpu = cpu};
    if (dm_xla_plan(p->g, p->t, &p->in, &o, &p->out, &p->st, &err) != DNNMEM_OK)
        fail_msg("plan: %s", err.message);
}

static void plan(struct tb *b, bool train, bool donate, struct planned *p)
{
    plan_run(b, train, donate, false, p);
}

static void planned_free(struct planned *p)
{
    dm_schedule_free(&p->in);
    dm_schedule_free(&p->out);
    free(p->off);
    free(p->t);
    dm_arena_free(&p->arena);
    dnnmem_model_free(p->m);
}

/* The temp-buffer offset (or DM_XLA_*) of the buffer holding tensor
 * `name` (what NULL) or a buffer of it (`what`: "grad"). */
static int64_t offset_of(const struct planned *p, const char *name, const char *what)
{
    int32_t x = dm_graph_find(p->g, name);
    assert_true(x >= 0);
    for (int32_t b = 0; b < p->in.n_buf; b++) {
        const struct dm_buffer *bf = &p->in.buf[b];
        if (bf->tensor == x && (what ? bf->what && strcmp(bf->what, what) == 0 : !bf->what))
            return p->off[b];
    }
    fail_msg("no buffer for %s %s", name, what ? what : "");
    return 0;
}

static uint64_t replay_peak(const struct dm_schedule *s)
{
    struct dm_allocator a;
    assert_int_equal(dm_alloc_rounding_new(1, &a), DNNMEM_OK);
    struct dm_alloc_stats st;
    assert_int_equal(dm_replay(s, &a, &st), DNNMEM_OK);
    a.destroy(a.self);
    return st.peak_allocated;
}

/* x[2,256] and W[256,256] (float32; every activation [2,256], 2048 B):
 *   0 h  = MatMul(x, W)   a cuBLAS call: materialised
 *   1 e  = Exp(h)         its only reader is Neg: fused, no buffer
 *   2 n  = Neg(e)         two readers (Add, Mul): materialised
 *   3 a  = Add(n, h)      its only reader is a reduction: fused into it
 *   4 m  = Mul(n, n)      n dies here: m takes n's buffer (same shape, type)
 *   5 q  = MatMul(m, W)   m dies here
 *   6 r  = ReduceSum(a)   an output: live out, not in the temp buffer
 *   7 sm = Softmax(q)     an output
 * a's reads happen in ReduceSum's kernel: h, which Add read last, lives
 * until node 6. The heap's clock: h 0 (node 0); n 1 (node 2); node 4: n is
 * freed at 2 and m shares it at 3; node 5: q 4, m freed 5; node 6: h freed
 * 6; node 7: q freed 7. Intervals, 2048 B each: h [0,6], {n, m} [1,5] (n's
 * own [1,2]), q [4,7].
 * Rule 6 first: the live-out allocations are r (4 B, made at tick 6, node
 * 6's first event) and sm (2048 B, made at node 7, tick 7). The groups by
 * decreasing size (all 2048 B), then start: h [0,6] ends before sm is made
 * and r is too small: h goes into sm's allocation. {n, m} [1,5] overlaps h
 * there; q [4,7] ends at sm's own tick: both stay for the heap.
 * The heap: q and {n, m} overlap. Spatial (size, then the first member's
 * duration): q (3) -> 0, {n, m} (1) -> 2048: 4096 B. Temporal (the group's
 * whole duration): {n, m} (4) -> 0, q -> 2048: 4096, the spatial result
 * kept. Without rule 6, h would take a third slot: 6144. */
static struct tb *tb_fusion_graph(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "2,256");
    tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){256, 256});
    tb_node(b, "MatMul", "mm", "x,W", "h");
    tb_node(b, "Exp", "exp", "h", "e");
    tb_node(b, "Neg", "neg", "e", "n");
    tb_node(b, "Add", "add", "n,h", "a");
    tb_node(b, "Mul", "mul", "n,n", "m");
    tb_node(b, "MatMul", "mm2", "m,W", "q");
    tb_node(b, "ReduceSum", "rsum", "a", "r");
    tb_node(b, "Softmax", "softmax", "q", "sm");
    tb_output(b, "r");
    tb_output(b, "sm");
    return b;
}

static void test_fusion_and_sharing_by_hand(void **state)
{
    (void)state;
    struct planned p;
    plan(tb_fusion_graph(), false, true, &p);
    assert_int_equal(offset_of(&p, "e", NULL), DM_XLA_FUSED);
    assert_int_equal(offset_of(&p, "a", NULL), DM_XLA_FUSED);
    assert_int_equal(offset_of(&p, "h", NULL), DM_XLA_IN_OUTPUT);
    assert_int_equal(offset_of(&p, "q", NULL), 0);
    assert_int_equal(offset_of(&p, "n", NULL), 2048);
    assert_int_equal(offset_of(&p, "m", NULL), 2048); /* n's buffer */
    assert_int_equal(offset_of(&p, "r", NULL), DM_XLA_NOT_TEMP);
    assert_int_equal(offset_of(&p, "sm", NULL), DM_XLA_NOT_TEMP);
    assert_int_equal(p.st.values, 6);
    assert_int_equal(p.st.fused_forward, 2);
    assert_int_equal(p.st.shared, 1);
    assert_int_equal(p.st.in_outputs, 1);
    assert_int_equal(p.st.heap_values, 2);
    assert_int_equal(p.st.heap.heap_bytes, 4096);
    assert_int_equal(p.st.heap.spatial_bytes, 4096);
    assert_int_equal(p.st.heap.temporal_bytes, 4096);
    assert_int_equal(p.st.live_peak, 4096);
    assert_int_equal(p.st.peak_bytes[DNNMEM_CAT_ACTIVATION], 4096);
    assert_int_equal(p.st.outputs, 2); /* r (4 B) and sm (2048 B) */
    assert_int_equal(p.st.output_bytes, 2052);
    /* what the allocator sees: W 262144 and x 2048 before the call, then
     * r, sm and the temp buffer */
    assert_int_equal(replay_peak(&p.out), 262144 + 2048 + 4 + 2048 + 4096);
    planned_free(&p);
}

/* Training (the outputs' sum as the loss, plain SGD), x[2,256], W[256,256]:
 *   h = MatMul(x, W) -> t = Tanh(h) -> s = Sigmoid(t) -> y = Relu(s), y out.
 * Forward: h has one reader (Tanh) but MatMul is no fusible producer; t, s
 * and y are saved by their own backward (DM_T_OUT): all materialised.
 * Backward: Relu's backward makes s's grad (elementwise, same shape); its
 * only reader is Sigmoid's backward, elementwise, making one grad: fused.
 * Sigmoid's backward makes t's grad, read by Tanh's backward: fused too.
 * Tanh's backward makes h's grad, read by MatMul's backward (a cuBLAS
 * call): materialised. W's grad lives until the update. */
static void test_backward_fusion(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "2,256");
    tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){256, 256});
    tb_node(b, "MatMul", "mm", "x,W", "h");
    tb_node(b, "Tanh", "tanh", "h", "t");
    tb_node(b, "Sigmoid", "sigmoid", "t", "s");
    tb_node(b, "Relu", "relu", "s", "y");
    tb_output(b, "y");
    struct planned p;
    plan(b, true, true, &p);
    assert_true(offset_of(&p, "h", NULL) >= 0);
    assert_true(offset_of(&p, "t", NULL) >= 0);
    assert_true(offset_of(&p, "s", NULL) >= 0);
    assert_true(offset_of(&p, "y", NULL) >= 0);
    assert_int_equal(offset_of(&p, "s", "grad"), DM_XLA_FUSED);
    assert_int_equal(offset_of(&p, "t", "grad"), DM_XLA_FUSED);
    assert_true(offset_of(&p, "h", "grad") >= 0);
    assert_true(offset_of(&p, "W", "grad") >= 0);
    assert_int_equal(p.st.fused_forward, 0);
    assert_int_equal(p.st.fused_backward, 2);
    planned_free(&p);
}

/* Training in a ResNet block's shape: Conv -> BatchNormalization -> Relu.
 * The normalised output's only reader is Relu (it saves its own output): it
 * is fused into Relu's kernel; the convolution's output (BatchNorm's saved
 * input) and Relu's (saved) are materialised. At inference BatchNorm is an
 * elementwise scale and shift, fused the same way. */
static struct tb *tb_conv_bn_relu(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "2,3,8,8");
    tb_init(b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, (int64_t[]){4, 3, 3, 3});
    for (int k = 0; k < 4; k++) {
        static const char *const names[] = {"scale", "bias", "mean", "var"};
        tb_init(b, names[k], ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){4});
    }
    tb_node(b, "Conv", "conv", "x,w", "c");
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_node(b, "BatchNormalization", "bn", "c,scale,bias,mean,var", "n");
    tb_node(b, "Relu", "relu", "n", "r");
    tb_node(b, "GlobalAveragePool", "gap", "r", "y");
    tb_output(b, "y");
    return b;
}

static void test_batchnorm_relu(void **state)
{
    (void)state;
    struct planned p;
    plan(tb_conv_bn_relu(), true, true, &p);
    assert_true(offset_of(&p, "c", NULL) >= 0);
    assert_int_equal(offset_of(&p, "n", NULL), DM_XLA_FUSED);
    assert_true(offset_of(&p, "r", NULL) >= 0);
    assert_int_equal(p.st.fused_forward, 1);
    planned_free(&p);
    /* inference: n fused into Relu, and r into the pooling's reduction */
    plan(tb_conv_bn_relu(), false, true, &p);
    assert_true(offset_of(&p, "c", NULL) >= 0);
    assert_int_equal(offset_of(&p, "n", NULL), DM_XLA_FUSED);
    assert_int_equal(offset_of(&p, "r", NULL), DM_XLA_FUSED);
    assert_int_equal(offset_of(&p, "y", NULL), DM_XLA_NOT_TEMP);
    assert_int_equal(p.st.fused_forward, 2);
    /* c [2,4,8,8]: 2048 B, the only value left */
    assert_int_equal(p.st.heap.heap_bytes, 2048);
    planned_free(&p);
}


/* ---- rules 3 and 6 and the XLA residuals on small graphs ------------------------ */

/* Rule 3, x[2,256] -> MatMul W1[256,256] -> h -> Tanh -> t -> MatMul W2 -> y,
 * y out, trained (the sum of y, SGD, donated). The backward runs mm2's
 * (W2.grad 262144 B, t.grad), Tanh's, then mm1's (W1.grad). Each gradient
 * is whole at its MatMul's backward step and its update runs there, so
 * W2.grad is gone before W1.grad is made: the heap puts both at one offset,
 * where the program order (every update at the end) needed two. */
static void test_update_after_gradient(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "2,256");
    tb_init(b, "W1", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){256, 256});
    tb_init(b, "W2", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){256, 256});
    tb_node(b, "MatMul", "mm1", "x,W1", "h");
    tb_node(b, "Tanh", "tanh", "h", "t");
    tb_node(b, "MatMul", "mm2", "t,W2", "y");
    tb_output(b, "y");
    struct planned p;
    plan(b, true, true, &p);
    int64_t g1 = offset_of(&p, "W1", "grad"), g2 = offset_of(&p, "W2", "grad");
    assert_true(g1 >= 0);
    assert_int_equal(g1, g2);
    /* the most at once, in mm2's backward: W2.grad 262144, t (saved for
     * W2's grad and Tanh's), y's grad made contiguous for cuBLAS 2048, t.grad
     * 2048 and the loss's 4-byte grad: 268292 B, packed without a gap */
    assert_int_equal(p.st.live_peak, 262144 + 3 * 2048 + 4);
    assert_int_equal(p.st.heap.heap_bytes, 262144 + 3 * 2048 + 4);
    planned_free(&p);
}


/* The buffers of the plan's input schedule named `what`: how many, and the
 * bytes of the last. */
static int count_what(const struct planned *p, const char *what, uint64_t *bytes)
{
    int n = 0;
    for (int32_t b = 0; b < p->in.n_buf; b++)
        if (p->in.buf[b].what && strcmp(p->in.buf[b].what, what) == 0) {
            n++;
            *bytes = p->in.buf[b].bytes;
        }
    return n;
}

static int32_t node_named(const struct planned *p, const char *name)
{
    for (int32_t i = 0; i < p->g->n_nodes; i++)
        if (p->g->nodes[i].name && strcmp(p->g->nodes[i].name, name) == 0)
            return i;
    fail_msg("no node %s", name);
    return -1;
}

/* The step where buffer `buf` of the input schedule is freed, or -1. */
static int32_t free_step(const struct planned *p, int32_t buf)
{
    for (size_t e = 0; e < p->in.n_ev; e++)
        if (p->in.ev[e].kind == DM_EV_FREE && p->in.ev[e].buf == buf)
            return p->in.ev[e].step;
    return -1;
}

static int32_t value_buf(const struct planned *p, const char *name)
{
    int32_t x = dm_graph_find(p->g, name);
    for (int32_t b = 0; b < p->in.n_buf; b++)
        if (p->in.buf[b].tensor == x && !p->in.buf[b].what)
            return b;
    fail_msg("no buffer for %s", name);
    return -1;
}

/* XLA's max pool after a ReLU, trained: a = x * w [1,2,4,4] (128 B), r =
 * Relu(a), y = MaxPool(r) 2x2 stride 2 [1,2,2,2] (8 elements, 32 B). No
 * int64 indices are kept (PyTorch keeps 64 B of them); the forward keeps
 * two zero buffers of r's size (relu's max operand and the scatter
 * operand); the backward recomputes the pooled values (32 B) with one int32
 * coordinate per input dimension (4 x 32 B), and r's grad takes the
 * scatter operand's place: it is freed at the pool's backward step, where
 * r's grad is made. */
static struct tb *tb_relu_pool(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "1,2,4,4");
    tb_init(b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, (int64_t[]){1, 2, 4, 4});
    tb_node(b, "Mul", "mul", "x,w", "a");
    tb_node(b, "Relu", "relu", "a", "r");
    tb_node(b, "MaxPool", "pool", "r", "y");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){2, 2});
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    return b;
}

static void test_xla_max_pool(void **state)
{
    (void)state;
    struct planned p;
    uint64_t bytes = 0;
    plan_run(tb_relu_pool(), true, true, false, &p);
    assert_int_equal(count_what(&p, "indices", &bytes), 1);
    assert_int_equal(bytes, 64);
    planned_free(&p);
    plan_run(tb_relu_pool(), true, true, true, &p);
    assert_int_equal(count_what(&p, "indices", &bytes), 0);
    assert_int_equal(count_what(&p, "zeros (relu's max operand)", &bytes), 1);
    assert_int_equal(bytes, 128);
    assert_int_equal(count_what(&p, "zeros (the pool backward's scatter operand)", &bytes), 1);
    assert_int_equal(bytes, 128);
    assert_int_equal(count_what(&p, "pooled (recomputed)", &bytes), 1);
    assert_int_equal(bytes, 32);
    assert_int_equal(count_what(&p, "selected coordinate (int32)", &bytes), 4);
    assert_int_equal(bytes, 32);
    int32_t op = -1, gr = -1;
    for (int32_t b = 0; b < p.in.n_buf; b++) {
        const char *w = p.in.buf[b].what;
        if (w && strcmp(w, "zeros (the pool backward's scatter operand)") == 0)
            op = b;
        if (w && strcmp(w, "grad") == 0 && p.in.buf[b].tensor == dm_graph_find(p.g, "r"))
            gr = b;
    }
    assert_true(op >= 0 && gr >= 0);
    int32_t k = free_step(&p, op);
    assert_int_equal(p.in.steps[k].phase, DM_PHASE_BACKWARD);
    assert_int_equal(p.in.steps[k].node, node_named(&p, "pool"));
    for (size_t e = 0; e < p.in.n_ev; e++)
        if (p.in.ev[e].kind == DM_EV_ALLOC && p.in.ev[e].buf == gr)
            assert_int_equal(p.in.ev[e].step, k);
    planned_free(&p);
}

/* Softmax and exact GELU under XLA, s = MatMul(x[2,8], W[8,8]) (64 B):
 * Softmax's backward reads its input as well as its output (XLA recomputes
 * the output in the backward's fusion), so s lives until that backward,
 * where PyTorch's rules free it in the forward; GELU keeps its second
 * factor (erf(x / sqrt 2) + 1) / 2, s-sized, beside its input. */
static struct tb *tb_act(const char *op, int64_t opset)
{
    struct tb *b = tb_new(opset);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "2,8");
    tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){8, 8});
    tb_node(b, "MatMul", "mm", "x,W", "s");
    tb_node(b, op, "act", "s", "y");
    tb_output(b, "y");
    return b;
}

static void test_xla_softmax_gelu(void **state)
{
    (void)state;
    struct planned p;
    plan_run(tb_act("Softmax", 13), true, true, false, &p);
    int32_t k = free_step(&p, value_buf(&p, "s"));
    assert_int_equal(p.in.steps[k].phase, DM_PHASE_FORWARD);
    planned_free(&p);
    plan_run(tb_act("Softmax", 13), true, true, true, &p);
    k = free_step(&p, value_buf(&p, "s"));
    assert_int_equal(p.in.steps[k].phase, DM_PHASE_BACKWARD);
    assert_int_equal(p.in.steps[k].node, node_named(&p, "act"));
    planned_free(&p);
    uint64_t bytes = 0;
    plan_run(tb_act("Gelu", 20), true, true, false, &p);
    assert_int_equal(count_what(&p, "(erf(x / sqrt 2) + 1) / 2", &bytes), 0);
    planned_free(&p);
    plan_run(tb_act("Gelu", 20), true, true, true, &p);
    assert_int_equal(count_what(&p, "(erf(x / sqrt 2) + 1) / 2", &bytes), 1);
    assert_int_equal(bytes, 64);
    planned_free(&p);
}

/* Rule 7, XLA's CPU backend with donation: x[2,256] -> mm1 (W1[256,256])
 * -> h -> mm2 (W2[256,256]) -> y, trained by SGD on the sum of y. mm2's
 * backward reads W2 to make h's gradient, and that matmul is no ancestor of
 * W2's update: W2 is copied at the step's start (262144 B), live to mm2's
 * backward (measured: copy(fc2.weight) .. copy(fc4.weight) in jax-cpu's MLP
 * steps). mm1's backward makes no gradient for x (an input): W1 is not
 * copied (fc1's weight in the MLP). On the GPU, without donation, or at
 * inference: no copies. The copy starts at the step's first tick, before
 * every other value, so it cannot sit in W2's own allocation (free only
 * after the copy is made) and goes to the heap; W2's gradient [mm2's
 * backward] can, before W2's update overwrites it; W1's gradient comes
 * after that update and takes the copy's place in the heap, disjoint in
 * time: 262144 B, and around them two [2,256] values (2048 B each) and the
 * 4 B loss: 266244 B. On the GPU (no copy) both gradients share offset 0
 * of the heap and the small values pack into 6148 B: 268292 B. */
static struct tb *tb_two_matmuls_of(int dtype)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", dtype, "2,256");
    tb_init(b, "W1", dtype, 2, (int64_t[]){256, 256});
    tb_init(b, "W2", dtype, 2, (int64_t[]){256, 256});
    tb_node(b, "MatMul", "mm1", "x,W1", "h");
    tb_node(b, "MatMul", "mm2", "h,W2", "y");
    tb_output(b, "y");
    return b;
}

static struct tb *tb_two_matmuls(void)
{
    return tb_two_matmuls_of(ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
}

static void test_cpu_donated_copies(void **state)
{
    (void)state;
    struct planned p;
    plan_dev(tb_two_matmuls(), true, true, true, true, &p);
    assert_int_equal(p.st.copies, 1);
    assert_int_equal(p.st.copy_bytes, 262144);
    assert_int_equal(p.st.heap.heap_bytes, 266244);
    assert_int_equal(offset_of(&p, "W2", "grad"), DM_XLA_IN_OUTPUT);
    assert_true(offset_of(&p, "W1", "grad") >= 0);
    uint64_t cpu_heap = p.st.heap.heap_bytes;
    planned_free(&p);
    plan_dev(tb_two_matmuls(), true, true, true, false, &p); /* the GPU: no copy */
    assert_int_equal(p.st.copies, 0);
    assert_int_equal(offset_of(&p, "W2", "grad"), 0);
    assert_int_equal(p.st.heap.heap_bytes, 268292);
    assert_true(p.st.heap.heap_bytes > cpu_heap);
    planned_free(&p);
    plan_dev(tb_two_matmuls(), true, false, true, true, &p); /* not donated */
    assert_int_equal(p.st.copies, 0);
    planned_free(&p);
    plan_dev(tb_two_matmuls(), false, false, true, true, &p); /* inference */
    assert_int_equal(p.st.copies, 0);
    planned_free(&p);
}

/* Rule 7b: the same graph in bfloat16 at inference on the CPU. Both
 * weights (131072 B each) get float32 copies (262144 B each) at the step's
 * start, W1's live to mm1, W2's to mm2 (measured: the bf16 MLP's
 * wrapped_convert.1 .. .4); rule 7c: the step's own bf16 values are
 * float32, h [2,256] 2048 B. The heap: both copies overlap until mm1, h
 * overlaps W2's copy: 262144 + 262144 + 2048 = 526336 B. On the GPU: none,
 * h's 1024 B. */
static void test_cpu_bf16_copies(void **state)
{
    (void)state;
    struct planned p;
    plan_dev(tb_two_matmuls_of(ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16), false, false, true, true,
             &p);
    assert_int_equal(p.st.copies, 2);
    assert_int_equal(p.st.copy_bytes, 2 * 262144);
    assert_int_equal(p.st.heap.heap_bytes, 526336);
    planned_free(&p);
    plan_dev(tb_two_matmuls_of(ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16), false, false, true, false,
             &p);
    assert_int_equal(p.st.copies, 0);
    assert_int_equal(p.st.heap.heap_bytes, 1024);
    planned_free(&p);
}

/* Rule 8, XLA's CPU convolutions, at inference: x [1,3,8,8] (768 B), W
 * [4,3,3,3] (432 B), pad 1 -> c [1,4,8,8] (1024 B) -> r = Relu(c) -> y =
 * MaxPool 2x2 [1,4,4,4] (256 B, live out). The CPU runs the convolution
 * NHWC (jax 0.10.2's dumps: transpose_copy_fusion around ynn_fusion): W's
 * HWIO transpose (432 B) made at the step's start and dead after the
 * convolution, x's NHWC copy (768 B, the convolution's workspace), c in
 * NHWC, and r, the bias add and ReLU fused into the transpose back to
 * NCHW: a value of its own, not c's buffer. The heap (64 B alignment):
 * c [0,1024) over the conv and relu steps, r [1024,2048) from relu, the
 * NHWC input [1024,1792) during the conv only, W's transpose above both
 * at 1792 (a multiple of 64): 2224 B = 1792 + 432. Without rule 8 (the
 * GPU's plan of the same step): r takes c's buffer, 1024 B. */
static struct tb *tb_conv_relu_pool(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "1,3,8,8");
    tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, (int64_t[]){4, 3, 3, 3});
    tb_node(b, "Conv", "conv", "x,W", "c");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){3, 3});
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_node(b, "Relu", "relu", "c", "r");
    tb_node(b, "MaxPool", "pool", "r", "y");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){2, 2});
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    return b;
}

static void test_cpu_conv_layout(void **state)
{
    (void)state;
    struct planned p;
    plan_dev(tb_conv_relu_pool(), false, false, true, true, &p);
    assert_int_equal(p.st.layouts, 1);
    assert_int_equal(p.st.layout_bytes, 432);
    uint64_t bytes = 0;
    assert_int_equal(count_what(&p, "input (NHWC, XLA CPU)", &bytes), 1);
    assert_int_equal(bytes, 768);
    assert_int_equal(offset_of(&p, "c", NULL), 0);
    assert_int_equal(offset_of(&p, "r", NULL), 1024);
    assert_int_equal(p.st.heap.heap_bytes, 2224);
    planned_free(&p);
    plan_dev(tb_conv_relu_pool(), false, false, true, false, &p); /* the GPU */
    assert_int_equal(p.st.layouts, 0);
    assert_int_equal(count_what(&p, "input (NHWC, XLA CPU)", &bytes), 0);
    assert_int_equal(offset_of(&p, "r", NULL), offset_of(&p, "c", NULL));
    planned_free(&p);
}

/* Rule 8, XLA's CPU max pooling in training (tb_relu_pool: r [1,2,4,4],
 * 32 elements, 128 B; y 8 elements): the forward's variadic reduce-window
 * reads four s32 iotas of r's shape (4 x 128 B) made at the step's start,
 * writes four s32 index outputs and the max (4 x 32 + 32 B), and the
 * argmax is kept concatenated, [8, 4] int32 = 128 B, in place of r; the
 * backward recomputes nothing and scatters into zeros of r's shape made at
 * the step's start (128 B), whose buffer r's gradient takes (measured:
 * cnn-b8-sgd-f32's wrapped_iota .. .3, concatenate_bitcast_fusion.3,
 * wrapped_broadcast and wrapped_scatter.3 at one offset). Layout values:
 * 4 + 4 + 1 + 1 = 10, 512 + 128 + 32 + 128 = 800 B. */
static void test_cpu_max_pool(void **state)
{
    (void)state;
    struct planned p;
    uint64_t bytes = 0;
    plan_dev(tb_relu_pool(), true, true, true, true, &p);
    assert_int_equal(count_what(&p, "argmax (int32 per dimension)", &bytes), 1);
    assert_int_equal(bytes, 128);
    assert_int_equal(count_what(&p, "pooled (recomputed)", &bytes), 0);
    assert_int_equal(count_what(&p, "selected coordinate (int32)", &bytes), 0);
    assert_int_equal(count_what(&p, "zeros (the pool backward's scatter operand)", &bytes), 0);
    assert_int_equal(count_what(&p, "indices", &bytes), 0);
    assert_int_equal(p.st.layouts, 10);
    assert_int_equal(p.st.layout_bytes, 800);
    int32_t r = value_buf(&p, "r");
    int32_t k = free_step(&p, r); /* r is not kept: dead at the pool's forward */
    assert_int_equal(p.in.steps[k].phase, DM_PHASE_FORWARD);
    planned_free(&p);
}

/* Rule 8h at inference: x [1,1,8,8] -> c = Conv(x, W [8,1,1,1]) [1,8,8,8]
 * -> r = Relu(c) -> y = MaxPool 2x2 [1,8,4,4] (live out), in bfloat16 on
 * the CPU (measured: cnn-b8-infer-bf16). W's HWIO transpose is float32 (8
 * x 4 = 32 B) and is W's conversion: no rule 7b copy. c is float32 (512 x 4
 * = 2048 B, rule 7c); x's NHWC copy too (64 x 4 = 256 B); r, the bias,
 * ReLU and convert fused into the transpose back, stays bf16 (1024 B), its
 * reader a pooling. Live: at the conv c + x's copy + W's transpose = 2336 B;
 * at the ReLU c + r = 3072 B (4096 B were r float32); the heap: c [0,2048),
 * r [2048,3072): 3072 B. */
static struct tb *tb_conv1x1_relu_pool(int dtype)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", dtype, "1,1,8,8");
    tb_init(b, "W", dtype, 4, (int64_t[]){8, 1, 1, 1});
    tb_node(b, "Conv", "conv", "x,W", "c");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){1, 1});
    tb_node(b, "Relu", "relu", "c", "r");
    tb_node(b, "MaxPool", "pool", "r", "y");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){2, 2});
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    return b;
}

static void test_cpu_bf16_conv_inference(void **state)
{
    (void)state;
    struct planned p;
    plan_dev(tb_conv1x1_relu_pool(ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16), false, false, true,
             true, &p);
    assert_int_equal(p.st.copies, 0);
    assert_int_equal(p.st.layouts, 1);
    assert_int_equal(p.st.layout_bytes, 32);
    assert_int_equal(p.st.live_peak, 3072);
    assert_int_equal(offset_of(&p, "c", NULL), 0);
    assert_int_equal(offset_of(&p, "r", NULL), 2048);
    assert_int_equal(p.st.heap.heap_bytes, 3072);
    planned_free(&p);
}

/* Rule 8h in training, the same graph (donated; x is the batch, so the
 * convolution makes no input gradient and W no rule 7a copy): its layout
 * values, measured in cnn-b8-sgd-bf16's dump, are W's float32 transpose
 * (32 B), x's float32 [C,H,W,N] transpose (256 B), c's float32 NHWC output
 * beside the kept bf16 bias add (2048 B), the pool's four s32 iotas of r
 * (4 x 2048 B), four s32 index outputs (4 x 512 B), its float32 max (512 B)
 * and float32 zeros (2048 B), and the ReLU's two bf16 copies, NHWC and NCHW
 * (2 x 1024 B): 15 values, 32 + 256 + 2048 + 8192 + 2048 + 512 + 2048 +
 * 2048 = 17184 B. No rule 7b copy of W. */
static void test_cpu_bf16_conv_training(void **state)
{
    (void)state;
    struct planned p;
    plan_dev(tb_conv1x1_relu_pool(ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16), true, true, true,
             true, &p);
    assert_int_equal(p.st.copies, 0);
    assert_int_equal(p.st.layouts, 15);
    assert_int_equal(p.st.layout_bytes, 17184);
    planned_free(&p);
}

/* Rule 7 with bfloat16 weights, donated: W1 and W2 get float32
 * conversions (rule 7b), which do not free their parameters' allocations
 * (the update reads the bf16 parameter: cnn-b8-sgd-bf16's fc1.weight
 * allocation holds only the parameter and its update). So W2's weight
 * gradient is in the temp buffer; in float32 rule 7a's copy of W2 frees
 * W2's allocation, which then holds it (test_cpu_donated_copies). */
static void test_cpu_bf16_donated_not_hosting(void **state)
{
    (void)state;
    struct planned p;
    plan_dev(tb_two_matmuls_of(ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16), true, true, true, true,
             &p);
    assert_int_equal(p.st.copies, 2);
    assert_true(offset_of(&p, "W2", "grad") >= 0);
    assert_int_equal(p.st.in_outputs, 0);
    planned_free(&p);
}

/* Rule 8n at inference: x [1,1,8,8] -> c = Conv(x, W1 [8,1,1,1]) ->
 * r = Relu(c) -> y = Conv(r, W2 [2,8,1,1]) [1,2,8,8] (live out), float32
 * (measured: cnn5-b16-infer-f32, conv1's output and its ReLU at one
 * offset, read by conv2 with no transpose). r stays NHWC in c's buffer,
 * and the second convolution makes no NHWC copy of r: its workspace is
 * fused away. The heap: c's 2048 B, W2's transpose (64 B) at 2048, W1's
 * (32 B) at 2112: 2144 B (x's NHWC copy, 256 B, sits in y's live-out
 * allocation, rule 6). Without rule 8n r takes a buffer of its own and
 * conv2 an NHWC copy of it: 2048 B more each. */
static void test_cpu_nhwc_relu(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "1,1,8,8");
    tb_init(b, "W1", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, (int64_t[]){8, 1, 1, 1});
    tb_init(b, "W2", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, (int64_t[]){2, 8, 1, 1});
    tb_node(b, "Conv", "conv1", "x,W1", "c");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){1, 1});
    tb_node(b, "Relu", "relu", "c", "r");
    tb_node(b, "Conv", "conv2", "r,W2", "y");
    tb_attr_ints(b, "kernel_shape", 2, (int64_t[]){1, 1});
    tb_output(b, "y");
    struct planned p;
    plan_dev(b, false, false, true, true, &p);
    assert_int_equal(offset_of(&p, "r", NULL), offset_of(&p, "c", NULL));
    int32_t c2 = node_named(&p, "conv2"), n = 0;
    for (int32_t k = 0; k < p.in.n_buf; k++)
        if (p.in.buf[k].node == c2 && p.in.buf[k].what &&
            strcmp(p.in.buf[k].what, "input (NHWC, XLA CPU)") == 0) {
            assert_int_equal(p.off[k], DM_XLA_FUSED);
            n++;
        }
    assert_int_equal(n, 1);
    assert_int_equal(p.st.heap.heap_bytes, 2144);
    planned_free(&p);
}

/* Rule 9: y = MatMul(x [2,4], W [4,8]) [2,8] (64 B), trained with the
 * cross-entropy on the CPU, donated (no live-out allocation holds y). The
 * loss's values: its log_softmax (64 B), then in its backward the
 * take_along_axis gradient (loss.nll_grad, 64 B) and y's gradient (64 B).
 * XLA keeps the logits y to that backward (tra-b8-sgd-f32: ynn_fusion.117
 * live to the logits' gradient), so at y's gradient four 64 B values and
 * the loss's 4 B gradient are live: 260 B, the heap too. Without rule 9 y
 * is freed in the loss's forward and the peak is W's gradient (128 B) with
 * y's and the loss's: 196 B (as undonated, where y sits in W's new
 * allocation). */
static struct tb *tb_logits_of(int dtype)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", dtype, "2,4");
    tb_init(b, "W", dtype, 2, (int64_t[]){4, 8});
    tb_node(b, "MatMul", "mm", "x,W", "y");
    tb_output(b, "y");
    return b;
}

static void test_cpu_ce_keeps_logits(void **state)
{
    (void)state;
    struct planned p;
    plan_dev_loss(tb_logits_of(ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT), true, true, true, true,
                  DNNMEM_LOSS_CE, &p);
    int32_t y = value_buf(&p, "y");
    int32_t k = free_step(&p, y);
    assert_int_equal(p.in.steps[k].loss, DM_STEP_LOSS);
    uint64_t live = p.st.live_peak;
    assert_int_equal(live, 260);
    assert_int_equal(p.st.heap.heap_bytes, 260);
    assert_true(offset_of(&p, "y", NULL) != offset_of(&p, "y", "grad"));
    planned_free(&p);
}

/* Rule 8e: y = Gather(W [8,4] (128 B), ids [2]) [2,4] (32 B), trained on
 * the CPU (the outputs' sum as the loss, 4 B), donated. W's gradient is a
 * scatter-add into float32 zeros of W made at the step's start (measured:
 * tra-b2-sgd-f32's wrapped_broadcast.4), whose buffer the gradient takes:
 * at the loss the zeros, y and the loss are live, 128 + 32 + 4 = 164 B; the
 * heap (64 B alignment) zeros [0,128), y [128,160), the loss at 192: 196 B.
 * Without rule 8e (the GPU), or under SGD with momentum (the scatter-add
 * writes into the momentum's sum: tra-b2-sgd-momentum-f32), the gradient
 * is made at the backward: 128 + the loss's gradient 4 = 132 B. Undonated,
 * the zeros and the gradient sit in W's new allocation (rule 6): y and the
 * loss, 32 + 4 at 64: 68 B. Indices computed from constants (a static
 * slice, P[:S], whose transpose is a pad of zeros) keep the zeros under
 * momentum too (tra-b2-sgd-momentum-f32: wrapped_broadcast.3), as does a
 * bfloat16 table (64 B), whose zeros are float32, 128 B, and whose float32
 * scatter the bf16 momentum cannot take (tra-b2-sgd-momentum-bf16). */
static struct tb *tb_embed_of(bool computed_ids, int dtype)
{
    struct tb *b = tb_new(13);
    if (computed_ids) {
        tb_init_i64(b, "pos", 2, (int64_t[]){0, 1});
        tb_node(b, "Identity", "ids_of", "pos", "ids");
    } else {
        tb_input(b, "ids", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, "2");
    }
    tb_init(b, "W", dtype, 2, (int64_t[]){8, 4});
    tb_node(b, "Gather", "embed", "W,ids", "y");
    tb_output(b, "y");
    return b;
}

static struct tb *tb_embed(bool computed_ids)
{
    return tb_embed_of(computed_ids, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
}

static void test_cpu_embedding_zeros(void **state)
{
    (void)state;
    struct planned p;
    plan_dev(tb_embed(false), true, true, true, true, &p);
    assert_int_equal(p.st.layouts, 1);
    assert_int_equal(p.st.layout_bytes, 128);
    assert_int_equal(p.st.live_peak, 164);
    assert_int_equal(p.st.heap.heap_bytes, 196);
    assert_int_equal(offset_of(&p, "W", "grad"), 0); /* the zeros' offset */
    planned_free(&p);
    plan_dev(tb_embed(false), true, true, true, false, &p); /* the GPU */
    assert_int_equal(p.st.layouts, 0);
    assert_int_equal(p.st.live_peak, 132);
    planned_free(&p);
    plan_dev_opt(tb_embed(false), true, true, true, true, DNNMEM_LOSS_SUM,
                 DNNMEM_OPT_SGD_MOMENTUM, &p);
    assert_int_equal(p.st.layouts, 0);
    assert_int_equal(p.st.live_peak, 132);
    planned_free(&p);
    plan_dev(tb_embed(false), true, false, true, true, &p); /* not donated */
    assert_int_equal(p.st.layouts, 1);
    assert_int_equal(offset_of(&p, "W", "grad"), DM_XLA_IN_OUTPUT);
    assert_int_equal(p.st.heap.heap_bytes, 68);
    planned_free(&p);
    plan_dev_opt(tb_embed(true), true, true, true, true, DNNMEM_LOSS_SUM, DNNMEM_OPT_SGD_MOMENTUM,
                 &p);
    assert_int_equal(p.st.layouts, 1);
    assert_int_equal(p.st.layout_bytes, 128);
    planned_free(&p);
    plan_dev_opt(tb_embed_of(false, ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16), true, true, true,
                 true, DNNMEM_LOSS_SUM, DNNMEM_OPT_SGD_MOMENTUM, &p);
    assert_int_equal(p.st.layouts, 1);
    assert_int_equal(p.st.layout_bytes, 128);
    planned_free(&p);
}

/* A Constant node making the float32 scalar v (torch.onnx's scalar constants). */
static void tb_const_f32(struct tb *b, const char *out, float v)
{
    tb_node(b, "Constant", out, "", out);
    Onnx__AttributeProto *a = tb_attr_new(b, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    Onnx__TensorProto *t = tb_calloc(b, 1, sizeof *t);
    onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_float_data = 1;
    t->float_data = tb_calloc(b, 1, sizeof *t->float_data);
    t->float_data[0] = v;
    a->t = t;
}

/* Rule 8s: s = MatMul(x [2,4], W [4,8]) [2,8] (64 B), d = s / 2, a =
 * Softmax(d) (the output), trained on the CPU, donated. At the softmax's
 * backward: d (in s's buffer) and a, kept (save.c), d's gradient, the
 * loss's 4 B, and rule 8s's two values: the broadcast reciprocal of the sum
 * (64 B, from the softmax to its backward) and the constant 2's broadcast
 * to d's shape (64 B, from the step's start to the Div's backward;
 * measured: tra-b8-sgd-f32's wrapped_broadcast.2 and wrapped_broadcast):
 * 5 x 64 + 4 = 324 B. Unscaled (Softmax(s)): the reciprocal only, 260 B;
 * the GPU: neither, 260 B live. */
static struct tb *tb_scores(bool scaled)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "2,4");
    tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){4, 8});
    tb_node(b, "MatMul", "mm", "x,W", "s");
    if (scaled) {
        tb_const_f32(b, "c", 2.0f);
        tb_node(b, "Div", "scale", "s,c", "d");
    }
    tb_node(b, "Softmax", "softmax", scaled ? "d" : "s", "a");
    tb_output(b, "a");
    return b;
}

static void test_cpu_softmax_residuals(void **state)
{
    (void)state;
    struct planned p;
    plan_dev(tb_scores(true), true, true, true, true, &p);
    assert_int_equal(p.st.layouts, 2);
    assert_int_equal(p.st.layout_bytes, 128);
    assert_int_equal(p.st.live_peak, 324);
    assert_int_equal(p.st.heap.heap_bytes, 324);
    planned_free(&p);
    plan_dev(tb_scores(false), true, true, true, true, &p);
    assert_int_equal(p.st.layouts, 1);
    assert_int_equal(p.st.layout_bytes, 64);
    assert_int_equal(p.st.live_peak, 260);
    planned_free(&p);
    plan_dev(tb_scores(true), true, true, true, false, &p); /* the GPU */
    assert_int_equal(p.st.layouts, 0);
    assert_int_equal(p.st.live_peak, 260);
    planned_free(&p);
    plan_dev(tb_scores(true), false, false, true, true, &p); /* inference: none */
    assert_int_equal(p.st.layouts, 0);
    planned_free(&p);
}

/* Rule 7h: h = MatMul(x [64,4], W [4,8]) [64,8], t = Tanh(h), s =
 * Sigmoid(t) (the output; each kept by its own backward), trained on the
 * CPU, donated, in bfloat16 (512 elements: 1024 B bf16, 2048 B float32).
 * No matmul reads s: an elementwise fusion's output, bf16 (1024 B; measured:
 * tra-b8-sgd-bf16's multiply_convert_fusion). Gradients stay float32
 * (rule 7c; the loss's 4 B too, 8 B). The peak is Tanh's backward: s 1024
 * + the loss's gradient 8 + t's gradient 2048 = 3080 B (t's bf16 value
 * shares h's float32 buffer, which the gradient then takes). In float32
 * the peak is the loss: t + s + the loss = 2048 + 2048 + 4 = 4100 B. Where a
 * matmul reads s (y = MatMul(s, W2 [8,8])), s is float32 (the dot's
 * conversion fuses into its producer: convert_bitcast_fusion.25 f32): at
 * t's backward s 2048 + y's gradient 2048 + t's gradient 2048 = 6144 B. */
static struct tb *tb_tanh_sigmoid(int dt, bool dot_after)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", dt, "64,4");
    tb_init(b, "W", dt, 2, (int64_t[]){4, 8});
    tb_node(b, "MatMul", "mm", "x,W", "h");
    tb_node(b, "Tanh", "tanh", "h", "t");
    tb_node(b, "Sigmoid", "sigmoid", "t", "s");
    if (dot_after) {
        tb_init(b, "W2", dt, 2, (int64_t[]){8, 8});
        tb_node(b, "MatMul", "mm2", "s,W2", "y");
        tb_output(b, "y");
    } else {
        tb_output(b, "s");
    }
    return b;
}

static void test_cpu_half_forward_values(void **state)
{
    (void)state;
    int bf = ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, f32 = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    struct planned p;
    plan_dev(tb_tanh_sigmoid(bf, false), true, true, true, true, &p);
    assert_int_equal(p.st.live_peak, 3080);
    planned_free(&p);
    plan_dev(tb_tanh_sigmoid(f32, false), true, true, true, true, &p);
    assert_int_equal(p.st.live_peak, 4100);
    planned_free(&p);
    plan_dev(tb_tanh_sigmoid(bf, true), true, true, true, true, &p);
    assert_int_equal(p.st.live_peak, 6144);
    planned_free(&p);
}

/* ---- whole estimates --------------------------------------------------------- */

static struct dnnmem_result *jax_estimate_ws(struct tb *b, enum dnnmem_mode mode, bool donate,
                                             enum dnnmem_jax_execution ex, int64_t ws, int cc)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (tb_load(b, &m, &err) != DNNMEM_OK)
        fail_msg("load: %s", err.message);
    tb_free(b);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.framework = DNNMEM_FW_JAX;
    cfg.mode = mode;
    cfg.loss = DNNMEM_LOSS_SUM;
    cfg.optimizer = DNNMEM_OPT_SGD_MOMENTUM;
    cfg.jax_donate = donate;
    cfg.jax_execution = ex;
    cfg.cuda_context_bytes = 0;
    cfg.cublas_workspace_bytes = ws;
    cfg.compute_capability = cc;
    struct dnnmem_result *r = NULL;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    dnnmem_model_free(m);
    return r;
}

/* Without cuBLAS workspaces (--cublas-workspace 0): the rules below them. */
static struct dnnmem_result *jax_estimate(struct tb *b, enum dnnmem_mode mode, bool donate,
                                          enum dnnmem_jax_execution ex)
{
    return jax_estimate_ws(b, mode, donate, ex, 0, 0);
}

static const char *assumption(const struct dnnmem_result *r, const char *key)
{
    for (size_t k = 0; k < r->n_assumptions; k++)
        if (strcmp(r->assumptions[k].key, key) == 0)
            return r->assumptions[k].value;
    return "";
}

/* The graph of test_fusion_and_sharing_by_hand through the public API
 * (--cublas-workspace 0). XLA's BFC allocator rounds every request up to
 * 256 B (bfc.c); nothing is freed before the peak. Before the call: W 262144
 * and x 2048; the call: r (4 -> 256), sm 2048, then the 4096 B temp buffer:
 * 270592 B in use. */
static void test_inference_estimate_by_hand(void **state)
{
    (void)state;
    struct dnnmem_result *r = jax_estimate(tb_fusion_graph(), DNNMEM_MODE_INFER, true,
                                           DNNMEM_JAX_JIT);
    assert_int_equal(r->peak_allocated, 262144 + 2048 + 256 + 2048 + 4096);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_TEMPORARY], 4096);
    assert_int_equal(r->xla_temp_bytes, 4096);
    assert_int_equal(r->xla_argument_bytes, 262144 + 2048);
    assert_int_equal(r->xla_output_bytes, 4 + 2048);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_ACTIVATION], 2052);
    assert_non_null(strstr(assumption(r, "jax_execution"), "jit: the whole step"));
    assert_non_null(strstr(assumption(r, "xla_temp"), "4.00 KiB per call"));
    assert_non_null(strstr(assumption(r, "xla_fusion"), "2 of 6 values"));
    assert_non_null(strstr(assumption(r, "xla_outputs"), "2 live-out buffers"));
    dnnmem_result_free(r);
    /* op by op, as before: every value its own allocation */
    r = jax_estimate(tb_fusion_graph(), DNNMEM_MODE_INFER, true, DNNMEM_JAX_EAGER);
    assert_non_null(strstr(assumption(r, "jax_execution"), "op by op"));
    assert_int_equal(r->xla_temp_bytes, 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_TEMPORARY], 0);
    dnnmem_result_free(r);
}

/* The graph of test_backward_fusion (x[2,256] -> MatMul W[256,256] -> h ->
 * Tanh -> t -> Sigmoid -> s -> Relu -> y; every activation 2048 B) trained
 * through the public API: the sum of y as the loss, SGD with momentum,
 * parameters and state donated. The dataflow schedule of the first step, by
 * step: 2 h (MatMul); 3 t (Tanh, saved), h dies; 4 s (Sigmoid, saved); 5 y
 * (Relu, saved); 6 the loss (4 B), which dies there; 7 its grad (4 B);
 * 8 s.grad (Relu's backward), y and the loss grad die; 9 t.grad, s and
 * s.grad die; 10 h.grad, t and t.grad die; 11 W.grad (262144 B), h.grad
 * dies; 12 the update (its momentum, 262144 B, is made before the first
 * call: an entry parameter). Rule 3: W's gradient is whole at step 11 (the
 * only backward step reading W), so its update runs there and frees it.
 * Rule 1: s.grad and t.grad are fused (each made by an elementwise op's
 * backward and read only by the next one's): steps 8 and 9 run inside step
 * 10's kernel, so y, s and the loss grad die at 10. Rule 2: t takes h's
 * buffer at 3 (Tanh, h dying), h.grad takes t's at 10 (the first dying
 * candidate of its size and type).
 * The heap's clock: h 0; h freed 1, t shares 2; s 3; y 4; loss 5, freed 6;
 * loss grad 7; step 10: t freed 8, h.grad shares 9, then s 10, y 11, the
 * loss grad 12 freed; W.grad 13, h.grad freed 14; W.grad freed 15 (its
 * update, at the end of step 11). Groups: {h, t, h.grad} [0,14] (own duration 1), s [3,10], y
 * [4,11] (2048 B each), loss [5,6], loss grad [7,12] (4 B), W.grad [13,15].
 * Spatial: W.grad -> 0; s -> 0 (disjoint in time); y -> 2048; the group
 * overlaps W.grad -> 262144; the 4-byte values -> 4096: 264192 B. Temporal
 * gives 264192 too; the spatial result is kept.
 * The allocator: W 262144, x 2048 and the momentum 262144 before the call,
 * then the 264192 B temp buffer (a multiple of 256: nothing rounded):
 * 790528 B in use. */
static struct tb *tb_tanh_chain(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "2,256");
    tb_init(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){256, 256});
    tb_node(b, "MatMul", "mm", "x,W", "h");
    tb_node(b, "Tanh", "tanh", "h", "t");
    tb_node(b, "Sigmoid", "sigmoid", "t", "s");
    tb_node(b, "Relu", "relu", "s", "y");
    tb_output(b, "y");
    return b;
}

static void test_training_estimate_by_hand(void **state)
{
    (void)state;
    struct dnnmem_result *r = jax_estimate(tb_tanh_chain(), DNNMEM_MODE_TRAIN, true,
                                           DNNMEM_JAX_JIT);
    assert_int_equal(r->peak_allocated, 262144 + 2048 + 262144 + 264192);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_TEMPORARY], 264192);
    assert_int_equal(r->xla_temp_bytes, 264192);
    assert_int_equal(r->xla_argument_bytes, 262144 + 2048 + 262144);
    assert_non_null(strstr(assumption(r, "xla_temp"), "258.00 KiB per call"));
    assert_non_null(strstr(assumption(r, "xla_fusion"), "2 gradients"));
    dnnmem_result_free(r);
}

/* Training with SGD and momentum, donated or not, on the graph of
 * test_training_estimate_by_hand (its clock and groups). The step's outputs
 * are W' and its momentum (262144 B each). Donated, they alias their
 * inputs: the temp buffer is 264192 B, the peak 790528 B. Not donated, each
 * call allocates both anew (the breakdown counts the copies as weights and
 * optimizer state) and frees the old ones when it returns; both are made by
 * W's update at the end of step 11 (rule 3), tick 16, and until then hold
 * temporaries (rule 6). By decreasing size, then start: W.grad [13,15] ->
 * the first (W', equal sizes in order); the group {h, t, h.grad} [0,14]
 * overlaps it -> the second; s [3,10] -> the first (before W.grad); y [4,11]
 * overlaps s in the first and the group in the second: heap; so do the loss
 * [5,6] (s; the group) and the loss grad [7,12]. The heap: y -> 0; the loss
 * overlaps y -> 2048; the loss grad overlaps y only -> 2048: 2052 B, which
 * the BFC rounds to 2304. In use at the peak: W 262144, x 2048, the
 * momentum 262144, W' and the momentum' 524288, the temp 2304: 1052928 B. */
static void test_training_donation(void **state)
{
    (void)state;
    struct dnnmem_result *d = jax_estimate(tb_tanh_chain(), DNNMEM_MODE_TRAIN, true,
                                           DNNMEM_JAX_JIT);
    struct dnnmem_result *n = jax_estimate(tb_tanh_chain(), DNNMEM_MODE_TRAIN, false,
                                           DNNMEM_JAX_JIT);
    assert_int_equal(d->xla_temp_bytes, 264192);
    assert_int_equal(d->peak_allocated, 790528);
    assert_int_equal(n->xla_temp_bytes, 2052);
    assert_int_equal(n->peak_allocated, 262144 + 2048 + 262144 + 524288 + 2304);
    assert_int_equal(d->category_bytes[DNNMEM_CAT_WEIGHT], 262144);
    assert_int_equal(d->category_bytes[DNNMEM_CAT_OPTIMIZER], 262144);
    assert_int_equal(n->category_bytes[DNNMEM_CAT_WEIGHT], 2 * 262144);
    assert_int_equal(n->category_bytes[DNNMEM_CAT_OPTIMIZER], 2 * 262144);
    assert_non_null(strstr(assumption(d, "jax_donation"), "donated"));
    assert_non_null(strstr(assumption(n, "jax_donation"), "2 new buffers (512.00 KiB)"));
    dnnmem_result_free(d);
    dnnmem_result_free(n);
}

/* Each cuBLAS call's workspace (GemmConfig::kDefaultWorkspace 4 MiB before
 * sm90, kHopperWorkspace 32 MiB from sm90; --cublas-workspace overrides),
 * on the inference graph of test_fusion_and_sharing_by_hand: MatMul mm's
 * workspace is live while h is made, mm2's while q is made and m dies. h
 * still goes into sm's allocation (rule 6; the workspaces are larger than
 * both outputs). The heap: the two workspaces are disjoint in time -> 0;
 * q overlaps mm2's -> W; {n, m} overlaps it and q -> W + 2048: W + 4096. */
static void test_cublas_workspace(void **state)
{
    (void)state;
    static const struct {
        int64_t option;
        int cc;
        uint64_t ws;
        const char *text;
    } cases[] = {{-1, 80, 4u << 20, "4.00 MiB per cuBLAS call"},
                 {-1, 90, 32u << 20, "32.00 MiB per cuBLAS call"},
                 {1 << 20, 90, 1u << 20, "1.00 MiB per cuBLAS call"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct dnnmem_result *r = jax_estimate_ws(tb_fusion_graph(), DNNMEM_MODE_INFER, true,
                                                  DNNMEM_JAX_JIT, cases[c].option, cases[c].cc);
        assert_int_equal(r->xla_temp_bytes, cases[c].ws + 4096);
        assert_int_equal(r->peak_allocated, 262144 + 2048 + 256 + 2048 + cases[c].ws + 4096);
        assert_non_null(strstr(assumption(r, "cublas_workspace"), cases[c].text));
        dnnmem_result_free(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heap_best_fit),
        cmocka_unit_test(test_heap_temporal_wins),
        cmocka_unit_test(test_heap_alignment_and_errors),
        cmocka_unit_test(test_fusion_and_sharing_by_hand),
        cmocka_unit_test(test_backward_fusion),
        cmocka_unit_test(test_batchnorm_relu),
        cmocka_unit_test(test_update_after_gradient),
        cmocka_unit_test(test_xla_max_pool),
        cmocka_unit_test(test_xla_softmax_gelu),
        cmocka_unit_test(test_cublas_workspace),
        cmocka_unit_test(test_inference_estimate_by_hand),
        cmocka_unit_test(test_training_estimate_by_hand),
        cmocka_unit_test(test_training_donation),
        cmocka_unit_test(test_cpu_donated_copies),
        cmocka_unit_test(test_cpu_bf16_copies),
        cmocka_unit_test(test_cpu_conv_layout),
        cmocka_unit_test(test_cpu_max_pool),
        cmocka_unit_test(test_cpu_bf16_conv_inference),
        cmocka_unit_test(test_cpu_bf16_conv_training),
        cmocka_unit_test(test_cpu_bf16_donated_not_hosting),
        cmocka_unit_test(test_cpu_nhwc_relu),
        cmocka_unit_test(test_cpu_ce_keeps_logits),
        cmocka_unit_test(test_cpu_embedding_zeros),
        cmocka_unit_test(test_cpu_softmax_residuals),
        cmocka_unit_test(test_cpu_half_forward_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
