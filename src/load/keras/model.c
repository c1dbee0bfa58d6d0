/* model.c: Keras models: a layer call, Sequential and functional models, nesting,
 * and the entry points dm_is_keras and dm_load_keras (keras.h). */

#include "keras.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum dm_dtype dtype_of(struct keras *k, json_t *cfg)
{
    json_t *v = dm_kr_field(cfg, "dtype");
    const char *s = json_string_value(v);
    if (json_is_object(v)) /* Keras 3 DTypePolicy, Keras 2 mixed-precision Policy */
        s = json_string_value(dm_kr_field(dm_kr_field(v, "config"), "name"));
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
    dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "dtype '%s' is not supported", s);
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
        dm_kr_fail(k, r < 1 ? DNNMEM_E_MODEL : DNNMEM_E_UNSUPPORTED,
                   "input shape has %zu dims; 1 to %d are supported", r, DM_MAX_DIMS);
        return;
    }
    if (dm_graph_find(g, name) >= 0) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "two inputs are named '%s'", name);
        return;
    }
    int32_t t = dm_graph_add_tensor(g, name);
    struct dm_dim *d = dm_arena_array(&g->arena, r + 1, sizeof *d);
    int32_t *inputs = dm_arena_array(&g->arena, (size_t)g->n_inputs + 1, sizeof *inputs);
    if (t < 0 || !d || !inputs) {
        dm_kr_oom(k);
        return;
    }
    memset(out, 0, sizeof *out);
    out->id = t;
    out->rank = (int)r;
    out->dtype = dt;
    dm_kr_perm_identity((int)r, out->perm);
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
                dm_kr_oom(k);
                return;
            }
            out->dim[i] = -1;
        } else if (dm_kr_json_int(e, &v) && v >= 0 && v <= MAX_DIM) {
            d[i].value = v;
            out->dim[i] = v;
        } else {
            dm_kr_fail(k, dm_kr_json_int(e, &v) && v > MAX_DIM ? DNNMEM_E_SHAPE : DNNMEM_E_MODEL,
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

/* Keras 3's Functional (and Sequential, which runs one) calls its layers
 * through Function._run_through_graph (keras/src/ops/function.py, keras
 * 3.15.1), which puts every layer call's outputs into a dict (tensor_dict)
 * and drops none before the call returns: run eagerly (a GradientTape step,
 * model(x), the torch backend), every layer's output lives until the model's
 * forward ends. Keras 2's Functional._run_internal_graph counted the uses
 * and let go of each after its last one. Recorded as each output's
 * held_until (the model's last node), which the schedule applies unless the
 * step is traced (tf.function, jit: src/schedule/schedule.c, module_holds). */
static void keras3_hold(struct keras *k, const struct layer_io *io)
{
    for (int i = 0; k->keras3 && k->st == DNNMEM_OK && i < io->n_out; i++) {
        if (k->n_held == k->cap_held) {
            size_t cap = k->cap_held ? 2 * k->cap_held : 256;
            int32_t *p = realloc(k->held, cap * sizeof *p);
            if (!p) {
                dm_kr_oom(k);
                return;
            }
            k->held = p;
            k->cap_held = cap;
        }
        k->held[k->n_held++] = io->out[i].id;
    }
}

/* The model whose holds start at held[mark] has built its last node. */
static void keras3_release(struct keras *k, size_t mark)
{
    struct dm_graph *g = k->g;
    for (size_t j = mark; j < k->n_held; j++) {
        int32_t t = k->held[j];
        if (t >= 0 && t < g->n_tensors && g->tensors[t].role == DM_ROLE_ACTIVATION &&
            !g->tensors[t].held_until)
            g->tensors[t].held_until = g->n_nodes; /* 1 + the last node's index */
    }
    k->n_held = mark;
}

/* One call of a layer on its inputs. */
static void call_layer(struct keras *k, json_t *layer, struct layer_io *io)
{
    const char *cls = json_string_value(dm_kr_field(layer, "class_name"));
    json_t *cfg = dm_kr_field(layer, "config");
    if (!cls) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "a layer has no class_name");
        return;
    }
    io->cfg = cfg;
    io->n_out = 0;
    if (!strcmp(cls, "Sequential") || !strcmp(cls, "Functional") || !strcmp(cls, "Model")) {
        build_model(k, layer, io->in, io->n_in, io);
        keras3_hold(k, io);
        return;
    }
    if (!json_is_object(cfg)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'config' is missing");
        return;
    }
    bool frozen = k->frozen;
    if (!dm_kr_get_bool(k, cfg, "trainable", true))
        k->frozen = true;
    const char *pname = dm_kr_policy_name(cfg);
    if (pname && !strncmp(pname, "mixed_", 6) && !k->mixed)
        k->mixed = pname;
    int ns = 0;
    size_t len = strlen(cls);
    if (len >= 2 && cls[len - 1] == 'D' && cls[len - 2] >= '1' && cls[len - 2] <= '3')
        ns = cls[len - 2] - '0';
    char base[64];
    snprintf(base, sizeof base, "%.*s", ns ? (int)len - 2 : (int)len, cls);
    if (ns && (!strcmp(base, "Conv") || !strcmp(base, "Convolution")))
        dm_kr_conv_layer(k, io, ns, 'c');
    else if (ns && !strcmp(base, "DepthwiseConv") && ns <= 2)
        dm_kr_conv_layer(k, io, ns, 'd');
    else if (ns && (!strcmp(base, "SeparableConv") || !strcmp(base, "SeparableConvolution")) &&
             ns <= 2)
        dm_kr_conv_layer(k, io, ns, 's');
    else if (len == 15 && !strncmp(cls, "Conv", 4) && cls[4] >= '1' && cls[4] <= '3' &&
             !strcmp(cls + 5, "DTranspose")) /* Conv1DTranspose .. Conv3DTranspose */
        dm_kr_conv_layer(k, io, cls[4] - '0', 't');
    else if (ns && (!strcmp(base, "MaxPooling") || !strcmp(base, "MaxPool")))
        dm_kr_pool_layer(k, io, ns, true);
    else if (ns && (!strcmp(base, "AveragePooling") || !strcmp(base, "AvgPool")))
        dm_kr_pool_layer(k, io, ns, false);
    else if (ns && (!strcmp(base, "GlobalAveragePooling") || !strcmp(base, "GlobalAvgPool")))
        dm_kr_global_pool_layer(k, io, ns, false);
    else if (ns && (!strcmp(base, "GlobalMaxPooling") || !strcmp(base, "GlobalMaxPool")))
        dm_kr_global_pool_layer(k, io, ns, true);
    else if (ns && !strcmp(base, "ZeroPadding"))
        dm_kr_zeropad_layer(k, io, ns);
    else if (ns && !strcmp(base, "Cropping"))
        dm_kr_crop_layer(k, io, ns);
    else if (ns && !strcmp(base, "UpSampling"))
        dm_kr_upsample_layer(k, io, ns);
    else if (ns && !strcmp(base, "SpatialDropout"))
        dm_kr_dropout_layer(k, io, "rate", 0);
    else if (ns)
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "class '%s' is not supported", cls);
    else if (!strcmp(cls, "Dense"))
        dm_kr_dense_layer(k, io);
    else if (!strcmp(cls, "BatchNormalization") || !strcmp(cls, "SyncBatchNormalization"))
        dm_kr_batchnorm_layer(k, io);
    else if (!strcmp(cls, "LayerNormalization"))
        dm_kr_layernorm_layer(k, io);
    else if (!strcmp(cls, "Dropout") || !strcmp(cls, "AlphaDropout") ||
             !strcmp(cls, "GaussianDropout"))
        dm_kr_dropout_layer(k, io, "rate", 0);
    else if (!strcmp(cls, "GaussianNoise")) /* noise of the input's size in training */
        dm_kr_dropout_layer(k, io, "stddev", 0);
    else if (!strcmp(cls, "Activation")) {
        const struct kt *x = dm_kr_one_input(k, io);
        if (x) {
            dm_kr_same_out(io, x, x->id);
            dm_kr_activation(k, dm_kr_activation_name(k, cfg, "activation", NULL), &io->out[0]);
            if (!dm_kr_field(cfg, "activation"))
                dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'activation' is missing");
        }
    } else if (!strcmp(cls, "ReLU"))
        dm_kr_relu_layer(k, io);
    else if (!strcmp(cls, "LeakyReLU")) {
        const struct kt *x = dm_kr_one_input(k, io);
        double a = dm_kr_get_num(k, cfg,
                                 dm_kr_field(cfg, "negative_slope") ? "negative_slope" : "alpha",
                                 k->keras3 ? 0.2 : 0.3, 0, 1e9);
        if (x) {
            dm_kr_same_out(io, x, dm_kr_op(k, DM_OP_LeakyRelu, 1, x->id));
            dm_kr_attr_f(k, "alpha", a);
        }
    } else if (!strcmp(cls, "ELU")) {
        const struct kt *x = dm_kr_one_input(k, io);
        if (x) {
            dm_kr_same_out(io, x, dm_kr_op(k, DM_OP_Elu, 1, x->id));
            dm_kr_attr_f(k, "alpha", dm_kr_get_num(k, cfg, "alpha", 1, -1e9, 1e9));
        }
    } else if (!strcmp(cls, "Softmax"))
        dm_kr_softmax_layer(k, io);
    else if (!strcmp(cls, "Add"))
        dm_kr_merge_layer(k, io, io->n_in == 2 ? DM_OP_Add : DM_OP_Sum, io->n_in == 2);
    else if (!strcmp(cls, "Subtract"))
        dm_kr_merge_layer(k, io, DM_OP_Sub, true);
    else if (!strcmp(cls, "Multiply"))
        dm_kr_merge_layer(k, io, DM_OP_Mul, true);
    else if (!strcmp(cls, "Average"))
        dm_kr_merge_layer(k, io, DM_OP_Mean, false);
    else if (!strcmp(cls, "Maximum"))
        dm_kr_merge_layer(k, io, DM_OP_Max, false);
    else if (!strcmp(cls, "Minimum"))
        dm_kr_merge_layer(k, io, DM_OP_Min, false);
    else if (!strcmp(cls, "Concatenate"))
        dm_kr_concat_layer(k, io);
    else if (!strcmp(cls, "Reshape"))
        dm_kr_reshape_layer(k, io);
    else if (!strcmp(cls, "Flatten"))
        dm_kr_flatten_layer(k, io);
    else if (!strcmp(cls, "Permute"))
        dm_kr_permute_layer(k, io);
    else if (!strcmp(cls, "RepeatVector"))
        dm_kr_repeat_layer(k, io);
    else if (!strcmp(cls, "Embedding"))
        dm_kr_embedding_layer(k, io);
    else if (!strcmp(cls, "LSTM") || !strcmp(cls, "GRU") || !strcmp(cls, "SimpleRNN") ||
             !strcmp(cls, "CuDNNLSTM") || !strcmp(cls, "CuDNNGRU"))
        dm_kr_rnn_layer(k, io, cls);
    else if (!strcmp(cls, "Bidirectional"))
        dm_kr_bidirectional_layer(k, io);
    else if (!strcmp(cls, "TimeDistributed"))
        dm_kr_time_distributed_layer(k, io);
    else if (!strcmp(cls, "MultiHeadAttention"))
        dm_kr_mha_layer(k, io);
    else if (!strcmp(cls, "Rescaling"))
        dm_kr_rescaling_layer(k, io);
    else if (!strcmp(cls, "InputLayer") || !strcmp(cls, "Identity")) {
        const struct kt *x = dm_kr_one_input(k, io);
        if (x)
            dm_kr_same_out(io, x, x->id);
    } else
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED,
                   "class '%s' is not supported (see docs/modelling.md: Keras models)", cls);
    k->frozen = frozen;
    if (k->st == DNNMEM_OK && io->n_out < 1)
        dm_kr_fail(k, DNNMEM_E_INTERNAL, "the layer made no output");
    keras3_hold(k, io);
}

