/*
 * train.c: the training step as PyTorch eager runs it, on top of the forward
 * pass of schedule.c:  zero_grad -> forward -> loss -> backward -> step.
 *
 * Facts behind the backward rules of ops.def (sources: PyTorch's
 * tools/autograd/derivatives.yaml and the generated Functions.h of 1.13,
 * checked with saved_tensors_hooks; summarised in runtime-facts.md §6):
 *  - DM_T_OUT: relu/sigmoid/tanh/softmax/log_softmax/exp/sqrt save their
 *    result (ReluBackward0 threshold_backward(grad, result)); softmax and
 *    log_softmax up to 1.10 their input too (see keep rules).
 *  - DM_T_IN: erf, log, leaky_relu, clamp, avg_pool, 1.13 mean (MeanBackward1
 *    keeps self), pow by a scalar (PowBackward0 keeps self and the exponent)
 *    save their input.
 *  - DM_T_OPERANDS: mul/div/mm/addmm save, for each input that needs a grad,
 *    the operands that grad is computed from (MmBackward0: self for mat2's
 *    grad, mat2 for self's); the generated code skips the others.
 *  - DM_T_CONV: ConvolutionBackward0 saves input and weight, in 1.13 even when
 *    the input needs no grad.
 *  - DM_T_BN: NativeBatchNormBackward0 saves input, weight, running stats and
 *    save_mean, save_invstd: one fp32 value per channel each.
 *  - DM_T_LN: NativeLayerNormBackward0 saves input, mean, rstd: one fp32 per
 *    normalized row each.
 *  - DM_T_POOL_IDX: max_pool2d_with_indices saves input and int64 indices
 *    shaped like the output.
 *  - DM_T_DROPOUT: on CUDA native_dropout keeps a bool mask (PR #63937); on
 *    the CPU _dropout_impl multiplies by a noise tensor of the input dtype that
 *    MulBackward0 keeps. TensorFlow: see below.
 *  - DM_T_EMBED: EmbeddingBackward0 keeps the indices; the weight grad is dense.
 *    Indexing an activation by a tensor (x[idx], IndexBackward0) likewise keeps
 *    the indices, and its grad is zeros shaped like x with index_put_.
 *  - TopK: TopkBackward0 keeps the indices and scatters the grad into zeros
 *    shaped like the input (value_selecting_reduction_backward).
 *  - IndexAdd (index_add_, in place): derivatives.yaml's index_add entry
 *    (source: grad.index_select(dim, index).expand_as(source), and
 *    source.dim()) makes IndexAddBackward0 keep index and source (1.13's
 *    _saved_index, _saved_source); self's grad is grad itself (DM_T_PASS).
 *  - GatherND (x[i, j]): IndexBackward0 (derivatives.yaml's index entry,
 *    index_put_ into zeros of self's size) keeps the indices (DM_T_COPY).
 *  - Detach: a view that records no autograd node (tensor.detach(), the
 *    input of a torch.no_grad() block).
 *  - DM_T_VIEW, DM_T_PASS: views, add, sub, cat save nothing and pass the
 *    incoming grad (or views of it) on; a broadcast input gets a reduced copy.
 *  - every other rule allocates each input grad, shaped like the input.
 * Gradient flow (torch/csrc/autograd): a grad reaching a tensor used twice is
 * added in place into the first (InputBuffer::accumulate, grad mode off);
 * AccumulateGrad steals an incoming grad nobody else holds as the parameter's
 * .grad, and adds later ones in place; saved tensors are released when their
 * node's backward has run.
 *
 * TensorFlow (--framework tensorflow, run->tf_ops). Eagerly
 * (--tf-execution eager) the GradientTape holds every input and output of a
 * recorded op but those its gradient function never reads, listed in
 * tensorflow/python/eager/pywrap_gradient_exclusions.cc (generated from the
 * gradient functions): one table, src/train/tf_tape.def (its header has the
 * entries and the TF op each Keras 2 layer runs), applied by tf_tape_save;
 * an op with no row keeps PyTorch's rule. The facts behind its special rows: 
 *  - Relu: _ReluGrad (python/ops/nn_grad.py) is relu_grad(grad,
 *    op.outputs[0]) and the exclusions drop all of Relu's inputs: the output
 *    is kept, as ReluBackward0 keeps its result. No difference.
 *  - Dropout (tf.keras Dropout calls tf.nn.dropout; python/ops/nn_ops.py
 *    _dropout): ret = x * scale, then ret * cast(random >= rate, x.dtype);
 *    _MulGrad (math_grad.py) reads both operands and Mul is in no exclusion
 *    list, so the tape keeps the scaled input and a float mask, each the
 *    input's size and dtype, where PyTorch's CUDA kernel keeps a bool mask
 *    (the uniform random tensor and the bool comparison are transients, not
 *    scheduled; the first Mul's hold on x is not modelled). Later TF
 *    releases select instead, array_ops.where_v2(keep_mask, ret, 0):
 *    _SelectGradV2 reads the bool mask, and SelectV2, absent from both
 *    lists, keeps its inputs and output; which release switched is not
 *    known here, so the Mul form is modelled for every version.
 *  - BatchNormalization as FusedBatchNormV3 (Keras 2's fused layer, nodes
 *    marked tf_fused_nhwc: channels-last, trainable, training mode).
 *    _BaseFusedBatchNormGrad (nn_grad.py) in training reads x, scale and
 *    reserve_space_1..3 (outputs 3-5); the exclusions drop input 2 (offset)
 *    and outputs 0-2, so the tape also holds inputs 3 and 4 (the moving
 *    statistics as read). reserve_space_1/2 are the batch mean and inverse
 *    variance, [C] of the parameter type (float32) like PyTorch's
 *    save_mean/save_invstd; reserve_space_3 is an output of the size
 *    cudnnGetBatchNormalizationTrainingExReserveSpaceSize asks
 *    (core/kernels/fused_batch_norm_op.cc, CudnnBatchNormAllocatorInOutput),
 *    a size cuDNN does not document for plain BN, taken as 0 as for PyTorch's
 *    cudnn_batch_norm. Kept bytes are PyTorch's but for the [C]-sized moving
 *    statistics read: not modelled. The GPU kernel's layout does differ:
 *    fused_batch_norm_op.cc computes in NHWC only when !is_training ||
 *    (BatchnormSpatialPersistentEnabled() && T == half && V3), the env var
 *    TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT being off by default;
 *    otherwise NHWC data is transposed to NCHW around cuDNN: forward
 *    allocate_temp x_transformed and y_transformed, backward
 *    y_backprop_transformed, x_transformed and x_backprop_transformed, each
 *    x's size and type, besides the outputs (y; x_backprop). Modelled on the
 *    GPU as workspaces freed when the kernel returns, eagerly and under
 *    tf.function where the graph stays NHWC (below). Keras 3 does not fuse (ops.moments and
 *    ops.batch_normalization, separate TF ops): PyTorch's rule stands in.
 *  - LayerNormalization, Keras 2's fused path (nodes marked tf_fused_ln;
 *    keras/layers/normalization/layer_normalization.py): x reshaped to
 *    [1, rows, D, 1] NCHW through FusedBatchNormV3 (training mode) with
 *    scale ones([rows]) and offset zeros([rows]), then `* gamma` and
 *    `+ beta`. The tape keeps x, the ones (input 1), reserve_space_1/2
 *    ([rows] float32: PyTorch's mean and rstd), an empty mean/variance;
 *    Mul keeps the normalized output and AddV2 (no exclusion) `* gamma`'s
 *    result: two more tensors of the output's size (one without beta) and
 *    [rows] float32, kept as saved extras. Backward: _MulGrad makes grad *
 *    gamma (x's grad path, held until FusedBatchNormGradV3 has made dx) and
 *    grad * normalized (reduced at once to gamma's grad). Without the tape
 *    (inference) the normalized output and `* gamma`'s result live in turn
 *    beside the input and the output: one more output-sized transient. In
 *    NCHW no layout transposes. Keras 3's LayerNormalization: PyTorch's rule.
 *
 * tf.function (--tf-execution graph, run->tf_graph; Keras' model.fit and
 * predict compile their step so unless run_eagerly). The graph runs through
 * Grappler and the graph executor; what changes bytes against the tape:
 *  - Lifetimes: the executor drops a tensor after its last consumer and the
 *    step returns no activations: run->dataflow, as JAX's jit.
 *  - Pruning: the gradient graph holds only what the gradient functions
 *    read, dead grads of inputs nothing differentiates being pruned
 *    (model_pruner, dependency_optimizer). Dropout's `ret * mask`: _MulGrad
 *    makes grad * mask (x's path) and grad * ret (the mask's, pruned): the
 *    mask is kept, `ret` (x * scale) is not. Keras 2's fused LayerNorm's
 *    `+ beta`: _AddGrad reads shapes only (Shape ops that run when the
 *    value is made), so `* gamma`'s result is not kept; `* gamma`'s _MulGrad
 *    still reads the normalized output and gamma.
 *  - Layout (generic_layout_optimizer.cc, GetSrcAndDstDataFormats and
 *    Optimize; dm_tf_layout_nhwc): with a GPU the graph is converted NHWC ->
 *    NCHW, or left NHWC when at least half (kConvGPUExpectedDtypeThreshold)
 *    of the GPU Conv2D/Conv3D nodes prefer it: DT_HALF with half the GPUs
 *    sm70+, DT_BFLOAT16 on sm80+, DT_FLOAT on sm80+ with TF32 on (the
 *    default) and no float32 Conv2DBackprop* node (so not in fp32
 *    training). FusedBatchNormGradTransposer converts the training grad, so
 *    an NCHW graph's fused BatchNorm runs NCHW: no kernel transposes. The
 *    Transpose nodes at the converted region's borders (the input batch,
 *    before a Flatten) are not modelled.
 *  - Buffer forwarding (schedule.c, tf_forwards): elementwise kernels call
 *    OpKernelContext::forward_input_or_allocate_output, which hands the
 *    output an input buffer whose only reference the kernel holds (same
 *    type and size); in the graph the executor's is the only one once the
 *    last consumer runs, where eagerly the Python handle holds another.
 *    Modelled in the forward pass, and in the backward for the activation
 *    grads and the binary ops' (tf_grad_target: ReluGrad and the other
 *    BinaryElementWiseOp grads, SigmoidGrad/TanhGrad/SqrtGrad as
 *    SimpleBinaryOp, Exp's and Neg's plain Mul/Neg, Sub's Neg, Mul's and
 *    RealDiv's BinaryOps, clip_by_value's SelectV2): dx is written into dy's
 *    buffer, or a kept operand's, when only the grad kernel holds it. For
 *    the activations forwarding into y's buffer instead of dy's is the same
 *    bytes: nothing allocated either way.
 *  - The remapper's Conv2D+BiasAdd(+Relu) -> _FusedConv2D: dnnmem's Conv
 *    already includes the bias, and the Relu's forwarding takes the
 *    convolution's buffer: nothing more to remove.
 *  - memory_optimizer at DEFAULT_MEM_OPT: no recomputation (MANUAL or
 *    RECOMPUTATION_HEURISTICS only); swapping to the host only when its
 *    static estimate exceeds the device memory (IdentifySwappingCandidates):
 *    not modelled.
 *
 * JAX's jit (run->xla, with run->dataflow; src/schedule/xla.c plans the
 * buffers). What XLA keeps for the backward where it differs from
 * autograd's, read in the optimized HLO of the measured steps
 * (tools/gpu/results/jax-hlo.tar.gz, jax 0.11.2 on an H200):
 *  - MaxPool: jax's reduce_window max differentiates to a select-and-scatter
 *    of the grads onto the pooled input (jax/_src/lax/windowed_reductions.py),
 *    which XLA's GPU compiler expands (xla/service/select_and_scatter_expander.cc)
 *    into a variadic reduce-window over the input and one s32 iota per
 *    dimension, finding each window's selected element, then a scatter-add
 *    of the grads into a broadcast of 0. No indices are kept: the backward
 *    recomputes the pooled values (output-sized, dead at once) and the rank
 *    int32 coordinates (output-sized each), live into the scatter. The
 *    scatter's operand is written in place, so it is materialised: the
 *    input's grad takes its buffer. After a ReLU (jnp.maximum(x, 0), its
 *    broadcast zero fused into the pool's reduce-window) the two zeros are
 *    one multi-output loop fusion the scheduler runs in the forward: both
 *    input-sized buffers live from the pool's forward to its backward (the
 *    CNN's loop_broadcast_fusion{0,1}: 2 x 64 MiB for conv1 at batch 64).
 *    Elsewhere the same expansion is assumed, the scatter operand made in
 *    the backward (the grad's own buffer: nothing more).
 *  - Softmax: jax.nn.softmax's backward needs its output; XLA fuses the
 *    output's computation (exp(x - max) / sum) into the backward's fusion
 *    again, reading the input, while the output stays materialised for the
 *    attention's second matmul: the input (the scaled scores) is kept too
 *    (the transformer: 2 x 16 MiB per layer at batch 8, seq 256).
 *  - Gelu (exact): jax.nn.gelu(approximate=False) is
 *    x * (erf(x / sqrt 2) + 1) / 2, differentiated as written: the product's
 *    VJP keeps its second factor, an input-sized value XLA makes as a
 *    second output of the forward's fusion, besides the input.
 */
#include "schedule/builder.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAVED 16 /* a tape entry holds every input of a ConcatV2 or AddN */

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
    int32_t *addmm_bias; /* per node: 1 + the bias whose grad a fused linear's MatMul makes (0: none) */
    int32_t (*saved)[MAX_SAVED]; /* per node: buffers its backward holds */
    uint8_t *n_saved;    /* per node */
    bool *node_rg;       /* per node: records an autograd node */
    int32_t target;      /* the loss target */
    /* activation checkpointing: segment of each node (-1: none), each
     * segment's first and last node, the inputs each keeps (malloc'd) */
    int32_t *seg, *seg_first, *seg_last, n_seg;
    int32_t **seg_kept, *n_seg_kept;
    int32_t *local_uses;
    int32_t *held;       /* buffers the caller holds until the next forward (outputs, loss) */
    int32_t n_held;
    int32_t *router_buf; /* per g->router entry: the returned router logits' buffer, or -1 */
    /* per tensor: a grad leaf's value and .grad (-1: none), which its
     * AccumulateGrad node holds as long as the graph lives (held's lifetime) */
    int32_t *leaf_val, *leaf_grad;
    bool state_made;     /* the optimizer has created its state */
    /* MXNet (run->mx_ops; the "MXNet" section below): per node, a loss head
     * whose backward runs without a head gradient; per tensor, the first
     * of the gradient contributions an ElementWiseSum still waits for, held
     * in a list (mx_hold, linked by mx_next) */
    bool *mx_head;
    int32_t *mx_first, *mx_hold, *mx_next, n_mx_hold;
    /* MXNet's backward mirroring (the "MXNet" section: mirroring), NULL when
     * nothing is mirrored: per node, mirrored with a copy in the backward
     * graph, and whether that copy has run in this backward; per tensor, the
     * reads of a copy's output by the copies still to run; set while a copy
     * runs */
    bool *mx_mir, *mx_done;
    int32_t *mx_uses;
    bool mx_copying;
};

/* MXNet's rules (the "MXNet" section, before the backward) */
static bool mx_loss_head(const struct dm_sb *b, int32_t x);
static bool mx_save(struct dm_sb *b, int32_t i);
static void mx_deliver(struct dm_sb *b, int32_t x, int32_t gbuf);
static bool mx_addto(const struct dm_sb *b, int32_t x);
static void mx_release(struct dm_sb *b, int32_t x);
static enum dnnmem_status mx_mirror_plan(struct dm_sb *b, struct dnnmem_error *err);
static void mx_mirror_keep(struct dm_sb *b, int32_t i);
static void mx_mirror_copy(struct dm_sb *b, int32_t i);
static void mx_mirror_end(struct dm_sb *b);

bool dm_train_requires_grad(const struct dm_sb *b, int32_t x)
{
    return b->train && x >= 0 && b->train->rg[x];
}

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

