/*
 * defaults.c: what an estimate takes when the options leave it open (the
 * run's settings, the CUDA toolkit, the context and workspaces, the
 * allocator), each with the assumption that states it and its source:
 * "option" when the caller chose it, "default" when dnnmem did.
 */
#include "estimate.h"

#include <stdio.h>
#include <string.h>

static const char *optimizer_name(enum dnnmem_optimizer o)
{
    switch (o) {
    case DNNMEM_OPT_SGD_MOMENTUM: return "sgd-momentum";
    case DNNMEM_OPT_SGD: return "sgd";
    case DNNMEM_OPT_ADAM: return "adam";
    case DNNMEM_OPT_ADAMW: return "adamw";
    case DNNMEM_OPT_RMSPROP: return "rmsprop";
    case DNNMEM_OPT_ADAGRAD: return "adagrad";
    case DNNMEM_OPT_NONE: return "none";
    case DNNMEM_OPT_ADAMW_HF: return "adamw-hf (transformers' AdamW, one parameter at a time)";
    case DNNMEM_OPT_ADAFACTOR: return "adafactor (transformers' Adafactor, beta1 None)";
    case DNNMEM_OPT_ADAM8BIT: return "adam8bit (bitsandbytes, blockwise)";
    case DNNMEM_OPT_ADAMW_FUSED: return "adamw-fused (torch.optim.AdamW(fused=True))";
    }
    return "?";
}

static const char *loss_name(enum dnnmem_loss l)
{
    switch (l) {
    case DNNMEM_LOSS_CE: return "cross-entropy against class ids";
    case DNNMEM_LOSS_MSE: return "mse against a target like the output";
    case DNNMEM_LOSS_SUM: return "sum of every output's .sum()";
    }
    return "?";
}

#define KEY(name) dm_default_key(DM_D_##name)
#define SOURCE(name) dm_default_source(&o->d, DM_D_##name)
#define VALUE(name) dm_default_int(&o->d, name)
#define REAL(name) dm_default_real(&o->d, name)

/* The runtime: which framework runs the step, and how. */
static void framework_assumptions(struct dm_est *e)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    struct dm_run *run = &e->run;
    struct dm_assumptions *as = &e->as;
    if (o->other_fw) {
        static const char *const planner[] = {
            [DNNMEM_FW_TENSORFLOW] = "TensorFlow's executor (graph or eager) and Grappler",
            [DNNMEM_FW_MXNET] = "MXNet's static memory planner (in-place reuse, NNVM_EXEC_MATCH_RANGE)",
            [DNNMEM_FW_JAX] = "XLA's buffer assignment (heap simulator, rematerialisation)"};
        bool mx_cpu = c->framework == DNNMEM_FW_MXNET && !run->cuda;
        bool tf_cpu = c->framework == DNNMEM_FW_TENSORFLOW && c->device != DNNMEM_DEVICE_CUDA;
        dm_assume(as, "framework", "option", "%s%s%s (runtime: allocator, limit, overheads; %s)",
                  dnnmem_framework_name(c->framework), c->framework_version ? " " : "",
                  c->framework_version ? c->framework_version : "",
                  mx_cpu ? "checked against MXNet 1.9.1's executor on the CPU with its own kernels, "
                           "MXNET_MKLDNN_ENABLED=0 (docs/validation-mxnet.md)"
                  : tf_cpu ? "on the CPU compared with TF 2.21 / Keras 3.15, training and "
                             "inference (128 configurations, Keras 3 files): median |error| 0.2%, 83% "
                             "within 3%, 9 under by more than 5% (tf.function training, two "
                             "eager tapes): not "
                             "yet within the bars (docs/validation-tf.md)"
                           : "not validated against measurements");
        if (o->jax_jit)
            dm_assume(as, "schedule", "default",
                      "XLA's buffer assignment over the step's dataflow (values die at their last "
                      "reader); which values exist and which forward values the backward reads are "
                      "dnnmem's PyTorch-derived rules with XLA's where they differ (max pool, "
                      "softmax, GELU); the program order (forward, backward) stands in for XLA's "
                      "memory scheduler, but each parameter's update runs as soon as its gradient "
                      "is whole, as XLA schedules it");
        else if (o->tf_graph)
            dm_assume(as, "schedule", "default",
                      "TensorFlow's graph executor over the step's dataflow (a tensor dies after its "
                      "last consumer, no Python variable holds one); which tensors exist and which "
                      "forward tensors the backward reads are PyTorch %d.%d's rules but for "
                      "tf_ops'; the program order stands in for the executor's",
                      run->torch_version / 100, run->torch_version % 100);
        else if (!o->mx_planned && run->mx_ops && run->train)
            dm_assume(as, "schedule", "default",
                      "PyTorch %d.%d eager's: which tensors exist and when they are freed are "
                      "PyTorch's, what the backward reads MXNet's (mx_ops); not %s",
                      run->torch_version / 100, run->torch_version % 100, planner[c->framework]);
        else if (c->framework == DNNMEM_FW_TENSORFLOW)
            dm_assume(as, "schedule", "default",
                      "PyTorch %d.%d eager's: which tensors exist and when they are freed are "
                      "PyTorch's; which forward tensors the backward keeps are the "
                      "GradientTape's (tf_ops)",
                      run->torch_version / 100, run->torch_version % 100);
        else if (!o->mx_planned)
            dm_assume(as, "schedule", "default",
                      "PyTorch %d.%d eager's: which tensors exist, when they are freed and which "
                      "forward tensors the backward keeps are PyTorch's, not %s",
                      run->torch_version / 100, run->torch_version % 100, planner[c->framework]);
        if (c->framework == DNNMEM_FW_MXNET && !o->mx_planned)
            dm_assume(as, "mxnet_executor", o->generate ? "default" : "option", "%s",
                      o->generate ? "none: a generation loop is not an executor graph (the eager "
                                 "schedule through MXNet's pool)"
                               : "naive: the eager schedule through MXNet's pool, as imperative "
                                 "NDArray/autograd code runs");
        if (c->framework == DNNMEM_FW_MXNET && run->train)
            dm_assume(as, KEY(MX_GRAD_SUM_CAP), SOURCE(MX_GRAD_SUM_CAP),
                      "MXNet %d.%d's backward (FGradient, DeclareBackwardDependency, FInplaceOption): "
                      "what each op's gradient reads (Activation sigmoid/tanh/softrelu keep input and "
                      "output, Pooling input and output, Dropout a mask of %s, elementwise mul/div "
                      "both operands); SoftmaxOutput and the regression outputs are the loss (their "
                      "backward reads output and label; no head gradient); a tensor's gradients "
                      "summed by one ElementWiseSum below %d contributions, by kAddTo writes from %d "
                      "(MXNET_EXEC_INPLACE_GRAD_SUM_CAP); from MXNet 1.9.1's sources, checked on the "
                      "CPU against its executor (tests/validation/mxnet-cpu-1.9.jsonl)",
                      run->mx_version / 100, run->mx_version % 100,
                      run->mx_version >= 200 ? "1 bit per element" : "the input's size and type",
                      run->mx_grad_sum_cap, run->mx_grad_sum_cap);
        if (c->framework == DNNMEM_FW_MXNET && run->train)
            dm_assume(as, "mx_mirror", c->mxnet_mirror ? "option" : "default", "%s",
                      c->mxnet_mirror
                          ? "MXNET_BACKWARD_DO_MIRROR=1: every op but Convolution, FullyConnected, "
                            "Concat, SoftmaxOutput, Dropout (and BatchNorm before MXNet 1.6) is "
                            "recomputed in the backward from its inputs (nnvm's Gradient pass, "
                            "baseline mirroring): its gradient reads the copy, so its forward "
                            "outputs stay only where a never-mirrored op's gradient reads them, "
                            "and the inputs the copy reads from never-mirrored ops are kept; the "
                            "symbolic executor's rule, also applied to --mxnet-executor naive "
                            "(imperative autograd passes no mirror function); derived from "
                            "MXNet's sources, not validated against measurements"
                          : "MXNET_BACKWARD_DO_MIRROR=0 (MXNet's default): nothing recomputed but "
                            "ops marked __force_mirroring__");
        if (c->framework == DNNMEM_FW_TENSORFLOW) {
            dm_assume(as, "tf_execution", c->tf_execution && !o->generate ? "option" : "default",
                      "%s",
                      o->tf_graph ? "graph: the step under tf.function as Keras' model.fit/predict "
                                 "run it (run_eagerly=False, jit_compile off: Keras 3's "
                                 "jit_compile='auto' XLA not modelled); derived from TF's "
                                 "sources, not validated against measurements "
                                 "(--tf-execution eager: op by op)"
                      : o->generate ? "eager: a generation loop is not one tf.function graph (not "
                                   "modelled)"
                                 : "eager: op by op under a GradientTape");
        }
        if (c->framework == DNNMEM_FW_JAX)
            dm_assume(as, "jax_execution", c->jax_execution && !o->generate ? "option" : "default",
                      "%s",
                      o->jax_jit ? "jit: the whole step is one jax.jit call compiled by XLA: fusion, "
                                "operand buffer reuse and one temp buffer per call sized by the "
                                "heap simulator at compile time (--jax-execution eager: op by op)"
                      : o->generate ? "op by op: a generation loop is not one jitted call (not "
                                   "modelled); PyTorch eager's schedule stands in"
                                 : "op by op (not jitted): PyTorch eager's schedule through XLA's "
                                   "allocator");
    } else {
        dm_assume(as, KEY(TORCH), SOURCE(TORCH), "pytorch %d.%d (eager)",
                  run->torch_version / 100, run->torch_version % 100);
    }
}

