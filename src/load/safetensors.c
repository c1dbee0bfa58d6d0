/*
 * safetensors.c: the checkpoint next to a HuggingFace config.json, read for
 * its headers only. A safetensors file is an 8-byte little-endian header
 * length N, N bytes of JSON mapping each tensor name to its dtype, shape and
 * [begin, end) byte offsets into the data that follows, then the data
 * (format: huggingface/safetensors README; N is at most 100 MB there). A
 * sharded checkpoint has model.safetensors.index.json, whose "weight_map"
 * names each tensor's shard and whose metadata "total_size" is the data size.
 *
 * The headers say which tensors the published model has and their shapes, so
 * they check the graph hf.c built from the config: every checkpoint tensor
 * must be a weight of the graph with the same shape (a config field read
 * wrongly shows up here, named), apart from buffers transformers ignores on
 * load. Weight bytes are never read: only the header is, with pread.
 */
#include "dnnmem-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (100u << 20) /* the format's own limit on N */

static const struct {
    const char *name;
    enum dm_dtype dtype;
} dtypes[] = {
    {"F64", DM_DOUBLE},  {"F32", DM_FLOAT},   {"F16", DM_FLOAT16}, {"BF16", DM_BFLOAT16},
    {"I64", DM_INT64},   {"I32", DM_INT32},   {"I16", DM_INT16},   {"I8", DM_INT8},
    {"U64", DM_UINT64},  {"U32", DM_UINT32},  {"U16", DM_UINT16},  {"U8", DM_UINT8},
    {"BOOL", DM_BOOL},   {"F8_E4M3", DM_FLOAT8E4M3FN}, {"F8_E5M2", DM_FLOAT8E5M2},
};

/* Buffers older checkpoints carry and transformers drops on load
 * (_keys_to_ignore_on_load_unexpected: the rotary inv_freq of Llama-family
 * models, GPT-2's attn.bias and attn.masked_bias). */
static bool ignored_on_load(const char *name)
{
    static const char *const suffix[] = {".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias",
                                         /* T5's _keys_to_ignore_on_load_unexpected */
                                         ".EncDecAttention.relative_attention_bias.weight",
                                         /* bitsandbytes: the packed QuantState (its JSON,
                                          * read on the host by QuantState.from_dict) and
                                          * Linear8bitLt's weight_format, popped on load
                                          * (Bnb8BitHfQuantizer.create_quantized_param) */
                                         ".weight.quant_state.bitsandbytes__nf4",
                                         ".weight.quant_state.bitsandbytes__fp4", ".weight_format"};
    size_t n = strlen(name);
    for (size_t k = 0; k < sizeof suffix / sizeof suffix[0]; k++) {
        size_t s = strlen(suffix[k]);
        if (n >= s && strcmp(name + n - s, suffix[k]) == 0)
            return true;
    }
    return false;
}

/* The graph weight a checkpoint name refers to: the name itself, or with the
 * base model's prefix that transformers adds when the checkpoint was saved
 * from the base model (GPT-2's "h.0.attn..." for "transformer.h.0.attn..."). */
static int32_t find_weight(const struct dm_graph *g, const char *name)
{
    static const char *const prefix[] = {"", "transformer.", "model."};
    char buf[512];
    for (size_t k = 0; k < sizeof prefix / sizeof prefix[0]; k++) {
        if ((size_t)snprintf(buf, sizeof buf, "%s%s", prefix[k], name) >= sizeof buf)
            return -1;
        int32_t x = dm_graph_find(g, buf);
        if (x >= 0 && g->tensors[x].role == DM_ROLE_WEIGHT)
            return x;
    }
    /* T5's tied copies of the shared embedding (_tied_weights_keys), which
     * older checkpoints hold under their own names */
    if (strcmp(name, "encoder.embed_tokens.weight") == 0 ||
        strcmp(name, "decoder.embed_tokens.weight") == 0 || strcmp(name, "lm_head.weight") == 0) {
        int32_t x = dm_graph_find(g, "shared.weight");
        if (x >= 0 && g->tensors[x].role == DM_ROLE_WEIGHT)
            return x;
    }
    return -1;
}

struct tally {
    uint64_t by_dtype[DM_DTYPE_COUNT];
};

