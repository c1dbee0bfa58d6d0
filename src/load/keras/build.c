/* build.c: the Keras front end's helpers: errors, config fields, nodes and weights,
 * arrangements, activations (keras.h). */

#include "keras.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum dnnmem_status dm_kr_fail(struct keras *k, enum dnnmem_status s, const char *fmt, ...)
{
    if (k->st == DNNMEM_OK) {
        char buf[448];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (k->layer)
            k->st = dm_fail(k->err, s, "%s: layer '%s' (%s): %s", k->path, k->layer,
                            k->cls ? k->cls : "?", buf);
        else
            k->st = dm_fail(k->err, s, "%s: %s", k->path, buf);
    }
    return k->st;
}

int32_t dm_kr_oom(struct keras *k)
{
    dm_kr_fail(k, DNNMEM_E_NOMEM, "out of memory");
    return -1;
}

json_t *dm_kr_field(json_t *o, const char *key)
{
    json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

bool dm_kr_json_int(json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
        fabs(json_real_value(v)) < 9e15) {
        *out = (int64_t)json_real_value(v);
        return true;
    }
    return false;
}

/* An integer field in [lo, MAX_DIM]; dflt when absent (INT64_MIN: required). */
int64_t dm_kr_get_int(struct keras *k, json_t *cfg, const char *key, int64_t dflt, int64_t lo)
{
    json_t *v = dm_kr_field(cfg, key);
    int64_t i;
    if (k->st != DNNMEM_OK)
        return lo > 1 ? lo : 1;
    if (!v) {
        if (dflt == INT64_MIN)
            dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' is missing", key);
        return dflt == INT64_MIN ? 1 : dflt;
    }
    if (!dm_kr_json_int(v, &i)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' must be an integer", key);
        return 1;
    }
    if (i < lo) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' is %lld; at least %lld expected", key,
                   (long long)i, (long long)lo);
        return 1;
    }
    if (i > MAX_DIM) {
        dm_kr_fail(k, DNNMEM_E_SHAPE, "config field '%s' is %lld, an absurd size (at most %lld)",
                   key, (long long)i, (long long)MAX_DIM);
        return 1;
    }
    return i;
}

/* n integers: one integer repeated or a list of n (kernel_size, strides...);
 * dflt when absent (dflt < 0 with required: error). */
void dm_kr_get_ints(struct keras *k, json_t *cfg, const char *key, int n, int64_t dflt,
                    int64_t lo, int64_t *out)
{
    json_t *v = dm_kr_field(cfg, key);
    for (int i = 0; i < n; i++)
        out[i] = dflt > 0 ? dflt : 1;
    if (k->st != DNNMEM_OK)
        return;
    if (!v) {
        if (dflt < 0)
            dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' is missing", key);
        return;
    }
    int64_t x;
    if (dm_kr_json_int(v, &x)) {
        for (int i = 0; i < n; i++)
            out[i] = x;
    } else if (json_is_array(v) && json_array_size(v) == (size_t)n) {
        for (int i = 0; i < n; i++)
            if (!dm_kr_json_int(json_array_get(v, (size_t)i), &out[i])) {
                dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' must hold integers", key);
                return;
            }
    } else {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' must be an integer or a list of %d", key,
                   n);
        return;
    }
    for (int i = 0; i < n; i++)
        if (out[i] < lo || out[i] > MAX_DIM) {
            dm_kr_fail(k, out[i] > MAX_DIM ? DNNMEM_E_SHAPE : DNNMEM_E_MODEL,
                       "config field '%s' holds %lld; it must be in [%lld, %lld]", key,
                       (long long)out[i], (long long)lo, (long long)MAX_DIM);
            return;
        }
}

double dm_kr_get_num(struct keras *k, json_t *cfg, const char *key, double dflt, double lo,
                     double hi)
{
    json_t *v = dm_kr_field(cfg, key);
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_number(v)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' must be a number", key);
        return dflt;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' is %g; it must be in [%g, %g]", key, d, lo,
                   hi);
        return dflt;
    }
    return d;
}

bool dm_kr_get_bool(struct keras *k, json_t *cfg, const char *key, bool dflt)
{
    json_t *v = dm_kr_field(cfg, key);
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_boolean(v)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' must be true or false", key);
        return dflt;
    }
    return json_is_true(v);
}

