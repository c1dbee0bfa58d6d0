/*
 * mxnet.c: the MXNet front end. An MXNet symbol file (prefix-symbol.json, as
 * Module.save_checkpoint, Symbol.save and Gluon's HybridBlock.export write it)
 * is read with jansson and built, operator by operator, into the graph IR on
 * the ONNX ops that compute the same thing.
 *
 * Layouts (MXNet's src/nnvm/legacy_json_util.cc upgrades the old ones):
 *  - 0.8 ("legacy"): per node "op", "name", "inputs" as [node, output],
 *    operator parameters in "param", user attributes in "attr",
 *    "backward_source_id"; heads as [node, output]; no version.
 *  - 0.9 and 0.10: parameters and user attributes together in "attr"; inputs
 *    and heads as [node, output, version]; "node_row_ptr"; "attrs":
 *    {"mxnet_version": ["int", 901]}.
 *  - 0.11 to 1.x: the same with "attrs". Gluon exports add __shape__ and
 *    __dtype__ to parameter variables (0 in a shape: not yet known).
 *
 * Variables (op "null") hold no shape. A variable an operator reads in a
 * parameter slot (Convolution's weight and bias, BatchNorm's gamma and beta,
 * FullyConnected's, a PReLU's gamma, Embedding's weight, RNN's parameters)
 * is a weight; BatchNorm's moving_mean and moving_var are auxiliary states,
 * weights that take no gradient (buffers), and the 0.8 files that leave them
 * out get them back (MXNet allocates them all the same). Every other
 * variable is a graph input: the data, which needs a shape from the caller
 * (dnnmem_config.input_shapes, --input-shape), RNN begin states and labels.
 * A loss operator's label takes its shape from the data as MXNet infers it
 * (SoftmaxOutput: [batch]); the loss itself is dnnmem's (see --loss), so the
 * label is an input no op reads. Parameter sizes follow from the operator's
 * attributes and the data it reads, as MXNet's own FInferShape derives them:
 * weights are declared with struct dm_derive and shaped at inference.
 *
 * The data's shape comes from the caller (an MXNet symbol has none); with
 * --batch-size, its first dim is replaced (api.c). The fused RNN op keeps
 * its one flat parameter vector (cuDNN's layout, the size of MXNet's
 * GetRnnParamSize) and becomes one MxRNN node per layer.
 *
 * Attribute values are strings ("(3, 3)", "True", "0.9"); each is parsed
 * strictly, and a malformed one is an error naming the node and attribute.
 * Attributes an operator does not use (lr_mult, ctx_group, cudnn_tune,
 * workspace) are ignored, as are unknown ones (user attributes share the
 * dict in 0.9 and later).
 */
#include "dnnmem-impl.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MX_OPSET 17   /* the ONNX op semantics the nodes use */
#define MAX_OUTPUTS 4096
#define MAX_DIM (INT64_C(1) << 40)

/* What an operator does with the input in one slot. */
enum slot { S_DATA, S_PARAM, S_AUX, S_LABEL };

struct mx {
    struct dm_graph *g;
    struct dnnmem_error *err;
    const char *path;
    enum dnnmem_status st;     /* the first error; later calls do nothing */
    json_t *nodes;
    size_t n;
    int layout;                /* 8, 9 (attr) or 11 (attrs) */
    int32_t **out;             /* per JSON node: its outputs' tensors */
    int *n_out;
    uint8_t *var_kind;         /* per variable: 0 unread, else 1 + enum slot of its first reader */
    int32_t cap_nodes;
    /* the node being built */
    json_t *cur;
    const char *cur_name, *cur_op;
    size_t cur_id;
    int aux_count;
    const char *next_out;      /* a name for the next main IR node's output 0 */
    const char *aux_out;       /* the same for the next other one */
    const char **out_names;    /* names for every output of the next main node, or NULL */
};

static enum dnnmem_status fail(struct mx *m, enum dnnmem_status s, const char *fmt, ...)
    DM_PRINTF(3, 4);
static enum dnnmem_status fail(struct mx *m, enum dnnmem_status s, const char *fmt, ...)
{
    if (m->st == DNNMEM_OK) {
        char buf[448];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        m->st = dm_fail(m->err, s, "%s: %s", m->path, buf);
    }
    return m->st;
}

static int32_t oom(struct mx *m)
{
    fail(m, DNNMEM_E_NOMEM, "out of memory");
    return -1;
}

/* ---- attributes ------------------------------------------------------------- */

/* The string value of attribute `key` of JSON node `node` (NULL when absent):
 * "attrs" (1.x), "attr" (0.9, and 0.8's user attributes), "param" (0.8). */
static const char *attr_of(struct mx *m, json_t *node, const char *key)
{
    static const char *const dicts[] = {"attrs", "attr", "param"};
    for (int k = 0; k < 3; k++) {
        json_t *d = json_object_get(node, dicts[k]);
        json_t *v = d ? json_object_get(d, key) : NULL;
        if (!v)
            continue;
        if (!json_is_string(v)) {
            fail(m, DNNMEM_E_MODEL, "node '%s': attribute '%s' must be a string",
                 json_string_value(json_object_get(node, "name")), key);
            return NULL;
        }
        return json_string_value(v);
    }
    return NULL;
}

static const char *sattr(struct mx *m, const char *key)
{
    return m->st == DNNMEM_OK ? attr_of(m, m->cur, key) : NULL;
}

static void bad_attr(struct mx *m, const char *key, const char *v, const char *want)
{
    fail(m, DNNMEM_E_MODEL, "node '%s' (%s): attribute '%s' is \"%s\"; expected %s", m->cur_name,
         m->cur_op, key, v, want);
}

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* One integer at *p (optionally signed, "L" suffix of Python 2 longs). */
static bool parse_int_at(const char **p, int64_t *out)
{
    const char *s = skip_ws(*p);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE)
        return false;
    if (*end == 'L')
        end++;
    *out = v;
    *p = end;
    return true;
}

