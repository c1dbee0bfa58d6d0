/*
 * layout.c: which 4-D tensors have channels-last strides in PyTorch eager.
 * The exporter writes a permute as a Transpose and drops the strides; the
 * kernels that choose their algorithm by memory format (oneDNN's
 * convolutions, workspace.c) need them back. A tensor is channels-last when
 *
 *   - it is permute(0, 3, 1, 2) of a contiguous [N, H, W, C] tensor (a view,
 *     no copy: ConvNeXt's and randnet's LayerNorm2d, permute -> LayerNorm ->
 *     permute);
 *   - an op that keeps its input's memory format made it from a channels-last
 *     input: TensorIterator's elementwise kernels lay the output out as the
 *     first operand with non-broadcast strides (TensorIteratorBase::
 *     reorder_dimensions, aten/src/ATen/TensorIterator.cpp: a stride of 0 is
 *     ambiguous and skipped), BatchNorm and pooling have channels-last CPU
 *     kernels that allocate with input.suggest_memory_format()
 *     (aten/src/ATen/native/batch_norm.cpp, Pool.h), and 2.x's oneDNN
 *     convolution returns channels-last when its input is
 *     (mkldnn_conv_use_channels_last, aten/src/ATen/native/mkldnn/Conv.cpp);
 *     torch.cat is channels-last when all its inputs are
 *     (cat_compute_output_memory_format, aten/src/ATen/native/TensorShape.cpp;
 *     checked on 2.14.1: mixed inputs give a contiguous result).
 *
 * Every other op makes a contiguous output (a reshape of a channels-last
 * tensor copies it), but for GroupNorm: PyTorch runs one native_group_norm,
 * whose CPU kernel has a channels-last path and allocates its output in the
 * input's suggested memory format (aten/src/ATen/native/group_norm.cpp,
 * GroupNormKernel.cpp). lift.c makes it one GroupNormalization; where it is
 * left as torch.onnx writes it (Reshape [N, G, -1] -> InstanceNormalization
 * -> Reshape back, without affine), the Reshape back takes the format of the
 * tensor the first Reshape read. The format does not change between iterations, so it is
 * computed once, in node order. Stands on the builder only.
 */
#include "schedule/builder.h"

#include <string.h>

/* Ops whose output takes the memory format of their first full-shape input. */
static bool keeps_format(enum dm_op op)
{
    static const enum dm_op keep[] = {
        /* unary elementwise (TensorIterator) */
        DM_OP_Abs, DM_OP_Ceil, DM_OP_Celu, DM_OP_Clip, DM_OP_Cast, DM_OP_Elu, DM_OP_Erf,
        DM_OP_Exp, DM_OP_Floor, DM_OP_Gelu, DM_OP_HardSigmoid, DM_OP_HardSwish, DM_OP_LeakyRelu,
        DM_OP_Log, DM_OP_Neg, DM_OP_Reciprocal, DM_OP_Relu, DM_OP_Round, DM_OP_Selu,
        DM_OP_Sigmoid, DM_OP_Sign, DM_OP_Silu, DM_OP_Softplus, DM_OP_Softsign, DM_OP_Sqrt,
        DM_OP_Tanh, DM_OP_ThresholdedRelu, DM_OP_Identity, DM_OP_Dropout,
        /* binary elementwise (TensorIterator) */
        DM_OP_Add, DM_OP_Sub, DM_OP_Mul, DM_OP_Div, DM_OP_PRelu, DM_OP_Where,
        /* channels-last CPU kernels; cat when all its inputs are */
        DM_OP_BatchNormalization, DM_OP_GroupNormalization, DM_OP_MaxPool, DM_OP_AveragePool,
        DM_OP_Conv, DM_OP_Concat,
        /* F.pad, every mode: constant_pad_nd (aten/src/ATen/native/PadNd.cpp)
         * allocates its output in the input's suggest_memory_format(), and
         * all-zero pads return self.clone(), which preserves it (checked on
         * 2.14.1: constant, reflect and replicate of a channels-last
         * [2,8,6,6] are channels-last) */
        DM_OP_Pad,
    };
    for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++)
        if (keep[k] == op)
            return true;
    return false;
}