/* The first k '/'-separated components of a node name ("/layer1/layer1.0"). */
static size_t name_prefix(const char *name, int k)
{
    size_t len = 0;
    int seen = 0;
    while (name[len]) {
        if (name[len] == '/' && len > 0 && ++seen == k)
            return len;
        len++;
    }
    return seen + 1 == k ? len : 0;
}

/* torch.utils.checkpoint segments, from the specs (include/dnnmem.h). */
static enum dnnmem_status checkpoint_segments(struct dm_sb *b, struct dnnmem_error *err)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    int32_t nn = g->n_nodes;
    tr->seg = malloc(((size_t)nn + 1) * sizeof *tr->seg);
    tr->seg_first = malloc(((size_t)nn + 1) * sizeof *tr->seg_first);
    tr->seg_last = malloc(((size_t)nn + 1) * sizeof *tr->seg_last);
    tr->seg_kept = calloc((size_t)nn + 1, sizeof *tr->seg_kept);
    tr->n_seg_kept = calloc((size_t)nn + 1, sizeof *tr->n_seg_kept);
    tr->local_uses = calloc((size_t)g->n_tensors + 1, sizeof *tr->local_uses);
    if (!tr->seg || !tr->seg_first || !tr->seg_last || !tr->seg_kept || !tr->n_seg_kept ||
        !tr->local_uses)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < nn; i++)
        tr->seg[i] = -1;
    for (size_t c = 0; c < b->run->n_checkpoint; c++) {
        const char *spec = b->run->checkpoint[c];
        const char *dots = strstr(spec, "..");
        int32_t before = tr->n_seg;
        if (dots) { /* A..B */
            char a[256];
            size_t la = (size_t)(dots - spec);
            if (la >= sizeof a)
                return dm_fail(err, DNNMEM_E_USAGE, "--checkpoint %s: pattern too long", spec);
            memcpy(a, spec, la);
            a[la] = '\0';
            int32_t first = -1, last = -1;
            for (int32_t i = 0; i < nn; i++) {
                if (first < 0 && fnmatch(a, g->nodes[i].name, 0) == 0)
                    first = i;
                if (fnmatch(dots + 2, g->nodes[i].name, 0) == 0)
                    last = i;
            }
            if (first >= 0 && last >= first) {
                for (int32_t i = first; i <= last; i++)
                    if (tr->seg[i] >= 0)
                        return dm_fail(err, DNNMEM_E_USAGE,
                                       "--checkpoint %s overlaps another segment at node '%s'",
                                       spec, g->nodes[i].name);
                for (int32_t i = first; i <= last; i++)
                    tr->seg[i] = tr->n_seg;
                tr->seg_first[tr->n_seg] = first;
                tr->seg_last[tr->n_seg++] = last;
            }
        } else { /* prefix glob, optionally ":K" to group K consecutive segments */
            char glob[256];
            const char *colon = strrchr(spec, ':');
            long every = 1;
            size_t gl = strlen(spec);
            if (colon && colon[1]) {
                char *end;
                every = strtol(colon + 1, &end, 10);
                if (*end || every < 1 || every > 100000)
                    return dm_fail(err, DNNMEM_E_USAGE,
                                   "--checkpoint %s: ':K' must be a positive count", spec);
                gl = (size_t)(colon - spec);
            }
            if (gl >= sizeof glob)
                return dm_fail(err, DNNMEM_E_USAGE, "--checkpoint %s: pattern too long", spec);
            memcpy(glob, spec, gl);
            glob[gl] = '\0';
            int depth = 1;
            for (const char *p = glob + 1; *p; p++)
                depth += *p == '/';
            size_t prev_len = 0;
            const char *prev = NULL; /* last node of the open segment, NULL: none open */
            long run = 0;            /* prefixes in the open segment, minus one */
            for (int32_t i = 0; i < nn; i++) {
                const char *name = g->nodes[i].name;
                size_t len = name_prefix(name, depth);
                char key[512];
                bool match = len && len < sizeof key && tr->seg[i] < 0;
                if (match) {
                    memcpy(key, name, len);
                    key[len] = '\0';
                    match = fnmatch(glob, key, 0) == 0;
                }
                if (!match) {
                    /* host-side nodes (constants, shape arithmetic) interleaved
                     * with a module's nodes do not end its segment */
                    const struct dm_node *nd = &g->nodes[i];
                    bool host = nd->n_out > 0 && nd->out[0] >= 0 && b->t[nd->out[0]].is_const;
                    if (!host)
                        prev = NULL;
                    continue;
                }
                bool same = prev && prev_len == len && strncmp(prev, name, len) == 0;
                if (!prev || (!same && ++run % every == 0)) {
                    if (!prev)
                        run = 0;
                    tr->seg_first[tr->n_seg] = tr->seg_last[tr->n_seg] = i;
                    tr->n_seg++;
                } else {
                    for (int32_t j = tr->seg_last[tr->n_seg - 1] + 1; j < i; j++)
                        tr->seg[j] = tr->n_seg - 1; /* the host-side nodes in between */
                }
                tr->seg[i] = tr->n_seg - 1;
                tr->seg_last[tr->n_seg - 1] = i;
                prev = name;
                prev_len = len;
            }
        }
        if (tr->n_seg == before)
            return dm_fail(err, DNNMEM_E_USAGE,
                           "--checkpoint %s: no node of %s matches (node names look like '%s')",
                           spec, g->path, nn ? g->nodes[nn / 2].name : "");
    }
    return DNNMEM_OK;
}

bool dm_train_checkpoint_enter(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    int32_t sg = tr->seg[i];
    if (sg < 0)
        return true;
    if (i != tr->seg_first[sg])
        return false;
    /* CheckpointFunction.save_for_backward(*inputs): the segment's inputs */
    const struct dm_graph *g = b->g;
    int32_t first = tr->seg_first[sg], last = tr->seg_last[sg], n = 0;
    free(tr->seg_kept[sg]);
    tr->seg_kept[sg] = malloc(64 * sizeof(int32_t));
    for (int32_t j = first; j <= last && tr->seg_kept[sg]; j++) {
        const struct dm_node *nd = &g->nodes[j];
        for (int k = 0; k < nd->n_in; k++) {
            int32_t x = nd->in[k];
            if (x < 0 || dm_meta_slot(nd, k) || b->resident[x] >= 0 || b->cur[x] < 0)
                continue;
            int32_t p = g->tensors[x].producer;
            if (p >= first && p <= last)
                continue;
            bool dup = false;
            for (int32_t q = 0; q < n; q++)
                dup |= tr->seg_kept[sg][q] == b->cur[x];
            if (!dup && n < 64) {
                dm_sb_ref(b, b->cur[x], 1);
                tr->seg_kept[sg][n++] = b->cur[x];
            }
        }
    }
    tr->n_seg_kept[sg] = n;
    return false;
}

static void backward_node(struct dm_sb *b, int32_t i);

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
            backward_node(b, j);
        for (int32_t q = 0; q < n_held; q++) {
            dm_sb_unref(b, held_buf[q]);
            dm_sb_unref(b, held_grad[q]);
        }
    }
    for (int32_t q = 0; q < tr->n_seg_kept[sg]; q++)
        dm_sb_unref(b, tr->seg_kept[sg][q]);
    tr->n_seg_kept[sg] = 0;
}

static void make_state(struct dm_sb *b);

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
    tr->held = malloc(((size_t)g->n_outputs + (size_t)g->n_router + 3) * sizeof *tr->held);
    tr->contrib = calloc((size_t)nt + 1, sizeof *tr->contrib);
    tr->left = calloc((size_t)nt + 1, sizeof *tr->left);
    tr->pending = malloc(((size_t)nt + 1) * sizeof *tr->pending);
    tr->pending_view = calloc((size_t)nt + 1, sizeof *tr->pending_view);
    tr->addmm_bias = calloc((size_t)nn + 1, sizeof *tr->addmm_bias);
    tr->leaf_val = malloc(((size_t)nt + 1) * sizeof *tr->leaf_val);
    tr->leaf_grad = malloc(((size_t)nt + 1) * sizeof *tr->leaf_grad);
    if (!tr->rg || !tr->param || !tr->grad || !tr->param_grad || !tr->saved || !tr->n_saved ||
        !tr->node_rg || !tr->held || !tr->contrib || !tr->left || !tr->pending ||
        !tr->pending_view || !tr->addmm_bias || !tr->leaf_val ||
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
                tr->contrib[n->in[k]]++; /* MXNet: every tensor's contributions (mx_deliver) */
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0 && dm_dtype_is_float(t[n->out[k]].dtype) && !t[n->out[k]].absent)
                tr->rg[n->out[k]] = true;
    }
    DM_TRY(checkpoint_segments(b, err));
    if (g->n_outputs < 1 || !tr->rg[g->outputs[0]])
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: the first output does not depend on any trainable parameter; "
                       "nothing to train%s",
                       g->path,
                       g->quant_method ? " (no grad passes through the quantized layers' "
                                         "kernels: adapt the layers after the last adapted one, "
                                         "or for gptq set use_exllama false)"
                                       : "");
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
        DM_TRY(mx_mirror_plan(b, err));
    }
    if (mx_loss_head(b, out0)) {
        /* the label is the symbol's own input (softmax_label) */
    } else if (b->run->loss == DNNMEM_LOSS_CE) {
        int64_t rows = o->rank >= 1 ? o->numel / (o->dims[o->rank - 1] ? o->dims[o->rank - 1] : 1) : 1;
        tr->target = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, (uint64_t)rows * 8, -1, -1,
                                 "target", 1);
    } else if (b->run->loss == DNNMEM_LOSS_MSE) {
        tr->target = dm_sb_alloc(b, DNNMEM_CAT_INPUT, o->dtype, o->bytes, -1, -1, "target", 1);
    }
    if (b->run->optimizer == DNNMEM_OPT_ADAGRAD) {
        make_state(b);
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
    free(tr->addmm_bias);
    free(tr->leaf_val);
    free(tr->leaf_grad);
    free(tr->saved);
    free(tr->n_saved);
    free(tr->node_rg);
    free(tr->held);
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
    free(tr);
    b->train = NULL;
}

/* ---- forward: what each node keeps for its backward -------------------------- */

/* XLA's max pool (header, "JAX's jit"): the scatter operand kept from the
 * forward, whose buffer the input's grad takes. */
#define XLA_SCATTER_OPERAND "zeros (the pool backward's scatter operand)"

static void keep(struct dm_sb *b, int32_t node, int32_t buf)
{
    struct dm_train *tr = b->train;
    if (buf < 0 || tr->n_saved[node] >= MAX_SAVED)
        return;
    dm_sb_ref(b, buf, 1);
    tr->saved[node][tr->n_saved[node]++] = buf;
    if (b->s->buf[buf].category == DNNMEM_CAT_ACTIVATION)
        b->s->buf[buf].category = DNNMEM_CAT_SAVED;
}

static void keep_tensor(struct dm_sb *b, int32_t node, int32_t x)
{
    if (x >= 0)
        keep(b, node, b->cur[x]);
}

/* Keep what input slot k read (an autocast copy, when there was one). */
static void keep_input(struct dm_sb *b, int32_t node, int k)
{
    keep(b, node, dm_sb_input(b, &b->g->nodes[node], k));
}

/* An extra tensor the op makes only for its backward (mask, statistics). */
static void keep_new(struct dm_sb *b, int32_t node, enum dm_dtype dtype, int64_t numel,
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

/* Grappler's layout choice (header, "tf.function"): a GPU graph is turned
 * NHWC -> NCHW unless at least half of its Conv2D/Conv3D nodes
 * (kConvGPUExpectedDtypeThreshold 0.5) prefer NHWC: float16 on sm70+,
 * bfloat16 on sm80+, float32 on sm80+ with TF32 on (TF's default) when no
 * float32 Conv2DBackprop* node exists. Depthwise convolutions
 * (DepthwiseConv2dNative) are not Conv2D nodes; a transposed convolution is
 * a Conv2DBackpropInput. */
bool dm_tf_layout_nhwc(const struct dm_graph *g, const struct dm_tinfo *t, const struct dm_run *run)
{
    int cc = run->compute_capability ? run->compute_capability : DM_CC_DEFAULT;
    int64_t convs = 0, prefer = 0, f32 = 0;
    bool fp32_backprop = false;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        if ((n->op != DM_OP_Conv && n->op != DM_OP_ConvTranspose) || !dm_has_in(n, 0))
            continue;
        enum dm_dtype dt = run->amp != DM_UNDEFINED ? run->amp : t[n->in[0]].dtype;
        /* in training each convolution's grads are Conv2DBackprop* nodes */
        if (dt == DM_FLOAT && (run->train || n->op == DM_OP_ConvTranspose))
            fp32_backprop = true;
        if (n->op != DM_OP_Conv || dm_attr_int(n, "group", 1) != 1)
            continue;
        convs++;
        f32 += dt == DM_FLOAT;
        prefer += (dt == DM_FLOAT16 && cc >= 70) || (dt == DM_BFLOAT16 && cc >= 80);
    }
    if (!fp32_backprop && cc >= 80) /* TF32 float32 convolutions */
        prefer += f32;
    return convs > 0 && 2 * prefer >= convs;
}

/* TensorFlow's rules (header): which nodes run TF's fused kernels. */
static bool tf_fused_bn(const struct dm_sb *b, const struct dm_node *n)
{
    return b->run->tf_ops && b->run->cuda && n->op == DM_OP_BatchNormalization &&
           dm_has_in(n, 0) && dm_attr_int(n, "tf_fused_nhwc", 0) != 0;
}

/* ... and whether its kernel sees NHWC data: always eagerly; under
 * tf.function only where the layout optimizer keeps the graph NHWC */
static bool tf_bn_transposes(const struct dm_sb *b, const struct dm_node *n)
{
    return tf_fused_bn(b, n) && (!b->run->tf_graph || b->run->tf_nhwc);
}

static bool tf_fused_ln(const struct dm_sb *b, const struct dm_node *n)
{
    return b->run->tf_ops && n->op == DM_OP_LayerNormalization && dm_has_out(n, 0) &&
           dm_attr_int(n, "tf_fused_ln", 0) != 0;
}

/* ---- TensorFlow's eager GradientTape (tf_tape.def) ---------------------------- */

/* Which nodes of an op a tf_tape.def row is for. */
enum tf_when {
    TF_W_ANY,       /* every node */
    TF_W_RELU6,     /* Clip to [0, 6]: tf.nn.relu6 (Keras' ReLU(6.), relu6) */
    TF_W_BIAS_ADD,  /* an Add the Keras front end marks tf_bias_add: Dense's bias_add */
    TF_W_GELU_TANH, /* Gelu with approximate "tanh" */
    TF_W_FUSED_BN,  /* Keras 2's fused BatchNormalization (tf_fused_bn) */
    TF_W_FUSED_LN,  /* Keras 2's fused LayerNormalization (tf_fused_ln) */
};

#define TF_IO(k) (1u << (k))
#define TF_ALL 0xffffffffu
#define TF_NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

struct tf_tape_row {
    enum dm_op op;
    enum tf_when when;
    const char *tf_ops;
    uint32_t in, out; /* inputs and outputs the tape holds (bit k: slot k) */
    int chain;        /* intermediates held, output-sized; -m: inputs - m */
    const char *const *what; /* their names, NULL-terminated (the last repeats) */
};

