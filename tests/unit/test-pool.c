/*
 * test-pool.c: the MXNet GPU pooled storage manager simulator on hand-built
 * request sequences. Every expected value is worked out in the comments from
 * the rules at the top of src/alloc/pool.c (runtime-facts.md section 3).
 */
#include "util.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)

static struct dm_allocator mk(enum dm_pool_strategy st, uint64_t capacity)
{
    struct dm_pool_opts o;
    dm_pool_opts_init(&o);
    o.strategy = st;
    o.capacity = capacity;
    struct dm_allocator a;
    assert_int_equal(dm_alloc_pool_new(&o, &a), DNNMEM_OK);
    return a;
}

static void test_naive_rounding(void **state)
{
    (void)state;
    struct dm_pool_opts o;
    dm_pool_opts_init(&o);
    assert_int_equal(o.strategy, DM_POOL_NAIVE);
    /* multiples of the 4096 B page */
    assert_int_equal(dm_pool_round(&o, 1), 4096);
    assert_int_equal(dm_pool_round(&o, 4096), 4096);
    assert_int_equal(dm_pool_round(&o, 4097), 8192);
    /* 2 MiB is not above 2 MiB: stays */
    assert_int_equal(dm_pool_round(&o, 2 * MiB), 2 * MiB);
    /* 2 MiB + 1 -> 2101248 (page) > 2 MiB -> multiple of 2 MiB: 4 MiB */
    assert_int_equal(dm_pool_round(&o, 2 * MiB + 1), 4 * MiB);
    assert_int_equal(dm_pool_round(&o, 3 * MiB), 4 * MiB);
    assert_int_equal(dm_pool_round(&o, 5 * MiB), 6 * MiB);
    assert_int_equal(dm_pool_round(&o, 40 * MiB), 40 * MiB);
    assert_int_equal(dm_pool_round(&o, 100 * MiB), 100 * MiB);
    /* a larger page: 8192 */
    o.page_size = 8192;
    assert_int_equal(dm_pool_round(&o, 4097), 8192);
    assert_int_equal(dm_pool_round(&o, 8193), 16384);
}

static void test_round_rounding(void **state)
{
    (void)state;
    struct dm_pool_opts o;
    dm_pool_opts_init(&o);
    o.strategy = DM_POOL_ROUND;
    /* bucket ceil(log2), at least 12 (the page) */
    assert_int_equal(dm_pool_round(&o, 1), 4096);
    assert_int_equal(dm_pool_round(&o, 4096), 4096);
    assert_int_equal(dm_pool_round(&o, 5000), 8192);
    assert_int_equal(dm_pool_round(&o, 3 * MiB), 4 * MiB);
    /* 5 MiB: Naive 6 MiB, Round the next power of two, 8 MiB */
    assert_int_equal(dm_pool_round(&o, 5 * MiB), 8 * MiB);
    /* up to 2^24 = 16 MiB: powers of two */
    assert_int_equal(dm_pool_round(&o, 16 * MiB), 16 * MiB);
    /* above: multiples of 16 MiB */
    assert_int_equal(dm_pool_round(&o, 16 * MiB + 1), 32 * MiB);
    assert_int_equal(dm_pool_round(&o, 40 * MiB), 48 * MiB);
    assert_int_equal(dm_pool_round(&o, 100 * MiB), 112 * MiB);
    /* cutoff 20 (1 MiB): 3 MiB -> bucket 22 > 20 -> multiple of 1 MiB */
    o.round_linear_cutoff = 20;
    assert_int_equal(dm_pool_round(&o, 3 * MiB), 3 * MiB);
    assert_int_equal(dm_pool_round(&o, 3 * MiB + 1), 4 * MiB);
    assert_int_equal(dm_pool_round(&o, 700 * KiB), 1 * MiB);
}

static void test_exact_reuse(void **state)
{
    (void)state;
    struct dm_allocator a = mk(DM_POOL_NAIVE, 0);
    uint64_t g;
    /* 5000 -> 8192, new */
    uint64_t ha = get(&a, 5000, &g);
    assert_int_equal(g, 8192);
    put(&a, ha);
    /* 6000 -> 8192: the cached 8192 buffer is reused */
    uint64_t hb = get(&a, 6000, &g);
    assert_int_equal(hb, ha);
    assert_int_equal(stats(&a).reserved, 8192);
    /* 9000 -> 12288: new; reserved 8192 + 12288 = 20480 */
    uint64_t hc = get(&a, 9000, &g);
    assert_int_equal(g, 12288);
    assert_int_equal(stats(&a).reserved, 20480);
    put(&a, hb);
    put(&a, hc);
    /* 10000 -> 12288: reuses C */
    assert_int_equal(get(&a, 10000, NULL), hc);
    /* 4000 -> 4096: no free 4096 buffer; the free 8192 one is not split ->
     * new: reserved 8192 + 12288 + 4096 = 24576 */
    get(&a, 4000, &g);
    assert_int_equal(g, 4096);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 24576);
    assert_int_equal(s.allocated, 12288 + 4096);
    assert_int_equal(s.requested, 10000 + 4000);
    assert_int_equal(s.peak_allocated, 8192 + 12288);
    assert_int_equal(s.segments, 3);
    /* 12 KiB + 1 -> 16384: new, though 8192 is cached (no merging) */
    get(&a, 12 * KiB + 1, &g);
    assert_int_equal(g, 16384);
    assert_int_equal(stats(&a).reserved, 24576 + 16384);
    a.destroy(a.self);
}