const char *dm_kr_get_str(struct keras *k, json_t *cfg, const char *key, const char *dflt)
{
    json_t *v = dm_kr_field(cfg, key);
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_string(v)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' must be a string", key);
        return dflt;
    }
    return json_string_value(v);
}

/* A node of op `o` in the current scope, named "<scope>/<Op>" (then "_1",
 * ...), outputs "<node>_output_<k>". NULL after an error; valid until the
 * next node is made. */
struct dm_node *dm_kr_node(struct keras *k, enum dm_op o, int n_in, const int32_t *in, int n_out)
{
    struct dm_graph *g = k->g;
    if (k->st != DNNMEM_OK)
        return NULL;
    for (int i = 0; i < n_in; i++)
        if (in[i] < -1 || in[i] >= g->n_tensors) {
            dm_kr_fail(k, DNNMEM_E_INTERNAL, "a node input is missing");
            return NULL;
        }
    if (g->n_nodes > INT32_MAX / 4) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "too many nodes");
        return NULL;
    }
    uint32_t c = k->op_count[o]++;
    const char *name = c ? dm_arena_printf(&g->arena, "%s/%s_%u", k->scope, dm_ops[o].name, c)
                         : dm_arena_printf(&g->arena, "%s/%s", k->scope, dm_ops[o].name);
    struct dm_node *n = dm_graph_add_node(g, &k->cap_nodes, o, name, n_in, in, n_out);
    if (!n) {
        char msg[128];
        enum dnnmem_status s = dm_graph_add_fail(g, msg, sizeof msg);
        dm_kr_fail(k, s, "%s", msg);
        return NULL;
    }
    for (int i = 0; i < n_out; i++) {
        const char *tname = dm_arena_printf(&g->arena, "%s_output_%d", name, i);
        if (!tname) {
            dm_kr_oom(k);
            return NULL;
        }
        if (dm_graph_find(g, tname) >= 0) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "two tensors are named '%s' (a layer name used twice?)",
                       tname);
            return NULL;
        }
        if ((n->out[i] = dm_graph_add_tensor(g, tname)) < 0) {
            dm_kr_oom(k);
            return NULL;
        }
    }
    return n;
}

/* A node with one output; inputs as varargs (int32_t tensor ids, -1 omitted). */
int32_t dm_kr_op(struct keras *k, enum dm_op o, int n_in, ...)
{
    int32_t in[8];
    va_list ap;
    va_start(ap, n_in);
    for (int i = 0; i < n_in && i < 8; i++)
        in[i] = (int32_t)va_arg(ap, int);
    va_end(ap);
    struct dm_node *n = dm_kr_node(k, o, n_in < 8 ? n_in : 8, in, 1);
    return n ? n->out[0] : -1;
}

/* The outcome of adding an attribute to the node made last. */
static void attr_status(struct keras *k, enum dnnmem_status s)
{
    if (s == DNNMEM_E_INTERNAL)
        dm_kr_fail(k, s, "node '%s' has too many attributes", k->g->nodes[k->g->n_nodes - 1].name);
    else if (s != DNNMEM_OK)
        dm_kr_oom(k);
}

void dm_kr_attr_i(struct keras *k, const char *name, int64_t v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_i(k->g, name, v));
}

void dm_kr_attr_f(struct keras *k, const char *name, double v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_f(k->g, name, v));
}

void dm_kr_attr_s(struct keras *k, const char *name, const char *v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_s(k->g, name, v));
}

void dm_kr_attr_ints(struct keras *k, const char *name, int n, const int64_t *v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_ints(k->g, name, n, v));
}

void dm_kr_attr_floats(struct keras *k, const char *name, int n, const double *v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_floats(k->g, name, n, v));
}

int32_t dm_kr_constant(struct keras *k)
{
    int32_t t = dm_kr_op(k, DM_OP_Constant, 0);
    if (t >= 0)
        k->g->tensors[t].role = DM_ROLE_CONSTANT;
    return t;
}

int32_t dm_kr_const_f(struct keras *k, double v)
{
    int32_t t = dm_kr_constant(k);
    dm_kr_attr_f(k, "value_float", v);
    return t;
}

int32_t dm_kr_const_ints(struct keras *k, int n, const int64_t *v)
{
    int32_t t = dm_kr_constant(k);
    dm_kr_attr_ints(k, "value_ints", n, v);
    return t;
}

