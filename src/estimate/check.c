/*
 * check.c: the options of an estimate. What they mean (struct dm_est_opts),
 * then one table of checks: each row names the facts (about the options,
 * the mode, the framework, the model) under which the options are breached
 * and the error the breach gets. Rows run in order; the first breach wins.
 * Each row belongs to the stage that can tell (enum dm_check_phase): the
 * options, the graph built for them, the dims bound (what shapes.c found
 * first, struct dm_bind), the shapes, another framework's runtime, the
 * schedule. What a builder finds the options ask and the model cannot give
 * (a --lora-targets module it has not, a forced sdpa kernel PyTorch lacks,
 * nothing to train, ...) it records where it finds it (struct dm_refusal)
 * and stops; the rows for the graph built (DM_CHECK_GRAPH) and the
 * schedule built (DM_CHECK_BUILT) say what error each refusal is.
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
    dm_est_defaults(o, g, &o->d);
    o->torch = (int)o->d.value[DM_D_TORCH];
    o->transformers = (int)o->d.value[DM_D_TRANSFORMERS];
    /* the defaults table's precision and optimizer (a HuggingFace config's
     * torch_dtype, the Trainer's AdamW: estimate.h) */
    o->cfg_dtype = !o->d.set[DM_D_PRECISION] &&
                   o->d.value[DM_D_PRECISION] != DNNMEM_PRECISION_FP32;
    c->precision = (enum dnnmem_precision)o->d.value[DM_D_PRECISION];
    c->optimizer = (enum dnnmem_optimizer)o->d.value[DM_D_OPTIMIZER];
    /* a regression head's own loss (num_labels 1: ForSequenceClassificationLoss's
     * MSELoss) in place of --loss's default */
    if (hf && g->loss_mse && c->loss == DNNMEM_LOSS_CE && !c->loss_all_outputs)
        c->loss = DNNMEM_LOSS_MSE;
    /* HuggingFace models: transformers picks sdpa when PyTorch has it (from
     * 2.1.1: is_torch_sdpa_available; 2.1 here), else eager. On the CPU the
     * sdpa kernels are not modelled, so auto means eager there.
     * flash_attention_2: the flash-attn package's kernels (fp16/bf16, sm80+) */
    o->flash = c->attn == DNNMEM_ATTN_FLASH;
    /* a release before the model's sdpa path (GPTNeoXSdpaAttention came with
     * 4.42, OPTSdpaAttention with 4.46): _supports_sdpa is false, so auto is
     * eager (and --attn sdpa an error below) */
    bool no_sdpa_yet = hf && g->sdpa_since && o->transformers < g->sdpa_since;
    o->sdpa = hf && !g->eager_only &&
              (c->attn == DNNMEM_ATTN_SDPA || o->flash ||
               (c->attn == DNNMEM_ATTN_AUTO && !no_sdpa_yet && o->torch >= 201 &&
                c->device == DNNMEM_DEVICE_CUDA));
    /* sdpa with enable_gqa (transformers 4.54+ on PyTorch 2.5+: gqa_attention
     * in hf.c), stated in the attention assumption */
    o->gqa = o->sdpa && !o->flash && o->transformers >= 454 && o->torch >= 205;
    /* The graph loaded with the model is 4.51's (DM_TRANSFORMERS_BASE),
     * without options; it is
     * built for these when they change it: LoRA, quantized weights, flash
     * attention, a generation (a HybridCache's static shapes depend on the
     * prompt), checkpointing in training (use_cache off, as transformers
     * turns it off), transformers before 4.51 (GPT-NeoX's and OPT's own
     * attention classes) and 4.52 and later (GPT-2's Cache classes,
     * 4.54's enable_gqa, 4.56's sdpa views, 5.0's cache copies), fp16 on
     * CUDA (softmax(dtype=float32) without its float32 copy), a forced sdpa
     * kernel (the Attention nodes marked with it), training where the graph
     * says it differs (g->train_graph), sdpa on the CPU (dropout in
     * training and a narrower value head run the math kernel's ops there:
     * hf/attention.c, cpu_flash) */
    o->rebuild = c->lora.r != 0 || c->quant || o->flash ||
                 (hf && (o->generate || (c->mode == DNNMEM_MODE_TRAIN && c->n_checkpoint > 0) ||
                         o->transformers != DM_TRANSFORMERS_BASE || g->hf_oldest ||
                         (c->mode == DNNMEM_MODE_TRAIN && g->train_graph) ||
                         (c->precision == DNNMEM_PRECISION_FP16 && c->device == DNNMEM_DEVICE_CUDA) ||
                         (o->sdpa && c->sdpa_backend != DNNMEM_SDPA_AUTO) ||
                         (o->sdpa && c->device == DNNMEM_DEVICE_CPU)));
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

/* The graph returns its KV cache: HuggingFace's present.N.key outputs. */
static bool returns_cache(const struct dm_graph *g)
{
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (strcmp(g->tensors[g->outputs[k]].name, "present.0.key") == 0)
            return true;
    return false;
}

/* The free memory at start: the capacity less the CUDA context. */
static uint64_t free_at_start(const struct dnnmem_config *c, const struct dm_est_opts *o)
{
    uint64_t cap = (uint64_t)c->capacity_bytes, context = (uint64_t)dm_default_int(&o->d, CUDA_CONTEXT);
    return cap > context ? cap - context : 0;
}

static bool mx_page_bad(const struct dnnmem_config *c)
{
    uint64_t page = (uint64_t)c->mxnet_page_size; /* the pool's own default, 4096, passes */
    return c->mxnet_page_size >= 0 &&
           (page < 32 || (c->mxnet_pool == DNNMEM_MXNET_POOL_ROUND && (page & (page - 1))));
}

/* The data-parallel world the options name (1: one process). */
static int par_world(const struct dnnmem_config *c)
{
    if (c->par.gpus > 0)
        return c->par.gpus;
    if (c->par.nodes > 0)
        return c->par.nodes * (c->par.gpus_per_node > 0 ? c->par.gpus_per_node : 1);
    /* --tp / --pp alone: one model-parallel group */
    return (c->par.tp > 1 ? c->par.tp : 1) * (c->par.pp > 1 ? c->par.pp : 1);
}

static int par_mp(const struct dnnmem_config *c) /* the model-parallel ranks, TP x PP */
{
    return (c->par.tp > 1 ? c->par.tp : 1) * (c->par.pp > 1 ? c->par.pp : 1);
}

static int pp_micro(const struct dnnmem_config *c)
{
    return c->par.micro_batches > 0 ? c->par.micro_batches : c->par.pp;
}

