/*
 * mamba.c (src/load/hf/): MambaForCausalLM ("mamba") as transformers 5.24.0
 * runs it without the mamba_ssm and causal_conv1d kernels (modeling_mamba.py,
 * read in the 5.24.0 wheel): the torch fallbacks of causal_conv1d_fn and
 * mamba_selective_scan, its sequential loop (a SelectiveScan node, ops.def),
 * which is what runs on a CPU (mamba_inner_fn's fallback returns None, so
 * training takes the same path; use_associative_scan acts only under
 * torch.compile tracing). Measured against the real release:
 * tests/validation/hf-real-mamba-cpu.jsonl.
 *
 *   MambaForCausalLM: backbone (embeddings, layers, norm_f), lm_head tied to
 *   the embeddings by default; logits = lm_head(h).float().
 *   MambaBlock: residual = x; y = norm(x) (MambaRMSNorm: LlamaRMSNorm's
 *   steps); residual.to(float32) (a no-op in float32); x = residual + mixer(y).
 *   MambaMixer (no cache):
 *     p = in_proj(y).transpose(1, 2)                      [B, 2D, L], a view
 *     A = -exp(A_log.float())                             [D, N]
 *     hs, gate = p.chunk(2, dim=1)                        views
 *     hs = silu(conv1d(hs)[..., :L])  (depthwise, padding K-1)
 *     t, B, C = split(x_proj(hs.transpose(1, 2)), [R, N, N])
 *     dt = dt_proj.weight @ t.transpose(1, 2)             [B, D, L]
 *     scan(hs, dt, A, B, C, D, z=gate, delta_bias=dt_proj.bias, softplus):
 *       dt = softplus(dt + bias[..., None])
 *       dA = exp(A[None, :, None, :] * dt[..., None])     [B, D, L, N]
 *       dB = dt[..., None] * B[:, None]                   [B, D, L, N]
 *       dBu = dB * hs[..., None]                          [B, D, L, N]
 *       the loop -> torch.stack(scan_outputs, dim=-1)     [B, D, L]
 *       y = (y + hs * D[None, :, None]) * silu(gate)
 *     out_proj(y.transpose(1, 2))
 * With use_cache (inference: MambaModel sets use_cache False in training) a
 * DynamicCache holds per layer a conv state [B, D, K] (zeros made before
 * the conv, the last K inputs copied in place) and a recurrent state
 * [B, D, N] (zeros_like of the last state, copied in place), returned with
 * the logits (outputs "cache.N.conv", "cache.N.ssm").
 *
 * PyTorch's copies: at::linear reshapes a non-contiguous 3-D input, a clone
 * (x_proj's and out_proj's inputs, transposed views); dt_proj.weight @ t is
 * torch.matmul's fold of the 3-D operand (mm on t as [B * L, R], then
 * .mT().contiguous(): a [B, D, L] copy, the mm result freed); torch.stack
 * copies the L per-step results, which the scan_outputs list holds until
 * mamba_selective_scan returns. Measured (the profiler's allocation events,
 * 5.24.0 on torch 2.13 CPU): aten::clone < aten::reshape < aten::linear and
 * aten::clone < aten::contiguous < aten::matmul, [B, L, D] each, and 128
 * aten::bmm results of [2, 128, 1] live at the inference peak of b2 s128.
 *
 * Refused, each with what is modelled: other transformers releases, the CUDA
 * kernels' path (any --device but cpu), use_mambapy, fp16/bf16 and autocast,
 * generate, LoRA, quantization, hidden_act other than silu, and gradient
 * checkpointing on 4.56 (not measured there). On 5.24 --checkpoint
 * '/backbone/layers.*' is what activation_checkpointing_enable() makes
 * (every MambaBlock, use_reentrant=False): the generic torch.utils.checkpoint
 * replay (src/train/checkpoint.c), measured within +0.8%
 * (hf-real-mamba-cpu.jsonl's -gc- rows).
 */
#include "hf.h"

struct mamba {
    int64_t vocab, hidden, state, layers, inner, conv, rank;
    double eps;
    bool bias, conv_bias, tie, use_cache;
};

