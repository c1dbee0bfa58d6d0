/*
 * workspace.c: the buffers the libraries an op calls make around it (cuBLAS,
 * cuDNN, FlashAttention's backward, oneDNN on the CPU, the kernels of
 * quantized layers), for the forward pass and the backward alike; and the
 * kernel choices (SDPA's backend, a quantized layer's path) the saved
 * tensors depend on. Stands on the builder only.
 */
#include "schedule/builder.h"

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

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Query rows of the fp32 log-sum-exp a fused Attention node keeps for its
 * backward: S for flash, S rounded up to 32 for the memory-efficient kernel
 * (kAlignLSE). */
int64_t dm_sdpa_lse_rows(const struct dm_sb *b, const struct dm_node *n)
{
    int64_t s = b->t[n->in[0]].dims[2];
    return dm_sdpa_flash(b, n) ? s : round_up(s, 32);
}

/* PyTorch's CPU backend for a 1-D or 2-D Conv (_select_conv_backend and
 * ConvParams::use_mkldnn, aten/src/ATen/native/Convolution.cpp; the same rule
 * in 1.13 and 2.x): float32 goes to oneDNN unless THNN is faster: a 1x1,
 * unstrided, undilated kernel with batch < 16 on one thread, or at any thread
 * count a tiny ungrouped one (batch 1, not both kernel sides > 3, at most
 * 20480 input elements). The rest, and float64, go to Slow2d (THNN's im2col and
 * gemm), or SlowDilated2d when dilated. Checked against 2.14.1's
 * torch._C._select_conv_backend on 2880 float32 shapes at 1 and 2 threads. */
enum cpu_conv { CPU_CONV_OTHER, CPU_CONV_ONEDNN, CPU_CONV_SLOW2D };

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

static enum cpu_conv cpu_conv_backend(const struct dm_sb *b, const struct dm_node *n)
{
    if (!dm_has_in(n, 0) || !dm_has_in(n, 1) || n->op != DM_OP_Conv)
        return CPU_CONV_OTHER;
    const struct dm_tinfo *in = &b->t[n->in[0]], *w = &b->t[n->in[1]];
    if ((in->dtype != DM_FLOAT && in->dtype != DM_DOUBLE) || (in->rank != 3 && in->rank != 4) ||
        w->rank != in->rank)
        return CPU_CONV_OTHER;
    bool strided = attr_not_ones(n, "strides"), dilated = attr_not_ones(n, "dilations");
    /* a 1-D conv runs as the 2-D one of its [N, C, 1, L] view (view4d) */
    int64_t kh = in->rank == 4 ? w->dims[2] : 1, kw = w->dims[w->rank - 1], batch = in->dims[0];
    if (in->dtype == DM_FLOAT && dm_cpu_conv_onednn(batch, kh, kw, strided, dilated,
                                                    dm_attr_int(n, "group", 1), in->numel,
                                                    b->run->cpu_threads))
        return CPU_CONV_ONEDNN;
    return dilated ? CPU_CONV_OTHER : CPU_CONV_SLOW2D;
}

static bool cpu_conv_uses_onednn(const struct dm_sb *b, const struct dm_node *n)
{
    return cpu_conv_backend(b, n) == CPU_CONV_ONEDNN;
}

/* The im2col columns of an ungrouped Slow2d conv (compute_columns2d,
 * aten/src/ATen/native/ConvolutionMM2d.cpp, 1.11 and later): at::empty({N,
 * C*kh*kw, OH*OW}) of the input's dtype ({N, OH*OW, kh*kw*C} channels last:
 * the same bytes), the whole batch at once; none for a 1x1 kernel with stride
 * 1 and no padding, whose columns are a view of the input. The forward makes
 * them before its output and frees them once it is computed; the backward
 * makes them again for the weight's grad, after the input's, the bias's and
 * the weight's grads, and frees them before it returns (measured, 2.14.1 at 1
 * thread: [1,20,32,32] with a 3x3 kernel, 737280 B both times). grad_input's
 * per-thread fgrad_input is a std::make_unique array, outside c10's
 * allocator. Before 1.11 (pytorch/pytorch#65219, #68896) the forward
 * returned its columns (finput) and autograd kept them for the backward: not
 * modelled. 0 when the conv is not such a conv, or under another framework. */
