/* rules.c: each op's shape function, generated from ops.def's second column
 * (the rest of each row is src/graph/ops.c's dm_ops). */
#include "dnnmem-impl.h"

const dm_shape_fn dm_shape_fns[DM_OP_COUNT] = {
#define DM_OP(name_, shape_fn, flags_, meta_, train_) [DM_OP_##name_] = shape_fn,
#define DM_OP_MS(name_, shape_fn, flags_, meta_, train_) [DM_OP_MS_##name_] = shape_fn,
#include "graph/ops.def"
#undef DM_OP
#undef DM_OP_MS
};
