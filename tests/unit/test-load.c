/* test-load.c: the ONNX front end on good and bad models. */
#include "util.h"

enum { F32 = 1, I64 = 7 };


static void test_loads_small_model(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    assert_int_equal(info.opset, 13);
    assert_int_equal(info.n_nodes, 2);
    assert_int_equal(info.n_weights, 1);
    assert_int_equal(info.n_inputs, 1);
    assert_int_equal(info.n_symbols, 1);
    assert_string_equal(dnnmem_model_symbol(m, 0), "batch");
    dnnmem_model_free(m);
    tb_free(b);
}

/* Every truncation of a valid model is rejected cleanly, never a crash. */
static void test_truncated(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    size_t len;
    uint8_t *p = tb_pack(b, &len);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *q = malloc(cut + 1); /* exact-size copy so ASan sees overreads */
        memcpy(q, p, cut);
        dnnmem_model *m = NULL;
        struct dnnmem_error err = {0};
        enum dnnmem_status s = dnnmem_model_load_buffer(q, cut, "cut.onnx", &m, &err);
        if (s == DNNMEM_OK) /* a cut at a field boundary can still be a valid model */
            dnnmem_model_free(m);
        else
            assert_msg_has(err, "cut.onnx");
        free(q);
    }
    free(p);
    tb_free(b);
}

/* Flipping any byte gives a model or an error, never a crash. */
static void test_corrupt_bytes(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    size_t len;
    uint8_t *p = tb_pack(b, &len);
    for (size_t i = 0; i < len; i++)
        for (int v = 0; v < 256; v += 37) {
            uint8_t *q = malloc(len);
            memcpy(q, p, len);
            q[i] = (uint8_t)v;
            dnnmem_model *m = NULL;
            struct dnnmem_error err = {0};
            if (dnnmem_model_load_buffer(q, len, "x.onnx", &m, &err) == DNNMEM_OK)
                dnnmem_model_free(m);
            free(q);
        }
    free(p);
    tb_free(b);
}

static void expect_error(struct tb *b, enum dnnmem_status want, const char *needle)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err = {0};
    enum dnnmem_status s = tb_load(b, &m, &err);
    if (s != want)
        fail_msg("status %d (%s), want %d", s, err.message, want);
    assert_null(m);
    assert_msg_has(err, "t.onnx");
    assert_msg_has(err, needle);
    assert_null(strchr(err.message, '\n'));
    tb_free(b);
}

static void test_not_protobuf(void **state)
{
    (void)state;
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    const char junk[] = "\xff\xff\xff\xff garbage";
    assert_int_equal(dnnmem_model_load_buffer(junk, sizeof junk - 1, "j.onnx", &m, &err),
                     DNNMEM_E_PARSE);
    assert_msg_has(err, "j.onnx");
    assert_int_equal(dnnmem_model_load_buffer("", 0, "e.onnx", &m, &err), DNNMEM_E_PARSE);
    assert_msg_has(err, "empty");
    /* field 7 (graph) sent as a varint: the generated parser rejects the wrong type */
    const uint8_t wrong_type[] = {0x08, 0x07, 0x38, 0x01};
    assert_int_equal(dnnmem_model_load_buffer(wrong_type, sizeof wrong_type, "w.onnx", &m, &err),
                     DNNMEM_E_PARSE);
}

static void test_cycle(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2");
    tb_node(b, "Add", "a", "x,q", "p");
    tb_node(b, "Relu", "r", "p", "q");
    tb_output(b, "q");
    expect_error(b, DNNMEM_E_MODEL, "cycle");
}

static void test_dangling(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2");
    tb_node(b, "Add", "adder", "x,nowhere", "y");
    tb_output(b, "y");
    expect_error(b, DNNMEM_E_MODEL, "'adder' reads 'nowhere'");
}

