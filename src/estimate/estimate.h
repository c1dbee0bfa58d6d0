/*
 * estimate.h: dnnmem_estimate as stages (src/api.c wires them), in order:
 *
 *   check.c     the options: what they mean (struct dm_est_opts) and the
 *               table of the checks they must pass (each row run by the
 *               stage that can tell, enum dm_check_phase)
 *   variant.c   the graph the options need (attention, LoRA, quantization,
 *               release), built on first use and kept in the model handle
 *   defaults.c  the defaults (one table, DM_DEFAULTS: key, how derived,
 *               source; its values worked out in assume.c, below the
 *               stages), the run (struct dm_run), the runtime's figures
 *               (context, workspaces) and the assumptions they print
 *   shapes.c    symbolic dims bound, shapes inferred, the precision applied
 *   schedule.c  the framework's schedule (eager, MXNet's plan, XLA's)
 *   replay.c    the schedule through the framework's allocator: the result
 *
 * Each stage reads what the earlier ones wrote into struct dm_est and adds
 * its own part; none keeps state between estimates but the graph variants.
 */
#ifndef DNNMEM_ESTIMATE_H
#define DNNMEM_ESTIMATE_H

#include "dnnmem-impl.h"

/* The assumptions an estimate prints, in order (values in the arena). */
struct dm_assumptions {
    struct dnnmem_assumption a[64];
    size_t n;
    struct dm_arena *arena;
};

void dm_assume(struct dm_assumptions *as, const char *key, const char *source, const char *fmt, ...)
    DM_PRINTF(4, 5);

/* The defaults, one row each (their values: assume.c; the assumptions
 * that print them: defaults.c): the name, the value's type (INT
 * or REAL: read with dm_default_int or dm_default_real), the key of the
 * assumption whose source ("option" or "default") it decides, whether the
 * caller's option sets it, the value then, and how the default is derived
 * otherwise (c: the options, o: their meaning, g: the loaded graph, d: the
 * rows above). Every row's option is in src/options.def. */