/* A weight of the current layer, "<prefix><layer>/<what>", float32 of the
 * given dims; a shared layer's later calls get the same tensor. */
/* How the TF backend of Keras 3 makes a weight's value: its layer's
 * "<what>_initializer" ("depthwise_kernel": "depthwise_initializer"), a
 * serialized initializer ({"class_name": ...}) or its string name. The
 * kinds' ops are src/schedule/tfbuild.c's; others are DM_INIT_OTHER. */
static uint8_t weight_init(const struct keras *k, const char *what)
{
    if (!k->keras3 || !json_is_object(k->lcfg))
        return DM_INIT_NONE;
    const char *last = strrchr(what, '/');
    last = last ? last + 1 : what;
    char key[96];
    size_t n = strlen(last);
    int m = n > 7 && !strcmp(last + n - 7, "_kernel")
                ? snprintf(key, sizeof key, "%.*s_initializer", (int)(n - 7), last)
                : snprintf(key, sizeof key, "%s_initializer", last);
    if (m < 0 || (size_t)m >= sizeof key)
        return DM_INIT_OTHER;
    json_t *init = dm_kr_field(k->lcfg, key);
    const char *cls = json_is_string(init) ? json_string_value(init)
                                           : json_string_value(dm_kr_field(init, "class_name"));
    if (!cls)
        return DM_INIT_OTHER;
    static const char *const uniform[] = {"RandomUniform", "GlorotUniform", "HeUniform",
                                          "LecunUniform", "random_uniform", "glorot_uniform",
                                          "he_uniform", "lecun_uniform", "uniform"};
    static const char *const fill[] = {"Zeros", "Ones", "zeros", "ones"};
    for (size_t i = 0; i < sizeof uniform / sizeof *uniform; i++)
        if (!strcmp(cls, uniform[i]))
            return DM_INIT_UNIFORM;
    for (size_t i = 0; i < sizeof fill / sizeof *fill; i++)
        if (!strcmp(cls, fill[i]))
            return DM_INIT_FILL;
    if (!strcmp(cls, "VarianceScaling")) {
        const char *d = json_string_value(dm_kr_field(dm_kr_field(init, "config"), "distribution"));
        return d && !strcmp(d, "uniform") ? DM_INIT_UNIFORM : DM_INIT_OTHER;
    }
    return DM_INIT_OTHER;
}

int32_t dm_kr_weight(struct keras *k, const char *what, int rank, const int64_t *dims)
{
    struct dm_graph *g = k->g;
    if (k->st != DNNMEM_OK)
        return -1;
    int64_t numel = 1;
    for (int i = 0; i < rank; i++)
        if (dims[i] < 1 || !dm_mul_ok(numel, dims[i], &numel) || numel > MAX_WEIGHT) {
            dm_kr_fail(k, DNNMEM_E_SHAPE,
                       dims[i] < 1 ? "weight '%s' would have an empty dim"
                             : "weight '%s' has an absurd size",
                       what);
            return -1;
        }
    char *name = dm_arena_printf(&g->arena, "%s%s/%s", k->prefix, k->layer, what);
    if (!name)
        return dm_kr_oom(k);
    int32_t t = dm_graph_find(g, name);
    if (t >= 0) { /* a shared layer: the same variable, which must fit again */
        const struct dm_tensor *w = &g->tensors[t];
        bool same = w->role == DM_ROLE_WEIGHT && w->rank == rank;
        for (int i = 0; same && i < rank; i++)
            same = w->dims[i].value == dims[i];
        if (!same)
            dm_kr_fail(k, DNNMEM_E_SHAPE, "weight '%s' is used again with another shape (a shared "
                       "layer called on inputs of different sizes)", name);
        return same ? t : -1;
    }
    t = dm_graph_add_tensor(g, name);
    struct dm_dim *d = dm_arena_array(&g->arena, (size_t)rank + 1, sizeof *d);
    if (t < 0 || !d)
        return dm_kr_oom(k);
    for (int i = 0; i < rank; i++)
        d[i] = (struct dm_dim){dims[i], -1};
    struct dm_tensor *w = &g->tensors[t];
    w->role = DM_ROLE_WEIGHT;
    w->dtype = DM_FLOAT;
    w->rank = rank;
    w->dims = d;
    w->frozen = k->frozen;
    w->init = weight_init(k, what);
    return t;
}

