/*
 * builder.c (src/load/hf/): what every family builds with: config fields, node names and
 * module scopes, nodes, attributes, constants, parameters, shape ops, norms, the rotary
 * embedding, the KV cache, graph inputs and outputs.
 */
#include "hf.h"

enum dnnmem_status hf_fail(struct hf *h, enum dnnmem_status s, const char *fmt, ...)
{
    if (h->st == DNNMEM_OK) {
        char buf[448];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        h->st = dm_fail(h->err, s, "%s: %s", h->path, buf);
    }
    return h->st;
}

enum dnnmem_status hf_refuse(struct hf *h, enum dm_refusal_kind kind, const char *name,
                             const char *why)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return h->st;
    const char *n = name ? dm_arena_strdup(&g->arena, name) : NULL;
    const char *w = why ? dm_arena_strdup(&g->arena, why) : NULL;
    if ((name && !n) || (why && !w))
        return hf_fail(h, DNNMEM_E_NOMEM, "out of memory");
    g->refusal = (struct dm_refusal){.kind = kind, .name = n, .why = w};
    h->refused = true;
    h->st = DNNMEM_E_INTERNAL; /* stops the build; not an error (see load, hf.c) */
    return h->st;
}

int32_t hf_oom(struct hf *h)
{
    hf_fail(h, DNNMEM_E_NOMEM, "out of memory");
    return -1;
}

/* ---- config fields ------------------------------------------------------------ */

