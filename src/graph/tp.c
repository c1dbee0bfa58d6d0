/*
 * tp.c: tensor parallelism's plan on a graph (--tp N, docs/parallel.md):
 * which parameters each rank holds 1/N of, and along which dim. What a
 * rank then runs is the same graph with those parameters' shards, so shape
 * inference makes every activation's local shape (src/shape/infer.c divides
 * the dims this plan names).
 *
 * The rules (Megatron-LM's parallel linears, megatron/core/tensor_parallel/
 * layers.py ColumnParallelLinear and RowParallelLinear; PyTorch's
 * torch/distributed/tensor/parallel/style.py ColwiseParallel and
 * RowwiseParallel, which the measured rows run):
 *
 * T1 A linear (Gemm, or MatMul by a 2-D weight, either possibly through a
 *    Transpose of it) whose input is whole on every rank is column-parallel:
 *    its weight's output dim and its bias are split, its output is this
 *    rank's slice of the features (ColwiseParallel: Shard(0) of nn.Linear's
 *    weight, output_layouts Shard(-1)).
 * T2 The slice flows through ops that work feature by feature: elementwise
 *    ops (their other operands constants, the column linear's bias, or
 *    slices themselves), activations, dropout, softmax, reshapes and
 *    transposes (attention's heads: a rank holds heads / N of them, which a
 *    view with -1 heads gives), and the products of two slices (attention's
 *    scores and their product with v).
 * T3 A linear that reads a slice is row-parallel: its weight's input dim is
 *    split, its bias stays whole, and its output is whole again (the partial
 *    sums all-reduced: RowwiseParallel's output_layouts Replicate).
 * T4 A column-parallel candidate whose slice reaches no row-parallel linear
 *    (a classifier head) stays replicated, as the measured plan and
 *    Megatron's non-parallel output layer do; the plan is recomputed until
 *    no such candidate is left.
 * T5 A slice read by any other op (a norm, a residual add with a whole
 *    tensor, a reduction, a graph output), or a split parameter read as a
 *    whole by another node, is a pairing dnnmem does not recognise: an
 *    error naming the node.
 * T7 After inference (src/estimate/shapes.c, tp_check), every activation a
 *    rank makes must be the whole model's shape, or a slice's with one dim
 *    divided by N: a view naming a count the split changes (the heads
 *    written out, the sequence left -1) would otherwise infer a wrong shape
 *    silently; the error names the node. Shape vectors and index
 *    arguments (ONNX metadata inputs, integer initializers) are constants.
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

enum tp_state { TP_ACT = 0, TP_CONST, TP_WEIGHT, TP_SLICE };

/* Ops a slice passes through unchanged in kind (T2): input 0 is the slice,
 * the others constants. */
static const enum dm_op tp_unary[] = {
    DM_OP_Relu, DM_OP_Gelu, DM_OP_Erf, DM_OP_Sigmoid, DM_OP_Tanh, DM_OP_Silu, DM_OP_HardSwish,
    DM_OP_HardSigmoid, DM_OP_LeakyRelu, DM_OP_Elu, DM_OP_Celu, DM_OP_Selu, DM_OP_Softplus,
    DM_OP_Softsign, DM_OP_Exp, DM_OP_Log, DM_OP_Sqrt, DM_OP_Neg, DM_OP_Abs, DM_OP_Reciprocal,
    DM_OP_Cast, DM_OP_CastLike, DM_OP_Identity, DM_OP_Dropout, DM_OP_Softmax, DM_OP_LogSoftmax,
    DM_OP_Reshape, DM_OP_Transpose, DM_OP_Squeeze, DM_OP_Unsqueeze, DM_OP_Flatten, DM_OP_Clip,
    DM_OP_Detach,
};
/* Elementwise ops of several operands (T2). */
static const enum dm_op tp_binary[] = {
    DM_OP_Add, DM_OP_Sub, DM_OP_Mul, DM_OP_Div, DM_OP_Pow, DM_OP_Max, DM_OP_Min, DM_OP_Where,
};

static bool meta(const struct dm_node *n, int k)
{
    return k < 32 && ((dm_ops[n->op].meta_inputs >> k) & 1u);
}