/* Check one tensor entry of a header against the graph. */
static enum dnnmem_status check_entry(const struct dm_graph *g, const char *file, const char *name,
                                      json_t *e, uint64_t data_size, struct dm_checkpoint *ck,
                                      struct tally *tl, struct dnnmem_error *err)
{
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape");
    json_t *jo = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
        json_array_size(jo) != 2)
        return dm_fail(err, DNNMEM_E_PARSE,
                       "%s: tensor '%s': header entry needs dtype, shape and data_offsets", file,
                       name);
    enum dm_dtype dt = DM_UNDEFINED;
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (strcmp(json_string_value(jd), dtypes[k].name) == 0)
            dt = dtypes[k].dtype;
    if (dt == DM_UNDEFINED)
        return dm_fail(err, DNNMEM_E_PARSE, "%s: tensor '%s': unknown dtype '%s'", file, name,
                       json_string_value(jd));
    size_t rank = json_array_size(js);
    if (rank > DM_MAX_DIMS)
        return dm_fail(err, DNNMEM_E_PARSE, "%s: tensor '%s': rank %zu", file, name, rank);
    int64_t dims[DM_MAX_DIMS], numel = 1;
    for (size_t d = 0; d < rank; d++) {
        json_t *v = json_array_get(js, d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            !dm_mul_ok(numel, json_integer_value(v), &numel))
            return dm_fail(err, DNNMEM_E_PARSE, "%s: tensor '%s': bad shape", file, name);
        dims[d] = json_integer_value(v);
    }
    json_t *b0 = json_array_get(jo, 0), *b1 = json_array_get(jo, 1);
    uint64_t bytes;
    if (!json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 ||
        json_integer_value(b1) < json_integer_value(b0) ||
        (uint64_t)json_integer_value(b1) > data_size || !dm_dtype_bytes(dt, numel, &bytes) ||
        bytes != (uint64_t)(json_integer_value(b1) - json_integer_value(b0)))
        return dm_fail(err, DNNMEM_E_PARSE,
                       "%s: tensor '%s': data_offsets do not hold its %s x %lld elements", file,
                       name, json_string_value(jd), (long long)numel);
    ck->n_tensors++;
    ck->bytes += bytes;
    tl->by_dtype[dt] += bytes;
    if (ignored_on_load(name))
        return DNNMEM_OK;
    int32_t x = find_weight(g, name);
    if (x < 0)
        return dm_fail(err, DNNMEM_E_MODEL,
                       "%s: tensor '%s' is not in the model built from config.json", file, name);
    const struct dm_tensor *w = &g->tensors[x];
    bool same = w->rank == (int)rank;
    for (size_t d = 0; same && d < rank; d++)
        same = w->dims[d].value == dims[d];
    if (!same) {
        char want[128] = "", got[128] = "";
        for (int d = 0; d < w->rank; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "",
                     (long long)w->dims[d].value);
        for (size_t d = 0; d < rank; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "",
                     (long long)dims[d]);
        return dm_fail(err, DNNMEM_E_MODEL,
                       "%s: tensor '%s' is [%s] in the checkpoint, [%s] from config.json", file,
                       name, got, want);
    }
    /* a float weight the graph builds float32 may be stored in any float
     * type (the checkpoint's torch_dtype); a quantized layout's tensors
     * (int32 qweight, float16 scales, int8, uint8 codes, float8) must be
     * stored as the method stores them */
    if (w->dtype != DM_FLOAT && dt != w->dtype)
        return dm_fail(err, DNNMEM_E_MODEL,
                       "%s: tensor '%s' is %s in the checkpoint, %s from config.json", file, name,
                       json_string_value(jd), dm_dtype_name(w->dtype));
    ck->n_matched++;
    return DNNMEM_OK;
}

