/*
 * onnx.c: the ONNX front end.
 *
 * The schema is the onnx.proto that Debian's libonnx-dev ships; protoc-c turns
 * it into onnx.pb-c.{c,h} at build time, and that generated parser reads the
 * model. Weight bytes are never copied: protobuf-c's unpack would copy every
 * bytes and repeated field, so the file (mmap'd by the caller) first goes
 * through strip(), which walks the wire format guided by the generated
 * descriptors and re-encodes the message without the data fields of large
 * TensorProtos. In their place it writes an unknown field per dropped field,
 * recording how many bytes or elements it held, so sizes can still be checked
 * against dims. Only the small stripped copy is unpacked; pages holding weight
 * bytes are never touched.
 */
#include "dnnmem-impl.h"
#include "onnx.pb-c.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Tensors whose data fields hold more than this are stripped; smaller ones are
 * kept so their values can feed constant folding (shape vectors, axes). */
#define STRIP_MIN_BYTES ((size_t)DM_VALUE_MAX_ELEMS * 8)
/* Unknown-field numbers used for the "stripped" records: base + field number.
 * Field numbers up to 2^29-1 are legal; ONNX uses small ones. */
#define STRIPPED_FIELD_BASE 536870000u
#define MAX_NESTING 64

/* ---- a growable output buffer ------------------------------------------- */

struct obuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
};

static bool ob_reserve(struct obuf *o, size_t extra)
{
    if (o->oom)
        return false;
    if (o->cap - o->n >= extra)
        return true;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap - o->n < extra) {
        if (cap > SIZE_MAX / 2) {
            o->oom = true;
            return false;
        }
        cap *= 2;
    }
    uint8_t *p = realloc(o->p, cap);
    if (!p) {
        o->oom = true;
        return false;
    }
    o->p = p;
    o->cap = cap;
    return true;
}

static void ob_put(struct obuf *o, const void *src, size_t len)
{
    if (ob_reserve(o, len)) {
        memcpy(o->p + o->n, src, len);
        o->n += len;
    }
}

static size_t varint_encode(uint64_t v, uint8_t out[10])
{
    size_t k = 0;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        out[k++] = b | (v ? 0x80 : 0);
    } while (v);
    return k;
}

static void ob_varint(struct obuf *o, uint64_t v)
{
    uint8_t b[10];
    ob_put(o, b, varint_encode(v, b));
}

/* ---- wire-format reading, bounds-checked -------------------------------- */

struct wire {
    const uint8_t *p, *end;
};

