/*
 * pool.c: a simulator of MXNet's GPU pooled storage manager.
 *
 * Sources: apache/mxnet 1.9.1 src/storage/pooled_storage_manager.h and
 * src/storage/storage.cc, master (2.0) src/storage/pooled_storage_manager.h,
 * docs/static_site/src/pages/api/faq/env_var.md ("PSM" below). Facts are
 * collected in shared/reference/runtime-facts.md section 3. The code here is
 * written from those facts; it copies nothing.
 *
 * The policy, as numbered rules (each constant is defined once, below, with
 * its source):
 *
 *  1. Naive rounding (PSM RoundMultiple; MXNET_GPU_MEM_POOL_TYPE=Naive, the
 *     default of storage.cc): up to a multiple of the page size
 *     (MXNET_GPU_MEM_POOL_PAGE_SIZE, 4096 B, at least 32); a result above
 *     MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE (2 MiB) then goes up to a
 *     multiple of 2 MiB.
 *  2. Round rounding (PSM RoundPower2; MXNET_GPU_MEM_POOL_TYPE=Round): the
 *     bucket is ceil(log2 size), never below log2(page) = 12; up to
 *     2^cutoff (MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF, 24, within 20..34)
 *     a size takes the next power of two, above it the next multiple of
 *     2^cutoff. The page size must be a power of two.
 *  3. Reuse: the pool maps a rounded size to a list of free buffers; a
 *     request reuses one only if a free buffer of exactly its rounded size
 *     exists, the last one freed first (LIFO). No splitting, no merging.
 *     Free only returns the buffer to its list.
 *  4. New memory and release (PSM Alloc, ReleaseAll;
 *     MXNET_GPU_MEM_POOL_RESERVE, 5 % of total): before a cudaMalloc, when
 *     free <= reserve or size > free - reserve, every cached buffer is
 *     returned to the device. If the cudaMalloc then fails (size > free),
 *     the pool is released again and the call retried once; after that it
 *     is fatal (here: an OOM). Here free = capacity - bytes the pool holds.
 *  5. Statistics: allocated = rounded sizes in use; reserved = bytes held
 *     from the device (in use + cached); requested = sizes asked for.
 *
 * Simplified: one device, one stream, nothing else allocates on the device
 * while the job runs. A 0-byte request gets no buffer.
 *
 * Data: buffers live in one array (a handle is the index + 1); the free
 * lists are one array of size classes sorted by size, each with a stack.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)

/* PSM: MXNET_GPU_MEM_POOL_PAGE_SIZE default 4096, minimum 32. */
#define K_PAGE_SIZE ((uint64_t)4096)
#define K_PAGE_MIN ((uint64_t)32)
/* PSM: MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE default 2 MiB. */
#define K_LARGE_ROUND (2 * MiB)
/* PSM: MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF default 24, allowed 20..34. */
#define K_CUTOFF 24
#define K_CUTOFF_MIN 20
#define K_CUTOFF_MAX 34
/* PSM: MXNET_GPU_MEM_POOL_RESERVE default 5 (% of total memory). */
#define K_RESERVE_PERCENT 5
/* Ours: the largest request simulated. */
#define MAX_REQUEST ((uint64_t)1 << 52)

struct buf {
    uint64_t size, requested;
    uint8_t live, in_use;
};

struct sclass {
    uint64_t size;
    int32_t *v; /* free buffers, the last freed on top */
    size_t n, cap;
};

struct pool {
    struct dm_pool_opts o;
    uint64_t reserve;   /* bytes */
    struct buf *b;
    size_t n_b, cap_b;
    struct sclass *cl;  /* sorted by size */
    size_t n_cl, cap_cl;
    struct dm_alloc_stats st;
};

void dm_pool_opts_init(struct dm_pool_opts *o)
{
    memset(o, 0, sizeof *o);
    o->strategy = DM_POOL_NAIVE;
    o->page_size = K_PAGE_SIZE;
    o->large_alloc_round = K_LARGE_ROUND;
    o->round_linear_cutoff = K_CUTOFF;
    o->reserve_percent = K_RESERVE_PERCENT;
}

static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

/* Rules 1 and 2. */
uint64_t dm_pool_round(const struct dm_pool_opts *o, uint64_t bytes)
{
    if (o->strategy == DM_POOL_NAIVE) {
        uint64_t s = round_up(bytes, o->page_size);
        return s > o->large_alloc_round ? round_up(s, o->large_alloc_round) : s;
    }
    int page_bits = 63 - __builtin_clzll(o->page_size);
    int bucket = bytes <= 1 ? 0 : 64 - __builtin_clzll(bytes - 1); /* ceil(log2) */
    if (bucket < page_bits)
        bucket = page_bits;
    if (bucket <= o->round_linear_cutoff)
        return (uint64_t)1 << bucket;
    return round_up(bytes, (uint64_t)1 << o->round_linear_cutoff);
}

/* Index of the size class of `size`, or where it would go. */
static size_t find_class(const struct pool *p, uint64_t size)
{
    size_t lo = 0, hi = p->n_cl;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->cl[mid].size < size)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void up(uint64_t *cur, uint64_t *peak, uint64_t by)
{
    *cur += by;
    if (*cur > *peak)
        *peak = *cur;
}

/* PSM ReleaseAll: every cached buffer back to the device. */
static void release_all(struct pool *p)
{
    for (size_t k = 0; k < p->n_cl; k++) {
        struct sclass *c = &p->cl[k];
        for (size_t j = 0; j < c->n; j++) {
            p->b[c->v[j]].live = 0;
            p->st.reserved -= c->size;
            p->st.segments--;
        }
        c->n = 0;
    }
}

