/*
 * options.c: the options of src/options.def onto a dnnmem_config, with the
 * CLI's value parsing and messages (the CLI calls dnnmem_config_set for each
 * of them).
 */
#include "dnnmem-impl.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

enum { MAX_DIMS = 64, MAX_INPUTS = 64, MAX_FREEZE = 64, MAX_CKPT = 256, MAX_TARGETS = 32,
       MAX_LIST = 64, LIST_CHARS = 512 };

/* The number of rows. */
enum {
    N_ROWS = 0
#define OPT(name, s, alias, arg, group, cmds, fw, set, help) +1
#include "options.def"
#undef OPT
};

struct dnnmem_options {
    struct dm_arena arena;              /* every copy below */
    const char *given[N_ROWS];          /* the value last given to each row */
    struct dnnmem_dim_binding dims[MAX_DIMS];
    size_t n_dims;
    struct dnnmem_input_shape inputs[MAX_INPUTS];
    int64_t input_dims[MAX_INPUTS][DNNMEM_MAX_DIMS];
    size_t n_inputs;
    const char *freeze[MAX_FREEZE], *checkpoint[MAX_CKPT];
    size_t n_freeze, n_checkpoint;
    const char *lora_targets[MAX_TARGETS];
    int64_t lists[2][MAX_LIST];         /* batch-size, seq-len */
    size_t n_lists[2];
    const char *fw_flag[4];             /* by framework: the last of its options given */
};

/* One call of a setter: the value is the store's own copy, which the setter
 * may split in place and point the config into. */
struct ctx {
    struct dnnmem_config *cfg;
    struct dnnmem_options *o;
    char *v;
    struct dnnmem_error *err;
};

#define BAD(...) dm_fail(x->err, DNNMEM_E_USAGE, __VA_ARGS__)

/* ---- values ----------------------------------------------------------------- */

static int parse_count(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v <= 0)
        return -1;
    *out = v;
    return 0;
}

/* "512", "300MiB", "1.5GiB", "500MB", "16G": bytes. A bare K, M, G or T is
 * binary (GiB), as GNU coreutils' sizes (numfmt --from=iec, ls -h, free -g)
 * and GPU memory, whose sizes are powers of two, are; SI needs "GB". */
static const struct size_unit {
    const char *suffix;
    double mult;
} size_units[] = {{"", 1},           {"B", 1},          {"KiB", 1024.0},  {"MiB", 1048576.0},
                  {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"kB", 1e3}, {"KB", 1e3},
                  {"MB", 1e6},       {"GB", 1e9},       {"TB", 1e12},     {"K", 1024.0},
                  {"M", 1048576.0},  {"G", 1073741824.0}, {"T", 1099511627776.0}};

/* The unit a size ends in ("" when bare). */
static const char *size_suffix(const char *s)
{
    char *end;
    (void)strtod(s, &end);
    return end;
}

static int parse_size(const char *s, int64_t *out)
{
    const struct size_unit *units = size_units;
    size_t n_units = sizeof size_units / sizeof size_units[0];
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    for (size_t k = 0; k < n_units; k++)
        if (strcmp(end, units[k].suffix) == 0) {
            double b = v * units[k].mult;
            if (b > 9.0e18)
                return -1;
            *out = (int64_t)(b + 0.5);
            return 0;
        }
    return -1;
}

/* A number with nothing after it. */
static int parse_real(const char *s, double *out)
{
    char *end;
    *out = strtod(s, &end);
    return end == s || *end ? -1 : 0;
}

/* "X.Y" with major in [lo, hi] and minor in [0, max_minor]: major * mult + minor. */
static int parse_version(const char *s, int lo, int hi, int max_minor, int mult, int *out)
{
    int major, minor;
    char tail;
    if (sscanf(s, "%d.%d%c", &major, &minor, &tail) != 2 || major < lo || major > hi || minor < 0 ||
        minor > max_minor)
        return -1;
    *out = major * mult + minor;
    return 0;
}

/* The index of v in the NULL-terminated names, or -1. */
static int pick(const char *const *names, const char *v, bool nocase)
{
    for (int k = 0; names[k]; k++)
        if ((nocase ? strcasecmp(names[k], v) : strcmp(names[k], v)) == 0)
            return k;
    return -1;
}

/* ---- setters, by kind ---------------------------------------------------------- */

/* One of an enum's values, named in the enum's order. */
#define ENUM_SETTER(fn, field, type, nocase, msg, ...)                                  \
    static enum dnnmem_status fn(const struct ctx *x)                                  \
    {                                                                                  \
        static const char *const names[] = {__VA_ARGS__, NULL};                        \
        int k = pick(names, x->v, nocase);                                             \
        if (k < 0)                                                                     \
            return BAD(msg, x->v);                                                     \
        x->cfg->field = (type)k;                                                       \
        return DNNMEM_OK;                                                              \
    }
ENUM_SETTER(set_mode, mode, enum dnnmem_mode, false,
            "--mode %s: expected infer, train or generate", "infer", "train", "generate")