static const struct tf_tape_row tf_tape[] = {
#define DM_TF_TAPE(op, when, tf_ops, in, out, chain, what)                                         \
    {DM_OP_##op, when, tf_ops, in, out, chain, what},
#include "train/tf_tape.def"
#undef DM_TF_TAPE
};

/* A constant scalar input's value, or `dflt` (NaN: unknown). */
static double const_scalar(const struct dm_sb *b, const struct dm_node *n, int k, double dflt)
{
    if (!dm_has_in(n, k))
        return dflt;
    const struct dm_value *v = b->t[n->in[k]].value;
    if (!v || v->n != 1)
        return dflt;
    return v->is_float ? v->f[0] : (double)v->i[0];
}

bool dm_tf_relu6(const struct dm_sb *b, const struct dm_node *n)
{
    return n->op == DM_OP_Clip && const_scalar(b, n, 1, -1) == 0 && const_scalar(b, n, 2, -1) == 6;
}

static bool tf_when_holds(const struct dm_sb *b, const struct dm_node *n, enum tf_when w)
{
    switch (w) {
    case TF_W_ANY: return true;
    case TF_W_RELU6: return dm_tf_relu6(b, n);
    case TF_W_BIAS_ADD: return dm_attr_int(n, "tf_bias_add", 0) != 0;
    case TF_W_GELU_TANH: return strcmp(dm_attr_str(n, "approximate", "none"), "tanh") == 0;
    case TF_W_FUSED_BN: return tf_fused_bn(b, n);
    case TF_W_FUSED_LN: return tf_fused_ln(b, n);
    }
    return false;
}

/* The tape's row for node n, or NULL (PyTorch's rule stands in). */
static const struct tf_tape_row *tf_tape_row(const struct dm_sb *b, const struct dm_node *n)
{
    for (size_t r = 0; r < sizeof tf_tape / sizeof *tf_tape; r++)
        if (tf_tape[r].op == n->op && tf_when_holds(b, n, tf_tape[r].when))
            return &tf_tape[r];
    return NULL;
}

/* `count` buffers of `bytes` each, all live at once, then freed: a kernel's
 * temporaries (allocate_temp) or an op chain's intermediates. */
static void transients(struct dm_sb *b, int32_t node, enum dnnmem_category cat,
                       enum dm_dtype dtype, uint64_t bytes, int count, const char *const *what)
{
    int32_t buf[3] = {-1, -1, -1};
    for (int k = 0; k < count && k < 3; k++)
        buf[k] = dm_sb_alloc(b, cat, dtype, bytes, -1, node, what[k], 1);
    for (int k = 0; k < count && k < 3; k++)
        dm_sb_unref(b, buf[k]);
}

void dm_train_tf_forward(struct dm_sb *b, int32_t i, bool save)
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    if (tf_bn_transposes(b, n) && b->run->train) {
        /* NHWC -> NCHW around cuDNN in training (header) */
        static const char *const what[] = {"x_transformed (NCHW)", "y_transformed (NCHW)"};
        transients(b, i, DNNMEM_CAT_WORKSPACE, t[n->in[0]].dtype, t[n->in[0]].bytes, 2, what);
    }
    if (tf_fused_ln(b, n) && !(save && b->train && b->train->node_rg[i])) {
        /* no tape: the normalized output, then `* gamma`'s, beside the output */
        static const char *const what[] = {"normalized (transient)"};
        transients(b, i, DNNMEM_CAT_ACTIVATION, t[n->out[0]].dtype, t[n->out[0]].bytes, 1, what);
    }
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

/* Rows LayerNormalization normalizes: the input's dims before `axis`. */
static int64_t ln_rows(const struct dm_sb *b, const struct dm_node *n)
{
    int64_t axis = dm_attr_int(n, "axis", -1), rows = 1;
    if (dm_has_in(n, 0)) {
        const struct dm_tinfo *x = &b->t[n->in[0]];
        if (axis < 0)
            axis += x->rank;
        for (int d = 0; d < axis && d < x->rank; d++)
            rows *= x->dims[d];
    }
    return rows;
}

/* What the eager GradientTape holds of node i (tf_tape.def): the inputs
 * and outputs its row names, the intermediates of its op chain, and for
 * Keras 2's fused layers the kernel's reserve spaces. False: no row. */
static bool tf_tape_save(struct dm_sb *b, int32_t i)
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    const struct tf_tape_row *r = tf_tape_row(b, n);
    if (!r)
        return false;
    for (int k = 0; k < n->n_in && k < 32; k++)
        if (((r->in >> k) & 1u) && dm_has_in(n, k) && !dm_meta_slot(n, k))
            keep_input(b, i, k);
    for (int k = 0; k < n->n_out && k < 32; k++)
        if (((r->out >> k) & 1u) && dm_has_out(n, k) && !t[n->out[k]].absent)
            keep_tensor(b, i, n->out[k]);
    int32_t out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    int chain = r->chain;
    if (chain < 0) { /* a merge layer's partial results */
        int data = 0;
        for (int k = 0; k < n->n_in; k++)
            data += dm_has_in(n, k) && !dm_meta_slot(n, k);
        chain = data + chain > 0 ? data + chain : 0;
    }
    for (int c = 0, w = 0; c < chain && out0 >= 0 && r->what; c++) {
        keep_new(b, i, t[out0].dtype, t[out0].numel, r->what[w]);
        w += r->what[w + 1] != NULL;
    }
    if (r->when == TF_W_FUSED_BN && dm_has_in(n, 0)) {
        /* reserve_space_1/2: the batch mean and inverse variance, [C] float32
         * (reserve_space_3, cuDNN's, taken as 0: header) */
        const struct dm_tinfo *x = &t[n->in[0]];
        int64_t c = x->rank >= 2 ? x->dims[1] : 1;
        keep_new(b, i, DM_FLOAT, c, "reserve_space_1 (batch mean)");
        keep_new(b, i, DM_FLOAT, c, "reserve_space_2 (batch inverse variance)");
    }
    if (r->when == TF_W_FUSED_LN && out0 >= 0) {
        /* FusedBatchNormV3 on [1, rows, D, 1] with scale ones([rows]) (input
         * 1, kept), reserve_space_1/2 [rows] float32; `* gamma` keeps the
         * normalized output, `+ beta` (AddV2) `* gamma`'s result (header) */
        int64_t rows = ln_rows(b, n);
        keep_new(b, i, DM_FLOAT, rows, "mean");
        keep_new(b, i, DM_FLOAT, rows, "rstd");
        keep_new(b, i, DM_FLOAT, rows, "ones (scale)");
        keep_new(b, i, t[out0].dtype, t[out0].numel, "normalized");
        if (dm_has_in(n, 2))
            keep_new(b, i, t[out0].dtype, t[out0].numel, "normalized * gamma");
    }
    return true;
}

void dm_train_save(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &g->nodes[i];
    tr->n_saved[i] = 0;
    /* a grad leaf (enable_input_require_grads' hook on an embedding's
     * output) lives while its AccumulateGrad node does: until the caller
     * lets go of the graph */
    for (int k = 0; k < n->n_out; k++) {
        int32_t o = n->out[k];
        if (o >= 0 && tr->rg[o] && g->tensors[o].grad_leaf && tr->leaf_val[o] < 0 &&
            b->cur[o] >= 0) {
            dm_sb_ref(b, b->cur[o], 1);
            tr->leaf_val[o] = b->cur[o];
        }
    }
    if (tr->mx_mir && tr->mx_mir[i] && !tr->mx_copying) {
        mx_mirror_keep(b, i); /* MXNet mirroring: what its copy reads, not what its grad reads */
        return;
    }
    if (!tr->node_rg[i])
        return;
    /* MXNet's and TensorFlow's eager tape's own tables (mx_rules, tf_tape.def) */
    if (b->run->mx_ops && mx_save(b, i))
        return;
    if (b->run->tf_ops && !b->run->tf_graph && tf_tape_save(b, i))
        return;
    int32_t in0 = dm_has_in(n, 0) ? n->in[0] : -1, out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    /* mean over given dims (mean.dim): before 2.0, MeanBackward1 keeps self
     * (its formula reads self.numel(); 1.13's grad_fn has _saved_self),
     * 2.0 keeps only sym_numel. mean() of everything (MeanBackward0) keeps
     * sizes only. */
    int64_t n_axes = -1;
    if (n->op == DM_OP_ReduceMean && b->run->torch_version < 200 &&
        (dm_has_in(n, 1) || dm_attr_ints(n, "axes", &n_axes))) {
        keep_input(b, i, 0);
        return;
    }
    /* TopkBackward0 keeps the int64 indices (value_selecting_reduction_backward
     * scatters the grad into zeros shaped like the input) */
    if (n->op == DM_OP_TopK && dm_has_out(n, 1))
        keep_tensor(b, i, n->out[1]);
    /* IndexAddBackward0 keeps index and source (its formula reads
     * source.dim() and expand_as(source)); IndexBackward0 (x[i, j], GatherND)
     * keeps the indices */
    if (n->op == DM_OP_IndexAdd && dm_has_in(n, 2)) {
        keep_input(b, i, 1);
        keep_input(b, i, 2);
    }
    if (n->op == DM_OP_GatherND && dm_has_in(n, 1))
        keep_input(b, i, 1);
    /* a quantized layer's autograd Function: MatMul8bitLt keeps A
     * (ctx.tensors = (CAt, subA, A)); auto-gptq's torch path keeps its
     * dequantized weight (torch.matmul's MmBackward) */
    if (n->op == DM_OP_QuantLinear) {
        enum dm_dtype wdt = DM_UNDEFINED;
        int64_t w = dm_quant_saved_weight(b, n, &wdt);
        if (w > 0)
            keep_new(b, i, wdt, w, "dequantized_weight");
        if (strcmp(dm_attr_str(n, "method", ""), "bnb8") == 0)
            keep_input(b, i, 0);
    }
    switch (dm_ops[n->op].train) {
    case DM_T_OUT:
        keep_tensor(b, i, out0);
        /* XLA: softmax's backward recomputes its output from the input
         * (header, "JAX's jit") */
        if (b->run->xla && n->op == DM_OP_Softmax)
            keep_input(b, i, 0);
        /* up to PyTorch 1.10, _softmax_backward_data took the input tensor
         * (for its dtype), so SoftmaxBackward and LogSoftmaxBackward kept
         * self as well as the result; 1.11 passes input_dtype (PR #66018;
         * issue #49600) */
        if ((n->op == DM_OP_Softmax || n->op == DM_OP_LogSoftmax) && b->run->torch_version < 111)
            keep_input(b, i, 0);
        break;
    case DM_T_IN:
        /* tf.function: Keras' relu6 is Relu6, whose grad reads its output;
         * tf.clip_by_value's two grads read x and minimum(x, hi) (header,
         * tf_grad_target) */
        if (b->run->tf_graph && dm_tf_relu6(b, n)) {
            keep_tensor(b, i, out0);
            break;
        }
        keep_input(b, i, 0);
        if (b->run->tf_graph && n->op == DM_OP_Clip && out0 >= 0)
            keep_new(b, i, t[out0].dtype, t[out0].numel, "minimum(x, hi) (clip_by_value)");
        /* XLA: jax.nn.gelu(approximate=False) is x * (erf(x / sqrt 2) + 1)
         * / 2 differentiated as written: the product's VJP keeps its
         * second factor too (header, "JAX's jit") */
        if (b->run->xla && n->op == DM_OP_Gelu && in0 >= 0 &&
            strcmp(dm_attr_str(n, "approximate", "none"), "tanh") != 0)
            keep_new(b, i, t[in0].dtype, t[in0].numel, "(erf(x / sqrt 2) + 1) / 2");
        break;
    case DM_T_OPERANDS:
        /* each input that needs a grad keeps the other data operands */
        for (int j = 0; j < n->n_in && j < 2; j++) {
            bool needed = false;
            for (int k = 0; k < n->n_in && k < 2; k++)
                if (k != j && n->in[k] >= 0 && tr->rg[n->in[k]])
                    needed = true;
            if (needed)
                keep_input(b, i, j);
        }
        break;
    case DM_T_CONV:
        keep_input(b, i, 0);
        keep_input(b, i, 1);
        break;
    case DM_T_BN: {
        keep_input(b, i, 0);
        int64_t c = in0 >= 0 && t[in0].rank >= 2 ? t[in0].dims[1] : 1;
        keep_new(b, i, DM_FLOAT, c, "save_mean");
        keep_new(b, i, DM_FLOAT, c, "save_invstd");
        break;
    }
    case DM_T_LN: {
        keep_input(b, i, 0);
        int64_t rows = ln_rows(b, n);
        keep_new(b, i, DM_FLOAT, rows, "mean");
        keep_new(b, i, DM_FLOAT, rows, "rstd");
        /* Keras 2's fused path under tf.function (header; the tape's is
         * tf_tape_save's): `+ beta`'s AddV2 grad is pruned to shapes */
        if (tf_fused_ln(b, n) && out0 >= 0) {
            keep_new(b, i, DM_FLOAT, rows, "ones (scale)");
            keep_new(b, i, t[out0].dtype, t[out0].numel, "normalized");
        }
        break;
    }
    case DM_T_POOL_IDX:
        keep_input(b, i, 0);
        if (b->run->xla && n->op == DM_OP_MaxPool) {
            /* XLA (header, "JAX's jit"): no indices; after a ReLU two
             * input-sized zeros made in the forward */
            int32_t pr = in0 >= 0 ? g->tensors[in0].producer : -1;
            if (pr >= 0 && g->nodes[pr].op == DM_OP_Relu) {
                keep_new(b, i, t[in0].dtype, t[in0].numel, "zeros (relu's max operand)");
                keep_new(b, i, t[in0].dtype, t[in0].numel, XLA_SCATTER_OPERAND);
            }
        } else if (out0 >= 0) {
            keep_new(b, i, DM_INT64, t[out0].numel, "indices");
        }
        break;
    case DM_T_DROPOUT:
        if (in0 >= 0 && b->run->tf_ops) {
            /* tf.function (the tape's is tf_tape_save's): the graph prunes the
             * mask's grad, the only reader of x * scale */
            keep_new(b, i, t[in0].dtype, t[in0].numel, "mask");
        } else if (in0 >= 0) {
            keep_new(b, i, b->run->cuda ? DM_BOOL : t[in0].dtype, t[in0].numel,
                     b->run->cuda ? "mask" : "noise");
        }
        break;
    case DM_T_EMBED: keep_input(b, i, 1); break;
    case DM_T_RNN: {
        /* The input projection's addmm keeps the input. Then, per time step
         * and direction (aten/src/ATen/native/RNN.cpp, LSTMCell on the CPU in
         * 1.13, measured in tests/validation): the gates [B,4H], whose
         * in-place sigmoid/tanh results their backward keeps, and cy, hy and
         * tanh(cy) [B,H]: 7H values per batch row. cuDNN (CUDA) instead keeps
         * the output and a reserve holding the gates: approximated as 4H per
         * step; GRU (3 gates) and RNN (1) follow the same count. */
        keep_input(b, i, 0);
        if (in0 < 0 || t[in0].rank != 3)
            break;
        int64_t hidden = dm_attr_int(n, "hidden_size", 0);
        int64_t dirs = strcmp(dm_attr_str(n, "direction", "forward"), "bidirectional") == 0 ? 2 : 1;
        int64_t gates = n->op == DM_OP_MxRNN ? dm_attr_int(n, "gates", 1)
                        : n->op == DM_OP_LSTM ? 4 : n->op == DM_OP_GRU ? 3 : 1;
        int64_t rows = t[in0].dims[0] * t[in0].dims[1]; /* seq x batch (either layout) */
        int64_t per_row = b->run->cuda ? gates * hidden : (gates + 3) * hidden;
        if (b->run->cuda)
            keep_tensor(b, i, out0);
        keep_new(b, i, t[in0].dtype, rows * dirs * per_row, b->run->cuda ? "reserve" : "cell_states");
        break;
    }
    case DM_T_SDPA: {
        /* ScaledDotProduct{Flash,Efficient}AttentionBackward0 keep query, key,
         * value, the output and the fp32 log-sum-exp of each query row
         * (dm_sdpa_lse_rows); the philox seed and offset are host scalars.
         * Neither keeps the scores or a dropout mask (dropout is regenerated). */
        if (in0 < 0 || t[in0].rank != 4)
            break;
        for (int k = 0; k < 4; k++) /* and attn_mask, when given (the kernel's bias) */
            if (dm_has_in(n, k))
                keep_input(b, i, k);
        keep_tensor(b, i, out0);
        keep_new(b, i, DM_FLOAT, t[in0].dims[0] * t[in0].dims[1] * dm_sdpa_lse_rows(b, n),
                 "logsumexp");
        break;
    }
    case DM_T_NONE:
    case DM_T_VIEW:
    case DM_T_PASS:
    case DM_T_COPY:
    case DM_T_UNMODELLED: break;
    }
}

