/*
 * workspace.c: the buffers the libraries an op calls make around it (cuBLAS,
 * cuDNN, FlashAttention's backward, oneDNN and THNN on the CPU (their rules
 * in cpuconv.c, shared with captured steps), the kernels of quantized
 * layers), for the forward pass and the backward alike; and the kernel
 * choices (SDPA's backend, a quantized layer's path) the saved tensors
 * depend on. Stands on the builder and cpuconv.c.
 */
#include "schedule/builder.h"
#include "schedule/cpuconv.h"

#include <string.h>

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
    /* the CPU's sdpa node is its flash kernel (hf/attention.c took the math
     * kernel's ops where the CPU runs that) */
    if (dm_attr_int(n, "flash_attn", 0) || !b->run->cuda)
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

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Query rows of the fp32 log-sum-exp a fused Attention node keeps for its
 * backward: S for flash, S rounded up to 32 for the memory-efficient kernel
 * (kAlignLSE). */
int64_t dm_sdpa_lse_rows(const struct dm_sb *b, const struct dm_node *n)
{
    int64_t s = b->t[n->in[0]].dims[2];
    return dm_sdpa_flash(b, n) ? s : round_up(s, 32);
}

/* ---- CPU convolutions: the rules of cpuconv.c, from a Conv node ------------------ */

/* Whether ints attribute `name` (strides, dilations: 1 when absent) has a
 * value other than 1. */
static bool attr_not_ones(const struct dm_node *n, const char *name)
{
    int64_t cnt;
    const int64_t *v = dm_attr_ints(n, name, &cnt);
    for (int64_t k = 0; v && k < cnt; k++)
        if (v[k] != 1)
            return true;
    return false;
}

/* The Conv's strides, dilations and leading pads per spatial dim (ONNX's
 * defaults 1, 1, 0); known only with explicit pads (auto_pad NOTSET, as
 * torch.onnx exports) and each attribute of the spatial rank. */
static void conv_geometry(const struct dm_node *n, struct dm_cpu_conv *cv)
{
    int64_t sp = cv->x.rank - 2, ns = 0, nd = 0, np = 0;
    const int64_t *s = dm_attr_ints(n, "strides", &ns), *d = dm_attr_ints(n, "dilations", &nd),
                  *p = dm_attr_ints(n, "pads", &np);
    const char *ap = dm_attr_str(n, "auto_pad", "NOTSET");
    if (sp < 1 || sp > 3 || (s && ns != sp) || (d && nd != sp) || (p && np != 2 * sp) ||
        (strcmp(ap, "NOTSET") != 0 && !(strcmp(ap, "VALID") == 0 && !p)))
        return;
    for (int64_t k = 0; k < sp; k++) {
        cv->stride[k] = s ? s[k] : 1;
        cv->dilation[k] = d ? d[k] : 1;
        cv->pad[k] = p ? p[k] : 0;
        if (cv->stride[k] < 1 || cv->dilation[k] < 1 || cv->pad[k] < 0)
            return;
    }
    cv->geom = true;
}

/* Node n as cpuconv.c reads a conv; false when it is not a Conv with its
 * input and weight (a ConvTranspose: no CPU rule). */
static bool conv_desc(const struct dm_sb *b, const struct dm_node *n, struct dm_cpu_conv *cv)
{
    /* PyTorch's CPU kernels only: MXNet's CPU convolutions (MKLDNN, or
     * im2col) take their scratch from the temp-space resource, not modelled */
    if (n->op != DM_OP_Conv || !dm_has_in(n, 0) || !dm_has_in(n, 1) || b->run->mx_ops ||
        b->run->xla)
        return false;
    *cv = (struct dm_cpu_conv){.x = b->t[n->in[0]], .w = b->t[n->in[1]],
                               .groups = dm_attr_int(n, "group", 1),
                               .strided = attr_not_ones(n, "strides"),
                               .dilated = attr_not_ones(n, "dilations"), .bias = dm_has_in(n, 2),
                               .chlast = b->chlast[n->in[0]]};
    if (dm_has_out(n, 0))
        cv->y = b->t[n->out[0]];
    conv_geometry(n, cv);
    int64_t np;
    const int64_t *pads = dm_attr_ints(n, "pads", &np);
    cv->depth_padded = cv->x.rank == 5 && pads && np == 6 && (pads[0] != 0 || pads[3] != 0);
    return true;
}

