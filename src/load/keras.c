/*
 * keras.c: the Keras front end. A Keras model's architecture JSON, as
 * model.to_json() writes it (Keras 2: class_name "Model" (2.0-2.3),
 * "Functional" (2.4+), "Sequential", models nested as layers) or in the
 * Keras 3 layout (keys module / class_name / config / registered_name /
 * build_config, DTypePolicy dtype objects: the config.json inside a .keras
 * archive, which dm_load_keras_archive reads from the zip itself; see the
 * archive section at the end), is built layer by layer into the graph IR the ONNX front end
 * fills, so shapes, training, the allocator simulation and the reports apply
 * unchanged. As for every format, what is simulated is the network run by
 * PyTorch eager (the library's framework model), not TensorFlow's runtime.
 *
 * Layouts. Keras tensors are channels-last (NHWC) unless a layer says
 * data_format "channels_first"; the IR's ops follow ONNX (Conv, pooling and
 * BatchNormalization take channels at axis 1). Each Keras tensor here is an
 * IR tensor plus a permutation `perm` (IR axis i holds Keras axis perm[i];
 * axis 0, the batch, never moves). Convolutions, pooling, padding and
 * BatchNormalization work on the channels-first arrangement and leave their
 * result in it, as the same network written for PyTorch would; a layer that
 * needs another arrangement (Dense, LayerNormalization and the recurrent
 * layers on the last axis, Permute) gets it through a Transpose, which is a
 * view (no memory) in the IR. Flatten and Reshape are views of whatever
 * arrangement they get: element order differs from Keras' but the shapes
 * after them and every byte count are the same, and neither TensorFlow
 * (NHWC storage) nor the PyTorch network copies there. Shapes and bytes are
 * therefore exact; only the order of elements inside a flattened tensor is
 * not Keras'.
 *
 * Dims. The batch axis (None) is the symbol "batch" (--batch-size); other
 * None dims are "seq" on sequence inputs (rank 2 and 3: [batch, seq] token
 * ids, [batch, seq, features]) and "height", "width" (and "depth") on image
 * inputs, settable with --dim NAME=VALUE. Weight shapes need the dims they
 * depend on (the channels, a Dense layer's input width): a None there is an
 * error naming the layer.
 *
 * Weights are float32 tensors of Keras' exact shapes and counts (kernel,
 * bias, gamma, beta, moving_mean, moving_variance, embeddings,
 * recurrent_kernel...), named "<model>/<layer>/<weight>" as Keras names
 * its variables, so the weights figure is Keras' parameter count x 4 bytes
 * (plus the one int64 num_batches_tracked PyTorch keeps per BatchNorm).
 * BatchNormalization's moving statistics are buffers (non-trainable); the
 * layers of a model or layer saved with trainable: false are frozen.
 *
 * Recurrent layers are one LSTM / GRU / RNN node (layout 1, batch first),
 * W [dirs, gates*units, input], R [dirs, gates*units, units] in the ONNX
 * gate arrangement, and B as Keras keeps it: one bias vector (LSTM 4*units,
 * SimpleRNN units, GRU with reset_after false 3*units) or two (GRU with
 * reset_after true, CuDNNLSTM, CuDNNGRU), which the IR's shape function
 * accepts. Parameter counts therefore match Keras: LSTM
 * 4*(units*(input+units)+units); GRU reset_after 3*units*(input+units) +
 * 2*3*units.
 */
#include "dnnmem-impl.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#define KERAS_OPSET 17           /* the ONNX op semantics the nodes use */
#define MAX_DIM (INT64_C(1) << 31)    /* any one dim or size field */
#define MAX_WEIGHT (INT64_C(1) << 40) /* elements of one weight */
#define MAX_OUT 4                /* outputs of one layer call */
#define MAX_IN 64                /* inputs of one layer call */
#define MAX_DEPTH 16             /* models nested in models */
#define MAX_LAYERS 100000

/* A Keras tensor: an IR tensor, its Keras dims (-1: None) and arrangement. */
struct kt {
    int32_t id;
    int rank;
    int64_t dim[DM_MAX_DIMS];  /* in Keras order */
    int8_t perm[DM_MAX_DIMS];  /* IR axis i holds Keras axis perm[i] */
    enum dm_dtype dtype;
};

/* One call of a layer in a functional model (its inbound node). */
struct call {
    bool done;
    int n_out;
    struct kt out[MAX_OUT];
};

struct keras {
    struct dm_graph *g;
    struct dnnmem_error *err;
    const char *path;
    enum dnnmem_status st;     /* the first error; later calls do nothing */
    int32_t cap_nodes;
    char scope[512];           /* "/resnet50/conv1" */
    size_t scope_len;
    char prefix[512];          /* weight names: "resnet50/" */
    size_t prefix_len;
    const char *layer;         /* the layer being built, for messages */
    const char *cls;
    bool frozen;               /* the layer's weights are not trainable */
    int depth;
    int n_layers;
    int call_index;            /* the call of a shared layer (0 first) */
    uint32_t op_count[DM_OP_COUNT]; /* nodes of each op in the current layer call */
    bool keras3;
    const char *mixed;         /* a mixed-precision dtype policy seen, or NULL */
    const char *version;       /* a .keras archive's metadata.json keras_version, or NULL */
};

static enum dnnmem_status fail(struct keras *k, enum dnnmem_status s, const char *fmt, ...)
    DM_PRINTF(3, 4);
static enum dnnmem_status fail(struct keras *k, enum dnnmem_status s, const char *fmt, ...)
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

static int32_t oom(struct keras *k)
{
    fail(k, DNNMEM_E_NOMEM, "out of memory");
    return -1;
}

/* ---- config fields ------------------------------------------------------------ */

static json_t *field(json_t *o, const char *key)
{
    json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

static bool json_int(json_t *v, int64_t *out)
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
static int64_t get_int(struct keras *k, json_t *cfg, const char *key, int64_t dflt, int64_t lo)
{
    json_t *v = field(cfg, key);
    int64_t i;
    if (k->st != DNNMEM_OK)
        return lo > 1 ? lo : 1;
    if (!v) {
        if (dflt == INT64_MIN)
            fail(k, DNNMEM_E_MODEL, "config field '%s' is missing", key);
        return dflt == INT64_MIN ? 1 : dflt;
    }
    if (!json_int(v, &i)) {
        fail(k, DNNMEM_E_MODEL, "config field '%s' must be an integer", key);
        return 1;
    }
    if (i < lo) {
        fail(k, DNNMEM_E_MODEL, "config field '%s' is %lld; at least %lld expected", key,
             (long long)i, (long long)lo);
        return 1;
    }
    if (i > MAX_DIM) {
        fail(k, DNNMEM_E_SHAPE, "config field '%s' is %lld, an absurd size (at most %lld)", key,
             (long long)i, (long long)MAX_DIM);
        return 1;
    }
    return i;
}

/* n integers: one integer repeated or a list of n (kernel_size, strides...);
 * dflt when absent (dflt < 0 with required: error). */
static void get_ints(struct keras *k, json_t *cfg, const char *key, int n, int64_t dflt,
                     int64_t lo, int64_t *out)
{
    json_t *v = field(cfg, key);
    for (int i = 0; i < n; i++)
        out[i] = dflt > 0 ? dflt : 1;
    if (k->st != DNNMEM_OK)
        return;
    if (!v) {
        if (dflt < 0)
            fail(k, DNNMEM_E_MODEL, "config field '%s' is missing", key);
        return;
    }
    int64_t x;
    if (json_int(v, &x)) {
        for (int i = 0; i < n; i++)
            out[i] = x;
    } else if (json_is_array(v) && json_array_size(v) == (size_t)n) {
        for (int i = 0; i < n; i++)
            if (!json_int(json_array_get(v, (size_t)i), &out[i])) {
                fail(k, DNNMEM_E_MODEL, "config field '%s' must hold integers", key);
                return;
            }
    } else {
        fail(k, DNNMEM_E_MODEL, "config field '%s' must be an integer or a list of %d", key, n);
        return;
    }
    for (int i = 0; i < n; i++)
        if (out[i] < lo || out[i] > MAX_DIM) {
            fail(k, out[i] > MAX_DIM ? DNNMEM_E_SHAPE : DNNMEM_E_MODEL,
                 "config field '%s' holds %lld; it must be in [%lld, %lld]", key,
                 (long long)out[i], (long long)lo, (long long)MAX_DIM);
            return;
        }
}

static double get_num(struct keras *k, json_t *cfg, const char *key, double dflt, double lo,
                      double hi)
{
    json_t *v = field(cfg, key);
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_number(v)) {
        fail(k, DNNMEM_E_MODEL, "config field '%s' must be a number", key);
        return dflt;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        fail(k, DNNMEM_E_MODEL, "config field '%s' is %g; it must be in [%g, %g]", key, d, lo, hi);
        return dflt;
    }
    return d;
}

static bool get_bool(struct keras *k, json_t *cfg, const char *key, bool dflt)
{
    json_t *v = field(cfg, key);
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_boolean(v)) {
        fail(k, DNNMEM_E_MODEL, "config field '%s' must be true or false", key);
        return dflt;
    }
    return json_is_true(v);
}

static const char *get_str(struct keras *k, json_t *cfg, const char *key, const char *dflt)
{
    json_t *v = field(cfg, key);
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_string(v)) {
        fail(k, DNNMEM_E_MODEL, "config field '%s' must be a string", key);
        return dflt;
    }
    return json_string_value(v);
}

/* ---- building nodes ----------------------------------------------------------------- */

/* A node of op `o` in the current scope, named "<scope>/<Op>" (then "_1",
 * ...), outputs "<node>_output_<k>". NULL after an error; valid until the
 * next node is made. */
static struct dm_node *node(struct keras *k, enum dm_op o, int n_in, const int32_t *in, int n_out)
{
    struct dm_graph *g = k->g;
    if (k->st != DNNMEM_OK)
        return NULL;
    for (int i = 0; i < n_in; i++)
        if (in[i] < -1 || in[i] >= g->n_tensors) {
            fail(k, DNNMEM_E_INTERNAL, "a node input is missing");
            return NULL;
        }
    if (g->n_nodes > INT32_MAX / 4) {
        fail(k, DNNMEM_E_UNSUPPORTED, "too many nodes");
        return NULL;
    }
    uint32_t c = k->op_count[o]++;
    const char *name = c ? dm_arena_printf(&g->arena, "%s/%s_%u", k->scope, dm_ops[o].name, c)
                         : dm_arena_printf(&g->arena, "%s/%s", k->scope, dm_ops[o].name);
    struct dm_node *n = dm_graph_add_node(g, &k->cap_nodes, o, name, n_in, in, n_out);
    if (!n) {
        oom(k);
        return NULL;
    }
    for (int i = 0; i < n_out; i++) {
        const char *tname = dm_arena_printf(&g->arena, "%s_output_%d", name, i);
        if (!tname) {
            oom(k);
            return NULL;
        }
        if (dm_graph_find(g, tname) >= 0) {
            fail(k, DNNMEM_E_MODEL, "two tensors are named '%s' (a layer name used twice?)", tname);
            return NULL;
        }
        if ((n->out[i] = dm_graph_add_tensor(g, tname)) < 0) {
            oom(k);
            return NULL;
        }
    }
    return n;
}

/* A node with one output; inputs as varargs (int32_t tensor ids, -1 omitted). */
static int32_t op(struct keras *k, enum dm_op o, int n_in, ...)
{
    int32_t in[8];
    va_list ap;
    va_start(ap, n_in);
    for (int i = 0; i < n_in && i < 8; i++)
        in[i] = (int32_t)va_arg(ap, int);
    va_end(ap);
    struct dm_node *n = node(k, o, n_in < 8 ? n_in : 8, in, 1);
    return n ? n->out[0] : -1;
}

/* The outcome of adding an attribute to the node made last. */
static void attr_status(struct keras *k, enum dnnmem_status s)
{
    if (s == DNNMEM_E_INTERNAL)
        fail(k, s, "node '%s' has too many attributes", k->g->nodes[k->g->n_nodes - 1].name);
    else if (s != DNNMEM_OK)
        oom(k);
}

static void attr_i(struct keras *k, const char *name, int64_t v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_i(k->g, name, v));
}

static void attr_f(struct keras *k, const char *name, double v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_f(k->g, name, v));
}

static void attr_s(struct keras *k, const char *name, const char *v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_s(k->g, name, v));
}

static void attr_ints(struct keras *k, const char *name, int n, const int64_t *v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_ints(k->g, name, n, v));
}

static void attr_floats(struct keras *k, const char *name, int n, const double *v)
{
    if (k->st == DNNMEM_OK)
        attr_status(k, dm_graph_attr_floats(k->g, name, n, v));
}

static int32_t constant(struct keras *k)
{
    int32_t t = op(k, DM_OP_Constant, 0);
    if (t >= 0)
        k->g->tensors[t].role = DM_ROLE_CONSTANT;
    return t;
}

static int32_t const_f(struct keras *k, double v)
{
    int32_t t = constant(k);
    attr_f(k, "value_float", v);
    return t;
}

static int32_t const_ints(struct keras *k, int n, const int64_t *v)
{
    int32_t t = constant(k);
    attr_ints(k, "value_ints", n, v);
    return t;
}

/* A weight of the current layer, "<prefix><layer>/<what>", float32 of the
 * given dims; a shared layer's later calls get the same tensor. */
static int32_t weight(struct keras *k, const char *what, int rank, const int64_t *dims)
{
    struct dm_graph *g = k->g;
    if (k->st != DNNMEM_OK)
        return -1;
    int64_t numel = 1;
    for (int i = 0; i < rank; i++)
        if (dims[i] < 1 || !dm_mul_ok(numel, dims[i], &numel) || numel > MAX_WEIGHT) {
            fail(k, DNNMEM_E_SHAPE,
                 dims[i] < 1 ? "weight '%s' would have an empty dim"
                             : "weight '%s' has an absurd size",
                 what);
            return -1;
        }
    char *name = dm_arena_printf(&g->arena, "%s%s/%s", k->prefix, k->layer, what);
    if (!name)
        return oom(k);
    int32_t t = dm_graph_find(g, name);
    if (t >= 0) { /* a shared layer: the same variable, which must fit again */
        const struct dm_tensor *w = &g->tensors[t];
        bool same = w->role == DM_ROLE_WEIGHT && w->rank == rank;
        for (int i = 0; same && i < rank; i++)
            same = w->dims[i].value == dims[i];
        if (!same)
            fail(k, DNNMEM_E_SHAPE, "weight '%s' is used again with another shape (a shared "
                 "layer called on inputs of different sizes)", name);
        return same ? t : -1;
    }
    t = dm_graph_add_tensor(g, name);
    struct dm_dim *d = dm_arena_array(&g->arena, (size_t)rank + 1, sizeof *d);
    if (t < 0 || !d)
        return oom(k);
    for (int i = 0; i < rank; i++)
        d[i] = (struct dm_dim){dims[i], -1};
    struct dm_tensor *w = &g->tensors[t];
    w->role = DM_ROLE_WEIGHT;
    w->dtype = DM_FLOAT;
    w->rank = rank;
    w->dims = d;
    w->frozen = k->frozen;
    return t;
}

