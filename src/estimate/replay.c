/*
 * replay.c: the schedule through the framework's allocator, simulated:
 * PyTorch's caching allocator (or a plain rounding, or the host's exact
 * sizes), TensorFlow's and XLA's BFC, MXNet's pool; the result, and the
 * verdict against the device's capacity.
 */
#include "estimate.h"

#include <stdlib.h>

/* The verdict against cfg->capacity_bytes. A job whose unconstrained peak
 * exceeds the capacity is replayed with the caching allocator capped at it:
 * PyTorch then frees cached segments and retries before raising
 * OutOfMemoryError, and the job fits if no request fails. */
static enum dnnmem_status decide(struct dnnmem_result *r, const struct dm_schedule *sched,
                                 const struct dm_run *run, uint64_t context, uint64_t cap,
                                 double headroom, struct dnnmem_error *err)
{
    uint64_t total = r->total_bytes;
    r->capacity_bytes = cap;
    if (total > cap && run->cuda && cap > context) {
        struct dm_caching_opts co;
        dm_caching_opts_init(&co);
        co.capacity = cap - context;
        struct dm_allocator a;
        enum dnnmem_status s = dm_alloc_caching_new(&co, &a);
        if (s != DNNMEM_OK)
            return dm_fail(err, s, "cannot set up the allocator simulation");
        struct dm_alloc_stats st;
        s = dm_replay(sched, &a, &st);
        a.destroy(a.self);
        if (s == DNNMEM_OK) { /* fits after releasing cached memory */
            total = st.peak_reserved + context;
            r->peak_reserved = st.peak_reserved;
            r->slack_bytes = r->peak_reserved > r->peak_allocated ? r->peak_reserved - r->peak_allocated : 0;
            r->total_bytes = total;
            r->alloc_retries = st.num_alloc_retries;
        } else if (s != DNNMEM_E_DEVICE_OOM) {
            return dm_fail(err, s, "allocator simulation failed");
        }
    }
    r->margin_bytes = (int64_t)cap - (int64_t)total;
    r->verdict = total > cap ? DNNMEM_VERDICT_DOES_NOT_FIT
               : (double)(cap - total) < headroom * (double)cap ? DNNMEM_VERDICT_TIGHT
                                                                 : DNNMEM_VERDICT_FITS;
    int best = 0;
    for (int c = 1; c < DNNMEM_CAT_COUNT; c++)
        if (r->category_bytes[c] > r->category_bytes[best])
            best = c;
    r->largest_category = (enum dnnmem_category)best;
    return DNNMEM_OK;
}

/* ---- other frameworks' runtimes ------------------------------------------------ */

static enum dnnmem_status fw_new(const struct dm_fwsim *f, bool limited, struct dm_allocator *a)
{
    if (f->fw == DNNMEM_FW_MXNET && f->host)
        return dm_alloc_rounding_new(1, a);
    if (f->fw == DNNMEM_FW_MXNET) {
        struct dm_pool_opts o = f->pool;
        if (!limited)
            o.capacity = 0;
        return dm_alloc_pool_new(&o, a);
    }
    if (f->host) {
        (void)limited;
        return dm_alloc_rounding_new(1, a);
    }
    struct dm_bfc_opts o = f->bfc;
    o.limit = limited ? f->limit : 0;
    return dm_alloc_bfc_new(&o, a);
}

/* TensorFlow's CPU allocator, as TF_CPU_ALLOCATOR_USE_BFC=true makes it
 * (ProcessState::GetCPUAllocator, tensorflow/core/common_runtime/
 * process_state.cc): a BFCAllocator over BasicCPUAllocator with
 * allow_growth true and a limit of TF_CPU_BFC_MEM_LIMIT_IN_MB, default
 * 1 << 16 MiB (64 GiB); its rules are bfc.c's (256 B rounding, regions from
 * 2 MiB doubling). Its AllocatorStats are what
 * tf.config.experimental.get_memory_info('CPU:0') reads (tools/oracle/
 * tf_measure.py); without the variable TF's CPU allocator is a PoolAllocator
 * (or the plain host allocator) with no such accounting, and the bytes in
 * use are the same but for the 256 B rounding. No CUDA context. */
#define TF_CPU_BFC_LIMIT_DEFAULT ((uint64_t)1 << 36)

