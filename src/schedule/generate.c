/*
 * generate.c: the decode phase of model.generate() on top of the prefill
 * (the forward pass of the prompt, which schedule.c has just run with the
 * present keys and values held as outputs).
 *
 * What transformers 4.51 (GenerationMixin._sample, greedy, DynamicCache; beam
 * search and sampling below the table) asks
 * the allocator for at each new token, with L the cache length after it
 * (T new tokens take T forwards: the prefill makes the first, decode step s
 * (1 <= s < T) the (s+1)-th with the cache at P + s; after the last forward
 * only the sampling's copy of its logits is made):
 *  - next_token_logits = outputs.logits[:, -1, :].to(copy=True,
 *    dtype=float32): a [B, V] float32 copy, made before the previous one is
 *    dropped (the name is rebound), then `del outputs` frees the logits;
 *  - per layer, DynamicCache.update: key_cache[l] = torch.cat([old, new],
 *    dim=-2), a fresh [B, K, L, D] tensor, and the old one freed; the same
 *    for values;
 *  - per layer, the attention over the cache: repeat_kv's copies to [B, H,
 *    L, D] of the keys and values when H != K (eager and sdpa alike in
 *    4.51); eager adds the scores [B, H, 1, L], the mask added to them, the
 *    float32 softmax and its cast back;
 *  - the logits of the step, [B, 1, V];
 *  - generate's attention_mask and input_ids, int64 [B, L], each grown by a
 *    torch.cat per token, and (eager) the forward's 4-D mask [B, 1, 1, L]
 *    (the table below: a clone of the expanded [1, L] one, or the legacy
 *    models' inverted mask).
 * The step's other tensors ([B, 1, hidden] and [B, 1, intermediate], and a
 * mixture-of-experts block's few rows per expert) are not modelled: they
 * are smaller than one layer's cache row by the batch. Keys and values may
 * differ in head size (DeepSeek's latent attention caches decompressed keys
 * of qk_nope + qk_rope and values of v_head_dim): each grows with its own.
 * Steps simulated: the first (the prefill's logits and cache let go), then
 * the last eight (seven forwards and the final sampling), the cache growing
 * from P + 1 to P + T - 7 in one update
 * between them: the peak is at the end, and the steps in between only
 * add and drop cached blocks of smaller sizes (T x layers events would make
 * a long generation cost seconds).
 * The prefill itself keeps the logits of the last prompt position only
 * where the forward takes logits_to_keep (generate passes logits_to_keep=1
 * to a model whose forward has the argument, _supports_logits_to_keep;
 * g->logits_to_keep): otherwise the lm_head computes every position's, held
 * until `del outputs` after the first sampling.
 * Which cache generate() makes is the model class's: one with
 * _supports_cache_class (and no cache_implementation in its config) gets a
 * DynamicCache from _prepare_cache_for_generation (the window of
 * Mistral, Qwen2/3, Mixtral or Phi-3 only masks the scores, the cache keeps
 * every position); one without gets none, and the cache is the tuple of
 * presents its forward returns (g->legacy_cache, below); Gemma 2 and Gemma 3,
 * whose configs say "hybrid", get a HybridCache (hybrid_decode below).
 * Per family in transformers 4.51.x (the exact release is not in the
 * searchable index: each row is read off copies dated around it and the
 * pull requests that changed it; confidence in the last column):
 *
 *  model_type               cache         logits_to_keep  eager mask    sure
 *  llama, mistral, qwen2,   DynamicCache  yes             causal clone  high
 *    qwen3
 *  mixtral, qwen2_moe,      DynamicCache  yes             causal clone  high
 *    qwen3_moe
 *  deepseek_v2, v3          DynamicCache  yes             causal clone  high
 *  gemma                    DynamicCache  yes             causal clone  high
 *  gemma2, gemma3_text      HybridCache   yes             static mask   high
 *  phi, phi3                DynamicCache  yes             causal clone  high
 *  gpt_neox                 DynamicCache  yes             causal clone  high
 *  falcon                   DynamicCache  yes             causal clone  high
 *  opt                      DynamicCache  no              causal clone  medium-high
 *  gpt2                     legacy tuple  no              inverted      high
 *  biogpt                   legacy tuple  no              inverted      medium-high
 *  t5, mt5                  EncoderDecoderCache  no       (its own)     high
 *
 * How tokens are picked (generate's generation_mode; the same per cache):
 *
 *  cache               greedy  sampling (do_sample)  beam search (num_beams > 1)
 *  DynamicCache        yes     yes (measured)        reorder_cache: per layer keys,
 *                                                    then values (measured)
 *  legacy tuple        yes     yes (measured)        _reorder_cache: the whole tuple
 *                                                    rebuilt (measured, GPT-2)
 *  HybridCache         yes     yes (not measured)    refused (not modelled)
 *  EncoderDecoderCache yes     yes (not measured)    refused (not modelled)
 *
 * Sampling (sample_tokens, pick_tokens) and beam search (dm_sb_generate,
 * dm_sb_generate_setup) are described where they are modelled. Measured
 * against tools/hf_torch.py's re-implementations (greedy_generate /
 * gpt2_greedy_generate with sampling_processors; beam_generate) on PyTorch
 * 1.13's CPU (tests/validation, *-beams* and *-sample-* rows: Llama with
 * GQA, GPT-2 and OPT at vocabulary 8192, batch 2, prompt 64; 16, 48 and
 * 400 new tokens; 2 and 4 beams; top-k 50 with top-p 0.9 or temperature
 * 0.7): all 28 peaks within 0.10% (16 and 48 tokens within 0.02%, 400
 * tokens -0.05% to -0.10%); the decode phases' own peaks within 0.2%
 * (short: the per-token [B x beams, 1, hidden] tensors, unmodelled here as
 * in greedy).
 *
 * Sources: the Llama family, Gemma, Phi and Phi-3 have had Cache classes
 * since they came (the Cache PR, huggingface/transformers #26681, "propagate
 * changes to phi") and logits_to_keep from "Reducing memory usage: removing
 * useless logits computation in generate()" (#31292, num_logits_to_keep,
 * 4.45; renamed logits_to_keep in 4.50: 4.5x copies carry
 * @deprecate_kwarg("num_logits_to_keep", version="4.50")); their 4.51
 * modular files (Gemma on Llama, Phi-3 on Mistral, the MoE models and
 * DeepSeek-V3 on Llama/Mixtral/Qwen2-MoE) inherit both. GPT-NeoX and Falcon
 * took the Cache classes in "Cache: new Cache format in decoder-only models"
 * (#31421, Aug 2024: all decoder-only models but XLNet): a 4.46-4.49
 * modeling_falcon.py sets _supports_cache_class = True and its forward takes
 * num_logits_to_keep; GPTNeoXForCausalLM.forward takes logits_to_keep in
 * optimum-habana's 4.4x-4.5x copy and in the 4.53 modular file. OPT: a
 * rewrite of "transformers 4.51.x's OPTDecoder.forward" takes a
 * DynamicCache and builds _update_causal_mask (GPT-J's copy), but
 * OPTForCausalLM.forward has no logits_to_keep in a 4.54-era type stub of
 * modeling_opt (it appears only in later copies), so the lm_head computes
 * every position (OPT's Cache support followed "Refactor OPT model",
 * #36101, Feb 2025, whose author announced it next). OPT's 4.51
 * _supports_cache_class itself was not found in a copy: without it generate
 * would pass no cache, the forward would return its DynamicCache as tuples
 * (return_legacy_cache) and two caches would be live per step as with GPT-2;
 * hence "medium-high". GPT-2:
 * GPT2PreTrainedModel sets no _supports_cache_class in 4.51: its Cache
 * classes came with "GPT2Model StaticCache support" (#35761, still in
 * review on 22 April 2025, its tuple deprecation aimed at 4.52), and no
 * logits_to_keep was added by then (one was proposed in #41529, Oct 2025).
 * BioGPT: its attention is BART's ("Copied from"), on the past_key_value
 * tuple until "Bart: new cache format" (#35314) and "Refactor Attention
 * Interface for Bart-based Models" (#38108), both reviewed in May 2025,
 * after 4.51 (April 2025); BioGptForCausalLM.forward has no logits_to_keep;
 * its eager 4-D mask is _prepare_4d_causal_attention_mask's, whose
 * _expand_mask turns the 2-D mask into (1 - m.to(dtype)).masked_fill(...,
 * finfo.min). "causal clone" (g->gen_mask DM_GEN_MASK_CAUSAL):
 * _update_causal_mask with generate's 2-D attention_mask, the [q, L]
 * full(finfo.min) times the cache-position comparison, expanded to
 * [B, 1, q, L] and cloned: [B, 1, P, P] in the prefill (the graph's [P, P]
 * made B times as large), [B, 1, 1, L] per decode forward; "inverted"
 * (DM_GEN_MASK_INVERTED): three [B, 1, 1, L] tensors per decode forward, the
 * last held. The hf_decoders.inc builders follow this table
 * (dec_generation); tools/hf_torch.py runs each family's loop so
 * (greedy_generate, gpt2_greedy_generate, hybrid_generate).
 *
 * The legacy tuple cache (GPT2LMHeadModel and BioGptForCausalLM in 4.51,
 * g->legacy_cache) has no Cache class: _prepare_cache_for_generation
 * prepares none, and the cache is the tuple of (key, value) per layer each
 * forward returns. A decode forward's layer does key = torch.cat((past_key,
 * key), dim=-2) (the same for values) into new [B, H, L, D] tensors while
 * the previous tuple stays referenced by model_kwargs (until
 * _update_model_kwargs_for_generation, after the forward) and by
 * model_inputs (until the next step's prepare_inputs_for_generation returns
 * and the name is rebound): both caches, L - 1 and L tokens, are live at the
 * end of every decode forward and through the sampling after it. GPT-2's
 * prefill presents are views of each layer's fused c_attn output [B, P, 3E]
 * (present.N.qkv.J holds the rest), all of which goes at step 2; BioGPT's
 * are the key and value projections' own tensors. GPT-2's eager forward
 * makes generate's mask [B, 1, 1, L] in the model's dtype as (1.0 -
 * mask[:, None, None, :].to(dtype)) * finfo.min (three tensors, the last
 * held; g->gen_mask) and adds it to every layer's scores; the prefill's
 * wpe(position_ids) is [B, P, E].
 */
#include "schedule/builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A variable rebound to a new buffer: the old one is let go. */
/* How many layers have a cache tensor named <prefix><i><suffix>, i = 0, 1, ...
 * (at most limit, the count of the graph inputs or outputs they are among, and
 * small enough that 4 x layers of anything is countable). */
