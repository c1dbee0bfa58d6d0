/*
 * dnnmem.h: estimate the GPU memory a deep-learning job takes, before it runs.
 *
 * The whole public API of libdnnmem. The pipeline behind it:
 *
 *   load (ONNX) -> graph IR -> shapes (dims bound) -> schedule of allocations
 *   and frees in execution order -> allocator simulation -> report
 *
 * A minimal use:
 *
 *   struct dnnmem_error err;
 *   dnnmem_model *m;
 *   if (dnnmem_model_load("resnet50.onnx", &m, &err) != DNNMEM_OK) {
 *       fprintf(stderr, "%s\n", err.message);
 *       return 3;
 *   }
 *   struct dnnmem_config cfg;
 *   dnnmem_config_init(&cfg);
 *   cfg.batch_size = 32;
 *   struct dnnmem_result *r;
 *   if (dnnmem_estimate(m, &cfg, &r, &err) == DNNMEM_OK) {
 *       printf("peak %llu bytes\n", (unsigned long long)r->total_bytes);
 *       dnnmem_result_free(r);
 *   }
 *   dnnmem_model_free(m);
 *
 * Ownership, in one rule: a dnnmem_model owns everything loaded from its file
 * and is freed by dnnmem_model_free(); a dnnmem_result owns every string and
 * array reachable from it and is freed by dnnmem_result_free(), independently
 * of the model. Strings returned by dnnmem_model_* functions are borrowed until
 * the model is freed. Both free functions accept NULL. Input strings and arrays
 * passed in a dnnmem_config are only read during the call (a dnnmem_options
 * store owns those that dnnmem_config_set sets: "Options by name").
 *
 * Errors: every fallible function returns an enum dnnmem_status and, when the
 * caller passes a struct dnnmem_error, fills it with the status and a one-line
 * message naming the file, node, tensor or option at fault. The library never
 * prints, never exits, and has no global mutable state: distinct models and
 * results may be used from distinct threads freely.
 *
 * Threads and one model: a model is read-only to every function taking a
 * const dnnmem_model *, which may run concurrently on it from any number of
 * threads (dnnmem_estimate, dnnmem_advise, dnnmem_max_dim, the reports).
 * The one thing they add to it is the graphs of a HuggingFace config
 * (eager or sdpa attention, LoRA, quantization, a transformers release):
 * loading builds only an outline (counts and weights), and each graph is
 * built when an estimate first needs it and kept until dnnmem_model_free,
 * under a mutex of the model's own. dnnmem_model_free
 * must not race with any other call on the model.
 */
#ifndef DNNMEM_H
#define DNNMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DNNMEM_VERSION "0.1.0"
#define DNNMEM_MAX_DIMS 8 /* highest tensor rank the library handles */

/* Status codes, grouped by family. The CLI maps families to exit codes. */
enum dnnmem_status {
    DNNMEM_OK = 0,
    DNNMEM_E_USAGE = 10,       /* a bad argument or configuration value */
    DNNMEM_E_CONSTRAINT = 11,  /* dnnmem_plan: constraints no configuration can meet
                                  (a global batch no data-parallel size divides) */
    DNNMEM_E_IO = 20,          /* the model file cannot be opened or read */
    DNNMEM_E_PARSE = 30,       /* the file is not a well-formed model (corrupt, truncated) */
    DNNMEM_E_MODEL = 31,       /* well-formed, but invalid: dangling input, cycle, duplicate name */
    DNNMEM_E_SHAPE = 40,       /* inconsistent shapes, absurd dims, byte counts that overflow */
    DNNMEM_E_UNBOUND = 41,     /* a symbolic dim that no binding gives a value */
    DNNMEM_E_UNSUPPORTED = 50, /* an op, dtype or feature the library does not model */
    DNNMEM_E_NOMEM = 60,       /* the host ran out of memory */
    DNNMEM_E_DEVICE_OOM = 61,  /* the job does not fit the device capacity given */
    DNNMEM_E_LIMIT = 62,       /* the file is beyond a resource budget (dnnmem_load_options):
                                  the graph it implies, or its size */
    DNNMEM_E_INTERNAL = 70     /* a broken internal invariant (a bug) */
};

/* A short name of a status ("parse error", ...). Static storage. */
const char *dnnmem_status_name(enum dnnmem_status s);

struct dnnmem_error {
    enum dnnmem_status status;
    char message[512]; /* one line, no trailing newline */
};

/* ----------------------------------------------------------------------------
 * Models
 */
typedef struct dnnmem_model dnnmem_model;

/* Load a model file. The format is recognised from the contents: ONNX,
 * a step captured by dnnmem.torch (docs/capture-format.md: its storages and
 * events replayed as observed; options that would change the step are
 * refused), a HuggingFace config.json (or a model directory), an MXNet symbol JSON
 * (*-symbol.json: "nodes", "arg_nodes" and "heads"; its inputs declare no
 * shape, so estimates need dnnmem_config.input_shapes).
 * Weight bytes are never read: only dims and dtypes. External-data weight files
 * are never opened and need not exist. On success *out owns the model. */
enum dnnmem_status dnnmem_model_load(const char *path, dnnmem_model **out,
                                     struct dnnmem_error *err);

/* Same from memory; `name` is used in messages. The buffer is only read during
 * the call. */
enum dnnmem_status dnnmem_model_load_buffer(const void *data, size_t size, const char *name,
                                            dnnmem_model **out, struct dnnmem_error *err);

/* What a load may cost: a model file is untrusted input, so the graph it
 * implies is bounded before it is built (each variant an estimate builds
 * later too), and so are the bytes read. Beyond a budget a load fails with
 * DNNMEM_E_LIMIT, naming the fields and the budget. */
#define DNNMEM_DEFAULT_MAX_NODES 1000000 /* ~4.6x DeepSeek-V3's 218,550 nodes per graph */
struct dnnmem_load_options {
    int64_t max_nodes; /* nodes one graph of the model may have; 0: DNNMEM_DEFAULT_MAX_NODES */
};
void dnnmem_load_options_init(struct dnnmem_load_options *lo);

/* dnnmem_model_load / _load_buffer with a budget (`lo` NULL: the defaults). */
enum dnnmem_status dnnmem_model_load_opts(const char *path, const struct dnnmem_load_options *lo,
                                          dnnmem_model **out, struct dnnmem_error *err);
enum dnnmem_status dnnmem_model_load_buffer_opts(const void *data, size_t size, const char *name,
                                                 const struct dnnmem_load_options *lo,
                                                 dnnmem_model **out, struct dnnmem_error *err);

void dnnmem_model_free(dnnmem_model *m);

struct dnnmem_model_info {
    const char *path;         /* as given to load */
    const char *format;       /* "onnx", "huggingface", "mxnet", "dnnmem-capture" */
    const char *producer;     /* e.g. "pytorch 1.13.0", or "" */
    int64_t opset;            /* default-domain opset */
    size_t n_nodes;           /* operator nodes */
    size_t n_tensors;         /* all named values */
    size_t n_weights;         /* initializers and constant-derived weights */
    size_t n_inputs;          /* graph inputs that are not initializers */
    size_t n_symbols;         /* distinct symbolic dims in the inputs */
    /* A HuggingFace model directory's safetensors checkpoint, whose headers
     * (never the weights) were checked against the model built from
     * config.json: every tensor is one of its weights, with the same shape.
     * checkpoint is NULL when none was read. */
    const char *checkpoint;   /* "model.safetensors" or "model.safetensors.index.json" */
    size_t checkpoint_tensors;
    size_t checkpoint_shards_missing; /* shards the index names that are absent: their
                                         tensors are checked by name only */
    uint64_t checkpoint_bytes;        /* data bytes (the index's total_size if shards are missing) */
    const char *checkpoint_dtype;     /* the dtype of most bytes ("bfloat16"), or "" */
};
void dnnmem_model_get_info(const dnnmem_model *m, struct dnnmem_model_info *info);

/* The i-th symbolic dim name of the inputs (i < n_symbols), in first-seen order. */
const char *dnnmem_model_symbol(const dnnmem_model *m, size_t i);

/* ----------------------------------------------------------------------------
 * Configuration of one estimate
 */
enum dnnmem_mode {
    DNNMEM_MODE_INFER = 0, /* forward only, torch.no_grad(), model.eval() */
    DNNMEM_MODE_TRAIN,     /* zero_grad, forward, loss, backward, optimizer.step(), repeated */
    DNNMEM_MODE_GENERATE   /* HuggingFace causal LMs: model.generate() (greedy unless
                              num_beams or do_sample say otherwise) with a DynamicCache:
                              a prefill of seq_len prompt tokens, then new_tokens - 1
                              decode steps (the prefill makes the first token), each
                              growing every layer's cache */
};

