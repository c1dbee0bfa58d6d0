/*
 * api.c: the public entry points. Loading maps the file and hands it to the
 * front end; an estimate binds the dims, infers shapes, schedules, simulates
 * the allocator and builds the result.
 */
#include "dnnmem-impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct dnnmem_model {
    struct dm_graph g;       /* HuggingFace configs: with eager attention */
    struct dm_graph sdpa;    /* HuggingFace configs: with sdpa (n_nodes 0 otherwise) */
    struct dm_checkpoint ck; /* a model directory's safetensors headers */
};

const struct dm_graph *dm_model_graph(const dnnmem_model *m) { return &m->g; }
const struct dm_graph *dm_model_graph_sdpa(const dnnmem_model *m) { return &m->sdpa; }

static enum dnnmem_status load_bytes(const uint8_t *data, size_t size, const char *name,
                                     dnnmem_model **out, struct dnnmem_error *err)
{
    *out = NULL;
    dnnmem_model *m = calloc(1, sizeof *m);
    if (!m)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", name);
    dm_graph_init(&m->g);
    dm_graph_init(&m->sdpa);
    m->g.path = dm_arena_strdup(&m->g.arena, name);
    m->sdpa.path = m->g.path;
    if (!m->g.path) {
        dnnmem_model_free(m);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", name);
    }
    size_t k = 0;
    while (k < size && k < 64 && isspace(data[k]))
        k++;
    enum dnnmem_status s;
    if (size >= 4 && memcmp(data, "PK\003\004", 4) == 0) {
        /* a zip archive: a .keras model is one, its architecture in config.json */
        s = dm_fail(err, DNNMEM_E_UNSUPPORTED,
                    "%s: a zip archive (a .keras model?); dnnmem reads its architecture: "
                    "extract it with 'unzip -p %s config.json > config.json' and pass that",
                    name, name);
    } else if (k < size && data[k] == '{' && dm_keras_json(data, size)) {
        s = dm_load_keras(&m->g, data, size, err);
    } else if (k < size && data[k] == '{') {
        s = dm_load_hf(&m->g, data, size, false, err);
        if (s == DNNMEM_OK)
            s = dm_load_hf(&m->sdpa, data, size, true, err);
    } else
        s = dm_load_onnx(&m->g, data, size, err);
    if (s == DNNMEM_OK)
        s = dm_graph_lift(&m->g, err);
    if (s != DNNMEM_OK) {
        dnnmem_model_free(m);
        return s;
    }
    *out = m;
    return DNNMEM_OK;
}

enum dnnmem_status dnnmem_model_load_buffer(const void *data, size_t size, const char *name,
                                            dnnmem_model **out, struct dnnmem_error *err)
{
    if (!out || (!data && size))
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_model_load_buffer: NULL argument");
    return load_bytes(data, size, name ? name : "<buffer>", out, err);
}

