/*
 * hf.c: the HuggingFace front end. A transformers config.json names an
 * architecture and its sizes; this file builds, op by op, the model that
 * transformers' PyTorch implementation runs, into the same graph IR the ONNX
 * front end fills, so every estimate, training, allocator and report feature
 * applies unchanged.
 *
 * What is built: the causal LM (embeddings, decoder layers, final norm,
 * lm_head; the loss is dnnmem's own), at the granularity of the eager PyTorch
 * ops of
 *  - model_type "llama", "mistral", "qwen2", "qwen3": modeling_llama.py and
 *    its copies as of transformers 4.51 (rotary embedding at model level,
 *    eager_attention_forward, the 4-D causal mask of
 *    _prepare_4d_causal_attention_mask_with_cache_position);
 *  - model_type "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2",
 *    "deepseek_v3": the same decoder with mixture-of-experts blocks
 *    (Mixtral's and Qwen's of 4.51, DeepSeek's of the native
 *    modeling_deepseek_v3.py, 4.51-4.57) and, for DeepSeek, multi-head
 *    latent attention; the expert loop under uniform routing (see "mixture
 *    of experts" below);
 *  - model_type "gpt2" (and legacy configs without model_type that name
 *    GPT2LMHeadModel or carry n_embd): modeling_gpt2.py as of 4.47
 *    (GPT2Attention._attn, Conv1D, NewGELUActivation; 4.51's
 *    eager_attention_forward makes the same tensors), generating with
 *    4.51's legacy tuple cache (g->legacy_cache, src/schedule/generate.c);
 * with attn_implementation="eager", called as model(input_ids): no
 * attention_mask, use_cache from the config. The graph has one input,
 * input_ids int64 [batch, seq] (symbolic dims "batch" and "seq", bound by
 * --batch-size and --seq-len), and its first output is the logits
 * [batch, seq, vocab_size]. With use_cache (the transformers default) the
 * model also returns every layer's key and value (a DynamicCache or the
 * presents tuple holds them until the caller lets go of the output): they are
 * outputs "present.N.key" and "present.N.value" after the logits.
 *
 * Also built, each by its own function with its own inputs and outputs:
 * T5ForConditionalGeneration ("t5", "mt5"; modeling_t5.py, 4.46-4.51),
 * inputs input_ids [batch, seq] and decoder_input_ids [batch, target_seq],
 * outputs the logits, the decoder's caches and the encoder's last hidden
 * state; ViTModel / ViTForImageClassification ("vit"; modeling_vit.py,
 * 4.53-4.57), input pixel_values [batch, channels, image, image].
 *
 * Weights are float32 whatever the config's torch_dtype / dtype says: that is
 * the checkpoint's storage type, not the type a job runs in
 * (from_pretrained without torch_dtype loads float32); --precision converts
 * (fp16, bf16, amp-*). A quantized checkpoint (quantization_config, or
 * --quant) stores its linear layers as its method does (see "quantized linear
 * layers" below), and its quantizer sets the default for the rest.
 *
 * Parameters and buffers are exactly those of the PyTorch module, named as
 * its state_dict (model.layers.0.self_attn.q_proj.weight); tied embeddings
 * are one tensor read by both the embedding and lm_head. Non-persistent
 * buffers live on the device too (register_buffer(persistent=False) moves
 * with .to()), so they are weights here: the rotary embedding's inv_freq
 * [head_dim/2] float32 (one, at model level, from 4.45), GPT-2's causal
 * `bias` bool [1, 1, n_positions, n_positions] and `masked_bias` float32 []
 * per layer.
 *
 * Config fields that set weight shapes and have no safe default are required
 * (a missing one is an error naming it); the others take the default of
 * transformers' config class. Node names follow torch.onnx's module scopes
 * ("/model/layers.0/self_attn/q_proj/MatMul"), which the schedule uses for
 * module-argument lifetimes and --checkpoint '/model/layers.*' for segments.
 */
#include "dnnmem-impl.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HF_OPSET 17            /* the ONNX op semantics the nodes use */
#define MAX_LAYERS 4096
#define MAX_SIZE (INT64_C(1) << 31) /* any one size field */
#define REQUIRED INT64_MIN
#define PI 3.14159265358979323846

/* The quantization of a model's linear layers (see "quantized linear
 * layers" below). */
struct quant {
    int method;                /* enum qmethod */
    bool from_config;          /* quantization_config: a prequantized checkpoint */
    bool nf4, double_quant;    /* bitsandbytes 4-bit */
    bool shared_map;           /* double quantization's shared map is made (--quant) */
    enum dm_dtype compute;     /* bnb_4bit_compute_dtype; DM_UNDEFINED: the run's */
    double threshold;          /* bitsandbytes 8-bit llm_int8_threshold */
    int bits;                  /* gptq, awq */
    int64_t group;             /* group_size; -1: one group per column */
    bool desc_act;             /* gptq act-order */
    int kernel;                /* gptq: enum gptq_kernel */
    int64_t max_input;         /* gptq exllama v1 act-order: max_input_length */
    const char *block;         /* gptq block_name_to_quantize, or NULL */
    const char *block_found;   /* gptq: the block the layers are under */
    json_t *in_block;          /* gptq modules_in_block_to_quantize (borrowed), or NULL */
    json_t *skip;              /* modules not converted (borrowed), or NULL: the output layer */
    int64_t block_n, block_k;  /* fp8 weight_block_size */
    int64_t n_layers;          /* linears made quantized */
    int64_t max_dq, max_dim, max_scratch; /* gptq exllama: the largest layer's */
};

struct hf {
    struct dm_graph *g;
    struct dnnmem_error *err;
    const char *path;
    json_t *root;
    enum dnnmem_status st;     /* the first error; later calls do nothing */
    int32_t cap_nodes;
    char scope[256];           /* the module path, "/model/layers.0/self_attn" */
    size_t scope_len;
    const char *out_name;      /* a name for the next node's output 0 */
    bool sdpa;                 /* attn_implementation "sdpa", else "eager" */
    bool flash;                /* "flash_attention_2" (sdpa is set too: no scores) */
    bool gqa_sdpa;             /* sdpa takes grouped keys and values (enable_gqa) where
                                  no mask is passed: transformers >= 4.54, PyTorch >= 2.5 */
    bool half;                 /* the attention computes in fp16/bf16 (--precision or
                                  autocast), else float32 */
    bool half_to_float;        /* fp16 on CUDA: softmax(x, dtype=float32) reads the
                                  fp16 scores directly (see softmax_f32) */
    int cc;                    /* the GPU's compute capability (default 80) */
    int transformers;          /* the release, major * 100 + minor (--transformers) */
    enum dnnmem_sdpa_backend backend; /* --sdpa-backend: the kernel forced, or AUTO */
    bool train;                /* --mode train (inputs require grad) */
    bool bf16;                 /* the attention computes in bf16 */
    int torch;                 /* the PyTorch release, major * 100 + minor */
    bool albert_interface;     /* ALBERT's attention runs the shared eager_attention_forward:
                                  transformers >= 4.54 (PR #38301) */
    bool sdpa_as_is;           /* sdpa_attention_forward passes q, k, v to the kernel as
                                  they are, no .contiguous(): transformers >= 4.56 */
    bool gpt2_cache;           /* GPT-2 takes Cache classes: transformers >= 4.52 */
    bool gpt2_v5;              /* GPT-2 keeps only the last logits: transformers >= 5 */
    bool cache_copy;           /* the cache copies the states it is given (DynamicLayer,
                                  transformers >= 5): see cache_update */
    bool share;                /* param() returns an existing parameter of that name
                                  (ALBERT's layers shared across calls) */
    const struct dnnmem_lora *lora; /* adapters to add, or NULL */
    enum dnnmem_quant opt_quant; /* --quant */
    struct quant q;            /* how linear layers are stored */
    bool last_linear;          /* the next linear is the model's last module (a base
                                  model's pooler): quantizers leave it alone */
    const char *const *lora_targets; /* lora->targets or the architecture's default */
    size_t n_lora_targets;
    size_t *lora_hits;         /* per target: modules adapted (malloc'd) */
    int64_t gen_prompt, gen_tokens; /* --mode generate: the prompt (seq, when given) and the
                                       new tokens; 0 otherwise */
    enum dnnmem_kbit_prep kbit; /* --kbit-prep in training, else NONE */
    bool amp;                  /* --precision amp-*: autocast sets the activations' dtypes */
    bool prep32;               /* prepare_model_for_kbit_training's float32 upcast is in
                                  effect (see "prepare_model_for_kbit_training" below) */
    struct name_slot *names;   /* node names, open addressing (malloc'd) */
    uint32_t names_cap, n_names;
};

static enum dnnmem_status fail(struct hf *h, enum dnnmem_status s, const char *fmt, ...)
    DM_PRINTF(3, 4);
static enum dnnmem_status fail(struct hf *h, enum dnnmem_status s, const char *fmt, ...)
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

static int32_t oom(struct hf *h)
{
    fail(h, DNNMEM_E_NOMEM, "out of memory");
    return -1;
}

/* ---- config fields ------------------------------------------------------------ */

static json_t *field(struct hf *h, const char *key)
{
    json_t *v = json_object_get(h->root, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* A positive integer field; `dflt` when absent or null (REQUIRED: an error). */
static int64_t get_int(struct hf *h, const char *key, int64_t dflt, int64_t max)
{
    json_t *v = field(h, key);
    if (h->st != DNNMEM_OK)
        return 1;
    if (!v) {
        if (dflt == REQUIRED) {
            fail(h, DNNMEM_E_MODEL, "config field '%s' is missing", key);
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
        fail(h, DNNMEM_E_MODEL, "config field '%s' must be an integer", key);
        return 1;
    }
    if (i < 1) {
        fail(h, DNNMEM_E_MODEL, "config field '%s' must be positive, not %lld", key, (long long)i);
        return 1;
    }
    if (i > max) {
        fail(h, DNNMEM_E_UNSUPPORTED, "config field '%s' is %lld; at most %lld is supported", key,
             (long long)i, (long long)max);
        return 1;
    }
    return i;
}

/* A number in [lo, hi]; `dflt` when absent or null. */
static double get_num(struct hf *h, const char *key, double dflt, double lo, double hi)
{
    json_t *v = field(h, key);
    if (h->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_number(v)) {
        fail(h, DNNMEM_E_MODEL, "config field '%s' must be a number", key);
        return dflt;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        fail(h, DNNMEM_E_MODEL, "config field '%s' is %g; it must be in [%g, %g]", key, d, lo, hi);
        return dflt;
    }
    return d;
}

static bool get_bool(struct hf *h, const char *key, bool dflt)
{
    json_t *v = field(h, key);
    if (h->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_boolean(v)) {
        fail(h, DNNMEM_E_MODEL, "config field '%s' must be true or false", key);
        return dflt;
    }
    return json_is_true(v);
}

static const char *get_str(struct hf *h, const char *key, const char *dflt)
{
    json_t *v = field(h, key);
    if (h->st != DNNMEM_OK || !v)
        return dflt;
    if (!json_is_string(v)) {
        fail(h, DNNMEM_E_MODEL, "config field '%s' must be a string", key);
        return dflt;
    }
    return json_string_value(v);
}

/* ---- building the graph ----------------------------------------------------------- */

/* A node name, and for a scope's first node of an op ("scope/Op") the next
 * suffix to try for that op there ("scope/Op_<next>"): a scope with many
 * nodes of one op (a mixture-of-experts block) names each in one probe. */
struct name_slot {
    const char *name;
    int next;
};

/* The slot of `name`: *taken when it is a node name already, else recorded.
 * NULL when out of memory; valid until the next call. */
static struct name_slot *name_slot(struct hf *h, const char *name, bool *taken)
{
    if ((h->n_names + 1) * 2 > h->names_cap) {
        uint32_t cap = h->names_cap ? h->names_cap * 2 : 4096;
        struct name_slot *n = calloc(cap, sizeof *n);
        if (!n)
            return NULL;
        for (uint32_t i = 0; i < h->names_cap; i++)
            if (h->names[i].name) {
                uint32_t j = dm_hash_str(h->names[i].name) & (cap - 1);
                while (n[j].name)
                    j = (j + 1) & (cap - 1);
                n[j] = h->names[i];
            }
        free(h->names);
        h->names = n;
        h->names_cap = cap;
    }
    uint32_t j = dm_hash_str(name) & (h->names_cap - 1);
    for (; h->names[j].name; j = (j + 1) & (h->names_cap - 1))
        if (strcmp(h->names[j].name, name) == 0) {
            *taken = true;
            return &h->names[j];
        }
    *taken = false;
    h->names[j] = (struct name_slot){name, 1};
    h->n_names++;
    return &h->names[j];
}

/* Enter a module: the scope gains "/<name>"; returns what leave() restores. */
static size_t enter(struct hf *h, const char *fmt, ...) DM_PRINTF(2, 3);
static size_t enter(struct hf *h, const char *fmt, ...)
{
    size_t len = h->scope_len;
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(h->scope + len, sizeof h->scope - len, "/");
    int m = vsnprintf(h->scope + len + 1, sizeof h->scope - len - 1, fmt, ap);
    va_end(ap);
    if (k < 0 || m < 0 || len + 1 + (size_t)m >= sizeof h->scope) {
        fail(h, DNNMEM_E_INTERNAL, "module path too long");
        h->scope[len] = '\0';
        return len;
    }
    h->scope_len = len + 1 + (size_t)m;
    return len;
}

static void leave(struct hf *h, size_t len)
{
    h->scope_len = len;
    h->scope[len] = '\0';
}

/* A node of op `op` in the current scope, named "<scope>/<Op>" (then "_1",
 * "_2", ...), its outputs "<node>_output_<k>". NULL after an error. The
 * pointer is valid until the next node is made. */
static struct dm_node *node(struct hf *h, enum dm_op op, int n_in, const int32_t *in, int n_out)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return NULL;
    for (int k = 0; k < n_in; k++)
        if (in[k] < 0) {
            fail(h, DNNMEM_E_INTERNAL, "a node input is missing");
            return NULL;
        }
    /* "scope/Op", else the first free "scope/Op_<k>" (ONNX exporters' names) */
    const char *base = dm_arena_printf(&g->arena, "%s/%s", h->scope, dm_ops[op].name), *name = base;
    bool taken;
    struct name_slot *slot = base ? name_slot(h, base, &taken) : NULL;
    if (!slot) {
        oom(h);
        return NULL;
    }
    if (taken) {
        int k = slot->next;
        for (;; k++) {
            name = dm_arena_printf(&g->arena, "%s_%d", base, k);
            if (!name || !name_slot(h, name, &taken)) {
                oom(h);
                return NULL;
            }
            if (!taken)
                break;
        }
        name_slot(h, base, &taken)->next = k + 1;
    }
    struct dm_node *n = dm_graph_add_node(g, &h->cap_nodes, op, name, n_in, in, n_out);
    if (!n) {
        oom(h);
        return NULL;
    }
    for (int k = 0; k < n_out; k++) {
        const char *tname = k == 0 && h->out_name
                                ? h->out_name
                                : dm_arena_printf(&g->arena, "%s_output_%d", name, k);
        if (!tname) {
            oom(h);
            return NULL;
        }
        if (dm_graph_find(g, tname) >= 0) {
            fail(h, DNNMEM_E_INTERNAL, "two tensors are named '%s'", tname);
            return NULL;
        }
        if ((n->out[k] = dm_graph_add_tensor(g, tname)) < 0) {
            oom(h);
            return NULL;
        }
    }
    h->out_name = NULL;
    /* after prepare_model_for_kbit_training every activation is float32 but
     * the few that qlinear() marks otherwise (see below) */
    for (int k = 0; h->prep32 && k < n_out; k++)
        g->tensors[n->out[k]].keep_fp32 = true;
    return n;
}

/* A node with one output, its inputs as varargs (int32_t tensor ids). */
static int32_t op(struct hf *h, enum dm_op o, int n_in, ...)
{
    int32_t in[8];
    va_list ap;
    va_start(ap, n_in);
    for (int k = 0; k < n_in && k < 8; k++)
        in[k] = (int32_t)va_arg(ap, int);
    va_end(ap);
    struct dm_node *n = node(h, o, n_in < 8 ? n_in : 8, in, 1);
    return n ? n->out[0] : -1;
}

/* The outcome of adding an attribute to the node made last. */
static void attr_status(struct hf *h, enum dnnmem_status s)
{
    if (s == DNNMEM_E_INTERNAL)
        fail(h, s, "node '%s' has too many attributes", h->g->nodes[h->g->n_nodes - 1].name);
    else if (s != DNNMEM_OK)
        oom(h);
}

static struct dm_attr *attr(struct hf *h, const char *name, enum dm_attr_kind kind)
{
    struct dm_attr *a = NULL;
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr(h->g, name, kind, &a));
    return h->st == DNNMEM_OK ? a : NULL;
}

static void attr_i(struct hf *h, const char *name, int64_t v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_i(h->g, name, v));
}

static void attr_f(struct hf *h, const char *name, double v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_f(h->g, name, v));
}

static void attr_s(struct hf *h, const char *name, const char *v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_s(h->g, name, v));
}

static void attr_ints(struct hf *h, const char *name, int n, const int64_t *v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_ints(h->g, name, n, v));
}

static void attr_floats(struct hf *h, const char *name, int n, const double *v)
{
    if (h->st == DNNMEM_OK)
        attr_status(h, dm_graph_attr_floats(h->g, name, n, v));
}

/* Constant nodes: a float or int64 scalar, an int64 or float list. */
static int32_t constant(struct hf *h)
{
    int32_t t = op(h, DM_OP_Constant, 0);
    if (t >= 0)
        h->g->tensors[t].role = DM_ROLE_CONSTANT;
    return t;
}

static int32_t const_f(struct hf *h, double v)
{
    int32_t t = constant(h);
    attr_f(h, "value_float", v);
    return t;
}

static int32_t const_i(struct hf *h, int64_t v)
{
    int32_t t = constant(h);
    attr_i(h, "value_int", v);
    return t;
}

static int32_t const_ints(struct hf *h, int n, const int64_t *v)
{
    int32_t t = constant(h);
    attr_ints(h, "value_ints", n, v);
    return t;
}

#define INTS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

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
static int32_t param_named(struct hf *h, const char *name, enum dm_dtype dtype, int rank,
                           const int64_t *dims)
{
    struct dm_graph *g = h->g;
    int32_t old = dm_graph_find(g, name);
    if (old >= 0 && h->share && g->tensors[old].role == DM_ROLE_WEIGHT)
        return old;
    if (old >= 0) {
        fail(h, DNNMEM_E_INTERNAL, "two weights are named '%s'", name);
        return -1;
    }
    int32_t t = dm_graph_add_tensor(g, name);
    struct dm_dim *d = dm_arena_array(&g->arena, (size_t)rank + 1, sizeof *d);
    if (t < 0 || !d)
        return oom(h);
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
static void module_path(const struct hf *h, char *buf, size_t cap)
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
static int32_t param(struct hf *h, const char *what, enum dm_dtype dtype, int rank,
                     const int64_t *dims)
{
    if (h->st != DNNMEM_OK)
        return -1;
    char path[sizeof h->scope];
    module_path(h, path, sizeof path);
    char *name = dm_arena_printf(&h->g->arena, "%s%s%s", path, path[0] ? "." : "", what);
    if (!name)
        return oom(h);
    return param_named(h, name, dtype, rank, dims);
}

static int32_t dropout(struct hf *h, int32_t x, double p);

/* Whether the current module (the scope's last part) gets a LoRA adapter:
 * a target names it, or "all-linear" and it is not an output layer. */
static bool lora_wanted(struct hf *h)
{
    if (!h->lora || h->st != DNNMEM_OK)
        return false;
    const char *name = strrchr(h->scope, '/');
    name = name ? name + 1 : h->scope;
    bool output = strcmp(name, "lm_head") == 0 || strcmp(name, "decoder") == 0 ||
                  strcmp(name, "vocab_projector") == 0 || strstr(h->scope, "/classifier") ||
                  strcmp(name, "classifier") == 0;
    for (size_t k = 0; k < h->n_lora_targets; k++)
        if (strcmp(h->lora_targets[k], name) == 0 ||
            (strcmp(h->lora_targets[k], "all-linear") == 0 && !output)) {
            h->lora_hits[k]++;
            return true;
        }
    return false;
}

static void keep32(struct hf *h, int32_t t)
{
    if (h->st == DNNMEM_OK && t >= 0)
        h->g->tensors[t].keep_fp32 = true;
}

/* A tensor in the run's 16-bit dtype although prep32 made it float32. */
static void unkeep32(struct hf *h, int32_t t)
{
    if (h->st == DNNMEM_OK && t >= 0)
        h->g->tensors[t].keep_fp32 = false;
}

/* The layer an adapter wraps: PEFT dispatches bitsandbytes' layers to
 * lora.bnb's Linear8bitLt and Linear4bit, whose forward is not lora.Linear's. */
enum lora_base { LB_LINEAR, LB_BNB8, LB_BNB4 };

/* Tensor.clone(): a fresh copy whose backward passes the grad on as it is
 * (CloneBackward0), built as x + 0 (an Add allocates its output and passes
 * its grad through). */
static int32_t clone(struct hf *h, int32_t x)
{
    return op(h, DM_OP_Add, 2, x, const_f(h, 0.0));
}

/* PEFT's LoRA forward around the base layer's output y (huggingface/peft
 * src/peft/tuners/lora/layer.py and bnb.py, v0.14-0.15).
 * lora.Linear: y + lora_B(lora_A(dropout(x.to(float32)))) * scaling, then
 * .to(y's dtype).
 * lora.bnb (bitsandbytes bases): Linear4bit first clones y ("As per Tim
 * Dettmers, for 4bit, we need to defensively clone here"); then, unless
 * autocast is on, x.to(float32) and the adapters' output .to(y's dtype)
 * before y + output, in y's dtype.
 * The casts are no-ops when the types agree (.to() of the same dtype returns
 * its input). */
static int32_t lora(struct hf *h, int32_t x, int64_t in, int64_t out, int32_t y,
                    enum lora_base base)
{
    if (!lora_wanted(h))
        return y;
    int64_t r = h->lora->r;
    int32_t a = param(h, "lora_A.default.weight", DM_FLOAT, 2, (int64_t[]){r, in});
    int32_t b = param(h, "lora_B.default.weight", DM_FLOAT, 2, (int64_t[]){out, r});
    keep32(h, a);
    keep32(h, b);
    bool bnb = base != LB_LINEAR;
    if (base == LB_BNB4)
        y = clone(h, y);
    int32_t xa = x;
    if (!bnb || !h->amp) {
        xa = op(h, DM_OP_Cast, 1, x);
        attr_i(h, "to", DM_FLOAT);
        keep32(h, xa);
    }
    if (h->lora->dropout > 0) {
        xa = dropout(h, xa, h->lora->dropout);
        keep32(h, xa);
    }
    int32_t at = op(h, DM_OP_Transpose, 1, a);
    attr_ints(h, "perm", INTS(1, 0));
    int32_t u = op(h, DM_OP_MatMul, 2, xa, at);
    keep32(h, u);
    int32_t bt = op(h, DM_OP_Transpose, 1, b);
    attr_ints(h, "perm", INTS(1, 0));
    u = op(h, DM_OP_MatMul, 2, u, bt);
    keep32(h, u);
    double alpha = h->lora->alpha > 0 ? h->lora->alpha : 8;
    u = op(h, DM_OP_Mul, 2, u, const_f(h, alpha / (double)r));
    keep32(h, u);
    if (bnb) {
        if (!h->amp)
            u = op(h, DM_OP_CastLike, 2, u, y);
        return op(h, DM_OP_Add, 2, y, u);
    }
    u = op(h, DM_OP_Add, 2, y, u);
    keep32(h, u);
    return op(h, DM_OP_CastLike, 2, u, y);
}

/* ---- quantized linear layers ---------------------------------------------------------
 *
 * Sources (repository, file): huggingface/transformers
 * src/transformers/quantizers/quantizer_{gptq,awq,bnb_4bit,bnb_8bit,finegrained_fp8}.py,
 * src/transformers/utils/quantization_config.py and src/transformers/integrations/
 * {bitsandbytes,awq,finegrained_fp8}.py; huggingface/optimum optimum/gptq/quantizer.py
 * and constants.py; AutoGPTQ/AutoGPTQ auto_gptq/nn_modules/qlinear/qlinear_{cuda_old,
 * exllama,exllamav2}.py and auto_gptq/modeling/_utils.py (autogptq_post_init);
 * casper-hansen/AutoAWQ awq/modules/linear/gemm.py; bitsandbytes-foundation/
 * bitsandbytes bitsandbytes/nn/modules.py, functional.py, autograd/_functions.py and
 * backends/cuda/ops.py (0.45+, the LLM.int8() rewrite with int8_vectorwise_quant).
 *
 * A config whose quantization_config names a method is a prequantized
 * checkpoint: transformers' quantizer for that method replaces the model's
 * linear layers before loading (_process_model_before_weight_loading), and
 * the state_dict holds each replaced layer's stored tensors. Built here, per
 * method, are those tensors (named and shaped as the checkpoint holds them,
 * which the safetensors check compares) and a QuantLinear node that the
 * schedule runs as the method's kernel does (src/schedule/schedule.c). Without
 * a quantization_config, --quant quantizes on load as BitsAndBytesConfig does.
 *
 * Which layers: bitsandbytes (replace_with_bnb_linear) every nn.Linear and
 * GPT-2 Conv1D, fp8 (replace_with_fp8_linear) and awq (replace_with_awq_linear)
 * every nn.Linear, all but modules_to_not_convert: the output layer
 * (get_keys_to_not_convert), or for bitsandbytes and fp8 the config's list
 * instead when it gives one (HfQuantizer.get_modules_to_not_convert), for awq
 * the config's list as well; a name matches when it is a substring of the
 * module's path. gptq (optimum's GPTQQuantizer.convert_model) every Linear and
 * Conv1D under the block list (block_name_to_quantize, or the first of
 * optimum's BLOCK_PATTERNS, gptq/constants.py), and only those whose path ends
 * with a name of modules_in_block_to_quantize when the config lists it. */

enum qmethod { Q_NONE, Q_BNB4, Q_BNB8, Q_GPTQ, Q_AWQ, Q_FP8 };

/* auto-gptq's QuantLinear classes (dynamically_import_QuantLinear) */
enum gptq_kernel { K_CUDA_OLD = 0, K_EXLLAMA = 1, K_EXLLAMA_V2 = 2 };

#define BNB4_BLOCK 64        /* Params4bit's blocksize (bitsandbytes nn/modules.py) */
#define BNB_NESTED_BLOCK 256 /* double quantization: quantize_blockwise(absmax, blocksize=256) */
#define EXLLAMA_MAX_INPUT 2048 /* auto-gptq EXLLAMA_DEFAULT_MAX_INPUT_LENGTH (modeling/_const.py) */

/* optimum gptq/constants.py BLOCK_PATTERNS, in its order */
static const char *const gptq_blocks[] = {"transformer.h", "model.decoder.layers", "gpt_neox.layers",
                                          "model.layers"};

/* A string field of the quantization_config object `qc`. */
static const char *q_str(struct hf *h, json_t *qc, const char *key, const char *dflt)
{
    json_t *v = json_object_get(qc, key);
    if (h->st != DNNMEM_OK || !v || json_is_null(v))
        return dflt;
    if (!json_is_string(v)) {
        fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.%s' must be a string", key);
        return dflt;
    }
    return json_string_value(v);
}

static bool q_bool(struct hf *h, json_t *qc, const char *key, bool dflt)
{
    json_t *v = json_object_get(qc, key);
    if (h->st != DNNMEM_OK || !v || json_is_null(v))
        return dflt;
    if (!json_is_boolean(v)) {
        fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.%s' must be true or false", key);
        return dflt;
    }
    return json_is_true(v);
}

/* An integer in [lo, hi]; `dflt` when absent or null (REQUIRED: an error). */
static int64_t q_int(struct hf *h, json_t *qc, const char *key, int64_t dflt, int64_t lo, int64_t hi)
{
    json_t *v = json_object_get(qc, key);
    if (h->st != DNNMEM_OK)
        return dflt == REQUIRED ? lo : dflt;
    if (!v || json_is_null(v)) {
        if (dflt == REQUIRED) {
            fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.%s' is missing", key);
            return lo;
        }
        return dflt;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.%s' must be an integer in [%lld, %lld]",
             key, (long long)lo, (long long)hi);
        return dflt == REQUIRED ? lo : dflt;
    }
    return (int64_t)json_integer_value(v);
}

/* A list of module names (strings), or NULL when absent or null. */
static json_t *q_names(struct hf *h, json_t *qc, const char *key)
{
    json_t *v = json_object_get(qc, key);
    if (h->st != DNNMEM_OK || !v || json_is_null(v))
        return NULL;
    size_t i;
    json_t *e;
    bool ok = json_is_array(v);
    json_array_foreach(v, i, e) ok = ok && json_is_string(e);
    if (!ok) {
        fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.%s' must be a list of module names",
             key);
        return NULL;
    }
    return v;
}

/* A torch dtype name ("float32", "torch.bfloat16", "bf16", ...). */
static enum dm_dtype q_dtype(struct hf *h, json_t *qc, const char *key, enum dm_dtype dflt)
{
    const char *s = q_str(h, qc, key, NULL);
    if (!s)
        return dflt;
    if (strncmp(s, "torch.", 6) == 0)
        s += 6;
    if (strcmp(s, "float32") == 0 || strcmp(s, "float") == 0 || strcmp(s, "fp32") == 0)
        return DM_FLOAT;
    if (strcmp(s, "float16") == 0 || strcmp(s, "half") == 0 || strcmp(s, "fp16") == 0)
        return DM_FLOAT16;
    if (strcmp(s, "bfloat16") == 0 || strcmp(s, "bf16") == 0)
        return DM_BFLOAT16;
    fail(h, DNNMEM_E_MODEL,
         "config field 'quantization_config.%s' is '%s'; expected float32, float16 or bfloat16", key,
         s);
    return dflt;
}

