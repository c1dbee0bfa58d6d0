/*
 * test-parallel.c: one data-parallel rank's step (src/train/parallel.c,
 * docs/parallel.md), on a 2-layer MLP whose sizes are worked by hand, on
 * the CPU (host memory: bytes as requested, no allocator rounding):
 *   W1 [16, 1024] float32: 65,536 B; W2 [1024, 10]: 40,960 B; 26,624
 *   parameters, 106,496 B.
 */
#include "util.h"

#define F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT

static struct tb *mlp(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,16");
    tb_init(b, "W1", F32, 2, (int64_t[]){16, 1024});
    tb_init(b, "W2", F32, 2, (int64_t[]){1024, 10});
    tb_node(b, "MatMul", "/fc1/MatMul", "x,W1", "h");
    tb_node(b, "Relu", "/relu/Relu", "h", "a");
    tb_node(b, "MatMul", "/fc2/MatMul", "a,W2", "y");
    tb_output(b, "y");
    return b;
}

static struct dnnmem_config cfg_of(enum dnnmem_optimizer opt)
{
    struct dnnmem_config c;
    dnnmem_config_init(&c);
    c.mode = DNNMEM_MODE_TRAIN;
    c.device = DNNMEM_DEVICE_CPU;
    c.batch_size = 4;
    c.optimizer = opt;
    return c;
}

/* DDP: the Reducer's bucket (all parameters at construction, rebuilt to the
 * same total at the second forward) is live for the whole run, so the peak
 * is one process's plus the parameters' bytes (measured so by mgpuoracle,
 * torch 2.13 gloo: +71,258,016 B for 71,258,016 B of parameters); with
 * gradient_as_bucket_view the .grad are the buckets' views and the grads'
 * own bytes go. */
static void test_ddp(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_SGD);
    struct dnnmem_result *one = estimate_cfg(mlp(), &c);
    c.par.gpus = 2;
    struct dnnmem_result *ddp = estimate_cfg(mlp(), &c);
    assert_int_equal(ddp->peak_allocated, one->peak_allocated + 106496);
    assert_int_equal(ddp->world_size, 2);
    assert_int_equal(ddp->global_batch, 8);
    assert_int_equal(ddp->n_ranks, 1);
    assert_int_equal(ddp->ranks[0].first, 0);
    assert_int_equal(ddp->ranks[0].last, 1);
    c.par.ddp_bucket_view = true;
    struct dnnmem_result *view = estimate_cfg(mlp(), &c);
    assert_true(view->peak_allocated < ddp->peak_allocated);
    /* by hand: one process's peak holds both grads (106,496 B); with the
     * bucket view the grads go as they are copied, the bucket stays, and
     * the largest grad (W1's 65,536 B) lives until its copy */
    assert_int_equal(view->peak_allocated, one->peak_allocated + 65536);
    dnnmem_result_free(one);
    dnnmem_result_free(ddp);
    dnnmem_result_free(view);
}

/* ZeRO-1 over 4 ranks with Adam: the flat group of 26,624 elements (a
 * multiple of 2 x 4) splits into partitions of 6,656; each rank keeps the
 * fp32 master copy and exp_avg, exp_avg_sq of it: 3 x 26,624 B of
 * optimizer state in all, whatever the stage. */
