/* fuzz-capture.c: the captured-step reader (src/load/capture.c,
 * docs/capture-format.md), then the estimate. Seeds: fuzz/corpus/capture.
 *
 * Each input is also read by both JSON readers, jansson (as dnnmem_model_load
 * reads any other JSON model) and the capture format's (src/util/json.c), and
 * they must agree: both take it, as the same values, or both refuse it, but
 * for the capture reader's own limits (nesting deeper than DM_JSON_MAX_DEPTH)
 * and a NUL byte between tokens, which jansson 2.14 takes after a number
 * ("[24\0,32]": its number lexer stops at the NUL) and RFC 8259 does not
 * (the capture reader refuses it, naming the byte; test-json.c). */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

/* Whether jansson's value and the capture reader's are the same JSON: the
 * same type, members (an object's by key: both refuse duplicates) and values. */
static bool same(const json_t *j, const struct dm_json *d)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        if (d->type != DM_JSON_OBJECT || json_object_size(j) != d->n)
            return false;
        for (uint32_t i = 0; i < d->n; i++) {
            const json_t *v = json_object_get(j, d->u.items[i].key);
            if (!v || !same(v, &d->u.items[i]))
                return false;
        }
        return true;
    case JSON_ARRAY:
        if (d->type != DM_JSON_ARRAY || json_array_size(j) != d->n)
            return false;
        for (uint32_t i = 0; i < d->n; i++)
            if (!same(json_array_get(j, i), &d->u.items[i]))
                return false;
        return true;
    case JSON_STRING:
        return d->type == DM_JSON_STRING && json_string_length(j) == d->n &&
               memcmp(json_string_value(j), d->u.s, d->n) == 0;
    case JSON_INTEGER:
        return d->type == DM_JSON_INT && json_integer_value(j) == d->u.i;
    case JSON_REAL:
        return d->type == DM_JSON_REAL && json_real_value(j) == d->u.r;
    case JSON_TRUE:
        return d->type == DM_JSON_TRUE;
    case JSON_FALSE:
        return d->type == DM_JSON_FALSE;
    case JSON_NULL:
        return d->type == DM_JSON_NULL;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *root = fuzz_json(data, size);
    struct dm_arena a;
    dm_arena_init(&a);
    const struct dm_json *d;
    struct dm_json_error je;
    enum dnnmem_status s = dm_json_parse(&a, data, size, &d, &je);
    bool nul = memchr(data, 0, size) != NULL;
    if ((s == DNNMEM_OK) != (root != NULL) && !(s != DNNMEM_OK && (je.limit || nul)))
        abort(); /* one reader took what the other refused */
    if (s == DNNMEM_OK && !same(root, d))
        abort(); /* both took it, as different values */
    struct dm_graph g;
    struct dnnmem_error err;
    dm_graph_init(&g);
    if (s == DNNMEM_OK)
        (void)dm_load_capture(&g, d, &err);
    dm_graph_free(&g);
    dm_arena_free(&a);
    json_decref(root);
    fuzz_estimate(data, size, "step.dnnmem");
    return 0;
}
