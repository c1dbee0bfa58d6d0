/*
 * hf.h: the HuggingFace front end's internals (src/load/hf/), shared by its
 * files: the builder state, the config structs the families share, and each
 * file's functions that others call. Not a public interface.
 */
#ifndef DNNMEM_LOAD_HF_H
#define DNNMEM_LOAD_HF_H

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

/* A model_type's row in the registry (hf.c's table): the family's builder
 * and what the entry point checks for it. Adding a family: its file, whose
 * builder reads the config (after hf_check) and builds the graph (after
 * hf_begin), a prototype below and a row. */
enum {
    HF_ANY_ARCH = 1,    /* 'architectures' may name any head (else the causal LM's) */
    HF_NO_AWQ = 2,      /* awq adds a ScaledActivation that is not modelled */
    HF_NO_GC = 4,       /* gradient_checkpointing_enable raises (--kbit-prep) */
    HF_TEXT_CONFIG = 8, /* a multimodal wrapper: its text_config's language model */
};

struct hf;
/* A decoder's task heads: transformers' <Cls>ForSequenceClassification,
 * <Cls>ForTokenClassification and <Cls>ForQuestionAnswering over the base
 * model (frame.c builds them, hf_task_head); each a bit of hf_arch.heads. */
enum hf_task_kind { HF_TASK_LM, HF_TASK_SEQCLS, HF_TASK_TOKCLS, HF_TASK_QA, HF_TASK_N };
#define HF_HEAD(k) (1u << (k))
#define HF_HEADS_ALL (HF_HEAD(HF_TASK_SEQCLS) | HF_HEAD(HF_TASK_TOKCLS) | HF_HEAD(HF_TASK_QA))

/* The head 'architectures' names (hf_check reads it for a registry row
 * with heads; HF_TASK_LM otherwise). */
struct hf_task {
    enum hf_task_kind kind;
    int64_t labels;     /* num_labels (sequence and token classification) */
    int64_t pad;        /* sequence classification: pad_token_id, -1: none */
    double drop;        /* token classification: its dropout's p */
    bool bias;          /* token classification: its Linear's bias */
    bool upcast;        /* token classification: its loss on logits.float() */
    const char *module; /* token classification: its Linear's name */
    int32_t ids;        /* input_ids (hf_causal_ids), which the pooling reads */
};

struct hf_arch {
    const char *type;  /* model_type */
    enum dnnmem_status (*build)(struct hf *h, const char *type);
    int flash;         /* flash_attention_2 modelled: from this transformers release
                          (major * 100 + minor; 1: every one), 0: none */
    unsigned flags;    /* HF_* */
    const char *const *lora; /* PEFT's default target_modules */
    size_t n_lora;
    const char *cls;   /* transformers' class-name prefix ("GPT2" of GPT2LMHeadModel): a
                          config without model_type is resolved from its architectures;
                          NULL: not resolved so */
    int oldest;        /* the oldest transformers release modelled for it; 0: 4.51
                          (DM_TRANSFORMERS_WIDE) */
    unsigned heads;    /* the task heads built (HF_HEAD bits; those of transformers
                          4.56.2 and 5.24.0's modeling files), besides the causal LM */
};