/* name, value (c: the options, o: their meaning, g: the graph, bd: what
 * binding the dims found, NULL before; rf: what the graph's or the
 * schedule's builder refused, NULL in the other phases) */
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
    X(NO_SDPA_YET, g->sdpa_since && o->transformers < g->sdpa_since)                               \
    X(QUANTIZED, g->quant_method != NULL)                                                          \
    X(QUANT_TRAINABLE, g->quant_trainable)                                                         \
    X(QUANT_CC_LOW, g->quant_method && c->compute_capability &&                                   \
                        c->compute_capability < g->quant_min_cc)                                   \
    X(ROUTER, g->n_router > 0)                                                                     \
    X(SEQCLS_NO_PAD_BATCH, g->seqcls_no_pad && dm_default_int(&o->d, BATCH) > 1)                   \
    X(HYBRID_CACHE, g->cache_len > 0)                                                              \
    X(LEGACY_CACHE, g->legacy_cache)                                                               \
    X(RETURNS_CACHE, returns_cache(g))                                                             \
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
    X(TRAIN_ENUMS_BAD, (unsigned)c->optimizer > DNNMEM_OPT_ADAMW_FUSED ||                           \
                           (unsigned)c->loss > DNNMEM_LOSS_SUM ||                                  \
                           (unsigned)c->inplace > DNNMEM_INPLACE_NONE ||                           \
                           (unsigned)c->cpu_isa > DNNMEM_CPU_ISA_AVX2 ||                           \
                           (unsigned)c->precision > DNNMEM_PRECISION_AMP_BF16 ||                   \
                           (c->n_freeze && !c->freeze) || (c->n_checkpoint && !c->checkpoint))     \
    X(GRAD_ACCUM, c->grad_accum > 1)                                                               \
    X(PAR, par_world(c) > 1 || c->par.tp > 1 || c->par.zero || c->par.fsdp || c->par.offload || c->par.fsdp_wrap)   \
    X(PAR_ZERO, c->par.zero != 0)                                                                  \
    X(PAR_FSDP, c->par.fsdp != DNNMEM_FSDP_NONE)                                                   \
    X(PAR_BAD, (unsigned)c->par.zero > 3 || (unsigned)c->par.fsdp > DNNMEM_FSDP_NO_SHARD ||         \
                   (unsigned)c->par.offload > DNNMEM_OFFLOAD_PARAMS || c->par.gpus < 0 ||          \
                   c->par.nodes < 0 || c->par.gpus_per_node < 0)                                   \
    X(PAR_WORLD_MISMATCH, c->par.gpus > 0 && c->par.nodes > 0 &&                                   \
                              c->par.gpus != c->par.nodes * (c->par.gpus_per_node ? c->par.gpus_per_node : 1)) \
    X(PAR_PER_NODE_ALONE, c->par.gpus_per_node > 0 && !c->par.gpus && !c->par.nodes)                \
    X(PAR_PER_NODE_DIVIDES, c->par.gpus_per_node > 0 && par_world(c) % c->par.gpus_per_node != 0)  \
    X(PAR_TP, c->par.tp > 1)                                                                       \
    X(PAR_SP, c->par.sp)                                                                           \
    X(PAR_TP_DIVIDES, c->par.tp > 1 && par_world(c) % c->par.tp != 0)                              \
    X(PAR_PP, c->par.pp > 1)                                                                       \
    X(PAR_PP_DIVIDES, c->par.pp > 1 && par_world(c) % par_mp(c) != 0)                              \
    X(PAR_PP_OPTS, c->par.micro_batches > 0 || c->par.pp_schedule != DNNMEM_PP_1F1B ||            \
                       c->par.pp_split != NULL)                                                    \
    X(PAR_PP_BAD, (unsigned)c->par.pp_schedule > DNNMEM_PP_INTERLEAVED || c->par.micro_batches < 0) \
    X(PAR_PP_INTERLEAVED, c->par.pp_schedule == DNNMEM_PP_INTERLEAVED)                             \
    X(PAR_PP_SPLIT, c->par.pp > 1 && dm_default_int(&o->d, BATCH) % pp_micro(c) != 0)              \
    X(PAR_CP, c->par.cp > 1)                                                                       \
    X(PAR_OFFLOAD, c->par.offload != DNNMEM_OFFLOAD_NONE)                                          \
    X(PAR_OFFLOAD_PARAMS, c->par.offload == DNNMEM_OFFLOAD_PARAMS)                                 \
    X(PAR_ZERO3, c->par.zero == 3)                                                                 \
    X(PAR_WRAP, c->par.fsdp_wrap != NULL)                                                          \
    X(PAR_DDP_OPTS, c->par.ddp_bucket_bytes >= 0 || c->par.ddp_bucket_view)                        \
    X(PAR_ZERO_OPTS, c->par.zero_bucket_elems >= 0 || c->par.zero_prefetch_elems >= 0 ||            \
                         c->par.zero_persist_elems >= 0)                                           \
    X(PAR_Z3_OPTS, c->par.zero_prefetch_elems >= 0 || c->par.zero_persist_elems >= 0)              \
    X(PAR_RANK_OUT, c->par.rank >= par_world(c))                                                   \
    X(PAR_SHAPED_OPT, c->optimizer == DNNMEM_OPT_ADAFACTOR || c->optimizer == DNNMEM_OPT_ADAM8BIT)  \
    X(KEEP_OUTPUTS, c->keep_outputs)                                                               \
    X(FW_VERSION_BAD, c->framework_version && o->fw_version < 0)                                   \
    X(GRAD_SUM_CAP_BAD, c->mxnet_grad_sum_cap < 0 || c->mxnet_grad_sum_cap > 1000000)              \
    X(ALLOC_ROUND, c->alloc_round_bytes >= 0)                                                      \
    X(TORCH_BAD, c->torch_version != 0 && (c->torch_version < 100 || c->torch_version > 999))      \
    X(TORCH_UNMODELLED, c->torch_version >= 100 && c->torch_version <= 999 &&                     \
                            (c->torch_version < DM_TORCH_OLDEST || c->torch_version > DM_TORCH_NEWEST)) \
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
    X(KBIT_BAD, (unsigned)c->kbit_prep > DNNMEM_KBIT_PREP_NO_GC)                                   \
    /* the runtimes: their limits and allocator options, defaults applied */                       \
    X(TF, c->framework == DNNMEM_FW_TENSORFLOW)                                                    \
    X(JAX, c->framework == DNNMEM_FW_JAX)                                                          \
    X(MXNET, c->framework == DNNMEM_FW_MXNET)                                                      \
    X(CAPACITY, c->capacity_bytes > 0)                                                             \
    X(TF_LIMIT_ZERO, c->tf_memory_limit_bytes == 0)                                                \
    X(TF_LIMIT, c->tf_memory_limit_bytes > 0)                                                      \
    /* the GPU's free memory less MinSystemMemory; the CPU's limit is its own */              \
    X(TF_NO_ROOM, c->device == DNNMEM_DEVICE_CUDA && free_at_start(c, o) <=                   \
                      (uint64_t)dm_default_int(&o->d, TF_MIN_SYSTEM_MEMORY))                \
    X(JAX_FRACTION_BAD, !(dm_default_real(&o->d, JAX_MEM_FRACTION) > 0 &&                          \
                          dm_default_real(&o->d, JAX_MEM_FRACTION) <= 1))                          \
    X(MX_PAGE_BAD, mx_page_bad(c))                                                                 \
    X(MX_CUTOFF_BAD, c->mxnet_round_cutoff && (c->mxnet_round_cutoff < 20 ||                       \
                                               c->mxnet_round_cutoff > 34))                        \
    X(MX_RESERVE_BAD, c->mxnet_reserve_percent > 100)                                              \
    X(NO_ROOM, free_at_start(c, o) == 0)                                                          \
    /* the dims bound (shapes.c): the first breach */                                              \
    X(SHAPE_RANK, bd && bd->breach == DM_BIND_SHAPE_RANK)                                          \
    X(SHAPE_DIM, bd && bd->breach == DM_BIND_SHAPE_DIM)                                            \
    X(SHAPE_NO_INPUT, bd && bd->breach == DM_BIND_SHAPE_NO_INPUT)                                  \
    X(SHAPE_TWICE, bd && bd->breach == DM_BIND_SHAPE_TWICE)                                        \
    X(SHAPE_RANKS, bd && bd->breach == DM_BIND_SHAPE_RANKS)                                        \
    X(SHAPE_FIXED, bd && bd->breach == DM_BIND_SHAPE_FIXED)                                        \
    X(SHAPE_SYMBOL, bd && bd->breach == DM_BIND_SHAPE_SYMBOL)                                      \
    X(DIM_VALUE, bd && bd->breach == DM_BIND_DIM_VALUE)                                            \
    X(DIM_UNKNOWN, bd && bd->breach == DM_BIND_DIM_UNKNOWN)                                        \
    X(DIM_BEAMS, bd && bd->breach == DM_BIND_DIM_BEAMS)                                            \
    X(DIM_SHAPE, bd && bd->breach == DM_BIND_DIM_SHAPE)                                            \
    X(BATCH_SHAPE, bd && bd->breach == DM_BIND_BATCH_SHAPE)                                        \
    X(BATCH_BEAMS, bd && bd->breach == DM_BIND_BATCH_BEAMS)                                        \
    X(NO_SHAPE, bd && bd->breach == DM_BIND_NO_SHAPE)                                              \
    X(NO_BATCH, bd && bd->breach == DM_BIND_NO_BATCH)                                              \
    X(NO_SEQ, bd && bd->breach == DM_BIND_NO_SEQ)                                                \
    /* what a builder refused (struct dm_refusal) */                                               \
    X(R_FLASH_RELEASE, rf && rf->kind == DM_REFUSE_FLASH_RELEASE)                                  \
    X(R_FLASH_MODEL, rf && rf->kind == DM_REFUSE_FLASH_MODEL)                                      \
    X(R_QUANT_TWICE, rf && rf->kind == DM_REFUSE_QUANT_TWICE)                                      \
    X(R_SDPA_KERNEL, rf && rf->kind == DM_REFUSE_SDPA_KERNEL)                                      \
    X(R_HYBRID_PROMPT, rf && rf->kind == DM_REFUSE_HYBRID_PROMPT)                                  \
    X(R_HYBRID_FLASH, rf && rf->kind == DM_REFUSE_HYBRID_FLASH)                                    \
    X(R_HYBRID_LONG, rf && rf->kind == DM_REFUSE_HYBRID_LONG)                                      \
    X(R_GEN_CACHE_IMPL, rf && rf->kind == DM_REFUSE_GEN_CACHE_IMPL)                                \
    X(R_GEN_NO_USE_CACHE, rf && rf->kind == DM_REFUSE_GEN_NO_USE_CACHE)                            \
    X(R_KBIT_NO_GC, rf && rf->kind == DM_REFUSE_KBIT_NO_GC)                                        \
    X(R_KBIT_LISTS, rf && rf->kind == DM_REFUSE_KBIT_LISTS)                                        \
    X(R_KBIT_NO_LIST, rf && rf->kind == DM_REFUSE_KBIT_NO_LIST)                                    \
    X(R_LORA_TARGET, rf && rf->kind == DM_REFUSE_LORA_TARGET)                                      \
    X(R_LORA_NO_DEFAULT, rf && rf->kind == DM_REFUSE_LORA_NO_DEFAULT)                              \
    X(R_MOE_EAGER, rf && rf->kind == DM_REFUSE_MOE_EAGER)                                          \
    X(R_MOE_QUANT, rf && rf->kind == DM_REFUSE_MOE_QUANT)                                          \
    X(R_CKPT_LONG, rf && rf->kind == DM_REFUSE_CKPT_LONG)                                          \
    X(R_CKPT_EVERY, rf && rf->kind == DM_REFUSE_CKPT_EVERY)                                        \
    X(R_CKPT_OVERLAP, rf && rf->kind == DM_REFUSE_CKPT_OVERLAP)                                    \
    X(R_CKPT_UNMATCHED, rf && rf->kind == DM_REFUSE_CKPT_UNMATCHED)                                \
    X(R_NOTHING_TO_TRAIN, rf && rf->kind == DM_REFUSE_NOTHING_TO_TRAIN)                            \
    X(R_GEN_NO_CACHE, rf && rf->kind == DM_REFUSE_GEN_NO_CACHE)                                    \
    X(R_GEN_NO_DECODER_CACHE, rf && rf->kind == DM_REFUSE_GEN_NO_DECODER_CACHE)

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
    A_TORCH_MAJOR, A_TORCH_MINOR,
    A_TRANSFORMERS, A_TF_MAJOR, A_TF_MINOR, A_ATTN, A_CC_MAJOR, A_CC_MINOR, A_SDPA_BACKEND, A_QUANT, A_QUANT_METHOD,
    A_QUANT_CC_MAJOR, A_QUANT_CC_MINOR, A_KBIT, A_CAPACITY, A_CONTEXT, A_TF_MIN_SYSTEM,
    A_JAX_FRACTION, A_MX_PAGE, A_MX_CUTOFF, A_MX_RESERVE, A_BATCH, A_MAX_DIMS,
    A_GPUS, A_WORLD, A_PER_NODE, A_TP, A_PP, A_CP, A_RANK, A_MICRO,
    /* what binding the dims found (struct dm_bind) */
    A_B_NAME, A_B_BY, A_B_DIM, A_B_VALUE, A_B_OTHER, A_B_INDEX, A_B_RANK, A_B_DECL_RANK, A_B_LIST,
    A_B_DECL,
    /* what a builder refused (struct dm_refusal), the transformers release built */
    A_R_NAME, A_R_WHY, A_R_VALUE, A_R_LIMIT, A_TFV_MAJOR, A_TFV_MINOR,
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
#define G DM_CHECK_GRAPH
#define S DM_CHECK_BUILT
#define R DM_CHECK_RUNTIME
#define B DM_CHECK_BIND
#define USAGE DNNMEM_E_USAGE
#define UNSUP DNNMEM_E_UNSUPPORTED

