/*
 * tf.c: TensorFlow's differences from PyTorch's training step: what the
 * eager GradientTape keeps (tf_tape.def), the kernels' transients and
 * buffer forwarding under tf.function, Grappler's layout.
 *
 * TensorFlow (--framework tensorflow, run->tf_ops). Eagerly
 * (--tf-execution eager) the GradientTape holds every input and output of a
 * recorded op but those its gradient function never reads, listed in
 * tensorflow/python/eager/pywrap_gradient_exclusions.cc (generated from the
 * gradient functions): one table, src/train/tf_tape.def (its header has the
 * entries and the TF op each Keras 2 layer runs), applied by dm_tf_tape_save;
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
 *  - Buffer forwarding (src/schedule/forward.c, tf_forwards): elementwise kernels call
 *    OpKernelContext::forward_input_or_allocate_output, which hands the
 *    output an input buffer whose only reference the kernel holds (same
 *    type and size); in the graph the executor's is the only one once the
 *    last consumer runs, where eagerly the Python handle holds another.
 *    Modelled in the forward pass, and in the backward for the activation
 *    grads and the binary ops' (dm_tf_grad_target: ReluGrad and the other
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
 */
#include "train/train.h"

#include <string.h>

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
bool dm_tf_bn_transposes(const struct dm_sb *b, const struct dm_node *n)
{
    return tf_fused_bn(b, n) && (!b->run->tf_graph || b->run->tf_nhwc);
}

bool dm_tf_fused_ln(const struct dm_sb *b, const struct dm_node *n)
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
    TF_W_BIAS,      /* a Conv, ConvTranspose or Gemm with a bias (input 2) */
    TF_W_UNFUSED_BN, /* a BatchNormalization not marked tf_fused_nhwc */
    TF_W_X_WATCHED, /* input 0 requires grad (the tape records ops of x alone) */
    TF_W_KERAS3,    /* a Keras 3 file (its build history replayed), run eagerly */
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
    case TF_W_FUSED_LN: return dm_tf_fused_ln(b, n);
    case TF_W_BIAS: return dm_has_in(n, 2);
    case TF_W_UNFUSED_BN: return dm_attr_int(n, "tf_fused_nhwc", 0) == 0;
    case TF_W_X_WATCHED: return b->train && dm_has_in(n, 0) && b->train->rg[n->in[0]];
    case TF_W_KERAS3: return b->run->tf_build && !b->run->tf_graph;
    }
    return false;
}

/* The eager op chains (tf_eager.def). */
#define TF_STEPS(...) ((const signed char[]){__VA_ARGS__, 127})
#define TF_CHAIN_END 127
#define TF_CONV_TEMP 100 /* a step: the convolution kernel's temp (tf_conv_temp) */
struct tf_eager_row {
    enum dm_op op;
    enum tf_when when;
    const char *tf_ops;
    const signed char *steps; /* k > 0: allocate intermediate k; -k: free it; 0: the output */
    const char *const *what;
};

static const struct tf_eager_row tf_eager[] = {
#define DM_TF_EAGER(op, when, tf_ops, steps, what) {DM_OP_##op, when, tf_ops, steps, what},
#include "train/tf_eager.def"
#undef DM_TF_EAGER
};

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
void dm_tf_transients(struct dm_sb *b, int32_t node, enum dnnmem_category cat,
                       enum dm_dtype dtype, uint64_t bytes, int count, const char *const *what)
{
    int32_t buf[3] = {-1, -1, -1};
    for (int k = 0; k < count && k < 3; k++)
        buf[k] = dm_sb_alloc(b, cat, dtype, bytes, -1, node, what[k], 1);
    for (int k = 0; k < count && k < 3; k++)
        dm_sb_unref(b, buf[k]);
}

/* oneDNN's Conv2D on the CPU (_MklNativeConv2D eagerly, the fused
 * convolution under tf.function; TF_ENABLE_ONEDNN_OPTS on) allocates a temp
 * of 8216 B after its output and frees it when it returns. Measured (TF
 * 2.21, Keras 3.15, tf_measure.py trace): the same 8216 B for each of
 * rand2's ten convolutions (3 to 16 channels, 1x1 and 3x3) under
 * predict_on_batch and for micro-conv's eagerly; depthwise and transposed
 * convolutions not measured. */
