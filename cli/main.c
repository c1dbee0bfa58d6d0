/*
 * main.c: the dnnmem command line. Uses only the public header.
 *
 * Exit codes: 0 ok; 2 usage error (bad flag, unbound dim); 3 model error
 * (unreadable, corrupt, invalid, inconsistent shapes); 4 unsupported op or
 * feature; 5 internal error or out of host memory.
 */
#define _GNU_SOURCE
#include "dnnmem.h"

#include <jansson.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { EXIT_OK = 0, EXIT_DOES_NOT_FIT = 1, EXIT_USAGE = 2, EXIT_MODEL = 3, EXIT_UNSUPPORTED = 4, EXIT_INTERNAL = 5 };

static int exit_code(enum dnnmem_status s)
{
    switch (s) {
    case DNNMEM_OK: return EXIT_OK;
    case DNNMEM_E_USAGE:
    case DNNMEM_E_UNBOUND: return EXIT_USAGE;
    case DNNMEM_E_IO:
    case DNNMEM_E_PARSE:
    case DNNMEM_E_MODEL:
    case DNNMEM_E_SHAPE: return EXIT_MODEL;
    case DNNMEM_E_UNSUPPORTED: return EXIT_UNSUPPORTED;
    case DNNMEM_E_DEVICE_OOM: return EXIT_DOES_NOT_FIT;
    case DNNMEM_E_NOMEM:
    case DNNMEM_E_INTERNAL: return EXIT_INTERNAL;
    }
    return EXIT_INTERNAL;
}

