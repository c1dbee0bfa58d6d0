/*
 * api.c: the public entry points. Loading maps the file and hands it to the
 * front end; an estimate runs the stages of src/estimate/ (estimate.h): the
 * options checked, the graph variant chosen, the run's defaults, the shapes,
 * the schedule, the allocator's replay and the result.
 */
#include "estimate/estimate.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct dnnmem_model {
    struct dm_graph g;       /* HuggingFace configs: the outline (dm_load_hf_outline) */
    struct dm_checkpoint ck; /* a model directory's safetensors headers */
    struct dm_variants *variants; /* HuggingFace configs: the graphs (NULL otherwise) */
};

const struct dm_graph *dm_model_graph(const dnnmem_model *m)
{
    return m->variants ? dm_variants_loaded(m->variants, false, NULL) : &m->g;
}
const struct dm_graph *dm_model_graph_sdpa(const dnnmem_model *m)
{
    return dm_variants_loaded(m->variants, true, NULL);
}

void dnnmem_load_options_init(struct dnnmem_load_options *lo)
{
    memset(lo, 0, sizeof *lo);
    lo->max_nodes = DNNMEM_DEFAULT_MAX_NODES;
}

/* The budget of `lo` (NULL or 0: the default). */
static enum dnnmem_status load_budget(const struct dnnmem_load_options *lo, int64_t *max_nodes,
                                      struct dnnmem_error *err)
{
    *max_nodes = lo && lo->max_nodes ? lo->max_nodes : DNNMEM_DEFAULT_MAX_NODES;
    if (*max_nodes < 1)
        return dm_fail(err, DNNMEM_E_USAGE, "--max-nodes: must be at least 1, not %lld",
                       (long long)*max_nodes);
    return DNNMEM_OK;
}

/* Whether the file is JSON: its first byte after whitespace (as much as a
 * JSON model file may have) is '{'. */
static bool is_json(const uint8_t *data, size_t size)
{
    size_t k = 0;
    while (k < size && k < DM_MAX_JSON_BYTES && isspace(data[k]))
        k++;
    return k < size && data[k] == '{';
}

/* Whether a file of `size` bytes is within its kind's cap (DM_MAX_JSON_BYTES,
 * DM_MAX_ONNX_BYTES; a zip's members are capped where they are read). */
static enum dnnmem_status within_size(size_t size, bool json, bool zip, const char *name,
                                      struct dnnmem_error *err)
{
    size_t cap = json ? DM_MAX_JSON_BYTES : DM_MAX_ONNX_BYTES;
    if (size > cap && !zip)
        return dm_fail(err, DNNMEM_E_LIMIT,
                       "%s: %zu bytes, beyond the %zu MiB a%s model file may have", name, size,
                       cap >> 20, json ? " JSON" : "n ONNX");
    return DNNMEM_OK;
}

/* The kinds of JSON model file, each known by its top-level keys
 * (dm_is_KIND, dnnmem-impl.h); what names it in the errors below. */
enum json_kind { JSON_CAPTURE, JSON_KERAS, JSON_MXNET, JSON_HF, N_JSON_KINDS };
static const struct {
    bool (*is)(json_t *root);
    const char *what;
} json_kinds[N_JSON_KINDS] = {
    [JSON_CAPTURE] = {dm_is_capture, "a dnnmem capture (\"format\": \"dnnmem-capture\")"},
    [JSON_KERAS] = {dm_is_keras, "a Keras model (class_name and config)"},
    [JSON_MXNET] = {dm_is_mxnet, "an MXNet symbol (nodes, and heads or arg_nodes)"},
    [JSON_HF] = {dm_is_hf, "a HuggingFace config.json (model_type, architectures or "
                           "vocab_size)"},
};

/* The one parse of a JSON model file; a text that is not JSON gets the
 * capture's message when it bears the capture's tag (a capture cut short). */
static enum dnnmem_status parse_json(const uint8_t *data, size_t size, const char *name,
                                     json_t **root, struct dnnmem_error *err)
{
    json_error_t je;
    *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (*root)
        return DNNMEM_OK;
    if (dm_capture_tagged(data, size))
        return dm_fail(err, DNNMEM_E_PARSE,
                       "%s: not a complete capture (JSON: %s, line %d, column %d)", name, je.text,
                       je.line, je.column);
    return dm_fail(err, DNNMEM_E_PARSE, "%s: not valid JSON: %s (line %d, column %d)", name,
                   je.text, je.line, je.column);
}

