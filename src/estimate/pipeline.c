/*
 * pipeline.c: one pipeline stage's graph (--pp N, docs/parallel.md): the
 * nodes this rank's stage runs, as a view of the whole graph that the
 * schedule builder replays like any model.
 *
 * The rules:
 *
 * P1 The split: the model's repeated blocks (src/report/blocks.c, the
 *    deepest family covering the most nodes) in order, L of them, stage p
 *    taking blocks [p L / N, (p + 1) L / N), as Megatron's
 *    get_num_layers_to_build divides num_layers evenly (it asserts that N
 *    divides L; torch.distributed.pipelining's split points are the user's,
 *    the measured runs split evenly; --pp-split gives each stage's count,
 *    as Megatron's decoder_first/last_pipeline_num_layers make the ends
 *    lighter); a node outside the blocks goes with
 *    the next block's node (the embedding with the first stage), and what
 *    follows the last block (final norm, head) with the last stage, as
 *    Megatron's pre_process / post_process place them. The stages are
 *    runs of consecutive nodes.
 * P2 A tensor a stage reads that an earlier stage made is received: a graph
 *    input of the stage, which requires grad (the stage's input grads are
 *    sent back). torch.distributed.pipelining allocates one receive
 *    buffer per micro-batch for each (stage.py, _create_act_recv_info,
 *    _make_tensor_from_meta), kept for the run.
 * P3 What a later stage reads of this one is the stage's output; the
 *    last stage's outputs are the model's. A stage before the last starts
 *    its backward from the received grads of its outputs, one receive
 *    buffer per micro-batch again (_create_grad_recv_info).
 * P4 The parameters of a stage are the weights its nodes read; nothing
 *    else of the model is on the rank.
 */
#include "estimate.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* Whether node name falls in one of the blocks' globs: the matching prefix's
 * length, else 0 (the prefix of as many components as the glob has). */
static size_t block_key(const struct dm_block_scope *bs, const char *name)
{
    for (int k = 0; k < bs->n_specs; k++) {
        int depth = 0;
        for (const char *c = bs->spec[k]; *c; c++)
            depth += *c == '/';
        size_t len = 0;
        int seen = 0;
        for (size_t j = 1; name[0] == '/' && name[j] && !len; j++)
            if (name[j] == '/' && ++seen == depth)
                len = j;
        char key[DM_BLOCK_SPEC_LEN * 2];
        if (!len || len >= sizeof key)
            continue;
        memcpy(key, name, len);
        key[len] = '\0';
        if (fnmatch(bs->spec[k], key, 0) == 0)
            return len;
    }
    return 0;
}

/* --pp-split: the first block of each stage (n + 1 entries, the last L),
 * when the counts are n_stages and sum to L. */
static bool split_bounds(const char *spec, int n_stages, int32_t L, int32_t *start)
{
    int k = 0;
    int64_t sum = 0;
    start[0] = 0;
    for (const char *c = spec; *c; k++) {
        char *end;
        long v = strtol(c, &end, 10);
        if (k >= n_stages || v < 1 || v > L)
            return false;
        sum += v;
        start[k + 1] = (int32_t)(sum <= L ? sum : L);
        c = *end == ',' ? end + 1 : end;
    }
    return k == n_stages && sum == L;
}

/* P1: each node's stage; false when the graph has no blocks to split. */
static bool stages(const struct dm_graph *g, int n_stages, const int32_t *start, int32_t *stage,
                   int32_t *n_blocks)
{
    struct dm_block_scope bs;
    if (dm_repeated_blocks(g, &bs, 1) == 0)
        return false;
    const char *prev = NULL;
    size_t prev_len = 0;
    int32_t L = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) { /* block index, -1 outside */
        size_t len = block_key(&bs, g->nodes[i].name);
        if (!len) {
            stage[i] = -1;
            continue;
        }
        if (!prev || prev_len != len || strncmp(prev, g->nodes[i].name, len) != 0)
            L++;
        stage[i] = L - 1;
        prev = g->nodes[i].name;
        prev_len = len;
    }
    *n_blocks = L;
    if (L < n_stages || (!start && L % n_stages != 0))
        return true;
    int32_t next = n_stages - 1; /* after the last block: the last stage */
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        if (stage[i] >= 0 && !start) {
            next = (int32_t)((int64_t)stage[i] * n_stages / L);
        } else if (stage[i] >= 0) {
            int32_t q = 0;
            while (q + 1 < n_stages && stage[i] >= start[q + 1])
                q++;
            next = q;
        }
        stage[i] = next;
    }
    return true;
}

