/* text.c: the result for people: assumptions, then the number, then why. */
#include "dnnmem-impl.h"

#include <string.h>

static void dims_str(const struct dnnmem_tensor_info *ti, char *buf, size_t cap)
{
    if (ti->rank < 0) {
        snprintf(buf, cap, "-");
        return;
    }
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ti->rank && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? "," : "", (long long)ti->dims[d]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* The bytes at the peak by module scope (--by-module): a column per kind
 * that holds anything at the peak, then the module's live bytes; the last
 * row sums each column (the breakdown's categories). */
static void modules_table(const struct dnnmem_result *r, FILE *f)
{
    static const char *const head[DNNMEM_CAT_COUNT] = {
        [DNNMEM_CAT_WEIGHT] = "weights",     [DNNMEM_CAT_WORKSPACE] = "workspaces",
        [DNNMEM_CAT_INPUT] = "inputs",       [DNNMEM_CAT_ACTIVATION] = "activations",
        [DNNMEM_CAT_SAVED] = "saved",        [DNNMEM_CAT_GRADIENT] = "gradients",
        [DNNMEM_CAT_OPTIMIZER] = "optimizer", [DNNMEM_CAT_TEMPORARY] = "temporaries",
        [DNNMEM_CAT_KV_CACHE] = "kv cache"};
    static const int order[DNNMEM_CAT_COUNT] = {
        DNNMEM_CAT_WEIGHT,   DNNMEM_CAT_GRADIENT,  DNNMEM_CAT_OPTIMIZER,
        DNNMEM_CAT_SAVED,    DNNMEM_CAT_ACTIVATION, DNNMEM_CAT_TEMPORARY,
        DNNMEM_CAT_KV_CACHE, DNNMEM_CAT_INPUT,     DNNMEM_CAT_WORKSPACE};
    int width = 12;
    for (size_t k = 0; k < r->n_modules; k++) {
        int len = (int)strlen(r->modules[k].name);
        width = len > width ? (len < 60 ? len : 60) : width;
    }
    char b1[32];
    fprintf(f, "by module at the peak (depth %d; requested bytes)\n  %-*s", r->module_depth, width,
            "module");
    for (int i = 0; i < DNNMEM_CAT_COUNT; i++)
        if (r->category_bytes[order[i]])
            fprintf(f, " %11s", head[order[i]]);
    fprintf(f, " %11s\n", "live");
    uint64_t live = 0;
    for (size_t k = 0; k <= r->n_modules; k++) {
        const struct dnnmem_module_info *mi = k < r->n_modules ? &r->modules[k] : NULL;
        fprintf(f, "  %-*s", width, mi ? mi->name : "total");
        for (int i = 0; i < DNNMEM_CAT_COUNT; i++)
            if (r->category_bytes[order[i]]) {
                uint64_t v = mi ? mi->category_bytes[order[i]] : r->category_bytes[order[i]];
                fprintf(f, " %11s", v ? dm_format_bytes(v, b1) : "-");
            }
        live += mi ? mi->live_bytes : 0;
        fprintf(f, " %11s\n", dm_format_bytes(mi ? mi->live_bytes : live, b1));
    }
}

/* The advice (dnnmem_result_advise), ranked, each with what it costs. */
static void print_advice(const struct dnnmem_result *r, FILE *f)
{
    if (!r->advice)
        return;
    if (!r->n_advice) { /* asked for, but no candidate lowers the estimate */
        fprintf(f, "what would change it: none of the changes tried lowers the estimate "
                   "(docs/advice.md)\n");
        return;
    }
    fprintf(f, "what would change it (those that fit first, then the cheapest; docs/advice.md)\n");
    for (size_t k = 0; k < r->n_advice; k++) {
        const struct dnnmem_advice *a = &r->advice[k];
        if (strlen(a->change) > 46)
            fprintf(f, "  %s\n", a->change);
        bool long_change = strlen(a->change) > 46; /* on a line of its own */
        fprintf(f, "  %-46s %10.1f MiB  %s\n      %s\n", long_change ? "" : a->change,
                (double)a->total_bytes / 1048576.0, dnnmem_verdict_name(a->verdict), a->cost);
    }
}

int dnnmem_report_text(const struct dnnmem_result *r, const dnnmem_model *m, FILE *f)
{
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    char b1[32], b2[32], b3[32];
    fprintf(f, "model        %s (%s, opset %lld, %zu nodes, %zu weight tensors)\n", info.path,
            info.format, (long long)info.opset, info.n_nodes, info.n_weights);
    if (info.checkpoint)
        fprintf(f, "checkpoint   %s: %zu tensors, %s%s%s; %s\n", info.checkpoint,
                info.checkpoint_tensors, dm_format_bytes(info.checkpoint_bytes, b1),
                *info.checkpoint_dtype ? " " : "", info.checkpoint_dtype,
                info.checkpoint_shards_missing
                    ? "names match config.json (shards absent: shapes unchecked)"
                    : "names and shapes match config.json");
    fprintf(f, "assumptions\n");
    for (size_t k = 0; k < r->n_assumptions; k++)
        fprintf(f, "  %-14s %s%s\n", r->assumptions[k].key, r->assumptions[k].value,
                strcmp(r->assumptions[k].source, "default") == 0 ? "  [default]" : "");
    for (size_t k = 0; k < r->n_warnings; k++)
        fprintf(f, "warning      %s\n", r->warnings[k]);
    char b4[32];
    if (r->framework != DNNMEM_FW_PYTORCH) {
        static const char *const how[] = {
            [DNNMEM_FW_TENSORFLOW] = "TensorFlow reserves its whole memory limit at start "
                                     "(no allow_growth)",
            [DNNMEM_FW_JAX] = "JAX preallocates its whole memory fraction at the first op",
            [DNNMEM_FW_MXNET] = "", [DNNMEM_FW_PYTORCH] = ""};
        fprintf(f, "\nneeds        %s  (peak in use %s + CUDA context %s: what the job needs)\n",
                dm_format_bytes(r->needed_bytes, b1), dm_format_bytes(r->peak_allocated, b2),
                dm_format_bytes(r->context_bytes, b3));
        if (r->limit_unknown)
            fprintf(f, "process      the whole memory limit + CUDA context: %s, whatever the job "
                       "needs; nvidia-smi shows that (--gpu or --memory sizes it)\n",
                    how[r->framework]);
        else
            fprintf(f, "process      %s  (reserved %s + CUDA context %s): what nvidia-smi shows%s%s\n",
                    dm_format_bytes(r->total_bytes, b1), dm_format_bytes(r->peak_reserved, b2),
                    dm_format_bytes(r->context_bytes, b3),
                    r->reserved_is_limit ? "; " : r->framework == DNNMEM_FW_MXNET
                                                     ? "; the pool's buffers, in use or cached"
                                                     : "; regions grown as needed",
                    r->reserved_is_limit ? how[r->framework] : "");
    } else if (r->context_bytes)
        fprintf(f, "\npeak         %s  (reserved %s + CUDA context %s; allocated %s)\n",
                dm_format_bytes(r->total_bytes, b1), dm_format_bytes(r->peak_reserved, b2),
                dm_format_bytes(r->context_bytes, b3), dm_format_bytes(r->peak_allocated, b4));
    else
        fprintf(f, "\npeak         %s\n", dm_format_bytes(r->total_bytes, b1));
    if (r->peak_step)
        fprintf(f, "at           %s, step %d, node %zu of %zu: '%s' (%s)\n", r->peak_phase,
                r->peak_iteration, r->peak_step, r->n_steps, r->peak_node, r->peak_op);
    else if (r->peak_op[0]) /* the loss, outside the graph's nodes */
        fprintf(f, "at           %s, step %d, the loss: %s\n", r->peak_phase, r->peak_iteration,
                r->peak_op);
    else
        fprintf(f, "at           %s, step %d\n", r->peak_phase, r->peak_iteration);
    fprintf(f, "breakdown at the peak\n");
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        if (r->category_bytes[c] || c == DNNMEM_CAT_WEIGHT || c == DNNMEM_CAT_INPUT ||
            c == DNNMEM_CAT_ACTIVATION)
            fprintf(f, "  %-18s %12s\n", dnnmem_category_name((enum dnnmem_category)c),
                    dm_format_bytes(r->category_bytes[c], b1));
    fprintf(f, "  %-18s %12s\n", "rounding", dm_format_bytes(r->rounding_bytes, b1));
    if (r->slack_bytes)
        fprintf(f, "  %-18s %12s  (reserved, not allocated)\n", "allocator slack",
                dm_format_bytes(r->slack_bytes, b1));
    if (r->context_bytes)
        fprintf(f, "  %-18s %12s\n", "cuda context", dm_format_bytes(r->context_bytes, b1));
    fprintf(f, "  %-18s %12s\n", r->limit_unknown ? "total (needs)" : "total",
            dm_format_bytes(r->total_bytes, b1));
    if (r->world_size > 1) { /* docs/parallel.md */
        fprintf(f, "ranks        %d, global batch %lld; this report is rank %d, the most loaded\n",
                r->world_size, (long long)r->global_batch, r->rank);
        for (size_t k = 0; k < r->n_ranks; k++) {
            const struct dnnmem_rank_info *q = &r->ranks[k];
            char who[32];
            if (q->first == q->last)
                snprintf(who, sizeof who, "rank %d", q->first);
            else
                snprintf(who, sizeof who, "ranks %d-%d", q->first, q->last);
            fprintf(f, "  %-14s %12s  (allocated %s)%s%s\n", who, dm_format_bytes(q->total_bytes, b1),
                    dm_format_bytes(q->peak_allocated, b2), q->verdict != DNNMEM_VERDICT_NONE ? "  " : "",
                    q->verdict != DNNMEM_VERDICT_NONE ? dnnmem_verdict_name(q->verdict) : "");
        }
    }
    if (r->verdict != DNNMEM_VERDICT_NONE) {
        char b5[32];
        uint64_t gap = r->margin_bytes < 0 ? (uint64_t)-r->margin_bytes : (uint64_t)r->margin_bytes;
        fprintf(f, "verdict      %s in %s: %s %s%s%s\n", dnnmem_verdict_name(r->verdict),
                dm_format_bytes(r->capacity_bytes, b1),
                r->margin_bytes < 0 ? "short by" : "margin", dm_format_bytes(gap, b2),
                r->margin_bytes < 0 ? "; the largest part is " : "",
                r->margin_bytes < 0 ? dnnmem_category_name(r->largest_category) : "");
        if (r->margin_bytes < 0)
            fprintf(f, "             (%s of the peak)\n",
                    dm_format_bytes(r->category_bytes[r->largest_category], b5));
        if (r->alloc_retries)
            fprintf(f, "             only after the allocator frees its cache %llu time%s to stay "
                       "within the device (peaks above are of that run)\n",
                    (unsigned long long)r->alloc_retries, r->alloc_retries == 1 ? "" : "s");
    }
    print_advice(r, f);
    if (r->n_live)
        fprintf(f, "live at the peak, by kind (the largest of each; %zu tensors in all)\n",
                r->n_live_total);
    for (size_t k = 0; k < r->n_live; k++) {
        const struct dnnmem_tensor_info *ti = &r->live[k];
        if (k == 0 || ti->category != r->live[k - 1].category)
            fprintf(f, "  %s: %zu tensor%s, %s\n", dnnmem_category_name(ti->category),
                    r->category_count[ti->category], r->category_count[ti->category] == 1 ? "" : "s",
                    dm_format_bytes(r->category_bytes[ti->category], b1));
        char dims[160];
        dims_str(ti, dims, sizeof dims);
        fprintf(f, "    %12s  %-8s %-20s %s%s%s\n", dm_format_bytes(ti->allocated, b1), ti->dtype,
                dims, ti->name, ti->producer_op[0] ? "  <- " : "", ti->producer_op);
    }
    if (r->n_modules)
        modules_table(r, f);
    return ferror(f) ? -1 : 0;
}

static void compare_row(FILE *f, const char *what, uint64_t a, uint64_t b)
{
    char b1[32], b2[32], b3[32];
    uint64_t d = a > b ? a - b : b - a;
    if (!a && !b)
        return;
    fprintf(f, "  %-20s %12s %12s  %s%-12s", what, dm_format_bytes(a, b1), dm_format_bytes(b, b2),
            b > a ? "+" : b < a ? "-" : " ", dm_format_bytes(d, b3));
    if (a)
        fprintf(f, " (%+.1f%%)", 100.0 * ((double)b - (double)a) / (double)a);
    fputc('\n', f);
}

int dnnmem_report_compare(const struct dnnmem_result *a, const char *label_a,
                          const struct dnnmem_result *b, const char *label_b, FILE *f)
{
    fprintf(f, "A  %s\nB  %s\n\n  %-20s %12s %12s  %s\n", label_a, label_b, "", "A", "B",
            "change");
    compare_row(f, "total", a->total_bytes, b->total_bytes);
    compare_row(f, "peak allocated", a->peak_allocated, b->peak_allocated);
    compare_row(f, "peak reserved", a->peak_reserved, b->peak_reserved);
    fprintf(f, "  at the allocated peak:\n");
    for (int c = 0; c < DNNMEM_CAT_COUNT; c++)
        compare_row(f, dnnmem_category_name((enum dnnmem_category)c), a->category_bytes[c],
                    b->category_bytes[c]);
    compare_row(f, "rounding", a->rounding_bytes, b->rounding_bytes);
    compare_row(f, "allocator slack", a->slack_bytes, b->slack_bytes);
    compare_row(f, "cuda context", a->context_bytes, b->context_bytes);
    const char *where_a = a->peak_node[0] ? a->peak_node : a->peak_op; /* a node, or the loss */
    const char *where_b = b->peak_node[0] ? b->peak_node : b->peak_op;
    fprintf(f, "  peak at              A: %s, step %d%s%s\n", a->peak_phase, a->peak_iteration,
            where_a[0] ? ", " : "", where_a);
    fprintf(f, "                       B: %s, step %d%s%s\n", b->peak_phase, b->peak_iteration,
            where_b[0] ? ", " : "", where_b);
    const struct dnnmem_result *side[2] = {a, b};
    for (int k = 0; k < 2; k++) { /* with a device (--gpu, --memory): each verdict */
        const struct dnnmem_result *x = side[k];
        if (x->verdict == DNNMEM_VERDICT_NONE)
            continue;
        char b1[32], b2[32];
        uint64_t gap = x->margin_bytes < 0 ? (uint64_t)-x->margin_bytes : (uint64_t)x->margin_bytes;
        fprintf(f, "  %-20s %s: %s in %s: %s %s\n", k == 0 || a->verdict == DNNMEM_VERDICT_NONE ? "verdict" : "",
                k ? "B" : "A", dnnmem_verdict_name(x->verdict), dm_format_bytes(x->capacity_bytes, b1),
                x->margin_bytes < 0 ? "short by" : "margin", dm_format_bytes(gap, b2));
    }
    return ferror(f) ? -1 : 0;
}
