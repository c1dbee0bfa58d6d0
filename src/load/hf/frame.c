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

/* ---- the decoders' task heads (struct hf_task) ----
 *
 * transformers 4.56.2 and 5.24.0 (their modeling files read): the heads a
 * model type has are the registry's `heads`; their graphs are the same in
 * both. Sequence classification (GenericForSequenceClassification,
 * modeling_layers.py, and GPT-2's, OPT's, GPT-NeoX's and Falcon's own
 * classes): score, nn.Linear(hidden, num_labels, bias=False), on every
 * position [B, S, num_labels], then each row's last non-pad token,
 * logits[arange(B), last] (an index gather: a [B, num_labels] copy; with
 * pad_token_id, (arange(S, int32) * (input_ids != pad).int()).argmax(-1);
 * without, -1, and transformers refuses batches above 1); it returns the
 * pooled logits and the cache; the loss cross-entropy of the pooled logits
 * (MSELoss for num_labels 1). Token classification: dropout (the config's
 * classifier_dropout, else hidden_dropout, else 0.1: GenericFor-
 * TokenClassification, GPT-2's, Falcon's; GPT-NeoX's Dropout(
 * classifier_dropout), whose config class defaults it to 0.1, so the same
 * rule) and a Linear(hidden, num_labels) with a bias (5.24's generic class
 * reads token_classification_bias, default true; 4.56.2's and 5.0.0's have
 * no such field; GPT-2's, GPT-NeoX's and Falcon's always have one) to
 * [B, S, num_labels],
 * named score (generic) or classifier (own classes), its loss on
 * logits.float() where the loss is transformers' ForTokenClassification
 * (loss_utils.py: the generic class and GPT-NeoX's) and on the logits as
 * they are where the class calls CrossEntropyLoss (GPT-2, Falcon). Question
 * answering: qa_outputs, Linear(hidden, 2) with a bias, split into start and
 * end logits (hf_qa_logits), the loss (start + end) / 2. Token
 * classification and question answering return no cache: the model makes
 * it (use_cache) and it is let go when the head's forward returns. */
static const char *const task_suffix[HF_TASK_N] = {
    "ForCausalLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering"};

/* The model types whose heads are their own classes (else the generic
 * ones); the config classes' defaults of classifier_dropout and
 * hidden_dropout (-1: the class has no such attribute). */
static const struct task_style {
    const char *type;
    const char *tok_module;
    bool tok_upcast;
    double cls_drop, hidden_drop;
} task_styles[] = {
    {"gpt2", "classifier", false, -1, -1},
    {"gpt_neox", "classifier", true, 0.1, 0.0}, /* GPTNeoXConfig */
    {"falcon", "classifier", false, -1, 0.0},   /* FalconConfig */
};

/* The config's value of a dropout field, else its class default `dflt`
 * (-1: none). */
static double task_drop_field(struct hf *h, const char *key, double dflt)
{
    json_t *v = json_object_get(h->root, key);
    if (!v)
        return dflt;
    return json_is_null(v) ? -1 : hf_get_num(h, key, 0, 0, 1);
}