/* A node of more than 32 inputs (a Concat of 40 [4] floats, as DeepSeek-V2's
 * MoE graph has): the ops table's input bit masks are 32 bits wide, and slot
 * 32 and later are data inputs (found by UBSan: a shift by 32 in
 * src/shape/infer.c). The output is [160] floats, 640 B, beside the 40
 * inputs' 640 B: an inference peak of 1280 B. */
static void test_many_inputs(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    char ins[40 * 8] = "";
    for (int k = 0; k < 40; k++) {
        char name[8];
        snprintf(name, sizeof name, "x%d", k);
        tb_input(b, name, F32, "4");
        strcat(ins, k ? "," : "");
        strcat(ins, name);
    }
    tb_node(b, "Concat", "cat", ins, "y");
    tb_attr_int(b, "axis", 0);
    tb_output(b, "y");
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.device = DNNMEM_DEVICE_CPU;
    struct dnnmem_result *r = estimate_cfg(b, &cfg);
    assert_int_equal(r->peak_allocated, 2 * 40 * 4 * 4);
    dnnmem_result_free(r);
}

static void test_duplicate_producer(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2");
    tb_node(b, "Relu", "r1", "x", "y");
    tb_node(b, "Relu", "r2", "x", "y");
    tb_output(b, "y");
    expect_error(b, DNNMEM_E_MODEL, "'r2' writes 'y'");
}

static void test_overwrites_input(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2");
    tb_node(b, "Relu", "r1", "x", "x");
    tb_output(b, "x");
    expect_error(b, DNNMEM_E_MODEL, "writes 'x'");
}

static void test_negative_dim(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    b->g.initializer[0]->dims[0] = -3;
    expect_error(b, DNNMEM_E_SHAPE, "negative dim");
}

static void test_overflowing_dims(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    b->g.initializer[0]->dims[0] = INT64_C(1) << 40;
    b->g.initializer[0]->dims[1] = INT64_C(1) << 40;
    expect_error(b, DNNMEM_E_SHAPE, "overflows");
}

static void test_absurd_size(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    b->g.initializer[0]->dims[0] = INT64_C(1) << 40;
    b->g.initializer[0]->dims[1] = 1 << 20;
    expect_error(b, DNNMEM_E_SHAPE, "absurd");
}

static void test_negative_input_dim(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "-2,3");
    tb_node(b, "Relu", "r", "x", "y");
    tb_output(b, "y");
    expect_error(b, DNNMEM_E_SHAPE, "input 'x' has negative dim");
}

static void test_unknown_dtype(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    b->g.initializer[0]->data_type = 99;
    expect_error(b, DNNMEM_E_MODEL, "unknown data type 99");
}

static void test_missing_opset(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    b->m.n_opset_import = 0;
    expect_error(b, DNNMEM_E_MODEL, "opset_import");
}

static void test_unknown_op(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2");
    tb_node(b, "FancyOp", "fancy", "x", "y");
    tb_output(b, "y");
    expect_error(b, DNNMEM_E_UNSUPPORTED, "node 'fancy': unsupported op 'FancyOp'");
}

static void test_custom_domain_op(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2");
    tb_node(b, "Relu", "r", "x", "y")->domain = (char *)"com.example";
    tb_output(b, "y");
    expect_error(b, DNNMEM_E_UNSUPPORTED, "'com.example::Relu'");
}

static void test_raw_data_size_mismatch(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    Onnx__TensorProto *t = b->g.initializer[0];
    static uint8_t bytes[40];
    t->has_raw_data = 1;
    t->raw_data.len = sizeof bytes; /* dims say 3x4 floats = 48 */
    t->raw_data.data = bytes;
    expect_error(b, DNNMEM_E_MODEL, "raw_data holds 40 bytes but dims and type say 48");
}

/* An empty raw_data for a non-empty tensor is a mismatch too (a fuzzer find). */
static void test_empty_raw_data(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    tb_init_i64(b, "v", 2, (int64_t[]){1, 2});
    Onnx__TensorProto *t = b->g.initializer[1];
    t->n_int64_data = 0;
    t->has_raw_data = 1;
    t->raw_data.len = 0;
    t->raw_data.data = NULL;
    expect_error(b, DNNMEM_E_MODEL, "raw_data holds 0 bytes but dims and type say 16");
}