/* The device and, for HuggingFace models, transformers and the attention. */
static void attention_assumptions(struct dm_est *e)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    const struct dm_graph *g = e->g;
    struct dm_run *run = &e->run;
    struct dm_assumptions *as = &e->as;
    dm_assume(as, "device", c->device == DNNMEM_DEVICE_CUDA ? "default" : "option", "%s",
              run->cuda ? "cuda" : "cpu");
    /* F.scaled_dot_product_attention's kernel (sdp_utils.cpp): cuDNN first
     * for fp16/bf16 on sm90/sm100 once the bundled cuDNN passes 9.15
     * (check_prefer_cudnn_attention; PyTorch 2.11, measured choice in
     * tools/gpu/results/sdpa-choice.txt), else flash from sm80, else the
     * memory-efficient kernel; grouped heads (enable_gqa) exclude the latter */
    int cc80 = (int)VALUE(CC);
    bool fused16 = (c->precision != DNNMEM_PRECISION_FP32 || g->quant_method) && cc80 >= 80;
    static const char *const forced_text[] = {
        "",
        "FlashAttention-2, forced (sdpa_kernel(SDPBackend.FLASH_ATTENTION))",
        "the memory-efficient kernel, forced (sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION))",
        "cuDNN attention, forced (sdpa_kernel(SDPBackend.CUDNN_ATTENTION); its buffers taken "
        "as FlashAttention-2's)",
        "the math kernel, forced (sdpa_kernel(SDPBackend.MATH)): "
        "_scaled_dot_product_attention_math's float32 q and k scaled by sqrt(scale), scores, "
        "softmax, dropout, times v, materialised"};
    bool cpu = c->device == DNNMEM_DEVICE_CPU;
    const char *sdpa_text = dm_arena_printf(
        as->arena, "sdpa: F.scaled_dot_product_attention: %s%s",
        c->sdpa_backend ? forced_text[c->sdpa_backend]
        : cpu ? "the CPU flash kernel (_scaled_dot_product_flash_attention_for_cpu: no "
                "[B, H, S, S] scores; the math kernel, scores materialised, under dropout in "
                "training, a value head dim other than q's, or Falcon's broadcast multi-query "
                "heads)"
        : !fused16 ? "the memory-efficient kernel (float32 or before sm80)"
        : o->torch >= 211 && (cc80 == 90 || cc80 == 100)
            ? "cuDNN attention for fp16/bf16 (PyTorch 2.11+ on sm90/sm100; its buffers taken "
              "as FlashAttention-2's)"
            : "FlashAttention-2 for fp16/bf16 from sm80",
        o->gqa && cpu ? "; grouped keys and values passed with enable_gqa (transformers 4.54+), "
                        "which the CPU flash kernel takes"
        : o->gqa ? "; grouped keys and values passed with enable_gqa (transformers 4.54+), which "
              "only flash/cuDNN take: float32 or pre-sm80 runs the math kernel, scores "
              "materialised"
            : "; grouped keys and values repeated (repeat_kv)");
    if (o->hf && g->type_from)
        dm_assume(as, "model_type", "default", "%s", g->type_from);
    if (o->hf)
        dm_assume(as, KEY(TRANSFORMERS), SOURCE(TRANSFORMERS),
                  "%d.%d (its modelling code, as the HuggingFace front end builds it%s)%s",
                  o->transformers / 100, o->transformers % 100,
                  o->d.set[DM_D_TRANSFORMERS] ? "" : "; the newest release modelled",
                  o->generate && o->transformers > DM_TRANSFORMERS_OLDEST
                      ? "; generation follows 4.51's loop, with GPT-2's DynamicCache from 4.52 "
                        "(PR #35761), the cache layers' copies of k and v from 4.56, and "
                        "GPT-2's last-position logits from 5.0"
                      : o->transformers >= 456 ? "; from 4.56 the cache layers keep copies of k and v"
                      : "");
    /* transformers 5.25 makes `kernels` a dependency and from_pretrained's
     * use_kernels default None, taken as True (modeling_utils.py 5.25.0;
     * 5.24.0: False): kernelize() then swaps in the hub's layers where its
     * mapping has the device (integrations/hub_kernels.py 5.25.0: CUDA and
     * ROCm LigerRMSNorm, CUDA rotary, inference activations; none for the
     * CPU). They are not modelled: said, not guessed */
    if (o->hf && o->transformers >= 525 && !cpu)
        dm_assume(as, "hub_kernels", "default",
                  "none: the model as from_config, or from_pretrained(use_kernels=False) or "
                  "USE_HUB_KERNELS=NO, builds it; transformers %d.%d's from_pretrained "
                  "kernelizes by default (its hub RMSNorm, rotary and activation kernels on "
                  "this device are not modelled)",
                  o->transformers / 100, o->transformers % 100);
    /* before the model's sdpa path (GPT-NeoX 4.42, OPT 4.46): auto is eager */
    bool no_sdpa_yet = g->sdpa_since && o->transformers < g->sdpa_since;
    const char *no_sdpa_text =
        no_sdpa_yet ? dm_arena_printf(as->arena,
                                      "eager: scores, softmax and dropout materialised "
                                      "(transformers %d.%d has no sdpa path for the model; it "
                                      "has one from %d.%d)",
                                      o->transformers / 100, o->transformers % 100,
                                      g->sdpa_since / 100, g->sdpa_since % 100)
                    : NULL;
    if (o->hf)
        dm_assume(as, "attention", c->attn ? "option" : "default", "%s",
                  o->flash ? "flash_attention_2: flash-attn's flash_attn_func on [B, S, H, D] "
                          "views (no copies; GQA keys and values not repeated), keeping q, k, v, "
                          "the output and the fp32 log-sum-exp; backward's fp32 dq accumulator "
                          "and, with GQA, H-headed dk/dv buffers"
                  : o->sdpa ? sdpa_text
                       : g->eager_only ? "eager: scores, softmax and dropout materialised (the "
                                         "model has no sdpa path in transformers)"
                       : no_sdpa_yet ? no_sdpa_text
                       : "eager: scores, softmax and dropout materialised");
}

