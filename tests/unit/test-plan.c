/*
 * test-plan.c: dnnmem_plan (src/report/plan.c), on the 2-layer MLP of
 * test-parallel.c, on the CPU (host memory: bytes as requested, no
 * allocator rounding):
 *   W1 [16, 1024] float32: 65,536 B; W2 [1024, 10]: 40,960 B; 26,624
 *   parameters, 106,496 B. No repeated block: no checkpointing, no PP.
 */
#include "util.h"

#define F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT

static dnnmem_model *mlp(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,16");
    tb_init(b, "W1", F32, 2, (int64_t[]){16, 1024});
    tb_init(b, "W2", F32, 2, (int64_t[]){1024, 10});
    tb_node(b, "MatMul", "/fc1/MatMul", "x,W1", "h");
    tb_node(b, "Relu", "/relu/Relu", "h", "a");
    tb_node(b, "MatMul", "/fc2/MatMul", "a,W2", "y");
    tb_output(b, "y");
    dnnmem_model *m;
    struct dnnmem_error err;
    if (tb_load(b, &m, &err) != DNNMEM_OK)
        fail_msg("load: %s", err.message);
    tb_free(b);
    return m;
}

static struct dnnmem_config cfg_of(int64_t capacity)
{
    struct dnnmem_config c;
    dnnmem_config_init(&c);
    c.mode = DNNMEM_MODE_TRAIN;
    c.device = DNNMEM_DEVICE_CPU;
    c.batch_size = 4;
    c.optimizer = DNNMEM_OPT_ADAM;
    c.capacity_bytes = capacity;
    return c;
}

static uint64_t total_of(const dnnmem_model *m, const struct dnnmem_config *c)
{
    struct dnnmem_result *r;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, c, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    uint64_t t = r->total_bytes;
    dnnmem_result_free(r);
    return t;
}

static struct dnnmem_plan *plan_of(const dnnmem_model *m, const struct dnnmem_config *c,
                                   const struct dnnmem_plan_options *po)
{
    struct dnnmem_plan *p = NULL;
    struct dnnmem_error err;
    if (dnnmem_plan(m, c, po, &p, &err) != DNNMEM_OK)
        fail_msg("plan: %s", err.message);
    return p;
}

/* The row's configuration, rebuilt from its fields, as dnnmem_estimate
 * takes it: each row is the engine's own estimate of it. */
static void row_config(const struct dnnmem_plan_row *row, struct dnnmem_config *c)
{
    c->par.gpus = row->gpus;
    c->par.tp = row->tp;
    c->par.pp = row->pp;
    c->par.zero = row->zero;
    c->par.fsdp = row->fsdp;
    c->par.offload = row->offload;
    c->batch_size = row->micro_batch;
    c->grad_accum = row->grad_accum;
}

/* 4 GPUs, batch 4 per rank. Candidates by hand: TP 1 with the 10
 * engines (no hybrid on one node) x the micro-batches 4, 2, 1 (grad-accum
 * 1, 2, 4): 30; TP 2 (DP 2) and TP 4 (DP 1), DDP only: 3 each; 36 in all.
 * DDP's rank holds one process's peak plus the Reducer's bucket, the
 * parameters' 106,496 B (rule D1, test-parallel.c's test_ddp): at exactly
 * that capacity DDP at micro-batch 4 is the first row (tight: no margin);
 * one byte less and it is not a row, and every row left is one that fits. */
