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
 *  - on the CPU, the buffers PyTorch's convolution kernels (oneDNN, THNN)
 *    make inside the op, by the eager schedule's rules (src/schedule/
 *    cpuconv.c), from the step's "conv" facts: a captured conv costs what
 *    the ONNX path's conv costs;
 *  - on CUDA, host tensors of the step (a CPU optimizer step counter while
 *    the model ran on meta) take no device memory and are left out;
 *  - the CUDA context, the allocator and the verdict, as for any model.
 *
 * What the capture fixed (batch, mode, optimizer, precision, adapters) it
 * fixed: an option that would change the step is refused, naming it.
 */
#include "estimate.h"
#include "schedule/cpuconv.h"

#include <stdio.h>
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
        {c->n_input_shapes > 0, "--input-shape",
         "the capture's inputs are those it ran (its dims are set with --batch-size, --seq-len "
         "or --dim, where it was captured with dims=)"},
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

/* A sequence dim's name, as the ONNX path reads one (src/estimate/shapes.c):
 * "seq", "seq_len", ..., not a cache's "past_seq_len" or "total_seq_len". */
static bool seq_like(const char *name)
{
    return strstr(name, "seq") && !strstr(name, "past") && !strstr(name, "total") && !strstr(name, "max");
}

int64_t dm_dim_least(const struct dm_graph *g, const char *dim)
{
    const struct dm_capture *cap = g ? g->capture : NULL;
    for (int d = 0; cap && d < cap->n_dims; d++)
        if (strcmp(cap->dims[d].name, dim ? dim : "batch") == 0)
            return cap->dims[d].min;
    return 1;
}

/* The value of each of the capture's dims the options ask for (its captured
 * value where they say none): --batch-size is "batch", --seq-len the
 * sequence dim, --dim NAME=V any. A dim the capture's sizes are not
 * functions of, or a value below the least they hold for, is refused. */
static enum dnnmem_status dim_values(const struct dm_graph *g, const struct dm_capture *cap,
                                     const struct dnnmem_config *c, int64_t *at, bool *moved,
                                     struct dnnmem_error *err)
{
    static const char redo[] = "capture with dims= (dnnmem.torch.capture) to vary it";
    const char *given[DM_CAPTURE_DIMS] = {0};
    int d_batch = -1, d_seq = -1;
    for (int d = 0; d < cap->n_dims; d++) {
        at[d] = cap->dims[d].value;
        if (strcmp(cap->dims[d].name, "batch") == 0)
            d_batch = d;
        else if (d_seq < 0 && seq_like(cap->dims[d].name))
            d_seq = d;
    }
    if (c->batch_size > 0) {
        if (d_batch < 0 && c->batch_size != cap->batch)
            return dm_fail(err, DNNMEM_E_USAGE, "%s: --batch-size: the capture's sizes are those "
                           "of the batch it ran (%lld); %s", g->path, (long long)cap->batch, redo);
        if (d_batch >= 0) {
            at[d_batch] = c->batch_size;
            given[d_batch] = "--batch-size";
        }
    }
    if (c->seq_len > 0) {
        if (d_seq < 0)
            return dm_fail(err, DNNMEM_E_USAGE, "%s: --seq-len: the capture's sizes are not "
                           "functions of a sequence dim; %s", g->path, redo);
        at[d_seq] = c->seq_len;
        given[d_seq] = "--seq-len";
    }
    for (size_t k = 0; k < c->n_dims; k++) {
        int d = 0;
        while (d < cap->n_dims && strcmp(cap->dims[d].name, c->dims[k].name) != 0)
            d++;
        if (d == cap->n_dims) {
            char list[256] = "";
            for (int j = 0; j < cap->n_dims; j++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
                         cap->dims[j].name);
            return dm_fail(err, DNNMEM_E_USAGE, "%s: --dim %s: the capture's sizes are functions "
                           "of %s; %s", g->path, c->dims[k].name, *list ? list : "no dim", redo);
        }
        at[d] = c->dims[k].value;
        given[d] = "--dim";
    }
    *moved = false;
    for (int d = 0; d < cap->n_dims; d++) {
        if (at[d] < cap->dims[d].min)
            return dm_fail(err, DNNMEM_E_USAGE, "%s: %s %s%s%lld: the capture's sizes hold for %s >= "
                           "%lld (the step ran differently below); capture at %lld", g->path,
                           given[d], strcmp(given[d], "--dim") == 0 ? cap->dims[d].name : "",
                           strcmp(given[d], "--dim") == 0 ? "=" : "", (long long)at[d],
                           cap->dims[d].name, (long long)cap->dims[d].min, (long long)at[d]);
        *moved |= at[d] != cap->dims[d].value;
    }
    return DNNMEM_OK;
}