static uint64_t thnn_columns(const struct dm_sb *b, const struct dm_node *n)
{
    if (b->run->cuda || b->run->tf_ops || b->run->mx_ops || b->run->xla ||
        b->run->torch_version < 111 ||
        cpu_conv_backend(b, n) != CPU_CONV_SLOW2D || dm_attr_int(n, "group", 1) != 1 ||
        !dm_has_out(n, 0))
        return 0;
    const struct dm_tinfo *x = &b->t[n->in[0]], *w = &b->t[n->in[1]], *y = &b->t[n->out[0]];
    if (y->rank != x->rank)
        return 0;
    /* the kernel's and the output's spatial elements (1-D: the [N, C, 1, L]
     * view's); a 1x1 unstrided kernel is unpadded exactly when the output
     * keeps the input's spatial size */
    int64_t k = 1, o = 1, e;
    bool same = true;
    for (int d = 2; d < x->rank; d++) {
        if (!dm_mul_ok(k, w->dims[d], &k) || !dm_mul_ok(o, y->dims[d], &o))
            return 0;
        same &= y->dims[d] == x->dims[d];
    }
    if (k == 1 && same && !attr_not_ones(n, "strides"))
        return 0;
    uint64_t bytes;
    if (!dm_mul_ok(x->dims[0], x->dims[1], &e) || !dm_mul_ok(e, k, &e) || !dm_mul_ok(e, o, &e) ||
        !dm_dtype_bytes(x->dtype, e, &bytes))
        return 0;
    return bytes;
}

/* A Slow2d conv with a channels-last input (layout.c) runs channels-last
 * (thnn_conv_use_channels_last in 2.x): _convolution, and convolution_backward
 * again, make weight.contiguous(channels_last), a weight-sized copy unless the
 * weight has one in channel per group or a 1x1 kernel, made before the
 * columns and live until the call returns (measured, 2.14.1: a 3x3 [24,20]
 * conv on a channels-last [1,20,32,32] input, +17280 B). */
static void thnn_weight_copy(struct dm_sb *b, const struct dm_node *n, int32_t node, struct dm_ws *ws)
{
    if (b->run->torch_version < 200 || b->run->tf_ops || b->run->mx_ops || b->run->xla ||
        cpu_conv_backend(b, n) != CPU_CONV_SLOW2D || !b->chlast[n->in[0]])
        return;
    const struct dm_tinfo *w = &b->t[n->in[1]];
    if (w->rank == 4 && w->dims[1] > 1 && w->dims[2] * w->dims[3] > 1)
        ws->buf[1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, w->dtype, w->bytes, -1, node,
                                 "weight (channels last)", 1);
}

uint64_t dm_sb_grad_scratch(const struct dm_sb *b, const struct dm_node *n)
{
    return thnn_columns(b, n);
}

/* use_mkldnn's test for a float32 conv (shared with captured steps,
 * src/estimate/captured.c) */
