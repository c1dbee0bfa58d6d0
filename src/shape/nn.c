/* nn.c: shape functions for convolution, pooling, normalization, recurrent and vision/audio ops. */
#include "dnnmem-impl.h"

enum dnnmem_status dm_shape_conv(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_conv_transpose(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_qlinear_conv(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_pool(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_global_pool(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_max_roi_pool(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_roi_align(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_max_unpool(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_batchnorm(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_layernorm(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_rnn(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_resize(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_nms(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_grid_sample(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_nll_loss(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_sce_loss(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_dft(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}

enum dnnmem_status dm_shape_stft(struct dm_infer *ctx, const struct dm_node *n)
{
    return dm_shape_error(ctx, n, DNNMEM_E_UNSUPPORTED, "shape inference not implemented yet");
}
