/*
 * rounding.c: the simplest allocator model: every request is rounded up to a
 * multiple of `round` and nothing is cached, so reserved equals allocated.
 *
 * With round = 512 this is what torch.cuda.memory_allocated() counts for each
 * tensor: the caching allocator rounds every request up to kMinBlockSize =
 * 512 B (c10/cuda/CUDACachingAllocator.cpp, round_size), and a zero-byte
 * request gets no block at all. Splitting slack, segment sizes and caching
 * are the full simulator's business (caching.c).
 */
#include "dnnmem-impl.h"

#include <stdlib.h>

struct rounding {
    uint64_t round;
    struct dm_alloc_stats st;
};

static enum dnnmem_status r_alloc(void *self, uint64_t bytes, uint64_t *handle, uint64_t *granted)
{
    struct rounding *r = self;
    uint64_t g = bytes;
    if (g % r->round && !dm_uadd_ok(g, r->round - g % r->round, &g))
        return DNNMEM_E_SHAPE;
    if (!dm_uadd_ok(r->st.allocated, g, &r->st.allocated))
        return DNNMEM_E_SHAPE;
    r->st.reserved = r->st.allocated;
    if (r->st.allocated > r->st.peak_allocated)
        r->st.peak_allocated = r->st.peak_reserved = r->st.allocated;
    *handle = g;
    *granted = g;
    return DNNMEM_OK;
}

static void r_free(void *self, uint64_t handle)
{
    struct rounding *r = self;
    r->st.allocated -= handle;
    r->st.reserved = r->st.allocated;
}

static void r_stats(const void *self, struct dm_alloc_stats *st)
{
    *st = ((const struct rounding *)self)->st;
}

static void r_destroy(void *self) { free(self); }

enum dnnmem_status dm_alloc_rounding_new(uint64_t round, struct dm_allocator *a)
{
    struct rounding *r = calloc(1, sizeof *r);
    if (!r)
        return DNNMEM_E_NOMEM;
    r->round = round ? round : 1;
    *a = (struct dm_allocator){"rounding", r, r_alloc, r_free, r_stats, r_destroy};
    return DNNMEM_OK;
}
