/*
 * save.c: what each forward node keeps for its backward (dm_train_save),
 * by the rules of ops.def; TensorFlow's eager tape (tf.c) and MXNet
 * (mxnet.c) have their own tables.
 *
 * Facts behind the backward rules of ops.def (sources: PyTorch's
 * tools/autograd/derivatives.yaml and the generated Functions.h of 1.13,
 * checked with saved_tensors_hooks; summarised in runtime-facts.md §6):
 *  - DM_T_OUT: relu/sigmoid/tanh/softmax/log_softmax/exp/sqrt save their
 *    result (ReluBackward0 threshold_backward(grad, result)); softmax and
 *    log_softmax up to 1.10 their input too (see keep rules); elu and selu
 *    only in place (out of place their input: saves_self_out_of_place).
 *  - DM_T_IN: erf, log, leaky_relu, clamp, avg_pool, 1.13 mean (MeanBackward1
 *    keeps self), pow by a scalar (PowBackward0 keeps self and the exponent)
 *    save their input. Run in place (hardtanh_ for ReLU6, hardswish_,
 *    hardsigmoid_: torchvision's inplace=True), an op whose derivative
 *    formula reads self (hardtanh_backward(grad, self, ...),
 *    hardswish_backward(grad, self), hardsigmoid_backward(grad, self)) has
 *    autograd's generated code clone self before the kernel overwrites it
 *    and save the clone (original_self); relu_, leaky_relu_ and elu_ have
 *    formulas on result and clone nothing. Measured on PyTorch 2.14 and 1.13
 *    (CPU, the profiler's allocation events): torchvision's MobileNetV2
 *    training was 18-25% under without the clones
 *    (tests/validation/pytorch-cpu-2.x-zoo.jsonl).
 *  - DM_T_OPERANDS: mul/div/mm/addmm save, for each input that needs a grad,
 *    the operands that grad is computed from (MmBackward0: self for mat2's
 *    grad, mat2 for self's); the generated code skips the others.
 *  - DM_T_BOTH: torch.max(a, b) / maximum and minimum save self and other
 *    whenever a grad is needed: derivatives.yaml's max.other, maximum and
 *    minimum formulas read both for each input's grad (at::where(self ==
 *    other, grad / 2, grad).masked_fill_(self < other, 0)), so an input
 *    that needs a grad keeps itself too (transformers' OPT before 4.49 clamps
 *    its scores with torch.max, keeping a [B, H, S, S] per layer).
 *  - DM_T_CONV: ConvolutionBackward0 saves input and weight, in 1.13 even when
 *    the input needs no grad.
 *  - DM_T_BN: NativeBatchNormBackward0 saves input, weight, running stats and
 *    save_mean, save_invstd: one fp32 value per channel each.
 *  - DM_T_LN: NativeLayerNormBackward0 saves input, mean, rstd: one fp32 per
 *    normalized row each.
 *  - DM_T_POOL_IDX: max_pool2d_with_indices saves input and int64 indices
 *    shaped like the output.
 *  - DM_T_DROPOUT: on CUDA native_dropout keeps a bool mask (PR #63937); on
 *    the CPU _dropout_impl multiplies by a noise tensor of the input dtype that
 *    MulBackward0 keeps. TensorFlow: tf.c.
 *  - DM_T_EMBED: EmbeddingBackward0 keeps the indices; the weight grad is dense.
 *    Indexing an activation by a tensor (x[idx], IndexBackward0) likewise keeps
 *    the indices, and its grad is zeros shaped like x with index_put_.
 *  - TopK: TopkBackward0 keeps the indices and scatters the grad into zeros
 *    shaped like the input (value_selecting_reduction_backward).
 *  - IndexAdd (index_add_, in place): derivatives.yaml's index_add entry
 *    (source: grad.index_select(dim, index).expand_as(source), and
 *    source.dim()) makes IndexAddBackward0 keep index and source (1.13's
 *    _saved_index, _saved_source); self's grad is grad itself (DM_T_PASS).
 *  - GatherND (x[i, j]): IndexBackward0 (derivatives.yaml's index entry,
 *    index_put_ into zeros of self's size) keeps the indices (DM_T_COPY).
 *  - Detach: a view that records no autograd node (tensor.detach(), the
 *    input of a torch.no_grad() block).
 *  - DM_T_VIEW, DM_T_PASS: views, add, sub, cat save nothing and pass the
 *    incoming grad (or views of it) on; a broadcast input gets a reduced copy.
 *  - every other rule allocates each input grad, shaped like the input.
 *
 * JAX's jit (run->xla, with run->dataflow; src/schedule/xla.c plans the
 * buffers). What XLA keeps for the backward where it differs from
 * autograd's, read in the optimized HLO of the measured steps
 * (tools/gpu/results/jax-hlo.tar.gz, jax 0.11.2 on an H200):
 *  - MaxPool: jax's reduce_window max differentiates to a select-and-scatter
 *    of the grads onto the pooled input (jax/_src/lax/windowed_reductions.py),
 *    which XLA's GPU compiler expands (xla/service/select_and_scatter_expander.cc)
 *    into a variadic reduce-window over the input and one s32 iota per
 *    dimension, finding each window's selected element, then a scatter-add
 *    of the grads into a broadcast of 0. No indices are kept: the backward
 *    recomputes the pooled values (output-sized, dead at once) and the rank
 *    int32 coordinates (output-sized each), live into the scatter. XLA's CPU
 *    compiler runs that reduce-window in the forward instead (jax 0.10.2's
 *    CPU dumps of jax-cpu.jsonl's CNN: wrapped_reduce-window beside the max,
 *    its rank s32 outputs concatenated into [M, rank] and kept to the
 *    backward's scatter): the argmax is kept, the input is not, and the
 *    backward recomputes nothing; its iotas and zeros are xla.c's rule 8. The
 *    scatter's operand is written in place, so it is materialised: the
 *    input's grad takes its buffer. After a ReLU (jnp.maximum(x, 0), its
 *    broadcast zero fused into the pool's reduce-window) the two zeros are
 *    one multi-output loop fusion the scheduler runs in the forward: both
 *    input-sized buffers live from the pool's forward to its backward (the
 *    CNN's loop_broadcast_fusion{0,1}: 2 x 64 MiB for conv1 at batch 64).
 *    Elsewhere the same expansion is assumed, the scatter operand made in
 *    the backward (the grad's own buffer: nothing more).
 *  - Softmax: jax.nn.softmax's backward needs its output; XLA fuses the
 *    output's computation (exp(x - max) / sum) into the backward's fusion
 *    again, reading the input, while the output stays materialised for the
 *    attention's second matmul: the input (the scaled scores) is kept too
 *    (the transformer: 2 x 16 MiB per layer at batch 8, seq 256).
 *  - Relu: jax.nn.relu is a custom_jvp whose rule is
 *    lax.select(x > 0, g, 0) (jax/_src/nn/functions.py, relu.defjvps):
 *    the backward reads the input (XLA recomputes a matmul's bias add into
 *    the select's fusion, so the matmul's output is kept), not the output,
 *    which stays alive only where the next layer's weight gradient reads
 *    it (measured on the CPU: jax-cpu.jsonl's MLP steps keep both the dot
 *    outputs and the ReLU outputs, compare_select_fusion(dY, dot, bias)).
 *    On the GPU the measured steps keep no pre-activation (the rule there
 *    would put the H200 CNN's temp +37% and the MLP's +7%): there, the
 *    backward's compare is taken to read the ReLU's output, as autograd's.
 *  - Gelu (exact) on the CPU: erf's JVP rule, 2 / sqrt(pi) * exp(-x^2)
 *    (jax/_src/lax/special.py or lax.py, erf_p's defjvp), depends on x
 *    only, so linearisation computes it in the forward; XLA's CPU backend
 *    keeps it as a third input-sized residual (measured: jax-cpu's
 *    transformer keeps negate_exponential_fusion [8,128,2048] per block
 *    beside the dot output, the erf term and the GELU output).
 *  - Gelu (exact): jax.nn.gelu(approximate=False) is
 *    x * (erf(x / sqrt 2) + 1) / 2, differentiated as written: the product's
 *    VJP keeps its second factor, an input-sized value XLA makes as a
 *    second output of the forward's fusion, besides the input.
 */
