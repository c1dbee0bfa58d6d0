/*
 * forward.c: the allocations and frees of PyTorch eager's forward pass, in order.
 *
 * Forward pass (both modes):
 *  - weights (parameters and buffers) are resident before the first op; so
 *    are the graph inputs, which the caller holds;
 *  - each op allocates its outputs when it runs; a tensor is freed when its
 *    last holder lets go: its last reader, the caller (graph outputs), or the
 *    backward of an op that saved it (src/train/save.c);
 *  - views (ops flagged DM_F_VIEW, and Dropout in eval mode) allocate nothing
 *    and hold their base; Reshape/Flatten of a transposed (non-contiguous)
 *    tensor copies, as torch.reshape does;
 *  - with in-place activations on, a ReLU-like op whose input nothing else
 *    holds writes into its input (torchvision's inplace=True);
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
#include "schedule/builder.h"

#include <string.h>

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

/* Whether Transpose's view of in0 is non-contiguous. A channels-last tensor
 * (layout.c) is dense in N, H, W, C order, so its permute(0, 2, 3, 1) is
 * contiguous (ConvNeXt's LayerNorm2d reads it so, with no copy). */
static bool transpose_strided(const struct dm_sb *b, const struct dm_node *n, int32_t in0)
{
    int64_t cnt;
    const int64_t *p = dm_attr_ints(n, "perm", &cnt);
    if (b->chlast[in0])
        return !(p && cnt == 4 && p[0] == 0 && p[1] == 2 && p[2] == 3 && p[3] == 1);
    return b->strided[in0] || !transpose_keeps_order(n, &b->t[in0]);
}

/* Whether Narrow's view of x (or a view Split's part) skips elements: a
 * narrowed dim with a larger dim after it (torch.split along the last axis). */
static bool narrow_strides(const struct dm_node *n, const struct dm_tinfo *x)
{
    int64_t axis = dm_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += x->rank;
    for (int d = (int)axis + 1; d < x->rank; d++)
        if (x->dims[d] != 1)
            return true;
    return false;
}

/* A Slice PyTorch ran as a view, *strided when it is not contiguous. Basic
 * indexing, narrow and chunk (x[:, a:b], x[::k]) are aten::slice, which
 * returns an as_strided view of its input for any positive step
 * (aten/src/ATen/native/TensorShape.cpp, slice); the TorchScript exporter
 * writes them as Slice. A negative step is its torch.flip, a copy. A view
 * saved for backward keeps its whole base alive (torchvision's ShuffleNetV2
 * channel split: x.chunk(2, dim=1), the second half read by a convolution,
 * training -3.6..-4.1% with Slice copied). TensorFlow's and MXNet's slices
 * copy, and XLA's are fusions: those keep the copy. */
static bool slice_view(const struct dm_sb *b, const struct dm_node *n, bool *strided,
                       int64_t step[DM_MAX_DIMS])
{
    const struct dm_tinfo *t = b->t;
    if (b->run->tf_ops || b->run->mx_ops || b->run->xla || n->n_in < 3 || b->g->opset < 10 ||
        !dm_has_in(n, 0) || !dm_has_out(n, 0))
        return false;
    const struct dm_tinfo *x = &t[n->in[0]], *y = &t[n->out[0]];
    const struct dm_value *axes = dm_has_in(n, 3) ? t[n->in[3]].value : NULL;
    const struct dm_value *steps = dm_has_in(n, 4) ? t[n->in[4]].value : NULL;
    if (x->rank < 0 || x->rank != y->rank || (dm_has_in(n, 3) && (!axes || axes->is_float)) ||
        (dm_has_in(n, 4) && (!steps || steps->is_float)))
        return false;
    for (int d = 0; d < x->rank; d++)
        step[d] = 1;
    for (int64_t k = 0; steps && k < steps->n; k++) {
        int64_t a = axes ? axes->i[k] : k;
        if (a < 0)
            a += x->rank;
        if (a < 0 || a >= x->rank || steps->i[k] <= 0)
            return false;
        step[a] = steps->i[k];
    }
    /* contiguous: past the size-1 dims, the outermost dim steps by 1 and every
     * inner one is whole */
    bool outer = true;
    *strided = false;
    for (int d = 0; d < x->rank; d++) {
        if (y->dims[d] <= 1)
            continue;
        if (step[d] != 1 || (!outer && y->dims[d] != x->dims[d]))
            *strided = true;
        outer = false;
    }
    return true;
}