json_t *hf_field(struct hf *h, const char *key)
{
    json_t *v = json_object_get(h->root, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* A positive integer field; `dflt` when absent or null (REQUIRED: an error). */
int64_t hf_get_int(struct hf *h, const char *key, int64_t dflt, int64_t max)
{
    json_t *v = hf_field(h, key);
    if (h->st != DNNMEM_OK)
        return 1;
    if (!v) {
        if (dflt == REQUIRED) {
            hf_fail(h, DNNMEM_E_MODEL, "config field '%s' is missing", key);
            return 1;
        }
        return dflt;
    }
    int64_t i;
    if (json_is_integer(v)) {
        i = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        i = (int64_t)json_real_value(v);
    } else {
        hf_fail(h, DNNMEM_E_MODEL, "config field '%s' must be an integer", key);
        return 1;
    }
    if (i < 1) {
        hf_fail(h, DNNMEM_E_MODEL, "config field '%s' must be positive, not %lld", key,
                (long long)i);
        return 1;
    }
    if (i > max) {
        hf_fail(h, DNNMEM_E_UNSUPPORTED, "config field '%s' is %lld; at most %lld is supported",
                key,
                (long long)i, (long long)max);
        return 1;
    }
    return i;
}

/* A number in [lo, hi]; `dflt` when absent or null. */
double hf_get_num(struct hf *h, const char *key, double dflt, double lo, double hi)
{
    json_t *v = hf_field(h, key);
    if (h->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_number(v)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field '%s' must be a number", key);
        return dflt;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field '%s' is %g; it must be in [%g, %g]", key, d, lo,
                hi);
        return dflt;
    }
    return d;
}

bool hf_get_bool(struct hf *h, const char *key, bool dflt)
{
    json_t *v = hf_field(h, key);
    if (h->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_boolean(v)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field '%s' must be true or false", key);
        return dflt;
    }
    return json_is_true(v);
}

const char *hf_get_str(struct hf *h, const char *key, const char *dflt)
{
    json_t *v = hf_field(h, key);
    if (h->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_string(v)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field '%s' must be a string", key);
        return dflt;
    }
    return json_string_value(v);
}

/* ---- building the graph ----------------------------------------------------------- */

/* Node names. Every node of the front end is named "<scope>/<Op>", the
 * second and later of an op in one module path "<scope>/<Op>_1", "_2", ...
 * (as torch.onnx names them). No op's name ends in "_<digits>" nor holds a
 * '/', so names are unique when each path counts the nodes of each op name
 * (two ops may share a name: Attention and com.microsoft's): a path's
 * counts are found once per hf_enter, not once per node. */
struct op_count {
    const char *op;        /* dm_ops[].name */
    int n;                 /* its nodes in the path so far */
    struct op_count *next;
};

struct scope_names {
    const char *path;      /* the module path (names_arena) */
    uint32_t hash;         /* dm_hash_str(path) */
    struct op_count *ops;
};

/* The counts of the current module path, made when new; NULL when out of
 * memory. */
static struct scope_names *scope_names(struct hf *h)
{
    if (h->scope_at[h->scope_len])
        return h->scope_at[h->scope_len];
    if ((h->n_scopes + 1) * 2 > h->scopes_cap) {
        uint32_t cap = h->scopes_cap ? h->scopes_cap * 2 : 1024;
        struct scope_names **n = calloc(cap, sizeof *n);
        if (!n)
            return NULL;
        for (uint32_t i = 0; i < h->scopes_cap; i++)
            if (h->scopes[i]) {
                uint32_t j = h->scopes[i]->hash & (cap - 1);
                while (n[j])
                    j = (j + 1) & (cap - 1);
                n[j] = h->scopes[i];
            }
        free(h->scopes);
        h->scopes = n;
        h->scopes_cap = cap;
    }
    uint32_t hash = dm_hash_end(h->scope_fnv[h->scope_len]), j = hash & (h->scopes_cap - 1);
    for (; h->scopes[j]; j = (j + 1) & (h->scopes_cap - 1))
        if (h->scopes[j]->hash == hash && strcmp(h->scopes[j]->path, h->scope) == 0)
            return h->scope_at[h->scope_len] = h->scopes[j];
    struct scope_names *s = dm_arena_alloc(&h->names_arena, sizeof *s);
    const char *path = dm_arena_strndup(&h->names_arena, h->scope, h->scope_len);
    if (!s || !path)
        return NULL;
    *s = (struct scope_names){path, hash, NULL};
    h->scopes[j] = s;
    h->n_scopes++;
    return h->scope_at[h->scope_len] = s;
}

/* scope_fnv[] brought up to scope_len from scope_fnv[from] */
static void scope_hash(struct hf *h, size_t from)
{
    for (size_t i = from; i < h->scope_len; i++)
        h->scope_fnv[i + 1] = dm_hash_bytes(h->scope_fnv[i], h->scope + i, 1);
}

size_t hf_enter(struct hf *h, const char *fmt, ...)
{
    size_t len = h->scope_len, cap = sizeof h->scope, n;
    va_list ap;
    va_start(ap, fmt);
    /* a plain name (or "%s" of one) is copied, the rest printed */
    const char *plain = strcmp(fmt, "%s") == 0 ? va_arg(ap, const char *)
                        : strchr(fmt, '%')     ? NULL
                                               : fmt;
    if (plain) {
        n = strlen(plain);
        if (len + 1 + n < cap) {
            h->scope[len] = '/';
            memcpy(h->scope + len + 1, plain, n + 1);
        }
    } else {
        int k = snprintf(h->scope + len, cap - len, "/");
        int m = vsnprintf(h->scope + len + 1, cap - len - 1, fmt, ap);
        n = k < 0 || m < 0 ? cap : (size_t)m;
    }
    va_end(ap);
    if (len + 1 + n >= cap) {
        hf_fail(h, DNNMEM_E_INTERNAL, "module path too long");
        h->scope[len] = '\0';
        return len;
    }
    h->scope_len = len + 1 + n;
    scope_hash(h, len);
    h->scope_at[h->scope_len] = NULL;
    return len;
}

void hf_leave(struct hf *h, size_t len)
{
    h->scope_len = len;
    h->scope[len] = '\0';
}

/* a (na bytes), sep, b (nb bytes) and k in decimal when k >= 0, in the
 * arena: the node and tensor names as "%s%s%s%d" prints them, without the
 * format's parsing (naming is much of a large model's build time). *fnv
 * (when not NULL): the FNV-1a state of a on entry, of the name on return.
 * NULL when out of memory. */
static char *name_cat(struct dm_arena *ar, const char *a, size_t na, const char *sep,
                      const char *b, size_t nb, int k, uint32_t *fnv)
{
    char digits[12];
    size_t nk = 0, ns = strlen(sep);
    for (unsigned u = (unsigned)k; k >= 0 && (nk == 0 || u); u /= 10)
        digits[sizeof digits - ++nk] = (char)('0' + u % 10);
    char *d = dm_arena_alloc(ar, na + ns + nb + nk + 1);
    if (d) {
        memcpy(d, a, na);
        memcpy(d + na, sep, ns);
        memcpy(d + na + ns, b, nb);
        memcpy(d + na + ns + nb, digits + sizeof digits - nk, nk);
        d[na + ns + nb + nk] = '\0';
        if (fnv)
            *fnv = dm_hash_bytes(*fnv, d + na, ns + nb + nk);
    }
    return d;
}

/* The name of a new node of op `op` in the current scope: "<scope>/<Op>",
 * else "<scope>/<Op>_<k>" for the op's k-th node there; its length in *len
 * and the FNV-1a state of its bytes in *fnv. NULL when out of memory. */
static const char *node_name(struct hf *h, enum dm_op op, size_t *len, uint32_t *fnv)
{
    struct scope_names *s = scope_names(h);
    if (!s)
        return NULL;
    const char *op_name = dm_ops[op].name;
    struct op_count *c = s->ops;
    while (c && strcmp(c->op, op_name) != 0)
        c = c->next;
    if (!c) {
        if (!(c = dm_arena_alloc(&h->names_arena, sizeof *c)))
            return NULL;
        *c = (struct op_count){op_name, 0, s->ops};
        s->ops = c;
    }
    int k = c->n++;
    char tail[64]; /* "/<Op>" or "/<Op>_" */
    size_t n_op = strlen(op_name), n_tail = 1 + n_op + (k > 0);
    if (n_tail > sizeof tail)
        return NULL;
    tail[0] = '/';
    memcpy(tail + 1, op_name, n_op);
    if (k > 0)
        tail[n_tail - 1] = '_';
    *fnv = h->scope_fnv[h->scope_len];
    const char *name = name_cat(&h->g->arena, h->scope, h->scope_len, "", tail, n_tail,
                                k > 0 ? k : -1, fnv);
    *len = name ? h->scope_len + strlen(name + h->scope_len) : 0;
    return name;
}

/* A node of op `op` in the current scope, named "<scope>/<Op>" (then "_1",
 * "_2", ...), its outputs "<node>_output_<k>". NULL after an error. The
 * pointer is valid until the next node is made. */
struct dm_node *hf_node(struct hf *h, enum dm_op op, int n_in, const int32_t *in, int n_out)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return NULL;
    for (int k = 0; k < n_in; k++)
        if (in[k] < 0) {
            hf_fail(h, DNNMEM_E_INTERNAL, "a node input is missing");
            return NULL;
        }
    size_t n_name = 0;
    uint32_t fnv = 0;
    const char *name = h->outline ? "" : node_name(h, op, &n_name, &fnv);
    struct dm_node *n = name ? dm_graph_add_node(g, &h->cap_nodes, op, name, n_in, in, n_out) : NULL;
    if (!n) {
        char msg[128];
        enum dnnmem_status s = dm_graph_add_fail(g, msg, sizeof msg);
        hf_fail(h, s, "%s", msg);
        return NULL;
    }
    for (int k = 0; k < n_out; k++) {
        uint32_t hash = fnv;
        bool named = k == 0 && h->out_name;
        const char *tname = named         ? dm_arena_strdup(&g->arena, h->out_name)
                            : h->outline ? ""
                                         : name_cat(&g->arena, name, n_name, "_output_", "", 0, k,
                                                    &hash);
        hash = !tname ? 0 : named ? dm_hash_str(tname) : dm_hash_end(hash);
        int32_t t = !tname                     ? -1
                    : !named && h->outline ? dm_graph_add_unnamed(g)
                                               : dm_graph_add_named(g, tname, hash);
        if (t == -2) {
            hf_fail(h, DNNMEM_E_INTERNAL, "two tensors are named '%s'", tname);
            return NULL;
        }
        if ((n->out[k] = t) < 0) {
            hf_oom(h);
            return NULL;
        }
    }
    h->out_name = NULL;
    /* after prepare_model_for_kbit_training every activation is float32 but
     * the few that hf_qlinear() marks otherwise (see below) */
    for (int k = 0; h->prep32 && k < n_out; k++)
        g->tensors[n->out[k]].keep_fp32 = true;
    return n;
}

