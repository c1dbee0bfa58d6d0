/*
 * cpuconv.c: PyTorch's CPU convolutions, the kernel each shape goes to (oneDNN,
 * THNN's Slow2d) and the buffers that kernel makes around the op, forward and
 * backward. One set of rules for every path that schedules a CPU conv: the
 * eager schedule of a graph (workspace.c, from an ONNX Conv node and its
 * inferred tensors) and the replay of a captured step (src/estimate/
 * captured.c, from a step's "conv" facts). Each describes the conv as a
 * struct dm_cpu_conv and hands a sink that makes and frees the buffers in
 * its own schedule. Stands on the utilities only.
 */
#include "schedule/cpuconv.h"

#include <math.h>

/* One conv being scheduled: what it is, the run, where its buffers go. */
struct cc {
    const struct dm_cpu_conv *cv;
    const struct dm_run *run;
    const struct dm_ws_sink *sink;
};

static int32_t alloc(const struct cc *b, enum dm_dtype dt, uint64_t bytes, const char *what)
{
    return b->sink->alloc(b->sink->ctx, dt, bytes, what);
}

/* A transient of `numel` elements of `dt`; -1 (none) when it overflows. */
static int32_t tmp(const struct cc *b, enum dm_dtype dt, int64_t numel, const char *what)
{
    uint64_t bytes;
    if (numel < 0 || !dm_dtype_bytes(dt, numel, &bytes))
        return -1;
    return alloc(b, dt, bytes, what);
}

static void drop(const struct cc *b, int32_t buf)
{
    if (buf >= 0)
        b->sink->unref(b->sink->ctx, buf);
}

