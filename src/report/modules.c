/*
 * modules.c: the bytes live at the peak by module scope (--by-module;
 * struct dnnmem_module_info in include/dnnmem.h says which buffer belongs
 * where). The scopes are read from the node names, as ONNX exporters
 * (PyTorch's "/layer1/layer1.0/conv1/Conv"), the HuggingFace and Keras
 * front ends ("/model/layers.3/mlp/down_proj/MatMul") write them.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

/* The length of the scope of a node named `name` at `depth` (the name's
 * first bytes), 0 for the top level. A '/' at the start opens the first
 * component; every later '/' ends one, and the part after the last '/' is the
 * op, not a scope. A name without '/' (MXNet's layers, older ONNX exports'
 * "Conv_0") is its own scope, but an unnamed node's "<op>#<index>". */
static size_t scope_len(const char *name, int depth)
{
    if (!strchr(name, '/'))
        return strchr(name, '#') ? 0 : strlen(name);
    size_t end = 0;
    int seen = 0;
    for (size_t k = 1; name[k] && seen < depth; k++)
        if (name[k] == '/') {
            end = k;
            seen++;
        }
    return end;
}

/* The scopes seen so far: (pointer, length) keys into the graph's names, in
 * an open-addressing table of their indices. */
struct scopes {
    const char **key;
    size_t *len;
    int32_t n;
    int32_t *slot;  /* -1: empty */
    size_t mask;
};

static uint64_t hash(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t k = 0; k < n; k++)
        h = (h ^ (unsigned char)p[k]) * 1099511628211ULL;
    return h;
}

/* The index of scope (p, n), added when new (add), else -1 when new. */
static int32_t scope_index(struct scopes *sc, const char *p, size_t n, bool add)
{
    size_t i = (size_t)hash(p, n) & sc->mask;
    for (;; i = (i + 1) & sc->mask) {
        int32_t m = sc->slot[i];
        if (m < 0)
            break;
        if (sc->len[m] == n && memcmp(sc->key[m], p, n) == 0)
            return m;
    }
    if (!add)
        return -1;
    sc->slot[i] = sc->n;
    sc->key[sc->n] = p;
    sc->len[sc->n] = n;
    return sc->n++;
}

/* The scope of a dotted parameter name as the HuggingFace front end names
 * its nodes' scopes ("transformer.h.0.attn.bias" at depth 2:
 * "/transformer/h.0"): split at '.', a numeric part joined to the one before
 * (a ModuleList's child), the last part (the parameter) dropped. Its length
 * in buf, 0 when none or too long. */
static size_t dotted_scope(const char *name, int depth, char *buf, size_t cap)
{
    const char *last = strrchr(name, '.');
    size_t len = 0;
    int seen = 0;
    for (const char *p = name; last && p < last && seen <= depth;) {
        const char *q = strchr(p, '.');
        size_t n = (size_t)(q - p);
        bool numeric = n > 0 && strspn(p, "0123456789") == n;
        if (!numeric && ++seen > depth)
            break;
        if (len + n + 2 > cap)
            return 0;
        buf[len] = numeric && len ? '.' : '/';
        len++;
        memcpy(buf + len, p, n);
        len += n;
        p = q + 1;
    }
    return len;
}

/* The module of each node (node_mod) and of each weight (weight_mod): the
 * module of its first reader; for a weight no node reads (a captured step's
 * parameters, docs/capture-format.md, whose nodes are "<module>/<op>#<k>";
 * a buffer the graph never reads, as GPT-2's attn.bias), the scope its
 * dotted name names ("fc.weight": "fc"; "transformer.h.0.attn.bias":
 * "/transformer/h.0") when a node has it; else -1. */
