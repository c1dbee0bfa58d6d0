/*
 * tfbuild.c: TensorFlow's build history before the step (--framework
 * tensorflow on the CPU with a Keras 3 model): the ops that make each
 * variable's value, in the order Keras builds them, replayed through BFC
 * before the step so that the weights sit in the chunks TF gives them.
 *
 * Why it matters: BFC hands a free chunk out whole when it is under twice
 * the request (bfc_allocator.cc, FindChunkPtr: split only when chunk >= 2 x
 * rounded), and bytes_in_use counts the whole chunk. A variable's value is
 * its initializer's last output, made beside that initializer's other
 * outputs in the regions allow_growth has grown so far, so a weight often
 * holds a chunk much larger than itself. Measured (TF 2.21.0, Keras 3.15.1,
 * TF_CPU_ALLOCATOR_USE_BFC=true, every BFC event from process start, the
 * profiler's MemoryAllocation events; fashion_mnist_mlp built from its
 * JSON): the [784,1024] kernel (3211264 B) is the AddV2 output of a
 * 5177344 B chunk, the rest of an 8 MiB region whose first 3211264 B held
 * the Mul; the [1024,512] kernel's StatelessRandomUniformV2 output gets
 * the freed 3211264 B chunk whole; the [512,256] kernel lands in a
 * 1040128 B chunk of the first 2 MiB region. dnnmem had allocated the
 * weights first, each exactly, in fresh regions: fashion_mnist_mlp `call`
 * -17.2%.
 *
 * The ops, as the trace shows them per variable (Keras 3 Layer.add_weight
 * -> KerasVariable, the TF backend's tf.Variable of the initializer's value;
 * the value becomes the variable's buffer, no copy):
 *   uniform (GlorotUniform and the other *Uniform / VarianceScaling
 *   uniform: keras/src/random random.uniform on the TF backend,
 *   tf.random.stateless_uniform, tensorflow/python/ops/
 *   stateless_random_ops.py: rnd * (maxval - minval) + minval):
 *     the seed's small tensors (Cast [2] 16 B, FloorMod [2] 16 B, Cast [2]
 *     8 B and two unnamed 8 B ones, StatelessRandomGetKeyCounter's [1] and
 *     [2] outputs; 256 B chunks each, in the order of HIST_UNIFORM), the
 *     StatelessRandomUniformV2 output, the Sub scalar, the Mul output, the
 *     AddV2 output (the value), then all but the value freed;
 *   fill (Zeros, Ones): a 4 B scalar, the Fill output (the value), the
 *     scalar freed;
 *   then the VarHandleOp's 200 B resource handle (a 256 B chunk), kept
 *   with the variable.
 * The batch is made after the model (tools/oracle/tf_measure.py's order).
 * The step's peak counts from after the history (get_memory_info after
 * reset_memory_stats, as measured): the schedule's measure_from.
 *
 * Not modelled: other initializers (normal, truncated normal, orthogonal:
 * not measured; their weights are placed as a Fill's value, which the
 * assumptions say), the optimizer's own scalar variables, the warm-up
 * step's leftovers.
 */
#include "builder.h"

/* One event of a variable's making: allocate `bytes` into slot `slot`
 * (VALUE: the variable's own bytes; the value itself goes in slot WEIGHT),
 * or free the slot. */
enum { VALUE = 0, SLOTS = 10, WEIGHT = SLOTS };
struct hop {
    char kind; /* 'a' allocate, 'f' free */
    int8_t slot;
    uint16_t bytes;
};