void dm_kr_perm_identity(int rank, int8_t *p)
{
    for (int i = 0; i < rank; i++)
        p[i] = (int8_t)i;
}

/* Channels (Keras axis c) at IR axis 1, the other axes in order after. */
void dm_kr_perm_channels_first(int rank, int c, int8_t *p)
{
    int j = 0;
    p[j++] = 0;
    p[j++] = (int8_t)c;
    for (int i = 1; i < rank; i++)
        if (i != c)
            p[j++] = (int8_t)i;
}

/* The IR axis holding Keras axis a. */
int dm_kr_ir_axis(const struct kt *x, int a)
{
    for (int i = 0; i < x->rank; i++)
        if (x->perm[i] == a)
            return i;
    return a;
}

/* x's IR tensor arranged as `want` (a Transpose view when it differs). */
int32_t dm_kr_arrange(struct keras *k, const struct kt *x, const int8_t *want)
{
    if (memcmp(x->perm, want, (size_t)x->rank) == 0)
        return x->id;
    int64_t p[DM_MAX_DIMS];
    for (int i = 0; i < x->rank; i++)
        p[i] = dm_kr_ir_axis(x, want[i]);
    int32_t y = dm_kr_op(k, DM_OP_Transpose, 1, x->id);
    dm_kr_attr_ints(k, "perm", x->rank, p);
    return y;
}

int32_t dm_kr_keras_order(struct keras *k, const struct kt *x)
{
    int8_t p[DM_MAX_DIMS];
    dm_kr_perm_identity(x->rank, p);
    return dm_kr_arrange(k, x, p);
}

/* A Keras axis from a config value (negative counts from the end). */
int dm_kr_keras_axis(struct keras *k, int64_t a, int rank, bool allow_batch)
{
    if (a < 0)
        a += rank;
    if (a < (allow_batch ? 0 : 1) || a >= rank) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "axis %lld is out of range for a rank-%d input", (long long)a,
                   rank);
        return rank - 1;
    }
    return (int)a;
}

/* The channel axis by data_format. */
int dm_kr_channel_axis(struct keras *k, json_t *cfg, int rank)
{
    const char *df = dm_kr_get_str(k, cfg, "data_format", "channels_last");
    if (strcmp(df, "channels_first") == 0)
        return 1;
    if (strcmp(df, "channels_last") != 0)
        dm_kr_fail(k, DNNMEM_E_MODEL, "data_format '%s' is not channels_last or channels_first",
                   df);
    return rank - 1;
}

bool dm_kr_need_rank(struct keras *k, const struct kt *x, int lo, int hi)
{
    if (k->st == DNNMEM_OK && (x->rank < lo || x->rank > hi))
        dm_kr_fail(k, DNNMEM_E_SHAPE, lo == hi ? "input has rank %d; rank %d expected"
                                         : "input has rank %d; rank %d to %d expected",
                   x->rank, lo, hi);
    return k->st == DNNMEM_OK;
}

/* A dim a weight depends on: known and positive. */
int64_t dm_kr_known(struct keras *k, const struct kt *x, int a, const char *what)
{
    if (k->st != DNNMEM_OK)
        return 1;
    if (x->dim[a] < 1) {
        dm_kr_fail(k, DNNMEM_E_SHAPE, "the input's %s (axis %d) is %s; the layer's weights need it",
                   what, a, x->dim[a] < 0 ? "None" : "0");
        return 1;
    }
    return x->dim[a];
}