struct hf {
    struct dm_graph *g;
    struct dnnmem_error *err;
    const char *path;
    json_t *root;
    const struct hf_arch *arch; /* the model_type's row (NULL before it is known) */
    struct hf_task task;        /* the head built (hf_check) */
    enum dnnmem_status st;     /* the first error; later calls do nothing */
    bool refused;              /* st is hf_refuse's: the graph stands as built so far,
                                  its refusal recorded (g->refusal) */
    int32_t cap_nodes;
    char scope[256];           /* the module path, "/model/layers.0/self_attn" */
    size_t scope_len;
    uint32_t scope_fnv[256];   /* [i]: dm_hash_bytes of scope's first i bytes (i <=
                                  scope_len): node and tensor names hash on from their
                                  scope's state */
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
    bool cpu;                  /* --device cpu: sdpa runs the CPU flash kernel
                                  (hf_cpu_flash) */
    int transformers;          /* the release, major * 100 + minor (--transformers) */
    enum dnnmem_sdpa_backend backend; /* --sdpa-backend: the kernel forced, or AUTO */
    bool train;                /* --mode train (inputs require grad) */
    bool ckpt;                 /* --checkpoint in training (gradient checkpointing) */
    bool batched_decode;       /* generate's decode steps switch 5.x's MoE experts to
                                  batched_mm (src/schedule/generate.c, moe_decode) */
    bool bf16;                 /* the attention computes in bf16 */
    int torch;                 /* the PyTorch release, major * 100 + minor */
    bool albert_interface;     /* ALBERT's attention runs the shared eager_attention_forward:
                                  transformers >= 4.54 (PR #38301) */
    bool sdpa_as_is;           /* sdpa_attention_forward passes q, k, v to the kernel as
                                  they are, no .contiguous(): transformers >= 4.56 */
    bool gpt2_cache;           /* GPT-2 takes Cache classes: transformers >= 4.52 */
    bool gpt2_v5;              /* GPT-2 keeps only the last logits: transformers >= 5 */
    bool cache_copy;           /* the cache copies the states it is given (DynamicLayer,
                                  transformers >= 4.56): see hf_cache_update */
    bool share;                /* hf_param() returns an existing parameter of that name
                                  (ALBERT's layers shared across calls) */
    const struct dnnmem_lora *lora; /* adapters to add, or NULL */
    double lora_alpha;         /* their lora_alpha (struct dm_hf_env) */
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
    bool as_loaded;            /* built without options (the outline, or the graph as
                                  loaded): a model type newer than DM_TRANSFORMERS_BASE
                                  is built at its oldest release (hf_check) */
    bool outline;              /* dm_load_hf_outline: nodes and the activations no
                                  out_name names are left unnamed */
    /* node names: the ops named so far in each module path, so that the
     * k-th node of an op there is "<scope>/<Op>_<k>" (builder.c) */
    struct scope_names **scopes; /* by path, open addressing (malloc'd) */
    uint32_t scopes_cap, n_scopes;
    struct scope_names *scope_at[256]; /* [scope_len]: the current path's, NULL until
                                          looked up (hf_enter clears its own) */
    struct dm_arena names_arena;       /* the paths and counts (freed after the build) */
};

#define INTS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

enum qmethod { Q_NONE, Q_BNB4, Q_BNB8, Q_GPTQ, Q_AWQ, Q_FP8 };

struct llama {
    const char *type;
    int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim;
    double eps, attn_drop, theta;
    bool tie, qkv_bias, o_bias, mlp_bias, qk_norm, use_cache;
    bool granite;          /* Granite's multipliers (all applied, 1.0 included) */
    bool olmo2;            /* OLMo 2: norms after the attention and the MLP, q/k norms over
                              the whole projection, Olmo2RMSNorm */
    bool starcoder2;       /* StarCoder2: LayerNorms, c_fc/c_proj MLP, dropouts */
    const char *act;       /* StarCoder2's hidden_act */
    double resid_drop, emb_drop; /* StarCoder2's residual_dropout, embedding_dropout */
    double emb_mult, resid_mult, attn_mult, logits_scale;
    const struct moe *moe; /* MoE layers (Mixtral, Qwen-MoE, DeepSeek) or NULL */
    const struct mla *mla; /* DeepSeek's latent attention or NULL */
};

enum topk_method { TOPK_GREEDY, TOPK_GROUP_LIMITED, TOPK_NOAUX_TC };

