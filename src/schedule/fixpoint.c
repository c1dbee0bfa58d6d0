/*
 * fixpoint.c: gradient accumulation's repeated micro-steps (dm_run.fp,
 * dnnmem_config.accum_fixed_point; docs/speed.md "plan").
 *
 * The micro-steps between the first and the last of an optimizer step run
 * the same code on the same builder state: each forward and backward makes
 * its own activations and adds into the gradients the first one made. Once
 * the allocator's state repeats too, every later micro-step but the last
 * replays the one before it exactly, and the peak, the breakdown at it and
 * the verdict do not depend on how many there are. The builder then builds
 * the last micro-step next.
 *
 * The test, at the boundary B_k after micro-step k (k >= 2; B_0 is the
 * start of the first), over the micro-steps W_{k-1} (from B_{k-2} to
 * B_{k-1}) and W_k:
 *  F1 the buffers live at B_{k-2}, B_{k-1} and B_k are as many, and the
 *     i-th of each (in the order they were made) alike (bytes, tensor,
 *     node, category, dtype, what): the renaming r maps the i-th at B_{k-2}
 *     to the i-th at B_{k-1};
 *  F2 W_k is W_{k-1} renamed: event by event the same kind, the same step
 *     (phase, loss, iteration, node), alike buffers; a buffer W_{k-1} makes
 *     maps to the one W_k makes at the same event, and a buffer W_{k-1}
 *     frees to the one W_k frees (r, or the map of its making);
 *  F3 r carries B_{k-1} onto B_k: the i-th buffer live at B_{k-1} maps to
 *     the i-th live at B_k, and in each allocator replayed both sit in
 *     blocks at the same address;
 *  F4 each allocator's state is the same at B_{k-1} and B_k: its segments
 *     and blocks (addresses, sizes, bytes asked, allocated or free, pool;
 *     dm_caching_snapshot), the bytes allocated, reserved and asked, the
 *     split segments' free bytes, the segments, the address of the next
 *     segment, and its retries and failures (so W_k had none).
 * W_{k+1} then starts from a state the renaming makes B_{k-1}'s, with the
 * events of W_k renamed, and replays W_k: every allocation gets a block at
 * the same address and the allocator's counts move as in W_k.
 *
 * The allocators are those the estimate replays (src/estimate/replay.c):
 * the caching allocator with PyTorch's defaults (or the rounding one), and
 * on CUDA with a capacity the caching allocator capped at it, whose replay
 * decides the verdict when the peak is over it; a capped replay that fails
 * fails in the estimate's replay at the same event, before any micro-step
 * is left out, and is not compared after.
 */
#include "builder.h"

#include <stdlib.h>
#include <string.h>

enum { FP_ALLOCS = 2 };

/* One boundary. */
struct fp_bound {
    size_t ev;        /* events before it */
    int32_t buf;      /* buffers made before it */
    int32_t *live;    /* the buffers live at it, in the order they were made */
    uint64_t *addr;   /* per live buffer x allocator: its block's address */
    size_t n_live;
    struct dm_caching_block *blk[FP_ALLOCS];
    size_t n_blk[FP_ALLOCS];
    struct dm_alloc_stats st[FP_ALLOCS];
    uint64_t next_addr[FP_ALLOCS];
};

struct dm_fp {
    struct dm_allocator a[FP_ALLOCS];
    int n_a;
    bool dead[FP_ALLOCS];   /* the capped allocator failed */
    uint64_t *handle;       /* per buffer x allocator */
    bool *alive;            /* per buffer */
    int32_t *ren;           /* per buffer: the renaming of F2, or -1 */
    size_t cap_buf;
    size_t done;            /* events replayed */
    struct fp_bound b[3];   /* the last three boundaries, the oldest first */
    int n_b;
    bool off;               /* out of memory, or the estimate's allocator failed: no more tests */
};

static void bound_free(struct fp_bound *x)
{
    free(x->live);
    free(x->addr);
    for (int k = 0; k < FP_ALLOCS; k++)
        free(x->blk[k]);
    memset(x, 0, sizeof *x);
}

void dm_fp_free(struct dm_fp *f)
{
    if (!f)
        return;
    for (int k = 0; k < f->n_a; k++)
        f->a[k].destroy(f->a[k].self);
    for (int k = 0; k < 3; k++)
        bound_free(&f->b[k]);
    free(f->handle);
    free(f->alive);
    free(f->ren);
    free(f);
}

