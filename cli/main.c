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
    "usage: dnnmem estimate MODEL [options]\n"
    "       dnnmem --help | --version\n"
    "\n"
    "Estimate the peak GPU memory of running MODEL (an ONNX file) with PyTorch\n"
    "eager on a CUDA device, before it runs. Weights are never read: an ONNX\n"
    "file whose weights live in external data works without them.\n"
    "\n"
    "Run:\n"
    "  --mode infer|train     forward under torch.no_grad(), model.eval() (default), or\n"
    "                         training steps: zero_grad, forward, loss, backward, step\n"
    "  --framework pytorch@V  PyTorch version: 1.13 or 2.x (default 2.0); decides\n"
    "                         zero_grad(set_to_none) and the optimizer implementation\n"
    "  --device cuda|cpu      CUDA device (default) or PyTorch's CPU kernels and host memory\n"
    "  --cpu-threads N        torch.get_num_threads() with --device cpu (default: several);\n"
    "                         with 1, small-batch 1x1 convolutions use THNN, not oneDNN\n"
    "  --inplace auto|none    ReLU-like ops in place where PyTorch allows (default auto,\n"
    "                         as torchvision's inplace=True), or never\n"
    "\n"
    "Training (--mode train):\n"
    "  --optimizer NAME       sgd-momentum (default), sgd, adam, adamw, rmsprop, adagrad,\n"
    "                         none (forward and backward only)\n"
    "  --loss L               ce: cross-entropy of the first output against class ids\n"
    "                         (default); mse; sum: every output's .sum() added; ce-all,\n"
    "                         mse-all: one term per output (e.g. auxiliary heads)\n"
    "  --iterations N         training steps simulated (default 2: the steady state)\n"
    "  --grad-accum N         micro-batches per optimizer step (default 1)\n"
    "  --freeze PATTERN       parameters whose name matches the glob get no grad and no\n"
    "                         optimizer state (repeatable), e.g. --freeze 'layer[12].*'\n"
    "  --precision P          fp32 (default, as the model), fp16 or bf16 (model.half()),\n"
    "                         amp-fp16 or amp-bf16 (torch.autocast with fp32 weights; CUDA)\n"
    "  --checkpoint SPEC      activation checkpointing (torch.utils.checkpoint), repeatable:\n"
    "                         a glob on node-name prefixes, one segment per matching\n"
    "                         prefix ('/layers.*': per layer; '/layer*': per ResNet stage;\n"
    "                         '/layers.*:2': every 2 layers),\n"
    "                         or A..B: one segment from the first node matching glob A to\n"
    "                         the last matching glob B\n"
    "\n"
    "Dims (symbolic dims of the model's inputs):\n"
    "  -b, --batch-size N     bind every batch-like dim (batch, batch_size, N, ...); default 1\n"
    "  -s, --seq-len N        bind every sequence-like dim (seq, seq_len, sequence_length, ...)\n"
    "  --dim NAME=N           bind the dim NAME, N >= 0 (repeatable; wins over the two above)\n"
    "\n"
    "Runtime constants (each default is printed with the result):\n"
    "  --cuda X.Y             CUDA version PyTorch was built with (default 12.1); before\n"
    "                         11.7 kernels load eagerly and the context is much larger\n"
    "  --compute-capability X.Y  the GPU's (default 8.0, A100; 9.0 is H100/H200)\n"
    "  --cuda-context SIZE    CUDA context (default by version: 426 MiB for PyTorch 2.x,\n"
    "                         273.75 MiB for 1.13, 1343 MiB before CUDA 11.7)\n"
    "  --cublas-workspace SIZE  per cuBLAS handle (default 8.125 MiB; 32 MiB on 9.x+;\n"
    "                         4 MiB in 1.13)\n"
    "  --conv-workspace SIZE  cuDNN workspace around each convolution (default 0)\n"
    "  --alloc-round SIZE     replace the caching allocator by plain rounding to SIZE\n"
    "  --calibration FILE     a JSON object of measured constants: cuda_context_bytes,\n"
    "                         cublas_workspace_bytes, conv_workspace_bytes, cuda (\"12.1\"),\n"
    "                         compute_capability (\"9.0\"); later options win\n"
    "  SIZE takes B, KiB, MiB, GiB (IEC) or kB, MB, GB (SI) suffixes.\n"
    "\n"
    "Output:\n"
    "  --json                 one JSON object with integer bytes (schema dnnmem.estimate/1)\n"
    "  --top N                list the N largest tensors live at the peak (default 10)\n"
    "  -h, --help             this text\n"
    "  -V, --version          the version\n"
    "\n"
    "Exit codes: 0 ok, 2 usage error (bad flag, unbound dim), 3 model error\n"
    "(unreadable, corrupt or invalid file, inconsistent shapes), 4 unsupported op\n"
    "or feature, 5 internal error.\n"
    "\n"
    "Examples:\n"
    "  dnnmem estimate resnet50.onnx --batch-size 64\n"
    "  dnnmem estimate resnet50.onnx --batch-size 64 --mode train --optimizer adam\n"
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

