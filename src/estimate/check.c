/*
 * check.c: the options of an estimate. What they mean (struct dm_est_opts),
 * then one table of checks: each row names the facts (about the options,
 * the mode, the framework, the model) under which the options are breached
 * and the error the breach gets. Rows run in order; the first breach wins.
 */
#include "estimate.h"

#include <stdio.h>
#include <string.h>

int64_t dm_version_number(const char *v)
{
    int64_t part[3] = {0, 0, 0};
    int k = 0;
    const char *p = v;
    if (!*p)
        return -1;
    while (*p) {
        if (*p < '0' || *p > '9')
            return -1;
        int64_t x = 0;
        while (*p >= '0' && *p <= '9') {
            x = x * 10 + (*p - '0');
            if (x > 9999)
                return -1;
            p++;
        }
        if (k > 2 || (k > 0 && x > 99))
            return -1;
        part[k++] = x;
        if (*p == '.' && p[1])
            p++;
        else if (*p)
            return -1;
    }
    return part[0] * 10000 + part[1] * 100 + part[2];
}

enum dnnmem_status dm_est_options(const struct dm_graph *g, bool hf, const struct dnnmem_config *cfg,
                                  struct dm_est_opts *o, struct dnnmem_error *err)
{
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    struct dnnmem_config *c = &o->cfg;
    o->hf = hf;
    o->generate = c->mode == DNNMEM_MODE_GENERATE;
    o->other_fw = c->framework != DNNMEM_FW_PYTORCH;
    /* MXNet's symbolic executor plans a forward (and backward) graph, JAX
     * jits the step, TensorFlow runs it under tf.function (as Keras' fit and
     * predict); a generation loop is none of them: the op-by-op stand-in */
    o->mx_planned = c->framework == DNNMEM_FW_MXNET &&
                    c->mxnet_executor == DNNMEM_MXNET_EXEC_PLANNED && !o->generate;
    o->jax_jit = c->framework == DNNMEM_FW_JAX && c->jax_execution == DNNMEM_JAX_JIT && !o->generate;
    o->tf_graph = c->framework == DNNMEM_FW_TENSORFLOW && c->tf_execution == DNNMEM_TF_GRAPH &&
                  !o->generate;
    o->fw_version = c->framework_version ? dm_version_number(c->framework_version) : -1;
    dm_est_defaults(c, g, &o->d);
    o->torch = (int)o->d.value[DM_D_TORCH];
    o->transformers = (int)o->d.value[DM_D_TRANSFORMERS];
    /* transformers 5 loads a model in its config's dtype unless told
     * otherwise (dtype="auto" by default, PR #34919; measured: Qwen3-0.6B's
     * bfloat16 config built by from_config in 5.17 runs in bf16) */
    const char *sd = g->stored_dtype;
    o->v5_dtype = hf && o->transformers >= 500 && c->precision == DNNMEM_PRECISION_FP32 &&
                  !c->precision_set && !g->quant_method && sd &&
                  (strcmp(sd, "bfloat16") == 0 || strcmp(sd, "float16") == 0);
    if (o->v5_dtype)
        c->precision = sd[1] == 'f' ? DNNMEM_PRECISION_BF16 : DNNMEM_PRECISION_FP16;
    /* HuggingFace models: transformers picks sdpa when PyTorch has it (from
     * 2.1.1: is_torch_sdpa_available; 2.1 here), else eager. On the CPU the
     * sdpa kernels are not modelled, so auto means eager there.
     * flash_attention_2: the flash-attn package's kernels (fp16/bf16, sm80+) */
    o->flash = c->attn == DNNMEM_ATTN_FLASH;
    o->sdpa = hf && !g->eager_only &&
              (c->attn == DNNMEM_ATTN_SDPA || o->flash ||
               (c->attn == DNNMEM_ATTN_AUTO && o->torch >= 201 && c->device == DNNMEM_DEVICE_CUDA));
    /* sdpa with enable_gqa (transformers 4.54+ on PyTorch 2.5+: gqa_attention
     * in hf.c), stated in the attention assumption */
    o->gqa = o->sdpa && !o->flash && o->transformers >= 454 && o->torch >= 205;
    /* The graph loaded with the model is 4.51's, without options; it is
     * built for these when they change it: LoRA, quantized weights, flash
     * attention, a generation (a HybridCache's static shapes depend on the
     * prompt), checkpointing in training (use_cache off, as transformers
     * turns it off), transformers 4.52 and later (GPT-2's Cache classes,
     * 4.54's enable_gqa, 4.56's sdpa views, 5.0's cache copies), fp16 on
     * CUDA (softmax(dtype=float32) without its float32 copy), a forced sdpa
     * kernel (the Attention nodes marked with it) */
    o->rebuild = c->lora.r != 0 || c->quant || o->flash ||
                 (hf && (o->generate || (c->mode == DNNMEM_MODE_TRAIN && c->n_checkpoint > 0) ||
                         o->transformers >= 452 ||
                         (c->precision == DNNMEM_PRECISION_FP16 && c->device == DNNMEM_DEVICE_CUDA) ||
                         (o->sdpa && c->sdpa_backend != DNNMEM_SDPA_AUTO)));
    return dm_est_check(DM_CHECK_OPTIONS, g, o, err);
}

