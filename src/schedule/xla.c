/*
 * xla.c: JAX's jitted step (--framework jax with --jax-execution jit, the
 * default). jax.jit traces the whole step (forward, jax.grad's backward, the
 * optax update) into one XLA module; XLA's GPU compiler fuses it, schedules
 * it and assigns its buffers at compile time. The pass turns the dataflow
 * schedule of one step (src/schedule, src/train, built with run->dataflow:
 * every value dies at its last reader) into what the runtime then asks its
 * BFC allocator for. Facts and their sources (openxla/xla and jax-ml/jax;
 * the code here is our own):
 *
 *  1. Fusion. The GPU pipeline's priority fusion (xla/service/gpu/
 *     priority_fusion.cc, on by default: debug_options_flags.cc sets
 *     xla_gpu_enable_priority_fusion) fuses a producer into all of its
 *     consumers or into none (CalculateProducerPriority: "Don't fuse if we
 *     can't fuse in all users"), ranked by a cost model; a fused producer's
 *     value lives in registers and gets no buffer. Loop-fusible producers
 *     are elementwise ops with operands, broadcasts, reshapes, transposes,
 *     slices, concatenations... (gpu_fusible.cc, IsUniversallyLoopFusible),
 *     and reductions take elementwise producers as input fusions
 *     (ChooseFusionKind: kInput). Matmuls and convolutions become cuBLAS and
 *     cuDNN custom calls, which nothing fuses into as producers. The rule
 *     modelled is the conservative corner of this: a value made by an
 *     elementwise op or a broadcast (ops.def rows listed in elementwise()
 *     below, plus Expand, Dropout in training and BatchNormalization, whose
 *     last stage is elementwise: elementwise_fwd(), fusible_producer())
 *     whose one and only reader (through views, which are free bitcasts or
 *     fused reshapes) is an elementwise op or a reduction, gets no buffer. A value with two or more readers is
 *     materialised (XLA may duplicate a cheap producer into each: not
 *     modelled), as is any value the backward reads: autodiff's residuals
 *     are ordinary HLO values whose uses in the backward make a second
 *     reader. The copies XLA fuses as well (slices, concatenations, pads,
 *     gathers, transposes) are kept; so are normalisations and softmax,
 *     which lower to several reductions. In the backward the same rule
 *     applies to an activation's gradient made by an elementwise op's
 *     backward (no broadcast) whose only reader is the backward of another
 *     elementwise op computing a single gradient. A fused value's readers
 *     run inside its consumer's kernel: the values its producer read are
 *     released there, not at the producer.
 *     The optimizer update is elementwise over every parameter
 *     (optax's transforms are tree_maps of jnp elementwise ops): its
 *     temporaries are fused; it writes the new parameters and state.
 *  2. Buffer sharing. The heap simulation lets a value take the buffer of
 *     an operand that dies at its instruction (heap_simulator.cc,
 *     may_reuse_operand_buffers, default true) when
 *     HloDataflowAnalysis::CanShareOperandBufferWithUser allows it: same
 *     shape and element type, and the user elementwise on that operand (or a
 *     loop fusion whose uses of it are all elementwise). Modelled for values
 *     made by elementwise ops (forward, or an elementwise op's backward) and
 *     a dying temporary of the same dtype and bytes.
 *  3. The temp buffer. The GPU compiler runs BufferAssigner with a
 *     SequentialHloOrdering of the module's schedule; every value that is
 *     neither an entry parameter, nor (maybe) live out, nor a constant is a
 *     temporary (BufferAllocation::IsPreallocatedTempBuffer), and
 *     CombineTempAllocations packs all temporaries into one allocation whose
 *     offsets the heap simulator assigns (src/alloc/heap.c; 128 B alignment,
 *     gpu_constants.h). The sequence simulated is the step's program order
 *     (the forward, the backward in reverse), as traced, but for one
 *     reordering of XLA's scheduler (gpu_hlo_schedule.cc:
 *     DefaultMemoryScheduler, the least memory of a list, a DFS and a
 *     post-order schedule): each parameter's update (optax's update is a
 *     loop fusion per parameter, reading its gradient, the parameter and its
 *     state) runs as soon as its gradient is whole, at the last backward
 *     step reading the parameter, and frees the gradient there; the program
 *     order would hold every gradient until the end (measured: in the 16
 *     jitted steps of tools/gpu/results/jax-hlo.tar.gz every update fusion
 *     follows its gradient's matmul or reduction; the MLP's temp is one
 *     4096x4096 gradient, 64 MiB, not all four, 160 MiB). Its other
 *     reorderings are not modelled (the MLP's weight-gradient matmuls run
 *     after the whole input-gradient chain).
 *  4. What the allocator sees per call: the entry parameters allocated
 *     before (the weights, the batch, and the optimizer state, made by
 *     optax's init before the loop), then every other allocation of the
 *     executable from the device allocator at each execution, in allocation
 *     order (gpu_executable.cc, GenerateBufferAllocations/
 *     BufferForAllocation): the live-out outputs, then the temp buffer
 *     (CombineTempAllocations puts it last); the temp is freed when the
 *     call returns. Training outputs are
 *     the new parameters and optimizer state: with donate_argnums on them
 *     (the usual train step; docs.jax.dev buffer_donation: "the
 *     corresponding input buffer is donated to hold an output") they alias
 *     their inputs and need nothing; without, they are new buffers, and the
 *     old ones go when Python drops them after the call (jax PR #2936: "JAX
 *     must currently always have two copies of x"). Inference outputs are
 *     live-out buffers of their own, held by the caller.
 *  5. Workspaces: each cuBLAS call carries a workspace (an s8 output of the
 *     custom call, GemmConfig::kHopperWorkspace 32 MiB on sm90+,
 *     kDefaultWorkspace 4 MiB before: matmul_utils.h, gemm_rewriter.cc),
 *     scheduled as a value of the call's step (src/schedule/schedule.c,
 *     run->xla_gemm_workspace; --cublas-workspace overrides it), so a temp
 *     value like any other. Every MatMul/Gemm is taken to be a cuBLAS call:
 *     autotuning may choose a Triton kernel, which has none (the CNN's two
 *     linear layers at batch 64). cuDNN's workspaces: --conv-workspace.
 *     Not modelled: HloRematerialization (the GPU compiler runs it with the
 *     device's memory limit: it only recomputes values when the module would
 *     not fit, where this estimate says "does not fit"), multi-output and
 *     sibling fusion, split-K matmul outputs ([2, M, N] partial products),
 *     NHWC layout copies around cuDNN convolutions, the loss scalar output.
 *     Which values exist and which the backward reads are dnnmem's per-op
 *     rules (src/train/train.c, PyTorch autograd's) with XLA's where they
 *     differ (run->xla, measured in the HLO dumps): max pooling keeps no
 *     indices and its backward recomputes them, softmax's backward reads its
 *     input too, exact GELU keeps its second factor (src/train/save.c's header).
 *  6. Live-out allocations hold temporaries until their values are made
 *     (host_in_outputs below: BufferAssigner tries every buffer in the
 *     allocations that exist before delaying it to the heap simulator):
 *     inference's outputs, and without donation the new parameters and
 *     optimizer state, each made by its parameter's update (rule 3).
 *     Measured: tfm-infer's cuBLAS workspaces and attention scores sit in
 *     the 64 MiB logits output; mlp-adam-nodonate's temp is 6 MiB.
 *  7. XLA's CPU backend (o->cpu, --device cpu; measured against its own
 *     memory_analysis in tests/validation/jax-cpu.jsonl, jax 0.10.2): no
 *     workspaces, 64 B alignment, and copies of parameters made at the
 *     step's start (find_copies): donated weights an input gradient reads,
 *     float32 conversions of half-precision weights, with half-precision
 *     values float32 throughout but, in training, the forward values no
 *     matmul reads (rule 7h, half_forward_values); the donated parameters'
 *     allocations hold temporaries between their copy and their update.
 *  8. XLA's CPU convolutions run NHWC, and its max pooling keeps the argmax
 *     (cpu_layouts below; the convolutions' NHWC input and gradient copies
 *     are workspace.c's): measured on the float32 CNN steps of
 *     tests/validation/jax-cpu.jsonl; in half precision their float32 and
 *     bf16 values (rule 8h), and a ReLU between convolutions stays NHWC at
 *     inference (rule 8n). In training an embedding's gradient is written
 *     into zeros of its table made at the step's start (rule 8e,
 *     gather_grad_zeros), and a float32 softmax keeps the broadcast
 *     reciprocal of its sum, its scores' scalar scale a broadcast shared by
 *     every layer (rule 8s, softmax_values).
 *  9. XLA's CPU cross-entropy keeps the float32 logits to the loss's
 *     backward (cpu_loss_keeps_logits).
 */
#include <stdlib.h>
#include <string.h>

#include "dnnmem-impl.h"

/* kXlaAllocatedBufferAlignBytes (xla/service/gpu/gpu_constants.h): the
 * alignment of temp and live-out buffers, 128 B in the XLA TensorFlow 2.16
 * vendors (third_party/xla); the heap aligns each chunk's start to it. */
#define XLA_GPU_ALIGN 128

/* The CPU backend's: the temp allocation's values start at multiples of
 * 64 B (measured: jax 0.10.2's CPU buffer-assignment dumps, e.g. a 4000 B
 * value at offset 74721280 and the next at 74725312 = + 4032; XLA's
 * cpu_function_runtime Align(), 64 B). */
#define XLA_CPU_ALIGN 64

/* Ops that jax.numpy / jax.nn / lax lower to elementwise HLO instructions
 * (an elementwise op with operands is loop fusible: gpu_fusible.cc,
 * IsUniversallyLoopFusible). */
static bool elementwise(enum dm_op op)
{
    switch (op) {
    case DM_OP_Abs: case DM_OP_Acos: case DM_OP_Acosh: case DM_OP_Add: case DM_OP_And:
    case DM_OP_Asin: case DM_OP_Asinh: case DM_OP_Atan: case DM_OP_Atanh: case DM_OP_BitShift:
    case DM_OP_Cast: case DM_OP_CastLike: case DM_OP_Ceil: case DM_OP_Celu: case DM_OP_Clip:
    case DM_OP_Cos: case DM_OP_Cosh: case DM_OP_Div: case DM_OP_Elu: case DM_OP_Equal:
    case DM_OP_Erf: case DM_OP_Exp: case DM_OP_Floor: case DM_OP_Gelu: case DM_OP_Greater:
    case DM_OP_GreaterOrEqual: case DM_OP_HardSigmoid: case DM_OP_HardSwish: case DM_OP_IsInf:
    case DM_OP_IsNaN: case DM_OP_LeakyRelu: case DM_OP_Less: case DM_OP_LessOrEqual:
    case DM_OP_Log: case DM_OP_Max: case DM_OP_Mean: case DM_OP_Min: case DM_OP_Mod:
    case DM_OP_Mul: case DM_OP_Neg: case DM_OP_Not: case DM_OP_Or: case DM_OP_PRelu:
    case DM_OP_Pow: case DM_OP_Reciprocal: case DM_OP_Relu: case DM_OP_Round: case DM_OP_Selu:
    case DM_OP_Shrink: case DM_OP_Sigmoid: case DM_OP_Sign: case DM_OP_Silu: case DM_OP_Sin:
    case DM_OP_Sinh: case DM_OP_Softplus: case DM_OP_Softsign: case DM_OP_Sqrt: case DM_OP_Sub:
    case DM_OP_Sum: case DM_OP_Tan: case DM_OP_Tanh: case DM_OP_ThresholdedRelu:
    case DM_OP_Where: case DM_OP_Xor: case DM_OP_MS_FastGelu:
        return true;
    default:
        return false;
    }
}

/* Reductions: an input fusion takes elementwise producers (ChooseFusionKind). */
static bool reduction(enum dm_op op)
{
    switch (op) {
    case DM_OP_ReduceL1: case DM_OP_ReduceL2: case DM_OP_ReduceLogSum:
    case DM_OP_ReduceLogSumExp: case DM_OP_ReduceMax: case DM_OP_ReduceMean:
    case DM_OP_ReduceMin: case DM_OP_ReduceProd: case DM_OP_ReduceSum:
    case DM_OP_ReduceSumSquare: case DM_OP_GlobalAveragePool: case DM_OP_GlobalMaxPool:
        return true;
    default:
        return false;
    }
}

