/*
 * captured.c: the estimate of a captured step (src/load/capture.c,
 * docs/capture-format.md). The capture recorded which storages the step
 * made and when each died, on the meta device, so the graph-level stages
 * (shapes, the eager schedule, the training rules) are not run: the
 * observed events are the schedule. What the meta device cannot show is
 * added here by the runtime's rules, as the eager schedule adds it:
 *
 *  - on CUDA, the cuBLAS workspace of each handle, allocated through the
 *    caching allocator at its first matmul and kept (CublasHandlePool.cpp;
 *    dnnmem_cublas_workspace_default): one for the caller's thread, one for
 *    the autograd engine's device thread, whose backward matmuls run on a
 *    handle of their own (as src/schedule/workspace.c);
 *  - on CUDA, host tensors of the step (a CPU optimizer step counter while
 *    the model ran on meta) take no device memory and are left out;
 *  - the CUDA context, the allocator and the verdict, as for any model.
 *
 * What the capture fixed (batch, mode, optimizer, precision, adapters) it
 * fixed: an option that would change the step is refused, naming it.
 */
#include "estimate.h"

#include <stdlib.h>
#include <string.h>

/* aten ops that run a cuBLAS GEMM or GEMV (aten/src/ATen/native/cuda/Blas.cpp) */
static bool calls_cublas(const char *op)
{
    static const char *const ops[] = {"aten.mm.", "aten.addmm.", "aten.bmm.", "aten.baddbmm.",
                                      "aten.addbmm.", "aten.mv.", "aten.addmv.", "aten.dot.",
                                      "aten._addmm_activation.", "aten._scaled_mm."};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strncmp(op, ops[i], strlen(ops[i])) == 0)
            return true;
    return false;
}

/* The options a capture fixed: each breached one is refused, naming it. */
static enum dnnmem_status check_fixed(const struct dm_graph *g, const struct dm_capture *cap,
                                      const struct dnnmem_config *c, struct dnnmem_error *err)
{
    static const char redo[] = "capture again with it (dnnmem.torch.capture)";
    const struct {
        bool breached;
        const char *flag, *why;
    } rows[] = {
        {c->mode == DNNMEM_MODE_GENERATE, "--mode generate", "a capture holds one training or inference step"},
        {c->mode == DNNMEM_MODE_TRAIN && !cap->train, "--mode train",
         "the capture is of inference (capture with loss= and optimizer=)"},
        {c->batch_size > 0 && c->batch_size != cap->batch, "--batch-size",
         "the capture's sizes are those of the batch it ran (format 1 records no size as a "
         "function of the dims)"},
        {c->seq_len > 0 || c->n_dims > 0 || c->n_input_shapes > 0, "--seq-len, --dim, --input-shape",
         "the capture's sizes are those it ran (format 1 records no size as a function of the dims)"},
        {c->precision != DNNMEM_PRECISION_FP32, "--precision", "the capture ran in its own dtypes"},
        {c->optimizer != DNNMEM_OPT_SGD_MOMENTUM, "--optimizer", "the capture ran its own optimizer"},
        {c->loss != DNNMEM_LOSS_CE || c->loss_all_outputs, "--loss", "the capture ran its own loss"},
        {c->iterations != 0 || c->grad_accum != 0, "--iterations, --grad-accum",
         "the capture ran its own steps"},
        {c->lora.r != 0 || c->quant != DNNMEM_QUANT_NONE || c->kbit_prep != DNNMEM_KBIT_PREP_NONE,
         "--lora, --quant, --kbit-prep", "the capture ran the model as it was"},
        {c->n_freeze > 0 || c->n_checkpoint > 0, "--freeze, --checkpoint", "the capture ran the model as it was"},
        {c->attn != DNNMEM_ATTN_AUTO || c->sdpa_backend != DNNMEM_SDPA_AUTO, "--attn, --sdpa-backend",
         "the capture ran its own attention"},
        {c->inplace != DNNMEM_INPLACE_AUTO, "--inplace", "the capture ran its own in-place ops"},
        {c->framework != DNNMEM_FW_PYTORCH, "--framework", "a capture is a PyTorch eager step"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].breached)
            return dm_fail(err, DNNMEM_E_USAGE, "%s: %s: %s; %s", g->path, rows[i].flag, rows[i].why, redo);
    return DNNMEM_OK;
}

static enum dnnmem_status grow(struct dm_schedule *s, struct dnnmem_error *err, const char *path)
{
    if (s->n_buf < s->cap_buf)
        return DNNMEM_OK;
    int32_t ncap = s->cap_buf ? 2 * s->cap_buf : 64;
    struct dm_buffer *b = realloc(s->buf, (size_t)ncap * sizeof *b);
    if (!b)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
    s->buf = b;
    s->cap_buf = ncap;
    return DNNMEM_OK;
}