/* Ops that torchvision and common models run in place (ReLU(inplace=True),
 * ReLU6/Hardtanh, Hardswish, Hardsigmoid, LeakyReLU). hardtanh_,
 * hardswish_ and hardsigmoid_ clone their input for their backward (the
 * clone save.c keeps), which costs what the out-of-place op does, but on a
 * view their backward is autograd's CopySlices (save.c, on_view: rand33's
 * hardsigmoid_ after an InstanceNorm2d, -7..-8% run out of place).
 * SiLU(inplace=True) (torchvision's Conv2dNormActivation, timm's
 * BatchNormAct2d) only without grad: transformers' SiLU, which the HF front
 * end builds, is out of place, and in training silu_'s clone costs what
 * that does (dm_sb_forward_node). ELU, SELU and CELU
 * (inplace=True: elu_, celu_, whose backward keeps the result, nothing
 * cloned; save.c) in PyTorch only: MXNet's LeakyReLU act_type elu is
 * mxnet.c's. */
static bool can_run_inplace(const struct dm_sb *b, enum dm_op op)
{
    if ((op == DM_OP_Elu || op == DM_OP_Selu || op == DM_OP_Celu) && b->run->mx_ops)
        return false;
    /* MXNet's clip (Gluon's ReLU6) declares no FInplaceOption (src/operator/tensor/
     * matrix_op.cc, 1.9.1: FGradient ElemwiseGradUseIn, its backward reads the
     * input): out of place, not torchvision's hardtanh_ (mxnet2: MobileNetV2
     * training -17% with it) */
    if (op == DM_OP_Clip && b->run->mx_ops)
        return false;
    return dm_op_inplace_activation(op) || op == DM_OP_IndexAdd; /* Tensor.index_add_ */
}

/* Whether activation n runs in place on its input's buffer `base`. What the
 * model file says decides (dm_node.inplace_fact: the module's `inplace`,
 * onnx.c; nn.ReLU() of HF models: attribute inplace 0): F.relu(x,
 * inplace=True) runs relu_ whoever else holds x. Otherwise --inplace: with
 * auto, in place when nothing but this op holds the input. SiLU stays out
 * of place with grad either way: silu_ clones its input for SiluBackward0,
 * which costs what silu does (header of can_run_inplace). */
static bool runs_inplace(const struct dm_sb *b, const struct dm_node *n, int32_t base, bool train)
{
    if (!can_run_inplace(b, n->op) || (n->op == DM_OP_Silu && train))
        return false;
    if (n->inplace_fact == DM_INPLACE_FACT_YES)
        return !b->run->tf_ops && !b->run->xla && !b->run->mx_ops;
    if (n->inplace_fact == DM_INPLACE_FACT_NO || dm_attr_int(n, "inplace", 1) == 0)
        return false;
    return b->run->inplace && b->refs[base] == 1;
}

/* TensorFlow under tf.function: kernels that write their output into an
 * input's buffer when the executor holds the only reference to it
 * (OpKernelContext::forward_input_or_allocate_output): numeric_op.h's
 * UnaryElementWiseOp ({0}: Relu, Relu6, Elu, Selu, LeakyRelu, Softplus,
 * Softsign), cwise_ops_common.h's UnaryOp when the type stays ({0}: Sigmoid,
 * Tanh, Exp, Sqrt, Neg, Abs, Erf, ...) and BinaryOp ({0, 1}: AddV2, Sub,
 * Mul, RealDiv, Maximum, Minimum, Pow, when an input has the output's shape
 * and type), bias_op.cc's BiasAdd ({0}). Eager execution forwards too, but
 * the Python handle of every input holds a reference: not there. */
static int tf_forwards(enum dm_op op)
{
    switch (op) {
    case DM_OP_Relu: case DM_OP_Clip: case DM_OP_Elu: case DM_OP_Selu: case DM_OP_LeakyRelu:
    case DM_OP_Softplus: case DM_OP_Softsign: case DM_OP_Sigmoid: case DM_OP_Tanh:
    case DM_OP_Exp: case DM_OP_Sqrt: case DM_OP_Neg: case DM_OP_Abs: case DM_OP_Erf:
        return 1;
    case DM_OP_Add: case DM_OP_Sub: case DM_OP_Mul: case DM_OP_Div: case DM_OP_Pow:
        return 2;
    default: return 0;
    }
}

/* torch.matmul's fold of a [1, H, S, D] operand into [H, S, D] (a Reshape the
 * HuggingFace front end marks matmul_fold, hf_matmul_fold): dropping a size-1
 * dim is a view whatever the strides, and bmm takes the strided batch. */
static bool fold_is_view(const struct dm_node *n, const struct dm_tinfo *x)
{
    return n->op == DM_OP_Reshape && dm_attr_int(n, "matmul_fold", 0) && x->rank >= 3 &&
           x->dims[0] == 1;
}

/* Transpose(0, 2, 1, 3) of a fused attention's output written as [B,S,H,D]:
 * contiguous again (transformers' .transpose(1, 2).contiguous() copies
 * nothing). */
static bool is_fused_attention_output(const struct dm_sb *b, const struct dm_node *n)
{
    int32_t x = n->in[0], p = x >= 0 ? b->g->tensors[x].producer : -1;
    int64_t cnt;
    const int64_t *perm = dm_attr_ints(n, "perm", &cnt);
    return p >= 0 && b->g->nodes[p].op == DM_OP_Attention && b->strided[x] &&
           cnt == 4 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3;
}