static void read_config(struct hf *h, struct mamba *c)
{
    /* MambaConfig's defaults (configuration_mamba.py, 5.24.0) */
    c->vocab = hf_get_int(h, "vocab_size", 50280, MAX_SIZE);
    c->hidden = hf_get_int(h, "hidden_size", 768, MAX_SIZE);
    c->state = hf_get_int(h, "state_size", 16, MAX_SIZE);
    c->layers = hf_get_int(h, "num_hidden_layers", 32, MAX_LAYERS);
    c->eps = hf_get_num(h, "layer_norm_epsilon", 1e-5, 0, 1);
    int64_t expand = hf_get_int(h, "expand", 2, 1024);
    c->conv = hf_get_int(h, "conv_kernel", 4, 1 << 16);
    c->bias = hf_get_bool(h, "use_bias", false);
    c->conv_bias = hf_get_bool(h, "use_conv_bias", true);
    c->tie = hf_get_bool(h, "tie_word_embeddings", true);
    c->use_cache = hf_get_bool(h, "use_cache", true);
    const char *act = hf_get_str(h, "hidden_act", "silu");
    bool mambapy = hf_get_bool(h, "use_mambapy", false);
    if (h->st != DNNMEM_OK)
        return;
    /* intermediate_size = int(expand * hidden_size), whatever the file says
     * (MambaConfig.__post_init__); time_step_rank "auto": ceil(hidden / 16) */
    if (!dm_mul_ok(expand, c->hidden, &c->inner) || c->inner > MAX_SIZE) {
        hf_fail(h, DNNMEM_E_LIMIT, "config fields 'expand' x 'hidden_size' exceed %lld",
                (long long)MAX_SIZE);
        return;
    }
    json_t *r = hf_field(h, "time_step_rank");
    if (!r || json_is_null(r) || (json_is_string(r) && strcmp(json_string_value(r), "auto") == 0))
        c->rank = (c->hidden + 15) / 16;
    else if (json_is_integer(r) && json_integer_value(r) > 0 && json_integer_value(r) <= MAX_SIZE)
        c->rank = json_integer_value(r);
    else
        hf_fail(h, DNNMEM_E_MODEL,
                "config field 'time_step_rank' must be \"auto\" or a positive integer");
    if (h->st == DNNMEM_OK && strcmp(act, "silu") != 0)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'hidden_act' is '%s'; modelled for mamba: silu (MambaConfig's "
                "default)",
                act);
    if (h->st == DNNMEM_OK && mambapy)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "config field 'use_mambapy' is true; modelled for mamba: false, the sequential "
                "loop of the torch path (mambapy's pscan is not modelled)");
}

/* What the run asks that is not modelled (the header's list). 5.25 builds
 * 5.24's graph: its MambaMixer moved the conv and the scan into
 * causal_conv1d_forward and mamba_scan_forward (modeling_mamba.py 5.25.0:
 * tensor_split views, torch.cat of the one scan output, after the scan's
 * peak), measured at 5.25.0 on torch 2.13 CPU within 0.84% (45 rows,
 * tests/validation/hf-real-5.25-cpu.jsonl). Not modelled, as at 5.24: the
 * weight-derived A = -exp(A_log.float()) (the front end's graphs compute no
 * weight-only tensor), which 5.25 makes twice (the mixer's and the scan's:
 * 4 x D x N bytes more at every measured inference peak), and the 8-byte
 * cumulative_length_linear per layer of 5.25's LinearAttentionLayer
 * (cache_utils.py 5.25.0): -0.1% to -0.6% at inference. */
static void check_run(struct hf *h)
{
    const char *what = NULL;
    if (h->transformers != 456 && h->transformers != 524 && h->transformers != 525)
        what = "a transformers release other than 4.56, 5.24 and 5.25";
    else if (!h->cpu)
        what = "the CUDA kernels path (mamba_ssm, causal_conv1d; any --device but cpu)";
    else if (h->half || h->amp)
        what = "fp16, bf16 or autocast";
    else if (h->gen_tokens > 0)
        what = "--mode generate";
    else if (h->lora)
        what = "LoRA adapters";
    else if (h->ckpt && h->transformers < 524)
        what = "gradient checkpointing (--checkpoint) on 4.56 (measured on 5.24 and 5.25)";
    else if (h->q.method != Q_NONE || h->opt_quant != DNNMEM_QUANT_NONE)
        what = "quantized linear layers";
    if (what)
        hf_fail(h, DNNMEM_E_UNSUPPORTED,
                "model_type 'mamba': %s is not modelled; modelled: transformers 4.56, 5.24 and "
                "5.25, the torch slow path (no mamba_ssm / causal_conv1d kernels) on --device "
                "cpu, float32, training (gradient checkpointing on 5.24 and 5.25) and inference",
                what);
}

/* Tensor.clone(): linear.c's Add of 0, a contiguous copy whose backward
 * passes the grad on. */
static int32_t copy(struct hf *h, int32_t x)
{
    return hf_op(h, DM_OP_Add, 2, x, hf_const_f(h, 0.0));
}

