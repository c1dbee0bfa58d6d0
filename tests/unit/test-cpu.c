/*
 * test-cpu.c: PyTorch's CPU kernels' own buffers (src/schedule/workspace.c,
 * forward.c), each against the profiler's allocation events of torch 2.14.1
 * on one thread (AVX-512 unless said), worked into whole-run peaks by hand.
 * The CPU allocator does not round: every size is the tensor's bytes.
 */
#include "util.h"

enum { F32 = 1 };

/* The inference peak on the CPU under PyTorch `torch` (113, 214, ...). */
static uint64_t cpu_peak(struct tb *b, int torch, enum dnnmem_cpu_isa isa, int threads)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = torch;
    cfg.cpu_threads = threads;
    cfg.cpu_isa = isa;
    cfg.batch_size = 0;
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    uint64_t v = r->peak_allocated;
    dnnmem_result_free(r);
    return v;
}

/* MaxPool kernel 3, stride 2, pad 1 on x of `xdims` (rank 3: 1-D pooling). */
static struct tb *maxpool_graph(const char *xdims, int rank)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, xdims);
    tb_node(b, "MaxPool", "pool", "x", "y");
    int64_t k[2] = {3, 3}, s[2] = {2, 2}, p[4] = {1, 1, 1, 1};
    tb_attr_ints(b, "kernel_shape", rank - 2, k);
    tb_attr_ints(b, "strides", rank - 2, s);
    tb_attr_ints(b, "pads", 2 * (rank - 2), p);
    tb_output(b, "y");
    return b;
}

/* Without grad max_pool2d still runs max_pool2d_with_indices (Pooling.cpp),
 * 1.13 and 2.x alike: on [2,8,16,16] (16384 B) the profiler shows
 * max_pool2d_with_indices allocating 12288 B, the [2,8,8,8] output (4096)
 * and its int64 indices (8192), freed when it returns. max_pool1d on the CPU
 * without grad computes no indices (MaxPooling.cpp's max_pool1d_impl):
 * [2,8,16] (1024 B) -> [2,8,8] (512 B) alone. */
static void test_maxpool_indices_no_grad(void **state)
{
    (void)state;
    assert_int_equal(cpu_peak(maxpool_graph("2,8,16,16", 4), 214, DNNMEM_CPU_ISA_DEFAULT, 1),
                     16384 + 4096 + 8192);
    assert_int_equal(cpu_peak(maxpool_graph("2,8,16,16", 4), 113, DNNMEM_CPU_ISA_DEFAULT, 1),
                     16384 + 4096 + 8192);
    assert_int_equal(cpu_peak(maxpool_graph("2,8,16", 3), 214, DNNMEM_CPU_ISA_DEFAULT, 1),
                     1024 + 512);
}

/* A float32 Conv (no bias) on the channels-last view of x [N, H, W, C]
 * (Transpose (0, 3, 1, 2), then a Relu that keeps the strides), weight
 * [oc, ic/g, k, k], pads k/2, stride 1, `g` groups. */
static struct tb *nhwc_conv_graph(const char *xdims, int64_t oc, int64_t icg, int64_t k, int64_t g)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, xdims);
    tb_init(b, "W", F32, 4, (int64_t[]){oc, icg, k, k});
    tb_node(b, "Transpose", "perm", "x", "xc");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    tb_node(b, "Relu", "act", "xc", "xr");
    tb_node(b, "Conv", "conv", "xr,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){k / 2, k / 2, k / 2, k / 2});
    tb_attr_ints(b, "strides", 2, (int64_t[]){1, 1});
    tb_attr_int(b, "group", g);
    tb_output(b, "y");
    return b;
}

/* oneDNN's brgemm forward on a channels-last input (workspace.c,
 * onednn_brgemm_forward). Each peak: x, the Relu's output, W, the weight's
 * channels-last clone (W again, 1x1 kernels excepted), then measured under
 * mkldnn_convolution: the ATen output, the scratchpad, the blocked weight.
 *  - [1,8,8,24], 24 -> 24, 5x5: 6144 x 3 (x, relu, y), 57600 x 2, 8216,
 *    76800 (24 out channels padded to 32: 32 x 24 x 25 floats); the same
 *    conv under 1.13 (measured 1.13.0, Debian's python3-torch, AVX2: relu's
 *    clamp_min 6144, the clone 57600, the output 6144, ideep's weight
 *    reorder 57600, no scratchpad) takes W three times.
 *  - AVX2, [2,8,8,24], 24 -> 40, 3x3: x and relu 12288 each, W 34560 x 2,
 *    y 20480, 8216, 41472 (40 -> 48, blocks of 24).
 *  - two threads, [2,8,8,24], 24 -> 40, 1x1: no clone, 12336 (4096 + 4120
 *    per thread), 6144 (40 -> 64, blocks of 32); W 3840, y 20480.
 *  - 4 groups of 16 -> 16 (at most a vector per group), 3x3 on [2,8,8,64]:
 *    the weight reordered as it is (36864) and no scratchpad; x and relu
 *    32768 each, W 36864 x 2, y 32768. */
static void test_onednn_brgemm_channels_last(void **state)
{
    (void)state;
    assert_int_equal(cpu_peak(nhwc_conv_graph("1,8,8,24", 24, 24, 5, 1), 214, DNNMEM_CPU_ISA_DEFAULT, 1),
                     6144 * 3 + 57600 * 2 + 8216 + 76800);
    assert_int_equal(cpu_peak(nhwc_conv_graph("1,8,8,24", 24, 24, 5, 1), 113, DNNMEM_CPU_ISA_AVX2, 1),
                     6144 * 3 + 57600 * 3);
    assert_int_equal(cpu_peak(nhwc_conv_graph("2,8,8,24", 40, 24, 3, 1), 214, DNNMEM_CPU_ISA_AVX2, 1),
                     12288 * 2 + 34560 * 2 + 20480 + 8216 + 41472);
    assert_int_equal(cpu_peak(nhwc_conv_graph("2,8,8,24", 40, 24, 1, 1), 214, DNNMEM_CPU_ISA_DEFAULT, 2),
                     12288 * 2 + 3840 + 20480 + 12336 + 6144);
    assert_int_equal(cpu_peak(nhwc_conv_graph("2,8,8,64", 64, 16, 3, 4), 214, DNNMEM_CPU_ISA_DEFAULT, 1),
                     32768 * 2 + 36864 * 2 + 32768 + 36864);
}

/* AVX2's brgemm blocks (cpuconv.c brgemm_pad): 32 out channels are one
 * block of 32, unpadded; more are blocks of 24. Measured, 2.14.1, one
 * thread, AVX2, 3x3 on [2,8,8,32] permuted: 32 -> 32 takes the clone 36864,
 * y 16384, 8216, the reorder 36864 (not 55296, 48 x 32 x 9 floats); 32 -> 64
 * the clone 73728, y 32768, 8216, the reorder 82944 (64 -> 72). x and relu
 * 16384 each, W once more. */
static void test_onednn_brgemm_avx2_one_block(void **state)
{
    (void)state;
    assert_int_equal(cpu_peak(nhwc_conv_graph("2,8,8,32", 32, 32, 3, 1), 214, DNNMEM_CPU_ISA_AVX2, 1),
                     16384 * 3 + 36864 * 3 + 8216);
    assert_int_equal(cpu_peak(nhwc_conv_graph("2,8,8,32", 64, 32, 3, 1), 214, DNNMEM_CPU_ISA_AVX2, 1),
                     16384 * 2 + 73728 * 2 + 32768 + 8216 + 82944);
}

/* torch.split's parts are views of its input (forward.c): y = x * S
 * [1,8,4,4] (512 B), split [4, 4] on the channels, z = a + b (256 B), y and
 * z the outputs. Measured, 2.14.1: the mul's 512 B and the add's 256 B,
 * nothing for the split. Peak x 512 + S 32 + y 512 + z 256, where parts
 * of their own would add 2 x 256. */
static void test_split_views(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "1,8,4,4");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_init_i64(b, "parts", 2, (int64_t[]){4, 4});
    tb_node(b, "Mul", "scale", "x,S", "y");
    tb_node(b, "Split", "split", "y,parts", "a,b");
    tb_attr_int(b, "axis", 1);
    tb_node(b, "Add", "add", "a,b", "z");
    tb_output(b, "y");
    tb_output(b, "z");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 512 + 32 + 512 + 256);
}

/* The allocations and frees, in order, of the buffers whose names start
 * with one of `names` in a training step on the CPU (PyTorch 2.14, one
 * thread, SGD, loss = sum), as "+bytes name" / "-bytes name" lines. */
/* One training step's events under PyTorch `torch` on `threads` threads:
 * those whose buffer's name holds one of `names`, "+BYTES NAME" or "-..." a
 * line each, in order. */
static void train_events_run(struct tb *b, int torch, enum dnnmem_cpu_isa isa, int threads,
                             const char *const *names, size_t n_names, char *out, size_t cap)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_SGD;
    cfg.loss = DNNMEM_LOSS_SUM;
    cfg.iterations = 1;
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = torch;
    cfg.cpu_threads = threads;
    cfg.cpu_isa = isa;
    cfg.batch_size = 0;
    cfg.events = true;
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    size_t n = 0;
    out[0] = 0;
    for (size_t e = 0; e < r->n_events; e++)
        for (size_t k = 0; k < n_names; k++)
            if (r->events[e].buffer && strstr(r->events[e].buffer, names[k]) && n + 80 < cap) {
                n += (size_t)snprintf(out + n, cap - n, "%c%llu %s\n", r->events[e].alloc ? '+' : '-',
                                      (unsigned long long)r->events[e].bytes, names[k]);
                break;
            }
    dnnmem_result_free(r);
}

static void train_events_isa(struct tb *b, enum dnnmem_cpu_isa isa, const char *const *names,
                             size_t n_names, char *out, size_t cap)
{
    train_events_run(b, 214, isa, 1, names, n_names, out, cap);
}

static void train_events(struct tb *b, const char *const *names, size_t n_names, char *out,
                         size_t cap)
{
    train_events_isa(b, DNNMEM_CPU_ISA_DEFAULT, names, n_names, out, cap);
}

/* The brgemm backward of a channels-last conv runs its two passes one
 * after the other (workspace.c, onednn_brgemm_bwd): measured, 2.14.1, one
 * thread, a 3x3 conv 8 -> 12 channels at stride 2 on [2,8,16,16] whose
 * input needs a grad: backward data +6912 (the weight, 12 x 16 x 9 floats),
 * +36888 (its scratchpad), both freed; then backward weights +4608
 * (diff_weights, 16 x 8 x 9 floats: 8 in channels, under a block, unpadded) and the weight-sized channels-last
 * grad (3456). The input is x [2,16,16,8] permuted, times a [1,8,1,1]
 * weight (a channels-last tensor that needs a grad). */
static void test_onednn_brgemm_backward(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,16,16,8");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){12, 8, 3, 3});
    tb_node(b, "Transpose", "perm", "x", "xc");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    tb_node(b, "Mul", "scale", "xc,S", "xs");
    tb_node(b, "Conv", "conv", "xs,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    static const char *const names[] = {"(backward data)", "onednn_diff_weights",
                                        "grad_weight (channels last)"};
    char got[1024];
    train_events(b, names, 3, got, sizeof got);
    assert_string_equal(got, "+6912 (backward data)\n+36888 (backward data)\n"
                             "-36888 (backward data)\n-6912 (backward data)\n"
                             "+4608 onednn_diff_weights\n+3456 grad_weight (channels last)\n"
                             "-4608 onednn_diff_weights\n-3456 grad_weight (channels last)\n");
}

/* A strided conv on an NCHW input runs its backward-data pass by the
 * brgemm kernel on nhwc copies (workspace.c, onednn_strided_backward_data):
 * measured, 2.14.1, one thread, 1x1 at stride 2, 76 -> 12 channels on
 * [2,76,16,16] (x 155648 B, y 6144 B): +6144 (grad_output, nhwc) +4608
 * (the weight, 12 x 96 floats) +155648 (grad_input, nhwc) +36888
 * (scratchpad), -36888 -4608 -6144, then after the ATen grad_input +155648
 * (the copy back to NCHW) and both freed. The input is x times a
 * [1,76,1,1] weight, so that it needs a grad. */
static void test_onednn_strided_backward_data(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,76,16,16");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 76, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){12, 76, 1, 1});
    tb_node(b, "Mul", "scale", "x,S", "xs");
    tb_node(b, "Conv", "conv", "xs,W", "y");
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    static const char *const names[] = {"(nhwc)", "(backward data)", "(to NCHW)"};
    char got[1024];
    train_events(b, names, 3, got, sizeof got);
    assert_string_equal(got, "+6144 (nhwc)\n+4608 (backward data)\n+155648 (nhwc)\n"
                             "+36888 (backward data)\n-36888 (backward data)\n"
                             "-4608 (backward data)\n-6144 (nhwc)\n"
                             "+155648 (to NCHW)\n-155648 (to NCHW)\n-155648 (nhwc)\n");
}