struct moe {
    enum { MOE_MIXTRAL, MOE_QWEN, MOE_DEEPSEEK, MOE_GPTOSS } kind; /* GPTOSS: gptoss.c's
                                       experts (biases, [E, in, out] weights, its gate) */
    int64_t experts, top_k, inter;  /* routed experts, per token, their intermediate size */
    int64_t shared_inter;           /* the shared expert's intermediate size, 0: none */
    bool shared_gate;               /* Qwen2-MoE's sigmoid shared_expert_gate */
    bool norm_topk;                 /* routing weights renormalised to sum 1 */
    int64_t sparse_step;            /* Qwen: MoE where (layer + 1) % step == 0 */
    json_t *mlp_only;               /* Qwen: layers with a dense MLP (a JSON list) or NULL */
    int64_t first_dense, freq;      /* DeepSeek: first_k_dense_replace, moe_layer_freq */
    bool sigmoid;                   /* DeepSeek: scoring_func sigmoid (else softmax) */
    bool v2;                        /* deepseek_v2 (DeepseekV2MoE's own block in 4.54-4.57) */
    enum topk_method method;
    int64_t groups, topk_group;
    double scale;                   /* routed_scaling_factor */
    bool aux;                       /* output_router_logits: the load-balancing loss */
    double aux_coef;                /* router_aux_loss_coef */
};

struct mla {
    int64_t q_lora, kv_lora, nope, rope, v; /* q_lora 0: q_proj */
    bool bias;                              /* attention_bias */
    bool complex_rope;                      /* deepseek_v2: apply_rotary_emb's complex product */
    bool interleave;                        /* DeepseekV3Config.rope_interleave (default true) */
};

/* The expert loop on x2 [N, hidden] (see above): routing weights rw [N, k],
 * chosen experts sel int64 [N, k], into final [N, hidden], which it
 * returns. DeepSeek's mask is permuted (2, 0, 1), the others' (2, 1, 0);
 * DeepSeek's float32 weights make each weighted output float32. locals[]
 * gets what stays referenced until the enclosing function returns: the
 * expert mask and the loop variables of the last iteration (a Python for
 * loop leaves them bound): its token indices, gathered input, weights and
 * output. */
#define LOOP_LOCALS 6

enum dec_kind { DK_OPT, DK_BIOGPT, DK_NEOX, DK_FALCON, DK_PHI, DK_PHI3, DK_GEMMA, DK_GEMMA2, DK_GEMMA3 };

struct dec {
    enum dec_kind kind;
    const char *type;
    int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim, rot, positions, word_dim;
    int64_t window, pattern;   /* sliding window (0: none); Gemma 3's sliding_window_pattern */
    double eps, attn_drop, drop, emb_drop, theta, theta_local, rope_factor, scaling;
    double attn_cap, final_cap; /* 0: no softcapping */
    const char *act;
    bool tie, use_cache, bias, out_bias, mlp_bias, pre_norm, parallel, new_arch, multi_query,
        two_ln, qk_layernorm, scale_emb, head_bias;
    bool hybrid; /* generate() builds a HybridCache (cache_implementation "hybrid") */
    bool sdpa_views; /* the family's own sdpa class passes q, k, v to the kernel as the
                        views they are (no .contiguous(): hf_dec_core) */
    bool shared_core; /* a family with its own attention code (Falcon before 5.25) runs the
                         shared eager_attention_forward / sdpa_attention_forward instead
                         (hf_dec_core's generic path) */
};

/* ---- hf.c: the registry and the frame every family builds in */

bool hf_check(struct hf *h, const char *type);
bool hf_begin(struct hf *h, const char *type);
int32_t hf_input_ids(struct hf *h, size_t n_out);
int32_t hf_choice_ids(struct hf *h, size_t n_out, int32_t *choices);
enum dnnmem_status hf_finish(struct hf *h);
enum dnnmem_status hf_encoder_outputs(struct hf *h, int32_t x, int32_t pooled);
int32_t hf_causal_ids(struct hf *h, int64_t layers, bool use_cache, bool parts);
enum dnnmem_status hf_causal_outputs(struct hf *h, int32_t logits, int64_t layers, bool use_cache,
                                     bool parts);
int32_t hf_task_head(struct hf *h, int32_t x, int64_t E);
int32_t hf_qa_logits(struct hf *h, int32_t x, int64_t E, int32_t *end);
int64_t hf_num_labels(struct hf *h);

/* The families' builders (the registry's build): each reads its config and
 * builds the graph, inputs and outputs. */
