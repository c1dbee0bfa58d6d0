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
    /* slow_conv2d_backward's grad_output.contiguous(channels_last), as
     * oneDNN's (onednn_channels_last; measured, 2.14.1: the same model at
     * batch 1, whose 3x3 16 -> 24 conv goes to THNN: + 24576 B) */
    if (b->cv->cl_copy)
        ws->buf[3] = alloc(b, w->dtype, b->cv->cl_copy, "grad_output.contiguous(channels_last)");
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
static void onednn_forward_nchw(const struct cc *b, const struct onednn_conv *c, struct dm_ws *ws)
{
    int64_t src, wei, dst, scratch = onednn_scratch(c);
    onednn_sizes(c, &src, &wei, &dst);
    int32_t sp = scratch ? tmp(b, DM_UINT8, scratch, "onednn_scratchpad") : -1;
    int32_t xs = src ? tmp(b, DM_FLOAT, src, "onednn_input") : -1;
    int32_t ws_w = wei ? tmp(b, DM_FLOAT, wei, "onednn_weight") : -1;
    ws->buf[0] = tmp(b, DM_FLOAT, dst, "onednn_output");
    drop(b, ws_w);
    drop(b, xs);
    drop(b, sp);
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
static bool onednn_bwd_phased(const struct cc *b, struct onednn_conv *c)
{
    return b->run->torch_version >= 200 && !b->run->cuda && cpu_conv_uses_onednn(b) &&
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
 * after the weight's grad, below the peak of the three.) AVX-512 is not
 * measured for this case and keeps the rule above. */
static bool onednn_dw_gemm_weight_grad(const struct cc *b, const struct onednn_conv *c)
{
    return b->run->cpu_isa == DNNMEM_CPU_ISA_AVX2 && c->kernel == ONEDNN_DEPTHWISE &&
           c->kh_over_ih;
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
        ws->buf[1] = tmp(b, DM_FLOAT,
                            c->kernel == ONEDNN_DEPTHWISE && c->small_kernel ? dw_wei : blocks,
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
    if (backward) {
        /* the brgemm kernels' passes, one at a time: cpu_conv_grad */
        if (!onednn_brgemm(c))
            onednn_cl_weight_grad(b, c, ws);
        return;
    }
    if (onednn_brgemm(c))
        onednn_brgemm_forward(b, c, ws);
    else
        ws->buf[1] = tmp(b, DM_FLOAT, dw ? dw_wei : wei, "onednn_weight");
}

/* A channels-last conv's backward by the brgemm kernels: the backward-data
 * pass's buffers once grad_input is allocated, then the backward-weights
 * pass's before the weight's grad. */
static bool onednn_brgemm_bwd(const struct cc *b, int k, struct dm_ws *ws,
                              bool after)
{
    struct onednn_conv c;
    if (b->run->torch_version < 200 || b->run->cuda || !cpu_conv_uses_onednn(b) ||
        !onednn_conv_of(b, &c) || !b->cv->chlast || !onednn_brgemm(&c))
        return false;
    if (k == 0 && after)
        onednn_brgemm_backward_data(b, &c);
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

static void cpu_conv_grad(const struct cc *b, int k, struct dm_ws *ws,
                          bool after)
{
    struct onednn_conv c;
    if (k == 0 && after)
        slow3d_grad_input_columns(b);
    if (k > 1 || onednn_brgemm_bwd(b, k, ws, after) || !onednn_bwd_phased(b, &c))
        return;
    if (k == 0 && c.strided && c.kernel == ONEDNN_BLOCKED) {
        onednn_strided_backward_data(b, &c, ws, after);
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
    int32_t gy = tmp(b, DM_FLOAT, dst, "onednn_grad_output");
    if (k == 0) {
        int64_t w_bd = c.kernel == ONEDNN_FIRST ? mul3(pad_block(&c, c.oc), pad_block(&c, c.c), c.k) : wei;
        int64_t gx = c.kernel == ONEDNN_GROUPED ? src : mul3(c.n, pad_block(&c, c.c), c.hw);
        int32_t wr = tmp(b, DM_FLOAT, w_bd, "onednn_weight");
        ws->buf[0] = tmp(b, DM_FLOAT, gx, "onednn_grad_input");
        drop(b, wr);
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
    const struct dm_tinfo *w = &b->cv->w;
    if (w->rank == 4 && w->dims[1] > 1 && w->dims[2] * w->dims[3] > 1 && !b->cv->w_chlast)
        ws->buf[0] = alloc(b, w->dtype, w->bytes, "weight (channels last)");
    ws->buf[1] = alloc(b, DM_FLOAT, w->bytes, "onednn_weight");
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
    if (b->run->torch_version < 200 && !backward && b->cv->chlast) {
        onednn_channels_last_113(b, ws);
        return;
    }
    /* 1.13's forward on an NCHW input on AVX2 takes 2.x's buffers (measured,
     * 1.13.0, Debian's python3-torch, one thread, AVX2: 3x3 16 -> 24 at
     * stride 2 on [2,16,32,32]: +131072 source, +13824 weight, +49152
     * destination, -13824, -131072, +49152 output, -49152; test-cpu.c
     * test_onednn_nchw_113). On AVX-512 1.13 keeps the rule below, measured
     * before on an AVX-512 host (test-estimate.c test_onednn_conv_2x's 1.13
     * figure: no source reorder), not re-measured. */
    if (b->run->torch_version < 200 && !backward && b->run->cpu_isa == DNNMEM_CPU_ISA_AVX2 &&
        onednn_conv_of(b, &c)) {
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
