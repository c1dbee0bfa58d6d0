/* dtype.c: element types, numbered as ONNX TensorProto.DataType (onnx.proto). */
#include "dnnmem-impl.h"

static const struct {
    const char *name;
    int bits;
    bool is_float;
} dtypes[DM_DTYPE_COUNT] = {
    [DM_UNDEFINED] = {"undefined", 0, false},
    [DM_FLOAT] = {"float32", 32, true},
    [DM_UINT8] = {"uint8", 8, false},
    [DM_INT8] = {"int8", 8, false},
    [DM_UINT16] = {"uint16", 16, false},
    [DM_INT16] = {"int16", 16, false},
    [DM_INT32] = {"int32", 32, false},
    [DM_INT64] = {"int64", 64, false},
    [DM_STRING] = {"string", 0, false},
    [DM_BOOL] = {"bool", 8, false},
    [DM_FLOAT16] = {"float16", 16, true},
    [DM_DOUBLE] = {"float64", 64, true},
    [DM_UINT32] = {"uint32", 32, false},
    [DM_UINT64] = {"uint64", 64, false},
    [DM_COMPLEX64] = {"complex64", 64, true},
    [DM_COMPLEX128] = {"complex128", 128, true},
    [DM_BFLOAT16] = {"bfloat16", 16, true},
    [DM_FLOAT8E4M3FN] = {"float8e4m3fn", 8, true},
    [DM_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", 8, true},
    [DM_FLOAT8E5M2] = {"float8e5m2", 8, true},
    [DM_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", 8, true},
    [DM_UINT4] = {"uint4", 4, false},
    [DM_INT4] = {"int4", 4, false},
};

bool dm_dtype_valid(int32_t t) { return t > 0 && t < DM_DTYPE_COUNT; }

int dm_dtype_bits(enum dm_dtype t) { return dm_dtype_valid((int32_t)t) ? dtypes[t].bits : 0; }

const char *dm_dtype_name(enum dm_dtype t)
{
    return (t >= 0 && t < DM_DTYPE_COUNT) ? dtypes[t].name : "invalid";
}

bool dm_dtype_is_float(enum dm_dtype t)
{
    return dm_dtype_valid((int32_t)t) && dtypes[t].is_float;
}

bool dm_dtype_bytes(enum dm_dtype t, int64_t numel, uint64_t *bytes)
{
    uint64_t bits;
    if (numel < 0 || !dm_umul_ok((uint64_t)numel, (uint64_t)dm_dtype_bits(t), &bits))
        return false;
    *bytes = bits / 8 + (bits % 8 != 0);
    return true;
}
