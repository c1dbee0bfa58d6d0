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
 *  - model_type "gpt_oss": gptoss.c (4.56-5.24: attention sinks,
 *    alternating sliding and full layers, the 3-D experts);
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
 * 4.53-4.57), input pixel_values [batch, channels, image, image];
 * WhisperForConditionalGeneration ("whisper"; modeling_whisper.py, 4.56-5.24),
 * inputs input_features [batch, num_mel_bins, 2 * max_source_positions] and
 * decoder_input_ids [batch, seq], outputs as T5's; MambaForCausalLM ("mamba";
 * mamba.c, 4.56 and 5.24, the torch slow path), outputs the logits and, with
 * use_cache in inference, each layer's conv and recurrent states.
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

/* PEFT's default target_modules (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING,
 * peft/utils/constants.py, read in PEFT 0.21.2). A model type PEFT has none for
 * has none here: --lora-r then needs --lora-targets, as get_peft_model raises. */
static const char *const qv[] = {"q_proj", "v_proj"}, *const c_attn[] = {"c_attn"},
                         *const query[] = {"query", "value"},
                         *const t5_qv[] = {"q", "v"}, *const fused[] = {"query_key_value"},
                         *const phi_t[] = {"q_proj", "v_proj", "fc1", "fc2"};
#define TARGETS(a) a, sizeof a / sizeof *a

/* The task heads (heads, struct hf_task): those the model type's modeling
 * file has in transformers 4.56.2 and 5.24.0 (the same in both), built where
 * measured against real transformers 5.24
 * (tests/validation/hf-real-decoder-heads-cpu.jsonl); OPT has no
 * ForTokenClassification, Phi, Phi-3, Gemma, Gemma 2 and StarCoder2 no
 * ForQuestionAnswering (OLMo 2's ForSequenceClassification is 5.24's, not
 * 4.56's: not built; nor BioGPT's, DeepSeek's, gpt_oss's heads). The other model types' heads are not built, nor
 * any before transformers 4.51 (4.42-4.50 name some heads' Linear otherwise). */
#define ALL HF_HEADS_ALL
#define SEQ_TOK (HF_HEAD(HF_TASK_SEQCLS) | HF_HEAD(HF_TASK_TOKCLS))
#define SEQ_QA (HF_HEAD(HF_TASK_SEQCLS) | HF_HEAD(HF_TASK_QA))
/* The model types, each with its family's builder (in the order the errors
 * list them). flash: the transformers release from which flash_attention_2
 * is modelled (1: every one), 0: none (see build); oldest: the oldest
 * release modelled (0: DM_TRANSFORMERS_WIDE; hf_check refuses older): GPT-NeoX
 * and OPT from 4.40 (their own attention classes before 4.49, neox.c, opt.c);
 * Llama, Mistral, Gemma and GPT-2 from 4.48, their move onto the attention
 * interface, after which their modelling files, sdpa_attention.py and
 * DynamicCache.update change nothing of their memory up to 4.51 (read in the
 * 4.48.3-4.51.3 wheels; measured: 48 rows at 4.48.3 within 0.22% of 4.51's
 * model, tests/validation/hf-real-cpu.jsonl). */
