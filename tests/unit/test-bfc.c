/*
 * test-bfc.c: the TensorFlow BFC allocator simulator on hand-built request
 * sequences. Every expected value is worked out in the comments from the
 * rules at the top of src/alloc/bfc.c (runtime-facts.md section 2).
 * Addresses are compared relative to the region base.
 */
#include "util.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static struct dm_allocator mk(uint64_t limit, bool growth)
{
    struct dm_bfc_opts o;
    dm_bfc_opts_init(&o);
    o.limit = limit;
    o.allow_growth = growth;
    struct dm_allocator a;
    assert_int_equal(dm_alloc_bfc_new(&o, &a), DNNMEM_OK);
    return a;
}

static struct dm_bfc_chunk ch[64];

static size_t snap(const struct dm_allocator *a)
{
    size_t n = dm_bfc_snapshot(a, ch, 64);
    assert_true(n <= 64);
    return n;
}

static void test_round_and_bins(void **state)
{
    (void)state;
    /* RoundedBytes: multiples of 256 */
    assert_int_equal(dm_bfc_round(1), 256);
    assert_int_equal(dm_bfc_round(256), 256);
    assert_int_equal(dm_bfc_round(257), 512);
    assert_int_equal(dm_bfc_round(1000), 1024);
    /* bin = min(20, floor(log2(size / 256))) */
    assert_int_equal(dm_bfc_bin(256), 0);     /* 1 -> 0 */
    assert_int_equal(dm_bfc_bin(511), 0);     /* 511/256 = 1 -> 0 */
    assert_int_equal(dm_bfc_bin(512), 1);     /* 2 -> 1 */
    assert_int_equal(dm_bfc_bin(768), 1);     /* 3 -> 1 */
    assert_int_equal(dm_bfc_bin(1024), 2);    /* 4 -> 2 */
    assert_int_equal(dm_bfc_bin(1 * MiB), 12); /* 4096 -> 12 */
    assert_int_equal(dm_bfc_bin(256 * MiB - 256), 19); /* 2^20 - 1 -> 19 */
    assert_int_equal(dm_bfc_bin(256 * MiB), 20); /* 2^20 -> 20 */
    assert_int_equal(dm_bfc_bin(4 * GiB), 20);   /* 2^24 -> capped at 20 */
}

static void test_zero_bytes(void **state)
{
    (void)state;
    struct dm_allocator a = mk(GiB, true);
    uint64_t h = 7, g = 7;
    /* AllocateRaw(0) returns nullptr: no chunk, no region */
    assert_int_equal(a.alloc(a.self, 0, &h, &g), DNNMEM_OK);
    assert_int_equal(h, 0);
    assert_int_equal(g, 0);
    assert_int_equal(stats(&a).reserved, 0);
    put(&a, 0);
    a.destroy(a.self);
}

static void test_growth_split(void **state)
{
    (void)state;
    struct dm_allocator a = mk(GiB, true);
    uint64_t g;
    /* alloc 1000 -> 1024, bin 2; no chunk -> Extend: first region
     * min(1 GiB, 2 MiB) = 2 MiB; 2 MiB >= 2 x 1024 -> split: 1024 in use,
     * 2 MiB - 1024 = 2096128 free */
    get(&a, 1000, &g);
    assert_int_equal(g, 1024);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.allocated, 1024);
    assert_int_equal(s.requested, 1000);
    assert_int_equal(s.reserved, 2 * MiB);
    assert_int_equal(s.segments, 1);
    assert_int_equal(snap(&a), 2);
    assert_true(ch[0].in_use && ch[0].size == 1024);
    assert_true(!ch[1].in_use && ch[1].size == 2096128);
    a.destroy(a.self);

    /* fresh: alloc 1.5 MiB = 1572864 (a multiple of 256); region 2 MiB;
     * 2097152 >= 3145728? no; slack 524288 < 128 MiB -> not split: the whole
     * 2 MiB is handed out and counts in bytes_in_use */
    a = mk(GiB, true);
    get(&a, 1572864, &g);
    assert_int_equal(g, 2 * MiB);
    s = stats(&a);
    assert_int_equal(s.allocated, 2 * MiB);
    assert_int_equal(s.requested, 1572864);
    assert_int_equal(snap(&a), 1);
    a.destroy(a.self);
}

