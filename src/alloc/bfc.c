/*
 * bfc.c: a simulator of TensorFlow's BFC ("best-fit with coalescing")
 * allocator on the GPU, which XLA and JAX share (tsl).
 *
 * Sources: tensorflow/tensorflow tensorflow/core/common_runtime/
 * bfc_allocator.{h,cc} (2.x; later xla/tsl/framework/bfc_allocator.cc, "BFC"
 * below), .../gpu/gpu_bfc_allocator.cc and .../gpu/gpu_device.cc. Facts are
 * collected in shared/reference/runtime-facts.md section 2 (and 4 for JAX).
 * The code here is written from those facts; it copies nothing.
 *
 * The policy, as numbered rules (each constant is defined once, below, with
 * its source):
 *
 *  1. Rounding (BFC RoundedBytes): a request goes up to a multiple of
 *     kMinAllocationSize = 256 B. A request of 0 bytes gets nothing
 *     (BFC AllocateRaw returns nullptr for 0 bytes).
 *  2. Bins (BFC kNumBins, BinNumForSize): 21 bins; bin b holds free chunks
 *     of [256 * 2^b, 256 * 2^(b+1)), the last (20, >= 256 MiB) has no upper
 *     limit: b = min(20, floor(log2(size / 256))). Inside a bin free chunks
 *     are ordered by (size, address).
 *  3. Best fit (BFC FindChunkPtr): from the request's bin upwards, the first
 *     (smallest, then lowest-addressed) free chunk with size >= the rounded
 *     request is taken.
 *  4. Split (BFC FindChunkPtr, SplitChunk): the chosen chunk is split when
 *     chunk >= 2 x rounded or chunk - rounded >= max_internal_fragmentation
 *     (kMaxInternalFragmentation 128 MiB, or fragmentation_fraction x limit
 *     in newest tsl when set). The request takes the low part; the rest goes
 *     back to its bin. Otherwise the whole chunk is handed out and counts
 *     whole in bytes_in_use.
 *  5. Free (BFC DeallocateRawInternal, TryToCoalesce): the chunk merges at
 *     once with its free neighbours inside its region and goes to its bin.
 *     Chunks of different regions never merge.
 *  6. Regions (BFC Extend): when no free chunk fits, available = limit -
 *     bytes already in regions, rounded down to 256; the request fails when
 *     rounded > available. Else curr_region_allocation_bytes doubles while
 *     rounded > it; a region of min(curr, available) bytes is obtained;
 *     unless curr was doubled for this request, it doubles afterwards for the
 *     next region. Each new region lies above all earlier ones.
 *  7. First region (BFC constructor): with allow_growth, curr =
 *     RoundedBytes(min(limit, 2 MiB)); without it (TF's default), curr =
 *     RoundedBytes(limit): the first region takes the whole limit, which is
 *     why TF seems to grab nearly all GPU memory at start.
 *  8. Garbage collection (BFC DeallocateFreeRegions; gpu_bfc_allocator.cc
 *     TF_ENABLE_GPU_GARBAGE_COLLECTION, default true): when Extend fails,
 *     every region with no chunk in use is returned and Extend is tried
 *     again; then the request fails (OOM).
 *  9. Statistics (BFC AllocatorStats; get_memory_info): bytes_in_use = sum
 *     of in-use chunk sizes (rounding and unsplit slack included), its peak;
 *     pool_bytes (reserved here) = sum of region sizes, its peak.
 *
 * Simplified: the device always grants a region within the limit, so the
 * 0.9x "backpedal" retry of Extend never runs; no retry wait (kMaxMillisToWait,
 * one stream); no timestamped chunks (freed_at_count).
 *
 * Data: chunks live in one array and name their region neighbours by index;
 * each bin keeps its free chunks in an array sorted by (size, address). A
 * handle is the chunk index + 1 (0 = no chunk).
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)

/* BFC kMinAllocationBits = 8: kMinAllocationSize = 256 B. */
#define K_MIN_ALLOC ((uint64_t)256)
/* BFC kNumBins = 21. */
#define K_NUM_BINS 21
/* BFC FindChunkPtr: kMaxInternalFragmentation default, 128 MiB. */
#define K_MAX_INTERNAL_FRAG (128 * MiB)
/* BFC constructor: the first region under allow_growth, 2 MiB. */
#define K_GROWTH_FIRST_REGION (2 * MiB)
/* Ours: "no limit" stands for 1 PiB; the largest request simulated; the
 * first region base (the driver's real addresses are unknown). */
