/*
 * mxnet.c: MXNet's rules (--framework mxnet: run->mx_ops) for what each
 * op's backward reads, its gradient aggregation, and the planning of its
 * backward mirroring (the copies themselves run in train.c).
 */
#include "train/train.h"

#include <stdlib.h>

/* ---- MXNet (--framework mxnet: run->mx_ops) --------------------------------------
 *
 * What MXNet 1.x's backward reads, per operator, replacing the PyTorch rules
 * (save.c) for the ops the MXNet front end builds (src/load/mxnet.c maps each
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
 *  - Activation (activation.cc, ActivationGrad): the output, and the input
 *    too for every act_type but relu ("for ReLU, no need to pass input
 *    data. This enables inplace optimization"): sigmoid, tanh, softrelu and
 *    softsign, in every build (1.9.1's switch on act_type has no cuDNN
 *    condition; re-read for issue 18).
 *  - LeakyReLU (leaky_relu-inl.h, the backward kernel): leaky, elu and selu
 *    read the output (xelu_grad(output)), prelu the data and gamma, gelu the
 *    data and the output. rrelu's random mask output is not modelled (the
 *    front end builds rrelu as leaky).
 *  - Pooling (pooling.cc: ElemwiseGradUseInOut{"_backward_Pooling"}): data
 *    and output, for max, avg and global pooling alike. Max pooling of 2-D
 *    kernels also keeps a hidden output in the build with oneDNN (USE_MKLDNN=1:
 *    the pip wheels, whatever MXNET_MKLDNN_ENABLED says at run time, since the
 *    graph's outputs are fixed when the op is registered): pooling.cc,
 *    1.9.1, GetNumOutputs "MKLDNNRequireWorkspace(param) &&
 *    SupportMKLDNNPooling(param) ? 2 : 1", PoolingShape pushes the output's
 *    shape again "for workspace", PoolingType makes it kInt32, and
 *    _backward_Pooling reads it (GetNumBackInputs 5). MKLDNNRequireWorkspace
 *    is pool_type != avg (mkldnn_pooling-inl.h). Measured (mxnet2): it is the
 *    storage missing from SqueezeNet v1.2 training (three max pools, 10.6 MB)
 *    and from ResNet-18/50 training (the stem's max pool).
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
 *    reserve space): PyTorch's cuDNN rule (save.c: input, output, reserve).
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
    MXK_WS = 128u,  /* max pooling's workspace output (oneDNN build), int32 of the output's shape */
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
    {DM_OP_Sigmoid, MXK_OUT0 | MXK_IN0, "Activation sigmoid"},
    {DM_OP_Tanh, MXK_OUT0 | MXK_IN0, "Activation tanh"},
    {DM_OP_Softplus, MXK_OUT0 | MXK_IN0, "Activation softrelu"},
    {DM_OP_Softsign, MXK_OUT0 | MXK_IN0, "Activation softsign"},
    {DM_OP_LeakyRelu, MXK_OUT0, "LeakyReLU leaky"},
    {DM_OP_Elu, MXK_OUT0, "LeakyReLU elu"},
    {DM_OP_Selu, MXK_OUT0, "LeakyReLU selu"},
    {DM_OP_PRelu, MXK_IN0, "LeakyReLU prelu"},
    {DM_OP_Gelu, MXK_IN0 | MXK_OUT0, "LeakyReLU gelu"},
    {DM_OP_MaxPool, MXK_IN0 | MXK_OUT0 | MXK_WS, "Pooling max"},
    {DM_OP_AveragePool, MXK_IN0 | MXK_OUT0, "Pooling avg"},
    {DM_OP_GlobalMaxPool, MXK_IN0 | MXK_OUT0 | MXK_WS, "Pooling max, global_pool"},
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
bool dm_mx_loss_head(const struct dm_sb *b, int32_t x)
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
bool dm_mx_save(struct dm_sb *b, int32_t i)
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    int32_t in0 = dm_has_in(n, 0) ? n->in[0] : -1, out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    if (out0 >= 0 && dm_mx_loss_head(b, out0)) { /* {label, output}: the label is an input */
        dm_keep_tensor(b, i, out0);
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
                dm_keep_input(b, i, k);
    }
    if ((keep & MXK_IN0) && in0 >= 0)
        dm_keep_input(b, i, 0);
    if ((keep & MXK_IN1) && dm_has_in(n, 1))
        dm_keep_input(b, i, 1);
    if ((keep & MXK_OUT0) && out0 >= 0)
        dm_keep_tensor(b, i, out0);
    if ((keep & MXK_BN) && in0 >= 0) {
        int64_t c = t[in0].rank >= 2 ? t[in0].dims[1] : 1;
        dm_keep_new(b, i, DM_FLOAT, c, "mean (output 1)");
        dm_keep_new(b, i, DM_FLOAT, c, "var (output 2)");
    }
    if ((keep & MXK_LN) && in0 >= 0) {
        int64_t rows = dm_ln_rows(b, n);
        dm_keep_new(b, i, t[in0].dtype, rows, "mean (output 1)");
        dm_keep_new(b, i, t[in0].dtype, rows, "std (output 2)");
    }
    /* SupportMKLDNNPooling: a 2-D kernel (rank-4 data) in every 1.x release */
    if ((keep & MXK_WS) && out0 >= 0 && in0 >= 0 && t[in0].rank == 4)
        dm_keep_new(b, i, DM_INT32, t[out0].numel, "workspace (output 1, oneDNN build)");
    if ((keep & MXK_MASK) && in0 >= 0) {
        if (b->run->mx_version >= 200)
            dm_keep_new(b, i, DM_UINT8, (t[in0].numel + 7) / 8, "mask (1 bit per element)");
        else
            dm_keep_new(b, i, t[in0].dtype, t[in0].numel, "mask");
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
void dm_mx_release(struct dm_sb *b, int32_t x)
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
bool dm_mx_addto(const struct dm_sb *b, int32_t x)
{
    const struct dm_train *tr = b->train;
    if (!b->run->mx_ops || tr->param[x] || tr->contrib[x] < b->run->mx_grad_sum_cap)
        return false;
    int32_t g0 = tr->grad[x];
    return g0 >= 0 && b->refs[g0] == 1 && b->s->buf[g0].bytes >= b->t[x].bytes;
}

/* One gradient contribution reaching tensor x (not a parameter), summed as
 * AggregateGradient does (header). gbuf < 0: written with kAddTo. */
void dm_mx_deliver(struct dm_sb *b, int32_t x, int32_t gbuf)
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
    dm_mx_release(b, x);
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
 *    (dm_mx_save on the copy's entries). nnvm's own topological order is not
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

bool dm_mx_data_slot(const struct dm_node *n, int k)
{
    return n->in[k] >= 0 && !dm_meta_slot(n, k);
}

/* Which mirrored nodes have a copy in the backward graph: those whose
 * gradient runs, and those a live copy reads (last node first). */
enum dnnmem_status dm_mx_mirror_plan(struct dm_sb *b, struct dnnmem_error *err)
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
            data += dm_mx_data_slot(n, k);
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
            if (dm_mx_data_slot(n, k) && g->tensors[n->in[k]].producer >= 0)
                read[g->tensors[n->in[k]].producer] = true;
    }
    free(read);
    if (tr->mx_mir)
        dm_mx_mirror_end(b); /* the first backward's counts */
    return DNNMEM_OK;
}

/* Whether input slot k of node n reads a copy's output (mirror_map). */
bool dm_mx_reads_copy(const struct dm_sb *b, const struct dm_node *n, int k)
{
    int32_t p = b->g->tensors[n->in[k]].producer;
    return p >= 0 && b->train->mx_mir[p];
}

/* Forward, mirrored node i: keep, slot by slot, the entries its copy will
 * read from the forward (-1 where there is no buffer). */
void dm_mx_mirror_keep(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_node *n = &b->g->nodes[i];
    tr->n_saved[i] = 0;
    for (int k = 0; k < n->n_in; k++) {
        if (!dm_mx_data_slot(n, k) || dm_mx_reads_copy(b, n, k))
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

/* After the backward: let go of copies' outputs no copy read (their
 * readers' gradients never ran), and reset for the next step. */
void dm_mx_mirror_end(struct dm_sb *b)
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
            if (dm_mx_data_slot(n, k) && dm_mx_reads_copy(b, n, k))
                tr->mx_uses[n->in[k]]++;
    }
}
