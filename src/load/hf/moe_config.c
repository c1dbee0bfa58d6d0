/*
 * moe_config.c (src/load/hf/): the mixture-of-experts families' entry (Mixtral,
 * Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3): their config read into struct moe
 * (and struct mla), then the Llama decoder of llama.c, which builds each
 * layer's block with moe.c and deepseek.c. See moe.c for the blocks.
 */
#include "hf.h"

/* A count that may be 0 (first_k_dense_replace); explicit null is 0 too. */
static int64_t get_count(struct hf *h, const char *key, int64_t dflt, int64_t max)
{
    json_t *v = json_object_get(h->root, key);
    if (h->st == DNNMEM_OK && v && (json_is_null(v) || (json_is_integer(v) && json_integer_value(v) == 0)))
        return 0;
    return hf_get_int(h, key, dflt, max);
}

/* The MoE families' fields (defaults of MixtralConfig, Qwen2MoeConfig,
 * Qwen3MoeConfig, DeepseekV2Config, DeepseekV3Config) on top of the Llama
 * family's. */
static void read_moe(struct hf *h, const char *type, struct llama *c, struct moe *m, struct mla *a)
{
    bool mixtral = strcmp(type, "mixtral") == 0, qwen2 = strcmp(type, "qwen2_moe") == 0,
         qwen3 = strcmp(type, "qwen3_moe") == 0, v3 = strcmp(type, "deepseek_v3") == 0;
    bool ds = !mixtral && !qwen2 && !qwen3;
    hf_read_llama(h, type, c);
    if (h->st != DNNMEM_OK)
        return;
    m->sparse_step = m->freq = 1;
    if (mixtral) {
        m->kind = MOE_MIXTRAL;
        m->experts = hf_get_int(h, "num_local_experts", 8, 1 << 16);
        m->top_k = hf_get_int(h, "num_experts_per_tok", 2, 1 << 16);
        m->inter = c->inter;
        m->norm_topk = true;
        if (hf_get_num(h, "router_jitter_noise", 0.0, 0, 1) > 0)
            hf_fail(h, DNNMEM_E_UNSUPPORTED,
                    "config field 'router_jitter_noise' is above 0; the jittered input is not modelled");
    } else if (!ds) {
        m->kind = MOE_QWEN;
        m->experts = hf_get_int(h, "num_experts", qwen2 ? 60 : 128, 1 << 16);
        m->top_k = hf_get_int(h, "num_experts_per_tok", qwen2 ? 4 : 8, 1 << 16);
        m->inter = hf_get_int(h, "moe_intermediate_size", qwen2 ? 1408 : 768, MAX_SIZE);
        m->shared_inter = qwen2 ? hf_get_int(h, "shared_expert_intermediate_size", 5632,
                                             MAX_SIZE) : 0;
        m->shared_gate = qwen2;
        m->norm_topk = hf_get_bool(h, "norm_topk_prob", false);
        m->sparse_step = hf_get_int(h, "decoder_sparse_step", 1, MAX_LAYERS);
        json_t *only = hf_field(h, "mlp_only_layers");
        if (only && !json_is_array(only))
            hf_fail(h, DNNMEM_E_MODEL,
                    "config field 'mlp_only_layers' must be a list of layer indices");
        m->mlp_only = only;
        /* Qwen2MoeAttention: q, k, v biases (4.51); Qwen3-MoE as Qwen3 */
        c->qkv_bias = qwen2 ? hf_get_bool(h, "qkv_bias",
                                          true) : hf_get_bool(h, "attention_bias", false);
        c->o_bias = qwen3 && hf_get_bool(h, "attention_bias", false);
        c->qk_norm = qwen3;
    } else {
        m->kind = MOE_DEEPSEEK;
        m->v2 = !v3;
        m->experts = hf_get_int(h, "n_routed_experts", v3 ? 256 : 160, 1 << 16);
        m->top_k = hf_get_int(h, "num_experts_per_tok", v3 ? 8 : 6, 1 << 16);
        m->inter = hf_get_int(h, "moe_intermediate_size", v3 ? 2048 : 1407, MAX_SIZE);
        int64_t shared = get_count(h, "n_shared_experts", v3 ? 1 : 2, 1 << 16);
        if (h->st == DNNMEM_OK && !dm_mul_ok(shared, m->inter, &m->shared_inter))
            hf_fail(h, DNNMEM_E_UNSUPPORTED, "config field 'n_shared_experts' is too large");
        m->first_dense = get_count(h, "first_k_dense_replace", v3 ? 3 : 0, MAX_LAYERS);
        m->freq = hf_get_int(h, "moe_layer_freq", 1, MAX_LAYERS);
        m->norm_topk = hf_get_bool(h, "norm_topk_prob", v3);
        m->scale = hf_get_num(h, "routed_scaling_factor", v3 ? 2.5 : 1.0, 0, 1e6);
        m->groups = hf_get_int(h, "n_group", v3 ? 8 : 1, 1 << 16);
        m->topk_group = hf_get_int(h, "topk_group", v3 ? 4 : 1, 1 << 16);
        const char *sf = hf_get_str(h, "scoring_func", v3 ? "sigmoid" : "softmax");
        const char *tm = hf_get_str(h, "topk_method", v3 ? "noaux_tc" : "greedy");
        if (h->st == DNNMEM_OK && strcmp(sf, "softmax") != 0 && strcmp(sf, "sigmoid") != 0)
            hf_fail(h, DNNMEM_E_UNSUPPORTED,
                    "config field 'scoring_func' is '%s'; modelled: softmax, sigmoid", sf);
        m->sigmoid = strcmp(sf, "sigmoid") == 0;
        m->method = strcmp(tm, "noaux_tc") == 0                 ? TOPK_NOAUX_TC
                    : strcmp(tm, "group_limited_greedy") == 0 ? TOPK_GROUP_LIMITED
                                                                : TOPK_GREEDY;
        if (h->st == DNNMEM_OK && m->method == TOPK_GREEDY && strcmp(tm, "greedy") != 0)
            hf_fail(h, DNNMEM_E_UNSUPPORTED,
                    "config field 'topk_method' is '%s'; modelled: greedy, group_limited_greedy, "
                    "noaux_tc", tm);
        if (h->st == DNNMEM_OK && m->method != TOPK_GREEDY &&
            (m->experts % m->groups || m->topk_group > m->groups ||
             (m->method == TOPK_NOAUX_TC && m->experts / m->groups < 2)))
            hf_fail(h, DNNMEM_E_MODEL,
                    "config fields 'n_group' (%lld) and 'topk_group' (%lld) do not split "
                    "'n_routed_experts' (%lld) into groups",
                    (long long)m->groups, (long long)m->topk_group, (long long)m->experts);
        if (hf_get_int(h, "ep_size", 1, 1 << 20) != 1)
            hf_fail(h, DNNMEM_E_UNSUPPORTED,
                    "config field 'ep_size' is above 1; expert parallelism is not modelled");
        /* multi-head latent attention */
        json_t *ql = json_object_get(h->root, "q_lora_rank");
        a->q_lora = ql && json_is_null(ql) ? 0 : hf_get_int(h, "q_lora_rank", 1536, MAX_SIZE);
        a->kv_lora = hf_get_int(h, "kv_lora_rank", 512, MAX_SIZE);
        a->nope = hf_get_int(h, "qk_nope_head_dim", 128, MAX_SIZE);
        a->rope = hf_get_int(h, "qk_rope_head_dim", 64, MAX_SIZE);
        a->v = hf_get_int(h, "v_head_dim", 128, MAX_SIZE);
        a->bias = hf_get_bool(h, "attention_bias", false);
        a->complex_rope = !v3;
        a->interleave = v3 && hf_get_bool(h, "rope_interleave", true);
        if (h->st == DNNMEM_OK && a->rope % 2)
            hf_fail(h, DNNMEM_E_MODEL, "config field 'qk_rope_head_dim' (%lld) must be even",
                    (long long)a->rope);
        if (h->st == DNNMEM_OK && c->kv_heads != c->heads)
            hf_fail(h, DNNMEM_E_UNSUPPORTED,
                    "config field 'num_key_value_heads' (%lld) differs from 'num_attention_heads' "
                    "(%lld); MLA is modelled with one key and value per head",
                    (long long)c->kv_heads, (long long)c->heads);
        c->head_dim = a->rope; /* DeepseekV3Config.head_dim: the rotary embedding's size */
        c->qkv_bias = c->o_bias = false;
        c->mla = a;
        /* rope_scaling: yarn (both DeepSeek configs) changes inv_freq's values
         * and scales cos and sin by a constant: the same tensors */
        json_t *rs = hf_field(h, "rope_scaling");
        if (rs) {
            json_t *t = json_object_get(rs, "rope_type");
            if (!t)
                t = json_object_get(rs, "type");
            const char *kind = json_is_string(t) ? json_string_value(t) : "?";
            if (strcmp(kind, "yarn") != 0 && strcmp(kind, "default") != 0 &&
                strcmp(kind, "linear") != 0)
                hf_fail(h, DNNMEM_E_UNSUPPORTED,
                        "config field 'rope_scaling' has type '%s'; modelled: yarn, linear, default",
                        kind);
        }
    }
    if (h->st == DNNMEM_OK && m->top_k > m->experts)
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'num_experts_per_tok' (%lld) exceeds the experts (%lld)",
                (long long)m->top_k, (long long)m->experts);
    /* output_router_logits: the causal LM returns every sparse layer's router
     * logits and adds router_aux_coef x load_balancing_loss_func(...) to the
     * loss (MixtralForCausalLM / Qwen2MoeForCausalLM / Qwen3MoeForCausalLM
     * of 4.51; config default coefficient 0.001 for each) */
    m->aux = hf_get_bool(h, "output_router_logits", false);
    m->aux_coef = hf_get_num(h, "router_aux_loss_coef", 0.001, 0, 1e6);
    if (m->aux && m->kind == MOE_DEEPSEEK)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'output_router_logits' is true; DeepSeek's causal LM in transformers "
                "4.51 computes no auxiliary loss from it");
    c->mlp_bias = false;
    c->moe = m;
}

enum dnnmem_status hf_moe(struct hf *h, const char *type)
{
    struct llama c = {0};
    struct moe m = {0};
    struct mla a = {0};
    if (!hf_check(h, type))
        return h->st;
    read_moe(h, type, &c, &m, &a);
    return hf_llama_lm(h, type, &c);
}