/* Elementwise in the forward, given the run: BatchNormalization at
 * inference is a per-channel scale and shift by its stored statistics
 * (XLA's batchnorm_expander, and flax's BatchNorm with
 * use_running_average, are elementwise ops with broadcasts); Dropout in
 * training selects by its mask (jax's dropout: lax.select(keep, x / rate,
 * 0)), the mask being a value of its own. */
static bool elementwise_fwd(enum dm_op op, bool train)
{
    return elementwise(op) || (op == DM_OP_Dropout && train) ||
           (op == DM_OP_BatchNormalization && !train);
}

/* Producers whose value a reader's kernel computes: elementwise ones and
 * broadcasts; BatchNormalization in training too, its last stage being the
 * elementwise normalisation by statistics that reductions made first (flax's
 * BatchNorm: _compute_stats, then _normalize). */
static bool fusible_producer(enum dm_op op, bool train)
{
    return elementwise_fwd(op, train) || op == DM_OP_Expand || op == DM_OP_BatchNormalization;
}

/* Readers that take a fused producer: elementwise ops and reductions (not
 * BatchNormalization in training, whose statistics and normalisation read
 * its input twice). */
static bool fusible_consumer(enum dm_op op, bool train)
{
    return elementwise_fwd(op, train) || reduction(op);
}

enum kind {
    K_NONE,  /* never allocated */
    K_SETUP, /* made before the first step: kept as it is */
    K_ENTRY, /* an entry parameter made in the step (optimizer state): made before it */
    K_TEMP,  /* a value of the step: into the heap, unless fused */
    K_OUT,   /* inference: a value the caller keeps (live out) */
    K_LATER  /* made in a later step: the plan repeats the first */
};

static bool is_grad(const struct dm_buffer *b)
{
    return b->what && strcmp(b->what, "grad") == 0;
}

struct oev {
    int32_t step;
    int64_t seq;
    struct dm_event ev;
};

static int cmp_oev(const void *a, const void *b)
{
    const struct oev *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int32_t find(int32_t *red, int32_t s)
{
    int32_t r = s;
    while (red[r] != r)
        r = red[r];
    while (red[s] != r) {
        int32_t n = red[s];
        red[s] = r;
        s = n;
    }
    return r;
}

/* The working state of one plan (all arrays malloc'd, freed by plan_free). */
struct plan {
    const struct dm_graph *g;
    const struct dm_tinfo *t;
    const struct dm_schedule *in;
    bool train;
    int32_t w0, w1;                 /* the first step's window of input steps */
    int32_t *a_step, *f_step;       /* per buffer: its alloc and free step, or -1 */
    uint8_t *kind;                  /* per buffer: enum kind */
    bool *fused;                    /* per buffer: no buffer (fused into its reader) */
    int32_t *jfree;                 /* per buffer: the step its last reader runs */
    int32_t *fwd, *bwd;             /* per node: its forward and backward step, or -1 */
    int32_t *base, *cnt, *one;      /* per tensor: the tensor a view chain starts at; per
                                       base: its readers and the single one (or -1) */
    bool *is_out;                   /* per base: a graph output reads it */
    int32_t *grads_at;              /* per step: gradients made there */
    int32_t *red;                   /* per step: where the frees of a fused step go */
    int32_t *done;                  /* per tensor: the backward step its grad is whole at */
};

static void plan_free(struct plan *p)
{
    free(p->a_step);
    free(p->f_step);
    free(p->kind);
    free(p->fused);
    free(p->jfree);
    free(p->fwd);
    free(p->bwd);
    free(p->base);
    free(p->cnt);
    free(p->one);
    free(p->is_out);
    free(p->grads_at);
    free(p->red);
    free(p->done);
}

/* Readers of each tensor, counted at the start of its view chain. */
static void readers(struct plan *p, bool train)
{
    const struct dm_graph *g = p->g;
    for (int32_t x = 0; x < g->n_tensors; x++) {
        p->base[x] = x;
        p->cnt[x] = 0;
        p->one[x] = -1;
        p->is_out[x] = false;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) { /* nodes are in execution order */
        const struct dm_node *n = &g->nodes[i];
        unsigned f = dm_ops[n->op].flags;
        bool view = (f & DM_F_VIEW) || (!train && (f & DM_F_IDENTITY_INFER));
        if (view && n->n_in > 0 && n->in[0] >= 0 && n->n_out > 0 && n->out[0] >= 0) {
            p->base[n->out[0]] = p->base[n->in[0]];
            continue;
        }
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x < 0 || (k < 32 && ((dm_ops[n->op].meta_inputs >> k) & 1u)))
                continue;
            int32_t b = p->base[x];
            if (p->one[b] != i) /* one reader however many of its slots read it */
                p->cnt[b]++;
            p->one[b] = i;
        }
    }
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] >= 0)
            p->is_out[p->base[g->outputs[k]]] = true;
    for (int32_t x = 0; x < g->n_tensors; x++)
        if (p->cnt[x] != 1)
            p->one[x] = -1;
}

/* Rule 1, forward: buffer b's value fuses into its only reader. Returns
 * that reader's step, or -1. */
static int32_t fuses_forward(const struct plan *p, int32_t b)
{
    const struct dm_buffer *bf = &p->in->buf[b];
    int32_t x = bf->tensor, n = bf->node;
    if (bf->category != DNNMEM_CAT_ACTIVATION || bf->what || x < 0 || n < 0 ||
        p->base[x] != x || p->g->tensors[x].producer != n || p->fwd[n] != p->a_step[b] ||
        !fusible_producer(p->g->nodes[n].op, p->train) || p->is_out[x] || p->one[x] < 0)
        return -1;
    int32_t c = p->one[x];
    if (!fusible_consumer(p->g->nodes[c].op, p->train) || p->fwd[c] < 0 ||
        p->jfree[b] != p->fwd[c])
        return -1;
    return p->fwd[c];
}

/* Rule 1, backward: an activation's gradient fuses into the backward of the
 * op that made the activation. Returns that backward's step, or -1. */
static int32_t fuses_backward(const struct plan *p, int32_t b)
{
    const struct dm_buffer *bf = &p->in->buf[b];
    const struct dm_graph *g = p->g;
    int32_t x = bf->tensor, i = bf->node;
    if (bf->category != DNNMEM_CAT_TEMPORARY || !is_grad(bf) || x < 0 || i < 0 || !p->t ||
        p->bwd[i] != p->a_step[b] || !elementwise(g->nodes[i].op))
        return -1;
    const struct dm_node *n = &g->nodes[i];
    int32_t out0 = n->n_out > 0 ? n->out[0] : -1, pr = g->tensors[x].producer;
    if (out0 < 0 || p->t[x].numel != p->t[out0].numel || bf->bytes != p->t[x].bytes || pr < 0 ||
        p->base[x] != x || p->one[x] != i || p->is_out[x] || !elementwise(g->nodes[pr].op) ||
        p->bwd[pr] < 0 || p->jfree[b] != p->bwd[pr] || p->grads_at[p->bwd[pr]] != 1)
        return -1;
    return p->bwd[pr];
}

/* Rule 2: whether the op run at step s is elementwise on its operands. */
static bool shares_at(const struct plan *p, int32_t s)
{
    const struct dm_step *sp = &p->in->steps[s];
    if (sp->node < 0 || sp->node >= p->g->n_nodes)
        return false;
    enum dm_op op = p->g->nodes[sp->node].op;
    return (sp->phase == DM_PHASE_FORWARD && elementwise_fwd(op, p->train)) ||
           (sp->phase == DM_PHASE_BACKWARD && elementwise(op));
}

/* Rule 4: whether buffer b's value is returned by each call into a buffer
 * of its own: inference's outputs; in training, unless donated, the
 * parameters with a gradient and the optimizer state. */
static bool returned(const struct plan *p, const bool *param, const struct dm_xla_opts *o,
                     int32_t b)
{
    const struct dm_buffer *bf = &p->in->buf[b];
    uint8_t k = p->kind[b];
    if (!o->train)
        return k == K_OUT;
    if (o->donate || (k != K_SETUP && k != K_ENTRY))
        return false;
    return bf->category == DNNMEM_CAT_OPTIMIZER ||
           (bf->category == DNNMEM_CAT_WEIGHT && bf->tensor >= 0 && !bf->what &&
            param[bf->tensor]);
}

/* A live-out allocation during the plan: its size, the tick its value is
 * made at, and the groups of temporaries it holds before (a list through
 * next[]). */
struct host {
    uint64_t size;
    int64_t start;
    int64_t avail; /* values must start after this tick (a copied parameter: its copy's) */
    int32_t head;
};

/* The values of the plan past the input's buffers (rule 7's copies). */
struct values {
    int32_t nv;               /* the buffers, then the copies */
    int32_t n_copy;
    const int32_t *copy_buf;  /* per copy: its parameter's buffer */
    const int32_t *copy_done; /* per copy: the step its last reader runs */
    const uint64_t *vbytes;   /* per value: its bytes */
    const bool *copy_half;    /* per copy: a float32 conversion (rule 7b) */
};
struct cand {
    uint64_t size;
    int64_t start;
    int32_t id;
};

