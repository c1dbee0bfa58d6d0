/*
 * schedule.c: the allocations and frees of one run, in order
 * (dm_schedule_build): the facts computed once per schedule (residency,
 * module holds; the rules are forward.c's header), then the forward pass
 * (forward.c) and generation (generate.c), or the training step's
 * iterations (src/train). The top of the layers, all standing on the
 * builder (builder.c).
 */
#include "schedule/builder.h"

#include <stdio.h>
#include <assert.h>
#include <stdlib.h>
#include <string.h>

const char *dm_phase_name(enum dm_phase p)
{
    switch (p) {
    case DM_PHASE_SETUP: return "setup";
    case DM_PHASE_FORWARD: return "forward";
    case DM_PHASE_LOSS: return "loss";
    case DM_PHASE_BACKWARD: return "backward";
    case DM_PHASE_OPTIMIZER: return "optimizer";
    case DM_PHASE_ZERO_GRAD: return "zero_grad";
    case DM_PHASE_DECODE: return "decode";
    }
    return "?";
}

void dm_schedule_free(struct dm_schedule *s)
{
    if (!s)
        return;
    free(s->buf);
    free(s->ev);
    free(s->steps);
    memset(s, 0, sizeof *s);
}

const char *dm_buffer_name(const struct dm_graph *g, const struct dm_buffer *b, char *buf,
                           size_t cap)
{
    if (!b->what)
        return b->tensor >= 0 ? g->tensors[b->tensor].name : "?";
    if (b->tensor >= 0)
        snprintf(buf, cap, "%s.%s", g->tensors[b->tensor].name, b->what);
    else if (b->node >= 0)
        snprintf(buf, cap, "%s.%s", g->nodes[b->node].name, b->what);
    else
        snprintf(buf, cap, "%s", b->what);
    return buf;
}

/* ---- facts computed once per schedule ------------------------------------------ */

/* nn.InstanceNorm2d(affine=False) and nn.GroupNorm(affine=False) pass
 * weight=None to F.instance_norm / F.group_norm: torch.onnx
 * (symbolic_opset9's instance_norm and group_norm) writes the absent scale
 * and bias as Constant nodes, ones[C] and zeros[C], that PyTorch never
 * allocates (rand79 training: 448 B of them counted before the run, 112,992 B
 * measured). A constant read there is no device tensor. */
static bool absent_norm_weight(const struct dm_sb *b, const struct dm_node *n, int k)
{
    int32_t p = b->g->tensors[n->in[k]].producer;
    return n->op == DM_OP_InstanceNormalization && (k == 1 || k == 2) && p >= 0 &&
           b->g->nodes[p].op == DM_OP_Constant && !b->run->tf_ops && !b->run->mx_ops &&
           !b->run->xla;
}

/* The exporter writes a non-persistent buffer (register_buffer(...,
 * persistent=False)) as a Constant node; one that indexes a weight is such
 * a buffer, a tensor PyTorch holds from before the run (timm 1.0.31's
 * TinyViT, LeViT and EfficientViT-M: `self.attention_biases[:,
 * self.attention_bias_idxs]`, an int64 [N, N] each; tiny_vit_5m_224's
 * measured bytes_before holds 1,920,800 B of them that dnnmem's setup did
 * not: 2 x 49^2 + 6 x 196^2 + 2 x 49^2 int64). A scalar index is a
 * select, no tensor. */
static bool weight_index_buffer(const struct dm_sb *b, const struct dm_node *n, int k)
{
    const struct dm_graph *g = b->g;
    if (n->op != DM_OP_Gather || k != 1 || !dm_has_in(n, 0) || !dm_sb_torch_onnx(b))
        return false;
    int32_t x = n->in[1], d = n->in[0], p = g->tensors[x].producer;
    return p >= 0 && g->nodes[p].op == DM_OP_Constant && b->t[x].numel > 1 &&
           (b->flag[d] & (DM_TF_FROM_WEIGHT | DM_TF_DEP)) == DM_TF_FROM_WEIGHT;
}

