/*
 * backward.c: one node's backward (the input grads each rule makes, the
 * kernels' temporaries) and the delivery of grads to tensors and
 * parameters. The rules' facts are save.c's header.
 *
 * Gradient flow (torch/csrc/autograd): a grad reaching a tensor used twice is
 * added in place into the first (InputBuffer::accumulate, grad mode off);
 * AccumulateGrad steals an incoming grad nobody else holds as the parameter's
 * .grad, and adds later ones in place; saved tensors are released when their
 * node's backward has run.
 */
#include "train/train.h"

#include <string.h>

/* ---- backward ------------------------------------------------------------------ */

/* AccumulateGrad of parameter x given its summed grad g (our holder, plus
 * `extra` references the view op that delivered it still holds; PyTorch's
 * view is a tensor of its own): added into .grad in place when .grad exists
 * (kept by zero_grad in 1.13, by accumulation, or with no zero_grad), else
 * stolen as .grad when nothing else holds it and it has the parameter's
 * layout, else cloned (accumulate_grad.h). */
void dm_accumulate_grad(struct dm_sb *b, int32_t x, int32_t g, int extra)
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
    if (b->par)
        dm_par_grad_ready(b, x);
    if (dm_tf_fit_updates(b))
        dm_tf_fit_update(b, x); /* Keras' SGD under tf.function updates it now (tf_fit.c) */
}

/* Hand grad buffer `gbuf` (one holder: ours) to tensor x; `view`: it came
 * through a view op's backward (TBackward's .t() of a Linear weight's grad,
 * a reshape), which shares its storage with the grad it was made from. */
void dm_deliver(struct dm_sb *b, int32_t x, int32_t gbuf, bool view)
{
    dm_deliver_slice(b, x, gbuf, view, false);
}

/* dm_deliver, with `strided`: gbuf is a slice of a larger grad that is not
 * dense (CatBackward0 hands each input grad.narrow(dim, ...), a view:
 * FunctionsManual.cpp, cat_tensors_backward), which a later grad of x cannot
 * be added into in place: input_buffer.cpp's can_accumulate_inplace wants
 * is_non_overlapping_and_dense and the storage's only reference, so
 * InputBuffer::accumulate makes old + new out of place and the view, with
 * the whole cat grad it keeps, goes (measured: rand43 b2 SGD training, a
 * dense block's [2, 8, 16, 16] slice of its [2, 40, 16, 16] cat grad,
 * torch 2.14.1: an aten::add of 16 KiB, the 80 KiB base freed at it) */
void dm_deliver_slice(struct dm_sb *b, int32_t x, int32_t gbuf, bool view, bool strided)
{
    struct dm_train *tr = b->train;
    if (b->run->mx_ops && !tr->param[x]) {
        dm_mx_deliver(b, x, gbuf);
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
            dm_accumulate_grad(b, x, gbuf, view ? 1 : 0);
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
            dm_accumulate_grad(b, x, p, 0);
        }
        return;
    }
    int32_t old = tr->grad[x];
    if (old < 0) {
        tr->grad[x] = gbuf;
        tr->grad_strided[x] = strided;
    } else if (tr->grad_strided[x]) { /* see dm_deliver_slice */
        /* accumulate's second choice: var.add_(old_var) when the new grad
         * can take it (dense, whole, one holder), else old + new */
        if (!strided && b->refs[gbuf] == 1 && b->s->buf[gbuf].bytes == b->t[x].bytes) {
            tr->grad[x] = gbuf;
        } else {
            tr->grad[x] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, b->t[x].bytes, x,
                                      -1, "grad", 1);
            dm_sb_unref(b, gbuf);
        }
        tr->grad_strided[x] = false;
        dm_sb_unref(b, old);
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

/* Input x's grad from Concat node n in PyTorch is grad.narrow(axis, ...) of
 * the cat's grad (cat_tensors_backward): not dense when a dim before the
 * axis is over 1 (dm_deliver_slice). */