static int cmp_cand_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_cand_asc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Rule 6: before the heap simulator packs what is left, BufferAssigner
 * tries every temporary (largest first) in the allocations that already
 * exist, the smallest that fits first (buffer_assignment.cc,
 * AssignSingleHloBuffer: TryAssignToExistingAllocation before
 * DelayTemporaryBufferAssignment; "Reuses the smallest fitting allocation to
 * preserve larger allocations for future large buffers"): the live-out
 * allocations, each value at offset 0 if its live range interferes with
 * none already there (MaybeAssignBuffer, LiveRangeInterferes), the output's
 * own range running from the instruction that makes it to the end. So a
 * live-out buffer holds temporaries until its value is made: inference's
 * outputs (the logits before the last matmul), and without donation the new
 * parameters and optimizer state, made by each parameter's update (rule 3).
 * Donated ones alias their parameters, read up to the update that
 * overwrites them: no room (measured: jax-hlo.tar.gz, mlp-adam-nodonate's
 * temp is 6 MiB, mlp-adam's 112 MiB). A group of values sharing a buffer
 * (rule 2) is placed whole. On the CPU a donated parameter that rule 7
 * copied is free from its copy to its update, and holds temporaries then
 * (measured: mlp-b64-sgd-f32's fc3 weight copy and fc2's weight gradient
 * sit in fc2's parameter allocation). A float32 conversion (rule 7b) does
 * not free it: the update reads the half-precision parameter itself
 * (measured: cnn-b8-sgd-bf16's fc1.weight allocation holds only the
 * parameter and its update, subtract_convert_fusion.2, while conv4's, copied
 * by rule 7a, holds 10 temporaries). Sets hosted[] for the groups placed. */
static enum dnnmem_status host_in_outputs(const struct plan *p, const bool *param,
                                          const struct dm_xla_opts *o, const struct values *vl,
                                          const int32_t *grp, const int64_t *t0,
                                          const int64_t *t1, const int64_t *tick0,
                                          const int64_t *tick1, int64_t clock, bool *hosted,
                                          struct dm_xla_stats *st)
{
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf, nv = vl->nv, n_h = o->train && o->donate ? vl->n_copy : 0, n_c = 0;
    for (int32_t b = 0; b < nb; b++)
        if (returned(p, param, o, b) && (o->train || (p->a_step[b] >= p->w0 &&
                                                      p->a_step[b] < p->w1)))
            n_h++;
    if (n_h == 0)
        return DNNMEM_OK;
    struct cand *hc = malloc((size_t)n_h * sizeof *hc), *cc = malloc(((size_t)nv + 1) * sizeof *cc);
    struct host *h = malloc((size_t)n_h * sizeof *h);
    int64_t *gend = malloc(((size_t)nv + 1) * sizeof *gend);
    int32_t *next = malloc(((size_t)nv + 1) * sizeof *next);
    if (!hc || !cc || !h || !gend || !next) {
        free(hc), free(cc), free(h), free(gend), free(next);
        return DNNMEM_E_NOMEM;
    }
    n_h = 0;
    for (int32_t b = 0; b < nb; b++) {
        if (!returned(p, param, o, b))
            continue;
        int64_t start;
        if (!o->train) {
            if (p->a_step[b] < p->w0 || p->a_step[b] >= p->w1)
                continue;
            start = tick0[p->a_step[b]];
        } else {
            int32_t x = in->buf[b].tensor, d = x >= 0 ? p->done[x] : -1;
            start = d >= 0 ? tick1[d] : clock;
        }
        hc[n_h] = (struct cand){in->buf[b].bytes, start, n_h};
        h[n_h++] = (struct host){in->buf[b].bytes, start, -1, -1};
    }
    for (int32_t c = 0; o->train && o->donate && c < vl->n_copy; c++) { /* rule 7 */
        if (vl->copy_half[c])
            continue;
        int32_t b = vl->copy_buf[c], d = p->done[in->buf[b].tensor];
        int64_t start = d >= 0 ? tick1[d] : clock;
        hc[n_h] = (struct cand){in->buf[b].bytes, start, n_h};
        h[n_h++] = (struct host){in->buf[b].bytes, start, t0[nb + c], -1};
    }
    qsort(hc, (size_t)n_h, sizeof *hc, cmp_cand_asc);
    for (int32_t b = 0; b < nv; b++)
        gend[b] = -1;
    for (int32_t b = 0; b < nv; b++)
        if (grp[b] >= 0 && t1[b] > gend[grp[b]])
            gend[grp[b]] = t1[b];
    for (int32_t b = 0; b < nv; b++)
        if (grp[b] == b)
            cc[n_c++] = (struct cand){vl->vbytes[b], t0[b], b};
    qsort(cc, (size_t)n_c, sizeof *cc, cmp_cand_desc);
    for (int32_t c = 0; c < n_c; c++) {
        int32_t r = cc[c].id;
        int64_t s = t0[r], e = gend[r];
        for (int32_t k = 0; k < n_h; k++) {
            struct host *a = &h[hc[k].id];
            if (a->size < cc[c].size || e >= a->start || s <= a->avail)
                continue;
            bool clash = false;
            for (int32_t q = a->head; q >= 0 && !clash; q = next[q])
                clash = !(s > gend[q] || t0[q] > e);
            if (clash)
                continue;
            next[r] = a->head;
            a->head = r;
            hosted[r] = true;
            st->in_outputs++;
            break;
        }
    }
    free(hc), free(cc), free(h), free(gend), free(next);
    return DNNMEM_OK;
}

static bool alloc_arrays(struct plan *p, size_t nb, size_t ns, size_t nn, size_t nt)
{
    p->a_step = malloc((nb + 1) * sizeof *p->a_step);
    p->f_step = malloc((nb + 1) * sizeof *p->f_step);
    p->kind = calloc(nb + 1, sizeof *p->kind);
    p->fused = calloc(nb + 1, sizeof *p->fused);
    p->jfree = malloc((nb + 1) * sizeof *p->jfree);
    p->fwd = malloc((nn + 1) * sizeof *p->fwd);
    p->bwd = malloc((nn + 1) * sizeof *p->bwd);
    p->base = malloc((nt + 1) * sizeof *p->base);
    p->cnt = malloc((nt + 1) * sizeof *p->cnt);
    p->one = malloc((nt + 1) * sizeof *p->one);
    p->is_out = malloc((nt + 1) * sizeof *p->is_out);
    p->grads_at = calloc(ns + 1, sizeof *p->grads_at);
    p->red = malloc((ns + 1) * sizeof *p->red);
    p->done = malloc((nt + 1) * sizeof *p->done);
    return p->a_step && p->f_step && p->kind && p->fused && p->jfree && p->fwd && p->bwd &&
           p->base && p->cnt && p->one && p->is_out && p->grads_at && p->red && p->done;
}

/* The state of one dm_xla_plan call past the plan: the heap simulation's
 * time-ordered arrays and the output schedule's per-iteration arrays (all
 * malloc'd, freed by xla_free). */
struct xla {
    struct plan p;
    const struct dm_xla_opts *o;
    struct dm_schedule *out;
    struct dm_xla_stats *st;
    struct dnnmem_error *err;
    const char *path;
    int32_t *fr_start, *fr_list, *grp; /* per step: the values freed there (CSR); groups */
    int64_t *t0, *t1;                  /* per buffer: its ticks defined and freed */
    int32_t *time_step;                /* per tick: its step */
    int64_t *tick0, *tick1;            /* per step: its first tick and the one past it */
    bool *ended, *param, *hosted;
    int32_t n_heap;
    int32_t nv;                        /* values: the buffers, then the copies (rule 7) */
    int32_t n_copy, *copy_buf, *copy_done; /* per copy: its parameter's buffer, last reader */
    bool *copy_half;                   /* per copy: a float32 conversion (rule 7b) */
    bool *copy_late;                   /* per copy: read by an update run late (rule 7a) */
    int32_t n_lay;                     /* rule 8: the CPU's layout values, after the copies */
    uint64_t *lay_bytes;
    int32_t *lay_from, *lay_to;        /* per layout value: its first and last step (-1: the
                                          step's start) */
    uint8_t *lay_at;                   /* per layout value: enum lay_at */
    int32_t *lay_into;                 /* per buffer: the layout value it takes over, or -1 */
    bool *no_share;                    /* per buffer: no value takes its buffer (rule 8) */
    bool *keep_half;                   /* per buffer: half precision on the CPU, not float32
                                          (rule 8h; rule 7c does not apply) */
    uint64_t *vbytes;                  /* per value: its bytes */
    int64_t clock;
    int32_t n_it;
    int32_t *call_step, *win_first, *win_last, *map, *prev, *gen;
    int32_t n_gen;
    struct oev *oe;
    struct dm_buffer *ob;
};

static void xla_free(struct xla *x)
{
    plan_free(&x->p);
    free(x->fr_start);
    free(x->fr_list);
    free(x->grp);
    free(x->t0);
    free(x->t1);
    free(x->time_step);
    free(x->call_step);
    free(x->win_first);
    free(x->win_last);
    free(x->map);
    free(x->prev);
    free(x->gen);
    free(x->ended);
    free(x->param);
    free(x->hosted);
    free(x->copy_buf);
    free(x->copy_done);
    free(x->copy_half);
    free(x->copy_late);
    free(x->lay_bytes);
    free(x->lay_from);
    free(x->lay_to);
    free(x->lay_at);
    free(x->lay_into);
    free(x->no_share);
    free(x->keep_half);
    free(x->vbytes);
    free(x->tick0);
    free(x->tick1);
    free(x->oe);
    free(x->ob);
}

static enum dnnmem_status xla_oom(const struct xla *x)
{
    return dm_fail(x->err, DNNMEM_E_NOMEM, "%s: out of memory planning XLA's buffers", x->path);
}

static enum dnnmem_status xla_overflow(const struct xla *x)
{
    return dm_fail(x->err, DNNMEM_E_SHAPE, "%s: the step's byte counts overflow", x->path);
}

/* The window: the first step's input steps (after the setup); each buffer's
 * alloc and free step, each node's forward and backward step in it. */
static void find_window(struct plan *p)
{
    const struct dm_graph *g = p->g;
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf, ns = in->n_steps;
    int32_t w0 = 0, w1;
    while (w0 < ns && in->steps[w0].phase == DM_PHASE_SETUP)
        w0++;
    for (w1 = w0; w1 < ns && in->steps[w1].iteration == in->steps[w0].iteration &&
                  in->steps[w1].phase != DM_PHASE_SETUP;
         w1++)
        ;
    p->w0 = w0;
    p->w1 = w1;
    for (int32_t b = 0; b < nb; b++)
        p->a_step[b] = p->f_step[b] = -1;
    for (size_t e = 0; e < in->n_ev; e++) {
        const struct dm_event *ev = &in->ev[e];
        if (ev->kind == DM_EV_ALLOC && p->a_step[ev->buf] < 0)
            p->a_step[ev->buf] = ev->step;
        else if (ev->kind == DM_EV_FREE && p->f_step[ev->buf] < 0)
            p->f_step[ev->buf] = ev->step;
    }
    for (int32_t i = 0; i < g->n_nodes; i++)
        p->fwd[i] = p->bwd[i] = -1;
    for (int32_t k = w0; k < w1; k++) {
        int32_t n = in->steps[k].node;
        if (n < 0 || n >= g->n_nodes)
            continue;
        if (in->steps[k].phase == DM_PHASE_FORWARD && p->fwd[n] < 0)
            p->fwd[n] = k;
        else if (in->steps[k].phase == DM_PHASE_BACKWARD && p->bwd[n] < 0)
            p->bwd[n] = k;
    }
}

/* The step at which each parameter's gradient is whole: the last backward
 * step of a node reading it (rule 3). */
static void grads_whole(struct plan *p)
{
    const struct dm_graph *g = p->g;
    for (int32_t x = 0; x < g->n_tensors; x++)
        p->done[x] = -1;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int32_t x = g->nodes[i].in[k];
            if (x >= 0 && p->bwd[i] > p->done[x])
                p->done[x] = p->bwd[i];
        }
}

/* Each buffer's kind, and for the step's temporaries the step they die at. */
static void classify(struct plan *p, const struct dm_xla_opts *o, struct dm_xla_stats *st)
{
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf, w0 = p->w0, w1 = p->w1;
    for (int32_t b = 0; b < nb; b++) {
        const struct dm_buffer *bf = &in->buf[b];
        int32_t a = p->a_step[b];
        uint8_t c = bf->category;
        p->jfree[b] = -1;
        if (a < 0)
            p->kind[b] = K_NONE;
        else if (a < w0)
            p->kind[b] = K_SETUP;
        else if (a >= w1)
            p->kind[b] = K_LATER;
        else if (c == DNNMEM_CAT_WEIGHT || c == DNNMEM_CAT_INPUT || c == DNNMEM_CAT_OPTIMIZER ||
                 c == DNNMEM_CAT_KV_CACHE)
            p->kind[b] = K_ENTRY;
        else if (!o->train && (p->f_step[b] < a || p->f_step[b] >= w1))
            p->kind[b] = K_OUT;
        else
            p->kind[b] = K_TEMP;
        if (p->kind[b] == K_TEMP) {
            /* a value nothing frees in the step is a parameter's
             * gradient: its update runs once it is whole (rule 3), or, with
             * no backward step reading the parameter, at the step's end */
            p->jfree[b] = p->f_step[b] >= a && p->f_step[b] < w1 ? p->f_step[b] : w1 - 1;
            if (c == DNNMEM_CAT_GRADIENT && !(p->f_step[b] >= a && p->f_step[b] < w1) &&
                bf->tensor >= 0 && p->done[bf->tensor] >= 0)
                p->jfree[b] = p->done[bf->tensor] > a ? p->done[bf->tensor] : a;
            st->values++;
            if ((c == DNNMEM_CAT_TEMPORARY || c == DNNMEM_CAT_GRADIENT) && is_grad(bf))
                p->grads_at[a]++;
        }
    }
}

/* Rule 1: fusion, in allocation order (buffers are numbered in it). */
static void fuse(struct plan *p, struct dm_xla_stats *st)
{
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf, ns = in->n_steps;
    for (int32_t k = 0; k < ns; k++)
        p->red[k] = k;
    for (int32_t b = 0; b < nb; b++) {
        if (p->kind[b] != K_TEMP)
            continue;
        const struct dm_buffer *bf = &in->buf[b];
        if (in->steps[p->a_step[b]].phase == DM_PHASE_OPTIMIZER &&
            bf->category == DNNMEM_CAT_TEMPORARY) {
            p->fused[b] = true; /* the update's elementwise temporaries */
            st->fused_update++;
            continue;
        }
        int32_t to = fuses_forward(p, b), from = p->a_step[b];
        bool bw = false;
        if (to < 0) {
            to = fuses_backward(p, b);
            bw = to >= 0;
        }
        if (to < 0)
            continue;
        p->fused[b] = true;
        if (bw)
            st->fused_backward++;
        else
            st->fused_forward++;
        /* its producer's reads now happen in the reader's kernel */
        int32_t rf = find(p->red, from), rt = find(p->red, to);
        if (rf != rt && rf < rt)
            p->red[rf] = rt;
    }
}

/* Ops whose backward reads a parameter operand to make another operand's
 * gradient (dX = dY W^T; a convolution's input gradient; dX = dY * g). */
static bool grad_reads_param(enum dm_op op)
{
    return op == DM_OP_MatMul || op == DM_OP_Gemm || op == DM_OP_Conv ||
           op == DM_OP_ConvTranspose || op == DM_OP_Mul || op == DM_OP_Div;
}

/* The parameters with a gradient; rule 7, on the CPU, the copies of
 * parameters the step makes at its start, each live to its last reader:
 *  (a) with donation, the donated parameters a backward op reads to make
 *      an activation's gradient. Each aliases its output, the updated
 *      parameter; copy insertion adds a copy wherever the parameter's value
 *      has a reader it cannot order before the update that overwrites it
 *      (copy_insertion.cc, AddCopiesForAliasedInputOutputs, then
 *      RemoveUnnecessaryCopies), and the input-gradient matmul is no
 *      ancestor of the update, which reads the weight gradient only. The
 *      CPU compiler keeps these copies: measured in every donated training
 *      step of jax 0.10.2's CPU dumps (tests/validation/jax-cpu.jsonl:
 *      copy(fc2.weight), copy(fc3.weight), copy(fc4.weight) first in the
 *      entry computation, not fc1's, whose input gradient is not taken);
 *      the GPU's dumps have none (tools/gpu/results/jax-hlo.tar.gz);
 *  (b) bfloat16 and float16 weights of matmuls and convolutions: the CPU
 *      backend has no half-precision dot or convolution kernel, so the
 *      operands are converted to float32 first (cpu_compiler.cc's float
 *      normalisation of dots and convolutions; measured: the bf16 MLP's
 *      wrapped_convert.1 .. .4, f32 copies of every weight, first in the
 *      entry computation, its temp 160.9 MiB at batch 64 for 79.9 MiB of
 *      bf16 weights): twice the weight's bytes. The converted copy, not the
 *      weight, is what the backward and the update then read, so (a) adds
 *      none for them.
 *  (c) the step's own half-precision values are float32 on the CPU: each
 *      dot and convolution computes in float32 and the conversions back to
 *      bfloat16 between them cancel out (convert pairs removed, as
 *      simplify_fp_conversions.cc does), so activations, their gradients
 *      and the weight gradients take twice their bytes (measured: the bf16
 *      MLP's dot outputs, ReLU outputs and weight gradients are f32 values
 *      in its temp; the update converts back into the bf16 allocations).
 * A copy lives to its last reader: the last backward step making an input
 * gradient from it, else its last forward reader (fc1's f32 copy in the
 * bf16 MLP, whose backward makes no input gradient): in that backward step, up to the input gradient
 * it makes, before the weight gradient (XLA runs a layer's input-gradient
 * matmul, the copy's reader, first; measured: the bf16 MLP's f32 fc2 weight
 * gradient takes the offset of fc2's f32 weight copy, the f32 MLP's fc1
 * weight gradient that of fc2's copy). With optimizer state (momentum,
 * Adam) the update is two fusions, the state's then the parameter's, and
 * the parameter's, which reads the copy, runs only after the next layer's
 * weight-gradient matmul: such a copy lives until that next weight
 * gradient is made (measured: in mlp-b64-sgd-momentum-f32 the fc3 update
 * reading copy(fc3.weight) follows fc2's weight-gradient dot, and fc2's
 * follows fc1's). With donation the parameter's own
 * allocation is free from its copy to its update (host_in_outputs). */
static void copy_params(struct xla *x, const int32_t *pbuf, const int32_t *act_grads,
                        const int32_t *last, bool *copied)
{
    const struct plan *p = &x->p;
    bool stateful = false; /* the optimizer keeps state (momentum, Adam) */
    for (int32_t b = 0; b < p->in->n_buf && !stateful; b++)
        stateful = p->in->buf[b].category == DNNMEM_CAT_OPTIMIZER;
    const struct dm_graph *g = p->g;
    const struct dm_xla_opts *o = x->o;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        if (!grad_reads_param(n->op))
            continue;
        bool mm = n->op != DM_OP_Mul && n->op != DM_OP_Div;
        /* a matmul's or convolution's bias (slot 2) is not read by its backward */
        int n_read = mm ? 2 : n->n_in;
        for (int k = 0; k < n->n_in && k < n_read; k++) {
            int32_t t = n->in[k] >= 0 ? p->base[n->in[k]] : -1; /* through views */
            if (t < 0 || copied[t] || pbuf[t] < 0 || last[t] < 0)
                continue;
            uint8_t dt = p->in->buf[pbuf[t]].dtype;
            /* a convolution's weight: its float32 HWIO transposes are the
             * conversions (rule 8h), no copy of its own */
            bool half = mm && n->op != DM_OP_Conv && (dt == DM_BFLOAT16 || dt == DM_FLOAT16);
            bool donated = o->train && o->donate && x->param[t] && p->bwd[i] >= 0 &&
                           act_grads[p->bwd[i]] > 0;
            if (!half && !donated)
                continue;
            copied[t] = true;
            x->copy_buf[x->n_copy] = pbuf[t];
            x->copy_half[x->n_copy] = half;
            x->copy_late[x->n_copy] = !half && stateful;
            x->copy_done[x->n_copy++] = last[t];
        }
    }
}

/* Rule 8, XLA's CPU convolutions and max pooling (measured: jax 0.10.2's
 * CPU buffer-assignment dumps of tests/validation/jax-cpu.jsonl's CNN,
 * cnn-b8-infer-f32 and cnn-b8-sgd-f32; the layout assignment of the CPU
 * compiler runs convolutions NHWC / HWIO, transpose_copy_fusion around
 * them). Values beside the step's buffers:
 *  - each convolution weight's HWIO transpose, made at the step's start
 *    and dead after the forward convolution (transpose_copy_fusion.9 ..
 *    first in the entry computation); in training, where the convolution
 *    makes an input gradient, a second transpose for that gradient's
 *    convolution, from the start to its backward (transpose_copy_fusion.12,
 *    live 51-116 of 149);
 *  - in training, a convolution reading an entry parameter (the batch)
 *    keeps its [C, H, W, N] transpose for the weight gradient from the
 *    step's start (transpose_copy_fusion.7 of x, 38-146); a temporary
 *    input's transpose replaces the input itself (the same bytes: the
 *    input is kept instead);
 *  - the convolution's output is NHWC before its bias: the bias add and the
 *    activation after it fuse into the transpose back to NCHW, a value of
 *    its own, so nothing takes the output's buffer (no_share);
 *  - max pooling in training: the forward's variadic reduce-window (its
 *    argmax, kept: save.c) reads rank s32 iotas of the input's shape, one
 *    value each, made before the copies at the step's start (wrapped_iota
 *    .. .11 at 18..29 of 149, live to their pool), and writes rank s32
 *    index outputs and its own max, all dead once their concatenation is
 *    made (wrapped_reduce-window{0..4}); the backward scatters into zeros of
 *    the input's shape made at the step's start (wrapped_broadcast.2,
 *    44-121), whose buffer the input gradient then takes
 *    (wrapped_scatter.1 at the same offset: lay_into).
 * Rule 8h, half precision (measured: cnn-b8-infer-bf16 and cnn-b8-sgd-bf16,
 * the same dumps in bfloat16): the CPU's convolutions and pooling compute
 * in float32, so the layout values above made from a half-precision value
 * are float32, twice its bytes (the weights' HWIO transposes, which are the
 * weights' conversions too: transpose_copy_fusion.6 f32[3,3,64,128], and no
 * rule 7b copy; the batch's transpose, transpose_copy_fusion.7 f32; the
 * pool's max, wrapped_reduce-window{0} f32; the zeros, wrapped_broadcast
 * f32[8,64,64,64]). Where the convert back to half precision does not
 * cancel, the value stays half precision (half_conv_values):
 *  - in training, the convolution's bias add, kept for the ReLU's
 *    backward, is bf16 NHWC (add_convert_fusion.6, 54-155), beside the
 *    convolution's float32 NHWC output, dead after it (ynn_fusion.17,
 *    52-54);
 *  - a ReLU after a convolution, read by a max pooling: at inference the
 *    transpose back to NCHW is bf16 (transpose_copy_fusion.8, bias, ReLU
 *    and convert fused); in training the ReLU is a bf16 NHWC value
 *    (maximum_convert_fusion.2, 56-59) copied to a float32 NCHW value for
 *    the argmax's reduce-window (copy_convert_fusion.2, 58-61, the ReLU's
 *    own buffer) and a bf16 NCHW one for the pool (transpose_copy_fusion
 *    .22, 59-62). */

/* Where in its last step a layout value dies: LAY_STEP, once the step has
 * run; LAY_BEFORE, before the step's own values are made (the pooling's
 * iotas, index outputs and max, read by the variadic reduce-window that
 * runs before the max the step returns: measured, wrapped_reduce-window at
 * 56, ynn_fusion.21 at 57). */
enum lay_at { LAY_STEP, LAY_BEFORE };

/* Its first step: LAY_START, the step's start after rule 7's copies (the
 * weights' transposes, some reading the copies); LAY_FIRST, before them
 * (the iotas, which read nothing; measured: cnn-b8-sgd-f32's wrapped_iota
 * .. .11 at 18-29, the copies at 31-36, so that the donated parameters'
 * allocations, free once copied, hold none of them); else a step. */
enum { LAY_FIRST = -2, LAY_START = -1 };

static void lay_add(struct xla *x, uint64_t bytes, int32_t from, int32_t to, enum lay_at at)
{
    if (bytes == 0 || to < 0)
        return;
    x->lay_bytes[x->n_lay] = bytes;
    x->lay_from[x->n_lay] = from;
    x->lay_at[x->n_lay] = (uint8_t)at;
    x->lay_to[x->n_lay++] = to;
}

static bool lay_s32(const struct dm_tinfo *t, int64_t per, uint64_t *out)
{
    int64_t e;
    return dm_mul_ok(t->numel, per, &e) && dm_dtype_bytes(DM_INT32, e, out);
}

static bool is_half(enum dm_dtype dt) { return dt == DM_BFLOAT16 || dt == DM_FLOAT16; }

/* Rule 8h: a value's bytes as the CPU's float32 (a half-precision one's twice). */
static bool f32_bytes(const struct dm_tinfo *t, uint64_t *out)
{
    return dm_umul_ok(t->bytes, is_half(t->dtype) ? 2 : 1, out);
}

/* The temp buffer holding node i's output tensor t itself, or -1. */
static int32_t out_buf(const struct xla *x, int32_t i, int32_t t)
{
    const struct dm_schedule *in = x->p.in;
    for (int32_t b = 0; b < in->n_buf; b++)
        if (x->p.kind[b] == K_TEMP && in->buf[b].tensor == t && in->buf[b].node == i &&
            !in->buf[b].what)
            return b;
    return -1;
}

/* Rule 8h: the half-precision values of convolution i's output (conv) or,
 * for a max pooling i, of the ReLU after a convolution it reads. */
static enum dnnmem_status half_conv_values(struct xla *x, int32_t i, bool bwd)
{
    const struct plan *p = &x->p;
    const struct dm_graph *g = p->g;
    const struct dm_node *n = &g->nodes[i];
    const struct dm_tinfo *y = &p->t[n->out[0]];
    if (n->op == DM_OP_Conv) {
        int32_t b = out_buf(x, i, n->out[0]);
        uint64_t f;
        if (!bwd || !is_half(y->dtype) || b < 0)
            return DNNMEM_OK;
        if (!f32_bytes(y, &f))
            return xla_overflow(x);
        x->keep_half[b] = true;                       /* the kept bias add */
        lay_add(x, f, p->fwd[i], p->fwd[i], LAY_STEP); /* the float32 NHWC output */
        return DNNMEM_OK;
    }
    int32_t r = g->tensors[n->in[0]].producer;
    if (r < 0 || !is_half(p->t[n->in[0]].dtype) || p->fwd[r] < 0)
        return DNNMEM_OK;
    const struct dm_node *rn = &g->nodes[r];
    int32_t c = rn->op == DM_OP_Relu && rn->n_in >= 1 && rn->in[0] >= 0
                    ? g->tensors[rn->in[0]].producer
                    : -1;
    int32_t b = out_buf(x, r, n->in[0]);
    if (c < 0 || g->nodes[c].op != DM_OP_Conv || b < 0)
        return DNNMEM_OK;
    if (!bwd) {
        x->keep_half[b] = true; /* the bf16 transpose back */
        return DNNMEM_OK;
    }
    uint64_t h = p->t[n->in[0]].bytes;
    lay_add(x, h, p->fwd[r], p->fwd[r], LAY_STEP); /* the ReLU, bf16 NHWC */
    lay_add(x, h, p->fwd[r], p->fwd[i], LAY_STEP); /* the pool's bf16 NCHW copy */
    return DNNMEM_OK;
}

/* Rule 8n, at inference: a ReLU between two convolutions stays NHWC
 * (measured: cnn5-b16-infer-f32 and -bf16, jax 0.10.2: conv1's output
 * ynn_fusion.8 and the bias add and ReLU broadcast_maximum_fusion.2, or
 * convert_convert_fusion.2 in bf16, at one offset, read by conv2's
 * ynn_fusion.7 with no transpose between). Where convolution c's output is
 * read by one ReLU alone, and that ReLU's only by convolutions' inputs, the
 * ReLU takes c's buffer and its readers make no NHWC copy of their input
 * (workspace.c's "input (NHWC, XLA CPU)": fused away). In training the ReLU
 * is also read in NCHW by the weight gradient's transpose: not so
 * (cnn5-b16-sgd-bf16's maximum_convert_fusion.3 and wrapped_convert). */
static enum dnnmem_status nhwc_relus(struct xla *x)
{
    struct plan *p = &x->p;
    const struct dm_graph *g = p->g;
    const struct dm_schedule *in = p->in;
    if (p->train)
        return DNNMEM_OK;
    int32_t *rd = calloc(2 * ((size_t)g->n_tensors + 1), sizeof *rd); /* readers, convs' */
    if (!rd)
        return xla_oom(x);
    int32_t *conv_rd = rd + g->n_tensors + 1;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) {
                rd[g->nodes[i].in[k]]++;
                conv_rd[g->nodes[i].in[k]] += g->nodes[i].op == DM_OP_Conv && k == 0;
            }
    for (int32_t r = 0; r < g->n_nodes; r++) {
        const struct dm_node *n = &g->nodes[r];
        if (n->op != DM_OP_Relu || n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 ||
            n->out[0] < 0)
            continue;
        int32_t a = n->in[0], y = n->out[0], c = g->tensors[a].producer;
        if (c < 0 || g->nodes[c].op != DM_OP_Conv || rd[a] != 1 || g->tensors[a].is_output ||
            g->tensors[y].is_output || rd[y] < 1 || conv_rd[y] != rd[y])
            continue;
        int32_t cb = out_buf(x, c, a);
        if (cb >= 0)
            x->no_share[cb] = false;
        for (int32_t b = 0; b < in->n_buf; b++) {
            const struct dm_buffer *bf = &in->buf[b];
            if (p->kind[b] == K_TEMP && bf->what && bf->node >= 0 &&
                g->nodes[bf->node].n_in >= 1 && g->nodes[bf->node].in[0] == y &&
                !strcmp(bf->what, "input (NHWC, XLA CPU)"))
                p->fused[b] = true;
        }
    }
    free(rd);
    return DNNMEM_OK;
}

