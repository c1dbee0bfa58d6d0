/* fuzz-capture.c: the captured-step reader (src/load/capture.c,
 * docs/capture-format.md), then the estimate. Seeds: fuzz/corpus/capture. */
#include "fuzz.h"

DM_FUZZ_JSON_TARGET("step.dnnmem", (void)dm_load_capture(&g, root, &err))
