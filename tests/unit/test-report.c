/*
 * test-report.c: the bytes at the peak by module scope (--by-module), worked
 * by hand on a two-layer MLP, and the scopes read from node names.
 */
#include "util.h"

enum { F32 = 1 };

/* x[batch,3] -> /fc1 (MatMul W1[3,4], Add b1[4]) -> /act/Relu -> /fc2
 * (MatMul W2[4,2], Add b2[2]) -> y[batch,2], as torch.onnx.export names a
 * Sequential's scopes. */
static struct tb *scoped_mlp(void)
{
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,3");
    tb_init(b, "fc1.weight", F32, 2, (int64_t[]){3, 4});
    tb_init(b, "fc1.bias", F32, 1, (int64_t[]){4});
    tb_init(b, "fc2.weight", F32, 2, (int64_t[]){4, 2});
    tb_init(b, "fc2.bias", F32, 1, (int64_t[]){2});
    tb_node(b, "MatMul", "/fc1/MatMul", "x,fc1.weight", "h0");
    tb_node(b, "Add", "/fc1/Add", "h0,fc1.bias", "h1");
    tb_node(b, "Relu", "/act/Relu", "h1", "h2");
    tb_node(b, "MatMul", "/fc2/MatMul", "h2,fc2.weight", "h3");
    tb_node(b, "Add", "/fc2/Add", "h3,fc2.bias", "y");
    tb_output(b, "y");
    return b;
}

static const struct dnnmem_module_info *module(const struct dnnmem_result *r, const char *name)
{
    for (size_t k = 0; k < r->n_modules; k++)
        if (strcmp(r->modules[k].name, name) == 0)
            return &r->modules[k];
    fail_msg("no module '%s'", name);
    return NULL;
}

/* Each category summed over the modules is the breakdown's, and each
 * module's live bytes the sum of its categories. */
static void assert_modules_add_up(const struct dnnmem_result *r)
{
    uint64_t live = 0;
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++) {
        uint64_t sum = 0;
        for (size_t k = 0; k < r->n_modules; k++)
            sum += r->modules[k].category_bytes[c];
        assert_int_equal(sum, r->category_bytes[c]);
        live += sum;
    }
    uint64_t mod_live = 0;
    for (size_t k = 0; k < r->n_modules; k++) {
        uint64_t s = 0;
        for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
            s += r->modules[k].category_bytes[c];
        assert_int_equal(s, r->modules[k].live_bytes);
        mod_live += s;
    }
    assert_int_equal(mod_live, live);
}

/* Training with Adam at batch 2 (PyTorch 2.x on CUDA, foreach Adam): the
 * peak is in the first optimizer step, when Adam's moments and the sqrt of
 * each exp_avg_sq (a temporary per parameter) are all allocated:
 *  /fc1: fc1.weight 48 B + fc1.bias 16 B, their grads (64 B), two moments
 *        each (128 B), the sqrt temporaries (64 B): 320 B;
 *  /fc2: 32 + 8 B of weights, 40 B of grads, 80 B of moments, 40 B of
 *        temporaries, and the logits [2,2] (16 B, made by /fc2's MatMul,
 *        which the Add joins) held to the step's end: 216 B;
 *  /act: nothing (its output's grad is gone by then), so no row;
 *  (no module): x (24 B), the class ids (2 x int64, 16 B), the loss (4 B)
 *        and the two cuBLAS workspaces (2 x 8,519,680 B). */
static void test_mlp_modules_by_hand(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = 2;
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.optimizer = DNNMEM_OPT_ADAM;
    cfg.module_depth = 1;
    struct dnnmem_result *r = estimate_cfg(scoped_mlp(), &cfg);
    assert_string_equal(r->peak_phase, "optimizer");
    assert_int_equal(r->module_depth, 1);
    assert_int_equal(r->n_modules, 3);
    assert_string_equal(r->modules[0].name, "/fc1");
    assert_string_equal(r->modules[1].name, "/fc2");
    assert_string_equal(r->modules[2].name, "(no module)");
    const struct dnnmem_module_info *fc1 = module(r, "/fc1"), *fc2 = module(r, "/fc2"),
                                    *none = module(r, "(no module)");
    assert_int_equal(fc1->category_bytes[DNNMEM_CAT_WEIGHT], 64);
    assert_int_equal(fc1->category_bytes[DNNMEM_CAT_GRADIENT], 64);
    assert_int_equal(fc1->category_bytes[DNNMEM_CAT_OPTIMIZER], 128);
    assert_int_equal(fc1->category_bytes[DNNMEM_CAT_TEMPORARY], 64);
    assert_int_equal(fc1->live_bytes, 320);
    assert_int_equal(fc1->n_live, 10);
    assert_int_equal(fc2->category_bytes[DNNMEM_CAT_WEIGHT], 40);
    assert_int_equal(fc2->category_bytes[DNNMEM_CAT_GRADIENT], 40);
    assert_int_equal(fc2->category_bytes[DNNMEM_CAT_OPTIMIZER], 80);
    assert_int_equal(fc2->category_bytes[DNNMEM_CAT_TEMPORARY], 40);
    assert_int_equal(fc2->category_bytes[DNNMEM_CAT_ACTIVATION], 16);
    assert_int_equal(fc2->live_bytes, 216);
    assert_int_equal(none->category_bytes[DNNMEM_CAT_INPUT], 40);
    assert_int_equal(none->category_bytes[DNNMEM_CAT_TEMPORARY], 4);
    assert_int_equal(none->category_bytes[DNNMEM_CAT_WORKSPACE], 2 * 8519680);
    assert_int_equal(none->live_bytes, 40 + 4 + 2 * 8519680);
    assert_modules_add_up(r);
    dnnmem_result_free(r);
    /* without a depth, no table */
    cfg.module_depth = 0;
    r = estimate_cfg(scoped_mlp(), &cfg);
    assert_int_equal(r->n_modules, 0);
    assert_null(r->modules);
    dnnmem_result_free(r);
}

