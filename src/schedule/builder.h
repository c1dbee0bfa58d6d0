/*
 * builder.h: the schedule builder (builder.c, workspace.c), the bottom layer
 * under the forward pass (forward.c), generation (generate.c) and the
 * training step (src/train), which schedule.c runs. Buffers are
 * reference-counted: a buffer is freed when its last holder lets go, as a
 * tensor's storage is freed when its last Python or autograd reference dies.
 */
#ifndef DNNMEM_SCHEDULE_BUILDER_H
#define DNNMEM_SCHEDULE_BUILDER_H

#include <string.h>
#include "dnnmem-impl.h"
#include "schedule/cpuconv.h"

/* Per-tensor facts that do not change between iterations. */
enum {
    DM_TF_DEP = 1,          /* derived from input data or dims */
    DM_TF_DATA_USE = 2,     /* read as data by some op */
    DM_TF_DEVICE_USE = 4,   /* read as data by an op that runs on the device */
    DM_TF_META_USE = 8,     /* read as metadata */
    DM_TF_FROM_WEIGHT = 16, /* derived from initializers through data */
    DM_TF_RESIDENT = 32,    /* allocated once before the first op, never freed */
    DM_TF_DEVICE_FEED = 64, /* read by a device op through views (Reshape, Transpose, ...) */
};

/* What generate() makes before the prefill for beam search (generate.c). */
enum { DM_GEN_PROMPT, DM_GEN_MASK, DM_GEN_IDS, DM_GEN_POS, DM_GEN_RSEQ, DM_GEN_SEQ, DM_GEN_RIDX,
       DM_GEN_IDX, DM_GEN_PRE };

/* Holders of a resident buffer: never reached by the references ops take and
 * release. */
#define DM_SB_PINNED (INT32_MAX / 2)

/* Whether input slot k of node n is metadata (ops.def's meta_inputs). */
static inline bool dm_meta_slot(const struct dm_node *n, int k)
{
    return k < 32 && ((dm_ops[n->op].meta_inputs >> k) & 1u);
}

struct dm_sb {
    struct dm_schedule *s;
    const struct dm_graph *g;
    const struct dm_tinfo *t;
    const struct dm_run *run;
    int32_t *refs;        /* per buffer: holders */
    int32_t *cur;         /* per tensor: buffer holding its storage now, or -1 */
    bool *strided;        /* per tensor: a non-contiguous view */
    bool *chlast;         /* per tensor: channels-last strides (layout.c) */
    uint8_t *gradfmt;     /* per tensor: its grad's strides, DM_GF_* (layout.c) */
    int64_t *stride;      /* per tensor: DM_MAX_DIMS element strides (layout.c) */
    uint8_t *flag;        /* per tensor: DM_TF_* */
    int32_t *uses;        /* per tensor: data reads by nodes in one forward pass, and the
                             holds of the modules it is an argument of */
    int32_t *held_start;  /* per node + 1: CSR index into held_list */
    int32_t *held_list;   /* tensors whose module call returns after this node */
    int32_t *in_buf;      /* per input slot of the node running: the buffer it reads
                             (an autocast copy), or -1 for its tensor's own */
    int32_t *amp_cache;   /* per weight tensor: autocast's cached copy, or -1 */
    int32_t *resident;    /* per tensor: its resident buffer, or -1 */
    struct dm_train *train; /* training state (src/train), NULL in inference */
    struct dm_pstate *par;  /* data parallelism's state (src/train/parallel.c), or NULL */
    int32_t *pp_buf;        /* --pp: per tensor x M micro-batches, a receive buffer (the
                               stage's received inputs, its outputs' received grads), or -1 */
    int pp_micro;           /* --pp: the micro-batch running, 0-based */
    int iteration;
    int32_t gen_pre[DM_GEN_PRE]; /* generation: buffers generate() makes before the prefill
                                    (beam search's, dm_sb_generate_setup), or -1 */
    bool blas_handle[2];  /* cuBLAS workspace made: [0] caller thread, [1] autograd thread */
    bool oom;
};

