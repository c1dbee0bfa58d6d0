/* json.c: the result as one JSON object, integer bytes (schema dnnmem.estimate/1). */
#include "dnnmem-impl.h"

#include <jansson.h>

static json_t *tensor_json(const struct dnnmem_tensor_info *ti)
{
    json_t *dims = json_array();
    for (int d = 0; d < ti->rank; d++)
        json_array_append_new(dims, json_integer(ti->dims[d]));
    return json_pack("{s:s, s:s, s:s, s:o, s:I, s:I, s:s, s:s}", "name", ti->name, "dtype",
                     ti->dtype, "category", dnnmem_category_name(ti->category),
                     "dims", ti->rank >= 0 ? dims : (json_decref(dims), json_null()),
                     "bytes", (json_int_t)ti->bytes, "allocated", (json_int_t)ti->allocated,
                     "producer_node", ti->producer_node, "producer_op", ti->producer_op);
}

/* The bytes at the peak by module scope (--by-module), each module's
 * breakdown keyed as the result's (keys: the category keys). */
static json_t *modules_json(const struct dnnmem_result *r, const char *const *keys)
{
    json_t *mods = json_array();
    for (size_t k = 0; k < r->n_modules; k++) {
        const struct dnnmem_module_info *mi = &r->modules[k];
        json_t *bd = json_object();
        for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
            json_object_set_new(bd, keys[c], json_integer((json_int_t)mi->category_bytes[c]));
        json_array_append_new(mods, json_pack("{s:s, s:I, s:I, s:o}", "name", mi->name,
                                              "live_bytes", (json_int_t)mi->live_bytes, "tensors",
                                              (json_int_t)mi->n_live, "breakdown", bd));
    }
    return json_pack("{s:i, s:o}", "depth", r->module_depth, "modules", mods);
}

