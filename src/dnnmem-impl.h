/*
 * dnnmem-impl.h: definitions shared by the library's stages, never installed.
 *
 * Stages depend on each other in pipeline order only:
 *   util (arena, errors, checked arithmetic, dtypes)
 *   graph (IR, op table)  <- load (ONNX)
 *   shape (per-binding inference and constant folding)
 *   schedule (allocation/free events in execution order)
 *   alloc (allocator simulators)
 *   report (result, text, JSON)
 */
#ifndef DNNMEM_IMPL_H
#define DNNMEM_IMPL_H

#include "dnnmem.h"

struct json_t; /* jansson's (json_t): the parsed root of a JSON model file */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DM_MAX_DIMS DNNMEM_MAX_DIMS
/* The defaults of dnnmem_config.torch_version and .transformers_version:
 * PyTorch 2.6, the release current when transformers 4.51 came out, and the
 * newest transformers release modelled (issue 14: the default is the newest
 * modelled release, printed with the result). */
#define DM_TORCH_DEFAULT 206
/* The PyTorch releases whose memory rules dnnmem has: 1.10 (the oldest rule
 * read: SoftmaxBackward keeps its input until 1.11, PR #66018) to 2.15 (the
 * newest measured: the zoo at 2.14.1, tests/validation/pytorch-cpu-2.x-zoo.jsonl,
 * and a subset of it at 2.15.0, tests/validation/pytorch-cpu-2.15-zoo.jsonl, each
 * row's peak the same to the byte as 2.14.1's; 2.15 takes 2.14's rules:
 * docs/validation-zoo.md "torch215"); measured at 1.13, 2.11 (H200), 2.13, 2.14.1
 * and 2.15.0. Others are refused
 * (check.c) until measured: a newer release's kernels may allocate otherwise. */
#define DM_TORCH_OLDEST 110
#define DM_TORCH_NEWEST 215
#define DM_TRANSFORMERS_DEFAULT DM_TRANSFORMERS_NEWEST
/* The transformers releases the HuggingFace front end models: 4.40 to 5.25,
 * the memory behaviour changing at 4.52, 4.54, 4.56, 5.0 and 5.25 (Falcon's
 * attention on the shared interface; each read in that release's sources),
 * measured at 4.51.3, 4.56.2, 5.24.0 (tests/validation/hf-real-cpu.jsonl)
 * and 5.25.0 (hf-real-5.25-cpu.jsonl); 4.40 to 4.50 for gpt_neox and opt
 * (changes at 4.42, 4.45, 4.46 and 4.49, measured at 4.42.4 and 4.46.3),
 * 4.48 to 4.50 for llama, mistral, gemma and gpt2 (measured at 4.48.3),
 * every other model type from DM_TRANSFORMERS_WIDE (hf.c's table). Others are refused (check.c, and hf_check per model type). */
#define DM_TRANSFORMERS_OLDEST 440
#define DM_TRANSFORMERS_WIDE 451
#define DM_TRANSFORMERS_NEWEST 525
/* The release of the graph dm_load_hf builds without options (the graph a
 * model loads with); an estimate for any other release builds its own
 * (check.c, o->rebuild). */
#define DM_TRANSFORMERS_BASE 451
/* The compute capability estimates take when none is given (an A100). */
#define DM_CC_DEFAULT 80
#define DM_HEADROOM_DEFAULT DNNMEM_HEADROOM_DEFAULT

#if defined(__GNUC__)
#define DM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DM_PRINTF(a, b)
#endif

/* ---- errors (src/util/error.c) ------------------------------------------ */

/* Set err (if not NULL) and return s. The message is one line. */
enum dnnmem_status dm_fail(struct dnnmem_error *err, enum dnnmem_status s, const char *fmt, ...)
    DM_PRINTF(3, 4);

#define DM_TRY(expr)                                                                               \
    do {                                                                                           \
        enum dnnmem_status dm_try_s_ = (expr);                                                     \
        if (dm_try_s_ != DNNMEM_OK)                                                                \
            return dm_try_s_;                                                                      \
    } while (0)

/* MurmurHash3's 32-bit finalizer (fmix32): every input bit reaches every
 * output bit. Hash-table indices and treap priorities. */
static inline uint32_t dm_mix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* ---- checked arithmetic (all byte and element counts) ------------------- */

static inline bool dm_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool dm_add_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline bool dm_umul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool dm_uadd_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* ---- arena (src/util/arena.c) -------------------------------------------- */

/* A chunked bump allocator. Everything allocated from it is freed at once by
 * dm_arena_free. Allocation failure returns NULL. */
struct dm_arena_chunk;
struct dm_arena {
    struct dm_arena_chunk *head;
    size_t used;  /* bytes handed out, for statistics */
};
void dm_arena_init(struct dm_arena *a);
void dm_arena_free(struct dm_arena *a);
void *dm_arena_alloc(struct dm_arena *a, size_t size);   /* zeroed, 16-aligned */
void *dm_arena_array(struct dm_arena *a, size_t n, size_t elem); /* overflow-checked */
/* A malloc'd array *p of *cap elements of `elem` bytes, of which n are used, made room
 * for one more (doubled, from 256; overflow-checked): false when out of memory. The
 * one growth rule of the schedule builder's, a capture's and its replay's arrays. */
bool dm_grow(void **p, size_t elem, size_t n, size_t *cap);
char *dm_arena_strdup(struct dm_arena *a, const char *s);
char *dm_arena_strndup(struct dm_arena *a, const char *s, size_t n);
char *dm_arena_printf(struct dm_arena *a, const char *fmt, ...) DM_PRINTF(2, 3);

/* ---- a small JSON reader (src/util/json.c) -------------------------------- */

/* The capture format's reader (jansson's DOM was its estimate's cost): values
 * in an arena, a container's members one array, an object's in file order. */
enum dm_json_type {
    DM_JSON_NULL, DM_JSON_FALSE, DM_JSON_TRUE, DM_JSON_INT, DM_JSON_REAL, DM_JSON_STRING,
    DM_JSON_ARRAY, DM_JSON_OBJECT
};
struct dm_json {
    const char *key; /* an object's member: its key (NUL-terminated), else NULL */
    union {
        int64_t i;                   /* DM_JSON_INT */
        double r;                    /* DM_JSON_REAL */
        const char *s;               /* DM_JSON_STRING: NUL-terminated, no NUL inside */
        const struct dm_json *items; /* DM_JSON_ARRAY, DM_JSON_OBJECT */
    } u;
    uint32_t n;   /* members of an array or object; a string's bytes */
    uint8_t type; /* enum dm_json_type */
};
/* Nesting the reader takes: the capture format's is 5 (docs/capture-format.md);
 * a limit keeps the recursion's stack bounded (jansson's is 2048). */
#define DM_JSON_MAX_DEPTH 64
struct dm_json_error {
    const char *msg; /* static text */
    size_t offset;   /* the byte where it was found */
    bool limit;      /* a limit of this reader (depth, size, memory), not bad JSON */
};
/* The text's one top-level object or array into *root (allocated in `arena`,
 * valid until it is freed): DNNMEM_OK, or DNNMEM_E_PARSE / E_LIMIT / E_NOMEM
 * with *err saying what and where. */
enum dnnmem_status dm_json_parse(struct dm_arena *arena, const uint8_t *data, size_t size,
                                 const struct dm_json **root, struct dm_json_error *err);
/* jansson's accessors' meaning: NULL (or 0, false) for a missing value or one
 * of another type. */
const struct dm_json *dm_json_get(const struct dm_json *o, const char *key);
const struct dm_json *dm_json_at(const struct dm_json *a, size_t i);
static inline size_t dm_json_size(const struct dm_json *a)
{
    return a && a->type == DM_JSON_ARRAY ? a->n : 0;
}
static inline bool dm_json_is(const struct dm_json *v, enum dm_json_type t)
{
    return v && v->type == t;
}
static inline bool dm_json_is_bool(const struct dm_json *v)
{
    return dm_json_is(v, DM_JSON_TRUE) || dm_json_is(v, DM_JSON_FALSE);
}
static inline int64_t dm_json_int(const struct dm_json *v)
{
    return dm_json_is(v, DM_JSON_INT) ? v->u.i : 0;
}
static inline const char *dm_json_str(const struct dm_json *v)
{
    return dm_json_is(v, DM_JSON_STRING) ? v->u.s : NULL;
}

/* ---- dtypes (src/graph/dtype.c) ------------------------------------------- */

/* Element types, numbered as ONNX's TensorProto.DataType. */
enum dm_dtype {
    DM_UNDEFINED = 0,
    DM_FLOAT = 1,
    DM_UINT8 = 2,
    DM_INT8 = 3,
    DM_UINT16 = 4,
    DM_INT16 = 5,
    DM_INT32 = 6,
    DM_INT64 = 7,
    DM_STRING = 8,
    DM_BOOL = 9,
    DM_FLOAT16 = 10,
    DM_DOUBLE = 11,
    DM_UINT32 = 12,
    DM_UINT64 = 13,
    DM_COMPLEX64 = 14,
    DM_COMPLEX128 = 15,
    DM_BFLOAT16 = 16,
    DM_FLOAT8E4M3FN = 17,
    DM_FLOAT8E4M3FNUZ = 18,
    DM_FLOAT8E5M2 = 19,
    DM_FLOAT8E5M2FNUZ = 20,
    DM_UINT4 = 21,
    DM_INT4 = 22,
    DM_DTYPE_COUNT
};
bool dm_dtype_valid(int32_t t);
/* Size in bits of one element (4 for int4); 0 for string. */
int dm_dtype_bits(enum dm_dtype t);
const char *dm_dtype_name(enum dm_dtype t);
bool dm_dtype_is_float(enum dm_dtype t);
/* Bytes of `numel` elements, rounded up to whole bytes; false on overflow. */
bool dm_dtype_bytes(enum dm_dtype t, int64_t numel, uint64_t *bytes);

/* ---- the op table (src/graph/ops.def, src/graph/ops.c) -------------------- */

enum dm_op {
#define DM_OP(name, shape_fn, flags, meta_inputs, train) DM_OP_##name,
#define DM_OP_MS(name, shape_fn, flags, meta_inputs, train) DM_OP_MS_##name,
#include "graph/ops.def"
#undef DM_OP
#undef DM_OP_MS
    DM_OP_COUNT
};
#define DM_OP_MS_FIRST DM_OP_MS_Attention /* the first com.microsoft row of ops.def */

/* Op flags (the "flags" column of ops.def). */
enum {
    DM_F_VIEW = 1u << 0,       /* output 0 aliases input 0 in PyTorch eager (no allocation) */
    DM_F_IDENTITY_INFER = 1u << 1, /* in eval mode output 0 is input 0 itself (Dropout) */
    DM_F_TRAIN_AUX = 1u << 2,  /* outputs after the first exist only in training mode */
    DM_F_SEQUENCE = 1u << 3,   /* works on sequence values, which the library does not model */
    DM_F_AMP_LOW = 1u << 4,    /* autocast runs it in the low-precision type */
    DM_F_AMP_FP32 = 1u << 5,   /* autocast runs it in fp32 */
    DM_F_AMP_PROMOTE = 1u << 6, /* autocast runs it in the widest input type */
};