/* The bytes of convolution_backward's grad_output.contiguous(format) on the
 * CPU (mkldnn_convolution_backward, aten/src/ATen/native/mkldnn/Conv.cpp at
 * the 2.x tags and v1.13.1: the format channels-last when the input is):
 * the whole grad when the grad autograd hands the conv (layout.c,
 * dm_sb_grad_layout) is not dense in that format; none for an [N, C, 1, 1]
 * or [N, 1, H, W] grad, dense in both. Measured, 2.13.0 and 1.13.0 (Debian's
 * python3-torch), one thread, 16 -> 24 3x3 on [2,16,8,8] (y 12288 B): +12288
 * `aten::contiguous > aten::clone` in ConvolutionBackward0 for an NCHW conv
 * given a channels-last grad, a channels-last conv given a contiguous one,
 * and either given a slice of a cat's grad; none when the formats agree.
 * Releases before 1.13 are not measured: none. */
static uint64_t grad_output_copy(const struct dm_sb *b, const struct dm_node *n,
                                 const struct dm_cpu_conv *cv)
{
    if (!dm_has_out(n, 0) || b->run->torch_version < 113 || b->run->xla)
        return 0;
    int32_t y = n->out[0];
    const struct dm_tinfo *t = &b->t[y];
    uint8_t f = b->gradfmt[y];
    if (t->rank != 4 || f == DM_GF_NONE || t->dims[1] == 1 || (t->dims[2] == 1 && t->dims[3] == 1))
        return 0;
    return f == (cv->chlast ? DM_GF_CL : DM_GF_C) ? 0 : t->bytes;
}

/* PyTorch 1.13's CPU GroupNorm backward takes contiguous operands: a
 * channels-last X, and a grad that is not contiguous, are cloned first
 * (measured, 1.13.0, Debian's python3-torch, one thread: GroupNorm(8, 96) on a
 * channels-last [2,96,16,16] with a channels-last grad: two `aten::clone`s of
 * 196,608 B before native_group_norm_backward's dX, none for contiguous
 * ones; the zoo's rand83 training, its expanded inverted block's GroupNorm
 * at the measured peak). 2.x's CPU kernel reads channels-last (2.13's rows
 * of the same models are exact): none. Both freed when the backward returns. */
static void group_norm_113_copies(struct dm_sb *b, const struct dm_node *n, int32_t node,
                                  bool backward, struct dm_ws *ws)
{
    if (!backward || n->op != DM_OP_GroupNormalization || b->run->cuda || b->run->tf_ops ||
        b->run->mx_ops || b->run->xla || b->run->torch_version < 113 ||
        b->run->torch_version >= 200 || !dm_has_in(n, 0) || !dm_has_out(n, 0) ||
        b->t[n->in[0]].rank != 4)
        return;
    int32_t x = n->in[0], y = n->out[0];
    uint8_t f = b->gradfmt[y];
    if (b->chlast[x])
        ws->buf[2] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, b->t[x].dtype, b->t[x].bytes, -1, node,
                                 "X.contiguous() (1.13 group norm backward)", 1);
    if (f != DM_GF_NONE && f != DM_GF_C)
        ws->buf[3] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, b->t[y].dtype, b->t[y].bytes, -1, node,
                                 "dY.contiguous() (1.13 group norm backward)", 1);
}