static bool cat_slice_strided(const struct dm_sb *b, const struct dm_node *n, int32_t x)
{
    const struct dm_run *run = b->run;
    if (n->op != DM_OP_Concat || n->n_in < 2 || run->tf_ops || run->xla || run->mx_ops)
        return false;
    const struct dm_tinfo *tx = &b->t[x];
    int64_t axis = dm_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += tx->rank;
    for (int64_t d = 0; d < axis && d < tx->rank; d++)
        if (tx->dims[d] > 1)
            return true;
    return false;
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

/* The temporaries a backward kernel of node i makes after its result (an
 * input's grad, or under autocast that grad in the compute type) and frees
 * before it returns:
 *  - `dense`: the contiguous clone of an expanded output grad that each mm
 *    of a matmul's backward makes (dm_backward_node);
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
/* Whether input k is the last of node i whose grad is made. */
static bool last_grad(const struct dm_sb *b, int32_t i, int k)
{
    const struct dm_node *n = &b->g->nodes[i];
    for (int j = k + 1; j < n->n_in; j++)
        if (n->in[j] >= 0 && !dm_meta_slot(n, j) && b->train->rg[n->in[j]])
            return false;
    return true;
}

/* native_group_norm_backward on the CPU, after dX, dgamma and dbeta: ds and
 * db, [N, C] float each (at::empty in GroupNormBackwardKernelImplInternal,
 * aten/src/ATen/native/cpu/group_norm_kernel.cpp), freed when it returns
 * (measured on 2.14: [2, 8, 8, 8], 2 groups: dX 4096 B, dgamma and dbeta
 * 32 B, then 64 B and 64 B). */
static void groupnorm_sums(struct dm_sb *b, int32_t i, int32_t out0)
{
    const struct dm_tinfo *y = &b->t[out0];
    if (y->rank < 2)
        return;
    uint64_t bytes;
    if (!dm_dtype_bytes(DM_FLOAT, y->dims[0] * y->dims[1], &bytes))
        return;
    int32_t ds = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, bytes, out0, i, "ds", 1);
    dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, bytes, out0, i, "db", 0);
    dm_sb_unref(b, ds);
}

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
    if (out0 >= 0 && b->g->nodes[i].op == DM_OP_GroupNormalization && !run->cuda &&
        !run->tf_ops && !run->xla && !run->mx_ops && last_grad(b, i, k))
        groupnorm_sums(b, i, out0);
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
    dm_deliver(b, x, gb, true);
    dm_sb_unref(b, gb);
}

/* A grad leaf's AccumulateGrad: the summed grad becomes its .grad
 * (stolen when nothing else holds it, else cloned), which lives with the
 * leaf; the op that made the leaf recorded nothing. A stolen grad keeps
 * its category and name: it is often the residual stream's grad, made
 * long before (AddBackward passes it on as it is) */
static void leaf_grads(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &g->nodes[i];
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
}

/* XLA's max pool backward (save.c's header, "JAX's jit"): select-and-scatter
 * expanded into a reduce-window that recomputes the pooled values with one
 * int32 coordinate of the selected element per input dimension (idx, freed
 * by the caller), then a scatter of the grads into the zeros made in the
 * forward, in place: those zeros become the input's grad. */
static void xla_pool_backward(struct dm_sb *b, int32_t i, int32_t out0, int32_t idx[5])
{
    struct dm_train *tr = b->train;
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &b->g->nodes[i];
    uint64_t ib;
    int32_t pooled = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, t[out0].dtype, t[out0].bytes, out0,
                                 i, "pooled (recomputed)", 1);
    int rank = t[n->in[0]].rank < 5 ? t[n->in[0]].rank : 4;
    for (int k = 0; k < rank; k++)
        if (dm_dtype_bytes(DM_INT32, t[out0].numel, &ib))
            idx[k] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_INT32, ib, out0, i,
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