static bool same_dims(const struct dm_tinfo *a, const struct dm_tinfo *b)
{
    if (a->rank != b->rank)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

/* Transpose by (0, 3, 1, 2): NHWC data seen as NCHW. */
static bool to_nchw_view(const struct dm_node *n)
{
    int64_t cnt;
    const int64_t *p = dm_attr_ints(n, "perm", &cnt);
    return p && cnt == 4 && p[0] == 0 && p[1] == 3 && p[2] == 1 && p[3] == 2;
}

/* The exporter's GroupNorm: n is the Reshape back of Reshape(x) ->
 * InstanceNormalization -> n, x of n's output's dims; x, or -1. */
static int32_t group_norm_source(const struct dm_graph *g, const struct dm_tinfo *t,
                                 const struct dm_node *n)
{
    int32_t in = n->in[0], p = g->tensors[in].producer;
    if (n->op != DM_OP_Reshape || p < 0 || g->nodes[p].op != DM_OP_InstanceNormalization ||
        !dm_has_in(&g->nodes[p], 0))
        return -1;
    int32_t q = g->tensors[g->nodes[p].in[0]].producer;
    if (q < 0 || g->nodes[q].op != DM_OP_Reshape || !dm_has_in(&g->nodes[q], 0))
        return -1;
    int32_t x = g->nodes[q].in[0];
    return same_dims(&t[x], &t[n->out[0]]) ? x : -1;
}

static bool output_channels_last(const struct dm_graph *g, const struct dm_tinfo *t,
                                 const bool *cl, const struct dm_node *n)
{
    int32_t o = n->out[0];
    if (t[o].rank != 4 || !dm_has_in(n, 0))
        return false;
    if (n->op == DM_OP_Transpose)
        return to_nchw_view(n) && !cl[n->in[0]];
    int32_t gn = group_norm_source(g, t, n);
    if (gn >= 0)
        return cl[gn];
    if (!keeps_format(n->op))
        return false;
    /* a strided conv's or a pooling's output has other spatial dims than its
     * input, but their kernels allocate it in the input's memory format
     * (measured on 2.14.1: max_pool2d of a LayerNorm2d's channels-last output
     * feeds a conv that clones its weight to channels-last) */
    if (n->op == DM_OP_Conv || n->op == DM_OP_MaxPool || n->op == DM_OP_AveragePool ||
        n->op == DM_OP_Pad)
        return cl[n->in[0]];
    if (n->op == DM_OP_Concat) { /* cat_compute_output_memory_format: the inputs' common one */
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && !cl[n->in[k]])
                return false;
        return true;
    }
    for (int k = 0; k < n->n_in; k++) /* the first operand of the output's shape decides */
        if (n->in[k] >= 0 && !dm_meta_slot(n, k) && same_dims(&t[n->in[k]], &t[o]))
            return cl[n->in[k]];
    return false;
}

void dm_sb_layout_node(const struct dm_graph *g, const struct dm_tinfo *t, bool *cl, int32_t i)
{
    const struct dm_node *n = &g->nodes[i];
    if (n->n_out > 0 && n->out[0] >= 0)
        cl[n->out[0]] = output_channels_last(g, t, cl, n);
}

void dm_sb_layout(const struct dm_graph *g, const struct dm_tinfo *t, bool *cl)
{
    for (int32_t i = 0; i < g->n_nodes; i++)
        dm_sb_layout_node(g, t, cl, i);
}

/* ---- strides ------------------------------------------------------------------ */
/* Element strides per tensor (b->stride, DM_MAX_DIMS each), for deciding
 * which reshapes PyTorch runs as views. A tensor an op allocates is dense:
 * contiguous, or channels-last (N, H, W, C order) where dm_sb_layout says
 * so; a view's come from its base's (forward.c). */

/* a * b, INT64_MAX when it overflows (strides scaled by a slice's untrusted
 * steps: such a tensor is then no view of anything) */
int64_t dm_sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    return dm_mul_ok(a, b, &r) ? r : INT64_MAX;
}

int64_t *dm_sb_stride(const struct dm_sb *b, int32_t x)
{
    return &b->stride[(size_t)x * DM_MAX_DIMS];
}

void dm_sb_dense_strides(struct dm_sb *b, int32_t x)
{
    const struct dm_tinfo *t = &b->t[x];
    int64_t *st = dm_sb_stride(b, x), s = 1;
    if (t->rank == 4 && b->chlast[x]) {
        st[1] = 1;
        st[3] = t->dims[1];
        st[2] = t->dims[1] * t->dims[3];
        st[0] = st[2] * t->dims[2];
        return;
    }
    for (int d = t->rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= t->dims[d] > 0 ? t->dims[d] : 1;
    }
}

