/*
 * test-mxplan.c: MXNet's executor memory plan (src/schedule/mxplan.c) on
 * hand-built schedules. Every expected storage count and byte total is worked
 * out in the comments from the rules at the top of mxplan.c (nnvm's
 * plan_memory.cc: free list keyed by elements x 4, match range 16, closest
 * larger first, else closest smaller, storages grow to the largest request;
 * in place for elementwise ops whose input dies there).
 */
#include "util.h"

/* A schedule written by hand: steps, buffers and events. */
struct hs {
    struct dm_schedule s;
};

static void step(struct hs *h, enum dm_phase ph, int it, int32_t node)
{
    struct dm_schedule *s = &h->s;
    s->steps = realloc(s->steps, (size_t)(s->n_steps + 1) * sizeof *s->steps);
    assert_non_null(s->steps);
    s->steps[s->n_steps++] = (struct dm_step){.phase = (uint8_t)ph, .iteration = (int16_t)it, .node = node};
    s->cap_steps = s->n_steps;
}

static void ev(struct hs *h, enum dm_ev_kind k, int32_t buf)
{
    struct dm_schedule *s = &h->s;
    s->ev = realloc(s->ev, (s->n_ev + 1) * sizeof *s->ev);
    assert_non_null(s->ev);
    s->ev[s->n_ev++] = (struct dm_event){(uint8_t)k, buf, s->n_steps - 1};
    s->cap_ev = s->n_ev;
}

/* a float32 buffer of `bytes` for `tensor`, allocated at the current step */
static int32_t alloc(struct hs *h, enum dnnmem_category cat, uint64_t bytes, int32_t tensor,
                     const char *what)
{
    struct dm_schedule *s = &h->s;
    s->buf = realloc(s->buf, (size_t)(s->n_buf + 1) * sizeof *s->buf);
    assert_non_null(s->buf);
    int32_t id = s->n_buf++;
    s->buf[id] = (struct dm_buffer){bytes, tensor, -1, (uint8_t)cat, (uint8_t)DM_FLOAT, what};
    s->cap_buf = s->n_buf;
    ev(h, DM_EV_ALLOC, id);
    return id;
}

static void release(struct hs *h, int32_t buf) { ev(h, DM_EV_FREE, buf); }

/* A graph of single-input, single-output nodes: node i reads tensor i and
 * writes tensor i + 1, with op ops[i]. */
struct chain {
    struct dm_graph g;
    struct dm_node nodes[8];
    int32_t io[8][2];
};