static void analyse(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    for (int32_t i = 0; i < g->n_tensors; i++) {
        b->flag[i] = g->tensors[i].role == DM_ROLE_INPUT ? DM_TF_DEP
                   : g->tensors[i].role == DM_ROLE_WEIGHT ? DM_TF_FROM_WEIGHT
                   : 0;
        b->uses[i] = 0;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        bool node_const = n->n_out > 0 && n->out[0] >= 0 && t[n->out[0]].is_const;
        uint8_t inherit = 0; /* FROM_WEIGHT flows through data, DEP also through shapes */
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x < 0)
                continue;
            bool meta = dm_meta_slot(n, k);
            inherit |= b->flag[x] & (meta ? DM_TF_DEP : (DM_TF_DEP | DM_TF_FROM_WEIGHT));
            if (meta)
                b->flag[x] |= DM_TF_META_USE;
            else {
                b->flag[x] |= (node_const || absent_norm_weight(b, n, k)) &&
                                      !weight_index_buffer(b, n, k)
                                  ? DM_TF_DATA_USE
                                  : (DM_TF_DATA_USE | DM_TF_DEVICE_USE);
                b->uses[x]++;
            }
        }
        /* an embedding lookup of a weight by indices made at run time from
         * the bound dims (GPT-2's wpe(arange(S)), T5's relative position
         * bias) is a tensor PyTorch computes, and so is whatever is computed
         * from it: no longer a repacking of the weight */
        if (n->op == DM_OP_Gather && (inherit & DM_TF_DEP))
            inherit &= (uint8_t)~DM_TF_FROM_WEIGHT;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0)
                b->flag[n->out[k]] |= inherit;
    }
    /* a dims-derived value the device computes (read on the device, not a
     * scalar, not a weight's repacking) is computed from device tensors:
     * torch.full((T, T)) before its triu, arange before the embedding
     * lookup that reads it; their dims-derived inputs are device tensors too */
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        const struct dm_node *n = &g->nodes[i];
        int32_t o = n->n_out > 0 ? n->out[0] : -1;
        if (o < 0 || !t[o].is_const || t[o].rank < 0 || t[o].absent || t[o].numel <= 1)
            continue;
        uint8_t f = b->flag[o];
        if (!(f & DM_TF_DEP) || (f & DM_TF_FROM_WEIGHT) ||
            !((f & DM_TF_DEVICE_USE) || g->tensors[o].is_output))
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x >= 0 && !dm_meta_slot(n, k) && (b->flag[x] & DM_TF_DEP))
                b->flag[x] |= DM_TF_DEVICE_USE;
        }
    }
    /* a constant value a device op reads through views: what the view
     * chain starts from (forward.c, weight_computed); and, in PyTorch, what
     * such a value is computed from by ops PyTorch runs: a module run on a
     * buffer runs each of its ops in every forward, so each result is a
     * tensor (timm 1.0.31's swin_transformer_v2_cr, `self.meta_mlp(
     * self.relative_coordinates_log)`: fc1, ReLU, Dropout and fc2 on the
     * [2401, 2] buffer, 3,687,936 B each for 384 hidden; measured with
     * tools/oracle/weightmlp_probe.py on 2.14.1: +8192 fc1, +8192 relu,
     * -8192, +1024 fc2 for 32 hidden on [64, 2]). Only the last of the chain
     * was counted, read by an op on the input. */
    bool torch_onnx = dm_sb_torch_onnx(b);
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        const struct dm_node *n = &g->nodes[i];
        int32_t o = n->n_out > 0 ? n->out[0] : -1;
        if (o < 0 || !t[o].is_const || !(b->flag[o] & (DM_TF_DEVICE_USE | DM_TF_DEVICE_FEED)))
            continue;
        if ((dm_ops[n->op].flags & DM_F_VIEW) && dm_has_in(n, 0)) {
            b->flag[n->in[0]] |= DM_TF_DEVICE_FEED;
            continue;
        }
        if (!torch_onnx || !dm_sb_weight_compute_op(n->op) ||
            (b->flag[o] & (DM_TF_FROM_WEIGHT | DM_TF_DEP)) != DM_TF_FROM_WEIGHT)
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x >= 0 && !dm_meta_slot(n, k) && g->tensors[x].role != DM_ROLE_WEIGHT &&
                t[x].is_const && (b->flag[x] & (DM_TF_FROM_WEIGHT | DM_TF_DEP)) == DM_TF_FROM_WEIGHT)
                b->flag[x] |= DM_TF_DEVICE_FEED;
        }
    }
    for (int32_t i = 0; i < g->n_tensors; i++) {
        const struct dm_tensor *tt = &g->tensors[i];
        uint8_t f = b->flag[i];
        bool resident = false;
        if (tt->role == DM_ROLE_INPUT)
            resident = true;
        else if (tt->role == DM_ROLE_WEIGHT) /* one read only as metadata is no parameter */
            resident = (f & DM_TF_DATA_USE) || tt->is_output || !(f & DM_TF_META_USE);
        else if (t[i].rank >= 0 && !t[i].absent && t[i].is_const &&
                 !(f & (DM_TF_DEP | DM_TF_FROM_WEIGHT)))
            resident = ((f & DM_TF_DEVICE_USE) || tt->is_output) && t[i].numel > 1;
        if (resident)
            b->flag[i] |= DM_TF_RESIDENT;
    }
}

