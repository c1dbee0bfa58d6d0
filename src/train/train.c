/*
 * train.c: the training step as PyTorch eager runs it, on top of the forward
 * pass of src/schedule/forward.c:  zero_grad -> forward -> loss -> backward
 * -> step; its state (struct dm_train, train.h), and the recomputations in
 * the backward (activation checkpointing, MXNet's mirroring).
 *
 * The layers, each on the schedule builder (src/schedule/builder.h) and
 * calling none above it (tools/callgraph.py): keep.c, the saved tensors'
 * store, and amp.c, autocast; tf.c, mxnet.c, checkpoint.c, the frameworks'
 * rules and the segments; save.c, what a forward node keeps; then the
 * forward pass (src/schedule/forward.c); backward.c; loss.c; optimizer.c;
 * this file; src/schedule/schedule.c runs it.
 */
#include "train/train.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>


/* BatchNormalization inputs 3 and 4 are running statistics: buffers, not
 * parameters. Marks them in `stat` (per tensor). */
static void mark_bn_stats(const struct dm_graph *g, bool *stat)
{
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        if (n->op == DM_OP_BatchNormalization && n->n_in >= 5)
            for (int k = 3; k < 5; k++)
                if (n->in[k] >= 0)
                    stat[n->in[k]] = true;
    }
}

