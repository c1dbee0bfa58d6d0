/*
 * test-threads.c: concurrent estimates on one model (include/dnnmem.h,
 * "Threads and one model"): each thread's results equal a serial run's,
 * and a graph variant is built once and shared.
 */
#include "util.h"

#include <pthread.h>

#define THREADS 4
#define CONFIGS 3

/* default (sdpa), LoRA in training (a built variant), transformers 4.56 */
static void config_of(int k, struct dnnmem_config *cfg)
{
    dnnmem_config_init(cfg);
    cfg->seq_len = 32;
    if (k == 1) {
        cfg->mode = DNNMEM_MODE_TRAIN;
        cfg->lora.r = 8;
    } else if (k == 2) {
        cfg->transformers_version = 456;
    }
}

struct job {
    const dnnmem_model *m;
    uint64_t peak[CONFIGS];
    enum dnnmem_status s;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    for (int round = 0; round < 2; round++)
        for (int k = 0; k < CONFIGS; k++) {
            struct dnnmem_config cfg;
            config_of((k + round) % CONFIGS, &cfg);
            struct dnnmem_result *r;
            struct dnnmem_error err;
            if ((j->s = dnnmem_estimate(j->m, &cfg, &r, &err)) != DNNMEM_OK)
                return NULL;
            j->peak[(k + round) % CONFIGS] = r->peak_reserved;
            dnnmem_result_free(r);
        }
    return NULL;
}

static void test_concurrent_estimates(void **state)
{
    (void)state;
    const char *path = "tests/models/hf/distilgpt2.json";
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(dnnmem_model_load(path, &m, &err), DNNMEM_OK);
    struct job serial = {.m = m};
    run_job(&serial);
    assert_int_equal(serial.s, DNNMEM_OK);
    dnnmem_model_free(m);

    assert_int_equal(dnnmem_model_load(path, &m, &err), DNNMEM_OK);
    pthread_t th[THREADS];
    struct job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct job){.m = m};
        assert_int_equal(pthread_create(&th[i], NULL, run_job, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].s, DNNMEM_OK);
        for (int k = 0; k < CONFIGS; k++)
            assert_true(jobs[i].peak[k] == serial.peak[k] && serial.peak[k] > 0);
    }
    /* the sdpa graph: built once, the same one for every caller */
    const struct dm_graph *g = dm_model_graph_sdpa(m);
    assert_non_null(g);
    assert_ptr_equal(g, dm_model_graph_sdpa(m));
    assert_true(g->n_nodes > 0);
    dnnmem_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_estimates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
