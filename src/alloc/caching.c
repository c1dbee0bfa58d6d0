/*
 * caching.c: a simulator of PyTorch's CUDA caching allocator (the "native"
 * backend), for one stream and no CUDA graphs.
 *
 * Source: pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (2.4/2.5-era file,
 * "CCA" below); options from c10/cuda/CUDAAllocatorConfig.cpp (2.x) and
 * c10/core/AllocatorConfig.cpp (main, PR #159553). Facts are collected in
 * shared/reference/runtime-facts.md section 1. The code here is written from
 * those facts; it copies nothing.
 *
 * The policy, as numbered rules (each constant is defined once, below, with
 * its source):
 *
 *  1. Rounding (CCA round_size). A request of 0 bytes gets no block
 *     (CUDACachingAllocator::allocate calls malloc only for size != 0).
 *     Below 512 B a request takes 512 B. Otherwise, when the band of the size
 *     has d = roundup_power2_divisions > 1 and size > 512 * d, the size goes
 *     up to the next of d equal steps between the powers of two around it
 *     (an exact power of two stays); else it goes up to a multiple of 512.
 *     Bands (AllocatorConfig roundup_power2_divisions): index floor(log2
 *     size) - 20, clamped to 0..15. 1.13 took one integer for all bands
 *     (PR #74213); 2.0 added per-band lists (PR #87290).
 *  2. Pools (CCA get_pool). A rounded size <= 1 MiB uses the small pool,
 *     anything larger the large pool. Blocks never move between pools.
 *  3. Segment size (CCA get_allocation_size): <= 1 MiB -> 2 MiB;
 *     < 10 MiB -> 20 MiB; else the size rounded up to a multiple of 2 MiB.
 *  4. Best fit (CCA get_free_block): each pool keeps its free blocks ordered
 *     by (size, address); the first block with size >= the rounded size is
 *     taken. With max_split_size set: (a) a request < max_split_size never
 *     takes a block >= max_split_size; (b) a request >= max_split_size takes
 *     a block only if block < request + max_non_split_rounding (kLargeBuffer
 *     before 2.6, an option since PR #136174). Every new segment gets a base
 *     address above all earlier ones (the driver's real choice is unknown).
 *  5. Split (CCA should_split, alloc_found_block): with remainder = block -
 *     request, the small pool (or any pool with expandable segments) splits
 *     when remainder >= 512; the large pool only when request <
 *     max_split_size and remainder > 1 MiB. The request takes the low part;
 *     an unsplit block is handed out whole and counts whole in allocated.
 *  6. Free (CCA free, free_block, try_merge_blocks): the block merges with
 *     its free neighbours inside the same segment and returns to its pool.
 *     Segments never merge; nothing goes back to the device.
 *  7. Growth and OOM (CCA malloc, alloc_block): when no cached block fits,
 *     (i) garbage collection runs if enabled (rule 9); (ii) a new segment is
 *     requested, failing when reserved + segment > capacity; (iii) if
 *     max_split_size is set, cached oversize blocks are released
 *     (release_available_cached_blocks: the smallest one >= max(request,
 *     max_split_size), else the largest ones down until that much is freed)
 *     and (ii) is retried; (iv) every cached unsplit segment of both pools
 *     is released (release_cached_blocks) and (ii) is retried, counting in
 *     num_alloc_retries; (v) otherwise the request fails: num_ooms += 1.
 *  8. Capacity stands for the device's free memory; with
 *     capacity_is_fraction it is set_per_process_memory_fraction's cap,
 *     which alloc_block compares with reserved + segment size (also for
 *     expandable segments, where the segment size of rule 3 is compared,
 *     not the pages that will be mapped).
 *  9. Garbage collection (CCA garbage_collect_cached_blocks; PR #74213),
 *     only with garbage_collection_threshold > 0 and a memory fraction:
 *     when reserved > threshold * capacity, whole (unsplit) cached
 *     large-pool segments whose age is >= the average age are released,
 *     sweeping the pool in (size, address) order; sweeps repeat with a new
 *     average until reserved - threshold * capacity bytes are freed or none
 *     is left. A block's age is the number of searches of its pool since it
 *     was cached; searches are counted only while GC is enabled.
 * 10. Expandable segments (2.1+, PR #96995; CCA ExpandableSegment,
 *     try_allocate_expandable_block, map_block, unmap_block): each pool
 *     reserves one address range of 1.125 x the device's memory (here
 *     capacity; unbounded when capacity is a fraction) and maps it in pages
 *     of 2 MiB (small pool) or 20 MiB (large pool). A request that no free
 *     block serves maps pages at the lowest free address able to hold it,
 *     merging with the free block before it; reserved grows by the pages.
 *     Best fit treats the free block next to unmapped space as being as
 *     large as it can grow, so it is taken last. On OOM and empty_cache
 *     wholly free pages are unmapped. torch counts no segments and no
 *     inactive-split bytes for these segments.
 * 11. Statistics (CCA DeviceStats): allocated = sum of handed-out block
 *     sizes; reserved = sum of segments (mapped pages); requested = sum of
 *     the sizes asked for (2.0+, PR #88575); inactive_split = free blocks
 *     inside split segments; peaks are maxima of the current values.
 *
 * Simplified: a single stream (no recordStream events), no CUDA graph
 * pools, no free-memory callbacks, options fixed for the allocator's life.
 * With expandable segments the oversize release of rule 7 (iii) is skipped:
 * CCA's release_block asserts on expandable blocks there.
 *
 * Data: blocks live in one array and name each other by index; a handle is
 * the block index + 1 (0 = no block). Each pool keeps its free blocks in
 * treaps ordered by (size, address), one per range of sizes (struct pool:
 * the small pool one per 512-byte size), and its unmapped blocks in a treap
 * ordered by address. A block is in at most one tree; the trees' nodes (a
 * copy of the key, the links) live in an array of their own, reused first,
 * so the free blocks a pool holds at a time (at most ~1,400 in the small
 * pool of a DeepSeek-V3 training estimate) stay in cache while the blocks
 * handed out spread over a large array; a node's heap priority is a hash
 * of its slot. Best fit (lower bound), insert and remove are O(log n)
 * expected; the sweeps walk the pool in order from block to successor, and
 * a block's successor is taken before the block is removed, so removal
 * does not disturb the walk.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)

/* CCA constants, unchanged from 1.x to main. */
#define K_MIN_BLOCK ((uint64_t)512)        /* kMinBlockSize: minimum and multiple */
#define K_SMALL_SIZE (1 * MiB)             /* kSmallSize: largest small-pool request */
#define K_SMALL_BUFFER (2 * MiB)           /* kSmallBuffer: small-pool segment */
#define K_MIN_LARGE_ALLOC (10 * MiB)       /* kMinLargeAlloc: below it, a kLargeBuffer segment */
#define K_LARGE_BUFFER (20 * MiB)          /* kLargeBuffer: segment for 1-10 MiB requests */
#define K_ROUND_LARGE (2 * MiB)            /* kRoundLarge: larger segments round to this */
/* AllocatorConfig: 16 roundup_power2_divisions bands from 1 MiB (2^20) to 64 GiB. */
#define N_BANDS 16
#define BAND_FIRST_LOG2 20
/* CUDAAllocatorConfig parseMaxSplitSize / parseMaxNonSplitRoundingSize:
 * both options are at least kLargeBuffer / 1 MiB = 20 (MB). */