static void test_zero(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.gpus = 4;
    for (int stage = 1; stage <= 3; stage++) {
        c.par.zero = stage;
        c.par.zero_bucket_elems = 1000; /* a 4,000 B reduce bucket */
        c.par.zero_persist_elems = stage == 3 ? 0 : -1;
        struct dnnmem_result *r = estimate_cfg(mlp(), &c);
        assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 3 * 26624);
        if (stage == 3) /* ds_tensor: ceil(numel / 4) elements of each parameter */
            assert_true(r->category_bytes[DNNMEM_CAT_WEIGHT] >= 16384 + 10240);
        else
            assert_true(r->category_bytes[DNNMEM_CAT_WEIGHT] >= 106496);
        dnnmem_result_free(r);
    }
    /* ZeRO-1's grads_in_partition holds the whole parameters a rank's range
     * of the flat group touches: ranks 0 and 1 ([0, 6656), [6656, 13312))
     * W1 alone (16,384 elements), rank 2 W1 and W2 (26,624), rank 3 W2
     * (10,240); rank 0 and the heaviest, rank 2, are estimated */
    c.par.zero = 1;
    c.par.zero_persist_elems = -1;
    struct dnnmem_result *z1 = estimate_cfg(mlp(), &c);
    assert_int_equal(z1->n_ranks, 2);
    assert_int_equal(z1->ranks[0].first, 0);
    assert_int_equal(z1->ranks[1].first, 2);
    assert_true(z1->ranks[1].peak_allocated >= z1->ranks[0].peak_allocated);
    dnnmem_result_free(z1);
    c.par.zero = 2;
    c.par.offload = DNNMEM_OFFLOAD_OPTIMIZER;
    struct dnnmem_result *r = estimate_cfg(mlp(), &c);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 0);
    dnnmem_result_free(r);
}

/* FSDP full over 2 ranks, one unit per layer: each rank stores half of
 * each parameter's rows (32,768 + 20,480 B) and Adam's two states of it;
 * over 3 ranks W1's 16 rows chunk as 6, 6, 4 (torch.chunk) and W2's 1024 as
 * 342, 342, 340: the last rank's state is smaller, its storage padded. */
static void test_fsdp(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.gpus = 2;
    c.par.fsdp = DNNMEM_FSDP_FULL;
    c.par.fsdp_wrap = "/fc*";
    struct dnnmem_result *r = estimate_cfg(mlp(), &c);
    /* + Adam's 0-dim fp32 `step` per parameter, host memory on the CPU */
    assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 2 * (32768 + 20480) + 8);
    assert_int_equal(r->n_ranks, 1);
    dnnmem_result_free(r);
    c.par.gpus = 3;
    c.par.rank = 2;
    r = estimate_cfg(mlp(), &c);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 2 * (4 * 1024 * 4 + 340 * 10 * 4) + 8);
    dnnmem_result_free(r);
    c.par.rank = -1;
    r = estimate_cfg(mlp(), &c);
    assert_int_equal(r->n_ranks, 2);
    assert_int_equal(r->rank, 0);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 2 * (6 * 1024 * 4 + 342 * 10 * 4) + 8);
    dnnmem_result_free(r);
}

/* Tensor parallel over 2 ranks (src/graph/tp.c): fc1 is column-parallel
 * (W1 [16, 1024] as MatMul's [in, out]: its 1024 output columns split, a
 * [16, 512] shard of 32,768 B), fc2 row-parallel (W2's 1024 input rows
 * split, [512, 10], 20,480 B): 53,248 B of parameters per rank, their grads
 * and Adam's two states of them. The forward's all-reduce copy of y
 * ([4, 10], 160 B) is a transient; x needs no grad, so fc1's backward
 * all-reduces nothing. Over 4 GPUs the 2 tensor-parallel groups are DDP
 * replicas: D1's bucket adds the rank's parameter bytes. */
static void test_tp(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.gpus = 2;
    c.par.tp = 2;
    struct dnnmem_result *r = estimate_cfg(mlp(), &c);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], 53248);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 2 * 53248 + 8);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_GRADIENT], 53248);
    assert_int_equal(r->world_size, 2);
    assert_int_equal(r->global_batch, 4);
    assert_int_equal(r->n_ranks, 1);
    assert_int_equal(r->ranks[0].last, 1);
    c.par.gpus = 0; /* --tp alone: a world of the group */
    struct dnnmem_result *alone = estimate_cfg(mlp(), &c);
    assert_int_equal(alone->peak_allocated, r->peak_allocated);
    c.par.gpus = 4;
    struct dnnmem_result *ddp = estimate_cfg(mlp(), &c);
    assert_int_equal(ddp->peak_allocated, r->peak_allocated + 53248);
    assert_int_equal(ddp->global_batch, 8);
    dnnmem_result_free(r);
    dnnmem_result_free(alone);
    dnnmem_result_free(ddp);
}