/* A node with one output, its inputs as varargs (int32_t tensor ids). */
int32_t hf_op(struct hf *h, enum dm_op o, int n_in, ...)
{
    int32_t in[8];
    va_list ap;
    va_start(ap, n_in);
    for (int k = 0; k < n_in && k < 8; k++)
        in[k] = (int32_t)va_arg(ap, int);
    va_end(ap);
    struct dm_node *n = hf_node(h, o, n_in < 8 ? n_in : 8, in, 1);
    return n ? n->out[0] : -1;
}

/* The outcome of adding an attribute to the node made last. */
static void attr_status(struct hf *h, enum dnnmem_status s)
{
    if (s == DNNMEM_E_INTERNAL)
        hf_fail(h, s, "node '%s' has too many attributes", h->g->nodes[h->g->n_nodes - 1].name);
    else if (s != DNNMEM_OK)
        hf_oom(h);
}

struct dm_attr *hf_attr(struct hf *h, const char *name, enum dm_attr_kind kind)
{
    struct dm_attr *a = NULL;
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr(h->g, name, kind, &a));
    return h->st == DNNMEM_OK ? a : NULL;
}

void hf_attr_i(struct hf *h, const char *name, int64_t v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_i(h->g, name, v));
}

void hf_attr_f(struct hf *h, const char *name, double v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_f(h->g, name, v));
}

