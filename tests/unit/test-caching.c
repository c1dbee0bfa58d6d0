/*
 * test-caching.c: the PyTorch caching-allocator simulator on hand-built
 * request sequences. Every expected value is worked out in the comments from
 * the rules at the top of src/alloc/caching.c (runtime-facts.md section 1).
 * Addresses are compared with each other, never with absolute values.
 */
#include "util.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static struct dm_allocator mk(const struct dm_caching_opts *o)
{
    struct dm_allocator a;
    assert_int_equal(dm_alloc_caching_new(o, &a), DNNMEM_OK);
    return a;
}

static struct dm_allocator mk_default(void)
{
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    return mk(&o);
}

/* Allocate; the request must succeed. */
#define MAXB 4096
static struct dm_caching_block snap[MAXB];

static size_t take_snapshot(const struct dm_allocator *a)
{
    size_t n = dm_caching_snapshot(a, snap, MAXB);
    assert_true(n <= MAXB);
    return n;
}

/* The live block that was asked for with exactly `requested` bytes. */
static struct dm_caching_block live_block(const struct dm_allocator *a, uint64_t requested)
{
    size_t n = take_snapshot(a);
    for (size_t i = 0; i < n; i++)
        if (snap[i].allocated && snap[i].requested == requested)
            return snap[i];
    fail_msg("no live block of %llu requested bytes", (unsigned long long)requested);
    return snap[0];
}

/* ---- worked examples of runtime-facts.md 1.6, each on a fresh allocator ---- */

static void test_worked_examples(void **state)
{
    (void)state;
    static const struct {
        uint64_t req, granted, reserved, inactive;
        bool small;
    } ex[] = {
        /* 1 B: 512 B, small pool, new 2 MiB segment, split (rest 2 MiB - 512
         * = 2096640 >= 512), which stays inactive-split. */
        {1, 512, 2 * MiB, 2 * MiB - 512, true},
        /* 800 KiB = 819200 = 1600 x 512: small, 2 MiB segment, rest
         * 2097152 - 819200 = 1277952. */
        {800 * KiB, 800 * KiB, 2 * MiB, 2 * MiB - 800 * KiB, true},
        /* 1 MiB + 1 -> 1 MiB + 512 = 1049088: large, < 10 MiB -> 20 MiB
         * segment, rest 20971520 - 1049088 = 19922432 > 1 MiB: split. */
        {MiB + 1, MiB + 512, 20 * MiB, 20 * MiB - MiB - 512, false},
        /* 9.5 MiB = 9961472: 20 MiB segment, rest 10.5 MiB: split. */
        {9 * MiB + 512 * KiB, 9 * MiB + 512 * KiB, 20 * MiB, 10 * MiB + 512 * KiB, false},
        /* 10 MiB: segment 10 MiB (a multiple of 2 MiB), nothing left. */
        {10 * MiB, 10 * MiB, 10 * MiB, 0, false},
        /* 19.5 MiB: segment 20 MiB, rest 0.5 MiB <= 1 MiB: not split, the
         * whole 20 MiB is handed out and counted as allocated. */
        {19 * MiB + 512 * KiB, 20 * MiB, 20 * MiB, 0, false},
        /* 100 MiB + 1 KiB = 104858624 (a multiple of 512): segment 102 MiB
         * = 106954752, rest 2096128 > 1 MiB: split. */
        {100 * MiB + KiB, 100 * MiB + KiB, 102 * MiB, 2 * MiB - KiB, false},
    };
    for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
        struct dm_allocator a = mk_default();
        uint64_t g;
        uint64_t h = get(&a, ex[k].req, &g);
        assert_int_not_equal(h, 0);
        assert_int_equal(g, ex[k].granted);
        struct dm_alloc_stats s = stats(&a);
        assert_int_equal(s.allocated, ex[k].granted);
        assert_int_equal(s.peak_allocated, ex[k].granted);
        assert_int_equal(s.requested, ex[k].req);
        assert_int_equal(s.reserved, ex[k].reserved);
        assert_int_equal(s.peak_reserved, ex[k].reserved);
        assert_int_equal(s.inactive_split, ex[k].inactive);
        assert_int_equal(s.segments, 1);
        assert_int_equal(live_block(&a, ex[k].req).small, ex[k].small);
        /* Freeing returns nothing to the device: the segment stays reserved
         * and whole again, so nothing is inactive-split. */
        put(&a, h);
        s = stats(&a);
        assert_int_equal(s.allocated, 0);
        assert_int_equal(s.requested, 0);
        assert_int_equal(s.reserved, ex[k].reserved);
        assert_int_equal(s.inactive_split, 0);
        a.destroy(a.self);
    }
}

/* A zero-byte request gets no block (PyTorch calls malloc only for size != 0). */
static void test_zero_bytes(void **state)
{
    (void)state;
    struct dm_allocator a = mk_default();
    uint64_t g = 99;
    uint64_t h = get(&a, 0, &g);
    assert_int_equal(h, 0);
    assert_int_equal(g, 0);
    put(&a, 0);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.allocated, 0);
    a.destroy(a.self);
}

/* ---- best fit -------------------------------------------------------------------- */

