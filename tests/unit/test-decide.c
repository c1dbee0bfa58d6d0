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
            if (r->verdict != DNNMEM_VERDICT_DOES_NOT_FIT)
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
            assert_true(at->verdict != DNNMEM_VERDICT_DOES_NOT_FIT);
            assert_int_equal(next->verdict, DNNMEM_VERDICT_DOES_NOT_FIT);
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
    cfg.headroom = 0;
    struct dnnmem_result *r;
    cfg.batch_size = 22;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    cfg.capacity_bytes = (int64_t)r->total_bytes; /* batch 22 fits, just */
    dnnmem_result_free(r);
    uint64_t total[42] = {0};
    int64_t brute = 0;
    for (int64_t batch = 1; batch <= 41; batch++) {
        cfg.batch_size = batch;
        assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
        total[batch] = r->total_bytes;
        if (batch <= 40 && r->verdict != DNNMEM_VERDICT_DOES_NOT_FIT)
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
    cfg.headroom = 0;
    cfg.seq_len = 300;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    cfg.capacity_bytes = (int64_t)r->total_bytes;
    dnnmem_result_free(r);
    cfg.seq_len = 0;
    assert_int_equal(dnnmem_max_dim(m, &cfg, "seq", 4096, &found, &at, &next, &err), DNNMEM_OK);
    assert_true(found >= 300);
    for (int j = 0; j < 2; j++) {
        cfg.seq_len = found + j;
        assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
        assert_int_equal((j ? next : at)->total_bytes, r->total_bytes);
        assert_int_equal(r->verdict == DNNMEM_VERDICT_DOES_NOT_FIT, j == 1);
        dnnmem_result_free(r);
    }
    dnnmem_result_free(at);
    dnnmem_result_free(next);
    dnnmem_model_free(m);
}

/* Advice for a ResNet-50 training step that does not fit 4 GiB: each change
 * comes with a full estimate, and the smaller batch is the largest that fits. */
static void test_advice(void **state)
{
    (void)state;
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load("tests/models/fixtures/resnet50.onnx", &m, &err) != DNNMEM_OK)
        fail_msg("%s", err.message);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_ADAM;
    cfg.batch_size = 64;
    cfg.capacity_bytes = INT64_C(4) << 30;
    struct dnnmem_advice *adv;
    size_t n;
    assert_int_equal(dnnmem_advise(m, &cfg, &adv, &n, &err), DNNMEM_OK);
    assert_int_equal(n, 4);
    assert_string_equal(adv[1].change, "--checkpoint '/*' (every top-level module)");
    assert_string_equal(adv[2].change, "--precision amp-bf16");
    assert_string_equal(adv[3].change, "--optimizer sgd-momentum");
    long long best;
    assert_int_equal(sscanf(adv[0].change, "--batch-size %lld", &best), 1);
    assert_true(adv[0].verdict != DNNMEM_VERDICT_DOES_NOT_FIT);
    cfg.batch_size = best + 1;
    struct dnnmem_result *r;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    assert_int_equal(r->verdict, DNNMEM_VERDICT_DOES_NOT_FIT);
    dnnmem_result_free(r);
    dnnmem_advice_free(adv, n);
    dnnmem_model_free(m);
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
        cmocka_unit_test(test_advice),
        cmocka_unit_test(test_gpu_catalogue),
    };
    return cmocka_run_group_tests_name("decide", tests, NULL, NULL);
}
