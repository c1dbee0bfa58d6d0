/* graph.c: the graph IR: tensors by name, symbols, topological order. */
#include "dnnmem-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dm_graph_init(struct dm_graph *g)
{
    memset(g, 0, sizeof *g);
    dm_arena_init(&g->arena);
    g->path = "";
    g->format = "";
    g->producer = "";
}

void dm_graph_free(struct dm_graph *g)
{
    if (!g)
        return;
    free(g->tensors);
    free(g->index);
    dm_arena_free(&g->arena);
    memset(g, 0, sizeof *g);
}

uint32_t dm_hash_str(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    /* then fmix32, so that the low bits (the table index) depend on every
     * character: FNV-1a's low bits do not see the high bits of earlier
     * characters, and names differing in one digit cluster */
    return dm_mix32(h);
}

int32_t dm_graph_find(const struct dm_graph *g, const char *name)
{
    if (!g->index_cap)
        return -1;
    uint32_t mask = g->index_cap - 1;
    for (uint32_t i = dm_hash_str(name) & mask;; i = (i + 1) & mask) {
        int32_t t = g->index[i];
        if (t < 0)
            return -1;
        if (strcmp(g->tensors[t].name, name) == 0)
            return t;
    }
}

static bool index_insert(struct dm_graph *g, int32_t t)
{
    if ((uint64_t)(g->n_tensors + 1) * 2 > g->index_cap) {
        uint32_t cap = g->index_cap ? g->index_cap * 2 : 64;
        if (cap > (1u << 30))
            return false;
        int32_t *idx = malloc(cap * sizeof *idx);
        if (!idx)
            return false;
        for (uint32_t i = 0; i < cap; i++)
            idx[i] = -1;
        free(g->index);
        g->index = idx;
        g->index_cap = cap;
        for (int32_t k = 0; k < g->n_tensors; k++)
            if (k != t && !index_insert(g, k))
                return false;
    }
    uint32_t mask = g->index_cap - 1;
    uint32_t i = dm_hash_str(g->tensors[t].name) & mask;
    while (g->index[i] >= 0)
        i = (i + 1) & mask;
    g->index[i] = t;
    return true;
}