/* ---- MXNet (--framework mxnet: run->mx_ops) --------------------------------------
 *
 * What MXNet 1.x's backward reads, per operator, replacing the PyTorch rules
 * above for the ops the MXNet front end builds (src/load/mxnet.c maps each
 * MXNet operator onto these IR ops; an ONNX model run under --framework
 * mxnet gets the same rules for the same ops). Facts from apache/mxnet (the
 * code here is our own); the GPU build is assumed (MXNET_USE_CUDNN=1, as the
 * mxnet-cu* wheels):
 *  - Which forward entries a backward node reads is its FGradient: the
 *    entries passed to MakeGradNode (a legacy OperatorProperty's
 *    DeclareBackwardDependency); the graph executor keeps exactly those
 *    (nnvm's Gradient pass, src/nnvm/gradient.cc; PlanMemory's ref counts),
 *    and the imperative runtime saves the same ones
 *    (Imperative::GetBackwardDependency, src/imperative/imperative.cc).
 *    ElemwiseGradUseNone/UseIn/UseOut/UseInOut (src/operator/elemwise_op_common.h)
 *    keep nothing, the inputs, the outputs, both.
 *  - Convolution, Deconvolution (src/operator/nn/convolution.cc,
 *    deconvolution.cc: ConvolutionGrad, DeconvolutionGrad): data, weight
 *    (and bias). FullyConnected (fully_connected.cc, FullyConnectedGrad):
 *    data and weight, whichever needs a gradient.
 *  - BatchNorm (batch_norm.cc, BatchNormGrad): data, gamma, beta, the
 *    moving statistics, and its outputs 1 and 2, the batch mean and var:
 *    [C] each, float32 for float16/32 data (BatchNormType). LayerNorm
 *    (layer_norm.cc, LayerNormGrad): data, gamma and its outputs mean and
 *    std, [rows] each in the data's type.
 *  - Activation (activation.cc, ActivationGrad): the output; with cuDNN the
 *    input too for every act_type but relu ("for ReLU, no need to pass input
 *    data. This enables inplace optimization"), and softsign always.
 *  - LeakyReLU (leaky_relu-inl.h, the backward kernel): leaky, elu and selu
 *    read the output (xelu_grad(output)), prelu the data and gamma, gelu the
 *    data and the output. rrelu's random mask output is not modelled (the
 *    front end builds rrelu as leaky).
 *  - Pooling (pooling.cc, PoolingGrad; cuDNN's pooling backward takes x, y
 *    and dy): data and output, for max, avg and global pooling alike; no
 *    index tensor.
 *  - Dropout (dropout.cc, DropoutGrad): the mask output only. Its type and
 *    shape are the data's in 1.x (FInferType pushes dtype for both outputs);
 *    2.0 packs it to (n + 7) / 8 uint8 ("Use 1-bit in mask").
 *  - SoftmaxOutput (softmax_output-inl.h, DeclareBackwardDependency:
 *    {in_data[kLabel], out_data[kOut]}) and the regression outputs
 *    (regression_output-inl.h: label and output): the op is the loss. Its
 *    backward computes (out - label) * grad_scale without reading a head
 *    gradient, and no loss value is made: dnnmem's --loss does not apply to
 *    such a head (nodes marked mx_loss by the front end). The label is the
 *    symbol's input (softmax_label), bound like the data.
 *  - softmax, log_softmax (softmax.cc, log_softmax.cc: SoftmaxFGradient):
 *    the output. Elementwise: exp, sqrt read the output; log, abs, clip,
 *    _power_scalar, _rdiv_scalar the input; elemwise_mul/div,
 *    broadcast_mul/div, broadcast_maximum/minimum both inputs whichever
 *    needs a gradient (ElemwiseGradUseIn), their scalar forms by a constant
 *    nothing (_backward_mul_scalar: ElemwiseGradUseNone); add, sub, their
 *    broadcast and scalar forms, negative, add_n nothing.
 *  - sum, mean: nothing (ElemwiseGradUseNone); max, min: input and output.
 *  - Concat, Flatten, Reshape, transpose, expand_dims, squeeze, SliceChannel,
 *    Cast, BlockGrad, identity: nothing.
 *  - Embedding (indexing_op.cc: MakeNonlossGradNode(_backward_Embedding,
 *    ..., {n->inputs[0]})): the indices.
 *  - RNN (rnn.cc, RNNGrad: data, parameters, states, outputs and cuDNN's
 *    reserve space): PyTorch's cuDNN rule above (input, output, reserve).
 * Gradient aggregation: a tensor read by several ops gets one gradient
 * contribution from each; nnvm's Gradient pass sums them with the
 * executor's AggregateGradient (src/executor/graph_executor.cc): fewer than
 * MXNET_EXEC_INPLACE_GRAD_SUM_CAP (default 8, run->mx_grad_sum_cap) make one
 * ElementWiseSum node reading them all, which runs after the last is made
 * (every contribution is live until then) and writes its sum in place of
 * the first (elemwise_sum.cc: FInplaceOption {0, 0}); from the cap on, a
 * chain of _grad_add nodes, each in place, which DetectInplaceAddTo
 * (src/executor/inplace_addto_detect_pass.cc, run after PlanMemory) turns
 * into kAddTo requests: each later contribution's producer adds straight
 * into the running sum's storage (the plus node skipped, no buffer of its
 * own) when the contribution has no other reader and the sum's storage is
 * in place. PyTorch adds each later grad in place at once (one transient):
 * the two agree for two contributions. Parameters keep PyTorch's path (a
 * weight read by several ops; the executor's grad array is bound once).
 * MXNET_BACKWARD_DO_MIRROR (run->mx_mirror) and __force_mirroring__: the
 * section "MXNet: backward mirroring" below. Not modelled: MXNet 2.0's
 * cost-based mirroring (MXNET_MEMORY_OPT), transpose's and the other copies MXNet makes where
 * PyTorch makes views (forward), and which op the executor runs when (the
 * eager order stands in for nnvm's topological order). */

enum {
    MXK_IN0 = 1u,   /* input 0 */
    MXK_IN1 = 2u,   /* input 1 */
    MXK_INS = 4u,   /* every data input but constants (ElemwiseGradUseIn) */
    MXK_OUT0 = 8u,  /* output 0 (ElemwiseGradUseOut) */
    MXK_BN = 16u,   /* BatchNorm's mean and var outputs, [C] float32 */
    MXK_LN = 32u,   /* LayerNorm's mean and std outputs, [rows] of the data's type */
    MXK_MASK = 64u, /* Dropout's mask output */
};

/* The one table: IR op -> the MXNet operator(s) it stands for -> what that
 * operator's backward reads (header). An op not listed keeps PyTorch's rule. */
static const struct mx_rule {
    enum dm_op op;
    unsigned keep;
    const char *mx; /* the MXNet operator(s) */
} mx_rules[] = {
    {DM_OP_Conv, MXK_IN0 | MXK_IN1, "Convolution"},
    {DM_OP_ConvTranspose, MXK_IN0 | MXK_IN1, "Deconvolution"},
    {DM_OP_Gemm, MXK_IN0 | MXK_IN1, "FullyConnected"},
    {DM_OP_MatMul, MXK_INS, "FullyConnected (flatten=False), dot, batch_dot"},
    {DM_OP_BatchNormalization, MXK_IN0 | MXK_BN, "BatchNorm"},
    {DM_OP_LayerNormalization, MXK_IN0 | MXK_LN, "LayerNorm"},
    {DM_OP_Relu, MXK_OUT0, "Activation relu, relu"},
    {DM_OP_Sigmoid, MXK_OUT0 | MXK_IN0, "Activation sigmoid (cuDNN)"},
    {DM_OP_Tanh, MXK_OUT0 | MXK_IN0, "Activation tanh (cuDNN)"},
    {DM_OP_Softplus, MXK_OUT0 | MXK_IN0, "Activation softrelu (cuDNN)"},
    {DM_OP_Softsign, MXK_OUT0 | MXK_IN0, "Activation softsign"},
    {DM_OP_LeakyRelu, MXK_OUT0, "LeakyReLU leaky"},
    {DM_OP_Elu, MXK_OUT0, "LeakyReLU elu"},
    {DM_OP_Selu, MXK_OUT0, "LeakyReLU selu"},
    {DM_OP_PRelu, MXK_IN0, "LeakyReLU prelu"},
    {DM_OP_Gelu, MXK_IN0 | MXK_OUT0, "LeakyReLU gelu"},
    {DM_OP_MaxPool, MXK_IN0 | MXK_OUT0, "Pooling max"},
    {DM_OP_AveragePool, MXK_IN0 | MXK_OUT0, "Pooling avg"},
    {DM_OP_GlobalMaxPool, MXK_IN0 | MXK_OUT0, "Pooling max, global_pool"},
    {DM_OP_GlobalAveragePool, MXK_IN0 | MXK_OUT0, "Pooling avg, global_pool"},
    {DM_OP_Dropout, MXK_MASK, "Dropout"},
    {DM_OP_Softmax, MXK_OUT0, "softmax, SoftmaxActivation"},
    {DM_OP_LogSoftmax, MXK_OUT0, "log_softmax"},
    {DM_OP_Exp, MXK_OUT0, "exp"},
    {DM_OP_Sqrt, MXK_OUT0, "sqrt"},
    {DM_OP_Log, MXK_IN0, "log"},
    {DM_OP_Abs, MXK_IN0, "abs"},
    {DM_OP_Clip, MXK_IN0, "clip"},
    {DM_OP_Pow, MXK_IN0, "_power_scalar"},
    {DM_OP_Mul, MXK_INS, "elemwise_mul, broadcast_mul, _mul_scalar"},
    {DM_OP_Div, MXK_INS, "elemwise_div, broadcast_div, _div_scalar, _rdiv_scalar"},
    {DM_OP_Max, MXK_INS, "broadcast_maximum, _maximum_scalar"},
    {DM_OP_Min, MXK_INS, "broadcast_minimum, _minimum_scalar"},
    {DM_OP_Add, 0, "elemwise_add, broadcast_add, _plus_scalar"},
    {DM_OP_Sub, 0, "elemwise_sub, broadcast_sub, _minus_scalar, _rminus_scalar"},
    {DM_OP_Sum, 0, "add_n, ElementWiseSum"},
    {DM_OP_Neg, 0, "negative"},
    {DM_OP_ReduceSum, 0, "sum"},
    {DM_OP_ReduceMean, 0, "mean"},
    {DM_OP_ReduceMax, MXK_IN0 | MXK_OUT0, "max"},
    {DM_OP_ReduceMin, MXK_IN0 | MXK_OUT0, "min"},
    {DM_OP_Concat, 0, "Concat"},
    {DM_OP_Flatten, 0, "Flatten"},
    {DM_OP_Reshape, 0, "Reshape"},
    {DM_OP_MxReshape, 0, "Reshape (special values)"},
    {DM_OP_Transpose, 0, "transpose"},
    {DM_OP_Unsqueeze, 0, "expand_dims"},
    {DM_OP_Squeeze, 0, "squeeze"},
    {DM_OP_Split, 0, "SliceChannel"},
    {DM_OP_Cast, 0, "Cast"},
    {DM_OP_Identity, 0, "BlockGrad, _copy, identity"},
    {DM_OP_Gather, MXK_IN1, "Embedding"},
};

const char *dm_mx_rule_name(enum dm_op op)
{
    for (size_t r = 0; r < sizeof mx_rules / sizeof *mx_rules; r++)
        if (mx_rules[r].op == op)
            return mx_rules[r].mx;
    return NULL;
}

/* Whether tensor x is the output of an MXNet loss operator (SoftmaxOutput,
 * the regression outputs) that acts as the loss under mx_ops. */
static bool mx_loss_head(const struct dm_sb *b, int32_t x)
{
    if (!b->run->mx_ops || x < 0)
        return false;
    int32_t p = b->g->tensors[x].producer;
    return p >= 0 && dm_attr_int(&b->g->nodes[p], "mx_loss", 0) != 0;
}

static bool mx_const(const struct dm_sb *b, int32_t x)
{
    return x >= 0 && (b->g->tensors[x].role == DM_ROLE_CONSTANT || b->t[x].is_const);
}

/* What node i keeps for its backward under MXNet's rules; false: no row
 * (PyTorch's rule stands). */
static bool mx_save(struct dm_sb *b, int32_t i)
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    int32_t in0 = dm_has_in(n, 0) ? n->in[0] : -1, out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    if (out0 >= 0 && mx_loss_head(b, out0)) { /* {label, output}: the label is an input */
        keep_tensor(b, i, out0);
        return true;
    }
    const struct mx_rule *r = NULL;
    for (size_t k = 0; k < sizeof mx_rules / sizeof *mx_rules && !r; k++)
        if (mx_rules[k].op == n->op)
            r = &mx_rules[k];
    if (!r)
        return false;
    unsigned keep = r->keep;
    if (keep & MXK_INS) {
        /* a scalar form (x op constant) reads nothing, but _rdiv_scalar
         * (constant / x) and _maximum/_minimum_scalar read x */
        bool c0 = mx_const(b, in0), c1 = dm_has_in(n, 1) && mx_const(b, n->in[1]);
        bool scalar_none = (n->op == DM_OP_Mul && (c0 || c1)) || (n->op == DM_OP_Div && c1);
        for (int k = 0; k < n->n_in && k < 2 && !scalar_none; k++)
            if (dm_has_in(n, k) && !mx_const(b, n->in[k]) && !dm_meta_slot(n, k))
                keep_input(b, i, k);
    }
    if ((keep & MXK_IN0) && in0 >= 0)
        keep_input(b, i, 0);
    if ((keep & MXK_IN1) && dm_has_in(n, 1))
        keep_input(b, i, 1);
    if ((keep & MXK_OUT0) && out0 >= 0)
        keep_tensor(b, i, out0);
    if ((keep & MXK_BN) && in0 >= 0) {
        int64_t c = t[in0].rank >= 2 ? t[in0].dims[1] : 1;
        keep_new(b, i, DM_FLOAT, c, "mean (output 1)");
        keep_new(b, i, DM_FLOAT, c, "var (output 2)");
    }
    if ((keep & MXK_LN) && in0 >= 0) {
        int64_t rows = ln_rows(b, n);
        keep_new(b, i, t[in0].dtype, rows, "mean (output 1)");
        keep_new(b, i, t[in0].dtype, rows, "std (output 2)");
    }
    if ((keep & MXK_MASK) && in0 >= 0) {
        if (b->run->mx_version >= 200)
            keep_new(b, i, DM_UINT8, (t[in0].numel + 7) / 8, "mask (1 bit per element)");
        else
            keep_new(b, i, t[in0].dtype, t[in0].numel, "mask");
    }
    return true;
}

/* A contribution held for the ElementWiseSum of x. */
static void mx_hold(struct dm_sb *b, int32_t x, int32_t gbuf)
{
    struct dm_train *tr = b->train;
    int32_t h = tr->n_mx_hold++;
    tr->mx_hold[h] = gbuf;
    tr->mx_next[h] = tr->mx_first[x];
    tr->mx_first[x] = h;
}

/* Let go of the contributions held for x (the sum has run). */
static void mx_release(struct dm_sb *b, int32_t x)
{
    struct dm_train *tr = b->train;
    for (int32_t h = tr->mx_first[x]; h >= 0; h = tr->mx_next[h])
        dm_sb_unref(b, tr->mx_hold[h]);
    tr->mx_first[x] = -1;
}

/* Whether the next contribution to x is written by its producer into the
 * running sum with kAddTo (header): x takes at least the cap's contributions,
 * one has come, and its buffer is the sum's own (not shared, not an
 * expansion). */
static bool mx_addto(const struct dm_sb *b, int32_t x)
{
    const struct dm_train *tr = b->train;
    if (!b->run->mx_ops || tr->param[x] || tr->contrib[x] < b->run->mx_grad_sum_cap)
        return false;
    int32_t g0 = tr->grad[x];
    return g0 >= 0 && b->refs[g0] == 1 && b->s->buf[g0].bytes >= b->t[x].bytes;
}

/* One gradient contribution reaching tensor x (not a parameter), summed as
 * AggregateGradient does (header). gbuf < 0: written with kAddTo. */