#define PAR_MODELLED "modelled: data parallel (DDP, DeepSpeed ZeRO 1-3, FSDP2 full, shard-grad-op, " \
                     "hybrid, no-shard), tensor parallel (--tp) and pipeline parallel (--pp), world = DP x TP x PP"
#define PP_MODELLED "modelled: --pp over a model's repeated blocks, with --tp and DDP"
#define TP_MODELLED "modelled: --tp over ONNX graphs' paired column- and row-parallel linears, " \
                    "alone or under DDP over the world / TP replicas"
static const struct check checks[] = {
    {O, {F_MODE_BAD}, USAGE, "unknown mode %s", {A_MODE}},
    /* data parallelism (docs/parallel.md) */
    {O, {F_PAR_BAD}, USAGE, "unknown data-parallel setting (zero 0..3, fsdp, offload, gpus)", {A_NONE}},
    {O, {F_PAR_SP, NOT(F_PAR_TP)}, USAGE,
     "--sp (sequence parallel) splits the tensor-parallel group's norm and dropout regions "
     "along the sequence: it needs --tp 2 or more", {A_NONE}},
    {O, {F_PAR_SP, F_PAR_PP}, UNSUP,
     "--sp with --pp is not modelled (a stage's received activations would arrive split along "
     "the sequence; modelled: --sp with --tp, alone or under DDP)", {A_NONE}},
    {O, {F_PAR_TP_DIVIDES}, USAGE,
     "--tp %s does not divide the world of %s ranks (world = DP x TP x PP; --gpus is the world)",
     {A_TP, A_WORLD}},
    {O, {F_PAR_TP, F_PAR_ZERO}, UNSUP,
     "--tp %s with --zero is not modelled (" TP_MODELLED ")", {A_TP}},
    {O, {F_PAR_TP, F_PAR_FSDP}, UNSUP,
     "--tp %s with --fsdp is not modelled (" TP_MODELLED ")", {A_TP}},
    {O, {F_PAR_TP, F_HF}, UNSUP,
     "%s: --tp is not modelled for HuggingFace configs yet (their attention views name the "
     "config's head count; " TP_MODELLED ")", {A_PATH}},
    {O, {F_PAR_PP_BAD}, USAGE, "unknown pipeline setting (pp_schedule, micro_batches)", {A_NONE}},
    {O, {F_PAR_PP_OPTS, NOT(F_PAR_PP)}, USAGE,
     "--micro-batches, --pp-schedule and --pp-split apply to --pp (2 or more stages)", {A_NONE}},
    {O, {F_PAR_PP, F_PAR_PP_DIVIDES}, USAGE,
     "--pp %s (x --tp) does not divide the world of %s ranks (world = DP x TP x PP)",
     {A_PP, A_WORLD}},
    {O, {F_PAR_PP, F_PAR_PP_INTERLEAVED}, UNSUP,
     "--pp-schedule interleaved-1f1b is not modelled (virtual stages); modelled: 1f1b, gpipe",
     {A_NONE}},
    {O, {F_PAR_PP, F_PAR_PP_SPLIT}, USAGE,
     "--batch-size %s does not split into --micro-batches %s", {A_BATCH, A_MICRO}},
    {O, {F_PAR_PP, F_GRAD_ACCUM}, USAGE,
     "--grad-accum with --pp: the pipeline's micro-batches are its accumulation; give "
     "--micro-batches", {A_NONE}},
    {O, {F_PAR_PP, F_PAR_ZERO}, UNSUP, "--pp %s with --zero is not modelled (" PP_MODELLED ")",
     {A_PP}},
    {O, {F_PAR_PP, F_PAR_FSDP}, UNSUP, "--pp %s with --fsdp is not modelled (" PP_MODELLED ")",
     {A_PP}},
    {O, {F_PAR_CP}, UNSUP, "--cp %s: context parallel is not modelled yet (" PAR_MODELLED "; use --cp 1)",
     {A_CP}},
    {O, {F_PAR, NOT(F_TRAIN)}, USAGE,
     "--gpus, --zero and --fsdp model training steps, one per rank: add --mode train", {A_NONE}},
    {O, {F_PAR, F_OTHER_FW}, UNSUP,
     "--gpus, --zero and --fsdp model PyTorch's and DeepSpeed's engines; not with --framework %s",
     {A_FW_NAME}},
    {O, {F_PAR_ZERO, F_PAR_FSDP}, USAGE,
     "--zero and --fsdp are two engines' sharding (DeepSpeed's, PyTorch's): give one", {A_NONE}},
    {O, {F_PAR_WORLD_MISMATCH}, USAGE,
     "--gpus %s is not --nodes x --gpus-per-node (world = DP x TP x PP x CP)", {A_GPUS}},
    {O, {F_PAR_PER_NODE_ALONE}, USAGE, "--gpus-per-node needs --nodes or --gpus", {A_NONE}},
    {O, {F_PAR_PER_NODE_DIVIDES}, USAGE,
     "the world size %s is not a multiple of --gpus-per-node %s", {A_WORLD, A_PER_NODE}},
    {O, {F_PAR_RANK_OUT}, USAGE, "--rank %s: outside the world of %s ranks", {A_RANK, A_WORLD}},
    {O, {F_PAR_OFFLOAD, NOT(F_PAR_ZERO)}, USAGE,
     "--offload is DeepSpeed ZeRO's offload_optimizer / offload_param: add --zero 1, 2 or 3",
     {A_NONE}},
    {O, {F_PAR_OFFLOAD_PARAMS, NOT(F_PAR_ZERO3)}, USAGE,
     "--offload params (offload_param) needs --zero 3, which partitions the parameters", {A_NONE}},
    {O, {F_PAR_WRAP, NOT(F_PAR_FSDP)}, USAGE, "--fsdp-wrap applies to --fsdp", {A_NONE}},
    {O, {F_PAR_DDP_OPTS, F_PAR_ZERO}, USAGE,
     "--ddp-bucket-mb and --ddp-bucket-view are DistributedDataParallel's; not with --zero or --fsdp",
     {A_NONE}},
    {O, {F_PAR_DDP_OPTS, F_PAR_FSDP}, USAGE,
     "--ddp-bucket-mb and --ddp-bucket-view are DistributedDataParallel's; not with --zero or --fsdp",
     {A_NONE}},
    {O, {F_PAR_ZERO_OPTS, NOT(F_PAR_ZERO)}, USAGE,
     "--zero-bucket-size, --zero-prefetch-size and --zero-persist-threshold apply to --zero",
     {A_NONE}},
    {O, {F_PAR_Z3_OPTS, F_PAR_ZERO, NOT(F_PAR_ZERO3)}, USAGE,
     "--zero-prefetch-size and --zero-persist-threshold are stage 3's: --zero 3", {A_NONE}},
    {O, {F_PAR_ZERO, F_PAR_SHAPED_OPT}, UNSUP,
     "--zero with adafactor or adam8bit is not modelled (their state follows each parameter's "
     "shape; ZeRO's flat partition is modelled for sgd, sgd-momentum, adam, adamw, adamw-fused, "
     "rmsprop, adagrad)", {A_NONE}},
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
    {O, {F_GENERATE, F_KEEP_OUTPUTS}, USAGE,
     "--keep-outputs applies to --mode train and infer (generate() lets each step's outputs go "
     "itself)", {A_NONE}},
    {O, {F_OTHER_FW, F_KEEP_OUTPUTS}, UNSUP,
     "--keep-outputs models a PyTorch loop's Python variable; not with --framework %s",
     {A_FW_NAME}},
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
    /* on the CPU every framework's runtime is modelled (PyTorch's eager
     * kernels, TensorFlow's CPU BFC allocator, MXNet's executor and host
     * storage, XLA's CPU buffer assignment) but JAX's op-by-op eager mode */
    {O, {F_JAX, NOT(F_JAX_JIT), NOT(F_CUDA)}, USAGE,
     "--framework %s --jax-execution eager: on the CPU only JAX's jitted step is modelled (XLA's "
     "CPU buffer assignment); use --jax-execution jit or --device cuda", {A_FW_NAME}},
    {O, {F_OTHER_FW, F_ALLOC_ROUND}, USAGE,
     "--alloc-round: replaces PyTorch's caching allocator; not with --framework %s", {A_FW_NAME}},
    {O, {F_TORCH_BAD}, USAGE, "torch version %s: expected major*100+minor", {A_TORCH}},
    {O, {F_TORCH_UNMODELLED}, UNSUP,
     "PyTorch %s.%s is not modelled: dnnmem has PyTorch's rules for 1.10 to 2.15 (measured at "
     "1.13, 2.11, 2.13, 2.14.1 and 2.15.0); pass the one to take, e.g. --framework pytorch@2.15",
     {A_TORCH_MAJOR, A_TORCH_MINOR}},
    {O, {F_TRANSFORMERS_BAD}, USAGE, "transformers version %s: expected major*100+minor",
     {A_TRANSFORMERS}},
    /* GenericForSequenceClassification raises "Cannot handle batch sizes > 1
     * if no padding token is defined." */
    {O, {F_SEQCLS_NO_PAD_BATCH}, UNSUP,
     "%s: --batch-size %s: a ForSequenceClassification head without pad_token_id takes a batch of "
     "1 (transformers: \"Cannot handle batch sizes > 1 if no padding token is defined\")",
     {A_PATH, A_BATCH}},
    {O, {F_TRANSFORMERS, NOT(F_HF)}, USAGE,
     "%s: --transformers applies to HuggingFace config.json models", {A_PATH}},
    {O, {F_TRANSFORMERS_UNMODELLED}, UNSUP,
     "--transformers %s.%s is not modelled: dnnmem builds transformers 4.40 to 5.25 (4.40 to "
     "4.47 for gpt_neox and opt only, 4.48 to 4.50 also llama, mistral, gemma and gpt2; its "
     "memory behaviour read at 4.42, 4.45, 4.46, 4.49, 4.52, 4.54, 4.56, 5.0, 5.25 and, for "
     "MoE experts, 5.3, 5.4 and 5.8; measured at 4.42.4, 4.46.3, 4.48.3, 4.49.0, 4.51.3, "
     "4.56.2, 5.0.0, 5.24.0 and 5.25.0)",
     {A_TF_MAJOR, A_TF_MINOR}},
    {O, {F_ATTN_BAD}, USAGE, "unknown attention implementation %s", {A_ATTN}},
    {O, {F_ATTN, NOT(F_HF)}, USAGE,
     "%s: --attn applies to HuggingFace config.json models; an ONNX graph's attention is the "
     "ops it holds", {A_PATH}},
    /* the CPU's sdpa: its flash kernel, or the math one under dropout
     * (hf/attention.c, cpu_flash); a forced kernel there is not modelled */
    {O, {F_SDPA_BACKEND, F_CPU}, UNSUP,
     "%s: --sdpa-backend on the CPU is not modelled: the CPU's sdpa is modelled as PyTorch "
     "picks it (its flash kernel, the math one under dropout); drop --sdpa-backend",
     {A_PATH}},
    {O, {F_ATTN_SDPA, F_TORCH_PRE_2}, USAGE,
     "%s: --attn sdpa needs PyTorch 2.0 or later (F.scaled_dot_product_attention)", {A_PATH}},
    {O, {F_ATTN_SDPA, F_NO_SDPA_YET}, UNSUP,
     "%s: --attn sdpa: transformers %s.%s has no sdpa attention for this model (GPT-NeoX has "
     "one from 4.42, OPT from 4.46); use --attn eager or auto", {A_PATH, A_TF_MAJOR, A_TF_MINOR}},
    {O, {F_FLASH, F_NO_SDPA_YET}, UNSUP,
     "%s: --attn flash: transformers %s.%s's flash_attention_2 for this model (its own class "
     "before 4.49) is not modelled; use --attn eager", {A_PATH, A_TF_MAJOR, A_TF_MINOR}},
    {O, {F_ATTN_SDPA, F_EAGER_ONLY}, UNSUP,
     "%s: --attn sdpa: transformers has no sdpa attention for this model (T5Attention is eager "
     "only; gpt_oss sets _supports_sdpa False); use --attn eager or auto", {A_PATH}},
    /* flash_attention_2 runs in fp16/bf16 only (transformers casts float32
     * q, k, v to the autocast dtype, else to the Linear weights' dtype, and
     * flash_attn_func refuses float32) on Ampere and later (flash-attn's
     * README: FlashAttention-2 supports sm80+; head dims up to 256) */
    {O, {F_FLASH, NOT(F_CUDA)}, UNSUP,
     "%s: --attn flash: flash_attention_2 runs on CUDA only, for models transformers gives one",
     {A_PATH}},
    {O, {F_FLASH, F_EAGER_ONLY}, UNSUP,
     "%s: --attn flash is not modelled for this model (T5 has no flash path; gpt_oss's passes "
     "its sinks to the hub's flash kernels); use --attn eager",
     {A_PATH}},
    {O, {F_FLASH, F_FP32}, USAGE,
     "%s: --attn flash: FlashAttention-2 runs in fp16/bf16 only; add --precision bf16, fp16, "
     "amp-bf16 or amp-fp16", {A_PATH}},
    {O, {F_FLASH, F_PRE_SM80}, USAGE,
     "%s: --attn flash: FlashAttention-2 needs compute capability 8.0 or later (this GPU: %s.%s)",
     {A_PATH, A_CC_MAJOR, A_CC_MINOR}},
    /* --sdpa-backend: sdpa_kernel(SDPBackend.X) around the step; whether
     * PyTorch takes the forced kernel for each call is found as the graph
     * is built (dm_load_hf; the F_R_SDPA_KERNEL row) */
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
    /* the graph built for the options: first what its builder refused (the
     * build stopped there; rows of other facts would read half a graph) */
    /* flash_attention_2 as transformers runs it, per model type (src/load/hf/
     * frame.c, hf_check; hf.c's registry has the release from which each has
     * it) */
    {G, {F_R_FLASH_RELEASE}, UNSUP,
     "%s: --attn flash: transformers %s.%s's BioGPT has no flash_attention_2 (from 4.52 it has: "
     "--transformers 4.52); use --attn sdpa or eager", {A_PATH, A_TFV_MAJOR, A_TFV_MINOR}},
    {G, {F_R_FLASH_MODEL}, UNSUP,
     "%s: --attn flash: flash_attention_2 for model_type '%s' is not modelled (modelled: llama, "
     "mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, gemma, gemma2, gemma3, phi3, phi, "
     "gpt2, opt, gpt_neox, falcon, distilbert, biogpt, vit; transformers 4.51's bert, roberta, "
     "albert and t5 have none); use --attn sdpa or eager", {A_PATH, A_R_NAME}},
    /* transformers 5.0-5.2 pick the "eager" experts implementation where
     * is_grouped_mm_available() is false (PyTorch before 2.9;
     * get_correct_experts_implementation): a loop over slices of the 3-D
     * expert parameters (src/load/hf/moe.c, hf_grouped_experts) */
    {G, {F_R_MOE_EAGER}, UNSUP,
     "%s: transformers %s.%s runs MoE experts with its \"eager\" loop over the 3-D parameters' "
     "slices before PyTorch 2.9, which is not modelled (modelled: grouped_mm, with "
     "--framework pytorch@2.9 or later, or --transformers 5.3 or later)",
     {A_PATH, A_TFV_MAJOR, A_TFV_MINOR}},
    /* 5.x's experts are 3-D parameters, not the nn.Linear layers the
     * quantized-linear model (src/load/hf/quant.c) replaces; how each
     * quantizer stores and runs them (FineGrainedFP8's fp8 experts
     * functions, bitsandbytes leaving them unquantized) is not modelled */
    {G, {F_R_MOE_QUANT}, UNSUP,
     "%s: transformers %s.%s's MoE experts (3-D parameters) under quantization are not modelled "
     "(the quantized-linear model covers nn.Linear layers: 4.x's experts); use --transformers "
     "4.56",
     {A_PATH, A_TFV_MAJOR, A_TFV_MINOR}},
    /* BitsAndBytesConfig on a checkpoint that has its own quantization_config */
    {G, {F_R_QUANT_TWICE}, USAGE,
     "%s: --quant: the config is quantized already (quant_method '%s')", {A_PATH, A_R_NAME}},
    /* sdpa_kernel(SDPBackend.X) with a kernel select_sdp_backend does not
     * take for one of the model's calls (src/load/hf/attention.c,
     * sdpa_forced_ok, says why) */
    {G, {F_R_SDPA_KERNEL}, UNSUP,
     "%s: --sdpa-backend %s: PyTorch has no such kernel for this model's attention (%s): \"No "
     "available kernel\"; use --sdpa-backend auto or math", {A_PATH, A_R_NAME, A_R_WHY}},
    /* Gemma 2/3's HybridCache: static caches sized by the prompt (gemma.c) */
    {G, {F_R_HYBRID_PROMPT}, USAGE,
     "%s: --mode generate: a HybridCache's size needs the prompt length (--seq-len N or --dim "
     "seq=N)", {A_PATH}},
    {G, {F_R_HYBRID_FLASH}, UNSUP,
     "%s: --mode generate with --attn flash: flash_attention_2 over a HybridCache is not "
     "modelled; use --attn sdpa or eager", {A_PATH}},
    {G, {F_R_HYBRID_LONG}, DNNMEM_E_SHAPE, "%s: --mode generate: a prompt of %s tokens; at most %s",
     {A_PATH, A_R_VALUE, A_R_LIMIT}},
    /* generate()'s caches: Gemma 2/3's config names its class (gemma.c), T5
     * decodes step by step from its decoder's (t5.c) */
    {G, {F_R_GEN_CACHE_IMPL}, UNSUP,
     "%s: config field 'cache_implementation' is '%s'; --mode generate models 'hybrid' and "
     "'dynamic'", {A_PATH, A_R_NAME}},
    {G, {F_R_GEN_NO_USE_CACHE}, UNSUP,
     "%s: --mode generate needs the decoder's cache (config use_cache true); generation "
     "recomputing every position is not modelled", {A_PATH}},
    /* prepare_model_for_kbit_training's gradient_checkpointing_enable (kbit.c) */
    {G, {F_R_KBIT_NO_GC}, UNSUP,
     "%s: --kbit-prep: transformers' ALBERT does not support gradient checkpointing "
     "(gradient_checkpointing_enable raises); use --kbit-prep-no-gc", {A_PATH}},
    {G, {F_R_KBIT_LISTS}, UNSUP,
     "%s: --kbit-prep: gradient checkpointing of this model's layers is not modelled (more than "
     "two layer lists)", {A_PATH}},
    {G, {F_R_KBIT_NO_LIST}, UNSUP, "%s: --kbit-prep: the model has no layer list to checkpoint",
     {A_PATH}},
    /* PEFT's get_peft_model raises when a target_modules name matches no module */
    {G, {F_R_LORA_TARGET}, USAGE,
     "%s: --lora-targets %s: no linear module of the model is named so", {A_PATH, A_R_NAME}},
    /* get_peft_model raises "Please specify `target_modules`" for a model type
     * missing from PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING */
    {G, {F_R_LORA_NO_DEFAULT}, USAGE,
     "%s: --lora-r: PEFT has no default target_modules for model_type '%s'; name them with "
     "--lora-targets (e.g. q_proj,v_proj)", {A_PATH, A_R_NAME}},
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
    /* the dims bound: --input-shape, --dim, --batch-size, --seq-len */
    {B, {F_SHAPE_RANK}, USAGE, "--input-shape %s: give 1 to %s dims", {A_B_NAME, A_MAX_DIMS}},
    {B, {F_SHAPE_DIM}, USAGE, "--input-shape %s: dim %s is %s; every dim must be >= 1",
     {A_B_NAME, A_B_INDEX, A_B_VALUE}},
    {B, {F_SHAPE_NO_INPUT}, USAGE, "--input-shape %s: %s has no input of that name (its inputs: %s)",
     {A_B_NAME, A_PATH, A_B_LIST}},
    {B, {F_SHAPE_TWICE}, USAGE, "--input-shape %s: given twice", {A_B_NAME}},
    {B, {F_SHAPE_RANKS}, USAGE, "--input-shape %s: %s dims given, but %s declares the input with %s: [%s]",
     {A_B_NAME, A_B_RANK, A_PATH, A_B_DECL_RANK, A_B_DECL}},
    {B, {F_SHAPE_FIXED}, USAGE, "--input-shape %s: dim %s is %s, but %s fixes it at %s ([%s])",
     {A_B_NAME, A_B_INDEX, A_B_VALUE, A_PATH, A_B_OTHER, A_B_DECL}},
    {B, {F_SHAPE_SYMBOL}, USAGE, "--input-shape %s: dim '%s' is %s here but %s in --input-shape %s",
     {A_B_NAME, A_B_DIM, A_B_VALUE, A_B_OTHER, A_B_BY}},
    {B, {F_DIM_VALUE}, USAGE, "--dim %s=%s: the value must be a non-negative integer",
     {A_B_NAME, A_B_VALUE}},
    {B, {F_DIM_UNKNOWN}, USAGE, "--dim %s: %s has no dim of that name (it has: %s)",
     {A_B_NAME, A_PATH, A_B_LIST}},
    {B, {F_DIM_BEAMS}, USAGE, "--dim %s x --num-beams %s overflows", {A_B_NAME, A_BEAMS}},
    {B, {F_DIM_SHAPE}, USAGE, "--dim %s=%s disagrees with --input-shape %s, which makes it %s",
     {A_B_NAME, A_B_VALUE, A_B_BY, A_B_OTHER}},
    {B, {F_BATCH_SHAPE}, USAGE, "--batch-size: the batch dim '%s' is set by --input-shape %s already",
     {A_B_NAME, A_B_BY}},
    {B, {F_BATCH_BEAMS}, USAGE, "--batch-size %s x --num-beams %s overflows", {A_BATCH, A_BEAMS}},
    {B, {F_NO_SHAPE}, DNNMEM_E_UNBOUND,
     "%s: input '%s' declares no shape; give it one with --input-shape %s=D1,D2,... (--batch-size "
     "then replaces its first dim)", {A_PATH, A_B_NAME, A_B_NAME}},
    {B, {F_NO_BATCH}, USAGE,
     "--batch-size: %s has no symbolic batch dim to bind (its input dims are fixed or named "
     "otherwise; see --dim)", {A_PATH}},
    {B, {F_NO_SEQ}, USAGE, "--seq-len: %s has no symbolic sequence dim to bind (see --dim)",
     {A_PATH}},
    /* the shapes inferred */
    {DM_CHECK_SHAPES, {F_AMP, NOT(F_CUDA)}, UNSUP,
     "--precision amp-*: autocast on the CPU (bf16, other op lists) is not modelled", {A_NONE}},
    /* the schedule about to be built: a generation's cache (when the graph
     * returns one; src/schedule/generate.c refuses when it does not, the
     * F_R_GEN_NO_CACHE row) */
    {DM_CHECK_SCHEDULE, {F_GENERATE, F_LEGACY_CACHE, F_RETURNS_CACHE, F_KV_DTYPE}, UNSUP,
     "%s: --kv-dtype needs a Cache class; transformers 4.51 keeps this model's legacy tuple cache "
     "(GPT-2, BioGPT) in the model's dtype", {A_PATH}},
    /* the schedule as built: what its builder refused (src/train/,
     * src/schedule/; it failed there) */
    /* torch.utils.checkpoint segments from the --checkpoint specs
     * (src/train/checkpoint.c) */
    {S, {F_R_CKPT_LONG}, USAGE, "--checkpoint %s: pattern too long", {A_R_NAME}},
    {S, {F_R_CKPT_EVERY}, USAGE, "--checkpoint %s: ':K' must be a positive count", {A_R_NAME}},
    {S, {F_R_CKPT_OVERLAP}, USAGE, "--checkpoint %s overlaps another segment at node '%s'",
     {A_R_NAME, A_R_WHY}},
    {S, {F_R_CKPT_UNMATCHED}, USAGE,
     "--checkpoint %s: no node of %s matches (node names look like '%s')",
     {A_R_NAME, A_PATH, A_R_WHY}},
    {S, {F_R_NOTHING_TO_TRAIN, F_QUANTIZED}, USAGE,
     "%s: the first output does not depend on any trainable parameter; nothing to train (no grad "
     "passes through the quantized layers' kernels: adapt the layers after the last adapted one, "
     "or for gptq set use_exllama false)", {A_PATH}},
    {S, {F_R_NOTHING_TO_TRAIN}, USAGE,
     "%s: the first output does not depend on any trainable parameter; nothing to train",
     {A_PATH}},
    {S, {F_R_GEN_NO_DECODER_CACHE}, UNSUP,
     "%s: --mode generate needs the decoder's cache (config use_cache true)", {A_PATH}},
    {S, {F_R_GEN_NO_CACHE}, UNSUP,
     "%s: --mode generate needs a HuggingFace causal LM that returns its KV cache (config "
     "use_cache true)", {A_PATH}},
    /* the runtime of another framework: its memory limit and allocator */
    {R, {F_TF, F_TF_LIMIT_ZERO}, USAGE, "--tf-memory-limit: must be positive", {A_NONE}},
    {R, {F_TF, NOT(F_TF_LIMIT), F_CAPACITY, F_TF_NO_ROOM}, USAGE,
     "--framework tensorflow: the device (%s) leaves nothing to TensorFlow after the CUDA context "
     "(%s) and MinSystemMemory (%s)", {A_CAPACITY, A_CONTEXT, A_TF_MIN_SYSTEM}},
    {R, {F_JAX, F_JAX_FRACTION_BAD}, USAGE, "--jax-mem-fraction %s: expected a fraction in (0, 1]",
     {A_JAX_FRACTION}},
    {R, {F_MXNET, F_MX_PAGE_BAD}, USAGE,
     "--mxnet-page-size %s: expected at least 32 (a power of two with Round)", {A_MX_PAGE}},
    {R, {F_MXNET, F_MX_CUTOFF_BAD}, USAGE, "--mxnet-round-cutoff %s: expected 20..34",
     {A_MX_CUTOFF}},
    {R, {F_MXNET, F_MX_RESERVE_BAD}, USAGE, "--mxnet-reserve %s: expected a percentage 0..100",
     {A_MX_RESERVE}},
    {R, {F_MXNET, F_CAPACITY, F_NO_ROOM}, USAGE,
     "--framework mxnet: the device (%s) leaves nothing after the CUDA context (%s)",
     {A_CAPACITY, A_CONTEXT}},
};