/* ---- the facts the checks read ------------------------------------------------ */

static bool has_target_seq(const struct dnnmem_config *c)
{
    for (size_t k = 0; c->dims && k < c->n_dims; k++)
        if (c->dims[k].name && strcmp(c->dims[k].name, "target_seq") == 0)
            return true;
    return false;
}

/* name, value (c: the options, o: their meaning, g: the graph) */
#define FACTS(X)                                                                                   \
    X(GENERATE, o->generate)                                                                       \
    X(TRAIN, c->mode == DNNMEM_MODE_TRAIN)                                                         \
    X(HF, o->hf)                                                                                   \
    X(ENC_DEC, g->encoder_decoder)                                                                 \
    X(CUDA, c->device == DNNMEM_DEVICE_CUDA)                                                       \
    X(CPU, c->device == DNNMEM_DEVICE_CPU)                                                         \
    X(OTHER_FW, o->other_fw)                                                                       \
    X(JAX_JIT, o->jax_jit)                                                                         \
    X(FLASH, o->flash)                                                                             \
    X(SDPA, o->sdpa)                                                                               \
    X(REBUILD, o->rebuild)                                                                         \
    X(EAGER_ONLY, g->eager_only)                                                                   \
    X(QUANTIZED, g->quant_method != NULL)                                                          \
    X(QUANT_TRAINABLE, g->quant_trainable)                                                         \
    X(QUANT_CC_LOW, g->quant_method && c->compute_capability &&                                   \
                        c->compute_capability < g->quant_min_cc)                                   \
    X(ROUTER, g->n_router > 0)                                                                     \
    X(HYBRID_CACHE, g->cache_len > 0)                                                              \
    X(TARGET_SEQ, has_target_seq(c))                                                               \
    X(NEW_TOKENS, c->new_tokens != 0)                                                              \
    X(NEW_TOKENS_BAD, c->new_tokens <= 0 || c->new_tokens > (INT64_C(1) << 20))                    \
    X(KV_DTYPE, c->kv_dtype != DNNMEM_KV_AUTO)                                                     \
    X(BEAMS, c->num_beams > 1)                                                                     \
    X(BEAMS_BAD, c->num_beams < 0 || c->num_beams > 4096)                                          \
    X(SAMPLE, c->do_sample)                                                                        \
    X(WARPERS, c->top_k || c->top_p != 0 || c->temperature != 0)                                   \
    X(TOP_P_BAD, !(c->top_p == 0 || (c->top_p > 0 && c->top_p <= 1)))                              \
    X(TEMPERATURE_BAD, !(c->temperature == 0 || (c->temperature > 0 && c->temperature < 1e30)))    \
    X(SIZES_BAD, c->batch_size < 0 || c->seq_len < 0)                                              \
    X(CAPACITY_BAD, c->capacity_bytes < 0 || c->headroom < 0 || c->headroom >= 1)                  \
    X(STEPS_BAD, c->iterations < 0 || c->iterations > 1000 || c->grad_accum < 0 ||                 \
                     c->grad_accum > 1000)                                                         \
    X(INPUT_SHAPES_NULL, c->n_input_shapes && !c->input_shapes)                                    \
    X(TRAIN_ENUMS_BAD, (unsigned)c->optimizer > DNNMEM_OPT_ADAM8BIT ||                             \
                           (unsigned)c->loss > DNNMEM_LOSS_SUM ||                                  \
                           (unsigned)c->inplace > DNNMEM_INPLACE_NONE ||                           \
                           (unsigned)c->cpu_isa > DNNMEM_CPU_ISA_AVX2 ||                           \
                           (unsigned)c->precision > DNNMEM_PRECISION_AMP_BF16 ||                   \
                           (c->n_freeze && !c->freeze) || (c->n_checkpoint && !c->checkpoint))     \
    X(GRAD_ACCUM, c->grad_accum > 1)                                                               \
    X(FW_VERSION_BAD, c->framework_version && o->fw_version < 0)                                   \
    X(GRAD_SUM_CAP_BAD, c->mxnet_grad_sum_cap < 0 || c->mxnet_grad_sum_cap > 1000000)              \
    X(ALLOC_ROUND, c->alloc_round_bytes >= 0)                                                      \
    X(TORCH_BAD, c->torch_version != 0 && (c->torch_version < 100 || c->torch_version > 999))      \
    X(TORCH_PRE_2, o->torch < 200)                                                                 \
    X(TRANSFORMERS, c->transformers_version != 0)                                                  \
    X(TRANSFORMERS_BAD, c->transformers_version != 0 &&                                            \
                            (c->transformers_version < 400 || c->transformers_version > 999))      \
    X(TRANSFORMERS_UNMODELLED, c->transformers_version != 0 &&                                     \
                                   (c->transformers_version < DM_TRANSFORMERS_OLDEST ||            \
                                    c->transformers_version > DM_TRANSFORMERS_NEWEST))             \
    X(ATTN, c->attn != DNNMEM_ATTN_AUTO)                                                           \
    X(ATTN_SDPA, c->attn == DNNMEM_ATTN_SDPA)                                                      \
    X(FP32, c->precision == DNNMEM_PRECISION_FP32)                                                 \
    X(AMP, c->precision == DNNMEM_PRECISION_AMP_FP16 || c->precision == DNNMEM_PRECISION_AMP_BF16) \
    X(PRE_SM80, c->compute_capability && c->compute_capability < 80)                               \
    X(SDPA_BACKEND, c->sdpa_backend != DNNMEM_SDPA_AUTO)                                           \
    X(QUANT, c->quant != DNNMEM_QUANT_NONE)                                                        \
    X(LORA, c->lora.r != 0)                                                                        \
    X(LORA_BAD, c->lora.r < 0 || c->lora.r > (INT64_C(1) << 20) ||                                 \
                    !(c->lora.dropout >= 0 && c->lora.dropout < 1) || !(c->lora.alpha >= 0) ||     \
                    (c->lora.n_targets && !c->lora.targets))                                       \
    X(KBIT, c->kbit_prep != DNNMEM_KBIT_PREP_NONE)                                                 \
    X(KBIT_GC, c->kbit_prep == DNNMEM_KBIT_PREP)                                                   \
    X(CHECKPOINT, c->n_checkpoint > 0)                                                             \
    /* prepare_model_for_kbit_training casts float32 activations (not GPTQ's) */                   \
    X(KBIT_CAST, c->kbit_prep && (c->quant || (g->quant_method &&                                  \
                                               strcmp(g->quant_method, "gptq") != 0)))             \
    X(MODE_BAD, c->mode != DNNMEM_MODE_INFER && c->mode != DNNMEM_MODE_TRAIN &&                    \
                    c->mode != DNNMEM_MODE_GENERATE)                                               \
    X(KV_DTYPE_BAD, (unsigned)c->kv_dtype > DNNMEM_KV_FP8)                                         \
    X(DEVICE_BAD, c->device != DNNMEM_DEVICE_CUDA && c->device != DNNMEM_DEVICE_CPU)               \
    X(FRAMEWORK_BAD, (unsigned)c->framework > DNNMEM_FW_JAX)                                       \
    X(MX_EXEC_BAD, (unsigned)c->mxnet_executor > DNNMEM_MXNET_EXEC_NAIVE)                          \
    X(JAX_EXEC_BAD, (unsigned)c->jax_execution > DNNMEM_JAX_EAGER)                                 \
    X(TF_EXEC_BAD, (unsigned)c->tf_execution > DNNMEM_TF_EAGER)                                    \
    X(ATTN_BAD, (unsigned)c->attn > DNNMEM_ATTN_FLASH)                                             \
    X(SDPA_BACKEND_BAD, (unsigned)c->sdpa_backend > DNNMEM_SDPA_MATH)                              \
    X(QUANT_BAD, (unsigned)c->quant > DNNMEM_QUANT_INT8)                                           \
    X(KBIT_BAD, (unsigned)c->kbit_prep > DNNMEM_KBIT_PREP_NO_GC)