enum dnnmem_status hf_llama(struct hf *h, const char *type);      /* llama.c */
enum dnnmem_status hf_moe(struct hf *h, const char *type);        /* moe.c */
enum dnnmem_status hf_gpt2(struct hf *h, const char *type);       /* gpt2.c */
enum dnnmem_status hf_bert(struct hf *h, const char *type);       /* bert.c */
enum dnnmem_status hf_distilbert(struct hf *h, const char *type); /* bert.c */
enum dnnmem_status hf_t5(struct hf *h, const char *type);         /* t5.c */
enum dnnmem_status hf_vit(struct hf *h, const char *type);        /* vit.c */
enum dnnmem_status hf_whisper(struct hf *h, const char *type);    /* whisper.c */
enum dnnmem_status hf_opt(struct hf *h, const char *type);        /* opt.c */
enum dnnmem_status hf_neox(struct hf *h, const char *type);       /* neox.c */
enum dnnmem_status hf_gemma(struct hf *h, const char *type);      /* gemma.c */
enum dnnmem_status hf_gptoss(struct hf *h, const char *type);     /* gptoss.c */
enum dnnmem_status hf_mamba(struct hf *h, const char *type);      /* mamba.c */

/* ---- builder.c: config fields, node names and scopes, nodes, attributes, constants, parameters, shape ops, norms, rotary, the KV cache */

enum dnnmem_status hf_fail(struct hf *h, enum dnnmem_status s, const char *fmt, ...)
    DM_PRINTF(3, 4);
int32_t hf_oom(struct hf *h);
/* What the options ask that the model cannot give (struct dm_refusal):
 * recorded on the graph (name, why copied) and the build stopped as
 * hf_fail stops it; the estimate's check table gives the error. */
enum dnnmem_status hf_refuse(struct hf *h, enum dm_refusal_kind kind, const char *name,
                             const char *why);
json_t *hf_field(struct hf *h, const char *key);
int64_t hf_get_int(struct hf *h, const char *key, int64_t dflt, int64_t max);
double hf_get_num(struct hf *h, const char *key, double dflt, double lo, double hi);
bool hf_get_bool(struct hf *h, const char *key, bool dflt);
const char *hf_get_str(struct hf *h, const char *key, const char *dflt);
/* Enter a module: the scope gains "/<name>"; returns what hf_leave() restores. */
size_t hf_enter(struct hf *h, const char *fmt, ...) DM_PRINTF(2, 3);
void hf_leave(struct hf *h, size_t len);
struct dm_node *hf_node(struct hf *h, enum dm_op op, int n_in, const int32_t *in, int n_out);
int32_t hf_op(struct hf *h, enum dm_op o, int n_in, ...);
struct dm_attr *hf_attr(struct hf *h, const char *name, enum dm_attr_kind kind);
void hf_attr_i(struct hf *h, const char *name, int64_t v);
void hf_attr_f(struct hf *h, const char *name, double v);
void hf_attr_s(struct hf *h, const char *name, const char *v);
void hf_attr_ints(struct hf *h, const char *name, int n, const int64_t *v);
void hf_attr_floats(struct hf *h, const char *name, int n, const double *v);
int32_t hf_constant(struct hf *h);
int32_t hf_const_f(struct hf *h, double v);
int32_t hf_const_i(struct hf *h, int64_t v);
int32_t hf_const_ints(struct hf *h, int n, const int64_t *v);
int32_t hf_param_named(struct hf *h, const char *name, enum dm_dtype dtype, int rank,
                       const int64_t *dims);
void hf_module_path(const struct hf *h, char *buf, size_t cap);
int32_t hf_param(struct hf *h, const char *what, enum dm_dtype dtype, int rank,
                 const int64_t *dims);
int32_t hf_transpose(struct hf *h, int32_t x, int n, const int64_t *perm);
int32_t hf_reshape(struct hf *h, int32_t x, int n, const int64_t *shape);
int32_t hf_unsqueeze(struct hf *h, int32_t x, int n, const int64_t *axes);
int32_t hf_dropout(struct hf *h, int32_t x, double p);
void hf_hold(struct hf *h, int32_t x, int32_t until);
int32_t hf_last_node(struct hf *h);
int32_t hf_rms_norm(struct hf *h, int32_t x, int64_t dim, double eps);
int32_t hf_rms_norm_olmo(struct hf *h, int32_t x, int64_t dim, double eps);
int32_t hf_rope(struct hf *h, int32_t x, int32_t cos, int32_t sin, int64_t d,
                const char *name);