static void mx_deliver(struct dm_sb *b, int32_t x, int32_t gbuf)
{
    struct dm_train *tr = b->train;
    tr->left[x]--;
    int32_t old = tr->grad[x];
    if (gbuf < 0) {
        /* kAddTo into old */
    } else if (old < 0) {
        tr->grad[x] = gbuf;
    } else if (tr->contrib[x] >= b->run->mx_grad_sum_cap) {
        /* _grad_add chain without kAddTo (the sum is not in place): a new
         * sum of the two, then in place */
        if (b->refs[old] > 1 || b->s->buf[old].bytes < b->t[x].bytes) {
            tr->grad[x] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, b->t[x].bytes, x,
                                      -1, "grad (sum)", 1);
            dm_sb_unref(b, old);
        }
        dm_sb_unref(b, gbuf);
    } else {
        mx_hold(b, x, gbuf); /* ElementWiseSum waits for them all */
    }
    if (tr->left[x] > 0 || tr->mx_first[x] < 0)
        return;
    /* ElementWiseSum: in place of the first when it dies there, else a new
     * entry */
    old = tr->grad[x];
    if (b->refs[old] > 1 || b->s->buf[old].bytes < b->t[x].bytes) {
        tr->grad[x] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, b->t[x].bytes, x, -1,
                                  "grad (sum)", 1);
        dm_sb_unref(b, old);
    }
    mx_release(b, x);
}

/* ---- MXNet: backward mirroring (MXNET_BACKWARD_DO_MIRROR) ----------------------
 *
 * Facts from apache/mxnet 1.x (the code here is our own):
 *  - Which nodes: GraphExecutor::InitFullGraph (src/executor/graph_executor.cc)
 *    hands nnvm's Gradient pass a need_mirror function: no variable; never
 *    Dropout; any node whose attribute __force_mirroring__ is true (even with
 *    mirroring off); else, only when MXNET_BACKWARD_DO_MIRROR (default 0) is
 *    set, every op but Convolution, FullyConnected, Concat and SoftmaxOutput.
 *    Older 1.x releases (the file with ../engine/profiler.h) also spare
 *    BatchNorm and CuDNNBatchNorm; the 1.6+ file (MXNET_ELIMINATE_COMMON_EXPR,
 *    ObjectPtr) does not. Which release between 1.1 and 1.5 dropped them was
 *    not found: they are spared here before 1.6 (mx_version < 106). The MXNet
 *    front end tags each IR node with its operator's verdict (src/load/mxnet.c,
 *    "mx_mirror"); an untagged node (an ONNX graph) goes by its IR op.
 *  - How (the baseline algorithm: MXGradient, src/nnvm/gradient.cc of 1.x, as
 *    nnvm/src/pass/gradient.cc before it): in topological order each mirrored
 *    node gets a copy ("_mirror") whose inputs are mirror_map of its inputs:
 *    a mirrored producer's copy, else the forward's own entry. Each node's
 *    FGradient is then called with mirror_map of the node: a mirrored node's
 *    gradient reads the copy's outputs and inputs, a node never mirrored
 *    reads its own forward entries, even those a mirrored node made (a
 *    Convolution after a mirrored relu keeps the relu's forward output).
 *    MakeGradNode (src/operator/operator_common.h, MakeNode) gives every
 *    gradient node a control dependency on that forward node, so the copy of
 *    every mirrored node whose gradient runs is in the graph, as is every
 *    copy another live copy reads. Imperative autograd and CachedOp pass no
 *    mirror function (Imperative::Backward: MXGradient(..., nullptr, ...)):
 *    only the symbolic executor mirrors; --mxnet-executor naive gets the same
 *    graph in the eager order.
 *  - So: a mirrored node keeps nothing for its gradient in the forward, but
 *    the entries its copy reads that no copy makes (weights, data, the
 *    outputs of nodes never mirrored) are kept from the forward until the
 *    copy runs; its own outputs die after their forward readers unless a
 *    node never mirrored keeps them. In the backward the copy runs as the
 *    forward op does (dm_sb_forward_node: in place, views, workspaces)
 *    right before the first reader, the copies it reads first; its outputs
 *    live while a copy still to run reads them or its gradient keeps them
 *    (mx_save on the copy's entries). nnvm's own topological order is not
 *    modelled (the eager reverse order stands in, as for the rest). */

/* need_mirror (above) for node i, before liveness */
static bool mx_need_mirror(const struct dm_sb *b, int32_t i)
{
    const struct dm_node *n = &b->g->nodes[i];
    int32_t out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    if (out0 < 0 || b->t[out0].is_const || b->train->seg[i] >= 0)
        return false; /* host-side values; inside an activation checkpoint */
    int64_t v = dm_attr_int(n, "mx_mirror", -1);
    if (v < 0) { /* untagged: by IR op */
        if (n->op == DM_OP_Dropout || n->op == DM_OP_Conv || n->op == DM_OP_Gemm ||
            n->op == DM_OP_Concat || (n->op == DM_OP_Softmax && dm_attr_int(n, "mx_loss", 0)))
            v = DM_MX_MIRROR_NEVER;
        else if (n->op == DM_OP_BatchNormalization)
            v = DM_MX_MIRROR_OLD_NEVER;
        else
            v = DM_MX_MIRROR_YES;
    }
    switch (v) {
    case DM_MX_MIRROR_FORCED: return true;
    case DM_MX_MIRROR_YES: return b->run->mx_mirror;
    case DM_MX_MIRROR_OLD_NEVER: return b->run->mx_mirror && b->run->mx_version >= 106;
    default: return false;
    }
}

static bool mx_data_slot(const struct dm_node *n, int k)
{
    return n->in[k] >= 0 && !dm_meta_slot(n, k);
}

/* Which mirrored nodes have a copy in the backward graph: those whose
 * gradient runs, and those a live copy reads (last node first). */
static enum dnnmem_status mx_mirror_plan(struct dm_sb *b, struct dnnmem_error *err)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    int32_t nn = g->n_nodes;
    bool *read = calloc((size_t)nn + 1, sizeof *read);
    if (!read)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    for (int32_t i = nn - 1; i >= 0; i--) {
        const struct dm_node *n = &g->nodes[i];
        int data = 0;
        for (int k = 0; k < n->n_in; k++)
            data += mx_data_slot(n, k);
        /* its kept inputs share the node's saved slots */
        if (!(tr->node_rg[i] || read[i]) || data > MAX_SAVED || !mx_need_mirror(b, i))
            continue;
        if (!tr->mx_mir) {
            tr->mx_mir = calloc((size_t)nn + 1, sizeof *tr->mx_mir);
            tr->mx_done = calloc((size_t)nn + 1, sizeof *tr->mx_done);
            tr->mx_uses = calloc((size_t)g->n_tensors + 1, sizeof *tr->mx_uses);
            if (!tr->mx_mir || !tr->mx_done || !tr->mx_uses) {
                free(read);
                return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
            }
        }
        tr->mx_mir[i] = true;
        for (int k = 0; k < n->n_in; k++)
            if (mx_data_slot(n, k) && g->tensors[n->in[k]].producer >= 0)
                read[g->tensors[n->in[k]].producer] = true;
    }
    free(read);
    if (tr->mx_mir)
        mx_mirror_end(b); /* the first backward's counts */
    return DNNMEM_OK;
}

/* Whether input slot k of node n reads a copy's output (mirror_map). */
static bool mx_reads_copy(const struct dm_sb *b, const struct dm_node *n, int k)
{
    int32_t p = b->g->tensors[n->in[k]].producer;
    return p >= 0 && b->train->mx_mir[p];
}

/* Forward, mirrored node i: keep, slot by slot, the entries its copy will
 * read from the forward (-1 where there is no buffer). */
static void mx_mirror_keep(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_node *n = &b->g->nodes[i];
    tr->n_saved[i] = 0;
    for (int k = 0; k < n->n_in; k++) {
        if (!mx_data_slot(n, k) || mx_reads_copy(b, n, k))
            continue;
        int32_t buf = dm_sb_input(b, n, k);
        if (buf >= 0) {
            dm_sb_ref(b, buf, 1);
            if (b->s->buf[buf].category == DNNMEM_CAT_ACTIVATION)
                b->s->buf[buf].category = DNNMEM_CAT_SAVED;
        }
        tr->saved[i][tr->n_saved[i]++] = buf;
    }
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
        if (mx_data_slot(n, k) && mx_reads_copy(b, n, k))
            mx_copy_run(b, b->g->tensors[n->in[k]].producer);
    /* its inputs: a copy's output (one of the reads its holders count), or
     * the forward's entry kept for it, one more holder that the op's
     * release takes back */
    int32_t kept[MAX_SAVED];
    int n_kept = tr->n_saved[i];
    memcpy(kept, tr->saved[i], (size_t)n_kept * sizeof *kept);
    for (int k = 0, s = 0; k < n->n_in; k++) {
        if (!mx_data_slot(n, k))
            continue;
        int32_t x = n->in[k];
        if (mx_reads_copy(b, n, k)) {
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

/* After the backward: let go of copies' outputs no copy read (their
 * readers' gradients never ran), and reset for the next step. */
static void mx_mirror_end(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; tr->mx_done[i] && k < n->n_out; k++) {
            int32_t o = n->out[k];
            for (; o >= 0 && tr->mx_uses[o] > 0; tr->mx_uses[o]--)
                dm_sb_unref(b, b->cur[o]);
        }
        tr->mx_done[i] = false;
    }
    /* the reads each copy's outputs will get in the next backward */
    for (int32_t x = 0; x < g->n_tensors; x++)
        tr->mx_uses[x] = 0;
    for (int32_t q = 0; q < g->n_nodes; q++) {
        const struct dm_node *n = &g->nodes[q];
        for (int k = 0; tr->mx_mir[q] && k < n->n_in; k++)
            if (mx_data_slot(n, k) && mx_reads_copy(b, n, k))
                tr->mx_uses[n->in[k]]++;
    }
}

/* ---- backward ------------------------------------------------------------------ */

/* AccumulateGrad of parameter x given its summed grad g (our holder, plus
 * `extra` references the view op that delivered it still holds; PyTorch's
 * view is a tensor of its own): added into .grad in place when .grad exists
 * (kept by zero_grad in 1.13, by accumulation, or with no zero_grad), else
 * stolen as .grad when nothing else holds it and it has the parameter's
 * layout, else cloned (accumulate_grad.h). */
static void accumulate_grad(struct dm_sb *b, int32_t x, int32_t g, int extra)
{
    struct dm_train *tr = b->train;
    if (tr->param_grad[x] >= 0) {
        dm_sb_unref(b, g);
    } else if (b->refs[g] == 1 + extra && b->s->buf[g].bytes == b->t[x].bytes) {
        b->s->buf[g].category = DNNMEM_CAT_GRADIENT;
        b->s->buf[g].tensor = x;
        b->s->buf[g].what = "grad";
        tr->param_grad[x] = g;
    } else {
        tr->param_grad[x] = dm_sb_alloc(b, DNNMEM_CAT_GRADIENT, b->t[x].dtype, b->t[x].bytes, x,
                                        -1, "grad", 1);
        dm_sb_unref(b, g);
    }
}

/* Hand grad buffer `gbuf` (one holder: ours) to tensor x; `view`: it came
 * through a view op's backward (TBackward's .t() of a Linear weight's grad,
 * a reshape), which shares its storage with the grad it was made from. */
static void deliver(struct dm_sb *b, int32_t x, int32_t gbuf, bool view)
{
    struct dm_train *tr = b->train;
    if (b->run->mx_ops && !tr->param[x]) {
        mx_deliver(b, x, gbuf);
        return;
    }
    if (gbuf < 0)
        return;
    if (tr->param[x]) {
        /* the engine gathers a parameter's grads of one backward in its
         * AccumulateGrad node's input buffer, the first held until the last
         * arrives: each later one is added into the held grad in place when
         * only the buffer holds it, whole and with a storage of its own, else
         * old + new is made out of place (input_buffer.cpp, accumulate and
         * can_accumulate_inplace): a tied embedding's first grad, the output
         * layer's weight grad, is a view, so three [vocab, hidden] tensors
         * are live at the sum (measured: PyTorch 1.13 on the CPU, and
         * DistilBERT on the H200, tools/gpu/results) */
        tr->left[x]--;
        int32_t p = tr->pending[x];
        if (p < 0 && tr->left[x] <= 0) {
            accumulate_grad(b, x, gbuf, view ? 1 : 0);
            return;
        }
        if (p < 0) {
            tr->pending[x] = gbuf;
            tr->pending_view[x] = view;
        } else if (tr->pending_view[x] || b->refs[p] > 1 || b->s->buf[p].bytes < b->t[x].bytes) {
            tr->pending[x] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, b->t[x].bytes, x,
                                         -1, "grad", 1);
            tr->pending_view[x] = false;
            dm_sb_unref(b, p);
            dm_sb_unref(b, gbuf);
        } else {
            dm_sb_unref(b, gbuf);
        }
        if (tr->left[x] <= 0) {
            p = tr->pending[x];
            tr->pending[x] = -1;
            accumulate_grad(b, x, p, 0);
        }
        return;
    }
    int32_t old = tr->grad[x];
    if (old < 0) {
        tr->grad[x] = gbuf;
    } else if (b->s->buf[old].bytes < b->t[x].bytes && b->s->buf[gbuf].bytes < b->t[x].bytes) {
        dm_sb_unref(b, gbuf); /* two expanded scalars: stays an expansion */
    } else if (b->s->buf[old].bytes < b->t[x].bytes || b->refs[old] > 1) {
        /* an expanded (SumBackward) or shared grad cannot take the add in
         * place: InputBuffer::accumulate computes old + new out of place */
        tr->grad[x] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, b->t[x].bytes, x, -1,
                                  "grad", 1);
        dm_sb_unref(b, old);
        dm_sb_unref(b, gbuf);
    } else { /* InputBuffer: added in place into the first */
        dm_sb_unref(b, gbuf);
    }
}

static bool same_shape(const struct dm_tinfo *a, const struct dm_tinfo *c)
{
    if (a->rank != c->rank)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != c->dims[d])
            return false;
    return true;
}

/* TensorFlow under tf.function: gradient kernels that write the input's grad
 * into a buffer they read when the executor holds its only reference
 * (OpKernelContext::forward_input_or_allocate_output, as tf_forwards in
 * src/schedule/schedule.c does for the forward pass):
 *  - numeric_op.h's BinaryElementWiseOp, forward_input_or_allocate_output
 *    ({0, 1}, ...): ReluGrad, Relu6Grad, EluGrad, SeluGrad, LeakyReluGrad
 *    (relu_op.h), SoftplusGrad, SoftsignGrad (softplus_op.h, softsign_op.h),
 *    each called with the incoming grad as input 0 (nn_grad.py);
 *  - cwise_ops_common.h's SimpleBinaryOp, forward_input_or_allocate_output
 *    ({0, 1}, ...) when input and output types agree: SigmoidGrad, TanhGrad,
 *    SqrtGrad (cwise_op_sigmoid.cc etc., functors in cwise_ops_gradients.h),
 *    called (y, grad) by math_grad.py;
 *  - _ExpGrad's grad * y (a Mul, cwise_ops_common.h's BinaryOp, which
 *    forwards either input when both have the output's shape: ({0, 1}, ...))
 *    and _NegGrad's -grad (a Neg, UnaryOp: ({0}, ...)).
 * The binary ops' gradients (math_grad.py), with x, y the forward inputs:
 *  - _AddGrad: (grad, grad) when the shapes agree, else reduce_sum(grad, rx)
 *    reshaped; a reduction over no axis returns its input's buffer
 *    (reduction_ops_common.h, "Special case. Reduces nothing": CopyFrom):
 *    the grad itself either way, as the PASS rule already aliases it.
 *  - _SubGrad: (grad, -grad): y's grad is a Neg (UnaryOp) of the grad, which
 *    takes its buffer when nothing else holds it (x needs no grad).
 *  - _MulGrad: (mul(grad, y), mul(grad, x)): BinaryOps; x's reads grad and
 *    y, y's reads grad and x. A kernel takes the grad's buffer when no later
 *    grad of the node reads it, or the operand it reads when the backward
 *    kept it for this node alone (refcount one) and no later grad reads it.
 *  - _RealDivGrad: (realdiv(grad, y), grad * realdiv(realdiv(-x, y), y)):
 *    x's reads grad and y; y's chain reads x, y and grad, each step a
 *    BinaryOp or UnaryOp that forwards its dying input, so y's grad ends in
 *    one buffer: the grad's, x's or y's when one is free, else a new one.
 *  - Clip: tf.nn.relu6 (Keras' ReLU(6.), relu6) has Relu6Grad above.
 *    tf.clip_by_value (minimum then maximum, clip_ops.py) differentiates by
 *    _MaximumMinimumGrad: zeros(shape(grad)), a bool mask (greater_equal /
 *    less_equal of the forward values), where_v2(mask, grad, zeros), whose
 *    SelectV2Op calls forward_input_or_allocate_output({"t", "e"}, ...)
 *    (select_op.cc): the grad's buffer when free, else the zeros'; the bound's
 *    grad (a scalar's reduce) is pruned. Maximum's grad and Minimum's run in
 *    turn: one zeros and one mask live at a time (tf_clip_transients).
 * Under autocast the grad is made in another type: no forwarding. */