/* cpuconv.c's buffers, made as the node's workspaces. */
struct ws_ctx {
    struct dm_sb *b;
    int32_t node;
};
static int32_t ws_alloc(void *ctx, enum dm_dtype dtype, uint64_t bytes, const char *what)
{
    struct ws_ctx *w = ctx;
    return dm_sb_alloc(w->b, DNNMEM_CAT_WORKSPACE, dtype, bytes, -1, w->node, what, 1);
}
static void ws_unref(void *ctx, int32_t buf) { dm_sb_unref(((struct ws_ctx *)ctx)->b, buf); }

void dm_sb_workspace_grad(struct dm_sb *b, const struct dm_node *n, int k, struct dm_ws *ws,
                          bool after)
{
    struct dm_cpu_conv cv;
    if (b->run->cuda || !conv_desc(b, n, &cv))
        return;
    cv.cl_copy = grad_output_copy(b, n, &cv);
    struct ws_ctx ctx = {.b = b, .node = (int32_t)(n - b->g->nodes)};
    struct dm_ws_sink sink = {.ctx = &ctx, .alloc = ws_alloc, .unref = ws_unref};
    dm_cpu_conv_grad(&cv, b->run, &sink, k, ws, after);
}

uint64_t dm_sb_grad_scratch(const struct dm_sb *b, const struct dm_node *n)
{
    struct dm_cpu_conv cv;
    return conv_desc(b, n, &cv) ? dm_cpu_conv_grad_scratch(&cv, b->run) : 0;
}

/* ---- QuantLinear: the kernels of quantized checkpoints ---------------------------- */

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

/* Norms that make their input contiguous first, the copy living while the
 * op runs: at::instance_norm runs batch_norm on input.contiguous().view(1,
 * N * C, ...) (aten/src/ATen/native/Normalization.cpp), which copies a
 * channels-last input (layout.c); native_layer_norm and its backward read
 * input.expect_contiguous() (aten/src/ATen/native/layer_norm.cpp), which
 * copies a non-contiguous view (LayerNorm2d's permute of an NCHW tensor).
 * Measured on 2.14.1: instance_norm > aten::clone and native_layer_norm >
 * aten::contiguous > aten::clone, input-sized, freed when the op returns.
 * On every device; the backward's copy of a strided grad_output is not
 * modelled (the grad's strides are not tracked). */
static void contiguous_copy(struct dm_sb *b, const struct dm_node *n, int32_t node, bool backward,
                            struct dm_ws *ws)
{
    if (!dm_has_in(n, 0))
        return;
    int32_t x = n->in[0];
    bool copy = (n->op == DM_OP_InstanceNormalization && !backward && b->chlast[x]) ||
                (n->op == DM_OP_LayerNormalization && b->strided[x]);
    if (copy)
        ws->buf[DM_WS_BUFS - 2] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, b->t[x].dtype, b->t[x].bytes,
                                              -1, node, "input.contiguous()", 1);
}

/* A convolution's copy of an input its kernel cannot read in place:
 * at::_convolution and convolution_backward hand the backend
 * input.contiguous(backend_memory_format), channels-last where the input's
 * strides suggest it (mkldnn_conv_use_channels_last), else contiguous
 * (aten/src/ATen/native/Convolution.cpp). A view that is not dense in that
 * format is cloned before the kernel's buffers and freed after them, in the
 * forward and again in the backward: a torch.split channel part at batch 2
 * (MixNet's MixedConv2d; measured on 2.13.0 and 2.14.1 alike, [2,10,6,6] split
 * [4,6]: +1152 B before the conv's reorders, freed after its output, and
 * +1728 B first in the second conv's backward); at batch 1 the part is
 * contiguous and nothing is copied. PyTorch's CPU graphs from torch.onnx,
 * whose views' strides the forward tracks (forward.c). */