/* The capture's sizes at the dims' values: per buffer its bytes, per step
 * its conv (the capture's own where the dims did not move). */
struct sized {
    int64_t at[DM_CAPTURE_DIMS];
    bool moved;
    uint64_t *bytes;
    const struct dm_capture_conv **conv;
};

static enum dnnmem_status size_at(const struct dm_graph *g, const struct sized *z, const struct dm_poly *p,
                                  int64_t *v, const char *what, int32_t id, struct dnnmem_error *err)
{
    const struct dm_capture *cap = g->capture;
    if (z->moved && p && p->n && !dm_poly_eval(p, z->at, cap->n_dims, INT64_C(1) << 50, v))
        return dm_fail(err, DNNMEM_E_SHAPE, "%s: %s %d: its size at these dims is negative or above "
                       "2^50 bytes", g->path, what, (int)id);
    return DNNMEM_OK;
}

/* A conv's sizes (input, weight, output) at the dims. */
static enum dnnmem_status conv_at(const struct dm_graph *g, struct dm_est *e, const struct sized *z,
                                  int32_t step, const struct dm_capture_conv **out, struct dnnmem_error *err)
{
    const struct dm_capture_conv *c = g->capture->conv[step];
    *out = c;
    if (!c || !z->moved || (!c->poly[0] && !c->poly[1] && !c->poly[2]))
        return DNNMEM_OK;
    struct dm_capture_conv *n = dm_arena_alloc(&e->arena, sizeof *n);
    if (!n)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    *n = *c;
    struct dm_tinfo *ts[3] = {&n->cv.x, &n->cv.w, &n->cv.y};
    for (int l = 0; l < 3; l++) {
        if (!c->poly[l])
            continue;
        int64_t numel = 1;
        for (int d = 0; d < ts[l]->rank; d++) {
            DM_TRY(size_at(g, z, &c->poly[l][d], &ts[l]->dims[d], "the conv of step", step, err));
            if (!dm_mul_ok(numel, ts[l]->dims[d], &numel))
                return dm_fail(err, DNNMEM_E_SHAPE, "%s: the conv of step %d: too many elements",
                               g->path, (int)step);
        }
        ts[l]->numel = numel;
        if (ts[l]->dtype != DM_UNDEFINED && !dm_dtype_bytes(ts[l]->dtype, numel, &ts[l]->bytes))
            return dm_fail(err, DNNMEM_E_SHAPE, "%s: the conv of step %d: too many bytes", g->path,
                           (int)step);
    }
    if (n->cv.cl_copy)
        n->cv.cl_copy = n->cv.y.bytes;
    *out = n;
    return DNNMEM_OK;
}

/* Every size of the capture at the dims the options ask for. */
static enum dnnmem_status size_capture(const struct dm_graph *g, struct dm_est *e, struct sized *z,
                                       struct dnnmem_error *err)
{
    const struct dm_capture *cap = g->capture;
    z->bytes = dm_arena_array(&e->arena, cap->n_buf ? (size_t)cap->n_buf : 1, sizeof *z->bytes);
    z->conv = dm_arena_array(&e->arena, (size_t)cap->n_steps, sizeof *z->conv);
    if (!z->bytes || !z->conv)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    for (int32_t i = 0; i < cap->n_buf; i++) {
        int64_t v = (int64_t)cap->buf[i].bytes;
        DM_TRY(size_at(g, z, cap->bytes_poly ? &cap->bytes_poly[i] : NULL, &v, "storage", i, err));
        z->bytes[i] = (uint64_t)v;
    }
    for (int32_t k = 0; k < cap->n_steps; k++)
        DM_TRY(conv_at(g, e, z, k, &z->conv[k], err));
    return DNNMEM_OK;
}

/* Appending to the schedule being built (arrays grown by doubling). */
struct out {
    struct dm_schedule *s;
    const char *path;
    struct dnnmem_error *err;
};

static enum dnnmem_status push_ev(struct out *o, enum dm_ev_kind kind, int32_t buf, int32_t step)
{
    struct dm_schedule *s = o->s;
    if (!dm_grow((void **)&s->ev, sizeof *s->ev, s->n_ev, &s->cap_ev))
        return dm_fail(o->err, DNNMEM_E_NOMEM, "%s: out of memory", o->path);
    s->ev[s->n_ev++] = (struct dm_event){.kind = (uint8_t)kind, .buf = buf, .step = step};
    return DNNMEM_OK;
}