#define DM_DEFAULTS(X)                                                                             \
    /* PyTorch 2.6 (DM_TORCH_DEFAULT), the release current when transformers                      \
     * 4.51 came out (April 2025); read by the schedule's rules and, through                       \
     * variant.c (struct dm_hf_env), by the HuggingFace builder */                                 \
    X(TORCH, INT, "framework", c->torch_version != 0, c->torch_version, DM_TORCH_DEFAULT)          \
    /* transformers 5.25 (DM_TRANSFORMERS_DEFAULT), the newest release modelled                   \
     * (issue 14: a user's default is the newest, printed with the result); the                   \
     * graph as loaded is 4.51's (DM_TRANSFORMERS_BASE), the release the families                  \
     * of src/load/hf/ are written against; the HuggingFace builder reads the                      \
     * row through variant.c */                                                                    \
    X(TRANSFORMERS, INT, "transformers", c->transformers_version != 0, c->transformers_version,    \
      DM_TRANSFORMERS_DEFAULT)                                                                     \
    /* a HuggingFace config runs in its torch_dtype (dtype from transformers                    \
     * 5): what from_pretrained(torch_dtype="auto") loads, and transformers 5                      \
     * by default (dtype="auto", PR #34919; measured: Qwen3-0.6B's bfloat16                        \
     * config built by from_config in 5.17 runs in bf16); 4.x without                              \
     * torch_dtype loads float32 (--precision fp32). A quantized checkpoint's                      \
     * quantizer sets its own (shapes.c); other models run as stored */                            \
    X(PRECISION, INT, "precision", c->precision_set || c->precision != DNNMEM_PRECISION_FP32,     \
      c->precision, dm_precision_default(o, g))                                                    \
    /* training a HuggingFace config: the Trainer's optimizer, TrainingArguments'                  \
     * optim default "adamw_torch" (torch.optim.AdamW), "adamw_torch_fused" on                      \
     * PyTorch 2.8+ from transformers 4.54 (PR #37358; training_args.py, 4.56                       \
     * and 5.24: is_torch_greater_or_equal_than_2_8); other models: SGD with                       \
     * momentum (dnnmem's own) */                                                                  \
    X(OPTIMIZER, INT, "optimizer", c->optimizer_set || c->optimizer != DNNMEM_OPT_SGD_MOMENTUM,   \
      c->optimizer,                                                                                \
      !o->hf ? DNNMEM_OPT_SGD_MOMENTUM                                                             \
      : d->value[DM_D_TORCH] >= 208 && d->value[DM_D_TRANSFORMERS] >= 454 ? DNNMEM_OPT_ADAMW_FUSED \
                                                                          : DNNMEM_OPT_ADAMW)      \
    X(ITERATIONS, INT, "iterations", c->iterations != 0, c->iterations, 2)                         \
    X(GRAD_ACCUM, INT, "grad_accum", c->grad_accum != 0, c->grad_accum, 1)                         \
    /* one prompt, one sample: a batch of 1 (--batch-size) */                                      \
    X(BATCH, INT, "dims.*", c->batch_size > 0, c->batch_size, 1)                                   \
    /* MXNET_EXEC_INPLACE_GRAD_SUM_CAP's default (graph_executor.cc, AggregateGradient) */         \
    X(MX_GRAD_SUM_CAP, INT, "mx_ops", c->mxnet_grad_sum_cap != 0, c->mxnet_grad_sum_cap, 8)        \
    /* MXNet's rules are read at 1.9 (1.9.1, its last release) unless                              \
     * --framework mxnet@V names another (major * 100 + minor) */                                  \
    X(MX_VERSION, INT, "mx_ops", c->framework == DNNMEM_FW_MXNET && o->fw_version >= 0,            \
      o->fw_version / 100, 109)                                                                    \
    /* GenerationConfig's top_k (a negative --top-k: none), top_p and                              \
     * temperature (1.0: no warper; generation/configuration_utils.py) */                          \
    X(TOP_K, INT, "top_k", c->top_k != 0, c->top_k < 0 ? 0 : c->top_k, 50)                         \
    X(TOP_P, REAL, "top_p", c->top_p != 0, c->top_p, 1.0)                                          \
    X(TEMPERATURE, REAL, "temperature", c->temperature != 0, c->temperature, 1.0)                  \
    /* PEFT's LoraConfig lora_alpha (tuners/lora/config.py): scales, costs no                      \
     * memory; the HuggingFace builder's (struct dm_hf_env, via variant.c) */                      \
    X(LORA_ALPHA, REAL, "lora", c->lora.alpha > 0, c->lora.alpha, 8)                               \
    /* the CUDA toolkit each framework's wheels are built with: PyTorch 2.6's                      \
     * default pip wheel is cu124 (pytorch.org, previous versions: `pip install                    \
     * torch==2.6.0` installs the CUDA 12.4 build); TensorFlow 2.15's tested build                 \
     * configuration is CUDA 12.2 (tensorflow.org/install/source#gpu); jax[cuda12]                 \
     * installs CUDA 12.x libraries from pip (12.2 taken); MXNet's last releases                   \
     * (1.9.1) ship wheels up to mxnet-cu112 (CUDA 11.2) */                                        \
    X(CUDA, INT, "cuda", c->cuda_version != 0, c->cuda_version,                                    \
      c->framework == DNNMEM_FW_PYTORCH ? 124 : c->framework == DNNMEM_FW_MXNET ? 112 : 122)       \
    /* compute capability 8.0 (DM_CC_DEFAULT, an A100), or the least the                          \
     * quantized checkpoint's kernels run on (fp8: 8.9,                                            \
     * FineGrainedFP8HfQuantizer.validate_environment); the run's                                  \
     * (dm_run.compute_capability), the HuggingFace builder's (struct                              \
     * dm_hf_env: forced sdpa kernels, fused attention) and the key of the                         \
     * graph variant built for it (variant.c) */                                                   \
    X(CC, INT, "cuda", c->compute_capability != 0, c->compute_capability,                          \
      g->quant_min_cc > DM_CC_DEFAULT ? g->quant_min_cc : DM_CC_DEFAULT)                           \
    /* the CUDA caching allocator's 512 B blocks; the CPU's exact sizes */                         \
    X(ALLOC_ROUND, INT, "allocator", c->alloc_round_bytes >= 0, c->alloc_round_bytes,              \
      c->device == DNNMEM_DEVICE_CUDA ? DNNMEM_ALLOC_ROUND_DEFAULT : 1)                            \
    X(CONV_WORKSPACE, INT, "conv_workspace", c->conv_workspace_bytes >= 0,                         \
      c->conv_workspace_bytes, 0)                                                                  \
    /* the CUDA context: by PyTorch, CUDA version and compute capability                           \
     * (dnnmem_cuda_context_default, its sources in assume.c); other                               \
     * frameworks do not set CUDA_MODULE_LOADING=LAZY as PyTorch does (1.13+,                      \
     * PR #86509): kernels load lazily only from CUDA 12.2, where lazy loading                     \
     * is the default on Linux (NVIDIA CUDA programming guide, "Lazy                               \
     * Loading"), else eagerly; no context was measured for them, PyTorch's                        \
     * figures stand in (runtime-facts 5.1); none on the CPU */                                    \
    X(CUDA_CONTEXT, INT, "cuda_context", c->cuda_context_bytes >= 0, c->cuda_context_bytes,        \
      dm_context_default(c, d))                                                                    \
    /* cuBLAS's workspace per handle, through PyTorch's allocator                                  \
     * (CublasHandlePool.cpp; dnnmem_cublas_workspace_default, its sources in                      \
     * assume.c); other frameworks' cuBLAS allocates its own outside their                         \
     * allocators (only PyTorch routes it through its allocator): none scheduled */                \
    X(CUBLAS_WORKSPACE, INT, "cublas_workspace", c->cublas_workspace_bytes >= 0,                   \
      c->cublas_workspace_bytes,                                                                   \
      o->other_fw ? 0 : dnnmem_cublas_workspace_default((int)d->value[DM_D_TORCH],                 \
                                                        (int)d->value[DM_D_CC]))                   \
    /* XLA passes each cuBLAS call a workspace of its own, an extra s8 output of                   \
     * the custom call (gemm_rewriter.cc, GemmWorkspaceRewriteVisitor), sized by                   \
     * GemmConfig::kHopperWorkspace (32 MiB, sm90+) or kDefaultWorkspace (4 MiB)                   \
     * (xla/service/gpu/matmul_utils.h): a value of the temp buffer live during the                \
     * call (every cuBLAS call of the 16 measured steps, tools/gpu/results/                        \
     * jax-hlo.tar.gz, carries s8[33554432]) */                                                    \
    X(XLA_GEMM_WORKSPACE, INT, "cublas_workspace", c->cublas_workspace_bytes >= 0,                 \
      c->cublas_workspace_bytes,                                                                   \
      d->value[DM_D_CC] >= 90 ? DM_XLA_GEMM_WORKSPACE_HOPPER : DM_XLA_GEMM_WORKSPACE_DEFAULT)      \
    /* TensorFlow's MinSystemMemory (gpu_device.cc): what it leaves to the                         \
     * system out of the free memory at device creation (dm_tf_min_system_memory) */               \
    X(TF_MIN_SYSTEM_MEMORY, INT, "memory_limit", c->tf_min_system_memory_bytes >= 0,               \
      c->tf_min_system_memory_bytes, dm_tf_min_system_memory(c, o, d))                             \
    /* XLA_PYTHON_CLIENT_MEM_FRACTION: 0.75 since jaxlib 0.4.14, 0.9 before                        \
     * (JAX's changelog, jaxlib 0.4.14; GPU memory allocation docs) */                             \
    X(JAX_MEM_FRACTION, REAL, "memory_limit", c->jax_mem_fraction != 0, c->jax_mem_fraction,       \
      o->fw_version >= 0 && o->fw_version < 414 ? 0.9 : 0.75)                                      \
    /* below this share of the capacity left the verdict is "tight": dnnmem's                      \
     * own margin (include/dnnmem.h, --headroom), not a framework's */                             \
    X(HEADROOM, REAL, "capacity", c->headroom > 0, c->headroom, DM_HEADROOM_DEFAULT)