#include "train/train.h"

#include <string.h>

/* DM_T_RNN: an LSTM, GRU or RNN layer. */
static void keep_rnn(struct dm_sb *b, int32_t i)
{
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &b->g->nodes[i];
    int32_t in0 = dm_has_in(n, 0) ? n->in[0] : -1, out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    /* The input projection's addmm keeps the input. Then, per time step
     * and direction (aten/src/ATen/native/RNN.cpp, LSTMCell on the CPU in
     * 1.13, measured in tests/validation): the gates [B,4H], whose
     * in-place sigmoid/tanh results their backward keeps, and cy, hy and
     * tanh(cy) [B,H]: 7H values per batch row. cuDNN (CUDA) instead keeps
     * the output and a reserve holding the gates: approximated as 4H per
     * step; GRU (3 gates) and RNN (1) follow the same count. */
    dm_keep_input(b, i, 0);
    if (in0 < 0 || t[in0].rank != 3)
        return;
    int64_t hidden = dm_attr_int(n, "hidden_size", 0);
    int64_t dirs = strcmp(dm_attr_str(n, "direction", "forward"), "bidirectional") == 0 ? 2 : 1;
    int64_t gates = n->op == DM_OP_MxRNN ? dm_attr_int(n, "gates", 1)
                    : n->op == DM_OP_LSTM ? 4 : n->op == DM_OP_GRU ? 3 : 1;
    int64_t rows = t[in0].dims[0] * t[in0].dims[1]; /* seq x batch (either layout) */
    int64_t per_row = b->run->cuda ? gates * hidden : (gates + 3) * hidden;
    if (b->run->cuda)
        dm_keep_tensor(b, i, out0);
    dm_keep_new(b, i, t[in0].dtype, rows * dirs * per_row, b->run->cuda ? "reserve" : "cell_states");
}