/* The graph returns its KV cache (HuggingFace's present.N.key outputs). */
static bool returns_cache_out(const struct dm_graph *g)
{
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (strcmp(g->tensors[g->outputs[k]].name, "present.0.key") == 0)
            return true;
    return false;
}

/* Which loop runs the steps: whether the caller's variable keeps the previous
 * step's outputs through the next forward. The default is the HF Trainer's
 * (training_step -> compute_loss: the outputs are compute_loss's locals, gone
 * when it returns the loss) and measure.py's `del out`; a hand-written
 * `outputs = model(**inputs)` loop rebinds the name only after the next forward
 * returns (the benchmark scripts of transformers' SDPA tables do). */
static void loop_assumption(struct dm_est *e)
{
    const struct dnnmem_config *c = &e->o->cfg;
    if (e->o->other_fw) /* a PyTorch loop's Python variable (check.c refuses the option) */
        return;
    bool cache = returns_cache_out(e->g);
    if (c->keep_outputs)
        dm_assume(&e->as, "loop", "option",
                  "`outputs = model(**inputs)` in a loop: the previous step's outputs (%s) live "
                  "until the next forward returns (--keep-outputs)",
                  cache ? "logits and the returned cache" : "the model's outputs");
    else
        dm_assume(&e->as, "loop", "default",
                  "each step's outputs let go before the next forward, as the HF Trainer's "
                  "training_step and `del outputs` do; --keep-outputs for `outputs = "
                  "model(**inputs)` loops, which keep them through the next forward");
}