static const char usage_text[] =
    "usage: dnnmem estimate MODEL [options]      the peak, why, and whether it fits\n"
    "       dnnmem max-batch MODEL --gpu G [options]    the largest batch that fits\n"
    "       dnnmem max-seq-len MODEL --gpu G [options]  the largest sequence length that fits\n"
    "       dnnmem compare MODEL_A MODEL_B [options]   two models side by side\n"
    "       dnnmem compare MODEL [options] --with \"OPTIONS\"  two configurations\n"
    "       dnnmem gpus                                 the GPU catalogue\n"
    "       dnnmem --help | --version\n"
    "\n"
    "Estimate the peak GPU memory of running MODEL (an ONNX file) with PyTorch\n"
    "eager on a CUDA device, before it runs. Weights are never read: an ONNX\n"
    "file whose weights live in external data works without them.\n"
    "\n"
    "Device and decision:\n"
    "  --gpu NAME             a GPU of 'dnnmem gpus' (A100-80GB, H100-80GB, T4, ...;\n"
    "                         MIG slices as A100-80GB:3g.40gb): its memory as CUDA reports\n"
    "                         it, and its compute capability\n"
    "  --memory SIZE          or the memory available, e.g. 24GiB or 80GB\n"
    "  --headroom P           below this share of the memory left, the verdict is 'tight'\n"
    "                         (default 5%); 'does not fit' exits 1 and lists changes that\n"
    "                         would fit, each with its estimate\n"
    "  --limit N              max-batch / max-seq-len: largest value tried (default 65536,\n"
    "                         or 1048576 for sequences)\n"
    "  --dim-name NAME        max-seq-len: the dim to grow (default: the model's seq dim)\n"
    "\n"
    "Run:\n"
    "  --mode infer|train|generate  forward under torch.no_grad(), model.eval() (default),\n"
    "                         training steps: zero_grad, forward, loss, backward, step, or\n"
    "                         (HuggingFace causal LMs, T5) model.generate() with a KV cache\n"
    "  --framework F[@V]      the runtime: pytorch (default; @1.10, @1.13 or @2.x, default\n"
    "                         2.6, decides zero_grad(set_to_none), the optimizer, and before\n"
    "                         1.11 softmax keeping its input), or\n"
    "                         tensorflow, mxnet, jax (@VERSION recorded and echoed): their\n"
    "                         allocators, limits and overheads over PyTorch eager's schedule\n"
    "                         (not yet validated against measurements)\n"
    "  --device cuda|cpu      CUDA device (default) or PyTorch's CPU kernels and host memory\n"
    "  --cpu-threads N        torch.get_num_threads() with --device cpu (default: several);\n"
    "                         with 1, small-batch 1x1 convolutions use THNN, not oneDNN\n"
    "  --inplace auto|none    ReLU-like ops in place where PyTorch allows (default auto,\n"
    "                         as torchvision's inplace=True), or never\n"
    "\n"
    "LoRA (--mode train, HuggingFace configs; PEFT's get_peft_model: the model frozen,\n"
    "float32 adapters):\n"
    "  --lora-r R             the adapters' rank (enables LoRA)\n"
    "  --lora-alpha A         lora_alpha (default 8; scales, costs no memory)\n"
    "  --lora-dropout P       lora_dropout (default 0: none)\n"
    "  --lora-targets LIST    module names (q_proj,k_proj,v_proj,o_proj, ...) or all-linear;\n"
    "                         default PEFT's for the architecture (q_proj,v_proj; c_attn;\n"
    "                         query,value)\n"
    "\n"
    "Quantized weights (HuggingFace configs): a config's quantization_config (gptq,\n"
    "awq, bitsandbytes, fp8) is built as its checkpoint stores it; for a config\n"
    "without one, bitsandbytes quantization on load:\n"
    "  --quant Q              nf4 (double quantization, as QLoRA), nf4-single, fp4\n"
    "                         (load_in_4bit), int8 (load_in_8bit, LLM.int8()): every\n"
    "                         linear but lm_head; the rest in float16 unless --precision;\n"
    "                         with --mode train it needs --lora-r\n"
    "  --kbit-prep            PEFT's prepare_model_for_kbit_training before the adapters\n"
    "                         (with --lora-r): non-quantized float16/bfloat16 parameters\n"
    "                         to float32 (so float32 activations and logits), gradient\n"
    "                         checkpointing of every layer for bitsandbytes and gptq\n"
    "  --kbit-prep-no-gc      the same with use_gradient_checkpointing=False\n"
    "\n"
    "Generation (--mode generate; greedy unless told otherwise, DynamicCache):\n"
    "  --prompt-len N         prompt tokens (the same as --seq-len)\n"
    "  --new-tokens N         tokens generated after the prompt (required)\n"
    "  --kv-dtype T           the cache's storage during decoding: auto (the model's\n"
    "                         dtype, default), fp32, fp16, bf16 or fp8\n"
    "  --num-beams N          beam search (num_beams N > 1, do_sample False): the batch\n"
    "                         runs as batch x N rows, the cache reordered every step\n"
    "                         (DynamicCache and legacy-tuple decoders; default 1)\n"
    "  --do-sample            sampling: the logits warpers, softmax, multinomial\n"
    "  --top-k K              with --do-sample: TopKLogitsWarper's k (default 50, as\n"
    "                         GenerationConfig; 0: none)\n"
    "  --top-p P              with --do-sample: TopPLogitsWarper's p in (0, 1] (default\n"
    "                         1: none)\n"
    "  --temperature T        with --do-sample: TemperatureLogitsWarper's T > 0 (default\n"
    "                         1: none)\n"
    "\n"
    "Training (--mode train):\n"
    "  --optimizer NAME       sgd-momentum (default), sgd, adam, adamw, rmsprop, adagrad,\n"
    "                         adamw-hf (transformers' AdamW), adafactor (transformers'),\n"
    "                         adam8bit (bitsandbytes), none (forward and backward only)\n"
    "  --loss L               ce: cross-entropy of the first output against class ids\n"
    "                         (default); mse; sum: every output's .sum() added; ce-all,\n"
    "                         mse-all: one term per output (e.g. auxiliary heads)\n"
    "  --iterations N         training steps simulated (default 2: the steady state)\n"
    "  --grad-accum N         micro-batches per optimizer step (default 1)\n"
    "  --freeze PATTERN       parameters whose name matches the glob get no grad and no\n"
    "                         optimizer state (repeatable), e.g. --freeze 'layer[12].*'\n"
    "  --precision P          fp32 (default, as the model), fp16 or bf16 (model.half()),\n"
    "                         amp-fp16 or amp-bf16 (torch.autocast with fp32 weights; CUDA)\n"
    "  --attn A               HuggingFace configs: eager (scores and softmax materialised),\n"
    "                         sdpa (F.scaled_dot_product_attention, fused on CUDA), flash\n"
    "                         (flash_attention_2, the flash-attn package; 16-bit, sm80+), or\n"
    "                         auto (default: what transformers picks, sdpa from PyTorch 2.1)\n"
    "  --sdpa-backend K       HuggingFace configs under sdpa attention: the kernel forced\n"
    "                         around the step (sdpa_kernel(SDPBackend.K)): flash, efficient,\n"
    "                         cudnn (buffers as flash's), math (scores and softmax in\n"
    "                         float32), or auto (default: PyTorch's choice); a kernel\n"
    "                         PyTorch refuses for the model is an error\n"
    "  --transformers X.Y     HuggingFace configs: the transformers release (default 4.51);\n"
    "                         from 4.54 sdpa takes grouped keys/values (enable_gqa) on\n"
    "                         PyTorch 2.5+, and the math kernel where no fused one can\n"
    "                         (float32, before sm80); from 4.56 sdpa gets q, k, v as they\n"
    "                         are (no contiguous copies); from 5.0 the cache copies k, v\n"
    "  --checkpoint SPEC      activation checkpointing (torch.utils.checkpoint), repeatable:\n"
    "                         a glob on node-name prefixes, one segment per matching\n"
    "                         prefix ('/layers.*': per layer; '/layer*': per ResNet stage;\n"
    "                         '/layers.*:2': every 2 layers),\n"
    "                         or A..B: one segment from the first node matching glob A to\n"
    "                         the last matching glob B\n"
    "\n"
    "Dims (symbolic dims of the model's inputs):\n"
    "  -b, --batch-size N     bind every batch-like dim (batch, batch_size, N, ...); default 1;\n"
    "                         a list (8,16,32) prints one row per value\n"
    "  -s, --seq-len N        bind every sequence-like dim (seq, seq_len, sequence_length, ...);\n"
    "                         a list sweeps too\n"
    "  --dim NAME=N           bind the dim NAME, N >= 0 (repeatable; wins over the two above)\n"
    "  --input-shape NAME=D1,D2,...  the shape of input NAME (repeatable): required for\n"
    "                         inputs that declare none (MXNet symbols: data=1,3,224,224),\n"
    "                         where --batch-size then replaces the first dim; for declared\n"
    "                         inputs it binds their symbolic dims\n"
    "\n"
    "Runtime constants (each default is printed with the result):\n"
    "  --cuda X.Y             CUDA version PyTorch was built with (default 12.1); before\n"
    "                         11.7 kernels load eagerly and the context is much larger\n"
    "  --compute-capability X.Y  the GPU's (default 8.0, A100; 9.0 is H100/H200)\n"
    "  --cuda-context SIZE    CUDA context (default by version: 426 MiB for PyTorch 2.x,\n"
    "                         273.75 MiB for 1.13, 1343 MiB before CUDA 11.7)\n"
    "  --cublas-workspace SIZE  per cuBLAS handle (default 8.125 MiB; 32 MiB on 9.x+;\n"
    "                         4 MiB in 1.13); under --framework jax (jit), per cuBLAS\n"
    "                         call in XLA's temp buffer (32 MiB on 9.x+, else 4 MiB)\n"
    "  --conv-workspace SIZE  cuDNN workspace around each convolution (default 0)\n"
    "  --alloc-round SIZE     replace the caching allocator by plain rounding to SIZE\n"
    "  --calibration FILE     a JSON object of measured constants: cuda_context_bytes,\n"
    "                         cublas_workspace_bytes, conv_workspace_bytes, cuda (\"12.1\"),\n"
    "                         compute_capability (\"9.0\"); later options win\n"
    "  SIZE takes B, KiB, MiB, GiB (IEC) or kB, MB, GB (SI) suffixes.\n"
    "\n"
    "Framework runtimes (each with its --framework):\n"
    "  --tf-allow-growth      TensorFlow: regions grow from 2 MiB, doubling (default: one\n"
    "                         region of the whole memory limit at start)\n"
    "  --tf-memory-limit SIZE TensorFlow's memory limit (default: free memory at start\n"
    "                         minus MinSystemMemory)\n"
    "  --tf-min-system-memory SIZE  (default by compute capability: 500 MiB to 1800 MiB)\n"
    "  --tf-execution graph|eager  TensorFlow: the step under tf.function as model.fit runs\n"
    "                         it (Grappler's layout, buffer forwarding, the pruned gradient\n"
    "                         graph; default), or op by op under a GradientTape\n"
    "  --mxnet-executor planned|naive  MXNet: the symbolic executor's static memory plan\n"
    "                         (Module.bind, nnvm PlanMemory; default), or the eager\n"
    "                         schedule through MXNet's pool (imperative code)\n"
    "  --mxnet-pool naive|round  MXNET_GPU_MEM_POOL_TYPE (default naive)\n"
    "  --mxnet-page-size SIZE MXNET_GPU_MEM_POOL_PAGE_SIZE (default 4096)\n"
    "  --mxnet-round-cutoff N MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF (default 24)\n"
    "  --mxnet-reserve P      MXNET_GPU_MEM_POOL_RESERVE, % of memory (default 5)\n"
    "  --mxnet-grad-sum-cap N MXNET_EXEC_INPLACE_GRAD_SUM_CAP: from N gradient contributions\n"
    "                         to one tensor, kAddTo sums in place (default 8)\n"
    "  --mxnet-mirror         MXNET_BACKWARD_DO_MIRROR=1: the symbolic executor recomputes\n"
    "                         in the backward the outputs of every op but Convolution,\n"
    "                         FullyConnected, Concat, SoftmaxOutput and Dropout (default off)\n"
    "  --jax-preallocate true|false  XLA_PYTHON_CLIENT_PREALLOCATE (default true)\n"
    "  --jax-mem-fraction F   XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75)\n"
    "  --jax-execution jit|eager  JAX: the step compiled by jax.jit (XLA's buffer assignment:\n"
    "                         fusion, one temp buffer; default), or op by op\n"
    "  --jax-donate true|false  the jitted train step donates params and optimizer state\n"
    "                         (donate_argnums; default true)\n"
    "\n"
    "Output:\n"
    "  --json                 one JSON object with integer bytes (schema dnnmem.estimate/1,\n"
    "                         docs/schema/estimate.schema.json); a sweep gives an array\n"
    "  --csv                  one CSV row per swept value\n"
    "  --report FILE.html     a self-contained page: memory by kind over the run against\n"
    "                         the device, the peak marked, what is live at each step\n"
    "  --timeline FILE.csv    the same timeline, one row per step\n"
    "  --top N                list the N largest tensors live at the peak (default 10)\n"
    "  -h, --help             this text\n"
    "  -V, --version          the version\n"
    "\n"
    "Exit codes: 0 ok (fits or tight), 1 does not fit (max-*: not even 1 fits), 2 usage\n"
    "error (bad flag, unbound dim), 3 model error\n"
    "(unreadable, corrupt or invalid file, inconsistent shapes), 4 unsupported op\n"
    "or feature, 5 internal error.\n"
    "\n"
    "Examples:\n"
    "  dnnmem estimate resnet50.onnx --batch-size 64\n"
    "  dnnmem estimate resnet50.onnx --batch-size 64 --mode train --optimizer adam\n"
    "  dnnmem estimate resnet50.onnx -b 64 --mode train --gpu A100-40GB\n"
    "  dnnmem max-batch resnet50.onnx --mode train --precision amp-bf16 --gpu L4\n"
    "  dnnmem estimate bert.onnx -b 8,16,32 -s 128,512 --mode train --csv\n"
    "  dnnmem compare resnet50.onnx -b 64 --mode train --with \"--precision amp-bf16\"\n"
    "  dnnmem estimate bert.onnx --batch-size 8 --seq-len 512 --json\n"
    "  dnnmem estimate gpt2.onnx --dim batch_size=1 --dim past_sequence_length=1024 --seq-len 1\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dnnmem: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'dnnmem --help'.\n");
    va_end(ap);
    return EXIT_USAGE;
}

static int parse_count(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v <= 0)
        return -1;
    *out = v;
    return 0;
}

/* "512", "300MiB", "1.5GiB", "500MB": bytes. */
static int parse_size(const char *s, int64_t *out)
{
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},         {"B", 1},          {"KiB", 1024.0},      {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"kB", 1e3}, {"KB", 1e3},
                 {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
        if (strcmp(end, units[k].suffix) == 0) {
            double b = v * units[k].mult;
            if (b > 9.0e18)
                return -1;
            *out = (int64_t)(b + 0.5);
            return 0;
        }
    return -1;
}

/* A calibration file: measured runtime constants of one machine, as a JSON
 * object {"cuda_context_bytes": N, "cublas_workspace_bytes": N,
 * "conv_workspace_bytes": N, "cuda": "12.1", "compute_capability": "9.0"}.
 * Options given after it on the command line win. */