#define INTS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* ---- arrangements ------------------------------------------------------------------- */

static void perm_identity(int rank, int8_t *p)
{
    for (int i = 0; i < rank; i++)
        p[i] = (int8_t)i;
}

/* Channels (Keras axis c) at IR axis 1, the other axes in order after. */
static void perm_channels_first(int rank, int c, int8_t *p)
{
    int j = 0;
    p[j++] = 0;
    p[j++] = (int8_t)c;
    for (int i = 1; i < rank; i++)
        if (i != c)
            p[j++] = (int8_t)i;
}

/* The IR axis holding Keras axis a. */
static int ir_axis(const struct kt *x, int a)
{
    for (int i = 0; i < x->rank; i++)
        if (x->perm[i] == a)
            return i;
    return a;
}

/* x's IR tensor arranged as `want` (a Transpose view when it differs). */
static int32_t arrange(struct keras *k, const struct kt *x, const int8_t *want)
{
    if (memcmp(x->perm, want, (size_t)x->rank) == 0)
        return x->id;
    int64_t p[DM_MAX_DIMS];
    for (int i = 0; i < x->rank; i++)
        p[i] = ir_axis(x, want[i]);
    int32_t y = op(k, DM_OP_Transpose, 1, x->id);
    attr_ints(k, "perm", x->rank, p);
    return y;
}

static int32_t keras_order(struct keras *k, const struct kt *x)
{
    int8_t p[DM_MAX_DIMS];
    perm_identity(x->rank, p);
    return arrange(k, x, p);
}

/* A Keras axis from a config value (negative counts from the end). */
static int keras_axis(struct keras *k, int64_t a, int rank, bool allow_batch)
{
    if (a < 0)
        a += rank;
    if (a < (allow_batch ? 0 : 1) || a >= rank) {
        fail(k, DNNMEM_E_MODEL, "axis %lld is out of range for a rank-%d input", (long long)a,
             rank);
        return rank - 1;
    }
    return (int)a;
}

/* The channel axis by data_format. */
static int channel_axis(struct keras *k, json_t *cfg, int rank)
{
    const char *df = get_str(k, cfg, "data_format", "channels_last");
    if (strcmp(df, "channels_first") == 0)
        return 1;
    if (strcmp(df, "channels_last") != 0)
        fail(k, DNNMEM_E_MODEL, "data_format '%s' is not channels_last or channels_first", df);
    return rank - 1;
}

static bool need_rank(struct keras *k, const struct kt *x, int lo, int hi)
{
    if (k->st == DNNMEM_OK && (x->rank < lo || x->rank > hi))
        fail(k, DNNMEM_E_SHAPE, lo == hi ? "input has rank %d; rank %d expected"
                                         : "input has rank %d; rank %d to %d expected",
             x->rank, lo, hi);
    return k->st == DNNMEM_OK;
}

/* A dim a weight depends on: known and positive. */
static int64_t known(struct keras *k, const struct kt *x, int a, const char *what)
{
    if (k->st != DNNMEM_OK)
        return 1;
    if (x->dim[a] < 1) {
        fail(k, DNNMEM_E_SHAPE, "the input's %s (axis %d) is %s; the layer's weights need it",
             what, a, x->dim[a] < 0 ? "None" : "0");
        return 1;
    }
    return x->dim[a];
}

/* ---- activations -------------------------------------------------------------------- */

/* Apply a Keras activation by name to x (kept arrangement). */
static void activation(struct keras *k, const char *act, struct kt *x)
{
    if (k->st != DNNMEM_OK || !act || !strcmp(act, "linear") || !act[0])
        return;
    int32_t y;
    if (!strcmp(act, "relu"))
        y = op(k, DM_OP_Relu, 1, x->id);
    else if (!strcmp(act, "relu6")) {
        int32_t lo = const_f(k, 0.0), hi = const_f(k, 6.0);
        y = op(k, DM_OP_Clip, 3, x->id, lo, hi);
    } else if (!strcmp(act, "sigmoid"))
        y = op(k, DM_OP_Sigmoid, 1, x->id);
    else if (!strcmp(act, "tanh"))
        y = op(k, DM_OP_Tanh, 1, x->id);
    else if (!strcmp(act, "softmax") || !strcmp(act, "log_softmax")) {
        y = op(k, !strcmp(act, "softmax") ? DM_OP_Softmax : DM_OP_LogSoftmax, 1, x->id);
        attr_i(k, "axis", ir_axis(x, x->rank - 1));
    } else if (!strcmp(act, "elu"))
        y = op(k, DM_OP_Elu, 1, x->id);
    else if (!strcmp(act, "selu"))
        y = op(k, DM_OP_Selu, 1, x->id);
    else if (!strcmp(act, "swish") || !strcmp(act, "silu"))
        y = op(k, DM_OP_Silu, 1, x->id);
    else if (!strcmp(act, "gelu"))
        y = op(k, DM_OP_Gelu, 1, x->id);
    else if (!strcmp(act, "softplus"))
        y = op(k, DM_OP_Softplus, 1, x->id);
    else if (!strcmp(act, "softsign"))
        y = op(k, DM_OP_Softsign, 1, x->id);
    else if (!strcmp(act, "hard_sigmoid"))
        y = op(k, DM_OP_HardSigmoid, 1, x->id);
    else if (!strcmp(act, "hard_swish") || !strcmp(act, "hard_silu"))
        y = op(k, DM_OP_HardSwish, 1, x->id);
    else if (!strcmp(act, "exponential"))
        y = op(k, DM_OP_Exp, 1, x->id);
    else if (!strcmp(act, "leaky_relu")) {
        y = op(k, DM_OP_LeakyRelu, 1, x->id);
        attr_f(k, "alpha", 0.2);
    } else {
        fail(k, DNNMEM_E_UNSUPPORTED,
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
static const char *activation_name(struct keras *k, json_t *cfg, const char *key,
                                   const char *dflt)
{
    json_t *v = field(cfg, key);
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v)) {
        json_t *c = field(v, "config");
        if (json_is_string(c))
            return json_string_value(c);
        const char *n = json_string_value(field(c, "name"));
        if (!n)
            n = json_string_value(field(v, "class_name"));
        if (n)
            return n;
    }
    fail(k, DNNMEM_E_MODEL, "config field '%s' must name an activation", key);
    return dflt;
}

/* ---- layers ------------------------------------------------------------------------- */

struct layer_io {
    json_t *cfg;
    const struct kt *in;
    int n_in;
    struct kt out[MAX_OUT];
    int n_out;
};

static const struct kt *one_input(struct keras *k, struct layer_io *io)
{
    if (io->n_in != 1) {
        fail(k, DNNMEM_E_MODEL, "%d inputs; the layer takes one", io->n_in);
        return NULL;
    }
    return &io->in[0];
}

/* Output dims of a window over `in` (-1: None): valid floor((in - ek) / s) + 1,
 * same ceil(in / s), causal (in - 1) / s + 1. */
static int64_t window_out(struct keras *k, int64_t in, int64_t kk, int64_t s, int64_t d,
                          const char *pad)
{
    if (in < 0)
        return -1;
    int64_t ek;
    if (!dm_mul_ok(kk - 1, d, &ek) || !dm_add_ok(ek, 1, &ek)) {
        fail(k, DNNMEM_E_SHAPE, "the dilated kernel overflows");
        return 1;
    }
    if (!strcmp(pad, "same"))
        return in / s + (in % s != 0);
    if (!strcmp(pad, "causal"))
        return in < 1 ? 0 : (in - 1) / s + 1;
    if (in < ek) {
        fail(k, DNNMEM_E_SHAPE, "the window (%lld) is larger than the input (%lld)",
             (long long)ek, (long long)in);
        return 1;
    }
    return (in - ek) / s + 1;
}

static const char *padding_mode(struct keras *k, json_t *cfg, bool causal_ok)
{
    const char *p = get_str(k, cfg, "padding", "valid");
    if (strcmp(p, "valid") && strcmp(p, "same") && (!causal_ok || strcmp(p, "causal")))
        fail(k, DNNMEM_E_UNSUPPORTED, "padding '%s' is not supported (valid, same%s)", p,
             causal_ok ? ", causal" : "");
    return p;
}

/* Window attributes of a Conv or pooling node just made. */
static void window_attrs(struct keras *k, int ns, const int64_t *kk, const int64_t *s,
                         const int64_t *d, const char *pad, bool conv)
{
    attr_ints(k, "kernel_shape", ns, kk);
    attr_ints(k, "strides", ns, s);
    if (conv)
        attr_ints(k, "dilations", ns, d);
    if (!strcmp(pad, "same"))
        attr_s(k, "auto_pad", "SAME_UPPER"); /* TensorFlow's SAME: the extra pad at the end */
    else if (!strcmp(pad, "causal")) {
        int64_t pads[2 * DM_MAX_DIMS] = {0};
        for (int i = 0; i < ns; i++)
            pads[i] = (kk[i] - 1) * d[i];
        attr_ints(k, "pads", 2 * ns, pads);
    } else
        attr_s(k, "auto_pad", "VALID");
}

/* Conv1D/2D/3D, DepthwiseConv1D/2D, SeparableConv1D/2D, Conv*DTranspose. */
static void conv_layer(struct keras *k, struct layer_io *io, int ns, char kind)
{
    /* kind: 'c' conv, 'd' depthwise, 's' separable, 't' transpose */
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, ns + 2, ns + 2))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank, c = channel_axis(k, cfg, r);
    int64_t cin = known(k, x, c, "channel count");
    int64_t kk[DM_MAX_DIMS], s[DM_MAX_DIMS], d[DM_MAX_DIMS];
    get_ints(k, cfg, "kernel_size", ns, -1, 1, kk);
    get_ints(k, cfg, "strides", ns, 1, 1, s);
    get_ints(k, cfg, "dilation_rate", ns, 1, 1, d);
    const char *pad = padding_mode(k, cfg, kind == 'c' && ns == 1);
    bool bias = get_bool(k, cfg, "use_bias", true);
    int64_t groups = kind == 'c' ? get_int(k, cfg, "groups", 1, 1) : 1;
    int64_t mult = kind == 'd' || kind == 's' ? get_int(k, cfg, "depth_multiplier", 1, 1) : 1;
    int64_t filters = kind == 'd' ? 1 : get_int(k, cfg, "filters", INT64_MIN, 1);
    if (k->st != DNNMEM_OK)
        return;
    if (cin % groups || filters % groups) {
        fail(k, DNNMEM_E_SHAPE, "groups %lld does not divide the %lld input channels and %lld "
             "filters", (long long)groups, (long long)cin, (long long)filters);
        return;
    }
    int8_t cf[DM_MAX_DIMS];
    perm_channels_first(r, c, cf);
    int32_t xi = arrange(k, x, cf);
    int64_t wd[DM_MAX_DIMS], mid, cout;
    if (kind == 'd' || kind == 's') {
        if (!dm_mul_ok(cin, mult, &mid)) {
            fail(k, DNNMEM_E_SHAPE, "the channel count overflows");
            return;
        }
        wd[0] = mid;
        wd[1] = 1;
        memcpy(wd + 2, kk, (size_t)ns * sizeof *kk);
        int32_t w = weight(k, "depthwise_kernel", ns + 2, wd);
        int32_t b = kind == 'd' && bias ? weight(k, "bias", 1, &mid) : -1;
        int32_t y = op(k, DM_OP_Conv, b >= 0 ? 3 : 2, xi, w, b);
        window_attrs(k, ns, kk, s, d, pad, true);
        attr_i(k, "group", cin);
        xi = y;
        cout = mid;
        if (kind == 's') { /* the pointwise 1x1 convolution */
            int64_t pd[DM_MAX_DIMS], ones[DM_MAX_DIMS];
            pd[0] = filters;
            pd[1] = mid;
            for (int i = 0; i < ns; i++)
                pd[2 + i] = ones[i] = 1;
            w = weight(k, "pointwise_kernel", ns + 2, pd);
            b = bias ? weight(k, "bias", 1, &filters) : -1;
            y = op(k, DM_OP_Conv, b >= 0 ? 3 : 2, xi, w, b);
            window_attrs(k, ns, ones, ones, ones, "valid", true);
            xi = y;
            cout = filters;
        }
    } else if (kind == 't') {
        wd[0] = cin;
        wd[1] = filters;
        memcpy(wd + 2, kk, (size_t)ns * sizeof *kk);
        int32_t w = weight(k, "kernel", ns + 2, wd);
        int32_t b = bias ? weight(k, "bias", 1, &filters) : -1;
        if (field(cfg, "output_padding")) {
            fail(k, DNNMEM_E_UNSUPPORTED, "output_padding is not supported");
            return;
        }
        xi = op(k, DM_OP_ConvTranspose, b >= 0 ? 3 : 2, xi, w, b);
        window_attrs(k, ns, kk, s, d, pad, true);
        cout = filters;
    } else {
        wd[0] = filters;
        wd[1] = cin / groups;
        memcpy(wd + 2, kk, (size_t)ns * sizeof *kk);
        int32_t w = weight(k, "kernel", ns + 2, wd);
        int32_t b = bias ? weight(k, "bias", 1, &filters) : -1;
        xi = op(k, DM_OP_Conv, b >= 0 ? 3 : 2, xi, w, b);
        window_attrs(k, ns, kk, s, d, pad, true);
        attr_i(k, "group", groups);
        cout = filters;
    }
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    y->id = xi;
    y->dim[c] = cout;
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        if (kind == 't') {
            int64_t v = -1, ek = (kk[i] - 1) * d[i] + 1;
            if (x->dim[a] >= 0) {
                bool ok = !strcmp(pad, "same") ? dm_mul_ok(x->dim[a], s[i], &v)
                                               : dm_mul_ok(x->dim[a] - 1, s[i], &v) &&
                                                     dm_add_ok(v, ek, &v);
                if (!ok || v > MAX_DIM) {
                    fail(k, DNNMEM_E_SHAPE, "the output size overflows");
                    return;
                }
            }
            y->dim[a] = v;
        } else
            y->dim[a] = window_out(k, x->dim[a], kk[i], s[i], d[i], pad);
    }
    io->n_out = 1;
    activation(k, activation_name(k, cfg, "activation", "linear"), y);
}