#undef O
#undef G
#undef S
#undef R
#undef B
#undef USAGE
#undef UNSUP

static const char *arg_text(enum arg a, const struct dm_graph *g, const struct dm_est_opts *o,
                            const struct dm_bind *bd, const struct dm_refusal *rf, char buf[64])
{
    const struct dnnmem_config *c = &o->cfg;
    long long n;
    switch (a) {
    case A_NONE: return "";
    case A_PATH: return g->path;
    case A_FW_NAME: return dnnmem_framework_name(c->framework);
    case A_FW_VERSION: return c->framework_version;
    case A_QUANT_METHOD: return g->quant_method;
    case A_TOP_P: snprintf(buf, 64, "%g", c->top_p); return buf;
    case A_TEMPERATURE: snprintf(buf, 64, "%g", c->temperature); return buf;
    case A_JAX_FRACTION: snprintf(buf, 64, "%g", dm_default_real(&o->d, JAX_MEM_FRACTION)); return buf;
    case A_MX_PAGE: snprintf(buf, 64, "%llu", (unsigned long long)c->mxnet_page_size); return buf;
    case A_CAPACITY: return dm_format_bytes((uint64_t)c->capacity_bytes, buf);
    case A_CONTEXT: return dm_format_bytes((uint64_t)dm_default_int(&o->d, CUDA_CONTEXT), buf);
    case A_TF_MIN_SYSTEM:
        return dm_format_bytes((uint64_t)dm_default_int(&o->d, TF_MIN_SYSTEM_MEMORY), buf);
    case A_B_NAME: return bd->name;
    case A_B_BY: return bd->by;
    case A_B_DIM: return bd->dim;
    case A_B_LIST: return bd->list;
    case A_B_DECL: return bd->decl;
    case A_R_NAME: return rf->name;
    case A_R_WHY: return rf->why;
    case A_R_VALUE: n = rf->value; break;
    case A_R_LIMIT: n = rf->limit; break;
    case A_TFV_MAJOR: n = o->transformers / 100; break;
    case A_TFV_MINOR: n = o->transformers % 100; break;
    case A_B_VALUE: n = bd->value; break;
    case A_B_OTHER: n = bd->other; break;
    case A_B_INDEX: n = bd->index; break;
    case A_B_RANK: n = bd->rank; break;
    case A_B_DECL_RANK: n = bd->decl_rank; break;
    case A_BATCH: n = dm_default_int(&o->d, BATCH); break;
    case A_GPUS: n = c->par.gpus; break;
    case A_WORLD: n = par_world(c); break;
    case A_PER_NODE: n = c->par.gpus_per_node; break;
    case A_TP: n = c->par.tp; break;
    case A_PP: n = c->par.pp; break;
    case A_MICRO: n = pp_micro(c); break;
    case A_CP: n = c->par.cp; break;
    case A_RANK: n = c->par.rank; break;
    case A_MAX_DIMS: n = DM_MAX_DIMS; break;
    case A_MX_CUTOFF: n = c->mxnet_round_cutoff; break;
    case A_MX_RESERVE: n = c->mxnet_reserve_percent; break;
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
    case A_TORCH_MAJOR: n = c->torch_version / 100; break;
    case A_TORCH_MINOR: n = c->torch_version % 100; break;
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
    snprintf(buf, 64, "%lld", n);
    return buf;
}

static enum dnnmem_status breach(const struct check *k, const struct dm_graph *g,
                                 const struct dm_est_opts *o, const struct dm_bind *bd,
                                 const struct dm_refusal *rf, struct dnnmem_error *err)
{
    char msg[1024], arg[64];
    size_t len = 0, next = 0;
    for (const char *p = k->text; *p && len + 1 < sizeof msg; p++) {
        if (p[0] == '%' && p[1] == 's' && next < MAX_ARGS) {
            const char *s = arg_text(k->args[next++], g, o, bd, rf, arg);
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

static enum dnnmem_status check_phase(enum dm_check_phase phase, const struct dm_graph *g,
                                      const struct dm_est_opts *o, const struct dm_bind *bd,
                                      const struct dm_refusal *rf, struct dnnmem_error *err)
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
            return breach(k, g, o, bd, rf, err);
    }
    if (rf && rf->kind != DM_REFUSE_NONE) /* every refusal has its row */
        return dm_fail(err, DNNMEM_E_INTERNAL, "%s: refusal %d has no check row", g->path,
                       (int)rf->kind);
    return DNNMEM_OK;
}

enum dnnmem_status dm_est_check(enum dm_check_phase phase, const struct dm_graph *g,
                                const struct dm_est_opts *o, struct dnnmem_error *err)
{
    return check_phase(phase, g, o, NULL, phase == DM_CHECK_GRAPH ? &g->refusal : NULL, err);
}

enum dnnmem_status dm_est_check_built(const struct dm_graph *g, const struct dm_est_opts *o,
                                      const struct dm_refusal *rf, struct dnnmem_error *err)
{
    return check_phase(DM_CHECK_BUILT, g, o, NULL, rf, err);
}

enum dnnmem_status dm_est_check_bind(const struct dm_graph *g, const struct dm_est_opts *o,
                                     const struct dm_bind *b, struct dnnmem_error *err)
{
    enum dnnmem_status s = check_phase(DM_CHECK_BIND, g, o, b, NULL, err);
    if (s == DNNMEM_OK && b->breach) /* every breach has its row */
        return dm_fail(err, DNNMEM_E_USAGE, "%s: the dims cannot be bound", g->path);
    return s;
}