/* Whether x is contiguous in its own [B,H,S,D] order because a cat or a
 * .contiguous() made it (torch.cat writes a new contiguous tensor: the
 * partial-rotary models' q and k; OPT's _shape before 4.49 copies), seen
 * through same-layout copies (.to(): empty_like keeps the order) and views
 * that keep contiguity. Elementwise results are not
 * followed: TensorIterator gives them their first input's order, which
 * the schedule does not track, and the rotary q of a projection's view
 * keeps the view's [B,S,H,D] order. */
static bool made_contiguous(const struct dm_sb *b, int32_t x)
{
    for (int hops = 0; x >= 0 && hops < 8 && !b->strided[x]; hops++) {
        int32_t p = b->g->tensors[x].producer;
        const struct dm_node *n = p >= 0 ? &b->g->nodes[p] : NULL;
        if (!n)
            return false;
        if (n->op == DM_OP_Concat)
            return true;
        /* a Reshape that copied (.contiguous(), reshape of a strided x) */
        if (n->op == DM_OP_Reshape && dm_has_in(n, 0) && b->cur[x] >= 0 &&
            b->cur[x] != b->cur[n->in[0]])
            return true;
        bool view = n->op == DM_OP_Reshape || n->op == DM_OP_Identity;
        if ((n->op != DM_OP_Cast && n->op != DM_OP_CastLike && !view) || !dm_has_in(n, 0))
            return false;
        x = n->in[0];
    }
    return false;
}

/* Whether a fused Attention node's output (its [B,H,S,D] view) is strided:
 * the [B,S,H,D] buffer the CUDA kernels write. The memory-efficient kernel
 * allocates at::empty({B, M, num_heads, Kv}) (_efficient_attention_forward,
 * aten/src/ATen/native/transformers/cuda/attention.cu): always [B,S,H,D].
 * Flash allocates out = at::empty_like(q_padded) on q.transpose(1, 2)
 * (mha_fwd, .../cuda/flash_attn/flash_api.cpp; flash-attn's own mha_fwd the
 * same), which keeps q's memory order: a q contiguous as [B,H,S,D] (a cat's,
 * a .to() copy's, a .contiguous()'s) gives a contiguous [B,H,S,D] output,
 * which transformers' transpose(1, 2).contiguous() (or reshape) then copies;
 * a q viewed out of a projection ([B,S,H,D] in memory, strided as [B,H,S,D])
 * gives [B,S,H,D]. */
static bool fused_attention_strided(const struct dm_sb *b, const struct dm_node *n)
{
    /* the CPU flash kernel: output = at::empty_like(q) as well (measured on
     * 2.13: a q strided as [B,S,H,D] gives a [B,S,H,D] output, a
     * contiguous q a contiguous one) */
    if (n->op != DM_OP_Attention)
        return false;
    return !dm_sdpa_flash(b, n) || !dm_has_in(n, 0) || !made_contiguous(b, n->in[0]);
}

_Static_assert(DM_WS_BUFS == 5, "the forward's workspace initializer lists five slots");

/* The MatMul output an Add of a bias weight would update in place, or -1. */
static int32_t linear_bias_target(const struct dm_sb *b, const struct dm_node *n)
{
    if (n->op != DM_OP_Add || n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0)
        return -1;
    for (int k = 0; k < 2; k++) {
        int32_t w = n->in[1 - k], x = n->in[k];
        int32_t p = b->g->tensors[x].producer;
        if (b->resident[w] >= 0 && b->g->tensors[w].role == DM_ROLE_WEIGHT && p >= 0 &&
            b->g->nodes[p].op == DM_OP_MatMul)
            return x;
    }
    return -1;
}

/* Autocast casts of node n's inputs, made before it runs: a parameter's cast
 * is cached for the whole forward pass, others belong to the op. */
static void amp_casts(struct dm_sb *b, const struct dm_node *n)
{
    for (int k = 0; k < n->n_in; k++) {
        b->in_buf[k] = -1;
        enum dm_dtype to = b->run->amp ? dm_amp_cast(b->g, b->t, n, k, b->run->amp) : DM_UNDEFINED;
        int32_t src = to != DM_UNDEFINED ? b->cur[n->in[k]] : -1;
        if (src < 0)
            continue;
        uint64_t bytes;
        dm_dtype_bytes(to, b->t[n->in[k]].numel, &bytes);
        int32_t w = b->s->buf[src].tensor;
        int32_t node = (int32_t)(n - b->g->nodes);
        if (w >= 0 && b->resident[w] == src && b->g->tensors[w].role == DM_ROLE_WEIGHT) {
            if (b->amp_cache[w] < 0)
                b->amp_cache[w] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, to, bytes, w, node,
                                              "autocast", 1);
            dm_sb_ref(b, b->amp_cache[w], 1);
            b->in_buf[k] = b->amp_cache[w];
        } else {
            b->in_buf[k] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, to, bytes, n->in[k], node,
                                       "autocast", 1);
        }
    }
}