/* Backward rules (the last column of ops.def): what an op's autograd node
 * saves and how it makes input gradients. The facts and sources behind each
 * rule are in src/train/train.c. */
enum dm_train_rule {
    DM_T_NONE,       /* not differentiable: outputs never require grad */
    DM_T_VIEW,       /* a view: the input grad is a view of the output grad; nothing saved */
    DM_T_PASS,       /* add/sub/concat/sum: input grads are the output grad or views of it */
    DM_T_OUT,        /* saves output 0 (relu, sigmoid, tanh, softmax, exp, sqrt) */
    DM_T_IN,         /* saves input 0 (erf, log, leaky_relu, clamp, avg_pool) */
    DM_T_OPERANDS,   /* saves the operands other inputs' grads need (mul, div, mm, addmm) */
    DM_T_BOTH,       /* saves every data operand when an input needs a grad (maximum, minimum) */
    DM_T_CONV,       /* saves input and weight */
    DM_T_BN,         /* saves input; extra save_mean, save_invstd */
    DM_T_LN,         /* saves input; extra mean, rstd per normalized row */
    DM_T_POOL_IDX,   /* max pooling: saves input and int64 indices shaped like the output */
    DM_T_DROPOUT,    /* saves a mask */
    DM_T_EMBED,      /* embedding: saves the indices; the weight grad is dense */
    DM_T_COPY,       /* slice/pad/cast/expand/reduce: saves nothing; allocates the input grad */
    DM_T_RNN,        /* recurrent layers */
    DM_T_SDPA,       /* fused attention: saves q, k, v, output and a log-sum-exp per row */
    DM_T_SCAN,       /* Mamba's selective scan: every step's state (save.c) */
    DM_T_UNMODELLED  /* differentiable, no rule yet: training through it is an error */
};

struct dm_infer;
struct dm_node;
typedef enum dnnmem_status (*dm_shape_fn)(struct dm_infer *ctx, const struct dm_node *n);

struct dm_op_info {
    const char *name;      /* ONNX op_type */
    const char *domain;    /* "" (ai.onnx) or "com.microsoft" */
    unsigned flags;        /* DM_F_* */
    uint32_t meta_inputs;  /* bit i: input i is metadata (shape, axes, pads, scales...),
                              a host-side list in PyTorch eager, never a device tensor */
    enum dm_train_rule train;
};
extern const struct dm_op_info dm_ops[DM_OP_COUNT];
/* Each op's shape function (ops.def's second column; src/shape/rules.c):
 * output dtypes, shapes and (when cheap) values. Kept apart from dm_ops so
 * that the graph stage does not reach up into the shape functions. */
extern const dm_shape_fn dm_shape_fns[DM_OP_COUNT];
/* Look up an op by domain ("" or "ai.onnx" for the default one) and op_type;
 * DM_OP_COUNT if unknown. */
enum dm_op dm_op_lookup(const char *domain, const char *name);
/* An activation PyTorch can run in place (a module's inplace=True): ReLU,
 * Clip (ReLU6, Hardtanh), LeakyRelu, HardSwish, HardSigmoid, SiLU, ELU,
 * SELU, CELU. */
bool dm_op_inplace_activation(enum dm_op op);

/* ---- graph IR (src/graph/graph.c) ----------------------------------------- */

/* One dim of a declared shape: a number, or a symbol to be bound. */
struct dm_dim {
    int64_t value; /* >= 0 when known */
    int32_t sym;   /* index into graph symbols, or -1 */
};

enum dm_role {
    DM_ROLE_ACTIVATION = 0, /* produced by a node */
    DM_ROLE_INPUT,          /* a graph input fed at run time */
    DM_ROLE_WEIGHT,         /* an initializer: parameter or buffer */
    DM_ROLE_CONSTANT,       /* produced by a Constant node */
};

/* A constant value known at load or inference time: integers (and bools) as
 * int64, floating point as double. Only small tensors carry values. */
struct dm_value {
    int64_t n;
    bool is_float;
    int64_t *i; /* valid when !is_float */
    double *f;  /* valid when is_float */
};
#define DM_VALUE_MAX_ELEMS 4096 /* largest tensor whose values are tracked */

/* A tensor whose shape the file does not hold but the library infers from
 * another tensor's once dims are bound (src/shape/infer.c): the parameters
 * of an MXNet symbol, whose sizes follow from the data fed to their
 * operator (MXNet's own shape inference does the same). */
enum dm_derive_rule {
    DM_DERIVE_DIM,   /* dims, with dims[at] = from.dims[axis] / div (x mul when mul > 0) */
    DM_DERIVE_FLAT,  /* dims, with dims[at] = the product of from.dims[axis..] */
    DM_DERIVE_BCAST, /* [from.dims[1], 1, ...] of from's rank - 1 (a per-channel slope) */
    DM_DERIVE_DROP,  /* from's dims without axis `axis` */
    DM_DERIVE_FIRST, /* [from.dims[0]] */
    DM_DERIVE_SAME,  /* from's dims */
    DM_DERIVE_RNN    /* [n]: the flat parameter vector of a fused RNN whose input
                        width is from.dims[last] (cuDNN layout, MXNet's RNN op) */
};
struct dm_derive {
    int32_t from;             /* the tensor read; inferred before this one is needed */
    enum dm_derive_rule rule;
    int at, axis;             /* axis < 0 counts from the end */
    int rank;
    int64_t dims[DM_MAX_DIMS];
    int64_t div;              /* DIM: >= 1 */
    int64_t mul;              /* DIM: 0 (none) or the factor applied after div */
    int64_t gates, hidden, layers, dirs; /* RNN */
    const char *why;          /* for a graph input: why its shape follows (printed as an
                                 assumption), or NULL; arena-owned by the graph */
};

/* A Keras 3 weight's initializer, as the TF backend runs it
 * (src/schedule/tfbuild.c has the ops each makes) */
enum dm_init {
    DM_INIT_NONE,    /* not a Keras 3 weight */
    DM_INIT_UNIFORM, /* RandomUniform, GlorotUniform, HeUniform, LecunUniform, VarianceScaling
                        uniform: tf.random.stateless_uniform */
    DM_INIT_FILL,    /* Zeros, Ones, Constant: a Fill */
    DM_INIT_OTHER    /* any other (normal, truncated normal, orthogonal, ...): not measured */
};
struct dm_tensor {
    const char *name;
    enum dm_dtype dtype;   /* DM_UNDEFINED when unknown before inference */
    int rank;              /* declared rank, -1 when not declared */
    struct dm_dim *dims;   /* declared dims (inputs, weights) */
    enum dm_role role;
    bool is_output;        /* a graph output */
    bool frozen;           /* a weight that gets no grad (requires_grad False) */
    bool keep_fp32;        /* stays float32 when the run converts the model to 16 bits */
    bool grad_leaf;        /* an activation made to require grad (requires_grad_(True),
                              PEFT's enable_input_require_grads): a leaf whose grad
                              backward accumulates into its .grad */
    int32_t producer;      /* node index, -1 for inputs, weights */
    uint8_t init;          /* enum dm_init: how a Keras 3 weight's value is made (its
                              layer's *_initializer), for TensorFlow's build history
                              (src/schedule/tfbuild.c); DM_INIT_NONE elsewhere */
    int32_t held_until;    /* 0, or 1 + the index of a node until whose end a Python
                            * variable holds the tensor (a local of a module's
                            * forward, kept until it returns; HF front end) */
    struct dm_value *value; /* weights and constants with small embedded data */
    const struct dm_derive *derive; /* a weight or input shaped at inference, or NULL */
};

/* Attributes: a tagged union; the tag says which member is valid. */
enum dm_attr_kind {
    DM_ATTR_INT,
    DM_ATTR_FLOAT,
    DM_ATTR_STRING,
    DM_ATTR_INTS,
    DM_ATTR_FLOATS,
    DM_ATTR_STRINGS,
    DM_ATTR_TENSOR,  /* t: dims, dtype and (small) value */
    DM_ATTR_GRAPH,   /* a subgraph: recorded, not modelled */
    DM_ATTR_OTHER
};
/* The kind says which member of the union holds the value (read no other):
 * 32 bytes, not 80 with a field per kind (a DeepSeek-V3 training estimate's
 * two graphs: 16 MB and 4% of its page faults less). */
struct dm_attr {
    const char *name;
    enum dm_attr_kind kind;
    int64_t n;           /* element count of INTS, FLOATS, STRINGS */
    union {
        int64_t i;           /* INT */
        double f;            /* FLOAT */
        const char *s;       /* STRING */
        int64_t *ints;       /* INTS */
        double *floats;      /* FLOATS */
        const char **strings; /* STRINGS */
        struct dm_tensor *t; /* TENSOR (not in the graph's tensor list) */
    };
};

struct dm_node {
    const char *name;     /* the node's name, or "<op_type>#<index>" when unnamed */
    enum dm_op op;
    const char *domain;
    int n_in, n_out;
    int32_t *in;          /* tensor indices; -1 for an omitted optional input */
    int32_t *out;         /* tensor indices; -1 for an omitted optional output */
    int n_attr, cap_attr; /* attrs holds cap_attr (dm_graph_attr grows it) */
    struct dm_attr *attrs;
    int8_t inplace_fact;  /* DM_INPLACE_FACT_*: what the model file says about running this
                             node in place (an inlined torch.nn module's `inplace`, onnx.c) */
};

/* dm_node.inplace_fact: UNKNOWN leaves it to --inplace (forward.c). */
enum { DM_INPLACE_FACT_UNKNOWN = 0, DM_INPLACE_FACT_YES = 1, DM_INPLACE_FACT_NO = 2 };

/* HF --mode generate: how a forward turns generate()'s 2-D attention_mask
 * [B, L] into the eager attention's 4-D mask (src/schedule/generate.c). */
enum dm_gen_mask {
    DM_GEN_MASK_CAUSAL,   /* _update_causal_mask (transformers 4.51, a Cache class):
                             full((q, L), min) times the cache-position comparison,
                             expanded to [B, 1, q, L] and cloned (Llama and its copies,
                             OPT, GPT-NeoX, Falcon, Phi, Phi-3, Gemma) */
    DM_GEN_MASK_INVERTED, /* the legacy models' (1 - mask[:, None, None, :].to(dtype))
                             then * finfo.min (GPT2Model) or masked_fill(finfo.min)
                             (BioGPT's _expand_mask): [B, 1, q, L] */
};

/* A slot of the tensor index: the tensor (-1: empty) and its name's hash,
 * compared before the names are. */
struct dm_index_slot {
    int32_t t;
    uint32_t hash;
};