/* An integer attribute; `dflt` when absent. */
static int64_t iattr(struct mx *m, const char *key, int64_t dflt, int64_t lo, int64_t hi)
{
    const char *v = sattr(m, key);
    if (!v)
        return dflt;
    const char *p = v;
    int64_t x;
    if (!parse_int_at(&p, &x) || *skip_ws(p) != '\0') {
        bad_attr(m, key, v, "an integer");
        return dflt;
    }
    if (x < lo || x > hi) {
        char want[96];
        snprintf(want, sizeof want, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
        bad_attr(m, key, v, want);
        return dflt;
    }
    return x;
}

static double fattr(struct mx *m, const char *key, double dflt)
{
    const char *v = sattr(m, key);
    if (!v)
        return dflt;
    char *end;
    errno = 0;
    double x = strtod(skip_ws(v), &end);
    if (end == skip_ws(v) || *skip_ws(end) != '\0' || errno == ERANGE || !isfinite(x)) {
        bad_attr(m, key, v, "a number");
        return dflt;
    }
    return x;
}

static bool battr(struct mx *m, const char *key, bool dflt)
{
    const char *v = sattr(m, key);
    if (!v)
        return dflt;
    if (!strcmp(v, "True") || !strcmp(v, "true") || !strcmp(v, "1"))
        return true;
    if (!strcmp(v, "False") || !strcmp(v, "false") || !strcmp(v, "0"))
        return false;
    bad_attr(m, key, v, "True or False");
    return dflt;
}

/* A tuple "(3, 3)", "[3,3]", "(-1,)", "()" or a bare integer "3"; returns
 * the count (-1 when absent or malformed). */
static int tattr(struct mx *m, const char *key, int64_t *out, int cap)
{
    const char *v = sattr(m, key);
    if (!v)
        return -1;
    const char *p = skip_ws(v);
    int n = 0;
    if (*p != '(' && *p != '[') { /* a bare integer */
        if (!parse_int_at(&p, &out[0]) || *skip_ws(p) != '\0') {
            bad_attr(m, key, v, "a tuple of integers");
            return -1;
        }
        return 1;
    }
    char close = *p == '(' ? ')' : ']';
    p = skip_ws(p + 1);
    if (*p == close)
        return *skip_ws(p + 1) == '\0' ? 0 : (bad_attr(m, key, v, "a tuple of integers"), -1);
    for (;;) {
        int64_t x;
        if (n >= cap) {
            char want[64];
            snprintf(want, sizeof want, "a tuple of at most %d integers", cap);
            bad_attr(m, key, v, want);
            return -1;
        }
        if (!parse_int_at(&p, &x)) {
            bad_attr(m, key, v, "a tuple of integers");
            return -1;
        }
        out[n++] = x;
        p = skip_ws(p);
        if (*p == ',') {
            p = skip_ws(p + 1);
            if (*p == close)
                break;
            continue;
        }
        if (*p == close)
            break;
        bad_attr(m, key, v, "a tuple of integers");
        return -1;
    }
    if (*skip_ws(p + 1) != '\0') {
        bad_attr(m, key, v, "a tuple of integers");
        return -1;
    }
    return n;
}

/* A string attribute that must be one of `choices` (NULL-terminated). */
static const char *cattr(struct mx *m, const char *key, const char *dflt,
                         const char *const *choices)
{
    const char *v = sattr(m, key);
    if (!v)
        return dflt;
    char want[160] = "one of";
    for (const char *const *c = choices; *c; c++) {
        if (!strcmp(v, *c))
            return v;
        size_t len = strlen(want);
        snprintf(want + len, sizeof want - len, "%s %s", c == choices ? "" : ",", *c);
    }
    bad_attr(m, key, v, want);
    return dflt;
}

/* ---- building the graph -------------------------------------------------------- */

static bool unique_tensor(struct mx *m, const char *name)
{
    if (dm_graph_find(m->g, name) >= 0) {
        fail(m, DNNMEM_E_MODEL, "node '%s': two tensors are named '%s'", m->cur_name, name);
        return false;
    }
    return true;
}

/* An IR node. The main node of an MXNet node (main) is named as it, the
 * others "<name>/<Op>" (then "_1", ...). Output 0 takes next_out (main) or
 * aux_out (the others) when set, else "<node>_output_<k>". */
static struct dm_node *emit(struct mx *m, enum dm_op op, int n_in, const int32_t *in, int n_out,
                            bool main)
{
    struct dm_graph *g = m->g;
    if (m->st != DNNMEM_OK)
        return NULL;
    for (int k = 0; k < n_in; k++)
        if (in[k] < 0) {
            fail(m, DNNMEM_E_INTERNAL, "node '%s': a node input is missing", m->cur_name);
            return NULL;
        }
    const char *name = main ? dm_arena_strdup(&g->arena, m->cur_name)
                       : m->aux_count ? dm_arena_printf(&g->arena, "%s/%s_%d", m->cur_name,
                                                        dm_ops[op].name, m->aux_count)
                                      : dm_arena_printf(&g->arena, "%s/%s", m->cur_name, dm_ops[op].name);
    if (!main)
        m->aux_count++;
    struct dm_node *n = dm_graph_add_node(g, &m->cap_nodes, op, name, n_in, in, n_out);
    if (!n) {
        char msg[128];
        enum dnnmem_status s = dm_graph_add_fail(g, msg, sizeof msg);
        fail(m, s, "%s", msg);
        return NULL;
    }
    for (int k = 0; k < n_out; k++) {
        const char *given = main ? m->next_out : m->aux_out;
        const char *tname = main && m->out_names ? m->out_names[k]
                            : k == 0 && given    ? given
                                 : dm_arena_printf(&g->arena, "%s_output_%d", name, k);
        if (!tname) {
            oom(m);
            return NULL;
        }
        if (!unique_tensor(m, tname))
            return NULL;
        if ((n->out[k] = dm_graph_add_tensor(g, tname)) < 0) {
            oom(m);
            return NULL;
        }
    }
    if (main)
        m->next_out = NULL, m->out_names = NULL;
    m->aux_out = NULL;
    return n;
}

static int32_t op1(struct mx *m, enum dm_op o, bool main, int n_in, ...)
{
    int32_t in[8];
    va_list ap;
    va_start(ap, n_in);
    for (int k = 0; k < n_in && k < 8; k++)
        in[k] = (int32_t)va_arg(ap, int);
    va_end(ap);
    struct dm_node *n = emit(m, o, n_in < 8 ? n_in : 8, in, 1, main);
    return n ? n->out[0] : -1;
}

/* The outcome of adding an attribute to the node made last. */
static void attr_status(struct mx *m, enum dnnmem_status s)
{
    if (s == DNNMEM_E_INTERNAL)
        fail(m, s, "node '%s' has too many attributes", m->g->nodes[m->g->n_nodes - 1].name);
    else if (s != DNNMEM_OK)
        oom(m);
}

static void set_i(struct mx *m, const char *name, int64_t v)
{
    if (m->st == DNNMEM_OK)
        attr_status(m, dm_graph_attr_i(m->g, name, v));
}

static void set_f(struct mx *m, const char *name, double v)
{
    if (m->st == DNNMEM_OK)
        attr_status(m, dm_graph_attr_f(m->g, name, v));
}

static void set_s(struct mx *m, const char *name, const char *v)
{
    if (m->st == DNNMEM_OK)
        attr_status(m, dm_graph_attr_s(m->g, name, v));
}

static void set_ints(struct mx *m, const char *name, int n, const int64_t *v)
{
    if (m->st == DNNMEM_OK)
        attr_status(m, dm_graph_attr_ints(m->g, name, n, v));
}

static int32_t constant(struct mx *m)
{
    int32_t t = op1(m, DM_OP_Constant, false, 0);
    if (t >= 0)
        m->g->tensors[t].role = DM_ROLE_CONSTANT;
    return t;
}

static int32_t const_f(struct mx *m, double v)
{
    int32_t t = constant(m);
    set_f(m, "value_float", v);
    return t;
}

static int32_t const_ints(struct mx *m, int n, const int64_t *v)
{
    int32_t t = constant(m);
    set_ints(m, "value_ints", n, v);
    return t;
}

/* ---- parameters ------------------------------------------------------------------ */

/* Whether weight t still needs a shape (no declared one, no derivation). */
static bool unshaped(struct mx *m, int32_t t)
{
    const struct dm_tensor *tt = &m->g->tensors[t];
    return m->st == DNNMEM_OK && tt->rank < 0 && !tt->derive;
}

/* Give weight t a known shape (the first reader decides; later readers'
 * shape functions check theirs against it). */
static void param_shape(struct mx *m, int32_t t, int rank, const int64_t *dims)
{
    if (t < 0 || !unshaped(m, t))
        return;
    struct dm_tensor *tt = &m->g->tensors[t];
    struct dm_dim *d = dm_arena_array(&m->g->arena, (size_t)rank + 1, sizeof *d);
    if (!d) {
        oom(m);
        return;
    }
    for (int k = 0; k < rank; k++)
        d[k] = (struct dm_dim){dims[k], -1};
    tt->dims = d;
    tt->rank = rank;
}

/* Give tensor t a shape that follows from another's at inference. */
static void param_derive(struct mx *m, int32_t t, const struct dm_derive *dv)
{
    if (t < 0 || !unshaped(m, t))
        return;
    struct dm_derive *p = dm_arena_alloc(&m->g->arena, sizeof *p);
    if (!p) {
        oom(m);
        return;
    }
    *p = *dv;
    m->g->tensors[t].derive = p;
}

/* [C] read off dim 1 (channels) of x. */
static void per_channel(struct mx *m, int32_t t, int32_t x)
{
    param_derive(m, t, &(struct dm_derive){.from = x, .rule = DM_DERIVE_DIM, .at = 0, .axis = 1,
                                           .rank = 1, .dims = {-1}, .div = 1});
}

/* ---- operators ------------------------------------------------------------------- */

/* kernel, stride, dilate, pad of Convolution, Deconvolution and Pooling:
 * stride and dilate default to 1, pad to 0, each as long as the kernel. */
struct window {
    int nk;
    int64_t kernel[3], stride[3], dilate[3], pad[6], adj[3];
};

static bool window(struct mx *m, struct window *w, bool kernel_required)
{
    int64_t tmp[8];
    w->nk = tattr(m, "kernel", w->kernel, 3);
    if (m->st != DNNMEM_OK)
        return false;
    if (w->nk < 0 && !kernel_required) {
        w->nk = 0;
        return true;
    }
    if (w->nk < 1) {
        fail(m, DNNMEM_E_MODEL, "node '%s' (%s): attribute 'kernel' is %s", m->cur_name, m->cur_op,
             w->nk < 0 ? "missing" : "empty");
        return false;
    }
    static const char *const keys[] = {"stride", "dilate", "pad", "adj"};
    for (int j = 0; j < 4; j++) {
        int64_t *dst = j == 0 ? w->stride : j == 1 ? w->dilate : j == 2 ? w->pad : w->adj;
        int c = tattr(m, keys[j], tmp, 8);
        if (m->st != DNNMEM_OK)
            return false;
        for (int k = 0; k < w->nk; k++)
            dst[k] = c <= 0 ? (j < 2 ? 1 : 0) : tmp[k];
        if (c > 0 && c != w->nk) {
            fail(m, DNNMEM_E_MODEL,
                 "node '%s' (%s): attribute '%s' has %d values for a %d-D kernel", m->cur_name,
                 m->cur_op, keys[j], c, w->nk);
            return false;
        }
        for (int k = 0; k < w->nk; k++)
            if (dst[k] < (j < 2 ? 1 : 0) || dst[k] > MAX_DIM || w->kernel[k] < 1 ||
                w->kernel[k] > MAX_DIM) {
                fail(m, DNNMEM_E_MODEL, "node '%s' (%s): attribute '%s' or 'kernel' is out of range",
                     m->cur_name, m->cur_op, keys[j]);
                return false;
            }
    }
    for (int k = 0; k < w->nk; k++)
        w->pad[w->nk + k] = w->pad[k];
    return true;
}

static void window_attrs(struct mx *m, const struct window *w, bool dilations)
{
    set_ints(m, "kernel_shape", w->nk, w->kernel);
    set_ints(m, "strides", w->nk, w->stride);
    set_ints(m, "pads", 2 * w->nk, w->pad);
    if (dilations)
        set_ints(m, "dilations", w->nk, w->dilate);
}

static void check_layout(struct mx *m, int nk)
{
    static const char *const ok[] = {"NCW", "NCHW", "NCDHW", NULL};
    const char *l = sattr(m, "layout");
    if (!l || !strcmp(l, "None"))
        return;
    for (int k = 0; ok[k]; k++)
        if (!strcmp(l, ok[k]) && (nk == 0 || (int)strlen(l) == nk + 2))
            return;
    fail(m, DNNMEM_E_UNSUPPORTED, "node '%s' (%s): layout '%s' is not supported (channels first only)",
         m->cur_name, m->cur_op, l);
}

static int32_t in_at(const int32_t *in, int n_in, int k)
{
    return k < n_in ? in[k] : -1;
}

static int32_t convolution(struct mx *m, const int32_t *in, int n_in, bool deconv)
{
    struct window w;
    if (!window(m, &w, true))
        return -1;
    check_layout(m, w.nk);
    int64_t nf = iattr(m, "num_filter", -1, 1, MAX_DIM);
    int64_t groups = iattr(m, "num_group", 1, 1, MAX_DIM);
    bool no_bias = battr(m, "no_bias", deconv); /* Deconvolution: no bias by default */
    if (m->st != DNNMEM_OK)
        return -1;
    if (nf < 0)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (%s): attribute 'num_filter' is missing",
                    m->cur_name, m->cur_op), -1;
    if (deconv) {
        int64_t ts[3];
        if (tattr(m, "target_shape", ts, 3) > 0)
            return fail(m, DNNMEM_E_UNSUPPORTED,
                        "node '%s' (Deconvolution): attribute 'target_shape' is not supported",
                        m->cur_name), -1;
    }
    if (nf % groups)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (%s): num_filter %lld is not a multiple of num_group %lld",
                    m->cur_name, m->cur_op, (long long)nf, (long long)groups), -1;
    int32_t x = in_at(in, n_in, 0), wt = in_at(in, n_in, 1), b = no_bias ? -1 : in_at(in, n_in, 2);
    if (x < 0 || wt < 0 || (!no_bias && b < 0))
        return fail(m, DNNMEM_E_MODEL, "node '%s' (%s): has %d inputs; data, weight%s expected",
                    m->cur_name, m->cur_op, n_in, no_bias ? "" : " and bias"), -1;
    /* Convolution weight [num_filter, C / num_group, *kernel]; Deconvolution
     * weight [C, num_filter / num_group, *kernel] */
    struct dm_derive dv = {.from = x, .rule = DM_DERIVE_DIM, .at = deconv ? 0 : 1, .axis = 1,
                           .rank = 2 + w.nk, .div = deconv ? 1 : groups};
    dv.dims[0] = deconv ? -1 : nf;
    dv.dims[1] = deconv ? nf / groups : -1;
    for (int k = 0; k < w.nk; k++)
        dv.dims[2 + k] = w.kernel[k];
    param_derive(m, wt, &dv);
    if (b >= 0)
        param_shape(m, b, 1, &nf);
    int32_t ins[3] = {x, wt, b};
    struct dm_node *n = emit(m, deconv ? DM_OP_ConvTranspose : DM_OP_Conv, b >= 0 ? 3 : 2, ins, 1, true);
    window_attrs(m, &w, true);
    set_i(m, "group", groups);
    if (deconv)
        set_ints(m, "output_padding", w.nk, w.adj);
    return n ? n->out[0] : -1;
}

