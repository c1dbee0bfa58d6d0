/*
 * train.h: the training step's state and the functions its files share
 * (src/train; the layers: train.c's header). Private to src/train: what the
 * schedule calls is in src/schedule/builder.h.
 */
#ifndef DNNMEM_TRAIN_TRAIN_H
#define DNNMEM_TRAIN_TRAIN_H

#include "schedule/builder.h"

#define MAX_SAVED 16 /* a tape entry holds every input of a ConcatV2 or AddN */

/* b->train: made by dm_train_init, which owns its arrays (malloc'd), freed
 * by dm_train_free (train.c). */
struct dm_train {
    bool *rg;            /* per tensor: requires grad */
    bool *param;         /* per tensor: a trainable parameter */
    int32_t *grad;       /* per tensor: buffer holding its incoming grad, or -1 */
    int32_t *param_grad; /* per tensor: the parameter's .grad buffer, or -1 */
    /* per parameter: grads it receives per backward (the node inputs reading
     * it), those still to come in this one, and their sum so far while .grad
     * already exists (the AccumulateGrad node's input buffer), or -1 */
    int32_t *contrib, *left, *pending;
    bool *pending_view;  /* per parameter: the held grad is a view (shares its base's storage) */
    bool *grad_strided;  /* per tensor: its held grad is a slice of a larger grad that is not
                          * dense (a Concat's grad narrowed past its leading dims) */
    int32_t *addmm_bias; /* per node: 1 + the bias whose grad a fused linear's MatMul makes (0: none) */
    int32_t (*saved)[MAX_SAVED]; /* per node: buffers its backward holds */
    uint8_t *n_saved;    /* per node */
    bool *node_rg;       /* per node: records an autograd node */
    bool *copy_slices;   /* per node: ran in place on a view (autograd's CopySlices, save.c) */
    int32_t target;      /* the loss target */
    /* activation checkpointing: segment of each node (-1: none), each
     * segment's first and last node, the inputs each keeps (malloc'd) */
    int32_t *seg, *seg_first, *seg_last, n_seg;
    int32_t **seg_kept, *n_seg_kept;
    int32_t *local_uses;
    int32_t *held;       /* buffers the caller holds until the next forward (outputs, loss) */
    int32_t n_held;
    /* keep_outputs: what the previous step's outputs kept alive after its
     * backward (the outputs and loss, and with them the graph of nodes the
     * loss did not reach), let go when the next forward returns */
    int32_t *prev;
    int32_t n_prev;
    int32_t *router_buf; /* per g->router entry: the returned router logits' buffer, or -1 */
    /* per tensor: a grad leaf's value and .grad (-1: none), which its
     * AccumulateGrad node holds as long as the graph lives (held's lifetime) */
    int32_t *leaf_val, *leaf_grad;
    bool state_made;     /* the optimizer has created its state */
    /* Keras' SGD under tf.function (tf_fit.c), NULL otherwise: per tensor x,
     * [x] its `m * momentum` buffer made as the step starts, [n_tensors + x]
     * its momentum slot's buffer; [2 n_tensors + i] the output grad node i
     * holds for its deferred bias grad (-1: none) */
    int32_t *tf_mm;
    /* eager Keras SGD with momentum on TF (optimizer.c, keras_sgd_temps): per
     * tensor its momentum slot's buffer, which each update replaces; NULL
     * otherwise */
    int32_t *tf_m;
    /* MXNet (run->mx_ops; mxnet.c): per node, a loss head
     * whose backward runs without a head gradient; per tensor, the first
     * of the gradient contributions an ElementWiseSum still waits for, held
     * in a list (mx_hold, linked by mx_next) */
    bool *mx_head;
    int32_t *mx_first, *mx_hold, *mx_next, n_mx_hold;
    /* MXNet's backward mirroring (mxnet.c: mirroring), NULL when
     * nothing is mirrored: per node, mirrored with a copy in the backward
     * graph, and whether that copy has run in this backward; per tensor, the
     * reads of a copy's output by the copies still to run; set while a copy
     * runs */
    bool *mx_mir, *mx_done;
    int32_t *mx_uses;
    bool mx_copying;
};

/* XLA's max pool (save.c's header, "JAX's jit"): the scatter operand kept
 * from the forward, whose buffer the input's grad takes. */
#define XLA_SCATTER_OPERAND "zeros (the pool backward's scatter operand)"

/* ---- keep.c: the saved tensors of node `node` (one holder each) ---- */

void dm_keep(struct dm_sb *b, int32_t node, int32_t buf);
void dm_keep_tensor(struct dm_sb *b, int32_t node, int32_t x);
/* What input slot k read (an autocast copy, when there was one). */
void dm_keep_input(struct dm_sb *b, int32_t node, int k);
/* An extra tensor the op makes only for its backward (mask, statistics). */
void dm_keep_new(struct dm_sb *b, int32_t node, enum dm_dtype dtype, int64_t numel,
                 const char *what);
/* Rows LayerNormalization normalizes: the input's dims before `axis`. */
int64_t dm_ln_rows(const struct dm_sb *b, const struct dm_node *n);