/* T5: a column-parallel output read by a reduction as well as by the
 * row-parallel linear is a pairing not recognised: the error names the
 * node. */
static void test_tp_unpaired(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,16");
    tb_init(b, "W1", F32, 2, (int64_t[]){16, 1024});
    tb_init(b, "W2", F32, 2, (int64_t[]){1024, 10});
    tb_node(b, "MatMul", "/fc1/MatMul", "x,W1", "h");
    tb_node(b, "Relu", "/relu/Relu", "h", "a");
    tb_node(b, "MatMul", "/fc2/MatMul", "a,W2", "y");
    tb_node(b, "ReduceSum", "/sum/ReduceSum", "a", "s");
    tb_output(b, "y");
    tb_output(b, "s");
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_SGD);
    c.par.tp = 2;
    struct dnnmem_result *r = NULL;
    assert_int_equal(dnnmem_estimate(m, &c, &r, &err), DNNMEM_E_UNSUPPORTED);
    assert_msg_has(err, "node '/sum/ReduceSum' (ReduceSum) reads the column-parallel output of "
                        "'/fc1/MatMul'");
    dnnmem_model_free(m);
    tb_free(b);
}

/* Two residual blocks x + fc2(relu(fc1(x))) and a head: fc1 [16, 32] and
 * fc2 [32, 16] (2,048 B each, 4,096 B a block), the head [16, 10] (640 B). */
static struct tb *blocks2(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,16");
    const char *prev = "x";
    for (int k = 0; k < 2; k++) {
        char w1[16], w2[16], n[4][48], t[4][16];
        snprintf(w1, sizeof w1, "W%d1", k);
        snprintf(w2, sizeof w2, "W%d2", k);
        tb_init(b, w1, F32, 2, (int64_t[]){16, 32});
        tb_init(b, w2, F32, 2, (int64_t[]){32, 16});
        const char *ops[4] = {"MatMul", "Relu", "MatMul", "Add"};
        const char *mods[4] = {"fc1/MatMul", "act/Relu", "fc2/MatMul", "Add"};
        for (int j = 0; j < 4; j++) {
            snprintf(n[j], sizeof n[j], "/blocks.%d/%s", k, mods[j]);
            snprintf(t[j], sizeof t[j], "t%d%d", k, j);
        }
        char in0[40], in2[40], in3[40];
        snprintf(in0, sizeof in0, "%s,%s", prev, w1);
        snprintf(in2, sizeof in2, "%s,%s", t[1], w2);
        snprintf(in3, sizeof in3, "%s,%s", prev, t[2]);
        tb_node(b, ops[0], n[0], in0, t[0]);
        tb_node(b, ops[1], n[1], t[0], t[1]);
        tb_node(b, ops[2], n[2], in2, t[2]);
        tb_node(b, ops[3], n[3], in3, t[3]);
        prev = k == 0 ? "t03" : "t13";
    }
    tb_init(b, "Wh", F32, 2, (int64_t[]){16, 10});
    tb_node(b, "MatMul", "/head/MatMul", "t13,Wh", "y");
    tb_output(b, "y");
    return b;
}

/* Pipeline parallel over 2 stages (src/estimate/pipeline.c): stage 0 holds
 * blocks.0 (4,096 B of parameters; Adam's two states and two 4-byte steps:
 * 8,200 B), stage 1 blocks.1 and the head (4,736 B; 9,484 B). At batch 4 in
 * 2 micro-batches of 2 rows, stage 0's inputs are x's micro-batch [2, 16]
 * (128 B), its temporaries at the step's peak Adam's three W-sized ones
 * (W02's sqrt and denom while W01's denom is still bound to the loop's
 * local: 3 x 2,048 B) and the 2 receive buffers of its output's grad
 * (2 x 128 B);
 * stage 1 receives 2 x 128 B of activations and holds the target (2 rows of
 * int64). At batch 64 in 4 micro-batches of 16 rows, one micro-batch's
 * forward leaves relu(fc1) [16, 32] (2,048 B, saved) and the stage output
 * [16, 16] (1,024 B): at stage 0's first backward GPipe holds the 3 others
 * in flight (3 x 3,072 B) with its own 2,048 B saved, 1F1B only
 * min(2 - 0, 4) - 1 = 1 other. */
