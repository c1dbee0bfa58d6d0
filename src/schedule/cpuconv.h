/*
 * cpuconv.h: PyTorch's CPU convolution kernels and their buffers
 * (src/schedule/cpuconv.c), for the eager schedule (workspace.c) and for
 * captured steps (src/estimate/captured.c) alike.
 */
#ifndef DNNMEM_SCHEDULE_CPUCONV_H
#define DNNMEM_SCHEDULE_CPUCONV_H

#include "dnnmem-impl.h"

/* The buffers a library makes around one op (ids in the caller's schedule;
 * -1: none), freed when the op's outputs are made (dm_sb_workspace_end), in
 * slot order. Slot DM_WS_COPY: the op's contiguous copy of a strided input,
 * made before the library's buffers and freed after them (workspace.c). */
#define DM_WS_BUFS 5
#define DM_WS_COPY 4
struct dm_ws {
    int32_t buf[DM_WS_BUFS];
};

/* struct dm_cpu_conv (dnnmem-impl.h): a convolution as the kernel choice reads it. */

/* Where the rules put their buffers: alloc makes one (the caller's id, or
 * -1), unref drops the reference alloc returned. */
struct dm_ws_sink {
    void *ctx;
    int32_t (*alloc)(void *ctx, enum dm_dtype dtype, uint64_t bytes, const char *what);
    void (*unref)(void *ctx, int32_t buf);
};

/* Before the op's outputs (forward), or before its first grad (backward):
 * the kernel's buffers that live while the op runs, into ws. CPU only. */
void dm_cpu_conv_begin(const struct dm_cpu_conv *cv, const struct dm_run *run,
                       const struct dm_ws_sink *sink, bool backward, struct dm_ws *ws);
/* In the backward, around the grad of input k (0 input, 1 weight; `after`:
 * once it is made): oneDNN's backward-data and backward-weights passes. */
void dm_cpu_conv_grad(const struct dm_cpu_conv *cv, const struct dm_run *run,
                      const struct dm_ws_sink *sink, int k, struct dm_ws *ws, bool after);
/* The bytes of THNN's columns the backward makes for the weight's grad once
 * all grads are made, freed before it returns; 0 when none. */
uint64_t dm_cpu_conv_grad_scratch(const struct dm_cpu_conv *cv, const struct dm_run *run);

#endif