static enum dnnmem_status cpu_layout_values(struct xla *x, const int32_t *act_grads,
                                            int32_t *pool_zeros, int32_t *pool_of);

/* Rule 7h, half precision in training on the CPU (measured: tra-b8-sgd-bf16's
 * dump, jax 0.10.2). Rule 7c's float32 holds where a matmul reads the value:
 * the conversion for the dot fuses into its producer and the pair
 * f32 -> bf16 -> f32 cancels (the GELU output convert_bitcast_fusion.25
 * f32[1024,2048], the softmax output convert_convert_fusion.36 f32, the
 * layer norm's output convert_bitcast_fusion.26 f32). A forward value no
 * matmul reads is an elementwise fusion's output, which ends in the convert
 * back to the model's dtype: it stays half precision (the bias add read by
 * the GELU add_convert_fusion.48, the GELU's residuals multiply_convert_,
 * negate_convert_ and select_convert_fusion bf16[8,128,2048], the scores'
 * exp wrapped_convert.2 bf16[8,8,128,128], the layer norm's
 * subtract_convert_fusion bf16). A convolution or a pooling reads float32
 * too (rule 8h). A bias add read by a ReLU stays float32: XLA keeps the
 * dot's float32 output and recomputes the add in the ReLU's backward
 * (save.c; the bf16 MLP's steps, exact under rule 7c). Gradients keep rule
 * 7c. dot_read: per tensor, zeroed, its readers' HALF_* flags (at its view
 * chain's base). */