/* o's strides as x.expand(o's dims) (at::inferExpandGeometry,
 * aten/src/ATen/ExpandUtils.cpp): an expanded dim strides 0, a new leading
 * one of size 1 takes the next dim's size times its stride. A Split part has
 * x's rank and dims no larger, so it keeps x's strides. */
static void expand_strides(struct dm_sb *b, int32_t x, int32_t o)
{
    const struct dm_tinfo *tx = &b->t[x], *to = &b->t[o];
    const int64_t *xs = dm_sb_stride(b, x);
    int64_t *ys = dm_sb_stride(b, o);
    if (tx->rank < 0 || to->rank < tx->rank)
        return; /* shape inference refuses these; the dense strides stay */
    for (int d = to->rank - 1; d >= 0; d--) {
        int src = d - (to->rank - tx->rank);
        int64_t size = src >= 0 ? tx->dims[src] : 1;
        int64_t st = src >= 0 ? xs[src]
                     : d + 1 < to->rank ? dm_sat_mul(to->dims[d + 1], ys[d + 1]) : 1;
        ys[d] = size == 1 && to->dims[d] != 1 ? 0 : st;
    }
}

/* Output o of node n as a view of (or in place on) in0: o's strides from
 * in0's (a permute's permuted, a slice's multiplied by its steps, a
 * reshape's from dm_sb_view_strides, already set); true when they decide
 * whether o is contiguous (PyTorch's permutes and reshapes). */
static bool view_of_strides(struct dm_sb *b, const struct dm_node *n, int32_t in0, int32_t o,
                            bool view, const int64_t step[DM_MAX_DIMS])
{
    const int64_t *xs = dm_sb_stride(b, in0);
    int64_t *ys = dm_sb_stride(b, o);
    int rx = b->t[in0].rank, ry = b->t[o].rank;
    bool reshape = n->op == DM_OP_Reshape || n->op == DM_OP_Flatten || n->op == DM_OP_Squeeze ||
                   n->op == DM_OP_Unsqueeze;
    if (view && n->op == DM_OP_Transpose && rx == ry) {
        int64_t cnt;
        const int64_t *p = dm_attr_ints(n, "perm", &cnt);
        for (int d = 0; d < ry; d++) {
            int64_t src = cnt == ry ? p[d] : ry - 1 - d;
            ys[d] = src >= 0 && src < rx ? xs[src] : 1;
        }
        return dm_sb_torch_onnx(b);
    }
    if (view && (n->op == DM_OP_Split || n->op == DM_OP_Expand) && dm_sb_torch_onnx(b)) {
        expand_strides(b, in0, o);
        return true;
    }
    if (view && reshape && dm_sb_torch_onnx(b)) {
        if (n->op == DM_OP_Squeeze || n->op == DM_OP_Unsqueeze)
            dm_sb_view_strides(b, in0, o); /* always a view */
        return true; /* dm_sb_view_strides set them */
    }
    if (rx == ry)
        for (int d = 0; d < ry; d++)
            ys[d] = dm_sat_mul(xs[d], n->op == DM_OP_Slice && step[d] > 0 ? step[d] : 1);
    return false;
}

/* The shape torch.matmul reshapes operand k of n to before its kernel, in
 * *rank and dims: the batched path's [batch, rows, cols], or the fold's
 * [rows, cols] of the larger operand when the other is a matrix or a vector
 * (aten/src/ATen/native/LinearAlgebra.cpp, _matmul_impl). 2.x folds when
 * that larger operand needs a grad or folds without a copy (should_fold),
 * else it takes the batched path; 1.13 always folds. False: no reshape
 * (mm, mv), or batch dims broadcast (an expand, not modelled). */
static bool matmul_operand_shape(const struct dm_sb *b, const struct dm_node *n, int k, bool save,
                                 int *rank, int64_t dims[3])
{
    const struct dm_tinfo *a = &b->t[n->in[0]], *c = &b->t[n->in[1]], *x = k ? c : a;
    int r = x->rank;
    if (a->rank <= 2 && c->rank <= 2)
        return false;
    int64_t rows = r >= 2 ? x->dims[r - 2] : 1, batch = 1;
    for (int d = 0; d + 2 < r; d++)
        batch = dm_sat_mul(batch, x->dims[d]);
    if (k == 0 && a->rank >= 3 && c->rank <= 2) {
        bool fold = b->run->torch_version < 200 || (save && dm_train_requires_grad(b, n->in[0]));
        int64_t flat[2] = {dm_sat_mul(batch, rows), x->dims[r - 1]};
        if (fold || dm_sb_viewable(b, n->in[0], 2, flat)) {
            *rank = 2;
            memcpy(dims, flat, sizeof flat);
            return true;
        }
    }
    if (a->rank < 3 || c->rank < 3 || a->rank != c->rank)
        return false; /* a vector or a transposed fold; broadcast batch dims */
    for (int d = 0; d + 2 < r; d++)
        if (a->dims[d] != c->dims[d])
            return false;
    *rank = 3;
    dims[0] = batch;
    dims[1] = rows;
    dims[2] = x->dims[r - 1];
    return true;
}

