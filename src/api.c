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
    uint8_t *json;           /* HuggingFace configs: the config's bytes (malloc'd) */
    size_t json_size;
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
        /* a zip's local file header: a Keras 3 .keras archive, whatever its
         * name; its architecture is config.json */
        s = dm_load_keras_archive(&m->g, data, size, err);
    } else if (k < size && data[k] == '{' && dm_keras_json(data, size)) {
        s = dm_load_keras(&m->g, data, size, err);
    } else if (k < size && data[k] == '{' && dm_is_mxnet_json(data, size)) {
        s = dm_load_mxnet(&m->g, data, size, err);
    } else if (k < size && data[k] == '{') {
        s = dm_load_hf(&m->g, data, size, false, NULL, err);
        if (s == DNNMEM_OK)
            s = dm_load_hf(&m->sdpa, data, size, true, NULL, err);
        /* kept to rebuild the model with LoRA adapters for an estimate */
        if (s == DNNMEM_OK && !(m->json = malloc(size)))
            s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", name);
        if (m->json) {
            memcpy(m->json, data, size);
            m->json_size = size;
        }
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
    free(m->json);
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
    cfg->tf_memory_limit_bytes = -1;
    cfg->tf_min_system_memory_bytes = -1;
    cfg->mxnet_page_size = -1;
    cfg->mxnet_reserve_percent = -1;
    cfg->jax_preallocate = true;
    cfg->jax_donate = true;
}

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
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *v = dm_arena_strdup(as->arena, buf);
    as->a[as->n++] = (struct dnnmem_assumption){key, v ? v : "", source};
}

static void dims_str(char *buf, size_t cap, int rank, const int64_t *dims)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < rank && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", k ? "," : "", (long long)dims[k]);
}

/* --input-shape: a shape for an input that declares none (shapes[id]), or
 * values for the symbolic dims of one that does (given[sym]). */
static enum dnnmem_status bind_input_shapes(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                            struct dm_shape *shapes, int64_t *given,
                                            const char **given_by, struct dnnmem_error *err)
{
    for (int32_t i = 0; i < g->n_symbols; i++)
        given[i] = -1;
    for (size_t k = 0; k < cfg->n_input_shapes; k++) {
        const struct dnnmem_input_shape *in = &cfg->input_shapes[k];
        const char *name = in->name ? in->name : "?";
        if (!in->name || !in->dims || in->rank < 1 || in->rank > DM_MAX_DIMS)
            return dm_fail(err, DNNMEM_E_USAGE, "--input-shape %s: give 1 to %d dims", name,
                           DM_MAX_DIMS);
        for (size_t d = 0; d < in->rank; d++)
            if (in->dims[d] < 1)
                return dm_fail(err, DNNMEM_E_USAGE,
                               "--input-shape %s: dim %zu is %lld; every dim must be >= 1", name, d,
                               (long long)in->dims[d]);
        int32_t id = -1;
        for (int32_t i = 0; i < g->n_inputs; i++)
            if (strcmp(g->tensors[g->inputs[i]].name, in->name) == 0)
                id = g->inputs[i];
        if (id < 0) {
            char list[256] = "";
            for (int32_t i = 0; i < g->n_inputs; i++) {
                size_t len = strlen(list);
                snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                         g->tensors[g->inputs[i]].name);
            }
            return dm_fail(err, DNNMEM_E_USAGE, "--input-shape %s: %s has no input of that name (its inputs: %s)",
                           name, g->path, g->n_inputs ? list : "none");
        }
        for (size_t j = 0; j < k; j++)
            if (cfg->input_shapes[j].name && strcmp(cfg->input_shapes[j].name, in->name) == 0)
                return dm_fail(err, DNNMEM_E_USAGE, "--input-shape %s: given twice", name);
        const struct dm_tensor *tt = &g->tensors[id];
        if (tt->rank < 0) {
            shapes[id].rank = (int)in->rank;
            for (size_t d = 0; d < in->rank; d++)
                shapes[id].dims[d] = in->dims[d];
            continue;
        }
        char decl[160] = "";
        for (int d = 0; d < tt->rank; d++) {
            size_t len = strlen(decl);
            if (tt->dims[d].sym >= 0)
                snprintf(decl + len, sizeof decl - len, "%s%s", d ? "," : "", g->symbols[tt->dims[d].sym]);
            else
                snprintf(decl + len, sizeof decl - len, "%s%lld", d ? "," : "", (long long)tt->dims[d].value);
        }
        if ((size_t)tt->rank != in->rank)
            return dm_fail(err, DNNMEM_E_USAGE,
                           "--input-shape %s: %zu dims given, but %s declares the input with %d: [%s]",
                           name, in->rank, g->path, tt->rank, decl);
        for (int d = 0; d < tt->rank; d++) {
            int32_t sym = tt->dims[d].sym;
            if (sym < 0 && tt->dims[d].value >= 0 && tt->dims[d].value != in->dims[d])
                return dm_fail(err, DNNMEM_E_USAGE,
                               "--input-shape %s: dim %d is %lld, but %s fixes it at %lld ([%s])", name,
                               d, (long long)in->dims[d], g->path, (long long)tt->dims[d].value, decl);
            if (sym < 0)
                continue;
            if (given[sym] >= 0 && given[sym] != in->dims[d])
                return dm_fail(err, DNNMEM_E_USAGE,
                               "--input-shape %s: dim '%s' is %lld here but %lld in --input-shape %s",
                               name, g->symbols[sym], (long long)in->dims[d], (long long)given[sym],
                               given_by[sym]);
            given[sym] = in->dims[d];
            given_by[sym] = in->name;
        }
    }
    return DNNMEM_OK;
}