static void pool_layer(struct keras *k, struct layer_io *io, int ns, bool max)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, ns + 2, ns + 2))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank, c = channel_axis(k, cfg, r);
    int64_t kk[DM_MAX_DIMS], s[DM_MAX_DIMS], d[DM_MAX_DIMS];
    get_ints(k, cfg, "pool_size", ns, 2, 1, kk);
    if (field(cfg, "strides"))
        get_ints(k, cfg, "strides", ns, 1, 1, s);
    else
        memcpy(s, kk, sizeof s);
    for (int i = 0; i < ns; i++)
        d[i] = 1;
    const char *pad = padding_mode(k, cfg, false);
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    perm_channels_first(r, c, cf);
    int32_t xi = arrange(k, x, cf);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    y->id = op(k, max ? DM_OP_MaxPool : DM_OP_AveragePool, 1, xi);
    window_attrs(k, ns, kk, s, d, pad, false);
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        y->dim[a] = window_out(k, x->dim[a], kk[i], s[i], 1, pad);
    }
    io->n_out = 1;
}

static void global_pool_layer(struct keras *k, struct layer_io *io, int ns, bool max)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, ns + 2, ns + 2))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank, c = channel_axis(k, cfg, r);
    bool keep = get_bool(k, cfg, "keepdims", false);
    int8_t cf[DM_MAX_DIMS];
    perm_channels_first(r, c, cf);
    int32_t xi = arrange(k, x, cf);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    y->id = op(k, max ? DM_OP_GlobalMaxPool : DM_OP_GlobalAveragePool, 1, xi);
    for (int a = 1; a < r; a++)
        if (a != c)
            y->dim[a] = 1;
    if (!keep) { /* [N, C, 1, ...] -> [N, C]: a view */
        y->id = op(k, DM_OP_Flatten, 1, y->id);
        attr_i(k, "axis", 1);
        y->rank = 2;
        y->dim[1] = x->dim[c];
        perm_identity(2, y->perm);
    }
    io->n_out = 1;
}

static void dense_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, 2, DM_MAX_DIMS))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank;
    int64_t units = get_int(k, cfg, "units", INT64_MIN, 1);
    bool bias = get_bool(k, cfg, "use_bias", true);
    int64_t in = known(k, x, r - 1, "last dim");
    if (k->st != DNNMEM_OK)
        return;
    int32_t xi = keras_order(k, x);
    int32_t w = weight(k, "kernel", 2, (int64_t[]){in, units});
    int32_t b = bias ? weight(k, "bias", 1, &units) : -1;
    struct kt *y = &io->out[0];
    *y = *x;
    perm_identity(r, y->perm);
    y->dim[r - 1] = units;
    if (r == 2) { /* F.linear on 2-D: one addmm */
        y->id = op(k, DM_OP_Gemm, b >= 0 ? 3 : 2, xi, w, b);
    } else { /* matmul, then the bias added in place */
        y->id = op(k, DM_OP_MatMul, 2, xi, w);
        if (b >= 0) {
            /* TF runs Dense's bias as tf.nn.bias_add (keras/layers/core/
             * dense.py), whose gradient reads nothing (src/train/tf_tape.def) */
            y->id = op(k, DM_OP_Add, 2, b, y->id);
            attr_i(k, "tf_bias_add", 1);
        }
    }
    io->n_out = 1;
    activation(k, activation_name(k, cfg, "activation", "linear"), y);
}

/* The single axis of an "axis" field (an integer or a one-element list). */
static int64_t axis_field(struct keras *k, json_t *cfg, int64_t dflt)
{
    json_t *v = field(cfg, "axis");
    int64_t a = dflt;
    if (k->st != DNNMEM_OK || !v)
        return dflt;
    if (json_is_array(v) && json_array_size(v) == 1)
        v = json_array_get(v, 0);
    if (!json_int(v, &a))
        fail(k, DNNMEM_E_UNSUPPORTED, "config field 'axis' must be one integer");
    return a;
}

/* A layer's dtype policy name: the "dtype" string, or a Keras 2 Policy /
 * Keras 3 DTypePolicy object's config name; NULL when absent. */
static const char *policy_name(json_t *cfg)
{
    json_t *pol = field(cfg, "dtype");
    return json_string_value(json_is_object(pol) ? field(field(pol, "config"), "name") : pol);
}

static void batchnorm_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, 2, DM_MAX_DIMS))
        return;
    json_t *cfg = io->cfg;
    int a = keras_axis(k, axis_field(k, cfg, -1), x->rank, false);
    bool center = get_bool(k, cfg, "center", true), scale = get_bool(k, cfg, "scale", true);
    int64_t ch = known(k, x, a, "channel count");
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    perm_channels_first(x->rank, a, cf);
    int32_t xi = arrange(k, x, cf);
    int32_t gamma = scale ? weight(k, "gamma", 1, &ch) : -1;
    int32_t beta = center ? weight(k, "beta", 1, &ch) : -1;
    int32_t mean = weight(k, "moving_mean", 1, &ch);
    int32_t var = weight(k, "moving_variance", 1, &ch);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    y->id = op(k, DM_OP_BatchNormalization, 5, xi, gamma, beta, mean, var);
    attr_f(k, "epsilon", get_num(k, cfg, "epsilon", 1e-3, 0, 1e3));
    /* Keras 2 runs this layer as TensorFlow's FusedBatchNormV3 on
     * channels-last data (keras/layers/normalization/batch_normalization.py:
     * fused when the rank is 4 or 5, the axis 1 or the last, and no renorm,
     * virtual_batch_size, adjustment or synchronized; data_format NHWC /
     * NDHWC for the last axis), in training mode unless the layer is frozen
     * (trainable False runs it in inference mode). --framework tensorflow
     * adds the kernel's layout transposes (src/train/train.c); Keras 3 does
     * not fuse (ops.moments + ops.batch_normalization). */
    const char *dt = policy_name(cfg);
    bool fused = !k->keras3 && (x->rank == 4 || x->rank == 5) && a == x->rank - 1 &&
                 !k->frozen && get_bool(k, cfg, "fused", true) &&
                 !get_bool(k, cfg, "renorm", false) && !field(cfg, "virtual_batch_size") &&
                 !get_bool(k, cfg, "synchronized", false) &&
                 strcmp(k->cls ? k->cls : "", "SyncBatchNormalization") != 0 &&
                 !(dt && !strcmp(dt, "float64"));
    if (fused)
        attr_i(k, "tf_fused_nhwc", 1);
    io->n_out = 1;
}

static void layernorm_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, 2, DM_MAX_DIMS))
        return;
    json_t *cfg = io->cfg;
    int r = x->rank, first = r - 1;
    json_t *v = field(cfg, "axis");
    if (json_is_array(v) && json_array_size(v) > 1) { /* trailing axes, in order */
        size_t n = json_array_size(v);
        first = r - (int)n;
        for (size_t i = 0; i < n && k->st == DNNMEM_OK; i++) {
            int64_t ai;
            if (!json_int(json_array_get(v, i), &ai) ||
                keras_axis(k, ai, r, false) != first + (int)i)
                fail(k, DNNMEM_E_UNSUPPORTED, "axis must be the trailing axes in order");
        }
    } else
        first = keras_axis(k, axis_field(k, cfg, -1), r, false);
    if (first != r - 1 && !(json_is_array(v) && json_array_size(v) > 1))
        fail(k, DNNMEM_E_UNSUPPORTED, "normalizing axis %d, not the last, is not supported", first);
    bool center = get_bool(k, cfg, "center", true), scale = get_bool(k, cfg, "scale", true);
    if (!scale && k->st == DNNMEM_OK)
        fail(k, DNNMEM_E_UNSUPPORTED, "scale false is not supported");
    int64_t wd[DM_MAX_DIMS];
    for (int i = first; i < r; i++)
        wd[i - first] = known(k, x, i, "normalized dim");
    if (k->st != DNNMEM_OK)
        return;
    int32_t xi = keras_order(k, x);
    int32_t gamma = weight(k, "gamma", r - first, wd);
    int32_t beta = center ? weight(k, "beta", r - first, wd) : -1;
    struct kt *y = &io->out[0];
    *y = *x;
    perm_identity(r, y->perm);
    y->id = op(k, DM_OP_LayerNormalization, beta >= 0 ? 3 : 2, xi, gamma, beta);
    attr_i(k, "axis", first);
    double eps = get_num(k, cfg, "epsilon", 1e-3, 0, 1e3);
    attr_f(k, "epsilon", eps);
    /* Keras 2's fused path (keras/layers/normalization/layer_normalization.py,
     * _fused_can_be_used): trailing axes, epsilon >= 1.001e-5 (fused batch
     * norm raises a smaller one) and float32 variables (a float32 or mixed_*
     * policy). It runs tf.compat.v1.nn.fused_batch_norm on the input reshaped
     * to [1, rows, D, 1] NCHW with scale ones([rows]), then `* gamma` and
     * `+ beta` as separate ops; --framework tensorflow models what that keeps
     * (src/train/train.c). Keras 3 has no such path. */
    const char *dt = policy_name(cfg);
    bool f32 = !dt || !strcmp(dt, "float32") || !strncmp(dt, "mixed_", 6);
    if (!k->keras3 && eps >= 1.001e-5 && f32)
        attr_i(k, "tf_fused_ln", 1);
    io->n_out = 1;
}

static void same_out(struct layer_io *io, const struct kt *x, int32_t id)
{
    io->out[0] = *x;
    io->out[0].id = id;
    io->n_out = 1;
}

static void dropout_layer(struct keras *k, struct layer_io *io, const char *key, double dflt)
{
    const struct kt *x = one_input(k, io);
    if (!x)
        return;
    /* rate in [0, 1]; GaussianNoise's stddev: any size (its ratio is moot) */
    double rate = get_num(k, io->cfg, key, dflt, 0, strcmp(key, "rate") ? 1e30 : 1);
    if (rate <= 0 || k->st != DNNMEM_OK) { /* no node: the identity */
        same_out(io, x, x->id);
        return;
    }
    int32_t ratio = const_f(k, rate < 1 ? rate : 0.5);
    same_out(io, x, op(k, DM_OP_Dropout, 2, x->id, ratio));
}

static void relu_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x)
        return;
    json_t *cfg = io->cfg;
    double maxv = get_num(k, cfg, "max_value", INFINITY, 0, INFINITY);
    double slope = get_num(k, cfg, "negative_slope", 0, 0, 1e9);
    double thr = get_num(k, cfg, "threshold", 0, -1e30, 1e30);
    if (k->st != DNNMEM_OK)
        return;
    if (thr != 0 || (slope > 0 && isfinite(maxv))) {
        fail(k, DNNMEM_E_UNSUPPORTED, "a threshold, or a negative_slope with a max_value, is "
             "not supported");
        return;
    }
    int32_t y;
    if (slope > 0) {
        y = op(k, DM_OP_LeakyRelu, 1, x->id);
        attr_f(k, "alpha", slope);
    } else if (isfinite(maxv)) { /* ReLU(6.) is relu6 */
        int32_t lo = const_f(k, 0.0), hi = const_f(k, maxv);
        y = op(k, DM_OP_Clip, 3, x->id, lo, hi);
    } else
        y = op(k, DM_OP_Relu, 1, x->id);
    same_out(io, x, y);
}

static void merge_layer(struct keras *k, struct layer_io *io, enum dm_op o, bool pairwise)
{
    if (io->n_in < 2 || io->n_in > MAX_IN) {
        fail(k, DNNMEM_E_MODEL, "%d inputs; a merge layer takes 2 or more", io->n_in);
        return;
    }
    const struct kt *x = &io->in[0];
    int32_t ids[MAX_IN];
    for (int i = 0; i < io->n_in; i++) {
        const struct kt *xi = &io->in[i];
        if (xi->rank != x->rank) {
            fail(k, DNNMEM_E_SHAPE, "input %d has rank %d, input 0 rank %d", i, xi->rank,
                 x->rank);
            return;
        }
        ids[i] = arrange(k, xi, x->perm);
    }
    struct kt *y = &io->out[0];
    *y = *x;
    for (int a = 1; a < x->rank; a++) /* broadcasting: a 1 takes the other size */
        for (int i = 1; i < io->n_in; i++)
            if (y->dim[a] == 1 || y->dim[a] < 0)
                y->dim[a] = io->in[i].dim[a] >= 0 || y->dim[a] < 0 ? io->in[i].dim[a] : y->dim[a];
    if (o == DM_OP_Sub && io->n_in != 2) {
        fail(k, DNNMEM_E_MODEL, "Subtract takes exactly 2 inputs");
        return;
    }
    if (pairwise) {
        y->id = ids[0];
        for (int i = 1; i < io->n_in; i++)
            y->id = op(k, o, 2, y->id, ids[i]);
    } else {
        struct dm_node *n = node(k, o, io->n_in, ids, 1);
        y->id = n ? n->out[0] : -1;
    }
    io->n_out = 1;
}

static void concat_layer(struct keras *k, struct layer_io *io)
{
    if (io->n_in < 1 || io->n_in > MAX_IN) {
        fail(k, DNNMEM_E_MODEL, "%d inputs; Concatenate takes 1 to %d", io->n_in, MAX_IN);
        return;
    }
    const struct kt *x = &io->in[0];
    int a = keras_axis(k, axis_field(k, io->cfg, -1), x->rank, false);
    int32_t ids[MAX_IN];
    struct kt *y = &io->out[0];
    *y = *x;
    y->dim[a] = 0;
    for (int i = 0; i < io->n_in && k->st == DNNMEM_OK; i++) {
        const struct kt *xi = &io->in[i];
        if (xi->rank != x->rank) {
            fail(k, DNNMEM_E_SHAPE, "input %d has rank %d, input 0 rank %d", i, xi->rank, x->rank);
            return;
        }
        ids[i] = arrange(k, xi, x->perm);
        if (y->dim[a] < 0 || xi->dim[a] < 0)
            y->dim[a] = -1;
        else if (!dm_add_ok(y->dim[a], xi->dim[a], &y->dim[a])) {
            fail(k, DNNMEM_E_SHAPE, "the concatenated size overflows");
            return;
        }
    }
    if (k->st != DNNMEM_OK)
        return;
    struct dm_node *n = node(k, DM_OP_Concat, io->n_in, ids, 1);
    y->id = n ? n->out[0] : -1;
    attr_i(k, "axis", ir_axis(x, a));
    io->n_out = 1;
}