/* torch.matmul's reshape of an operand whose strides allow no view of that
 * shape is a contiguous copy, made before the kernel's output; bmm and mm
 * keep it for the other operand's grad (the copy is what MmBackward0 and
 * BmmBackward0 save, not the view), and without grad it is freed when
 * matmul returns. Measured on 2.14.1: randnet's attention q @ k^T, q and k
 * transposed views of a chunk of the qkv Linear's output, makes two
 * 24,576 B clones, then the 131,072 B scores, and frees the clones (no
 * grad); in training they live until BmmBackward0 has run. The copy takes
 * the operand's slot in in_buf, so save.c keeps it. */
static void matmul_copies(struct dm_sb *b, const struct dm_node *n, int32_t i, bool save)
{
    if (n->op != DM_OP_MatMul || n->n_in != 2 || !dm_has_in(n, 0) || !dm_has_in(n, 1) ||
        !dm_sb_torch_onnx(b) || b->run->dataflow)
        return;
    for (int k = 0; k < 2; k++) {
        int32_t x = n->in[k];
        int rank;
        int64_t dims[3];
        if (b->in_buf[k] >= 0 || b->cur[x] < 0 || b->resident[x] >= 0 ||
            !matmul_operand_shape(b, n, k, save, &rank, dims) || dm_sb_viewable(b, x, rank, dims))
            continue;
        b->in_buf[k] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, b->t[x].dtype, b->t[x].bytes, x, i,
                                   "matmul's contiguous copy", 1);
    }
}

/* A value computed from weights alone that a device op reads (directly or
 * through views): PyTorch computes it in every forward, as the module's
 * forward does it (timm's ScaledStdConv2d, NF-ResNet: F.batch_norm of the
 * weight viewed as [1, out, fan_in], reshaped back, then conv2d: measured,
 * 2.14.1, a 9,437,184 B native_batch_norm output for a 512 x 512 x 3 x 3
 * weight, live through the convolution; nf_resnet26 inference -9..-11%
 * without it). Computing ops only: the exporter's own repacking of
 * weights (an LSTM's gates: Slice, Concat, Split, Gather; views) is no
 * tensor in PyTorch. torch.onnx graphs (dm_sb_torch_onnx). The exporter's
 * auxiliary values (a training-mode BatchNormalization's mean and variance
 * inputs, which native_batch_norm computes inside) feed no device op. */
static bool weight_computed(const struct dm_sb *b, const struct dm_node *n, int32_t o)
{
    if (!dm_sb_torch_onnx(b) || !(b->flag[o] & DM_TF_FROM_WEIGHT) || (b->flag[o] & DM_TF_DEP) ||
        !(b->flag[o] & (DM_TF_DEVICE_USE | DM_TF_DEVICE_FEED)) || b->t[o].numel <= 1 ||
        (dm_ops[n->op].flags & DM_F_VIEW))
        return false;
    return dm_sb_weight_compute_op(n->op);
}

/* An op on values computed from weights alone that PyTorch runs (a Mul, a
 * Gemm, an activation), not one of the exporter's repackings of a weight */
bool dm_sb_weight_compute_op(enum dm_op op)
{
    switch (op) {
    case DM_OP_Slice: case DM_OP_Split: case DM_OP_Concat: case DM_OP_Gather: case DM_OP_Cast:
    case DM_OP_Expand: case DM_OP_Tile: case DM_OP_Constant: case DM_OP_ConstantOfShape:
        return false;
    default: return true;
    }
}

/* Max pooling without grad computes its int64 indices anyway: max_pool2d and
 * max_pool3d return std::get<0>(at::max_pool2d_with_indices(...)) off mobile
 * builds, whatever the grad mode (aten/src/ATen/native/Pooling.cpp, 1.13 and
 * 2.x alike), and max_pool1d does so when the input needs a grad or is not on
 * the CPU (MaxPooling.cpp), else its max_pool1d_impl allocates the output
 * alone.  The indices are output-shaped, allocated after the output and freed
 * when the op returns (2.14.1's profiler: max_pool2d_with_indices 12,288 B
 * for a [2, 8, 8, 8] float output, 4,096 B of it the output).  With grad the
 * indices are MaxPool2DWithIndicesBackward0's, kept by src/train/save.c. */
