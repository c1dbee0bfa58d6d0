/* ops.c: the op table, generated from ops.def, and lookup by ONNX op_type. */
#include "dnnmem-impl.h"

#include <string.h>

const struct dm_op_info dm_ops[DM_OP_COUNT] = {
#define DM_OP(name_, shape_fn, flags_, meta_)                                                     \
    [DM_OP_##name_] = {.name = #name_, .shape = shape_fn, .flags = (flags_), .meta_inputs = (meta_)},
#include "graph/ops.def"
#undef DM_OP
};

enum dm_op dm_op_lookup(const char *name)
{
    /* rows of ops.def are alphabetical (checked by a unit test) */
    size_t lo = 0, hi = DM_OP_COUNT;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, dm_ops[mid].name);
        if (c == 0)
            return (enum dm_op)mid;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return DM_OP_COUNT;
}