static void test_pp(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.pp = 2;
    c.par.micro_batches = 2;
    struct dnnmem_result *r = estimate_cfg(blocks2(), &c);
    assert_int_equal(r->n_ranks, 2);
    assert_int_equal(r->rank, 1);
    assert_int_equal(r->world_size, 2);
    assert_int_equal(r->global_batch, 4);
    assert_true(r->ranks[0].peak_allocated < r->ranks[1].peak_allocated);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], 4736);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 2 * 4736 + 3 * 4);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_INPUT], 2 * 128 + 2 * 8);
    dnnmem_result_free(r);
    c.par.rank = 0;
    r = estimate_cfg(blocks2(), &c);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], 4096);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_OPTIMIZER], 2 * 4096 + 2 * 4);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_INPUT], 128);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_TEMPORARY], 3 * 2048 + 2 * 128);
    dnnmem_result_free(r);
    c.batch_size = 64;
    c.par.micro_batches = 4;
    c.par.pp_schedule = DNNMEM_PP_GPIPE;
    r = estimate_cfg(blocks2(), &c);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_SAVED], 3 * 3072 + 2048);
    dnnmem_result_free(r);
    c.par.pp_schedule = DNNMEM_PP_1F1B;
    r = estimate_cfg(blocks2(), &c);
    assert_int_equal(r->category_bytes[DNNMEM_CAT_SAVED], 1 * 3072 + 2048);
    dnnmem_result_free(r);
}

/* A view that names the heads (q.view(B, -1, 4, 4), self-attention of q
 * with itself): on a rank of 2 its -1 takes half the sequence instead of
 * half the heads, which no shape function can tell, and the back view
 * (B, 8, -1) even restores the row-parallel input's shape. The scores come
 * out [4, 4, 4, 4] where the whole model's are [4, 4, 8, 8]: not one dim
 * split by 2, and the check names that node. */
static void test_tp_named_heads(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,8,16");
    tb_init(b, "Wq", F32, 2, (int64_t[]){16, 16});
    tb_init(b, "Wo", F32, 2, (int64_t[]){16, 16});
    tb_init_i64(b, "heads", 4, (int64_t[]){0, -1, 4, 4});
    tb_init_i64(b, "merge", 3, (int64_t[]){0, 8, -1});
    tb_node(b, "MatMul", "/q/MatMul", "x,Wq", "q");
    tb_node(b, "Reshape", "/view/Reshape", "q,heads", "r");
    tb_node(b, "Transpose", "/t/Transpose", "r", "t");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 1, 3});
    tb_node(b, "Transpose", "/kt/Transpose", "r", "kt");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 3, 1});
    tb_node(b, "MatMul", "/scores/MatMul", "t,kt", "sc");
    tb_node(b, "Softmax", "/softmax/Softmax", "sc", "p");
    tb_node(b, "MatMul", "/pv/MatMul", "p,t", "o");
    tb_node(b, "Transpose", "/ot/Transpose", "o", "ob");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 1, 3});
    tb_node(b, "Reshape", "/merge/Reshape", "ob,merge", "m");
    tb_node(b, "MatMul", "/o/MatMul", "m,Wo", "y");
    tb_output(b, "y");
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_SGD);
    struct dnnmem_result *r = NULL;
    assert_int_equal(dnnmem_estimate(m, &c, &r, &err), DNNMEM_OK); /* whole, it runs */
    dnnmem_result_free(r);
    c.par.tp = 2;
    assert_int_equal(dnnmem_estimate(m, &c, &r, &err), DNNMEM_E_UNSUPPORTED);
    assert_msg_has(err, "node '/scores/MatMul' (MatMul) makes 'sc' [4,4,4,4] on a rank, the whole "
                        "model [4,4,8,8]");
    dnnmem_model_free(m);
    tb_free(b);
}