/* A new grad for input k (tensor x) of node i, made by its backward kernel
 * with its temporaries; under autocast (`cast`) first in the compute type,
 * then ToCopyBackward's cast back to the input's type. */
static int32_t new_grad(struct dm_sb *b, int32_t i, int k, enum dm_dtype cast, int32_t out0,
                        int32_t gout, bool dense)
{
    struct dm_train *tr = b->train;
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &b->g->nodes[i];
    int32_t x = n->in[k];
    uint64_t cbytes;
    int32_t gcast = -1;
    if (cast != DM_UNDEFINED && dm_dtype_bytes(cast, t[x].numel, &cbytes))
        gcast = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, cast, cbytes, x, i, "grad", 1);
    /* the kernel's result: the grad, or under autocast its copy in the
     * compute type (ToCopyBackward casts it after the kernel) */
    if (gcast >= 0)
        kernel_temporaries(b, i, out0, gout, k, dense && k < 2);
    /* PowBackward0 of a scalar exponent (pow_backward, FunctionsManual.cpp):
     * grad * (exp * self.pow(exp - 1)), whose two temporaries
     * (self.pow(exp - 1), then exp times it) live to the end of the
     * statement: made before the grad, freed after it, the product first
     * (traced: ALBERT's gelu_new on the H200, PyTorch 2.11) */
    int32_t pw[2] = {-1, -1};
    if (n->op == DM_OP_Pow && k == 0 && !b->run->mx_ops && !b->run->tf_ops &&
        !b->run->xla && dm_has_in(n, 1) && !tr->rg[n->in[1]])
        for (int j = 0; j < 2; j++)
            pw[j] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                                j ? "exp * self.pow(exp - 1)" : "self.pow(exp - 1)", 1);
    int32_t gin = dm_sb_alloc(b, tr->param[x] ? DNNMEM_CAT_GRADIENT : DNNMEM_CAT_TEMPORARY,
                              t[x].dtype, t[x].bytes, x, i, "grad", 1);
    dm_sb_unref(b, pw[1]);
    dm_sb_unref(b, pw[0]);
    if (gcast < 0)
        kernel_temporaries(b, i, out0, gout, k, dense && k < 2);
    dm_sb_unref(b, gcast);
    return gin;
}

/* SelectiveScan's backward (ops.def; save.c's keep_scan): the loop's nodes
 * run from the last step back. Each step's SelectBackward0 of dA[:, :, i]
 * and of dBu[:, :, i] makes a zeros tensor of the whole input with the step's
 * slice filled (select_backward), the first of each becoming the input's grad
 * (the node's grads here) and each later one added into it in place and freed
 * (InputBuffer::accumulate); C's likewise, [B, L, N]. So beside the grads one
 * whole [B, D, L, N] lives at each step, with the step's two [B, D, N] grads
 * (the product's, grad * state, and the state's, grad * dA[:, :, i]).
 * Measured, transformers 5.24.0 on torch 2.13 CPU, tiny-mamba b2 s128: three
 * 2 MiB select_backward buffers at the peak
 * (tests/validation/hf-real-mamba-cpu.jsonl). */
static void scan_backward(struct dm_sb *b, int32_t i)
{
    const struct dm_node *n = &b->g->nodes[i];
    if (!dm_has_in(n, 0) || !dm_has_out(n, 1) || !b->train->rg[n->in[0]])
        return;
    const struct dm_tinfo *a = &b->t[n->in[0]], *st = &b->t[n->out[1]];
    int32_t g[2];
    for (int k = 0; k < 2; k++)
        g[k] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, st->dtype, st->bytes, n->in[0], i,
                           k ? "grad * dA[:, :, i] (the state's grad)" : "grad * state", 1);
    dm_sb_unref(b, dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->dtype, a->bytes, n->in[0], i,
                               "select_backward (a step's grad, added in place)", 1));
    dm_sb_unref(b, g[1]);
    dm_sb_unref(b, g[0]);
}

