/*
 * keras.h: the Keras front end's shared state and helpers (src/load/keras/).
 * A Keras model's architecture JSON, as model.to_json() writes it (Keras 2:
 * class_name "Model" (2.0-2.3), "Functional" (2.4+), "Sequential", models
 * nested as layers) or in the Keras 3 layout (keys module / class_name /
 * config / registered_name / build_config, DTypePolicy dtype objects: the
 * config.json inside a .keras archive, which dm_load_keras_archive reads from
 * the zip itself, archive.c), is built layer by layer into the graph IR the
 * ONNX front end fills, so shapes, training, the allocator simulation and the
 * reports apply unchanged. As for every format, what is simulated is the
 * network run by PyTorch eager (the library's framework model), not
 * TensorFlow's runtime.
 *
 * Files: build.c (errors, config fields, nodes, weights, arrangements,
 * activations), layers.c (dense, normalization, merging, reshaping layers),
 * spatial.c (convolution, pooling, padding, cropping, upsampling),
 * sequence.c (embedding, recurrent, attention, TimeDistributed), model.c
 * (layer dispatch, Sequential models, the entry points), functional.c
 * (functional models' graphs of layer calls), archive.c (.keras zips).
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
#ifndef DNNMEM_LOAD_KERAS_H
#define DNNMEM_LOAD_KERAS_H

#include "dnnmem-impl.h"

#include <jansson.h>

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

/* The state of one load (model.c's load_json callocs and frees it). Every node,
 * tensor and name made lives in g's arena; nothing here owns memory. The first
 * error is kept in st and err, and the builders do nothing once it is set. */
struct layer_io;

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
    json_t *lcfg;              /* its config (the weights' *_initializer), or NULL */
    const char *cls;
    bool frozen;               /* the layer's weights are not trainable */
    int depth;
    int n_layers;
    int call_index;            /* the call of a shared layer (0 first) */
    uint32_t op_count[DM_OP_COUNT]; /* nodes of each op in the current layer call */
    bool keras3;
    const char *mixed;         /* a mixed-precision dtype policy seen, or NULL */
    const char *version;       /* a .keras archive's metadata.json keras_version, or NULL */
    /* Builds one layer call (model.c's dispatch, set when the build starts):
     * the functional walk (functional.c) and the wrappers of sequence.c call
     * back through it, so the dispatch stands on them and no file below it
     * calls up (tools/callgraph.py). */
    void (*call_layer)(struct keras *k, json_t *layer, struct layer_io *io);
    /* Keras 3: the layer-call outputs of the models being built (malloc'd,
     * n_held of cap_held), each held to the end of its model's call (model.c,
     * keras3_hold) */
    int32_t *held;
    size_t n_held, cap_held;
};

/* One layer call: its config, its inputs (borrowed) and its outputs. */
struct layer_io {
    json_t *cfg;
    const struct kt *in;
    int n_in;
    struct kt out[MAX_OUT];
    int n_out;
};

/* What dm_kr_enter_layer changes and dm_kr_leave_layer restores. */
struct saved {
    size_t scope_len;
    const char *layer, *cls;
    json_t *lcfg;
    int call;
};

/* INTS(1, 2, 3): the count and a compound literal, for an (n, values) pair. */
#define INTS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* build.c */
enum dnnmem_status dm_kr_fail(struct keras *k, enum dnnmem_status s, const char *fmt, ...)
    DM_PRINTF(3, 4);
int32_t dm_kr_oom(struct keras *k);
/* apps.c: a Keras Application (recognised by name and by its one open
 * [batch, height, width, 3] input) gets its keras.applications default
 * input size as the default of its height and width symbols
 * (g->sym_default, arena-owned); other models are left as they are. */
enum dnnmem_status dm_kr_app_defaults(struct keras *k, json_t *root);
json_t *dm_kr_field(json_t *o, const char *key);
bool dm_kr_json_int(json_t *v, int64_t *out);
int64_t dm_kr_get_int(struct keras *k, json_t *cfg, const char *key, int64_t dflt, int64_t lo);
void dm_kr_get_ints(struct keras *k, json_t *cfg, const char *key, int n, int64_t dflt,
                    int64_t lo, int64_t *out);
double dm_kr_get_num(struct keras *k, json_t *cfg, const char *key, double dflt, double lo,
                     double hi);