#define TF_ONEDNN_CONV_TEMP 8216
static bool tf_conv_temp(const struct dm_sb *b, const struct dm_node *n)
{
    return b->run->tf_ops && !b->run->cuda && n->op == DM_OP_Conv && dm_attr_int(n, "group", 1) == 1;
}

static void tf_conv_temp_run(struct dm_sb *b, int32_t i)
{
    static const char *const what[] = {"oneDNN convolution temp"};
    dm_tf_transients(b, i, DNNMEM_CAT_WORKSPACE, DM_UINT8, TF_ONEDNN_CONV_TEMP, 1, what);
}

/* Run the steps of chain `c` from c->at up to its output (0) or its end. */
static void tf_chain_run(struct dm_sb *b, struct dm_tf_chain *c)
{
    const struct tf_eager_row *r = c->row;
    const struct dm_node *n = &b->g->nodes[c->node];
    const struct dm_tinfo *y = &b->t[n->out[0]];
    for (; r->steps[c->at] != TF_CHAIN_END; c->at++) {
        int s = r->steps[c->at];
        if (s == 0) {
            c->at++;
            return;
        }
        if (s == TF_CONV_TEMP) {
            if (tf_conv_temp(b, n))
                tf_conv_temp_run(b, c->node);
            continue;
        }
        int k = (s > 0 ? s : -s) - 1;
        if (k >= DM_TF_CHAIN_MAX)
            continue;
        if (s < 0) {
            dm_sb_unref(b, c->buf[k]);
            c->buf[k] = -1;
            continue;
        }
        int w = 0;
        while (w < k && r->what[w + 1])
            w++;
        c->buf[k] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, y->dtype, y->bytes, -1, c->node,
                                r->what[w], 1);
    }
}

/* Eager TF (tf_eager.def): the intermediates node i's chain makes before its
 * output. None under tf.function, and none where the tape records the node
 * and holds its chain (tf_tape.def's chain column: dm_tf_tape_save). */
void dm_tf_chain_begin(struct dm_sb *b, int32_t i, bool save, struct dm_tf_chain *c)
{
    const struct dm_node *n = &b->g->nodes[i];
    *c = (struct dm_tf_chain){NULL, i, 0, {-1, -1, -1}};
    if (!b->run->tf_ops || b->run->tf_graph || !dm_has_out(n, 0) || b->t[n->out[0]].absent)
        return;
    const struct tf_tape_row *tape = tf_tape_row(b, n);
    if (save && b->train && b->train->node_rg[i] && tape && tape->chain != 0)
        return;
    for (size_t r = 0; r < sizeof tf_eager / sizeof *tf_eager && !c->row; r++)
        if (tf_eager[r].op == n->op && tf_when_holds(b, n, tf_eager[r].when))
            c->row = &tf_eager[r];
    if (c->row)
        tf_chain_run(b, c);
}

/* ... and, once the output is made, the chain's remaining steps. */
void dm_tf_chain_end(struct dm_sb *b, struct dm_tf_chain *c)
{
    if (!c->row)
        return;
    tf_chain_run(b, c);
    for (int k = 0; k < DM_TF_CHAIN_MAX; k++)
        dm_sb_unref(b, c->buf[k]);
}

