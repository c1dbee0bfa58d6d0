/*
 * schedule.c: the allocations and frees PyTorch eager performs, in order.
 *
 * Forward pass (both modes):
 *  - weights (parameters and buffers) are resident before the first op; so
 *    are the graph inputs, which the caller holds;
 *  - each op allocates its outputs when it runs; a tensor is freed when its
 *    last holder lets go: its last reader, the caller (graph outputs), or the
 *    backward of an op that saved it (src/train/train.c);
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

#include <stdio.h>
#include <assert.h>
#include <stdlib.h>
#include <string.h>

const char *dm_phase_name(enum dm_phase p)
{
    switch (p) {
    case DM_PHASE_SETUP: return "setup";
    case DM_PHASE_FORWARD: return "forward";
    case DM_PHASE_LOSS: return "loss";
    case DM_PHASE_BACKWARD: return "backward";
    case DM_PHASE_OPTIMIZER: return "optimizer";
    case DM_PHASE_ZERO_GRAD: return "zero_grad";
    case DM_PHASE_DECODE: return "decode";
    }
    return "?";
}

void dm_schedule_free(struct dm_schedule *s)
{
    if (!s)
        return;
    free(s->buf);
    free(s->ev);
    free(s->steps);
    memset(s, 0, sizeof *s);
}

const char *dm_buffer_name(const struct dm_graph *g, const struct dm_buffer *b, char *buf,
                           size_t cap)
{
    if (!b->what)
        return b->tensor >= 0 ? g->tensors[b->tensor].name : "?";
    if (b->tensor >= 0)
        snprintf(buf, cap, "%s.%s", g->tensors[b->tensor].name, b->what);
    else if (b->node >= 0)
        snprintf(buf, cap, "%s.%s", g->nodes[b->node].name, b->what);
    else
        snprintf(buf, cap, "%s", b->what);
    return buf;
}

/* ---- the builder -------------------------------------------------------------- */

static bool grow(void **p, size_t elem, size_t n, size_t *cap)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 1024;
    void *q = realloc(*p, c * elem);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

void dm_sb_step(struct dm_sb *b, enum dm_phase phase, int32_t node)
{
    struct dm_schedule *s = b->s;
    size_t cap = (size_t)s->cap_steps;
    if (!grow((void **)&s->steps, sizeof *s->steps, (size_t)s->n_steps, &cap)) {
        b->oom = true;
        return;
    }
    s->cap_steps = (int32_t)cap;
    s->steps[s->n_steps++] = (struct dm_step){(uint8_t)phase, (int16_t)b->iteration, node};
}

static void event(struct dm_sb *b, enum dm_ev_kind kind, int32_t buf)
{
    struct dm_schedule *s = b->s;
    if (!grow((void **)&s->ev, sizeof *s->ev, s->n_ev, &s->cap_ev)) {
        b->oom = true;
        return;
    }
    s->ev[s->n_ev++] = (struct dm_event){(uint8_t)kind, buf, s->n_steps - 1};
}

int32_t dm_sb_alloc(struct dm_sb *b, enum dnnmem_category cat, enum dm_dtype dtype,
                    uint64_t bytes, int32_t tensor, int32_t node, const char *what,
                    int32_t holders)
{
    struct dm_schedule *s = b->s;
    size_t cap = (size_t)s->cap_buf;
    if (b->oom || s->n_buf == INT32_MAX ||
        !grow((void **)&s->buf, sizeof *s->buf, (size_t)s->n_buf, &cap)) {
        b->oom = true;
        return -1;
    }
    if ((int32_t)cap != s->cap_buf) {
        int32_t *r = realloc(b->refs, cap * sizeof *r);
        if (!r) {
            b->oom = true;
            return -1;
        }
        b->refs = r;
        s->cap_buf = (int32_t)cap;
    }
    int32_t id = s->n_buf++;
    s->buf[id] = (struct dm_buffer){bytes, tensor, node, (uint8_t)cat, (uint8_t)dtype, what};
    b->refs[id] = holders;
    event(b, DM_EV_ALLOC, id);
    if (holders <= 0)
        event(b, DM_EV_FREE, id);
    return id;
}

void dm_sb_ref(struct dm_sb *b, int32_t buf, int32_t n)
{
    if (buf >= 0)
        b->refs[buf] += n;
}

void dm_sb_unref(struct dm_sb *b, int32_t buf)
{
    if (buf < 0 || b->refs[buf] <= 0)
        return;
    if (--b->refs[buf] == 0)
        event(b, DM_EV_FREE, buf);
}

/* ---- facts computed once per schedule ------------------------------------------ */

/* Holders of a resident buffer: never reached by the references ops take and
 * release. */
#define PINNED (INT32_MAX / 2)

static bool is_meta_slot(const struct dm_node *n, int k)
{
    return k < 32 && ((dm_ops[n->op].meta_inputs >> k) & 1u);
}

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