#define MIN_SPLIT_OPTION K_LARGE_BUFFER
/* ExpandableSegment: pages of 2 MiB (small pool) and 20 MiB (large pool);
 * address space of totalGlobalMem + totalGlobalMem / 8. */
#define EXP_PAGE_SMALL K_SMALL_BUFFER
#define EXP_PAGE_LARGE K_LARGE_BUFFER
/* Ours: the largest request simulated (4 PiB), the address space of an
 * expandable segment when capacity is unlimited, the first segment base. */
#define MAX_REQUEST ((uint64_t)1 << 52)
#define UNLIMITED_VA ((uint64_t)1 << 56)
#define FIRST_ADDR ((uint64_t)1 << 32)

struct blk {
    uint64_t addr, size, requested;
    int64_t gc_base;      /* pool search count when the block was cached */
    int32_t prev, next;   /* neighbours in the segment, -1 at its ends; free list link */
    int32_t es;           /* expandable segment index, -1 for a cudaMalloc'd segment */
    int32_t tn;           /* its node in a treap, -1 in none */
    uint8_t live;         /* slot in use */
    uint8_t allocated;
    uint8_t mapped;       /* always 1 outside expandable segments */
    uint8_t small;        /* pool */
};

/* A treap node: a copy of its block's key, the links, the block. The nodes
 * are slots of their own array, reused first, so the few blocks a tree
 * holds at a time sit in a few cache lines, not spread over all blocks. */
struct tnode {
    uint64_t size, addr;
    int32_t l, r, p;      /* left, right, parent; -1 for none */
    int32_t blk;          /* the block; the next free node when unused */
};

/* A pool's free mapped blocks, in (size, addr) order, as treaps of
 * consecutive size ranges: the small pool's free blocks are below
 * kSmallBuffer and mostly of distinct sizes (the rests of 2 MiB segments),
 * so one bucket per 512-byte size, found from a bitmap of the non-empty
 * ones, holds one or two blocks and an insert or a best fit walks no
 * tree; the large pool has one bucket. The last bucket takes every larger
 * size (a small pool's merged blocks of expandable segments). */
#define N_BUCKETS ((int32_t)(K_SMALL_BUFFER / K_MIN_BLOCK) + 1)
/* The large pool's: 16 per power of two from 1 MiB to MAX_REQUEST (2^52);
 * its blocks are many and of many sizes (an 8B model's activations at
 * seq 4096: one treap of them was 30% of a plan's time, docs/speed.md
 * "plan"), so a bucket holds few. */
#define LARGE_SUB_LOG2 4
#define LARGE_SUB (1 << LARGE_SUB_LOG2)
#define LARGE_FIRST_LOG2 20
#define N_LARGE_BUCKETS ((52 - LARGE_FIRST_LOG2 + 1) * LARGE_SUB)
#define N_BUCKET_WORDS ((N_BUCKETS + 63) / 64)

struct pool {
    int32_t v[N_BUCKETS]; /* treap roots by bucket; -1 empty */
    uint64_t full[N_BUCKET_WORDS]; /* bit k: bucket k is not empty */
    int32_t n_buckets;    /* N_BUCKETS (small pool) or N_LARGE_BUCKETS */
    int32_t um;           /* treap root of unmapped blocks of expandable segments, by addr */
    int64_t searches;     /* get_free_blocks_call_count */
    bool small;
};

struct xseg {
    uint64_t base, va, page;
};

struct caching {
    struct dm_caching_opts o;
    bool gc_on;
    struct blk *b;
    struct tnode *tn;     /* treap nodes: at most one per block */
    int32_t free_tn;      /* head of the list of unused nodes */
    size_t used_tn;       /* nodes ever used */
    size_t cap;           /* capacity of b, of tn and of tmp */
    size_t used;          /* slots ever used */
    int32_t free_slot;    /* head of the list of dead slots */
    size_t n_dead;
    int32_t *tmp;         /* scratch list of block indices */
    struct pool pools[2]; /* [0] small, [1] large */
    struct xseg *xs;
    size_t n_xs, cap_xs;
    uint64_t next_addr;
    struct dm_alloc_stats st;
};

/* ---- options and rounding ------------------------------------------------- */

void dm_caching_opts_init(struct dm_caching_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_split_size = UINT64_MAX;
    o->max_non_split_rounding = K_LARGE_BUFFER;
}

