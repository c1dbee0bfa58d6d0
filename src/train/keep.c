/*
 * keep.c: the saved tensors' store (struct dm_train's saved): what a
 * forward node keeps for its backward, added by the rules of save.c, tf.c
 * and mxnet.c; and the router logits the model returns to the loss. The
 * bottom of src/train: it stands on the builder alone.
 */
#include "train/train.h"

bool dm_train_requires_grad(const struct dm_sb *b, int32_t x)
{
    return b->train && x >= 0 && b->train->rg[x];
}

void dm_keep(struct dm_sb *b, int32_t node, int32_t buf)
{
    struct dm_train *tr = b->train;
    if (buf < 0 || tr->n_saved[node] >= MAX_SAVED)
        return;
    dm_sb_ref(b, buf, 1);
    tr->saved[node][tr->n_saved[node]++] = buf;
    if (b->s->buf[buf].category == DNNMEM_CAT_ACTIVATION)
        b->s->buf[buf].category = DNNMEM_CAT_SAVED;
}

void dm_keep_tensor(struct dm_sb *b, int32_t node, int32_t x)
{
    if (x >= 0)
        dm_keep(b, node, b->cur[x]);
}

/* Keep what input slot k read (an autocast copy, when there was one). */
void dm_keep_input(struct dm_sb *b, int32_t node, int k)
{
    dm_keep(b, node, dm_sb_input(b, &b->g->nodes[node], k));
}

/* An extra tensor the op makes only for its backward (mask, statistics). */
void dm_keep_new(struct dm_sb *b, int32_t node, enum dm_dtype dtype, int64_t numel,
                     const char *what)
{
    uint64_t bytes;
    if (numel < 0 || !dm_dtype_bytes(dtype, numel, &bytes))
        return;
    int32_t buf = dm_sb_alloc(b, DNNMEM_CAT_SAVED, dtype, bytes, -1, node, what, 0 + 1);
    struct dm_train *tr = b->train;
    if (buf >= 0 && tr->n_saved[node] < MAX_SAVED)
        tr->saved[node][tr->n_saved[node]++] = buf;
}

/* Rows LayerNormalization normalizes: the input's dims before `axis`;
 * GroupNormalization's: N * num_groups (native_group_norm's mean and rstd
 * are [N, G], aten/src/ATen/native/group_norm.cpp). */
int64_t dm_ln_rows(const struct dm_sb *b, const struct dm_node *n)
{
    int64_t axis = dm_attr_int(n, "axis", -1), rows = 1;
    if (n->op == DM_OP_GroupNormalization)
        return dm_has_in(n, 0) && b->t[n->in[0]].rank >= 1
                   ? b->t[n->in[0]].dims[0] * dm_attr_int(n, "num_groups", 1)
                   : 1;
    if (dm_has_in(n, 0)) {
        const struct dm_tinfo *x = &b->t[n->in[0]];
        if (axis < 0)
            axis += x->rank;
        for (int d = 0; d < axis && d < x->rank; d++)
            rows *= x->dims[d];
    }
    return rows;
}

/* native_layer_norm and native_group_norm make their mean and rstd
 * ([rows] float32 each, after the output) whether or not autograd saves
 * them; unsaved (inference, or no grad needed) they are freed when the op
 * returns (aten/src/ATen/native/layer_norm.cpp, group_norm.cpp). Measured,
 * CPU, one thread, 1.13.0 and 2.13.0 alike: LayerNorm(16) on [2,8,16] under
 * no_grad +1024 +64 +64 -64 -64; GroupNorm(4, 16) on [2,16,8,8] +8192 +32
 * +32 -32 -32 (tests/unit/test-cpu.c test_norm_stats_unsaved). The rows when
 * node n's stats are such transients (PyTorch on the CPU), else 0. */
int64_t dm_norm_unsaved_rows(const struct dm_sb *b, const struct dm_node *n)
{
    const struct dm_run *run = b->run;
    if ((n->op != DM_OP_LayerNormalization && n->op != DM_OP_GroupNormalization) ||
        run->cuda || run->tf_ops || run->mx_ops || run->xla || run->torch_version < 113 ||
        !dm_has_out(n, 0) || dm_train_requires_grad(b, n->out[0]))
        return 0;
    return dm_ln_rows(b, n);
}

void dm_train_returned(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    if (!tr || !tr->router_buf)
        return;
    const struct dm_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_out; k++)
        for (int32_t r = 0; r < g->n_router; r++)
            if (n->out[k] == g->router[r] && tr->router_buf[r] < 0 && b->cur[n->out[k]] >= 0) {
                tr->router_buf[r] = b->cur[n->out[k]];
                dm_sb_ref(b, tr->router_buf[r], 1);
            }
}