/* What the job does: a training step, a generation, an inference. */
static void mode_assumptions(struct dm_est *e)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    const struct dm_graph *g = e->g;
    struct dm_run *run = &e->run;
    struct dm_assumptions *as = &e->as;
    if (run->train) {
        dm_assume(as, "mode", "option", "train: zero_grad, forward, loss, backward, step");
        dm_assume(as, KEY(OPTIMIZER), SOURCE(OPTIMIZER), "%s%s", optimizer_name(c->optimizer),
                  o->d.set[DM_D_OPTIMIZER] || !o->hf ? ""
                  : c->optimizer == DNNMEM_OPT_ADAMW_FUSED
                      ? ": the Trainer's default (optim \"adamw_torch_fused\" on PyTorch 2.8+ "
                        "from transformers 4.54)"
                      : ": the Trainer's default (optim \"adamw_torch\"; \"adamw_torch_fused\" "
                        "from transformers 4.54 on PyTorch 2.8+)");
        dm_assume(as, "loss",
                  (c->loss == DNNMEM_LOSS_CE || (g->loss_mse && c->loss == DNNMEM_LOSS_MSE)) &&
                          !c->loss_all_outputs
                      ? "default"
                      : "option",
                  "%s%s",
                  g->loss_mse && c->loss == DNNMEM_LOSS_MSE && g->head
                      ? dm_arena_printf(as->arena, "MSELoss of the pooled logits (%s with "
                                                   "num_labels 1: regression)", g->head)
                  :
                  c->loss == DNNMEM_LOSS_CE && g->loss_upcast && g->head
                      ? dm_arena_printf(as->arena, "cross-entropy of logits.float() against labels "
                                                   "(%s's loss)", g->head)
                  : c->loss == DNNMEM_LOSS_CE && g->loss_upcast
                      ? "cross-entropy of logits.float() against token ids (transformers' ForCausalLMLoss)"
                  : c->loss == DNNMEM_LOSS_CE && !c->loss_all_outputs && g->loss_terms > 1 && g->head
                      ? dm_arena_printf(as->arena, "(start_loss + end_loss) / 2: cross-entropy of "
                                                   "start_logits and end_logits against positions "
                                                   "(%s's loss)", g->head)
                  : c->loss == DNNMEM_LOSS_CE && g->head
                      ? dm_arena_printf(as->arena, "cross-entropy of the logits against labels "
                                                   "(%s's CrossEntropyLoss)", g->head)
                      : loss_name(c->loss),
                  c->loss_all_outputs && c->loss != DNNMEM_LOSS_SUM ? ", every output" : "");
        if (g->n_router > 0)
            dm_assume(as, "aux_loss", "default",
                      "output_router_logits: + %g x load_balancing_loss_func over the %d sparse "
                      "layers' router logits, after the cross-entropy (its int64 one-hot expert "
                      "mask [tokens x layers, top-k, experts] and float copy included)",
                      g->router_aux_coef, (int)g->n_router);
        dm_assume(as, KEY(ITERATIONS), SOURCE(ITERATIONS), "%d", run->iterations);
        loop_assumption(e);
        if (run->grad_accum > 1)
            dm_assume(as, "grad_accum", "option", "%d micro-batches per step", run->grad_accum);
        dm_assume(as, "zero_grad", "default", "%s",
                  o->mx_planned ? "none: the executor's gradients are bound once and overwritten "
                               "(grad_req write)"
                  : run->torch_version >= 200 ? "set_to_none=True (frees grads)"
                                             : "set_to_none=False (keeps grads)");
    } else if (o->generate) {
        static const char *const kv[] = {"the model's dtype", "fp32", "fp16", "bf16",
                                         "fp8 (1 byte per element; scales not counted)"};
        const char *how = run->gen_beams > 1 ? "beam-search" : run->gen_sample ? "sampling" : "greedy";
        if (g->whisper) /* src/schedule/generate.c, whisper_decode */
            dm_assume(as, "mode", "option",
                      "generate: %s WhisperForConditionalGeneration.generate() of one 30 s "
                      "segment (transformers 4.56-5.25, short-form): input_features [batch, "
                      "num_mel_bins, 2 * max_source_positions] copied into the segment, the "
                      "encoder once (its length fixed by the config; its output kept) with the "
                      "first decoder forward on [batch, 1] decoder_start_token_id (no forced "
                      "language or task tokens), then %lld decoder forwards of one token each; an "
                      "EncoderDecoderCache: self-attention keys and values concatenated per "
                      "token, cross-attention keys and values made once and kept",
                      how, (long long)c->new_tokens - 1);
        else if (g->encoder_decoder) /* T5: src/schedule/generate.c, seq2seq_decode */
            dm_assume(as, "mode", "option",
                      "generate: %s model.generate() of an encoder-decoder (transformers 4.51): "
                      "the encoder once over the prompt (seq; its output kept) with the first "
                      "decoder forward (decoder_start_token_id), then %lld decoder forwards of one "
                      "token each; an EncoderDecoderCache: self-attention keys and values "
                      "concatenated per token, cross-attention keys and values [batch, heads, seq, "
                      "d_kv] made at the first forward and kept; every decoder position's logits",
                      how, (long long)c->new_tokens - 1);
        else if (g->cache_len) /* Gemma 2/3: src/schedule/generate.c, hybrid_decode */
            dm_assume(as, "mode", "option",
                      "generate: %s model.generate() with a HybridCache (transformers 4.51, "
                      "cache_implementation \"hybrid\"): static caches of %lld positions, %lld in "
                      "sliding layers, made before the prefill (logits_to_keep=1); %lld decode steps "
                      "write in place",
                      how, (long long)g->cache_len,
                      (long long)(g->cache_window < g->cache_len ? g->cache_window : g->cache_len),
                      (long long)c->new_tokens - 1);
        else
            dm_assume(as, "mode", "option",
                      "generate: %s model.generate() with %s (transformers 4.51): "
                      "a prefill of the prompt (seq) keeping %s, then %lld decode steps, each "
                      "concatenating one token onto every layer's keys and values%s",
                      how, g->legacy_cache ? "the legacy tuple cache, no Cache class (GPT-2, BioGPT)"
                                      : "a DynamicCache (a sliding window only masks)",
                      g->logits_to_keep ? "the last position's logits (logits_to_keep=1)"
                                        : "every position's logits",
                      (long long)c->new_tokens - 1, /* the prefill makes the first token */
                      g->legacy_cache ? " into new tensors, the previous step's tuple referenced "
                                        "until the next step's inputs replace it (two caches live "
                                        "at a forward's end)"
                                      : "");
        dm_assume(as, "kv_dtype", c->kv_dtype ? "option" : "default", "%s", kv[c->kv_dtype]);
        if (run->gen_beams > 1) { /* src/schedule/generate.c, beam search */
            dm_assume(as, "num_beams", "option",
                      "%lld: _beam_search (transformers 4.51.3, vectorized): running_sequences and "
                      "sequences [batch, num_beams, prompt + new_tokens] int64, beam indices [batch, "
                      "num_beams, new_tokens] int32; per step the float32 logits [batch x num_beams, "
                      "vocab], log_softmax, + beam scores, the gathers of the top 2 x num_beams; "
                      "after every forward the cache reordered by index_select, %s",
                      (long long)run->gen_beams,
                      g->legacy_cache ? "the legacy tuple rebuilt whole while the old one (and the "
                                        "previous step's inputs') are still referenced"
                                      : "per layer keys then values, each replacing its old tensor");
            dm_assume(as, "eos_token", "default",
                      "none: every beam runs all %lld forwards, 2 x num_beams candidates kept per "
                      "step (max(2, 1 + eos tokens) x num_beams)",
                      (long long)c->new_tokens);
        }
        if (run->gen_sample) { /* src/schedule/generate.c, sample_chain */
            dm_assume(as, "do_sample", "option",
                      "_sample with the logits warpers (temperature, top-k, top-p in that order), "
                      "then softmax and multinomial: the warped scores and probabilities [batch, "
                      "vocab] float32 held to the next step");
            if (run->gen_temperature)
                dm_assume(as, "temperature", "option",
                          "%g (TemperatureLogitsWarper: scores / temperature, a float32 [batch, "
                          "vocab])",
                          c->temperature);
            else
                dm_assume(as, KEY(TEMPERATURE), SOURCE(TEMPERATURE),
                          "1.0: no TemperatureLogitsWarper");
            if (run->gen_top_k > 0)
                dm_assume(as, KEY(TOP_K), SOURCE(TOP_K),
                          "%lld%s (TopKLogitsWarper: torch.topk, a bool [batch, vocab] mask, "
                          "masked_fill's float32 [batch, vocab])",
                          (long long)run->gen_top_k, o->d.set[DM_D_TOP_K] ? "" : ", GenerationConfig's default");
            else
                dm_assume(as, "top_k", "option", "0: no TopKLogitsWarper");
            if (run->gen_top_p)
                dm_assume(as, "top_p", "option",
                          "%g (TopPLogitsWarper: sort's float32 values and int64 indices [batch, "
                          "vocab], softmax, cumsum, two bool masks, masked_fill)",
                          c->top_p);
            else
                dm_assume(as, KEY(TOP_P), SOURCE(TOP_P),
                          "1.0: no TopPLogitsWarper");
        }
    } else {
        dm_assume(as, "mode", "default", "infer (torch.no_grad, model.eval)");
        loop_assumption(e);
    }
}

/* NCCL's device memory per communicator (--nccl-memory): NCCL_BUFFSIZE's
 * default 4 MiB (NCCL's environment-variable docs) for each of the ring's
 * two peers (send, receive) on each of 2 channels; NCCL picks the channel
 * count from the topology (NVLink systems run more), so this is a floor,
 * printed with the result. */
#define DM_NCCL_COMM_DEFAULT (4ull * 1048576 * 2 * 2)
/* DDP's bucket_cap_mb 25 and its first bucket, dist._DEFAULT_FIRST_BUCKET_BYTES
 * (torch/nn/parallel/distributed.py; reducer.hpp kDefaultFirstBucketBytes);
 * DeepSpeed's reduce_bucket_size 5e8, stage3_prefetch_bucket_size 5e7 and
 * stage3_param_persistence_threshold 1e5 (deepspeed/runtime/zero/config.py,
 * 0.19.6); stage3_max_reuse_distance 1e9 (the same file, 0.19.8:
 * max_reuse_distance: int = Field(pp_int(1e9)), no option yet). */