static int32_t fully_connected(struct mx *m, const int32_t *in, int n_in)
{
    int64_t nh = iattr(m, "num_hidden", -1, 1, MAX_DIM);
    bool no_bias = battr(m, "no_bias", false), flatten = battr(m, "flatten", true);
    if (m->st != DNNMEM_OK)
        return -1;
    if (nh < 0)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (FullyConnected): attribute 'num_hidden' is missing",
                    m->cur_name), -1;
    int32_t x = in_at(in, n_in, 0), w = in_at(in, n_in, 1), b = no_bias ? -1 : in_at(in, n_in, 2);
    if (x < 0 || w < 0 || (!no_bias && b < 0))
        return fail(m, DNNMEM_E_MODEL, "node '%s' (FullyConnected): has %d inputs; data, weight%s expected",
                    m->cur_name, n_in, no_bias ? "" : " and bias"), -1;
    /* weight [num_hidden, K]: K is the product of the data's dims after the
     * first (flatten) or its last dim */
    param_derive(m, w, &(struct dm_derive){.from = x, .rule = flatten ? DM_DERIVE_FLAT : DM_DERIVE_DIM,
                                           .at = 1, .axis = flatten ? 1 : -1, .rank = 2,
                                           .dims = {nh, -1}, .div = 1});
    if (b >= 0)
        param_shape(m, b, 1, &nh);
    if (flatten) { /* x.reshape(N, -1) @ W.T + b: one addmm */
        int32_t f = op1(m, DM_OP_Flatten, false, 1, x);
        set_i(m, "axis", 1);
        int32_t ins[3] = {f, w, b};
        struct dm_node *n = emit(m, DM_OP_Gemm, b >= 0 ? 3 : 2, ins, 1, true);
        set_i(m, "transB", 1);
        return n ? n->out[0] : -1;
    }
    int32_t wt = op1(m, DM_OP_Transpose, false, 1, w);
    set_ints(m, "perm", 2, (int64_t[]){1, 0});
    if (b < 0)
        return op1(m, DM_OP_MatMul, true, 2, x, wt);
    const char *name = m->next_out;
    m->next_out = NULL;
    int32_t y = op1(m, DM_OP_MatMul, false, 2, x, wt);
    m->next_out = name;
    return op1(m, DM_OP_Add, true, 2, y, b);
}

static int32_t batch_norm(struct mx *m, const int32_t *in, int n_in)
{
    double eps = fattr(m, "eps", 1e-3);
    int64_t axis = iattr(m, "axis", 1, -8, 8);
    battr(m, "fix_gamma", true);        /* gamma stays a parameter (its gradient is zeroed) */
    battr(m, "use_global_stats", false);
    if (battr(m, "output_mean_var", false))
        return fail(m, DNNMEM_E_UNSUPPORTED, "node '%s' (BatchNorm): output_mean_var=True is not modelled",
                    m->cur_name), -1;
    if (m->st != DNNMEM_OK)
        return -1;
    if (axis != 1)
        return fail(m, DNNMEM_E_UNSUPPORTED, "node '%s' (BatchNorm): axis %lld is not supported (only 1)",
                    m->cur_name, (long long)axis), -1;
    if (n_in != 3 && n_in != 5)
        return fail(m, DNNMEM_E_MODEL,
                    "node '%s' (BatchNorm): has %d inputs; data, gamma, beta (and moving_mean, "
                    "moving_var) expected",
                    m->cur_name, n_in), -1;
    int32_t ins[5] = {in[0], in[1], in[2], -1, -1};
    for (int k = 3; k < 5; k++) {
        if (n_in == 5) {
            ins[k] = in[k];
            continue;
        }
        /* 0.8 files list no auxiliary states; MXNet allocates them, named so */
        const char *name = dm_arena_printf(&m->g->arena, "%s_%s", m->cur_name,
                                           k == 3 ? "moving_mean" : "moving_var");
        if (!name || !unique_tensor(m, name))
            return name ? -1 : oom(m);
        if ((ins[k] = dm_graph_add_tensor(m->g, name)) < 0)
            return oom(m);
        m->g->tensors[ins[k]].role = DM_ROLE_WEIGHT;
        m->g->tensors[ins[k]].dtype = DM_FLOAT;
    }
    for (int k = 1; k < 5; k++)
        per_channel(m, ins[k], ins[0]);
    struct dm_node *n = emit(m, DM_OP_BatchNormalization, 5, ins, 1, true);
    set_f(m, "epsilon", eps);
    return n ? n->out[0] : -1;
}

static int32_t pooling(struct mx *m, int32_t x)
{
    static const char *const types[] = {"max", "avg", "sum", "lp", NULL};
    static const char *const conv[] = {"valid", "full", "same", NULL};
    bool global = battr(m, "global_pool", false);
    const char *type = cattr(m, "pool_type", "max", types);
    const char *pc = cattr(m, "pooling_convention", "valid", conv);
    bool cip = battr(m, "count_include_pad", true);
    struct window w;
    if (!window(m, &w, !global))
        return -1;
    check_layout(m, global ? 0 : w.nk);
    if (m->st != DNNMEM_OK)
        return -1;
    bool max = !strcmp(type, "max");
    if (strcmp(type, "max") && strcmp(type, "avg"))
        return fail(m, DNNMEM_E_UNSUPPORTED, "node '%s' (Pooling): pool_type '%s' is not supported",
                    m->cur_name, type), -1;
    if (global)
        return op1(m, max ? DM_OP_GlobalMaxPool : DM_OP_GlobalAveragePool, true, 1, x);
    if (!strcmp(pc, "same"))
        return fail(m, DNNMEM_E_UNSUPPORTED, "node '%s' (Pooling): pooling_convention 'same' is not supported",
                    m->cur_name), -1;
    int32_t y = op1(m, max ? DM_OP_MaxPool : DM_OP_AveragePool, true, 1, x);
    window_attrs(m, &w, max);
    /* full: the output size rounds up, (x + 2p - k) / s + 1 with ceil */
    set_i(m, "ceil_mode", !strcmp(pc, "full"));
    if (!max)
        set_i(m, "count_include_pad", cip);
    return y;
}

static int32_t activation(struct mx *m, int32_t x)
{
    static const char *const acts[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign", NULL};
    const char *a = cattr(m, "act_type", NULL, acts);
    if (m->st != DNNMEM_OK)
        return -1;
    if (!a)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (Activation): attribute 'act_type' is missing",
                    m->cur_name), -1;
    enum dm_op o = !strcmp(a, "relu")       ? DM_OP_Relu
                   : !strcmp(a, "sigmoid")  ? DM_OP_Sigmoid
                   : !strcmp(a, "tanh")     ? DM_OP_Tanh
                   : !strcmp(a, "softrelu") ? DM_OP_Softplus
                                            : DM_OP_Softsign;
    return op1(m, o, true, 1, x);
}

static int32_t leaky_relu(struct mx *m, const int32_t *in, int n_in)
{
    static const char *const acts[] = {"leaky", "prelu", "elu", "selu", "gelu", "rrelu", NULL};
    const char *a = cattr(m, "act_type", "leaky", acts);
    double slope = fattr(m, "slope", 0.25);
    if (m->st != DNNMEM_OK)
        return -1;
    int32_t x = in[0];
    if (!strcmp(a, "prelu")) {
        if (n_in < 2)
            return fail(m, DNNMEM_E_MODEL, "node '%s' (LeakyReLU): prelu needs a gamma input",
                        m->cur_name), -1;
        /* gamma [C], one slope per channel, seen as [C, 1, ...] to broadcast */
        param_derive(m, in[1], &(struct dm_derive){.from = x, .rule = DM_DERIVE_BCAST});
        return op1(m, DM_OP_PRelu, true, 2, x, in[1]);
    }
    if (!strcmp(a, "elu")) {
        int32_t y = op1(m, DM_OP_Elu, true, 1, x);
        set_f(m, "alpha", slope);
        return y;
    }
    if (!strcmp(a, "selu"))
        return op1(m, DM_OP_Selu, true, 1, x);
    if (!strcmp(a, "gelu"))
        return op1(m, DM_OP_Gelu, true, 1, x);
    /* leaky, and rrelu (a random slope in training; the same memory) */
    int32_t y = op1(m, DM_OP_LeakyRelu, true, 1, x);
    set_f(m, "alpha", slope);
    return y;
}

/* MXNet's Reshape: ONNX Reshape when the shape uses only positive values, 0
 * and -1 (the same meaning), else MxReshape. */
static int32_t reshape(struct mx *m, int32_t x)
{
    int64_t s[DM_MAX_DIMS * 3];
    int n = tattr(m, "shape", s, DM_MAX_DIMS * 3);
    if (battr(m, "reverse", false))
        return fail(m, DNNMEM_E_UNSUPPORTED, "node '%s' (Reshape): reverse=True is not supported",
                    m->cur_name), -1;
    int64_t ts[DM_MAX_DIMS];
    if (tattr(m, "target_shape", ts, DM_MAX_DIMS) > 0)
        return fail(m, DNNMEM_E_UNSUPPORTED,
                    "node '%s' (Reshape): the deprecated 'target_shape' is not supported; use 'shape'",
                    m->cur_name), -1;
    if (m->st != DNNMEM_OK)
        return -1;
    if (n < 1)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (Reshape): attribute 'shape' is %s", m->cur_name,
                    n < 0 ? "missing" : "empty"), -1;
    bool plain = true;
    for (int k = 0; k < n; k++) {
        if (s[k] < -4 || s[k] > MAX_DIM)
            return fail(m, DNNMEM_E_MODEL, "node '%s' (Reshape): shape value %lld is invalid",
                        m->cur_name, (long long)s[k]), -1;
        plain = plain && s[k] >= -1;
    }
    if (plain) {
        const char *name = m->next_out;
        m->next_out = NULL;
        int32_t c = const_ints(m, n, s);
        m->next_out = name;
        return op1(m, DM_OP_Reshape, true, 2, x, c);
    }
    int32_t y = op1(m, DM_OP_MxReshape, true, 1, x);
    set_ints(m, "shape", n, s);
    return y;
}

/* A reduction over `axis` (absent or empty: every axis). */
static int32_t reduce(struct mx *m, enum dm_op o, int32_t x)
{
    int64_t ax[DM_MAX_DIMS];
    const char *v = sattr(m, "axis");
    int n = v && !strcmp(v, "None") ? 0 : tattr(m, "axis", ax, DM_MAX_DIMS);
    bool keep = battr(m, "keepdims", false);
    if (battr(m, "exclude", false))
        return fail(m, DNNMEM_E_UNSUPPORTED, "node '%s' (%s): exclude=True is not supported",
                    m->cur_name, m->cur_op), -1;
    if (m->st != DNNMEM_OK)
        return -1;
    int32_t y;
    if (o == DM_OP_ReduceSum && n > 0) { /* axes is an input from opset 13 */
        const char *name = m->next_out;
        m->next_out = NULL;
        int32_t c = const_ints(m, n, ax);
        m->next_out = name;
        y = op1(m, o, true, 2, x, c);
    } else {
        y = op1(m, o, true, 1, x);
        if (n > 0)
            set_ints(m, "axes", n, ax);
    }
    set_i(m, "keepdims", keep);
    return y;
}