/* autograd's gradient sums in place. InputBuffer::accumulate (torch/csrc/
 * autograd/input_buffer.cpp, 2.x) adds a node's gradient `var` into the one
 * an earlier node left in the next node's buffer, `old`: in place
 * (old.add_(var)) when can_accumulate_inplace(old) holds: dense, and the
 * buffer holds the last reference to it and its storage; else old + var.
 * Under the capture's dispatch mode isTensorSubclassLike is true for every
 * tensor (ATen/TensorSubclassLikeUtils.h: dispatch_mode_enabled), so the
 * capture saw old + var: a new buffer, and `old` dying right after. Where
 * that is what it saw (the step marked "accumulate" by dnnmem.torch, one
 * buffer made, `old` freed by the same step, the same bytes), the real
 * engine reuses `old`: the new buffer is `old` (alias), and neither the
 * allocation nor the free happens. */
static void accumulate_in_place(const struct dm_capture *cap, int32_t *alias, bool *skip)
{
    for (size_t i = 0; i < cap->n_ev;) {
        int32_t s = cap->ev[i].step;
        size_t j = i, n_alloc = 0, alloc_at = 0, free_at = 0;
        bool freed = false;
        int32_t old = cap->accum_old[s];
        for (; j < cap->n_ev && cap->ev[j].step == s; j++) {
            if (cap->ev[j].kind == DM_EV_ALLOC) {
                n_alloc++;
                alloc_at = j;
            } else if (cap->ev[j].buf == old) {
                freed = true;
                free_at = j;
            }
        }
        if (old >= 0 && n_alloc == 1 && freed &&
            cap->buf[cap->ev[alloc_at].buf].bytes == cap->buf[old].bytes) {
            int32_t root = old;
            while (alias[root] >= 0)
                root = alias[root];
            alias[cap->ev[alloc_at].buf] = root;
            skip[alloc_at] = skip[free_at] = true;
        }
        i = j;
    }
}