void dm_train_tf_forward(struct dm_sb *b, int32_t i, bool save, bool chained)
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    if (tf_conv_temp(b, n) && !chained) /* an eager chain ran it after the conv's own output */
        tf_conv_temp_run(b, i);
    if (dm_tf_bn_transposes(b, n) && b->run->train) {
        /* NHWC -> NCHW around cuDNN in training (header) */
        static const char *const what[] = {"x_transformed (NCHW)", "y_transformed (NCHW)"};
        dm_tf_transients(b, i, DNNMEM_CAT_WORKSPACE, t[n->in[0]].dtype, t[n->in[0]].bytes, 2, what);
    }
    if (n->op == DM_OP_MaxPool && !b->run->cuda && dm_has_out(n, 0)) {
        /* oneDNN's max pooling (_MklNativeMaxPool, TF_ENABLE_ONEDNN_OPTS on:
         * TF's default on AVX512-VNNI/BF16/AMX CPUs) returns a workspace
         * beside the output, one byte per output element, made after it.
         * Measured (TF 2.21, Keras 3.15, micro-maxpool-call-b8, tf_measure.py
         * trace): MaxPooling2D(2) on [8,32,32,16] float32 allocates the
         * [8,16,16,16] output, then a 32768 B workspace, freed when the op
         * returns eagerly. Under tf.function in training MaxPoolGrad reads
         * it (the graph's workspace edge): kept for the backward. */
        const struct dm_tinfo *y = &t[n->out[0]];
        if (b->run->tf_graph && save && b->train && b->train->node_rg[i])
            dm_keep_new(b, i, DM_UINT8, y->numel, "oneDNN max-pool workspace");
        else {
            static const char *const what[] = {"oneDNN max-pool workspace"};
            dm_tf_transients(b, i, DNNMEM_CAT_WORKSPACE, DM_UINT8, (uint64_t)y->numel, 1, what);
        }
    }
    if (dm_tf_fused_ln(b, n) && !(save && b->train && b->train->node_rg[i])) {
        /* no tape: the normalized output, then `* gamma`'s, beside the output */
        static const char *const what[] = {"normalized (transient)"};
        dm_tf_transients(b, i, DNNMEM_CAT_ACTIVATION, t[n->out[0]].dtype, t[n->out[0]].bytes, 1, what);
    }
}

/* What the eager GradientTape holds of node i (tf_tape.def): the inputs
 * and outputs its row names, the intermediates of its op chain, and for
 * Keras 2's fused layers the kernel's reserve spaces. False: no row. */
bool dm_tf_tape_save(struct dm_sb *b, int32_t i)
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    const struct tf_tape_row *r = tf_tape_row(b, n);
    if (!r)
        return false;
    for (int k = 0; k < n->n_in && k < 32; k++)
        if (((r->in >> k) & 1u) && dm_has_in(n, k) && !dm_meta_slot(n, k))
            dm_keep_input(b, i, k);
    for (int k = 0; k < n->n_out && k < 32; k++)
        if (((r->out >> k) & 1u) && dm_has_out(n, k) && !t[n->out[k]].absent)
            dm_keep_tensor(b, i, n->out[k]);
    int32_t out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    int chain = r->chain;
    if (chain < 0) { /* a merge layer's partial results */
        int data = 0;
        for (int k = 0; k < n->n_in; k++)
            data += dm_has_in(n, k) && !dm_meta_slot(n, k);
        chain = data + chain > 0 ? data + chain : 0;
    }
    for (int c = 0, w = 0; c < chain && out0 >= 0 && r->what; c++) {
        dm_keep_new(b, i, t[out0].dtype, t[out0].numel, r->what[w]);
        w += r->what[w + 1] != NULL;
    }
    if (r->when == TF_W_FUSED_BN && dm_has_in(n, 0)) {
        /* reserve_space_1/2: the batch mean and inverse variance, [C] float32
         * (reserve_space_3, cuDNN's, taken as 0: header) */
        const struct dm_tinfo *x = &t[n->in[0]];
        int64_t c = x->rank >= 2 ? x->dims[1] : 1;
        dm_keep_new(b, i, DM_FLOAT, c, "reserve_space_1 (batch mean)");
        dm_keep_new(b, i, DM_FLOAT, c, "reserve_space_2 (batch inverse variance)");
    }
    if (r->when == TF_W_FUSED_LN && out0 >= 0) {
        /* FusedBatchNormV3 on [1, rows, D, 1] with scale ones([rows]) (input
         * 1, kept), reserve_space_1/2 [rows] float32; `* gamma` keeps the
         * normalized output, `+ beta` (AddV2) `* gamma`'s result (header) */
        int64_t rows = dm_ln_rows(b, n);
        dm_keep_new(b, i, DM_FLOAT, rows, "mean");
        dm_keep_new(b, i, DM_FLOAT, rows, "rstd");
        dm_keep_new(b, i, DM_FLOAT, rows, "ones (scale)");
        dm_keep_new(b, i, t[out0].dtype, t[out0].numel, "normalized");
        if (dm_has_in(n, 2))
            dm_keep_new(b, i, t[out0].dtype, t[out0].numel, "normalized * gamma");
    }
    return true;
}