static void tf_cpu_setup(const struct dnnmem_config *cfg, struct dm_fwsim *f,
                         struct dm_assumptions *as)
{
    char b1[32];
    f->bfc.allow_growth = true;
    f->reserves_limit = false;
    f->limit = cfg->tf_memory_limit_bytes > 0 ? (uint64_t)cfg->tf_memory_limit_bytes
                                              : TF_CPU_BFC_LIMIT_DEFAULT;
    dm_assume(as, "memory_limit", cfg->tf_memory_limit_bytes > 0 ? "option" : "default",
              "%s (%s)", dm_format_bytes(f->limit, b1),
              cfg->tf_memory_limit_bytes > 0
                  ? "--tf-memory-limit"
                  : "TF_CPU_BFC_MEM_LIMIT_IN_MB's default, 64 GiB (process_state.cc); "
                    "--tf-memory-limit sets it");
    dm_assume(as, "allocator", "default",
              "TensorFlow's CPU BFC (TF_CPU_ALLOCATOR_USE_BFC=true: process_state.cc; 256 B "
              "rounding, best fit, coalescing, allow_growth: regions from 2 MiB, doubling); "
              "peak in use is what get_memory_info('CPU:0') reports");
}

/* Resolve the framework's allocator options and limit (the check table's
 * DM_CHECK_RUNTIME rows have passed); assumptions say what was chosen and
 * why. */
static enum dnnmem_status fw_setup(const struct dm_est_opts *o, uint64_t context, struct dm_fwsim *f,
                                   struct dm_assumptions *as, struct dnnmem_error *err)
{
    const struct dnnmem_config *cfg = &o->cfg;
    char b1[32], b2[32];
    uint64_t cap = (uint64_t)cfg->capacity_bytes;
    f->fw = cfg->framework;
    dm_bfc_opts_init(&f->bfc);
    dm_pool_opts_init(&f->pool);
    if (cfg->framework == DNNMEM_FW_TENSORFLOW && cfg->device != DNNMEM_DEVICE_CUDA) {
        tf_cpu_setup(cfg, f, as);
    } else if (cfg->framework == DNNMEM_FW_TENSORFLOW) {
        f->bfc.allow_growth = cfg->tf_allow_growth;
        f->reserves_limit = !cfg->tf_allow_growth;
        if (cfg->tf_memory_limit_bytes > 0) {
            f->limit = (uint64_t)cfg->tf_memory_limit_bytes;
            dm_assume(as, "memory_limit", "option", "%s (--tf-memory-limit)",
                      dm_format_bytes(f->limit, b1));
        } else if (cap) {
            uint64_t minsys = (uint64_t)dm_default_int(&o->d, TF_MIN_SYSTEM_MEMORY);
            f->limit = cap - context - minsys; /* > 0: DM_CHECK_RUNTIME */
            dm_assume(as, "memory_limit", dm_default_source(&o->d, DM_D_TF_MIN_SYSTEM_MEMORY),
                      "%s = free memory at start (capacity - context) - MinSystemMemory %s "
                      "(gpu_device.cc%s)",
                      dm_format_bytes(f->limit, b1), dm_format_bytes(minsys, b2),
                      o->d.set[DM_D_TF_MIN_SYSTEM_MEMORY] ? ", --tf-min-system-memory" : "");
        } else {
            dm_assume(as, "memory_limit", "default",
                      "unknown: free memory at start - MinSystemMemory (gpu_device.cc); "
                      "--gpu or --memory sizes it");
        }
        dm_assume(as, "allocator", cfg->tf_allow_growth ? "option" : "default",
                  "TensorFlow BFC (256 B rounding, 21 bins, best fit, split at >= 2x or >= 128 MiB "
                  "slack, coalescing; bfc_allocator.cc), %s",
                  cfg->tf_allow_growth ? "allow_growth: regions from 2 MiB, doubling"
                                       : "no allow_growth (default): one region of the whole memory "
                                         "limit at start");
    } else if (cfg->framework == DNNMEM_FW_JAX && cfg->device == DNNMEM_DEVICE_CPU) {
        /* XLA's CPU client (xla/pjrt/cpu): each buffer its own aligned
         * host allocation (MaybeOwningCpuMemory::Allocate,
         * tsl::port::AlignedMalloc), no BFC, no preallocation, no limit
         * but the host's */
        f->host = true;
        f->limit = cap;
        dm_assume(as, "allocator", "default",
                  "host: XLA's CPU client allocates each buffer by itself (aligned malloc), bytes "
                  "as requested; no BFC, XLA_PYTHON_CLIENT_* do not apply");
    } else if (cfg->framework == DNNMEM_FW_JAX) {
        double frac = dm_default_real(&o->d, JAX_MEM_FRACTION);
        f->bfc.allow_growth = !cfg->jax_preallocate;
        f->reserves_limit = cfg->jax_preallocate;
        if (cap) {
            f->limit = (uint64_t)((double)cap * frac);
            /* the row's default is 0.9 (before jaxlib 0.4.14) or 0.75 */
            dm_assume(as, "memory_limit", dm_default_source(&o->d, DM_D_JAX_MEM_FRACTION),
                      "%s = %g x %s, XLA_PYTHON_CLIENT_MEM_FRACTION%s", dm_format_bytes(f->limit, b1),
                      frac, dm_format_bytes(cap, b2),
                      o->d.set[DM_D_JAX_MEM_FRACTION] ? ""
                      : frac == 0.9                   ? " (0.9 before jaxlib 0.4.14)"
                                                      : " (0.75 since jaxlib 0.4.14)");
        } else {
            dm_assume(as, "memory_limit", "default",
                      "unknown: %g x the device's total memory (XLA_PYTHON_CLIENT_MEM_FRACTION); "
                      "--gpu or --memory sizes it", frac);
        }
        dm_assume(as, "allocator", cfg->jax_preallocate ? "default" : "option",
                  "XLA's BFC (as TensorFlow's, tsl bfc_allocator.cc), %s",
                  cfg->jax_preallocate ? "preallocated: the whole limit at the first op "
                                         "(XLA_PYTHON_CLIENT_PREALLOCATE=true)"
                                       : "not preallocated: regions from 2 MiB, doubling");
    } else if (cfg->device == DNNMEM_DEVICE_CPU) {
        /* Context::kCPU gets NaiveStorageManager<CPUDeviceStorage> whatever
         * MXNET_GPU_MEM_POOL_TYPE says: each Alloc a fresh aligned host block
         * of the bytes asked, each Free returned at once (storage.cc,
         * StorageImpl::Alloc; naive_storage_manager.h; 1.9.1) */
        f->host = true;
        if (cap)
            f->limit = cap;
        dm_assume(as, "allocator", "default",
                  "MXNet's CPU storage: NaiveStorageManager<CPUDeviceStorage>, the bytes asked, "
                  "freed at once, no pool (storage.cc; the MXNET_GPU_MEM_POOL_* options are "
                  "GPU-only)");
    } else {
        /* MXNET_GPU_MEM_POOL_*: the pool's own defaults (pool.c) unless set */
        f->pool.strategy = cfg->mxnet_pool == DNNMEM_MXNET_POOL_ROUND ? DM_POOL_ROUND : DM_POOL_NAIVE;
        if (cfg->mxnet_page_size >= 0)
            f->pool.page_size = (uint64_t)cfg->mxnet_page_size;
        if (cfg->mxnet_round_cutoff)
            f->pool.round_linear_cutoff = cfg->mxnet_round_cutoff;
        if (cfg->mxnet_reserve_percent >= 0)
            f->pool.reserve_percent = cfg->mxnet_reserve_percent;
        if (cap) {
            f->limit = cap - context; /* > 0: DM_CHECK_RUNTIME */
            f->pool.capacity = f->limit;
            f->pool.total = cap;
        }
        dm_assume(as, "allocator", cfg->mxnet_pool || cfg->mxnet_page_size >= 0 ? "option" : "default",
                  "MXNet pooled storage manager, %s, page %llu B, exact-size reuse, no splitting; "
                  "the pool is released when less than %d%% of the device would stay free "
                  "(pooled_storage_manager.h)",
                  f->pool.strategy == DM_POOL_ROUND
                      ? dm_arena_printf(as->arena, "Round: powers of two up to 2^%d, then multiples of it",
                                        f->pool.round_linear_cutoff)
                      : "Naive: page multiples, 2 MiB multiples above 2 MiB",
                  (unsigned long long)f->pool.page_size, f->pool.reserve_percent);
    }
    struct dm_allocator probe;
    enum dnnmem_status s = fw_new(f, f->limit > 0, &probe);
    if (s != DNNMEM_OK)
        return dm_fail(err, s, "--framework %s: the allocator options are out of range",
                       dnnmem_framework_name(cfg->framework));
    probe.destroy(probe.self);
    return DNNMEM_OK;
}