static bool read_varint(struct wire *w, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (w->p >= w->end)
            return false;
        uint8_t b = *w->p++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* One field: its number, wire type, and the span of its payload (for
 * length-delimited fields, without the length prefix). */
struct field {
    uint32_t number;
    unsigned wire_type;
    const uint8_t *start;              /* first byte of the tag */
    const uint8_t *payload, *end;      /* payload span; end = next field */
};

static bool next_field(struct wire *w, struct field *f)
{
    f->start = w->p;
    uint64_t tag, len;
    if (!read_varint(w, &tag))
        return false;
    f->number = (uint32_t)(tag >> 3);
    f->wire_type = (unsigned)(tag & 7);
    if (f->number == 0 || (tag >> 3) > 0x1fffffff)
        return false;
    f->payload = w->p;
    switch (f->wire_type) {
    case 0:
        if (!read_varint(w, &len))
            return false;
        break;
    case 1:
        if (w->end - w->p < 8)
            return false;
        w->p += 8;
        break;
    case 5:
        if (w->end - w->p < 4)
            return false;
        w->p += 4;
        break;
    case 2:
        if (!read_varint(w, &len) || len > (uint64_t)(w->end - w->p))
            return false;
        f->payload = w->p;
        w->p += len;
        break;
    default: /* groups (3, 4) are not used by ONNX; 6, 7 are invalid */
        return false;
    }
    f->end = w->p;
    return true;
}

/* ---- strip --------------------------------------------------------------- */

struct stripper {
    struct obuf out;
    const char *path;
    const uint8_t *base;
    struct dnnmem_error *err;
    enum dnnmem_status status;
};

static bool is_tensor_data_field(const ProtobufCFieldDescriptor *fd)
{
    static const char *const names[] = {"raw_data",   "float_data",  "int32_data", "string_data",
                                        "int64_data", "double_data", "uint64_data"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(fd->name, names[i]) == 0)
            return true;
    return false;
}

/* Element count of a dropped data field: bytes for raw_data and string data,
 * elements for the typed (packed or not) numeric fields. */
static uint64_t dropped_count(const ProtobufCFieldDescriptor *fd, const struct field *f)
{
    size_t len = (size_t)(f->end - f->payload);
    if (f->wire_type != 2) /* one unpacked element */
        return 1;
    switch (fd->type) {
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_STRING:
        return strcmp(fd->name, "raw_data") == 0 ? len : 1;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return len / 4;
    case PROTOBUF_C_TYPE_DOUBLE:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return len / 8;
    default: { /* packed varints: count the terminating bytes */
        uint64_t c = 0;
        for (const uint8_t *p = f->payload; p < f->end; p++)
            c += !(*p & 0x80);
        return c;
    }
    }
}

static bool strip_message(struct stripper *s, const ProtobufCMessageDescriptor *desc,
                          const uint8_t *p, const uint8_t *end, int depth);

static bool strip_fail(struct stripper *s, const uint8_t *at, const char *what)
{
    if (s->status == DNNMEM_OK)
        s->status = dm_fail(s->err, DNNMEM_E_PARSE,
                            "%s: not a valid ONNX model: %s at byte %zu", s->path, what,
                            (size_t)(at - s->base));
    return false;
}

/* Whether a field of this type may come with this wire type: the scalar's
 * own, or length-delimited for a packed repeated one (protobuf's encoding
 * rules). Anything else protobuf-c refuses too, but only after scanning the
 * whole message; refusing it here costs no memory. */
static bool wire_type_fits(const ProtobufCFieldDescriptor *fd, unsigned wire_type)
{
    bool packable = fd->label == PROTOBUF_C_LABEL_REPEATED;
    switch (fd->type) {
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_MESSAGE: return wire_type == 2;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32: return wire_type == 5 || (packable && wire_type == 2);
    case PROTOBUF_C_TYPE_DOUBLE:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64: return wire_type == 1 || (packable && wire_type == 2);
    default: return wire_type == 0 || (packable && wire_type == 2); /* varints */
    }
}

static bool strip_message(struct stripper *s, const ProtobufCMessageDescriptor *desc,
                          const uint8_t *p, const uint8_t *end, int depth)
{
    if (depth > MAX_NESTING)
        return strip_fail(s, p, "messages nested too deeply");
    bool is_tensor = desc == &onnx__tensor_proto__descriptor;
    bool drop_data = false;
    struct wire w = {p, end};
    struct field f;
    if (is_tensor) { /* first pass: how much data does this tensor carry? */
        size_t data = 0;
        while (w.p < w.end) {
            if (!next_field(&w, &f))
                return strip_fail(s, w.p, "truncated or corrupt field");
            const ProtobufCFieldDescriptor *fd =
                protobuf_c_message_descriptor_get_field(desc, f.number);
            if (fd && is_tensor_data_field(fd))
                data += (size_t)(f.end - f.payload);
        }
        drop_data = data > STRIP_MIN_BYTES;
        w.p = p;
    }
    uint64_t dropped[16] = {0}; /* by field number; TensorProto's are all < 16 */
    while (w.p < w.end) {
        if (!next_field(&w, &f))
            return strip_fail(s, w.p, "truncated or corrupt field");
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(desc, f.number);
        if (!fd)
            continue; /* a field onnx.proto does not define: never read, so not kept
                         (protobuf-c would keep a copy of each) */
        if (!wire_type_fits(fd, f.wire_type))
            return strip_fail(s, f.start, "a field's encoding does not match its type");
        if (drop_data && is_tensor_data_field(fd) && f.number < 16) {
            dropped[f.number] += dropped_count(fd, &f);
            continue;
        }
        if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
            /* re-encode the submessage: tag, 5 reserved length bytes, body,
             * then move the body back over the unused length bytes */
            ob_put(&s->out, f.start, (size_t)(f.payload - f.start));
            /* the tag is followed by the original length varint: rewind it */
            size_t tag_len = 0;
            {
                uint8_t tb[10];
                tag_len = varint_encode(((uint64_t)f.number << 3) | 2u, tb);
            }
            if (s->out.oom)
                return false;
            s->out.n -= (size_t)(f.payload - f.start) - tag_len; /* keep only the tag */
            size_t len_at = s->out.n;
            if (!ob_reserve(&s->out, 5))
                return false;
            s->out.n += 5;
            size_t body_at = s->out.n;
            if (!strip_message(s, fd->descriptor, f.payload, f.end, depth + 1))
                return false;
            size_t body = s->out.n - body_at;
            if (body > 0xffffffffu)
                return strip_fail(s, f.payload, "message too large");
            uint8_t lb[10];
            size_t k = varint_encode(body, lb);
            memcpy(s->out.p + len_at, lb, k);
            memmove(s->out.p + len_at + k, s->out.p + body_at, body);
            s->out.n = len_at + k + body;
            continue;
        }
        ob_put(&s->out, f.start, (size_t)(f.end - f.start));
    }
    for (uint32_t i = 0; i < 16; i++)
        if (dropped[i]) {
            ob_varint(&s->out, ((uint64_t)(STRIPPED_FIELD_BASE + i) << 3) | 0u);
            ob_varint(&s->out, dropped[i]);
        }
    return !s->out.oom;
}

/* ---- a counting allocator for protobuf-c -------------------------------- */

/* What protobuf-c may allocate to unpack a graph: real graphs take at most
 * ~10x their (weight-stripped) bytes (measured over tests/models and
 * ../shared/models: 1.1x to 9.7x, the most for the smallest files), while a
 * message with a field repeated beyond any real model's takes ~18x or more
 * (issue 17: a 20 MB file, 373 MB). So 16x the bytes plus 16 MiB, and never
 * more than 1 GiB. */
#define PARSE_RATIO 16
#define PARSE_SLACK ((size_t)16 << 20)
#define PARSE_CEILING ((size_t)1 << 30)

struct counting {
    size_t bytes;
    size_t limit; /* refuse an allocation that would take `bytes` beyond it */
    bool over;    /* one was refused */
};

static void *count_alloc(void *ud, size_t size)
{
    struct counting *c = ud;
    if (size > c->limit - c->bytes) {
        c->over = true;
        return NULL;
    }
    size_t *p = malloc(size + sizeof(max_align_t));
    if (!p)
        return NULL;
    *p = size;
    c->bytes += size;
    return (unsigned char *)p + sizeof(max_align_t);
}

static void count_free(void *ud, void *ptr)
{
    (void)ud;
    if (ptr)
        free((unsigned char *)ptr - sizeof(max_align_t));
}

/* ---- what unpacking will allocate, before it does -------------------------- */

/* The bytes protobuf-c 1.4's protobuf_c_message_unpack allocates for a
 * stripped message, as count_alloc counts them (each allocation's size,
 * summed), found by walking the message as it will (protobuf-c.c, v1.4.1:
 * protobuf_c_message_unpack, parse_member, parse_required_member,
 * sizeof_elt_in_repeated_array): the message's struct; past the 16 fields
 * it scans on the stack, slabs of 32, 64, ... ScannedMembers (32 bytes each
 * on LP64, its BOUND_SIZEOF_SCANNED_MEMBER_LOG2 of 5); one array per
 * repeated field (4 or 8 bytes an element, a pointer for strings and
 * messages, a ProtobufCBinaryData for bytes); the unknown fields (the
 * stripper's counts) and their bytes; each string (its length + 1) and
 * bytes value; each submessage, alike. What it leaves out (a message field
 * given twice, merged) only makes it smaller than the allocations, so a
 * prediction beyond the cap is an allocation beyond it: refused before any
 * is made (issue 17; the allocator's count stays the bound). */