static enum dnnmem_status bind_dims(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                    int64_t *vals, struct dm_shape *shapes,
                                    struct assumptions *as, struct dnnmem_error *err)
{
    bool batch_used = false, seq_used = false;
    int64_t *given = dm_arena_array(as->arena, (size_t)g->n_symbols + 1, sizeof *given);
    const char **given_by = dm_arena_array(as->arena, (size_t)g->n_symbols + 1, sizeof *given_by);
    if (!given || !given_by)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    DM_TRY(bind_input_shapes(g, cfg, shapes, given, given_by, err));
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
    /* beam search runs every prompt as num_beams rows (generate's
     * _expand_inputs_for_generation): the model's batch dims are the
     * caller's times num_beams */
    int64_t beams = cfg->mode == DNNMEM_MODE_GENERATE && cfg->num_beams > 1 ? cfg->num_beams : 1;
    for (int32_t i = 0; i < g->n_symbols; i++) {
        const char *name = g->symbols[i];
        const char *key = dm_arena_printf(as->arena, "dims.%s", name);
        bool beamed = beams > 1 && is_batch_name(name);
        vals[i] = -1; /* unbound */
        for (size_t k = 0; k < cfg->n_dims; k++)
            if (strcmp(cfg->dims[k].name, name) == 0) {
                vals[i] = cfg->dims[k].value;
                if (beamed && !dm_mul_ok(vals[i], beams, &vals[i]))
                    return dm_fail(err, DNNMEM_E_USAGE, "--dim %s x --num-beams %lld overflows",
                                   name, (long long)beams);
                if (beamed)
                    assume(as, key, "option", "%lld (--dim %lld x --num-beams %lld)",
                           (long long)vals[i], (long long)(vals[i] / beams), (long long)beams);
                else
                    assume(as, key, "option", "%lld (--dim)", (long long)vals[i]);
            }
        if (given[i] >= 0) {
            if (vals[i] >= 0 && vals[i] != given[i])
                return dm_fail(err, DNNMEM_E_USAGE,
                               "--dim %s=%lld disagrees with --input-shape %s, which makes it %lld",
                               name, (long long)vals[i], given_by[i], (long long)given[i]);
            if (vals[i] < 0)
                assume(as, key, "option", "%lld (--input-shape %s)", (long long)given[i], given_by[i]);
            vals[i] = given[i];
            if (cfg->batch_size > 0 && is_batch_name(name))
                return dm_fail(err, DNNMEM_E_USAGE,
                               "--batch-size: the batch dim '%s' is set by --input-shape %s already",
                               name, given_by[i]);
        }
        if (vals[i] >= 0)
            continue;
        if (is_batch_name(name)) {
            batch_used = true;
            int64_t batch = cfg->batch_size > 0 ? cfg->batch_size : 1;
            if (!dm_mul_ok(batch, beams, &vals[i]))
                return dm_fail(err, DNNMEM_E_USAGE, "--batch-size %lld x --num-beams %lld overflows",
                               (long long)batch, (long long)beams);
            if (beams > 1)
                assume(as, key, cfg->batch_size > 0 ? "option" : "default",
                       "%lld (batch %lld%s x --num-beams %lld: generate repeat_interleaves the "
                       "prompt and its mask)",
                       (long long)vals[i], (long long)batch,
                       cfg->batch_size > 0 ? " (--batch-size)" : " (default)", (long long)beams);
            else if (cfg->batch_size > 0)
                assume(as, key, "option", "%lld (--batch-size)", (long long)vals[i]);
            else
                assume(as, key, "default", "1 (batch size; set with --batch-size)");
        } else if (is_seq_name(name) && cfg->seq_len > 0) {
            seq_used = true;
            vals[i] = cfg->seq_len;
            assume(as, key, "option", "%lld (--seq-len)", (long long)vals[i]);
        } else if (strcmp(name, "expert_tokens") == 0) {
            /* a mixture-of-experts model's tokens per expert depend on the
             * data (src/load/hf.c, dm_shape_expert_tokens); left unbound */
            assume(as, "moe_routing", "default",
                   "uniform: each routed expert gets ceil(batch x seq x top_k / experts) tokens "
                   "in every MoE layer (--dim expert_tokens=N sets N, at most batch x seq)");
        }
    }
    /* an input shaped by --input-shape alone takes --batch-size as its first dim */
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t id = g->inputs[i];
        struct dm_shape *sh = &shapes[id];
        if (sh->rank < 1)
            continue;
        if (cfg->batch_size > 0) {
            sh->dims[0] = cfg->batch_size;
            batch_used = true;
        }
        char buf[160];
        dims_str(buf, sizeof buf, sh->rank, sh->dims);
        assume(as, dm_arena_printf(as->arena, "input.%s", g->tensors[id].name), "option",
               "[%s] (--input-shape%s)", buf, cfg->batch_size > 0 ? ", first dim --batch-size" : "");
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const struct dm_tensor *tt = &g->tensors[g->inputs[i]];
        if (cfg->batch_size > 0 && !batch_used && tt->rank < 0 && !tt->derive)
            return dm_fail(err, DNNMEM_E_UNBOUND,
                           "%s: input '%s' declares no shape; give it one with --input-shape %s=D1,D2,... "
                           "(--batch-size then replaces its first dim)",
                           g->path, tt->name, tt->name);
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
    case DNNMEM_OPT_ADAMW_HF: return "adamw-hf (transformers' AdamW, one parameter at a time)";
    case DNNMEM_OPT_ADAFACTOR: return "adafactor (transformers' Adafactor, beta1 None)";
    case DNNMEM_OPT_ADAM8BIT: return "adam8bit (bitsandbytes, blockwise)";
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

/* ---- other frameworks' runtimes ------------------------------------------------ */

#define MiB_ ((uint64_t)1 << 20)
#define GiB_ ((uint64_t)1 << 30)

/* "2.15" or "0.4.13" as major * 10000 + minor * 100 + patch; -1 when the
 * string is not dotted decimal numbers (each < 100 after the major). */
static int64_t version_number(const char *v)
{
    int64_t part[3] = {0, 0, 0};
    int k = 0;
    const char *p = v;
    if (!*p)
        return -1;
    while (*p) {
        if (*p < '0' || *p > '9')
            return -1;
        int64_t x = 0;
        while (*p >= '0' && *p <= '9') {
            x = x * 10 + (*p - '0');
            if (x > 9999)
                return -1;
            p++;
        }
        if (k > 2 || (k > 0 && x > 99))
            return -1;
        part[k++] = x;
        if (*p == '.' && p[1])
            p++;
        else if (*p)
            return -1;
    }
    return part[0] * 10000 + part[1] * 100 + part[2];
}

/* TensorFlow's MinSystemMemory (gpu_device.cc; runtime-facts 2.4): what it
 * leaves to the system out of the free memory at device creation. */
static uint64_t tf_min_system_memory(uint64_t free_bytes, int cc, int64_t version)
{
    if (free_bytes < 2 * GiB_)
        return 225 * MiB_;
    if (version >= 0 && version < 20000) { /* TF 1.x: max(300 MiB, 5% of free) */
        uint64_t pct = free_bytes / 20;
        return pct > 300 * MiB_ ? pct : 300 * MiB_;
    }
    if (cc < 70)
        return 500 * MiB_;
    if (cc < 80)
        return 1050 * MiB_;
    if (cc < 90)
        return 1536 * MiB_;
    return 1800 * MiB_; /* newest TF (TF_GPU_USE_PJRT era); 1536 MiB in earlier 2.x */
}

/* The simulated runtime of a non-PyTorch framework. */
struct fwsim {
    enum dnnmem_framework fw;
    struct dm_bfc_opts bfc;
    struct dm_pool_opts pool;
    uint64_t limit;      /* 0 = unknown (no capacity given) */
    bool reserves_limit; /* one region of the whole limit up front */
};

static enum dnnmem_status fw_new(const struct fwsim *f, bool limited, struct dm_allocator *a)
{
    if (f->fw == DNNMEM_FW_MXNET) {
        struct dm_pool_opts o = f->pool;
        if (!limited)
            o.capacity = 0;
        return dm_alloc_pool_new(&o, a);
    }
    struct dm_bfc_opts o = f->bfc;
    o.limit = limited ? f->limit : 0;
    return dm_alloc_bfc_new(&o, a);
}

/* Resolve the framework's allocator options and limit; assumptions say
 * what was chosen and why. */
static enum dnnmem_status fw_setup(const struct dnnmem_config *cfg, uint64_t context, int cc,
                                   int64_t version, struct fwsim *f, struct assumptions *as,
                                   struct dnnmem_error *err)
{
    char b1[32], b2[32], b3[32];
    uint64_t cap = (uint64_t)cfg->capacity_bytes;
    f->fw = cfg->framework;
    dm_bfc_opts_init(&f->bfc);
    dm_pool_opts_init(&f->pool);
    if (cfg->framework == DNNMEM_FW_TENSORFLOW) {
        f->bfc.allow_growth = cfg->tf_allow_growth;
        f->reserves_limit = !cfg->tf_allow_growth;
        if (cfg->tf_memory_limit_bytes == 0)
            return dm_fail(err, DNNMEM_E_USAGE, "--tf-memory-limit: must be positive");
        if (cfg->tf_memory_limit_bytes > 0) {
            f->limit = (uint64_t)cfg->tf_memory_limit_bytes;
            assume(as, "memory_limit", "option", "%s (--tf-memory-limit)",
                   dm_format_bytes(f->limit, b1));
        } else if (cap) {
            uint64_t free_bytes = cap > context ? cap - context : 0;
            uint64_t minsys = cfg->tf_min_system_memory_bytes >= 0
                                  ? (uint64_t)cfg->tf_min_system_memory_bytes
                                  : tf_min_system_memory(free_bytes, cc, version);
            if (free_bytes <= minsys)
                return dm_fail(err, DNNMEM_E_USAGE,
                               "--framework tensorflow: the device (%s) leaves nothing to TensorFlow "
                               "after the CUDA context (%s) and MinSystemMemory (%s)",
                               dm_format_bytes(cap, b1), dm_format_bytes(context, b2),
                               dm_format_bytes(minsys, b3));
            f->limit = free_bytes - minsys;
            assume(as, "memory_limit", cfg->tf_min_system_memory_bytes >= 0 ? "option" : "default",
                   "%s = free memory at start (capacity - context) - MinSystemMemory %s "
                   "(gpu_device.cc%s)",
                   dm_format_bytes(f->limit, b1), dm_format_bytes(minsys, b2),
                   cfg->tf_min_system_memory_bytes >= 0 ? ", --tf-min-system-memory" : "");
        } else {
            assume(as, "memory_limit", "default",
                   "unknown: free memory at start - MinSystemMemory (gpu_device.cc); "
                   "--gpu or --memory sizes it");
        }
        assume(as, "allocator", cfg->tf_allow_growth ? "option" : "default",
               "TensorFlow BFC (256 B rounding, 21 bins, best fit, split at >= 2x or >= 128 MiB "
               "slack, coalescing; bfc_allocator.cc), %s",
               cfg->tf_allow_growth ? "allow_growth: regions from 2 MiB, doubling"
                                    : "no allow_growth (default): one region of the whole memory "
                                      "limit at start");
    } else if (cfg->framework == DNNMEM_FW_JAX) {
        double frac = cfg->jax_mem_fraction;
        bool old = version >= 0 && version < 414; /* jaxlib 0.4.14: 0.9 -> 0.75 */
        if (frac == 0)
            frac = old ? 0.9 : 0.75;
        if (!(frac > 0 && frac <= 1))
            return dm_fail(err, DNNMEM_E_USAGE, "--jax-mem-fraction %g: expected a fraction in (0, 1]",
                           frac);
        f->bfc.allow_growth = !cfg->jax_preallocate;
        f->reserves_limit = cfg->jax_preallocate;
        if (cap) {
            f->limit = (uint64_t)((double)cap * frac);
            assume(as, "memory_limit", cfg->jax_mem_fraction ? "option" : "default",
                   "%s = %g x %s, XLA_PYTHON_CLIENT_MEM_FRACTION%s", dm_format_bytes(f->limit, b1),
                   frac, dm_format_bytes(cap, b2),
                   cfg->jax_mem_fraction ? "" : old ? " (0.9 before jaxlib 0.4.14)" : " (0.75 since jaxlib 0.4.14)");
        } else {
            assume(as, "memory_limit", "default",
                   "unknown: %g x the device's total memory (XLA_PYTHON_CLIENT_MEM_FRACTION); "
                   "--gpu or --memory sizes it", frac);
        }
        assume(as, "allocator", cfg->jax_preallocate ? "default" : "option",
               "XLA's BFC (as TensorFlow's, tsl bfc_allocator.cc), %s",
               cfg->jax_preallocate ? "preallocated: the whole limit at the first op "
                                      "(XLA_PYTHON_CLIENT_PREALLOCATE=true)"
                                    : "not preallocated: regions from 2 MiB, doubling");
    } else {
        f->pool.strategy = cfg->mxnet_pool == DNNMEM_MXNET_POOL_ROUND ? DM_POOL_ROUND : DM_POOL_NAIVE;
        if (cfg->mxnet_page_size >= 0)
            f->pool.page_size = (uint64_t)cfg->mxnet_page_size;
        if (cfg->mxnet_round_cutoff)
            f->pool.round_linear_cutoff = cfg->mxnet_round_cutoff;
        if (cfg->mxnet_reserve_percent >= 0)
            f->pool.reserve_percent = cfg->mxnet_reserve_percent;
        if (f->pool.page_size < 32 ||
            (f->pool.strategy == DM_POOL_ROUND && (f->pool.page_size & (f->pool.page_size - 1))))
            return dm_fail(err, DNNMEM_E_USAGE,
                           "--mxnet-page-size %llu: expected at least 32 (a power of two with Round)",
                           (unsigned long long)f->pool.page_size);
        if (f->pool.round_linear_cutoff < 20 || f->pool.round_linear_cutoff > 34)
            return dm_fail(err, DNNMEM_E_USAGE, "--mxnet-round-cutoff %d: expected 20..34",
                           f->pool.round_linear_cutoff);
        if (f->pool.reserve_percent > 100)
            return dm_fail(err, DNNMEM_E_USAGE, "--mxnet-reserve %d: expected a percentage 0..100",
                           f->pool.reserve_percent);
        if (cap) {
            f->limit = cap > context ? cap - context : 0;
            if (!f->limit)
                return dm_fail(err, DNNMEM_E_USAGE,
                               "--framework mxnet: the device (%s) leaves nothing after the CUDA "
                               "context (%s)", dm_format_bytes(cap, b1), dm_format_bytes(context, b2));
            f->pool.capacity = f->limit;
            f->pool.total = cap;
        }
        assume(as, "allocator", cfg->mxnet_pool || cfg->mxnet_page_size >= 0 ? "option" : "default",
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

/* JAX's jitted step: the dataflow schedule re-planned as XLA compiles it
 * (src/schedule/xla.c); the assumptions say what came out. */
static enum dnnmem_status xla_plan(const struct dm_graph *g, const struct dm_tinfo *t,
                                   const struct dm_run *run, const struct dnnmem_config *cfg,
                                   struct dm_schedule *sched, struct assumptions *as,
                                   struct dm_xla_stats *out, struct dnnmem_error *err)
{
    struct dm_xla_opts xo = {.train = run->train, .donate = cfg->jax_donate, .alignment = 0};
    struct dm_xla_stats xs;
    struct dm_schedule planned;
    DM_TRY(dm_xla_plan(g, t, sched, &xo, &planned, &xs, err));
    *out = xs;
    char b1[32], b2[32], b3[32], b4[32];
    int32_t fused = xs.fused_forward + xs.fused_backward + xs.fused_update;
    assume(as, "xla_fusion", "default",
           "%d of %d values get no buffer (%d forward, %d gradients, %d in the update): a value "
           "made by an elementwise op, a broadcast or BatchNorm's normalisation whose only "
           "reader is elementwise or a reduction is fused into it (priority fusion), as are the "
           "update's temporaries; values with several readers or read by the backward, copies, "
           "softmax and layer norms are materialised",
           fused, xs.values, xs.fused_forward, xs.fused_backward, xs.fused_update);
    char parts[256] = "";
    size_t len = 0;
    for (int c = 0; c < DNNMEM_CAT_COUNT && len < sizeof parts; c++)
        if (xs.peak_bytes[c])
            len += (size_t)snprintf(parts + len, sizeof parts - len, "%s %s %s",
                                    len ? "," : "", dnnmem_category_name((enum dnnmem_category)c),
                                    dm_format_bytes(xs.peak_bytes[c], b1));
    const struct dm_step *ps = xs.peak_step >= 0 ? &sched->steps[xs.peak_step] : NULL;
    assume(as, "xla_temp", "default",
           "%s per call: the heap simulator (best fit by decreasing size, the smaller of "
           "spatial %s and temporal %s; 128 B alignment) over %d buffers, %d values sharing a "
           "dying operand's; at most %s live at once%s%s%s%s%s",
           dm_format_bytes(xs.heap.heap_bytes, b2), dm_format_bytes(xs.heap.spatial_bytes, b3),
           dm_format_bytes(xs.heap.temporal_bytes, b4), xs.heap_values, xs.shared,
           dm_format_bytes(xs.live_peak, b1), ps ? " (" : "",
           ps ? dm_phase_name((enum dm_phase)ps->phase) : "",
           ps && ps->node >= 0 ? dm_arena_printf(as->arena, " '%s'", g->nodes[ps->node].name) : "",
           ps ? "):" : "", parts);
    if (run->train)
        assume(as, "jax_donation", cfg->jax_donate ? "default" : "option",
               "%s; the entry parameters (weights, batch, optimizer state from optax's init: %s) "
               "are made before the first call",
               cfg->jax_donate
                   ? "parameters and optimizer state donated (donate_argnums, the usual train "
                     "step): the updated ones reuse their buffers"
                   : dm_arena_printf(as->arena,
                                     "none (--jax-donate false): each call's new parameters and "
                                     "optimizer state are %d new buffers (%s), the old ones freed "
                                     "after it",
                                     xs.outputs, dm_format_bytes(xs.output_bytes, b1)),
               dm_format_bytes(xs.entry_bytes, b2));
    else
        assume(as, "xla_outputs", "default",
               "%d live-out buffers (%s) per call, outside the temp buffer, held by the caller; "
               "the weights and the batch (%s) are entry parameters",
               xs.outputs, dm_format_bytes(xs.output_bytes, b1),
               dm_format_bytes(xs.entry_bytes, b2));
    dm_schedule_free(sched);
    *sched = planned;
    return DNNMEM_OK;
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
static enum dnnmem_status fw_result(const struct dm_graph *g, const struct dm_tinfo *t,
                                    const struct dm_schedule *sched, const struct fwsim *f,
                                    const struct dnnmem_config *cfg, uint64_t context,
                                    const struct assumptions *as, struct dnnmem_result **out,
                                    struct dnnmem_error *err)
{
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
        double headroom = cfg->headroom > 0 ? cfg->headroom : 0.05;
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

enum dnnmem_status dnnmem_estimate(const dnnmem_model *m, const struct dnnmem_config *cfg_in,
                                   struct dnnmem_result **out, struct dnnmem_error *err)
{
    return dm_estimate_reusing(m, cfg_in, NULL, out, err);
}

enum dnnmem_status dm_estimate_reusing(const dnnmem_model *m, const struct dnnmem_config *cfg_in,
                                       struct dm_graph *variant, struct dnnmem_result **out,
                                       struct dnnmem_error *err)
{
    if (!m || !cfg_in || !out)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_estimate: NULL argument");
    *out = NULL;
    struct dnnmem_config cfg = *cfg_in;
    const struct dm_graph *g = &m->g;
    if (cfg.mode != DNNMEM_MODE_INFER && cfg.mode != DNNMEM_MODE_TRAIN &&
        cfg.mode != DNNMEM_MODE_GENERATE)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown mode %d", (int)cfg.mode);
    bool generate = cfg.mode == DNNMEM_MODE_GENERATE;
    if ((unsigned)cfg.kv_dtype > DNNMEM_KV_FP8)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown KV cache dtype %d", (int)cfg.kv_dtype);
    if (generate && m->sdpa.n_nodes == 0)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --mode generate applies to HuggingFace causal LM and T5 configs",
                       g->path);
    /* encoder-decoder generation (T5): the decoder starts from one token
     * (decoder_start_token_id), its length is not the caller's */
    for (size_t k = 0; generate && g->encoder_decoder && k < cfg.n_dims; k++)
        if (cfg.dims && cfg.dims[k].name && strcmp(cfg.dims[k].name, "target_seq") == 0)
            return dm_fail(err, DNNMEM_E_USAGE,
                           "%s: --mode generate starts the decoder from decoder_start_token_id "
                           "(one token) and grows it by --new-tokens; drop --dim target_seq",
                           g->path);
    if (generate && g->encoder_decoder && cfg.kv_dtype != DNNMEM_KV_AUTO)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --kv-dtype is not modelled for encoder-decoder generation (T5's "
                       "cross-attention cache is the first forward's own projections)",
                       g->path);
    if (generate && (cfg.new_tokens <= 0 || cfg.new_tokens > (INT64_C(1) << 20)))
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--mode generate needs --new-tokens N, 1 <= N <= 1048576");
    if (!generate && (cfg.new_tokens || cfg.kv_dtype))
        return dm_fail(err, DNNMEM_E_USAGE, "--new-tokens and --kv-dtype apply to --mode generate");
    /* how generate() picks tokens: beam search, or sampling with warpers */
    if (!generate && (cfg.num_beams > 1 || cfg.do_sample))
        return dm_fail(err, DNNMEM_E_USAGE, "--num-beams and --do-sample apply to --mode generate");
    if (cfg.num_beams < 0 || cfg.num_beams > 4096)
        return dm_fail(err, DNNMEM_E_USAGE, "--num-beams %d: expected 1..4096", cfg.num_beams);
    if (!cfg.do_sample && (cfg.top_k || cfg.top_p != 0 || cfg.temperature != 0))
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--top-k, --top-p and --temperature apply to --do-sample (greedy and beam "
                       "search ignore the logits warpers)");
    if (cfg.do_sample && cfg.num_beams > 1)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "--do-sample with --num-beams %d (beam sampling, _beam_search with "
                       "do_sample) is not modelled; use one of them",
                       cfg.num_beams);
    if (!(cfg.top_p == 0 || (cfg.top_p > 0 && cfg.top_p <= 1)))
        return dm_fail(err, DNNMEM_E_USAGE, "--top-p %g: expected a probability in (0, 1]",
                       cfg.top_p);
    if (!(cfg.temperature == 0 || (cfg.temperature > 0 && cfg.temperature < 1e30)))
        return dm_fail(err, DNNMEM_E_USAGE, "--temperature %g: expected a positive number",
                       cfg.temperature);
    if (cfg.device != DNNMEM_DEVICE_CUDA && cfg.device != DNNMEM_DEVICE_CPU)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown device %d", (int)cfg.device);
    if (cfg.batch_size < 0 || cfg.seq_len < 0)
        return dm_fail(err, DNNMEM_E_USAGE, "batch size and sequence length must be positive");
    if (cfg.capacity_bytes < 0 || cfg.headroom < 0 || cfg.headroom >= 1)
        return dm_fail(err, DNNMEM_E_USAGE, "capacity must be positive and headroom in [0, 1)");
    if (cfg.iterations < 0 || cfg.iterations > 1000 || cfg.grad_accum < 0 || cfg.grad_accum > 1000)
        return dm_fail(err, DNNMEM_E_USAGE, "iterations and grad_accum must be in 1..1000");
    if (cfg.n_input_shapes && !cfg.input_shapes)
        return dm_fail(err, DNNMEM_E_USAGE, "input_shapes is NULL");
    if ((unsigned)cfg.optimizer > DNNMEM_OPT_ADAM8BIT || (unsigned)cfg.loss > DNNMEM_LOSS_SUM ||
        (unsigned)cfg.inplace > DNNMEM_INPLACE_NONE || (unsigned)cfg.precision > DNNMEM_PRECISION_AMP_BF16 ||
        (cfg.n_freeze && !cfg.freeze) || (cfg.n_checkpoint && !cfg.checkpoint))
        return dm_fail(err, DNNMEM_E_USAGE, "unknown optimizer, loss or in-place setting");
    if ((unsigned)cfg.framework > DNNMEM_FW_JAX)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown framework %d", (int)cfg.framework);
    bool other_fw = cfg.framework != DNNMEM_FW_PYTORCH;
    if ((unsigned)cfg.mxnet_executor > DNNMEM_MXNET_EXEC_NAIVE)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown MXNet executor %d", (int)cfg.mxnet_executor);
    /* MXNet's symbolic executor plans a forward (and backward) graph; a
     * generation loop is not one */
    bool mx_planned = cfg.framework == DNNMEM_FW_MXNET &&
                      cfg.mxnet_executor == DNNMEM_MXNET_EXEC_PLANNED && !generate;
    /* JAX's jitted step (src/schedule/xla.c); a generation loop is no one
     * jitted call: it falls back to the op-by-op stand-in, as MXNet's does */
    if ((unsigned)cfg.jax_execution > DNNMEM_JAX_EAGER)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown JAX execution %d", (int)cfg.jax_execution);
    bool jax_jit = cfg.framework == DNNMEM_FW_JAX && cfg.jax_execution == DNNMEM_JAX_JIT &&
                   !generate;
    if (jax_jit && cfg.mode == DNNMEM_MODE_TRAIN && cfg.grad_accum > 1)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "--framework jax: gradient accumulation under jit (optax.MultiSteps, or a "
                       "scan over micro-batches) is not modelled; use --jax-execution eager");
    /* TensorFlow under tf.function, as Keras' model.fit and predict run it;
     * a generation loop is no one graph: eager stands in */
    if ((unsigned)cfg.tf_execution > DNNMEM_TF_EAGER)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown TensorFlow execution %d", (int)cfg.tf_execution);
    bool tf_graph = cfg.framework == DNNMEM_FW_TENSORFLOW && cfg.tf_execution == DNNMEM_TF_GRAPH &&
                    !generate;
    int64_t fw_version = cfg.framework_version ? version_number(cfg.framework_version) : -1;
    if (cfg.framework_version && fw_version < 0)
        return dm_fail(err, DNNMEM_E_USAGE, "--framework %s@%s: expected a version such as 2.15",
                       dnnmem_framework_name(cfg.framework), cfg.framework_version);
    if (cfg.mxnet_grad_sum_cap < 0 || cfg.mxnet_grad_sum_cap > 1000000)
        return dm_fail(err, DNNMEM_E_USAGE, "--mxnet-grad-sum-cap %d: expected 1..1000000",
                       cfg.mxnet_grad_sum_cap);
    if (other_fw && cfg.device != DNNMEM_DEVICE_CUDA)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--framework %s: only GPU runtimes are modelled; drop --device cpu",
                       dnnmem_framework_name(cfg.framework));
    if (other_fw && cfg.alloc_round_bytes >= 0)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--alloc-round: replaces PyTorch's caching allocator; not with --framework %s",
                       dnnmem_framework_name(cfg.framework));
    if (cfg.torch_version != 0 && (cfg.torch_version < 100 || cfg.torch_version > 999))
        return dm_fail(err, DNNMEM_E_USAGE, "torch version %d: expected major*100+minor",
                       cfg.torch_version);
    /* HuggingFace models: transformers picks sdpa when PyTorch has it (from
     * 2.1.1: is_torch_sdpa_available; 2.1 here), else eager. On the CPU the
     * sdpa kernels are not modelled, so auto means eager there. */
    bool hf = m->sdpa.n_nodes > 0;
    int torch = cfg.torch_version ? cfg.torch_version : DM_TORCH_DEFAULT;
    if (cfg.transformers_version != 0 &&
        (cfg.transformers_version < 400 || cfg.transformers_version > 999))
        return dm_fail(err, DNNMEM_E_USAGE, "transformers version %d: expected major*100+minor",
                       cfg.transformers_version);
    if (cfg.transformers_version && !hf)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: --transformers applies to HuggingFace config.json models", g->path);
    int transformers = cfg.transformers_version ? cfg.transformers_version
                                                : DM_TRANSFORMERS_DEFAULT;
    /* transformers 5 loads a model in its config's dtype unless told
     * otherwise (dtype="auto" by default, PR #34919; measured: Qwen3-0.6B's
     * bfloat16 config built by from_config in 5.17 runs in bf16) */
    const char *sd = g->stored_dtype;
    bool v5_dtype = hf && transformers >= 500 && cfg.precision == DNNMEM_PRECISION_FP32 &&
                    !cfg.precision_set && !g->quant_method && sd &&
                    (strcmp(sd, "bfloat16") == 0 || strcmp(sd, "float16") == 0);
    if (v5_dtype)
        cfg.precision = sd[1] == 'f' ? DNNMEM_PRECISION_BF16 : DNNMEM_PRECISION_FP16;
    if ((unsigned)cfg.attn > DNNMEM_ATTN_FLASH)
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
    if (cfg.attn == DNNMEM_ATTN_SDPA && g->eager_only)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --attn sdpa: transformers has no sdpa attention for this model "
                       "(T5Attention is eager only); use --attn eager or auto",
                       g->path);
    /* flash_attention_2: the flash-attn package's kernels, which run in
     * fp16/bf16 only (transformers casts float32 q, k, v to the autocast
     * dtype, else to the Linear weights' dtype, and flash_attn_func refuses
     * float32) on Ampere and later (flash-attn's README: FlashAttention-2
     * supports sm80+; head dims up to 256) */
    bool flash = cfg.attn == DNNMEM_ATTN_FLASH;
    if (flash && (cfg.device != DNNMEM_DEVICE_CUDA || g->eager_only))
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --attn flash: flash_attention_2 runs on CUDA only, for models "
                       "transformers gives one",
                       g->path);
    if (flash && cfg.precision == DNNMEM_PRECISION_FP32)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: --attn flash: FlashAttention-2 runs in fp16/bf16 only; add "
                       "--precision bf16, fp16, amp-bf16 or amp-fp16",
                       g->path);
    if (flash && cfg.compute_capability && cfg.compute_capability < 80)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: --attn flash: FlashAttention-2 needs compute capability 8.0 or "
                       "later (this GPU: %d.%d)",
                       g->path, cfg.compute_capability / 10, cfg.compute_capability % 10);
    bool sdpa = hf && !g->eager_only && (cfg.attn == DNNMEM_ATTN_SDPA || flash ||
                       (cfg.attn == DNNMEM_ATTN_AUTO && torch >= 201 &&
                        cfg.device == DNNMEM_DEVICE_CUDA));
    /* --sdpa-backend: sdpa_kernel(SDPBackend.X) around the step; whether
     * PyTorch takes the forced kernel for each call is checked as the graph
     * is rebuilt (dm_load_hf) */
    if ((unsigned)cfg.sdpa_backend > DNNMEM_SDPA_MATH)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown sdpa backend %d", (int)cfg.sdpa_backend);
    if (cfg.sdpa_backend && !hf)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: --sdpa-backend applies to HuggingFace config.json models under sdpa "
                       "attention",
                       g->path);
    if (cfg.sdpa_backend && (!sdpa || flash))
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: --sdpa-backend needs sdpa attention (--attn sdpa, or auto on CUDA "
                       "with PyTorch 2.1+); this estimate's attention is %s",
                       g->path, flash ? "flash_attention_2" : "eager");
    if (sdpa)
        g = &m->sdpa;
    /* LoRA, quantized weights, flash attention: the model rebuilt with them,
     * for this estimate */
    const struct dnnmem_lora *lo = &cfg.lora;
    struct dm_graph lg;
    dm_graph_init(&lg);
    if ((unsigned)cfg.quant > DNNMEM_QUANT_INT8)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown weight quantization %d", (int)cfg.quant);
    /* a quantized checkpoint (quantization_config): transformers' Trainer
     * refuses to fine-tune it without adapters, and a method whose quantizer
     * is not trainable at all (trainer.py, validate_quantization_for_training) */
    if (g->quant_method && cfg.mode == DNNMEM_MODE_TRAIN && !lo->r)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: a %s checkpoint in training needs --lora-r: transformers' Trainer "
                       "refuses to fine-tune a purely quantized model",
                       g->path, g->quant_method);
    if (g->quant_method && cfg.mode == DNNMEM_MODE_TRAIN && !g->quant_trainable)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: transformers' %s quantizer is not trainable (is_trainable: false), "
                       "with or without adapters",
                       g->path, g->quant_method);
    if ((g->quant_method || cfg.quant) && cfg.device == DNNMEM_DEVICE_CPU)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: quantized linear layers on the CPU are not modelled (their kernels "
                       "are CUDA's)",
                       g->path);
    if (g->quant_method && cfg.compute_capability && cfg.compute_capability < g->quant_min_cc)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: %s checkpoints need compute capability %d.%d or later "
                       "(FineGrainedFP8HfQuantizer.validate_environment); the GPU has %d.%d",
                       g->path, g->quant_method, g->quant_min_cc / 10, g->quant_min_cc % 10,
                       cfg.compute_capability / 10, cfg.compute_capability % 10);
    if (cfg.quant && (!hf || !m->json))
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s: --quant applies to HuggingFace config.json models", g->path);
    /* prepare_model_for_kbit_training: a quantized model readied for adapters */
    if ((unsigned)cfg.kbit_prep > DNNMEM_KBIT_PREP_NO_GC)
        return dm_fail(err, DNNMEM_E_USAGE, "unknown kbit_prep %d", (int)cfg.kbit_prep);
    if (cfg.kbit_prep && !lo->r)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--kbit-prep needs --lora-r: prepare_model_for_kbit_training readies a "
                       "quantized model for adapters");
    if (cfg.kbit_prep && !cfg.quant && !g->quant_method)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--kbit-prep needs a quantized model: --quant or a config's "
                       "quantization_config");
    bool kbit_cast = cfg.kbit_prep && (cfg.quant || strcmp(g->quant_method, "gptq") != 0);
    if (cfg.kbit_prep == DNNMEM_KBIT_PREP && cfg.n_checkpoint)
        return dm_fail(err, DNNMEM_E_USAGE,
                       "--kbit-prep checkpoints every layer (gradient_checkpointing_enable); "
                       "drop --checkpoint, or use --kbit-prep-no-gc with it");
    if (kbit_cast && flash)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --kbit-prep with --attn flash (float32 activations cast to the "
                       "pre-quantization dtype around the kernel) is not modelled; use --attn "
                       "sdpa or eager",
                       g->path);
    /* --mode generate: rebuilt knowing the prompt and new tokens (a
     * HybridCache's static shapes depend on them, src/load/hf_decoders.inc) */
    /* checkpointing an HF model in training: transformers' models turn
     * use_cache off under gradient checkpointing (LlamaModel.forward and the
     * others of 4.51), so the graph is rebuilt without the returned cache */
    bool hf_ckpt = hf && m->json && cfg.mode == DNNMEM_MODE_TRAIN && cfg.n_checkpoint > 0;
    /* sdpa with enable_gqa (transformers 4.54+ on PyTorch 2.5+: gqa_attention
     * in hf.c), stated in the attention assumption */
    bool gqa = sdpa && !flash && m->json && transformers >= 454 && torch >= 205;
    /* transformers 4.52 and later (GPT-2's Cache classes, 4.54's enable_gqa,
     * 4.56's sdpa views, 5.0's cache copies and last-position logits:
     * dm_load_hf): the graphs loaded with the model are 4.51's */
    bool later = hf && m->json && transformers >= 452;
    /* fp16 on CUDA: softmax(dtype=float32) without its float32 copy (softmax_f32) */
    bool half_to_float = hf && m->json && cfg.precision == DNNMEM_PRECISION_FP16 &&
                         cfg.device == DNNMEM_DEVICE_CUDA;
    /* a forced sdpa kernel: the Attention nodes marked with it, or the math
     * kernel's decomposition (dm_load_hf) */
    bool forced = sdpa && m->json && cfg.sdpa_backend != DNNMEM_SDPA_AUTO;
    if (lo->r != 0 || cfg.quant || flash || (generate && hf && m->json) || hf_ckpt || later ||
        half_to_float || forced) {
        if (lo->r && (!hf || !m->json))
            return dm_fail(err, DNNMEM_E_USAGE,
                           "%s: --lora-r applies to HuggingFace config.json models", g->path);
        if (lo->r && cfg.mode != DNNMEM_MODE_TRAIN)
            return dm_fail(err, DNNMEM_E_USAGE, "--lora-r applies to --mode train");
        if (cfg.quant && cfg.mode == DNNMEM_MODE_TRAIN && !lo->r)
            return dm_fail(err, DNNMEM_E_USAGE,
                           "--quant in training needs --lora-r: transformers' Trainer refuses "
                           "to fine-tune a purely quantized model");
        if (lo->r < 0 || lo->r > (INT64_C(1) << 20) || !(lo->dropout >= 0 && lo->dropout < 1) ||
            !(lo->alpha >= 0) || (lo->n_targets && !lo->targets))
            return dm_fail(err, DNNMEM_E_USAGE,
                           "LoRA: rank in 1..1048576, dropout in [0, 1), alpha >= 0");
        /* a generation's graph depends on the prompt (a HybridCache's
         * shapes): rebuilt for every estimate, never kept */
        if (generate)
            variant = NULL;
        if (variant && variant->n_nodes > 0) {
            g = variant;
        } else {
            lg.path = g->path;
            enum dnnmem_status ls = dm_load_hf(&lg, m->json, m->json_size, sdpa, &cfg, err);
            if (ls != DNNMEM_OK) {
                dm_graph_free(&lg);
                return ls;
            }
            g = &lg;
            if (variant) { /* kept for the caller's next estimates */
                *variant = lg;
                dm_graph_init(&lg);
                g = variant;
            }
        }
    }
    if (g->n_router > 0 && cfg.mode != DNNMEM_MODE_TRAIN) {
        enum dnnmem_status ls = dm_fail(
            err, DNNMEM_E_UNSUPPORTED,
            "%s: config field 'output_router_logits' is true: the load-balancing loss every "
            "forward then computes is modelled in training only (--mode train)",
            g->path);
        dm_graph_free(&lg);
        return ls;
    }
    /* beam search: modelled for the decoders whose cache is a DynamicCache
     * or the legacy tuple (src/schedule/generate.c) */
    if (generate && cfg.num_beams > 1 && (g->encoder_decoder || g->cache_len > 0)) {
        enum dnnmem_status bs = dm_fail(
            err, DNNMEM_E_UNSUPPORTED,
            "%s: --num-beams with %s is not modelled (beam search is, for the decoders on a "
            "DynamicCache or the legacy tuple cache); use greedy or --do-sample",
            g->path,
            g->encoder_decoder ? "an encoder-decoder (T5's EncoderDecoderCache reordered, its "
                                 "encoder output expanded)"
                               : "a HybridCache (Gemma 2/3: static caches of batch x num_beams "
                                 "rows, reordered)");
        dm_graph_free(&lg);
        return bs;
    }
    struct dm_run run = {
        .train = cfg.mode == DNNMEM_MODE_TRAIN,
        .cuda = cfg.device == DNNMEM_DEVICE_CUDA,
        /* XLA shares instead; TF's graph executor forwards buffers (train.c) */
        /* TensorFlow eager: ExecuteNodeArgs::Init (core/common_runtime/eager/
         * execute_node.cc) protects every input whose handle is held by more
         * than the op, which a Keras layer's argument always is, so no kernel
         * forwards its input in place */
        .inplace = cfg.inplace == DNNMEM_INPLACE_AUTO && !jax_jit &&
                   cfg.framework != DNNMEM_FW_TENSORFLOW,
        .dataflow = jax_jit || tf_graph,
        .xla = jax_jit,
        .torch_version = torch,
        .iterations = cfg.iterations ? cfg.iterations : 2,
        .grad_accum = cfg.grad_accum ? cfg.grad_accum : 1,
        .optimizer = cfg.optimizer,
        .loss = cfg.loss,
        .loss_all_outputs = cfg.loss_all_outputs,
        .tf_ops = cfg.framework == DNNMEM_FW_TENSORFLOW,
        .tf_graph = tf_graph,
        .mx_ops = cfg.framework == DNNMEM_FW_MXNET,
        .mx_version = cfg.framework == DNNMEM_FW_MXNET && fw_version >= 0 ? (int)(fw_version / 100)
                                                                         : 109,
        /* MXNET_EXEC_INPLACE_GRAD_SUM_CAP's default (graph_executor.cc,
         * AggregateGradient) */
        .mx_grad_sum_cap = cfg.mxnet_grad_sum_cap > 0 ? cfg.mxnet_grad_sum_cap : 8,
        /* MXNET_BACKWARD_DO_MIRROR's default: 0 (graph_executor.cc, need_mirror) */
        .mx_mirror = cfg.framework == DNNMEM_FW_MXNET && cfg.mxnet_mirror,
        .gen_tokens = generate ? cfg.new_tokens : 0,
        .kv_dtype = cfg.kv_dtype,
        .gen_beams = generate && cfg.num_beams > 1 ? cfg.num_beams : 1,
        .gen_sample = generate && cfg.do_sample,
        /* GenerationConfig's defaults: top_k 50, top_p 1.0, temperature 1.0 */
        .gen_top_k = cfg.top_k == 0 ? 50 : cfg.top_k < 0 ? 0 : cfg.top_k,
        .gen_top_p = cfg.top_p > 0 && cfg.top_p < 1,
        .gen_temperature = cfg.temperature > 0 && cfg.temperature != 1,
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

    if (other_fw) {
        static const char *const planner[] = {
            [DNNMEM_FW_TENSORFLOW] = "TensorFlow's executor (graph or eager) and Grappler",
            [DNNMEM_FW_MXNET] = "MXNet's static memory planner (in-place reuse, NNVM_EXEC_MATCH_RANGE)",
            [DNNMEM_FW_JAX] = "XLA's buffer assignment (heap simulator, rematerialisation)"};
        assume(&as, "framework", "option", "%s%s%s (runtime: allocator, limit, overheads; not "
               "validated against measurements)",
               dnnmem_framework_name(cfg.framework), cfg.framework_version ? " " : "",
               cfg.framework_version ? cfg.framework_version : "");
        if (jax_jit)
            assume(&as, "schedule", "default",
                   "XLA's buffer assignment over the step's dataflow (values die at their last "
                   "reader); which values exist and which forward values the backward reads are "
                   "dnnmem's PyTorch-derived rules with XLA's where they differ (max pool, "
                   "softmax, GELU); the program order (forward, backward) stands in for XLA's "
                   "memory scheduler, but each parameter's update runs as soon as its gradient "
                   "is whole, as XLA schedules it");
        else if (tf_graph)
            assume(&as, "schedule", "default",
                   "TensorFlow's graph executor over the step's dataflow (a tensor dies after its "
                   "last consumer, no Python variable holds one); which tensors exist and which "
                   "forward tensors the backward reads are PyTorch %d.%d's rules but for "
                   "tf_ops'; the program order stands in for the executor's",
                   run.torch_version / 100, run.torch_version % 100);
        else if (!mx_planned && run.mx_ops && run.train)
            assume(&as, "schedule", "default",
                   "PyTorch %d.%d eager's: which tensors exist and when they are freed are "
                   "PyTorch's, what the backward reads MXNet's (mx_ops); not %s",
                   run.torch_version / 100, run.torch_version % 100, planner[cfg.framework]);
        else if (cfg.framework == DNNMEM_FW_TENSORFLOW)
            assume(&as, "schedule", "default",
                   "PyTorch %d.%d eager's: which tensors exist and when they are freed are "
                   "PyTorch's; which forward tensors the backward keeps are the "
                   "GradientTape's (tf_ops)",
                   run.torch_version / 100, run.torch_version % 100);
        else if (!mx_planned)
            assume(&as, "schedule", "default",
                   "PyTorch %d.%d eager's: which tensors exist, when they are freed and which "
                   "forward tensors the backward keeps are PyTorch's, not %s",
                   run.torch_version / 100, run.torch_version % 100, planner[cfg.framework]);
        if (cfg.framework == DNNMEM_FW_MXNET && !mx_planned)
            assume(&as, "mxnet_executor", generate ? "default" : "option", "%s",
                   generate ? "none: a generation loop is not an executor graph (the eager "
                              "schedule through MXNet's pool)"
                            : "naive: the eager schedule through MXNet's pool, as imperative "
                              "NDArray/autograd code runs");
        if (cfg.framework == DNNMEM_FW_MXNET && run.train)
            assume(&as, "mx_ops", cfg.mxnet_grad_sum_cap ? "option" : "default",
                   "MXNet %d.%d's backward (FGradient, DeclareBackwardDependency; cuDNN build): "
                   "what each op's gradient reads (Activation sigmoid/tanh/softrelu keep input and "
                   "output, Pooling input and output, Dropout a mask of %s, elementwise mul/div "
                   "both operands); SoftmaxOutput and the regression outputs are the loss (their "
                   "backward reads output and label; no head gradient); a tensor's gradients "
                   "summed by one ElementWiseSum below %d contributions, by kAddTo writes from %d "
                   "(MXNET_EXEC_INPLACE_GRAD_SUM_CAP); derived from MXNet's sources, not "
                   "validated against measurements",
                   run.mx_version / 100, run.mx_version % 100,
                   run.mx_version >= 200 ? "1 bit per element" : "the input's size and type",
                   run.mx_grad_sum_cap, run.mx_grad_sum_cap);
        if (cfg.framework == DNNMEM_FW_MXNET && run.train)
            assume(&as, "mx_mirror", cfg.mxnet_mirror ? "option" : "default", "%s",
                   cfg.mxnet_mirror
                       ? "MXNET_BACKWARD_DO_MIRROR=1: every op but Convolution, FullyConnected, "
                         "Concat, SoftmaxOutput, Dropout (and BatchNorm before MXNet 1.6) is "
                         "recomputed in the backward from its inputs (nnvm's Gradient pass, "
                         "baseline mirroring): its gradient reads the copy, so its forward "
                         "outputs stay only where a never-mirrored op's gradient reads them, "
                         "and the inputs the copy reads from never-mirrored ops are kept; the "
                         "symbolic executor's rule, also applied to --mxnet-executor naive "
                         "(imperative autograd passes no mirror function); derived from "
                         "MXNet's sources, not validated against measurements"
                       : "MXNET_BACKWARD_DO_MIRROR=0 (MXNet's default): nothing recomputed but "
                         "ops marked __force_mirroring__");
        if (cfg.framework == DNNMEM_FW_TENSORFLOW) {
            assume(&as, "tf_execution", cfg.tf_execution && !generate ? "option" : "default",
                   "%s",
                   tf_graph ? "graph: the step under tf.function as Keras' model.fit/predict "
                              "run it (run_eagerly=False, jit_compile off: Keras 3's "
                              "jit_compile='auto' XLA not modelled); derived from TF's "
                              "sources, not validated against measurements "
                              "(--tf-execution eager: op by op)"
                   : generate ? "eager: a generation loop is not one tf.function graph (not "
                                "modelled)"
                              : "eager: op by op under a GradientTape");
        }
        if (cfg.framework == DNNMEM_FW_JAX)
            assume(&as, "jax_execution", cfg.jax_execution && !generate ? "option" : "default",
                   "%s",
                   jax_jit ? "jit: the whole step is one jax.jit call compiled by XLA: fusion, "
                             "operand buffer reuse and one temp buffer per call sized by the "
                             "heap simulator at compile time (--jax-execution eager: op by op)"
                   : generate ? "op by op: a generation loop is not one jitted call (not "
                                "modelled); PyTorch eager's schedule stands in"
                              : "op by op (not jitted): PyTorch eager's schedule through XLA's "
                                "allocator");
    } else {
        assume(&as, "framework", cfg.torch_version ? "option" : "default", "pytorch %d.%d (eager)",
               run.torch_version / 100, run.torch_version % 100);
    }
    assume(&as, "device", cfg.device == DNNMEM_DEVICE_CUDA ? "default" : "option", "%s",
           run.cuda ? "cuda" : "cpu");
    /* F.scaled_dot_product_attention's kernel (sdp_utils.cpp): cuDNN first
     * for fp16/bf16 on sm90/sm100 once the bundled cuDNN passes 9.15
     * (check_prefer_cudnn_attention; PyTorch 2.11, measured choice in
     * tools/gpu/results/sdpa-choice.txt), else flash from sm80, else the
     * memory-efficient kernel; grouped heads (enable_gqa) exclude the latter */
    int cc80 = cfg.compute_capability ? cfg.compute_capability : DM_CC_DEFAULT;
    bool fused16 = (cfg.precision != DNNMEM_PRECISION_FP32 || g->quant_method) && cc80 >= 80;
    static const char *const forced_text[] = {
        "",
        "FlashAttention-2, forced (sdpa_kernel(SDPBackend.FLASH_ATTENTION))",
        "the memory-efficient kernel, forced (sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION))",
        "cuDNN attention, forced (sdpa_kernel(SDPBackend.CUDNN_ATTENTION); its buffers taken "
        "as FlashAttention-2's)",
        "the math kernel, forced (sdpa_kernel(SDPBackend.MATH)): "
        "_scaled_dot_product_attention_math's float32 q and k scaled by sqrt(scale), scores, "
        "softmax, dropout, times v, materialised"};
    const char *sdpa_text = dm_arena_printf(
        &arena, "sdpa: F.scaled_dot_product_attention: %s%s",
        cfg.sdpa_backend ? forced_text[cfg.sdpa_backend]
        : !fused16 ? "the memory-efficient kernel (float32 or before sm80)"
        : torch >= 211 && (cc80 == 90 || cc80 == 100)
            ? "cuDNN attention for fp16/bf16 (PyTorch 2.11+ on sm90/sm100; its buffers taken "
              "as FlashAttention-2's)"
            : "FlashAttention-2 for fp16/bf16 from sm80",
        gqa ? "; grouped keys and values passed with enable_gqa (transformers 4.54+), which "
              "only flash/cuDNN take: float32 or pre-sm80 runs the math kernel, scores "
              "materialised"
            : "; grouped keys and values repeated (repeat_kv)");
    if (hf)
        assume(&as, "transformers", cfg.transformers_version ? "option" : "default",
               "%d.%d (its modelling code, as the HuggingFace front end builds it)%s",
               transformers / 100, transformers % 100,
               generate && transformers > DM_TRANSFORMERS_DEFAULT
                   ? "; generation follows 4.51's loop, with GPT-2's DynamicCache from 4.52 "
                     "(PR #35761), and from 5.0 GPT-2's last-position logits and the cache "
                     "layers' copies of k and v"
                   : transformers >= 500 ? "; from 5.0 the cache layers keep copies of k and v"
                   : "");
    if (hf)
        assume(&as, "attention", cfg.attn ? "option" : "default", "%s",
               flash ? "flash_attention_2: flash-attn's flash_attn_func on [B, S, H, D] "
                       "views (no copies; GQA keys and values not repeated), keeping q, k, v, "
                       "the output and the fp32 log-sum-exp; backward's fp32 dq accumulator "
                       "and, with GQA, H-headed dk/dv buffers"
               : sdpa ? sdpa_text
                    : g->eager_only ? "eager: scores, softmax and dropout materialised (the "
                                      "model has no sdpa path in transformers)"
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
        if (g->n_router > 0)
            assume(&as, "aux_loss", "default",
                   "output_router_logits: + %g x load_balancing_loss_func over the %d sparse "
                   "layers' router logits, after the cross-entropy (its int64 one-hot expert "
                   "mask [tokens x layers, top-k, experts] and float copy included)",
                   g->router_aux_coef, (int)g->n_router);
        assume(&as, "iterations", cfg.iterations ? "option" : "default", "%d", run.iterations);
        if (run.grad_accum > 1)
            assume(&as, "grad_accum", "option", "%d micro-batches per step", run.grad_accum);
        assume(&as, "zero_grad", "default", "%s",
               mx_planned ? "none: the executor's gradients are bound once and overwritten "
                            "(grad_req write)"
               : run.torch_version >= 200 ? "set_to_none=True (frees grads)"
                                          : "set_to_none=False (keeps grads)");
    } else if (generate) {
        static const char *const kv[] = {"the model's dtype", "fp32", "fp16", "bf16",
                                         "fp8 (1 byte per element; scales not counted)"};
        const char *how = run.gen_beams > 1 ? "beam-search" : run.gen_sample ? "sampling" : "greedy";
        if (g->encoder_decoder) /* T5: src/schedule/generate.c, seq2seq_decode */
            assume(&as, "mode", "option",
                   "generate: %s model.generate() of an encoder-decoder (transformers 4.51): "
                   "the encoder once over the prompt (seq; its output kept) with the first "
                   "decoder forward (decoder_start_token_id), then %lld decoder forwards of one "
                   "token each; an EncoderDecoderCache: self-attention keys and values "
                   "concatenated per token, cross-attention keys and values [batch, heads, seq, "
                   "d_kv] made at the first forward and kept; every decoder position's logits",
                   how, (long long)cfg.new_tokens - 1);
        else if (g->cache_len) /* Gemma 2/3: src/schedule/generate.c, hybrid_decode */
            assume(&as, "mode", "option",
                   "generate: %s model.generate() with a HybridCache (transformers 4.51, "
                   "cache_implementation \"hybrid\"): static caches of %lld positions, %lld in "
                   "sliding layers, made before the prefill (logits_to_keep=1); %lld decode steps "
                   "write in place",
                   how, (long long)g->cache_len,
                   (long long)(g->cache_window < g->cache_len ? g->cache_window : g->cache_len),
                   (long long)cfg.new_tokens - 1);
        else
            assume(&as, "mode", "option",
                   "generate: %s model.generate() with %s (transformers 4.51): "
                   "a prefill of the prompt (seq) keeping %s, then %lld decode steps, each "
                   "concatenating one token onto every layer's keys and values%s",
                   how, g->legacy_cache ? "the legacy tuple cache, no Cache class (GPT-2, BioGPT)"
                                   : "a DynamicCache (a sliding window only masks)",
                   g->logits_to_keep ? "the last position's logits (logits_to_keep=1)"
                                     : "every position's logits",
                   (long long)cfg.new_tokens - 1, /* the prefill makes the first token */
                   g->legacy_cache ? " into new tensors, the previous step's tuple referenced "
                                     "until the next step's inputs replace it (two caches live "
                                     "at a forward's end)"
                                   : "");
        assume(&as, "kv_dtype", cfg.kv_dtype ? "option" : "default", "%s", kv[cfg.kv_dtype]);
        if (run.gen_beams > 1) { /* src/schedule/generate.c, beam search */
            assume(&as, "num_beams", "option",
                   "%lld: _beam_search (transformers 4.51.3, vectorized): running_sequences and "
                   "sequences [batch, num_beams, prompt + new_tokens] int64, beam indices [batch, "
                   "num_beams, new_tokens] int32; per step the float32 logits [batch x num_beams, "
                   "vocab], log_softmax, + beam scores, the gathers of the top 2 x num_beams; "
                   "after every forward the cache reordered by index_select, %s",
                   (long long)run.gen_beams,
                   g->legacy_cache ? "the legacy tuple rebuilt whole while the old one (and the "
                                     "previous step's inputs') are still referenced"
                                   : "per layer keys then values, each replacing its old tensor");
            assume(&as, "eos_token", "default",
                   "none: every beam runs all %lld forwards, 2 x num_beams candidates kept per "
                   "step (max(2, 1 + eos tokens) x num_beams)",
                   (long long)cfg.new_tokens);
        }
        if (run.gen_sample) { /* src/schedule/generate.c, sample_chain */
            assume(&as, "do_sample", "option",
                   "_sample with the logits warpers (temperature, top-k, top-p in that order), "
                   "then softmax and multinomial: the warped scores and probabilities [batch, "
                   "vocab] float32 held to the next step");
            if (run.gen_temperature)
                assume(&as, "temperature", "option",
                       "%g (TemperatureLogitsWarper: scores / temperature, a float32 [batch, "
                       "vocab])",
                       cfg.temperature);
            else
                assume(&as, "temperature", cfg.temperature != 0 ? "option" : "default",
                       "1.0: no TemperatureLogitsWarper");
            if (run.gen_top_k > 0)
                assume(&as, "top_k", cfg.top_k ? "option" : "default",
                       "%lld%s (TopKLogitsWarper: torch.topk, a bool [batch, vocab] mask, "
                       "masked_fill's float32 [batch, vocab])",
                       (long long)run.gen_top_k, cfg.top_k ? "" : ", GenerationConfig's default");
            else
                assume(&as, "top_k", "option", "0: no TopKLogitsWarper");
            if (run.gen_top_p)
                assume(&as, "top_p", "option",
                       "%g (TopPLogitsWarper: sort's float32 values and int64 indices [batch, "
                       "vocab], softmax, cumsum, two bool masks, masked_fill)",
                       cfg.top_p);
            else
                assume(&as, "top_p", cfg.top_p != 0 ? "option" : "default",
                       "1.0: no TopPLogitsWarper");
        }
    } else {
        assume(&as, "mode", "default", "infer (torch.no_grad, model.eval)");
    }
    struct dm_shape *shapes = dm_arena_array(&arena, (size_t)g->n_tensors + 1, sizeof *shapes);
    if (!shapes) {
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
        goto out;
    }
    for (int32_t i = 0; i < g->n_tensors; i++)
        shapes[i].rank = -1;
    if ((s = bind_dims(g, &cfg, syms, shapes, &as, err)) != DNNMEM_OK)
        goto out;

    struct dm_infer ctx = {.g = g, .arena = &arena, .t = t, .sym_values = syms,
                           .input_shapes = shapes, .err = err};
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
    } else if (cfg.precision != DNNMEM_PRECISION_FP32 || (g->quant_method && g->quant_fp16_default)) {
        /* model.half() / .to(bfloat16) converts every floating-point
         * parameter and buffer, so every float32 tensor the model makes from
         * them, its grads and optimizer state become 2-byte. A quantized
         * model's quantizer makes float16 the default (update_torch_dtype). */
        bool qdefault = cfg.precision == DNNMEM_PRECISION_FP32;
        enum dm_dtype half = cfg.precision == DNNMEM_PRECISION_BF16 ? DM_BFLOAT16 : DM_FLOAT16;
        for (int32_t i = 0; i < g->n_tensors; i++)
            if (t[i].rank >= 0 && t[i].dtype == DM_FLOAT && !g->tensors[i].keep_fp32) {
                t[i].dtype = half;
                t[i].bytes = (uint64_t)t[i].numel * 2;
            }
        if (v5_dtype)
            assume(&as, "precision", "default",
                   "%s: transformers %d.%d loads the config's dtype %s (dtype=\"auto\" by "
                   "default from 5.0; --precision fp32 for float32)",
                   cfg.precision == DNNMEM_PRECISION_FP16 ? "fp16" : "bf16", transformers / 100,
                   transformers % 100, g->stored_dtype);
        else if (qdefault)
            assume(&as, "precision", "default",
                   "fp16: from_pretrained of a %s model without torch_dtype loads its other "
                   "weights in float16 (the quantizer's update_torch_dtype; --precision bf16 for "
                   "bfloat16)",
                   g->quant_method);
        else
            assume(&as, "precision", "option", "%s (every float32 tensor becomes 2-byte)",
                   cfg.precision == DNNMEM_PRECISION_FP16 ? "fp16" : "bf16");
    } else if (g->quant_method) {
        assume(&as, "precision", "default",
               "float32 for the weights %s leaves unquantized: its quantizer's default without "
               "torch_dtype (update_dtype; --precision bf16 loads them as stored)",
               g->quant_method);
    } else if (g->stored_dtype && strcmp(g->stored_dtype, "float32") != 0 && !cfg.precision_set) {
        const char *flag = strcmp(g->stored_dtype, "bfloat16") == 0  ? " bf16"
                           : strcmp(g->stored_dtype, "float16") == 0 ? " fp16"
                                                                     : " P";
        assume(&as, "precision", "default",
               "float32, as from_pretrained without torch_dtype loads a %s checkpoint "
               "(--precision%s loads it as stored, torch_dtype=\"auto\")",
               g->stored_dtype, flag);
    } else {
        assume(&as, "precision", cfg.precision_set ? "option" : "default", "as the model: %s",
               weight_dtype(g, t));
    }
    run.cpu_threads = cfg.cpu_threads;
    if (!run.cuda)
        assume(&as, "cpu_threads", cfg.cpu_threads ? "option" : "default", "%s",
               cfg.cpu_threads == 1 ? "1" : "several");
    run.freeze = cfg.freeze;
    run.n_freeze = cfg.n_freeze;
    run.checkpoint = cfg.checkpoint;
    run.n_checkpoint = cfg.n_checkpoint;
    if (g->n_kbit_ckpt) { /* --kbit-prep's gradient_checkpointing_enable */
        run.checkpoint = g->kbit_ckpt;
        run.n_checkpoint = (size_t)g->n_kbit_ckpt;
    }
    for (size_t k = 0; run.train && k < run.n_checkpoint; k++)
        assume(&as, "checkpoint", "option", "%s%s%s", run.checkpoint[k],
               g->n_kbit_ckpt ? " (--kbit-prep: every layer)" : "",
               hf && k == 0 ? "; use_cache off, as transformers turns it off under gradient "
                              "checkpointing in training"
                            : "");
    if (lo->r) {
        char targets[256] = "PEFT's default for the architecture";
        size_t len = 0;
        for (size_t k = 0; k < lo->n_targets && len < sizeof targets; k++)
            len += (size_t)snprintf(targets + len, sizeof targets - len, "%s%s", k ? "," : "",
                                    lo->targets[k]);
        assume(&as, "lora", "option",
               "rank %lld, alpha %g, dropout %g, targets %s; every other parameter frozen; "
               "float32 adapters (PEFT >= 0.12)",
               (long long)lo->r, lo->alpha > 0 ? lo->alpha : 8, lo->dropout, targets);
    }
    if (g->quant_method) {
        assume(&as, "quant", cfg.quant ? "option" : "model", "%s", g->quant_layout);
        assume(&as, "quant_kernels", "default", "%s", g->quant_runtime);
    }
    if (g->kbit_prep)
        assume(&as, "kbit_prep", "option", "%s", g->kbit_prep);
    if (jax_jit)
        assume(&as, "inplace", "default",
               "n/a under jit: XLA's heap simulation lets a value take a dying operand's "
               "buffer (may_reuse_operand_buffers)");
    else if (run.tf_graph)
        assume(&as, "inplace", "default",
               "n/a under tf.function: the executor forwards a dying input's buffer to an "
               "elementwise op's output (tf_ops)");
    else if (cfg.framework == DNNMEM_FW_TENSORFLOW && cfg.inplace == DNNMEM_INPLACE_AUTO)
        assume(&as, "inplace", "default",
               "none in eager TensorFlow: an input still held by the caller (a Keras layer's "
               "argument) is protected from forwarding (ExecuteNodeArgs)");
    else
        assume(&as, "inplace", cfg.inplace == DNNMEM_INPLACE_AUTO ? "default" : "option", "%s",
               run.inplace ? "auto (ReLU-like ops in place where PyTorch allows, as torchvision)"
                           : "none (every op allocates its output)");

    /* The CPU allocator hands out exactly what is asked (the profiler counts
     * nbytes); the CUDA caching allocator rounds. */
    uint64_t round = cfg.alloc_round_bytes >= 0 ? (uint64_t)cfg.alloc_round_bytes
                   : run.cuda ? (uint64_t)DNNMEM_ALLOC_ROUND_DEFAULT
                              : 1;
    if (other_fw)
        ; /* fw_setup states it */
    else if (run.cuda || cfg.alloc_round_bytes >= 0)
        assume(&as, "allocator", cfg.alloc_round_bytes >= 0 ? "option" : "default", "%s",
               cfg.alloc_round_bytes >= 0
                   ? dm_arena_printf(&arena, "requests rounded up to %llu B, no caching",
                                     (unsigned long long)round)
                   : "PyTorch CUDA caching allocator (512 B blocks; 2 MiB, 20 MiB and "
                     "2 MiB-rounded segments; best fit; split and merge rules)");
    else
        assume(&as, "allocator", "default", "host: bytes as requested");
    /* The CUDA toolkit each framework's wheels are built with, by default:
     * PyTorch 2.6's default pip wheel is cu124 (pytorch.org, previous
     * versions: `pip install torch==2.6.0` installs the CUDA 12.4 build); TensorFlow 2.15's tested build configuration is CUDA 12.2
     * (tensorflow.org/install/source#gpu); jax[cuda12] installs CUDA 12.x
     * libraries from pip (12.2 taken); MXNet's last releases (1.9.1) ship
     * wheels up to mxnet-cu112 (CUDA 11.2). */
    static const int fw_cuda[] = {[DNNMEM_FW_PYTORCH] = 124, [DNNMEM_FW_TENSORFLOW] = 122,
                                  [DNNMEM_FW_MXNET] = 112, [DNNMEM_FW_JAX] = 122};
    int cuda_version = cfg.cuda_version ? cfg.cuda_version : fw_cuda[cfg.framework];
    /* compute capability 8.0 unless given, or the least the quantized
     * checkpoint's kernels run on (fp8: 8.9) */
    int cc = cfg.compute_capability ? cfg.compute_capability
             : g->quant_min_cc > DM_CC_DEFAULT ? g->quant_min_cc
                                    : DM_CC_DEFAULT;
    run.compute_capability = cc;
    /* Other frameworks do not set CUDA_MODULE_LOADING=LAZY as PyTorch does
     * (1.13+, PR #86509): kernels load lazily only from CUDA 12.2, where
     * lazy loading is the default on Linux (NVIDIA CUDA programming guide,
     * "Lazy Loading"); before, eagerly. No context was measured for them:
     * the PyTorch figures stand in (runtime-facts 5.1). */
    bool fw_lazy = cuda_version >= 122;
    uint64_t context = cfg.cuda_context_bytes >= 0 ? (uint64_t)cfg.cuda_context_bytes
                     : !run.cuda ? 0
                     : other_fw ? (uint64_t)(dnnmem_cuda_context_default(200, fw_lazy ? 121 : 112, cc) -
                                             (fw_lazy ? DNNMEM_LAZY_KERNELS_DEFAULT : 0))
                                : (uint64_t)dnnmem_cuda_context_default(run.torch_version, cuda_version, cc);
    char cb[32];
    if (run.cuda) {
        assume(&as, "cuda", cfg.cuda_version || cfg.compute_capability ? "option" : "default",
               "%d.%d, compute capability %d.%d%s",
               cuda_version / 10, cuda_version % 10, cc / 10, cc % 10,
               !cfg.compute_capability && g->quant_min_cc > DM_CC_DEFAULT
                   ? dm_arena_printf(&arena, " (the least %s kernels run on)", g->quant_method)
                   : "");
        if (other_fw)
            assume(&as, "cuda_context", cfg.cuda_context_bytes >= 0 ? "option" : "default",
                   "%s (%s)", dm_format_bytes(context, cb),
                   cfg.cuda_context_bytes >= 0
                       ? "--cuda-context"
                       : fw_lazy ? "lazy loading, the CUDA 12.2+ default; PyTorch 2.x's figure, "
                                   "unsloth-zoo PR #1053: not measured for this framework"
                                 : "eager module loading before CUDA 12.2 without "
                                   "CUDA_MODULE_LOADING=LAZY; V100 + CUDA 11.2, HF docs: not "
                                   "measured for this framework");
        else
            assume(&as, "cuda_context", cfg.cuda_context_bytes >= 0 ? "option" : "default", "%s (%s)",
                   dm_format_bytes(context, cb),
                   cfg.cuda_context_bytes >= 0 ? "--cuda-context"
                   : cuda_version < 117        ? "eager module loading, V100 + CUDA 11.2, HF docs"
                   : run.torch_version < 200   ? "PyTorch 1.13, lazy loading, PR #86509"
                   : cc == 90 ? "PyTorch 2.x on sm90: 618.8 MiB at start + 132 MiB of kernels "
                                "loaded by the first step, measured on an H200 (PyTorch 2.11, "
                                "CUDA 13.0)"
                              : "PyTorch 2.x: 426 MiB at start (unsloth-zoo PR #1053) + 132 MiB "
                                "of kernels loaded by the first step (measured on an H200)");
        /* Other frameworks: cuBLAS allocates its own workspace outside the
         * framework's allocator (only PyTorch routes it through its
         * allocator, CublasHandlePool.cpp), so none is scheduled. */
        run.cublas_workspace = cfg.cublas_workspace_bytes >= 0 && !run.xla
                                   ? (uint64_t)cfg.cublas_workspace_bytes
                               : other_fw ? 0
                                          : (uint64_t)dnnmem_cublas_workspace_default(run.torch_version, cc);
        /* XLA passes each cuBLAS call a workspace of its own, an extra s8
         * output of the custom call (gemm_rewriter.cc, GemmWorkspaceRewriteVisitor:
         * "Pass a user-managed workspace to legacy cuBLAS operations"; the
         * cuBLASLt calls get the same), sized by GemmConfig::kHopperWorkspace
         * (32 MiB, sm90+) or kDefaultWorkspace (4 MiB) (xla/service/gpu/
         * matmul_utils.h): a value of the temp buffer live during the call
         * (every cuBLAS call of the 16 measured steps, tools/gpu/results/
         * jax-hlo.tar.gz, carries s8[33554432]) */
        if (run.xla)
            run.xla_gemm_workspace = cfg.cublas_workspace_bytes >= 0
                                         ? (uint64_t)cfg.cublas_workspace_bytes
                                     : cc >= 90 ? DM_XLA_GEMM_WORKSPACE_HOPPER
                                                : DM_XLA_GEMM_WORKSPACE_DEFAULT;
        assume(&as, "cublas_workspace", cfg.cublas_workspace_bytes >= 0 ? "option" : "default",
               "%s",
               run.xla ? dm_arena_printf(&arena,
                                         "%s per cuBLAS call inside XLA's temp buffer, live "
                                         "during the call (%s; matmul_utils.h, "
                                         "gemm_rewriter.cc); every MatMul/Gemm taken to be a "
                                         "cuBLAS call (autotuning may pick a Triton kernel, "
                                         "which has none)",
                                         dm_format_bytes(run.xla_gemm_workspace, cb),
                                         cfg.cublas_workspace_bytes >= 0 ? "--cublas-workspace"
                                         : cc >= 90 ? "GemmConfig::kHopperWorkspace, sm90+"
                                                    : "GemmConfig::kDefaultWorkspace, before sm90")
               : other_fw && cfg.cublas_workspace_bytes < 0
                   ? "0 through the allocator (cuBLAS's own workspace is outside it; only "
                     "PyTorch routes it through its allocator)"
                   : dm_arena_printf(&arena, "%s per handle, kept from the first matmul "
                                             "(CublasHandlePool.cpp)",
                                     dm_format_bytes(run.cublas_workspace, cb)));
        run.conv_workspace = cfg.conv_workspace_bytes >= 0 ? (uint64_t)cfg.conv_workspace_bytes : 0;
        /* the caps: TF_CUDNN_WORKSPACE_LIMIT_IN_MB default 4 GiB (conv_ops*.cc),
         * scratch allocated non-retryable; MXNet's Convolution workspace
         * parameter 1024 MB (convolution-inl.h) */
        assume(&as, "conv_workspace", cfg.conv_workspace_bytes >= 0 ? "option" : "default", "%s%s",
               cfg.conv_workspace_bytes >= 0
                   ? dm_arena_printf(&arena, "%s per convolution (--conv-workspace)",
                                     dm_format_bytes(run.conv_workspace, cb))
                   : "0 (cuDNN's heuristic choice is unknown without the GPU; "
                     "--conv-workspace adds one)",
               cfg.framework == DNNMEM_FW_TENSORFLOW
                   ? "; TensorFlow caps it at 4 GiB (TF_CUDNN_WORKSPACE_LIMIT_IN_MB) and "
                     "falls back to algorithms needing less when it does not fit"
               : cfg.framework == DNNMEM_FW_MXNET
                   ? "; MXNet's Convolution workspace parameter allows up to 1024 MB"
                   : "");
    }
    struct fwsim fws = {0};
    if (other_fw && (s = fw_setup(&cfg, context, cc, fw_version, &fws, &as, err)) != DNNMEM_OK)
        goto out;

    if (cfg.capacity_bytes > 0)
        assume(&as, "capacity", "option", "%s bytes = %s%s%s%s, headroom %g%%",
               dm_arena_printf(&arena, "%lld", (long long)cfg.capacity_bytes),
               dm_format_bytes((uint64_t)cfg.capacity_bytes, cb), cfg.device_label ? " (" : "",
               cfg.device_label ? cfg.device_label : "", cfg.device_label ? ")" : "",
               100 * (cfg.headroom > 0 ? cfg.headroom : 0.05));
    if (tf_graph && run.cuda)
        run.tf_nhwc = dm_tf_layout_nhwc(g, t, &run);
    if (cfg.framework == DNNMEM_FW_TENSORFLOW)
        assume(&as, "tf_ops", "default", "%s",
               tf_graph
                   ? dm_arena_printf(
                         &arena,
                         "graph rules: elementwise kernels write into a dying input's buffer "
                         "(forward_input_or_allocate_output), activation, Sub, Mul, Div and Clip "
                         "grads into a dying incoming grad's or kept operand's; Dropout keeps a "
                         "float mask only; fused LayerNorm keeps no normalized * gamma; the "
                         "layout optimizer runs the GPU graph %s%s; not modelled: its boundary "
                         "transposes, memory optimizer swapping",
                         run.cuda && run.tf_nhwc ? "NHWC" : "NCHW",
                         run.cuda && run.tf_nhwc
                             ? " (fp16/bf16 convolutions): fused BatchNorm transposes in training"
                             : ": fused BatchNorm needs no transposes")
                   : "eager GradientTape rules: each op keeps the inputs and outputs its "
                     "TF gradient reads (src/train/tf_tape.def: AddV2 and ConcatV2 keep "
                     "their inputs, MaxPool its output, Dropout x, x * scale and a float "
                     "mask; PyTorch's rule for ops without a row); "
                     "Keras 2's fused BatchNorm on NHWC data transposes to NCHW (2 "
                     "input-sized temporaries forward, 3 backward); Keras 2's fused "
                     "LayerNorm keeps its normalized outputs; no tf.function/Grappler");
    if ((s = dm_schedule_build(g, t, &run, &sched, err)) != DNNMEM_OK)
        goto out;
    if (mx_planned) {
        struct dm_schedule planned;
        struct dm_mxplan_stats ps;
        if ((s = dm_mxnet_plan(g, &sched, 0, &planned, &ps, err)) != DNNMEM_OK)
            goto out;
        dm_schedule_free(&sched);
        sched = planned;
        char pb[32];
        assume(&as, "schedule", "default",
               "MXNet symbolic executor (Module.bind): nnvm's PlanMemory over one %s: %d "
               "entries into %d storages (%s; free list by size, match range 16; %d in "
               "place), each allocated once and kept",
               run.train ? "forward + backward" : "forward", ps.entries, ps.storages,
               dm_format_bytes(ps.storage_bytes, pb), ps.inplace);
        if (run.train)
            assume(&as, "executor_arrays", "default",
                   "weights, inputs and gradients (grad_req write) bound once before the first "
                   "op; optimizer state made at the first update and kept; fused optimizer "
                   "updates, no temporaries");
        assume(&as, "entry_lifetimes", "default",
               "which entries exist and when their last reader runs: the op order of the "
               "eager schedule, with what each op's backward reads from MXNet %d.%d's "
               "FGradient registrations (mx_ops); --mxnet-executor naive: the eager schedule",
               run.mx_version / 100, run.mx_version % 100);
    }
    struct dm_xla_stats xla = {0};
    if (jax_jit && (s = xla_plan(g, t, &run, &cfg, &sched, &as, &xla, err)) != DNNMEM_OK)
        goto out;
    /* CUDA: the caching allocator with PyTorch's defaults (or a plain
     * rounding when the user overrides the rounding); CPU: exact sizes */
    if (other_fw) {
        s = fw_result(g, t, &sched, &fws, &cfg, context, &as, out, err);
        if (s == DNNMEM_OK && jax_jit) {
            (*out)->xla_temp_bytes = xla.heap.heap_bytes;
            (*out)->xla_output_bytes = xla.output_bytes;
            (*out)->xla_argument_bytes = xla.entry_bytes;
        }
        goto done;
    }
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
    if (s == DNNMEM_OK)
        (*out)->needed_bytes = (*out)->peak_allocated + context;
done:
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
    dm_graph_free(&lg);
    return s;
}