/* Typed data must be in the field onnx.proto assigns to the type (a fuzzer
 * found float32 values given in int64_data). */
static void test_typed_data_in_wrong_field(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    tb_init_i64(b, "v", 2, (int64_t[]){1, 2});
    b->g.initializer[1]->data_type = F32;
    expect_error(b, DNNMEM_E_MODEL, "float32 data is stored in the wrong TensorProto field");
}

static void test_output_not_produced(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    tb_output(b, "ghost");
    expect_error(b, DNNMEM_E_MODEL, "'ghost'");
}

static void test_unsorted_graph_is_sorted(void **state)
{
    (void)state;
    struct tb *b = tb_new(13);
    tb_input(b, "x", F32, "2");
    tb_node(b, "Relu", "second", "h", "y");
    tb_node(b, "Relu", "first", "x", "h");
    tb_output(b, "y");
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    const struct dm_graph *g = dm_model_graph(m);
    assert_string_equal(g->nodes[0].name, "first");
    assert_string_equal(g->nodes[1].name, "second");
    dnnmem_model_free(m);
    tb_free(b);
}

/* A large raw_data initializer is never handed to the parser: the stripped
 * message stays small and the parser allocates almost nothing. */
static void test_weights_not_copied(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    size_t big = (size_t)64 << 20;
    int64_t dims[2] = {(int64_t)(big / 4 / 1024), 1024};
    Onnx__TensorProto *t = tb_init(b, "big", F32, 2, dims);
    t->has_raw_data = 1;
    t->raw_data.len = big;
    t->raw_data.data = tb_calloc(b, big, 1);
    size_t len;
    uint8_t *p = tb_pack(b, &len);
    assert_true(len > big);
    struct dm_graph g;
    dm_graph_init(&g);
    g.path = "big.onnx";
    struct dm_load_stats st;
    struct dnnmem_error err;
    assert_int_equal(dm_load_onnx_stats(&g, p, len, &st, &err), DNNMEM_OK);
    assert_int_equal(st.file_bytes, len);
    assert_true(st.parsed_bytes < 1024);
    assert_true(st.parser_alloc_bytes < 16384);
    int32_t id = dm_graph_find(&g, "big");
    assert_true(id >= 0);
    assert_int_equal(g.tensors[id].dims[0].value, dims[0]);
    assert_null(g.tensors[id].value);
    dm_graph_free(&g);
    free(p);
    tb_free(b);
}

/* Small int64 initializers keep their values (they feed constant folding). */
static void test_small_values_kept(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    tb_init_i64(b, "shape", 3, (int64_t[]){2, -1, 4});
    dnnmem_model *m;
    struct dnnmem_error err;
    assert_int_equal(tb_load(b, &m, &err), DNNMEM_OK);
    const struct dm_graph *g = dm_model_graph(m);
    const struct dm_tensor *t = &g->tensors[dm_graph_find(g, "shape")];
    assert_non_null(t->value);
    assert_int_equal(t->value->n, 3);
    assert_int_equal(t->value->i[1], -1);
    dnnmem_model_free(m);
    tb_free(b);
}

static void test_file_errors(void **state)
{
    (void)state;
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    assert_int_equal(dnnmem_model_load("/nonexistent/model.onnx", &m, &err), DNNMEM_E_IO);
    assert_msg_has(err, "/nonexistent/model.onnx");
    assert_int_equal(dnnmem_model_load("/tmp", &m, &err), DNNMEM_E_IO);
    assert_int_equal(dnnmem_model_load(NULL, &m, &err), DNNMEM_E_USAGE);
    dnnmem_model_free(NULL);
    dnnmem_result_free(NULL);
}

/* tb_small_mlp's message with `n` copies of the `k` bytes `rec` appended
 * at the top level (a field of ModelProto); malloc'd. */