/* A runtime buffer (a workspace) allocated at `step`; its id in *id. */
static enum dnnmem_status runtime_buf(struct out *o, enum dm_dtype dtype, uint64_t bytes, int32_t node,
                                      const char *what, int32_t step, int32_t *id)
{
    struct dm_schedule *s = o->s;
    size_t cap = (size_t)s->cap_buf;
    if (s->n_buf == INT32_MAX || !dm_grow((void **)&s->buf, sizeof *s->buf, (size_t)s->n_buf, &cap) ||
        cap > INT32_MAX)
        return dm_fail(o->err, DNNMEM_E_NOMEM, "%s: out of memory", o->path);
    s->cap_buf = (int32_t)cap;
    *id = s->n_buf;
    s->buf[s->n_buf++] = (struct dm_buffer){.bytes = bytes, .tensor = -1, .node = node,
                                            .category = DNNMEM_CAT_WORKSPACE, .dtype = dtype,
                                            .what = what};
    return push_ev(o, DM_EV_ALLOC, *id, step);
}

/* cpuconv.c's buffers of a captured conv, as runtime buffers of its step
 * (the sink: made at the step, dropped as a free event there). */
struct conv_sink {
    struct out *o;
    int32_t node, step;
    enum dnnmem_status st;
};
static int32_t conv_alloc(void *ctx, enum dm_dtype dtype, uint64_t bytes, const char *what)
{
    struct conv_sink *k = ctx;
    int32_t id = -1;
    if (k->st == DNNMEM_OK)
        k->st = runtime_buf(k->o, dtype, bytes, k->node, what, k->step, &id);
    return k->st == DNNMEM_OK ? id : -1;
}
static void conv_unref(void *ctx, int32_t buf)
{
    struct conv_sink *k = ctx;
    if (k->st == DNNMEM_OK)
        k->st = push_ev(k->o, DM_EV_FREE, buf, k->step);
}

/* Which grad (0 input, 1 weight, 2 bias) the step's n-th allocation is: the
 * n-th made of output_mask; -1 when the capture made another count. */
static int conv_grad_of(const struct dm_capture_conv *c, int n_alloc, int nth)
{
    int made = c->output_mask[0] + c->output_mask[1] + c->output_mask[2];
    if (made != n_alloc)
        return -1;
    for (int k = 0, seen = 0; k < 3; k++)
        if (c->output_mask[k] && seen++ == nth)
            return k;
    return -1;
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
static void accumulate_in_place(const struct dm_capture *cap, const uint64_t *bytes, int32_t *alias,
                                bool *skip)
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
            bytes[cap->ev[alloc_at].buf] == bytes[old]) {
            int32_t root = old;
            while (alias[root] >= 0)
                root = alias[root];
            alias[cap->ev[alloc_at].buf] = root;
            skip[alloc_at] = skip[free_at] = true;
        }
        i = j;
    }
}

/* The step's own event k into the schedule (an accumulate's skipped, a
 * summed buffer's aliased, a host storage left out on CUDA). */
static enum dnnmem_status step_event(struct out *o, const struct dm_capture *cap, const struct dm_run *run,
                                     size_t k, const int32_t *alias, const bool *skip, int32_t step)
{
    const struct dm_event *ev = &cap->ev[k];
    if (skip[k] || (run->cuda && cap->host[ev->buf]))
        return DNNMEM_OK;
    int32_t buf = ev->buf;
    if (alias[buf] >= 0) { /* the buffer summed into: its category the later one's */
        if (o->s->buf[buf].category == DNNMEM_CAT_GRADIENT)
            o->s->buf[alias[buf]].category = DNNMEM_CAT_GRADIENT;
        buf = alias[buf];
    }
    return push_ev(o, (enum dm_ev_kind)ev->kind, buf, step);
}

/* Step s's events (cap->ev[i..j)) into the schedule: first the runtime's
 * buffers of the op (a handle's first cuBLAS workspace, kept; a CPU conv's
 * kernel buffers, as the eager schedule places them: dm_sb_workspace_begin,
 * and in a backward each grad between dm_sb_workspace_grad's before and
 * after, THNN's columns once all are made), then its allocations, the
 * kernel buffers' frees, its frees. */