static void test_best_fit(void **state)
{
    (void)state;
    struct dm_allocator a = mk_default();
    uint64_t g;
    /* Segments, in address order: A 16 MiB, B 12 MiB (both >= 10 MiB, exact
     * multiples of 2 MiB: no remainder). */
    uint64_t ha = get(&a, 16 * MiB, NULL);
    uint64_t hb = get(&a, 12 * MiB, NULL);
    uint64_t addr_a = live_block(&a, 16 * MiB).addr, addr_b = live_block(&a, 12 * MiB).addr;
    assert_true(addr_a < addr_b); /* segments get increasing addresses */
    put(&a, ha);
    put(&a, hb);
    /* 11 MiB: the smallest cached block >= 11 MiB is B (12 MiB), although A
     * has the lower address. Rest 1 MiB is not > 1 MiB: no split, 12 MiB
     * handed out; no new segment. */
    uint64_t h1 = get(&a, 11 * MiB, &g);
    assert_int_equal(g, 12 * MiB);
    assert_int_equal(live_block(&a, 11 * MiB).addr, addr_b);
    /* 15 MiB: only A fits; rest 1 MiB: no split, 16 MiB handed out. */
    uint64_t h2 = get(&a, 15 * MiB, &g);
    assert_int_equal(g, 16 * MiB);
    assert_int_equal(live_block(&a, 15 * MiB).addr, addr_a);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 28 * MiB);
    assert_int_equal(s.segments, 2);
    assert_int_equal(s.allocated, 28 * MiB);
    assert_int_equal(s.requested, 26 * MiB);
    put(&a, h1);
    put(&a, h2);

    a.destroy(a.self);

    /* Equal sizes: the lower address wins, whatever the order of frees. */
    a = mk_default();
    uint64_t c1 = get(&a, 14 * MiB, NULL);
    uint64_t c2 = get(&a, 14 * MiB - 512, NULL); /* also a 14 MiB block, at a higher address */
    uint64_t lo = live_block(&a, 14 * MiB).addr, hi = live_block(&a, 14 * MiB - 512).addr;
    assert_true(lo < hi);
    put(&a, c2); /* the higher one is cached first */
    put(&a, c1);
    uint64_t c3 = get(&a, 13 * MiB, &g); /* rest 1 MiB: no split */
    assert_int_equal(g, 14 * MiB);
    assert_int_equal(live_block(&a, 13 * MiB).addr, lo);
    put(&a, c3);
    a.destroy(a.self);
}

/* Best fit in the small pool, whose free blocks of each 512-byte size are
 * kept apart: one 2 MiB segment (rule 3) cut, in address order, into A 4
 * KiB, 512 B, C 8 KiB, 512 B, E 1 KiB, 512 B and the free rest T (rule 5:
 * the small pool splits any rest >= 512 B). A, C and E freed (each between
 * live blocks: no merge), requests take the smallest free block that fits,
 * whichever size lies between: 2 KiB -> A (4 KiB; rest 2 KiB at A + 2 KiB),
 * 5 KiB -> C (rest 3 KiB at C + 5 KiB), 1 KiB -> E whole, 1.5 KiB -> A's
 * rest (rest 512 B at A + 3.5 KiB). */
static void test_best_fit_small_pool(void **state)
{
    (void)state;
    struct dm_allocator a = mk_default();
    uint64_t g;
    uint64_t ha = get(&a, 4 * KiB, NULL);
    get(&a, 512, NULL);
    uint64_t hc = get(&a, 8 * KiB, NULL);
    get(&a, 512, NULL);
    uint64_t he = get(&a, 1 * KiB, NULL);
    get(&a, 512, NULL);
    put(&a, ha);
    put(&a, hc);
    put(&a, he);
    get(&a, 2 * KiB, &g);
    assert_int_equal(g, 2 * KiB);
    get(&a, 5 * KiB, &g);
    assert_int_equal(g, 5 * KiB);
    get(&a, 1 * KiB, &g);
    assert_int_equal(g, 1 * KiB);
    get(&a, 1536, &g);
    assert_int_equal(g, 1536);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 2 * MiB);
    assert_int_equal(s.segments, 1);
    size_t n = take_snapshot(&a);
    uint64_t base = snap[0].addr, free_at[3], free_size[3];
    size_t n_free = 0;
    for (size_t i = 0; i < n; i++)
        if (!snap[i].allocated) {
            assert_true(n_free < 3);
            free_at[n_free] = snap[i].addr - base;
            free_size[n_free++] = snap[i].size;
        }
    assert_int_equal(n_free, 3);
    assert_int_equal(free_at[0], 3584); /* A + 3.5 KiB: 512 B */
    assert_int_equal(free_size[0], 512);
    assert_int_equal(free_at[1], 4608 + 5 * KiB); /* C + 5 KiB: 3 KiB */
    assert_int_equal(free_size[1], 3 * KiB);
    assert_int_equal(free_at[2], 14848); /* T: the segment past the third 512 B */
    assert_int_equal(free_size[2], 2 * MiB - 14848);
    a.destroy(a.self);
}

/* Best fit among many cached blocks (the pools' ordered trees): N sizes of
 * (k + 5) x 2 MiB, two segments of each, created and freed in scrambled
 * orders. Each is a multiple of 2 MiB >= 10 MiB: its own segment, exact. */
#define MANY 1500

static void shuffle(uint32_t *v, size_t n, uint32_t *seed)
{
    for (size_t i = n - 1; i > 0; i--) {
        *seed = *seed * 1664525u + 1013904223u;
        size_t j = (*seed >> 8) % (i + 1);
        uint32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static void test_best_fit_many(void **state)
{
    (void)state;
    static uint32_t order[2 * MANY];
    static uint64_t h[2 * MANY];
    uint32_t seed = 12345;
    struct dm_allocator a = mk_default();
    uint64_t g, total = 0;
    for (uint32_t k = 0; k < 2 * MANY; k++)
        order[k] = k;
    shuffle(order, 2 * MANY, &seed);
    for (size_t k = 0; k < 2 * MANY; k++) { /* entry e: size index e / 2 */
        uint64_t size = (order[k] / 2 + 5) * 2 * MiB;
        h[order[k]] = get(&a, size, &g);
        assert_int_equal(g, size);
        total += size;
    }
    shuffle(order, 2 * MANY, &seed);
    for (size_t k = 0; k < 2 * MANY; k++)
        put(&a, h[order[k]]);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, total);
    assert_int_equal(s.segments, 2 * MANY);
    /* Round 1: each size, in scrambled order, asked for 512 B less (rounds
     * back up to it): the exact size fits best, and of its two blocks the
     * lower address is taken; rest 0: no split. */
    for (uint32_t k = 0; k < MANY; k++)
        order[k] = k;
    shuffle(order, MANY, &seed);
    for (size_t k = 0; k < MANY; k++) {
        uint64_t size = (order[k] + 5) * 2 * MiB;
        get(&a, size - 512, &g);
        assert_int_equal(g, size);
    }
    size_t n = take_snapshot(&a);
    assert_int_equal(n, 2 * MANY);
    static bool seen[MANY];
    for (size_t i = 0; i < n; i++) { /* in address order: the first of each size is live */
        size_t k = (size_t)(snap[i].size / (2 * MiB) - 5);
        assert_true(k < MANY);
        assert_int_equal(snap[i].allocated, !seen[k]);
        seen[k] = true;
    }
    /* Round 2: 1 MiB less than each size: the free copy of that size is the
     * smallest free block >= the request (the next smaller size's free copy
     * is 1 MiB short); rest 1 MiB is not > 1 MiB: handed out whole. */
    shuffle(order, MANY, &seed);
    for (size_t k = 0; k < MANY; k++) {
        uint64_t size = (order[k] + 5) * 2 * MiB;
        get(&a, size - MiB, &g);
        assert_int_equal(g, size);
    }
    s = stats(&a);
    assert_int_equal(s.reserved, total); /* no new segment */
    assert_int_equal(s.segments, 2 * MANY);
    assert_int_equal(s.allocated, total);
    a.destroy(a.self);
}

/* A freed block is reused without reserving more. */
static void test_reuse_without_new_reserve(void **state)
{
    (void)state;
    struct dm_allocator a = mk_default();
    uint64_t g;
    /* 5 MiB: a 20 MiB segment split into 5 MiB + 15 MiB. */
    uint64_t h = get(&a, 5 * MiB, &g);
    assert_int_equal(g, 5 * MiB);
    assert_int_equal(stats(&a).inactive_split, 15 * MiB);
    put(&a, h); /* merges back: one whole 20 MiB free segment */
    assert_int_equal(stats(&a).inactive_split, 0);
    /* 3 MiB: best fit is the cached 20 MiB segment; split 3 + 17. */
    h = get(&a, 3 * MiB, &g);
    assert_int_equal(g, 3 * MiB);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 20 * MiB);
    assert_int_equal(s.peak_reserved, 20 * MiB);
    assert_int_equal(s.segments, 1);
    assert_int_equal(s.allocated, 3 * MiB);
    assert_int_equal(s.peak_allocated, 5 * MiB);
    assert_int_equal(s.inactive_split, 17 * MiB);
    put(&a, h);
    a.destroy(a.self);
}