/* What an option asks that the model (or its built graph) cannot give,
 * found where a builder meets it: the builder records it and stops there
 * (so the order of errors is the build's), and a row of the check table
 * (src/estimate/check.c) turns it into the error: its text and exit code.
 * The graph's builder records on the graph (struct dm_graph's refusal,
 * DM_CHECK_GRAPH rows), the schedule's on the schedule (struct
 * dm_schedule's, DM_CHECK_BUILT rows). */
enum dm_refusal_kind {
    DM_REFUSE_NONE,
    /* the HuggingFace builder (src/load/hf/) */
    DM_REFUSE_FLASH_RELEASE,  /* --attn flash before the release that has it (BioGPT) */
    DM_REFUSE_FLASH_MODEL,    /* --attn flash on a model type without it (name) */
    DM_REFUSE_QUANT_TWICE,    /* --quant on a quantized config (name: its quant_method) */
    DM_REFUSE_SDPA_KERNEL,    /* --sdpa-backend (name) without a kernel for it (why) */
    DM_REFUSE_HYBRID_PROMPT,  /* a HybridCache's generation without the prompt length */
    DM_REFUSE_HYBRID_FLASH,   /* --attn flash over a HybridCache's generation */
    DM_REFUSE_HYBRID_LONG,    /* a HybridCache's prompt (value) beyond the limit */
    DM_REFUSE_GEN_CACHE_IMPL, /* --mode generate with a cache_implementation (name) not
                                 modelled */
    DM_REFUSE_GEN_NO_USE_CACHE, /* --mode generate on a T5 config with use_cache false */
    DM_REFUSE_KBIT_NO_GC,     /* --kbit-prep's checkpointing on a model without it */
    DM_REFUSE_KBIT_LISTS,     /* --kbit-prep over more than two layer lists */
    DM_REFUSE_KBIT_NO_LIST,   /* --kbit-prep on a model without a layer list */
    DM_REFUSE_LORA_TARGET,    /* a --lora-targets module (name) matching no linear layer */
    DM_REFUSE_LORA_NO_DEFAULT, /* --lora-r without --lora-targets on a model_type (name) PEFT
                                  has no default target_modules for */
    DM_REFUSE_MOE_EAGER,      /* transformers 5.0-5.2's "eager" experts (PyTorch before 2.9) */
    DM_REFUSE_MOE_QUANT,      /* 5.x's 3-D experts under a quantization (--quant or the
                                 config's quantization_config) */
    /* the schedule's builder (src/train/, src/schedule/) */
    DM_REFUSE_CKPT_LONG,      /* a --checkpoint spec (name) of too long a pattern */
    DM_REFUSE_CKPT_EVERY,     /* a --checkpoint spec (name) whose ':K' is no positive count */
    DM_REFUSE_CKPT_OVERLAP,   /* a --checkpoint spec (name) overlapping another's segment at
                                 a node (why) */
    DM_REFUSE_CKPT_UNMATCHED, /* a --checkpoint spec (name) making no segment (why: a node
                                 name to show) */
    DM_REFUSE_NOTHING_TO_TRAIN, /* no trainable parameter reaches the first output */
    DM_REFUSE_GEN_NO_CACHE,   /* --mode generate on a decoder that returns no cache */
    DM_REFUSE_GEN_NO_DECODER_CACHE, /* --mode generate on an encoder-decoder without
                                       its decoder's cache */
    DM_REFUSE_COUNT
};

struct dm_refusal {
    enum dm_refusal_kind kind;
    const char *name; /* the graph's: arena-owned; the schedule's: the options' or the graph's */
    const char *why;
    int64_t value, limit;
};

struct dm_graph {
    struct dm_arena arena;
    const char *path;     /* for messages */
    const char *format;
    const char *producer;
    int64_t opset;
    int32_t n_tensors, cap_tensors;
    struct dm_tensor *tensors; /* malloc'd, grows */
    struct dm_index_slot *index; /* open-addressing hash: name -> tensor, malloc'd */
    uint32_t index_cap;
    int32_t n_indexed;         /* the tensors in it (all but dm_graph_add_unnamed's) */
    int32_t n_nodes;
    struct dm_node *nodes;     /* in execution (topological) order */
    struct dm_node *node_heap; /* the array dm_graph_add_node grows (realloc: large ones
                                  move without a copy), malloc'd; nodes points into it
                                  unless sorting moved them into the arena */
    int64_t max_nodes;         /* the load's budget (dnnmem_load_options); 0: none */
    int32_t n_symbols;
    const char **symbols;
    /* A default value for each symbol (n_symbols entries, -1 for none;
     * arena-owned) that the front end found in the model, bound when no
     * option binds the symbol, and why (the assumption text); NULL when
     * none: Keras Applications' default input size (src/load/keras/apps.c) */
    const int64_t *sym_default;
    int32_t n_sym_default;     /* its entries: the symbols when it was set */
    const char *sym_default_why;
    int32_t n_inputs, n_outputs;
    int32_t *inputs, *outputs; /* tensor indices */
    const char *stored_dtype;  /* HF configs: torch_dtype as the config states it, or NULL */
    bool logits_to_keep;       /* HF: forward(logits_to_keep=1) computes the last position's
                                  logits only (generate's prefill) */
    bool legacy_cache;         /* HF: in generate the cache is the forward's own tuple of
                                  presents (transformers 4.51's GPT-2 and BioGPT: no
                                  Cache class):
                                  each layer torch.cats into new keys and values while
                                  the previous tuple stays referenced (model_kwargs,
                                  model_inputs) until the next step's inputs replace it */
    enum dm_gen_mask gen_mask; /* HF: the 4-D mask each generate() forward makes of the
                                  2-D attention_mask (eager attention) */
    bool loss_upcast;          /* the model's own loss casts its logits to float32
                                  first (transformers' ForCausalLMLoss: logits.float()) */
    int32_t loss_terms;        /* HF heads whose own loss is the mean of cross-entropies
                                  of the first loss_terms outputs (ForQuestionAnswering:
                                  (start_loss + end_loss) / 2); 0: --loss's */
    const char *head;          /* HF encoders: the head built ("BertForQuestionAnswering"),
                                  or NULL */
    bool seqcls_no_pad;        /* HF decoder SequenceClassification without pad_token_id:
                                  transformers refuses batches above 1 (check.c) */
    bool loss_mse;             /* HF: the head's own loss is MSELoss (num_labels 1,
                                  regression), which --loss's default ce becomes */
    const char *type_from;     /* HF: how a config without model_type was resolved ("gpt2
                                  from architectures GPT2LMHeadModel"), or NULL */
    bool encoder_decoder;      /* HF: an encoder-decoder (T5): in --mode generate the
                                  graph is the encoder and the first decoder forward
                                  (decoder_input_ids [batch, 1]), src/schedule/generate.c
                                  the decode steps (seq2seq_decode) */
    bool whisper;              /* HF: Whisper's encoder-decoder (whisper_decode) */
    /* HF --mode generate with transformers' HybridCache (Gemma 2/3, config
     * cache_implementation "hybrid"): the static cache's positions (prompt +
     * new tokens - 1; 0: a DynamicCache), the sliding layers' window, and
     * their pattern (layer i slides when (i + 1) % cache_pattern != 0). The
     * caches are graph inputs "cache.N.key" / "cache.N.value". */
    int64_t cache_len, cache_window, cache_pattern;
    bool attn_softcap, final_softcap; /* Gemma 2's tanh softcapping of the scores (eager)
                                         and of the logits (set with cache_len) */
    bool train_graph;          /* HF: training builds another graph (Gemma 2/3 in 4.x make
                                * no cache when model.training): rebuilt with the options */
    bool onnx_scopes;          /* ONNX: torch.onnx names each node by the module calls it
                                  ran in ("/layer1/conv1/Conv"), with or without
                                  export_modules_as_functions (onnx.c): the scopes
                                  schedule.c's caller_names reads */
    bool eager_only;           /* HF: transformers has no sdpa path for it (T5Attention):
                                  the "sdpa" graph is the eager one */
    int hf_oldest;             /* HF: the oldest transformers release modelled for the model
                                  type, where it is above DM_TRANSFORMERS_BASE (gpt_oss):
                                  the graph as loaded is that release's, so every estimate
                                  rebuilds (check.c); 0 otherwise */
    int sdpa_since;            /* HF: the transformers release that gave it an sdpa path
                                  (GPT-NeoX 442, OPT 446); 0: every modelled one */
    /* HF mixture of experts with output_router_logits: each sparse layer's
     * router logits [tokens, experts] (arena-owned list), which the causal
     * LM's forward returns and, in training, feeds to load_balancing_loss_func
     * after the cross-entropy (src/train/train.c, aux_loss) */
    int32_t n_router, *router;
    /* HF --mode generate, transformers 5.x: the decode steps run the MoE experts
     * with batched_mm (GenerationMixin._optimize_model_for_decode; see
     * src/schedule/generate.c, moe_decode): moe_dec_layer[l] (arena-owned,
     * n_moe_dec entries, one per decoder layer) says layer l has them; top_k,
     * the hidden and expert intermediate sizes; moe_dec_w32: the routing
     * weights are float32 (the weighted rows and their sum are);
     * moe_dec_release: the transformers release (major * 100 + minor), whose
     * batched_mm_experts_forward moe_decode follows */
    bool *moe_dec_layer;
    int32_t n_moe_dec;
    int64_t moe_dec_top_k, moe_dec_hidden, moe_dec_inter;
    bool moe_dec_w32;
    int moe_dec_release;
    /* HF DeepSeek-V2/V3 with the latent cache (transformers 5.15+, src/load/hf/
     * deepseek.c): each decode step's expand_kv over the cached positions
     * (src/schedule/generate.c, decode_forward): the heads, kv_b_proj's
     * per-head output (qk_nope + v_head_dim), the key head size (qk_nope +
     * qk_rope) and v_head_dim; 0 heads: no latent cache */
    int64_t mla_dec_heads, mla_dec_kv, mla_dec_qk, mla_dec_v;
    /* Module scopes from the node names (dm_graph_finish): node i runs in
     * the modules scope_first/scope_last[scope_start[i] .. scope_start[i+1]),
     * outermost first, each the first and last node of that module's
     * consecutive run ("/layer1", "/layer1/layer1.0", ...; arena-owned) */
    int32_t *scope_start, *scope_first, *scope_last;
    int32_t n_scoped;          /* n_nodes when they were found */
    int64_t router_top_k;
    double router_aux_coef;
    /* HF: linear layers stored quantized (quantization_config or --quant) */
    const char *quant_method;  /* "gptq", "awq", "bitsandbytes", "fp8", or NULL */
    const char *quant_layout;  /* assumption text: method, layout, modules */
    const char *quant_runtime; /* assumption text: the kernels and their transients */
    bool quant_trainable;      /* with adapters (the quantizer's is_trainable) */
    bool quant_fp16_default;   /* from_pretrained without torch_dtype loads the float
                                  parts in float16 (the quantizer's update_torch_dtype) */
    int quant_min_cc;          /* compute capability its kernels need (major*10+minor), 0 any */
    /* HF with kbit_prep (prepare_model_for_kbit_training): what it did, for
     * the assumption line, and the checkpoint specs of every layer that
     * gradient_checkpointing_enable makes ("/model/layers.*"; T5: two) */
    /* --lora-r without --lora-targets: PEFT's default target_modules for the
     * model type (static strings), which the lora assumption names */
    const char *const *lora_default;
    size_t n_lora_default;
    const char *kbit_prep;
    /* HF mamba: which path the selective scan runs (the assumption line), or NULL */
    const char *mamba_kernels;
    /* HF MoE blocks whose routing assumption is the front end's (DeepseekV2MoE of
     * 4.54-4.57, src/load/hf/deepseek.c): the moe_routing line, or NULL */
    const char *moe_routing;
    const char *kbit_ckpt[2];
    int n_kbit_ckpt;
    /* A captured step (src/load/capture.c; arena-owned): its schedule as
     * observed, which the estimate replays as it stands, and each node's
     * aten op ("aten.convolution.default"); NULL for every other format */
    struct dm_capture *capture;
    const char **op_names;
    /* HF: what the builder refused (the build stopped there; the estimate
     * fails with the check table's row for it) */
    struct dm_refusal refusal;
};

