/* ops.c: the op table, generated from ops.def (but the shape functions:
 * src/shape/rules.c), and lookup by ONNX op_type. */
#include "dnnmem-impl.h"

#include <string.h>

const struct dm_op_info dm_ops[DM_OP_COUNT] = {
#define DM_OP(name_, shape_fn, flags_, meta_, train_)                                             \
    [DM_OP_##name_] = {#name_, "", (flags_), (meta_), train_},
#define DM_OP_MS(name_, shape_fn, flags_, meta_, train_)                                          \
    [DM_OP_MS_##name_] = {#name_, "com.microsoft", (flags_), (meta_), train_},
#include "graph/ops.def"
#undef DM_OP
#undef DM_OP_MS
};

/* The activations with an in-place form in PyTorch that a module's
 * `inplace=True` selects (torch/nn/functional.py: relu_, hardtanh_ for
 * ReLU6, leaky_relu_, hardswish_, hardsigmoid_, silu_, elu_ for ELU and
 * SELU, celu_); which of them dnnmem runs in place is forward.c's. */
bool dm_op_inplace_activation(enum dm_op op)
{
    return op == DM_OP_Relu || op == DM_OP_Clip || op == DM_OP_LeakyRelu ||
           op == DM_OP_HardSwish || op == DM_OP_HardSigmoid || op == DM_OP_Silu ||
           op == DM_OP_Elu || op == DM_OP_Selu || op == DM_OP_Celu;
}

enum dm_op dm_op_lookup(const char *domain, const char *name)
{
    if (domain[0] && strcmp(domain, "ai.onnx") != 0) {
        for (size_t i = 0; i < DM_OP_COUNT; i++)
            if (strcmp(dm_ops[i].domain, domain) == 0 && strcmp(dm_ops[i].name, name) == 0)
                return (enum dm_op)i;
        return DM_OP_COUNT;
    }
    /* default-domain rows come first, in alphabetical order (a unit test checks) */
    size_t lo = 0, hi = DM_OP_MS_FIRST;
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