#define DM_DDP_BUCKET_DEFAULT (25ll * 1048576)
#define DM_DDP_FIRST_BUCKET (1ll * 1048576)
#define DM_ZERO_BUCKET_DEFAULT 500000000ll
#define DM_ZERO_PREFETCH_DEFAULT 50000000ll
#define DM_ZERO_PERSIST_DEFAULT 100000ll
#define DM_ZERO_REUSE_DEFAULT 1000000000ll

/* run->par from the options (check.c's rows have judged them), and its
 * assumption lines. */
static void par_run(struct dm_est *e)
{
    const struct dnnmem_parallel *c = &e->o->cfg.par;
    struct dm_par *p = &e->run.par;
    struct dm_assumptions *as = &e->as;
    int tp = c->tp > 1 ? c->tp : 1, pp = c->pp > 1 ? c->pp : 1;
    int world = c->gpus > 0 ? c->gpus : c->nodes > 0 ? c->nodes * (c->gpus_per_node > 0 ? c->gpus_per_node : 1) : tp * pp;
    if (!e->run.train || (world <= 1 && c->zero == 0 && c->fsdp == DNNMEM_FSDP_NONE))
        return;
    int per_node = c->gpus_per_node > 0 ? c->gpus_per_node : world;
    /* world = DP x TP, the tensor-parallel ranks adjacent (Megatron's
     * initialize_model_parallel order; the ranks of a TP group hold the same
     * bytes, so the DP rank is the global one over TP) */
    p->tp = tp;
    p->sp = c->sp && tp > 1;
    p->world = world / tp / pp;
    int grank = c->rank > 0 ? c->rank : 0;
    p->rank = grank / tp % p->world;
    p->pp = pp;
    p->stage = grank / tp / p->world; /* Megatron's order: TP, then DP, then PP */
    p->micro = pp > 1 ? (c->micro_batches > 0 ? c->micro_batches : pp) : 1;
    p->gpipe = c->pp_schedule == DNNMEM_PP_GPIPE;
    p->split = c->pp_split;
    if (pp > 1) {
        e->run.grad_accum = p->micro; /* the micro-batches accumulate into .grad */
        dm_assume(as, "pipeline", c->micro_batches > 0 ? "option" : "default",
                  "%d stages, this rank's stage %d; %d micro-batches of --batch-size / %d, %s "
                  "(torch.distributed.pipelining): stage p holds the saved tensors of %s "
                  "micro-batches in flight; p2p receive buffers per micro-batch",
                  pp, p->stage, p->micro, p->micro, p->gpipe ? "GPipe" : "1F1B",
                  p->gpipe ? "all M" : "min(stages - p, M)");
    }
    p->kind = c->zero > 0 ? DM_PAR_ZERO : c->fsdp != DNNMEM_FSDP_NONE ? DM_PAR_FSDP
              : p->world > 1 ? DM_PAR_DDP : DM_PAR_NONE;
    if (p->kind == DM_PAR_NONE) { /* tensor parallel alone */
        dm_assume(as, "parallel", "option", "%d ranks (%d per node), this rank %d: %s, no data "
                  "parallel", world, per_node, grank,
                  tp > 1 && pp > 1 ? "tensor parallel x pipeline parallel"
                  : tp > 1 && p->sp ? "tensor parallel over all of them with sequence parallel "
                                      "(DTensor ColwiseParallel / RowwiseParallel, "
                                      "SequenceParallel on the norms)"
                  : tp > 1 ? "tensor parallel over all of them (DTensor ColwiseParallel / "
                             "RowwiseParallel)" : "pipeline parallel over all of them");
        return;
    }
    p->zero = c->zero;
    p->offload_optimizer = c->offload != DNNMEM_OFFLOAD_NONE;
    p->offload_params = c->offload == DNNMEM_OFFLOAD_PARAMS;
    p->shard = c->fsdp == DNNMEM_FSDP_NO_SHARD ? 1 : c->fsdp == DNNMEM_FSDP_HYBRID ? per_node : world;
    p->shard_rank = p->rank % p->shard;
    p->reshard = c->fsdp == DNNMEM_FSDP_FULL || c->fsdp == DNNMEM_FSDP_HYBRID;
    p->ddp_bucket_bytes = (uint64_t)(c->ddp_bucket_bytes > 0 ? c->ddp_bucket_bytes : DM_DDP_BUCKET_DEFAULT);
    p->ddp_first_bucket_bytes = DM_DDP_FIRST_BUCKET; /* whatever bucket_cap_mb is */
    p->ddp_bucket_view = c->ddp_bucket_view;
    p->zero_bucket = c->zero_bucket_elems >= 0 ? c->zero_bucket_elems : DM_ZERO_BUCKET_DEFAULT;
    p->zero_prefetch = c->zero_prefetch_elems >= 0 ? c->zero_prefetch_elems : DM_ZERO_PREFETCH_DEFAULT;
    p->zero_persist = c->zero_persist_elems >= 0 ? c->zero_persist_elems : DM_ZERO_PERSIST_DEFAULT;
    p->zero_reuse = DM_ZERO_REUSE_DEFAULT;
    if (p->kind == DM_PAR_FSDP && c->fsdp_wrap) {
        snprintf(p->wrap_specs[0], sizeof p->wrap_specs[0], "%s", c->fsdp_wrap);
        p->n_wrap = 1;
    } else if (p->kind == DM_PAR_FSDP) {
        struct dm_block_scope bs[1];
        if (dm_repeated_blocks(e->g, bs, 1) > 0) {
            p->n_wrap = bs[0].n_specs;
            for (int k = 0; k < bs[0].n_specs; k++)
                memcpy(p->wrap_specs[k], bs[0].spec[k], sizeof p->wrap_specs[k]);
        }
    }
    char wraps[400] = "";
    for (int k = 0; k < p->n_wrap; k++)
        snprintf(wraps + strlen(wraps), sizeof wraps - strlen(wraps), "%s'%s'", k ? ", " : "",
                 p->wrap_specs[k]);
    dm_assume(as, "parallel", "option", "%d ranks (%d per node), this rank %d: %s%s", world, per_node,
              p->rank,
              p->kind == DM_PAR_DDP
                  ? dm_arena_printf(as->arena, "DistributedDataParallel, buckets of %s MiB (the "
                                    "first %s MiB)%s", dm_arena_printf(as->arena, "%.6g",
                                    (double)p->ddp_bucket_bytes / 1048576.0),
                                    dm_arena_printf(as->arena, "%.6g", (double)p->ddp_first_bucket_bytes / 1048576.0),
                                    p->ddp_bucket_view ? ", gradient_as_bucket_view" : "")
              : p->kind == DM_PAR_ZERO
                  ? dm_arena_printf(as->arena, "DeepSpeed ZeRO-%d (0.19.6): reduce_bucket_size %lld%s%s%s",
                                    p->zero, (long long)p->zero_bucket,
                                    e->run.cuda && !p->offload_optimizer &&
                                            (e->run.optimizer == DNNMEM_OPT_ADAM ||
                                             e->run.optimizer == DNNMEM_OPT_ADAMW ||
                                             e->run.optimizer == DNNMEM_OPT_ADAMW_HF ||
                                             e->run.optimizer == DNNMEM_OPT_ADAMW_FUSED)
                                        ? ", Adam as DeepSpeed's FusedAdam (no temporaries)"
                                        : p->offload_optimizer ? ", the step on the host (DeepSpeedCPUAdam)" : "",
                                    p->zero == 3 ? dm_arena_printf(as->arena,
                                        ", prefetch %lld, persistence threshold %lld, max reuse distance %lld",
                                        (long long)p->zero_prefetch, (long long)p->zero_persist,
                                        (long long)p->zero_reuse) : "",
                                    p->offload_params ? ", optimizer and params offloaded"
                                    : p->offload_optimizer ? ", optimizer offloaded" : "")
                  : dm_arena_printf(as->arena, "FSDP2 fully_shard (%s) over %d ranks per shard group, "
                                    "units %s and the root",
                                    c->fsdp == DNNMEM_FSDP_FULL ? "full"
                                    : c->fsdp == DNNMEM_FSDP_HYBRID ? "hybrid"
                                    : c->fsdp == DNNMEM_FSDP_NO_SHARD ? "no-shard" : "shard-grad-op",
                                    p->shard, p->n_wrap ? wraps : "(none: no repeated block)"),
              tp > 1 ? dm_arena_printf(as->arena, "; over tensor-parallel groups of %d%s", tp,
                                       p->sp ? " with sequence parallel" : "")
                     : "");
}

