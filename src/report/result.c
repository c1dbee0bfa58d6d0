/*
 * result.c: replay the schedule through the allocator, find the peak, and
 * build the public result: totals, the breakdown at the peak, where it
 * happens and what is live there.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

/* The result owns one arena; it sits in front of the public struct. */
struct result_box {
    struct dnnmem_result r;
    struct dm_arena arena;
};

struct dm_arena *dm_result_arena(struct dnnmem_result *r)
{
    return &((struct result_box *)r)->arena; /* r is the first member */
}

enum dnnmem_status dm_result_warn(struct dnnmem_result *r, const char *text)
{
    enum { MAX_WARNINGS = 8 };
    struct result_box *b = (struct result_box *)r;
    if (!r->warnings && !(r->warnings = dm_arena_array(&b->arena, MAX_WARNINGS, sizeof *r->warnings)))
        return DNNMEM_E_NOMEM;
    if (r->n_warnings >= MAX_WARNINGS)
        return DNNMEM_OK;
    const char *t = dm_arena_strdup(&b->arena, text);
    if (!t)
        return DNNMEM_E_NOMEM;
    r->warnings[r->n_warnings++] = t;
    return DNNMEM_OK;
}

void dnnmem_result_free(struct dnnmem_result *r)
{
    if (!r)
        return;
    struct result_box *b = (struct result_box *)r; /* r is the first member */
    dm_arena_free(&b->arena);
    free(b);
}

const char *dnnmem_category_name(enum dnnmem_category c)
{
    switch (c) {
    case DNNMEM_CAT_WEIGHT: return "weights";
    case DNNMEM_CAT_WORKSPACE: return "workspaces";
    case DNNMEM_CAT_INPUT: return "inputs";
    case DNNMEM_CAT_ACTIVATION: return "activations";
    case DNNMEM_CAT_SAVED: return "saved for backward";
    case DNNMEM_CAT_GRADIENT: return "gradients";
    case DNNMEM_CAT_OPTIMIZER: return "optimizer state";
    case DNNMEM_CAT_TEMPORARY: return "temporaries";
    case DNNMEM_CAT_KV_CACHE: return "kv cache";
    case DNNMEM_CAT_COUNT: break;
    }
    return "?";
}

const char *dm_format_bytes(uint64_t bytes, char buf[32])
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) {
        snprintf(buf, 32, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, 32, "%.2f %s", v, units[u]);
    return buf;
}

struct live_entry {
    int32_t buf;
    int category;
    uint64_t granted;
};

static int by_kind_then_size(const void *a, const void *b)
{
    const struct live_entry *x = a, *y = b;
    if (x->category != y->category)
        return x->category - y->category;
    if (x->granted != y->granted)
        return x->granted < y->granted ? 1 : -1;
    return x->buf - y->buf;
}

/* What dm_result_build works on: its inputs, its scratch arrays (per buffer:
 * the allocator's handle and grant, alive at the peak), the result in the
 * making (its arena owns everything reachable from r), the peak found. */
struct build {
    const struct dm_graph *g;
    const struct dm_tinfo *t;
    const struct dm_schedule *s;
    struct result_box *box;
    struct dnnmem_result *r;
    uint64_t *handle, *granted;
    bool *alive;
    struct live_entry *live;
    struct dnnmem_timeline_point *tl; /* NULL without cfg->timeline */
    bool *by_alloc;                   /* per step: its point was set by an allocation */
    size_t peak_ev;                   /* the event after which allocated memory peaks */
    uint64_t from_peak, from_reserved; /* s->measure_from: the peaks from it on */
    bool any;                         /* any allocation at all */
    enum dnnmem_loss loss;            /* the loss, named at a peak in its steps */
};

/* The loss's step as a peak names it: the functional torch calls
 * (src/train/loss.c) and, for its backward, the autograd nodes that run. */