void dm_caching_opts_divisions(struct dm_caching_opts *o, unsigned d)
{
    for (int i = 0; i < N_BANDS; i++)
        o->roundup_power2[i] = d;
}

static int log2_floor(uint64_t x) { return 63 - __builtin_clzll(x); }
static bool is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

static unsigned band_divisions(const struct dm_caching_opts *o, uint64_t size)
{
    int i = log2_floor(size) - BAND_FIRST_LOG2;
    if (i < 0)
        i = 0;
    if (i > N_BANDS - 1)
        i = N_BANDS - 1;
    return o->roundup_power2[i];
}

/* CCA roundup_power2_next_division; d is a power of two >= 2. */
static uint64_t next_division(uint64_t size, unsigned d)
{
    if (is_pow2(size))
        return size;
    uint64_t floor2 = (uint64_t)1 << log2_floor(size);
    uint64_t step = floor2 >> log2_floor(d);
    if (step == 0)
        return floor2 << 1;
    uint64_t down = size & ~(step - 1);
    return down == size ? size : down + step;
}

uint64_t dm_caching_round_size(const struct dm_caching_opts *o, uint64_t size)
{
    if (size < K_MIN_BLOCK)
        return K_MIN_BLOCK;
    unsigned d = band_divisions(o, size);
    if (d > 1 && size > K_MIN_BLOCK * d)
        return next_division(size, d);
    return (size + K_MIN_BLOCK - 1) / K_MIN_BLOCK * K_MIN_BLOCK;
}