bool dm_cpu_conv_onednn(int64_t batch, int64_t kh, int64_t kw, bool strided, bool dilated,
                        int64_t groups, int64_t in_numel, int cpu_threads)
{
    bool several_threads = cpu_threads != 1;
    bool first = strided || dilated || batch >= 16 || kw != 1 || kh != 1 || several_threads;
    bool second = groups > 1 || (kw > 3 && kh > 3) || batch > 1 || in_numel > 20480;
    return first && second;
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

/* ---- oneDNN's convolutions on the CPU, PyTorch 2.x ------------------------------ */

/* 2.x's _mkldnn_convolution (aten/src/ATen/native/mkldnn/Conv.cpp) hands a
 * plain NCHW input to ideep's convolution_forward, which reorders source and
 * weights into the layouts oneDNN picks for format_tag::any and computes into
 * an ideep-owned destination of that layout; mkldnn_to_dense then allocates
 * the ATen output and reorders into it. All of ideep's buffers, the primitive's
 * scratchpad included (ideep runs oneDNN in user-scratchpad mode), come from
 * c10's CPU allocator. The layouts are oneDNN's x64 JIT kernels' on AVX-512,
 * where a channel block is one register of 16 floats (nChw16c), on AVX2 8
 * (--cpu-isa). Measured with torch 2.14.1 on one thread, op by op (the
 * profiler's allocation events; AVX2 under ONEDNN_MAX_CPU_ISA=AVX2):
 * tests/unit/test-estimate.c test_onednn_conv_2x. */
static int64_t onednn_block(const struct dm_sb *b)
{
    return b->run->cpu_isa == DNNMEM_CPU_ISA_AVX2 ? 8 : 16;
}

/* The kernels that serve a float32 convolution, by the shape of its groups. */
enum onednn_kernel {
    ONEDNN_DEPTHWISE, /* one in and one out channel per group: Goihw16g weights */
    ONEDNN_FIRST,     /* ungrouped, not 1x1, fewer in channels than a block: the
                         "first convolution" kernel reads NCHW as it is, weights
                         blocked on the out channels only */
    ONEDNN_BLOCKED,   /* ungrouped: nChw16c source and destination, OIhw16i16o weights */
    ONEDNN_GROUPED,   /* grouped, out channels per group a multiple of 8 (AVX2: in
                         channels too): a copy of the source, weights and destination
                         of their own sizes */
    ONEDNN_GEMM,      /* other grouped ones: gemm_convolution on the NCHW source, an
                         im2col scratchpad, the destination plain */
};

struct onednn_conv {
    enum onednn_kernel kernel;
    int64_t n, c, hw, oc, ohw, k, g; /* k: kernel elements (kh * kw) */
    int64_t block;                   /* onednn_block */
    bool bias, strided, strided_1x1, small_kernel; /* small: kh, kw <= 3 */
};

static bool onednn_conv_of(const struct dm_sb *b, const struct dm_node *n, struct onednn_conv *c)
{
    if (!dm_has_out(n, 0))
        return false;
    const struct dm_tinfo *x = &b->t[n->in[0]], *w = &b->t[n->in[1]], *y = &b->t[n->out[0]];
    if (x->rank != 4 || y->rank != 4)
        return false;
    int64_t cnt;
    const int64_t *st = dm_attr_ints(n, "strides", &cnt);
    bool strided = false;
    for (int64_t k = 0; st && k < cnt; k++)
        strided |= st[k] != 1;
    *c = (struct onednn_conv){.n = x->dims[0], .c = x->dims[1], .hw = x->dims[2] * x->dims[3],
                              .oc = y->dims[1], .ohw = y->dims[2] * y->dims[3],
                              .k = w->dims[2] * w->dims[3], .g = dm_attr_int(n, "group", 1),
                              .bias = dm_has_in(n, 2), .block = onednn_block(b)};
    c->strided = strided;
    c->strided_1x1 = strided && c->k == 1;
    c->small_kernel = w->dims[2] <= 3 && w->dims[3] <= 3;
    if (c->g < 1 || c->c % c->g || c->oc % c->g)
        return false;
    int64_t icg = c->c / c->g, ocg = c->oc / c->g;
    bool grouped_jit = ocg % 8 == 0 && (c->block == 16 || icg % 8 == 0);
    /* a 1x1 kernel is served by the 1x1 implementation, which has no
     * "first convolution" variant: blocked, the source reordered with its
     * channels padded (measured, 2.14.1: 12 -> 5 channels, 1x1 at stride 2 on
     * [2,12,32,32]: +16512 scratchpad, +131072 source, +1024 weight (16 x 16),
     * +32768 destination; the 3x3 one reads the source as it is) */
    c->kernel = c->g == 1 ? (c->c < c->block && c->k > 1 ? ONEDNN_FIRST : ONEDNN_BLOCKED)
                : icg == 1 && ocg == 1 ? ONEDNN_DEPTHWISE
                : grouped_jit          ? ONEDNN_GROUPED
                                       : ONEDNN_GEMM;
    return true;
}

static int64_t pad_block(const struct onednn_conv *c, int64_t n) { return round_up(n, c->block); }

/* Product of three counts, -1 when it overflows. */
static int64_t mul3(int64_t a, int64_t c, int64_t d) { return ql_mul(ql_mul(a, c), d); }

/* One entry of a oneDNN scratchpad, in bytes: what the kernel books plus the
 * 128 B alignment the registry adds to each (memory_tracking.hpp,
 * registry_t::book, default_alignment; measured: the padded bias of a
 * 24-channel output is 32 * 4 + 128 = 256 B). */
static int64_t scratch_entry(int64_t floats) { return floats > 0 ? ql_mul(floats, 4) + 128 : 0; }

/* The forward scratchpad: the bias padded to whole blocks (when the out
 * channels are not), the 1x1 strided kernel's copy of the strided source
 * ("rtus", one image per thread: one thread assumed), gemm_convolution's
 * im2col columns (one image, one group). */
static int64_t onednn_scratch(const struct onednn_conv *c)
{
    int64_t bytes = 0;
    if (c->kernel == ONEDNN_GEMM)
        return scratch_entry(mul3(c->c / c->g, c->k, c->ohw));
    if (c->kernel == ONEDNN_GROUPED)
        return 0;
    if (c->bias && c->oc % c->block)
        bytes = scratch_entry(pad_block(c, c->oc));
    if (c->strided_1x1 && c->kernel != ONEDNN_DEPTHWISE)
        bytes += scratch_entry(ql_mul(pad_block(c, c->c), c->ohw));
    return bytes;
}

/* Elements of the source, weight and destination oneDNN computes with
 * (0: it uses the plain tensor itself). */
static void onednn_sizes(const struct onednn_conv *c, int64_t *src, int64_t *wei, int64_t *dst)
{
    int64_t icg = c->c / c->g;
    switch (c->kernel) {
    case ONEDNN_DEPTHWISE:
        *src = mul3(c->n, pad_block(c, c->c), c->hw);
        *wei = ql_mul(pad_block(c, c->g), c->k);
        *dst = mul3(c->n, pad_block(c, c->oc), c->ohw);
        return;
    case ONEDNN_FIRST:
    case ONEDNN_BLOCKED:
        *src = c->kernel == ONEDNN_FIRST ? 0 : mul3(c->n, pad_block(c, c->c), c->hw);
        *wei = mul3(pad_block(c, c->oc), c->kernel == ONEDNN_FIRST ? c->c : pad_block(c, c->c), c->k);
        *dst = mul3(c->n, pad_block(c, c->oc), c->ohw);
        return;
    case ONEDNN_GROUPED:
        *src = mul3(c->n, c->c, c->hw);
        *wei = mul3(c->oc, icg, c->k);
        *dst = mul3(c->n, c->oc, c->ohw);
        return;
    case ONEDNN_GEMM:
        *src = 0;
        *wei = 0;
        *dst = mul3(c->n, c->oc, c->ohw);
        return;
    }
}

/* 2.x forward on an NCHW input, in the measured order: scratchpad, source,
 * weight, destination; weight, source and scratchpad freed; then the caller
 * allocates the ATen output and ws's destination is freed after it
 * (depthwise 3x3 stride 2 on [2,96,112,112]: +9633792 source, +3456 weight,
 * +2408448 destination, -3456, -9633792, +2408448 output, -2408448). */
static void onednn_forward_nchw(struct dm_sb *b, const struct onednn_conv *c, int32_t node,
                                struct dm_ws *ws)
{
    int64_t src, wei, dst, scratch = onednn_scratch(c);
    onednn_sizes(c, &src, &wei, &dst);
    int32_t sp = scratch ? ql_tmp(b, DM_UINT8, scratch, node, "onednn_scratchpad") : -1;
    int32_t xs = src ? ql_tmp(b, DM_FLOAT, src, node, "onednn_input") : -1;
    int32_t ws_w = wei ? ql_tmp(b, DM_FLOAT, wei, node, "onednn_weight") : -1;
    ws->buf[0] = ql_tmp(b, DM_FLOAT, dst, node, "onednn_output");
    dm_sb_unref(b, ws_w);
    dm_sb_unref(b, xs);
    dm_sb_unref(b, sp);
}

/* 2.x backward on an NCHW input, pass by pass (mkldnn_convolution_backward,
 * Conv.cpp: ideep's backward_data for grad_input, then backward_weights).
 * Measured (dense 3x3, 40 -> 48 channels on [2,40,16,16]): +gy' +w' +gx'
 * -w' -gy' +gx -gx' (grad_output and the weight reordered, a blocked
 * grad_input reordered into the ATen one), then +gy' +x' +dw' +db' -x' -gy'
 * +gb +gw -dw' -db' (grad_output and the source reordered again, blocked
 * weight and bias grads). The first-convolution kernel's backward-data is
 * blocked too (16 in channels); its backward-weights reads the source as it
 * is. gemm_convolution and depthwise kernels over 3x3 (whose
 * backward-weights takes a scratchpad instead) keep the 1.13 rule. */
static bool onednn_bwd_phased(const struct dm_sb *b, const struct dm_node *n, struct onednn_conv *c)
{
    return b->run->torch_version >= 200 && !b->run->cuda && cpu_conv_uses_onednn(b, n) &&
           onednn_conv_of(b, n, c) && !b->chlast[n->in[0]] && c->kernel != ONEDNN_GEMM &&
           !(c->kernel == ONEDNN_DEPTHWISE && !c->small_kernel);
}


/* Whether a channels-last conv runs the brgemm kernels (onednn_brgemm_forward). */
static bool onednn_brgemm(const struct onednn_conv *c)
{
    return c->kernel != ONEDNN_DEPTHWISE && (c->g == 1 || c->oc / c->g > c->block);
}

/* Padded to the brgemm kernel's blocks of min(max, pad_simd(n)) channels. */
static int64_t brgemm_pad(const struct onednn_conv *c, int64_t n)
{
    int64_t max_block = c->block * (c->block == 16 ? 2 : 3);
    int64_t blk = round_up(n, c->block) < max_block ? round_up(n, c->block) : max_block;
    return round_up(n, blk);
}

static int64_t cpu_threads(const struct dm_sb *b)
{
    return b->run->cpu_threads > 0 ? b->run->cpu_threads : 1;
}

/* The brgemm backward-data pass of a channels-last conv, after grad_input
 * is allocated: the weight reordered with its in channels (the pass's
 * outputs) padded as the forward pads the out channels, and a scratchpad
 * that does not depend on the shape but on the stride: 4224 + 4120 B per
 * thread at stride 1, 12288 + 24600 B per thread when strided; both freed
 * before the backward-weights pass (measured, 2.14.1: 8 -> 12 channels 3x3
 * on [2,8,16,16]: +6912 (12 x 16 x 9 floats), +8344, or +36888 at stride 2;
 * 12464 and 61488 on two threads; 24 -> 24, 24 -> 40, 72 -> 72 channels,
 * 8x8 to 32x32 images, batch 2 and 4 alike). */
static void onednn_brgemm_backward_data(struct dm_sb *b, const struct onednn_conv *c, int32_t node)
{
    int64_t t = cpu_threads(b);
    int64_t scratch = c->strided ? ql_mul(t, 24600) + 12288 : ql_mul(t, 4120) + 4224;
    int32_t wr = ql_tmp(b, DM_FLOAT, mul3(c->oc, brgemm_pad(c, c->c / c->g) * c->g, c->k), node,
                        "onednn_weight (backward data)");
    dm_sb_unref(b, ql_tmp(b, DM_UINT8, scratch, node, "onednn_scratchpad (backward data)"));
    dm_sb_unref(b, wr);
}

/* The forward of a channels-last input (nhwc source and destination) runs
 * oneDNN's brgemm convolution when the conv is ungrouped or has more out
 * channels per group than a vector holds: its weights are blocked on the out
 * channels, each group's padded to whole blocks of min(max, pad_simd(ocg))
 * (AVX-512: 16 or 32, AVX2: 8, 16 or 24), the in channels left as they are,
 * and it books a scratchpad of 4096 + 4120 B per thread whatever the shape.
 * Measured with torch 2.14.1 (the profiler's allocation events under
 * mkldnn_convolution, a [N, H, W, C].permute(0, 3, 1, 2) input): AVX-512 oc
 * 8 -> 16, 24 -> 32, 40 and 48 -> 64, 72 and 80 -> 96, 136 -> 160, 200 ->
 * 224, 2 groups of 24 -> 2 x 32; AVX2 (ONEDNN_MAX_CPU_ISA=AVX2) 12 -> 16,
 * 16, 24, 40 -> 48, 72, 136 -> 144; in channels 3 to 512, kernels 1x1 to
 * 7x7, batch 1 to 16, 4x4 to 32x32 images alike; the scratchpad
 * 8216 B on one thread, 12336 on two, 20576 on four. Grouped convs with at
 * most a vector of out channels per group (4 groups of 16) take the weight
 * unpadded and no scratchpad. */
static void onednn_brgemm_forward(struct dm_sb *b, const struct onednn_conv *c, int32_t node,
                                  struct dm_ws *ws)
{
    int64_t icg = c->c / c->g, ocg = c->oc / c->g;
    ws->buf[2] = ql_tmp(b, DM_UINT8, ql_mul(cpu_threads(b), 4120) + 4096, node, "onednn_scratchpad");
    ws->buf[1] = ql_tmp(b, DM_FLOAT, mul3(ql_mul(c->g, brgemm_pad(c, ocg)), icg, c->k), node,
                        "onednn_weight");
}

/* 2.x with a channels-last input (mkldnn_conv_use_channels_last): the input
 * and the weight are made .contiguous(channels_last) (the weight is copied
 * unless it has one in channel per group or a 1x1 kernel), oneDNN writes the
 * ATen output directly and reorders the weight for the call (the brgemm
 * kernel's blocks: onednn_brgemm_forward). Backward
 * writes grad_input directly too; the backward-weights kernel computes into
 * a diff_weights buffer and reorders it into the weight's grad. Measured:
 * that buffer is Goihw16g (pad16(g) * kh * kw floats) for a depthwise conv
 * with a kernel up to 3x3, and whole 16x16 blocks per group otherwise,
 * g * pad16(oc/g) * pad16(ic/g) * kh * kw floats: 256 times the weight of a
 * larger depthwise kernel (19267584 B for ConvNeXt-T's 7x7 depthwise conv on
 * [1,384,10,10], whose LayerNorm2d leaves channels-last strides; 614400 B
 * for a 5x5 one with 24 channels). */
/* The backward-weights pass's buffers of a channels-last conv (below). */
static void onednn_cl_weight_grad(struct dm_sb *b, const struct onednn_conv *c, int32_t node,
                                  struct dm_ws *ws)
{
    int64_t icg = c->c / c->g, ocg = c->oc / c->g;
    int64_t wei = mul3(c->oc, icg, c->k), dw_wei = ql_mul(pad_block(c, c->g), c->k);
    /* an ungrouped conv's in channels are left as they are below a block
     * (measured: 8 -> 12 channels 3x3, 16 x 8 x 9 floats) */
    int64_t icp = c->g == 1 && icg < c->block ? icg : pad_block(c, icg);
    int64_t blocks = mul3(c->g, ql_mul(pad_block(c, ocg), icp), c->k);
    ws->buf[1] = ql_tmp(b, DM_FLOAT,
                        c->kernel == ONEDNN_DEPTHWISE && c->small_kernel ? dw_wei : blocks, node,
                        "onednn_diff_weights");
    /* and a second weight-sized tensor beside the weight's grad while
     * both live (measured: +w +w -w after the bias grad, depthwise and
     * dense alike; for a dense one the grad comes out channels-last and
     * .to() copies it into the parameter's layout) */
    ws->buf[2] = ql_tmp(b, DM_FLOAT, wei, node, "grad_weight (channels last)");
}

static void onednn_channels_last(struct dm_sb *b, const struct onednn_conv *c, int32_t node,
                                 bool backward, struct dm_ws *ws)
{
    int64_t icg = c->c / c->g;
    int64_t wei = mul3(c->oc, icg, c->k), dw_wei = ql_mul(pad_block(c, c->g), c->k);
    bool dw = c->kernel == ONEDNN_DEPTHWISE;
    if (icg > 1 && c->k > 1)
        ws->buf[0] = ql_tmp(b, DM_FLOAT, wei, node, "weight (channels last)");
    if (backward) {
        /* the brgemm kernels' passes, one at a time: dm_sb_workspace_grad */
        if (!onednn_brgemm(c))
            onednn_cl_weight_grad(b, c, node, ws);
        return;
    }
    if (onednn_brgemm(c))
        onednn_brgemm_forward(b, c, node, ws);
    else
        ws->buf[1] = ql_tmp(b, DM_FLOAT, dw ? dw_wei : wei, node, "onednn_weight");
}

/* A channels-last conv's backward by the brgemm kernels: the backward-data
 * pass's buffers once grad_input is allocated, then the backward-weights
 * pass's before the weight's grad. */
static bool onednn_brgemm_bwd(struct dm_sb *b, const struct dm_node *n, int k, struct dm_ws *ws,
                              bool after)
{
    struct onednn_conv c;
    if (b->run->torch_version < 200 || b->run->cuda || !cpu_conv_uses_onednn(b, n) ||
        !onednn_conv_of(b, n, &c) || !b->chlast[n->in[0]] || !onednn_brgemm(&c))
        return false;
    int32_t node = (int32_t)(n - b->g->nodes);
    if (k == 0 && after)
        onednn_brgemm_backward_data(b, &c, node);
    if (k == 1 && !after)
        onednn_cl_weight_grad(b, &c, node, ws);
    return true;
}

/* The backward-data pass of a strided, ungrouped conv on an NCHW input
 * runs the brgemm kernel on nhwc copies: grad_output (unpadded), the weight
 * (its in channels padded as onednn_brgemm_forward pads out channels) and
 * an nhwc grad_input, with the strided scratchpad of
 * onednn_brgemm_backward_data; after the ATen grad_input, an input-sized
 * temporary of the copy back to NCHW, freed with the nhwc one. Measured,
 * 2.14.1, one thread, [2,76,16,16] -> 12 channels at stride 2, 1x1 and 3x3
 * alike: +6144 +4608 (12 x 96 floats) +155648 +36888 -36888 -4608 -6144,
 * +155648 (grad_input) +155648, -155648 -155648; [2,64,16,16]: +6144 +3072
 * +131072 +36888. */
static void onednn_strided_backward_data(struct dm_sb *b, const struct onednn_conv *c, int32_t node,
                                         struct dm_ws *ws, bool after)
{
    int64_t x = mul3(c->n, c->c, c->hw);
    if (after) {
        dm_sb_unref(b, ql_tmp(b, DM_FLOAT, x, node, "grad_input (to NCHW)"));
        dm_sb_unref(b, ws->buf[0]);
        ws->buf[0] = -1;
        return;
    }
    int32_t gy = ql_tmp(b, DM_FLOAT, mul3(c->n, c->oc, c->ohw), node, "onednn_grad_output (nhwc)");
    int32_t wr = ql_tmp(b, DM_FLOAT, mul3(c->oc, brgemm_pad(c, c->c), c->k), node,
                        "onednn_weight (backward data)");
    ws->buf[0] = ql_tmp(b, DM_FLOAT, x, node, "onednn_grad_input (nhwc)");
    dm_sb_unref(b, ql_tmp(b, DM_UINT8, ql_mul(cpu_threads(b), 24600) + 12288, node,
                          "onednn_scratchpad (backward data)"));
    dm_sb_unref(b, wr);
    dm_sb_unref(b, gy);
}

void dm_sb_workspace_grad(struct dm_sb *b, const struct dm_node *n, int k, struct dm_ws *ws,
                          bool after)
{
    struct onednn_conv c;
    if (k > 1 || onednn_brgemm_bwd(b, n, k, ws, after) || !onednn_bwd_phased(b, n, &c))
        return;
    int32_t node = (int32_t)(n - b->g->nodes);
    if (k == 0 && c.strided && c.kernel == ONEDNN_BLOCKED) {
        onednn_strided_backward_data(b, &c, node, ws, after);
        return;
    }
    int64_t src, wei, dst;
    onednn_sizes(&c, &src, &wei, &dst);
    if (after) { /* the blocked grad_input, once copied out */
        if (k == 0) {
            dm_sb_unref(b, ws->buf[0]);
            ws->buf[0] = -1;
        }
        return;
    }
    int32_t gy = ql_tmp(b, DM_FLOAT, dst, node, "onednn_grad_output");
    if (k == 0) {
        int64_t w_bd = c.kernel == ONEDNN_FIRST ? mul3(pad_block(&c, c.oc), pad_block(&c, c.c), c.k) : wei;
        int64_t gx = c.kernel == ONEDNN_GROUPED ? src : mul3(c.n, pad_block(&c, c.c), c.hw);
        int32_t wr = ql_tmp(b, DM_FLOAT, w_bd, node, "onednn_weight");
        ws->buf[0] = ql_tmp(b, DM_FLOAT, gx, node, "onednn_grad_input");
        dm_sb_unref(b, wr);
    } else {
        int32_t xr = src ? ql_tmp(b, DM_FLOAT, src, node, "onednn_input") : -1;
        ws->buf[1] = ql_tmp(b, DM_FLOAT, wei, node, "onednn_diff_weights");
        if (c.bias)
            ws->buf[2] = ql_tmp(b, DM_FLOAT, c.kernel == ONEDNN_GROUPED ? c.oc : pad_block(&c, c.oc),
                                node, "onednn_diff_bias");
        dm_sb_unref(b, xr);
    }
    dm_sb_unref(b, gy);
}

/* oneDNN's buffers around a CPU convolution (forward or backward). */
static void onednn_workspace(struct dm_sb *b, const struct dm_node *n, int32_t node, bool backward,
                             struct dm_ws *ws)
{
    const struct dm_tinfo *x = &b->t[n->in[0]], *w = &b->t[n->in[1]];
    const struct dm_tinfo *y = dm_has_out(n, 0) ? &b->t[n->out[0]] : x;
    struct onednn_conv c;
    if (b->run->torch_version >= 200 && onednn_conv_of(b, n, &c)) {
        if (b->chlast[n->in[0]]) {
            onednn_channels_last(b, &c, node, backward, ws);
            return;
        }
        if (!backward) {
            onednn_forward_nchw(b, &c, node, ws);
            return;
        }
        if (onednn_bwd_phased(b, n, &c))
            return; /* dm_sb_workspace_grad */
    }
    /* 1.13 (and 2.x's NCHW backward): forward computes into a buffer of its
     * own and reorders the weight, then copies into the ATen output; backward
     * takes weight- and input-sized scratch (tests/validation/README.md,
     * measured on 1.13) */
    ws->buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, backward ? w->bytes : y->bytes,
                             -1, node, backward ? "onednn_weight_scratch" : "onednn_output", 1);
    ws->buf[1] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, DM_FLOAT, backward ? x->bytes : w->bytes,
                             -1, node, backward ? "onednn_input_scratch" : "onednn_weight", 1);
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