static bool tf_grad_forwards(const struct dm_sb *b, const struct dm_node *n)
{
    switch (n->op) {
    case DM_OP_Relu: case DM_OP_Elu: case DM_OP_Selu: case DM_OP_LeakyRelu:
    case DM_OP_Softplus: case DM_OP_Softsign: case DM_OP_Sigmoid: case DM_OP_Tanh:
    case DM_OP_Sqrt: case DM_OP_Exp: case DM_OP_Neg: case DM_OP_Clip:
        return true;
    default:
        (void)b;
        return false;
    }
}

/* Whether the grad of node n's input k reads operand j (the binary ops
 * above; the grad itself is read by every one). */
static bool tf_grad_reads(const struct dm_node *n, int k, int j)
{
    switch (n->op) {
    case DM_OP_Mul: return j == 1 - k;
    case DM_OP_Div: return j == 1 || k == 1;
    default: return false;
    }
}

/* The buffer node i's grad kernel for input k writes into under tf.function
 * (above), or -1: a new one. `gout`: the output's grad. */
static int32_t tf_grad_target(struct dm_sb *b, int32_t i, int k, int32_t gout)
{
    struct dm_train *tr = b->train;
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    int32_t x = n->in[k];
    if (!b->run->tf_graph || gout < 0 || tr->param[x])
        return -1;
    int data = 0;
    for (int j = 0; j < n->n_in; j++)
        data += dm_has_in(n, j) && !dm_meta_slot(n, j);
    bool binary = n->op == DM_OP_Sub || n->op == DM_OP_Mul || n->op == DM_OP_Div;
    if (!(data == 1 && tf_grad_forwards(b, n)) && !(binary && data == 2 && k < 2) )
        return -1;
    if (n->op == DM_OP_Sub && k == 0)
        return -1; /* the grad itself (the PASS alias), or its reduction */
    /* later grads of this node: they read the grad, and maybe operand j */
    bool later_grad = false, later_reads[2] = {false, false};
    for (int j = k + 1; j < n->n_in && j < 2; j++)
        if (dm_has_in(n, j) && !dm_meta_slot(n, j) && tr->rg[n->in[j]]) {
            later_grad = true;
            for (int o = 0; o < 2; o++)
                later_reads[o] |= tf_grad_reads(n, j, o);
        }
    int32_t cand[3] = {later_grad ? -1 : gout, -1, -1};
    for (int o = 0; o < 2 && binary; o++) {
        int32_t ob = dm_has_in(n, o) ? b->cur[n->in[o]] : -1;
        if (ob < 0 || b->resident[n->in[o]] >= 0 || !tf_grad_reads(n, k, o) || later_reads[o])
            continue;
        for (int s = 0; s < tr->n_saved[i]; s++)
            if (tr->saved[i][s] == ob)
                cand[1 + o] = ob; /* a forward operand the backward kept for this node */
    }
    for (int c = 0; c < 3; c++) {
        int32_t cb = cand[c];
        if (cb >= 0 && b->refs[cb] == 1 && b->s->buf[cb].dtype == (uint8_t)t[x].dtype &&
            b->s->buf[cb].bytes == t[x].bytes)
            return cb;
    }
    return -1;
}

/* tf.clip_by_value's grad under tf.function (above): the bool mask, and the
 * zeros when the select took the grad's buffer, live while it runs. */
static void tf_clip_transients(struct dm_sb *b, int32_t i, int32_t x, bool forwarded)
{
    const struct dm_tinfo *t = b->t;
    uint64_t mb;
    int32_t zeros = forwarded ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                                            "zeros (clip_by_value grad)", 1)
                              : -1;
    int32_t mask = dm_dtype_bytes(DM_BOOL, t[x].numel, &mb)
                       ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_BOOL, mb, x, i,
                                     "mask (clip_by_value grad)", 1)
                       : -1;
    dm_sb_unref(b, zeros);
    dm_sb_unref(b, mask);
}

/* The temporaries a backward kernel of node i makes after its result (an
 * input's grad, or under autocast that grad in the compute type) and frees
 * before it returns:
 *  - `dense`: the contiguous clone of an expanded output grad that each mm
 *    of a matmul's backward makes (backward_node);
 *  - SoftmaxBackward on CUDA: softmax_backward_cuda_out computes
 *    `Tensor tmp = grad * output;` into the structured kernel's grad_input
 *    (aten/src/ATen/native/cuda/SoftMax.cu), a temporary of the output
 *    grad's size (H200 allocator traces, PyTorch 2.11: grad_input, then an
 *    equal block made and freed, for ALBERT's fp16 and Llama's fp32 softmax);
 *    LogSoftmaxBackward has none, nor the CPU kernel;
 *  - the CPU BatchNorm backward's input grad (k 0):
 *    batch_norm_backward_cpu_template (aten/src/ATen/native/Normalization.cpp)
 *    makes grad_input with empty_like(input), then the weight and bias
 *    grads, and on its contiguous path makes grad_input again (the
 *    contiguous format) and lets the first go: two input-sized blocks at
 *    once (PyTorch 1.13's allocation events: every NativeBatchNormBackward0
 *    of ResNet-50 allocates two and frees one before it returns; the peak
 *    of a checkpointed stage's backward). Modelled as a temporary after the
 *    result: the same two blocks at the same moment. The contiguous path
 *    needs a dense output grad (gout): an expanded one (a sum loss's) takes
 *    the other path, one block. */
static void kernel_temporaries(struct dm_sb *b, int32_t i, int32_t out0, int32_t gout, int k,
                               bool dense)
{
    const struct dm_run *run = b->run;
    if (dense)
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[out0].dtype, b->t[out0].bytes, out0, i,
                    "grad (contiguous)", 0);
    if (out0 >= 0 && b->g->nodes[i].op == DM_OP_Softmax && run->cuda && !run->mx_ops)
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[out0].dtype, b->t[out0].bytes, out0, i,
                    "grad * output", 0);
    if (out0 >= 0 && k == 0 && b->g->nodes[i].op == DM_OP_BatchNormalization && !run->cuda &&
        !run->tf_ops && !run->xla && !run->mx_ops && gout >= 0 &&
        b->s->buf[gout].bytes >= b->t[out0].bytes)
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[out0].dtype, b->t[out0].bytes, out0, i,
                    "grad_input (first empty_like)", 0);
}

/* F.linear with a bias is one addmm when its input is 2-D, or 3-D and
 * contiguous (at::linear, aten/src/ATen/native/Linear.cpp: _flatten_nd_linear;
 * PyTorch 1.13's nn.Linear on a [2, 5, 4] input has grad_fn ViewBackward0 of
 * AddmmBackward0), and transformers' Conv1D calls addmm itself; the graph
 * holds either as a MatMul and an Add of the bias. AddmmBackward0 makes the
 * input's and the weight's grads (mat1, mat2), then the engine's
 * validate_outputs sums the [M, N] grad to the bias's [N] (at::sum_to: a
 * keepdim sum, squeezed: a view): the bias grad comes last, not first as an
 * AddBackward0 would make it (an H200 allocator trace of ALBERT, PyTorch
 * 2.11: grad_input, grad_weight, then the bias grad and its sum's buffers).
 * Returns the MatMul node when Add node n is such a bias and *kb its slot,
 * else -1. */
static int32_t addmm_bias_of(const struct dm_sb *b, const struct dm_node *n, int *kb)
{
    const struct dm_graph *g = b->g;
    if (n->op != DM_OP_Add || n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0)
        return -1;
    for (int k = 0; k < 2; k++) {
        int32_t w = n->in[k], y = n->in[1 - k];
        int32_t p = g->tensors[y].producer;
        if (g->tensors[w].role != DM_ROLE_WEIGHT || b->t[w].rank != 1 || p < 0)
            continue;
        const struct dm_node *mm = &g->nodes[p];
        if (mm->op != DM_OP_MatMul || mm->n_in != 2 || mm->in[0] < 0 || mm->in[1] < 0)
            continue;
        int32_t x = mm->in[0], wt = mm->in[1], q = g->tensors[wt].producer;
        bool conv1d = g->tensors[wt].role == DM_ROLE_WEIGHT; /* addmm(b, x.view(), W) */
        bool linear = q >= 0 && g->nodes[q].op == DM_OP_Transpose && g->nodes[q].in[0] >= 0 &&
                      g->tensors[g->nodes[q].in[0]].role == DM_ROLE_WEIGHT;
        int r = b->t[x].rank;
        if (conv1d || (linear && (r == 2 || (r == 3 && !b->strided[x])))) {
            *kb = k;
            return p;
        }
    }
    return -1;
}

/* The SMs and the threads an SM holds (cudaDeviceProp multiProcessorCount,
 * maxThreadsPerMultiProcessor) of the usual GPU of a compute capability:
 * V100, T4, A100, RTX 3090, RTX 4090, H100/H200 SXM. */
static void reduce_device(int cc, int *sms, int *threads)
{
    *threads = cc == 75 ? 1024 : (cc == 86 || cc == 89) ? 1536 : 2048;
    *sms = cc == 70 ? 80 : cc == 75 ? 40 : cc == 80 ? 108 : cc == 86 ? 82 : cc == 89 ? 128 : 132;
}

static int64_t last_pow2(int64_t n)
{
    int64_t p = 1;
    while (2 * p <= n)
        p *= 2;
    return p;
}

/* A CUDA sum of an [m, n] tensor over its rows into n outputs (the bias
 * grad): the global-memory staging buffer and semaphores gpu_reduce_kernel
 * takes from the caching allocator when setReduceConfig splits the rows
 * across thread blocks (aten/src/ATen/native/cuda/Reduce.cuh, PyTorch 2.x):
 * outputs vectorized by up to 4 on a dense input (none on an expanded one,
 * whose strides are 0), blocks of at most 512 / vec threads, 32 wide; the
 * rows split across the block's warps when each thread would sum at least
 * min(16 x height, 256) of them, then across min(ceil(target / grid),
 * ceil(per thread / 16)) blocks (at least ceil(per thread / 256)) when a
 * thread still has 256 or more and the grid is no larger than target = SMs x
 * (threads per SM / block threads). Buffer: 4-byte (float) accumulators x
 * n x blocks per output x width x vec; semaphores: 4 bytes per grid column.
 * Traced on the H200 (132 SMs): [2048, 768] fp16 -> 12582912 and 24 bytes,
 * [2048, 3072] -> 50331648 and 96, [2048, 128] -> 2097152 and 4; an
 * expanded [2048, 30000] none. */
void dm_cuda_sum_rows_buffers(int64_t m, int64_t n, bool expanded, int cc, uint64_t *buf,
                              uint64_t *sem)
{
    *buf = *sem = 0;
    if (m <= 0 || n <= 0)
        return;
    int sms, per_sm;
    reduce_device(cc, &sms, &per_sm);
    int64_t vec = 1;
    if (!expanded)
        for (vec = 4; n % vec != 0; vec /= 2)
            ;
    int64_t maxt = 512 / vec, dim0 = n / vec;
    int64_t d0 = dim0 < maxt ? last_pow2(dim0) : maxt, d1 = m < maxt ? last_pow2(m) : maxt;
    int64_t width = d0 < 32 ? d0 : 32;
    int64_t height = d1 < maxt / width ? d1 : maxt / width;
    width = d0 < maxt / height ? d0 : maxt / height;
    int64_t threshold = height * 16 < 256 ? height * 16 : 256;
    if (m < threshold) /* each warp its own outputs: no split of the rows */
        return;
    int64_t per_thread = (m + height - 1) / height;
    int64_t grid = (dim0 + width - 1) / width;
    int64_t target = (int64_t)sms * (per_sm / (width * height));
    if (per_thread < 256 || grid > target)
        return;
    int64_t c1 = (target + grid - 1) / grid, c2 = (per_thread + 15) / 16,
            c3 = (per_thread + 255) / 256;
    int64_t ctas = c1 < c2 ? c1 : c2;
    if (ctas < c3)
        ctas = c3;
    if (ctas <= 1)
        return;
    *buf = (uint64_t)(4 * n * ctas * width * vec);
    *sem = (uint64_t)(4 * grid);
}

/* AddmmBackward0's bias grad (addmm_bias_of), after its mat1 and mat2
 * grads: the sum (on CUDA with its staging buffers, made and freed
 * around the kernel), delivered as the view sum_to returns, which the
 * AccumulateGrad input buffer cannot take in place (a differentiable
 * view's base holds the storage too): old + new out of place, as the
 * trace shows for ALBERT's shared biases, and as TBackward's weights */
static void addmm_bias_grad(struct dm_sb *b, int32_t i, int32_t out0, int32_t gout, int32_t x)
{
    struct dm_train *tr = b->train;
    const struct dm_tinfo *t = b->t;
    int32_t gb = dm_sb_alloc(b, tr->param[x] ? DNNMEM_CAT_GRADIENT : DNNMEM_CAT_TEMPORARY,
                             t[x].dtype, t[x].bytes, x, i, "grad", 1);
    if (b->run->cuda && b->run->torch_version >= 200 && t[x].numel > 0) {
        uint64_t buf, sem;
        int cc = b->run->compute_capability ? b->run->compute_capability : DM_CC_DEFAULT;
        dm_cuda_sum_rows_buffers(t[out0].numel / t[x].numel, t[x].numel,
                                 b->s->buf[gout].bytes < t[out0].bytes, cc, &buf, &sem);
        if (buf > 0) {
            int32_t a = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, buf, x, i,
                                    "sum: global reduce buffer", 1);
            int32_t c = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_INT32, sem, x, i,
                                    "sum: semaphores", 1);
            dm_sb_unref(b, c);
            dm_sb_unref(b, a);
        }
    }
    dm_sb_ref(b, gb, 1); /* the view's base: held while the grad is delivered */
    deliver(b, x, gb, true);
    dm_sb_unref(b, gb);
}