static int32_t cache_layers(const struct dm_graph *g, const char *prefix, const char *suffix,
                            int32_t limit)
{
    int32_t n = 0;
    while (n < limit && n < INT32_MAX / 4) {
        char name[96];
        snprintf(name, sizeof name, "%s%d%s", prefix, n, suffix);
        if (dm_graph_find(g, name) < 0)
            break;
        n++;
    }
    return n;
}

static void rebind(struct dm_sb *b, int32_t *var, int32_t buf)
{
    dm_sb_unref(b, *var);
    *var = buf;
}

/* Element bytes of the decode cache. */
static uint64_t kv_bytes(enum dm_dtype model, enum dnnmem_kv_dtype kv)
{
    switch (kv) {
    case DNNMEM_KV_FP32: return 4;
    case DNNMEM_KV_FP16:
    case DNNMEM_KV_BF16: return 2;
    case DNNMEM_KV_FP8: return 1;
    case DNNMEM_KV_AUTO: break;
    }
    uint64_t one = 0;
    return dm_dtype_bytes(model, 1, &one) ? one : 2;
}

static enum dm_dtype kv_type(enum dm_dtype model, enum dnnmem_kv_dtype kv)
{
    switch (kv) {
    case DNNMEM_KV_FP32: return DM_FLOAT;
    case DNNMEM_KV_FP16: return DM_FLOAT16;
    case DNNMEM_KV_BF16: return DM_BFLOAT16;
    case DNNMEM_KV_FP8: return DM_FLOAT8E4M3FN;
    case DNNMEM_KV_AUTO: break;
    }
    return model;
}

/* The prefill's buffers of the tensor a view named `name` is taken of (the
 * tensor itself when it is no view's) made `batch` times as large: each
 * holds [1, ...] (or the [S, S] an expand's view is taken of) in
 * model(input_ids), [B, ...] in generate. `rank` is the tensor's. */
static void prefill_batch(struct dm_sb *b, const char *name, int rank, int64_t batch)
{
    const struct dm_graph *g = b->g;
    int32_t x = dm_graph_find(g, name);
    if (x < 0 || batch <= 1)
        return;
    int32_t p = g->tensors[x].producer;
    if (p >= 0 && g->nodes[p].op == DM_OP_Unsqueeze && dm_has_in(&g->nodes[p], 0))
        x = g->nodes[p].in[0];
    const struct dm_tinfo *t = &b->t[x];
    if (t->rank != rank || (rank == 3 && t->dims[0] != 1))
        return;
    for (int32_t i = 0; i < b->s->n_buf; i++)
        if (b->s->buf[i].tensor == x && b->s->buf[i].bytes <= UINT64_MAX / (uint64_t)batch)
            b->s->buf[i].bytes *= (uint64_t)batch;
}

/* bytes = a * b * c * d * e, or false on overflow */
static bool mul5(int64_t a, int64_t b, int64_t c, int64_t d, uint64_t e, uint64_t *out)
{
    int64_t x, y, z;
    if (!dm_mul_ok(a, b, &x) || !dm_mul_ok(x, c, &y) || !dm_mul_ok(y, d, &z) ||
        (uint64_t)z > UINT64_MAX / (e ? e : 1))
        return false;
    *out = (uint64_t)z * e;
    return true;
}

/* The attention the prefill graph runs, from its first attention node: the
 * query heads (*H unchanged when there is none), eager (a 4-D Softmax;
 * *upcast when it changes the type, the float32 softmax of a 16-bit model)
 * or a fused kernel (*flash: flash_attention_2's). */
static void attention_kind(const struct dm_graph *g, const struct dm_tinfo *t, int64_t *H,
                           bool *eager, bool *upcast, bool *flash)
{
    *eager = *upcast = *flash = false;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        if (n->op == DM_OP_Attention && dm_has_in(n, 0)) {
            *H = t[n->in[0]].dims[1];
            *flash = dm_attr_int(n, "flash_attn", 0) != 0;
        }
        if (n->op == DM_OP_Softmax && dm_has_in(n, 0) && t[n->in[0]].rank == 4) {
            *eager = true;
            *H = t[n->in[0]].dims[1];
            *upcast = t[n->out[0]].dtype != t[n->in[0]].dtype;
        }
        if (n->op == DM_OP_Softmax || n->op == DM_OP_Attention)
            break;
    }
}

/* The eager scores of one decode token over the cached positions, as
 * eager_attention_forward (4.51) makes them: the matmul, `steps`
 * elementwise results of the scores' size (Gemma 2/3: * scaling, and Gemma
 * 2's / cap, tanh, * cap), + the mask, the softmax (in float32 when
 * `upcast`, then .to the model's dtype); returns the weights, which the
 * caller holds (Gemma's decoder layer to its end, as self_attn_weights). */
static int32_t eager_scores(struct dm_sb *b, enum dm_dtype model, uint64_t scores,
                            uint64_t scores32, int steps, bool upcast)
{
    int32_t w = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, scores, -1, -1, "attn_scores", 1);
    for (int k = 0; k < steps; k++) {
        int32_t n = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, scores, -1, -1, "attn_scores", 1);
        rebind(b, &w, n);
    }
    int32_t m = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, scores, -1, -1, "attn_scores_masked", 1);
    dm_sb_unref(b, w);
    int32_t p = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, upcast ? DM_FLOAT : model,
                            upcast ? scores32 : scores, -1, -1, "attn_probs", 1);
    dm_sb_unref(b, m);
    if (upcast) {
        int32_t c = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, scores, -1, -1, "attn_probs_cast", 1);
        rebind(b, &p, c);
    }
    return p;
}

/*
 * Sampling (do_sample=True, num_beams 1): what _sample (transformers 4.51,
 * generation/utils.py) does with the float32 [B, V] next_token_logits
 * before `del outputs`: next_token_scores = logits_processor(input_ids,
 * next_token_logits), the LogitsProcessorList that _get_logits_processor
 * fills, when generation_config.do_sample, with TemperatureLogitsWarper
 * (temperature != 1), TopKLogitsWarper (top_k not None and != 0; the
 * GenerationConfig default is 50) and TopPLogitsWarper (top_p < 1), in that
 * order (each result replaces the previous one; the caller's logits stay);
 * then probs = softmax(next_token_scores) and torch.multinomial(probs, 1).
 * The warpers (generation/logits_process.py, 4.51):
 *  - temperature: scores / temperature, a float32 [B, V];
 *  - top-k: torch.topk(scores, k) (values [B, k] float32 and indices int64,
 *    the indices dropped at once), scores < the k-th value (a bool [B, V]),
 *    scores.masked_fill(...) (a float32 [B, V]);
 *  - top-p: torch.sort(scores) (values float32 and indices int64 [B, V];
 *    PyTorch 1.13's CPU sort fills the indices from an arange of V int64,
 *    _fill_indices in SortingKernel.cpp), .softmax(-1) then .cumsum(-1) (the
 *    softmax dropped after), cumulative <= 1 - p (a bool [B, V]),
 *    .scatter(1, sorted_indices, ...) (a bool [B, V]), masked_fill (float32
 *    [B, V]); its locals go when it returns.
 * next_token_scores and probs are loop locals: held until the next step
 * rebinds them, so the previous step's pair is live through the next
 * forward and this step's warpers (*scores, *probs: held across calls; the
 * caller starts them at -1). multinomial with one sample (PyTorch 1.13,
 * Distributions.cpp): q = empty_like(probs).exponential_(), probs / q into
 * it, argmax: a float32 [B, V] transient (its few scalar checks and the [B,
 * 1] int64 result are not counted). Measured: tests/validation rows
 * *-sample-* (tools/hf_torch.py, _top_k_warp, _top_p_warp).
 */
static void sample_tokens(struct dm_sb *b, int64_t B, int64_t V, int32_t logits, int32_t *scores,
                          int32_t *probs)
{
    const struct dm_run *run = b->run;
    int64_t k = run->gen_top_k < V ? run->gen_top_k : V;
    uint64_t f32, i64, bits, arange, tv, ti;
    if (!mul5(B, V, 1, 1, 4, &f32) || !mul5(B, V, 1, 1, 8, &i64) || !mul5(B, V, 1, 1, 1, &bits) ||
        !mul5(V, 1, 1, 1, 8, &arange) || !mul5(B, k, 1, 1, 4, &tv) || !mul5(B, k, 1, 1, 8, &ti))
        return; /* the caller's [B, V] logits were counted already: no larger product here */
    int32_t cur = logits;
    if (run->gen_temperature) {
        int32_t t = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, f32, -1, -1,
                                "temperature_scores", 1);
        cur = t;
    }
    if (k > 0) {
        int32_t vals = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, tv, -1, -1, "topk_values", 1);
        int32_t idx = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, ti, -1, -1, "topk_indices", 1);
        dm_sb_unref(b, idx);
        int32_t below = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_BOOL, bits, -1, -1,
                                    "top_k_remove", 1);
        dm_sb_unref(b, vals);
        int32_t kept = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, f32, -1, -1, "top_k_scores", 1);
        dm_sb_unref(b, below);
        if (cur != logits)
            dm_sb_unref(b, cur);
        cur = kept;
    }
    if (run->gen_top_p) {
        int32_t sv = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, f32, -1, -1, "sorted_logits", 1);
        int32_t si = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, i64, -1, -1, "sorted_indices", 1);
        dm_sb_unref(b, dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, arange, -1, -1,
                                   "sort_arange", 1));
        int32_t sm = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, f32, -1, -1, "sorted_softmax", 1);
        int32_t cs = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, f32, -1, -1,
                                 "cumulative_probs", 1);
        dm_sb_unref(b, sm);
        int32_t le = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_BOOL, bits, -1, -1,
                                 "sorted_indices_to_remove", 1);
        int32_t sc = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_BOOL, bits, -1, -1,
                                 "indices_to_remove", 1);
        int32_t kept = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, f32, -1, -1, "top_p_scores", 1);
        int32_t gone[] = {cs, si, sv, le, sc};
        for (size_t j = 0; j < sizeof gone / sizeof *gone; j++)
            dm_sb_unref(b, gone[j]);
        if (cur != logits)
            dm_sb_unref(b, cur);
        cur = kept;
    }
    if (cur == logits) /* no warper: next_token_scores is next_token_logits */
        dm_sb_ref(b, cur, 1);
    if (*scores >= 0)
        dm_sb_unref(b, *scores);
    *scores = cur;
    int32_t p = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, f32, -1, -1, "probs", 1);
    if (*probs >= 0)
        dm_sb_unref(b, *probs);
    *probs = p;
    dm_sb_unref(b, dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, f32, -1, -1,
                               "multinomial_q", 1));
}

