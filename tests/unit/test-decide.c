/* test-decide.c: verdicts, the largest batch that fits, advice. */
#include "util.h"

enum { F32 = 1 };

/* x[batch,1024] -> Pad to 1100 columns -> Pad to 1200 -> Pad to 1300 -> y:
 * each step needs a larger block than the one it frees, so the caching
 * allocator keeps growing its reserve while the allocated peak stays at two
 * tensors plus the input. */
static struct tb *growing(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,1024");
    tb_init_i64(b, "p1", 4, (int64_t[]){0, 0, 0, 76});
    tb_init_i64(b, "p2", 4, (int64_t[]){0, 0, 0, 100});
    tb_init_i64(b, "p3", 4, (int64_t[]){0, 0, 0, 100});
    tb_node(b, "Pad", "pad1", "x,p1", "a");
    tb_node(b, "Pad", "pad2", "a,p2", "c");
    tb_node(b, "Pad", "pad3", "c,p3", "y");
    tb_output(b, "y");
    return b;
}

static struct dnnmem_result *run(dnnmem_model *m, int64_t batch, int64_t capacity)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = batch;
    cfg.capacity_bytes = capacity;
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    return r;
}

static void test_verdicts(void **state)
{
    (void)state;
    struct tb *b = growing();
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_result *free_run = run(m, 4096, 0);
    assert_int_equal(free_run->verdict, DNNMEM_VERDICT_NONE);
    uint64_t total = free_run->total_bytes, context = free_run->context_bytes;
    uint64_t allocated = free_run->peak_allocated;
    assert_true(free_run->peak_reserved > allocated + (8 << 20)); /* the reserve grew */

    /* plenty of room: fits, and the margin is what is left */
    struct dnnmem_result *r = run(m, 4096, (int64_t)total * 2);
    assert_int_equal(r->verdict, DNNMEM_VERDICT_FITS);
    assert_int_equal(r->margin_bytes, (int64_t)total);
    dnnmem_result_free(r);
    /* within 5% of the capacity: tight */
    r = run(m, 4096, (int64_t)(total + total / 100));
    assert_int_equal(r->verdict, DNNMEM_VERDICT_TIGHT);
    dnnmem_result_free(r);
    /* below the unconstrained reserve but above what is allocated: PyTorch
     * frees the cached segments on the OOM path and retries, so it fits */
    r = run(m, 4096, (int64_t)(allocated + context + (6 << 20)));
    assert_true(r->verdict != DNNMEM_VERDICT_DOES_NOT_FIT);
    dnnmem_result_free(r);
    /* below what must be allocated at once: does not fit */
    r = run(m, 4096, (int64_t)(allocated + context - 1));
    assert_int_equal(r->verdict, DNNMEM_VERDICT_DOES_NOT_FIT);
    assert_true(r->margin_bytes < 0);
    dnnmem_result_free(r);
    dnnmem_result_free(free_run);
    dnnmem_model_free(m);
    tb_free(b);
}

/* The search agrees with trying every batch size. */
static void test_max_batch_exact(void **state)
{
    (void)state;
    struct tb *b = growing();
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_result *one = run(m, 1, 0);
    for (int64_t extra = 0; extra <= (64 << 20); extra += (9 << 20)) {
        int64_t capacity = (int64_t)one->total_bytes + extra;
        int64_t brute = 0;
        for (int64_t batch = 1; batch <= 300; batch++) {
            struct dnnmem_result *r = run(m, batch, capacity);
            if (r->verdict == DNNMEM_VERDICT_FITS) /* the headroom left free */
                brute = batch;
            dnnmem_result_free(r);
        }
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.capacity_bytes = capacity;
        int64_t found = -1;
        struct dnnmem_result *at = NULL, *next = NULL;
        assert_int_equal(dnnmem_max_dim(m, &cfg, NULL, 300, &found, &at, &next, &err), DNNMEM_OK);
        if (found != brute)
            fail_msg("capacity +%lld: search %lld, brute force %lld", (long long)extra,
                     (long long)found, (long long)brute);
        if (found > 0 && found < 300) {
            assert_int_equal(at->verdict, DNNMEM_VERDICT_FITS);
            assert_true(next->verdict != DNNMEM_VERDICT_FITS);
        }
        dnnmem_result_free(at);
        dnnmem_result_free(next);
    }
    dnnmem_result_free(one);
    dnnmem_model_free(m);
    tb_free(b);
}