static void chain_init(struct chain *c, const enum dm_op *ops, int n)
{
    memset(c, 0, sizeof *c);
    c->g.path = "chain";
    c->g.n_nodes = n;
    c->g.nodes = c->nodes;
    for (int i = 0; i < n; i++) {
        c->io[i][0] = i;
        c->io[i][1] = i + 1;
        c->nodes[i] = (struct dm_node){.name = "n", .op = ops[i], .n_in = 1, .n_out = 1,
                                       .in = &c->io[i][0], .out = &c->io[i][1]};
    }
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

static int count(const struct dm_schedule *s, enum dm_ev_kind k)
{
    int n = 0;
    for (size_t e = 0; e < s->n_ev; e++)
        n += s->ev[e].kind == k;
    return n;
}

/* Inference chain X -> A -> B -> C -> D (convolutions, nothing in place),
 * each 4000 B. nnvm: A gets s0; B is requested while A is still held (outputs
 * before inputs are released), s1; A's release frees s0; C takes s0 (same
 * key), then B's release frees s1; D takes s1. 2 storages, 8000 B, plus the
 * weight (1000) and input (4000): peak 13000, no frees. */
static void test_chain_reuse(void **state)
{
    (void)state;
    static const enum dm_op ops[] = {DM_OP_Conv, DM_OP_Conv, DM_OP_Conv, DM_OP_Conv};
    struct chain c;
    chain_init(&c, ops, 4);
    struct hs h = {0};
    step(&h, DM_PHASE_SETUP, 1, -1);
    alloc(&h, DNNMEM_CAT_WEIGHT, 1000, -1, "w");
    step(&h, DM_PHASE_FORWARD, 1, 0);
    alloc(&h, DNNMEM_CAT_INPUT, 4000, 0, NULL);
    int32_t a = alloc(&h, DNNMEM_CAT_ACTIVATION, 4000, 1, NULL);
    step(&h, DM_PHASE_FORWARD, 1, 1);
    int32_t b = alloc(&h, DNNMEM_CAT_ACTIVATION, 4000, 2, NULL);
    release(&h, a);
    step(&h, DM_PHASE_FORWARD, 1, 2);
    int32_t cc = alloc(&h, DNNMEM_CAT_ACTIVATION, 4000, 3, NULL);
    release(&h, b);
    step(&h, DM_PHASE_FORWARD, 1, 3);
    alloc(&h, DNNMEM_CAT_ACTIVATION, 4000, 4, NULL);
    release(&h, cc);

    struct dm_schedule out;
    struct dm_mxplan_stats st;
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.entries, 4);
    assert_int_equal(st.storages, 2);
    assert_int_equal(st.inplace, 0);
    assert_int_equal(st.storage_bytes, 8000);
    assert_int_equal(count(&out, DM_EV_FREE), 0);
    assert_int_equal(count(&out, DM_EV_ALLOC), 4); /* weight, input, s0, s1 */
    assert_int_equal(replay_peak(&out), 13000);
    /* the eager schedule peaks at node 1 with the same 13000 */
    assert_int_equal(replay_peak(&h.s), 13000);
    assert_int_equal(out.n_steps, h.s.n_steps);
    dm_schedule_free(&out);
    dm_schedule_free(&h.s);
}

/* Sizes (float32, so the key is the bytes):
 *  node 0: A 64000 -> s0 (new).
 *  node 1: B 1024 -> s1 (A still held); A released: free {s0:64000}.
 *  node 2: C 2000: larger keys in [2000, 32000]: s0's 64000 is beyond 16x;
 *          smaller in [125, 2000): none -> s2 (new). B released: free
 *          {s0:64000, s1:1024}.
 *  node 3: D 8000: larger in [8000, 128000]: s0 -> D = s0 (stays 64000).
 *          C released: free {s1:1024, s2:2000}.
 *  node 4: E 40000: larger in [40000, 640000]: none; smaller in
 *          [2500, 40000): none (2000 < 2500) -> s3 (new). D released:
 *          free {s1:1024, s2:2000, s0:64000}.
 *  node 5: F 3000: larger in [3000, 48000]: none (64000 > 48000); smaller in
 *          [187, 3000): the largest, s2 (2000), which grows to 3000.
 *          E released.
 * 4 storages: 64000 + 1024 + 3000 + 40000 = 108024 B. */
static void test_match_range(void **state)
{
    (void)state;
    static const enum dm_op ops[] = {DM_OP_Conv, DM_OP_Conv, DM_OP_Conv,
                                     DM_OP_Conv, DM_OP_Conv, DM_OP_Conv};
    struct chain c;
    chain_init(&c, ops, 6);
    static const uint64_t sz[] = {64000, 1024, 2000, 8000, 40000, 3000};
    struct hs h = {0};
    step(&h, DM_PHASE_SETUP, 1, -1);
    int32_t prev = -1;
    for (int i = 0; i < 6; i++) {
        step(&h, DM_PHASE_FORWARD, 1, i);
        int32_t x = alloc(&h, DNNMEM_CAT_ACTIVATION, sz[i], i + 1, NULL);
        if (prev >= 0)
            release(&h, prev);
        prev = x;
    }
    struct dm_schedule out;
    struct dm_mxplan_stats st;
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.entries, 6);
    assert_int_equal(st.storages, 4);
    assert_int_equal(st.storage_bytes, 108024);
    assert_int_equal(replay_peak(&out), 108024);
    dm_schedule_free(&out);
    /* with a match range of 2 (NNVM_EXEC_MATCH_RANGE=2): node 3's D (8000)
     * no longer takes s0 (64000 > 16000) nor s1/s2 (below 4000) -> new s3;
     * node 4's E (40000): larger in [40000, 80000]: s0 -> E = s0; node 5's
     * F (3000): free {s1:1024, s2:2000 (C, released at node 3), s3:8000
     * (D, released at node 4)}: larger in [3000, 6000]: none; smaller in
     * [1500, 3000): s2 -> grows to 3000. Storages 64000 + 1024 + 3000 +
     * 8000 = 76024 B. */
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 2, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.storages, 4);
    assert_int_equal(st.storage_bytes, 76024);
    dm_schedule_free(&out);
    dm_schedule_free(&h.s);
}