enum dm_default {
#define DM_X(name, type, key, set, option, dflt) DM_D_##name,
    DM_DEFAULTS(DM_X)
#undef DM_X
    DM_D_COUNT
};

struct dm_defaults {
    int64_t value[DM_D_COUNT]; /* the INT rows' values */
    double real[DM_D_COUNT];   /* the REAL rows' values */
    bool set[DM_D_COUNT];      /* by the caller's option */
};

struct dm_est_opts;
/* The table's values for the options o (their meaning filled in up to
 * fw_version) on the loaded graph g. */
void dm_est_defaults(const struct dm_est_opts *o, const struct dm_graph *g, struct dm_defaults *d);
/* "option" or "default", as the assumption of a row prints it. */
const char *dm_default_source(const struct dm_defaults *d, enum dm_default k);
/* The key of a row's assumption. */
const char *dm_default_key(enum dm_default k);
#define dm_default_int(d, name) ((d)->value[DM_D_##name])
#define dm_default_real(d, name) ((d)->real[DM_D_##name])

/* check.c: what the options mean, once they are known to be in range. */
struct dm_est_opts {
    struct dnnmem_config cfg; /* the caller's, with the precision transformers 5 picks */
    bool hf;                  /* a HuggingFace config.json model */
    bool generate;
    bool other_fw;            /* not PyTorch */
    bool mx_planned;          /* MXNet's symbolic executor plans the step */
    bool jax_jit;             /* JAX's jitted step (src/schedule/xla.c) */
    bool tf_graph;            /* TensorFlow under tf.function */
    bool cfg_dtype;           /* the precision is a HuggingFace config's 2-byte dtype */
    bool flash, sdpa, gqa;    /* the HF attention: flash_attention_2, sdpa, enable_gqa */
    bool rebuild;             /* the HF graph built for these options, not the loaded one */
    int64_t fw_version;       /* --framework X@V as a number, -1 = none */
    int torch, transformers;  /* versions, defaults applied */
    struct dm_defaults d;     /* the defaults table's values */
};

