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
 * subtrees that can overlap, and in a list by offset: when most placed
 * chunks overlap the value (a training step's saved values all overlap one
 * another), the walk reads that list instead of sorting them. Equal offsets
 * may come in any order: the walk's result does not depend on it.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

struct node {
    int64_t start, end, sub_end; /* sub_end: the latest end in the subtree */
    uint64_t offset, rend;       /* rend: the chunk's end rounded up to the alignment */
    uint32_t prio;
    int32_t left, right;
};

struct treap {
    struct node *n;
    int32_t count;
    int32_t root;
};

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
    uint64_t offset, rend;
};

/* Chunks by offset: quicksort (median of three), insertion sort below 16. */
static void sort_chunks(struct chunk *a, size_t n)
{
    while (n > 16) {
        size_t mid = n / 2, last = n - 1;
        if (a[mid].offset < a[0].offset) { struct chunk x = a[mid]; a[mid] = a[0]; a[0] = x; }
        if (a[last].offset < a[0].offset) { struct chunk x = a[last]; a[last] = a[0]; a[0] = x; }
        if (a[last].offset < a[mid].offset) { struct chunk x = a[last]; a[last] = a[mid]; a[mid] = x; }
        uint64_t pivot = a[mid].offset;
        size_t i = 0, j = last;
        for (;;) {
            while (a[i].offset < pivot)
                i++;
            while (a[j].offset > pivot)
                j--;
            if (i >= j)
                break;
            struct chunk x = a[i];
            a[i++] = a[j];
            a[j--] = x;
        }
        /* [0, j] <= pivot <= [j + 1, n): the smaller side first, then loop */
        size_t left = j + 1;
        if (left < n - left) {
            sort_chunks(a, left);
            a += left;
            n -= left;
        } else {
            sort_chunks(a + left, n - left);
            n = left;
        }
    }
    for (size_t i = 1; i < n; i++) {
        struct chunk x = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1].offset > x.offset) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* The walk over the free gaps between chunks met in offset order. */
struct sweep {
    uint64_t off;       /* where the next gap starts */
    uint64_t need;      /* the value's size */
    uint64_t best, best_size;
};

static void sweep_chunk(struct sweep *w, uint64_t offset, uint64_t rend)
{
    if (w->off < offset) {
        uint64_t gap = offset - w->off;
        if (gap >= w->need && gap < w->best_size) {
            w->best = w->off;
            w->best_size = gap;
        }
    }
    if (rend > w->off)
        w->off = rend;
}

/* The chunks overlapping [start, end] into out (capacity: every node);
 * `stack` holds as many node indices. Returns how many, or stops at more
 * than `cap`. */
static size_t overlapping(const struct treap *t, int64_t start, int64_t end, struct chunk *out,
                          int32_t *stack, size_t cap)
{
    size_t n_out = 0, sp = 0;
    if (t->root >= 0)
        stack[sp++] = t->root;
    while (sp > 0 && n_out <= cap) {
        const struct node *x = &t->n[stack[--sp]];
        if (start > x->sub_end)
            continue; /* nothing below ends late enough */
        if (x->left >= 0)
            stack[sp++] = x->left;
        if (x->start <= end && x->end >= start)
            out[n_out++] = (struct chunk){x->offset, x->rend};
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
    int32_t *by_off = malloc((n + 1) * sizeof *by_off); /* placed chunks by offset */
    enum dnnmem_status s = DNNMEM_OK;
    if (!ord || !t.n || !ch || !stack || !by_off) {
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
        /* the overlapping chunks in offset order: sorted when they are few,
         * else read off the list of every chunk kept in offset order */
        size_t cap = (size_t)t.count / 4 > 32 ? (size_t)t.count / 4 : 32;
        size_t m = overlapping(&t, v->start, v->end, ch, stack, cap);
        struct sweep w = {0, v->size, UINT64_MAX, UINT64_MAX};
        if (m > cap) {
            for (int32_t q = 0; q < t.count; q++) {
                const struct node *c = &t.n[by_off[q]];
                if (c->start <= v->end && c->end >= v->start)
                    sweep_chunk(&w, c->offset, c->rend);
            }
        } else {
            sort_chunks(ch, m);
            for (size_t c = 0; c < m; c++)
                sweep_chunk(&w, ch[c].offset, ch[c].rend);
        }
        uint64_t best = w.best, off = w.off;
        if (heap > off && heap - off >= v->size && heap - off < w.best_size)
            best = off; /* the room left below the heap's current top */
        uint64_t end, rend;
        if (best == UINT64_MAX)
            best = off;
        if (!dm_uadd_ok(best, v->size, &end) || !round_up(end, alignment, &rend)) {
            s = DNNMEM_E_SHAPE;
            goto out;
        }
        if (end > heap)
            heap = end;
        v->offset = best;
        int32_t x = t.count;
        t.n[x] = (struct node){v->start, v->end, v->end, best, rend,
                               dm_mix32((uint32_t)v->id * 2654435761U + 1U), -1, -1};
        t.root = insert(t.n, t.root, x);
        int32_t lo = 0, hi = t.count; /* after the chunks at or below its offset */
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (t.n[by_off[mid]].offset <= best)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(&by_off[lo + 1], &by_off[lo], (size_t)(t.count - lo) * sizeof *by_off);
        by_off[lo] = x;
        t.count++;
    }
    *heap_size = heap;
out:
    free(ord);
    free(t.n);
    free(ch);
    free(stack);
    free(by_off);
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