static void test_coalesce(void **state)
{
    (void)state;
    struct dm_allocator a = mk(GiB, true);
    /* region 2 MiB: A [0,256), B [256,512), C [512,768), rest free
     * 2 MiB - 768 = 2096384 */
    uint64_t ha = get(&a, 100, NULL), hb = get(&a, 256, NULL), hc = get(&a, 200, NULL);
    assert_int_equal(snap(&a), 4);
    assert_int_equal(ch[1].addr - ch[0].addr, 256);
    assert_int_equal(ch[2].addr - ch[0].addr, 512);
    assert_int_equal(ch[3].size, 2096384);
    /* free B: neighbours A and C in use: no merge */
    put(&a, hb);
    assert_int_equal(snap(&a), 4);
    assert_true(!ch[1].in_use && ch[1].size == 256);
    /* free A: merges with B (free, next): [0,512) free */
    put(&a, ha);
    assert_int_equal(snap(&a), 3);
    assert_true(!ch[0].in_use && ch[0].size == 512);
    assert_true(ch[1].in_use && ch[1].size == 256);
    /* free C: merges with [0,512) and the rest: one free 2 MiB chunk */
    put(&a, hc);
    assert_int_equal(snap(&a), 1);
    assert_true(!ch[0].in_use && ch[0].size == 2 * MiB);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.allocated, 0);
    assert_int_equal(s.peak_allocated, 768);
    assert_int_equal(s.reserved, 2 * MiB); /* regions are kept */
    a.destroy(a.self);
}

static void test_best_fit(void **state)
{
    (void)state;
    struct dm_allocator a = mk(GiB, true);
    /* region 2 MiB: H1 [0,1024) S1 [1024,1280) H2 [1280,2048) S2 [2048,2304)
     * H3 [2304,3328) S3 [3328,3584), rest from 3584 */
    uint64_t h1 = get(&a, 1024, NULL);
    get(&a, 256, NULL);
    uint64_t h2 = get(&a, 768, NULL);
    get(&a, 256, NULL);
    uint64_t h3 = get(&a, 1024, NULL);
    get(&a, 256, NULL);
    size_t n = snap(&a);
    assert_int_equal(n, 7);
    uint64_t base = ch[0].addr;
    /* holes: 1024 at 0 (bin 2), 768 at 1280 (bin 1), 1024 at 2304 (bin 2) */
    put(&a, h3);
    put(&a, h1);
    put(&a, h2);
    /* alloc 700 -> 768, bin 1: the 768 hole is the smallest fit, though the
     * 1024 hole lies lower; exact, so not split */
    uint64_t g;
    uint64_t x = get(&a, 700, &g);
    assert_int_equal(g, 768);
    assert_int_equal(x, h2);
    /* alloc 1000 -> 1024, bin 2: two 1024 holes; same size, the lower
     * address (0) wins */
    x = get(&a, 1000, &g);
    assert_int_equal(g, 1024);
    n = snap(&a);
    for (size_t k = 0; k < n; k++)
        if (ch[k].requested == 1000)
            assert_int_equal(ch[k].addr - base, 0);
    /* alloc 300 -> 512, bin 1 (empty now) -> bin 2: the 1024 hole at 2304;
     * 1024 >= 2 x 512 -> split: 512 in use at 2304, 512 free at 2816 */
    get(&a, 300, &g);
    assert_int_equal(g, 512);
    n = snap(&a);
    bool seen = false;
    for (size_t k = 0; k < n; k++)
        if (ch[k].requested == 300) {
            assert_int_equal(ch[k].addr - base, 2304);
            assert_true(!ch[k + 1].in_use && ch[k + 1].size == 512);
            seen = true;
        }
    assert_true(seen);
    assert_int_equal(stats(&a).reserved, 2 * MiB);
    a.destroy(a.self);
}