enum fact {
    F_NONE,
#define X(name, value) F_##name,
    FACTS(X)
#undef X
    F_COUNT
};

/* The texts an error's %s take, in order. */
enum arg {
    A_NONE, A_PATH, A_MODE, A_KV_DTYPE, A_BEAMS, A_TOP_P, A_TEMPERATURE, A_DEVICE, A_FRAMEWORK,
    A_MX_EXEC, A_JAX_EXEC, A_TF_EXEC, A_FW_NAME, A_FW_VERSION, A_GRAD_SUM_CAP, A_TORCH,
    A_TRANSFORMERS, A_TF_MAJOR, A_TF_MINOR, A_ATTN, A_CC_MAJOR, A_CC_MINOR, A_SDPA_BACKEND, A_QUANT, A_QUANT_METHOD,
    A_QUANT_CC_MAJOR, A_QUANT_CC_MINOR, A_KBIT,
};

#define NOT(f) (-(f))
#define MAX_WHEN 4
#define MAX_ARGS 6

struct check {
    enum dm_check_phase phase;
    int when[MAX_WHEN];   /* facts that must all hold (NOT(f): f must not); 0 ends */
    enum dnnmem_status status;
    const char *text;     /* the message, each %s one of args */
    enum arg args[MAX_ARGS];
};

