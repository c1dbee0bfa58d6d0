/*
 * capture.c: a captured training or inference step (docs/capture-format.md),
 * as dnnmem.torch.capture writes it: the storages the step made, and its
 * steps (one per aten op, in execution order) with the storages each
 * allocated, wrote in place, saved for backward and freed after it.
 *
 * Read with src/util/json.c (an arena reader; jansson's DOM was the cost of
 * a large capture's estimate: docs/speed.md) into a graph whose tensors are
 * the storages and whose nodes are the ops, and a schedule (struct dm_capture) that the estimate
 * replays through the allocator as it stands (src/estimate/captured.c):
 * which storages exist and when they die were observed, not modelled.
 *
 * Every bad input is one error: not JSON or truncated (DNNMEM_E_PARSE), a
 * format version this reader does not know or a dtype it does not model
 * (DNNMEM_E_UNSUPPORTED), a size that is negative, absurd or overflows
 * (DNNMEM_E_SHAPE), events that contradict each other: a storage allocated
 * twice, freed before it exists, read when dead (DNNMEM_E_MODEL).
 */
#include "dnnmem-impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* 1: fixed sizes; 2: sizes may be functions of the dims ("dims", "*_poly") */
#define CAPTURE_VERSION 2
/* The largest storage and the largest dim a capture may state: 2^50 B (a
 * PiB); anything beyond is an edited or broken file, not a model. */
#define CAPTURE_MAX_BYTES (INT64_C(1) << 50)
#define CAPTURE_MAX_ITER 1000000

/* Storage kinds as the file names them, and the category each is counted in. */
static const struct {
    const char *name;
    enum dm_role role;
    enum dnnmem_category cat;
} kinds[] = {
    {"weight", DM_ROLE_WEIGHT, DNNMEM_CAT_WEIGHT},       /* parameters */
    {"buffer", DM_ROLE_WEIGHT, DNNMEM_CAT_WEIGHT},       /* running statistics */
    {"input", DM_ROLE_INPUT, DNNMEM_CAT_INPUT},          /* example inputs */
    {"target", DM_ROLE_INPUT, DNNMEM_CAT_INPUT},         /* the loss's target */
    {"activation", DM_ROLE_ACTIVATION, DNNMEM_CAT_ACTIVATION},
    {"gradient", DM_ROLE_ACTIVATION, DNNMEM_CAT_GRADIENT}, /* a parameter's .grad */
    {"optimizer", DM_ROLE_ACTIVATION, DNNMEM_CAT_OPTIMIZER}, /* optimizer.state */
    {"temporary", DM_ROLE_ACTIVATION, DNNMEM_CAT_TEMPORARY}, /* backward and step temporaries */
};

/* torch dtype names (str(torch.float32) without "torch.") onto dnnmem's. */
static const struct {
    const char *name;
    enum dm_dtype dtype;
} dtypes[] = {
    {"float32", DM_FLOAT},         {"float64", DM_DOUBLE},       {"float16", DM_FLOAT16},
    {"bfloat16", DM_BFLOAT16},     {"int8", DM_INT8},            {"uint8", DM_UINT8},
    {"int16", DM_INT16},           {"uint16", DM_UINT16},        {"int32", DM_INT32},
    {"uint32", DM_UINT32},         {"int64", DM_INT64},          {"uint64", DM_UINT64},
    {"bool", DM_BOOL},             {"complex64", DM_COMPLEX64},  {"complex128", DM_COMPLEX128},
    {"float8_e4m3fn", DM_FLOAT8E4M3FN}, {"float8_e4m3fnuz", DM_FLOAT8E4M3FNUZ},
    {"float8_e5m2", DM_FLOAT8E5M2},     {"float8_e5m2fnuz", DM_FLOAT8E5M2FNUZ},
};

static const struct {
    const char *name;
    enum dm_phase phase;
} phases[] = {
    {"setup", DM_PHASE_SETUP},       {"forward", DM_PHASE_FORWARD},
    {"loss", DM_PHASE_LOSS},         {"backward", DM_PHASE_BACKWARD},
    {"optimizer", DM_PHASE_OPTIMIZER}, {"zero_grad", DM_PHASE_ZERO_GRAD},
};

/* The loader's state: per storage, whether it was allocated and is live. */
struct cap {
    struct dm_graph *g;
    struct dm_capture *c;
    struct dnnmem_error *err;
    const char *path;
    uint8_t *state; /* per storage: 0 never allocated, 1 live, 2 freed */
    size_t cap_ev;
};

bool dm_is_capture(json_t *root)
{
    const char *fmt = json_string_value(json_object_get(root, "format"));
    return fmt && strcmp(fmt, "dnnmem-capture") == 0;
}

bool dm_capture_tagged(const uint8_t *data, size_t size)
{
    /* dnnmem.torch writes "format" first; a short window keeps the look cheap */
    static const char tag[] = "\"dnnmem-capture\"";
    size_t n = size < 256 ? size : 256;
    for (size_t i = 0; i + sizeof tag - 1 <= n; i++)
        if (memcmp(data + i, tag, sizeof tag - 1) == 0)
            return true;
    return false;
}

static enum dnnmem_status nomem(struct cap *k)
{
    return dm_fail(k->err, DNNMEM_E_NOMEM, "%s: out of memory reading the capture", k->path);
}