static bool op_in(enum dm_op op, const enum dm_op *list, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (list[k] == op)
            return true;
    return false;
}

struct tp_ctx {
    const struct dm_graph *g;
    int8_t *st;        /* per tensor: enum tp_state */
    int32_t *wref;     /* per tensor (TP_WEIGHT): the parameter it is a view of */
    bool *wtrans;      /* per tensor (TP_WEIGHT): a transpose of it */
    int32_t *region;   /* per tensor (TP_SLICE): its region (a union-find root after find) */
    int32_t *parent;   /* per region (one per column candidate node) */
    int32_t *col_node; /* per region: the column-parallel linear that opened it */
    int32_t *bad;      /* per region: the first node reading a slice that T2 does not allow */
    bool *has_row;     /* per region */
    int32_t n_regions;
    bool *forced;      /* per node: a column candidate kept replicated (T4) */
    int8_t *split;     /* per tensor: the plan's dim, -1 */
    int32_t *split_by; /* per tensor: the node that split it */
};

static int32_t find(struct tp_ctx *c, int32_t r)
{
    while (c->parent[r] != r)
        r = c->parent[r] = c->parent[c->parent[r]];
    return r;
}

static void unite(struct tp_ctx *c, int32_t a, int32_t b)
{
    a = find(c, a);
    b = find(c, b);
    if (a == b)
        return;
    c->parent[b] = a;
    c->has_row[a] = c->has_row[a] || c->has_row[b];
    if (c->bad[a] < 0)
        c->bad[a] = c->bad[b];
}

static void mark_bad(struct tp_ctx *c, int32_t r, int32_t node)
{
    r = find(c, r);
    if (c->bad[r] < 0)
        c->bad[r] = node;
}

static void set_split(struct tp_ctx *c, int32_t w, int dim, int32_t node)
{
    if (c->split[w] < 0) {
        c->split[w] = (int8_t)dim;
        c->split_by[w] = node;
    } else if (c->split[w] != dim) {
        c->split[w] = 99; /* two dims: T5 */
    }
}

/* A linear's weight operand: the parameter and whether its dims are [in, out]
 * as the product reads them (Gemm's transB, a Transpose in between). */
static bool linear_weight(const struct tp_ctx *c, const struct dm_node *n, int32_t *w, int *out_dim)
{
    if ((n->op != DM_OP_Gemm && n->op != DM_OP_MatMul) || n->n_in < 2 || n->in[1] < 0 ||
        c->st[n->in[1]] != TP_WEIGHT)
        return false;
    *w = c->wref[n->in[1]];
    if (c->g->tensors[*w].rank != 2)
        return false;
    bool t = c->wtrans[n->in[1]] != (n->op == DM_OP_Gemm && dm_attr_int(n, "transB", 0) != 0);
    *out_dim = t ? 0 : 1; /* [out, in] when transposed once */
    return true;
}