/* The length of the first k module scopes of a node's name, torch.onnx's
 * "/stages/stages.0/f1/conv/Conv" ("/stages" for k = 1: every '/'-separated
 * part but the last is a module call, and a module called twice has two
 * names, "relu" and "relu_1"), or -1 when it has fewer. */
static int32_t scope_len(const char *name, int32_t k)
{
    if (k == 0)
        return 0;
    int32_t seen = 0;
    for (int32_t j = 1; name[0] == '/' && name[j] && j < INT32_MAX; j++)
        if (name[j] == '/' && ++seen == k)
            return j;
    return -1;
}

/* How many module scopes two node names share (one pass: a '/' both names
 * reach together closes a shared scope). */
static int32_t shared_scopes(const char *a, const char *b)
{
    int32_t k = 0;
    for (size_t j = 1; a[0] == '/' && b[0] == '/' && a[j] && a[j] == b[j] && k < INT32_MAX; j++)
        k += a[j] == '/';
    return k;
}

/* The readers of each tensor, in node order: rd[rs[x] .. rs[x + 1]) (a shape
 * input too: the exporter's shape arithmetic feeds a Reshape there). */
static bool all_readers(const struct dm_graph *g, int32_t **rs_out, int32_t **rd_out)
{
    int32_t nn = g->n_nodes, nt = g->n_tensors;
    int32_t *rs = calloc((size_t)nt + 2, sizeof *rs), *rd = NULL, *fill = NULL;
    size_t total = 0;
    for (int32_t i = 0; rs && i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) {
                rs[g->nodes[i].in[k] + 1]++;
                total++;
            }
    if (rs && total < INT32_MAX) {
        rd = malloc((total + 1) * sizeof *rd);
        fill = calloc((size_t)nt + 1, sizeof *fill);
    }
    if (!rd || !fill) {
        free(rs);
        free(rd);
        free(fill);
        return false;
    }
    for (int32_t x = 0; x < nt; x++)
        rs[x + 1] += rs[x];
    for (int32_t i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int32_t x = g->nodes[i].in[k];
            if (x >= 0)
                rd[rs[x] + fill[x]++] = i;
        }
    free(fill);
    *rs_out = rs;
    *rd_out = rd;
    return true;
}

/* The walk back from a reading place (nodes u0 .. u1: a call, or one op)
 * over the nodes before it, kept per place so that every result it reads
 * shares one walk: `lo`, the lowest node walked; `stmt`, the highest one
 * found that is another statement (-1: none down to lo). */
struct walk {
    int32_t lo, stmt;
};

/* Whether the caller ran a statement between the call that returned x
 * (producer p, its call scoped by the first c + 1 scopes of p's name) and
 * the place that first reads it (u0 .. u1). Python evaluates a call's
 * arguments just before the call, left to right: a result handed on as a
 * temporary is read next, after only the evaluation of the reader's other
 * arguments. A node in between whose outputs feed neither the reading place
 * nor such a node (marked in `rel` with u0 + 1) is another statement, so x
 * was kept under a name: starnet's `x1, x2 = self.f1(x), self.f2(x)`, then
 * `self.act(x1) * x2` (f2 runs between f1 and act, and feeds the Mul only).
 * Shape arithmetic (`B, N, C = x.shape`: folded values) and the exporter's
 * constants are no statement, nor are the producing call's own nodes (a
 * call's nodes are consecutive, so the highest statement found lies in p's
 * call only if all between do). Each node is walked once per place. */
static bool kept_across(const struct dm_sb *b, int32_t p, int32_t c, int32_t u0, int32_t u1,
                        const int32_t *rs, const int32_t *rd, int32_t *rel, struct walk *w)
{
    const struct dm_graph *g = b->g;
    for (int32_t j = w->lo - 1; w->stmt < 0 && j > p; j--) {
        const struct dm_node *n = &g->nodes[j];
        w->lo = j;
        if (dm_scope_transparent(n))
            continue; /* the exporter's constants */
        bool feeds = true; /* shape arithmetic: folded, no tensor work */
        for (int o = 0; o < n->n_out; o++)
            feeds = feeds && (n->out[o] < 0 || b->t[n->out[o]].is_const);
        for (int o = 0; o < n->n_out && !feeds; o++) {
            int32_t y = n->out[o];
            for (int32_t q = y < 0 ? 0 : rs[y]; y >= 0 && q < rs[y + 1] && !feeds; q++)
                feeds = (rd[q] >= u0 && rd[q] <= u1) || (rd[q] > j && rd[q] < u0 && rel[rd[q]] == u0 + 1);
        }
        if (feeds)
            rel[j] = u0 + 1;
        else
            w->stmt = j;
    }
    if (w->stmt <= p)
        return false;
    const char *pn = g->nodes[p].name, *sn = g->nodes[w->stmt].name;
    int32_t lp = scope_len(pn, c + 1);
    return !(strncmp(sn, pn, (size_t)lp) == 0 && sn[lp] == '/'); /* not p's call's own node */
}