ENUM_SETTER(set_kv_dtype, kv_dtype, enum dnnmem_kv_dtype, false,
            "--kv-dtype %s: expected auto, fp32, fp16, bf16 or fp8 "
            "(int8/int4 quantized caches are not modelled)",
            "auto", "fp32", "fp16", "bf16", "fp8")
ENUM_SETTER(set_device, device, enum dnnmem_device, false, "--device %s: expected cuda or cpu",
            "cuda", "cpu")
/* --cpu-isa: after the enum's DEFAULT */
static enum dnnmem_status set_cpu_isa(const struct ctx *x)
{
    static const char *const names[] = {"avx512", "avx2", NULL};
    int k = pick(names, x->v, false);
    if (k < 0)
        return BAD("--cpu-isa %s: expected avx512 or avx2", x->v);
    x->cfg->cpu_isa = (enum dnnmem_cpu_isa)(DNNMEM_CPU_ISA_AVX512 + k);
    return DNNMEM_OK;
}
ENUM_SETTER(set_inplace, inplace, enum dnnmem_inplace, false, "--inplace %s: expected auto or none",
            "auto", "none")
ENUM_SETTER(set_sdpa_backend, sdpa_backend, enum dnnmem_sdpa_backend, false,
            "--sdpa-backend %s: expected auto, flash, efficient, cudnn or math",
            "auto", "flash", "efficient", "cudnn", "math")
ENUM_SETTER(set_quant, quant, enum dnnmem_quant, false,
            "--quant %s: expected none, nf4, nf4-single, fp4 or int8 "
            "(a config's own quantization_config needs no --quant)",
            "none", "nf4", "nf4-single", "fp4", "int8")
ENUM_SETTER(set_tf_execution, tf_execution, enum dnnmem_tf_execution, true,
            "--tf-execution %s: expected graph or eager", "graph", "eager")
ENUM_SETTER(set_mxnet_pool, mxnet_pool, enum dnnmem_mxnet_pool, true,
            "--mxnet-pool %s: expected naive or round", "naive", "round")
ENUM_SETTER(set_mxnet_executor, mxnet_executor, enum dnnmem_mxnet_executor, true,
            "--mxnet-executor %s: expected planned or naive", "planned", "naive")
ENUM_SETTER(set_jax_execution, jax_execution, enum dnnmem_jax_execution, true,
            "--jax-execution %s: expected jit or eager", "jit", "eager")
/* true or false (1 or 0). */
#define BOOL_SETTER(fn, field, msg)                                                     \
    static enum dnnmem_status fn(const struct ctx *x)                                  \
    {                                                                                  \
        static const char *const names[] = {"false", "true", "0", "1", NULL};          \
        int k = pick(names, x->v, false);                                              \
        if (k < 0)                                                                     \
            return BAD(msg, x->v);                                                     \
        x->cfg->field = k % 2;                                                         \
        return DNNMEM_OK;                                                              \
    }
BOOL_SETTER(set_jax_preallocate, jax_preallocate, "--jax-preallocate %s: expected true or false")
BOOL_SETTER(set_jax_donate, jax_donate, "--jax-donate %s: expected true or false")

/* A positive count in [lo, hi]. */
#define COUNT_SETTER(fn, field, type, lo, hi, msg)                                      \
    static enum dnnmem_status fn(const struct ctx *x)                                  \
    {                                                                                  \
        int64_t v;                                                                     \
        if (parse_count(x->v, &v) || v < (lo) || v > (hi))                             \
            return BAD(msg, x->v);                                                     \
        x->cfg->field = (type)v;                                                       \
        return DNNMEM_OK;                                                              \
    }
COUNT_SETTER(set_new_tokens, new_tokens, int64_t, 1, 1048576, "--new-tokens %s: expected 1..1048576")
COUNT_SETTER(set_num_beams, num_beams, int, 1, 4096, "--num-beams %s: expected 1..4096")
COUNT_SETTER(set_iterations, iterations, int, 1, 1000, "--iterations %s: expected 1..1000")
COUNT_SETTER(set_grad_accum, grad_accum, int, 1, 1000, "--grad-accum %s: expected 1..1000")
COUNT_SETTER(set_lora_r, lora.r, int64_t, 1, 1048576, "--lora-r %s: expected a rank in 1..1048576")
COUNT_SETTER(set_cpu_threads, cpu_threads, int, 1, 4096, "--cpu-threads %s: expected a positive integer")
COUNT_SETTER(set_top, n_top_tensors, size_t, 1, 100000, "--top %s: expected a positive integer")
COUNT_SETTER(set_by_module_depth, module_depth, int, 1, 64, "--by-module-depth %s: expected 1..64")
COUNT_SETTER(set_mxnet_round_cutoff, mxnet_round_cutoff, int, 20, 34,
             "--mxnet-round-cutoff %s: expected 20..34 (log2 bytes)")
COUNT_SETTER(set_mxnet_grad_sum_cap, mxnet_grad_sum_cap, int, 1, 1000000,
             "--mxnet-grad-sum-cap %s: expected 1..1000000")

/* A number d for which `ok` holds. */
#define REAL_SETTER(fn, field, ok, msg)                                                 \
    static enum dnnmem_status fn(const struct ctx *x)                                  \
    {                                                                                  \
        double d;                                                                      \
        if (parse_real(x->v, &d) || !(ok))                                             \
            return BAD(msg, x->v);                                                     \
        x->cfg->field = d;                                                             \
        return DNNMEM_OK;                                                              \
    }