/* The engine adds a node's grads into the next nodes' buffers after the
 * node has made them all (engine.cpp, evaluate_function), so a conv's
 * grad_input summed into its input's grad lives through the weight's grad
 * (backward.c; measured, 2.14.1: randnet's 56 -> 16 3x3 conv whose input
 * is a cat, grad_input 28672 B freed after diff_weights 36864 B). Here xs
 * feeds two convs: the second's grad of xs (28672 B, [2,56,8,8]) is the
 * buffer, the first's is added into it, and freed, once its diff_weights
 * exists (delivered at once, it would be freed before). */
static void test_conv_grads_returned_together(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,56,8,8");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 56, 1, 1});
    tb_init(b, "W1", F32, 4, (int64_t[]){16, 56, 3, 3});
    tb_init(b, "W2", F32, 4, (int64_t[]){16, 56, 3, 3});
    tb_node(b, "Mul", "scale", "x,S", "xs");
    tb_node(b, "Conv", "conv1", "xs,W1", "y1");
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_node(b, "Conv", "conv2", "xs,W2", "y2");
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_output(b, "y1");
    tb_output(b, "y2");
    static const char *const names[] = {"xs.grad", "onednn_diff_weights"};
    char got[1024];
    train_events(b, names, 2, got, sizeof got);
    assert_string_equal(got, "+28672 xs.grad\n+36864 onednn_diff_weights\n-36864 onednn_diff_weights\n"
                             "+28672 xs.grad\n+36864 onednn_diff_weights\n-28672 xs.grad\n"
                             "-36864 onednn_diff_weights\n-28672 xs.grad\n");
}

/* The allocations and frees, in order, of the buffers named exactly one of
 * `names` in a training step on the CPU (PyTorch 2.14, one thread, SGD,
 * loss = sum), as "+bytes name" / "-bytes name" lines; `inplace` as
 * --inplace. */
static void train_events_exact(struct tb *b, const char *const *names, size_t n_names,
                               enum dnnmem_inplace inplace, char *out, size_t cap)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_SGD;
    cfg.loss = DNNMEM_LOSS_SUM;
    cfg.iterations = 1;
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 214;
    cfg.cpu_threads = 1;
    cfg.batch_size = 0;
    cfg.inplace = inplace;
    cfg.events = true;
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    size_t n = 0;
    out[0] = 0;
    for (size_t e = 0; e < r->n_events; e++)
        for (size_t k = 0; k < n_names; k++)
            if (r->events[e].buffer && strcmp(r->events[e].buffer, names[k]) == 0 && n + 80 < cap) {
                n += (size_t)snprintf(out + n, cap - n, "%c%llu %s\n", r->events[e].alloc ? '+' : '-',
                                      (unsigned long long)r->events[e].bytes, names[k]);
                break;
            }
    dnnmem_result_free(r);
}

/* (elu(x * S) * S2).sum().backward() on x [2,8,8,8] (4096 B): F.elu keeps
 * its input (EluBackward0's _saved_self; derivatives.yaml's elu entry reads
 * self), so x * S lives until the Elu's backward has run (measured, 2.14.1:
 * +4096 mul, +4096 elu, ... elu_backward, then the product freed); elu_ in
 * place keeps its result, the product's own buffer (EluBackward1's
 * _saved_result), which --inplace auto runs. Both freed by the second
 * Mul's backward or the Elu's. */
static void test_elu_saves_input(void **state)
{
    (void)state;
    static const char *const names[] = {"hx", "ex"};
    char got[512];
    for (int k = 0; k < 2; k++) {
        struct tb *b = tb_new(13);
        tb_input(b, "x", F32, "2,8,8,8");
        tb_init(b, "S", F32, 4, (int64_t[]){1, 8, 1, 1});
        tb_init(b, "S2", F32, 4, (int64_t[]){1, 8, 1, 1});
        tb_node(b, "Mul", "/scale/Mul", "x,S", "hx");
        tb_node(b, "Elu", "/act/Elu", "hx", "ex");
        tb_node(b, "Mul", "/scale2/Mul", "ex,S2", "y");
        tb_output(b, "y");
        train_events_exact(b, names, 2, k ? DNNMEM_INPLACE_AUTO : DNNMEM_INPLACE_NONE, got,
                           sizeof got);
        assert_string_equal(got, k ? "+4096 hx\n-4096 hx\n"
                                   : "+4096 hx\n+4096 ex\n-4096 ex\n-4096 hx\n");
    }
}

/* A module keeps its argument until it returns (schedule.c, module_holds),
 * and the exporter's own nodes, named without a scope ("Constant_7": the
 * axes of an Unsqueeze at opset 13), do not end the module's run of nodes
 * (graph.c, scope_transparent): h, /blk's argument, is live at /blk/b, with
 * x, y1 and y2 (4096 B each, no grad); with the run cut at Constant_7 it
 * was freed after /blk/a (12288). */
static void test_scope_unscoped_constant(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "1,1024");
    tb_node(b, "Sigmoid", "/pre/Sigmoid", "x", "h");
    tb_node(b, "Sigmoid", "/blk/a/Sigmoid", "h", "y1");
    tb_node(b, "Constant", "Constant_7", "", "axes");
    Onnx__AttributeProto *a = tb_attr_new(b, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    a->t = tb_calloc(b, 1, sizeof *a->t);
    onnx__tensor_proto__init(a->t);
    a->t->has_data_type = 1;
    a->t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    a->t->n_dims = 1;
    a->t->dims = tb_calloc(b, 2, sizeof *a->t->dims);
    a->t->dims[0] = 1;
    a->t->n_int64_data = 1;
    a->t->int64_data = tb_calloc(b, 2, sizeof *a->t->int64_data);
    tb_node(b, "Sigmoid", "/blk/b/Sigmoid", "y1", "y2");
    tb_node(b, "Unsqueeze", "/blk/c/Unsqueeze", "y2,axes", "y3");
    tb_output(b, "y3");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 4 * 4096);
}

/* An nn.ReLU call as torch.onnx's modules export writes it
 * (export_modules_as_functions: the model-local function
 * torch.nn.modules.activation::ReLU, one Relu, called with the module's
 * `inplace`); the first call adds the function, so the graph is a modules
 * export. */
static void tb_relu_module(struct tb *b, const char *name, const char *in, const char *out,
                           int64_t inplace)
{
    static const char dom[] = "torch.nn.modules.activation";
    if (b->m.n_functions == 0) {
        Onnx__FunctionProto *f = tb_calloc(b, 1, sizeof *f);
        onnx__function_proto__init(f);
        f->name = tb_str(b, "ReLU");
        f->domain = tb_str(b, dom);
        TB_PUSH(b, &f->input, &f->n_input, tb_str(b, "x"));
        TB_PUSH(b, &f->output, &f->n_output, tb_str(b, "y"));
        TB_PUSH(b, &f->attribute, &f->n_attribute, tb_str(b, "inplace"));
        Onnx__NodeProto *n = tb_calloc(b, 1, sizeof *n);
        onnx__node_proto__init(n);
        n->op_type = tb_str(b, "Relu");
        n->name = tb_str(b, "Relu_1");
        TB_PUSH(b, &n->input, &n->n_input, tb_str(b, "x"));
        TB_PUSH(b, &n->output, &n->n_output, tb_str(b, "y"));
        TB_PUSH(b, &f->node, &f->n_node, n);
        Onnx__OperatorSetIdProto *fo = tb_calloc(b, 1, sizeof *fo), *mo = tb_calloc(b, 1, sizeof *mo);
        onnx__operator_set_id_proto__init(fo);
        fo->domain = tb_str(b, "");
        fo->has_version = 1;
        fo->version = 15;
        TB_PUSH(b, &f->opset_import, &f->n_opset_import, fo);
        onnx__operator_set_id_proto__init(mo);
        mo->domain = tb_str(b, dom);
        mo->has_version = 1;
        mo->version = 1;
        TB_PUSH(b, &b->m.opset_import, &b->m.n_opset_import, mo);
        TB_PUSH(b, &b->m.functions, &b->m.n_functions, f);
    }
    tb_node(b, "ReLU", name, in, out);
    b->last->domain = tb_str(b, dom);
    tb_attr_int(b, "inplace", inplace);
}

/* Python names a module call's result that its caller reads in two places
 * (schedule.c, caller_names): Top(Blk) with Blk.forward
 *     y = self.a(x); return self.act(self.f1(y) * self.f2(y))
 * (a, f1: sigmoid, f2: tanh, act: nn.ReLU(); x [1,1024], 4096 B), exported
 * by torch 2.14.1 (modules export, opset 15) as below. Measured, 2.14.1,
 * no grad: +y +f1 +f2 +mul -f1 -f2 +act -mul, y freed when Blk returns:
 * 5 x 4096 at most with x. Without the rule y went after f2 (4 x 4096). The
 * plain export (a Relu node, no local function) has the same scopes in its
 * node names, and the same run: 5 x 4096 too. */
static void test_caller_name_two_places(void **state)
{
    (void)state;
    for (int modules = 0; modules < 2; modules++) {
        struct tb *b = tb_new(15);
        tb_input(b, "input", F32, "1,1024");
        tb_node(b, "Sigmoid", "/blk/a/Sigmoid", "input", "y");
        tb_node(b, "Sigmoid", "/blk/f1/Sigmoid", "y", "s");
        tb_node(b, "Tanh", "/blk/f2/Tanh", "y", "t");
        tb_node(b, "Mul", "/blk/Mul", "s,t", "m");
        if (modules)
            tb_relu_module(b, "/blk/act/ReLU", "m", "output", 0);
        else
            tb_node(b, "Relu", "/blk/act/Relu", "m", "output");
        tb_output(b, "output");
        assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 5 * 4096);
    }
}

/* A result kept across another statement is a name (kept_across): starnet's
 * Block, `x = self.a(x); x1, x2 = self.f1(x), self.f2(x); return
 * self.act(x1) * x2` (timm/models/starnet.py): f2 runs between f1 and act
 * and feeds only the Mul, so x1 was no temporary handed to act; x is read
 * by two calls. Measured, 2.14.1, no grad, x [1,1024]: +x +x1 +x2 +act
 * +mul, all but the output freed when Blk returns: 6 x 4096 with the input
 * (dnnmem had 4: x freed after f2, x1 after act). */
static void test_caller_name_kept_across(void **state)
{
    (void)state;
    struct tb *b = tb_new(15);
    tb_input(b, "input", F32, "1,1024");
    tb_node(b, "Sigmoid", "/blk/a/Sigmoid", "input", "x");
    tb_node(b, "Sigmoid", "/blk/f1/Sigmoid", "x", "x1");
    tb_node(b, "Tanh", "/blk/f2/Tanh", "x", "x2");
    tb_relu_module(b, "/blk/act/ReLU", "x1", "a", 0);
    tb_node(b, "Mul", "/blk/Mul", "a,x2", "output");
    tb_output(b, "output");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 6 * 4096);
}

/* A name last read by an op of the caller's own is rebound there: `y =
 * self.f(x); y = y + self.g(y); return self.act(self.h(y) * y)` (f:
 * sigmoid, g, h: tanh; a sigmoid for h would be lifted to SiLU). Measured,
 * 2.14.1, no grad, x [1,1024]: +y +g +add, y and g freed by the rebinding,
 * +h +mul, h freed, +act: 4 x 4096 at most with x; held until Blk returns,
 * the first y would make 5 at the Mul. */
static void test_caller_name_rebound(void **state)
{
    (void)state;
    struct tb *b = tb_new(15);
    tb_input(b, "input", F32, "1,1024");
    tb_node(b, "Sigmoid", "/blk/f/Sigmoid", "input", "y");
    tb_node(b, "Tanh", "/blk/g/Tanh", "y", "t");
    tb_node(b, "Add", "/blk/Add", "y,t", "s");
    tb_node(b, "Tanh", "/blk/h/Tanh", "s", "h");
    tb_node(b, "Mul", "/blk/Mul", "h,s", "m");
    tb_relu_module(b, "/blk/act/ReLU", "m", "output", 0);
    tb_output(b, "output");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 4 * 4096);
}

/* torch.cat's list outlives it: timm's HighPerfGpuBlock (hgnet.py) runs
 * `output = [x]; for layer in self.layers: x = layer(x); output.append(x);
 * x = torch.cat(output, dim=1); return self.aggregation(x)`. With two
 * layers (sigmoid, tanh) and an nn.ReLU() for the aggregation, x [1,1024]:
 * measured, 2.14.1, no grad, +l1 +l2 +cat(12288) +relu(12288), then all
 * freed as Blk returns: 36864 B at most with x. l1's result is read by l2
 * and the cat, l2's by the cat alone, held as the list's (dnnmem had
 * 28672: both freed after the cat). */