/* x[batch,8] + w_k[8] through nodes named as exporters name them; each
 * weight (32 B) counts in the scope of the node reading it. */
static struct tb *named_chain(void)
{
    static const char *const names[] = {"/enc/layer.0/attn/Add", "enc/layer.1/Add", "Add_0",
                                        "Add#3", "/Add", "/enc/layer.0/attn/Add_1"};
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "batch,8");
    char in[16] = "x", out[16], w[16];
    for (int k = 0; k < 6; k++) {
        snprintf(w, sizeof w, "w%d", k);
        snprintf(out, sizeof out, "t%d", k);
        tb_init(b, w, F32, 1, (int64_t[]){8});
        char ins[40];
        snprintf(ins, sizeof ins, "%s,%s", in, w);
        tb_node(b, "Add", names[k], ins, out);
        memcpy(in, out, sizeof in);
    }
    tb_output(b, in);
    return b;
}

static void test_scopes_of_names(void **state)
{
    (void)state;
    static const struct {
        int depth;
        size_t n;
        const char *name[5];
        uint64_t weights[5];
    } want[] = {
        {1, 5, {"/enc", "enc", "Add_0", "(top level)", "(no module)"}, {64, 32, 32, 64, 0}},
        {2, 5, {"/enc/layer.0", "enc/layer.1", "Add_0", "(top level)", "(no module)"},
         {64, 32, 32, 64, 0}},
        {3, 5, {"/enc/layer.0/attn", "enc/layer.1", "Add_0", "(top level)", "(no module)"},
         {64, 32, 32, 64, 0}},
    };
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.batch_size = 4;
        cfg.inplace = DNNMEM_INPLACE_NONE;
        cfg.module_depth = want[k].depth;
        struct dnnmem_result *r = estimate_cfg(named_chain(), &cfg);
        assert_int_equal(r->n_modules, want[k].n);
        for (size_t i = 0; i < want[k].n; i++) {
            assert_string_equal(r->modules[i].name, want[k].name[i]);
            assert_int_equal(r->modules[i].category_bytes[DNNMEM_CAT_WEIGHT], want[k].weights[i]);
        }
        /* x [4,8] is the graph's input */
        assert_int_equal(r->modules[want[k].n - 1].category_bytes[DNNMEM_CAT_INPUT], 128);
        assert_modules_add_up(r);
        dnnmem_result_free(r);
    }
}

/* The page (dnnmem_report_html_page): the command line escaped, the advice
 * given as a table, the module table when the result has one, and a result
 * without a timeline still a page (no points). */
static void test_html_page(void **state)
{
    (void)state;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = 2;
    cfg.mode = DNNMEM_MODE_TRAIN;
    cfg.module_depth = 1;
    cfg.timeline = true;
    dnnmem_model *m;
    struct dnnmem_error err;
    struct tb *b = scoped_mlp();
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    tb_free(b);
    struct dnnmem_result *r = NULL;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    struct dnnmem_advice adv = {"--batch-size 1", 12345, DNNMEM_VERDICT_FITS};
    struct dnnmem_page_info pi = {"dnnmem estimate 'a<b>.onnx'", &adv, 1};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(dnnmem_report_html_page(r, m, &pi, f), 0);
    fclose(f);
    assert_non_null(strstr(text, "<code id=\"command\">dnnmem estimate 'a&lt;b&gt;.onnx'</code>"));
    assert_non_null(strstr(text, "<code>--batch-size 1</code></td><td class=\"n\" data-bytes=\"12345\">"));
    assert_non_null(strstr(text, "<table id=\"modules\">"));
    assert_non_null(strstr(text, "<tr><td>/fc1</td>"));
    assert_null(strstr(text, "data-series=\"kv cache\"><i")); /* no cache, no legend entry */
    assert_non_null(strstr(text, "data-series=\"weights\"><i"));
    free(text);
    dnnmem_result_free(r);
    cfg.timeline = false;
    cfg.module_depth = 0;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(dnnmem_report_html(r, m, f), 0);
    fclose(f);
    assert_non_null(strstr(text, "\"points\":[],\"strings\":[]}"));
    assert_null(strstr(text, "id=\"modules\""));
    assert_non_null(strstr(text, "<p id=\"advice\">No device was given"));
    free(text);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_modules_by_hand),
        cmocka_unit_test(test_scopes_of_names),
        cmocka_unit_test(test_html_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
