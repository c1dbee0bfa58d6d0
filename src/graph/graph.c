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
    free(g->node_heap);
    free(g->index);
    dm_arena_free(&g->arena);
    memset(g, 0, sizeof *g);
}

uint32_t dm_hash_str(const char *s)
{
    return dm_hash_end(dm_hash_bytes(DM_HASH_INIT, s, strlen(s)));
}

int32_t dm_graph_find_h(const struct dm_graph *g, const char *name, uint32_t hash)
{
    if (!g->index_cap)
        return -1;
    uint32_t mask = g->index_cap - 1;
    for (uint32_t i = hash & mask;; i = (i + 1) & mask) {
        const struct dm_index_slot *e = &g->index[i];
        if (e->t < 0)
            return -1;
        if (e->hash == hash && strcmp(g->tensors[e->t].name, name) == 0)
            return e->t;
    }
}

int32_t dm_graph_find(const struct dm_graph *g, const char *name)
{
    return dm_graph_find_h(g, name, dm_hash_str(name));
}

/* The index grown to hold one more tensor; false when out of memory. The
 * indexed tensors go back in by id, the order they first went in, so that
 * of two tensors of one name dm_graph_find still finds the first. */
static bool index_grow(struct dm_graph *g)
{
    if ((uint64_t)(g->n_indexed + 1) * 2 <= g->index_cap)
        return true;
    uint32_t cap = g->index_cap ? g->index_cap * 2 : 64;
    if (cap > (1u << 30))
        return false;
    struct dm_index_slot *idx = malloc(cap * sizeof *idx);
    uint32_t *hash = malloc(((size_t)g->n_tensors + 1) * sizeof *hash);
    bool *in = calloc((size_t)g->n_tensors + 1, sizeof *in);
    if (!idx || !hash || !in) {
        free(idx);
        free(hash);
        free(in);
        return false;
    }
    for (uint32_t k = 0; k < g->index_cap; k++)
        if (g->index[k].t >= 0) {
            hash[g->index[k].t] = g->index[k].hash;
            in[g->index[k].t] = true;
        }
    for (uint32_t i = 0; i < cap; i++)
        idx[i].t = -1;
    for (int32_t t = 0; t < g->n_tensors; t++) {
        uint32_t i = hash[t] & (cap - 1);
        while (in[t] && idx[i].t >= 0)
            i = (i + 1) & (cap - 1);
        if (in[t])
            idx[i] = (struct dm_index_slot){t, hash[t]};
    }
    free(hash);
    free(in);
    free(g->index);
    g->index = idx;
    g->index_cap = cap;
    return true;
}

/* Tensor t (its name set) into the index; -2 when `unique` and a tensor
 * has its name already (not inserted). */
static int index_insert(struct dm_graph *g, int32_t t, uint32_t hash, bool unique)
{
    uint32_t mask = g->index_cap - 1, i = hash & mask;
    for (; g->index[i].t >= 0; i = (i + 1) & mask)
        if (unique && g->index[i].hash == hash &&
            strcmp(g->tensors[g->index[i].t].name, g->tensors[t].name) == 0)
            return -2;
    g->index[i] = (struct dm_index_slot){t, hash};
    g->n_indexed++;
    return 0;
}

/* A new tensor named `name` (not indexed); -1 when out of memory. */
static int32_t new_tensor(struct dm_graph *g, const char *name)
{
    if (!name)
        return -1;
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
    t->name = name;
    t->rank = -1;
    t->producer = -1;
    t->role = DM_ROLE_ACTIVATION;
    return id;
}

static int32_t add_tensor(struct dm_graph *g, const char *name, uint32_t hash, bool unique)
{
    int32_t id = index_grow(g) ? new_tensor(g, name) : -1;
    if (id < 0)
        return -1;
    if (index_insert(g, id, hash, unique) < 0)
        return -2;
    g->n_tensors++;
    return id;
}

int32_t dm_graph_add_tensor(struct dm_graph *g, const char *name)
{
    const char *copy = dm_arena_strdup(&g->arena, name);
    return add_tensor(g, copy, copy ? dm_hash_str(copy) : 0, false);
}

int32_t dm_graph_add_named(struct dm_graph *g, const char *name, uint32_t hash)
{
    return add_tensor(g, name, hash, true);
}

