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
    case DNNMEM_CAT_INPUT: return "inputs";
    case DNNMEM_CAT_ACTIVATION: return "activations";
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
    int32_t tensor;
    uint8_t category;
    uint64_t bytes, granted;
};

static int by_size_desc(const void *a, const void *b)
{
    const struct live_entry *x = a, *y = b;
    if (x->granted != y->granted)
        return x->granted < y->granted ? 1 : -1;
    return x->tensor - y->tensor;
}

enum dnnmem_status dm_result_build(const struct dm_graph *g, const struct dm_tinfo *t,
                                   const struct dm_schedule *s, struct dm_allocator *a,
                                   const struct dnnmem_config *cfg, uint64_t context_bytes,
                                   const struct dnnmem_assumption *assumptions, size_t n_assumptions,
                                   struct dnnmem_result **out, struct dnnmem_error *err)
{
    int32_t nt = g->n_tensors + s->n_implied; /* event ids span graph and implied tensors */
    uint64_t *handle = calloc((size_t)nt + 1, sizeof *handle);
    uint64_t *granted = calloc((size_t)nt + 1, sizeof *granted);
    struct result_box *box = calloc(1, sizeof *box);
    struct live_entry *live = NULL;
    enum dnnmem_status st = DNNMEM_OK;
    if (!handle || !granted || !box)
        goto oom;
    dm_arena_init(&box->arena);
    struct dnnmem_result *r = &box->r;

    /* pass 1: find the event after which allocated memory peaks */
    size_t peak_ev = 0;
    uint64_t peak = 0;
    bool any = false;
    for (size_t e = 0; e < s->n; e++) {
        const struct dm_event *ev = &s->ev[e];
        struct dm_alloc_stats as;
        if (ev->kind == DM_EV_ALLOC) {
            enum dnnmem_status as_st = a->alloc(a->self, ev->bytes, &handle[ev->tensor], &granted[ev->tensor]);
            if (as_st != DNNMEM_OK) {
                st = dm_fail(err, as_st, "%s: allocating '%s' overflows the byte count", g->path,
                             g->tensors[ev->tensor].name);
                goto fail;
            }
            a->stats(a->self, &as);
            if (!any || as.allocated > peak) {
                peak = as.allocated;
                peak_ev = e;
                any = true;
            }
        } else {
            a->free(a->self, handle[ev->tensor]);
        }
    }
    struct dm_alloc_stats fin;
    a->stats(a->self, &fin);
    r->peak_allocated = fin.peak_allocated;
    r->context_bytes = context_bytes;
    r->total_bytes = r->peak_allocated + context_bytes;
    r->n_steps = (size_t)s->n_steps;

    /* pass 2: the live set right after the peak event; the event order fixes
     * which blocks are live, the first pass fixed each block's size */
    bool *alive = calloc((size_t)nt + 1, sizeof *alive);
    if (!alive)
        goto oom;
    for (size_t e = 0; any && e <= peak_ev; e++)
        alive[s->ev[e].tensor] = s->ev[e].kind == DM_EV_ALLOC;
    size_t n_live = 0;
    live = malloc(((size_t)nt + 1) * sizeof *live);
    if (!live) {
        free(alive);
        goto oom;
    }
    uint64_t sum_granted = 0;
    for (size_t e = 0; any && e <= peak_ev; e++) {
        const struct dm_event *ev = &s->ev[e];
        if (ev->kind != DM_EV_ALLOC || !alive[ev->tensor])
            continue;
        alive[ev->tensor] = false; /* count each once */
        live[n_live++] = (struct live_entry){ev->tensor, ev->category, ev->bytes, granted[ev->tensor]};
        r->category_bytes[ev->category] += ev->bytes;
        sum_granted += granted[ev->tensor];
        if (ev->category == DNNMEM_CAT_WEIGHT)
            r->weight_tensors++;
    }
    free(alive);
    uint64_t requested = 0;
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        requested += r->category_bytes[c];
    r->rounding_bytes = sum_granted - requested;
    if (any && s->ev[peak_ev].step > 0) {
        const struct dm_node *n = &g->nodes[s->ev[peak_ev].step - 1];
        r->peak_step = (size_t)s->ev[peak_ev].step;
        r->peak_node = dm_arena_strdup(&box->arena, n->name);
        r->peak_op = dm_arena_strdup(&box->arena, dm_ops[n->op].name);
    } else {
        r->peak_node = dm_arena_strdup(&box->arena, "");
        r->peak_op = dm_arena_strdup(&box->arena, "");
    }

    qsort(live, n_live, sizeof *live, by_size_desc);
    size_t top = cfg->n_top_tensors < n_live ? cfg->n_top_tensors : n_live;
    r->n_live_total = n_live;
    r->n_live = top;
    r->live = dm_arena_array(&box->arena, top + 1, sizeof *r->live);
    if (!r->live || !r->peak_node || !r->peak_op)
        goto oom;
    for (size_t k = 0; k < top; k++) {
        int32_t id = live[k].tensor;
        struct dnnmem_tensor_info *ti = &r->live[k];
        char nbuf[512];
        ti->name = dm_arena_strdup(&box->arena, dm_schedule_tensor_name(g, s, id, nbuf, sizeof nbuf));
        ti->category = (enum dnnmem_category)live[k].category;
        ti->bytes = live[k].bytes;
        ti->allocated = live[k].granted;
        if (id >= g->n_tensors) { /* implied: a scalar buffer of its node */
            ti->dtype = dm_dtype_name((enum dm_dtype)s->implied_dtype[id - g->n_tensors]);
            const struct dm_node *n = &g->nodes[s->implied_node[id - g->n_tensors]];
            ti->producer_node = dm_arena_strdup(&box->arena, n->name);
            ti->producer_op = dm_ops[n->op].name;
            if (!ti->name || !ti->producer_node)
                goto oom;
            continue;
        }
        const struct dm_tensor *tt = &g->tensors[id];
        ti->dtype = dm_dtype_name(t[id].dtype);
        ti->rank = t[id].rank;
        for (int d = 0; d < t[id].rank && d < DNNMEM_MAX_DIMS; d++)
            ti->dims[d] = t[id].dims[d];
        if (tt->producer >= 0 && tt->role == DM_ROLE_ACTIVATION) {
            ti->producer_node = dm_arena_strdup(&box->arena, g->nodes[tt->producer].name);
            ti->producer_op = dm_ops[g->nodes[tt->producer].op].name;
        } else {
            ti->producer_node = "";
            ti->producer_op = "";
        }
        if (!ti->name || !ti->producer_node)
            goto oom;
    }
    r->n_assumptions = n_assumptions;
    r->assumptions = dm_arena_array(&box->arena, n_assumptions + 1, sizeof *r->assumptions);
    if (!r->assumptions)
        goto oom;
    for (size_t k = 0; k < n_assumptions; k++) {
        r->assumptions[k].key = dm_arena_strdup(&box->arena, assumptions[k].key);
        r->assumptions[k].value = dm_arena_strdup(&box->arena, assumptions[k].value);
        r->assumptions[k].source = dm_arena_strdup(&box->arena, assumptions[k].source);
        if (!r->assumptions[k].key || !r->assumptions[k].value || !r->assumptions[k].source)
            goto oom;
    }
    free(handle);
    free(granted);
    free(live);
    *out = r;
    return DNNMEM_OK;
oom:
    st = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory building the result", g->path);
fail:
    free(handle);
    free(granted);
    free(live);
    if (box) {
        dm_arena_free(&box->arena);
        free(box);
    }
    return st;
}