/* A PyTorch run of a graph torch.onnx exported: its Transpose, Reshape and
 * Slice nodes are the permutes, views and slices the model ran, so their
 * strides decide which reshapes copy (forward.c), and its node names and
 * buffers are the model's (schedule.c, workspace.c). TensorFlow's and
 * MXNet's reshapes and XLA's fusions keep the plain rule (a non-contiguous
 * tensor is copied), and so do the HF front end's graphs (src/load/hf),
 * which stand for transformers' code with nodes of their own, not a trace
 * of its strides (DeepSeek-V2's query is a Concat and a Transpose there, a
 * contiguous new_empty in the model), validated with that rule. */
static inline bool dm_sb_torch_onnx(const struct dm_sb *b)
{
    return !b->run->tf_ops && !b->run->mx_ops && !b->run->xla && b->g->format &&
           strcmp(b->g->format, "onnx") == 0;
}

/* ---- fixpoint.c: gradient accumulation's repeated micro-steps ---- */

struct dm_fp;
/* The test's state when run->fp.on (else, or out of memory, NULL: every
 * micro-step built). */
struct dm_fp *dm_fp_new(const struct dm_run *run);
/* A new optimizer step: its micro-steps are compared among themselves. */
void dm_fp_iteration(struct dm_fp *f);
/* At the start of a micro-step: whether the one that ended here repeats the
 * one before it (fixpoint.c's F1-F4), so that the ones up to the last would
 * too. */
bool dm_fp_boundary(struct dm_fp *f, const struct dm_schedule *s);
void dm_fp_free(struct dm_fp *f);

/* ---- builder.c ---- */

/* Open a new step; events until the next call belong to it. */
void dm_sb_step(struct dm_sb *b, enum dm_phase phase, int32_t node);
bool dm_sb_weight_compute_op(enum dm_op op);
/* Allocate a buffer held by `holders` (0: freed right away); -1 on OOM. */
int32_t dm_sb_alloc(struct dm_sb *b, enum dnnmem_category cat, enum dm_dtype dtype,
                    uint64_t bytes, int32_t tensor, int32_t node, const char *what,
                    int32_t holders);
void dm_sb_ref(struct dm_sb *b, int32_t buf, int32_t n);
void dm_sb_unref(struct dm_sb *b, int32_t buf);

/* The buffer input slot k of node n reads: an autocast copy, or its tensor's. */
int32_t dm_sb_input(const struct dm_sb *b, const struct dm_node *n, int k);

/* ---- tfbuild.c ---- */

/* run->tf_build: the variables made as Keras 3 builds them, then the
 * inputs; sets the schedule's measure_from after them. */
void dm_sb_tf_build(struct dm_sb *b);
/* A Keras 3 variable of zeros (an optimizer's slot) made as TF makes it:
 * its value's buffer (one holder) */
int32_t dm_sb_tf_fill_variable(struct dm_sb *b, enum dnnmem_category cat, enum dm_dtype dtype,
                               uint64_t bytes, int32_t x, const char *what);

/* ---- layout.c ---- */

/* Per tensor of g, whether PyTorch gives it channels-last strides (cl: one
 * entry per tensor, written in node order). */
void dm_sb_layout(const struct dm_graph *g, const struct dm_tinfo *t, bool *cl);
/* The same for node i's output alone, from its inputs' entries (the forward
 * pass redoes it once views have taken their format from their strides). */
void dm_sb_layout_node(const struct dm_graph *g, const struct dm_tinfo *t, bool *cl, int32_t i);
/* Whether x's strides make PyTorch suggest channels-last for it. */
bool dm_sb_strides_like_cl(const struct dm_sb *b, int32_t x);
/* Whether x is dense in channels-last (cl) or contiguous order. */
bool dm_sb_dense_in(const struct dm_sb *b, int32_t x, bool cl);
/* The strides of a 4-D tensor's grad: none reaches it, contiguous,
 * channels-last, or a view dense in neither (a narrow or an expand) whose
 * dimension order is the contiguous or the channels-last one. */
