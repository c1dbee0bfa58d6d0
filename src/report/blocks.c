/*
 * blocks.c: a model's repeated blocks, found from its module scopes, for
 * advice on per-block activation checkpointing (src/report/advise.c).
 *
 * Node names carry the module path that made them ("/model/layers.3/mlp/
 * down_proj/MatMul", "/layer2/layer2.1/conv1/Conv"). A scope at depth d is
 * the first d components of a name with more than d. A scope whose last
 * component holds a number ("layers.3", "layer2.1", "h.7", "block3") is one
 * of a numbered family; the family's shape is the scope with each run of
 * digits replaced by '*' ("/model/layers.*"; torchvision's ResNet blocks:
 * "/layer*" then "/layer*.*" as one path), which is also a --checkpoint
 * glob (fnmatch on the depth-d prefix, checkpoint.c) making each member one
 * segment. A family repeats when at least two of its members hold the same
 * structure: the same ops under the same relative names, numbers ignored.
 * HuggingFace's gradient_checkpointing_enable checkpoints each decoder layer
 * the same way (4.51's decoder forward calls _gradient_checkpointing_func per
 * layer of self.layers), so for an HF decoder the family found is its layer
 * list.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 8, MAX_SHAPES = 32, MIN_NODES_PER_BLOCK = 4 };

/* One numbered family at one depth. */
struct family {
    char shape[DM_BLOCK_SPEC_LEN];
    int32_t runs;     /* members seen */
    int64_t nodes;
    uint32_t *sigs;   /* each member's structure, malloc'd */
    int32_t cap;
    bool repeats;
    const char *member; /* the open member's scope (a node name's first member_len bytes) */
    size_t member_len;
    uint32_t sig;       /* its structure so far */
};

/* The length of the first d components of name, when it has more; else 0. */
static size_t scope_len(const char *name, int d)
{
    if (name[0] != '/')
        return 0;
    int seen = 0;
    for (size_t k = 1; name[k]; k++)
        if (name[k] == '/' && ++seen == d)
            return name[k + 1] ? k : 0;
    return 0;
}

/* Whether the last component of name[0, len) holds a digit. */
static bool numbered(const char *name, size_t len)
{
    for (size_t k = len; k-- > 0 && name[k] != '/';)
        if (name[k] >= '0' && name[k] <= '9')
            return true;
    return false;
}

/* s with each run of digits as one '*' into out (n bytes); false if too long. */
static bool collapse(const char *s, size_t len, char *out, size_t n)
{
    size_t o = 0;
    for (size_t k = 0; k < len; k++) {
        bool digit = s[k] >= '0' && s[k] <= '9';
        if (digit && k > 0 && s[k - 1] >= '0' && s[k - 1] <= '9')
            continue;
        if (o + 2 > n)
            return false;
        out[o++] = digit ? '*' : s[k];
    }
    out[o] = '\0';
    return true;
}

/* FNV-1a of a node's op and its name below the scope, digits collapsed. */
static uint32_t node_sig(uint32_t h, const struct dm_node *nd, size_t len)
{
    uint32_t op = (uint32_t)nd->op;
    for (int k = 0; k < 4; k++)
        h = (h ^ ((op >> (8 * k)) & 0xff)) * 16777619u;
    bool prev_digit = false;
    for (const char *p = nd->name + len; *p; p++) {
        bool digit = *p >= '0' && *p <= '9';
        if (!(digit && prev_digit))
            h = (h ^ (uint8_t)(digit ? '*' : *p)) * 16777619u;
        prev_digit = digit;
    }
    return h;
}

static struct family *family_of(struct family *f, int *n, const char *shape)
{
    for (int k = 0; k < *n; k++)
        if (strcmp(f[k].shape, shape) == 0)
            return &f[k];
    if (*n == MAX_SHAPES)
        return NULL;
    struct family *x = &f[(*n)++];
    memset(x, 0, sizeof *x);
    strcpy(x->shape, shape);
    return x;
}

/* One run ended: its signature recorded (false: out of memory). */
static bool end_run(struct family *x, uint32_t sig)
{
    for (int32_t k = 0; k < x->runs && !x->repeats; k++)
        x->repeats = x->sigs[k] == sig;
    if (x->runs == x->cap) {
        int32_t cap = x->cap ? 2 * x->cap : 16;
        uint32_t *s = realloc(x->sigs, (size_t)cap * sizeof *s);
        if (!s)
            return false;
        x->sigs = s;
        x->cap = cap;
    }
    x->sigs[x->runs++] = sig;
    return true;
}

/* The families at depth d (*n of them); false: out of memory. A member
 * stays open while nodes outside it (host-side constants, unscoped nodes)
 * come between its own, and ends when another member of its family starts. */
static bool families_at(const struct dm_graph *g, int d, struct family *f, int *n)
{
    *n = 0;
    struct family *prev = NULL; /* the previous node's family, and its scope */
    const char *prev_name = NULL;
    size_t prev_len = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *nd = &g->nodes[i];
        size_t len = scope_len(nd->name, d);
        if (!len || !numbered(nd->name, len))
            continue;
        struct family *x = prev;
        if (!prev || len != prev_len || strncmp(nd->name, prev_name, len) != 0) {
            char shape[DM_BLOCK_SPEC_LEN];
            if (!collapse(nd->name, len, shape, sizeof shape) || !(x = family_of(f, n, shape)))
                continue;
        }
        prev = x;
        prev_name = nd->name;
        prev_len = len;
        bool same = x->member && len == x->member_len && strncmp(nd->name, x->member, len) == 0;
        if (!same) {
            if (x->member && !end_run(x, x->sig))
                return false;
            x->member = nd->name;
            x->member_len = len;
            x->sig = 2166136261u;
        }
        x->sig = node_sig(x->sig, nd, len);
        x->nodes++;
    }
    for (int k = 0; k < *n; k++)
        if (f[k].member && !end_run(&f[k], f[k].sig))
            return false;
    return true;
}

size_t dm_repeated_blocks(const struct dm_graph *g, struct dm_block_scope *out, size_t max)
{
    size_t n_out = 0;
    struct family *f = malloc(MAX_SHAPES * sizeof *f);
    if (!f)
        return 0;
    for (int d = 1; d <= MAX_DEPTH && n_out < max; d++) {
        int n = 0;
        bool ok = families_at(g, d, f, &n);
        struct dm_block_scope bs = {.depth = d};
        for (int k = 0; ok && k < n; k++) {
            const struct family *x = &f[k];
            if (!x->repeats || x->runs < 2 || x->nodes < (int64_t)x->runs * MIN_NODES_PER_BLOCK ||
                bs.n_specs == DM_BLOCK_MAX_SPECS)
                continue;
            strcpy(bs.spec[bs.n_specs++], x->shape);
            bs.blocks += x->runs;
            bs.nodes += x->nodes;
        }
        for (int k = 0; k < n; k++)
            free(f[k].sigs);
        if (bs.n_specs)
            out[n_out++] = bs;
    }
    free(f);
    /* the families covering the most nodes first */
    for (size_t a = 1; a < n_out; a++)
        for (size_t b = a; b > 0 && out[b].nodes > out[b - 1].nodes; b--) {
            struct dm_block_scope t = out[b];
            out[b] = out[b - 1];
            out[b - 1] = t;
        }
    return n_out;
}
