/* fuzz-options.c: the option parser (dnnmem_config_set, the CLI's names and
 * values), then dnnmem_config_check and the estimate on a tiny Llama, in
 * every mode the options ask for. Each input line is one option: "name
 * value", or "name" alone for a flag. Seeds: fuzz/corpus/options. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

/* A 2-layer Llama (tests/models/hf/tiny-llama-gqa.json, smaller): it takes
 * every option a decoder takes (LoRA, quantization, generation). */
static const char model_json[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
    " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"max_position_embeddings\": 512, \"vocab_size\": 100,"
    " \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    dnnmem_options *o = dnnmem_options_new();
    struct dnnmem_error err;
    bool ok = o != NULL;
    for (char *line = text, *next; ok && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *value = strchr(line, ' ');
        if (value)
            *value++ = '\0';
        ok = dnnmem_config_set(&cfg, o, line, value, &err) == DNNMEM_OK;
    }
    if (ok && dnnmem_config_check(&cfg, o, &err) == DNNMEM_OK) {
        dnnmem_model *m = NULL;
        if (dnnmem_model_load_buffer(model_json, sizeof model_json - 1, "tiny.json", &m, &err) ==
            DNNMEM_OK) {
            struct dnnmem_result *r = NULL;
            if (dnnmem_estimate(m, &cfg, &r, &err) == DNNMEM_OK)
                dnnmem_result_free(r);
            dnnmem_model_free(m);
        }
    }
    dnnmem_options_free(o);
    free(text);
    return 0;
}