/* What _sample (4.51) holds from one step to the next: next_token_logits,
 * the grown input_ids (decoder_input_ids), and when sampling the warped
 * scores and probabilities; -1 before the first step. */
struct picker {
    int32_t next, ids, scores, probs;
};

/* _sample's token choice after a forward whose logits (*lb, or -1) are
 * still referenced by `outputs`: next_token_logits [B, V] float32 (the
 * previous one let go when the name is rebound), then greedy: the logits let
 * go and input_ids grown (`ids` bytes, the previous let go); sampling: the
 * warpers and draw (sample_tokens), input_ids grown, then `del outputs`. */
static void pick_tokens(struct dm_sb *b, struct picker *pk, int64_t B, int64_t V, uint64_t next,
                        uint64_t ids, const char *ids_name, int32_t *lb)
{
    int32_t nb = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, next, -1, -1,
                             "next_token_logits", 1);
    if (pk->next >= 0)
        dm_sb_unref(b, pk->next);
    pk->next = nb;
    if (b->run->gen_sample)
        sample_tokens(b, B, V, nb, &pk->scores, &pk->probs);
    if (!b->run->gen_sample && *lb >= 0) {
        dm_sb_unref(b, *lb);
        *lb = -1;
    }
    int32_t ib = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, ids, -1, -1, ids_name, 1);
    if (pk->ids >= 0)
        dm_sb_unref(b, pk->ids);
    pk->ids = ib;
    if (*lb >= 0)
        dm_sb_unref(b, *lb);
    *lb = -1;
}

/*
 * The decode steps with transformers 4.51's HybridCache (Gemma 2, Gemma 3:
 * their configs carry cache_implementation="hybrid", so
 * GenerationMixin._prepare_cache_for_generation builds one through _get_cache
 * before the prefill, batch B, max_cache_len = max_length - 1 = P + T - 1,
 * the model's dtype; cache_utils.py 4.51). The caches are graph inputs
 * (src/load/hf_decoders.inc): allocated before the prefill, written in place,
 * never grown, and still held after generate() (model._cache). Per decode
 * token:
 *  - prepare_inputs_for_generation (Gemma2ForCausalLM / Gemma3ForCausalLM,
 *    4.51.3) makes the 4-D mask [B, 1, 1, M] (the model's dtype), held until
 *    the next step's inputs replace it;
 *  - per sliding layer, the decoder layer's where(tril(ones_like(mask)),
 *    min, mask) [B, 1, 1, M] held to the layer's end, and
 *    HybridCache._sliding_update's rolled copies k_out[:, :, indices],
 *    [B, K, W, D] (W = min(window, M)) for keys and values, returned to the
 *    attention; a global layer's _static_update writes in place and returns
 *    the whole [B, K, M, D] cache;
 *  - the attention over every cached position (W or M, zeros included):
 *    repeat_kv's copies when H != K, the scores [B, H, 1, W or M] through
 *    eager's chain (eager_scores), the weights held to the layer's end;
 *  - the logits [B, 1, V] (Gemma 2: / cap, tanh, * cap);
 *  - generate's attention_mask, input_ids and next_token_logits as with a
 *    DynamicCache (dm_sb_generate).
 * Not modelled: the [B, 1, hidden] and [B, 1, intermediate] tensors, the
 * index tensors of the update (a few [W] int64), the bool [B, 1, 1, M]
 * masks (one byte an element) and the 2-D mask's padding transients.
 */
static enum dnnmem_status hybrid_decode(struct dm_sb *b, struct dnnmem_error *err)
{
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_run *run = b->run;
    int32_t layers = cache_layers(g, "cache.", ".key", g->n_inputs);
    int32_t logits = g->n_outputs ? g->outputs[0] : -1;
    int32_t k0 = dm_graph_find(g, "cache.0.key");
    if (layers == 0 || logits < 0 || t[logits].rank != 3 || t[k0].rank != 4)
        return dm_fail(err, DNNMEM_E_INTERNAL, "%s: the HybridCache's tensors are missing", g->path);
    int64_t B = t[k0].dims[0], K = t[k0].dims[1], D = t[k0].dims[3], M = g->cache_len;
    int64_t W = g->cache_window < M ? g->cache_window : M, V = t[logits].dims[2];
    int64_t P = M - (run->gen_tokens - 1);
    enum dm_dtype model = t[k0].dtype;
    uint64_t kvb = kv_bytes(model, run->kv_dtype), mb = kv_bytes(model, DNNMEM_KV_AUTO);
    enum dm_dtype kvt = kv_type(model, run->kv_dtype);
    /* the caches: KV-cache bytes, of --kv-dtype's element size */
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t x = g->inputs[i];
        int32_t buf = b->cur[x];
        if (buf < 0 || strncmp(g->tensors[x].name, "cache.", 6) != 0)
            continue;
        struct dm_buffer *bf = &b->s->buf[buf];
        bf->category = DNNMEM_CAT_KV_CACHE;
        if (t[x].rank == 4 && !mul5(t[x].dims[0], t[x].dims[1], t[x].dims[2], t[x].dims[3], kvb,
                                    &bf->bytes))
            return dm_fail(err, DNNMEM_E_SHAPE, "%s: the KV cache of %lld positions overflows",
                           g->path, (long long)M);
        if (t[x].rank == 4)
            bf->dtype = (uint8_t)kvt;
    }
    int64_t H = K;
    bool eager, upcast, flash;
    attention_kind(g, t, &H, &eager, &upcast, &flash);
    bool repeat = H != K;
    uint64_t mask4, roll, rep[2], sc[2], sc32[2], step_logits, next;
    if (!mul5(B, M, 1, 1, mb, &mask4) || !mul5(B, K, W, D, kvb, &roll) ||
        !mul5(B, H, W, D, mb, &rep[0]) || !mul5(B, H, M, D, mb, &rep[1]) ||
        !mul5(B, H, 1, W, mb, &sc[0]) || !mul5(B, H, 1, M, mb, &sc[1]) ||
        !mul5(B, H, 1, W, 4, &sc32[0]) || !mul5(B, H, 1, M, 4, &sc32[1]) ||
        !mul5(B, 1, V, 1, mb, &step_logits) || !mul5(B, V, 1, 1, 4, &next))
        return dm_fail(err, DNNMEM_E_SHAPE, "%s: the KV cache of %lld positions overflows",
                       g->path, (long long)M);
    int32_t lb = b->cur[logits];
    /* generate's position_ids [B, P]: the rotary embeddings' cos and sin
     * (Gemma 3: global and local) are [B, P, D] */
    static const char *const rot[] = {"position_embeddings.cos", "position_embeddings.sin",
                                       "position_embeddings_local.cos",
                                       "position_embeddings_local.sin"};
    for (size_t k = 0; k < sizeof rot / sizeof *rot; k++)
        prefill_batch(b, rot[k], 3, B);
    int32_t prev_mask = -1, prev_m4 = -1;
    struct picker pk = {-1, -1, -1, -1};
    int64_t T = run->gen_tokens;
    enum dnnmem_status st = DNNMEM_OK;
    for (int64_t s = 1; s <= T && !b->oom; s = s == 1 && T > 9 ? T - 7 : s + 1) {
        int64_t L = P + s; /* generate's attention_mask and input_ids after this step */
        uint64_t ids;
        if (!mul5(B, L, 1, 1, 8, &ids)) {
            st = dm_fail(err, DNNMEM_E_SHAPE, "%s: %lld tokens overflow", g->path, (long long)L);
            break;
        }
        b->iteration = (int)(s < INT16_MAX ? s : INT16_MAX);
        dm_sb_step(b, DM_PHASE_DECODE, -1);
        int32_t am = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, ids, -1, -1, "attention_mask", 1);
        rebind(b, &prev_mask, am);
        pick_tokens(b, &pk, B, V, next, ids, "input_ids", &lb);
        if (s == T)
            break;
        int32_t m4 = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, mask4, -1, -1, "causal_mask", 1);
        rebind(b, &prev_m4, m4);
        for (int32_t l = 0; l < layers && !b->oom; l++) {
            bool slide = (l + 1) % g->cache_pattern != 0;
            int j = slide ? 0 : 1; /* index of the sizes: W or M positions */
            int32_t wm = slide ? dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, mask4, -1, -1,
                                             "sliding_mask", 1)
                               : -1;
            int32_t kc[2] = {-1, -1}, r[2] = {-1, -1};
            for (int q = 0; slide && q < 2; q++)
                kc[q] = dm_sb_alloc(b, DNNMEM_CAT_KV_CACHE, kvt, roll, -1, -1, "cache_rolled", 1);
            for (int q = 0; repeat && q < 2; q++)
                r[q] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, rep[j], -1, -1, "repeat_kv", 1);
            int32_t p = eager ? eager_scores(b, model, sc[j], sc32[j], g->attn_softcap ? 4 : 1,
                                             upcast)
                              : -1;
            for (int q = 0; q < 2; q++) { /* the attention returns: its locals go */
                dm_sb_unref(b, r[q]);
                dm_sb_unref(b, kc[q]);
            }
            if (p >= 0) /* the decoder layer returns */
                dm_sb_unref(b, p);
            dm_sb_unref(b, wm);
        }
        lb = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, step_logits, logits, -1, "step", 1);
        for (int k = 0; g->final_softcap && k < 3; k++) { /* / cap, tanh, * cap */
            int32_t n = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, step_logits, logits, -1,
                                    "step", 1);
            rebind(b, &lb, n);
        }
    }
    return b->oom ? dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path) : st;
}

/* The eager attention of one decoder token over `keys` positions, as
 * T5Attention (transformers 4.51) makes it: the scores [B, H, 1, keys] (the
 * position bias is added in place), softmax(scores.float()).type_as(scores)
 * (a float32 copy, its softmax and the cast back when the model's dtype is
 * not float32); returns the weights. `bias` (or -1): the position bias made
 * by the stack's first layer after the scores (held by the caller to the
 * stack's end): `pre` bytes (compute_bias's [1, keys, H] embedding, or the
 * zeros [1, H, 1, keys] of the cross-attention), then `bytes` of [B, H, 1,
 * keys] for position_bias + mask. */