static const struct hf_arch archs[] = {
    {"llama", hf_llama, 1, 0, TARGETS(qv), "Llama", 448, ALL},
    {"mistral", hf_llama, 1, 0, TARGETS(qv), "Mistral", 448, ALL},
    {"qwen2", hf_llama, 1, 0, TARGETS(qv), "Qwen2", 0, ALL},
    {"qwen3", hf_llama, 1, 0, TARGETS(qv), "Qwen3", 0, ALL},
    {"granite", hf_llama, 1, 0, NULL, 0, "Granite", 0, 0},
    {"olmo2", hf_llama, 1, 0, NULL, 0, "Olmo2", 0, 0},
    {"starcoder2", hf_llama, 1, 0, NULL, 0, "Starcoder2", 0, SEQ_TOK},
    {"mixtral", hf_moe, 1, 0, TARGETS(qv), "Mixtral", 0, ALL},
    {"qwen2_moe", hf_moe, 1, 0, NULL, 0, "Qwen2Moe", 0, ALL},
    {"qwen3_moe", hf_moe, 1, 0, NULL, 0, "Qwen3Moe", 0, ALL},
    {"deepseek_v2", hf_moe, 0, 0, NULL, 0, "DeepseekV2", 0, 0},
    {"deepseek_v3", hf_moe, 0, 0, NULL, 0, "DeepseekV3", 0, 0},
    {"gpt2", hf_gpt2, 1, 0, TARGETS(c_attn), "GPT2", 448, ALL},
    {"bert", hf_bert, 0, HF_ANY_ARCH, TARGETS(query), "Bert", 0, 0},
    {"roberta", hf_bert, 0, HF_ANY_ARCH, TARGETS(query), "Roberta", 0, 0},
    {"albert", hf_bert, 0, HF_ANY_ARCH | HF_NO_GC, NULL, 0, "Albert", 0, 0},
    {"distilbert", hf_distilbert, 1, HF_ANY_ARCH, NULL, 0, "DistilBert", 0, 0},
    {"t5", hf_t5, 0, HF_ANY_ARCH, TARGETS(t5_qv), "T5", 0, 0},
    {"mt5", hf_t5, 0, HF_ANY_ARCH, TARGETS(t5_qv), "MT5", 0, 0},
    {"vit", hf_vit, 1, HF_ANY_ARCH, NULL, 0, "ViT", 0, 0},
    {"whisper", hf_whisper, 0, HF_ANY_ARCH, TARGETS(qv), "Whisper", 456, 0},
    {"opt", hf_opt, 1, 0, TARGETS(qv), "OPT", 440, SEQ_QA},
    {"biogpt", hf_opt, 452, 0, NULL, 0, "BioGpt", 0, 0},
    {"gpt_neox", hf_neox, 1, HF_NO_AWQ, TARGETS(fused), "GPTNeoX", 440, ALL},
    {"falcon", hf_neox, 1, HF_NO_AWQ, TARGETS(fused), "Falcon", 0, ALL},
    {"phi", hf_neox, 1, 0, TARGETS(phi_t), "Phi", 0, SEQ_TOK},
    {"phi3", hf_neox, 1, 0, NULL, 0, "Phi3", 0, SEQ_TOK},
    {"gemma", hf_gemma, 1, 0, TARGETS(qv), "Gemma", 448, SEQ_TOK},
    {"gemma2", hf_gemma, 1, 0, TARGETS(qv), "Gemma2", 0, SEQ_TOK},
    {"gemma3_text", hf_gemma, 1, 0, TARGETS(qv), NULL, 0, 0},
    /* the multimodal Gemma 3 wrapper: its text_config's causal LM */
    {"gemma3", hf_gemma, 1, HF_ANY_ARCH | HF_TEXT_CONFIG, NULL, 0, "Gemma3", 0, 0},
    /* gpt_oss: 4.56-5.25 (gptoss.c; 4.55's CPU inference ran all experts at once) */
    {"gpt_oss", hf_gptoss, 0, 0, NULL, 0, "GptOss", 456, 0},
    /* mamba: 4.56, 5.24 and 5.25, the torch slow path (mamba.c) */
    {"mamba", hf_mamba, 0, 0, NULL, 0, "Mamba", 456, 0},
};
#undef ALL
#undef SEQ_TOK
#undef SEQ_QA

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

/* A class of transformers' (an 'architectures' entry) of a registry row:
 * its prefix, then Model, LMHeadModel, WithLMHeadModel (T5's 2.x name) or
 * For<task>. */
static const struct hf_arch *arch_of_class(const char *s)
{
    for (size_t k = 0; k < sizeof archs / sizeof *archs; k++) {
        const char *cls = archs[k].cls;
        size_t n = cls ? strlen(cls) : 0;
        if (!cls || strncmp(s, cls, n) != 0)
            continue;
        const char *rest = s + n;
        if (strcmp(rest, "Model") == 0 || strcmp(rest, "LMHeadModel") == 0 ||
            strcmp(rest, "WithLMHeadModel") == 0 || strncmp(rest, "For", 3) == 0)
            return &archs[k];
    }
    return NULL;
}