static void analyse(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    for (int32_t i = 0; i < g->n_tensors; i++) {
        b->flag[i] = g->tensors[i].role == DM_ROLE_INPUT ? DM_TF_DEP
                   : g->tensors[i].role == DM_ROLE_WEIGHT ? DM_TF_FROM_WEIGHT
                   : 0;
        b->uses[i] = 0;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        bool node_const = n->n_out > 0 && n->out[0] >= 0 && t[n->out[0]].is_const;
        uint8_t inherit = 0; /* FROM_WEIGHT flows through data, DEP also through shapes */
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x < 0)
                continue;
            bool meta = is_meta_slot(n, k);
            inherit |= b->flag[x] & (meta ? DM_TF_DEP : (DM_TF_DEP | DM_TF_FROM_WEIGHT));
            if (meta)
                b->flag[x] |= DM_TF_META_USE;
            else {
                b->flag[x] |= node_const ? DM_TF_DATA_USE : (DM_TF_DATA_USE | DM_TF_DEVICE_USE);
                b->uses[x]++;
            }
        }
        /* an embedding lookup of a weight by indices made at run time from
         * the bound dims (GPT-2's wpe(arange(S)), T5's relative position
         * bias) is a tensor PyTorch computes, and so is whatever is computed
         * from it: no longer a repacking of the weight */
        if (n->op == DM_OP_Gather && (inherit & DM_TF_DEP))
            inherit &= (uint8_t)~DM_TF_FROM_WEIGHT;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0)
                b->flag[n->out[k]] |= inherit;
    }
    /* a dims-derived value the device computes (read on the device, not a
     * scalar, not a weight's repacking) is computed from device tensors:
     * torch.full((T, T)) before its triu, arange before the embedding
     * lookup that reads it; their dims-derived inputs are device tensors too */
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        const struct dm_node *n = &g->nodes[i];
        int32_t o = n->n_out > 0 ? n->out[0] : -1;
        if (o < 0 || !t[o].is_const || t[o].rank < 0 || t[o].absent || t[o].numel <= 1)
            continue;
        uint8_t f = b->flag[o];
        if (!(f & DM_TF_DEP) || (f & DM_TF_FROM_WEIGHT) ||
            !((f & DM_TF_DEVICE_USE) || g->tensors[o].is_output))
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x >= 0 && !is_meta_slot(n, k) && (b->flag[x] & DM_TF_DEP))
                b->flag[x] |= DM_TF_DEVICE_USE;
        }
    }
    for (int32_t i = 0; i < g->n_tensors; i++) {
        const struct dm_tensor *tt = &g->tensors[i];
        uint8_t f = b->flag[i];
        bool resident = false;
        if (tt->role == DM_ROLE_INPUT)
            resident = true;
        else if (tt->role == DM_ROLE_WEIGHT) /* one read only as metadata is no parameter */
            resident = (f & DM_TF_DATA_USE) || tt->is_output || !(f & DM_TF_META_USE);
        else if (t[i].rank >= 0 && !t[i].absent && t[i].is_const &&
                 !(f & (DM_TF_DEP | DM_TF_FROM_WEIGHT)))
            resident = ((f & DM_TF_DEVICE_USE) || tt->is_output) && t[i].numel > 1;
        if (resident)
            b->flag[i] |= DM_TF_RESIDENT;
    }
}

/* Module arguments. A module call keeps its arguments alive until it
 * returns: the callee's parameter and the caller's variable (x =
 * self.layer(x) rebinds only after the call) both refer to them, as does
 * `identity = x` in a ResNet block. torch.onnx names each node after the
 * modules it runs in ("/layer1/layer1.0/conv1/Conv"), and a module's nodes
 * are consecutive, so a tensor read inside a module it was made outside of
 * is held until that module's last node. A tensor with held_until is
 * held until that node (a module's local variable, until it returns). */
static bool module_holds(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    int32_t nn = g->n_nodes, nt = g->n_tensors;
    int32_t *until = malloc(((size_t)nt + 1) * sizeof *until);
    int32_t *fill = calloc((size_t)nn + 1, sizeof *fill);
    b->held_start = calloc((size_t)nn + 2, sizeof *b->held_start);
    /* the scopes are found whenever the node list changes (graph.c) */
    const int32_t *start = g->scope_start, *first = g->scope_first, *last = g->scope_last;
    assert(nn == 0 || (start && g->n_scoped == nn));
    bool ok = until && fill && b->held_start && (nn == 0 || (start && g->n_scoped == nn));
    if (!ok)
        goto out;
    for (int32_t x = 0; x < nt; x++)
        until[x] = -1;
    for (int32_t i = 0; i < nn && !b->run->dataflow; i++) { /* traced: no Python holds */
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x < 0 || is_meta_slot(n, k) || b->flag[x] & DM_TF_RESIDENT)
                continue;
            int32_t p = g->tensors[x].producer;
            for (int32_t d = start[i]; d < start[i + 1]; d++)
                if (p >= 0 && p < first[d] && last[d] > i && last[d] > until[x])
                    until[x] = last[d];
        }
    }
    /* a local variable of a module's forward holds its tensor until it returns */
    for (int32_t x = 0; x < nt; x++) {
        int32_t h = g->tensors[x].held_until - 1;
        if (h >= 0 && h < nn && h > until[x] && !b->run->dataflow &&
            g->tensors[x].producer >= 0 && g->tensors[x].producer < h &&
            !(b->flag[x] & DM_TF_RESIDENT))
            until[x] = h;
    }
    int32_t count = 0;
    for (int32_t x = 0; x < nt; x++)
        if (until[x] >= 0) {
            b->held_start[until[x] + 1]++;
            b->uses[x]++;
            count++;
        }
    for (int32_t i = 0; i < nn; i++)
        b->held_start[i + 1] += b->held_start[i];
    b->held_list = malloc(((size_t)count + 1) * sizeof *b->held_list);
    ok = b->held_list != NULL;
    for (int32_t x = 0; ok && x < nt; x++)
        if (until[x] >= 0)
            b->held_list[b->held_start[until[x]] + fill[until[x]]++] = x;
out:
    free(until);
    free(fill);
    return ok;
}

/* PyTorch's BatchNorm modules that track running statistics register a third
 * buffer, num_batches_tracked, an int64 scalar (torch/nn/modules/batchnorm.py,
 * _NormBase). torch.onnx drops it ("Removing mutation ... num_batches_tracked"),
 * so a BatchNormalization whose running mean and variance are initializers
 * implies one 8-byte device tensor. */