static int32_t t5_attention(struct dm_sb *b, enum dm_dtype model, uint64_t scores,
                            uint64_t scores32, uint64_t pre, uint64_t bias_bytes, int32_t *bias,
                            int32_t *sc, uint64_t copy)
{
    /* torch.matmul(q, k.transpose(3, 2)) reshapes its operands to [B * H,
     * ., .]: a copy where the keys are a strided view (the cross-attention's
     * [B, P, H, D] projection seen as [B, H, P, D]; the self-attention's
     * concatenated cache is contiguous), freed when the matmul returns */
    int32_t kc = copy ? dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, copy, -1, -1,
                                    "matmul_copy", 1)
                      : -1;
    *sc = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, scores, -1, -1, "attn_scores", 1);
    dm_sb_unref(b, kc);
    if (bias) {
        int32_t v = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, pre, -1, -1, "position_bias", 1);
        *bias = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, bias_bytes, -1, -1,
                            "position_bias_masked", 1);
        dm_sb_unref(b, v);
    }
    int32_t w;
    if (model == DM_FLOAT) {
        w = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, scores, -1, -1, "attn_probs", 1);
    } else {
        int32_t f = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, scores32, -1, -1,
                                "attn_scores.float", 1);
        int32_t p = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, scores32, -1, -1,
                                "attn_probs", 1);
        dm_sb_unref(b, f);
        w = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, scores, -1, -1, "attn_probs_cast", 1);
        dm_sb_unref(b, p);
    }
    /* torch.matmul(attn_weights, value_states): the values' copy likewise */
    if (copy) {
        int32_t vc = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, copy, -1, -1, "matmul_copy", 1);
        dm_sb_unref(b, vc);
    }
    return w;
}

/*
 * The decode steps of greedy generate() for T5ForConditionalGeneration
 * (MT5 alike), transformers 4.51. Before the prefill, generate makes the
 * encoder's attention_mask [B, P] int64
 * (_prepare_attention_mask_for_generation), runs the encoder once
 * (_prepare_encoder_decoder_kwargs_for_generation: last_hidden_state [B, P,
 * d_model] kept in model_kwargs["encoder_outputs"] to the end), makes
 * decoder_input_ids [B, 1] of decoder_start_token_id
 * (_prepare_decoder_input_ids_for_generation) and an
 * EncoderDecoderCache(DynamicCache(), DynamicCache())
 * (_prepare_cache_for_generation: T5 sets _supports_cache_class and the
 * config is_encoder_decoder). The graph (src/load/hf.c, build_t5) is the
 * encoder and the first decoder forward, decoder length 1; it returns the
 * self-attention keys and values [B, H, 1, D] and the cross-attention ones
 * [B, H, P, D] (views of the k and v projections, DynamicCache.update of an
 * empty layer keeps the tensors themselves) and the encoder's output. Then,
 * per decoder forward s (1 <= s < T), with L = s + 1 decoder positions:
 *  - the sampling of the previous forward, as with a DynamicCache: the
 *    float32 [B, V] copy of its last logits, `del outputs`, the argmax and
 *    decoder_input_ids grown to [B, L] int64 by torch.cat (the encoder's
 *    attention_mask is not grown: _update_model_kwargs_for_generation grows
 *    a decoder_attention_mask only, and there is none);
 *  - T5Stack.forward: attention_mask = torch.ones(B, L) (float32), the
 *    causal mask of _update_causal_mask (eager: T5 has no sdpa in 4.51)
 *    cloned to [B, 1, 1, L] (its padding sum and masked_fill [B, 1, 1, L]
 *    transients), invert_attention_mask of the encoder's mask ([B, 1, 1, P]:
 *    .to(dtype), 1.0 - m, * finfo.min), all held to the stack's end;
 *  - per layer, T5Attention's self-attention: DynamicCache.update,
 *    key_cache[l] = torch.cat([old, new], dim=-2), a fresh [B, H, L, D] (the
 *    old freed), then the values; the scores [B, H, 1, L] and weights held
 *    to the attention's return; layer 0 makes the position bias:
 *    compute_bias's embedding [1, L, H] (relative positions of
 *    cache_position against arange(L)) plus the causal mask, [B, H, 1, L],
 *    passed to the other layers to the stack's end;
 *  - per layer, the cross-attention: is_updated, so the keys and values are
 *    the cache's, strided views of the first forward's projections, which
 *    torch.matmul's reshape to [B * H, ., .] copies (PyTorch 1.13-2.x
 *    at::matmul: expand + reshape, then bmm): a [B, H, P, D] transient in
 *    each of the two matmuls; the scores and weights [B, H, 1, P];
 *    layer 0 makes its position bias: zeros [1, H, 1, P] (no relative
 *    attention bias) plus the inverted encoder mask, [B, H, 1, P];
 *  - the logits [B, 1, V] (the lm_head on every decoder position: T5's
 *    forward has no logits_to_keep in 4.51), held until the sampling.
 * The cross-attention caches and the encoder's output stay allocated to the
 * end. Not modelled: the [B, 1, d_model] and [B, 1, d_ff] tensors (the
 * projections, norms, feed-forward), the bool masks and the int64 position
 * tensors (a few [L]), generate's [B, P] int64 mask (the graph's encoder
 * makes its own ones [B, P] instead), the [B, 1] decoder_input_ids and its
 * per-step clone. Steps simulated as for a DynamicCache: the first, then the
 * last eight.
 */
static enum dnnmem_status seq2seq_decode(struct dm_sb *b, struct dnnmem_error *err)
{
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_run *run = b->run;
    int32_t layers = cache_layers(g, "past_key_values.", ".self.key", g->n_outputs);
    int32_t logits = g->n_outputs ? g->outputs[0] : -1;
    if (layers == 0 || logits < 0 || t[logits].rank != 3) /* the check table's row says so */
        return dm_refuse(b->s, DM_REFUSE_GEN_NO_DECODER_CACHE, NULL, NULL, err);
    int32_t *cur = malloc(2 * (size_t)layers * sizeof *cur);
    if (!cur)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    int32_t k0 = -1, x0 = -1;
    for (int32_t l = 0; l < layers; l++)
        for (int j = 0; j < 2; j++) {
            char name[80];
            snprintf(name, sizeof name, "past_key_values.%d.self.%s", l, j ? "value" : "key");
            int32_t x = dm_graph_find(g, name);
            cur[2 * l + j] = x >= 0 ? b->cur[x] : -1;
            if (l == 0 && j == 0)
                k0 = x;
        }
    x0 = dm_graph_find(g, "past_key_values.0.cross.key");
    if (k0 < 0 || x0 < 0 || t[k0].rank != 4 || t[x0].rank != 4) {
        free(cur);
        return dm_fail(err, DNNMEM_E_INTERNAL, "%s: the decoder's cache tensors are missing",
                       g->path);
    }
    /* the prefill's caches (the k and v projections they are views of):
     * KV-cache bytes from the moment they are made */
    for (int32_t i = 0; i < g->n_outputs; i++) {
        int32_t buf = b->cur[g->outputs[i]];
        if (buf >= 0 && strncmp(g->tensors[g->outputs[i]].name, "past_key_values.", 16) == 0)
            b->s->buf[buf].category = DNNMEM_CAT_KV_CACHE;
    }
    int64_t B = t[k0].dims[0], H = t[k0].dims[1], D = t[k0].dims[3], P = t[x0].dims[2];
    int64_t V = t[logits].dims[2], T = run->gen_tokens;
    enum dm_dtype model = t[k0].dtype;
    uint64_t mb = kv_bytes(model, DNNMEM_KV_AUTO);
    uint64_t xsc = 0, xsc32 = 0, xpre = 0, emask = 0, xcopy = 0;
    enum dnnmem_status st = DNNMEM_OK;
    if (!mul5(B, H, P, D, mb, &xcopy) || !mul5(B, H, 1, P, mb, &xsc) || !mul5(B, H, 1, P, 4, &xsc32) ||
        !mul5(1, H, 1, P, mb, &xpre) || !mul5(B, 1, 1, P, mb, &emask))
        st = dm_fail(err, DNNMEM_E_SHAPE, "%s: the prompt of %lld tokens overflows", g->path,
                     (long long)P);
    int32_t lb = b->cur[logits];
    struct picker pk = {-1, -1, -1, -1};
    for (int64_t s = 1; s <= T && !b->oom && st == DNNMEM_OK; s = s == 1 && T > 9 ? T - 7 : s + 1) {
        int64_t L = 1 + s; /* decoder positions after this step's update */
        uint64_t next, cache, sc, sc32, pre, ids, ones, mask, step_logits;
        if (!mul5(B, V, 1, 1, 4, &next) || !mul5(B, H, L, D, mb, &cache) ||
            !mul5(B, H, 1, L, mb, &sc) || !mul5(B, H, 1, L, 4, &sc32) ||
            !mul5(1, L, H, 1, mb, &pre) || !mul5(B, L, 1, 1, 8, &ids) ||
            !mul5(B, L, 1, 1, 4, &ones) || !mul5(B, L, 1, 1, mb, &mask) ||
            !mul5(B, 1, V, 1, mb, &step_logits)) {
            st = dm_fail(err, DNNMEM_E_SHAPE, "%s: the decoder's cache of %lld tokens overflows",
                         g->path, (long long)L);
            break;
        }
        b->iteration = (int)(s < INT16_MAX ? s : INT16_MAX);
        dm_sb_step(b, DM_PHASE_DECODE, -1);
        /* the sampling of the previous forward's logits */
        pick_tokens(b, &pk, B, V, next, ids, "decoder_input_ids", &lb);
        if (s == T) /* the T-th token came from the last forward */
            break;
        /* T5Stack.forward's masks, held to its end */
        int32_t am = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, ones, -1, -1,
                                 "decoder_attention_mask", 1);
        int32_t cm = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, mask, -1, -1, "causal_mask", 1);
        int32_t p1 = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, mask, -1, -1, "padding_mask", 1);
        dm_sb_unref(b, p1);
        int32_t p3 = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, mask, -1, -1, "masked_fill", 1);
        dm_sb_unref(b, p3);
        int32_t e1 = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, emask, -1, -1,
                                 "encoder_attention_mask.to", 1);
        int32_t e2 = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, emask, -1, -1,
                                 "encoder_attention_mask.rsub", 1);
        int32_t em = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, emask, -1, -1,
                                 "encoder_extended_attention_mask", 1);
        dm_sb_unref(b, e2);
        dm_sb_unref(b, e1);
        int32_t pb = -1, xpb = -1;
        for (int32_t l = 0; l < layers && !b->oom; l++) {
            for (int j = 0; j < 2; j++) { /* DynamicCache.update: keys, then values */
                int32_t nbuf = dm_sb_alloc(b, DNNMEM_CAT_KV_CACHE, model, cache, -1, -1,
                                           "cache", 1);
                if (cur[2 * l + j] >= 0)
                    dm_sb_unref(b, cur[2 * l + j]);
                cur[2 * l + j] = nbuf;
            }
            int32_t scb, w;
            w = t5_attention(b, model, sc, sc32, pre, sc, l == 0 ? &pb : NULL, &scb, 0);
            dm_sb_unref(b, w);
            dm_sb_unref(b, scb);
            w = t5_attention(b, model, xsc, xsc32, xpre, xsc, l == 0 ? &xpb : NULL, &scb, xcopy);
            dm_sb_unref(b, w);
            dm_sb_unref(b, scb);
        }
        /* T5Stack.forward returns: its locals go */
        int32_t held[] = {am, cm, em, pb, xpb};
        for (size_t k = 0; k < sizeof held / sizeof *held; k++)
            dm_sb_unref(b, held[k]);
        lb = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, step_logits, logits, -1, "step", 1);
    }
    free(cur);
    return b->oom ? dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path) : st;
}

