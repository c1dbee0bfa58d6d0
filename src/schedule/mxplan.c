/*
 * mxplan.c: MXNet's symbolic executor (Module.bind / simple_bind), which plans
 * the memory of a whole forward + backward graph once, at bind time, and
 * allocates every planned storage once for the whole run. The pass turns an
 * eager schedule (which buffers exist, when each is made and when its last
 * reader lets go) into the executor's: the same buffer lifetimes assigned to
 * storages by nnvm's rule, each storage allocated once and never freed.
 *
 * Rules (facts from apache/mxnet; the code here is our own):
 *  1. Storage ids (src/nnvm/plan_memory.cc, GraphAllocator::Request): an
 *     output asks for a storage of key = elements x 4 ("assume 4 bytes for
 *     now", whatever its dtype). A free storage is taken if its key lies in
 *     [key / 16, key * 16] (NNVM_EXEC_MATCH_RANGE, default 16): first the
 *     smallest key >= the request (among equal keys the one freed first, a
 *     std::multimap's order), else the largest key below it (among equal
 *     keys the one freed last); a storage's key grows to the largest request
 *     it serves. Otherwise a new storage is made.
 *  2. Order within a node (AllocMemory): in-place outputs first, then the
 *     other outputs requested largest first, then the inputs whose last
 *     reader this node is are released, then outputs nobody reads.
 *  3. In place (FInplaceOption): an output of an op that declares an
 *     (input, output) in-place pair takes the input's storage when this node
 *     is the input's last reader and both have the same number of elements
 *     and element size. Declared by: elementwise unary ops
 *     (MXNET_OPERATOR_REGISTER_UNARY: {0,0}; Activation is one), elementwise
 *     binary ops ({0,0},{1,0}), Dropout ({0,0}), the backward of
 *     Activation (_backward_Activation: the output gradient into the input
 *     gradient, src/operator/nn/activation.cc) and of FullyConnected
 *     (_backward_FullyConnected {1, 0}: its input 1, the forward data, into
 *     output 0, the data's gradient, src/operator/nn/fully_connected.cc,
 *     1.9.1; the data seen through Flatten's view); reshapes are identity views
 *     (FInplaceIdentity), which the eager schedule already makes views.
 *  4. Allocation (src/executor/graph_executor.cc, InitDataEntryMemory): each
 *     storage is one array of max(elements x dtype size) of the entries it
 *     serves, rounded up to 4 bytes (float words), allocated through the
 *     storage manager (the pooled one on GPUs) with delay_alloc, so at the
 *     first op that writes it; it is kept while the executor lives.
 *  5. External arrays: arguments (weights, data, labels), their gradients
 *     (arg_grad_store, grad_req "write" or "add") and auxiliary states are
 *     allocated by simple_bind before the first op (InitArguments) and are
 *     not planned. There is no zero_grad: "write" overwrites.
 *  6. The optimizer (Module.update -> the optimizer's fused update operators,
 *     src/operator/optimizer_op.cc: sgd_update, sgd_mom_update, adam_update
 *     write the weight and state in place): its state is created at the first
 *     update and kept; no temporaries.
 *  7. Library temporaries (cuDNN workspaces) are the executor's kTempSpace
 *     resource: one per device (MXNET_EXEC_NUM_TEMP=1), grown to the largest
 *     request and kept.
 *  8. Module.bind (python/mxnet/module/module.py, 1.9.1, bind: "param_arrays
 *     = [zeros(shape=x[0].shape, ...)]" and the same for aux_arrays) keeps
 *     its own _arg_params and _aux_params, made on the default context,
 *     the CPU: host memory beside a GPU executor, but the same memory as a
 *     CPU executor's (dm_mxnet_module_copies). init_params then copies
 *     them into the executor's arrays (Executor.copy_params_from,
 *     python/mxnet/executor.py: "array.astype(dst.dtype).copyto(dst)";
 *     NDArray.astype copies by default): one more transient copy of each,
 *     which the threaded engine frees asynchronously, so that up to all of
 *     them are live at once (measured: all for the MLP; NaiveEngine frees
 *     each at once, the largest one alone). The bound is taken: all.
 *  9. MXNet's own CPU Convolution (convolution-inl.h, 1.9.1, LayerSetUp and
 *     Forward/Backward) unfolds one image at a time into a column buffer of
 *     C_in x prod(kernel) x prod(output spatial) elements taken from
 *     kTempSpace, in the forward and again in the backward; a 1x1 kernel of
 *     stride 1 and no padding needs none. The executor's one temp space
 *     (rule 7) grows to the largest and is kept (dm_mxnet_cpu_temp). The
 *     oneDNN build's kernels (MKLDNN) take other scratch (TmpMemMgr: twice
 *     the previous op's estimate, mkldnn_base-inl.h) and the inference
 *     subgraph fusion keeps folded weight copies: not modelled.
 * What is taken from the eager schedule: which entries exist, their sizes,
 * and when their last reader runs, including which forward tensors the
 * backward reads (src/train/train.c's "MXNet" section under run->mx_ops:
 * each op's FGradient inputs, SoftmaxOutput as the loss, gradient sums by
 * ElementWiseSum or kAddTo; the eager op order stands in for nnvm's). With
 * backward mirroring (MXNET_BACKWARD_DO_MIRROR, train.c) the copies run as
 * forward steps inside the backward, and are planned as the nodes they are
 * (in place by rule 3 like their forward op).
 */