/* DM_T_SCAN: Mamba's selective scan, the loop of ops.def's SelectiveScan row
 * as autograd records it (derivatives.yaml, 2.13): each step's
 * MulBackward0 (dA[:, :, i] * state) keeps both operands, a view of dA and
 * the previous state (the zeros at step 0); its AddBackward0 nothing; the
 * matmul's BmmBackward0 the new state and a view of C. So dA and C stay, and
 * every state: the L before the last ([B, D, N] each, one buffer here) and
 * the last (output 1). Measured, transformers 5.24.0 on torch 2.13 CPU:
 * 254 of the 256 states ([2, 128, 16] float32, aten::add) of tiny-mamba's two
 * layers live at the backward's peak, b2 s128
 * (tests/validation/hf-real-mamba-cpu.jsonl). */
static void keep_scan(struct dm_sb *b, int32_t i)
{
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &b->g->nodes[i];
    if (!dm_has_in(n, 0) || !dm_has_in(n, 2) || !dm_has_out(n, 1) || t[n->in[0]].rank != 4)
        return;
    const int64_t *d = t[n->in[0]].dims; /* [B, D, L, N] */
    dm_keep_input(b, i, 0);
    dm_keep_input(b, i, 2);
    int64_t states;
    if (dm_mul_ok(d[0], d[1], &states) && dm_mul_ok(states, d[3], &states) &&
        dm_mul_ok(states, d[2], &states))
        dm_keep_new(b, i, t[n->in[0]].dtype, states, "ssm_states (each step's, the zeros first)");
    dm_keep_tensor(b, i, n->out[1]);
}

/* Op-specific saves besides the rule's (ops.def); true: the rule's are not
 * made. */