REAL_SETTER(set_top_p, top_p, d > 0 && d <= 1, "--top-p %s: expected a probability in (0, 1]")
REAL_SETTER(set_temperature, temperature, d > 0 && d < 1e30,
            "--temperature %s: expected a positive number")
REAL_SETTER(set_lora_alpha, lora.alpha, d > 0 && d < 1e9, "--lora-alpha %s: expected a positive number")
REAL_SETTER(set_lora_dropout, lora.dropout, d >= 0 && d < 1,
            "--lora-dropout %s: expected a probability in [0, 1)")
REAL_SETTER(set_jax_mem_fraction, jax_mem_fraction, d > 0 && d <= 1,
            "--jax-mem-fraction %s: expected a fraction in (0, 1], e.g. 0.75")

/* A size of at least `min` bytes. */
#define SIZE_SETTER(fn, field, min, msg)                                                \
    static enum dnnmem_status fn(const struct ctx *x)                                  \
    {                                                                                  \
        int64_t b;                                                                     \
        if (parse_size(x->v, &b) || b < (min))                                         \
            return BAD(msg, x->v);                                                     \
        x->cfg->field = b;                                                             \
        return DNNMEM_OK;                                                              \
    }
SIZE_SETTER(set_cuda_context, cuda_context_bytes, 0, "--cuda-context %s: expected a size such as 300MiB")
SIZE_SETTER(set_cublas_workspace, cublas_workspace_bytes, 0,
            "--cublas-workspace %s: expected a size such as 8MiB")
SIZE_SETTER(set_conv_workspace, conv_workspace_bytes, 0,
            "--conv-workspace %s: expected a size such as 64MiB")
SIZE_SETTER(set_cpu_l2, cpu_l2_bytes, 4096,
            "--cpu-l2 %s: expected a size of at least 4 KiB such as 512KiB")
SIZE_SETTER(set_alloc_round, alloc_round_bytes, 1,
            "--alloc-round %s: expected a positive size such as 512")
SIZE_SETTER(set_tf_memory_limit, tf_memory_limit_bytes, 1,
            "--tf-memory-limit %s: expected a size such as 20GiB")
SIZE_SETTER(set_tf_min_system_memory, tf_min_system_memory_bytes, 0,
            "--tf-min-system-memory %s: expected a size such as 20GiB")
SIZE_SETTER(set_mxnet_page_size, mxnet_page_size, 32,
            "--mxnet-page-size %s: expected a size of at least 32 B")

/* A flag: the field set to `value`. */
#define FLAG_SETTER(fn, field, value)                                                   \
    static enum dnnmem_status fn(const struct ctx *x)                                  \
    {                                                                                  \
        x->cfg->field = value;                                                         \
        return DNNMEM_OK;                                                              \
    }
FLAG_SETTER(set_do_sample, do_sample, true)
FLAG_SETTER(set_keep_outputs, keep_outputs, true)
FLAG_SETTER(set_kbit_prep, kbit_prep, DNNMEM_KBIT_PREP)
FLAG_SETTER(set_kbit_prep_no_gc, kbit_prep, DNNMEM_KBIT_PREP_NO_GC)
FLAG_SETTER(set_tf_allow_growth, tf_allow_growth, true)
FLAG_SETTER(set_mxnet_mirror, mxnet_mirror, true)
/* --by-module: the default depth, unless --by-module-depth gave one */
FLAG_SETTER(set_by_module, module_depth,
            x->cfg->module_depth ? x->cfg->module_depth : DNNMEM_MODULE_DEPTH_DEFAULT)

/* ---- data parallelism (docs/parallel.md) ---- */
COUNT_SETTER(set_gpus, par.gpus, int, 1, 65536, "--gpus %s: expected a world size in 1..65536")
COUNT_SETTER(set_nodes, par.nodes, int, 1, 65536, "--nodes %s: expected 1..65536")
COUNT_SETTER(set_gpus_per_node, par.gpus_per_node, int, 1, 1024,
             "--gpus-per-node %s: expected 1..1024")
COUNT_SETTER(set_tp, par.tp, int, 1, 65536, "--tp %s: expected a positive integer")
COUNT_SETTER(set_pp, par.pp, int, 1, 65536, "--pp %s: expected a positive integer")
COUNT_SETTER(set_cp, par.cp, int, 1, 65536, "--cp %s: expected a positive integer")
ENUM_SETTER(set_zero, par.zero, int, false, "--zero %s: expected 0, 1, 2 or 3 (DeepSpeed ZeRO stages)",
            "0", "1", "2", "3")
ENUM_SETTER(set_offload, par.offload, enum dnnmem_offload, false,
            "--offload %s: expected none, optimizer or params", "none", "optimizer", "params")
ENUM_SETTER(set_fsdp, par.fsdp, enum dnnmem_fsdp, false,
            "--fsdp %s: expected none, full, shard-grad-op, hybrid or no-shard", "none", "full",
            "shard-grad-op", "hybrid", "no-shard")