bool dm_kr_get_bool(struct keras *k, json_t *cfg, const char *key, bool dflt);
const char *dm_kr_get_str(struct keras *k, json_t *cfg, const char *key, const char *dflt);
struct dm_node *dm_kr_node(struct keras *k, enum dm_op o, int n_in, const int32_t *in, int n_out);
int32_t dm_kr_op(struct keras *k, enum dm_op o, int n_in, ...);
void dm_kr_attr_i(struct keras *k, const char *name, int64_t v);
void dm_kr_attr_f(struct keras *k, const char *name, double v);
void dm_kr_attr_s(struct keras *k, const char *name, const char *v);
void dm_kr_attr_ints(struct keras *k, const char *name, int n, const int64_t *v);
void dm_kr_attr_floats(struct keras *k, const char *name, int n, const double *v);
int32_t dm_kr_constant(struct keras *k);
int32_t dm_kr_const_f(struct keras *k, double v);
int32_t dm_kr_const_ints(struct keras *k, int n, const int64_t *v);
int32_t dm_kr_weight(struct keras *k, const char *what, int rank, const int64_t *dims);
void dm_kr_perm_identity(int rank, int8_t *p);
void dm_kr_perm_channels_first(int rank, int c, int8_t *p);
int dm_kr_ir_axis(const struct kt *x, int a);
int32_t dm_kr_arrange(struct keras *k, const struct kt *x, const int8_t *want);
int32_t dm_kr_keras_order(struct keras *k, const struct kt *x);
int dm_kr_keras_axis(struct keras *k, int64_t a, int rank, bool allow_batch);
int dm_kr_channel_axis(struct keras *k, json_t *cfg, int rank);
bool dm_kr_need_rank(struct keras *k, const struct kt *x, int lo, int hi);
int64_t dm_kr_known(struct keras *k, const struct kt *x, int a, const char *what);
void dm_kr_activation(struct keras *k, const char *act, struct kt *x);
const char *dm_kr_activation_name(struct keras *k, json_t *cfg, const char *key,
                                  const char *dflt);
const struct kt *dm_kr_one_input(struct keras *k, struct layer_io *io);
void dm_kr_same_out(struct layer_io *io, const struct kt *x, int32_t id);
int64_t dm_kr_axis_field(struct keras *k, json_t *cfg, int64_t dflt);
const char *dm_kr_policy_name(json_t *cfg);

/* layers.c */
void dm_kr_dense_layer(struct keras *k, struct layer_io *io);
void dm_kr_batchnorm_layer(struct keras *k, struct layer_io *io);
void dm_kr_layernorm_layer(struct keras *k, struct layer_io *io);
void dm_kr_dropout_layer(struct keras *k, struct layer_io *io, const char *key, double dflt);
void dm_kr_relu_layer(struct keras *k, struct layer_io *io);
void dm_kr_merge_layer(struct keras *k, struct layer_io *io, enum dm_op o, bool pairwise);
void dm_kr_concat_layer(struct keras *k, struct layer_io *io);
void dm_kr_reshape_layer(struct keras *k, struct layer_io *io);
void dm_kr_flatten_layer(struct keras *k, struct layer_io *io);
void dm_kr_permute_layer(struct keras *k, struct layer_io *io);
void dm_kr_repeat_layer(struct keras *k, struct layer_io *io);
void dm_kr_softmax_layer(struct keras *k, struct layer_io *io);
void dm_kr_rescaling_layer(struct keras *k, struct layer_io *io);

/* spatial.c */
void dm_kr_conv_layer(struct keras *k, struct layer_io *io, int ns, char kind);
void dm_kr_pool_layer(struct keras *k, struct layer_io *io, int ns, bool max);
void dm_kr_global_pool_layer(struct keras *k, struct layer_io *io, int ns, bool max);
void dm_kr_zeropad_layer(struct keras *k, struct layer_io *io, int ns);
void dm_kr_crop_layer(struct keras *k, struct layer_io *io, int ns);
void dm_kr_upsample_layer(struct keras *k, struct layer_io *io, int ns);

/* sequence.c */
void dm_kr_time_distributed_layer(struct keras *k, struct layer_io *io);
void dm_kr_embedding_layer(struct keras *k, struct layer_io *io);
void dm_kr_rnn_layer(struct keras *k, struct layer_io *io, const char *cls);
void dm_kr_bidirectional_layer(struct keras *k, struct layer_io *io);
void dm_kr_mha_layer(struct keras *k, struct layer_io *io);

/* model.c */
const char *dm_kr_layer_name(json_t *layer);
struct saved dm_kr_enter_layer(struct keras *k, json_t *layer, int call);
void dm_kr_leave_layer(struct keras *k, struct saved s);
void dm_kr_input_layer(struct keras *k, json_t *layer, struct kt *out);
enum dnnmem_status dm_kr_load_json(struct dm_graph *g, json_t *root, const char *where,
                                   const char *version, struct dnnmem_error *err);

/* functional.c */
void dm_kr_build_functional(struct keras *k, json_t *cfg, const struct kt *in, int n_in,
                            struct layer_io *io);

#endif