const char *hf_cache_at_make(const struct hf *h, const char *name);
int32_t hf_cache_update(struct hf *h, int32_t x, const char *name);
int32_t hf_narrow(struct hf *h, int32_t x, int64_t axis, int64_t start, int64_t length);
int32_t hf_rotate_half(struct hf *h, int32_t x, int64_t d);
int32_t hf_layer_norm(struct hf *h, int32_t x, int64_t dim, double eps);
int32_t hf_declare_input(struct hf *h, const char *name, enum dm_dtype dtype, int rank,
                         const char *const *syms, const int64_t *fixed);
void hf_add_output(struct hf *h, int32_t t, int32_t cap);

/* ---- attention.c: the attention cores: eager, sdpa (and the forced backend), flash, grouped heads */

int32_t hf_flash_attention(struct hf *h, int32_t q, int32_t k, int32_t v, double scale,
                           bool causal);
int32_t hf_sdpa_attention(struct hf *h, const int32_t qkv[3], int32_t mask, bool causal,
                          int64_t H, int64_t KV, int64_t D, int64_t Dv, double scale,
                          double drop);
int32_t hf_sdpa_broadcast(struct hf *h, int32_t q, int32_t k, int32_t v, int32_t mask, int64_t H,
                          int64_t KV, int64_t D, double scale);
int32_t hf_gqa_attention(struct hf *h, int32_t q, int32_t k, int32_t v, int64_t H, int64_t KV,
                         int64_t D, double scale, double drop);
void hf_heads_copy(struct hf *h, const int32_t qkv[3], int64_t heads, int64_t d, int32_t out[3]);
int32_t hf_matmul_fold(struct hf *h, int32_t x, int64_t heads, int64_t d);
void hf_heads_fold(struct hf *h, const int32_t qkv[3], int64_t heads, int64_t d, int32_t out[3]);
int32_t hf_repeat_kv(struct hf *h, int32_t x, int64_t n_rep, int64_t heads, int64_t d);
int32_t hf_softmax_f32(struct hf *h, int32_t s, int32_t like);

/* ---- linear.c: nn.Linear and Conv1D with the LoRA and quantization wrappers */

void hf_keep32(struct hf *h, int32_t t);
void hf_unkeep32(struct hf *h, int32_t t);
int32_t hf_linear(struct hf *h, int32_t x, int64_t in, int64_t out, bool bias, int32_t tied,
                  const char *name);
int32_t hf_conv1d(struct hf *h, int32_t x, int64_t nx, int64_t nf);

/* ---- quant.c: quantized linear layers (gptq, awq, bitsandbytes, fp8) */

void hf_read_quant(struct hf *h, enum dnnmem_quant opt);
bool hf_quantized(struct hf *h, int32_t tied, const char *name, bool conv);
int32_t hf_qlinear(struct hf *h, int32_t x, int64_t in, int64_t out, bool bias, const char *name);
void hf_quant_finish(struct hf *h);

/* ---- kbit.c: PEFT's prepare_model_for_kbit_training */

bool hf_kbit_gc(const struct hf *h);
void hf_kbit_finish(struct hf *h);

/* ---- llama.c: Llama, Mistral, Qwen2, Qwen3 (and the MoE families' decoder) */

void hf_read_llama(struct hf *h, const char *type, struct llama *c);
enum dnnmem_status hf_llama_lm(struct hf *h, const char *type, const struct llama *c);

/* ---- moe.c: mixture of experts: Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek's config */

bool hf_moe_layer(const struct moe *m, int64_t i);
int32_t hf_swiglu(struct hf *h, int32_t x, int64_t hidden, int64_t inter,
                  const char *const names[3]);