/* An integer field in [lo, hi]; `what` names it in the message. */
static enum dnnmem_status get_int(struct cap *k, const struct dm_json *v, const char *what, int64_t lo,
                                  int64_t hi, int64_t *out)
{
    if (!dm_json_is(v, DM_JSON_INT))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: %s: expected an integer", k->path, what);
    int64_t x = dm_json_int(v);
    if (x < lo || x > hi)
        return dm_fail(k->err, DNNMEM_E_SHAPE, "%s: %s: %lld is out of range [%lld, %lld]", k->path,
                       what, (long long)x, (long long)lo, (long long)hi);
    *out = (int64_t)x;
    return DNNMEM_OK;
}

/* Whether get_int would take v: the loops over a capture's many ids and dims
 * write the message's `what` only for a value it refuses. */
static bool int_in(const struct dm_json *v, int64_t lo, int64_t hi)
{
    return dm_json_is(v, DM_JSON_INT) && dm_json_int(v) >= lo && dm_json_int(v) <= hi;
}

static const char *get_str(const struct dm_json *o, const char *key)
{
    const char *s = dm_json_str(dm_json_get(o, key));
    return s ? s : NULL;
}

/* "dims": what the sizes are functions of, [{"name", "value", "min"}, ...]. */
static enum dnnmem_status dims(struct cap *k, const struct dm_json *a)
{
    if (!a)
        return DNNMEM_OK;
    if (!dm_json_is(a, DM_JSON_ARRAY) || dm_json_size(a) < 1 || dm_json_size(a) > DM_CAPTURE_DIMS)
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: \"dims\" must be a list of 1 to %d dims",
                       k->path, DM_CAPTURE_DIMS);
    for (size_t d = 0; d < dm_json_size(a); d++) {
        const struct dm_json *o = dm_json_at(a, d);
        const char *name = dm_json_is(o, DM_JSON_OBJECT) ? get_str(o, "name") : NULL;
        if (!name || !*name || strlen(name) > 64)
            return dm_fail(k->err, DNNMEM_E_PARSE, "%s: \"dims\" %zu needs a \"name\"", k->path, d);
        for (size_t e = 0; e < d; e++)
            if (strcmp(k->c->dims[e].name, name) == 0)
                return dm_fail(k->err, DNNMEM_E_PARSE, "%s: dim '%s' appears twice", k->path, name);
        struct dm_capture_dim *cd = &k->c->dims[d];
        char what[96];
        snprintf(what, sizeof what, "dim '%s': \"value\"", name);
        DM_TRY(get_int(k, dm_json_get(o, "value"), what, 1, CAPTURE_MAX_BYTES, &cd->value));
        cd->min = cd->value;
        snprintf(what, sizeof what, "dim '%s': \"min\"", name);
        if (dm_json_get(o, "min"))
            DM_TRY(get_int(k, dm_json_get(o, "min"), what, 1, cd->value, &cd->min));
        if (!(cd->name = dm_arena_strdup(&k->g->arena, name)))
            return nomem(k);
        k->c->n_dims = (int)d + 1;
    }
    /* the dims are the graph's symbols: --dim NAME=V, max-seq-len's dim */
    k->g->symbols = dm_arena_array(&k->g->arena, (size_t)k->c->n_dims, sizeof *k->g->symbols);
    if (!k->g->symbols)
        return nomem(k);
    for (int d = 0; d < k->c->n_dims; d++)
        k->g->symbols[d] = k->c->dims[d].name;
    k->g->n_symbols = k->c->n_dims;
    return DNNMEM_OK;
}

bool dm_poly_eval(const struct dm_poly *p, const int64_t *at, int n_dims, int64_t limit, int64_t *out)
{
    int64_t sum = 0;
    for (int32_t i = 0; i < p->n; i++) {
        int64_t v = p->t[i].coef;
        for (int d = 0; d < n_dims; d++)
            for (int e = 0; e < p->t[i].exp[d]; e++)
                if (!dm_mul_ok(v, at[d], &v))
                    return false;
        if (!dm_add_ok(sum, v, &sum))
            return false;
    }
    *out = sum;
    return sum >= 0 && sum <= limit;
}

/* A size's poly ([[coef, e_0, e_1, ...], ...], one exponent per dim), which
 * must give the captured value at the captured dims. */
static enum dnnmem_status poly(struct cap *k, const struct dm_json *a, const char *what, int64_t captured,
                               struct dm_poly *p)
{
    const struct dm_capture *c = k->c;
    size_t n = dm_json_size(a);
    if (!c->n_dims || !dm_json_is(a, DM_JSON_ARRAY) || n < 1 || n > DM_POLY_TERMS)
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: %s: a function of the dims is a list of 1 to "
                       "%d terms [coefficient, exponents...] of a capture with \"dims\"", k->path,
                       what, DM_POLY_TERMS);
    struct dm_poly_term *t = dm_arena_array(&k->g->arena, n, sizeof *t);
    if (!t)
        return nomem(k);
    for (size_t i = 0; i < n; i++) {
        const struct dm_json *term = dm_json_at(a, i);
        if (!dm_json_is(term, DM_JSON_ARRAY) || dm_json_size(term) != (size_t)c->n_dims + 1)
            return dm_fail(k->err, DNNMEM_E_PARSE, "%s: %s: term %zu must be [coefficient, %d "
                           "exponents]", k->path, what, i, c->n_dims);
        memset(&t[i], 0, sizeof t[i]);
        DM_TRY(get_int(k, dm_json_at(term, 0), what, -CAPTURE_MAX_BYTES, CAPTURE_MAX_BYTES, &t[i].coef));
        for (int d = 0; d < c->n_dims; d++) {
            int64_t e;
            DM_TRY(get_int(k, dm_json_at(term, (size_t)d + 1), what, 0, 3, &e));
            t[i].exp[d] = (uint8_t)e;
        }
    }
    *p = (struct dm_poly){.t = t, .n = (int32_t)n};
    int64_t at[DM_CAPTURE_DIMS], v;
    for (int d = 0; d < c->n_dims; d++)
        at[d] = c->dims[d].value;
    if (!dm_poly_eval(p, at, c->n_dims, CAPTURE_MAX_BYTES, &v) || v != captured)
        return dm_fail(k->err, DNNMEM_E_MODEL, "%s: %s: its function of the dims does not give "
                       "%lld at the captured dims", k->path, what, (long long)captured);
    return DNNMEM_OK;
}