static void test_caller_name_cat_list(void **state)
{
    (void)state;
    struct tb *b = tb_new(15);
    tb_input(b, "input", F32, "1,1024");
    tb_node(b, "Sigmoid", "/blk/l1/Sigmoid", "input", "a");
    tb_node(b, "Tanh", "/blk/l2/Tanh", "a", "t");
    tb_node(b, "Concat", "/blk/Concat", "input,a,t", "c");
    tb_attr_int(b, "axis", 1);
    tb_relu_module(b, "/blk/agg/ReLU", "c", "output", 0);
    tb_output(b, "output");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 36864);
}

/* A self-attention's q, k and v: the qkv Linear's [2,16,72] output chunked
 * along its last dim (Slice views), each reshaped to [2,16,2,12] (a view:
 * the last dim split, torch's computeStride), transposed; q @ k^T and
 * scores @ v. Measured, 2.14.1, no grad: +9216 (qkv), +3072 +3072
 * (matmul's contiguous copies of q and k: their [4,16,12] and [4,12,16]
 * reshapes are no views), +4096 (the scores), both copies freed; +3072 (v's
 * copy), +3072 (the output), its copy freed: 19456 B at most, with x
 * (3072) and W (6912). When reshape copied every non-contiguous tensor,
 * q, k and v were three copies and qkv was freed after them. */
static void test_reshape_views_matmul_copies(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,16,24");
    tb_init(b, "W", F32, 2, (int64_t[]){24, 72});
    tb_node(b, "MatMul", "/qkv/MatMul", "x,W", "qkv");
    tb_init_i64(b, "shape", 4, (int64_t[]){2, 16, 2, 12});
    tb_init_i64(b, "axes", 1, (int64_t[]){2});
    static const char *const part[3] = {"q", "k", "v"};
    static const int64_t perm[3][4] = {{0, 2, 1, 3}, {0, 2, 3, 1}, {0, 2, 1, 3}};
    char ins[64], mid[16], out[16], nm[32];
    for (int p = 0; p < 3; p++) {
        snprintf(nm, sizeof nm, "start%d", p);
        tb_init_i64(b, nm, 1, (int64_t[]){24 * p});
        snprintf(nm, sizeof nm, "end%d", p);
        tb_init_i64(b, nm, 1, (int64_t[]){24 * (p + 1)});
        snprintf(ins, sizeof ins, "qkv,start%d,end%d,axes", p, p);
        snprintf(nm, sizeof nm, "/Slice_%d", p);
        tb_node(b, "Slice", nm, ins, part[p]);
        snprintf(ins, sizeof ins, "%s,shape", part[p]);
        snprintf(mid, sizeof mid, "%s4", part[p]);
        snprintf(nm, sizeof nm, "/Reshape_%d", p);
        tb_node(b, "Reshape", nm, ins, mid);
        snprintf(out, sizeof out, "%sT", part[p]);
        snprintf(nm, sizeof nm, "/Transpose_%d", p);
        tb_node(b, "Transpose", nm, mid, out);
        tb_attr_ints(b, "perm", 4, perm[p]);
    }
    tb_node(b, "MatMul", "/MatMul", "qT,kT", "s");
    tb_node(b, "MatMul", "/MatMul_1", "s,vT", "o");
    tb_output(b, "o");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 3072 + 6912 + 19456);
}

/* relu_ on F.instance_norm's output, a view of batch_norm's [1, N*C, H, W]
 * output: its backward is autograd's CopySlices (save.c, on_view):
 * measured, 2.14.1, on [2,8,8,8] (4096 B): new_empty_strided (the grad
 * handed on, here vn.grad), clone, threshold_backward, the last two freed
 * before it returns (dnnmem makes the clone first; the same three at the
 * peak). The product x * S needs a grad, so the view's base does. */
static void test_copy_slices(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,8,8,8");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_init(b, "S2", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_init(b, "g", F32, 1, (int64_t[]){8});
    tb_init(b, "bb", F32, 1, (int64_t[]){8});
    tb_node(b, "Mul", "/scale/Mul", "x,S", "hx");
    tb_node(b, "InstanceNormalization", "/norm/InstanceNormalization", "hx,g,bb", "vn");
    tb_node(b, "Relu", "/act/Relu", "vn", "r");
    tb_node(b, "Mul", "/scale2/Mul", "r,S2", "y");
    tb_output(b, "y");
    static const char *const names[] = {"CopySlices: grad_slice.clone()", "vn.grad",
                                        "CopySlices: the op's grad"};
    char got[512];
    train_events(b, names, 3, got, sizeof got);
    assert_string_equal(got, "+4096 CopySlices: grad_slice.clone()\n+4096 vn.grad\n"
                             "+4096 CopySlices: the op's grad\n-4096 CopySlices: the op's grad\n"
                             "-4096 CopySlices: grad_slice.clone()\n-4096 vn.grad\n");
}

/* A Constant node making n float32 values v (torch.onnx's ones and zeros
 * for a norm's absent weight). */
static void const_node_f32(struct tb *b, const char *out, size_t n, float v)
{
    tb_node(b, "Constant", out, "", out);
    Onnx__AttributeProto *a = tb_attr_new(b, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    Onnx__TensorProto *t = tb_calloc(b, 1, sizeof *t);
    onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = F32;
    t->n_dims = 1;
    t->dims = tb_calloc(b, 1, sizeof *t->dims);
    t->dims[0] = (int64_t)n;
    t->n_float_data = n;
    t->float_data = tb_calloc(b, n, sizeof *t->float_data);
    for (size_t k = 0; k < n; k++)
        t->float_data[k] = v;
    a->t = t;
}

/* F.instance_norm runs batch_norm on [1, N*C, H, W] (save.c,
 * keep_instance_norm): measured, tools/oracle/instnorm_probe.py, 2.14.1 and
 * 1.13 alike, (InstanceNorm2d(8, affine)(x * S) * S2).sum() on [2,8,8,8]:
 * the forward keeps the weight repeated twice (64 B) with affine=True,
 * save_mean and save_invstd (64 B each); NativeBatchNormBackward0 frees the
 * three. Without affine only the two statistics, and the Constant ones[8]
 * and zeros[8] torch.onnx writes for weight=None are never allocated
 * (schedule.c, absent_norm_weight). */
static struct tb *instance_norm_graph(bool affine)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,8,8,8");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_init(b, "S2", F32, 4, (int64_t[]){1, 8, 1, 1});
    if (affine) {
        tb_init(b, "g", F32, 1, (int64_t[]){8});
        tb_init(b, "bb", F32, 1, (int64_t[]){8});
    } else {
        const_node_f32(b, "ones8", 8, 1.0f);
        const_node_f32(b, "zeros8", 8, 0.0f);
    }
    tb_node(b, "Mul", "/scale/Mul", "x,S", "hx");
    tb_node(b, "InstanceNormalization", "/norm/InstanceNormalization",
            affine ? "hx,g,bb" : "hx,ones8,zeros8", "vn");
    tb_node(b, "Mul", "/scale2/Mul", "vn,S2", "y");
    tb_output(b, "y");
    return b;
}

static void test_instance_norm_saved(void **state)
{
    (void)state;
    static const char *const names[] = {"weight.repeat(N)", "save_mean", "save_invstd", "ones8",
                                        "zeros8"};
    char got[512];
    for (int torch = 113; torch <= 214; torch += 101) {
        train_events_run(instance_norm_graph(true), torch, DNNMEM_CPU_ISA_DEFAULT, 1, names, 5,
                         got, sizeof got);
        assert_string_equal(got, "+64 weight.repeat(N)\n+64 save_mean\n+64 save_invstd\n"
                                 "-64 weight.repeat(N)\n-64 save_mean\n-64 save_invstd\n");
        train_events_run(instance_norm_graph(false), torch, DNNMEM_CPU_ISA_DEFAULT, 1, names, 5,
                         got, sizeof got);
        assert_string_equal(got, "+64 save_mean\n+64 save_invstd\n-64 save_mean\n-64 save_invstd\n");
    }
}

/* nn.GroupNorm(2, 8, affine=False) then ReLU(inplace=True), as torch.onnx
 * writes it (lift.c leaves it: Reshape [0, 2, -1], InstanceNormalization of
 * Constant ones and zeros, Reshape back): PyTorch runs native_group_norm,
 * whose output is no view, so relu_'s backward is ReluBackward0 alone, no
 * CopySlices (save.c, on_view); the kept mean and rstd are [N, G]. Measured,
 * tools/oracle/instnorm_probe.py --group 2 --relu-inplace, 2.14.1, on
 * (relu_(GroupNorm(x * S)) * S2).sum(), x [2,8,8,8]: forward +16, +16 kept;
 * backward threshold_backward +4096, and both freed by
 * NativeGroupNormBackward0. */
static void test_groupnorm_noaffine_inplace(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,8,8,8");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_init(b, "S2", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_init_i64(b, "to_groups", 3, (int64_t[]){0, 2, -1});
    const_node_f32(b, "ones2", 2, 1.0f);
    const_node_f32(b, "zeros2", 2, 0.0f);
    tb_node(b, "Mul", "/scale/Mul", "x,S", "hx");
    tb_node(b, "Reshape", "/gn/Reshape", "hx,to_groups", "r");
    tb_node(b, "InstanceNormalization", "/gn/InstanceNormalization", "r,ones2,zeros2", "in");
    tb_node(b, "Shape", "/gn/Shape", "hx", "shape");
    tb_node(b, "Reshape", "/gn/Reshape_1", "in,shape", "gn");
    tb_node(b, "Relu", "/act/Relu", "gn", "a");
    tb_node(b, "Mul", "/scale2/Mul", "a,S2", "y");
    tb_output(b, "y");
    static const char *const names[] = {"CopySlices", "save_mean", "save_invstd", "ones2", "zeros2"};
    char got[512];
    train_events(b, names, 5, got, sizeof got);
    assert_string_equal(got, "+16 save_mean\n+16 save_invstd\n-16 save_mean\n-16 save_invstd\n");
}

/* A value computed from weights alone that an op on the input reads is a
 * tensor PyTorch makes in every forward (forward.c, weight_computed):
 * x @ (W * G), x [4,16], W [16,32], G [1,32], no grad, measured on 2.14.1:
 * +2048 (the product), +512 (the output), -2048: 2560 B beside x (256),
 * W (2048) and G (128). */
static void test_weight_computed(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "4,16");
    tb_init(b, "W", F32, 2, (int64_t[]){16, 32});
    tb_init(b, "G", F32, 2, (int64_t[]){1, 32});
    tb_node(b, "Mul", "/gain/Mul", "W,G", "wg");
    tb_node(b, "MatMul", "/fc/MatMul", "x,wg", "y");
    tb_output(b, "y");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 256 + 2048 + 128 + 2560);
}