/* The alloc events of buffers named `name` (exactly): their count, and
 * whether each is `bytes` B. */
static size_t allocs_of(const struct dnnmem_result *r, const char *name, uint64_t bytes, bool *all_sized)
{
    size_t n = 0;
    *all_sized = true;
    for (size_t e = 0; e < r->n_events; e++)
        if (r->events[e].alloc && r->events[e].buffer && strcmp(r->events[e].buffer, name) == 0) {
            n++;
            *all_sized &= r->events[e].bytes == bytes;
        }
    return n;
}

/* A pre-LN block as the measured tfm4's MLP half, then the head after the
 * mean over the sequence: x [4, 8, 16] float32 (2,048 B), ln over 16
 * (weight and bias [16]), fc1 [16, 32], ReLU, fc2 [32, 16], the residual
 * add, ReduceMean over dim 1, head [16, 10]. `seq` sets the sequence. */
static struct tb *sp_block(const char *dims, const char *mid_op)
{
    struct tb *b = tb_new(14);
    tb_input(b, "x", F32, dims);
    tb_init(b, "g", F32, 1, (int64_t[]){16});
    tb_init(b, "be", F32, 1, (int64_t[]){16});
    tb_init(b, "W1", F32, 2, (int64_t[]){16, 32});
    tb_init(b, "W2", F32, 2, (int64_t[]){32, 16});
    tb_init(b, "Wh", F32, 2, (int64_t[]){16, 10});
    tb_node(b, "LayerNormalization", "/ln/LayerNormalization", "x,g,be", "h");
    tb_attr_int(b, "axis", -1);
    tb_node(b, "MatMul", "/fc1/MatMul", "h,W1", "a");
    tb_node(b, "Relu", "/act/Relu", "a", "r");
    tb_node(b, "MatMul", "/fc2/MatMul", "r,W2", "y");
    tb_node(b, "Add", "/Add", "x,y", "z");
    if (mid_op) { /* a reader of the split z that S2 does not pass */
        tb_node(b, mid_op, "/odd/Transpose", "z", "zt");
        tb_attr_ints(b, "perm", 3, (int64_t[]){0, 2, 1});
        tb_node(b, "ReduceMean", "/mean/ReduceMean", "zt", "p");
        tb_attr_ints(b, "axes", 1, (int64_t[]){2});
    } else {
        tb_node(b, "ReduceMean", "/mean/ReduceMean", "z", "p");
        tb_attr_ints(b, "axes", 1, (int64_t[]){1});
    }
    tb_attr_int(b, "keepdims", 0);
    tb_node(b, "MatMul", "/head/MatMul", "p,Wh", "out");
    tb_output(b, "out");
    return b;
}

/* Sequence parallel (--sp, src/graph/tp.c S1-S5, T8 in src/train/parallel.c)
 * on sp_block at TP 2, worked by hand. Under plain TP fc1's input h is whole
 * on each rank, [4, 8, 16] (2,048 B), and fc2's output is all-reduced through
 * a 2,048 B copy. Under SP the rank holds x, h and z at [4, 4, 16] (1,024 B
 * each), so the ln's output is 1,024 B; fc1 all-gathers h into its whole
 * 2,048 B, which it keeps for W1's grad, with the dim-0 gather's 2,048 B
 * output beside it; fc2's Partial output (2,048 B) is reduce-scattered: the
 * chunks' cat (2,048 B), the 1,024 B output and gloo's 2,048 B copy. In the
 * backward fc2's output grad (1,024 B) is gathered to 2,048 B, and h's grad
 * is reduce-scattered from its whole 2,048 B (h needs a grad: the ln's
 * weights do). Two iterations: each buffer twice. The parameters are
 * TP's: W1 [16, 16] and W2 [16, 16] (1,024 B each), the ln's and head's
 * whole (64 + 64 + 640 B). */