/* Conv -> Relu -> Sigmoid, 4000 B each, the result kept. In place: Relu's
 * output takes A's storage (A dies at Relu, same size), Sigmoid's takes it
 * again: 1 storage of 4000 B, 2 entries in place. The same schedule with
 * three convolutions: A s0, R1 s1 (A still held), A released, R2 takes s0:
 * 2 storages, 8000 B. */
static void test_inplace(void **state)
{
    (void)state;
    static const enum dm_op act[] = {DM_OP_Conv, DM_OP_Relu, DM_OP_Sigmoid};
    static const enum dm_op conv[] = {DM_OP_Conv, DM_OP_Conv, DM_OP_Conv};
    struct hs h = {0};
    step(&h, DM_PHASE_SETUP, 1, -1);
    step(&h, DM_PHASE_FORWARD, 1, 0);
    int32_t a = alloc(&h, DNNMEM_CAT_ACTIVATION, 4000, 1, NULL);
    step(&h, DM_PHASE_FORWARD, 1, 1);
    int32_t r1 = alloc(&h, DNNMEM_CAT_ACTIVATION, 4000, 2, NULL);
    release(&h, a);
    step(&h, DM_PHASE_FORWARD, 1, 2);
    alloc(&h, DNNMEM_CAT_ACTIVATION, 4000, 3, NULL);
    release(&h, r1);
    struct chain c;
    struct dm_schedule out;
    struct dm_mxplan_stats st;
    chain_init(&c, act, 3);
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.storages, 1);
    assert_int_equal(st.inplace, 2);
    assert_int_equal(st.storage_bytes, 4000);
    assert_int_equal(replay_peak(&out), 4000);
    dm_schedule_free(&out);
    chain_init(&c, conv, 3);
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.storages, 2);
    assert_int_equal(st.inplace, 0);
    assert_int_equal(st.storage_bytes, 8000);
    assert_int_equal(replay_peak(&out), 8000);
    dm_schedule_free(&out);
    dm_schedule_free(&h.s);
}

/* _backward_FullyConnected writes the data's gradient over the data
 * (FInplaceOption {1, 0}, fully_connected.cc). X -> node 0 (conv) -> A
 * (4000, saved) -> node 1 -> L (200). Backward: dL (200) in a step of its
 * own, L released; node 1's backward makes dA (4000, A's gradient) and
 * releases A; node 0's releases dA. Storages: A s0, L s1, dL s2 (L's s1 is
 * still held when dL is requested); dA: node 1 a FullyConnected (Gemm)
 * takes A's s0 in place: 3 storages, 4000 + 200 + 200 = 4400, 1 in place;
 * node 1 a convolution: s1 (200) is free but its key is below 4000 / 16 =
 * 250, so a new s3: 4 storages, 8400, none in place. */