enum { DM_GF_NONE, DM_GF_C, DM_GF_CL, DM_GF_C_STRIDED, DM_GF_CL_STRIDED };
/* Per tensor of g, DM_GF_* of its grad in the backward (gf: one entry per
 * tensor, all DM_GF_NONE on entry; cl from dm_sb_layout). */
void dm_sb_grad_layout(const struct dm_graph *g, const struct dm_tinfo *t, const bool *cl,
                       const struct dm_run *run, uint8_t *gf);
/* a * b, saturating at INT64_MAX. */
int64_t dm_sat_mul(int64_t a, int64_t b);
/* Tensor x's strides (DM_MAX_DIMS elements). */
int64_t *dm_sb_stride(const struct dm_sb *b, int32_t x);
/* x as an op allocates it: contiguous, or channels-last where chlast says. */
void dm_sb_dense_strides(struct dm_sb *b, int32_t x);
bool dm_sb_contiguous(const struct dm_sb *b, int32_t x);
/* y's strides as a view of x (torch.reshape); false: no view, reshape copies. */
bool dm_sb_view_strides(struct dm_sb *b, int32_t x, int32_t y);
/* Whether x reshaped to `dims` is a view (no copy). */
bool dm_sb_viewable(const struct dm_sb *b, int32_t x, int rank, const int64_t *dims);

/* ---- workspace.c ---- */

/* Workspaces of the library an op calls: the cuBLAS workspace of the calling
 * thread's handle on its first matmul (kept), a cuDNN workspace around each
 * convolution, oneDNN's buffers around CPU convolutions. `backward`:
 * autograd's own thread and the backward kernels. End frees what begin made. */
struct dm_ws dm_sb_workspace_begin(struct dm_sb *b, const struct dm_node *n, bool backward);
void dm_sb_workspace_end(struct dm_sb *b, struct dm_ws *ws);
/* In a backward step, around the grad of input k (`after`: once it is made):
 * the library's buffers for that grad alone (oneDNN's backward-data and
 * backward-weights passes on the CPU). */
void dm_sb_workspace_grad(struct dm_sb *b, const struct dm_node *n, int k, struct dm_ws *ws,
                          bool after);
/* The bytes of the scratch a backward kernel makes once its grads are made
 * and frees before it returns, before the engine passes them on (THNN's
 * columns for a conv's weight grad); 0 when none. */
uint64_t dm_sb_grad_scratch(const struct dm_sb *b, const struct dm_node *n);
/* Whether a fused Attention node runs FlashAttention (else memory-efficient). */
bool dm_sdpa_flash(const struct dm_sb *b, const struct dm_node *n);
/* Its log-sum-exp's rows per batch and head. */
int64_t dm_sdpa_lse_rows(const struct dm_sb *b, const struct dm_node *n);
/* QuantLinear (ops.def): whether the kernel a quantized layer runs gives its
 * output an autograd history (otherwise only adapters around it get grads),
 * and the dtype and elements of the dequantized weight that history keeps
 * for the input's grad (0: none). */
bool dm_quant_grad(const struct dm_sb *b, const struct dm_node *n);
int64_t dm_quant_saved_weight(const struct dm_sb *b, const struct dm_node *n, enum dm_dtype *dtype);

/* One forward pass (both modes), and one node of it (forward.c). */
void dm_sb_forward(struct dm_sb *b);
void dm_sb_forward_node(struct dm_sb *b, int32_t i, const int32_t *uses, bool save, bool again);

/* Generation (src/schedule/generate.c): the decode steps after a prefill
 * forward whose outputs (logits, present keys and values) are still held. */
enum dnnmem_status dm_sb_generate(struct dm_sb *b, struct dnnmem_error *err);
/* Before the prefill: what generate() makes first (beam search's expanded
 * prompt and mask, its static-shaped sequences and beam indices). */
void dm_sb_generate_setup(struct dm_sb *b);

/* ---- the training step (src/train; its layers: train.c's header) ---- */

/* train.c: the state, and the loss, backward and (at the end of an
 * accumulation cycle) the optimizer of one micro-batch. */