/* The check stages, in the order they run: the options alone
 * (DM_CHECK_OPTIONS, with `g` the loaded graph), the graph built for them
 * (DM_CHECK_GRAPH), the dims bound (DM_CHECK_BIND, dm_est_check_bind), the
 * shapes inferred, the runtime of another framework (DM_CHECK_RUNTIME: its
 * limit and allocator, before replay.c sets them up), the schedule about to
 * be built (DM_CHECK_SCHEDULE), what its builder refused (DM_CHECK_BUILT,
 * dm_est_check_built). DM_CHECK_GRAPH's first rows are what the graph's
 * builder refused (g->refusal). */
enum dm_check_phase {
    DM_CHECK_OPTIONS, DM_CHECK_GRAPH, DM_CHECK_BIND, DM_CHECK_SHAPES, DM_CHECK_RUNTIME,
    DM_CHECK_SCHEDULE, DM_CHECK_BUILT
};

/* What binding the dims (shapes.c) found wrong first, for the check
 * table's DM_CHECK_BIND rows, which say what error it is. */
enum dm_bind_breach {
    DM_BIND_OK,
    DM_BIND_SHAPE_RANK,     /* an --input-shape of no dims, or too many */
    DM_BIND_SHAPE_DIM,      /* an --input-shape dim below 1 */
    DM_BIND_SHAPE_NO_INPUT, /* an --input-shape naming no input */
    DM_BIND_SHAPE_TWICE,    /* an input given two --input-shape */
    DM_BIND_SHAPE_RANKS,    /* an --input-shape of another rank than the input's */
    DM_BIND_SHAPE_FIXED,    /* an --input-shape dim unlike the input's fixed one */
    DM_BIND_SHAPE_SYMBOL,   /* a dim two --input-shape make different */
    DM_BIND_DIM_VALUE,      /* a --dim of a negative value */
    DM_BIND_DIM_UNKNOWN,    /* a --dim naming no dim of the graph */
    DM_BIND_DIM_BEAMS,      /* a --dim x --num-beams overflowing */
    DM_BIND_DIM_SHAPE,      /* a --dim unlike the --input-shape that sets it */
    DM_BIND_BATCH_SHAPE,    /* --batch-size for a batch dim an --input-shape sets */
    DM_BIND_BATCH_BEAMS,    /* --batch-size x --num-beams overflowing */
    DM_BIND_NO_SHAPE,       /* an input of no shape, with --batch-size and nothing to bind */
    DM_BIND_NO_BATCH,       /* --batch-size and no batch dim */
    DM_BIND_NO_SEQ,         /* --seq-len and no sequence dim */
};