static void test_region_growth(void **state)
{
    (void)state;
    struct dm_allocator a = mk(GiB, true);
    uint64_t g;
    /* 2 MiB: curr 2 MiB fits, region 2 MiB, exact; curr -> 4 MiB */
    get(&a, 2 * MiB, &g);
    assert_int_equal(g, 2 * MiB);
    assert_int_equal(stats(&a).reserved, 2 * MiB);
    /* 2 MiB: nothing free; region 4 MiB (curr), then curr -> 8 MiB;
     * 4 >= 2 x 2 -> split: 2 MiB in use, 2 MiB free */
    get(&a, 2 * MiB, &g);
    assert_int_equal(g, 2 * MiB);
    assert_int_equal(stats(&a).reserved, 6 * MiB);
    /* 20 MiB: the free 2 MiB is too small; curr 8 -> 16 -> 32 MiB
     * (doubled for this request, so not again); region 32 MiB;
     * 32 >= 40? no; slack 12 MiB < 128 MiB -> the whole 32 MiB */
    get(&a, 20 * MiB, &g);
    assert_int_equal(g, 32 * MiB);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 38 * MiB);
    assert_int_equal(s.allocated, 36 * MiB);
    assert_int_equal(s.segments, 3);
    /* 1 MiB (bin 12): the free 2 MiB chunk (bin 13) of region 2; split */
    get(&a, 1 * MiB, &g);
    assert_int_equal(g, 1 * MiB);
    assert_int_equal(stats(&a).reserved, 38 * MiB);
    /* 64 MiB: curr 32 -> 64 (doubled); region 64 MiB, exact */
    get(&a, 64 * MiB, &g);
    assert_int_equal(g, 64 * MiB);
    s = stats(&a);
    assert_int_equal(s.reserved, 102 * MiB);
    assert_int_equal(s.peak_reserved, 102 * MiB);
    assert_int_equal(s.allocated, 101 * MiB); /* 2 + 2 + 32 + 1 + 64 */
    assert_int_equal(s.segments, 4);
    /* 3 MiB: curr 64 MiB (kept: it was doubled for the last request);
     * region 64 MiB; split (64 >= 6): 3 MiB */
    get(&a, 3 * MiB, &g);
    assert_int_equal(stats(&a).reserved, 166 * MiB);
    a.destroy(a.self);
}

static void test_limit(void **state)
{
    (void)state;
    struct dm_allocator a = mk(10 * MiB, true);
    uint64_t h, g;
    /* 6 MiB: curr 2 -> 4 -> 8 MiB; region min(8, 10) = 8 MiB; 8 >= 12? no,
     * slack 2 MiB -> unsplit: 8 MiB in use */
    uint64_t ha = get(&a, 6 * MiB, &g);
    assert_int_equal(g, 8 * MiB);
    /* 3 MiB: nothing free; available 10 - 8 = 2 MiB < 3 MiB; GC finds no
     * free region -> OOM */
    assert_int_equal(a.alloc(a.self, 3 * MiB, &h, &g), DNNMEM_E_DEVICE_OOM);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.oom_alloc_size, 3 * MiB);
    assert_int_equal(s.reserved, 8 * MiB);
    /* 2 MiB: available 2 MiB; region min(curr 8, 2) = 2 MiB */
    uint64_t hc = get(&a, 2 * MiB, &g);
    assert_int_equal(g, 2 * MiB);
    assert_int_equal(stats(&a).reserved, 10 * MiB);
    /* free both: free chunks of 8 and 2 MiB, regions kept */
    put(&a, ha);
    put(&a, hc);
    assert_int_equal(stats(&a).reserved, 10 * MiB);
    /* 9 MiB: no free chunk fits; available 0 -> GC returns both regions
     * (reserved 0), Extend again: curr 8 -> 16, region min(16, 10) = 10 MiB;
     * 10 >= 18? no, slack 1 MiB -> unsplit */
    get(&a, 9 * MiB, &g);
    assert_int_equal(g, 10 * MiB);
    s = stats(&a);
    assert_int_equal(s.reserved, 10 * MiB);
    assert_int_equal(s.segments, 1);
    assert_int_equal(s.num_alloc_retries, 1);
    a.destroy(a.self);

    /* the same without garbage collection: the 9 MiB request fails */
    struct dm_bfc_opts o;
    dm_bfc_opts_init(&o);
    o.limit = 10 * MiB;
    o.allow_growth = true;
    o.garbage_collection = false;
    assert_int_equal(dm_alloc_bfc_new(&o, &a), DNNMEM_OK);
    ha = get(&a, 6 * MiB, NULL);
    hc = get(&a, 2 * MiB, NULL);
    put(&a, ha);
    put(&a, hc);
    assert_int_equal(a.alloc(a.self, 9 * MiB, &h, &g), DNNMEM_E_DEVICE_OOM);
    assert_int_equal(stats(&a).reserved, 10 * MiB);
    a.destroy(a.self);
}