/* ---- merging ------------------------------------------------------------------------ */

static void test_merge_on_free(void **state)
{
    (void)state;
    struct dm_allocator a = mk_default();
    const uint64_t q = 512 * KiB; /* small pool */
    /* One 2 MiB segment: x [0, q), y [q, 2q), z [2q, 3q), free tail [3q, 4q).
     * inactive: 1.5 MiB after x, 1 MiB after y, 512 KiB after z. */
    uint64_t x = get(&a, q, NULL);
    assert_int_equal(stats(&a).inactive_split, 3 * q);
    uint64_t y = get(&a, q - 1, NULL); /* rounds to q; distinct requested sizes name blocks */
    assert_int_equal(stats(&a).inactive_split, 2 * q);
    uint64_t z = get(&a, q - 2, NULL);
    assert_int_equal(stats(&a).inactive_split, q);
    uint64_t ax = live_block(&a, q).addr;
    assert_int_equal(live_block(&a, q - 1).addr, ax + q);
    assert_int_equal(live_block(&a, q - 2).addr, ax + 2 * q);
    assert_int_equal(stats(&a).reserved, 2 * MiB);

    /* free x: no free neighbour (y is live): +512 KiB inactive -> 1 MiB. */
    put(&a, x);
    assert_int_equal(stats(&a).inactive_split, 2 * q);
    /* free z: merges with the tail into [2q, 4q) = 1 MiB: -512 KiB + 1 MiB
     * -> 1.5 MiB. */
    put(&a, z);
    assert_int_equal(stats(&a).inactive_split, 3 * q);
    size_t n = take_snapshot(&a);
    assert_int_equal(n, 3); /* [0,q) free, [q,2q) y, [2q,4q) free */
    assert_int_equal(snap[2].size, 2 * q);
    assert_false(snap[2].allocated);
    /* free y: merges with both neighbours into the whole 2 MiB segment, which
     * is no longer split: inactive -> 0. */
    put(&a, y);
    assert_int_equal(stats(&a).inactive_split, 0);
    assert_int_equal(stats(&a).peak_inactive_split, 3 * q);
    n = take_snapshot(&a);
    assert_int_equal(n, 1);
    assert_int_equal(snap[0].size, 2 * MiB);
    assert_true(snap[0].segment_start);
    assert_int_equal(snap[0].addr, ax);
    /* 1 MiB (still the small pool) now fits in the merged block: no new reserve. */
    uint64_t w = get(&a, MiB, NULL);
    assert_int_equal(stats(&a).reserved, 2 * MiB);
    assert_int_equal(live_block(&a, MiB).addr, ax);
    put(&a, w);
    a.destroy(a.self);
}

static void test_no_merge_across_segments(void **state)
{
    (void)state;
    struct dm_allocator a = mk_default();
    /* Two 10 MiB segments, the second right above the first. */
    uint64_t h1 = get(&a, 10 * MiB, NULL);
    uint64_t h2 = get(&a, 10 * MiB, NULL);
    put(&a, h1);
    put(&a, h2);
    size_t n = take_snapshot(&a);
    assert_int_equal(n, 2); /* both free, still two segments */
    assert_int_equal(snap[0].size, 10 * MiB);
    assert_int_equal(snap[1].size, 10 * MiB);
    assert_true(snap[0].segment_start && snap[1].segment_start);
    assert_int_equal(snap[1].addr, snap[0].addr + 10 * MiB); /* adjacent */
    assert_int_equal(stats(&a).inactive_split, 0);
    /* 20 MiB fits in neither: a third segment of 20 MiB; reserved 40 MiB. */
    uint64_t h3 = get(&a, 20 * MiB, NULL);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 40 * MiB);
    assert_int_equal(s.segments, 3);
    put(&a, h3);
    a.destroy(a.self);
}

/* ---- capacity and the OOM path ------------------------------------------------------- */

/* Capacity 60 MiB. A and B are 12 MiB segments, freed: cached and unsplit.
 * X = 2 MiB lives in a 20 MiB segment split 2 + 18. Reserved 44 MiB. */