/* Contiguous in PyTorch's sense (is_contiguous): size-1 dims aside, each
 * dim's stride is the product of the sizes after it. */
bool dm_sb_contiguous(const struct dm_sb *b, int32_t x)
{
    const struct dm_tinfo *t = &b->t[x];
    const int64_t *st = dm_sb_stride(b, x);
    int64_t s = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        if (t->dims[d] == 1)
            continue;
        if (st[d] != s)
            return false;
        s *= t->dims[d];
    }
    return true;
}

/* Whether PyTorch's suggest_memory_format() of a 4-D x is ChannelsLast: its
 * strides, size-1 dims' included, ordered as channels-last
 * (is_channels_last_strides_2d_s4, c10/core/MemoryFormat.h, read in 2.13.0's
 * headers). A view keeps the format its strides give: x.transpose(1, 2).view(B,
 * C, H, W) of a [B, H*W, C] tensor (PVT-v2's DWConv) is channels-last at batch
 * 2, but at batch 1 view() gives dim 0 the stride C (computeStride), below
 * H*W*C, so it is contiguous-suggested and the conv copies it to NCHW
 * (measured on 2.13.0 and 2.14.1: strides (16, 1, 96, 16), an NCHW output
 * and an input-sized clone before the kernel's buffers). */
bool dm_sb_strides_like_cl(const struct dm_sb *b, int32_t x)
{
    const struct dm_tinfo *t = &b->t[x];
    const int64_t *st = dm_sb_stride(b, x);
    static const int order[4] = {1, 3, 2, 0};
    if (t->rank != 4 || st[1] == 0)
        return false;
    int64_t min = 0;
    for (int k = 0; k < 4; k++) {
        int d = order[k];
        if (t->dims[d] == 0 || st[d] < min || (d == 0 && min == st[1]))
            return false;
        min = t->dims[d] > 1 ? dm_sat_mul(st[d], t->dims[d]) : st[d];
    }
    return true;
}

/* Whether x's strides are dense in the memory format `cl` names
 * (is_contiguous(memory_format): size-1 dims aside): what a kernel that calls
 * x.contiguous(format) takes without a copy. */
bool dm_sb_dense_in(const struct dm_sb *b, int32_t x, bool cl)
{
    const struct dm_tinfo *t = &b->t[x];
    if (!cl || t->rank != 4)
        return dm_sb_contiguous(b, x);
    static const int order[4] = {1, 3, 2, 0};
    const int64_t *st = dm_sb_stride(b, x);
    int64_t s = 1;
    for (int k = 0; k < 4; k++) {
        int d = order[k];
        if (t->dims[d] == 1)
            continue;
        if (st[d] != s)
            return false;
        s = dm_sat_mul(s, t->dims[d]);
    }
    return true;
}

/* The strides of y as a view of x with y's dims, as torch.reshape / view
 * computes them (at::detail::computeStride, aten/src/ATen/TensorUtils.cpp):
 * each run of x's dims that is contiguous within itself may be split or
 * merged; false when y's dims cut across such runs (reshape then copies:
 * torch.reshape of a transposed matrix), and y's strides are left. A
 * channels-last [N, C, H, W] flattened to [N, C, H * W] is a view; a chunk
 * of a Linear's output along its last dim reshaped to [B, S, heads, d] is a
 * view (measured on 2.14.1: randnet's q, k and v take no memory of their
 * own, their qkv output stays alive). */
static bool compute_view(const struct dm_tinfo *tx, const int64_t *os, int ry, const int64_t *yd,
                         int64_t *ns)
{
    int view_d = ry - 1;
    int64_t base = os[tx->rank - 1], tn = 1, vn = 1;
    for (int d = tx->rank - 1; d >= 0; d--) {
        tn = dm_sat_mul(tn, tx->dims[d]);
        if (d == 0 || (tx->dims[d - 1] != 1 && os[d - 1] != dm_sat_mul(tn, base))) {
            while (view_d >= 0 && (vn < tn || yd[view_d] == 1)) {
                ns[view_d] = dm_sat_mul(vn, base);
                vn = dm_sat_mul(vn, yd[view_d]);
                view_d--;
            }
            if (vn != tn)
                return false;
            if (d > 0) {
                base = os[d - 1];
                tn = vn = 1;
            }
        }
    }
    return view_d == -1;
}

