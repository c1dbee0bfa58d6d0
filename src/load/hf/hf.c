/*
 * hf.c (src/load/hf/): the HuggingFace front end's entry point. A transformers
 * config.json names an architecture and its sizes; this front end builds, op by op, the model that
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
#include "hf.h"

/* PEFT's default target_modules (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING). */
static const char *const qv[] = {"q_proj", "v_proj"}, *const c_attn[] = {"c_attn"},
                         *const query[] = {"query", "value"}, *const qv_lin[] = {"q_lin", "v_lin"},
                         *const t5_qv[] = {"q", "v"}, *const fused[] = {"query_key_value"},
                         *const qkv_proj[] = {"qkv_proj"};
#define TARGETS(a) a, sizeof a / sizeof *a

/* The model types, each with its family's builder (in the order the errors
 * list them). flash: the transformers release from which flash_attention_2
 * is modelled (1: every one), 0: none (see build). */
static const struct hf_arch archs[] = {
    {"llama", hf_llama, 1, 0, TARGETS(qv)},
    {"mistral", hf_llama, 1, 0, TARGETS(qv)},
    {"qwen2", hf_llama, 1, 0, TARGETS(qv)},
    {"qwen3", hf_llama, 1, 0, TARGETS(qv)},
    {"mixtral", hf_moe, 1, 0, TARGETS(qv)},
    {"qwen2_moe", hf_moe, 1, 0, TARGETS(qv)},
    {"qwen3_moe", hf_moe, 1, 0, TARGETS(qv)},
    {"deepseek_v2", hf_moe, 0, 0, TARGETS(qv)},
    {"deepseek_v3", hf_moe, 0, 0, TARGETS(qv)},
    {"gpt2", hf_gpt2, 1, 0, TARGETS(c_attn)},
    {"bert", hf_bert, 0, HF_ANY_ARCH, TARGETS(query)},
    {"roberta", hf_bert, 0, HF_ANY_ARCH, TARGETS(query)},
    {"albert", hf_bert, 0, HF_ANY_ARCH | HF_NO_GC, TARGETS(query)},
    {"distilbert", hf_distilbert, 1, HF_ANY_ARCH, TARGETS(qv_lin)},
    {"t5", hf_t5, 0, HF_ANY_ARCH, TARGETS(t5_qv)},
    {"mt5", hf_t5, 0, HF_ANY_ARCH, TARGETS(t5_qv)},
    {"vit", hf_vit, 1, HF_ANY_ARCH, TARGETS(query)},
    {"opt", hf_opt, 1, 0, TARGETS(qv)},
    {"biogpt", hf_opt, 452, 0, TARGETS(qv)},
    {"gpt_neox", hf_neox, 1, HF_NO_AWQ, TARGETS(fused)},
    {"falcon", hf_neox, 1, HF_NO_AWQ, TARGETS(fused)},
    {"phi", hf_neox, 1, 0, TARGETS(qv)},
    {"phi3", hf_neox, 1, 0, TARGETS(qkv_proj)},
    {"gemma", hf_gemma, 1, 0, TARGETS(qv)},
    {"gemma2", hf_gemma, 1, 0, TARGETS(qv)},
    {"gemma3_text", hf_gemma, 1, 0, TARGETS(qv)},
    /* the multimodal Gemma 3 wrapper: its text_config's causal LM */
    {"gemma3", hf_gemma, 1, HF_ANY_ARCH | HF_TEXT_CONFIG, TARGETS(qv)},
};

static const struct hf_arch *arch_of(const char *type)
{
    for (size_t k = 0; type && k < sizeof archs / sizeof *archs; k++)
        if (strcmp(type, archs[k].type) == 0)
            return &archs[k];
    return NULL;
}

/* The table's model types, for the errors that list them. */
static const char *known_types(char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < sizeof archs / sizeof *archs; k++) {
        int m = snprintf(buf + o, cap - o, "%s%s%s", k ? ", " : "", archs[k].type,
                         archs[k].flags & HF_TEXT_CONFIG ? " (its text_config)" : "");
        if (m < 0 || (size_t)m >= cap - o)
            break;
        o += (size_t)m;
    }
    return buf;
}

/* The model_type, or "gpt2" for the legacy GPT-2 configs that predate it. */
static const char *model_type(struct hf *h)
{
    json_t *v = json_object_get(h->root, "model_type");
    if (v && !json_is_string(v)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field 'model_type' must be a string");
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
    char known[512];
    if (!arch && !json_object_get(h->root, "vocab_size"))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "a JSON file that is not a HuggingFace config.json (no 'model_type', "
                "'architectures' or 'vocab_size'); supported: ONNX models, HuggingFace configs "
                "and Keras model JSON");
    else
        hf_fail(h, DNNMEM_E_MODEL, "config field 'model_type' is missing (known: %s)",
                known_types(known, sizeof known));
    return NULL;
}