static int read_calibration(const char *path, struct dnnmem_config *cfg)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return usage_error("--calibration %s: %s (line %d)", path, je.text, je.line);
    if (!json_is_object(root)) {
        json_decref(root);
        return usage_error("--calibration %s: expected a JSON object", path);
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        int64_t *bytes = strcmp(key, "cuda_context_bytes") == 0       ? &cfg->cuda_context_bytes
                       : strcmp(key, "cublas_workspace_bytes") == 0   ? &cfg->cublas_workspace_bytes
                       : strcmp(key, "conv_workspace_bytes") == 0     ? &cfg->conv_workspace_bytes
                                                                      : NULL;
        int *version = strcmp(key, "cuda") == 0                 ? &cfg->cuda_version
                     : strcmp(key, "compute_capability") == 0   ? &cfg->compute_capability
                                                                : NULL;
        int major, minor;
        char tail;
        if (bytes && json_is_integer(v) && json_integer_value(v) >= 0) {
            *bytes = json_integer_value(v);
        } else if (version && json_is_string(v) &&
                   sscanf(json_string_value(v), "%d.%d%c", &major, &minor, &tail) == 2 &&
                   major > 0 && major < 100 && minor >= 0 && minor < 10) {
            *version = major * 10 + minor;
        } else {
            int rc = usage_error("--calibration %s: key '%s' is unknown or its value is not a "
                                 "non-negative integer (bytes) or \"X.Y\" (versions)",
                                 path, key);
            json_decref(root); /* owns key */
            return rc;
        }
    }
    json_decref(root);
    return 0;
}

/* Everything the command line says about one run. */
struct cli {
    struct dnnmem_config cfg;
    struct dnnmem_dim_binding dims[64];
    size_t n_dims;
    struct dnnmem_input_shape inputs[64]; /* --input-shape NAME=D1,D2,... */
    int64_t input_dims[64][DNNMEM_MAX_DIMS];
    size_t n_inputs;
    const char *freeze[64], *ckpt[256];
    size_t n_freeze, n_ckpt;
    char lora_buf[512];            /* --lora-targets, split in place */
    const char *lora_targets[32];
    int64_t batches[64], seqs[64]; /* sweeps: --batch-size 8,16,32 */
    size_t n_batches, n_seqs;
    bool json, csv;
    const char *gpu;               /* --gpu, echoed */
    const char *memory;            /* --memory, echoed */
    const char *search_dim;        /* max-*: --dim-name */
    const char *report, *timeline; /* --report page.html, --timeline steps.csv */
    char device_label[160];        /* echoed with the result */
    int64_t limit;                 /* max-*: --limit */
    const char *model;
};

/* A positive count, or a comma-separated list of them (a sweep). */
static int parse_list(const char *flag, const char *arg, int64_t *out, size_t *n)
{
    char buf[512];
    if (strlen(arg) >= sizeof buf)
        return usage_error("%s %s: list too long", flag, arg);
    strcpy(buf, arg);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == 64 || parse_count(tok, &out[*n]))
            return usage_error("%s %s: expected positive integers, e.g. 8 or 8,16,32", flag, arg);
        (*n)++;
    }
    return *n ? 0 : usage_error("%s %s: expected a positive integer", flag, arg);
}