#define UNLIMITED ((uint64_t)1 << 50)
#define MAX_REQUEST ((uint64_t)1 << 52)
#define FIRST_ADDR ((uint64_t)1 << 32)

struct chunk {
    uint64_t addr, size, requested;
    int32_t prev, next; /* neighbours in the region, -1 at its ends; next: dead-slot link */
    int32_t region;
    uint8_t live, in_use;
};

struct region {
    uint64_t base, size;
    int32_t first; /* its lowest chunk; -1 once returned */
};

struct bin {
    int32_t *v; /* free chunks, sorted by (size, addr) */
    size_t n, cap;
};

struct bfc {
    struct dm_bfc_opts o;
    uint64_t limit;      /* o.limit, or UNLIMITED */
    uint64_t curr_region; /* curr_region_allocation_bytes */
    uint64_t in_regions; /* total_region_allocated_bytes */
    struct chunk *c;
    size_t cap, used;
    int32_t dead;        /* head of the dead-slot list */
    struct region *r;
    size_t n_r, cap_r;
    struct bin bins[K_NUM_BINS];
    uint64_t next_addr;
    struct dm_alloc_stats st;
};

void dm_bfc_opts_init(struct dm_bfc_opts *o)
{
    memset(o, 0, sizeof *o);
    o->garbage_collection = true;
    o->growth_first_region = K_GROWTH_FIRST_REGION;
    o->max_internal_fragmentation = K_MAX_INTERNAL_FRAG;
}

/* Rule 1. */
uint64_t dm_bfc_round(uint64_t bytes)
{
    return (bytes + K_MIN_ALLOC - 1) / K_MIN_ALLOC * K_MIN_ALLOC;
}

/* Rule 2. */
int dm_bfc_bin(uint64_t size)
{
    uint64_t v = (size < K_MIN_ALLOC ? K_MIN_ALLOC : size) / K_MIN_ALLOC;
    int b = 63 - __builtin_clzll(v);
    return b < K_NUM_BINS - 1 ? b : K_NUM_BINS - 1;
}

static void up(uint64_t *cur, uint64_t *peak, uint64_t by)
{
    *cur += by;
    if (*cur > *peak)
        *peak = *cur;
}

/* ---- chunk slots and bins ------------------------------------------------------ */

/* Room for k more chunks, and for every chunk in any one bin, so that no step
 * after this one can fail. */
static enum dnnmem_status need_chunks(struct bfc *b, size_t k)
{
    size_t n_dead = 0;
    for (int32_t i = b->dead; i >= 0 && n_dead < k; i = b->c[i].next)
        n_dead++;
    if (n_dead + (b->cap - b->used) < k) {
        size_t want = b->cap ? b->cap * 2 : 256;
        while (want < b->used + k)
            want *= 2;
        struct chunk *nc = realloc(b->c, want * sizeof *nc);
        if (!nc)
            return DNNMEM_E_NOMEM;
        b->c = nc;
        b->cap = want;
    }
    for (int i = 0; i < K_NUM_BINS; i++)
        if (b->bins[i].cap < b->cap) {
            int32_t *nv = realloc(b->bins[i].v, b->cap * sizeof *nv);
            if (!nv)
                return DNNMEM_E_NOMEM;
            b->bins[i].v = nv;
            b->bins[i].cap = b->cap;
        }
    return DNNMEM_OK;
}

static int32_t new_chunk(struct bfc *b, uint64_t addr, uint64_t size, int32_t region)
{
    int32_t i;
    if (b->dead >= 0) {
        i = b->dead;
        b->dead = b->c[i].next;
    } else {
        i = (int32_t)b->used++;
    }
    b->c[i] = (struct chunk){addr, size, 0, -1, -1, region, 1, 0};
    return i;
}

static void kill_chunk(struct bfc *b, int32_t i)
{
    b->c[i].live = 0;
    b->c[i].next = b->dead;
    b->dead = i;
}

static bool before(const struct bfc *b, int32_t i, uint64_t size, uint64_t addr)
{
    return b->c[i].size < size || (b->c[i].size == size && b->c[i].addr < addr);
}

