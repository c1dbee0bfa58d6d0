/*
 * archive.c: .keras archives, read from the zip (keras.h).
 *
 * Keras 3's model.save("m.keras") (keras/src/saving/saving_lib.py) writes a
 * zip holding metadata.json ({"keras_version": ..., "date_saved": ...}),
 * config.json (the model's serialized config, the layout load_json reads)
 * and model.weights.h5. The archive is untrusted input: libzip opens it from
 * memory with its stricter consistency checks (ZIP_CHECKCONS), each member's
 * uncompressed size is capped before anything is allocated, reads stop one
 * byte past the stated size (so a member that inflates to more than it
 * claims is caught, and libzip checks the CRC at its end), and every failure
 * names the archive and the member.
 */
#include "keras.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

/* config.json's cap: a model JSON's (DM_MAX_JSON_BYTES); it bounds what a
 * hostile archive can make us allocate. */
#define ARCHIVE_CONFIG_MAX ((uint64_t)DM_MAX_JSON_BYTES)

/* metadata.json holds two short strings (saving_lib.py); 1 MiB is ample. */
#define ARCHIVE_METADATA_MAX (UINT64_C(1) << 20)

/* libzip's message for an error code (zip_fclose returns a bare code). */
static void zip_code_message(int code, char *buf, size_t n)
{
    zip_error_t ze;
    zip_error_init_with_code(&ze, code);
    snprintf(buf, n, "%s", zip_error_strerror(&ze));
    zip_error_fini(&ze);
}

/* Read member `name` of `za` into a malloc'd buffer (*out, *n; NUL-terminated).
 * An absent member is an error unless `optional` (then *out stays NULL). */
static enum dnnmem_status read_member(zip_t *za, const char *path, const char *name,
                                      uint64_t cap, bool optional, uint8_t **out, size_t *n,
                                      struct dnnmem_error *err)
{
    *out = NULL;
    *n = 0;
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat(za, name, 0, &st) != 0) {
        if (zip_error_code_zip(zip_get_error(za)) != ZIP_ER_NOENT)
            return dm_fail(err, DNNMEM_E_PARSE, "%s: %s: %s", path, name, zip_strerror(za));
        if (optional)
            return DNNMEM_OK;
        return dm_fail(err, DNNMEM_E_MODEL,
                       "%s: %s: no such member; a Keras 3 .keras archive holds metadata.json, "
                       "config.json and model.weights.h5", path, name);
    }
    if (!(st.valid & ZIP_STAT_SIZE))
        return dm_fail(err, DNNMEM_E_PARSE, "%s: %s: the archive does not state its size", path,
                       name);
    if (st.size > cap)
        return dm_fail(err, DNNMEM_E_PARSE,
                       "%s: %s: %llu bytes uncompressed, over the %llu-byte cap for this member",
                       path, name, (unsigned long long)st.size, (unsigned long long)cap);
    zip_file_t *zf = zip_fopen(za, name, 0);
    if (!zf)
        return dm_fail(err, DNNMEM_E_PARSE, "%s: %s: cannot open: %s", path, name,
                       zip_strerror(za));
    size_t want = (size_t)st.size; /* <= cap: fits */
    uint8_t *buf = malloc(want + 1);
    if (!buf) {
        zip_fclose(zf);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: %s: out of memory", path, name);
    }
    size_t got = 0;
    enum dnnmem_status s = DNNMEM_OK;
    for (;;) { /* up to one byte past the stated size: EOF (and the CRC check) or excess */
        zip_int64_t r = zip_fread(zf, buf + got, (zip_uint64_t)(want + 1 - got));
        if (r < 0) {
            s = dm_fail(err, DNNMEM_E_PARSE, "%s: %s: cannot read: %s", path, name,
                        zip_file_strerror(zf));
            break;
        }
        if (r == 0)
            break;
        got += (size_t)r;
        if (got > want) {
            s = dm_fail(err, DNNMEM_E_PARSE,
                        "%s: %s: inflates to more than the %zu bytes the archive states", path,
                        name, want);
            break;
        }
    }
    if (s == DNNMEM_OK && got != want)
        s = dm_fail(err, DNNMEM_E_PARSE, "%s: %s: %zu bytes, not the %zu the archive states "
                    "(truncated?)", path, name, got, want);
    int rc = zip_fclose(zf);
    if (s == DNNMEM_OK && rc != 0) {
        char msg[128];
        zip_code_message(rc, msg, sizeof msg);
        s = dm_fail(err, DNNMEM_E_PARSE, "%s: %s: %s", path, name, msg);
    }
    if (s != DNNMEM_OK) {
        free(buf);
        return s;
    }
    buf[got] = '\0';
    *out = buf;
    *n = got;
    return DNNMEM_OK;
}

enum dnnmem_status dm_load_keras_archive(struct dm_graph *g, const uint8_t *data, size_t size,
                                         struct dnnmem_error *err)
{
    const char *path = g->path;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(data, size, 0, &ze);
    if (!src) {
        zip_error_fini(&ze);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
    }
    zip_t *za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za) {
        enum dnnmem_status s = dm_fail(err, DNNMEM_E_PARSE,
                                       "%s: a zip archive (a .keras model?) that cannot be read: "
                                       "%s", path, zip_error_strerror(&ze));
        zip_source_free(src);
        zip_error_fini(&ze);
        return s;
    }
    zip_error_fini(&ze);
    uint8_t *meta = NULL, *cfg = NULL;
    size_t n_meta = 0, n_cfg = 0;
    enum dnnmem_status s =
        read_member(za, path, "metadata.json", ARCHIVE_METADATA_MAX, true, &meta, &n_meta, err);
    if (s == DNNMEM_OK)
        s = read_member(za, path, "config.json", ARCHIVE_CONFIG_MAX, false, &cfg, &n_cfg, err);
    zip_discard(za); /* frees src */
    /* keras_version from metadata.json, when it is JSON with that string */
    json_t *mroot = meta ? json_loadb((const char *)meta, n_meta, 0, NULL) : NULL;
    const char *ver = json_string_value(json_object_get(mroot, "keras_version"));
    const char *where = s == DNNMEM_OK ? dm_arena_printf(&g->arena, "%s: config.json", path) : NULL;
    if (s == DNNMEM_OK && !where)
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", path);
    json_t *root = NULL;
    if (s == DNNMEM_OK) { /* the member's one parse */
        json_error_t je;
        root = json_loadb((const char *)cfg, n_cfg, JSON_REJECT_DUPLICATES, &je);
        if (!root)
            s = dm_fail(err, DNNMEM_E_PARSE, "%s: not valid JSON: %s (line %d, column %d)", where,
                        je.text, je.line, je.column);
    }
    if (s == DNNMEM_OK)
        s = dm_kr_load_json(g, root, where, ver, err);
    json_decref(root);
    json_decref(mroot);
    free(meta);
    free(cfg);
    return s;
}