enum dnnmem_status dm_train_init(struct dm_sb *b, struct dnnmem_error *err)
{
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    int32_t nt = g->n_tensors, nn = g->n_nodes;
    struct dm_train *tr = calloc(1, sizeof *tr);
    if (!tr)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    b->train = tr;
    tr->rg = calloc((size_t)nt + 1, sizeof *tr->rg);
    tr->param = calloc((size_t)nt + 1, sizeof *tr->param);
    tr->grad = malloc(((size_t)nt + 1) * sizeof *tr->grad);
    tr->param_grad = malloc(((size_t)nt + 1) * sizeof *tr->param_grad);
    tr->saved = calloc((size_t)nn + 1, sizeof *tr->saved);
    tr->n_saved = calloc((size_t)nn + 1, sizeof *tr->n_saved);
    tr->node_rg = calloc((size_t)nn + 1, sizeof *tr->node_rg);
    tr->copy_slices = calloc((size_t)nn + 1, sizeof *tr->copy_slices);
    tr->held = malloc(((size_t)g->n_outputs + (size_t)g->n_router + 3) * sizeof *tr->held);
    if (b->run->keep_outputs)
        tr->prev = malloc(((size_t)g->n_outputs + (size_t)g->n_router + 3 +
                           (size_t)nn * MAX_SAVED + 2 * (size_t)nt) * sizeof *tr->prev);
    tr->contrib = calloc((size_t)nt + 1, sizeof *tr->contrib);
    tr->left = calloc((size_t)nt + 1, sizeof *tr->left);
    tr->pending = malloc(((size_t)nt + 1) * sizeof *tr->pending);
    tr->pending_view = calloc((size_t)nt + 1, sizeof *tr->pending_view);
    tr->grad_strided = calloc((size_t)nt + 1, sizeof *tr->grad_strided);
    tr->addmm_bias = calloc((size_t)nn + 1, sizeof *tr->addmm_bias);
    tr->leaf_val = malloc(((size_t)nt + 1) * sizeof *tr->leaf_val);
    tr->leaf_grad = malloc(((size_t)nt + 1) * sizeof *tr->leaf_grad);
    if (dm_tf_fit_updates(b)) {
        tr->tf_mm = malloc((2 * (size_t)nt + (size_t)nn + 1) * sizeof *tr->tf_mm);
        for (int32_t x = 0; tr->tf_mm && x < 2 * nt + nn; x++)
            tr->tf_mm[x] = -1;
        if (!tr->tf_mm)
            return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    }
    if (b->run->tf_ops && !b->run->tf_graph && b->run->optimizer == DNNMEM_OPT_SGD_MOMENTUM) {
        tr->tf_m = malloc(((size_t)nt + 1) * sizeof *tr->tf_m);
        for (int32_t x = 0; tr->tf_m && x < nt; x++)
            tr->tf_m[x] = -1;
        if (!tr->tf_m)
            return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    }
    if (!tr->rg || !tr->param || !tr->grad || !tr->param_grad || !tr->saved || !tr->n_saved ||
        !tr->node_rg || !tr->copy_slices || !tr->held || (b->run->keep_outputs && !tr->prev) ||
        !tr->contrib || !tr->left || !tr->pending ||
        !tr->pending_view || !tr->grad_strided || !tr->addmm_bias || !tr->leaf_val ||
        !tr->leaf_grad)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    if (g->n_router > 0) {
        tr->router_buf = malloc((size_t)g->n_router * sizeof *tr->router_buf);
        if (!tr->router_buf)
            return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
        for (int32_t k = 0; k < g->n_router; k++)
            tr->router_buf[k] = -1;
    }
    mark_bn_stats(g, tr->param); /* running statistics first, as "not a parameter" */
    for (int32_t x = 0; x < nt; x++) {
        tr->grad[x] = tr->param_grad[x] = tr->leaf_val[x] = tr->leaf_grad[x] = -1;
        tr->param[x] = g->tensors[x].role == DM_ROLE_WEIGHT && dm_dtype_is_float(t[x].dtype) &&
                       (b->flag[x] & DM_TF_RESIDENT) && !tr->param[x] && !g->tensors[x].frozen;
        for (size_t k = 0; tr->param[x] && k < b->run->n_freeze; k++)
            if (fnmatch(b->run->freeze[k], g->tensors[x].name, 0) == 0)
                tr->param[x] = false; /* requires_grad_(False) */
        /* requires_grad_(True) on an activation (grad_leaf): autograd
         * records every op reading it, as it does a parameter's */
        tr->rg[x] = tr->param[x] || (g->tensors[x].grad_leaf && dm_dtype_is_float(t[x].dtype));
    }
    for (int32_t i = 0; i < nn; i++) {
        const struct dm_node *n = &g->nodes[i];
        enum dm_train_rule rule = dm_ops[n->op].train;
        bool any = false;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && !dm_meta_slot(n, k) && tr->rg[n->in[k]])
                any = true;
        if (!any || rule == DM_T_NONE || (n->op == DM_OP_QuantLinear && !dm_quant_grad(b, n)))
            continue;
        if (rule == DM_T_UNMODELLED)
            return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                           "%s: node '%s': training through %s is not modelled yet", g->path,
                           n->name, dm_ops[n->op].name);
        tr->node_rg[i] = true;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && !dm_meta_slot(n, k) &&
                (tr->param[n->in[k]] || (b->run->mx_ops && tr->rg[n->in[k]])))
                tr->contrib[n->in[k]]++; /* MXNet: every tensor's contributions (dm_mx_deliver) */
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0 && dm_dtype_is_float(t[n->out[k]].dtype) && !t[n->out[k]].absent)
                tr->rg[n->out[k]] = true;
    }
    DM_TRY(dm_checkpoint_segments(b, err));
    if (g->n_outputs < 1 || !tr->rg[g->outputs[0]]) /* the check table's row says so */
        return dm_refuse(b->s, DM_REFUSE_NOTHING_TO_TRAIN, NULL, NULL, err);
    /* The loss target lives from before the first step, like the input batch. */
    int32_t out0 = g->outputs[0];
    const struct dm_tinfo *o = &t[out0];
    tr->target = -1;
    if (b->run->mx_ops) {
        tr->mx_head = calloc((size_t)nn + 1, sizeof *tr->mx_head);
        tr->mx_first = malloc(((size_t)nt + 1) * sizeof *tr->mx_first);
        size_t slots = 1;
        for (int32_t i = 0; i < nn; i++)
            slots += (size_t)g->nodes[i].n_in;
        tr->mx_hold = malloc(slots * sizeof *tr->mx_hold);
        tr->mx_next = malloc(slots * sizeof *tr->mx_next);
        if (!tr->mx_head || !tr->mx_first || !tr->mx_hold || !tr->mx_next)
            return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
        for (int32_t x = 0; x < nt; x++)
            tr->mx_first[x] = -1;
        DM_TRY(dm_mx_mirror_plan(b, err));
    }
    if (dm_mx_loss_head(b, out0)) {
        /* the label is the symbol's own input (softmax_label) */
    } else if (b->run->par.pp > 1 && b->run->par.stage < b->run->par.pp - 1) {
        /* a pipeline stage before the last: no loss, its outputs' grads received */
    } else if (b->run->loss == DNNMEM_LOSS_CE) {
        int64_t rows = o->rank >= 1 ? o->numel / (o->dims[o->rank - 1] ? o->dims[o->rank - 1] : 1) : 1;
        tr->target = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, (uint64_t)rows * 8, -1, -1,
                                 "target", 1);
    } else if (b->run->loss == DNNMEM_LOSS_MSE) {
        tr->target = dm_sb_alloc(b, DNNMEM_CAT_INPUT, o->dtype, o->bytes, -1, -1, "target", 1);
    }
    /* Adagrad's constructor makes its state; so does Keras' fit under
     * tf.function: train_on_batch's _maybe_symbolic_build builds the optimizer
     * (optimizer.build(trainable_variables)) before the first step runs
     * (keras/src/trainers/trainer.py _symbolic_build, Keras 3.15), where the
     * eager tape's apply_gradients builds it at its first call */
    if (b->run->optimizer == DNNMEM_OPT_ADAGRAD ||
        (b->run->tf_graph && b->run->optimizer != DNNMEM_OPT_NONE)) {
        dm_optimizer_state(b);
        tr->state_made = true;
    }
    return DNNMEM_OK;
}