static void backward_node(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &g->nodes[i];
    int32_t gout = -1;
    bool any = false;
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0 && tr->grad[n->out[k]] >= 0) {
            any = true;
            if (k == 0)
                gout = tr->grad[n->out[0]];
        }
    bool mx_head = tr->mx_head && tr->mx_head[i];
    if (!any && !mx_head)
        return;
    if (mx_head)
        tr->mx_head[i] = false;
    /* a grad leaf's AccumulateGrad: the summed grad becomes its .grad
     * (stolen when nothing else holds it, else cloned), which lives with the
     * leaf; the op that made the leaf recorded nothing. A stolen grad keeps
     * its category and name: it is often the residual stream's grad, made
     * long before (AddBackward passes it on as it is) */
    if (!tr->node_rg[i]) {
        for (int k = 0; k < n->n_out; k++) {
            int32_t o = n->out[k], gb = o >= 0 ? tr->grad[o] : -1;
            if (gb < 0)
                continue;
            tr->grad[o] = -1;
            if (!g->tensors[o].grad_leaf || tr->leaf_grad[o] >= 0) {
                dm_sb_unref(b, gb);
                continue;
            }
            dm_sb_step(b, DM_PHASE_BACKWARD, i);
            if (b->refs[gb] == 1 && b->s->buf[gb].bytes == t[o].bytes) {
                tr->leaf_grad[o] = gb;
            } else {
                tr->leaf_grad[o] = dm_sb_alloc(b, DNNMEM_CAT_GRADIENT, t[o].dtype, t[o].bytes, o,
                                               -1, "grad", 1);
                dm_sb_unref(b, gb);
            }
        }
        return;
    }
    dm_sb_step(b, DM_PHASE_BACKWARD, i);
    struct dm_ws ws = dm_sb_workspace_begin(b, n, true);
    enum dm_train_rule rule = dm_ops[n->op].train;
    int32_t out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    /* Keras 2's fused LayerNormalization under TF (header): _MulGrad's
     * grad * gamma, held until dx is made, and grad * normalized, reduced at
     * once to gamma's grad */
    int32_t tf_gx = -1;
    if (tf_fused_ln(b, n)) {
        if (dm_has_in(n, 0) && tr->rg[n->in[0]])
            tf_gx = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[out0].dtype, t[out0].bytes, out0, i,
                                "grad * gamma", 1);
        if (dm_has_in(n, 1) && tr->rg[n->in[1]])
            dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[out0].dtype, t[out0].bytes, out0, i,
                        "grad * normalized", 0);
    }
    /* XLA's max pool backward (header, "JAX's jit"): select-and-scatter
     * expanded into a reduce-window that recomputes the pooled values with
     * one int32 coordinate of the selected element per input dimension, then
     * a scatter of the grads into the zeros made in the forward, in place:
     * those zeros become the input's grad */
    int32_t xla_idx[5] = {-1, -1, -1, -1, -1};
    if (b->run->xla && n->op == DM_OP_MaxPool && out0 >= 0 && dm_has_in(n, 0)) {
        uint64_t ib;
        int32_t pooled = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, t[out0].dtype, t[out0].bytes, out0,
                                     i, "pooled (recomputed)", 1);
        int rank = t[n->in[0]].rank < 5 ? t[n->in[0]].rank : 4;
        for (int k = 0; k < rank; k++)
            if (dm_dtype_bytes(DM_INT32, t[out0].numel, &ib))
                xla_idx[k] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_INT32, ib, out0, i,
                                         "selected coordinate (int32)", 1);
        dm_sb_unref(b, pooled);
        for (int s = 0; s < tr->n_saved[i]; s++) {
            int32_t sb = tr->saved[i][s];
            const char *w = sb >= 0 ? b->s->buf[sb].what : NULL;
            if (w && strcmp(w, XLA_SCATTER_OPERAND) == 0) {
                dm_sb_unref(b, sb);
                tr->saved[i][s] = -1;
            }
        }
    }
    /* cuBLAS cannot read a matrix with zero strides: a matmul whose output
     * grad is still the expanded scalar of SumBackward (loss = out.sum())
     * clones it contiguous (prepare_matrix_for_cublas, Blas.cpp) inside each
     * mm it feeds: one mm per input grad, each allocating its result, then
     * the clone, which it frees when it returns. The clones do not overlap,
     * but each input's grad is made between them (an H200 allocator trace of
     * ALBERT's and DistilBERT's decoder under loss = logits.sum(), PyTorch
     * 2.11: grad_input, clone, free; grad_weight, clone, free). Gemm's
     * bias grad (input 2) is a sum, which reads any strides */
    bool dense = gout >= 0 && out0 >= 0 && b->run->cuda &&
                 (n->op == DM_OP_MatMul || n->op == DM_OP_Gemm) &&
                 b->s->buf[gout].bytes < t[out0].bytes;
    int addmm_k = -1;
    int32_t addmm = !b->run->mx_ops && !b->run->tf_ops && !b->run->xla
                        ? addmm_bias_of(b, n, &addmm_k)
                        : -1;
    /* the generated backward computes the grads in the order of the
     * argument names of derivatives.yaml's entry, sorted (load_derivatives.py,
     * set_up_derivatives): mm's and bmm's "mat2" before "self", addmm's
     * "mat1", "mat2" (traced, ALBERT on the H200: attention's probs @ v
     * makes v's grad, then the probs'; a linear's addmm its input's, then its
     * weight's) */
    bool mat2_first = n->op == DM_OP_MatMul && n->n_in == 2 && !tr->addmm_bias[i] &&
                      !b->run->mx_ops && !b->run->tf_ops && !b->run->xla;
    for (int kk = 0; kk < n->n_in; kk++) {
        int k = mat2_first ? 1 - kk : kk;
        int32_t x = n->in[k];
        if (x < 0 || dm_meta_slot(n, k) || !tr->rg[x])
            continue;
        if (k == addmm_k && addmm >= 0 && tr->node_rg[addmm]) {
            tr->addmm_bias[addmm] = x + 1; /* made by the MatMul's backward, last */
            continue;
        }
        int32_t gin = -1;
        bool alias = gout >= 0 && out0 >= 0 &&
                     (rule == DM_T_VIEW ||
                      (rule == DM_T_PASS && n->op != DM_OP_Neg &&
                       !(n->op == DM_OP_Sub && k == 1) &&
                       (n->op == DM_OP_Concat || same_shape(&t[x], &t[out0]))));
        enum dm_dtype cast = b->run->amp ? dm_amp_cast(g, t, n, k, b->run->amp) : DM_UNDEFINED;
        /* tf.function: the grad kernel writes into the incoming grad's
         * buffer or a kept operand's when only it still holds that buffer,
         * x is not a parameter, and the types and sizes agree
         * (tf_grad_target) */
        int32_t target = !alias && cast == DM_UNDEFINED ? tf_grad_target(b, i, k, gout) : -1;
        bool clip = b->run->tf_graph && n->op == DM_OP_Clip && !dm_tf_relu6(b, n);
        if (clip && cast == DM_UNDEFINED)
            tf_clip_transients(b, i, x, target >= 0);
        if (target >= 0) {
            dm_sb_ref(b, target, 1);
            gin = target;
            if (target != gout) { /* a kept operand's buffer becomes the grad */
                b->s->buf[target].category = DNNMEM_CAT_TEMPORARY;
                b->s->buf[target].tensor = x;
                b->s->buf[target].what = "grad";
            }
        } else if (alias && cast == DM_UNDEFINED) {
            dm_sb_ref(b, gout, 1);
            gin = gout;
        } else if (cast == DM_UNDEFINED && mx_addto(b, x)) {
            gin = -1; /* written into the sum's buffer (kAddTo): nothing allocated */
        } else {
            /* an autocast copy's grad, in its type, then ToCopyBackward's cast
             * back to the input's type */
            uint64_t cbytes;
            int32_t gcast = -1;
            if (cast != DM_UNDEFINED && dm_dtype_bytes(cast, t[x].numel, &cbytes))
                gcast = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, cast, cbytes, x, i, "grad", 1);
            /* the kernel's result: the grad, or under autocast its copy in
             * the compute type (ToCopyBackward casts it after the kernel) */
            if (gcast >= 0)
                kernel_temporaries(b, i, out0, gout, k, dense && k < 2);
            /* PowBackward0 of a scalar exponent (pow_backward,
             * FunctionsManual.cpp): grad * (exp * self.pow(exp - 1)), whose
             * two temporaries (self.pow(exp - 1), then exp times it) live
             * to the end of the statement: made before the grad, freed
             * after it, the product first (traced: ALBERT's gelu_new on the
             * H200, PyTorch 2.11) */
            int32_t pw[2] = {-1, -1};
            if (n->op == DM_OP_Pow && k == 0 && !b->run->mx_ops && !b->run->tf_ops &&
                !b->run->xla && dm_has_in(n, 1) && !tr->rg[n->in[1]])
                for (int j = 0; j < 2; j++)
                    pw[j] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                                        j ? "exp * self.pow(exp - 1)" : "self.pow(exp - 1)", 1);
            gin = dm_sb_alloc(b, tr->param[x] ? DNNMEM_CAT_GRADIENT : DNNMEM_CAT_TEMPORARY,
                              t[x].dtype, t[x].bytes, x, i, "grad", 1);
            dm_sb_unref(b, pw[1]);
            dm_sb_unref(b, pw[0]);
            if (gcast < 0)
                kernel_temporaries(b, i, out0, gout, k, dense && k < 2);
            dm_sb_unref(b, gcast);
        }
        deliver(b, x, gin, alias && rule == DM_T_VIEW);
    }
    if (tr->addmm_bias[i] > 0) {
        int32_t x = tr->addmm_bias[i] - 1;
        tr->addmm_bias[i] = 0;
        if (gout >= 0 && out0 >= 0)
            addmm_bias_grad(b, i, out0, gout, x);
    }
    for (int k = 0; k < 5; k++)
        if (xla_idx[k] >= 0)
            dm_sb_unref(b, xla_idx[k]);
    if (tf_bn_transposes(b, n)) {
        /* the grad kernel's NHWC -> NCHW transposes (header) */
        static const char *const what[] = {"y_backprop_transformed (NCHW)",
                                           "x_transformed (NCHW)",
                                           "x_backprop_transformed (NCHW)"};
        transients(b, i, DNNMEM_CAT_WORKSPACE, t[n->in[0]].dtype, t[n->in[0]].bytes, 3, what);
    }
    dm_sb_unref(b, tf_gx);
    dm_sb_workspace_end(b, &ws);
    for (int s = 0; s < tr->n_saved[i]; s++)
        dm_sb_unref(b, tr->saved[i][s]);
    tr->n_saved[i] = 0;
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0 && tr->grad[n->out[k]] >= 0) {
            dm_sb_unref(b, tr->grad[n->out[k]]);
            tr->grad[n->out[k]] = -1;
        }
}

/* A mixture of experts' auxiliary loss with output_router_logits, as
 * transformers 4.51's MixtralForCausalLM (and Qwen2-MoE, Qwen3-MoE) adds it
 * right after the cross-entropy: load_balancing_loss_func on the returned
 * router logits of the L sparse layers, each [T, E] (N = L x T rows, k
 * experts a token), whose locals live until it returns:
 *   concatenated_gate_logits = torch.cat(router_logits)          [N, E]
 *   routing_weights = softmax(., dim=-1)  (kept by SoftmaxBackward; float32
 *                                          under autocast, its fp32 list)
 *   _, selected_experts = topk(routing_weights, k)               [N, k] x 2
 *   expert_mask = one_hot(selected_experts, E)            int64 [N, k, E]
 *   tokens_per_expert = mean(expert_mask.float(), 0)   float32 copy, [k, E]
 *   router_prob_per_expert = mean(routing_weights, 0)            [E]
 *   sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * E
 * (the product's backward keeps tokens_per_expert), then loss += coef x it.
 * Its backward runs before the cross-entropy's (the engine takes the most
 * recent nodes first): the [k, E] product's grad summed to [1, E], the
 * mean's [N, E], the softmax's [N, E] (and autocast's cast back), whose
 * slices are the router logits' grads (one buffer, shared). The returned
 * router logits are held with the model's other outputs.
 * What the backward takes: */
struct aux {
    int32_t rw, tpe;        /* the routing weights and tokens_per_expert kept, or -1 */
    enum dm_dtype dt, pt;   /* the router logits' type, the routing weights' */
    uint64_t b_ne, b_pne, b_ke4, b_e;
};

static void aux_forward(struct dm_sb *b, struct aux *a)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    a->rw = a->tpe = -1;
    if (!tr->router_buf || tr->router_buf[0] < 0)
        return;
    const struct dm_tinfo *r0 = &b->t[g->router[0]];
    enum dm_dtype dt = r0->dtype, pt = b->run->amp != DM_UNDEFINED ? DM_FLOAT : dt;
    int64_t T = r0->rank == 2 ? r0->dims[0] : 0, E = r0->rank == 2 ? r0->dims[1] : 0;
    int64_t k = g->router_top_k, N, NE, NK, NKE;
    uint64_t b_ne, b_pne, b_pnk, b_nk8, b_nke8, b_nke4, b_ke4, b_e;
    if (!dm_mul_ok(T, g->n_router, &N) || !dm_mul_ok(N, E, &NE) || !dm_mul_ok(N, k, &NK) ||
        !dm_mul_ok(NK, E, &NKE) || !dm_dtype_bytes(dt, NE, &b_ne) ||
        !dm_dtype_bytes(pt, NE, &b_pne) || !dm_dtype_bytes(pt, NK, &b_pnk) ||
        !dm_dtype_bytes(DM_INT64, NK, &b_nk8) || !dm_dtype_bytes(DM_INT64, NKE, &b_nke8) ||
        !dm_dtype_bytes(DM_FLOAT, NKE, &b_nke4) || !dm_dtype_bytes(DM_FLOAT, k * E, &b_ke4) ||
        !dm_dtype_bytes(pt, E, &b_e))
        return;
    *a = (struct aux){-1, -1, dt, pt, b_ne, b_pne, b_ke4, b_e};
    int32_t cat = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, b_ne, -1, -1, "aux.router_logits_cat", 1);
    int32_t up = pt != dt ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, pt, b_pne, -1, -1, "autocast", 1)
                          : -1;
    a->rw = dm_sb_alloc(b, DNNMEM_CAT_SAVED, pt, b_pne, -1, -1, "aux.routing_weights", 1);
    dm_sb_unref(b, up);
    int32_t vals = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, pt, b_pnk, -1, -1, "aux.topk", 1);
    int32_t sel = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_INT64, b_nk8, -1, -1, "aux.topk", 1);
    int32_t mask = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_INT64, b_nke8, -1, -1,
                               "aux.expert_mask", 1);
    int32_t f = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, b_nke4, -1, -1, "aux.expert_mask", 1);
    a->tpe = dm_sb_alloc(b, DNNMEM_CAT_SAVED, DM_FLOAT, b_ke4, -1, -1, "aux.tokens_per_expert", 1);
    dm_sb_unref(b, f);
    int32_t prob = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, pt, b_e, -1, -1, "aux.router_prob", 1);
    int32_t prod = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, b_ke4, -1, -1, "aux", 1);
    int32_t sum = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux", 1);
    dm_sb_unref(b, prod);
    int32_t loss = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux", 1);
    dm_sb_unref(b, sum);
    /* the function returns: its locals go */
    int32_t locals[] = {cat, vals, sel, mask, prob};
    for (size_t j = 0; j < sizeof locals / sizeof *locals; j++)
        dm_sb_unref(b, locals[j]);
    /* loss += coef * aux_loss (coef * aux a new scalar, the add in place) */
    int32_t scaled = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux", 1);
    dm_sb_unref(b, loss);
    dm_sb_unref(b, scaled);
    /* the router logits are returned with the logits: held as they are */
    for (int32_t r = 0; r < g->n_router; r++) {
        tr->held[tr->n_held++] = tr->router_buf[r];
        tr->router_buf[r] = -1;
    }
}

static void aux_backward(struct dm_sb *b, const struct aux *a)
{
    const struct dm_graph *g = b->g;
    if (a->rw < 0)
        return;
    int32_t s1 = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux.grad", 1);
    int32_t s2 = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, s1);
    /* MulBackward: grad * tokens_per_expert [k, E], summed to [1, E] */
    int32_t gk = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, a->b_ke4, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, s2);
    dm_sb_unref(b, a->tpe);
    int32_t ge = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->pt, a->b_e, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, gk);
    /* MeanBackward: the expanded grad / N, [N, E]; SoftmaxBackward */
    int32_t gm = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->pt, a->b_pne, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, ge);
    int32_t gs = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->pt, a->b_pne, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, gm);
    dm_sb_unref(b, a->rw);
    if (a->pt != a->dt) { /* autocast's copy back to the router logits' type */
        int32_t down = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->dt, a->b_ne, -1, -1, "aux.grad", 1);
        dm_sb_unref(b, gs);
        gs = down;
    }
    /* CatBackward: each router logits' grad a slice of it */
    for (int32_t r = 0; r < g->n_router; r++)
        if (b->train->rg[g->router[r]]) {
            dm_sb_ref(b, gs, 1);
            deliver(b, g->router[r], gs, false);
        }
    dm_sb_unref(b, gs);
}

/* The loss and its backward, which hands the outputs their grads. The loss
 * reads output 0, or every output that requires grad (loss_all_outputs: the
 * terms are added, e.g. a main and an auxiliary head).
 * ce: F.cross_entropy(output, target) = log_softmax (kept by
 * NllLossBackward0), nll_loss and a total_weight scalar; mse:
 * F.mse_loss(output, target) (MseLossBackward0 keeps both); sum: .sum(),
 * whose grad is an expansion of the scalar grad (a view). */