static void test_no_growth(void **state)
{
    (void)state;
    /* TF's default: the first region is the whole limit (1 GiB) */
    struct dm_allocator a = mk(GiB, false);
    uint64_t h, g;
    /* 1000 -> 1024; region 1 GiB; split */
    get(&a, 1000, &g);
    assert_int_equal(g, 1024);
    assert_int_equal(stats(&a).reserved, GiB);
    /* 600 MiB: free 1 GiB - 1024 = 1073740800; 2 x 629145600 > it, but the
     * slack 444595200 >= 128 MiB -> split: 600 MiB */
    get(&a, 600 * MiB, &g);
    assert_int_equal(g, 600 * MiB);
    /* 300 MiB = 314572800: free 444595200; 2 x 300 MiB > it and the slack
     * 130022400 < 134217728 -> not split: the whole 444595200 */
    get(&a, 300 * MiB, &g);
    assert_int_equal(g, 444595200);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.allocated, GiB); /* 1024 + 629145600 + 444595200 */
    assert_int_equal(s.requested, 1000 + 900 * MiB);
    /* nothing left: available 0, the region is in use -> OOM */
    assert_int_equal(a.alloc(a.self, 1, &h, &g), DNNMEM_E_DEVICE_OOM);
    assert_int_equal(stats(&a).segments, 1);
    a.destroy(a.self);

    /* no limit and no growth: the first region is the nominal 1 PiB */
    a = mk(0, false);
    get(&a, 1, &g);
    assert_int_equal(g, 256);
    assert_int_equal(stats(&a).reserved, (uint64_t)1 << 50);
    a.destroy(a.self);
}

static void test_bad_options(void **state)
{
    (void)state;
    struct dm_bfc_opts o;
    struct dm_allocator a;
    dm_bfc_opts_init(&o);
    o.growth_first_region = 0;
    assert_int_equal(dm_alloc_bfc_new(&o, &a), DNNMEM_E_USAGE);
    dm_bfc_opts_init(&o);
    o.max_internal_fragmentation = 0;
    assert_int_equal(dm_alloc_bfc_new(&o, &a), DNNMEM_E_USAGE);
    dm_bfc_opts_init(&o);
    o.limit = ((uint64_t)1 << 50) + 1;
    assert_int_equal(dm_alloc_bfc_new(&o, &a), DNNMEM_E_USAGE);
}

/* Random sequences: chunks tile their regions, bytes_in_use is the sum of
 * in-use chunks, no two neighbouring chunks are both free. */
static void test_random_invariants(void **state)
{
    (void)state;
    static struct dm_bfc_chunk big[8192];
    for (int growth = 0; growth < 2; growth++) {
        struct dm_allocator a = mk(512 * MiB, growth != 0);
        uint64_t live[256] = {0};
        uint32_t x = 12345;
        for (int step = 0; step < 20000; step++) {
            x = x * 1103515245u + 12345u;
            int k = (int)((x >> 8) % 256);
            if (live[k]) {
                put(&a, live[k]);
                live[k] = 0;
            } else {
                x = x * 1103515245u + 12345u;
                uint64_t bytes = ((uint64_t)(x >> 4) % (8 * MiB)) + 1;
                uint64_t g;
                if (a.alloc(a.self, bytes, &live[k], &g) != DNNMEM_OK)
                    live[k] = 0;
            }
            if (step % 97)
                continue;
            size_t n = dm_bfc_snapshot(&a, big, 8192);
            assert_true(n <= 8192);
            uint64_t in_use = 0;
            for (size_t j = 0; j < n; j++) {
                if (big[j].in_use)
                    in_use += big[j].size;
                if (j + 1 < n && big[j + 1].region == big[j].region) {
                    assert_int_equal(big[j].addr + big[j].size, big[j + 1].addr);
                    assert_true(big[j].in_use || big[j + 1].in_use);
                }
            }
            struct dm_alloc_stats s = stats(&a);
            assert_int_equal(in_use, s.allocated);
            assert_true(s.reserved <= 512 * MiB);
        }
        a.destroy(a.self);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_and_bins),
        cmocka_unit_test(test_zero_bytes),
        cmocka_unit_test(test_growth_split),
        cmocka_unit_test(test_coalesce),
        cmocka_unit_test(test_best_fit),
        cmocka_unit_test(test_region_growth),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_no_growth),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_random_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
