/*
 * fuzz.h: what every libFuzzer target of dnnmem shares. A target hands the
 * input to one front end's parser directly (so that parser is what the
 * fuzzer explores, whatever the file's kind would choose; a JSON front end
 * gets the input's parsed root, as the load gives it), then runs
 * the public path on the same bytes as a user does: dnnmem_model_load_buffer
 * and an inference and a training estimate, every symbolic dim bound to 3.
 * Any input must give a model or a clean error: never a crash, a leak,
 * undefined behaviour, or memory or time beyond the run's limits.
 *
 *   make fuzz && build-fuzz/fuzz-hf -max_total_time=60 NEW_DIR fuzz/corpus/hf
 */
#ifndef DNNMEM_FUZZ_H
#define DNNMEM_FUZZ_H

#include "dnnmem.h"
#include "dnnmem-impl.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The estimate as users run it, in both modes. */
static inline void fuzz_estimate(const uint8_t *data, size_t size, const char *name)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    if (dnnmem_model_load_buffer(data, size, name, &m, &err) != DNNMEM_OK)
        return;
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    struct dnnmem_dim_binding dims[8];
    size_t n = 0;
    for (size_t i = 0; i < info.n_symbols && n < 8; i++)
        dims[n++] = (struct dnnmem_dim_binding){dnnmem_model_symbol(m, i), 3};
    for (int mode = 0; mode < 2; mode++) {
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.mode = mode ? DNNMEM_MODE_TRAIN : DNNMEM_MODE_INFER;
        cfg.dims = dims;
        cfg.n_dims = n;
        struct dnnmem_result *r = NULL;
        if (dnnmem_estimate(m, &cfg, &r, &err) == DNNMEM_OK)
            dnnmem_result_free(r);
    }
    dnnmem_model_free(m);
}

/* A JSON input's root, parsed as dnnmem_model_load parses a model file
 * once (src/api.c), for a JSON front end's entry point; NULL if not JSON. */
static inline json_t *fuzz_json(const uint8_t *data, size_t size)
{
    return json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
}

/* Define a JSON target whose front end is `call`, a statement over g, root
 * and err (run when the input is JSON). */
#define DM_FUZZ_JSON_TARGET(name, call)                                        \
    DM_FUZZ_TARGET(name, {                                                     \
        json_t *root = fuzz_json(data, size);                                  \
        if (root)                                                              \
            call;                                                              \
        json_decref(root);                                                     \
    })

/* Define a target whose parser is `call`, a statement over g, data, size
 * and err. */
#define DM_FUZZ_TARGET(name, call)                                             \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)               \
    {                                                                          \
        struct dm_graph g;                                                     \
        struct dnnmem_error err;                                               \
        dm_graph_init(&g);                                                     \
        call;                                                                  \
        dm_graph_free(&g);                                                     \
        fuzz_estimate(data, size, name);                                       \
        return 0;                                                              \
    }

#endif