/* A float32 scalar Constant node (torch.onnx's Dropout ratio). */
static void scalar_node_f32(struct tb *b, const char *out, float v)
{
    tb_node(b, "Constant", out, "", out);
    Onnx__AttributeProto *a = tb_attr_new(b, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    Onnx__TensorProto *t = tb_calloc(b, 1, sizeof *t);
    onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = F32;
    t->n_float_data = 1;
    t->float_data = tb_calloc(b, 1, sizeof *t->float_data);
    t->float_data[0] = v;
    a->t = t;
}

/* A module run on a buffer runs each of its ops in every forward, so each
 * result of the chain is a tensor, not only the last one, which an op on
 * the input reads (schedule.c, analyse; Swin V2's continuous position bias,
 * timm's swin_transformer_v2_cr meta_mlp(relative_coordinates_log)):
 * x + fc2(drop(relu(fc1(c)))), c a [64, 2] buffer, fc1 Linear(2, 32),
 * nn.ReLU(), Dropout(0.125), fc2 Linear(32, 4), x [2, 64, 4], loss
 * sum, measured with tools/oracle/weightmlp_probe.py --train --p 0.125 on
 * 2.14.1: forward +8192 fc1, +8192 relu, -8192 fc1, +8192 the noise, +8192
 * the product; backward: fc2's AddmmBackward0 frees the product it kept,
 * MulBackward0 frees the noise, ReluBackward0 the relu output it kept.
 * Before, only fc2's output was counted. */
static void test_weight_computed_chain(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,64,4");
    tb_init(b, "c", F32, 2, (int64_t[]){64, 2});
    tb_init(b, "W1", F32, 2, (int64_t[]){32, 2});
    tb_init(b, "B1", F32, 1, (int64_t[]){32});
    tb_init(b, "W2", F32, 2, (int64_t[]){4, 32});
    tb_init(b, "B2", F32, 1, (int64_t[]){4});
    scalar_node_f32(b, "ratio", 0.125f);
    tb_node(b, "Gemm", "/meta_mlp/fc1/Gemm", "c,W1,B1", "h1");
    tb_attr_int(b, "transB", 1);
    tb_node(b, "Relu", "/meta_mlp/act/Relu", "h1", "a");
    tb_node(b, "Dropout", "/meta_mlp/drop1/Dropout", "a,ratio", "d");
    tb_node(b, "Gemm", "/meta_mlp/fc2/Gemm", "d,W2,B2", "m");
    tb_attr_int(b, "transB", 1);
    tb_node(b, "Add", "/Add", "x,m", "y");
    tb_output(b, "y");
    /* the noise (torch allocates it before the product, dnnmem after: both
     * live until the op returns) is not what this test is about */
    static const char *const names[] = {"h1", "a", "d"};
    char got[512];
    train_events_exact(b, names, 3, DNNMEM_INPLACE_NONE, got, sizeof got);
    assert_string_equal(got, "+8192 h1\n+8192 a\n-8192 h1\n+8192 d\n-8192 d\n-8192 a\n");
}

/* A non-persistent buffer indexing a weight, which torch.onnx writes as a
 * Constant node, is a tensor PyTorch holds before the run (schedule.c,
 * weight_index_buffer): timm's TinyViT `attention_biases[:,
 * attention_bias_idxs]`, here W [4, 49] and an int64 [49, 49] index (19208
 * B) over x [1, 4, 49, 49]; tiny_vit_5m_224's measured bytes_before (torch
 * 2.14.1) holds ten such, 1,920,800 B, that dnnmem's setup did not. A
 * scalar index (a select) is no tensor. */
static void test_weight_index_buffer(void **state)
{
    (void)state;
    for (int scalar = 0; scalar <= 1; scalar++) {
        struct tb *b = tb_new(13);
        tb_input(b, "x", F32, scalar ? "1,49,4" : "1,4,49,49");
        tb_init(b, "W", F32, 2, (int64_t[]){4, 49});
        tb_node(b, "Constant", "/attn/Constant", "", "idx");
        Onnx__AttributeProto *a =
            tb_attr_new(b, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
        Onnx__TensorProto *t = tb_calloc(b, 1, sizeof *t);
        onnx__tensor_proto__init(t);
        t->has_data_type = 1;
        t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        size_t n = scalar ? 1 : 49 * 49;
        if (!scalar) {
            t->n_dims = 2;
            t->dims = tb_calloc(b, 2, sizeof *t->dims);
            t->dims[0] = t->dims[1] = 49;
        }
        t->n_int64_data = n;
        t->int64_data = tb_calloc(b, n, sizeof *t->int64_data);
        for (size_t k = 0; k < n; k++)
            t->int64_data[k] = (int64_t)(k % 49);
        a->t = t;
        tb_node(b, "Gather", "/attn/Gather", "W,idx", "bias");
        tb_attr_int(b, "axis", 1);
        tb_node(b, "Add", "/attn/Add", "x,bias", "y");
        tb_output(b, "y");
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.device = DNNMEM_DEVICE_CPU;
        cfg.torch_version = 214;
        cfg.cpu_threads = 1;
        cfg.batch_size = 0;
        struct dnnmem_result *r = estimate_cfg(b, &cfg);
        assert_int_equal(r->category_bytes[DNNMEM_CAT_WEIGHT], scalar ? 784 : 784 + 19208);
        dnnmem_result_free(r);
    }
}

/* A 1x1 convolution with fewer in channels than a block is no "first
 * convolution" (workspace.c, onednn_conv_of): measured, 2.14.1, 12 -> 5
 * channels at stride 2 on [2,12,32,32] (98304 B), no bias: +16512 (the
 * strided 1x1 kernel's copy of the source, padded to 16 channels), +131072
 * (the source reordered, padded), +1024 (the weight, 16 x 16), +32768 (the
 * destination, 16 channels): 181376 B beside x and W (240). */
static void test_onednn_1x1_small_input(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,12,32,32");
    tb_init(b, "W", F32, 4, (int64_t[]){5, 12, 1, 1});
    tb_node(b, "Conv", "/conv/Conv", "x,W", "y");
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 98304 + 240 + 181376);
}

/* MulBackward0's grad of a broadcast operand is a full-size product the
 * engine sums to the operand's shape after the node returns its grads
 * (backward.c, broadcast_product): (elu(x * S) * S2).sum().backward() on
 * [2,8,8,8], measured on 2.14.1: +4096 (the Elu output's grad), +4096
 * (grad * elu for S2), +32 (its sum, S2's grad), -4096; the same for S. */
static void test_broadcast_mul_grad(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,8,8,8");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_init(b, "S2", F32, 4, (int64_t[]){1, 8, 1, 1});
    tb_node(b, "Mul", "/scale/Mul", "x,S", "hx");
    tb_node(b, "Elu", "/act/Elu", "hx", "ex");
    tb_node(b, "Mul", "/scale2/Mul", "ex,S2", "y");
    tb_output(b, "y");
    static const char *const names[] = {"ex.grad", "(before sum_to)", "S2.grad", "S.grad"};
    char got[512];
    train_events(b, names, 4, got, sizeof got);
    assert_string_equal(got, "+4096 ex.grad\n+4096 (before sum_to)\n+32 S2.grad\n"
                             "-4096 (before sum_to)\n-4096 ex.grad\n+4096 (before sum_to)\n"
                             "+32 S.grad\n-4096 (before sum_to)\n");
}

/* A 3x3x3 Conv3d, pads 1, on x of `xdims` (W [oc, ic, 3, 3, 3], a bias
 * when `bias`); `scaled`: x * S first, so the conv's input needs a grad. */
static struct tb *conv3d_graph(const char *xdims, int64_t oc, int64_t ic, bool bias, bool scaled)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, xdims);
    if (scaled)
        tb_init(b, "S", F32, 5, (int64_t[]){1, ic, 1, 1, 1});
    tb_init(b, "W", F32, 5, (int64_t[]){oc, ic, 3, 3, 3});
    if (bias)
        tb_init(b, "B", F32, 1, (int64_t[]){oc});
    if (scaled)
        tb_node(b, "Mul", "scale", "x,S", "xs");
    tb_node(b, "Conv", "conv", bias ? (scaled ? "xs,W,B" : "x,W,B") : (scaled ? "xs,W" : "x,W"), "y");
    tb_attr_ints(b, "pads", 6, (int64_t[]){1, 1, 1, 1, 1, 1});
    tb_output(b, "y");
    return b;
}

/* 3-D convolutions on the CPU (cpuconv.c), measured with torch 2.14.1 on one
 * thread (torch._C._select_conv_backend and the profiler's events):
 *  - use_mkldnn counts size(0..3) of the input, N * C * D * H: a 3x3x3 64 ->
 *    64 conv on [1,64,8,16,16] (131072 elements, 8192 so counted) goes to
 *    Slow3d, whose vol2col columns {N, C*27, D*H*W} are made before the
 *    output: +14155776, +524288, -14155776. Peak: x 524288, W 442368, the
 *    columns, y 524288.
 *  - at batch 2 oneDNN's blocked kernel as in 2-D: +1048576 source,
 *    +442368 weight, +1048576 destination (then the ATen output, after the
 *    weight and source are freed). Peak: x 1048576, W, those three.
 *  - Slow3d's backward, 16 -> 24 channels with a bias on [1,16,4,8,8]:
 *    +16384 grad_input, +442368 fgrad_input, -442368, +96 grad_bias, +41472
 *    grad_weight, +442368 columns, -442368.
 * 1.13.0 (Debian's python3-torch, AVX2) gives both forwards' events to the
 * byte, oneDNN's at batch 2 on its AVX2 rule (cpuconv.c onednn_workspace). */
static void test_conv3d(void **state)
{
    (void)state;
    assert_int_equal(cpu_peak(conv3d_graph("1,64,8,16,16", 64, 64, false, false), 113,
                              DNNMEM_CPU_ISA_AVX2, 1),
                     524288 + 442368 + 14155776 + 524288);
    assert_int_equal(cpu_peak(conv3d_graph("2,64,8,16,16", 64, 64, false, false), 113,
                              DNNMEM_CPU_ISA_AVX2, 1),
                     1048576 + 442368 + 1048576 + 442368 + 1048576);
    assert_int_equal(cpu_peak(conv3d_graph("1,64,8,16,16", 64, 64, false, false), 214,
                              DNNMEM_CPU_ISA_DEFAULT, 1),
                     524288 + 442368 + 14155776 + 524288);
    assert_int_equal(cpu_peak(conv3d_graph("2,64,8,16,16", 64, 64, false, false), 214,
                              DNNMEM_CPU_ISA_DEFAULT, 1),
                     1048576 + 442368 + 1048576 + 442368 + 1048576);
    static const char *const names[] = {"xs.grad", "thnn_columns", "fgrad_input"};
    char got[1024];
    train_events(conv3d_graph("1,16,4,8,8", 24, 16, true, true), names, 3, got, sizeof got);
    assert_string_equal(got, "+442368 thnn_columns\n-442368 thnn_columns\n"
                             "+16384 xs.grad\n+442368 fgrad_input\n-442368 fgrad_input\n"
                             "+442368 thnn_columns\n-442368 thnn_columns\n-16384 xs.grad\n");
}

/* F.pad keeps a channels-last input's format, whatever the mode (layout.c;
 * checked on 2.14.1), so a conv after it runs channels-last: _convolution
 * copies its weight .contiguous(channels_last) (DaViT's downsample pads,
 * then convs, a LayerNorm2d's permuted output: the 4,718,592 B
 * `aten::conv2d > aten::clone` at its inference peak; -3.7% -> 0.00%).
 * x [2,8,8,16] NHWC -> Transpose (0, 3, 1, 2) -> Pad 1 -> Conv 3x3 16 -> 24
 * (W 13,824 B): the copy is the first such buffer, in the forward. */
static void test_pad_keeps_channels_last(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,8,8,16");
    tb_init(b, "W", F32, 4, (int64_t[]){24, 16, 3, 3});
    tb_init_i64(b, "pads", 8, (int64_t[]){0, 0, 1, 1, 0, 0, 1, 1});
    tb_node(b, "Transpose", "perm", "x", "xc");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    tb_node(b, "Pad", "pad", "xc,pads", "xp");
    tb_node(b, "Conv", "conv", "xp,W", "y");
    tb_output(b, "y");
    static const char *const names[] = {"weight (channels last)"};
    char got[1024];
    train_events(b, names, 1, got, sizeof got);
    assert_true(strncmp(got, "+13824 weight (channels last)\n-13824 weight (channels last)\n", 60) == 0);
}

/* x [N,8,8,16] permuted to a channels-last NCHW view, F.pad 1, a 3x3 conv
 * 16 -> 24 without bias (W 13,824 B): the 1.13 channels-last tests' graph. */
static struct tb *padded_channels_last_conv(const char *xdims)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, xdims);
    tb_init(b, "W", F32, 4, (int64_t[]){24, 16, 3, 3});
    tb_init_i64(b, "pads", 8, (int64_t[]){0, 0, 1, 1, 0, 0, 1, 1});
    tb_node(b, "Transpose", "perm", "x", "xc");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    tb_node(b, "Pad", "pad", "xc,pads", "xp");
    tb_node(b, "Conv", "conv", "xp,W", "y");
    tb_output(b, "y");
    return b;
}

/* 1.13 copies the weight too (ConvolutionMM2d.cpp's channels-last path;
 * measured 1.13.0, Debian's python3-torch, one thread, AVX2, no_grad): x
 * [1,8,8,16] (4096 B) permuted to NCHW, F.pad 1 (6400 B, channels-last),
 * conv2d 3x3 16 -> 24 without bias, W 13,824 B: the profiler's blocks are the
 * pad's 6400, the weight's clone 13,824 (aten::empty_like under
 * aten::_convolution), the columns 36,864, the output 6144; peak 4096 +
 * 13824 + 6400 + 13824 + 36864 + 6144 = 81,152 B.  Without the copy, 67,328. */
static void test_thnn_weight_copy_113(void **state)
{
    (void)state;
    struct tb *b = padded_channels_last_conv("1,8,8,16");
    assert_int_equal(cpu_peak(b, 113, DNNMEM_CPU_ISA_AVX2, 1),
                     4096 + 13824 + 6400 + 13824 + 36864 + 6144);
}

/* 1.13's oneDNN conv of a channels-last input (measured 1.13.0, Debian's
 * python3-torch, one thread, AVX2, no_grad): x [2,8,8,16] (8192 B) permuted, F.pad
 * 1 (12,800 B, channels-last), conv2d 3x3 16 -> 24 without bias (W 13,824 B;
 * batch 2, so oneDNN): the weight's channels-last clone 13,824, the
 * channels-last output 12,288 (aten::resize_, written by oneDNN directly) and
 * ideep's weight reorder 13,824; peak 8192 + 13824 + 12800 + 13824 + 12288 +
 * 13824 = 74,752 B (the NCHW rule's onednn_output instead of the clone:
 * 73,216). */
