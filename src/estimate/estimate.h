/*
 * estimate.h: dnnmem_estimate as stages (src/api.c wires them), in order:
 *
 *   check.c     the options: what they mean (struct dm_est_opts) and the
 *               table of the checks they must pass
 *   variant.c   the graph the options need (attention, LoRA, quantization,
 *               release), built on first use and kept in the model handle
 *   defaults.c  the defaults (one table, DM_DEFAULTS: key, how derived,
 *               source), the run (struct dm_run), the runtime's figures
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

/* defaults.c: the defaults, one row each: the name, the key of the
 * assumption whose source ("option" or "default") it decides, whether the
 * caller's option sets it, the value then, and the default otherwise (c:
 * the options, g: the loaded graph). */
#define DM_DEFAULTS(X)                                                                             \
    X(TORCH, "framework", c->torch_version != 0, c->torch_version, DM_TORCH_DEFAULT)               \
    X(TRANSFORMERS, "transformers", c->transformers_version != 0, c->transformers_version,         \
      DM_TRANSFORMERS_DEFAULT)                                                                     \
    X(ITERATIONS, "iterations", c->iterations != 0, c->iterations, 2)                              \
    X(GRAD_ACCUM, "grad_accum", c->grad_accum != 0, c->grad_accum, 1)                              \
    /* MXNET_EXEC_INPLACE_GRAD_SUM_CAP's default (graph_executor.cc, AggregateGradient) */         \
    X(MX_GRAD_SUM_CAP, "mx_ops", c->mxnet_grad_sum_cap != 0, c->mxnet_grad_sum_cap, 8)             \
    /* GenerationConfig's top_k (a negative --top-k: none) */                                      \
    X(TOP_K, "top_k", c->top_k != 0, c->top_k < 0 ? 0 : c->top_k, 50)                              \
    /* the CUDA toolkit each framework's wheels are built with: PyTorch 2.6's                      \
     * default pip wheel is cu124 (pytorch.org, previous versions: `pip install                    \
     * torch==2.6.0` installs the CUDA 12.4 build); TensorFlow 2.15's tested build                 \
     * configuration is CUDA 12.2 (tensorflow.org/install/source#gpu); jax[cuda12]                 \
     * installs CUDA 12.x libraries from pip (12.2 taken); MXNet's last releases                   \
     * (1.9.1) ship wheels up to mxnet-cu112 (CUDA 11.2) */                                        \
    X(CUDA, "cuda", c->cuda_version != 0, c->cuda_version,                                         \
      c->framework == DNNMEM_FW_PYTORCH ? 124 : c->framework == DNNMEM_FW_MXNET ? 112 : 122)       \
    /* compute capability 8.0, or the least the quantized checkpoint's kernels                     \
     * run on (fp8: 8.9) */                                                                        \
    X(CC, "cuda", c->compute_capability != 0, c->compute_capability,                               \
      g->quant_min_cc > DM_CC_DEFAULT ? g->quant_min_cc : DM_CC_DEFAULT)                           \
    /* the CUDA caching allocator's 512 B blocks; the CPU's exact sizes */                         \
    X(ALLOC_ROUND, "allocator", c->alloc_round_bytes >= 0, c->alloc_round_bytes,                   \
      c->device == DNNMEM_DEVICE_CUDA ? DNNMEM_ALLOC_ROUND_DEFAULT : 1)                            \
    X(CONV_WORKSPACE, "conv_workspace", c->conv_workspace_bytes >= 0, c->conv_workspace_bytes, 0)

enum dm_default {
#define DM_X(name, key, set, option, dflt) DM_D_##name,
    DM_DEFAULTS(DM_X)
#undef DM_X
    DM_D_COUNT
};

struct dm_defaults {
    int64_t value[DM_D_COUNT];
    bool set[DM_D_COUNT]; /* by the caller's option */
};

/* The table's values for options c on the loaded graph g. */
void dm_est_defaults(const struct dnnmem_config *c, const struct dm_graph *g, struct dm_defaults *d);
/* "option" or "default", as the assumption of a row prints it. */
const char *dm_default_source(const struct dm_defaults *d, enum dm_default k);

/* check.c: what the options mean, once they are known to be in range. */
struct dm_est_opts {
    struct dnnmem_config cfg; /* the caller's, with the precision transformers 5 picks */
    bool hf;                  /* a HuggingFace config.json model */
    bool generate;
    bool other_fw;            /* not PyTorch */
    bool mx_planned;          /* MXNet's symbolic executor plans the step */
    bool jax_jit;             /* JAX's jitted step (src/schedule/xla.c) */
    bool tf_graph;            /* TensorFlow under tf.function */
    bool v5_dtype;            /* transformers 5 loads the config's 2-byte dtype */
    bool flash, sdpa, gqa;    /* the HF attention: flash_attention_2, sdpa, enable_gqa */
    bool rebuild;             /* the HF graph built for these options, not the loaded one */
    int64_t fw_version;       /* --framework X@V as a number, -1 = none */
    int torch, transformers;  /* versions, defaults applied */
    struct dm_defaults d;     /* the defaults table's values */
};

/* The check stages: the options alone (DM_CHECK_OPTIONS, with `g` the
 * loaded graph), the graph built for them (DM_CHECK_GRAPH), the shapes. */
enum dm_check_phase { DM_CHECK_OPTIONS, DM_CHECK_GRAPH, DM_CHECK_SHAPES };

/* Fills *o from cfg and runs the DM_CHECK_OPTIONS rows. */
enum dnnmem_status dm_est_options(const struct dm_graph *g, bool hf, const struct dnnmem_config *cfg,
                                  struct dm_est_opts *o, struct dnnmem_error *err);
/* The check table's rows of one phase, first breach first. */
enum dnnmem_status dm_est_check(enum dm_check_phase phase, const struct dm_graph *g,
                                const struct dm_est_opts *o, struct dnnmem_error *err);
/* "2.15" or "0.4.13" as major * 10000 + minor * 100 + patch; -1 when not. */
int64_t dm_version_number(const char *v);

/* variant.c: a model's HuggingFace graphs (the model keeps an outline),
 * each built when an estimate first needs it and kept until the model is
 * freed; safe for concurrent estimates (one mutex per model). */
struct dm_variants;
/* Keeps a copy of the config's bytes; `path` (borrowed) names the graphs. */
enum dnnmem_status dm_variants_new(const uint8_t *json, size_t size, const char *path,
                                   struct dm_variants **out, struct dnnmem_error *err);
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
    int cc;                       /* defaults.c: the compute capability */
    struct dm_fwsim fws;          /* replay.c: other frameworks' runtimes */
    struct dm_schedule sched;     /* schedule.c */
    struct dm_xla_stats xla;      /* schedule.c: the jitted step's figures */
};

/* defaults.c: e->run from the options, and the assumptions that come
 * before the dims (framework, device, attention, mode). */
void dm_est_run(struct dm_est *e);
/* defaults.c, after the shapes: the precision's, the job's and the
 * runtime's defaults (context, workspaces, allocator, capacity). */
enum dnnmem_status dm_est_runtime(struct dm_est *e, struct dnnmem_error *err);
/* shapes.c: e->syms and e->t. */
enum dnnmem_status dm_est_shapes(struct dm_est *e, struct dnnmem_error *err);
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

#endif /* DNNMEM_ESTIMATE_H */