struct dm_fp *dm_fp_new(const struct dm_run *run)
{
    if (!run->fp.on)
        return NULL;
    struct dm_fp *f = calloc(1, sizeof *f);
    if (!f)
        return NULL; /* every micro-step replayed */
    struct dm_caching_opts co;
    dm_caching_opts_init(&co);
    enum dnnmem_status s = run->fp.caching ? dm_alloc_caching_new(&co, &f->a[0])
                                           : dm_alloc_rounding_new(run->fp.round, &f->a[0]);
    if (s != DNNMEM_OK) {
        free(f);
        return NULL;
    }
    f->n_a = 1;
    if (run->fp.capped) {
        co.capacity = run->fp.capped;
        if (dm_alloc_caching_new(&co, &f->a[1]) != DNNMEM_OK) {
            dm_fp_free(f);
            return NULL;
        }
        f->n_a = 2;
    }
    return f;
}

/* The per-buffer arrays for n buffers. */
static bool grow(struct dm_fp *f, size_t n)
{
    if (n <= f->cap_buf)
        return true;
    size_t cap = f->cap_buf ? f->cap_buf : 1024;
    while (cap < n)
        cap *= 2;
    uint64_t *h = realloc(f->handle, cap * FP_ALLOCS * sizeof *h);
    if (h)
        f->handle = h;
    bool *al = realloc(f->alive, cap * sizeof *al);
    if (al)
        f->alive = al;
    int32_t *rn = realloc(f->ren, cap * sizeof *rn);
    if (rn)
        f->ren = rn;
    if (!h || !al || !rn)
        return false;
    memset(h + f->cap_buf * FP_ALLOCS, 0, (cap - f->cap_buf) * FP_ALLOCS * sizeof *h);
    memset(al + f->cap_buf, 0, (cap - f->cap_buf) * sizeof *al);
    f->cap_buf = cap;
    return true;
}

/* Replay the events not yet replayed; false when the estimate's own
 * allocator fails (then nothing is left out). */
static bool replay(struct dm_fp *f, const struct dm_schedule *s)
{
    if (!grow(f, (size_t)s->n_buf))
        return false;
    for (; f->done < s->n_ev; f->done++) {
        const struct dm_event *ev = &s->ev[f->done];
        uint64_t *h = &f->handle[(size_t)ev->buf * FP_ALLOCS];
        f->alive[ev->buf] = ev->kind == DM_EV_ALLOC;
        for (int k = 0; k < f->n_a; k++) {
            if (f->dead[k])
                continue;
            uint64_t granted;
            if (ev->kind != DM_EV_ALLOC)
                f->a[k].free(f->a[k].self, h[k]);
            else if (f->a[k].alloc(f->a[k].self, s->buf[ev->buf].bytes, &h[k], &granted) != DNNMEM_OK) {
                if (k == 0)
                    return false;
                f->dead[k] = true;
            }
        }
    }
    return true;
}