/* One pass over the nodes in order: the states, the regions, the splits. */
static void pass(struct tp_ctx *c)
{
    const struct dm_graph *g = c->g;
    for (int32_t i = 0; i < g->n_tensors; i++) {
        c->st[i] = g->tensors[i].role != DM_ROLE_WEIGHT ? TP_ACT
                   : dm_dtype_is_float(g->tensors[i].dtype) ? TP_WEIGHT
                                                            : TP_CONST; /* a shape, indices */
        c->wref[i] = i;
        c->wtrans[i] = false;
        c->split[i] = -1;
        c->split_by[i] = -1;
        c->region[i] = -1;
    }
    c->n_regions = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        int32_t x = n->n_in > 0 ? n->in[0] : -1;
        int32_t w;
        int od;
        int8_t out = TP_ACT;
        int32_t reg = -1;
        bool any_slice = false, all_const = true;
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0 || meta(n, k)) /* a shape, axes: read as metadata */
                continue;
            any_slice = any_slice || c->st[n->in[k]] == TP_SLICE;
            all_const = all_const && c->st[n->in[k]] == TP_CONST;
        }
        if (n->op == DM_OP_Constant || n->op == DM_OP_Shape || n->op == DM_OP_Size ||
            (all_const && n->n_in > 0)) {
            out = TP_CONST;
        } else if (x >= 0 && linear_weight(c, n, &w, &od) &&
                   (c->st[x] == TP_ACT || c->st[x] == TP_SLICE)) {
            int32_t bias = n->op == DM_OP_Gemm && n->n_in > 2 ? n->in[2] : -1;
            if (c->st[x] == TP_SLICE) { /* T3 */
                set_split(c, w, 1 - od, i);
                c->has_row[find(c, c->region[x])] = true;
            } else if (!c->forced[i]) { /* T1 */
                set_split(c, w, od, i);
                reg = c->n_regions++;
                c->parent[reg] = reg;
                c->col_node[reg] = i;
                c->bad[reg] = -1;
                c->has_row[reg] = false;
                if (bias >= 0 && c->st[bias] == TP_WEIGHT && g->tensors[c->wref[bias]].rank == 1)
                    set_split(c, c->wref[bias], 0, i);
                out = TP_SLICE;
            }
        } else if (x >= 0 && c->st[x] == TP_WEIGHT &&
                   (n->op == DM_OP_Transpose || n->op == DM_OP_Cast || n->op == DM_OP_Identity)) {
            int64_t np = 0;
            const int64_t *perm = dm_attr_ints(n, "perm", &np);
            bool swap = n->op == DM_OP_Transpose && (!perm || (np == 2 && perm[0] == 1));
            c->st[n->out[0]] = TP_WEIGHT;
            c->wref[n->out[0]] = c->wref[x];
            c->wtrans[n->out[0]] = c->wtrans[x] != swap;
            continue;
        } else if (any_slice) {
            bool unary = op_in(n->op, tp_unary, sizeof tp_unary / sizeof *tp_unary);
            bool binary = op_in(n->op, tp_binary, sizeof tp_binary / sizeof *tp_binary);
            bool product = n->op == DM_OP_MatMul || n->op == DM_OP_Attention;
            out = TP_SLICE;
            for (int k = 0; k < n->n_in; k++) {
                int32_t y = n->in[k];
                if (y < 0 || c->st[y] == TP_CONST || meta(n, k))
                    continue;
                if (c->st[y] == TP_SLICE) {
                    if (reg < 0)
                        reg = c->region[y];
                    else
                        unite(c, reg, c->region[y]);
                    continue;
                }
                if (binary && c->st[y] == TP_WEIGHT && g->tensors[c->wref[y]].rank == 1) {
                    set_split(c, c->wref[y], 0, i); /* the column linear's bias */
                    continue;
                }
                out = TP_ACT; /* a whole operand: T5 */
            }
            if (out == TP_ACT || !(unary || binary || product)) {
                for (int k = 0; k < n->n_in; k++)
                    if (n->in[k] >= 0 && c->st[n->in[k]] == TP_SLICE)
                        mark_bad(c, c->region[n->in[k]], i);
                out = TP_ACT;
                reg = -1;
            }
        }
        for (int k = 0; k < n->n_out; k++) {
            if (n->out[k] < 0)
                continue;
            c->st[n->out[k]] = out;
            c->region[n->out[k]] = reg;
            if (out == TP_SLICE && g->tensors[n->out[k]].is_output)
                mark_bad(c, reg, i);
        }
    }
}

/* A split parameter that a node reads other than as its linear's weight or
 * bias (a tied embedding): T5. Returns the node, -1. */
static int32_t whole_reader(const struct tp_ctx *c, int32_t *param)
{
    const struct dm_graph *g = c->g;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int32_t y = n->in[k];
            if (y < 0 || g->tensors[y].role != DM_ROLE_WEIGHT || c->split[y] < 0)
                continue;
            int32_t w;
            int od;
            bool ok = (k == 1 && linear_weight(c, n, &w, &od)) ||
                      ((n->op == DM_OP_Transpose || n->op == DM_OP_Cast ||
                        n->op == DM_OP_Identity) && k == 0) ||
                      (k == 2 && n->op == DM_OP_Gemm) ||
                      (op_in(n->op, tp_binary, sizeof tp_binary / sizeof *tp_binary) &&
                       g->tensors[y].rank == 1);
            if (!ok || c->split[y] == 99) {
                *param = y;
                return i;
            }
        }
    }
    return -1;
}