static struct dm_allocator oom_setup(uint64_t *x)
{
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    o.capacity = 60 * MiB;
    struct dm_allocator a = mk(&o);
    uint64_t ha = get(&a, 12 * MiB, NULL), hb = get(&a, 12 * MiB, NULL);
    *x = get(&a, 2 * MiB, NULL); /* after A and B, or it would take a piece of them */
    put(&a, ha);
    put(&a, hb);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 44 * MiB);
    assert_int_equal(s.segments, 3);
    assert_int_equal(s.inactive_split, 18 * MiB);
    return a;
}

static void test_oom_releases_cached_segments(void **state)
{
    (void)state;
    uint64_t x;
    struct dm_allocator a = oom_setup(&x);
    /* 30 MiB: no cached block >= 30 MiB (18, 12, 12). A 30 MiB segment would
     * make 74 > 60 MiB: fails. max_split_size is unlimited, so no oversize
     * release. release_cached_blocks frees A and B (unsplit), not X's split
     * segment: reserved 20 MiB. The retry (counted) makes 50 <= 60: fits. */
    uint64_t g;
    uint64_t h = get(&a, 30 * MiB, &g);
    assert_int_equal(g, 30 * MiB);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 50 * MiB);
    assert_int_equal(s.peak_reserved, 50 * MiB);
    assert_int_equal(s.segments, 2);
    assert_int_equal(s.peak_segments, 3);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_ooms, 0);
    assert_int_equal(s.allocated, 32 * MiB);
    assert_int_equal(s.inactive_split, 18 * MiB);
    put(&a, h);
    put(&a, x);
    a.destroy(a.self);
}

static void test_oom_unavoidable(void **state)
{
    (void)state;
    uint64_t x;
    struct dm_allocator a = oom_setup(&x);
    uint64_t h1 = get(&a, 30 * MiB, NULL); /* as above: reserved 50, one retry */
    /* Another 30 MiB: nothing cached fits (only the 18 MiB piece); 50 + 30 >
     * 60; nothing unsplit is cached, so the retry (second one counted) fails
     * too: OOM. Nothing changes. */
    uint64_t h = 7, g = 7;
    assert_int_equal(a.alloc(a.self, 30 * MiB, &h, &g), DNNMEM_E_DEVICE_OOM);
    assert_int_equal(h, 0);
    assert_int_equal(g, 0);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.num_alloc_retries, 2);
    assert_int_equal(s.oom_alloc_size, 30 * MiB);
    assert_int_equal(s.reserved, 50 * MiB);
    assert_int_equal(s.allocated, 32 * MiB);
    /* 18 MiB still fits: the cached piece of X's segment (rest 0). */
    uint64_t h2 = get(&a, 18 * MiB, &g);
    assert_int_equal(g, 18 * MiB);
    assert_int_equal(stats(&a).reserved, 50 * MiB);
    assert_int_equal(stats(&a).inactive_split, 0);
    put(&a, h2);
    put(&a, h1);
    put(&a, x);
    a.destroy(a.self);
}

/* A request larger than the capacity fails at once, after the retry. */
static void test_oom_larger_than_device(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    o.capacity = GiB;
    struct dm_allocator a = mk(&o);
    uint64_t h, g;
    assert_int_equal(a.alloc(a.self, 2 * GiB, &h, &g), DNNMEM_E_DEVICE_OOM);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.reserved, 0);
    a.destroy(a.self);
}

/* ---- max_split_size ------------------------------------------------------------------ */

static void test_max_split_size(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    o.max_split_size = 40 * MiB;
    struct dm_allocator a = mk(&o);
    uint64_t g;
    /* 70 MiB: a 70 MiB segment, oversize (>= 40 MiB); freed: cached. */
    uint64_t h = get(&a, 70 * MiB, &g);
    assert_int_equal(g, 70 * MiB);
    put(&a, h);
    /* 30 MiB < 40 MiB may not take the 70 MiB block (rule a): new 30 MiB
     * segment, reserved 100 MiB. */
    uint64_t h30 = get(&a, 30 * MiB, &g);
    assert_int_equal(g, 30 * MiB);
    assert_int_equal(stats(&a).reserved, 100 * MiB);
    /* 45 MiB >= 40: the 70 MiB block is >= 45 + 20 = 65 MiB (rule b):
     * refused. New segment: 45 MiB rounded up to 2 MiB = 46 MiB; the request
     * is not below max_split_size, so the 1 MiB rest is not split off (it
     * would not be anyway): 46 MiB handed out. Reserved 146 MiB. */
    uint64_t h45 = get(&a, 45 * MiB, &g);
    assert_int_equal(g, 46 * MiB);
    assert_int_equal(stats(&a).reserved, 146 * MiB);
    /* 55 MiB: 70 < 55 + 20 = 75: takes the cached block whole (never split). */
    uint64_t h55 = get(&a, 55 * MiB, &g);
    assert_int_equal(g, 70 * MiB);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 146 * MiB);
    assert_int_equal(s.segments, 3);
    assert_int_equal(s.allocated, (30 + 46 + 70) * MiB);
    assert_int_equal(s.requested, (30 + 45 + 55) * MiB);
    assert_int_equal(s.inactive_split, 0);
    put(&a, h30);
    put(&a, h45);
    put(&a, h55);
    a.destroy(a.self);

    /* max_non_split_rounding (2.6+) widens rule b: with 30 MiB, 45 MiB may
     * take the 70 MiB block (70 < 75). */
    o.max_non_split_rounding = 30 * MiB;
    a = mk(&o);
    put(&a, get(&a, 70 * MiB, NULL));
    h45 = get(&a, 45 * MiB, &g);
    assert_int_equal(g, 70 * MiB);
    assert_int_equal(stats(&a).reserved, 70 * MiB);
    put(&a, h45);
    a.destroy(a.self);
}

/* On OOM, cached oversize blocks go first, and that retry is not counted. */
static void test_max_split_oom_releases_oversize(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    o.max_split_size = 40 * MiB;
    o.capacity = 100 * MiB;
    struct dm_allocator a = mk(&o);
    put(&a, get(&a, 50 * MiB, NULL)); /* cached oversize block of 50 MiB */
    /* 2 MiB: the 50 MiB block is refused (rule a): a new 20 MiB segment
     * split 2 + 18. Reserved 70 MiB. */
    uint64_t x = get(&a, 2 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 70 * MiB);
    /* 35 MiB: cached 18 MiB is too small, 50 MiB refused (rule a). Segment
     * 36 MiB: 70 + 36 = 106 > 100 fails. Oversize release: key = max(35, 40)
     * = 40 MiB; the smallest cached block >= 40 MiB is the 50 MiB one:
     * released, reserved 20; 20 + 36 = 56 fits. No retry counted. */
    uint64_t g;
    uint64_t h = get(&a, 35 * MiB, &g);
    assert_int_equal(g, 36 * MiB); /* rest 1 MiB is not > 1 MiB */
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 56 * MiB);
    assert_int_equal(s.segments, 2);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.num_ooms, 0);
    put(&a, h);
    put(&a, x);
    a.destroy(a.self);
}