static void loss(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    int32_t n_out = b->run->loss_all_outputs || b->run->loss == DNNMEM_LOSS_SUM ? g->n_outputs : 1;
    int32_t logp[64], extra[64], self32[64];
    int32_t value = -1;
    enum dm_dtype dt = b->t[g->outputs[0]].dtype;
    dm_sb_step(b, DM_PHASE_LOSS, -1);
    for (int32_t k = 0; k < n_out && k < 64; k++) {
        int32_t x = g->outputs[k];
        const struct dm_tinfo *o = &b->t[x];
        logp[k] = extra[k] = self32[k] = -1;
        if (!tr->rg[x])
            continue;
        if (mx_loss_head(b, x)) { /* MXNet: the op is the loss (mx_save) */
            tr->mx_head[g->tensors[x].producer] = true;
            continue;
        }
        if (b->run->loss == DNNMEM_LOSS_CE) {
            /* cross_entropy is on autocast's fp32 list, and transformers'
             * causal-LM loss calls logits.float() whatever the precision: an
             * fp32 copy of the logits feeds log_softmax, whose fp32 result
             * NllLossBackward keeps. Pure fp16/bf16 without either stays low. */
            uint64_t b32 = (uint64_t)o->numel * 4;
            bool upcast = b->run->amp != DM_UNDEFINED || g->loss_upcast;
            int32_t up = upcast && o->dtype != DM_FLOAT && o->dtype != DM_DOUBLE
                             ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, b32, x, -1, "autocast", 1)
                             : -1;
            logp[k] = dm_sb_alloc(b, DNNMEM_CAT_SAVED, up >= 0 ? DM_FLOAT : o->dtype,
                                  up >= 0 ? b32 : o->bytes, -1, -1, "loss.log_softmax", 1);
            if (up >= 0 && b->run->torch_version < 111) { /* LogSoftmaxBackward's self */
                self32[k] = up;
                b->s->buf[up].category = DNNMEM_CAT_SAVED;
            } else {
                dm_sb_unref(b, up);
            }
            extra[k] = dm_sb_alloc(b, DNNMEM_CAT_SAVED, o->dtype, 4, -1, -1, "loss.total_weight", 1);
        }
        int32_t part = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, o->dtype, 4, -1, -1, "loss", 1);
        if (value < 0) {
            value = part;
        } else { /* loss = loss + w * part, out of place */
            int32_t sum = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, o->dtype, 4, -1, -1, "loss", 1);
            dm_sb_unref(b, value);
            dm_sb_unref(b, part);
            value = sum;
        }
    }
    struct aux aux;
    aux_forward(b, &aux);
    if (value >= 0)
        tr->held[tr->n_held++] = value;
    /* a traced step: once the loss is made, nothing outside holds the
     * outputs (MSE's backward reads them: released after it) */
    if (b->run->dataflow && b->run->loss != DNNMEM_LOSS_MSE) {
        for (int32_t k = 0; k < tr->n_held; k++)
            dm_sb_unref(b, tr->held[k]);
        tr->n_held = 0;
    }
    /* backward from the loss: its grad is ones_like(loss) */
    dm_sb_step(b, DM_PHASE_BACKWARD, -1);
    /* MXNet's loss heads make no loss value and read no head gradient */
    int32_t gl = value >= 0 ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, 4, -1, -1, "loss.grad", 1)
                            : -1;
    aux_backward(b, &aux);
    for (int32_t k = n_out - 1; k >= 0; k--) {
        int32_t x = g->outputs[k];
        const struct dm_tinfo *o = &b->t[x];
        if (k >= 64 || !tr->rg[x] || mx_loss_head(b, x))
            continue;
        switch (b->run->loss) {
        case DNNMEM_LOSS_CE: {
            /* copied: dm_sb_alloc may move the buffer array */
            const enum dm_dtype lp_dtype = (enum dm_dtype)b->s->buf[logp[k]].dtype;
            const uint64_t lp_bytes = b->s->buf[logp[k]].bytes;
            int32_t gnll = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, lp_dtype, lp_bytes, -1, -1,
                                       "loss.nll_grad", 1);
            dm_sb_unref(b, extra[k]);
            int32_t gx = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, lp_dtype, lp_bytes, x, -1, "grad", 1);
            dm_sb_unref(b, gnll);
            dm_sb_unref(b, logp[k]);
            dm_sb_unref(b, self32[k]);
            if (lp_bytes != o->bytes) { /* back to the logits' type */
                int32_t down = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, o->dtype, o->bytes, x, -1,
                                           "grad", 1);
                dm_sb_unref(b, gx);
                gx = down;
            }
            deliver(b, x, gx, false);
            break;
        }
        case DNNMEM_LOSS_MSE:
            deliver(b, x, dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, o->dtype, o->bytes, x, -1, "grad", 1),
                    false);
            break;
        case DNNMEM_LOSS_SUM: /* SumBackward0 expands the scalar grad: a view */
            dm_sb_ref(b, gl, 1);
            deliver(b, x, gl, false);
            break;
        }
    }
    dm_sb_unref(b, gl);
}

/* ---- the optimizer --------------------------------------------------------------- */

static bool is_adam(enum dnnmem_optimizer o)
{
    return o == DNNMEM_OPT_ADAM || o == DNNMEM_OPT_ADAMW || o == DNNMEM_OPT_ADAMW_HF;
}

/* Parameter-sized state buffers of torch.optim's optimizers (Adafactor and
 * Adam8bit shape theirs: state_bytes). */
static int state_count(enum dnnmem_optimizer o)
{
    switch (o) {
    case DNNMEM_OPT_SGD_MOMENTUM: return 1; /* momentum_buffer, a clone of the grad */
    case DNNMEM_OPT_ADAM:
    case DNNMEM_OPT_ADAMW:
    case DNNMEM_OPT_ADAMW_HF: return 2;     /* exp_avg, exp_avg_sq (zeros_like) */
    case DNNMEM_OPT_RMSPROP: return 1;      /* square_avg */
    case DNNMEM_OPT_ADAGRAD: return 1;      /* sum */
    case DNNMEM_OPT_SGD:
    case DNNMEM_OPT_NONE:
    case DNNMEM_OPT_ADAFACTOR:
    case DNNMEM_OPT_ADAM8BIT: return 0;
    }
    return 0;
}

/* bitsandbytes' blockwise 8-bit state (bitsandbytes/optim/optimizer.py,
 * Optimizer2State.init_state, 0.35-0.41): a tensor of >= min_8bit_size
 * (4096) elements gets state1 and state2 as uint8 zeros_like(p) and an fp32
 * absmax per block of 2048 elements for each; a smaller one fp32 states. */
#define BNB_MIN_8BIT 4096
#define BNB_BLOCK 2048

/* Adafactor's state (transformers/optimization.py, Adafactor._get_options
 * and step): a tensor of rank >= 2 keeps exp_avg_sq_row, its shape without
 * the last dim, and exp_avg_sq_col, without the second-to-last; a vector a
 * full exp_avg_sq; in the grad's dtype. */
static void adafactor_state(struct dm_sb *b, int32_t x)
{
    const struct dm_tinfo *tx = &b->t[x];
    enum dm_dtype dt = tx->dtype;
    uint64_t bytes;
    if (tx->rank < 2 || tx->dims[tx->rank - 1] == 0 || tx->dims[tx->rank - 2] == 0) {
        dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, dt, tx->bytes, x, -1, "exp_avg_sq", 1);
        return;
    }
    int64_t last = tx->dims[tx->rank - 1], second = tx->dims[tx->rank - 2];
    if (dm_dtype_bytes(dt, tx->numel / last, &bytes))
        dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, dt, bytes, x, -1, "exp_avg_sq_row", 1);
    if (dm_dtype_bytes(dt, tx->numel / second, &bytes))
        dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, dt, bytes, x, -1, "exp_avg_sq_col", 1);
}

static void adam8bit_state(struct dm_sb *b, int32_t x)
{
    const struct dm_tinfo *tx = &b->t[x];
    uint64_t bytes;
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "state2" : "state1";
        if (tx->numel < BNB_MIN_8BIT) {
            if (dm_dtype_bytes(DM_FLOAT, tx->numel, &bytes))
                dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, bytes, x, -1, name, 1);
            continue;
        }
        dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_UINT8, (uint64_t)tx->numel, x, -1, name, 1);
        int64_t blocks = tx->numel / BNB_BLOCK + (tx->numel % BNB_BLOCK > 0);
        if (dm_dtype_bytes(DM_FLOAT, blocks, &bytes))
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, bytes, x, -1,
                        k ? "absmax2" : "absmax1", 1);
    }
}

/* Optimizer state, one set per parameter that has a grad: created at the
 * first step (torch/optim: lazily in step()), except Adagrad's `sum`, which
 * its constructor makes for every parameter. */
static void make_state(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    enum dnnmem_optimizer opt = b->run->optimizer;
    int nstate = state_count(opt);
    bool adam = is_adam(opt);
    /* bitsandbytes' quantization maps, one per optimizer: "dynamic" and
     * "udynamic", 256 fp32 values each (create_dynamic_map) */
    if (opt == DNNMEM_OPT_ADAM8BIT)
        for (int k = 0; k < 2; k++)
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, 256 * 4, -1, -1,
                        k ? "qmap_udynamic" : "qmap_dynamic", 1);
    /* Adam's and Adagrad's `step` is a 0-dim fp32 tensor on the CPU unless
     * capturable or fused (torch/optim/adam.py): host memory, so it counts
     * only when the device is the CPU. */
    bool step_scalar = (opt == DNNMEM_OPT_ADAM || opt == DNNMEM_OPT_ADAMW ||
                        opt == DNNMEM_OPT_ADAGRAD) && !b->run->cuda;
    for (int32_t x = 0; x < g->n_tensors; x++) {
        if (!tr->param[x] || (tr->param_grad[x] < 0 && opt != DNNMEM_OPT_ADAGRAD))
            continue;
        if (opt == DNNMEM_OPT_ADAFACTOR)
            adafactor_state(b, x);
        if (opt == DNNMEM_OPT_ADAM8BIT)
            adam8bit_state(b, x);
        for (int k = 0; k < nstate; k++)
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, t[x].dtype, t[x].bytes, x, -1,
                        opt == DNNMEM_OPT_SGD_MOMENTUM ? "momentum_buffer"
                        : adam                         ? (k ? "exp_avg_sq" : "exp_avg")
                        : opt == DNNMEM_OPT_RMSPROP    ? "square_avg"
                                                       : "sum",
                        1);
        if (step_scalar)
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, 4, x, -1, "step", 1);
    }
}

static void optimizer_step(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    enum dnnmem_optimizer opt = b->run->optimizer;
    if (opt == DNNMEM_OPT_NONE)
        return;
    dm_sb_step(b, DM_PHASE_OPTIMIZER, -1);
    bool adam = opt == DNNMEM_OPT_ADAM || opt == DNNMEM_OPT_ADAMW;
    if (!tr->state_made) {
        make_state(b);
        tr->state_made = true;
    }
    /* The update's param-sized temporaries (torch/optim/adam.py, rmsprop.py,
     * adagrad.py; defaults: no weight decay, no amsgrad, not centered): Adam
     * divides sqrt(exp_avg_sq)
     * by the bias correction out of place, so the for-loop implementation
     * holds two (the first is freed as the second is made); RMSprop's
     * square_avg.sqrt() and Adagrad's state_sum.sqrt() are one each, the rest
     * updates in place; SGD has none. The for-loop implementation (1.13, and
     * the CPU) makes them one parameter at a time; the foreach one (CUDA from
     * 2.0) makes the sqrt of every parameter at once and frees them after.
     * transformers' AdamW adds eps to the sqrt in place: one temporary.
     * Adafactor, per parameter: update = grad**2 + eps (two made, the first
     * freed), the factored estimate (or exp_avg_sq.rsqrt()) replacing it,
     * then p.add_(-update): never more than two live. Adam8bit: one fused
     * kernel per parameter, no temporaries. */
    int temps = adam || opt == DNNMEM_OPT_ADAFACTOR                        ? 2
                : opt == DNNMEM_OPT_RMSPROP || opt == DNNMEM_OPT_ADAGRAD ||
                          opt == DNNMEM_OPT_ADAMW_HF                       ? 1
                                                                           : 0;
    bool foreach = b->run->cuda && b->run->torch_version >= 200 &&
                   (adam || opt == DNNMEM_OPT_RMSPROP || opt == DNNMEM_OPT_ADAGRAD);
    int32_t *batch = NULL, n_batch = 0;
    if (foreach && temps)
        batch = malloc(((size_t)g->n_tensors + 1) * sizeof *batch);
    for (int32_t x = 0; temps && x < g->n_tensors; x++) {
        if (!tr->param[x] || tr->param_grad[x] < 0)
            continue;
        bool af = opt == DNNMEM_OPT_ADAFACTOR;
        int32_t sq = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, -1,
                                 af ? "grad_sq" : "sqrt", 1);
        if (batch) {
            batch[n_batch++] = sq;
            continue;
        }
        for (int k = 1; k < (af ? 4 : temps); k++) { /* each made before the last is freed */
            static const char *const adafactor[] = {"", "update", "approx_sq_grad", "neg_update"};
            int32_t next = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, -1,
                                       af ? adafactor[k] : "denom", 1);
            dm_sb_unref(b, sq);
            sq = next;
        }
        dm_sb_unref(b, sq);
    }
    /* the foreach temporaries are one Python list (torch._foreach_sqrt's
     * result, a local of _multi_tensor_adam), freed when the function
     * returns: CPython's list_dealloc drops its items last to first, so the
     * last parameter's goes first and the first parameter's last (an H200
     * allocator trace of Llama-3.2-1B under AdamW, PyTorch 2.11: the frees
     * run down the layers and end with embed_tokens') */
    for (int32_t k = n_batch - 1; k >= 0; k--)
        dm_sb_unref(b, batch[k]);
    free(batch);
}

void dm_train_zero_grad(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    /* zero_grad(set_to_none): False in 1.13 (grads zeroed in place, kept),
     * True from 2.0 (grads freed) (torch/optim/optimizer.py). */
    if (b->run->torch_version < 200)
        return;
    dm_sb_step(b, DM_PHASE_ZERO_GRAD, -1);
    for (int32_t x = 0; x < b->g->n_tensors; x++)
        if (tr->param_grad[x] >= 0) {
            dm_sb_unref(b, tr->param_grad[x]);
            tr->param_grad[x] = -1;
        }
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
    loss(b);
    if (b->run->dataflow) { /* a traced step: the outputs MSE's backward read */
        for (int32_t k = 0; k < tr->n_held; k++)
            dm_sb_unref(b, tr->held[k]);
        tr->n_held = 0;
    }
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        int32_t sg = tr->seg[i];
        if (sg < 0 && tr->mx_mir && tr->mx_mir[i])
            mx_mirror_copy(b, i); /* MXNet: its copy runs before its gradient */
        if (sg < 0)
            backward_node(b, i);
        else if (i == tr->seg_last[sg])
            checkpoint_backward(b, sg);
    }
    if (tr->mx_mir)
        mx_mirror_end(b);
    for (int32_t x = 0; x < g->n_tensors; x++) {
        if (tr->grad[x] >= 0) {
            dm_sb_unref(b, tr->grad[x]);
            tr->grad[x] = -1;
        }
        if (tr->mx_first)
            mx_release(b, x);
        if (tr->pending[x] >= 0) { /* a grad that never came: the sum so far goes on */
            int32_t p = tr->pending[x];
            tr->pending[x] = -1;
            accumulate_grad(b, x, p, 0);
        }
    }
    if (step_optimizer)
        optimizer_step(b);
    /* `del out, loss`: the caller lets go of the outputs and the loss, and
     * with them the graph of nodes the loss did not reach (their saved
     * tensors) */
    for (int32_t k = 0; k < tr->n_held; k++)
        dm_sb_unref(b, tr->held[k]);
    tr->n_held = 0;
    for (int32_t x = 0; x < g->n_tensors; x++) {
        dm_sb_unref(b, tr->leaf_val[x]);
        dm_sb_unref(b, tr->leaf_grad[x]);
        tr->leaf_val[x] = tr->leaf_grad[x] = -1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        for (int s = 0; s < tr->n_saved[i]; s++)
            dm_sb_unref(b, tr->saved[i][s]);
        tr->n_saved[i] = 0;
    }
}