static uint64_t segment_size(uint64_t size)
{
    if (size <= K_SMALL_SIZE)
        return K_SMALL_BUFFER;
    if (size < K_MIN_LARGE_ALLOC)
        return K_LARGE_BUFFER;
    return (size + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
}

/* ---- statistics -------------------------------------------------------------- */

static void up(uint64_t *cur, uint64_t *peak, uint64_t by)
{
    *cur += by;
    if (*cur > *peak)
        *peak = *cur;
}

/* ---- block slots and ordered pools ----------------------------------------------- */

/* Make sure k more blocks can be created and the scratch list can hold every
 * block, so that no step after this one can fail. */
static enum dnnmem_status need_slots(struct caching *c, size_t k)
{
    if (c->n_dead + (c->cap - c->used) >= k)
        return DNNMEM_OK;
    size_t want = c->cap ? c->cap * 2 : 256;
    while (want < c->used + k)
        want *= 2;
    if (want > (size_t)INT32_MAX + 1 || want > SIZE_MAX / sizeof *c->b)
        return DNNMEM_E_NOMEM; /* indices are int32_t */
    struct blk *nb = realloc(c->b, want * sizeof *nb);
    if (!nb)
        return DNNMEM_E_NOMEM;
    c->b = nb;
    struct tnode *nn = realloc(c->tn, want * sizeof *nn);
    if (!nn)
        return DNNMEM_E_NOMEM;
    c->tn = nn;
    int32_t *nt = realloc(c->tmp, want * sizeof *nt);
    if (!nt)
        return DNNMEM_E_NOMEM;
    c->tmp = nt;
    c->cap = want;
    return DNNMEM_OK;
}

/* A fixed pseudo-random treap priority for node slot i (a 32-bit finalizer
 * mix), independent of the blocks' order: a parent's is >= its children's. */
static uint32_t prio(int32_t i) { return dm_mix32((uint32_t)i); }

static int32_t new_blk(struct caching *c, uint64_t addr, uint64_t size, bool small, int32_t es,
                       bool mapped)
{
    int32_t i;
    if (c->free_slot >= 0) {
        i = c->free_slot;
        c->free_slot = c->b[i].next;
        c->n_dead--;
    } else {
        i = (int32_t)c->used++;
    }
    c->b[i] = (struct blk){.addr = addr, .size = size, .prev = -1, .next = -1, .es = es,
                           .tn = -1, .live = 1, .mapped = mapped, .small = small};
    return i;
}

static void kill_blk(struct caching *c, int32_t i)
{
    c->b[i].live = 0;
    c->b[i].next = c->free_slot;
    c->free_slot = i;
    c->n_dead++;
}

static struct pool *pool_of(struct caching *c, int32_t i)
{
    return &c->pools[c->b[i].small ? 0 : 1];
}

/* ---- treaps over block indices -------------------------------------------------- *
 * A tree is named by its root node (-1: empty). by_size: ordered by (size,
 * addr), else by addr alone. Keys are distinct: the blocks of one tree never
 * overlap. A block's key must not change while it is in a tree. The
 * functions take and return block indices; inside, they walk nodes. */

/* Without branches: the descents below compare keys at random, so a
 * mispredicted branch per level would cost more than the compare. */
static bool key_less(const struct tnode *x, uint64_t size, uint64_t addr, bool by_size)
{
    bool size_lt = x->size < size, size_eq = x->size == size;
    return (by_size & size_lt) | ((!by_size | size_eq) & (x->addr < addr));
}

/* The child of node i on the left (or the right) side. */
static int32_t t_child(const struct caching *c, int32_t i, bool left)
{
    int32_t l = c->tn[i].l, r = c->tn[i].r;
    return left ? l : r;
}

static int32_t blk_of(const struct caching *c, int32_t n) { return n < 0 ? -1 : c->tn[n].blk; }

/* Make node child the one in node parent's place (its parent's child, or the root). */
static void t_replace(struct caching *c, int32_t *root, int32_t parent, int32_t child)
{
    int32_t g = c->tn[parent].p;
    if (child >= 0)
        c->tn[child].p = g;
    if (g < 0)
        *root = child;
    else if (c->tn[g].l == parent)
        c->tn[g].l = child;
    else
        c->tn[g].r = child;
}

/* Rotate node i above its parent; the in-order sequence is unchanged. */
static void t_rotate_up(struct caching *c, int32_t *root, int32_t i)
{
    struct tnode *t = c->tn;
    int32_t p = t[i].p;
    t_replace(c, root, p, i);
    if (t[p].l == i) {
        int32_t m = t[i].r;
        t[p].l = m;
        if (m >= 0)
            t[m].p = p;
        t[i].r = p;
    } else {
        int32_t m = t[i].l;
        t[p].r = m;
        if (m >= 0)
            t[m].p = p;
        t[i].l = p;
    }
    t[p].p = i;
}

/* Block i into the tree, on a node taken from the free list (need_slots
 * made room: a node per block). */
static void t_insert(struct caching *c, int32_t *root, int32_t i, bool by_size)
{
    int32_t k = c->free_tn >= 0 ? c->free_tn : (int32_t)c->used_tn++;
    if (k == c->free_tn)
        c->free_tn = c->tn[k].blk;
    struct tnode *n = &c->tn[k];
    *n = (struct tnode){.size = c->b[i].size, .addr = c->b[i].addr, .l = -1, .r = -1, .blk = i};
    c->b[i].tn = k;
    int32_t par = -1, cur = *root;
    bool left = false;
    while (cur >= 0) {
        par = cur;
        left = key_less(n, c->tn[cur].size, c->tn[cur].addr, by_size);
        cur = t_child(c, cur, left);
    }
    n->p = par;
    if (par < 0)
        *root = k;
    else if (left)
        c->tn[par].l = k;
    else
        c->tn[par].r = k;
    uint32_t pk = prio(k);
    while (c->tn[k].p >= 0 && prio(c->tn[k].p) < pk)
        t_rotate_up(c, root, k);
}

static void t_remove(struct caching *c, int32_t *root, int32_t i)
{
    int32_t k = c->b[i].tn;
    for (;;) { /* rotate k down until it has at most one child */
        int32_t l = c->tn[k].l, r = c->tn[k].r;
        if (l < 0 || r < 0) {
            t_replace(c, root, k, l >= 0 ? l : r);
            break;
        }
        t_rotate_up(c, root, prio(l) > prio(r) ? l : r);
    }
    c->b[i].tn = -1;
    c->tn[k].blk = c->free_tn;
    c->free_tn = k;
}

/* The block of the first node >= (size, addr), or -1. */
static int32_t t_lower_bound(const struct caching *c, int32_t root, uint64_t size, uint64_t addr,
                             bool by_size)
{
    int32_t res = -1, cur = root;
    while (cur >= 0) {
        bool right = key_less(&c->tn[cur], size, addr, by_size);
        res = right ? res : cur;
        cur = t_child(c, cur, !right);
    }
    return blk_of(c, res);
}

static int32_t n_first(const struct caching *c, int32_t k)
{
    if (k >= 0)
        while (c->tn[k].l >= 0)
            k = c->tn[k].l;
    return k;
}

/* The block of the tree's first (or last) node, or -1. */
static int32_t t_first(const struct caching *c, int32_t root) { return blk_of(c, n_first(c, root)); }

static int32_t t_last(const struct caching *c, int32_t k)
{
    if (k >= 0)
        while (c->tn[k].r >= 0)
            k = c->tn[k].r;
    return blk_of(c, k);
}

/* The block after block i in its tree's order, or -1. */
static int32_t t_next(const struct caching *c, int32_t i)
{
    int32_t k = c->b[i].tn;
    if (c->tn[k].r >= 0)
        return blk_of(c, n_first(c, c->tn[k].r));
    int32_t p = c->tn[k].p;
    while (p >= 0 && c->tn[p].r == k) {
        k = p;
        p = c->tn[p].p;
    }
    return blk_of(c, p);
}

/* ---- pools ------------------------------------------------------------------------ */

/* The bucket of p that holds blocks of this size: non-decreasing in size.
 * The small pool: one per 512-byte size. The large pool: LARGE_SUB per
 * power of two from 1 MiB (the sizes below in the first), each the sizes
 * with the same LARGE_SUB_LOG2 bits after the leading one. */
static int32_t bucket_of(const struct pool *p, uint64_t size)
{
    if (p->small) {
        uint64_t k = size / K_MIN_BLOCK;
        return k < N_BUCKETS - 1 ? (int32_t)k : N_BUCKETS - 1;
    }
    if (size < K_SMALL_SIZE)
        return 0;
    int e = log2_floor(size);
    int32_t k = (int32_t)(e - LARGE_FIRST_LOG2) * LARGE_SUB +
                (int32_t)((size >> (e - LARGE_SUB_LOG2)) & (LARGE_SUB - 1));
    return k < N_LARGE_BUCKETS - 1 ? k : N_LARGE_BUCKETS - 1;
}

/* The first non-empty bucket of p at or after k, or -1. */
static int32_t bucket_from(const struct pool *p, int32_t k)
{
    if (k >= p->n_buckets)
        return -1;
    int32_t w = k / 64;
    uint64_t bits = p->full[w] & (~(uint64_t)0 << (k % 64));
    while (!bits) {
        if (++w == (p->n_buckets + 63) / 64)
            return -1;
        bits = p->full[w];
    }
    return w * 64 + __builtin_ctzll(bits);
}

/* The last non-empty bucket of p, or -1. */
static int32_t bucket_last(const struct pool *p)
{
    for (int32_t w = (p->n_buckets - 1) / 64; w >= 0; w--)
        if (p->full[w])
            return w * 64 + 63 - __builtin_clzll(p->full[w]);
    return -1;
}

static bool pool_empty(const struct pool *p) { return bucket_last(p) < 0; }

/* The first free block of p that is >= (size, addr), or -1. */
static int32_t lower_bound(const struct caching *c, const struct pool *p, uint64_t size,
                           uint64_t addr)
{
    int32_t k = bucket_of(p, size);
    int32_t i = t_lower_bound(c, p->v[k], size, addr, true);
    if (i < 0 && (k = bucket_from(p, k + 1)) >= 0)
        i = t_first(c, p->v[k]);
    return i;
}

/* The free blocks of p in order: the first (or the last), and the one
 * after block i. */
static int32_t pool_first(const struct caching *c, const struct pool *p)
{
    int32_t k = bucket_from(p, 0);
    return k < 0 ? -1 : t_first(c, p->v[k]);
}

static int32_t pool_last(const struct caching *c, const struct pool *p)
{
    int32_t k = bucket_last(p);
    return k < 0 ? -1 : t_last(c, p->v[k]);
}

static int32_t pool_next(const struct caching *c, const struct pool *p, int32_t i)
{
    int32_t nx = t_next(c, i);
    if (nx >= 0)
        return nx;
    int32_t k = bucket_from(p, bucket_of(p, c->tn[c->b[i].tn].size) + 1);
    return k < 0 ? -1 : t_first(c, p->v[k]);
}

/* CCA BlockPool::insert_into_blocks: cache the block and start its age. */
static void pool_insert(struct caching *c, int32_t i)
{
    struct pool *p = pool_of(c, i);
    int32_t k = bucket_of(p, c->b[i].size);
    t_insert(c, &p->v[k], i, true);
    p->full[k / 64] |= (uint64_t)1 << (k % 64);
    c->b[i].gc_base = p->searches;
}

static void pool_remove(struct caching *c, int32_t i)
{
    struct pool *p = pool_of(c, i);
    int32_t k = bucket_of(p, c->tn[c->b[i].tn].size);
    t_remove(c, &p->v[k], i);
    if (p->v[k] < 0)
        p->full[k / 64] &= ~((uint64_t)1 << (k % 64));
}

static void um_insert(struct caching *c, int32_t i)
{
    t_insert(c, &pool_of(c, i)->um, i, false);
}

static void um_remove(struct caching *c, int32_t i)
{
    t_remove(c, &pool_of(c, i)->um, i);
}

static bool is_split(const struct caching *c, int32_t i)
{
    return c->b[i].prev >= 0 || c->b[i].next >= 0;
}

/* CCA try_merge_blocks: dst absorbs its neighbour src when src is free and
 * equally mapped; dst is in no list. Returns the bytes absorbed. */
static uint64_t try_merge(struct caching *c, int32_t dst, int32_t src)
{
    if (src < 0 || c->b[src].allocated || c->b[src].mapped != c->b[dst].mapped)
        return 0;
    struct blk *d = &c->b[dst], *s = &c->b[src];
    if (d->prev == src) {
        d->addr = s->addr;
        d->prev = s->prev;
        if (d->prev >= 0)
            c->b[d->prev].next = dst;
    } else {
        d->next = s->next;
        if (d->next >= 0)
            c->b[d->next].prev = dst;
    }
    if (s->mapped)
        pool_remove(c, src);
    else
        um_remove(c, src);
    uint64_t n = s->size;
    d->size += n;
    kill_blk(c, src);
    return n;
}

/* ---- segments ------------------------------------------------------------------ */

/* CCA release_block: cudaFree a whole cached segment. */
static void release_block(struct caching *c, int32_t i)
{
    pool_remove(c, i);
    c->st.reserved -= c->b[i].size;
    c->st.segments--;
    kill_blk(c, i);
}

static uint64_t age(const struct caching *c, int32_t i)
{
    const struct pool *p = &c->pools[c->b[i].small ? 0 : 1];
    return (uint64_t)(p->searches - c->b[i].gc_base);
}

static bool gc_candidate(const struct caching *c, int32_t i)
{
    return c->b[i].es < 0 && !is_split(c, i);
}

/* Rule 9. */
static void garbage_collect(struct caching *c)
{
    uint64_t limit = (uint64_t)(c->o.gc_threshold * (double)c->o.capacity);
    if (c->st.reserved <= limit)
        return;
    uint64_t target = c->st.reserved - limit, reclaimed = 0, total_age = 0;
    size_t count = 0;
    struct pool *p = &c->pools[1];
    for (int32_t i = pool_first(c, p); i >= 0; i = pool_next(c, p, i))
        if (gc_candidate(c, i)) {
            total_age += age(c, i);
            count++;
        }
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        double avg = (double)total_age / (double)count;
        freed = false;
        for (int32_t i = pool_first(c, p), nx; i >= 0; i = nx) {
            nx = pool_next(c, p, i);
            if (gc_candidate(c, i) && (double)age(c, i) >= avg) {
                freed = true;
                reclaimed += c->b[i].size;
                total_age -= age(c, i);
                count--;
                release_block(c, i);
            }
        }
    }
}