static enum dnnmem_status one_step(struct out *o, const struct dm_graph *g, const struct dm_run *run,
                                   const struct sized *z, size_t i, size_t j, const int32_t *alias,
                                   const bool *skip, bool handle[2])
{
    const struct dm_capture *cap = g->capture;
    int32_t step = cap->ev[i].step;
    const struct dm_step *sp = &cap->steps[step];
    bool bw = sp->phase == DM_PHASE_BACKWARD;
    if (run->cuda && sp->node >= 0 && run->cublas_workspace && !handle[bw] &&
        calls_cublas(g->op_names[sp->node])) {
        int32_t id;
        handle[bw] = true;
        DM_TRY(runtime_buf(o, DM_UINT8, run->cublas_workspace, sp->node,
                           bw ? "cublas_workspace (autograd thread)" : "cublas_workspace", step, &id));
    }
    const struct dm_capture_conv *c = run->cuda ? NULL : z->conv[step];
    struct conv_sink cs = {.o = o, .node = sp->node, .step = step, .st = DNNMEM_OK};
    struct dm_ws_sink sink = {.ctx = &cs, .alloc = conv_alloc, .unref = conv_unref};
    _Static_assert(DM_WS_BUFS == 5, "the workspace initializer lists five slots");
    struct dm_ws ws = {{-1, -1, -1, -1, -1}};
    int n_alloc = 0, nth = 0;
    for (size_t k = i; k < j; k++)
        n_alloc += cap->ev[k].kind == DM_EV_ALLOC;
    if (c)
        dm_cpu_conv_begin(&c->cv, run, &sink, c->backward, &ws);
    bool ended = false;
    for (size_t k = i; k <= j && cs.st == DNNMEM_OK; k++) {
        if (!ended && (k == j || cap->ev[k].kind == DM_EV_FREE)) { /* the op's outputs are made */
            ended = true;
            uint64_t late = c && c->backward && c->output_mask[1] ? dm_cpu_conv_grad_scratch(&c->cv, run) : 0;
            if (late)
                conv_unref(&cs, conv_alloc(&cs, c->cv.x.dtype, late, "thnn_columns (grad_weight)"));
            for (int w = 0; w < DM_WS_BUFS; w++)
                if (ws.buf[w] >= 0)
                    conv_unref(&cs, ws.buf[w]);
        }
        if (k == j || cs.st != DNNMEM_OK)
            break;
        int grad = c && c->backward && cap->ev[k].kind == DM_EV_ALLOC ? conv_grad_of(c, n_alloc, nth++) : -1;
        if (grad >= 0)
            dm_cpu_conv_grad(&c->cv, run, &sink, grad, &ws, false);
        DM_TRY(cs.st);
        DM_TRY(step_event(o, cap, run, k, alias, skip, step));
        if (grad >= 0)
            dm_cpu_conv_grad(&c->cv, run, &sink, grad, &ws, true);
    }
    return cs.st;
}