/* ---- roundup_power2_divisions ----------------------------------------------------------- */

static void test_roundup_power2(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    /* Default (no divisions): multiples of 512, minimum 512. */
    assert_int_equal(dm_caching_round_size(&o, 1), 512);
    assert_int_equal(dm_caching_round_size(&o, 1200), 1536);
    assert_int_equal(dm_caching_round_size(&o, 70 * MiB + 1), 70 * MiB + 512);

    /* 1.13 form, d = 4 for every band. The code comment's example: between
     * 1024 and 2048 the steps are 1024/1280/1536/1792, so 1200 -> 1280. But
     * round_size applies divisions only when size > 512 x d = 2048, so a
     * request of 1200 B still takes 1536. The same example scaled by 1 KiB:
     * 1200 KiB -> steps of 256 KiB above 1 MiB -> 1280 KiB. */
    dm_caching_opts_divisions(&o, 4);
    assert_int_equal(dm_caching_round_size(&o, 1200), 1536);
    assert_int_equal(dm_caching_round_size(&o, 1200 * KiB), 1280 * KiB);
    /* Exact powers of two stay: 2 MiB, 64 MiB. */
    assert_int_equal(dm_caching_round_size(&o, 2 * MiB), 2 * MiB);
    assert_int_equal(dm_caching_round_size(&o, 64 * MiB), 64 * MiB);
    /* 70 MiB: between 64 and 128 MiB in steps of 16 MiB -> 80 MiB. */
    assert_int_equal(dm_caching_round_size(&o, 70 * MiB), 80 * MiB);
    /* Sizes under 1 MiB use band 0: 600 KiB lies between 512 KiB and 1 MiB,
     * steps of 128 KiB -> 640 KiB. */
    assert_int_equal(dm_caching_round_size(&o, 600 * KiB), 640 * KiB);
    /* Sizes past 32 GiB use band 15: 100 GiB, between 64 and 128 GiB in
     * steps of 16 GiB -> 112 GiB. */
    assert_int_equal(dm_caching_round_size(&o, 100 * GiB), 112 * GiB);

    /* 2.x per-band form: only the band [64 MiB, 128 MiB) = index 26 - 20 = 6
     * has d = 8 (as "[64:8]" would set it). */
    dm_caching_opts_init(&o);
    o.roundup_power2[6] = 8;
    assert_int_equal(dm_caching_round_size(&o, 70 * MiB), 72 * MiB); /* steps of 8 MiB */
    assert_int_equal(dm_caching_round_size(&o, 35 * MiB + 1), 35 * MiB + 512); /* band 5 */
    struct dm_allocator a = mk(&o);
    uint64_t g;
    /* Through the allocator: 70 MiB -> 72 MiB block, in a 72 MiB segment. */
    uint64_t h = get(&a, 70 * MiB, &g);
    assert_int_equal(g, 72 * MiB);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.allocated, 72 * MiB);
    assert_int_equal(s.requested, 70 * MiB);
    assert_int_equal(s.reserved, 72 * MiB);
    put(&a, h);
    a.destroy(a.self);

    /* Divisions must be powers of two (or 0). */
    o.roundup_power2[3] = 3;
    struct dm_allocator bad;
    assert_int_equal(dm_alloc_caching_new(&o, &bad), DNNMEM_E_USAGE);
}

static void test_bad_options(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    struct dm_allocator a;
    dm_caching_opts_init(&o);
    o.max_split_size = 10 * MiB; /* below the 20 MB minimum */
    assert_int_equal(dm_alloc_caching_new(&o, &a), DNNMEM_E_USAGE);
    dm_caching_opts_init(&o);
    o.max_non_split_rounding = MiB;
    assert_int_equal(dm_alloc_caching_new(&o, &a), DNNMEM_E_USAGE);
    dm_caching_opts_init(&o);
    o.gc_threshold = 1.0;
    assert_int_equal(dm_alloc_caching_new(&o, &a), DNNMEM_E_USAGE);
    /* Other allocators are left alone by the inspection calls. */
    assert_int_equal(dm_alloc_rounding_new(512, &a), DNNMEM_OK);
    dm_caching_empty_cache(&a);
    dm_caching_reset_peaks(&a);
    assert_int_equal(dm_caching_snapshot(&a, snap, MAXB), 0);
    a.destroy(a.self);
}

/* ---- expandable segments ------------------------------------------------------------------ */