/* Rule 7 (iii), CCA release_available_cached_blocks. */
static bool release_oversize(struct caching *c, struct pool *p, uint64_t size)
{
    uint64_t ms = c->o.max_split_size;
    if (ms == UINT64_MAX || c->o.expandable_segments)
        return false;
    uint64_t key = size < ms ? ms : size;
    int32_t pos = lower_bound(c, p, key, 0);
    if (pos >= 0) {
        if (is_split(c, pos)) /* cannot happen: oversize blocks are never split */
            return false;
        release_block(c, pos);
        return true;
    }
    uint64_t total = 0;
    while (!pool_empty(p) && total < key) {
        int32_t i = pool_last(c, p); /* the largest */
        if (c->b[i].size < ms || is_split(c, i))
            break;
        total += c->b[i].size;
        release_block(c, i);
    }
    return total >= key;
}

/* CCA unmap_block: unmap the whole pages inside free block i. */
static enum dnnmem_status unmap_block(struct caching *c, int32_t i)
{
    const struct xseg *x = &c->xs[c->b[i].es];
    uint64_t off = c->b[i].addr - x->base, end = off + c->b[i].size;
    uint64_t first = (off + x->page - 1) / x->page, last = end / x->page;
    if (first >= last)
        return DNNMEM_OK;
    DM_TRY(need_slots(c, 2));
    pool_remove(c, i);
    struct blk *b = &c->b[i];
    uint64_t ustart = x->base + first * x->page, usize = (last - first) * x->page;
    uint64_t before = ustart - b->addr, after = b->size - before - usize;
    bool small = b->small;
    int32_t es = b->es;
    if (before > 0) {
        int32_t f = new_blk(c, b->addr, before, small, es, true);
        b = &c->b[i];
        c->b[f].prev = b->prev;
        c->b[f].next = i;
        if (b->prev >= 0)
            c->b[b->prev].next = f;
        b->prev = f;
        pool_insert(c, f);
    }
    if (after > 0) {
        int32_t f = new_blk(c, ustart + usize, after, small, es, true);
        b = &c->b[i];
        c->b[f].prev = i;
        c->b[f].next = b->next;
        if (b->next >= 0)
            c->b[b->next].prev = f;
        b->next = f;
        pool_insert(c, f);
    }
    b = &c->b[i];
    b->addr = ustart;
    b->size = usize;
    b->mapped = 0;
    try_merge(c, i, c->b[i].prev);
    try_merge(c, i, c->b[i].next);
    um_insert(c, i);
    c->st.reserved -= usize;
    return DNNMEM_OK;
}