static void test_lifo(void **state)
{
    (void)state;
    struct dm_allocator a = mk(DM_POOL_NAIVE, 0);
    uint64_t x = get(&a, 8192, NULL), y = get(&a, 8000, NULL);
    put(&a, x);
    put(&a, y);
    /* the last freed first */
    assert_int_equal(get(&a, 8192, NULL), y);
    assert_int_equal(get(&a, 1, NULL) != x, true); /* 4096: a new buffer */
    assert_int_equal(get(&a, 8192, NULL), x);
    a.destroy(a.self);
}

static void test_naive_vs_round_reserve(void **state)
{
    (void)state;
    /* 5 MiB then 7 MiB, the first freed in between. Naive: 6 MiB and 8 MiB
     * classes differ -> two buffers, 14 MiB held. Round: both 8 MiB -> the
     * second reuses the first, 8 MiB held. */
    struct dm_allocator a = mk(DM_POOL_NAIVE, 0);
    put(&a, get(&a, 5 * MiB, NULL));
    get(&a, 7 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 14 * MiB);
    a.destroy(a.self);
    a = mk(DM_POOL_ROUND, 0);
    put(&a, get(&a, 5 * MiB, NULL));
    get(&a, 7 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 8 * MiB);
    assert_int_equal(stats(&a).allocated, 8 * MiB);
    a.destroy(a.self);
}

static void test_release_on_reserve(void **state)
{
    (void)state;
    /* capacity = total = 100 MiB; reserve 5 % = 5 MiB */
    struct dm_allocator a = mk(DM_POOL_NAIVE, 100 * MiB);
    /* 40 MiB: free 100 MiB, 40 <= 95 -> cudaMalloc; then freed: cached */
    put(&a, get(&a, 40 * MiB, NULL));
    assert_int_equal(stats(&a).reserved, 40 * MiB);
    /* 56 MiB: no 56 MiB buffer; free 60 MiB, 56 > 60 - 5 -> ReleaseAll
     * (the cached 40 MiB goes back), then cudaMalloc: reserved 56 MiB,
     * though 40 + 56 would have fit */
    get(&a, 56 * MiB, NULL);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 56 * MiB);
    assert_int_equal(s.peak_reserved, 56 * MiB);
    assert_int_equal(s.segments, 1);
    assert_int_equal(s.num_ooms, 0);
    /* 40 MiB: free 44 MiB, 40 > 44 - 5 -> ReleaseAll (nothing cached);
     * cudaMalloc 40 <= 44 succeeds, into the reserve: reserved 96 MiB */
    get(&a, 40 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 96 * MiB);
    a.destroy(a.self);
}

static void test_release_on_failure(void **state)
{
    (void)state;
    struct dm_allocator a = mk(DM_POOL_NAIVE, 100 * MiB);
    uint64_t h, g;
    /* A 40 and B 40 MiB: free 100 then 60 MiB; both within free - reserve */
    uint64_t ha = get(&a, 40 * MiB, NULL), hb = get(&a, 40 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 80 * MiB);
    put(&a, hb);
    /* 30 MiB: free 20 MiB -> ReleaseAll frees B (reserved 40 MiB), free
     * 60 MiB, cudaMalloc 30 MiB: reserved 70 MiB */
    get(&a, 30 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 70 * MiB);
    assert_int_equal(stats(&a).segments, 2);
    /* 40 MiB: the A class has no free buffer (A in use); free 30 MiB ->
     * ReleaseAll (nothing), cudaMalloc fails -> ReleaseAll, retry once,
     * fails: OOM */
    assert_int_equal(a.alloc(a.self, 40 * MiB, &h, &g), DNNMEM_E_DEVICE_OOM);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.oom_alloc_size, 40 * MiB);
    assert_int_equal(s.reserved, 70 * MiB);
    /* free A: cached; 40 MiB is served from the pool again */
    put(&a, ha);
    get(&a, 40 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 70 * MiB);
    a.destroy(a.self);
}

static void test_zero_and_bad_options(void **state)
{
    (void)state;
    struct dm_allocator a = mk(DM_POOL_ROUND, 0);
    uint64_t h = 1, g = 1;
    assert_int_equal(a.alloc(a.self, 0, &h, &g), DNNMEM_OK);
    assert_int_equal(h, 0);
    assert_int_equal(stats(&a).reserved, 0);
    a.destroy(a.self);
    struct dm_pool_opts o;
    dm_pool_opts_init(&o);
    o.page_size = 16; /* below 32 */
    assert_int_equal(dm_alloc_pool_new(&o, &a), DNNMEM_E_USAGE);
    dm_pool_opts_init(&o);
    o.strategy = DM_POOL_ROUND;
    o.round_linear_cutoff = 19; /* outside 20..34 */
    assert_int_equal(dm_alloc_pool_new(&o, &a), DNNMEM_E_USAGE);
    o.round_linear_cutoff = 35;
    assert_int_equal(dm_alloc_pool_new(&o, &a), DNNMEM_E_USAGE);
    dm_pool_opts_init(&o);
    o.strategy = DM_POOL_ROUND;
    o.page_size = 3000; /* not a power of two */
    assert_int_equal(dm_alloc_pool_new(&o, &a), DNNMEM_E_USAGE);
    o.strategy = DM_POOL_NAIVE; /* Naive takes any page >= 32 */
    assert_int_equal(dm_alloc_pool_new(&o, &a), DNNMEM_OK);
    a.destroy(a.self);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_naive_rounding),
        cmocka_unit_test(test_round_rounding),
        cmocka_unit_test(test_exact_reuse),
        cmocka_unit_test(test_lifo),
        cmocka_unit_test(test_naive_vs_round_reserve),
        cmocka_unit_test(test_release_on_reserve),
        cmocka_unit_test(test_release_on_failure),
        cmocka_unit_test(test_zero_and_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