static bool keep_op_specific(struct dm_sb *b, int32_t i)
{
    const struct dm_node *n = &b->g->nodes[i];
    /* mean over given dims (mean.dim): before 2.0, MeanBackward1 keeps self
     * (its formula reads self.numel(); 1.13's grad_fn has _saved_self),
     * 2.0 keeps only sym_numel. mean() of everything (MeanBackward0) keeps
     * sizes only. */
    int64_t n_axes = -1;
    /* torch.var lifted (lift.c lift_var): VarBackward0 keeps self */
    if (n->op == DM_OP_ReduceMean && dm_attr_int(n, "dnnmem_var", 0)) {
        dm_keep_input(b, i, 0);
        return true;
    }
    if (n->op == DM_OP_ReduceMean && b->run->torch_version < 200 &&
        (dm_has_in(n, 1) || dm_attr_ints(n, "axes", &n_axes))) {
        dm_keep_input(b, i, 0);
        return true;
    }
    /* TopkBackward0 keeps the int64 indices (value_selecting_reduction_backward
     * scatters the grad into zeros shaped like the input) */
    if (n->op == DM_OP_TopK && dm_has_out(n, 1))
        dm_keep_tensor(b, i, n->out[1]);
    /* IndexAddBackward0 keeps index and source (its formula reads
     * source.dim() and expand_as(source)); IndexBackward0 (x[i, j], GatherND)
     * keeps the indices */
    if (n->op == DM_OP_IndexAdd && dm_has_in(n, 2)) {
        dm_keep_input(b, i, 1);
        dm_keep_input(b, i, 2);
    }
    if (n->op == DM_OP_GatherND && dm_has_in(n, 1))
        dm_keep_input(b, i, 1);
    /* a quantized layer's autograd Function: MatMul8bitLt keeps A
     * (ctx.tensors = (CAt, subA, A)); auto-gptq's torch path keeps its
     * dequantized weight (torch.matmul's MmBackward) */
    if (n->op == DM_OP_QuantLinear) {
        enum dm_dtype wdt = DM_UNDEFINED;
        int64_t w = dm_quant_saved_weight(b, n, &wdt);
        if (w > 0)
            dm_keep_new(b, i, wdt, w, "dequantized_weight");
        if (strcmp(dm_attr_str(n, "method", ""), "bnb8") == 0)
            dm_keep_input(b, i, 0);
    }
    return false;
}

/* What the rule of node i's op keeps (ops.def; header). */
/* PyTorch ran n in place (its output took its input's buffer) and its
 * derivative reads the input: autograd keeps a clone (the header) */
static bool clones_self(const struct dm_sb *b, const struct dm_node *n, int32_t in0, int32_t out0)
{
    return (n->op == DM_OP_Clip || n->op == DM_OP_HardSwish || n->op == DM_OP_HardSigmoid) &&
           in0 >= 0 && out0 >= 0 &&
           !b->run->tf_ops && !b->run->xla && !b->run->mx_ops && b->cur[out0] >= 0 &&
           b->cur[out0] == b->cur[in0];
}

/* Node i is the InstanceNormalization of nn.GroupNorm as torch.onnx writes
 * it, on its input reshaped to [N, G, -1] (lift.c): PyTorch ran one
 * native_group_norm, whose output is a new tensor, no view. */
static bool exported_group_norm(const struct dm_sb *b, int32_t i)
{
    const struct dm_node *n = &b->g->nodes[i];
    if (n->op != DM_OP_InstanceNormalization || !dm_has_in(n, 0))
        return false;
    int32_t p = b->g->tensors[n->in[0]].producer;
    return p >= 0 && b->g->nodes[p].op == DM_OP_Reshape && b->t[n->in[0]].rank == 3;
}

/* PyTorch's F.instance_norm (aten/src/ATen/native/Normalization.cpp,
 * instance_norm, 1.13 and 2.14) runs batch_norm on the input viewed as
 * [1, N*C, ...], with the weight and bias repeated N times
 * (repeat_if_defined): NativeBatchNormBackward0 keeps, beside the input,
 * save_mean and save_invstd, one fp32 value per (n, c), and the repeated
 * weight (the bias's repeat is freed when instance_norm returns). Measured
 * (tools/oracle/instnorm_probe.py, 2.14.1 and 1.13, x [2,8,8,8]): 64 + 64 B
 * kept, and 64 B for the weight with affine=True; all three freed by
 * NativeBatchNormBackward0. nn.GroupNorm(affine=False) is left as
 * torch.onnx writes it (lift.c), Reshape [N, G, -1] -> InstanceNormalization
 * (ones, zeros): PyTorch runs native_group_norm, whose mean and rstd are
 * [N, G] (group_norm.cpp), the same count over that input, and no weight
 * (rand120: 1,444 B of these live at the peak, -0.09% left on the modules
 * export). TensorFlow, MXNet and XLA: not these kernels. */