/*
 * The decode steps of greedy generate() for WhisperForConditionalGeneration
 * (transformers 4.56.2 and 5.24.0, WhisperGenerationMixin's short-form path
 * into GenerationMixin._sample). The graph (src/load/hf/whisper.c) is
 * _get_input_segment's copy of the features, the encoder and the first
 * decoder forward on [B, 1] start tokens, and returns the EncoderDecoderCache
 * (from 4.56 the DynamicLayers' contiguous copies: self-attention [B, H, 1,
 * D], cross-attention [B, H, P, D], P = max_source_positions), the encoder's
 * output and the segment, all held to the end. Then, per decoder forward s
 * (1 <= s < T), with L = s + 1 positions:
 *  - the sampling of the previous forward, as for T5 (pick_tokens);
 *  - eager only: create_causal_mask's [B, 1, 1, L] mask of the model's dtype,
 *    held to the decoder's end (sdpa passes none: one query);
 *  - per layer, the self-attention's cache update: torch.cat([old, new],
 *    dim=-2) for the keys, then the values, a fresh [B, H, L, D] each (the
 *    old freed); eager_attention_forward's matmul [B, H, 1, L], its * 1.0
 *    (scaling=1.0: a tensor), + the mask, softmax (each freed as the next is
 *    made), the probabilities held to the layer's end; the cross-attention
 *    likewise on [B, H, 1, P] (no mask), reading the cache's keys and values
 *    as they are (contiguous); sdpa's fused kernel makes no scores;
 *  - the logits [B, 1, V], held until the sampling.
 * Not modelled: the [B, 1, d_model] and [B, 1, ffn] tensors, the q, k, v
 * projections of the one token, the int64 position tensors, the logits
 * processors' [B, V] copies of begin_suppress_tokens / suppress_tokens (a
 * config without them makes none) and the post-processing of the sequences.
 * Steps simulated as for a DynamicCache: the first, then the last eight.
 */
static enum dnnmem_status whisper_decode(struct dm_sb *b, struct dnnmem_error *err)
{
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_run *run = b->run;
    int32_t layers = cache_layers(g, "past_key_values.", ".self.key", g->n_outputs);
    int32_t logits = g->n_outputs ? g->outputs[0] : -1;
    int32_t k0 = dm_graph_find(g, "past_key_values.0.self.key");
    int32_t x0 = dm_graph_find(g, "past_key_values.0.cross.key");
    if (layers == 0 || logits < 0 || t[logits].rank != 3 || k0 < 0 || x0 < 0 ||
        t[k0].rank != 4 || t[x0].rank != 4)
        return dm_refuse(b->s, DM_REFUSE_GEN_NO_DECODER_CACHE, NULL, NULL, err);
    bool fused = false; /* sdpa: one F.scaled_dot_product_attention per call */
    for (int32_t i = 0; i < g->n_nodes && !fused; i++)
        fused = g->nodes[i].op == DM_OP_Attention;
    int32_t *cur = malloc(2 * (size_t)layers * sizeof *cur);
    if (!cur)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    for (int32_t l = 0; l < layers; l++)
        for (int j = 0; j < 2; j++) {
            char name[80];
            snprintf(name, sizeof name, "past_key_values.%d.self.%s", l, j ? "value" : "key");
            int32_t x = dm_graph_find(g, name);
            cur[2 * l + j] = x >= 0 ? b->cur[x] : -1;
        }
    for (int32_t i = 0; i < g->n_outputs; i++) {
        int32_t buf = b->cur[g->outputs[i]];
        if (buf >= 0 && strncmp(g->tensors[g->outputs[i]].name, "past_key_values.", 16) == 0)
            b->s->buf[buf].category = DNNMEM_CAT_KV_CACHE;
    }
    int64_t B = t[k0].dims[0], H = t[k0].dims[1], D = t[k0].dims[3], P = t[x0].dims[2];
    int64_t V = t[logits].dims[2], T = run->gen_tokens;
    enum dm_dtype model = t[k0].dtype;
    uint64_t mb = kv_bytes(model, DNNMEM_KV_AUTO), xsc = 0;
    enum dnnmem_status st = DNNMEM_OK;
    if (!mul5(B, H, 1, P, mb, &xsc))
        st = dm_fail(err, DNNMEM_E_SHAPE, "%s: the encoder's %lld positions overflow", g->path,
                     (long long)P);
    int32_t lb = b->cur[logits];
    struct picker pk = {-1, -1, -1, -1};
    for (int64_t s = 1; s <= T && !b->oom && st == DNNMEM_OK; s = s == 1 && T > 9 ? T - 7 : s + 1) {
        int64_t L = 1 + s;
        uint64_t next, cache, sc, ids, mask, step_logits;
        if (!mul5(B, V, 1, 1, 4, &next) || !mul5(B, H, L, D, mb, &cache) ||
            !mul5(B, H, 1, L, mb, &sc) || !mul5(B, L, 1, 1, 8, &ids) ||
            !mul5(B, L, 1, 1, mb, &mask) || !mul5(B, 1, V, 1, mb, &step_logits)) {
            st = dm_fail(err, DNNMEM_E_SHAPE, "%s: the decoder's cache of %lld tokens overflows",
                         g->path, (long long)L);
            break;
        }
        b->iteration = (int)(s < INT16_MAX ? s : INT16_MAX);
        dm_sb_step(b, DM_PHASE_DECODE, -1);
        pick_tokens(b, &pk, B, V, next, ids, "decoder_input_ids", &lb);
        if (s == T)
            break;
        int32_t cm = fused ? -1
                           : dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, mask, -1, -1,
                                         "causal_mask", 1);
        for (int32_t l = 0; l < layers && !b->oom; l++) {
            for (int j = 0; j < 2; j++) { /* the cache's torch.cat: keys, then values */
                int32_t nbuf = dm_sb_alloc(b, DNNMEM_CAT_KV_CACHE, model, cache, -1, -1,
                                           "cache", 1);
                if (cur[2 * l + j] >= 0)
                    dm_sb_unref(b, cur[2 * l + j]);
                cur[2 * l + j] = nbuf;
            }
            if (fused)
                continue;
            int32_t probs[2];
            for (int x = 0; x < 2; x++) { /* self-attention, then cross-attention */
                uint64_t n = x ? xsc : sc;
                int32_t w = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, n, -1, -1, "scores", 1);
                int32_t m = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, n, -1, -1, "scaled", 1);
                dm_sb_unref(b, w);
                if (!x) {
                    int32_t a = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, n, -1, -1,
                                            "masked", 1);
                    dm_sb_unref(b, m);
                    m = a;
                }
                probs[x] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, n, -1, -1, "probs", 1);
                dm_sb_unref(b, m);
            }
            dm_sb_unref(b, probs[0]);
            dm_sb_unref(b, probs[1]);
        }
        if (cm >= 0)
            dm_sb_unref(b, cm);
        lb = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, step_logits, logits, -1, "step", 1);
    }
    free(cur);
    return b->oom ? dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path) : st;
}

/*
 * Beam search, before the prefill (transformers 4.51.3, generate() then
 * _beam_search; the graph's batch is the caller's B times num_beams K,
 * src/api.c): the caller's prompt [B, P] int64 stays held (counted as an
 * input, as the measurement's bytes before), generate's attention_mask
 * ones [B, P] and _expand_inputs_for_generation's repeat_interleave of
 * input_ids (the graph's input, [B*K, P], kept as _beam_search's argument)
 * and then of the mask, [B*K, P] int64 (replaced by the first step's
 * torch.cat); _beam_search's running_sequences full((B, K, P + T), -1) int64
 * and its clone `sequences`, running_beam_indices full((B, K, T), -1) int32
 * and its clone `beam_indices` (the small [B, K] scores and flags are not
 * counted); the prefill's model_inputs: the prompt rows' clone and
 * position_ids (attention_mask.cumsum(-1) - 1), [B*K, P] int64 each, held
 * until the second forward's inputs replace them.
 */
void dm_sb_generate_setup(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    const struct dm_run *run = b->run;
    int32_t x = dm_graph_find(g, "input_ids");
    if (x < 0 || b->t[x].rank != 2 || run->gen_beams <= 1 || g->encoder_decoder || g->cache_len)
        return;
    int64_t Bn = b->t[x].dims[0], P = b->t[x].dims[1], K = run->gen_beams, T = run->gen_tokens;
    int64_t B = Bn / K, M;
    uint64_t prompt, rows, seq, idx;
    if (!dm_add_ok(P, T, &M) || !mul5(B, P, 1, 1, 8, &prompt) || !mul5(Bn, P, 1, 1, 8, &rows) ||
        !mul5(B, K, M, 1, 8, &seq) || !mul5(B, K, T, 1, 4, &idx))
        return; /* dm_sb_generate reports the overflow */
    int32_t *pre = b->gen_pre;
    pre[DM_GEN_PROMPT] = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, prompt, -1, -1, "prompt", 1);
    dm_sb_unref(b, dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, prompt, -1, -1, "attention_mask", 1));
    pre[DM_GEN_MASK] = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, rows, -1, -1, "attention_mask", 1);
    pre[DM_GEN_RSEQ] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, seq, -1, -1,
                                   "running_sequences", 1);
    pre[DM_GEN_SEQ] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, seq, -1, -1, "sequences", 1);
    pre[DM_GEN_RIDX] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT32, idx, -1, -1,
                                   "running_beam_indices", 1);
    pre[DM_GEN_IDX] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT32, idx, -1, -1,
                                  "beam_indices", 1);
    pre[DM_GEN_IDS] = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, rows, -1, -1, "model_inputs", 1);
    pre[DM_GEN_POS] = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, rows, -1, -1, "position_ids", 1);
}

/* A causal LM's decode state (dm_sb_generate). Per layer l and j (0: key,
 * 1: value), at 2l + j: the present tensor (kv); the buffer holding its
 * cache now (cur); the rest of a fused projection the prefill's presents
 * are views of (present.N.qkv.J: held with them, let go when the cache
 * replaces them); the legacy tuple cache's previous forward's inputs'
 * cache, live until the next step's model_inputs replace them (old); beam
 * search with the legacy tuple: the reordered tuple, made whole before the
 * one it replaces goes (fresh). */