#define SCANNED_MEMBER_BYTES 32
#define FIRST_SLAB 16
#define MAX_PREDICT_FIELDS 64 /* onnx.proto's messages have at most 24 */

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static size_t repeated_elt_bytes(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: return 8;
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    default: return 4;
    }
}

/* Elements of one occurrence of a repeated field: a packed run's, or 1. */
static uint64_t occurrence_elements(const ProtobufCFieldDescriptor *fd, const struct field *f)
{
    bool packable = fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_BYTES &&
                    fd->type != PROTOBUF_C_TYPE_MESSAGE;
    if (f->wire_type != 2 || !packable)
        return 1;
    size_t len = (size_t)(f->end - f->payload);
    size_t k = repeated_elt_bytes(fd->type);
    if (fd->type == PROTOBUF_C_TYPE_FLOAT || fd->type == PROTOBUF_C_TYPE_FIXED32 ||
        fd->type == PROTOBUF_C_TYPE_SFIXED32 || fd->type == PROTOBUF_C_TYPE_DOUBLE ||
        fd->type == PROTOBUF_C_TYPE_FIXED64 || fd->type == PROTOBUF_C_TYPE_SFIXED64)
        return len / k;
    uint64_t c = 0; /* varints: their last bytes */
    for (const uint8_t *p = f->payload; p < f->end; p++)
        c += !(*p & 0x80);
    return c;
}

/* The slabs protobuf-c allocates to scan n fields of one message. */
static uint64_t slab_bytes(uint64_t n)
{
    uint64_t bytes = 0;
    for (uint64_t have = FIRST_SLAB, slab = FIRST_SLAB; have < n; have += slab) {
        slab *= 2;
        bytes = sat_add(bytes, slab * SCANNED_MEMBER_BYTES);
    }
    return bytes;
}

/* The prediction for the (stripped, so well-formed) message p..end. */
static uint64_t predict_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                               const uint8_t *end)
{
    if (desc->n_fields > MAX_PREDICT_FIELDS)
        return 0; /* not onnx.proto's: the allocator's count alone bounds it */
    uint64_t bytes = desc->sizeof_message, n_fields = 0, n_unknown = 0;
    uint64_t count[MAX_PREDICT_FIELDS] = {0};
    struct wire w = {p, end};
    struct field f;
    while (w.p < w.end && next_field(&w, &f)) {
        n_fields++;
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(desc, f.number);
        if (!fd) { /* the stripper's counts */
            n_unknown++;
            bytes = sat_add(bytes, (uint64_t)(f.end - f.payload));
            continue;
        }
        size_t idx = (size_t)(fd - desc->fields);
        uint64_t len = (uint64_t)(f.end - f.payload);
        if (fd->label == PROTOBUF_C_LABEL_REPEATED)
            count[idx] = sat_add(count[idx], occurrence_elements(fd, &f));
        if (fd->type == PROTOBUF_C_TYPE_STRING)
            bytes = sat_add(bytes, len + 1);
        else if (fd->type == PROTOBUF_C_TYPE_BYTES)
            bytes = sat_add(bytes, len);
        else if (fd->type == PROTOBUF_C_TYPE_MESSAGE)
            bytes = sat_add(bytes, predict_unpack(fd->descriptor, f.payload, f.end));
    }
    bytes = sat_add(bytes, slab_bytes(n_fields));
    for (unsigned i = 0; i < desc->n_fields; i++)
        if (count[i] > UINT64_MAX / 16)
            bytes = UINT64_MAX;
        else
            bytes = sat_add(bytes, count[i] * repeated_elt_bytes(desc->fields[i].type));
    return sat_add(bytes, n_unknown * sizeof(ProtobufCMessageUnknownField));
}

/* ---- conversion to the IR ------------------------------------------------ */

struct conv {
    struct dm_graph *g;
    struct dnnmem_error *err;
    const char *path;
};

static uint64_t stripped_count(const ProtobufCMessage *m, uint32_t field)
{
    for (unsigned i = 0; i < m->n_unknown_fields; i++) {
        const ProtobufCMessageUnknownField *u = &m->unknown_fields[i];
        if (u->tag == STRIPPED_FIELD_BASE + field && u->wire_type == PROTOBUF_C_WIRE_TYPE_VARINT) {
            struct wire w = {u->data, u->data + u->len};
            uint64_t v;
            if (read_varint(&w, &v))
                return v;
        }
    }
    return 0;
}

