/*
 * variant.c: the HuggingFace graph an estimate's options need. The model
 * handle keeps only the outline loading built (dm_load_hf_outline: counts,
 * flags, weights; no names); every graph an estimate runs (eager or sdpa
 * attention as loaded, LoRA, quantized weights, a transformers release,
 * ...) is built by dm_load_hf when an estimate first asks for it and kept,
 * keyed by what dm_load_hf reads of the options. A generation's graph
 * depends on the prompt and is built per estimate. One mutex per model
 * guards the list, so concurrent estimates on one model build each variant
 * once.
 */
#include "estimate.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* What decides the graph: dm_load_hf's reading of the options. */
struct key {
    bool opts;                /* built with the options; else as loaded (options NULL) */
    bool sdpa, flash, train, ckpt, cuda;
    enum dnnmem_quant quant;
    enum dnnmem_kbit_prep kbit;
    enum dnnmem_precision precision;
    enum dnnmem_sdpa_backend backend;
    int transformers, torch, cc;
    int64_t lora_r;           /* 0: no adapters (nor the fields below) */
    double lora_alpha, lora_dropout;
    size_t n_targets;
    const char *const *targets; /* the options' (borrowed), or the entry's copies */
};

struct entry {
    struct entry *next;
    struct key key;
    char **targets;             /* key.targets, owned */
    struct dm_graph g;
};

struct dm_variants {
    pthread_mutex_t lock;
    json_t *root; /* the config's parsed root (a reference); builds read it under the lock */
    const char *path;
    int64_t max_nodes; /* the load's budget, for every graph built */
    struct entry *list;
};

enum dnnmem_status dm_variants_new(json_t *root, const char *path, int64_t max_nodes,
                                   struct dm_variants **out, struct dnnmem_error *err)
{
    struct dm_variants *v = calloc(1, sizeof *v);
    if (!v)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
    if (pthread_mutex_init(&v->lock, NULL) != 0) {
        free(v);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
    }
    v->root = json_incref(root);
    v->path = path;
    v->max_nodes = max_nodes;
    *out = v;
    return DNNMEM_OK;
}

static void free_targets(char **t, size_t n)
{
    for (size_t k = 0; t && k < n; k++)
        free(t[k]);
    free(t);
}

void dm_variants_free(struct dm_variants *v)
{
    if (!v)
        return;
    for (struct entry *e = v->list, *next; e; e = next) {
        next = e->next;
        dm_graph_free(&e->g);
        free_targets(e->targets, e->key.n_targets);
        free(e);
    }
    pthread_mutex_destroy(&v->lock);
    json_decref(v->root);
    free(v);
}

/* The key of the options (targets borrowed from them). */
static struct key key_of(const struct dm_est_opts *o)
{
    const struct dnnmem_config *c = &o->cfg;
    struct key k = {.opts = o->rebuild, .sdpa = o->sdpa};
    if (!k.opts)
        return k;
    k.flash = o->flash;
    k.train = c->mode == DNNMEM_MODE_TRAIN;
    k.ckpt = k.train && c->n_checkpoint > 0;
    k.cuda = c->device == DNNMEM_DEVICE_CUDA;
    k.quant = c->quant;
    k.kbit = k.train ? c->kbit_prep : DNNMEM_KBIT_PREP_NONE;
    k.precision = c->precision;
    k.backend = o->sdpa && !o->flash ? c->sdpa_backend : DNNMEM_SDPA_AUTO;
    /* the releases, the GPU and alpha: the defaults table's rows, which the
     * builder is given (struct dm_hf_env, build) */
    k.transformers = o->transformers;
    k.torch = o->torch;
    k.cc = (int)dm_default_int(&o->d, CC);
    if (c->lora.r > 0) {
        k.lora_r = c->lora.r;
        k.lora_alpha = dm_default_real(&o->d, LORA_ALPHA);
        k.lora_dropout = c->lora.dropout;
        k.n_targets = c->lora.n_targets;
        k.targets = c->lora.targets;
    }
    return k;
}