static void read_gptq(struct hf *h, json_t *qc)
{
    struct quant *q = &h->q;
    /* GPTQConfig / optimum GPTQQuantizer: bits in [2, 3, 4, 8], group_size
     * 128 by default, -1 for one group per column */
    q->bits = (int)q_int(h, qc, "bits", REQUIRED, 2, 8);
    if (h->st == DNNMEM_OK && q->bits != 2 && q->bits != 3 && q->bits != 4 && q->bits != 8)
        fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.bits' is %d; gptq has 2, 3, 4 or 8",
             q->bits);
    q->group = q_int(h, qc, "group_size", 128, -1, MAX_SIZE);
    if (h->st == DNNMEM_OK && q->group == 0)
        fail(h, DNNMEM_E_MODEL,
             "config field 'quantization_config.group_size' must be positive or -1");
    q->desc_act = q_bool(h, qc, "desc_act", false);
    (void)q_bool(h, qc, "sym", true); /* zero points are stored either way */
    const char *fmt = q_str(h, qc, "checkpoint_format", "gptq");
    if (q_bool(h, qc, "is_marlin_format", false) || strcmp(fmt, "marlin") == 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config': Marlin-packed gptq checkpoints are not modelled");
    else if (strcmp(fmt, "gptq") != 0 && strcmp(fmt, "gptq_v2") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config.checkpoint_format' is '%s'; gptq and gptq_v2 are "
             "modelled",
             fmt);
    /* transformers' GPTQConfig (4.35-4.48): use_exllama defaults to true
     * (disable_exllama, deprecated, its negation), exllama_config to
     * {"version": 1}; auto-gptq's exllama kernels take 4 bits only */
    bool use = q_bool(h, qc, "use_exllama", !q_bool(h, qc, "disable_exllama", false));
    int64_t version = 1;
    json_t *ec = json_object_get(qc, "exllama_config");
    if (ec && !json_is_null(ec)) {
        json_t *v = json_object_get(ec, "version");
        if (!json_is_object(ec) || !json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > 2)
            fail(h, DNNMEM_E_MODEL,
                 "config field 'quantization_config.exllama_config' must be an object whose "
                 "version is 1 or 2");
        else
            version = (int64_t)json_integer_value(v);
    }
    q->kernel = q->bits == 4 && use ? (version == 2 ? K_EXLLAMA_V2 : K_EXLLAMA) : K_CUDA_OLD;
    q->max_input = q_int(h, qc, "max_input_length", EXLLAMA_MAX_INPUT, 1, MAX_SIZE);
    q->in_block = json_object_get(qc, "modules_in_block_to_quantize");
    if (q->in_block && json_is_null(q->in_block))
        q->in_block = NULL;
    size_t i, j;
    json_t *l, *e;
    bool ok = !q->in_block || json_is_array(q->in_block);
    if (q->in_block)
        json_array_foreach(q->in_block, i, l)
        {
            ok = ok && json_is_array(l);
            json_array_foreach(l, j, e) ok = ok && json_is_string(e);
        }
    if (!ok)
        fail(h, DNNMEM_E_MODEL,
             "config field 'quantization_config.modules_in_block_to_quantize' must be a list of "
             "lists of module names");
    q->block = q_str(h, qc, "block_name_to_quantize", NULL);
}

static void read_awq(struct hf *h, json_t *qc)
{
    struct quant *q = &h->q;
    /* AwqConfig: bits 4, group_size 128, version "gemm", backend "autoawq" */
    q->bits = (int)q_int(h, qc, "bits", 4, 1, 8);
    if (h->st == DNNMEM_OK && q->bits != 4)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config.bits' is %d; AutoAWQ's WQLinear_GEMM has 4 bits only",
             q->bits);
    q->group = q_int(h, qc, "group_size", 128, -1, MAX_SIZE);
    if (h->st == DNNMEM_OK && q->group == 0)
        fail(h, DNNMEM_E_MODEL,
             "config field 'quantization_config.group_size' must be positive or -1");
    (void)q_bool(h, qc, "zero_point", true); /* qzeros are stored either way */
    const char *v = q_str(h, qc, "version", "gemm");
    if (h->st == DNNMEM_OK && strcasecmp(v, "gemm") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config.version' is '%s'; awq's gemm layout is modelled "
             "(gemv, exllama, ipex are not)",
             v);
    const char *backend = q_str(h, qc, "backend", "autoawq");
    if (h->st == DNNMEM_OK && strcmp(backend, "autoawq") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config.backend' is '%s'; autoawq is modelled", backend);
    if (q_bool(h, qc, "do_fuse", false))
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config.do_fuse': AutoAWQ's fused modules are not modelled");
    q->skip = q_names(h, qc, "modules_to_not_convert");
}

static void read_bnb(struct hf *h, json_t *qc)
{
    struct quant *q = &h->q;
    /* BitsAndBytesConfig; to_dict() writes load_in_4bit and _load_in_4bit */
    bool b4 = q_bool(h, qc, "load_in_4bit", q_bool(h, qc, "_load_in_4bit", false));
    bool b8 = q_bool(h, qc, "load_in_8bit", q_bool(h, qc, "_load_in_8bit", false));
    if (h->st != DNNMEM_OK)
        return;
    if (b4 == b8) {
        fail(h, DNNMEM_E_MODEL,
             "config field 'quantization_config': bitsandbytes needs exactly one of load_in_4bit "
             "and load_in_8bit");
        return;
    }
    q->skip = q_names(h, qc, "llm_int8_skip_modules");
    if (b8) {
        q->method = Q_BNB8;
        json_t *t = json_object_get(qc, "llm_int8_threshold");
        q->threshold = 6.0; /* BitsAndBytesConfig's default */
        if (t && !json_is_null(t)) {
            if (!json_is_number(t) || !(json_number_value(t) >= 0))
                fail(h, DNNMEM_E_MODEL,
                     "config field 'quantization_config.llm_int8_threshold' must be a number >= 0");
            else
                q->threshold = json_number_value(t);
        }
        if (q_bool(h, qc, "llm_int8_has_fp16_weight", false))
            fail(h, DNNMEM_E_UNSUPPORTED,
                 "config field 'quantization_config.llm_int8_has_fp16_weight': 16-bit main weights "
                 "are not modelled");
        return;
    }
    q->method = Q_BNB4;
    const char *type = q_str(h, qc, "bnb_4bit_quant_type", "fp4");
    if (h->st == DNNMEM_OK && strcmp(type, "nf4") != 0 && strcmp(type, "fp4") != 0)
        fail(h, DNNMEM_E_MODEL,
             "config field 'quantization_config.bnb_4bit_quant_type' is '%s'; expected nf4 or fp4",
             type);
    q->nf4 = strcmp(type, "nf4") == 0;
    q->double_quant = q_bool(h, qc, "bnb_4bit_use_double_quant", false);
    /* bnb_4bit_compute_dtype: float32 when not given (BitsAndBytesConfig);
     * Linear4bit keeps a given compute_dtype (compute_type_is_set) */
    q->compute = q_dtype(h, qc, "bnb_4bit_compute_dtype", DM_FLOAT);
    const char *st = q_str(h, qc, "bnb_4bit_quant_storage", "uint8");
    if (h->st == DNNMEM_OK && strcmp(st, "uint8") != 0 && strcmp(st, "torch.uint8") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config.bnb_4bit_quant_storage' is '%s'; uint8 is modelled",
             st);
}

static void read_fp8(struct hf *h, json_t *qc)
{
    struct quant *q = &h->q;
    /* FineGrainedFP8Config: activation_scheme "dynamic" (the only one),
     * weight_block_size (128, 128); DeepSeek's "fmt": "e4m3" is the weight
     * dtype, float8_e4m3fn */
    const char *fmt = q_str(h, qc, "fmt", "e4m3");
    if (h->st == DNNMEM_OK && strcmp(fmt, "e4m3") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config.fmt' is '%s'; e4m3 is modelled", fmt);
    const char *act = q_str(h, qc, "activation_scheme", "dynamic");
    if (h->st == DNNMEM_OK && strcmp(act, "dynamic") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config.activation_scheme' is '%s'; transformers' "
             "FineGrainedFP8 has dynamic only",
             act);
    q->block_n = q->block_k = 128;
    json_t *bs = json_object_get(qc, "weight_block_size");
    if (bs && !json_is_null(bs)) {
        json_t *b0 = json_array_get(bs, 0), *b1 = json_array_get(bs, 1);
        if (!json_is_array(bs) || json_array_size(bs) != 2 || !json_is_integer(b0) ||
            !json_is_integer(b1) || json_integer_value(b0) < 1 || json_integer_value(b1) < 1 ||
            json_integer_value(b0) > MAX_SIZE || json_integer_value(b1) > MAX_SIZE)
            fail(h, DNNMEM_E_MODEL,
                 "config field 'quantization_config.weight_block_size' must be two positive "
                 "integers");
        else {
            q->block_n = (int64_t)json_integer_value(b0);
            q->block_k = (int64_t)json_integer_value(b1);
        }
    }
    q->skip = q_names(h, qc, "modules_to_not_convert");
}

/* The quantization of the linear layers: the config's quantization_config,
 * else --quant. */
static void read_quant(struct hf *h, enum dnnmem_quant opt)
{
    struct quant *q = &h->q;
    json_t *qc = field(h, "quantization_config");
    if (!qc) {
        q->method = opt == DNNMEM_QUANT_INT8 ? Q_BNB8 : opt ? Q_BNB4 : Q_NONE;
        q->nf4 = opt == DNNMEM_QUANT_NF4 || opt == DNNMEM_QUANT_NF4_SINGLE;
        q->double_quant = opt == DNNMEM_QUANT_NF4;
        q->compute = DM_UNDEFINED; /* the run's dtype */
        q->threshold = 6.0;        /* BitsAndBytesConfig's llm_int8_threshold */
        return;
    }
    if (!json_is_object(qc)) {
        fail(h, DNNMEM_E_MODEL, "config field 'quantization_config' must be an object");
        return;
    }
    const char *m = q_str(h, qc, "quant_method", NULL);
    if (h->st != DNNMEM_OK)
        return;
    if (!m) {
        fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.quant_method' is missing");
        return;
    }
    if (opt != DNNMEM_QUANT_NONE) {
        fail(h, DNNMEM_E_USAGE, "--quant: the config is quantized already (quant_method '%s')", m);
        return;
    }
    q->from_config = true;
    if (strcmp(m, "gptq") == 0) {
        q->method = Q_GPTQ;
        read_gptq(h, qc);
    } else if (strcmp(m, "awq") == 0) {
        q->method = Q_AWQ;
        read_awq(h, qc);
    } else if (strcmp(m, "bitsandbytes") == 0) {
        read_bnb(h, qc);
    } else if (strcmp(m, "fp8") == 0) {
        q->method = Q_FP8;
        read_fp8(h, qc);
    } else {
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config': quant_method '%s' is not modelled (modelled: "
             "gptq, awq, bitsandbytes, fp8)",
             m);
    }
}

/* Whether `path` contains one of the names of list `l` (transformers'
 * `any(key in ".".join(current_key_name) for key in modules_to_not_convert)`). */
static bool names_match(json_t *l, const char *path)
{
    size_t i;
    json_t *e;
    json_array_foreach(l, i, e) if (strstr(path, json_string_value(e))) return true;
    return false;
}

/* Whether the current module, a linear layer (conv: GPT-2's Conv1D) whose
 * result is named `name`, is stored quantized. */
static bool quantized(struct hf *h, int32_t tied, const char *name, bool conv)
{
    struct quant *q = &h->q;
    if (q->method == Q_NONE || tied >= 0 || h->st != DNNMEM_OK)
        return false;
    char path[sizeof h->scope];
    module_path(h, path, sizeof path);
    if (q->method == Q_GPTQ) {
        /* get_block_name_with_pattern: the first pattern the model has */
        const char *block = q->block ? q->block : q->block_found;
        for (size_t k = 0; !block && k < sizeof gptq_blocks / sizeof gptq_blocks[0]; k++) {
            size_t len = strlen(gptq_blocks[k]);
            if (strncmp(path, gptq_blocks[k], len) == 0 && path[len] == '.')
                block = gptq_blocks[k];
        }
        size_t len = block ? strlen(block) : 0;
        if (!block || strncmp(path, block, len) != 0 || path[len] != '.')
            return false;
        q->block_found = block;
        if (!q->in_block)
            return true;
        size_t i, j, n = strlen(path);
        json_t *l, *e;
        json_array_foreach(q->in_block, i, l) json_array_foreach(l, j, e)
        {
            size_t s = strlen(json_string_value(e));
            if (n >= s && strcmp(path + n - s, json_string_value(e)) == 0)
                return true;
        }
        return false;
    }
    if (conv && (q->method == Q_AWQ || q->method == Q_FP8))
        return false; /* replace_with_awq_linear, replace_with_fp8_linear: nn.Linear only */
    /* get_keys_to_not_convert: the output embeddings (lm_head, GPT-NeoX's
     * embed_out), else the module of the model's last parameter (a
     * classifier, a base model's pooler) */
    const char *last = strrchr(path, '.');
    last = last ? last + 1 : path;
    bool head = (name && strcmp(name, "logits") == 0) || strcmp(last, "lm_head") == 0 ||
                strcmp(last, "embed_out") == 0 || h->last_linear;
    if (q->skip && names_match(q->skip, path))
        return false;
    if (q->skip && q->method != Q_AWQ)
        return true; /* the config's list replaces the default */
    return !head;
}

static void frozen32(struct hf *h, int32_t t)
{
    if (h->st == DNNMEM_OK && t >= 0) {
        h->g->tensors[t].keep_fp32 = true;
        h->g->tensors[t].frozen = true;
    }
}

static void frozen(struct hf *h, int32_t t)
{
    if (h->st == DNNMEM_OK && t >= 0)
        h->g->tensors[t].frozen = true;
}

/* max(*m, v) */
static void qmax(int64_t *m, int64_t v)
{
    if (v > *m)
        *m = v;
}

/* The current module's linear layer (in -> out, with a bias when `bias`)
 * stored as the method stores it, and the QuantLinear node that runs it;
 * `name` (or NULL) names the result. */
static int32_t qlinear(struct hf *h, int32_t x, int64_t in, int64_t out, bool bias, const char *name)
{
    struct quant *q = &h->q;
    int64_t n;
    char path[sizeof h->scope];
    module_path(h, path, sizeof path);
    if (!dm_mul_ok(in, out, &n)) {
        fail(h, DNNMEM_E_SHAPE, "%s: a [%lld, %lld] weight overflows", path, (long long)out,
             (long long)in);
        return -1;
    }
    int32_t w = -1, b = -1;
    const char *method = "";
    switch (q->method) {
    case Q_BNB4: {
        /* Params4bit / functional.quantize_4bit: the flattened weight,
         * (n + 1) / 2 bytes [*, 1]; an absmax per block of 64 weights,
         * float32, or with double quantization uint8 with a float32 absmax
         * per 256 blocks (nested_absmax) and an offset; the 16-entry code
         * (quant_map). A prequantized checkpoint loads each layer's QuantState
         * with its own nested_quant_map (QuantState.from_dict); quantizing on
         * load shares one dynamic map per device (name2qmap). */
        int64_t packed = n / 2 + n % 2, blocks = n / BNB4_BLOCK + (n % BNB4_BLOCK > 0);
        int64_t code = 16, map = 256, one = 1;
        b = bias ? param(h, "bias", DM_FLOAT, 1, &out) : -1;
        w = param(h, "weight", DM_UINT8, 2, (int64_t[]){packed, 1});
        frozen32(h, param(h, "weight.absmax", q->double_quant ? DM_UINT8 : DM_FLOAT, 1, &blocks));
        if (q->double_quant) {
            int64_t nested = blocks / BNB_NESTED_BLOCK + (blocks % BNB_NESTED_BLOCK > 0);
            frozen32(h, param(h, "weight.nested_absmax", DM_FLOAT, 1, &nested));
            frozen32(h, param(h, "weight.offset", DM_FLOAT, 0, &one));
            if (q->from_config)
                frozen32(h, param(h, "weight.nested_quant_map", DM_FLOAT, 1, &map));
            else if (!q->shared_map) {
                q->shared_map = true;
                frozen32(h, param(h, "weight.nested_quant_map", DM_FLOAT, 1, &map));
            }
        }
        frozen32(h, param(h, "weight.quant_map", DM_FLOAT, 1, &code));
        method = "bnb4";
        break;
    }
    case Q_BNB8:
        /* Linear8bitLt: Int8Params int8 [out, in] and its SCB, float32 [out]
         * (the state_dict's "<module>.SCB"; "weight_format" stays on the host) */
        w = param(h, "weight", DM_INT8, 2, (int64_t[]){out, in});
        frozen32(h, param(h, "SCB", DM_FLOAT, 1, &out));
        b = bias ? param(h, "bias", DM_FLOAT, 1, &out) : -1;
        method = "bnb8";
        break;
    case Q_GPTQ: {
        /* auto-gptq QuantLinear (qlinear_cuda_old.py, qlinear_exllama.py):
         * qweight int32 [in // 32 * bits, out], qzeros int32 [ceil(in / group),
         * out // 32 * bits], scales float16 [ceil(in / group), out], g_idx
         * int32 [in], bias float16 [out] */
        if (in % 32 || out % 32) {
            fail(h, DNNMEM_E_MODEL,
                 "%s: gptq packs 32 / bits codes per int32 and needs in_features (%lld) and "
                 "out_features (%lld) to be multiples of 32",
                 path, (long long)in, (long long)out);
            return -1;
        }
        int64_t g = q->group == -1 ? in : q->group, groups = in / g + (in % g > 0);
        if (q->kernel != K_CUDA_OLD && in % g) {
            fail(h, DNNMEM_E_MODEL,
                 "%s: auto-gptq's exllama kernel needs in_features (%lld) to be a multiple of "
                 "group_size (%lld)",
                 path, (long long)in, (long long)g);
            return -1;
        }
        int64_t rows = in / 32 * q->bits, cols = out / 32 * q->bits;
        w = param(h, "qweight", DM_INT32, 2, (int64_t[]){rows, out});
        frozen(h, param(h, "qzeros", DM_INT32, 2, (int64_t[]){groups, cols}));
        frozen(h, param(h, "scales", DM_FLOAT16, 2, (int64_t[]){groups, out}));
        frozen(h, param(h, "g_idx", DM_INT32, 1, &in));
        if (bias) {
            b = param(h, "bias", DM_FLOAT16, 1, &out);
            frozen(h, b);
        }
        int64_t dq, v2;
        if (q->kernel == K_EXLLAMA && dm_mul_ok(rows * 8, out, &dq)) {
            /* autogptq_post_init: temp_dq holds the largest qweight.numel() * 8 */
            qmax(&q->max_dq, dq);
            qmax(&q->max_dim, in > out ? in : out);
        }
        if (q->kernel == K_EXLLAMA_V2) {
            /* qlinear_exllamav2.py scratch_space_fixed: temp_dq_size (in * out
             * * 2 + 128) + temp_fwd_size (out * 2048 * 8 * 4 + 128); a g_idx not
             * all zero (more than one group) makes q_perm and q_invperm, int16
             * [in] each (ext_make_q_matrix) */
            if (dm_mul_ok(n, 2, &dq) && dm_mul_ok(out, INT64_C(2048) * 8 * 4, &v2) &&
                dm_add_ok(v2, 256, &v2) && dm_add_ok(dq, v2, &v2))
                qmax(&q->max_scratch, v2);
            if (groups > 1) {
                frozen(h, param(h, "q_tensors.q_perm", DM_INT16, 1, &in));
                frozen(h, param(h, "q_tensors.q_invperm", DM_INT16, 1, &in));
            }
        }
        method = "gptq";
        break;
    }
    case Q_AWQ: {
        /* AutoAWQ WQLinear_GEMM (awq/modules/linear/gemm.py): qweight int32
         * [in, out / 8], qzeros int32 [in / group, out / 8], scales float16
         * [in / group, out], bias float16 [out]; it asserts in % group == 0
         * and out % 8 == 0 */
        int64_t g = q->group == -1 ? in : q->group;
        if (out % 8 || in % g) {
            fail(h, DNNMEM_E_MODEL,
                 "%s: AutoAWQ's WQLinear_GEMM needs out_features (%lld) to be a multiple of 8 and "
                 "in_features (%lld) of group_size (%lld)",
                 path, (long long)out, (long long)in, (long long)g);
            return -1;
        }
        w = param(h, "qweight", DM_INT32, 2, (int64_t[]){in, out / 8});
        frozen(h, param(h, "qzeros", DM_INT32, 2, (int64_t[]){in / g, out / 8}));
        frozen(h, param(h, "scales", DM_FLOAT16, 2, (int64_t[]){in / g, out}));
        if (bias) {
            b = param(h, "bias", DM_FLOAT16, 1, &out);
            frozen(h, b);
        }
        method = "awq";
        break;
    }
    case Q_FP8: {
        /* transformers FP8Linear: weight float8_e4m3fn [out, in],
         * weight_scale_inv float32 [ceil(out / block_n), ceil(in / block_k)];
         * act_quant asserts in % block_k == 0 */
        if (in % q->block_k) {
            fail(h, DNNMEM_E_MODEL,
                 "%s: FP8Linear quantizes its input in groups of %lld (weight_block_size[1]); "
                 "in_features is %lld",
                 path, (long long)q->block_k, (long long)in);
            return -1;
        }
        w = param(h, "weight", DM_FLOAT8E4M3FN, 2, (int64_t[]){out, in});
        frozen(h, w);
        int64_t so = out / q->block_n + (out % q->block_n > 0), si = in / q->block_k;
        frozen32(h, param(h, "weight_scale_inv", DM_FLOAT, 2, (int64_t[]){so, si}));
        b = bias ? param(h, "bias", DM_FLOAT, 1, &out) : -1;
        method = "fp8";
        break;
    }
    case Q_NONE: return -1;
    }
    q->n_layers++;
    /* Linear4bit.forward: x.to(compute_dtype), matmul_4bit, .to(input dtype).
     * The run's dtype as compute dtype (--quant) is the input's, no cast,
     * except after prepare_model_for_kbit_training: the float32 input is cast
     * to it, the output back to float32 (the Cast is written to float32 and
     * left unmarked, so the run's conversion makes it 16-bit). */
    bool low = q->compute == DM_UNDEFINED && h->prep32;
    bool cast = q->method == Q_BNB4 && (q->compute != DM_UNDEFINED || low);
    int32_t xc = x;
    if (cast) {
        xc = op(h, DM_OP_Cast, 1, x);
        attr_i(h, "to", low ? DM_FLOAT : q->compute);
        if (q->compute == DM_FLOAT)
            keep32(h, xc);
        if (low)
            unkeep32(h, xc);
    }
    if (!cast)
        h->out_name = name;
    int32_t y = b >= 0 ? op(h, DM_OP_QuantLinear, 3, xc, w, b) : op(h, DM_OP_QuantLinear, 2, xc, w);
    attr_s(h, "method", method);
    attr_i(h, "K", in);
    attr_i(h, "N", out);
    switch (q->method) {
    case Q_BNB4: attr_i(h, "blocksize", BNB4_BLOCK); break;
    case Q_BNB8: attr_f(h, "threshold", q->threshold); break;
    case Q_GPTQ:
        attr_i(h, "bits", q->bits);
        attr_i(h, "kernel", q->kernel);
        break;
    case Q_FP8: attr_i(h, "block_k", q->block_k); break;
    case Q_AWQ:
    case Q_NONE: break;
    }
    if (!cast)
        return y;
    if (q->compute == DM_FLOAT)
        keep32(h, y);
    if (low)
        unkeep32(h, y);
    h->out_name = name;
    return op(h, DM_OP_CastLike, 2, y, x);
}

static const char *dtype_word(enum dm_dtype t)
{
    return t == DM_FLOAT ? "float32" : t == DM_FLOAT16 ? "float16" : "bfloat16";
}

/* After the model: the buffers the kernels keep for the whole model, a model
 * none of whose layers the config's method quantizes, and what the report
 * says. */
static void quant_finish(struct hf *h)
{
    struct quant *q = &h->q;
    struct dm_graph *g = h->g;
    if (q->method == Q_NONE || h->st != DNNMEM_OK)
        return;
    if (!q->n_layers) {
        if (q->method == Q_GPTQ)
            fail(h, DNNMEM_E_UNSUPPORTED,
                 "config field 'quantization_config': no linear layer is under a gptq block "
                 "(optimum's transformer.h, model.decoder.layers, gpt_neox.layers, model.layers, "
                 "or block_name_to_quantize)");
        else
            fail(h, DNNMEM_E_MODEL,
                 "config field 'quantization_config': it quantizes no linear layer of the model");
        return;
    }
    if (q->method == Q_GPTQ && q->kernel == K_EXLLAMA) {
        /* autogptq_post_init: temp_state float16 [max_input_len,
         * max_inner_outer_dim] (act-order: max_input_length, default 2048,
         * by the largest in or out features; else [1, 1]) and temp_dq
         * float16 [1, max_dq_buffer_size], persistent (model.device_to_buffers) */
        int64_t rows = q->desc_act ? q->max_input : 1, dim = q->desc_act ? q->max_dim : 1;
        int64_t dq = q->max_dq > 1 ? q->max_dq : 1, st;
        if (!dm_mul_ok(rows, dim, &st)) {
            fail(h, DNNMEM_E_SHAPE, "gptq: exllama's temp_state overflows");
            return;
        }
        frozen(h, param_named(h, "device_to_buffers.temp_state", DM_FLOAT16, 2,
                              (int64_t[]){rows, dim}));
        frozen(h, param_named(h, "device_to_buffers.temp_dq", DM_FLOAT16, 2, (int64_t[]){1, dq}));
    }
    if (q->method == Q_GPTQ && q->kernel == K_EXLLAMA_V2) {
        /* ExLlamaV2DeviceTensors: one float16 scratch of scratch_bytes // 2 */
        int64_t halves = q->max_scratch / 2;
        frozen(h, param_named(h, "device_tensors.scratch", DM_FLOAT16, 1, &halves));
    }
    char layout[256], runtime[256];
    long long nl = (long long)q->n_layers;
    const char *mods = q->method == Q_GPTQ ? "under the block list" : "all but the output layer";
    if (q->skip)
        mods = q->method == Q_AWQ ? "all but the output layer and modules_to_not_convert"
                                  : "all but the skip list";
    if (q->in_block)
        mods = "modules_in_block_to_quantize";
    switch (q->method) {
    case Q_BNB4:
        snprintf(layout, sizeof layout,
                 "bitsandbytes 4-bit %s%s, blocks of 64 (Params4bit: the flattened weight two "
                 "codes a byte, absmax per block%s); %lld linears (%s); compute %s",
                 q->nf4 ? "nf4" : "fp4",
                 q->double_quant ? " with double quantization (QLoRA)" : ", float32 absmax",
                 q->double_quant ? " uint8, float32 per 256 blocks" : "", nl, mods,
                 q->compute == DM_UNDEFINED ? "in the run's dtype" : dtype_word(q->compute));
        snprintf(runtime, sizeof runtime,
                 "bitsandbytes MatMul4Bit: each matmul dequantizes its weight into a transient of "
                 "the compute dtype, forward and backward (gemv_4bit for one row in inference); "
                 "not measured");
        break;
    case Q_BNB8:
        snprintf(layout, sizeof layout,
                 "bitsandbytes 8-bit LLM.int8() (Int8Params int8 [out, in], SCB float32 [out]), "
                 "llm_int8_threshold %g; %lld linears (%s)",
                 q->threshold, nl, mods);
        snprintf(runtime, sizeof runtime,
                 "bitsandbytes 0.45+ MatMul8bitLt: fp16 input copy, int8 rows and row stats, "
                 "outlier mask (outlier columns assumed none), int32 product, fp16 output; backward "
                 "dequantizes the weight, keeps the input; not measured");
        break;
    case Q_GPTQ: {
        char grp[48] = "one group per column";
        if (q->group != -1)
            snprintf(grp, sizeof grp, "group %lld", (long long)q->group);
        snprintf(layout, sizeof layout,
                 "gptq %d-bit, %s%s (auto-gptq QuantLinear: qweight int32 [in/32*bits, "
                 "out], qzeros int32, scales fp16 [groups, out], g_idx int32 [in], bias fp16); "
                 "%lld linears in %s%s",
                 q->bits, grp, q->desc_act ? ", desc_act" : "", nl,
                 q->block_found ? q->block_found : "the blocks",
                 q->in_block ? " (modules_in_block_to_quantize)" : "");
        snprintf(runtime, sizeof runtime, "%s",
                 q->kernel == K_EXLLAMA
                     ? "auto-gptq exllama (GPTQConfig default: use_exllama, version 1): persistent "
                       "fp16 temp_dq of the largest layer and temp_state; no autograd through it; "
                       "gptqmodel's kernels not modelled; not measured"
                 : q->kernel == K_EXLLAMA_V2
                     ? "auto-gptq exllama v2: one persistent fp16 scratch (largest layer's temp_dq "
                       "+ 2048 x 8 rows of float32 output), q_perm per layer; no autograd through "
                       "it; gptqmodel's kernels not modelled; not measured"
                     : "auto-gptq cuda-old: below 128 rows its CUDA kernel (float32 input and "
                       "output), else torch dequantization (int32 codes, fp16 weight [in, out] "
                       "kept for backward); not measured");
        break;
    }
    case Q_AWQ: {
        char grp[48] = "group = in_features"; /* WQLinear_GEMM: -1 means in_features */
        if (q->group != -1)
            snprintf(grp, sizeof grp, "group %lld", (long long)q->group);
        snprintf(layout, sizeof layout,
                 "awq 4-bit gemm, %s (AutoAWQ WQLinear_GEMM: qweight int32 [in, out/8], qzeros "
                 "int32 [in/group, out/8], scales fp16 [in/group, out], bias fp16); %lld linears "
                 "(%s)",
                 grp, nl, mods);
        snprintf(runtime, sizeof runtime,
                 "AutoAWQ GEMM: fp16 input; from 1024 rows an fp16 dequantized weight and a matmul, "
                 "below that the split-k kernel's [8, rows, out] fp16 partials; no autograd "
                 "through it (no_grad); not measured");
        break;
    }
    case Q_FP8:
        snprintf(layout, sizeof layout,
                 "fp8 e4m3 weights [out, in], float32 weight_scale_inv per %lldx%lld block "
                 "(transformers FineGrainedFP8, FP8Linear); %lld linears (%s)",
                 (long long)q->block_n, (long long)q->block_k, nl, mods);
        snprintf(runtime, sizeof runtime,
                 "FP8Linear (triton): the input quantized per %lld to fp8 with float32 scales, the "
                 "output in its dtype, + bias and nan_to_num copies; compute capability 8.9+; not "
                 "trainable; not measured",
                 (long long)q->block_k);
        break;
    case Q_NONE: break;
    }
    g->quant_method = q->method == Q_BNB4 || q->method == Q_BNB8 ? "bitsandbytes"
                      : q->method == Q_GPTQ                      ? "gptq"
                      : q->method == Q_AWQ                       ? "awq"
                                                                 : "fp8";
    g->quant_layout = dm_arena_strdup(&g->arena, layout);
    g->quant_runtime = dm_arena_strdup(&g->arena, runtime);
    if (!g->quant_layout || !g->quant_runtime)
        oom(h);
    /* is_trainable: FineGrainedFP8HfQuantizer false; bnb (>= 0.37), gptq,
     * awq (autoawq >= 0.2.0) true; update_torch_dtype: float16 for bnb,
     * gptq and awq, float32 for fp8 */
    g->quant_trainable = q->method != Q_FP8;
    g->quant_fp16_default = q->method != Q_FP8;
    g->quant_min_cc = q->method == Q_FP8 ? 89 : 0;
}