enum { HALF_F32_READER = 1, HALF_RELU_READER = 2 };

/* Whether node i adds to a matmul's output (a bias add). */
static bool bias_add(const struct plan *p, int32_t i)
{
    const struct dm_node *n = &p->g->nodes[i];
    for (int k = 0; n->op == DM_OP_Add && k < n->n_in; k++) {
        int32_t r = n->in[k] >= 0 ? p->g->tensors[n->in[k]].producer : -1;
        if (r >= 0 && (p->g->nodes[r].op == DM_OP_MatMul || p->g->nodes[r].op == DM_OP_Gemm))
            return true;
    }
    return false;
}

static void half_forward_values(struct xla *x, uint8_t *dot_read)
{
    const struct plan *p = &x->p;
    const struct dm_graph *g = p->g;
    const struct dm_schedule *in = p->in;
    if (!p->train)
        return;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        uint8_t f = n->op == DM_OP_MatMul || n->op == DM_OP_Gemm || n->op == DM_OP_Conv ||
                            n->op == DM_OP_MaxPool
                        ? HALF_F32_READER
                    : n->op == DM_OP_Relu ? HALF_RELU_READER
                                          : 0;
        for (int k = 0; f && k < n->n_in; k++)
            if (n->in[k] >= 0)
                dot_read[p->base[n->in[k]]] |= f;
    }
    for (int32_t b = 0; b < in->n_buf; b++) {
        const struct dm_buffer *bf = &in->buf[b];
        int32_t k = p->a_step[b];
        if (p->kind[b] != K_TEMP || is_grad(bf) || bf->node < 0 || k < 0 ||
            in->steps[k].phase != DM_PHASE_FORWARD || !is_half(bf->dtype) ||
            g->nodes[bf->node].op == DM_OP_Conv || g->nodes[bf->node].op == DM_OP_MaxPool ||
            g->nodes[bf->node].op == DM_OP_MatMul || g->nodes[bf->node].op == DM_OP_Gemm)
            continue; /* rule 8h's, and a dot's own float32 output */
        if (bf->what || bf->tensor < 0) {
            x->keep_half[b] = true;
            continue;
        }
        uint8_t f = dot_read[p->base[bf->tensor]];
        if (!(f & HALF_F32_READER) && !((f & HALF_RELU_READER) && bias_add(p, bf->node)))
            x->keep_half[b] = true;
    }
}


static enum dnnmem_status cpu_layouts(struct xla *x, const int32_t *act_grads)
{
    const struct plan *p = &x->p;
    const struct dm_graph *g = p->g;
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf;
    size_t cap = (size_t)g->n_nodes * 20 + 1; /* a pool's 2 x 8 + 2 + 2, a conv's 4 */
    x->lay_bytes = malloc(cap * sizeof *x->lay_bytes);
    x->lay_from = malloc(cap * sizeof *x->lay_from);
    x->lay_to = malloc(cap * sizeof *x->lay_to);
    x->lay_at = malloc(cap * sizeof *x->lay_at);
    x->lay_into = malloc(((size_t)nb + 1) * sizeof *x->lay_into);
    x->no_share = calloc((size_t)nb + 1, sizeof *x->no_share);
    x->keep_half = calloc((size_t)nb + 1, sizeof *x->keep_half);
    if (!x->lay_bytes || !x->lay_from || !x->lay_to || !x->lay_at || !x->lay_into ||
        !x->no_share || !x->keep_half)
        return xla_oom(x);
    x->n_lay = 0;
    for (int32_t b = 0; b < nb; b++)
        x->lay_into[b] = -1;
    if (!x->o->cpu || !p->t)
        return DNNMEM_OK;
    /* per node: its scatter zeros' layout value (a pool, a gather: rule 8e),
     * or -1; per tensor: the pool or gather whose input it is, or -1 */
    int32_t *pool_zeros = malloc(((size_t)g->n_nodes + 1) * sizeof *pool_zeros);
    int32_t *pool_of = malloc(((size_t)g->n_tensors + 1) * sizeof *pool_of);
    if (!pool_zeros || !pool_of) {
        free(pool_zeros), free(pool_of);
        return xla_oom(x);
    }
    for (int32_t i = 0; i < g->n_nodes; i++)
        pool_zeros[i] = -1;
    for (int32_t t = 0; t < g->n_tensors; t++)
        pool_of[t] = -1;
    enum dnnmem_status st = cpu_layout_values(x, act_grads, pool_zeros, pool_of);
    free(pool_zeros), free(pool_of);
    uint8_t *dot_read = st == DNNMEM_OK ? calloc((size_t)g->n_tensors + 1, sizeof *dot_read) : NULL;
    if (st == DNNMEM_OK && !dot_read)
        return xla_oom(x);
    if (dot_read)
        half_forward_values(x, dot_read); /* rule 7h */
    free(dot_read);
    return st;
}

/* Rule 8e, an embedding's gradient on the CPU (measured: jax 0.10.2's
 * dumps). JAX's transpose of a gather (jnp.take of a table) is a scatter-add
 * into zeros of the table, and of a static slice (P[:S], exported as a
 * Gather of computed indices) a pad of zeros: XLA's memory scheduler makes
 * the zeros, which read nothing, at the step's start after rule 7's copies
 * (tra-b2-sgd-f32: wrapped_broadcast.4 f32[8192,512], the token table's,
 * live 115-585 of 590, the copies at 75-107; wrapped_broadcast.3
 * f32[512,512], the position table's, 112-583), float32 in half precision
 * too (tra-b8-sgd-bf16: wrapped_broadcast.3 f32[8192,512], 111-722), and the
 * gradient takes their buffer to the update. Where the update adds the
 * gradient itself to an array (SGD with momentum: t = g + momentum * t), a
 * scatter's zeros are not made: the scatter-add writes into that sum
 * (tra-b2-sgd-momentum-f32: wrapped_scatter.1 in the token table's
 * momentum allocation, after broadcast_multiply_fusion, no f32[8192,512]
 * zeros); a pad's are (wrapped_broadcast.3, 181-716), and so are a half
 * precision table's, whose float32 scatter the bf16 sum cannot take
 * (tra-b2-sgd-momentum-bf16: wrapped_broadcast.2 f32[8192,512], 178-871,
 * and wrapped_scatter.1 at its offset). A scatter is a gather whose
 * indices are an entry parameter (the batch's ids). */
static enum dnnmem_status gather_grad_zeros(struct xla *x, int32_t i, int32_t *pool_zeros,
                                            int32_t *pool_of)
{
    const struct plan *p = &x->p;
    const struct dm_graph *g = p->g;
    const struct dm_schedule *in = p->in;
    const struct dm_node *n = &g->nodes[i];
    int32_t w = n->in[0];
    bool fold = g->tensors[n->in[1]].producer < 0 && !is_half(p->t[w].dtype);
    for (int32_t b = 0; fold && b < in->n_buf; b++)
        if (in->buf[b].tensor == w && in->buf[b].category == DNNMEM_CAT_OPTIMIZER &&
            in->buf[b].what && !strcmp(in->buf[b].what, "momentum_buffer"))
            return DNNMEM_OK; /* the scatter-add into the momentum's sum */
    uint64_t zb;
    if (!f32_bytes(&p->t[w], &zb))
        return xla_overflow(x);
    pool_of[w] = i;
    pool_zeros[i] = x->n_lay;
    lay_add(x, zb, LAY_START, p->bwd[i], LAY_STEP);
    return DNNMEM_OK;
}

