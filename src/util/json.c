/*
 * json.c: a small JSON reader for the capture format (docs/capture-format.md),
 * where jansson's DOM was the cost of an estimate (docs/speed.md: a 70B
 * capture's 6.3 MB took ~95% of its time in jansson's and malloc's code).
 *
 * One pass over the text into an arena: each value is one struct dm_json; a
 * container's members are one array, collected on a scratch stack while the
 * container is read and copied to the arena when it closes, so nothing is
 * allocated per value. It accepts what jansson accepts with JSON_REJECT_DUPLICATES
 * (RFC 8259: an object or array at the top, UTF-8 checked, no "\u0000", no
 * duplicate keys, integers without fraction or exponent kept as int64 and
 * refused beyond it, reals that overflow refused) and refuses, as a limit, a
 * nesting deeper than DM_JSON_MAX_DEPTH or a text over UINT32_MAX bytes;
 * fuzz/fuzz-capture.c compares the two readers on each input. Every error is
 * its message and byte offset (struct dm_json_error), for the caller to name
 * the file.
 */
#include "dnnmem-impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct reader {
    const uint8_t *p, *end, *start;
    struct dm_arena *arena;
    struct dm_json *stack; /* the open containers' members so far */
    size_t n_stack, cap_stack;
    struct dm_json_error *err;
};

static bool fail(struct reader *r, const uint8_t *at, const char *msg, bool limit)
{
    r->err->msg = msg;
    r->err->offset = (size_t)(at - r->start);
    r->err->limit = limit;
    return false;
}

static void skip_ws(struct reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

/* The length of the UTF-8 sequence at p (1-4), or 0 where it is not valid:
 * overlong forms, surrogates and code points past U+10FFFF are refused. */
static size_t utf8_len(const uint8_t *p, const uint8_t *end)
{
    uint8_t c = p[0];
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || (size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F) || (c == 0xF0 && p[1] < 0x90) ||
        (c == 0xF4 && p[1] > 0x8F))
        return 0;
    return n;
}