static void test_onednn_channels_last_113(void **state)
{
    (void)state;
    struct tb *b = padded_channels_last_conv("2,8,8,16");
    assert_int_equal(cpu_peak(b, 113, DNNMEM_CPU_ISA_AVX2, 1),
                     8192 + 13824 + 12800 + 13824 + 12288 + 13824);
}

/* 1.13's oneDNN forward on an NCHW input (measured 1.13.0, Debian's
 * python3-torch, one thread, AVX2, no_grad): x [2,16,32,32] (131,072 B), a 3x3
 * conv 16 -> 24, pad 1, no bias, W 13,824 B.  Under mkldnn_convolution:
 * +source (131,072) +weight (13,824) +destination -weight -source, then the
 * ATen output, then -destination.  Stride 2 (destination and output 49,152):
 * peak x + W + 131,072 + 13,824 + 49,152 = 338,944 B; stride 1 (196,608
 * each): x + W + 2 x 196,608 = 538,112 B. */
static void test_onednn_nchw_113(void **state)
{
    (void)state;
    for (int64_t s = 1; s <= 2; s++) {
        struct tb *b = tb_new(13);
        tb_input(b, "x", F32, "2,16,32,32");
        tb_init(b, "W", F32, 4, (int64_t[]){24, 16, 3, 3});
        tb_node(b, "Conv", "conv", "x,W", "y");
        tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
        tb_attr_ints(b, "strides", 2, (int64_t[]){s, s});
        tb_output(b, "y");
        assert_int_equal(cpu_peak(b, 113, DNNMEM_CPU_ISA_AVX2, 1),
                         s == 1 ? 131072 + 13824 + 2 * 196608
                                : 131072 + 13824 + 131072 + 13824 + 49152);
    }
}

/* On AVX2 a channels-last depthwise conv whose kernel is taller than its
 * input computes its weight grad by the gemm fallback (cpuconv.c,
 * onednn_dw_gemm_weight_grad). Measured, torch 2.14.1 on an AVX2 host, one
 * thread, a 5x5 depthwise conv of 128 channels, 'same' padding, on a
 * channels-last [1,128,4,4] input that needs a grad: +12800 (diff_weights,
 * the weight's size), +53248 (scratchpad: 4 x 12800 + 4 x (25 x 16 + 16) +
 * 384), -53248, +12800 (the channels-last grad), ...; on [1,128,8,4] (the
 * kernel no taller than the input) the 8x8 blocks per group, 128 x 64 x 25
 * floats = 819200 B. The input is x permuted times a [1,128,1,1] weight. */
static struct tb *nhwc_depthwise_graph(const char *xdims)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, xdims);
    tb_init(b, "S", F32, 4, (int64_t[]){1, 128, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){128, 1, 5, 5});
    tb_node(b, "Transpose", "perm", "x", "xc");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    tb_node(b, "Mul", "scale", "xc,S", "xs");
    tb_node(b, "Conv", "conv", "xs,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){2, 2, 2, 2});
    tb_attr_int(b, "group", 128);
    tb_output(b, "y");
    return b;
}

static void test_depthwise_gemm_weight_grad(void **state)
{
    (void)state;
    static const char *const names[] = {"onednn_diff_weights", "onednn_gemm_scratchpad",
                                        "grad_weight (channels last)"};
    char got[1024];
    train_events_isa(nhwc_depthwise_graph("1,4,4,128"), DNNMEM_CPU_ISA_AVX2, names, 3, got,
                     sizeof got);
    assert_string_equal(got, "+12800 onednn_diff_weights\n+53248 onednn_gemm_scratchpad\n"
                             "-53248 onednn_gemm_scratchpad\n+12800 grad_weight (channels last)\n"
                             "-12800 onednn_diff_weights\n-12800 grad_weight (channels last)\n");
    train_events_isa(nhwc_depthwise_graph("1,8,4,128"), DNNMEM_CPU_ISA_AVX2, names, 3, got,
                     sizeof got);
    assert_string_equal(got, "+819200 onednn_diff_weights\n+12800 grad_weight (channels last)\n"
                             "-819200 onednn_diff_weights\n-12800 grad_weight (channels last)\n");
}

/* A 16-channel depthwise conv with a bias on a channels-last [1,16,8,8]
 * input: kernel kh x kw, padding (ph, pw) both sides, stride s, dilation d. */
static struct tb *nhwc_dw16_graph(int64_t kh, int64_t kw, int64_t ph, int64_t pw, int64_t s,
                                  int64_t d)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "1,8,8,16");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 16, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){16, 1, kh, kw});
    tb_init(b, "B", F32, 1, (int64_t[]){16});
    tb_node(b, "Transpose", "perm", "x", "xc");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    tb_node(b, "Mul", "scale", "xc,S", "xs");
    tb_node(b, "Conv", "conv", "xs,W,B", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){ph, pw, ph, pw});
    tb_attr_ints(b, "strides", 2, (int64_t[]){s, s});
    tb_attr_ints(b, "dilations", 2, (int64_t[]){d, d});
    tb_attr_int(b, "group", 16);
    tb_output(b, "y");
    return b;
}

/* oneDNN's depthwise JIT takes a channels-last depthwise conv's
 * backward-weights pass by jit_uni_dw_conv_bwd_weights_kernel_t::init_conf
 * (cpuconv.c, onednn_dw_bwd_weights_jit): a kernel at most 3 wide, of any
 * height, its paddings within half the kernel, no dilation; its
 * diff_weights is Goihw8g on AVX2, 16 x 5 x 3 floats = 960 B for a 5x3
 * kernel. A 3x5 kernel, or a 3x3 padded 2, goes to the blocked kernel's
 * 8x8 blocks per group (16 x 64 x 15 floats = 61440 B, 16 x 64 x 9 =
 * 36864 B); a dilated 3x3 (padding 2) to the gemm: the weight's 576 B and a
 * scratchpad of 4 x 576 + 4 x (9 x 64 + 64) + 384 = 5248 B. Measured, torch
 * 2.14.1 and 1.13.0 on this AVX2 host, one thread, the profiler's events of
 * y.backward(gy): 960, 61440, 36864, 576 and 5248 B, in both releases. */
static void test_depthwise_jit_weight_grad(void **state)
{
    (void)state;
    static const char *const names[] = {"onednn_diff_weights", "onednn_gemm_scratchpad",
                                        "onednn_scratchpad (backward weights)"};
    static const struct {
        int64_t kh, kw, ph, pw, d;
        const char *first;
    } cases[] = {
        {5, 3, 2, 1, 1, "+960 onednn_diff_weights\n"},
        {3, 5, 1, 2, 1, "+61440 onednn_diff_weights\n"},
        {3, 3, 2, 2, 1, "+36864 onednn_diff_weights\n"},
        {3, 3, 2, 2, 2, "+576 onednn_diff_weights\n+5248 "},
    };
    static const int releases[] = {214, 113};
    char got[1024];
    for (size_t r = 0; r < 2; r++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            train_events_run(nhwc_dw16_graph(cases[k].kh, cases[k].kw, cases[k].ph, cases[k].pw, 1,
                                             cases[k].d),
                             releases[r], DNNMEM_CPU_ISA_AVX2, 1, names, 3, got, sizeof got);
            assert_memory_equal(got, cases[k].first, strlen(cases[k].first));
        }
}

/* 2.x's backward of a channels-last depthwise conv runs grad_input's pass
 * first (mkldnn_convolution_backward): grad_input, the weight reordered for
 * backward data and freed at once (Goihw8g on AVX2, 16 x 9 floats for 3x3;
 * dilated, which the depthwise JIT declines, whole 8x8 blocks per group, 16
 * x 64 x 9 floats), then diff_weights. Measured, torch 2.14.1 on this AVX2
 * host, one thread, [1,16,8,8] channels-last: +4096 +576 -576 +576 ...;
 * at dilation 2 (padding 2) +4096 +36864 -36864 +576 ... (cpuconv.c,
 * onednn_dw_backward_data). */
static void test_depthwise_backward_data_first(void **state)
{
    (void)state;
    static const char *const names[] = {"xs.grad", "onednn_weight (backward data)",
                                        "onednn_diff_weights"};
    char got[1024];
    train_events_run(nhwc_dw16_graph(3, 3, 1, 1, 1, 1), 214, DNNMEM_CPU_ISA_AVX2, 1, names, 3, got,
                     sizeof got);
    const char *want = "+4096 xs.grad\n+576 onednn_weight (backward data)\n"
                       "-576 onednn_weight (backward data)\n+576 onednn_diff_weights\n";
    assert_memory_equal(got, want, strlen(want));
    train_events_run(nhwc_dw16_graph(3, 3, 2, 2, 1, 2), 214, DNNMEM_CPU_ISA_AVX2, 1, names, 3, got,
                     sizeof got);
    want = "+4096 xs.grad\n+36864 onednn_weight (backward data)\n"
           "-36864 onednn_weight (backward data)\n+576 onednn_diff_weights\n";
    assert_memory_equal(got, want, strlen(want));
}

/* On AVX2 oneDNN's JIT convolutions decline some geometries and
 * gemm_convolution runs the pass (cpuconv.c, onednn_avx2_fwd_jit,
 * onednn_avx2_bwd_weights_jit, onednn_gemm_scratch; oneDNN v3.12's
 * init_conf functions). A 3x3 64 -> 64 conv on [2,64,16,16], 'same'
 * padding: at dilation 2 the JIT forward takes it (left padding 2 within
 * its unrolling of 3) and the backward weights, which takes no dilation,
 * runs gemm: a plain diff_weights (147456 B) and a scratchpad of 4 x 147456
 * (the reduction buffer: weights_d.size() floats) + 64 x 9 x 256 x 4 (the
 * columns) + 2 x 128 = 1179904 B. At dilation 6 the forward runs gemm too:
 * no source or weight reorder, its columns tiled to the 512 KiB L2 as 64 in
 * channels x 9 x 128 pixels (the cost model's pick), 294912 + 128 B.
 * Measured, torch 2.14.1 on this AVX2 host, one thread, the profiler's
 * events: +131072 +147456 +131072 -147456 -131072 (JIT forward), +147456
 * +1179904 -1179904; at dilation 6 +295040 +131072 -295040. AVX-512 keeps
 * the JIT kernels' buffers. */
static struct tb *dilated_graph(int64_t d)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,64,16,16");
    tb_init(b, "W", F32, 4, (int64_t[]){64, 64, 3, 3});
    tb_node(b, "Conv", "conv", "x,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){d, d, d, d});
    tb_attr_ints(b, "dilations", 2, (int64_t[]){d, d});
    tb_output(b, "y");
    return b;
}

static void test_onednn_gemm_fallback(void **state)
{
    (void)state;
    static const char *const names[] = {"onednn_scratchpad", "onednn_input", "onednn_weight",
                                        "onednn_diff_weights", "onednn_gemm_scratchpad"};
    char got[1024];
    train_events_isa(dilated_graph(2), DNNMEM_CPU_ISA_AVX2, names, 5, got, sizeof got);
    assert_string_equal(got, "+131072 onednn_input\n+147456 onednn_weight\n"
                             "-147456 onednn_weight\n-131072 onednn_input\n"
                             "+147456 onednn_diff_weights\n+1179904 onednn_gemm_scratchpad\n"
                             "-1179904 onednn_gemm_scratchpad\n-147456 onednn_diff_weights\n");
    train_events_isa(dilated_graph(6), DNNMEM_CPU_ISA_AVX2, names, 5, got, sizeof got);
    assert_string_equal(got, "+295040 onednn_scratchpad\n-295040 onednn_scratchpad\n"
                             "+147456 onednn_diff_weights\n+1179904 onednn_gemm_scratchpad\n"
                             "-1179904 onednn_gemm_scratchpad\n-147456 onednn_diff_weights\n");
    train_events_isa(dilated_graph(6), DNNMEM_CPU_ISA_AVX512, names, 5, got, sizeof got);
    assert_string_equal(got, "+131072 onednn_input\n+147456 onednn_weight\n"
                             "-147456 onednn_weight\n-131072 onednn_input\n"
                             "+131072 onednn_input\n+147456 onednn_diff_weights\n"
                             "-131072 onednn_input\n-147456 onednn_diff_weights\n");
}