static const char *loss_op(enum dnnmem_loss loss, bool backward)
{
    switch (loss) {
    case DNNMEM_LOSS_CE:
        return backward ? "cross_entropy backward (NllLossBackward0, LogSoftmaxBackward0)"
                        : "cross_entropy (log_softmax, nll_loss)";
    case DNNMEM_LOSS_MSE: return backward ? "mse_loss backward (MseLossBackward0)" : "mse_loss";
    case DNNMEM_LOSS_SUM: return backward ? "sum backward (SumBackward0)" : "sum";
    }
    return "";
}

/* Node i's op as the result prints it: the op table's name (static), or a
 * capture's aten op, copied, as the result owns its strings. */
static const char *op_name(struct build *b, int32_t i)
{
    const char *op = dm_node_op_name(b->g, i);
    if (!b->g->op_names)
        return op;
    const char *copy = dm_arena_strdup(&b->box->arena, op);
    return copy ? copy : "";
}

/* The timeline: one point per step (its level filled in by the replay). */
static bool timeline_init(struct build *b)
{
    const struct dm_schedule *s = b->s;
    struct dnnmem_timeline_point *tl = dm_arena_array(&b->box->arena, (size_t)s->n_steps + 1,
                                                      sizeof *tl);
    b->by_alloc = dm_arena_array(&b->box->arena, (size_t)s->n_steps + 1, sizeof *b->by_alloc);
    if (!tl || !b->by_alloc)
        return false;
    for (int32_t k = 0; k < s->n_steps; k++) {
        const struct dm_step *sp = &s->steps[k];
        tl[k].phase = dm_phase_name((enum dm_phase)sp->phase);
        tl[k].iteration = sp->iteration;
        /* copied: the graph may be the estimate's own (LoRA) */
        tl[k].node = sp->node >= 0 ? dm_arena_strdup(&b->box->arena, b->g->nodes[sp->node].name)
                                   : "";
        if (!tl[k].node)
            return false;
        tl[k].op = sp->node >= 0 ? op_name(b, sp->node) : "";
    }
    b->tl = tl;
    b->r->timeline = tl;
    b->r->n_timeline = (size_t)s->n_steps;
    return true;
}

/* The schedule's events, each buffer named once (cfg->events). */
static bool events_init(struct build *b)
{
    const struct dm_schedule *s = b->s;
    struct dm_arena *ar = &b->box->arena;
    const char **names = dm_arena_array(ar, (size_t)s->n_buf + 1, sizeof *names);
    struct dnnmem_event *ev = dm_arena_array(ar, s->n_ev + 1, sizeof *ev);
    if (!names || !ev)
        return false;
    for (int32_t k = 0; k < s->n_buf; k++) {
        char nbuf[512];
        if (!(names[k] = dm_arena_strdup(ar, dm_buffer_name(b->g, &s->buf[k], nbuf, sizeof nbuf))))
            return false;
    }
    for (size_t e = 0; e < s->n_ev; e++) {
        const struct dm_buffer *bf = &s->buf[s->ev[e].buf];
        ev[e] = (struct dnnmem_event){.alloc = s->ev[e].kind == DM_EV_ALLOC, .bytes = bf->bytes,
                                      .step = (size_t)s->ev[e].step, .buffer = names[s->ev[e].buf],
                                      .category = (enum dnnmem_category)bf->category};
    }
    b->r->events = ev;
    b->r->n_events = s->n_ev;
    return true;
}

/* Pass 1: replay; find the event after which allocated memory peaks, and
 * the timeline's levels, per step the state where its allocated bytes
 * peaked. */