/* Autograd runs backward on a device thread of its own, which takes a second
 * cuBLAS handle from the pool, so training keeps two workspaces (inferred from
 * the handle pool's per-thread keying; runtime-facts.md §5.2). */
struct dm_ws dm_sb_workspace_begin(struct dm_sb *b, const struct dm_node *n, bool backward)
{
    struct dm_ws ws;
    for (int k = 0; k < DM_WS_BUFS; k++)
        ws.buf[k] = -1;
    int32_t node = (int32_t)(n - b->g->nodes);
    uint64_t columns;
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
    } else if (cpu_conv_backend(b, n) == CPU_CONV_SLOW2D) {
        thnn_weight_copy(b, n, node, &ws);
        if (!backward && (columns = thnn_columns(b, n)) > 0)
            ws.buf[0] = dm_sb_alloc(b, DNNMEM_CAT_WORKSPACE, b->t[n->in[0]].dtype, columns, -1,
                                    node, "thnn_columns", 1);
    } else if (cpu_conv_uses_onednn(b, n)) {
        onednn_workspace(b, n, node, backward, &ws);
    }
    contiguous_copy(b, n, node, backward, &ws);
    return ws;
}

void dm_sb_workspace_end(struct dm_sb *b, struct dm_ws *ws)
{
    for (int k = 0; k < DM_WS_BUFS; k++) {
        dm_sb_unref(b, ws->buf[k]);
        ws->buf[k] = -1;
    }
}