/* Parse options (shared by estimate and max-batch); -1 to go on, else an exit code. */
static int parse_cli(int argc, char **argv, struct cli *cl)
{
    enum { OPT_MODE = 256, OPT_DIM, OPT_JSON, OPT_CONTEXT, OPT_ROUND, OPT_TOP, OPT_FRAMEWORK,
           OPT_DEVICE, OPT_INPLACE, OPT_OPTIMIZER, OPT_LOSS, OPT_ITERS, OPT_ACCUM, OPT_CUDA,
           OPT_CC, OPT_CUBLAS, OPT_CONVWS, OPT_PRECISION, OPT_FREEZE, OPT_CKPT, OPT_THREADS,
           OPT_CALIB, OPT_GPU, OPT_MEMORY, OPT_HEADROOM, OPT_CSV, OPT_LIMIT, OPT_DIMNAME,
           OPT_REPORT, OPT_TIMELINE, OPT_ATTN, OPT_SDPA_BACKEND, OPT_TRANSFORMERS, OPT_NEWTOK, OPT_KVDTYPE, OPT_LORA_R,
           OPT_LORA_ALPHA, OPT_LORA_DROPOUT, OPT_LORA_TARGETS, OPT_TF_GROWTH, OPT_TF_LIMIT,
           OPT_TF_MINSYS, OPT_MX_POOL, OPT_MX_EXEC, OPT_MX_PAGE, OPT_MX_CUTOFF, OPT_MX_RESERVE, OPT_MX_SUMCAP, OPT_MX_MIRROR, OPT_JAX_PREALLOC,
           OPT_JAX_FRACTION, OPT_JAX_EXEC, OPT_JAX_DONATE, OPT_TF_EXEC, OPT_INPUT_SHAPE, OPT_QUANT, OPT_KBIT,
           OPT_KBIT_NO_GC, OPT_BEAMS, OPT_SAMPLE, OPT_TOPK, OPT_TOPP, OPT_TEMP };
    static const struct option opts[] = {
        {"gpu", required_argument, NULL, OPT_GPU},
        {"report", required_argument, NULL, OPT_REPORT},
        {"timeline", required_argument, NULL, OPT_TIMELINE},
        {"memory", required_argument, NULL, OPT_MEMORY},
        {"headroom", required_argument, NULL, OPT_HEADROOM},
        {"csv", no_argument, NULL, OPT_CSV},
        {"limit", required_argument, NULL, OPT_LIMIT},
        {"dim-name", required_argument, NULL, OPT_DIMNAME},
        {"mode", required_argument, NULL, OPT_MODE},
        {"framework", required_argument, NULL, OPT_FRAMEWORK},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"inplace", required_argument, NULL, OPT_INPLACE},
        {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
        {"loss", required_argument, NULL, OPT_LOSS},
        {"iterations", required_argument, NULL, OPT_ITERS},
        {"grad-accum", required_argument, NULL, OPT_ACCUM},
        {"grad_accum", required_argument, NULL, OPT_ACCUM},
        {"batch-size", required_argument, NULL, 'b'},
        {"batch_size", required_argument, NULL, 'b'},
        {"seq-len", required_argument, NULL, 's'},
        {"seq_len", required_argument, NULL, 's'},
        {"dim", required_argument, NULL, OPT_DIM},
        {"input-shape", required_argument, NULL, OPT_INPUT_SHAPE},
        {"json", no_argument, NULL, OPT_JSON},
        {"cuda-context", required_argument, NULL, OPT_CONTEXT},
        {"cuda", required_argument, NULL, OPT_CUDA},
        {"precision", required_argument, NULL, OPT_PRECISION},
        {"attn", required_argument, NULL, OPT_ATTN},
        {"sdpa-backend", required_argument, NULL, OPT_SDPA_BACKEND},
        {"transformers", required_argument, NULL, OPT_TRANSFORMERS},
        {"prompt-len", required_argument, NULL, 's'},
        {"new-tokens", required_argument, NULL, OPT_NEWTOK},
        {"kv-dtype", required_argument, NULL, OPT_KVDTYPE},
        {"num-beams", required_argument, NULL, OPT_BEAMS},
        {"do-sample", no_argument, NULL, OPT_SAMPLE},
        {"top-k", required_argument, NULL, OPT_TOPK},
        {"top-p", required_argument, NULL, OPT_TOPP},
        {"temperature", required_argument, NULL, OPT_TEMP},
        {"lora-r", required_argument, NULL, OPT_LORA_R},
        {"quant", required_argument, NULL, OPT_QUANT},
        {"kbit-prep", no_argument, NULL, OPT_KBIT},
        {"kbit-prep-no-gc", no_argument, NULL, OPT_KBIT_NO_GC},
        {"lora-alpha", required_argument, NULL, OPT_LORA_ALPHA},
        {"lora-dropout", required_argument, NULL, OPT_LORA_DROPOUT},
        {"lora-targets", required_argument, NULL, OPT_LORA_TARGETS},
        {"freeze", required_argument, NULL, OPT_FREEZE},
        {"checkpoint", required_argument, NULL, OPT_CKPT},
        {"cpu-threads", required_argument, NULL, OPT_THREADS},
        {"calibration", required_argument, NULL, OPT_CALIB},
        {"compute-capability", required_argument, NULL, OPT_CC},
        {"cublas-workspace", required_argument, NULL, OPT_CUBLAS},
        {"conv-workspace", required_argument, NULL, OPT_CONVWS},
        {"alloc-round", required_argument, NULL, OPT_ROUND},
        {"top", required_argument, NULL, OPT_TOP},
        {"tf-allow-growth", no_argument, NULL, OPT_TF_GROWTH},
        {"tf-memory-limit", required_argument, NULL, OPT_TF_LIMIT},
        {"tf-min-system-memory", required_argument, NULL, OPT_TF_MINSYS},
        {"mxnet-pool", required_argument, NULL, OPT_MX_POOL},
        {"mxnet-executor", required_argument, NULL, OPT_MX_EXEC},
        {"mxnet-page-size", required_argument, NULL, OPT_MX_PAGE},
        {"mxnet-round-cutoff", required_argument, NULL, OPT_MX_CUTOFF},
        {"mxnet-reserve", required_argument, NULL, OPT_MX_RESERVE},
        {"mxnet-grad-sum-cap", required_argument, NULL, OPT_MX_SUMCAP},
        {"mxnet-mirror", no_argument, NULL, OPT_MX_MIRROR},
        {"jax-preallocate", required_argument, NULL, OPT_JAX_PREALLOC},
        {"jax-mem-fraction", required_argument, NULL, OPT_JAX_FRACTION},
        {"jax-execution", required_argument, NULL, OPT_JAX_EXEC},
        {"tf-execution", required_argument, NULL, OPT_TF_EXEC},
        {"jax-donate", required_argument, NULL, OPT_JAX_DONATE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    struct dnnmem_dim_binding *dims = cl->dims;
    size_t n_dims = 0;
    const char **freeze = cl->freeze, **ckpt = cl->ckpt;
    size_t n_freeze = 0, n_ckpt = 0;
    bool json = false;
    const char *fw_flag[4] = {NULL, NULL, NULL, NULL}; /* a flag given for each framework */
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":b:s:h", opts, NULL)) != -1) {
        int64_t v;
        switch (c) {
        case OPT_MODE:
            if (strcmp(optarg, "infer") == 0)
                cfg.mode = DNNMEM_MODE_INFER;
            else if (strcmp(optarg, "train") == 0)
                cfg.mode = DNNMEM_MODE_TRAIN;
            else if (strcmp(optarg, "generate") == 0)
                cfg.mode = DNNMEM_MODE_GENERATE;
            else
                return usage_error("--mode %s: expected infer, train or generate", optarg);
            break;
        case OPT_NEWTOK:
            if (parse_count(optarg, &v) || v > 1048576)
                return usage_error("--new-tokens %s: expected 1..1048576", optarg);
            cfg.new_tokens = v;
            break;
        case OPT_BEAMS:
            if (parse_count(optarg, &v) || v > 4096)
                return usage_error("--num-beams %s: expected 1..4096", optarg);
            cfg.num_beams = (int)v;
            break;
        case OPT_SAMPLE:
            cfg.do_sample = true;
            break;
        case OPT_TOPK:
            /* 0 turns the warper off, as top_k=0 does in transformers */
            if (strcmp(optarg, "0") == 0)
                v = -1;
            else if (parse_count(optarg, &v) || v > (INT64_C(1) << 40))
                return usage_error("--top-k %s: expected a count (0: no top-k warper)", optarg);
            cfg.top_k = v;
            break;
        case OPT_TOPP:
        case OPT_TEMP: {
            char *end;
            double d = strtod(optarg, &end);
            bool top_p = c == OPT_TOPP;
            if (end == optarg || *end || !(top_p ? d > 0 && d <= 1 : d > 0 && d < 1e30))
                return usage_error(top_p ? "--top-p %s: expected a probability in (0, 1]"
                                         : "--temperature %s: expected a positive number",
                                   optarg);
            if (top_p)
                cfg.top_p = d;
            else
                cfg.temperature = d;
            break;
        }
        case OPT_KVDTYPE:
            if (strcmp(optarg, "auto") == 0)
                cfg.kv_dtype = DNNMEM_KV_AUTO;
            else if (strcmp(optarg, "fp32") == 0)
                cfg.kv_dtype = DNNMEM_KV_FP32;
            else if (strcmp(optarg, "fp16") == 0)
                cfg.kv_dtype = DNNMEM_KV_FP16;
            else if (strcmp(optarg, "bf16") == 0)
                cfg.kv_dtype = DNNMEM_KV_BF16;
            else if (strcmp(optarg, "fp8") == 0)
                cfg.kv_dtype = DNNMEM_KV_FP8;
            else
                return usage_error("--kv-dtype %s: expected auto, fp32, fp16, bf16 or fp8 "
                                   "(int8/int4 quantized caches are not modelled)", optarg);
            break;
        case OPT_FRAMEWORK: {
            int major, minor = 0;
            char tail;
            static const struct {
                const char *name;
                enum dnnmem_framework fw;
            } fws[] = {{"tensorflow", DNNMEM_FW_TENSORFLOW}, {"mxnet", DNNMEM_FW_MXNET},
                       {"jax", DNNMEM_FW_JAX}};
            const char *at = strchr(optarg, '@');
            size_t len = at ? (size_t)(at - optarg) : strlen(optarg);
            bool other = false;
            for (size_t k = 0; k < sizeof fws / sizeof fws[0]; k++)
                if (strlen(fws[k].name) == len && strncmp(optarg, fws[k].name, len) == 0) {
                    const char *ver = at ? at + 1 : NULL;
                    bool ok = !ver || (*ver >= '0' && *ver <= '9');
                    for (const char *q = ver; ok && q && *q; q++)
                        ok = (*q >= '0' && *q <= '9') || (*q == '.' && q[1] >= '0' && q[1] <= '9');
                    if (!ok)
                        return usage_error("--framework %s: expected %s@VERSION with a version "
                                           "such as %s",
                                           optarg, fws[k].name,
                                           fws[k].fw == DNNMEM_FW_JAX ? "0.4.30"
                                           : fws[k].fw == DNNMEM_FW_MXNET ? "1.9.1"
                                                                          : "2.15");
                    cfg.framework = fws[k].fw;
                    cfg.framework_version = ver;
                    cfg.torch_version = 0;
                    other = true;
                }
            if (other)
                break;
            cfg.framework = DNNMEM_FW_PYTORCH;
            cfg.framework_version = NULL;
            if (strcmp(optarg, "pytorch") == 0 || strcmp(optarg, "pytorch@2.x") == 0)
                cfg.torch_version = 200;
            else if ((sscanf(optarg, "pytorch@%d.%d%c", &major, &minor, &tail) == 2 ||
                      sscanf(optarg, "pytorch@%d%c", &major, &tail) == 1) &&
                     major >= 1 && major <= 9 && minor >= 0 && minor <= 99)
                cfg.torch_version = major * 100 + minor;
            else
                return usage_error("--framework %s: expected pytorch, tensorflow, mxnet or jax, "
                                   "optionally with @VERSION (pytorch@1.13, tensorflow@2.15)",
                                   optarg);
            break;
        }
        case OPT_DEVICE:
            if (strcmp(optarg, "cuda") == 0)
                cfg.device = DNNMEM_DEVICE_CUDA;
            else if (strcmp(optarg, "cpu") == 0)
                cfg.device = DNNMEM_DEVICE_CPU;
            else
                return usage_error("--device %s: expected cuda or cpu", optarg);
            break;
        case OPT_INPLACE:
            if (strcmp(optarg, "auto") == 0)
                cfg.inplace = DNNMEM_INPLACE_AUTO;
            else if (strcmp(optarg, "none") == 0)
                cfg.inplace = DNNMEM_INPLACE_NONE;
            else
                return usage_error("--inplace %s: expected auto or none", optarg);
            break;
        case OPT_OPTIMIZER: {
            static const struct {
                const char *name;
                enum dnnmem_optimizer o;
            } names[] = {{"sgd-momentum", DNNMEM_OPT_SGD_MOMENTUM}, {"sgd", DNNMEM_OPT_SGD},
                         {"adam", DNNMEM_OPT_ADAM},   {"adamw", DNNMEM_OPT_ADAMW},
                         {"rmsprop", DNNMEM_OPT_RMSPROP}, {"adagrad", DNNMEM_OPT_ADAGRAD},
                         {"none", DNNMEM_OPT_NONE}, {"adamw-hf", DNNMEM_OPT_ADAMW_HF},
                         {"adafactor", DNNMEM_OPT_ADAFACTOR}, {"adam8bit", DNNMEM_OPT_ADAM8BIT}};
            size_t k = 0;
            while (k < sizeof names / sizeof names[0] && strcmp(names[k].name, optarg) != 0)
                k++;
            if (k == sizeof names / sizeof names[0])
                return usage_error("--optimizer %s: expected sgd-momentum, sgd, adam, adamw, "
                                   "rmsprop, adagrad, adamw-hf, adafactor, adam8bit or none",
                                   optarg);
            cfg.optimizer = names[k].o;
            break;
        }
        case OPT_LOSS:
            if (strcmp(optarg, "ce") == 0)
                cfg.loss = DNNMEM_LOSS_CE;
            else if (strcmp(optarg, "mse") == 0)
                cfg.loss = DNNMEM_LOSS_MSE;
            else if (strcmp(optarg, "sum") == 0)
                cfg.loss = DNNMEM_LOSS_SUM;
            else if (strcmp(optarg, "ce-all") == 0) {
                cfg.loss = DNNMEM_LOSS_CE;
                cfg.loss_all_outputs = true;
            } else if (strcmp(optarg, "mse-all") == 0) {
                cfg.loss = DNNMEM_LOSS_MSE;
                cfg.loss_all_outputs = true;
            }
            else
                return usage_error("--loss %s: expected ce, mse, sum, ce-all or mse-all", optarg);
            break;
        case OPT_ITERS:
            if (parse_count(optarg, &v) || v > 1000)
                return usage_error("--iterations %s: expected 1..1000", optarg);
            cfg.iterations = (int)v;
            break;
        case OPT_ACCUM:
            if (parse_count(optarg, &v) || v > 1000)
                return usage_error("--grad-accum %s: expected 1..1000", optarg);
            cfg.grad_accum = (int)v;
            break;
        case 'b': {
            int rc = parse_list("--batch-size", optarg, cl->batches, &cl->n_batches);
            if (rc)
                return rc;
            cfg.batch_size = cl->batches[0];
            break;
        }
        case 's': {
            int rc = parse_list("--seq-len", optarg, cl->seqs, &cl->n_seqs);
            if (rc)
                return rc;
            cfg.seq_len = cl->seqs[0];
            break;
        }
        case OPT_GPU: {
            const struct dnnmem_gpu *gpu = dnnmem_gpu_find(optarg);
            if (!gpu)
                return usage_error("--gpu %s: unknown GPU (dnnmem gpus lists them)", optarg);
            cfg.capacity_bytes = gpu->total_bytes - gpu->reserved_bytes;
            if (!cfg.compute_capability && gpu->compute_capability)
                cfg.compute_capability = gpu->compute_capability;
            cl->gpu = gpu->name;
            snprintf(cl->device_label, sizeof cl->device_label, "--gpu %s, as CUDA reports it",
                     gpu->name);
            cfg.device_label = cl->device_label;
            break;
        }
        case OPT_MEMORY:
            if (parse_size(optarg, &cfg.capacity_bytes) || cfg.capacity_bytes == 0)
                return usage_error("--memory %s: expected a size such as 24GiB or 80GB", optarg);
            cl->memory = optarg;
            snprintf(cl->device_label, sizeof cl->device_label, "--memory %s", optarg);
            cfg.device_label = cl->device_label;
            break;
        case OPT_QUANT:
            if (strcmp(optarg, "none") == 0)
                cfg.quant = DNNMEM_QUANT_NONE;
            else if (strcmp(optarg, "nf4") == 0)
                cfg.quant = DNNMEM_QUANT_NF4;
            else if (strcmp(optarg, "nf4-single") == 0)
                cfg.quant = DNNMEM_QUANT_NF4_SINGLE;
            else if (strcmp(optarg, "fp4") == 0)
                cfg.quant = DNNMEM_QUANT_FP4;
            else if (strcmp(optarg, "int8") == 0)
                cfg.quant = DNNMEM_QUANT_INT8;
            else
                return usage_error("--quant %s: expected none, nf4, nf4-single, fp4 or int8 "
                                   "(a config's own quantization_config needs no --quant)",
                                   optarg);
            break;
        case OPT_KBIT:
        case OPT_KBIT_NO_GC:
            cfg.kbit_prep = c == OPT_KBIT ? DNNMEM_KBIT_PREP : DNNMEM_KBIT_PREP_NO_GC;
            break;
        case OPT_LORA_R:
            if (parse_count(optarg, &v) || v > 1048576)
                return usage_error("--lora-r %s: expected a rank in 1..1048576", optarg);
            cfg.lora.r = v;
            break;
        case OPT_LORA_ALPHA:
        case OPT_LORA_DROPOUT: {
            char *end;
            double d = strtod(optarg, &end);
            bool alpha = c == OPT_LORA_ALPHA;
            if (end == optarg || *end || !(alpha ? d > 0 && d < 1e9 : d >= 0 && d < 1))
                return usage_error(alpha ? "--lora-alpha %s: expected a positive number"
                                         : "--lora-dropout %s: expected a probability in [0, 1)",
                                   optarg);
            if (alpha)
                cfg.lora.alpha = d;
            else
                cfg.lora.dropout = d;
            break;
        }
        case OPT_LORA_TARGETS: {
            if (strlen(optarg) >= sizeof cl->lora_buf)
                return usage_error("--lora-targets: list too long");
            strcpy(cl->lora_buf, optarg);
            size_t n = 0;
            for (char *save = NULL, *tok = strtok_r(cl->lora_buf, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                if (n == sizeof cl->lora_targets / sizeof cl->lora_targets[0])
                    return usage_error("--lora-targets: more than 32 modules");
                cl->lora_targets[n++] = tok;
            }
            if (!n)
                return usage_error("--lora-targets %s: expected module names, e.g. q_proj,v_proj",
                                   optarg);
            cfg.lora.targets = cl->lora_targets;
            cfg.lora.n_targets = n;
            break;
        }
        case OPT_HEADROOM: {
            char *end;
            double h = strtod(optarg, &end);
            if (end != optarg && *end == '%' && end[1] == '\0')
                h /= 100;
            else if (end == optarg || *end)
                h = -1;
            if (!(h >= 0 && h < 1))
                return usage_error("--headroom %s: expected a fraction or a percentage, e.g. 5%%",
                                   optarg);
            cfg.headroom = h;
            break;
        }
        case OPT_CSV: cl->csv = true; break;
        case OPT_REPORT:
            cl->report = optarg;
            cfg.timeline = true;
            break;
        case OPT_TIMELINE:
            cl->timeline = optarg;
            cfg.timeline = true;
            break;
        case OPT_LIMIT:
            if (parse_count(optarg, &cl->limit))
                return usage_error("--limit %s: expected a positive integer", optarg);
            break;
        case OPT_DIMNAME: cl->search_dim = optarg; break;
        case OPT_DIM: {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || (strcmp(eq + 1, "0") != 0 && parse_count(eq + 1, &v)))
                return usage_error("--dim %s: expected NAME=N with N a non-negative integer", optarg);
            if (strcmp(eq + 1, "0") == 0)
                v = 0;
            if (n_dims == sizeof cl->dims / sizeof cl->dims[0])
                return usage_error("--dim %s: too many --dim options", optarg);
            *eq = '\0';
            dims[n_dims++] = (struct dnnmem_dim_binding){optarg, v};
            break;
        }
        case OPT_INPUT_SHAPE: {
            char *eq = strchr(optarg, '=');
            size_t k = cl->n_inputs, r = 0;
            if (k == sizeof cl->inputs / sizeof cl->inputs[0])
                return usage_error("--input-shape %s: too many --input-shape options", optarg);
            if (!eq || eq == optarg || !eq[1])
                return usage_error("--input-shape %s: expected NAME=D1,D2,... with positive dims",
                                   optarg);
            *eq = '\0';
            char *save = NULL;
            for (char *tok = strtok_r(eq + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (r == DNNMEM_MAX_DIMS || parse_count(tok, &cl->input_dims[k][r]))
                    return usage_error("--input-shape %s: expected 1 to %d positive dims, e.g. "
                                       "data=1,3,224,224",
                                       optarg, DNNMEM_MAX_DIMS);
                r++;
            }
            if (!r)
                return usage_error("--input-shape %s: no dims given", optarg);
            cl->inputs[k] = (struct dnnmem_input_shape){optarg, r, cl->input_dims[k]};
            cl->n_inputs++;
            break;
        }
        case OPT_JSON: json = true; break;
        case OPT_CONTEXT:
            if (parse_size(optarg, &cfg.cuda_context_bytes))
                return usage_error("--cuda-context %s: expected a size such as 300MiB", optarg);
            break;
        case OPT_PRECISION:
            cfg.precision_set = true;
            if (strcmp(optarg, "fp32") == 0)
                cfg.precision = DNNMEM_PRECISION_FP32;
            else if (strcmp(optarg, "fp16") == 0)
                cfg.precision = DNNMEM_PRECISION_FP16;
            else if (strcmp(optarg, "bf16") == 0)
                cfg.precision = DNNMEM_PRECISION_BF16;
            else if (strcmp(optarg, "amp-fp16") == 0)
                cfg.precision = DNNMEM_PRECISION_AMP_FP16;
            else if (strcmp(optarg, "amp-bf16") == 0)
                cfg.precision = DNNMEM_PRECISION_AMP_BF16;
            else
                return usage_error("--precision %s: expected fp32, fp16, bf16, amp-fp16 or amp-bf16",
                                   optarg);
            break;
        case OPT_ATTN:
            if (strcmp(optarg, "eager") == 0)
                cfg.attn = DNNMEM_ATTN_EAGER;
            else if (strcmp(optarg, "sdpa") == 0)
                cfg.attn = DNNMEM_ATTN_SDPA;
            else if (strcmp(optarg, "flash") == 0 || strcmp(optarg, "flash_attention_2") == 0)
                cfg.attn = DNNMEM_ATTN_FLASH;
            else if (strcmp(optarg, "auto") == 0)
                cfg.attn = DNNMEM_ATTN_AUTO;
            else
                return usage_error("--attn %s: expected eager, sdpa, flash or auto", optarg);
            break;
        case OPT_SDPA_BACKEND:
            if (strcmp(optarg, "auto") == 0)
                cfg.sdpa_backend = DNNMEM_SDPA_AUTO;
            else if (strcmp(optarg, "flash") == 0)
                cfg.sdpa_backend = DNNMEM_SDPA_FLASH;
            else if (strcmp(optarg, "efficient") == 0)
                cfg.sdpa_backend = DNNMEM_SDPA_EFFICIENT;
            else if (strcmp(optarg, "cudnn") == 0)
                cfg.sdpa_backend = DNNMEM_SDPA_CUDNN;
            else if (strcmp(optarg, "math") == 0)
                cfg.sdpa_backend = DNNMEM_SDPA_MATH;
            else
                return usage_error("--sdpa-backend %s: expected auto, flash, efficient, cudnn or math",
                                   optarg);
            break;
        case OPT_TRANSFORMERS: {
            int major, minor;
            char tail;
            if (sscanf(optarg, "%d.%d%c", &major, &minor, &tail) != 2 || major < 4 || major > 9 ||
                minor < 0 || minor > 99)
                return usage_error("--transformers %s: expected a release such as 4.51 or 5.17",
                                   optarg);
            cfg.transformers_version = major * 100 + minor;
            break;
        }
        case OPT_CALIB: {
            int rc = read_calibration(optarg, &cfg);
            if (rc)
                return rc;
            break;
        }
        case OPT_THREADS:
            if (parse_count(optarg, &v) || v > 4096)
                return usage_error("--cpu-threads %s: expected a positive integer", optarg);
            cfg.cpu_threads = (int)v;
            break;
        case OPT_CKPT:
            if (n_ckpt == sizeof cl->ckpt / sizeof cl->ckpt[0])
                return usage_error("--checkpoint %s: too many --checkpoint options", optarg);
            ckpt[n_ckpt++] = optarg;
            break;
        case OPT_FREEZE:
            if (n_freeze == sizeof cl->freeze / sizeof cl->freeze[0])
                return usage_error("--freeze %s: too many --freeze options", optarg);
            freeze[n_freeze++] = optarg;
            break;
        case OPT_CUDA:
        case OPT_CC: {
            int major, minor;
            char tail;
            if (sscanf(optarg, "%d.%d%c", &major, &minor, &tail) != 2 || major < 1 || major > 99 ||
                minor < 0 || minor > 9)
                return usage_error("%s %s: expected MAJOR.MINOR, e.g. %s",
                                   c == OPT_CUDA ? "--cuda" : "--compute-capability", optarg,
                                   c == OPT_CUDA ? "12.1" : "8.0");
            if (c == OPT_CUDA)
                cfg.cuda_version = major * 10 + minor;
            else
                cfg.compute_capability = major * 10 + minor;
            break;
        }
        case OPT_CUBLAS:
            if (parse_size(optarg, &cfg.cublas_workspace_bytes))
                return usage_error("--cublas-workspace %s: expected a size such as 8MiB", optarg);
            break;
        case OPT_CONVWS:
            if (parse_size(optarg, &cfg.conv_workspace_bytes))
                return usage_error("--conv-workspace %s: expected a size such as 64MiB", optarg);
            break;
        case OPT_ROUND:
            if (parse_size(optarg, &cfg.alloc_round_bytes) || cfg.alloc_round_bytes == 0)
                return usage_error("--alloc-round %s: expected a positive size such as 512", optarg);
            break;
        case OPT_TOP:
            if (parse_count(optarg, &v) || v > 100000)
                return usage_error("--top %s: expected a positive integer", optarg);
            cfg.n_top_tensors = (size_t)v;
            break;
        case OPT_TF_GROWTH:
            cfg.tf_allow_growth = true;
            fw_flag[DNNMEM_FW_TENSORFLOW] = "--tf-allow-growth";
            break;
        case OPT_TF_LIMIT:
        case OPT_TF_MINSYS: {
            const char *flag = c == OPT_TF_LIMIT ? "--tf-memory-limit" : "--tf-min-system-memory";
            int64_t *dst = c == OPT_TF_LIMIT ? &cfg.tf_memory_limit_bytes
                                             : &cfg.tf_min_system_memory_bytes;
            if (parse_size(optarg, dst) || (c == OPT_TF_LIMIT && *dst == 0))
                return usage_error("%s %s: expected a size such as 20GiB", flag, optarg);
            fw_flag[DNNMEM_FW_TENSORFLOW] = flag;
            break;
        }
        case OPT_MX_POOL:
            if (strcasecmp(optarg, "naive") == 0)
                cfg.mxnet_pool = DNNMEM_MXNET_POOL_NAIVE;
            else if (strcasecmp(optarg, "round") == 0)
                cfg.mxnet_pool = DNNMEM_MXNET_POOL_ROUND;
            else
                return usage_error("--mxnet-pool %s: expected naive or round", optarg);
            fw_flag[DNNMEM_FW_MXNET] = "--mxnet-pool";
            break;
        case OPT_MX_EXEC:
            if (strcasecmp(optarg, "planned") == 0)
                cfg.mxnet_executor = DNNMEM_MXNET_EXEC_PLANNED;
            else if (strcasecmp(optarg, "naive") == 0)
                cfg.mxnet_executor = DNNMEM_MXNET_EXEC_NAIVE;
            else
                return usage_error("--mxnet-executor %s: expected planned or naive", optarg);
            fw_flag[DNNMEM_FW_MXNET] = "--mxnet-executor";
            break;
        case OPT_MX_PAGE:
            if (parse_size(optarg, &cfg.mxnet_page_size) || cfg.mxnet_page_size < 32)
                return usage_error("--mxnet-page-size %s: expected a size of at least 32 B", optarg);
            fw_flag[DNNMEM_FW_MXNET] = "--mxnet-page-size";
            break;
        case OPT_MX_CUTOFF:
            if (parse_count(optarg, &v) || v < 20 || v > 34)
                return usage_error("--mxnet-round-cutoff %s: expected 20..34 (log2 bytes)", optarg);
            cfg.mxnet_round_cutoff = (int)v;
            fw_flag[DNNMEM_FW_MXNET] = "--mxnet-round-cutoff";
            break;
        case OPT_MX_RESERVE: {
            char *end;
            errno = 0;
            long r = strtol(optarg, &end, 10);
            if (errno || end == optarg || (*end && strcmp(end, "%") != 0) || r < 0 || r > 100)
                return usage_error("--mxnet-reserve %s: expected a percentage 0..100", optarg);
            cfg.mxnet_reserve_percent = (int)r;
            fw_flag[DNNMEM_FW_MXNET] = "--mxnet-reserve";
            break;
        }
        case OPT_MX_SUMCAP: {
            char *end;
            errno = 0;
            long r = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || r < 1 || r > 1000000)
                return usage_error("--mxnet-grad-sum-cap %s: expected 1..1000000", optarg);
            cfg.mxnet_grad_sum_cap = (int)r;
            fw_flag[DNNMEM_FW_MXNET] = "--mxnet-grad-sum-cap";
            break;
        }
        case OPT_MX_MIRROR:
            cfg.mxnet_mirror = true;
            fw_flag[DNNMEM_FW_MXNET] = "--mxnet-mirror";
            break;
        case OPT_JAX_PREALLOC:
            if (strcmp(optarg, "true") == 0 || strcmp(optarg, "1") == 0)
                cfg.jax_preallocate = true;
            else if (strcmp(optarg, "false") == 0 || strcmp(optarg, "0") == 0)
                cfg.jax_preallocate = false;
            else
                return usage_error("--jax-preallocate %s: expected true or false", optarg);
            fw_flag[DNNMEM_FW_JAX] = "--jax-preallocate";
            break;
        case OPT_JAX_FRACTION: {
            char *end;
            double fr = strtod(optarg, &end);
            if (end == optarg || *end || !(fr > 0 && fr <= 1))
                return usage_error("--jax-mem-fraction %s: expected a fraction in (0, 1], e.g. 0.75",
                                   optarg);
            cfg.jax_mem_fraction = fr;
            fw_flag[DNNMEM_FW_JAX] = "--jax-mem-fraction";
            break;
        }
        case OPT_JAX_EXEC:
            if (strcasecmp(optarg, "jit") == 0)
                cfg.jax_execution = DNNMEM_JAX_JIT;
            else if (strcasecmp(optarg, "eager") == 0)
                cfg.jax_execution = DNNMEM_JAX_EAGER;
            else
                return usage_error("--jax-execution %s: expected jit or eager", optarg);
            fw_flag[DNNMEM_FW_JAX] = "--jax-execution";
            break;
        case OPT_TF_EXEC:
            if (strcasecmp(optarg, "graph") == 0)
                cfg.tf_execution = DNNMEM_TF_GRAPH;
            else if (strcasecmp(optarg, "eager") == 0)
                cfg.tf_execution = DNNMEM_TF_EAGER;
            else
                return usage_error("--tf-execution %s: expected graph or eager", optarg);
            fw_flag[DNNMEM_FW_TENSORFLOW] = "--tf-execution";
            break;
        case OPT_JAX_DONATE:
            if (strcmp(optarg, "true") == 0 || strcmp(optarg, "1") == 0)
                cfg.jax_donate = true;
            else if (strcmp(optarg, "false") == 0 || strcmp(optarg, "0") == 0)
                cfg.jax_donate = false;
            else
                return usage_error("--jax-donate %s: expected true or false", optarg);
            fw_flag[DNNMEM_FW_JAX] = "--jax-donate";
            break;
        case 'h': fputs(usage_text, stdout); return EXIT_OK;
        case ':': return usage_error("%s: this option needs a value", argv[optind - 1]);
        default: return usage_error("%s: unknown option", argv[optind - 1]);
        }
    }
    for (int k = 1; k < 4; k++)
        if (fw_flag[k] && cfg.framework != (enum dnnmem_framework)k)
            return usage_error("%s: applies to --framework %s", fw_flag[k],
                               dnnmem_framework_name((enum dnnmem_framework)k));
    if (optind + 1 != argc)
        return usage_error("%s: %s", argv[0], optind >= argc ? "no MODEL given" : "exactly one MODEL expected");
    cfg.dims = dims;
    cfg.n_dims = n_dims;
    cfg.input_shapes = cl->inputs;
    cfg.n_input_shapes = cl->n_inputs;
    cfg.freeze = freeze;
    cfg.n_freeze = n_freeze;
    cfg.checkpoint = ckpt;
    cfg.n_checkpoint = n_ckpt;
    cl->cfg = cfg;
    cl->n_dims = n_dims;
    cl->json = json;
    cl->model = argv[optind];
    return -1;
}