/* Read one shard's header and check its tensors. */
static enum dnnmem_status check_file(const struct dm_graph *g, const char *path,
                                     struct dm_checkpoint *ck, struct tally *tl,
                                     struct dnnmem_error *err)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return dm_fail(err, DNNMEM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    unsigned char len8[8];
    enum dnnmem_status s = DNNMEM_OK;
    char *hdr = NULL;
    json_t *root = NULL;
    if (fstat(fd, &sb) != 0 || pread(fd, len8, 8, 0) != 8) {
        s = dm_fail(err, DNNMEM_E_PARSE, "%s: not a safetensors file (no header length)", path);
        goto out;
    }
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = n << 8 | len8[k];
    if (n < 2 || n > MAX_HEADER || n > (uint64_t)sb.st_size - 8) {
        s = dm_fail(err, DNNMEM_E_PARSE,
                    "%s: header length %llu does not fit the file (%lld bytes) or the format's "
                    "100 MB limit",
                    path, (unsigned long long)n, (long long)sb.st_size);
        goto out;
    }
    hdr = malloc(n);
    if (!hdr) {
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    if (pread(fd, hdr, n, 8) != (ssize_t)n) {
        s = dm_fail(err, DNNMEM_E_IO, "%s: cannot read the header", path);
        goto out;
    }
    json_error_t je;
    root = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        s = dm_fail(err, DNNMEM_E_PARSE, "%s: header is not a JSON object: %s", path,
                    root ? "" : je.text);
        goto out;
    }
    const char *name;
    json_t *e;
    json_object_foreach(root, name, e)
    {
        if (strcmp(name, "__metadata__") == 0)
            continue;
        if ((s = check_entry(g, path, name, e, (uint64_t)sb.st_size - 8 - n, ck, tl, err)) !=
            DNNMEM_OK)
            goto out;
    }
out:
    json_decref(root);
    free(hdr);
    close(fd);
    return s;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

enum dnnmem_status dm_check_safetensors(const struct dm_graph *g, const char *dir,
                                        struct dm_checkpoint *ck, struct dnnmem_error *err)
{
    memset(ck, 0, sizeof *ck);
    struct tally tl = {{0}};
    char path[4096];
    enum dnnmem_status s = DNNMEM_OK;
    if ((size_t)snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir) >= sizeof path)
        return dm_fail(err, DNNMEM_E_IO, "%s: path too long", dir);
    if (exists(path)) {
        json_error_t je;
        json_t *idx = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        json_t *map = json_object_get(idx, "weight_map");
        if (!json_is_object(map)) {
            json_decref(idx);
            return dm_fail(err, DNNMEM_E_PARSE, "%s: no \"weight_map\" object%s%s", path,
                           idx ? "" : ": ", idx ? "" : je.text);
        }
        ck->file = "model.safetensors.index.json";
        /* each shard once, in order of first mention; a shard not on disk
         * (only the small files downloaded) leaves its tensors unchecked */
        json_t *seen = json_object();
        const char *name;
        json_t *v;
        json_object_foreach(map, name, v)
        {
            const char *shard = json_string_value(v);
            if (!shard || strchr(shard, '/')) {
                s = dm_fail(err, DNNMEM_E_PARSE, "%s: tensor '%s': bad shard name", path, name);
                break;
            }
            if (json_object_get(seen, shard))
                continue;
            json_object_set_new(seen, shard, json_true());
            char sp[4096];
            if ((size_t)snprintf(sp, sizeof sp, "%s/%s", dir, shard) >= sizeof sp) {
                s = dm_fail(err, DNNMEM_E_IO, "%s: path too long", dir);
                break;
            }
            if (!exists(sp)) {
                ck->shards_missing++;
                continue;
            }
            if ((s = check_file(g, sp, ck, &tl, err)) != DNNMEM_OK)
                break;
        }
        if (s == DNNMEM_OK && ck->shards_missing) { /* names only, from the index */
            ck->n_tensors = json_object_size(map);
            ck->n_matched = 0;
            json_object_foreach(map, name, v)
            {
                if (ignored_on_load(name))
                    continue;
                if (find_weight(g, name) < 0) {
                    s = dm_fail(err, DNNMEM_E_MODEL,
                                "%s: tensor '%s' is not in the model built from config.json",
                                path, name);
                    break;
                }
                ck->n_matched++;
            }
            json_int_t total = json_integer_value(json_object_get(json_object_get(idx, "metadata"),
                                                                  "total_size"));
            ck->bytes = total > 0 ? (uint64_t)total : 0;
        }
        json_decref(seen);
        json_decref(idx);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (!exists(path))
            return DNNMEM_OK; /* config.json alone */
        ck->file = "model.safetensors";
        s = check_file(g, path, ck, &tl, err);
    }
    if (s != DNNMEM_OK)
        return s;
    for (int d = 0; d < DM_DTYPE_COUNT; d++)
        if (tl.by_dtype[d] > tl.by_dtype[ck->dtype])
            ck->dtype = (enum dm_dtype)d;
    return DNNMEM_OK;
}
