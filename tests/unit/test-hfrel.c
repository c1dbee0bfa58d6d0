/*
 * test-hfrel.c: the HuggingFace front end across transformers releases
 * (4.40-4.50's GPT-NeoX and OPT, the per-model-type range), the loop that
 * keeps the previous step's outputs (--keep-outputs), and two layout rules
 * of the attention: the flash kernel's output order and torch.matmul's fold
 * of a batch of one. Values worked by hand from the configs' shapes.
 */
#include <jansson.h>

#include "util.h"
#include "hf-util.h"
#include "../../src/schedule/builder.h"

static dnnmem_model *load(const char *path)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK)
        fail_msg("load %s: %s", path, err.message);
    return m;
}

static struct dnnmem_result *run(const dnnmem_model *m, struct dnnmem_config *cfg)
{
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    if (dnnmem_estimate(m, cfg, &r, &err) != DNNMEM_OK)
        fail_msg("estimate: %s", err.message);
    return r;
}

/* The allocated bytes at the end of iteration `it`'s forward (timeline). */
static uint64_t forward_end(const dnnmem_model *m, struct dnnmem_config *cfg, int it)
{
    cfg->timeline = true;
    struct dnnmem_result *r = run(m, cfg);
    uint64_t end = 0;
    for (size_t i = 0; i < r->n_timeline; i++)
        if (r->timeline[i].iteration == it && strcmp(r->timeline[i].phase, "forward") == 0)
            end = r->timeline[i].allocated;
    dnnmem_result_free(r);
    return end;
}

static uint64_t peak(const dnnmem_model *m, struct dnnmem_config *cfg)
{
    struct dnnmem_result *r = run(m, cfg);
    uint64_t p = r->peak_allocated;
    dnnmem_result_free(r);
    return p;
}

static const char *assumption(const struct dnnmem_result *r, const char *key)
{
    for (size_t i = 0; i < r->n_assumptions; i++)
        if (strcmp(r->assumptions[i].key, key) == 0)
            return r->assumptions[i].value;
    return NULL;
}

static void expect_refusal(const char *path, struct dnnmem_config *cfg, enum dnnmem_status want,
                           const char *needle)
{
    dnnmem_model *m = load(path);
    struct dnnmem_result *r = NULL;
    struct dnnmem_error err;
    enum dnnmem_status s = dnnmem_estimate(m, cfg, &r, &err);
    if (s != want || !strstr(err.message, needle))
        fail_msg("%s: status %d (want %d), message '%s' (want '%s')", path, (int)s, (int)want,
                 s == DNNMEM_OK ? "" : err.message, needle);
    dnnmem_model_free(m);
}

static void train_cfg(struct dnnmem_config *cfg, int64_t b, int64_t s)
{
    dnnmem_config_init(cfg);
    cfg->transformers_version = 451; /* the release the values below are worked for */
    cfg->mode = DNNMEM_MODE_TRAIN;
    cfg->batch_size = b;
    cfg->seq_len = s;
    cfg->optimizer = DNNMEM_OPT_SGD;
}

/* --transformers accepts 4.40 to 5.25 (5.26 is refused), below 4.51 only gpt_neox and opt, and
 * from 4.48 also llama, mistral, gemma and gpt2;
 * their sdpa paths start at 4.42 (GPT-NeoX) and 4.46 (OPT): --attn sdpa
 * before is refused, auto is eager (transformers' _supports_sdpa is false);
 * their own flash_attention_2 classes before 4.49 are refused. */