static void keep_instance_norm(struct dm_sb *b, int32_t i, int32_t in0)
{
    const struct dm_node *n = &b->g->nodes[i];
    const struct dm_tinfo *t = b->t;
    int64_t rows;
    if (n->op != DM_OP_InstanceNormalization || in0 < 0 || t[in0].rank < 2 || b->run->tf_ops ||
        b->run->mx_ops || b->run->xla || !dm_mul_ok(t[in0].dims[0], t[in0].dims[1], &rows))
        return;
    if (!exported_group_norm(b, i) && dm_has_in(n, 1) && b->train->param[n->in[1]])
        dm_keep_new(b, i, t[n->in[1]].dtype, rows, "weight.repeat(N)");
    dm_keep_new(b, i, DM_FLOAT, rows, "save_mean");
    dm_keep_new(b, i, DM_FLOAT, rows, "save_invstd");
}

/* PyTorch's elu (and selu, which F.selu runs as elu with SELU's constants)
 * out of place keeps its input, in place its result: derivatives.yaml's elu
 * entry is elu_backward(grad, ..., is_result false, self), elu_'s
 * is_result true, result (celu likewise, DM_T_IN). Measured, 2.14.1, one
 * thread: F.elu's and F.selu's EluBackward0 has _saved_self, elu_'s
 * EluBackward1 _saved_result; in (elu(x * S) * S2).sum().backward() on
 * [2,8,8,8] the product x * S (4096 B) lives until EluBackward0 has run.
 * TensorFlow's EluGrad and SeluGrad read the output (tf.c); XLA keeps the
 * rule's output. */
static bool saves_self_out_of_place(const struct dm_sb *b, const struct dm_node *n, int32_t in0,
                                    int32_t out0)
{
    return (n->op == DM_OP_Elu || n->op == DM_OP_Selu) && in0 >= 0 && out0 >= 0 &&
           !b->run->tf_ops && !b->run->xla && !b->run->mx_ops &&
           (b->cur[out0] < 0 || b->cur[out0] != b->cur[in0]);
}