/* A list's per-dim polys ("shape_poly", a conv's "input_poly"): an integer
 * (the dim, constant) or a poly, as many as the list has dims. NULL when
 * the file gives none. */
static enum dnnmem_status dim_polys(struct cap *k, const struct dm_json *a, const char *what, int rank,
                                    const int64_t *captured, const struct dm_poly **out)
{
    *out = NULL;
    if (!a)
        return DNNMEM_OK;
    if (!dm_json_is(a, DM_JSON_ARRAY) || dm_json_size(a) != (size_t)rank)
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: %s must have one entry per dim (%d)", k->path,
                       what, rank);
    struct dm_poly *p = dm_arena_array(&k->g->arena, rank ? (size_t)rank : 1, sizeof *p);
    if (!p)
        return nomem(k);
    for (int d = 0; d < rank; d++) {
        const struct dm_json *e = dm_json_at(a, (size_t)d);
        p[d] = (struct dm_poly){0};
        if (dm_json_is(e, DM_JSON_INT)) {
            if (dm_json_int(e) != captured[d])
                return dm_fail(k->err, DNNMEM_E_MODEL, "%s: %s: dim %d is %lld, not the captured %lld",
                               k->path, what, d, (long long)dm_json_int(e), (long long)captured[d]);
        } else {
            char w[128];
            snprintf(w, sizeof w, "%s: dim %d", what, d);
            DM_TRY(poly(k, e, w, captured[d], &p[d]));
        }
    }
    *out = p;
    return DNNMEM_OK;
}

static enum dnnmem_status header(struct cap *k, const struct dm_json *root)
{
    if (!dm_json_is(root, DM_JSON_OBJECT))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: a capture is a JSON object", k->path);
    const char *fmt = get_str(root, "format");
    if (!fmt || strcmp(fmt, "dnnmem-capture") != 0)
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: \"format\" is not \"dnnmem-capture\"", k->path);
    int64_t v;
    DM_TRY(get_int(k, dm_json_get(root, "version"), "\"version\"", 0, INT32_MAX, &v));
    if (v < 1 || v > CAPTURE_VERSION)
        return dm_fail(k->err, DNNMEM_E_UNSUPPORTED,
                       "%s: capture format version %lld; this dnnmem reads versions 1 to %d "
                       "(capture again with the dnnmem package of this release)",
                       k->path, (long long)v, CAPTURE_VERSION);
    const char *mode = get_str(root, "mode");
    if (!mode || (strcmp(mode, "train") != 0 && strcmp(mode, "infer") != 0))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: \"mode\" must be \"train\" or \"infer\"", k->path);
    k->c->train = strcmp(mode, "train") == 0;
    int64_t it = 1, batch = 0;
    if (dm_json_get(root, "iterations"))
        DM_TRY(get_int(k, dm_json_get(root, "iterations"), "\"iterations\"", 1, CAPTURE_MAX_ITER, &it));
    if (dm_json_get(root, "batch"))
        DM_TRY(get_int(k, dm_json_get(root, "batch"), "\"batch\"", 1, CAPTURE_MAX_BYTES, &batch));
    int64_t accum = 1;
    if (dm_json_get(root, "grad_accum"))
        DM_TRY(get_int(k, dm_json_get(root, "grad_accum"), "\"grad_accum\"", 1, CAPTURE_MAX_ITER, &accum));
    k->c->grad_accum = (int)accum;
    const struct dm_json *sd = dm_json_get(root, "sdpa"); /* {"calls": N, "kernel": "cpu"} */
    if (sd) {
        const char *kern = dm_json_is(sd, DM_JSON_OBJECT) ? get_str(sd, "kernel") : NULL;
        int64_t calls;
        if (!kern || strcmp(kern, "cpu") != 0)
            return dm_fail(k->err, DNNMEM_E_PARSE, "%s: \"sdpa\" must be {\"calls\": N, \"kernel\": "
                           "\"cpu\"}", k->path);
        DM_TRY(get_int(k, dm_json_get(sd, "calls"), "\"sdpa\": \"calls\"", 0, INT32_MAX, &calls));
        k->c->sdpa_cpu = (int32_t)calls;
    }
    const struct dm_json *gs = dm_json_get(root, "grad_scaler"); /* {"assumes": "finite"} */
    if (gs) {
        const char *as = get_str(gs, "assumes");
        if (!as || strcmp(as, "finite") != 0)
            return dm_fail(k->err, DNNMEM_E_UNSUPPORTED, "%s: \"grad_scaler\" must be {\"assumes\": "
                           "\"finite\"} (the one GradScaler step modelled: every optimizer step taken)",
                           k->path);
        k->c->grad_scaler = true;
    }
    const struct dm_json *rnn = dm_json_get(root, "rnn"); /* {"modules": N}: nn.RNNBase modules */
    if (rnn) {
        int64_t n;
        if (!dm_json_is(rnn, DM_JSON_OBJECT))
            return dm_fail(k->err, DNNMEM_E_PARSE, "%s: \"rnn\" must be {\"modules\": N}", k->path);
        DM_TRY(get_int(k, dm_json_get(rnn, "modules"), "\"rnn\": \"modules\"", 0, INT32_MAX, &n));
        k->c->rnn_modules = (int32_t)n;
    }
    k->c->iterations = (int)it;
    k->c->batch = batch;
    const char *s;
    struct dm_arena *a = &k->g->arena;
    if ((s = get_str(root, "producer")) && !(k->g->producer = dm_arena_strdup(a, s)))
        return nomem(k);
    if ((s = get_str(root, "torch")) && !(k->c->torch = dm_arena_strdup(a, s)))
        return nomem(k);
    if ((s = get_str(root, "optimizer")) && !(k->c->optimizer = dm_arena_strdup(a, s)))
        return nomem(k);
    if ((s = get_str(root, "model")) && !(k->c->model = dm_arena_strdup(a, s)))
        return nomem(k);
    return dims(k, dm_json_get(root, "dims"));
}

