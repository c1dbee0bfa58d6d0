/*
 * heap.c: XLA's heap simulator, the algorithm that packs every temporary
 * value of a compiled module into one preallocated "temp" buffer (offsets
 * fixed at compile time). Written from the behaviour of openxla/xla's
 * xla/service/heap_simulator/heap_simulator.cc (earlier
 * xla/service/heap_simulator.cc); the code here is our own.
 *
 *  - Time is logical: every Alloc, Free and ShareWith call of the simulation
 *    advances the clock by one (GlobalDecreasingSizeBestFitHeap::Alloc/Free:
 *    ++current_time_). A value lives over the closed interval [its Alloc,
 *    its Free]; two values conflict when their intervals intersect
 *    (BufferIntervalTree::ChunksOverlappingInTime: start <= end' && end >=
 *    start'). The caller builds the intervals (src/schedule/xla.c).
 *  - A value that shares a dying operand's buffer (HeapSimulator::Run with
 *    may_reuse_operand_buffers, the default) is colocated with it: the
 *    group takes one chunk, placed against the chunks that overlap any of
 *    its members. The members' intervals are adjacent (the operand is freed
 *    right before the sharer is defined), so a group is given here as one
 *    interval [start, end] of the whole group.
 *  - GlobalDecreasingSizeBestFitHeap::Finish sorts the intervals and, for
 *    each in turn, gathers the already placed chunks that overlap it in
 *    time, sorted by offset, and walks the free gaps between them (a chunk's
 *    end rounded up to the alignment starts the next gap; the first gap
 *    starts at 0; the last runs up to the current heap size): the smallest
 *    gap that holds the value wins (the first, lowest, among equal ones:
 *    FindChunkCandidate replaces its pick only by a strictly smaller gap).
 *    When none does, the value goes at the rounded end of the highest
 *    overlapping chunk and the heap grows to its end.
 *  - Orders (GetSpatialBufferIntervalCompare, GetTemporalBufferIntervalCompare):
 *    spatial: size descending, then the first member's own duration
 *    descending, then value id ascending; temporal: the whole group's
 *    duration descending, then size descending, then id ascending.
 *  - BufferAssigner (buffer_assignment.cc, AssignBuffersWithSequentialOrdering)
 *    runs ChooseBestHeapAlgorithm over {spatial, temporal} and keeps the
 *    result with the smaller heap (strictly smaller: spatial on a tie); the
 *    GPU compiler passes no custom order and an alignment of
 *    kXlaAllocatedBufferAlignBytes (gpu_constants.h: 128 in the XLA that
 *    TensorFlow 2.16 vendors).
 * The placed chunks are kept in a treap (a search tree on start time with
 * the subtree's latest end, like XLA's BufferIntervalTree, balanced by
 * pseudo-random priorities) so that the overlap query visits only the
 * subtrees that can overlap.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

struct node {
    int64_t start, end, sub_end; /* sub_end: the latest end in the subtree */
    uint64_t offset, size;
    uint32_t prio;
    int32_t left, right;
};

struct treap {
    struct node *n;
    int32_t count;
    int32_t root;
};

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

static void pull(struct node *n, int32_t i)
{
    int64_t e = n[i].end;
    if (n[i].left >= 0 && n[n[i].left].sub_end > e)
        e = n[n[i].left].sub_end;
    if (n[i].right >= 0 && n[n[i].right].sub_end > e)
        e = n[n[i].right].sub_end;
    n[i].sub_end = e;
}

/* Insert node `x` (its fields set) under `root`; returns the new root.
 * Recursion depth is the treap's height, O(log n) expected. */
static int32_t insert(struct node *n, int32_t root, int32_t x)
{
    if (root < 0)
        return x;
    if (n[x].start < n[root].start) {
        n[root].left = insert(n, n[root].left, x);
        if (n[n[root].left].prio > n[root].prio) { /* rotate right */
            int32_t l = n[root].left;
            n[root].left = n[l].right;
            n[l].right = root;
            pull(n, root);
            pull(n, l);
            return l;
        }
    } else {
        n[root].right = insert(n, n[root].right, x);
        if (n[n[root].right].prio > n[root].prio) { /* rotate left */
            int32_t r = n[root].right;
            n[root].right = n[r].left;
            n[r].left = root;
            pull(n, root);
            pull(n, r);
            return r;
        }
    }
    pull(n, root);
    return root;
}

struct chunk {
    uint64_t offset, size;
};

