/* elementwise.c: shape functions for elementwise ops, casts, generators of constants. */
#include "dnnmem-impl.h"

enum dnnmem_status dm_shape_unary(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_unary_bool(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_binary(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_compare(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_variadic(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_where(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_cast(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_castlike(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_clip(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_pow(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_dropout(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_identity(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_quantize(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_dequantize(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_dynamic_quantize(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_bernoulli(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_random(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_random_like(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_multinomial(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_constant(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_constant_of_shape(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_range(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_eyelike(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_window(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_mel_weight_matrix(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}