/* TensorFlow on the CPU with a Keras 3 model whose weights say how they are
 * made: the setup replays their making (src/schedule/tfbuild.c; measured on
 * the CPU's BFC only) */
static bool tf_build(const struct dm_est *e)
{
    const struct dnnmem_config *c = &e->o->cfg;
    if (c->framework != DNNMEM_FW_TENSORFLOW || c->device == DNNMEM_DEVICE_CUDA)
        return false;
    for (int32_t i = 0; i < e->g->n_tensors; i++)
        if (e->g->tensors[i].init != DM_INIT_NONE)
            return true;
    return false;
}

void dm_est_run(struct dm_est *e)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    e->run = (struct dm_run){
        .train = c->mode == DNNMEM_MODE_TRAIN,
        .cuda = c->device == DNNMEM_DEVICE_CUDA,
        /* XLA shares instead; TF's graph executor forwards buffers (train.c) */
        /* TensorFlow eager: ExecuteNodeArgs::Init (core/common_runtime/eager/
         * execute_node.cc) protects every input whose handle is held by more
         * than the op, which a Keras layer's argument always is, so no kernel
         * forwards its input in place */
        .inplace = c->inplace == DNNMEM_INPLACE_AUTO && !o->jax_jit &&
                   c->framework != DNNMEM_FW_TENSORFLOW,
        .dataflow = o->jax_jit || o->tf_graph,
        .xla = o->jax_jit,
        .torch_version = o->torch,
        .iterations = (int)VALUE(ITERATIONS),
        .grad_accum = (int)VALUE(GRAD_ACCUM),
        .keep_outputs = c->keep_outputs,
        .optimizer = c->optimizer,
        .loss = c->loss,
        .loss_all_outputs = c->loss_all_outputs,
        .tf_ops = c->framework == DNNMEM_FW_TENSORFLOW,
        .tf_graph = o->tf_graph,
        .tf_build = tf_build(e),
        .mx_ops = c->framework == DNNMEM_FW_MXNET,
        .mx_version = (int)VALUE(MX_VERSION),
        .mx_grad_sum_cap = (int)VALUE(MX_GRAD_SUM_CAP),
        /* MXNET_BACKWARD_DO_MIRROR's default: 0 (graph_executor.cc, need_mirror) */
        .mx_mirror = c->framework == DNNMEM_FW_MXNET && c->mxnet_mirror,
        .gen_tokens = o->generate ? c->new_tokens : 0,
        .kv_dtype = c->kv_dtype,
        .gen_beams = o->generate && c->num_beams > 1 ? c->num_beams : 1,
        .gen_sample = o->generate && c->do_sample,
        .gen_top_k = VALUE(TOP_K),
        .gen_top_p = REAL(TOP_P) < 1,
        .gen_temperature = REAL(TEMPERATURE) != 1,
    };
    framework_assumptions(e);
    if (e->run.tf_build) {
        int32_t other = 0;
        for (int32_t i = 0; i < e->g->n_tensors; i++)
            other += e->g->tensors[i].init == DM_INIT_OTHER;
        dm_assume(&e->as, "tf_build", "default",
                  "the variables are made as Keras 3 on TF makes them, in build order, before "
                  "the batch (src/schedule/tfbuild.c: a uniform initializer's seed ops, "
                  "RandomUniformV2, Mul, AddV2 = the value; Zeros/Ones a Fill; a 200 B handle "
                  "each), so BFC places the weights in the chunks TF gives them; the peak counts "
                  "from after them (get_memory_info after reset_memory_stats)%s",
                  other ? dm_arena_printf(e->as.arena, "; %d weights with another initializer "
                                          "(not measured) are made as a Fill's value", other)
                        : "");
    }
    attention_assumptions(e);
    mode_assumptions(e);
    par_run(e);
}

/* Whether the graph has a convolution (oneDNN's buffers depend on the ISA). */
static bool has_conv(const struct dm_graph *g)
{
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == DM_OP_Conv)
            return true;
    return false;
}

/* The activations PyTorch can run in place (dm_op_inplace_activation), by
 * who decides: the model (dm_node.inplace_fact, from the ONNX file's module
 * calls, onnx.c; the HF front end's inplace 0 for transformers' nn.ReLU())
 * or --inplace for the rest. */
static void inplace_assumption(struct dm_est *e, const struct dm_graph *g, const char *source,
                               bool auto_)
{
    struct dm_assumptions *as = &e->as;
    int yes = 0, no = 0, open = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        if (!dm_op_inplace_activation(n->op))
            continue;
        if (n->inplace_fact == DM_INPLACE_FACT_YES)
            yes++;
        else if (n->inplace_fact == DM_INPLACE_FACT_NO || dm_attr_int(n, "inplace", 1) == 0)
            no++;
        else
            open++;
    }
    /* an ONNX file's guess (the HF front end builds transformers' modules as they are) */
    e->inplace_open = auto_ && g->format && strcmp(g->format, "onnx") == 0 ? open : 0;
    const char *policy = auto_ ? "auto (ReLU-like ops in place where PyTorch allows, as torchvision)"
                               : "none (every op allocates its output)";
    if (yes + no == 0) {
        dm_assume(as, "inplace", source, "%s", policy);
        return;
    }
    if (open == 0) {
        dm_assume(as, "inplace", "model", "from the model: %d activations in place, %d out of place",
                  yes, no);
        return;
    }
    dm_assume(as, "inplace", source,
              "from the model: %d activations in place, %d out of place; --inplace %s for the "
              "%d it does not decide",
              yes, no, policy, open);
}