void dm_graph_init(struct dm_graph *g);
void dm_graph_free(struct dm_graph *g);
/* Add a tensor; names must be unique (checked by the loader). -1 on OOM. */
int32_t dm_graph_add_tensor(struct dm_graph *g, const char *name);
/* The hash of a string for open-addressing tables: FNV-1a over its bytes,
 * then fmix32. FNV-1a runs byte by byte, so a builder that appends to a
 * prefix continues the prefix's state: dm_hash_str(s) is
 * dm_hash_end(dm_hash_bytes(DM_HASH_INIT, s, strlen(s))). */
#define DM_HASH_INIT 2166136261u
static inline uint32_t dm_hash_bytes(uint32_t h, const char *s, size_t n)
{
    for (size_t k = 0; k < n; k++)
        h = (h ^ (unsigned char)s[k]) * 16777619u;
    return h;
}
/* fmix32, so that the low bits (the table index) depend on every
 * character: FNV-1a's low bits do not see the high bits of earlier
 * characters, and names differing in one digit cluster */
static inline uint32_t dm_hash_end(uint32_t h) { return dm_mix32(h); }
uint32_t dm_hash_str(const char *s);
/* Tensor index by name, or -1; dm_graph_find_h with the name's
 * dm_hash_str. */
int32_t dm_graph_find(const struct dm_graph *g, const char *name);
int32_t dm_graph_find_h(const struct dm_graph *g, const char *name, uint32_t hash);
/* A tensor named `name`, a string in g's arena (not copied) whose dm_hash_str
 * is `hash`, added as dm_graph_add_tensor does: -1 when out of memory, -2
 * when a tensor has that name already. A builder that makes its names in
 * the arena and hashes them as it makes them does no second pass over
 * them. */
int32_t dm_graph_add_named(struct dm_graph *g, const char *name, uint32_t hash);
/* A tensor without a name (""), outside the index: an outline's (a graph
 * built for its counts and flags only, dm_load_hf_outline). -1 when out of
 * memory. */
int32_t dm_graph_add_unnamed(struct dm_graph *g);
/* Symbol index for `name`, added if new; -1 on OOM. */
int32_t dm_graph_symbol(struct dm_graph *g, const char *name);
/* Building a graph op by op (the front ends other than ONNX). A node is
 * appended with its name (the caller's, arena-owned), its inputs copied and
 * no attributes (dm_graph_attr adds up to DM_NODE_MAX_ATTRS, the array
 * growing by doubling: most nodes have none); its n_out outputs are -1 for the
 * caller to fill. The node array grows in g->node_heap (*cap: its capacity).
 * NULL when out of memory; the pointer is valid until the next node. */
#define DM_NODE_MAX_ATTRS 8

/* The MXNet front end's "mx_mirror" attribute on every node: what
 * need_mirror (graph_executor.cc) says of the MXNet operator it came from
 * (src/train/train.c, "MXNet": mirroring) */
enum {
    DM_MX_MIRROR_NEVER = 0,     /* Dropout; Convolution, FullyConnected, Concat, SoftmaxOutput */
    DM_MX_MIRROR_YES = 1,       /* under MXNET_BACKWARD_DO_MIRROR */
    DM_MX_MIRROR_FORCED = 2,    /* __force_mirroring__: even without it */
    DM_MX_MIRROR_OLD_NEVER = 3, /* BatchNorm, CuDNNBatchNorm: never before MXNet 1.6 */
};
/* A node appended (NULL when out of memory, or when the graph already has
 * g->max_nodes nodes: dm_graph_budget_fail tells which and says so). */
struct dm_node *dm_graph_add_node(struct dm_graph *g, int32_t *cap, enum dm_op op,
                                  const char *name, int n_in, const int32_t *in, int n_out);
/* An attribute appended to node n, growing its array in the arena:
 * DNNMEM_E_INTERNAL when it has DM_NODE_MAX_ATTRS already, DNNMEM_E_NOMEM
 * when out of memory. */
enum dnnmem_status dm_node_attr_add(struct dm_graph *g, struct dm_node *n, struct dm_attr **out);
/* The error of a failed dm_graph_add_node: DNNMEM_E_LIMIT naming the budget
 * when the graph is at g->max_nodes, else DNNMEM_E_NOMEM; the message has
 * no path (the front end prefixes its own). */
enum dnnmem_status dm_graph_add_fail(const struct dm_graph *g, char *msg, size_t cap);
/* An attribute appended to the last node: DNNMEM_E_INTERNAL when it has
 * DM_NODE_MAX_ATTRS already, DNNMEM_E_NOMEM when a copy fails. Names are
 * borrowed (static strings); value arrays are copied into the arena. */
enum dnnmem_status dm_graph_attr(struct dm_graph *g, const char *name, enum dm_attr_kind kind,
                                 struct dm_attr **out);
enum dnnmem_status dm_graph_attr_i(struct dm_graph *g, const char *name, int64_t v);
enum dnnmem_status dm_graph_attr_f(struct dm_graph *g, const char *name, double v);
enum dnnmem_status dm_graph_attr_s(struct dm_graph *g, const char *name, const char *v);
enum dnnmem_status dm_graph_attr_ints(struct dm_graph *g, const char *name, int n,
                                      const int64_t *v);
enum dnnmem_status dm_graph_attr_floats(struct dm_graph *g, const char *name, int n,
                                        const double *v);
/* Sort nodes topologically (stable), set producers, check names.
 * Errors name the file and node: cycles, dangling inputs, two producers. */
enum dnnmem_status dm_graph_finish(struct dm_graph *g, struct dnnmem_error *err);
/* (Re)computes the graph's module scopes (called by dm_graph_finish and
 * after any change to the node list). */
enum dnnmem_status dm_graph_find_scopes(struct dm_graph *g, struct dnnmem_error *err);
/* A node named without a scope (torch.onnx's own "Constant_7"): part of the run around it. */
bool dm_scope_transparent(const struct dm_node *n);

/* Tensor parallelism's plan (src/graph/tp.c, rules T1-T5): split[t] is the
 * dim of parameter t each of the tp ranks holds 1/tp of (-1: whole;
 * DM_TP_SLICE: an activation that is this rank's slice of the features);
 * errors name the node whose pairing is not recognised. */
struct dm_tp_summary {
    int32_t n_col, n_row, n_split;   /* column-, row-parallel linears; split parameters */
    const char *first_col, *first_row;
};
/* role[node]; the _SP roles under --sp (dm_sp_plan): a column-parallel linear
 * that all-gathers its input along the sequence, a row-parallel one that
 * reduce-scatters its output along it */
enum { DM_TP_NONE = 0, DM_TP_COL, DM_TP_ROW, DM_TP_COL_SP, DM_TP_ROW_SP };
/* split[t]: DM_TP_SEQ, an activation split along dim 1 (the sequence) by --sp */
enum { DM_TP_SLICE = -2, DM_TP_SEQ = -3 };
enum dnnmem_status dm_tp_plan(const struct dm_graph *g, int tp, int8_t *split, int8_t *role,
                              struct dm_tp_summary *sum, struct dnnmem_error *err);
/* Sequence parallelism (src/graph/tp.c, S1-S5) over the plan of dm_tp_plan,
 * given the whole shapes t: marks split and role; n_gather counts the
 * column-parallel linears that all-gather. */
struct dm_tinfo;
enum dnnmem_status dm_sp_plan(const struct dm_graph *g, const struct dm_tinfo *t,
                              int8_t *split, int8_t *role, int32_t *n_gather,
                              struct dnnmem_error *err);

const struct dm_attr *dm_node_attr(const struct dm_node *n, const char *name);
/* Lift exporters' decompositions (LayerNorm, GELU) back to the single ops the
 * framework runs (src/graph/lift.c). */
enum dnnmem_status dm_graph_lift(struct dm_graph *g, struct dnnmem_error *err);

/* ---- front ends (src/load) ------------------------------------------------ */

/* The largest model description read, per kind (api.c refuses bigger
 * files before reading them; keras/archive.c a bigger config.json member):
 * JSON (HF config, Keras, MXNet symbol): real ones are at most a few hundred
 * KB (InceptionV3's Keras JSON, tests/models/keras, 154 KB), so 64 MiB is
 * 400 times that; ONNX: a protobuf message is at most 2 GiB (protobuf's
 * limit, so larger ONNX models keep their weights in external data). */
#define DM_MAX_JSON_BYTES ((size_t)64 << 20)
/* The largest tensor taken as real: 1 PiB, beyond any device (an H200 has
 * 141 GB) by ~7000x; a bigger one is an absurd size, refused. */
#define DM_MAX_TENSOR_BYTES (UINT64_C(1) << 50)
#define DM_MAX_ONNX_BYTES ((size_t)2 << 30)
enum dnnmem_status dm_load_onnx(struct dm_graph *g, const uint8_t *data, size_t size,
                                struct dnnmem_error *err);
/* HuggingFace transformers config.json (src/load/hf.c): the causal LM built op
 * by op as transformers' PyTorch implementation runs it, with eager attention
 * or (sdpa) one fused Attention node per layer. */
/* What the HuggingFace builder reads of an estimate's run besides its
 * options: the releases, the GPU and LoRA's alpha, each resolved by its row
 * of the defaults table (src/estimate/estimate.h, DM_DEFAULTS: TORCH,
 * TRANSFORMERS, CC, LORA_ALPHA), never by the builder. */
struct dm_hf_env {
    int torch;         /* major * 100 + minor */
    int transformers;  /* major * 100 + minor */
    int cc;            /* compute capability, major * 10 + minor */
    double lora_alpha; /* the adapters' lora_alpha (the LORA_ALPHA row) */
};
/* opt: the options that change the graph (LoRA adapters, quantized
 * weights, attention, precision, mode, ...) and env the run they are for;
 * both NULL: the graph as loaded, without options (transformers 4.51's,
 * the release every family is written against). */