static bool implies_batch_counter(const struct dm_graph *g, const struct dm_node *n)
{
    return n->op == DM_OP_BatchNormalization && n->n_in >= 5 && n->in[3] >= 0 && n->in[4] >= 0 &&
           g->tensors[n->in[3]].role == DM_ROLE_WEIGHT && g->tensors[n->in[4]].role == DM_ROLE_WEIGHT;
}

static void setup(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    dm_sb_step(b, DM_PHASE_SETUP, -1);
    for (int32_t i = 0; i < g->n_tensors; i++) {
        b->resident[i] = -1;
        if (!(b->flag[i] & DM_TF_RESIDENT))
            continue;
        enum dnnmem_category cat =
            g->tensors[i].role == DM_ROLE_INPUT ? DNNMEM_CAT_INPUT : DNNMEM_CAT_WEIGHT;
        b->resident[i] = dm_sb_alloc(b, cat, b->t[i].dtype, b->t[i].bytes, i, -1, NULL, PINNED);
    }
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (implies_batch_counter(g, &g->nodes[i]))
            dm_sb_alloc(b, DNNMEM_CAT_WEIGHT, DM_INT64, 8, -1, i, "num_batches_tracked", PINNED);
}

/* Ops that torchvision and common models run in place (ReLU(inplace=True),
 * ReLU6/Hardtanh, Hardswish, LeakyReLU). */
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

