/* fuzz-hf.c: the HuggingFace config.json front end, eager and sdpa graphs,
 * then the estimate. Seeds: fuzz/corpus/hf. */
#include "fuzz.h"

DM_FUZZ_JSON_TARGET("config.json", {
    if (dm_load_hf(&g, root, false, NULL, NULL, &err) == DNNMEM_OK) {
        dm_graph_free(&g);
        dm_graph_init(&g);
        (void)dm_load_hf(&g, root, true, NULL, NULL, &err);
    }
})