int32_t hf_topk(struct hf *h, int32_t x, int64_t k, int32_t *values);
int32_t hf_sum_last(struct hf *h, int32_t x, bool keepdims);
int32_t hf_expert_loop(struct hf *h, const struct moe *m, int64_t hidden, int32_t x2, int32_t rw,
                       int32_t sel, int32_t final, int32_t locals[LOOP_LOCALS]);
int32_t hf_zeros_like(struct hf *h, int32_t x2, bool f32);
int32_t hf_grouped_experts(struct hf *h, const struct moe *m, int64_t hidden, int32_t x2,
                           int32_t rw, int32_t sel, bool w32);
int32_t hf_sparse_moe(struct hf *h, const struct llama *c, const struct moe *m, int32_t x,
                      int32_t *router);
int32_t hf_gptoss_gate(struct hf *h, int32_t gate_up, int64_t inter, int32_t locals[3]);

/* ---- deepseek.c: DeepSeek-V2/V3: the routed MoE block and multi-head latent attention */

int32_t hf_deepseek_moe(struct hf *h, const struct llama *c, const struct moe *m, int32_t x);
int32_t hf_mla_attention(struct hf *h, const struct llama *c, int layer, int32_t x, int32_t cos,
                         int32_t sin, int32_t mask, int32_t *attn_weights);

/* ---- gpt2.c: GPT-2 */

int32_t hf_gpt2_act(struct hf *h, const char *act, int32_t x);

/* ---- bert.c: BERT, RoBERTa, ALBERT, DistilBERT */

int32_t hf_first_token(struct hf *h, int32_t x);

/* ---- t5.c: T5 and mT5 */


/* ---- vit.c: ViT */


/* ---- decoder.c: the pieces the OPT, GPT-NeoX, Falcon, Phi and Gemma decoders share */

int32_t hf_dec_fill(struct hf *h, int32_t shape, enum dm_dtype dtype, double v);
void hf_dec_positions(struct hf *h, int32_t ids, int32_t *seq, int32_t *pos, int32_t *pos_ids);
int32_t hf_dec_causal_mask(struct hf *h, int32_t seq, const char *name);
int32_t hf_dec_causal_mask_batch(struct hf *h, int32_t ids, int32_t seq, const char *name);
void hf_dec_rotary(struct hf *h, const char *scope, int64_t rot, double theta, double factor,
                   int32_t pos_ids, int axis, const char *name, int32_t *cos, int32_t *sin);
int32_t hf_rope_cat(struct hf *h, int32_t x, int32_t cos, int32_t sin, int64_t rot, int64_t d,
                    const char *name);
int32_t hf_dec_core(struct hf *h, const struct dec *c, int32_t q, int32_t k, int32_t v,
                    int32_t mask, double scale, int32_t *pw);
void hf_hold_qkv(struct hf *h, int32_t q, int32_t k, int32_t v);
const char *hf_present_name(struct hf *h, const struct dec *c, int layer, const char *kv);
void hf_dec_cache_update(struct hf *h, const struct dec *c, int layer, int32_t *k, int32_t *v);
int32_t hf_lin(struct hf *h, const char *name, int32_t x, int64_t in, int64_t out, bool bias);
int32_t hf_ln(struct hf *h, const char *name, int32_t x, int64_t dim, double eps);
int32_t hf_dec_act(struct hf *h, const char *act, int32_t x);
int32_t hf_dec_head(struct hf *h, const struct dec *c, const char *name, int32_t x, int64_t in,
                    int32_t tied);
void hf_hold_all(struct hf *h, const int32_t *held, int n, int32_t until);
double hf_dec_rope_scaling(struct hf *h, bool linear_ok);
void hf_dec_heads(struct hf *h, struct dec *c, const char *hk, const char *kvk);
void hf_dec_check_act(struct hf *h, const char *key, const char *act, bool relu);
enum dnnmem_status hf_dec_lm(struct hf *h, const char *type, const struct dec *c,
                             int32_t (*build)(struct hf *h, const struct dec *c, int32_t ids));

/* ---- opt.c: OPT and BioGPT */


/* ---- neox.c: GPT-NeoX, Falcon, Phi, Phi-3 */


/* ---- gemma.c: Gemma, Gemma 2, Gemma 3 */


#endif