/* Storage type of the KV cache during decoding (mode GENERATE). */
enum dnnmem_kv_dtype {
    DNNMEM_KV_AUTO = 0, /* the model's dtype (DynamicCache) */
    DNNMEM_KV_FP32,
    DNNMEM_KV_FP16,
    DNNMEM_KV_BF16,
    DNNMEM_KV_FP8       /* one byte per element (fp8 e4m3/e5m2 caches; per-tensor scales
                           not counted) */
};

enum dnnmem_device {
    DNNMEM_DEVICE_CUDA = 0, /* PyTorch eager on an NVIDIA GPU */
    DNNMEM_DEVICE_CPU       /* PyTorch's CPU kernels and host memory */
};

enum dnnmem_optimizer {
    DNNMEM_OPT_SGD_MOMENTUM = 0, /* torch.optim.SGD(momentum > 0) */
    DNNMEM_OPT_SGD,              /* momentum 0: no state */
    DNNMEM_OPT_ADAM,
    DNNMEM_OPT_ADAMW,
    DNNMEM_OPT_RMSPROP,
    DNNMEM_OPT_ADAGRAD,
    DNNMEM_OPT_NONE,             /* forward and backward only */
    DNNMEM_OPT_ADAMW_HF,         /* transformers.optimization.AdamW (Trainer's "adamw_hf") */
    DNNMEM_OPT_ADAFACTOR,        /* transformers.optimization.Adafactor, no first moment:
                                    factored second moments (a row and a column vector) for
                                    matrices, a full one for vectors */
    DNNMEM_OPT_ADAM8BIT,         /* bitsandbytes Adam8bit: blockwise 8-bit moments (2048 per
                                    block, an fp32 absmax each) for tensors of >= 4096
                                    elements, fp32 moments below */
    DNNMEM_OPT_ADAMW_FUSED       /* torch.optim.AdamW(fused=True) (Trainer's
                                    "adamw_torch_fused"): one kernel, no temporaries, `step`
                                    a 0-dim tensor on the device */
};

enum dnnmem_loss {
    DNNMEM_LOSS_CE = 0, /* cross-entropy of the first output's logits against class ids */
    DNNMEM_LOSS_MSE,    /* mean squared error against a target shaped like the output */
    DNNMEM_LOSS_SUM     /* the sum of every output's .sum(), as memory benchmarks use */
};

/* Numeric precision of the run. */
enum dnnmem_precision {
    DNNMEM_PRECISION_FP32 = 0, /* as the model's weights are (default) */
    DNNMEM_PRECISION_FP16,     /* model.half(): weights, activations, grads, state in fp16 */
    DNNMEM_PRECISION_BF16,     /* model.to(torch.bfloat16) */
    DNNMEM_PRECISION_AMP_FP16, /* torch.autocast(float16) with fp32 weights (CUDA) */
    DNNMEM_PRECISION_AMP_BF16  /* torch.autocast(bfloat16) with fp32 weights (CUDA) */
};

/* Whether activation functions ran in place, for those the model does not
 * say: a plain ONNX export cannot, one with torch.nn modules exported as
 * functions can (their calls' `inplace`), and that fact wins
 * (docs/inplace.md). With AUTO, dnnmem_estimate warns with the peak NONE
 * gives when it is higher. */
enum dnnmem_inplace {
    DNNMEM_INPLACE_AUTO = 0, /* ReLU in place wherever PyTorch allows it (torchvision's inplace=True) */
    DNNMEM_INPLACE_NONE      /* every op allocates its output */
};

/* The CPU's vector ISA, which sets the layouts oneDNN's x64 kernels pick
 * (--device cpu, PyTorch 2.x): channels blocked by 16 floats on AVX-512, by
 * 8 on AVX2. */
/* 512 KiB: the AMD EPYC's (Zen 2/3) per-core L2, the host the AVX2 rows were
 * measured on (lscpu: "L2 cache: 1 MiB (2 instances)"), and oneDNN's own
 * guess when CPUID gives none (src/cpu/platform.cpp, get_per_core_cache_size,
 * v3.12). */
#define DNNMEM_CPU_L2_DEFAULT (512 * 1024)

enum dnnmem_cpu_isa {
    DNNMEM_CPU_ISA_DEFAULT = 0, /* AVX-512, the zoo's machine */
    DNNMEM_CPU_ISA_AVX512,
    DNNMEM_CPU_ISA_AVX2
};

struct dnnmem_dim_binding {
    const char *name; /* a symbolic dim of the model's inputs */
    int64_t value;    /* >= 0 (an empty KV cache has past length 0) */
};

/* The shape of one named graph input (--input-shape NAME=D1,D2,...). */
struct dnnmem_input_shape {
    const char *name;    /* a graph input */
    size_t rank;         /* 1..DNNMEM_MAX_DIMS */
    const int64_t *dims; /* rank dims, each >= 1 */
};

/* Attention of a HuggingFace model (attn_implementation). */
enum dnnmem_attn {
    DNNMEM_ATTN_AUTO = 0, /* transformers' own choice: sdpa with PyTorch >= 2.1, else eager */
    DNNMEM_ATTN_EAGER,    /* eager_attention_forward: scores, softmax, dropout materialised */
    DNNMEM_ATTN_SDPA,     /* F.scaled_dot_product_attention: one fused kernel on CUDA */
    DNNMEM_ATTN_FLASH     /* attn_implementation="flash_attention_2": the flash-attn
                             package's kernel (fp16/bf16, CUDA sm80+), keys and values
                             not repeated for GQA */
};

/* F.scaled_dot_product_attention's kernel under --attn sdpa (HuggingFace
 * configs): PyTorch's own choice, or one forced for the whole step as
 * torch.nn.attention.sdpa_kernel(SDPBackend.X) does. A forced fused kernel
 * that PyTorch refuses for the configuration (sdp_utils.cpp) is an
 * DNNMEM_E_UNSUPPORTED error, as PyTorch's "No available kernel". */
enum dnnmem_sdpa_backend {
    DNNMEM_SDPA_AUTO = 0,   /* select_sdp_backend's priority order (the default) */
    DNNMEM_SDPA_FLASH,      /* FLASH_ATTENTION: fp16/bf16, sm80+, head dim <= 256, no mask */
    DNNMEM_SDPA_EFFICIENT,  /* EFFICIENT_ATTENTION: no grouped heads (enable_gqa) */
    DNNMEM_SDPA_CUDNN,      /* CUDNN_ATTENTION: fp16/bf16, sm80+, head dim <= 128 and a
                               multiple of 8 (buffers taken as flash's) */
    DNNMEM_SDPA_MATH        /* MATH: _scaled_dot_product_attention_math, scores and
                               softmax materialised in float32 */
};

/* LoRA fine-tuning of a HuggingFace config.json model, as PEFT's LoraConfig
 * and get_peft_model make it: every parameter of the model frozen, and each
 * targeted Linear (or GPT-2 Conv1D) y = base(x) gains
 * y + lora_B(lora_A(dropout(x))) * alpha / r, with lora_A [r, in] and
 * lora_B [out, r] trained. The adapters are float32 (PEFT >= 0.12
 * autocast_adapter_dtype): with a 16-bit base, x is cast up for them, the sum
 * is float32 and cast back. */
struct dnnmem_lora {
    int64_t r;                  /* rank; 0 = no LoRA */
    double alpha;               /* lora_alpha (scales, costs no memory); 0 = 8 */
    double dropout;             /* lora_dropout, in [0, 1) */
    /* module names as the last part of their path ("q_proj", "c_attn"), or
     * "all-linear" (every linear but the output layer); n_targets 0 = PEFT's
     * default for the architecture (q_proj and v_proj; c_attn; query and
     * value; q_lin and v_lin). Borrowed for the call. */
    const char *const *targets;
    size_t n_targets;
};

/* Weights of a HuggingFace model's linear layers quantized on load, as
 * transformers' BitsAndBytesConfig makes them for a config that holds none
 * (a config whose quantization_config names a method is built as that method
 * stores it; this option is then an error). The base's float parts (embeddings,
 * norms, lm_head) load in float16 (the quantizer's update_torch_dtype) unless
 * --precision says otherwise.
 * load_in_4bit (bitsandbytes Linear4bit; lm_head and embeddings stay
 * unquantized): the flattened weight as 4-bit codes, two per byte, an absmax
 * per block of 64 weights (double quantization: an 8-bit absmax, a float32
 * one per 256 blocks, an offset), and a transient dequantized copy of the
 * weight in the compute dtype around each matmul, forward and backward
 * (bitsandbytes' MatMul4Bit keeps no weight for backward).
 * load_in_8bit (Linear8bitLt, LLM.int8()): int8 weights [out, in] and a
 * float32 scale per row (SCB); each matmul quantizes its input to int8 with
 * per-row statistics, multiplies into int32 and dequantizes to float16. */