enum dnnmem_status dm_load_hf(struct dm_graph *g, struct json_t *root, bool sdpa,
                              const struct dnnmem_config *opt, const struct dm_hf_env *env,
                              struct dnnmem_error *err);
/* The outline of dm_load_hf's eager graph without options: the same nodes,
 * tensors, inputs, outputs, weights (named), symbols and flags, but nodes
 * and the activations the graph does not name ("present.0.key") have no
 * names: what loading a model reports and checks (dnnmem_model_get_info,
 * the safetensors headers), for a fraction of the build (naming is most of
 * it). Estimates build the graphs they run (src/estimate/variant.c). */
enum dnnmem_status dm_load_hf_outline(struct dm_graph *g, struct json_t *root,
                                      struct dnnmem_error *err);
/* The JSON front ends take the root of the one parse of the file (src/api.c,
 * load_json: a model file is parsed once, and its top-level keys decide the
 * front end); they read it and never change it. Each dm_is_KIND says whether
 * a root has its kind's keys (docs/untrusted-input.md, "Read once"):
 *   HuggingFace config: model_type, architectures, vocab_size, or n_embd and n_layer
 *   Keras model: class_name (a string) and config, naming a model class or with
 *                keras_version or registered_name
 *   MXNet symbol: nodes, and heads or arg_nodes
 *   capture: format "dnnmem-capture" */
bool dm_is_hf(struct json_t *root);
/* An MXNet symbol JSON (src/load/mxnet.c), every layout from 0.8 to 1.x and
 * Gluon exports. */
enum dnnmem_status dm_load_mxnet(struct dm_graph *g, struct json_t *root,
                                 struct dnnmem_error *err);
bool dm_is_mxnet(struct json_t *root);
/* A captured step (src/load/capture.c, docs/capture-format.md). A text that
 * is not JSON but holds the capture's tag in its first 256 bytes (where
 * dnnmem.torch writes "format") is a capture cut short: dm_capture_tagged
 * chooses the parse error's message, never the front end. */
enum dnnmem_status dm_load_capture(struct dm_graph *g, const struct dm_json *root,
                                   struct dnnmem_error *err);
bool dm_is_capture(struct json_t *root);
bool dm_capture_tagged(const uint8_t *data, size_t size);
/* Keras model JSON (src/load/keras/): model.to_json() of Keras 2 (Model,
 * Functional, Sequential, nested models) and the Keras 3 layout (config.json
 * of a .keras archive), built layer by layer into the IR. */
bool dm_is_keras(struct json_t *root);
enum dnnmem_status dm_load_keras(struct dm_graph *g, struct json_t *root,
                                 struct dnnmem_error *err);
/* A Keras 3 .keras archive (a zip: metadata.json, config.json,
 * model.weights.h5), read with libzip from memory: config.json (capped) is
 * built as dm_load_keras does, metadata.json's keras_version names the
 * producer; the weights are never read. */
enum dnnmem_status dm_load_keras_archive(struct dm_graph *g, const uint8_t *data, size_t size,
                                         struct dnnmem_error *err);
/* The safetensors checkpoint in a HuggingFace model directory, its headers
 * checked against the graph built from config.json (src/load/safetensors.c):
 * every tensor must be a weight of g with the same shape. file is NULL when
 * the directory holds none. */
struct dm_checkpoint {
    const char *file;       /* "model.safetensors" or "model.safetensors.index.json" */
    size_t n_tensors;       /* tensors in the checkpoint */
    size_t n_matched;       /* of them, weights of the graph (shapes checked unless
                               shards_missing) */
    size_t shards_missing;  /* shards the index names that are not in the directory */
    uint64_t bytes;         /* data bytes (the index's total_size when shards are missing) */
    enum dm_dtype dtype;    /* the dtype holding most bytes; DM_UNDEFINED when unknown */
};
enum dnnmem_status dm_check_safetensors(const struct dm_graph *g, const char *dir,
                                        struct dm_checkpoint *ck, struct dnnmem_error *err);

/* Bytes the ONNX front end's protobuf parser allocated for the last parse;
 * tests use it to show weight bytes are never copied. */
struct dm_load_stats {
    size_t file_bytes;
    size_t parsed_bytes;   /* size of the message handed to the generated parser */
    size_t parser_alloc_bytes;
    uint64_t parser_predicted_bytes; /* what the stripper's walk predicted it would */
};
enum dnnmem_status dm_load_onnx_stats(struct dm_graph *g, const uint8_t *data, size_t size,
                                      struct dm_load_stats *st, struct dnnmem_error *err);

/* ---- shape inference (src/shape) ----------------------------------------- */

struct dm_shape {
    int rank;
    int64_t dims[DM_MAX_DIMS];
};

/* The inferred facts about one tensor under one binding of dims. */
struct dm_tinfo {
    enum dm_dtype dtype;
    int rank;                  /* -1: not (yet) inferred */
    int64_t dims[DM_MAX_DIMS];
    int64_t numel;
    uint64_t bytes;            /* numel x element size */
    struct dm_value *value;    /* known value, or NULL */
    bool is_const;             /* depends on no graph input */
    bool absent;               /* an omitted optional output */
};

struct dm_infer {
    const struct dm_graph *g;
    struct dm_arena *arena;    /* values and messages */
    struct dm_tinfo *t;        /* one per graph tensor */
    const int64_t *sym_values; /* one per graph symbol; -1 = unbound */
    struct dm_value *const *input_values; /* optional, per tensor: values fed to inputs */
    const struct dm_shape *input_shapes;  /* optional, per tensor: the shape given to an
                                             input that declares none (rank -1: none) */
    struct dnnmem_error *err;
    const int8_t *split;       /* optional, per tensor: the dim of a weight divided by
                                  split_ranks (tensor parallelism's shard, dm_tp_plan) */
    int split_ranks;
};

/* Bind symbols and infer every tensor. `t` has g->n_tensors entries. */
enum dnnmem_status dm_infer_shapes(struct dm_infer *ctx);

/* Helpers for shape functions (src/shape/infer.c). Errors name the node. */
enum dnnmem_status dm_shape_error(struct dm_infer *ctx, const struct dm_node *n,
                                  enum dnnmem_status s, const char *fmt, ...) DM_PRINTF(4, 5);
/* Input i's info, or NULL when the input is omitted. */
const struct dm_tinfo *dm_in(struct dm_infer *ctx, const struct dm_node *n, int i);
bool dm_has_in(const struct dm_node *n, int i);
bool dm_has_out(const struct dm_node *n, int i);
/* Set output i (ignored when the output is omitted). Checks dims >= 0 and
 * that numel and bytes do not overflow. */
enum dnnmem_status dm_set_out(struct dm_infer *ctx, const struct dm_node *n, int i,
                              enum dm_dtype dtype, int rank, const int64_t *dims);
/* Attach a value to output i (already set with dm_set_out; v->n must equal
 * its numel). Values of tensors above DM_VALUE_MAX_ELEMS are dropped. */
enum dnnmem_status dm_set_out_value(struct dm_infer *ctx, const struct dm_node *n, int i,
                                    struct dm_value *v);
/* Read input i's value as integers (a float value must be integral) or as
 * doubles. The value must be known: an input whose value sets an output's
 * shape but is computed at run time is an "unsupported" error naming it. */
enum dnnmem_status dm_in_ints(struct dm_infer *ctx, const struct dm_node *n, int i,
                              const int64_t **v, int64_t *count);
enum dnnmem_status dm_in_floats(struct dm_infer *ctx, const struct dm_node *n, int i,
                                const double **v, int64_t *count);
/* A fresh value of n elements for output i (ints unless is_float), to fill and
 * then attach with dm_set_out_value; NULL on OOM. */
struct dm_value *dm_value_new(struct dm_infer *ctx, int64_t n, bool is_float);
/* Attribute accessors with defaults. */
int64_t dm_attr_int(const struct dm_node *n, const char *name, int64_t dflt);
double dm_attr_float(const struct dm_node *n, const char *name, double dflt);
const char *dm_attr_str(const struct dm_node *n, const char *name, const char *dflt);
/* INTS attribute: *count = -1 when absent. */
const int64_t *dm_attr_ints(const struct dm_node *n, const char *name, int64_t *count);
/* Normalize an axis into [0, rank); error when out of range. */
enum dnnmem_status dm_axis(struct dm_infer *ctx, const struct dm_node *n, int64_t axis, int rank,
                           int *out);
/* Multidirectional (numpy) broadcasting of two shapes. */
enum dnnmem_status dm_broadcast(struct dm_infer *ctx, const struct dm_node *n, int ra,
                                const int64_t *a, int rb, const int64_t *b, int *rout,
                                int64_t *out);

/* Shape functions, one per row family of ops.def. */
#define DM_OP(name, shape_fn, flags, meta_inputs, train)                                          \
    enum dnnmem_status shape_fn(struct dm_infer *ctx, const struct dm_node *n);
#define DM_OP_MS DM_OP
#include "graph/ops.def"
#undef DM_OP
#undef DM_OP_MS

/* ---- schedule (src/schedule, src/train) ------------------------------------ */

/* What PyTorch eager asks its allocator for, in execution order: a list of
 * buffers (each one device allocation) and of events allocating or freeing
 * them, each at a step (phase, node, iteration). */
enum dm_ev_kind { DM_EV_ALLOC, DM_EV_FREE };
enum dm_phase { DM_PHASE_SETUP, DM_PHASE_FORWARD, DM_PHASE_LOSS, DM_PHASE_BACKWARD,
                DM_PHASE_OPTIMIZER, DM_PHASE_ZERO_GRAD, DM_PHASE_DECODE };
const char *dm_phase_name(enum dm_phase p);

struct dm_buffer {
    uint64_t bytes;      /* requested bytes */
    int32_t tensor;      /* the graph tensor it holds or belongs to, or -1 */
    int32_t node;        /* the node that made it, or -1 */
    uint8_t category;    /* enum dnnmem_category */
    uint8_t dtype;       /* enum dm_dtype */
    const char *what;    /* static: NULL for a graph tensor, else "grad", "mask", "exp_avg", ... */
};
/* What a step outside the graph's ops runs, when it is the loss (the
 * result names it at a peak there): its forward, or its backward, which
 * hands the outputs their grads (src/train/loss.c). */