int32_t dm_graph_add_tensor(struct dm_graph *g, const char *name)
{
    if (g->n_tensors == g->cap_tensors) {
        if (g->cap_tensors > INT32_MAX / 4)
            return -1;
        int32_t cap = g->cap_tensors ? g->cap_tensors * 2 : 256;
        struct dm_tensor *t = realloc(g->tensors, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        g->tensors = t;
        g->cap_tensors = cap;
    }
    int32_t id = g->n_tensors;
    struct dm_tensor *t = &g->tensors[id];
    memset(t, 0, sizeof *t);
    t->name = dm_arena_strdup(&g->arena, name);
    if (!t->name)
        return -1;
    t->rank = -1;
    t->producer = -1;
    t->role = DM_ROLE_ACTIVATION;
    g->n_tensors++;
    if (!index_insert(g, id)) {
        g->n_tensors--;
        return -1;
    }
    return id;
}

int32_t dm_graph_symbol(struct dm_graph *g, const char *name)
{
    for (int32_t i = 0; i < g->n_symbols; i++)
        if (strcmp(g->symbols[i], name) == 0)
            return i;
    if ((g->n_symbols & (g->n_symbols - 1)) == 0) { /* grow at powers of two */
        size_t cap = g->n_symbols ? (size_t)g->n_symbols * 2 : 4;
        const char **s = dm_arena_array(&g->arena, cap, sizeof *s);
        if (!s)
            return -1;
        if (g->n_symbols)
            memcpy(s, g->symbols, (size_t)g->n_symbols * sizeof *s);
        g->symbols = s;
    }
    const char *copy = dm_arena_strdup(&g->arena, name);
    if (!copy)
        return -1;
    g->symbols[g->n_symbols] = copy;
    return g->n_symbols++;
}

const struct dm_attr *dm_node_attr(const struct dm_node *n, const char *name)
{
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

static void heap_push(int32_t *h, int32_t *n, int32_t v)
{
    int32_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int32_t heap_pop(int32_t *h, int32_t *n)
{
    int32_t top = h[0], v = h[--(*n)], i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* The module scopes of node names, as torch.onnx writes them
 * ("/layer1/layer1.0/conv1/Conv": every '/' after the first character ends
 * one, up to MAX_SCOPES deep) and the HF front end copies: a module's nodes
 * are consecutive, so each scope's run is where the prefix repeats. */
#define MAX_SCOPES 16

static int scopes(const char *name, int len[MAX_SCOPES])
{
    int n = 0;
    for (int k = 1; name[k] && n < MAX_SCOPES; k++)
        if (name[k] == '/')
            len[n++] = k;
    return n;
}

static bool same_scope(const char *a, const char *b, int len)
{
    return strncmp(a, b, (size_t)len) == 0 && b[len] == '/';
}

enum dnnmem_status dm_graph_find_scopes(struct dm_graph *g, struct dnnmem_error *err)
{
    int32_t nn = g->n_nodes;
    int(*len)[MAX_SCOPES] = malloc(((size_t)nn + 1) * sizeof *len);
    int32_t *start = dm_arena_array(&g->arena, (size_t)nn + 1, sizeof *start);
    if (!len || !start) {
        free(len);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    start[0] = 0;
    for (int32_t i = 0; i < nn; i++)
        start[i + 1] = start[i] + scopes(g->nodes[i].name, len[i]);
    int32_t *first = dm_arena_array(&g->arena, (size_t)start[nn] + 1, sizeof *first);
    int32_t *last = dm_arena_array(&g->arena, (size_t)start[nn] + 1, sizeof *last);
    if (!first || !last) {
        free(len);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    for (int32_t i = 0; i < nn; i++)
        for (int32_t d = 0; d < start[i + 1] - start[i]; d++)
            first[start[i] + d] = i > 0 && d < start[i] - start[i - 1] && len[i - 1][d] == len[i][d] &&
                                          same_scope(g->nodes[i].name, g->nodes[i - 1].name, len[i][d])
                                      ? first[start[i - 1] + d]
                                      : i;
    for (int32_t i = nn - 1; i >= 0; i--)
        for (int32_t d = 0; d < start[i + 1] - start[i]; d++)
            last[start[i] + d] = i + 1 < nn && d < start[i + 2] - start[i + 1] &&
                                         len[i + 1][d] == len[i][d] &&
                                         same_scope(g->nodes[i].name, g->nodes[i + 1].name, len[i][d])
                                     ? last[start[i + 1] + d]
                                     : i;
    free(len);
    g->scope_start = start;
    g->scope_first = first;
    g->scope_last = last;
    g->n_scoped = nn;
    return DNNMEM_OK;
}

/* Kahn's algorithm, taking ready nodes in file order so an already sorted
 * graph keeps its order. */
enum dnnmem_status dm_graph_finish(struct dm_graph *g, struct dnnmem_error *err)
{
    enum dnnmem_status s = DNNMEM_OK;
    int32_t nn = g->n_nodes, nt = g->n_tensors;
    int32_t *pending = calloc((size_t)nn + 1, sizeof *pending);
    int32_t *order = malloc(((size_t)nn + 1) * sizeof *order);
    int32_t *users_start = calloc((size_t)nt + 1, sizeof *users_start);
    int32_t *users = NULL;
    int32_t *ready = malloc(((size_t)nn + 1) * sizeof *ready);
    if (!pending || !order || !users_start || !ready) {
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory sorting the graph", g->path);
        goto out;
    }
    /* producers, and one producer per tensor */
    for (int32_t i = 0; i < nn; i++) {
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_out; k++) {
            int32_t t = n->out[k];
            if (t < 0)
                continue;
            struct dm_tensor *tt = &g->tensors[t];
            if (tt->producer >= 0 || tt->role == DM_ROLE_INPUT || tt->role == DM_ROLE_WEIGHT) {
                s = dm_fail(err, DNNMEM_E_MODEL,
                            "%s: node '%s' writes '%s', which %s already defines", g->path,
                            n->name, tt->name,
                            tt->producer >= 0 ? "another node" : "the graph's inputs or initializers");
                goto out;
            }
            tt->producer = i;
        }
    }
    /* dangling inputs; count users per tensor */
    size_t n_edges = 0;
    for (int32_t i = 0; i < nn; i++) {
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int32_t t = n->in[k];
            if (t < 0)
                continue;
            const struct dm_tensor *tt = &g->tensors[t];
            if (tt->producer < 0 && tt->role != DM_ROLE_INPUT && tt->role != DM_ROLE_WEIGHT) {
                s = dm_fail(err, DNNMEM_E_MODEL,
                            "%s: node '%s' reads '%s', which no node, input or initializer defines",
                            g->path, n->name, tt->name);
                goto out;
            }
            if (tt->producer >= 0) {
                pending[i]++;
                users_start[t]++;
                n_edges++;
            }
        }
    }
    users = malloc((n_edges + 1) * sizeof *users);
    if (!users) {
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory sorting the graph", g->path);
        goto out;
    }
    /* prefix sums -> users lists */
    int32_t acc = 0;
    for (int32_t t = 0; t < nt; t++) {
        int32_t c = users_start[t];
        users_start[t] = acc;
        acc += c;
    }
    users_start[nt] = acc;
    {
        int32_t *fill = calloc((size_t)nt + 1, sizeof *fill);
        if (!fill) {
            s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory sorting the graph", g->path);
            goto out;
        }
        for (int32_t i = 0; i < nn; i++) {
            const struct dm_node *n = &g->nodes[i];
            for (int k = 0; k < n->n_in; k++) {
                int32_t t = n->in[k];
                if (t >= 0 && g->tensors[t].producer >= 0)
                    users[users_start[t] + fill[t]++] = i;
            }
        }
        free(fill);
    }
    /* Ready nodes leave a min-heap by file index: a graph already in
     * topological order keeps its order exactly (it is the execution order the
     * exporter recorded), others take the nearest valid one. */
    int32_t n_ready = 0, n_done = 0;
    for (int32_t i = 0; i < nn; i++)
        if (pending[i] == 0)
            heap_push(ready, &n_ready, i);
    while (n_ready > 0) {
        int32_t i = heap_pop(ready, &n_ready);
        order[n_done++] = i;
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_out; k++) {
            int32_t t = n->out[k];
            if (t < 0)
                continue;
            for (int32_t u = users_start[t]; u < users_start[t + 1]; u++) {
                int32_t j = users[u];
                if (--pending[j] == 0)
                    heap_push(ready, &n_ready, j);
            }
        }
    }
    if (n_done < nn) {
        const char *name = "?";
        for (int32_t i = 0; i < nn; i++)
            if (pending[i] > 0) {
                name = g->nodes[i].name;
                break;
            }
        s = dm_fail(err, DNNMEM_E_MODEL, "%s: the graph has a cycle through node '%s'", g->path,
                    name);
        goto out;
    }
    {
        bool sorted = true;
        for (int32_t i = 0; i < nn; i++)
            if (order[i] != i)
                sorted = false;
        if (!sorted) {
            struct dm_node *nodes = dm_arena_array(&g->arena, (size_t)nn, sizeof *nodes);
            if (!nodes) {
                s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory sorting the graph", g->path);
                goto out;
            }
            for (int32_t i = 0; i < nn; i++)
                nodes[i] = g->nodes[order[i]];
            g->nodes = nodes;
            for (int32_t i = 0; i < nn; i++)
                for (int k = 0; k < g->nodes[i].n_out; k++)
                    if (g->nodes[i].out[k] >= 0)
                        g->tensors[g->nodes[i].out[k]].producer = i;
        }
    }
    s = dm_graph_find_scopes(g, err);
out:
    free(pending);
    free(order);
    free(users_start);
    free(users);
    free(ready);
    return s;
}

/* ---- building a graph op by op -------------------------------------------------- */

struct dm_node *dm_graph_add_node(struct dm_graph *g, int32_t *cap, enum dm_op op,
                                  const char *name, int n_in, const int32_t *in, int n_out)
{
    if (!name || (g->max_nodes > 0 && g->n_nodes >= g->max_nodes))
        return NULL;
    if (g->n_nodes == *cap) {
        if (*cap > INT32_MAX / 4)
            return NULL;
        int32_t c = *cap ? *cap * 2 : 1024;
        struct dm_node *nodes = dm_arena_array(&g->arena, (size_t)c, sizeof *nodes);
        if (!nodes)
            return NULL;
        if (g->n_nodes)
            memcpy(nodes, g->nodes, (size_t)g->n_nodes * sizeof *nodes);
        g->nodes = nodes;
        *cap = c;
    }
    struct dm_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->name = name;
    n->op = op;
    n->domain = "";
    n->n_in = n_in;
    n->n_out = n_out;
    n->in = dm_arena_array(&g->arena, (size_t)n_in + 1, sizeof *n->in);
    n->out = dm_arena_array(&g->arena, (size_t)n_out + 1, sizeof *n->out);
    n->attrs = dm_arena_array(&g->arena, DM_NODE_MAX_ATTRS, sizeof *n->attrs);
    if (!n->in || !n->out || !n->attrs)
        return NULL;
    if (n_in)
        memcpy(n->in, in, (size_t)n_in * sizeof *in);
    for (int k = 0; k < n_out; k++)
        n->out[k] = -1;
    g->n_nodes++;
    return n;
}

enum dnnmem_status dm_graph_add_fail(const struct dm_graph *g, char *msg, size_t cap)
{
    if (g->max_nodes > 0 && g->n_nodes >= g->max_nodes) {
        snprintf(msg, cap, "the graph grows beyond the budget of %lld nodes (--max-nodes)",
                 (long long)g->max_nodes);
        return DNNMEM_E_LIMIT;
    }
    snprintf(msg, cap, "out of memory");
    return DNNMEM_E_NOMEM;
}

enum dnnmem_status dm_graph_attr(struct dm_graph *g, const char *name, enum dm_attr_kind kind,
                                 struct dm_attr **out)
{
    struct dm_node *n = &g->nodes[g->n_nodes - 1];
    if (n->n_attr >= DM_NODE_MAX_ATTRS)
        return DNNMEM_E_INTERNAL;
    *out = &n->attrs[n->n_attr++];
    (*out)->name = name;
    (*out)->kind = kind;
    return DNNMEM_OK;
}

enum dnnmem_status dm_graph_attr_i(struct dm_graph *g, const char *name, int64_t v)
{
    struct dm_attr *a;
    enum dnnmem_status s = dm_graph_attr(g, name, DM_ATTR_INT, &a);
    if (s == DNNMEM_OK)
        a->i = v;
    return s;
}

enum dnnmem_status dm_graph_attr_f(struct dm_graph *g, const char *name, double v)
{
    struct dm_attr *a;
    enum dnnmem_status s = dm_graph_attr(g, name, DM_ATTR_FLOAT, &a);
    if (s == DNNMEM_OK)
        a->f = v;
    return s;
}

enum dnnmem_status dm_graph_attr_s(struct dm_graph *g, const char *name, const char *v)
{
    struct dm_attr *a;
    enum dnnmem_status s = dm_graph_attr(g, name, DM_ATTR_STRING, &a);
    if (s == DNNMEM_OK)
        a->s = v;
    return s;
}

enum dnnmem_status dm_graph_attr_ints(struct dm_graph *g, const char *name, int n,
                                      const int64_t *v)
{
    struct dm_attr *a;
    enum dnnmem_status s = dm_graph_attr(g, name, DM_ATTR_INTS, &a);
    if (s != DNNMEM_OK)
        return s;
    int64_t *p = dm_arena_array(&g->arena, (size_t)n + 1, sizeof *p);
    if (!p)
        return DNNMEM_E_NOMEM;
    if (n)
        memcpy(p, v, (size_t)n * sizeof *p);
    a->ints = p;
    a->n = n;
    return DNNMEM_OK;
}

enum dnnmem_status dm_graph_attr_floats(struct dm_graph *g, const char *name, int n,
                                        const double *v)
{
    struct dm_attr *a;
    enum dnnmem_status s = dm_graph_attr(g, name, DM_ATTR_FLOATS, &a);
    if (s != DNNMEM_OK)
        return s;
    double *p = dm_arena_array(&g->arena, (size_t)n + 1, sizeof *p);
    if (!p)
        return DNNMEM_E_NOMEM;
    if (n)
        memcpy(p, v, (size_t)n * sizeof *p);
    a->floats = p;
    a->n = n;
    return DNNMEM_OK;
}

/* A node's inputs, outputs and attributes, as the stages after the graph
 * read them (shape functions, lifting, the schedule). */
bool dm_has_in(const struct dm_node *n, int i) { return i >= 0 && i < n->n_in && n->in[i] >= 0; }

bool dm_has_out(const struct dm_node *n, int i)
{
    return i >= 0 && i < n->n_out && n->out[i] >= 0;
}

int64_t dm_attr_int(const struct dm_node *n, const char *name, int64_t dflt)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    return a && a->kind == DM_ATTR_INT ? a->i : a && a->kind == DM_ATTR_FLOAT ? (int64_t)a->f : dflt;
}

double dm_attr_float(const struct dm_node *n, const char *name, double dflt)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    return a && a->kind == DM_ATTR_FLOAT ? a->f : a && a->kind == DM_ATTR_INT ? (double)a->i : dflt;
}

const char *dm_attr_str(const struct dm_node *n, const char *name, const char *dflt)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    return a && a->kind == DM_ATTR_STRING ? a->s : dflt;
}

const int64_t *dm_attr_ints(const struct dm_node *n, const char *name, int64_t *count)
{
    const struct dm_attr *a = dm_node_attr(n, name);
    if (!a || a->kind != DM_ATTR_INTS) {
        *count = -1;
        return NULL;
    }
    *count = a->n;
    return a->ints;
}