static enum dnnmem_status shape(struct cap *k, const struct dm_json *arr, int32_t id, struct dm_tensor *t)
{
    if (!arr) {
        t->rank = -1;
        return DNNMEM_OK;
    }
    size_t n = dm_json_size(arr);
    if (!dm_json_is(arr, DM_JSON_ARRAY) || n > DM_MAX_DIMS)
        return dm_fail(k->err, DNNMEM_E_SHAPE, "storage %d of %s: \"shape\" must be an array of at "
                       "most %d dims", (int)id, k->path, DM_MAX_DIMS);
    t->rank = (int)n;
    t->dims = dm_arena_array(&k->g->arena, n ? n : 1, sizeof *t->dims);
    if (!t->dims)
        return nomem(k);
    int64_t numel = 1;
    for (size_t d = 0; d < n; d++) {
        t->dims[d].value = dm_json_int(dm_json_at(arr, d));
        if (!int_in(dm_json_at(arr, d), 0, CAPTURE_MAX_BYTES)) {
            char what[64];
            snprintf(what, sizeof what, "storage %d: dim %zu", (int)id, d);
            DM_TRY(get_int(k, dm_json_at(arr, d), what, 0, CAPTURE_MAX_BYTES, &t->dims[d].value));
        }
        t->dims[d].sym = -1;
        if (!dm_mul_ok(numel, t->dims[d].value, &numel) || numel > CAPTURE_MAX_BYTES)
            return dm_fail(k->err, DNNMEM_E_SHAPE, "%s: storage %d: shape has too many elements",
                           k->path, (int)id);
    }
    return DNNMEM_OK;
}

static enum dnnmem_status storage(struct cap *k, const struct dm_json *o, int32_t id)
{
    if (!dm_json_is(o, DM_JSON_OBJECT))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: storage %d is not an object", k->path, (int)id);
    const char *name = get_str(o, "name"), *kind = get_str(o, "kind"), *dt = get_str(o, "dtype");
    if (!name || !*name || !kind || !dt)
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: storage %d: needs \"name\", \"kind\" and \"dtype\"",
                       k->path, (int)id);
    size_t ki = 0;
    while (ki < sizeof kinds / sizeof kinds[0] && strcmp(kinds[ki].name, kind) != 0)
        ki++;
    if (ki == sizeof kinds / sizeof kinds[0])
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: storage '%s': unknown kind '%s'", k->path, name, kind);
    size_t di = 0;
    while (di < sizeof dtypes / sizeof dtypes[0] && strcmp(dtypes[di].name, dt) != 0)
        di++;
    if (di == sizeof dtypes / sizeof dtypes[0])
        return dm_fail(k->err, DNNMEM_E_UNSUPPORTED, "%s: storage '%s': dtype '%s' is not modelled",
                       k->path, name, dt);
    if (dm_graph_find(k->g, name) >= 0)
        return dm_fail(k->err, DNNMEM_E_MODEL, "%s: storage name '%s' appears twice", k->path, name);
    int64_t bytes = dm_json_int(dm_json_get(o, "bytes"));
    char what[64];
    if (!int_in(dm_json_get(o, "bytes"), 0, CAPTURE_MAX_BYTES)) {
        snprintf(what, sizeof what, "storage %d: \"bytes\"", (int)id);
        DM_TRY(get_int(k, dm_json_get(o, "bytes"), what, 0, CAPTURE_MAX_BYTES, &bytes));
    }
    const char *dev = get_str(o, "device");
    if (dev && strcmp(dev, "model") != 0 && strcmp(dev, "host") != 0)
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: storage '%s': \"device\" must be \"model\" or "
                       "\"host\"", k->path, name);
    int32_t ti = dm_graph_add_tensor(k->g, name);
    if (ti < 0)
        return nomem(k);
    if (ti != id)
        return dm_fail(k->err, DNNMEM_E_INTERNAL, "%s: storage %d became tensor %d", k->path, (int)id,
                       (int)ti);
    struct dm_tensor *t = &k->g->tensors[ti];
    t->dtype = dtypes[di].dtype;
    t->role = kinds[ki].role;
    t->producer = -1;
    DM_TRY(shape(k, dm_json_get(o, "shape"), id, t));
    k->c->buf[id] = (struct dm_buffer){.bytes = (uint64_t)bytes, .tensor = ti, .node = -1,
                                       .category = (uint8_t)kinds[ki].cat,
                                       .dtype = (uint8_t)t->dtype};
    k->c->host[id] = dev && strcmp(dev, "host") == 0;
    const struct dm_json *bp = dm_json_get(o, "bytes_poly"), *sp = dm_json_get(o, "shape_poly");
    if ((bp || sp) && !k->c->n_dims) /* the polynomials are allocated with the header's dims */
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: storage '%s': \"%s\" is a function of the "
                       "dims, and the capture declares no \"dims\"", k->path, name,
                       bp ? "bytes_poly" : "shape_poly");
    if (bp) {
        snprintf(what, sizeof what, "storage %d: \"bytes_poly\"", (int)id);
        DM_TRY(poly(k, bp, what, bytes, &k->c->bytes_poly[id]));
    }
    if (sp) {
        int64_t dims[DM_MAX_DIMS];
        for (int d = 0; d < t->rank; d++)
            dims[d] = t->dims[d].value;
        snprintf(what, sizeof what, "storage %d: \"shape_poly\"", (int)id);
        DM_TRY(dim_polys(k, sp, what, t->rank < 0 ? 0 : t->rank, dims,
                         &k->c->shape_poly[id]));
    }
    return DNNMEM_OK;
}