/* ---- prepare_model_for_kbit_training ------------------------------------------------
 *
 * PEFT's prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
 * gradient_checkpointing_kwargs=None) (huggingface/peft src/peft/utils/other.py,
 * v0.14-0.15), for the methods built here:
 *  - requires_grad False on every parameter (get_peft_model freezes them too);
 *  - unless the model is gptq (or aqlm, eetq, hqq, torchao): every parameter
 *    whose dtype is float16 or bfloat16 and whose class is not Params4bit is
 *    cast, param.data = param.data.to(torch.float32). bitsandbytes' Params4bit
 *    (uint8) and Int8Params (int8) are not float16, AutoAWQ's qweight, qzeros
 *    and scales are buffers: the embeddings, norms, lm_head and biases go
 *    float32; buffers (inv_freq) keep their dtype;
 *  - for a model loaded in 8 or 4 bits (bitsandbytes' is_loaded_in_8bit/4bit)
 *    or gptq, with use_gradient_checkpointing: as the kwargs name no
 *    use_reentrant (PEFT passes {}), model.enable_input_require_grads(), a
 *    forward hook on get_input_embeddings() calling output.requires_grad_(True);
 *    then model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={}):
 *    transformers runs each layer of the model's layer list through
 *    torch.utils.checkpoint.checkpoint with those kwargs, and torch 2.4-2.6 take
 *    use_reentrant=True when it is not passed (with a warning). awq is in
 *    neither list: no checkpointing for it.
 * With checkpointing, transformers 4.51's models turn use_cache off in
 * training ("`use_cache=True` is incompatible with gradient checkpointing").
 *
 * What follows in the forward (4.51 modules): a float32 weight times a 16-bit
 * input promotes to float32 (LlamaRMSNorm's self.weight * hidden_states.to(
 * input_dtype)), an embedding of a float32 weight is float32, and so is all
 * that is computed from them: the residual stream, the masks and rotary cos
 * and sin made in inputs_embeds' dtype, attention, the logits (a float32
 * lm_head). bitsandbytes' Linear4bit (0.45: compute_type_is_set once a
 * compute_dtype is given, which transformers always passes) casts its input
 * to compute_dtype and its output back to the input's dtype; MatMul8bitLt and
 * AutoAWQ's kernel cast to float16 inside and return the input's dtype. So
 * with prep32 every activation is float32 (node() marks them) but Linear4bit's
 * compute copies (qlinear() unmarks them). */

/* Whether prepare_model_for_kbit_training turns gradient checkpointing on:
 * bitsandbytes (--quant, or quant_method bitsandbytes) and gptq. Read from
 * the config before the model is built: use_cache depends on it. */
static bool kbit_gc(const struct hf *h)
{
    if (h->kbit != DNNMEM_KBIT_PREP)
        return false;
    if (h->opt_quant != DNNMEM_QUANT_NONE)
        return true;
    json_t *qc = json_object_get(h->root, "quantization_config");
    const char *m = json_string_value(json_object_get(qc, "quant_method"));
    return m && (strcmp(m, "bitsandbytes") == 0 || strcmp(m, "gptq") == 0);
}

/* The checkpoint spec of the layer list a node is in: its path up to the
 * first component "<name>.<digits>" ("/model/layers.0/..." ->
 * "/model/layers.*"), which is the ModuleList gradient_checkpointing_enable
 * wraps (layers, h, block, layer); NULL when it has none. */
static const char *layer_glob(struct hf *h, const char *name)
{
    for (const char *p = strchr(name, '/'); p; p = strchr(p, '/')) {
        p++;
        size_t id = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_");
        if (!id || p[id] != '.')
            continue;
        size_t nd = strspn(p + id + 1, "0123456789");
        char end = p[id + 1 + nd];
        if (!nd || (end != '/' && end != '\0'))
            continue;
        int len = (int)(p + id + 1 - name);
        const char *glob = dm_arena_printf(&h->g->arena, "%.*s*", len, name);
        if (!glob)
            oom(h);
        return glob;
    }
    return NULL;
}

/* After the build, with --kbit-prep: the leaf that enable_input_require_grads
 * makes, the layers gradient_checkpointing_enable wraps, and what the
 * assumption line says. */
static void kbit_finish(struct hf *h)
{
    struct dm_graph *g = h->g;
    struct quant *q = &h->q;
    if (h->st != DNNMEM_OK)
        return;
    bool gc = h->kbit == DNNMEM_KBIT_PREP &&
              (q->method == Q_BNB4 || q->method == Q_BNB8 || q->method == Q_GPTQ);
    const char *type = json_string_value(json_object_get(h->root, "model_type"));
    if (gc && type && strcmp(type, "albert") == 0) {
        fail(h, DNNMEM_E_UNSUPPORTED,
             "--kbit-prep: transformers' ALBERT does not support gradient checkpointing "
             "(gradient_checkpointing_enable raises); use --kbit-prep-no-gc");
        return;
    }
    if (gc) {
        /* get_input_embeddings(): the token embedding, the lookup of the
         * input ids (each call: T5's encoder and decoder); ViT's
         * patch_embeddings, whose output is its scope's last node's */
        int n = 0;
        int32_t patch = -1;
        for (int32_t i = 0; i < g->n_nodes; i++) {
            const struct dm_node *nd = &g->nodes[i];
            if (nd->op == DM_OP_Gather && nd->n_in == 2 && nd->in[0] >= 0 && nd->in[1] >= 0 &&
                g->tensors[nd->in[0]].role == DM_ROLE_WEIGHT &&
                g->tensors[nd->in[1]].role == DM_ROLE_INPUT) {
                g->tensors[nd->out[0]].grad_leaf = true;
                n++;
            }
            if (strstr(nd->name, "/patch_embeddings/"))
                patch = nd->out[0];
        }
        if (!n && patch >= 0) {
            g->tensors[patch].grad_leaf = true;
            n++;
        }
        if (!n) {
            fail(h, DNNMEM_E_INTERNAL, "--kbit-prep: no input embeddings found");
            return;
        }
        for (int32_t i = 0; i < g->n_nodes && h->st == DNNMEM_OK; i++) {
            const char *glob = layer_glob(h, g->nodes[i].name);
            bool known = !glob;
            for (int k = 0; !known && k < g->n_kbit_ckpt; k++)
                known = strcmp(glob, g->kbit_ckpt[k]) == 0;
            if (known)
                continue;
            if (g->n_kbit_ckpt == 2) {
                fail(h, DNNMEM_E_UNSUPPORTED,
                     "--kbit-prep: gradient checkpointing of this model's layers is not "
                     "modelled (more than two layer lists)");
                return;
            }
            g->kbit_ckpt[g->n_kbit_ckpt++] = glob;
        }
        if (!g->n_kbit_ckpt && h->st == DNNMEM_OK) {
            fail(h, DNNMEM_E_UNSUPPORTED, "--kbit-prep: the model has no layer list to checkpoint");
            return;
        }
    }
    const char *cast =
        q->method == Q_GPTQ ? "gptq: no parameter cast"
        : h->amp ? "float16/bfloat16 parameters to float32 (already so under autocast)"
                 : "float16/bfloat16 parameters but Params4bit to float32 (embeddings, norms, "
                   "lm_head, biases), so activations and logits are float32";
    const char *lin = h->prep32 && q->method == Q_BNB4
                          ? " (Linear4bit casts its input to the compute dtype and back)"
                          : "";
    g->kbit_prep =
        gc ? dm_arena_printf(&g->arena,
                             "PEFT prepare_model_for_kbit_training: %s%s; "
                             "gradient_checkpointing_enable (reentrant) of %s%s%s, use_cache off, "
                             "the input embeddings' output requires grad "
                             "(enable_input_require_grads)",
                             cast, lin, g->kbit_ckpt[0], g->n_kbit_ckpt > 1 ? " and " : "",
                             g->n_kbit_ckpt > 1 ? g->kbit_ckpt[1] : "")
        : dm_arena_printf(&g->arena, "PEFT prepare_model_for_kbit_training: %s%s; %s", cast, lin,
                          h->kbit == DNNMEM_KBIT_PREP_NO_GC
                              ? "use_gradient_checkpointing=False"
                              : "no gradient checkpointing (PEFT turns it on for bitsandbytes "
                                "and gptq only)");
    if (!g->kbit_prep)
        oom(h);
}

/* The LoRA layer PEFT makes around a quantized linear layer (gptq's and
 * awq's LoRA layers are taken as lora.Linear). */
static enum lora_base lora_base(const struct hf *h)
{
    return h->q.method == Q_BNB4 ? LB_BNB4 : h->q.method == Q_BNB8 ? LB_BNB8 : LB_LINEAR;
}

/* nn.Linear(in, out): F.linear(x, W [out, in], b) = matmul(x, W.t()), then the
 * bias added in place (the schedule's linear_bias_target); `tied` >= 0: the
 * weight is that tensor. Inside the module's scope; `name` (or NULL) names
 * the result. */
static int32_t linear(struct hf *h, int32_t x, int64_t in, int64_t out, bool bias, int32_t tied,
                      const char *name)
{
    if (quantized(h, tied, name, false))
        return lora(h, x, in, out, qlinear(h, x, in, out, bias, name), lora_base(h));
    int32_t w = tied >= 0 ? tied : param(h, "weight", DM_FLOAT, 2, (int64_t[]){out, in});
    int32_t b = bias ? param(h, "bias", DM_FLOAT, 1, &out) : -1;
    int32_t wt = op(h, DM_OP_Transpose, 1, w);
    attr_ints(h, "perm", INTS(1, 0));
    if (!bias)
        h->out_name = name;
    int32_t y = op(h, DM_OP_MatMul, 2, x, wt);
    if (bias) {
        h->out_name = name;
        y = op(h, DM_OP_Add, 2, b, y);
    }
    return tied < 0 ? lora(h, x, in, out, y, LB_LINEAR) : y;
}

/* transformers' Conv1D(nf, nx) (GPT-2): addmm(b, x, W [nx, nf]). */
static int32_t conv1d(struct hf *h, int32_t x, int64_t nx, int64_t nf)
{
    /* bitsandbytes and gptq replace Conv1D too, as a linear nx -> nf */
    if (quantized(h, -1, NULL, true))
        return lora(h, x, nx, nf, qlinear(h, x, nx, nf, true, NULL), lora_base(h));
    int32_t w = param(h, "weight", DM_FLOAT, 2, (int64_t[]){nx, nf});
    int32_t b = param(h, "bias", DM_FLOAT, 1, &nf);
    int32_t y = op(h, DM_OP_MatMul, 2, x, w);
    return lora(h, x, nx, nf, op(h, DM_OP_Add, 2, b, y), LB_LINEAR);
}

static int32_t transpose(struct hf *h, int32_t x, int n, const int64_t *perm)
{
    int32_t y = op(h, DM_OP_Transpose, 1, x);
    attr_ints(h, "perm", n, perm);
    return y;
}

static int32_t reshape(struct hf *h, int32_t x, int n, const int64_t *shape)
{
    int32_t s = const_ints(h, n, shape);
    return op(h, DM_OP_Reshape, 2, x, s);
}

static int32_t unsqueeze(struct hf *h, int32_t x, int n, const int64_t *axes)
{
    int32_t a = const_ints(h, n, axes);
    return op(h, DM_OP_Unsqueeze, 2, x, a);
}

/* nn.functional.dropout(p): returns its input when p == 0 (ATen's
 * _dropout_impl), so no node then; identity in eval mode. */
static int32_t dropout(struct hf *h, int32_t x, double p)
{
    if (p <= 0)
        return x;
    int32_t r = const_f(h, p);
    return op(h, DM_OP_Dropout, 2, x, r);
}

/* The attention core on permuted [B, H, S, D] views of q, k and v. sdpa: one
 * fused Attention node, which takes the strided views as they are. eager:
 * torch.matmul copies each permuted operand (the reshape of a non-contiguous
 * tensor) and BmmBackward keeps the copies; heads_copy makes them. */
static int32_t fused_attention(struct hf *h, const int32_t qkv[3], bool causal)
{
    int32_t o = op(h, DM_OP_Attention, 3, qkv[0], qkv[1], qkv[2]);
    attr_i(h, "is_causal", causal);
    return o;
}

/* flash_attention_forward of transformers 4.51 (integrations/
 * flash_attention.py) on q [B, H, S, D] and k, v [B, KV, S, D]: each
 * .transpose(1, 2) back to [B, S, H, D], the memory order projections and
 * rotary results have, so flash_attn_func's maybe_contiguous copies nothing
 * (it copies only a tensor whose last dim is strided); keys and values keep
 * their KV heads (FlashAttention-2 takes grouped heads); no mask (the
 * models' _update_causal_mask returns None for flash_attention_2 unless
 * the attention_mask has padding); `causal` for the decoders, not for
 * DistilBERT's and ViT's encoders. The node is marked for the schedule:
 * always the flash kernel, and with KV < H backward's H-headed dk and dv. */
static int32_t flash_attention(struct hf *h, int32_t q, int32_t k, int32_t v, double scale,
                               bool causal)
{
    int32_t o = fused_attention(h, (int32_t[]){q, k, v}, causal);
    attr_f(h, "scale", scale);
    attr_i(h, "flash_attn", 1);
    return o;
}

static int32_t repeat_kv(struct hf *h, int32_t x, int64_t n_rep, int64_t heads, int64_t d);

static const char *const backend_name[] = {"auto", "flash", "efficient", "cudnn", "math"};

/* Whether PyTorch takes the kernel --sdpa-backend forces for one
 * F.scaled_dot_product_attention call (q [B, H, S, D], k [B, KV, S, D], v's
 * head dim Dv; `masked`: an attn_mask is passed; KV < H: grouped heads under
 * enable_gqa). select_sdp_backend (aten/src/ATen/native/transformers/cuda/
 * sdp_utils.cpp) tries only the enabled kernel and otherwise fails with "No
 * available kernel"; this fails the estimate the same way. Conditions, from
 * sdp_utils.cpp's can_use_*_attention: flash: no attn_mask
 * (check_for_attn_mask), fp16/bf16 (check_dtypes_low_precision), sm80 to
 * sm121 (check_flash_attention_hardware_support), one head dim for q, k, v
 * up to 256 (check_head_dim_size_flash; 128 before PyTorch 2.2), and in
 * training on sm86-sm89/sm120 no head dim in (192, 224], nor in (224, 256]
 * with dropout. cuDNN: fp16/bf16, sm80 to sm121 (check_cudnn_hardware_support),
 * head dims up to 128 and multiples of 8 (check_cudnn_tensor_shapes: 256 only
 * with cuDNN above 9.22 on sm90/sm100; the H200's PyTorch 2.11 bundles 9.19).
 * memory-efficient: sm50 and later (check_mem_efficient_hardware_support),
 * bf16 from sm80, and no grouped heads: measured on the H200 with PyTorch
 * 2.11, Qwen3-0.6B bf16 forced to it fails with "No available kernel"
 * (tools/gpu/results/hf-more.jsonl; later sources pass supports_gqa to
 * check_batch_size_and_num_heads_dense). Masks and dropout are taken by
 * cuDNN and the memory-efficient kernel. */
static bool sdpa_forced_ok(struct hf *h, int64_t H, int64_t KV, int64_t D, int64_t Dv, bool masked,
                           double drop)
{
    enum dnnmem_sdpa_backend b = h->backend;
    if (b == DNNMEM_SDPA_AUTO || b == DNNMEM_SDPA_MATH)
        return true;
    bool half = h->half || h->g->quant_fp16_default;
    int cc = h->cc;
    const char *why = NULL;
    char buf[96];
    if (b == DNNMEM_SDPA_FLASH) {
        int64_t lim = h->torch >= 202 ? 256 : 128;
        if (masked)
            why = "the model passes an attn_mask (check_for_attn_mask)";
        else if (!half)
            why = "float32 q, k, v: it takes fp16/bf16 (check_dtypes_low_precision)";
        else if (cc < 80 || cc > 121)
            why = "it needs compute capability 8.0 to 12.1 "
                  "(check_flash_attention_hardware_support)";
        else if (D != Dv || D > lim) {
            snprintf(buf, sizeof buf, "head dim %lld/%lld: one for q, k, v, at most %lld "
                     "(check_head_dim_size_flash)", (long long)D, (long long)Dv, (long long)lim);
            why = buf;
        } else if (h->train && ((cc >= 86 && cc <= 89) || cc == 120 || cc == 121) &&
                   ((D > 192 && D <= 224) || (D > 224 && drop > 0)))
            why = "training with this head dim on sm86-sm89/sm120 "
                  "(check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120)";
    } else if (b == DNNMEM_SDPA_CUDNN) {
        if (!half)
            why = "float32 q, k, v: it takes fp16/bf16 (check_dtypes_low_precision)";
        else if (cc < 80 || cc > 121)
            why = "it needs compute capability 8.0 to 12.1 (check_cudnn_hardware_support)";
        else if (D > 128 || Dv > 128 || D % 8 || Dv % 8) {
            snprintf(buf, sizeof buf, "head dim %lld/%lld: at most 128 and a multiple of 8 "
                     "(check_cudnn_tensor_shapes)", (long long)D, (long long)Dv);
            why = buf;
        }
    } else if (b == DNNMEM_SDPA_EFFICIENT) {
        if (KV != H)
            why = "grouped keys and values under enable_gqa (transformers 4.54+): it "
                  "takes one head count for q, k, v";
        else if (cc < 50)
            why = "it needs compute capability 5.0 or later "
                  "(check_mem_efficient_hardware_support)";
        else if (h->bf16 && cc < 80)
            why = "bf16 q, k, v before sm80: it takes fp16 and float32 there";
    }
    if (!why)
        return true;
    fail(h, DNNMEM_E_UNSUPPORTED,
         "--sdpa-backend %s: PyTorch has no such kernel for this model's attention (%s): "
         "\"No available kernel\"; use --sdpa-backend auto or math",
         backend_name[b], why);
    return false;
}

/* PyTorch's math kernel (_scaled_dot_product_attention_math in
 * aten/src/ATen/native/transformers/attention.cpp), run for sdpa when forced
 * (--sdpa-backend math) or where no fused kernel takes grouped heads
 * (gqa_attention): fp16/bf16 q, k and v upcast to float32 ("Keep query, key,
 * value in high precision for accuracy", unless
 * allowFP16BF16ReductionMathSDP, off by default), q * sqrt(scale), k and v
 * repeat_interleave'd to H heads under enable_gqa (KV < H), k^T * sqrt(scale),
 * the [B, H, S, S] scores, the attn_mask added, softmax, dropout, times v,
 * cast back to the input dtype. MmBackward keeps the scaled q and k and the
 * repeated v; softmax its output. k, v: [B, KV, S, D]. */
static int32_t math_attention(struct hf *h, int32_t q, int32_t k, int32_t v, int32_t mask,
                              int64_t H, int64_t KV, int64_t D, double scale, double drop)
{
    bool half = h->half || h->g->quant_fp16_default;
    if (half) {
        q = op(h, DM_OP_Cast, 1, q);
        attr_i(h, "to", DM_FLOAT);
        keep32(h, q);
    }
    int32_t qin = q, r = const_f(h, sqrt(scale));
    q = op(h, DM_OP_Mul, 2, q, r);
    keep32(h, q);
    int32_t kv[2] = {k, v};
    for (int j = 0; j < 2; j++) {
        if (half) {
            kv[j] = op(h, DM_OP_Cast, 1, kv[j]);
            attr_i(h, "to", DM_FLOAT);
            keep32(h, kv[j]);
        }
        if (KV != H) {
            kv[j] = repeat_kv(h, kv[j], H / KV, H, D);
            keep32(h, kv[j]);
        }
    }
    int32_t kt = transpose(h, kv[0], INTS(0, 1, 3, 2));
    kt = op(h, DM_OP_Mul, 2, kt, r);
    keep32(h, kt);
    int32_t s = op(h, DM_OP_MatMul, 2, q, kt);
    keep32(h, s);
    if (mask >= 0) { /* attn.add_(attn_mask): taken out of place here */
        s = op(h, DM_OP_Add, 2, s, mask);
        keep32(h, s);
    }
    int32_t p = op(h, DM_OP_Softmax, 1, s);
    attr_i(h, "axis", -1);
    keep32(h, p);
    p = dropout(h, p, drop);
    keep32(h, p);
    int32_t o = op(h, DM_OP_MatMul, 2, p, kv[1]);
    keep32(h, o);
    if (half)
        o = op(h, DM_OP_CastLike, 2, o, qin);
    return o;
}

/* One F.scaled_dot_product_attention call on q [B, H, S, D] and k, v
 * [B, KV, S, D] (KV < H: enable_gqa): the fused Attention node (with the
 * attn_mask as a fourth input when mask >= 0, the forced kernel marked for
 * the schedule), or under --sdpa-backend math the math kernel's ops. scale
 * 0: the default 1/sqrt(D), not recorded on the node. Dv: v's head dim. */
static int32_t sdpa_attention(struct hf *h, const int32_t qkv[3], int32_t mask, bool causal,
                              int64_t H, int64_t KV, int64_t D, int64_t Dv, double scale,
                              double drop)
{
    if (h->backend == DNNMEM_SDPA_MATH)
        return math_attention(h, qkv[0], qkv[1], qkv[2], mask, H, KV, D,
                              scale > 0 ? scale : 1.0 / sqrt((double)D), drop);
    if (!sdpa_forced_ok(h, H, KV, D, Dv, mask >= 0, drop))
        return -1;
    int32_t o = mask >= 0 ? op(h, DM_OP_Attention, 4, qkv[0], qkv[1], qkv[2], mask)
                          : op(h, DM_OP_Attention, 3, qkv[0], qkv[1], qkv[2]);
    attr_i(h, "is_causal", causal);
    if (scale > 0)
        attr_f(h, "scale", scale);
    if (h->backend != DNNMEM_SDPA_AUTO)
        attr_i(h, "sdpa_backend", h->backend);
    return o;
}

/* sdpa_attention_forward from transformers 4.54 (PR #39412, use_gqa_in_sdpa)
 * on PyTorch 2.5+ when no mask is passed: keys and values keep their KV heads
 * and F.scaled_dot_product_attention gets enable_gqa=True. The flash and
 * cuDNN kernels take grouped heads; the memory-efficient one does not
 * (sdp_utils.cpp), so where no fused kernel can run (float32, before sm80,
 * head dim above 256) PyTorch takes the math kernel (math_attention), as it
 * does when forced to. Measured (tools/gpu/results, transformers 5.17,
 * PyTorch 2.11, H200): TinyLlama's float32 sdpa step peaks at its eager
 * step's bytes; Qwen3-0.6B's bf16 sdpa step without the repeat_kv copies
 * within 0.1%. q: the caller's [B, H, S, D] (its contiguous copy on the fused
 * path: a q-sized tensor per layer stays in the 5.17 measurement). Returns -1
 * where repeat_kv still runs. */
static int32_t gqa_attention(struct hf *h, int32_t q, int32_t k, int32_t v, int64_t H, int64_t KV,
                             int64_t D, double scale, double drop)
{
    if (!h->gqa_sdpa || H == KV)
        return -1;
    bool half = h->half || h->g->quant_fp16_default;
    bool fused = h->backend == DNNMEM_SDPA_AUTO ? half && h->cc >= 80 && D <= 256
                                                 : h->backend != DNNMEM_SDPA_MATH;
    if (fused) {
        /* up to 4.55 .contiguous() copies q (the rotary result in
         * [B, S, H, D] order); from 4.56 the kernel takes it as it is */
        int32_t qc = h->sdpa_as_is ? q : reshape(h, q, INTS(0, H, -1, D));
        return sdpa_attention(h, (int32_t[]){qc, k, v}, -1, true, H, KV, D, D, scale, drop);
    }
    return math_attention(h, q, k, v, -1, H, KV, D, scale, drop);
}

static void heads_copy(struct hf *h, const int32_t qkv[3], int64_t heads, int64_t d, int32_t out[3])
{
    for (int j = 0; j < 3; j++)
        out[j] = reshape(h, qkv[j], INTS(0, heads, -1, d));
}

/* ---- the Llama family ----------------------------------------------------------- */

struct llama {
    const char *type;
    int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim;
    double eps, attn_drop, theta;
    bool tie, qkv_bias, o_bias, mlp_bias, qk_norm, use_cache;
    const struct moe *moe; /* MoE layers (Mixtral, Qwen-MoE, DeepSeek) or NULL */
    const struct mla *mla; /* DeepSeek's latent attention or NULL */
};

/* A Python variable (a local of the module forward that ends at node
 * `until`) keeps `x` alive until then. */
static void hold(struct hf *h, int32_t x, int32_t until)
{
    if (h->st == DNNMEM_OK && x >= 0 && until >= 0 && h->g->tensors[x].held_until < until + 1)
        h->g->tensors[x].held_until = until + 1;
}

static int32_t last_node(struct hf *h)
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
static int32_t rms_norm(struct hf *h, int32_t x, int64_t dim, double eps)
{
    int32_t w = param(h, "weight", DM_FLOAT, 1, &dim);
    int32_t x32 = op(h, DM_OP_Cast, 1, x);
    attr_i(h, "to", DM_FLOAT);
    keep32(h, x32);
    int32_t two = const_f(h, 2.0);
    int32_t p = op(h, DM_OP_Pow, 2, x32, two);
    keep32(h, p);
    int32_t m = op(h, DM_OP_ReduceMean, 1, p);
    attr_ints(h, "axes", INTS(-1));
    attr_i(h, "keepdims", 1);
    keep32(h, m);
    int32_t e = const_f(h, eps);
    int32_t a = op(h, DM_OP_Add, 2, m, e);
    keep32(h, a);
    int32_t s = op(h, DM_OP_Sqrt, 1, a);
    keep32(h, s);
    int32_t r = op(h, DM_OP_Reciprocal, 1, s);
    keep32(h, r);
    int32_t y = op(h, DM_OP_Mul, 2, x32, r);
    keep32(h, y);
    int32_t y32 = y;
    y = op(h, DM_OP_CastLike, 2, y, x);
    y = op(h, DM_OP_Mul, 2, w, y);
    /* forward's locals `variance` and `hidden_states` (the float32
     * normalised rows, rebound only by the return's .to()) live until it
     * returns (measured: the H200 trace of Llama-3.2-1B bf16 frees the
     * 16 MiB float32 rows and the variance after `weight * ...`) */
    hold(h, m, last_node(h));
    hold(h, y32, last_node(h));
    return y;
}

static int32_t narrow(struct hf *h, int32_t x, int64_t axis, int64_t start, int64_t length);

/* rotate_half(x) = cat((-x2, x1), -1) of the halves of the last dim,
 * x[..., : d // 2] and x[..., d // 2 :]: basic slicing, views in PyTorch
 * (Narrow), so only -x2 (half of x) and the cat allocate (measured: the
 * H200 trace of Llama-3.2-1B bf16, tools/gpu/results/traces.tar.gz: q's
 * rotate_half allocates 4 MiB at the Neg and 8 MiB at the cat, nothing
 * for the halves). SliceBackward0 makes a grad shaped like x for each. */
static int32_t rotate_half(struct hf *h, int32_t x, int64_t d)
{
    int32_t x1 = narrow(h, x, -1, 0, d / 2);
    int32_t x2 = narrow(h, x, -1, d / 2, d - d / 2);
    int32_t n = op(h, DM_OP_Neg, 1, x2);
    int32_t c = op(h, DM_OP_Concat, 2, n, x1);
    attr_i(h, "axis", -1);
    return c;
}

/* apply_rotary_pos_emb: x * cos + rotate_half(x) * sin. */
static int32_t rope(struct hf *h, int32_t x, int32_t cos, int32_t sin, int64_t d,
                    const char *name)
{
    int32_t a = op(h, DM_OP_Mul, 2, x, cos);
    int32_t r = rotate_half(h, x, d);
    int32_t b = op(h, DM_OP_Mul, 2, r, sin);
    h->out_name = name;
    return op(h, DM_OP_Add, 2, a, b);
}

/* repeat_kv: x[:, :, None].expand(B, kv, n_rep, S, D).reshape(B, kv * n_rep, S, D).
 * The expand is a view and the reshape copies in PyTorch; here Expand
 * allocates and the Reshape of its contiguous result is a view: one
 * allocation of the repeated size either way. */
static int32_t repeat_kv(struct hf *h, int32_t x, int64_t n_rep, int64_t heads, int64_t d)
{
    if (n_rep == 1)
        return x;
    int32_t u = unsqueeze(h, x, INTS(2));
    int32_t s = const_ints(h, INTS(1, 1, n_rep, 1, 1));
    int32_t e = op(h, DM_OP_Expand, 2, u, s);
    return reshape(h, e, INTS(0, heads, -1, d));
}

/* attn_weights = softmax(s, dim=-1, dtype=float32).to(query.dtype), one
 * statement. ATen's softmax with a dtype (aten/src/ATen/native/SoftMax.cpp)
 * runs an fp16 CUDA input through _softmax(half_to_float=True): float32 out,
 * no copy, and its backward returns fp16; any other 16-bit input (bf16, the
 * CPU) is converted to float32 first, a copy the softmax does not keep. The
 * float32 probabilities are what SoftmaxBackward keeps and the cast back is
 * what the next matmul keeps (no casts on float32). The variable still holds
 * the scores until .to() returns (measured: Llama-3.2-1B bf16 eager
 * inference on the H200, B 4, S 2048, was one [B, H, S, S] bf16 tensor, 1
 * GiB, over the estimate without it). */
static int32_t softmax_f32(struct hf *h, int32_t s, int32_t like)
{
    int32_t s32 = s;
    if (!h->half_to_float) {
        s32 = op(h, DM_OP_Cast, 1, s);
        attr_i(h, "to", DM_FLOAT);
        keep32(h, s32);
    }
    int32_t p = op(h, DM_OP_Softmax, 1, s32);
    attr_i(h, "axis", -1);
    keep32(h, p);
    p = op(h, DM_OP_CastLike, 2, p, like);
    hold(h, s, last_node(h));
    return p;
}

/* The KV cache's tensors (use_cache: the presents, named present.N.key and
 * present.N.value). Through transformers 4.51, DynamicCache.update's first
 * call appends the key and value states themselves, so the presents are
 * those tensors (views, often, of a projection's output, which they keep
 * alive), named as they are made: cache_at_make(name). From 5.0, each
 * DynamicLayer starts as an empty tensor and update() concatenates onto it
 * (transformers cache_utils.py, DynamicLayer.lazy_initialization and
 * update): the first update is a contiguous copy, which update returns and
 * the attention reads (key_states and value_states are rebound to it), and
 * the states are let go: cache_update(x, name). Measured with 5.17 on the
 * H200: GPT-2, whose presents had kept each layer's whole fused c_attn
 * output, was 3.9% over in training and 9.7% in inference without it. */
static const char *cache_at_make(const struct hf *h, const char *name)
{
    return h->cache_copy ? NULL : name;
}

static int32_t cache_update(struct hf *h, int32_t x, const char *name)
{
    if (!h->cache_copy || !name || x < 0)
        return x;
    h->out_name = name;
    int32_t y = op(h, DM_OP_Concat, 1, x);
    attr_i(h, "axis", -2);
    return y;
}