enum dm_step_loss { DM_STEP_NOT_LOSS, DM_STEP_LOSS, DM_STEP_LOSS_BACKWARD };
struct dm_step {
    uint8_t phase;       /* enum dm_phase */
    uint8_t loss;        /* enum dm_step_loss */
    int16_t iteration;   /* 1-based */
    int32_t node;        /* -1 outside ops */
};
struct dm_event {
    uint8_t kind;        /* enum dm_ev_kind */
    int32_t buf;
    int32_t step;
};
struct dm_schedule {     /* arrays malloc'd */
    struct dm_buffer *buf;
    int32_t n_buf, cap_buf;
    struct dm_event *ev;
    size_t n_ev, cap_ev;
    struct dm_step *steps;
    int32_t n_steps, cap_steps;
    struct dm_refusal refusal; /* what the builder refused (it failed there) */
    bool par_uneven;           /* the ranks differ: FSDP, a sharded dim 0 the shard group does
                                  not divide (src/train/parallel.c, F1); ZeRO 1/2, the whole
                                  parameters a partition touches (Z2) */
    int32_t par_other_rank;    /* then the rank estimated besides the first (FSDP: the shard
                                  group's last; ZeRO: the one with the most), -1: set by the api */
    size_t measure_from;       /* the events before it are TensorFlow's build history
                                  (src/schedule/tfbuild.c): the peak counts from it, as
                                  get_memory_info after reset_memory_stats; 0: all */
    int32_t micro_left_out;    /* micro-steps left out, repeating the one before
                                  (src/schedule/fixpoint.c) */
};
/* Record what the schedule's builder refuses; DNNMEM_E_INTERNAL until the
 * estimate's check table gives the error (src/estimate/check.c). */
enum dnnmem_status dm_refuse(struct dm_schedule *s, enum dm_refusal_kind kind, const char *name,
                             const char *why, struct dnnmem_error *err);
void dm_schedule_free(struct dm_schedule *s);

/* A captured step (docs/capture-format.md): one buffer per storage (its
 * tensor the storage's graph tensor), the events in the order they were
 * observed, one step per entry of the file (its node, when an op, the
 * graph's). Arena-owned by the graph. */
/* A convolution as PyTorch's CPU kernel choice reads it (the rules:
 * src/schedule/cpuconv.c; from an ONNX Conv in workspace.c, from a captured
 * step's "conv" in src/load/capture.c). */
struct dm_cpu_conv {
    struct dm_tinfo x, w, y; /* input, weight, output (dtype, rank, dims, numel, bytes);
                                y.rank <= 0: the output is not known */
    int64_t groups;
    bool transposed;         /* a transposed conv: none of these rules */
    bool strided, dilated;   /* a stride, a dilation other than 1 */
    bool depth_padded;       /* a 3-D conv padded in depth (ONNX pads; false when not known) */
    bool bias;               /* forward: a bias; backward: its grad is made */
    bool chlast;             /* channels-last: input or weight suggest_memory_format() */
    bool w_chlast;           /* the weight is channels-last itself: .contiguous() copies none */
    uint64_t cl_copy;        /* backward: the bytes of its grad_output.contiguous(format)
                                copy, a grad_output not dense in the conv's format (0:
                                none; a capture sets it for channels-last convs only) */
    /* the geometry per spatial dim (depth, height, width of the last
     * x.rank - 2): stride, dilation (1: none) and the padding before;
     * geom false: not known (none of the rules that read it apply) */
    bool geom;
    int64_t stride[3], dilation[3], pad[3];
};

/* A captured convolution's facts (a step's "conv"): the conv, and for
 * aten.convolution_backward which grads it made (output_mask: grad_input,
 * grad_weight, grad_bias). */
struct dm_capture_conv {
    struct dm_cpu_conv cv;
    bool backward;
    bool output_mask[3];
    const struct dm_poly *poly[3]; /* input, weight, output: per dim (rank of each), or NULL
                                      when none of its dims is a function of the capture's dims */
};
/* A size as a function of a capture's dims (format 2, dnnmem.dims): the sum
 * of terms coef * dim_0^exp[0] * dim_1^exp[1] ...; no terms: the size is the
 * captured one whatever the dims. */
#define DM_CAPTURE_DIMS 4
#define DM_POLY_TERMS 32
struct dm_poly_term {
    int64_t coef;
    uint8_t exp[DM_CAPTURE_DIMS];
};
struct dm_poly {
    const struct dm_poly_term *t;
    int32_t n;
};
/* The poly at the dims' values (one per capture dim): false when it
 * overflows or leaves [0, limit]. */
/* The least value of a dim (NULL: the batch) that the graph's sizes hold
 * for: a captured step's "min", else 1. */
int64_t dm_dim_least(const struct dm_graph *g, const char *dim);
bool dm_poly_eval(const struct dm_poly *p, const int64_t *at, int n_dims, int64_t limit, int64_t *out);
/* A dim the capture's sizes are functions of: its name, the value captured
 * and the least value its sizes hold for. */
struct dm_capture_dim {
    const char *name;
    int64_t value, min;
};
struct dm_capture {
    const struct dm_capture_conv **conv; /* per step, or NULL */
    struct dm_buffer *buf;
    bool *host;           /* per buffer: a host tensor while the model ran on meta */
    int32_t n_buf;
    struct dm_event *ev;
    size_t n_ev;
    struct dm_step *steps;
    int32_t *accum_old;   /* per step: the buffer autograd's engine would add into in place
                             (a step marked "accumulate": its first input), or -1 */
    int32_t n_steps;
    bool train;
    int iterations;
    int grad_accum;       /* micro-batches per optimizer step (1: none) */
    bool grad_scaler;     /* torch.amp.GradScaler ran, the gradients assumed finite */
    int32_t sdpa_cpu;     /* F.scaled_dot_product_attention calls run as the CPU's kernel */
    int32_t rnn_modules;  /* nn.RNN/LSTM/GRU modules of the model (run as cells on meta) */
    int64_t batch;        /* the batch captured, 0 = unstated */
    struct dm_capture_dim dims[DM_CAPTURE_DIMS]; /* what the sizes are functions of */
    int n_dims;
    struct dm_poly *bytes_poly;         /* per buffer (n_buf), or NULL without dims */
    const struct dm_poly **shape_poly;  /* per buffer: per dim of its shape, or NULL */
    const char *optimizer, *model; /* as the capture names them, or NULL */
    const char *torch;    /* the torch release that ran it ("2.13.0+cpu"), or NULL */
};
/* The op name a result prints for node i: a capture's aten op, else the op table's. */
static inline const char *dm_node_op_name(const struct dm_graph *g, int32_t i)
{
    return g->op_names ? g->op_names[i] : dm_ops[g->nodes[i].op].name;
}
/* "conv1.weight", "conv1.weight.grad", "/layer1/Relu_output_0", "bn1.save_mean". */
const char *dm_buffer_name(const struct dm_graph *g, const struct dm_buffer *b, char *buf,
                           size_t cap);

/* The settings of one simulated run, resolved from the public config. */
/* Data parallelism (src/train/parallel.c; docs/parallel.md): how this rank's
 * step differs from one process's. */
enum dm_par_kind { DM_PAR_NONE = 0, DM_PAR_DDP, DM_PAR_ZERO, DM_PAR_FSDP };
struct dm_par {
    enum dm_par_kind kind;
    int world, rank;          /* data-parallel ranks and this one */
    int tp;                   /* tensor-parallel ranks (0 or 1: none; src/graph/tp.c) */
    bool sp;                  /* tp > 1: sequence parallel (dm_sp_plan) */
    const int8_t *tp_role;    /* per node: DM_TP_COL, DM_TP_ROW (shapes.c, from the plan) */
    int pp, stage;            /* pipeline stages and this rank's (src/estimate/pipeline.c) */
    int micro;                /* pp: micro-batches per step */
    bool gpipe;               /* pp: ScheduleGPipe (else 1F1B) */
    const char *split;        /* pp: --pp-split, or NULL (even) */
    const bool *recv;         /* pp: per tensor, an input received from the stage before */
    int shard, shard_rank;    /* the group a parameter is sharded over and the rank in it */
    int zero;                 /* ZeRO stage (kind ZERO) */
    bool offload_optimizer, offload_params;
    bool reshard;             /* FSDP reshard_after_forward */
    const char *wrap;         /* FSDP unit glob, NULL: the repeated blocks' (wrap_specs) */
    char wrap_specs[4][160];
    int n_wrap;
    uint64_t ddp_bucket_bytes, ddp_first_bucket_bytes;
    bool ddp_bucket_view;
    int64_t zero_bucket, zero_prefetch, zero_persist;
    int64_t zero_reuse;       /* ZeRO-3 stage3_max_reuse_distance, elements */
};

/* Gradient accumulation's repeated micro-steps (src/schedule/fixpoint.c):
 * when on, the schedule builder replays each micro-step through the
 * allocators the estimate will replay it through, and once a micro-step's
 * events and the allocators' state after it repeat the previous one's, it
 * builds the last micro-step next: the ones between would repeat it. Set by
 * dm_est_schedule from dnnmem_config.accum_fixed_point. */
struct dm_fp_opts {
    bool on;
    bool caching;     /* the estimate's allocator: PyTorch's caching one, else a rounding */
    uint64_t round;   /* the rounding's multiple */
    uint64_t capped;  /* also the caching allocator capped at this (the verdict's replay,
                         src/estimate/replay.c decide); 0: none */
};

struct dm_run {
    struct dm_par par;
    struct dm_fp_opts fp;
    bool train;
    bool cuda;
    bool inplace;            /* activations in place where PyTorch allows */
    int torch_version;       /* 113, 200, ... */
    int iterations, grad_accum;
    bool keep_outputs;       /* the previous step's outputs live through the next forward
                                (dnnmem_config.keep_outputs) */
    enum dnnmem_optimizer optimizer;
    enum dnnmem_loss loss;
    bool loss_all_outputs;
    const char *const *freeze;  /* glob patterns of frozen parameters */
    size_t n_freeze;
    const char *const *checkpoint; /* segment specs (include/dnnmem.h) */
    size_t n_checkpoint;
    uint64_t cublas_workspace;  /* per handle; 0 = none (CPU) */
    uint64_t conv_workspace;    /* per convolution call */
    int cpu_threads;            /* torch.get_num_threads() on the CPU; 0 = several */
    enum dnnmem_cpu_isa cpu_isa; /* oneDNN's kernels' ISA on the CPU */
    int64_t cpu_l2;              /* per-core L2 bytes (--cpu-l2) */
    enum dm_dtype amp;          /* autocast's low type (fp16/bf16), or DM_UNDEFINED */
    int compute_capability;     /* the GPU's, major * 10 + minor; 0 = 80 */
    bool tf_ops;                /* TensorFlow's per-op rules (src/train/train.c): Dropout's
                                   float mask, fused BatchNorm's NHWC transposes, Keras 2's
                                   fused LayerNormalization */
    bool tf_build;              /* TensorFlow on the CPU with a Keras 3 model: the setup
                                   replays the variables' making (src/schedule/tfbuild.c) */
    bool tf_graph;              /* tf_ops under tf.function (--tf-execution graph): buffer
                                   forwarding, the pruned gradient graph, Grappler's layout */
    bool tf_nhwc;               /* tf_graph: Grappler's layout optimizer keeps the GPU graph
                                   NHWC (fp16/bf16 convolutions on tensor cores), so Keras 2's
                                   fused BatchNorm still transposes around cuDNN */
    int64_t gen_tokens;         /* generation: decode steps after the prefill; 0 = none */
    enum dnnmem_kv_dtype kv_dtype;
    int64_t gen_beams;          /* generation: beam search's num_beams (> 1), else 1; the
                                   graph's batch is then the caller's times it */
    bool gen_sample;            /* generation: do_sample (the logits warpers below) */
    int64_t gen_top_k;          /* TopKLogitsWarper's k, 0 = none */
    bool gen_top_p;             /* a TopPLogitsWarper (top_p < 1) */
    bool gen_temperature;       /* a TemperatureLogitsWarper (temperature != 1) */
    bool xla;                   /* JAX's jit (dataflow too): XLA's lowering of the step's ops
                                   (src/train/train.c: the VJP residuals XLA keeps; the
                                   schedule's cuBLAS workspace per call) */
    uint64_t xla_gemm_workspace; /* xla: the scratch output of each cuBLAS call, inside the
                                    temp buffer (GemmConfig::kHopperWorkspace...); 0 = none */
    bool mx_ops;                /* MXNet's per-op backward rules (src/train/train.c, "MXNet"):
                                   what each op's FGradient reads, SoftmaxOutput-style loss
                                   heads, gradient aggregation (ElementWiseSum, kAddTo) */
    int mx_version;             /* mx_ops: MXNet major * 100 + minor (default 109, 1.9) */
    int mx_grad_sum_cap;        /* mx_ops: MXNET_EXEC_INPLACE_GRAD_SUM_CAP (8): from this many
                                   contributions a tensor's grads are summed in place (kAddTo) */
    bool mx_mirror;             /* mx_ops: MXNET_BACKWARD_DO_MIRROR=1 (src/train/train.c,
                                   "MXNet": mirroring) */
    bool dataflow;              /* a traced, compiled program (JAX's jit, src/schedule/xla.c):
                                   a value dies at its last reader, no Python variable
                                   holds one (module arguments and locals), and in training
                                   the caller keeps no outputs once the loss is made */
};