/* Rule 8s, softmax in training on the CPU (measured: tra-b8-sgd-f32's dump,
 * jax 0.10.2). The CPU runs the scores' matmul with the scaling, the max and
 * the exp as one XNNPACK fusion (ynn_fusion.154 = exp(dot(q, k) * c - max),
 * 167-477 of 590), whose operands are arrays: the normalisation's
 * reciprocal of the sum is a broadcast to the scores' shape of its own
 * (wrapped_broadcast.2, 170-477), kept to the backward's fusion beside the
 * exp and the output (broadcast_multiply_fusion.15, 171-478): a third
 * input-sized residual per softmax (dnnmem keeps the input and the output).
 * Where the scores are a matmul's output scaled by a scalar constant
 * (s / sqrt(dh)), the constant is broadcast to their shape once for every
 * layer (wrapped_broadcast of constant.18 = 0.125, one value, CSE) from
 * before the first attention (118, its exp at 128) to the last attention's
 * backward (548). Returns the scale value's layout index (updated or new). */
static int32_t softmax_values(struct xla *x, int32_t i, int32_t scale, bool *ok)
{
    const struct plan *p = &x->p;
    const struct dm_graph *g = p->g;
    const struct dm_node *n = &g->nodes[i];
    uint64_t f;
    if (is_half(p->t[n->in[0]].dtype))
        return scale; /* no broadcast made (tra-b8-sgd-bf16: the exp bf16, rule 7h) */
    if (!f32_bytes(&p->t[n->in[0]], &f)) {
        *ok = false;
        return scale;
    }
    lay_add(x, f, p->fwd[i], p->bwd[i], LAY_STEP); /* the broadcast reciprocal */
    int32_t d = g->tensors[n->in[0]].producer;
    const struct dm_node *dn = d >= 0 ? &g->nodes[d] : NULL;
    if (!dn || (dn->op != DM_OP_Div && dn->op != DM_OP_Mul) || dn->n_in != 2 || dn->in[0] < 0 ||
        dn->in[1] < 0 || !p->t[dn->in[1]].is_const || p->t[dn->in[1]].numel != 1 ||
        g->tensors[dn->in[0]].producer < 0 ||
        g->nodes[g->tensors[dn->in[0]].producer].op != DM_OP_MatMul)
        return scale;
    int32_t to = p->bwd[d] > p->bwd[i] ? p->bwd[d] : p->bwd[i];
    if (scale >= 0 && x->lay_bytes[scale] == f) { /* the same broadcast (CSE) */
        if (to > x->lay_to[scale])
            x->lay_to[scale] = to;
        return scale;
    }
    lay_add(x, f, LAY_START, to, LAY_STEP);
    return x->n_lay - 1;
}

static enum dnnmem_status cpu_layout_values(struct xla *x, const int32_t *act_grads,
                                            int32_t *pool_zeros, int32_t *pool_of)
{
    const struct plan *p = &x->p;
    const struct dm_graph *g = p->g;
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf;
    int32_t scale = -1; /* rule 8s: the scores' scale broadcast */
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        if (n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0 || p->fwd[i] < 0)
            continue;
        const struct dm_tinfo *xi = &p->t[n->in[0]], *yo = &p->t[n->out[0]];
        bool bwd = p->train && p->bwd[i] >= 0;
        enum dnnmem_status hs = DNNMEM_OK;
        bool ok = true;
        if (n->op == DM_OP_Softmax && bwd)
            scale = softmax_values(x, i, scale, &ok);
        if (!ok)
            return xla_overflow(x);
        if (n->op == DM_OP_Conv || n->op == DM_OP_MaxPool)
            hs = half_conv_values(x, i, bwd);
        if (hs != DNNMEM_OK)
            return hs;
        if (n->op == DM_OP_Conv && n->n_in >= 2 && n->in[1] >= 0) {
            uint64_t wb, xb;
            if (!f32_bytes(&p->t[n->in[1]], &wb) || !f32_bytes(xi, &xb))
                return xla_overflow(x);
            lay_add(x, wb, LAY_START, p->fwd[i], LAY_STEP);
            if (bwd && act_grads[p->bwd[i]] > 0)
                lay_add(x, wb, LAY_START, p->bwd[i], LAY_STEP);
            if (bwd && g->tensors[n->in[0]].producer < 0)
                lay_add(x, xb, LAY_START, p->bwd[i], LAY_STEP);
        } else if (n->op == DM_OP_Gather && bwd && n->n_in >= 2 && n->in[1] >= 0 &&
                   x->param[n->in[0]]) {
            hs = gather_grad_zeros(x, i, pool_zeros, pool_of);
            if (hs != DNNMEM_OK)
                return hs;
        } else if (n->op == DM_OP_MaxPool && bwd && xi->rank > 0) {
            pool_of[n->in[0]] = i;
            uint64_t iota, idx, zeros, max;
            if (!lay_s32(xi, 1, &iota) || !lay_s32(yo, 1, &idx) || !f32_bytes(xi, &zeros) ||
                !f32_bytes(yo, &max))
                return xla_overflow(x);
            for (int d = 0; d < xi->rank && d < 8; d++) /* one value each, as XLA's */
                lay_add(x, iota, LAY_FIRST, p->fwd[i], LAY_BEFORE);
            for (int d = 0; d < xi->rank && d < 8; d++) /* the index outputs */
                lay_add(x, idx, p->fwd[i], p->fwd[i], LAY_BEFORE);
            lay_add(x, max, p->fwd[i], p->fwd[i], LAY_BEFORE); /* and its max */
            pool_zeros[i] = x->n_lay;
            lay_add(x, zeros, LAY_START, p->bwd[i], LAY_STEP);
        }
    }
    /* one pass over the buffers: a convolution's own output (no_share), and
     * the input gradient a pool's backward makes (its scatter's zeros) */
    for (int32_t b = 0; b < nb; b++) {
        const struct dm_buffer *bf = &in->buf[b];
        if (bf->node >= 0 && bf->tensor >= 0 && !bf->what && g->nodes[bf->node].op == DM_OP_Conv &&
            g->nodes[bf->node].n_out > 0 && g->nodes[bf->node].out[0] == bf->tensor)
            x->no_share[b] = true;
        int32_t i = bf->tensor >= 0 ? pool_of[bf->tensor] : -1;
        if (i >= 0 && pool_zeros[i] >= 0 && p->kind[b] == K_TEMP && is_grad(bf) &&
            p->a_step[b] == p->bwd[i])
            x->lay_into[b] = pool_zeros[i];
    }
    return nhwc_relus(x);
}

/* Rule 9, XLA's CPU cross-entropy in training (measured: jax 0.10.2,
 * tra-b8-sgd-f32's dump): log_softmax is fused into its readers, never a
 * buffer of its own, so the logits (ynn_fusion.117 f32[1024,8192], live
 * 278-284) stay live to the loss's backward, beside the exp its backward
 * reads (wrapped_exponential, 279-283, the size of dnnmem's
 * loss.log_softmax), the take_along_axis gradient (wrapped_scatter) and the
 * logits' gradient (multiply_add_fusion.12, 283-287): the loss's input is
 * freed once the loss backward's gradient of it is made. Half-precision
 * logits differ (tra-b8-sgd-bf16: a bf16 copy and float32 conversions of
 * them around the loss): not modelled, rule 9 is float32's. */
static void cpu_loss_keeps_logits(struct xla *x)
{
    struct plan *p = &x->p;
    const struct dm_schedule *in = p->in;
    if (!x->o->cpu || !p->train)
        return;
    for (int32_t gb = 0; gb < in->n_buf; gb++) {
        const struct dm_buffer *bf = &in->buf[gb];
        int32_t k = p->a_step[gb];
        if (p->kind[gb] != K_TEMP || !bf->what || strcmp(bf->what, "grad") || bf->node >= 0 ||
            bf->tensor < 0 || k < 0 || in->steps[k].loss != DM_STEP_LOSS_BACKWARD ||
            is_half(p->t[bf->tensor].dtype))
            continue;
        bool ce = false;
        for (int32_t b = 0; b < in->n_buf && !ce; b++)
            ce = p->a_step[b] == k && in->buf[b].what && !strcmp(in->buf[b].what, "loss.nll_grad");
        for (int32_t b = 0; ce && b < in->n_buf; b++)
            if (p->kind[b] == K_TEMP && !p->fused[b] && in->buf[b].tensor == bf->tensor &&
                !in->buf[b].what && p->jfree[b] >= 0 && p->jfree[b] < k)
                p->jfree[b] = k;
    }
}

static enum dnnmem_status find_copies(struct xla *x)
{
    const struct plan *p = &x->p;
    const struct dm_schedule *in = p->in;
    const struct dm_graph *g = p->g;
    int32_t nb = in->n_buf, nt = g->n_tensors, ns = in->n_steps;
    x->param = calloc((size_t)nt + 1, sizeof *x->param);
    x->copy_buf = malloc(((size_t)nt + 1) * sizeof *x->copy_buf);
    x->copy_done = malloc(((size_t)nt + 1) * sizeof *x->copy_done);
    x->copy_half = calloc((size_t)nt + 1, sizeof *x->copy_half);
    x->copy_late = calloc((size_t)nt + 1, sizeof *x->copy_late);
    int32_t *pbuf = malloc(((size_t)nt + 1) * sizeof *pbuf);
    int32_t *last = malloc(((size_t)nt + 1) * sizeof *last);
    int32_t *act_grads = calloc((size_t)ns + 1, sizeof *act_grads);
    bool *copied = calloc((size_t)nt + 1, sizeof *copied);
    if (!x->param || !x->copy_buf || !x->copy_done || !x->copy_half || !x->copy_late || !pbuf ||
        !last ||
        !act_grads || !copied) {
        free(pbuf), free(last), free(act_grads), free(copied);
        return xla_oom(x);
    }
    for (int32_t b = 0; b < nb; b++)
        if (p->kind[b] == K_TEMP && in->buf[b].category == DNNMEM_CAT_GRADIENT &&
            in->buf[b].tensor >= 0)
            x->param[in->buf[b].tensor] = true;
    x->n_copy = 0;
    if (x->o->cpu) {
        for (int32_t t = 0; t < nt; t++)
            pbuf[t] = last[t] = -1;
        for (int32_t b = 0; b < nb; b++) {
            const struct dm_buffer *bf = &in->buf[b];
            if (p->kind[b] == K_SETUP && bf->category == DNNMEM_CAT_WEIGHT && !bf->what &&
                bf->tensor >= 0 && pbuf[bf->tensor] < 0)
                pbuf[bf->tensor] = b;
            if (p->kind[b] == K_TEMP && is_grad(bf) && bf->tensor >= 0 &&
                !x->param[bf->tensor] && p->a_step[b] >= 0)
                act_grads[p->a_step[b]]++;
        }
        /* a copy's last reader: a backward making an input gradient, else the forward */
        for (int32_t i = 0; i < g->n_nodes; i++)
            for (int k = 0; k < g->nodes[i].n_in; k++) {
                int32_t t = g->nodes[i].in[k] >= 0 ? p->base[g->nodes[i].in[k]] : -1;
                int32_t r = p->fwd[i];
                if (p->bwd[i] >= 0 && act_grads[p->bwd[i]] > 0)
                    r = p->bwd[i];
                if (t >= 0 && r > last[t])
                    last[t] = r;
            }
        copy_params(x, pbuf, act_grads, last, copied);
    }
    cpu_loss_keeps_logits(x);
    enum dnnmem_status ls = cpu_layouts(x, act_grads);
    free(pbuf), free(last), free(act_grads), free(copied);
    if (ls != DNNMEM_OK)
        return ls;
    x->nv = nb + x->n_copy + x->n_lay;
    x->vbytes = malloc(((size_t)x->nv + 1) * sizeof *x->vbytes);
    if (!x->vbytes)
        return xla_oom(x);
    for (int32_t b = 0; b < nb; b++) {
        x->vbytes[b] = in->buf[b].bytes;
        uint8_t dt = in->buf[b].dtype;
        /* rule 7c: on the CPU the step's half-precision values are float32 */
        if (x->o->cpu && p->kind[b] == K_TEMP && is_half(dt) && !x->keep_half[b] &&
            !dm_umul_ok(x->vbytes[b], 2, &x->vbytes[b]))
            return xla_overflow(x);
    }
    for (int32_t c = 0; c < x->n_copy; c++) {
        uint64_t v = in->buf[x->copy_buf[c]].bytes;
        if (x->copy_half[c] && !dm_umul_ok(v, 2, &v))
            return xla_overflow(x);
        x->vbytes[nb + c] = v;
        x->st->copies++;
        if (!dm_uadd_ok(x->st->copy_bytes, v, &x->st->copy_bytes))
            return xla_overflow(x);
    }
    for (int32_t l = 0; l < x->n_lay; l++) {
        x->vbytes[nb + x->n_copy + l] = x->lay_bytes[l];
        x->st->layouts++;
        if (!dm_uadd_ok(x->st->layout_bytes, x->lay_bytes[l], &x->st->layout_bytes))
            return xla_overflow(x);
    }
    return DNNMEM_OK;
}