enum dnnmem_status dm_tp_plan(const struct dm_graph *g, int tp, int8_t *split, int8_t *role,
                              struct dm_tp_summary *sum, struct dnnmem_error *err)
{
    size_t nt = (size_t)g->n_tensors + 1, nn = (size_t)g->n_nodes + 1;
    struct tp_ctx c = {.g = g};
    c.st = calloc(nt, sizeof *c.st);
    c.wref = calloc(nt, sizeof *c.wref);
    c.wtrans = calloc(nt, sizeof *c.wtrans);
    c.region = calloc(nt, sizeof *c.region);
    c.split_by = calloc(nt, sizeof *c.split_by);
    c.parent = calloc(nn, sizeof *c.parent);
    c.col_node = calloc(nn, sizeof *c.col_node);
    c.bad = calloc(nn, sizeof *c.bad);
    c.has_row = calloc(nn, sizeof *c.has_row);
    c.forced = calloc(nn, sizeof *c.forced);
    c.split = split;
    enum dnnmem_status s = DNNMEM_OK;
    if (!c.st || !c.wref || !c.wtrans || !c.region || !c.split_by || !c.parent || !c.col_node ||
        !c.bad || !c.has_row || !c.forced) {
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
        goto done;
    }
    for (bool again = true; again;) { /* T4 */
        pass(&c);
        again = false;
        for (int32_t r = 0; r < c.n_regions; r++)
            if (!c.has_row[find(&c, r)]) {
                c.forced[c.col_node[r]] = true;
                again = true;
            }
    }
    *sum = (struct dm_tp_summary){0};
    for (int32_t r = 0; r < c.n_regions; r++) {
        int32_t root = find(&c, r), bad = c.bad[root];
        if (bad >= 0) {
            const struct dm_node *n = &g->nodes[bad], *col = &g->nodes[c.col_node[root]];
            s = dm_fail(err, DNNMEM_E_UNSUPPORTED,
                        "%s: --tp %d: node '%s' (%s) reads the column-parallel output of '%s' "
                        "other than feature by feature; modelled: column-parallel linears whose "
                        "outputs reach row-parallel linears through elementwise ops, "
                        "activations, softmax, reshapes, transposes and attention products",
                        g->path, tp, n->name, dm_ops[n->op].name, col->name);
            goto done;
        }
        sum->n_col++;
        if (!sum->first_col)
            sum->first_col = g->nodes[c.col_node[r]].name;
    }
    int32_t param = -1, reader = whole_reader(&c, &param);
    if (reader >= 0) {
        s = dm_fail(err, DNNMEM_E_UNSUPPORTED,
                    "%s: --tp %d: node '%s' (%s) reads parameter '%s', which the tensor-parallel "
                    "plan splits (its linear '%s'), as a whole (a tied weight is not modelled)",
                    g->path, tp, g->nodes[reader].name, dm_ops[g->nodes[reader].op].name,
                    g->tensors[param].name,
                    c.split_by[param] >= 0 ? g->nodes[c.split_by[param]].name : "?");
        goto done;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        int32_t w;
        int od;
        const struct dm_node *n = &g->nodes[i];
        role[i] = DM_TP_NONE;
        if (!linear_weight(&c, n, &w, &od) || c.split[w] < 0)
            continue;
        role[i] = c.split[w] == od ? DM_TP_COL : DM_TP_ROW;
        if (c.split[w] == 1 - od) {
            sum->n_row++;
            if (!sum->first_row)
                sum->first_row = n->name;
        }
    }
    for (int32_t i = 0; i < g->n_tensors; i++) {
        if (split[i] >= 0)
            sum->n_split++;
        else if (c.st[i] == TP_SLICE)
            split[i] = DM_TP_SLICE;
    }
    if (sum->n_col == 0)
        s = dm_fail(err, DNNMEM_E_UNSUPPORTED,
                    "%s: --tp %d: no column-parallel linear whose output reaches a row-parallel "
                    "one (an MLP's fc1 and fc2, attention's q, k, v and out projection) was found",
                    g->path, tp);
done:
    free(c.st);
    free(c.wref);
    free(c.wtrans);
    free(c.region);
    free(c.split_by);
    free(c.parent);
    free(c.col_node);
    free(c.bad);
    free(c.has_row);
    free(c.forced);
    return s;
}