/* An op with a scalar operand: x op c, or c op x (reversed). */
static int32_t scalar_op(struct mx *m, enum dm_op o, int32_t x, bool reversed)
{
    const char *v = sattr(m, "scalar");
    if (m->st != DNNMEM_OK)
        return -1;
    if (!v)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (%s): attribute 'scalar' is missing", m->cur_name,
                    m->cur_op), -1;
    double s = fattr(m, "scalar", 0);
    const char *name = m->next_out;
    m->next_out = NULL;
    int32_t c = const_f(m, s);
    m->next_out = name;
    return reversed ? op1(m, o, true, 2, c, x) : op1(m, o, true, 2, x, c);
}

static enum dm_dtype mx_dtype_name(const char *s)
{
    static const struct { const char *name; enum dm_dtype t; } map[] = {
        {"float32", DM_FLOAT}, {"float16", DM_FLOAT16}, {"float64", DM_DOUBLE},
        {"uint8", DM_UINT8},   {"int8", DM_INT8},       {"int32", DM_INT32},
        {"int64", DM_INT64},   {"bool", DM_BOOL},       {"bfloat16", DM_BFLOAT16}};
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(s, map[k].name))
            return map[k].t;
    return DM_UNDEFINED;
}

/* The fused RNN op: one flat parameter vector (cuDNN's layout), kept
 * whole; one MxRNN node per layer. */
static int32_t rnn(struct mx *m, const int32_t *in, int n_in);

static int32_t softmax_output(struct mx *m, const int32_t *in, int n_in, bool multi_dflt)
{
    bool multi = battr(m, "multi_output", multi_dflt);
    bool preserve = battr(m, "preserve_shape", false);
    if (m->st != DNNMEM_OK)
        return -1;
    /* the label: [batch], or the data's dims without the class axis */
    if (n_in >= 2)
        param_derive(m, in[1], &(struct dm_derive){.from = in[0],
                                                   .rule = multi ? DM_DERIVE_DROP
                                                         : preserve ? DM_DERIVE_DROP
                                                                    : DM_DERIVE_FIRST,
                                                   .axis = multi ? 1 : -1});
    int32_t y = op1(m, DM_OP_Softmax, true, 1, in[0]);
    set_i(m, "axis", multi ? 1 : -1);
    /* the loss itself under MXNet's training rules (src/train/train.c,
     * "MXNet"): its backward reads the output and the label */
    set_i(m, "mx_loss", 1);
    return y;
}

/* ---- one MXNet node --------------------------------------------------------- */

/* MXNet's element-wise operators by name (legacy, NNVM and NumPy spellings):
 * the IR op, and its operands: two inputs, one input, or the input and the
 * attribute 'scalar' (x op c, or reversed c op x). */
enum ew_kind { EW_BINARY, EW_UNARY, EW_SCALAR, EW_RSCALAR };
static const struct elementwise {
    const char *name;
    enum dm_op op;
    enum ew_kind kind;
} ELEMENTWISE[] = {
    {"elemwise_add", DM_OP_Add, EW_BINARY},      {"_Plus", DM_OP_Add, EW_BINARY},
    {"_plus", DM_OP_Add, EW_BINARY},             {"_add", DM_OP_Add, EW_BINARY},
    {"broadcast_add", DM_OP_Add, EW_BINARY},     {"broadcast_plus", DM_OP_Add, EW_BINARY},
    {"_npi_add", DM_OP_Add, EW_BINARY},          {"elemwise_sub", DM_OP_Sub, EW_BINARY},
    {"_Minus", DM_OP_Sub, EW_BINARY},            {"_minus", DM_OP_Sub, EW_BINARY},
    {"_sub", DM_OP_Sub, EW_BINARY},              {"broadcast_sub", DM_OP_Sub, EW_BINARY},
    {"broadcast_minus", DM_OP_Sub, EW_BINARY},   {"elemwise_mul", DM_OP_Mul, EW_BINARY},
    {"_Mul", DM_OP_Mul, EW_BINARY},              {"_mul", DM_OP_Mul, EW_BINARY},
    {"broadcast_mul", DM_OP_Mul, EW_BINARY},     {"elemwise_div", DM_OP_Div, EW_BINARY},
    {"_Div", DM_OP_Div, EW_BINARY},              {"_div", DM_OP_Div, EW_BINARY},
    {"broadcast_div", DM_OP_Div, EW_BINARY},     {"_Maximum", DM_OP_Max, EW_BINARY},
    {"_maximum", DM_OP_Max, EW_BINARY},          {"broadcast_maximum", DM_OP_Max, EW_BINARY},
    {"_Minimum", DM_OP_Min, EW_BINARY},          {"_minimum", DM_OP_Min, EW_BINARY},
    {"broadcast_minimum", DM_OP_Min, EW_BINARY},
    {"_plus_scalar", DM_OP_Add, EW_SCALAR},      {"_PlusScalar", DM_OP_Add, EW_SCALAR},
    {"_minus_scalar", DM_OP_Sub, EW_SCALAR},     {"_MinusScalar", DM_OP_Sub, EW_SCALAR},
    {"_rminus_scalar", DM_OP_Sub, EW_RSCALAR},   {"_RMinusScalar", DM_OP_Sub, EW_RSCALAR},
    {"_mul_scalar", DM_OP_Mul, EW_SCALAR},       {"_MulScalar", DM_OP_Mul, EW_SCALAR},
    {"_div_scalar", DM_OP_Div, EW_SCALAR},       {"_DivScalar", DM_OP_Div, EW_SCALAR},
    {"_rdiv_scalar", DM_OP_Div, EW_RSCALAR},     {"_RDivScalar", DM_OP_Div, EW_RSCALAR},
    {"_power_scalar", DM_OP_Pow, EW_SCALAR},     {"_PowerScalar", DM_OP_Pow, EW_SCALAR},
    {"_maximum_scalar", DM_OP_Max, EW_SCALAR},   {"_MaximumScalar", DM_OP_Max, EW_SCALAR},
    {"_minimum_scalar", DM_OP_Min, EW_SCALAR},   {"_MinimumScalar", DM_OP_Min, EW_SCALAR},
    {"relu", DM_OP_Relu, EW_UNARY},              {"sigmoid", DM_OP_Sigmoid, EW_UNARY},
    {"tanh", DM_OP_Tanh, EW_UNARY},              {"exp", DM_OP_Exp, EW_UNARY},
    {"log", DM_OP_Log, EW_UNARY},                {"sqrt", DM_OP_Sqrt, EW_UNARY},
    {"abs", DM_OP_Abs, EW_UNARY},                {"negative", DM_OP_Neg, EW_UNARY},
    {"softsign", DM_OP_Softsign, EW_UNARY},
};

static const struct elementwise *elementwise(const char *op)
{
    for (size_t k = 0; k < sizeof ELEMENTWISE / sizeof ELEMENTWISE[0]; k++)
        if (!strcmp(op, ELEMENTWISE[k].name))
            return &ELEMENTWISE[k];
    return NULL;
}

static void wrong_arity(struct mx *m, int n_in)
{
    fail(m, DNNMEM_E_MODEL, "node '%s' (%s): %d inputs is the wrong count", m->cur_name,
         m->cur_op, n_in);
}

/* The slot kind of input k of an op (for classifying variables). */
static enum slot slot_of(const char *op, int k)
{
    if (k == 0)
        return S_DATA;
    if (!strcmp(op, "Convolution") || !strcmp(op, "Deconvolution") ||
        !strcmp(op, "FullyConnected") || !strcmp(op, "Embedding") ||
        !strcmp(op, "LeakyReLU") || !strcmp(op, "Convolution_v1"))
        return S_PARAM;
    if (!strcmp(op, "BatchNorm") || !strcmp(op, "BatchNorm_v1"))
        return k <= 2 ? S_PARAM : S_AUX;
    if (!strcmp(op, "RNN"))
        return k == 1 ? S_PARAM : S_DATA;
    if (!strcmp(op, "SoftmaxOutput") || !strcmp(op, "Softmax") || !strcmp(op, "WarpCTC") ||
        strstr(op, "RegressionOutput") || strstr(op, "CTCLoss") || strstr(op, "ctc_loss"))
        return S_LABEL;
    return S_DATA;
}

/* Backward mirroring (src/train/train.c, "MXNet": mirroring): the verdict of
 * graph_executor.cc's need_mirror for this MXNet node, by its registered
 * operator name (aliases share it: "Softmax" is SoftmaxOutput, "concat"
 * Concat), on every IR node it became: Dropout never; __force_mirroring__
 * (parsed as a dmlc bool) always; else, under MXNET_BACKWARD_DO_MIRROR,
 * every op but Convolution, FullyConnected, Concat and SoftmaxOutput (and
 * BatchNorm, CuDNNBatchNorm in the older list). Convolution_v1 and
 * BatchNorm_v1 are other operators: mirrored. */
static void tag_mirror(struct mx *m, int32_t first)
{
    const char *op = m->cur_op;
    bool force = battr(m, "__force_mirroring__", false);
    int64_t v = DM_MX_MIRROR_YES;
    if (!strcmp(op, "Dropout"))
        v = DM_MX_MIRROR_NEVER;
    else if (force)
        v = DM_MX_MIRROR_FORCED;
    else if (!strcmp(op, "Convolution") || !strcmp(op, "FullyConnected") ||
             !strcmp(op, "Concat") || !strcmp(op, "concat") || !strcmp(op, "SoftmaxOutput") ||
             !strcmp(op, "Softmax"))
        v = DM_MX_MIRROR_NEVER;
    else if (!strcmp(op, "BatchNorm") || !strcmp(op, "CuDNNBatchNorm"))
        v = DM_MX_MIRROR_OLD_NEVER;
    for (int32_t k = first; m->st == DNNMEM_OK && k < m->g->n_nodes; k++) {
        struct dm_node *n = &m->g->nodes[k];
        struct dm_attr *a;
        if (n->n_attr >= DM_NODE_MAX_ATTRS) /* the IR op decides (train.c) */
            continue;
        if (dm_node_attr_add(m->g, n, &a) != DNNMEM_OK) {
            fail(m, DNNMEM_E_NOMEM, "out of memory");
            return;
        }
        *a = (struct dm_attr){.name = "mx_mirror", .kind = DM_ATTR_INT, .i = v};
    }
}

static int32_t dropout(struct mx *m, int32_t x)
{
    double p = fattr(m, "p", 0.5);
    static const char *const modes[] = {"training", "always", NULL};
    cattr(m, "mode", "training", modes);
    int64_t axes[DM_MAX_DIMS];
    if (tattr(m, "axes", axes, DM_MAX_DIMS) > 0)
        fail(m, DNNMEM_E_UNSUPPORTED,
             "node '%s' (Dropout): variational dropout (axes) is not supported", m->cur_name);
    if (m->st == DNNMEM_OK && (p < 0 || p >= 1))
        bad_attr(m, "p", sattr(m, "p"), "a number in [0, 1)");
    const char *name = m->next_out;
    m->next_out = NULL;
    int32_t r = const_f(m, p);
    m->next_out = name;
    return op1(m, DM_OP_Dropout, true, 2, x, r);
}