enum dnnmem_status dnnmem_model_load(const char *path, dnnmem_model **out, struct dnnmem_error *err)
{
    if (!path || !out)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_model_load: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return dm_fail(err, DNNMEM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a HuggingFace model directory */
        close(fd);
        char *cfg = malloc(strlen(path) + sizeof "/config.json");
        if (!cfg)
            return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
        sprintf(cfg, "%s/config.json", path);
        enum dnnmem_status s = dnnmem_model_load(cfg, out, err);
        free(cfg);
        if (s == DNNMEM_OK && (s = dm_check_safetensors(&(*out)->g, path, &(*out)->ck, err)) !=
                                  DNNMEM_OK) {
            dnnmem_model_free(*out);
            *out = NULL;
        }
        return s;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return dm_fail(err, DNNMEM_E_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return dm_fail(err, DNNMEM_E_PARSE, "%s: empty file", path);
    }
    /* mmap: the front end reads the graph and skips weight bytes, so their
     * pages are never touched, let alone copied */
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return dm_fail(err, DNNMEM_E_IO, "%s: cannot map: %s", path, strerror(errno));
    enum dnnmem_status s = load_bytes(map, size, path, out, err);
    munmap(map, size);
    return s;
}

void dnnmem_model_free(dnnmem_model *m)
{
    if (!m)
        return;
    dm_graph_free(&m->g);
    dm_graph_free(&m->sdpa);
    free(m);
}

void dnnmem_model_get_info(const dnnmem_model *m, struct dnnmem_model_info *info)
{
    const struct dm_graph *g = &m->g;
    memset(info, 0, sizeof *info);
    info->path = g->path;
    info->format = g->format;
    info->producer = g->producer ? g->producer : "";
    info->opset = g->opset;
    info->n_nodes = (size_t)g->n_nodes;
    info->n_tensors = (size_t)g->n_tensors;
    for (int32_t i = 0; i < g->n_tensors; i++)
        info->n_weights += g->tensors[i].role == DM_ROLE_WEIGHT;
    info->n_inputs = (size_t)g->n_inputs;
    info->n_symbols = (size_t)g->n_symbols;
    info->checkpoint = m->ck.file;
    info->checkpoint_tensors = m->ck.n_tensors;
    info->checkpoint_shards_missing = m->ck.shards_missing;
    info->checkpoint_bytes = m->ck.bytes;
    info->checkpoint_dtype = m->ck.dtype != DM_UNDEFINED ? dm_dtype_name(m->ck.dtype) : "";
}

const char *dnnmem_model_symbol(const dnnmem_model *m, size_t i)
{
    return i < (size_t)m->g.n_symbols ? m->g.symbols[i] : NULL;
}

void dnnmem_config_init(struct dnnmem_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->mode = DNNMEM_MODE_INFER;
    cfg->device = DNNMEM_DEVICE_CUDA;
    cfg->cuda_context_bytes = -1;
    cfg->alloc_round_bytes = -1;
    cfg->cublas_workspace_bytes = -1;
    cfg->conv_workspace_bytes = -1;
    cfg->n_top_tensors = 3;
}

int64_t dnnmem_cuda_context_default(int torch_version, int cuda_version)
{
    if (cuda_version && cuda_version < 117)
        return INT64_C(1343) << 20;   /* eager module loading (HF docs, V100, CUDA 11.2) */
    if (torch_version && torch_version < 200)
        return DNNMEM_CUDA_CONTEXT_DEFAULT; /* PR #86509, 1.13, lazy */
    return INT64_C(426) << 20;       /* unsloth-zoo PR #1053, 2.10 + CUDA 13.0, lazy */
}

int64_t dnnmem_cublas_workspace_default(int torch_version, int compute_capability)
{
    if (torch_version && torch_version < 200)
        return INT64_C(4) << 20;                  /* PR #74159 */
    if (compute_capability >= 90 && compute_capability < 130)
        return INT64_C(32) << 20;                 /* PR #91564 (9.x), PR #175344 (10-12) */
    return 2 * (INT64_C(4) << 20) + 8 * (INT64_C(16) << 10); /* :4096:2:16:8 */
}

/* ---- binding symbolic dims -------------------------------------------------- */

static bool name_is(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (strcasecmp(name, *list) == 0)
            return true;
    return false;
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return false;
}

/* Names exporters give the batch axis: torch.onnx dynamic_axes names chosen by
 * users ("batch", "batch_size"), tf2onnx's "N", "unk__" only by position (not
 * matched), HF optimum's "batch_size". */
static bool is_batch_name(const char *s)
{
    static const char *const names[] = {"n", "b", "bs", "nbatch", NULL};
    return contains_ci(s, "batch") || name_is(s, names);
}

/* Sequence axes: "seq", "seq_len", "sequence", "sequence_length" (optimum);
 * not the KV-cache axes "past_seq_len", "total_seq_len", "max_seq_len",
 * which hold other lengths and must be bound by name. */
static bool is_seq_name(const char *s)
{
    return contains_ci(s, "seq") && !contains_ci(s, "past") && !contains_ci(s, "total") &&
           !contains_ci(s, "max") && !contains_ci(s, "cache");
}

struct assumptions {
    struct dnnmem_assumption a[64];
    size_t n;
    struct dm_arena *arena;
};

static void assume(struct assumptions *as, const char *key, const char *source, const char *fmt, ...)
    DM_PRINTF(4, 5);
static void assume(struct assumptions *as, const char *key, const char *source, const char *fmt, ...)
{
    if (as->n >= sizeof as->a / sizeof as->a[0])
        return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *v = dm_arena_strdup(as->arena, buf);
    as->a[as->n++] = (struct dnnmem_assumption){key, v ? v : "", source};
}

static enum dnnmem_status bind_dims(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                    int64_t *vals, struct assumptions *as, struct dnnmem_error *err)
{
    bool batch_used = false, seq_used = false;
    for (size_t k = 0; k < cfg->n_dims; k++) {
        const struct dnnmem_dim_binding *b = &cfg->dims[k];
        if (!b->name || b->value < 0)
            return dm_fail(err, DNNMEM_E_USAGE, "--dim %s=%lld: the value must be a non-negative integer",
                           b->name ? b->name : "?", (long long)b->value);
        bool found = false;
        for (int32_t i = 0; i < g->n_symbols; i++)
            if (strcmp(g->symbols[i], b->name) == 0)
                found = true;
        if (!found) {
            char list[256] = "";
            for (int32_t i = 0; i < g->n_symbols; i++) {
                size_t len = strlen(list);
                snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", g->symbols[i]);
            }
            return dm_fail(err, DNNMEM_E_USAGE, "--dim %s: %s has no dim of that name (it has: %s)",
                           b->name, g->path, g->n_symbols ? list : "none");
        }
    }
    for (int32_t i = 0; i < g->n_symbols; i++) {
        const char *name = g->symbols[i];
        const char *key = dm_arena_printf(as->arena, "dims.%s", name);
        vals[i] = -1; /* unbound */
        for (size_t k = 0; k < cfg->n_dims; k++)
            if (strcmp(cfg->dims[k].name, name) == 0) {
                vals[i] = cfg->dims[k].value;
                assume(as, key, "option", "%lld (--dim)", (long long)vals[i]);
            }
        if (vals[i] >= 0)
            continue;
        if (is_batch_name(name)) {
            batch_used = true;
            vals[i] = cfg->batch_size > 0 ? cfg->batch_size : 1;
            if (cfg->batch_size > 0)
                assume(as, key, "option", "%lld (--batch-size)", (long long)vals[i]);
            else
                assume(as, key, "default", "1 (batch size; set with --batch-size)");
        } else if (is_seq_name(name) && cfg->seq_len > 0) {
            seq_used = true;
            vals[i] = cfg->seq_len;
            assume(as, key, "option", "%lld (--seq-len)", (long long)vals[i]);
        }
    }
    if (cfg->batch_size > 0 && !batch_used)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--batch-size: %s has no symbolic batch dim to bind (its input dims are "
                       "fixed or named otherwise; see --dim)",
                       g->path);
    if (cfg->seq_len > 0 && !seq_used)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--seq-len: %s has no symbolic sequence dim to bind (see --dim)", g->path);
    return DNNMEM_OK;
}

/* The dtype most weight bytes have, for the assumptions line. */
static const char *weight_dtype(const struct dm_graph *g, const struct dm_tinfo *t)
{
    uint64_t by[DM_DTYPE_COUNT] = {0};
    for (int32_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].role == DM_ROLE_WEIGHT && t[i].rank >= 0)
            by[t[i].dtype] += t[i].bytes;
    int best = 0;
    for (int d = 1; d < DM_DTYPE_COUNT; d++)
        if (by[d] > by[best])
            best = d;
    return best ? dm_dtype_name((enum dm_dtype)best) : "none";
}