void dm_train_free(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    if (!tr)
        return;
    free(tr->rg);
    free(tr->param);
    free(tr->grad);
    free(tr->param_grad);
    free(tr->contrib);
    free(tr->left);
    free(tr->pending);
    free(tr->pending_view);
    free(tr->grad_strided);
    free(tr->addmm_bias);
    free(tr->leaf_val);
    free(tr->leaf_grad);
    free(tr->saved);
    free(tr->n_saved);
    free(tr->node_rg);
    free(tr->copy_slices);
    free(tr->held);
    free(tr->prev);
    free(tr->router_buf);
    free(tr->mx_head);
    free(tr->mx_first);
    free(tr->mx_hold);
    free(tr->mx_next);
    free(tr->mx_mir);
    free(tr->mx_done);
    free(tr->mx_uses);
    if (tr->seg_kept)
        for (int32_t k = 0; k < b->g->n_nodes; k++)
            free(tr->seg_kept[k]);
    free(tr->seg_kept);
    free(tr->n_seg_kept);
    free(tr->seg);
    free(tr->seg_first);
    free(tr->seg_last);
    free(tr->local_uses);
    free(tr->tf_mm);
    free(tr->tf_m);
    free(tr);
    b->train = NULL;
}

/* Backward through a checkpointed segment: recompute its forward with grad
 * mode on (the graph it records is what backward then frees node by node),
 * then run backward through it, then let go of its kept inputs. */