static void test_plan_ddp_edge(void **state)
{
    (void)state;
    dnnmem_model *m = mlp();
    struct dnnmem_config one = cfg_of(0);
    uint64_t single = total_of(m, &one);
    uint64_t ddp = single + 106496;
    struct dnnmem_plan_options po;
    dnnmem_plan_options_init(&po);
    po.gpus = 4;

    struct dnnmem_config c = cfg_of((int64_t)ddp);
    struct dnnmem_plan *p = plan_of(m, &c, &po);
    assert_int_equal(p->n_candidates, 36);
    assert_int_equal(p->n_estimated, 36);
    assert_int_equal(p->n_refused, 0);
    assert_false(p->truncated);
    assert_int_equal(p->gpus, 4);
    assert_true(p->n_rows > 0);
    const struct dnnmem_plan_row *r0 = &p->rows[0];
    assert_int_equal(r0->dp, 4);
    assert_int_equal(r0->tp, 1);
    assert_int_equal(r0->zero, 0);
    assert_int_equal(r0->fsdp, DNNMEM_FSDP_NONE);
    assert_int_equal(r0->micro_batch, 4);
    assert_int_equal(r0->grad_accum, 1);
    assert_int_equal(r0->global_batch, 16);
    assert_int_equal(r0->total_bytes, ddp);
    assert_int_equal(r0->verdict, DNNMEM_VERDICT_TIGHT);
    assert_string_equal(r0->options, "--gpus 4 --batch-size 4");
    assert_int_equal(p->n_rows + p->n_over, 36);
    dnnmem_plan_free(p);

    c.capacity_bytes = (int64_t)ddp - 1;
    p = plan_of(m, &c, &po);
    assert_true(p->n_over >= 1);
    assert_int_equal(p->n_rows + p->n_over, 36);
    int prev_tier = -1, prev_mp = 0;
    for (size_t k = 0; k < p->n_rows; k++) {
        const struct dnnmem_plan_row *r = &p->rows[k];
        assert_false(r->tp == 1 && r->zero == 0 && r->fsdp == DNNMEM_FSDP_NONE && r->micro_batch == 4);
        assert_true(r->total_bytes <= ddp - 1);
        /* the order: model-parallel size, then the engine's tier */
        assert_true(r->tp * r->pp >= prev_mp);
        if (r->tp * r->pp == prev_mp)
            assert_true(r->tier >= prev_tier);
        prev_mp = r->tp * r->pp;
        prev_tier = r->tier;
        struct dnnmem_config rc = cfg_of(c.capacity_bytes);
        row_config(r, &rc);
        assert_int_equal(total_of(m, &rc), r->total_bytes);
    }
    dnnmem_plan_free(p);
    dnnmem_model_free(m);
}

/* The fewest GPUs: at exactly one process's peak, 1 GPU, its first row the
 * single process (tight); at 1 KiB none on up to 2 GPUs, every estimate
 * over. */
static void test_plan_fewest(void **state)
{
    (void)state;
    dnnmem_model *m = mlp();
    struct dnnmem_config one = cfg_of(0);
    uint64_t single = total_of(m, &one);
    struct dnnmem_plan_options po;
    dnnmem_plan_options_init(&po);
    po.gpus = 8;
    po.fewest_gpus = true;
    struct dnnmem_config c = cfg_of((int64_t)single);
    struct dnnmem_plan *p = plan_of(m, &c, &po);
    assert_int_equal(p->gpus, 1);
    assert_int_equal(p->rows[0].gpus, 1);
    assert_int_equal(p->rows[0].total_bytes, single);
    assert_string_equal(p->rows[0].options, "--gpus 1 --batch-size 4");
    /* world of one: 10 engines x 3 micro-batches, no TP */
    assert_int_equal(p->n_candidates, 30);
    dnnmem_plan_free(p);
    /* nothing fits 1 KiB on up to 2 GPUs: no rows, every estimate over */
    c.capacity_bytes = 1024;
    po.gpus = 2;
    p = plan_of(m, &c, &po);
    assert_int_equal(p->gpus, 0);
    assert_int_equal(p->n_rows, 0);
    assert_int_equal(p->n_over, p->n_estimated);
    /* 1 GPU: 30; 2 GPUs: 30 + TP 2's 3 */
    assert_int_equal(p->n_candidates, 63);
    dnnmem_plan_free(p);
    dnnmem_model_free(m);
}

/* The global batch: 8 samples on 4 GPUs are 2 per DP rank under TP 1
 * (micro-batches 2, 1), 4 under TP 2, 8 under TP 4; --max-steps bounds
 * the estimates. */