/* nn.Linear on a transposed [B, L, in] view: at::linear's matmul folds it
 * to [B * L, in] with reshape, which copies it, but at batch 1, where it
 * drops the size-1 dim, a view whatever the strides (hf_matmul_fold;
 * measured, 5.24 on torch 2.13: aten::clone < aten::reshape < aten::linear
 * at batch 2 and 4, none at batch 1); then mm, the bias added in place, and
 * the [B, L, out] view of the result. */
static int32_t linear_t(struct hf *h, int32_t x, int64_t in, int64_t out, bool bias)
{
    int32_t x2 = hf_reshape(h, x, INTS(-1, in));
    hf_attr_i(h, "matmul_fold", 1);
    int32_t y = hf_linear(h, x2, in, out, bias, -1, NULL);
    int32_t s = hf_op(h, DM_OP_Shape, 1, x);
    hf_attr_i(h, "start", 0);
    hf_attr_i(h, "end", 2);
    int32_t shape = hf_op(h, DM_OP_Concat, 2, s, hf_const_ints(h, INTS(out)));
    hf_attr_i(h, "axis", 0);
    return hf_op(h, DM_OP_Reshape, 2, y, shape);
}

/* zeros [B, d1, d2], B x's first dim (a cache state, ConstantOfShape) */
static int32_t zeros_b(struct hf *h, int32_t x, int64_t d1, int64_t d2, const char *name)
{
    int32_t s = hf_op(h, DM_OP_Shape, 1, x);
    hf_attr_i(h, "start", 0);
    hf_attr_i(h, "end", 1);
    int32_t shape = hf_op(h, DM_OP_Concat, 2, s, hf_const_ints(h, INTS(d1, d2)));
    hf_attr_i(h, "axis", 0);
    h->out_name = name;
    return hf_dec_fill(h, shape, DM_FLOAT, 0.0);
}

/* mamba_selective_scan (the header): y [B, D, L] from the conv output hs,
 * dt [B, D, L], A [D, N], Bm and Cm [B, L, N], the gate [B, D, L]; *last:
 * the last state. */
static int32_t selective_scan(struct hf *h, const struct mamba *c, int32_t hs, int32_t dt,
                              int32_t A, int32_t Bm, int32_t Cm, int32_t gate, int32_t locals[6])
{
    int64_t D = c->inner;
    int32_t Dp = hf_param(h, "D", DM_FLOAT, 1, &D);
    if (h->transformers >= 500) { /* 5.x: delta_bias and delta_softplus inside the scan */
        int32_t bias = hf_param(h, "dt_proj.bias", DM_FLOAT, 1, &D);
        dt = hf_op(h, DM_OP_Add, 2, dt, hf_unsqueeze(h, bias, INTS(1)));
        dt = hf_op(h, DM_OP_Softplus, 1, dt);
    }
    int32_t dt4 = hf_unsqueeze(h, dt, INTS(3));
    int32_t dA = hf_op(h, DM_OP_Mul, 2, hf_unsqueeze(h, A, INTS(0, 2)), dt4);
    dA = hf_op(h, DM_OP_Exp, 1, dA);
    int32_t dB = hf_op(h, DM_OP_Mul, 2, dt4, hf_unsqueeze(h, Bm, INTS(1)));
    int32_t dBu = hf_op(h, DM_OP_Mul, 2, dB, hf_unsqueeze(h, hs, INTS(3)));
    struct dm_node *n = hf_node(h, DM_OP_SelectiveScan, 3, (int32_t[]){dA, dBu, Cm}, 2);
    if (!n)
        return -1;
    int32_t steps = n->out[0], last = n->out[1];
    int32_t y = copy(h, steps); /* torch.stack(scan_outputs, dim=-1) */
    y = hf_op(h, DM_OP_Add, 2, y,
              hf_op(h, DM_OP_Mul, 2, hs, hf_unsqueeze(h, Dp, INTS(0, 2))));
    y = hf_op(h, DM_OP_Mul, 2, y, hf_op(h, DM_OP_Silu, 1, gate));
    /* Python locals: until mamba_selective_scan returns (5.x), or slow_forward
     * (4.x, the caller's hf_hold_all) */
    memcpy(locals, (int32_t[]){dt, dA, dB, dBu, steps, last}, 6 * sizeof *locals);
    if (h->transformers >= 500)
        hf_hold_all(h, locals, 6, hf_last_node(h));
    return y;
}

/* 4.x's slow_forward with a MambaCache (every layer's zeros made before the
 * first layer: cache_456): ssm_state = cache.ssm_states[i].clone(), a
 * local; the prefill's conv_state = F.pad(hs, (K - L, 0)) ([B, D, K]: the
 * last K columns, a local), then update_conv_state's conv_state.roll(-1)
 * ([B, D, K], freed when it returns); zero_() and += into the cache in
 * place. locals[]: the two the mixer holds until it returns. */