/* One of q, k, v: proj(x).view(B, S, -1, D) [-> norm] .transpose(1, 2). With
 * `bshd`, the transpose is left to the caller (see llama_attention). */
static int32_t head_proj(struct hf *h, const struct llama *c, int32_t x, const char *proj,
                         const char *norm, int64_t heads, const char *name, bool bshd)
{
    size_t s = enter(h, "%s", proj);
    int32_t y = linear(h, x, c->hidden, heads * c->head_dim, c->qkv_bias, -1, NULL);
    leave(h, s);
    y = reshape(h, y, INTS(0, 0, -1, c->head_dim));
    if (c->qk_norm && norm) {
        s = enter(h, "%s", norm);
        y = rms_norm(h, y, c->head_dim, c->eps);
        leave(h, s);
    }
    if (bshd)
        return y;
    h->out_name = name;
    return transpose(h, y, INTS(0, 2, 1, 3));
}

/* LlamaAttention.forward with eager_attention_forward. */
static int32_t llama_attention(struct hf *h, const struct llama *c, int layer, int32_t x,
                               int32_t cos, int32_t sin, int32_t mask, int32_t *attn_weights)
{
    struct dm_graph *g = h->g;
    int64_t D = c->head_dim, H = c->heads, KV = c->kv_heads;
    const char *kname = NULL, *vname = NULL;
    if (c->use_cache) { /* past_key_value.update(k, v) keeps them in the returned cache */
        kname = dm_arena_printf(&g->arena, "present.%d.key", layer);
        vname = dm_arena_printf(&g->arena, "present.%d.value", layer);
        if (!kname || !vname)
            return oom(h);
    }
    /* q and k are transposed views when apply_rotary_pos_emb runs, and
     * elementwise ops give their results the input's memory order
     * (TensorIterator), so q_embed and k_embed are [B, S, H, D] in memory,
     * seen as [B, H, S, D]: the rotary embedding is built on the
     * [B, S, H, D] tensors (cos, sin unsqueezed at 2) and transposed after,
     * the same bytes, and the transposed views stay non-contiguous */
    int32_t q = head_proj(h, c, x, "q_proj", "q_norm", H, NULL, true);
    int32_t k = head_proj(h, c, x, "k_proj", "k_norm", KV, NULL, true);
    int32_t v = head_proj(h, c, x, "v_proj", NULL, KV, cache_at_make(h, vname), false);
    int32_t q_states = q, k_states = k;
    q = rope(h, q, cos, sin, D, NULL);
    int32_t q_embed = q;
    q = transpose(h, q, INTS(0, 2, 1, 3));
    k = rope(h, k, cos, sin, D, NULL);
    h->out_name = cache_at_make(h, kname);
    k = transpose(h, k, INTS(0, 2, 1, 3));
    /* query_states, key_states = apply_rotary_pos_emb(...): the projections
     * are let go when it returns, after both rotations (measured: the H200
     * trace of Llama-3.2-1B frees q_proj's and k_proj's outputs together,
     * after k's rotation) */
    hold(h, q_states, last_node(h));
    hold(h, k_states, last_node(h));
    int32_t k_embed = k, v_states = v;
    k = cache_update(h, k, kname);
    v = cache_update(h, v, vname);
    /* key_states, value_states = past_key_values.update(...) (5.x: copies):
     * the rotated k and v_proj's output go when update returns, after both
     * copies (the same trace) */
    if (h->cache_copy && c->use_cache) {
        hold(h, k_embed, last_node(h));
        hold(h, v_states, last_node(h));
    }
    int32_t o, p = -1;
    int32_t kr = k, vr = v;
    if ((o = gqa_attention(h, q, k, v, H, KV, D, 1.0 / sqrt((double)D), c->attn_drop)) >= 0)
        goto out;
    /* flash_attention_forward takes grouped heads; 4.51's own
     * Qwen2MoeFlashAttention2 (modeling_qwen2_moe.py, copied from the old
     * Qwen2FlashAttention2) still runs repeat_kv first, then transposes the
     * repeated tensors into flash_attn_func as views */
    bool grouped = h->flash && strcmp(c->type, "qwen2_moe") != 0;
    kr = grouped ? k : repeat_kv(h, k, H / KV, H, D);
    vr = grouped ? v : repeat_kv(h, v, H / KV, H, D);
    /* torch.matmul folds a 4-D operand to [B * H, ., .] with reshape, which
     * copies a non-contiguous one, and BmmBackward keeps the copy: always q
     * (the rope result in [B, S, H, D] order), and without GQA k and v (the
     * repeated tensors of repeat_kv are contiguous) */
    /* 4.56+ sdpa: no .contiguous(), the kernel takes the views */
    bool as_is = h->flash || (h->sdpa && h->sdpa_as_is);
    if (!as_is)
        q = reshape(h, q, INTS(0, H, -1, D));
    if (H == KV && !as_is) {
        kr = reshape(h, k, INTS(0, H, -1, D));
        vr = reshape(h, v, INTS(0, H, -1, D));
    }
    if (h->flash) {
        o = flash_attention(h, q, kr, vr, 1.0 / sqrt((double)D), true);
    } else if (h->sdpa) {
        /* sdpa_attention_forward: query, key and value .contiguous() (the
         * same copies), then one F.scaled_dot_product_attention(is_causal,
         * dropout_p = attention_dropout in training, scale = head_dim**-0.5):
         * no mask, no scores, no probabilities; its output is the [B, S, H, D]
         * buffer the kernel wrote, so .transpose(1, 2).contiguous() copies
         * nothing */
        o = sdpa_attention(h, (int32_t[]){q, kr, vr}, -1, true, H, H, D, D,
                           1.0 / sqrt((double)D), c->attn_drop);
    } else {
        int32_t kt = transpose(h, kr, INTS(0, 1, 3, 2));
        int32_t s = op(h, DM_OP_MatMul, 2, q, kt);
        int32_t scale = const_f(h, 1.0 / sqrt((double)D)); /* self.scaling = head_dim**-0.5 */
        s = op(h, DM_OP_Mul, 2, s, scale);
        s = op(h, DM_OP_Add, 2, s, mask);
        p = softmax_f32(h, s, q);
        p = dropout(h, p, c->attn_drop);
        o = op(h, DM_OP_MatMul, 2, p, vr);
    }
out:
    o = transpose(h, o, INTS(0, 2, 1, 3)); /* .transpose(1, 2).contiguous() */
    o = reshape(h, o, INTS(0, 0, -1));      /* eager: copies the transposed tensor */
    /* the attention function's locals key_states, value_states (the
     * repeat_kv results) live until it returns */
    hold(h, kr, last_node(h));
    hold(h, vr, last_node(h));
    size_t sc = enter(h, "o_proj");
    o = linear(h, o, H * D, c->hidden, c->o_bias, -1, NULL);
    leave(h, sc);
    /* and LlamaAttention.forward's query_states (the rotated q, which the
     * matmul copies) until it returns */
    hold(h, q_embed, last_node(h));
    *attn_weights = p;
    return o;
}

static int32_t llama_mlp(struct hf *h, const struct llama *c, int32_t x)
{
    size_t s = enter(h, "gate_proj");
    int32_t gate = linear(h, x, c->hidden, c->inter, c->mlp_bias, -1, NULL);
    leave(h, s);
    /* ACT2FN["silu"] = nn.SiLU: one op keeping its input (SiluBackward0) */
    s = enter(h, "act_fn");
    int32_t act = op(h, DM_OP_Silu, 1, gate);
    leave(h, s);
    s = enter(h, "up_proj");
    int32_t up = linear(h, x, c->hidden, c->inter, c->mlp_bias, -1, NULL);
    leave(h, s);
    int32_t m = op(h, DM_OP_Mul, 2, act, up);
    s = enter(h, "down_proj");
    m = linear(h, m, c->inter, c->hidden, c->mlp_bias, -1, NULL);
    leave(h, s);
    return m;
}

/* ---- mixture of experts and multi-head latent attention ------------------------- */

/* The MoE families share the Llama decoder (embeddings, rotary embedding,
 * masks, norms, lm_head) and differ in the layer's feed-forward and, for
 * DeepSeek, in the attention:
 *  - "mixtral": MixtralSparseMoeBlock (block_sparse_moe) of transformers 4.51;
 *  - "qwen2_moe", "qwen3_moe": Qwen2MoeSparseMoeBlock (with the shared expert
 *    and its sigmoid gate) and Qwen3MoeSparseMoeBlock of 4.51, on the layers
 *    that decoder_sparse_step and mlp_only_layers choose;
 *  - "deepseek_v2", "deepseek_v3": DeepseekV3Attention (MLA) and
 *    DeepseekV3MoE / DeepseekV3TopkRouter as transformers' native
 *    modeling_deepseek_v3.py runs them (4.51-4.57, one nn.Module per
 *    expert), with V2's softmax scoring and greedy or group-limited-greedy
 *    top-k in the same module; first_k_dense_replace dense layers.
 * The expert loop: for each expert, torch.where on its slice of the one-hot
 * expert mask gives the tokens routed to it (nonzero: an int64 [n, 2]),
 * x[tokens] gathers them, the expert MLP runs on them, the result is scaled
 * by their routing weights and index_add_ed into a zeros [tokens, hidden]
 * in place. How many tokens each expert gets depends on the data: the
 * ExpertTokens op assumes uniform routing, ceil(tokens * top_k / experts)
 * for every expert in every MoE layer, unless the dim "expert_tokens" is
 * bound (--dim expert_tokens=N, at most the tokens of the batch). */

enum topk_method { TOPK_GREEDY, TOPK_GROUP_LIMITED, TOPK_NOAUX_TC };

struct moe {
    enum { MOE_MIXTRAL, MOE_QWEN, MOE_DEEPSEEK } kind;
    int64_t experts, top_k, inter;  /* routed experts, per token, their intermediate size */
    int64_t shared_inter;           /* the shared expert's intermediate size, 0: none */
    bool shared_gate;               /* Qwen2-MoE's sigmoid shared_expert_gate */
    bool norm_topk;                 /* routing weights renormalised to sum 1 */
    int64_t sparse_step;            /* Qwen: MoE where (layer + 1) % step == 0 */
    json_t *mlp_only;               /* Qwen: layers with a dense MLP (a JSON list) or NULL */
    int64_t first_dense, freq;      /* DeepSeek: first_k_dense_replace, moe_layer_freq */
    bool sigmoid;                   /* DeepSeek: scoring_func sigmoid (else softmax) */
    enum topk_method method;
    int64_t groups, topk_group;
    double scale;                   /* routed_scaling_factor */
    bool aux;                       /* output_router_logits: the load-balancing loss */
    double aux_coef;                /* router_aux_loss_coef */
};

struct mla {
    int64_t q_lora, kv_lora, nope, rope, v; /* q_lora 0: q_proj */
    bool bias;                              /* attention_bias */
};

/* Whether decoder layer i has the sparse MoE block. */
static bool moe_layer(const struct moe *m, int64_t i)
{
    if (m->kind == MOE_DEEPSEEK)
        return i >= m->first_dense && i % m->freq == 0;
    size_t k;
    json_t *v;
    json_array_foreach(m->mlp_only, k, v)
    {
        if (json_is_integer(v) && json_integer_value(v) == i)
            return false;
    }
    return (i + 1) % m->sparse_step == 0;
}

/* act_fn(gate(x)) * up(x) then down, the MLP of every expert (Mixtral's
 * w1, w3, w2); names: gate, up, down. */
static int32_t swiglu(struct hf *h, int32_t x, int64_t hidden, int64_t inter,
                      const char *const names[3])
{
    size_t s = enter(h, "%s", names[0]);
    int32_t gate = linear(h, x, hidden, inter, false, -1, NULL);
    leave(h, s);
    s = enter(h, "act_fn");
    int32_t act = op(h, DM_OP_Silu, 1, gate);
    leave(h, s);
    s = enter(h, "%s", names[1]);
    int32_t up = linear(h, x, hidden, inter, false, -1, NULL);
    leave(h, s);
    int32_t m = op(h, DM_OP_Mul, 2, act, up);
    s = enter(h, "%s", names[2]);
    m = linear(h, m, inter, hidden, false, -1, NULL);
    leave(h, s);
    return m;
}

/* TopK along the last axis: values in *values (or NULL), indices returned. */
static int32_t topk(struct hf *h, int32_t x, int64_t k, int32_t *values)
{
    int32_t kk = const_ints(h, INTS(k));
    struct dm_node *n = node(h, DM_OP_TopK, 2, (int32_t[]){x, kk}, 2);
    if (!n)
        return -1;
    int32_t v = n->out[0], i = n->out[1];
    attr_i(h, "axis", -1);
    if (values)
        *values = v;
    return i;
}

/* x.sum(dim=-1, keepdim) */
static int32_t sum_last(struct hf *h, int32_t x, bool keepdims)
{
    int32_t r = op(h, DM_OP_ReduceSum, 2, x, const_ints(h, INTS(-1)));
    attr_i(h, "keepdims", keepdims);
    return r;
}

/* The expert loop on x2 [N, hidden] (see above): routing weights rw [N, k],
 * chosen experts sel int64 [N, k], into final [N, hidden], which it
 * returns. DeepSeek's mask is permuted (2, 0, 1), the others' (2, 1, 0);
 * DeepSeek's float32 weights make each weighted output float32. locals[]
 * gets what stays referenced until the enclosing function returns: the
 * expert mask and the loop variables of the last iteration (a Python for
 * loop leaves them bound): its token indices, gathered input, weights and
 * output. */
#define LOOP_LOCALS 6
static int32_t expert_loop(struct hf *h, const struct moe *m, int64_t hidden, int32_t x2, int32_t rw,
                           int32_t sel, int32_t final, int32_t locals[LOOP_LOCALS])
{
    bool ds = m->kind == MOE_DEEPSEEK;
    /* one_hot(selected, num_classes=E): int64 [N, k, E]; the values input
     * gives OneHot its type only, a scalar here (PyTorch makes no such
     * tensor, and a one-element constant stays on the host) */
    int32_t depth = const_i(h, m->experts), vals = const_i(h, 1);
    int32_t mask = op(h, DM_OP_OneHot, 3, sel, depth, vals);
    attr_i(h, "axis", -1);
    mask = ds ? transpose(h, mask, INTS(2, 0, 1)) : transpose(h, mask, INTS(2, 1, 0));
    int32_t last = const_ints(h, INTS(-1));
    int32_t sym = dm_graph_symbol(h->g, "expert_tokens"); /* after batch and seq */
    if (sym < 0)
        return oom(h);
    static const char *const mixtral[3] = {"w1", "w3", "w2"}, *const proj[3] = {"gate_proj", "up_proj",
                                                                               "down_proj"};
    for (int64_t e = 0; e < m->experts && h->st == DNNMEM_OK; e++) {
        size_t s = enter(h, "experts.%lld", (long long)e);
        struct dm_node *n = node(h, DM_OP_ExpertTokens, 1, &mask, 2);
        if (!n)
            break;
        int32_t nz = n->out[0], tok = n->out[1];
        attr_i(h, "token_axis", ds ? 1 : 2);
        attr_i(h, "sym", sym);
        int32_t w = -1;
        if (ds) /* expert_weights = topk_weights[token_indices, weight_indices] */
            w = op(h, DM_OP_GatherND, 2, rw, nz);
        int32_t cur = op(h, DM_OP_Gather, 2, x2, tok); /* hidden_states[top_x] */
        int32_t out = swiglu(h, cur, hidden, m->inter, m->kind == MOE_MIXTRAL ? mixtral : proj);
        if (!ds) /* routing_weights[top_x, idx, None] */
            w = op(h, DM_OP_GatherND, 2, rw, nz);
        int32_t w1 = op(h, DM_OP_Unsqueeze, 2, w, last);
        int32_t y = op(h, DM_OP_Mul, 2, out, w1);
        if (ds)
            keep32(h, y); /* bf16 output times float32 weights: float32 */
        final = op(h, DM_OP_IndexAdd, 3, final, tok, y);
        attr_i(h, "axis", 0);
        if (ds)
            keep32(h, final);
        leave(h, s);
        /* DeepSeek binds expert_weights, expert_input, expert_output and
         * weighted_output; Mixtral and Qwen current_state and
         * current_hidden_states (the weighted output) */
        int32_t last_iter[LOOP_LOCALS] = {mask, nz, cur, y, ds ? w : -1, ds ? out : -1};
        memcpy(locals, last_iter, sizeof last_iter);
    }
    if (m->experts < 1)
        locals[0] = mask;
    return final;
}

/* zeros [N, hidden] like x2 (torch.zeros / zeros_like), float32 with `f32` */
static int32_t zeros_like(struct hf *h, int32_t x2, bool f32)
{
    int32_t shape = op(h, DM_OP_Shape, 1, x2);
    int32_t z = op(h, DM_OP_ConstantOfShape, 1, shape);
    if (f32)
        keep32(h, z);
    return z;
}

/* MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock
 * on x [B, S, hidden]; *router: the router logits, which the decoder layer
 * holds until it returns. */
static int32_t sparse_moe(struct hf *h, const struct llama *c, const struct moe *m, int32_t x,
                          int32_t *router)
{
    int64_t E = c->hidden;
    int32_t x2 = reshape(h, x, INTS(-1, E)); /* hidden_states.view(-1, hidden_dim) */
    size_t s = enter(h, "gate");
    int32_t logits = linear(h, x2, E, m->experts, false, -1, NULL);
    leave(h, s);
    /* F.softmax(router_logits, dim=1, dtype=torch.float): a float32 copy
     * first in a 16-bit run; topk; the in-place renormalisation; .to(dtype) */
    int32_t l32 = op(h, DM_OP_Cast, 1, logits);
    attr_i(h, "to", DM_FLOAT);
    keep32(h, l32);
    int32_t rw = op(h, DM_OP_Softmax, 1, l32);
    attr_i(h, "axis", 1);
    keep32(h, rw);
    int32_t vals;
    int32_t sel = topk(h, rw, m->top_k, &vals);
    keep32(h, vals);
    rw = vals;
    if (m->norm_topk) {
        rw = op(h, DM_OP_Div, 2, rw, sum_last(h, rw, true));
        keep32(h, rw);
    }
    rw = op(h, DM_OP_CastLike, 2, rw, x2);
    int32_t final = zeros_like(h, x2, false);
    int32_t locals[LOOP_LOCALS] = {-1, -1, -1, -1, -1, -1};
    final = expert_loop(h, m, E, x2, rw, sel, final, locals);
    if (m->shared_inter) {
        static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
        s = enter(h, "shared_expert");
        int32_t sh = swiglu(h, x2, E, m->shared_inter, proj);
        leave(h, s);
        if (m->shared_gate) {
            s = enter(h, "shared_expert_gate");
            int32_t g = linear(h, x2, E, 1, false, -1, NULL);
            leave(h, s);
            sh = op(h, DM_OP_Mul, 2, op(h, DM_OP_Sigmoid, 1, g), sh);
        }
        final = op(h, DM_OP_Add, 2, final, sh);
    }
    final = op(h, DM_OP_Reshape, 2, final, op(h, DM_OP_Shape, 1, x));
    /* the block's locals (routing weights, selected experts, the expert
     * mask, the last expert's loop variables) until it returns */
    hold(h, rw, last_node(h));
    hold(h, sel, last_node(h));
    for (int j = 0; j < LOOP_LOCALS; j++)
        hold(h, locals[j], last_node(h));
    *router = logits;
    return final;
}

/* DeepseekV3TopkRouter (and V2's softmax / greedy routing) on x2 [N, hidden]:
 * the routing weights, float32 [N, k], and *sel, the experts. */
static int32_t deepseek_router(struct hf *h, const struct moe *m, int64_t E, int32_t x2, int32_t *sel)
{
    size_t s = enter(h, "gate");
    int32_t w = param(h, "weight", DM_FLOAT, 2, (int64_t[]){m->experts, E});
    int32_t bias = -1;
    if (m->method == TOPK_NOAUX_TC) { /* a registered buffer */
        bias = param(h, "e_score_correction_bias", DM_FLOAT, 1, (int64_t[]){m->experts});
        if (bias >= 0)
            h->g->tensors[bias].frozen = true;
    }
    /* F.linear(hidden_states.type(float32), weight.type(float32)) */
    int32_t x32 = op(h, DM_OP_Cast, 1, x2);
    attr_i(h, "to", DM_FLOAT);
    keep32(h, x32);
    int32_t w32 = op(h, DM_OP_Cast, 1, w);
    attr_i(h, "to", DM_FLOAT);
    keep32(h, w32);
    int32_t logits = op(h, DM_OP_MatMul, 2, x32, transpose(h, w32, INTS(1, 0)));
    keep32(h, logits);
    int32_t scores = m->sigmoid ? op(h, DM_OP_Sigmoid, 1, logits) : op(h, DM_OP_Softmax, 1, logits);
    if (!m->sigmoid)
        attr_i(h, "axis", -1);
    keep32(h, scores);
    int64_t G = m->groups, per = m->experts / m->groups;
    int32_t rw = -1;
    if (m->method == TOPK_GREEDY) {
        *sel = topk(h, scores, m->top_k, &rw);
        keep32(h, rw);
    } else {
        /* noaux_tc: get_topk_indices runs under torch.no_grad() */
        int32_t sc = m->method == TOPK_NOAUX_TC ? op(h, DM_OP_Detach, 1, scores) : scores;
        if (m->method == TOPK_NOAUX_TC) {
            sc = op(h, DM_OP_Add, 2, sc, unsqueeze(h, bias, INTS(0)));
            keep32(h, sc);
        }
        int32_t gs = reshape(h, sc, INTS(-1, G, per)), top2 = -1;
        if (m->method == TOPK_NOAUX_TC) { /* .topk(2, dim=-1)[0].sum(dim=-1) */
            topk(h, gs, 2, &top2);
            keep32(h, top2);
            gs = sum_last(h, top2, false);
        } else { /* .max(dim=-1).values */
            gs = op(h, DM_OP_ReduceMax, 2, gs, const_ints(h, INTS(-1)));
            attr_i(h, "keepdims", 0);
        }
        keep32(h, gs);
        topk(h, gs, m->topk_group, NULL); /* group_idx */
        /* zeros_like(group_scores).scatter_(1, group_idx, 1): the scatter is
         * in place, with a scalar, so the zeros are the only tensor */
        int32_t gm = zeros_like(h, gs, true);
        gm = unsqueeze(h, gm, INTS(-1));
        gm = op(h, DM_OP_Expand, 2, gm, const_ints(h, INTS(1, 1, per)));
        keep32(h, gm);
        gm = reshape(h, gm, INTS(-1, m->experts));
        int32_t b = op(h, DM_OP_Cast, 1, gm); /* ~score_mask.bool() */
        attr_i(h, "to", DM_BOOL);
        b = op(h, DM_OP_Not, 1, b);
        int32_t masked = op(h, DM_OP_Where, 3, b, const_f(h, 0.0), sc); /* masked_fill */
        keep32(h, masked);
        int32_t v;
        *sel = topk(h, masked, m->top_k, &v);
        keep32(h, v);
        if (m->method == TOPK_NOAUX_TC) { /* topk_weights = scores.gather(1, topk_indices) */
            rw = op(h, DM_OP_GatherElements, 2, scores, *sel);
            attr_i(h, "axis", 1);
        } else {
            rw = v;
        }
        keep32(h, rw);
    }
    if (m->norm_topk && (m->method == TOPK_NOAUX_TC || m->top_k > 1)) {
        int32_t den = op(h, DM_OP_Add, 2, sum_last(h, rw, true), const_f(h, 1e-20));
        keep32(h, den);
        rw = op(h, DM_OP_Div, 2, rw, den);
        keep32(h, rw);
    }
    rw = op(h, DM_OP_Mul, 2, rw, const_f(h, m->scale));
    keep32(h, rw);
    leave(h, s);
    return rw;
}

/* DeepseekV3MoE.forward on x [B, S, hidden]: the router, the routed experts
 * (moe(), into a float32 zeros_like, cast back), then + shared_experts(x). */
static int32_t deepseek_moe(struct hf *h, const struct llama *c, const struct moe *m, int32_t x)
{
    int64_t E = c->hidden;
    int32_t sel = -1;
    int32_t x2r = reshape(h, x, INTS(-1, E)); /* the router's view(-1, hidden) */
    int32_t rw = deepseek_router(h, m, E, x2r, &sel);
    int32_t x2 = reshape(h, x, INTS(-1, E));
    int32_t final = zeros_like(h, x2, true);
    int32_t locals[LOOP_LOCALS] = {-1, -1, -1, -1, -1, -1};
    final = expert_loop(h, m, E, x2, rw, sel, final, locals);
    final = op(h, DM_OP_CastLike, 2, final, x2); /* .type(hidden_states.dtype) */
    for (int j = 0; j < LOOP_LOCALS; j++) /* moe()'s locals until it returns */
        hold(h, locals[j], last_node(h));
    final = op(h, DM_OP_Reshape, 2, final, op(h, DM_OP_Shape, 1, x));
    if (m->shared_inter) {
        static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
        size_t s = enter(h, "shared_experts");
        int32_t sh = swiglu(h, x, E, m->shared_inter, proj);
        leave(h, s);
        final = op(h, DM_OP_Add, 2, final, sh);
    }
    hold(h, rw, last_node(h));
    hold(h, sel, last_node(h));
    return final;
}

/* x.narrow(axis, start, length): a view (one part of torch.split). */
static int32_t narrow(struct hf *h, int32_t x, int64_t axis, int64_t start, int64_t length)
{
    int32_t y = op(h, DM_OP_Narrow, 1, x);
    attr_i(h, "axis", axis);
    attr_i(h, "start", start);
    attr_i(h, "length", length);
    return y;
}

/* DeepseekV3Attention.forward (multi-head latent attention). q from q_proj,
 * or q_a_proj, q_a_layernorm, q_b_proj; the compressed kv_a_proj_with_mqa
 * split into kv_lora_rank (normalised, decompressed by kv_b_proj into each
 * head's qk_nope keys and v_head_dim values) and one shared qk_rope key; the
 * rotary embedding on the rope parts; query and key concatenated
 * [B, H, S, qk_nope + qk_rope]. The cache holds these decompressed keys and
 * the values [B, H, S, v_head_dim] (past_key_value.update(key_states,
 * value_states)), not the latent vector; the values are a view of
 * kv_b_proj's whole output, which the cache thus keeps. torch.split's parts
 * are views (Narrow); the rope parts are built on [B, S, H, D] as the Llama
 * family's are, after the copy apply_rotary_pos_emb_interleave makes
 * (rope_interleave, DeepseekV3Config's default; V2's complex rotation
 * copies likewise). */
static int32_t mla_attention(struct hf *h, const struct llama *c, int layer, int32_t x, int32_t cos,
                             int32_t sin, int32_t mask, int32_t *attn_weights)
{
    const struct mla *a = c->mla;
    struct dm_graph *g = h->g;
    int64_t H = c->heads, E = c->hidden, Dq = a->nope + a->rope;
    const char *kname = NULL, *vname = NULL;
    if (c->use_cache) {
        kname = dm_arena_printf(&g->arena, "present.%d.key", layer);
        vname = dm_arena_printf(&g->arena, "present.%d.value", layer);
        if (!kname || !vname)
            return oom(h);
    }
    int32_t q;
    size_t s;
    if (!a->q_lora) {
        s = enter(h, "q_proj");
        q = linear(h, x, E, H * Dq, false, -1, NULL);
        leave(h, s);
    } else {
        s = enter(h, "q_a_proj");
        q = linear(h, x, E, a->q_lora, a->bias, -1, NULL);
        leave(h, s);
        s = enter(h, "q_a_layernorm");
        q = rms_norm(h, q, a->q_lora, 1e-6);
        leave(h, s);
        s = enter(h, "q_b_proj");
        q = linear(h, q, a->q_lora, H * Dq, false, -1, NULL);
        leave(h, s);
    }
    q = reshape(h, q, INTS(0, 0, H, Dq));
    int32_t q_pass = narrow(h, q, 3, 0, a->nope), q_rot = narrow(h, q, 3, a->nope, a->rope);
    s = enter(h, "kv_a_proj_with_mqa");
    int32_t ckv = linear(h, x, E, a->kv_lora + a->rope, a->bias, -1, NULL);
    leave(h, s);
    int32_t k_lat = narrow(h, ckv, 2, 0, a->kv_lora), k_rot = narrow(h, ckv, 2, a->kv_lora, a->rope);
    s = enter(h, "kv_a_layernorm");
    k_lat = rms_norm(h, k_lat, a->kv_lora, 1e-6);
    leave(h, s);
    s = enter(h, "kv_b_proj");
    int32_t kv = linear(h, k_lat, a->kv_lora, H * (a->nope + a->v), false, -1, NULL);
    leave(h, s);
    kv = reshape(h, kv, INTS(0, 0, H, a->nope + a->v));
    int32_t k_pass = narrow(h, kv, 3, 0, a->nope), v = narrow(h, kv, 3, a->nope, a->v);
    h->out_name = cache_at_make(h, vname);
    v = transpose(h, v, INTS(0, 2, 1, 3));
    /* the interleave's .reshape copies the strided rope parts (k_rot's
     * view(B, 1, S, rope) is the same copy here) */
    q_rot = reshape(h, q_rot, INTS(0, 0, H, a->rope));
    k_rot = reshape(h, k_rot, INTS(0, 0, 1, a->rope));
    q_rot = rope(h, q_rot, cos, sin, a->rope, NULL);
    k_rot = rope(h, k_rot, cos, sin, a->rope, NULL);
    int32_t k_rot_emb = k_rot;
    k_rot = op(h, DM_OP_Expand, 2, k_rot, const_ints(h, INTS(1, 1, H, 1))); /* .expand(.., H, ..) */
    int32_t qs = op(h, DM_OP_Concat, 2, q_pass, q_rot);
    attr_i(h, "axis", -1);
    int32_t q_states = q;
    q = transpose(h, qs, INTS(0, 2, 1, 3));
    int32_t k = op(h, DM_OP_Concat, 2, k_pass, k_rot);
    attr_i(h, "axis", -1);
    h->out_name = cache_at_make(h, kname);
    k = transpose(h, k, INTS(0, 2, 1, 3));
    k = cache_update(h, k, kname);
    v = cache_update(h, v, vname);
    /* query_states and key_states are torch.cat results, contiguous
     * [B, H, S, D] in PyTorch: the matmul folds them without a copy; the
     * values are a strided view of kv_b_proj's output, copied by matmul's
     * reshape (eager, a temporary of the second matmul) or .contiguous()
     * (sdpa) */
    int32_t o, p = -1;
    double scale = 1.0 / sqrt((double)Dq);
    if (h->sdpa) {
        int32_t vc = reshape(h, v, INTS(0, H, -1, a->v));
        o = sdpa_attention(h, (int32_t[]){q, k, vc}, -1, true, H, H, Dq, a->v, scale,
                           c->attn_drop);
    } else {
        int32_t kt = transpose(h, k, INTS(0, 1, 3, 2));
        int32_t sc = op(h, DM_OP_MatMul, 2, q, kt);
        sc = op(h, DM_OP_Mul, 2, sc, const_f(h, scale));
        sc = op(h, DM_OP_Add, 2, sc, mask);
        p = softmax_f32(h, sc, q);
        p = dropout(h, p, c->attn_drop);
        o = op(h, DM_OP_MatMul, 2, p, reshape(h, v, INTS(0, H, -1, a->v)));
    }
    o = transpose(h, o, INTS(0, 2, 1, 3));
    o = reshape(h, o, INTS(0, 0, -1));
    s = enter(h, "o_proj");
    o = linear(h, o, H * a->v, E, a->bias, -1, NULL);
    leave(h, s);
    /* the forward's locals live until it returns: q_states, compressed_kv,
     * k_pass and value_states (kv_b_proj's output), the rotated q_rot and
     * k_rot, query_states, key_states */
    int32_t locals[] = {q_states, ckv, k_pass, v, q_rot, k_rot_emb, qs, k};
    for (size_t j = 0; j < sizeof locals / sizeof locals[0]; j++)
        hold(h, locals[j], last_node(h));
    *attn_weights = p;
    return o;
}