static bool can_run_inplace(enum dm_op op)
{
    return op == DM_OP_Relu || op == DM_OP_Clip || op == DM_OP_LeakyRelu || op == DM_OP_HardSwish ||
           op == DM_OP_IndexAdd; /* Tensor.index_add_ */
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

static bool calls_cublas(enum dm_op op)
{
    return op == DM_OP_MatMul || op == DM_OP_Gemm || op == DM_OP_Einsum ||
           op == DM_OP_MS_Attention || op == DM_OP_MS_GroupQueryAttention || op == DM_OP_LSTM ||
           op == DM_OP_GRU || op == DM_OP_RNN || op == DM_OP_MxRNN || op == DM_OP_MS_MatMulNBits ||
           op == DM_OP_QuantLinear;
}

static bool is_conv(enum dm_op op) { return op == DM_OP_Conv || op == DM_OP_ConvTranspose; }

/* The dtype a fused Attention node computes in (autocast's, else q's). */
static enum dm_dtype sdpa_dtype(const struct dm_sb *b, const struct dm_node *n)
{
    return b->run->amp != DM_UNDEFINED ? b->run->amp : b->t[n->in[0]].dtype;
}

/* F.scaled_dot_product_attention's backend on CUDA (select_sdp_backend in
 * aten/src/ATen/native/transformers/sdp_utils.cpp): flash attention for
 * fp16/bf16 with a head dim up to 256 (128 before PyTorch 2.2, which moved to
 * FlashAttention-2) on sm80 and later, else the memory-efficient kernel.
 * An explicit attn_mask (ALBERT passes one) rules flash out. A node marked
 * flash_attn (transformers' flash_attention_2) is the flash-attn package's
 * kernel, always (the estimate refused what it cannot run). */
bool dm_sdpa_flash(const struct dm_sb *b, const struct dm_node *n)
{
    if (dm_attr_int(n, "flash_attn", 0))
        return true;
    /* --sdpa-backend: the kernel forced (hf.c checked PyTorch takes it);
     * cuDNN's buffers are taken as flash's */
    int64_t forced = dm_attr_int(n, "sdpa_backend", DNNMEM_SDPA_AUTO);
    if (forced == DNNMEM_SDPA_FLASH || forced == DNNMEM_SDPA_CUDNN)
        return true;
    if (forced == DNNMEM_SDPA_EFFICIENT)
        return false;
    const struct dm_tinfo *q = &b->t[n->in[0]];
    enum dm_dtype dt = sdpa_dtype(b, n);
    int64_t d = q->rank == 4 ? q->dims[3] : 0;
    int cc = b->run->compute_capability ? b->run->compute_capability : DM_CC_DEFAULT;
    /* the flash kernel takes no attn_mask (sdp_utils' check_for_attn_mask),
     * and one head size for query, key and value (check_head_dim_size_flash;
     * DeepSeek's MLA has values narrower than its queries) */
    int64_t dv = dm_has_in(n, 2) && b->t[n->in[2]].rank == 4 ? b->t[n->in[2]].dims[3] : d;
    return !dm_has_in(n, 3) && (dt == DM_FLOAT16 || dt == DM_BFLOAT16) && cc >= 80 &&
           d <= (b->run->torch_version >= 202 ? 256 : 128) && dv == d;
}

/* Transpose(0, 2, 1, 3) of a fused attention's output: the [B,S,H,D] buffer
 * the kernel wrote, contiguous again (transformers' .transpose(1, 2).contiguous()
 * copies nothing). */
static bool is_fused_attention_output(const struct dm_sb *b, const struct dm_node *n)
{
    int32_t x = n->in[0], p = x >= 0 ? b->g->tensors[x].producer : -1;
    int64_t cnt;
    const int64_t *perm = dm_attr_ints(n, "perm", &cnt);
    return p >= 0 && b->g->nodes[p].op == DM_OP_Attention && b->run->cuda && cnt == 4 &&
           perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Query rows of the fp32 log-sum-exp a fused Attention node keeps for its
 * backward: S for flash, S rounded up to 32 for the memory-efficient kernel
 * (kAlignLSE). */
int64_t dm_sdpa_lse_rows(const struct dm_sb *b, const struct dm_node *n)
{
    int64_t s = b->t[n->in[0]].dims[2];
    return dm_sdpa_flash(b, n) ? s : round_up(s, 32);
}

/* PyTorch 1.13's ConvParams::use_mkldnn (aten/src/ATen/native/Convolution.cpp):
 * float32 CPU convolutions go to oneDNN unless single-threaded THNN is faster:
 * a 1x1, unstrided, undilated kernel with batch < 16 on one thread, or a tiny
 * ungrouped one. */
static bool cpu_conv_uses_onednn(const struct dm_sb *b, const struct dm_node *n)
{
    if (!dm_has_in(n, 0) || !dm_has_in(n, 1) || n->op != DM_OP_Conv)
        return false;
    const struct dm_tinfo *in = &b->t[n->in[0]], *w = &b->t[n->in[1]];
    if (in->dtype != DM_FLOAT || in->rank != 4 || w->rank != 4)
        return false;
    int64_t cnt;
    const int64_t *st = dm_attr_ints(n, "strides", &cnt);
    bool strided = false, dilated = false;
    for (int64_t k = 0; st && k < cnt; k++)
        strided |= st[k] != 1;
    const int64_t *dl = dm_attr_ints(n, "dilations", &cnt);
    for (int64_t k = 0; dl && k < cnt; k++)
        dilated |= dl[k] != 1;
    int64_t kh = w->dims[2], kw = w->dims[3], batch = in->dims[0];
    bool several_threads = b->run->cpu_threads != 1;
    bool first = strided || dilated || batch >= 16 || kw != 1 || kh != 1 || several_threads;
    bool second = dm_attr_int(n, "group", 1) > 1 || (kw > 3 && kh > 3) || batch > 1 ||
                  in->numel > 20480;
    return first && second;
}

/* ---- QuantLinear: the kernels of quantized checkpoints ---------------------------- */

_Static_assert(DM_WS_BUFS == 4, "the forward's workspace initializer lists four slots");

/* Its method attribute is `m`. */
static bool ql_is(const struct dm_node *n, const char *m)
{
    const char *s = dm_attr_str(n, "method", "");
    return strcmp(s, m) == 0;
}

/* Rows the layer multiplies: A's elements over K (x.view(-1, K)). */
static int64_t ql_rows(const struct dm_sb *b, const struct dm_node *n)
{
    int64_t K = dm_attr_int(n, "K", 1);
    return K > 0 ? b->t[n->in[0]].numel / K : 0;
}

/* auto-gptq's QuantLinear (AutoGPTQ/AutoGPTQ auto_gptq/nn_modules/qlinear/
 * qlinear_cuda_old.py, the QuantLinear optimum
 * picks without exllama): its CUDA kernel below kernel_switch_threshold = 128
 * rows, when the extension serves the shape (autogptq_cuda_available is
 * false unless in_features and out_features are multiples of 64); else the
 * torch dequantization, the only path with autograd. */
static bool gptq_torch_path(const struct dm_sb *b, const struct dm_node *n)
{
    int64_t K = dm_attr_int(n, "K", 0), N = dm_attr_int(n, "N", 0);
    return dm_attr_int(n, "kernel", 0) == 0 &&
           (ql_rows(b, n) >= 128 || K % 64 != 0 || N % 64 != 0);
}

bool dm_quant_grad(const struct dm_sb *b, const struct dm_node *n)
{
    if (ql_is(n, "bnb4") || ql_is(n, "bnb8"))
        return true; /* MatMul4Bit, MatMul8bitLt: autograd Functions */
    if (ql_is(n, "gptq"))
        return gptq_torch_path(b, n);
    /* AutoAWQ's WQLinear_GEMM runs under torch.no_grad() unless built with
     * training=True (transformers never passes it); exllama, the CUDA
     * kernels and FP8Linear's triton kernels write into fresh tensors */
    return false;
}

int64_t dm_quant_saved_weight(const struct dm_sb *b, const struct dm_node *n, enum dm_dtype *dtype)
{
    int64_t kn;
    /* torch.matmul(x, weight) keeps the fp16 dequantized weight for x's grad */
    if (!ql_is(n, "gptq") || !gptq_torch_path(b, n) ||
        !dm_mul_ok(dm_attr_int(n, "K", 0), dm_attr_int(n, "N", 0), &kn))
        return 0;
    *dtype = DM_FLOAT16;
    return kn;
}

/* A transient of `numel` elements of `dt`, one holder; -1 when it overflows. */
static int32_t ql_tmp(struct dm_sb *b, enum dm_dtype dt, int64_t numel, int32_t node, const char *what)
{
    uint64_t bytes;
    if (numel < 0 || !dm_dtype_bytes(dt, numel, &bytes))
        return -1;
    return dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, dt, bytes, -1, node, what, 1);
}

static int64_t ql_mul(int64_t a, int64_t c)
{
    int64_t r;
    return dm_mul_ok(a, c, &r) ? r : -1;
}

/* The transients of one quantized layer, forward or backward, as its
 * library's code makes them (the sources are named at each method). What is
 * alive when the layer's output is allocated goes into ws (freed once the
 * output exists); what the code frees before, is freed here. */
static void quant_workspace(struct dm_sb *b, const struct dm_node *n, int32_t node, bool backward,
                            struct dm_ws *ws)
{
    const struct dm_tinfo *a = &b->t[n->in[0]];
    enum dm_dtype at = a->dtype;
    int64_t K = dm_attr_int(n, "K", 0), N = dm_attr_int(n, "N", 0), M = ql_rows(b, n);
    int64_t MK = ql_mul(M, K), MN = ql_mul(M, N), KN = ql_mul(K, N);
    bool bias = dm_has_in(n, 2);
    if (ql_is(n, "bnb4")) {
        /* bitsandbytes MatMul4Bit (bitsandbytes-foundation/bitsandbytes
         * bitsandbytes/autograd/_functions.py): F.linear(A,
         * dequantize_4bit(B).to(A.dtype).t(), bias), and again in backward
         * for A's grad (the weight is not kept). matmul_4bit takes gemv_4bit
         * instead, with no dequantized copy, for a single row that needs no
         * grad when K is a multiple of the blocksize. */
        int64_t bs = dm_attr_int(n, "blocksize", 64);
        if (!backward && M == 1 && !b->run->train && bs > 0 && K % bs == 0)
            return;
        ws->buf[0] = ql_tmp(b, at, KN, node, "dequantized_weight");
        return;
    }
    if (ql_is(n, "bnb8")) {
        /* bitsandbytes >= 0.45 MatMul8bitLt with frozen int8 weights
         * (bitsandbytes-foundation/bitsandbytes bitsandbytes/autograd/
         * _functions.py; bitsandbytes/backends/cuda/ops.py) */
        if (backward) {
            /* CB = state.CB.to(A.dtype, copy=True).mul_(SCB.unsqueeze(1) / 127) */
            ws->buf[0] = ql_tmp(b, at, KN, node, "dequantized_weight");
            ws->buf[1] = ql_tmp(b, DM_FLOAT, N, node, "SCB / 127");
            return;
        }
        /* int8_vectorwise_quant(A.to(float16), threshold): int8 rows and a
         * float32 absmax per row; with a threshold, A.abs() >= threshold marks
         * outliers (outlier columns depend on the data: none assumed) */
        int32_t a16 = at != DM_FLOAT16 ? ql_tmp(b, DM_FLOAT16, MK, node, "input (float16)") : -1;
        ws->buf[0] = ql_tmp(b, DM_INT8, MK, node, "input (int8)");
        ws->buf[1] = ql_tmp(b, DM_FLOAT, M, node, "input row stats");
        if (dm_attr_float(n, "threshold", 0) > 0) {
            int32_t ab = ql_tmp(b, DM_FLOAT16, MK, node, "input.abs()");
            int32_t mask = ql_tmp(b, DM_BOOL, MK, node, "outlier mask");
            dm_sb_unref(b, ab);
            dm_sb_unref(b, mask);
        }
        dm_sb_unref(b, a16);
        /* int8_linear_matmul: int32 [M, N]; int8_mm_dequant: float16, then
         * .to(A.dtype) (a copy unless A is float16); the bias is fused */
        ws->buf[2] = ql_tmp(b, DM_INT32, MN, node, "int32 product");
        if (at != DM_FLOAT16)
            ws->buf[3] = ql_tmp(b, DM_FLOAT16, MN, node, "dequantized output (float16)");
        return;
    }
    if (backward)
        return; /* gptq's torch path: MmBackward reads the weight kept in forward */
    if (ql_is(n, "gptq")) {
        int64_t kernel = dm_attr_int(n, "kernel", 0), bits = dm_attr_int(n, "bits", 4);
        if (kernel != 0) {
            /* exllama v1/v2 (AutoGPTQ/AutoGPTQ qlinear_exllama*.py): x.half()
             * unless float16,
             * the output float16 [M, N] (modelled in A's dtype), bias added in
             * place; dequantization for cuBLAS goes to the persistent temp_dq */
            if (at != DM_FLOAT16)
                ws->buf[0] = ql_tmp(b, DM_FLOAT16, MK, node, "input (float16)");
            return;
        }
        if (!gptq_torch_path(b, n)) {
            /* the CUDA kernel: x.to(float32), out = zeros float32 [M, N],
             * out.to(x's dtype), out + bias */
            if (at != DM_FLOAT)
                ws->buf[0] = ql_tmp(b, DM_FLOAT, MK, node, "input (float32)");
            if (at == DM_FLOAT && !bias)
                return; /* the float32 out is the output */
            int32_t o32 = at != DM_FLOAT ? ql_tmp(b, DM_FLOAT, MN, node, "kernel output (float32)") : -1;
            if (bias) {
                ws->buf[1] = ql_tmp(b, at, MN, node, "output before bias");
                dm_sb_unref(b, o32);
            } else {
                ws->buf[1] = o32;
            }
            return;
        }
        /* the torch dequantization (2, 4, 8 bits; 3 bits unpacks through
         * int32 views of the same size): qweight >> wf as int32 [K, N], cast to
         * int8 (int16 for 8 bits), & maxq, - zeros, * scales: float16 [K, N];
         * torch.matmul(x, weight); out + bias. The zero points' [groups, N]
         * unpacking is not counted. */
        enum dm_dtype narrow = bits == 8 ? DM_INT16 : DM_INT8;
        int32_t s1 = ql_tmp(b, DM_INT32, KN, node, "unpacked codes (int32)");
        int32_t s2 = ql_tmp(b, narrow, KN, node, "unpacked codes");
        dm_sb_unref(b, s1);
        int32_t s3 = ql_tmp(b, narrow, KN, node, "codes & maxq");
        dm_sb_unref(b, s2);
        int32_t s4 = ql_tmp(b, narrow, KN, node, "codes - zeros");
        dm_sb_unref(b, s3);
        ws->buf[0] = ql_tmp(b, DM_FLOAT16, KN, node, "dequantized_weight");
        dm_sb_unref(b, s4);
        if (bias)
            ws->buf[1] = ql_tmp(b, at, MN, node, "output before bias");
        return;
    }
    if (ql_is(n, "awq")) {
        /* AutoAWQ WQLinear_GEMM (casper-hansen/AutoAWQ awq/modules/linear/
         * gemm.py): x.half();
         * from x.shape[0] * x.shape[1] >= 1024 (FP16_MATMUL_HEURISTIC_CONDITION)
         * dequantize_weights_cuda, float16 [K, N], then torch.matmul; below
         * it gemm_forward_cuda with split_k_iters 8, whose float16 partials
         * [8, M, N] are summed (AutoAWQ_kernels' gemm_cuda_gen.cu,
         * _out_feats.sum(0)); out + bias; .to(x's dtype) */
        int64_t lead = a->rank >= 2 ? ql_mul(a->dims[0], a->dims[1]) : MK;
        ws->buf[0] = at != DM_FLOAT16 ? ql_tmp(b, DM_FLOAT16, MK, node, "input (float16)") : -1;
        int32_t t = lead >= 1024 ? ql_tmp(b, DM_FLOAT16, KN, node, "dequantized_weight")
                                 : ql_tmp(b, DM_FLOAT16, ql_mul(8, MN), node, "split-k partials");
        if (!bias && at == DM_FLOAT16) {
            ws->buf[1] = t;
            return;
        }
        int32_t o16 = ql_tmp(b, DM_FLOAT16, MN, node, "output (float16)");
        dm_sb_unref(b, t);
        if (bias && at != DM_FLOAT16) {
            ws->buf[1] = ql_tmp(b, DM_FLOAT16, MN, node, "output + bias (float16)");
            dm_sb_unref(b, o16);
        } else {
            ws->buf[1] = o16;
        }
        return;
    }
    if (ql_is(n, "fp8")) {
        /* transformers FP8Linear.forward (huggingface/transformers
         * src/transformers/integrations/finegrained_fp8.py):
         * act_quant: float8_e4m3fn [M, K] and a float32 scale per group of
         * block_k; the triton matmul's output in the input's dtype; + bias;
         * torch.nan_to_num (the layer's output) */
        int64_t bk = dm_attr_int(n, "block_k", 128);
        ws->buf[0] = ql_tmp(b, DM_FLOAT8E4M3FN, MK, node, "input (float8)");
        ws->buf[1] = ql_tmp(b, DM_FLOAT, bk > 0 ? ql_mul(M, K / bk) : -1, node, "input scales");
        int32_t c = ql_tmp(b, at, MN, node, "output before nan_to_num");
        if (bias) {
            ws->buf[2] = ql_tmp(b, at, MN, node, "output + bias");
            dm_sb_unref(b, c);
        } else {
            ws->buf[2] = c;
        }
    }
}

/* Autograd runs backward on a device thread of its own, which takes a second
 * cuBLAS handle from the pool, so training keeps two workspaces (inferred from
 * the handle pool's per-thread keying; runtime-facts.md §5.2). */
struct dm_ws dm_sb_workspace_begin(struct dm_sb *b, const struct dm_node *n, bool backward)
{
    struct dm_ws ws;
    for (int k = 0; k < DM_WS_BUFS; k++)
        ws.buf[k] = -1;
    int32_t node = (int32_t)(n - b->g->nodes);
    if (b->run->cuda) {
        if (calls_cublas(n->op) && b->run->cublas_workspace && !b->blas_handle[backward]) {
            b->blas_handle[backward] = true;
            dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_UINT8, b->run->cublas_workspace, -1, -1,
                        backward ? "cublas_workspace (autograd thread)" : "cublas_workspace",
                        PINNED);
        }
        if (n->op == DM_OP_Attention && backward) {
            /* the backward kernels' fp32 buffers: FlashAttention-2's mha_bwd
             * takes softmax_d [B,H,S128] and dq_accum [B,S128,H,D32] (S
             * rounded up to 128, D to 32, or 64 above 128: flash_api.cpp); the
             * memory-efficient kernel a delta [B,H,S] */
            const struct dm_tinfo *q = &b->t[n->in[0]];
            int64_t bh = q->dims[0] * q->dims[1], s = q->dims[2], d = q->dims[3];
            bool flash = dm_sdpa_flash(b, n);
            int64_t s128 = round_up(s, 128), d32 = round_up(d, d <= 128 ? 32 : 64), rows, acc;
            uint64_t b0, b1;
            if (dm_mul_ok(bh, flash ? s128 : s, &rows) && dm_dtype_bytes(DM_FLOAT, rows, &b0))
                ws.buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, b0, -1, node,
                                        flash ? "flash_softmax_d" : "efficient_delta", 1);
            if (flash && dm_mul_ok(bh, s128, &rows) && dm_mul_ok(rows, d32, &acc) &&
                dm_dtype_bytes(DM_FLOAT, acc, &b1))
                ws.buf[1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, b1, -1, node,
                                        "flash_dq_accum", 1);
            /* the memory-efficient kernel in fp16/bf16 accumulates dq in fp32
             * (kNeedsAccumGradQ in kernel_backward.h: output type is not the
             * accumulator's): a [B, H, S, D] fp32 workspace */
            enum dm_dtype dt = sdpa_dtype(b, n);
            if (!flash && (dt == DM_FLOAT16 || dt == DM_BFLOAT16) && dm_mul_ok(bh, s, &rows) &&
                dm_mul_ok(rows, d, &acc) && dm_dtype_bytes(DM_FLOAT, acc, &b1))
                ws.buf[1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, b1, -1, node,
                                        "efficient_dq_accum", 1);
            /* flash-attn's mha_bwd with grouped keys and values (num_heads_k
             * < num_heads): dk_expanded and dv_expanded [B, S_k, H, D] of the
             * compute dtype, summed into dk and dv over each group after the
             * kernel (csrc/flash_attn/flash_api.cpp; PyTorch's copy of it in
             * aten/src/ATen/native/transformers/cuda/flash_attn serves sdpa's
             * enable_gqa; cuDNN's backward is taken to do the same) */
            const struct dm_tinfo *k = dm_has_in(n, 1) ? &b->t[n->in[1]] : NULL;
            const struct dm_tinfo *v = dm_has_in(n, 2) ? &b->t[n->in[2]] : NULL;
            if (flash && k && v && k->rank == 4 && v->rank == 4 &&
                k->dims[1] != q->dims[1])
                for (int j = 0; j < 2; j++) {
                    const struct dm_tinfo *x = j ? v : k;
                    int64_t e;
                    uint64_t eb;
                    if (dm_mul_ok(q->dims[0] * q->dims[1], x->dims[2], &e) &&
                        dm_mul_ok(e, x->dims[3], &e) && dm_dtype_bytes(dt, e, &eb))
                        ws.buf[2 + j] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, dt, eb, -1, node,
                                                    j ? "flash_dv_expanded" : "flash_dk_expanded", 1);
                }
        }
        if (n->op == DM_OP_QuantLinear && dm_has_in(n, 0))
            quant_workspace(b, n, node, backward, &ws);
        if (n->op == DM_OP_MS_MatMulNBits && dm_has_in(n, 0)) {
            /* bitsandbytes' MatMul4Bit: F.dequantize_4bit(B).to(A.dtype) in
             * forward, and again in backward for A's grad (the weight is not
             * kept); [N, K] of A's dtype, freed once the matmul has run */
            uint64_t bytes;
            int64_t nk;
            if (dm_mul_ok(dm_attr_int(n, "N", 0), dm_attr_int(n, "K", 0), &nk) &&
                dm_dtype_bytes(b->t[n->in[0]].dtype, nk, &bytes))
                ws.buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, b->t[n->in[0]].dtype, bytes, -1,
                                        node, "dequantized_weight", 1);
        }
        /* XLA: each cuBLAS call's own workspace (run->xla_gemm_workspace),
         * a temp-buffer value live while the call runs; in a backward step
         * the input's and the weight's grads are two calls, one at a time */
        if (calls_cublas(n->op) && b->run->xla_gemm_workspace && ws.buf[DM_WS_BUFS - 1] < 0)
            ws.buf[DM_WS_BUFS - 1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_UINT8,
                                                 b->run->xla_gemm_workspace, -1, node,
                                                 "cublas_workspace (XLA, this call)", 1);
        if (is_conv(n->op) && b->run->conv_workspace)
            ws.buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_UINT8, b->run->conv_workspace,
                                    -1, node, "cudnn_workspace", 1);
    } else if (cpu_conv_uses_onednn(b, n)) {
        /* oneDNN (ideep, through the c10 allocator): forward computes into a
         * buffer of its own and reorders the weight, then copies into the ATen
         * output; backward takes weight- and input-sized scratch
         * (tests/validation/README.md, measured on 1.13) */
        const struct dm_tinfo *x = &b->t[n->in[0]], *w = &b->t[n->in[1]];
        const struct dm_tinfo *y = dm_has_out(n, 0) ? &b->t[n->out[0]] : x;
        ws.buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, backward ? w->bytes : y->bytes,
                                -1, node, backward ? "onednn_weight_scratch" : "onednn_output", 1);
        ws.buf[1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, backward ? x->bytes : w->bytes,
                                -1, node, backward ? "onednn_input_scratch" : "onednn_weight",
                                1);
    }
    return ws;
}