/* TensorFlow under tf.function: gradient kernels that write the input's grad
 * into a buffer they read when the executor holds its only reference
 * (OpKernelContext::forward_input_or_allocate_output, as tf_forwards in
 * src/schedule/forward.c does for the forward pass):
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
int32_t dm_tf_grad_target(struct dm_sb *b, int32_t i, int k, int32_t gout)
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

/* Keras 3's layers under tf.function whose grads make input-sized
 * transients (measured: tools/oracle/tf_measure.py trace rand2-fit-b4, every
 * BFC event of the step, TF 2.21.0 / Keras 3.15.1, oneDNN on):
 *  - BatchNormalization in training (Keras 3 does not fuse: ops.moments,
 *    then tf.nn.batch_normalization's x * inv + (offset - mean * inv);
 *    keras/src/layers/normalization/batch_normalization.py): the backward
 *    allocates, each [N,H,W,C], moments/Tile (the mean's _MeanGrad), the
 *    grad of batchnorm/mul_1 (freed at once) and moments/Tile_1 (the
 *    variance's), the two Tiles live together, then both freed; the input's
 *    grad is summed into the incoming grad's buffer (forwarding). Modelled
 *    as the three transients before the grad (two live at once); the grad's
 *    own buffer stays dnnmem's. Not Keras 2's FusedBatchNormV3
 *    (tf_fused_nhwc).
 *  - silu (tf.nn.silu, a custom_gradient: python/ops/nn_impl.py swish): the
 *    grad recomputes sigmoid(x) (its buffer becomes the grad, by
 *    forwarding) and 1 - sigmoid(x), freed when the product chain has run:
 *    one transient beside the grad. */
void dm_tf_graph_transients(struct dm_sb *b, int32_t i, int32_t x, bool after)
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    if (!b->run->tf_graph || !b->run->tf_build || x < 0)
        return;
    if (n->op == DM_OP_BatchNormalization && !after && dm_attr_int(n, "tf_fused_nhwc", 0) == 0) {
        int32_t tile = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                                   "moments/Tile (the mean's grad)", 1);
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                    "grad of x * inv (batchnorm/mul_1)", 0);
        int32_t tile1 = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                                    "moments/Tile_1 (the variance's grad)", 1);
        dm_sb_unref(b, tile1);
        dm_sb_unref(b, tile);
    }
    if (n->op == DM_OP_Silu && after)
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                    "1 - sigmoid(x) (silu's grad)", 0);
}

/* Eagerly, silu's custom gradient (nn_impl.py swish, TF 2.21: grad(dy)
 * computes sigmoid_features, activation_grad = s * (1 + (beta * x) * (1 -
 * s)) and beta_grad = reduce_sum(dy * x * x * s * (1 - s)), then returns
 * dy * activation_grad): each op a new buffer, no forwarding (an eager input
 * is held by its Python handle). Measured (tf_measure.py trace
 * micro-convsilu-tape-b8, TF 2.21.0 / Keras 3.15.1): Sigmoid and the
 * activation grad's last Mul stay, while beta_grad's chain holds two Muls
 * and a Sub at once (the step's peak: x, the layer's output, dy, s,
 * activation_grad and those three), then dy * activation_grad is made and s
 * and activation_grad are freed. `phase` 0: before the grad is made (s,
 * activation_grad and beta_grad's transients), 1: after (s and
 * activation_grad freed). */
