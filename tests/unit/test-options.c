/* test-options.c: dnnmem_config_set, the option table, and the CLI built on
 * them (the CLI binary next to this test's directory: build/dnnmem). */
#include "util.h"

#define MODEL "tests/models/fixtures/resnet50.onnx"

struct fixture {
    struct dnnmem_config cfg;
    dnnmem_options *o;
    struct dnnmem_error err;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    dnnmem_config_init(&f->cfg);
    f->o = dnnmem_options_new();
    assert_non_null(f->o);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    dnnmem_options_free(f->o);
    free(f);
    return 0;
}

static void ok(struct fixture *f, const char *name, const char *value)
{
    if (dnnmem_config_set(&f->cfg, f->o, name, value, &f->err) != DNNMEM_OK)
        fail_msg("--%s %s: %s", name, value ? value : "", f->err.message);
}

static void bad(struct fixture *f, const char *name, const char *value, const char *message)
{
    assert_int_equal(dnnmem_config_set(&f->cfg, f->o, name, value, &f->err), DNNMEM_E_USAGE);
    assert_int_equal(f->err.status, DNNMEM_E_USAGE);
    assert_string_equal(f->err.message, message);
}

/* Each kind of value: a name of an enum, a count, a number, a size, a
 * version, a list, NAME=N, a repeatable pattern, a flag, a boolean. */
static void test_kinds(void **state)
{
    struct fixture *f = *state;
    ok(f, "mode", "train");
    assert_int_equal(f->cfg.mode, DNNMEM_MODE_TRAIN);
    ok(f, "optimizer", "adamw-hf");
    assert_int_equal(f->cfg.optimizer, DNNMEM_OPT_ADAMW_HF);
    ok(f, "attn", "flash_attention_2");
    assert_int_equal(f->cfg.attn, DNNMEM_ATTN_FLASH);
    ok(f, "loss", "mse-all");
    assert_int_equal(f->cfg.loss, DNNMEM_LOSS_MSE);
    assert_true(f->cfg.loss_all_outputs);
    ok(f, "jax-execution", "EAGER"); /* case-insensitive, as the CLI */
    assert_int_equal(f->cfg.jax_execution, DNNMEM_JAX_EAGER);
    ok(f, "iterations", "3");
    assert_int_equal(f->cfg.iterations, 3);
    ok(f, "grad_accum", "4"); /* an alias */
    assert_int_equal(f->cfg.grad_accum, 4);
    ok(f, "top-k", "0");
    assert_int_equal(f->cfg.top_k, -1);
    ok(f, "top-p", "0.9");
    assert_true(f->cfg.top_p == 0.9);
    ok(f, "headroom", "10%");
    assert_true(f->cfg.headroom == 0.1);
    ok(f, "headroom", "10"); /* a bare number of at least 1: a percentage */
    assert_true(f->cfg.headroom == 0.1);
    ok(f, "headroom", "0.25");
    assert_true(f->cfg.headroom == 0.25);
    ok(f, "memory", "24GiB");
    assert_int_equal(f->cfg.capacity_bytes, INT64_C(24) << 30);
    assert_string_equal(f->cfg.device_label, "--memory 24GiB");
    ok(f, "memory", "16G"); /* a bare letter is binary, and said so */
    assert_int_equal(f->cfg.capacity_bytes, INT64_C(16) << 30);
    assert_string_equal(f->cfg.device_label, "--memory 16G: G read as GiB, 2^30 bytes");
    ok(f, "memory", "512M");
    assert_int_equal(f->cfg.capacity_bytes, INT64_C(512) << 20);
    assert_string_equal(f->cfg.device_label, "--memory 512M: M read as MiB, 2^20 bytes");
    ok(f, "memory", "80GB"); /* SI stays SI */
    assert_int_equal(f->cfg.capacity_bytes, INT64_C(80000000000));
    assert_string_equal(f->cfg.device_label, "--memory 80GB");
    ok(f, "cuda-context", "1.5KiB");
    assert_int_equal(f->cfg.cuda_context_bytes, 1536);
    ok(f, "cuda", "11.8");
    assert_int_equal(f->cfg.cuda_version, 118);
    ok(f, "transformers", "5.17");
    assert_int_equal(f->cfg.transformers_version, 517);
    ok(f, "batch-size", "8,16,32");
    assert_int_equal(f->cfg.batch_size, 8);
    size_t n;
    const int64_t *list = dnnmem_options_list(f->o, "batch-size", &n);
    assert_int_equal(n, 3);
    assert_int_equal(list[2], 32);
    assert_null(dnnmem_options_list(f->o, "seq-len", &n));
    assert_int_equal(n, 0);
    ok(f, "prompt-len", "128"); /* the same as --seq-len */
    assert_int_equal(f->cfg.seq_len, 128);
    assert_non_null(dnnmem_options_list(f->o, "seq-len", &n));
    ok(f, "do-sample", NULL);
    assert_true(f->cfg.do_sample);
    ok(f, "kbit-prep-no-gc", NULL);
    assert_int_equal(f->cfg.kbit_prep, DNNMEM_KBIT_PREP_NO_GC);
    ok(f, "framework", "jax@0.4.30");
    assert_int_equal(f->cfg.framework, DNNMEM_FW_JAX);
    assert_string_equal(f->cfg.framework_version, "0.4.30");
    ok(f, "jax-donate", "0");
    assert_false(f->cfg.jax_donate);
    ok(f, "jax-preallocate", "true");
    assert_true(f->cfg.jax_preallocate);
    assert_int_equal(dnnmem_config_check(&f->cfg, f->o, &f->err), DNNMEM_OK);
    ok(f, "gpu", "h100-80gb");
    assert_true(f->cfg.capacity_bytes > (INT64_C(70) << 30));
    assert_int_equal(f->cfg.compute_capability, 90);
    assert_string_equal(f->cfg.device_label, "--gpu H100-80GB, as CUDA reports it");
    assert_string_equal(dnnmem_options_value(f->o, "gpu"), "h100-80gb");
    assert_string_equal(dnnmem_options_value(f->o, "do-sample"), "");
    assert_null(dnnmem_options_value(f->o, "quant"));
}