int dnnmem_report_json(const struct dnnmem_result *r, const dnnmem_model *m, FILE *f)
{
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    json_t *assumptions = json_array();
    for (size_t k = 0; k < r->n_assumptions; k++)
        json_array_append_new(assumptions,
                              json_pack("{s:s, s:s, s:s}", "key", r->assumptions[k].key, "value",
                                        r->assumptions[k].value, "source", r->assumptions[k].source));
    static const char *const keys[DNNMEM_CAT_COUNT] = {
        [DNNMEM_CAT_WEIGHT] = "weights",       [DNNMEM_CAT_WORKSPACE] = "workspaces",
        [DNNMEM_CAT_INPUT] = "inputs",
        [DNNMEM_CAT_ACTIVATION] = "activations", [DNNMEM_CAT_SAVED] = "saved",
        [DNNMEM_CAT_GRADIENT] = "gradients",   [DNNMEM_CAT_OPTIMIZER] = "optimizer_state",
        [DNNMEM_CAT_TEMPORARY] = "temporaries", [DNNMEM_CAT_KV_CACHE] = "kv_cache"};
    json_t *breakdown = json_object();
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        json_object_set_new(breakdown, keys[c], json_integer((json_int_t)r->category_bytes[c]));
    json_object_set_new(breakdown, "rounding", json_integer((json_int_t)r->rounding_bytes));
    json_object_set_new(breakdown, "allocator_slack", json_integer((json_int_t)r->slack_bytes));
    json_object_set_new(breakdown, "cuda_context", json_integer((json_int_t)r->context_bytes));
    json_t *counts = json_object();
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        json_object_set_new(counts, keys[c], json_integer((json_int_t)r->category_count[c]));
    json_t *live = json_array();
    for (size_t k = 0; k < r->n_live; k++)
        json_array_append_new(live, tensor_json(&r->live[k]));
    json_t *root = json_pack(
        "{s:s, s:s, s:{s:s, s:s, s:s, s:I, s:I}, s:o, s:I, s:I, s:I, s:I, s:o,"
        " s:{s:s, s:I, s:s, s:s}, s:o, s:I}",
        "schema", "dnnmem.estimate/1", "tool_version", DNNMEM_VERSION, "model", "path", info.path,
        "format", info.format, "producer", info.producer, "opset", (json_int_t)info.opset, "nodes",
        (json_int_t)info.n_nodes, "assumptions", assumptions, "total_bytes",
        (json_int_t)r->total_bytes, "peak_allocated_bytes", (json_int_t)r->peak_allocated,
        "peak_reserved_bytes", (json_int_t)r->peak_reserved, "cuda_context_bytes",
        (json_int_t)r->context_bytes, "breakdown", breakdown, "peak", "phase",
        r->peak_phase, "iteration", (json_int_t)r->peak_iteration, "node", r->peak_node, "op",
        r->peak_op, "live_at_peak", live, "live_at_peak_total", (json_int_t)r->n_live_total);
    if (root) {
        json_t *warnings = json_array();
        for (size_t k = 0; k < r->n_warnings; k++)
            json_array_append_new(warnings, json_string(r->warnings[k]));
        json_object_set_new(root, "warnings", warnings);
    }
    if (root && info.checkpoint)
        json_object_set_new(json_object_get(root, "model"), "checkpoint",
                            json_pack("{s:s, s:I, s:I, s:I, s:s}", "file", info.checkpoint,
                                      "tensors", (json_int_t)info.checkpoint_tensors,
                                      "shards_missing",
                                      (json_int_t)info.checkpoint_shards_missing, "bytes",
                                      (json_int_t)info.checkpoint_bytes, "dtype",
                                      info.checkpoint_dtype));
    if (root) {
        static const char *const alloc_name[] = {
            [DNNMEM_FW_PYTORCH] = "cuda-caching", [DNNMEM_FW_TENSORFLOW] = "bfc",
            [DNNMEM_FW_MXNET] = "pooled-storage", [DNNMEM_FW_JAX] = "bfc"};
        json_object_set_new(
            root, "framework",
            json_pack("{s:s, s:s, s:s, s:b, s:b, s:o, s:o}", "name",
                      dnnmem_framework_name(r->framework), "version",
                      r->framework_version ? r->framework_version : "", "allocator",
                      alloc_name[r->framework], "reserved_is_limit", r->reserved_is_limit,
                      "limit_unknown", r->limit_unknown, "limit_bytes",
                      r->limit_bytes ? json_integer((json_int_t)r->limit_bytes) : json_null(),
                      "xla",
                      r->xla_temp_bytes || r->xla_argument_bytes
                          ? json_pack("{s:I, s:I, s:I}", "temp_bytes",
                                      (json_int_t)r->xla_temp_bytes, "output_bytes",
                                      (json_int_t)r->xla_output_bytes, "argument_bytes",
                                      (json_int_t)r->xla_argument_bytes)
                          : json_null()));
        json_object_set_new(root, "needed_bytes", json_integer((json_int_t)r->needed_bytes));
    }
    if (root) {
        json_t *advice = json_array();
        for (size_t k = 0; k < r->n_advice; k++) {
            const struct dnnmem_advice *a = &r->advice[k];
            json_array_append_new(
                advice, json_pack("{s:s, s:I, s:s, s:I, s:i, s:s}", "change", a->change,
                                  "total_bytes", (json_int_t)a->total_bytes, "verdict",
                                  dnnmem_verdict_name(a->verdict), "margin_bytes",
                                  (json_int_t)a->margin_bytes, "cost_rank", a->cost_rank, "cost",
                                  a->cost));
        }
        json_object_set_new(root, "advice", advice);
    }
    if (root)
        json_object_set_new(root, "live_at_peak_count", counts);
    else
        json_decref(counts);
    if (root && r->verdict != DNNMEM_VERDICT_NONE)
        json_object_set_new(root, "verdict",
                            json_pack("{s:s, s:I, s:I, s:s}", "verdict",
                                      dnnmem_verdict_name(r->verdict), "capacity_bytes",
                                      (json_int_t)r->capacity_bytes, "margin_bytes",
                                      (json_int_t)r->margin_bytes, "largest_component",
                                      keys[r->largest_category]));
    if (root && r->n_modules)
        json_object_set_new(root, "by_module", modules_json(r, keys));
    if (root && r->world_size > 1) { /* docs/parallel.md: one row per distinct rank */
        json_t *ranks = json_array();
        for (size_t k = 0; ranks && k < r->n_ranks; k++) {
            const struct dnnmem_rank_info *q = &r->ranks[k];
            json_array_append_new(ranks, json_pack("{s:i, s:i, s:I, s:I, s:I, s:s}", "first", q->first,
                                                   "last", q->last, "total_bytes",
                                                   (json_int_t)q->total_bytes,
                                                   "peak_allocated_bytes",
                                                   (json_int_t)q->peak_allocated,
                                                   "peak_reserved_bytes",
                                                   (json_int_t)q->peak_reserved, "verdict",
                                                   dnnmem_verdict_name(q->verdict)));
        }
        json_object_set_new(root, "parallel",
                            json_pack("{s:i, s:I, s:i, s:i, s:b, s:o*}", "world_size",
                                      r->world_size, "global_batch", (json_int_t)r->global_batch,
                                      "rank", r->rank, "tensor_parallel", r->tensor_parallel,
                                      "sequence_parallel", r->sequence_parallel, "ranks", ranks));
    }
    if (!root)
        return -1;
    int rc = json_dumpf(root, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', f);
    json_decref(root);
    return rc == 0 && !ferror(f) ? 0 : -1;
}