/* The job's settings: threads, checkpoints, adapters, quantization, in place. */
static void job_assumptions(struct dm_est *e)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    const struct dm_graph *g = e->g;
    struct dm_run *run = &e->run;
    struct dm_assumptions *as = &e->as;
    run->cpu_threads = c->cpu_threads;
    run->cpu_isa = c->cpu_isa;
    if (!run->cuda)
        dm_assume(as, "cpu_threads", c->cpu_threads ? "option" : "default", "%s",
                  c->cpu_threads == 1 ? "1" : "several");
    if (!run->cuda && c->framework == DNNMEM_FW_PYTORCH && run->torch_version >= 200 &&
        has_conv(g))
        dm_assume(as, "cpu_isa", c->cpu_isa != DNNMEM_CPU_ISA_DEFAULT ? "option" : "default", "%s",
                  c->cpu_isa == DNNMEM_CPU_ISA_AVX2
                      ? "avx2 (oneDNN's convolutions pad channels to blocks of 8)"
                      : "avx512 (oneDNN's convolutions pad channels to blocks of 16)");
    run->cpu_l2 = c->cpu_l2_bytes >= 0 ? c->cpu_l2_bytes : DNNMEM_CPU_L2_DEFAULT;
    if (!run->cuda && c->framework == DNNMEM_FW_PYTORCH && run->torch_version >= 200 &&
        has_conv(g) && c->cpu_isa == DNNMEM_CPU_ISA_AVX2)
        dm_assume(as, "cpu_l2", c->cpu_l2_bytes >= 0 ? "option" : "default",
                  "%lld B (oneDNN's gemm convolution tiles its im2col columns to it)",
                  (long long)run->cpu_l2);
    run->freeze = c->freeze;
    run->n_freeze = c->n_freeze;
    run->checkpoint = c->checkpoint;
    run->n_checkpoint = c->n_checkpoint;
    if (g->n_kbit_ckpt) { /* --kbit-prep's gradient_checkpointing_enable */
        run->checkpoint = g->kbit_ckpt;
        run->n_checkpoint = (size_t)g->n_kbit_ckpt;
    }
    for (size_t k = 0; run->train && k < run->n_checkpoint; k++)
        dm_assume(as, "checkpoint", "option", "%s%s%s", run->checkpoint[k],
                  g->n_kbit_ckpt ? " (--kbit-prep: every layer)" : "",
                  o->hf && k == 0 ? "; use_cache off, as transformers turns it off under gradient "
                                 "checkpointing in training"
                               : "");
    if (c->lora.r) {
        char targets[256] = "";
        const char *const *t = c->lora.n_targets ? c->lora.targets : g->lora_default;
        size_t n = c->lora.n_targets ? c->lora.n_targets : g->n_lora_default, len = 0;
        for (size_t k = 0; k < n && len < sizeof targets; k++)
            len += (size_t)snprintf(targets + len, sizeof targets - len, "%s%s", k ? "," : "",
                                    t[k]);
        if (!c->lora.n_targets && len < sizeof targets)
            snprintf(targets + len, sizeof targets - len, "%s(PEFT's default for the model type)",
                     n ? " " : "");
        dm_assume(as, "lora", "option",
                  "rank %lld, alpha %g, dropout %g, targets %s; every other parameter frozen; "
                  "float32 adapters (PEFT >= 0.12)",
                  (long long)c->lora.r, REAL(LORA_ALPHA), c->lora.dropout, targets);
    }
    if (g->quant_method) {
        dm_assume(as, "quant", c->quant ? "option" : "model", "%s", g->quant_layout);
        dm_assume(as, "quant_kernels", "default", "%s", g->quant_runtime);
    }
    if (g->kbit_prep)
        dm_assume(as, "kbit_prep", "option", "%s", g->kbit_prep);
    if (g->mamba_kernels)
        dm_assume(as, "mamba_kernels", "model", "%s", g->mamba_kernels);
    if (g->moe_routing)
        dm_assume(as, "moe_routing", "default", "%s", g->moe_routing);
    if (o->jax_jit)
        dm_assume(as, "inplace", "default",
                  "n/a under jit: XLA's heap simulation lets a value take a dying operand's "
                  "buffer (may_reuse_operand_buffers)");
    else if (run->tf_graph)
        dm_assume(as, "inplace", "default",
                  "n/a under tf.function: the executor forwards a dying input's buffer to an "
                  "elementwise op's output (tf_ops)");
    else if (c->framework == DNNMEM_FW_TENSORFLOW && c->inplace == DNNMEM_INPLACE_AUTO)
        dm_assume(as, "inplace", "default",
                  "none in eager TensorFlow: an input still held by the caller (a Keras layer's "
                  "argument) is protected from forwarding (ExecuteNodeArgs)");
    else
        inplace_assumption(e, g, c->inplace == DNNMEM_INPLACE_AUTO ? "default" : "option",
                           run->inplace);
}