/* The store owns every string and array the config points to: the caller's
 * buffers may change or go once the call returns. */
static void test_ownership(void **state)
{
    struct fixture *f = *state;
    char buf[64];
    strcpy(buf, "batch=3");
    ok(f, "dim", buf);
    strcpy(buf, "past_sequence_length=0");
    ok(f, "dim", buf);
    strcpy(buf, "data=1,3,224,224");
    ok(f, "input-shape", buf);
    strcpy(buf, "layer1.*");
    ok(f, "freeze", buf);
    strcpy(buf, "/layers.*:2");
    ok(f, "checkpoint", buf);
    ok(f, "checkpoint", "/a..b");
    strcpy(buf, "q_proj,v_proj,o_proj");
    ok(f, "lora-targets", buf);
    memset(buf, 'x', sizeof buf - 1);
    assert_int_equal(f->cfg.n_dims, 2);
    assert_string_equal(f->cfg.dims[0].name, "batch");
    assert_int_equal(f->cfg.dims[0].value, 3);
    assert_string_equal(f->cfg.dims[1].name, "past_sequence_length");
    assert_int_equal(f->cfg.dims[1].value, 0);
    assert_int_equal(f->cfg.n_input_shapes, 1);
    assert_string_equal(f->cfg.input_shapes[0].name, "data");
    assert_int_equal(f->cfg.input_shapes[0].rank, 4);
    assert_int_equal(f->cfg.input_shapes[0].dims[3], 224);
    assert_int_equal(f->cfg.n_freeze, 1);
    assert_string_equal(f->cfg.freeze[0], "layer1.*");
    assert_int_equal(f->cfg.n_checkpoint, 2);
    assert_string_equal(f->cfg.checkpoint[0], "/layers.*:2");
    assert_string_equal(f->cfg.checkpoint[1], "/a..b");
    assert_int_equal(f->cfg.lora.n_targets, 3);
    assert_string_equal(f->cfg.lora.targets[2], "o_proj");
}