static void test_sp(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_SGD);
    c.par.tp = 2;
    c.events = true;
    struct dnnmem_result *tp = estimate_cfg(sp_block("batch,8,16", NULL), &c);
    bool sized;
    assert_int_equal(allocs_of(tp, "y.tensor parallel: all-reduce of the row-parallel output", 2048,
                               &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(tp, "h", 2048, &sized), 2); /* the ln's output, whole */
    assert_true(sized);
    assert_int_equal(allocs_of(tp, "h.sequence parallel: all-gathered input", 2048, &sized), 0);
    c.par.sp = true;
    struct dnnmem_result *sp = estimate_cfg(sp_block("batch,8,16", NULL), &c);
    assert_int_equal(sp->category_bytes[DNNMEM_CAT_WEIGHT], 1024 + 1024 + 64 + 64 + 640);
    assert_int_equal(allocs_of(sp, "y.tensor parallel: all-reduce of the row-parallel output", 2048,
                               &sized), 0);
    assert_int_equal(allocs_of(sp, "h", 1024, &sized), 2); /* the ln's output, split */
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "z", 1024, &sized), 2); /* the residual add's */
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "h.sequence parallel: all-gathered input", 2048, &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "h.sequence parallel: all-gather output (dim 0)", 2048, &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "y.sequence parallel: the row-parallel Partial output", 2048,
                               &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "y.sequence parallel: reduce-scatter's cat of the chunks", 2048,
                               &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "y.sequence parallel: reduce-scatter output", 1024, &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "y.sequence parallel: gloo's copy of the input", 2048, &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "y.sequence parallel: all-gathered output grad", 2048, &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "y.sequence parallel: all-gather output (dim 0)", 2048, &sized), 2);
    assert_true(sized);
    /* h's grad: 1,024 B from the backward rule and its whole sequence's other 1,024 B */
    assert_int_equal(allocs_of(sp, "h.sequence parallel: the input grad's whole sequence", 1024,
                               &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "h.sequence parallel: reduce-scatter's cat of the input grad",
                               2048, &sized), 2);
    assert_true(sized);
    assert_int_equal(allocs_of(sp, "h.sequence parallel: reduce-scatter output", 1024, &sized), 2);
    assert_true(sized);
    /* on CUDA (NCCL) no gloo copy */
    c.device = DNNMEM_DEVICE_CUDA;
    struct dnnmem_result *cu = estimate_cfg(sp_block("batch,8,16", NULL), &c);
    assert_int_equal(allocs_of(cu, "y.sequence parallel: gloo's copy of the input", 2048, &sized), 0);
    assert_int_equal(allocs_of(cu, "h.sequence parallel: all-gathered input", 2048, &sized), 2);
    dnnmem_result_free(tp);
    dnnmem_result_free(sp);
    dnnmem_result_free(cu);
}

/* --sp's errors: a sequence that does not divide by TP (usage), a reader of
 * the split tensor S2 does not pass (a transpose of it), and --sp without
 * --tp. */
static void test_sp_errors(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_SGD);
    c.par.tp = 2;
    c.par.sp = true;
    dnnmem_model *m;
    struct dnnmem_error err;
    struct dnnmem_result *r = NULL;
    struct tb *b = sp_block("batch,7,16", NULL);
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    assert_int_equal(dnnmem_estimate(m, &c, &r, &err), DNNMEM_E_USAGE);
    assert_msg_has(err, "--sp: the sequence (dim 1 of 'x', 7) does not divide by --tp 2");
    dnnmem_model_free(m);
    tb_free(b);
    b = sp_block("batch,8,16", "Transpose");
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    assert_int_equal(dnnmem_estimate(m, &c, &r, &err), DNNMEM_E_UNSUPPORTED);
    assert_msg_has(err, "--sp: node '/odd/Transpose' (Transpose) reads 'z', which sequence "
                        "parallelism splits along dim 1");
    dnnmem_model_free(m);
    tb_free(b);
    c.par.tp = 1;
    b = sp_block("batch,8,16", NULL);
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    assert_int_equal(dnnmem_estimate(m, &c, &r, &err), DNNMEM_E_USAGE);
    assert_msg_has(err, "--sp (sequence parallel) splits the tensor-parallel group's norm");
    dnnmem_model_free(m);
    tb_free(b);
}

