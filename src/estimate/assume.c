/*
 * assume.c: the bottom of the estimate's stages (estimate.h): the assumption
 * list every stage adds to, the public names and runtime defaults
 * (include/dnnmem.h) that they print and use, and the defaults table's
 * values (DM_DEFAULTS) for an estimate's options.
 */
#include "estimate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void dm_assume(struct dm_assumptions *as, const char *key, const char *source, const char *fmt, ...)
{
    if (as->n >= sizeof as->a / sizeof as->a[0])
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *v = dm_arena_strdup(as->arena, buf);
    as->a[as->n++] = (struct dnnmem_assumption){key, v ? v : "", source};
}

/* The public defaults (include/dnnmem.h): the names and figures the stages
 * print and use. */
const char *dnnmem_framework_name(enum dnnmem_framework f)
{
    switch (f) {
    case DNNMEM_FW_PYTORCH: return "pytorch";
    case DNNMEM_FW_TENSORFLOW: return "tensorflow";
    case DNNMEM_FW_MXNET: return "mxnet";
    case DNNMEM_FW_JAX: return "jax";
    }
    return "?";
}

int64_t dnnmem_cuda_context_default(int torch_version, int cuda_version, int compute_capability)
{
    if (cuda_version && cuda_version < 117)
        return INT64_C(1343) << 20;   /* eager module loading (HF docs, V100, CUDA 11.2) */
    if (torch_version && torch_version < 200)
        return DNNMEM_CUDA_CONTEXT_DEFAULT; /* PR #86509, 1.13, lazy */
    /* at start (H200 measured; else unsloth-zoo PR #1053), then the kernels
     * a step loads (measured on the H200) */
    return (compute_capability == 90 ? INT64_C(648871936) : INT64_C(426) << 20) +
           DNNMEM_LAZY_KERNELS_DEFAULT;
}

int64_t dnnmem_cublas_workspace_default(int torch_version, int compute_capability)
{
    if (torch_version && torch_version < 200)
        return INT64_C(4) << 20;                  /* PR #74159 */
    if (compute_capability >= 90 && compute_capability < 130)
        return INT64_C(32) << 20;                 /* PR #91564 (9.x), PR #175344 (10-12) */
    return 2 * (INT64_C(4) << 20) + 8 * (INT64_C(16) << 10); /* :4096:2:16:8 */
}

/* ---- the defaults table (DM_DEFAULTS, estimate.h) ------------------------------ */

/* The CUDA context's default (DM_DEFAULTS' CUDA_CONTEXT row). */
static int64_t dm_context_default(const struct dnnmem_config *c, const struct dm_defaults *d)
{
    int cuda = (int)d->value[DM_D_CUDA], cc = (int)d->value[DM_D_CC];
    if (c->device != DNNMEM_DEVICE_CUDA)
        return 0;
    if (c->framework == DNNMEM_FW_PYTORCH)
        return dnnmem_cuda_context_default((int)d->value[DM_D_TORCH], cuda, cc);
    bool lazy = cuda >= 122;
    return dnnmem_cuda_context_default(200, lazy ? 121 : 112, cc) -
           (lazy ? DNNMEM_LAZY_KERNELS_DEFAULT : 0);
}

/* The precision's default (DM_DEFAULTS' PRECISION row): a HuggingFace
 * config's 16-bit torch_dtype (dtype), unless quantized; else float32. */
static int dm_precision_default(const struct dm_est_opts *o, const struct dm_graph *g)
{
    const char *sd = g->stored_dtype;
    if (!o->hf || g->quant_method || !sd)
        return DNNMEM_PRECISION_FP32;
    return strcmp(sd, "bfloat16") == 0  ? DNNMEM_PRECISION_BF16
           : strcmp(sd, "float16") == 0 ? DNNMEM_PRECISION_FP16
                                        : DNNMEM_PRECISION_FP32;
}

#define MiB_ ((uint64_t)1 << 20)
#define GiB_ ((uint64_t)1 << 30)

/* TensorFlow's MinSystemMemory (gpu_device.cc; runtime-facts 2.4) out of
 * the free memory at device creation (the capacity less the context). */
static int64_t dm_tf_min_system_memory(const struct dnnmem_config *c, const struct dm_est_opts *o,
                                       const struct dm_defaults *d)
{
    uint64_t cap = (uint64_t)c->capacity_bytes, context = (uint64_t)d->value[DM_D_CUDA_CONTEXT];
    uint64_t free_bytes = cap > context ? cap - context : 0;
    int64_t cc = d->value[DM_D_CC], version = o->fw_version;
    if (free_bytes < 2 * GiB_)
        return (int64_t)(225 * MiB_);
    if (version >= 0 && version < 20000) { /* TF 1.x: max(300 MiB, 5% of free) */
        uint64_t pct = free_bytes / 20;
        return (int64_t)(pct > 300 * MiB_ ? pct : 300 * MiB_);
    }
    if (cc < 70)
        return (int64_t)(500 * MiB_);
    if (cc < 80)
        return (int64_t)(1050 * MiB_);
    if (cc < 90)
        return (int64_t)(1536 * MiB_);
    return (int64_t)(1800 * MiB_); /* newest TF (TF_GPU_USE_PJRT era); 1536 MiB in earlier 2.x */
}

#define DM_SET_INT(k, v) (d->value[k] = (v))
#define DM_SET_REAL(k, v) (d->real[k] = (v))

void dm_est_defaults(const struct dm_est_opts *o, const struct dm_graph *g, struct dm_defaults *d)
{
    const struct dnnmem_config *c = &o->cfg;
    memset(d, 0, sizeof *d);
#define DM_X(name, type, key, is_set, option, dflt)                                                \
    d->set[DM_D_##name] = (is_set);                                                                \
    if (d->set[DM_D_##name])                                                                       \
        DM_SET_##type(DM_D_##name, option);                                                        \
    else                                                                                           \
        DM_SET_##type(DM_D_##name, dflt);
    DM_DEFAULTS(DM_X)
#undef DM_X
}

static const char *const default_key[DM_D_COUNT] = {
#define DM_X(name, type, key, set, option, dflt) [DM_D_##name] = key,
    DM_DEFAULTS(DM_X)
#undef DM_X
};

const char *dm_default_key(enum dm_default k)
{
    return default_key[k];
}

const char *dm_default_source(const struct dm_defaults *d, enum dm_default k)
{
    return d->set[k] ? "option" : "default";
}