const char *dm_kr_layer_name(json_t *layer)
{
    const char *n = json_string_value(dm_kr_field(dm_kr_field(layer, "config"), "name"));
    return n ? n : json_string_value(dm_kr_field(layer, "name"));
}

/* Enter a layer: scope "/<name>" (a shared layer's later calls
 * "/<name>.<call>"), messages name it. Returns what leave_layer restores. */
struct saved dm_kr_enter_layer(struct keras *k, json_t *layer, int call)
{
    struct saved s = {k->scope_len, k->layer, k->cls, k->lcfg, k->call_index};
    memset(k->op_count, 0, sizeof k->op_count); /* node names restart in each layer call */
    const char *name = dm_kr_layer_name(layer);
    k->layer = name ? name : "?";
    k->cls = json_string_value(dm_kr_field(layer, "class_name"));
    k->lcfg = dm_kr_field(layer, "config");
    k->call_index = call;
    int m = call ? snprintf(k->scope + k->scope_len, sizeof k->scope - k->scope_len, "/%s.%d",
                            k->layer, call)
                 : snprintf(k->scope + k->scope_len, sizeof k->scope - k->scope_len, "/%s",
                            k->layer);
    if (m < 0 || k->scope_len + (size_t)m >= sizeof k->scope)
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "layer names nested too deep");
    else
        k->scope_len += (size_t)m;
    if (!name)
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'name' is missing");
    if (++k->n_layers > MAX_LAYERS)
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "more than %d layers", MAX_LAYERS);
    return s;
}