static int hex4(const uint8_t *p, const uint8_t *end)
{
    if (end - p < 4)
        return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at r->p (its opening quote) into the arena, NUL-terminated: its
 * decoded text never exceeds its encoded length, so one allocation holds it. */
static bool string(struct reader *r, const char **out, uint32_t *len)
{
    const uint8_t *q = ++r->p;
    bool plain = true;
    while (q < r->end && *q != '"') {
        if (*q == '\\') {
            plain = false;
            q++;
        } else if (*q < 0x20)
            return fail(r, q, "control character in a string", false);
        if (q < r->end)
            q++;
    }
    if (q >= r->end)
        return fail(r, r->p - 1, "unterminated string", false);
    char *o = dm_arena_alloc(r->arena, (size_t)(q - r->p) + 1);
    if (!o)
        return fail(r, r->p, "out of memory", true);
    size_t n = 0;
    if (plain) { /* no escapes: copied once its UTF-8 is checked */
        for (const uint8_t *s = r->p; s < q;) {
            size_t k = utf8_len(s, q);
            if (!k)
                return fail(r, s, "invalid UTF-8 in a string", false);
            s += k;
        }
        n = (size_t)(q - r->p);
        memcpy(o, r->p, n);
    }
    for (const uint8_t *s = r->p; !plain && s < q;) {
        if (*s != '\\') {
            size_t k = utf8_len(s, q);
            if (!k)
                return fail(r, s, "invalid UTF-8 in a string", false);
            memcpy(o + n, s, k);
            n += k;
            s += k;
            continue;
        }
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *e = s[1] ? strchr(from, s[1]) : NULL;
        if (e) {
            o[n++] = to[e - from];
            s += 2;
            continue;
        }
        if (s[1] != 'u')
            return fail(r, s, "invalid escape in a string", false);
        int hi = hex4(s + 2, q);
        if (hi < 0)
            return fail(r, s, "invalid \\u escape", false);
        uint32_t cp = (uint32_t)hi;
        s += 6;
        if (hi >= 0xDC00 && hi <= 0xDFFF)
            return fail(r, s - 6, "a lone low surrogate in a \\u escape", false);
        if (hi >= 0xD800 && hi <= 0xDBFF) {
            int lo = q - s >= 6 && s[0] == '\\' && s[1] == 'u' ? hex4(s + 2, q) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return fail(r, s - 6, "a high surrogate without its low one in a \\u escape", false);
            cp = 0x10000 + (((uint32_t)hi - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            s += 6;
        }
        if (cp == 0)
            return fail(r, s - 6, "\\u0000 in a string", false);
        n += put_utf8(o + n, cp);
    }
    o[n] = '\0';
    *out = o;
    *len = (uint32_t)n;
    r->p = q + 1;
    return true;
}

/* A number: an int64 without fraction or exponent (as jansson's json_int_t),
 * else a double (strtod on a copy: the text is not NUL-terminated). */
static bool number(struct reader *r, struct dm_json *v)
{
    const uint8_t *s = r->p, *q = s;
    bool neg = q < r->end && *q == '-';
    q += neg;
    if (q >= r->end || *q < '0' || *q > '9')
        return fail(r, s, "invalid token", false);
    if (*q == '0' && q + 1 < r->end && q[1] >= '0' && q[1] <= '9')
        return fail(r, s, "invalid token (a leading zero)", false);
    uint64_t mag = 0;
    bool big = false;
    for (; q < r->end && *q >= '0' && *q <= '9'; q++) {
        big = big || mag > (UINT64_MAX - 9) / 10;
        mag = mag * 10 + (uint64_t)(*q - '0');
    }
    bool real = false;
    if (q < r->end && *q == '.') {
        real = true;
        if (++q >= r->end || *q < '0' || *q > '9')
            return fail(r, s, "invalid token (no digit after the point)", false);
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < r->end && (*q == 'e' || *q == 'E')) {
        real = true;
        q++;
        if (q < r->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= r->end || *q < '0' || *q > '9')
            return fail(r, s, "invalid token (no digit in the exponent)", false);
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
    }
    r->p = q;
    if (!real) {
        if (big || mag > (uint64_t)INT64_MAX + neg)
            return fail(r, s, neg ? "too big negative integer" : "too big integer", false);
        v->type = DM_JSON_INT;
        v->u.i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        return true;
    }
    size_t n = (size_t)(q - s);
    char small[64], *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf)
        return fail(r, s, "out of memory", true);
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    double d = strtod(buf, NULL);
    bool over = errno == ERANGE && isinf(d);
    if (buf != small)
        free(buf);
    if (over)
        return fail(r, s, "real number overflow", false);
    v->type = DM_JSON_REAL;
    v->u.r = d;
    return true;
}

static bool literal(struct reader *r, const char *word, enum dm_json_type t, struct dm_json *v)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return fail(r, r->p, "invalid token", false);
    r->p += n;
    v->type = (uint8_t)t;
    return true;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(((const struct dm_json *)a)->key, ((const struct dm_json *)b)->key);
}

/* Whether an object's members (n of them at m) have a key twice: pairwise
 * for a few, else sorted copies compared neighbour to neighbour. */
static bool duplicate_key(struct reader *r, const struct dm_json *m, size_t n, bool *dup)
{
    *dup = false;
    if (n <= 16) {
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                *dup = *dup || (m[i].key[0] == m[j].key[0] && strcmp(m[i].key, m[j].key) == 0);
        return true;
    }
    struct dm_json *s = malloc(n * sizeof *s); /* n <= the input's size: no overflow */
    if (!s)
        return fail(r, r->p, "out of memory", true);
    memcpy(s, m, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_key);
    for (size_t i = 1; i < n && !*dup; i++)
        *dup = strcmp(s[i - 1].key, s[i].key) == 0;
    free(s);
    return true;
}

static bool value(struct reader *r, struct dm_json *v, int depth);

/* An array or object at r->p: its members read onto the stack, then copied
 * into the arena as one array. */
static bool container(struct reader *r, struct dm_json *v, int depth)
{
    bool obj = *r->p == '{';
    const uint8_t *open = r->p;
    if (depth >= DM_JSON_MAX_DEPTH)
        return fail(r, open, "nested deeper than the reader's limit", true);
    char close = obj ? '}' : ']';
    size_t base = r->n_stack;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == close)
        r->p++;
    else
        for (;;) {
            const char *key = NULL;
            uint32_t klen;
            skip_ws(r);
            if (obj) {
                if (r->p >= r->end || *r->p != '"')
                    return fail(r, r->p, "string or '}' expected", false);
                if (!string(r, &key, &klen))
                    return false;
                skip_ws(r);
                if (r->p >= r->end || *r->p != ':')
                    return fail(r, r->p, "':' expected", false);
                r->p++;
            }
            struct dm_json m = {.key = key};
            if (!value(r, &m, depth + 1))
                return false;
            if (r->n_stack == r->cap_stack &&
                !dm_grow((void **)&r->stack, sizeof *r->stack, r->n_stack, &r->cap_stack))
                return fail(r, r->p, "out of memory", true);
            r->stack[r->n_stack++] = m;
            skip_ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                continue;
            }
            if (r->p < r->end && *r->p == close) {
                r->p++;
                break;
            }
            return fail(r, r->p, obj ? "',' or '}' expected" : "',' or ']' expected", false);
        }
    size_t n = r->n_stack - base;
    bool dup = false;
    if (obj && n && !duplicate_key(r, r->stack + base, n, &dup)) /* (an empty stack: NULL) */
        return false;
    if (dup)
        return fail(r, open, "duplicate object key", false);
    struct dm_json *items = n ? dm_arena_array(r->arena, n, sizeof *items) : NULL;
    if (n && !items)
        return fail(r, open, "out of memory", true);
    if (n)
        memcpy(items, r->stack + base, n * sizeof *items);
    r->n_stack = base;
    v->type = (uint8_t)(obj ? DM_JSON_OBJECT : DM_JSON_ARRAY);
    v->n = (uint32_t)n; /* n < the input's size <= UINT32_MAX */
    v->u.items = items;
    return true;
}