static int32_t concat(struct mx *m, const int32_t *in, int n_in)
{
    int64_t dim = iattr(m, "dim", 1, -DM_MAX_DIMS, DM_MAX_DIMS - 1);
    int64_t na = iattr(m, "num_args", n_in, 1, 1 << 20);
    if (m->st == DNNMEM_OK && na != n_in)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (Concat): num_args is %lld but it has %d inputs",
                    m->cur_name, (long long)na, n_in), -1;
    struct dm_node *n = emit(m, DM_OP_Concat, n_in, in, 1, true);
    set_i(m, "axis", dim);
    return n ? n->out[0] : -1;
}

/* The loss per sequence [N] of activations [T, N, alphabet]: built as
 * log_softmax then a sum over T and the alphabet (the forward's
 * log-probabilities are the large intermediate); the label and the optional
 * lengths are inputs the sum does not read. */
static int32_t ctc_loss(struct mx *m, int32_t x)
{
    static const char *const blanks[] = {"first", "last", NULL};
    battr(m, "use_data_lengths", false);
    battr(m, "use_label_lengths", false);
    cattr(m, "blank_label", "first", blanks);
    const char *name = m->next_out;
    m->next_out = NULL;
    int32_t lp = op1(m, DM_OP_LogSoftmax, false, 1, x);
    set_i(m, "axis", -1);
    int32_t ax = const_ints(m, 2, (int64_t[]){0, 2});
    m->next_out = name;
    int32_t y = op1(m, DM_OP_ReduceSum, true, 2, lp, ax);
    set_i(m, "keepdims", 0);
    return y;
}

/* SliceChannel / split: num_outputs outputs, set here (not one y). */
static void slice_channel(struct mx *m, int32_t x)
{
    const char *op = m->cur_op;
    int64_t no = iattr(m, "num_outputs", -1, 1, MAX_OUTPUTS);
    int64_t axis = iattr(m, "axis", 1, -DM_MAX_DIMS, DM_MAX_DIMS - 1);
    bool squeeze = battr(m, "squeeze_axis", false);
    if (m->st != DNNMEM_OK)
        return;
    if (no < 0) {
        fail(m, DNNMEM_E_MODEL, "node '%s' (%s): attribute 'num_outputs' is missing", m->cur_name,
             op);
        return;
    }
    m->out[m->cur_id] = dm_arena_array(&m->g->arena, (size_t)no, sizeof(int32_t));
    if (!m->out[m->cur_id]) {
        oom(m);
        return;
    }
    m->n_out[m->cur_id] = (int)no;
    /* outputs "<name>_output<k>": Split's own, or (squeeze_axis) the
     * Squeeze views of them */
    const char *base = m->next_out;
    m->next_out = NULL;
    const char **names = dm_arena_array(&m->g->arena, (size_t)no, sizeof *names);
    for (int64_t k = 0; names && k < no; k++)
        if (!(names[k] = dm_arena_printf(&m->g->arena, "%s%lld", base, (long long)k)))
            names = NULL;
    if (!names) {
        oom(m);
        return;
    }
    m->out_names = squeeze ? NULL : names;
    struct dm_node *n = emit(m, DM_OP_Split, 1, &x, (int)no, !squeeze);
    if (!n)
        return;
    set_i(m, "axis", axis);
    int32_t *outs = n->out;
    for (int64_t k = 0; k < no && m->st == DNNMEM_OK; k++) {
        if (!squeeze) {
            m->out[m->cur_id][k] = outs[k];
            continue;
        }
        int32_t ax = const_ints(m, 1, (int64_t[]){axis});
        m->aux_out = names[k];
        m->out[m->cur_id][k] = op1(m, DM_OP_Squeeze, false, 2, outs[k], ax);
    }
}

static int32_t embedding(struct mx *m, const int32_t *in, int n_in)
{
    int64_t id = iattr(m, "input_dim", -1, 1, MAX_DIM), od = iattr(m, "output_dim", -1, 1, MAX_DIM);
    const char *dt = sattr(m, "dtype");
    if (m->st != DNNMEM_OK)
        return -1;
    if (id < 0 || od < 0)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (Embedding): attributes 'input_dim' and "
                    "'output_dim' are required", m->cur_name), -1;
    if (n_in != 2)
        return wrong_arity(m, n_in), -1;
    if (dt && mx_dtype_name(dt) != DM_UNDEFINED && unshaped(m, in[1]))
        m->g->tensors[in[1]].dtype = mx_dtype_name(dt);
    param_shape(m, in[1], 2, (int64_t[]){id, od});
    return op1(m, DM_OP_Gather, true, 2, in[1], in[0]);
}

static int32_t transpose(struct mx *m, int32_t x)
{
    int64_t axes[DM_MAX_DIMS];
    int n = tattr(m, "axes", axes, DM_MAX_DIMS);
    int32_t y = op1(m, DM_OP_Transpose, true, 1, x);
    if (n > 0)
        set_ints(m, "perm", n, axes);
    return y;
}

static int32_t expand_dims(struct mx *m, int32_t x)
{
    int64_t axis = iattr(m, "axis", INT64_MIN, -DM_MAX_DIMS, DM_MAX_DIMS);
    if (m->st != DNNMEM_OK)
        return -1;
    if (axis == INT64_MIN)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (expand_dims): attribute 'axis' is missing",
                    m->cur_name), -1;
    const char *name = m->next_out;
    m->next_out = NULL;
    int32_t a = const_ints(m, 1, &axis);
    m->next_out = name;
    return op1(m, DM_OP_Unsqueeze, true, 2, x, a);
}

static int32_t squeeze(struct mx *m, int32_t x)
{
    int64_t axes[DM_MAX_DIMS];
    const char *v = sattr(m, "axis");
    int n = v && !strcmp(v, "None") ? 0 : tattr(m, "axis", axes, DM_MAX_DIMS);
    if (m->st != DNNMEM_OK)
        return -1;
    if (n <= 0)
        return op1(m, DM_OP_Squeeze, true, 1, x);
    const char *name = m->next_out;
    m->next_out = NULL;
    int32_t a = const_ints(m, n, axes);
    m->next_out = name;
    return op1(m, DM_OP_Squeeze, true, 2, x, a);
}

static int32_t clip(struct mx *m, int32_t x)
{
    if (!sattr(m, "a_min") || !sattr(m, "a_max"))
        return fail(m, DNNMEM_E_MODEL, "node '%s' (clip): attributes 'a_min' and 'a_max' are "
                    "required", m->cur_name), -1;
    double lo = fattr(m, "a_min", 0), hi = fattr(m, "a_max", 0);
    const char *name = m->next_out;
    m->next_out = NULL;
    int32_t a = const_f(m, lo), b = const_f(m, hi);
    m->next_out = name;
    return op1(m, DM_OP_Clip, true, 3, x, a, b);
}

static int32_t cast(struct mx *m, int32_t x)
{
    const char *dt = sattr(m, "dtype");
    if (m->st != DNNMEM_OK)
        return -1;
    enum dm_dtype t = dt ? mx_dtype_name(dt) : DM_UNDEFINED;
    if (t == DM_UNDEFINED) {
        if (dt)
            bad_attr(m, "dtype", dt, "a dtype name (float32, float16, int32, ...)");
        else
            fail(m, DNNMEM_E_MODEL, "node '%s' (Cast): attribute 'dtype' is missing", m->cur_name);
        return -1;
    }
    int32_t y = op1(m, DM_OP_Cast, true, 1, x);
    set_i(m, "to", t);
    return y;
}