/* 1.13 on AVX2 (oneDNN 2.6.3) declines the JIT forward as 2.x does
 * (cpuconv.c, onednn_gemm_forward_113): a 3x3 512 -> 256 conv at dilation
 * 12, pad 12, on [1,512,12,12] (left padding 12 over the unrolling of 3)
 * runs gemm_convolution: no source or weight reorder, a scratchpad of
 * 124416 + 128 B (its columns tiled to the 512 KiB L2), its own
 * destination (147456), then the ATen output: peak x (294912) + W
 * (4718592) + 2 x 147456 = 5308416 B; at 2 threads a scratchpad of
 * 435584 B (each thread's columns, tiled again): x + W + 435584 + 147456.
 * At dilation 2 the JIT kernel reorders: x + W + 294912 (source) + 4718592
 * (weight) + 147456 (destination) = 10174464. dilated_graph(6) at batch 2
 * (64 -> 64 on 16x16): x + W + 295040 + 131072 = 704640. Measured, 1.13.0
 * (Debian's python3-torch), AVX2, the profiler's events, one thread:
 * +124544 +147456 -124544 +147456 -147456 (2 threads: +435584 +147456
 * -435584 ...); +294912 +4718592 +147456 -4718592 -294912 +147456 -147456;
 * +295040 +131072 -295040 +131072 -131072 (the 2048-channel figures of
 * docs/validation-zoo.md likewise). */
static struct tb *aspp_graph(int64_t d)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "1,512,12,12");
    tb_init(b, "W", F32, 4, (int64_t[]){256, 512, 3, 3});
    tb_node(b, "Conv", "conv", "x,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){d, d, d, d});
    tb_attr_ints(b, "dilations", 2, (int64_t[]){d, d});
    tb_output(b, "y");
    return b;
}

static void test_onednn_gemm_forward_113(void **state)
{
    (void)state;
    assert_int_equal(cpu_peak(aspp_graph(12), 113, DNNMEM_CPU_ISA_AVX2, 1),
                     294912 + 4718592 + 2 * 147456);
    assert_int_equal(cpu_peak(aspp_graph(12), 113, DNNMEM_CPU_ISA_AVX2, 2),
                     294912 + 4718592 + 435584 + 147456);
    assert_int_equal(cpu_peak(aspp_graph(2), 113, DNNMEM_CPU_ISA_AVX2, 1),
                     294912 + 4718592 + 294912 + 4718592 + 147456);
    assert_int_equal(cpu_peak(dilated_graph(6), 113, DNNMEM_CPU_ISA_AVX2, 1),
                     131072 + 147456 + 295040 + 131072);
}

/* The backward-data pass too (cpuconv.c, onednn_avx2_bwd_data_jit): a 3x3
 * 16 -> 16 conv at dilation 12 on [2,16,8,8] whose input needs a grad.
 * The JIT's width unrolling must reach over the kernel's left overflow of
 * 25 - 1 - 12 = 12 columns or be the whole width of 8, but 8 columns take
 * 16 registers of 15: gemm, whose columns are 16 x 9 x 64 floats + 128 =
 * 36992 B, made once grad_input is. The forward is gemm's (left padding 12
 * over 3: the same columns, the whole 64 pixels fit the L2), the backward
 * weights too (4 x 9216 + 128 + 36864 + 128 = 73984). Measured, 2.14.1,
 * AVX2, one thread: +36992 +8192 -36992, +8192 (grad_input) +36992
 * -36992, +9216 +73984 -73984. */
static void test_onednn_gemm_backward_data(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,16,8,8");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 16, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){16, 16, 3, 3});
    tb_node(b, "Mul", "scale", "x,S", "xs");
    tb_node(b, "Conv", "conv", "xs,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){12, 12, 12, 12});
    tb_attr_ints(b, "dilations", 2, (int64_t[]){12, 12});
    tb_output(b, "y");
    static const char *const names[] = {"(backward data)", "onednn_scratchpad",
                                        "onednn_diff_weights", "onednn_gemm_scratchpad",
                                        "onednn_grad_output"};
    char got[1024];
    train_events_isa(b, DNNMEM_CPU_ISA_AVX2, names, 5, got, sizeof got);
    assert_string_equal(got, "+36992 onednn_scratchpad\n-36992 onednn_scratchpad\n"
                             "+36992 (backward data)\n-36992 (backward data)\n"
                             "+9216 onednn_diff_weights\n+73984 onednn_gemm_scratchpad\n"
                             "-73984 onednn_gemm_scratchpad\n-9216 onednn_diff_weights\n");
}

/* The backward weights' other declines (onednn_avx2_bwd_weights_jit): a
 * 3x3x3 16 -> 16 conv with depth padding 1 on [2,16,4,8,8] (the JIT takes
 * no depth padding): 4 x 27648 + 128 + 16 x 27 x 64 x 4 + 128 = 221440 B,
 * its columns one depth slice's (oh * ow); a 1x15 kernel, width padding 7,
 * on [2,16,16,30] (a kernel 14 or more wide): 4 x 15360 + 128 + 16 x 15 x
 * 480 x 4 + 128 = 522496, whose forward is gemm's too (left padding 7 over
 * the unrolling of 3; its columns tiled to 16 x 15 x 240 floats, + 128 =
 * 230528). Measured, 2.14.1, AVX2, one thread: +32768 +27648 +32768
 * (the JIT forward), ..., +27648 +221440 -221440; +230528 +61440 -230528,
 * ..., +15360 +522496 -522496. */
static void test_onednn_gemm_weight_grad_declines(void **state)
{
    (void)state;
    static const char *const names[] = {"onednn_scratchpad", "onednn_diff_weights",
                                        "onednn_gemm_scratchpad"};
    char got[1024];
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,16,4,8,8");
    tb_init(b, "W", F32, 5, (int64_t[]){16, 16, 3, 3, 3});
    tb_node(b, "Conv", "conv", "x,W", "y");
    tb_attr_ints(b, "pads", 6, (int64_t[]){1, 1, 1, 1, 1, 1});
    tb_output(b, "y");
    train_events_isa(b, DNNMEM_CPU_ISA_AVX2, names, 3, got, sizeof got);
    assert_string_equal(got, "+27648 onednn_diff_weights\n+221440 onednn_gemm_scratchpad\n"
                             "-221440 onednn_gemm_scratchpad\n-27648 onednn_diff_weights\n");
    b = tb_new(13);
    tb_input(b, "x", F32, "2,16,16,30");
    tb_init(b, "W", F32, 4, (int64_t[]){16, 16, 1, 15});
    tb_node(b, "Conv", "conv", "x,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){0, 7, 0, 7});
    tb_output(b, "y");
    train_events_isa(b, DNNMEM_CPU_ISA_AVX2, names, 3, got, sizeof got);
    assert_string_equal(got, "+230528 onednn_scratchpad\n-230528 onednn_scratchpad\n"
                             "+15360 onednn_diff_weights\n+522496 onednn_gemm_scratchpad\n"
                             "-522496 onednn_gemm_scratchpad\n-15360 onednn_diff_weights\n");
}

/* The buffers named by `names`, as train_events_isa lists them, in an
 * inference pass on the CPU (PyTorch 2.14, one thread). */
static void infer_events(struct tb *b, const char *const *names, size_t n_names, char *out,
                         size_t cap)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 214;
    cfg.cpu_threads = 1;
    cfg.batch_size = 0;
    cfg.events = true;
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    size_t n = 0;
    out[0] = 0;
    for (size_t e = 0; e < r->n_events; e++)
        for (size_t k = 0; k < n_names; k++)
            if (r->events[e].buffer && strstr(r->events[e].buffer, names[k]) && n + 80 < cap) {
                n += (size_t)snprintf(out + n, cap - n, "%c%llu %s\n", r->events[e].alloc ? '+' : '-',
                                      (unsigned long long)r->events[e].bytes, names[k]);
                break;
            }
    dnnmem_result_free(r);
}

/* MixNet's MixedConv2d: torch.split(x, [4, 4], 1), a 3x3 and a 5x5
 * depthwise conv, torch.cat. The parts are views (forward.c): nothing is
 * allocated for them. At batch 2 a part [2,4,6,6] is not contiguous, and
 * each conv copies it first (workspace.c, conv_input_copy; measured on
 * 2.14.1, one thread, x [2,8,6,6]: +1152 before each conv's reorders, freed
 * after its output; in training again first in each conv's backward, the
 * input's 1152 B); at batch 1 the parts are contiguous: no copy. */
static struct tb *split_convs(const char *xdims)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, xdims);
    tb_init_i64(b, "split", 2, (int64_t[]){4, 4});
    tb_init(b, "W1", F32, 4, (int64_t[]){4, 1, 3, 3});
    tb_init(b, "W2", F32, 4, (int64_t[]){4, 1, 5, 5});
    tb_node(b, "Split", "split", "x,split", "part0,part1");
    tb_attr_int(b, "axis", 1);
    tb_node(b, "Conv", "c1", "part0,W1", "y1");
    tb_attr_int(b, "group", 4);
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_node(b, "Conv", "c2", "part1,W2", "y2");
    tb_attr_int(b, "group", 4);
    tb_attr_ints(b, "pads", 4, (int64_t[]){2, 2, 2, 2});
    tb_node(b, "Concat", "cat", "y1,y2", "y");
    tb_attr_int(b, "axis", 1);
    tb_output(b, "y");
    return b;
}

static void test_split_views_conv_copies(void **state)
{
    (void)state;
    static const char *const names[] = {"input.contiguous(memory_format)", "part"};
    char got[1024];
    infer_events(split_convs("2,8,6,6"), names, 2, got, sizeof got);
    assert_string_equal(got, "+1152 input.contiguous(memory_format)\n"
                             "-1152 input.contiguous(memory_format)\n"
                             "+1152 input.contiguous(memory_format)\n"
                             "-1152 input.contiguous(memory_format)\n");
    train_events(split_convs("2,8,6,6"), names, 1, got, sizeof got);
    static const char pair[] = "+1152 input.contiguous(memory_format)\n"
                               "-1152 input.contiguous(memory_format)\n";
    char four[sizeof pair * 4];
    snprintf(four, sizeof four, "%s%s%s%s", pair, pair, pair, pair);
    assert_string_equal(got, four);
    infer_events(split_convs("1,8,6,6"), names, 2, got, sizeof got);
    assert_string_equal(got, "");
    train_events(split_convs("1,8,6,6"), names, 2, got, sizeof got);
    assert_string_equal(got, "");
}

/* PVT-v2's DWConv: x [B, 36, 16] (a Linear's output) .transpose(1, 2)
 * .reshape(B, 16, 6, 6), a 3x3 depthwise conv with bias (W 576 B, b 64 B).
 * The view's strides make it channels-last at batch 2 (layout.c,
 * dm_sb_strides_like_cl); at batch 1 dim 0's stride (16) says contiguous.
 * Measured on 2.14.1, one thread, no_grad, above x and the weights: batch
 * 2, +4608 (the channels-last output, written by oneDNN) +576 -576 (the
 * weight reordered): peak 4608 + 640 + 5184; batch 1, +2304 (the NCHW
 * clone) +2304 (the blocked source) +576 +2304 (the blocked destination)
 * -576 -2304 +2304 (the output) ...: peak 2304 + 640 + 7488. */
static struct tb *view_depthwise(const char *xdims, int64_t batch)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, xdims);
    tb_init_i64(b, "shape", 4, (int64_t[]){batch, 16, 6, 6});
    tb_init(b, "W", F32, 4, (int64_t[]){16, 1, 3, 3});
    tb_init(b, "bias", F32, 1, (int64_t[]){16});
    tb_node(b, "Transpose", "t", "x", "xt");
    tb_attr_ints(b, "perm", 3, (int64_t[]){0, 2, 1});
    tb_node(b, "Reshape", "r", "xt,shape", "xv");
    tb_node(b, "Conv", "dw", "xv,W,bias", "y");
    tb_attr_int(b, "group", 16);
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_output(b, "y");
    return b;
}

static void test_view_strides_channels_last(void **state)
{
    (void)state;
    static const char *const names[] = {"input.contiguous(memory_format)"};
    char got[256];
    infer_events(view_depthwise("2,36,16", 2), names, 1, got, sizeof got);
    assert_string_equal(got, "");
    assert_int_equal(cpu_peak(view_depthwise("2,36,16", 2), 214, DNNMEM_CPU_ISA_AVX2, 1),
                     4608 + 640 + 5184);
    infer_events(view_depthwise("1,36,16", 1), names, 1, got, sizeof got);
    assert_string_equal(got, "+2304 input.contiguous(memory_format)\n"
                             "-2304 input.contiguous(memory_format)\n");
    assert_int_equal(cpu_peak(view_depthwise("1,36,16", 1), 214, DNNMEM_CPU_ISA_AVX2, 1),
                     2304 + 640 + 7488);
}

/* x * x.sum(-1, keepdim=True).expand_as(x): expand is a view (forward.c).
 * Measured on 2.14.1, no_grad, x [2,8,16] (1024 B): +64 (the sum) +1024
 * (the product) -64; peak 1024 + 1088 (an expanded copy would add 1024). */