static void test_release_range(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    train_cfg(&cfg, 2, 64);
    cfg.transformers_version = 439;
    expect_refusal("tests/models/hf/tiny-neox.json", &cfg, DNNMEM_E_UNSUPPORTED,
                   "builds transformers 4.40 to 5.25");
    cfg.transformers_version = 526;
    expect_refusal("tests/models/hf/tiny-neox.json", &cfg, DNNMEM_E_UNSUPPORTED,
                   "--transformers 5.26 is not modelled: dnnmem builds transformers 4.40 to 5.25");
    cfg.transformers_version = 447;
    expect_refusal("tests/models/hf/tiny-llama-gqa.json", &cfg, DNNMEM_E_UNSUPPORTED,
                   "'llama' is not modelled: dnnmem builds it from transformers 4.48");
    cfg.transformers_version = 450;
    expect_refusal("tests/models/hf/tiny-qwen3.json", &cfg, DNNMEM_E_UNSUPPORTED,
                   "'qwen3' is not modelled: dnnmem builds it from transformers 4.51");
    cfg.attn = DNNMEM_ATTN_SDPA;
    cfg.transformers_version = 441;
    expect_refusal("tests/models/hf/tiny-neox.json", &cfg, DNNMEM_E_UNSUPPORTED,
                   "transformers 4.41 has no sdpa attention");
    cfg.transformers_version = 445;
    expect_refusal("tests/models/hf/tiny-opt.json", &cfg, DNNMEM_E_UNSUPPORTED,
                   "transformers 4.45 has no sdpa attention");
    cfg.attn = DNNMEM_ATTN_FLASH;
    cfg.precision = DNNMEM_PRECISION_BF16;
    cfg.transformers_version = 446;
    expect_refusal("tests/models/hf/tiny-neox.json", &cfg, DNNMEM_E_UNSUPPORTED,
                   "GPTNeoXFlashAttention2");

    /* auto before the sdpa path: eager, and said so */
    cfg.attn = DNNMEM_ATTN_AUTO;
    cfg.transformers_version = 441;
    dnnmem_model *m = load("tests/models/hf/tiny-neox.json");
    struct dnnmem_result *r = run(m, &cfg);
    const char *a = assumption(r, "attention");
    assert_non_null(a);
    if (!strstr(a, "eager") || !strstr(a, "4.42"))
        fail_msg("attention: %s", a);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
}

static int count_op(const struct dm_graph *g, enum dm_op op)
{
    int n = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

/* GPT-NeoX before 4.49 (modeling_gpt_neox.py 4.42.4, 4.46.3): each layer
 * registers the bool causal `bias` [1, 1, P, P] (tiny-neox: P 512, 256 KiB
 * a layer); 4.40-4.44 also its own rotary caches cos_cached, sin_cached
 * [P, rot] float32, which a 16-bit run leaves float32, so the rotated key
 * (the present) is float32; 4.45 moves the rotary to the model. OPT before
 * 4.49 clamps its eager scores with torch.max, one per layer. */
static void test_legacy_graphs(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    train_cfg(&cfg, 2, 64);
    cfg.precision = DNNMEM_PRECISION_BF16;
    static const struct {
        int tv;
        bool cache32, bias;
    } want[] = {{442, true, true}, {446, false, true}, {451, false, false}};
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        cfg.transformers_version = want[w].tv;
        struct dm_graph g;
        load_hf_graph(&g, "tiny-neox.json", false, &cfg);
        int32_t bias = dm_graph_find(&g, "gpt_neox.layers.3.attention.bias");
        int32_t cc = dm_graph_find(&g, "gpt_neox.layers.0.attention.rotary_emb.cos_cached");
        int32_t key = dm_graph_find(&g, "present.0.key");
        assert_true(key >= 0);
        assert_int_equal(bias >= 0, want[w].bias);
        assert_int_equal(cc >= 0, want[w].cache32);
        if (bias >= 0) {
            assert_int_equal(g.tensors[bias].dtype, DM_BOOL);
            assert_int_equal(g.tensors[bias].dims[3].value, 512);
        }
        if (cc >= 0)
            assert_true(g.tensors[cc].keep_fp32 && g.tensors[cc].frozen);
        assert_int_equal(g.tensors[key].keep_fp32, want[w].cache32);
        dm_graph_free(&g);
    }
    for (int k = 0; k < 2; k++) {
        cfg.transformers_version = k ? 449 : 448;
        struct dm_graph g;
        load_hf_graph(&g, "tiny-opt.json", false, &cfg);
        assert_int_equal(count_op(&g, DM_OP_Max), k ? 0 : 4);
        dm_graph_free(&g);
    }
}

/* OPT's eager attention at the end of a training forward, 4.46 against 4.49
 * (tiny-opt: L 4, E 256, H 8; fp32, B 2, S 128): 4.46's torch.max(scores,
 * finfo.min) keeps its input for the backward (derivatives.yaml's max.other
 * reads self and other), one [B, H, S, S] float32 = 1 MiB a layer; 4.49
 * keeps k_proj's and v_proj's outputs (its presents are views of them)
 * beside the fold copies bmm keeps, where 4.46's presents are the _shape
 * copies bmm reads: 2 x [B, S, E] float32 = 512 KiB a layer more. The rest
 * (the probabilities, q's copy, the mask) is the same size: 4 x 512 KiB. */