static int fail(enum dnnmem_status s, const struct dnnmem_error *err)
{
    fprintf(stderr, "dnnmem: %s\n", err->message);
    return exit_code(s);
}

static int write_done(int wr)
{
    if (wr != 0 || fflush(stdout) != 0) {
        fprintf(stderr, "dnnmem: cannot write the result\n");
        return EXIT_INTERNAL;
    }
    return EXIT_OK;
}

static const char *mib(uint64_t bytes, char buf[32])
{
    snprintf(buf, 32, "%.1f", (double)bytes / 1048576.0);
    return buf;
}

/* One row per value of the swept flags: text, CSV or a JSON array. */
static int sweep(const struct cli *cl, const dnnmem_model *m)
{
    size_t nb = cl->n_batches ? cl->n_batches : 1, ns = cl->n_seqs ? cl->n_seqs : 1;
    bool any_bad = false;
    if (cl->csv)
        printf("batch_size,seq_len,total_bytes,peak_allocated_bytes,peak_reserved_bytes,verdict\n");
    else if (cl->json)
        printf("[");
    else
        printf("%10s %8s %14s %14s %14s  %s\n", "batch", "seq", "total MiB", "allocated MiB",
               "reserved MiB", "verdict");
    for (size_t i = 0; i < nb; i++)
        for (size_t j = 0; j < ns; j++) {
            struct dnnmem_config cfg = cl->cfg;
            if (cl->n_batches)
                cfg.batch_size = cl->batches[i];
            if (cl->n_seqs)
                cfg.seq_len = cl->seqs[j];
            struct dnnmem_result *r;
            struct dnnmem_error err;
            enum dnnmem_status s = dnnmem_estimate(m, &cfg, &r, &err);
            if (s != DNNMEM_OK) {
                if (cl->json)
                    printf("]\n");
                return fail(s, &err);
            }
            any_bad |= r->verdict == DNNMEM_VERDICT_DOES_NOT_FIT;
            char a[32], b[32], c[32];
            if (cl->csv) {
                printf("%lld,%lld,%llu,%llu,%llu,%s\n", (long long)cfg.batch_size,
                       (long long)cfg.seq_len, (unsigned long long)r->total_bytes,
                       (unsigned long long)r->peak_allocated, (unsigned long long)r->peak_reserved,
                       r->verdict ? dnnmem_verdict_name(r->verdict) : "");
            } else if (cl->json) {
                printf("%s\n", i + j ? "," : "");
                dnnmem_report_json(r, m, stdout);
            } else {
                printf("%10lld %8lld %14s %14s %14s  %s\n", (long long)cfg.batch_size,
                       (long long)cfg.seq_len, mib(r->total_bytes, a), mib(r->peak_allocated, b),
                       mib(r->peak_reserved, c), r->verdict ? dnnmem_verdict_name(r->verdict) : "");
            }
            dnnmem_result_free(r);
        }
    if (cl->json)
        printf("]\n");
    int rc = write_done(0);
    return rc ? rc : any_bad ? EXIT_DOES_NOT_FIT : EXIT_OK;
}