static int64_t mul(int64_t a, int64_t c)
{
    int64_t r;
    return dm_mul_ok(a, c, &r) ? r : -1;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t div_up(int64_t a, int64_t c) { return (a + c - 1) / c; }

/* PyTorch's CPU backend for a 1-D or 2-D Conv (_select_conv_backend and
 * ConvParams::use_mkldnn, aten/src/ATen/native/Convolution.cpp; the same rule
 * in 1.13 and 2.x): float32 goes to oneDNN unless THNN is faster: a 1x1,
 * unstrided, undilated kernel with batch < 16 on one thread, or at any thread
 * count a tiny ungrouped one (batch 1, not both kernel sides > 3, at most
 * 20480 input elements). The rest, and float64, go to Slow2d (THNN's im2col and
 * gemm), or SlowDilated2d when dilated. Checked against 2.14.1's
 * torch._C._select_conv_backend on 2880 float32 shapes at 1 and 2 threads. */
enum cpu_conv { CPU_CONV_OTHER, CPU_CONV_ONEDNN, CPU_CONV_SLOW2D, CPU_CONV_SLOW3D };

/* use_mkldnn's test for a float32 conv */
static bool onednn_serves(int64_t batch, int64_t kh, int64_t kw, bool strided, bool dilated,
                          int64_t groups, int64_t in_numel, int cpu_threads)
{
    bool several_threads = cpu_threads != 1;
    bool first = strided || dilated || batch >= 16 || kw != 1 || kh != 1 || several_threads;
    bool second = groups > 1 || (kw > 3 && kh > 3) || batch > 1 || in_numel > 20480;
    return first && second;
}

/* A 3-D conv takes the same test: the kernel's last two sides, and
 * size(0) * size(1) * size(2) * size(3) of the input, N * C * D * H (measured,
 * 2.14.1, torch._C._select_conv_backend and the profiler: a 3x3x3 conv on
 * [1,64,8,16,16] goes to Slow3d, 8192 elements so counted; a 3x1x1 one to
 * Slow3d at batch 2 as well; the 3x7x7 stem to oneDNN). 1.13.0 takes the same
 * backends and buffers (measured, Debian's python3-torch, AVX2: test-cpu.c
 * test_conv3d's two forwards to the byte; the zoo's mc3_18-infer-b1-i64 has
 * 2.14's peak to the byte, its Slow3d columns of 56,623,104 B). Releases
 * before 1.13 are not measured. */
/* A bfloat16 conv (the CPU's autocast) goes to oneDNN only where
 * mkldnn_bf16_device_check() holds (ATen/native/mkldnn/Utils.h: oneDNN's
 * bf16 support, AVX-512 cores and later); on AVX2 it is THNN's Slow2d /
 * Slow3d in bfloat16 (measured, torch 2.14.1 on AVX2:
 * torch._C._select_conv_backend gives Slow2d for bfloat16 where float32 gets
 * Mkldnn; python/tests/test_capture_autocast.py). oneDNN's bf16 buffers on
 * AVX-512 are not modelled (none are added there). */
static bool bf16_slow(const struct cc *b)
{
    return b->cv->x.dtype == DM_BFLOAT16 && b->run->cpu_isa == DNNMEM_CPU_ISA_AVX2;
}

static enum cpu_conv cpu_conv_backend(const struct cc *b)
{
    if (b->cv->transposed)
        return CPU_CONV_OTHER;
    const struct dm_tinfo *in = &b->cv->x, *w = &b->cv->w;
    if ((in->dtype != DM_FLOAT && in->dtype != DM_DOUBLE && !bf16_slow(b)) || in->rank < 3 ||
        in->rank > 5 || w->rank != in->rank || (in->rank == 5 && b->run->torch_version < 113))
        return CPU_CONV_OTHER;
    bool strided = b->cv->strided, dilated = b->cv->dilated;
    /* a 1-D conv runs as the 2-D one of its [N, C, 1, L] view (view4d) */
    if (in->rank == 5 && in->dims[4] <= 0)
        return CPU_CONV_OTHER;
    int64_t kh = in->rank >= 4 ? w->dims[w->rank - 2] : 1, kw = w->dims[w->rank - 1],
            batch = in->dims[0], first4 = in->rank == 5 ? in->numel / in->dims[4] : in->numel;
    if (in->dtype == DM_FLOAT && onednn_serves(batch, kh, kw, strided, dilated,
                                               b->cv->groups, first4, b->run->cpu_threads))
        return CPU_CONV_ONEDNN;
    return dilated ? CPU_CONV_OTHER : in->rank == 5 ? CPU_CONV_SLOW3D : CPU_CONV_SLOW2D;
}

static bool cpu_conv_uses_onednn(const struct cc *b)
{
    return cpu_conv_backend(b) == CPU_CONV_ONEDNN;
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
 * modelled. Slow3d (ConvolutionMM3d.cpp, 2.x) makes its vol2col columns
 * the same way, {N, C*kd*kh*kw, OD*OH*OW} (measured, 2.14.1: a 3x3x3 conv on
 * [1,64,8,16,16], 14155776 B in forward and again for the weight's grad;
 * none for an unstrided, unpadded 1x1x1 kernel); its backward's grad_input
 * pass takes one more columns-sized buffer (slow3d_grad_input_columns). 0
 * when the conv is not such a conv, or under another framework. */
static uint64_t thnn_columns(const struct cc *b)
{
    if (b->run->cuda || b->run->tf_ops || b->run->mx_ops || b->run->xla ||
        b->run->torch_version < 111 ||
        (cpu_conv_backend(b) != CPU_CONV_SLOW2D && cpu_conv_backend(b) != CPU_CONV_SLOW3D) ||
        b->cv->groups != 1 || b->cv->y.rank <= 0)
        return 0;
    const struct dm_tinfo *x = &b->cv->x, *w = &b->cv->w, *y = &b->cv->y;
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
    if (k == 1 && same && !b->cv->strided)
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
 * conv on a channels-last [1,20,32,32] input, +17280 B; 1.13.0 too, Debian's
 * python3-torch: the zoo's rand34-infer-b1-i32, whose 3x3 96 -> 96 conv after a
 * channels-last LayerNorm shows "aten::conv2d > aten::clone" of 331776 B, its
 * weight, live at the measured peak). Releases before 1.13 are not measured. */
static void thnn_weight_copy(const struct cc *b, struct dm_ws *ws)
{
    if (b->run->torch_version < 113 || b->run->tf_ops || b->run->mx_ops || b->run->xla ||
        cpu_conv_backend(b) != CPU_CONV_SLOW2D || !b->cv->chlast)
        return;
    const struct dm_tinfo *w = &b->cv->w;
    if (w->rank == 4 && w->dims[1] > 1 && w->dims[2] * w->dims[3] > 1 && !b->cv->w_chlast)
        ws->buf[1] = alloc(b, w->dtype, w->bytes, "weight (channels last)");
}

/* slow_conv2d_backward copies a grad_output not dense in its format
 * (cv->cl_copy, workspace.c grad_output_copy) once per pass, channels-last
 * or NCHW alike: before grad_input, freed once it is made, and again after
 * the weight's grad, live with the columns until the call returns; only
 * the second without grad_input (measured, 2.13.0 and 1.13.0, one thread:
 * a 1x1 16 -> 24 conv on [2,16,8,8], NCHW with a channels-last grad or
 * channels-last with a contiguous one: +12288, +8192 grad_input, -12288,
 * +96 grad_bias, +1536 grad_weight, +12288, -12288; a 3x3 3 -> 24 on
 * [1,3,4,4] channels-last: +2592 weight copy, +1536, +192, -1536, +96,
 * +2592, +1536, +1728 columns, -1728, -1536, -2592; without grad_input
 * +2592, +2592, +1536, +1728, -1728, -1536, -2592). */
static bool thnn_grad_output_copy(const struct cc *b, int k, struct dm_ws *ws, bool after)
{
    if (!b->cv->cl_copy || cpu_conv_backend(b) != CPU_CONV_SLOW2D)
        return false;
    const char *what = b->cv->chlast ? "grad_output.contiguous(channels_last)"
                                     : "grad_output.contiguous()";
    if (k == 0 || (k == 1 && after)) {
        drop(b, ws->buf[3]);
        ws->buf[3] = k == 0 && after ? -1 : alloc(b, b->cv->y.dtype, b->cv->cl_copy, what);
    }
    return true;
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
static int64_t onednn_block(const struct cc *b)
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
    bool kh_over_ih;                 /* a 2-D kernel taller than its input */
};

static bool onednn_conv_of(const struct cc *b, struct onednn_conv *c)
{
    const struct dm_tinfo *x = &b->cv->x, *w = &b->cv->w, *y = &b->cv->y;
    /* a 3-D conv (ncdhw) takes the 2-D kernels' buffers with D*H*W for the
     * spatial size (measured, 2.14.1, batch 2: a 3x3x3 64 -> 64 conv on
     * [2,64,8,16,16]: +1048576 source, +442368 weight, +1048576
     * destination, -442368, -1048576, +1048576 output, -1048576; its
     * backward the NCHW passes; the 3x7x7 stem on 3 channels the "first
     * convolution" kernel's +112896 weight (64 x 3 x 147 floats)) */
    if (x->rank < 4 || x->rank > 5 || y->rank != x->rank || w->rank != x->rank)
        return false;
    bool strided = b->cv->strided;
    int64_t hw = 1, ohw = 1, k = 1;
    bool small = true;
    for (int d = 2; d < x->rank; d++) {
        hw = mul(hw, x->dims[d]), ohw = mul(ohw, y->dims[d]), k = mul(k, w->dims[d]);
        small &= w->dims[d] <= 3;
    }
    if (hw < 0 || ohw < 0 || k < 0)
        return false;
    *c = (struct onednn_conv){.n = x->dims[0], .c = x->dims[1], .hw = hw,
                              .oc = y->dims[1], .ohw = ohw,
                              .k = k, .g = b->cv->groups,
                              .bias = b->cv->bias, .block = onednn_block(b)};
    c->strided = strided;
    c->strided_1x1 = strided && c->k == 1;
    c->small_kernel = small;
    c->kh_over_ih = x->rank == 4 && w->dims[2] > x->dims[2];
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
static int64_t mul3(int64_t a, int64_t c, int64_t d) { return mul(mul(a, c), d); }

/* One entry of a oneDNN scratchpad, in bytes: what the kernel books plus the
 * 128 B alignment the registry adds to each (memory_tracking.hpp,
 * registry_t::book, default_alignment; measured: the padded bias of a
 * 24-channel output is 32 * 4 + 128 = 256 B). */
static int64_t scratch_entry(int64_t floats) { return floats > 0 ? mul(floats, 4) + 128 : 0; }

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
        bytes += scratch_entry(mul(pad_block(c, c->c), c->ohw));
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
        *wei = mul(pad_block(c, c->g), c->k);
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
static bool onednn_gemm_forward(const struct cc *b, const struct onednn_conv *c);
static bool onednn_gemm_bwd_weights(const struct cc *b, const struct onednn_conv *c);
static bool onednn_gemm_bwd_data(const struct cc *b, const struct onednn_conv *c);
enum gemm_pass { GEMM_FORWARD, GEMM_BWD_DATA, GEMM_BWD_WEIGHTS };
static int64_t onednn_gemm_scratch(const struct cc *b, const struct onednn_conv *c,
                                   enum gemm_pass pass);
static int64_t onednn_gemm_wei_scratch(const struct cc *b, const struct onednn_conv *c,
                                       bool nspc);

/* (On AVX2 a conv the JIT forward declines runs gemm_convolution on the
 * plain source and weight: only its columns (onednn_gemm_scratch) and a
 * plain destination, in the same order; measured, 2.14.1: 3x3 64 -> 64 at
 * dilation 6 on [2,64,16,16]: +295040 +131072 -295040, +131072 output,
 * -131072.) */
static void onednn_forward_nchw(const struct cc *b, const struct onednn_conv *c, struct dm_ws *ws)
{
    int64_t src, wei, dst, scratch = onednn_scratch(c);
    onednn_sizes(c, &src, &wei, &dst);
    if (onednn_gemm_forward(b, c)) {
        src = wei = 0;
        dst = mul3(c->n, c->oc, c->ohw);
        scratch = onednn_gemm_scratch(b, c, GEMM_FORWARD);
    }
    int32_t sp = scratch ? tmp(b, DM_UINT8, scratch, "onednn_scratchpad") : -1;
    int32_t xs = src ? tmp(b, DM_FLOAT, src, "onednn_input") : -1;
    int32_t ws_w = wei ? tmp(b, DM_FLOAT, wei, "onednn_weight") : -1;
    ws->buf[0] = tmp(b, DM_FLOAT, dst, "onednn_output");
    drop(b, ws_w);
    drop(b, xs);
    drop(b, sp);
}

static bool onednn_113_avx2(const struct cc *b);
static bool onednn_113_phased(const struct cc *b);

/* 2.x backward on an NCHW input, pass by pass (mkldnn_convolution_backward,
 * Conv.cpp: ideep's backward_data for grad_input, then backward_weights).
 * Measured (dense 3x3, 40 -> 48 channels on [2,40,16,16]): +gy' +w' +gx'
 * -w' -gy' +gx -gx' (grad_output and the weight reordered, a blocked
 * grad_input reordered into the ATen one), then +gy' +x' +dw' +db' -x' -gy'
 * +gb +gw -dw' -db' (grad_output and the source reordered again, blocked
 * weight and bias grads). The first-convolution kernel's backward-data is
 * blocked too (16 in channels); its backward-weights reads the source as it
 * is. gemm_convolution and depthwise kernels over 3x3 (whose
 * backward-weights takes a scratchpad instead) keep the 1.13 rule; 1.13
 * takes these passes on AVX2 too (onednn_113_avx2). */
static bool onednn_bwd_phased(const struct cc *b, struct onednn_conv *c)
{
    return (b->run->torch_version >= 200 || onednn_113_phased(b)) && !b->run->cuda &&
           cpu_conv_uses_onednn(b) &&
           onednn_conv_of(b, c) && !b->cv->chlast && c->kernel != ONEDNN_GEMM &&
           !(c->kernel == ONEDNN_DEPTHWISE && !c->small_kernel);
}


/* Whether a channels-last conv runs the brgemm kernels (onednn_brgemm_forward). */
static bool onednn_brgemm(const struct onednn_conv *c)
{
    return c->kernel != ONEDNN_DEPTHWISE && (c->g == 1 || c->oc / c->g > c->block);
}

/* Padded to the brgemm kernel's blocks: one block of pad_simd(n) channels
 * when that is at most 32, else blocks of max (AVX-512 32, AVX2 24).
 * Measured on AVX2 (torch 2.14.1, one thread, a channels-last 3x3 conv with
 * 32 in channels on [2,32,8,8], the weight reorder under
 * mkldnn_convolution): oc 8 to 32 unpadded (one block of 4 vectors: 32 ->
 * 32, not 48), then blocks of 24: 40 -> 48, 56 and 64 -> 72, 80 -> 96, 104
 * -> 120, 128 -> 144, 160 -> 168, 176 -> 192; 32 out channels per group (2
 * and 3 groups) and 32 in channels in the backward-data pass unpadded too.
 * On AVX-512 the rule gives min(32, pad16(n)) blocks as before. */
static int64_t brgemm_pad(const struct onednn_conv *c, int64_t n)
{
    int64_t max_block = c->block * (c->block == 16 ? 2 : 3);
    int64_t one = round_up(n, c->block);
    return round_up(n, one <= 32 ? one : max_block);
}

static int64_t cpu_threads(const struct cc *b)
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
static void onednn_brgemm_backward_data(const struct cc *b, const struct onednn_conv *c)
{
    int64_t t = cpu_threads(b);
    int64_t scratch = c->strided ? mul(t, 24600) + 12288 : mul(t, 4120) + 4224;
    int32_t wr = tmp(b, DM_FLOAT, mul3(c->oc, brgemm_pad(c, c->c / c->g) * c->g, c->k), 
                        "onednn_weight (backward data)");
    drop(b, tmp(b, DM_UINT8, scratch, "onednn_scratchpad (backward data)"));
    drop(b, wr);
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
static void onednn_brgemm_forward(const struct cc *b, const struct onednn_conv *c, struct dm_ws *ws)
{
    int64_t icg = c->c / c->g, ocg = c->oc / c->g;
    ws->buf[2] = tmp(b, DM_UINT8, mul(cpu_threads(b), 4120) + 4096, "onednn_scratchpad");
    ws->buf[1] = tmp(b, DM_FLOAT, mul3(mul(c->g, brgemm_pad(c, ocg)), icg, c->k), 
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
/* On AVX2 a channels-last depthwise conv whose kernel is taller than its
 * input (kh > ih; the width does not matter) has its weight grad computed
 * by the gemm fallback, not into the blocked diff_weights above: a
 * diff_weights of the weight's own size (unpadded: 12 channels 5x5, 1200 B)
 * and, freed before the weight's grad, a scratchpad of
 * T * (4 * |W| + 4 * (kh * kw * OH * OW + IH * IW)) + 384 bytes, |W| the
 * weight's bytes and T the threads. Measured, torch 2.14.1 on an AVX2 host
 * (the profiler's events of the backward, channels-last input, 'same'
 * padding, one thread unless said): 128 channels 5x5 on 2x2, 3x3, 4x4:
 * +12800 diff_weights, +52000, +52520, +53248; 7x7 on 2x2 to 6x6: +101536
 * .. +107936; 5x5 on 4x8: +54912, on 8x4 (kh <= ih): the 819200 B blocks;
 * 5x3 on 4x4: +32128, 3x5 on 4x4: blocks; 5x5 at stride 2 on 4x4: +52048;
 * 3x3 on 2x2: +18976; 12 channels 5x5 on 4x4: +6848; 4x4 two threads:
 * +106112; batch 1 to 3 alike. (One more weight-sized tensor comes and goes
 * after the weight's grad, below the peak of the three.) A dilated one
 * takes the same gemm (the depthwise JIT takes no dilation:
 * onednn_dw_bwd_weights_jit): measured, 2.14.1 and 1.13.0, 16 channels
 * 3x3 at dilation 2, padding 2, on [1,16,8,8] and [2,16,8,8]: +576
 * diff_weights, +5248 = 4 x 576 + 4 x (9 x 64 + 64) + 384; 5x5 at
 * dilation 2 on [1,16,12,12]: +1600, +21760. AVX-512 is not measured for
 * these cases and keeps the rule above. */
static bool onednn_dw_gemm_weight_grad(const struct cc *b, const struct onednn_conv *c)
{
    return b->run->cpu_isa == DNNMEM_CPU_ISA_AVX2 && c->kernel == ONEDNN_DEPTHWISE &&
           (c->kh_over_ih || b->cv->dilated);
}

static int64_t onednn_dw_gemm_scratchpad(const struct cc *b, const struct onednn_conv *c,
                                         int64_t wei)
{
    /* -1 (none) when any step overflows: mul's -1 propagates through the checks */
    int64_t cols, per_thread, all, kc = mul(c->k, c->ohw), wb = mul(16, wei);
    if (kc < 0 || wb < 0 || !dm_add_ok(kc, c->hw, &cols) || mul(4, cols) < 0 ||
        !dm_add_ok(wb, mul(4, cols), &per_thread) || mul(cpu_threads(b), per_thread) < 0 ||
        !dm_add_ok(mul(cpu_threads(b), per_thread), 384, &all))
        return -1;
    return all;
}

/* ---- oneDNN's gemm fallback on AVX2 (PyTorch 2.x, oneDNN v3.12) ------------------ */

/* A conv's geometry as oneDNN's init_conf functions read it: per dim
 * (depth, height, width; a 2-D conv's depth is 1), the input, output and
 * kernel sides, stride, dilation (oneDNN's: torch's minus 1) and the leading
 * padding. */
struct onednn_geom {
    int64_t i[3], o[3], k[3], s[3], d[3], p[3];
};

static bool onednn_geom_of(const struct cc *b, struct onednn_geom *g)
{
    const struct dm_cpu_conv *cv = b->cv;
    int sp = cv->x.rank - 2;
    if (!cv->geom || sp < 2 || sp > 3 || cv->y.rank != cv->x.rank || cv->w.rank != cv->x.rank)
        return false;
    for (int k = 0; k < 3; k++) {
        int j = k - (3 - sp); /* the conv's spatial dim, -1: the 2-D conv's depth */
        g->i[k] = j < 0 ? 1 : cv->x.dims[2 + j];
        g->o[k] = j < 0 ? 1 : cv->y.dims[2 + j];
        g->k[k] = j < 0 ? 1 : cv->w.dims[2 + j];
        g->s[k] = j < 0 ? 1 : cv->stride[j];
        g->d[k] = j < 0 ? 0 : cv->dilation[j] - 1;
        g->p[k] = j < 0 ? 0 : cv->pad[j];
        if (g->i[k] < 1 || g->o[k] < 1 || g->k[k] < 1 || g->i[k] > INT32_MAX ||
            g->k[k] > INT32_MAX || g->s[k] > INT32_MAX || g->d[k] > INT32_MAX ||
            g->p[k] > INT32_MAX)
            return false;
    }
    return true;
}

/* calculate_extended_filter_size and calculate_end_padding
 * (src/common/utils.hpp, v3.12); the sides are below 2^31, so no overflow */
static int64_t ext_k(const struct onednn_geom *g, int k) { return (g->k[k] - 1) * (g->d[k] + 1) + 1; }
static int64_t end_pad(int64_t start, int64_t o, int64_t i, int64_t s, int64_t ext)
{
    return (o - 1) * s + ext - (i + start);
}
static int64_t end_pad_of(const struct onednn_geom *g, int k)
{
    return end_pad(g->p[k], g->o[k], g->i[k], g->s[k], ext_k(g, k));
}

/* jit_avx2_conv_fwd_kernel_f32_t::init_conf (src/cpu/x64/
 * jit_avx2_conv_kernel_f32.cpp, v3.12): whether the AVX2 JIT forward takes a
 * conv on blocked (nChw8c) data. It declines when the kernel lies wholly in
 * the padding, when the left padding exceeds the width unrolling ur_w (3,
 * or the output width when narrower), when a kernel wider than 7 is padded
 * and strided, and when the right padding of the unrolled part exceeds a
 * recomputed unrolling (min(r / stride + tail, ow, 7)). */
static bool onednn_avx2_fwd_jit(const struct onednn_geom *g)
{
    for (int k = 0; k < 3; k++)
        if (ext_k(g, k) <= g->p[k] || ext_k(g, k) <= end_pad_of(g, k))
            return false;
    int64_t ow = g->o[2], iw = g->i[2], sw = g->s[2], lp = g->p[2], ekw = ext_k(g, 2);
    int64_t ur_w = ow < 3 ? ow : 3, tail = ow % ur_w;
    if (lp > ur_w)
        return false;
    if (g->k[2] > 7 && !((g->p[1] == 0 && lp == 0) || (sw == 1 && g->s[1] == 1)))
        return false;
    int64_t r = end_pad(lp, ow - tail, iw, sw, ekw);
    r = r > 0 ? r : 0;
    if (r > ur_w * sw && ow / ur_w > 1) {
        int64_t lim = ow < 7 ? ow : 7; /* num_avail_regs / 2, 15 YMMs on AVX2 */
        ur_w = r / sw + tail < lim ? r / sw + tail : lim;
        tail = ow % ur_w;
        r = end_pad(lp, ow - tail, iw, sw, ekw);
        r = r > 0 ? r : 0;
        return ur_w >= (lp > r ? lp : r);
    }
    return true;
}

/* jit_avx2_conv_bwd_weights_kernel_f32_t::init_conf (the same file): the
 * AVX2 JIT backward-weights declines any dilation, any depth padding, a
 * kernel 14 or more wide, a kernel taller than the input, a padding as
 * large as the (extended) kernel. */
static bool onednn_avx2_bwd_weights_jit(const struct onednn_geom *g)
{
    for (int k = 0; k < 3; k++) {
        int64_t e = ext_k(g, k), end = end_pad_of(g, k);
        end = end > 0 ? end : 0;
        if (g->d[k] != 0 || g->p[k] >= e || end >= e || g->k[k] > g->i[k] ||
            g->p[k] >= g->k[k] || (k == 0 && (g->p[k] != 0 || end != 0)))
            return false;
    }
    return g->k[2] < 14;
}

/* jit_avx2_conv_bwd_data_kernel_f32_t::init_conf (the same file), for an
 * unstrided conv (a strided one's backward-data is brgemm's on nhwc copies:
 * onednn_strided_backward_data): besides a kernel wholly in the padding,
 * it declines when no width unrolling ur_w (at most 15 registers: ur_w *
 * (nb_ic_blocking + 1)) covers the kernel's left overflow (ext_kw - 1 -
 * l_pad) unless ur_w is the whole width, or when the right overflow of the
 * unrolled part exceeds ur_w. ic: the in channels padded to 8. */
static bool onednn_avx2_bwd_data_jit(const struct onednn_geom *g, int64_t ic)
{
    for (int k = 0; k < 3; k++)
        if (ext_k(g, k) <= g->p[k] || ext_k(g, k) <= end_pad_of(g, k))
            return false;
    int64_t iw = g->i[2], ekw = ext_k(g, 2), l_over = (ekw - 1 - g->p[2]) / 1;
    int64_t nb_ic = div_up(round_up(ic, 8), 8), ur_w = 1, best = 0;
    l_over = l_over > 0 ? l_over : 0;
    for (int64_t blk = 1; blk <= 4; blk++) {
        if (nb_ic % blk)
            continue;
        for (int64_t u = 1; u * blk + u <= 15 && u < iw + 1; u++) {
            int64_t w = u < iw ? u : iw;
            if (l_over > w && w != iw)
                continue;
            if (w * blk > best || (w * blk == best && ur_w < w))
                ur_w = w, best = w * blk;
        }
    }
    if (best == 0)
        return false;
    int64_t r_pad = end_pad_of(g, 2), tail = iw % ur_w, r_over = (ekw - 1 - r_pad - tail) / 1;
    r_over = r_over > 0 ? r_over : 0;
    return !(r_over > ur_w || (iw > ur_w && r_pad + tail < 0));
}

/* The AVX2 rules apply to the kernels they were read for: an ungrouped,
 * not 1x1 conv (jit_avx2_1x1 and the depthwise kernels come before and have
 * rules of their own, not modelled), on an NCHW input, under 2.x. AVX-512
 * (jit_avx512_common's other thresholds) gets no such rule: it keeps the
 * JIT kernels' buffers (not measured here). */
static bool onednn_avx2_gemm_applies(const struct cc *b, const struct onednn_conv *c,
                                     struct onednn_geom *g)
{
    return b->run->cpu_isa == DNNMEM_CPU_ISA_AVX2 && b->run->torch_version >= 200 &&
           !b->cv->chlast && (c->kernel == ONEDNN_FIRST || c->kernel == ONEDNN_BLOCKED) &&
           c->k > 1 && onednn_geom_of(b, g);
}

/* PyTorch 1.13 on AVX2 (its bundled oneDNN 2.6.3, third_party/ideep/mkl-dnn
 * at v1.13.1): the forward's choice is 2.x's. jit_avx2_conv_fwd_kernel_f32::
 * init_conf (src/cpu/x64/jit_avx2_conv_kernel_f32.cpp, v2.6.3) has the same
 * checks as v3.12's (kernel_outside_src, l_pad <= ur_w, the kw > 7 rule, the
 * recomputed ur_w), and gemm_convolution_utils::init_conf's forward tiling
 * (src/cpu/gemm_convolution_utils.cpp, v2.6.3) is v3.12's, so
 * onednn_avx2_fwd_jit and onednn_gemm_scratch serve both. Measured, 1.13.0
 * (Debian's python3-torch), one thread, AVX2: 2048 -> 256 3x3 at dilation
 * 12 (pad 12) on [1,2048,12,12] +124544 scratchpad +147456 destination
 * -124544, +147456 output, -147456, no reorders (the same at dilation 24
 * and 36, with 512 in channels, and at batch 2: +124544 +294912); at
 * dilation 2 the JIT kernel's reorders (+1179648 +18874368 +147456);
 * 64 -> 64 at dilation 6 on [2,64,16,16] +295040 +131072 -295040, 2.14.1's
 * figures (test_onednn_gemm_forward_113). Only the forward: 1.13's backward
 * passes have rules of their own (onednn_weight_grad_113 and below). */
static bool onednn_gemm_forward_113(const struct cc *b, const struct onednn_conv *c,
                                    struct onednn_geom *g)
{
    return onednn_113_avx2(b) && !b->cv->chlast &&
           (c->kernel == ONEDNN_FIRST || c->kernel == ONEDNN_BLOCKED) && c->k > 1 &&
           onednn_geom_of(b, g);
}

/* The forward runs gemm_convolution: whether, and the geometry. */
static bool onednn_gemm_forward(const struct cc *b, const struct onednn_conv *c)
{
    struct onednn_geom g;
    return (onednn_avx2_gemm_applies(b, c, &g) || onednn_gemm_forward_113(b, c, &g)) &&
           !onednn_avx2_fwd_jit(&g);
}

static bool onednn_gemm_bwd_weights(const struct cc *b, const struct onednn_conv *c)
{
    struct onednn_geom g;
    return onednn_avx2_gemm_applies(b, c, &g) && !onednn_avx2_bwd_weights_jit(&g);
}

static bool onednn_gemm_bwd_data(const struct cc *b, const struct onednn_conv *c)
{
    struct onednn_geom g;
    return onednn_avx2_gemm_applies(b, c, &g) && !c->strided &&
           !onednn_avx2_bwd_data_jit(&g, c->c);
}

/* gemm_convolution's forward tiling of its im2col columns (the "!is_nspc &&
 * is_fwd" branch of gemm_convolution_utils::init_conf, src/cpu/
 * gemm_convolution_utils.cpp, v3.12): the blocks of out channels, output
 * pixels and in channels that its cost model rates best, the columns
 * holding ic_block * ks * os_block floats per thread. A port of try_cfg
 * and its candidates, float for float; l2 the per-core L2 in floats. */
struct gemm_tiling {
    int64_t mb, g, oc, ic, ks, os, sh, sw, t, l2, simd;
    float best;
    int64_t ocb, osb, icb;
};

static int64_t i_max(int64_t a, int64_t c) { return a > c ? a : c; }
static int64_t i_min(int64_t a, int64_t c) { return a < c ? a : c; }
static int64_t rnd_dn(int64_t a, int64_t c) { return a / c * c; }
static int64_t sat(int64_t lo, int64_t hi, int64_t v) { return i_max(lo, i_min(hi, v)); }

static int64_t gemm_max_icb(const struct gemm_tiling *q, int64_t ocb, int64_t osb, int64_t oc_thr,
                            int64_t os_thr)
{
    int64_t out = ocb * osb, inp_row = q->sh * q->sw * osb, col_row = q->ks * osb, icb;
    if (osb >= os_thr) { /* one pass by os */
        icb = q->l2 / (inp_row + col_row);
        if (ocb < oc_thr)
            icb = i_min(icb, (q->l2 - out) / (col_row + q->ks * ocb));
    } else
        icb = (q->l2 - out) / (inp_row + col_row + q->ks * oc_thr);
    if (icb < q->ic)
        icb = (q->l2 - out) / (inp_row + col_row + q->ks * oc_thr);
    return icb;
}

static void gemm_try(struct gemm_tiling *q, int64_t nthr_oc, int64_t ocb, int64_t osb)
{
    const int64_t spatial = q->mb * q->g * q->os, t = q->t, K = q->ic * q->ks, simd = q->simd;
    const int64_t max_oc = div_up(q->oc, nthr_oc), min_oc = i_max(1, q->oc / nthr_oc);
    const int64_t max_os = div_up(spatial, t / nthr_oc);
    ocb = sat(8, max_oc, ocb);
    osb = sat(simd, max_os, osb);
    uint64_t max_thr, min_thr;
    int64_t min_os = div_up(spatial, div_up(t, nthr_oc));
    if (q->oc % nthr_oc > t % nthr_oc)
        max_thr = (uint64_t)(max_oc * max_os);
    else
        max_thr = (uint64_t)i_max(max_oc * min_os, min_oc * max_os);
    min_os = i_max(1, spatial / div_up(t, nthr_oc));
    if (t % nthr_oc > q->oc % nthr_oc)
        min_thr = (uint64_t)(min_oc * min_os);
    else
        min_thr = (uint64_t)i_min(max_oc * min_os, min_oc * (spatial / (t / nthr_oc)));
    float thr_disb = (float)min_thr / (float)max_thr;
    const int64_t oc_thr = max_oc, os_thr = max_os;
    ocb = i_min(oc_thr, ocb);
    const int64_t os_max = i_min(q->os, os_thr);
    osb = i_min(os_max, osb);
    int64_t max_icb = gemm_max_icb(q, ocb, osb, oc_thr, os_thr);
    int64_t cost = max_icb < 1 ? 20 : 1; /* non_cache_access */
    max_icb = i_max(1, max_icb);
    int64_t icb = i_max(1, q->ic == 0 ? 1 : q->ic / div_up(q->ic, max_icb));
    int64_t nb_ic = div_up(q->ic, icb), kb = icb * q->ks, kb_al = round_up(kb, simd);
    uint64_t out_size = (uint64_t)(oc_thr * round_up(os_thr, simd));
    uint64_t out_ops = (uint64_t)cost * out_size * (uint64_t)(icb == q->ic ? 1 : 2 * nb_ic - 1);
    int64_t osb_al = round_up(osb, simd);
    uint64_t inp_size = (uint64_t)(q->ic * round_up(os_thr * q->sh * q->sw, simd));
    uint64_t inp_ops = (uint64_t)cost * (uint64_t)q->ks * inp_size;
    float col_tail = (float)osb_al / (float)osb;
    uint64_t col_ops = (uint64_t)((float)cost * ((float)((uint64_t)q->ks * inp_size) * col_tail +
                                                 (float)((uint64_t)q->ks * inp_size) * col_tail));
    if (q->sw != 1) /* strided_im2col_k */
        col_ops = (uint64_t)((float)col_ops * 8.f);
    uint64_t wei_ops = (uint64_t)cost * (uint64_t)(oc_thr * round_up(K, simd));
    float thr_mem_eff = (((float)os_thr / (float)simd) * (float)oc_thr * (float)K) /
                        (float)(inp_ops + col_ops + wei_ops + out_ops);
    float oc_disb = (float)oc_thr / (float)round_up(oc_thr, ocb);
    float os_disb = (float)os_max / (float)round_up(os_max, osb);
    float ic_disb = (float)q->ic / (float)round_up(q->ic, icb);
    float reg_osb_disb = (float)osb / (float)round_up(osb, 3 * simd);
    float gemm_eff = ((float)osb * (float)ocb * (float)kb) / ((float)oc_thr * (float)os_thr * (float)K);
    float gemm_calc_eff = (((float)osb / (float)simd) * (float)ocb * (float)kb) /
                          (float)(osb_al * kb + ocb * kb_al + ocb * osb_al);
    /* thr_disb_k 8, gemm_eff_k 0.5, the k's summing to 14.5 */
    float res = powf(powf(thr_disb, 8.f) * oc_disb * os_disb * ic_disb * reg_osb_disb * thr_mem_eff *
                         powf(gemm_eff, 0.5f) * gemm_calc_eff,
                     1.f / 14.5f);
    if (res > q->best) {
        q->best = res;
        q->ocb = ocb, q->osb = osb, q->icb = icb;
    }
}

static void gemm_explore(struct gemm_tiling *q, int64_t nthr_oc, int64_t ocb, int64_t osb)
{
    gemm_try(q, nthr_oc, ocb, osb);
    gemm_try(q, nthr_oc, rnd_dn(ocb, 8), rnd_dn(osb, 48));
    gemm_try(q, nthr_oc, round_up(ocb, 8), rnd_dn(osb, 48));
    gemm_try(q, nthr_oc, round_up(ocb, 8), round_up(osb, q->simd));
    gemm_try(q, nthr_oc, round_up(ocb, 8), round_up(osb, 48));
}

/* The columns' floats per thread (ic_block * ks * os_block). */
static int64_t gemm_forward_columns(struct gemm_tiling *q)
{
    const int64_t spatial = q->mb * q->g * q->os, min_ocb = 8, min_osb = q->simd;
    q->best = 0, q->ocb = 1, q->osb = 1, q->icb = q->ic;
    for (int64_t nthr_oc = 1; nthr_oc <= q->t; nthr_oc++) {
        const int64_t oc_thr = div_up(q->oc, nthr_oc), os_thr = div_up(spatial, q->t / nthr_oc);
        gemm_try(q, nthr_oc, oc_thr, os_thr);
        if (q->ocb == oc_thr && q->osb == os_thr && q->icb == q->ic)
            continue;
        const int64_t a_k = q->sh * q->sw + q->ks, b_k = q->ks * oc_thr;
        int64_t icb = q->ic;
        int64_t ocb = sat(min_ocb, oc_thr, (q->l2 - a_k * icb * min_osb - b_k * icb) / min_osb);
        int64_t osb = sat(min_osb, os_thr, (q->l2 - b_k * icb) / (a_k * icb + ocb));
        gemm_explore(q, nthr_oc, ocb, osb);
        const int64_t icb_max = i_max(1, q->l2 / (2 * min_ocb * a_k + 2 * b_k));
        if (icb_max < q->ic) {
            icb = q->ic / i_max(1, q->ic / icb_max);
            osb = i_max(1, (q->l2 - 2 * b_k * icb) / (2 * icb * a_k));
            ocb = q->l2 / 2 / osb;
            if (ocb > oc_thr) {
                ocb = oc_thr;
                osb = sat(min_osb, os_thr, (q->l2 - b_k * icb) / (a_k * icb + ocb));
            } else if (osb > os_thr) {
                osb = os_thr;
                ocb = sat(min_ocb, oc_thr, (q->l2 - a_k * icb * osb - b_k * icb) / osb);
            }
            gemm_explore(q, nthr_oc, ocb, osb);
        }
        ocb = oc_thr;
        icb = q->ic;
        osb = i_max(min_osb, rnd_dn((q->l2 - b_k * icb) / (a_k * icb + ocb), min_osb));
        gemm_explore(q, nthr_oc, ocb, osb);
    }
    return mul3(q->icb, q->ks, q->osb);
}

/* gemm_convolution_utils::init_conf's scratchpad limit, min(1 GiB, 15 T
 * (|x| + |W| + |y|)) in bytes (src_d.size() + weights_size + dst_d.size(),
 * f32; v2.6.3 and v3.12 alike); -1 on overflow. */
static int64_t gemm_scratch_limit(const struct cc *b, const struct onednn_conv *c)
{
    int64_t xb = mul(4, mul3(c->n, c->c, c->hw)), yb = mul(4, mul3(c->n, c->oc, c->ohw));
    int64_t wb = mul(4, mul3(c->oc, c->c / c->g, c->k)), sum, lim;
    if (xb < 0 || yb < 0 || wb < 0 || !dm_add_ok(xb, wb, &sum) || !dm_add_ok(sum, yb, &sum) ||
        (lim = mul(15, mul(cpu_threads(b), sum))) < 0)
        return -1;
    return i_min((int64_t)1 << 30, lim);
}

/* The scratchpad of oneDNN's gemm_convolution on NCHW (ncsp) f32 data, in
 * bytes (gemm_convolution_utils::init_conf, v3.12): each booked buffer takes
 * its bytes and 128 of alignment (memory_tracking.hpp, default_alignment).
 * Forward: the im2col columns, nthr * im2col_sz floats: a 2-D conv tiled to
 * the L2 (gemm_forward_columns; nthr = T), a 3-D one whole per depth slice
 * (ic * ks * oh * ow, nthr = T when outer threading is chosen, else 1).
 * Backward-data: the columns, nthr * ic * ks * oh * ow floats, their pixels
 * cut to os_block = max(8, 0.1 * what fits) when they pass the scratchpad
 * limit (gemm_scratch_limit); nthr = T when outer threading is chosen, else
 * 1. Backward-weights: onednn_gemm_wei_scratch, the rule 1.13 shares.
 * Measured, torch 2.14.1 on this AVX2 host, one thread: 3x3 64 -> 64 at
 * dilation 6 on [2,64,16,16], forward +295040 = 64*9*128*4 + 128 (os_block
 * 128 of 256). -1 on overflow. */
static int64_t onednn_gemm_scratch(const struct cc *b, const struct onednn_conv *c,
                                   enum gemm_pass pass)
{
    struct onednn_geom g;
    if (!onednn_geom_of(b, &g))
        return -1;
    int64_t t = cpu_threads(b), os = mul(g.o[1], g.o[2]), ks = c->k, ic = c->c, oc = c->oc;
    int64_t wbytes = mul(4, mul3(oc, ic, ks));
    bool cols = !(g.o[0] == g.i[0] && g.o[1] == g.i[1] && g.o[2] == g.i[2] && g.s[0] == 1 &&
                  g.s[1] == 1 && g.s[2] == 1 && ks == 1);
    if (os < 0 || wbytes < 0 || mul3(ic, ks, os) < 0 || mul3(c->n, c->oc, c->ohw) < 0)
        return -1;
    int64_t nthr = 1, im2col = cols ? mul3(ic, ks, os) : 0;
    if (pass == GEMM_FORWARD) {
        int64_t spatial = mul3(c->n, g.o[0], os), outer_work = c->n * g.o[0];
        /* (the cost model's products stay below 2^63 for these bounds) */
        if (oc > (1 << 24) || mul(ic, ks) > (1 << 24) || spatial < 0 ||
            mul3(spatial, g.s[1], g.s[2]) > ((int64_t)1 << 31) || t > 4096)
            return -1;
        if (b->cv->x.rank == 4 && cols) { /* 2-D: the tiling is applicable */
            if (spatial >= t * 8 || os < c->n * g.o[0] || (g.s[2] == 1 && (double)(ic * ks) <= 0.05 * (double)oc)) {
                struct gemm_tiling q = {.mb = c->n, .g = 1, .oc = oc, .ic = ic, .ks = ks, .os = os,
                                        .sh = g.s[1], .sw = g.s[2], .t = t,
                                        .l2 = b->run->cpu_l2 / 4, .simd = 8};
                im2col = gemm_forward_columns(&q);
                nthr = t;
                return im2col < 0 ? -1 : mul(mul(nthr, im2col), 4) + 128;
            }
        }
        /* outer threading (the else branch) */
        float outer = (float)outer_work / (float)round_up(outer_work, t);
        int64_t inner_work = div_up(os, 8) * div_up(oc, 8);
        float inner = (float)inner_work / (float)round_up(inner_work, t);
        bool ot = os / t < 512 && (g.o[0] != 1 || c->n != 1) &&
                  (outer / inner >= 1.f || mul3(os, ic, oc) / t < 64 * 1024);
        nthr = ot ? t : 1;
        return im2col ? mul(mul(nthr, im2col), 4) + 128 : 0;
    }
    if (pass == GEMM_BWD_WEIGHTS)
        return onednn_gemm_wei_scratch(b, c, false);
    int64_t lim = gemm_scratch_limit(b, c);
    if (lim < 0)
        return -1;
    int64_t is = mul(g.i[1], g.i[2]), outer_work = c->n;
    float outer = (float)outer_work / (float)round_up(outer_work, t);
    int64_t inner_work = div_up(is, 8) * div_up(ic, 8);
    float inner = (float)inner_work / (float)round_up(inner_work, t);
    bool ot = (os / t < 512 || ks < 64) && c->n != 1 &&
              (outer / inner >= 1.f || mul3(is, ic, oc) / t < 64 * 1024);
    nthr = ot ? t : 1;
    if (!im2col)
        return 0;
    if (lim < mul(4, mul(nthr, im2col))) { /* coef 0.1 */
        int64_t max_osb = (int64_t)(int32_t)lim / (4 * nthr * (im2col / os));
        im2col = mul3(ic, ks, i_max(8, (int64_t)(int32_t)((float)max_osb * 0.1f)));
    }
    return mul(4, mul(nthr, im2col)) + 128; /* key_conv_gemm_col */
}

/* Whether oneDNN's depthwise JIT (jit_uni_dw_convolution_bwd_weights_t, its
 * avx2 and avx512_core instances) takes a channels-last depthwise conv's
 * backward-weights pass, writing a Goihw8g / Goihw16g diff_weights
 * (pad_block(g) * kh * kw floats): jit_uni_dw_conv_bwd_weights_kernel_t::
 * init_conf (src/cpu/x64/jit_uni_dw_conv_kernel_utils.cpp, v2.6.3 and v3.12
 * alike) takes no dilation, a kernel at most 3 wide (any height), stride_w
 * <= kw, paddings (the end ones max(0, calculate_end_padding)) within kh / 2
 * and kw / 2, ih >= kh + modulo(-t_pad, stride_h), and a top or bottom
 * padding over 1 only as a multiple of stride_h (its oh and ow checks hold
 * for any PyTorch output). Otherwise the blocked kernels' whole blocks per
 * group, or the gemm fallback (onednn_dw_gemm_weight_grad). Measured, torch
 * 2.14.1 and 1.13.0 on this AVX2 host, one thread, 16 channels on
 * [1,16,8,8] channels-last, 'same' padding unless said: 5x3, 7x1, 5x3 at
 * stride 2 and 5x3 padded (1, 1) the weight's size (960, 448 B); 3x5, 1x7,
 * 5x1 at stride 2, 3x3 padded 2 and 3x3 at stride 4 whole 8x8 blocks
 * (61440, 28672, 20480, 36864, 36864 B); 3x3 on [1,16,3,8] the weight's
 * size. A 3-D conv, or one whose geometry is not known, keeps the rule
 * measured before this one: kernel sides up to 3. */
static bool onednn_dw_bwd_weights_jit(const struct cc *b, const struct onednn_conv *c)
{
    struct onednn_geom g;
    if (c->kernel != ONEDNN_DEPTHWISE)
        return false;
    if (b->cv->x.rank != 4 || !onednn_geom_of(b, &g))
        return c->small_kernel;
    int64_t kh = g.k[1], kw = g.k[2], sh = g.s[1], t = g.p[1], l = g.p[2];
    int64_t bp = i_max(0, end_pad_of(&g, 1)), r = i_max(0, end_pad_of(&g, 2));
    int64_t min_ih = kh + ((-t % sh) + sh) % sh;
    return g.d[1] == 0 && g.d[2] == 0 && kw <= 3 && g.s[2] <= kw && t <= kh / 2 &&
           bp <= kh / 2 && l <= kw / 2 && r <= kw / 2 && g.i[1] >= min_ih &&
           (t <= 1 || t % sh == 0) && (bp <= 1 || bp % sh == 0);
}

/* The backward-weights pass's buffers of a channels-last conv (below). */
static void onednn_cl_weight_grad(const struct cc *b, const struct onednn_conv *c, struct dm_ws *ws)
{
    int64_t icg = c->c / c->g, ocg = c->oc / c->g;
    int64_t wei = mul3(c->oc, icg, c->k), dw_wei = mul(pad_block(c, c->g), c->k);
    /* an ungrouped conv's in channels are left as they are below a block
     * (measured: 8 -> 12 channels 3x3, 16 x 8 x 9 floats) */
    int64_t icp = c->g == 1 && icg < c->block ? icg : pad_block(c, icg);
    int64_t blocks = mul3(c->g, mul(pad_block(c, ocg), icp), c->k);
    if (onednn_dw_gemm_weight_grad(b, c)) {
        ws->buf[1] = tmp(b, DM_FLOAT, wei, "onednn_diff_weights");
        drop(b, tmp(b, DM_UINT8, onednn_dw_gemm_scratchpad(b, c, wei), "onednn_gemm_scratchpad"));
    } else
        ws->buf[1] = tmp(b, DM_FLOAT, onednn_dw_bwd_weights_jit(b, c) ? dw_wei : blocks,
                         "onednn_diff_weights");
    /* and a second weight-sized tensor beside the weight's grad while
     * both live (measured: +w +w -w after the bias grad, depthwise and
     * dense alike; for a dense one the grad comes out channels-last and
     * .to() copies it into the parameter's layout) */
    ws->buf[2] = tmp(b, DM_FLOAT, wei, "grad_weight (channels last)");
}

static void onednn_channels_last(const struct cc *b, const struct onednn_conv *c, bool backward, struct dm_ws *ws)
{
    int64_t icg = c->c / c->g;
    int64_t wei = mul3(c->oc, icg, c->k), dw_wei = mul(pad_block(c, c->g), c->k);
    bool dw = c->kernel == ONEDNN_DEPTHWISE;
    /* weight.contiguous(channels_last): no copy of a weight already so
     * (model.to(memory_format=torch.channels_last); measured, 2.14.1: a 3x3
     * 16 -> 24 conv of such a model takes no 13824 B copy) */
    if (icg > 1 && c->k > 1 && !b->cv->w_chlast)
        ws->buf[0] = tmp(b, DM_FLOAT, wei, "weight (channels last)");
    /* mkldnn_convolution(_backward) (aten/src/ATen/native/mkldnn/Conv.cpp)
     * makes its operands .contiguous(channels_last): an input (forward) or a
     * grad_output (backward) with other strides is copied, live until the
     * op returns (measured, 2.14.1: a channels-last model's conv after a
     * Flatten, whose grad_output comes back NCHW: + the grad_output's bytes
     * through the backward) */
    if (b->cv->cl_copy)
        ws->buf[3] = alloc(b, DM_FLOAT, b->cv->cl_copy, "grad_output.contiguous(channels_last)");
    if (backward)
        return; /* the passes, one at a time: cpu_conv_grad (onednn_cl_bwd) */
    if (onednn_brgemm(c))
        onednn_brgemm_forward(b, c, ws);
    else
        ws->buf[1] = tmp(b, DM_FLOAT, dw ? dw_wei : wei, "onednn_weight");
}

/* A channels-last conv's backward, pass by pass as mkldnn_convolution_backward
 * runs them (aten/src/ATen/native/mkldnn/Conv.cpp: grad_input, then the
 * weight's and the bias's grads): the backward-data pass's buffers once
 * grad_input is allocated, then the backward-weights pass's before the
 * weight's grad. Backward data: the brgemm kernels' (onednn_brgemm_backward_data),
 * or for a depthwise conv the weight reordered, freed at once: in the
 * Goihw8g / Goihw16g format of the depthwise JIT, pad_block(g) * kh * kw
 * floats, or, dilated (jit_uni_dw_conv_bwd_data_kernel_t::init_conf takes
 * no dilation, v3.12), whole blocks per group, g * pad_block(1)^2 * kh * kw.
 * Measured, 2.14.1 on AVX2, one thread, 16 channels on [1,16,8,8]: +4096
 * grad_input, +576 -576 (3x3), +960 -960 (5x3, 3x5), at dilation 2 +36864
 * -36864 (3x3), then the weight's grad's buffers; 5x5 at dilation 2 on
 * 12x12 +102400 -102400. Other grouped convs take none (not measured). */
static void onednn_dw_backward_data(const struct cc *b, const struct onednn_conv *c)
{
    if (c->kernel != ONEDNN_DEPTHWISE)
        return;
    int64_t one = pad_block(c, 1);
    drop(b, tmp(b, DM_FLOAT, b->cv->dilated ? mul3(c->g, mul(one, one), c->k)
                                            : mul(pad_block(c, c->g), c->k),
                "onednn_weight (backward data)"));
}

static bool onednn_cl_bwd(const struct cc *b, int k, struct dm_ws *ws, bool after)
{
    struct onednn_conv c;
    if (b->run->torch_version < 200 || b->run->cuda || !cpu_conv_uses_onednn(b) ||
        !onednn_conv_of(b, &c) || !b->cv->chlast)
        return false;
    if (k == 0 && after) {
        if (onednn_brgemm(&c))
            onednn_brgemm_backward_data(b, &c);
        else
            onednn_dw_backward_data(b, &c);
    }
    if (k == 1 && !after)
        onednn_cl_weight_grad(b, &c, ws);
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
static void onednn_strided_backward_data(const struct cc *b, const struct onednn_conv *c,
                                         struct dm_ws *ws, bool after)
{
    int64_t x = mul3(c->n, c->c, c->hw);
    if (after) {
        drop(b, tmp(b, DM_FLOAT, x, "grad_input (to NCHW)"));
        drop(b, ws->buf[0]);
        ws->buf[0] = -1;
        return;
    }
    int32_t gy = tmp(b, DM_FLOAT, mul3(c->n, c->oc, c->ohw), "onednn_grad_output (nhwc)");
    int32_t wr = tmp(b, DM_FLOAT, mul3(c->oc, brgemm_pad(c, c->c), c->k), 
                        "onednn_weight (backward data)");
    ws->buf[0] = tmp(b, DM_FLOAT, x, "onednn_grad_input (nhwc)");
    drop(b, tmp(b, DM_UINT8, mul(cpu_threads(b), 24600) + 12288, 
                          "onednn_scratchpad (backward data)"));
    drop(b, wr);
    drop(b, gy);
}

/* PyTorch 1.13 (its bundled oneDNN 2.6.3, third_party/ideep/mkl-dnn at
 * v1.13.1) on AVX2: the NCHW backward runs 2.x's two passes
 * (onednn_bwd_phased: backward_data with grad_output and the weight
 * reordered, then backward_weights with grad_output and the source
 * reordered again), except that a strided conv's backward-data stays on the
 * blocked kernel (no nhwc copies) and the backward-weights pass ends as
 * onednn_weight_grad_113 says. Measured, 1.13.0 (Debian's python3-torch),
 * one thread, the profiler's events of y.backward(gy) on an NCHW input:
 * 64 -> 64 5x5 on [1,64,8,8]: +16384 gy' +409600 w' +16384 gx' -409600
 * -16384, +16384 gx -16384, +16384 gy' +16384 x' +409600 dw' +256 db' -16384
 * -16384, +256 gb +409600 gw -409600 -256; 5x5 at stride 2 on
 * [1,16,8,8] -> 24: +1536 +38400 +4096 -38400 -1536 +4096 -4096 +1536
 * +4096 +38400 +96 ...; 3 -> 16 3x3 (the first-convolution kernel), a 2x2
 * grouped and a 3x3 depthwise conv alike (test-cpu.c test_onednn_bwd_113). */
static bool onednn_113_avx2(const struct cc *b)
{
    return b->run->torch_version >= 113 && b->run->torch_version < 200 &&
           b->run->cpu_isa == DNNMEM_CPU_ISA_AVX2;
}

/* 1.13's NCHW backward takes these two passes on AVX-512 too, in blocks
 * of 16 (measured 2026-12-04, 1.13.0, Debian's python3-torch, one thread,
 * on an AVX-512 host with AMX, y.backward(gy): 64 -> 64 5x5 on [1,64,8,8]
 * the AVX2 figures above to the byte; 16 -> 24 5x5 at stride 2: +2048 gy'
 * (32 channels) +51200 w' +4096 gx' -51200 -2048, +4096 gx -4096, +2048
 * gy' +4096 x' +51200 dw' +256 (the bias padded, + 128) +96 db' -256 -4096
 * -2048, +96 gb +38400 gw -51200 -96; a depthwise 3x3 on [2,24,16,16]:
 * +65536 +1152 +65536 -1152 -65536 +49152 -65536, +65536 +65536 +1152
 * -65536 -65536 +864 -1152; a 1x1 72 -> 36 at stride 2 on [1,72,32,32]
 * with the strided source's scratchpad in both passes, onednn_rtus_113).
 * The AVX2 kernels' own limits (onednn_gemm_weight_grad_113) and the
 * channels-last backward (onednn_cl_bwd_113) stay AVX2's; the rule taken
 * before for AVX-512 (weight- and input-sized scratch) had no measurement
 * on one (the zoo's rand101 1.13 training -5.8%). */
static bool onednn_113_phased(const struct cc *b)
{
    return b->run->torch_version >= 113 && b->run->torch_version < 200;
}

/* 1.13's AVX-512 1x1 kernel at a stride copies the strided source ("rtus")
 * into its scratchpad in both backward passes, as 2.x's forward does
 * (onednn_scratch): measured, the 1x1 72 -> 36 at stride 2 on [1,72,32,32]:
 * +49152 gy' +15360 w' +327680 gx' +82048 (80 x 256 floats + 128) -82048
 * -15360 -49152, +294912 gx -327680, +49152 gy' +327680 x' +15360 dw'
 * +82048 -82048 -327680 -49152, +10368 gw -15360. Not measured on AVX2. */
static int64_t onednn_rtus_113(const struct cc *b, const struct onednn_conv *c)
{
    return b->run->torch_version < 200 && !onednn_113_avx2(b) && c->strided_1x1 &&
                   c->kernel == ONEDNN_BLOCKED
               ? scratch_entry(mul(pad_block(c, c->c), c->ohw))
               : 0;
}

/* Whether 1.13's AVX2 backward-weights of an ungrouped conv falls back to
 * gemm_convolution_bwd_weights: jit_avx2_conv_bwd_weights_kernel_f32::
 * init_conf (oneDNN 2.6.3, src/cpu/x64/jit_avx2_conv_kernel_f32.cpp)
 * refuses kw >= 14 and kh > ih ([bwd_w:r2]; measured: 5x5 on 4x4 and 4x8
 * the gemm, on 8x4 and 8x8 the JIT kernel; 7x7 on 4x4 and 6x6 the gemm),
 * any dilation (args_ok: dilate_* == 0; measured: 256 -> 64 3x3 at
 * dilation 2 on [1,256,12,12] and [2,..], the gemm, 3686656 B), and for a
 * 3-D conv kd > id and any padding in depth (boundaries_ok: f_pad == 0 &&
 * back_pad == 0; measured: 3x3x3 64 -> 64, padding 1, on [2,64,8,16,16] and
 * [2,64,2,4,4], the gemm). */
static bool onednn_gemm_weight_grad_113(const struct cc *b, const struct onednn_conv *c)
{
    const struct dm_tinfo *w = &b->cv->w, *x = &b->cv->x;
    if (!onednn_113_avx2(b) || (c->kernel != ONEDNN_BLOCKED && c->kernel != ONEDNN_FIRST))
        return false;
    if (b->cv->dilated)
        return true;
    if (w->rank == 5 && x->rank == 5)
        return b->cv->depth_padded || w->dims[2] > x->dims[2] || w->dims[3] > x->dims[3] ||
               w->dims[4] >= 14;
    return w->rank == 4 && (c->kh_over_ih || w->dims[3] >= 14);
}

static int64_t add(int64_t a, int64_t c)
{
    int64_t r;
    return a >= 0 && c >= 0 && dm_add_ok(a, c, &r) ? r : -1;
}

/* gemm_convolution_bwd_weights' scratchpad, in bytes (gemm_convolution_utils::
 * init_conf, src/cpu/gemm_convolution_utils.cpp, the f32 "is_nspc && is_bwd_w"
 * and "!is_nspc && is_bwd_w" branches and the ncsp booking after them). One
 * rule for PyTorch 1.13 (oneDNN v2.6.3) and 2.x (v3.12): the branches and
 * the scratchpad limit read the same at both tags (diffed: v3.12 only turns
 * 2.6.3's "return status::unimplemented" into VDISPATCH checks and adds an
 * INT_MAX bound on the tensors that declines the primitive, not a size), so
 * no field differs by release; what differs is which convs reach the gemm
 * (onednn_gemm_bwd_weights, onednn_gemm_weight_grad_113) and that only 1.13
 * runs it on an nhwc source (2.x's channels-last convs take brgemm).
 * Booked, each entry + 128 B (scratch_entry): key_conv_wei_reduction,
 * book<float>(nthr * weights_d.size()), 4 * nthr * |W| bytes (size() is the
 * weight's bytes, booked as floats); key_conv_gemm_col, nthr * im2col_sz
 * floats, im2col_sz = IC/g * kd * kh * kw * OH * OW (a 3-D conv's one depth
 * slice), none for an unstrided 1x1 kernel keeping the input's size; on nhwc
 * also key_conv_gemm_imtr, nthr * IC * ID * IH * IW floats. nthr = T when
 * outer threading is on (OH * OW / T < 256, a batch over 1 or more than 2
 * groups, and the threads' estimate below the limit gemm_scratch_limit: T
 * (4 |W| + 4 IC/g ks simd_w) on ncsp, simd_w 8 on AVX2, the only ISA these
 * rules are reached on; T (4 |W| + 4 im2col_sz + 4 IC ID IH IW) on nhwc),
 * else 1. On ncsp, columns past the limit shrink to os_block = max(8, 0.05
 * * what fits) output pixels, in oneDNN's int and float arithmetic; a
 * reduction alone past it declines the primitive (-1, as on overflow).
 * Measured, 2.14.1 on AVX2, one thread: 3x3 64 -> 64 at dilation 2 on
 * [2,64,16,16], +1179904 = 4 * 147456 + 128 + 64*9*256*4 + 128. 1.13.0
 * (Debian's python3-torch), AVX2: 64 -> 32 5x5 on [1,64,4,4]: 921856 = 4 x
 * 204800 + 4 x 64 x 25 x 16 + 256; [2,64,4,4] on 2 threads 1843456, on 4
 * 3686656, [1,..] on 2 921856; 16 -> 24 7x7 on 6x6: 414208; 3x3x3 64 -> 64
 * on [2,64,8,16,16], 3539200 = 4 x 442368 + 4 x 64 x 27 x 256 + 256;
 * channels last 926080 = 921856 + 4096 + 128, [2,..] on 2 threads
 * 1851776. */
static int64_t onednn_gemm_wei_scratch(const struct cc *b, const struct onednn_conv *c, bool nspc)
{
    const struct dm_tinfo *x = &b->cv->x, *y = &b->cv->y;
    int64_t t = cpu_threads(b), icg = c->c / c->g;
    /* jcp.os: the output's plane, OH * OW */
    int64_t os = y->rank == 5 ? mul(y->dims[3], y->dims[4]) : c->ohw;
    int64_t wb = mul(4, mul3(c->oc, icg, c->k)), per_os = mul(icg, c->k);
    int64_t limit = gemm_scratch_limit(b, c), imtr = nspc ? mul(4, mul(icg, c->hw)) : 0;
    bool same = !b->cv->strided && c->k == 1 && x->rank == y->rank;
    for (int d = 2; same && d < x->rank; d++)
        same = x->dims[d] == y->dims[d];
    int64_t im2col = same ? 0 : mul(per_os, os);
    int64_t cols_est = mul(4, nspc ? im2col : mul(per_os, 8)); /* ncsp: os_block = simd_w */
    if (os < 0 || wb < 0 || per_os < 0 || limit < 0 || imtr < 0 || im2col < 0 || cols_est < 0)
        return -1;
    int64_t estimate = mul(t, add(add(mul(4, wb), cols_est), imtr));
    bool outer = estimate >= 0 && estimate < limit && os / t < 256 && (c->n != 1 || c->g > 2);
    int64_t nthr = outer ? t : 1;
    int64_t reduction = add(mul(mul(4, nthr), wb), 128), cols = mul(mul(4, nthr), im2col);
    if (reduction < 0 || cols < 0 || (!nspc && reduction > limit))
        return -1;
    if (!nspc && limit - reduction < cols) {
        int64_t max_osb = (int64_t)(int32_t)(limit - reduction) / (4 * nthr * per_os);
        int64_t os_block = i_max(8, (int64_t)(int32_t)((float)max_osb * 0.05f));
        cols = mul(mul(4, nthr), mul(per_os, os_block));
    }
    int64_t all = add(reduction, cols ? add(cols, 128) : 0);
    return nspc ? add(all, add(mul(nthr, imtr), 128)) : all;
}

/* 1.13's backward-weights pass on AVX2, once grad_output is reordered (gy;
 * -1 when the gemm fallback reads it as it is): the source reordered, the
 * blocked diff_weights, a transient scratchpad, the diff_bias of the out
 * channels unpadded; the scratchpad is the gemm fallback's
 * (onednn_gemm_wei_scratch; no reorders, a diff_weights of the weight's own
 * size) or, for a bias whose channels are not whole blocks, the padded bias
 * (scratch_entry). Measured, 1.13.0, 12 -> 20 3x3 with a bias on
 * [2,12,16,16]: +49152 gy' +32768 x' +13824 dw' +224 (24 x 4 + 128) +80 db'
 * -224 -32768 -49152, +80 gb +8640 gw -13824 -80; 64 -> 32 5x5 on
 * [1,64,4,4]: +204800 dw' +921856 +128 db' -921856, +128 +204800 -204800
 * -128. */
static void onednn_weight_grad_113(const struct cc *b, const struct onednn_conv *c,
                                   struct dm_ws *ws, int32_t gy, int64_t src, int64_t wei)
{
    bool gemm = onednn_gemm_weight_grad_113(b, c);
    int32_t xr = src && !gemm ? tmp(b, DM_FLOAT, src, "onednn_input") : -1;
    ws->buf[1] = tmp(b, DM_FLOAT, gemm ? mul3(c->oc, c->c / c->g, c->k) : wei,
                     "onednn_diff_weights");
    bool bias_tail = c->bias && c->oc % c->block &&
                     (c->kernel == ONEDNN_BLOCKED || c->kernel == ONEDNN_FIRST);
    int64_t scratch = gemm ? onednn_gemm_wei_scratch(b, c, false)
                      : bias_tail ? scratch_entry(pad_block(c, c->oc)) : 0;
    scratch += onednn_rtus_113(b, c);
    int32_t sp = scratch ? tmp(b, DM_UINT8, scratch, "onednn_scratchpad (backward weights)") : -1;
    if (c->bias)
        ws->buf[2] = tmp(b, DM_FLOAT, c->oc, "onednn_diff_bias");
    drop(b, sp);
    drop(b, xr);
    drop(b, gy);
}

/* 1.13's backward of a channels-last conv on AVX2 (oneDNN 2.6.3 has no
 * brgemm kernels there: jit_avx2's nhwc ones). Measured, 1.13.0, one
 * thread unless said, y.backward(gy) on a channels-last input:
 *  - before grad_input, weight.contiguous(channels_last) (as the forward's,
 *    onednn_channels_last_113); after it, backward-data's reordered weight,
 *    freed at once;
 *  - backward-weights: diff_weights in 8x8 blocks per group,
 *    g * pad8(oc/g) * pad8(ic/g) * kh * kw floats, the in channels padded
 *    even below a block (4 -> 20 3x3: 24 x 8 x 9 floats = 6912 B, where 2.x
 *    leaves them), except a depthwise kernel up to 3x3 (Goihw8g,
 *    pad8(g) * kh * kw floats) and the gemm fallbacks (the weight's own size:
 *    a dense kernel taller than the input, onednn_gemm_weight_grad_113, whose
 *    nhwc scratchpad is onednn_gemm_wei_scratch's, key_conv_gemm_imtr with
 *    it; a depthwise one, onednn_dw_gemm_weight_grad, as 2.14.1); then a transient scratchpad:
 *    the gemm's, or, for a bias over blocks whose g * pad8(oc/g) channels
 *    are not the bias's, that padded bias (scratch_entry); then, once the
 *    weight's grad is made, a second weight-sized tensor as in 2.x.
 * 16 -> 24 3x3 on [2,16,16,16]: +13824 clone, +32768 grad_input, +13824
 * -13824, +13824 diff_weights, ...; 12 -> 20 on [2,12,8,8]: +8640 +6144
 * +13824 -13824 +13824 +224 +80 -224 ...; 16 channels 5x5 depthwise on
 * [1,16,8,8]: +102400 (16 x 8 x 8 x 25 floats) +640 (16 x 8 floats + 128);
 * 64 -> 32 5x5 on [1,64,4,4]: +204800 +926080 (819200 + 102400 + 4096 +
 * 3 x 128); [2,64,4,4] on 2 threads +1851776; 128 channels 5x5 depthwise on
 * [1,128,4,4]: +12800 +53248 (test-cpu.c test_onednn_cl_bwd_113). */
static bool onednn_cl_bwd_113(const struct cc *b, struct onednn_conv *c)
{
    return onednn_113_avx2(b) && !b->run->cuda && cpu_conv_uses_onednn(b) &&
           onednn_conv_of(b, c) && b->cv->chlast;
}

static void onednn_cl_grad_113(const struct cc *b, const struct onednn_conv *c, int k,
                               struct dm_ws *ws, bool after)
{
    int64_t icg = c->c / c->g, ocg = c->oc / c->g, wei = mul3(c->oc, icg, c->k);
    int64_t opad = mul(c->g, pad_block(c, ocg));
    int64_t blocks = mul3(opad, pad_block(c, icg), c->k);
    bool dw = c->kernel == ONEDNN_DEPTHWISE, small_dw = dw && c->small_kernel;
    if (k == 0 && after)
        drop(b, tmp(b, DM_FLOAT, small_dw ? mul(pad_block(c, c->g), c->k) : dw ? wei : blocks,
                    "onednn_weight (backward data)"));
    if (k != 1 || after)
        return;
    int64_t scratch = 0, dwei = blocks;
    if (dw && onednn_dw_gemm_weight_grad(b, c)) {
        dwei = wei;
        scratch = onednn_dw_gemm_scratchpad(b, c, wei);
    } else if (onednn_gemm_weight_grad_113(b, c)) {
        dwei = wei;
        scratch = onednn_gemm_wei_scratch(b, c, true);
    } else if (onednn_dw_bwd_weights_jit(b, c)) {
        dwei = mul(pad_block(c, c->g), c->k);
    } else if (c->bias && opad != c->oc) {
        scratch = scratch_entry(opad);
    }
    ws->buf[1] = tmp(b, DM_FLOAT, dwei, "onednn_diff_weights");
    if (scratch)
        drop(b, tmp(b, DM_UINT8, scratch, "onednn_scratchpad (backward weights)"));
    ws->buf[2] = tmp(b, DM_FLOAT, wei, "grad_weight (channels last)");
}

/* Slow3d's backward makes grad_input through fgrad_input, a columns-sized
 * buffer {N, C*kd*kh*kw, OD*OH*OW} (col2vol's source; a 1x1x1 kernel's too),
 * made once grad_input is and freed before the bias's and the weight's grads
 * (measured, 2.14.1, one thread: a 3x3x3 16 -> 24 conv with a bias on
 * [1,16,4,8,8]: +16384 grad_input, +442368, -442368, +96 grad_bias, +41472
 * grad_weight, +442368 columns, -442368; a 1x1x1 one: +65536, +65536,
 * -65536, +8192). None when the input needs no grad. */
static void slow3d_grad_input_columns(const struct cc *b)
{
    const struct dm_tinfo *x = &b->cv->x, *w = &b->cv->w, *y = &b->cv->y;
    if (b->run->cuda || cpu_conv_backend(b) != CPU_CONV_SLOW3D || b->cv->groups != 1 ||
        y->rank != 5)
        return;
    int64_t e = mul(x->dims[0], x->dims[1]);
    for (int d = 2; d < 5; d++)
        e = mul(mul(e, w->dims[d]), y->dims[d]);
    drop(b, tmp(b, x->dtype, e, "slow3d fgrad_input"));
}

/* 1.13's backward of a channels-last conv (measured, 1.13.0, Debian's
 * python3-torch, one thread, AVX2: x [2,16,10,10] channels-last, W
 * [24,16,3,3] 13,824 B, a bias, grad_output channels-last): convolution_backward
 * makes weight.contiguous(channels_last) (+13824, live until it returns; none
 * for one in channel per group or a 1x1 kernel, as the forward's), then
 * grad_input (+12800), the weight reordered for the backward-data pass
 * (+13824 -13824), then for the weight's grad a diff_weights (+13824), the
 * bias's grad and oneDNN's (+96 +96), the channels-last grad_weight (+13824)
 * and its .to() into the parameter's layout (+13824, the grad): four
 * weight-sized blocks at once; a 32-channel depthwise 3x3 conv the same but
 * the weight copy. The NCHW rule's weight- and input-sized scratch is not
 * made. The begin: the weight copy (the grad_output copy: dm_cpu_conv_begin). */
static void onednn_cl_113_weight_copy(const struct cc *b, struct dm_ws *ws)
{
    const struct dm_tinfo *w = &b->cv->w;
    if (w->rank == 4 && w->dims[1] > 1 && w->dims[2] * w->dims[3] > 1 && !b->cv->w_chlast)
        ws->buf[0] = alloc(b, w->dtype, w->bytes, "weight (channels last)");
}

static void cpu_conv_grad(const struct cc *b, int k, struct dm_ws *ws,
                          bool after)
{
    struct onednn_conv c;
    if (k == 0 && after)
        slow3d_grad_input_columns(b);
    if (k <= 1 && onednn_cl_bwd_113(b, &c)) {
        onednn_cl_grad_113(b, &c, k, ws, after);
        return;
    }
    if (k > 1 || thnn_grad_output_copy(b, k, ws, after) || onednn_cl_bwd(b, k, ws, after) ||
        !onednn_bwd_phased(b, &c))
        return;
    if (k == 0 && c.strided && c.kernel == ONEDNN_BLOCKED && b->run->torch_version >= 200) {
        onednn_strided_backward_data(b, &c, ws, after);
        return;
    }
    if (k == 0 && onednn_gemm_bwd_data(b, &c)) {
        /* gemm_convolution's backward-data writes the plain ATen grad_input:
         * only its columns, once grad_input is made (measured, 2.14.1, one
         * thread: 3x3 960 -> 256 at dilation 12 on [1,960,8,8]: +245760
         * grad_input, +2211968 = 960 x 9 x 64 x 4 + 128, -2211968) */
        if (after)
            drop(b, tmp(b, DM_UINT8, onednn_gemm_scratch(b, &c, GEMM_BWD_DATA),
                        "onednn_gemm_scratchpad (backward data)"));
        return;
    }
    int64_t src, wei, dst;
    onednn_sizes(&c, &src, &wei, &dst);
    if (after) { /* the blocked grad_input, once copied out */
        if (k == 0) {
            drop(b, ws->buf[0]);
            ws->buf[0] = -1;
        }
        return;
    }
    bool gemm_w = k == 1 && onednn_gemm_bwd_weights(b, &c); /* 2.x: grad_output as it is */
    int32_t gy = gemm_w || (k == 1 && onednn_gemm_weight_grad_113(b, &c))
                     ? -1 : tmp(b, DM_FLOAT, dst, "onednn_grad_output");
    if (k == 0) {
        int64_t w_bd = c.kernel == ONEDNN_FIRST ? mul3(pad_block(&c, c.oc), pad_block(&c, c.c), c.k) : wei;
        int64_t gx = c.kernel == ONEDNN_GROUPED ? src : mul3(c.n, pad_block(&c, c.c), c.hw);
        int32_t wr = tmp(b, DM_FLOAT, w_bd, "onednn_weight");
        ws->buf[0] = tmp(b, DM_FLOAT, gx, "onednn_grad_input");
        int64_t rtus = onednn_rtus_113(b, &c);
        if (rtus)
            drop(b, tmp(b, DM_UINT8, rtus, "onednn_scratchpad (backward data)"));
        drop(b, wr);
    } else if (gemm_w) {
        /* gemm_convolution's backward-weights on the plain source and
         * grad_output: a plain diff_weights (and diff_bias), its scratchpad
         * freed before the weight's grad (measured, 2.14.1, one thread: 3x3
         * 64 -> 64 at dilation 2 on [2,64,16,16]: +147456 +1179904 -1179904,
         * +147456 grad_weight, -147456) */
        ws->buf[1] = tmp(b, DM_FLOAT, mul3(c.oc, c.c, c.k), "onednn_diff_weights");
        int32_t sp = tmp(b, DM_UINT8, onednn_gemm_scratch(b, &c, GEMM_BWD_WEIGHTS),
                         "onednn_gemm_scratchpad");
        if (c.bias) /* after the scratchpad (measured: with a bias, +256 B for 64 channels) */
            ws->buf[2] = tmp(b, DM_FLOAT, c.oc, "onednn_diff_bias");
        drop(b, sp);
    } else if (onednn_113_phased(b)) {
        onednn_weight_grad_113(b, &c, ws, gy, src, wei);
        return;
    } else {
        int32_t xr = src ? tmp(b, DM_FLOAT, src, "onednn_input") : -1;
        ws->buf[1] = tmp(b, DM_FLOAT, wei, "onednn_diff_weights");
        if (c.bias)
            ws->buf[2] = tmp(b, DM_FLOAT, c.kernel == ONEDNN_GROUPED ? c.oc : pad_block(&c, c.oc),
                                 "onednn_diff_bias");
        drop(b, xr);
    }
    drop(b, gy);
}

/* 1.13's forward of a channels-last input (measured, 1.13.0, Debian's
 * python3-torch, one thread: x [2,16,10,10] channels-last, W [24,16,3,3]
 * 13,824 B, no_grad): _convolution makes weight.contiguous(channels_last)
 * (aten::empty_like, 13,824 B, freed when it returns; none when the weight
 * has one input channel per group or a 1x1 kernel, as thnn_weight_copy),
 * mkldnn_convolution computes straight into the channels-last ATen output
 * (no buffer of its own) and reorders the weight (13,824 B, freed inside).
 * The zoo's rand34-infer-b2-i32: 331,776 B twice at its measured peak. */
static void onednn_channels_last_113(const struct cc *b, struct dm_ws *ws)
{
    onednn_cl_113_weight_copy(b, ws);
    ws->buf[1] = alloc(b, DM_FLOAT, b->cv->w.bytes, "onednn_weight");
}

/* 1.13's backward of a channels-last input, before the grads: the weight's
 * channels-last clone (onednn_cl_grad_113) and, as in 2.x
 * (onednn_channels_last), a grad_output with other strides copied. */
static void onednn_channels_last_113_bwd(const struct cc *b, struct dm_ws *ws)
{
    const struct dm_tinfo *w = &b->cv->w;
    if (w->rank == 4 && w->dims[1] > 1 && w->dims[2] * w->dims[3] > 1 && !b->cv->w_chlast)
        ws->buf[0] = alloc(b, w->dtype, w->bytes, "weight (channels last)");
    if (b->cv->cl_copy)
        ws->buf[3] = alloc(b, DM_FLOAT, b->cv->cl_copy, "grad_output.contiguous(channels_last)");
}

/* oneDNN's buffers around a CPU convolution (forward or backward). */
static void onednn_workspace(const struct cc *b, bool backward,
                             struct dm_ws *ws)
{
    const struct dm_tinfo *x = &b->cv->x, *w = &b->cv->w;
    const struct dm_tinfo *y = b->cv->y.rank > 0 ? &b->cv->y : x;
    struct onednn_conv c;
    if (b->run->torch_version >= 200 && onednn_conv_of(b, &c)) {
        if (b->cv->chlast) {
            onednn_channels_last(b, &c, backward, ws);
            return;
        }
        if (!backward) {
            onednn_forward_nchw(b, &c, ws);
            return;
        }
        if (onednn_bwd_phased(b, &c))
            return; /* cpu_conv_grad */
    }
    if (backward && onednn_113_phased(b) && onednn_bwd_phased(b, &c))
        return; /* cpu_conv_grad */
    if (backward && onednn_cl_bwd_113(b, &c)) {
        onednn_channels_last_113_bwd(b, ws);
        return; /* and cpu_conv_grad */
    }
    if (b->run->torch_version < 200 && !backward && b->cv->chlast) {
        onednn_channels_last_113(b, ws);
        return;
    }
    /* 1.13's forward on an NCHW input takes 2.x's buffers (measured, 1.13.0,
     * Debian's python3-torch, one thread, AVX2: 3x3 16 -> 24 at stride 2 on
     * [2,16,32,32]: +131072 source, +13824 weight, +49152 destination,
     * -13824, -131072, +49152 output, -49152; test-cpu.c
     * test_onednn_nchw_113). AVX-512 alike (measured 2026-12-04 on an
     * AVX-512 host with AMX, blocks of 16: the same 3x3 conv +131072 source,
     * +18432 weight (32 x 16 x 9), +65536 destination (32 channels), +49152
     * output; a 1x1 72 -> 36 at stride 2 on [1,72,32,32] +82048 scratchpad
     * (the strided source, 80 channels), +327680 source, +15360 weight
     * (48 x 80), +49152 destination, +36864 output; the depthwise 3x3 at
     * stride 2 on [2,96,112,112] +9633792 +3456 +2408448, +2408448 output:
     * test-estimate.c test_onednn_conv_2x). The rule below had been taken
     * for AVX-512 without a 1.13 measurement on one (the zoo's rand101-infer
     * -16% on 1.13, AVX-512). */
    if (b->run->torch_version < 200 && !backward && onednn_conv_of(b, &c)) {
        onednn_forward_nchw(b, &c, ws);
        return;
    }
    /* 1.13 (and 2.x's NCHW backward): forward computes into a buffer of its
     * own and reorders the weight, then copies into the ATen output; backward
     * takes weight- and input-sized scratch (tests/validation/README.md,
     * measured on 1.13) */
    ws->buf[0] = alloc(b, DM_FLOAT, backward ? w->bytes : y->bytes,
                       backward ? "onednn_weight_scratch" : "onednn_output");
    ws->buf[1] = alloc(b, DM_FLOAT, backward ? x->bytes : w->bytes,
                       backward ? "onednn_input_scratch" : "onednn_weight");
}


void dm_cpu_conv_begin(const struct dm_cpu_conv *cv, const struct dm_run *run,
                       const struct dm_ws_sink *sink, bool backward, struct dm_ws *ws)
{
    struct cc b = {.cv = cv, .run = run, .sink = sink};
    if (run->tf_ops) /* ATen's CPU kernels only: TensorFlow's are its own (tf.c) */
        return;
    enum cpu_conv be = cpu_conv_backend(&b);
    uint64_t columns;
    if (be == CPU_CONV_SLOW2D || be == CPU_CONV_SLOW3D) {
        thnn_weight_copy(&b, ws);
        if (!backward && (columns = thnn_columns(&b)) > 0)
            ws->buf[0] = alloc(&b, cv->x.dtype, columns, "thnn_columns");
    } else if (be == CPU_CONV_ONEDNN) {
        onednn_workspace(&b, backward, ws);
        /* mkldnn_convolution_backward's grad_output.contiguous(format)
         * (workspace.c, grad_output_copy), live until it returns; the
         * channels-last rules make it themselves */
        if (backward && cv->cl_copy && ws->buf[3] < 0)
            ws->buf[3] = alloc(&b, cv->y.rank > 0 ? cv->y.dtype : cv->x.dtype, cv->cl_copy,
                               cv->chlast ? "grad_output.contiguous(channels_last)"
                                          : "grad_output.contiguous()");
    }
}

void dm_cpu_conv_grad(const struct dm_cpu_conv *cv, const struct dm_run *run,
                      const struct dm_ws_sink *sink, int k, struct dm_ws *ws, bool after)
{
    struct cc b = {.cv = cv, .run = run, .sink = sink};
    if (run->tf_ops)
        return;
    cpu_conv_grad(&b, k, ws, after);
}

uint64_t dm_cpu_conv_grad_scratch(const struct dm_cpu_conv *cv, const struct dm_run *run)
{
    struct cc b = {.cv = cv, .run = run, .sink = NULL};
    return thnn_columns(&b);
}
