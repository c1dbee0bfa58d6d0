/*
 * schedule.c: the allocations and frees PyTorch eager performs, in order.
 *
 * Inference (torch.no_grad(), model.eval()):
 *  - weights (parameters and buffers) are resident before the first op;
 *    so are the graph inputs, which the caller holds;
 *  - each op allocates its outputs when it runs; a tensor is freed right after
 *    its last consumer runs, unless it is a graph output;
 *  - views (ops flagged DM_F_VIEW, and Dropout in eval mode) allocate nothing
 *    and keep their base alive; Reshape/Flatten of a transposed (non-
 *    contiguous) tensor copies, as torch.reshape does;
 *  - values computed only from constants and bound dims (shape chains,
 *    scalars) are host-side Python values in eager PyTorch and take no device
 *    memory, except tensors of more than one element that feed a device op:
 *    those derived from Constant nodes alone are weights (the ConstantOfShape
 *    weights of ONNX's "light" zoo models), those derived from dims are
 *    allocated when produced (torch.arange(seq));
 *  - tensors computed from initializers alone (an exporter's Slice/Concat
 *    repacking of LSTM weights, Transpose of a Linear weight) are views or
 *    re-arrangements that PyTorch never materialises: they take no memory.
 */
#include "dnnmem-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dm_schedule_free(struct dm_schedule *s)
{
    if (!s)
        return;
    free(s->ev);
    free(s->storage);
    free(s->implied_node);
    free(s->implied_dtype);
    memset(s, 0, sizeof *s);
}

const char *dm_schedule_tensor_name(const struct dm_graph *g, const struct dm_schedule *s,
                                    int32_t id, char *buf, size_t cap)
{
    if (id < g->n_tensors)
        return g->tensors[id].name;
    snprintf(buf, cap, "%s.num_batches_tracked", g->nodes[s->implied_node[id - g->n_tensors]].name);
    return buf;
}

/* PyTorch's BatchNorm modules that track running statistics register a third
 * buffer, num_batches_tracked, an int64 scalar (torch/nn/modules/batchnorm.py,
 * _NormBase). torch.onnx drops it ("Removing mutation ... num_batches_tracked"),
 * so a BatchNormalization whose running mean and variance are initializers
 * implies one 8-byte device tensor. */
static bool implies_batch_counter(const struct dm_graph *g, const struct dm_node *n)
{
    return n->op == DM_OP_BatchNormalization && n->n_in >= 5 && n->in[3] >= 0 && n->in[4] >= 0 &&
           g->tensors[n->in[3]].role == DM_ROLE_WEIGHT && g->tensors[n->in[4]].role == DM_ROLE_WEIGHT;
}

static bool push(struct dm_schedule *s, enum dm_ev_kind kind, enum dnnmem_category cat,
                 int32_t tensor, int32_t step, uint64_t bytes)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        struct dm_event *ev = realloc(s->ev, cap * sizeof *ev);
        if (!ev)
            return false;
        s->ev = ev;
        s->cap = cap;
    }
    s->ev[s->n++] = (struct dm_event){(uint8_t)kind, (uint8_t)cat, tensor, step, bytes};
    return true;
}

static bool is_meta_slot(const struct dm_node *n, int k)
{
    return k < 32 && ((dm_ops[n->op].meta_inputs >> k) & 1u);
}

/* A permutation that moves only size-1 dims keeps memory order. */
static bool transpose_keeps_order(const struct dm_node *n, const struct dm_tinfo *in)
{
    int64_t cnt;
    const int64_t *perm = dm_attr_ints(n, "perm", &cnt);
    int last = -1;
    for (int k = 0; k < in->rank; k++) {
        int src = cnt == in->rank ? (int)perm[k] : in->rank - 1 - k;
        if (src < 0 || src >= in->rank || in->dims[src] == 1)
            continue;
        if (src < last)
            return false;
        last = src;
    }
    return true;
}