static int32_t maxpool_indices(struct dm_sb *b, const struct dm_node *n, int32_t i, bool save)
{
    const struct dm_run *r = b->run;
    int32_t x = dm_has_in(n, 0) ? n->in[0] : -1, y = n->n_out > 0 ? n->out[0] : -1;
    if (n->op != DM_OP_MaxPool || save || x < 0 || y < 0 || b->cur[y] < 0 || r->tf_ops ||
        r->mx_ops || r->xla || r->dataflow || (n->n_out > 1 && n->out[1] >= 0) ||
        (b->t[x].rank == 3 && !r->cuda))
        return -1;
    uint64_t bytes;
    if (!dm_dtype_bytes(DM_INT64, b->t[y].numel, &bytes))
        return -1;
    return dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_INT64, bytes, -1, i, "max_pool indices", 1);
}

/* MXNet, the build with oneDNN (the pip wheels): max pooling of a 2-D kernel
 * has a hidden second output, the workspace, int32 of the output's shape
 * (src/operator/nn/pooling.cc, 1.9.1: GetNumOutputs, PoolingShape "for
 * workspace", PoolingType kInt32), whatever MXNET_MKLDNN_ENABLED says at run
 * time. Without grad nobody reads it: nnvm's PlanMemory gives it a storage
 * and releases it after the node's inputs (plan_memory.cc, AllocMemory).
 * With grad src/train/mxnet.c keeps it for _backward_Pooling. */
static int32_t mx_pool_workspace(struct dm_sb *b, const struct dm_node *n, int32_t i, bool save)
{
    int32_t x = dm_has_in(n, 0) ? n->in[0] : -1, y = n->n_out > 0 ? n->out[0] : -1;
    if ((n->op != DM_OP_MaxPool && n->op != DM_OP_GlobalMaxPool) || save || !b->run->mx_ops ||
        x < 0 || y < 0 || b->cur[y] < 0 || b->t[x].rank != 4)
        return -1;
    uint64_t bytes;
    if (!dm_dtype_bytes(DM_INT32, b->t[y].numel, &bytes))
        return -1;
    return dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT32, bytes, -1, i,
                       "Pooling workspace (output 1, oneDNN build)", 1);
}

/* Run node i forward. `uses` counts the later reads of each tensor that will
 * release it; `save`: record what backward needs (grad mode on); `again`: a
 * recomputation, whose graph outputs the caller does not hold. */
