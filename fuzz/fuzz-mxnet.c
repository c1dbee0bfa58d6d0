/* fuzz-mxnet.c: the MXNet symbol JSON front end, then the estimate. Seeds:
 * fuzz/corpus/mxnet. */
#include "fuzz.h"

DM_FUZZ_JSON_TARGET("model-symbol.json", (void)dm_load_mxnet(&g, root, &err))