static void test_plan_global_batch(void **state)
{
    (void)state;
    dnnmem_model *m = mlp();
    struct dnnmem_plan_options po;
    dnnmem_plan_options_init(&po);
    po.gpus = 4;
    po.global_batch = 8;
    struct dnnmem_config c = cfg_of((int64_t)1 << 40);
    struct dnnmem_plan *p = plan_of(m, &c, &po);
    /* TP 1: 10 x 2; TP 2: 1 x 3 (4 = 4, 2x2, 1x4); TP 4: 1 x 4 (8, 4, 2, 1) */
    assert_int_equal(p->n_candidates, 20 + 3 + 4);
    assert_int_equal(p->n_rows, 27);
    for (size_t k = 0; k < p->n_rows; k++)
        assert_int_equal(p->rows[k].global_batch, 8);
    dnnmem_plan_free(p);
    po.max_steps = 5;
    p = plan_of(m, &c, &po);
    assert_int_equal(p->n_estimated, 5);
    assert_int_equal(p->n_rows, 5);
    assert_true(p->truncated);
    dnnmem_plan_free(p);
    dnnmem_model_free(m);
}

/* Adam's state per rank, by hand, in each row at 4 GPUs (the bytes at the
 * peak, the rows' category_bytes): one process, DDP and FSDP no-shard keep
 * exp_avg and exp_avg_sq of the whole parameters (2 x 106,496 B) and
 * torch.optim.Adam's 0-dim float32 `step` per parameter (2 x 4 B); FSDP
 * full and shard-grad-op the same of each parameter's dim-0 chunk (W1 4 of
 * 16 rows, 16,384 B; W2 256 of 1024, 10,240 B: 2 x 26,624 + 8 B); ZeRO-1 and
 * 2 the fp32 master copy and both states of a 6,656-element partition of
 * the flat group (3 x 26,624 B: test-parallel.c's test_zero); ZeRO-3 at
 * DeepSpeed's default stage3_param_persistence_threshold (1e5 elements)
 * keeps both parameters (16,384 and 10,240 elements) whole, so the whole
 * group's 3 x 106,496 B; with the optimizer offloaded, none on the device. */
static void test_plan_zero_state(void **state)
{
    (void)state;
    dnnmem_model *m = mlp();
    struct dnnmem_plan_options po;
    dnnmem_plan_options_init(&po);
    po.gpus = 4;
    struct dnnmem_config c = cfg_of((int64_t)1 << 40);
    struct dnnmem_plan *p = plan_of(m, &c, &po);
    assert_int_equal(p->n_rows, 36);
    size_t seen = 0;
    for (size_t k = 0; k < p->n_rows; k++) {
        const struct dnnmem_plan_row *r = &p->rows[k];
        if (r->tp > 1)
            continue;
        bool chunked = r->fsdp == DNNMEM_FSDP_FULL || r->fsdp == DNNMEM_FSDP_SHARD_GRAD_OP;
        uint64_t want = r->offload     ? 0
                        : r->zero == 3 ? 3 * 106496
                        : r->zero      ? 3 * 26624
                        : chunked      ? 2 * 26624 + 8
                                       : 2 * 106496 + 8;
        if (r->category_bytes[DNNMEM_CAT_OPTIMIZER] != want)
            fail_msg("%s: optimizer state %llu B, want %llu", r->options,
                     (unsigned long long)r->category_bytes[DNNMEM_CAT_OPTIMIZER], (unsigned long long)want);
        seen++;
    }
    assert_int_equal(seen, 30);
    dnnmem_plan_free(p);
    dnnmem_model_free(m);
}

static void expect_plan_error(const dnnmem_model *m, const struct dnnmem_config *c,
                              const struct dnnmem_plan_options *po, enum dnnmem_status want,
                              const char *needle)
{
    struct dnnmem_plan *p = (struct dnnmem_plan *)1;
    struct dnnmem_error err;
    assert_int_equal(dnnmem_plan(m, c, po, &p, &err), want);
    assert_null(p);
    if (!strstr(err.message, needle))
        fail_msg("'%s' not in '%s'", needle, err.message);
}