/* Free steps after fusion, and the values freed at each step (CSR). */
static enum dnnmem_status free_lists(struct xla *x)
{
    struct plan *p = &x->p;
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf, ns = in->n_steps;
    x->fr_start = calloc((size_t)ns + 2, sizeof *x->fr_start);
    x->fr_list = malloc(((size_t)nb + 1) * sizeof *x->fr_list);
    x->grp = malloc(((size_t)x->nv + 1) * sizeof *x->grp);
    x->t0 = malloc(((size_t)x->nv + 1) * sizeof *x->t0);
    x->t1 = malloc(((size_t)x->nv + 1) * sizeof *x->t1);
    x->ended = calloc((size_t)x->nv + 1, sizeof *x->ended);
    if (!x->fr_start || !x->fr_list || !x->grp || !x->t0 || !x->t1 || !x->ended)
        return xla_oom(x);
    int32_t *fr_start = x->fr_start;
    int32_t n_heap = x->n_copy + x->n_lay;
    for (int32_t b = nb; b < x->nv; b++) {
        x->grp[b] = b;
        x->t0[b] = -1;
    }
    for (int32_t b = 0; b < nb; b++) {
        x->grp[b] = -1;
        if (p->kind[b] != K_TEMP || p->fused[b] || in->buf[b].bytes == 0)
            continue;
        p->jfree[b] = find(p->red, p->jfree[b]);
        fr_start[p->jfree[b] + 1]++;
        n_heap++;
    }
    x->n_heap = n_heap;
    for (int32_t k = 0; k < ns; k++)
        fr_start[k + 1] += fr_start[k];
    int32_t *ff = calloc((size_t)ns + 1, sizeof *ff);
    if (!ff)
        return xla_oom(x);
    for (int32_t b = 0; b < nb; b++)
        if (p->kind[b] == K_TEMP && !p->fused[b] && in->buf[b].bytes > 0)
            x->fr_list[fr_start[p->jfree[b]] + ff[p->jfree[b]]++] = b;
    free(ff);
    return DNNMEM_OK;
}

/* Rule 7: the copies whose last reader runs at step k end (once). */
enum copy_end { AFTER_INPUT_GRAD, AFTER_WEIGHT_GRAD, STEP_END };

/* Rule 7: the copies whose last reader has run at step k end (once): after
 * the input gradient of the step reading them; a late copy (rule 7a with
 * optimizer state) after the next weight gradient made past that step. */
static void end_copies(struct xla *x, int32_t k, enum copy_end at, int64_t *clock)
{
    int32_t nb = x->p.in->n_buf;
    for (int32_t c = 0; c < x->n_copy; c++) {
        int32_t d = find(x->p.red, x->copy_done[c]);
        bool late = x->copy_late[c];
        bool now = at == AFTER_WEIGHT_GRAD ? late && d < k
                   : at == AFTER_INPUT_GRAD ? !late && d == k
                                            : (!late && d == k) || k == x->p.w1 - 1;
        if (x->ended[nb + c] || !now)
            continue;
        x->time_step[*clock] = k;
        x->t1[nb + c] = (*clock)++;
        x->ended[nb + c] = true;
    }
}

/* Rule 2 and the heap's clock: the step's own events in their order
 * (an op's outputs, then its dying operands; a composite step such as
 * the loss op by op); a value is defined, or shares a dying operand's
 * buffer (Free, then ShareWith); a value whose last reader moved later
 * (rule 1) is freed at the end of that reader's step. */
static enum dnnmem_status run_clock(struct xla *x)
{
    const struct plan *p = &x->p;
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf, ns = in->n_steps, w0 = p->w0, w1 = p->w1;
    int64_t clock = 0;
    x->time_step = malloc(((size_t)x->nv * 2 + 2) * sizeof *x->time_step);
    if (!x->time_step)
        return xla_oom(x);
    size_t ev_at = 0;
    while (ev_at < in->n_ev && in->ev[ev_at].step < w0)
        ev_at++;
    x->tick0 = malloc(((size_t)ns + 1) * sizeof *x->tick0);
    x->tick1 = malloc(((size_t)ns + 1) * sizeof *x->tick1);
    if (!x->tick0 || !x->tick1)
        return xla_oom(x);
    int32_t *time_step = x->time_step, *fr_start = x->fr_start, *fr_list = x->fr_list;
    int32_t *grp = x->grp;
    int64_t *t0 = x->t0, *t1 = x->t1, *tick0 = x->tick0, *tick1 = x->tick1;
    bool *ended = x->ended;
    for (int32_t k = 0; k < ns; k++)
        tick0[k] = tick1[k] = 0;
    for (int32_t k = w0; k < w1; k++) {
        bool can_share = shares_at(p, k);
        tick0[k] = clock;
        for (int32_t l = 0; k == w0 && l < x->n_lay; l++) /* rule 8: the iotas, first */
            if (x->lay_from[l] == LAY_FIRST) {
                time_step[clock] = k;
                t0[nb + x->n_copy + l] = clock++;
            }
        for (int32_t c = 0; k == w0 && c < x->n_copy; c++) { /* rule 7: first */
            time_step[clock] = k;
            t0[nb + c] = clock++;
        }
        for (int32_t l = 0; l < x->n_lay; l++) /* rule 8: made at the start or their step */
            if (x->lay_from[l] == k || (k == w0 && x->lay_from[l] == LAY_START)) {
                time_step[clock] = k;
                t0[nb + x->n_copy + l] = clock++;
            }
        for (int32_t l = 0; l < x->n_lay; l++) { /* rule 8: dead before the step's values */
            int32_t v = nb + x->n_copy + l;
            if (x->lay_to[l] == k && x->lay_at[l] == LAY_BEFORE && !ended[v]) {
                time_step[clock] = k;
                t1[v] = clock++;
                ended[v] = true;
            }
        }
        for (; ev_at < in->n_ev && in->ev[ev_at].step == k; ev_at++) {
            int32_t v = in->ev[ev_at].buf;
            if (p->kind[v] != K_TEMP || p->fused[v] || in->buf[v].bytes == 0)
                continue;
            if (in->ev[ev_at].kind == DM_EV_FREE) {
                if (p->jfree[v] == k && !ended[v]) {
                    time_step[clock] = k;
                    t1[v] = clock++;
                    ended[v] = true;
                }
                continue;
            }
            int32_t d = -1;
            const struct dm_buffer *vb = &in->buf[v];
            for (int32_t r = fr_start[k]; can_share && d < 0 && r < fr_start[k + 1]; r++) {
                int32_t c = fr_list[r];
                const struct dm_buffer *cb = &in->buf[c];
                if (!ended[c] && p->a_step[c] < k && cb->bytes == vb->bytes &&
                    cb->dtype == vb->dtype && !x->no_share[c])
                    d = c;
            }
            if (d < 0 && x->lay_into[v] >= 0 && !ended[nb + x->n_copy + x->lay_into[v]])
                d = nb + x->n_copy + x->lay_into[v]; /* rule 8: the scatter's zeros */
            if (d >= 0) {
                time_step[clock] = k;
                t1[d] = clock++;
                ended[d] = true;
                grp[v] = grp[d];
                x->st->shared++;
            } else {
                grp[v] = v;
            }
            time_step[clock] = k;
            t0[v] = clock++;
            if (is_grad(vb) && vb->tensor >= 0)
                end_copies(x, k, x->param[vb->tensor] ? AFTER_WEIGHT_GRAD : AFTER_INPUT_GRAD,
                           &clock);
        }
        for (int32_t r = fr_start[k]; r < fr_start[k + 1]; r++) {
            int32_t c = fr_list[r];
            if (ended[c])
                continue;
            time_step[clock] = k;
            t1[c] = clock++;
            ended[c] = true;
        }
        for (int32_t l = 0; l < x->n_lay; l++) {
            int32_t v = nb + x->n_copy + l;
            if (x->lay_to[l] == k && !ended[v]) {
                time_step[clock] = k;
                t1[v] = clock++;
                ended[v] = true;
            }
        }
        end_copies(x, k, STEP_END, &clock);
        tick1[k] = clock;
    }
    for (int32_t l = 0; l < x->n_lay; l++) /* rule 8: a value no step ended (none expected) */
        if (!ended[nb + x->n_copy + l]) {
            if (t0[nb + x->n_copy + l] < 0) {
                time_step[clock] = w1 > w0 ? w1 - 1 : w0;
                t0[nb + x->n_copy + l] = clock++;
            }
            time_step[clock] = w1 > w0 ? w1 - 1 : w0;
            t1[nb + x->n_copy + l] = clock++;
            ended[nb + x->n_copy + l] = true;
        }
    x->clock = clock;
    return DNNMEM_OK;
}

/* Parameters with a gradient are updated (and returned) by the step; rule 6:
 * temporaries into the live-out allocations before their values are made. */
static enum dnnmem_status host(struct xla *x)
{
    const struct plan *p = &x->p;
    const struct dm_schedule *in = p->in;
    int32_t nb = in->n_buf;
    (void)in;
    (void)nb;
    x->hosted = calloc((size_t)x->nv + 1, sizeof *x->hosted);
    if (!x->hosted)
        return xla_oom(x);
    struct values vl = {x->nv, x->n_copy, x->copy_buf, x->copy_done, x->vbytes, x->copy_half};
    enum dnnmem_status s = host_in_outputs(p, x->param, x->o, &vl, x->grp, x->t0, x->t1,
                                           x->tick0, x->tick1, x->clock, x->hosted, x->st);
    if (s != DNNMEM_OK)
        return xla_oom(x);
    return DNNMEM_OK;
}

/* The groups into the heap simulator; the no-fragmentation peak; each
 * buffer's offset in the temp. */