static void build_op(struct mx *m, const int32_t *in, int n_in)
{
    const char *op = m->cur_op;
    int32_t x = n_in > 0 ? in[0] : -1, y = -1;
    const struct elementwise *ew = elementwise(op);
    if (ew && ew->kind == EW_BINARY) {
        if (n_in != 2) {
            wrong_arity(m, n_in);
            return;
        }
        y = op1(m, ew->op, true, 2, in[0], in[1]);
    } else if (ew && ew->kind == EW_UNARY) {
        y = op1(m, ew->op, true, 1, x);
    } else if (ew) {
        y = scalar_op(m, ew->op, x, ew->kind == EW_RSCALAR);
    } else if (!strcmp(op, "Convolution") || !strcmp(op, "Convolution_v1")) {
        y = convolution(m, in, n_in, false);
    } else if (!strcmp(op, "Deconvolution")) {
        y = convolution(m, in, n_in, true);
    } else if (!strcmp(op, "FullyConnected")) {
        y = fully_connected(m, in, n_in);
    } else if (!strcmp(op, "BatchNorm") || !strcmp(op, "BatchNorm_v1")) {
        y = batch_norm(m, in, n_in);
    } else if (!strcmp(op, "Activation")) {
        y = activation(m, x);
    } else if (!strcmp(op, "LeakyReLU")) {
        y = leaky_relu(m, in, n_in);
    } else if (!strcmp(op, "Pooling") || !strcmp(op, "Pooling_v1")) {
        y = pooling(m, x);
    } else if (!strcmp(op, "Flatten") || !strcmp(op, "flatten")) {
        y = op1(m, DM_OP_Flatten, true, 1, x);
        set_i(m, "axis", 1);
    } else if (!strcmp(op, "Dropout")) {
        y = dropout(m, x);
    } else if (!strcmp(op, "Concat") || !strcmp(op, "concat")) {
        y = concat(m, in, n_in);
    } else if (!strcmp(op, "add_n") || !strcmp(op, "ElementWiseSum") || !strcmp(op, "_sum")) {
        struct dm_node *n = emit(m, DM_OP_Sum, n_in, in, 1, true);
        y = n ? n->out[0] : -1;
    } else if (!strcmp(op, "SoftmaxOutput") || !strcmp(op, "Softmax")) {
        y = softmax_output(m, in, n_in, false);
    } else if (!strcmp(op, "SoftmaxActivation")) {
        static const char *const modes[] = {"instance", "channel", NULL};
        cattr(m, "mode", "instance", modes);
        y = op1(m, DM_OP_Softmax, true, 1, x);
        set_i(m, "axis", 1);
    } else if (!strcmp(op, "softmax") || !strcmp(op, "log_softmax")) {
        int64_t axis = iattr(m, "axis", -1, -DM_MAX_DIMS, DM_MAX_DIMS - 1);
        y = op1(m, op[0] == 'l' ? DM_OP_LogSoftmax : DM_OP_Softmax, true, 1, x);
        set_i(m, "axis", axis);
    } else if (!strcmp(op, "LinearRegressionOutput") || !strcmp(op, "MAERegressionOutput") ||
               !strcmp(op, "LogisticRegressionOutput")) {
        /* forward: the data (logistic: its sigmoid); the label is shaped like it */
        fattr(m, "grad_scale", 1);
        if (n_in >= 2)
            param_derive(m, in[1], &(struct dm_derive){.from = x, .rule = DM_DERIVE_SAME});
        y = op1(m, op[1] == 'o' ? DM_OP_Sigmoid : DM_OP_Identity, true, 1, x);
        set_i(m, "mx_loss", 1); /* as SoftmaxOutput's */
    } else if (!strcmp(op, "CTCLoss") || !strcmp(op, "ctc_loss") || !strcmp(op, "_contrib_CTCLoss") ||
               !strcmp(op, "_contrib_ctc_loss")) {
        y = ctc_loss(m, x);
    } else if (!strcmp(op, "WarpCTC")) {
        /* forward: the softmax of the activations [T * N, alphabet] (plugin/
         * warpctc); the CTC gradient is its backward. The label the plugin
         * reads takes no part in the forward result. */
        int64_t ll = iattr(m, "label_length", 0, 0, MAX_DIM);
        int64_t il = iattr(m, "input_length", 0, 0, MAX_DIM);
        /* its label: int32 [label_length * (rows / input_length)] for the
         * 2-D activations (WarpCTCProp::InferShape and InferType,
         * plugin/warpctc/warpctc-inl.h, 1.9.1) */
        if (n_in >= 2 && ll > 0 && il > 0 && m->st == DNNMEM_OK &&
            m->g->tensors[in[1]].role == DM_ROLE_INPUT) {
            param_derive(m, in[1], &(struct dm_derive){.from = x, .rule = DM_DERIVE_DIM, .at = 0,
                                                       .axis = 0, .rank = 1, .dims = {-1},
                                                       .div = il, .mul = ll});
            m->g->tensors[in[1]].dtype = DM_INT32;
        }
        y = op1(m, DM_OP_Softmax, true, 1, x);
        set_i(m, "axis", -1);
    } else if (!strcmp(op, "Reshape") || !strcmp(op, "reshape")) {
        y = reshape(m, x);
    } else if (!strcmp(op, "SliceChannel") || !strcmp(op, "split")) {
        slice_channel(m, x);
        return;
    } else if (!strcmp(op, "Embedding")) {
        y = embedding(m, in, n_in);
    } else if (!strcmp(op, "transpose")) {
        y = transpose(m, x);
    } else if (!strcmp(op, "expand_dims")) {
        y = expand_dims(m, x);
    } else if (!strcmp(op, "squeeze")) {
        y = squeeze(m, x);
    } else if (!strcmp(op, "sum") || !strcmp(op, "sum_axis")) {
        y = reduce(m, DM_OP_ReduceSum, x);
    } else if (!strcmp(op, "mean")) {
        y = reduce(m, DM_OP_ReduceMean, x);
    } else if (!strcmp(op, "max") || !strcmp(op, "max_axis")) {
        y = reduce(m, DM_OP_ReduceMax, x);
    } else if (!strcmp(op, "min") || !strcmp(op, "min_axis")) {
        y = reduce(m, DM_OP_ReduceMin, x);
    } else if (!strcmp(op, "clip")) {
        y = clip(m, x);
    } else if (!strcmp(op, "Cast") || !strcmp(op, "cast")) {
        y = cast(m, x);
    } else if (!strcmp(op, "BlockGrad") || !strcmp(op, "stop_gradient") || !strcmp(op, "_copy") ||
               !strcmp(op, "identity")) {
        y = op1(m, DM_OP_Identity, true, 1, x);
    } else if (!strcmp(op, "RNN")) {
        rnn(m, in, n_in);
        return;
    } else {
        fail(m, DNNMEM_E_UNSUPPORTED, "node '%s': op '%s' is not supported", m->cur_name, op);
        return;
    }
    if (m->st != DNNMEM_OK)
        return;
    if (y < 0) {
        fail(m, DNNMEM_E_INTERNAL, "node '%s' (%s) made no output", m->cur_name, op);
        return;
    }
    m->out[m->cur_id] = dm_arena_array(&m->g->arena, 1, sizeof(int32_t));
    if (!m->out[m->cur_id]) {
        oom(m);
        return;
    }
    m->out[m->cur_id][0] = y;
    m->n_out[m->cur_id] = 1;
}

static int32_t rnn(struct mx *m, const int32_t *in, int n_in)
{
    static const char *const modes[] = {"lstm", "gru", "rnn_relu", "rnn_tanh", NULL};
    const char *mode = cattr(m, "mode", NULL, modes);
    int64_t H = iattr(m, "state_size", -1, 1, MAX_DIM);
    int64_t L = iattr(m, "num_layers", 1, 1, 1024);
    bool bi = battr(m, "bidirectional", false);
    bool state_out = battr(m, "state_outputs", false);
    double p = fattr(m, "p", 0);
    const char *v = sattr(m, "projection_size");
    int64_t proj = v && !strcmp(v, "None") ? 0 : iattr(m, "projection_size", 0, 0, MAX_DIM);
    if (m->st != DNNMEM_OK)
        return -1;
    if (!mode || H < 0)
        return fail(m, DNNMEM_E_MODEL, "node '%s' (RNN): attributes 'mode' and 'state_size' are required",
                    m->cur_name), -1;
    if (proj > 0)
        return fail(m, DNNMEM_E_UNSUPPORTED, "node '%s' (RNN): projection_size is not supported",
                    m->cur_name), -1;
    bool lstm = !strcmp(mode, "lstm");
    if (n_in < 3 || (lstm && n_in < 4))
        return fail(m, DNNMEM_E_MODEL,
                    "node '%s' (RNN): has %d inputs; data, parameters, state%s expected", m->cur_name,
                    n_in, lstm ? " and state_cell" : ""), -1;
    int64_t gates = lstm ? 4 : !strcmp(mode, "gru") ? 3 : 1, dirs = bi ? 2 : 1;
    int32_t x = in[0], params = in[1];
    param_derive(m, params, &(struct dm_derive){.from = x, .rule = DM_DERIVE_RNN, .gates = gates,
                                                .hidden = H, .layers = L, .dirs = dirs});
    /* begin states [L * dirs, N, H]: inputs, shaped from the data [T, N, C] */
    for (int k = 2; k < (lstm ? 4 : 3); k++) {
        struct dm_derive dv = {.from = x, .rule = DM_DERIVE_DIM, .at = 1, .axis = 1, .rank = 3,
                               .dims = {L * dirs, -1, H}, .div = 1};
        if (m->g->tensors[in[k]].role == DM_ROLE_INPUT)
            param_derive(m, in[k], &dv);
    }
    /* one MxRNN node per layer, each reading the whole vector (cuDNN takes
     * every layer's weights as views of it); layer l + 1 reads layer l's
     * output; the begin states go to the first. The dropout between layers
     * (p) is not modelled. */
    (void)p;
    int n_state = lstm ? 2 : 1;
    int n_out = state_out ? 1 + n_state : 1;
    m->out[m->cur_id] = dm_arena_array(&m->g->arena, (size_t)n_out, sizeof(int32_t));
    if (!m->out[m->cur_id])
        return oom(m);
    int32_t cur = x;
    struct dm_node *nd = NULL;
    for (int64_t l = 0; l < L && m->st == DNNMEM_OK; l++) {
        bool last = l == L - 1;
        int32_t ins[4] = {cur, params, l == 0 ? in[2] : -1, l == 0 && lstm ? in[3] : -1};
        if (last && n_out > 1) {
            const char **names = dm_arena_array(&m->g->arena, 3, sizeof *names);
            if (!names)
                return oom(m);
            names[0] = m->next_out;
            names[1] = dm_arena_printf(&m->g->arena, "%s_state_output", m->cur_name);
            names[2] = dm_arena_printf(&m->g->arena, "%s_statecell_output", m->cur_name);
            if (!names[0] || !names[1] || !names[2])
                return oom(m);
            m->out_names = names;
        }
        nd = emit(m, DM_OP_MxRNN, l == 0 ? 2 + n_state : 2, ins, last ? n_out : 1, last);
        set_i(m, "hidden_size", H);
        set_i(m, "gates", gates);
        set_i(m, "num_layers", L);
        set_s(m, "direction", bi ? "bidirectional" : "forward");
        if (nd)
            cur = nd->out[0];
    }
    if (m->st != DNNMEM_OK || !nd)
        return -1;
    for (int k = 0; k < n_out; k++)
        m->out[m->cur_id][k] = nd->out[k];
    m->n_out[m->cur_id] = n_out;
    return cur;
}

/* ---- the file ------------------------------------------------------------------ */

bool dm_is_mxnet(json_t *root)
{
    /* MXNet writes "nodes", "arg_nodes" and "heads" at the top level;
     * transformers configs and Keras models use none of them (Keras:
     * "inbound_nodes", deeper) */
    return json_object_get(root, "nodes") &&
           (json_object_get(root, "heads") || json_object_get(root, "arg_nodes"));
}

/* [node, output] or [node, output, version]: a reference to an earlier
 * node's output (`before`: the referring node, or n for heads). */
static bool entry(struct mx *m, json_t *e, size_t before, const char *what, size_t *node, int *idx)
{
    size_t len = json_is_array(e) ? json_array_size(e) : 0;
    json_t *a = len ? json_array_get(e, 0) : NULL, *b = len > 1 ? json_array_get(e, 1) : NULL;
    if ((len != 2 && len != 3) || !json_is_integer(a) || !json_is_integer(b) ||
        (len == 3 && !json_is_integer(json_array_get(e, 2)))) {
        fail(m, DNNMEM_E_PARSE, "%s: an entry must be [node, output] or [node, output, version]", what);
        return false;
    }
    json_int_t id = json_integer_value(a), k = json_integer_value(b);
    if (id < 0 || (size_t)id >= before) {
        fail(m, DNNMEM_E_MODEL, "%s: refers to node %lld, which is not an earlier node", what,
             (long long)id);
        return false;
    }
    if (k < 0 || k >= MAX_OUTPUTS) {
        fail(m, DNNMEM_E_MODEL, "%s: output index %lld is out of range", what, (long long)k);
        return false;
    }
    *node = (size_t)id;
    *idx = (int)k;
    return true;
}

/* The tensor of output idx of node id. */
static int32_t output_of(struct mx *m, size_t id, int idx, const char *what)
{
    if (!m->out[id] || m->n_out[id] == 0) {
        fail(m, DNNMEM_E_MODEL, "%s: node '%s' has no output the graph can use", what,
             json_string_value(json_object_get(json_array_get(m->nodes, id), "name")));
        return -1;
    }
    if (idx >= m->n_out[id]) {
        fail(m, DNNMEM_E_UNSUPPORTED, "%s: output %d of node '%s', which has %d", what, idx,
             json_string_value(json_object_get(json_array_get(m->nodes, id), "name")), m->n_out[id]);
        return -1;
    }
    return m->out[id][idx];
}

static enum dm_dtype mx_dtype_code(long long c)
{
    /* mshadow's type flags: 0 float32, 1 float64, 2 float16, 3 uint8, 4
     * int32, 5 int8, 6 int64, 7 bool, 12 bfloat16 */
    switch (c) {
    case 0: return DM_FLOAT;
    case 1: return DM_DOUBLE;
    case 2: return DM_FLOAT16;
    case 3: return DM_UINT8;
    case 4: return DM_INT32;
    case 5: return DM_INT8;
    case 6: return DM_INT64;
    case 7: return DM_BOOL;
    case 12: return DM_BFLOAT16;
    default: return DM_UNDEFINED;
    }
}