/* LlamaForCausalLM (and Mistral, Qwen2, Qwen3). */
static int32_t build_llama(struct hf *h, const struct llama *c, int32_t ids)
{
    int64_t D = c->head_dim;
    if (c->moe && c->moe->aux) {
        h->g->router = dm_arena_array(&h->g->arena, (size_t)c->layers, sizeof *h->g->router);
        if (!h->g->router)
            return oom(h);
        h->g->router_top_k = c->moe->top_k;
        h->g->router_aux_coef = c->moe->aux_coef;
    }
    size_t top = enter(h, "model");
    size_t s = enter(h, "embed_tokens");
    int32_t emb_w = param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, c->hidden});
    int32_t x = op(h, DM_OP_Gather, 2, emb_w, ids);
    int32_t emb = x;
    leave(h, s);

    /* cache_position = arange(S); position_ids = cache_position.unsqueeze(0) */
    int32_t seq = op(h, DM_OP_Shape, 1, ids);
    attr_i(h, "start", 1);
    attr_i(h, "end", 2);
    int32_t zero = const_i(h, 0), one = const_i(h, 1);
    int32_t pos = op(h, DM_OP_Range, 3, zero, seq, one);
    int32_t pos_ids = unsqueeze(h, pos, INTS(0));

    /* with sdpa and no attention_mask, _update_causal_mask returns None
     * (_ignore_causal_mask_sdpa): the kernel applies is_causal itself */
    int32_t mask = -1;
    if (!h->sdpa) {
        /* the 4-D causal mask: full((S, S), finfo.min).triu(1)[None, None]
         * expanded to [B, 1, S, S] (a view): one [S, S] tensor of the model's
         * dtype, made once per forward (the in-place multiply by the cache-position
         * comparison makes no tensor that outlives it) */
        int32_t ss = op(h, DM_OP_Concat, 2, seq, seq);
        attr_i(h, "axis", 0);
        int32_t full = op(h, DM_OP_ConstantOfShape, 1, ss);
        struct dm_tensor *fill = dm_arena_alloc(&h->g->arena, sizeof *fill);
        struct dm_dim *fd = dm_arena_alloc(&h->g->arena, sizeof *fd);
        struct dm_value *fv = dm_arena_alloc(&h->g->arena, sizeof *fv);
        double *ff = dm_arena_alloc(&h->g->arena, sizeof *ff);
        if (!fill || !fd || !fv || !ff)
            return oom(h);
        *ff = -FLT_MAX;
        *fv = (struct dm_value){.n = 1, .is_float = true, .f = ff};
        *fd = (struct dm_dim){1, -1};
        *fill = (struct dm_tensor){.name = "value", .dtype = DM_FLOAT, .rank = 1, .dims = fd,
                                   .role = DM_ROLE_CONSTANT, .producer = -1, .value = fv};
        struct dm_attr *fa = attr(h, "value", DM_ATTR_TENSOR);
        if (fa)
            fa->t = fill;
        int32_t k1 = const_i(h, 1);
        int32_t tri = op(h, DM_OP_Trilu, 2, full, k1);
        attr_i(h, "upper", 1);
        int32_t axm = const_ints(h, INTS(0, 1));
        h->out_name = "causal_mask";
        mask = op(h, DM_OP_Unsqueeze, 2, tri, axm);
    }

    /* LlamaRotaryEmbedding: inv_freq is a non-persistent buffer on the
     * device, counted as a weight. The schedule treats whatever is computed
     * from a weight as a parameter view (no memory) and training would give
     * it a gradient, so the buffer is a weight no node reads, and the
     * computation reads the same values through a Constant (host-side, as
     * every input of this chain is known from the dims). forward runs under
     * no_grad: cos and sin are allocated once per forward, [1, S, D] each. */
    s = enter(h, "rotary_emb");
    int64_t half = D / 2;
    param(h, "inv_freq", DM_FLOAT, 1, &half);
    double *inv = malloc((size_t)half * sizeof *inv);
    if (!inv)
        return oom(h);
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0 / pow(c->theta, (double)(2 * i) / (double)D);
    int32_t invf = constant(h);
    attr_floats(h, "value_floats", (int)half, inv);
    free(inv);
    int32_t inv3 = unsqueeze(h, invf, INTS(0, 2));           /* [1, D/2, 1] */
    int32_t pos3 = unsqueeze(h, pos_ids, INTS(1));           /* [1, 1, S] */
    int32_t posf = op(h, DM_OP_Cast, 1, pos3);
    attr_i(h, "to", DM_FLOAT);
    int32_t freqs = op(h, DM_OP_MatMul, 2, inv3, posf);    /* [1, D/2, S] */
    freqs = transpose(h, freqs, INTS(0, 2, 1));
    int32_t embf = op(h, DM_OP_Concat, 2, freqs, freqs);
    attr_i(h, "axis", -1);
    int32_t scaling = const_f(h, 1.0);                     /* attention_scaling */
    int32_t cos = op(h, DM_OP_Cos, 1, embf);
    cos = op(h, DM_OP_Mul, 2, cos, scaling);
    int32_t sin = op(h, DM_OP_Sin, 1, embf);
    sin = op(h, DM_OP_Mul, 2, sin, scaling);
    leave(h, s);
    /* cos.unsqueeze(1) in every layer is a view of the same tensor: made
     * once here; [1, S, 1, D] as the rotary embedding is built on
     * [B, S, H, D] (llama_attention) */
    int32_t ax1 = const_ints(h, INTS(2));
    h->out_name = "position_embeddings.cos";
    cos = op(h, DM_OP_Unsqueeze, 2, cos, ax1);
    h->out_name = "position_embeddings.sin";
    sin = op(h, DM_OP_Unsqueeze, 2, sin, ax1);

    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = enter(h, "layers.%d", i);
        int32_t residual = x;
        s = enter(h, "input_layernorm");
        int32_t y = rms_norm(h, x, c->hidden, c->eps);
        leave(h, s);
        s = enter(h, "self_attn");
        int32_t attn_w = -1, router = -1;
        y = c->mla ? mla_attention(h, c, i, y, cos, sin, mask, &attn_w)
                   : llama_attention(h, c, i, y, cos, sin, mask, &attn_w);
        leave(h, s);
        x = op(h, DM_OP_Add, 2, residual, y);
        residual = x;
        s = enter(h, "post_attention_layernorm");
        y = rms_norm(h, x, c->hidden, c->eps);
        leave(h, s);
        bool sparse = c->moe && moe_layer(c->moe, i);
        s = enter(h, "%s", sparse && c->moe->kind == MOE_MIXTRAL ? "block_sparse_moe" : "mlp");
        y = !sparse                         ? llama_mlp(h, c, y)
            : c->moe->kind == MOE_DEEPSEEK ? deepseek_moe(h, c, c->moe, y)
                                           : sparse_moe(h, c, c->moe, y, &router);
        leave(h, s);
        x = op(h, DM_OP_Add, 2, residual, y);
        /* the decoder layer's self_attn_weights: the attention probabilities
         * live until the layer returns, whatever output_attentions says;
         * likewise the router logits of a MoE block */
        hold(h, attn_w, last_node(h));
        hold(h, router, last_node(h));
        if (router >= 0 && c->moe->aux && h->st == DNNMEM_OK) /* returned by the model */
            h->g->router[h->g->n_router++] = router;
        leave(h, ls);
    }
    s = enter(h, "norm");
    x = rms_norm(h, x, c->hidden, c->eps);
    leave(h, s);
    /* LlamaModel.forward's locals live until it returns: inputs_embeds,
     * cache_position, the causal mask and position_embeddings */
    hold(h, emb, last_node(h));
    hold(h, pos, last_node(h));
    hold(h, mask, last_node(h));
    hold(h, cos, last_node(h));
    hold(h, sin, last_node(h));
    leave(h, top);
    s = enter(h, "lm_head");
    x = linear(h, x, c->hidden, c->vocab, false, c->tie ? emb_w : -1, "logits");
    leave(h, s);
    return x;
}

static void read_llama(struct hf *h, const char *type, struct llama *c)
{
    bool llama = strcmp(type, "llama") == 0, qwen2 = strcmp(type, "qwen2") == 0,
         qwen3 = strcmp(type, "qwen3") == 0;
    c->type = type;
    c->vocab = get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = get_int(h, "hidden_size", REQUIRED, MAX_SIZE);
    c->inter = get_int(h, "intermediate_size", REQUIRED, MAX_SIZE);
    c->layers = get_int(h, "num_hidden_layers", REQUIRED, MAX_LAYERS);
    c->heads = get_int(h, "num_attention_heads", REQUIRED, MAX_SIZE);
    c->kv_heads = get_int(h, "num_key_value_heads", c->heads, MAX_SIZE);
    if (h->st == DNNMEM_OK && !field(h, "head_dim") && c->hidden % c->heads)
        fail(h, DNNMEM_E_MODEL,
             "config field 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' "
             "(%lld), and 'head_dim' is missing",
             (long long)c->hidden, (long long)c->heads);
    c->head_dim = get_int(h, "head_dim", h->st == DNNMEM_OK ? c->hidden / c->heads : 1, MAX_SIZE);
    if (h->st == DNNMEM_OK && c->heads % c->kv_heads)
        fail(h, DNNMEM_E_MODEL,
             "config field 'num_key_value_heads' (%lld) does not divide 'num_attention_heads' (%lld)",
             (long long)c->kv_heads, (long long)c->heads);
    if (h->st == DNNMEM_OK && c->head_dim % 2)
        fail(h, DNNMEM_E_MODEL, "config field 'head_dim' (%lld) must be even for the rotary embedding",
             (long long)c->head_dim);
    const char *act = get_str(h, "hidden_act", "silu");
    if (h->st == DNNMEM_OK && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'hidden_act' is '%s'; only 'silu' is modelled for %s", act, type);
    c->eps = get_num(h, "rms_norm_eps", 1e-6, 0, 1);
    c->attn_drop = get_num(h, "attention_dropout", 0.0, 0, 1);
    c->theta = get_num(h, "rope_theta", 10000.0, 1e-30, 1e30);
    c->tie = get_bool(h, "tie_word_embeddings", false);
    c->use_cache = get_bool(h, "use_cache", true);
    /* projections' biases: Llama and Qwen3 follow attention_bias (q, k, v, o)
     * and Llama mlp_bias; Qwen2 has q, k, v biases; Mistral none */
    bool attn_bias = (llama || qwen3) && get_bool(h, "attention_bias", false);
    c->qkv_bias = attn_bias || qwen2;
    c->o_bias = attn_bias;
    c->mlp_bias = llama && get_bool(h, "mlp_bias", false);
    c->qk_norm = qwen3;
}

/* A count that may be 0 (first_k_dense_replace); explicit null is 0 too. */
static int64_t get_count(struct hf *h, const char *key, int64_t dflt, int64_t max)
{
    json_t *v = json_object_get(h->root, key);
    if (h->st == DNNMEM_OK && v && (json_is_null(v) || (json_is_integer(v) && json_integer_value(v) == 0)))
        return 0;
    return get_int(h, key, dflt, max);
}

static bool is_moe_type(const char *type)
{
    return strcmp(type, "mixtral") == 0 || strcmp(type, "qwen2_moe") == 0 ||
           strcmp(type, "qwen3_moe") == 0 || strcmp(type, "deepseek_v2") == 0 ||
           strcmp(type, "deepseek_v3") == 0;
}

/* The MoE families' fields (defaults of MixtralConfig, Qwen2MoeConfig,
 * Qwen3MoeConfig, DeepseekV2Config, DeepseekV3Config) on top of the Llama
 * family's. */
static void read_moe(struct hf *h, const char *type, struct llama *c, struct moe *m, struct mla *a)
{
    bool mixtral = strcmp(type, "mixtral") == 0, qwen2 = strcmp(type, "qwen2_moe") == 0,
         qwen3 = strcmp(type, "qwen3_moe") == 0, v3 = strcmp(type, "deepseek_v3") == 0;
    bool ds = !mixtral && !qwen2 && !qwen3;
    read_llama(h, type, c);
    if (h->st != DNNMEM_OK)
        return;
    m->sparse_step = m->freq = 1;
    if (mixtral) {
        m->kind = MOE_MIXTRAL;
        m->experts = get_int(h, "num_local_experts", 8, 1 << 16);
        m->top_k = get_int(h, "num_experts_per_tok", 2, 1 << 16);
        m->inter = c->inter;
        m->norm_topk = true;
        if (get_num(h, "router_jitter_noise", 0.0, 0, 1) > 0)
            fail(h, DNNMEM_E_UNSUPPORTED,
                 "config field 'router_jitter_noise' is above 0; the jittered input is not modelled");
    } else if (!ds) {
        m->kind = MOE_QWEN;
        m->experts = get_int(h, "num_experts", qwen2 ? 60 : 128, 1 << 16);
        m->top_k = get_int(h, "num_experts_per_tok", qwen2 ? 4 : 8, 1 << 16);
        m->inter = get_int(h, "moe_intermediate_size", qwen2 ? 1408 : 768, MAX_SIZE);
        m->shared_inter = qwen2 ? get_int(h, "shared_expert_intermediate_size", 5632, MAX_SIZE) : 0;
        m->shared_gate = qwen2;
        m->norm_topk = get_bool(h, "norm_topk_prob", false);
        m->sparse_step = get_int(h, "decoder_sparse_step", 1, MAX_LAYERS);
        json_t *only = field(h, "mlp_only_layers");
        if (only && !json_is_array(only))
            fail(h, DNNMEM_E_MODEL, "config field 'mlp_only_layers' must be a list of layer indices");
        m->mlp_only = only;
        /* Qwen2MoeAttention: q, k, v biases (4.51); Qwen3-MoE as Qwen3 */
        c->qkv_bias = qwen2 ? get_bool(h, "qkv_bias", true) : get_bool(h, "attention_bias", false);
        c->o_bias = qwen3 && get_bool(h, "attention_bias", false);
        c->qk_norm = qwen3;
    } else {
        m->kind = MOE_DEEPSEEK;
        m->experts = get_int(h, "n_routed_experts", v3 ? 256 : 160, 1 << 16);
        m->top_k = get_int(h, "num_experts_per_tok", v3 ? 8 : 6, 1 << 16);
        m->inter = get_int(h, "moe_intermediate_size", v3 ? 2048 : 1407, MAX_SIZE);
        int64_t shared = get_count(h, "n_shared_experts", v3 ? 1 : 2, 1 << 16);
        if (h->st == DNNMEM_OK && !dm_mul_ok(shared, m->inter, &m->shared_inter))
            fail(h, DNNMEM_E_UNSUPPORTED, "config field 'n_shared_experts' is too large");
        m->first_dense = get_count(h, "first_k_dense_replace", v3 ? 3 : 0, MAX_LAYERS);
        m->freq = get_int(h, "moe_layer_freq", 1, MAX_LAYERS);
        m->norm_topk = get_bool(h, "norm_topk_prob", v3);
        m->scale = get_num(h, "routed_scaling_factor", v3 ? 2.5 : 1.0, 0, 1e6);
        m->groups = get_int(h, "n_group", v3 ? 8 : 1, 1 << 16);
        m->topk_group = get_int(h, "topk_group", v3 ? 4 : 1, 1 << 16);
        const char *sf = get_str(h, "scoring_func", v3 ? "sigmoid" : "softmax");
        const char *tm = get_str(h, "topk_method", v3 ? "noaux_tc" : "greedy");
        if (h->st == DNNMEM_OK && strcmp(sf, "softmax") != 0 && strcmp(sf, "sigmoid") != 0)
            fail(h, DNNMEM_E_UNSUPPORTED,
                 "config field 'scoring_func' is '%s'; modelled: softmax, sigmoid", sf);
        m->sigmoid = strcmp(sf, "sigmoid") == 0;
        m->method = strcmp(tm, "noaux_tc") == 0                 ? TOPK_NOAUX_TC
                    : strcmp(tm, "group_limited_greedy") == 0 ? TOPK_GROUP_LIMITED
                                                                : TOPK_GREEDY;
        if (h->st == DNNMEM_OK && m->method == TOPK_GREEDY && strcmp(tm, "greedy") != 0)
            fail(h, DNNMEM_E_UNSUPPORTED,
                 "config field 'topk_method' is '%s'; modelled: greedy, group_limited_greedy, "
                 "noaux_tc", tm);
        if (h->st == DNNMEM_OK && m->method != TOPK_GREEDY &&
            (m->experts % m->groups || m->topk_group > m->groups ||
             (m->method == TOPK_NOAUX_TC && m->experts / m->groups < 2)))
            fail(h, DNNMEM_E_MODEL,
                 "config fields 'n_group' (%lld) and 'topk_group' (%lld) do not split "
                 "'n_routed_experts' (%lld) into groups",
                 (long long)m->groups, (long long)m->topk_group, (long long)m->experts);
        if (get_int(h, "ep_size", 1, 1 << 20) != 1)
            fail(h, DNNMEM_E_UNSUPPORTED,
                 "config field 'ep_size' is above 1; expert parallelism is not modelled");
        /* multi-head latent attention */
        json_t *ql = json_object_get(h->root, "q_lora_rank");
        a->q_lora = ql && json_is_null(ql) ? 0 : get_int(h, "q_lora_rank", 1536, MAX_SIZE);
        a->kv_lora = get_int(h, "kv_lora_rank", 512, MAX_SIZE);
        a->nope = get_int(h, "qk_nope_head_dim", 128, MAX_SIZE);
        a->rope = get_int(h, "qk_rope_head_dim", 64, MAX_SIZE);
        a->v = get_int(h, "v_head_dim", 128, MAX_SIZE);
        a->bias = get_bool(h, "attention_bias", false);
        if (h->st == DNNMEM_OK && a->rope % 2)
            fail(h, DNNMEM_E_MODEL, "config field 'qk_rope_head_dim' (%lld) must be even",
                 (long long)a->rope);
        if (h->st == DNNMEM_OK && c->kv_heads != c->heads)
            fail(h, DNNMEM_E_UNSUPPORTED,
                 "config field 'num_key_value_heads' (%lld) differs from 'num_attention_heads' "
                 "(%lld); MLA is modelled with one key and value per head",
                 (long long)c->kv_heads, (long long)c->heads);
        c->head_dim = a->rope; /* DeepseekV3Config.head_dim: the rotary embedding's size */
        c->qkv_bias = c->o_bias = false;
        c->mla = a;
        /* rope_scaling: yarn (both DeepSeek configs) changes inv_freq's values
         * and scales cos and sin by a constant: the same tensors */
        json_t *rs = field(h, "rope_scaling");
        if (rs) {
            json_t *t = json_object_get(rs, "rope_type");
            if (!t)
                t = json_object_get(rs, "type");
            const char *kind = json_is_string(t) ? json_string_value(t) : "?";
            if (strcmp(kind, "yarn") != 0 && strcmp(kind, "default") != 0 &&
                strcmp(kind, "linear") != 0)
                fail(h, DNNMEM_E_UNSUPPORTED,
                     "config field 'rope_scaling' has type '%s'; modelled: yarn, linear, default",
                     kind);
        }
    }
    if (h->st == DNNMEM_OK && m->top_k > m->experts)
        fail(h, DNNMEM_E_MODEL,
             "config field 'num_experts_per_tok' (%lld) exceeds the experts (%lld)",
             (long long)m->top_k, (long long)m->experts);
    /* output_router_logits: the causal LM returns every sparse layer's router
     * logits and adds router_aux_coef x load_balancing_loss_func(...) to the
     * loss (MixtralForCausalLM / Qwen2MoeForCausalLM / Qwen3MoeForCausalLM
     * of 4.51; config default coefficient 0.001 for each) */
    m->aux = get_bool(h, "output_router_logits", false);
    m->aux_coef = get_num(h, "router_aux_loss_coef", 0.001, 0, 1e6);
    if (m->aux && m->kind == MOE_DEEPSEEK)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'output_router_logits' is true; DeepSeek's causal LM in transformers "
             "4.51 computes no auxiliary loss from it");
    c->mlp_bias = false;
    c->moe = m;
}

/* ---- GPT-2 ------------------------------------------------------------------------- */

struct gpt2 {
    int64_t vocab, embd, layers, heads, positions, inner;
    double eps, attn_drop, resid_drop, embd_drop;
    const char *act;
    bool tie, scale, scale_by_layer, use_cache;
};

/* The MLP activation as ACT2FN runs it. gelu_new (NewGELUActivation) is
 *   0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3.0))))
 * in that evaluation order, eight elementwise ops; gelu and
 * gelu_pytorch_tanh are one F.gelu. */
static int32_t gpt2_act(struct hf *h, const char *act, int32_t x)
{
    if (strcmp(act, "gelu_new") == 0) {
        int32_t c05 = const_f(h, 0.5);
        int32_t t1 = op(h, DM_OP_Mul, 2, x, c05);
        int32_t c3 = const_f(h, 3.0);
        int32_t p = op(h, DM_OP_Pow, 2, x, c3);
        int32_t ck = const_f(h, 0.044715);
        int32_t t2 = op(h, DM_OP_Mul, 2, p, ck);
        int32_t t3 = op(h, DM_OP_Add, 2, x, t2);
        int32_t cs = const_f(h, sqrt(2.0 / PI));
        int32_t t4 = op(h, DM_OP_Mul, 2, t3, cs);
        int32_t t5 = op(h, DM_OP_Tanh, 1, t4);
        int32_t c1 = const_f(h, 1.0);
        int32_t t6 = op(h, DM_OP_Add, 2, t5, c1);
        return op(h, DM_OP_Mul, 2, t1, t6);
    }
    int32_t y = op(h, DM_OP_Gelu, 1, x);
    if (strcmp(act, "gelu_pytorch_tanh") == 0)
        attr_s(h, "approximate", "tanh");
    return y;
}

static int32_t layer_norm(struct hf *h, int32_t x, int64_t dim, double eps)
{
    int32_t w = param(h, "weight", DM_FLOAT, 1, &dim);
    int32_t b = param(h, "bias", DM_FLOAT, 1, &dim);
    int32_t y = op(h, DM_OP_LayerNormalization, 3, x, w, b);
    attr_i(h, "axis", -1);
    attr_f(h, "epsilon", eps);
    return y;
}

/* GPT2Attention.forward with _attn (eager). */
static int32_t gpt2_attention(struct hf *h, const struct gpt2 *c, int layer, int32_t x,
                              int32_t ss)
{
    struct dm_graph *g = h->g;
    int64_t E = c->embd, nh = c->heads, hd = c->embd / c->heads, P = c->positions;
    /* registered buffers: the causal mask and an unused scalar */
    int32_t bias = param(h, "bias", DM_BOOL, 4, (int64_t[]){1, 1, P, P});
    param(h, "masked_bias", DM_FLOAT, 0, NULL);
    size_t s = enter(h, "c_attn");
    int32_t qkv = conv1d(h, x, E, 3 * E);
    leave(h, s);
    /* the fused kernel reads q as it is, a permuted view of the c_attn
     * output, and keeps it for backward, so the whole [B, S, 3E] buffer
     * lives to the backward: flash_attention_forward (no copies), and sdpa
     * from 4.56, whose sdpa_attention_forward no longer makes q, k and v
     * .contiguous() (PR #40315, "Remove unnecessary contiguous calls for
     * modern torch"). Measured: GPT-2 bf16 b4 s1024 sdpa training with
     * transformers 5.17 on the H200 (tools/gpu/results/traces-fresh.tar.gz):
     * each layer's 18 MiB c_attn output (Conv1D, pytorch_utils.py) is live
     * when the forward ends, and no q copy is made */
    bool views = h->flash || (h->sdpa && h->sdpa_as_is);
    /* .split(E, dim=2): three views in PyTorch; where nothing keeps them,
     * Split copies here (the c_attn output is freed right after, so only
     * transiently more) */
    int32_t sp = const_ints(h, INTS(E, E, E));
    struct dm_node *n = node(h, DM_OP_Split, 2, (int32_t[]){qkv, sp}, 3);
    if (!n)
        return -1;
    int32_t part[3] = {n->out[0], n->out[1], n->out[2]};
    attr_i(h, "axis", 2);
    if (views)
        attr_i(h, "view", 1);
    int32_t qkvh[3];
    for (int j = 0; j < 3; j++) { /* _split_heads: view, permute(0, 2, 1, 3) */
        int32_t r = reshape(h, part[j], INTS(0, 0, nh, hd));
        const char *pn = NULL;
        if (c->use_cache && j > 0) { /* present = (key, value) */
            pn = dm_arena_printf(&g->arena, "present.%d.%s", layer, j == 1 ? "key" : "value");
            if (!pn)
                return oom(h);
        }
        h->out_name = cache_at_make(h, pn);
        qkvh[j] = cache_update(h, transpose(h, r, INTS(0, 2, 1, 3)), pn);
    }
    int32_t o, w = -1;
    if (h->flash) {
        /* flash_attention_2 through the same interface: flash_attention_forward
         * on the permuted views (no copies), flash_attn_func's default scale
         * (GPT2Attention passes none) */
        o = flash_attention(h, qkvh[0], qkvh[1], qkvh[2], 1.0 / sqrt((double)hd), true);
    } else if (h->sdpa) {
        /* GPT-2 runs the shared attention interface from 4.48 (4.51's
         * GPT2Attention.forward: ALL_ATTENTION_FUNCTIONS["sdpa"]), whose
         * sdpa_attention_forward makes query, key and value .contiguous()
         * up to 4.55 (from 4.56 it passes the views, above): copies of the
         * permuted views, which the kernel's backward keeps;
         * is_causal without a mask, dropout_p = attn_pdrop in training;
         * nothing of [S, S] is made */
        int32_t c3[3];
        if (views)
            memcpy(c3, qkvh, sizeof c3); /* 4.56+: the views as they are */
        else
            heads_copy(h, qkvh, nh, hd, c3);
        o = sdpa_attention(h, c3, -1, true, nh, nh, hd, hd, 0, c->attn_drop);
    } else {
        /* q, k.transpose(-1, -2) and v are permuted views of the c_attn output */
        int32_t c3[3];
        heads_copy(h, qkvh, nh, hd, c3);
        int32_t kt = transpose(h, c3[1], INTS(0, 1, 3, 2));
        w = op(h, DM_OP_MatMul, 2, c3[0], kt);
        if (c->scale) {
            int32_t d = const_f(h, sqrt((double)hd)); /* torch.full([], D ** 0.5) */
            w = op(h, DM_OP_Div, 2, w, d);
        }
        if (c->scale_by_layer) {
            int32_t d = const_f(h, (double)(layer + 1));
            w = op(h, DM_OP_Div, 2, w, d);
        }
        /* causal_mask = self.bias[:, :, k - q : k, :k], a view; where(mask, w, min) */
        int32_t st = const_ints(h, INTS(0, 0)), ax = const_ints(h, INTS(2, 3));
        int32_t cm = op(h, DM_OP_Slice, 4, bias, st, ss, ax);
        int32_t mv = const_f(h, -FLT_MAX);
        w = op(h, DM_OP_Where, 3, cm, w, mv);
        w = op(h, DM_OP_Softmax, 1, w);
        attr_i(h, "axis", -1);
        s = enter(h, "attn_dropout");
        w = dropout(h, w, c->attn_drop);
        leave(h, s);
        o = op(h, DM_OP_MatMul, 2, w, c3[2]);
    }
    o = transpose(h, o, INTS(0, 2, 1, 3)); /* _merge_heads: permute(...).contiguous() */
    o = reshape(h, o, INTS(0, 0, -1));
    s = enter(h, "c_proj");
    o = conv1d(h, o, E, E);
    leave(h, s);
    s = enter(h, "resid_dropout");
    o = dropout(h, o, c->resid_drop);
    leave(h, s);
    /* _attn's attn_weights is a local of forward until it returns */
    hold(h, w, last_node(h));
    /* present = (key, value) are views of the c_attn output, so with
     * use_cache the whole [B, S, 3E] buffer lives while the caller holds
     * the presents (in training until `del out`, past the backward). Split
     * copies here: k and v are the presents, and q's part is returned with
     * them, as a view named present.N.qkv.0 */
    if (c->use_cache && !h->cache_copy) {
        h->out_name = dm_arena_printf(&g->arena, "present.%d.qkv.0", layer);
        if (!h->out_name)
            return oom(h);
        op(h, DM_OP_Identity, 1, part[0]);
    }
    return o;
}