#define O DM_CHECK_OPTIONS
#define USAGE DNNMEM_E_USAGE
#define UNSUP DNNMEM_E_UNSUPPORTED

static const struct check checks[] = {
    {O, {F_MODE_BAD}, USAGE, "unknown mode %s", {A_MODE}},
    {O, {F_KV_DTYPE_BAD}, USAGE, "unknown KV cache dtype %s", {A_KV_DTYPE}},
    {O, {F_GENERATE, NOT(F_HF)}, UNSUP,
     "%s: --mode generate applies to HuggingFace causal LM and T5 configs", {A_PATH}},
    /* encoder-decoder generation (T5): the decoder starts from one token
     * (decoder_start_token_id), its length is not the caller's */
    {O, {F_GENERATE, F_ENC_DEC, F_TARGET_SEQ}, USAGE,
     "%s: --mode generate starts the decoder from decoder_start_token_id (one token) and grows "
     "it by --new-tokens; drop --dim target_seq", {A_PATH}},
    {O, {F_GENERATE, F_ENC_DEC, F_KV_DTYPE}, UNSUP,
     "%s: --kv-dtype is not modelled for encoder-decoder generation (T5's cross-attention cache "
     "is the first forward's own projections)", {A_PATH}},
    {O, {F_GENERATE, F_NEW_TOKENS_BAD}, USAGE,
     "--mode generate needs --new-tokens N, 1 <= N <= 1048576", {A_NONE}},
    {O, {NOT(F_GENERATE), F_NEW_TOKENS}, USAGE,
     "--new-tokens and --kv-dtype apply to --mode generate", {A_NONE}},
    {O, {NOT(F_GENERATE), F_KV_DTYPE}, USAGE,
     "--new-tokens and --kv-dtype apply to --mode generate", {A_NONE}},
    /* how generate() picks tokens: beam search, or sampling with warpers */
    {O, {NOT(F_GENERATE), F_BEAMS}, USAGE, "--num-beams and --do-sample apply to --mode generate",
     {A_NONE}},
    {O, {NOT(F_GENERATE), F_SAMPLE}, USAGE,
     "--num-beams and --do-sample apply to --mode generate", {A_NONE}},
    {O, {F_BEAMS_BAD}, USAGE, "--num-beams %s: expected 1..4096", {A_BEAMS}},
    {O, {NOT(F_SAMPLE), F_WARPERS}, USAGE,
     "--top-k, --top-p and --temperature apply to --do-sample (greedy and beam search ignore "
     "the logits warpers)", {A_NONE}},
    {O, {F_SAMPLE, F_BEAMS}, UNSUP,
     "--do-sample with --num-beams %s (beam sampling, _beam_search with do_sample) is not "
     "modelled; use one of them", {A_BEAMS}},
    {O, {F_TOP_P_BAD}, USAGE, "--top-p %s: expected a probability in (0, 1]", {A_TOP_P}},
    {O, {F_TEMPERATURE_BAD}, USAGE, "--temperature %s: expected a positive number",
     {A_TEMPERATURE}},
    {O, {F_DEVICE_BAD}, USAGE, "unknown device %s", {A_DEVICE}},
    {O, {F_SIZES_BAD}, USAGE, "batch size and sequence length must be positive", {A_NONE}},
    {O, {F_CAPACITY_BAD}, USAGE, "capacity must be positive and headroom in [0, 1)", {A_NONE}},
    {O, {F_STEPS_BAD}, USAGE, "iterations and grad_accum must be in 1..1000", {A_NONE}},
    {O, {F_INPUT_SHAPES_NULL}, USAGE, "input_shapes is NULL", {A_NONE}},
    {O, {F_TRAIN_ENUMS_BAD}, USAGE, "unknown optimizer, loss or in-place setting", {A_NONE}},
    {O, {F_FRAMEWORK_BAD}, USAGE, "unknown framework %s", {A_FRAMEWORK}},
    {O, {F_MX_EXEC_BAD}, USAGE, "unknown MXNet executor %s", {A_MX_EXEC}},
    {O, {F_JAX_EXEC_BAD}, USAGE, "unknown JAX execution %s", {A_JAX_EXEC}},
    {O, {F_JAX_JIT, F_TRAIN, F_GRAD_ACCUM}, UNSUP,
     "--framework jax: gradient accumulation under jit (optax.MultiSteps, or a scan over "
     "micro-batches) is not modelled; use --jax-execution eager", {A_NONE}},
    {O, {F_TF_EXEC_BAD}, USAGE, "unknown TensorFlow execution %s", {A_TF_EXEC}},
    {O, {F_FW_VERSION_BAD}, USAGE, "--framework %s@%s: expected a version such as 2.15",
     {A_FW_NAME, A_FW_VERSION}},
    {O, {F_GRAD_SUM_CAP_BAD}, USAGE, "--mxnet-grad-sum-cap %s: expected 1..1000000",
     {A_GRAD_SUM_CAP}},
    {O, {F_OTHER_FW, NOT(F_CUDA)}, USAGE,
     "--framework %s: only GPU runtimes are modelled; drop --device cpu", {A_FW_NAME}},
    {O, {F_OTHER_FW, F_ALLOC_ROUND}, USAGE,
     "--alloc-round: replaces PyTorch's caching allocator; not with --framework %s", {A_FW_NAME}},
    {O, {F_TORCH_BAD}, USAGE, "torch version %s: expected major*100+minor", {A_TORCH}},
    {O, {F_TRANSFORMERS_BAD}, USAGE, "transformers version %s: expected major*100+minor",
     {A_TRANSFORMERS}},
    {O, {F_TRANSFORMERS, NOT(F_HF)}, USAGE,
     "%s: --transformers applies to HuggingFace config.json models", {A_PATH}},
    {O, {F_TRANSFORMERS_UNMODELLED}, UNSUP,
     "--transformers %s.%s is not modelled: dnnmem builds transformers 4.51 to 5.24 (its memory "
     "behaviour read at 4.52, 4.54, 4.56 and 5.0; measured at 4.51.3, 4.56.2, 5.24.0)",
     {A_TF_MAJOR, A_TF_MINOR}},
    {O, {F_ATTN_BAD}, USAGE, "unknown attention implementation %s", {A_ATTN}},
    {O, {F_ATTN, NOT(F_HF)}, USAGE,
     "%s: --attn applies to HuggingFace config.json models; an ONNX graph's attention is the "
     "ops it holds", {A_PATH}},
    {O, {F_ATTN_SDPA, F_CPU}, UNSUP, "%s: --attn sdpa on the CPU is not modelled; use --attn eager",
     {A_PATH}},
    {O, {F_ATTN_SDPA, F_TORCH_PRE_2}, USAGE,
     "%s: --attn sdpa needs PyTorch 2.0 or later (F.scaled_dot_product_attention)", {A_PATH}},
    {O, {F_ATTN_SDPA, F_EAGER_ONLY}, UNSUP,
     "%s: --attn sdpa: transformers has no sdpa attention for this model (T5Attention is eager "
     "only); use --attn eager or auto", {A_PATH}},
    /* flash_attention_2 runs in fp16/bf16 only (transformers casts float32
     * q, k, v to the autocast dtype, else to the Linear weights' dtype, and
     * flash_attn_func refuses float32) on Ampere and later (flash-attn's
     * README: FlashAttention-2 supports sm80+; head dims up to 256) */
    {O, {F_FLASH, NOT(F_CUDA)}, UNSUP,
     "%s: --attn flash: flash_attention_2 runs on CUDA only, for models transformers gives one",
     {A_PATH}},
    {O, {F_FLASH, F_EAGER_ONLY}, UNSUP,
     "%s: --attn flash: flash_attention_2 runs on CUDA only, for models transformers gives one",
     {A_PATH}},
    {O, {F_FLASH, F_FP32}, USAGE,
     "%s: --attn flash: FlashAttention-2 runs in fp16/bf16 only; add --precision bf16, fp16, "
     "amp-bf16 or amp-fp16", {A_PATH}},
    {O, {F_FLASH, F_PRE_SM80}, USAGE,
     "%s: --attn flash: FlashAttention-2 needs compute capability 8.0 or later (this GPU: %s.%s)",
     {A_PATH, A_CC_MAJOR, A_CC_MINOR}},
    /* --sdpa-backend: sdpa_kernel(SDPBackend.X) around the step; whether
     * PyTorch takes the forced kernel for each call is checked as the graph
     * is built (dm_load_hf) */
    {O, {F_SDPA_BACKEND_BAD}, USAGE, "unknown sdpa backend %s", {A_SDPA_BACKEND}},
    {O, {F_SDPA_BACKEND, NOT(F_HF)}, USAGE,
     "%s: --sdpa-backend applies to HuggingFace config.json models under sdpa attention",
     {A_PATH}},
    {O, {F_SDPA_BACKEND, F_FLASH}, USAGE,
     "%s: --sdpa-backend needs sdpa attention (--attn sdpa, or auto on CUDA with PyTorch 2.1+); "
     "this estimate's attention is flash_attention_2", {A_PATH}},
    {O, {F_SDPA_BACKEND, NOT(F_SDPA)}, USAGE,
     "%s: --sdpa-backend needs sdpa attention (--attn sdpa, or auto on CUDA with PyTorch 2.1+); "
     "this estimate's attention is eager", {A_PATH}},
    {O, {F_QUANT_BAD}, USAGE, "unknown weight quantization %s", {A_QUANT}},
    /* a quantized checkpoint (quantization_config): transformers' Trainer
     * refuses to fine-tune it without adapters, and a method whose quantizer
     * is not trainable at all (trainer.py, validate_quantization_for_training) */
    {O, {F_QUANTIZED, F_TRAIN, NOT(F_LORA)}, USAGE,
     "%s: a %s checkpoint in training needs --lora-r: transformers' Trainer refuses to fine-tune "
     "a purely quantized model", {A_PATH, A_QUANT_METHOD}},
    {O, {F_QUANTIZED, F_TRAIN, NOT(F_QUANT_TRAINABLE)}, UNSUP,
     "%s: transformers' %s quantizer is not trainable (is_trainable: false), with or without "
     "adapters", {A_PATH, A_QUANT_METHOD}},
    {O, {F_QUANTIZED, F_CPU}, UNSUP,
     "%s: quantized linear layers on the CPU are not modelled (their kernels are CUDA's)",
     {A_PATH}},
    {O, {F_QUANT, F_CPU}, UNSUP,
     "%s: quantized linear layers on the CPU are not modelled (their kernels are CUDA's)",
     {A_PATH}},
    {O, {F_QUANT_CC_LOW}, UNSUP,
     "%s: %s checkpoints need compute capability %s.%s or later "
     "(FineGrainedFP8HfQuantizer.validate_environment); the GPU has %s.%s",
     {A_PATH, A_QUANT_METHOD, A_QUANT_CC_MAJOR, A_QUANT_CC_MINOR, A_CC_MAJOR, A_CC_MINOR}},
    {O, {F_QUANT, NOT(F_HF)}, USAGE, "%s: --quant applies to HuggingFace config.json models",
     {A_PATH}},
    /* prepare_model_for_kbit_training: a quantized model readied for adapters */
    {O, {F_KBIT_BAD}, USAGE, "unknown kbit_prep %s", {A_KBIT}},
    {O, {F_KBIT, NOT(F_LORA)}, USAGE,
     "--kbit-prep needs --lora-r: prepare_model_for_kbit_training readies a quantized model for "
     "adapters", {A_NONE}},
    {O, {F_KBIT, NOT(F_QUANT), NOT(F_QUANTIZED)}, USAGE,
     "--kbit-prep needs a quantized model: --quant or a config's quantization_config", {A_NONE}},
    {O, {F_KBIT_GC, F_CHECKPOINT}, USAGE,
     "--kbit-prep checkpoints every layer (gradient_checkpointing_enable); drop --checkpoint, or "
     "use --kbit-prep-no-gc with it", {A_NONE}},
    {O, {F_KBIT_CAST, F_FLASH}, UNSUP,
     "%s: --kbit-prep with --attn flash (float32 activations cast to the pre-quantization dtype "
     "around the kernel) is not modelled; use --attn sdpa or eager", {A_PATH}},
    /* the options a built graph takes */
    {O, {F_REBUILD, F_LORA, NOT(F_HF)}, USAGE,
     "%s: --lora-r applies to HuggingFace config.json models", {A_PATH}},
    {O, {F_REBUILD, F_LORA, NOT(F_TRAIN)}, USAGE, "--lora-r applies to --mode train", {A_NONE}},
    {O, {F_REBUILD, F_QUANT, F_TRAIN, NOT(F_LORA)}, USAGE,
     "--quant in training needs --lora-r: transformers' Trainer refuses to fine-tune a purely "
     "quantized model", {A_NONE}},
    {O, {F_REBUILD, F_LORA_BAD}, USAGE, "LoRA: rank in 1..1048576, dropout in [0, 1), alpha >= 0",
     {A_NONE}},
    /* the graph built for the options */
    {DM_CHECK_GRAPH, {F_ROUTER, NOT(F_TRAIN)}, UNSUP,
     "%s: config field 'output_router_logits' is true: the load-balancing loss every forward "
     "then computes is modelled in training only (--mode train)", {A_PATH}},
    /* beam search: modelled for the decoders whose cache is a DynamicCache
     * or the legacy tuple (src/schedule/generate.c) */
    {DM_CHECK_GRAPH, {F_GENERATE, F_BEAMS, F_ENC_DEC}, UNSUP,
     "%s: --num-beams with an encoder-decoder (T5's EncoderDecoderCache reordered, its encoder "
     "output expanded) is not modelled (beam search is, for the decoders on a DynamicCache or "
     "the legacy tuple cache); use greedy or --do-sample", {A_PATH}},
    {DM_CHECK_GRAPH, {F_GENERATE, F_BEAMS, F_HYBRID_CACHE}, UNSUP,
     "%s: --num-beams with a HybridCache (Gemma 2/3: static caches of batch x num_beams rows, "
     "reordered) is not modelled (beam search is, for the decoders on a DynamicCache or the "
     "legacy tuple cache); use greedy or --do-sample", {A_PATH}},
    /* the shapes inferred */
    {DM_CHECK_SHAPES, {F_AMP, NOT(F_CUDA)}, UNSUP,
     "--precision amp-*: autocast on the CPU (bf16, other op lists) is not modelled", {A_NONE}},
};