static bool same_key(const struct key *a, const struct key *b)
{
    if (a->opts != b->opts || a->sdpa != b->sdpa || a->flash != b->flash || a->train != b->train ||
        a->ckpt != b->ckpt || a->cuda != b->cuda || a->quant != b->quant || a->kbit != b->kbit ||
        a->precision != b->precision || a->backend != b->backend ||
        a->transformers != b->transformers || a->torch != b->torch || a->cc != b->cc ||
        a->lora_r != b->lora_r || a->lora_alpha != b->lora_alpha ||
        a->lora_dropout != b->lora_dropout || a->n_targets != b->n_targets)
        return false;
    for (size_t k = 0; k < a->n_targets; k++)
        if (strcmp(a->targets[k], b->targets[k]) != 0)
            return false;
    return true;
}

/* opts NULL: as loaded, without options; the eager one lifted as
 * dnnmem_model_load lifts every graph it loads (it was the model's own
 * graph before the outline) */
static enum dnnmem_status build(const struct dm_variants *v, bool sdpa,
                                const struct dnnmem_config *opts, const struct key *k,
                                struct dm_graph *g, struct dnnmem_error *err)
{
    dm_graph_init(g);
    g->path = v->path;
    g->max_nodes = v->max_nodes;
    struct dm_hf_env env = {.torch = k->torch, .transformers = k->transformers, .cc = k->cc,
                            .lora_alpha = k->lora_alpha};
    enum dnnmem_status s = dm_load_hf(g, v->root, sdpa, opts, opts ? &env : NULL, err);
    if (s == DNNMEM_OK && !sdpa && !opts)
        s = dm_graph_lift(g, err);
    if (s != DNNMEM_OK)
        dm_graph_free(g);
    return s;
}

/* The kept graph for key k, built (with o's options) when missing; under
 * the lock. */
static enum dnnmem_status kept(struct dm_variants *v, const struct key *k,
                               const struct dm_est_opts *o, const struct dm_graph **g,
                               struct dnnmem_error *err)
{
    for (struct entry *e = v->list; e; e = e->next)
        if (same_key(&e->key, k)) {
            *g = &e->g;
            return DNNMEM_OK;
        }
    struct entry *e = calloc(1, sizeof *e);
    if (!e)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", v->path);
    e->key = *k;
    bool copied = !k->n_targets || (e->targets = calloc(k->n_targets, sizeof *e->targets));
    for (size_t j = 0; copied && j < k->n_targets; j++)
        copied = (e->targets[j] = strdup(k->targets[j])) != NULL;
    e->key.targets = (const char *const *)e->targets;
    enum dnnmem_status s = copied ? build(v, k->sdpa, k->opts ? &o->cfg : NULL, k, &e->g, err)
                                  : dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", v->path);
    if (s != DNNMEM_OK) {
        free_targets(e->targets, k->n_targets);
        free(e);
        return s;
    }
    e->next = v->list;
    v->list = e;
    *g = &e->g;
    return DNNMEM_OK;
}

static enum dnnmem_status kept_locked(struct dm_variants *v, const struct key *k,
                                      const struct dm_est_opts *o, const struct dm_graph **g,
                                      struct dnnmem_error *err)
{
    if (pthread_mutex_lock(&v->lock) != 0)
        return dm_fail(err, DNNMEM_E_INTERNAL, "%s: cannot lock the model", v->path);
    enum dnnmem_status s = kept(v, k, o, g, err);
    pthread_mutex_unlock(&v->lock);
    return s;
}

enum dnnmem_status dm_est_variant(struct dm_variants *v, const struct dm_graph *base,
                                  const struct dm_est_opts *o, const struct dm_graph **g,
                                  struct dm_graph *own, struct dnnmem_error *err)
{
    *g = base;
    if (!v)
        return DNNMEM_OK;
    if (o->rebuild && o->generate) {
        struct key k = key_of(o);
        DM_TRY(build(v, o->sdpa, &o->cfg, &k, own, err));
        *g = own;
        return DNNMEM_OK;
    }
    struct key k = key_of(o);
    return kept_locked(v, &k, o, g, err);
}

const struct dm_graph *dm_variants_loaded(struct dm_variants *v, bool sdpa,
                                          struct dnnmem_error *err)
{
    struct key k = {.opts = false, .sdpa = sdpa};
    const struct dm_graph *g = NULL;
    if (v && kept_locked(v, &k, NULL, &g, err) != DNNMEM_OK)
        g = NULL;
    return g;
}