/* A module call's result that its caller reads in two places is bound to a
 * name of the caller's frame, which holds it until that forward returns.
 * Python keeps a value for a second use only under a name (a local, a list
 * element, a tuple's part): starnet's Block (timm/models/starnet.py, timm
 * 1.0) runs `x = self.dwconv(x); x1, x2 = self.f1(x), self.f2(x)`, so the
 * dwconv's output lives through both calls and on after them; HGNet's
 * HighPerfGpuBlock (timm/models/hgnet.py) appends each `x = layer(x)` to
 * `output`, read by the next layer and by torch.cat(output), and the list
 * lives until the block returns, through its aggregation convs. The two
 * places are two module calls, or a call and the caller's own ops: the
 * caller's own ops alone do not show a name, as a plain Python function
 * the export does not scope (F.normalize reading its input twice) holds
 * its argument only until it returns. Held until the caller's last node,
 * unless an op of the caller's own reads it last: that is the statement
 * that rebinds the name (SwiftFormer's and CoaT's `x = x + ...` after
 * `x = self.local_representation(x)`, `x = self.cpe1(x, size)`), but for
 * torch.cat, which reads a list that outlives it (HGNet's `output`), and
 * that list holds the cat's other inputs the caller's calls returned (the
 * last layer's, read by the cat alone) as long. A name
 * rebound later, before the forward returns, lets go earlier: the hold is
 * the upper bound for it. The caller is the
 * innermost module whose scope holds the producer and every reader, the
 * producer inside one of its calls; the graph's top level is not one.
 * Applied to ONNX files (onnx_scopes: torch.onnx scopes each node by its
 * module calls, in the plain export as in the modules export), not to the
 * graphs built from a HuggingFace config (docs/validation-zoo.md,
 * NAME=pylocal; on the plain zoo: 5 inference rows into the 3% band, none
 * out). */