static void checkpoint_backward(struct dm_sb *b, int32_t sg)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    int32_t first = tr->seg_first[sg], last = tr->seg_last[sg];
    bool reached = false;
    for (int32_t j = first; j <= last; j++)
        for (int k = 0; k < g->nodes[j].n_out; k++)
            if (g->nodes[j].out[k] >= 0 && tr->grad[g->nodes[j].out[k]] >= 0)
                reached = true;
    if (reached) {
        int32_t *uses = tr->local_uses;
        for (int32_t j = first; j <= last; j++)
            for (int k = 0; k < g->nodes[j].n_out; k++)
                if (g->nodes[j].out[k] >= 0)
                    uses[g->nodes[j].out[k]] = 0;
        for (int32_t j = first; j <= last; j++) {
            const struct dm_node *nd = &g->nodes[j];
            for (int k = 0; k < nd->n_in; k++) {
                int32_t x = nd->in[k];
                if (x < 0 || dm_meta_slot(nd, k))
                    continue;
                int32_t p = g->tensors[x].producer;
                if (p >= first && p <= last)
                    uses[x]++;
                else
                    dm_sb_ref(b, b->cur[x], 1); /* balanced by the node's release */
            }
        }
        /* `outputs = run_function(*inputs)` holds the recomputed outputs that
         * get grads until the segment's backward is done */
        int32_t held[64], n_held = 0;
        for (int32_t j = first; j <= last; j++)
            for (int k = 0; k < g->nodes[j].n_out; k++) {
                int32_t o = g->nodes[j].out[k];
                if (o >= 0 && tr->grad[o] >= 0 && n_held < 64) {
                    uses[o]++;
                    held[n_held++] = o;
                }
            }
        for (int32_t j = first; j <= last; j++)
            dm_sb_forward_node(b, j, uses, true, true);
        /* the recomputation runs in an autocast context of its own
         * (CheckpointFunction.backward), which clears its cache of parameter
         * casts as it exits: the casts live on only where the recorded graph
         * keeps them */
        for (int32_t x = 0; b->run->amp != DM_UNDEFINED && x < g->n_tensors; x++)
            if (b->amp_cache[x] >= 0) {
                dm_sb_unref(b, b->amp_cache[x]);
                b->amp_cache[x] = -1;
            }
        /* CheckpointFunction.backward(ctx, *args): the incoming grads of
         * those outputs stay referenced by `args` until it returns */
        int32_t held_buf[64], held_grad[64];
        for (int32_t q = 0; q < n_held; q++) {
            held_buf[q] = b->cur[held[q]];
            held_grad[q] = tr->grad[held[q]];
            dm_sb_ref(b, held_grad[q], 1);
        }
        for (int32_t j = last; j >= first; j--)
            dm_backward_node(b, j);
        for (int32_t q = 0; q < n_held; q++) {
            dm_sb_unref(b, held_buf[q]);
            dm_sb_unref(b, held_grad[q]);
        }
    }
    for (int32_t q = 0; q < tr->n_seg_kept[sg]; q++)
        dm_sb_unref(b, tr->seg_kept[sg][q]);
    tr->n_seg_kept[sg] = 0;
}

/* Backward: run node i's copy (and first the copies it reads), unless it
 * has run or node i's gradient does not run (no output has a grad). */
static void mx_copy_run(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_node *n = &b->g->nodes[i];
    if (tr->mx_done[i])
        return;
    tr->mx_done[i] = true;
    for (int k = 0; k < n->n_in; k++)
        if (dm_mx_data_slot(n, k) && dm_mx_reads_copy(b, n, k))
            mx_copy_run(b, b->g->tensors[n->in[k]].producer);
    /* its inputs: a copy's output (one of the reads its holders count), or
     * the forward's entry kept for it, one more holder that the op's
     * release takes back */
    int32_t kept[MAX_SAVED];
    int n_kept = tr->n_saved[i];
    memcpy(kept, tr->saved[i], (size_t)n_kept * sizeof *kept);
    for (int k = 0, s = 0; k < n->n_in; k++) {
        if (!dm_mx_data_slot(n, k))
            continue;
        int32_t x = n->in[k];
        if (dm_mx_reads_copy(b, n, k)) {
            tr->mx_uses[x]--;
        } else if (s < n_kept) {
            b->cur[x] = kept[s++];
            dm_sb_ref(b, b->cur[x], 1);
        }
    }
    tr->n_saved[i] = 0;
    tr->mx_copying = true; /* dm_train_save: what the gradient reads, from the copy */
    dm_sb_forward_node(b, i, tr->mx_uses, tr->node_rg[i], true);
    tr->mx_copying = false;
    for (int q = 0; q < n_kept; q++)
        dm_sb_unref(b, kept[q]);
    for (int k = 0; k < n->n_out; k++) {
        int32_t o = n->out[k], ob = o >= 0 ? b->cur[o] : -1;
        if (ob >= 0 && b->s->buf[ob].node == i && !b->s->buf[ob].what)
            b->s->buf[ob].what = "recomputed (mirror)";
    }
}