static void keep_by_rule(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_node *n = &g->nodes[i];
    int32_t in0 = dm_has_in(n, 0) ? n->in[0] : -1, out0 = dm_has_out(n, 0) ? n->out[0] : -1;
    switch (dm_ops[n->op].train) {
    case DM_T_OUT:
        /* XLA on the CPU: jax.nn.relu's custom JVP is select(x > 0, g, 0),
         * reading its input, not its output (header, "JAX's jit") */
        if (b->run->xla && !b->run->cuda && n->op == DM_OP_Relu) {
            dm_keep_input(b, i, 0);
            break;
        }
        if (saves_self_out_of_place(b, n, in0, out0)) {
            dm_keep_input(b, i, 0);
            break;
        }
        dm_keep_tensor(b, i, out0);
        /* XLA: softmax's backward recomputes its output from the input
         * (header, "JAX's jit") */
        if (b->run->xla && n->op == DM_OP_Softmax)
            dm_keep_input(b, i, 0);
        /* up to PyTorch 1.10, _softmax_backward_data took the input tensor
         * (for its dtype), so SoftmaxBackward and LogSoftmaxBackward kept
         * self as well as the result; 1.11 passes input_dtype (PR #66018;
         * issue #49600) */
        if ((n->op == DM_OP_Softmax || n->op == DM_OP_LogSoftmax) && b->run->torch_version < 111)
            dm_keep_input(b, i, 0);
        break;
    case DM_T_IN:
        /* tf.function: Keras' relu6 is Relu6, whose grad reads its output;
         * tf.clip_by_value's two grads read x and minimum(x, hi) (tf.c's
         * header, dm_tf_grad_target) */
        if (b->run->tf_graph && dm_tf_relu6(b, n)) {
            dm_keep_tensor(b, i, out0);
            break;
        }
        /* tf.function: Keras' GlobalAveragePooling is reduce_mean, a Mean
         * whose _MeanGrad (python/ops/math_grad.py) reads only the input's
         * shape, a Shape op the graph evaluates in the forward: the input is
         * not kept (the eager tape keeps it: Mean is in neither exclusion
         * list, tf_tape.def). Measured on the CPU (tf_measure.py, TF 2.21):
         * Conv2D -> GlobalAveragePooling2D -> Dense at batch 8 peaks with one
         * activation-sized tensor, not two. */
        if (b->run->tf_graph && n->op == DM_OP_GlobalAveragePool)
            break;
        if (clones_self(b, n, in0, out0)) {
            dm_keep_new(b, i, t[in0].dtype, t[in0].numel, "original_self (the input's clone)");
            break;
        }
        dm_keep_input(b, i, 0);
        keep_instance_norm(b, i, in0);
        if (b->run->tf_graph && n->op == DM_OP_Clip && out0 >= 0)
            dm_keep_new(b, i, t[out0].dtype, t[out0].numel, "minimum(x, hi) (clip_by_value)");
        /* tf.function, Keras 3's exact gelu (tf.nn.gelu, nn_ops.py: 0.5 * x *
         * erfc(-x * 0.7071)): the last Mul's grad reads both factors, kept
         * from the forward to the gelu's backward (measured, trace
         * rand2-fit-b4: Gelu/mul and Gelu/Erfc, [4,32,32,4] each, made in
         * the forward and freed in its backward); erfc's input (or
         * _ErfcGrad's square of it, which the executor may run early: rand5)
         * is not modelled */
        if (b->run->tf_graph && b->run->tf_build && n->op == DM_OP_Gelu && in0 >= 0 &&
            strcmp(dm_attr_str(n, "approximate", "none"), "tanh") != 0) {
            dm_keep_new(b, i, t[in0].dtype, t[in0].numel, "0.5 * x (gelu's Mul)");
            dm_keep_new(b, i, t[in0].dtype, t[in0].numel, "erfc(-x * 0.7071) (gelu's Erfc)");
        }
        /* XLA: jax.nn.gelu(approximate=False) is x * (erf(x / sqrt 2) + 1)
         * / 2 differentiated as written: the product's VJP keeps its
         * second factor too (header, "JAX's jit") */
        if (b->run->xla && n->op == DM_OP_Gelu && in0 >= 0 &&
            strcmp(dm_attr_str(n, "approximate", "none"), "tanh") != 0)
            dm_keep_new(b, i, t[in0].dtype, t[in0].numel, "(erf(x / sqrt 2) + 1) / 2");
        /* XLA on the CPU: erf's JVP, exp(-x^2 / 2) up to a constant, is a
         * residual made in the forward too (header, "JAX's jit") */
        if (b->run->xla && !b->run->cuda && n->op == DM_OP_Gelu && in0 >= 0 &&
            strcmp(dm_attr_str(n, "approximate", "none"), "tanh") != 0)
            dm_keep_new(b, i, t[in0].dtype, t[in0].numel, "exp(-x^2 / 2) (erf's JVP)");
        break;
    case DM_T_OPERANDS:
        /* each input that needs a grad keeps the other data operands */
        for (int j = 0; j < n->n_in && j < 2; j++) {
            bool needed = false;
            for (int k = 0; k < n->n_in && k < 2; k++)
                if (k != j && n->in[k] >= 0 && tr->rg[n->in[k]])
                    needed = true;
            if (needed)
                dm_keep_input(b, i, j);
        }
        break;
    case DM_T_BOTH: {
        bool needed = false;
        for (int k = 0; k < n->n_in && k < 2; k++)
            needed |= n->in[k] >= 0 && tr->rg[n->in[k]];
        for (int j = 0; needed && j < n->n_in && j < 2; j++)
            dm_keep_input(b, i, j);
        break;
    }
    case DM_T_CONV:
        dm_keep_input(b, i, 0);
        dm_keep_input(b, i, 1);
        break;
    case DM_T_BN: {
        dm_keep_input(b, i, 0);
        int64_t c = in0 >= 0 && t[in0].rank >= 2 ? t[in0].dims[1] : 1;
        dm_keep_new(b, i, DM_FLOAT, c, "save_mean");
        dm_keep_new(b, i, DM_FLOAT, c, "save_invstd");
        break;
    }
    case DM_T_LN: {
        dm_keep_input(b, i, 0);
        int64_t rows = dm_ln_rows(b, n);
        dm_keep_new(b, i, DM_FLOAT, rows, "mean");
        dm_keep_new(b, i, DM_FLOAT, rows, "rstd");
        /* Keras 2's fused path under tf.function (tf.c's header; the tape's
         * is dm_tf_tape_save's): `+ beta`'s AddV2 grad is pruned to shapes */
        if (dm_tf_fused_ln(b, n) && out0 >= 0) {
            dm_keep_new(b, i, DM_FLOAT, rows, "ones (scale)");
            dm_keep_new(b, i, t[out0].dtype, t[out0].numel, "normalized");
        }
        break;
    }
    case DM_T_POOL_IDX:
        if (b->run->xla && !b->run->cuda && n->op == DM_OP_MaxPool && out0 >= 0 && in0 >= 0) {
            /* XLA's CPU backend (header, "JAX's jit"): the forward's argmax,
             * one int32 per output element and input dimension; not the input */
            int64_t e;
            if (dm_mul_ok(t[out0].numel, t[in0].rank, &e))
                dm_keep_new(b, i, DM_INT32, e, "argmax (int32 per dimension)");
            break;
        }
        dm_keep_input(b, i, 0);
        if (b->run->xla && n->op == DM_OP_MaxPool) {
            /* XLA (header, "JAX's jit"): no indices; after a ReLU two
             * input-sized zeros made in the forward */
            int32_t pr = in0 >= 0 ? g->tensors[in0].producer : -1;
            if (pr >= 0 && g->nodes[pr].op == DM_OP_Relu) {
                dm_keep_new(b, i, t[in0].dtype, t[in0].numel, "zeros (relu's max operand)");
                dm_keep_new(b, i, t[in0].dtype, t[in0].numel, XLA_SCATTER_OPERAND);
            }
        } else if (out0 >= 0) {
            dm_keep_new(b, i, DM_INT64, t[out0].numel, "indices");
        }
        break;
    case DM_T_DROPOUT:
        if (in0 >= 0 && b->run->tf_ops) {
            /* tf.function (the tape's is dm_tf_tape_save's): the graph prunes the
             * mask's grad, the only reader of x * scale */
            dm_keep_new(b, i, t[in0].dtype, t[in0].numel, "mask");
        } else if (in0 >= 0) {
            dm_keep_new(b, i, b->run->cuda ? DM_BOOL : t[in0].dtype, t[in0].numel,
                     b->run->cuda ? "mask" : "noise");
        }
        break;
    case DM_T_EMBED: dm_keep_input(b, i, 1); break;
    case DM_T_RNN: keep_rnn(b, i); break;
    case DM_T_SCAN: keep_scan(b, i); break;
    case DM_T_SDPA: {
        /* ScaledDotProduct{Flash,Efficient}AttentionBackward0 keep query, key,
         * value, the output and the fp32 log-sum-exp of each query row
         * (dm_sdpa_lse_rows); the philox seed and offset are host scalars.
         * Neither keeps the scores or a dropout mask (dropout is regenerated). */
        if (in0 < 0 || t[in0].rank != 4)
            break;
        for (int k = 0; k < 4; k++) /* and attn_mask, when given (the kernel's bias) */
            if (dm_has_in(n, k))
                dm_keep_input(b, i, k);
        dm_keep_tensor(b, i, out0);
        dm_keep_new(b, i, DM_FLOAT, t[in0].dims[0] * t[in0].dims[1] * dm_sdpa_lse_rows(b, n),
                 "logsumexp");
        break;
    }
    case DM_T_NONE:
    case DM_T_VIEW:
    case DM_T_PASS:
    case DM_T_COPY:
    case DM_T_UNMODELLED: break;
    }}