static int cmd_estimate(int argc, char **argv)
{
    struct cli cl;
    memset(&cl, 0, sizeof cl);
    int rc = parse_cli(argc, argv, &cl);
    if (rc >= 0)
        return rc;
    struct dnnmem_error err;
    dnnmem_model *m = NULL;
    enum dnnmem_status s = dnnmem_model_load(cl.model, &m, &err);
    if (s != DNNMEM_OK)
        return fail(s, &err);
    if (cl.n_batches > 1 || cl.n_seqs > 1 || cl.csv) {
        rc = sweep(&cl, m);
        dnnmem_model_free(m);
        return rc;
    }
    struct dnnmem_result *r = NULL;
    s = dnnmem_estimate(m, &cl.cfg, &r, &err);
    if (s != DNNMEM_OK) {
        dnnmem_model_free(m);
        return fail(s, &err);
    }
    if (cl.gpu && !cl.json)
        printf("device       %s\n", cl.gpu);
    const char *files[2] = {cl.report, cl.timeline};
    for (int k = 0; k < 2; k++) {
        if (!files[k])
            continue;
        FILE *out = fopen(files[k], "w");
        int bad = !out || (k == 0 ? dnnmem_report_html(r, m, out) : dnnmem_report_timeline_csv(r, out));
        if (out && fclose(out) != 0)
            bad = 1;
        if (bad) {
            fprintf(stderr, "dnnmem: %s %s: cannot write the file\n", k ? "--timeline" : "--report",
                    files[k]);
            dnnmem_result_free(r);
            dnnmem_model_free(m);
            return EXIT_INTERNAL;
        }
    }
    int wr = cl.json ? dnnmem_report_json(r, m, stdout) : dnnmem_report_text(r, m, stdout);
    bool does_not_fit = r->verdict == DNNMEM_VERDICT_DOES_NOT_FIT;
    if (does_not_fit && !cl.json) {
        struct dnnmem_advice *adv = NULL;
        size_t n = 0;
        s = dnnmem_advise(m, &cl.cfg, &adv, &n, &err);
        if (s != DNNMEM_OK) {
            dnnmem_result_free(r);
            dnnmem_model_free(m);
            return fail(s, &err);
        }
        printf("what would change it\n");
        for (size_t k = 0; k < n; k++) {
            char b1[32];
            printf("  %-44s %10s MiB  %s\n", adv[k].change, mib(adv[k].total_bytes, b1),
                   dnnmem_verdict_name(adv[k].verdict));
        }
        dnnmem_advice_free(adv, n);
    }
    dnnmem_result_free(r);
    dnnmem_model_free(m);
    rc = write_done(wr);
    return rc ? rc : does_not_fit ? EXIT_DOES_NOT_FIT : EXIT_OK;
}

