/* fuzz-safetensors.c: a model directory's checkpoint headers, checked
 * against the graph of a fixed tiny GPT-2 config. The input is written to a
 * fresh directory as model.safetensors, or, when it starts with '{', as
 * model.safetensors.index.json (which names shards that are then missing).
 * Seeds: fuzz/corpus/safetensors (tools: fuzz/make-seeds.py). */
#define _GNU_SOURCE
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char config[] =
    "{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 16, "
    "\"n_layer\": 1, \"n_head\": 2, \"n_positions\": 32, \"vocab_size\": 50, "
    "\"activation_function\": \"gelu_new\", \"torch_dtype\": \"float32\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[] = "/tmp/dnnmem-fuzz-st.XXXXXX", path[64];
    if (!mkdtemp(dir))
        return 0;
    const char *file = size && data[0] == '{' ? "model.safetensors.index.json" : "model.safetensors";
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
        struct dm_graph g;
        struct dnnmem_error err;
        struct dm_checkpoint ck;
        dm_graph_init(&g);
        json_t *root = fuzz_json((const uint8_t *)config, sizeof config - 1);
        if (root && dm_load_hf(&g, root, false, NULL, NULL, &err) == DNNMEM_OK)
            (void)dm_check_safetensors(&g, dir, &ck, &err);
        json_decref(root);
        dm_graph_free(&g);
        unlink(path);
    }
    rmdir(dir);
    return 0;
}