/* An op PyTorch ran in place on a view of a tensor that needs a grad:
 * autograd rebases the view's history onto a CopySlices node of its base
 * (torch/csrc/autograd/variable.cpp, rebase_history; functions/tensor.cpp,
 * CopySlices::apply), whose backward makes the base's grad
 * (new_empty_strided, the grad copied in), clones the view's slice of it
 * and runs the op's backward on the clone: two view-sized buffers beside
 * the grad, freed before it returns (backward.c). The views modelled are
 * those of the same size as their base: a permute or reshape, and
 * instance_norm's output, batch_norm's [1, N*C, ...] output viewed back as
 * [N, C, ...] (aten/src/ATen/native/Normalization.cpp). Measured, 2.14.1,
 * relu_ on [2,8,8,8] (4096 B) after F.instance_norm or a permute:
 * CopySlices allocates 4096 (new_empty_strided), 4096 (clone), 4096
 * (threshold_backward), then frees the last two (rand33's hardsigmoid_
 * after an InstanceNorm2d). Not after nn.GroupNorm(affine=False) as
 * exported (exported_group_norm): its Reshape back reads a new tensor
 * (measured, 2.14.1: relu_ after it is ReluBackward0 alone). */
static bool on_view(const struct dm_sb *b, int32_t i, int32_t in0, int32_t out0)
{
    const struct dm_graph *g = b->g;
    enum dm_op op = g->nodes[i].op; /* the activations forward.c runs in place */
    bool act = op == DM_OP_Relu || op == DM_OP_Clip || op == DM_OP_LeakyRelu ||
               op == DM_OP_HardSwish || op == DM_OP_HardSigmoid || op == DM_OP_Silu ||
               op == DM_OP_Elu || op == DM_OP_Selu || op == DM_OP_Celu;
    if (!act || in0 < 0 || out0 < 0 || b->run->tf_ops || b->run->mx_ops || b->run->xla ||
        b->cur[out0] < 0 || b->cur[out0] != b->cur[in0] || b->t[out0].numel != b->t[in0].numel)
        return false;
    int32_t p = g->tensors[in0].producer;
    if (p < 0 || p == i || !dm_has_in(&g->nodes[p], 0))
        return false;
    const struct dm_node *v = &g->nodes[p];
    int32_t base = v->in[0];
    if (v->op == DM_OP_InstanceNormalization)
        return true;
    bool view_op = v->op == DM_OP_Transpose || v->op == DM_OP_Reshape ||
                   v->op == DM_OP_Flatten || v->op == DM_OP_Squeeze || v->op == DM_OP_Unsqueeze;
    int32_t bp = g->tensors[base].producer;
    if (bp >= 0 && exported_group_norm(b, bp)) /* GroupNorm(affine=False)'s output: no view */
        return false;
    return view_op && b->cur[base] == b->cur[in0] && b->train->rg[base] &&
           b->t[base].numel == b->t[in0].numel;
}

