/*
 * fuzz-onnx.c: libFuzzer target for the front ends (ONNX; HuggingFace configs
 * and Keras model JSON, whose seeds are in the corpus too) and everything
 * after them. Any input must give a model or a clean error, never a crash, a
 * leak or undefined behaviour; loaded models are also estimated.
 *
 *   make fuzz && build-fuzz/fuzz-onnx -max_total_time=60 NEW_DIR fuzz/corpus
 */
#include "dnnmem.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dnnmem_model *m = NULL;
    struct dnnmem_error err;
    if (dnnmem_model_load_buffer(data, size, "fuzz.onnx", &m, &err) != DNNMEM_OK)
        return 0;
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = 0;
    struct dnnmem_dim_binding dims[8];
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    size_t n = 0;
    for (size_t i = 0; i < info.n_symbols && n < 8; i++)
        dims[n++] = (struct dnnmem_dim_binding){dnnmem_model_symbol(m, i), 3};
    cfg.dims = dims;
    cfg.n_dims = n;
    struct dnnmem_result *r = NULL;
    if (dnnmem_estimate(m, &cfg, &r, &err) == DNNMEM_OK)
        dnnmem_result_free(r);
    dnnmem_model_free(m);
    return 0;
}