static void test_plan_errors(void **state)
{
    (void)state;
    dnnmem_model *m = mlp();
    struct dnnmem_plan_options po;
    dnnmem_plan_options_init(&po);
    po.gpus = 4;
    struct dnnmem_config c = cfg_of(0);
    expect_plan_error(m, &c, &po, DNNMEM_E_USAGE, "--gpu NAME or --memory SIZE");
    c = cfg_of(1 << 30);
    c.grad_accum = 2;
    expect_plan_error(m, &c, &po, DNNMEM_E_USAGE, "--grad-accum (the micro-steps come from");
    c = cfg_of(1 << 30);
    c.par.rank = 1;
    expect_plan_error(m, &c, &po, DNNMEM_E_USAGE, "--rank (each row is its most loaded rank)");
    c = cfg_of(1 << 30);
    c.mode = DNNMEM_MODE_INFER;
    expect_plan_error(m, &c, &po, DNNMEM_E_USAGE, "--mode train");
    c = cfg_of(1 << 30);
    po.max_steps = DNNMEM_PLAN_MAX_STEPS + 1;
    expect_plan_error(m, &c, &po, DNNMEM_E_USAGE, "--max-steps 1001");
    po.max_steps = 0;
    /* 3 GPUs in nodes of 2: no world of whole nodes */
    c.par.gpus_per_node = 2;
    po.gpus = 3;
    expect_plan_error(m, &c, &po, DNNMEM_E_CONSTRAINT, "no configuration of whole nodes");
    dnnmem_model_free(m);
}

/* The rows of a plan under one constraint: how many, and each with it. */
static struct dnnmem_plan *constrained(const dnnmem_model *m, const struct dnnmem_config *c,
                                       const struct dnnmem_plan_options *po, size_t want_rows)
{
    struct dnnmem_plan *p = plan_of(m, c, po);
    assert_int_equal(p->n_refused, 0);
    assert_int_equal(p->n_candidates, want_rows);
    assert_int_equal(p->n_rows, want_rows);
    return p;
}

/* Fixed parallel options restrict the search (4 GPUs, 4 samples per rank,
 * the micro-batches 4, 2, 1 as in test_plan_ddp_edge). --zero 3: ZeRO-3
 * and its two offloads (tiers 6, 9, 10), TP 1 only (TP runs under DDP):
 * 3 x 3 rows; --fsdp full: 1 x 3; --tp 2: DP 2, DDP: 3; --tp 4 with
 * --fewest-gpus on up to 8: only the world of 4 (1, 2, 3 do not take TP
 * 4), DP 1: 3; --checkpoint '/fc*' (fc1 and fc2 two segments): every one of
 * test_plan_ddp_edge's 36 with it on. */