/* F1/F2: torch.onnx names its hoisted constants without a scope
 * ("Constant_7", between /blk's nodes); such a node is part of the run
 * around it, so /blk stays one FSDP2 unit of W1 and W2. Over 2 ranks its
 * all-gather output is both parameters' padded shards x 2: 16 x 1024 x 4 +
 * 1024 x 10 x 4 = 106,496 B, made before the unit's forward and again
 * before its backward (resharded after forward), in each of the 2 steps.
 * Cut at the constant, the unit was two, W1's 65,536 B and W2's 40,960 B
 * (measured: tfm4 FSDP2 on 2 ranks, -15.9% from the split). */
static void test_fsdp_unscoped_constant(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,16");
    tb_init(b, "W1", F32, 2, (int64_t[]){16, 1024});
    tb_init(b, "W2", F32, 2, (int64_t[]){1024, 10});
    tb_node(b, "MatMul", "/blk/fc1/MatMul", "x,W1", "h");
    tb_node(b, "Constant", "Constant_7", "", "c");
    Onnx__AttributeProto *a = tb_attr_new(b, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    a->t = tb_calloc(b, 1, sizeof *a->t);
    onnx__tensor_proto__init(a->t);
    a->t->has_data_type = 1;
    a->t->data_type = F32;
    a->t->n_float_data = 1;
    a->t->float_data = tb_calloc(b, 1, sizeof *a->t->float_data);
    a->t->float_data[0] = 2.0f;
    tb_node(b, "Mul", "/blk/Mul", "h,c", "hm");
    tb_node(b, "MatMul", "/blk/fc2/MatMul", "hm,W2", "y");
    tb_output(b, "y");
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_SGD);
    c.par.gpus = 2;
    c.par.fsdp = DNNMEM_FSDP_FULL;
    c.par.fsdp_wrap = "/blk";
    c.events = true;
    struct dnnmem_result *r = estimate_cfg(b, &c);
    bool sized;
    assert_int_equal(allocs_of(r, "all-gather output", 106496, &sized), 4);
    assert_true(sized);
    dnnmem_result_free(r);
}

/* Z5: after each step ZeRO 1/2 all-gathers the updated partitions into the
 * flat group, and gloo's _allgather_base_ makes a transient of the group's
 * size: 26,624 elements x 4 B = 106,496 B over 4 ranks, once a step (2
 * steps). Stage 3 gathers no flat group; NCCL writes the output in place. */
static void test_zero_step_gather(void **state)
{
    (void)state;
    const char *name = "gloo all_gather_into_tensor (ZeRO step)";
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.gpus = 4;
    c.events = true;
    bool sized;
    for (int stage = 1; stage <= 3; stage++) {
        c.par.zero = stage;
        struct dnnmem_result *r = estimate_cfg(mlp(), &c);
        assert_int_equal(allocs_of(r, name, 106496, &sized), stage <= 2 ? 2 : 0);
        assert_true(sized);
        dnnmem_result_free(r);
    }
    c.par.zero = 2;
    c.device = DNNMEM_DEVICE_CUDA;
    struct dnnmem_result *r = estimate_cfg(mlp(), &c);
    assert_int_equal(allocs_of(r, name, 106496, &sized), 0);
    dnnmem_result_free(r);
}