void dm_sb_workspace_end(struct dm_sb *b, struct dm_ws *ws)
{
    for (int k = 0; k < DM_WS_BUFS; k++) {
        dm_sb_unref(b, ws->buf[k]);
        ws->buf[k] = -1;
    }
}

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

int32_t dm_sb_input(const struct dm_sb *b, const struct dm_node *n, int k)
{
    if (!dm_has_in(n, k))
        return -1;
    return b->in_buf[k] >= 0 ? b->in_buf[k] : b->cur[n->in[k]];
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
    bool on_device = n->n_out > 0 && n->out[0] >= 0 && !t[n->out[0]].is_const;
    struct dm_ws ws = {{-1, -1, -1, -1}};
    if (on_device)
        ws = dm_sb_workspace_begin(b, n, false);
    if (on_device)
        amp_casts(b, n);
    else
        for (int k = 0; k < n->n_in; k++)
            b->in_buf[k] = -1;
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
        bool alias = k == 0 && base >= 0 &&
                     ((flags & DM_F_VIEW) || same_cast ||
                      (!train && (flags & DM_F_IDENTITY_INFER)));
        /* torch.split's parts, where the front end marks them as the views
         * they are in PyTorch ("view"): every output shares input 0 */
        if (n->op == DM_OP_Split && base >= 0 && dm_attr_int(n, "view", 0))
            alias = true;
        if (alias && (n->op == DM_OP_Reshape || n->op == DM_OP_Flatten) && b->strided[in0])
            alias = false; /* torch.reshape copies a non-contiguous tensor */
        /* in place: nothing but this op holds the input */
        bool inplace = k == 0 && base >= 0 && b->run->inplace && can_run_inplace(n->op) &&
                       dm_attr_int(n, "inplace", 1) != 0 && /* nn.ReLU() of HF models: 0 */
                       b->refs[base] == 1 && b->resident[in0] < 0 && t[o].bytes == t[in0].bytes;
        /* F.linear on a 3-D input is matmul(x, W.t()) then output.add_(bias) in
         * place (aten/src/ATen/native/Linear.cpp): an Add of a weight onto a
         * fresh MatMul result nobody else holds writes into it */
        int32_t mm = linear_bias_target(b, n);
        if (k == 0 && mm >= 0 && b->cur[mm] >= 0 && b->refs[b->cur[mm]] == 1 &&
            t[o].bytes == t[mm].bytes) {
            in0 = mm;
            base = b->cur[mm];
            inplace = true;
        }
        /* TF's graph executor forwards an input only this op still holds
         * and that no backward reads (the gradient graph's reference) */
        enum dm_train_rule rule = dm_ops[n->op].train;
        bool own_keep = save && rule != DM_T_OUT && rule != DM_T_PASS && rule != DM_T_NONE &&
                        !dm_tf_relu6(b, n); /* Relu6 keeps its output (train.c) */
        for (int j = 0; k == 0 && !alias && !inplace && b->run->tf_graph && !own_keep &&
                        j < tf_forwards(n->op) && j < n->n_in;
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
            b->strided[o] = b->strided[in0] ||
                            (n->op == DM_OP_Transpose && !transpose_keeps_order(n, &t[in0])) ||
                            ((n->op == DM_OP_Narrow || n->op == DM_OP_Split) &&
                             narrow_strides(n, &t[in0]));
            if (n->op == DM_OP_Transpose && is_fused_attention_output(b, n))
                b->strided[o] = false;
            continue;
        }
        /* constant-valued results: one computed from weights alone is an
         * exporter's repacking PyTorch never makes, but an embedding lookup
         * of a weight by indices made at run time from the bound dims
         * allocates (GPT-2's wpe(arange(S))) */
        bool run_time_lookup = n->op == DM_OP_Gather && (b->flag[o] & DM_TF_DEP);
        bool materialize = !t[o].is_const ||
                           (((b->flag[o] & DM_TF_DEVICE_USE) || g->tensors[o].is_output) &&
                            t[o].numel > 1 &&
                            (!(b->flag[o] & DM_TF_FROM_WEIGHT) || run_time_lookup));
        if (materialize)
            b->cur[o] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, t[o].dtype, t[o].bytes, o, i, NULL,
                                    holders);
        /* the fused kernels write [B,S,H,D] and return its [B,H,S,D] view */
        b->strided[o] = n->op == DM_OP_Attention && b->run->cuda;
    }
    dm_sb_workspace_end(b, &ws);
    if (!again)
        dm_train_returned(b, i);
    if (save)
        dm_train_save(b, i);
    /* after the saved extras: TF allocates every output (reserve spaces
     * included) before a kernel's temporaries */
    if (on_device && b->run->tf_ops)
        dm_train_tf_forward(b, i, save);
    /* the op is done: it lets go of its inputs and outputs, and modules that
     * end here of their arguments */
    for (int k = 0; k < n->n_in; k++) {
        if (n->in[k] >= 0 && !is_meta_slot(n, k))
            dm_sb_unref(b, b->cur[n->in[k]]);
        dm_sb_unref(b, b->in_buf[k]);
        b->in_buf[k] = -1;
    }
    for (int32_t h = b->held_start[i]; !again && h < b->held_start[i + 1]; h++)
        dm_sb_unref(b, b->cur[b->held_list[h]]);
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
        b->amp_cache[i] = -1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        bool save = b->run->train;
        if (b->train)
            save = dm_train_checkpoint_enter(b, i); /* false inside a checkpointed segment */
        dm_sb_forward_node(b, i, b->uses, save, false);
    }
    /* leaving autocast clears its cache of parameter casts */
    for (int32_t i = 0; i < g->n_tensors; i++)
        if (b->amp_cache[i] >= 0) {
            dm_sb_unref(b, b->amp_cache[i]);
            b->amp_cache[i] = -1;
        }
}