bool dm_sb_viewable(const struct dm_sb *b, int32_t x, int rank, const int64_t *dims)
{
    const struct dm_tinfo *tx = &b->t[x];
    int64_t ns[DM_MAX_DIMS], numel = 1;
    for (int d = 0; d < rank; d++)
        numel = dm_sat_mul(numel, dims[d]);
    if (tx->rank < 0 || rank < 0 || rank > DM_MAX_DIMS || tx->numel != numel)
        return false;
    return tx->rank == 0 || tx->numel == 0 || compute_view(tx, dm_sb_stride(b, x), rank, dims, ns);
}

bool dm_sb_view_strides(struct dm_sb *b, int32_t x, int32_t y)
{
    const struct dm_tinfo *tx = &b->t[x], *ty = &b->t[y];
    int64_t ns[DM_MAX_DIMS];
    if (tx->rank < 0 || ty->rank < 0 || tx->numel != ty->numel)
        return false;
    if (tx->rank == 0 || tx->numel == 0) {
        dm_sb_dense_strides(b, y);
        return true;
    }
    if (!compute_view(tx, dm_sb_stride(b, x), ty->rank, ty->dims, ns))
        return false;
    memcpy(dm_sb_stride(b, y), ns, (size_t)ty->rank * sizeof *ns);
    return true;
}

/* ---- the memory format of each tensor's grad --------------------------------- */
/* Which strides the grad autograd hands each 4-D tensor has (DM_GF_*), for the
 * kernels that make their grad_output .contiguous(their format): a CPU
 * convolution's backward (aten/src/ATen/native/mkldnn/Conv.cpp,
 * mkldnn_convolution_backward: `grad_output.contiguous(memory_format)`, the
 * format channels-last when the input or the weight is, at the 2.x tags and
 * at v1.13.1; workspace.c, grad_output_copy). Measured with hooks on torch
 * 2.13.0 and 1.13.0 (Debian's python3-torch), [2,16,8,8] in both formats with
 * a grad in both formats (docs/validation-zoo.md, "conv-grad-output-layout"):
 *
 *   - the input's own format, whatever the grad's: ReLU, LeakyReLU,
 *     BatchNorm, max and average pooling, a conv's grad_input, GroupNorm in
 *     2.x (1.13's is contiguous);
 *   - the grad's own format (TensorIterator on the grad first): the other
 *     elementwise ops (add and sub hand the same tensor on; mul, div,
 *     sigmoid, tanh, GELU, SiLU, Hardswish, Hardsigmoid, ReLU6 (Clip), ELU,
 *     softplus, dropout), F.pad and F.interpolate;
 *   - contiguous: global average pooling and mean (an expand of the reduced
 *     grad, divided), a reshape or flatten, InstanceNorm (run on
 *     input.contiguous()), a slice or a lone chunk (zeros, then copied into);
 *   - a Split: the cat of its outputs' grads, channels-last when all are;
 *   - a Concat's inputs: grad.narrow() views, dense in neither format
 *     unless the cut is along the batch, or along the channels at batch 1
 *     of a contiguous grad;
 *   - permute(0, 3, 1, 2) of an [N, H, W, C] tensor: the grad permuted back,
 *     contiguous when the NCHW grad is channels-last; permute(0, 2, 3, 1)
 *     of a contiguous grad is channels-last (LayerNorm2d's grad);
 *   - the loss's: cross-entropy and MSE hand a contiguous grad to a 4-D
 *     output in either format, .sum() an expanded one (dense in neither).
 *
 * Where several nodes read a tensor the first grad to arrive is its buffer
 * and the others are added into it (input_buffer.cpp, accumulate: in place
 * or `old + new`), so it keeps the first one's strides; the engine runs the
 * most recent node first (measured: relu(x) + gap(x) gives x the
 * contiguous grad, gap(x) + relu(x) the channels-last one). Nodes are taken
 * in reverse order. Other ops give a contiguous grad. */

/* The grad's strides made dense in the same dimension order. */
static uint8_t gf_dense(uint8_t f)
{
    return f == DM_GF_C_STRIDED ? DM_GF_C : f == DM_GF_CL_STRIDED ? DM_GF_CL : f;
}