static uint8_t *with_fields(const uint8_t *rec, size_t k, size_t n, size_t *len)
{
    struct tb *b = tb_small_mlp();
    size_t base;
    uint8_t *p = tb_pack(b, &base);
    uint8_t *q = malloc(base + k * n);
    assert_non_null(q);
    memcpy(q, p, base);
    for (size_t i = 0; i < n; i++)
        memcpy(q + base + i * k, rec, k);
    *len = base + k * n;
    free(p);
    tb_free(b);
    return q;
}

/* Issue 17: what protobuf-c allocates is bounded. A field onnx.proto does
 * not define (number 1000, a varint: tag 1000 << 3 = 0xc0 0x3e) is dropped
 * before unpacking, however often it repeats; a defined field with the
 * wrong wire type (4, domain, a string, as a varint: 0x20 0x01) is refused
 * where it stands; and a million empty metadata_props (field 14: 0x72 0x00,
 * a StringStringEntryProto each: more than 16 bytes of parser memory per 2
 * bytes of file) is refused once the parser would pass 16x the bytes plus
 * 16 MiB. */
static void test_parser_bounded(void **state)
{
    (void)state;
    struct dnnmem_error err;
    struct dm_load_stats st, st0;
    size_t len;
    uint8_t *p = with_fields((const uint8_t[]){0xc0, 0x3e, 0x01}, 3, 0, &len);
    struct dm_graph g;
    dm_graph_init(&g);
    assert_int_equal(dm_load_onnx_stats(&g, p, len, &st0, &err), DNNMEM_OK);
    dm_graph_free(&g);
    free(p);
    p = with_fields((const uint8_t[]){0xc0, 0x3e, 0x01}, 3, 1000000, &len);
    dm_graph_init(&g);
    assert_int_equal(dm_load_onnx_stats(&g, p, len, &st, &err), DNNMEM_OK);
    assert_int_equal(st.parser_alloc_bytes, st0.parser_alloc_bytes);
    dm_graph_free(&g);
    free(p);

    p = with_fields((const uint8_t[]){0x20, 0x01}, 2, 1, &len);
    dm_graph_init(&g);
    g.path = "w.onnx";
    assert_int_equal(dm_load_onnx(&g, p, len, &err), DNNMEM_E_PARSE);
    char want[128];
    snprintf(want, sizeof want,
             "w.onnx: not a valid ONNX model: a field's encoding does not match its type at "
             "byte %zu", len - 2);
    assert_string_equal(err.message, want);
    dm_graph_free(&g);
    free(p);

    p = with_fields((const uint8_t[]){0x72, 0x00}, 2, 1000000, &len);
    dm_graph_init(&g);
    g.path = "m.onnx";
    assert_int_equal(dm_load_onnx_stats(&g, p, len, &st, &err), DNNMEM_E_LIMIT);
    size_t limit = len * 16 + ((size_t)16 << 20);
    /* refused before unpacking, on the prediction: each entry is a struct,
     * a pointer in the array and a 32-byte ScannedMember, at least */
    assert_int_equal(st.parser_alloc_bytes, 0);
    assert_true(st.parser_predicted_bytes >
                1000000 * (sizeof(Onnx__StringStringEntryProto) + sizeof(void *) + 32));
    assert_true(st.parser_predicted_bytes > limit);
    snprintf(want, sizeof want,
             "m.onnx: unpacking its %zu bytes of graph would take more than %zu MiB", len,
             limit >> 20);
    assert_memory_equal(err.message, want, strlen(want));
    dm_graph_free(&g);
    free(p);
}

/* The stripper's prediction of protobuf-c's allocations is exact for real
 * graphs (it was over all 216 ONNX files of tests/models and
 * ../shared/models on 2026-12-02) and for the resource test's repeated
 * fields; a file whose prediction passes the cap is unpacked, and a
 * repeated field of 10 million ints (20 MB) is refused with nothing
 * spent, where it took 305 MB of the parser's cap before. */