enum dnnmem_status dm_schedule_infer(const struct dm_graph *g, const struct dm_tinfo *t,
                                     struct dm_schedule *s, struct dnnmem_error *err)
{
    int32_t nt = g->n_tensors, nn = g->n_nodes;
    memset(s, 0, sizeof *s);
    s->n_steps = nn;
    s->storage = malloc(((size_t)nt + 1) * sizeof *s->storage);
    int32_t *last = malloc(((size_t)nt + 1) * sizeof *last);      /* per storage: last step read */
    int32_t *born = malloc(((size_t)nt + 1) * sizeof *born);      /* per storage: step allocated */
    int32_t *free_at = malloc(((size_t)nn + 2) * sizeof *free_at); /* bucket heads by step */
    int32_t *free_next = malloc(((size_t)nt + 1) * sizeof *free_next);
    uint8_t *flag = calloc((size_t)nt + 1, 1);
    /* DEP: derived from input data or dims; DATA_USE: read as data by some op;
     * DEVICE_USE: read as data by an op that runs on the device; META_USE: read
     * as metadata; FROM_WEIGHT: derived from initializers through data. */
    enum { DEP = 1, DATA_USE = 2, DEVICE_USE = 4, META_USE = 8, STRIDED = 16, PINNED = 32,
           FROM_WEIGHT = 64 };
    if (!s->storage || !last || !born || !free_at || !free_next || !flag)
        goto oom;
    for (int32_t i = 0; i < nt; i++) {
        s->storage[i] = -1;
        last[i] = -1;
        born[i] = -1;
        if (g->tensors[i].role == DM_ROLE_INPUT)
            flag[i] |= DEP;
        if (g->tensors[i].role == DM_ROLE_WEIGHT)
            flag[i] |= FROM_WEIGHT;
    }
    /* which tensors depend on inputs, and which are read by device ops */
    for (int32_t i = 0; i < nn; i++) {
        const struct dm_node *n = &g->nodes[i];
        bool node_const = n->n_out > 0 && n->out[0] >= 0 && t[n->out[0]].is_const;
        uint8_t inherit = 0; /* FROM_WEIGHT flows through data, DEP also through shapes */
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0)
                inherit |= flag[n->in[k]] & (is_meta_slot(n, k) ? DEP : (DEP | FROM_WEIGHT));
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0)
                flag[n->out[k]] |= inherit;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && !is_meta_slot(n, k))
                flag[n->in[k]] |= node_const ? DATA_USE : (DATA_USE | DEVICE_USE);
            else if (n->in[k] >= 0)
                flag[n->in[k]] |= META_USE;
    }
    /* pass 1: storages. Weights and inputs are resident from step 0. */
    for (int32_t i = 0; i < nt; i++) {
        const struct dm_tensor *tt = &g->tensors[i];
        bool resident = false;
        if (tt->role == DM_ROLE_INPUT)
            resident = true;
        else if (tt->role == DM_ROLE_WEIGHT) /* one read only as metadata is no parameter */
            resident = (flag[i] & DATA_USE) || tt->is_output || !(flag[i] & META_USE);
        else if (t[i].rank >= 0 && !t[i].absent && t[i].is_const && !(flag[i] & (DEP | FROM_WEIGHT)))
            resident = ((flag[i] & DEVICE_USE) || tt->is_output) && t[i].numel > 1;
        if (resident) {
            s->storage[i] = i;
            born[i] = 0;
            flag[i] |= PINNED;
        }
    }
    for (int32_t i = 0; i < nn; i++) {
        const struct dm_node *n = &g->nodes[i];
        unsigned flags = dm_ops[n->op].flags;
        for (int k = 0; k < n->n_out; k++) {
            int32_t o = n->out[k];
            if (o < 0 || t[o].absent || s->storage[o] >= 0)
                continue;
            if (k > 0 && (flags & DM_F_TRAIN_AUX))
                continue; /* not produced in eval mode */
            int32_t in0 = dm_has_in(n, 0) ? n->in[0] : -1;
            bool aliasing = k == 0 && (flags & (DM_F_VIEW | DM_F_IDENTITY_INFER)) && in0 >= 0 &&
                            s->storage[in0] >= 0;
            if (aliasing && (n->op == DM_OP_Reshape || n->op == DM_OP_Flatten) &&
                (flag[in0] & STRIDED))
                aliasing = false; /* torch.reshape copies a non-contiguous tensor */
            if (aliasing) {
                s->storage[o] = s->storage[in0];
                if ((flag[in0] & STRIDED) ||
                    (n->op == DM_OP_Transpose && !transpose_keeps_order(n, &t[in0])))
                    flag[o] |= STRIDED;
                continue;
            }
            bool materialize = !t[o].is_const ||
                               (((flag[o] & DEVICE_USE) || g->tensors[o].is_output) &&
                                t[o].numel > 1 && !(flag[o] & FROM_WEIGHT));
            if (materialize) {
                s->storage[o] = o;
                born[o] = i + 1;
                last[o] = i + 1; /* an unread output dies right after its op */
            }
        }
    }
    for (int32_t i = 0; i < nt; i++)
        if (g->tensors[i].is_output && s->storage[i] >= 0)
            flag[s->storage[i]] |= PINNED;
    /* pass 2: last device read of each storage, through any of its views */
    for (int32_t i = 0; i < nn; i++) {
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int32_t in = n->in[k];
            if (in >= 0 && !is_meta_slot(n, k) && s->storage[in] >= 0)
                last[s->storage[in]] = i + 1;
        }
    }
    for (int32_t st = 0; st <= nn + 1; st++)
        free_at[st] = -1;
    for (int32_t i = nt - 1; i >= 0; i--)
        if (s->storage[i] == i && !(flag[i] & PINNED)) {
            free_next[i] = free_at[last[i]];
            free_at[last[i]] = i;
        }
    /* pass 3: events in execution order */
    for (int32_t i = 0; i < nt; i++)
        if (born[i] == 0 && !push(s, DM_EV_ALLOC,
                                  g->tensors[i].role == DM_ROLE_INPUT ? DNNMEM_CAT_INPUT : DNNMEM_CAT_WEIGHT,
                                  i, 0, t[i].bytes))
            goto oom;
    s->implied_node = malloc(((size_t)nn + 1) * sizeof *s->implied_node);
    s->implied_dtype = malloc((size_t)nn + 1);
    if (!s->implied_node || !s->implied_dtype)
        goto oom;
    for (int32_t i = 0; i < nn; i++)
        if (implies_batch_counter(g, &g->nodes[i])) {
            s->implied_node[s->n_implied] = i;
            s->implied_dtype[s->n_implied] = DM_INT64;
            if (!push(s, DM_EV_ALLOC, DNNMEM_CAT_WEIGHT, nt + s->n_implied++, 0, 8))
                goto oom;
        }
    for (int32_t i = 0; i < nn; i++) {
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_out; k++) {
            int32_t o = n->out[k];
            if (o >= 0 && born[o] == i + 1 && s->storage[o] == o &&
                !push(s, DM_EV_ALLOC, DNNMEM_CAT_ACTIVATION, o, i + 1, t[o].bytes))
                goto oom;
        }
        for (int32_t x = free_at[i + 1]; x >= 0; x = free_next[x])
            if (!push(s, DM_EV_FREE, DNNMEM_CAT_ACTIVATION, x, i + 1, t[x].bytes))
                goto oom;
    }
    free(last);
    free(born);
    free(free_at);
    free(free_next);
    free(flag);
    return DNNMEM_OK;
oom:
    free(last);
    free(born);
    free(free_at);
    free(free_next);
    free(flag);
    dm_schedule_free(s);
    return dm_fail(err, DNNMEM_E_NOMEM, "out of memory scheduling '%s'", g->path);
}