/* The grad's strides as narrow() along `axis` leaves them. */
static uint8_t gf_narrow(const struct dm_tinfo *x, int64_t axis, uint8_t f)
{
    if (axis < 0)
        axis += x->rank;
    if (axis == 0 || f == DM_GF_NONE)
        return f;
    if (axis == 1 && x->dims[0] == 1 && f == DM_GF_C)
        return DM_GF_C;
    return gf_dense(f) == DM_GF_CL ? DM_GF_CL_STRIDED : DM_GF_C_STRIDED;
}

static bool gf_one_of(enum dm_op op, const enum dm_op *ops, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (ops[k] == op)
            return true;
    return false;
}

/* The grad of input k of n, given its output's (fo). */
static uint8_t input_grad_format(const struct dm_tinfo *t, const bool *cl,
                                 const uint8_t *gf, int torch_version,
                                 const struct dm_node *n, int k, uint8_t fo)
{
    static const enum dm_op own[] = {DM_OP_Relu, DM_OP_LeakyRelu, DM_OP_BatchNormalization,
                                     DM_OP_MaxPool, DM_OP_AveragePool, DM_OP_Conv};
    static const enum dm_op passed[] = {DM_OP_Add, DM_OP_Identity};
    static const enum dm_op dense[] = {
        DM_OP_Sub, DM_OP_Mul, DM_OP_Div, DM_OP_Sigmoid, DM_OP_Tanh, DM_OP_Gelu, DM_OP_Silu,
        DM_OP_HardSwish, DM_OP_HardSigmoid, DM_OP_Clip, DM_OP_Elu, DM_OP_Softplus,
        DM_OP_Dropout, DM_OP_Pad, DM_OP_Resize, DM_OP_Upsample};
    int32_t x = n->in[k];
    if (t[x].rank != 4)
        return DM_GF_C;
    if (gf_one_of(n->op, own, sizeof own / sizeof own[0]) ||
        (n->op == DM_OP_GroupNormalization && torch_version >= 200))
        return cl[x] ? DM_GF_CL : DM_GF_C;
    if (n->op == DM_OP_Sub && k == 0)
        return fo; /* the same tensor; the second input's is negated */
    if (gf_one_of(n->op, passed, sizeof passed / sizeof passed[0]))
        return fo;
    if (gf_one_of(n->op, dense, sizeof dense / sizeof dense[0]))
        return gf_dense(fo);
    if (n->op == DM_OP_Concat)
        return gf_narrow(&t[x], dm_attr_int(n, "axis", 0), fo);
    if (n->op == DM_OP_Split) { /* torch.cat of the outputs' grads */
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] < 0 || gf_dense(gf[n->out[j]]) != DM_GF_CL)
                return DM_GF_C;
        return DM_GF_CL;
    }
    if (n->op == DM_OP_Transpose && t[n->out[0]].rank == 4) {
        int64_t cnt;
        const int64_t *p = dm_attr_ints(n, "perm", &cnt);
        bool to_nhwc = p && cnt == 4 && p[0] == 0 && p[1] == 2 && p[2] == 3 && p[3] == 1;
        if (to_nchw_view(n))
            return fo == DM_GF_CL ? DM_GF_C : DM_GF_C_STRIDED;
        if (to_nhwc)
            return fo == DM_GF_C ? DM_GF_CL : DM_GF_C_STRIDED;
        return DM_GF_C_STRIDED;
    }
    return DM_GF_C;
}

void dm_sb_grad_layout(const struct dm_graph *g, const struct dm_tinfo *t, const bool *cl,
                       const struct dm_run *run, uint8_t *gf)
{
    uint8_t loss = run->loss == DNNMEM_LOSS_SUM ? DM_GF_C_STRIDED : DM_GF_C;
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] >= 0 && gf[g->outputs[k]] == DM_GF_NONE)
            gf[g->outputs[k]] = loss;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        const struct dm_node *n = &g->nodes[i];
        bool reached = false;
        for (int j = 0; j < n->n_out; j++)
            reached |= n->out[j] >= 0 && gf[n->out[j]] != DM_GF_NONE;
        if (!reached || n->out[0] < 0)
            continue; /* no grad reaches it */
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x >= 0 && !dm_meta_slot(n, k) && gf[x] == DM_GF_NONE)
                gf[x] = input_grad_format(t, cl, gf, run->torch_version, n, k, gf[n->out[0]]);
        }
    }
}