static void conv_input_copy(struct dm_sb *b, const struct dm_node *n, int32_t node,
                            struct dm_ws *ws)
{
    int32_t x = n->in[0];
    if (b->run->cuda || !dm_sb_torch_onnx(b) || b->resident[x] >= 0 || b->t[x].rank != 4 ||
        dm_sb_dense_in(b, x, b->chlast[x]))
        return;
    ws->buf[DM_WS_COPY] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, b->t[x].dtype, b->t[x].bytes, -1,
                                      node, "input.contiguous(memory_format)", 1);
}

/* SelectiveScan's loop in the forward (ops.def): each step makes
 * dA[:, :, i] * state, then the new state from it, [B, D, N] each; without
 * autograd the previous state is freed only when the new one is bound, so
 * the product and the previous state live while a step runs (in training
 * the states are kept: save.c's keep_scan). */
static void scan_scratch(struct dm_sb *b, const struct dm_node *n, int32_t node, bool backward,
                         struct dm_ws *ws)
{
    if (n->op != DM_OP_SelectiveScan || backward || !dm_has_out(n, 1))
        return;
    const struct dm_tinfo *st = &b->t[n->out[1]];
    ws->buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, st->dtype, st->bytes, -1, node,
                             "dA[:, :, i] * state", 1);
    if (!b->train)
        ws->buf[1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, st->dtype, st->bytes, -1, node,
                                 "the previous state", 1);
}

/* The CPU flash kernel's per-thread scratch (cpu_flash_attention and its
 * backward in aten/src/ATen/native/cpu/FlashAttentionKernel.cpp), freed when
 * the op returns. Blocks of qS query rows by kvS keys: qS = 32, 64 from 192
 * query rows, 256 from 768, at most S; kvS = min(512, keys). Forward: a
 * float32 [threads, qS * kvS + 2 * qS + qS * D] (scores, row max, row sum,
 * output accumulator), and for fp16/bf16 a [threads, qS, kvS] of that type;
 * backward: a float32 [threads, 2 * qS * kvS] (probabilities and their
 * grad), the fp16/bf16 copy of it, and a float32 [qS]. Measured on 2.13
 * (profiler, aten::empty in the op): S 40 D 16: 7424 B forward, 10240 + 128 B
 * backward; S 256 D 32: 74240, 131072 + 256; S 1024 D 32: 559104, 1048576 +
 * 1024; two threads double the per-thread buffers. --cpu-threads unset: one
 * thread's set, as the CPU convolutions take. */
static void cpu_flash_scratch(struct dm_sb *b, const struct dm_node *n, int32_t node,
                              bool backward, struct dm_ws *ws)
{
    const struct dm_tinfo *q = &b->t[n->in[0]], *k = &b->t[n->in[1]];
    if (q->rank != 4 || k->rank != 4)
        return;
    int64_t s = q->dims[2], d = q->dims[3], keys = k->dims[2];
    int64_t qs = s >= 768 ? 256 : s >= 192 ? 64 : 32, kvs = keys < 512 ? keys : 512;
    if (qs > s)
        qs = s;
    int64_t threads = b->run->cpu_threads > 0 ? b->run->cpu_threads : 1, blk, e;
    enum dm_dtype dt = sdpa_dtype(b, n);
    bool half = dt == DM_FLOAT16 || dt == DM_BFLOAT16;
    uint64_t bytes;
    if (!dm_mul_ok(qs, kvs, &blk))
        return;
    int64_t per = backward ? 2 * blk : blk + 2 * qs + qs * d; /* < blk * 3 + qs * d: no overflow */
    if (dm_mul_ok(threads, per, &e) && dm_dtype_bytes(DM_FLOAT, e, &bytes))
        ws->buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, bytes, -1, node,
                                 backward ? "cpu_flash_grad_buf" : "cpu_flash_buf", 1);
    if (half && dm_mul_ok(threads, backward ? 2 * blk : blk, &e) && dm_dtype_bytes(dt, e, &bytes))
        ws->buf[1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, dt, bytes, -1, node,
                                 backward ? "cpu_flash_grad_buf_reduced" : "cpu_flash_qk_reduced",
                                 1);
    if (backward && dm_dtype_bytes(DM_FLOAT, qs, &bytes))
        ws->buf[2] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, bytes, -1, node,
                                 "cpu_flash_grad_dsum", 1);
}