enum dnnmem_status dm_est_fw_setup(struct dm_est *e, struct dnnmem_error *err)
{
    DM_TRY(dm_est_check(DM_CHECK_RUNTIME, e->g, e->o, err));
    return fw_setup(e->o, e->context, &e->fws, &e->as, err);
}


static void set_largest(struct dnnmem_result *r)
{
    int best = 0;
    for (int c = 1; c < DNNMEM_CAT_COUNT; c++)
        if (r->category_bytes[c] > r->category_bytes[best])
            best = c;
    r->largest_category = (enum dnnmem_category)best;
}

/* Replay through the framework's allocator at its limit; when the job does
 * not fit there, again without a limit for the breakdown (verdict: does not
 * fit). */
static enum dnnmem_status fw_result(const struct dm_est *e, struct dnnmem_result **out,
                                    struct dnnmem_error *err)
{
    const struct dm_graph *g = e->g;
    const struct dm_tinfo *t = e->t;
    const struct dm_schedule *sched = &e->sched;
    const struct dm_fwsim *f = &e->fws;
    const struct dnnmem_config *cfg = &e->o->cfg;
    const struct dm_assumptions *as = &e->as;
    uint64_t context = e->context;
    bool limited = f->limit > 0, oom = false;
    struct dm_allocator a;
    struct dnnmem_error scratch;
    enum dnnmem_status s = fw_new(f, limited, &a);
    if (s != DNNMEM_OK)
        return dm_fail(err, s, "%s: cannot set up the allocator simulation", g->path);
    s = dm_result_build(g, t, sched, &a, cfg, context, as->a, as->n, out, limited ? &scratch : err);
    a.destroy(a.self);
    if (s == DNNMEM_E_DEVICE_OOM && limited) {
        oom = true;
        if ((s = fw_new(f, false, &a)) != DNNMEM_OK)
            return dm_fail(err, s, "%s: cannot set up the allocator simulation", g->path);
        s = dm_result_build(g, t, sched, &a, cfg, context, as->a, as->n, out, err);
        a.destroy(a.self);
    } else if (s != DNNMEM_OK && limited && err) {
        *err = scratch;
    }
    if (s != DNNMEM_OK)
        return s;
    struct dnnmem_result *r = *out;
    r->needed_bytes = r->peak_allocated + context;
    r->limit_bytes = f->limit;
    r->reserved_is_limit = f->reserves_limit;
    if (f->reserves_limit) {
        if (limited) { /* the one region of the whole limit, also when it failed */
            r->peak_reserved = f->limit / 256 * 256; /* Extend rounds the room down to 256 B */
        } else { /* unknown: the whole limit, whatever it is (not the nominal 1 PiB) */
            r->limit_unknown = true;
            r->peak_reserved = r->peak_allocated;
            for (size_t k = 0; k < r->n_timeline; k++)
                r->timeline[k].reserved = r->timeline[k].allocated;
        }
        r->slack_bytes = r->peak_reserved > r->peak_allocated ? r->peak_reserved - r->peak_allocated : 0;
        r->total_bytes = r->peak_reserved + context;
    }
    if (cfg->capacity_bytes > 0) {
        double headroom = dm_default_real(&e->o->d, HEADROOM);
        r->capacity_bytes = (uint64_t)cfg->capacity_bytes;
        /* the room left inside the allocator's limit at the peak */
        r->margin_bytes = (int64_t)f->limit - (int64_t)r->peak_allocated;
        if (oom && r->margin_bytes >= 0) /* fragmentation: in use fits, the request does not */
            r->margin_bytes = -1;
        r->verdict = oom ? DNNMEM_VERDICT_DOES_NOT_FIT
                   : (double)r->margin_bytes < headroom * (double)r->capacity_bytes
                       ? DNNMEM_VERDICT_TIGHT
                       : DNNMEM_VERDICT_FITS;
        set_largest(r);
    }
    return DNNMEM_OK;
}