static void test_expand_is_view(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,8,16");
    tb_init_i64(b, "axes", 1, (int64_t[]){-1});
    tb_init_i64(b, "shape", 3, (int64_t[]){2, 8, 16});
    tb_node(b, "ReduceSum", "sum", "x,axes", "s");
    tb_attr_int(b, "keepdims", 1);
    tb_node(b, "Expand", "expand", "s,shape", "se");
    tb_node(b, "Mul", "mul", "x,se", "y");
    tb_output(b, "y");
    assert_int_equal(cpu_peak(b, 214, DNNMEM_CPU_ISA_DEFAULT, 1), 1024 + 1088);
}


/* A conv whose input needs a grad (x, or x [N,H,W,C] permuted to a
 * channels-last tensor, times a [1,C,1,1] weight), 'same' padding. */
static struct tb *conv_bwd_graph(const char *xdims, bool nhwc, int64_t c, int64_t oc, int64_t k,
                                 int64_t group, bool bias)
{
    struct tb *b = tb_new(13);
    int64_t p = k / 2;
    tb_input(b, "x", F32, xdims);
    tb_init(b, "S", F32, 4, (int64_t[]){1, c, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){oc, c / group, k, k});
    if (bias)
        tb_init(b, "B", F32, 1, (int64_t[]){oc});
    if (nhwc) {
        tb_node(b, "Transpose", "perm", "x", "xc");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    }
    tb_node(b, "Mul", "scale", nhwc ? "xc,S" : "x,S", "xs");
    tb_node(b, "Conv", "conv", bias ? "xs,W,B" : "xs,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){p, p, p, p});
    tb_attr_int(b, "group", group);
    tb_output(b, "y");
    return b;
}

static const char *const bwd_names[] = {"onednn_grad_output", "onednn_grad_input",
                                        "onednn_diff_weights", "onednn_diff_bias",
                                        "(backward weights)", "(backward data)",
                                        "grad_weight (channels last)"};

/* PyTorch 1.13 on AVX2, an NCHW conv's backward in two passes (cpuconv.c,
 * onednn_113_avx2). Measured, 1.13.0 (Debian's python3-torch), one thread,
 * the profiler's events of y.backward(gy): 64 -> 64 5x5 with a bias on
 * [1,64,8,8]: backward data +16384 gy' +409600 w' +16384 gx' -409600
 * -16384, +16384 grad_input -16384 gx'; backward weights +16384 gy' +16384
 * x' +409600 dw' +256 db' -16384 -16384, +256 +409600 (the ATen grads)
 * -409600 -256. 12 -> 20 3x3 with a bias on [2,12,16,16] (channels padded
 * to 16 and 24): gy' 49152, gx' 32768; dw' 13824, then the padded bias's
 * scratchpad 224 = 24 x 4 + 128 around db' 80 (the 20 channels unpadded). */
static void test_onednn_bwd_113(void **state)
{
    (void)state;
    char got[2048];
    train_events_run(conv_bwd_graph("1,64,8,8", false, 64, 64, 5, 1, true), 113,
                     DNNMEM_CPU_ISA_AVX2, 1, bwd_names, 7, got, sizeof got);
    assert_string_equal(got, "+16384 onednn_grad_output\n+16384 onednn_grad_input\n"
                             "-16384 onednn_grad_output\n-16384 onednn_grad_input\n"
                             "+16384 onednn_grad_output\n+409600 onednn_diff_weights\n"
                             "+256 onednn_diff_bias\n-16384 onednn_grad_output\n"
                             "-409600 onednn_diff_weights\n-256 onednn_diff_bias\n");
    train_events_run(conv_bwd_graph("2,12,16,16", false, 12, 20, 3, 1, true), 113,
                     DNNMEM_CPU_ISA_AVX2, 1, bwd_names, 7, got, sizeof got);
    assert_string_equal(got, "+49152 onednn_grad_output\n+32768 onednn_grad_input\n"
                             "-49152 onednn_grad_output\n-32768 onednn_grad_input\n"
                             "+49152 onednn_grad_output\n+13824 onednn_diff_weights\n"
                             "+224 (backward weights)\n+80 onednn_diff_bias\n"
                             "-224 (backward weights)\n-49152 onednn_grad_output\n"
                             "-13824 onednn_diff_weights\n-80 onednn_diff_bias\n");
}

/* 1.13 on AVX-512 (onednn_113_phased, onednn_rtus_113): a 1x1 72 -> 36 at
 * stride 2 on [1,72,32,32] (x * S first, so grad_input is made), measured
 * 2026-12-04 with 1.13.0 (Debian's python3-torch), one thread, an AVX-512
 * host: forward +82048 (the strided source, 80 channels, + 128) +327680
 * (the source, 80 channels) +15360 (the weight, 48 x 80) +49152 (the
 * destination, 48 channels), -15360 -327680 -82048, +36864 output -49152;
 * backward data +49152 gy' +15360 w' +327680 gx' +82048 -82048 -15360
 * -49152, +294912 grad_input -327680; backward weights +49152 gy' +327680
 * x' +15360 dw' +82048 -82048 -327680 -49152, +10368 grad_weight -15360.
 * dnnmem had taken 1.13's AVX-512 forward as a y-sized buffer and the
 * weight, and its backward as weight- and input-sized scratch. */
static void test_onednn_strided_1x1_113_avx512(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "1,72,32,32");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 72, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){36, 72, 1, 1});
    tb_node(b, "Mul", "scale", "x,S", "xs");
    tb_node(b, "Conv", "conv", "xs,W", "y");
    tb_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    static const char *const names[] = {"(backward data)", "(backward weights)",
                                        "onednn_scratchpad", "onednn_grad_output",
                                        "onednn_grad_input", "onednn_input", "onednn_weight",
                                        "onednn_output", "onednn_diff_weights"};
    char got[2048];
    train_events_run(b, 113, DNNMEM_CPU_ISA_AVX512, 1, names, 9, got, sizeof got);
    assert_string_equal(got, "+82048 onednn_scratchpad\n+327680 onednn_input\n+15360 onednn_weight\n"
                             "+49152 onednn_output\n-15360 onednn_weight\n-327680 onednn_input\n"
                             "-82048 onednn_scratchpad\n-49152 onednn_output\n"
                             "+49152 onednn_grad_output\n+15360 onednn_weight\n"
                             "+327680 onednn_grad_input\n+82048 (backward data)\n"
                             "-82048 (backward data)\n-15360 onednn_weight\n"
                             "-49152 onednn_grad_output\n-327680 onednn_grad_input\n"
                             "+49152 onednn_grad_output\n+327680 onednn_input\n"
                             "+15360 onednn_diff_weights\n+82048 (backward weights)\n"
                             "-82048 (backward weights)\n-327680 onednn_input\n"
                             "-49152 onednn_grad_output\n-15360 onednn_diff_weights\n");
}

/* 1.13's AVX2 backward-weights of a kernel taller than its input: oneDNN
 * 2.6.3's gemm fallback (onednn_gemm_wei_scratch), no reorders, a
 * diff_weights of the weight's size and a scratchpad of 4 nthr |W| + 4 nthr
 * IC kh kw OH OW + 2 x 128 B. Measured, 1.13.0: 64 -> 32 5x5 with a bias on
 * [1,64,4,4]: +204800 dw' +921856 +128 db' -921856; [2,64,4,4] on two
 * threads 1843456, on four 3686656; [1,64,4,4] on two 921856 (a batch of 1:
 * one thread's); on [1,64,8,8] (kh <= ih) the JIT kernel, no scratchpad. */
static void test_onednn_gemm_weight_grad_113(void **state)
{
    (void)state;
    static const char *const names[] = {"(backward weights)", "onednn_diff_weights"};
    char got[1024];
    static const struct {
        const char *x;
        int threads;
        const char *want;
    } cases[] = {
        {"1,64,4,4", 1, "+204800 onednn_diff_weights\n+921856 (backward weights)\n"
                        "-921856 (backward weights)\n-204800 onednn_diff_weights\n"},
        {"2,64,4,4", 2, "+204800 onednn_diff_weights\n+1843456 (backward weights)\n"
                        "-1843456 (backward weights)\n-204800 onednn_diff_weights\n"},
        {"2,64,4,4", 4, "+204800 onednn_diff_weights\n+3686656 (backward weights)\n"
                        "-3686656 (backward weights)\n-204800 onednn_diff_weights\n"},
        {"1,64,4,4", 2, "+204800 onednn_diff_weights\n+921856 (backward weights)\n"
                        "-921856 (backward weights)\n-204800 onednn_diff_weights\n"},
        {"1,64,8,8", 1, "+204800 onednn_diff_weights\n-204800 onednn_diff_weights\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train_events_run(conv_bwd_graph(cases[i].x, false, 64, 32, 5, 1, true), 113,
                         DNNMEM_CPU_ISA_AVX2, cases[i].threads, names, 2, got, sizeof got);
        assert_string_equal(got, cases[i].want);
    }
    /* a dilated conv (args_ok wants no dilation): 256 -> 64 3x3 at dilation
     * 2 on [2,256,12,12], measured +589824 dw' +3686656 (4 x 589824 + 4 x
     * 256 x 9 x 144 + 256) +256 db' -3686656 */
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,256,12,12");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 256, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){64, 256, 3, 3});
    tb_init(b, "B", F32, 1, (int64_t[]){64});
    tb_node(b, "Mul", "scale", "x,S", "xs");
    tb_node(b, "Conv", "conv", "xs,W,B", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){2, 2, 2, 2});
    tb_attr_ints(b, "dilations", 2, (int64_t[]){2, 2});
    tb_output(b, "y");
    train_events_run(b, 113, DNNMEM_CPU_ISA_AVX2, 1, names, 2, got, sizeof got);
    assert_string_equal(got, "+589824 onednn_diff_weights\n+3686656 (backward weights)\n"
                             "-3686656 (backward weights)\n-589824 onednn_diff_weights\n");
}

/* 1.13's AVX2 backward of a channels-last conv (onednn_cl_grad_113).
 * Measured, 1.13.0, one thread: 12 -> 20 3x3 with a bias on [2,12,8,8]:
 * +8640 clone, +6144 grad_input, +13824 w' -13824, +13824 dw' (24 x 16 x 9
 * floats), +224 (the padded bias) +80 db' -224, +80 +8640 (the ATen grads)
 * +8640 (the second weight-sized tensor); 4 -> 20 3x3 on [2,4,16,16]: w' and
 * dw' 6912 (24 x 8 x 9: in channels padded below a block); 16 channels 5x5
 * depthwise with a bias on [1,16,8,8]: +1600 w' -1600, +102400 dw' (16 x 8 x
 * 8 x 25 floats), +640 (16 x 8 floats + 128); 64 -> 32 5x5 with a bias on
 * [1,64,4,4]: +204800 w' -204800, +204800 dw' +926080 (819200 + 102400 +
 * 4096 + 3 x 128). */
static void test_onednn_cl_bwd_113(void **state)
{
    (void)state;
    char got[2048];
    static const struct {
        const char *x;
        int64_t c, oc, k, g;
        const char *want;
    } cases[] = {
        {"2,8,8,12", 12, 20, 3, 1,
         "-13824 (backward data)\n+13824 onednn_diff_weights\n+224 (backward weights)\n"
         "-224 (backward weights)\n+8640 grad_weight (channels last)\n"
         "-13824 onednn_diff_weights\n-8640 grad_weight (channels last)\n"},
        {"2,16,16,4", 4, 20, 3, 1,
         "-6912 (backward data)\n+6912 onednn_diff_weights\n+224 (backward weights)\n"
         "-224 (backward weights)\n+2880 grad_weight (channels last)\n"
         "-6912 onednn_diff_weights\n-2880 grad_weight (channels last)\n"},
        {"1,8,8,16", 16, 16, 5, 16,
         "-1600 (backward data)\n+102400 onednn_diff_weights\n+640 (backward weights)\n"
         "-640 (backward weights)\n+1600 grad_weight (channels last)\n"
         "-102400 onednn_diff_weights\n-1600 grad_weight (channels last)\n"},
        {"1,4,4,64", 64, 32, 5, 1,
         "-204800 (backward data)\n+204800 onednn_diff_weights\n+926080 (backward weights)\n"
         "-926080 (backward weights)\n+204800 grad_weight (channels last)\n"
         "-204800 onednn_diff_weights\n-204800 grad_weight (channels last)\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train_events_run(conv_bwd_graph(cases[i].x, true, cases[i].c, cases[i].oc, cases[i].k,
                                        cases[i].g, true),
                         113, DNNMEM_CPU_ISA_AVX2, 1, bwd_names, 7, got, sizeof got);
        /* the backward-data weight's "+" line first: checked by its "-" */
        const char *from = strstr(got, "\n");
        assert_non_null(from);
        assert_string_equal(from + 1, cases[i].want);
    }
}