/* `architectures`, when given, must name the causal LM that is built. */
static void check_architectures(struct hf *h)
{
    json_t *arch = json_object_get(h->root, "architectures");
    if (!arch || json_is_null(arch))
        return;
    if (!json_is_array(arch)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field 'architectures' must be a list");
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
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'architectures' names %s; only the causal LM (...ForCausalLM, "
                "GPT2LMHeadModel) is built",
                other);
}

/* What every family checks before it reads its config's fields, in this
 * order: the architectures, --attn flash, the quantization. false after an
 * error. */
bool hf_check(struct hf *h, const char *type)
{
    if (!(h->arch->flags & HF_ANY_ARCH))
        check_architectures(h);
    /* flash_attention_2 as transformers 4.51 runs it through the shared
     * attention interface (flash_attention_forward): the families whose
     * attention was moved onto it (GPT-2 with 4.48; OPT, GPT-NeoX and Phi,
     * whose eager path is the interface's eager_attention_forward in 4.51,
     * opt.c, neox.c), and DistilBERT's own DistilBertFlashAttention2 on
     * views (distil_attention), Qwen2-MoE's own class (repeat_kv first,
     * llama_attention) and Falcon's FalconFlashAttention2 (the rotated q, k
     * and the fused output's v view, transposed back into flash_attn_func
     * without repeating: hf_dec_core's flash path). BioGPT has none in 4.51
     * (BioGptPreTrainedModel sets no _supports_flash_attn_2) and from 4.52,
     * on BART's modular code, runs the interface; ViT (as 4.53-4.57 build
     * it, vit_attention) runs it too; 4.51's BERT, RoBERTa, ALBERT and T5
     * have none; DeepSeek's MLA pads its values to the query head size. */
    if (h->flash && h->arch->flash > 1 && h->transformers < h->arch->flash) {
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "--attn flash: transformers %d.%d's BioGPT has no flash_attention_2 (from "
                "4.52 it has: --transformers 4.52); use --attn sdpa or eager",
                h->transformers / 100, h->transformers % 100);
        return false;
    }
    if (h->flash && !h->arch->flash) {
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "--attn flash: flash_attention_2 for model_type '%s' is not modelled "
                "(modelled: llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, "
                "gemma, gemma2, gemma3, phi3, phi, gpt2, opt, gpt_neox, falcon, distilbert, "
                "biogpt, vit; transformers 4.51's bert, roberta, albert and t5 have none); "
                "use --attn sdpa or eager",
                type);
        return false;
    }
    hf_read_quant(h, h->opt_quant);
    h->prep32 = h->kbit && !h->amp &&
                (h->q.method == Q_BNB4 || h->q.method == Q_BNB8 || h->q.method == Q_AWQ);
    if (h->q.method == Q_AWQ && (h->arch->flags & HF_NO_AWQ))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'quantization_config': awq on model_type '%s' adds AutoAWQ's "
                "ScaledActivation (replace_quantization_scales), which is not modelled",
                type);
    return true;
}

/* After the family has read its config: the graph's description (false
 * after an error). */
bool hf_begin(struct hf *h, const char *type)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return false;
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
    return true;
}

/* The graph's input input_ids int64 [batch, seq], and room for n_out
 * outputs; -1 after an error. */
int32_t hf_input_ids(struct hf *h, size_t n_out)
{
    struct dm_graph *g = h->g;
    int32_t ids = dm_graph_add_tensor(g, "input_ids");
    struct dm_dim *d = dm_arena_array(&g->arena, 2, sizeof *d);
    int32_t sb = dm_graph_symbol(g, "batch"), sq = dm_graph_symbol(g, "seq");
    g->inputs = dm_arena_array(&g->arena, 1, sizeof *g->inputs);
    g->outputs = dm_arena_array(&g->arena, n_out, sizeof *g->outputs);
    if (ids < 0 || !d || sb < 0 || sq < 0 || !g->inputs || !g->outputs)
        return hf_oom(h);
    d[0] = (struct dm_dim){-1, sb};
    d[1] = (struct dm_dim){-1, sq};
    g->tensors[ids] = (struct dm_tensor){.name = g->tensors[ids].name, .dtype = DM_INT64,
                                         .rank = 2, .dims = d, .role = DM_ROLE_INPUT,
                                         .producer = -1};
    g->inputs[g->n_inputs++] = ids;
    return ids;
}

/* The end of every build: the quantized layers' summary, then the graph's
 * own checks. */