enum dnnmem_status dm_est_replay(struct dm_est *e, struct dnnmem_result **out,
                                 struct dnnmem_error *err)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    const struct dm_graph *g = e->g;
    const struct dm_run *run = &e->run;
    enum dnnmem_status s;
    *out = NULL;
    if (o->other_fw) {
        s = fw_result(e, out, err);
        if (s == DNNMEM_OK && o->jax_jit) {
            (*out)->xla_temp_bytes = e->xla.heap.heap_bytes;
            (*out)->xla_output_bytes = e->xla.output_bytes;
            (*out)->xla_argument_bytes = e->xla.entry_bytes;
        }
    } else {
        /* CUDA: the caching allocator with PyTorch's defaults (or a plain
         * rounding when the user overrides the rounding); CPU: exact sizes */
        struct dm_allocator alloc;
        if (run->cuda && c->alloc_round_bytes < 0) {
            struct dm_caching_opts co;
            dm_caching_opts_init(&co);
            s = dm_alloc_caching_new(&co, &alloc);
        } else {
            s = dm_alloc_rounding_new(e->round, &alloc);
        }
        if (s != DNNMEM_OK)
            return dm_fail(err, s, "%s: cannot set up the allocator simulation", g->path);
        s = dm_result_build(g, e->t, &e->sched, &alloc, c, e->context, e->as.a, e->as.n, out, err);
        alloc.destroy(alloc.self);
        if (s == DNNMEM_OK && c->capacity_bytes > 0)
            s = decide(*out, &e->sched, run, e->context, (uint64_t)c->capacity_bytes,
                       dm_default_real(&o->d, HEADROOM), err);
        if (s == DNNMEM_OK)
            (*out)->needed_bytes = (*out)->peak_allocated + e->context;
    }
    if (s == DNNMEM_OK)
        (*out)->micro_steps_left_out = (size_t)e->sched.micro_left_out;
    if (s != DNNMEM_OK && *out) {
        dnnmem_result_free(*out);
        *out = NULL;
    }
    return s;
}
