/*
 * test-fixpoint.c: gradient accumulation's repeated micro-steps
 * (src/schedule/fixpoint.c, dnnmem_config.accum_fixed_point).
 *
 * First the test itself on schedules made by hand, one micro-step at a
 * time, dm_fp_boundary called at each micro-step's start as the builder
 * calls it; the caching allocator's blocks worked by hand (its rules,
 * src/alloc/caching.c: a request of 1-10 MiB gets a 20 MiB segment, split;
 * best fit by size, then address; a freed block merges with free
 * neighbours). Then whole estimates and plans, each both ways, compared
 * field by field.
 */
#include "util.h"

#include "schedule/builder.h"

#define MiB ((uint64_t)1 << 20)

enum { MAX_BUF = 64, MAX_EV = 256 };

/* A schedule made by hand: each micro-step one forward and one backward
 * step (the same node), as the builder opens them. */
struct hand {
    struct dm_schedule s;
    struct dm_buffer buf[MAX_BUF];
    struct dm_event ev[MAX_EV];
    struct dm_step steps[MAX_EV];
};

static void hand_init(struct hand *h)
{
    memset(h, 0, sizeof *h);
    h->s.buf = h->buf;
    h->s.ev = h->ev;
    h->s.steps = h->steps;
    h->s.cap_buf = MAX_BUF;
    h->s.cap_ev = MAX_EV;
    h->s.cap_steps = MAX_EV;
}

static int32_t step(struct hand *h, enum dm_phase phase)
{
    h->steps[h->s.n_steps] = (struct dm_step){.phase = (uint8_t)phase, .iteration = 1, .node = 0};
    return h->s.n_steps++;
}

static int32_t alloc(struct hand *h, uint64_t bytes, int32_t st)
{
    int32_t b = h->s.n_buf++;
    h->buf[b] = (struct dm_buffer){.bytes = bytes, .tensor = -1, .node = 0,
                                   .category = DNNMEM_CAT_ACTIVATION, .what = "act"};
    h->ev[h->s.n_ev++] = (struct dm_event){.kind = DM_EV_ALLOC, .buf = b, .step = st};
    return b;
}

static void release(struct hand *h, int32_t b, int32_t st)
{
    h->ev[h->s.n_ev++] = (struct dm_event){.kind = DM_EV_FREE, .buf = b, .step = st};
}

static struct dm_run run_of(bool caching, uint64_t capped)
{
    struct dm_run r;
    memset(&r, 0, sizeof r);
    r.train = true;
    r.fp = (struct dm_fp_opts){.on = true, .caching = caching, .round = 512, .capped = capped};
    return r;
}

/* A weight of 4 MiB made before the first micro-step, a gradient of 4 MiB
 * made by the first, and each micro-step's activation of 8 MiB made and
 * freed. Caching allocator: the weight splits a 20 MiB segment (4 + 16
 * free), the gradient the rest (4 + 12 free), each activation takes 8 of
 * the 12 MiB and merges back: the same blocks after micro-steps 1, 2, 3.
 * Micro-step 1 differs from 2 (the gradient), 3 repeats 2: the test holds
 * at the start of micro-step 4 and not before. */
static bool grad_then_repeat(bool caching, uint64_t capped, int *held_at)
{
    struct hand h;
    hand_init(&h);
    struct dm_run run = run_of(caching, capped);
    struct dm_fp *f = dm_fp_new(&run);
    assert_non_null(f);
    alloc(&h, 4 * MiB, step(&h, DM_PHASE_SETUP));
    *held_at = 0;
    for (int micro = 1; micro <= 5 && !*held_at; micro++) {
        if (dm_fp_boundary(f, &h.s))
            *held_at = micro;
        int32_t fw = step(&h, DM_PHASE_FORWARD), bw = step(&h, DM_PHASE_BACKWARD);
        if (micro == 1)
            h.buf[alloc(&h, 4 * MiB, bw)].category = DNNMEM_CAT_GRADIENT;
        release(&h, alloc(&h, 8 * MiB, fw), bw);
    }
    dm_fp_free(f);
    return *held_at != 0;
}

static void test_fixpoint_repeat(void **state)
{
    (void)state;
    int at;
    assert_true(grad_then_repeat(true, 0, &at));
    assert_int_equal(at, 4);
    assert_true(grad_then_repeat(false, 0, &at)); /* the rounding allocator: the same */
    assert_int_equal(at, 4);
    /* capped at 16 MiB: the capped allocator fails at the weight's 20 MiB
     * segment (as the verdict's replay would, before any micro-step), and is
     * not compared after */
    assert_true(grad_then_repeat(true, 16 * MiB, &at));
    assert_int_equal(at, 4);
}