void hf_attr_s(struct hf *h, const char *name, const char *v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_s(h->g, name, v));
}

void hf_attr_ints(struct hf *h, const char *name, int n, const int64_t *v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_ints(h->g, name, n, v));
}

void hf_attr_floats(struct hf *h, const char *name, int n, const double *v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_floats(h->g, name, n, v));
}

/* Constant nodes: a float or int64 scalar, an int64 or float list. */
int32_t hf_constant(struct hf *h)
{
    int32_t t = hf_op(h, DM_OP_Constant, 0);
    if (t >= 0)
        h->g->tensors[t].role = DM_ROLE_CONSTANT;
    return t;
}

int32_t hf_const_f(struct hf *h, double v)
{
    int32_t t = hf_constant(h);
    hf_attr_f(h, "value_float", v);
    return t;
}

int32_t hf_const_i(struct hf *h, int64_t v)
{
    int32_t t = hf_constant(h);
    hf_attr_i(h, "value_int", v);
    return t;
}

int32_t hf_const_ints(struct hf *h, int n, const int64_t *v)
{
    int32_t t = hf_constant(h);
    hf_attr_ints(h, "value_ints", n, v);
    return t;
}

/* Whether weight `name` is a floating-point buffer (register_buffer), not a
 * parameter: the rotary embedding's inv_freq, GPT-2's masked_bias, Gemma 3's
 * embed_scale, DeepSeek-V3's e_score_correction_bias. Every other float
 * weight built here is an nn.Parameter. */