static enum dnnmem_status add_event(struct cap *k, enum dm_ev_kind kind, int32_t buf, int32_t step)
{
    struct dm_capture *c = k->c;
    if (!dm_grow((void **)&c->ev, sizeof *c->ev, c->n_ev, &k->cap_ev))
        return nomem(k);
    c->ev[c->n_ev++] = (struct dm_event){.kind = (uint8_t)kind, .buf = buf, .step = step};
    return DNNMEM_OK;
}

/* The storage ids of list `key` of step s; each must exist and, unless
 * `alloc`, be live. */
typedef enum dnnmem_status (*id_fn)(struct cap *k, int32_t id, int32_t step);

static enum dnnmem_status each_id(struct cap *k, const struct dm_json *step, const char *key, int32_t s,
                                  id_fn fn)
{
    const struct dm_json *arr = dm_json_get(step, key);
    if (!arr)
        return DNNMEM_OK;
    if (!dm_json_is(arr, DM_JSON_ARRAY))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: \"%s\" must be an array", k->path, (int)s, key);
    for (size_t i = 0; i < dm_json_size(arr); i++) {
        int64_t id = dm_json_int(dm_json_at(arr, i));
        if (!int_in(dm_json_at(arr, i), 0, k->g->n_tensors - 1)) {
            char what[64];
            snprintf(what, sizeof what, "step %d: \"%s\"", (int)s, key);
            DM_TRY(get_int(k, dm_json_at(arr, i), what, 0, k->g->n_tensors - 1, &id));
        }
        DM_TRY(fn(k, (int32_t)id, s));
    }
    return DNNMEM_OK;
}

static enum dnnmem_status live_check(struct cap *k, int32_t id, int32_t step, const char *use)
{
    if (k->state[id] == 1)
        return DNNMEM_OK;
    return dm_fail(k->err, DNNMEM_E_MODEL, "%s: step %d %s storage '%s', which %s", k->path, (int)step,
                   use, k->g->tensors[id].name, k->state[id] ? "was freed" : "was never allocated");
}

static enum dnnmem_status on_alloc(struct cap *k, int32_t id, int32_t step)
{
    if (k->state[id])
        return dm_fail(k->err, DNNMEM_E_MODEL, "%s: step %d allocates storage '%s' a second time",
                       k->path, (int)step, k->g->tensors[id].name);
    k->state[id] = 1;
    const struct dm_step *sp = &k->c->steps[step];
    k->c->buf[id].node = sp->node;
    if (sp->node >= 0 && k->g->tensors[id].role == DM_ROLE_ACTIVATION)
        k->g->tensors[id].producer = sp->node;
    return add_event(k, DM_EV_ALLOC, id, step);
}
static enum dnnmem_status on_free(struct cap *k, int32_t id, int32_t step)
{
    DM_TRY(live_check(k, id, step, "frees"));
    k->state[id] = 2;
    return add_event(k, DM_EV_FREE, id, step);
}
static enum dnnmem_status on_read(struct cap *k, int32_t id, int32_t step)
{
    return live_check(k, id, step, "reads");
}
static enum dnnmem_status on_write(struct cap *k, int32_t id, int32_t step)
{
    return live_check(k, id, step, "writes");
}
/* autograd saved it: an activation kept for backward is counted as saved */
static enum dnnmem_status on_save(struct cap *k, int32_t id, int32_t step)
{
    DM_TRY(live_check(k, id, step, "saves"));
    if (k->c->buf[id].category == DNNMEM_CAT_ACTIVATION)
        k->c->buf[id].category = DNNMEM_CAT_SAVED;
    return DNNMEM_OK;
}

/* A size list of the conv ("input", "weight", "output") as a tensor of
 * `dtype`: its rank (0 when absent), dims, numel and bytes, checked. */