/* GPT2LMHeadModel. */
static int32_t build_gpt2(struct hf *h, const struct gpt2 *c, int32_t ids)
{
    int64_t E = c->embd;
    size_t top = enter(h, "transformer");
    size_t s = enter(h, "wte");
    int32_t wte = param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, E});
    int32_t x = op(h, DM_OP_Gather, 2, wte, ids);
    int32_t embeds = x;
    leave(h, s);
    /* position_ids = arange(S).unsqueeze(0) */
    int32_t seq = op(h, DM_OP_Shape, 1, ids);
    attr_i(h, "start", 1);
    attr_i(h, "end", 2);
    int32_t zero = const_i(h, 0), one = const_i(h, 1);
    int32_t pos = op(h, DM_OP_Range, 3, zero, seq, one);
    int32_t pos_ids = unsqueeze(h, pos, INTS(0));
    s = enter(h, "wpe");
    int32_t wpe = param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->positions, E});
    h->out_name = "position_embeds"; /* [B, S, E] where generate passes position_ids */
    int32_t pe = op(h, DM_OP_Gather, 2, wpe, pos_ids);
    leave(h, s);
    x = op(h, DM_OP_Add, 2, x, pe);
    s = enter(h, "drop");
    x = dropout(h, x, c->embd_drop);
    leave(h, s);
    int32_t ss = op(h, DM_OP_Concat, 2, seq, seq); /* [S, S]: the mask slice's ends */
    attr_i(h, "axis", 0);

    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = enter(h, "h.%d", i);
        int32_t residual = x;
        s = enter(h, "ln_1");
        int32_t y = layer_norm(h, x, E, c->eps);
        leave(h, s);
        s = enter(h, "attn");
        y = gpt2_attention(h, c, i, y, ss);
        leave(h, s);
        int32_t attn_out = y;
        x = op(h, DM_OP_Add, 2, y, residual); /* attn_output + residual */
        residual = x;
        s = enter(h, "ln_2");
        y = layer_norm(h, x, E, c->eps);
        leave(h, s);
        s = enter(h, "mlp");
        size_t t = enter(h, "c_fc");
        y = conv1d(h, y, E, c->inner);
        leave(h, t);
        t = enter(h, "act");
        y = gpt2_act(h, c->act, y);
        leave(h, t);
        t = enter(h, "c_proj");
        y = conv1d(h, y, c->inner, E);
        leave(h, t);
        t = enter(h, "dropout");
        y = dropout(h, y, c->resid_drop);
        leave(h, t);
        leave(h, s);
        x = op(h, DM_OP_Add, 2, residual, y);
        /* GPT2Block.forward's attn_outputs / attn_output live until it returns */
        hold(h, attn_out, last_node(h));
        leave(h, ls);
    }
    s = enter(h, "ln_f");
    x = layer_norm(h, x, E, c->eps);
    leave(h, s);
    /* GPT2Model.forward's locals live until it returns: inputs_embeds,
     * position_embeds, position_ids */
    hold(h, embeds, last_node(h));
    hold(h, pe, last_node(h));
    hold(h, pos, last_node(h));
    leave(h, top);
    s = enter(h, "lm_head");
    x = linear(h, x, E, c->vocab, false, c->tie ? wte : -1, "logits");
    leave(h, s);
    return x;
}

static void read_gpt2(struct hf *h, struct gpt2 *c)
{
    c->vocab = get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->embd = get_int(h, "n_embd", REQUIRED, MAX_SIZE);
    c->layers = get_int(h, "n_layer", REQUIRED, MAX_LAYERS);
    c->heads = get_int(h, "n_head", REQUIRED, MAX_SIZE);
    c->positions = get_int(h, "n_positions", REQUIRED, 1 << 20);
    if (h->st == DNNMEM_OK && c->embd % c->heads)
        fail(h, DNNMEM_E_MODEL, "config field 'n_embd' (%lld) is not a multiple of 'n_head' (%lld)",
             (long long)c->embd, (long long)c->heads);
    c->inner = get_int(h, "n_inner", h->st == DNNMEM_OK ? 4 * c->embd : 1, MAX_SIZE);
    c->act = get_str(h, "activation_function", "gelu_new");
    if (h->st == DNNMEM_OK && strcmp(c->act, "gelu_new") != 0 && strcmp(c->act, "gelu") != 0 &&
        strcmp(c->act, "gelu_pytorch_tanh") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'activation_function' is '%s'; modelled: gelu_new, gelu, gelu_pytorch_tanh",
             c->act);
    c->eps = get_num(h, "layer_norm_epsilon", 1e-5, 0, 1);
    c->attn_drop = get_num(h, "attn_pdrop", 0.1, 0, 1);
    c->resid_drop = get_num(h, "resid_pdrop", 0.1, 0, 1);
    c->embd_drop = get_num(h, "embd_pdrop", 0.1, 0, 1);
    c->scale = get_bool(h, "scale_attn_weights", true);
    c->scale_by_layer = get_bool(h, "scale_attn_by_inverse_layer_idx", false);
    c->tie = get_bool(h, "tie_word_embeddings", true);
    c->use_cache = get_bool(h, "use_cache", true);
    if (get_bool(h, "reorder_and_upcast_attn", false))
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'reorder_and_upcast_attn' is true; only the plain _attn is modelled");
    if (get_bool(h, "add_cross_attention", false))
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'add_cross_attention' is true; only the causal LM is modelled");
}

/* ---- the entry point ------------------------------------------------------------------ */

/* ---- BERT, RoBERTa, ALBERT, DistilBERT ----------------------------------------------- */

enum bert_kind { K_BERT, K_ROBERTA, K_ALBERT, K_DISTIL };
enum bert_head { HEAD_BASE, HEAD_MLM, HEAD_SEQCLS };

struct bert {
    enum bert_kind kind;
    enum bert_head head;
    int64_t vocab, hidden, inter, layers, heads, positions, types;
    int64_t emb;           /* ALBERT's factorised embedding size (else hidden) */
    int64_t groups, inner; /* ALBERT: num_hidden_groups, inner_group_num */
    int64_t pad;           /* RoBERTa: padding_idx, the base of position ids */
    int64_t labels;        /* the sequence-classification head's num_labels */
    double eps, attn_drop, hidden_drop, cls_drop;
    const char *act;
};

/* q, k and v of an encoder: linear(x) viewed [B, S, H, D] and permuted to
 * [B, H, S, D] (BERT's transpose_for_scores, DistilBERT's shape()). */
static void encoder_heads(struct hf *h, int32_t x, int64_t E, int64_t H,
                          const char *const proj[3], int32_t qkv[3])
{
    for (int j = 0; j < 3; j++) {
        size_t t = enter(h, "%s", proj[j]);
        int32_t y = linear(h, x, E, E, true, -1, NULL);
        leave(h, t);
        y = reshape(h, y, INTS(0, 0, H, E / H));
        qkv[j] = transpose(h, y, INTS(0, 2, 1, 3));
    }
}

/* The eager attention core of BERT and ALBERT: softmax(q k^T / sqrt(D) +
 * mask), dropout, times v, back to [B, S, E] (.permute(0, 2, 1, 3) and a
 * contiguous copy: BERT's .contiguous().view(), ALBERT's .transpose(2,
 * 1).flatten(2)). sdpa: the fused kernel; BERT passes no mask (None from
 * _prepare_4d_attention_mask_for_sdpa when the mask is all ones), ALBERT
 * passes its extended mask, which rules out the flash kernel. */
static int32_t encoder_core(struct hf *h, const struct bert *c, const int32_t qkv[3], int32_t mask)
{
    int64_t H = c->heads, D = c->hidden / c->heads;
    int32_t o;
    if (h->sdpa) {
        bool masked = c->kind == K_ALBERT && mask >= 0;
        o = sdpa_attention(h, qkv, masked ? mask : -1, false, H, H, D, D, 0, c->attn_drop);
    } else if (c->kind == K_ALBERT && h->albert_interface) {
        /* transformers 4.54+ (PR #38301): AlbertAttention calls the shared
         * eager_attention_forward: torch.matmul(query, key.transpose(2, 3))
         * copies q and k^T (non-contiguous views) into its bmm operands at
         * that call, attn_weights * scaling, the mask only if one was
         * given, softmax, dropout, and torch.matmul(attn_weights, value)
         * copies v only there (traced: the v copy follows the softmax) */
        int32_t q = reshape(h, qkv[0], INTS(0, H, -1, D));
        int32_t k = reshape(h, qkv[1], INTS(0, H, -1, D));
        int32_t w = op(h, DM_OP_MatMul, 2, q, transpose(h, k, INTS(0, 1, 3, 2)));
        w = op(h, DM_OP_Mul, 2, w, const_f(h, 1.0 / sqrt((double)D))); /* * scaling */
        if (mask >= 0)
            w = op(h, DM_OP_Add, 2, w, mask);
        w = op(h, DM_OP_Softmax, 1, w);
        attr_i(h, "axis", -1);
        w = dropout(h, w, c->attn_drop);
        o = op(h, DM_OP_MatMul, 2, w, reshape(h, qkv[2], INTS(0, H, -1, D)));
    } else {
        int32_t c3[3];
        heads_copy(h, qkv, H, D, c3);
        int32_t kt = transpose(h, c3[1], INTS(0, 1, 3, 2));
        int32_t w = op(h, DM_OP_MatMul, 2, c3[0], kt);
        w = op(h, DM_OP_Div, 2, w, const_f(h, sqrt((double)D))); /* / math.sqrt(D) */
        w = op(h, DM_OP_Add, 2, w, mask);
        w = op(h, DM_OP_Softmax, 1, w);
        attr_i(h, "axis", -1);
        w = dropout(h, w, c->attn_drop);
        o = op(h, DM_OP_MatMul, 2, w, c3[2]);
    }
    o = transpose(h, o, INTS(0, 2, 1, 3));
    return reshape(h, o, INTS(0, 0, -1));
}

/* BertAttention (self: BertSelfAttention or BertSdpaSelfAttention, then
 * output: BertSelfOutput), RoBERTa's copy of it, or AlbertAttention (query,
 * key, value, dense and LayerNorm in one module). */
static int32_t bert_attention(struct hf *h, const struct bert *c, int32_t x, int32_t mask)
{
    int64_t E = c->hidden;
    int32_t qkv[3];
    static const char *const proj[3] = {"query", "key", "value"};
    bool albert = c->kind == K_ALBERT;
    size_t s = albert ? h->scope_len : enter(h, "self");
    encoder_heads(h, x, E, c->heads, proj, qkv);
    int32_t o = encoder_core(h, c, qkv, mask);
    leave(h, s);
    s = albert ? h->scope_len : enter(h, "output");
    size_t t = enter(h, "dense");
    o = linear(h, o, E, E, true, -1, NULL);
    leave(h, t);
    o = dropout(h, o, c->hidden_drop);
    int32_t dense = o;
    o = albert ? op(h, DM_OP_Add, 2, x, o) : op(h, DM_OP_Add, 2, o, x);
    t = enter(h, "LayerNorm");
    o = layer_norm(h, o, E, c->eps);
    leave(h, t);
    leave(h, s);
    if (albert && !h->sdpa && h->albert_interface) {
        /* 4.54+'s AlbertAttention.forward: query_layer, key_layer and
         * value_layer (views of the projections) are locals until it
         * returns, and attn_output (the dense output) is rebound only by
         * the LayerNorm's statement (traced: all four freed after it) */
        for (int j = 0; j < 3; j++)
            hold(h, qkv[j], last_node(h));
        hold(h, dense, last_node(h));
    }
    return o;
}

/* BertLayer's feed-forward (intermediate, output) or AlbertLayer's
 * (ffn, activation, ffn_output, full_layer_layer_norm: no dropout). */
static int32_t encoder_ffn(struct hf *h, const struct bert *c, int32_t a)
{
    int64_t E = c->hidden;
    bool albert = c->kind == K_ALBERT;
    size_t s = albert ? h->scope_len : enter(h, "intermediate");
    size_t t = enter(h, albert ? "ffn" : "dense");
    int32_t y = linear(h, a, E, c->inter, true, -1, NULL);
    leave(h, t);
    y = gpt2_act(h, c->act, y);
    leave(h, s);
    s = albert ? h->scope_len : enter(h, "output");
    t = enter(h, albert ? "ffn_output" : "dense");
    y = linear(h, y, c->inter, E, true, -1, NULL);
    leave(h, t);
    if (!albert)
        y = dropout(h, y, c->hidden_drop);
    int32_t ffn_out = y;
    y = op(h, DM_OP_Add, 2, y, a);
    t = enter(h, albert ? "full_layer_layer_norm" : "LayerNorm");
    y = layer_norm(h, y, E, c->eps);
    leave(h, t);
    leave(h, s);
    /* 4.54+'s AlbertLayer.forward: ffn_output is a local until it returns */
    if (albert && !h->sdpa && h->albert_interface)
        hold(h, ffn_out, last_node(h));
    return y;
}

/* hidden[:, 0], [B, E]. PyTorch's select is a view that keeps the whole
 * hidden state alive while the next linear keeps it for backward; modelled
 * as a copy (the hidden state is freed earlier: B x S x E bytes, before the
 * head's backward). */
static int32_t first_token(struct hf *h, int32_t x)
{
    int32_t f = op(h, DM_OP_Gather, 2, x, const_i(h, 0));
    attr_i(h, "axis", 1);
    return f;
}

/* RoBERTa's create_position_ids_from_input_ids(input_ids, padding_idx):
 * mask = ids.ne(pad).int(); (cumsum(mask, 1).type_as(mask) + 0) * mask,
 * .long() + pad: small int [B, S] temporaries. */
static int32_t roberta_position_ids(struct hf *h, int32_t ids, int64_t pad)
{
    int32_t eq = op(h, DM_OP_Equal, 2, ids, const_i(h, pad));
    int32_t m = op(h, DM_OP_Not, 1, eq);
    m = op(h, DM_OP_Cast, 1, m);
    attr_i(h, "to", DM_INT32);
    int32_t cs = op(h, DM_OP_CumSum, 2, m, const_i(h, 1)); /* int64 in torch */
    cs = op(h, DM_OP_Cast, 1, cs);
    attr_i(h, "to", DM_INT64);
    cs = op(h, DM_OP_Cast, 1, cs); /* .type_as(mask) */
    attr_i(h, "to", DM_INT32);
    int32_t zero = op(h, DM_OP_Cast, 1, const_i(h, 0)); /* + past_key_values_length */
    attr_i(h, "to", DM_INT32);
    cs = op(h, DM_OP_Add, 2, cs, zero);
    cs = op(h, DM_OP_Cast, 1, op(h, DM_OP_Mul, 2, cs, m));
    attr_i(h, "to", DM_INT64);
    return op(h, DM_OP_Add, 2, cs, const_i(h, pad));
}

/* BertModel / RobertaModel / AlbertModel (embeddings, encoder, pooler) with
 * a head: none, the MLM head (decoder tied to the word embeddings), or
 * sequence classification. Transformers 4.38-4.48, called as
 * model(input_ids): token_type_ids from the registered zeros buffer,
 * attention_mask all ones. */
static int32_t build_bert(struct hf *h, const struct bert *c, int32_t ids, int32_t *pooled)
{
    *pooled = -1;
    static const char *const prefix[] = {"bert", "roberta", "albert"};
    int64_t E = c->hidden, EMB = c->emb, P = c->positions;
    bool albert = c->kind == K_ALBERT;
    size_t top = c->head != HEAD_BASE ? enter(h, "%s", prefix[c->kind]) : h->scope_len;
    size_t s = enter(h, "embeddings");
    int32_t word = param(h, "word_embeddings.weight", DM_FLOAT, 2, (int64_t[]){c->vocab, EMB});
    int32_t posw = param(h, "position_embeddings.weight", DM_FLOAT, 2, (int64_t[]){P, EMB});
    int32_t typw = param(h, "token_type_embeddings.weight", DM_FLOAT, 2, (int64_t[]){c->types, EMB});
    /* non-persistent buffers, on the device: position_ids, token_type_ids */
    int32_t pos_buf = param(h, "position_ids", DM_INT64, 2, (int64_t[]){1, P});
    int32_t typ_buf = param(h, "token_type_ids", DM_INT64, 2, (int64_t[]){1, P});
    int32_t seq = op(h, DM_OP_Shape, 1, ids);
    attr_i(h, "start", 1);
    attr_i(h, "end", 2);
    int32_t shape = op(h, DM_OP_Shape, 1, ids);
    int32_t st = const_ints(h, INTS(0)), ax = const_ints(h, INTS(1));
    int32_t pos_ids = c->kind == K_ROBERTA ? roberta_position_ids(h, ids, c->pad)
                                           : op(h, DM_OP_Slice, 4, pos_buf, st, seq, ax); /* a view */
    int32_t typ_ids = op(h, DM_OP_Slice, 4, typ_buf, st, seq, ax);
    typ_ids = op(h, DM_OP_Expand, 2, typ_ids, shape);                /* .expand(B, S) */
    int32_t x = op(h, DM_OP_Gather, 2, word, ids);
    int32_t emb = x;
    int32_t te = op(h, DM_OP_Gather, 2, typw, typ_ids);
    x = op(h, DM_OP_Add, 2, x, te);
    int32_t pe = op(h, DM_OP_Gather, 2, posw, pos_ids);
    x = op(h, DM_OP_Add, 2, x, pe); /* embeddings += position_embeddings */
    size_t t = enter(h, "LayerNorm");
    x = layer_norm(h, x, EMB, c->eps);
    leave(h, t);
    x = dropout(h, x, c->hidden_drop);
    leave(h, s);

    /* the extended mask (1 - ones(B, S)[:, None, None, :]) * finfo.min,
     * [B, 1, 1, S] in the model's dtype; BERT's and RoBERTa's sdpa need none */
    int32_t mask = -1;
    /* 4.54+ (PR #38301): AlbertModel's _update_full_mask leaves a mask
     * that was not given None (traced, eager: no mask and no mask add).
     * sdpa keeps the 4.51 mask here: without it the measured sdpa rows
     * are mixed (b8 x 512 reserved -0.4% -> +8.4%), not traced yet */
    if ((!h->sdpa && !(albert && h->albert_interface)) || (h->sdpa && albert)) {
        int32_t one = const_ints(h, INTS(1, 1));
        int32_t b1 = op(h, DM_OP_Slice, 4, shape, const_ints(h, INTS(0)), const_ints(h, INTS(1)),
                        const_ints(h, INTS(0)));
        int32_t ms = op(h, DM_OP_Concat, 3, b1, one, seq);
        attr_i(h, "axis", 0);
        mask = op(h, DM_OP_ConstantOfShape, 1, ms);
    }

    size_t enc = enter(h, "encoder");
    if (albert) {
        t = enter(h, "embedding_hidden_mapping_in");
        x = linear(h, x, EMB, E, true, -1, NULL);
        leave(h, t);
    }
    /* ALBERT: layer i runs group i / (layers / groups), whose inner layers
     * share their weights across every call: scopes carry the call ("#i"),
     * parameter names do not */
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = albert ? enter(h, "albert_layer_groups.%lld#%d",
                                   (long long)(i * c->groups / c->layers), i)
                           : enter(h, "layer.%d", i);
        h->share = albert;
        for (int64_t j = 0; j < (albert ? c->inner : 1) && h->st == DNNMEM_OK; j++) {
            size_t il = albert ? enter(h, "albert_layers.%lld", (long long)j) : h->scope_len;
            s = enter(h, "attention");
            int32_t a = bert_attention(h, c, x, mask);
            leave(h, s);
            x = encoder_ffn(h, c, a);
            leave(h, il);
        }
        h->share = false;
        leave(h, ls);
    }
    leave(h, enc);
    hold(h, emb, last_node(h));
    hold(h, mask, last_node(h));
    bool pooler = c->head == HEAD_BASE || (c->head == HEAD_SEQCLS && c->kind != K_ROBERTA);
    if (pooler) { /* the pooler: tanh(dense(hidden[:, 0])) */
        s = enter(h, "pooler");
        int32_t first = first_token(h, x);
        if (!albert)
            t = enter(h, "dense");
        h->last_linear = c->head == HEAD_BASE; /* the model's last parameters */
        int32_t p = linear(h, first, E, E, true, -1, NULL);
        h->last_linear = false;
        if (!albert)
            leave(h, t);
        *pooled = op(h, DM_OP_Tanh, 1, p);
        leave(h, s);
    }
    leave(h, top);
    if (c->head == HEAD_BASE)
        return x;
    if (c->head == HEAD_SEQCLS) {
        int32_t y;
        if (c->kind == K_ROBERTA) { /* RobertaClassificationHead on hidden[:, 0] */
            s = enter(h, "classifier");
            int32_t p = dropout(h, first_token(h, x), c->cls_drop);
            t = enter(h, "dense");
            p = linear(h, p, E, E, true, -1, NULL);
            leave(h, t);
            p = dropout(h, op(h, DM_OP_Tanh, 1, p), c->cls_drop);
            t = enter(h, "out_proj");
            y = linear(h, p, E, c->labels, true, -1, "logits");
            leave(h, t);
        } else {
            int32_t p = dropout(h, *pooled, c->cls_drop);
            s = enter(h, "classifier");
            y = linear(h, p, E, c->labels, true, -1, "logits");
        }
        leave(h, s);
        *pooled = -1;
        return y;
    }
    /* the MLM head: BERT's cls.predictions (transform: dense, act,
     * LayerNorm; decoder), RoBERTa's lm_head (dense, gelu, layer_norm,
     * decoder), ALBERT's predictions (dense to the embedding size) */
    static const char *const head[] = {"cls", "lm_head", "predictions"};
    s = enter(h, "%s", head[c->kind]);
    size_t p1 = c->kind == K_BERT ? enter(h, "predictions") : h->scope_len;
    size_t u = c->kind == K_BERT ? enter(h, "transform") : h->scope_len;
    size_t v = enter(h, "dense");
    int32_t y = linear(h, x, E, EMB, true, -1, NULL);
    leave(h, v);
    y = gpt2_act(h, c->kind == K_ROBERTA ? "gelu" : c->act, y);
    v = enter(h, c->kind == K_ROBERTA ? "layer_norm" : "LayerNorm");
    y = layer_norm(h, y, EMB, c->eps);
    leave(h, v);
    leave(h, u);
    int32_t bias = param(h, "bias", DM_FLOAT, 1, &c->vocab);
    u = enter(h, "decoder"); /* tied to the word embeddings; its bias is the head's bias */
    y = linear(h, y, EMB, c->vocab, false, word, NULL);
    leave(h, u);
    h->out_name = "logits";
    y = op(h, DM_OP_Add, 2, bias, y);
    leave(h, p1);
    leave(h, s);
    return y;
}

/* DistilBERT's MultiHeadSelfAttention (eager: q scaled before the product,
 * masked_fill by a bool mask) or DistilBertSdpaAttention, then out_lin. */
static int32_t distil_attention(struct hf *h, const struct bert *c, int32_t x, int32_t mask)
{
    int64_t E = c->hidden, H = c->heads, D = c->hidden / c->heads;
    int32_t qkv[3];
    static const char *const proj[3] = {"q_lin", "k_lin", "v_lin"};
    encoder_heads(h, x, E, H, proj, qkv);
    int32_t o;
    if (h->flash) {
        /* DistilBertFlashAttention2: q_lin, k_lin, v_lin viewed [B, S, H, D]
         * (no copies) into flash_attn_func, not causal; DistilBertModel passes
         * no mask without padding (an all-ones attention_mask becomes None) */
        o = flash_attention(h, qkv[0], qkv[1], qkv[2], 1.0 / sqrt((double)D), false);
    } else if (h->sdpa) {
        o = sdpa_attention(h, qkv, -1, false, H, H, D, D, 0, c->attn_drop);
    } else {
        /* q / sqrt(D) keeps q's memory order (still permuted) */
        int32_t c3[3], scaled[3] = {op(h, DM_OP_Div, 2, qkv[0], const_f(h, sqrt((double)D))),
                                    qkv[1], qkv[2]};
        heads_copy(h, scaled, H, D, c3);
        int32_t kt = transpose(h, c3[1], INTS(0, 1, 3, 2));
        int32_t w = op(h, DM_OP_MatMul, 2, c3[0], kt);
        w = op(h, DM_OP_Where, 3, mask, const_f(h, -FLT_MAX), w); /* masked_fill(mask, min) */
        w = op(h, DM_OP_Softmax, 1, w);
        attr_i(h, "axis", -1);
        w = dropout(h, w, c->attn_drop);
        o = op(h, DM_OP_MatMul, 2, w, c3[2]);
    }
    o = transpose(h, o, INTS(0, 2, 1, 3)); /* unshape: transpose(1, 2).contiguous() */
    o = reshape(h, o, INTS(0, 0, -1));
    size_t t = enter(h, "out_lin");
    o = linear(h, o, E, E, true, -1, NULL);
    leave(h, t);
    return o;
}

/* DistilBertModel, or DistilBertForMaskedLM (vocab_transform, gelu,
 * vocab_layer_norm, vocab_projector tied to the word embeddings), as of
 * transformers 4.40-4.48, called as model(input_ids) (attention_mask ones). */
static int32_t build_distilbert(struct hf *h, const struct bert *c, int32_t ids)
{
    int64_t E = c->hidden, P = c->positions;
    size_t top = c->head == HEAD_MLM ? enter(h, "distilbert") : h->scope_len;
    size_t s = enter(h, "embeddings");
    int32_t word = param(h, "word_embeddings.weight", DM_FLOAT, 2, (int64_t[]){c->vocab, E});
    int32_t posw = param(h, "position_embeddings.weight", DM_FLOAT, 2, (int64_t[]){P, E});
    int32_t pos_buf = param(h, "position_ids", DM_INT64, 2, (int64_t[]){1, P});
    int32_t seq = op(h, DM_OP_Shape, 1, ids);
    attr_i(h, "start", 1);
    attr_i(h, "end", 2);
    int32_t pos_ids = op(h, DM_OP_Slice, 4, pos_buf, const_ints(h, INTS(0)), seq,
                         const_ints(h, INTS(1)));
    int32_t x = op(h, DM_OP_Gather, 2, word, ids);
    int32_t emb = x;
    int32_t pe = op(h, DM_OP_Gather, 2, posw, pos_ids);
    x = op(h, DM_OP_Add, 2, x, pe);
    size_t t = enter(h, "LayerNorm");
    x = layer_norm(h, x, E, c->eps);
    leave(h, t);
    x = dropout(h, x, c->hidden_drop);
    leave(h, s);
    /* eager: (ones(B, S) == 0).view(B, 1, 1, S), expanded: a bool [B, S] */
    int32_t mask = -1;
    if (!h->sdpa) {
        int32_t shape = op(h, DM_OP_Shape, 1, ids);
        int32_t ones = op(h, DM_OP_ConstantOfShape, 1, shape);
        int32_t zero = const_f(h, 0.0);
        mask = op(h, DM_OP_Equal, 2, ones, zero);
        mask = unsqueeze(h, mask, INTS(1, 2));
    }
    size_t tr = enter(h, "transformer");
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = enter(h, "layer.%d", i);
        s = enter(h, "attention");
        int32_t a = distil_attention(h, c, x, mask);
        leave(h, s);
        a = op(h, DM_OP_Add, 2, a, x);
        s = enter(h, "sa_layer_norm");
        a = layer_norm(h, a, E, c->eps);
        leave(h, s);
        s = enter(h, "ffn");
        t = enter(h, "lin1");
        int32_t y = linear(h, a, E, c->inter, true, -1, NULL);
        leave(h, t);
        y = gpt2_act(h, c->act, y);
        t = enter(h, "lin2");
        y = linear(h, y, c->inter, E, true, -1, NULL);
        leave(h, t);
        y = dropout(h, y, c->hidden_drop);
        leave(h, s);
        y = op(h, DM_OP_Add, 2, y, a);
        s = enter(h, "output_layer_norm");
        x = layer_norm(h, y, E, c->eps);
        leave(h, s);
        leave(h, ls);
    }
    leave(h, tr);
    hold(h, emb, last_node(h));
    hold(h, mask, last_node(h));
    leave(h, top);
    if (c->head != HEAD_MLM)
        return x;
    s = enter(h, "vocab_transform");
    int32_t y = linear(h, x, E, E, true, -1, NULL);
    leave(h, s);
    y = gpt2_act(h, c->act, y);
    s = enter(h, "vocab_layer_norm");
    y = layer_norm(h, y, E, c->eps);
    leave(h, s);
    s = enter(h, "vocab_projector"); /* weight tied to the word embeddings */
    y = linear(h, y, E, c->vocab, true, word, "logits");
    leave(h, s);
    return y;
}

/* The head `architectures` names for a family whose classes start with
 * `cls` ("Bert", "DistilBert"): <cls>Model, <cls>ForMaskedLM or
 * <cls>ForSequenceClassification (num_labels from id2label, as
 * PretrainedConfig reads it, else 2); none named: the bare model. */

/* A classification head's labels: PretrainedConfig's num_labels is
 * len(id2label) when the config has one, else its num_labels (default 2). */
static int64_t num_labels(struct hf *h)
{
    json_t *labels = json_object_get(h->root, "id2label");
    return json_is_object(labels) && json_object_size(labels) > 0
               ? (int64_t)json_object_size(labels)
               : get_int(h, "num_labels", 2, MAX_SIZE);
}

static void read_head(struct hf *h, struct bert *c, const char *cls, bool seqcls)
{
    json_t *arch = json_object_get(h->root, "architectures");
    size_t i;
    json_t *a;
    c->head = HEAD_BASE;
    if (!json_is_array(arch) || json_array_size(arch) == 0)
        return;
    size_t n = strlen(cls);
    json_array_foreach(arch, i, a)
    {
        const char *s = json_is_string(a) ? json_string_value(a) : "";
        if (strncmp(s, cls, n) == 0 && strcmp(s + n, "Model") == 0)
            return;
        if (strncmp(s, cls, n) == 0 && strcmp(s + n, "ForMaskedLM") == 0) {
            c->head = HEAD_MLM;
            return;
        }
        if (seqcls && strncmp(s, cls, n) == 0 && strcmp(s + n, "ForSequenceClassification") == 0) {
            c->head = HEAD_SEQCLS;
            c->labels = num_labels(h);
            return;
        }
    }
    a = json_array_get(arch, 0);
    fail(h, DNNMEM_E_UNSUPPORTED,
         "config field 'architectures' names %s; the heads built are %sModel, %sForMaskedLM%s%s%s "
         "(name one of them in 'architectures')",
         json_is_string(a) ? json_string_value(a) : "a non-string", cls, cls,
         seqcls ? " and " : "", seqcls ? cls : "", seqcls ? "ForSequenceClassification" : "");
}