/* Eager TF's gradient of a Mean (Keras' GlobalAveragePooling, reduce_mean):
 * _MeanGrad is truediv(_SumGrad(op, grad), factor), and _SumGrad's eager
 * path over some axes is broadcast_to(reshape(grad), shape(x))
 * (tensorflow/python/ops/math_grad.py, TF 2.21): the broadcast, x's size,
 * lives while the division makes the grad, a second buffer of that size.
 * Measured (TF 2.21, Keras 3.15): Conv2D -> GlobalAveragePooling2D under the
 * tape on [8,32,32,16]: the peak holds BroadcastTo's and RealDiv's outputs
 * (tf_measure.py trace micro-conv-tape-b8). Under tf.function the division
 * is forwarded into the Tile's buffer: one (dm_tf_grad_target's rule). */
static bool tf_mean_broadcast(const struct dm_sb *b, const struct dm_node *n, int k,
                              enum dm_dtype cast)
{
    return b->run->tf_ops && !b->run->tf_graph && k == 0 && cast == DM_UNDEFINED &&
           (n->op == DM_OP_GlobalAveragePool || n->op == DM_OP_ReduceMean);
}

/* MulBackward0's grad of a broadcast operand (x * s, s [N, C, 1, 1] or a
 * [C] scale) is grad * x at the output's size; the engine then sums it to
 * s's shape (validate_outputs, at::sum_to) after the node has made all its
 * grads, and frees the full product (measured, 2.14.1: (elu(x * S) *
 * S2).sum().backward() on [2,8,8,8]: +4096 grad of the Elu's output,
 * +4096 the product for S2, +32 its sum, -4096). PyTorch only. */
static bool broadcast_product(const struct dm_sb *b, const struct dm_node *n, int32_t x,
                              int32_t out0, enum dm_dtype cast)
{
    const struct dm_run *r = b->run;
    return n->op == DM_OP_Mul && out0 >= 0 && cast == DM_UNDEFINED && !r->tf_ops && !r->mx_ops &&
           !r->xla && b->t[x].numel > 0 && b->t[x].numel < b->t[out0].numel;
}

/* MXNet: a backward node has an output for each input's gradient, whether
 * or not that input takes one (_backward_FullyConnected's three outputs,
 * _backward_Convolution's, _backward_BatchNorm's): the data's gradient
 * is an entry nobody reads when the data is a graph input (grad_req null),
 * which nnvm's PlanMemory still gives a storage (src/nnvm/plan_memory.cc:
 * outputs nobody reads are released after their node; mxplan.c rule 2).
 * Measured, MXNet 1.9.1 CPU: a data-sized allocation at the first training
 * forward of the MLP (64 x 784 x 4 B) and ResNet-18 (bn_data's input). The
 * node exists because a parameter it reads takes a gradient. */
static bool mx_unread_grad(const struct dm_sb *b, const struct dm_node *n, int32_t x)
{
    const struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    /* the data through the views that reach it (FullyConnected's Flatten) */
    for (int32_t hops = 0; hops < g->n_nodes && g->tensors[x].producer >= 0; hops++) {
        const struct dm_node *p = &g->nodes[g->tensors[x].producer];
        if (!(dm_ops[p->op].flags & DM_F_VIEW) || !dm_has_in(p, 0))
            break;
        x = p->in[0];
    }
    if (g->tensors[x].role != DM_ROLE_INPUT || !dm_dtype_is_float(b->t[x].dtype))
        return false;
    for (int k = 1; k < n->n_in; k++)
        if (n->in[k] >= 0 && tr->param[n->in[k]] && tr->rg[n->in[k]])
            return true;
    return false;
}