static void test_opt_clamp(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    train_cfg(&cfg, 2, 128);
    cfg.attn = DNNMEM_ATTN_EAGER;
    dnnmem_model *m = load("tests/models/hf/tiny-opt.json");
    uint64_t end[2];
    for (int k = 0; k < 2; k++) {
        cfg.transformers_version = k ? 449 : 446;
        end[k] = forward_end(m, &cfg, 1);
    }
    assert_int_equal(end[0] - end[1], 4 * 512 * 1024);
    dnnmem_model_free(m);
}

/* Flash's output keeps q's memory order (mha_fwd: out = empty_like(q) on
 * q.transpose(1, 2)); the memory-efficient kernel writes [B, S, H, D]
 * (at::empty({B, M, num_heads, Kv})). GPT-NeoX's q is a cat result,
 * contiguous as [B, H, S, D], so under flash the attention output
 * [B, H, S, D] is contiguous and transpose(1, 2).reshape copies it for
 * dense, which keeps the copy: tiny-neox (L 4, E 256) bf16 training at B 2,
 * S 64 ends its forward 4 x [B, S, E] bf16 = 4 x 64 KiB heavier under flash
 * than under the efficient kernel (S a multiple of 32: the same log-sum-exp). */
static void test_flash_output_order(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    train_cfg(&cfg, 2, 64);
    cfg.precision = DNNMEM_PRECISION_BF16;
    cfg.attn = DNNMEM_ATTN_SDPA;
    cfg.compute_capability = 80;
    dnnmem_model *m = load("tests/models/hf/tiny-neox.json");
    uint64_t end[2];
    for (int k = 0; k < 2; k++) {
        cfg.sdpa_backend = k ? DNNMEM_SDPA_EFFICIENT : DNNMEM_SDPA_FLASH;
        end[k] = forward_end(m, &cfg, 1);
    }
    assert_int_equal(end[0] - end[1], 4 * 64 * 1024);
    dnnmem_model_free(m);
}

/* torch.matmul folds [B, H, S, D] into bmm's [B * H, S, D] with reshape: a
 * copy of a permuted operand, but at batch 1 a view (the size-1 dim
 * dropped). tiny-gpt2 (L 4, H 8, D 32) eager inference at S 64: the fold
 * Reshapes of q, k and v allocate 3 x 4 buffers at batch 2, none at 1. */
static void test_matmul_fold(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.transformers_version = 451;
    struct dm_graph g;
    load_hf_graph(&g, "tiny-gpt2.json", false, &cfg);
    for (int64_t batch = 1; batch <= 2; batch++) {
        struct dm_arena a;
        dm_arena_init(&a);
        struct dm_tinfo *t = calloc((size_t)g.n_tensors + 1, sizeof *t);
        assert_non_null(t);
        int64_t syms[2] = {batch, 64};
        struct dnnmem_error err;
        struct dm_infer ctx = {.g = &g, .arena = &a, .t = t, .sym_values = syms, .err = &err};
        if (dm_infer_shapes(&ctx) != DNNMEM_OK)
            fail_msg("shapes: %s", err.message);
        struct dm_run run = {.cuda = true, .inplace = true, .torch_version = 206,
                             .iterations = 1, .grad_accum = 1};
        struct dm_schedule s;
        if (dm_schedule_build(&g, t, &run, &s, &err) != DNNMEM_OK)
            fail_msg("schedule: %s", err.message);
        int folds = 0;
        for (int32_t b = 0; b < s.n_buf; b++) {
            int32_t x = s.buf[b].tensor, p = x >= 0 ? g.tensors[x].producer : -1;
            if (p >= 0 && g.nodes[p].op == DM_OP_Reshape &&
                dm_attr_int(&g.nodes[p], "matmul_fold", 0) && !s.buf[b].what)
                folds++;
        }
        assert_int_equal(folds, batch == 1 ? 0 : 12);
        dm_schedule_free(&s);
        free(t);
        dm_arena_free(&a);
    }
    dm_graph_free(&g);
}

/* --keep-outputs: `outputs = model(**inputs)` keeps the previous step's
 * outputs through the next forward. tiny-gpt2 (L 4, E 256, vocab 1000,
 * use_cache) fp32 eager SGD training, B 2, S 64: at the end of the second
 * forward the kept step adds its logits [B, S, V] float32 (512000 bytes),
 * its presents, views of each layer's c_attn output [B, S, 3E] float32
 * (4 x 393216 bytes), and its loss (a scalar's 512-byte block): 2085376
 * bytes; the first forward has nothing to keep. */
