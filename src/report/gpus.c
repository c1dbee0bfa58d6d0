/* gpus.c: the GPU catalogue (the facts, with sources, are in gpus.def). */
#include "dnnmem-impl.h"

#include <strings.h>

static const struct dnnmem_gpu gpus[] = {
#define DM_GPU(name, device, total, cc, reserved, source) {name, device, total, cc, reserved, source},
#include "report/gpus.def"
#undef DM_GPU
};

size_t dnnmem_gpu_count(void) { return sizeof gpus / sizeof gpus[0]; }

const struct dnnmem_gpu *dnnmem_gpu_at(size_t i)
{
    return i < dnnmem_gpu_count() ? &gpus[i] : NULL;
}

const struct dnnmem_gpu *dnnmem_gpu_find(const char *name)
{
    for (size_t i = 0; name && i < dnnmem_gpu_count(); i++)
        if (strcasecmp(gpus[i].name, name) == 0)
            return &gpus[i];
    return NULL;
}

void dnnmem_config_use_gpu(struct dnnmem_config *cfg, const struct dnnmem_gpu *gpu)
{
    if (!cfg || !gpu)
        return;
    cfg->capacity_bytes = gpu->total_bytes - gpu->reserved_bytes;
    if (!cfg->compute_capability && gpu->compute_capability)
        cfg->compute_capability = gpu->compute_capability;
    cfg->device_label = gpu->name;
}