static void prefill_456(struct hf *h, const struct mamba *c, int i, int32_t hs, int32_t locals[2])
{
    char name[64];
    snprintf(name, sizeof name, "cache.%d.ssm", i);
    locals[0] = copy(h, dm_graph_find(h->g, name));
    locals[1] = copy(h, hf_op(h, DM_OP_Slice, 4, hs, hf_const_ints(h, INTS(-c->conv)),
                              hf_const_ints(h, INTS(INT64_MAX)), hf_const_ints(h, INTS(2))));
    copy(h, locals[1]); /* the roll */
}

/* 4.x's MambaCache(config, batch): conv_states [B, D, K] and ssm_states
 * [B, D, N] zeros for every layer, made after the embedding (x [B, L, H]);
 * the cache_position arange(K), K int64 values, is not counted. */
static void cache_456(struct hf *h, const struct mamba *c, int32_t x)
{
    char name[64];
    for (int64_t i = 0; i < c->layers; i++) {
        snprintf(name, sizeof name, "cache.%lld.conv", (long long)i);
        zeros_b(h, x, c->inner, c->conv, name);
        snprintf(name, sizeof name, "cache.%lld.ssm", (long long)i);
        zeros_b(h, x, c->inner, c->state, name);
    }
}

/* MambaMixer.forward (the header) on the normed [B, L, H]. */
static int32_t mixer(struct hf *h, const struct mamba *c, int i, bool cache, int32_t x)
{
    int64_t D = c->inner, N = c->state, K = c->conv, R = c->rank;
    size_t s = hf_enter(h, "in_proj");
    int32_t p = hf_linear(h, x, c->hidden, 2 * D, c->bias, -1, NULL);
    hf_leave(h, s);
    p = hf_transpose(h, p, INTS(0, 2, 1));
    int32_t A = hf_op(h, DM_OP_Neg, 1,
                      hf_op(h, DM_OP_Exp, 1, hf_param(h, "A_log", DM_FLOAT, 2, (int64_t[]){D, N})));
    int32_t hs = hf_narrow(h, p, 1, 0, D), gate = hf_narrow(h, p, 1, D, D);
    char name[64];
    if (cache && h->transformers >= 500) { /* update_conv_state's lazy zeros, copied into */
        snprintf(name, sizeof name, "cache.%d.conv", i);
        zeros_b(h, hs, D, K, name);
    }
    int32_t pre[2] = {-1, -1};
    if (cache && h->transformers < 500)
        prefill_456(h, c, i, hs, pre);
    s = hf_enter(h, "conv1d");
    int32_t w = hf_param(h, "weight", DM_FLOAT, 3, (int64_t[]){D, 1, K});
    int32_t cb = c->conv_bias ? hf_param(h, "bias", DM_FLOAT, 1, &D) : -1;
    hs = cb >= 0 ? hf_op(h, DM_OP_Conv, 3, hs, w, cb) : hf_op(h, DM_OP_Conv, 2, hs, w);
    hf_attr_ints(h, "kernel_shape", INTS(K));
    hf_attr_ints(h, "pads", INTS(K - 1, K - 1));
    hf_attr_i(h, "group", D);
    hf_leave(h, s);
    /* [..., :seq_len]: the conv's L + K - 1 columns less the last K - 1 (a view) */
    if (K > 1)
        hs = hf_op(h, DM_OP_Slice, 4, hs, hf_const_ints(h, INTS(0)), hf_const_ints(h, INTS(1 - K)),
                   hf_const_ints(h, INTS(2)));
    hs = hf_op(h, DM_OP_Silu, 1, hs);
    s = hf_enter(h, "x_proj");
    int32_t xp = linear_t(h, hf_transpose(h, hs, INTS(0, 2, 1)), D, R + 2 * N, false);
    hf_leave(h, s);
    int32_t t = hf_narrow(h, xp, 2, 0, R), Bm = hf_narrow(h, xp, 2, R, N),
            Cm = hf_narrow(h, xp, 2, R + N, N);
    s = hf_enter(h, "dt_proj");
    int32_t dt;
    if (h->transformers >= 500) { /* dt_proj.weight @ t.transpose(1, 2): matmul's fold */
        int32_t dw = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){D, R});
        dt = hf_op(h, DM_OP_MatMul, 2, t, hf_transpose(h, dw, INTS(1, 0)));
        dt = copy(h, hf_transpose(h, dt, INTS(0, 2, 1)));
    } else { /* softplus(dt_proj(t)).transpose(1, 2): the bias added in place */
        dt = hf_linear(h, t, R, D, true, -1, NULL);
        dt = hf_transpose(h, hf_op(h, DM_OP_Softplus, 1, dt), INTS(0, 2, 1));
    }
    hf_leave(h, s);
    int32_t locals[6];
    int32_t y = selective_scan(h, c, hs, dt, A, Bm, Cm, gate, locals);
    if (cache && h->transformers >= 500) { /* update_recurrent_state: zeros_like, copied in */
        snprintf(name, sizeof name, "cache.%d.ssm", i);
        zeros_b(h, locals[5], D, N, name);
    }
    s = hf_enter(h, "out_proj");
    y = linear_t(h, hf_transpose(h, y, INTS(0, 2, 1)), D, c->hidden, c->bias);
    hf_leave(h, s);
    /* the mixer's locals until it returns: projected_states, A, the conv's
     * output, x_proj's (B and C are its views) and time_step; 4.x's
     * slow_forward holds the scan's too */
    hf_hold_all(h, (int32_t[]){p, A, hs, xp, dt}, 5, hf_last_node(h));
    if (h->transformers < 500)
        hf_hold_all(h, locals, 6, hf_last_node(h));
    hf_hold_all(h, pre, 2, hf_last_node(h));
    return y;
}