/* The verdict against cfg->capacity_bytes. A job whose unconstrained peak
 * exceeds the capacity is replayed with the caching allocator capped at it:
 * PyTorch then frees cached segments and retries before raising
 * OutOfMemoryError, and the job fits if no request fails. */
static enum dnnmem_status decide(struct dnnmem_result *r, const struct dm_schedule *sched,
                                 const struct dm_run *run, uint64_t context,
                                 const struct dnnmem_config *cfg, struct dnnmem_error *err)
{
    uint64_t cap = (uint64_t)cfg->capacity_bytes;
    double headroom = cfg->headroom > 0 ? cfg->headroom : 0.05;
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

static const char *optimizer_name(enum dnnmem_optimizer o)
{
    switch (o) {
    case DNNMEM_OPT_SGD_MOMENTUM: return "sgd-momentum";
    case DNNMEM_OPT_SGD: return "sgd";
    case DNNMEM_OPT_ADAM: return "adam";
    case DNNMEM_OPT_ADAMW: return "adamw";
    case DNNMEM_OPT_RMSPROP: return "rmsprop";
    case DNNMEM_OPT_ADAGRAD: return "adagrad";
    case DNNMEM_OPT_NONE: return "none";
    }
    return "?";
}

static const char *loss_name(enum dnnmem_loss l)
{
    switch (l) {
    case DNNMEM_LOSS_CE: return "cross-entropy against class ids";
    case DNNMEM_LOSS_MSE: return "mse against a target like the output";
    case DNNMEM_LOSS_SUM: return "sum of every output's .sum()";
    }
    return "?";
}

enum dnnmem_status dnnmem_estimate(const dnnmem_model *m, const struct dnnmem_config *cfg_in,
                                   struct dnnmem_result **out, struct dnnmem_error *err)
{
    if (!m || !cfg_in || !out)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_estimate: NULL argument");
    *out = NULL;
    struct dnnmem_config cfg = *cfg_in;
    const struct dm_graph *g = &m->g;
    if (cfg.mode != DNNMEM_MODE_INFER && cfg.mode != DNNMEM_MODE_TRAIN)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown mode %d", (int)cfg.mode);
    if (cfg.device != DNNMEM_DEVICE_CUDA && cfg.device != DNNMEM_DEVICE_CPU)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown device %d", (int)cfg.device);
    if (cfg.batch_size < 0 || cfg.seq_len < 0)
        return dm_fail(err, DNNMEM_E_USAGE, "batch size and sequence length must be positive");
    if (cfg.capacity_bytes < 0 || cfg.headroom < 0 || cfg.headroom >= 1)
        return dm_fail(err, DNNMEM_E_USAGE, "capacity must be positive and headroom in [0, 1)");
    if (cfg.iterations < 0 || cfg.iterations > 1000 || cfg.grad_accum < 0 || cfg.grad_accum > 1000)
        return dm_fail(err, DNNMEM_E_USAGE, "iterations and grad_accum must be in 1..1000");
    if ((unsigned)cfg.optimizer > DNNMEM_OPT_NONE || (unsigned)cfg.loss > DNNMEM_LOSS_SUM ||
        (unsigned)cfg.inplace > DNNMEM_INPLACE_NONE || (unsigned)cfg.precision > DNNMEM_PRECISION_AMP_BF16 ||
        (cfg.n_freeze && !cfg.freeze) || (cfg.n_checkpoint && !cfg.checkpoint))
        return dm_fail(err, DNNMEM_E_USAGE, "unknown optimizer, loss or in-place setting");
    if (cfg.torch_version != 0 && (cfg.torch_version < 100 || cfg.torch_version > 999))
        return dm_fail(err, DNNMEM_E_USAGE, "torch version %d: expected major*100+minor",
                       cfg.torch_version);
    /* HuggingFace models: transformers picks sdpa when PyTorch has it (from
     * 2.1.1: is_torch_sdpa_available; 2.1 here), else eager. On the CPU the
     * sdpa kernels are not modelled, so auto means eager there. */
    bool hf = m->sdpa.n_nodes > 0;
    int torch = cfg.torch_version ? cfg.torch_version : 200; /* the default framework */
    if ((unsigned)cfg.attn > DNNMEM_ATTN_SDPA)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown attention implementation %d", (int)cfg.attn);
    if (cfg.attn != DNNMEM_ATTN_AUTO && !hf)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: --attn applies to HuggingFace config.json models; an ONNX graph's "
                       "attention is the ops it holds",
                       g->path);
    if (cfg.attn == DNNMEM_ATTN_SDPA && cfg.device == DNNMEM_DEVICE_CPU)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --attn sdpa on the CPU is not modelled; use --attn eager", g->path);
    if (cfg.attn == DNNMEM_ATTN_SDPA && torch < 200)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: --attn sdpa needs PyTorch 2.0 or later (F.scaled_dot_product_attention)",
                       g->path);
    bool sdpa = hf && (cfg.attn == DNNMEM_ATTN_SDPA ||
                       (cfg.attn == DNNMEM_ATTN_AUTO && torch >= 201 &&
                        cfg.device == DNNMEM_DEVICE_CUDA));
    if (sdpa)
        g = &m->sdpa;
    struct dm_run run = {
        .train = cfg.mode == DNNMEM_MODE_TRAIN,
        .cuda = cfg.device == DNNMEM_DEVICE_CUDA,
        .inplace = cfg.inplace == DNNMEM_INPLACE_AUTO,
        .torch_version = torch,
        .iterations = cfg.iterations ? cfg.iterations : 2,
        .grad_accum = cfg.grad_accum ? cfg.grad_accum : 1,
        .optimizer = cfg.optimizer,
        .loss = cfg.loss,
        .loss_all_outputs = cfg.loss_all_outputs,
    };

    struct dm_arena arena;
    dm_arena_init(&arena);
    struct assumptions as = {.n = 0, .arena = &arena};
    struct dm_schedule sched = {0};
    struct dm_allocator alloc = {0};
    enum dnnmem_status s = DNNMEM_OK;
    int64_t *syms = dm_arena_array(&arena, (size_t)g->n_symbols + 1, sizeof *syms);
    struct dm_tinfo *t = malloc(((size_t)g->n_tensors + 1) * sizeof *t);
    if (!syms || !t) {
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
        goto out;
    }

    assume(&as, "framework", cfg.torch_version ? "option" : "default", "pytorch %d.%d (eager)",
           run.torch_version / 100, run.torch_version % 100);
    assume(&as, "device", cfg.device == DNNMEM_DEVICE_CUDA ? "default" : "option", "%s",
           run.cuda ? "cuda" : "cpu");
    if (hf)
        assume(&as, "attention", cfg.attn ? "option" : "default", "%s",
               sdpa ? "sdpa: F.scaled_dot_product_attention, FlashAttention for fp16/bf16 "
                      "from sm80, else the memory-efficient kernel"
                    : "eager: scores, softmax and dropout materialised");
    if (run.train) {
        assume(&as, "mode", "option", "train: zero_grad, forward, loss, backward, step");
        assume(&as, "optimizer", cfg.optimizer == DNNMEM_OPT_SGD_MOMENTUM ? "default" : "option",
               "%s", optimizer_name(cfg.optimizer));
        assume(&as, "loss", cfg.loss == DNNMEM_LOSS_CE && !cfg.loss_all_outputs ? "default" : "option",
               "%s%s",
               cfg.loss == DNNMEM_LOSS_CE && g->loss_upcast
                   ? "cross-entropy of logits.float() against token ids (transformers' ForCausalLMLoss)"
                   : loss_name(cfg.loss),
               cfg.loss_all_outputs && cfg.loss != DNNMEM_LOSS_SUM ? ", every output" : "");
        assume(&as, "iterations", cfg.iterations ? "option" : "default", "%d", run.iterations);
        if (run.grad_accum > 1)
            assume(&as, "grad_accum", "option", "%d micro-batches per step", run.grad_accum);
        assume(&as, "zero_grad", "default", "%s",
               run.torch_version >= 200 ? "set_to_none=True (frees grads)"
                                        : "set_to_none=False (keeps grads)");
    } else {
        assume(&as, "mode", "default", "infer (torch.no_grad, model.eval)");
    }
    if ((s = bind_dims(g, &cfg, syms, &as, err)) != DNNMEM_OK)
        goto out;

    struct dm_infer ctx = {.g = g, .arena = &arena, .t = t, .sym_values = syms, .err = err};
    if ((s = dm_infer_shapes(&ctx)) != DNNMEM_OK)
        goto out;
    bool amp = cfg.precision == DNNMEM_PRECISION_AMP_FP16 || cfg.precision == DNNMEM_PRECISION_AMP_BF16;
    if (amp && !run.cuda) {
        s = dm_fail(err, DNNMEM_E_UNSUPPORTED,
                    "--precision amp-*: autocast on the CPU (bf16, other op lists) is not modelled");
        goto out;
    }
    if (amp) {
        run.amp = cfg.precision == DNNMEM_PRECISION_AMP_FP16 ? DM_FLOAT16 : DM_BFLOAT16;
        dm_amp_retype(g, t, run.amp);
        assume(&as, "precision", "option",
               "%s: torch.autocast, fp32 weights, grads and optimizer state; cached parameter "
               "casts; GradScaler state negligible",
               run.amp == DM_FLOAT16 ? "amp-fp16" : "amp-bf16");
    } else if (cfg.precision != DNNMEM_PRECISION_FP32) {
        /* model.half() / .to(bfloat16) converts every floating-point
         * parameter and buffer, so every float32 tensor the model makes from
         * them, its grads and optimizer state become 2-byte */
        enum dm_dtype half = cfg.precision == DNNMEM_PRECISION_FP16 ? DM_FLOAT16 : DM_BFLOAT16;
        for (int32_t i = 0; i < g->n_tensors; i++)
            if (t[i].rank >= 0 && t[i].dtype == DM_FLOAT) {
                t[i].dtype = half;
                t[i].bytes = (uint64_t)t[i].numel * 2;
            }
        assume(&as, "precision", "option", "%s (every float32 tensor becomes 2-byte)",
               cfg.precision == DNNMEM_PRECISION_FP16 ? "fp16" : "bf16");
    } else if (g->stored_dtype && strcmp(g->stored_dtype, "float32") != 0) {
        const char *flag = strcmp(g->stored_dtype, "bfloat16") == 0  ? " bf16"
                           : strcmp(g->stored_dtype, "float16") == 0 ? " fp16"
                                                                     : " P";
        assume(&as, "precision", "default",
               "float32, as from_pretrained without torch_dtype loads a %s checkpoint "
               "(--precision%s loads it as stored, torch_dtype=\"auto\")",
               g->stored_dtype, flag);
    } else {
        assume(&as, "precision", "default", "as the model: %s", weight_dtype(g, t));
    }
    run.cpu_threads = cfg.cpu_threads;
    if (!run.cuda)
        assume(&as, "cpu_threads", cfg.cpu_threads ? "option" : "default", "%s",
               cfg.cpu_threads == 1 ? "1" : "several");
    run.freeze = cfg.freeze;
    run.n_freeze = cfg.n_freeze;
    run.checkpoint = cfg.checkpoint;
    run.n_checkpoint = cfg.n_checkpoint;
    for (size_t k = 0; run.train && k < cfg.n_checkpoint; k++)
        assume(&as, "checkpoint", "option", "%s", cfg.checkpoint[k]);
    assume(&as, "inplace", cfg.inplace == DNNMEM_INPLACE_AUTO ? "default" : "option", "%s",
           run.inplace ? "auto (ReLU-like ops in place where PyTorch allows, as torchvision)"
                       : "none (every op allocates its output)");

    /* The CPU allocator hands out exactly what is asked (the profiler counts
     * nbytes); the CUDA caching allocator rounds. */
    uint64_t round = cfg.alloc_round_bytes >= 0 ? (uint64_t)cfg.alloc_round_bytes
                   : run.cuda ? (uint64_t)DNNMEM_ALLOC_ROUND_DEFAULT
                              : 1;
    if (run.cuda || cfg.alloc_round_bytes >= 0)
        assume(&as, "allocator", cfg.alloc_round_bytes >= 0 ? "option" : "default", "%s",
               cfg.alloc_round_bytes >= 0
                   ? dm_arena_printf(&arena, "requests rounded up to %llu B, no caching",
                                     (unsigned long long)round)
                   : "PyTorch CUDA caching allocator (512 B blocks; 2 MiB, 20 MiB and "
                     "2 MiB-rounded segments; best fit; split and merge rules)");
    else
        assume(&as, "allocator", "default", "host: bytes as requested");
    int cuda_version = cfg.cuda_version ? cfg.cuda_version : 121;
    int cc = cfg.compute_capability ? cfg.compute_capability : 80;
    run.compute_capability = cc;
    uint64_t context = cfg.cuda_context_bytes >= 0 ? (uint64_t)cfg.cuda_context_bytes
                     : run.cuda ? (uint64_t)dnnmem_cuda_context_default(run.torch_version, cuda_version)
                                : 0;
    char cb[32];
    if (run.cuda) {
        assume(&as, "cuda", cfg.cuda_version || cfg.compute_capability ? "option" : "default",
               "%d.%d, compute capability %d.%d",
               cuda_version / 10, cuda_version % 10, cc / 10, cc % 10);
        assume(&as, "cuda_context", cfg.cuda_context_bytes >= 0 ? "option" : "default", "%s (%s)",
               dm_format_bytes(context, cb),
               cfg.cuda_context_bytes >= 0 ? "--cuda-context"
               : cuda_version < 117        ? "eager module loading, V100 + CUDA 11.2, HF docs"
               : run.torch_version < 200   ? "PyTorch 1.13, lazy loading, PR #86509"
                                           : "PyTorch 2.x, lazy loading, unsloth-zoo PR #1053");
        run.cublas_workspace = cfg.cublas_workspace_bytes >= 0
                                   ? (uint64_t)cfg.cublas_workspace_bytes
                                   : (uint64_t)dnnmem_cublas_workspace_default(run.torch_version, cc);
        assume(&as, "cublas_workspace", cfg.cublas_workspace_bytes >= 0 ? "option" : "default",
               "%s per handle, kept from the first matmul (CublasHandlePool.cpp)",
               dm_format_bytes(run.cublas_workspace, cb));
        run.conv_workspace = cfg.conv_workspace_bytes >= 0 ? (uint64_t)cfg.conv_workspace_bytes : 0;
        assume(&as, "conv_workspace", cfg.conv_workspace_bytes >= 0 ? "option" : "default", "%s",
               cfg.conv_workspace_bytes >= 0
                   ? dm_arena_printf(&arena, "%s per convolution (--conv-workspace)",
                                     dm_format_bytes(run.conv_workspace, cb))
                   : "0 (cuDNN's heuristic choice is unknown without the GPU; "
                     "--conv-workspace adds one)");
    }

    if (cfg.capacity_bytes > 0)
        assume(&as, "capacity", "option", "%s bytes = %s%s%s%s, headroom %g%%",
               dm_arena_printf(&arena, "%lld", (long long)cfg.capacity_bytes),
               dm_format_bytes((uint64_t)cfg.capacity_bytes, cb), cfg.device_label ? " (" : "",
               cfg.device_label ? cfg.device_label : "", cfg.device_label ? ")" : "",
               100 * (cfg.headroom > 0 ? cfg.headroom : 0.05));
    if ((s = dm_schedule_build(g, t, &run, &sched, err)) != DNNMEM_OK)
        goto out;
    /* CUDA: the caching allocator with PyTorch's defaults (or a plain
     * rounding when the user overrides the rounding); CPU: exact sizes */
    if (run.cuda && cfg.alloc_round_bytes < 0) {
        struct dm_caching_opts co;
        dm_caching_opts_init(&co);
        s = dm_alloc_caching_new(&co, &alloc);
    } else {
        s = dm_alloc_rounding_new(round, &alloc);
    }
    if (s != DNNMEM_OK) {
        s = dm_fail(err, s, "%s: cannot set up the allocator simulation", g->path);
        goto out;
    }
    s = dm_result_build(g, t, &sched, &alloc, &cfg, context, as.a, as.n, out, err);
    if (s == DNNMEM_OK && cfg.capacity_bytes > 0)
        s = decide(*out, &sched, &run, context, &cfg, err);
    if (s != DNNMEM_OK && *out) {
        dnnmem_result_free(*out);
        *out = NULL;
    }
out:
    if (alloc.destroy)
        alloc.destroy(alloc.self);
    dm_schedule_free(&sched);
    free(t);
    dm_arena_free(&arena);
    return s;
}