/* The front end whose keys the root has: exactly one, else an error. */
static enum dnnmem_status json_kind_of(json_t *root, const char *name, enum json_kind *kind,
                                       struct dnnmem_error *err)
{
    int n = 0, first = -1;
    for (int k = 0; k < N_JSON_KINDS; k++)
        if (json_kinds[k].is(root)) {
            if (n++ == 1)
                return dm_fail(err, DNNMEM_E_MODEL, "%s: ambiguous JSON: it has the keys of %s "
                               "and of %s; a model file must be one", name,
                               json_kinds[first].what, json_kinds[k].what);
            first = k;
        }
    if (n == 0)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: a JSON file that is not a model dnnmem reads: not %s, %s, %s nor %s",
                       name, json_kinds[JSON_HF].what, json_kinds[JSON_KERAS].what,
                       json_kinds[JSON_MXNET].what, json_kinds[JSON_CAPTURE].what);
    *kind = (enum json_kind)first;
    return DNNMEM_OK;
}

/* The capture format's reader's error (src/util/json.c), naming the file and
 * the byte; `tagged`: the text bears the capture's tag (a capture cut short). */
static enum dnnmem_status capture_json_fail(const dnnmem_model *m, enum dnnmem_status s,
                                            const struct dm_json_error *je, bool tagged,
                                            struct dnnmem_error *err)
{
    if (je->limit)
        return dm_fail(err, s, "%s: %s at byte %zu (a limit of the capture reader: "
                       "docs/capture-format.md)", m->g.path, je->msg, je->offset);
    return dm_fail(err, s, tagged ? "%s: not a complete capture (JSON: %s at byte %zu)"
                                  : "%s: not valid JSON: %s (byte %zu)",
                   m->g.path, je->msg, je->offset);
}

/* Whether a capture's root has a key another front end's dm_is_KIND tests
 * (then jansson's parse decides, as for any JSON, and reports an ambiguity). */