enum dnnmem_status dm_train_init(struct dm_sb *b, struct dnnmem_error *err);
void dm_train_free(struct dm_sb *b);
void dm_train_backward(struct dm_sb *b, bool step_optimizer);
/* keep_outputs: the previous step's outputs let go, after the next forward (train.c). */
void dm_train_release_prev(struct dm_sb *b);
/* optimizer.c */
void dm_train_zero_grad(struct dm_sb *b);
/* tf_fit.c: what Keras' SGD step under tf.function makes as the step starts. */
void dm_tf_fit_begin(struct dm_sb *b);
/* parallel.c: one data-parallel rank (its rules head the file). prepare
 * before the setup (units, which weights are sharded), start after
 * dm_train_init (DDP's buckets, ZeRO's fp32 partition); the hooks around
 * each node's forward and backward, at each parameter's .grad made, at the
 * backward's end, zero_grad and the step; free at the end. */
enum dnnmem_status dm_par_prepare(struct dm_sb *b, struct dnnmem_error *err);
uint64_t dm_par_resident_bytes(const struct dm_sb *b, int32_t x);
uint64_t dm_par_local_bytes(const struct dm_sb *b, int32_t x);
void dm_par_start(struct dm_sb *b);
void dm_par_forward_enter(struct dm_sb *b, int32_t i);
void dm_par_forward_leave(struct dm_sb *b, int32_t i);
void dm_par_forward_gather(struct dm_sb *b, int32_t i); /* --sp: in the node, after its casts */
void dm_par_backward_enter(struct dm_sb *b, int32_t i);
void dm_par_backward_leave(struct dm_sb *b, int32_t i);
void dm_par_grad_ready(struct dm_sb *b, int32_t x);
void dm_par_backward_end(struct dm_sb *b);
bool dm_par_zero(const struct dm_sb *b);
uint64_t dm_par_flat_bytes(const struct dm_sb *b);
void dm_par_zero_grad(struct dm_sb *b);
void dm_par_step_end(struct dm_sb *b);
void dm_par_free(struct dm_sb *b);
/* checkpoint.c: before node i runs forward, whether grad mode is on for it
 * (off inside an activation-checkpointed segment, whose inputs are kept
 * instead). */
bool dm_train_checkpoint_enter(struct dm_sb *b, int32_t i);
/* save.c: after node i ran forward, keep what its backward needs. */
void dm_train_save(struct dm_sb *b, int32_t i);
/* keep.c: after node i's outputs are made (not in a recomputation), keep
 * those the model returns to the loss (a mixture of experts' router logits);
 * whether tensor x requires grad (training only). */
void dm_train_returned(struct dm_sb *b, int32_t i);
bool dm_train_requires_grad(const struct dm_sb *b, int32_t x);
/* keep.c: rows of a LayerNorm's or GroupNorm's mean and rstd that live only
 * while node n runs (not saved for a backward), 0 when none. */
int64_t dm_norm_unsaved_rows(const struct dm_sb *b, const struct dm_node *n);
/* tf.c: TensorFlow's extra buffers inside node i's forward, after its
 * outputs and saved extras are made (--framework tensorflow; tf.c's
 * header); `save`: grad mode is on; `chained`: an eager op chain ran
 * (dm_tf_chain_begin). Also in inference (b->train NULL). */
void dm_train_tf_forward(struct dm_sb *b, int32_t i, bool save, bool chained);
/* tf.c: eager TensorFlow's op chains (tf_eager.def): begin runs node i's
 * steps before its output is made (nothing for other runtimes), end the rest
 * after it. */
#define DM_TF_CHAIN_MAX 3
struct dm_tf_chain {
    const struct tf_eager_row *row; /* NULL: no chain */
    int32_t node;
    int at;                         /* the next step */
    int32_t buf[DM_TF_CHAIN_MAX];   /* live intermediates, or -1 */
};
void dm_tf_chain_begin(struct dm_sb *b, int32_t i, bool save, struct dm_tf_chain *c);
void dm_tf_chain_end(struct dm_sb *b, struct dm_tf_chain *c);
/* tf.c: a Clip to [0, 6], which Keras runs as tf.nn.relu6 */
bool dm_tf_relu6(const struct dm_sb *b, const struct dm_node *n);

#endif