/* CCA release_blocks for one pool. */
static enum dnnmem_status release_pool(struct caching *c, struct pool *p)
{
    size_t n_exp = 0;
    for (int32_t i = pool_first(c, p), nx; i >= 0; i = nx) {
        nx = pool_next(c, p, i);
        if (c->b[i].es >= 0)
            c->tmp[n_exp++] = i;
        else if (!is_split(c, i))
            release_block(c, i);
    }
    if (!n_exp)
        return DNNMEM_OK;
    DM_TRY(need_slots(c, 2 * n_exp)); /* realloc keeps tmp's contents */
    for (size_t j = 0; j < n_exp; j++) {
        int32_t i = c->tmp[j];
        DM_TRY(unmap_block(c, i));
        if (!is_split(c, i) && !c->b[i].mapped) { /* the whole range is unmapped: drop it */
            um_remove(c, i);
            kill_blk(c, i);
        }
    }
    return DNNMEM_OK;
}

/* CCA release_cached_blocks: large pool, then small. */
static enum dnnmem_status release_cached(struct caching *c)
{
    DM_TRY(release_pool(c, &c->pools[1]));
    return release_pool(c, &c->pools[0]);
}

/* ---- expandable segments ------------------------------------------------------- */

static bool allocatable(const struct caching *c, int32_t i)
{
    return i >= 0 && !c->b[i].allocated;
}

/* CCA map_block: map the pages covering [addr, addr + size) of unmapped
 * block i, merge with free neighbours and cache the result in *out. */
static enum dnnmem_status map_block(struct caching *c, int32_t i, uint64_t size, bool *ok)
{
    const struct xseg *x = &c->xs[c->b[i].es];
    uint64_t off = c->b[i].addr - x->base;
    uint64_t first = off / x->page, last = (off + size + x->page - 1) / x->page;
    uint64_t msize = (last - first) * x->page;
    *ok = false;
    if (!c->o.capacity_is_fraction && c->o.capacity &&
        (msize > c->o.capacity || c->st.reserved > c->o.capacity - msize))
        return DNNMEM_OK; /* cuMemCreate fails */
    DM_TRY(need_slots(c, 1));
    um_remove(c, i);
    c->b[i].mapped = 1;
    if (msize < c->b[i].size) {
        struct blk *b = &c->b[i];
        int32_t r = new_blk(c, b->addr + msize, b->size - msize, b->small, b->es, false);
        b = &c->b[i];
        c->b[r].prev = i;
        c->b[r].next = b->next;
        if (b->next >= 0)
            c->b[b->next].prev = r;
        b->next = r;
        b->size = msize;
        um_insert(c, r);
    }
    try_merge(c, i, c->b[i].prev);
    try_merge(c, i, c->b[i].next);
    pool_insert(c, i);
    up(&c->st.reserved, &c->st.peak_reserved, msize);
    *ok = true;
    return DNNMEM_OK;
}

/* CCA find_expandable_block: the lowest address where free and unmapped
 * space together hold size bytes, or a new segment. */
static enum dnnmem_status find_expandable(struct caching *c, struct pool *p, uint64_t size,
                                          int32_t *out)
{
    for (int32_t k = t_first(c, p->um); k >= 0; k = t_next(c, k)) {
        int32_t cand = k;
        if (allocatable(c, c->b[cand].prev))
            cand = c->b[cand].prev;
        uint64_t bytes = 0;
        for (int32_t j = cand; bytes < size && allocatable(c, j); j = c->b[j].next)
            bytes += c->b[j].size;
        if (bytes >= size) {
            *out = cand;
            return DNNMEM_OK;
        }
    }
    uint64_t page = p->small ? EXP_PAGE_SMALL : EXP_PAGE_LARGE;
    uint64_t va = UNLIMITED_VA;
    if (c->o.capacity && !c->o.capacity_is_fraction && c->o.capacity < UNLIMITED_VA)
        va = (c->o.capacity + c->o.capacity / 8 + page - 1) / page * page;
    if (va < size) { /* larger than the device: cannot map it anyway */
        *out = -1;
        return DNNMEM_OK;
    }
    uint64_t base = (c->next_addr + K_LARGE_BUFFER - 1) / K_LARGE_BUFFER * K_LARGE_BUFFER;
    if (base < c->next_addr || !dm_uadd_ok(base, va, &c->next_addr))
        return DNNMEM_E_SHAPE;
    DM_TRY(need_slots(c, 1));
    if (c->n_xs == c->cap_xs) {
        size_t n = c->cap_xs ? c->cap_xs * 2 : 4;
        struct xseg *nx = realloc(c->xs, n * sizeof *nx);
        if (!nx)
            return DNNMEM_E_NOMEM;
        c->xs = nx;
        c->cap_xs = n;
    }
    c->xs[c->n_xs] = (struct xseg){base, va, page};
    int32_t i = new_blk(c, base, va, p->small, (int32_t)c->n_xs++, false);
    um_insert(c, i);
    *out = i;
    return DNNMEM_OK;
}