/* The uniform initializer's events, in the measured order (above). */
static const struct hop HIST_UNIFORM[] = {
    {'a', 0, 8},      {'a', 1, 16},     {'f', 0, 0},      {'a', 2, 16}, /* Cast, FloorMod */
    {'a', 3, 8},      {'f', 2, 0},      {'f', 1, 0},      {'a', 4, 8},  /* Cast */
    {'a', 5, 8},      {'a', 6, 16},                                     /* GetKeyCounter */
    {'a', 7, VALUE},                                                    /* StatelessRandomUniformV2 */
    {'a', 8, 4},                                                        /* Sub: maxval - minval */
    {'a', 9, VALUE},                                                    /* Mul */
    {'f', 8, 0},      {'a', WEIGHT, VALUE},                             /* AddV2: the value */
    {'f', 9, 0},      {'f', 4, 0},      {'f', 5, 0},      {'f', 6, 0},
    {'f', 7, 0},      {'f', 3, 0},
};
/* Zeros, Ones (and the unmeasured kinds, placed alike). */
static const struct hop HIST_FILL[] = {
    {'a', 0, 4}, {'a', WEIGHT, VALUE}, {'f', 0, 0}, /* a scalar, Fill: the value */
};
/* ResourceHandle's encoded size as VarHandleOp's temp reports it (measured:
 * requested_bytes 200 for every variable) */
#define HANDLE_BYTES 200

static int32_t make_variable(struct dm_sb *b, int32_t x)
{
    const struct dm_tensor *w = &b->g->tensors[x];
    const struct hop *h = w->init == DM_INIT_UNIFORM ? HIST_UNIFORM : HIST_FILL;
    size_t n = w->init == DM_INIT_UNIFORM ? sizeof HIST_UNIFORM / sizeof *HIST_UNIFORM
                                          : sizeof HIST_FILL / sizeof *HIST_FILL;
    uint64_t bytes = dm_par_resident_bytes(b, x);
    int32_t slot[SLOTS], weight = -1;
    for (int i = 0; i < SLOTS; i++)
        slot[i] = -1;
    for (size_t i = 0; i < n; i++) {
        if (h[i].kind == 'f') {
            if (slot[h[i].slot] >= 0)
                dm_sb_unref(b, slot[h[i].slot]);
            slot[h[i].slot] = -1;
        } else if (h[i].slot == WEIGHT) {
            weight = dm_sb_alloc(b, DNNMEM_CAT_WEIGHT, b->t[x].dtype, bytes, x, -1, NULL,
                                 DM_SB_PINNED);
        } else {
            slot[h[i].slot] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_UINT8,
                                          h[i].bytes == VALUE ? bytes : h[i].bytes, x, -1,
                                          "the initializer's ops", 1);
        }
    }
    dm_sb_alloc(b, DNNMEM_CAT_WEIGHT, DM_UINT8, HANDLE_BYTES, x, -1,
                "the variable's resource handle (VarHandleOp)", DM_SB_PINNED);
    return weight;
}

int32_t dm_sb_tf_fill_variable(struct dm_sb *b, enum dnnmem_category cat, enum dm_dtype dtype,
                               uint64_t bytes, int32_t x, const char *what)
{
    int32_t scalar = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_UINT8, 4, x, -1,
                                 "the initializer's ops", 1);
    int32_t v = dm_sb_alloc(b, cat, dtype, bytes, x, -1, what, 1);
    dm_sb_unref(b, scalar);
    dm_sb_alloc(b, cat, DM_UINT8, HANDLE_BYTES, x, -1,
                "the variable's resource handle (VarHandleOp)", DM_SB_PINNED);
    return v;
}

void dm_sb_tf_build(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    for (int32_t i = 0; i < g->n_tensors; i++) {
        if (!(b->flag[i] & DM_TF_RESIDENT) || g->tensors[i].role == DM_ROLE_INPUT)
            continue;
        if (g->tensors[i].role == DM_ROLE_WEIGHT && g->tensors[i].init != DM_INIT_NONE)
            b->resident[i] = make_variable(b, i);
        else /* a constant the graph holds */
            b->resident[i] = dm_sb_alloc(b, DNNMEM_CAT_WEIGHT, b->t[i].dtype,
                                         dm_par_resident_bytes(b, i), i, -1, NULL, DM_SB_PINNED);
    }
    for (int32_t i = 0; i < g->n_tensors; i++)
        if ((b->flag[i] & DM_TF_RESIDENT) && g->tensors[i].role == DM_ROLE_INPUT)
            b->resident[i] = dm_sb_alloc(b, DNNMEM_CAT_INPUT, b->t[i].dtype, b->t[i].bytes, i,
                                         -1, NULL, DM_SB_PINNED);
    b->s->measure_from = b->s->n_ev;
}