static double half_to_double(uint32_t h)
{
    int e = (int)((h >> 10) & 0x1f);
    double m = (double)(h & 0x3ff);
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double bf16_to_double(uint32_t b)
{
    uint32_t u = b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Little-endian element i of raw data. */
static uint64_t le_load(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int k = bytes - 1; k >= 0; k--)
        v = (v << 8) | p[k];
    return v;
}

static double raw_to_double(enum dm_dtype t, uint64_t bits)
{
    switch (t) {
    case DM_FLOAT: {
        uint32_t u = (uint32_t)bits;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    case DM_DOUBLE: {
        double d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    case DM_FLOAT16: return half_to_double((uint32_t)bits);
    case DM_BFLOAT16: return bf16_to_double((uint32_t)bits);
    default: return 0;
    }
}

static int64_t raw_to_int(enum dm_dtype t, uint64_t bits)
{
    switch (t) {
    case DM_INT8: return (int8_t)bits;
    case DM_INT16: return (int16_t)bits;
    case DM_INT32: return (int32_t)bits;
    case DM_INT64: return (int64_t)bits;
    case DM_BOOL: return bits != 0;
    default: return (int64_t)bits; /* unsigned types */
    }
}

/* Fill t (dtype, rank, dims, value) from a TensorProto. `what` names it. */
static enum dnnmem_status convert_tensor(struct conv *c, const Onnx__TensorProto *tp,
                                         struct dm_tensor *t, const char *what)
{
    struct dm_graph *g = c->g;
    if (!dm_dtype_valid(tp->data_type))
        return dm_fail(c->err, DNNMEM_E_MODEL, "%s: %s has unknown data type %d", c->path, what,
                       (int)tp->data_type);
    t->dtype = (enum dm_dtype)tp->data_type;
    if (tp->n_dims > DM_MAX_DIMS)
        return dm_fail(c->err, DNNMEM_E_UNSUPPORTED, "%s: %s has rank %zu; at most %d is supported",
                       c->path, what, tp->n_dims, DM_MAX_DIMS);
    t->rank = (int)tp->n_dims;
    t->dims = dm_arena_array(&g->arena, tp->n_dims + 1, sizeof *t->dims);
    if (!t->dims)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    int64_t numel = 1;
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] < 0)
            return dm_fail(c->err, DNNMEM_E_SHAPE, "%s: %s has negative dim %lld", c->path, what,
                           (long long)tp->dims[i]);
        t->dims[i].value = tp->dims[i];
        t->dims[i].sym = -1;
        if (!dm_mul_ok(numel, tp->dims[i], &numel))
            return dm_fail(c->err, DNNMEM_E_SHAPE, "%s: %s: element count overflows int64",
                           c->path, what);
    }
    uint64_t bytes;
    if (!dm_dtype_bytes(t->dtype, numel, &bytes) || bytes > DM_MAX_TENSOR_BYTES)
        return dm_fail(c->err, DNNMEM_E_SHAPE, "%s: %s: %lld elements is an absurd size", c->path,
                       what, (long long)numel);

    /* The data must agree with the dims: check what is present, stripped or not. */
    int bits = dm_dtype_bits(t->dtype);
    const ProtobufCMessage *m = &tp->base;
    bool has_raw = tp->has_raw_data || stripped_count(m, 9);
    uint64_t raw = tp->has_raw_data ? tp->raw_data.len : stripped_count(m, 9);
    uint64_t typed = tp->n_float_data + tp->n_int32_data + tp->n_int64_data + tp->n_double_data +
                     tp->n_uint64_data + tp->n_string_data + stripped_count(m, 4) +
                     stripped_count(m, 5) + stripped_count(m, 6) + stripped_count(m, 7) +
                     stripped_count(m, 10) + stripped_count(m, 11);
    bool external = tp->has_data_location &&
                    tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if (!external && has_raw && bits && raw != bytes)
        return dm_fail(c->err, DNNMEM_E_MODEL,
                       "%s: %s: raw_data holds %llu bytes but dims and type say %llu", c->path,
                       what, (unsigned long long)raw, (unsigned long long)bytes);
    uint64_t want_typed = (uint64_t)numel;
    if (t->dtype == DM_COMPLEX64 || t->dtype == DM_COMPLEX128)
        want_typed *= 2;
    if (t->dtype == DM_INT4 || t->dtype == DM_UINT4)
        want_typed = ((uint64_t)numel + 1) / 2;
    if (!external && !has_raw && typed && typed != want_typed)
        return dm_fail(c->err, DNNMEM_E_MODEL,
                       "%s: %s holds %llu values but dims say %llu", c->path, what,
                       (unsigned long long)typed, (unsigned long long)want_typed);

    /* Typed data must sit in the field onnx.proto assigns to the type. */
    static const uint32_t field_of[DM_DTYPE_COUNT] = {
        [DM_FLOAT] = 4, [DM_COMPLEX64] = 4, [DM_INT32] = 5, [DM_INT16] = 5, [DM_INT8] = 5,
        [DM_UINT16] = 5, [DM_UINT8] = 5, [DM_BOOL] = 5, [DM_FLOAT16] = 5, [DM_BFLOAT16] = 5,
        [DM_FLOAT8E4M3FN] = 5, [DM_FLOAT8E4M3FNUZ] = 5, [DM_FLOAT8E5M2] = 5,
        [DM_FLOAT8E5M2FNUZ] = 5, [DM_UINT4] = 5, [DM_INT4] = 5, [DM_STRING] = 6, [DM_INT64] = 7,
        [DM_DOUBLE] = 10, [DM_COMPLEX128] = 10, [DM_UINT32] = 11, [DM_UINT64] = 11};
    static const uint32_t typed_fields[] = {4, 5, 6, 7, 10, 11};
    const size_t typed_n[] = {tp->n_float_data, tp->n_int32_data, tp->n_string_data,
                              tp->n_int64_data, tp->n_double_data, tp->n_uint64_data};
    for (size_t k = 0; k < sizeof typed_fields / sizeof *typed_fields; k++)
        if ((typed_n[k] || stripped_count(m, typed_fields[k])) && typed_fields[k] != field_of[t->dtype])
            return dm_fail(c->err, DNNMEM_E_MODEL,
                           "%s: %s: %s data is stored in the wrong TensorProto field", c->path,
                           what, dm_dtype_name(t->dtype));
    if (has_raw && typed)
        return dm_fail(c->err, DNNMEM_E_MODEL, "%s: %s has both raw_data and typed data", c->path,
                       what);

    /* Small numeric tensors keep their values for constant folding. */
    bool numeric = t->dtype != DM_STRING && t->dtype != DM_COMPLEX64 &&
                   t->dtype != DM_COMPLEX128 && bits >= 8;
    if (!numeric || external || numel > DM_VALUE_MAX_ELEMS || (!has_raw && !typed && numel > 0))
        return DNNMEM_OK;
    if ((has_raw && !tp->has_raw_data) || (typed && !tp->n_float_data && !tp->n_int32_data &&
                                       !tp->n_int64_data && !tp->n_double_data &&
                                       !tp->n_uint64_data))
        return DNNMEM_OK; /* stripped: no values */
    struct dm_value *v = dm_arena_alloc(&g->arena, sizeof *v);
    if (!v)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    v->n = numel;
    v->is_float = dm_dtype_is_float(t->dtype);
    if (v->is_float)
        v->f = dm_arena_array(&g->arena, (size_t)numel + 1, sizeof *v->f);
    else
        v->i = dm_arena_array(&g->arena, (size_t)numel + 1, sizeof *v->i);
    if (!v->f && !v->i)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    /* every source is read as the raw bit pattern of the element type; the
     * field checks above guarantee the source matches the type */
    for (int64_t k = 0; k < numel; k++) {
        uint64_t b = 0;
        if (tp->has_raw_data)
            b = le_load(tp->raw_data.data + (size_t)k * (size_t)(bits / 8), bits / 8);
        else if (tp->n_float_data) {
            uint32_t u;
            memcpy(&u, &tp->float_data[k], sizeof u);
            b = u;
        } else if (tp->n_double_data)
            memcpy(&b, &tp->double_data[k], sizeof b);
        else if (tp->n_int64_data)
            b = (uint64_t)tp->int64_data[k];
        else if (tp->n_uint64_data)
            b = tp->uint64_data[k];
        else if (tp->n_int32_data)
            b = (uint64_t)(int64_t)tp->int32_data[k];
        if (v->is_float)
            v->f[k] = raw_to_double(t->dtype, b);
        else
            v->i[k] = raw_to_int(t->dtype, b);
    }
    t->value = v;
    return DNNMEM_OK;
}