/* Reshape: [batch] + target_shape (one -1 allowed), a view of any arrangement. */
static void reshape_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x)
        return;
    json_t *ts = field(io->cfg, "target_shape");
    if (!json_is_array(ts)) {
        fail(k, DNNMEM_E_MODEL, "config field 'target_shape' is missing or not a list");
        return;
    }
    size_t n = json_array_size(ts);
    if (n + 1 > DM_MAX_DIMS) {
        fail(k, DNNMEM_E_UNSUPPORTED, "target_shape has %zu dims; at most %d are supported", n,
             DM_MAX_DIMS - 1);
        return;
    }
    int64_t shape[DM_MAX_DIMS], total = 1, prod = 1;
    int infer = -1;
    bool in_known = true;
    for (int a = 1; a < x->rank; a++)
        if (x->dim[a] < 0 || !dm_mul_ok(total, x->dim[a], &total))
            in_known = false;
    shape[0] = 0; /* Reshape's 0: the batch dim as it is */
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (!json_int(json_array_get(ts, i), &v) || v < -1 || v > MAX_DIM) {
            fail(k, DNNMEM_E_MODEL, "target_shape[%zu] is not a size", i);
            return;
        }
        if (v == -1) {
            if (infer >= 0) {
                fail(k, DNNMEM_E_MODEL, "target_shape has two -1 dims");
                return;
            }
            infer = (int)i + 1;
        } else if (!dm_mul_ok(prod, v, &prod)) {
            fail(k, DNNMEM_E_SHAPE, "target_shape's size overflows");
            return;
        }
        shape[i + 1] = v;
    }
    struct kt *y = &io->out[0];
    *y = *x;
    y->rank = (int)n + 1;
    perm_identity(y->rank, y->perm);
    for (int a = 1; a < y->rank; a++)
        y->dim[a] = shape[a];
    if (in_known) {
        if (infer >= 0 && prod > 0 && total % prod == 0)
            y->dim[infer] = total / prod;
        else if (infer >= 0 || prod != total) {
            fail(k, DNNMEM_E_SHAPE, "cannot reshape %lld elements per sample to target_shape",
                 (long long)total);
            return;
        }
    } else if (infer >= 0) {
        y->dim[infer] = -1;
    }
    int32_t s = const_ints(k, y->rank, shape);
    y->id = op(k, DM_OP_Reshape, 2, x->id, s);
    io->n_out = 1;
}

static void flatten_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x)
        return;
    struct kt *y = &io->out[0];
    *y = *x;
    int64_t total = 1;
    for (int a = 1; a < x->rank; a++)
        if (total >= 0 && (x->dim[a] < 0 || !dm_mul_ok(total, x->dim[a], &total)))
            total = -1;
    y->rank = 2;
    y->dim[1] = total;
    perm_identity(2, y->perm);
    if (x->rank == 2) { /* Flatten of [batch, n] is [batch, n] itself */
        y->id = x->id;
    } else {
        y->id = op(k, DM_OP_Flatten, 1, x->id);
        attr_i(k, "axis", 1);
    }
    io->n_out = 1;
}

static void permute_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x)
        return;
    json_t *dims = field(io->cfg, "dims");
    if (!json_is_array(dims) || json_array_size(dims) != (size_t)(x->rank - 1)) {
        fail(k, DNNMEM_E_MODEL, "config field 'dims' must list the %d non-batch axes",
             x->rank - 1);
        return;
    }
    int8_t want[DM_MAX_DIMS]; /* output Keras axis i is input Keras axis want[i] */
    unsigned seen = 0;
    want[0] = 0;
    for (int i = 1; i < x->rank; i++) {
        int64_t v;
        if (!json_int(json_array_get(dims, (size_t)i - 1), &v) || v < 1 || v >= x->rank ||
            (seen >> v & 1u)) {
            fail(k, DNNMEM_E_MODEL, "config field 'dims' is not a permutation of 1..%d",
                 x->rank - 1);
            return;
        }
        seen |= 1u << v;
        want[i] = (int8_t)v;
    }
    struct kt *y = &io->out[0];
    *y = *x;
    /* one Transpose from x's arrangement to the permuted Keras order */
    int64_t p[DM_MAX_DIMS];
    for (int i = 0; i < x->rank; i++) {
        p[i] = ir_axis(x, want[i]);
        y->dim[i] = x->dim[want[i]];
    }
    perm_identity(x->rank, y->perm);
    y->id = op(k, DM_OP_Transpose, 1, x->id);
    attr_ints(k, "perm", x->rank, p);
    io->n_out = 1;
}

static void repeat_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, 2, 2))
        return;
    int64_t n = get_int(k, io->cfg, "n", INT64_MIN, 1);
    if (k->st != DNNMEM_OK)
        return;
    int32_t ax = const_ints(k, INTS(1));
    int32_t u = op(k, DM_OP_Unsqueeze, 2, x->id, ax);
    int32_t rep = const_ints(k, INTS(1, n, 1));
    struct kt *y = &io->out[0];
    *y = *x;
    y->rank = 3;
    y->dim[1] = n;
    y->dim[2] = x->dim[1];
    perm_identity(3, y->perm);
    y->id = op(k, DM_OP_Tile, 2, u, rep);
    io->n_out = 1;
}

static void axis_pairs(struct keras *k, json_t *cfg, const char *key, int ns, int64_t dflt,
                       int64_t *pb, int64_t *pe);

static void zeropad_layer(struct keras *k, struct layer_io *io, int ns)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, ns + 2, ns + 2))
        return;
    json_t *cfg = io->cfg;
    int64_t pb[DM_MAX_DIMS], pe[DM_MAX_DIMS];
    int c = channel_axis(k, cfg, x->rank);
    axis_pairs(k, cfg, "padding", ns, 1, pb, pe);
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    perm_channels_first(x->rank, c, cf);
    int32_t xi = arrange(k, x, cf);
    int64_t pads[2 * DM_MAX_DIMS] = {0};
    int r = x->rank;
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        pads[2 + i] = pb[i];
        pads[r + 2 + i] = pe[i];
        if (x->dim[a] >= 0)
            y->dim[a] = x->dim[a] + pb[i] + pe[i];
    }
    int32_t p = const_ints(k, 2 * r, pads);
    y->id = op(k, DM_OP_Pad, 2, xi, p);
    io->n_out = 1;
}

/* Per-axis pairs of a padding or cropping field: an integer, one per axis,
 * or (begin, end) per axis ("padding", "cropping"). */
static void axis_pairs(struct keras *k, json_t *cfg, const char *key, int ns, int64_t dflt,
                       int64_t *pb, int64_t *pe)
{
    json_t *v = field(cfg, key);
    int64_t one;
    for (int i = 0; i < ns; i++)
        pb[i] = pe[i] = dflt;
    if (!v)
        return;
    if (json_int(v, &one)) {
        for (int i = 0; i < ns; i++)
            pb[i] = pe[i] = one;
    } else if (json_is_array(v) && ns == 1 && json_array_size(v) == 2 &&
               json_int(json_array_get(v, 0), &pb[0]) && json_int(json_array_get(v, 1), &pe[0])) {
    } else if (json_is_array(v) && json_array_size(v) == (size_t)ns) {
        for (int i = 0; i < ns; i++) {
            json_t *e = json_array_get(v, (size_t)i);
            if (json_int(e, &pb[i]))
                pe[i] = pb[i];
            else if (!json_is_array(e) || json_array_size(e) != 2 ||
                     !json_int(json_array_get(e, 0), &pb[i]) ||
                     !json_int(json_array_get(e, 1), &pe[i]))
                fail(k, DNNMEM_E_MODEL, "config field '%s' is malformed", key);
        }
    } else
        fail(k, DNNMEM_E_MODEL, "config field '%s' is malformed", key);
    for (int i = 0; i < ns; i++)
        if (pb[i] < 0 || pe[i] < 0 || pb[i] > MAX_DIM || pe[i] > MAX_DIM)
            fail(k, DNNMEM_E_MODEL, "config field '%s' holds a negative or absurd size", key);
}

/* Cropping1D/2D/3D: a Slice of the spatial axes (channels first). */
static void crop_layer(struct keras *k, struct layer_io *io, int ns)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, ns + 2, ns + 2))
        return;
    int64_t cb[DM_MAX_DIMS], ce[DM_MAX_DIMS];
    int c = channel_axis(k, io->cfg, x->rank);
    axis_pairs(k, io->cfg, "cropping", ns, ns == 1 ? 1 : 0, cb, ce);
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    perm_channels_first(x->rank, c, cf);
    int32_t xi = arrange(k, x, cf);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    int64_t st[DM_MAX_DIMS], en[DM_MAX_DIMS], ax[DM_MAX_DIMS];
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        st[i] = cb[i];
        en[i] = ce[i] ? -ce[i] : INT64_MAX;
        ax[i] = 2 + i;
        if (x->dim[a] >= 0) {
            y->dim[a] = x->dim[a] - cb[i] - ce[i];
            if (y->dim[a] < 0) {
                fail(k, DNNMEM_E_SHAPE, "cropping %lld + %lld exceeds the input's %lld",
                     (long long)cb[i], (long long)ce[i], (long long)x->dim[a]);
                return;
            }
        }
    }
    int32_t ts = const_ints(k, ns, st), te = const_ints(k, ns, en), ta = const_ints(k, ns, ax);
    y->id = op(k, DM_OP_Slice, 4, xi, ts, te, ta);
    io->n_out = 1;
}

/* UpSampling1D/2D/3D: a Resize of the spatial axes by integer factors. */
static void upsample_layer(struct keras *k, struct layer_io *io, int ns)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, ns + 2, ns + 2))
        return;
    int64_t f[DM_MAX_DIMS];
    int c = ns == 1 ? 2 : channel_axis(k, io->cfg, x->rank);
    get_ints(k, io->cfg, "size", ns, 2, 1, f);
    if (k->st != DNNMEM_OK)
        return;
    int8_t cf[DM_MAX_DIMS];
    perm_channels_first(x->rank, c, cf);
    int32_t xi = arrange(k, x, cf);
    struct kt *y = &io->out[0];
    *y = *x;
    memcpy(y->perm, cf, sizeof cf);
    double sc[DM_MAX_DIMS];
    sc[0] = sc[1] = 1;
    for (int i = 0, a = 1; i < ns; i++, a++) {
        if (a == c)
            a++;
        sc[2 + i] = (double)f[i];
        if (x->dim[a] >= 0 && !dm_mul_ok(x->dim[a], f[i], &y->dim[a])) {
            fail(k, DNNMEM_E_SHAPE, "the upsampled size overflows");
            return;
        }
    }
    int32_t scales = constant(k);
    attr_floats(k, "value_floats", x->rank, sc);
    y->id = op(k, DM_OP_Resize, 3, xi, -1, scales);
    attr_s(k, "mode", "nearest");
    io->n_out = 1;
}

static void call_layer(struct keras *k, json_t *layer, struct layer_io *io);

/* TimeDistributed(layer): the layer on every step of [batch, T, ...] at once.
 * Dense applies to the last axis anyway; other layers see [batch * T, ...]
 * (a Reshape view before and after). */
static void time_distributed_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, 3, DM_MAX_DIMS))
        return;
    json_t *inner = field(io->cfg, "layer");
    const char *cls = json_string_value(field(inner, "class_name"));
    if (!cls || !json_is_object(field(inner, "config"))) {
        fail(k, DNNMEM_E_MODEL, "config field 'layer' (the wrapped layer) is missing");
        return;
    }
    if (!strcmp(cls, "Dense")) {
        struct layer_io lio = {.in = x, .n_in = 1};
        call_layer(k, inner, &lio);
        memcpy(io->out, lio.out, sizeof lio.out);
        io->n_out = lio.n_out;
        return;
    }
    int64_t T = known(k, x, 1, "time axis");
    struct kt in = *x;
    int64_t shape[DM_MAX_DIMS];
    in.rank = x->rank - 1;
    in.dim[0] = -1;
    shape[0] = -1;
    for (int a = 2; a < x->rank; a++) {
        in.dim[a - 1] = known(k, x, a, "step shape");
        shape[a - 1] = in.dim[a - 1];
    }
    if (k->st != DNNMEM_OK)
        return;
    perm_identity(in.rank, in.perm);
    in.id = op(k, DM_OP_Reshape, 2, keras_order(k, x), const_ints(k, in.rank, shape));
    struct layer_io lio = {.in = &in, .n_in = 1};
    call_layer(k, inner, &lio);
    if (k->st != DNNMEM_OK)
        return;
    if (lio.n_out != 1) {
        fail(k, DNNMEM_E_UNSUPPORTED, "a wrapped layer with %d outputs", lio.n_out);
        return;
    }
    const struct kt *o = &lio.out[0];
    if (o->rank + 1 > DM_MAX_DIMS) {
        fail(k, DNNMEM_E_UNSUPPORTED, "the output has too many dims");
        return;
    }
    struct kt *y = &io->out[0];
    *y = *o;
    y->rank = o->rank + 1;
    y->dim[0] = x->dim[0];
    y->dim[1] = T;
    shape[0] = -1;
    shape[1] = T;
    for (int a = 1; a < o->rank; a++) {
        y->dim[a + 1] = o->dim[a];
        shape[a + 1] = o->dim[a];
        if (o->dim[a] < 0) {
            fail(k, DNNMEM_E_UNSUPPORTED, "the wrapped layer's output has a None dim");
            return;
        }
    }
    perm_identity(y->rank, y->perm);
    y->id = op(k, DM_OP_Reshape, 2, keras_order(k, o), const_ints(k, y->rank, shape));
    io->n_out = 1;
}