enum dnnmem_quant {
    DNNMEM_QUANT_NONE = 0,
    DNNMEM_QUANT_NF4,        /* bnb_4bit_quant_type="nf4", double quantization (QLoRA) */
    DNNMEM_QUANT_NF4_SINGLE, /* nf4 without double quantization: float32 absmax */
    DNNMEM_QUANT_FP4,        /* bnb_4bit_quant_type="fp4", no double quantization */
    DNNMEM_QUANT_INT8        /* load_in_8bit, llm_int8_threshold 6.0 */
};

/* PEFT's prepare_model_for_kbit_training(model), which QLoRA scripts call
 * before get_peft_model (huggingface/peft src/peft/utils/other.py,
 * v0.14-0.15), on a quantized HuggingFace model (--quant or a config's
 * quantization_config) with LoRA:
 *  - every float16/bfloat16 parameter that is not a Params4bit is cast to
 *    float32 (not for gptq): embeddings, norms, lm_head, biases; buffers
 *    keep their dtype. The activations made from them follow: the residual
 *    stream, attention and the logits are float32, and each bitsandbytes
 *    Linear4bit casts its input to its compute dtype and its output back;
 *  - with use_gradient_checkpointing (its default) and a bitsandbytes or
 *    gptq model (PEFT leaves awq out): gradient_checkpointing_enable(), so
 *    every layer of the model is checkpointed (reentrant, torch's default
 *    when use_reentrant is not passed), use_cache is off in training, and
 *    enable_input_require_grads() makes the input embeddings' output a leaf
 *    that requires grad: backward reaches it and accumulates its .grad. */
enum dnnmem_kbit_prep {
    DNNMEM_KBIT_PREP_NONE = 0,
    DNNMEM_KBIT_PREP,       /* use_gradient_checkpointing=True (the default) */
    DNNMEM_KBIT_PREP_NO_GC  /* use_gradient_checkpointing=False: the upcast only */
};

/* The framework whose runtime is simulated: its device allocator, memory
 * limit and fixed overheads. The schedule (which tensors exist, when they are
 * freed, what the backward pass keeps) is PyTorch eager's for every profile
 * except MXNet's planned executor (enum dnnmem_mxnet_executor), which
 * re-plans those lifetimes into nnvm's static storages, JAX's jitted
 * step (enum dnnmem_jax_execution), which compiles them as XLA does, and
 * TensorFlow's tf.function step (enum dnnmem_tf_execution), its dataflow
 * with buffer forwarding, gradient pruning and Grappler's layout;
 * the result says so in an assumption. None of the non-PyTorch profiles has
 * been validated against measurements yet. */
enum dnnmem_framework {
    DNNMEM_FW_PYTORCH = 0, /* PyTorch's CUDA caching allocator (default) */
    DNNMEM_FW_TENSORFLOW,  /* TensorFlow's BFC allocator (tensorflow/core/common_runtime/
                              bfc_allocator.cc; later xla/tsl/framework/bfc_allocator.cc) */
    DNNMEM_FW_MXNET,       /* MXNet's GPU pooled storage manager
                              (src/storage/pooled_storage_manager.h, 1.9.1 and 2.0) */
    DNNMEM_FW_JAX          /* JAX/XLA: the same BFC allocator, preallocated
                              (jax docs/gpu_memory_allocation.rst); the step
                              jitted by default (XLA's buffer assignment) */
};
const char *dnnmem_framework_name(enum dnnmem_framework f); /* "pytorch", "tensorflow", ... */

/* How MXNet runs the model: the symbolic executor (Module.bind/simple_bind,
 * default), whose memory nnvm's PlanMemory plans once for the whole forward
 * and backward graph; or naive: the eager schedule (PyTorch's) replayed
 * through MXNet's pool, a stand-in for imperative NDArray/autograd code. */
enum dnnmem_mxnet_executor {
    DNNMEM_MXNET_EXEC_PLANNED = 0,
    DNNMEM_MXNET_EXEC_NAIVE
};

/* How JAX runs the job: the whole step under jax.jit (default), compiled
 * by XLA, whose buffer assignment fuses, shares and packs the step's values
 * into one temp buffer at compile time (src/schedule/xla.c); or op by op,
 * PyTorch eager's schedule through XLA's allocator standing in. */
enum dnnmem_jax_execution {
    DNNMEM_JAX_JIT = 0,
    DNNMEM_JAX_EAGER
};

/* Data parallelism (struct dnnmem_parallel; docs/parallel.md). DeepSpeed's
 * offload_optimizer / offload_param: the fp32 master partition, the
 * optimizer state and the gradient partition to host memory (OPTIMIZER),
 * and with ZeRO-3 also the parameter partitions (PARAMS). */
enum dnnmem_offload {
    DNNMEM_OFFLOAD_NONE = 0,
    DNNMEM_OFFLOAD_OPTIMIZER,
    DNNMEM_OFFLOAD_PARAMS
};
/* FSDP2's fully_shard per wrapped unit: FULL (reshard_after_forward=True),
 * SHARD_GRAD_OP (reshard_after_forward=False), HYBRID (sharded within a
 * node, replicated across nodes: a 2-D mesh), NO_SHARD (replicated, grads
 * all-reduced: a mesh whose shard dim is 1). */
enum dnnmem_fsdp {
    DNNMEM_FSDP_NONE = 0,
    DNNMEM_FSDP_FULL,
    DNNMEM_FSDP_SHARD_GRAD_OP,
    DNNMEM_FSDP_HYBRID,
    DNNMEM_FSDP_NO_SHARD
};
/* Pipeline parallelism's schedule (--pp-schedule): torch.distributed.
 * pipelining's Schedule1F1B (Megatron's non-interleaved default) or
 * ScheduleGPipe; the interleaved one is refused (not modelled). */
enum dnnmem_pp_schedule {
    DNNMEM_PP_1F1B = 0,
    DNNMEM_PP_GPIPE,
    DNNMEM_PP_INTERLEAVED
};
/* The job over several processes, one GPU each (mode TRAIN). gpus is the
 * world size (0 or 1: one process); or nodes x gpus_per_node. With
 * gpus > 1 and neither zero nor fsdp, DistributedDataParallel. Every
 * "< 0" is the engine's documented default; world = DP x TP x PP; cp other
 * than 0 or 1 is refused (not modelled yet). batch_size stays the per-GPU
 * batch (under pp, split into micro_batches). */
struct dnnmem_parallel {
    int gpus, nodes, gpus_per_node;
    int zero;                    /* DeepSpeed ZeRO stage 0..3 */
    enum dnnmem_offload offload; /* with zero >= 1 */
    enum dnnmem_fsdp fsdp;
    const char *fsdp_wrap;       /* a --checkpoint-style prefix glob: each match one unit;
                                    NULL = the model's repeated block (src/report/blocks.c) */
    int tp, pp, cp;
    bool sp;                     /* tp > 1: sequence parallel (docs/parallel.md) */
    int micro_batches;           /* pp > 1: the micro-batches batch_size is split into;
                                    0 = pp */
    enum dnnmem_pp_schedule pp_schedule;
    const char *pp_split;        /* pp > 1: the blocks of each stage, "B0,B1,..." summing to
                                    the model's blocks; NULL = even (Megatron's) */
    int64_t ddp_bucket_bytes;    /* DDP bucket_cap_mb; < 0 = 25 MiB */
    bool ddp_bucket_view;        /* DDP gradient_as_bucket_view */
    int64_t zero_bucket_elems;   /* reduce_bucket_size; < 0 = 5e8 */
    int64_t zero_prefetch_elems; /* stage3_prefetch_bucket_size; < 0 = 5e7 */
    int64_t zero_persist_elems;  /* stage3_param_persistence_threshold; < 0 = 1e5 */
    int64_t nccl_bytes;          /* device memory per NCCL communicator (cuda); < 0 = default */
    int rank;                    /* the rank estimated; -1 = every distinct rank, the most
                                    loaded reported (dnnmem_config_init) */
};

/* How TensorFlow runs the job: graph (default), the step compiled by
 * tf.function as Keras' model.fit/predict do (run_eagerly=False): Grappler's
 * layout optimizer, the graph executor freeing each tensor after its last
 * consumer and forwarding a dying input's buffer to an elementwise op's
 * output, the gradient graph pruned to what the gradient functions read
 * (src/train/train.c); or eager: op by op under a GradientTape. */
enum dnnmem_tf_execution {
    DNNMEM_TF_GRAPH = 0,
    DNNMEM_TF_EAGER
};

/* MXNET_GPU_MEM_POOL_TYPE (storage.cc; env_var.md). */
enum dnnmem_mxnet_pool {
    DNNMEM_MXNET_POOL_NAIVE = 0, /* default: page multiples, exact-size reuse */
    DNNMEM_MXNET_POOL_ROUND      /* powers of two up to 2^cutoff, then multiples of it */
};