/* Bad names and values: DNNMEM_E_USAGE and the CLI's one-line message. */
static void test_errors(void **state)
{
    struct fixture *f = *state;
    bad(f, "frob", "1", "--frob: unknown option");
    bad(f, "mode", NULL, "--mode: this option needs a value");
    bad(f, "do-sample", "yes", "--do-sample: this option takes no value");
    bad(f, "mode", "fly", "--mode fly: expected infer, train or generate");
    bad(f, "iterations", "1001", "--iterations 1001: expected 1..1000");
    bad(f, "top-p", "1.5", "--top-p 1.5: expected a probability in (0, 1]");
    bad(f, "memory", "0", "--memory 0: expected a size such as 24GiB, 80GB or 16G");
    bad(f, "cuda", "12", "--cuda 12: expected MAJOR.MINOR, e.g. 12.1");
    bad(f, "batch-size", "8,x", "--batch-size 8,x: expected positive integers, e.g. 8 or 8,16,32");
    bad(f, "prompt-len", "0", "--seq-len 0: expected positive integers, e.g. 8 or 8,16,32");
    bad(f, "dim", "batch", "--dim batch: expected NAME=N with N a non-negative integer");
    bad(f, "input-shape", "data=1,x", "--input-shape data: expected 1 to 8 positive dims, e.g. "
                                       "data=1,3,224,224");
    bad(f, "lora-targets", ",", "--lora-targets ,: expected module names, e.g. q_proj,v_proj");
    bad(f, "gpu", "Z80", "--gpu Z80: unknown GPU (dnnmem gpus lists them)");
    bad(f, "gpu", "A100",
        "--gpu A100: unknown GPU; did you mean A100-40GB, A100-40GB-PCIe, A100-80GB, A100-80GB-PCIe? "
        "(dnnmem gpus lists them)");
    bad(f, "framework", "jax@x", "--framework jax@x: expected jax@VERSION with a version such as "
                                 "0.4.30");
    bad(f, "calibration", "/nonexistent.json",
        "--calibration /nonexistent.json: unable to open /nonexistent.json: No such file or "
        "directory (line -1)");
    /* an option of one framework's runtime needs that framework */
    ok(f, "tf-allow-growth", NULL);
    ok(f, "mxnet-mirror", NULL);
    assert_int_equal(dnnmem_config_check(&f->cfg, f->o, &f->err), DNNMEM_E_USAGE);
    assert_string_equal(f->err.message, "--tf-allow-growth: applies to --framework tensorflow");
    ok(f, "framework", "tensorflow");
    assert_int_equal(dnnmem_config_check(&f->cfg, f->o, &f->err), DNNMEM_E_USAGE);
    assert_string_equal(f->err.message, "--mxnet-mirror: applies to --framework mxnet");
}

static void test_calibration(void **state)
{
    struct fixture *f = *state;
    char path[] = "/tmp/dnnmem-calib-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *out = fdopen(fd, "w");
    fputs("{\"cuda_context_bytes\": 1000, \"compute_capability\": \"9.0\"}", out);
    fclose(out);
    ok(f, "calibration", path);
    assert_int_equal(f->cfg.cuda_context_bytes, 1000);
    assert_int_equal(f->cfg.compute_capability, 90);
    ok(f, "compute-capability", "8.9"); /* later options win */
    assert_int_equal(f->cfg.compute_capability, 89);
    remove(path);
}

/* The table: names unique, every row findable by name and alias, help given. */
static void test_table(void **state)
{
    (void)state;
    size_t n = dnnmem_option_count();
    assert_true(n > 50);
    assert_null(dnnmem_option_at(n));
    for (size_t k = 0; k < n; k++) {
        const struct dnnmem_option *o = dnnmem_option_at(k);
        assert_ptr_equal(dnnmem_option_find(o->name), o);
        if (o->alias)
            assert_ptr_equal(dnnmem_option_find(o->alias), o);
        assert_true(o->help && o->help[0] && o->help[strlen(o->help) - 1] != '\n');
        assert_true((unsigned)o->group < DNNMEM_GROUP_COUNT);
        assert_true(o->commands != 0);
    }
    for (int g = 0; g < DNNMEM_GROUP_COUNT; g++)
        assert_true(dnnmem_option_group_heading((enum dnnmem_option_group)g)[0] != '\0');
    assert_null(dnnmem_option_find("frob"));
}

/* ---- against the CLI ------------------------------------------------------------ */

/* What `cli ARGS` writes (stdout, or stderr with to_err), NUL-terminated. */
static char *run_cli(const char *cli, const char *args, bool to_err)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s", cli, args, to_err ? "2>&1 >/dev/null" : "2>/dev/null");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (size_t r; (r = fread(buf + len, 1, cap - len - 1, p)) > 0;) {
        len += r;
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
        assert_non_null(buf);
    }
    buf[len] = '\0';
    pclose(p);
    return buf;
}