FLAG_SETTER(set_ddp_bucket_view, par.ddp_bucket_view, true)
FLAG_SETTER(set_sp, par.sp, true)
ENUM_SETTER(set_pp_schedule, par.pp_schedule, enum dnnmem_pp_schedule, false,
            "--pp-schedule %s: expected 1f1b, gpipe or interleaved-1f1b", "1f1b", "gpipe",
            "interleaved-1f1b")
static enum dnnmem_status set_pp_split(const struct ctx *x)
{
    const char *c = x->v;
    bool ok = *c != '\0';
    for (; ok && *c; c++)
        ok = (*c >= '0' && *c <= '9') || (*c == ',' && c[1] && c[1] != ',' && c != x->v);
    if (!ok || strlen(x->v) > 4096)
        return BAD("--pp-split %s: expected the blocks of each stage, e.g. 3,5,5,3", x->v);
    x->cfg->par.pp_split = x->v;
    return DNNMEM_OK;
}
COUNT_SETTER(set_micro_batches, par.micro_batches, int, 1, 65536,
             "--micro-batches %s: expected a positive integer")
static enum dnnmem_status set_fsdp_wrap(const struct ctx *x)
{
    if (!x->v[0] || x->v[0] != '/' || strlen(x->v) >= 160)
        return BAD("--fsdp-wrap %s: expected a glob on node-name prefixes such as '/model/layers.*'",
                   x->v);
    x->cfg->par.fsdp_wrap = x->v;
    return DNNMEM_OK;
}
/* bucket_cap_mb: MB as DDP means it, bucket_cap_mb * 1024 * 1024 bytes
 * (torch/nn/parallel/distributed.py, DistributedDataParallel.__init__) */
static enum dnnmem_status set_ddp_bucket_mb(const struct ctx *x)
{
    double d;
    if (parse_real(x->v, &d) || !(d > 0 && d <= 1048576))
        return BAD("--ddp-bucket-mb %s: expected a positive number of MiB (bucket_cap_mb)", x->v);
    x->cfg->par.ddp_bucket_bytes = (int64_t)(d * 1048576.0);
    return DNNMEM_OK;
}
/* An element count: 5e8, 500000000 */
#define ELEMS_SETTER(fn, field, msg)                                                    \
    static enum dnnmem_status fn(const struct ctx *x)                                  \
    {                                                                                  \
        double d;                                                                      \
        if (parse_real(x->v, &d) || !(d >= 0 && d <= 1e15) || d != (double)(int64_t)d) \
            return BAD(msg, x->v);                                                     \
        x->cfg->field = (int64_t)d;                                                    \
        return DNNMEM_OK;                                                              \
    }
ELEMS_SETTER(set_zero_bucket, par.zero_bucket_elems,
             "--zero-bucket-size %s: expected a count of elements such as 5e8")
ELEMS_SETTER(set_zero_prefetch, par.zero_prefetch_elems,
             "--zero-prefetch-size %s: expected a count of elements such as 5e7")
ELEMS_SETTER(set_zero_persist, par.zero_persist_elems,
             "--zero-persist-threshold %s: expected a count of elements such as 1e5")
SIZE_SETTER(set_nccl_memory, par.nccl_bytes, 0, "--nccl-memory %s: expected a size such as 16MiB")
static enum dnnmem_status set_rank(const struct ctx *x)
{
    int64_t v;
    if (strcmp(x->v, "0") == 0)
        v = 0;
    else if (parse_count(x->v, &v) || v > 65535)
        return BAD("--rank %s: expected a rank in 0..65535", x->v);
    x->cfg->par.rank = (int)v;
    return DNNMEM_OK;
}

/* ---- setters with their own rules ------------------------------------------------ */

/* --optimizer: stated, so a HuggingFace config's AdamW default does not apply */
static enum dnnmem_status set_optimizer(const struct ctx *x)
{
    static const char *const names[] = {"sgd-momentum", "sgd", "adam", "adamw", "rmsprop",
                                        "adagrad", "none", "adamw-hf", "adafactor", "adam8bit",
                                        "adamw-fused", NULL};
    int k = pick(names, x->v, false);
    if (k < 0)
        return BAD("--optimizer %s: expected sgd-momentum, sgd, adam, adamw, adamw-fused, "
                   "rmsprop, adagrad, adamw-hf, adafactor, adam8bit or none",
                   x->v);
    x->cfg->optimizer = (enum dnnmem_optimizer)k;
    x->cfg->optimizer_set = true;
    return DNNMEM_OK;
}

static enum dnnmem_status set_precision(const struct ctx *x)
{
    static const char *const names[] = {"fp32", "fp16", "bf16", "amp-fp16", "amp-bf16", NULL};
    int k = pick(names, x->v, false);
    x->cfg->precision_set = true;
    if (k < 0)
        return BAD("--precision %s: expected fp32, fp16, bf16, amp-fp16 or amp-bf16", x->v);
    x->cfg->precision = (enum dnnmem_precision)k;
    return DNNMEM_OK;
}