void dm_train_save(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_node *n = &g->nodes[i];
    tr->n_saved[i] = 0;
    /* a grad leaf (enable_input_require_grads' hook on an embedding's
     * output) lives while its AccumulateGrad node does: until the caller
     * lets go of the graph */
    for (int k = 0; k < n->n_out; k++) {
        int32_t o = n->out[k];
        if (o >= 0 && tr->rg[o] && g->tensors[o].grad_leaf && tr->leaf_val[o] < 0 &&
            b->cur[o] >= 0) {
            dm_sb_ref(b, b->cur[o], 1);
            tr->leaf_val[o] = b->cur[o];
        }
    }
    if (tr->mx_mir && tr->mx_mir[i] && !tr->mx_copying) {
        dm_mx_mirror_keep(b, i); /* MXNet mirroring: what its copy reads, not what its grad reads */
        return;
    }
    if (!tr->node_rg[i])
        return;
    tr->copy_slices[i] = n->n_in > 0 && n->n_out > 0 &&
                         on_view(b, i, n->in[0], n->out[0]);
    /* MXNet's and TensorFlow's eager tape's own tables (mx_rules, tf_tape.def) */
    if (b->run->mx_ops && dm_mx_save(b, i))
        return;
    if (b->run->tf_ops && !b->run->tf_graph && dm_tf_tape_save(b, i))
        return;
    if (!keep_op_specific(b, i))
        keep_by_rule(b, i);
}