static void test_keep_outputs(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    train_cfg(&cfg, 2, 64);
    cfg.attn = DNNMEM_ATTN_EAGER;
    dnnmem_model *m = load("tests/models/hf/tiny-gpt2.json");
    uint64_t end[2][2];
    for (int k = 0; k < 2; k++) {
        cfg.keep_outputs = k;
        for (int it = 1; it <= 2; it++)
            end[k][it - 1] = forward_end(m, &cfg, it);
    }
    assert_int_equal(end[1][0], end[0][0]);
    assert_int_equal(end[1][1] - end[0][1], 512000 + 4 * 393216 + 512);
    struct dnnmem_result *r = run(m, &cfg);
    const char *a = assumption(r, "loop");
    assert_non_null(a);
    assert_non_null(strstr(a, "outputs = model(**inputs)"));
    dnnmem_result_free(r);
    cfg.keep_outputs = false;
    r = run(m, &cfg);
    a = assumption(r, "loop");
    assert_non_null(a);
    assert_non_null(strstr(a, "HF Trainer"));
    dnnmem_result_free(r);

    /* inference: the second forward runs while the first's logits and
     * presents are held: its peak is theirs higher */
    dnnmem_config_init(&cfg);
    cfg.transformers_version = 451;
    cfg.batch_size = 2;
    cfg.seq_len = 64;
    cfg.attn = DNNMEM_ATTN_EAGER;
    uint64_t p0 = peak(m, &cfg);
    cfg.keep_outputs = true;
    uint64_t p1 = peak(m, &cfg);
    assert_int_equal(p1 - p0, 512000 + 4 * 393216);
    cfg.mode = DNNMEM_MODE_GENERATE;
    cfg.new_tokens = 4;
    dnnmem_model_free(m);
    expect_refusal("tests/models/hf/tiny-gpt2.json", &cfg, DNNMEM_E_USAGE,
                   "--keep-outputs applies to --mode train and infer");
}

/* The bytes of the live tensor `name` at the peak, 0 when none is. */
static uint64_t live_bytes(const struct dnnmem_result *r, const char *name)
{
    for (size_t i = 0; i < r->n_live; i++)
        if (strcmp(r->live[i].name, name) == 0)
            return r->live[i].bytes;
    return 0;
}

/* transformers 5.x's decode steps run the MoE experts with batched_mm
 * (generate.c, moe_decode). tiny-mixtral (H 256, I 512, E 8, top_k 2, 2
 * layers) fp32, B 2, prompt 64, 16 new tokens, S = B x top_k = 4 rows:
 * gate_up_proj[expert_ids] [4, 1024, 256] float32 = 4194304 bytes,
 * down_proj[expert_ids] [4, 256, 512] = 2097152, the up bmm [4, 1024] =
 * 16384, act_fn and the gated rows [4, 512] = 8192 each, the rows [4, 256]
 * = 4096, token_idx [4] int64 = 32. 5.0 on the CPU gathers both weights
 * first and peaks at the gated mul in the last decode step (measured with
 * 5.0.0 and torch 2.13: these tensors, 33.84 MiB); 5.24 on CUDA gathers
 * down_proj while the gate_up copy is bound, after the up bmm and the
 * activation are freed; 5.1 on the CPU and beam search keep grouped_mm. */
static void test_moe_decode(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 213;
    cfg.cpu_threads = 1;
    cfg.transformers_version = 500;
    cfg.attn = DNNMEM_ATTN_EAGER;
    cfg.mode = DNNMEM_MODE_GENERATE;
    cfg.batch_size = 2;
    cfg.seq_len = 64;
    cfg.new_tokens = 16;
    cfg.n_top_tensors = 20;
    dnnmem_model *m = load("tests/models/hf/tiny-mixtral.json");
    struct dnnmem_result *r = run(m, &cfg);
    assert_string_equal(r->peak_phase, "decode");
    assert_int_equal(live_bytes(r, "moe.gate_up_proj[expert_ids]"), 4194304);
    assert_int_equal(live_bytes(r, "moe.down_proj[expert_ids]"), 2097152);
    assert_int_equal(live_bytes(r, "moe.bmm_up"), 16384);
    assert_int_equal(live_bytes(r, "moe.act_fn"), 8192);
    assert_int_equal(live_bytes(r, "moe.gated"), 8192);
    assert_int_equal(live_bytes(r, "moe.selected_hidden_states"), 4096);
    assert_int_equal(live_bytes(r, "moe.token_idx"), 32);
    dnnmem_result_free(r);

    cfg.device = DNNMEM_DEVICE_CUDA;
    cfg.torch_version = 0;
    cfg.transformers_version = 524;
    r = run(m, &cfg);
    assert_string_equal(r->peak_phase, "decode");
    assert_int_equal(live_bytes(r, "moe.gate_up_proj[expert_ids]"), 4194304);
    assert_int_equal(live_bytes(r, "moe.down_proj[expert_ids]"), 2097152);
    assert_int_equal(live_bytes(r, "moe.gated"), 8192);
    assert_int_equal(live_bytes(r, "moe.selected_hidden_states"), 4096);
    assert_int_equal(live_bytes(r, "moe.bmm_up"), 0);
    assert_int_equal(live_bytes(r, "moe.act_fn"), 0);
    assert_int_equal(live_bytes(r, "moe.token_idx"), 0);
    dnnmem_result_free(r);

    /* 5.1 on the CPU, and beam search anywhere: grouped_mm throughout */
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 213;
    cfg.transformers_version = 501;
    r = run(m, &cfg);
    assert_int_equal(live_bytes(r, "moe.gate_up_proj[expert_ids]"), 0);
    dnnmem_result_free(r);
    cfg.transformers_version = 500;
    cfg.num_beams = 4;
    r = run(m, &cfg);
    assert_int_equal(live_bytes(r, "moe.gate_up_proj[expert_ids]"), 0);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
}