struct dm_bind {
    enum dm_bind_breach breach;
    const char *name;  /* the --input-shape or --dim (or the input, the dim) at fault */
    const char *by;    /* the --input-shape that set the dim before */
    const char *dim;   /* the dim's name */
    int64_t value;     /* the value given */
    int64_t other;     /* the value it disagrees with */
    int64_t index;     /* the dim's position in the shape */
    int64_t rank;      /* the ranks: given, declared */
    int64_t decl_rank;
    char list[256];    /* the graph's inputs or dims, ", "-separated */
    char decl[160];    /* the input's declared dims */
};

/* Fills *o from cfg and runs the DM_CHECK_OPTIONS rows. */
enum dnnmem_status dm_est_options(const struct dm_graph *g, bool hf, const struct dnnmem_config *cfg,
                                  struct dm_est_opts *o, struct dnnmem_error *err);
/* The check table's rows of one phase, first breach first. */
enum dnnmem_status dm_est_check(enum dm_check_phase phase, const struct dm_graph *g,
                                const struct dm_est_opts *o, struct dnnmem_error *err);
/* The DM_CHECK_BUILT rows for what the schedule's builder refused, rf. */
enum dnnmem_status dm_est_check_built(const struct dm_graph *g, const struct dm_est_opts *o,
                                      const struct dm_refusal *rf, struct dnnmem_error *err);
/* The DM_CHECK_BIND rows for what binding the dims found, b. */
enum dnnmem_status dm_est_check_bind(const struct dm_graph *g, const struct dm_est_opts *o,
                                     const struct dm_bind *b, struct dnnmem_error *err);
/* "2.15" or "0.4.13" as major * 10000 + minor * 100 + patch; -1 when not. */
int64_t dm_version_number(const char *v);

/* variant.c: a model's HuggingFace graphs (the model keeps an outline),
 * each built when an estimate first needs it and kept until the model is
 * freed; safe for concurrent estimates (one mutex per model). */
struct dm_variants;
/* Keeps a reference to the config's parsed root (the load's one parse, never
 * parsed again); `path` (borrowed) names the graphs, each built within
 * `max_nodes` (0: no budget). */
enum dnnmem_status dm_variants_new(struct json_t *root, const char *path,
                                   int64_t max_nodes, struct dm_variants **out,
                                   struct dnnmem_error *err);
void dm_variants_free(struct dm_variants *v);
/* The graph for the options: `base` (the loaded graph), one kept in `v`
 * (borrowed until dm_variants_free), or, for a generation (its graph
 * depends on the prompt), *own, built for this call (caller frees it;
 * dm_graph_init'ed by the caller). v NULL: not a HuggingFace model. */
enum dnnmem_status dm_est_variant(struct dm_variants *v, const struct dm_graph *base,
                                  const struct dm_est_opts *o, const struct dm_graph **g,
                                  struct dm_graph *own, struct dnnmem_error *err);