void dm_sb_forward_node(struct dm_sb *b, int32_t i, const int32_t *uses, bool save, bool again)
{
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &g->nodes[i];
    bool train = b->run->train;
    unsigned flags = dm_ops[n->op].flags;
    dm_sb_step(b, DM_PHASE_FORWARD, i);
    /* the outputs' format again, from the formats views took in this pass */
    if (dm_sb_torch_onnx(b))
        dm_sb_layout_node(g, t, b->chlast, i);
    bool on_device = n->n_out > 0 && n->out[0] >= 0 && !t[n->out[0]].is_const;
    struct dm_ws ws = {{-1, -1, -1, -1, -1}};
    if (on_device)
        ws = dm_sb_workspace_begin(b, n, false);
    if (on_device) {
        amp_casts(b, n);
        matmul_copies(b, n, i, save);
        if (b->par)
            dm_par_forward_gather(b, i);
    }
    else
        for (int k = 0; k < n->n_in; k++)
            b->in_buf[k] = -1;
    /* eager TensorFlow: the op chain's intermediates made before the output */
    struct dm_tf_chain chain = {NULL, i, 0, {-1, -1, -1}};
    if (on_device)
        dm_tf_chain_begin(b, i, save, &chain);
    for (int k = 0; k < n->n_out; k++) {
        int32_t o = n->out[k];
        if (o < 0 || t[o].absent || b->resident[o] >= 0)
            continue;
        b->cur[o] = -1;
        b->strided[o] = false;
        if (k > 0 && (flags & DM_F_TRAIN_AUX))
            continue; /* eval: not produced; training: running statistics updated in
                         place, masks and statistics kept by src/train as saved extras */
        /* holders: later readers, the caller (graph outputs), the op itself */
        int32_t holders = uses[o] + (g->tensors[o].is_output && !again ? 1 : 0) + 1;
        int32_t in0 = dm_has_in(n, 0) ? n->in[0] : -1;
        int32_t base = in0 >= 0 ? b->cur[in0] : -1;
        /* Tensor.to() of the tensor's own dtype returns the tensor itself */
        bool same_cast = (n->op == DM_OP_Cast || n->op == DM_OP_CastLike) && in0 >= 0 &&
                         t[o].dtype == t[in0].dtype;
        bool slice_strided = false;
        int64_t step[DM_MAX_DIMS] = {0};
        dm_sb_dense_strides(b, o);
        bool alias = k == 0 && base >= 0 &&
                     ((flags & DM_F_VIEW) || same_cast ||
                      (!train && (flags & DM_F_IDENTITY_INFER)) ||
                      (n->op == DM_OP_Slice && slice_view(b, n, &slice_strided, step)));
        /* torch.split's parts, where the front end marks them as the views
         * they are in PyTorch ("view"): every output shares input 0. In
         * torch.onnx graphs every Split is one: the exporter writes
         * torch.split, chunk and unbind as Split (symbolic_opset13), which
         * PyTorch runs as narrow()s of the input (split_with_sizes,
         * aten/src/ATen/native/TensorShape.cpp); measured on 2.14.1: no
         * allocation, the parts' strides the input's. Expand is a view with
         * stride 0 on the expanded dims (expand, the same file; F.normalize's
         * expand_as) */
        if (n->op == DM_OP_Split && base >= 0 && (dm_attr_int(n, "view", 0) || dm_sb_torch_onnx(b)))
            alias = true;
        if (n->op == DM_OP_Expand && k == 0 && base >= 0 && dm_sb_torch_onnx(b))
            alias = true;
        /* torch.reshape copies a tensor whose strides allow no view of the
         * new shape (layout.c, dm_sb_view_strides); graphs without torch's
         * strides (other frameworks, the HF front end): any non-contiguous
         * one but a fold of a size-1 dim that torch.matmul's reshape keeps a
         * view (fold_is_view) */
        if (alias && (n->op == DM_OP_Reshape || n->op == DM_OP_Flatten) &&
            (dm_sb_torch_onnx(b) ? !dm_sb_view_strides(b, in0, o)
                            : b->strided[in0] && !fold_is_view(n, &t[in0])))
            alias = false;
        bool inplace = k == 0 && base >= 0 && runs_inplace(b, n, base, train) &&
                       b->resident[in0] < 0 && t[o].bytes == t[in0].bytes;
        /* F.linear on a 3-D input is matmul(x, W.t()) then output.add_(bias) in
         * place (aten/src/ATen/native/Linear.cpp): an Add of a weight onto a
         * fresh MatMul result nobody else holds writes into it */
        /* not on XLA's CPU backend: its dot and the bias add are separate
         * kernels, the dot's output a temporary of its own (measured: the
         * jax-cpu transformer's logits dot, f32[256,8192], in the temp; the
         * GPU's cuBLAS writes the bias-added output itself) */
        int32_t mm = b->run->xla && !b->run->cuda ? -1 : linear_bias_target(b, n);
        if (k == 0 && mm >= 0 && b->cur[mm] >= 0 && b->refs[b->cur[mm]] == 1 &&
            t[o].bytes == t[mm].bytes) {
            in0 = mm;
            base = b->cur[mm];
            inplace = true;
        }
        /* Tensor.add_, where the front end marks an Add so ("inplace" 1: the
         * gpt_oss experts' out.add_(bias), transformers 5's _grouped_linear in
         * integrations/moe.py) and nothing else holds the sum's first operand */
        if (k == 0 && !inplace && n->op == DM_OP_Add && dm_attr_int(n, "inplace", 0) == 1 &&
            base >= 0 && b->refs[base] == 1 && b->resident[in0] < 0 && t[o].bytes == t[in0].bytes)
            inplace = true;
        /* TF's graph executor forwards an input only this op still holds
         * and that no backward reads (the gradient graph's reference) */
        enum dm_train_rule rule = dm_ops[n->op].train;
        bool own_keep = save && rule != DM_T_OUT && rule != DM_T_PASS && rule != DM_T_NONE &&
                        !dm_tf_relu6(b, n); /* Relu6 keeps its output (tf.c) */
        /* Keras 3's BatchNormalization is elementwise ops too (x * inv +
         * (beta - mean * inv), tf.nn.batch_normalization): with the moving
         * statistics its Mul forwards x's buffer (measured: Conv2D ->
         * BatchNormalization -> GlobalAveragePooling2D -> Dense,
         * predict_on_batch at batch 8, 1077504 B: the input and one
         * [8,32,32,16] buffer; tf-cpu.jsonl micro-convbn-predict-b8). Not
         * Keras 2's FusedBatchNormV3 (not measured) */
        int fw = tf_forwards(n->op) ? tf_forwards(n->op)
                 : n->op == DM_OP_BatchNormalization && b->run->tf_build &&
                           dm_attr_int(n, "tf_fused_nhwc", 0) == 0 ? 1 : 0;
        for (int j = 0; k == 0 && !alias && !inplace && b->run->tf_graph && !own_keep &&
                        j < fw && j < n->n_in;
             j++) {
            int32_t x = n->in[j], xb = x >= 0 ? b->cur[x] : -1;
            if (xb >= 0 && b->in_buf[j] < 0 && b->refs[xb] == 1 && b->resident[x] < 0 &&
                t[x].dtype == t[o].dtype && t[x].bytes == t[o].bytes) {
                in0 = x;
                base = xb;
                inplace = true;
            }
        }
        if (alias || inplace) {
            b->cur[o] = base;
            dm_sb_ref(b, base, holders);
            b->strided[o] = (n->op == DM_OP_Transpose ? transpose_strided(b, n, in0)
                                                      : b->strided[in0]) ||
                            ((n->op == DM_OP_Narrow || n->op == DM_OP_Split) &&
                             narrow_strides(n, &t[in0])) ||
                            slice_strided;
            if (view_of_strides(b, n, in0, o, alias && !inplace, step))
                b->strided[o] = !dm_sb_contiguous(b, o);
            if (n->op == DM_OP_Transpose && is_fused_attention_output(b, n))
                b->strided[o] = false;
            /* a view's memory format is what its strides suggest (layout.c) */
            if (alias && !inplace && dm_sb_torch_onnx(b) && t[o].rank == 4)
                b->chlast[o] = dm_sb_strides_like_cl(b, o);
            continue;
        }
        /* constant-valued results: one computed from weights alone is an
         * exporter's repacking PyTorch never makes, but an embedding lookup
         * of a weight by indices made at run time from the bound dims
         * allocates (GPT-2's wpe(arange(S))) */
        bool run_time_lookup = n->op == DM_OP_Gather && (b->flag[o] & DM_TF_DEP);
        bool materialize = !t[o].is_const || weight_computed(b, n, o) ||
                           (((b->flag[o] & DM_TF_DEVICE_USE) || g->tensors[o].is_output) &&
                            t[o].numel > 1 &&
                            (!(b->flag[o] & DM_TF_FROM_WEIGHT) || run_time_lookup));
        if (materialize)
            b->cur[o] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, t[o].dtype, t[o].bytes, o, i, NULL,
                                    holders);
        /* the fused kernels return a [B,H,S,D] view of what they wrote */
        b->strided[o] = fused_attention_strided(b, n);
        /* in torch.onnx graphs (an Attention lifted from the exporter's
         * decomposition, src/graph/lift.c) the strides decide what the
         * reshapes after it copy: the [B,H,S,D] view of a [B,S,H,D] buffer,
         * so that transpose(1, 2) makes it contiguous again and the
         * reshape to [B, S, H * D] is a view */
        if (b->strided[o] && n->op == DM_OP_Attention && dm_sb_torch_onnx(b) && t[o].rank == 4) {
            int64_t *st = dm_sb_stride(b, o);
            const int64_t *d = t[o].dims;
            st[3] = 1;
            st[1] = d[3];
            st[2] = dm_sat_mul(d[1], d[3]);
            st[0] = dm_sat_mul(d[2], st[2]);
        }
    }
    dm_tf_chain_end(b, &chain);
    int32_t mx_ws = on_device ? mx_pool_workspace(b, n, i, save) : -1;
    if (on_device)
        dm_sb_unref(b, maxpool_indices(b, n, i, save));
    dm_sb_workspace_end(b, &ws);
    if (!again)
        dm_train_returned(b, i);
    if (save)
        dm_train_save(b, i);
    /* after the saved extras: TF allocates every output (reserve spaces
     * included) before a kernel's temporaries */
    if (on_device && b->run->tf_ops)
        dm_train_tf_forward(b, i, save, chain.row != NULL);
    /* the op is done: it lets go of its inputs and outputs, and modules that
     * end here of their arguments */
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k] >= 0 && !dm_meta_slot(n, k))
            dm_sb_unref(b, b->cur[n->in[k]]);
        dm_sb_unref(b, b->in_buf[k]);
        b->in_buf[k] = -1;
    }
    for (int32_t h = b->held_start[i]; !again && h < b->held_start[i + 1]; h++)
        dm_sb_unref(b, b->cur[b->held_list[h]]);
    dm_sb_unref(b, mx_ws); /* after the inputs, as nnvm releases an unread output */
    for (int k = 0; k < n->n_out; k++) {
        int32_t o = n->out[k];
        if (o >= 0 && b->resident[o] < 0 && !t[o].absent)
            dm_sb_unref(b, b->cur[o]);
    }
}

void dm_sb_forward(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    for (int32_t i = 0; i < g->n_tensors; i++) {
        b->cur[i] = b->resident[i];
        b->strided[i] = false;
        dm_sb_dense_strides(b, i);
        b->amp_cache[i] = -1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        bool save = b->run->train;
        if (b->train)
            save = dm_train_checkpoint_enter(b, i); /* false inside a checkpointed segment */
        if (b->par)
            dm_par_forward_enter(b, i);
        dm_sb_forward_node(b, i, b->uses, save, false);
        if (b->par)
            dm_par_forward_leave(b, i);
    }
    /* leaving autocast clears its cache of parameter casts */
    for (int32_t i = 0; i < g->n_tensors; i++)
        if (b->amp_cache[i] >= 0) {
            dm_sb_unref(b, b->amp_cache[i]);
            b->amp_cache[i] = -1;
        }
}
