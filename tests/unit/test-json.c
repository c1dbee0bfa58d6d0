/*
 * test-json.c: the capture format's JSON reader (src/util/json.c): values,
 * members in file order, escapes decoded to UTF-8, int64 bounds, and each
 * refusal with its byte offset (the cases jansson refuses too, with
 * JSON_REJECT_DUPLICATES; fuzz/fuzz-capture.c compares the two readers), and
 * its nesting limit.
 */
#include "util.h"

/* Parse `text`; on success *root, else *je (the arena freed by the caller). */
static enum dnnmem_status parse(struct dm_arena *a, const char *text, const struct dm_json **root,
                                struct dm_json_error *je)
{
    dm_arena_init(a);
    return dm_json_parse(a, (const uint8_t *)text, strlen(text), root, je);
}

static void test_values(void **state)
{
    (void)state;
    struct dm_arena a;
    const struct dm_json *r;
    struct dm_json_error je;
    assert_int_equal(parse(&a, " {\"b\": [1, -0, 9223372036854775807, -9223372036854775808, 2.5e1,"
                               " true, false, null, \"x\\\"\\u00e9\\ud83d\\ude00\"], \"a\": {}} \n",
                           &r, &je),
                     DNNMEM_OK);
    assert_int_equal(r->type, DM_JSON_OBJECT);
    assert_int_equal(r->n, 2);
    assert_string_equal(r->u.items[0].key, "b"); /* file order */
    const struct dm_json *b = dm_json_get(r, "b");
    assert_int_equal(dm_json_size(b), 9);
    assert_int_equal(dm_json_int(dm_json_at(b, 0)), 1);
    assert_true(dm_json_is(dm_json_at(b, 1), DM_JSON_INT));
    assert_int_equal(dm_json_int(dm_json_at(b, 1)), 0);
    assert_true(dm_json_int(dm_json_at(b, 2)) == INT64_MAX);
    assert_true(dm_json_int(dm_json_at(b, 3)) == INT64_MIN);
    assert_true(dm_json_is(dm_json_at(b, 4), DM_JSON_REAL) && dm_json_at(b, 4)->u.r == 25.0);
    assert_true(dm_json_is(dm_json_at(b, 5), DM_JSON_TRUE) && dm_json_is_bool(dm_json_at(b, 6)));
    assert_true(dm_json_is(dm_json_at(b, 7), DM_JSON_NULL));
    /* x, ", U+00E9 (2 bytes), U+1F600 from its surrogate pair (4 bytes) */
    assert_string_equal(dm_json_str(dm_json_at(b, 8)), "x\"\xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(dm_json_at(b, 8)->n, 8);
    assert_null(dm_json_at(b, 9));
    assert_int_equal(dm_json_get(r, "a")->type, DM_JSON_OBJECT);
    /* jansson's accessors' meaning for a missing value or another type */
    assert_null(dm_json_get(r, "c"));
    assert_null(dm_json_get(b, "b"));
    assert_null(dm_json_str(dm_json_at(b, 0)));
    assert_int_equal(dm_json_int(dm_json_at(b, 8)), 0);
    assert_int_equal(dm_json_size(r), 0);
    dm_arena_free(&a);
    /* empty containers, at the top and inside (no members: no scratch stack yet) */
    assert_int_equal(parse(&a, "{}", &r, &je), DNNMEM_OK);
    assert_true(r->type == DM_JSON_OBJECT && r->n == 0 && !dm_json_get(r, "x"));
    dm_arena_free(&a);
    assert_int_equal(parse(&a, "[[], {}, [{}]]", &r, &je), DNNMEM_OK);
    assert_int_equal(dm_json_size(r), 3);
    assert_int_equal(dm_json_size(dm_json_at(r, 0)), 0);
    assert_int_equal(dm_json_size(dm_json_at(r, 2)), 1);
    dm_arena_free(&a);
}

/* Each refusal: the message and the byte it names. */
static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *msg;
        size_t offset;
    } bad[] = {
        {"", "'[' or '{' expected", 0},
        {"  42", "'[' or '{' expected", 2},
        {"{\"a\": 1,}", "string or '}' expected", 8},
        {"[1 2]", "',' or ']' expected", 3},
        {"{\"a\" 1}", "':' expected", 5},
        {"{\"a\": 1} x", "end of file expected", 9},
        {"{\"a\": 1, \"a\": 2}", "duplicate object key", 0},
        {"[01]", "invalid token (a leading zero)", 1},
        {"[1.]", "invalid token (no digit after the point)", 1},
        {"[9223372036854775808]", "too big integer", 1},
        {"[-9223372036854775809]", "too big negative integer", 1},
        {"[1e999]", "real number overflow", 1},
        {"[tru]", "invalid token", 1},
        {"[\"a\\u0000\"]", "\\u0000 in a string", 3},
        {"[\"\\udc00\"]", "a lone low surrogate in a \\u escape", 2},
        {"[\"\\ud800x\"]", "a high surrogate without its low one in a \\u escape", 2},
        {"[\"\\x\"]", "invalid escape in a string", 2},
        {"[\"a\tb\"]", "control character in a string", 3},
        {"[\"\xc0\xaf\"]", "invalid UTF-8 in a string", 2},     /* overlong '/' */
        {"[\"\xed\xa0\x80\"]", "invalid UTF-8 in a string", 2}, /* a surrogate */
        {"[\"abc", "unterminated string", 1},
        {"[1, ", "unexpected end of input", 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct dm_arena a;
        const struct dm_json *r;
        struct dm_json_error je;
        if (parse(&a, bad[i].text, &r, &je) != DNNMEM_E_PARSE)
            fail_msg("%s: accepted", bad[i].text);
        assert_string_equal(je.msg, bad[i].msg);
        if (je.offset != bad[i].offset)
            fail_msg("%s: byte %zu, expected %zu", bad[i].text, je.offset, bad[i].offset);
        assert_false(je.limit);
        assert_null(r);
        dm_arena_free(&a);
    }
}