int32_t dm_graph_add_unnamed(struct dm_graph *g)
{
    int32_t id = new_tensor(g, "");
    if (id >= 0)
        g->n_tensors++;
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

/* Name b's scope ends (its '/' after the first character, at most
 * MAX_SCOPES) appended to *pos (*n of *cap used, grown by doubling), in one
 * pass that also measures b's common prefix with the name before it, a.
 * The prefix's length; -1 when out of memory. */
static int32_t scan_name(const char *a, const char *b, int32_t **pos, size_t *n, size_t *cap)
{
    if (*cap - *n < MAX_SCOPES) {
        size_t c = *cap ? 2 * *cap : 1024;
        int32_t *p = realloc(*pos, c * sizeof *p);
        if (!p)
            return -1;
        *pos = p;
        *cap = c;
    }
    int32_t k = 0, d = 0;
    for (; a[k] && a[k] == b[k]; k++)
        if (k > 0 && b[k] == '/' && d < MAX_SCOPES)
            (*pos)[*n + (size_t)d++] = k;
    int32_t cp = k;
    for (; b[k]; k++)
        if (k > 0 && b[k] == '/' && d < MAX_SCOPES)
            (*pos)[*n + (size_t)d++] = k;
    *n += (size_t)d;
    return cp;
}

/* A node whose name has no '/' at all ("Constant_215", "Shape_3593",
 * "Range_3599") is one the TorchScript exporter added itself (Unsqueeze's
 * axes at opset 13 and later, the index arithmetic of index_put's ScatterND)
 * and named without the scope it was added in. It is skipped: it does not
 * end the runs around it (randnet's attention block, where those constants
 * cut the run of its Sequential, which freed the Sequential's argument too
 * early: rand77 inference, -6.1%; rand56 inference, -8.8%). A top-level op
 * of the model's own forward is named "/Flatten" and still ends them. */
bool dm_scope_transparent(const struct dm_node *n)
{
    return n->name && !strchr(n->name, '/');
}

/* Scope d of node i (ending at pos[start[i] + d]) is that of the node
 * beside it (skipping transparent ones) when it ends inside their common
 * prefix (cp): the earlier scope ends match then, and the other name has the
 * same '/' there. nb[i]: the index of that node before i (-1: none). */
enum dnnmem_status dm_graph_find_scopes(struct dm_graph *g, struct dnnmem_error *err)
{
    int32_t nn = g->n_nodes;
    int32_t *cp = malloc(((size_t)nn + 1) * sizeof *cp); /* [i]: of names nb[i] and i */
    int32_t *nb = malloc(((size_t)nn + 1) * sizeof *nb);
    int32_t *start = dm_arena_array(&g->arena, (size_t)nn + 1, sizeof *start);
    int32_t *pos = NULL;
    size_t n_pos = 0, cap = 0;
    bool ok = cp && nb && start;
    if (ok)
        start[0] = 0;
    int32_t before = -1;
    for (int32_t i = 0; ok && i < nn; i++) {
        bool skip = dm_scope_transparent(&g->nodes[i]);
        nb[i] = before;
        cp[i] = skip ? 0 : scan_name(before >= 0 ? g->nodes[before].name : "", g->nodes[i].name,
                                     &pos, &n_pos, &cap);
        start[i + 1] = (int32_t)n_pos;
        ok = cp[i] >= 0;
        if (!skip)
            before = i;
    }
    int32_t *first = ok ? dm_arena_array(&g->arena, n_pos + 1, sizeof *first) : NULL;
    int32_t *last = ok ? dm_arena_array(&g->arena, n_pos + 1, sizeof *last) : NULL;
    if (!first || !last) {
        free(cp);
        free(nb);
        free(pos);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    for (int32_t i = 0; i < nn; i++)
        for (int32_t d = start[i]; d < start[i + 1]; d++)
            first[d] = nb[i] >= 0 && pos[d] < cp[i] ? first[start[nb[i]] + d - start[i]] : i;
    int32_t after = -1; /* the next node that is not transparent */
    for (int32_t i = nn - 1; i >= 0; i--) {
        for (int32_t d = start[i]; d < start[i + 1]; d++)
            last[d] = after >= 0 && pos[d] < cp[after] ? last[start[after] + d - start[i]] : i;
        if (!dm_scope_transparent(&g->nodes[i]))
            after = i;
    }
    free(cp);
    free(nb);
    free(pos);
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
    /* dangling inputs; count users per tensor; whether each node comes after
     * the producers of its inputs */
    size_t n_edges = 0;
    bool sorted = true;
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
                sorted = sorted && tt->producer < i;
            }
        }
    }
    if (sorted) /* in order already, as the front ends that build op by op make it */
        goto scopes;
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
scopes:
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
        bool moved = g->nodes != g->node_heap; /* the nodes are elsewhere (sorted) */
        struct dm_node *nodes = realloc(g->node_heap, (size_t)c * sizeof *nodes);
        if (!nodes)
            return NULL;
        if (moved && g->n_nodes)
            memcpy(nodes, g->nodes, (size_t)g->n_nodes * sizeof *nodes);
        g->nodes = g->node_heap = nodes;
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
    if (!n->in || !n->out)
        return NULL;
    if (n_in)
        memcpy(n->in, in, (size_t)n_in * sizeof *in);
    for (int k = 0; k < n_out; k++)
        n->out[k] = -1;
    g->n_nodes++;
    return n;
}

enum dnnmem_status dm_node_attr_add(struct dm_graph *g, struct dm_node *n, struct dm_attr **out)
{
    if (n->n_attr >= DM_NODE_MAX_ATTRS)
        return DNNMEM_E_INTERNAL;
    if (n->n_attr >= n->cap_attr) {
        int cap = n->cap_attr ? 2 * n->cap_attr : 2;
        cap = cap < DM_NODE_MAX_ATTRS ? cap : DM_NODE_MAX_ATTRS;
        struct dm_attr *a = dm_arena_array(&g->arena, (size_t)cap, sizeof *a);
        if (!a)
            return DNNMEM_E_NOMEM;
        if (n->n_attr)
            memcpy(a, n->attrs, (size_t)n->n_attr * sizeof *a);
        n->attrs = a;
        n->cap_attr = cap;
    }
    *out = &n->attrs[n->n_attr++];
    return DNNMEM_OK;
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
    DM_TRY(dm_node_attr_add(g, &g->nodes[g->n_nodes - 1], out));
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