/* With LoRA and 4-bit weights the model is rebuilt for an estimate; the
 * search builds it once and reuses it: its answer agrees with fresh
 * estimates of every batch size at the capacity (the verdict: a run over
 * the capacity is replayed capped, as the caching allocator frees its cache
 * and retries), and its results at the answer and the next value equal
 * fresh estimates, byte for byte. */
static void test_max_batch_rebuilt_model(void **state)
{
    (void)state;
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load("tests/models/hf/tiny-llama-gqa.json", &m, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_ADAMW;
    cfg.seq_len = 64;
    cfg.lora.r = 8;
    cfg.quant = DNNMEM_QUANT_NF4;
    cfg.headroom = 0.05;
    struct dnnmem_result *r;
    cfg.batch_size = 22;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    /* batch 22 fits, leaving the 5% headroom free, just */
    cfg.capacity_bytes = (int64_t)((double)r->total_bytes / 0.95) + 1;
    dnnmem_result_free(r);
    uint64_t total[42] = {0};
    int64_t brute = 0;
    for (int64_t batch = 1; batch <= 41; batch++) {
        cfg.batch_size = batch;
        assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
        total[batch] = r->total_bytes;
        if (batch <= 40 && r->verdict == DNNMEM_VERDICT_FITS)
            brute = batch;
        dnnmem_result_free(r);
    }
    cfg.batch_size = 0;
    assert_true(brute >= 22 && brute < 40);
    int64_t found = -1;
    struct dnnmem_result *at = NULL, *next = NULL;
    assert_int_equal(dnnmem_max_dim(m, &cfg, NULL, 40, &found, &at, &next, &err), DNNMEM_OK);
    assert_int_equal(found, brute);
    assert_int_equal(at->total_bytes, total[found]);
    assert_int_equal(next->total_bytes, total[found + 1]);
    dnnmem_result_free(at);
    dnnmem_result_free(next);
    dnnmem_model_free(m);

    /* a generation's graph depends on the prompt (Gemma 2's HybridCache is
     * sized P + T - 1): a prompt-length search rebuilds it per estimate, so
     * its results equal fresh estimates at the answer and the next value */
    if (dnnmem_model_load("tests/models/hf/tiny-gemma2.json", &m, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_GENERATE;
    cfg.new_tokens = 64;
    cfg.batch_size = 4;
    cfg.headroom = 0.05;
    cfg.seq_len = 300;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    cfg.capacity_bytes = (int64_t)((double)r->total_bytes / 0.95) + 1;
    dnnmem_result_free(r);
    cfg.seq_len = 0;
    assert_int_equal(dnnmem_max_dim(m, &cfg, "seq", 4096, &found, &at, &next, &err), DNNMEM_OK);
    assert_true(found >= 300);
    for (int j = 0; j < 2; j++) {
        cfg.seq_len = found + j;
        assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
        assert_int_equal((j ? next : at)->total_bytes, r->total_bytes);
        assert_int_equal(r->verdict != DNNMEM_VERDICT_FITS, j == 1);
        dnnmem_result_free(r);
    }
    dnnmem_result_free(at);
    dnnmem_result_free(next);
    dnnmem_model_free(m);
}

/* The search leaves the headroom asked for free: at the answer the margin
 * is at least that share of the capacity, at the next value it is not, and
 * a larger headroom gives a smaller answer. */
static void test_max_batch_headroom(void **state)
{
    (void)state;
    struct tb *b = growing();
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_result *one = run(m, 1, 0);
    int64_t capacity = (int64_t)one->total_bytes + (INT64_C(48) << 20);
    int64_t found[2];
    const double headroom[2] = {0.01, 0.05};
    for (int k = 0; k < 2; k++) {
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.capacity_bytes = capacity;
        cfg.headroom = headroom[k];
        struct dnnmem_result *at = NULL, *next = NULL;
        assert_int_equal(dnnmem_max_dim(m, &cfg, NULL, 100000, &found[k], &at, &next, &err),
                         DNNMEM_OK);
        assert_true(found[k] > 1 && found[k] < 100000);
        assert_true((double)at->margin_bytes >= headroom[k] * (double)capacity);
        assert_true((double)next->margin_bytes < headroom[k] * (double)capacity);
        dnnmem_result_free(at);
        dnnmem_result_free(next);
    }
    assert_true(found[1] < found[0]);
    dnnmem_result_free(one);
    dnnmem_model_free(m);
    tb_free(b);
}

static dnnmem_model *load(const char *path)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    return m;
}

/* The estimate of cfg with one option added by its CLI name. */
static uint64_t total_with(dnnmem_model *m, const struct dnnmem_config *base, const char *opt,
                           const char *value)
{
    struct dnnmem_config cfg = *base;
    dnnmem_options *store = dnnmem_options_new();
    struct dnnmem_error err;
    if (dnnmem_config_set(&cfg, store, opt, value, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    struct dnnmem_result *r;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    uint64_t t = r->total_bytes;
    dnnmem_result_free(r);
    dnnmem_options_free(store);
    return t;
}

/* Advice for a ResNet-50 training step with Adam that does not fit 4 GiB:
 * every single change that applies, each with the estimate a fresh run of
 * it gives, ranked by cost; the batch is the largest that leaves the
 * headroom free; checkpointing is per bottleneck block (the 16 of
 * torchvision's layer1..layer4), which estimates lower than per stage. */
static void test_advice(void **state)
{
    (void)state;
    dnnmem_model *m = load("tests/models/fixtures/resnet50.onnx");
    struct dnnmem_error err;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_ADAM;
    cfg.optimizer_set = true;
    cfg.batch_size = 64;
    cfg.capacity_bytes = INT64_C(4) << 30;
    struct dnnmem_advice *adv;
    size_t n;
    assert_int_equal(dnnmem_advise(m, &cfg, &adv, &n, &err), DNNMEM_OK);
    assert_int_equal(n, 6);
    static const char *const change[] = {"--precision amp-bf16", NULL,
                                         "--checkpoint '/layer*/layer*.*'", "--optimizer adam8bit",
                                         "--optimizer adafactor", "--optimizer sgd-momentum"};
    static const int rank[] = {1, 2, 3, 4, 5, 6};
    for (size_t k = 0; k < n; k++) {
        if (change[k])
            assert_string_equal(adv[k].change, change[k]);
        assert_int_equal(adv[k].cost_rank, rank[k]);
        assert_true(adv[k].cost && adv[k].cost[0]);
        assert_int_equal(adv[k].margin_bytes, cfg.capacity_bytes - (int64_t)adv[k].total_bytes);
        assert_int_equal(adv[k].verdict == DNNMEM_VERDICT_DOES_NOT_FIT, k >= 3);
    }
    assert_int_equal(adv[0].total_bytes, total_with(m, &cfg, "precision", "amp-bf16"));
    assert_int_equal(adv[2].total_bytes, total_with(m, &cfg, "checkpoint", "/layer*/layer*.*"));
    assert_true(adv[2].total_bytes < total_with(m, &cfg, "checkpoint", "/layer*"));
    assert_int_equal(adv[3].total_bytes, total_with(m, &cfg, "optimizer", "adam8bit"));
    long long best;
    assert_int_equal(sscanf(adv[1].change, "--batch-size %lld", &best), 1);
    assert_int_equal(adv[1].verdict, DNNMEM_VERDICT_FITS);
    char b1[32];
    snprintf(b1, sizeof b1, "%lld", best + 1);
    struct dnnmem_config c1 = cfg;
    c1.batch_size = best + 1;
    struct dnnmem_result *r;
    assert_int_equal(dnnmem_estimate(m, &c1, &r, &err), DNNMEM_OK);
    assert_true(r->verdict != DNNMEM_VERDICT_FITS);
    dnnmem_result_free(r);
    dnnmem_advice_free(adv, n);

    /* on a T4 (compute capability 7.5) the AMP dtype is float16: no bf16 */
    cfg.compute_capability = 75;
    assert_int_equal(dnnmem_advise(m, &cfg, &adv, &n, &err), DNNMEM_OK);
    assert_string_equal(adv[0].change, "--precision amp-fp16");
    for (size_t k = 0; k < n; k++)
        assert_null(strstr(adv[k].change, "bf16"));
    dnnmem_advice_free(adv, n);

    /* stored in the result, which a job that fits gets none of */
    cfg.compute_capability = 0;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    assert_int_equal(dnnmem_result_advise(r, m, &cfg, &err), DNNMEM_OK);
    assert_int_equal(r->n_advice, 6);
    assert_string_equal(r->advice[2].change, "--checkpoint '/layer*/layer*.*'");
    dnnmem_result_free(r);
    cfg.capacity_bytes = INT64_C(40) << 30;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    assert_int_equal(dnnmem_result_advise(r, m, &cfg, &err), DNNMEM_OK);
    assert_int_equal(r->n_advice, 0);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
}

/* The first entry of advice that contains `change`, or NULL. */
static const struct dnnmem_advice *find_advice(const struct dnnmem_advice *a, size_t n,
                                               const char *change)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(a[k].change, change) == 0)
            return &a[k];
    return NULL;
}

/* Issue 16's cases: Llama-3.1-8B LoRA at seq 4096, batch 4, on an
 * A100-80GB (144 GiB) fits with per-layer checkpointing; Mixtral in bf16
 * does not fit an H100 (87 GiB of weights) but does with a 4-bit base; a
 * full fine-tune of Llama-3.1-8B fits an A100-40GB only combined:
 * checkpointing, a 4-bit base under LoRA, and a smaller batch. */
static void test_advice_llm(void **state)
{
    (void)state;
    dnnmem_model *m = load("tests/models/hf/Llama-3.1-8B-Instruct.json");
    struct dnnmem_error err;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_ADAMW;
    cfg.optimizer_set = true;
    cfg.precision = DNNMEM_PRECISION_BF16;
    cfg.precision_set = true;
    cfg.transformers_version = 451;
    cfg.batch_size = 4;
    cfg.seq_len = 4096;
    cfg.lora.r = 16;
    dnnmem_config_use_gpu(&cfg, dnnmem_gpu_find("A100-80GB"));
    struct dnnmem_advice *adv;
    size_t n;
    assert_int_equal(dnnmem_advise(m, &cfg, &adv, &n, &err), DNNMEM_OK);
    const struct dnnmem_advice *ck = find_advice(adv, n, "--checkpoint '/model/layers.*'");
    assert_non_null(ck);
    assert_int_equal(ck->verdict, DNNMEM_VERDICT_FITS);
    assert_int_equal(ck->cost_rank, 3);
    assert_int_equal(ck->total_bytes, total_with(m, &cfg, "checkpoint", "/model/layers.*"));
    assert_non_null(strstr(ck->cost, "the 32 blocks"));
    assert_non_null(find_advice(adv, n, "--quant nf4")); /* LoRA given: the base alone */
    dnnmem_advice_free(adv, n);

    /* a full fine-tune at batch 8, seq 2048 on 40 GB: no single change fits */
    cfg.lora.r = 0;
    cfg.batch_size = 8;
    cfg.seq_len = 2048;
    dnnmem_config_use_gpu(&cfg, dnnmem_gpu_find("A100-40GB"));
    assert_int_equal(dnnmem_advise(m, &cfg, &adv, &n, &err), DNNMEM_OK);
    assert_true(n >= 2);
    assert_int_equal(adv[0].verdict, DNNMEM_VERDICT_FITS);
    long long b = 0;
    const char *want = "--checkpoint '/model/layers.*' --lora-r 16 --quant nf4 --batch-size ";
    assert_int_equal(strncmp(adv[0].change, want, strlen(want)), 0);
    b = atoll(adv[0].change + strlen(want));
    assert_true(b >= 1 && b < 8);
    assert_int_equal(adv[0].cost_rank, 9);
    for (size_t k = 1; k < n; k++)
        assert_int_equal(adv[k].verdict, DNNMEM_VERDICT_DOES_NOT_FIT);
    dnnmem_advice_free(adv, n);

    /* generation at batch 64, 256 + 512 tokens on an L4: an 8-bit cache fits */
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_GENERATE;
    cfg.precision = DNNMEM_PRECISION_BF16;
    cfg.precision_set = true;
    cfg.transformers_version = 451;
    cfg.batch_size = 64;
    cfg.seq_len = 256;
    cfg.new_tokens = 512;
    dnnmem_config_use_gpu(&cfg, dnnmem_gpu_find("L4"));
    assert_int_equal(dnnmem_advise(m, &cfg, &adv, &n, &err), DNNMEM_OK);
    const struct dnnmem_advice *kv = find_advice(adv, n, "--kv-dtype fp8");
    assert_non_null(kv);
    assert_int_equal(kv->verdict, DNNMEM_VERDICT_FITS);
    assert_int_equal(kv->cost_rank, 7);
    assert_int_equal(kv->total_bytes, total_with(m, &cfg, "kv-dtype", "fp8"));
    assert_null(find_advice(adv, n, "--lora-r 16")); /* no training, no adapters */
    dnnmem_advice_free(adv, n);
    dnnmem_model_free(m);

    m = load("tests/models/hf/Mixtral-8x7B-v0.1.json");
    dnnmem_config_init(&cfg);
    cfg.precision = DNNMEM_PRECISION_BF16;
    cfg.precision_set = true;
    cfg.transformers_version = 451;
    cfg.batch_size = 1;
    cfg.seq_len = 512;
    dnnmem_config_use_gpu(&cfg, dnnmem_gpu_find("H100-80GB"));
    assert_int_equal(dnnmem_advise(m, &cfg, &adv, &n, &err), DNNMEM_OK);
    assert_true(n >= 1);
    const struct dnnmem_advice *q = find_advice(adv, n, "--quant nf4");
    assert_non_null(q);
    assert_int_equal(q->verdict, DNNMEM_VERDICT_FITS);
    assert_int_equal(q->total_bytes, total_with(m, &cfg, "quant", "nf4"));
    dnnmem_advice_free(adv, n);
    dnnmem_model_free(m);
}

/* Repeated blocks from the module scopes: ResNet-50's 16 bottlenecks under
 * layer1..layer4 (3 + 4 + 6 + 3) and its 4 stages; Llama-3.1-8B's 32
 * decoder layers; none in a graph whose numbered scopes differ. */
static void test_repeated_blocks(void **state)
{
    (void)state;
    dnnmem_model *m = load("tests/models/fixtures/resnet50.onnx");
    struct dm_block_scope bs[3];
    size_t n = dm_repeated_blocks(dm_model_graph(m), bs, 3);
    assert_int_equal(n, 2);
    assert_int_equal(bs[0].depth, 1);
    assert_string_equal(bs[0].spec[0], "/layer*");
    assert_int_equal(bs[0].blocks, 4);
    assert_int_equal(bs[1].depth, 2);
    assert_int_equal(bs[1].n_specs, 1);
    assert_string_equal(bs[1].spec[0], "/layer*/layer*.*");
    assert_int_equal(bs[1].blocks, 16);
    dnnmem_model_free(m);
    /* a BERT encoder's 12 layers, each one member though constants made
     * outside its scope come between its nodes */
    m = load("tests/models/fixtures/bert_encoder.onnx");
    n = dm_repeated_blocks(dm_model_graph(m), bs, 3);
    assert_true(n >= 1);
    bool found = false;
    for (size_t k = 0; k < n; k++)
        if (bs[k].n_specs == 1 && strcmp(bs[k].spec[0], "/layers.*") == 0) {
            assert_int_equal(bs[k].blocks, 12);
            found = true;
        }
    assert_true(found);
    dnnmem_model_free(m);
    m = load("tests/models/hf/Llama-3.1-8B-Instruct.json");
    n = dm_repeated_blocks(dm_model_graph(m), bs, 3);
    assert_int_equal(n, 1);
    assert_int_equal(bs[0].n_specs, 1);
    assert_string_equal(bs[0].spec[0], "/model/layers.*");
    assert_int_equal(bs[0].blocks, 32);
    dnnmem_model_free(m);

    /* /b.0 and /b.1 hold different ops: numbered, but no repeat */
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "4,8");
    const char *ops[2][4] = {{"Relu", "Sigmoid", "Tanh", "Relu"}, {"Sigmoid", "Tanh", "Relu", "Relu"}};
    char prev[32] = "x";
    for (int blk = 0; blk < 2; blk++)
        for (int k = 0; k < 4; k++) {
            char name[64], out[32];
            snprintf(name, sizeof name, "/b.%d/op%d/%s", blk, k, ops[blk][k]);
            snprintf(out, sizeof out, "t%d", blk * 4 + k);
            tb_node(b, ops[blk][k], name, prev, out);
            strcpy(prev, out);
        }
    tb_output(b, prev);
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    assert_int_equal(dm_repeated_blocks(dm_model_graph(m), bs, 3), 0);
    dnnmem_model_free(m);
    tb_free(b);
}

static void test_gpu_catalogue(void **state)
{
    (void)state;
    assert_true(dnnmem_gpu_count() >= 20);
    const struct dnnmem_gpu *g = dnnmem_gpu_find("a100-80gb");
    assert_non_null(g);
    assert_string_equal(g->name, "A100-80GB");
    assert_int_equal(g->compute_capability, 80);
    assert_non_null(dnnmem_gpu_find("A100-80GB:3g.40gb"));
    assert_null(dnnmem_gpu_find("GTX-480"));
    /* applied to a config: its capacity and compute capability */
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    dnnmem_config_use_gpu(&cfg, dnnmem_gpu_find("T4"));
    assert_int_equal(cfg.compute_capability, 75);
    assert_int_equal(cfg.capacity_bytes, dnnmem_gpu_find("T4")->total_bytes);
    assert_string_equal(cfg.device_label, "T4");
    cfg.compute_capability = 86; /* one the caller set stays */
    dnnmem_config_use_gpu(&cfg, dnnmem_gpu_find("H100-80GB"));
    assert_int_equal(cfg.compute_capability, 86);
    /* names near an unknown one */
    char near[256];
    assert_int_equal(dm_gpu_suggest("A100", near, sizeof near), 4);
    assert_string_equal(near, "A100-40GB, A100-40GB-PCIe, A100-80GB, A100-80GB-PCIe");
    assert_int_equal(dm_gpu_suggest("rtx4090", near, sizeof near), 1);
    assert_string_equal(near, "RTX-4090");
    assert_int_equal(dm_gpu_suggest("H1OO-80GB", near, sizeof near), 1); /* letter O: one edit */
    assert_string_equal(near, "H100-80GB");
    assert_int_equal(dm_gpu_suggest("a100-80gb:3g", near, sizeof near), 1);
    assert_string_equal(near, "A100-80GB:3g.40gb");
    assert_int_equal(dm_gpu_suggest("GTX-480", near, sizeof near), 0);
    for (size_t k = 0; k < dnnmem_gpu_count(); k++) {
        const struct dnnmem_gpu *x = dnnmem_gpu_at(k);
        assert_true(x->total_bytes > (INT64_C(1) << 30));
        assert_true(x->source && x->source[0]);
        for (size_t j = 0; j < k; j++)
            assert_true(strcasecmp(dnnmem_gpu_at(j)->name, x->name) != 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_max_batch_exact),
        cmocka_unit_test(test_max_batch_rebuilt_model),
        cmocka_unit_test(test_max_batch_headroom),
        cmocka_unit_test(test_advice),
        cmocka_unit_test(test_advice_llm),
        cmocka_unit_test(test_repeated_blocks),
        cmocka_unit_test(test_gpu_catalogue),
    };
    return cmocka_run_group_tests_name("decide", tests, NULL, NULL);
}