/* Embedding(input_dim, output_dim): a lookup of [batch, ...] indices. */
static void embedding_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, 1, DM_MAX_DIMS - 1))
        return;
    int64_t vocab = get_int(k, io->cfg, "input_dim", INT64_MIN, 1);
    int64_t dim = get_int(k, io->cfg, "output_dim", INT64_MIN, 1);
    if (k->st != DNNMEM_OK)
        return;
    int32_t xi = keras_order(k, x);
    if (dm_dtype_is_float(x->dtype)) { /* Keras casts float ids to int32 first */
        xi = op(k, DM_OP_Cast, 1, xi);
        attr_i(k, "to", DM_INT32);
    }
    int32_t w = weight(k, "embeddings", 2, (int64_t[]){vocab, dim});
    struct kt *y = &io->out[0];
    *y = *x;
    y->dtype = DM_FLOAT;
    y->rank = x->rank + 1;
    y->dim[x->rank] = dim;
    perm_identity(y->rank, y->perm);
    y->id = op(k, DM_OP_Gather, 2, w, xi);
    io->n_out = 1;
}

/* LSTM, GRU, SimpleRNN (and CuDNNLSTM, CuDNNGRU), one or two directions. */
struct rnn {
    enum dm_op op;
    int64_t gates, units;
    int n_bias;          /* bias vectors per direction: 0, 1 or 2 */
    bool seq, state, backwards;
};

static void read_rnn(struct keras *k, json_t *cfg, const char *cls, struct rnn *r)
{
    memset(r, 0, sizeof *r);
    bool cudnn = !strncmp(cls, "CuDNN", 5);
    const char *base = cudnn ? cls + 5 : cls;
    if (!strcmp(base, "LSTM")) {
        r->op = DM_OP_LSTM;
        r->gates = 4;
    } else if (!strcmp(base, "GRU")) {
        r->op = DM_OP_GRU;
        r->gates = 3;
    } else if (!strcmp(cls, "SimpleRNN")) {
        r->op = DM_OP_RNN;
        r->gates = 1;
    } else {
        fail(k, DNNMEM_E_UNSUPPORTED, "recurrent layer '%s' is not supported (LSTM, GRU, "
             "SimpleRNN, CuDNNLSTM, CuDNNGRU)", cls);
        return;
    }
    r->units = get_int(k, cfg, "units", INT64_MIN, 1);
    bool bias = cudnn || get_bool(k, cfg, "use_bias", true);
    /* GRU's reset_after: false in Keras 2 before 2.3, true after (and in
     * Keras 3); it gives GRU a second bias vector */
    bool two = cudnn || (r->op == DM_OP_GRU && get_bool(k, cfg, "reset_after", true));
    r->n_bias = bias ? (two ? 2 : 1) : 0;
    r->seq = get_bool(k, cfg, "return_sequences", false);
    r->state = get_bool(k, cfg, "return_state", false);
    r->backwards = get_bool(k, cfg, "go_backwards", false);
    if (get_bool(k, cfg, "time_major", false))
        fail(k, DNNMEM_E_UNSUPPORTED, "time_major true is not supported");
}

/* The recurrent node over x [batch, seq, input] (Keras order); dirs 1 or 2.
 * Outputs: Y [batch, seq, dirs, units], Y_h (and Y_c) [batch, dirs, units]. */
static struct dm_node *rnn_node(struct keras *k, const struct rnn *r, int32_t x, int64_t in,
                                int dirs, const char *wprefix)
{
    int64_t gu;
    if (!dm_mul_ok(r->gates, r->units, &gu)) {
        fail(k, DNNMEM_E_SHAPE, "units overflow");
        return NULL;
    }
    char wn[3][64];
    snprintf(wn[0], sizeof wn[0], "%skernel", wprefix);
    snprintf(wn[1], sizeof wn[1], "%srecurrent_kernel", wprefix);
    snprintf(wn[2], sizeof wn[2], "%sbias", wprefix);
    const char *wname[3];
    for (int i = 0; i < 3; i++)
        wname[i] = dm_arena_strdup(&k->g->arena, wn[i]);
    if (!wname[0] || !wname[1] || !wname[2]) {
        oom(k);
        return NULL;
    }
    int32_t w = weight(k, wname[0], 3, (int64_t[]){dirs, gu, in});
    int32_t rr = weight(k, wname[1], 3, (int64_t[]){dirs, gu, r->units});
    int32_t b = r->n_bias ? weight(k, wname[2], 2, (int64_t[]){dirs, r->n_bias * gu}) : -1;
    int32_t in4[4] = {x, w, rr, b};
    struct dm_node *n = node(k, r->op, b >= 0 ? 4 : 3, in4, r->op == DM_OP_LSTM ? 3 : 2);
    if (!n)
        return NULL;
    attr_i(k, "hidden_size", r->units);
    attr_i(k, "layout", 1);
    attr_s(k, "direction", dirs == 2 ? "bidirectional" : r->backwards ? "reverse" : "forward");
    if (r->op == DM_OP_GRU && r->n_bias == 2)
        attr_i(k, "linear_before_reset", 1);
    return &k->g->nodes[k->g->n_nodes - 1];
}

static void rnn_layer(struct keras *k, struct layer_io *io, const char *cls)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, 3, 3))
        return;
    struct rnn r;
    read_rnn(k, io->cfg, cls, &r);
    int64_t in = known(k, x, 2, "feature dim");
    if (k->st != DNNMEM_OK)
        return;
    int32_t xi = keras_order(k, x);
    struct dm_node *n = rnn_node(k, &r, xi, in, 1, "");
    if (!n)
        return;
    int32_t yo = n->out[0], yh = n->out[1], yc = r.op == DM_OP_LSTM ? n->out[2] : -1;
    struct kt *y = &io->out[0];
    *y = *x;
    perm_identity(3, y->perm);
    if (r.seq) { /* [batch, seq, 1, units] -> [batch, seq, units]: a view */
        y->dim[2] = r.units;
        y->id = op(k, DM_OP_Reshape, 2, yo, const_ints(k, INTS(0, 0, r.units)));
    } else {
        y->rank = 2;
        y->dim[1] = r.units;
        y->id = op(k, DM_OP_Reshape, 2, yh, const_ints(k, INTS(0, r.units)));
    }
    io->n_out = 1;
    if (r.state) { /* [output, state_h(, state_c)] */
        int32_t hs[2] = {yh, yc};
        for (int i = 0; i < (yc >= 0 ? 2 : 1); i++) {
            struct kt *s = &io->out[1 + i];
            *s = *x;
            s->rank = 2;
            s->dim[1] = r.units;
            perm_identity(2, s->perm);
            s->id = op(k, DM_OP_Reshape, 2, hs[i], const_ints(k, INTS(0, r.units)));
            io->n_out++;
        }
    }
}

static void bidirectional_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x || !need_rank(k, x, 3, 3))
        return;
    json_t *inner = field(io->cfg, "layer");
    const char *cls = json_string_value(field(inner, "class_name"));
    json_t *icfg = field(inner, "config");
    if (!cls || !json_is_object(icfg)) {
        fail(k, DNNMEM_E_MODEL, "config field 'layer' (the wrapped layer) is missing");
        return;
    }
    if (field(io->cfg, "backward_layer")) {
        json_t *bl = field(io->cfg, "backward_layer");
        const char *bc = json_string_value(field(bl, "class_name"));
        json_t *bcfg = field(bl, "config");
        if (!bc || strcmp(bc, cls) ||
            get_int(k, bcfg, "units", INT64_MIN, 1) != get_int(k, icfg, "units", INT64_MIN, 1)) {
            if (k->st == DNNMEM_OK)
                fail(k, DNNMEM_E_UNSUPPORTED, "a backward_layer unlike the forward one is not "
                     "supported");
            return;
        }
    }
    struct rnn r;
    read_rnn(k, icfg, cls, &r);
    const char *mode = get_str(k, io->cfg, "merge_mode", "concat");
    int64_t in = known(k, x, 2, "feature dim");
    if (k->st != DNNMEM_OK)
        return;
    if (r.state) {
        fail(k, DNNMEM_E_UNSUPPORTED, "return_state in a Bidirectional layer is not supported");
        return;
    }
    int32_t xi = keras_order(k, x);
    /* the forward and backward layers' variables, one tensor each of kernel,
     * recurrent_kernel, bias with a leading direction axis of 2 */
    struct dm_node *n = rnn_node(k, &r, xi, in, 2, "");
    if (!n)
        return;
    int32_t yo = n->out[0], yh = n->out[1];
    struct kt *y = &io->out[0];
    *y = *x;
    perm_identity(3, y->perm);
    int32_t base = r.seq ? yo : yh; /* [batch, (seq,) 2, units] */
    int dax = r.seq ? 2 : 1;
    if (!r.seq)
        y->rank = 2;
    if (!strcmp(mode, "concat")) {
        y->dim[dax] = 2 * r.units;
        y->id = op(k, DM_OP_Reshape, 2, base,
                   r.seq ? const_ints(k, INTS(0, 0, 2 * r.units)) : const_ints(k, INTS(0, 2 * r.units)));
    } else if (!strcmp(mode, "sum") || !strcmp(mode, "ave") || !strcmp(mode, "mul")) {
        y->dim[dax] = r.units;
        if (!strcmp(mode, "sum")) {
            y->id = op(k, DM_OP_ReduceSum, 2, base, const_ints(k, INTS(dax)));
        } else {
            y->id = op(k, !strcmp(mode, "ave") ? DM_OP_ReduceMean : DM_OP_ReduceProd, 1, base);
            attr_ints(k, "axes", INTS(dax));
        }
        attr_i(k, "keepdims", 0);
    } else {
        fail(k, DNNMEM_E_UNSUPPORTED, "merge_mode '%s' is not supported (concat, sum, ave, mul)",
             mode);
        return;
    }
    io->n_out = 1;
}

/* x [batch, len, d] by a weight of Keras' shape [d, a, b] (EinsumDense
 * "abc,cde->abde"), plus a bias [a, b]: a MatMul by the weight seen as
 * [d, a*b] (a view), the bias added (seen as [a*b]). */
static int32_t einsum_dense(struct keras *k, int32_t x, const char *name, int64_t d, int64_t a,
                            int64_t b, bool bias)
{
    char wn[2][48];
    snprintf(wn[0], sizeof wn[0], "%s/kernel", name);
    snprintf(wn[1], sizeof wn[1], "%s/bias", name);
    const char *kn = dm_arena_strdup(&k->g->arena, wn[0]);
    const char *bn = dm_arena_strdup(&k->g->arena, wn[1]);
    if (!kn || !bn)
        return oom(k);
    int32_t w = weight(k, kn, 3, (int64_t[]){d, a, b});
    int32_t w2 = op(k, DM_OP_Reshape, 2, w, const_ints(k, INTS(d, a * b)));
    int32_t y = op(k, DM_OP_MatMul, 2, x, w2);
    if (bias) {
        int32_t bb = weight(k, bn, 2, (int64_t[]){a, b});
        int32_t b1 = op(k, DM_OP_Reshape, 2, bb, const_ints(k, INTS(a * b)));
        y = op(k, DM_OP_Add, 2, y, b1);
    }
    return y;
}

/* MultiHeadAttention(num_heads, key_dim, value_dim, output_shape, use_bias,
 * dropout) over query [batch, T, dq], value [batch, S, dv] and key (value by
 * default), as Keras computes it: the projections, the query scaled by
 * 1/sqrt(key_dim), scores [batch, heads, T, S], softmax, dropout, the
 * weighted values, the output projection. */
static void mha_layer(struct keras *k, struct layer_io *io)
{
    if (io->n_in < 2 || io->n_in > 3) {
        fail(k, DNNMEM_E_MODEL, "%d inputs; MultiHeadAttention takes query, value and "
             "optionally key", io->n_in);
        return;
    }
    const struct kt *q = &io->in[0], *v = &io->in[1], *kk = io->n_in == 3 ? &io->in[2] : v;
    json_t *cfg = io->cfg;
    if (!need_rank(k, q, 3, 3) || !need_rank(k, v, 3, 3) || !need_rank(k, kk, 3, 3))
        return;
    json_t *axes = field(cfg, "attention_axes");
    if (axes && !(json_is_array(axes) && json_array_size(axes) == 1 &&
                  json_integer_value(json_array_get(axes, 0)) == 1)) {
        fail(k, DNNMEM_E_UNSUPPORTED, "attention_axes other than the sequence axis");
        return;
    }
    int64_t H = get_int(k, cfg, "num_heads", INT64_MIN, 1);
    int64_t dk = get_int(k, cfg, "key_dim", INT64_MIN, 1);
    int64_t dv = get_int(k, cfg, "value_dim", dk, 1);
    bool bias = get_bool(k, cfg, "use_bias", true);
    double drop = get_num(k, cfg, "dropout", 0, 0, 1);
    int64_t qd = known(k, q, 2, "query width"), vd = known(k, v, 2, "value width"),
            kd = known(k, kk, 2, "key width");
    int64_t out = qd;
    json_t *os = field(cfg, "output_shape");
    if (os) {
        if (json_is_array(os) && json_array_size(os) == 1)
            os = json_array_get(os, 0);
        if (!json_int(os, &out) || out < 1 || out > MAX_DIM) {
            fail(k, DNNMEM_E_UNSUPPORTED, "output_shape must be one size");
            return;
        }
    }
    int64_t hk, hv;
    if (k->st != DNNMEM_OK || !dm_mul_ok(H, dk, &hk) || !dm_mul_ok(H, dv, &hv) || hk > MAX_DIM ||
        hv > MAX_DIM) {
        fail(k, DNNMEM_E_SHAPE, "num_heads x key_dim is an absurd size");
        return;
    }
    int32_t xq = keras_order(k, q), xv = keras_order(k, v), xk = keras_order(k, kk);
    int32_t pq = einsum_dense(k, xq, "query", qd, H, dk, bias);
    int32_t pk = einsum_dense(k, xk, "key", kd, H, dk, bias);
    int32_t pv = einsum_dense(k, xv, "value", vd, H, dv, bias);
    pq = op(k, DM_OP_Reshape, 2, pq, const_ints(k, INTS(0, 0, H, dk)));
    pq = op(k, DM_OP_Mul, 2, pq, const_f(k, 1.0 / sqrt((double)dk)));
    pk = op(k, DM_OP_Reshape, 2, pk, const_ints(k, INTS(0, 0, H, dk)));
    pv = op(k, DM_OP_Reshape, 2, pv, const_ints(k, INTS(0, 0, H, dv)));
    int32_t tq = op(k, DM_OP_Transpose, 1, pq);
    attr_ints(k, "perm", INTS(0, 2, 1, 3)); /* [B, H, T, dk] */
    int32_t tk = op(k, DM_OP_Transpose, 1, pk);
    attr_ints(k, "perm", INTS(0, 2, 3, 1)); /* [B, H, dk, S] */
    int32_t tv = op(k, DM_OP_Transpose, 1, pv);
    attr_ints(k, "perm", INTS(0, 2, 1, 3)); /* [B, H, S, dv] */
    int32_t sc = op(k, DM_OP_MatMul, 2, tq, tk);
    int32_t p = op(k, DM_OP_Softmax, 1, sc);
    attr_i(k, "axis", -1);
    if (drop > 0)
        p = op(k, DM_OP_Dropout, 2, p, const_f(k, drop < 1 ? drop : 0.5));
    int32_t o = op(k, DM_OP_MatMul, 2, p, tv); /* [B, H, T, dv] */
    o = op(k, DM_OP_Transpose, 1, o);
    attr_ints(k, "perm", INTS(0, 2, 1, 3));
    o = op(k, DM_OP_Reshape, 2, o, const_ints(k, INTS(0, 0, hv)));
    int32_t wo = weight(k, "attention_output/kernel", 3, (int64_t[]){H, dv, out});
    int32_t wo2 = op(k, DM_OP_Reshape, 2, wo, const_ints(k, INTS(hv, out)));
    o = op(k, DM_OP_MatMul, 2, o, wo2);
    if (bias)
        o = op(k, DM_OP_Add, 2, weight(k, "attention_output/bias", 1, &out), o);
    struct kt *y = &io->out[0];
    *y = *q;
    perm_identity(3, y->perm);
    y->dim[2] = out;
    y->id = o;
    io->n_out = 1;
}