/* The capture's events as a schedule, with the runtime's buffers added. */
static enum dnnmem_status build_schedule(const struct dm_graph *g, const struct dm_run *run,
                                         struct dm_schedule *s, struct dnnmem_error *err)
{
    const struct dm_capture *cap = g->capture;
    memset(s, 0, sizeof *s);
    size_t n_ev = cap->n_ev + 2;
    s->ev = malloc(n_ev * sizeof *s->ev);
    s->steps = malloc((size_t)(cap->n_steps ? cap->n_steps : 1) * sizeof *s->steps);
    s->buf = malloc((size_t)(cap->n_buf + 2) * sizeof *s->buf);
    if (!s->ev || !s->steps || !s->buf)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    s->cap_ev = n_ev;
    s->cap_buf = cap->n_buf + 2;
    s->cap_steps = cap->n_steps;
    memcpy(s->steps, cap->steps, (size_t)cap->n_steps * sizeof *s->steps);
    s->n_steps = cap->n_steps;
    memcpy(s->buf, cap->buf, (size_t)cap->n_buf * sizeof *s->buf);
    s->n_buf = cap->n_buf;
    int32_t *alias = malloc((size_t)(cap->n_buf ? cap->n_buf : 1) * sizeof *alias);
    bool *skip = calloc(cap->n_ev ? cap->n_ev : 1, sizeof *skip);
    if (!alias || !skip) {
        free(alias);
        free(skip);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    for (int32_t i = 0; i < cap->n_buf; i++)
        alias[i] = -1;
    accumulate_in_place(cap, alias, skip);
    bool handle[2] = {false, false}; /* [0] the caller's thread, [1] autograd's */
    int32_t last_step = -1;
    enum dnnmem_status st = DNNMEM_OK;
    for (size_t i = 0; i < cap->n_ev && st == DNNMEM_OK; i++) {
        const struct dm_event *ev = &cap->ev[i];
        const struct dm_step *sp = &cap->steps[ev->step];
        if (run->cuda && ev->step != last_step && sp->node >= 0 && run->cublas_workspace &&
            calls_cublas(g->op_names[sp->node])) {
            bool bw = sp->phase == DM_PHASE_BACKWARD;
            if (!handle[bw] && (st = grow(s, err, g->path)) == DNNMEM_OK) {
                handle[bw] = true;
                s->buf[s->n_buf] = (struct dm_buffer){
                    .bytes = run->cublas_workspace, .tensor = -1, .node = sp->node,
                    .category = DNNMEM_CAT_WORKSPACE, .dtype = DM_UINT8,
                    .what = bw ? "cublas_workspace (autograd thread)" : "cublas_workspace"};
                s->ev[s->n_ev++] = (struct dm_event){.kind = DM_EV_ALLOC, .buf = s->n_buf++,
                                                     .step = ev->step};
            }
        }
        last_step = ev->step;
        if (skip[i] || (run->cuda && cap->host[ev->buf]))
            continue;
        struct dm_event out = *ev;
        if (alias[ev->buf] >= 0) { /* the buffer summed into: its category the later one's */
            out.buf = alias[ev->buf];
            if (s->buf[ev->buf].category == DNNMEM_CAT_GRADIENT)
                s->buf[out.buf].category = DNNMEM_CAT_GRADIENT;
        }
        s->ev[s->n_ev++] = out;
    }
    free(alias);
    free(skip);
    return st;
}

/* "2.13.0" (or "2.13.0+cpu") as 213; 0 when not a version. */
static int torch_number(const char *v)
{
    int64_t n = v ? dm_version_number(v) : -1;
    return n < 0 ? 0 : (int)(n / 10000 * 100 + n / 100 % 100);
}

static void capture_assumptions(struct dm_est *e, const struct dm_capture *cap, const char *torch)
{
    struct dm_assumptions *as = &e->as;
    const struct dm_run *run = &e->run;
    dm_assume(as, "framework", "model", "pytorch eager%s%s, as captured", torch ? " " : "",
              torch ? torch : "");
    dm_assume(as, "device", e->o->cfg.device == DNNMEM_DEVICE_CUDA ? "default" : "option", "%s",
              run->cuda ? "cuda" : "cpu");
    dm_assume(as, "capture", "model",
              "%s%s%d storages, %d ops on the meta device; which exist and when each dies as "
              "observed, not modelled; what kernels allocate inside an op is not seen "
              "(docs/capture-format.md)",
              cap->model ? cap->model : "", cap->model ? ": " : "", (int)cap->n_buf,
              (int)e->g->n_nodes);
    dm_assume(as, "mode", "model", "%s", cap->train ? "train, as captured" : "inference, as captured");
    if (cap->batch)
        dm_assume(as, "dims.batch", "model", "%lld", (long long)cap->batch);
    if (cap->train) {
        dm_assume(as, "optimizer", "model", "%s", cap->optimizer ? cap->optimizer : "as captured");
        dm_assume(as, "iterations", "model", "%d", cap->iterations);
    }
}

enum dnnmem_status dm_est_captured(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                   struct dnnmem_result **out, struct dnnmem_error *err)
{
    const struct dm_capture *cap = g->capture;
    *out = NULL;
    DM_TRY(check_fixed(g, cap, cfg, err));
    const char *torch = cap->torch;
    struct dnnmem_config c = *cfg;
    c.mode = cap->train ? DNNMEM_MODE_TRAIN : DNNMEM_MODE_INFER;
    if (!c.torch_version)
        c.torch_version = torch_number(torch);
    struct dm_est_opts o;
    DM_TRY(dm_est_options(g, false, &c, &o, err));
    struct dm_est e = {.o = &o, .g = g};
    dm_arena_init(&e.arena);
    e.as.arena = &e.arena;
    e.run = (struct dm_run){.train = cap->train, .cuda = c.device == DNNMEM_DEVICE_CUDA,
                            .torch_version = o.torch, .iterations = cap->iterations,
                            .grad_accum = 1};
    capture_assumptions(&e, cap, torch);
    enum dnnmem_status s = DNNMEM_OK;
    e.t = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *e.t);
    if (!e.t)
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    for (int32_t i = 0; s == DNNMEM_OK && i < g->n_tensors; i++) {
        const struct dm_tensor *tt = &g->tensors[i];
        struct dm_tinfo *ti = &e.t[i];
        ti->dtype = tt->dtype;
        ti->rank = tt->rank;
        ti->numel = 1;
        for (int d = 0; d < tt->rank; d++)
            ti->numel *= (ti->dims[d] = tt->dims[d].value); /* checked at load */
        ti->bytes = cap->buf[i].bytes;
    }
    if (s == DNNMEM_OK)
        s = dm_est_runtime(&e, err);
    for (size_t i = 0; s == DNNMEM_OK && i < e.as.n; i++) /* what the runtime's table says of */
        if (strcmp(e.as.a[i].key, "inplace") == 0) {        /* in-place ops, a capture observed */
            e.as.a[i].value = "as captured (the ops the step ran in place)";
            e.as.a[i].source = "model";
        }
    if (s == DNNMEM_OK)
        s = build_schedule(g, &e.run, &e.sched, err);
    if (s == DNNMEM_OK)
        s = dm_est_replay(&e, out, err);
    dm_schedule_free(&e.sched);
    free(e.t);
    dm_arena_free(&e.arena);
    return s;
}