static enum dnnmem_status replay_to_peak(struct build *b, struct dm_allocator *a,
                                         struct dnnmem_error *err)
{
    const struct dm_schedule *s = b->s;
    struct dnnmem_result *r = b->r;
    struct dnnmem_timeline_point *tl = b->tl;
    uint64_t cat_now[DNNMEM_CAT_COUNT] = {0};
    uint64_t peak = 0, requested = 0;
    for (size_t e = 0; e < s->n_ev; e++) {
        const struct dm_event *ev = &s->ev[e];
        if (e == s->measure_from && e > 0) {
            /* TensorFlow's build history ends (src/schedule/tfbuild.c): as
             * reset_memory_stats, the peaks restart from what is in use */
            struct dm_alloc_stats now;
            a->stats(a->self, &now);
            peak = b->from_peak = now.allocated;
            b->from_reserved = now.reserved;
            b->peak_ev = e - 1;
            b->any = true;
            r->peak_requested = requested;
        }
        if (ev->kind == DM_EV_ALLOC) {
            enum dnnmem_status as = a->alloc(a->self, s->buf[ev->buf].bytes, &b->handle[ev->buf],
                                             &b->granted[ev->buf]);
            if (as != DNNMEM_OK) {
                char nb_[512];
                return dm_fail(err, as, as == DNNMEM_E_DEVICE_OOM
                                            ? "%s: allocating '%s' does not fit the device"
                                            : "%s: allocating '%s' overflows the byte count",
                               b->g->path, dm_buffer_name(b->g, &s->buf[ev->buf], nb_, sizeof nb_));
            }
            requested += s->buf[ev->buf].bytes;
            if (requested > r->peak_requested)
                r->peak_requested = requested;
            struct dm_alloc_stats cur;
            a->stats(a->self, &cur);
            if (tl) {
                cat_now[s->buf[ev->buf].category] += s->buf[ev->buf].bytes;
                struct dnnmem_timeline_point *p = &tl[ev->step];
                if (!b->by_alloc[ev->step] || cur.allocated >= p->allocated) {
                    b->by_alloc[ev->step] = true;
                    p->allocated = cur.allocated;
                    p->reserved = cur.reserved;
                    memcpy(p->category_bytes, cat_now, sizeof cat_now);
                }
            }
            if (s->measure_from && e >= s->measure_from && cur.reserved > b->from_reserved)
                b->from_reserved = cur.reserved;
            if (e >= s->measure_from && (!b->any || cur.allocated > peak)) {
                peak = b->from_peak = cur.allocated;
                b->peak_ev = e;
                b->any = true;
                r->fragmentation_bytes = cur.inactive_split;
            }
        } else {
            a->free(a->self, b->handle[ev->buf]);
            requested -= s->buf[ev->buf].bytes;
            if (tl) { /* a step that only frees shows where it ends */
                cat_now[s->buf[ev->buf].category] -= s->buf[ev->buf].bytes;
                struct dnnmem_timeline_point *p = &tl[ev->step];
                if (!b->by_alloc[ev->step]) {
                    struct dm_alloc_stats cur;
                    a->stats(a->self, &cur);
                    p->allocated = cur.allocated;
                    p->reserved = cur.reserved;
                    memcpy(p->category_bytes, cat_now, sizeof cat_now);
                }
            }
        }
    }
    /* steps without events keep the level of the step before */
    for (size_t k = 1; tl && k < r->n_timeline; k++)
        if (!tl[k].allocated && !tl[k].reserved && !b->by_alloc[k]) {
            tl[k].allocated = tl[k - 1].allocated;
            tl[k].reserved = tl[k - 1].reserved;
            memcpy(tl[k].category_bytes, tl[k - 1].category_bytes, sizeof cat_now);
        }
    return DNNMEM_OK;
}

/* Pass 2: the live set right after the peak event (b->live, returns its
 * count), the breakdown by category and where the peak happens. */
static size_t live_at_peak(struct build *b)
{
    const struct dm_graph *g = b->g;
    const struct dm_schedule *s = b->s;
    struct dnnmem_result *r = b->r;
    for (size_t e = 0; b->any && e <= b->peak_ev; e++)
        b->alive[s->ev[e].buf] = s->ev[e].kind == DM_EV_ALLOC;
    size_t n_live = 0;
    uint64_t sum_granted = 0, at_peak = 0;
    for (int32_t k = 0; k < s->n_buf; k++) {
        if (!b->alive[k])
            continue;
        b->live[n_live++] = (struct live_entry){k, s->buf[k].category, b->granted[k]};
        r->category_count[s->buf[k].category]++;
        r->category_bytes[s->buf[k].category] += s->buf[k].bytes;
        at_peak += s->buf[k].bytes;
        sum_granted += b->granted[k];
    }
    r->rounding_bytes = sum_granted - at_peak;
    const struct dm_step *step = b->any ? &s->steps[s->ev[b->peak_ev].step] : NULL;
    r->peak_phase = dm_phase_name(step ? (enum dm_phase)step->phase : DM_PHASE_SETUP);
    r->peak_iteration = step ? step->iteration : 1;
    if (step && step->node >= 0) {
        const struct dm_node *n = &g->nodes[step->node];
        r->peak_step = (size_t)step->node + 1;
        r->peak_node = dm_arena_strdup(&b->box->arena, n->name);
        r->peak_op = op_name(b, step->node);
    } else {
        r->peak_node = "";
        r->peak_op = step && step->loss ? loss_op(b->loss, step->loss == DM_STEP_LOSS_BACKWARD) : "";
    }
    return n_live;
}