/* A declared type and shape: graph inputs (whose symbolic dims become the
 * graph's symbols), and outputs and value_info (checked against inference;
 * their symbols link to the inputs' or stay unknown). */
static enum dnnmem_status convert_value_info(struct conv *c, const Onnx__ValueInfoProto *vi,
                                             struct dm_tensor *t, bool is_input)
{
    struct dm_graph *g = c->g;
    const char *what = is_input ? "input" : "value";
    const Onnx__TypeProto *tp = vi->type;
    if (!tp)
        return DNNMEM_OK; /* no type: left to inference (outputs) or an error later (inputs) */
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        if (!is_input)
            return DNNMEM_OK; /* only ops that produce them could check it: all unsupported */
        return dm_fail(c->err, DNNMEM_E_UNSUPPORTED,
                       "%s: input '%s' is a sequence, map or optional value; only tensors are supported",
                       c->path, t->name);
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (tt->has_elem_type && tt->elem_type != 0) {
        if (!dm_dtype_valid(tt->elem_type))
            return dm_fail(c->err, DNNMEM_E_MODEL, "%s: %s '%s' has unknown data type %d",
                           c->path, what, t->name, (int)tt->elem_type);
        t->dtype = (enum dm_dtype)tt->elem_type;
    }
    if (!tt->shape)
        return DNNMEM_OK;
    if (tt->shape->n_dim > DM_MAX_DIMS)
        return dm_fail(c->err, DNNMEM_E_UNSUPPORTED,
                       "%s: %s '%s' has rank %zu; at most %d is supported", c->path, what, t->name,
                       tt->shape->n_dim, DM_MAX_DIMS);
    t->rank = (int)tt->shape->n_dim;
    t->dims = dm_arena_array(&g->arena, tt->shape->n_dim + 1, sizeof *t->dims);
    if (!t->dims)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        t->dims[i].sym = -1;
        t->dims[i].value = -1;
        bool named = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                     d->dim_param && d->dim_param[0];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                return dm_fail(c->err, DNNMEM_E_SHAPE, "%s: %s '%s' has negative dim %lld",
                               c->path, what, t->name, (long long)d->dim_value);
            t->dims[i].value = d->dim_value;
        } else if (is_input) {
            const char *name = named ? d->dim_param : dm_arena_printf(&g->arena, "%s:%zu", t->name, i);
            if (!name || (t->dims[i].sym = dm_graph_symbol(g, name)) < 0)
                return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
        } else if (named) {
            for (int32_t k = 0; k < g->n_symbols; k++)
                if (strcmp(g->symbols[k], d->dim_param) == 0)
                    t->dims[i].sym = k;
        }
    }
    return DNNMEM_OK;
}

static enum dnnmem_status convert_attr(struct conv *c, const struct dm_node *n,
                                       const Onnx__AttributeProto *ap, struct dm_attr *a)
{
    struct dm_graph *g = c->g;
    a->name = dm_arena_strdup(&g->arena, ap->name ? ap->name : "");
    int type = ap->has_type ? (int)ap->type : 0;
    if (type == 0) { /* IR version < 3 files leave the type out: infer it */
        type = ap->has_i ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT
             : ap->has_f ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT
             : ap->has_s ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING
             : ap->t     ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR
             : ap->g     ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH
             : ap->n_ints ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS
             : ap->n_floats ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS
             : ap->n_strings ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS
             : ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS; /* an empty list */
    }
    switch (type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        a->kind = DM_ATTR_INT;
        a->i = ap->i;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        a->kind = DM_ATTR_FLOAT;
        a->f = ap->f;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        a->kind = DM_ATTR_STRING;
        a->s = dm_arena_strndup(&g->arena, (const char *)ap->s.data, ap->s.len);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        a->kind = DM_ATTR_INTS;
        a->n = (int64_t)ap->n_ints;
        a->ints = dm_arena_array(&g->arena, ap->n_ints + 1, sizeof *a->ints);
        if (a->ints && ap->n_ints)
            memcpy(a->ints, ap->ints, ap->n_ints * sizeof *a->ints);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        a->kind = DM_ATTR_FLOATS;
        a->n = (int64_t)ap->n_floats;
        a->floats = dm_arena_array(&g->arena, ap->n_floats + 1, sizeof *a->floats);
        if (a->floats)
            for (size_t k = 0; k < ap->n_floats; k++)
                a->floats[k] = ap->floats[k];
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
        a->kind = DM_ATTR_STRINGS;
        a->n = (int64_t)ap->n_strings;
        a->strings = dm_arena_array(&g->arena, ap->n_strings + 1, sizeof *a->strings);
        if (a->strings)
            for (size_t k = 0; k < ap->n_strings; k++)
                a->strings[k] = dm_arena_strndup(&g->arena, (const char *)ap->strings[k].data,
                                                 ap->strings[k].len);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
        a->kind = DM_ATTR_TENSOR;
        if (!ap->t)
            return dm_fail(c->err, DNNMEM_E_MODEL, "%s: node '%s': attribute '%s' has no tensor",
                           c->path, n->name, a->name);
        a->t = dm_arena_alloc(&g->arena, sizeof *a->t);
        if (a->t) {
            a->t->name = a->name;
            a->t->producer = -1;
            char *what = dm_arena_printf(&g->arena, "node '%s' attribute '%s'", n->name, a->name);
            DM_TRY(convert_tensor(c, ap->t, a->t, what ? what : "attribute"));
        }
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
        a->kind = DM_ATTR_GRAPH;
        break;
    default:
        a->kind = DM_ATTR_OTHER;
        break;
    }
    if (!a->name)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    return DNNMEM_OK;
}