static bool float_buffer(const char *name)
{
    static const char *const buffers[] = {"inv_freq", "masked_bias", "embed_scale",
                                          "e_score_correction_bias"};
    const char *last = strrchr(name, '.');
    last = last ? last + 1 : name;
    for (size_t k = 0; k < sizeof buffers / sizeof *buffers; k++)
        if (strcmp(last, buffers[k]) == 0)
            return true;
    return false;
}

/* A weight tensor of the graph named `name` (a parameter or buffer). */
int32_t hf_param_named(struct hf *h, const char *name, enum dm_dtype dtype, int rank,
                       const int64_t *dims)
{
    struct dm_graph *g = h->g;
    uint32_t hash = dm_hash_str(name);
    int32_t old = dm_graph_find_h(g, name, hash);
    if (old >= 0 && h->share && g->tensors[old].role == DM_ROLE_WEIGHT)
        return old;
    if (old >= 0) {
        hf_fail(h, DNNMEM_E_INTERNAL, "two weights are named '%s'", name);
        return -1;
    }
    int64_t numel = 1;
    uint64_t bytes;
    for (int k = 0; k < rank; k++)
        if (!dm_mul_ok(numel, dims[k], &numel)) {
            hf_fail(h, DNNMEM_E_SHAPE, "the element count of '%s' overflows", name);
            return -1;
        }
    if (!dm_dtype_bytes(dtype, numel, &bytes) || bytes > DM_MAX_TENSOR_BYTES) {
        /* refused now, not after the whole graph is built */
        hf_fail(h, DNNMEM_E_SHAPE, "'%s' would take an absurd %lld elements", name,
                (long long)numel);
        return -1;
    }
    const char *copy = dm_arena_strdup(&g->arena, name);
    int32_t t = copy ? dm_graph_add_named(g, copy, hash) : -1;
    struct dm_dim *d = dm_arena_array(&g->arena, (size_t)rank + 1, sizeof *d);
    if (t < 0 || !d)
        return hf_oom(h);
    for (int k = 0; k < rank; k++)
        d[k] = (struct dm_dim){dims[k], -1};
    struct dm_tensor *tt = &g->tensors[t];
    tt->role = DM_ROLE_WEIGHT;
    tt->dtype = dtype;
    tt->rank = rank;
    tt->dims = d;
    tt->keep_fp32 = h->prep32 && dtype == DM_FLOAT && !float_buffer(name);
    return t;
}

/* The current module's path as its state_dict names it:
 * "/model/layers.0/self_attn/q_proj" -> "model.layers.0.self_attn.q_proj"
 * ('/' -> '.', a call tag "#N" dropped). */
void hf_module_path(const struct hf *h, char *buf, size_t cap)
{
    size_t o = 0;
    for (const char *p = h->scope + (h->scope[0] == '/'); *p && o + 1 < cap; p++) {
        if (*p == '#')
            while (p[1] >= '0' && p[1] <= '9')
                p++;
        else
            buf[o++] = *p == '/' ? '.' : *p;
    }
    buf[o] = '\0';
}

/* A parameter or buffer of the current module, named as its state_dict:
 * "/model/layers.0/self_attn/q_proj" + "weight" -> model.layers.0.self_attn.q_proj.weight. */
int32_t hf_param(struct hf *h, const char *what, enum dm_dtype dtype, int rank,
                 const int64_t *dims)
{
    if (h->st != DNNMEM_OK)
        return -1;
    char path[sizeof h->scope];
    hf_module_path(h, path, sizeof path);
    char *name = name_cat(&h->g->arena, path, strlen(path), path[0] ? "." : "", what,
                          strlen(what), -1, NULL);
    if (!name)
        return hf_oom(h);
    return hf_param_named(h, name, dtype, rank, dims);
}

int32_t hf_transpose(struct hf *h, int32_t x, int n, const int64_t *perm)
{
    int32_t y = hf_op(h, DM_OP_Transpose, 1, x);
    hf_attr_ints(h, "perm", n, perm);
    return y;
}

