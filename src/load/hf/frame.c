/*
 * frame.c (src/load/hf/): what every family's builder does around its own
 * layers, in order: hf_check (the architectures, --attn flash, the
 * quantization), hf_begin (the graph's description), the inputs
 * (hf_input_ids, hf_causal_ids), the outputs (hf_encoder_outputs,
 * hf_causal_outputs) and hf_finish. hf.c's registry calls the families,
 * which stand on this and on builder.c.
 */
#include "hf.h"

#include <string.h>

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
    int oldest = h->arch->oldest ? h->arch->oldest : DM_TRANSFORMERS_WIDE;
    /* a model type that came after the release the graph is loaded as
     * (DM_TRANSFORMERS_BASE): the outline and the graph as loaded are its
     * oldest release's, and every estimate rebuilds (g->hf_oldest, check.c),
     * so one at an older release is refused below */
    if (oldest > DM_TRANSFORMERS_BASE)
        h->g->hf_oldest = oldest;
    if (h->as_loaded && h->transformers < oldest)
        h->transformers = oldest;
    if (h->transformers < oldest) {
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "--transformers %d.%d for model_type '%s' is not modelled: dnnmem builds it from "
                "transformers %d.%d (gpt_neox and opt from 4.40; llama, mistral, gemma and gpt2 "
                "from 4.48; gpt_oss from 4.56; the other model types from 4.51)",
                h->transformers / 100, h->transformers % 100, type, oldest / 100, oldest % 100);
        return false;
    }
    /* GPTNeoXFlashAttention2 and OptFlashAttention2, their own classes before
     * the attention interface (4.49), are not modelled */
    bool own_flash = strcmp(type, "gpt_neox") == 0 || strcmp(type, "opt") == 0;
    if (h->flash && own_flash && h->transformers < 449) {
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "--attn flash: transformers %d.%d's flash_attention_2 for model_type '%s' (its "
                "own %s class before 4.49) is not modelled; use --attn sdpa or eager",
                h->transformers / 100, h->transformers % 100, type,
                strcmp(type, "opt") == 0 ? "OptFlashAttention2" : "GPTNeoXFlashAttention2");
        return false;
    }
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
        hf_refuse(h, DM_REFUSE_FLASH_RELEASE, NULL, NULL); /* the release: the check row's */
        return false;
    }
    if (h->flash && !h->arch->flash) {
        hf_refuse(h, DM_REFUSE_FLASH_MODEL, type, NULL);
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
/* input_ids int64 [batch, seq], or with `choices` [batch, choices, seq]. */
static int32_t ids_input(struct hf *h, size_t n_out, bool choices)
{
    struct dm_graph *g = h->g;
    int rank = choices ? 3 : 2;
    int32_t ids = dm_graph_add_tensor(g, "input_ids");
    struct dm_dim *d = dm_arena_array(&g->arena, (size_t)rank, sizeof *d);
    int32_t sb = dm_graph_symbol(g, "batch"), sq = dm_graph_symbol(g, "seq");
    int32_t sc = choices ? dm_graph_symbol(g, "choices") : 0;
    g->inputs = dm_arena_array(&g->arena, 1, sizeof *g->inputs);
    g->outputs = dm_arena_array(&g->arena, n_out, sizeof *g->outputs);
    if (ids < 0 || !d || sb < 0 || sq < 0 || sc < 0 || !g->inputs || !g->outputs)
        return hf_oom(h);
    d[0] = (struct dm_dim){-1, sb};
    if (choices)
        d[1] = (struct dm_dim){-1, sc};
    d[rank - 1] = (struct dm_dim){-1, sq};
    g->tensors[ids] = (struct dm_tensor){.name = g->tensors[ids].name, .dtype = DM_INT64,
                                         .rank = rank, .dims = d, .role = DM_ROLE_INPUT,
                                         .producer = -1};
    g->inputs[g->n_inputs++] = ids;
    return ids;
}

int32_t hf_input_ids(struct hf *h, size_t n_out)
{
    return ids_input(h, n_out, false);
}

/* A multiple-choice head's input_ids [batch, choices, seq] (symbol
 * "choices", --dim choices=N), flattened as its forward does
 * (input_ids.view(-1, input_ids.size(-1)): a view [batch x choices, seq]);
 * *choices gets the [choices] shape the logits are viewed with. -1 after an
 * error. */
int32_t hf_choice_ids(struct hf *h, size_t n_out, int32_t *choices)
{
    int32_t ids = ids_input(h, n_out, true);
    if (ids < 0)
        return -1;
    *choices = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 1);
    hf_attr_i(h, "end", 2);
    int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "start", 2);
    int32_t shape = hf_op(h, DM_OP_Concat, 2, hf_const_ints(h, INTS(-1)), seq);
    hf_attr_i(h, "axis", 0);
    return hf_op(h, DM_OP_Reshape, 2, ids, shape);
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
    if (x < 0)
        return hf_fail(h, DNNMEM_E_INTERNAL, "an encoder without an output");
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

