/* tensor.c: shape functions for tensor manipulation, indexing, reductions, matrix products. */
#include "dnnmem-impl.h"

enum dnnmem_status dm_shape_reshape(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_flatten(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_transpose(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_squeeze(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_unsqueeze(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_slice(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_split(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_concat(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_gather(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_gather_elements(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_gather_nd(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_expand(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_tile(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_pad(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_shape(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_size(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_onehot(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_nonzero(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_topk(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_argminmax(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_reduce(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_depth_to_space(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_space_to_depth(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_compress(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_unique(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_einsum(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_det(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_matmul(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_gemm(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_qlinear_matmul(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}