static enum dnnmem_status tensor_ref(struct conv *c, const char *name, int32_t *out)
{
    if (!name || !name[0]) {
        *out = -1;
        return DNNMEM_OK;
    }
    int32_t t = dm_graph_find(c->g, name);
    if (t < 0 && (t = dm_graph_add_tensor(c->g, name)) < 0)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    *out = t;
    return DNNMEM_OK;
}

/* ONNX model-local functions (ModelProto.functions, IR 8+) are inlined: a
 * node whose domain and op_type name one is replaced by the function's body,
 * its formal inputs and outputs bound to the call's, its other values named
 * "<call>::<value>" and its nodes "<call's scope>/<call's leaf>.<node>", so
 * that they keep the call's module scope (graph.c, dm_graph_find_scopes).
 * torch.onnx's TorchScript exporter writes them with
 * export_modules_as_functions (opset 15+; torch/onnx/utils.py,
 * _setup_trace_module_map): one function per module class, each call
 * carrying the module's annotated attributes (_get_module_attributes), so
 * nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU, nn.ELU, ... calls carry
 * `inplace`, which says whether F.relu ran relu_ or relu: the nodes of a
 * call with an integer attribute `inplace` get it as dm_node.inplace_fact
 * (docs/inplace.md; measured with torch 1.13 and 2.14.1). */
#define MAX_FN_DEPTH 16

struct fnset {
    Onnx__FunctionProto **f;
    size_t n;
};

/* The call being inlined (top: none, the graph's own nodes). */
struct call {
    const struct fnset *fs;
    const Onnx__FunctionProto *fn; /* NULL at the top */
    const Onnx__NodeProto *np;     /* the call node */
    const char *name;              /* its node name in the graph */
    const struct call *up;
    int depth;
    int8_t fact;                   /* DM_INPLACE_FACT_* of the call's `inplace` */
};

static bool same_domain(const char *a, const char *b)
{
    a = a && strcmp(a, "ai.onnx") != 0 ? a : "";
    b = b && strcmp(b, "ai.onnx") != 0 ? b : "";
    return strcmp(a, b) == 0;
}

static const Onnx__FunctionProto *find_fn(const struct fnset *fs, const Onnx__NodeProto *np)
{
    for (size_t i = 0; i < fs->n; i++)
        if (fs->f[i]->name && np->op_type && strcmp(fs->f[i]->name, np->op_type) == 0 &&
            same_domain(fs->f[i]->domain, np->domain))
            return fs->f[i];
    return NULL;
}

/* The nodes nodes[0..n) make once their calls are inlined, added to *total
 * (capped past INT32_MAX); false when calls nest beyond MAX_FN_DEPTH. */
static bool count_nodes(const struct fnset *fs, Onnx__NodeProto **nodes, size_t n, int depth,
                        uint64_t *total)
{
    for (size_t i = 0; i < n && *total <= INT32_MAX; i++) {
        const Onnx__FunctionProto *fn = find_fn(fs, nodes[i]);
        if (!fn)
            (*total)++;
        else if (depth >= MAX_FN_DEPTH || !count_nodes(fs, fn->node, fn->n_node, depth + 1, total))
            return false;
    }
    return true;
}

/* The graph tensor a call's body names `v`: a formal input or output is the
 * caller's actual one (outer calls resolved in turn), another value
 * "<call>::<v>"; "" (an omitted optional value) stays "". */
static const char *bind_name(struct conv *c, const struct call *k, const char *v)
{
    if (!v || !v[0] || !k->fn)
        return v ? v : "";
    for (size_t j = 0; j < k->fn->n_input; j++)
        if (k->fn->input[j] && strcmp(k->fn->input[j], v) == 0)
            return bind_name(c, k->up, j < k->np->n_input ? k->np->input[j] : "");
    for (size_t j = 0; j < k->fn->n_output; j++)
        if (k->fn->output[j] && strcmp(k->fn->output[j], v) == 0)
            return bind_name(c, k->up, j < k->np->n_output ? k->np->output[j] : "");
    return dm_arena_printf(&c->g->arena, "%s::%s", k->name, v);
}

/* A body node's name: "<call's scope>/<call's leaf>.<node>". */
static char *inlined_name(struct conv *c, const struct call *k, const char *node)
{
    const char *slash = strrchr(k->name, '/');
    if (!slash)
        return dm_arena_printf(&c->g->arena, "%s.%s", k->name, node);
    return dm_arena_printf(&c->g->arena, "%.*s/%s.%s", (int)(slash - k->name), k->name, slash + 1,
                           node);
}

/* The attribute a body node's `ref_attr_name` refers to in its call, or NULL. */
static const Onnx__AttributeProto *call_attr(const struct call *k, const char *name)
{
    for (size_t j = 0; k->np && name && j < k->np->n_attribute; j++)
        if (k->np->attribute[j]->name && strcmp(k->np->attribute[j]->name, name) == 0)
            return k->np->attribute[j];
    return NULL;
}