static int32_t build(struct hf *h, const struct mamba *c, bool cache, int32_t ids)
{
    size_t top = hf_enter(h, "backbone");
    size_t s = hf_enter(h, "embeddings");
    int32_t emb_w = hf_param(h, "weight", DM_FLOAT, 2, (int64_t[]){c->vocab, c->hidden});
    int32_t x = hf_op(h, DM_OP_Gather, 2, emb_w, ids), emb = x;
    hf_leave(h, s);
    if (cache && h->transformers < 500)
        cache_456(h, c, x);
    for (int i = 0; i < c->layers && h->st == DNNMEM_OK; i++) {
        size_t ls = hf_enter(h, "layers.%d", i);
        int32_t residual = x;
        s = hf_enter(h, "norm");
        int32_t y = hf_rms_norm(h, x, c->hidden, c->eps);
        hf_leave(h, s);
        s = hf_enter(h, "mixer");
        y = mixer(h, c, i, cache, y);
        hf_leave(h, s);
        x = hf_op(h, DM_OP_Add, 2, residual, y);
        hf_leave(h, ls);
    }
    s = hf_enter(h, "norm_f");
    x = hf_rms_norm(h, x, c->hidden, c->eps);
    hf_leave(h, s);
    /* MambaModel.forward's inputs_embeds: a local until it returns (measured:
     * aten::index_select [B, L, H] live at the inference peak in the last layer) */
    hf_hold(h, emb, hf_last_node(h));
    hf_leave(h, top);
    s = hf_enter(h, "lm_head");
    x = hf_linear(h, x, c->hidden, c->vocab, false, c->tie ? emb_w : -1, "logits");
    hf_leave(h, s);
    return x;
}

enum dnnmem_status hf_mamba(struct hf *h, const char *type)
{
    struct mamba c = {0};
    if (!hf_check(h, type))
        return h->st;
    read_config(h, &c);
    if (h->st == DNNMEM_OK && !h->as_loaded)
        check_run(h);
    if (h->st != DNNMEM_OK || !hf_begin(h, type))
        return h->st;
    h->g->eager_only = true; /* no attention */
    h->g->mamba_kernels = "slow path (torch): transformers 5.24 and 5.25's mamba_selective_scan "
                          "loop and causal_conv1d_fn fallback, no mamba_ssm / causal_conv1d "
                          "kernels";
    bool cache = c.use_cache && !h->train;
    int32_t ids = hf_causal_ids(h, c.layers, cache, false);
    if (ids < 0)
        return h->st;
    int32_t logits = build(h, &c, cache, ids);
    if (h->st != DNNMEM_OK)
        return h->st;
    struct dm_graph *g = h->g;
    g->tensors[logits].is_output = true;
    g->outputs[g->n_outputs++] = logits;
    for (int64_t i = 0; cache && i < c.layers; i++)
        for (int j = 0; j < 2; j++) {
            char name[64];
            snprintf(name, sizeof name, "cache.%lld.%s", (long long)i, j ? "ssm" : "conv");
            int32_t t = dm_graph_find(g, name);
            if (t < 0)
                return hf_fail(h, DNNMEM_E_INTERNAL, "no tensor '%s'", name);
            g->tensors[t].is_output = true;
            g->outputs[g->n_outputs++] = t;
        }
    return hf_finish(h);
}
