/*
 * test-readonce.c: a JSON model file is parsed once (issue 17, "read once";
 * docs/untrusted-input.md). This binary is linked with
 * -Wl,--wrap=json_loadb,--wrap=dm_json_parse (Makefile), so every parse the
 * library makes, by jansson or by the capture format's reader (src/util/json.c),
 * goes through a __wrap_ function below and is counted: loading a model file of
 * each JSON kind, then estimating it in the modes that rebuild its graph,
 * must parse it exactly once. Its top-level keys choose the front end, and
 * JSON of no kind or of two gets a one-line error.
 */
#include "util.h"

#include <jansson.h>

json_t *__real_json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error);
json_t *__wrap_json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error);

static int n_parses; /* json_loadb and dm_json_parse calls since the last reset */
static int n_capture_parses; /* dm_json_parse's alone */

json_t *__wrap_json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error)
{
    n_parses++;
    return __real_json_loadb(buffer, buflen, flags, error);
}

enum dnnmem_status __real_dm_json_parse(struct dm_arena *arena, const uint8_t *data, size_t size,
                                        const struct dm_json **root, struct dm_json_error *err);
enum dnnmem_status __wrap_dm_json_parse(struct dm_arena *arena, const uint8_t *data, size_t size,
                                        const struct dm_json **root, struct dm_json_error *err);

enum dnnmem_status __wrap_dm_json_parse(struct dm_arena *arena, const uint8_t *data, size_t size,
                                        const struct dm_json **root, struct dm_json_error *err)
{
    n_parses++;
    n_capture_parses++;
    return __real_dm_json_parse(arena, data, size, root, err);
}

/* Load path, estimate it (inference; training with gradient checkpointing,
 * which rebuilds a HuggingFace config's graph from a changed copy of the
 * config; generation), and return the parses counted. */
static int parses_of(const char *path, const char *format)
{
    n_parses = n_capture_parses = 0;
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK)
        fail_msg("%s: %s", path, err.message);
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    assert_string_equal(info.format, format);
    struct dnnmem_dim_binding dims[8];
    size_t n = 0;
    for (size_t i = 0; i < info.n_symbols && n < 8; i++)
        dims[n++] = (struct dnnmem_dim_binding){dnnmem_model_symbol(m, i), 2};
    static const enum dnnmem_mode modes[] = {DNNMEM_MODE_INFER, DNNMEM_MODE_TRAIN,
                                             DNNMEM_MODE_GENERATE};
    for (size_t k = 0; k < 3; k++) {
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.mode = modes[k];
        cfg.dims = dims;
        cfg.n_dims = n;
        cfg.new_tokens = modes[k] == DNNMEM_MODE_GENERATE ? 4 : 0;
        static const char *const ckpt[] = {"/model.layers.*"};
        cfg.checkpoint = ckpt;
        cfg.n_checkpoint = modes[k] == DNNMEM_MODE_TRAIN;
        struct dnnmem_result *r = NULL;
        /* not every model runs every mode (a capture is one step): only
         * the parses are counted */
        if (dnnmem_estimate(m, &cfg, &r, &err) == DNNMEM_OK)
            dnnmem_result_free(r);
    }
    dnnmem_model_free(m);
    return n_parses;
}

static void test_each_kind_parsed_once(void **state)
{
    (void)state;
    assert_int_equal(parses_of("tests/models/hf/gpt2.json", "huggingface"), 1);
    assert_int_equal(parses_of("tests/models/hf/tiny-llama-gqa.json", "huggingface"), 1);
    assert_int_equal(parses_of("tests/models/keras/mnist_small_cnn_keras2.15.json", "keras"), 1);
    assert_int_equal(parses_of("tests/models/mxnet/mlp-legacy-v0.8-symbol.json", "mxnet"), 1);
    assert_int_equal(parses_of("tests/models/capture/tiny-train.dnnmem", "dnnmem-capture"), 1);
    assert_int_equal(n_capture_parses, 1); /* the capture format's reader, not jansson */
    assert_int_equal(parses_of("tests/models/hf/gpt2.json", "huggingface"), 1);
    assert_int_equal(n_capture_parses, 0);
}

/* The status and one-line message of loading `text`, parsed `parses` times. */
static enum dnnmem_status load_text_parsed(const char *text, char *msg, size_t cap, int parses)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    n_parses = 0;
    enum dnnmem_status s = dnnmem_model_load_buffer(text, strlen(text), "x.json", &m, &err);
    assert_int_equal(n_parses, parses);
    dnnmem_model_free(m);
    if (s != DNNMEM_OK) {
        snprintf(msg, cap, "%s", err.message);
        assert_null(strchr(msg, '\n'));
    }
    return s;
}