static enum dnnmem_status set_attn(const struct ctx *x)
{
    static const char *const names[] = {"auto", "eager", "sdpa", "flash", "flash_attention_2", NULL};
    int k = pick(names, x->v, false);
    if (k < 0)
        return BAD("--attn %s: expected eager, sdpa, flash or auto", x->v);
    x->cfg->attn = k == 4 ? DNNMEM_ATTN_FLASH : (enum dnnmem_attn)k;
    return DNNMEM_OK;
}

static enum dnnmem_status set_loss(const struct ctx *x)
{
    static const char *const names[] = {"ce", "mse", "sum", "ce-all", "mse-all", NULL};
    int k = pick(names, x->v, false);
    if (k < 0)
        return BAD("--loss %s: expected ce, mse, sum, ce-all or mse-all", x->v);
    x->cfg->loss = (enum dnnmem_loss)(k % 3);
    if (k >= 3)
        x->cfg->loss_all_outputs = true;
    return DNNMEM_OK;
}

static enum dnnmem_status set_top_k(const struct ctx *x)
{
    int64_t v = -1; /* 0 turns the warper off, as top_k=0 does in transformers */
    if (strcmp(x->v, "0") != 0 && (parse_count(x->v, &v) || v > (INT64_C(1) << 40)))
        return BAD("--top-k %s: expected a count (0: no top-k warper)", x->v);
    x->cfg->top_k = v;
    return DNNMEM_OK;
}

/* A share: "5%", "0.05", or a bare number of at least 1, which is a
 * percentage ("10" is 10%: a fraction is below 1). */
static enum dnnmem_status set_headroom(const struct ctx *x)
{
    char *end;
    double h = strtod(x->v, &end);
    if (end != x->v && *end == '%' && end[1] == '\0')
        h /= 100;
    else if (end == x->v || *end)
        h = -1;
    else if (h >= 1)
        h /= 100;
    if (!(h >= 0 && h < 1))
        return BAD("--headroom %s: expected a fraction or a percentage, e.g. 5%%", x->v);
    x->cfg->headroom = h;
    return DNNMEM_OK;
}

static enum dnnmem_status set_mxnet_reserve(const struct ctx *x)
{
    char *end;
    errno = 0;
    long r = strtol(x->v, &end, 10);
    if (errno || end == x->v || (*end && strcmp(end, "%") != 0) || r < 0 || r > 100)
        return BAD("--mxnet-reserve %s: expected a percentage 0..100", x->v);
    x->cfg->mxnet_reserve_percent = (int)r;
    return DNNMEM_OK;
}

static enum dnnmem_status set_transformers(const struct ctx *x)
{
    if (parse_version(x->v, 4, 9, 99, 100, &x->cfg->transformers_version))
        return BAD("--transformers %s: expected a release such as 4.51 or 5.17", x->v);
    return DNNMEM_OK;
}

static enum dnnmem_status set_cuda(const struct ctx *x)
{
    if (parse_version(x->v, 1, 99, 9, 10, &x->cfg->cuda_version))
        return BAD("--cuda %s: expected MAJOR.MINOR, e.g. 12.1", x->v);
    return DNNMEM_OK;
}

static enum dnnmem_status set_compute_capability(const struct ctx *x)
{
    if (parse_version(x->v, 1, 99, 9, 10, &x->cfg->compute_capability))
        return BAD("--compute-capability %s: expected MAJOR.MINOR, e.g. 8.0", x->v);
    return DNNMEM_OK;
}

static enum dnnmem_status set_gpu(const struct ctx *x)
{
    const struct dnnmem_gpu *gpu = dnnmem_gpu_find(x->v);
    if (!gpu) {
        char near[256];
        if (dm_gpu_suggest(x->v, near, sizeof near))
            return BAD("--gpu %s: unknown GPU; did you mean %s? (dnnmem gpus lists them)", x->v, near);
        return BAD("--gpu %s: unknown GPU (dnnmem gpus lists them)", x->v);
    }
    dnnmem_config_use_gpu(x->cfg, gpu);
    x->cfg->device_label = dm_arena_printf(&x->o->arena, "--gpu %s, as CUDA reports it", gpu->name);
    return x->cfg->device_label ? DNNMEM_OK : dm_fail(x->err, DNNMEM_E_NOMEM, "out of memory");
}

static enum dnnmem_status set_memory(const struct ctx *x)
{
    int64_t b;
    if (parse_size(x->v, &b) || b == 0)
        return BAD("--memory %s: expected a size such as 24GiB, 80GB or 16G", x->v);
    x->cfg->capacity_bytes = b;
    const char *u = size_suffix(x->v);
    static const char binary[] = "KMGT";
    const char *letter = u[0] && !u[1] ? strchr(binary, u[0]) : NULL; /* echoed with its meaning */
    x->cfg->device_label =
        letter ? dm_arena_printf(&x->o->arena, "--memory %s: %c read as %ciB, 2^%d bytes", x->v,
                                 *letter, *letter, 10 * (int)(letter - binary + 1))
               : dm_arena_printf(&x->o->arena, "--memory %s", x->v);
    return x->cfg->device_label ? DNNMEM_OK : dm_fail(x->err, DNNMEM_E_NOMEM, "out of memory");
}