struct dnnmem_config {
    enum dnnmem_mode mode;
    enum dnnmem_device device;
    /* Symbolic dims. `batch_size` binds every dim whose name says batch
     * (batch, batch_size, N, B, ...), `seq_len` every dim whose name says
     * sequence (seq, seq_len, sequence, sequence_length, ...); `dims` binds any
     * dim by exact name and wins over both. 0 means "not given": batch then
     * defaults to 1 (reported as a default), an unbound seq dim is an error. */
    int64_t batch_size;
    int64_t seq_len;             /* in mode GENERATE: the prompt length */
    const struct dnnmem_dim_binding *dims;
    size_t n_dims;
    /* Generation (mode GENERATE): tokens generated after the prompt (> 0),
     * and the cache's storage type. */
    int64_t new_tokens;
    enum dnnmem_kv_dtype kv_dtype;
    /* How generate() picks tokens (transformers 4.51's GenerationMixin):
     * num_beams > 1 is beam search (_beam_search, do_sample false): every
     * prompt runs as num_beams rows (batch_size * num_beams), and the cache
     * is reordered after each step; 0 or 1 = one beam. do_sample samples
     * (_sample with the logits warpers, then softmax and multinomial):
     * top_k (0 = the GenerationConfig default 50, < 0 = none, as top_k=0),
     * top_p (0 = the default 1.0: none; else in (0, 1]), temperature (0 =
     * the default 1.0: none; else > 0). Beam sampling (both) is not
     * modelled. */
    int num_beams;
    bool do_sample;
    int64_t top_k;
    double top_p;
    double temperature;
    /* Shapes of named graph inputs. An input that declares no shape (every
     * MXNet symbol input) takes the one given; with batch_size set, its
     * first dim is replaced by batch_size (so --batch-size and max-batch
     * work on it). An input that declares a shape (ONNX) must have the rank
     * given: each symbolic dim is bound to the value given (as by `dims`,
     * which must agree), each fixed dim must equal it. An unknown name is an
     * error. Like every array here, only read during the call: the caller
     * owns the names and dims. */
    const struct dnnmem_input_shape *input_shapes;
    size_t n_input_shapes;
    /* Training (mode TRAIN). */
    /* default SGD with momentum; for HuggingFace configs the Trainer's AdamW
     * (adamw, or adamw-fused from PyTorch 2.8) unless optimizer_set */
    enum dnnmem_optimizer optimizer;
    enum dnnmem_loss loss;           /* default cross-entropy */
    bool loss_all_outputs;           /* the loss adds a term per output (ce, mse; sum always) */
    int iterations;                  /* training steps simulated; 0 = default 2 */
    int grad_accum;                  /* micro-batches per optimizer step; 0 = 1 */
    /* The loop keeps the previous step's model outputs (logits, and the
     * returned past_key_values with use_cache) until the next forward returns,
     * as `outputs = model(**inputs)` in a loop does (the name is rebound only
     * then). false (default): they are let go before the next forward, as the
     * HF Trainer's training_step (its outputs are locals of compute_loss) and
     * `del outputs` do. Modes TRAIN and INFER (PyTorch eager). */
    bool keep_outputs;
    enum dnnmem_inplace inplace;
    enum dnnmem_precision precision;
    /* HuggingFace config.json models: the attention implementation. An
     * ONNX graph's attention is whatever ops it holds (only AUTO is valid). */
    enum dnnmem_attn attn;
    /* HuggingFace configs under sdpa attention: the kernel forced for the
     * step (AUTO: PyTorch's choice; any other value needs sdpa attention). */
    enum dnnmem_sdpa_backend sdpa_backend;
    struct dnnmem_lora lora;    /* HuggingFace configs, mode TRAIN */
    enum dnnmem_quant quant;    /* HuggingFace configs: the base's linear weights */
    enum dnnmem_kbit_prep kbit_prep; /* quantized HuggingFace configs with LoRA */
    /* Frozen parameters: glob patterns (fnmatch) on initializer names; a
     * frozen parameter gets no gradient and no optimizer state. */
    const char *const *freeze;
    size_t n_freeze;
    /* Activation checkpointing (torch.utils.checkpoint), one spec per entry:
     * a glob on node-name prefixes, as deep as the pattern ("/layer*",
     * "/layers.*"): each run of consecutive nodes sharing a matching prefix is
     * one segment ("GLOB:K" groups K consecutive ones: every K blocks); or
     * "A..B": one segment from the first node whose name matches glob A to
     * the last whose name matches glob B. */
    const char *const *checkpoint;
    size_t n_checkpoint;
    /* Framework version, as major * 100 + minor (113 = 1.13, 200 = 2.0);
     * 0 = default (206: 2.6, current when transformers 4.51, whose models
     * are built, came out). Decides zero_grad(set_to_none) and optimizer
     * implementations (for-loop in 1.13, foreach on CUDA from 2.0), and
     * for HuggingFace configs the attention transformers picks (sdpa from
     * 2.1.1) and sdpa's flash head-size limit (256 from 2.2). */
    int torch_version;
    /* HuggingFace configs: the transformers release whose modelling code runs,
     * major * 100 + minor (451 = 4.51, 517 = 5.17); 0 = default 524. From
     * 4.54 (PR #39412, use_gqa_in_sdpa) sdpa gets grouped keys and values
     * with enable_gqa=True on PyTorch 2.5+ instead of repeat_kv copies. */
    int transformers_version;
    /* precision was stated (--precision): float32 then stays float32 where a
     * HuggingFace config's 16-bit torch_dtype is otherwise the default (what
     * torch_dtype="auto" and transformers 5 load, PR #34919) */
    bool precision_set;
    /* optimizer was stated (--optimizer): sgd-momentum then stays
     * sgd-momentum where a HuggingFace config's training defaults to AdamW */
    bool optimizer_set;
    /* Runtime constants; each "< 0" means "use the documented default". */
    int64_t cuda_context_bytes; /* see dnnmem_cuda_context_default() */
    int64_t alloc_round_bytes;  /* see DNNMEM_ALLOC_ROUND_DEFAULT */
    int64_t cublas_workspace_bytes; /* see dnnmem_cublas_workspace_default() */
    int64_t conv_workspace_bytes;   /* cuDNN workspace per convolution; default 0 */
    /* CPU threads PyTorch uses (torch.get_num_threads()); 0 = several (the
     * default). With one, small-batch 1x1 convolutions use THNN, not oneDNN. */
    int cpu_threads;
    /* The CPU's vector ISA for oneDNN's convolution buffers (PyTorch 2.x);
     * default AVX-512. */
    enum dnnmem_cpu_isa cpu_isa;
    /* The CPU's per-core L2 cache in bytes, which oneDNN's gemm convolution
     * tiles its im2col columns to (AVX2); < 0: DNNMEM_CPU_L2_DEFAULT. */
    int64_t cpu_l2_bytes;
    /* The CUDA toolkit the framework was built with, major * 10 + minor
     * (117 = 11.7); 0 = the default: 124 (12.4) for PyTorch, 122 for
     * TensorFlow and JAX, 112 for MXNet. Before 11.7 modules load eagerly. */
    int cuda_version;
    /* The GPU's compute capability, major * 10 + minor (80 = A100, 90 =
     * H100); 0 = default 80. Hopper and later get larger cuBLAS workspaces. */
    int compute_capability;
    size_t n_top_tensors;       /* live tensors listed at the peak, per kind (default 3) */
    /* The bytes live at the peak by module scope (dnnmem_result.modules),
     * at this depth of the node names' scopes; 0 = none (the default). */
    int module_depth;
    /* The device: bytes available to the process (a GPU's total as CUDA
     * reports it, less what the driver keeps; see dnnmem_gpu_find), 0 = no
     * verdict. A job fits when the process total stays within it; "tight"
     * when less than `headroom` (a fraction, default 0.05) of it is left. */
    int64_t capacity_bytes;
    double headroom;            /* 0 = DNNMEM_HEADROOM_DEFAULT */
    const char *device_label;   /* how the user named the device ("--gpu A100-40GB"), echoed */
    bool timeline;              /* record dnnmem_result.timeline */
    bool events;                /* record dnnmem_result.events (and the timeline) */
    /* The framework runtime (default PyTorch) and its version as the user
     * wrote it ("2.15", "0.4.13"; NULL = unstated), echoed with the result.
     * The version decides: TensorFlow 1.x's older MinSystemMemory rule, and
     * JAX's memory fraction before jaxlib 0.4.14. PyTorch's version is
     * torch_version. */
    enum dnnmem_framework framework;
    const char *framework_version;
    /* TensorFlow (runtime-facts section 2; bfc_allocator.cc, gpu_device.cc):
     * allow_growth (tf.config.experimental.set_memory_growth,
     * TF_FORCE_GPU_ALLOW_GROWTH): regions grow from 2 MiB by doubling;
     * default false: one region of the whole memory limit at start. The
     * limit: < 0 = TF's default, the free memory at device creation
     * (capacity_bytes - the CUDA context) minus MinSystemMemory; the latter
     * < 0 = TF's default by compute capability: 225 MiB when less than 2 GiB
     * is free, else 500 MiB (cc <= 6.x), 1050 MiB (7.x), 1536 MiB (8.x),
     * 1800 MiB (9.x and later, newest TF); TF 1.x: max(300 MiB, 5% of free)
     * (TF_DEVICE_MIN_SYS_MEMORY_IN_MB overrides it in TF). */
    bool tf_allow_growth;
    int64_t tf_memory_limit_bytes;
    int64_t tf_min_system_memory_bytes;
    enum dnnmem_tf_execution tf_execution; /* default graph (tf.function) */
    /* MXNet (runtime-facts section 3; pooled_storage_manager.h): the pool
     * type (default Naive); page size (< 0 = 4096 B,
     * MXNET_GPU_MEM_POOL_PAGE_SIZE, at least 32); Round's linear cutoff
     * (0 = 24, MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF, 20..34); the reserve
     * (< 0 = 5 % of total memory, MXNET_GPU_MEM_POOL_RESERVE): below it the
     * pool frees its cached buffers before a new cudaMalloc. */
    enum dnnmem_mxnet_pool mxnet_pool;
    /* the executor (default planned; NNVM_EXEC_MATCH_RANGE at its default 16) */
    enum dnnmem_mxnet_executor mxnet_executor;
    int64_t mxnet_page_size;
    int mxnet_round_cutoff;
    int mxnet_reserve_percent;
    /* MXNET_EXEC_INPLACE_GRAD_SUM_CAP (0 = 8): a tensor read by fewer ops
     * than this has its gradients summed by one ElementWiseSum of them all;
     * from this many, by a chain of _grad_add that DetectInplaceAddTo turns
     * into kAddTo writes (src/train/train.c, "MXNet") */
    int mxnet_grad_sum_cap;
    /* MXNET_BACKWARD_DO_MIRROR=1 (default false, as MXNet): backward
     * mirroring. Every op but Convolution, FullyConnected, Concat,
     * SoftmaxOutput and Dropout (and BatchNorm before MXNet 1.6) is copied
     * into the backward graph and recomputed there from its inputs; its
     * gradient reads the copy's entries, so its own forward outputs are no
     * longer kept for it. The ops never mirrored still read the forward's
     * entries. An op carrying __force_mirroring__ is mirrored even without
     * this (src/train/train.c, "MXNet": mirroring). Training only. */
    bool mxnet_mirror;
    /* JAX (runtime-facts section 4): XLA_PYTHON_CLIENT_PREALLOCATE (default
     * true: the BFC pool takes the whole limit at the first op; false: it
     * grows from 2 MiB) and XLA_PYTHON_CLIENT_MEM_FRACTION of total memory
     * (0 = default 0.75; 0.9 before jaxlib 0.4.14, jax commit 2432aa97). */
    bool jax_preallocate;
    double jax_mem_fraction;
    /* JAX: jit (default) or eager, and whether the jitted train step donates
     * its parameters and optimizer state (jax.jit donate_argnums, default
     * true: the updated ones reuse their buffers; false: new buffers each
     * call, the old freed after it). */
    enum dnnmem_jax_execution jax_execution;
    bool jax_donate;    /* Data parallelism (docs/parallel.md): one process per GPU, each rank's
     * own step replayed. */
    struct dnnmem_parallel par;
    /* Gradient accumulation (default false): replay the micro-steps between
     * the first and the last only until one repeats the one before it (the
     * same events, and the allocator's segments and blocks the same after
     * it), then the last; the ones left out would repeat it exactly, so the
     * peak, the breakdown at it and the verdict are those of the full
     * replay. Without effect with a timeline or events (they would lack the
     * steps left out), under --pp, and outside PyTorch. dnnmem_plan sets it
     * (docs/speed.md "plan"). */
    bool accum_fixed_point;
};