/* The model_type; a config without one (written before transformers 2.x
 * added the field) resolved from the first 'architectures' class a row
 * names, else, with GPT-2's n_embd and n_layer, "gpt2"; the resolution is
 * recorded (g->type_from) and printed with the result. */
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
            const struct hf_arch *r = json_is_string(a) ? arch_of_class(json_string_value(a)) : NULL;
            if (r) {
                h->g->type_from = dm_arena_printf(&h->g->arena,
                                                  "%s, from architectures %s (the config has no "
                                                  "model_type)",
                                                  r->type, json_string_value(a));
                return r->type;
            }
        }
    }
    if (json_object_get(h->root, "n_embd") && json_object_get(h->root, "n_layer")) {
        h->g->type_from = "gpt2, from its fields n_embd and n_layer (the config has no "
                          "model_type nor a known architectures class)";
        return "gpt2";
    }
    char known[512];
    if (!arch && !json_object_get(h->root, "vocab_size"))
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "a JSON file that is not a HuggingFace config.json (no 'model_type', "
                "'architectures' or 'vocab_size'); supported: ONNX models, HuggingFace configs "
                "and Keras model JSON");
    else
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'model_type' is missing and 'architectures' names no class of a "
                "supported model type (supported: %s)",
                known_types(known, sizeof known));
    return NULL;
}

/* The row model_type() resolves the config to, without errors (PEFT's
 * default targets are read before the build). */
