/*
 * kbit.c (src/load/hf/): prepare_model_for_kbit_training.
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
 * with prep32 every activation is float32 (hf_node() marks them) but Linear4bit's
 * compute copies (hf_qlinear() unmarks them). */
#include "hf.h"

/* Whether prepare_model_for_kbit_training turns gradient checkpointing on:
 * bitsandbytes (--quant, or quant_method bitsandbytes) and gptq. Read from
 * the config before the model is built: use_cache depends on it. */
bool hf_kbit_gc(const struct hf *h)
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
            hf_oom(h);
        return glob;
    }
    return NULL;
}

/* After the build, with --kbit-prep: the leaf that enable_input_require_grads
 * makes, the layers gradient_checkpointing_enable wraps, and what the
 * assumption line says. */
void hf_kbit_finish(struct hf *h)
{
    struct dm_graph *g = h->g;
    struct quant *q = &h->q;
    if (h->st != DNNMEM_OK)
        return;
    bool gc = h->kbit == DNNMEM_KBIT_PREP &&
              (q->method == Q_BNB4 || q->method == Q_BNB8 || q->method == Q_GPTQ);
    if (gc && (h->arch->flags & HF_NO_GC)) {
        hf_refuse(h, DM_REFUSE_KBIT_NO_GC, NULL, NULL);
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
            hf_fail(h, DNNMEM_E_INTERNAL, "--kbit-prep: no input embeddings found");
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
                hf_refuse(h, DM_REFUSE_KBIT_LISTS, NULL, NULL);
                return;
            }
            g->kbit_ckpt[g->n_kbit_ckpt++] = glob;
        }
        if (!g->n_kbit_ckpt && h->st == DNNMEM_OK) {
            hf_refuse(h, DM_REFUSE_KBIT_NO_LIST, NULL, NULL);
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
        hf_oom(h);
}
