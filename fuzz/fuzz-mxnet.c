/* fuzz-mxnet.c: the MXNet symbol JSON front end, then the estimate. Seeds:
 * fuzz/corpus/mxnet. */
#include "fuzz.h"

DM_FUZZ_TARGET("model-symbol.json", (void)dm_load_mxnet(&g, data, size, &err))
