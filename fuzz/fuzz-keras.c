/* fuzz-keras.c: the Keras model JSON front end (Keras 2 to_json, Keras 3
 * config.json), then the estimate. Seeds: fuzz/corpus/keras. */
#include "fuzz.h"

DM_FUZZ_JSON_TARGET("model.json", (void)dm_load_keras(&g, root, &err))
