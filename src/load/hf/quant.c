/*
 * quant.c (src/load/hf/): quantized linear layers.
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
#include "hf.h"

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
        hf_fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.%s' must be a string", key);
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
        hf_fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.%s' must be true or false",
                key);
        return dflt;
    }
    return json_is_true(v);
}

/* An integer in [lo, hi]; `dflt` when absent or null (REQUIRED: an error). */
static int64_t q_int(struct hf *h, json_t *qc, const char *key, int64_t dflt, int64_t lo,
                     int64_t hi)
{
    json_t *v = json_object_get(qc, key);
    if (h->st != DNNMEM_OK)
        return dflt == REQUIRED ? lo : dflt;
    if (!v || json_is_null(v)) {
        if (dflt == REQUIRED) {
            hf_fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.%s' is missing", key);
            return lo;
        }
        return dflt;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'quantization_config.%s' must be an integer in [%lld, %lld]",
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
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'quantization_config.%s' must be a list of module names",
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
    hf_fail(h, DNNMEM_E_MODEL,
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
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'quantization_config.bits' is %d; gptq has 2, 3, 4 or 8",
                q->bits);
    q->group = q_int(h, qc, "group_size", 128, -1, MAX_SIZE);
    if (h->st == DNNMEM_OK && q->group == 0)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'quantization_config.group_size' must be positive or -1");
    q->desc_act = q_bool(h, qc, "desc_act", false);
    (void)q_bool(h, qc, "sym", true); /* zero points are stored either way */
    const char *fmt = q_str(h, qc, "checkpoint_format", "gptq");
    if (q_bool(h, qc, "is_marlin_format", false) || strcmp(fmt, "marlin") == 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'quantization_config': Marlin-packed gptq checkpoints are not modelled");
    else if (strcmp(fmt, "gptq") != 0 && strcmp(fmt, "gptq_v2") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
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
            hf_fail(h, DNNMEM_E_MODEL,
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
        hf_fail(h, DNNMEM_E_MODEL,
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
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'quantization_config.bits' is %d; AutoAWQ's WQLinear_GEMM has 4 bits only",
                q->bits);
    q->group = q_int(h, qc, "group_size", 128, -1, MAX_SIZE);
    if (h->st == DNNMEM_OK && q->group == 0)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'quantization_config.group_size' must be positive or -1");
    (void)q_bool(h, qc, "zero_point", true); /* qzeros are stored either way */
    const char *v = q_str(h, qc, "version", "gemm");
    if (h->st == DNNMEM_OK && strcasecmp(v, "gemm") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'quantization_config.version' is '%s'; awq's gemm layout is modelled "
                "(gemv, exllama, ipex are not)",
                v);
    const char *backend = q_str(h, qc, "backend", "autoawq");
    if (h->st == DNNMEM_OK && strcmp(backend, "autoawq") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'quantization_config.backend' is '%s'; autoawq is modelled", backend);
    if (q_bool(h, qc, "do_fuse", false))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
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
        hf_fail(h, DNNMEM_E_MODEL,
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
                hf_fail(h, DNNMEM_E_MODEL,
                        "config field 'quantization_config.llm_int8_threshold' must be a number >= 0");
            else
                q->threshold = json_number_value(t);
        }
        if (q_bool(h, qc, "llm_int8_has_fp16_weight", false))
            hf_fail(h, DNNMEM_E_UNSUPPORTED,
                    "config field 'quantization_config.llm_int8_has_fp16_weight': 16-bit main weights "
                    "are not modelled");
        return;
    }
    q->method = Q_BNB4;
    const char *type = q_str(h, qc, "bnb_4bit_quant_type", "fp4");
    if (h->st == DNNMEM_OK && strcmp(type, "nf4") != 0 && strcmp(type, "fp4") != 0)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'quantization_config.bnb_4bit_quant_type' is '%s'; expected nf4 or fp4",
                type);
    q->nf4 = strcmp(type, "nf4") == 0;
    q->double_quant = q_bool(h, qc, "bnb_4bit_use_double_quant", false);
    /* bnb_4bit_compute_dtype: float32 when not given (BitsAndBytesConfig);
     * Linear4bit keeps a given compute_dtype (compute_type_is_set) */
    q->compute = q_dtype(h, qc, "bnb_4bit_compute_dtype", DM_FLOAT);
    const char *st = q_str(h, qc, "bnb_4bit_quant_storage", "uint8");
    if (h->st == DNNMEM_OK && strcmp(st, "uint8") != 0 && strcmp(st, "torch.uint8") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
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
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'quantization_config.fmt' is '%s'; e4m3 is modelled", fmt);
    const char *act = q_str(h, qc, "activation_scheme", "dynamic");
    if (h->st == DNNMEM_OK && strcmp(act, "dynamic") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
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
            hf_fail(h, DNNMEM_E_MODEL,
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
void hf_read_quant(struct hf *h, enum dnnmem_quant opt)
{
    struct quant *q = &h->q;
    json_t *qc = hf_field(h, "quantization_config");
    if (!qc) {
        q->method = opt == DNNMEM_QUANT_INT8 ? Q_BNB8 : opt ? Q_BNB4 : Q_NONE;
        q->nf4 = opt == DNNMEM_QUANT_NF4 || opt == DNNMEM_QUANT_NF4_SINGLE;
        q->double_quant = opt == DNNMEM_QUANT_NF4;
        q->compute = DM_UNDEFINED; /* the run's dtype */
        q->threshold = 6.0;        /* BitsAndBytesConfig's llm_int8_threshold */
        return;
    }
    if (!json_is_object(qc)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field 'quantization_config' must be an object");
        return;
    }
    const char *m = q_str(h, qc, "quant_method", NULL);
    if (h->st != DNNMEM_OK)
        return;
    if (!m) {
        hf_fail(h, DNNMEM_E_MODEL, "config field 'quantization_config.quant_method' is missing");
        return;
    }
    if (opt != DNNMEM_QUANT_NONE) {
        hf_refuse(h, DM_REFUSE_QUANT_TWICE, m, NULL);
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
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
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
bool hf_quantized(struct hf *h, int32_t tied, const char *name, bool conv)
{
    struct quant *q = &h->q;
    if (q->method == Q_NONE || tied >= 0 || h->st != DNNMEM_OK)
        return false;
    char path[sizeof h->scope];
    hf_module_path(h, path, sizeof path);
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

/* A quantized linear layer: in -> out (n = in * out weights), with a bias
 * or not, the module at `path`. */
struct qlayer {
    int64_t in, out, n;
    bool bias;
    const char *path;
};

/* The stored tensors of layer *l, by method: *w the QuantLinear's weight,
 * *b its bias or -1. false after an error of the layer's shape. */
static bool bnb4_tensors(struct hf *h, const struct qlayer *l, int32_t *w, int32_t *b)
{
    struct quant *q = &h->q;
    /* Params4bit / functional.quantize_4bit: the flattened weight,
     * (n + 1) / 2 bytes [*, 1]; an absmax per block of 64 weights,
     * float32, or with double quantization uint8 with a float32 absmax
     * per 256 blocks (nested_absmax) and an offset; the 16-entry code
     * (quant_map). A prequantized checkpoint loads each layer's QuantState
     * with its own nested_quant_map (QuantState.from_dict); quantizing on
     * load shares one dynamic map per device (name2qmap). */
    int64_t packed = l->n / 2 + l->n % 2, blocks = l->n / BNB4_BLOCK + (l->n % BNB4_BLOCK > 0);
    int64_t code = 16, map = 256, one = 1;
    *b = l->bias ? hf_param(h, "bias", DM_FLOAT, 1, &l->out) : -1;
    *w = hf_param(h, "weight", DM_UINT8, 2, (int64_t[]){packed, 1});
    frozen32(h, hf_param(h, "weight.absmax", q->double_quant ? DM_UINT8 : DM_FLOAT, 1, &blocks));
    if (q->double_quant) {
        int64_t nested = blocks / BNB_NESTED_BLOCK + (blocks % BNB_NESTED_BLOCK > 0);
        frozen32(h, hf_param(h, "weight.nested_absmax", DM_FLOAT, 1, &nested));
        frozen32(h, hf_param(h, "weight.offset", DM_FLOAT, 0, &one));
        if (q->from_config)
            frozen32(h, hf_param(h, "weight.nested_quant_map", DM_FLOAT, 1, &map));
        else if (!q->shared_map) {
            q->shared_map = true;
            frozen32(h, hf_param(h, "weight.nested_quant_map", DM_FLOAT, 1, &map));
        }
    }
    frozen32(h, hf_param(h, "weight.quant_map", DM_FLOAT, 1, &code));
    return true;
}

static bool bnb8_tensors(struct hf *h, const struct qlayer *l, int32_t *w, int32_t *b)
{
    /* Linear8bitLt: Int8Params int8 [out, in] and its SCB, float32 [out]
     * (the state_dict's "<module>.SCB"; "weight_format" stays on the host) */
    *w = hf_param(h, "weight", DM_INT8, 2, (int64_t[]){l->out, l->in});
    frozen32(h, hf_param(h, "SCB", DM_FLOAT, 1, &l->out));
    *b = l->bias ? hf_param(h, "bias", DM_FLOAT, 1, &l->out) : -1;
    return true;
}

static bool gptq_tensors(struct hf *h, const struct qlayer *l, int32_t *w, int32_t *b)
{
    struct quant *q = &h->q;
    /* auto-gptq QuantLinear (qlinear_cuda_old.py, qlinear_exllama.py):
     * qweight int32 [in // 32 * bits, out], qzeros int32 [ceil(in / group),
     * out // 32 * bits], scales float16 [ceil(in / group), out], g_idx
     * int32 [in], bias float16 [out] */
    if (l->in % 32 || l->out % 32) {
        hf_fail(h, DNNMEM_E_MODEL,
                "%s: gptq packs 32 / bits codes per int32 and needs in_features (%lld) and "
                "out_features (%lld) to be multiples of 32",
                l->path, (long long)l->in, (long long)l->out);
        return false;
    }
    int64_t g = q->group == -1 ? l->in : q->group, groups = l->in / g + (l->in % g > 0);
    if (q->kernel != K_CUDA_OLD && l->in % g) {
        hf_fail(h, DNNMEM_E_MODEL,
                "%s: auto-gptq's exllama kernel needs in_features (%lld) to be a multiple of "
                "group_size (%lld)",
                l->path, (long long)l->in, (long long)g);
        return false;
    }
    int64_t rows = l->in / 32 * q->bits, cols = l->out / 32 * q->bits;
    *w = hf_param(h, "qweight", DM_INT32, 2, (int64_t[]){rows, l->out});
    frozen(h, hf_param(h, "qzeros", DM_INT32, 2, (int64_t[]){groups, cols}));
    frozen(h, hf_param(h, "scales", DM_FLOAT16, 2, (int64_t[]){groups, l->out}));
    frozen(h, hf_param(h, "g_idx", DM_INT32, 1, &l->in));
    if (l->bias) {
        *b = hf_param(h, "bias", DM_FLOAT16, 1, &l->out);
        frozen(h, *b);
    }
    int64_t dq, v2;
    if (q->kernel == K_EXLLAMA && dm_mul_ok(rows * 8, l->out, &dq)) {
        /* autogptq_post_init: temp_dq holds the largest qweight.numel() * 8 */
        qmax(&q->max_dq, dq);
        qmax(&q->max_dim, l->in > l->out ? l->in : l->out);
    }
    if (q->kernel == K_EXLLAMA_V2) {
        /* qlinear_exllamav2.py scratch_space_fixed: temp_dq_size (in * out
         * * 2 + 128) + temp_fwd_size (out * 2048 * 8 * 4 + 128); a g_idx not
         * all zero (more than one group) makes q_perm and q_invperm, int16
         * [in] each (ext_make_q_matrix) */
        if (dm_mul_ok(l->n, 2, &dq) && dm_mul_ok(l->out, INT64_C(2048) * 8 * 4, &v2) &&
            dm_add_ok(v2, 256, &v2) && dm_add_ok(dq, v2, &v2))
            qmax(&q->max_scratch, v2);
        if (groups > 1) {
            frozen(h, hf_param(h, "q_tensors.q_perm", DM_INT16, 1, &l->in));
            frozen(h, hf_param(h, "q_tensors.q_invperm", DM_INT16, 1, &l->in));
        }
    }
    return true;
}

static bool awq_tensors(struct hf *h, const struct qlayer *l, int32_t *w, int32_t *b)
{
    struct quant *q = &h->q;
    /* AutoAWQ WQLinear_GEMM (awq/modules/linear/gemm.py): qweight int32
     * [in, out / 8], qzeros int32 [in / group, out / 8], scales float16
     * [in / group, out], bias float16 [out]; it asserts in % group == 0
     * and out % 8 == 0 */
    int64_t g = q->group == -1 ? l->in : q->group;
    if (l->out % 8 || l->in % g) {
        hf_fail(h, DNNMEM_E_MODEL,
                "%s: AutoAWQ's WQLinear_GEMM needs out_features (%lld) to be a multiple of 8 and "
                "in_features (%lld) of group_size (%lld)",
                l->path, (long long)l->out, (long long)l->in, (long long)g);
        return false;
    }
    *w = hf_param(h, "qweight", DM_INT32, 2, (int64_t[]){l->in, l->out / 8});
    frozen(h, hf_param(h, "qzeros", DM_INT32, 2, (int64_t[]){l->in / g, l->out / 8}));
    frozen(h, hf_param(h, "scales", DM_FLOAT16, 2, (int64_t[]){l->in / g, l->out}));
    if (l->bias) {
        *b = hf_param(h, "bias", DM_FLOAT16, 1, &l->out);
        frozen(h, *b);
    }
    return true;
}

static bool fp8_tensors(struct hf *h, const struct qlayer *l, int32_t *w, int32_t *b)
{
    struct quant *q = &h->q;
    /* transformers FP8Linear: weight float8_e4m3fn [out, in],
     * weight_scale_inv float32 [ceil(out / block_n), ceil(in / block_k)];
     * act_quant asserts in % block_k == 0 */
    if (l->in % q->block_k) {
        hf_fail(h, DNNMEM_E_MODEL,
                "%s: FP8Linear quantizes its input in groups of %lld (weight_block_size[1]); "
                "in_features is %lld",
                l->path, (long long)q->block_k, (long long)l->in);
        return false;
    }
    *w = hf_param(h, "weight", DM_FLOAT8E4M3FN, 2, (int64_t[]){l->out, l->in});
    frozen(h, *w);
    int64_t so = l->out / q->block_n + (l->out % q->block_n > 0), si = l->in / q->block_k;
    frozen32(h, hf_param(h, "weight_scale_inv", DM_FLOAT, 2, (int64_t[]){so, si}));
    *b = l->bias ? hf_param(h, "bias", DM_FLOAT, 1, &l->out) : -1;
    return true;
}

/* Per method: the QuantLinear's "method" attribute and the stored tensors. */
static const struct {
    const char *name;
    bool (*tensors)(struct hf *h, const struct qlayer *l, int32_t *w, int32_t *b);
} qmethods[] = {
    [Q_BNB4] = {"bnb4", bnb4_tensors}, [Q_BNB8] = {"bnb8", bnb8_tensors},
    [Q_GPTQ] = {"gptq", gptq_tensors}, [Q_AWQ] = {"awq", awq_tensors},
    [Q_FP8] = {"fp8", fp8_tensors},
};

/* The current module's linear layer (in -> out, with a bias when `bias`)
 * stored as the method stores it, and the QuantLinear node that runs it;
 * `name` (or NULL) names the result. */
int32_t hf_qlinear(struct hf *h, int32_t x, int64_t in, int64_t out, bool bias, const char *name)
{
    struct quant *q = &h->q;
    int64_t n;
    char path[sizeof h->scope];
    hf_module_path(h, path, sizeof path);
    if (!dm_mul_ok(in, out, &n)) {
        hf_fail(h, DNNMEM_E_SHAPE, "%s: a [%lld, %lld] weight overflows", path, (long long)out,
                (long long)in);
        return -1;
    }
    int32_t w = -1, b = -1;
    if (q->method == Q_NONE ||
        !qmethods[q->method].tensors(h, &(struct qlayer){in, out, n, bias, path}, &w, &b))
        return -1;
    const char *method = qmethods[q->method].name;
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
        xc = hf_op(h, DM_OP_Cast, 1, x);
        hf_attr_i(h, "to", low ? DM_FLOAT : q->compute);
        if (q->compute == DM_FLOAT)
            hf_keep32(h, xc);
        if (low)
            hf_unkeep32(h, xc);
    }
    if (!cast)
        h->out_name = name;
    int32_t y = b >= 0 ? hf_op(h, DM_OP_QuantLinear, 3, xc, w,
                               b) : hf_op(h, DM_OP_QuantLinear, 2, xc, w);
    hf_attr_s(h, "method", method);
    hf_attr_i(h, "K", in);
    hf_attr_i(h, "N", out);
    switch (q->method) {
    case Q_BNB4: hf_attr_i(h, "blocksize", BNB4_BLOCK); break;
    case Q_BNB8: hf_attr_f(h, "threshold", q->threshold); break;
    case Q_GPTQ:
        hf_attr_i(h, "bits", q->bits);
        hf_attr_i(h, "kernel", q->kernel);
        break;
    case Q_FP8: hf_attr_i(h, "block_k", q->block_k); break;
    case Q_AWQ:
    case Q_NONE: break;
    }
    if (!cast)
        return y;
    if (q->compute == DM_FLOAT)
        hf_keep32(h, y);
    if (low)
        hf_unkeep32(h, y);
    h->out_name = name;
    return hf_op(h, DM_OP_CastLike, 2, y, x);
}

static const char *dtype_word(enum dm_dtype t)
{
    return t == DM_FLOAT ? "float32" : t == DM_FLOAT16 ? "float16" : "bfloat16";
}

/* After the model: the buffers the kernels keep for the whole model, a model
 * none of whose layers the config's method quantizes, and what the report
 * says. */
void hf_quant_finish(struct hf *h)
{
    struct quant *q = &h->q;
    struct dm_graph *g = h->g;
    if (q->method == Q_NONE || h->st != DNNMEM_OK)
        return;
    if (!q->n_layers) {
        if (q->method == Q_GPTQ)
            hf_fail(h, DNNMEM_E_UNSUPPORTED,
                    "config field 'quantization_config': no linear layer is under a gptq block "
                    "(optimum's transformer.h, model.decoder.layers, gpt_neox.layers, model.layers, "
                    "or block_name_to_quantize)");
        else
            hf_fail(h, DNNMEM_E_MODEL,
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
            hf_fail(h, DNNMEM_E_SHAPE, "gptq: exllama's temp_state overflows");
            return;
        }
        frozen(h, hf_param_named(h, "device_to_buffers.temp_state", DM_FLOAT16, 2,
                                 (int64_t[]){rows, dim}));
        frozen(h,
               hf_param_named(h, "device_to_buffers.temp_dq", DM_FLOAT16, 2, (int64_t[]){1, dq}));
    }
    if (q->method == Q_GPTQ && q->kernel == K_EXLLAMA_V2) {
        /* ExLlamaV2DeviceTensors: one float16 scratch of scratch_bytes // 2 */
        int64_t halves = q->max_scratch / 2;
        frozen(h, hf_param_named(h, "device_tensors.scratch", DM_FLOAT16, 1, &halves));
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
        hf_oom(h);
    /* is_trainable: FineGrainedFP8HfQuantizer false; bnb (>= 0.37), gptq,
     * awq (autoawq >= 0.2.0) true; update_torch_dtype: float16 for bnb,
     * gptq and awq, float32 for fp8 */
    g->quant_trainable = q->method != Q_FP8;
    g->quant_fp16_default = q->method != Q_FP8;
    g->quant_min_cc = q->method == Q_FP8 ? 89 : 0;
}