/* pytorch[@X.Y], or tensorflow, mxnet, jax with an optional @VERSION. */
static enum dnnmem_status set_framework(const struct ctx *x)
{
    static const struct {
        const char *name, *example;
        enum dnnmem_framework fw;
    } fws[] = {{"tensorflow", "2.15", DNNMEM_FW_TENSORFLOW}, {"mxnet", "1.9.1", DNNMEM_FW_MXNET},
               {"jax", "0.4.30", DNNMEM_FW_JAX}};
    const char *v = x->v, *at = strchr(v, '@');
    size_t len = at ? (size_t)(at - v) : strlen(v);
    for (size_t k = 0; k < sizeof fws / sizeof fws[0]; k++) {
        if (strlen(fws[k].name) != len || strncmp(v, fws[k].name, len) != 0)
            continue;
        const char *ver = at ? at + 1 : NULL;
        bool ok = !ver || (*ver >= '0' && *ver <= '9');
        for (const char *q = ver; ok && q && *q; q++)
            ok = (*q >= '0' && *q <= '9') || (*q == '.' && q[1] >= '0' && q[1] <= '9');
        if (!ok)
            return BAD("--framework %s: expected %s@VERSION with a version such as %s", v,
                       fws[k].name, fws[k].example);
        x->cfg->framework = fws[k].fw;
        x->cfg->framework_version = ver;
        x->cfg->torch_version = 0;
        return DNNMEM_OK;
    }
    int major, minor = 0;
    char tail;
    x->cfg->framework = DNNMEM_FW_PYTORCH;
    x->cfg->framework_version = NULL;
    if (strcmp(v, "pytorch") == 0 || strcmp(v, "pytorch@2.x") == 0)
        x->cfg->torch_version = 200;
    else if ((sscanf(v, "pytorch@%d.%d%c", &major, &minor, &tail) == 2 ||
              sscanf(v, "pytorch@%d%c", &major, &tail) == 1) &&
             major >= 1 && major <= 9 && minor >= 0 && minor <= 99)
        x->cfg->torch_version = major * 100 + minor;
    else
        return BAD("--framework %s: expected pytorch, tensorflow, mxnet or jax, "
                   "optionally with @VERSION (pytorch@1.13, tensorflow@2.15)",
                   v);
    return DNNMEM_OK;
}

/* A positive count, or a comma-separated list of them (a sweep): list i of
 * the store, the config gets the first. */
static enum dnnmem_status set_list(const struct ctx *x, const char *flag, int i, int64_t *first)
{
    if (strlen(x->v) >= LIST_CHARS)
        return BAD("%s %s: list too long", flag, x->v);
    char buf[LIST_CHARS];
    strcpy(buf, x->v);
    size_t *n = &x->o->n_lists[i];
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST || parse_count(tok, &x->o->lists[i][*n]))
            return BAD("%s %s: expected positive integers, e.g. 8 or 8,16,32", flag, x->v);
        (*n)++;
    }
    if (!*n)
        return BAD("%s %s: expected a positive integer", flag, x->v);
    *first = x->o->lists[i][0];
    return DNNMEM_OK;
}

static enum dnnmem_status set_batch_size(const struct ctx *x)
{
    return set_list(x, "--batch-size", 0, &x->cfg->batch_size);
}

static enum dnnmem_status set_seq_len(const struct ctx *x)
{
    return set_list(x, "--seq-len", 1, &x->cfg->seq_len);
}

static enum dnnmem_status set_dim(const struct ctx *x)
{
    char *eq = strchr(x->v, '=');
    int64_t v = 0;
    if (!eq || eq == x->v || (strcmp(eq + 1, "0") != 0 && parse_count(eq + 1, &v)))
        return BAD("--dim %s: expected NAME=N with N a non-negative integer", x->v);
    struct dnnmem_options *o = x->o;
    if (o->n_dims == MAX_DIMS)
        return BAD("--dim %s: too many --dim options", x->v);
    *eq = '\0';
    o->dims[o->n_dims++] = (struct dnnmem_dim_binding){x->v, v};
    x->cfg->dims = o->dims;
    x->cfg->n_dims = o->n_dims;
    return DNNMEM_OK;
}