static void test_fc_backward_inplace(void **state)
{
    (void)state;
    static const enum dm_op fc[] = {DM_OP_Conv, DM_OP_Gemm};
    static const enum dm_op conv[] = {DM_OP_Conv, DM_OP_Conv};
    struct hs h = {0};
    step(&h, DM_PHASE_SETUP, 1, -1);
    step(&h, DM_PHASE_FORWARD, 1, 0);
    int32_t a = alloc(&h, DNNMEM_CAT_SAVED, 4000, 1, NULL);
    step(&h, DM_PHASE_FORWARD, 1, 1);
    int32_t l = alloc(&h, DNNMEM_CAT_ACTIVATION, 200, 2, NULL);
    step(&h, DM_PHASE_BACKWARD, 1, -1);
    int32_t dl = alloc(&h, DNNMEM_CAT_TEMPORARY, 200, 2, "grad");
    release(&h, l);
    step(&h, DM_PHASE_BACKWARD, 1, 1);
    int32_t da = alloc(&h, DNNMEM_CAT_TEMPORARY, 4000, 1, "grad");
    release(&h, a);
    release(&h, dl);
    step(&h, DM_PHASE_BACKWARD, 1, 0);
    release(&h, da);
    struct chain c;
    struct dm_schedule out;
    struct dm_mxplan_stats st;
    chain_init(&c, fc, 2);
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.storages, 3);
    assert_int_equal(st.inplace, 1);
    assert_int_equal(st.storage_bytes, 4400);
    dm_schedule_free(&out);
    chain_init(&c, conv, 2);
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.storages, 4);
    assert_int_equal(st.inplace, 0);
    assert_int_equal(st.storage_bytes, 8400);
    dm_schedule_free(&out);
    dm_schedule_free(&h.s);
}

/* Two training iterations of one op (x -> conv -> a). Eager:
 *   setup: W 1000
 *   it 1: forward: X 400 (input), A 400 (saved); backward: G 1000 (.grad),
 *         A freed; optimizer: M 1000 (momentum, kept), T 1000 (temporary,
 *         freed at once), X freed; zero_grad: G freed (set_to_none)
 *   it 2: the same with new X, A, G, T.
 * Eager peak: W + X + G + M + T = 4400 at the first optimizer step.
 * MXNet's executor: W; X and G bound once before the first op; A's storage
 * (400) allocated at the first forward, kept; M at the first update, kept;
 * no optimizer temporary; iteration 2 makes nothing new.
 * Peak 1000 + 400 + 1000 + 400 + 1000 = 3800, 5 allocations, no frees. */
static void test_training_step(void **state)
{
    (void)state;
    static const enum dm_op ops[] = {DM_OP_Conv};
    struct chain c;
    chain_init(&c, ops, 1);
    struct hs h = {0};
    step(&h, DM_PHASE_SETUP, 1, -1);
    alloc(&h, DNNMEM_CAT_WEIGHT, 1000, 5, NULL);
    for (int it = 1; it <= 2; it++) {
        step(&h, DM_PHASE_FORWARD, it, 0);
        int32_t x = alloc(&h, DNNMEM_CAT_INPUT, 400, 0, NULL);
        int32_t a = alloc(&h, DNNMEM_CAT_SAVED, 400, 1, NULL);
        step(&h, DM_PHASE_BACKWARD, it, 0);
        int32_t g = alloc(&h, DNNMEM_CAT_GRADIENT, 1000, 5, "grad");
        release(&h, a);
        step(&h, DM_PHASE_OPTIMIZER, it, -1);
        if (it == 1)
            alloc(&h, DNNMEM_CAT_OPTIMIZER, 1000, 5, "momentum_buffer");
        int32_t t = alloc(&h, DNNMEM_CAT_TEMPORARY, 1000, 5, "tmp");
        release(&h, t);
        release(&h, x);
        step(&h, DM_PHASE_ZERO_GRAD, it, -1);
        release(&h, g);
    }
    assert_int_equal(replay_peak(&h.s), 4400);
    struct dm_schedule out;
    struct dm_mxplan_stats st;
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.storages, 1);
    assert_int_equal(st.storage_bytes, 400);
    assert_int_equal(count(&out, DM_EV_ALLOC), 5);
    assert_int_equal(count(&out, DM_EV_FREE), 0);
    assert_int_equal(replay_peak(&out), 3800);
    /* the gradient is bound in the setup step, before the first op */
    bool grad_at_setup = false;
    for (size_t e = 0; e < out.n_ev; e++)
        if (out.buf[out.ev[e].buf].category == DNNMEM_CAT_GRADIENT)
            grad_at_setup = out.steps[out.ev[e].step].phase == DM_PHASE_SETUP;
    assert_true(grad_at_setup);
    /* events stay in step order */
    for (size_t e = 1; e < out.n_ev; e++)
        assert_true(out.ev[e].step >= out.ev[e - 1].step);
    dm_schedule_free(&out);
    dm_schedule_free(&h.s);
}