/* What the head needs from the config. */
static void read_task_fields(struct hf *h, const char *cls)
{
    struct hf_task *t = &h->task;
    const struct task_style *st = NULL;
    for (size_t i = 0; i < sizeof task_styles / sizeof *task_styles; i++)
        if (strcmp(task_styles[i].type, h->arch->type) == 0)
            st = &task_styles[i];
    h->g->head = dm_arena_strdup(&h->g->arena, cls);
    t->labels = t->kind == HF_TASK_QA ? 2 : hf_num_labels(h);
    t->pad = -1;
    if (t->kind == HF_TASK_SEQCLS) {
        json_t *pad = json_object_get(h->root, "pad_token_id");
        json_int_t pv = json_is_integer(pad) ? json_integer_value(pad) : -1;
        t->pad = pv >= 0 && pv < MAX_SIZE ? (int64_t)pv : -1; /* any id; -1: none */
        if (json_is_integer(pad) && t->pad < 0)
            hf_fail(h, DNNMEM_E_MODEL, "config field 'pad_token_id' (%lld) is out of range",
                    (long long)pv);
    }
    if (t->kind != HF_TASK_TOKCLS)
        return;
    double cd = task_drop_field(h, "classifier_dropout", st ? st->cls_drop : -1);
    double hd = task_drop_field(h, "hidden_dropout", st ? st->hidden_drop : -1);
    t->drop = cd >= 0 ? cd : hd >= 0 ? hd : 0.1;
    t->module = st ? st->tok_module : "score";
    t->upcast = st ? st->tok_upcast : true;
    /* token_classification_bias: read by 5.24.0's generic class, not by
     * 5.0.0's nor 4.56.2's (always a bias); the release in between that
     * added it was not read: a false there is an error */
    bool bias = st || hf_get_bool(h, "token_classification_bias", true);
    if (!bias && h->transformers <= 500)
        bias = true;
    else if (!bias && h->transformers < 524)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'token_classification_bias' is false: transformers 5.24 reads it, "
                "5.0 does not; --transformers %d.%d's %s is not modelled",
                h->transformers / 100, h->transformers % 100, cls);
    t->bias = bias;
}

/* The heads of the model type's row, for an error: "LlamaForCausalLM,
 * LlamaForSequenceClassification, ..." into buf. */
static const char *task_list(const struct hf *h, char *buf, size_t n)
{
    const char *cls = h->arch->cls ? h->arch->cls : "";
    size_t at = 0;
    for (int k = 0; k < HF_TASK_N; k++)
        if (k == HF_TASK_LM || (h->arch->heads & HF_HEAD(k))) {
            int w = snprintf(buf + at, n - at, "%s%s%s", at ? ", " : "", cls,
                             k == HF_TASK_LM && strcmp(h->arch->type, "gpt2") == 0 ? "LMHeadModel"
                                                                                   : task_suffix[k]);
            if (w < 0 || (size_t)w >= n - at)
                break;
            at += (size_t)w;
        }
    return buf;
}

/* `architectures`, when given, names the causal LM (...ForCausalLM,
 * ...LMHeadModel, any prefix) or one of the row's heads (the row's class
 * prefix); anything else is an error listing what the type has. */
static void read_task(struct hf *h)
{
    json_t *arch = json_object_get(h->root, "architectures");
    h->task = (struct hf_task){.kind = HF_TASK_LM, .pad = -1};
    if (!arch || json_is_null(arch))
        return;
    if (!json_is_array(arch)) {
        hf_fail(h, DNNMEM_E_MODEL, "config field 'architectures' must be a list");
        return;
    }
    size_t i, n = h->arch->cls ? strlen(h->arch->cls) : 0;
    json_t *a;
    const char *other = NULL;
    json_array_foreach(arch, i, a)
    {
        const char *s = json_is_string(a) ? json_string_value(a) : "";
        size_t len = strlen(s);
        if ((len >= 11 && strcmp(s + len - 11, "ForCausalLM") == 0) ||
            (len >= 11 && strcmp(s + len - 11, "LMHeadModel") == 0))
            return;
        for (int k = HF_TASK_SEQCLS; n && k < HF_TASK_N && !other; k++)
            if ((h->arch->heads & HF_HEAD(k)) && strncmp(s, h->arch->cls, n) == 0 &&
                strcmp(s + n, task_suffix[k]) == 0) {
                h->task.kind = (enum hf_task_kind)k;
                if (h->transformers < DM_TRANSFORMERS_WIDE)
                    hf_fail(h, DNNMEM_E_UNSUPPORTED,
                            "config field 'architectures' names %s: --transformers %d.%d's task "
                            "heads are not modelled; they are built from transformers 4.51",
                            s, h->transformers / 100, h->transformers % 100);
                read_task_fields(h, s);
                return;
            }
        other = other ? other : s;
    }
    char buf[256];
    if (other)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'architectures' names %s; for model_type '%s' the heads built are %s",
                other, h->arch->type, task_list(h, buf, sizeof buf));
}