#undef O
#undef USAGE
#undef UNSUP

static const char *arg_text(enum arg a, const struct dm_graph *g, const struct dm_est_opts *o,
                            char buf[64])
{
    const struct dnnmem_config *c = &o->cfg;
    int n;
    switch (a) {
    case A_NONE: return "";
    case A_PATH: return g->path;
    case A_FW_NAME: return dnnmem_framework_name(c->framework);
    case A_FW_VERSION: return c->framework_version;
    case A_QUANT_METHOD: return g->quant_method;
    case A_TOP_P: snprintf(buf, 64, "%g", c->top_p); return buf;
    case A_TEMPERATURE: snprintf(buf, 64, "%g", c->temperature); return buf;
    case A_MODE: n = (int)c->mode; break;
    case A_KV_DTYPE: n = (int)c->kv_dtype; break;
    case A_BEAMS: n = c->num_beams; break;
    case A_DEVICE: n = (int)c->device; break;
    case A_FRAMEWORK: n = (int)c->framework; break;
    case A_MX_EXEC: n = (int)c->mxnet_executor; break;
    case A_JAX_EXEC: n = (int)c->jax_execution; break;
    case A_TF_EXEC: n = (int)c->tf_execution; break;
    case A_GRAD_SUM_CAP: n = c->mxnet_grad_sum_cap; break;
    case A_TORCH: n = c->torch_version; break;
    case A_TRANSFORMERS: n = c->transformers_version; break;
    case A_TF_MAJOR: n = c->transformers_version / 100; break;
    case A_TF_MINOR: n = c->transformers_version % 100; break;
    case A_ATTN: n = (int)c->attn; break;
    case A_CC_MAJOR: n = c->compute_capability / 10; break;
    case A_CC_MINOR: n = c->compute_capability % 10; break;
    case A_SDPA_BACKEND: n = (int)c->sdpa_backend; break;
    case A_QUANT: n = (int)c->quant; break;
    case A_QUANT_CC_MAJOR: n = g->quant_min_cc / 10; break;
    case A_QUANT_CC_MINOR: n = g->quant_min_cc % 10; break;
    case A_KBIT: n = (int)c->kbit_prep; break;
    default: return "?";
    }
    snprintf(buf, 64, "%d", n);
    return buf;
}