/* XLA's CPU convolutions run NHWC (measured: jax 0.10.2's CPU dumps of
 * tests/validation/jax-cpu.jsonl's CNN; the CPU layout assignment gives a
 * convolution its input, weight and output in NHWC / HWIO / NHWC, with
 * transposes around it, transpose_copy_fusion): forward, the input's NHWC
 * copy, made just before the convolution and dead once it has run
 * (cnn-b8-infer-f32: f32[8,64,64,3] beside ynn_fusion.8's f32[8,64,64,64]
 * output); backward, the output gradient's NHWC copy for the input
 * gradient's convolution and the input gradient in NHWC before its
 * transpose back (cnn-b8-sgd-f32: transpose_copy_fusion.13 and
 * ynn_fusion.11). The convolution's own output is NHWC without its bias:
 * the bias add and what follows fuse into the transpose back to NCHW, a
 * new value (xla.c, rule 8). The weights' transposes are xla.c's too. */
static void xla_cpu_conv(struct dm_sb *b, const struct dm_node *n, int32_t node, bool backward,
                         struct dm_ws *ws)
{
    if (n->op != DM_OP_Conv || !dm_has_in(n, 0) || !dm_has_out(n, 0))
        return;
    const struct dm_tinfo *x = &b->t[n->in[0]], *y = &b->t[n->out[0]];
    if (!backward) {
        ws->buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, x->dtype, x->bytes, -1, node,
                                 "input (NHWC, XLA CPU)", 1);
        return;
    }
    ws->buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, y->dtype, y->bytes, -1, node,
                             "output grad (NHWC, XLA CPU)", 1);
    ws->buf[1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, x->dtype, x->bytes, -1, node,
                             "input grad (NHWC, XLA CPU)", 1);
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
    struct dm_cpu_conv cv;
    if (b->run->cuda) {
        if (calls_cublas(n->op) && b->run->cublas_workspace && !b->blas_handle[backward]) {
            b->blas_handle[backward] = true;
            dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_UINT8, b->run->cublas_workspace, -1, -1,
                        backward ? "cublas_workspace (autograd thread)" : "cublas_workspace",
                        DM_SB_PINNED);
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
    } else if (b->run->xla) {
        xla_cpu_conv(b, n, node, backward, &ws);
    } else if (n->op == DM_OP_Attention && dm_has_in(n, 1)) {
        cpu_flash_scratch(b, n, node, backward, &ws);
    } else if (conv_desc(b, n, &cv)) {
        conv_input_copy(b, n, node, &ws);
        if (backward)
            cv.cl_copy = grad_output_copy(b, n, &cv);
        struct ws_ctx ctx = {.b = b, .node = node};
        struct dm_ws_sink sink = {.ctx = &ctx, .alloc = ws_alloc, .unref = ws_unref};
        dm_cpu_conv_begin(&cv, b->run, &sink, backward, &ws);
    }
    contiguous_copy(b, n, node, backward, &ws);
    int64_t rows = backward ? 0 : dm_norm_unsaved_rows(b, n);
    uint64_t stat;
    for (int k = 0; rows > 0 && k < 2 && dm_dtype_bytes(DM_FLOAT, rows, &stat); k++)
        ws.buf[k] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, stat, -1, node,
                                k ? "rstd (not saved)" : "mean (not saved)", 1);
    scan_scratch(b, n, node, backward, &ws);
    group_norm_113_copies(b, n, node, backward, &ws);
    return ws;
}

void dm_sb_workspace_end(struct dm_sb *b, struct dm_ws *ws)
{
    for (int k = 0; k < DM_WS_BUFS; k++) {
        dm_sb_unref(b, ws->buf[k]);
        ws->buf[k] = -1;
    }
}