static void test_plan_constraints(void **state)
{
    (void)state;
    dnnmem_model *m = mlp();
    struct dnnmem_plan_options po;
    dnnmem_plan_options_init(&po);
    po.gpus = 4;
    struct dnnmem_config c = cfg_of((int64_t)1 << 40);
    c.par.zero = 3;
    struct dnnmem_plan *p = constrained(m, &c, &po, 9);
    static const enum dnnmem_offload off[3] = {DNNMEM_OFFLOAD_NONE, DNNMEM_OFFLOAD_OPTIMIZER,
                                                DNNMEM_OFFLOAD_PARAMS};
    for (size_t k = 0; k < p->n_rows; k++) {
        const struct dnnmem_plan_row *r = &p->rows[k];
        assert_int_equal(r->zero, 3);
        assert_int_equal(r->tp, 1);
        assert_int_equal(r->offload, off[k / 3]);
        struct dnnmem_config rc = cfg_of(c.capacity_bytes);
        row_config(r, &rc);
        assert_int_equal(total_of(m, &rc), r->total_bytes);
    }
    assert_string_equal(p->rows[0].options, "--gpus 4 --zero 3 --batch-size 4");
    dnnmem_plan_free(p);

    c = cfg_of((int64_t)1 << 40);
    c.par.fsdp = DNNMEM_FSDP_FULL;
    p = constrained(m, &c, &po, 3);
    for (size_t k = 0; k < p->n_rows; k++)
        assert_int_equal(p->rows[k].fsdp, DNNMEM_FSDP_FULL);
    dnnmem_plan_free(p);

    c = cfg_of((int64_t)1 << 40);
    c.par.tp = 2;
    p = constrained(m, &c, &po, 3);
    for (size_t k = 0; k < p->n_rows; k++) {
        assert_int_equal(p->rows[k].tp, 2);
        assert_int_equal(p->rows[k].dp, 2);
        assert_int_equal(p->rows[k].zero, 0);
    }
    dnnmem_plan_free(p);

    c.par.tp = 4;
    po.gpus = 8;
    po.fewest_gpus = true;
    p = constrained(m, &c, &po, 3);
    assert_int_equal(p->gpus, 4);
    assert_int_equal(p->rows[0].tp, 4);
    assert_int_equal(p->rows[0].dp, 1);
    assert_string_equal(p->rows[0].options, "--gpus 4 --tp 4 --batch-size 4");
    dnnmem_plan_free(p);

    po.gpus = 4;
    po.fewest_gpus = false;
    c = cfg_of((int64_t)1 << 40);
    const char *spec = "/fc*";
    c.checkpoint = &spec;
    c.n_checkpoint = 1;
    p = constrained(m, &c, &po, 36);
    for (size_t k = 0; k < p->n_rows; k++) {
        assert_true(p->rows[k].checkpoint);
        assert_non_null(strstr(p->rows[k].options, " --checkpoint '/fc*'"));
    }
    dnnmem_plan_free(p);
    dnnmem_model_free(m);
}

/* Constraints no configuration has: refused before any estimate, named. */
static void test_plan_constraint_errors(void **state)
{
    (void)state;
    dnnmem_model *m = mlp();
    struct dnnmem_plan_options po;
    dnnmem_plan_options_init(&po);
    po.gpus = 4;
    struct dnnmem_config c = cfg_of(1 << 30);
    c.par.zero = 2;
    c.par.fsdp = DNNMEM_FSDP_FULL;
    expect_plan_error(m, &c, &po, DNNMEM_E_CONSTRAINT,
                      "plan: --zero 2 --fsdp full: no engine the plan forms has it");
    c = cfg_of(1 << 30);
    c.par.zero = 1;
    c.par.offload = DNNMEM_OFFLOAD_OPTIMIZER;
    expect_plan_error(m, &c, &po, DNNMEM_E_CONSTRAINT, "--zero 1 --offload optimizer: no engine");
    c = cfg_of(1 << 30);
    c.par.tp = 3;
    expect_plan_error(m, &c, &po, DNNMEM_E_CONSTRAINT,
                      "plan: --tp 3: TP x PP (3) does not divide --gpus 4");
    po.fewest_gpus = true; /* the worlds 1 to 4: TP 8 takes none */
    c.par.tp = 8;
    expect_plan_error(m, &c, &po, DNNMEM_E_CONSTRAINT, "TP x PP (8) does not divide --gpus 4");
    po.fewest_gpus = false;
    c.par.tp = 2;
    c.par.zero = 3;
    expect_plan_error(m, &c, &po, DNNMEM_E_UNSUPPORTED,
                      "plan: --zero 3 --tp 2: TP and PP with ZeRO, FSDP or offload are not modelled");
    c = cfg_of(1 << 30);
    c.par.fsdp = DNNMEM_FSDP_HYBRID;
    expect_plan_error(m, &c, &po, DNNMEM_E_CONSTRAINT, "--fsdp hybrid: replicates across nodes");
    c = cfg_of(1 << 30);
    c.par.pp = 2;
    expect_plan_error(m, &c, &po, DNNMEM_E_CONSTRAINT, "--pp 2: the plan splits the model's "
                      "repeated blocks evenly, and it has 0");
    dnnmem_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_ddp_edge),
        cmocka_unit_test(test_plan_fewest),
        cmocka_unit_test(test_plan_global_batch),
        cmocka_unit_test(test_plan_zero_state),
        cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_plan_constraints),
        cmocka_unit_test(test_plan_constraint_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