static bool value(struct reader *r, struct dm_json *v, int depth)
{
    skip_ws(r);
    if (r->p >= r->end)
        return fail(r, r->p, "unexpected end of input", false);
    switch (*r->p) {
    case '{':
    case '[':
        return container(r, v, depth);
    case '"':
        v->type = DM_JSON_STRING;
        return string(r, &v->u.s, &v->n);
    case 't':
        return literal(r, "true", DM_JSON_TRUE, v);
    case 'f':
        return literal(r, "false", DM_JSON_FALSE, v);
    case 'n':
        return literal(r, "null", DM_JSON_NULL, v);
    default:
        return number(r, v);
    }
}

enum dnnmem_status dm_json_parse(struct dm_arena *arena, const uint8_t *data, size_t size,
                                 const struct dm_json **root, struct dm_json_error *err)
{
    struct reader r = {.p = data, .end = data + size, .start = data, .arena = arena, .err = err};
    *root = NULL;
    err->msg = NULL;
    err->offset = 0;
    err->limit = false;
    if (size > UINT32_MAX) {
        fail(&r, data, "a text over 4 GiB", true);
        return DNNMEM_E_LIMIT;
    }
    struct dm_json *v = dm_arena_alloc(arena, sizeof *v);
    if (!v) {
        fail(&r, data, "out of memory", true);
        return DNNMEM_E_NOMEM;
    }
    skip_ws(&r);
    bool ok = r.p < r.end && (*r.p == '{' || *r.p == '[')
                  ? container(&r, v, 0)
                  : fail(&r, r.p, "'[' or '{' expected", false);
    if (ok) {
        skip_ws(&r);
        if (r.p != r.end)
            ok = fail(&r, r.p, "end of file expected", false);
    }
    free(r.stack);
    if (!ok)
        return err->limit ? (strcmp(err->msg, "out of memory") == 0 ? DNNMEM_E_NOMEM : DNNMEM_E_LIMIT)
                          : DNNMEM_E_PARSE;
    *root = v;
    return DNNMEM_OK;
}

const struct dm_json *dm_json_get(const struct dm_json *o, const char *key)
{
    if (!o || o->type != DM_JSON_OBJECT)
        return NULL;
    for (uint32_t i = 0; i < o->n; i++)
        if (o->u.items[i].key[0] == key[0] && strcmp(o->u.items[i].key, key) == 0)
            return &o->u.items[i];
    return NULL;
}

const struct dm_json *dm_json_at(const struct dm_json *a, size_t i)
{
    return a && a->type == DM_JSON_ARRAY && i < a->n ? &a->u.items[i] : NULL;
}