/*
 * Sequence parallelism (--sp with --tp; docs/parallel.md "Sequence
 * parallel"), as torch.distributed.tensor.parallel runs it (style.py,
 * SequenceParallel on the norms, ColwiseParallel(input_layouts=Shard(1)),
 * RowwiseParallel(output_layouts=Shard(1)); torch 2.13) and Megatron-LM's
 * sequence_parallel regions (megatron/core/tensor_parallel/mappings.py,
 * gather_from_sequence_parallel_region, reduce_scatter_to_sequence_parallel_
 * region): what is whole on every rank under plain tensor parallelism is split
 * along the sequence instead.
 *
 * S1 The graph's inputs of rank 3 or more arrive split along dim 1 (the
 *    sequence of a [B, S, ...] tensor: SequenceParallel(sequence_dim=1)'s
 *    default, which takes a plain tensor for this rank's Shard(1)); a graph
 *    with no such input has no sequence to split: an error.
 * S2 The split passes through elementwise ops (other operands constants,
 *    weights or of rank below 2: a norm's weight, a bias), activations,
 *    dropout, a softmax not over dim 1, a LayerNormalization over the last
 *    dims, and a reduction that keeps dim 1. A reduction over dim 1 makes a
 *    whole tensor (the head's mean over the sequence).
 * S3 A column-parallel linear (T1) reading a split input all-gathers it
 *    (role DM_TP_COL_SP): its output is a slice as under T1.
 * S4 A row-parallel linear's (T3) output is split again: its Partial sums
 *    reduce-scattered along dim 1 (role DM_TP_ROW_SP).
 * S5 Any other reader of a split tensor (a reshape or a transpose of it, a
 *    product with another activation, a linear that is not column-parallel,
 *    a graph output) is not modelled: an error naming the node.
 * Shapes are inferred whole along the sequence first (the views of the
 * gathered q, k, v name the whole sequence, as the measured model's do);
 * shapes.c then divides dim 1 of every split tensor.
 */
static const enum dm_op sp_unary[] = {
    DM_OP_Relu, DM_OP_Gelu, DM_OP_Erf, DM_OP_Sigmoid, DM_OP_Tanh, DM_OP_Silu, DM_OP_HardSwish,
    DM_OP_HardSigmoid, DM_OP_LeakyRelu, DM_OP_Elu, DM_OP_Celu, DM_OP_Selu, DM_OP_Softplus,
    DM_OP_Softsign, DM_OP_Exp, DM_OP_Log, DM_OP_Sqrt, DM_OP_Neg, DM_OP_Abs, DM_OP_Reciprocal,
    DM_OP_Cast, DM_OP_CastLike, DM_OP_Identity, DM_OP_Dropout, DM_OP_Clip, DM_OP_Detach,
};
static const enum dm_op sp_reduce[] = {
    DM_OP_ReduceL1, DM_OP_ReduceL2, DM_OP_ReduceLogSum, DM_OP_ReduceLogSumExp, DM_OP_ReduceMax,
    DM_OP_ReduceMean, DM_OP_ReduceMin, DM_OP_ReduceProd, DM_OP_ReduceSum, DM_OP_ReduceSumSquare,
};

static int norm_axis(int64_t a, int rank)
{
    return (int)(a < 0 ? a + rank : a);
}

/* S2: whether reduction n keeps dim 1 of its rank-r input (false: it reduces
 * it, or the axes are not known). */
static bool reduce_keeps_seq(const struct dm_node *n, const struct dm_tinfo *t, int r)
{
    int64_t cnt = 0;
    const int64_t *ax = dm_attr_ints(n, "axes", &cnt);
    if (!ax && n->n_in > 1 && n->in[1] >= 0 && t[n->in[1]].value && !t[n->in[1]].value->is_float) {
        ax = t[n->in[1]].value->i;
        cnt = t[n->in[1]].value->n;
    }
    if (!ax || cnt <= 0)
        return false; /* every axis */
    bool keepdims = dm_attr_int(n, "keepdims", 1) != 0;
    for (int64_t k = 0; k < cnt; k++) {
        int a = norm_axis(ax[k], r);
        if (a <= 1 && (a == 1 || !keepdims))
            return false; /* the sequence reduced, or moved to dim 0 */
    }
    return true;
}