static bool caller_names(struct dm_sb *b, int32_t *until)
{
    const struct dm_graph *g = b->g;
    int32_t nn = g->n_nodes, nt = g->n_tensors;
    const int32_t *start = g->scope_start, *last = g->scope_last;
    int32_t *frame = malloc(((size_t)nt + 1) * sizeof *frame); /* shared scopes, -1: none yet */
    int32_t *child = malloc(((size_t)nt + 1) * sizeof *child); /* a reader in a call, or -1 */
    int32_t *end = malloc(((size_t)nt + 1) * sizeof *end);     /* the last reader */
    uint8_t *two = calloc((size_t)nt + 1, 1);  /* bit 0: a direct reader; bit 1: two places */
    int32_t *first = malloc(((size_t)nt + 1) * sizeof *first); /* the first reader */
    int32_t *rel = calloc((size_t)nn + 1, sizeof *rel);
    struct walk *walks = malloc(((size_t)nn + 1) * sizeof *walks); /* by u0 */
    int32_t *rs = NULL, *rd = NULL;
    bool ok = frame && child && end && two && first && rel && walks && all_readers(g, &rs, &rd);
    for (int32_t i = 0; ok && i < nn; i++)
        walks[i] = (struct walk){.lo = i, .stmt = -1};
    for (int32_t x = 0; ok && x < nt; x++)
        frame[x] = child[x] = end[x] = first[x] = -1;
    for (int pass = 0; ok && pass < 2; pass++)
        for (int32_t i = 0; i < nn; i++) {
            const struct dm_node *n = &g->nodes[i];
            if (dm_scope_transparent(n))
                continue;
            for (int k = 0; k < n->n_in; k++) {
                int32_t x = n->in[k];
                if (x < 0 || dm_meta_slot(n, k) || b->flag[x] & DM_TF_RESIDENT)
                    continue;
                int32_t p = g->tensors[x].producer;
                if (p < 0 || p >= i || dm_scope_transparent(&g->nodes[p]))
                    continue;
                const char *pn = g->nodes[p].name;
                if (pass == 0) { /* the caller: the scopes shared by all */
                    int32_t c = shared_scopes(pn, n->name);
                    frame[x] = frame[x] < 0 || c < frame[x] ? c : frame[x];
                    end[x] = i;
                    first[x] = first[x] < 0 ? i : first[x];
                    continue;
                }
                int32_t c = frame[x], l = scope_len(n->name, c + 1);
                if (l < 0) { /* one of the caller's own ops */
                    two[x] |= (uint8_t)(child[x] >= 0 ? 3 : 1);
                } else if (child[x] < 0) {
                    child[x] = i;
                    two[x] |= (uint8_t)(two[x] & 1 ? 2 : 0);
                } else if (scope_len(g->nodes[child[x]].name, c + 1) != l ||
                           strncmp(g->nodes[child[x]].name, n->name, (size_t)l) != 0) {
                    two[x] |= 2; /* another call */
                }
            }
        }
    for (int32_t x = 0; ok && x < nt; x++) {
        int32_t c = frame[x], i = end[x], r = first[x], p = g->tensors[x].producer;
        if (c < 1 || i < 0 || b->t[x].is_const || scope_len(g->nodes[p].name, c + 1) < 0)
            continue; /* unread, read by the top level, folded, or made by the caller's own op */
        if (start[i + 1] - start[i] < c || start[r + 1] - start[r] < c)
            continue;
        if (!(two[x] & 2)) { /* read in one place: kept across a statement? */
            bool call = start[r + 1] - start[r] > c && scope_len(g->nodes[r].name, c + 1) >= 0;
            int32_t u0 = call ? g->scope_first[start[r] + c] : r;
            int32_t u1 = call ? last[start[r] + c] : r;
            if (u0 <= p || !kept_across(b, p, c, u0, u1, rs, rd, rel, &walks[u0]))
                continue;
        }
        const struct dm_node *lr = &g->nodes[i];
        if (scope_len(lr->name, c + 1) < 0 && lr->op != DM_OP_Concat)
            continue; /* last read by an op of the caller's own: `x = x + self.attn(x)` rebinds */
        int32_t h = last[start[i] + c - 1]; /* the caller's run through its last reader */
        if (h > until[x])
            until[x] = h;
        for (int k = 0; lr->op == DM_OP_Concat && k < lr->n_in; k++) {
            int32_t y = lr->in[k], q = y >= 0 ? g->tensors[y].producer : -1;
            if (q >= 0 && !(b->flag[y] & DM_TF_RESIDENT) && !b->t[y].is_const && h > until[y] &&
                !dm_scope_transparent(&g->nodes[q]) && shared_scopes(g->nodes[q].name, lr->name) >= c &&
                scope_len(g->nodes[q].name, c + 1) >= 0)
                until[y] = h; /* the list's other results of the caller's calls */
        }
    }
    free(frame);
    free(child);
    free(end);
    free(two);
    free(first);
    free(rel);
    free(walks);
    free(rs);
    free(rd);
    return ok;
}

/* Module arguments. A module call keeps its arguments alive until it
 * returns: the callee's parameter and the caller's variable (x =
 * self.layer(x) rebinds only after the call) both refer to them, as does
 * `identity = x` in a ResNet block. torch.onnx names each node after the
 * modules it runs in ("/layer1/layer1.0/conv1/Conv"), and a module's nodes
 * are consecutive, so a tensor read inside a module it was made outside of
 * is held until that module's last node. A tensor with held_until is
 * held until that node (a module's local variable, until it returns). */