/* MXNet (src/train/train.c, mx_rules): the MXNet operator(s) whose backward
 * rule applies to IR op `op` under --framework mxnet, or NULL (PyTorch's). */
const char *dm_mx_rule_name(enum dm_op op);

/* TensorFlow under tf.function on a GPU (src/train/train.c): whether
 * Grappler's layout optimizer keeps the graph NHWC rather than turning it
 * NCHW (generic_layout_optimizer.cc, GetSrcAndDstDataFormats). */
bool dm_tf_layout_nhwc(const struct dm_graph *g, const struct dm_tinfo *t, const struct dm_run *run);

/* PyTorch 2.x on CUDA (src/train/train.c): the staging buffer and semaphore
 * bytes (0, 0 when none) gpu_reduce_kernel allocates to sum an [m, n] tensor
 * over its rows (dense, or `expanded` with zero strides) on a GPU of compute
 * capability cc (major * 10 + minor). */
void dm_cuda_sum_rows_buffers(int64_t m, int64_t n, bool expanded, int cc, uint64_t *buf,
                              uint64_t *sem);

/* Build the schedule of a run: inference under torch.no_grad() with
 * model.eval(), or training steps. */
enum dnnmem_status dm_schedule_build(const struct dm_graph *g, const struct dm_tinfo *t,
                                     const struct dm_run *run, struct dm_schedule *s,
                                     struct dnnmem_error *err);

/* MXNet's symbolic executor (src/schedule/mxplan.c): the eager schedule `in`
 * re-planned as nnvm's PlanMemory and the graph executor do it: the buffers of
 * the first forward (and its backward) assigned to storages (free list keyed
 * by size, `match_range` 0 = NNVM_EXEC_MATCH_RANGE's 16, in place where the
 * op allows), each storage allocated once and never freed; weights, inputs,
 * gradients and optimizer state allocated once and kept; later iterations'
 * other buffers dropped (they reuse the storages). `out` is malloc'd. */
struct dm_mxplan_stats {
    int32_t entries;        /* buffers planned */
    int32_t storages;       /* storages made */
    int32_t inplace;        /* entries written in place */
    uint64_t storage_bytes; /* the storages' bytes, as allocated (4-byte words) */
};
enum dnnmem_status dm_mxnet_plan(const struct dm_graph *g, const struct dm_schedule *in,
                                 uint64_t match_range, struct dm_schedule *out,
                                 struct dm_mxplan_stats *stats, struct dnnmem_error *err);
/* Module.bind's own copy of every parameter and auxiliary state (its
 * _arg_params and _aux_params, zeros on the default context, the CPU):
 * device memory when the executor runs on the CPU. Added to `s` before its
 * first event, kept; the bytes added in *bytes. With them, init_params'
 * transient astype copy of each (mxplan.c, rule 8), all live at once. */
enum dnnmem_status dm_mxnet_module_copies(const struct dm_graph *g, const struct dm_tinfo *t,
                                          struct dm_schedule *s, uint64_t *bytes,
                                          struct dnnmem_error *err);
/* The executor's kTempSpace on the CPU (MXNet's own kernels): grown to the
 * largest im2col column buffer a Convolution asks and kept (mxplan.c, rule
 * 9). Added to `s` before its first event; its bytes in *bytes (0: none). */
enum dnnmem_status dm_mxnet_cpu_temp(const struct dm_graph *g, const struct dm_tinfo *t,
                                     struct dm_schedule *s, uint64_t *bytes,
                                     struct dnnmem_error *err);

/* Automatic mixed precision (src/train/amp.c): retype activations as
 * torch.autocast runs them, and the type input k of node n is cast to
 * (DM_UNDEFINED: none). */
void dm_amp_retype(const struct dm_graph *g, struct dm_tinfo *t, enum dm_dtype low);
enum dm_dtype dm_amp_cast(const struct dm_graph *g, const struct dm_tinfo *t,
                          const struct dm_node *n, int k, enum dm_dtype low);

/* ---- allocator simulation (src/alloc) ------------------------------------ */

struct dm_alloc_stats {
    uint64_t allocated, peak_allocated; /* bytes handed out (torch memory_allocated) */
    uint64_t reserved, peak_reserved;   /* bytes obtained from the device */
    /* Kept by the caching simulator (src/alloc/caching.c); 0 from the others. */
    uint64_t requested, peak_requested; /* bytes callers asked for (torch requested_bytes) */
    uint64_t inactive_split, peak_inactive_split; /* free pieces of split segments
                                                     (torch inactive_split_bytes) */
    uint64_t segments, peak_segments;   /* cudaMalloc'd segments held (torch segment.all) */
    uint64_t num_alloc_retries;         /* torch num_alloc_retries */
    uint64_t num_ooms;                  /* requests that did not fit (torch num_ooms) */
    uint64_t oom_alloc_size;            /* device bytes the last failed request tried to get
                                           ("Tried to allocate" of torch's OOM message) */
};

/* A simulated device allocator. Handles are opaque to the caller. */
struct dm_allocator {
    const char *name;
    void *self;
    /* Serve a request of `bytes`; *granted is what the block holds. */
    enum dnnmem_status (*alloc)(void *self, uint64_t bytes, uint64_t *handle, uint64_t *granted);
    void (*free)(void *self, uint64_t handle);
    void (*stats)(const void *self, struct dm_alloc_stats *st);
    void (*destroy)(void *self);
};

/* Every request rounded up to a multiple of `round` (PyTorch's 512 B), no
 * caching effects: allocated == reserved. */
enum dnnmem_status dm_alloc_rounding_new(uint64_t round, struct dm_allocator *a);

/* PyTorch's CUDA caching allocator (native backend), one stream, no CUDA
 * graphs (src/alloc/caching.c states the rules and their sources). */
struct dm_caching_opts {
    uint64_t capacity;       /* bytes the device lets the allocator reserve; 0 = unlimited */
    bool capacity_is_fraction; /* capacity is set_per_process_memory_fraction's cap: the only
                                  case where garbage collection runs */
    uint64_t max_split_size; /* max_split_size_mb in bytes; UINT64_MAX = unlimited (default) */
    uint64_t max_non_split_rounding; /* max_non_split_rounding_mb in bytes (20 MiB) */
    unsigned roundup_power2[16]; /* roundup_power2_divisions per band [2^(20+i), 2^(21+i)),
                                    band 0 also below 1 MiB; 0 or a power of two */
    bool expandable_segments;
    double gc_threshold;     /* garbage_collection_threshold, [0, 1); 0 = off */
};
/* PyTorch's defaults: unlimited, no rounding bands, no GC, no expandable. */
void dm_caching_opts_init(struct dm_caching_opts *o);
/* The 1.13 single-integer roundup_power2_divisions: d for every band. */
void dm_caching_opts_divisions(struct dm_caching_opts *o, unsigned d);
/* DNNMEM_E_USAGE for options PyTorch would reject. */
enum dnnmem_status dm_alloc_caching_new(const struct dm_caching_opts *o, struct dm_allocator *a);
/* alloc() returns DNNMEM_E_DEVICE_OOM when the request does not fit in
 * capacity even after releasing cached memory (torch.cuda.OutOfMemoryError);
 * stats.num_ooms counts them. */
/* The block size PyTorch's round_size gives a request of `bytes`. */
uint64_t dm_caching_round_size(const struct dm_caching_opts *o, uint64_t bytes);
/* torch.cuda.empty_cache() and torch.cuda.reset_peak_memory_stats(); no-ops on
 * other allocators. */
void dm_caching_empty_cache(struct dm_allocator *a);
void dm_caching_reset_peaks(struct dm_allocator *a);
/* Blocks in address order, like torch.cuda.memory_snapshot(); returns how many
 * there are (fills at most cap). */
struct dm_caching_block {
    uint64_t addr, size, requested;
    bool allocated, small, expandable, mapped;
    bool segment_start; /* first block of its segment */
};
size_t dm_caching_snapshot(const struct dm_allocator *a, struct dm_caching_block *out, size_t cap);
/* The address of the block behind a handle, and the next segment's address
 * (0 for another allocator or a dead handle). */
uint64_t dm_caching_block_addr(const struct dm_allocator *a, uint64_t handle);
uint64_t dm_caching_next_addr(const struct dm_allocator *a);

/* TensorFlow's BFC allocator (GPU), shared by XLA and JAX (src/alloc/bfc.c
 * states the rules and their sources). */
struct dm_bfc_opts {
    uint64_t limit;           /* memory_limit: bytes the regions may total; 0 = unlimited */
    bool allow_growth;        /* false (TF's default): the first region is the whole limit */
    bool garbage_collection;  /* return free regions before failing (default true) */
    uint64_t growth_first_region;        /* first region under allow_growth (2 MiB) */
    uint64_t max_internal_fragmentation; /* split when the slack reaches it (128 MiB) */
};
/* TF's defaults: unlimited, no growth, garbage collection on. */
void dm_bfc_opts_init(struct dm_bfc_opts *o);
/* DNNMEM_E_USAGE for zero sizes or a limit above 1 PiB. alloc() returns
 * DNNMEM_E_DEVICE_OOM when the limit leaves no room (stats.num_ooms). */