/* A NUL byte between tokens is not JSON (RFC 8259's whitespace is space,
 * tab, LF and CR): refused at the byte after the number before it, where
 * jansson 2.14 takes "[24\0,32]" as [24, 32] (its number lexer stops at the
 * NUL; the capture fuzzer found it, fuzz/fuzz-capture.c exempts NULs). */
static void test_nul_between_tokens(void **state)
{
    (void)state;
    static const uint8_t text[] = {'[', '2', '4', 0, ',', '3', '2', ']'};
    struct dm_arena a;
    dm_arena_init(&a);
    const struct dm_json *r;
    struct dm_json_error je;
    assert_int_equal(dm_json_parse(&a, text, sizeof text, &r, &je), DNNMEM_E_PARSE);
    assert_string_equal(je.msg, "',' or ']' expected");
    assert_int_equal(je.offset, 3);
    assert_false(je.limit);
    dm_arena_free(&a);
}

/* Nesting: DM_JSON_MAX_DEPTH containers are read, one more is the reader's
 * limit (E_LIMIT, at the container that passes it). */
static void test_depth_limit(void **state)
{
    (void)state;
    char text[2 * DM_JSON_MAX_DEPTH + 3];
    for (int depth = DM_JSON_MAX_DEPTH; depth <= DM_JSON_MAX_DEPTH + 1; depth++) {
        memset(text, '[', (size_t)depth);
        memset(text + depth, ']', (size_t)depth);
        text[2 * depth] = '\0';
        struct dm_arena a;
        const struct dm_json *r;
        struct dm_json_error je;
        enum dnnmem_status s = parse(&a, text, &r, &je);
        if (depth == DM_JSON_MAX_DEPTH) {
            assert_int_equal(s, DNNMEM_OK);
            assert_int_equal(dm_json_size(r), 1);
        } else {
            assert_int_equal(s, DNNMEM_E_LIMIT);
            assert_true(je.limit);
            assert_int_equal(je.offset, DM_JSON_MAX_DEPTH);
        }
        dm_arena_free(&a);
    }
}

/* An object of more members than the pairwise check takes (sorted copies):
 * a duplicate is still found. */
static void test_large_object_duplicate(void **state)
{
    (void)state;
    char text[1024];
    size_t n = 0;
    n += (size_t)snprintf(text + n, sizeof text - n, "{");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s\"k%d\": %d", i ? ", " : "", i, i);
    snprintf(text + n, sizeof text - n, "}");
    struct dm_arena a;
    const struct dm_json *r;
    struct dm_json_error je;
    assert_int_equal(parse(&a, text, &r, &je), DNNMEM_OK);
    assert_int_equal(dm_json_int(dm_json_get(r, "k39")), 39);
    dm_arena_free(&a);
    snprintf(text + n, sizeof text - n, ", \"k7\": 0}");
    assert_int_equal(parse(&a, text, &r, &je), DNNMEM_E_PARSE);
    assert_string_equal(je.msg, "duplicate object key");
    dm_arena_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nul_between_tokens),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_large_object_duplicate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