/* max-batch / max-seq-len: the largest value that fits, with the estimates
 * at it and one above. */
static int cmd_max(int argc, char **argv, bool seq)
{
    struct cli cl;
    memset(&cl, 0, sizeof cl);
    int rc = parse_cli(argc, argv, &cl);
    if (rc >= 0)
        return rc;
    if (cl.cfg.capacity_bytes <= 0)
        return usage_error("%s: give the device with --gpu NAME or --memory SIZE", argv[0]);
    struct dnnmem_error err;
    dnnmem_model *m = NULL;
    enum dnnmem_status s = dnnmem_model_load(cl.model, &m, &err);
    if (s != DNNMEM_OK)
        return fail(s, &err);
    const char *dim = cl.search_dim;
    if (seq && !dim) { /* the model's sequence dim */
        struct dnnmem_model_info info;
        dnnmem_model_get_info(m, &info);
        for (size_t k = 0; k < info.n_symbols && !dim; k++) {
            const char *name = dnnmem_model_symbol(m, k);
            if (strstr(name, "seq") && !strstr(name, "past") && !strstr(name, "total"))
                dim = name;
        }
        if (!dim) {
            dnnmem_model_free(m);
            return usage_error("%s: %s has no sequence dim; name one with --dim-name", argv[0],
                               cl.model);
        }
    }
    int64_t limit = cl.limit ? cl.limit : (seq ? 1 << 20 : 1 << 16);
    int64_t value = 0;
    struct dnnmem_result *at = NULL, *next = NULL;
    s = dnnmem_max_dim(m, &cl.cfg, dim, limit, &value, &at, &next, &err);
    if (s != DNNMEM_OK) {
        dnnmem_model_free(m);
        return fail(s, &err);
    }
    const char *what = dim ? dim : "batch size";
    char b1[32], b2[32];
    if (cl.json) {
        printf("{\"schema\": \"dnnmem.max/1\", \"dim\": \"%s\", \"value\": %lld, \"limit\": %lld, "
               "\"capacity_bytes\": %lld, \"total_bytes_at_value\": %llu, \"total_bytes_at_next\": %llu}\n",
               what, (long long)value, (long long)limit, (long long)cl.cfg.capacity_bytes,
               at ? (unsigned long long)at->total_bytes : 0ULL,
               next ? (unsigned long long)next->total_bytes : 0ULL);
    } else {
        printf("largest %s that fits %s%s: %lld%s\n", what, cl.gpu ? cl.gpu : cl.memory,
               cl.gpu ? "" : "", (long long)value, value == limit ? " (the search limit)" : "");
        if (at)
            printf("  at %lld: %s MiB (allocated %s MiB), %s\n", (long long)value,
                   mib(at->total_bytes, b1), mib(at->peak_allocated, b2),
                   dnnmem_verdict_name(at->verdict));
        if (next)
            printf("  at %lld: %s MiB (allocated %s MiB), %s\n", (long long)value + 1,
                   mib(next->total_bytes, b1), mib(next->peak_allocated, b2),
                   dnnmem_verdict_name(next->verdict));
    }
    dnnmem_result_free(at);
    dnnmem_result_free(next);
    dnnmem_model_free(m);
    rc = write_done(0);
    return rc ? rc : value == 0 ? EXIT_DOES_NOT_FIT : EXIT_OK;
}