static bool assign(const struct dm_graph *g, int depth, struct scopes *sc, int32_t *node_mod,
                   int32_t *weight_mod)
{
    size_t cap = 2;
    while (cap < 2 * ((size_t)g->n_nodes + 1))
        cap *= 2;
    sc->slot = malloc(cap * sizeof *sc->slot);
    sc->key = malloc(((size_t)g->n_nodes + 1) * sizeof *sc->key);
    sc->len = malloc(((size_t)g->n_nodes + 1) * sizeof *sc->len);
    if (!sc->slot || !sc->key || !sc->len)
        return false;
    memset(sc->slot, 0xff, cap * sizeof *sc->slot);
    sc->mask = cap - 1;
    for (int32_t t = 0; t < g->n_tensors; t++)
        weight_mod[t] = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const char *name = g->nodes[i].name;
        node_mod[i] = scope_index(sc, name, scope_len(name, depth), true);
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int32_t x = g->nodes[i].in[k];
            if (x >= 0 && g->tensors[x].role == DM_ROLE_WEIGHT && weight_mod[x] < 0)
                weight_mod[x] = node_mod[i];
        }
    }
    for (int32_t t = 0; t < g->n_tensors; t++) {
        const char *name = g->tensors[t].name, *dot = strrchr(name, '.');
        if (g->tensors[t].role != DM_ROLE_WEIGHT || weight_mod[t] >= 0 || !dot)
            continue;
        weight_mod[t] = scope_index(sc, name, (size_t)(dot - name), false);
        char buf[512];
        size_t n = weight_mod[t] < 0 ? dotted_scope(name, depth, buf, sizeof buf) : 0;
        if (n)
            weight_mod[t] = scope_index(sc, buf, n, false);
    }
    return true;
}

/* The module of a buffer, or `none`. */
static int32_t buffer_module(const struct dm_graph *g, const struct dm_buffer *bf,
                             const int32_t *node_mod, const int32_t *weight_mod, int32_t none)
{
    if (bf->tensor >= 0 && g->tensors[bf->tensor].role == DM_ROLE_WEIGHT)
        return weight_mod[bf->tensor] >= 0 ? weight_mod[bf->tensor] : none;
    if (bf->node >= 0)
        return node_mod[bf->node];
    if (bf->tensor >= 0 && g->tensors[bf->tensor].role != DM_ROLE_INPUT &&
        g->tensors[bf->tensor].producer >= 0)
        return node_mod[g->tensors[bf->tensor].producer];
    return none;
}

/* The result's table from the sums per scope (none: the last), the scopes
 * with anything live, in order. */
static bool publish(const struct scopes *sc, const struct dnnmem_module_info *sum, int depth,
                    struct dm_arena *ar, struct dnnmem_result *r)
{
    size_t n = 0;
    for (int32_t m = 0; m <= sc->n; m++)
        n += sum[m].n_live > 0;
    r->modules = dm_arena_array(ar, n + 1, sizeof *r->modules);
    if (!r->modules)
        return false;
    for (int32_t m = 0; m <= sc->n; m++) {
        if (!sum[m].n_live)
            continue;
        struct dnnmem_module_info *mi = &r->modules[r->n_modules++];
        *mi = sum[m];
        mi->name = m == sc->n   ? "(no module)"
                 : sc->len[m] ? dm_arena_printf(ar, "%.*s", (int)sc->len[m], sc->key[m])
                              : "(top level)";
        if (!mi->name)
            return false;
    }
    r->module_depth = depth;
    return true;
}

bool dm_result_modules(const struct dm_graph *g, const struct dm_schedule *s, const bool *alive,
                       int depth, struct dm_arena *ar, struct dnnmem_result *r)
{
    struct scopes sc = {0};
    int32_t *node_mod = malloc(((size_t)g->n_nodes + 1) * sizeof *node_mod);
    int32_t *weight_mod = malloc(((size_t)g->n_tensors + 1) * sizeof *weight_mod);
    struct dnnmem_module_info *sum = NULL;
    bool ok = node_mod && weight_mod && assign(g, depth, &sc, node_mod, weight_mod) &&
              (sum = calloc((size_t)sc.n + 1, sizeof *sum));
    for (int32_t k = 0; ok && k < s->n_buf; k++) {
        if (!alive[k])
            continue;
        const struct dm_buffer *bf = &s->buf[k];
        struct dnnmem_module_info *mi = &sum[buffer_module(g, bf, node_mod, weight_mod, sc.n)];
        mi->category_bytes[bf->category] += bf->bytes;
        mi->live_bytes += bf->bytes;
        mi->n_live++;
    }
    ok = ok && publish(&sc, sum, depth, ar, r);
    free(sum);
    free(sc.slot);
    free(sc.key);
    free(sc.len);
    free(node_mod);
    free(weight_mod);
    return ok;
}