/* A storage is a whole number of 4-byte words (graph_executor.cc allocates
 * (bytes + 3) / 4 floats): a 10-byte bool mask (key 40) takes 12 B. */
static void test_word_rounding(void **state)
{
    (void)state;
    static const enum dm_op ops[] = {DM_OP_Conv};
    struct chain c;
    chain_init(&c, ops, 1);
    struct hs h = {0};
    step(&h, DM_PHASE_SETUP, 1, -1);
    step(&h, DM_PHASE_FORWARD, 1, 0);
    int32_t m = alloc(&h, DNNMEM_CAT_SAVED, 10, 1, "mask");
    h.s.buf[m].dtype = DM_BOOL;
    struct dm_schedule out;
    struct dm_mxplan_stats st;
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.storages, 1);
    assert_int_equal(st.storage_bytes, 12);
    dm_schedule_free(&out);
    dm_schedule_free(&h.s);
}

/* The plan covers the first micro-batch's forward and backward, including a
 * checkpoint's recomputation (forward steps inside the backward), but not the
 * next micro-batch (a forward that ends in the loss):
 *   forward n0: A 400 -> s0; loss: L 4 -> s1 (free list empty), released;
 *   backward: recompute A' 400: larger keys in [400, 6400]: none; smaller in
 *   [25, 400): s1's 4 is below 25 -> s2; then A' and A are released.
 *   micro-batch 2 (A2, L2) is not planned.
 * 3 entries, 3 storages: 400 + 4 + 400 = 804 B. */
static void test_window(void **state)
{
    (void)state;
    static const enum dm_op ops[] = {DM_OP_Conv};
    struct chain c;
    chain_init(&c, ops, 1);
    struct hs h = {0};
    step(&h, DM_PHASE_SETUP, 1, -1);
    for (int micro = 1; micro <= 2; micro++) {
        step(&h, DM_PHASE_FORWARD, 1, 0);
        int32_t a = alloc(&h, DNNMEM_CAT_SAVED, 400, 1, NULL);
        step(&h, DM_PHASE_LOSS, 1, -1);
        int32_t l = alloc(&h, DNNMEM_CAT_TEMPORARY, 4, -1, "loss");
        release(&h, l);
        int32_t r = -1;
        if (micro == 1) {
            step(&h, DM_PHASE_FORWARD, 1, 0); /* recomputation */
            r = alloc(&h, DNNMEM_CAT_SAVED, 400, 1, NULL);
        }
        step(&h, DM_PHASE_BACKWARD, 1, 0);
        if (r >= 0)
            release(&h, r);
        release(&h, a);
    }
    struct dm_schedule out;
    struct dm_mxplan_stats st;
    assert_int_equal(dm_mxnet_plan(&c.g, &h.s, 0, &out, &st, NULL), DNNMEM_OK);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.storages, 3);
    assert_int_equal(st.storage_bytes, 804);
    assert_int_equal(replay_peak(&out), 804);
    dm_schedule_free(&out);
    dm_schedule_free(&h.s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_reuse),
        cmocka_unit_test(test_match_range),
        cmocka_unit_test(test_inplace),
        cmocka_unit_test(test_fc_backward_inplace),
        cmocka_unit_test(test_training_step),
        cmocka_unit_test(test_word_rounding),
        cmocka_unit_test(test_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