/* Each micro-step makes its activation x_k (8 MiB) and frees the previous
 * one's (an output held into the next forward): the same events, renamed,
 * from micro-step 2 on. Caching allocator: x_1 at A (a 20 MiB segment at A:
 * x_1 at A, 12 MiB free at A + 8); x_2 takes the best fit, A + 8, then x_1
 * is freed (free: A 8 MiB, A + 16 4 MiB); x_3 takes A (exact fit), x_2 is
 * freed and merges (free: A + 8, 12 MiB); x_4 takes A + 8 ... The blocks
 * alternate between two states and never repeat from one micro-step to the
 * next: no fixed point, every micro-step is replayed. The rounding
 * allocator has no addresses: 8 MiB in use after each, a fixed point at the
 * start of micro-step 4 (micro-steps 2 and 3 compared). */
static int alternate(bool caching)
{
    struct hand h;
    hand_init(&h);
    struct dm_run run = run_of(caching, 0);
    struct dm_fp *f = dm_fp_new(&run);
    assert_non_null(f);
    int held_at = 0;
    int32_t prev = -1;
    for (int micro = 1; micro <= 8 && !held_at; micro++) {
        if (dm_fp_boundary(f, &h.s))
            held_at = micro;
        int32_t fw = step(&h, DM_PHASE_FORWARD), bw = step(&h, DM_PHASE_BACKWARD);
        int32_t x = alloc(&h, 8 * MiB, fw);
        if (prev >= 0)
            release(&h, prev, bw);
        prev = x;
    }
    dm_fp_free(f);
    return held_at;
}

static void test_fixpoint_alternating_blocks(void **state)
{
    (void)state;
    assert_int_equal(alternate(true), 0);
    assert_int_equal(alternate(false), 4);
}

/* Micro-steps alike but for the activation's size in micro-step 2
 * (8 MiB + 512 B): 1 and 2 differ, 2 and 3 too, 3 and 4 repeat; the
 * rounding allocator then holds at the start of micro-step 5 (without the
 * odd size, at the start of 3: 1 and 2 compared). */
static void test_fixpoint_sizes_differ(void **state)
{
    (void)state;
    struct hand h;
    hand_init(&h);
    struct dm_run run = run_of(false, 0);
    struct dm_fp *f = dm_fp_new(&run);
    int held_at = 0;
    for (int micro = 1; micro <= 6 && !held_at; micro++) {
        if (dm_fp_boundary(f, &h.s))
            held_at = micro;
        int32_t fw = step(&h, DM_PHASE_FORWARD), bw = step(&h, DM_PHASE_BACKWARD);
        release(&h, alloc(&h, 8 * MiB + (micro == 2 ? 512 : 0), fw), bw);
    }
    dm_fp_free(f);
    assert_int_equal(held_at, 5);
    /* off: no state, never holds */
    struct dm_run off = run_of(false, 0);
    off.fp.on = false;
    assert_null(dm_fp_new(&off));
    assert_false(dm_fp_boundary(NULL, &h.s));
}

/* ---- whole estimates and plans, both ways ------------------------------------ */

static void same_result(const struct dnnmem_result *a, const struct dnnmem_result *b)
{
    assert_int_equal(a->total_bytes, b->total_bytes);
    assert_int_equal(a->peak_allocated, b->peak_allocated);
    assert_int_equal(a->peak_reserved, b->peak_reserved);
    assert_int_equal(a->peak_requested, b->peak_requested);
    assert_int_equal(a->slack_bytes, b->slack_bytes);
    assert_int_equal(a->segments, b->segments);
    assert_int_equal(a->fragmentation_bytes, b->fragmentation_bytes);
    assert_int_equal(a->rounding_bytes, b->rounding_bytes);
    assert_int_equal(a->verdict, b->verdict);
    assert_int_equal(a->margin_bytes, b->margin_bytes);
    assert_int_equal(a->alloc_retries, b->alloc_retries);
    assert_int_equal(a->largest_category, b->largest_category);
    assert_memory_equal(a->category_bytes, b->category_bytes, sizeof a->category_bytes);
    assert_memory_equal(a->category_count, b->category_count, sizeof a->category_count);
    assert_string_equal(a->peak_phase, b->peak_phase);
    assert_int_equal(a->peak_iteration, b->peak_iteration);
    assert_string_equal(a->peak_node, b->peak_node);
    assert_string_equal(a->peak_op, b->peak_op);
    assert_int_equal(a->n_live_total, b->n_live_total);
    assert_int_equal(a->n_live, b->n_live);
    for (size_t k = 0; k < a->n_live; k++) {
        assert_string_equal(a->live[k].name, b->live[k].name);
        assert_int_equal(a->live[k].bytes, b->live[k].bytes);
        assert_int_equal(a->live[k].allocated, b->live[k].allocated);
    }
}

static dnnmem_model *load(const char *path)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK)
        fail_msg("load %s: %s", path, err.message);
    return m;
}

/* One estimate both ways: the same result, and `left_out` micro-steps not
 * replayed the fast way. */