void dm_tf_eager_silu_grad(struct dm_sb *b, int32_t i, int32_t x, int phase, int32_t held[2])
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    if (!b->run->tf_ops || b->run->tf_graph || !b->run->tf_build || n->op != DM_OP_Silu || x < 0)
        return;
    if (phase == 1) {
        dm_sb_unref(b, held[0]);
        dm_sb_unref(b, held[1]);
        held[0] = held[1] = -1;
        return;
    }
    held[0] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                          "sigmoid(beta * x) (silu's grad)", 1);
    held[1] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                          "activation_grad (silu's grad)", 1);
    int32_t p = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                            "dy * x * x * s (silu's beta grad)", 1);
    int32_t s1 = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                             "1 - s (silu's beta grad)", 1);
    dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                "... * (1 - s) (silu's beta grad)", 0);
    dm_sb_unref(b, p);
    dm_sb_unref(b, s1);
}

/* The tape's saved extra of node i named `what`, released now (-1 in the
 * saved list, so the node's end does not release it again). */
static void release_saved(struct dm_sb *b, int32_t i, const char *what)
{
    struct dm_train *tr = b->train;
    for (int s = 0; s < tr->n_saved[i]; s++) {
        int32_t sb = tr->saved[i][s];
        if (sb >= 0 && b->s->buf[sb].what && strcmp(b->s->buf[sb].what, what) == 0) {
            dm_sb_unref(b, sb);
            tr->saved[i][s] = -1;
            return;
        }
    }
}

/* Eagerly, Keras 3's BatchNormalization grad on a watched x (the moments
 * and batch_normalization ops of tf_tape.def, each grad op a new buffer).
 * Measured (tf_measure.py trace micro-convbn-tape-b8, TF 2.21.0 / Keras
 * 3.15.1, x the Conv2D's output): the tape lets x * inv go, then _MulGrad
 * makes dy * inv (held to the sum) and dy * x (reduced at once), the
 * incoming grad is freed, the mean's and the variance's _MeanGrad each a
 * BroadcastTo (freed) and a RealDiv (held), the tape lets the squared
 * difference go, _SquaredDifferenceGrad makes 2 * grad, x - mean and their
 * product (held), the first two freed; then AddN sums the three paths into
 * x's grad and the held ones go: six x-sized buffers at the peak besides x.
 * `phase` 0: before the grad is made, 1: after; held: the four kept until
 * the sum. */
void dm_tf_eager_bn_grad(struct dm_sb *b, int32_t i, int32_t x, int32_t gout, int phase,
                         int32_t held[4])
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    if (!b->run->tf_ops || b->run->tf_graph || !b->run->tf_build || x < 0 ||
        n->op != DM_OP_BatchNormalization || dm_attr_int(n, "tf_fused_nhwc", 0) != 0)
        return;
    if (phase == 1) {
        for (int k = 0; k < 4; k++) {
            dm_sb_unref(b, held[k]);
            held[k] = -1;
        }
        return;
    }
    enum dm_dtype dt = t[x].dtype;
    uint64_t xb = t[x].bytes;
    release_saved(b, i, "x * inv");
    held[0] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, xb, x, i, "dy * inv (BatchNorm's grad)", 1);
    dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, xb, x, i, "dy * x (BatchNorm's grad)", 0);
    /* the incoming grad, when only the backward still holds it */
    if (gout >= 0 && b->refs[gout] == 1)
        dm_sb_unref(b, gout);
    for (int k = 1; k <= 2; k++) {
        int32_t bc = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, xb, x, i,
                                 "broadcast_to (BatchNorm's _MeanGrad)", 1);
        held[k] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, xb, x, i,
                              "RealDiv (BatchNorm's _MeanGrad)", 1);
        dm_sb_unref(b, bc);
    }
    release_saved(b, i, "squared difference (moments)");
    int32_t two = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, xb, x, i,
                              "2 * grad (_SquaredDifferenceGrad)", 1);
    int32_t diff = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, xb, x, i,
                               "x - mean (_SquaredDifferenceGrad)", 1);
    held[3] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, xb, x, i,
                          "2 * grad * (x - mean) (_SquaredDifferenceGrad)", 1);
    dm_sb_unref(b, two);
    dm_sb_unref(b, diff);
}

/* tf.clip_by_value's grad under tf.function (above): the bool mask, and the
 * zeros when the select took the grad's buffer, live while it runs. */
void dm_tf_clip_transients(struct dm_sb *b, int32_t i, int32_t x, bool forwarded)
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