/* The batched_mm experts of one decode forward's MoE layer (moe_decode):
 * which layers have them (the graph's, n entries); the release's variant
 * (both: both weights gathered first, 5.0-5.2; mask: 5.1-5.2's second
 * multiply by valid_mask; tok: token_idx, 5.0-5.7; hold: 5.3's gated rows
 * held in up_proj_out to the return); the byte sizes of the rows x [S, H],
 * the gathered gate_up_proj [S, 2I, H] and down_proj [S, H, I], the bmm
 * outputs [S, 2I] and [S, H], the activation and gated rows [S, I], the
 * weighted rows [S, H] and their sum [N, H] (wst: float32 where the routing
 * weights are), the cast sum [N, H] (cast: 0 where there is none), the
 * token_idx [S] and the arange [N] it expands (int64). */
struct moe_dec {
    const bool *layer;
    int32_t n;
    bool both, mask, tok, hold;
    enum dm_dtype wt, wst;
    uint64_t x, w1, w2, up, half, down, weighted, sum, cast, idx, arange;
};

struct causal {
    struct moe_dec moe;
    int32_t layers, logits;
    int32_t *kv, *cur, *rest, *old, *fresh;
    enum dm_dtype model, kvt;
    bool eager, upcast, repeat, decode_mask, inverted_mask; /* dm_sb_generate */
};

static void causal_free(struct causal *c)
{
    free(c->kv);
    free(c->cur);
    free(c->rest);
    free(c->old);
    free(c->fresh);
}

/* One decode step's bytes, with the cache L long after it. */
struct step_bytes {
    uint64_t next, cache[2], rep[2], scores, scores32, step_logits, ids, mask, held[2];
    uint64_t mla[3]; /* the latent cache's expand_kv (decode_forward): kv_b_proj's output,
                        key_states, the values' matmul copy; 0 without */
};

static bool step_sizes(struct step_bytes *z, int64_t B, int64_t K, int64_t H, int64_t L,
                       const int64_t Dkv[2], int64_t V, uint64_t kvb, uint64_t mb)
{
    return mul5(B, L, 1, 1, 8, &z->ids) && mul5(B, L, 1, 1, mb, &z->mask) &&
           mul5(B, K, L - 1, Dkv[0], kvb, &z->held[0]) &&
           mul5(B, K, L - 1, Dkv[1], kvb, &z->held[1]) && mul5(B, V, 1, 1, 4, &z->next) &&
           mul5(B, K, L, Dkv[0], kvb, &z->cache[0]) && mul5(B, K, L, Dkv[1], kvb, &z->cache[1]) &&
           mul5(B, H, L, Dkv[0], mb, &z->rep[0]) && mul5(B, H, L, Dkv[1], mb, &z->rep[1]) &&
           mul5(B, H, 1, L, mb, &z->scores) && mul5(B, H, 1, L, 4, &z->scores32) &&
           mul5(B, 1, V, 1, mb, &z->step_logits);
}

/* step_sizes' latent-cache part (g->mla_dec_heads > 0), in the model's
 * element size mb. */
static bool mla_step_sizes(struct step_bytes *z, const struct dm_graph *g, int64_t B, int64_t L,
                           uint64_t mb)
{
    int64_t H = g->mla_dec_heads;
    z->mla[0] = z->mla[1] = z->mla[2] = 0;
    return H <= 0 || (mul5(B, L, H, g->mla_dec_kv, mb, &z->mla[0]) &&
                      mul5(B, H, L, g->mla_dec_qk, mb, &z->mla[1]) &&
                      (B == 1 || mul5(B, H, L, g->mla_dec_v, mb, &z->mla[2])));
}

/* Beam search's tensors across the steps (below): the byte sizes of the
 * float32 [B*K, V] scores, of the sequences and beam indices for k = 1
 * (running, finished), 2 (the top-2K candidates), 3 (merged); the running
 * and finished sequences and beam indices, the viewed previous running
 * sequences, the step's logits and summed log-probs, the top-2K
 * candidates'. */
struct beams {
    uint64_t vocab32, seqb[4], idxb[4];
    int32_t rs, sq, rbi, bi, flat, logits, lp, trs, trbi;
};

/* _beam_search (4.51.3) after forward s (below); *lb: the forward's logits. */
static void beam_step(struct dm_sb *b, struct beams *bm, struct causal *c,
                      const struct step_bytes *z, int32_t *lb)
{
    /* logits[:, -1, :] to float32 (the previous step's let go), log_softmax
     * (the previous step's summed scores let go), `del model_outputs`, +
     * running_beam_scores, held to the next step */
    int32_t lg = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, bm->vocab32, -1, -1,
                             "beam_logits", 1);
    rebind(b, &bm->logits, lg);
    int32_t ls = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, bm->vocab32, -1, -1,
                             "log_softmax", 1);
    dm_sb_unref(b, bm->lp);
    dm_sb_unref(b, *lb);
    *lb = -1;
    bm->lp = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_FLOAT, bm->vocab32, -1, -1,
                         "beam_log_probs", 1);
    dm_sb_unref(b, ls);
    /* _get_top_k_continuations: the top-2K candidates' beam indices and
     * sequences gathered (take_along_dim), replacing the previous step's
     * (loop locals) */
    int32_t trbi = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT32, bm->idxb[2], -1, -1,
                               "topk_running_beam_indices", 1);
    int32_t trs = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, bm->seqb[2], -1, -1,
                              "topk_running_sequences", 1);
    rebind(b, &bm->trs, trs);
    rebind(b, &bm->trbi, trbi);
    /* _get_running_beams_for_next_iteration: K of them gathered; the old
     * running_sequences stays viewed by flat_running_sequences until the
     * next step's */
    int32_t nrs = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, bm->seqb[1], -1, -1,
                              "running_sequences", 1);
    int32_t nrbi = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT32, bm->idxb[1], -1, -1,
                               "running_beam_indices", 1);
    rebind(b, &bm->rbi, nrbi);
    rebind(b, &bm->flat, bm->rs);
    bm->rs = nrs;
    /* _update_finished_beams: torch.cat of the finished and the candidates,
     * the best K gathered */
    int32_t ms = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, bm->seqb[3], -1, -1,
                             "merged_sequences", 1);
    int32_t mbi = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT32, bm->idxb[3], -1, -1,
                              "merged_beam_indices", 1);
    int32_t nsq = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT64, bm->seqb[1], -1, -1,
                              "sequences", 1);
    int32_t nbi = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, DM_INT32, bm->idxb[1], -1, -1,
                              "beam_indices", 1);
    dm_sb_unref(b, ms);
    dm_sb_unref(b, mbi);
    rebind(b, &bm->sq, nsq);
    rebind(b, &bm->bi, nbi);
    /* the cache plucked by the chosen beams (after the last forward too):
     * index_select of each layer's keys and values along the batch. A
     * DynamicCache replaces each tensor as its copy is made; the legacy
     * tuple (_reorder_cache) is rebuilt whole while model_kwargs still holds
     * the forward's tuple and model_inputs the previous reordered one (old) */
    bool legacy = b->g->legacy_cache;
    for (int32_t k = 0; k < 2 * c->layers && !b->oom; k++) {
        c->fresh[k] = dm_sb_alloc(b, DNNMEM_CAT_KV_CACHE, c->kvt, z->held[k & 1], c->kv[k], -1,
                                  "cache_reordered", 1);
        if (legacy)
            continue;
        dm_sb_unref(b, c->cur[k]);
        dm_sb_unref(b, c->rest[k]);
        c->rest[k] = -1;
        c->cur[k] = c->fresh[k];
    }
    for (int32_t k = 0; legacy && k < 2 * c->layers && !b->oom; k++) {
        dm_sb_unref(b, c->cur[k]);
        dm_sb_unref(b, c->rest[k]);
        c->rest[k] = -1;
        c->cur[k] = c->fresh[k];
    }
}

/* A MoE layer's experts in a decode forward of transformers 5.x, which
 * GenerationMixin._optimize_model_for_decode switches from grouped_mm to
 * batched_mm (5.0.0 on every device, from 5.1.0 off the CPU; the prefill
 * keeps grouped_mm), as batched_mm_experts_forward (integrations/moe.py,
 * read in the 5.0.0, 5.1.0, 5.2.0, 5.3.0, 5.4.0, 5.7.0, 5.8.0, 5.12.0,
 * 5.16.0, 5.20.0 and 5.24.0 wheels) runs them on N = B tokens, S = N * top_k
 * rows (no routing assumption: every row gathers its expert's weights):
 *  - the rows: 5.0-5.7 token_idx = arange(N)[:, None].expand(-1,
 *    k).reshape(-1) (int64 [S]) and hidden_states[token_idx] [S, H]; 5.8-5.24
 *    hidden_states.repeat_interleave(k, dim=0) [S, H] (its int64 index is
 *    made and freed before the rows, not counted);
 *  - 5.0-5.2 gather both weights first, gate_up_proj[expert_ids] [S, 2I, H]
 *    and down_proj[expert_ids] [S, H, I]; then the up bmm [S, 2I],
 *    _apply_gate's act_fn(gate) [S, I] * up [S, I] (the activation freed), the
 *    down bmm [S, H], * sample_weights [S, H] rebound (the bmm's freed), 5.1-5.2
 *    again * valid_mask [S, H] rebound; every local held to the return;
 *  - 5.3-5.24 gather gate_up_proj[expert_ids], the up bmm [S, 2I], the gated
 *    rows [S, I] rebound (the [S, 2I] freed; 5.3 names them up_proj_out, held
 *    to the return, 5.4-5.24 rebind proj_out again after the down bmm), then
 *    selected_weights = down_proj[expert_ids] made while the gate_up copy is
 *    still bound, which then goes; the down bmm [S, H]; weighted_out [S, H];
 *  - .view(N, k, H).sum(1) [N, H]; .to(hidden_states.dtype) (a copy where the
 *    weights are float32 and the model is not); the locals go at the return.
 * The bool masks and clamped ids [S] are not counted (S bytes each).
 * Measured (torch 2.13 CPU, 5.0.0, tiny-mixtral B 2, the profiler's tensors
 * live at the peak): the 4 MiB and 2 MiB aten::index copies, the 16 KiB bmm,
 * the 8 KiB silu and 8 KiB mul, the 4 KiB rows: the peak at the gated mul. */