int32_t hf_reshape(struct hf *h, int32_t x, int n, const int64_t *shape)
{
    int32_t s = hf_const_ints(h, n, shape);
    return hf_op(h, DM_OP_Reshape, 2, x, s);
}

int32_t hf_unsqueeze(struct hf *h, int32_t x, int n, const int64_t *axes)
{
    int32_t a = hf_const_ints(h, n, axes);
    return hf_op(h, DM_OP_Unsqueeze, 2, x, a);
}

/* nn.functional.dropout(p): returns its input when p == 0 (ATen's
 * _dropout_impl), so no node then; identity in eval mode. */
int32_t hf_dropout(struct hf *h, int32_t x, double p)
{
    if (p <= 0)
        return x;
    int32_t r = hf_const_f(h, p);
    return hf_op(h, DM_OP_Dropout, 2, x, r);
}

/* A Python variable (a local of the module forward that ends at node
 * `until`) keeps `x` alive until then. */
void hf_hold(struct hf *h, int32_t x, int32_t until)
{
    if (h->st == DNNMEM_OK && x >= 0 && until >= 0 && h->g->tensors[x].held_until < until + 1)
        h->g->tensors[x].held_until = until + 1;
}

int32_t hf_last_node(struct hf *h)
{
    return h->g->n_nodes - 1;
}

/* LlamaRMSNorm (also Mistral's, Qwen2's, Qwen3's): in float32,
 *   variance = x.pow(2).mean(-1, keepdim=True)
 *   x = x * torch.rsqrt(variance + eps)
 *   return weight * x.to(input_dtype)
 * The .to(float32) and .to(input_dtype) are no-ops on float32 weights, so no
 * Cast; torch.rsqrt is written Sqrt then Reciprocal (ONNX has no Rsqrt): two
 * [.., 1] tensors where PyTorch makes one. */
/* LlamaRMSNorm: hidden_states.to(float32), pow(2).mean(-1, keepdim),
 * * rsqrt(variance + eps), .to(input_dtype), weight *. In a 16-bit run the
 * middle is float32 (the upcast copy and the normalised rows, both kept for
 * backward); in a float32 run the casts return their input. */
static int32_t rms_norm(struct hf *h, int32_t x, int64_t dim, double eps, bool weight_first);

int32_t hf_rms_norm(struct hf *h, int32_t x, int64_t dim, double eps)
{
    return rms_norm(h, x, dim, eps, false);
}

/* Olmo2RMSNorm (modeling_olmo2.py, 4.51-5.24): the same, but
 * (weight * hidden_states).to(input_dtype): the product of the 16-bit
 * weight and the float32 rows is float32, then cast. */
int32_t hf_rms_norm_olmo(struct hf *h, int32_t x, int64_t dim, double eps)
{
    return rms_norm(h, x, dim, eps, true);
}