/* Apply a Keras activation by name to x (kept arrangement). */
void dm_kr_activation(struct keras *k, const char *act, struct kt *x)
{
    if (k->st != DNNMEM_OK || !act || !strcmp(act, "linear") || !act[0])
        return;
    int32_t y;
    if (!strcmp(act, "relu"))
        y = dm_kr_op(k, DM_OP_Relu, 1, x->id);
    else if (!strcmp(act, "relu6")) {
        int32_t lo = dm_kr_const_f(k, 0.0), hi = dm_kr_const_f(k, 6.0);
        y = dm_kr_op(k, DM_OP_Clip, 3, x->id, lo, hi);
    } else if (!strcmp(act, "sigmoid"))
        y = dm_kr_op(k, DM_OP_Sigmoid, 1, x->id);
    else if (!strcmp(act, "tanh"))
        y = dm_kr_op(k, DM_OP_Tanh, 1, x->id);
    else if (!strcmp(act, "softmax") || !strcmp(act, "log_softmax")) {
        y = dm_kr_op(k, !strcmp(act, "softmax") ? DM_OP_Softmax : DM_OP_LogSoftmax, 1, x->id);
        dm_kr_attr_i(k, "axis", dm_kr_ir_axis(x, x->rank - 1));
    } else if (!strcmp(act, "elu"))
        y = dm_kr_op(k, DM_OP_Elu, 1, x->id);
    else if (!strcmp(act, "selu"))
        y = dm_kr_op(k, DM_OP_Selu, 1, x->id);
    else if (!strcmp(act, "swish") || !strcmp(act, "silu"))
        y = dm_kr_op(k, DM_OP_Silu, 1, x->id);
    else if (!strcmp(act, "gelu"))
        y = dm_kr_op(k, DM_OP_Gelu, 1, x->id);
    else if (!strcmp(act, "softplus"))
        y = dm_kr_op(k, DM_OP_Softplus, 1, x->id);
    else if (!strcmp(act, "softsign"))
        y = dm_kr_op(k, DM_OP_Softsign, 1, x->id);
    else if (!strcmp(act, "hard_sigmoid"))
        y = dm_kr_op(k, DM_OP_HardSigmoid, 1, x->id);
    else if (!strcmp(act, "hard_swish") || !strcmp(act, "hard_silu"))
        y = dm_kr_op(k, DM_OP_HardSwish, 1, x->id);
    else if (!strcmp(act, "exponential"))
        y = dm_kr_op(k, DM_OP_Exp, 1, x->id);
    else if (!strcmp(act, "leaky_relu")) {
        y = dm_kr_op(k, DM_OP_LeakyRelu, 1, x->id);
        dm_kr_attr_f(k, "alpha", 0.2);
    } else {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED,
                   "activation '%s' is not supported (known: linear, relu, relu6, sigmoid, tanh, "
                   "softmax, log_softmax, elu, selu, swish, silu, gelu, softplus, softsign, "
                   "hard_sigmoid, hard_swish, exponential, leaky_relu)",
                   act);
        return;
    }
    x->id = y;
}

/* The activation field: a name, or {"class_name": ..., "config": {...}}
 * (Keras 3 and some Keras 2 files serialize it as an object). */
const char *dm_kr_activation_name(struct keras *k, json_t *cfg, const char *key,
                                  const char *dflt)
{
    json_t *v = dm_kr_field(cfg, key);
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v)) {
        json_t *c = dm_kr_field(v, "config");
        if (json_is_string(c))
            return json_string_value(c);
        const char *n = json_string_value(dm_kr_field(c, "name"));
        if (!n)
            n = json_string_value(dm_kr_field(v, "class_name"));
        if (n)
            return n;
    }
    dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' must name an activation", key);
    return dflt;
}

const struct kt *dm_kr_one_input(struct keras *k, struct layer_io *io)
{
    if (io->n_in != 1) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "%d inputs; the layer takes one", io->n_in);
        return NULL;
    }
    return &io->in[0];
}

void dm_kr_same_out(struct layer_io *io, const struct kt *x, int32_t id)
{
    io->out[0] = *x;
    io->out[0].id = id;
    io->n_out = 1;
}

/* The single axis of an "axis" field (an integer or a one-element list). */
int64_t dm_kr_axis_field(struct keras *k, json_t *cfg, int64_t dflt)
{
    json_t *v = dm_kr_field(cfg, "axis");
    int64_t a = dflt;
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (json_is_array(v) && json_array_size(v) == 1)
        v = json_array_get(v, 0);
    if (!dm_kr_json_int(v, &a))
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "config field 'axis' must be one integer");
    return a;
}

/* A layer's dtype policy name: the "dtype" string, or a Keras 2 Policy /
 * Keras 3 DTypePolicy object's config name; NULL when absent. */
const char *dm_kr_policy_name(json_t *cfg)
{
    json_t *pol = dm_kr_field(cfg, "dtype");
    return json_string_value(json_is_object(pol) ? dm_kr_field(dm_kr_field(pol, "config"), "name")
                                                 : pol);
}
