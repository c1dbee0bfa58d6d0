/*
 * tf_fit.c: Keras 3's SGD step under tf.function (model.fit,
 * train_on_batch; --framework tensorflow --tf-execution graph), in the
 * order TensorFlow's graph executor runs it.
 *
 * What runs (keras/src/optimizers/sgd.py update_step, Keras 3.15; the TF
 * backend's TFOptimizer._distributed_tf_update_step applies it to each
 * variable through distribution.extended.update(..., group=False),
 * keras/src/backend/tensorflow/optimizer.py): per trainable variable v with
 * momentum slot m,
 *     assign(m, subtract(multiply(m, momentum), multiply(gradient, lr)))
 *     assign_add(v, m)
 * and without momentum assign_sub(v, multiply(gradient, lr)). No control
 * edge orders one variable's update against another's or against the
 * forward: tf.function's automatic control dependencies only chain the ops
 * on one resource (m's read before its assign).
 *
 * The order (common_runtime/executor.cc, a TF 2.x release with KernelStats
 * as read; the behaviour below is what the TF 2.21 traces show): a kernel
 * is "expensive" until its cost estimate, which starts at 1e8 cycles and
 * moves a tenth of the way to each timed run (KernelStats,
 * kInitialCostEstimateCycles, kCostDecay 10; not updated while the
 * profiler traces), drops under kOpIsExpensiveThresholdCycles (8000): in
 * the second step every CPU compute kernel still is. ScheduleReady runs the
 * last expensive ready node inline and hands the others to the inter-op
 * pool (one thread here), whose worker takes its own pushes first. The
 * ReadVariableOp of m and `m * momentum` depend on nothing the step
 * computes, so they run from the step's roots, beside the forward: every
 * variable's product is made before the backward starts, and lives until
 * that variable's grad arrives. Measured (TF 2.21.0, Keras 3.15.1, one
 * inter-op and one intra-op thread, tools/oracle/tf_measure.py trace
 * fashion_mnist_mlp-fit-b32 and rand1-fit-b4): all sgd/Mul outputs of the
 * form m * momentum ([784,1024], [1024,512], ... in the MLP; every
 * kernel's and vector's in rand1) are allocated before the first
 * gradient_tape op.
 *
 * Then, when a variable's grad is complete, its update runs at once (the
 * grad's only consumer is the update; the trace shows the update right
 * after the MatMul that makes the kernel's grad): `gradient * lr` is a Mul
 * that forwards its output into the grad's buffer
 * (forward_input_or_allocate_output: the executor holds the grad's only
 * reference), the Sub forwards into one operand, AssignVariableOp takes the
 * Sub's buffer as m's value (its input's only reference: no copy), and
 * m's old buffer and the other operand are freed: no allocation, the grad
 * and m's old value go, `m * momentum`'s buffer becomes m (trace: the
 * [784,1024] kernel's grad of 3211264 B is followed by two frees of
 * 3211264 B and no allocation). dnnmem made the grads like PyTorch's .grad,
 * held to the end of the backward.
 *
 * Not modelled: AssignAddVariableOp copies v's buffer when a read of v is
 * still held (PrepareToUpdateVariable, kernels/training_op_helpers.h: the
 * forward's read that a MatMul's or a convolution's input grad still
 * reads): the trace shows a v-sized "sgd/AssignAddVariableOp temp" for
 * three of the MLP's four kernels whose input grad ran after the update,
 * none for the one whose input grad ran first; which of a node's grads
 * runs first follows the graph's edge order, which dnnmem does not have.
 *
 * Dense's BiasAddGrad runs at the end of the backward: of the three
 * kernels that read a Dense output's grad (the two MatMuls and
 * BiasAddGrad), ScheduleReady runs one inline and pushes the others to
 * the pool, whose worker pops its own pushes last-in first-out, so the
 * pushed bias grad waits until everything pushed after it, the rest of the
 * backward, has run: the grad it reads is held until then, and the pushes
 * run in reverse, the first layer's first. Measured (the same traces): the
 * five Dense layers' BiasAddGrad allocations are the backward's last, in
 * the order dense, dense_1, ..., dense_4, and the [32,512], [32,256] and
 * [32,128] output grads are live at the MLP's peak, in each of two runs.
 * Modelled for Gemm (a Dense on a rank-2 input) with a bias.
 */