/* gpt_oss at transformers 5.24 (tests/models/hf/tiny-gpt-oss.json: H 256, I
 * 256, E 4, top_k 2, 4 heads of 64, 2 KV heads; B 2, S 128: S x top_k = 512
 * expert rows), fp32 eager inference on the CPU, peaks in layer 1's
 * _apply_gate. Worked by hand: proj_out [512, 2I = 512] float32 = 1048576
 * bytes, one buffer (out.add_(bias) writes into the grouped_mm output: no
 * Add of its own), the gathered biases [512, 512] = 1048576; the masks
 * torch.where makes [B, 1, S, S] float32 = 131072 each; the probabilities
 * with the sink column [2, 4, 128, 129] float32 = 528384, which the decoder
 * layer's `_` keeps through the MLP. Measured (tools/hf_oracle, torch 2.13,
 * hf-real-archs-cpu.jsonl): 17621352 bytes at the peak, these blocks in it. */
static void test_gptoss(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 213;
    cfg.cpu_threads = 1;
    cfg.transformers_version = 524;
    cfg.attn = DNNMEM_ATTN_EAGER;
    cfg.batch_size = 2;
    cfg.seq_len = 128;
    cfg.n_top_tensors = 100;
    dnnmem_model *m = load("tests/models/hf/tiny-gpt-oss.json");
    struct dnnmem_result *r = run(m, &cfg);
    assert_int_equal(live_bytes(r, "/model/layers.1/mlp/experts/GroupedMatMul_output_0"), 1048576);
    assert_int_equal(live_bytes(r, "/model/layers.1/mlp/experts/Add_output_0"), 0);
    assert_int_equal(live_bytes(r, "/model/layers.1/mlp/experts/Gather_2_output_0"), 1048576);
    assert_int_equal(live_bytes(r, "causal_mask"), 131072);
    assert_int_equal(live_bytes(r, "sliding_mask"), 131072);
    assert_int_equal(live_bytes(r, "/model/layers.1/self_attn/Softmax_output_0"), 528384);
    assert_true(r->peak_allocated > 17621352 - 17621352 / 200 &&
                r->peak_allocated < 17621352 + 17621352 / 200);
    dnnmem_result_free(r);
    /* an older release is refused, not built as the oldest modelled */
    cfg.transformers_version = 455;
    struct dnnmem_error err;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_UNSUPPORTED);
    assert_non_null(strstr(err.message, "gpt_oss from 4.56"));
    cfg.transformers_version = 451;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_E_UNSUPPORTED);
    dnnmem_model_free(m);
}