enum dnnmem_status dm_est_stage(struct dm_est *e, struct dnnmem_error *err)
{
    const struct dm_graph *g = e->g;
    struct dm_arena *a = &e->arena;
    int N = e->run.par.pp, p = e->run.par.stage;
    int32_t *stage = dm_arena_array(a, (size_t)g->n_nodes + 1, sizeof *stage);
    if (!stage)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    int32_t L = 0;
    const char *spec = e->run.par.split;
    if (!stages(g, N, NULL, stage, &L) || L < N || (!spec && L % N != 0))
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --pp %d: the model's repeated blocks (%d found) do not split evenly "
                       "into %d stages (modelled: N dividing the blocks, as Megatron's "
                       "num_layers, or --pp-split)", g->path, N, (int)L, N);
    if (spec) {
        int32_t *start = dm_arena_array(a, (size_t)N + 1, sizeof *start);
        if (!start)
            return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
        if (!split_bounds(spec, N, L, start))
            return dm_fail(err, DNNMEM_E_USAGE,
                           "%s: --pp-split %s: expected %d counts of at least 1 summing to the "
                           "model's %d repeated blocks", g->path, spec, N, (int)L);
        stages(g, N, start, stage, &L);
    }
    int32_t first = -1, last = -1;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (stage[i] == p) {
            if (first < 0)
                first = i;
            last = i;
        }
    struct dm_graph *s = &e->stage_g;
    *s = *g; /* the view shares the model's strings and node arrays */
    memset(&s->arena, 0, sizeof s->arena);
    s->nodes = g->nodes + first;
    s->n_nodes = last - first + 1;
    if (g->scope_start && g->n_scoped == g->n_nodes) { /* the scopes' node indices, local */
        int32_t n_sc = g->scope_start[g->n_nodes];
        int32_t *f = dm_arena_array(a, (size_t)n_sc + 1, sizeof *f);
        int32_t *l = dm_arena_array(a, (size_t)n_sc + 1, sizeof *l);
        if (!f || !l)
            return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
        for (int32_t d = 0; d < n_sc; d++) {
            f[d] = g->scope_first[d] - first;
            l[d] = g->scope_last[d] - first < s->n_nodes ? g->scope_last[d] - first : s->n_nodes - 1;
        }
        s->scope_start = g->scope_start + first;
        s->scope_first = f;
        s->scope_last = l;
        s->n_scoped = s->n_nodes;
    } else {
        s->n_scoped = 0;
    }
    s->tensors = dm_arena_array(a, (size_t)g->n_tensors + 1, sizeof *s->tensors);
    s->inputs = dm_arena_array(a, (size_t)g->n_tensors + 1, sizeof *s->inputs);
    s->outputs = dm_arena_array(a, (size_t)g->n_tensors + 1, sizeof *s->outputs);
    bool *read = dm_arena_array(a, (size_t)g->n_tensors + 1, sizeof *read);
    bool *later = dm_arena_array(a, (size_t)g->n_tensors + 1, sizeof *later);
    if (!s->tensors || !s->inputs || !s->outputs || !read || !later)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    memcpy(s->tensors, g->tensors, (size_t)g->n_tensors * sizeof *s->tensors);
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int32_t x = g->nodes[i].in[k];
            if (x < 0)
                continue;
            if (stage[i] == p)
                read[x] = true;
            else if (stage[i] > p)
                later[x] = true;
        }
    s->n_inputs = s->n_outputs = 0;
    for (int32_t x = 0; x < g->n_tensors; x++) {
        struct dm_tensor *tt = &s->tensors[x];
        int32_t pr = g->tensors[x].producer;
        bool mine = pr >= first && pr <= last;
        tt->producer = mine ? pr - first : -1;
        if (tt->held_until > 0) {
            int32_t h = tt->held_until - 1 - first;
            tt->held_until = h >= 0 && h < s->n_nodes ? h + 1 : 0;
        }
        tt->is_output = false;
        if (pr >= 0 && !mine && read[x]) { /* P2: received */
            tt->role = DM_ROLE_INPUT;
            tt->grad_leaf = dm_dtype_is_float(e->t[x].dtype) && !e->t[x].is_const;
            s->inputs[s->n_inputs++] = x;
        } else if ((tt->role == DM_ROLE_INPUT || tt->role == DM_ROLE_WEIGHT) && !read[x]) {
            tt->role = DM_ROLE_ACTIVATION; /* P4: another stage's, never made here */
        } else if (tt->role == DM_ROLE_INPUT) {
            s->inputs[s->n_inputs++] = x;
        }
        if (mine && p < N - 1 && later[x] && !e->t[x].is_const) {
            tt->is_output = true; /* P3 */
            s->outputs[s->n_outputs++] = x;
        }
    }
    for (int32_t k = 0; p == N - 1 && k < g->n_outputs; k++) { /* in the model's order */
        int32_t x = g->outputs[k], pr = g->tensors[x].producer;
        if (pr >= first && pr <= last) {
            s->tensors[x].is_output = true;
            s->outputs[s->n_outputs++] = x;
        }
    }
    if (s->n_outputs == 0)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --pp %d: stage %d makes nothing a later stage reads", g->path, N, p);
    bool *recv = dm_arena_array(a, (size_t)g->n_tensors + 1, sizeof *recv);
    if (!recv)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    for (int32_t k = 0; k < s->n_inputs; k++) /* a dims-derived constant: made here too */
        recv[s->inputs[k]] = g->tensors[s->inputs[k]].role != DM_ROLE_INPUT &&
                             !e->t[s->inputs[k]].is_const;
    e->run.par.recv = recv;
    if (e->run.par.tp_role) /* the plan's roles, per node of the whole graph */
        e->run.par.tp_role += first;
    e->g = s;
    return DNNMEM_OK;
}