static void both_ways(const dnnmem_model *m, struct dnnmem_config c, size_t left_out)
{
    struct dnnmem_result *full, *fast;
    struct dnnmem_error err;
    c.accum_fixed_point = false;
    if (dnnmem_estimate(m, &c, &full, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    c.accum_fixed_point = true;
    if (dnnmem_estimate(m, &c, &fast, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    same_result(full, fast);
    assert_int_equal(full->micro_steps_left_out, 0);
    assert_int_equal(fast->micro_steps_left_out, left_out);
    dnnmem_result_free(full);
    dnnmem_result_free(fast);
}

static void test_fixpoint_estimates(void **state)
{
    (void)state;
    dnnmem_model *m = load("tests/models/dist/tfm4.onnx");
    struct dnnmem_config c;
    dnnmem_config_init(&c);
    c.mode = DNNMEM_MODE_TRAIN;
    c.device = DNNMEM_DEVICE_CPU; /* the rounding allocator */
    c.batch_size = 2;
    c.optimizer = DNNMEM_OPT_ADAM;
    c.grad_accum = 8;
    /* 2 optimizer steps (the default iterations) x micro-steps 4..7: the
     * test holds at the start of micro-step 4 (2 and 3 compared), and the
     * last is built */
    both_ways(m, c, 8);
    c.device = DNNMEM_DEVICE_CUDA; /* the caching allocator, and the capped one */
    c.capacity_bytes = (int64_t)1 << 34;
    both_ways(m, c, 8);
    c.capacity_bytes = (int64_t)1 << 20; /* over it: the verdict's capped replay decides */
    both_ways(m, c, 8);
    c.capacity_bytes = 0;
    c.grad_accum = 3; /* too few to leave any out */
    both_ways(m, c, 0);
    c.grad_accum = 8;
    c.timeline = true; /* a timeline shows every micro-step: none left out */
    both_ways(m, c, 0);
    dnnmem_model_free(m);
}

static void same_plan(const struct dnnmem_plan *a, const struct dnnmem_plan *b)
{
    assert_int_equal(a->n_candidates, b->n_candidates);
    assert_int_equal(a->n_estimated, b->n_estimated);
    assert_int_equal(a->n_refused, b->n_refused);
    assert_int_equal(a->n_over, b->n_over);
    assert_int_equal(a->n_skipped, b->n_skipped);
    assert_int_equal(a->gpus, b->gpus);
    assert_int_equal(a->n_rows, b->n_rows);
    for (size_t k = 0; k < a->n_rows; k++) {
        const struct dnnmem_plan_row *x = &a->rows[k], *y = &b->rows[k];
        assert_string_equal(x->options, y->options);
        assert_int_equal(x->total_bytes, y->total_bytes);
        assert_int_equal(x->peak_allocated, y->peak_allocated);
        assert_int_equal(x->margin_bytes, y->margin_bytes);
        assert_int_equal(x->verdict, y->verdict);
        assert_int_equal(x->rank, y->rank);
        assert_memory_equal(x->category_bytes, y->category_bytes, sizeof x->category_bytes);
    }
}

/* A plan both ways: every row the same. */
static void plan_both_ways(const char *path, struct dnnmem_config c, int gpus, int64_t global,
                           size_t min_over)
{
    dnnmem_model *m = load(path);
    struct dnnmem_plan_options po;
    dnnmem_plan_options_init(&po);
    po.gpus = gpus;
    po.global_batch = global;
    struct dnnmem_plan *p[2];
    struct dnnmem_error err;
    for (int k = 0; k < 2; k++) {
        po.every_micro_step = k == 1;
        if (dnnmem_plan(m, &c, &po, &p[k], &err) != DNNMEM_OK)
            fail_msg("plan %s: %s", path, err.message);
    }
    if (!p[0]->n_rows || p[0]->n_over < min_over)
        fail_msg("plan %s: %zu rows, %zu over", path, p[0]->n_rows, p[0]->n_over);
    same_plan(p[0], p[1]);
    dnnmem_plan_free(p[0]);
    dnnmem_plan_free(p[1]);
    dnnmem_model_free(m);
}

static void test_fixpoint_plans(void **state)
{
    (void)state;
    struct dnnmem_config c;
    dnnmem_config_init(&c);
    c.mode = DNNMEM_MODE_TRAIN;
    c.device = DNNMEM_DEVICE_CPU;
    c.capacity_bytes = (int64_t)1 << 30;
    /* 4 blocks: DDP, ZeRO, FSDP, TP, PP (1F1B) up to 32 micro-steps */
    plan_both_ways("tests/models/dist/tfm4.onnx", c, 8, 256, 0);
    c.device = DNNMEM_DEVICE_CUDA;
    c.capacity_bytes = (int64_t)40 << 30;
    plan_both_ways("tests/models/dist/tfm4.onnx", c, 8, 256, 0);
    c.capacity_bytes = (int64_t)1 << 30; /* 0.6-3.1 GiB: 81 over, the capped replays */
    plan_both_ways("tests/models/dist/cnn4.onnx", c, 4, 128, 80);
    c.capacity_bytes = (int64_t)80 << 30;
    c.seq_len = 128;
    plan_both_ways("tests/models/hf/tiny-llama-gqa.json", c, 8, 128, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixpoint_repeat),
        cmocka_unit_test(test_fixpoint_alternating_blocks),
        cmocka_unit_test(test_fixpoint_sizes_differ),
        cmocka_unit_test(test_fixpoint_estimates),
        cmocka_unit_test(test_fixpoint_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