/* Z6: ZeRO-3 over 2 ranks, every parameter partitioned, no prefetch. The
 * first step's trace is recorded, not complete: each module's parameters
 * are gathered for its forward, released, and gathered again for its
 * backward. From the second step the trace is complete, and W1's reuse (in
 * fc1's backward) is 2 x 10,240 elements (fc2's forward and backward) away,
 * within stage3_max_reuse_distance 1e9: W1 stays gathered from its forward
 * through its backward. So W1's whole 65,536 B is gathered 3 times in the 2
 * steps, not 4; W2 (reused at once) too. */
static void test_zero3_reuse(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_SGD);
    c.par.gpus = 2;
    c.par.zero = 3;
    c.par.zero_persist_elems = 0;
    c.par.zero_prefetch_elems = 0;
    c.events = true;
    struct dnnmem_result *r = estimate_cfg(mlp(), &c);
    bool sized;
    assert_int_equal(allocs_of(r, "W1.all-gathered", 65536, &sized), 3);
    assert_true(sized);
    assert_int_equal(allocs_of(r, "W2.all-gathered", 40960, &sized), 3);
    assert_true(sized);
    dnnmem_result_free(r);
}

static void expect_error(struct dnnmem_config *c, enum dnnmem_status want, const char *needle)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    struct tb *b = mlp();
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_result *r = NULL;
    assert_int_equal(dnnmem_estimate(m, c, &r, &err), want);
    assert_msg_has(err, needle);
    dnnmem_model_free(m);
    tb_free(b);
}

static void test_errors(void **state)
{
    (void)state;
    struct dnnmem_config c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.gpus = 2;
    c.par.zero = 2;
    c.par.fsdp = DNNMEM_FSDP_FULL;
    expect_error(&c, DNNMEM_E_USAGE, "--zero and --fsdp");
    c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.gpus = 8;
    c.par.nodes = 2;
    c.par.gpus_per_node = 2;
    expect_error(&c, DNNMEM_E_USAGE, "--nodes x --gpus-per-node");
    c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.gpus = 4;
    c.par.tp = 3;
    expect_error(&c, DNNMEM_E_USAGE, "--tp 3 does not divide the world of 4 ranks");
    c.par.gpus = 3;
    expect_error(&c, DNNMEM_E_USAGE, "dim 1 of parameter 'W1' (1024) does not divide by 3");
    c.par.tp = 2;
    c.par.gpus = 2;
    c.par.zero = 1;
    expect_error(&c, DNNMEM_E_UNSUPPORTED, "--tp 2 with --zero is not modelled");
    c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.pp = 2;
    expect_error(&c, DNNMEM_E_UNSUPPORTED, "the model's repeated blocks (0 found) do not split");
    c.par.micro_batches = 3;
    expect_error(&c, DNNMEM_E_USAGE, "--batch-size 4 does not split into --micro-batches 3");
    c.par.micro_batches = 2;
    c.par.pp_schedule = DNNMEM_PP_INTERLEAVED;
    expect_error(&c, DNNMEM_E_UNSUPPORTED, "interleaved-1f1b is not modelled");
    c = cfg_of(DNNMEM_OPT_ADAM);
    c.par.micro_batches = 2;
    expect_error(&c, DNNMEM_E_USAGE, "--micro-batches, --pp-schedule and --pp-split apply to --pp");
    c = cfg_of(DNNMEM_OPT_ADAM);
    c.mode = DNNMEM_MODE_INFER;
    c.par.gpus = 2;
    expect_error(&c, DNNMEM_E_USAGE, "add --mode train");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddp),
        cmocka_unit_test(test_zero),
        cmocka_unit_test(test_fsdp),
        cmocka_unit_test(test_tp),
        cmocka_unit_test(test_tp_unpaired),
        cmocka_unit_test(test_tp_named_heads),
        cmocka_unit_test(test_sp),
        cmocka_unit_test(test_sp_errors),
        cmocka_unit_test(test_pp),
        cmocka_unit_test(test_fsdp_unscoped_constant),
        cmocka_unit_test(test_zero_step_gather),
        cmocka_unit_test(test_zero3_reuse),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("parallel", tests, NULL, NULL);
}