/* ---- tf.c: TensorFlow ---- */

/* Keras 2's fused LayerNormalization; a fused BatchNormalization whose
 * kernel transposes NHWC data around cuDNN. */
bool dm_tf_fused_ln(const struct dm_sb *b, const struct dm_node *n);
bool dm_tf_bn_transposes(const struct dm_sb *b, const struct dm_node *n);
/* What the eager GradientTape holds of node i; false: no row. */
bool dm_tf_tape_save(struct dm_sb *b, int32_t i);
/* `count` (at most 3) buffers of `bytes` each, all live at once, then freed. */
void dm_tf_transients(struct dm_sb *b, int32_t node, enum dnnmem_category cat,
                      enum dm_dtype dtype, uint64_t bytes, int count, const char *const *what);
/* tf.function: the buffer node i's grad kernel for input k writes into, or
 * -1; tf.clip_by_value's grad's transients. */
int32_t dm_tf_grad_target(struct dm_sb *b, int32_t i, int k, int32_t gout);
void dm_tf_clip_transients(struct dm_sb *b, int32_t i, int32_t x, bool forwarded);
/* Keras 3's unfused BatchNormalization and silu under tf.function: the
 * x-sized transients their grads make (tf.c); `after`: called once the grad
 * of input 0 is made, else just before */
void dm_tf_graph_transients(struct dm_sb *b, int32_t i, int32_t x, bool after);
/* eager silu's custom gradient (tf.c): phase 0 before its grad is made,
 * 1 after; held: the two buffers it keeps in between */
void dm_tf_eager_silu_grad(struct dm_sb *b, int32_t i, int32_t x, int phase, int32_t held[2]);
/* eager Keras 3 BatchNormalization's grad on a watched x (tf.c), likewise */
void dm_tf_eager_bn_grad(struct dm_sb *b, int32_t i, int32_t x, int32_t gout, int phase,
                         int32_t held[4]);

/* ---- mxnet.c: MXNet ---- */

/* Whether tensor x is made by a loss operator, the loss under mx_ops. */
bool dm_mx_loss_head(const struct dm_sb *b, int32_t x);
/* What node i keeps under MXNet's rules; false: no row. */
bool dm_mx_save(struct dm_sb *b, int32_t i);
/* A grad contribution reaching tensor x (not a parameter); whether the
 * next one is written into the sum (kAddTo); letting go of those held. */
void dm_mx_deliver(struct dm_sb *b, int32_t x, int32_t gbuf);
bool dm_mx_addto(const struct dm_sb *b, int32_t x);
void dm_mx_release(struct dm_sb *b, int32_t x);
/* Mirroring: which nodes have a copy; in the forward, what a mirrored
 * node's copy reads; after the backward, the reset. */
enum dnnmem_status dm_mx_mirror_plan(struct dm_sb *b, struct dnnmem_error *err);
void dm_mx_mirror_keep(struct dm_sb *b, int32_t i);
void dm_mx_mirror_end(struct dm_sb *b);
/* Input slot k of node n: a data input; one a copy's output feeds. */
bool dm_mx_data_slot(const struct dm_node *n, int k);
bool dm_mx_reads_copy(const struct dm_sb *b, const struct dm_node *n, int k);

/* ---- checkpoint.c ---- */

enum dnnmem_status dm_checkpoint_segments(struct dm_sb *b, struct dnnmem_error *err);

/* ---- backward.c ---- */

/* Node i's backward: its inputs' grads, delivered. */
void dm_backward_node(struct dm_sb *b, int32_t i);
/* Hand grad buffer gbuf (one holder: ours) to tensor x; `view`: made by a
 * view op's backward. */
void dm_deliver(struct dm_sb *b, int32_t x, int32_t gbuf, bool view);
void dm_deliver_slice(struct dm_sb *b, int32_t x, int32_t gbuf, bool view, bool strided);
/* AccumulateGrad of parameter x given its summed grad g. */
void dm_accumulate_grad(struct dm_sb *b, int32_t x, int32_t g, int extra);

/* ---- tf_fit.c: Keras' SGD step under tf.function ---- */

/* Whether its rules apply (TensorFlow, graph execution, SGD). */
bool dm_tf_fit_updates(const struct dm_sb *b);
/* Variable x's grad is complete: its update runs now. */
void dm_tf_fit_update(struct dm_sb *b, int32_t x);
/* Node i's backward at input k (output grad gout): whether that grad is
 * deferred to the backward's end, and the end, which makes them. */
bool dm_tf_fit_defer(struct dm_sb *b, int32_t i, int k, int32_t gout);
void dm_tf_fit_end(struct dm_sb *b);
/* Buffer `buf` is variable x's momentum slot. */
void dm_tf_fit_state(struct dm_sb *b, int32_t x, int32_t buf);

/* ---- loss.c, optimizer.c ---- */

void dm_train_loss(struct dm_sb *b);
void dm_optimizer_state(struct dm_sb *b);
void dm_optimizer_step(struct dm_sb *b);

#endif