static void test_expandable_segments(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    o.expandable_segments = true;
    struct dm_allocator a = mk(&o);
    uint64_t g;
    /* 30 MiB: a new large-pool segment; pages of 20 MiB: 2 pages mapped, 40
     * MiB reserved. Split (rest 10 MiB >= 512): [0,30) live, [30,40) free. */
    uint64_t h1 = get(&a, 30 * MiB, &g);
    assert_int_equal(g, 30 * MiB);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 40 * MiB);
    assert_int_equal(s.segments, 0);       /* torch counts no cudaMalloc segment */
    assert_int_equal(s.inactive_split, 0); /* nor inactive-split bytes here */
    uint64_t base = live_block(&a, 30 * MiB).addr;
    /* 16 MiB: no free block >= 16 MiB. The free [30,40) lies before the
     * unmapped rest: one more page is mapped and merged, [30,60) free;
     * reserved 60 MiB; the request takes [30,46), [46,60) stays free. */
    uint64_t h2 = get(&a, 16 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 60 * MiB);
    assert_int_equal(live_block(&a, 16 * MiB).addr, base + 30 * MiB);
    /* 4 MiB: the only free block is [46,60): [46,50) live, [50,60) free. */
    uint64_t h3 = get(&a, 4 * MiB, NULL);
    assert_int_equal(live_block(&a, 4 * MiB).addr, base + 46 * MiB);
    /* Free the 16 MiB block: [30,46) free between two live blocks. */
    put(&a, h2);
    /* 9 MiB: by (size, address) the smallest fit is [50,60) (10 MiB), but it
     * borders unmapped space, so best fit counts it as very large and takes
     * [30,46) instead: [30,39) live. Reserved unchanged. */
    uint64_t h4 = get(&a, 9 * MiB, NULL);
    assert_int_equal(live_block(&a, 9 * MiB).addr, base + 30 * MiB);
    assert_int_equal(stats(&a).reserved, 60 * MiB);
    /* 1 KiB: the small pool has its own segment with 2 MiB pages. */
    uint64_t h5 = get(&a, KiB, &g);
    assert_int_equal(g, KiB);
    assert_int_equal(stats(&a).reserved, 62 * MiB);
    assert_int_equal(stats(&a).peak_reserved, 62 * MiB);
    /* Free every large block: one free mapped block [0,60) before the
     * unmapped rest. empty_cache unmaps its three pages; the segment is then
     * wholly unmapped and dropped. The small pool's page stays (live). */
    put(&a, h1);
    put(&a, h3);
    put(&a, h4);
    assert_int_equal(stats(&a).reserved, 62 * MiB);
    dm_caching_empty_cache(&a);
    s = stats(&a);
    assert_int_equal(s.reserved, 2 * MiB);
    assert_int_equal(s.peak_reserved, 62 * MiB);
    dm_caching_reset_peaks(&a);
    assert_int_equal(stats(&a).peak_reserved, 2 * MiB);
    put(&a, h5);
    a.destroy(a.self);
}

static void test_expandable_oom(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    o.expandable_segments = true;
    o.capacity = 60 * MiB; /* address range 1.125 x 60 = 67.5 -> 4 pages: [0,80) */
    struct dm_allocator a = mk(&o);
    /* 30 MiB: 2 pages, reserved 40; [30,40) free. 25 MiB: maps 1 more page
     * (40 + 20 = 60 <= 60): [30,55) live, [55,60) free. */
    uint64_t h1 = get(&a, 30 * MiB, NULL);
    uint64_t base = live_block(&a, 30 * MiB).addr;
    uint64_t h2 = get(&a, 25 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 60 * MiB);
    /* 10 MiB: needs 5 MiB more than [55,60): a 4th page makes 80 > 60 and
     * fails. The free [55,60) holds no whole page, so releasing unmaps
     * nothing; the (counted) retry fails: OOM. torch's message names the
     * segment size of the request: 10 MiB. */
    uint64_t h, g;
    assert_int_equal(a.alloc(a.self, 10 * MiB, &h, &g), DNNMEM_E_DEVICE_OOM);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.oom_alloc_size, 10 * MiB);
    assert_int_equal(s.reserved, 60 * MiB);
    /* Free the 30 MiB block: [0,30) free. empty_cache unmaps its whole page
     * [0,20) (reserved 40) and keeps [20,30) mapped and free. */
    put(&a, h1);
    dm_caching_empty_cache(&a);
    assert_int_equal(stats(&a).reserved, 40 * MiB);
    /* 28 MiB: no free block fits ([20,30), [55,60)). The lowest place that
     * can hold it is unmapped [0,20) + free [20,30): page [0,20) is mapped
     * again (40 + 20 = 60) and the block starts at the segment's base. */
    uint64_t h3 = get(&a, 28 * MiB, NULL);
    assert_int_equal(stats(&a).reserved, 60 * MiB);
    assert_int_equal(live_block(&a, 28 * MiB).addr, base);
    put(&a, h3);
    put(&a, h2);
    a.destroy(a.self);

    /* Capacity 100 MiB: address range 112.5 -> 6 pages, [0,120). */
    o.capacity = 100 * MiB;
    a = mk(&o);
    /* A = 50 MiB: 3 pages (60), [50,60) free. B = 30 MiB: [50,60) plus one
     * more page: [50,80), nothing left over. Reserved 80. */
    uint64_t ha = get(&a, 50 * MiB, NULL);
    base = live_block(&a, 50 * MiB).addr;
    uint64_t hb = get(&a, 30 * MiB, NULL);
    assert_int_equal(live_block(&a, 30 * MiB).addr, base + 50 * MiB);
    assert_int_equal(stats(&a).reserved, 80 * MiB);
    put(&a, ha); /* [0,50) free */
    /* 55 MiB: no free block fits; [80,120) holds 40 < 55; a second segment
     * ([0,120) above the first) would map 3 pages: 80 + 60 > 100 fails.
     * release_cached_blocks unmaps pages [0,40) of the free [0,50)
     * (reserved 40); the retry finds [0,40) + [40,50) = 50 < 55 and [80,120)
     * too small, so it maps 3 pages of the second segment: 40 + 60 = 100. */
    uint64_t hc = get(&a, 55 * MiB, NULL);
    s = stats(&a);
    assert_int_equal(s.reserved, 100 * MiB);
    assert_int_equal(s.peak_reserved, 100 * MiB);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_ooms, 0);
    assert_int_equal(live_block(&a, 55 * MiB).addr, base + 120 * MiB);
    put(&a, hb);
    put(&a, hc);
    a.destroy(a.self);
}

/* ---- garbage collection ------------------------------------------------------------------ */

/* The same sequence, with and without a memory fraction. */
static struct dm_allocator gc_run(bool fraction)
{
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    o.capacity = 100 * MiB;
    o.capacity_is_fraction = fraction;
    o.gc_threshold = 0.5; /* 50 MiB */
    struct dm_allocator a = mk(&o);
    /* Large-pool searches are numbered; a block cached after search n has
     * age (current search - n). */
    uint64_t ha = get(&a, 12 * MiB, NULL); /* search 1; new 12 MiB segment (reserved 12) */
    uint64_t hb = get(&a, 14 * MiB, NULL); /* search 2; 14 (26) */
    uint64_t hc = get(&a, 16 * MiB, NULL); /* search 3; 16 (42) */
    put(&a, ha);                           /* A cached after search 3 */
    uint64_t hd = get(&a, 18 * MiB, NULL); /* search 4: A too small; 42 <= 50: no GC; (60) */
    put(&a, hb);                           /* B, C cached after search 4 */
    put(&a, hc);
    /* search 5: nothing >= 20 MiB cached. With a fraction, GC: 60 > 50,
     * target 10 MiB. Ages A 2, B 1, C 1; average 4/3. The sweep in size
     * order frees A (2 >= 4/3; 12 MiB >= 10: done), keeps B and C. Reserved
     * 48, then the new 20 MiB segment: 68. Without a fraction: no GC, 80. */
    uint64_t he = get(&a, 20 * MiB, NULL);
    put(&a, hd);
    put(&a, he);
    return a;
}