enum dnnmem_status dm_schedule_build(const struct dm_graph *g, const struct dm_tinfo *t,
                                     const struct dm_run *run, struct dm_schedule *s,
                                     struct dnnmem_error *err)
{
    memset(s, 0, sizeof *s);
    int32_t nt = g->n_tensors;
    struct dm_sb b = {.s = s, .g = g, .t = t, .run = run};
    b.cur = malloc(((size_t)nt + 1) * sizeof *b.cur);
    b.strided = calloc((size_t)nt + 1, sizeof *b.strided);
    b.flag = calloc((size_t)nt + 1, sizeof *b.flag);
    b.uses = calloc((size_t)nt + 1, sizeof *b.uses);
    b.resident = malloc(((size_t)nt + 1) * sizeof *b.resident);
    b.amp_cache = malloc(((size_t)nt + 1) * sizeof *b.amp_cache);
    int max_in = 1;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].n_in > max_in)
            max_in = g->nodes[i].n_in;
    b.in_buf = malloc((size_t)max_in * sizeof *b.in_buf);
    enum dnnmem_status st = DNNMEM_OK;
    if (!b.cur || !b.strided || !b.flag || !b.uses || !b.resident || !b.amp_cache || !b.in_buf) {
        b.oom = true;
        goto out;
    }
    analyse(&b);
    if (!module_holds(&b)) {
        b.oom = true;
        goto out;
    }
    b.iteration = 1;
    for (int k = 0; k < DM_GEN_PRE; k++)
        b.gen_pre[k] = -1;
    setup(&b);
    if (!run->train) {
        if (run->gen_tokens > 0 && run->gen_beams > 1)
            dm_sb_generate_setup(&b);
        dm_sb_forward(&b);
        if (run->gen_tokens > 0 && !b.oom)
            st = dm_sb_generate(&b, err);
        goto out;
    }
    if ((st = dm_train_init(&b, err)) != DNNMEM_OK)
        goto out;
    for (int it = 1; it <= run->iterations && !b.oom; it++) {
        b.iteration = it;
        dm_train_zero_grad(&b);
        for (int micro = 1; micro <= run->grad_accum && !b.oom; micro++) {
            dm_sb_forward(&b);
            dm_train_backward(&b, micro == run->grad_accum);
        }
    }
out:
    if (b.train)
        dm_train_free(&b);
    free(b.refs);
    free(b.cur);
    free(b.strided);
    free(b.flag);
    free(b.uses);
    free(b.resident);
    free(b.held_start);
    free(b.held_list);
    free(b.amp_cache);
    free(b.in_buf);
    if (b.oom) {
        dm_schedule_free(s);
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory scheduling '%s'", g->path);
    }
    if (st != DNNMEM_OK)
        dm_schedule_free(s);
    return st;
}