static void read_distilbert(struct hf *h, struct bert *c)
{
    c->kind = K_DISTIL;
    c->vocab = get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = c->emb = get_int(h, "dim", 768, MAX_SIZE);
    c->inter = get_int(h, "hidden_dim", 3072, MAX_SIZE);
    c->layers = get_int(h, "n_layers", 6, MAX_LAYERS);
    c->heads = get_int(h, "n_heads", 12, MAX_SIZE);
    c->positions = get_int(h, "max_position_embeddings", 512, MAX_SIZE);
    if (h->st == DNNMEM_OK && c->hidden % c->heads)
        fail(h, DNNMEM_E_MODEL, "config field 'dim' (%lld) is not a multiple of 'n_heads' (%lld)",
             (long long)c->hidden, (long long)c->heads);
    if (h->st == DNNMEM_OK && get_bool(h, "sinusoidal_pos_embds", false))
        fail(h, DNNMEM_E_UNSUPPORTED, "config field 'sinusoidal_pos_embds' is true; not modelled");
    c->act = get_str(h, "activation", "gelu");
    if (h->st == DNNMEM_OK && strcmp(c->act, "gelu") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'activation' is '%s'; only gelu is modelled for distilbert", c->act);
    c->eps = 1e-12; /* nn.LayerNorm(dim, eps=1e-12), not a config field */
    c->attn_drop = get_num(h, "attention_dropout", 0.1, 0, 1);
    c->hidden_drop = get_num(h, "dropout", 0.1, 0, 1);
    if (h->st == DNNMEM_OK)
        read_head(h, c, "DistilBert", false);
}

/* BERT, RoBERTa (BERT's fields; RobertaConfig's defaults are BertConfig's,
 * pad_token_id 1) and ALBERT (AlbertConfig: embedding_size 128,
 * num_hidden_groups 1, inner_group_num 1, hidden_act gelu_new, no dropout). */
static void read_bert(struct hf *h, enum bert_kind kind, struct bert *c)
{
    bool albert = kind == K_ALBERT;
    c->kind = kind;
    c->vocab = get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->hidden = get_int(h, "hidden_size", albert ? 4096 : 768, MAX_SIZE);
    c->inter = get_int(h, "intermediate_size", albert ? 16384 : 3072, MAX_SIZE);
    c->layers = get_int(h, "num_hidden_layers", 12, MAX_LAYERS);
    c->heads = get_int(h, "num_attention_heads", albert ? 64 : 12, MAX_SIZE);
    c->positions = get_int(h, "max_position_embeddings", 512, MAX_SIZE);
    c->types = get_int(h, "type_vocab_size", 2, MAX_SIZE);
    c->emb = albert ? get_int(h, "embedding_size", 128, MAX_SIZE) : c->hidden;
    c->groups = albert ? get_int(h, "num_hidden_groups", 1, MAX_LAYERS) : 1;
    c->inner = albert ? get_int(h, "inner_group_num", 1, MAX_LAYERS) : 1;
    c->pad = kind == K_ROBERTA ? get_int(h, "pad_token_id", 1, MAX_SIZE) : 0;
    if (h->st == DNNMEM_OK && c->hidden % c->heads)
        fail(h, DNNMEM_E_MODEL,
             "config field 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' (%lld)",
             (long long)c->hidden, (long long)c->heads);
    if (h->st == DNNMEM_OK && (c->groups < 1 || c->groups > c->layers || c->layers % c->groups))
        fail(h, DNNMEM_E_MODEL,
             "config field 'num_hidden_groups' (%lld) must divide 'num_hidden_layers' (%lld)",
             (long long)c->groups, (long long)c->layers);
    if (h->st == DNNMEM_OK && c->inner < 1)
        fail(h, DNNMEM_E_MODEL, "config field 'inner_group_num' must be at least 1");
    if (h->st == DNNMEM_OK && kind == K_ROBERTA && c->pad >= c->positions)
        fail(h, DNNMEM_E_MODEL,
             "config field 'pad_token_id' (%lld) leaves no position below "
             "'max_position_embeddings' (%lld)",
             (long long)c->pad, (long long)c->positions);
    c->act = get_str(h, "hidden_act", albert ? "gelu_new" : "gelu");
    if (h->st == DNNMEM_OK && strcmp(c->act, "gelu") != 0 && strcmp(c->act, "gelu_new") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED, "config field 'hidden_act' is '%s'; only gelu and gelu_new "
             "are modelled", c->act);
    const char *pet = get_str(h, "position_embedding_type", "absolute");
    if (h->st == DNNMEM_OK && strcmp(pet, "absolute") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'position_embedding_type' is '%s'; only 'absolute' is modelled", pet);
    c->eps = get_num(h, "layer_norm_eps", 1e-12, 0, 1);
    c->attn_drop = get_num(h, "attention_probs_dropout_prob", albert ? 0 : 0.1, 0, 1);
    c->hidden_drop = get_num(h, "hidden_dropout_prob", albert ? 0 : 0.1, 0, 1);
    /* classifier_dropout (BERT, RoBERTa; null: hidden_dropout_prob) or
     * ALBERT's classifier_dropout_prob */
    json_t *cd = json_object_get(h->root, albert ? "classifier_dropout_prob" : "classifier_dropout");
    c->cls_drop = cd && !json_is_null(cd)
                      ? get_num(h, albert ? "classifier_dropout_prob" : "classifier_dropout", 0, 0, 1)
                      : albert ? 0.1 : c->hidden_drop;
    static const char *const cls[] = {"Bert", "Roberta", "Albert"};
    if (h->st == DNNMEM_OK)
        read_head(h, c, cls[kind], true);
}

/* ---- graph inputs ------------------------------------------------------------------ */

/* A graph input: `name` of `dtype`, each dim symbolic (syms[k] names it) or
 * fixed (syms[k] NULL: fixed[k]). */
static int32_t declare_input(struct hf *h, const char *name, enum dm_dtype dtype, int rank,
                             const char *const *syms, const int64_t *fixed)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return -1;
    int32_t t = dm_graph_add_tensor(g, name);
    struct dm_dim *d = dm_arena_array(&g->arena, (size_t)rank, sizeof *d);
    int32_t *in = dm_arena_array(&g->arena, (size_t)g->n_inputs + 1, sizeof *in);
    if (t < 0 || !d || !in)
        return oom(h);
    for (int k = 0; k < rank; k++) {
        int32_t s = syms[k] ? dm_graph_symbol(g, syms[k]) : -1;
        if (syms[k] && s < 0)
            return oom(h);
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
static void add_output(struct hf *h, int32_t t, int32_t cap)
{
    if (h->st != DNNMEM_OK || t < 0)
        return;
    if (h->g->n_outputs >= cap) {
        fail(h, DNNMEM_E_INTERNAL, "too many outputs");
        return;
    }
    h->g->tensors[t].is_output = true;
    h->g->outputs[h->g->n_outputs++] = t;
}

/* ---- T5 (and mT5) ------------------------------------------------------------------ */

struct t5 {
    const char *type;
    int64_t vocab, d_model, d_kv, d_ff, layers, dec_layers, heads, buckets, max_distance;
    double eps, drop;
    const char *act; /* dense_act_fn: relu, gelu, gelu_new, silu */
    bool gated, tie, use_cache;
};

/* T5LayerNorm: an RMS norm without bias,
 *   variance = x.to(float32).pow(2).mean(-1, keepdim=True)
 *   x = x * torch.rsqrt(variance + eps)
 *   if weight is float16/bfloat16: x = x.to(weight.dtype)
 *   return weight * x
 * The variance is float32 whatever x is, and x * rsqrt(...) promotes to
 * float32 too (a half x times a float32 [.., 1]); the cast back only when the
 * weights are half (the result's CastLike to x is a no-op in float32). */
static int32_t t5_norm(struct hf *h, int32_t x, int64_t dim, double eps)
{
    int32_t w = param(h, "weight", DM_FLOAT, 1, &dim);
    int32_t x32 = op(h, DM_OP_Cast, 1, x);
    attr_i(h, "to", DM_FLOAT);
    keep32(h, x32);
    int32_t p = op(h, DM_OP_Pow, 2, x32, const_f(h, 2.0));
    keep32(h, p);
    int32_t m = op(h, DM_OP_ReduceMean, 1, p);
    attr_ints(h, "axes", INTS(-1));
    attr_i(h, "keepdims", 1);
    keep32(h, m);
    int32_t a = op(h, DM_OP_Add, 2, m, const_f(h, eps));
    keep32(h, a);
    int32_t s = op(h, DM_OP_Sqrt, 1, a);
    keep32(h, s);
    int32_t r = op(h, DM_OP_Reciprocal, 1, s);
    keep32(h, r);
    int32_t y = op(h, DM_OP_Mul, 2, x, r);
    keep32(h, y);
    y = op(h, DM_OP_CastLike, 2, y, x);
    return op(h, DM_OP_Mul, 2, w, y);
}

/* T5Attention._relative_position_bucket(memory - context) and
 * relative_attention_bias: int64 [q, k] temporaries (the bucket arithmetic
 * of transformers' code, each op a tensor), the embedding lookup [q, k, H],
 * permute([2, 0, 1]).unsqueeze(0): a [1, H, q, k] view. `rq`, `rk`: the
 * positions, int64 [q] and [k]. */
static int32_t t5_compute_bias(struct hf *h, const struct t5 *c, bool bidirectional, int32_t rq,
                               int32_t rk)
{
    int32_t w = param(h, "relative_attention_bias.weight", DM_FLOAT, 2,
                      (int64_t[]){c->buckets, c->heads});
    int32_t ctx = unsqueeze(h, rq, INTS(1));
    int32_t mem = unsqueeze(h, rk, INTS(0));
    int32_t rp = op(h, DM_OP_Sub, 2, mem, ctx);
    int64_t nb = c->buckets;
    int32_t rb = -1;
    if (bidirectional) {
        nb /= 2;
        int32_t gt = op(h, DM_OP_Greater, 2, rp, const_i(h, 0));
        gt = op(h, DM_OP_Cast, 1, gt);
        attr_i(h, "to", DM_INT64);
        rb = op(h, DM_OP_Mul, 2, gt, const_i(h, nb));
        rb = op(h, DM_OP_Add, 2, rb, const_i(h, 0)); /* relative_buckets (0) += ... */
        rp = op(h, DM_OP_Abs, 1, rp);
    } else {
        rp = op(h, DM_OP_Neg, 1, op(h, DM_OP_Min, 2, rp, const_i(h, 0)));
    }
    int64_t max_exact = nb / 2;
    int32_t small = op(h, DM_OP_Less, 2, rp, const_i(h, max_exact));
    int32_t f = op(h, DM_OP_Cast, 1, rp);
    attr_i(h, "to", DM_FLOAT);
    f = op(h, DM_OP_Div, 2, f, const_f(h, (double)max_exact));
    f = op(h, DM_OP_Log, 1, f);
    f = op(h, DM_OP_Div, 2, f, const_f(h, log((double)c->max_distance / (double)max_exact)));
    f = op(h, DM_OP_Mul, 2, f, const_f(h, (double)(nb - max_exact)));
    int32_t large = op(h, DM_OP_Cast, 1, f);
    attr_i(h, "to", DM_INT64);
    large = op(h, DM_OP_Add, 2, large, const_i(h, max_exact));
    large = op(h, DM_OP_Min, 2, large, const_i(h, nb - 1));
    int32_t wh = op(h, DM_OP_Where, 3, small, rp, large);
    rb = rb >= 0 ? op(h, DM_OP_Add, 2, rb, wh) : op(h, DM_OP_Add, 2, wh, const_i(h, 0));
    size_t s = enter(h, "relative_attention_bias");
    int32_t v = op(h, DM_OP_Gather, 2, w, rb); /* [q, k, H] */
    leave(h, s);
    v = transpose(h, v, INTS(2, 0, 1));
    return unsqueeze(h, v, INTS(0));
}

/* q, k or v: linear (no bias) viewed [B, L, H, D] and transposed to
 * [B, H, L, D]; `name` names the transposed view (the cache keeps it). */
static int32_t t5_heads(struct hf *h, const struct t5 *c, int32_t x, const char *proj,
                        const char *name)
{
    int64_t inner = c->heads * c->d_kv;
    size_t s = enter(h, "%s", proj);
    int32_t y = linear(h, x, c->d_model, inner, false, -1, NULL);
    leave(h, s);
    y = reshape(h, y, INTS(0, 0, c->heads, c->d_kv));
    h->out_name = name;
    return transpose(h, y, INTS(0, 2, 1, 3));
}

/* T5Attention.forward (eager; transformers has no other T5 attention):
 * scores = matmul(q, k^T) (no scaling: Mesh TensorFlow's initialisation
 * absorbs it), scores += position_bias, softmax(scores.float()).type_as,
 * dropout, matmul with v, transpose(1, 2).contiguous().view, o. The
 * position bias is made by the first call of the stack (the layer with
 * relative_attention_bias: compute_bias; a cross-attention: zeros
 * (1, H, q, k)), with the mask added: [B, H, q, k] (the mask is never None:
 * T5Stack makes one from torch.ones), and reused by every later layer.
 * `kv`: the encoder states for a cross-attention, else -1. `pos`:
 * in/out, the shared bias; `names`: the cache's key and value, or NULL. */
static int32_t t5_attention(struct hf *h, const struct t5 *c, bool dec, int32_t x, int32_t kv,
                            int32_t mask, int32_t *pos, bool has_bias, int32_t rq, int32_t rk,
                            const char *const names[2])
{
    int64_t H = c->heads, D = c->d_kv;
    int32_t qkv[3];
    int32_t src = kv >= 0 ? kv : x;
    qkv[0] = t5_heads(h, c, x, "q", NULL);
    qkv[1] = t5_heads(h, c, src, "k", names ? names[0] : NULL);
    qkv[2] = t5_heads(h, c, src, "v", names ? names[1] : NULL);
    int32_t c3[3];
    heads_copy(h, qkv, H, D, c3); /* torch.matmul copies the transposed views */
    int32_t kt = transpose(h, c3[1], INTS(0, 1, 3, 2));
    int32_t sc = op(h, DM_OP_MatMul, 2, c3[0], kt);
    if (*pos < 0) {
        int32_t pb;
        if (has_bias) {
            pb = t5_compute_bias(h, c, !dec, rq, rk);
        } else { /* torch.zeros((1, H, q, k)) */
            int32_t s4 = op(h, DM_OP_Shape, 1, sc);
            int32_t tail = op(h, DM_OP_Slice, 4, s4, const_ints(h, INTS(1)), const_ints(h, INTS(4)),
                              const_ints(h, INTS(0)));
            int32_t shp = op(h, DM_OP_Concat, 2, const_ints(h, INTS(1)), tail);
            attr_i(h, "axis", 0);
            pb = op(h, DM_OP_ConstantOfShape, 1, shp);
        }
        *pos = op(h, DM_OP_Add, 2, pb, mask); /* position_bias + causal_mask */
    }
    sc = op(h, DM_OP_Add, 2, sc, *pos);
    int32_t w = op(h, DM_OP_Softmax, 1, sc);
    attr_i(h, "axis", -1);
    w = dropout(h, w, c->drop);
    int32_t o = op(h, DM_OP_MatMul, 2, w, c3[2]);
    o = transpose(h, o, INTS(0, 2, 1, 3));
    o = reshape(h, o, INTS(0, 0, -1));
    size_t s = enter(h, "o");
    o = linear(h, o, H * D, c->d_model, false, -1, NULL);
    leave(h, s);
    /* the forward's locals query_states, key_states, value_states (views
     * of the projections), scores (added to in place) and attn_weights
     * live until it returns */
    for (int j = 0; j < 3; j++)
        hold(h, qkv[j], last_node(h));
    hold(h, sc, last_node(h));
    hold(h, w, last_node(h));
    return o;
}

/* The dense_act_fn of T5's feed-forward (ACT2FN). */
static int32_t t5_act(struct hf *h, const char *act, int32_t x)
{
    if (strcmp(act, "relu") == 0)
        return op(h, DM_OP_Relu, 1, x);
    if (strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0)
        return op(h, DM_OP_Silu, 1, x);
    return gpt2_act(h, act, x); /* gelu, gelu_new */
}

/* T5LayerFF: x + dropout(DenseReluDense(layer_norm(x))), DenseReluDense
 * being T5DenseActDense (wi, act, dropout, wo) or T5DenseGatedActDense
 * (act(wi_0(x)) * wi_1(x), dropout, wo). */
static int32_t t5_ff(struct hf *h, const struct t5 *c, int32_t x)
{
    size_t s = enter(h, "layer_norm");
    int32_t y = t5_norm(h, x, c->d_model, c->eps);
    leave(h, s);
    s = enter(h, "DenseReluDense");
    size_t t = enter(h, c->gated ? "wi_0" : "wi");
    int32_t a = linear(h, y, c->d_model, c->d_ff, false, -1, NULL);
    leave(h, t);
    a = t5_act(h, c->act, a);
    if (c->gated) {
        t = enter(h, "wi_1");
        int32_t b = linear(h, y, c->d_model, c->d_ff, false, -1, NULL);
        leave(h, t);
        a = op(h, DM_OP_Mul, 2, a, b);
    }
    a = dropout(h, a, c->drop);
    t = enter(h, "wo");
    a = linear(h, a, c->d_ff, c->d_model, false, -1, NULL);
    leave(h, t);
    leave(h, s);
    return op(h, DM_OP_Add, 2, x, dropout(h, a, c->drop));
}

/* One T5Stack (the encoder, or with `enc` >= 0 the decoder) on token ids
 * `ids`, embedded by the shared embedding `emb_w`. The decoder's caches
 * (self-attention key and value, cross-attention key and value per layer)
 * are named "past_key_values.N.{self,cross}.{key,value}" when use_cache. */
static int32_t t5_stack(struct hf *h, const struct t5 *c, int32_t ids, int32_t emb_w, int32_t enc,
                        int32_t enc_ids)
{
    struct dm_graph *g = h->g;
    bool dec = enc >= 0;
    size_t s = enter(h, "embed_tokens");
    int32_t emb = op(h, DM_OP_Gather, 2, emb_w, ids);
    leave(h, s);
    /* cache_position = arange(L); attention_mask = torch.ones(B, L) */
    int32_t len = op(h, DM_OP_Shape, 1, ids);
    attr_i(h, "start", 1);
    attr_i(h, "end", 2);
    int32_t pos = op(h, DM_OP_Range, 3, const_i(h, 0), len, const_i(h, 1));
    int32_t ones = op(h, DM_OP_ConstantOfShape, 1, op(h, DM_OP_Shape, 1, ids));
    int32_t mask, enc_mask = -1, enc_pos = -1;
    if (!dec) {
        /* (1.0 - attention_mask[:, None, None, :]) * finfo.min: [B, 1, 1, S] */
        mask = unsqueeze(h, ones, INTS(1, 2));
        mask = op(h, DM_OP_Sub, 2, const_f(h, 1.0), mask);
        mask = op(h, DM_OP_Mul, 2, mask, const_f(h, -FLT_MAX));
    } else {
        /* _update_causal_mask with the 2-D ones mask (eager):
         * full((T, T), min).triu(1), *= arange > cache_position, expanded
         * to [B, 1, T, T] and cloned (padding with the ones changes nothing) */
        int32_t tt = op(h, DM_OP_Concat, 2, len, len);
        attr_i(h, "axis", 0);
        int32_t full = op(h, DM_OP_ConstantOfShape, 1, tt);
        int32_t tri = op(h, DM_OP_Trilu, 2, full, const_i(h, 1));
        attr_i(h, "upper", 1);
        int32_t b1 = op(h, DM_OP_Slice, 4, op(h, DM_OP_Shape, 1, ids), const_ints(h, INTS(0)),
                        const_ints(h, INTS(1)), const_ints(h, INTS(0)));
        int32_t shp = op(h, DM_OP_Concat, 4, b1, const_ints(h, INTS(1)), len, len);
        attr_i(h, "axis", 0);
        mask = op(h, DM_OP_Expand, 2, unsqueeze(h, tri, INTS(0, 1)), shp);
        /* invert_attention_mask(torch.ones((B, S), long)): [B, 1, 1, S] */
        int32_t eo = op(h, DM_OP_ConstantOfShape, 1, op(h, DM_OP_Shape, 1, enc_ids));
        struct dm_tensor *one = dm_arena_alloc(&g->arena, sizeof *one);
        struct dm_dim *od = dm_arena_alloc(&g->arena, sizeof *od);
        struct dm_value *ov = dm_arena_alloc(&g->arena, sizeof *ov);
        int64_t *oi = dm_arena_alloc(&g->arena, sizeof *oi);
        if (!one || !od || !ov || !oi)
            return oom(h);
        *oi = 1;
        *ov = (struct dm_value){.n = 1, .i = oi};
        *od = (struct dm_dim){1, -1};
        *one = (struct dm_tensor){.name = "value", .dtype = DM_INT64, .rank = 1, .dims = od,
                                  .role = DM_ROLE_CONSTANT, .producer = -1, .value = ov};
        struct dm_attr *fa = attr(h, "value", DM_ATTR_TENSOR);
        if (fa)
            fa->t = one;
        enc_mask = op(h, DM_OP_Cast, 1, unsqueeze(h, eo, INTS(1, 2)));
        attr_i(h, "to", DM_FLOAT);
        enc_mask = op(h, DM_OP_Sub, 2, const_f(h, 1.0), enc_mask);
        enc_mask = op(h, DM_OP_Mul, 2, enc_mask, const_f(h, -FLT_MAX));
    }
    int32_t x = dropout(h, emb, c->drop);
    int32_t pb = -1;
    int64_t n = dec ? c->dec_layers : c->layers;
    for (int64_t i = 0; i < n && h->st == DNNMEM_OK; i++) {
        size_t ls = enter(h, "block.%lld", (long long)i);
        const char *kvn[2] = {NULL, NULL}, *xkvn[2] = {NULL, NULL};
        if (dec && c->use_cache) {
            kvn[0] = dm_arena_printf(&g->arena, "past_key_values.%lld.self.key", (long long)i);
            kvn[1] = dm_arena_printf(&g->arena, "past_key_values.%lld.self.value", (long long)i);
            xkvn[0] = dm_arena_printf(&g->arena, "past_key_values.%lld.cross.key", (long long)i);
            xkvn[1] = dm_arena_printf(&g->arena, "past_key_values.%lld.cross.value", (long long)i);
            if (!kvn[0] || !kvn[1] || !xkvn[0] || !xkvn[1])
                return oom(h);
        }
        /* layer.0: T5LayerSelfAttention */
        size_t l0 = enter(h, "layer.0");
        size_t t = enter(h, "layer_norm");
        int32_t y = t5_norm(h, x, c->d_model, c->eps);
        leave(h, t);
        t = enter(h, "SelfAttention");
        y = t5_attention(h, c, dec, y, -1, mask, &pb, i == 0, pos, pos,
                         dec && c->use_cache ? kvn : NULL);
        leave(h, t);
        x = op(h, DM_OP_Add, 2, x, dropout(h, y, c->drop));
        leave(h, l0);
        /* T5Block.forward's self_attention_outputs and cross_attention_outputs
         * tuples hold each sub-layer's output until the block returns */
        int32_t sa = x, ca = -1;
        if (dec) { /* layer.1: T5LayerCrossAttention on the encoder's states */
            size_t l1 = enter(h, "layer.1");
            t = enter(h, "layer_norm");
            y = t5_norm(h, x, c->d_model, c->eps);
            leave(h, t);
            t = enter(h, "EncDecAttention");
            y = t5_attention(h, c, true, y, enc, enc_mask, &enc_pos, false, -1, -1,
                             c->use_cache ? xkvn : NULL);
            leave(h, t);
            x = op(h, DM_OP_Add, 2, x, dropout(h, y, c->drop));
            ca = x;
            leave(h, l1);
        }
        size_t lf = enter(h, "layer.%d", dec ? 2 : 1);
        x = t5_ff(h, c, x);
        leave(h, lf);
        hold(h, sa, last_node(h));
        hold(h, ca, last_node(h));
        leave(h, ls);
    }
    s = enter(h, "final_layer_norm");
    x = t5_norm(h, x, c->d_model, c->eps);
    leave(h, s);
    x = dropout(h, x, c->drop);
    /* T5Stack.forward's locals live until it returns */
    hold(h, emb, last_node(h));
    hold(h, pos, last_node(h));
    hold(h, ones, last_node(h));
    hold(h, mask, last_node(h));
    hold(h, enc_mask, last_node(h));
    hold(h, pb, last_node(h));
    hold(h, enc_pos, last_node(h));
    return x;
}

/* T5ForConditionalGeneration (MT5ForConditionalGeneration is the same
 * module), called as model(input_ids, decoder_input_ids=labels shifted
 * right): the shared embedding, encoder and decoder T5Stacks, the lm_head
 * (tied to the shared embedding, the decoder output rescaled by
 * d_model**-0.5 first, when tie_word_embeddings). Outputs: the logits
 * [batch, target_seq, vocab], with use_cache every decoder layer's
 * self-attention key and value and cross-attention key and value (the
 * EncoderDecoderCache returned as past_key_values holds the transposed views
 * of the k and v projections), and encoder_last_hidden_state. */
static void build_t5(struct hf *h, const struct t5 *c)
{
    struct dm_graph *g = h->g;
    int32_t ids = declare_input(h, "input_ids", DM_INT64, 2, (const char *[]){"batch", "seq"},
                                NULL);
    /* --mode generate: the prefill is the encoder and the first decoder
     * forward, on generate's decoder_input_ids [batch, 1] of
     * decoder_start_token_id (_prepare_decoder_input_ids_for_generation,
     * transformers 4.51); src/schedule/generate.c runs the rest */
    bool gen = h->gen_tokens > 0;
    if (gen && !c->use_cache) {
        fail(h, DNNMEM_E_UNSUPPORTED,
             "--mode generate needs the decoder's cache (config use_cache true); generation "
             "recomputing every position is not modelled");
        return;
    }
    int32_t dec_ids = declare_input(h, "decoder_input_ids", DM_INT64, 2,
                                    (const char *[]){"batch", gen ? NULL : "target_seq"},
                                    (const int64_t[]){0, 1});
    int32_t cap = 2 + (c->use_cache ? 4 * (int32_t)c->dec_layers : 0);
    g->outputs = dm_arena_array(&g->arena, (size_t)cap, sizeof *g->outputs);
    if (!g->outputs) {
        oom(h);
        return;
    }
    size_t s = enter(h, "shared");
    int32_t shared = param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, c->d_model});
    leave(h, s);
    s = enter(h, "encoder");
    int32_t enc = t5_stack(h, c, ids, shared, -1, -1);
    leave(h, s);
    s = enter(h, "decoder");
    int32_t dec = t5_stack(h, c, dec_ids, shared, enc, ids);
    leave(h, s);
    int32_t y = dec;
    if (c->tie) /* sequence_output * (self.model_dim**-0.5) */
        y = op(h, DM_OP_Mul, 2, y, const_f(h, pow((double)c->d_model, -0.5)));
    s = enter(h, "lm_head");
    int32_t logits = linear(h, y, c->d_model, c->vocab, false, c->tie ? shared : -1, "logits");
    leave(h, s);
    /* the forward's locals: hidden_states (the encoder's) and sequence_output */
    hold(h, dec, last_node(h));
    hold(h, enc, last_node(h));
    add_output(h, logits, cap);
    for (int64_t i = 0; c->use_cache && i < c->dec_layers && h->st == DNNMEM_OK; i++)
        for (int j = 0; j < 4; j++) {
            char name[96];
            snprintf(name, sizeof name, "past_key_values.%lld.%s.%s", (long long)i,
                     j < 2 ? "self" : "cross", j % 2 ? "value" : "key");
            int32_t t = dm_graph_find(g, name);
            if (t < 0) {
                fail(h, DNNMEM_E_INTERNAL, "no tensor '%s'", name);
                return;
            }
            add_output(h, t, cap);
        }
    add_output(h, enc, cap); /* encoder_last_hidden_state */
    g->encoder_decoder = true;
    g->eager_only = true;
}

/* T5Config / MT5Config: their defaults (t5-small's shapes; mT5's vocabulary
 * 250112, d_ff 1024, 8 layers, 6 heads, gated-gelu, untied lm_head). */
static void read_t5(struct hf *h, const char *type, struct t5 *c)
{
    bool mt5 = strcmp(type, "mt5") == 0;
    c->type = type;
    c->vocab = get_int(h, "vocab_size", REQUIRED, MAX_SIZE);
    c->d_model = get_int(h, "d_model", 512, MAX_SIZE);
    c->d_kv = get_int(h, "d_kv", 64, MAX_SIZE);
    c->d_ff = get_int(h, "d_ff", mt5 ? 1024 : 2048, MAX_SIZE);
    c->layers = get_int(h, "num_layers", mt5 ? 8 : 6, MAX_LAYERS);
    c->dec_layers = get_int(h, "num_decoder_layers", c->layers, MAX_LAYERS);
    c->heads = get_int(h, "num_heads", mt5 ? 6 : 8, MAX_SIZE);
    c->buckets = get_int(h, "relative_attention_num_buckets", 32, MAX_SIZE);
    c->max_distance = get_int(h, "relative_attention_max_distance", 128, MAX_SIZE);
    c->drop = get_num(h, "dropout_rate", 0.1, 0, 1);
    c->eps = get_num(h, "layer_norm_epsilon", 1e-6, 0, 1);
    c->tie = get_bool(h, "tie_word_embeddings", !mt5);
    c->use_cache = get_bool(h, "use_cache", true);
    if (h->st == DNNMEM_OK && c->buckets < 4)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'relative_attention_num_buckets' is %lld; at least 4 is modelled",
             (long long)c->buckets);
    /* feed_forward_proj "ACT" or "gated-ACT"; "gated-gelu" means gelu_new */
    const char *ffp = get_str(h, "feed_forward_proj", mt5 ? "gated-gelu" : "relu");
    if (h->st != DNNMEM_OK)
        return;
    c->gated = strncmp(ffp, "gated-", 6) == 0;
    c->act = c->gated ? ffp + 6 : ffp;
    if (strcmp(ffp, "gated-gelu") == 0)
        c->act = "gelu_new";
    if (strcmp(c->act, "relu") != 0 && strcmp(c->act, "gelu") != 0 &&
        strcmp(c->act, "gelu_new") != 0 && strcmp(c->act, "silu") != 0 &&
        strcmp(c->act, "swish") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'feed_forward_proj' is '%s'; modelled: relu, gelu, gelu_new, silu, "
             "each optionally 'gated-'", ffp);
    json_t *arch = json_object_get(h->root, "architectures");
    if (h->st == DNNMEM_OK && arch && !json_is_null(arch)) {
        size_t i;
        json_t *a;
        const char *want = mt5 ? "MT5ForConditionalGeneration" : "T5ForConditionalGeneration";
        if (!json_is_array(arch)) {
            fail(h, DNNMEM_E_MODEL, "config field 'architectures' must be a list");
            return;
        }
        json_array_foreach(arch, i, a)
        {
            if (json_is_string(a) && strcmp(json_string_value(a), want) == 0)
                return;
        }
        a = json_array_get(arch, 0);
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'architectures' names %s; only %s is built",
             json_is_string(a) ? json_string_value(a) : "a non-string", want);
    }
}

/* ---- ViT ----------------------------------------------------------------------------- */

struct vit {
    int64_t hidden, layers, heads, inter, image, patch, channels, labels, pool_out;
    double eps, attn_drop, hidden_drop;
    const char *act;
    bool qkv_bias, classify;
};

/* ViTSelfAttention (eager_attention_forward: softmax(q k^T * D**-0.5),
 * dropout, times v) or ViTSdpaSelfAttention (one fused kernel, no mask), on
 * [B, H, N, D] views of query, key and value; then ViTSelfOutput (dense,
 * dropout; the residual is the layer's). transformers 4.53-4.57. */
