/*
 * warn.c: the last stage: what about the input makes the number less
 * trustworthy than it looks. Each rule of the table tests the graph and the
 * options and writes one line that says what to do.
 */
#include "estimate.h"

#include <stdio.h>
#include <string.h>

/* torch.onnx.export defaults to eval mode (training=TrainingMode.EVAL) with
 * constant folding: BatchNorm is folded into the convolutions, whose new
 * weights and biases the TorchScript exporter names "onnx::Conv_<n>", and
 * Dropout and stochastic depth are dropped. A training estimate of such a
 * file misses the BatchNorm outputs and statistics and the dropout masks
 * that training keeps (about 20% on ResNet-18 with Adam: the largest batch
 * it reports is 1.78x too large). The signs: a convolution, no
 * BatchNormalization, and folded weights. */
static bool eval_export(const struct dm_est *e, char *buf, size_t cap)
{
    const struct dm_graph *g = e->g;
    if (e->o->cfg.mode != DNNMEM_MODE_TRAIN || !g->format || strcmp(g->format, "onnx") != 0)
        return false;
    size_t conv = 0, bn = 0, folded = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        conv += g->nodes[i].op == DM_OP_Conv;
        bn += g->nodes[i].op == DM_OP_BatchNormalization;
    }
    for (int32_t x = 0; x < g->n_tensors; x++)
        folded += g->tensors[x].role == DM_ROLE_WEIGHT && g->tensors[x].name &&
                  strncmp(g->tensors[x].name, "onnx::Conv_", 11) == 0;
    if (!conv || bn || !folded)
        return false;
    snprintf(buf, cap,
             "%s looks exported in eval mode (no BatchNormalization, %zu folded 'onnx::Conv_*' "
             "weights; Dropout is dropped too): this training estimate is low. Export with "
             "torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, "
             "do_constant_folding=False)",
             g->path, folded);
    return true;
}

static bool (*const rules[])(const struct dm_est *, char *, size_t) = {eval_export};

enum dnnmem_status dm_est_warnings(const struct dm_est *e, struct dnnmem_result *r,
                                   struct dnnmem_error *err)
{
    char buf[512];
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
        if (rules[k](e, buf, sizeof buf) && dm_result_warn(r, buf) != DNNMEM_OK)
            return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", e->g->path);
    return DNNMEM_OK;
}