static const struct hf_arch *arch_guess(json_t *root)
{
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (type)
        return arch_of(type);
    json_t *arch = json_object_get(root, "architectures"), *a;
    size_t i;
    json_array_foreach(arch, i, a)
    {
        const struct hf_arch *r = json_is_string(a) ? arch_of_class(json_string_value(a)) : NULL;
        if (r)
            return r;
    }
    return arch_of("gpt2");
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

/* The graph as loaded, without options (the outline, and the graph of an
 * estimate whose options change nothing of it, src/estimate/variant.c):
 * transformers 4.51's, the release the families are written against
 * (DM_TRANSFORMERS_BASE: any other release's estimate rebuilds, check.c);
 * without options nothing reads the PyTorch release or the GPU (they
 * matter to forced sdpa kernels, grouped heads from 4.54 and half precision
 * only), and there are no adapters. */
static const struct dm_hf_env as_loaded = {
    .torch = DM_TORCH_DEFAULT, .transformers = DM_TRANSFORMERS_BASE, .cc = DM_CC_DEFAULT};

static enum dnnmem_status load(struct dm_graph *g, json_t *root, bool sdpa,
                               const struct dnnmem_config *opt, const struct dm_hf_env *env,
                               bool outline, struct dnnmem_error *err)
{
    if (!opt != !env)
        return dm_fail(err, DNNMEM_E_INTERNAL, "%s: options without their run, or a run without "
                       "options", g->path);
    if (!env)
        env = &as_loaded;
    struct hf h = {.g = g, .err = err, .path = g->path, .st = DNNMEM_OK, .sdpa = sdpa,
                   .scope_fnv = {DM_HASH_INIT}, .outline = outline, .as_loaded = !opt,
                   .flash = opt && opt->attn == DNNMEM_ATTN_FLASH,
                   .opt_quant = opt ? opt->quant : DNNMEM_QUANT_NONE,
                   .kbit = opt && opt->mode == DNNMEM_MODE_TRAIN ? opt->kbit_prep
                                                                 : DNNMEM_KBIT_PREP_NONE,
                   .amp = opt && (opt->precision == DNNMEM_PRECISION_AMP_FP16 ||
                                  opt->precision == DNNMEM_PRECISION_AMP_BF16)};
    h.sdpa |= h.flash;
    int tv = env->transformers, torch = env->torch;
    h.gqa_sdpa = h.sdpa && !h.flash && tv >= 454 && torch >= 205;
    h.half = h.amp || (opt && (opt->precision == DNNMEM_PRECISION_FP16 ||
                               opt->precision == DNNMEM_PRECISION_BF16));
    h.cc = env->cc;
    h.cpu = opt && opt->device == DNNMEM_DEVICE_CPU;
    h.lora_alpha = env->lora_alpha;
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
        /* GenerationMixin._optimize_model_for_decode: grouped_mm -> batched_mm
         * for the decode steps, on every device in 5.0.0, off the CPU only from
         * 5.1.0 (`self.device.type != "cpu"`, read in the 5.0.0-5.24.0 wheels);
         * _sample's loop only (greedy and sampling): _beam_search keeps grouped_mm */
        h.batched_decode = opt->new_tokens > 1 && tv >= 500 && opt->num_beams <= 1 &&
                           (tv < 501 || opt->device != DNNMEM_DEVICE_CPU);
        for (size_t k = 0; k < opt->n_dims; k++)
            if (opt->dims[k].name && strcmp(opt->dims[k].name, "seq") == 0)
                h.gen_prompt = opt->dims[k].value;
    }
    h.root = root; /* the load's parse (src/api.c), borrowed */
    if (lora && lora->r > 0) {
        h.lora = lora;
        h.lora_targets = lora->targets;
        h.n_lora_targets = lora->n_targets;
        if (!h.n_lora_targets) {
            const struct hf_arch *a = arch_guess(h.root);
            h.lora_targets = a ? a->lora : qv;
            h.n_lora_targets = a ? a->n_lora : sizeof qv / sizeof *qv;
            /* get_peft_model raises "Please specify `target_modules`" */
            if (!h.n_lora_targets)
                hf_refuse(&h, DM_REFUSE_LORA_NO_DEFAULT, a ? a->type : "?", NULL);
            g->lora_default = h.lora_targets;
            g->n_lora_default = h.n_lora_targets;
        }
        h.lora_hits = h.st == DNNMEM_OK ? calloc(h.n_lora_targets, sizeof *h.lora_hits) : NULL;
        if (h.st == DNNMEM_OK && !h.lora_hits)
            h.st = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    /* gradient checkpointing in training turns use_cache off (LlamaModel.forward
     * and the others of 4.51): built as a config that says so */
    bool ckpt = opt && opt->mode == DNNMEM_MODE_TRAIN && opt->n_checkpoint > 0;
    h.ckpt = ckpt;
    json_t *own = NULL; /* the copy that says so: the model's root is shared by its builds */
    if (h.st == DNNMEM_OK && (hf_kbit_gc(&h) || ckpt)) {
        h.root = own = json_deep_copy(root);
        json_t *text = json_object_get(own, "text_config");
        if (!own || json_object_set_new(own, "use_cache", json_false()) ||
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
            s = hf_refuse(&h, DM_REFUSE_LORA_TARGET, h.lora_targets[k], NULL);
    /* get_peft_model freezes the model: only the adapters train */
    for (int32_t i = 0; s == DNNMEM_OK && h.lora && i < g->n_tensors; i++)
        if (g->tensors[i].role == DM_ROLE_WEIGHT)
            g->tensors[i].frozen = !strstr(g->tensors[i].name, ".lora_");
    json_decref(own);
    free(h.scopes);
    dm_arena_free(&h.names_arena);
    free(h.lora_hits);
    /* a refusal: the graph as far as it was built, with its refusal, for the
     * estimate's check table (DM_CHECK_GRAPH) to turn into the error */
    return h.refused ? DNNMEM_OK : s;
}

enum dnnmem_status dm_load_hf(struct dm_graph *g, json_t *root, bool sdpa,
                              const struct dnnmem_config *opt, const struct dm_hf_env *env,
                              struct dnnmem_error *err)
{
    return load(g, root, sdpa, opt, env, false, err);
}

enum dnnmem_status dm_load_hf_outline(struct dm_graph *g, json_t *root, struct dnnmem_error *err)
{
    return load(g, root, false, NULL, NULL, true, err);
}

bool dm_is_hf(json_t *root)
{
    /* the fields model_type() resolves a model type from, and vocab_size
     * (a config whose type it cannot resolve: its own error, E_MODEL) */
    return json_object_get(root, "model_type") || json_object_get(root, "architectures") ||
           json_object_get(root, "vocab_size") ||
           (json_object_get(root, "n_embd") && json_object_get(root, "n_layer"));
}