/* The CUDA context: not counted by torch.cuda.max_memory_allocated, but in
 * what nvidia-smi shows. Defaults, by what loads the kernels:
 *  - CUDA < 11.7 loads every module eagerly: 1343 MiB measured on a V100 with
 *    CUDA 11.2 (HuggingFace docs, "Efficient Training on a Single GPU");
 *  - PyTorch 1.13 with lazy loading (it sets CUDA_MODULE_LOADING=LAZY):
 *    287,047,680 B, context plus one small tensor by cudaMemGetInfo
 *    (PyTorch PR #86509);
 *  - PyTorch 2.x with lazy loading: the context at start plus the kernels and
 *    library handles a job loads as it first runs them. At start: 648,871,936
 *    B on compute capability 9.0 (measured: H200, PyTorch 2.11 + CUDA 13.0,
 *    driver 580, tools/gpu/results), else 426 MiB (RTX 6000 Ada, PyTorch 2.10
 *    + CUDA 13.0, unslothai/unsloth-zoo PR #1053). Loaded later: 132 MiB
 *    (DNNMEM_LAZY_KERNELS_DEFAULT: device use after a first training step
 *    less the context at start and the allocator's reserved memory, measured
 *    there on ALBERT and on Llama-3.2-1B, each the first job of its
 *    process; a job with sdpa loads ~16 MiB more).
 * Contexts vary with driver and GPU by tens of MiB: measure yours once (after
 * a step) and pass --cuda-context. */
#define DNNMEM_CUDA_CONTEXT_DEFAULT INT64_C(287047680)
#define DNNMEM_LAZY_KERNELS_DEFAULT (INT64_C(132) << 20)
int64_t dnnmem_cuda_context_default(int torch_version, int cuda_version, int compute_capability);
/* cuBLAS workspace per (handle, stream), allocated through the caching
 * allocator at the first matmul and kept (aten/src/ATen/cuda/
 * CublasHandlePool.cpp): 4 MiB in 1.13 (PR #74159); from 2.0
 * 2 x 4 MiB + 8 x 16 KiB = 8,519,680 B, and 32 MiB on compute capability 9.x
 * (PR #91564) and 10.x-12.x (PR #175344). */
int64_t dnnmem_cublas_workspace_default(int torch_version, int compute_capability);
/* --by-module's depth when none is given: two levels of the node names'
 * scopes, a block of a model (/model/layers.3 in a HuggingFace decoder,
 * /layer1/layer1.0 in a torchvision ResNet, /encoder/layer.5 in BERT): a
 * choice of dnnmem's, not a fact; --by-module-depth N overrides it. */
#define DNNMEM_MODULE_DEPTH_DEFAULT 2
/* The verdict's default headroom: with less than 5% of the capacity left a
 * job is "tight" (dnnmem's own margin against what no estimate sees:
 * other processes, the driver's growth, fragmentation; --headroom). */
#define DNNMEM_HEADROOM_DEFAULT 0.05
/* PyTorch's CUDA caching allocator rounds every request up to a multiple of
 * kMinBlockSize = 512 B (c10/cuda/CUDACachingAllocator.cpp, all versions). */
#define DNNMEM_ALLOC_ROUND_DEFAULT INT64_C(512)

/* Fill `cfg` with defaults. */
void dnnmem_config_init(struct dnnmem_config *cfg);
/* For bindings that do not compile against this header (Python's ctypes,
 * python/dnnmem): a config on the heap, dnnmem_config_init'ed (NULL when out
 * of memory), freed with dnnmem_config_free (accepts NULL); and the one field
 * no option sets, whether the result records a timeline (cfg->timeline). */
struct dnnmem_config *dnnmem_config_new(void);
void dnnmem_config_free(struct dnnmem_config *cfg);
void dnnmem_config_set_timeline(struct dnnmem_config *cfg, bool on);

/* ----------------------------------------------------------------------------
 * Options by name: the command line's flags onto a dnnmem_config
 *
 * Every option of the CLI that configures an estimate is a row of one table
 * (src/options.def): its name, value, help, and how the value is parsed.
 * dnnmem_config_set applies one of them to a config with exactly the CLI's
 * parsing and messages, so a binding and the CLI cannot disagree:
 *
 *   struct dnnmem_config cfg;
 *   dnnmem_config_init(&cfg);
 *   dnnmem_options *o = dnnmem_options_new();
 *   if (!o || dnnmem_config_set(&cfg, o, "batch-size", "32", &err) != DNNMEM_OK ||
 *       dnnmem_config_set(&cfg, o, "mode", "train", &err) != DNNMEM_OK ||
 *       dnnmem_config_check(&cfg, o, &err) != DNNMEM_OK) ...
 *   ... dnnmem_estimate(m, &cfg, &r, &err) ...
 *   dnnmem_options_free(o);   (after the last use of cfg)
 *
 * Ownership: a dnnmem_options owns a copy of every value given to it and
 * every string and array the config points to after dnnmem_config_set
 * (dims, input_shapes, freeze, checkpoint, lora.targets, device_label,
 * framework_version), so the caller's strings need not outlive the call, and
 * the config (or copies of it) is valid until dnnmem_options_free. Repeatable
 * options (dim, input-shape, freeze, checkpoint) add to the store's arrays,
 * which then replace what the config pointed to. One store serves one
 * config; neither is shared between threads.
 */