/* A classification head's labels. PretrainedConfig's num_labels is
 * len(id2label) when the config has an id2label, else its num_labels
 * (default 2); where both are given and disagree, transformers up to 5.0.0
 * keeps id2label's (PretrainedConfig.from_dict: "The number of labels will
 * be overwritten"), 5.24.0 num_labels (the num_labels setter remakes
 * id2label; measured: from_dict of a config with 2 entries and num_labels 5
 * gives 5). The release in between that changed it was not read: there it
 * is an error. */
int64_t hf_num_labels(struct hf *h)
{
    json_t *labels = json_object_get(h->root, "id2label");
    int64_t n = hf_get_int(h, "num_labels", 2, MAX_SIZE);
    if (!json_is_object(labels) || json_object_size(labels) == 0)
        return n;
    int64_t in_map = (int64_t)json_object_size(labels);
    if (!json_object_get(h->root, "num_labels") || n == in_map || h->transformers <= 500)
        return in_map;
    if (h->transformers < 524)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config fields 'num_labels' (%lld) and 'id2label' (%lld entries) disagree: "
                "transformers 5.0 takes id2label's, 5.24 num_labels; --transformers %d.%d's "
                "choice is not modelled (make them agree)",
                (long long)n, (long long)in_map, h->transformers / 100, h->transformers % 100);
    return n;
}

/* ForQuestionAnswering's qa_outputs [B, S, 2] split into start and end
 * logits: logits.split(1, dim=-1), each .squeeze(-1).contiguous(), a [B, S]
 * copy each (modeling_bert.py and its copies, modeling_layers.py's
 * GenericForQuestionAnswering, 4.51-5.24); *end (may be NULL) gets the end
 * logits. */
int32_t hf_qa_logits(struct hf *h, int32_t x, int64_t E, int32_t *end)
{
    size_t s = hf_enter(h, "qa_outputs");
    int32_t y = hf_linear(h, x, E, 2, true, -1, NULL);
    hf_leave(h, s);
    struct dm_node *n = hf_node(h, DM_OP_Split, 2, (int32_t[]){y, hf_const_ints(h, INTS(1, 1))}, 2);
    if (!n)
        return -1;
    int32_t part[2] = {n->out[0], n->out[1]};
    hf_attr_i(h, "axis", -1);
    int32_t last = hf_const_ints(h, INTS(-1)); /* made before out_name names the next */
    h->out_name = "start_logits";
    int32_t start = hf_op(h, DM_OP_Squeeze, 2, part[0], last);
    h->out_name = "end_logits";
    int32_t e = hf_op(h, DM_OP_Squeeze, 2, part[1], last);
    if (end)
        *end = e;
    /* the model's loss: (CE(start) + CE(end)) / 2 against clamped positions */
    h->g->loss_terms = 2;
    return start;
}

/* Sequence classification's pooled logits (above). */
static int32_t seqcls_pool(struct hf *h, int32_t x, int64_t E)
{
    const struct hf_task *t = &h->task;
    int32_t ids = t->ids;
    size_t s = hf_enter(h, "score");
    int32_t logits = hf_linear(h, x, E, t->labels, false, -1, NULL);
    hf_leave(h, s);
    int32_t zero = hf_const_i(h, 0), one = hf_const_i(h, 1);
    int32_t b = hf_op(h, DM_OP_Shape, 1, ids);
    hf_attr_i(h, "end", 1);
    int32_t rows = hf_op(h, DM_OP_Range, 3, zero, b, one); /* torch.arange(batch_size) */
    int32_t last;
    if (t->pad >= 0) {
        int32_t seq = hf_op(h, DM_OP_Shape, 1, ids);
        hf_attr_i(h, "start", 1);
        hf_attr_i(h, "end", 2);
        int32_t np = hf_op(h, DM_OP_Not, 1, hf_op(h, DM_OP_Equal, 2, ids, hf_const_i(h, t->pad)));
        np = hf_op(h, DM_OP_Cast, 1, np);
        hf_attr_i(h, "to", DM_INT32);
        int32_t tok = hf_op(h, DM_OP_Cast, 1, hf_op(h, DM_OP_Range, 3, zero, seq, one));
        hf_attr_i(h, "to", DM_INT32);
        last = hf_op(h, DM_OP_ArgMax, 1, hf_op(h, DM_OP_Mul, 2, tok, np));
        hf_attr_i(h, "axis", -1);
        hf_attr_i(h, "keepdims", 0);
    } else { /* last_non_pad_token = -1 */
        last = hf_op(h, DM_OP_Sub, 2, hf_op(h, DM_OP_Mul, 2, rows, zero), one);
    }
    int32_t idx = hf_op(h, DM_OP_Concat, 2, hf_unsqueeze(h, rows, INTS(1)),
                        hf_unsqueeze(h, last, INTS(1)));
    hf_attr_i(h, "axis", 1);
    h->out_name = "logits";
    return hf_op(h, DM_OP_GatherND, 2, logits, idx);
}