static void softmax_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x)
        return;
    int a = keras_axis(k, axis_field(k, io->cfg, -1), x->rank, false);
    if (k->st != DNNMEM_OK)
        return;
    same_out(io, x, op(k, DM_OP_Softmax, 1, x->id));
    attr_i(k, "axis", ir_axis(x, a));
}

static void rescaling_layer(struct keras *k, struct layer_io *io)
{
    const struct kt *x = one_input(k, io);
    if (!x)
        return;
    double scale = get_num(k, io->cfg, "scale", 1, -1e30, 1e30);
    double offset = get_num(k, io->cfg, "offset", 0, -1e30, 1e30);
    int32_t y = op(k, DM_OP_Mul, 2, x->id, const_f(k, scale));
    if (offset != 0)
        y = op(k, DM_OP_Add, 2, y, const_f(k, offset));
    same_out(io, x, y);
}

/* ---- models ------------------------------------------------------------------------- */

static enum dm_dtype dtype_of(struct keras *k, json_t *cfg)
{
    json_t *v = field(cfg, "dtype");
    const char *s = json_string_value(v);
    if (json_is_object(v)) /* Keras 3 DTypePolicy, Keras 2 mixed-precision Policy */
        s = json_string_value(field(field(v, "config"), "name"));
    if (s && !strncmp(s, "mixed_", 6) && !k->mixed)
        k->mixed = s;
    if (!s || !strcmp(s, "float32") || !strncmp(s, "mixed_", 6))
        return DM_FLOAT; /* a mixed policy keeps float32 variables; see --precision amp-* */
    static const struct {
        const char *name;
        enum dm_dtype t;
    } types[] = {{"float16", DM_FLOAT16}, {"bfloat16", DM_BFLOAT16}, {"float64", DM_DOUBLE},
                 {"int32", DM_INT32},     {"int64", DM_INT64},       {"int8", DM_INT8},
                 {"uint8", DM_UINT8},     {"int16", DM_INT16},       {"bool", DM_BOOL}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(s, types[i].name))
            return types[i].t;
    fail(k, DNNMEM_E_UNSUPPORTED, "dtype '%s' is not supported", s);
    return DM_FLOAT;
}

/* A graph input from a shape list [None, d1, ...] (Keras order, batch first). */
static void make_input(struct keras *k, const char *name, json_t *shape, enum dm_dtype dt,
                       struct kt *out)
{
    struct dm_graph *g = k->g;
    if (k->st != DNNMEM_OK)
        return;
    size_t r = json_array_size(shape);
    if (r < 1 || r > DM_MAX_DIMS) {
        fail(k, r < 1 ? DNNMEM_E_MODEL : DNNMEM_E_UNSUPPORTED,
             "input shape has %zu dims; 1 to %d are supported", r, DM_MAX_DIMS);
        return;
    }
    if (dm_graph_find(g, name) >= 0) {
        fail(k, DNNMEM_E_MODEL, "two inputs are named '%s'", name);
        return;
    }
    int32_t t = dm_graph_add_tensor(g, name);
    struct dm_dim *d = dm_arena_array(&g->arena, r + 1, sizeof *d);
    int32_t *inputs = dm_arena_array(&g->arena, (size_t)g->n_inputs + 1, sizeof *inputs);
    if (t < 0 || !d || !inputs) {
        oom(k);
        return;
    }
    memset(out, 0, sizeof *out);
    out->id = t;
    out->rank = (int)r;
    out->dtype = dt;
    perm_identity((int)r, out->perm);
    static const char *const spatial[3][3] = {{"seq"}, {"height", "width"},
                                              {"depth", "height", "width"}};
    for (size_t i = 0; i < r; i++) {
        json_t *e = json_array_get(shape, i);
        int64_t v;
        d[i] = (struct dm_dim){-1, -1};
        if (json_is_null(e)) {
            const char *sym;
            char buf[256];
            if (i == 0)
                sym = "batch";
            else if (r <= 3 && i == 1)
                sym = "seq";
            else if (r >= 3 && r <= 5 && i < r - 1)
                sym = spatial[r - 3][i - 1];
            else {
                snprintf(buf, sizeof buf, "%s:%zu", name, i);
                sym = buf;
            }
            if ((d[i].sym = dm_graph_symbol(g, sym)) < 0) {
                oom(k);
                return;
            }
            out->dim[i] = -1;
        } else if (json_int(e, &v) && v >= 0 && v <= MAX_DIM) {
            d[i].value = v;
            out->dim[i] = v;
        } else {
            fail(k, json_int(e, &v) && v > MAX_DIM ? DNNMEM_E_SHAPE : DNNMEM_E_MODEL,
                 "input '%s' dim %zu is not a size (null or 0 to %lld)", name, i,
                 (long long)MAX_DIM);
            return;
        }
    }
    struct dm_tensor *tt = &g->tensors[t];
    tt->role = DM_ROLE_INPUT;
    tt->dtype = dt;
    tt->rank = (int)r;
    tt->dims = d;
    if (g->n_inputs)
        memcpy(inputs, g->inputs, (size_t)g->n_inputs * sizeof *inputs);
    inputs[g->n_inputs++] = t;
    g->inputs = inputs;
}

static void build_model(struct keras *k, json_t *layer, const struct kt *in, int n_in,
                        struct layer_io *io);

/* One call of a layer on its inputs. */
static void call_layer(struct keras *k, json_t *layer, struct layer_io *io)
{
    const char *cls = json_string_value(field(layer, "class_name"));
    json_t *cfg = field(layer, "config");
    if (!cls) {
        fail(k, DNNMEM_E_MODEL, "a layer has no class_name");
        return;
    }
    io->cfg = cfg;
    io->n_out = 0;
    if (!strcmp(cls, "Sequential") || !strcmp(cls, "Functional") || !strcmp(cls, "Model")) {
        build_model(k, layer, io->in, io->n_in, io);
        return;
    }
    if (!json_is_object(cfg)) {
        fail(k, DNNMEM_E_MODEL, "config field 'config' is missing");
        return;
    }
    bool frozen = k->frozen;
    if (!get_bool(k, cfg, "trainable", true))
        k->frozen = true;
    const char *pname = policy_name(cfg);
    if (pname && !strncmp(pname, "mixed_", 6) && !k->mixed)
        k->mixed = pname;
    int ns = 0;
    size_t len = strlen(cls);
    if (len >= 2 && cls[len - 1] == 'D' && cls[len - 2] >= '1' && cls[len - 2] <= '3')
        ns = cls[len - 2] - '0';
    char base[64];
    snprintf(base, sizeof base, "%.*s", ns ? (int)len - 2 : (int)len, cls);
    if (ns && (!strcmp(base, "Conv") || !strcmp(base, "Convolution")))
        conv_layer(k, io, ns, 'c');
    else if (ns && !strcmp(base, "DepthwiseConv") && ns <= 2)
        conv_layer(k, io, ns, 'd');
    else if (ns && (!strcmp(base, "SeparableConv") || !strcmp(base, "SeparableConvolution")) &&
             ns <= 2)
        conv_layer(k, io, ns, 's');
    else if (len == 15 && !strncmp(cls, "Conv", 4) && cls[4] >= '1' && cls[4] <= '3' &&
             !strcmp(cls + 5, "DTranspose")) /* Conv1DTranspose .. Conv3DTranspose */
        conv_layer(k, io, cls[4] - '0', 't');
    else if (ns && (!strcmp(base, "MaxPooling") || !strcmp(base, "MaxPool")))
        pool_layer(k, io, ns, true);
    else if (ns && (!strcmp(base, "AveragePooling") || !strcmp(base, "AvgPool")))
        pool_layer(k, io, ns, false);
    else if (ns && (!strcmp(base, "GlobalAveragePooling") || !strcmp(base, "GlobalAvgPool")))
        global_pool_layer(k, io, ns, false);
    else if (ns && (!strcmp(base, "GlobalMaxPooling") || !strcmp(base, "GlobalMaxPool")))
        global_pool_layer(k, io, ns, true);
    else if (ns && !strcmp(base, "ZeroPadding"))
        zeropad_layer(k, io, ns);
    else if (ns && !strcmp(base, "Cropping"))
        crop_layer(k, io, ns);
    else if (ns && !strcmp(base, "UpSampling"))
        upsample_layer(k, io, ns);
    else if (ns && !strcmp(base, "SpatialDropout"))
        dropout_layer(k, io, "rate", 0);
    else if (ns)
        fail(k, DNNMEM_E_UNSUPPORTED, "class '%s' is not supported", cls);
    else if (!strcmp(cls, "Dense"))
        dense_layer(k, io);
    else if (!strcmp(cls, "BatchNormalization") || !strcmp(cls, "SyncBatchNormalization"))
        batchnorm_layer(k, io);
    else if (!strcmp(cls, "LayerNormalization"))
        layernorm_layer(k, io);
    else if (!strcmp(cls, "Dropout") || !strcmp(cls, "AlphaDropout") ||
             !strcmp(cls, "GaussianDropout"))
        dropout_layer(k, io, "rate", 0);
    else if (!strcmp(cls, "GaussianNoise")) /* noise of the input's size in training */
        dropout_layer(k, io, "stddev", 0);
    else if (!strcmp(cls, "Activation")) {
        const struct kt *x = one_input(k, io);
        if (x) {
            same_out(io, x, x->id);
            activation(k, activation_name(k, cfg, "activation", NULL), &io->out[0]);
            if (!field(cfg, "activation"))
                fail(k, DNNMEM_E_MODEL, "config field 'activation' is missing");
        }
    } else if (!strcmp(cls, "ReLU"))
        relu_layer(k, io);
    else if (!strcmp(cls, "LeakyReLU")) {
        const struct kt *x = one_input(k, io);
        double a = get_num(k, cfg, field(cfg, "negative_slope") ? "negative_slope" : "alpha",
                           k->keras3 ? 0.2 : 0.3, 0, 1e9);
        if (x) {
            same_out(io, x, op(k, DM_OP_LeakyRelu, 1, x->id));
            attr_f(k, "alpha", a);
        }
    } else if (!strcmp(cls, "ELU")) {
        const struct kt *x = one_input(k, io);
        if (x) {
            same_out(io, x, op(k, DM_OP_Elu, 1, x->id));
            attr_f(k, "alpha", get_num(k, cfg, "alpha", 1, -1e9, 1e9));
        }
    } else if (!strcmp(cls, "Softmax"))
        softmax_layer(k, io);
    else if (!strcmp(cls, "Add"))
        merge_layer(k, io, io->n_in == 2 ? DM_OP_Add : DM_OP_Sum, io->n_in == 2);
    else if (!strcmp(cls, "Subtract"))
        merge_layer(k, io, DM_OP_Sub, true);
    else if (!strcmp(cls, "Multiply"))
        merge_layer(k, io, DM_OP_Mul, true);
    else if (!strcmp(cls, "Average"))
        merge_layer(k, io, DM_OP_Mean, false);
    else if (!strcmp(cls, "Maximum"))
        merge_layer(k, io, DM_OP_Max, false);
    else if (!strcmp(cls, "Minimum"))
        merge_layer(k, io, DM_OP_Min, false);
    else if (!strcmp(cls, "Concatenate"))
        concat_layer(k, io);
    else if (!strcmp(cls, "Reshape"))
        reshape_layer(k, io);
    else if (!strcmp(cls, "Flatten"))
        flatten_layer(k, io);
    else if (!strcmp(cls, "Permute"))
        permute_layer(k, io);
    else if (!strcmp(cls, "RepeatVector"))
        repeat_layer(k, io);
    else if (!strcmp(cls, "Embedding"))
        embedding_layer(k, io);
    else if (!strcmp(cls, "LSTM") || !strcmp(cls, "GRU") || !strcmp(cls, "SimpleRNN") ||
             !strcmp(cls, "CuDNNLSTM") || !strcmp(cls, "CuDNNGRU"))
        rnn_layer(k, io, cls);
    else if (!strcmp(cls, "Bidirectional"))
        bidirectional_layer(k, io);
    else if (!strcmp(cls, "TimeDistributed"))
        time_distributed_layer(k, io);
    else if (!strcmp(cls, "MultiHeadAttention"))
        mha_layer(k, io);
    else if (!strcmp(cls, "Rescaling"))
        rescaling_layer(k, io);
    else if (!strcmp(cls, "InputLayer") || !strcmp(cls, "Identity")) {
        const struct kt *x = one_input(k, io);
        if (x)
            same_out(io, x, x->id);
    } else
        fail(k, DNNMEM_E_UNSUPPORTED,
             "class '%s' is not supported (see README: Keras layers)", cls);
    k->frozen = frozen;
    if (k->st == DNNMEM_OK && io->n_out < 1)
        fail(k, DNNMEM_E_INTERNAL, "the layer made no output");
}