static bool module_holds(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    int32_t nn = g->n_nodes, nt = g->n_tensors;
    int32_t *until = malloc(((size_t)nt + 1) * sizeof *until);
    int32_t *fill = calloc((size_t)nn + 1, sizeof *fill);
    b->held_start = calloc((size_t)nn + 2, sizeof *b->held_start);
    /* the scopes are found whenever the node list changes (graph.c) */
    const int32_t *start = g->scope_start, *first = g->scope_first, *last = g->scope_last;
    assert(nn == 0 || (start && g->n_scoped == nn));
    bool ok = until && fill && b->held_start && (nn == 0 || (start && g->n_scoped == nn));
    if (!ok)
        goto out;
    for (int32_t x = 0; x < nt; x++)
        until[x] = -1;
    for (int32_t i = 0; i < nn && !b->run->dataflow; i++) { /* traced: no Python holds */
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x < 0 || dm_meta_slot(n, k) || b->flag[x] & DM_TF_RESIDENT)
                continue;
            int32_t p = g->tensors[x].producer;
            for (int32_t d = start[i]; d < start[i + 1]; d++)
                if (p >= 0 && p < first[d] && last[d] > i && last[d] > until[x])
                    until[x] = last[d];
        }
    }
    if (g->onnx_scopes && !b->run->dataflow && !caller_names(b, until)) {
        ok = false;
        goto out;
    }
    /* a local variable of a module's forward holds its tensor until it returns */
    for (int32_t x = 0; x < nt; x++) {
        int32_t h = g->tensors[x].held_until - 1;
        if (h >= 0 && h < nn && h > until[x] && !b->run->dataflow &&
            g->tensors[x].producer >= 0 && g->tensors[x].producer < h &&
            !(b->flag[x] & DM_TF_RESIDENT))
            until[x] = h;
    }
    int32_t count = 0;
    for (int32_t x = 0; x < nt; x++)
        if (until[x] >= 0) {
            b->held_start[until[x] + 1]++;
            b->uses[x]++;
            count++;
        }
    for (int32_t i = 0; i < nn; i++)
        b->held_start[i + 1] += b->held_start[i];
    b->held_list = malloc(((size_t)count + 1) * sizeof *b->held_list);
    ok = b->held_list != NULL;
    for (int32_t x = 0; ok && x < nt; x++)
        if (until[x] >= 0)
            b->held_list[b->held_start[until[x]] + fill[until[x]]++] = x;
out:
    free(until);
    free(fill);
    return ok;
}

/* PyTorch's BatchNorm modules that track running statistics register a third
 * buffer, num_batches_tracked, an int64 scalar (torch/nn/modules/batchnorm.py,
 * _NormBase). torch.onnx drops it ("Removing mutation ... num_batches_tracked"),
 * so a BatchNormalization whose running mean and variance are initializers
 * implies one 8-byte device tensor. */
static bool implies_batch_counter(const struct dm_graph *g, const struct dm_node *n)
{
    return n->op == DM_OP_BatchNormalization && n->n_in >= 5 && n->in[3] >= 0 && n->in[4] >= 0 &&
           g->tensors[n->in[3]].role == DM_ROLE_WEIGHT && g->tensors[n->in[4]].role == DM_ROLE_WEIGHT;
}

static void setup(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    dm_sb_step(b, DM_PHASE_SETUP, -1);
    if (b->run->tf_build) { /* TensorFlow's build history (tfbuild.c) */
        for (int32_t i = 0; i < g->n_tensors; i++)
            b->resident[i] = -1;
        dm_sb_tf_build(b);
        return;
    }
    for (int32_t i = 0; i < g->n_tensors; i++) {
        b->resident[i] = -1;
        if (!(b->flag[i] & DM_TF_RESIDENT) || (b->run->par.recv && b->run->par.recv[i]))
            continue; /* --pp: a received input's buffers are the pipeline's (pp_setup) */
        enum dnnmem_category cat =
            g->tensors[i].role == DM_ROLE_INPUT ? DNNMEM_CAT_INPUT : DNNMEM_CAT_WEIGHT;
        uint64_t bytes = cat == DNNMEM_CAT_WEIGHT ? dm_par_resident_bytes(b, i) : b->t[i].bytes;
        b->resident[i] = dm_sb_alloc(b, cat, b->t[i].dtype, bytes, i, -1, NULL, DM_SB_PINNED);
    }
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (implies_batch_counter(g, &g->nodes[i]))
            dm_sb_alloc(b, DNNMEM_CAT_WEIGHT, DM_INT64, 8, -1, i, "num_batches_tracked", DM_SB_PINNED);
}

/* keep_outputs in inference: the loop's next `outputs = model(**inputs)`
 * runs while the name still holds the first forward's outputs, which are let
 * go when it returns. */
static void infer_again(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    int32_t *first = malloc(((size_t)g->n_outputs + 1) * sizeof *first);
    if (!first) {
        b->oom = true;
        return;
    }
    for (int32_t k = 0; k < g->n_outputs; k++)
        first[k] = b->resident[g->outputs[k]] < 0 ? b->cur[g->outputs[k]] : -1;
    b->iteration = 2;
    dm_sb_forward(b);
    for (int32_t k = 0; k < g->n_outputs; k++)
        dm_sb_unref(b, first[k]);
    free(first);
}

/* --pp (src/estimate/pipeline.c, P2, P3): the receive buffers, one per
 * micro-batch for each received input and each output's grad, allocated
 * once and kept (torch.distributed.pipelining's stage.py). */