static void test_gc_threshold(void **state)
{
    (void)state;
    struct dm_allocator a = gc_run(true);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 68 * MiB);
    assert_int_equal(s.segments, 4); /* B, C, D, E */
    assert_int_equal(s.num_alloc_retries, 0);
    /* B is still cached: 14 MiB reuses it. */
    uint64_t g;
    uint64_t h = get(&a, 14 * MiB, &g);
    assert_int_equal(g, 14 * MiB);
    assert_int_equal(stats(&a).reserved, 68 * MiB);
    put(&a, h);
    a.destroy(a.self);

    a = gc_run(false);
    s = stats(&a);
    assert_int_equal(s.reserved, 80 * MiB);
    assert_int_equal(s.segments, 5);
    a.destroy(a.self);
}

/* Several sweeps: every cached block has the same age, so the first sweep
 * frees them all (age >= average) in size order. */
static void test_gc_equal_ages(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    o.capacity = 100 * MiB;
    o.capacity_is_fraction = true;
    o.gc_threshold = 0.4; /* 40 MiB */
    struct dm_allocator a = mk(&o);
    uint64_t h1 = get(&a, 10 * MiB, NULL); /* search 1; reserved 10 */
    uint64_t h2 = get(&a, 12 * MiB, NULL); /* search 2; 22 */
    uint64_t h3 = get(&a, 14 * MiB, NULL); /* search 3; 36 */
    uint64_t hx = get(&a, 16 * MiB, NULL); /* search 4; 36 <= 40: no GC; 52 */
    put(&a, h1);
    put(&a, h2);
    put(&a, h3); /* all cached after search 4 */
    /* search 5: nothing >= 30 MiB. 52 > 40: target 12 MiB. Ages 1, 1, 1,
     * average 1: the sweep frees all three (36 MiB) although 12 would do:
     * reserved 16, then + 30 = 46. */
    uint64_t hy = get(&a, 30 * MiB, NULL);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 46 * MiB);
    assert_int_equal(s.segments, 2);
    put(&a, hx);
    put(&a, hy);
    a.destroy(a.self);
}

/* ---- fragmentation -------------------------------------------------------------------------- */

static void test_inactive_split(void **state)
{
    (void)state;
    struct dm_allocator a = mk_default();
    /* Three 4 MiB blocks in one 20 MiB segment: [0,4) [4,8) [8,12), free
     * [12,20). inactive: 16, then 12, then 8 MiB. */
    uint64_t h1 = get(&a, 4 * MiB, NULL);
    assert_int_equal(stats(&a).inactive_split, 16 * MiB);
    uint64_t h2 = get(&a, 4 * MiB - 1, NULL); /* rounds to 4 MiB */
    assert_int_equal(stats(&a).inactive_split, 12 * MiB);
    uint64_t h3 = get(&a, 4 * MiB - 2, NULL);
    assert_int_equal(stats(&a).inactive_split, 8 * MiB);
    uint64_t hole = live_block(&a, 4 * MiB - 1).addr;
    /* Free the middle one: a 4 MiB hole. inactive 12 MiB = reserved 20 -
     * allocated 8: all the cached bytes are stuck inside a split segment. */
    put(&a, h2);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.inactive_split, 12 * MiB);
    assert_int_equal(s.peak_inactive_split, 16 * MiB);
    assert_int_equal(s.reserved - s.allocated, 12 * MiB);
    /* 3.5 MiB: best fit is the 4 MiB hole (smaller than the 8 MiB tail).
     * Rest 0.5 MiB is not > 1 MiB: the whole hole is handed out (allocated
     * 12 MiB), inactive back to 8 MiB. */
    uint64_t g;
    uint64_t h4 = get(&a, 3 * MiB + 512 * KiB, &g);
    assert_int_equal(g, 4 * MiB);
    assert_int_equal(live_block(&a, 3 * MiB + 512 * KiB).addr, hole);
    s = stats(&a);
    assert_int_equal(s.inactive_split, 8 * MiB);
    assert_int_equal(s.allocated, 12 * MiB);
    assert_int_equal(s.requested, 4 * MiB + (4 * MiB - 2) + 3 * MiB + 512 * KiB);
    put(&a, h1);
    put(&a, h3);
    put(&a, h4);
    assert_int_equal(stats(&a).inactive_split, 0);
    a.destroy(a.self);
}

/* ---- invariants under a long random sequence ---------------------------------------------- */

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}


/* The decoder's backward under loss = logits.sum(), as PyTorch 2.11 ran it
 * on an H200 (DistilBERT b8 x s256 fp16, allocator trace of a fresh
 * process): the output grad is an expanded scalar, so each of the two mms
 * clones it contiguous (125,018,112 B, [2048, 30522] fp16) after making its
 * result, and frees the clone when it returns.
 *   grad_input 3 MiB: a 20 MiB segment (1-10 MiB rule), 17 MiB left free;
 *   clone 1: no free block holds it: a new segment of 125,018,112 rounded
 *     up to 2 MiB = 125,829,120 (120 MiB); the 811,008 B left are under
 *     1 MiB, so the block is not split (large-pool split rule) and is
 *     handed out whole; freed at once;
 *   grad_weight 46,881,792 B (fp16 [30522, 768]): best fit is the clone's
 *     free 120 MiB block (the 17 MiB one is too small); the remainder
 *     78,947,328 B > 1 MiB, so it is split and the grad takes the front;
 *   clone 2: the 78.9 MB remainder cannot hold 125 MB: a second 120 MiB
 *     segment.
 * Reserved: 20 + 120 + 120 = 260 MiB, as traced (two 120 MiB segments in the
 * backward). Holding one clone across both mms (dnnmem before) would have
 * put the weight grad in a segment of its own (46,881,792 -> 46 MiB): 186. */