static int32_t rms_norm(struct hf *h, int32_t x, int64_t dim, double eps, bool weight_first)
{
    int32_t w = hf_param(h, "weight", DM_FLOAT, 1, &dim);
    int32_t x32 = hf_op(h, DM_OP_Cast, 1, x);
    hf_attr_i(h, "to", DM_FLOAT);
    hf_keep32(h, x32);
    int32_t two = hf_const_f(h, 2.0);
    int32_t p = hf_op(h, DM_OP_Pow, 2, x32, two);
    hf_keep32(h, p);
    int32_t m = hf_op(h, DM_OP_ReduceMean, 1, p);
    hf_attr_ints(h, "axes", INTS(-1));
    hf_attr_i(h, "keepdims", 1);
    hf_keep32(h, m);
    int32_t e = hf_const_f(h, eps);
    int32_t a = hf_op(h, DM_OP_Add, 2, m, e);
    hf_keep32(h, a);
    int32_t s = hf_op(h, DM_OP_Sqrt, 1, a);
    hf_keep32(h, s);
    int32_t r = hf_op(h, DM_OP_Reciprocal, 1, s);
    hf_keep32(h, r);
    int32_t y = hf_op(h, DM_OP_Mul, 2, x32, r);
    hf_keep32(h, y);
    int32_t y32 = y;
    if (weight_first) {
        y = hf_op(h, DM_OP_Mul, 2, w, y);
        hf_keep32(h, y);
        y = hf_op(h, DM_OP_CastLike, 2, y, x);
    } else {
        y = hf_op(h, DM_OP_CastLike, 2, y, x);
        y = hf_op(h, DM_OP_Mul, 2, w, y);
    }
    /* forward's locals `variance` and `hidden_states` (the float32
     * normalised rows, rebound only by the return's .to()) live until it
     * returns (measured: the H200 trace of Llama-3.2-1B bf16 frees the
     * 16 MiB float32 rows and the variance after `weight * ...`) */
    hf_hold(h, m, hf_last_node(h));
    hf_hold(h, y32, hf_last_node(h));
    return y;
}

/* rotate_half(x) = cat((-x2, x1), -1) of the halves of the last dim,
 * x[..., : d // 2] and x[..., d // 2 :]: basic slicing, views in PyTorch
 * (Narrow), so only -x2 (half of x) and the cat allocate (measured: the
 * H200 trace of Llama-3.2-1B bf16, tools/gpu/results/traces.tar.gz: q's
 * rotate_half allocates 4 MiB at the Neg and 8 MiB at the cat, nothing
 * for the halves). SliceBackward0 makes a grad shaped like x for each. */
static int32_t rotate_half(struct hf *h, int32_t x, int64_t d)
{
    int32_t x1 = hf_narrow(h, x, -1, 0, d / 2);
    int32_t x2 = hf_narrow(h, x, -1, d / 2, d - d / 2);
    int32_t n = hf_op(h, DM_OP_Neg, 1, x2);
    int32_t c = hf_op(h, DM_OP_Concat, 2, n, x1);
    hf_attr_i(h, "axis", -1);
    return c;
}

int32_t hf_rotate_half(struct hf *h, int32_t x, int64_t d)
{
    return rotate_half(h, x, d);
}

/* apply_rotary_pos_emb: x * cos + rotate_half(x) * sin. */
int32_t hf_rope(struct hf *h, int32_t x, int32_t cos, int32_t sin, int64_t d,
                const char *name)
{
    int32_t a = hf_op(h, DM_OP_Mul, 2, x, cos);
    int32_t r = rotate_half(h, x, d);
    int32_t b = hf_op(h, DM_OP_Mul, 2, r, sin);
    h->out_name = name;
    return hf_op(h, DM_OP_Add, 2, a, b);
}

/* The KV cache's tensors (use_cache: the presents, named present.N.key and
 * present.N.value). Through transformers 4.51, DynamicCache.update's first
 * call appends the key and value states themselves, so the presents are
 * those tensors (views, often, of a projection's output, which they keep
 * alive), named as they are made: hf_cache_at_make(name); 4.54 and 4.55's
 * DynamicLayer still stores the first states as they are. From 4.56, each
 * DynamicLayer starts as an empty tensor and update() concatenates onto it
 * (transformers 4.56.2 cache_utils.py, DynamicLayer.lazy_initialization and
 * update): the first update is a contiguous copy, which update returns and
 * the attention reads (key_states and value_states are rebound to it), and
 * the states are let go: hf_cache_update(x, name). Measured with 5.17 on the
 * H200: GPT-2, whose presents had kept each layer's whole fused c_attn
 * output, was 3.9% over in training and 9.7% in inference without it; with
 * real transformers 4.56.2 on the CPU (tests/validation/hf-real-cpu.jsonl)
 * GPT-2, OPT, GPT-NeoX, Falcon and Phi-3 were +2.4% to +9.7% while the copy
 * was modelled from 5.0 only. */