void dm_kr_leave_layer(struct keras *k, struct saved s)
{
    k->scope_len = s.scope_len;
    k->scope[s.scope_len] = '\0';
    if (k->st == DNNMEM_OK) { /* errors keep naming the layer at fault */
        k->layer = s.layer;
        k->cls = s.cls;
    }
    k->lcfg = s.lcfg;
    k->call_index = s.call;
}

/* The input shape of a Sequential model without an InputLayer. */
static json_t *sequential_shape(json_t *model, json_t *first)
{
    json_t *fc = dm_kr_field(first, "config");
    json_t *s = dm_kr_field(fc, "batch_input_shape");
    if (!s)
        s = dm_kr_field(fc, "batch_shape");
    if (!s)
        s = dm_kr_field(dm_kr_field(model, "config"), "build_input_shape");
    if (!s)
        s = dm_kr_field(dm_kr_field(model, "build_config"), "input_shape");
    return json_is_array(s) ? s : NULL;
}

void dm_kr_input_layer(struct keras *k, json_t *layer, struct kt *out)
{
    json_t *cfg = dm_kr_field(layer, "config");
    json_t *shape = dm_kr_field(cfg, "batch_input_shape");
    if (!shape)
        shape = dm_kr_field(cfg, "batch_shape");
    if (!shape && json_is_array(dm_kr_field(cfg, "shape"))) { /* Keras 3 Input(shape=...) */
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "an InputLayer with 'shape' but no 'batch_shape'");
        return;
    }
    if (!json_is_array(shape)) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "InputLayer has no input shape (config field "
                   "'batch_input_shape' or 'batch_shape' is missing)");
        return;
    }
    const char *name = dm_kr_layer_name(layer);
    char *pname = dm_arena_printf(&k->g->arena, "%s%s", k->prefix, name ? name : "input");
    if (!pname) {
        dm_kr_oom(k);
        return;
    }
    make_input(k, pname, shape, dtype_of(k, cfg), out);
}