/* A variable: a weight (read in a parameter slot) or a graph input. */
static void variable(struct mx *m)
{
    struct dm_graph *g = m->g;
    uint8_t kind = m->var_kind[m->cur_id];
    if (!kind)
        return; /* read by no node: not part of the graph */
    if (!unique_tensor(m, m->cur_name))
        return;
    int32_t t = dm_graph_add_tensor(g, m->cur_name);
    if (t < 0) {
        oom(m);
        return;
    }
    struct dm_tensor *tt = &g->tensors[t];
    bool weight = kind - 1 == S_PARAM || kind - 1 == S_AUX;
    tt->role = weight ? DM_ROLE_WEIGHT : DM_ROLE_INPUT;
    tt->dtype = DM_FLOAT;
    const char *dt = sattr(m, "__dtype__");
    if (dt) {
        const char *p = dt;
        int64_t c;
        enum dm_dtype d = parse_int_at(&p, &c) && *skip_ws(p) == '\0' ? mx_dtype_code(c) : DM_UNDEFINED;
        if (d == DM_UNDEFINED) {
            bad_attr(m, "__dtype__", dt, "an MXNet dtype code (0 float32, 1 float64, 2 float16, ...)");
            return;
        }
        tt->dtype = d;
    }
    /* __shape__: used when every dim is known (0 or -1: deferred) */
    int64_t dims[DM_MAX_DIMS];
    int r = tattr(m, "__shape__", dims, DM_MAX_DIMS);
    if (m->st != DNNMEM_OK)
        return;
    bool known = r > 0;
    for (int k = 0; k < r; k++)
        known = known && dims[k] > 0 && dims[k] <= MAX_DIM;
    if (known)
        param_shape(m, t, r, dims);
    if (!weight) {
        int32_t *ins = dm_arena_array(&g->arena, (size_t)g->n_inputs + 1, sizeof *ins);
        if (!ins) {
            oom(m);
            return;
        }
        if (g->n_inputs)
            memcpy(ins, g->inputs, (size_t)g->n_inputs * sizeof *ins);
        ins[g->n_inputs++] = t;
        g->inputs = ins;
    }
    m->out[m->cur_id] = dm_arena_array(&g->arena, 1, sizeof(int32_t));
    if (!m->out[m->cur_id]) {
        oom(m);
        return;
    }
    m->out[m->cur_id][0] = t;
    m->n_out[m->cur_id] = 1;
}

/* The layout, from the first node's keys, and the producer string. */
static enum dnnmem_status identify(struct mx *m, json_t *root)
{
    struct dm_graph *g = m->g;
    m->layout = 11;
    for (size_t i = 0; i < m->n; i++) {
        json_t *node = json_array_get(m->nodes, i);
        if (json_object_get(node, "param") || json_object_get(node, "backward_source_id")) {
            m->layout = 8;
            break;
        }
        if (json_object_get(node, "attr"))
            m->layout = 9;
    }
    json_t *ver = json_object_get(json_object_get(root, "attrs"), "mxnet_version");
    long long v = json_is_array(ver) && json_is_integer(json_array_get(ver, 1))
                      ? (long long)json_integer_value(json_array_get(ver, 1))
                      : -1;
    g->format = "mxnet";
    g->opset = MX_OPSET;
    g->producer = v >= 0 ? dm_arena_printf(&g->arena, "mxnet %lld.%lld.%lld (symbol JSON, '%s')",
                                           v / 10000, v / 100 % 100, v % 100,
                                           m->layout == 8 ? "param" : m->layout == 9 ? "attr" : "attrs")
                         : dm_arena_printf(&g->arena, "mxnet symbol JSON, '%s' layout (%s)",
                                           m->layout == 8 ? "param" : m->layout == 9 ? "attr" : "attrs",
                                           m->layout == 8 ? "0.8" : m->layout == 9 ? "0.9-0.10"
                                                                                  : "0.11 or later");
    if (!g->producer)
        return oom(m), m->st;
    return DNNMEM_OK;
}

/* Pass 1: check every node; classify variables by their first reader. */
static enum dnnmem_status check_nodes(struct mx *m, json_t *heads)
{
    for (size_t i = 0; i < m->n; i++) {
        json_t *node = json_array_get(m->nodes, i);
        json_t *op = json_object_get(node, "op"), *name = json_object_get(node, "name");
        json_t *inputs = json_object_get(node, "inputs");
        if (!json_is_object(node) || !json_is_string(op) || !json_is_string(name) ||
            (inputs && !json_is_array(inputs)))
            return fail(m, DNNMEM_E_PARSE, "node %zu: needs a string 'op', a string 'name' and an "
                        "array 'inputs'", i);
        if (json_string_length(name) == 0 || json_string_length(name) > 1024)
            return fail(m, DNNMEM_E_MODEL, "node %zu: its name is empty or too long", i);
        const char *ops = json_string_value(op);
        bool var = !strcmp(ops, "null");
        if (var && json_array_size(inputs) > 0)
            return fail(m, DNNMEM_E_MODEL, "node '%s': a variable cannot have inputs",
                        json_string_value(name));
        for (size_t k = 0; k < json_array_size(inputs); k++) {
            char what[160];
            snprintf(what, sizeof what, "node '%s' input %zu", json_string_value(name), k);
            size_t src;
            int idx;
            if (!entry(m, json_array_get(inputs, k), i, what, &src, &idx))
                return m->st;
            json_t *sn = json_array_get(m->nodes, src);
            if (!strcmp(json_string_value(json_object_get(sn, "op")), "null") && !m->var_kind[src]) {
                if (idx != 0)
                    return fail(m, DNNMEM_E_MODEL, "%s: variable '%s' has one output, not %d", what,
                                json_string_value(json_object_get(sn, "name")), idx + 1);
                m->var_kind[src] = (uint8_t)(1 + slot_of(ops, (int)k));
            }
        }
    }
    for (size_t h = 0; h < json_array_size(heads); h++) {
        size_t src;
        int idx;
        if (!entry(m, json_array_get(heads, h), m->n, "heads", &src, &idx))
            return m->st;
        if (!m->var_kind[src])
            m->var_kind[src] = 1 + S_DATA;
    }
    if (json_array_size(heads) == 0)
        return fail(m, DNNMEM_E_MODEL, "the symbol has no heads (outputs)");
    return DNNMEM_OK;
}

/* Pass 2: build node i (a variable, or an operator on its inputs). */
static void build_node(struct mx *m, size_t i)
{
    struct dm_graph *g = m->g;
    json_t *node = json_array_get(m->nodes, i);
    json_t *inputs = json_object_get(node, "inputs");
    m->cur = node;
    m->cur_id = i;
    m->cur_name = json_string_value(json_object_get(node, "name"));
    m->cur_op = json_string_value(json_object_get(node, "op"));
    m->aux_count = 0;
    if (!strcmp(m->cur_op, "null")) {
        variable(m);
        return;
    }
    size_t n_in = json_array_size(inputs);
    int32_t *in = calloc(n_in + 1, sizeof *in);
    if (!in) {
        oom(m);
        return;
    }
    for (size_t k = 0; k < n_in && m->st == DNNMEM_OK; k++) {
        size_t src;
        int idx;
        char what[160];
        snprintf(what, sizeof what, "node '%s' input %zu", m->cur_name, k);
        if (entry(m, json_array_get(inputs, k), i, what, &src, &idx))
            in[k] = output_of(m, src, idx, what);
    }
    if (m->st == DNNMEM_OK && n_in == 0)
        fail(m, DNNMEM_E_MODEL, "node '%s' (%s) has no inputs", m->cur_name, m->cur_op);
    /* Gluon can give two nodes one name (a block's activation reused):
     * the later one's IR names take its index, "relu0_fwd#12" */
    if (m->st == DNNMEM_OK &&
        dm_graph_find(g, dm_arena_printf(&g->arena, "%s_output", m->cur_name)) >= 0)
        m->cur_name = dm_arena_printf(&g->arena, "%s#%zu", m->cur_name, i);
    if (m->st == DNNMEM_OK && !m->cur_name)
        oom(m);
    if (m->st == DNNMEM_OK) {
        m->next_out = dm_arena_printf(&g->arena, "%s_output", m->cur_name);
        if (!m->next_out)
            oom(m);
        else {
            int32_t first = g->n_nodes;
            build_op(m, in, (int)n_in);
            tag_mirror(m, first);
        }
        m->next_out = NULL;
    }
    free(in);
}

/* ---- begin states ---------------------------------------------------------- */

/* MXNet infers no shape for an unrolled cell's begin states: FullyConnected's
 * FInferShape returns before anything else while its data's shape is unknown
 * (src/operator/nn/fully_connected.cc, FullyConnectedShape, 1.9.1), and an
 * elementwise op only equates its operands' shapes. The caller binds them
 * (the lstm_ocr example's init_states, [batch, num_hidden]). They follow
 * from the cell's own operators, which these rules read:
 *  - a begin state an elementwise op of equal shapes combines with a shaped
 *    operand (the LSTM's c: forget gate * c) has that operand's shape
 *    (ElemwiseShape, src/operator/elemwise_op_common.h);
 *  - a begin state the hidden-to-hidden FullyConnected reads (h) is
 *    [N, num_hidden / gates]: its output is split into the gates by a
 *    SliceChannel of num_outputs gates, after the input-to-hidden sum (LSTM,
 *    python/mxnet/rnn/rnn_cell.py LSTMCell) or before it (GRUCell), and N is
 *    the batch of the input-to-hidden term it is added to.
 * A shape the caller gives wins (infer.c); anything else is left to the
 * caller, with the error that asks for it. */

/* Who reads each JSON node's outputs: for node i, uses[off[i] .. off[i + 1]). */
struct use {
    size_t node;
    int slot, idx;
};
struct uses {
    size_t *off;
    struct use *u;
};

static bool build_uses(struct mx *m, struct uses *us)
{
    size_t total = 0;
    for (size_t i = 0; i < m->n; i++)
        total += json_array_size(json_object_get(json_array_get(m->nodes, i), "inputs"));
    us->off = calloc(m->n + 1, sizeof *us->off);
    us->u = calloc(total + 1, sizeof *us->u);
    size_t *fill = calloc(m->n + 1, sizeof *fill);
    if (!us->off || !us->u || !fill) {
        free(fill);
        return false;
    }
    /* entries were checked by check_nodes: [node < i, output, (version)] */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < m->n; i++) {
            json_t *ins = json_object_get(json_array_get(m->nodes, i), "inputs");
            for (size_t k = 0; k < json_array_size(ins); k++) {
                json_t *e = json_array_get(ins, k);
                size_t src = (size_t)json_integer_value(json_array_get(e, 0));
                if (pass == 0) {
                    us->off[src + 1]++;
                    continue;
                }
                us->u[us->off[src] + fill[src]++] =
                    (struct use){i, (int)k, (int)json_integer_value(json_array_get(e, 1))};
            }
            if (pass == 0 && i == m->n - 1)
                for (size_t j = 0; j < m->n; j++)
                    us->off[j + 1] += us->off[j];
        }
    free(fill);
    return true;
}