#include "train/train.h"

#include <stdlib.h>

bool dm_tf_fit_updates(const struct dm_sb *b)
{
    const struct dm_run *r = b->run;
    /* not under a mixed precision policy, where Keras wraps the optimizer
     * in a LossScaleOptimizer (keras/src/optimizers/loss_scale_optimizer.py:
     * the grads unscaled, the update under a tf.cond on their finiteness),
     * not measured: there the PyTorch-like order stands */
    return r->tf_ops && r->tf_graph && r->train && !b->par && r->grad_accum == 1 &&
           r->amp == DM_UNDEFINED &&
           (r->optimizer == DNNMEM_OPT_SGD_MOMENTUM || r->optimizer == DNNMEM_OPT_SGD);
}

/* The step's start: `m * momentum` of every trainable variable (header). */
void dm_tf_fit_begin(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    if (!tr || !tr->tf_mm || b->run->optimizer != DNNMEM_OPT_SGD_MOMENTUM)
        return;
    dm_sb_step(b, DM_PHASE_OPTIMIZER, -1);
    for (int32_t x = 0; x < b->g->n_tensors; x++)
        if (tr->param[x] && tr->tf_mm[x] < 0)
            tr->tf_mm[x] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, b->t[x].bytes, x,
                                       -1, "m * momentum (sgd/Mul)", 1);
}

/* Variable x's grad is complete: its update (header). */
void dm_tf_fit_update(struct dm_sb *b, int32_t x)
{
    struct dm_train *tr = b->train;
    int32_t nt = b->g->n_tensors;
    if (!tr->tf_mm || tr->param_grad[x] < 0)
        return;
    int32_t mm = tr->tf_mm[x], *m = &tr->tf_mm[nt + x];
    if (mm >= 0 && *m >= 0) { /* m takes `m * momentum - gradient * lr`, in mm's buffer */
        dm_sb_unref(b, *m);
        *m = mm;
        tr->tf_mm[x] = -1;
        b->s->buf[mm].category = DNNMEM_CAT_OPTIMIZER;
        b->s->buf[mm].what = "momentum";
    }
    dm_sb_unref(b, tr->param_grad[x]);
    tr->param_grad[x] = -1;
}

/* Node i's backward reaches input k, holding the output grad gout: a
 * Dense's bias grad is left to the backward's end (header), gout held for
 * it; true when it is. */
bool dm_tf_fit_defer(struct dm_sb *b, int32_t i, int k, int32_t gout)
{
    struct dm_train *tr = b->train;
    const struct dm_node *n = &b->g->nodes[i];
    if (!tr->tf_mm || n->op != DM_OP_Gemm || k != 2 || gout < 0 || !dm_has_in(n, 2) ||
        !tr->param[n->in[2]] || tr->contrib[n->in[2]] != 1)
        return false; /* a bias this node alone reads */
    int32_t *held = &tr->tf_mm[2 * b->g->n_tensors];
    dm_sb_ref(b, gout, 1);
    held[i] = gout;
    return true;
}

/* The backward's end: the deferred bias grads, first node first (header),
 * each its variable's whole grad (its only reader's), updated at once, and
 * its output grad let go. */
void dm_tf_fit_end(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    if (!tr->tf_mm)
        return;
    int32_t *held = &tr->tf_mm[2 * b->g->n_tensors];
    for (int32_t i = 0; i < b->g->n_nodes; i++) {
        if (held[i] < 0)
            continue;
        int32_t x = b->g->nodes[i].in[2];
        dm_sb_step(b, DM_PHASE_BACKWARD, i);
        tr->left[x]--;
        tr->param_grad[x] = dm_sb_alloc(b, DNNMEM_CAT_GRADIENT, b->t[x].dtype, b->t[x].bytes, x, i,
                                        "grad (BiasAddGrad)", 1);
        dm_tf_fit_update(b, x);
        dm_sb_unref(b, held[i]);
        held[i] = -1;
    }
}

/* The optimizer's state buffer k of variable x has been made. */
void dm_tf_fit_state(struct dm_sb *b, int32_t x, int32_t buf)
{
    if (b->train && b->train->tf_mm)
        b->train->tf_mm[b->g->n_tensors + x] = buf;
}