void dm_backward_node(struct dm_sb *b, int32_t i)
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
    if (!tr->node_rg[i]) { /* a grad leaf's AccumulateGrad */
        leaf_grads(b, i);
        return;
    }
    dm_sb_step(b, DM_PHASE_BACKWARD, i);
    struct dm_ws ws = dm_sb_workspace_begin(b, n, true);
    enum dm_train_rule rule = dm_ops[n->op].train;
    int32_t out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    /* Keras 2's fused LayerNormalization under TF (tf.c's header): _MulGrad's
     * grad * gamma, held until dx is made, and grad * normalized, reduced at
     * once to gamma's grad */
    int32_t tf_gx = -1;
    if (dm_tf_fused_ln(b, n)) {
        if (dm_has_in(n, 0) && tr->rg[n->in[0]])
            tf_gx = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[out0].dtype, t[out0].bytes, out0, i,
                                "grad * gamma", 1);
        if (dm_has_in(n, 1) && tr->rg[n->in[1]])
            dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[out0].dtype, t[out0].bytes, out0, i,
                        "grad * normalized", 0);
    }
    int32_t xla_idx[5] = {-1, -1, -1, -1, -1}; /* XLA's max pool (xla_pool_backward) */
    if (b->run->xla && b->run->cuda && n->op == DM_OP_MaxPool && out0 >= 0 && dm_has_in(n, 0))
        xla_pool_backward(b, i, out0, xla_idx);
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
     * weight's); _grouped_mm's "mat2" before "self" (measured, torch 2.13 CPU:
     * GroupedMmBackward0 allocates the [E, K, N] weight grad first) */
    bool mat2_first = ((n->op == DM_OP_MatMul && n->n_in == 2 && !tr->addmm_bias[i]) ||
                       n->op == DM_OP_GroupedMatMul) &&
                      !b->run->mx_ops && !b->run->tf_ops && !b->run->xla;
    /* a kernel's scratch made after all its grads (workspace.c: THNN's
     * columns, for the weight's grad, input 1): the grads wait for it */
    enum { HELD = 4 }; /* a Conv's x, W, B */
    uint64_t late = dm_has_in(n, 1) && tr->rg[n->in[1]] && n->n_in <= HELD
                        ? dm_sb_grad_scratch(b, n)
                        : 0;
    bool hold_all = n->op == DM_OP_Conv && !b->run->tf_ops && !b->run->mx_ops && !b->run->xla;
    int32_t held_x[HELD], held_g[HELD], bc[HELD];
    int n_bc = 0;
    bool held_view[HELD], held_strided[HELD];
    int n_held = 0;
    for (int kk = 0; kk < n->n_in; kk++) {
        int k = mat2_first && kk < 2 ? 1 - kk : kk;
        int32_t x = n->in[k];
        if (k == 0 && x >= 0 && !tr->rg[x] && b->run->mx_ops && mx_unread_grad(b, n, x))
            dm_sb_unref(b, dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                                       "grad (unread: grad_req null)", 1));
        if (x < 0 || dm_meta_slot(n, k) || !tr->rg[x])
            continue;
        if (k == addmm_k && addmm >= 0 && tr->node_rg[addmm]) {
            tr->addmm_bias[addmm] = x + 1; /* made by the MatMul's backward, last */
            continue;
        }
        if (dm_tf_fit_defer(b, i, k, gout))
            continue; /* Dense's BiasAddGrad under tf.function: at the backward's end */
        dm_sb_workspace_grad(b, n, k, &ws, false);
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
         * (dm_tf_grad_target) */
        int32_t target = !alias && cast == DM_UNDEFINED ? dm_tf_grad_target(b, i, k, gout) : -1;
        bool clip = b->run->tf_graph && n->op == DM_OP_Clip && !dm_tf_relu6(b, n);
        if (clip && cast == DM_UNDEFINED)
            dm_tf_clip_transients(b, i, x, target >= 0);
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
        } else if (cast == DM_UNDEFINED && dm_mx_addto(b, x)) {
            gin = -1; /* written into the sum's buffer (kAddTo): nothing allocated */
        } else if (tf_mean_broadcast(b, n, k, cast) && n_bc < HELD) {
            bc[n_bc++] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                                     "broadcast_to(grad) (_MeanGrad)", 1);
            gin = new_grad(b, i, k, cast, out0, gout, dense);
        } else if (broadcast_product(b, n, x, out0, cast) && n_bc < HELD) {
            bc[n_bc++] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[out0].dtype, t[out0].bytes, x, i,
                                     "grad (before sum_to)", 1);
            gin = new_grad(b, i, k, cast, out0, gout, dense);
        } else if (k == 0 && tr->copy_slices[i] && cast == DM_UNDEFINED) {
            /* CopySlices (save.c, on_view): the base's grad (gin, handed
             * on), the clone of its slice, the op's grad of the clone */
            int32_t cl = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                                     "CopySlices: grad_slice.clone()", 1);
            gin = new_grad(b, i, k, cast, out0, gout, dense);
            dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, t[x].bytes, x, i,
                        "CopySlices: the op's grad", 0);
            dm_sb_unref(b, cl);
        } else {
            int32_t silu[2] = {-1, -1}, bn[4] = {-1, -1, -1, -1};
            if (k == 0) {
                dm_tf_graph_transients(b, i, x, false);
                dm_tf_eager_silu_grad(b, i, x, 0, silu);
                dm_tf_eager_bn_grad(b, i, x, gout, 0, bn);
            }
            gin = new_grad(b, i, k, cast, out0, gout, dense);
            if (k == 0) {
                dm_tf_graph_transients(b, i, x, true);
                dm_tf_eager_silu_grad(b, i, x, 1, silu);
                dm_tf_eager_bn_grad(b, i, x, gout, 1, bn);
            }
        }
        /* PyTorch's engine adds a node's grads into the next nodes' input
         * buffers after its function has returned them all
         * (torch/csrc/autograd/engine.cpp, evaluate_function: call_function,
         * then input_buffer.add per output): a conv's grad_input lives
         * through its weight's grad (measured, 2.14.1: a grad_input summed
         * into a cat's buffer is freed after diff_weights). Applied to Conv,
         * where it was measured; other ops still deliver each grad at once */
        bool strided = alias && gin == gout && cat_slice_strided(b, n, x);
        if (late || (hold_all && n->n_in <= HELD)) {
            held_x[n_held] = x;
            held_g[n_held] = gin;
            held_strided[n_held] = strided;
            held_view[n_held++] = alias && rule == DM_T_VIEW;
        } else {
            dm_deliver_slice(b, x, gin, alias && rule == DM_T_VIEW, strided);
        }
        dm_sb_workspace_grad(b, n, k, &ws, true);
    }
    for (int h = 0; h < n_bc; h++)
        dm_sb_unref(b, bc[h]);
    if (n->op == DM_OP_SelectiveScan)
        scan_backward(b, i);
    if (late)
        dm_sb_unref(b, dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, t[n->in[0]].dtype, late, -1, i,
                                   "thnn_columns (grad_weight)", 1));
    for (int h = 0; h < n_held; h++)
        dm_deliver_slice(b, held_x[h], held_g[h], held_view[h], held_strided[h]);
    if (tr->addmm_bias[i] > 0) {
        int32_t x = tr->addmm_bias[i] - 1;
        tr->addmm_bias[i] = 0;
        if (gout >= 0 && out0 >= 0)
            addmm_bias_grad(b, i, out0, gout, x);
    }
    for (int k = 0; k < 5; k++)
        if (xla_idx[k] >= 0)
            dm_sb_unref(b, xla_idx[k]);
    if (dm_tf_bn_transposes(b, n)) {
        /* the grad kernel's NHWC -> NCHW transposes (tf.c's header) */
        static const char *const what[] = {"y_backprop_transformed (NCHW)",
                                           "x_transformed (NCHW)",
                                           "x_backprop_transformed (NCHW)"};
        dm_tf_transients(b, i, DNNMEM_CAT_WORKSPACE, t[n->in[0]].dtype, t[n->in[0]].bytes, 3, what);
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