/* CCA try_allocate_expandable_block. */
static enum dnnmem_status alloc_expandable(struct caching *c, struct pool *p, uint64_t size,
                                           int32_t *out, bool *ok)
{
    int32_t cand;
    *ok = false;
    DM_TRY(find_expandable(c, p, size, &cand));
    if (cand < 0)
        return DNNMEM_OK;
    if (!c->b[cand].mapped) {
        uint64_t want = c->b[cand].size < size ? c->b[cand].size : size;
        DM_TRY(map_block(c, cand, want, ok));
        if (!*ok)
            return DNNMEM_OK;
    }
    while (c->b[cand].size < size) {
        int32_t nx = c->b[cand].next; /* unmapped, by the search above */
        uint64_t rest = size - c->b[cand].size;
        DM_TRY(map_block(c, nx, rest < c->b[nx].size ? rest : c->b[nx].size, ok));
        if (!*ok)
            return DNNMEM_OK;
        cand = nx; /* it absorbed cand */
    }
    pool_remove(c, cand);
    *out = cand;
    *ok = true;
    return DNNMEM_OK;
}

/* ---- malloc and free ------------------------------------------------------------- */

static uint64_t expandable_size(const struct caching *c, int32_t i)
{
    int32_t n = c->b[i].next;
    return c->b[i].size + (n >= 0 && !c->b[n].mapped ? c->b[n].size : 0);
}

/* Rule 4, CCA get_free_block: -1 when no cached block may serve the request. */
static int32_t get_free_block(struct caching *c, struct pool *p, uint64_t size)
{
    if (c->gc_on)
        p->searches++;
    int32_t i = lower_bound(c, p, size, 0);
    if (i < 0)
        return -1;
    for (int32_t nx; c->b[i].es >= 0 && (nx = pool_next(c, p, i)) >= 0 &&
                     expandable_size(c, nx) < expandable_size(c, i);)
        i = nx;
    uint64_t bs = c->b[i].size, ms = c->o.max_split_size;
    if (size < ms && bs >= ms)
        return -1;
    if (size >= ms && (size > UINT64_MAX - c->o.max_non_split_rounding ||
                       bs >= size + c->o.max_non_split_rounding))
        return -1;
    pool_remove(c, i);
    return i;
}

/* CCA alloc_block: a new segment (or mapped pages) for the request. */
static enum dnnmem_status alloc_block(struct caching *c, struct pool *p, uint64_t size,
                                      uint64_t seg, bool retry, int32_t *out, bool *ok)
{
    *ok = false;
    if (retry)
        c->st.num_alloc_retries++;
    bool over = c->o.capacity && (seg > c->o.capacity || c->st.reserved > c->o.capacity - seg);
    if (c->o.expandable_segments) {
        if (c->o.capacity_is_fraction && over)
            return DNNMEM_OK;
        return alloc_expandable(c, p, size, out, ok);
    }
    if (over)
        return DNNMEM_OK;
    uint64_t addr = c->next_addr;
    if (!dm_uadd_ok(addr, seg, &c->next_addr))
        return DNNMEM_E_SHAPE;
    DM_TRY(need_slots(c, 1));
    *out = new_blk(c, addr, seg, p->small, -1, true);
    up(&c->st.reserved, &c->st.peak_reserved, seg);
    up(&c->st.segments, &c->st.peak_segments, 1);
    *ok = true;
    return DNNMEM_OK;
}

/* Rule 5, CCA should_split. */
static bool should_split(const struct caching *c, int32_t i, uint64_t size)
{
    uint64_t rest = c->b[i].size - size;
    if (c->b[i].small || c->o.expandable_segments)
        return rest >= K_MIN_BLOCK;
    return size < c->o.max_split_size && rest > K_SMALL_SIZE;
}

/* CCA alloc_found_block: block i (in no list) serves the request. */
static enum dnnmem_status alloc_found(struct caching *c, int32_t i, uint64_t size, uint64_t orig,
                                      int32_t *out)
{
    bool was_split = is_split(c, i), in_xseg = c->b[i].es >= 0;
    if (should_split(c, i, size)) {
        if (need_slots(c, 1) != DNNMEM_OK) {
            pool_insert(c, i);
            return DNNMEM_E_NOMEM;
        }
        struct blk *r = &c->b[i];
        int32_t a = new_blk(c, r->addr, size, r->small, r->es, true);
        r = &c->b[i];
        c->b[a].prev = r->prev;
        if (r->prev >= 0)
            c->b[r->prev].next = a;
        c->b[a].next = i;
        r->prev = a;
        r->addr += size;
        r->size -= size;
        pool_insert(c, i);
        if (!in_xseg) {
            if (was_split)
                c->st.inactive_split -= size;
            else
                up(&c->st.inactive_split, &c->st.peak_inactive_split, r->size);
        }
        i = a;
    } else if (was_split && !in_xseg) {
        c->st.inactive_split -= c->b[i].size;
    }
    struct blk *b = &c->b[i];
    b->allocated = 1;
    b->requested = orig;
    up(&c->st.allocated, &c->st.peak_allocated, b->size);
    up(&c->st.requested, &c->st.peak_requested, orig);
    *out = i;
    return DNNMEM_OK;
}