static void mx_mirror_copy(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_node *n = &b->g->nodes[i];
    bool any = tr->mx_head && tr->mx_head[i];
    for (int k = 0; k < n->n_out; k++)
        any |= n->out[k] >= 0 && tr->grad[n->out[k]] >= 0;
    if (any && tr->node_rg[i])
        mx_copy_run(b, i);
}

/* The end of a step lets go of buffer `buf` (-1: none), or, with
 * keep_outputs, hands it to the loop's variables (prev). */
static void let_go(struct dm_sb *b, int32_t buf)
{
    struct dm_train *tr = b->train;
    if (buf >= 0 && tr->prev)
        tr->prev[tr->n_prev++] = buf;
    else
        dm_sb_unref(b, buf);
}

void dm_train_backward(struct dm_sb *b, bool step_optimizer)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    tr->n_held = 0;
    for (int32_t k = 0; k < g->n_outputs; k++) {
        int32_t buf = b->cur[g->outputs[k]];
        if (buf >= 0 && b->resident[g->outputs[k]] < 0) {
            tr->held[tr->n_held++] = buf; /* the forward's is_output holder */
        }
    }
    for (int32_t x = 0; x < g->n_tensors; x++) {
        tr->left[x] = tr->contrib[x];
        tr->pending[x] = -1;
    }
    dm_train_loss(b);
    if (b->run->dataflow) { /* a traced step: the outputs MSE's backward read */
        for (int32_t k = 0; k < tr->n_held; k++)
            dm_sb_unref(b, tr->held[k]);
        tr->n_held = 0;
    }
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        int32_t sg = tr->seg[i];
        if (sg < 0 && tr->mx_mir && tr->mx_mir[i])
            mx_mirror_copy(b, i); /* MXNet: its copy runs before its gradient */
        if (b->par)
            dm_par_backward_enter(b, i);
        if (sg < 0)
            dm_backward_node(b, i);
        else if (i == tr->seg_last[sg])
            checkpoint_backward(b, sg);
        if (b->par)
            dm_par_backward_leave(b, i);
    }
    if (tr->mx_mir)
        dm_mx_mirror_end(b);
    dm_tf_fit_end(b);
    for (int32_t x = 0; x < g->n_tensors; x++) {
        if (tr->grad[x] >= 0) {
            dm_sb_unref(b, tr->grad[x]);
            tr->grad[x] = -1;
        }
        if (tr->mx_first)
            dm_mx_release(b, x);
        if (tr->pending[x] >= 0) { /* a grad that never came: the sum so far goes on */
            int32_t p = tr->pending[x];
            tr->pending[x] = -1;
            dm_accumulate_grad(b, x, p, 0);
        }
    }
    if (b->par)
        dm_par_backward_end(b);
    if (step_optimizer)
        dm_optimizer_step(b);
    /* `del out, loss`: the caller lets go of the outputs and the loss, and
     * with them the graph of nodes the loss did not reach (their saved
     * tensors); with keep_outputs the loop's variables keep all of it until
     * the next forward returns (dm_train_release_prev) */
    for (int32_t k = 0; k < tr->n_held; k++)
        let_go(b, tr->held[k]);
    tr->n_held = 0;
    for (int32_t x = 0; x < g->n_tensors; x++) {
        let_go(b, tr->leaf_val[x]);
        let_go(b, tr->leaf_grad[x]);
        tr->leaf_val[x] = tr->leaf_grad[x] = -1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        for (int s = 0; s < tr->n_saved[i]; s++)
            let_go(b, tr->saved[i][s]);
        tr->n_saved[i] = 0;
    }
}

/* `outputs = model(**inputs)` has returned: the name now holds the new
 * outputs, and the previous step's (and what they kept) are let go. The
 * previous `loss` lives on to the next `loss = ...`, a scalar: let go here
 * with the rest. */
void dm_train_release_prev(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    for (int32_t k = 0; tr && k < tr->n_prev; k++)
        dm_sb_unref(b, tr->prev[k]);
    if (tr)
        tr->n_prev = 0;
}