static const char *op_at(struct mx *m, size_t i)
{
    return json_string_value(json_object_get(json_array_get(m->nodes, i), "op"));
}

/* A whole-number attribute of another node (already parsed strictly when
 * that node was built), or dflt. */
static int64_t int_attr_at(struct mx *m, size_t i, const char *key, int64_t dflt)
{
    const char *v = attr_of(m, json_array_get(m->nodes, i), key);
    int64_t r;
    return v && parse_int_at(&v, &r) ? r : dflt;
}

static bool same_shape_binary(const char *op)
{
    const struct elementwise *ew = elementwise(op);
    return ew && ew->kind == EW_BINARY && strncmp(op, "broadcast_", 10) != 0;
}

static bool is_sum(const char *op)
{
    return same_shape_binary(op) && elementwise(op)->op == DM_OP_Add;
}

/* The tensor of the other operand of binary node j (read in slot `slot`)
 * when it comes from a node before `before` and has, or will have, a shape:
 * else -1. */
static int32_t other_operand(struct mx *m, size_t j, int slot, size_t before)
{
    json_t *ins = json_object_get(json_array_get(m->nodes, j), "inputs");
    if (json_array_size(ins) != 2)
        return -1;
    json_t *e = json_array_get(ins, 1 - slot);
    size_t src = (size_t)json_integer_value(json_array_get(e, 0));
    int idx = (int)json_integer_value(json_array_get(e, 1));
    if (src >= before || !m->out[src] || idx >= m->n_out[src])
        return -1;
    int32_t t = m->out[src][idx];
    const struct dm_tensor *tt = &m->g->tensors[t];
    return tt->role == DM_ROLE_INPUT && tt->rank < 0 && !tt->derive ? -1 : t;
}

/* The split of FullyConnected node f's output into gates: the gate count and
 * the input-to-hidden term the batch is read from; false when f is not a
 * cell's hidden-to-hidden product. */
static bool cell_gates(struct mx *m, const struct uses *us, size_t f, int64_t *gates, int32_t *term)
{
    for (size_t a = us->off[f]; a < us->off[f + 1]; a++) {
        size_t j = us->u[a].node;
        const char *op = op_at(m, j);
        bool slice = !strcmp(op, "SliceChannel") || !strcmp(op, "split");
        if (us->u[a].idx != 0 || (!slice && !is_sum(op)))
            continue;
        int32_t t = is_sum(op) ? other_operand(m, j, us->u[a].slot, f) : -1;
        for (size_t b = us->off[j]; b < us->off[j + 1]; b++) {
            size_t k = us->u[b].node;
            const char *op2 = op_at(m, k);
            bool slice2 = !strcmp(op2, "SliceChannel") || !strcmp(op2, "split");
            if (slice ? is_sum(op2) : slice2) {
                size_t sl = slice ? j : k;
                int64_t axis = int_attr_at(m, sl, "axis", 1);
                *gates = int_attr_at(m, sl, "num_outputs", 0);
                *term = slice ? other_operand(m, k, us->u[b].slot, f) : t;
                if ((axis == 1 || axis == -1) && *gates > 0 && *term >= 0)
                    return true;
            }
        }
    }
    return false;
}

/* A WarpCTC label fed through Reshape (-1,) and Cast, as the lstm_ocr
 * example feeds it: [N, label_length], N = the activations' rows /
 * input_length (WarpCTCProp::InferShape, plugin/warpctc/warpctc-inl.h,
 * 1.9.1, asks for label_length * N elements; the example's iterator gives
 * the label as [batch, num_label]). Rule in *dv when the chain from node j
 * ends in a WarpCTC's label slot. */
static bool ctc_label(struct mx *m, const struct uses *us, size_t j, struct dm_derive *dv)
{
    for (int hops = 0; hops < 8; hops++) {
        const char *op = op_at(m, j);
        if (!strcmp(op, "WarpCTC")) {
            json_t *e = json_array_get(json_object_get(json_array_get(m->nodes, j), "inputs"), 0);
            size_t src = (size_t)json_integer_value(json_array_get(e, 0));
            int idx = (int)json_integer_value(json_array_get(e, 1));
            int64_t ll = int_attr_at(m, j, "label_length", 0), il = int_attr_at(m, j, "input_length", 0);
            if (ll <= 0 || il <= 0 || !m->out[src] || idx >= m->n_out[src])
                return false;
            *dv = (struct dm_derive){.from = m->out[src][idx], .rule = DM_DERIVE_DIM, .at = 0,
                                     .axis = 0, .rank = 2, .dims = {-1, ll}, .div = il};
            dv->why = dm_arena_printf(&m->g->arena,
                                      "[rows of '%s' / input_length %lld, label_length %lld]: "
                                      "the label WarpCTC reads, as MXNet's lstm_ocr example feeds it",
                                      m->g->tensors[dv->from].name, (long long)il, (long long)ll);
            return true;
        }
        const char *shape = attr_of(m, json_array_get(m->nodes, j), "shape");
        bool flat = (!strcmp(op, "Reshape") || !strcmp(op, "reshape")) && shape &&
                    (!strcmp(shape, "(-1,)") || !strcmp(shape, "(-1)"));
        bool cast = !strcmp(op, "Cast") || !strcmp(op, "cast");
        if ((!flat && !cast) || us->off[j + 1] - us->off[j] != 1)
            return false;
        j = us->u[us->off[j]].node;
    }
    return false;
}

/* Begin state t, read first by node j in slot `slot`: its shape's rule. */
static void begin_state(struct mx *m, const struct uses *us, int32_t t, size_t j, int slot)
{
    const char *op = op_at(m, j), *name = json_string_value(json_object_get(json_array_get(m->nodes, j), "name"));
    struct dm_derive dv = {.rule = DM_DERIVE_SAME};
    if (same_shape_binary(op)) {
        dv.from = other_operand(m, j, slot, j);
        if (dv.from < 0)
            return;
        dv.why = dm_arena_printf(&m->g->arena, "the shape of '%s', which '%s' (%s) combines it with",
                                 m->g->tensors[dv.from].name, name, op);
    } else if (slot == 0 && ctc_label(m, us, j, &dv)) {
        /* dv set */
    } else if (!strcmp(op, "FullyConnected") && slot == 0) {
        int64_t nh = int_attr_at(m, j, "num_hidden", 0), gates;
        int32_t term;
        if (nh <= 0 || !cell_gates(m, us, j, &gates, &term) || nh % gates)
            return;
        dv = (struct dm_derive){.from = term, .rule = DM_DERIVE_DIM, .at = 0, .axis = 0, .rank = 2,
                                .dims = {-1, nh / gates}, .div = 1};
        dv.why = dm_arena_printf(&m->g->arena,
                                 "[batch of '%s', %lld]: '%s' makes %lld gates of %lld (num_hidden "
                                 "%lld)", m->g->tensors[term].name, (long long)(nh / gates), name,
                                 (long long)gates, (long long)(nh / gates), (long long)nh);
    } else {
        return;
    }
    if (!dv.why)
        oom(m);
    param_derive(m, t, &dv);
}

static void derive_begin_states(struct mx *m)
{
    struct uses us = {0};
    if (!build_uses(m, &us)) {
        free(us.off);
        free(us.u);
        oom(m);
        return;
    }
    for (size_t v = 0; v < m->n && m->st == DNNMEM_OK; v++) {
        if (strcmp(op_at(m, v), "null") || !m->out[v] || us.off[v] == us.off[v + 1])
            continue;
        int32_t t = m->out[v][0];
        const struct dm_tensor *tt = &m->g->tensors[t];
        if (tt->role == DM_ROLE_INPUT && tt->rank < 0 && !tt->derive)
            begin_state(m, &us, t, us.u[us.off[v]].node, us.u[us.off[v]].slot);
    }
    free(us.off);
    free(us.u);
}

/* The graph's outputs (the heads); every weight has a shape or a way to one. */
static enum dnnmem_status set_outputs(struct mx *m, json_t *heads)
{
    struct dm_graph *g = m->g;
    g->outputs = dm_arena_array(&g->arena, json_array_size(heads) + 1, sizeof *g->outputs);
    if (!g->outputs)
        return oom(m), m->st;
    for (size_t h = 0; h < json_array_size(heads); h++) {
        size_t src;
        int idx;
        entry(m, json_array_get(heads, h), m->n, "heads", &src, &idx);
        int32_t t = output_of(m, src, idx, "heads");
        if (t < 0)
            return m->st;
        if (!g->tensors[t].is_output) {
            g->tensors[t].is_output = true;
            g->outputs[g->n_outputs++] = t;
        }
    }
    for (int32_t t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].role == DM_ROLE_WEIGHT && g->tensors[t].rank < 0 && !g->tensors[t].derive)
            return fail(m, DNNMEM_E_UNSUPPORTED,
                        "parameter '%s': no operator reading it says its shape", g->tensors[t].name);
    return DNNMEM_OK;
}

static enum dnnmem_status build(struct mx *m, json_t *root)
{
    struct dm_graph *g = m->g;
    if (!json_is_object(root))
        return fail(m, DNNMEM_E_PARSE, "an MXNet symbol must be a JSON object");
    m->nodes = json_object_get(root, "nodes");
    json_t *heads = json_object_get(root, "heads");
    if (!json_is_array(m->nodes) || !json_is_array(heads))
        return fail(m, DNNMEM_E_PARSE, "an MXNet symbol needs the arrays 'nodes' and 'heads'");
    m->n = json_array_size(m->nodes);
    if (m->n == 0 || m->n > (1u << 24))
        return fail(m, DNNMEM_E_MODEL, "the symbol has %zu nodes", m->n);
    m->out = calloc(m->n, sizeof *m->out);
    m->n_out = calloc(m->n, sizeof *m->n_out);
    m->var_kind = calloc(m->n, 1);
    if (!m->out || !m->n_out || !m->var_kind)
        return oom(m), m->st;

    if (identify(m, root) != DNNMEM_OK || check_nodes(m, heads) != DNNMEM_OK)
        return m->st;
    for (size_t i = 0; i < m->n && m->st == DNNMEM_OK; i++)
        build_node(m, i);
    if (m->st == DNNMEM_OK)
        derive_begin_states(m);
    if (m->st != DNNMEM_OK || set_outputs(m, heads) != DNNMEM_OK)
        return m->st;
    return dm_graph_finish(g, m->err);
}

enum dnnmem_status dm_load_mxnet(struct dm_graph *g, json_t *root, struct dnnmem_error *err)
{
    struct mx m = {.g = g, .err = err, .path = g->path, .st = DNNMEM_OK};
    enum dnnmem_status s = build(&m, root);
    free(m.out);
    free(m.n_out);
    free(m.var_kind);
    return s;
}