static enum dnnmem_status convert_node(struct conv *c, const struct call *k,
                                       const Onnx__NodeProto *np, size_t i)
{
    struct dm_graph *g = c->g;
    const char *op_type = np->op_type ? np->op_type : "";
    const char *own = np->name && np->name[0]
                          ? np->name
                          : dm_arena_printf(&g->arena, "%s_%zu", op_type[0] ? op_type : "node", i);
    /* the protobuf's strings are freed after the conversion: copied */
    const char *name = !own ? NULL : k->fn ? inlined_name(c, k, own) : dm_arena_strdup(&g->arena, own);
    if (!name)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    const Onnx__FunctionProto *fn = find_fn(k->fs, np);
    if (fn) { /* count_nodes bounded the depth */
        const Onnx__AttributeProto *ip = NULL;
        for (size_t j = 0; j < np->n_attribute; j++)
            if (np->attribute[j]->name && strcmp(np->attribute[j]->name, "inplace") == 0 &&
                np->attribute[j]->has_i)
                ip = np->attribute[j];
        struct call inner = {.fs = k->fs, .fn = fn, .np = np, .name = name, .up = k,
                             .depth = k->depth + 1,
                             .fact = ip ? (ip->i ? DM_INPLACE_FACT_YES : DM_INPLACE_FACT_NO)
                                        : DM_INPLACE_FACT_UNKNOWN};
        for (size_t j = 0; j < fn->n_node; j++)
            DM_TRY(convert_node(c, &inner, fn->node[j], j));
        return DNNMEM_OK;
    }
    struct dm_node *n = &g->nodes[g->n_nodes];
    n->name = name;
    n->inplace_fact = k->fact;
    n->domain = dm_arena_strdup(&g->arena, np->domain ? np->domain : "");
    if (!n->domain)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    if (!op_type[0])
        return dm_fail(c->err, DNNMEM_E_MODEL, "%s: node '%s' has no op_type", c->path, n->name);
    bool default_domain = !n->domain[0] || strcmp(n->domain, "ai.onnx") == 0;
    n->op = dm_op_lookup(n->domain, op_type);
    if (n->op == DM_OP_COUNT)
        return dm_fail(c->err, DNNMEM_E_UNSUPPORTED, "%s: node '%s': unsupported op '%s%s%s'",
                       c->path, n->name, default_domain ? "" : n->domain,
                       default_domain ? "" : "::", op_type);
    if (np->n_input > 1024 || np->n_output > 1024 || np->n_attribute > 1024)
        return dm_fail(c->err, DNNMEM_E_UNSUPPORTED,
                       "%s: node '%s' has too many inputs, outputs or attributes", c->path,
                       n->name);
    n->n_in = (int)np->n_input;
    n->n_out = (int)np->n_output;
    n->in = dm_arena_array(&g->arena, np->n_input + 1, sizeof *n->in);
    n->out = dm_arena_array(&g->arena, np->n_output + 1, sizeof *n->out);
    n->attrs = dm_arena_array(&g->arena, np->n_attribute + 1, sizeof *n->attrs);
    if (!n->in || !n->out || !n->attrs)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    for (size_t j = 0; j < np->n_input; j++)
        DM_TRY(tensor_ref(c, bind_name(c, k, np->input[j]), &n->in[j]));
    for (size_t j = 0; j < np->n_output; j++) {
        DM_TRY(tensor_ref(c, bind_name(c, k, np->output[j]), &n->out[j]));
        for (size_t m = 0; m < j; m++)
            if (n->out[j] >= 0 && n->out[m] == n->out[j])
                return dm_fail(c->err, DNNMEM_E_MODEL, "%s: node '%s' writes '%s' twice",
                               c->path, n->name, np->output[j]);
    }
    int na = 0;
    for (size_t j = 0; j < np->n_attribute; j++) {
        const Onnx__AttributeProto *ap = np->attribute[j];
        Onnx__AttributeProto bound;
        if (k->fn && ap->ref_attr_name && ap->ref_attr_name[0]) {
            const Onnx__AttributeProto *v = call_attr(k, ap->ref_attr_name);
            if (!v)
                continue; /* the call leaves it out: the op's default */
            bound = *v;
            bound.name = ap->name;
            ap = &bound;
        }
        DM_TRY(convert_attr(c, n, ap, &n->attrs[na++]));
    }
    n->n_attr = n->cap_attr = na;
    if (n->op == DM_OP_Constant && n->n_out >= 1 && n->out[0] >= 0)
        g->tensors[n->out[0]].role = DM_ROLE_CONSTANT;
    g->n_nodes++;
    return DNNMEM_OK;
}

static enum dnnmem_status convert_graph(struct conv *c, const Onnx__ModelProto *mp)
{
    struct dm_graph *g = c->g;
    const Onnx__GraphProto *gp = mp->graph;
    if (!gp)
        return dm_fail(c->err, DNNMEM_E_MODEL, "%s: the model has no graph", c->path);