/* First position in bin whose chunk is not before (size, addr). */
static size_t lower_bound(const struct bfc *b, const struct bin *bn, uint64_t size, uint64_t addr)
{
    size_t lo = 0, hi = bn->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (before(b, bn->v[mid], size, addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void bin_insert(struct bfc *b, int32_t i)
{
    struct bin *bn = &b->bins[dm_bfc_bin(b->c[i].size)];
    size_t pos = lower_bound(b, bn, b->c[i].size, b->c[i].addr);
    memmove(bn->v + pos + 1, bn->v + pos, (bn->n - pos) * sizeof *bn->v);
    bn->v[pos] = i;
    bn->n++;
}

static void bin_remove(struct bfc *b, int32_t i)
{
    struct bin *bn = &b->bins[dm_bfc_bin(b->c[i].size)];
    size_t pos = lower_bound(b, bn, b->c[i].size, b->c[i].addr);
    if (pos < bn->n && bn->v[pos] == i) {
        memmove(bn->v + pos, bn->v + pos + 1, (bn->n - pos - 1) * sizeof *bn->v);
        bn->n--;
    }
}

/* Rule 3: the smallest fitting free chunk, from the request's bin up. */
static int32_t find_chunk(const struct bfc *b, uint64_t size)
{
    for (int k = dm_bfc_bin(size); k < K_NUM_BINS; k++) {
        const struct bin *bn = &b->bins[k];
        size_t pos = lower_bound(b, bn, size, 0);
        if (pos < bn->n)
            return bn->v[pos];
    }
    return -1;
}

/* ---- regions ----------------------------------------------------------------- */

/* Rule 6 (BFC Extend). *ok false when the limit leaves no room. */
static enum dnnmem_status extend(struct bfc *b, uint64_t size, bool *ok)
{
    *ok = false;
    uint64_t avail = (b->limit - b->in_regions) / K_MIN_ALLOC * K_MIN_ALLOC;
    if (size > avail)
        return DNNMEM_OK;
    bool doubled = false;
    while (size > b->curr_region) {
        if (b->curr_region > UINT64_MAX / 2)
            return DNNMEM_E_SHAPE;
        b->curr_region *= 2;
        doubled = true;
    }
    uint64_t bytes = b->curr_region < avail ? b->curr_region : avail;
    if (b->n_r == b->cap_r) {
        size_t want = b->cap_r ? b->cap_r * 2 : 16;
        struct region *nr = realloc(b->r, want * sizeof *nr);
        if (!nr)
            return DNNMEM_E_NOMEM;
        b->r = nr;
        b->cap_r = want;
    }
    DM_TRY(need_chunks(b, 2));
    int32_t ri = (int32_t)b->n_r++;
    int32_t ci = new_chunk(b, b->next_addr, bytes, ri);
    b->r[ri] = (struct region){b->next_addr, bytes, ci};
    if (!dm_uadd_ok(b->next_addr, bytes, &b->next_addr))
        return DNNMEM_E_SHAPE;
    b->in_regions += bytes;
    up(&b->st.reserved, &b->st.peak_reserved, bytes);
    up(&b->st.segments, &b->st.peak_segments, 1);
    bin_insert(b, ci);
    if (!doubled && b->curr_region <= UINT64_MAX / 2)
        b->curr_region *= 2;
    *ok = true;
    return DNNMEM_OK;
}

/* Rule 8 (BFC DeallocateFreeRegions): return every region that is one free
 * chunk. True when any was returned. */
static bool free_regions(struct bfc *b)
{
    bool any = false;
    for (size_t k = 0; k < b->n_r; k++) {
        struct region *rg = &b->r[k];
        if (rg->first < 0)
            continue;
        struct chunk *ch = &b->c[rg->first];
        if (ch->in_use || ch->next >= 0)
            continue;
        bin_remove(b, rg->first);
        kill_chunk(b, rg->first);
        rg->first = -1;
        b->in_regions -= rg->size;
        b->st.reserved -= rg->size;
        b->st.segments--;
        any = true;
    }
    return any;
}

/* ---- allocate and free ------------------------------------------------------------ */

/* Rule 4. */
static bool should_split(const struct bfc *b, uint64_t chunk, uint64_t size)
{
    return chunk >= 2 * size || chunk - size >= b->o.max_internal_fragmentation;
}

static enum dnnmem_status b_alloc(void *self, uint64_t bytes, uint64_t *handle, uint64_t *granted)
{
    struct bfc *b = self;
    *handle = 0;
    *granted = 0;
    if (bytes == 0)
        return DNNMEM_OK;
    if (bytes > MAX_REQUEST)
        return DNNMEM_E_SHAPE;
    uint64_t size = dm_bfc_round(bytes), sum;
    if (!dm_uadd_ok(b->st.allocated, size, &sum) || !dm_uadd_ok(b->st.requested, bytes, &sum))
        return DNNMEM_E_SHAPE; /* byte counts beyond 2^64 */
    DM_TRY(need_chunks(b, 2));
    int32_t i = find_chunk(b, size);
    if (i < 0) {
        bool ok;
        DM_TRY(extend(b, size, &ok));
        if (!ok && b->o.garbage_collection && free_regions(b)) {
            b->st.num_alloc_retries++;
            DM_TRY(extend(b, size, &ok));
        }
        if (!ok) {
            b->st.num_ooms++;
            b->st.oom_alloc_size = size;
            return DNNMEM_E_DEVICE_OOM;
        }
        DM_TRY(need_chunks(b, 2));
        i = find_chunk(b, size);
        if (i < 0)
            return DNNMEM_E_INTERNAL;
    }
    bin_remove(b, i);
    if (should_split(b, b->c[i].size, size)) {
        int32_t j = new_chunk(b, b->c[i].addr + size, b->c[i].size - size, b->c[i].region);
        b->c[i].size = size;
        b->c[j].prev = i;
        b->c[j].next = b->c[i].next;
        if (b->c[i].next >= 0)
            b->c[b->c[i].next].prev = j;
        b->c[i].next = j;
        bin_insert(b, j);
    }
    b->c[i].in_use = 1;
    b->c[i].requested = bytes;
    up(&b->st.allocated, &b->st.peak_allocated, b->c[i].size);
    up(&b->st.requested, &b->st.peak_requested, bytes);
    *handle = (uint64_t)i + 1;
    *granted = b->c[i].size;
    return DNNMEM_OK;
}

/* Merge free chunk `hi` (right after `lo`) into `lo`; both out of bins. */
static void merge(struct bfc *b, int32_t lo, int32_t hi)
{
    b->c[lo].size += b->c[hi].size;
    b->c[lo].next = b->c[hi].next;
    if (b->c[hi].next >= 0)
        b->c[b->c[hi].next].prev = lo;
    kill_chunk(b, hi);
}

/* Rule 5. */
static void b_free(void *self, uint64_t handle)
{
    struct bfc *b = self;
    if (handle == 0 || handle > b->used)
        return;
    int32_t i = (int32_t)(handle - 1);
    if (!b->c[i].live || !b->c[i].in_use)
        return;
    b->c[i].in_use = 0;
    b->st.allocated -= b->c[i].size;
    b->st.requested -= b->c[i].requested;
    b->c[i].requested = 0;
    int32_t n = b->c[i].next;
    if (n >= 0 && !b->c[n].in_use) {
        bin_remove(b, n);
        merge(b, i, n);
    }
    int32_t p = b->c[i].prev;
    if (p >= 0 && !b->c[p].in_use) {
        bin_remove(b, p);
        merge(b, p, i);
        i = p;
    }
    bin_insert(b, i);
}

static void b_stats(const void *self, struct dm_alloc_stats *st)
{
    *st = ((const struct bfc *)self)->st;
}

static void b_destroy(void *self)
{
    struct bfc *b = self;
    if (!b)
        return;
    free(b->c);
    free(b->r);
    for (int i = 0; i < K_NUM_BINS; i++)
        free(b->bins[i].v);
    free(b);
}

enum dnnmem_status dm_alloc_bfc_new(const struct dm_bfc_opts *o, struct dm_allocator *a)
{
    if (o->growth_first_region == 0 || o->max_internal_fragmentation == 0 ||
        o->limit > UNLIMITED)
        return DNNMEM_E_USAGE;
    struct bfc *b = calloc(1, sizeof *b);
    if (!b)
        return DNNMEM_E_NOMEM;
    b->o = *o;
    b->limit = o->limit ? o->limit : UNLIMITED;
    /* rule 7 */
    uint64_t first = o->allow_growth && o->growth_first_region < b->limit ? o->growth_first_region
                                                                           : b->limit;
    b->curr_region = dm_bfc_round(first);
    b->dead = -1;
    b->next_addr = FIRST_ADDR;
    if (need_chunks(b, 1) != DNNMEM_OK) {
        b_destroy(b);
        return DNNMEM_E_NOMEM;
    }
    *a = (struct dm_allocator){"bfc", b, b_alloc, b_free, b_stats, b_destroy};
    return DNNMEM_OK;
}

size_t dm_bfc_snapshot(const struct dm_allocator *a, struct dm_bfc_chunk *out, size_t cap)
{
    const struct bfc *b = a->self;
    size_t n = 0;
    for (size_t k = 0; k < b->n_r; k++)
        for (int32_t i = b->r[k].first; i >= 0; i = b->c[i].next, n++)
            if (n < cap)
                out[n] = (struct dm_bfc_chunk){b->c[i].addr, b->c[i].size, b->c[i].requested,
                                               (int)k, b->c[i].in_use != 0};
    return n;
}