static void set_prefix(struct keras *k, const char *name, size_t *saved)
{
    *saved = k->prefix_len;
    int m = snprintf(k->prefix + k->prefix_len, sizeof k->prefix - k->prefix_len, "%s/", name);
    if (m < 0 || k->prefix_len + (size_t)m >= sizeof k->prefix)
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "models nested too deep");
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
        dm_kr_fail(k, DNNMEM_E_MODEL, "a Sequential model without layers");
        return;
    }
    struct kt cur;
    size_t i = 0;
    json_t *first = json_array_get(layers, 0);
    const char *fcls = json_string_value(dm_kr_field(first, "class_name"));
    if (in) {
        cur = *in;
        if (fcls && !strcmp(fcls, "InputLayer"))
            i = 1;
    } else if (fcls && !strcmp(fcls, "InputLayer")) {
        struct saved s = dm_kr_enter_layer(k, first, 0);
        dm_kr_input_layer(k, first, &cur);
        dm_kr_leave_layer(k, s);
        i = 1;
    } else {
        json_t *shape = sequential_shape(model, first);
        const char *fname = dm_kr_layer_name(first);
        if (!shape) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "the input shape is missing: the Sequential model has no "
                       "InputLayer, its first layer '%s' no 'batch_input_shape' and the model no "
                       "'build_input_shape' or build_config 'input_shape'", fname ? fname : "?");
            return;
        }
        char *name = dm_arena_printf(&k->g->arena, "%s%s_input", k->prefix, fname ? fname : "");
        if (!name) {
            dm_kr_oom(k);
            return;
        }
        make_input(k, name, shape, dtype_of(k, dm_kr_field(first, "config")), &cur);
    }
    for (; i < n && k->st == DNNMEM_OK; i++) {
        json_t *layer = json_array_get(layers, i);
        struct layer_io lio = {.in = &cur, .n_in = 1};
        struct saved s = dm_kr_enter_layer(k, layer, 0);
        call_layer(k, layer, &lio);
        dm_kr_leave_layer(k, s);
        if (k->st != DNNMEM_OK)
            return;
        if (lio.n_out != 1) {
            dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "layer '%s' returns %d tensors; in a Sequential "
                       "model each layer must return one", dm_kr_layer_name(layer), lio.n_out);
            return;
        }
        cur = lio.out[0];
    }
    io->out[0] = cur;
    io->n_out = 1;
}