/* The allocator, the CUDA toolkit, the context and the workspaces. */
static void cuda_defaults(struct dm_est *e)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    const struct dm_graph *g = e->g;
    struct dm_run *run = &e->run;
    struct dm_assumptions *as = &e->as;
    /* The CPU allocator hands out exactly what is asked (the profiler counts
     * nbytes); the CUDA caching allocator rounds. */
    uint64_t round = (uint64_t)VALUE(ALLOC_ROUND);
    e->round = round;
    if (o->other_fw)
        ; /* fw_setup states it */
    else if (run->cuda || o->d.set[DM_D_ALLOC_ROUND])
        dm_assume(as, KEY(ALLOC_ROUND), SOURCE(ALLOC_ROUND), "%s",
                  o->d.set[DM_D_ALLOC_ROUND]
                      ? dm_arena_printf(as->arena, "requests rounded up to %llu B, no caching",
                                        (unsigned long long)round)
                      : "PyTorch CUDA caching allocator (512 B blocks; 2 MiB, 20 MiB and "
                        "2 MiB-rounded segments; best fit; split and merge rules)");
    else
        dm_assume(as, "allocator", "default", "host: bytes as requested");
    int cuda_version = (int)VALUE(CUDA), cc = (int)VALUE(CC);
    run->compute_capability = cc;
    bool fw_lazy = cuda_version >= 122; /* the CUDA_CONTEXT row's lazy loading */
    uint64_t context = (uint64_t)VALUE(CUDA_CONTEXT);
    e->context = context;
    char cb[32];
    if (run->cuda) {
        dm_assume(as, KEY(CUDA), o->d.set[DM_D_CUDA] || o->d.set[DM_D_CC] ? "option" : "default",
                  "%d.%d, compute capability %d.%d%s",
                  cuda_version / 10, cuda_version % 10, cc / 10, cc % 10,
                  !c->compute_capability && g->quant_min_cc > DM_CC_DEFAULT
                      ? dm_arena_printf(as->arena, " (the least %s kernels run on)", g->quant_method)
                      : "");
        if (o->other_fw)
            dm_assume(as, KEY(CUDA_CONTEXT), SOURCE(CUDA_CONTEXT), "%s (%s)",
                      dm_format_bytes(context, cb),
                      o->d.set[DM_D_CUDA_CONTEXT]
                          ? "--cuda-context"
                          : fw_lazy ? "lazy loading, the CUDA 12.2+ default; PyTorch 2.x's figure, "
                                      "unsloth-zoo PR #1053: not measured for this framework"
                                    : "eager module loading before CUDA 12.2 without "
                                      "CUDA_MODULE_LOADING=LAZY; V100 + CUDA 11.2, HF docs: not "
                                      "measured for this framework");
        else
            dm_assume(as, KEY(CUDA_CONTEXT), SOURCE(CUDA_CONTEXT), "%s (%s)",
                      dm_format_bytes(context, cb),
                      o->d.set[DM_D_CUDA_CONTEXT] ? "--cuda-context"
                      : cuda_version < 117        ? "eager module loading, V100 + CUDA 11.2, HF docs"
                      : run->torch_version < 200   ? "PyTorch 1.13, lazy loading, PR #86509"
                      : cc == 90 ? "PyTorch 2.x on sm90: 618.8 MiB at start + 132 MiB of kernels "
                                   "loaded by the first step, measured on an H200 (PyTorch 2.11, "
                                   "CUDA 13.0)"
                                 : "PyTorch 2.x: 426 MiB at start (unsloth-zoo PR #1053) + 132 MiB "
                                   "of kernels loaded by the first step (measured on an H200)");
        if (run->par.kind != DM_PAR_NONE || run->par.tp > 1 || run->par.pp > 1) { /* outside the caching allocator */
            int comms = (run->par.kind == DM_PAR_NONE ? 0 : c->par.fsdp == DNNMEM_FSDP_HYBRID ? 2 : 1) +
                        (run->par.tp > 1 ? 1 : 0) + /* the tensor-parallel group's own */
                        (run->par.pp > 1 ? 1 : 0);  /* the pipeline's p2p one */
            uint64_t nccl = c->par.nccl_bytes >= 0 ? (uint64_t)c->par.nccl_bytes : DM_NCCL_COMM_DEFAULT;
            e->context += nccl * (uint64_t)comms;
            dm_assume(as, "nccl", c->par.nccl_bytes >= 0 ? "option" : "default",
                      "%s per communicator x %d, added to the context (%s)", dm_format_bytes(nccl, cb),
                      comms, c->par.nccl_bytes >= 0 ? "--nccl-memory"
                      : "NCCL_BUFFSIZE 4 MiB x 2 ring peers x 2 channels; more channels on NVLink");
        }
        run->cublas_workspace = run->xla ? 0 : (uint64_t)VALUE(CUBLAS_WORKSPACE);
        if (run->xla)
            run->xla_gemm_workspace = (uint64_t)VALUE(XLA_GEMM_WORKSPACE);
        dm_assume(as, KEY(CUBLAS_WORKSPACE), SOURCE(CUBLAS_WORKSPACE), "%s",
                  run->xla ? dm_arena_printf(as->arena,
                                            "%s per cuBLAS call inside XLA's temp buffer, live "
                                            "during the call (%s; matmul_utils.h, "
                                            "gemm_rewriter.cc); every MatMul/Gemm taken to be a "
                                            "cuBLAS call (autotuning may pick a Triton kernel, "
                                            "which has none)",
                                            dm_format_bytes(run->xla_gemm_workspace, cb),
                                            o->d.set[DM_D_XLA_GEMM_WORKSPACE] ? "--cublas-workspace"
                                            : cc >= 90 ? "GemmConfig::kHopperWorkspace, sm90+"
                                                       : "GemmConfig::kDefaultWorkspace, before sm90")
                  : o->other_fw && !o->d.set[DM_D_CUBLAS_WORKSPACE]
                      ? "0 through the allocator (cuBLAS's own workspace is outside it; only "
                        "PyTorch routes it through its allocator)"
                      : dm_arena_printf(as->arena, "%s per handle, kept from the first matmul "
                                                "(CublasHandlePool.cpp)",
                                        dm_format_bytes(run->cublas_workspace, cb)));
        run->conv_workspace = (uint64_t)VALUE(CONV_WORKSPACE);
        /* the caps: TF_CUDNN_WORKSPACE_LIMIT_IN_MB default 4 GiB (conv_ops*.cc),
         * scratch allocated non-retryable; MXNet's Convolution workspace
         * parameter 1024 MB (convolution-inl.h) */
        dm_assume(as, KEY(CONV_WORKSPACE), SOURCE(CONV_WORKSPACE), "%s%s",
                  o->d.set[DM_D_CONV_WORKSPACE]
                      ? dm_arena_printf(as->arena, "%s per convolution (--conv-workspace)",
                                        dm_format_bytes(run->conv_workspace, cb))
                      : "0 (cuDNN's heuristic choice is unknown without the GPU; "
                        "--conv-workspace adds one)",
                  c->framework == DNNMEM_FW_TENSORFLOW
                      ? "; TensorFlow caps it at 4 GiB (TF_CUDNN_WORKSPACE_LIMIT_IN_MB) and "
                        "falls back to algorithms needing less when it does not fit"
                  : c->framework == DNNMEM_FW_MXNET
                      ? "; MXNet's Convolution workspace parameter allows up to 1024 MB"
                      : "");
    }
}

enum dnnmem_status dm_est_runtime(struct dm_est *e, struct dnnmem_error *err)
{
    const struct dnnmem_config *c = &e->o->cfg;
    struct dm_assumptions *as = &e->as;
    job_assumptions(e);
    cuda_defaults(e);
    char cb[32];
    if (e->o->other_fw)
        DM_TRY(dm_est_fw_setup(e, err));

    if (c->capacity_bytes > 0)
        dm_assume(as, "capacity", "option", "%s bytes = %s%s%s%s, headroom %g%%",
                  dm_arena_printf(as->arena, "%lld", (long long)c->capacity_bytes),
                  dm_format_bytes((uint64_t)c->capacity_bytes, cb), c->device_label ? " (" : "",
                  c->device_label ? c->device_label : "", c->device_label ? ")" : "",
                  100 * dm_default_real(&e->o->d, HEADROOM));
    return DNNMEM_OK;
}