/* The help sections, in print order. */
enum dnnmem_option_group {
    DNNMEM_GROUP_DEVICE = 0, /* "Device and decision:" */
    DNNMEM_GROUP_RUN,
    DNNMEM_GROUP_LORA,
    DNNMEM_GROUP_QUANT,
    DNNMEM_GROUP_GENERATE,
    DNNMEM_GROUP_TRAIN,
    DNNMEM_GROUP_DIMS,
    DNNMEM_GROUP_RUNTIME,
    DNNMEM_GROUP_FRAMEWORK,
    DNNMEM_GROUP_OUTPUT,
    DNNMEM_GROUP_COUNT
};
/* A section's heading (one or more lines, each ending in '\n') and the note
 * printed after its options ("" when none). Static storage. */
const char *dnnmem_option_group_heading(enum dnnmem_option_group g);
const char *dnnmem_option_group_note(enum dnnmem_option_group g);

/* The commands an option has an effect in (the CLI's parser accepts every
 * option for every command). */
enum {
    DNNMEM_CMD_ESTIMATE = 1,
    DNNMEM_CMD_MAX_BATCH = 2,
    DNNMEM_CMD_MAX_SEQ_LEN = 4,
    DNNMEM_CMD_COMPARE = 8,
    DNNMEM_CMD_PLAN = 16,
    DNNMEM_CMD_ALL = 31
};

/* One option (static storage). */
struct dnnmem_option {
    const char *name;   /* the long name, without "--": "batch-size" */
    char short_name;    /* 'b' for -b, or 0 */
    const char *alias;  /* another name it answers to ("batch_size"), or NULL */
    const char *arg;    /* the value's placeholder in help ("N", "SIZE", "cuda|cpu");
                           NULL: a flag, which takes no value */
    enum dnnmem_option_group group;
    unsigned commands;  /* DNNMEM_CMD_* bits */
    const char *help;   /* lines separated by '\n', no trailing newline */
};
/* The options dnnmem_config_set knows, in help order. */
size_t dnnmem_option_count(void);
const struct dnnmem_option *dnnmem_option_at(size_t i);
/* By name or alias (without "--"); NULL when unknown. */
const struct dnnmem_option *dnnmem_option_find(const char *name);

typedef struct dnnmem_options dnnmem_options;
/* A new, empty store; NULL when out of memory. */
dnnmem_options *dnnmem_options_new(void);
void dnnmem_options_free(dnnmem_options *o); /* accepts NULL */

/* Apply option `name` (long name or alias, without "--") with `value` (NULL
 * for a flag) to `cfg`, as the CLI's --name value does. A bad name or value
 * is DNNMEM_E_USAGE with a one-line message naming the flag, as the CLI
 * prints it ("--mode fly: expected infer, train or generate"); host memory
 * DNNMEM_E_NOMEM. On an error `cfg` may be partly changed. */
enum dnnmem_status dnnmem_config_set(struct dnnmem_config *cfg, dnnmem_options *o, const char *name,
                                     const char *value, struct dnnmem_error *err);
/* The checks across options, once all are set: an option of one framework's
 * runtime (--tf-*, --mxnet-*, --jax-*) needs that --framework. */
enum dnnmem_status dnnmem_config_check(const struct dnnmem_config *cfg, const dnnmem_options *o,
                                       struct dnnmem_error *err);
/* The value last given for option `name` ("" for a flag), or NULL when it
 * was not given. Owned by the store. */
const char *dnnmem_options_value(const dnnmem_options *o, const char *name);
/* batch-size and seq-len take a list (8,16,32): the config gets the first
 * value; this gives them all (*n of them; *n 0 and NULL when not given). */
const int64_t *dnnmem_options_list(const dnnmem_options *o, const char *name, size_t *n);

/* ----------------------------------------------------------------------------
 * Results
 */
enum dnnmem_category {
    DNNMEM_CAT_WEIGHT = 0,  /* parameters, buffers, constant tensors */
    DNNMEM_CAT_WORKSPACE,   /* cuBLAS and cuDNN workspaces */
    DNNMEM_CAT_INPUT,       /* the graph's inputs, loss targets */
    DNNMEM_CAT_ACTIVATION,  /* forward tensors not (or no longer) needed by backward */
    DNNMEM_CAT_SAVED,       /* forward tensors and extras kept for backward */
    DNNMEM_CAT_GRADIENT,    /* parameters' .grad */
    DNNMEM_CAT_OPTIMIZER,   /* optimizer state (momentum, Adam moments) */
    DNNMEM_CAT_TEMPORARY,   /* gradients of activations, loss and optimizer temporaries */
    DNNMEM_CAT_KV_CACHE,    /* generation: the keys and values of every layer (DynamicCache) */
    DNNMEM_CAT_COUNT
};
const char *dnnmem_category_name(enum dnnmem_category c);

enum dnnmem_verdict {
    DNNMEM_VERDICT_NONE = 0, /* no capacity given */
    DNNMEM_VERDICT_FITS,
    DNNMEM_VERDICT_TIGHT,    /* fits, with less than the headroom left */
    DNNMEM_VERDICT_DOES_NOT_FIT
};
const char *dnnmem_verdict_name(enum dnnmem_verdict v); /* "fits", "tight", "does not fit" */

struct dnnmem_tensor_info {
    const char *name;
    const char *dtype;        /* "float32", "float16", "int64", ... */
    enum dnnmem_category category;
    int rank;
    int64_t dims[DNNMEM_MAX_DIMS];
    uint64_t bytes;           /* requested bytes (numel x element size) */
    uint64_t allocated;       /* bytes as the allocator hands them out (rounded) */
    const char *producer_node; /* "" for weights and inputs */
    const char *producer_op;
};

/* One assumption that shaped the number, as printed with the result. */
struct dnnmem_assumption {
    const char *key;    /* "framework", "dims.batch", ... */
    const char *value;  /* "pytorch (eager)", "32", ... */
    const char *source; /* "default", "option", "model" */
};

/* The memory at one step of the run (one op forward or backward, the loss,
 * the optimizer), taken where the step's allocated bytes were highest. */
struct dnnmem_timeline_point {
    const char *phase;        /* as peak_phase */
    int iteration;
    const char *node;         /* "" outside ops */
    const char *op;
    uint64_t category_bytes[DNNMEM_CAT_COUNT];
    uint64_t allocated;       /* including rounding */
    uint64_t reserved;
};

/* One call into the simulated allocator, in execution order: at the
 * timeline's step `step` (its phase, iteration, node and op), `bytes`
 * requested (alloc) or given back (free) for the buffer `buffer`
 * ("conv1.weight.grad", "/layer1/Relu_output_0", "bn1.save_mean", ...). */
struct dnnmem_event {
    bool alloc;
    uint64_t bytes;
    size_t step;
    const char *buffer;
    enum dnnmem_category category;
};

/* What one module scope holds at the allocated peak (dnnmem_config.
 * module_depth > 0). A buffer belongs to the scope of its node's name at
 * that depth: its '/'-separated components but the last (the op), at most
 * module_depth of them ("/model/layers.3/self_attn/q_proj/MatMul" at depth 2:
 * "/model/layers.3"; a name without '/', as MXNet's, is its own scope). A
 * weight, its gradient and optimizer state belong to the scope of the first
 * node that reads the weight (one that no node reads, as a captured step's
 * parameters or GPT-2's attn.bias, to the scope its dotted name names when a
 * node has it: "fc.weight" in "fc", "transformer.h.0.attn.bias" in
 * "/transformer/h.0" at depth 2); an activation to its producer's; a buffer made
 * by a node (a backward temporary, a saved extra) to that node's. Buffers of
 * no node (the graph's inputs, the loss, workspaces) are "(no module)"; ops
 * outside every scope "(top level)". Summed over the modules, each category
 * is the result's category_bytes. */
struct dnnmem_module_info {
    const char *name;      /* "/model/layers.3", "(top level)", "(no module)" */
    uint64_t category_bytes[DNNMEM_CAT_COUNT]; /* requested bytes live at the peak */
    uint64_t live_bytes;   /* their sum */
    size_t n_live;         /* buffers live at the peak */
};

struct dnnmem_advice;

/* One row per group of data-parallel ranks whose estimates are the same
 * (ranks first..last): sharding by torch.chunk leaves the last ranks'
 * shards smaller when a dim does not divide. */
struct dnnmem_rank_info {
    int first, last;
    uint64_t total_bytes, peak_allocated, peak_reserved;
    uint64_t category_bytes[DNNMEM_CAT_COUNT];
    enum dnnmem_verdict verdict;
    int64_t margin_bytes;
};

struct dnnmem_result {
    /* Totals. total_bytes = peak_reserved + context_bytes: what the process
     * takes on the device, as nvidia-smi shows it. */
    uint64_t total_bytes;
    uint64_t peak_allocated;  /* max of bytes handed out (torch.cuda.max_memory_allocated) */
    uint64_t peak_reserved;   /* max of bytes held from the device (max_memory_reserved) */
    uint64_t peak_requested;  /* max of bytes asked for, before any rounding: a lower bound
                                 of the others that grows with every dim */
    uint64_t context_bytes;   /* CUDA context, outside the allocator */