/* LayerNorm(16) on [2,8,16] (1024 B) in inference: native_layer_norm makes
 * its output, mean and rstd ([16] float each, 64 B), the two freed when it
 * returns (measured, CPU, one thread, 1.13.0 and 2.13.0: +1024 +64 +64 -64
 * -64). The peak: x, the scale and bias (2 x 64), y and both stats. */
static void test_norm_stats_unsaved(void **state)
{
    (void)state;
    for (int torch = 113; torch <= 214; torch += 101) {
        struct tb *b = tb_new(17);
        tb_input(b, "x", F32, "2,8,16");
        tb_init(b, "S", F32, 1, (int64_t[]){16});
        tb_init(b, "B", F32, 1, (int64_t[]){16});
        tb_node(b, "LayerNormalization", "norm", "x,S,B", "y");
        tb_attr_int(b, "axis", -1);
        tb_output(b, "y");
        assert_int_equal(cpu_peak(b, torch, DNNMEM_CPU_ISA_AVX2, 1), 1024 + 128 + 1024 + 2 * 64);
    }
}

/* 1.13's AVX2 backward-weights of a 3-D conv padded in depth: oneDNN
 * 2.6.3's gemm (boundaries_ok wants f_pad == back_pad == 0), whose columns
 * are one depth slice's. Measured, 1.13.0, one thread, 3x3x3 64 -> 64 with
 * a bias, padding 1: on [2,64,2,4,4] +442368 dw' +1880320 (4 x 442368 + 4 x
 * 64 x 27 x 16 + 256) +256 db' -1880320; on [2,64,8,16,16] +3539200 (the
 * plane 16 x 16). */
static void test_onednn_gemm_weight_grad_3d_113(void **state)
{
    (void)state;
    static const char *const names[] = {"(backward weights)", "onednn_diff_weights"};
    char got[1024];
    train_events_run(conv3d_graph("2,64,2,4,4", 64, 64, true, true), 113, DNNMEM_CPU_ISA_AVX2, 1,
                     names, 2, got, sizeof got);
    assert_string_equal(got, "+442368 onednn_diff_weights\n+1880320 (backward weights)\n"
                             "-1880320 (backward weights)\n-442368 onednn_diff_weights\n");
    train_events_run(conv3d_graph("2,64,8,16,16", 64, 64, true, true), 113, DNNMEM_CPU_ISA_AVX2,
                     1, names, 2, got, sizeof got);
    assert_string_equal(got, "+442368 onednn_diff_weights\n+3539200 (backward weights)\n"
                             "-3539200 (backward weights)\n-442368 onednn_diff_weights\n");
}


/* train_events_isa's events under `torch` and `loss` (AVX2). */
static void loss_events(struct tb *b, int torch, enum dnnmem_loss loss, const char *const *names,
                        size_t n_names, char *out, size_t cap)
{
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_SGD;
    cfg.loss = loss;
    cfg.iterations = 1;
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = torch;
    cfg.cpu_threads = 1;
    cfg.cpu_isa = DNNMEM_CPU_ISA_AVX2;
    cfg.batch_size = 0;
    cfg.events = true;
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    size_t n = 0;
    out[0] = 0;
    for (size_t e = 0; e < r->n_events; e++)
        for (size_t k = 0; k < n_names; k++)
            if (r->events[e].buffer && strstr(r->events[e].buffer, names[k]) && n + 80 < cap) {
                n += (size_t)snprintf(out + n, cap - n, "%c%llu %s\n", r->events[e].alloc ? '+' : '-',
                                      (unsigned long long)r->events[e].bytes, names[k]);
                break;
            }
    dnnmem_result_free(r);
}

/* A 3x3 conv 16 -> 24, pad 1, no bias, on x [2,16,8,8] (y [2,24,8,8],
 * 12,288 B); nhwc_in: x is [2,8,8,16] permuted to a channels-last NCHW view;
 * nhwc_out: y is permuted to [N, H, W, C] for the loss. */
static struct tb *conv_perm_graph(bool nhwc_in, bool nhwc_out)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, nhwc_in ? "2,8,8,16" : "2,16,8,8");
    tb_init(b, "W", F32, 4, (int64_t[]){24, 16, 3, 3});
    if (nhwc_in) {
        tb_node(b, "Transpose", "pin", "x", "xc");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    }
    tb_node(b, "Conv", "conv", nhwc_in ? "xc,W" : "x,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    if (nhwc_out) {
        tb_node(b, "Transpose", "pout", "y", "z");
        tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 3, 1});
    }
    tb_output(b, nhwc_out ? "z" : "y");
    return b;
}

/* convolution_backward copies a grad_output that is not dense in the conv's
 * format (workspace.c grad_output_copy, layout.c dm_sb_grad_layout): measured
 * 2.13.0 and 1.13.0, one thread, this conv: +12288 (y's bytes) under
 * ConvolutionBackward0 > aten::contiguous, live until it returns. The
 * cross-entropy hands a 4-D output a contiguous grad: an NCHW conv whose
 * output is permuted to NHWC for the loss gets its grad channels-last (a
 * copy), one whose output is the loss's does not; a channels-last conv
 * copies the loss's contiguous grad, not the channels-last grad of its
 * permuted output. .sum()'s grad is an expand, dense in neither: a copy. */
static void test_grad_output_copy(void **state)
{
    (void)state;
    static const char *const names[] = {"grad_output.contiguous"};
    static const char copy[] = "+12288 grad_output.contiguous\n-12288 grad_output.contiguous\n";
    char got[1024];
    for (int torch = 113; torch <= 214; torch += 101) {
        loss_events(conv_perm_graph(false, true), torch, DNNMEM_LOSS_CE, names, 1, got, sizeof got);
        assert_string_equal(got, copy);
        loss_events(conv_perm_graph(false, false), torch, DNNMEM_LOSS_CE, names, 1, got, sizeof got);
        assert_string_equal(got, "");
        loss_events(conv_perm_graph(true, false), torch, DNNMEM_LOSS_CE, names, 1, got, sizeof got);
        assert_string_equal(got, copy);
        loss_events(conv_perm_graph(true, true), torch, DNNMEM_LOSS_CE, names, 1, got, sizeof got);
        assert_string_equal(got, "");
        loss_events(conv_perm_graph(false, false), torch, DNNMEM_LOSS_SUM, names, 1, got, sizeof got);
        assert_string_equal(got, copy);
    }
}

/* THNN's Slow2d backward makes the copy once per pass (cpuconv.c
 * thnn_grad_output_copy; measured 2.13.0 and 1.13.0, one thread): a 1x1
 * 16 -> 24 conv at batch 2 (Slow2d) on [2,16,8,8], its output permuted to
 * NHWC for the loss (a channels-last grad, y 12,288 B): +12288 before
 * grad_input, -12288 once it is made, +12288 after the weight's grad, -12288
 * when the node returns; without grad_input (x an input) the second alone.
 * `scaled`: x times a [1,16,1,1] weight, so that its grad is made. */
static struct tb *thnn_perm_graph(bool scaled)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,16,8,8");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 16, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){24, 16, 1, 1});
    if (scaled)
        tb_node(b, "Mul", "scale", "x,S", "xs");
    tb_node(b, "Conv", "conv", scaled ? "xs,W" : "x,W", "y");
    tb_node(b, "Transpose", "pout", "y", "z");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 3, 1});
    tb_output(b, "z");
    return b;
}

static void test_thnn_grad_output_copy(void **state)
{
    (void)state;
    static const char *const names[] = {"grad_output.contiguous"};
    static const char copy[] = "+12288 grad_output.contiguous\n-12288 grad_output.contiguous\n";
    char got[1024], two[256];
    snprintf(two, sizeof two, "%s%s", copy, copy);
    for (int torch = 113; torch <= 214; torch += 101) {
        loss_events(thnn_perm_graph(true), torch, DNNMEM_LOSS_CE, names, 1, got, sizeof got);
        assert_string_equal(got, two);
        loss_events(thnn_perm_graph(false), torch, DNNMEM_LOSS_CE, names, 1, got, sizeof got);
        assert_string_equal(got, copy);
    }
}

/* 1.13's backward of a channels-last oneDNN conv (cpuconv.c
 * onednn_cl_113_grad; measured 1.13.0, Debian's python3-torch, one thread,
 * AVX2, [2,16,10,10] 16 -> 24 3x3, W 13,824 B): the weight's channels-last
 * copy, the grad_output's (the loss's contiguous grad), after grad_input the
 * weight reordered for backward data (+W -W), then diff_weights and the
 * channels-last grad_weight before the weight's grad (four weight-sized
 * blocks with the copy and the grad), freed when the node returns. x is
 * scaled by a [1,16,1,1] weight so that its grad is made. */
static void test_onednn_cl_backward_113(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2,8,8,16");
    tb_init(b, "S", F32, 4, (int64_t[]){1, 16, 1, 1});
    tb_init(b, "W", F32, 4, (int64_t[]){24, 16, 3, 3});
    tb_node(b, "Transpose", "perm", "x", "xc");
    tb_attr_ints(b, "perm", 4, (int64_t[]){0, 3, 1, 2});
    tb_node(b, "Mul", "scale", "xc,S", "xs");
    tb_node(b, "Conv", "conv", "xs,W", "y");
    tb_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tb_output(b, "y");
    static const char *const names[] = {"grad_weight (channels last)", "weight (channels last)",
                                        "grad_output.contiguous", "(backward data)",
                                        "onednn_diff_weights"};
    char got[1024];
    loss_events(b, 113, DNNMEM_LOSS_CE, names, 5, got, sizeof got);
    assert_string_equal(got, "+13824 weight (channels last)\n-13824 weight (channels last)\n"
                             "+13824 weight (channels last)\n+12288 grad_output.contiguous\n"
                             "+13824 (backward data)\n-13824 (backward data)\n"
                             "+13824 onednn_diff_weights\n+13824 grad_weight (channels last)\n"
                             "-13824 weight (channels last)\n-13824 onednn_diff_weights\n"
                             "-13824 grad_weight (channels last)\n-12288 grad_output.contiguous\n");
}


int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_maxpool_indices_no_grad),
        cmocka_unit_test(test_thnn_weight_copy_113),
        cmocka_unit_test(test_onednn_channels_last_113),
        cmocka_unit_test(test_onednn_nchw_113),
        cmocka_unit_test(test_onednn_brgemm_channels_last),
        cmocka_unit_test(test_onednn_brgemm_avx2_one_block),
        cmocka_unit_test(test_split_views),
        cmocka_unit_test(test_onednn_brgemm_backward),
        cmocka_unit_test(test_onednn_strided_backward_data),
        cmocka_unit_test(test_conv_grads_returned_together),
        cmocka_unit_test(test_elu_saves_input),
        cmocka_unit_test(test_scope_unscoped_constant),
        cmocka_unit_test(test_caller_name_two_places),
        cmocka_unit_test(test_caller_name_kept_across),
        cmocka_unit_test(test_caller_name_rebound),
        cmocka_unit_test(test_caller_name_cat_list),
        cmocka_unit_test(test_reshape_views_matmul_copies),
        cmocka_unit_test(test_copy_slices),
        cmocka_unit_test(test_instance_norm_saved),
        cmocka_unit_test(test_groupnorm_noaffine_inplace),
        cmocka_unit_test(test_weight_computed),
        cmocka_unit_test(test_weight_computed_chain),
        cmocka_unit_test(test_weight_index_buffer),
        cmocka_unit_test(test_onednn_1x1_small_input),
        cmocka_unit_test(test_broadcast_mul_grad),
        cmocka_unit_test(test_conv3d),
        cmocka_unit_test(test_pad_keeps_channels_last),
        cmocka_unit_test(test_depthwise_gemm_weight_grad),
        cmocka_unit_test(test_depthwise_jit_weight_grad),
        cmocka_unit_test(test_depthwise_backward_data_first),
        cmocka_unit_test(test_onednn_gemm_fallback),
        cmocka_unit_test(test_onednn_gemm_forward_113),
        cmocka_unit_test(test_onednn_gemm_backward_data),
        cmocka_unit_test(test_onednn_gemm_weight_grad_declines),
        cmocka_unit_test(test_split_views_conv_copies),
        cmocka_unit_test(test_view_strides_channels_last),
        cmocka_unit_test(test_expand_is_view),
        cmocka_unit_test(test_onednn_bwd_113),
        cmocka_unit_test(test_onednn_strided_1x1_113_avx512),
        cmocka_unit_test(test_onednn_gemm_weight_grad_113),
        cmocka_unit_test(test_onednn_gemm_weight_grad_3d_113),
        cmocka_unit_test(test_onednn_cl_bwd_113),
        cmocka_unit_test(test_norm_stats_unsaved),
        cmocka_unit_test(test_grad_output_copy),
        cmocka_unit_test(test_thnn_grad_output_copy),
        cmocka_unit_test(test_onednn_cl_backward_113),
    };
    return cmocka_run_group_tests_name("cpu", tests, NULL, NULL);
}