static void test_parser_predicted(void **state)
{
    (void)state;
    static const char *const files[] = {
        "tests/models/fixtures/resnet50.onnx", "tests/models/fixtures/bert_encoder.onnx",
        "tests/models/onnx/tiny-random-gpt2_past_ort-fused.onnx",
        "tests/models/onnx/light_bvlc_alexnet.onnx", "tests/models/zoo/swin_t-i224.onnx"};
    for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
        FILE *f = fopen(files[k], "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        size_t n = (size_t)ftell(f);
        rewind(f);
        uint8_t *p = malloc(n);
        assert_non_null(p);
        assert_int_equal(fread(p, 1, n, f), n);
        fclose(f);
        struct dm_graph g;
        dm_graph_init(&g);
        g.path = files[k];
        struct dm_load_stats st;
        struct dnnmem_error err;
        assert_int_equal(dm_load_onnx_stats(&g, p, n, &st, &err), DNNMEM_OK);
        assert_true(st.parser_alloc_bytes > 0);
        assert_int_equal(st.parser_predicted_bytes, st.parser_alloc_bytes);
        dm_graph_free(&g);
        free(p);
    }
    /* one attribute's ints (field 8, unpacked in proto2: 0x40 0x01 each) */
    struct tb *b = tb_new(13);
    tb_input(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, "4");
    tb_node(b, "Relu", "r", "x", "y");
    size_t n_ints = 10000000;
    int64_t *ones = malloc(n_ints * sizeof *ones);
    assert_non_null(ones);
    for (size_t i = 0; i < n_ints; i++)
        ones[i] = 1;
    tb_attr_ints(b, "j", n_ints, ones);
    free(ones);
    tb_output(b, "y");
    size_t len;
    uint8_t *p = tb_pack(b, &len);
    assert_true(len > 2 * n_ints);
    struct dm_graph g;
    dm_graph_init(&g);
    g.path = "ints.onnx";
    struct dm_load_stats st;
    struct dnnmem_error err;
    assert_int_equal(dm_load_onnx_stats(&g, p, len, &st, &err), DNNMEM_E_LIMIT);
    assert_int_equal(st.parser_alloc_bytes, 0);
    /* each int: its ScannedMember (32 bytes) and its int64 (8) */
    assert_true(st.parser_predicted_bytes > n_ints * 40);
    dm_graph_free(&g);
    free(p);
    tb_free(b);
}

/* A file of fields onnx.proto does not define strips to nothing (found by
 * fuzz-onnx: the prediction was given a NULL buffer): an empty ModelProto,
 * which has no graph. */
static void test_parser_nothing_kept(void **state)
{
    (void)state;
    static const uint8_t data[] = {0x50, 0x00, 0x5d, 0x0a, 0x4b, 0x75, 0x28};
    struct dm_graph g;
    dm_graph_init(&g);
    g.path = "none.onnx";
    struct dm_load_stats st;
    struct dnnmem_error err;
    enum dnnmem_status s = dm_load_onnx_stats(&g, data, sizeof data, &st, &err);
    assert_int_equal(st.parsed_bytes, 0);
    assert_int_equal(st.parser_predicted_bytes, sizeof(Onnx__ModelProto));
    assert_int_equal(st.parser_alloc_bytes, sizeof(Onnx__ModelProto));
    assert_int_equal(s, DNNMEM_E_MODEL);
    assert_string_equal(err.message, "none.onnx: the model has no graph");
    dm_graph_free(&g);
}

/* The node budget of an ONNX file is its node count, checked before any
 * node is converted. */