/* Every row of the table appears in --help, as "--name ARG" (and "-x, "). */
static void test_help(void **state)
{
    char *help = run_cli(*state, "--help", false);
    for (size_t k = 0; k < dnnmem_option_count(); k++) {
        const struct dnnmem_option *o = dnnmem_option_at(k);
        char head[128], line[256];
        snprintf(head, sizeof head, "%s%c%s--%s%s%s", o->short_name ? "-" : "",
                 o->short_name ? o->short_name : ' ', o->short_name ? ", " : "", o->name,
                 o->arg ? " " : "", o->arg ? o->arg : "");
        const char *nl = strchr(o->help, '\n');
        snprintf(line, sizeof line, "%.*s", nl ? (int)(nl - o->help) : (int)strlen(o->help), o->help);
        const char *at = strstr(help, o->short_name ? head : head + 1);
        if (!at)
            fail_msg("--help lacks %s", head);
        const char *eol = strchr(at, '\n');
        assert_non_null(eol);
        assert_true(strstr(at, line) && strstr(at, line) < eol); /* its first help line follows */
    }
    for (int g = 0; g < DNNMEM_GROUP_COUNT; g++)
        assert_non_null(strstr(help, dnnmem_option_group_heading((enum dnnmem_option_group)g)));
    free(help);
}

/* A round trip: the same options through the CLI and through
 * dnnmem_config_set give the same estimate, byte for byte. */
static void test_round_trip(void **state)
{
    static const char *const opts[][2] = {
        {"batch-size", "16"}, {"mode", "train"}, {"optimizer", "adam"},
        {"precision", "amp-bf16"}, {"gpu", "A100-40GB"}, {"headroom", "7%"},
        {"checkpoint", "/layer*"}, {"freeze", "conv1.*"}, {"top", "4"},
        {"cuda", "11.8"}, {"iterations", "3"},
    };
    char args[1024] = "estimate " MODEL " --json";
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    dnnmem_options *o = dnnmem_options_new();
    struct dnnmem_error err;
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
        size_t len = strlen(args);
        snprintf(args + len, sizeof args - len, " --%s '%s'", opts[k][0], opts[k][1]);
        assert_int_equal(dnnmem_config_set(&cfg, o, opts[k][0], opts[k][1], &err), DNNMEM_OK);
    }
    char *cli_out = run_cli(*state, args, false);
    dnnmem_model *m;
    assert_int_equal(dnnmem_model_load(MODEL, &m, &err), DNNMEM_OK);
    struct dnnmem_result *r;
    assert_int_equal(dnnmem_estimate(m, &cfg, &r, &err), DNNMEM_OK);
    char *api_out = NULL;
    size_t api_len = 0;
    FILE *mem = open_memstream(&api_out, &api_len);
    assert_int_equal(dnnmem_report_json(r, m, mem), 0);
    fclose(mem);
    assert_true(strlen(cli_out) > 100);
    assert_string_equal(cli_out, api_out);
    free(api_out);
    free(cli_out);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
    dnnmem_options_free(o);
}

/* Bad values: the CLI prints the API's message. */
static void test_errors_agree(void **state)
{
    static const char *const cases[][2] = {
        {"mode", "fly"},          {"kv-dtype", "int4"}, {"lora-alpha", "-1"},
        {"mxnet-reserve", "101"}, {"framework", "pytorch@x"}, {"tf-memory-limit", "0"},
        {"dim", "=3"},            {"top", "0"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        dnnmem_options *o = dnnmem_options_new();
        struct dnnmem_error err;
        assert_int_equal(dnnmem_config_set(&cfg, o, cases[k][0], cases[k][1], &err), DNNMEM_E_USAGE);
        char args[256], want[700];
        snprintf(args, sizeof args, "estimate " MODEL " --%s '%s'", cases[k][0], cases[k][1]);
        snprintf(want, sizeof want, "dnnmem: %s\nTry 'dnnmem --help'.\n", err.message);
        char *got = run_cli(*state, args, true);
        assert_string_equal(got, want);
        free(got);
        dnnmem_options_free(o);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    /* build/tests/test-options -> build/dnnmem */
    char cli[4096];
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash)
        *slash = '\0';
    slash = strrchr(cli, '/');
    if (slash)
        slash[1] = '\0';
    else
        strcpy(cli, "./");
    strncat(cli, "dnnmem", sizeof cli - strlen(cli) - 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ownership, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calibration, setup, teardown),
        cmocka_unit_test(test_table),
        cmocka_unit_test_prestate(test_help, cli),
        cmocka_unit_test_prestate(test_round_trip, cli),
        cmocka_unit_test_prestate(test_errors_agree, cli),
    };
    return cmocka_run_group_tests_name("options", tests, NULL, NULL);
}