static enum dnnmem_status conv_dims(struct cap *k, const struct dm_json *o, const char *key, int32_t s,
                                    enum dm_dtype dtype, struct dm_tinfo *t)
{
    const struct dm_json *a = dm_json_get(o, key);
    *t = (struct dm_tinfo){.dtype = dtype};
    if (!a)
        return DNNMEM_OK;
    if (!dm_json_is(a, DM_JSON_ARRAY) || dm_json_size(a) > DM_MAX_DIMS)
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: \"conv\": \"%s\" must be a list of "
                       "dims", k->path, (int)s, key);
    int64_t n = 1;
    char what[64];
    snprintf(what, sizeof what, "step %d: \"conv\": \"%s\"", (int)s, key);
    for (size_t d = 0; d < dm_json_size(a); d++) {
        int64_t v;
        DM_TRY(get_int(k, dm_json_at(a, d), what, 0, CAPTURE_MAX_BYTES, &v));
        t->dims[d] = v;
        if (!dm_mul_ok(n, v, &n) || n > CAPTURE_MAX_BYTES)
            return dm_fail(k->err, DNNMEM_E_SHAPE, "%s: %s has too many elements", k->path, what);
    }
    t->rank = (int)dm_json_size(a);
    t->numel = n;
    if (dtype != DM_UNDEFINED && !dm_dtype_bytes(dtype, n, &t->bytes))
        return dm_fail(k->err, DNNMEM_E_SHAPE, "%s: %s has too many bytes", k->path, what);
    return DNNMEM_OK;
}

/* A boolean of the conv's facts that dnnmem.torch always writes. */
static enum dnnmem_status conv_flag(struct cap *k, const struct dm_json *cv, const char *key, int32_t s,
                                    bool *v)
{
    const struct dm_json *b = dm_json_get(cv, key);
    if (!dm_json_is_bool(b))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: \"conv\" needs \"%s\" (true or false; "
                       "a capture by dnnmem.torch before 0.1.1 lacks it: capture again)", k->path,
                       (int)s, key);
    *v = dm_json_is(b, DM_JSON_TRUE);
    return DNNMEM_OK;
}

/* A convolution step's "conv": what the CPU's kernel choice reads
 * (src/schedule/cpuconv.c, through src/estimate/captured.c). */
static enum dnnmem_status conv_facts(struct cap *k, const struct dm_json *o, int32_t s, const char *op)
{
    const struct dm_json *cv = dm_json_get(o, "conv");
    if (!cv)
        return DNNMEM_OK;
    if (!dm_json_is(cv, DM_JSON_OBJECT))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: \"conv\" must be an object", k->path, (int)s);
    struct dm_capture_conv *c = dm_arena_alloc(&k->g->arena, sizeof *c);
    if (!c)
        return nomem(k);
    memset(c, 0, sizeof *c);
    /* the kernels' rules are float32's and float64's, and bfloat16's where
     * it runs on THNN (the CPU's autocast on AVX2: cpuconv.c, bf16_slow);
     * another dtype goes to no rule (its bytes unneeded) */
    const char *dt = get_str(cv, "dtype");
    enum dm_dtype dtype = dt && strcmp(dt, "float32") == 0    ? DM_FLOAT
                          : dt && strcmp(dt, "float64") == 0  ? DM_DOUBLE
                          : dt && strcmp(dt, "bfloat16") == 0 ? DM_BFLOAT16
                                                              : DM_UNDEFINED;
    c->cv.x.dtype = dtype;
    DM_TRY(conv_dims(k, cv, "input", s, dtype, &c->cv.x));
    DM_TRY(conv_dims(k, cv, "weight", s, dtype, &c->cv.w));
    DM_TRY(conv_dims(k, cv, "output", s, dtype, &c->cv.y));
    static const char *const polys[3] = {"input_poly", "weight_poly", "output_poly"};
    const struct dm_tinfo *ts[3] = {&c->cv.x, &c->cv.w, &c->cv.y};
    for (int l = 0; l < 3; l++) {
        char what[64];
        snprintf(what, sizeof what, "step %d: \"conv\": \"%s\"", (int)s, polys[l]);
        DM_TRY(dim_polys(k, dm_json_get(cv, polys[l]), what, ts[l]->rank, ts[l]->dims, &c->poly[l]));
    }
    c->backward = op && strncmp(op, "aten.convolution_backward", 25) == 0;
    c->cv.transposed = dm_json_is(dm_json_get(cv, "transposed"), DM_JSON_TRUE) || dtype == DM_UNDEFINED ||
                       c->cv.x.rank == 0 || c->cv.w.rank == 0;
    /* stride, dilation and (newer captures) padding per spatial dim:
     * the geometry (geom) when all three have one entry per spatial dim */
    const char *lists[] = {"stride", "dilation", "padding"};
    int64_t *geo[3] = {c->cv.stride, c->cv.dilation, c->cv.pad}, sp = c->cv.x.rank - 2;
    bool geom = sp >= 1 && sp <= 3;
    for (int l = 0; l < 3; l++) {
        const struct dm_json *a = dm_json_get(cv, lists[l]);
        geom &= dm_json_is(a, DM_JSON_ARRAY) && (int64_t)dm_json_size(a) == sp;
        for (size_t d = 0; dm_json_is(a, DM_JSON_ARRAY) && d < dm_json_size(a); d++) {
            int64_t v;
            char what[64];
            snprintf(what, sizeof what, "step %d: \"conv\": \"%s\"", (int)s, lists[l]);
            DM_TRY(get_int(k, dm_json_at(a, d), what, 0, CAPTURE_MAX_BYTES, &v));
            if (l < 2 && v != 1)
                *(l ? &c->cv.dilated : &c->cv.strided) = true;
            geom &= l == 2 || v >= 1;
            if (d < 3)
                geo[l][d] = v;
        }
    }
    c->cv.geom = geom;
    int64_t groups = 1;
    if (dm_json_get(cv, "groups")) {
        char what[64];
        snprintf(what, sizeof what, "step %d: \"conv\": \"groups\"", (int)s);
        DM_TRY(get_int(k, dm_json_get(cv, "groups"), what, 1, CAPTURE_MAX_BYTES, &groups));
    }
    c->cv.groups = groups;
    DM_TRY(conv_flag(k, cv, "channels_last", s, &c->cv.chlast));
    DM_TRY(conv_flag(k, cv, "weight_channels_last", s, &c->cv.w_chlast));
    /* the grad_output a channels-last backward copies when its strides are
     * not so. The input's copy in forward is not taken from the capture: the
     * meta kernels give a conv's output contiguous strides where the CPU's
     * give channels-last ones (a channels-last model's second conv reads a
     * channels-last input on the CPU, a contiguous one on meta) */
    bool gy_cl = true;
    if (c->backward)
        DM_TRY(conv_flag(k, cv, "grad_output_channels_last", s, &gy_cl));
    if (c->cv.chlast && c->backward && !gy_cl)
        c->cv.cl_copy = c->cv.y.bytes;
    DM_TRY(conv_flag(k, cv, "bias", s, &c->cv.bias));
    if (c->backward) {
        const struct dm_json *m = dm_json_get(cv, "output_mask");
        if (!dm_json_is(m, DM_JSON_ARRAY) || dm_json_size(m) != 3)
            return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: \"conv\" of a convolution_backward "
                           "needs \"output_mask\", 3 booleans (a capture by dnnmem.torch before "
                           "0.1.1 lacks it: capture again)", k->path, (int)s);
        for (int d = 0; d < 3; d++) {
            if (!dm_json_is_bool(dm_json_at(m, (size_t)d)))
                return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: \"conv\": \"output_mask\" "
                               "must be 3 booleans", k->path, (int)s);
            c->output_mask[d] = dm_json_is(dm_json_at(m, (size_t)d), DM_JSON_TRUE);
        }
    }
    k->c->conv[s] = c;
    return DNNMEM_OK;
}