static void moe_decode(struct dm_sb *b, const struct moe_dec *m)
{
    const enum dm_dtype t = m->wt;
    const enum dnnmem_category A = DNNMEM_CAT_ACTIVATION;
    int32_t tok = -1, w2 = -1;
    if (m->tok) {
        int32_t ar = dm_sb_alloc(b, A, DM_INT64, m->arange, -1, -1, "moe.arange", 1);
        tok = dm_sb_alloc(b, A, DM_INT64, m->idx, -1, -1, "moe.token_idx", 1);
        dm_sb_unref(b, ar);
    }
    int32_t x = dm_sb_alloc(b, A, t, m->x, -1, -1, "moe.selected_hidden_states", 1);
    int32_t w1 = dm_sb_alloc(b, A, t, m->w1, -1, -1, "moe.gate_up_proj[expert_ids]", 1);
    if (m->both)
        w2 = dm_sb_alloc(b, A, t, m->w2, -1, -1, "moe.down_proj[expert_ids]", 1);
    int32_t up = dm_sb_alloc(b, A, t, m->up, -1, -1, "moe.bmm_up", 1);
    int32_t act = dm_sb_alloc(b, A, t, m->half, -1, -1, "moe.act_fn", 1);
    int32_t gated = dm_sb_alloc(b, A, t, m->half, -1, -1, "moe.gated", 1);
    dm_sb_unref(b, act);
    if (!m->both) {
        rebind(b, &up, -1);
        w2 = dm_sb_alloc(b, A, t, m->w2, -1, -1, "moe.down_proj[expert_ids]", 1);
        rebind(b, &w1, -1);
    }
    int32_t down = dm_sb_alloc(b, A, t, m->down, -1, -1, "moe.bmm_down", 1);
    if (!m->both && !m->hold)
        rebind(b, &gated, -1);
    int32_t wo = dm_sb_alloc(b, A, m->wst, m->weighted, -1, -1, "moe.weighted_out", 1);
    if (m->both)
        rebind(b, &down, -1);
    if (m->mask)
        rebind(b, &wo, dm_sb_alloc(b, A, m->wst, m->weighted, -1, -1, "moe.valid_mask", 1));
    int32_t sum = dm_sb_alloc(b, A, m->wst, m->sum, -1, -1, "moe.final_hidden_states", 1);
    int32_t cast = m->cast ? dm_sb_alloc(b, A, t, m->cast, -1, -1, "moe.to", 1) : -1;
    int32_t locals[] = {tok, x, w1, w2, up, gated, down, wo, sum, cast};
    for (size_t i = 0; i < sizeof locals / sizeof *locals; i++)
        dm_sb_unref(b, locals[i]);
}

/* The sizes of moe_decode's tensors at N tokens (false: they overflow). */
static bool moe_sizes(struct moe_dec *m, const struct dm_graph *g, int64_t N, enum dm_dtype model)
{
    int64_t S, H = g->moe_dec_hidden, I = g->moe_dec_inter;
    int v = g->moe_dec_release;
    uint64_t e = kv_bytes(model, DNNMEM_KV_AUTO), ws = g->moe_dec_w32 ? 4 : e;
    m->layer = g->moe_dec_layer;
    m->n = g->n_moe_dec;
    m->both = v < 503;
    m->mask = v >= 501 && v < 503;
    m->tok = v < 508;
    m->hold = v == 503;
    m->wt = model;
    m->wst = g->moe_dec_w32 ? DM_FLOAT : model;
    m->cast = 0;
    if (!dm_mul_ok(N, g->moe_dec_top_k, &S) || !mul5(S, H, 1, 1, e, &m->x) ||
        !mul5(S, 2 * I, H, 1, e, &m->w1) || !mul5(S, H, I, 1, e, &m->w2) ||
        !mul5(S, 2, I, 1, e, &m->up) || !mul5(S, I, 1, 1, e, &m->half) ||
        !mul5(S, H, 1, 1, e, &m->down) || !mul5(S, H, 1, 1, ws, &m->weighted) ||
        !mul5(N, H, 1, 1, ws, &m->sum) || !mul5(S, 1, 1, 1, 8, &m->idx) ||
        !mul5(N, 1, 1, 1, 8, &m->arange))
        return false;
    if (ws != e && !mul5(N, H, 1, 1, e, &m->cast)) /* .to(hidden_states.dtype) */
        return false;
    return true;
}

/* One decode forward's DeepseekV2Attention / DeepseekV3Attention with the
 * latent cache (transformers 5.15-5.24, src/load/hf/deepseek.c), after the
 * cache's torch.cat of kv_nope [B, 1, L, kv_lora] and k_rot [B, 1, L, R]:
 * expand_kv's kv_b_proj output [B, 1, L, H (nope + v)] and key_states
 * [B, H, L, nope + R] (new_empty, filled by copy_), eager_attention_forward's
 * scores and softmax, and torch.matmul's copy of the strided values [B, H,
 * L, v] (its fold into bmm: a view of kv_b_proj's output in [B, L, H, .]
 * order, copied at batch > 1, as the prefill's hf_matmul_fold); all go when
 * the attention returns. Eager only: the sdpa math kernel's decode
 * transients are not modelled (the caller counts none, as for the other
 * families' sdpa). */
static void mla_decode(struct dm_sb *b, enum dm_dtype model, const struct step_bytes *z,
                       bool eager, bool upcast)
{
    const enum dnnmem_category A = DNNMEM_CAT_ACTIVATION;
    int32_t kv = dm_sb_alloc(b, A, model, z->mla[0], -1, -1, "kv_b_proj", 1);
    int32_t key = dm_sb_alloc(b, A, model, z->mla[1], -1, -1, "key_states", 1);
    int32_t p = eager ? eager_scores(b, model, z->scores, z->scores32, 0, upcast) : -1;
    int32_t vc = p >= 0 && z->mla[2] ? dm_sb_alloc(b, A, model, z->mla[2], -1, -1,
                                                   "value_states.fold", 1)
                                     : -1;
    int32_t locals[] = {vc, p, key, kv};
    for (size_t i = 0; i < sizeof locals / sizeof *locals; i++)
        dm_sb_unref(b, locals[i]);
}

/* The forward of one token: the [B, 1, 1, L] mask (a clone of the expanded
 * [1, L] one) held to its end, each layer's cache grown, its attention's
 * transients; returns the step's logits. */
static int32_t decode_forward(struct dm_sb *b, struct causal *c, const struct step_bytes *z)
{
    const enum dm_dtype model = c->model;
    int32_t fm = c->decode_mask ? dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, z->mask, -1, -1,
                                              "causal_mask", 1)
                                : -1;
    if (c->inverted_mask) {
        int32_t m1 = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, z->mask, -1, -1,
                                 "attention_mask.to", 1);
        int32_t m2 = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, z->mask, -1, -1,
                                 "attention_mask.rsub", 1);
        fm = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, z->mask, -1, -1, "attention_mask.4d", 1);
        dm_sb_unref(b, m2);
        dm_sb_unref(b, m1);
    }
    bool legacy = b->g->legacy_cache;
    for (int32_t l = 0; l < c->layers && !b->oom; l++) {
        for (int j = 0; j < 2; j++) {
            int32_t nbuf = dm_sb_alloc(b, DNNMEM_CAT_KV_CACHE, c->kvt, z->cache[j],
                                       c->kv[2 * l + j], -1, "cache", 1);
            if (legacy) /* past_key_values still holds it */
                c->old[2 * l + j] = c->cur[2 * l + j];
            else if (c->cur[2 * l + j] >= 0)
                dm_sb_unref(b, c->cur[2 * l + j]);
            c->cur[2 * l + j] = nbuf;
        }
        for (int j = 0; !legacy && j < 2; j++)
            if (c->rest[2 * l + j] >= 0) {
                dm_sb_unref(b, c->rest[2 * l + j]);
                c->rest[2 * l + j] = -1;
            }
        if (z->mla[0]) { /* DeepSeek's latent cache (below) */
            mla_decode(b, model, z, c->eager, c->upcast);
            if (l < c->moe.n && c->moe.layer[l])
                moe_decode(b, &c->moe);
            continue;
        }
        int32_t r[2] = {-1, -1};
        for (int j = 0; c->repeat && j < 2; j++)
            r[j] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, z->rep[j], c->kv[2 * l + j], -1,
                               "repeat_kv", 1);
        if (c->eager) /* scores, + mask, softmax (float32), .to(dtype) */
            dm_sb_unref(b, eager_scores(b, model, z->scores, z->scores32, 0, c->upcast));
        for (int j = 0; j < 2; j++)
            dm_sb_unref(b, r[j]);
        if (l < c->moe.n && c->moe.layer[l])
            moe_decode(b, &c->moe);
    }
    int32_t lb = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, model, z->step_logits, c->logits, -1,
                             "step", 1);
    dm_sb_unref(b, fm);
    return lb;
}

/*
 * Beam search (num_beams K > 1, do_sample False): GenerationMixin._beam_search
 * of transformers 4.51.3, the vectorized one of "[generate] vectorized beam
 * search" (#35802, 4.50), read in a copy of v4.51.3's generation/utils.py
 * (an Intel latency hook's "Copied from .../v4.51.3/src/transformers/
 * generation/utils.py#L3751"), its static helpers in a later copy with the
 * same tensor ops. generate() repeat_interleaves input_ids and
 * attention_mask to B*K rows (_expand_inputs_for_generation), so every
 * forward runs at B*K (the graph's batch, src/api.c; what comes before the
 * prefill: dm_sb_generate_setup). After forward s (the last too), with V
 * the vocabulary, M = P + T:
 *  - logits = outputs.logits[:, -1, :].to(copy=True, dtype=float32), [B*K,
 *    V] (the previous step's dropped as the name is rebound), log_softmax
 *    (the previous step's summed scores dropped), `del model_outputs` (the
 *    step's logits; the prompt's [B*K, P, V] where the forward has no
 *    logits_to_keep), + running_beam_scores[:, :, None] (the log_softmax
 *    dropped), viewed as [B, K*V] and held to the next step;
 *  - _get_top_k_continuations: topk of 2K (no eos: beams_to_keep =
 *    max(2, 1 + n_eos) * K), the candidates' running_beam_indices [B, 2K,
 *    T] int32 and running_sequences [B, 2K, M] int64 gathered
 *    (take_along_dim), held as loop locals to the next step;
 *  - _get_running_beams_for_next_iteration: K of them gathered, [B, K, M]
 *    and [B, K, T]; the old running_sequences stays alive through
 *    flat_running_sequences (a view) until the next step makes its own;
 *  - _update_finished_beams: torch.cat of the finished and the candidates
 *    ([B, 3K, M] int64, [B, 3K, T] int32), the best K gathered, the merged
 *    dropped at the return and the old finished ones at the unpacking;
 *  - _temporary_reorder_cache(past_key_values, running_beam_indices[...,
 *    s - 1] flattened): a DynamicCache's reorder_cache index_selects each
 *    layer's keys, then values, along the batch into new tensors that replace
 *    the list entries (one layer's tensor of transient); a legacy tuple
 *    (GPT-2's and BioGPT's _reorder_cache) is rebuilt whole while
 *    model_kwargs still holds the forward's tuple and model_inputs the
 *    previous reordered one: three caches (L - 2, L - 1 and L - 1
 *    positions) are live at its end, the peak of GPT-2's decode steps.
 * The [B, K] and [B, 2K] scores, indices and flags (a few hundred bytes),
 * the decode forwards' [B*K, 1] inputs and position_ids' [B*K, L] cumsum
 * transients are not counted. There is no growing input_ids: the
 * static-shaped sequences hold the tokens. The steps are simulated as for
 * greedy (the first, then the last eight).
 */