static const char *layer_name(json_t *layer)
{
    const char *n = json_string_value(field(field(layer, "config"), "name"));
    return n ? n : json_string_value(field(layer, "name"));
}

/* Enter a layer: scope "/<name>" (a shared layer's later calls
 * "/<name>.<call>"), messages name it. Returns what leave_layer restores. */
struct saved {
    size_t scope_len;
    const char *layer, *cls;
    int call;
};

static struct saved enter_layer(struct keras *k, json_t *layer, int call)
{
    struct saved s = {k->scope_len, k->layer, k->cls, k->call_index};
    memset(k->op_count, 0, sizeof k->op_count); /* node names restart in each layer call */
    const char *name = layer_name(layer);
    k->layer = name ? name : "?";
    k->cls = json_string_value(field(layer, "class_name"));
    k->call_index = call;
    int m = call ? snprintf(k->scope + k->scope_len, sizeof k->scope - k->scope_len, "/%s.%d",
                            k->layer, call)
                 : snprintf(k->scope + k->scope_len, sizeof k->scope - k->scope_len, "/%s",
                            k->layer);
    if (m < 0 || k->scope_len + (size_t)m >= sizeof k->scope)
        fail(k, DNNMEM_E_UNSUPPORTED, "layer names nested too deep");
    else
        k->scope_len += (size_t)m;
    if (!name)
        fail(k, DNNMEM_E_MODEL, "config field 'name' is missing");
    if (++k->n_layers > MAX_LAYERS)
        fail(k, DNNMEM_E_UNSUPPORTED, "more than %d layers", MAX_LAYERS);
    return s;
}

static void leave_layer(struct keras *k, struct saved s)
{
    k->scope_len = s.scope_len;
    k->scope[s.scope_len] = '\0';
    if (k->st == DNNMEM_OK) { /* errors keep naming the layer at fault */
        k->layer = s.layer;
        k->cls = s.cls;
    }
    k->call_index = s.call;
}

/* The input shape of a Sequential model without an InputLayer. */
static json_t *sequential_shape(json_t *model, json_t *first)
{
    json_t *fc = field(first, "config");
    json_t *s = field(fc, "batch_input_shape");
    if (!s)
        s = field(fc, "batch_shape");
    if (!s)
        s = field(field(model, "config"), "build_input_shape");
    if (!s)
        s = field(field(model, "build_config"), "input_shape");
    return json_is_array(s) ? s : NULL;
}

static void input_layer(struct keras *k, json_t *layer, struct kt *out)
{
    json_t *cfg = field(layer, "config");
    json_t *shape = field(cfg, "batch_input_shape");
    if (!shape)
        shape = field(cfg, "batch_shape");
    if (!shape && json_is_array(field(cfg, "shape"))) { /* Keras 3 Input(shape=...) */
        fail(k, DNNMEM_E_UNSUPPORTED, "an InputLayer with 'shape' but no 'batch_shape'");
        return;
    }
    if (!json_is_array(shape)) {
        fail(k, DNNMEM_E_MODEL, "InputLayer has no input shape (config field "
             "'batch_input_shape' or 'batch_shape' is missing)");
        return;
    }
    const char *name = layer_name(layer);
    char *pname = dm_arena_printf(&k->g->arena, "%s%s", k->prefix, name ? name : "input");
    if (!pname) {
        oom(k);
        return;
    }
    make_input(k, pname, shape, dtype_of(k, cfg), out);
}

static void set_prefix(struct keras *k, const char *name, size_t *saved)
{
    *saved = k->prefix_len;
    int m = snprintf(k->prefix + k->prefix_len, sizeof k->prefix - k->prefix_len, "%s/", name);
    if (m < 0 || k->prefix_len + (size_t)m >= sizeof k->prefix)
        fail(k, DNNMEM_E_UNSUPPORTED, "models nested too deep");
    else
        k->prefix_len += (size_t)m;
}

static void restore_prefix(struct keras *k, size_t saved)
{
    k->prefix_len = saved;
    k->prefix[saved] = '\0';
}

/* Sequential: the layers in order; `in` is the input when nested (NULL at
 * the top, where the first layer or the model states the input shape). */
static void build_sequential(struct keras *k, json_t *model, json_t *layers, const struct kt *in,
                             struct layer_io *io)
{
    size_t n = json_array_size(layers);
    if (n == 0) {
        fail(k, DNNMEM_E_MODEL, "a Sequential model without layers");
        return;
    }
    struct kt cur;
    size_t i = 0;
    json_t *first = json_array_get(layers, 0);
    const char *fcls = json_string_value(field(first, "class_name"));
    if (in) {
        cur = *in;
        if (fcls && !strcmp(fcls, "InputLayer"))
            i = 1;
    } else if (fcls && !strcmp(fcls, "InputLayer")) {
        struct saved s = enter_layer(k, first, 0);
        input_layer(k, first, &cur);
        leave_layer(k, s);
        i = 1;
    } else {
        json_t *shape = sequential_shape(model, first);
        const char *fname = layer_name(first);
        if (!shape) {
            fail(k, DNNMEM_E_MODEL, "the input shape is missing: the Sequential model has no "
                 "InputLayer, its first layer '%s' no 'batch_input_shape' and the model no "
                 "'build_input_shape' or build_config 'input_shape'", fname ? fname : "?");
            return;
        }
        char *name = dm_arena_printf(&k->g->arena, "%s%s_input", k->prefix, fname ? fname : "");
        if (!name) {
            oom(k);
            return;
        }
        make_input(k, name, shape, dtype_of(k, field(first, "config")), &cur);
    }
    for (; i < n && k->st == DNNMEM_OK; i++) {
        json_t *layer = json_array_get(layers, i);
        struct layer_io lio = {.in = &cur, .n_in = 1};
        struct saved s = enter_layer(k, layer, 0);
        call_layer(k, layer, &lio);
        leave_layer(k, s);
        if (k->st != DNNMEM_OK)
            return;
        if (lio.n_out != 1) {
            fail(k, DNNMEM_E_UNSUPPORTED, "layer '%s' returns %d tensors; in a Sequential model "
                 "each layer must return one", layer_name(layer), lio.n_out);
            return;
        }
        cur = lio.out[0];
    }
    io->out[0] = cur;
    io->n_out = 1;
}

/* A reference to a layer output: ["name", node_index, tensor_index, ...]
 * (Keras 2) or {"class_name": "__keras_tensor__", "config": {"keras_history":
 * [...]}} (Keras 3). */
struct ref {
    const char *layer;
    int64_t node, tensor;
};

static bool parse_history(json_t *h, struct ref *r)
{
    if (!json_is_array(h) || json_array_size(h) < 3 || !json_is_string(json_array_get(h, 0)) ||
        !json_int(json_array_get(h, 1), &r->node) || !json_int(json_array_get(h, 2), &r->tensor))
        return false;
    r->layer = json_string_value(json_array_get(h, 0));
    return r->node >= 0 && r->tensor >= 0;
}

static void collect_refs(struct keras *k, json_t *v, struct ref *refs, int *n, int depth);

/* Tensors passed by keyword: MultiHeadAttention's value, then key (other
 * keyword tensors, such as masks, are not modelled). */
static void collect_kwargs(struct keras *k, json_t *kw, struct ref *refs, int *n, int depth)
{
    static const char *const keys[] = {"value", "key"};
    for (size_t i = 0; i < 2 && json_is_object(kw); i++)
        if (field(kw, keys[i]))
            collect_refs(k, field(kw, keys[i]), refs, n, depth + 1);
}

/* Collect the tensor references of an inbound node into refs. */
static void collect_refs(struct keras *k, json_t *v, struct ref *refs, int *n, int depth)
{
    if (k->st != DNNMEM_OK || depth > 8)
        return;
    struct ref r;
    if (json_is_object(v)) {
        const char *cn = json_string_value(field(v, "class_name"));
        if (cn && !strcmp(cn, "__keras_tensor__")) {
            if (!parse_history(field(field(v, "config"), "keras_history"), &r)) {
                fail(k, DNNMEM_E_MODEL, "an input has no valid keras_history");
                return;
            }
        } else
            return; /* other arguments (constants, kwargs) */
    } else if (json_is_array(v) && parse_history(v, &r)) {
        /* a Keras 2 reference */
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            collect_refs(k, json_array_get(v, i), refs, n, depth + 1);
        return;
    } else
        return;
    if (*n >= MAX_IN) {
        fail(k, DNNMEM_E_UNSUPPORTED, "more than %d inputs to one layer", MAX_IN);
        return;
    }
    refs[(*n)++] = r;
    if (json_is_array(v) && json_array_size(v) >= 4) /* Keras 2: [name, node, tensor, kwargs] */
        collect_kwargs(k, json_array_get(v, 3), refs, n, depth);
}

struct flayer {
    json_t *layer;
    const char *name;
    json_t *nodes;   /* inbound_nodes */
    int n_calls;
    struct call *calls;
};

static struct flayer *find_layer(struct flayer *ls, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (ls[i].name && !strcmp(ls[i].name, name))
            return &ls[i];
    return NULL;
}

/* The tensor a reference names, NULL while its layer call has not run. */
static const struct kt *resolve(struct keras *k, struct flayer *ls, size_t n, const struct ref *r,
                                bool *missing)
{
    struct flayer *l = find_layer(ls, n, r->layer);
    *missing = false;
    if (!l || r->node >= l->n_calls) {
        *missing = true;
        fail(k, DNNMEM_E_MODEL, "the input '%s' (call %lld) is no layer output of the model",
             r->layer, (long long)r->node);
        return NULL;
    }
    struct call *c = &l->calls[r->node];
    if (!c->done)
        return NULL;
    if (r->tensor >= c->n_out) {
        *missing = true;
        fail(k, DNNMEM_E_MODEL, "the input '%s' has no output %lld", r->layer,
             (long long)r->tensor);
        return NULL;
    }
    return &c->out[r->tensor];
}

/* The endpoints list of input_layers / output_layers: [[name, node, tensor],
 * ...] or one [name, node, tensor]. */
static int endpoints(struct keras *k, json_t *v, struct ref *refs, const char *what)
{
    int n = 0;
    struct ref r;
    if (parse_history(v, &r)) {
        refs[0] = r;
        return 1;
    }
    if (!json_is_array(v) || json_array_size(v) < 1) {
        fail(k, DNNMEM_E_MODEL, "config field '%s' is missing or empty", what);
        return 0;
    }
    for (size_t i = 0; i < json_array_size(v) && k->st == DNNMEM_OK; i++) {
        if (n >= MAX_IN) {
            fail(k, DNNMEM_E_UNSUPPORTED, "more than %d entries in '%s'", MAX_IN, what);
            return 0;
        }
        if (!parse_history(json_array_get(v, i), &refs[n++]))
            fail(k, DNNMEM_E_MODEL, "config field '%s' holds a malformed entry", what);
    }
    return n;
}

static void build_functional(struct keras *k, json_t *cfg, const struct kt *in, int n_in,
                             struct layer_io *io)
{
    json_t *layers = field(cfg, "layers");
    size_t n = json_array_size(layers);
    if (!json_is_array(layers) || n == 0) {
        fail(k, DNNMEM_E_MODEL, "config field 'layers' is missing or empty");
        return;
    }
    struct ref *ins = calloc(MAX_IN, sizeof *ins), *outs = calloc(MAX_IN, sizeof *outs);
    struct ref *refs = calloc(MAX_IN, sizeof *refs);
    struct flayer *ls = calloc(n, sizeof *ls);
    if (!ins || !outs || !refs || !ls) {
        oom(k);
        goto out;
    }
    int n_ins = endpoints(k, field(cfg, "input_layers"), ins, "input_layers");
    int n_outs = endpoints(k, field(cfg, "output_layers"), outs, "output_layers");
    if (k->st != DNNMEM_OK)
        goto out;
    if (in && n_in != n_ins) {
        fail(k, DNNMEM_E_MODEL, "the nested model takes %d inputs but is called with %d", n_ins,
             n_in);
        goto out;
    }
    for (size_t i = 0; i < n && k->st == DNNMEM_OK; i++) {
        json_t *l = json_array_get(layers, i);
        ls[i].layer = l;
        ls[i].name = json_string_value(field(l, "name"));
        if (!ls[i].name)
            ls[i].name = layer_name(l);
        if (!ls[i].name) {
            fail(k, DNNMEM_E_MODEL, "layer #%zu has no name", i);
            break;
        }
        if (find_layer(ls, i, ls[i].name)) {
            fail(k, DNNMEM_E_MODEL, "two layers are named '%s'", ls[i].name);
            break;
        }
        ls[i].nodes = field(l, "inbound_nodes");
        size_t nc = json_array_size(ls[i].nodes);
        const char *cls = json_string_value(field(l, "class_name"));
        bool is_input = cls && !strcmp(cls, "InputLayer");
        ls[i].n_calls = is_input ? 1 : (int)(nc < 64 ? nc : 64);
        if (!is_input && nc == 0)
            ls[i].n_calls = 0; /* a layer never called: no outputs */
        ls[i].calls = calloc((size_t)ls[i].n_calls + 1, sizeof *ls[i].calls);
        if (!ls[i].calls)
            oom(k);
    }
    /* the model's inputs: graph inputs at the top, the caller's tensors when nested */
    for (int j = 0; j < n_ins && k->st == DNNMEM_OK; j++) {
        struct flayer *l = find_layer(ls, n, ins[j].layer);
        if (!l || l->n_calls < 1) {
            fail(k, DNNMEM_E_MODEL, "input layer '%s' is not a layer of the model", ins[j].layer);
            break;
        }
        struct call *c = &l->calls[0];
        if (in)
            c->out[0] = in[j];
        else {
            struct saved s = enter_layer(k, l->layer, 0);
            input_layer(k, l->layer, &c->out[0]);
            leave_layer(k, s);
        }
        c->n_out = 1;
        c->done = true;
    }
    /* layer calls in dependency order: passes over the list, each running the
     * calls whose inputs are ready (one pass when the list is topological) */
    for (bool progress = true; progress && k->st == DNNMEM_OK;) {
        progress = false;
        for (size_t i = 0; i < n && k->st == DNNMEM_OK; i++) {
            struct flayer *l = &ls[i];
            for (int c = 0; c < l->n_calls && k->st == DNNMEM_OK; c++) {
                if (l->calls[c].done)
                    continue;
                json_t *nodes = json_array_get(l->nodes, (size_t)c);
                int nr = 0;
                json_t *args = json_is_object(nodes) ? field(nodes, "args") : nodes;
                collect_refs(k, args, refs, &nr, 0);
                if (json_is_object(nodes)) /* Keras 3: tensors passed by keyword too */
                    collect_kwargs(k, field(nodes, "kwargs"), refs, &nr, 0);
                if (k->st != DNNMEM_OK)
                    break;
                struct kt tin[MAX_IN];
                bool ready = nr > 0, missing;
                for (int j = 0; j < nr && ready; j++) {
                    const struct kt *t = resolve(k, ls, n, &refs[j], &missing);
                    if (!t)
                        ready = false;
                    else
                        tin[j] = *t;
                }
                if (k->st != DNNMEM_OK)
                    break;
                if (nr == 0 && !json_array_size(l->nodes))
                    continue; /* an InputLayer the model does not list among its inputs */
                if (nr == 0) {
                    struct saved s = enter_layer(k, l->layer, c);
                    fail(k, DNNMEM_E_MODEL, "an inbound node without inputs (an InputLayer not "
                         "listed in input_layers?)");
                    leave_layer(k, s);
                    break;
                }
                if (!ready)
                    continue;
                struct layer_io lio = {.in = tin, .n_in = nr};
                struct saved s = enter_layer(k, l->layer, c);
                call_layer(k, l->layer, &lio);
                leave_layer(k, s);
                if (k->st != DNNMEM_OK)
                    break;
                l->calls[c].n_out = lio.n_out;
                memcpy(l->calls[c].out, lio.out, sizeof lio.out);
                l->calls[c].done = true;
                progress = true;
            }
        }
    }
    io->n_out = 0;
    for (int j = 0; j < n_outs && k->st == DNNMEM_OK; j++) {
        bool missing;
        const struct kt *t = resolve(k, ls, n, &outs[j], &missing);
        if (!t) {
            if (k->st == DNNMEM_OK)
                fail(k, DNNMEM_E_MODEL, "output '%s' is never computed (its inputs form a cycle "
                     "or are missing)", outs[j].layer);
            break;
        }
        if (io->n_out >= MAX_OUT) {
            fail(k, DNNMEM_E_UNSUPPORTED, "more than %d model outputs", MAX_OUT);
            break;
        }
        io->out[io->n_out++] = *t;
    }
out:
    for (size_t i = 0; ls && i < n; i++)
        free(ls[i].calls);
    free(ls);
    free(ins);
    free(outs);
    free(refs);
}