enum dnnmem_status dm_sp_plan(const struct dm_graph *g, const struct dm_tinfo *t,
                              int8_t *split, int8_t *role, int32_t *n_gather,
                              struct dnnmem_error *err)
{
    *n_gather = 0;
    int32_t n_in = 0;
    for (int32_t k = 0; k < g->n_inputs; k++) { /* S1 */
        int32_t x = g->inputs[k];
        if (g->tensors[x].role == DM_ROLE_INPUT && t[x].rank >= 3 && split[x] == -1) {
            split[x] = DM_TP_SEQ;
            n_in++;
        }
    }
    if (n_in == 0)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --sp: no input has a sequence to split (modelled: inputs [B, S, ...] "
                       "of rank 3 or more, split along dim 1)", g->path);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        bool out_seq = false;
        int32_t x = -1;
        for (int k = 0; k < n->n_in && x < 0; k++)
            if (n->in[k] >= 0 && !meta(n, k) && split[n->in[k]] == DM_TP_SEQ)
                x = n->in[k];
        if (role[i] == DM_TP_ROW) { /* S4 */
            role[i] = DM_TP_ROW_SP;
            out_seq = true;
        } else if (x < 0 || n->op == DM_OP_Shape || n->op == DM_OP_Size) {
            continue;
        } else if (role[i] == DM_TP_COL) { /* S3 */
            if (n->in[0] == x) {
                role[i] = DM_TP_COL_SP;
                (*n_gather)++;
            }
            continue;
        } else {
            int r = t[x].rank;
            bool ok = false;
            if (op_in(n->op, sp_unary, sizeof sp_unary / sizeof *sp_unary)) {
                ok = out_seq = true;
            } else if (n->op == DM_OP_Softmax || n->op == DM_OP_LogSoftmax) {
                ok = out_seq = norm_axis(dm_attr_int(n, "axis", -1), r) != 1;
            } else if (n->op == DM_OP_LayerNormalization) {
                ok = out_seq = norm_axis(dm_attr_int(n, "axis", -1), r) >= 2;
            } else if (op_in(n->op, sp_reduce, sizeof sp_reduce / sizeof *sp_reduce)) {
                ok = true;
                out_seq = reduce_keeps_seq(n, t, r);
            } else if (op_in(n->op, tp_binary, sizeof tp_binary / sizeof *tp_binary)) {
                ok = out_seq = true;
                for (int k = 0; k < n->n_in; k++) {
                    int32_t y = n->in[k];
                    if (y < 0 || meta(n, k) || split[y] == DM_TP_SEQ)
                        continue;
                    enum dm_role yr = g->tensors[y].role;
                    if (!(yr == DM_ROLE_WEIGHT || yr == DM_ROLE_CONSTANT || t[y].is_const ||
                          t[y].rank < 2))
                        ok = false; /* a whole activation beside a split one */
                }
            }
            if (!ok)
                return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                               "%s: --sp: node '%s' (%s) reads '%s', which sequence parallelism "
                               "splits along dim 1 (the sequence); modelled: elementwise ops, "
                               "norms, dropout and reductions on it, and the column-parallel "
                               "linears that all-gather it",
                               g->path, n->name, dm_ops[n->op].name, g->tensors[x].name);
        }
        for (int k = 0; out_seq && k < n->n_out; k++) {
            int32_t o = n->out[k];
            if (o < 0 || t[o].absent || t[o].rank < 2 || split[o] != -1)
                continue;
            if (g->tensors[o].is_output)
                return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                               "%s: --sp: graph output '%s' (of node '%s') would be split along "
                               "the sequence; modelled: outputs made whole by a reduction over "
                               "it (a head after the mean)", g->path, g->tensors[o].name, n->name);
            split[o] = DM_TP_SEQ;
        }
    }
    return DNNMEM_OK;
}