static void test_two_clones_around_weight_grad(void **state)
{
    (void)state;
    const uint64_t clone = 125018112, gw = 46881792, gi = 3 * MiB;
    struct dm_allocator a = mk_default();
    uint64_t hi = get(&a, gi, NULL);
    uint64_t g1;
    uint64_t h1 = get(&a, clone, &g1);
    assert_int_equal(g1, 120 * MiB); /* unsplit: the whole segment */
    put(&a, h1);
    uint64_t hw = get(&a, gw, NULL);
    assert_int_equal(stats(&a).reserved, 140 * MiB); /* no new segment for the grad */
    uint64_t h2 = get(&a, clone, NULL);
    assert_int_equal(stats(&a).reserved, 260 * MiB);
    assert_int_equal(stats(&a).segments, 3);
    put(&a, h2);
    put(&a, hw);
    put(&a, hi);
    a.destroy(a.self);

    /* one clone held across both mms */
    a = mk_default();
    hi = get(&a, gi, NULL);
    h1 = get(&a, clone, NULL);
    hw = get(&a, gw, NULL);
    put(&a, h1);
    assert_int_equal(stats(&a).reserved, (20 + 120 + 46) * MiB);
    put(&a, hw);
    put(&a, hi);
    a.destroy(a.self);
}

/* Check the counters against a snapshot: reserved = mapped bytes, allocated =
 * live bytes, inactive_split = free bytes of split cudaMalloc'd segments,
 * segments = cudaMalloc'd segments. */
static void check_invariants(const struct dm_allocator *a, bool expandable)
{
    size_t n = take_snapshot(a);
    uint64_t mapped = 0, live = 0, inactive = 0, segs = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && !snap[j].segment_start)
            j++;
        if (!snap[i].expandable)
            segs++;
        for (size_t k = i; k < j; k++) {
            if (k > i)
                assert_int_equal(snap[k].addr, snap[k - 1].addr + snap[k - 1].size);
            if (snap[k].mapped)
                mapped += snap[k].size;
            if (snap[k].allocated)
                live += snap[k].size;
            else if (j - i > 1 && !snap[k].expandable)
                inactive += snap[k].size;
            if (k > i && !snap[k].allocated && !snap[k - 1].allocated)
                assert_true(snap[k].mapped != snap[k - 1].mapped); /* always merged */
        }
        i = j;
    }
    struct dm_alloc_stats s = stats(a);
    assert_int_equal(s.reserved, mapped);
    assert_int_equal(s.allocated, live);
    assert_int_equal(s.inactive_split, inactive);
    assert_int_equal(s.segments, segs);
    assert_true(s.peak_reserved >= s.reserved && s.peak_allocated >= s.allocated);
    if (expandable)
        assert_int_equal(segs, 0);
}

static void random_run(struct dm_caching_opts *o, int steps)
{
    struct dm_allocator a = mk(o);
    enum { LIVE = 600 };
    uint64_t h[LIVE] = {0};
    for (int t = 0; t < steps; t++) {
        size_t k = next_rand() % LIVE;
        if (h[k]) {
            put(&a, h[k]);
            h[k] = 0;
        } else {
            uint64_t r = next_rand();
            uint64_t bytes = (r >> 8) % 4 == 0 ? (r >> 16) % (64 * MiB) : (r >> 16) % (2 * MiB);
            uint64_t g;
            enum dnnmem_status s = a.alloc(a.self, bytes, &h[k], &g);
            assert_true(s == DNNMEM_OK || s == DNNMEM_E_DEVICE_OOM);
            if (s == DNNMEM_OK && bytes)
                assert_true(g >= bytes);
        }
        if (t % 997 == 0)
            check_invariants(&a, o->expandable_segments);
    }
    check_invariants(&a, o->expandable_segments);
    for (size_t k = 0; k < LIVE; k++)
        put(&a, h[k]);
    check_invariants(&a, o->expandable_segments);
    assert_int_equal(stats(&a).allocated, 0);
    dm_caching_empty_cache(&a);
    struct dm_alloc_stats s = stats(&a);
    assert_int_equal(s.reserved, 0); /* nothing live: everything goes back */
    assert_int_equal(s.segments, 0);
    a.destroy(a.self);
}

static void test_random_invariants(void **state)
{
    (void)state;
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    random_run(&o, 200000);
    o.capacity = 4 * GiB; /* tight enough for OOMs and releases */
    random_run(&o, 200000);
    o.max_split_size = 32 * MiB;
    random_run(&o, 200000);
    o.capacity_is_fraction = true;
    o.gc_threshold = 0.6;
    random_run(&o, 200000);
    dm_caching_opts_init(&o);
    o.expandable_segments = true;
    random_run(&o, 200000);
    o.capacity = 4 * GiB;
    random_run(&o, 200000);
    o.capacity_is_fraction = true;
    o.gc_threshold = 0.6;
    random_run(&o, 200000);
    dm_caching_opts_init(&o);
    dm_caching_opts_divisions(&o, 4);
    random_run(&o, 200000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_examples),
        cmocka_unit_test(test_zero_bytes),
        cmocka_unit_test(test_best_fit),
        cmocka_unit_test(test_best_fit_many),
        cmocka_unit_test(test_best_fit_small_pool),
        cmocka_unit_test(test_reuse_without_new_reserve),
        cmocka_unit_test(test_merge_on_free),
        cmocka_unit_test(test_no_merge_across_segments),
        cmocka_unit_test(test_oom_releases_cached_segments),
        cmocka_unit_test(test_oom_unavoidable),
        cmocka_unit_test(test_oom_larger_than_device),
        cmocka_unit_test(test_max_split_size),
        cmocka_unit_test(test_max_split_oom_releases_oversize),
        cmocka_unit_test(test_roundup_power2),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_expandable_segments),
        cmocka_unit_test(test_expandable_oom),
        cmocka_unit_test(test_gc_threshold),
        cmocka_unit_test(test_gc_equal_ages),
        cmocka_unit_test(test_inactive_split),
        cmocka_unit_test(test_two_clones_around_weight_grad),
        cmocka_unit_test(test_random_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