static enum dnnmem_status set_input_shape(const struct ctx *x)
{
    struct dnnmem_options *o = x->o;
    char *eq = strchr(x->v, '=');
    size_t k = o->n_inputs, r = 0;
    if (k == MAX_INPUTS)
        return BAD("--input-shape %s: too many --input-shape options", x->v);
    if (!eq || eq == x->v || !eq[1])
        return BAD("--input-shape %s: expected NAME=D1,D2,... with positive dims", x->v);
    *eq = '\0'; /* the messages below name the input only */
    char *save = NULL;
    for (char *tok = strtok_r(eq + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (r == DNNMEM_MAX_DIMS || parse_count(tok, &o->input_dims[k][r]))
            return BAD("--input-shape %s: expected 1 to %d positive dims, e.g. data=1,3,224,224",
                       x->v, DNNMEM_MAX_DIMS);
        r++;
    }
    if (!r)
        return BAD("--input-shape %s: no dims given", x->v);
    o->inputs[o->n_inputs++] = (struct dnnmem_input_shape){x->v, r, o->input_dims[k]};
    x->cfg->input_shapes = o->inputs;
    x->cfg->n_input_shapes = o->n_inputs;
    return DNNMEM_OK;
}

static enum dnnmem_status set_freeze(const struct ctx *x)
{
    struct dnnmem_options *o = x->o;
    if (o->n_freeze == MAX_FREEZE)
        return BAD("--freeze %s: too many --freeze options", x->v);
    o->freeze[o->n_freeze++] = x->v;
    x->cfg->freeze = o->freeze;
    x->cfg->n_freeze = o->n_freeze;
    return DNNMEM_OK;
}

static enum dnnmem_status set_checkpoint(const struct ctx *x)
{
    struct dnnmem_options *o = x->o;
    if (o->n_checkpoint == MAX_CKPT)
        return BAD("--checkpoint %s: too many --checkpoint options", x->v);
    o->checkpoint[o->n_checkpoint++] = x->v;
    x->cfg->checkpoint = o->checkpoint;
    x->cfg->n_checkpoint = o->n_checkpoint;
    return DNNMEM_OK;
}

static enum dnnmem_status set_lora_targets(const struct ctx *x)
{
    if (strlen(x->v) >= LIST_CHARS)
        return BAD("--lora-targets: list too long");
    char *whole = dm_arena_strdup(&x->o->arena, x->v); /* for the message: x->v is split */
    if (!whole)
        return dm_fail(x->err, DNNMEM_E_NOMEM, "out of memory");
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(x->v, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_TARGETS)
            return BAD("--lora-targets: more than 32 modules");
        x->o->lora_targets[n++] = tok;
    }
    if (!n)
        return BAD("--lora-targets %s: expected module names, e.g. q_proj,v_proj", whole);
    x->cfg->lora.targets = x->o->lora_targets;
    x->cfg->lora.n_targets = n;
    return DNNMEM_OK;
}

/* A calibration file: measured runtime constants of one machine, as a JSON
 * object {"cuda_context_bytes": N, "cublas_workspace_bytes": N,
 * "conv_workspace_bytes": N, "cuda": "12.1", "compute_capability": "9.0"}.
 * Options given after it win. */
static enum dnnmem_status set_calibration(const struct ctx *x)
{
    struct dnnmem_config *cfg = x->cfg;
    /* refused before it is read: what is not a regular file (a FIFO or
     * /dev/zero would block or never end) and more than a calibration file
     * holds (its five keys take under 200 bytes; 1 MiB) */
    struct stat sb;
    if (stat(x->v, &sb) == 0 && !S_ISREG(sb.st_mode))
        return BAD("--calibration %s: not a regular file", x->v);
    if (stat(x->v, &sb) == 0 && sb.st_size > (1 << 20))
        return dm_fail(x->err, DNNMEM_E_LIMIT, "--calibration %s: %lld bytes, beyond the 1 MiB "
                       "a calibration file may have", x->v, (long long)sb.st_size);
    json_error_t je;
    json_t *root = json_load_file(x->v, 0, &je);
    if (!root)
        return BAD("--calibration %s: %s (line %d)", x->v, je.text, je.line);
    enum dnnmem_status s = DNNMEM_OK;
    if (!json_is_object(root))
        s = BAD("--calibration %s: expected a JSON object", x->v);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (s != DNNMEM_OK)
            break;
        int64_t *bytes = strcmp(key, "cuda_context_bytes") == 0       ? &cfg->cuda_context_bytes
                       : strcmp(key, "cublas_workspace_bytes") == 0   ? &cfg->cublas_workspace_bytes
                       : strcmp(key, "conv_workspace_bytes") == 0     ? &cfg->conv_workspace_bytes
                                                                      : NULL;
        int *version = strcmp(key, "cuda") == 0                 ? &cfg->cuda_version
                     : strcmp(key, "compute_capability") == 0   ? &cfg->compute_capability
                                                                : NULL;
        if (bytes && json_is_integer(v) && json_integer_value(v) >= 0)
            *bytes = json_integer_value(v);
        else if (!(version && json_is_string(v) &&
                   parse_version(json_string_value(v), 1, 99, 9, 10, version) == 0))
            s = BAD("--calibration %s: key '%s' is unknown or its value is not a "
                    "non-negative integer (bytes) or \"X.Y\" (versions)",
                    x->v, key);
    }
    json_decref(root); /* owns key */
    return s;
}

/* ---- the table -------------------------------------------------------------------- */

struct row {
    struct dnnmem_option opt;
    enum dnnmem_framework framework;
    enum dnnmem_status (*set)(const struct ctx *x);
};