/* The largest n_top live buffers of each kind, grouped by kind, described. */
static bool top_tensors(struct build *b, size_t n_live, size_t n_top)
{
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    struct dnnmem_result *r = b->r;
    struct live_entry *live = b->live;
    qsort(live, n_live, sizeof *live, by_kind_then_size);
    size_t top = 0;
    for (size_t k = 0, in_kind = 0; k < n_live; k++) {
        in_kind = k > 0 && live[k].category == live[k - 1].category ? in_kind + 1 : 0;
        if (in_kind < n_top)
            live[top++] = live[k];
    }
    r->n_live_total = n_live;
    r->n_live = top;
    r->live = dm_arena_array(&b->box->arena, top + 1, sizeof *r->live);
    if (!r->live || !r->peak_node)
        return false;
    for (size_t k = 0; k < top; k++) {
        const struct dm_buffer *bf = &b->s->buf[live[k].buf];
        struct dnnmem_tensor_info *ti = &r->live[k];
        char nbuf[512];
        ti->name = dm_arena_strdup(&b->box->arena, dm_buffer_name(g, bf, nbuf, sizeof nbuf));
        ti->category = (enum dnnmem_category)bf->category;
        ti->dtype = dm_dtype_name((enum dm_dtype)bf->dtype);
        ti->bytes = bf->bytes;
        ti->allocated = live[k].granted;
        if (bf->tensor >= 0 && t[bf->tensor].rank >= 0 && bf->bytes == t[bf->tensor].bytes) {
            /* the tensor, its gradient or optimizer state: same shape */
            ti->rank = t[bf->tensor].rank;
            for (int d = 0; d < ti->rank && d < DNNMEM_MAX_DIMS; d++)
                ti->dims[d] = t[bf->tensor].dims[d];
        } else {
            ti->rank = -1;
        }
        int32_t node = bf->node >= 0 ? bf->node
                     : bf->tensor >= 0 && g->tensors[bf->tensor].role == DM_ROLE_ACTIVATION
                         ? g->tensors[bf->tensor].producer
                         : -1;
        ti->producer_node = node >= 0 ? dm_arena_strdup(&b->box->arena, g->nodes[node].name) : "";
        ti->producer_op = node >= 0 ? op_name(b, node) : "";
        if (!ti->name || !ti->producer_node)
            return false;
    }
    return true;
}

static bool copy_assumptions(struct build *b, const struct dnnmem_assumption *assumptions,
                             size_t n_assumptions)
{
    struct dnnmem_result *r = b->r;
    struct dm_arena *ar = &b->box->arena;
    r->n_assumptions = n_assumptions;
    r->assumptions = dm_arena_array(ar, n_assumptions + 1, sizeof *r->assumptions);
    if (!r->assumptions)
        return false;
    for (size_t k = 0; k < n_assumptions; k++) {
        r->assumptions[k].key = dm_arena_strdup(ar, assumptions[k].key);
        r->assumptions[k].value = dm_arena_strdup(ar, assumptions[k].value);
        r->assumptions[k].source = dm_arena_strdup(ar, assumptions[k].source);
        if (!r->assumptions[k].key || !r->assumptions[k].value || !r->assumptions[k].source)
            return false;
    }
    return true;
}