/* A model: top-level (in NULL) or nested as a layer. */
static void build_model(struct keras *k, json_t *model, const struct kt *in, int n_in,
                        struct layer_io *io)
{
    const char *cls = json_string_value(dm_kr_field(model, "class_name"));
    json_t *cfg = dm_kr_field(model, "config");
    if (++k->depth > MAX_DEPTH) {
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "models nested more than %d deep", MAX_DEPTH);
        return;
    }
    bool frozen = k->frozen;
    size_t saved = k->prefix_len, mark = k->n_held;
    json_t *layers = json_is_array(cfg) ? cfg : dm_kr_field(cfg, "layers");
    if (json_array_size(layers) > (size_t)(MAX_LAYERS - k->n_layers)) { /* before building any */
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "%zu layers, more than %d in all",
                   json_array_size(layers), MAX_LAYERS);
        k->depth--;
        return;
    }
    if (in) { /* a nested model: its layers are scoped and named under it */
        const char *name = dm_kr_layer_name(model);
        set_prefix(k, name ? name : "model", &saved);
    }
    if (!dm_kr_get_bool(k, cfg, "trainable", true)) /* model.trainable = False */
        k->frozen = true;
    if (!strcmp(cls, "Sequential")) {
        if (in && n_in != 1)
            dm_kr_fail(k, DNNMEM_E_MODEL, "a nested Sequential model called with %d inputs", n_in);
        else if (!json_is_array(layers))
            dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'layers' is missing");
        else
            build_sequential(k, model, layers, in, io);
    } else
        dm_kr_build_functional(k, cfg, in, n_in, io);
    keras3_release(k, mark);
    restore_prefix(k, saved);
    k->frozen = frozen;
    k->depth--;
}

static bool model_class(const char *cls)
{
    return cls && (!strcmp(cls, "Sequential") || !strcmp(cls, "Functional") ||
                   !strcmp(cls, "Model"));
}

bool dm_is_keras(json_t *root)
{
    json_t *cls = json_object_get(root, "class_name");
    json_t *cfg = json_object_get(root, "config");
    return json_is_string(cls) && (json_is_object(cfg) || json_is_array(cfg)) &&
           (model_class(json_string_value(cls)) || json_object_get(root, "keras_version") ||
            json_object_get(root, "registered_name"));
}

static enum dnnmem_status build(struct keras *k, json_t *root)
{
    struct dm_graph *g = k->g;
    const char *cls = json_string_value(dm_kr_field(root, "class_name"));
    if (!model_class(cls))
        return dm_kr_fail(k, DNNMEM_E_UNSUPPORTED,
                          "top-level class_name '%s' is not a Keras model (Sequential, Functional, "
                          "Model)", cls ? cls : "?");
    json_t *cfg = dm_kr_field(root, "config");
    if (!json_is_object(cfg) && !json_is_array(cfg))
        return dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'config' is missing");
    const char *ver = json_string_value(dm_kr_field(root, "keras_version"));
    if (!ver)
        ver = k->version;
    k->keras3 = !ver && dm_kr_field(root, "module") != NULL;
    if (ver && ver[0] >= '3')
        k->keras3 = true;
    g->format = "keras";
    g->opset = KERAS_OPSET;
    const char *name = json_is_object(cfg) ? json_string_value(dm_kr_field(cfg, "name")) : NULL;
    g->producer = dm_arena_printf(&g->arena, "Keras %s%s %s '%s'", ver ? ver : "",
                                  ver ? "" : (k->keras3 ? "3" : "2"), cls, name ? name : "");
    if (!g->producer)
        return dm_kr_oom(k), k->st;
    struct layer_io io = {0};
    build_model(k, root, NULL, 0, &io);
    if (k->st != DNNMEM_OK)
        return k->st;
    if (k->mixed) /* float32 variables; the compute dtype is --precision's to set */
        g->producer = dm_arena_printf(&g->arena, "%s; dtype policy %s, built float32 (use "
                                      "--precision amp-%s)", g->producer, k->mixed,
                                      strstr(k->mixed, "bfloat16") ? "bf16" : "fp16");
    if (!g->producer)
        return dm_kr_oom(k), k->st;
    if (g->n_inputs == 0)
        return dm_kr_fail(k, DNNMEM_E_MODEL, "the model has no input");
    if (dm_kr_app_defaults(k, root) != DNNMEM_OK)
        return k->st;
    g->outputs = dm_arena_array(&g->arena, (size_t)io.n_out + 1, sizeof *g->outputs);
    if (!g->outputs)
        return dm_kr_oom(k), k->st;
    for (int i = 0; i < io.n_out; i++) {
        int32_t t = io.out[i].id;
        if (g->tensors[t].is_output)
            continue;
        g->tensors[t].is_output = true;
        g->outputs[g->n_outputs++] = t;
    }
    return dm_graph_finish(g, k->err);
}