enum dnnmem_status dm_alloc_bfc_new(const struct dm_bfc_opts *o, struct dm_allocator *a);
uint64_t dm_bfc_round(uint64_t bytes); /* RoundedBytes: up to a multiple of 256 */
int dm_bfc_bin(uint64_t size);         /* BinNumForSize: 0..20 */
/* Chunks in region order, then address order; returns how many (fills at
 * most cap). */
struct dm_bfc_chunk {
    uint64_t addr, size, requested;
    int region;
    bool in_use;
};
size_t dm_bfc_snapshot(const struct dm_allocator *a, struct dm_bfc_chunk *out, size_t cap);

/* MXNet's GPU pooled storage manager (src/alloc/pool.c states the rules). */
enum dm_pool_strategy { DM_POOL_NAIVE = 0, DM_POOL_ROUND };
struct dm_pool_opts {
    enum dm_pool_strategy strategy; /* MXNET_GPU_MEM_POOL_TYPE: Naive (default) or Round */
    uint64_t page_size;             /* MXNET_GPU_MEM_POOL_PAGE_SIZE (4096) */
    uint64_t large_alloc_round;     /* MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE (2 MiB) */
    int round_linear_cutoff;        /* MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF (24) */
    int reserve_percent;            /* MXNET_GPU_MEM_POOL_RESERVE (5) */
    uint64_t capacity;              /* device memory free to the pool at start; 0 = unlimited */
    uint64_t total;                 /* device total, the base of the reserve; 0 = capacity */
};
void dm_pool_opts_init(struct dm_pool_opts *o);
/* DNNMEM_E_USAGE for options MXNet rejects. */
enum dnnmem_status dm_alloc_pool_new(const struct dm_pool_opts *o, struct dm_allocator *a);
uint64_t dm_pool_round(const struct dm_pool_opts *o, uint64_t bytes);

/* XLA's heap simulator (src/alloc/heap.c states the rules and their
 * sources): the values of a compiled module packed into one buffer at
 * compile time. A value (or a group of values sharing one buffer) lives over
 * the closed interval [start, end] of logical time (one tick per Alloc, Free
 * or ShareWith call); own_end is the end of the group's first member (the
 * spatial order's duration), end for an ungrouped value; id breaks ties
 * (ascending). `offset` is the result. */
struct dm_heap_buf {
    uint64_t size;
    int64_t start, end, own_end;
    int32_t id;
    uint64_t offset;
};
enum dm_heap_order {
    DM_HEAP_SPATIAL,  /* size descending, then duration, then id */
    DM_HEAP_TEMPORAL  /* duration descending, then size, then id */
};
/* GlobalDecreasingSizeBestFitHeap in one order: offsets into b, the heap's
 * size into *heap_size. DNNMEM_E_USAGE for a zero alignment or an interval
 * that ends before it starts. */
enum dnnmem_status dm_heap_fit(struct dm_heap_buf *b, size_t n, uint64_t alignment,
                               enum dm_heap_order order, uint64_t *heap_size);
/* ChooseBestHeapAlgorithm over both orders: the smaller heap (spatial on a
 * tie), its offsets left in b. */
struct dm_heap_result {
    uint64_t heap_bytes, spatial_bytes, temporal_bytes;
    enum dm_heap_order chosen;
};
enum dnnmem_status dm_heap_choose_best(struct dm_heap_buf *b, size_t n, uint64_t alignment,
                                       struct dm_heap_result *r);

/* JAX's jitted step (src/schedule/xla.c states the rules and their
 * sources): the dataflow schedule `in` (built with run->dataflow) of one
 * step compiled as XLA does it: elementwise values with one elementwise or
 * reducing reader fused away, values sharing a dying operand's buffer, the
 * rest packed by the heap simulator into one temp buffer per call; entry
 * parameters (weights, inputs, optimizer state) made before the first call;
 * the step's outputs (training: new parameters and state unless donated;
 * inference: the graph outputs) live-out buffers of each call. The first
 * step's window is planned and repeated for every iteration of `in`. `out`
 * is malloc'd. */
struct dm_xla_opts {
    bool train;
    bool donate;         /* donate_argnums over the parameters and optimizer state */
    uint64_t alignment;  /* heap chunk alignment; 0 = the backend's (128 GPU, 64 CPU) */
    bool cpu;            /* XLA's CPU backend (--device cpu): its copy insertion (rule 7) */
    int64_t *offsets;    /* optional, one per buffer of `in`: its offset in the temp
                            buffer, or one of the DM_XLA_* below */
};
/* GemmConfig::kHopperWorkspace and kDefaultWorkspace (xla/service/gpu/
 * matmul_utils.h): the workspace XLA gives each cuBLAS call, on sm90+ and
 * before; --cublas-workspace overrides it under jit. */
#define DM_XLA_GEMM_WORKSPACE_HOPPER (32ull << 20)
#define DM_XLA_GEMM_WORKSPACE_DEFAULT (4ull << 20)
#define DM_XLA_FUSED (-1)    /* fused into its reader: no buffer */
#define DM_XLA_NOT_TEMP (-2) /* not a temporary of the step (entry, output, other) */
#define DM_XLA_EMPTY (-3)    /* a temporary of 0 bytes */
#define DM_XLA_IN_OUTPUT (-4) /* held by a live-out allocation before its value is made */
struct dm_xla_stats {
    int32_t values;         /* values of the step (temporaries before fusion) */
    int32_t fused_forward;  /* fused into their only reader in the forward */
    int32_t fused_backward; /* activations' gradients fused in the backward */
    int32_t fused_update;   /* the optimizer update's temporaries */
    int32_t shared;         /* values that took a dying operand's buffer */
    int32_t in_outputs;     /* groups held by live-out allocations (rule 6) */
    int32_t copies;         /* donated parameters copied at the step's start (rule 7) */
    uint64_t copy_bytes;    /* their bytes */
    int32_t layouts;        /* the CPU's layout values: transposes, pooling indices (rule 8) */
    uint64_t layout_bytes;  /* their bytes */
    int32_t heap_values;    /* buffers (groups of sharing values) the heap placed */
    struct dm_heap_result heap; /* the temp buffer: heap_bytes */
    uint64_t live_peak;     /* the most bytes live at once in it (no fragmentation) */
    int32_t peak_step;      /* the input step where they peak, -1: none */
    uint64_t peak_bytes[DNNMEM_CAT_COUNT]; /* those bytes by the values' categories */
    uint64_t entry_bytes;   /* entry parameters */
    int32_t outputs;        /* live-out buffers made per call */
    uint64_t output_bytes;
};
enum dnnmem_status dm_xla_plan(const struct dm_graph *g, const struct dm_tinfo *t,
                               const struct dm_schedule *in, const struct dm_xla_opts *o,
                               struct dm_schedule *out, struct dm_xla_stats *st,
                               struct dnnmem_error *err);

/* ---- results (src/report/result.c) -------------------------------------- */

/* Replay a schedule through an allocator and build the public result. The
 * assumptions are copied. */
enum dnnmem_status dm_result_build(const struct dm_graph *g, const struct dm_tinfo *t,
                                   const struct dm_schedule *s, struct dm_allocator *a,
                                   const struct dnnmem_config *cfg, uint64_t context_bytes,
                                   const struct dnnmem_assumption *assumptions, size_t n_assumptions,
                                   struct dnnmem_result **out, struct dnnmem_error *err);

/* The result's bytes at the peak by module scope at `depth` (r->modules;
 * src/report/modules.c), from the buffers alive at the peak, in the
 * result's arena; false when out of memory. */
bool dm_result_modules(const struct dm_graph *g, const struct dm_schedule *s, const bool *alive,
                       int depth, struct dm_arena *ar, struct dnnmem_result *r);

/* Add a warning (copied) to a result (src/report/result.c). */
enum dnnmem_status dm_result_warn(struct dnnmem_result *r, const char *text);
/* dnnmem_estimate (api.c) with `bound` false: without the second estimate
 * that bounds the activations --inplace auto decided (a search's or the
 * advice's probes; dm_estimate_once); dnnmem_estimate is bound true. */
enum dnnmem_status dm_estimate(const dnnmem_model *m, const struct dnnmem_config *cfg, bool bound,
                               struct dnnmem_result **out, struct dnnmem_error *err);
enum dnnmem_status dm_estimate_once(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                    struct dnnmem_result **out, struct dnnmem_error *err);

/* Replay a schedule's events through an allocator only (no result);
 * DNNMEM_E_DEVICE_OOM when a request cannot be served. */
enum dnnmem_status dm_replay(const struct dm_schedule *s, struct dm_allocator *a,
                             struct dm_alloc_stats *st);

/* The graph behind a public model handle (for HuggingFace configs, the one
 * with eager attention and no options, built on first use), and the one with
 * sdpa attention (HuggingFace configs only, built on first use; NULL for
 * other models). */
const struct dm_graph *dm_model_graph(const dnnmem_model *m);
const struct dm_graph *dm_model_graph_sdpa(const dnnmem_model *m);

/* A model's repeated blocks at one scope depth (src/report/blocks.c): the
 * --checkpoint globs of its numbered module families whose members repeat
 * one structure ("/model/layers.*"), how many members and nodes they hold. */
enum { DM_BLOCK_SPEC_LEN = 160, DM_BLOCK_MAX_SPECS = 4 };
struct dm_block_scope {
    int depth;
    int n_specs;
    char spec[DM_BLOCK_MAX_SPECS][DM_BLOCK_SPEC_LEN];
    int32_t blocks;
    int64_t nodes;
};
/* Up to max depths' families, those covering the most nodes first; their count. */
size_t dm_repeated_blocks(const struct dm_graph *g, struct dm_block_scope *out, size_t max);

/* Catalogue names close to an unknown --gpu name, ", "-separated into buf
 * (n bytes): those that hold it, dashes and case aside, else those within
 * two edits (one for a name under 6 characters); their count (src/report/gpus.c). */
size_t dm_gpu_suggest(const char *name, char *buf, size_t n);

/* dnnmem_max_dim, or with tight_ok the largest value that fits at all
 * (the verdict "tight" accepted: no headroom kept; src/report/decide.c). */
enum dnnmem_status dm_max_dim(const dnnmem_model *m, const struct dnnmem_config *cfg,
                              const char *dim, int64_t limit, bool tight_ok, int64_t *value,
                              struct dnnmem_result **at, struct dnnmem_result **next,
                              struct dnnmem_error *err);

/* The arena that owns what a result points to (src/report/result.c). */
struct dm_arena *dm_result_arena(struct dnnmem_result *r);

/* Format bytes with IEC units ("97.49 MiB"); returns buf. */
const char *dm_format_bytes(uint64_t bytes, char buf[32]);

#endif /* DNNMEM_IMPL_H */