static enum dnnmem_status simulate_heap(struct xla *x, uint64_t align)
{
    const struct plan *p = &x->p;
    const struct dm_schedule *in = p->in;
    const struct dm_xla_opts *o = x->o;
    struct dm_xla_stats *st = x->st;
    int32_t nb = in->n_buf;
    const int32_t *grp = x->grp;
    const int64_t *t0 = x->t0, *t1 = x->t1;
    const bool *hosted = x->hosted;
    int64_t clock = x->clock;
    enum dnnmem_status s;
    int32_t nv = x->nv;
    const uint64_t *vbytes = x->vbytes;
    struct dm_heap_buf *hb = malloc(((size_t)x->n_heap + 1) * sizeof *hb);
    int32_t *slot = malloc(((size_t)nv + 1) * sizeof *slot);
    uint64_t *add = calloc((size_t)clock + 2, sizeof *add); /* per tick: bytes defined */
    uint64_t *rem = calloc((size_t)clock + 2, sizeof *rem); /* per tick: bytes freed */
    if (!hb || !slot || !add || !rem) {
        s = xla_oom(x);
        goto done;
    }
    int32_t n_grp = 0;
    for (int32_t b = 0; b < nv; b++) { /* the groups' heads first: a rule 8 head comes last */
        slot[b] = -1;
        if (grp[b] == b && !hosted[b]) {
            slot[b] = n_grp;
            hb[n_grp++] = (struct dm_heap_buf){vbytes[b], t0[b], t1[b], t1[b], b, 0};
        }
    }
    for (int32_t b = 0; b < nv; b++) {
        if (grp[b] < 0 || hosted[grp[b]])
            continue;
        if (grp[b] != b && t1[b] > hb[slot[grp[b]]].end)
            hb[slot[grp[b]]].end = t1[b];
        bool ok = dm_uadd_ok(add[t0[b]], vbytes[b], &add[t0[b]]) &&
                  dm_uadd_ok(rem[t1[b]], vbytes[b], &rem[t1[b]]);
        if (!ok) {
            s = xla_overflow(x);
            goto done;
        }
    }
    st->heap_values = n_grp;
    /* live over [start, end]: what is freed at a tick counts until it */
    uint64_t live = 0, best = 0;
    int64_t best_t = -1;
    for (int64_t k = 0; k < clock; k++) {
        if (!dm_uadd_ok(live, add[k], &live)) {
            s = xla_overflow(x);
            goto done;
        }
        if (live > best) {
            best = live;
            best_t = k;
        }
        live -= rem[k] <= live ? rem[k] : live;
    }
    st->live_peak = best;
    if (best_t >= 0) {
        st->peak_step = x->time_step[best_t];
        for (int32_t b = 0; b < nv; b++) /* each part of `best`: no overflow */
            if (grp[b] >= 0 && !hosted[grp[b]] && t0[b] <= best_t && best_t <= t1[b])
                st->peak_bytes[b < nb ? in->buf[b].category : DNNMEM_CAT_TEMPORARY] += vbytes[b];
    }
    s = dm_heap_choose_best(hb, (size_t)n_grp, align, &st->heap);
    for (int32_t b = 0; o->offsets && b < nb; b++)
        o->offsets[b] = p->fused[b]                       ? DM_XLA_FUSED
                        : grp[b] >= 0 && hosted[grp[b]] ? DM_XLA_IN_OUTPUT
                        : grp[b] >= 0 && s == DNNMEM_OK ? (int64_t)hb[slot[grp[b]]].offset
                        : p->kind[b] == K_TEMP            ? DM_XLA_EMPTY
                                                          : DM_XLA_NOT_TEMP;
    if (s != DNNMEM_OK)
        s = dm_fail(x->err, s, "%s: the XLA heap simulation failed (byte counts overflow)",
                    x->path);
done:
    free(slot);
    free(hb);
    free(add);
    free(rem);
    return s;
}

/* The output schedule's steps: the input's steps with a "call" step opening
 * each iteration's window. */
static enum dnnmem_status out_steps(struct xla *x)
{
    const struct dm_schedule *in = x->p.in;
    struct dm_schedule *out = x->out;
    int32_t ns = in->n_steps, w0 = x->p.w0;
    int32_t n_it = 0;
    for (int32_t k = w0; k < ns; k++)
        if (in->steps[k].phase != DM_PHASE_SETUP && in->steps[k].iteration > n_it)
            n_it = in->steps[k].iteration;
    x->n_it = n_it;
    x->call_step = malloc(((size_t)n_it + 2) * sizeof *x->call_step);
    x->win_first = malloc(((size_t)n_it + 2) * sizeof *x->win_first);
    x->win_last = malloc(((size_t)n_it + 2) * sizeof *x->win_last);
    x->map = malloc(((size_t)ns + 1) * sizeof *x->map);
    out->steps = malloc(((size_t)ns + (size_t)n_it + 1) * sizeof *out->steps);
    if (!x->call_step || !x->win_first || !x->win_last || !x->map || !out->steps)
        return xla_oom(x);
    int32_t *call_step = x->call_step, *win_first = x->win_first, *win_last = x->win_last;
    for (int32_t it = 0; it <= n_it; it++)
        win_first[it] = win_last[it] = call_step[it] = -1;
    for (int32_t k = w0; k < ns; k++) {
        int it = in->steps[k].iteration;
        if (in->steps[k].phase == DM_PHASE_SETUP || it < 1 || it > n_it)
            continue;
        if (win_first[it] < 0)
            win_first[it] = k;
        win_last[it] = k;
    }
    int32_t n_os = 0;
    for (int32_t k = 0; k < ns; k++) {
        int it = in->steps[k].iteration;
        if (it >= 1 && it <= n_it && win_first[it] == k) {
            call_step[it] = n_os;
            out->steps[n_os++] = (struct dm_step){.phase = DM_PHASE_FORWARD, .iteration = (int16_t)it, .node = -1};
        }
        x->map[k] = n_os;
        out->steps[n_os++] = in->steps[k];
    }
    out->n_steps = out->cap_steps = n_os;
    return DNNMEM_OK;
}

/* The buffers of one generation of outputs, the entry bytes, and room for
 * the output's buffers and events. */
static enum dnnmem_status out_alloc(struct xla *x)
{
    const struct plan *p = &x->p;
    const struct dm_schedule *in = p->in;
    const struct dm_xla_opts *o = x->o;
    struct dm_xla_stats *st = x->st;
    int32_t nb = in->n_buf, n_it = x->n_it;
    int32_t n_gen = 0; /* buffers of one generation of outputs */
    for (int32_t b = 0; b < nb; b++) {
        const struct dm_buffer *bf = &in->buf[b];
        if (returned(p, x->param, o, b))
            n_gen++;
        if ((p->kind[b] == K_SETUP || p->kind[b] == K_ENTRY) &&
            !dm_uadd_ok(st->entry_bytes, bf->bytes, &st->entry_bytes))
            return xla_overflow(x);
    }
    x->gen = malloc(((size_t)n_gen + 1) * sizeof *x->gen);   /* input buffer of each output */
    x->prev = malloc(((size_t)n_gen + 1) * sizeof *x->prev); /* the generation before */
    size_t cap_ob = (size_t)nb + (size_t)n_it * ((size_t)n_gen + 1) + 1;
    x->ob = malloc(cap_ob * sizeof *x->ob);
    size_t cap_oe = in->n_ev + (size_t)nb + (size_t)n_it * (2 * (size_t)n_gen + 2) + 1;
    x->oe = malloc(cap_oe * sizeof *x->oe);
    if (!x->gen || !x->prev || !x->ob || !x->oe)
        return xla_oom(x);
    n_gen = 0;
    for (int32_t b = 0; b < nb; b++) {
        if (returned(p, x->param, o, b)) {
            x->gen[n_gen] = b;
            x->prev[n_gen] = o->train ? b : -1; /* training: the inputs go after the first call */
            n_gen++;
        }
    }
    x->n_gen = n_gen;
    return DNNMEM_OK;
}

/* The output's buffers and events: its setup events, the entry parameters
 * made in the step moved before it, and per call the outputs and the temp. */
static enum dnnmem_status out_events(struct xla *x)
{
    const struct plan *p = &x->p;
    const struct dm_schedule *in = p->in;
    struct dm_schedule *out = x->out;
    struct dm_xla_stats *st = x->st;
    int32_t nb = in->n_buf, n_it = x->n_it, n_gen = x->n_gen, w0 = p->w0;
    const int32_t *call_step = x->call_step, *win_last = x->win_last, *map = x->map;
    const int32_t *gen = x->gen;
    int32_t *prev = x->prev;
    struct dm_buffer *ob = x->ob;
    struct oev *oe = x->oe;
    memcpy(ob, in->buf, (size_t)nb * sizeof *ob);
    int32_t n_ob = nb;
    size_t n_oe = 0;
    int64_t seq = 0;
    int32_t setup_at = w0 > 0 ? map[w0 - 1] : (n_it >= 1 ? call_step[1] : 0);
    for (size_t e = 0; e < in->n_ev; e++) {
        const struct dm_event *ev = &in->ev[e];
        uint8_t k = p->kind[ev->buf];
        if (k == K_SETUP) {
            oe[n_oe++] = (struct oev){map[ev->step], seq++, {ev->kind, ev->buf, map[ev->step]}};
        } else if (k == K_ENTRY && ev->kind == DM_EV_ALLOC) { /* before the first call */
            oe[n_oe++] = (struct oev){setup_at, INT64_MAX / 4 + seq++,
                                      {DM_EV_ALLOC, ev->buf, setup_at}};
        }
    }
    uint64_t heap = st->heap.heap_bytes;
    for (int32_t it = 1; it <= n_it; it++) {
        if (call_step[it] < 0 || win_last[it] < 0)
            continue;
        int32_t cs = call_step[it], es = map[win_last[it]];
        uint64_t out_bytes = 0;
        for (int32_t q = 0; q < n_gen; q++) { /* live-out buffers, then the temp */
            int32_t id = n_ob++;
            ob[id] = in->buf[gen[q]];
            if (!dm_uadd_ok(out_bytes, ob[id].bytes, &out_bytes))
                return xla_overflow(x);
            oe[n_oe++] = (struct oev){cs, seq++, {DM_EV_ALLOC, id, cs}};
            if (prev[q] >= 0) /* the previous generation, once the call returns */
                oe[n_oe++] = (struct oev){es, INT64_MAX / 2 + seq++, {DM_EV_FREE, prev[q], es}};
            prev[q] = id;
        }
        if (it == 1) {
            st->outputs = n_gen;
            st->output_bytes = out_bytes;
        }
        if (heap > 0) {
            int32_t id = n_ob++;
            ob[id] = (struct dm_buffer){heap, -1, -1, DNNMEM_CAT_TEMPORARY, DM_UINT8,
                                        "XLA temp buffer"};
            oe[n_oe++] = (struct oev){cs, seq++, {DM_EV_ALLOC, id, cs}};
            oe[n_oe++] = (struct oev){es, INT64_MAX / 4 + seq++, {DM_EV_FREE, id, es}};
        }
    }
    qsort(oe, n_oe, sizeof *oe, cmp_oev);
    out->buf = ob;
    out->n_buf = out->cap_buf = n_ob;
    x->ob = NULL;
    out->ev = malloc((n_oe + 1) * sizeof *out->ev);
    if (!out->ev)
        return xla_oom(x);
    for (size_t k = 0; k < n_oe; k++)
        out->ev[k] = oe[k].ev;
    out->n_ev = out->cap_ev = n_oe;
    return DNNMEM_OK;
}

enum dnnmem_status dm_xla_plan(const struct dm_graph *g, const struct dm_tinfo *t,
                               const struct dm_schedule *in, const struct dm_xla_opts *o,
                               struct dm_schedule *out, struct dm_xla_stats *st,
                               struct dnnmem_error *err)
{
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);
    st->peak_step = -1;
    const char *path = g && g->path ? g->path : "schedule";
    if (!g || !in || !o)
        return dm_fail(err, DNNMEM_E_INTERNAL, "%s: XLA plan without a graph", path);
    uint64_t align = o->alignment ? o->alignment : o->cpu ? XLA_CPU_ALIGN : XLA_GPU_ALIGN;
    struct xla x = {.p = {.g = g, .t = t, .in = in, .train = o->train},
                    .o = o, .out = out, .st = st, .err = err, .path = path};
    enum dnnmem_status s = DNNMEM_OK;
    if (!alloc_arrays(&x.p, (size_t)in->n_buf, (size_t)in->n_steps, (size_t)g->n_nodes,
                      (size_t)g->n_tensors)) {
        s = xla_oom(&x);
        goto done;
    }
    find_window(&x.p);
    readers(&x.p, o->train);
    grads_whole(&x.p);
    classify(&x.p, o, st);
    fuse(&x.p, st);
    if ((s = find_copies(&x)) != DNNMEM_OK || (s = free_lists(&x)) != DNNMEM_OK || (s = run_clock(&x)) != DNNMEM_OK ||
        (s = host(&x)) != DNNMEM_OK || (s = simulate_heap(&x, align)) != DNNMEM_OK ||
        (s = out_steps(&x)) != DNNMEM_OK || (s = out_alloc(&x)) != DNNMEM_OK)
        goto done;
    s = out_events(&x);
done:
    if (s != DNNMEM_OK)
        dm_schedule_free(out);
    xla_free(&x);
    return s;
}