static uint64_t device_free(const struct pool *p)
{
    return p->o.capacity > p->st.reserved ? p->o.capacity - p->st.reserved : 0;
}

static enum dnnmem_status p_alloc(void *self, uint64_t bytes, uint64_t *handle, uint64_t *granted)
{
    struct pool *p = self;
    *handle = 0;
    *granted = 0;
    if (bytes == 0)
        return DNNMEM_OK;
    if (bytes > MAX_REQUEST)
        return DNNMEM_E_SHAPE;
    uint64_t size = dm_pool_round(&p->o, bytes), sum;
    if (!dm_uadd_ok(p->st.reserved, size, &sum) || !dm_uadd_ok(p->st.requested, bytes, &sum))
        return DNNMEM_E_SHAPE; /* byte counts beyond 2^64 */
    size_t k = find_class(p, size);
    int32_t i;
    if (k < p->n_cl && p->cl[k].size == size && p->cl[k].n) { /* rule 3 */
        i = p->cl[k].v[--p->cl[k].n];
    } else {
        if (p->n_b == p->cap_b) {
            size_t want = p->cap_b ? p->cap_b * 2 : 256;
            struct buf *nb = realloc(p->b, want * sizeof *nb);
            if (!nb)
                return DNNMEM_E_NOMEM;
            p->b = nb;
            p->cap_b = want;
        }
        if (p->o.capacity) { /* rule 4 */
            uint64_t fr = device_free(p);
            if (fr <= p->reserve || size > fr - p->reserve)
                release_all(p);
            if (size > device_free(p)) {
                release_all(p);
                p->st.num_alloc_retries++;
                if (size > device_free(p)) {
                    p->st.num_ooms++;
                    p->st.oom_alloc_size = size;
                    return DNNMEM_E_DEVICE_OOM;
                }
            }
        }
        i = (int32_t)p->n_b++;
        p->b[i] = (struct buf){size, 0, 1, 0};
        up(&p->st.reserved, &p->st.peak_reserved, size);
        up(&p->st.segments, &p->st.peak_segments, 1);
    }
    p->b[i].in_use = 1;
    p->b[i].requested = bytes;
    up(&p->st.allocated, &p->st.peak_allocated, size);
    up(&p->st.requested, &p->st.peak_requested, bytes);
    *handle = (uint64_t)i + 1;
    *granted = size;
    return DNNMEM_OK;
}

/* Rule 3: back to its list. Host memory for the list is made sure of here;
 * if it cannot be had, the buffer goes back to the device instead. */
static void p_free(void *self, uint64_t handle)
{
    struct pool *p = self;
    if (handle == 0 || handle > p->n_b)
        return;
    int32_t i = (int32_t)(handle - 1);
    struct buf *b = &p->b[i];
    if (!b->live || !b->in_use)
        return;
    b->in_use = 0;
    p->st.allocated -= b->size;
    p->st.requested -= b->requested;
    size_t k = find_class(p, b->size);
    if (k == p->n_cl || p->cl[k].size != b->size) {
        if (p->n_cl == p->cap_cl) {
            size_t want = p->cap_cl ? p->cap_cl * 2 : 64;
            struct sclass *nc = realloc(p->cl, want * sizeof *nc);
            if (!nc)
                goto give_back;
            p->cl = nc;
            p->cap_cl = want;
        }
        memmove(p->cl + k + 1, p->cl + k, (p->n_cl - k) * sizeof *p->cl);
        p->cl[k] = (struct sclass){b->size, NULL, 0, 0};
        p->n_cl++;
    }
    struct sclass *c = &p->cl[k];
    if (c->n == c->cap) {
        size_t want = c->cap ? c->cap * 2 : 8;
        int32_t *nv = realloc(c->v, want * sizeof *nv);
        if (!nv)
            goto give_back;
        c->v = nv;
        c->cap = want;
    }
    c->v[c->n++] = i;
    return;
give_back:
    b->live = 0;
    p->st.reserved -= b->size;
    p->st.segments--;
}

static void p_stats(const void *self, struct dm_alloc_stats *st)
{
    *st = ((const struct pool *)self)->st;
}

static void p_destroy(void *self)
{
    struct pool *p = self;
    if (!p)
        return;
    for (size_t k = 0; k < p->n_cl; k++)
        free(p->cl[k].v);
    free(p->cl);
    free(p->b);
    free(p);
}

enum dnnmem_status dm_alloc_pool_new(const struct dm_pool_opts *o, struct dm_allocator *a)
{
    if ((o->strategy != DM_POOL_NAIVE && o->strategy != DM_POOL_ROUND) ||
        o->page_size < K_PAGE_MIN || o->large_alloc_round == 0 || o->reserve_percent < 0 ||
        o->reserve_percent > 100)
        return DNNMEM_E_USAGE;
    if (o->strategy == DM_POOL_ROUND &&
        ((o->page_size & (o->page_size - 1)) || o->round_linear_cutoff < K_CUTOFF_MIN ||
         o->round_linear_cutoff > K_CUTOFF_MAX))
        return DNNMEM_E_USAGE;
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return DNNMEM_E_NOMEM;
    p->o = *o;
    uint64_t total = o->total ? o->total : o->capacity;
    p->reserve = total / 100 * (uint64_t)o->reserve_percent +
                 total % 100 * (uint64_t)o->reserve_percent / 100;
    *a = (struct dm_allocator){"mxnet-pool", p, p_alloc, p_free, p_stats, p_destroy};
    return DNNMEM_OK;
}
