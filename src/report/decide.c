/*
 * decide.c: the largest batch (or any dim) that fits, leaving the headroom
 * free, from full estimates (shapes, schedule, allocator), never
 * extrapolation. The changes that would make a job fit: advise.c.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

/* A search over one dim: the model (which keeps the graph built for the
 * options, so every value's estimate shares it), the configuration, and
 * the results already estimated, by value (each value is estimated once;
 * the answer's and the next value's results are handed to the caller). */
#define SEARCH_KEEP 64
struct search {
    const dnnmem_model *m;
    const struct dnnmem_config *cfg;
    const char *dim;             /* NULL: the batch */
    bool tight_ok;               /* "tight" is an answer too: no headroom kept */
    int n;
    int64_t v[SEARCH_KEEP];
    struct dnnmem_result *r[SEARCH_KEEP];
};

/* The result with the dim set to v (borrowed from the search). */
static enum dnnmem_status estimate_at(struct search *se, int64_t v, struct dnnmem_result **out,
                                      struct dnnmem_error *err)
{
    for (int k = 0; k < se->n; k++)
        if (se->v[k] == v) {
            *out = se->r[k];
            return DNNMEM_OK;
        }
    const struct dnnmem_config *cfg = se->cfg;
    struct dnnmem_config c = *cfg;
    struct dnnmem_dim_binding *dims = NULL;
    if (se->dim) {
        dims = malloc((cfg->n_dims + 1) * sizeof *dims);
        if (!dims)
            return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
        size_t n = 0;
        for (size_t k = 0; k < cfg->n_dims; k++)
            if (strcmp(cfg->dims[k].name, se->dim) != 0)
                dims[n++] = cfg->dims[k];
        dims[n++] = (struct dnnmem_dim_binding){se->dim, v};
        c.dims = dims;
        c.n_dims = n;
    } else {
        c.batch_size = v;
    }
    struct dnnmem_result *r = NULL;
    enum dnnmem_status s = dm_estimate_once(se->m, &c, &r, err);
    free(dims);
    if (s != DNNMEM_OK)
        return s;
    if (se->n == SEARCH_KEEP) { /* more values than a bisection of int64 tries */
        dnnmem_result_free(se->r[0]);
        memmove(se->v, se->v + 1, (SEARCH_KEEP - 1) * sizeof *se->v);
        memmove(se->r, se->r + 1, (SEARCH_KEEP - 1) * sizeof *se->r);
        se->n--;
    }
    se->v[se->n] = v;
    se->r[se->n++] = r;
    *out = r;
    return DNNMEM_OK;
}

/* Whether the value fits leaving the headroom free (the verdict "fits",
 * not "tight"), or even its requested bytes alone leave less than the
 * headroom free (then so do all larger values: they only grow). */
static enum dnnmem_status try_value(struct search *se, int64_t v, bool *fits, bool *over,
                                    struct dnnmem_error *err)
{
    struct dnnmem_result *r;
    DM_TRY(estimate_at(se, v, &r, err));
    if (fits)
        *fits = se->tight_ok ? r->verdict != DNNMEM_VERDICT_DOES_NOT_FIT
                             : r->verdict == DNNMEM_VERDICT_FITS;
    if (over) {
        double h = se->tight_ok ? 0 : se->cfg->headroom > 0 ? se->cfg->headroom : DM_HEADROOM_DEFAULT;
        double usable = (double)se->cfg->capacity_bytes * (1.0 - h);
        *over = (double)r->peak_requested + (double)r->context_bytes > usable;
    }
    return DNNMEM_OK;
}

/* The result at v, handed over to the caller (estimated if it was not). */
static enum dnnmem_status take(struct search *se, int64_t v, struct dnnmem_result **out,
                               struct dnnmem_error *err)
{
    struct dnnmem_result *r;
    DM_TRY(estimate_at(se, v, &r, err));
    for (int k = 0; k < se->n; k++)
        if (se->r[k] == r) {
            se->v[k] = se->v[se->n - 1];
            se->r[k] = se->r[--se->n];
            break;
        }
    *out = r;
    return DNNMEM_OK;
}

static enum dnnmem_status max_dim(struct search *se, int64_t limit, int64_t *value,
                                  struct dnnmem_result **at, struct dnnmem_result **next,
                                  struct dnnmem_error *err)
{
    /* bound: the smallest value whose requested bytes alone do not fit (they
     * grow with the dim, so nothing above fits either), by doubling then
     * bisection */
    bool over;
    /* a captured step's sizes may hold from a least value up (src/estimate/captured.c) */
    int64_t least = dm_dim_least(dm_model_graph(se->m), se->dim);
    if (least > limit)
        least = limit;
    int64_t lo = least - 1, hi = least; /* lo: requested fits (least - 1: none checked), hi: first over */
    for (;;) {
        DM_TRY(try_value(se, hi, NULL, &over, err));
        if (over)
            break;
        lo = hi;
        if (hi == limit) {
            hi = limit + 1;
            break;
        }
        hi = hi > limit / 2 ? limit : hi * 2;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        DM_TRY(try_value(se, mid, NULL, &over, err));
        if (over)
            hi = mid;
        else
            lo = mid;
    }
    /* the answer: the largest value below the bound that fits */
    for (int64_t v = hi - 1; v >= least; v--) {
        bool fits;
        DM_TRY(try_value(se, v, &fits, NULL, err));
        if (fits) {
            *value = v;
            break;
        }
    }
    if (at && *value)
        DM_TRY(take(se, *value, at, err));
    if (next && *value < limit)
        DM_TRY(take(se, *value + 1, next, err));
    return DNNMEM_OK;
}

enum dnnmem_status dnnmem_max_dim(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                  const char *dim, int64_t limit, int64_t *value,
                                  struct dnnmem_result **at, struct dnnmem_result **next,
                                  struct dnnmem_error *err)
{
    return dm_max_dim(m, cfg, dim, limit, false, value, at, next, err);
}

enum dnnmem_status dm_max_dim(const dnnmem_model *m, const struct dnnmem_config *cfg,
                              const char *dim, int64_t limit, bool tight_ok, int64_t *value,
                              struct dnnmem_result **at, struct dnnmem_result **next,
                              struct dnnmem_error *err)
{
    if (!m || !cfg || !value || cfg->capacity_bytes <= 0 || limit < 1)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "max search: a device capacity (--gpu or --memory) and a limit >= 1 are needed");
    if (at)
        *at = NULL;
    if (next)
        *next = NULL;
    *value = 0;
    struct search *se = calloc(1, sizeof *se);
    if (!se)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    se->m = m;
    se->cfg = cfg;
    se->dim = dim;
    se->tight_ok = tight_ok;
    enum dnnmem_status s = max_dim(se, limit, value, at, next, err);
    for (int k = 0; k < se->n; k++)
        dnnmem_result_free(se->r[k]);
    free(se);
    return s;
}