/* The graph with eager or sdpa attention and no options (as loaded); NULL
 * if none. */
const struct dm_graph *dm_variants_loaded(struct dm_variants *v, bool sdpa,
                                          struct dnnmem_error *err);

/* The framework runtime of a non-PyTorch framework (replay.c). */
struct dm_fwsim {
    enum dnnmem_framework fw;
    struct dm_bfc_opts bfc;
    struct dm_pool_opts pool;
    uint64_t limit;      /* 0 = unknown (no capacity given) */
    bool reserves_limit; /* one region of the whole limit up front */
    bool host;           /* JAX or MXNet on the CPU: exact host allocations, no BFC, no pool */
};

/* One estimate's working state, stage by stage. */
struct dm_est {
    const struct dm_est_opts *o;
    const struct dm_graph *g;     /* variant.c */
    struct dm_arena arena;        /* the estimate's scratch (assumption texts, dims) */
    struct dm_assumptions as;
    struct dm_run run;            /* defaults.c */
    int64_t *syms;                /* shapes.c: the symbolic dims' values */
    struct dm_tinfo *t;           /* shapes.c: every tensor's shape and dtype (malloc'd) */
    uint64_t context;             /* defaults.c: the CUDA context */
    uint64_t round;               /* defaults.c: the rounding allocator's (--alloc-round) */
    struct dm_fwsim fws;          /* replay.c: other frameworks' runtimes */
    struct dm_schedule sched;     /* schedule.c */
    struct dm_xla_stats xla;      /* schedule.c: the jitted step's figures */
    struct dm_graph stage_g;      /* pipeline.c: this rank's stage of e->g (--pp), then e->g */
    const int8_t *tp_split;       /* shapes.c (--tp): the plan's split per tensor (dm_tp_plan) */
    int8_t *tp_role;              /* shapes.c (--tp): the plan's role per node, which --sp marks */
    int inplace_open;             /* defaults.c: activations --inplace auto decided (the
                                     model does not say): api.c bounds them */
};

/* defaults.c: e->run from the options, and the assumptions that come
 * before the dims (framework, device, attention, mode). */
void dm_est_run(struct dm_est *e);
/* defaults.c, after the shapes: the precision's, the job's and the
 * runtime's defaults (context, workspaces, allocator, capacity). */
enum dnnmem_status dm_est_runtime(struct dm_est *e, struct dnnmem_error *err);
/* shapes.c: e->syms and e->t. */
enum dnnmem_status dm_est_shapes(struct dm_est *e, struct dnnmem_error *err);
/* pipeline.c (--pp): e->g becomes this rank's stage of it (e->stage_g). */
enum dnnmem_status dm_est_stage(struct dm_est *e, struct dnnmem_error *err);
/* schedule.c: e->sched (and e->xla under jit). */
enum dnnmem_status dm_est_schedule(struct dm_est *e, struct dnnmem_error *err);
/* replay.c: other frameworks' allocator options and limit (e->fws). */
enum dnnmem_status dm_est_fw_setup(struct dm_est *e, struct dnnmem_error *err);
/* replay.c: the schedule through the allocator, the result (caller frees). */
enum dnnmem_status dm_est_replay(struct dm_est *e, struct dnnmem_result **out,
                                 struct dnnmem_error *err);

/* warn.c: what about the input makes the result less trustworthy than it
 * looks (one table of rules), added to the result. */
enum dnnmem_status dm_est_warnings(const struct dm_est *e, struct dnnmem_result *r,
                                   struct dnnmem_error *err);

/* captured.c: the estimate of a captured step (src/load/capture.c): the
 * options checked against what the capture fixed, its schedule replayed
 * through the allocator with the runtime's defaults. */
enum dnnmem_status dm_est_captured(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                   struct dnnmem_result **out, struct dnnmem_error *err);

#endif /* DNNMEM_ESTIMATE_H */