static int by_offset(const void *a, const void *b)
{
    const struct chunk *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The chunks overlapping [start, end] into out (capacity: every node);
 * `stack` holds as many node indices. Returns how many. */
static size_t overlapping(const struct treap *t, int64_t start, int64_t end, struct chunk *out,
                          int32_t *stack)
{
    size_t n_out = 0, sp = 0;
    if (t->root >= 0)
        stack[sp++] = t->root;
    while (sp > 0) {
        const struct node *x = &t->n[stack[--sp]];
        if (start > x->sub_end)
            continue; /* nothing below ends late enough */
        if (x->left >= 0)
            stack[sp++] = x->left;
        if (x->start <= end && x->end >= start)
            out[n_out++] = (struct chunk){x->offset, x->size};
        if (end >= x->start && x->right >= 0) /* right: starts >= x's */
            stack[sp++] = x->right;
    }
    return n_out;
}

struct order {
    const struct dm_heap_buf *b;
    int32_t i;
};

static int cmp_u64_desc(uint64_t a, uint64_t b) { return a > b ? -1 : a < b; }

static int spatial(const void *pa, const void *pb)
{
    const struct order *x = pa, *y = pb;
    int c = cmp_u64_desc(x->b->size, y->b->size);
    if (c)
        return c;
    uint64_t dx = (uint64_t)(x->b->own_end - x->b->start), dy = (uint64_t)(y->b->own_end - y->b->start);
    if ((c = cmp_u64_desc(dx, dy)) != 0)
        return c;
    return x->b->id < y->b->id ? -1 : x->b->id > y->b->id;
}

static int temporal(const void *pa, const void *pb)
{
    const struct order *x = pa, *y = pb;
    uint64_t dx = (uint64_t)(x->b->end - x->b->start), dy = (uint64_t)(y->b->end - y->b->start);
    int c = cmp_u64_desc(dx, dy);
    if (c)
        return c;
    if ((c = cmp_u64_desc(x->b->size, y->b->size)) != 0)
        return c;
    return x->b->id < y->b->id ? -1 : x->b->id > y->b->id;
}

static bool round_up(uint64_t v, uint64_t align, uint64_t *out)
{
    uint64_t r = v % align;
    if (r == 0) {
        *out = v;
        return true;
    }
    return dm_uadd_ok(v, align - r, out);
}

enum dnnmem_status dm_heap_fit(struct dm_heap_buf *b, size_t n, uint64_t alignment,
                               enum dm_heap_order order, uint64_t *heap_size)
{
    *heap_size = 0;
    if (alignment == 0)
        return DNNMEM_E_USAGE;
    for (size_t k = 0; k < n; k++)
        if (b[k].end < b[k].start || b[k].own_end < b[k].start || b[k].own_end > b[k].end)
            return DNNMEM_E_USAGE;
    if (n > (size_t)INT32_MAX - 1)
        return DNNMEM_E_SHAPE;
    struct order *ord = malloc((n + 1) * sizeof *ord);
    struct treap t = {.n = malloc((n + 1) * sizeof *t.n), .count = 0, .root = -1};
    struct chunk *ch = malloc((n + 1) * sizeof *ch);
    int32_t *stack = malloc((n + 1) * sizeof *stack);
    enum dnnmem_status s = DNNMEM_OK;
    if (!ord || !t.n || !ch || !stack) {
        s = DNNMEM_E_NOMEM;
        goto out;
    }
    for (size_t k = 0; k < n; k++)
        ord[k] = (struct order){&b[k], (int32_t)k};
    qsort(ord, n, sizeof *ord, order == DM_HEAP_TEMPORAL ? temporal : spatial);
    uint64_t heap = 0;
    for (size_t k = 0; k < n; k++) {
        struct dm_heap_buf *v = &b[ord[k].i];
        if (v->size == 0) { /* 0-sized values always sit at offset 0 */
            v->offset = 0;
            continue;
        }
        size_t m = overlapping(&t, v->start, v->end, ch, stack);
        qsort(ch, m, sizeof *ch, by_offset);
        uint64_t off = 0, best = UINT64_MAX, best_size = UINT64_MAX;
        for (size_t c = 0; c < m; c++) {
            if (off < ch[c].offset) {
                uint64_t gap = ch[c].offset - off;
                if (gap >= v->size && gap < best_size) {
                    best = off;
                    best_size = gap;
                }
            }
            uint64_t e, r;
            if (!dm_uadd_ok(ch[c].offset, ch[c].size, &e) || !round_up(e, alignment, &r)) {
                s = DNNMEM_E_SHAPE;
                goto out;
            }
            if (r > off)
                off = r;
        }
        if (heap > off && heap - off >= v->size && heap - off < best_size)
            best = off; /* the room left below the heap's current top */
        if (best == UINT64_MAX) {
            best = off;
            uint64_t top;
            if (!dm_uadd_ok(off, v->size, &top)) {
                s = DNNMEM_E_SHAPE;
                goto out;
            }
            heap = top;
        }
        v->offset = best;
        int32_t x = t.count++;
        t.n[x] = (struct node){v->start, v->end, v->end, best, v->size, mix((uint32_t)v->id * 2654435761U + 1U),
                               -1, -1};
        t.root = insert(t.n, t.root, x);
    }
    *heap_size = heap;
out:
    free(ord);
    free(t.n);
    free(ch);
    free(stack);
    return s;
}

enum dnnmem_status dm_heap_choose_best(struct dm_heap_buf *b, size_t n, uint64_t alignment,
                                       struct dm_heap_result *r)
{
    memset(r, 0, sizeof *r);
    struct dm_heap_buf *alt = malloc((n + 1) * sizeof *alt);
    if (!alt)
        return DNNMEM_E_NOMEM;
    memcpy(alt, b, n * sizeof *b);
    enum dnnmem_status s = dm_heap_fit(b, n, alignment, DM_HEAP_SPATIAL, &r->spatial_bytes);
    if (s == DNNMEM_OK)
        s = dm_heap_fit(alt, n, alignment, DM_HEAP_TEMPORAL, &r->temporal_bytes);
    if (s == DNNMEM_OK) {
        r->chosen = r->temporal_bytes < r->spatial_bytes ? DM_HEAP_TEMPORAL : DM_HEAP_SPATIAL;
        r->heap_bytes = r->chosen == DM_HEAP_TEMPORAL ? r->temporal_bytes : r->spatial_bytes;
        if (r->chosen == DM_HEAP_TEMPORAL)
            memcpy(b, alt, n * sizeof *b);
    }
    free(alt);
    return s;
}