enum dnnmem_status hf_finish(struct hf *h)
{
    hf_quant_finish(h);
    return h->st == DNNMEM_OK ? dm_graph_finish(h->g, h->err) : h->st;
}

/* An encoder's outputs: last_hidden_state and pooler_output (pooled >= 0),
 * or the head's logits. */
enum dnnmem_status hf_encoder_outputs(struct hf *h, int32_t x, int32_t pooled)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return h->st;
    g->tensors[x].is_output = true;
    g->outputs[g->n_outputs++] = x;
    if (pooled >= 0) {
        g->tensors[pooled].is_output = true;
        g->outputs[g->n_outputs++] = pooled;
    }
    return hf_finish(h);
}

/* A causal LM's input_ids, with room for the logits and, with use_cache,
 * each layer's presents (and with `parts` the parts of fused projections
 * that the presents' views keep alive, present.N.qkv.J); -1 after an
 * error. Sets how the model runs as transformers' LlamaForCausalLM does,
 * which a family changes after its build where it differs. */
int32_t hf_causal_ids(struct hf *h, int64_t layers, bool use_cache, bool parts)
{
    struct dm_graph *g = h->g;
    /* model(input_ids, labels=...) computes its loss in float32
     * (ForCausalLMLoss, transformers >= 4.46; LlamaForCausalLM's forward
     * upcast the logits itself before that) */
    g->loss_upcast = true;
    /* LlamaForCausalLM.forward(logits_to_keep), 4.45+ */
    g->logits_to_keep = true;
    g->legacy_cache = false;
    g->gen_mask = DM_GEN_MASK_CAUSAL;
    return hf_input_ids(h, 2 + (use_cache ? (parts ? 4 : 2) * (size_t)layers : 0));
}

/* A causal LM's outputs: the logits, then with use_cache the presents
 * (hf_causal_ids). */
enum dnnmem_status hf_causal_outputs(struct hf *h, int32_t logits, int64_t layers, bool use_cache,
                                     bool parts)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return h->st;
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
                return hf_fail(h, DNNMEM_E_INTERNAL, "no tensor '%s'", name);
            g->tensors[t].is_output = true;
            g->outputs[g->n_outputs++] = t;
        }
    for (int64_t i = 0; parts && use_cache && i < layers; i++)
        for (int j = 0; j < 2; j++) {
            char name[64];
            snprintf(name, sizeof name, "present.%lld.qkv.%d", (long long)i, j);
            int32_t t = dm_graph_find(g, name);
            if (t >= 0) {
                g->tensors[t].is_output = true;
                g->outputs[g->n_outputs++] = t;
            }
        }
    return hf_finish(h);
}

static enum dnnmem_status build(struct hf *h)
{
    if (!json_is_object(h->root))
        return hf_fail(h, DNNMEM_E_MODEL, "a HuggingFace config must be a JSON object");
    const char *type = model_type(h);
    if (!type)
        return h->st;
    if (strcmp(type, "mixformer-sequential") == 0)
        return hf_fail(h, DNNMEM_E_UNSUPPORTED,
                       "model_type 'mixformer-sequential' (phi's early remote-code format) is not "
                       "supported; use the transformers config of the model (model_type 'phi')");
    h->arch = arch_of(type);
    char known[512];
    if (!h->arch)
        return hf_fail(h, DNNMEM_E_UNSUPPORTED, "model_type '%s' is not supported (known: %s)",
                       type,
                       known_types(known, sizeof known));
    return h->arch->build(h, type);
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
    h.cache_copy = tv >= 456;
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
            const struct hf_arch *a = arch_of(type ? type : "gpt2");
            h.lora_targets = a ? a->lora : qv;
            h.n_lora_targets = a ? a->n_lora : sizeof qv / sizeof *qv;
        }
        h.lora_hits = calloc(h.n_lora_targets, sizeof *h.lora_hits);
        if (!h.lora_hits)
            h.st = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    /* gradient checkpointing in training turns use_cache off (LlamaModel.forward
     * and the others of 4.51): built as a config that says so */
    bool ckpt = opt && opt->mode == DNNMEM_MODE_TRAIN && opt->n_checkpoint > 0;
    if (h.st == DNNMEM_OK && (hf_kbit_gc(&h) || ckpt)) {
        json_t *text = json_object_get(h.root, "text_config");
        if (json_object_set_new(h.root, "use_cache", json_false()) ||
            (json_is_object(text) && json_object_set_new(text, "use_cache", json_false())))
            h.st = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    enum dnnmem_status s = h.st == DNNMEM_OK ? build(&h) : h.st;
    if (s == DNNMEM_OK && h.kbit) {
        hf_kbit_finish(&h);
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