static bool foreign_keys(const struct dm_json *root)
{
    static const char *const keys[] = {"class_name", "config", "nodes", "model_type",
                                       "architectures", "vocab_size", "n_embd"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (dm_json_get(root, keys[i]))
            return true;
    return false;
}

/* A JSON model file: parsed once, its root handed to the front end its keys
 * name (and kept by a HuggingFace config's variants, which build from it). A
 * capture's (its tag in the first bytes) is parsed by the capture format's
 * reader alone, unless its root also has another front end's keys. */
static enum dnnmem_status load_json(dnnmem_model *m, const uint8_t *data, size_t size,
                                    int64_t max_nodes, struct dnnmem_error *err)
{
    bool tagged = dm_capture_tagged(data, size);
    struct dm_arena a; /* the capture reader's tree */
    dm_arena_init(&a);
    const struct dm_json *croot = NULL;
    struct dm_json_error je;
    enum dnnmem_status s = DNNMEM_OK;
    if (tagged) {
        s = dm_json_parse(&a, data, size, &croot, &je);
        const char *fmt = s == DNNMEM_OK ? dm_json_str(dm_json_get(croot, "format")) : NULL;
        bool done = true; /* else jansson's parse decides its kind, as for any JSON */
        if (s != DNNMEM_OK)
            s = capture_json_fail(m, s, &je, true, err);
        else if (fmt && strcmp(fmt, "dnnmem-capture") == 0 && !foreign_keys(croot))
            s = dm_load_capture(&m->g, croot, err); /* the common case: one parse */
        else
            done = false;
        if (done) {
            dm_arena_free(&a);
            return s;
        }
    }
    json_t *root;
    s = parse_json(data, size, m->g.path, &root, err);
    if (s != DNNMEM_OK) {
        dm_arena_free(&a);
        return s;
    }
    enum json_kind kind = JSON_HF;
    s = json_kind_of(root, m->g.path, &kind, err);
    if (s == DNNMEM_OK && kind == JSON_CAPTURE) { /* a step captured by dnnmem.torch */
        if (!croot && (s = dm_json_parse(&a, data, size, &croot, &je)) != DNNMEM_OK)
            s = capture_json_fail(m, s, &je, tagged, err);
        if (s == DNNMEM_OK)
            s = dm_load_capture(&m->g, croot, err);
    } else if (s == DNNMEM_OK && kind == JSON_KERAS)
        s = dm_load_keras(&m->g, root, err);
    else if (s == DNNMEM_OK && kind == JSON_MXNET)
        s = dm_load_mxnet(&m->g, root, err);
    else if (s == DNNMEM_OK) {
        /* the outline: what the model line reports and the checkpoint is
         * checked against; the root kept to build the graphs estimates ask for */
        s = dm_load_hf_outline(&m->g, root, err);
        if (s == DNNMEM_OK)
            s = dm_variants_new(root, m->g.path, max_nodes, &m->variants, err);
    }
    json_decref(root);
    dm_arena_free(&a);
    return s;
}

static enum dnnmem_status load_bytes(const uint8_t *data, size_t size, const char *name,
                                     int64_t max_nodes, dnnmem_model **out,
                                     struct dnnmem_error *err)
{
    *out = NULL;
    bool json = is_json(data, size), zip = size >= 4 && memcmp(data, "PK\003\004", 4) == 0;
    DM_TRY(within_size(size, json, zip, name, err));
    dnnmem_model *m = calloc(1, sizeof *m);
    if (!m)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", name);
    dm_graph_init(&m->g);
    m->g.max_nodes = max_nodes;
    m->g.path = dm_arena_strdup(&m->g.arena, name);
    if (!m->g.path) {
        dnnmem_model_free(m);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", name);
    }
    enum dnnmem_status s;
    if (zip) {
        /* a zip's local file header: a Keras 3 .keras archive, whatever its
         * name; its architecture is config.json */
        s = dm_load_keras_archive(&m->g, data, size, err);
    } else if (json)
        s = load_json(m, data, size, max_nodes, err);
    else
        s = dm_load_onnx(&m->g, data, size, err);
    if (s == DNNMEM_OK && !m->g.capture) /* a capture holds aten ops, not an exporter's */
        s = dm_graph_lift(&m->g, err);
    if (s != DNNMEM_OK) {
        dnnmem_model_free(m);
        return s;
    }
    *out = m;
    return DNNMEM_OK;
}

enum dnnmem_status dnnmem_model_load_buffer_opts(const void *data, size_t size, const char *name,
                                                 const struct dnnmem_load_options *lo,
                                                 dnnmem_model **out, struct dnnmem_error *err)
{
    if (!out || (!data && size))
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_model_load_buffer: NULL argument");
    int64_t max_nodes;
    DM_TRY(load_budget(lo, &max_nodes, err));
    return load_bytes(data, size, name ? name : "<buffer>", max_nodes, out, err);
}

enum dnnmem_status dnnmem_model_load_buffer(const void *data, size_t size, const char *name,
                                            dnnmem_model **out, struct dnnmem_error *err)
{
    return dnnmem_model_load_buffer_opts(data, size, name, NULL, out, err);
}

enum dnnmem_status dnnmem_model_load(const char *path, dnnmem_model **out, struct dnnmem_error *err)
{
    return dnnmem_model_load_opts(path, NULL, out, err);
}

enum dnnmem_status dnnmem_model_load_opts(const char *path, const struct dnnmem_load_options *lo,
                                          dnnmem_model **out, struct dnnmem_error *err)
{
    if (!path || !out)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_model_load: NULL argument");
    *out = NULL;
    int64_t max_nodes;
    DM_TRY(load_budget(lo, &max_nodes, err));
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
        enum dnnmem_status s = dnnmem_model_load_opts(cfg, lo, out, err);
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
    enum dnnmem_status s = load_bytes(map, size, path, max_nodes, out, err);
    munmap(map, size);
    return s;
}

void dnnmem_model_free(dnnmem_model *m)
{
    if (!m)
        return;
    dm_variants_free(m->variants);
    dm_graph_free(&m->g);
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
    cfg->cpu_l2_bytes = -1;
    cfg->n_top_tensors = 3;
    cfg->tf_memory_limit_bytes = -1;
    cfg->tf_min_system_memory_bytes = -1;
    cfg->mxnet_page_size = -1;
    cfg->mxnet_reserve_percent = -1;
    cfg->jax_preallocate = true;
    cfg->jax_donate = true;
    cfg->par.ddp_bucket_bytes = cfg->par.zero_bucket_elems = cfg->par.zero_prefetch_elems = -1;
    cfg->par.zero_persist_elems = cfg->par.nccl_bytes = -1;
    cfg->par.rank = -1;
}

/* The activations a PyTorch graph does not say it runs in place, which
 * --inplace auto ran in place (dm_est.inplace_open), are bounded: the
 * estimate again with --inplace none, and when its peak is higher a warning
 * gives it (docs/inplace.md: over the zoo, auto is 64 rows under by more
 * than 3% and none 11, so neither guess is safe alone). */
static enum dnnmem_status inplace_bound(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                        int open, struct dnnmem_result *r)
{
    struct dnnmem_config c = *cfg;
    c.inplace = DNNMEM_INPLACE_NONE;
    struct dnnmem_result *hi = NULL;
    struct dnnmem_error e2;
    if (dm_estimate_once(m, &c, &hi, &e2) != DNNMEM_OK)
        return DNNMEM_OK; /* no bound to give */
    enum dnnmem_status s = DNNMEM_OK;
    if (hi->peak_allocated > r->peak_allocated) {
        char a[32], b[512];
        snprintf(b, sizeof b,
                 "%d activations the model file does not say run in place: --inplace auto ran "
                 "them in place where PyTorch allows; run out of place (--inplace none) the peak "
                 "is %s (+%.1f%%). An export with torch.onnx.export(..., opset_version=15, "
                 "export_modules_as_functions={nn.ReLU, ...}) decides them (docs/inplace.md)",
                 open, dm_format_bytes(hi->peak_allocated, a),
                 100.0 * (double)(hi->peak_allocated - r->peak_allocated) /
                     (double)(r->peak_allocated ? r->peak_allocated : 1));
        s = dm_result_warn(r, b);
    }
    dnnmem_result_free(hi);
    return s;
}

/* One estimate of one rank, bounded for the in-place guess when `bound`;
 * *other (when not NULL): another rank to estimate when the ranks differ
 * (struct dm_schedule.par_uneven, par_other_rank: FSDP's shards, ZeRO's
 * partitions), else -1. */
static enum dnnmem_status estimate_one(const dnnmem_model *m, const struct dnnmem_config *cfg, bool bound,
                                       struct dnnmem_result **out, int *other, struct dnnmem_error *err)
{
    if (m->g.capture) /* a captured step: replayed as observed (src/estimate/captured.c) */
        return dm_est_captured(&m->g, cfg, out, err);
    struct dm_est_opts o;
    DM_TRY(dm_est_options(&m->g, m->variants != NULL, cfg, &o, err));
    struct dm_graph own;
    dm_graph_init(&own);
    struct dm_est e = {.o = &o};
    dm_arena_init(&e.arena);
    e.as.arena = &e.arena;
    enum dnnmem_status s = dm_est_variant(m->variants, &m->g, &o, &e.g, &own, err);
    if (s == DNNMEM_OK)
        s = dm_est_check(DM_CHECK_GRAPH, e.g, &o, err);
    if (s == DNNMEM_OK) {
        dm_est_run(&e);
        s = dm_est_shapes(&e, err);
    }
    if (s == DNNMEM_OK)
        s = dm_est_runtime(&e, err);
    if (s == DNNMEM_OK)
        s = dm_est_schedule(&e, err);
    if (other)
        *other = !e.sched.par_uneven ? -1
                 : cfg->par.fsdp != DNNMEM_FSDP_NONE ? -2 /* the shard group's last */
                                                     : e.sched.par_other_rank;
    if (s == DNNMEM_OK)
        s = dm_est_replay(&e, out, err);
    if (s == DNNMEM_OK && (s = dm_est_warnings(&e, *out, err)) == DNNMEM_OK && bound &&
        e.inplace_open > 0 && inplace_bound(m, cfg, e.inplace_open, *out) != DNNMEM_OK)
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", m->g.path);
    if (s != DNNMEM_OK && *out) {
        dnnmem_result_free(*out);
        *out = NULL;
    }
    dm_schedule_free(&e.sched);
    free(e.t);
    dm_arena_free(&e.arena);
    dm_graph_free(&own);
    return s;
}

static int par_world(const struct dnnmem_parallel *p)
{
    return p->gpus > 0    ? p->gpus
           : p->nodes > 0 ? p->nodes * (p->gpus_per_node > 0 ? p->gpus_per_node : 1)
           : (p->tp > 1 ? p->tp : 1) * (p->pp > 1 ? p->pp : 1); /* --tp, --pp alone: one group */
}

static void rank_row(struct dnnmem_rank_info *row, const struct dnnmem_result *r, int first, int last)
{
    row->first = first;
    row->last = last;
    row->total_bytes = r->total_bytes;
    row->peak_allocated = r->peak_allocated;
    row->peak_reserved = r->peak_reserved;
    memcpy(row->category_bytes, r->category_bytes, sizeof row->category_bytes);
    row->verdict = r->verdict;
    row->margin_bytes = r->margin_bytes;
}

/* Every distinct rank (docs/parallel.md): DDP's and ZeRO's ranks hold the
 * same bytes (ZeRO pads its partitions to equal sizes); FSDP2's shards are
 * torch.chunk's, full on the first ranks and smaller (or empty) on the last
 * of a shard group, so its first and last shard ranks are estimated: equal,
 * every rank is; else the ranks between hold shards between theirs. The
 * most loaded is the result, with the rows. */
enum dnnmem_status dnnmem_estimate(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                   struct dnnmem_result **out, struct dnnmem_error *err)
{
    return dm_estimate(m, cfg, true, out, err);
}

enum dnnmem_status dm_estimate_once(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                    struct dnnmem_result **out, struct dnnmem_error *err)
{
    return dm_estimate(m, cfg, false, out, err);
}

/* --pp (docs/parallel.md): the stages hold different layers, so each is
 * estimated (the first rank of each; a stage's TP and DP ranks hold the
 * same bytes), one row per run of stages with the same estimate, the most
 * loaded reported; with --rank, that rank's stage only. Global ranks are
 * Megatron's order: TP fastest, then DP, then PP. */
static enum dnnmem_status pp_estimate(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                      bool bound, int world, struct dnnmem_result **out,
                                      struct dnnmem_error *err)
{
    int pp = cfg->par.pp, per_stage = world / pp;
    int lo = cfg->par.rank >= 0 ? cfg->par.rank / per_stage : 0;
    int hi = cfg->par.rank >= 0 ? lo : pp - 1;
    struct dnnmem_config c = *cfg;
    struct dnnmem_result *best = NULL;
    struct dnnmem_rank_info *rows = calloc((size_t)pp, sizeof *rows);
    if (!rows)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    size_t n = 0;
    int best_rank = 0;
    for (int p = lo; p <= hi; p++) {
        struct dnnmem_result *r = NULL;
        c.par.rank = cfg->par.rank >= 0 ? cfg->par.rank : p * per_stage;
        enum dnnmem_status s = estimate_one(m, &c, bound, &r, NULL, err);
        if (s != DNNMEM_OK) {
            dnnmem_result_free(best);
            free(rows);
            return s;
        }
        int first = cfg->par.rank >= 0 ? c.par.rank : p * per_stage;
        int last = cfg->par.rank >= 0 ? c.par.rank : (p + 1) * per_stage - 1;
        if (n > 0 && rows[n - 1].total_bytes == r->total_bytes &&
            rows[n - 1].peak_allocated == r->peak_allocated)
            rows[n - 1].last = last;
        else
            rank_row(&rows[n++], r, first, last);
        if (!best || r->total_bytes > best->total_bytes) {
            dnnmem_result_free(best);
            best = r;
            best_rank = first;
        } else {
            dnnmem_result_free(r);
        }
    }
    struct dnnmem_rank_info *own = dm_arena_array(dm_result_arena(best), n, sizeof *own);
    if (!own) {
        dnnmem_result_free(best);
        free(rows);
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    }
    memcpy(own, rows, n * sizeof *rows);
    free(rows);
    best->ranks = own;
    best->n_ranks = n;
    best->rank = best_rank;
    best->world_size = world;
    best->tensor_parallel = cfg->par.tp > 1 ? cfg->par.tp : 1;
    best->sequence_parallel = cfg->par.tp > 1 && cfg->par.sp;
    int dp = world / pp / (cfg->par.tp > 1 ? cfg->par.tp : 1);
    best->global_batch = (cfg->batch_size > 0 ? cfg->batch_size : 1) * (int64_t)dp *
                         (cfg->grad_accum > 0 ? cfg->grad_accum : 1);
    *out = best;
    return DNNMEM_OK;
}

enum dnnmem_status dm_estimate(const dnnmem_model *m, const struct dnnmem_config *cfg, bool bound,
                               struct dnnmem_result **out, struct dnnmem_error *err)
{
    if (!m || !cfg || !out)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_estimate: NULL argument");
    *out = NULL;
    int world = par_world(&cfg->par);
    bool train = cfg->mode == DNNMEM_MODE_TRAIN;
    if (m->g.capture && (world > 1 || cfg->par.zero || cfg->par.fsdp))
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: a captured step is one process's; --gpus, --zero and --fsdp are "
                       "modelled for ONNX, HuggingFace, Keras and MXNet models", m->g.path);
    if (world <= 1 || !train || m->g.capture) {
        DM_TRY(estimate_one(m, cfg, bound, out, NULL, err));
        (*out)->world_size = 1;
        (*out)->global_batch = train ? (cfg->batch_size > 0 ? cfg->batch_size : 1) *
                                           (cfg->grad_accum > 0 ? cfg->grad_accum : 1) : 0;
        return DNNMEM_OK;
    }
    if (cfg->par.pp > 1)
        return pp_estimate(m, cfg, bound, world, out, err);
    struct dnnmem_config c = *cfg;
    int per_node = cfg->par.gpus_per_node > 0 ? cfg->par.gpus_per_node : world;
    int shard = cfg->par.fsdp == DNNMEM_FSDP_NO_SHARD ? 1
                : cfg->par.fsdp == DNNMEM_FSDP_HYBRID ? per_node
                                                      : world;
    int first = cfg->par.rank >= 0 ? cfg->par.rank : 0;
    struct dnnmem_result *r0 = NULL, *r1 = NULL;
    c.par.rank = first;
    int other = -1;
    DM_TRY(estimate_one(m, &c, bound, &r0, &other, err));
    int last = other == -2 ? shard - 1 : other;
    if (cfg->par.rank >= 0 || last < 0)
        last = first;
    if (last != first) {
        c.par.rank = last;
        enum dnnmem_status s = estimate_one(m, &c, bound, &r1, NULL, err);
        if (s != DNNMEM_OK) {
            dnnmem_result_free(r0);
            return s;
        }
    }
    struct dnnmem_rank_info *rows =
        dm_arena_array(dm_result_arena(r0), 2, sizeof *rows);
    if (!rows) {
        dnnmem_result_free(r0);
        dnnmem_result_free(r1);
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    }
    size_t n = 1;
    if (!r1 || r1->total_bytes == r0->total_bytes) {
        rank_row(&rows[0], r0, first, cfg->par.rank >= 0 ? first : world - 1);
    } else {
        rank_row(&rows[0], r0, first, first);
        rank_row(&rows[1], r1, last, last);
        n = 2;
    }
    struct dnnmem_result *best = r1 && r1->total_bytes > r0->total_bytes ? r1 : r0;
    if (best == r1) { /* the rows live in r0's arena: copy them into r1's */
        struct dnnmem_rank_info *copy = dm_arena_array(dm_result_arena(r1), 2, sizeof *copy);
        if (!copy) {
            dnnmem_result_free(r0);
            dnnmem_result_free(r1);
            return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
        }
        memcpy(copy, rows, n * sizeof *rows);
        rows = copy;
        dnnmem_result_free(r0);
    } else {
        dnnmem_result_free(r1);
    }
    best->ranks = rows;
    best->n_ranks = n;
    best->rank = best == r1 ? last : first;
    best->world_size = world;
    best->tensor_parallel = cfg->par.tp > 1 ? cfg->par.tp : 1;
    best->sequence_parallel = cfg->par.tp > 1 && cfg->par.sp;
    /* the data-parallel replicas: the world over the tensor-parallel group */
    int dp = world / (cfg->par.tp > 1 ? cfg->par.tp : 1); /* pp: pp_estimate */
    best->global_batch = (cfg->batch_size > 0 ? cfg->batch_size : 1) * (int64_t)dp *
                         (cfg->grad_accum > 0 ? cfg->grad_accum : 1);
    *out = best;
    return DNNMEM_OK;
}

struct dnnmem_config *dnnmem_config_new(void)
{
    struct dnnmem_config *cfg = malloc(sizeof *cfg);
    if (cfg)
        dnnmem_config_init(cfg);
    return cfg;
}

void dnnmem_config_free(struct dnnmem_config *cfg) { free(cfg); }

void dnnmem_config_set_timeline(struct dnnmem_config *cfg, bool on) { cfg->timeline = on; }
