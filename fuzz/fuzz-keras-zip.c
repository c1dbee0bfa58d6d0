/* fuzz-keras-zip.c: a Keras 3 .keras archive (libzip from memory, the capped
 * config.json), then the estimate. Seeds: fuzz/corpus/keras-zip. */
#include "fuzz.h"

DM_FUZZ_TARGET("model.keras", (void)dm_load_keras_archive(&g, data, size, &err))