/* A model: top-level (in NULL) or nested as a layer. */
static void build_model(struct keras *k, json_t *model, const struct kt *in, int n_in,
                        struct layer_io *io)
{
    const char *cls = json_string_value(field(model, "class_name"));
    json_t *cfg = field(model, "config");
    if (++k->depth > MAX_DEPTH) {
        fail(k, DNNMEM_E_UNSUPPORTED, "models nested more than %d deep", MAX_DEPTH);
        return;
    }
    bool frozen = k->frozen;
    size_t saved = k->prefix_len;
    json_t *layers = json_is_array(cfg) ? cfg : field(cfg, "layers");
    if (in) { /* a nested model: its layers are scoped and named under it */
        const char *name = layer_name(model);
        set_prefix(k, name ? name : "model", &saved);
    }
    if (!get_bool(k, cfg, "trainable", true)) /* model.trainable = False */
        k->frozen = true;
    if (!strcmp(cls, "Sequential")) {
        if (in && n_in != 1)
            fail(k, DNNMEM_E_MODEL, "a nested Sequential model called with %d inputs", n_in);
        else if (!json_is_array(layers))
            fail(k, DNNMEM_E_MODEL, "config field 'layers' is missing");
        else
            build_sequential(k, model, layers, in, io);
    } else
        build_functional(k, cfg, in, n_in, io);
    restore_prefix(k, saved);
    k->frozen = frozen;
    k->depth--;
}

/* ---- entry points ---------------------------------------------------------------- */

static bool model_class(const char *cls)
{
    return cls && (!strcmp(cls, "Sequential") || !strcmp(cls, "Functional") ||
                   !strcmp(cls, "Model"));
}

bool dm_keras_json(const uint8_t *data, size_t size)
{
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    bool yes = false;
    if (json_is_object(root)) {
        json_t *cls = json_object_get(root, "class_name");
        json_t *cfg = json_object_get(root, "config");
        yes = json_is_string(cls) && (json_is_object(cfg) || json_is_array(cfg)) &&
              (model_class(json_string_value(cls)) || json_object_get(root, "keras_version") ||
               json_object_get(root, "registered_name"));
    }
    json_decref(root);
    return yes;
}

static enum dnnmem_status build(struct keras *k, json_t *root)
{
    struct dm_graph *g = k->g;
    const char *cls = json_string_value(field(root, "class_name"));
    if (!model_class(cls))
        return fail(k, DNNMEM_E_UNSUPPORTED,
                    "top-level class_name '%s' is not a Keras model (Sequential, Functional, "
                    "Model)", cls ? cls : "?");
    json_t *cfg = field(root, "config");
    if (!json_is_object(cfg) && !json_is_array(cfg))
        return fail(k, DNNMEM_E_MODEL, "config field 'config' is missing");
    const char *ver = json_string_value(field(root, "keras_version"));
    if (!ver)
        ver = k->version;
    k->keras3 = !ver && field(root, "module") != NULL;
    if (ver && ver[0] >= '3')
        k->keras3 = true;
    g->format = "keras";
    g->opset = KERAS_OPSET;
    const char *name = json_is_object(cfg) ? json_string_value(field(cfg, "name")) : NULL;
    g->producer = dm_arena_printf(&g->arena, "Keras %s%s %s '%s'", ver ? ver : "",
                                  ver ? "" : (k->keras3 ? "3" : "2"), cls, name ? name : "");
    if (!g->producer)
        return oom(k), k->st;
    struct layer_io io = {0};
    build_model(k, root, NULL, 0, &io);
    if (k->st != DNNMEM_OK)
        return k->st;
    if (k->mixed) /* float32 variables; the compute dtype is --precision's to set */
        g->producer = dm_arena_printf(&g->arena, "%s; dtype policy %s, built float32 (use "
                                      "--precision amp-%s)", g->producer, k->mixed,
                                      strstr(k->mixed, "bfloat16") ? "bf16" : "fp16");
    if (!g->producer)
        return oom(k), k->st;
    if (g->n_inputs == 0)
        return fail(k, DNNMEM_E_MODEL, "the model has no input");
    g->outputs = dm_arena_array(&g->arena, (size_t)io.n_out + 1, sizeof *g->outputs);
    if (!g->outputs)
        return oom(k), k->st;
    for (int i = 0; i < io.n_out; i++) {
        int32_t t = io.out[i].id;
        if (g->tensors[t].is_output)
            continue;
        g->tensors[t].is_output = true;
        g->outputs[g->n_outputs++] = t;
    }
    return dm_graph_finish(g, k->err);
}

/* Build the graph from Keras model JSON; `where` prefixes messages (the file,
 * or "archive: config.json"), `version` stands in for a missing
 * keras_version (an archive's metadata.json), or NULL. */
static enum dnnmem_status load_json(struct dm_graph *g, const uint8_t *data, size_t size,
                                    const char *where, const char *version,
                                    struct dnnmem_error *err)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return dm_fail(err, DNNMEM_E_PARSE, "%s: not valid JSON: %s (line %d, column %d)", where,
                       je.text, je.line, je.column);
    struct keras *k = calloc(1, sizeof *k);
    if (!k) {
        json_decref(root);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", where);
    }
    *k = (struct keras){.g = g, .err = err, .path = where, .st = DNNMEM_OK, .version = version};
    enum dnnmem_status s = build(k, root);
    free(k);
    json_decref(root);
    return s;
}

enum dnnmem_status dm_load_keras(struct dm_graph *g, const uint8_t *data, size_t size,
                                 struct dnnmem_error *err)
{
    return load_json(g, data, size, g->path, NULL, err);
}

/* ---- .keras archives ------------------------------------------------------------
 *
 * Keras 3's model.save("m.keras") (keras/src/saving/saving_lib.py) writes a
 * zip holding metadata.json ({"keras_version": ..., "date_saved": ...}),
 * config.json (the model's serialized config, the layout load_json reads)
 * and model.weights.h5. The archive is untrusted input: libzip opens it from
 * memory with its stricter consistency checks (ZIP_CHECKCONS), each member's
 * uncompressed size is capped before anything is allocated, reads stop one
 * byte past the stated size (so a member that inflates to more than it
 * claims is caught, and libzip checks the CRC at its end), and every failure
 * names the archive and the member. */

/* config.json's cap: keras.applications' largest configs are a few hundred
 * KB (InceptionV3's model JSON, tests/models/keras, is 154 KB); 64 MiB is
 * 400 times that and bounds what a hostile archive can make us allocate. */
#define ARCHIVE_CONFIG_MAX (UINT64_C(64) << 20)
/* metadata.json holds two short strings (saving_lib.py); 1 MiB is ample. */
#define ARCHIVE_METADATA_MAX (UINT64_C(1) << 20)

/* libzip's message for an error code (zip_fclose returns a bare code). */
static void zip_code_message(int code, char *buf, size_t n)
{
    zip_error_t ze;
    zip_error_init_with_code(&ze, code);
    snprintf(buf, n, "%s", zip_error_strerror(&ze));
    zip_error_fini(&ze);
}

/* Read member `name` of `za` into a malloc'd buffer (*out, *n; NUL-terminated).
 * An absent member is an error unless `optional` (then *out stays NULL). */
static enum dnnmem_status read_member(zip_t *za, const char *path, const char *name,
                                      uint64_t cap, bool optional, uint8_t **out, size_t *n,
                                      struct dnnmem_error *err)
{
    *out = NULL;
    *n = 0;
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat(za, name, 0, &st) != 0) {
        if (zip_error_code_zip(zip_get_error(za)) != ZIP_ER_NOENT)
            return dm_fail(err, DNNMEM_E_PARSE, "%s: %s: %s", path, name, zip_strerror(za));
        if (optional)
            return DNNMEM_OK;
        return dm_fail(err, DNNMEM_E_MODEL,
                       "%s: %s: no such member; a Keras 3 .keras archive holds metadata.json, "
                       "config.json and model.weights.h5", path, name);
    }
    if (!(st.valid & ZIP_STAT_SIZE))
        return dm_fail(err, DNNMEM_E_PARSE, "%s: %s: the archive does not state its size", path,
                       name);
    if (st.size > cap)
        return dm_fail(err, DNNMEM_E_PARSE,
                       "%s: %s: %llu bytes uncompressed, over the %llu-byte cap for this member",
                       path, name, (unsigned long long)st.size, (unsigned long long)cap);
    zip_file_t *zf = zip_fopen(za, name, 0);
    if (!zf)
        return dm_fail(err, DNNMEM_E_PARSE, "%s: %s: cannot open: %s", path, name,
                       zip_strerror(za));
    size_t want = (size_t)st.size; /* <= cap: fits */
    uint8_t *buf = malloc(want + 1);
    if (!buf) {
        zip_fclose(zf);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: %s: out of memory", path, name);
    }
    size_t got = 0;
    enum dnnmem_status s = DNNMEM_OK;
    for (;;) { /* up to one byte past the stated size: EOF (and the CRC check) or excess */
        zip_int64_t r = zip_fread(zf, buf + got, (zip_uint64_t)(want + 1 - got));
        if (r < 0) {
            s = dm_fail(err, DNNMEM_E_PARSE, "%s: %s: cannot read: %s", path, name,
                        zip_file_strerror(zf));
            break;
        }
        if (r == 0)
            break;
        got += (size_t)r;
        if (got > want) {
            s = dm_fail(err, DNNMEM_E_PARSE,
                        "%s: %s: inflates to more than the %zu bytes the archive states", path,
                        name, want);
            break;
        }
    }
    if (s == DNNMEM_OK && got != want)
        s = dm_fail(err, DNNMEM_E_PARSE, "%s: %s: %zu bytes, not the %zu the archive states "
                    "(truncated?)", path, name, got, want);
    int rc = zip_fclose(zf);
    if (s == DNNMEM_OK && rc != 0) {
        char msg[128];
        zip_code_message(rc, msg, sizeof msg);
        s = dm_fail(err, DNNMEM_E_PARSE, "%s: %s: %s", path, name, msg);
    }
    if (s != DNNMEM_OK) {
        free(buf);
        return s;
    }
    buf[got] = '\0';
    *out = buf;
    *n = got;
    return DNNMEM_OK;
}

enum dnnmem_status dm_load_keras_archive(struct dm_graph *g, const uint8_t *data, size_t size,
                                         struct dnnmem_error *err)
{
    const char *path = g->path;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(data, size, 0, &ze);
    if (!src) {
        zip_error_fini(&ze);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
    }
    zip_t *za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za) {
        enum dnnmem_status s = dm_fail(err, DNNMEM_E_PARSE,
                                       "%s: a zip archive (a .keras model?) that cannot be read: "
                                       "%s", path, zip_error_strerror(&ze));
        zip_source_free(src);
        zip_error_fini(&ze);
        return s;
    }
    zip_error_fini(&ze);
    uint8_t *meta = NULL, *cfg = NULL;
    size_t n_meta = 0, n_cfg = 0;
    enum dnnmem_status s =
        read_member(za, path, "metadata.json", ARCHIVE_METADATA_MAX, true, &meta, &n_meta, err);
    if (s == DNNMEM_OK)
        s = read_member(za, path, "config.json", ARCHIVE_CONFIG_MAX, false, &cfg, &n_cfg, err);
    zip_discard(za); /* frees src */
    /* keras_version from metadata.json, when it is JSON with that string */
    json_t *mroot = meta ? json_loadb((const char *)meta, n_meta, 0, NULL) : NULL;
    const char *ver = json_string_value(json_object_get(mroot, "keras_version"));
    const char *where = s == DNNMEM_OK ? dm_arena_printf(&g->arena, "%s: config.json", path) : NULL;
    if (s == DNNMEM_OK && !where)
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
    if (s == DNNMEM_OK)
        s = load_json(g, cfg, n_cfg, where, ver, err);
    json_decref(mroot);
    free(meta);
    free(cfg);
    return s;
}