static int cmd_estimate(int argc, char **argv)
{
    enum { OPT_MODE = 256, OPT_DIM, OPT_JSON, OPT_CONTEXT, OPT_ROUND, OPT_TOP, OPT_FRAMEWORK,
           OPT_DEVICE, OPT_INPLACE, OPT_OPTIMIZER, OPT_LOSS, OPT_ITERS, OPT_ACCUM, OPT_CUDA,
           OPT_CC, OPT_CUBLAS, OPT_CONVWS, OPT_PRECISION, OPT_FREEZE, OPT_CKPT, OPT_THREADS,
           OPT_CALIB };
    static const struct option opts[] = {
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
        {"json", no_argument, NULL, OPT_JSON},
        {"cuda-context", required_argument, NULL, OPT_CONTEXT},
        {"cuda", required_argument, NULL, OPT_CUDA},
        {"precision", required_argument, NULL, OPT_PRECISION},
        {"freeze", required_argument, NULL, OPT_FREEZE},
        {"checkpoint", required_argument, NULL, OPT_CKPT},
        {"cpu-threads", required_argument, NULL, OPT_THREADS},
        {"calibration", required_argument, NULL, OPT_CALIB},
        {"compute-capability", required_argument, NULL, OPT_CC},
        {"cublas-workspace", required_argument, NULL, OPT_CUBLAS},
        {"conv-workspace", required_argument, NULL, OPT_CONVWS},
        {"alloc-round", required_argument, NULL, OPT_ROUND},
        {"top", required_argument, NULL, OPT_TOP},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    struct dnnmem_dim_binding dims[64];
    size_t n_dims = 0;
    const char *freeze[64], *ckpt[256];
    size_t n_freeze = 0, n_ckpt = 0;
    bool json = false;
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
            else
                return usage_error("--mode %s: expected infer or train", optarg);
            break;
        case OPT_FRAMEWORK: {
            int major, minor = 0;
            char tail;
            if (strcmp(optarg, "pytorch") == 0 || strcmp(optarg, "pytorch@2.x") == 0)
                cfg.torch_version = 200;
            else if ((sscanf(optarg, "pytorch@%d.%d%c", &major, &minor, &tail) == 2 ||
                      sscanf(optarg, "pytorch@%d%c", &major, &tail) == 1) &&
                     major >= 1 && major <= 9 && minor >= 0 && minor <= 99)
                cfg.torch_version = major * 100 + minor;
            else
                return usage_error("--framework %s: expected pytorch@VERSION, e.g. pytorch@1.13 "
                                   "or pytorch@2.1",
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
                         {"none", DNNMEM_OPT_NONE}};
            size_t k = 0;
            while (k < sizeof names / sizeof names[0] && strcmp(names[k].name, optarg) != 0)
                k++;
            if (k == sizeof names / sizeof names[0])
                return usage_error("--optimizer %s: expected sgd-momentum, sgd, adam, adamw, "
                                   "rmsprop, adagrad or none",
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
        case 'b':
            if (parse_count(optarg, &cfg.batch_size))
                return usage_error("--batch-size %s: expected a positive integer", optarg);
            break;
        case 's':
            if (parse_count(optarg, &cfg.seq_len))
                return usage_error("--seq-len %s: expected a positive integer", optarg);
            break;
        case OPT_DIM: {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || (strcmp(eq + 1, "0") != 0 && parse_count(eq + 1, &v)))
                return usage_error("--dim %s: expected NAME=N with N a non-negative integer", optarg);
            if (strcmp(eq + 1, "0") == 0)
                v = 0;
            if (n_dims == sizeof dims / sizeof dims[0])
                return usage_error("--dim %s: too many --dim options", optarg);
            *eq = '\0';
            dims[n_dims++] = (struct dnnmem_dim_binding){optarg, v};
            break;
        }
        case OPT_JSON: json = true; break;
        case OPT_CONTEXT:
            if (parse_size(optarg, &cfg.cuda_context_bytes))
                return usage_error("--cuda-context %s: expected a size such as 300MiB", optarg);
            break;
        case OPT_PRECISION:
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
            if (n_ckpt == sizeof ckpt / sizeof ckpt[0])
                return usage_error("--checkpoint %s: too many --checkpoint options", optarg);
            ckpt[n_ckpt++] = optarg;
            break;
        case OPT_FREEZE:
            if (n_freeze == sizeof freeze / sizeof freeze[0])
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
        case 'h': fputs(usage_text, stdout); return EXIT_OK;
        case ':': return usage_error("%s: this option needs a value", argv[optind - 1]);
        default: return usage_error("%s: unknown option", argv[optind - 1]);
        }
    }
    if (optind + 1 != argc)
        return usage_error("%s", optind >= argc ? "estimate: no MODEL given"
                                                : "estimate: exactly one MODEL expected");
    cfg.dims = dims;
    cfg.n_dims = n_dims;
    cfg.freeze = freeze;
    cfg.n_freeze = n_freeze;
    cfg.checkpoint = ckpt;
    cfg.n_checkpoint = n_ckpt;

    const char *path = argv[optind];
    struct dnnmem_error err;
    dnnmem_model *m = NULL;
    enum dnnmem_status s = dnnmem_model_load(path, &m, &err);
    if (s != DNNMEM_OK) {
        fprintf(stderr, "dnnmem: %s\n", err.message);
        return exit_code(s);
    }
    struct dnnmem_result *r = NULL;
    s = dnnmem_estimate(m, &cfg, &r, &err);
    if (s != DNNMEM_OK) {
        fprintf(stderr, "dnnmem: %s\n", err.message);
        dnnmem_model_free(m);
        return exit_code(s);
    }
    int wr = json ? dnnmem_report_json(r, m, stdout) : dnnmem_report_text(r, m, stdout);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
    if (wr != 0 || fflush(stdout) != 0) {
        fprintf(stderr, "dnnmem: cannot write the result\n");
        return EXIT_INTERNAL;
    }
    return EXIT_OK;
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
    return usage_error("%s: unknown command (try 'estimate')", cmd);
}
