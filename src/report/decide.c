/*
 * decide.c: decisions on top of estimates: the largest batch (or any dim)
 * that fits, and the changes that would make a job fit. Every answer comes
 * from full estimates (shapes, schedule, allocator), never extrapolation.
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
    enum dnnmem_status s = dnnmem_estimate(se->m, &c, &r, err);
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

/* Whether the value fits (the verdict), or even its requested bytes alone
 * exceed the capacity. */
static enum dnnmem_status try_value(struct search *se, int64_t v, bool *fits, bool *over,
                                    struct dnnmem_error *err)
{
    struct dnnmem_result *r;
    DM_TRY(estimate_at(se, v, &r, err));
    if (fits)
        *fits = r->verdict != DNNMEM_VERDICT_DOES_NOT_FIT;
    if (over)
        *over = r->peak_requested + r->context_bytes > (uint64_t)se->cfg->capacity_bytes;
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
    int64_t lo = 0, hi = 1; /* lo: requested fits (0: none checked), hi: first over */
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
    for (int64_t v = hi - 1; v >= 1; v--) {
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
    enum dnnmem_status s = max_dim(se, limit, value, at, next, err);
    for (int k = 0; k < se->n; k++)
        dnnmem_result_free(se->r[k]);
    free(se);
    return s;
}

void dnnmem_advice_free(struct dnnmem_advice *a, size_t n)
{
    if (!a)
        return;
    for (size_t k = 0; k < n; k++)
        free((char *)a[k].change);
    free(a);
}

static enum dnnmem_status add_advice(struct dnnmem_advice **out, size_t *n, const char *change,
                                     const struct dnnmem_result *r, struct dnnmem_error *err)
{
    struct dnnmem_advice *a = realloc(*out, (*n + 1) * sizeof *a);
    char *c = malloc(strlen(change) + 1);
    if (!a || !c) {
        free(c);
        if (a)
            *out = a;
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    }
    strcpy(c, change);
    *out = a;
    a[(*n)++] = (struct dnnmem_advice){c, r->total_bytes, r->verdict};
    return DNNMEM_OK;
}

/* One variant of the configuration, estimated and recorded. */
static enum dnnmem_status try_change(const dnnmem_model *m, const struct dnnmem_config *c,
                                     const char *change, struct dnnmem_advice **out, size_t *n,
                                     struct dnnmem_error *err)
{
    struct dnnmem_result *r = NULL;
    enum dnnmem_status s = dnnmem_estimate(m, c, &r, err);
    if (s == DNNMEM_E_UNSUPPORTED || s == DNNMEM_E_USAGE)
        return DNNMEM_OK; /* this change does not apply to the model */
    if (s == DNNMEM_OK)
        s = add_advice(out, n, change, r, err);
    dnnmem_result_free(r);
    return s;
}

enum dnnmem_status dnnmem_advise(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                 struct dnnmem_advice **out, size_t *n, struct dnnmem_error *err)
{
    if (!m || !cfg || !out || !n || cfg->capacity_bytes <= 0)
        return dm_fail(err, DNNMEM_E_USAGE, "advice needs a device capacity (--gpu or --memory)");
    *out = NULL;
    *n = 0;
    enum dnnmem_status s = DNNMEM_OK;
    char buf[256];
    /* a smaller batch: the largest that fits */
    int64_t batch = cfg->batch_size > 0 ? cfg->batch_size : 1;
    if (batch > 1) {
        int64_t best = 0;
        struct dnnmem_result *at = NULL;
        s = dnnmem_max_dim(m, cfg, NULL, batch - 1, &best, &at, NULL, err);
        if (s == DNNMEM_OK && best > 0) {
            snprintf(buf, sizeof buf, "--batch-size %lld", (long long)best);
            s = add_advice(out, n, buf, at, err);
        }
        dnnmem_result_free(at);
        if (s == DNNMEM_E_USAGE) /* no batch dim to vary */
            s = DNNMEM_OK;
    }
    struct dnnmem_config c = *cfg;
    /* activation checkpointing of every top-level module */
    static const char *const every_module[] = {"/*"};
    if (s == DNNMEM_OK && cfg->mode == DNNMEM_MODE_TRAIN && cfg->n_checkpoint == 0) {
        c = *cfg;
        c.checkpoint = every_module;
        c.n_checkpoint = 1;
        s = try_change(m, &c, "--checkpoint '/*' (every top-level module)", out, n, err);
    }
    /* mixed precision */
    if (s == DNNMEM_OK && cfg->device == DNNMEM_DEVICE_CUDA &&
        cfg->precision == DNNMEM_PRECISION_FP32) {
        c = *cfg;
        c.precision = DNNMEM_PRECISION_AMP_BF16;
        s = try_change(m, &c, "--precision amp-bf16", out, n, err);
    }
    /* a lighter optimizer: one state buffer instead of two, or none */
    if (s == DNNMEM_OK && cfg->mode == DNNMEM_MODE_TRAIN &&
        (cfg->optimizer == DNNMEM_OPT_ADAM || cfg->optimizer == DNNMEM_OPT_ADAMW ||
         cfg->optimizer == DNNMEM_OPT_SGD_MOMENTUM)) {
        c = *cfg;
        c.optimizer = cfg->optimizer == DNNMEM_OPT_SGD_MOMENTUM ? DNNMEM_OPT_SGD
                                                                : DNNMEM_OPT_SGD_MOMENTUM;
        c.optimizer_set = true; /* not a HuggingFace config's AdamW default */
        s = try_change(m, &c,
                       c.optimizer == DNNMEM_OPT_SGD ? "--optimizer sgd" : "--optimizer sgd-momentum",
                       out, n, err);
    }
    if (s != DNNMEM_OK) {
        dnnmem_advice_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return s;
}