static enum dnnmem_status one_step(struct cap *k, const struct dm_json *o, int32_t s, int32_t *node)
{
    if (!dm_json_is(o, DM_JSON_OBJECT))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d is not an object", k->path, (int)s);
    const char *ph = get_str(o, "phase");
    size_t pi = 0;
    while (ph && pi < sizeof phases / sizeof phases[0] && strcmp(phases[pi].name, ph) != 0)
        pi++;
    if (!ph || pi == sizeof phases / sizeof phases[0])
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: \"phase\" must be setup, forward, loss, "
                       "backward, optimizer or zero_grad", k->path, (int)s);
    int64_t it = 1;
    char what[64];
    const struct dm_json *itv = dm_json_get(o, "iteration");
    if (int_in(itv, 1, k->c->iterations))
        it = dm_json_int(itv);
    else if (itv) {
        snprintf(what, sizeof what, "step %d: \"iteration\"", (int)s);
        DM_TRY(get_int(k, itv, what, 1, k->c->iterations, &it));
    }
    const char *op = get_str(o, "op"), *mod = get_str(o, "module");
    struct dm_step *sp = &k->c->steps[s];
    *sp = (struct dm_step){.phase = (uint8_t)phases[pi].phase, .iteration = (int16_t)it, .node = -1};
    if (it > INT16_MAX)
        return dm_fail(k->err, DNNMEM_E_SHAPE, "%s: step %d: iteration %lld is too large", k->path,
                       (int)s, (long long)it);
    if (op) {
        struct dm_node *n = &k->g->nodes[*node];
        n->op = DM_OP_Identity; /* never inferred: the capture holds the sizes */
        n->domain = "";
        /* "layer1.0.conv1/convolution#57": the module, the op without its
         * namespace and overload, the step */
        const char *base = strncmp(op, "aten.", 5) == 0 ? op + 5 : op;
        int len = (int)(strchr(base, '.') ? (size_t)(strchr(base, '.') - base) : strlen(base));
        n->name = dm_arena_printf(&k->g->arena, "%s%s%.*s#%d", mod && *mod ? mod : "",
                                  mod && *mod ? "/" : "", len, base, (int)s);
        k->g->op_names[*node] = dm_arena_strdup(&k->g->arena, op);
        if (!n->name || !k->g->op_names[*node])
            return nomem(k);
        sp->node = (*node)++;
    }
    k->c->accum_old[s] = -1;
    const struct dm_json *acc = dm_json_get(o, "accumulate");
    if (acc && !dm_json_is_bool(acc))
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: \"accumulate\" must be true or false",
                       k->path, (int)s);
    if (dm_json_is(acc, DM_JSON_TRUE)) {
        const struct dm_json *in = dm_json_get(o, "in");
        int64_t first;
        if (!op || !dm_json_is(in, DM_JSON_ARRAY) || dm_json_size(in) < 1)
            return dm_fail(k->err, DNNMEM_E_PARSE, "%s: step %d: an \"accumulate\" step is an op "
                           "with its inputs", k->path, (int)s);
        snprintf(what, sizeof what, "step %d: \"in\"", (int)s);
        DM_TRY(get_int(k, dm_json_at(in, 0), what, 0, k->g->n_tensors - 1, &first));
        k->c->accum_old[s] = (int32_t)first;
    }
    DM_TRY(conv_facts(k, o, s, op));
    /* alloc first: a storage made just before the op (torch.tensor's, below
     * the dispatch) is allocated at the step that first reads it */
    DM_TRY(each_id(k, o, "alloc", s, on_alloc));
    DM_TRY(each_id(k, o, "in", s, on_read));
    DM_TRY(each_id(k, o, "out", s, on_read));
    DM_TRY(each_id(k, o, "write", s, on_write));
    DM_TRY(each_id(k, o, "save", s, on_save));
    return each_id(k, o, "free", s, on_free);
}