/* Falcon from transformers 5.25 (modeling_falcon.py 5.25.0: FalconAttention
 * on the shared eager_attention_forward). bf16 eager inference on the CPU, B
 * 2, S 128, both peaking at layer 1's softmax:
 *  - tiny-falcon (new architecture, 8 heads of 32, 2 KV heads): 5.25's
 *    softmax runs in float32 (the bf16 scores + mask [2, 8, 128, 128] =
 *    524288 bytes converted to a float32 copy, 1048576, and the float32
 *    probabilities, 1048576), where 5.24's FalconAttention took the softmax
 *    in the run's dtype (bf16 probabilities, 524288); the previous layer's
 *    probabilities, cast back to bf16, stay in FalconModel's `outputs`.
 *    Measured (tools/hf_oracle, torch 2.13): 5.24.0 6828096 bytes, 5.25.0
 *    7745600 bytes;
 *    FalconModel's create_causal_mask is eager_mask's [B, 1, S, S] bf16
 *    tensor, 65536 bytes (5.24 and 5.25; aten::where in the trace);
 *  - small-falcon-7b (multi-query, 4 heads of 64, 1 KV head): repeat_kv of
 *    the one key/value head is a view, the matmul folds its temporaries, so
 *    no [2, 4, 128, 64] repeated k or v is live at the softmax. Measured:
 *    5.25.0 7379072 bytes;
 *  - tiny-falcon fp32 sdpa training with Adam: sdpa_mask's bool [2, 1, 128,
 *    128] goes to F.scaled_dot_product_attention, which converts it to a
 *    float32 mask per call (convert_boolean_attn_mask) that the CPU flash
 *    kernel keeps for backward: 131072 bytes a layer, both live at the loss
 *    backward's peak. Measured: 5.25.0 32690388 bytes. */
static void test_falcon_525(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.device = DNNMEM_DEVICE_CPU;
    cfg.torch_version = 213;
    cfg.cpu_threads = 1;
    cfg.attn = DNNMEM_ATTN_EAGER;
    cfg.precision = DNNMEM_PRECISION_BF16;
    cfg.batch_size = 2;
    cfg.seq_len = 128;
    cfg.n_top_tensors = 100;
    dnnmem_model *m = load("tests/models/hf/tiny-falcon.json");
    cfg.transformers_version = 525;
    struct dnnmem_result *r = run(m, &cfg);
    assert_int_equal(live_bytes(r, "/transformer/h.1/self_attention/Softmax_output_0"), 1048576);
    assert_int_equal(live_bytes(r, "/transformer/h.1/self_attention/Cast_output_0"), 1048576);
    assert_int_equal(live_bytes(r, "/transformer/h.0/self_attention/CastLike_output_0"), 524288);
    assert_int_equal(live_bytes(r, "causal_mask"), 65536);
    assert_true(r->peak_allocated > 7745600 - 7745600 / 500 &&
                r->peak_allocated < 7745600 + 7745600 / 500);
    dnnmem_result_free(r);
    cfg.transformers_version = 524;
    r = run(m, &cfg);
    assert_int_equal(live_bytes(r, "/transformer/h.1/self_attention/Softmax_output_0"), 524288);
    assert_int_equal(live_bytes(r, "causal_mask"), 65536);
    assert_true(r->peak_allocated > 6828096 - 6828096 / 500 &&
                r->peak_allocated < 6828096 + 6828096 / 500);
    dnnmem_result_free(r);
    cfg.transformers_version = 525;
    cfg.attn = DNNMEM_ATTN_SDPA;
    cfg.precision = DNNMEM_PRECISION_FP32;
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_ADAM;
    r = run(m, &cfg);
    assert_int_equal(live_bytes(r, "/transformer/h.0/self_attention/CastLike_output_0"), 131072);
    assert_int_equal(live_bytes(r, "/transformer/h.1/self_attention/CastLike_output_0"), 131072);
    assert_true(r->peak_allocated > 32690388 - 32690388 / 500 &&
                r->peak_allocated < 32690388 + 32690388 / 500);
    dnnmem_result_free(r);
    cfg.attn = DNNMEM_ATTN_EAGER;
    cfg.precision = DNNMEM_PRECISION_BF16;
    cfg.mode = DNNMEM_MODE_INFER;
    dnnmem_model_free(m);
    m = load("tests/validation/hf-small/small-falcon-7b.json");
    cfg.transformers_version = 525;
    r = run(m, &cfg);
    for (size_t i = 0; i < r->n_live; i++)
        assert_null(strstr(r->live[i].name, "h.1/self_attention/Expand"));
    assert_true(r->peak_allocated > 7379072 - 7379072 / 100 &&
                r->peak_allocated < 7379072 + 7379072 / 100);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_range),   cmocka_unit_test(test_legacy_graphs),
        cmocka_unit_test(test_opt_clamp), cmocka_unit_test(test_flash_output_order),
        cmocka_unit_test(test_matmul_fold),     cmocka_unit_test(test_keep_outputs),
        cmocka_unit_test(test_moe_decode),      cmocka_unit_test(test_gptoss), cmocka_unit_test(test_falcon_525),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