enum dnnmem_status dm_result_build(const struct dm_graph *g, const struct dm_tinfo *t,
                                   const struct dm_schedule *s, struct dm_allocator *a,
                                   const struct dnnmem_config *cfg, uint64_t context_bytes,
                                   const struct dnnmem_assumption *assumptions, size_t n_assumptions,
                                   struct dnnmem_result **out, struct dnnmem_error *err)
{
    size_t nb = (size_t)s->n_buf;
    struct build b = {.g = g, .t = t, .s = s, .loss = cfg->loss};
    b.handle = calloc(nb + 1, sizeof *b.handle);
    b.granted = calloc(nb + 1, sizeof *b.granted);
    b.alive = calloc(nb + 1, sizeof *b.alive);
    b.live = malloc((nb + 1) * sizeof *b.live);
    b.box = calloc(1, sizeof *b.box);
    enum dnnmem_status st = DNNMEM_OK;
    if (!b.handle || !b.granted || !b.alive || !b.live || !b.box)
        goto oom;
    dm_arena_init(&b.box->arena);
    struct dnnmem_result *r = b.r = &b.box->r;
    if ((cfg->timeline || cfg->events) && !timeline_init(&b))
        goto oom;
    if (cfg->events && !events_init(&b))
        goto oom;
    if ((st = replay_to_peak(&b, a, err)) != DNNMEM_OK)
        goto fail;
    struct dm_alloc_stats fin;
    a->stats(a->self, &fin);
    if (s->measure_from > 0 && s->measure_from < s->n_ev) { /* after TF's build history */
        fin.peak_allocated = b.from_peak;
        fin.peak_reserved = b.from_reserved;
    }
    r->peak_allocated = fin.peak_allocated;
    r->peak_reserved = fin.peak_reserved > fin.peak_allocated ? fin.peak_reserved : fin.peak_allocated;
    r->slack_bytes = r->peak_reserved - r->peak_allocated;
    r->segments = fin.segments;
    r->context_bytes = context_bytes;
    r->total_bytes = r->peak_reserved + context_bytes;
    r->n_steps = (size_t)g->n_nodes;
    r->framework = cfg->framework;
    r->framework_version = dm_arena_strdup(&b.box->arena,
                                           cfg->framework_version ? cfg->framework_version : "");
    if (!r->framework_version)
        goto oom;
    size_t n_live = live_at_peak(&b);
    if (cfg->module_depth > 0 &&
        !dm_result_modules(g, s, b.alive, cfg->module_depth, &b.box->arena, r))
        goto oom;
    if (!top_tensors(&b, n_live, cfg->n_top_tensors) ||
        !copy_assumptions(&b, assumptions, n_assumptions))
        goto oom;
    free(b.handle);
    free(b.granted);
    free(b.alive);
    free(b.live);
    *out = r;
    return DNNMEM_OK;
oom:
    st = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory building the result", g->path);
fail:
    free(b.handle);
    free(b.granted);
    free(b.alive);
    free(b.live);
    if (b.box) {
        dm_arena_free(&b.box->arena);
        free(b.box);
    }
    return st;
}

enum dnnmem_status dm_replay(const struct dm_schedule *s, struct dm_allocator *a,
                             struct dm_alloc_stats *st)
{
    uint64_t *handle = calloc((size_t)s->n_buf + 1, sizeof *handle);
    if (!handle)
        return DNNMEM_E_NOMEM;
    enum dnnmem_status r = DNNMEM_OK;
    for (size_t e = 0; e < s->n_ev && r == DNNMEM_OK; e++) {
        const struct dm_event *ev = &s->ev[e];
        uint64_t granted;
        if (ev->kind == DM_EV_ALLOC)
            r = a->alloc(a->self, s->buf[ev->buf].bytes, &handle[ev->buf], &granted);
        else
            a->free(a->self, handle[ev->buf]);
    }
    a->stats(a->self, st);
    free(handle);
    return r;
}

const char *dnnmem_verdict_name(enum dnnmem_verdict v)
{
    switch (v) {
    case DNNMEM_VERDICT_NONE: return "none";
    case DNNMEM_VERDICT_FITS: return "fits";
    case DNNMEM_VERDICT_TIGHT: return "tight";
    case DNNMEM_VERDICT_DOES_NOT_FIT: return "does not fit";
    }
    return "?";
}