static enum dnnmem_status breach(const struct check *k, const struct dm_graph *g,
                                 const struct dm_est_opts *o, struct dnnmem_error *err)
{
    char msg[1024], arg[64];
    size_t len = 0, next = 0;
    for (const char *p = k->text; *p && len + 1 < sizeof msg; p++) {
        if (p[0] == '%' && p[1] == 's' && next < MAX_ARGS) {
            const char *s = arg_text(k->args[next++], g, o, arg);
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s", s);
            len = len < sizeof msg ? len : sizeof msg - 1;
            p++;
        } else {
            msg[len++] = *p;
        }
    }
    msg[len] = '\0';
    return dm_fail(err, k->status, "%s", msg);
}

enum dnnmem_status dm_est_check(enum dm_check_phase phase, const struct dm_graph *g,
                                const struct dm_est_opts *o, struct dnnmem_error *err)
{
    const struct dnnmem_config *c = &o->cfg;
    bool fact[F_COUNT] = {
#define X(name, value) [F_##name] = (value),
        FACTS(X)
#undef X
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        const struct check *k = &checks[i];
        bool hit = k->phase == phase;
        for (int w = 0; hit && w < MAX_WHEN && k->when[w]; w++)
            hit = k->when[w] > 0 ? fact[k->when[w]] : !fact[-k->when[w]];
        if (hit)
            return breach(k, g, o, err);
    }
    return DNNMEM_OK;
}