/* Build the graph from Keras model JSON (its parsed root); `where` prefixes
 * messages (the file, or "archive: config.json"), `version` stands in for a
 * missing keras_version (an archive's metadata.json), or NULL. */
enum dnnmem_status dm_kr_load_json(struct dm_graph *g, json_t *root, const char *where,
                                   const char *version, struct dnnmem_error *err)
{
    struct keras *k = calloc(1, sizeof *k);
    if (!k)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", where);
    *k = (struct keras){.g = g, .err = err, .path = where, .st = DNNMEM_OK, .version = version,
                        .call_layer = call_layer};
    enum dnnmem_status s = build(k, root);
    free(k->held);
    free(k);
    return s;
}

enum dnnmem_status dm_load_keras(struct dm_graph *g, json_t *root, struct dnnmem_error *err)
{
    return dm_kr_load_json(g, root, g->path, NULL, err);
}

/* ---- functional models: a graph of layer calls joined by their inbound
 * nodes (in this file because it and the layer dispatch recurse into each
 * other: a layer may be a model) ---- */

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
        !dm_kr_json_int(json_array_get(h, 1), &r->node) ||
        !dm_kr_json_int(json_array_get(h, 2), &r->tensor))
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
        if (dm_kr_field(kw, keys[i]))
            collect_refs(k, dm_kr_field(kw, keys[i]), refs, n, depth + 1);
}

/* Collect the tensor references of an inbound node into refs. */
static void collect_refs(struct keras *k, json_t *v, struct ref *refs, int *n, int depth)
{
    if (k->st != DNNMEM_OK || depth > 8)
        return;
    struct ref r;
    if (json_is_object(v)) {
        const char *cn = json_string_value(dm_kr_field(v, "class_name"));
        if (cn && !strcmp(cn, "__keras_tensor__")) {
            if (!parse_history(dm_kr_field(dm_kr_field(v, "config"), "keras_history"), &r)) {
                dm_kr_fail(k, DNNMEM_E_MODEL, "an input has no valid keras_history");
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
        dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "more than %d inputs to one layer", MAX_IN);
        return;
    }
    refs[(*n)++] = r;
    if (json_is_array(v) && json_array_size(v) >= 4) /* Keras 2: [name, node, tensor, kwargs] */
        collect_kwargs(k, json_array_get(v, 3), refs, n, depth);
}

/* One call of a layer in a functional model (its inbound node). */
struct call {
    bool done;
    int n_out;
    struct kt out[MAX_OUT];
};

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
        dm_kr_fail(k, DNNMEM_E_MODEL, "the input '%s' (call %lld) is no layer output of the model",
                   r->layer, (long long)r->node);
        return NULL;
    }
    struct call *c = &l->calls[r->node];
    if (!c->done)
        return NULL;
    if (r->tensor >= c->n_out) {
        *missing = true;
        dm_kr_fail(k, DNNMEM_E_MODEL, "the input '%s' has no output %lld", r->layer,
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
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' is missing or empty", what);
        return 0;
    }
    for (size_t i = 0; i < json_array_size(v) && k->st == DNNMEM_OK; i++) {
        if (n >= MAX_IN) {
            dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "more than %d entries in '%s'", MAX_IN, what);
            return 0;
        }
        if (!parse_history(json_array_get(v, i), &refs[n++]))
            dm_kr_fail(k, DNNMEM_E_MODEL, "config field '%s' holds a malformed entry", what);
    }
    return n;
}