static void test_onnx_node_budget(void **state)
{
    (void)state;
    struct tb *b = tb_small_mlp();
    size_t len;
    uint8_t *p = tb_pack(b, &len);
    struct dnnmem_load_options lo = {.max_nodes = 1};
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    assert_int_equal(dnnmem_model_load_buffer_opts(p, len, "mlp.onnx", &lo, &m, &err),
                     DNNMEM_E_LIMIT);
    assert_non_null(strstr(err.message, "nodes, beyond the budget of 1 (--max-nodes)"));
    lo.max_nodes = 0; /* the default */
    assert_int_equal(dnnmem_model_load_buffer_opts(p, len, "mlp.onnx", &lo, &m, &err), DNNMEM_OK);
    dnnmem_model_free(m);
    free(p);
    tb_free(b);
}

/* Model-local functions are inlined (onnx.c, convert_node): two nn.ReLU
 * modules exported with export_modules_as_functions (torch 2.14.1,
 * tools/export_inplace_fixtures.py) are calls of
 * torch.nn.modules.activation::ReLU, whose body is one Relu; each becomes
 * that Relu in its call's scope, bound to the call's tensors, with the
 * call's inplace (1, 0) as its fact; the graph's own nodes have none. */
static void test_onnx_functions_inlined(void **state)
{
    (void)state;
    const char *path = "tests/models/onnx/inplace-modules-mixed.onnx";
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof buf);
    struct dm_graph g;
    dm_graph_init(&g);
    g.path = path;
    struct dnnmem_error err;
    assert_int_equal(dm_load_onnx(&g, buf, n, &err), DNNMEM_OK);
    assert_int_equal(g.n_nodes, 4); /* Constant, Mul, Relu, Relu */
    int relus = 0;
    for (int32_t i = 0; i < g.n_nodes; i++) {
        const struct dm_node *nd = &g.nodes[i];
        if (nd->op != DM_OP_Relu) {
            assert_int_equal(nd->inplace_fact, DM_INPLACE_FACT_UNKNOWN);
            continue;
        }
        relus++;
        const char *in = g.tensors[nd->in[0]].name, *out = g.tensors[nd->out[0]].name;
        if (strcmp(nd->name, "/act1/ReLU.Relu_1") == 0) {
            assert_int_equal(nd->inplace_fact, DM_INPLACE_FACT_YES);
            assert_string_equal(in, "/Mul_output_0");
            assert_string_equal(out, "/act1/ReLU_output_0");
        } else {
            assert_string_equal(nd->name, "/act2/ReLU.Relu_1");
            assert_int_equal(nd->inplace_fact, DM_INPLACE_FACT_NO);
            assert_string_equal(in, "/act1/ReLU_output_0");
            assert_string_equal(out, "6");
        }
    }
    assert_int_equal(relus, 2);
    dm_graph_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loads_small_model),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_corrupt_bytes),
        cmocka_unit_test(test_not_protobuf),
        cmocka_unit_test(test_cycle),
        cmocka_unit_test(test_dangling),
        cmocka_unit_test(test_many_inputs),
        cmocka_unit_test(test_duplicate_producer),
        cmocka_unit_test(test_overwrites_input),
        cmocka_unit_test(test_negative_dim),
        cmocka_unit_test(test_overflowing_dims),
        cmocka_unit_test(test_absurd_size),
        cmocka_unit_test(test_negative_input_dim),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_missing_opset),
        cmocka_unit_test(test_unknown_op),
        cmocka_unit_test(test_custom_domain_op),
        cmocka_unit_test(test_raw_data_size_mismatch),
        cmocka_unit_test(test_empty_raw_data),
        cmocka_unit_test(test_typed_data_in_wrong_field),
        cmocka_unit_test(test_output_not_produced),
        cmocka_unit_test(test_unsorted_graph_is_sorted),
        cmocka_unit_test(test_weights_not_copied),
        cmocka_unit_test(test_parser_bounded),
        cmocka_unit_test(test_parser_predicted),
        cmocka_unit_test(test_parser_nothing_kept),
        cmocka_unit_test(test_onnx_node_budget),
        cmocka_unit_test(test_onnx_functions_inlined),
        cmocka_unit_test(test_small_values_kept),
        cmocka_unit_test(test_file_errors),
    };
    return cmocka_run_group_tests_name("load", tests, NULL, NULL);
}