/* The task head h->task names on the base model's last hidden state x
 * [B, S, E] (the first output: the logits, QA's start logits). */
int32_t hf_task_head(struct hf *h, int32_t x, int64_t E)
{
    const struct hf_task *t = &h->task;
    if (t->kind == HF_TASK_SEQCLS)
        return seqcls_pool(h, x, E);
    if (t->kind == HF_TASK_QA)
        return hf_qa_logits(h, x, E, NULL);
    x = hf_dropout(h, x, t->drop);
    size_t s = hf_enter(h, "%s", t->module);
    x = hf_linear(h, x, E, t->labels, t->bias, -1, "logits");
    hf_leave(h, s);
    return x;
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
        read_task(h);
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
    h->task.ids = hf_input_ids(h, 2 + (use_cache ? (parts ? 4 : 2) * (size_t)layers : 0));
    return h->task.ids;
}

/* A token-classification or question-answering head's outputs: its logits
 * (QA: start and end), not the cache, whose keys and values (and the parts
 * of fused projections their views keep) live until the head's forward
 * returns. */
static enum dnnmem_status task_outputs(struct hf *h, int32_t logits, int64_t layers, bool use_cache)
{
    struct dm_graph *g = h->g;
    g->loss_upcast = h->task.kind == HF_TASK_TOKCLS && h->task.upcast;
    for (int64_t i = 0; use_cache && !g->cache_len && i < layers; i++)
        for (int j = 0; j < 4; j++) {
            char name[64];
            if (j < 2)
                snprintf(name, sizeof name, "present.%lld.%s", (long long)i, j ? "value" : "key");
            else
                snprintf(name, sizeof name, "present.%lld.qkv.%d", (long long)i, j - 2);
            hf_hold(h, dm_graph_find(g, name), hf_last_node(h));
        }
    g->tensors[logits].is_output = true;
    g->outputs[g->n_outputs++] = logits;
    if (h->task.kind == HF_TASK_QA) {
        int32_t end = dm_graph_find(g, "end_logits");
        if (end < 0)
            return hf_fail(h, DNNMEM_E_INTERNAL, "no tensor 'end_logits'");
        g->tensors[end].is_output = true;
        g->outputs[g->n_outputs++] = end;
    }
    return hf_finish(h);
}

/* A causal LM's outputs: the logits, then with use_cache the presents
 * (hf_causal_ids); a task head's (hf_task_head): sequence classification's
 * pooled logits and the presents, the others' task_outputs. */
enum dnnmem_status hf_causal_outputs(struct hf *h, int32_t logits, int64_t layers, bool use_cache,
                                     bool parts)
{
    struct dm_graph *g = h->g;
    if (h->st != DNNMEM_OK)
        return h->st;
    if (h->task.kind == HF_TASK_TOKCLS || h->task.kind == HF_TASK_QA)
        return task_outputs(h, logits, layers, use_cache);
    if (h->task.kind == HF_TASK_SEQCLS) { /* SequenceClassifierOutputWithPast */
        g->loss_upcast = false;
        g->seqcls_no_pad = h->task.pad < 0;
        g->loss_mse = h->task.labels == 1;
    }
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