/* ... parsed once */
static enum dnnmem_status load_text(const char *text, char *msg, size_t cap)
{
    return load_text_parsed(text, msg, cap, 1);
}

static void test_kind_by_keys(void **state)
{
    (void)state;
    char msg[1024];
    assert_int_equal(load_text("{\"model_type\": \"llama\", \"nodes\": [], \"heads\": []}", msg,
                               sizeof msg),
                     DNNMEM_E_MODEL);
    assert_string_equal(msg, "x.json: ambiguous JSON: it has the keys of an MXNet symbol (nodes, "
                             "and heads or arg_nodes) and of a HuggingFace config.json "
                             "(model_type, architectures or vocab_size); a model file must be one");
    /* a capture's tag with another front end's keys: the capture reader's parse
     * finds them, jansson's decides the kind (the one case parsed twice) */
    assert_int_equal(load_text_parsed("{\"format\": \"dnnmem-capture\", \"class_name\": "
                                      "\"Sequential\", \"config\": {}}", msg, sizeof msg, 2),
                     DNNMEM_E_MODEL);
    assert_non_null(strstr(msg, "ambiguous JSON: it has the keys of a dnnmem capture"));
    assert_int_equal(load_text("{\"hidden_size\": 64}", msg, sizeof msg), DNNMEM_E_UNSUPPORTED);
    assert_string_equal(msg, "x.json: a JSON file that is not a model dnnmem reads: not a "
                             "HuggingFace config.json (model_type, architectures or vocab_size), "
                             "a Keras model (class_name and config), an MXNet symbol (nodes, and "
                             "heads or arg_nodes) nor a dnnmem capture (\"format\": "
                             "\"dnnmem-capture\")");
    /* keys below the top level choose nothing (the old byte scan found
     * MXNet's "nodes" and "heads" anywhere in the text) */
    assert_int_equal(load_text("{\"x\": {\"nodes\": [], \"heads\": []}}", msg, sizeof msg),
                     DNNMEM_E_UNSUPPORTED);
    /* a capture cut short: not JSON, but its tag names the error */
    assert_int_equal(load_text("{\"format\": \"dnnmem-capture\", \"version\": 1, \"ops\": [", msg,
                               sizeof msg),
                     DNNMEM_E_PARSE);
    assert_non_null(strstr(msg, "x.json: not a complete capture (JSON: "));
    assert_int_equal(load_text("{\"model_type\": \"llama\",", msg, sizeof msg), DNNMEM_E_PARSE);
    assert_non_null(strstr(msg, "x.json: not valid JSON: "));
    /* an MXNet symbol known by arg_nodes alone goes to its front end */
    assert_int_equal(load_text("{\"nodes\": [], \"arg_nodes\": []}", msg, sizeof msg),
                     DNNMEM_E_PARSE);
    assert_string_equal(msg, "x.json: an MXNet symbol needs the arrays 'nodes' and 'heads'");
}

/* The front ends take the parsed root and leave it as it was, even the
 * HuggingFace build that turns use_cache off (a copy). */
static void test_front_end_takes_root(void **state)
{
    (void)state;
    json_error_t je;
    json_t *root = json_load_file("tests/models/hf/tiny-llama-gqa.json", 0, &je);
    assert_non_null(root);
    char *before = json_dumps(root, JSON_SORT_KEYS);
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.mode = DNNMEM_MODE_TRAIN;
    static const char *const ckpt[] = {"/model.layers.*"};
    cfg.checkpoint = ckpt;
    cfg.n_checkpoint = 1;
    struct dm_hf_env env = {.torch = 206, .transformers = 451, .cc = 80, .lora_alpha = 8};
    struct dm_graph g;
    dm_graph_init(&g);
    g.path = "tiny-llama-gqa.json";
    struct dnnmem_error err;
    n_parses = 0;
    assert_int_equal(dm_load_hf(&g, root, false, &cfg, &env, &err), DNNMEM_OK);
    assert_int_equal(n_parses, 0);
    assert_true(g.n_nodes > 0);
    dm_graph_free(&g);
    char *after = json_dumps(root, JSON_SORT_KEYS);
    assert_string_equal(before, after);
    assert_int_equal(root->refcount, 1);
    free(before);
    free(after);
    json_decref(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_kind_parsed_once),
        cmocka_unit_test(test_kind_by_keys),
        cmocka_unit_test(test_front_end_takes_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
