/*
 * assume.c: the bottom of the estimate's stages (estimate.h): the assumption
 * list every stage adds to, and the public names and runtime defaults
 * (include/dnnmem.h) that they print and use.
 */
#include "estimate.h"

#include <stdarg.h>
#include <stdio.h>

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