/* The capture's events as a schedule, with the runtime's buffers added. */
static enum dnnmem_status build_schedule(const struct dm_graph *g, const struct dm_run *run,
                                         const struct sized *z, struct dm_schedule *s,
                                         struct dnnmem_error *err)
{
    const struct dm_capture *cap = g->capture;
    memset(s, 0, sizeof *s);
    struct out o = {.s = s, .path = g->path, .err = err};
    s->steps = malloc((size_t)(cap->n_steps ? cap->n_steps : 1) * sizeof *s->steps);
    s->buf = malloc((size_t)(cap->n_buf ? cap->n_buf : 1) * sizeof *s->buf);
    int32_t *alias = malloc((size_t)(cap->n_buf ? cap->n_buf : 1) * sizeof *alias);
    bool *skip = calloc(cap->n_ev ? cap->n_ev : 1, sizeof *skip);
    enum dnnmem_status st = DNNMEM_OK;
    if (!s->steps || !s->buf || !alias || !skip)
        st = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    if (st == DNNMEM_OK) {
        s->cap_steps = s->n_steps = cap->n_steps;
        memcpy(s->steps, cap->steps, (size_t)cap->n_steps * sizeof *s->steps);
        s->cap_buf = s->n_buf = cap->n_buf;
        memcpy(s->buf, cap->buf, (size_t)cap->n_buf * sizeof *s->buf);
        for (int32_t i = 0; i < cap->n_buf; i++) {
            s->buf[i].bytes = z->bytes[i];
            alias[i] = -1;
        }
        accumulate_in_place(cap, z->bytes, alias, skip);
    }
    bool handle[2] = {false, false}; /* [0] the caller's thread, [1] autograd's */
    for (size_t i = 0; st == DNNMEM_OK && i < cap->n_ev;) {
        size_t j = i;
        while (j < cap->n_ev && cap->ev[j].step == cap->ev[i].step)
            j++;
        st = one_step(&o, g, run, z, i, j, alias, skip, handle);
        i = j;
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

static void capture_assumptions(struct dm_est *e, const struct dm_capture *cap, const char *torch,
                                const struct sized *z)
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
    if (cap->sdpa_cpu)
        dm_assume(as, "attention", "model",
                  "%d F.scaled_dot_product_attention calls run as the CPU runs them (its flash "
                  "kernel where it picks it: dnnmem.torch)%s", (int)cap->sdpa_cpu,
                  run->cuda ? "; CUDA's backend choice (flash, memory-efficient, math) is not "
                              "applied to a capture yet: its buffers are the CPU kernel's"
                            : "");
    if (cap->batch && !cap->n_dims)
        dm_assume(as, "dims.batch", "model", "%lld", (long long)cap->batch);
    for (int d = 0; d < cap->n_dims; d++) {
        const char *key = dm_arena_printf(as->arena, "dims.%s", cap->dims[d].name);
        if (key)
            dm_assume(as, key, z->at[d] == cap->dims[d].value ? "model" : "option",
                      "%lld (captured at %lld; sizes as functions of the dims, for %s >= %lld)",
                      (long long)z->at[d], (long long)cap->dims[d].value, cap->dims[d].name,
                      (long long)cap->dims[d].min);
    }
    if (cap->train) {
        dm_assume(as, "optimizer", "model", "%s", cap->optimizer ? cap->optimizer : "as captured");
        dm_assume(as, "iterations", "model", "%d", cap->iterations);
        if (cap->grad_accum > 1)
            dm_assume(as, "grad_accum", "model", "%d micro-batches per optimizer step, as captured",
                      cap->grad_accum);
        if (cap->grad_scaler)
            dm_assume(as, "grad_scaler", "model", "torch.amp.GradScaler as captured (its scale, "
                      "growth tracker, found_inf and unscale_'s temporaries); the gradients "
                      "assumed finite: every optimizer step taken, the scale never backed off "
                      "(dnnmem.torch)");
    }
}

/* Ops whose meta kernel is not the CUDA kernel (docs/capture-format.md,
 * "Meta and the device", the one table of them): the rows a CUDA estimate of
 * a capture does not model yet, each found in the capture and warned of, never
 * silent. (The rows it models: cuBLAS's workspaces, above; the norms' saved
 * statistics, float32 on meta as on CUDA.) */
static bool has_op(const char *op, const char *const *prefix)
{
    for (; *prefix; prefix++)
        if (strncmp(op, *prefix, strlen(*prefix)) == 0)
            return true;
    return false;
}

/* steps of `phase` (or any, -1) whose op has one of the prefixes (or, with
 * `none`, none of them) */
static int32_t count_ops(const struct dm_graph *g, const struct dm_capture *cap, int phase,
                         const char *const *prefix, bool none)
{
    int32_t n = 0;
    for (int32_t k = 0; k < cap->n_steps; k++) {
        int32_t node = cap->steps[k].node;
        if (node >= 0 && (phase < 0 || cap->steps[k].phase == phase) &&
            has_op(g->op_names[node], prefix) != none)
            n++;
    }
    return n;
}

static int32_t cudnn_convs(const struct dm_graph *g, const struct dm_capture *cap)
{
    static const char *const conv[] = {"aten.convolution.", "aten.convolution_backward.", NULL};
    return count_ops(g, cap, -1, conv, false);
}

static int32_t sdpa_calls(const struct dm_graph *g, const struct dm_capture *cap)
{
    (void)g;
    return cap->sdpa_cpu;
}

static int32_t rnn_modules(const struct dm_graph *g, const struct dm_capture *cap)
{
    (void)g;
    return cap->rnn_modules;
}

/* the optimizer's ops where none is a foreach or fused kernel: the for-loop */
static int32_t loop_optimizer(const struct dm_graph *g, const struct dm_capture *cap)
{
    static const char *const multi[] = {"aten._foreach_", "aten._fused_", NULL};
    if (count_ops(g, cap, DM_PHASE_OPTIMIZER, multi, false))
        return 0;
    return count_ops(g, cap, DM_PHASE_OPTIMIZER, multi, true);
}

static const struct {
    int32_t (*count)(const struct dm_graph *, const struct dm_capture *);
    const char *what, *cuda;
} meta_rows[] = {
    {cudnn_convs, "convolution ops",
     "cuDNN's algorithm takes a workspace inside each (aten/src/ATen/native/cudnn/Conv_v8.cpp); "
     "meta's kernel allocates none"},
    {sdpa_calls, "F.scaled_dot_product_attention calls",
     "CUDA picks flash, memory-efficient or math (aten/src/ATen/native/transformers/cuda/"
     "sdp_utils.cpp); the capture holds the CPU kernel's buffers"},
    {rnn_modules, "nn.RNN/LSTM/GRU modules",
     "CUDA runs cuDNN's fused RNN (aten._cudnn_rnn: flattened weights, workspace, reserve; "
     "aten/src/ATen/native/cudnn/RNN.cpp); meta runs the per-step cells"},
    {loop_optimizer, "optimizer ops of its for-loop",
     "torch.optim defaults to foreach on CUDA (_default_to_fused_or_foreach, torch/optim/"
     "optimizer.py), whose temporaries exist for all parameters at once, where meta runs the "
     "for-loop (a job passing foreach=False runs what was captured; foreach=True is captured "
     "as foreach)"},
};

static enum dnnmem_status meta_warnings(const struct dm_graph *g, const struct dm_capture *cap,
                                        struct dnnmem_result *r, struct dnnmem_error *err)
{
    char buf[512];
    for (size_t i = 0; i < sizeof meta_rows / sizeof meta_rows[0]; i++) {
        int32_t n = meta_rows[i].count(g, cap);
        if (!n)
            continue;
        snprintf(buf, sizeof buf,
                 "%s: %d %s: %s; not modelled for a capture on CUDA yet: their buffers are "
                 "meta's (docs/capture-format.md, \"Meta and the device\")",
                 g->path, (int)n, meta_rows[i].what, meta_rows[i].cuda);
        if (dm_result_warn(r, buf) != DNNMEM_OK)
            return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    return DNNMEM_OK;
}

enum dnnmem_status dm_est_captured(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                   struct dnnmem_result **out, struct dnnmem_error *err)
{
    const struct dm_capture *cap = g->capture;
    *out = NULL;
    DM_TRY(check_fixed(g, cap, cfg, err));
    struct sized z = {.moved = false};
    DM_TRY(dim_values(g, cap, cfg, z.at, &z.moved, err));
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
    capture_assumptions(&e, cap, torch, &z);
    enum dnnmem_status s = size_capture(g, &e, &z, err);
    e.t = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *e.t);
    if (!e.t)
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    for (int32_t i = 0; s == DNNMEM_OK && i < g->n_tensors; i++) {
        const struct dm_tensor *tt = &g->tensors[i];
        struct dm_tinfo *ti = &e.t[i];
        ti->dtype = tt->dtype;
        ti->rank = tt->rank;
        ti->numel = 1;
        const struct dm_poly *sp = cap->shape_poly ? cap->shape_poly[i] : NULL;
        for (int d = 0; s == DNNMEM_OK && d < tt->rank; d++) {
            ti->dims[d] = tt->dims[d].value; /* checked at load */
            if (sp)
                s = size_at(g, &z, &sp[d], &ti->dims[d], "storage", i, err);
            if (s == DNNMEM_OK && !dm_mul_ok(ti->numel, ti->dims[d], &ti->numel))
                s = dm_fail(err, DNNMEM_E_SHAPE, "%s: storage %d: too many elements", g->path, (int)i);
        }
        ti->bytes = z.bytes[i];
    }
    if (s == DNNMEM_OK)
        s = dm_est_runtime(&e, err);
    for (size_t i = 0; s == DNNMEM_OK && i < e.as.n; i++) /* what the runtime's table says of */
        if (strcmp(e.as.a[i].key, "inplace") == 0) {        /* in-place ops, a capture observed */
            e.as.a[i].value = "as captured (the ops the step ran in place)";
            e.as.a[i].source = "model";
        }
    if (s == DNNMEM_OK)
        s = build_schedule(g, &e.run, &z, &e.sched, err);
    if (s == DNNMEM_OK)
        s = dm_est_replay(&e, out, err);
    if (s == DNNMEM_OK && e.run.cuda && (s = meta_warnings(g, cap, *out, err)) != DNNMEM_OK) {
        dnnmem_result_free(*out);
        *out = NULL;
    }
    dm_schedule_free(&e.sched);
    free(e.t);
    dm_arena_free(&e.arena);
    return s;
}