const char *hf_cache_at_make(const struct hf *h, const char *name)
{
    return h->cache_copy ? NULL : name;
}

int32_t hf_cache_update(struct hf *h, int32_t x, const char *name)
{
    if (!h->cache_copy || !name || x < 0)
        return x;
    h->out_name = name;
    int32_t y = hf_op(h, DM_OP_Concat, 1, x);
    hf_attr_i(h, "axis", -2);
    return y;
}

/* x.narrow(axis, start, length): a view (one part of torch.split). */
int32_t hf_narrow(struct hf *h, int32_t x, int64_t axis, int64_t start, int64_t length)
{
    int32_t y = hf_op(h, DM_OP_Narrow, 1, x);
    hf_attr_i(h, "axis", axis);
    hf_attr_i(h, "start", start);
    hf_attr_i(h, "length", length);
    return y;
}

int32_t hf_layer_norm(struct hf *h, int32_t x, int64_t dim, double eps)
{
    int32_t w = hf_param(h, "weight", DM_FLOAT, 1, &dim);
    int32_t b = hf_param(h, "bias", DM_FLOAT, 1, &dim);
    int32_t y = hf_op(h, DM_OP_LayerNormalization, 3, x, w, b);
    hf_attr_i(h, "axis", -1);
    hf_attr_f(h, "epsilon", eps);
    return y;
}

/* ---- graph inputs ------------------------------------------------------------------ */

/* A graph input: `name` of `dtype`, each dim symbolic (syms[k] names it) or
 * fixed (syms[k] NULL: fixed[k]). */
int32_t hf_declare_input(struct hf *h, const char *name, enum dm_dtype dtype, int rank,
                         const char *const *syms, const int64_t *fixed)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return -1;
    int32_t t = dm_graph_add_tensor(g, name);
    struct dm_dim *d = dm_arena_array(&g->arena, (size_t)rank, sizeof *d);
    int32_t *in = dm_arena_array(&g->arena, (size_t)g->n_inputs + 1, sizeof *in);
    if (t < 0 || !d || !in)
        return hf_oom(h);
    for (int k = 0; k < rank; k++) {
        int32_t s = syms[k] ? dm_graph_symbol(g, syms[k]) : -1;
        if (syms[k] && s < 0)
            return hf_oom(h);
        d[k] = syms[k] ? (struct dm_dim){-1, s} : (struct dm_dim){fixed[k], -1};
    }
    g->tensors[t] = (struct dm_tensor){.name = g->tensors[t].name, .dtype = dtype, .rank = rank,
                                       .dims = d, .role = DM_ROLE_INPUT, .producer = -1};
    if (g->n_inputs)
        memcpy(in, g->inputs, (size_t)g->n_inputs * sizeof *in);
    g->inputs = in;
    g->inputs[g->n_inputs++] = t;
    return t;
}

/* Mark tensor `t` an output (after those already marked); `cap` is the
 * size of g->outputs. */
void hf_add_output(struct hf *h, int32_t t, int32_t cap)
{
    if (h->st != DNNMEM_OK || t < 0)
        return;
    if (h->g->n_outputs >= cap) {
        hf_fail(h, DNNMEM_E_INTERNAL, "too many outputs");
        return;
    }
    h->g->tensors[t].is_output = true;
    h->g->outputs[h->g->n_outputs++] = t;
}

void hf_keep32(struct hf *h, int32_t t)
{
    if (h->st == DNNMEM_OK && t >= 0)
        h->g->tensors[t].keep_fp32 = true;
}

/* A tensor in the run's 16-bit dtype although prep32 made it float32. */
void hf_unkeep32(struct hf *h, int32_t t)
{
    if (h->st == DNNMEM_OK && t >= 0)
        h->g->tensors[t].keep_fp32 = false;
}