#include <stdlib.h>
#include <string.h>

#include "dnnmem-impl.h"

static bool persistent(uint8_t cat)
{
    return cat == DNNMEM_CAT_WEIGHT || cat == DNNMEM_CAT_INPUT || cat == DNNMEM_CAT_GRADIENT ||
           cat == DNNMEM_CAT_OPTIMIZER || cat == DNNMEM_CAT_KV_CACHE;
}

/* Rule 3: ops whose MXNet counterpart declares FInplaceOption. */
static bool inplace_op(enum dm_op op)
{
    switch (op) {
    case DM_OP_Relu: case DM_OP_Sigmoid: case DM_OP_Tanh: case DM_OP_Softsign:
    case DM_OP_Softplus: case DM_OP_Abs: case DM_OP_Neg: case DM_OP_Exp: case DM_OP_Log:
    case DM_OP_Sqrt: case DM_OP_Add: case DM_OP_Sub: case DM_OP_Mul: case DM_OP_Div:
    case DM_OP_Dropout:
        return true;
    default:
        return false;
    }
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* Rule 1's key: elements x 4. */
static uint64_t plan_key(const struct dm_buffer *b)
{
    uint64_t es = 0;
    if (!dm_dtype_bytes((enum dm_dtype)b->dtype, 1, &es) || es == 0)
        es = 4;
    return sat_mul(b->bytes / es, 4);
}

static uint64_t elem_size(const struct dm_buffer *b)
{
    uint64_t es = 0;
    if (!dm_dtype_bytes((enum dm_dtype)b->dtype, 1, &es) || es == 0)
        es = 1;
    return es;
}

/* An external array's identity: one per (category, tensor, node, bytes, what). */
static bool same_ext(const struct dm_buffer *c, const struct dm_buffer *b)
{
    return c->category == b->category && c->tensor == b->tensor && c->node == b->node &&
           c->bytes == b->bytes &&
           (c->what == b->what || (c->what && b->what && strcmp(c->what, b->what) == 0));
}

static size_t ext_hash(const struct dm_buffer *b)
{
    uint64_t h = 1469598103934665603u;
    uint64_t parts[4] = {b->category, (uint64_t)(uint32_t)b->tensor, (uint64_t)(uint32_t)b->node,
                         b->bytes};
    for (int i = 0; i < 4; i++)
        h = (h ^ parts[i]) * 1099511628211u;
    for (const char *p = b->what; p && *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211u;
    return (size_t)h;
}

struct storage {
    uint64_t key;      /* max key served (rule 1) */
    uint64_t bytes;    /* max real bytes served (rule 4) */
    int32_t largest;   /* the entry with the most bytes: names the storage */
    int32_t first_step;
    int32_t live;      /* entries alive in it */
    int64_t freed_seq; /* order of release into the free list; -1 when taken */
};

struct out_ev {
    int32_t step;
    int64_t seq;
    struct dm_event ev;
};

static int cmp_out_ev(const void *a, const void *b)
{
    const struct out_ev *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The free list: storage ids sorted by (key, order of release), as nnvm's
 * std::multimap keeps them. */
struct plan {
    struct storage *st;
    int32_t n_st;
    int64_t seq;
    uint64_t range;
    int32_t *free_ids;
    int32_t n_free;
};

/* first position whose key is >= key (strict: > key) */
static int32_t free_bound(const struct plan *p, uint64_t key, bool strict)
{
    int32_t lo = 0, hi = p->n_free;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        uint64_t k = p->st[p->free_ids[mid]].key;
        if (k < key || (strict && k == key))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void release_storage(struct plan *p, int32_t sid)
{
    int32_t at = free_bound(p, p->st[sid].key, true); /* after equal keys: released last */
    memmove(&p->free_ids[at + 1], &p->free_ids[at], (size_t)(p->n_free - at) * sizeof *p->free_ids);
    p->free_ids[at] = sid;
    p->n_free++;
    p->st[sid].freed_seq = p->seq++;
}

/* Rule 1. Returns the storage id. */
static int32_t request(struct plan *p, uint64_t key, int32_t buf, int32_t step)
{
    uint64_t lo = key / p->range, hi = sat_mul(key, p->range);
    int32_t at = free_bound(p, key, false), pick = -1;
    if (at < p->n_free && p->st[p->free_ids[at]].key <= hi)
        pick = at; /* the smallest key >= the request, released first */
    else if (at > 0 && p->st[p->free_ids[at - 1]].key >= lo)
        pick = at - 1; /* the largest key below it, released last */
    int32_t best;
    if (pick >= 0) {
        best = p->free_ids[pick];
        memmove(&p->free_ids[pick], &p->free_ids[pick + 1],
                (size_t)(p->n_free - pick - 1) * sizeof *p->free_ids);
        p->n_free--;
    } else {
        best = p->n_st++;
        p->st[best] = (struct storage){key, 0, buf, step, 0, -1};
    }
    struct storage *e = &p->st[best];
    e->freed_seq = -1;
    if (key > e->key)
        e->key = key;
    return best;
}

static void grow_bytes(struct storage *e, const struct dm_schedule *in, int32_t buf)
{
    if (in->buf[buf].bytes > e->bytes) {
        e->bytes = in->buf[buf].bytes;
        e->largest = buf;
    }
}

static bool has_tensor(const int32_t *list, int n, int32_t x)
{
    for (int k = 0; x >= 0 && k < n; k++)
        if (list[k] == x)
            return true;
    return false;
}

/* The planner's state, shared by its steps. */
struct mxp {
    const struct dm_graph *g;
    const struct dm_schedule *in;
    struct dm_mxplan_stats *stats;
    int32_t wf, we;            /* the window: [wf, we) */
    int32_t *buf_st;           /* planned buffer -> storage */
    int32_t *buf_step;         /* alloc step */
    uint8_t *keep;             /* 1: kept as is (events), 2: kept, never freed */
    int32_t *move_to;          /* step of a moved alloc, or -1 */
    struct storage *st;
    struct out_ev *oe;
    struct dm_buffer *ob;
    int32_t *scratch;
    int32_t *free_ids;
    int32_t *htab;             /* external arrays by identity */
    size_t hcap;
    size_t n_oe;
    int32_t n_ob;
    int32_t temp_space;        /* rule 7: one buffer, grown */
    struct plan p;
};

/* the window: the first forward (and its backward) */
static void find_window(const struct dm_schedule *in, int32_t *wf_out, int32_t *we_out)
{
    int32_t wf = -1, we = in->n_steps;
    bool seen_bw = false;
    for (int32_t i = 0; i < in->n_steps; i++) {
        uint8_t ph = in->steps[i].phase;
        if (wf < 0) {
            if (ph == DM_PHASE_FORWARD)
                wf = i;
            continue;
        }
        bool next_micro = false; /* a forward run after the backward that ends in a loss is
                                    the next micro-batch; one that ends in backward steps is
                                    a checkpoint's recomputation, part of this backward */
        if (ph == DM_PHASE_FORWARD && seen_bw && in->steps[i - 1].phase != DM_PHASE_FORWARD) {
            int32_t j = i;
            while (j < in->n_steps && in->steps[j].phase == DM_PHASE_FORWARD)
                j++;
            next_micro = j < in->n_steps && in->steps[j].phase == DM_PHASE_LOSS;
        }
        if (in->steps[i].iteration != in->steps[wf].iteration || next_micro ||
            (ph != DM_PHASE_FORWARD && ph != DM_PHASE_LOSS && ph != DM_PHASE_BACKWARD)) {
            we = i;
            break;
        }
        if (ph == DM_PHASE_BACKWARD)
            seen_bw = true;
    }
    *wf_out = wf;
    *we_out = we;
}

/* the working arrays, initialised; false when out of memory */
static bool mxp_alloc(struct mxp *m)
{
    const struct dm_schedule *in = m->in;
    size_t nb = (size_t)in->n_buf;
    m->buf_st = malloc((nb + 1) * sizeof *m->buf_st);
    m->buf_step = malloc((nb + 1) * sizeof *m->buf_step);
    m->keep = calloc(nb + 1, 1);
    m->move_to = malloc((nb + 1) * sizeof *m->move_to);
    m->st = malloc((nb + 2) * sizeof *m->st);
    m->oe = malloc((in->n_ev + nb + 2) * sizeof *m->oe);
    m->ob = malloc((nb + nb + 2) * sizeof *m->ob);
    m->scratch = malloc((in->n_ev + 1) * sizeof *m->scratch);
    m->free_ids = malloc((nb + 2) * sizeof *m->free_ids);
    m->hcap = 16;
    while (m->hcap < 2 * nb + 2 && m->hcap < SIZE_MAX / 4)
        m->hcap *= 2;
    m->htab = malloc(m->hcap * sizeof *m->htab);
    m->n_oe = 0;
    if (!m->buf_st || !m->buf_step || !m->keep || !m->move_to || !m->st || !m->oe || !m->ob ||
        !m->scratch || !m->htab || !m->free_ids)
        return false;
    for (size_t k = 0; k < nb; k++) {
        m->buf_st[k] = -1;
        m->buf_step[k] = -1;
        m->move_to[k] = -1;
    }
    for (size_t e = 0; e < in->n_ev; e++)
        if (in->ev[e].kind == DM_EV_ALLOC)
            m->buf_step[in->ev[e].buf] = in->ev[e].step;
    for (size_t k = 0; k < m->hcap; k++)
        m->htab[k] = -1;
    memcpy(m->ob, in->buf, nb * sizeof *m->ob);
    m->n_ob = (int32_t)nb;
    return true;
}

static void mxp_free(struct mxp *m)
{
    free(m->buf_st);
    free(m->buf_step);
    free(m->keep);
    free(m->move_to);
    free(m->st);
    free(m->oe);
    free(m->ob);
    free(m->scratch);
    free(m->htab);
    free(m->free_ids);
}

/* rule 5, 6: external arrays, one per (category, tensor, what, node) */
static void mark_externals(struct mxp *m)
{
    const struct dm_schedule *in = m->in;
    size_t nb = (size_t)in->n_buf, hcap = m->hcap;
    int32_t wf = m->wf, *htab = m->htab;
    int32_t setup_step = wf > 0 ? wf - 1 : 0;
    for (size_t k = 0; wf >= 0 && k < nb; k++) {
        const struct dm_buffer *b = &in->buf[k];
        if (m->buf_step[k] < wf) {
            m->keep[k] = 1; /* made before the first op: as the eager schedule has it */
            continue;
        }
        if (!persistent(b->category))
            continue;
        bool dup = false;
        size_t h = ext_hash(b) & (hcap - 1);
        for (; htab[h] >= 0 && !dup; h = (h + 1) & (hcap - 1))
            dup = same_ext(&in->buf[htab[h]], b);
        if (dup)
            continue;
        htab[h] = (int32_t)k;
        m->keep[k] = 2;
        if (b->category == DNNMEM_CAT_INPUT || b->category == DNNMEM_CAT_GRADIENT)
            m->move_to[k] = setup_step; /* simple_bind: before the first op */
    }
}

/* The tensor whose buffer holds t: through the ops that are views of
 * their input 0 (Flatten, Reshape), bounded by the node count. */
static int32_t view_base(const struct dm_graph *g, int32_t t)
{
    for (int32_t hops = 0; g && t >= 0 && t < g->n_tensors && hops < g->n_nodes; hops++) {
        int32_t p = g->tensors[t].producer;
        if (p < 0 || !(dm_ops[g->nodes[p].op].flags & DM_F_VIEW) || !dm_has_in(&g->nodes[p], 0))
            break;
        t = g->nodes[p].in[0];
    }
    return t;
}

/* one allocation of events [e, e1) written in place over an input the step
 * frees, if its op allows */
static void plan_inplace_one(struct mxp *m, size_t e, size_t e1, const struct dm_node *nd,
                             bool bw, const struct dm_event *ev, const struct dm_buffer *b)
{
    const struct dm_schedule *in = m->in;
    int32_t *buf_st = m->buf_st;
    struct storage *st = m->st;
    const int32_t *outs = bw ? nd->in : nd->out, *ins = bw ? nd->out : nd->in;
    int n_outs = bw ? nd->n_in : nd->n_out, n_ins = bw ? nd->n_out : nd->n_in;
    bool fc_bw = bw && nd->op == DM_OP_Gemm && nd->n_in > 0;
    if (bw && !fc_bw && nd->op != DM_OP_Relu && nd->op != DM_OP_Sigmoid &&
        nd->op != DM_OP_Tanh && nd->op != DM_OP_Softsign && nd->op != DM_OP_Softplus)
        return; /* backward in place: _backward_Activation, _backward_FullyConnected */
    int32_t fc_data = fc_bw ? view_base(m->g, nd->in[0]) : -1;
    if (fc_bw ? b->tensor != nd->in[0] && b->tensor != fc_data
              : !has_tensor(outs, n_outs, b->tensor))
        return;
    for (size_t y = e; y < e1; y++) {
        const struct dm_event *fv = &in->ev[y];
        const struct dm_buffer *f = &in->buf[fv->buf];
        int32_t sid = buf_st[fv->buf];
        bool from = fc_bw ? f->tensor == fc_data && f->category != DNNMEM_CAT_GRADIENT &&
                                f->category != DNNMEM_CAT_TEMPORARY
                          : has_tensor(ins, n_ins, f->tensor);
        if (fv->kind != DM_EV_FREE || sid < 0 || st[sid].live != 1 || !from ||
            plan_key(f) != plan_key(b) ||
            elem_size(f) != elem_size(b))
            continue;
        /* the storage must not already have been handed to another
         * output of this node */
        bool taken = false;
        for (size_t z = e; z < e1 && !taken; z++)
            taken = in->ev[z].kind == DM_EV_ALLOC && buf_st[in->ev[z].buf] == sid;
        if (taken)
            continue;
        buf_st[ev->buf] = sid;
        st[sid].live++;
        grow_bytes(&st[sid], in, ev->buf);
        m->stats->inplace++;
        break;
    }
}

/* a step's events [e, e1): in place first (rule 3), the temp space (rule 7) */
static void plan_inplace(struct mxp *m, size_t e, size_t e1, int32_t step)
{
    const struct dm_schedule *in = m->in;
    const struct dm_graph *g = m->g;
    int32_t node = in->steps[step].node;
    const struct dm_node *nd = g && node >= 0 && node < g->n_nodes ? &g->nodes[node] : NULL;
    bool bw = in->steps[step].phase == DM_PHASE_BACKWARD;
    for (size_t x = e; x < e1; x++) {
        const struct dm_event *ev = &in->ev[x];
        const struct dm_buffer *b = &in->buf[ev->buf];
        if (ev->kind != DM_EV_ALLOC || persistent(b->category) || m->keep[ev->buf])
            continue;
        if (b->category == DNNMEM_CAT_WORKSPACE) {
            if (m->temp_space < 0) {
                int32_t ts = m->temp_space = m->n_ob++;
                m->ob[ts] = *b;
                m->ob[ts].what = "temp space";
                m->ob[ts].tensor = -1;
                m->oe[m->n_oe++] = (struct out_ev){step, (int64_t)x, {DM_EV_ALLOC, ts, step}};
            } else if (b->bytes > m->ob[m->temp_space].bytes) {
                m->ob[m->temp_space].bytes = b->bytes; /* grown: the largest request */
            }
            continue;
        }
        m->stats->entries++;
        if (!nd || (!inplace_op(nd->op) && !(bw && nd->op == DM_OP_Gemm)))
            continue;
        plan_inplace_one(m, e, e1, nd, bw, ev, b);
    }
}

/* then the other outputs, largest first (rule 2; a stable order among
 * equal keys) */
static void plan_rest(struct mxp *m, size_t e, size_t e1, int32_t step)
{
    const struct dm_schedule *in = m->in;
    int32_t *scratch = m->scratch;
    int n_rest = 0;
    for (size_t x = e; x < e1; x++) {
        const struct dm_event *ev = &in->ev[x];
        const struct dm_buffer *b = &in->buf[ev->buf];
        if (ev->kind == DM_EV_ALLOC && !persistent(b->category) && !m->keep[ev->buf] &&
            b->category != DNNMEM_CAT_WORKSPACE && m->buf_st[ev->buf] < 0)
            scratch[n_rest++] = ev->buf;
    }
    for (int i = 1; i < n_rest; i++) { /* insertion sort, descending, stable */
        int32_t v = scratch[i];
        int j = i;
        while (j > 0 && plan_key(&in->buf[scratch[j - 1]]) < plan_key(&in->buf[v])) {
            scratch[j] = scratch[j - 1];
            j--;
        }
        scratch[j] = v;
    }
    for (int i = 0; i < n_rest; i++) {
        int32_t bi = scratch[i];
        int32_t sid = request(&m->p, plan_key(&in->buf[bi]), bi, step);
        m->buf_st[bi] = sid;
        m->st[sid].live++;
        grow_bytes(&m->st[sid], in, bi);
    }
}

/* then releases (rule 2) */
static void plan_release(struct mxp *m, size_t e, size_t e1)
{
    for (size_t x = e; x < e1; x++) {
        const struct dm_event *ev = &m->in->ev[x];
        int32_t sid = m->buf_st[ev->buf];
        if (ev->kind != DM_EV_FREE || sid < 0)
            continue;
        if (--m->st[sid].live == 0)
            release_storage(&m->p, sid);
    }
}

/* the plan over the window (rules 1-3, 7), step by step */
static void plan_window(struct mxp *m)
{
    const struct dm_schedule *in = m->in;
    int32_t wf = m->wf, we = m->we;
    m->temp_space = -1;
    size_t e0 = 0;
    while (wf >= 0 && e0 < in->n_ev && in->ev[e0].step < wf)
        e0++;
    for (size_t e = e0; wf >= 0 && e < in->n_ev && in->ev[e].step < we;) {
        int32_t step = in->ev[e].step;
        size_t e1 = e;
        while (e1 < in->n_ev && in->ev[e1].step == step)
            e1++;
        plan_inplace(m, e, e1, step);
        plan_rest(m, e, e1, step);
        plan_release(m, e, e1);
        e = e1;
    }
}

/* the output events: kept buffers as they were (rule 5, 6: never freed),
 * each storage once at its first request (rule 4) */
static void emit_events(struct mxp *m)
{
    const struct dm_schedule *in = m->in;
    const struct storage *st = m->st;
    for (size_t e = 0; e < in->n_ev; e++) {
        const struct dm_event *ev = &in->ev[e];
        uint8_t k = m->wf < 0 ? 1 : m->keep[ev->buf];
        if (k == 1 || (k == 2 && ev->kind == DM_EV_ALLOC)) {
            int32_t at = ev->kind == DM_EV_ALLOC && m->move_to[ev->buf] >= 0 ? m->move_to[ev->buf]
                                                                             : ev->step;
            m->oe[m->n_oe++] = (struct out_ev){
                at, at == ev->step ? (int64_t)e : INT64_MAX / 2 + (int64_t)e,
                {ev->kind, ev->buf, at}};
        }
    }
    for (int32_t sid = 0; sid < m->p.n_st; sid++) {
        int32_t id = m->n_ob++;
        m->ob[id] = in->buf[st[sid].largest];
        uint64_t b = st[sid].bytes;
        m->ob[id].bytes = b > UINT64_MAX - 3 ? b : (b + 3) / 4 * 4;
        m->stats->storage_bytes += m->ob[id].bytes;
        /* after the step's kept events, before nothing else: the step's
         * requests come first in its order */
        m->oe[m->n_oe++] = (struct out_ev){st[sid].first_step, -1 - (int64_t)(m->p.n_st - sid),
                                           {DM_EV_ALLOC, id, st[sid].first_step}};
    }
    m->stats->storages = m->p.n_st;
    qsort(m->oe, m->n_oe, sizeof *m->oe, cmp_out_ev);
}

/* the planned schedule: the buffers handed over, the events and steps copied */
static enum dnnmem_status build_output(struct mxp *m, struct dm_schedule *out,
                                       struct dnnmem_error *err)
{
    const struct dm_schedule *in = m->in;
    out->buf = m->ob;
    out->n_buf = out->cap_buf = m->n_ob;
    m->ob = NULL;
    out->ev = malloc((m->n_oe + 1) * sizeof *out->ev);
    out->steps = malloc(((size_t)in->n_steps + 1) * sizeof *out->steps);
    if (!out->ev || !out->steps) {
        dm_schedule_free(out);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", m->g ? m->g->path : "schedule");
    }
    for (size_t k = 0; k < m->n_oe; k++)
        out->ev[k] = m->oe[k].ev;
    out->n_ev = out->cap_ev = m->n_oe;
    memcpy(out->steps, in->steps, (size_t)in->n_steps * sizeof *out->steps);
    out->n_steps = out->cap_steps = in->n_steps;
    return DNNMEM_OK;
}

enum dnnmem_status dm_mxnet_plan(const struct dm_graph *g, const struct dm_schedule *in,
                                 uint64_t match_range, struct dm_schedule *out,
                                 struct dm_mxplan_stats *stats, struct dnnmem_error *err)
{
    memset(out, 0, sizeof *out);
    memset(stats, 0, sizeof *stats);
    if (match_range == 0)
        match_range = 16;
    struct mxp m = {.g = g, .in = in, .stats = stats};
    find_window(in, &m.wf, &m.we);
    enum dnnmem_status s = DNNMEM_OK;
    if (!mxp_alloc(&m)) {
        s = dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g ? g->path : "schedule");
    } else {
        mark_externals(&m);
        m.p = (struct plan){.st = m.st, .n_st = 0, .seq = 0, .range = match_range,
                            .free_ids = m.free_ids, .n_free = 0};
        plan_window(&m);
        emit_events(&m);
        s = build_output(&m, out, err);
    }
    mxp_free(&m);
    return s;
}

/* Insert n buffers `add` allocated at the schedule's first step, after its
 * own events (bind's arrays come first), kept; the last n_free of them freed
 * there again after all were allocated. */
static enum dnnmem_status prepend_buffers(const struct dm_graph *g, struct dm_schedule *s,
                                          const struct dm_buffer *add, int32_t n, int32_t n_free,
                                          struct dnnmem_error *err)
{
    if (n == 0)
        return DNNMEM_OK;
    if ((size_t)s->n_buf + (size_t)n > INT32_MAX)
        return dm_fail(err, DNNMEM_E_LIMIT, "%s: too many buffers", g->path);
    struct dm_buffer *nb = realloc(s->buf, ((size_t)s->n_buf + (size_t)n) * sizeof *nb);
    if (nb)
        s->buf = nb;
    size_t n_new = (size_t)n + (size_t)n_free;
    struct dm_event *ne = malloc((s->n_ev + n_new) * sizeof *ne);
    if (!nb || !ne) {
        free(ne);
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    }
    int32_t step = s->n_ev ? s->ev[0].step : 0, first = s->n_buf;
    size_t at = 0;
    while (at < s->n_ev && s->ev[at].step == step)
        at++;
    memcpy(ne, s->ev, at * sizeof *ne);
    for (int32_t k = 0; k < n; k++) {
        s->buf[s->n_buf] = add[k];
        ne[at + (size_t)k] = (struct dm_event){.kind = DM_EV_ALLOC, .buf = s->n_buf++, .step = step};
    }
    for (int32_t k = 0; k < n_free; k++)
        ne[at + (size_t)n + (size_t)k] = (struct dm_event){
            .kind = DM_EV_FREE, .buf = first + n - n_free + k, .step = step};
    s->cap_buf = s->n_buf;
    memcpy(ne + at + n_new, s->ev + at, (s->n_ev - at) * sizeof *ne);
    free(s->ev);
    s->ev = ne;
    s->n_ev += n_new;
    s->cap_ev = s->n_ev;
    return DNNMEM_OK;
}

static bool all_equal(const struct dm_node *n, const char *name, int64_t v)
{
    int64_t cnt = 0;
    const int64_t *a = dm_attr_ints(n, name, &cnt);
    for (int64_t k = 0; a && k < cnt; k++)
        if (a[k] != v)
            return false;
    return true;
}

enum dnnmem_status dm_mxnet_cpu_temp(const struct dm_graph *g, const struct dm_tinfo *t,
                                     struct dm_schedule *s, uint64_t *bytes,
                                     struct dnnmem_error *err)
{
    uint64_t best = 0;
    int32_t at = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        if (n->op != DM_OP_Conv || !dm_has_in(n, 0) || !dm_has_in(n, 1) || !dm_has_out(n, 0))
            continue;
        const struct dm_tinfo *x = &t[n->in[0]], *w = &t[n->in[1]], *y = &t[n->out[0]];
        if (x->rank < 3 || w->rank != x->rank || y->rank != x->rank)
            continue;
        bool one = all_equal(n, "strides", 1) && all_equal(n, "pads", 0);
        uint64_t e = (uint64_t)x->dims[1], b;
        for (int k = 2; k < w->rank; k++) {
            one = one && w->dims[k] == 1;
            e = sat_mul(sat_mul(e, (uint64_t)w->dims[k]), (uint64_t)y->dims[k]);
        }
        if (one || !dm_dtype_bytes(x->dtype, (int64_t)(e > INT64_MAX ? INT64_MAX : e), &b))
            continue;
        if (b > best) {
            best = b;
            at = i;
        }
    }
    *bytes = best;
    if (!best)
        return DNNMEM_OK;
    struct dm_buffer tb = {.bytes = best, .tensor = -1, .node = at,
                           .category = DNNMEM_CAT_WORKSPACE, .dtype = DM_UINT8,
                           .what = "kTempSpace (im2col column buffer)"};
    return prepend_buffers(g, s, &tb, 1, 0, err);
}

enum dnnmem_status dm_mxnet_module_copies(const struct dm_graph *g, const struct dm_tinfo *t,
                                          struct dm_schedule *s, uint64_t *bytes,
                                          struct dnnmem_error *err)
{
    int32_t n = 0;
    *bytes = 0;
    for (int32_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].role == DM_ROLE_WEIGHT && t[i].rank >= 0 && !t[i].absent)
            n++;
    if (n == 0)
        return DNNMEM_OK;
    struct dm_buffer *add = malloc(2 * (size_t)n * sizeof *add);
    if (!add)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    int32_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < g->n_tensors; i++) {
            if (g->tensors[i].role != DM_ROLE_WEIGHT || t[i].rank < 0 || t[i].absent)
                continue;
            add[k++] = (struct dm_buffer){
                .bytes = t[i].bytes, .tensor = i, .node = -1,
                .category = pass ? DNNMEM_CAT_TEMPORARY : DNNMEM_CAT_WEIGHT,
                .dtype = (uint8_t)t[i].dtype,
                .what = pass ? "copy_params_from astype copy" : "Module._arg_params copy"};
            if (!pass)
                *bytes += t[i].bytes;
        }
    enum dnnmem_status st = prepend_buffers(g, s, add, k, k / 2, err);
    free(add);
    return st;
}