void dm_kr_build_functional(struct keras *k, json_t *cfg, const struct kt *in, int n_in,
                            struct layer_io *io)
{
    json_t *layers = dm_kr_field(cfg, "layers");
    size_t n = json_array_size(layers);
    if (!json_is_array(layers) || n == 0) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "config field 'layers' is missing or empty");
        return;
    }
    struct ref *ins = calloc(MAX_IN, sizeof *ins), *outs = calloc(MAX_IN, sizeof *outs);
    struct ref *refs = calloc(MAX_IN, sizeof *refs);
    struct flayer *ls = calloc(n, sizeof *ls);
    if (!ins || !outs || !refs || !ls) {
        dm_kr_oom(k);
        goto out;
    }
    int n_ins = endpoints(k, dm_kr_field(cfg, "input_layers"), ins, "input_layers");
    int n_outs = endpoints(k, dm_kr_field(cfg, "output_layers"), outs, "output_layers");
    if (k->st != DNNMEM_OK)
        goto out;
    if (in && n_in != n_ins) {
        dm_kr_fail(k, DNNMEM_E_MODEL, "the nested model takes %d inputs but is called with %d",
                   n_ins, n_in);
        goto out;
    }
    for (size_t i = 0; i < n && k->st == DNNMEM_OK; i++) {
        json_t *l = json_array_get(layers, i);
        ls[i].layer = l;
        ls[i].name = json_string_value(dm_kr_field(l, "name"));
        if (!ls[i].name)
            ls[i].name = dm_kr_layer_name(l);
        if (!ls[i].name) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "layer #%zu has no name", i);
            break;
        }
        if (find_layer(ls, i, ls[i].name)) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "two layers are named '%s'", ls[i].name);
            break;
        }
        ls[i].nodes = dm_kr_field(l, "inbound_nodes");
        size_t nc = json_array_size(ls[i].nodes);
        const char *cls = json_string_value(dm_kr_field(l, "class_name"));
        bool is_input = cls && !strcmp(cls, "InputLayer");
        ls[i].n_calls = is_input ? 1 : (int)(nc < 64 ? nc : 64);
        if (!is_input && nc == 0)
            ls[i].n_calls = 0; /* a layer never called: no outputs */
        ls[i].calls = calloc((size_t)ls[i].n_calls + 1, sizeof *ls[i].calls);
        if (!ls[i].calls)
            dm_kr_oom(k);
    }
    /* the model's inputs: graph inputs at the top, the caller's tensors when nested */
    for (int j = 0; j < n_ins && k->st == DNNMEM_OK; j++) {
        struct flayer *l = find_layer(ls, n, ins[j].layer);
        if (!l || l->n_calls < 1) {
            dm_kr_fail(k, DNNMEM_E_MODEL, "input layer '%s' is not a layer of the model",
                       ins[j].layer);
            break;
        }
        struct call *c = &l->calls[0];
        if (in)
            c->out[0] = in[j];
        else {
            struct saved s = dm_kr_enter_layer(k, l->layer, 0);
            dm_kr_input_layer(k, l->layer, &c->out[0]);
            dm_kr_leave_layer(k, s);
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
                json_t *args = json_is_object(nodes) ? dm_kr_field(nodes, "args") : nodes;
                collect_refs(k, args, refs, &nr, 0);
                if (json_is_object(nodes)) /* Keras 3: tensors passed by keyword too */
                    collect_kwargs(k, dm_kr_field(nodes, "kwargs"), refs, &nr, 0);
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
                    struct saved s = dm_kr_enter_layer(k, l->layer, c);
                    dm_kr_fail(k, DNNMEM_E_MODEL, "an inbound node without inputs (an "
                               "InputLayer not listed in input_layers?)");
                    dm_kr_leave_layer(k, s);
                    break;
                }
                if (!ready)
                    continue;
                struct layer_io lio = {.in = tin, .n_in = nr};
                struct saved s = dm_kr_enter_layer(k, l->layer, c);
                call_layer(k, l->layer, &lio);
                dm_kr_leave_layer(k, s);
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
                dm_kr_fail(k, DNNMEM_E_MODEL, "output '%s' is never computed (its inputs "
                           "form a cycle or are missing)", outs[j].layer);
            break;
        }
        if (io->n_out >= MAX_OUT) {
            dm_kr_fail(k, DNNMEM_E_UNSUPPORTED, "more than %d model outputs", MAX_OUT);
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