    /* Breakdown at the allocated peak: requested bytes per category, plus the
     * rounding the allocator added; their sum is peak_allocated. slack_bytes
     * = peak_reserved - peak_allocated: memory the caching allocator holds
     * but no tensor uses. */
    uint64_t category_bytes[DNNMEM_CAT_COUNT];
    uint64_t rounding_bytes;
    uint64_t slack_bytes;
    uint64_t fragmentation_bytes; /* free pieces of split segments at the allocated peak
                                     (torch inactive_split_bytes) */
    uint64_t segments;        /* device segments at the end (torch segment count) */

    /* The verdict, when a capacity was given. Under memory pressure the
     * caching allocator frees cached segments and retries (torch's OOM
     * path) before it gives up, so a job whose unconstrained reserve exceeds
     * the capacity can still fit: the simulation is rerun at the capacity. */
    enum dnnmem_verdict verdict;
    uint64_t capacity_bytes;
    int64_t margin_bytes;     /* capacity - total_bytes (negative: short by that much) */
    uint64_t alloc_retries;   /* times the allocator freed its cache to stay within the
                                 capacity (torch num_alloc_retries); when > 0, the peaks
                                 above are those of the capped run */
    enum dnnmem_category largest_category; /* the biggest part of the peak */
    size_t micro_steps_left_out; /* cfg->accum_fixed_point: the accumulation micro-steps not
                                    replayed, each a repeat of the one before (0 otherwise) */

    /* Where the peak happens. */
    const char *peak_phase;   /* "setup", "forward", "loss", "backward", "optimizer", "zero_grad" */
    int peak_iteration;       /* 1-based training step (1 in inference) */
    size_t peak_step;         /* 1-based index of the node in execution order; 0 = not at a node */
    size_t n_steps;           /* nodes in the graph */
    const char *peak_node;    /* "" when the peak is not at a node */
    const char *peak_op;      /* the node's op; at a peak in the loss, outside the nodes,
                                 the loss ("cross_entropy backward (NllLossBackward0, ...)") */

    /* Tensors live at the peak, grouped by kind (category order), largest
     * first within a kind, at most n_top_tensors of each; how many of each
     * kind were live, and in all. */
    struct dnnmem_tensor_info *live;
    size_t n_live;
    size_t category_count[DNNMEM_CAT_COUNT];
    size_t n_live_total;

    /* Memory over the run, one point per step (when cfg->timeline). */
    struct dnnmem_timeline_point *timeline;
    size_t n_timeline;
    /* Every allocation and free, in order (when cfg->events). */
    struct dnnmem_event *events;
    size_t n_events;

    /* Assumptions, in print order. */
    struct dnnmem_assumption *assumptions;
    size_t n_assumptions;
    /* Warnings: one-line texts about the input that make the number less
     * trustworthy than it looks (e.g. a training estimate of an ONNX file
     * exported in eval mode), each saying what to do; owned by the result. */
    const char **warnings;
    size_t n_warnings;

    /* The framework runtime simulated, and its version as given ("" when
     * unstated). needed_bytes = peak_allocated + context_bytes: the memory
     * the job needs (TF's and JAX's peak_bytes_in_use, PyTorch's
     * max_memory_allocated, plus the context). total_bytes is what the
     * process takes and what nvidia-smi shows. With reserved_is_limit the
     * allocator reserves its whole memory limit up front (TensorFlow without
     * allow_growth, JAX with preallocation), so total_bytes is that limit plus
     * the context, whatever the job needs; when no capacity was given that
     * limit is unknown (limit_unknown): total_bytes is then needed_bytes and
     * the text says the process takes the whole limit. limit_bytes is the
     * allocator's limit when one applied (TF memory_limit, JAX bytes_limit,
     * MXNet's device memory), else 0. */
    enum dnnmem_framework framework;
    const char *framework_version;
    uint64_t needed_bytes;
    bool reserved_is_limit;
    bool limit_unknown;
    uint64_t limit_bytes;
    /* JAX's jitted step (--framework jax, --jax-execution jit), per call as
     * XLA's compiled.memory_analysis() names them: the temp buffer the heap
     * simulator packs the intermediates into (temp_size_in_bytes), the
     * live-out buffers each call allocates (output_size_in_bytes, less what
     * donation aliases), and the entry parameters made before the first call
     * (argument_size_in_bytes: weights, batch, optimizer state); 0 otherwise. */
    uint64_t xla_temp_bytes, xla_output_bytes, xla_argument_bytes;
    /* The bytes at the peak by module scope (struct dnnmem_module_info), in
     * the order the graph first runs them, "(no module)" last; none (NULL,
     * 0) unless cfg->module_depth > 0, which module_depth echoes. */
    struct dnnmem_module_info *modules;
    size_t n_modules;
    int module_depth;
    /* Advice (dnnmem_result_advise): changes that would make the job fit,
     * ranked; NULL and 0 until asked for, and when the job fits. */
    const struct dnnmem_advice *advice;
    size_t n_advice;    /* Data parallelism: the world size (1: one process), the global batch
     * (batch x data-parallel ranks x grad_accum; 0 outside training), the
     * rank this result is (the most loaded), and one row per distinct group
     * of ranks (NULL, 0 with one process), owned by the result. */
    int world_size;
    int64_t global_batch;
    int rank;
    const struct dnnmem_rank_info *ranks;
    size_t n_ranks;
    /* The tensor-parallel group's size (1: none) and whether it runs
     * sequence parallel (--tp, --sp; docs/parallel.md). */
    int tensor_parallel;
    bool sequence_parallel;
};

/* Estimate peak memory of `m` under `cfg`. On success *out is owned by the
 * caller (dnnmem_result_free). The model is not modified but for the graph
 * variant `cfg` needs, built once and kept (thread-safe; see the top). */
enum dnnmem_status dnnmem_estimate(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                   struct dnnmem_result **out, struct dnnmem_error *err);

void dnnmem_result_free(struct dnnmem_result *r);

/* ----------------------------------------------------------------------------
 * GPUs and decisions
 */

/* A GPU of the built-in catalogue (static storage; src/report/gpus.def lists
 * each figure's source). */
struct dnnmem_gpu {
    const char *name;          /* what users type: "A100-80GB", "A100-80GB:3g.40gb" */
    const char *device_name;   /* as torch.cuda.get_device_name() prints it */
    int64_t total_bytes;       /* total memory as CUDA reports it */
    int compute_capability;    /* major * 10 + minor; 0 for non-NVIDIA */
    int64_t reserved_bytes;    /* kept back beyond what CUDA reports, when known */
    const char *source;
};
size_t dnnmem_gpu_count(void);
const struct dnnmem_gpu *dnnmem_gpu_at(size_t i);
/* By name, case-insensitively; NULL when unknown. */
const struct dnnmem_gpu *dnnmem_gpu_find(const char *name);
/* The job on this GPU, as --gpu sets it: cfg's capacity (its total less
 * what the driver keeps), its compute capability unless cfg has one (it
 * decides kernels, workspaces, the CUDA context and whether bf16 runs) and
 * the device label (its name). */
void dnnmem_config_use_gpu(struct dnnmem_config *cfg, const struct dnnmem_gpu *gpu);

/* One change that would make a job fit, with its estimate. */
struct dnnmem_advice {
    const char *change;        /* the options to add, as the CLI takes them:
                                  "--checkpoint '/model/layers.*'", "--batch-size 3" */
    uint64_t total_bytes;
    enum dnnmem_verdict verdict;
    int64_t margin_bytes;      /* capacity - total_bytes */
    int cost_rank;             /* what it costs the user: 1 (numerics only) .. 10 (a
                                  shorter context); a combination, its costliest part's
                                  (docs/advice.md) */
    const char *cost;          /* that cost in words: "speed: the 32 blocks' forwards
                                  run again in the backward" */
};

/* Changes that would make a job that does not fit under `cfg` (capacity
 * set) fit, each estimated in full, ranked: those that fit first, then by
 * cost_rank, fewer changes, lower total (docs/advice.md). The candidates:
 * the AMP dtype the GPU runs (bf16 from compute capability 8.0, else fp16;
 * 16-bit weights without training), the largest smaller batch that fits,
 * activation checkpointing of the model's repeated blocks (found from its
 * module scopes; every top-level module when none repeat), 8-bit Adam,
 * Adafactor, SGD, and for HuggingFace causal LMs LoRA and a quantized base
 * (int8, nf4 with LoRA when training), an 8-bit KV cache when generating,
 * the largest shorter sequence; when
 * no single one fits, combinations, cheapest first. A change that does not
 * lower the estimate is left out. *out is an array of *n entries owned by
 * the caller (free with dnnmem_advice_free). */