/* Record the boundary now in x. */
static bool record(struct dm_fp *f, const struct dm_schedule *s, struct fp_bound *x)
{
    x->ev = s->n_ev;
    x->buf = s->n_buf;
    size_t n = 0;
    for (int32_t k = 0; k < s->n_buf; k++)
        n += f->alive[k];
    x->n_live = n;
    x->live = malloc((n + 1) * sizeof *x->live);
    x->addr = malloc((n + 1) * FP_ALLOCS * sizeof *x->addr);
    if (!x->live || !x->addr)
        return false;
    n = 0;
    for (int32_t k = 0; k < s->n_buf; k++) {
        if (!f->alive[k])
            continue;
        for (int a = 0; a < FP_ALLOCS; a++)
            x->addr[n * FP_ALLOCS + (size_t)a] =
                a < f->n_a ? dm_caching_block_addr(&f->a[a], f->handle[(size_t)k * FP_ALLOCS + (size_t)a]) : 0;
        x->live[n++] = k;
    }
    for (int a = 0; a < f->n_a; a++) {
        f->a[a].stats(f->a[a].self, &x->st[a]);
        x->next_addr[a] = dm_caching_next_addr(&f->a[a]);
        size_t nb = dm_caching_snapshot(&f->a[a], NULL, 0);
        x->blk[a] = malloc((nb + 1) * sizeof *x->blk[a]);
        if (!x->blk[a])
            return false;
        x->n_blk[a] = dm_caching_snapshot(&f->a[a], x->blk[a], nb);
    }
    return true;
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Buffers x and y alike (F1). */
static bool alike(const struct dm_schedule *s, int32_t x, int32_t y)
{
    const struct dm_buffer *a = &s->buf[x], *b = &s->buf[y];
    return a->bytes == b->bytes && a->tensor == b->tensor && a->node == b->node &&
           a->category == b->category && a->dtype == b->dtype && same_str(a->what, b->what);
}

static bool same_step(const struct dm_schedule *s, int32_t x, int32_t y)
{
    const struct dm_step *a = &s->steps[x], *b = &s->steps[y];
    return a->phase == b->phase && a->loss == b->loss && a->iteration == b->iteration &&
           a->node == b->node;
}

/* F4: allocator a's state at x and at y. */
static bool same_state(const struct fp_bound *x, const struct fp_bound *y, int a)
{
    const struct dm_alloc_stats *p = &x->st[a], *q = &y->st[a];
    if (p->allocated != q->allocated || p->reserved != q->reserved || p->requested != q->requested ||
        p->inactive_split != q->inactive_split || p->segments != q->segments ||
        p->num_alloc_retries != q->num_alloc_retries || p->num_ooms != q->num_ooms ||
        x->next_addr[a] != y->next_addr[a] || x->n_blk[a] != y->n_blk[a])
        return false;
    for (size_t k = 0; k < x->n_blk[a]; k++) {
        const struct dm_caching_block *u = &x->blk[a][k], *v = &y->blk[a][k];
        if (u->addr != v->addr || u->size != v->size || u->requested != v->requested ||
            u->allocated != v->allocated || u->small != v->small || u->expandable != v->expandable ||
            u->mapped != v->mapped || u->segment_start != v->segment_start)
            return false;
    }
    return true;
}

/* F1-F4 over the three boundaries kept. */
static bool repeats(struct dm_fp *f, const struct dm_schedule *s)
{
    const struct fp_bound *b0 = &f->b[0], *b1 = &f->b[1], *b2 = &f->b[2];
    size_t len = b1->ev - b0->ev;
    if (b2->ev - b1->ev != len || b1->buf - b0->buf != b2->buf - b1->buf ||
        b0->n_live != b1->n_live || b1->n_live != b2->n_live)
        return false;
    for (int32_t k = 0; k < s->n_buf; k++)
        f->ren[k] = -1;
    for (size_t i = 0; i < b0->n_live; i++) { /* F1 */
        if (!alike(s, b0->live[i], b1->live[i]) || !alike(s, b1->live[i], b2->live[i]))
            return false;
        f->ren[b0->live[i]] = b1->live[i];
    }
    for (size_t i = 0; i < len; i++) { /* F2 */
        const struct dm_event *u = &s->ev[b0->ev + i], *v = &s->ev[b1->ev + i];
        if (u->kind != v->kind || !same_step(s, u->step, v->step) || !alike(s, u->buf, v->buf))
            return false;
        if (u->kind == DM_EV_ALLOC) {
            if (u->buf < b0->buf || v->buf < b1->buf || f->ren[u->buf] >= 0)
                return false; /* an allocation makes a buffer of its micro-step */
            f->ren[u->buf] = v->buf;
        } else if (f->ren[u->buf] != v->buf) {
            return false;
        }
    }
    for (size_t i = 0; i < b1->n_live; i++) { /* F3 */
        int32_t x = b1->live[i], y = b2->live[i];
        if (f->ren[x] >= 0 ? f->ren[x] != y : x != y)
            return false;
        for (int a = 0; a < f->n_a; a++)
            if (!f->dead[a] && b1->addr[i * FP_ALLOCS + (size_t)a] != b2->addr[i * FP_ALLOCS + (size_t)a])
                return false;
    }
    for (int a = 0; a < f->n_a; a++) /* F4 */
        if (!f->dead[a] && !same_state(b1, b2, a))
            return false;
    return true;
}

void dm_fp_iteration(struct dm_fp *f)
{
    if (!f)
        return;
    for (int k = 0; k < 3; k++)
        bound_free(&f->b[k]);
    f->n_b = 0;
}

bool dm_fp_boundary(struct dm_fp *f, const struct dm_schedule *s)
{
    if (!f || f->off)
        return false;
    if (!replay(f, s)) {
        f->off = true;
        return false;
    }
    if (f->n_b == 3) {
        bound_free(&f->b[0]);
        memmove(&f->b[0], &f->b[1], 2 * sizeof f->b[0]);
        memset(&f->b[2], 0, sizeof f->b[2]);
        f->n_b = 2;
    }
    if (!record(f, s, &f->b[f->n_b++])) {
        f->off = true;
        return false;
    }
    return f->n_b == 3 && repeats(f, s);
}
