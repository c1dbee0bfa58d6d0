/* fuzz-onnx.c: the ONNX loader (the strip pass and protobuf-c's generated
 * parser), then the estimate. Seeds: fuzz/corpus/onnx. */
#include "fuzz.h"

DM_FUZZ_TARGET("fuzz.onnx", (void)dm_load_onnx(&g, data, size, &err))