static const struct row rows[N_ROWS] = {
#define OPT(name, s, alias, arg, group, cmds, fw, set, help)                                   \
    {{name, s, alias, arg, DNNMEM_GROUP_##group, DNNMEM_CMD_##cmds, help}, DNNMEM_FW_##fw, set},
#include "options.def"
#undef OPT
};

static const struct {
    const char *heading, *note;
} groups[DNNMEM_GROUP_COUNT] = {
    [DNNMEM_GROUP_DEVICE] = {"Device and decision:\n", ""},
    [DNNMEM_GROUP_RUN] = {"Run:\n", ""},
    [DNNMEM_GROUP_LORA] = {"LoRA (--mode train, HuggingFace configs; PEFT's get_peft_model: the model "
                           "frozen,\nfloat32 adapters):\n",
                           ""},
    [DNNMEM_GROUP_QUANT] = {"Quantized weights (HuggingFace configs): a config's quantization_config "
                            "(gptq,\nawq, bitsandbytes, fp8) is built as its checkpoint stores it; "
                            "for a config\nwithout one, bitsandbytes quantization on load:\n",
                            ""},
    [DNNMEM_GROUP_GENERATE] = {"Generation (--mode generate; greedy unless told otherwise, "
                               "DynamicCache):\n",
                               ""},
    [DNNMEM_GROUP_TRAIN] = {"Training (--mode train):\n", ""},
    [DNNMEM_GROUP_DIMS] = {"Dims (symbolic dims of the model's inputs):\n", ""},
    [DNNMEM_GROUP_RUNTIME] = {"Runtime constants (each default is printed with the result):\n",
                              "  SIZE takes B, KiB, MiB, GiB (IEC) or kB, MB, GB (SI) suffixes.\n"},
    [DNNMEM_GROUP_FRAMEWORK] = {"Framework runtimes (each with its --framework):\n", ""},
    [DNNMEM_GROUP_OUTPUT] = {"Output:\n", ""},
};

const char *dnnmem_option_group_heading(enum dnnmem_option_group g)
{
    return (unsigned)g < DNNMEM_GROUP_COUNT ? groups[g].heading : "";
}

const char *dnnmem_option_group_note(enum dnnmem_option_group g)
{
    return (unsigned)g < DNNMEM_GROUP_COUNT ? groups[g].note : "";
}

size_t dnnmem_option_count(void)
{
    return N_ROWS;
}

const struct dnnmem_option *dnnmem_option_at(size_t i)
{
    return i < N_ROWS ? &rows[i].opt : NULL;
}

static const struct row *find_row(const char *name)
{
    for (size_t k = 0; name && k < N_ROWS; k++)
        if (strcmp(rows[k].opt.name, name) == 0 || (rows[k].opt.alias && strcmp(rows[k].opt.alias, name) == 0))
            return &rows[k];
    return NULL;
}

const struct dnnmem_option *dnnmem_option_find(const char *name)
{
    const struct row *r = find_row(name);
    return r ? &r->opt : NULL;
}

/* ---- the store ---------------------------------------------------------------------- */

dnnmem_options *dnnmem_options_new(void)
{
    dnnmem_options *o = calloc(1, sizeof *o);
    if (o)
        dm_arena_init(&o->arena);
    return o;
}

void dnnmem_options_free(dnnmem_options *o)
{
    if (!o)
        return;
    dm_arena_free(&o->arena);
    free(o);
}

enum dnnmem_status dnnmem_config_set(struct dnnmem_config *cfg, dnnmem_options *o, const char *name,
                                     const char *value, struct dnnmem_error *err)
{
    const struct row *r = find_row(name);
    if (!r)
        return dm_fail(err, DNNMEM_E_USAGE, "--%s: unknown option", name ? name : "");
    if (r->opt.arg && !value)
        return dm_fail(err, DNNMEM_E_USAGE, "--%s: this option needs a value", name);
    if (!r->opt.arg && value)
        return dm_fail(err, DNNMEM_E_USAGE, "--%s: this option takes no value", name);
    const char *given = dm_arena_strdup(&o->arena, value ? value : "");
    struct ctx x = {cfg, o, value ? dm_arena_strdup(&o->arena, value) : NULL, err};
    if (!given || (value && !x.v))
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    enum dnnmem_status s = r->set(&x);
    if (s != DNNMEM_OK)
        return s;
    o->given[r - rows] = given;
    if (r->framework != DNNMEM_FW_PYTORCH)
        o->fw_flag[r->framework] = r->opt.name;
    if (err)
        err->status = DNNMEM_OK;
    return DNNMEM_OK;
}

enum dnnmem_status dnnmem_config_check(const struct dnnmem_config *cfg, const dnnmem_options *o,
                                       struct dnnmem_error *err)
{
    for (int k = 1; k < 4; k++)
        if (o->fw_flag[k] && cfg->framework != (enum dnnmem_framework)k)
            return dm_fail(err, DNNMEM_E_USAGE, "--%s: applies to --framework %s", o->fw_flag[k],
                           dnnmem_framework_name((enum dnnmem_framework)k));
    return DNNMEM_OK;
}

const char *dnnmem_options_value(const dnnmem_options *o, const char *name)
{
    const struct row *r = find_row(name);
    return r ? o->given[r - rows] : NULL;
}

const int64_t *dnnmem_options_list(const dnnmem_options *o, const char *name, size_t *n)
{
    const struct row *r = find_row(name);
    /* the rows that take a list are those of its two setters (prompt-len: seq-len's) */
    int i = !r ? -1 : r->set == set_batch_size ? 0 : r->set == set_seq_len ? 1 : -1;
    *n = i < 0 ? 0 : o->n_lists[i];
    return *n ? o->lists[i] : NULL;
}