static bool pp_setup(struct dm_sb *b)
{
    const struct dm_graph *g = b->g;
    int M = b->run->par.micro;
    bool last = b->run->par.stage == b->run->par.pp - 1;
    b->pp_buf = malloc(((size_t)g->n_tensors + 1) * (size_t)M * sizeof *b->pp_buf);
    if (!b->pp_buf)
        return false;
    dm_sb_step(b, DM_PHASE_SETUP, -1);
    for (int32_t x = 0; x < g->n_tensors; x++)
        for (int j = 0; j < M; j++) {
            int32_t *slot = &b->pp_buf[(size_t)x * (size_t)M + (size_t)j];
            *slot = -1;
            if (b->run->par.recv && b->run->par.recv[x])
                *slot = dm_sb_alloc(b, DNNMEM_CAT_INPUT, b->t[x].dtype, b->t[x].bytes, x, -1,
                                    "pipeline: received activation", DM_SB_PINNED);
            else if (!last && g->tensors[x].is_output && dm_train_requires_grad(b, x))
                *slot = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, b->t[x].bytes, x, -1,
                                    "pipeline: received grad", DM_SB_PINNED);
        }
    return true;
}

/* The bytes one micro-batch's forward leaves live for its backward: its
 * saved tensors and what it made and still holds (the stage's outputs). */
static uint64_t pp_forward_bytes(const struct dm_sb *b)
{
    uint64_t sum = 0;
    for (int32_t k = 0; k < b->s->n_buf; k++)
        if (b->refs[k] > 0 && b->refs[k] < DM_SB_PINNED / 2 &&
            (b->s->buf[k].category == DNNMEM_CAT_SAVED ||
             b->s->buf[k].category == DNNMEM_CAT_ACTIVATION))
            sum += b->s->buf[k].bytes;
    return sum;
}

/* --pp: before micro-batch j's forward (or backward), the other
 * micro-batches in flight on this stage hold their forwards' tensors:
 * GPipe runs every forward before the first backward, 1F1B holds at most
 * W = min(stages - stage, M) (torch.distributed.pipelining schedules.py,
 * Schedule1F1B's warmup of stages - stage - 1 forwards; Megatron's
 * num_warmup_microbatches): min(W - 1, j - 1) others during forward j,
 * min(W - 1, M - j) during backward j. One buffer of their bytes, or -1.
 * Also points the received inputs at micro-batch j's buffers. */
static int32_t pp_in_flight(struct dm_sb *b, int micro, bool forward, uint64_t per_micro)
{
    const struct dm_par *p = &b->run->par;
    if (p->pp <= 1)
        return -1;
    int M = p->micro, W = p->gpipe ? M : (p->pp - p->stage < M ? p->pp - p->stage : M);
    int n = forward ? (W - 1 < micro - 1 ? W - 1 : micro - 1) : (W - 1 < M - micro ? W - 1 : M - micro);
    b->pp_micro = micro - 1;
    if (forward)
        for (int32_t x = 0; x < b->g->n_tensors; x++)
            if (p->recv && p->recv[x])
                b->resident[x] = b->pp_buf[(size_t)x * (size_t)M + (size_t)(micro - 1)];
    if (n <= 0 || per_micro == 0)
        return -1;
    return dm_sb_alloc(b, DNNMEM_CAT_SAVED, DM_UINT8, per_micro * (uint64_t)n, -1, -1,
                       "pipeline: the other micro-batches in flight", 1);
}

/* The micro-steps lo..hi of an optimizer step that run the same code on
 * the same state once the first has made the gradients (fixpoint.c): all
 * but the last (which steps the optimizer); under --pp 1F1B's steady state,
 * the micro-batches with W - 1 others in flight in both their forward and
 * their backward (pp_in_flight: W <= j <= M - W + 1), not the last (GPipe:
 * none). False when fewer than three: two to compare, one to leave out. */
static bool steady_micro(const struct dm_run *run, int *lo, int *hi)
{
    const struct dm_par *p = &run->par;
    int M = run->grad_accum;
    *lo = 1;
    *hi = M - 1;
    if (!run->fp.on || !run->train)
        return false;
    if (p->pp > 1) {
        int W = p->gpipe ? M : (p->pp - p->stage < M ? p->pp - p->stage : M);
        *lo = p->gpipe ? M : W;
        if (M - W + 1 < *hi)
            *hi = M - W + 1;
    }
    return *hi - *lo + 1 >= 3;
}