/* compare: two models under the same options, or one model under two sets
 * of options (--with "OPTIONS" are added after the others for B). */
static int cmd_compare(int argc, char **argv)
{
    /* split out --with "..." and the second model */
    char *with = NULL;
    char *args_a[256], *args_b[512];
    int na = 0, nb = 0;
    const char *models[2] = {NULL, NULL};
    int n_models = 0;
    for (int k = 0; k < argc && na < 255; k++) {
        if (strcmp(argv[k], "--with") == 0) {
            if (k + 1 >= argc)
                return usage_error("%s", "--with: this option needs a value");
            with = argv[++k];
            continue;
        }
        bool takes_value = k > 0 && argv[k][0] != '-' && argv[k - 1][0] == '-' &&
                           argv[k - 1][1] == '-' && !strchr(argv[k - 1], '=') &&
                           strcmp(argv[k - 1], "--json") != 0 && strcmp(argv[k - 1], "--csv") != 0;
        bool short_value = k > 0 && (strcmp(argv[k - 1], "-b") == 0 || strcmp(argv[k - 1], "-s") == 0);
        if (k > 0 && argv[k][0] != '-' && !takes_value && !short_value) {
            if (n_models == 2)
                return usage_error("%s", "compare: at most two models");
            models[n_models++] = argv[k];
            continue;
        }
        args_a[na++] = argv[k];
    }
    if (n_models == 0 || (n_models == 1 && !with) || (n_models == 2 && with))
        return usage_error("%s", "compare: give two models, or one model and --with \"OPTIONS\"");
    for (int k = 0; k < na; k++)
        args_b[nb++] = args_a[k];
    char withbuf[1024] = "";
    if (with) {
        if (strlen(with) >= sizeof withbuf)
            return usage_error("%s", "--with: too long");
        strcpy(withbuf, with);
        char *save = NULL;
        for (char *tok = strtok_r(withbuf, " ", &save); tok && nb < 500; tok = strtok_r(NULL, " ", &save))
            args_b[nb++] = tok;
    }
    struct dnnmem_result *res[2] = {NULL, NULL};
    int rc = EXIT_OK;
    for (int side = 0; side < 2 && rc == EXIT_OK; side++) {
        char **args = side ? args_b : args_a;
        int n = side ? nb : na;
        args[n] = (char *)(side && n_models == 2 ? models[1] : models[0]);
        args[n + 1] = NULL;
        struct cli cl;
        memset(&cl, 0, sizeof cl);
        rc = parse_cli(n + 1, args, &cl);
        if (rc >= 0)
            break;
        rc = EXIT_OK;
        struct dnnmem_error err;
        dnnmem_model *m = NULL;
        enum dnnmem_status s = dnnmem_model_load(cl.model, &m, &err);
        if (s == DNNMEM_OK)
            s = dnnmem_estimate(m, &cl.cfg, &res[side], &err);
        dnnmem_model_free(m);
        if (s != DNNMEM_OK)
            rc = fail(s, &err);
    }
    if (rc == EXIT_OK) {
        char la[1100], lb[1100];
        snprintf(la, sizeof la, "%s", models[0]);
        snprintf(lb, sizeof lb, "%s%s%s", n_models == 2 ? models[1] : models[0], with ? " with " : "",
                 with ? with : "");
        rc = write_done(dnnmem_report_compare(res[0], la, res[1], lb, stdout));
    }
    dnnmem_result_free(res[0]);
    dnnmem_result_free(res[1]);
    return rc;
}

/* The GPU catalogue. */
static int cmd_gpus(int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return usage_error("%s", "gpus: no arguments expected");
    printf("%-22s %-30s %14s %8s  %s\n", "name", "device", "total MiB", "cc", "source");
    for (size_t k = 0; k < dnnmem_gpu_count(); k++) {
        const struct dnnmem_gpu *g = dnnmem_gpu_at(k);
        char b[32];
        printf("%-22s %-30s %14s %5d.%d  %s\n", g->name, g->device_name, mib((uint64_t)g->total_bytes, b),
               g->compute_capability / 10, g->compute_capability % 10, g->source);
    }
    return write_done(0);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("%s", "no command given");
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("dnnmem %s\n", DNNMEM_VERSION);
        return EXIT_OK;
    }
    if (strcmp(cmd, "estimate") == 0)
        return cmd_estimate(argc - 1, argv + 1);
    if (strcmp(cmd, "max-batch") == 0)
        return cmd_max(argc - 1, argv + 1, false);
    if (strcmp(cmd, "max-seq-len") == 0)
        return cmd_max(argc - 1, argv + 1, true);
    if (strcmp(cmd, "gpus") == 0)
        return cmd_gpus(argc - 1, argv + 1);
    if (strcmp(cmd, "compare") == 0)
        return cmd_compare(argc - 1, argv + 1);
    return usage_error("%s: unknown command (try 'estimate', 'max-batch', 'max-seq-len', 'gpus')",
                       cmd);
}