    g->opset = -1;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        if (!o->domain || !o->domain[0] || strcmp(o->domain, "ai.onnx") == 0)
            g->opset = o->version;
    }
    if (mp->n_opset_import == 0 && mp->ir_version > 0 && mp->ir_version < 3)
        g->opset = 1; /* IR versions 1-2 predate opset_import and mean opset 1 */
    if (g->opset < 1)
        return dm_fail(c->err, DNNMEM_E_MODEL,
                       "%s: the model has no opset_import for the default ONNX domain", c->path);
    if (mp->producer_name)
        g->producer = dm_arena_printf(&g->arena, "%s%s%s", mp->producer_name,
                                      mp->producer_version && mp->producer_version[0] ? " " : "",
                                      mp->producer_version ? mp->producer_version : "");

    /* initializers (weights), then inputs that are not initializers */
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        const char *name = tp->name ? tp->name : "";
        if (!name[0])
            return dm_fail(c->err, DNNMEM_E_MODEL, "%s: initializer #%zu has no name", c->path, i);
        if (dm_graph_find(g, name) >= 0)
            return dm_fail(c->err, DNNMEM_E_MODEL, "%s: two initializers are named '%s'", c->path,
                           name);
        int32_t t = dm_graph_add_tensor(g, name);
        if (t < 0)
            return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
        g->tensors[t].role = DM_ROLE_WEIGHT;
        char *what = dm_arena_printf(&g->arena, "initializer '%s'", name);
        DM_TRY(convert_tensor(c, tp, &g->tensors[t], what ? what : name));
    }
    g->inputs = dm_arena_array(&g->arena, gp->n_input + 1, sizeof *g->inputs);
    g->outputs = dm_arena_array(&g->arena, gp->n_output + 1, sizeof *g->outputs);
    if (!g->inputs || !g->outputs)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        const char *name = vi->name ? vi->name : "";
        if (!name[0])
            return dm_fail(c->err, DNNMEM_E_MODEL, "%s: graph input #%zu has no name", c->path, i);
        int32_t t = dm_graph_find(g, name);
        if (t >= 0 && g->tensors[t].role == DM_ROLE_WEIGHT)
            continue; /* IR < 4 lists initializers among the inputs */
        if (t >= 0)
            return dm_fail(c->err, DNNMEM_E_MODEL, "%s: two graph inputs are named '%s'", c->path,
                           name);
        if ((t = dm_graph_add_tensor(g, name)) < 0)
            return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
        g->tensors[t].role = DM_ROLE_INPUT;
        DM_TRY(convert_value_info(c, vi, &g->tensors[t], true));
        g->inputs[g->n_inputs++] = t;
    }

    struct fnset fs = {mp->functions, mp->n_functions};
    uint64_t total = 0;
    if (!count_nodes(&fs, gp->node, gp->n_node, 0, &total))
        return dm_fail(c->err, DNNMEM_E_UNSUPPORTED,
                       "%s: the model's local functions call each other more than %d deep "
                       "(or recursively)",
                       c->path, MAX_FN_DEPTH);
    if (g->max_nodes > 0 && total > (uint64_t)g->max_nodes)
        return dm_fail(c->err, DNNMEM_E_LIMIT,
                       "%s: the graph has %llu nodes%s, beyond the budget of %lld (--max-nodes)",
                       c->path, (unsigned long long)total,
                       fs.n ? " with its local functions inlined" : "", (long long)g->max_nodes);
    if (total > INT32_MAX / 2)
        return dm_fail(c->err, DNNMEM_E_UNSUPPORTED, "%s: too many nodes", c->path);
    g->nodes = dm_arena_array(&g->arena, (size_t)total + 1, sizeof *g->nodes);
    if (!g->nodes)
        return dm_fail(c->err, DNNMEM_E_NOMEM, "%s: out of memory", c->path);
    struct call top = {.fs = &fs};
    g->onnx_scopes = true;
    for (size_t i = 0; i < gp->n_node; i++)
        DM_TRY(convert_node(c, &top, gp->node[i], i));

    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = gp->output[i]->name ? gp->output[i]->name : "";
        int32_t t = dm_graph_find(g, name);
        if (t < 0)
            return dm_fail(c->err, DNNMEM_E_MODEL,
                           "%s: graph output '%s' is not produced by any node", c->path, name);
        g->tensors[t].is_output = true;
        g->outputs[g->n_outputs++] = t;
        if (g->tensors[t].role == DM_ROLE_ACTIVATION)
            DM_TRY(convert_value_info(c, gp->output[i], &g->tensors[t], false));
    }
    for (size_t i = 0; i < gp->n_value_info; i++) {
        int32_t t = dm_graph_find(g, gp->value_info[i]->name ? gp->value_info[i]->name : "");
        if (t >= 0 && g->tensors[t].role == DM_ROLE_ACTIVATION && !g->tensors[t].is_output)
            DM_TRY(convert_value_info(c, gp->value_info[i], &g->tensors[t], false));
    }
    return dm_graph_finish(g, c->err);
}

enum dnnmem_status dm_load_onnx_stats(struct dm_graph *g, const uint8_t *data, size_t size,
                                      struct dm_load_stats *st, struct dnnmem_error *err)
{
    struct stripper s = {.path = g->path, .base = data, .err = err, .status = DNNMEM_OK};
    if (size == 0)
        return dm_fail(err, DNNMEM_E_PARSE, "%s: empty file", g->path);
    if (!strip_message(&s, &onnx__model_proto__descriptor, data, data + size, 0)) {
        free(s.out.p);
        if (s.status == DNNMEM_OK)
            return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory reading the model", g->path);
        return s.status;
    }
    struct counting cnt = {0, PARSE_CEILING, false};
    if (s.out.n < (PARSE_CEILING - PARSE_SLACK) / PARSE_RATIO)
        cnt.limit = s.out.n * PARSE_RATIO + PARSE_SLACK;
    const uint8_t *sp = s.out.p; /* NULL when nothing was kept (fuzz-onnx) */
    uint64_t predicted = predict_unpack(&onnx__model_proto__descriptor, sp, sp ? sp + s.out.n : sp);
    ProtobufCAllocator alloc = {count_alloc, count_free, &cnt};
    Onnx__ModelProto *mp = NULL;
    if (predicted > cnt.limit) /* beyond the cap: refused before a byte is spent */
        cnt.over = true;
    else
        mp = onnx__model_proto__unpack(&alloc, s.out.n, s.out.p);
    if (st) {
        st->file_bytes = size;
        st->parsed_bytes = s.out.n;
        st->parser_alloc_bytes = cnt.bytes;
        st->parser_predicted_bytes = predicted;
    }
    free(s.out.p);
    if (!mp && cnt.over)
        return dm_fail(err, DNNMEM_E_LIMIT,
                       "%s: unpacking its %zu bytes of graph would take more than %zu MiB "
                       "(%dx plus %zu MiB): a field is repeated beyond any real model's",
                       g->path, s.out.n, cnt.limit >> 20, PARSE_RATIO, PARSE_SLACK >> 20);
    if (!mp)
        return dm_fail(err, DNNMEM_E_PARSE,
                       "%s: not a valid ONNX model: a field has the wrong type or a required field is missing",
                       g->path);
    g->format = "onnx";
    struct conv c = {g, err, g->path};
    enum dnnmem_status r = convert_graph(&c, mp);
    onnx__model_proto__free_unpacked(mp, &alloc);
    return r;
}

enum dnnmem_status dm_load_onnx(struct dm_graph *g, const uint8_t *data, size_t size,
                                struct dnnmem_error *err)
{
    return dm_load_onnx_stats(g, data, size, NULL, err);
}