enum dnnmem_status dnnmem_advise(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                 struct dnnmem_advice **out, size_t *n, struct dnnmem_error *err);
/* The same advice stored in the result `r` of dnnmem_estimate(m, cfg)
 * (r->advice, owned by r), which the text, JSON and HTML reports then
 * print; none when r fits. */
enum dnnmem_status dnnmem_result_advise(struct dnnmem_result *r, const dnnmem_model *m,
                                        const struct dnnmem_config *cfg, struct dnnmem_error *err);
void dnnmem_advice_free(struct dnnmem_advice *a, size_t n);

/* The largest value of a dim (the batch, or a named symbolic dim) for which
 * the job fits cfg->capacity_bytes leaving the headroom free (the verdict
 * "fits", not "tight": cfg->headroom, default 5%), searched with the full simulation: 0 when
 * even 1 does not fit. Exact, though the caching allocator makes the peak
 * non-monotone near its pool and segment thresholds (a larger batch can fit
 * where a smaller one did not): bisection on peak_requested, which only grows
 * with the dim, bounds the answer from above, and the values below that bound
 * are then tried from the top down. `dim` NULL means the batch (cfg->batch_size); the
 * search stops at `limit`. *at holds the estimate at the value found (NULL
 * when 0), *next at value + 1 (NULL at the limit); both owned by the caller. */
enum dnnmem_status dnnmem_max_dim(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                  const char *dim, int64_t limit, int64_t *value,
                                  struct dnnmem_result **at, struct dnnmem_result **next,
                                  struct dnnmem_error *err);

/* ----------------------------------------------------------------------------
 * Plans: the parallel configurations that fit (dnnmem plan; docs/parallel.md)
 *
 * dnnmem_plan enumerates, for a training job (cfg: mode TRAIN, a capacity;
 * cfg->par's zero, fsdp, offload, tp (> 1), pp (> 1) and cfg->checkpoint,
 * where set, are constraints: only configurations with them are formed; no
 * grad_accum, micro_batches or rank), the ways to run it on `gpus` GPUs: the
 * data-parallel engine (DDP, ZeRO 1-3 with offload, FSDP's modes), TP x PP x
 * DP (TP and PP with DDP, as the engine models them), the micro-batch and
 * gradient accumulation (or pipeline micro-batches) that make the global
 * batch, and activation checkpointing of the model's repeated blocks off or
 * on. Each is estimated in full per rank by dnnmem_estimate, cheapest first
 * in the engines' order (docs/parallel.md "plan"), until max_steps
 * estimates; those that fit (verdict fits or tight) are kept in that order.
 */
#define DNNMEM_PLAN_MAX_STEPS 1000   /* the most estimates one plan may run */
#define DNNMEM_PLAN_STEPS_DEFAULT 500
struct dnnmem_plan_options {
    int gpus;             /* GPUs available, >= 1 */
    int64_t global_batch; /* samples per optimizer step; 0: cfg->batch_size per
                             data-parallel rank (the global batch grows with DP) */
    bool fewest_gpus;     /* search 1..gpus GPUs, keep the fewest any configuration fits */
    int max_steps;        /* estimates at most, 1..DNNMEM_PLAN_MAX_STEPS; 0: the default */
    bool every_micro_step; /* replay every micro-step of each estimate (the rows are the
                              same; slower): the plan's estimates otherwise set
                              dnnmem_config.accum_fixed_point */
};
void dnnmem_plan_options_init(struct dnnmem_plan_options *po);

/* One configuration and its estimate (the most loaded rank's). */
struct dnnmem_plan_row {
    int gpus, dp, tp, pp;
    int zero;                    /* DeepSpeed ZeRO stage, 0: none */
    enum dnnmem_fsdp fsdp;
    enum dnnmem_offload offload;
    bool checkpoint;             /* the repeated blocks checkpointed */
    int64_t micro_batch;         /* samples per forward on one data-parallel rank */
    int grad_accum;              /* micro-steps per optimizer step (1 under PP) */
    int micro_batches;           /* pp > 1: the pipeline's micro-batches; else 1 */
    int64_t global_batch;        /* micro_batch x steps x dp */
    int tier;                    /* the engine's place in the order, 0 (DDP) to 10 (ZeRO-3
                                    with offloaded parameters): docs/parallel.md "plan" */
    const char *options;         /* the CLI options that select it, for dnnmem estimate */
    uint64_t total_bytes, peak_allocated;
    uint64_t category_bytes[DNNMEM_CAT_COUNT]; /* at its allocated peak, as the result's */
    int rank;                    /* the rank estimated (the most loaded) */
    enum dnnmem_verdict verdict; /* fits or tight */
    int64_t margin_bytes;
};

/* A plan: owns every row and string reachable from it (dnnmem_plan_free). */
struct dnnmem_plan {
    struct dnnmem_plan_row *rows; /* the configurations that fit, in the order */
    size_t n_rows;
    int gpus;                    /* the world size of the rows: po->gpus, or with
                                    fewest_gpus the fewest that fit (0: none fits) */
    int gpus_searched;           /* po->gpus */
    bool fewest_gpus;
    int64_t global_batch;        /* po->global_batch (0: from cfg->batch_size) */
    uint64_t capacity_bytes;
    size_t n_candidates;         /* configurations formed for the world sizes searched */
    size_t n_estimated;          /* estimates run (<= max_steps) */
    size_t n_refused;            /* of them, refused by the engine (not modelled, or a
                                    dim that does not divide): first_refusal says why */
    size_t n_over;               /* of them, estimated and not fitting */
    size_t n_skipped;            /* not estimated: their TP size was refused once */
    int max_steps;
    bool truncated;              /* max_steps ran out before every candidate */
    const char *first_refusal;   /* "" when none */
    const char *device_label;    /* cfg->device_label ("H100-80GB"), or "" */
};

/* Plan `m` under `cfg` and `po`. On success *out is the caller's
 * (dnnmem_plan_free), possibly with no rows (none fits). Bad options:
 * DNNMEM_E_USAGE; constraints no configuration meets: DNNMEM_E_CONSTRAINT;
 * TP or PP fixed with ZeRO, FSDP or offload: DNNMEM_E_UNSUPPORTED;
 * an error of every estimate, or one not about the configuration, passed on. */
enum dnnmem_status dnnmem_plan(const dnnmem_model *m, const struct dnnmem_config *cfg,
                               const struct dnnmem_plan_options *po, struct dnnmem_plan **out,
                               struct dnnmem_error *err);
void dnnmem_plan_free(struct dnnmem_plan *p); /* accepts NULL */
/* The plan of `m` as a table, or as one JSON object (schema "dnnmem.plan/1",
 * docs/schema/plan.schema.json). 0, or -1 on a write error. */
int dnnmem_report_plan_text(const struct dnnmem_plan *p, const dnnmem_model *m, FILE *f);
int dnnmem_report_plan_json(const struct dnnmem_plan *p, const dnnmem_model *m, FILE *f);

/* Write a result for people (IEC units) or as one JSON object (integer
 * bytes, schema "dnnmem.estimate/1"). Return 0, or -1 on a write error. */
int dnnmem_report_text(const struct dnnmem_result *r, const dnnmem_model *m, FILE *f);
int dnnmem_report_json(const struct dnnmem_result *r, const dnnmem_model *m, FILE *f);
/* The timeline (the result needs one: cfg.timeline) as CSV, one row per
 * step, or as one self-contained HTML page (no network): memory by kind over
 * the run against the capacity (round IEC ticks, zoom and pan, phase and
 * iteration boundaries, the peak marked where it is, however short), the
 * breakdown at the peak, the bytes by module there (cfg.module_depth), the
 * advice and command line (dnnmem_report_html_page), the tensors live at the
 * peak and the assumptions. */
int dnnmem_report_timeline_csv(const struct dnnmem_result *r, FILE *f);
/* The events (cfg.events) as CSV, one row per allocation or free: its
 * step's phase, iteration, node and op, the buffer, its kind and bytes, and
 * the bytes allocated after it (requested, no rounding). */
int dnnmem_report_events_csv(const struct dnnmem_result *r, FILE *f);
/* Two estimates side by side: each component, and how it changed from A to B. */
int dnnmem_report_compare(const struct dnnmem_result *a, const char *label_a,
                          const struct dnnmem_result *b, const char *label_b, FILE *f);
int dnnmem_report_html(const struct dnnmem_result *r, const dnnmem_model *m, FILE *f);
/* What a page shows beyond the result: the command line that made it (NULL
 * when not known). Only read during the call. */
struct dnnmem_page_info {
    const char *command_line;
};
/* dnnmem_report_html with these (pi NULL: none); the bytes by module at the
 * peak are shown when the result has them (cfg.module_depth), and the advice
 * when it has been asked for (dnnmem_result_advise). */
int dnnmem_report_html_page(const struct dnnmem_result *r, const dnnmem_model *m,
                            const struct dnnmem_page_info *pi, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* DNNMEM_H */