/* Rules 1-5 and 7. */
static enum dnnmem_status c_alloc(void *self, uint64_t bytes, uint64_t *handle, uint64_t *granted)
{
    struct caching *c = self;
    *handle = 0;
    *granted = 0;
    if (bytes == 0)
        return DNNMEM_OK;
    if (bytes > MAX_REQUEST)
        return DNNMEM_E_SHAPE;
    uint64_t size = dm_caching_round_size(&c->o, bytes);
    struct pool *p = &c->pools[size <= K_SMALL_SIZE ? 0 : 1];
    uint64_t seg = segment_size(size);
    int32_t i = get_free_block(c, p, size);
    if (i < 0) {
        bool ok;
        if (c->gc_on)
            garbage_collect(c);
        DM_TRY(alloc_block(c, p, size, seg, false, &i, &ok));
        if (!ok && release_oversize(c, p, size))
            DM_TRY(alloc_block(c, p, size, seg, false, &i, &ok));
        if (!ok) {
            DM_TRY(release_cached(c));
            DM_TRY(alloc_block(c, p, size, seg, true, &i, &ok));
        }
        if (!ok) {
            c->st.num_ooms++;
            c->st.oom_alloc_size = seg;
            return DNNMEM_E_DEVICE_OOM;
        }
    }
    DM_TRY(alloc_found(c, i, size, bytes, &i));
    *handle = (uint64_t)i + 1;
    *granted = c->b[i].size;
    return DNNMEM_OK;
}

/* Rule 6, CCA free and free_block. */
static void c_free(void *self, uint64_t handle)
{
    struct caching *c = self;
    if (handle == 0 || handle > c->used)
        return;
    int32_t i = (int32_t)(handle - 1);
    if (!c->b[i].live || !c->b[i].allocated)
        return;
    struct blk *b = &c->b[i];
    b->allocated = 0;
    c->st.allocated -= b->size;
    c->st.requested -= b->requested;
    int64_t net = 0;
    int32_t prev = b->prev, next = b->next;
    net -= (int64_t)try_merge(c, i, prev);
    net -= (int64_t)try_merge(c, i, next);
    pool_insert(c, i);
    if (is_split(c, i))
        net += (int64_t)c->b[i].size;
    if (c->b[i].es < 0) {
        if (net > 0)
            up(&c->st.inactive_split, &c->st.peak_inactive_split, (uint64_t)net);
        else
            c->st.inactive_split -= (uint64_t)-net;
    }
}

static void c_stats(const void *self, struct dm_alloc_stats *st)
{
    *st = ((const struct caching *)self)->st;
}

static void c_destroy(void *self)
{
    struct caching *c = self;
    if (!c)
        return;
    free(c->b);
    free(c->tn);
    free(c->tmp);
    free(c->xs);
    free(c);
}

enum dnnmem_status dm_alloc_caching_new(const struct dm_caching_opts *o, struct dm_allocator *a)
{
    if (o->max_split_size < MIN_SPLIT_OPTION || o->max_non_split_rounding < MIN_SPLIT_OPTION ||
        !(o->gc_threshold >= 0.0 && o->gc_threshold < 1.0))
        return DNNMEM_E_USAGE;
    for (int k = 0; k < N_BANDS; k++)
        if (o->roundup_power2[k] && !is_pow2(o->roundup_power2[k]))
            return DNNMEM_E_USAGE;
    struct caching *c = calloc(1, sizeof *c);
    if (!c)
        return DNNMEM_E_NOMEM;
    c->o = *o;
    c->gc_on = o->capacity_is_fraction && o->capacity && o->gc_threshold > 0.0;
    c->free_slot = -1;
    c->free_tn = -1;
    c->pools[0].small = true;
    for (int k = 0; k < 2; k++) {
        struct pool *p = &c->pools[k];
        p->um = -1;
        p->n_buckets = k == 0 ? N_BUCKETS : N_LARGE_BUCKETS;
        for (int32_t j = 0; j < N_BUCKETS; j++)
            p->v[j] = -1;
    }
    c->next_addr = FIRST_ADDR;
    if (need_slots(c, 1) != DNNMEM_OK) {
        c_destroy(c);
        return DNNMEM_E_NOMEM;
    }
    *a = (struct dm_allocator){"caching", c, c_alloc, c_free, c_stats, c_destroy};
    return DNNMEM_OK;
}

/* ---- inspection ----------------------------------------------------------------- */

static struct caching *as_caching(const struct dm_allocator *a)
{
    return a && a->alloc == c_alloc ? a->self : NULL;
}

void dm_caching_empty_cache(struct dm_allocator *a)
{
    struct caching *c = as_caching(a);
    if (c)
        (void)release_cached(c); /* NOMEM only leaves pages mapped */
}

void dm_caching_reset_peaks(struct dm_allocator *a)
{
    struct caching *c = as_caching(a);
    if (!c)
        return;
    struct dm_alloc_stats *s = &c->st;
    s->peak_allocated = s->allocated;
    s->peak_reserved = s->reserved;
    s->peak_requested = s->requested;
    s->peak_inactive_split = s->inactive_split;
    s->peak_segments = s->segments;
}

static int by_addr(const void *x, const void *y)
{
    const struct dm_caching_block *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

size_t dm_caching_snapshot(const struct dm_allocator *a, struct dm_caching_block *out, size_t cap)
{
    const struct caching *c = as_caching(a);
    if (!c)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < c->used; i++) {
        const struct blk *b = &c->b[i];
        if (!b->live)
            continue;
        if (n < cap)
            out[n] = (struct dm_caching_block){
                .addr = b->addr, .size = b->size, .requested = b->allocated ? b->requested : 0,
                .allocated = b->allocated, .small = b->small, .expandable = b->es >= 0,
                .mapped = b->mapped, .segment_start = b->prev < 0};
        n++;
    }
    if (out && cap)
        qsort(out, n < cap ? n : cap, sizeof *out, by_addr);
    return n;
}

uint64_t dm_caching_block_addr(const struct dm_allocator *a, uint64_t handle)
{
    const struct caching *c = as_caching(a);
    if (!c || handle == 0 || handle > c->used || !c->b[handle - 1].live)
        return 0;
    return c->b[handle - 1].addr;
}

uint64_t dm_caching_next_addr(const struct dm_allocator *a)
{
    const struct caching *c = as_caching(a);
    return c ? c->next_addr : 0;
}