enum dnnmem_status dm_schedule_build(const struct dm_graph *g, const struct dm_tinfo *t,
                                     const struct dm_run *run, struct dm_schedule *s,
                                     struct dnnmem_error *err)
{
    memset(s, 0, sizeof *s);
    int32_t nt = g->n_tensors;
    struct dm_sb b = {.s = s, .g = g, .t = t, .run = run};
    b.cur = malloc(((size_t)nt + 1) * sizeof *b.cur);
    b.strided = calloc((size_t)nt + 1, sizeof *b.strided);
    b.chlast = calloc((size_t)nt + 1, sizeof *b.chlast);
    b.gradfmt = calloc((size_t)nt + 1, sizeof *b.gradfmt);
    b.stride = calloc(((size_t)nt + 1) * DM_MAX_DIMS, sizeof *b.stride);
    b.flag = calloc((size_t)nt + 1, sizeof *b.flag);
    b.uses = calloc((size_t)nt + 1, sizeof *b.uses);
    b.resident = malloc(((size_t)nt + 1) * sizeof *b.resident);
    b.amp_cache = malloc(((size_t)nt + 1) * sizeof *b.amp_cache);
    int max_in = 1;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].n_in > max_in)
            max_in = g->nodes[i].n_in;
    b.in_buf = malloc((size_t)max_in * sizeof *b.in_buf);
    enum dnnmem_status st = DNNMEM_OK;
    if (!b.cur || !b.strided || !b.chlast || !b.gradfmt || !b.stride || !b.flag || !b.uses || !b.resident || !b.amp_cache || !b.in_buf) {
        b.oom = true;
        goto out;
    }
    analyse(&b);
    dm_sb_layout(g, t, b.chlast);
    if (!module_holds(&b)) {
        b.oom = true;
        goto out;
    }
    b.iteration = 1;
    for (int k = 0; k < DM_GEN_PRE; k++)
        b.gen_pre[k] = -1;
    if ((st = dm_par_prepare(&b, err)) != DNNMEM_OK)
        goto out;
    setup(&b);
    if (!run->train) {
        if (run->gen_tokens > 0 && run->gen_beams > 1)
            dm_sb_generate_setup(&b);
        dm_sb_forward(&b);
        if (run->keep_outputs && run->gen_tokens == 0 && !b.oom)
            infer_again(&b);
        if (run->gen_tokens > 0 && !b.oom)
            st = dm_sb_generate(&b, err);
        goto out;
    }
    if ((st = dm_train_init(&b, err)) != DNNMEM_OK)
        goto out;
    dm_par_start(&b);
    if (run->par.pp > 1 && !pp_setup(&b)) {
        b.oom = true;
        goto out;
    }
    uint64_t per_micro = 0; /* --pp: what one micro-batch's forward leaves for its backward */
    /* the micro-steps lo..hi, once one repeats the one before it, left out
     * up to hi (fixpoint.c) */
    int lo, hi;
    struct dm_fp *fp = steady_micro(run, &lo, &hi) ? dm_fp_new(run) : NULL;
    for (int it = 1; it <= run->iterations && !b.oom; it++) {
        b.iteration = it;
        dm_train_zero_grad(&b);
        dm_fp_iteration(fp);
        dm_tf_fit_begin(&b);
        for (int micro = 1; micro <= run->grad_accum && !b.oom; micro++) {
            if (fp && micro >= lo && micro <= hi && dm_fp_boundary(fp, s)) {
                s->micro_left_out += hi + 1 - micro;
                micro = hi + 1;
            }
            int32_t others = pp_in_flight(&b, micro, true, per_micro);
            dm_sb_forward(&b);
            dm_sb_unref(&b, others);
            if (run->par.pp > 1 && micro == 1 && it == 1)
                per_micro = pp_forward_bytes(&b);
            dm_train_release_prev(&b);
            others = pp_in_flight(&b, micro, false, per_micro);
            /* the grads' formats from the layout the forward settled (views
             * take theirs from their strides there: forward.c) */
            if (it == 1 && micro == 1)
                dm_sb_grad_layout(g, t, b.chlast, run, b.gradfmt);
            dm_train_backward(&b, micro == run->grad_accum);
            dm_sb_unref(&b, others);
        }
    }
    dm_fp_free(fp);
out:
    if (b.train)
        dm_train_free(&b);
    dm_par_free(&b);
    free(b.refs);
    free(b.cur);
    free(b.strided);
    free(b.chlast);
    free(b.gradfmt);
    free(b.stride);
    free(b.flag);
    free(b.uses);
    free(b.resident);
    free(b.held_start);
    free(b.held_list);
    free(b.amp_cache);
    free(b.in_buf);
    free(b.pp_buf);
    if (b.oom) {
        dm_schedule_free(s);
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory scheduling '%s'", g->path);
    }
    if (st != DNNMEM_OK) { /* what the builder refused outlives the schedule */
        struct dm_refusal refusal = s->refusal;
        dm_schedule_free(s);
        s->refusal = refusal;
    }
    return st;
}