static int32_t vit_attention(struct hf *h, const struct vit *c, int32_t x)
{
    int64_t E = c->hidden, H = c->heads, D = c->hidden / c->heads;
    static const char *const proj[3] = {"query", "key", "value"};
    int32_t qkv[3], c3[3];
    size_t s = enter(h, "attention");
    for (int j = 0; j < 3; j++) {
        size_t t = enter(h, "%s", proj[j]);
        int32_t y = linear(h, x, E, E, c->qkv_bias, -1, NULL);
        leave(h, t);
        y = reshape(h, y, INTS(0, 0, H, D));
        qkv[j] = transpose(h, y, INTS(0, 2, 1, 3));
    }
    /* eager: torch.matmul copies the transposed operands; sdpa:
     * sdpa_attention_forward makes them .contiguous() (the same copies) up to
     * 4.55 and passes them as they are from 4.56; flash_attention_forward
     * transposes the views back to [B, N, H, D] (no copies) */
    int32_t o;
    if (h->flash) {
        o = flash_attention(h, qkv[0], qkv[1], qkv[2], 1.0 / sqrt((double)D), false);
    } else if (h->sdpa && h->sdpa_as_is) {
        o = sdpa_attention(h, qkv, -1, false, H, H, D, D, 1.0 / sqrt((double)D), c->attn_drop);
    } else if (h->sdpa) {
        heads_copy(h, qkv, H, D, c3);
        o = sdpa_attention(h, c3, -1, false, H, H, D, D, 1.0 / sqrt((double)D), c->attn_drop);
    } else {
        heads_copy(h, qkv, H, D, c3);
        int32_t kt = transpose(h, c3[1], INTS(0, 1, 3, 2));
        int32_t w = op(h, DM_OP_MatMul, 2, c3[0], kt);
        w = op(h, DM_OP_Mul, 2, w, const_f(h, 1.0 / sqrt((double)D)));
        w = op(h, DM_OP_Softmax, 1, w);
        attr_i(h, "axis", -1);
        w = dropout(h, w, c->attn_drop);
        o = op(h, DM_OP_MatMul, 2, w, c3[2]);
    }
    o = transpose(h, o, INTS(0, 2, 1, 3)); /* .transpose(1, 2).contiguous() */
    o = reshape(h, o, INTS(0, 0, -1));
    /* ViTSelfAttention.forward's locals query_layer, key_layer, value_layer */
    for (int j = 0; j < 3; j++)
        hold(h, qkv[j], last_node(h));
    leave(h, s);
    s = enter(h, "output");
    size_t t = enter(h, "dense");
    o = linear(h, o, E, E, true, -1, NULL);
    leave(h, t);
    o = dropout(h, o, c->hidden_drop);
    leave(h, s);
    return o;
}

/* ViTModel (embeddings, pre-LN encoder, layernorm, pooler) or
 * ViTForImageClassification (ViTModel without pooler, classifier on the
 * [CLS] token), called as model(pixel_values): pixel_values float32
 * [batch, num_channels, image_size, image_size]. */
static void build_vit(struct hf *h, const struct vit *c)
{
    struct dm_graph *g = h->g;
    int64_t E = c->hidden, P = c->patch, n = c->image / c->patch;
    int64_t N = n * n + 1; /* patches and [CLS] */
    int32_t pix = declare_input(h, "pixel_values", DM_FLOAT, 4,
                                (const char *[]){"batch", NULL, NULL, NULL},
                                (int64_t[]){0, c->channels, c->image, c->image});
    g->outputs = dm_arena_array(&g->arena, 2, sizeof *g->outputs);
    if (!g->outputs) {
        oom(h);
        return;
    }
    size_t top = c->classify ? enter(h, "vit") : h->scope_len;
    size_t s = enter(h, "embeddings");
    int32_t cls = param(h, "cls_token", DM_FLOAT, 3, (int64_t[]){1, 1, E});
    int32_t pe = param(h, "position_embeddings", DM_FLOAT, 3, (int64_t[]){1, N, E});
    size_t t = enter(h, "patch_embeddings");
    size_t u = enter(h, "projection");
    int32_t w = param(h, "weight", DM_FLOAT, 4, (int64_t[]){E, c->channels, P, P});
    int32_t b = param(h, "bias", DM_FLOAT, 1, &E);
    int32_t y = op(h, DM_OP_Conv, 3, pix, w, b);
    attr_ints(h, "kernel_shape", INTS(P, P));
    attr_ints(h, "strides", INTS(P, P));
    leave(h, u);
    y = reshape(h, y, INTS(0, E, -1));   /* .flatten(2) */
    y = transpose(h, y, INTS(0, 2, 1)); /* .transpose(1, 2): [B, n*n, E], a view */
    leave(h, t);
    /* cat((cls_token.expand(B, -1, -1), embeddings), dim=1) + position_embeddings */
    int32_t b1 = op(h, DM_OP_Slice, 4, op(h, DM_OP_Shape, 1, pix), const_ints(h, INTS(0)),
                    const_ints(h, INTS(1)), const_ints(h, INTS(0)));
    int32_t shp = op(h, DM_OP_Concat, 2, b1, const_ints(h, INTS(1, 1)));
    attr_i(h, "axis", 0);
    int32_t ce = op(h, DM_OP_Expand, 2, cls, shp);
    int32_t x = op(h, DM_OP_Concat, 2, ce, y);
    attr_i(h, "axis", 1);
    x = op(h, DM_OP_Add, 2, x, pe);
    x = dropout(h, x, c->hidden_drop);
    int32_t emb = x;
    leave(h, s);
    size_t enc = enter(h, "encoder");
    for (int64_t i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = enter(h, "layer.%lld", (long long)i);
        t = enter(h, "layernorm_before");
        y = layer_norm(h, x, E, c->eps);
        leave(h, t);
        int32_t norm = y;
        t = enter(h, "attention");
        y = vit_attention(h, c, y);
        leave(h, t);
        int32_t attn = y;
        x = op(h, DM_OP_Add, 2, y, x); /* attention_output + hidden_states */
        t = enter(h, "layernorm_after");
        y = layer_norm(h, x, E, c->eps);
        leave(h, t);
        t = enter(h, "intermediate");
        u = enter(h, "dense");
        y = linear(h, y, E, c->inter, true, -1, NULL);
        leave(h, u);
        y = gpt2_act(h, c->act, y);
        leave(h, t);
        t = enter(h, "output");
        u = enter(h, "dense");
        y = linear(h, y, c->inter, E, true, -1, NULL);
        leave(h, u);
        y = dropout(h, y, c->hidden_drop);
        x = op(h, DM_OP_Add, 2, y, x); /* hidden_states + input_tensor */
        leave(h, t);
        /* ViTLayer.forward's locals hidden_states_norm and attention_output
         * live until it returns */
        hold(h, norm, last_node(h));
        hold(h, attn, last_node(h));
        leave(h, ls);
    }
    leave(h, enc);
    s = enter(h, "layernorm");
    x = layer_norm(h, x, E, c->eps);
    leave(h, s);
    hold(h, emb, last_node(h)); /* ViTModel.forward's embedding_output */
    int32_t pooled = -1;
    if (!c->classify) { /* ViTPooler: activation(dense(hidden[:, 0])) */
        s = enter(h, "pooler");
        int32_t f = first_token(h, x);
        t = enter(h, "dense");
        h->last_linear = true; /* ViTModel's last parameters */
        f = linear(h, f, E, c->pool_out, true, -1, NULL);
        h->last_linear = false;
        leave(h, t);
        t = enter(h, "activation");
        pooled = op(h, DM_OP_Tanh, 1, f);
        leave(h, t);
        leave(h, s);
    }
    leave(h, top);
    if (c->classify) {
        s = enter(h, "classifier");
        x = linear(h, first_token(h, x), E, c->labels, true, -1, "logits");
        leave(h, s);
    }
    add_output(h, x, 2);
    add_output(h, pooled, 2);
}

/* ViTConfig's defaults (ViT-Base/16 at 224). */
static void read_vit(struct hf *h, struct vit *c)
{
    c->hidden = get_int(h, "hidden_size", 768, MAX_SIZE);
    c->layers = get_int(h, "num_hidden_layers", 12, MAX_LAYERS);
    c->heads = get_int(h, "num_attention_heads", 12, MAX_SIZE);
    c->inter = get_int(h, "intermediate_size", 3072, MAX_SIZE);
    c->image = get_int(h, "image_size", 224, 1 << 20);
    c->patch = get_int(h, "patch_size", 16, 1 << 20);
    c->channels = get_int(h, "num_channels", 3, 1 << 20);
    c->pool_out = get_int(h, "pooler_output_size", h->st == DNNMEM_OK ? c->hidden : 1, MAX_SIZE);
    c->eps = get_num(h, "layer_norm_eps", 1e-12, 0, 1);
    c->attn_drop = get_num(h, "attention_probs_dropout_prob", 0.0, 0, 1);
    c->hidden_drop = get_num(h, "hidden_dropout_prob", 0.0, 0, 1);
    c->qkv_bias = get_bool(h, "qkv_bias", true);
    c->act = get_str(h, "hidden_act", "gelu");
    const char *pact = get_str(h, "pooler_act", "tanh");
    if (h->st != DNNMEM_OK)
        return;
    if (c->hidden % c->heads)
        fail(h, DNNMEM_E_MODEL,
             "config field 'hidden_size' (%lld) is not a multiple of 'num_attention_heads' (%lld)",
             (long long)c->hidden, (long long)c->heads);
    else if (c->patch > c->image)
        fail(h, DNNMEM_E_MODEL, "config field 'patch_size' (%lld) exceeds 'image_size' (%lld)",
             (long long)c->patch, (long long)c->image);
    else if (strcmp(c->act, "gelu") != 0 && strcmp(c->act, "gelu_new") != 0 &&
             strcmp(c->act, "gelu_pytorch_tanh") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'hidden_act' is '%s'; modelled for vit: gelu, gelu_new, "
             "gelu_pytorch_tanh", c->act);
    else if (strcmp(pact, "tanh") != 0)
        fail(h, DNNMEM_E_UNSUPPORTED, "config field 'pooler_act' is '%s'; only tanh is modelled",
             pact);
    json_t *arch = json_object_get(h->root, "architectures");
    if (h->st != DNNMEM_OK || !arch || json_is_null(arch))
        return;
    if (!json_is_array(arch)) {
        fail(h, DNNMEM_E_MODEL, "config field 'architectures' must be a list");
        return;
    }
    size_t i;
    json_t *a;
    json_array_foreach(arch, i, a)
    {
        const char *s = json_is_string(a) ? json_string_value(a) : "";
        if (strcmp(s, "ViTModel") == 0)
            return;
        if (strcmp(s, "ViTForImageClassification") == 0) {
            c->classify = true;
            c->labels = num_labels(h);
            return;
        }
    }
    a = json_array_get(arch, 0);
    fail(h, DNNMEM_E_UNSUPPORTED,
         "config field 'architectures' names %s; the heads built are ViTModel and "
         "ViTForImageClassification",
         json_is_string(a) ? json_string_value(a) : "a non-string");
}

/* T5, mT5 and ViT: built by their own functions, which declare the inputs
 * and outputs. */
static enum dnnmem_status build_other(struct hf *h, const char *type)
{
    if (strcmp(type, "vit") == 0) {
        struct vit c = {0};
        read_vit(h, &c);
        if (h->st == DNNMEM_OK)
            build_vit(h, &c);
    } else {
        struct t5 c = {0};
        read_t5(h, type, &c);
        if (h->st == DNNMEM_OK)
            build_t5(h, &c);
    }
    quant_finish(h);
    return h->st == DNNMEM_OK ? dm_graph_finish(h->g, h->err) : h->st;
}

#include "hf_decoders.inc"

static const char *const known_types =
    "llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt2, "
    "bert, roberta, albert, distilbert, t5, mt5, vit, opt, biogpt, gpt_neox, falcon, phi, phi3, "
    "gemma, gemma2, gemma3_text, gemma3 (its text_config)";

/* The model_type, or "gpt2" for the legacy GPT-2 configs that predate it. */
static const char *model_type(struct hf *h)
{
    json_t *v = json_object_get(h->root, "model_type");
    if (v && !json_is_string(v)) {
        fail(h, DNNMEM_E_MODEL, "config field 'model_type' must be a string");
        return NULL;
    }
    if (v)
        return json_string_value(v);
    json_t *arch = json_object_get(h->root, "architectures");
    size_t i;
    json_t *a;
    if (json_is_array(arch)) {
        json_array_foreach(arch, i, a)
        {
            if (json_is_string(a) && strcmp(json_string_value(a), "GPT2LMHeadModel") == 0)
                return "gpt2";
        }
    }
    if (json_object_get(h->root, "n_embd") && json_object_get(h->root, "n_layer"))
        return "gpt2";
    if (!arch && !json_object_get(h->root, "vocab_size"))
        fail(h, DNNMEM_E_UNSUPPORTED,
             "a JSON file that is not a HuggingFace config.json (no 'model_type', "
             "'architectures' or 'vocab_size'); supported: ONNX models, HuggingFace configs and Keras model JSON");
    else
        fail(h, DNNMEM_E_MODEL, "config field 'model_type' is missing (known: %s)", known_types);
    return NULL;
}

/* `architectures`, when given, must name the causal LM this file builds. */
static void check_architectures(struct hf *h)
{
    json_t *arch = json_object_get(h->root, "architectures");
    if (!arch || json_is_null(arch))
        return;
    if (!json_is_array(arch)) {
        fail(h, DNNMEM_E_MODEL, "config field 'architectures' must be a list");
        return;
    }
    size_t i;
    json_t *a;
    const char *other = NULL;
    json_array_foreach(arch, i, a)
    {
        const char *s = json_is_string(a) ? json_string_value(a) : "";
        size_t n = strlen(s);
        if ((n >= 11 && strcmp(s + n - 11, "ForCausalLM") == 0) ||
            (n >= 11 && strcmp(s + n - 11, "LMHeadModel") == 0))
            return;
        other = s;
    }
    if (other)
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'architectures' names %s; only the causal LM (...ForCausalLM, "
             "GPT2LMHeadModel) is built",
             other);
}

static enum dnnmem_status build(struct hf *h)
{
    struct dm_graph *g = h->g;
    if (!json_is_object(h->root))
        return fail(h, DNNMEM_E_MODEL, "a HuggingFace config must be a JSON object");
    const char *type = model_type(h);
    if (!type)
        return h->st;
    bool gpt2 = strcmp(type, "gpt2") == 0, distil = strcmp(type, "distilbert") == 0;
    enum bert_kind kind = strcmp(type, "roberta") == 0  ? K_ROBERTA
                          : strcmp(type, "albert") == 0 ? K_ALBERT
                                                        : K_BERT;
    bool bert = distil || kind != K_BERT || strcmp(type, "bert") == 0;
    bool other = strcmp(type, "t5") == 0 || strcmp(type, "mt5") == 0 || strcmp(type, "vit") == 0;
    /* the multimodal Gemma 3 wrapper: its text_config's causal LM */
    json_t *text = strcmp(type, "gemma3") == 0 ? json_object_get(h->root, "text_config") : NULL;
    if (strcmp(type, "gemma3") == 0 && !json_is_object(text))
        return fail(h, DNNMEM_E_MODEL, "config field 'text_config' is missing (model_type gemma3)");
    if (strcmp(type, "mixformer-sequential") == 0)
        return fail(h, DNNMEM_E_UNSUPPORTED,
                    "model_type 'mixformer-sequential' (phi's early remote-code format) is not "
                    "supported; use the transformers config of the model (model_type 'phi')");
    struct dec dc = {0};
    bool dec = false;
    bool moe_type = is_moe_type(type);
    if (!gpt2 && !bert && !other && !moe_type) {
        json_t *outer = h->root;
        if (text)
            h->root = text;
        dec = read_decoder(h, text ? "gemma3_text" : type, &dc);
        h->root = outer;
    }
    if (!gpt2 && !bert && !other && !dec && !moe_type && strcmp(type, "llama") != 0 &&
        strcmp(type, "mistral") != 0 && strcmp(type, "qwen2") != 0 && strcmp(type, "qwen3") != 0)
        return fail(h, DNNMEM_E_UNSUPPORTED, "model_type '%s' is not supported (known: %s)", type,
                    known_types);
    if (!bert && !other && !text)
        check_architectures(h);
    /* flash_attention_2 as transformers 4.51 runs it through the shared
     * attention interface (flash_attention_forward): the families whose
     * attention was moved onto it (GPT-2 with 4.48; OPT, GPT-NeoX and Phi,
     * whose eager path is the interface's eager_attention_forward in 4.51,
     * hf_decoders.inc), and DistilBERT's own DistilBertFlashAttention2 on
     * views (distil_attention), Qwen2-MoE's own class (repeat_kv first,
     * llama_attention) and Falcon's FalconFlashAttention2 (the rotated q, k
     * and the fused output's v view, transposed back into flash_attn_func
     * without repeating: dec_core's flash path). BioGPT has none in 4.51
     * (BioGptPreTrainedModel sets no _supports_flash_attn_2) and from 4.52,
     * on BART's modular code, runs the interface; ViT (as 4.53-4.57 build
     * it, vit_attention) runs it too; 4.51's BERT, RoBERTa, ALBERT and T5
     * have none; DeepSeek's MLA pads its values to the query head size. */
    static const char *const flash_types[] = {"llama", "mistral", "qwen2", "qwen3", "mixtral",
                                              "qwen3_moe", "gemma", "gemma2", "gemma3",
                                              "gemma3_text", "phi3", "gpt2", "opt",
                                              "gpt_neox", "phi", "distilbert", "qwen2_moe",
                                              "falcon", "biogpt", "vit"};
    bool flash_ok = false;
    for (size_t k = 0; k < sizeof flash_types / sizeof *flash_types; k++)
        flash_ok |= strcmp(type, flash_types[k]) == 0;
    if (h->flash && strcmp(type, "biogpt") == 0 && h->transformers < 452)
        return fail(h, DNNMEM_E_UNSUPPORTED,
                    "--attn flash: transformers %d.%d's BioGPT has no flash_attention_2 (from "
                    "4.52 it has: --transformers 4.52); use --attn sdpa or eager",
                    h->transformers / 100, h->transformers % 100);
    if (h->flash && !flash_ok)
        return fail(h, DNNMEM_E_UNSUPPORTED,
                    "--attn flash: flash_attention_2 for model_type '%s' is not modelled "
                    "(modelled: llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, "
                    "gemma, gemma2, gemma3, phi3, phi, gpt2, opt, gpt_neox, falcon, distilbert, "
                    "biogpt, vit; transformers 4.51's bert, roberta, albert and t5 have none); "
                    "use --attn sdpa or eager",
                    type);
    read_quant(h, h->opt_quant);
    h->prep32 = h->kbit && !h->amp &&
                (h->q.method == Q_BNB4 || h->q.method == Q_BNB8 || h->q.method == Q_AWQ);
    if (h->q.method == Q_AWQ && (strcmp(type, "falcon") == 0 || strcmp(type, "gpt_neox") == 0))
        fail(h, DNNMEM_E_UNSUPPORTED,
             "config field 'quantization_config': awq on model_type '%s' adds AutoAWQ's "
             "ScaledActivation (replace_quantization_scales), which is not modelled",
             type);
    struct llama lc = {0};
    struct gpt2 gc = {0};
    struct bert bc = {0};
    struct moe moe = {0};
    struct mla mla = {0};
    if (other) {
        /* build_other reads its config */
    } else if (moe_type)
        read_moe(h, type, &lc, &moe, &mla);
    else if (gpt2)
        read_gpt2(h, &gc);
    else if (distil)
        read_distilbert(h, &bc);
    else if (bert)
        read_bert(h, kind, &bc);
    else if (!dec)
        read_llama(h, type, &lc);
    if (h->st != DNNMEM_OK)
        return h->st;
    int64_t layers = gpt2 ? gc.layers : bert ? bc.layers : dec ? dc.layers : lc.layers;
    bool use_cache = !bert && (gpt2 ? gc.use_cache : dec ? dc.use_cache : lc.use_cache);

    /* informative only: the checkpoint's dtype is not the job's (see the top) */
    const char *tv = json_string_value(json_object_get(h->root, "transformers_version"));
    const char *dt = json_string_value(json_object_get(h->root, "torch_dtype"));
    if (!dt)
        dt = json_string_value(json_object_get(h->root, "dtype"));
    g->format = "huggingface";
    g->opset = HF_OPSET;
    g->stored_dtype = dt ? dm_arena_strdup(&g->arena, dt) : NULL;
    g->producer = dm_arena_printf(&g->arena, "transformers config%s%s (%s)%s%s%s",
                                  tv ? " " : "", tv ? tv : "", type,
                                  dt ? "; checkpoint " : "", dt ? dt : "",
                                  dt ? ", built float32" : "");
    if (other)
        return build_other(h, type);

    /* input_ids int64 [batch, seq] */
    int32_t ids = dm_graph_add_tensor(g, "input_ids");
    struct dm_dim *d = dm_arena_array(&g->arena, 2, sizeof *d);
    int32_t sb = dm_graph_symbol(g, "batch"), sq = dm_graph_symbol(g, "seq");
    g->inputs = dm_arena_array(&g->arena, 1, sizeof *g->inputs);
    /* logits or hidden, pooler; presents and the parts of fused projections
     * that the presents' views keep alive (present.N.qkv.J) */
    size_t n_out = 2 + (use_cache ? (dec || gpt2 ? 4 : 2) * (size_t)layers : 0);
    g->outputs = dm_arena_array(&g->arena, n_out, sizeof *g->outputs);
    if (ids < 0 || !d || sb < 0 || sq < 0 || !g->inputs || !g->outputs) {
        oom(h);
        return h->st;
    }
    d[0] = (struct dm_dim){-1, sb};
    d[1] = (struct dm_dim){-1, sq};
    g->tensors[ids] = (struct dm_tensor){.name = g->tensors[ids].name, .dtype = DM_INT64,
                                         .rank = 2, .dims = d, .role = DM_ROLE_INPUT,
                                         .producer = -1};
    g->inputs[g->n_inputs++] = ids;

    int32_t pooled = -1;
    int32_t logits = gpt2   ? build_gpt2(h, &gc, ids)
                     : distil ? build_distilbert(h, &bc, ids)
                     : bert   ? build_bert(h, &bc, ids, &pooled)
                     : dec    ? build_decoder(h, &dc, ids)
                            : build_llama(h, &lc, ids);
    if (h->st != DNNMEM_OK)
        return h->st;
    if (bert) { /* last_hidden_state and pooler_output, or the MLM logits */
        g->tensors[logits].is_output = true;
        g->outputs[g->n_outputs++] = logits;
        if (pooled >= 0) {
            g->tensors[pooled].is_output = true;
            g->outputs[g->n_outputs++] = pooled;
        }
        quant_finish(h);
        return h->st == DNNMEM_OK ? dm_graph_finish(g, h->err) : h->st;
    }
    /* model(input_ids, labels=...) computes its loss in float32
     * (ForCausalLMLoss, transformers >= 4.46; LlamaForCausalLM's forward
     * upcast the logits itself before that) */
    g->loss_upcast = true;
    /* LlamaForCausalLM.forward(logits_to_keep), 4.45+; GPT2LMHeadModel's
     * in transformers 5 (measured, 5.17 on the H200: its prefill peak is the
     * last position's logits, not every position's) */
    g->logits_to_keep = !gpt2 || h->gpt2_v5;
    /* GPT2PreTrainedModel in 4.51 sets no _supports_cache_class: generate
     * prepares no Cache and GPT2Attention concatenates onto the layer_past
     * tuple; its eager forward inverts generate's 2-D attention_mask. From
     * 4.52 (PR #35761) GPT2Model takes a DynamicCache and builds its mask as
     * Llama does (measured with 5.17 on the H200: +8.0% as a legacy tuple,
     * +1.7% so) */
    g->legacy_cache = gpt2 && !h->gpt2_cache;
    g->gen_mask = gpt2 && !h->gpt2_cache ? DM_GEN_MASK_INVERTED : DM_GEN_MASK_CAUSAL;
    if (dec) /* hf_decoders.inc: per family, as 4.51's generate() runs it */
        dec_generation(g, &dc);
    g->tensors[logits].is_output = true;
    g->outputs[g->n_outputs++] = logits;
    /* a HybridCache returns the caches (graph inputs), not the presents */
    if (g->cache_len)
        use_cache = false;
    for (int64_t i = 0; use_cache && i < layers; i++)
        for (int j = 0; j < 2; j++) {
            char name[64];
            snprintf(name, sizeof name, "present.%lld.%s", (long long)i, j ? "value" : "key");
            int32_t t = dm_graph_find(g, name);
            if (t < 0)
                return fail(h, DNNMEM_E_INTERNAL, "no tensor '%s'", name);
            g->tensors[t].is_output = true;
            g->outputs[g->n_outputs++] = t;
        }
    for (int64_t i = 0; (dec || gpt2) && use_cache && i < layers; i++)
        for (int j = 0; j < 2; j++) {
            char name[64];
            snprintf(name, sizeof name, "present.%lld.qkv.%d", (long long)i, j);
            int32_t t = dm_graph_find(g, name);
            if (t >= 0) {
                g->tensors[t].is_output = true;
                g->outputs[g->n_outputs++] = t;
            }
        }
    quant_finish(h);
    return h->st == DNNMEM_OK ? dm_graph_finish(g, h->err) : h->st;
}

/* PEFT's default target_modules (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING). */
static size_t default_targets(const char *type, const char *const **out)
{
    static const char *const qv[] = {"q_proj", "v_proj"}, *const gpt2[] = {"c_attn"},
                             *const bert[] = {"query", "value"}, *const distil[] = {"q_lin", "v_lin"},
                             *const t5[] = {"q", "v"};
    static const char *const fused[] = {"query_key_value"}, *const phi3[] = {"qkv_proj"};
    if (strcmp(type, "gpt2") == 0) {
        *out = gpt2;
        return 1;
    }
    if (strcmp(type, "t5") == 0 || strcmp(type, "mt5") == 0) {
        *out = t5;
        return 2;
    }
    if (strcmp(type, "vit") == 0) {
        *out = bert;
        return 2;
    }
    if (strcmp(type, "gpt_neox") == 0 || strcmp(type, "falcon") == 0 || strcmp(type, "phi3") == 0) {
        *out = strcmp(type, "phi3") == 0 ? phi3 : fused;
        return 1;
    }
    *out = strcmp(type, "distilbert") == 0                                    ? distil
           : strcmp(type, "bert") == 0 || strcmp(type, "roberta") == 0 ||
                   strcmp(type, "albert") == 0                                ? bert
                                                                              : qv;
    return 2;
}

enum dnnmem_status dm_load_hf(struct dm_graph *g, const uint8_t *data, size_t size, bool sdpa,
                              const struct dnnmem_config *opt, struct dnnmem_error *err)
{
    struct hf h = {.g = g, .err = err, .path = g->path, .st = DNNMEM_OK, .sdpa = sdpa,
                   .flash = opt && opt->attn == DNNMEM_ATTN_FLASH,
                   .opt_quant = opt ? opt->quant : DNNMEM_QUANT_NONE,
                   .kbit = opt && opt->mode == DNNMEM_MODE_TRAIN ? opt->kbit_prep
                                                                 : DNNMEM_KBIT_PREP_NONE,
                   .amp = opt && (opt->precision == DNNMEM_PRECISION_AMP_FP16 ||
                                  opt->precision == DNNMEM_PRECISION_AMP_BF16)};
    h.sdpa |= h.flash;
    int tv = opt && opt->transformers_version ? opt->transformers_version : DM_TRANSFORMERS_DEFAULT;
    int torch = opt && opt->torch_version ? opt->torch_version : DM_TORCH_DEFAULT;
    h.gqa_sdpa = h.sdpa && !h.flash && tv >= 454 && torch >= 205;
    h.half = h.amp || (opt && (opt->precision == DNNMEM_PRECISION_FP16 ||
                               opt->precision == DNNMEM_PRECISION_BF16));
    h.cc = opt && opt->compute_capability ? opt->compute_capability : DM_CC_DEFAULT;
    h.half_to_float = opt && opt->precision == DNNMEM_PRECISION_FP16 &&
                      opt->device == DNNMEM_DEVICE_CUDA;
    h.transformers = tv;
    h.albert_interface = tv >= 454;
    h.sdpa_as_is = tv >= 456;
    h.backend = opt && h.sdpa && !h.flash ? opt->sdpa_backend : DNNMEM_SDPA_AUTO;
    h.train = opt && opt->mode == DNNMEM_MODE_TRAIN;
    h.torch = torch;
    h.bf16 = opt && (opt->precision == DNNMEM_PRECISION_BF16 ||
                     opt->precision == DNNMEM_PRECISION_AMP_BF16);
    h.gpt2_cache = tv >= 452;
    h.gpt2_v5 = tv >= 500;
    h.cache_copy = tv >= 500;
    const struct dnnmem_lora *lora = opt ? &opt->lora : NULL;
    if (opt && opt->mode == DNNMEM_MODE_GENERATE && opt->new_tokens > 0) {
        h.gen_tokens = opt->new_tokens;
        h.gen_prompt = opt->seq_len > 0 ? opt->seq_len : 0;
        for (size_t k = 0; k < opt->n_dims; k++)
            if (opt->dims[k].name && strcmp(opt->dims[k].name, "seq") == 0)
                h.gen_prompt = opt->dims[k].value;
    }
    json_error_t je;
    h.root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!h.root)
        return dm_fail(err, DNNMEM_E_PARSE, "%s: not valid JSON: %s (line %d, column %d)", g->path,
                       je.text, je.line, je.column);
    if (lora && lora->r > 0) {
        h.lora = lora;
        h.lora_targets = lora->targets;
        h.n_lora_targets = lora->n_targets;
        if (!h.n_lora_targets) {
            const char *type = json_string_value(json_object_get(h.root, "model_type"));
            h.n_lora_targets = default_targets(type ? type : "gpt2", &h.lora_targets);
        }
        h.lora_hits = calloc(h.n_lora_targets, sizeof *h.lora_hits);
        if (!h.lora_hits)
            h.st = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    /* gradient checkpointing in training turns use_cache off (LlamaModel.forward
     * and the others of 4.51): built as a config that says so */
    bool ckpt = opt && opt->mode == DNNMEM_MODE_TRAIN && opt->n_checkpoint > 0;
    if (h.st == DNNMEM_OK && (kbit_gc(&h) || ckpt)) {
        json_t *text = json_object_get(h.root, "text_config");
        if (json_object_set_new(h.root, "use_cache", json_false()) ||
            (json_is_object(text) && json_object_set_new(text, "use_cache", json_false())))
            h.st = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    enum dnnmem_status s = h.st == DNNMEM_OK ? build(&h) : h.st;
    if (s == DNNMEM_OK && h.kbit) {
        kbit_finish(&h);
        s = h.st;
    }
    for (size_t k = 0; s == DNNMEM_OK && k < h.n_lora_targets; k++)
        if (!h.lora_hits[k])
            s = dm_fail(err, DNNMEM_E_USAGE,
                        "%s: --lora-targets %s: no linear module of the model is named so",
                        g->path, h.lora_targets[k]);
    /* get_peft_model freezes the model: only the adapters train */
    for (int32_t i = 0; s == DNNMEM_OK && h.lora && i < g->n_tensors; i++)
        if (g->tensors[i].role == DM_ROLE_WEIGHT)
            g->tensors[i].frozen = !strstr(g->tensors[i].name, ".lora_");
    json_decref(h.root);
    free(h.names);
    free(h.lora_hits);
    return s;
}