static enum dnnmem_status body(struct cap *k, const struct dm_json *root)
{
    DM_TRY(header(k, root));
    const struct dm_json *st = dm_json_get(root, "storages"), *steps = dm_json_get(root, "steps");
    if (!dm_json_is(st, DM_JSON_ARRAY) || !dm_json_is(steps, DM_JSON_ARRAY) || dm_json_size(steps) == 0)
        return dm_fail(k->err, DNNMEM_E_PARSE, "%s: a capture needs \"storages\" and \"steps\" arrays",
                       k->path);
    size_t ns = dm_json_size(st), nt = dm_json_size(steps);
    if (ns > INT32_MAX / 2 || nt > INT32_MAX / 2)
        return dm_fail(k->err, DNNMEM_E_SHAPE, "%s: too many storages or steps", k->path);
    struct dm_capture *c = k->c;
    struct dm_arena *a = &k->g->arena;
    c->buf = dm_arena_array(a, ns ? ns : 1, sizeof *c->buf);
    c->host = dm_arena_array(a, ns ? ns : 1, sizeof *c->host);
    c->steps = dm_arena_array(a, nt, sizeof *c->steps);
    c->accum_old = dm_arena_array(a, nt, sizeof *c->accum_old);
    c->conv = dm_arena_array(a, nt, sizeof *c->conv);
    if (c->n_dims) {
        c->bytes_poly = dm_arena_array(a, ns ? ns : 1, sizeof *c->bytes_poly);
        c->shape_poly = dm_arena_array(a, ns ? ns : 1, sizeof *c->shape_poly);
        if (!c->bytes_poly || !c->shape_poly)
            return nomem(k);
        memset(c->bytes_poly, 0, (ns ? ns : 1) * sizeof *c->bytes_poly);
        memset(c->shape_poly, 0, (ns ? ns : 1) * sizeof *c->shape_poly);
    }
    k->state = calloc(ns ? ns : 1, 1);
    if (!c->buf || !c->host || !c->steps || !c->accum_old || !c->conv || !k->state)
        return nomem(k);
    c->n_buf = (int32_t)ns;
    c->n_steps = (int32_t)nt;
    for (size_t i = 0; i < ns; i++)
        DM_TRY(storage(k, dm_json_at(st, i), (int32_t)i));
    int32_t n_ops = 0;
    for (size_t i = 0; i < nt; i++)
        n_ops += get_str(dm_json_at(steps, i), "op") != NULL;
    k->g->nodes = dm_arena_array(a, n_ops ? (size_t)n_ops : 1, sizeof *k->g->nodes);
    k->g->op_names = dm_arena_array(a, n_ops ? (size_t)n_ops : 1, sizeof *k->g->op_names);
    if (!k->g->nodes || !k->g->op_names)
        return nomem(k);
    int32_t node = 0;
    for (size_t i = 0; i < nt; i++)
        DM_TRY(one_step(k, dm_json_at(steps, i), (int32_t)i, &node));
    k->g->n_nodes = node;
    for (int32_t i = 0; i < c->n_buf; i++)
        if (!k->state[i])
            return dm_fail(k->err, DNNMEM_E_MODEL, "%s: storage '%s' is never allocated", k->path,
                           k->g->tensors[i].name);
    return DNNMEM_OK;
}

enum dnnmem_status dm_load_capture(struct dm_graph *g, const struct dm_json *root,
                                   struct dnnmem_error *err)
{
    struct cap k = {.g = g, .err = err, .path = g->path};
    g->format = "dnnmem-capture";
    k.c = dm_arena_alloc(&g->arena, sizeof *k.c);
    enum dnnmem_status s = k.c ? DNNMEM_OK : nomem(&k);
    if (s == DNNMEM_OK) {
        g->capture = k.c;
        s = body(&k, root);
    }
    /* the events move into the graph's arena, which owns all of the capture */
    struct dm_event *ev = k.c ? k.c->ev : NULL;
    if (s == DNNMEM_OK) {
        k.c->ev = dm_arena_array(&g->arena, k.c->n_ev ? k.c->n_ev : 1, sizeof *ev);
        if (!k.c->ev)
            s = nomem(&k);
        else if (k.c->n_ev)
            memcpy(k.c->ev, ev, k.c->n_ev * sizeof *ev);
    } else if (k.c)
        k.c->ev = NULL;
    free(ev);
    free(k.state);
    return s;
}