enum dnnmem_status dm_sb_generate(struct dm_sb *b, struct dnnmem_error *err)
{
    if (b->g->cache_len > 0)
        return hybrid_decode(b, err);
    if (b->g->whisper)
        return whisper_decode(b, err);
    if (b->g->encoder_decoder)
        return seq2seq_decode(b, err);
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    const struct dm_run *run = b->run;
    struct causal c = {0};
    c.layers = cache_layers(g, "present.", ".key", g->n_outputs);
    int32_t layers = c.layers, logits = g->n_outputs ? g->outputs[0] : -1;
    if (layers == 0 || logits < 0 || t[logits].rank != 3) /* the check table's row says so */
        return dm_refuse(b->s, DM_REFUSE_GEN_NO_CACHE, NULL, NULL, err);
    /* a legacy tuple cache with --kv-dtype: refused by the check table
     * (src/estimate/check.c, DM_CHECK_SCHEDULE) */
    c.logits = logits;
    c.kv = malloc(2 * (size_t)layers * sizeof *c.kv);
    c.cur = malloc(2 * (size_t)layers * sizeof *c.cur);
    c.rest = malloc(2 * (size_t)layers * sizeof *c.rest);
    c.old = malloc(2 * (size_t)layers * sizeof *c.old);
    c.fresh = malloc(2 * (size_t)layers * sizeof *c.fresh);
    if (!c.kv || !c.cur || !c.rest || !c.old || !c.fresh) {
        causal_free(&c);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    for (int32_t l = 0; l < layers; l++)
        for (int j = 0; j < 2; j++) {
            char name[64];
            snprintf(name, sizeof name, "present.%d.%s", l, j ? "value" : "key");
            c.kv[2 * l + j] = dm_graph_find(g, name);
            c.old[2 * l + j] = -1;
            c.cur[2 * l + j] = b->cur[c.kv[2 * l + j]];
            snprintf(name, sizeof name, "present.%d.qkv.%d", l, j);
            int32_t r = dm_graph_find(g, name);
            c.rest[2 * l + j] = r >= 0 ? b->cur[r] : -1;
            /* what the cache holds is KV-cache bytes from the moment it is
             * made, the prefill's peak included (the whole buffer a present
             * is a view of: the view keeps it) */
            if (c.cur[2 * l + j] >= 0)
                b->s->buf[c.cur[2 * l + j]].category = DNNMEM_CAT_KV_CACHE;
        }
    const struct dm_tinfo *k0 = &t[c.kv[0]];
    int64_t B = k0->dims[0], K = k0->dims[1], P = k0->dims[2];
    /* keys and values may differ in head size (DeepSeek's MLA caches keys of
     * qk_nope + qk_rope and values of v_head_dim) */
    int64_t Dkv[2] = {k0->dims[3], t[c.kv[1]].rank == 4 ? t[c.kv[1]].dims[3] : k0->dims[3]};
    int64_t V = t[logits].dims[2];
    c.model = k0->dtype;
    /* heads of the queries, and eager's softmax type, from the graph */
    int64_t H = K;
    bool flash;
    attention_kind(g, t, &H, &c.eager, &c.upcast, &flash);
    /* 4.51's sdpa_attention_forward repeats as eager does; flash_attention_2
     * reads the grouped cache as it is */
    c.repeat = H != K && !flash;
    uint64_t kvb = kv_bytes(c.model, run->kv_dtype), mb = kv_bytes(c.model, DNNMEM_KV_AUTO);
    c.kvt = kv_type(c.model, run->kv_dtype);
    enum dnnmem_status st = DNNMEM_OK;
    if (g->moe_dec_layer && !moe_sizes(&c.moe, g, B, c.model))
        st = dm_fail(err, DNNMEM_E_SHAPE, "%s: the decode steps' MoE expert copies overflow",
                     g->path);
    /* beam search: the graph's batch B is the caller's (Bt) times num_beams
     * (Kb); _beam_search's static-shaped tensors are [Bt, k x Kb, P + T]
     * int64 (sequences) and [Bt, k x Kb, T] int32 (beam indices) */
    int64_t Kb = run->gen_beams > 1 ? run->gen_beams : 1, Bt = B / Kb, Mx = 0;
    bool beams = Kb > 1;
    struct beams bm = {0};
    for (int k = 1; beams && k <= 3 && st == DNNMEM_OK; k++)
        if (!dm_add_ok(P, run->gen_tokens, &Mx) || !mul5(B, V, 1, 1, 4, &bm.vocab32) ||
            !mul5(Bt, k * Kb, Mx, 1, 8, &bm.seqb[k]) ||
            !mul5(Bt, k * Kb, run->gen_tokens, 1, 4, &bm.idxb[k]))
            st = dm_fail(err, DNNMEM_E_SHAPE, "%s: beam search's sequences overflow", g->path);
    const int32_t *pre = b->gen_pre;
    bm.rs = pre[DM_GEN_RSEQ];
    bm.sq = pre[DM_GEN_SEQ];
    bm.rbi = pre[DM_GEN_RIDX];
    bm.bi = pre[DM_GEN_IDX];
    bm.flat = bm.logits = bm.lp = bm.trs = bm.trbi = -1;
    struct picker pk = {-1, -1, -1, -1};

    /* the prefill's logits: the last position's only where generate passes
     * logits_to_keep=1 (the lm_head then reads hidden[:, -1:]) */
    int32_t lb = b->cur[logits];
    uint64_t row;
    if (g->logits_to_keep && lb >= 0 && mul5(B, 1, V, 1, mb, &row))
        b->s->buf[lb].bytes = row;
    /* generate passes attention_mask (ones [B, P]) and position_ids
     * (attention_mask.cumsum(-1) - 1, [B, P]) to the prefill: with a 2-D
     * mask, _prepare_4d_causal_attention_mask_with_cache_position clones the
     * expanded [1, 1, P, P] mask to [B, 1, P, P] (eager; sdpa drops an
     * all-ones mask; the builders name the [P, P] tensor's view
     * "causal_mask"; OPT's forward makes its own 2-D mask, so its graph has
     * the [B, 1, P, P] clone already), and the rotary embedding's cos and sin
     * are [B, P, D] */
    if (g->gen_mask == DM_GEN_MASK_CAUSAL) {
        prefill_batch(b, "causal_mask", 2, B);
        prefill_batch(b, "position_embeddings.cos", 3, B);
        prefill_batch(b, "position_embeddings.sin", 3, B);
    }
    /* GPT-2's wpe(position_ids): [B, P, E] (model(input_ids): arange, [1, P, E]) */
    prefill_batch(b, "position_embeds", 3, B);
    int32_t prev_mask = pre[DM_GEN_MASK];
    int64_t T = run->gen_tokens;
    /* the 4-D mask of each decode forward: eager only (sdpa drops an
     * all-ones attention_mask), _update_causal_mask's clone */
    c.decode_mask = c.eager && g->gen_mask == DM_GEN_MASK_CAUSAL;
    /* GPT2Model's eager path: attention_mask[:, None, None, :].to(dtype),
     * then (1.0 - m) * finfo.min: three [B, 1, 1, L] tensors made, the last
     * held (sdpa: an all-ones mask is dropped, _ignore_causal_mask_sdpa);
     * BioGPT's _expand_mask: .to(dtype), 1.0 - m, masked_fill (and a bool
     * [B, 1, 1, L] of one byte an element, not counted) */
    c.inverted_mask = c.eager && g->gen_mask == DM_GEN_MASK_INVERTED;
    for (int64_t s = 1; s <= T && !b->oom && st == DNNMEM_OK; s = s == 1 && T > 9 ? T - 7 : s + 1) {
        int64_t L = P + s; /* after this step's update (step T has no forward) */
        struct step_bytes z;
        if (!step_sizes(&z, B, K, H, L, Dkv, V, kvb, mb) || !mla_step_sizes(&z, g, B, L, mb)) {
            st = dm_fail(err, DNNMEM_E_SHAPE, "%s: the KV cache of %lld tokens overflows",
                         g->path, (long long)L);
            break;
        }
        b->iteration = (int)(s < INT16_MAX ? s : INT16_MAX);
        dm_sb_step(b, DM_PHASE_DECODE, -1);
        /* after the last forward: attention_mask grown to [B, L] int64
         * (_update_model_kwargs_for_generation; the [B, P] generate made
         * before the prefill is not counted), the sampling from its logits,
         * which are then dropped, and input_ids grown to [B, L] (the
         * caller's prompt stays held) */
        int32_t am = dm_sb_alloc(b, DNNMEM_CAT_INPUT, DM_INT64, z.ids, -1, -1, "attention_mask", 1);
        rebind(b, &prev_mask, am);
        if (beams)
            beam_step(b, &bm, &c, &z, &lb);
        else
            pick_tokens(b, &pk, B, V, z.next, z.ids, "input_ids", &lb);
        if (s == T) /* the T-th token came from the last forward: no cache for it */
            break;
        /* beam search: the next forward's flat_running_sequences views the
         * running sequences chosen, letting the previous ones go, and its
         * model_inputs replace the prefill's */
        dm_sb_unref(b, bm.flat);
        bm.flat = -1;
        for (int k = DM_GEN_IDS; s == 1 && k <= DM_GEN_POS; k++)
            dm_sb_unref(b, pre[k]);
        /* the legacy cache: the rebinding of model_inputs (after
         * prepare_inputs_for_generation) lets go of the tuple the previous
         * forward was given, the prefill's presents (and the fused c_attn
         * outputs they are views of) at step 2 */
        for (int32_t k = 0; k < 2 * layers; k++)
            if (c.old[k] >= 0) {
                dm_sb_unref(b, c.old[k]);
                c.old[k] = -1;
                dm_sb_unref(b, c.rest[k]);
                c.rest[k] = -1;
            }
        lb = decode_forward(b, &c, &z);
    }
    causal_free(&c);
    return b->oom ? dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path) : st;
}
