/*
 * parallel.c: one data-parallel rank's step (docs/parallel.md), on the
 * schedule builder: what DistributedDataParallel, DeepSpeed ZeRO 1-3 and
 * FSDP2 add to, or take from, one process's step. It calls only the builder
 * (builder.h); the forward pass, the backward, the optimizer and the
 * schedule's setup call it (tools/callgraph.py keeps it so).
 *
 * The rules, each with its source:
 *
 * D1 DDP's Reducer allocates one flat gradient buffer per bucket when it is
 *    constructed (torch/csrc/distributed/c10d/reducer.cpp, Reducer::
 *    initialize_buckets: bucket.gradients = at::empty({offset}, options)),
 *    before the first step: one bucket of every parameter (torch 2.13
 *    distributed.py, _BucketCapacityConfig.compute_bucket_size_limits:
 *    [sys.maxsize] unless find_unused_parameters; measured, torch 2.13 gloo,
 *    /tmp mgpu findings F1). The second forward rebuilds them
 *    (_rebuild_buckets in _pre_forward): the old one freed, then buckets in
 *    the order the grads became ready (reverse parameter order), the first up
 *    to 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES), the rest up to
 *    bucket_cap_mb = 25 (x 1024 x 1024 bytes), a bucket closing once it
 *    reaches its limit (measured: 4,100,000 then 2 x 33,579,008 B). Each ready grad
 *    is copied into its bucket view and the bucket all-reduced in place; the
 *    .grad stays (two copies of every gradient), unless
 *    gradient_as_bucket_view=True: the reducer then points .grad at the
 *    bucket view and the autograd-made grad is freed (runGradCallbackForVariable).
 *    Before the Reducer, _sync_module_states broadcasts the module's states
 *    from rank 0 with _broadcast_coalesced in buckets of 250 MiB
 *    (broadcast_bucket_size), each flattened into one temporary
 *    (flatten_dense_tensors; measured: one temporary of all the parameters'
 *    bytes, freed).
 * Z1 DeepSpeed ZeRO 1/2 (deepspeed/runtime/zero/stage_1_and_2.py, 0.19.6):
 *    the 16-bit (or fp32) parameters stay whole on every rank; the
 *    trainable ones form one flat group padded to a multiple of 2 x world
 *    (nccl_start_alignment_factor), split into equal partitions; each rank
 *    keeps an fp32 copy of its partition (single_partition_of_fp32_groups:
 *    .detach().clone().to(master dtype), even when the model is fp32) and the
 *    optimizer's state of it (torch.optim's zeros_like of the flat partition).
 * Z2 Stage 2 registers grad hooks: each ready grad is copied into the IPG
 *    bucket, a buffer of reduce_bucket_size (5e8) elements in the model's
 *    dtype made at the first grad of a backward (setup_buckets: torch.empty(
 *    int(self.reduce_bucket_size))), two with overlap_comm (default False);
 *    the grad's storage goes at once; the rank's part of each reduced bucket
 *    is copied into grads_in_partition (its partition's numel, made at the
 *    first copy). Stage 1 (partition_grads False) makes the bucket at the
 *    first grad hook (setup_buckets) but keeps every .grad until the backward
 *    ends; reduce_gradients then copies them into the bucket in parameter
 *    order (each grad's storage going), reducing each full bucket, and its
 *    grads_in_partition holds the whole parameters its range touches (so the
 *    ranks differ; measured, mgpuoracle F7). At the
 *    end of the backward the partition's grads become one fp32 tensor
 *    (get_all_grad_tensors / get_flat_partition in gradient_accumulation_dtype,
 *    torch.float32) and the bucket and grads_in_partition are released
 *    (_release_ipg_buffers); the fp32 grad partition lives until the step
 *    ends.
 * Z3 Stage 3 (deepspeed/runtime/zero/partition_parameters.py, stage3.py):
 *    each parameter of more than stage3_param_persistence_threshold (1e5)
 *    elements is partitioned on its own (ds_tensor: ceil(numel / world)
 *    elements); smaller ones stay whole. A module's parameters are
 *    all-gathered before its forward and its backward and released after
 *    them; from the second step the trace prefetches the next modules' up to
 *    stage3_prefetch_bucket_size (5e7) elements. Grads go through a reduce
 *    bucket of reduce_bucket_size elements into a flat partition of the
 *    grads; the fp32 master partition and the optimizer's state as Z1.
 * Z4 offload_optimizer: the fp32 partition, the optimizer state and the fp32
 *    grad partition live in host memory; offload_param (stage 3): the
 *    parameter partitions too.
 * Z5 ZeRO 1/2's step ends with an all-gather into the flat group; on gloo a
 *    transient of its size (zero_step_gather).
 * Z6 ZeRO-3 from the second step keeps a module's gathered parameters from
 *    its forward to its backward within stage3_max_reuse_distance (z3_reused).
 * F1 FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
 *    _fsdp_collectives.py): every parameter of a unit is chunked on dim 0
 *    over the shard group (torch.chunk); each rank stores its chunk padded to
 *    ceil(dim0 / shard) rows (_sharded_param_data), the optimizer's state is
 *    zeros_like of the unpadded chunk (the DTensor's local tensor), so the
 *    last ranks hold less when dim 0 does not divide.
 * F2 Before a unit's forward, and again before its backward unless it was
 *    not resharded, foreach_all_gather makes one flat output of the unit's
 *    padded shards x shard ranks; the copy-out splits it into each
 *    parameter's own unsharded buffer (init_all_gather_outputs); the flat
 *    output is kept as the last all-gather's state (comm_ctx.all_gather_state)
 *    until the next all-gather's copy-out in the forward, so two are live
 *    then (measured, mgpuoracle F3), and the root's _post_forward frees the
 *    last (_fsdp_state.py, iter_forward_root); in the backward the output
 *    goes right after its copy-out (_fsdp_param_group.py, wait_for_unshard). gloo (the CPU) makes a transient of the flat size inside
 *    the collective (c10d::_allgather_base_, and on its own thread).
 *    reshard_after_forward=True (full, hybrid) frees the
 *    unsharded parameters after the unit's forward; the root (everything
 *    outside the wrapped units) is never resharded after forward. Before a
 *    unit's backward the next unit in backward order is prefetched
 *    (_backward_prefetch): its all-gather is issued, its copy-out waits for
 *    its own pre-backward (wait_for_unshard; measured, mgpuoracle F3).
 * F3 After a unit's backward (post_backward): the parameters are resharded,
 *    foreach_reduce makes the reduce-scatter input (the unit's padded
 *    numel), copies the unsharded grads into it and frees them, and the
 *    output (one padded shard of the unit) whose views are the sharded
 *    .grad; the input is held as the reduce-scatter's state until the next
 *    unit's post-backward (one reduce-scatter in flight; the last one at the
 *    end of the backward). gloo clones the input inside the reduce-scatter
 *    (measured, mgpuoracle F3).
 * T6 Tensor parallel (--tp, the plan src/graph/tp.c), as DTensor runs it
 *    (torch/distributed/tensor/parallel/style.py; measured, torch 2.13 gloo,
 *    tools/oracle/dist_measure.py trace mlp4-tp-w2-b4-adam): a row-parallel
 *    linear's output is Partial, and its redistribution to Replicate is a
 *    functional all-reduce into a copy ("Redistribute > aten::clone"), the
 *    partial freed after it: one output-sized transient after the node (the
 *    bias's Replicate-to-Partial division, a bias-sized temporary during the
 *    product, is below it). In the backward, a column-parallel linear's
 *    input grad is Partial too: its all-reduce copies it
 *    ("_FromTorchTensorBackward > aten::clone"), one transient of the input's
 *    size. Megatron's all-reduces run in place (mappings.py, _reduce:
 *    torch.distributed.all_reduce(input_)): no transient.
 * T8 Sequence parallel (--sp, the roles of src/graph/tp.c S1-S5), as DTensor
 *    runs it (style.py ColwiseParallel(input_layouts=Shard(1)),
 *    RowwiseParallel(output_layouts=Shard(1)); _functional_collectives.py
 *    all_gather_tensor and reduce_scatter_tensor, which gather and scatter
 *    along dim 0 and move dim 1 with a cat; measured, torch 2.13 gloo,
 *    tools/oracle/dist_measure.py trace tfm4-tp-sp-w2-b32-adam). With L the
 *    rank's split tensor and F = TP x L the whole one:
 *    - a column-parallel linear's input is all-gathered: the dim-0 gather's
 *      output (F, "_c10d_functional::all_gather_into_tensor") and the cat
 *      along dim 1 ("Redistribute > aten::cat", F) that the linear reads and
 *      saves for its weight's grad, until its backward (each linear its own:
 *      q, k and v gather ln1's output three times); the dim-0 output is freed
 *      after the cat (gloo's coalesced copy of the input, L, comes before
 *      the cat, below the pair);
 *    - a row-parallel linear's Partial output (F) is reduce-scattered: the cat
 *      of its dim-1 chunks (F), the output (L) and, on gloo, its clone of the
 *      input (F, freed at the wait); all but the output go before the next op;
 *    - in the backward, the row-parallel output's grad (L) is all-gathered
 *      into F (the dim-0 output a transient as in the forward), held through
 *      the linear's backward; the column-parallel input's grad is computed
 *      whole (F, Partial) and reduce-scattered as in the forward, to L.
 *    Megatron-LM differs (megatron/core/tensor_parallel/layers.py,
 *    LinearWithGradAccumulationAndAsyncCommunication; main-branch source, release tag not pinned): it
 *    gathers along dim 0 of [s, b, h] into one persistent buffer
 *    (get_global_memory_buffer) and saves the rank's input, gathering it
 *    again in the backward; not modelled (docs/parallel.md).
 */
#include "train/train.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

struct dm_pstate {
    int32_t n_units;
    int32_t *unit;        /* per node: its unit (0: the root), -1: none */
    int32_t *ufirst, *ulast;
    bool *gathered;       /* per unit */
    int32_t *rs_out;      /* per unit: the sharded grads' flat buffer, -1 */
    int32_t *punit;       /* per tensor: the unit its parameter belongs to, -1: not sharded */
    int32_t *ustart, *ulist; /* per unit + 1: CSR index into ulist, its parameters */
    int64_t *unumel;      /* per unit: its parameters' elements */
    int64_t *uall;        /* per unit: every parameter's elements, persistent ones too (Z3) */
    int32_t *full;        /* per tensor: its all-gathered buffer, -1 */
    int32_t *bucket;      /* per tensor: its DDP bucket's buffer, -1 */
    int32_t ipg[2], gpart, master, fp32_grad, n_ipg;
    uint64_t partition;   /* ZeRO: the elements of this rank's flat partition */
    uint64_t gpart_elems; /* ZeRO 1/2: grads_in_partition's, the whole parameters the
                             partition holds part of (copy_grads_in_partition) */
    enum dm_dtype gdtype; /* ZeRO: the grads' dtype */
    bool rebuilt;         /* DDP: the buckets rebuilt (D1) */
    int32_t last_ag, last_rs; /* FSDP: the last all-gather's output, reduce-scatter's input (F2, F3) */
    bool backward;        /* in the backward (FSDP's copy-out frees its all-gather at once) */
    int32_t *pending_ag;  /* per unit: an issued all-gather's output not yet copied out, -1 */
    int32_t *sp_buf;      /* per node (T8): its backward's gathered grad or whole input grad, -1 */
};

static bool is_weight(const struct dm_sb *b, int32_t x, const bool *stat)
{
    return b->g->tensors[x].role == DM_ROLE_WEIGHT && dm_dtype_is_float(b->t[x].dtype) &&
           (b->flag[x] & DM_TF_RESIDENT) && !stat[x];
}

/* A parameter's rows (dim 0) and elements per row. */
static void rows_of(const struct dm_tinfo *t, int64_t *rows, int64_t *per)
{
    *rows = t->rank >= 1 ? t->dims[0] : 1;
    *per = *rows > 0 ? t->numel / *rows : 0;
}

/* FSDP2's padded chunk (F1) and this rank's unpadded part, in elements. */
static int64_t fsdp_padded(const struct dm_sb *b, int32_t x)
{
    int64_t rows, per;
    rows_of(&b->t[x], &rows, &per);
    int64_t chunk = (rows + b->run->par.shard - 1) / b->run->par.shard;
    return chunk * per;
}

static int64_t fsdp_local(const struct dm_sb *b, int32_t x)
{
    int64_t rows, per;
    rows_of(&b->t[x], &rows, &per);
    int64_t chunk = (rows + b->run->par.shard - 1) / b->run->par.shard;
    int64_t left = rows - (int64_t)b->run->par.shard_rank * chunk;
    return (left < 0 ? 0 : left < chunk ? left : chunk) * per;
}

static uint64_t elems_bytes(enum dm_dtype dt, int64_t n)
{
    uint64_t bytes = 0;
    return dm_dtype_bytes(dt, n, &bytes) ? bytes : 0;
}

/* The module scope of a node name: up to its last '/'. */
static size_t parent_len(const char *name)
{
    const char *slash = strrchr(name, '/');
    return slash && slash != name ? (size_t)(slash - name) : 0;
}

/* The first `depth` components of name, when it has more; else 0. */
static size_t prefix_len(const char *name, int depth)
{
    int seen = 0;
    for (size_t k = 1; name[0] == '/' && name[k]; k++)
        if (name[k] == '/' && ++seen == depth)
            return k;
    return 0;
}

/* Whether node i's name falls in a wrapped unit; its key's length. */
static size_t unit_key(const struct dm_sb *b, int32_t i)
{
    const struct dm_par *p = &b->run->par;
    const char *name = b->g->nodes[i].name;
    if (p->kind == DM_PAR_ZERO)
        return parent_len(name);
    for (int k = 0; k < p->n_wrap; k++) {
        int depth = 1;
        for (const char *c = p->wrap_specs[k] + 1; *c; c++)
            depth += *c == '/';
        size_t len = prefix_len(name, depth);
        char key[512];
        if (!len || len >= sizeof key)
            continue;
        memcpy(key, name, len);
        key[len] = '\0';
        if (fnmatch(p->wrap_specs[k], key, 0) == 0)
            return len;
    }
    return 0;
}

/* Units: runs of consecutive nodes with one key (the root, 0, the rest). */
static void find_units(struct dm_sb *b, struct dm_pstate *ps)
{
    const struct dm_graph *g = b->g;
    ps->n_units = 1;
    ps->ufirst[0] = 0;
    ps->ulast[0] = g->n_nodes - 1;
    const char *prev = NULL;
    size_t prev_len = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        size_t len = unit_key(b, i);
        const char *name = g->nodes[i].name;
        if (dm_scope_transparent(&g->nodes[i])) { /* "Constant_7": in the run around it
                                                     (measured: tfm4 FSDP2, its units whole) */
            ps->unit[i] = prev ? ps->n_units - 1 : 0;
            continue;
        }
        if (!len) {
            ps->unit[i] = 0;
            prev = NULL;
            continue;
        }
        if (!prev || prev_len != len || strncmp(prev, name, len) != 0) {
            ps->ufirst[ps->n_units] = i;
            ps->n_units++;
        }
        ps->unit[i] = ps->n_units - 1;
        ps->ulast[ps->n_units - 1] = i;
        prev = name;
        prev_len = len;
    }
}

/* Each parameter's unit: its readers' one unit, else the root (tied weights). */
static void param_units(struct dm_sb *b, struct dm_pstate *ps, const bool *stat)
{
    const struct dm_graph *g = b->g;
    for (int32_t x = 0; x < g->n_tensors; x++)
        ps->punit[x] = -2;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const struct dm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (x < 0 || dm_meta_slot(n, k) || !is_weight(b, x, stat))
                continue;
            ps->punit[x] = ps->punit[x] == -2 || ps->punit[x] == ps->unit[i] ? ps->unit[i] : 0;
        }
    }
    for (int32_t x = 0; x < g->n_tensors; x++) {
        if (ps->punit[x] == -2)
            ps->punit[x] = is_weight(b, x, stat) ? 0 : -1;
        if (ps->punit[x] >= 0)
            ps->uall[ps->punit[x]] += b->t[x].numel;
        /* Z3: a parameter up to the persistence threshold stays whole */
        if (ps->punit[x] >= 0 && b->run->par.kind == DM_PAR_ZERO &&
            b->t[x].numel <= b->run->par.zero_persist)
            ps->punit[x] = -1;
    }
}

/* Each unit's parameters (CSR) and elements; whether a sharded dim 0 does
 * not divide (the ranks then differ, F1). */
static bool unit_lists(struct dm_sb *b, struct dm_pstate *ps)
{
    int32_t nu = ps->n_units, nt = b->g->n_tensors;
    ps->ustart = calloc((size_t)nu + 2, sizeof *ps->ustart);
    ps->ulist = malloc(((size_t)nt + 1) * sizeof *ps->ulist);
    ps->unumel = calloc((size_t)nu + 1, sizeof *ps->unumel);
    if (!ps->ustart || !ps->ulist || !ps->unumel)
        return false;
    for (int32_t x = 0; x < nt; x++)
        if (ps->punit[x] >= 0) {
            ps->ustart[ps->punit[x] + 1]++;
            ps->unumel[ps->punit[x]] += b->t[x].numel;
            int64_t rows, per;
            rows_of(&b->t[x], &rows, &per);
            if (b->run->par.kind == DM_PAR_FSDP && rows % b->run->par.shard)
                b->s->par_uneven = true;
        }
    for (int32_t u = 0; u < nu; u++)
        ps->ustart[u + 1] += ps->ustart[u];
    int32_t *fill = malloc(((size_t)nu + 1) * sizeof *fill);
    if (!fill)
        return false;
    memcpy(fill, ps->ustart, (size_t)nu * sizeof *fill);
    for (int32_t x = 0; x < nt; x++)
        if (ps->punit[x] >= 0)
            ps->ulist[fill[ps->punit[x]]++] = x;
    free(fill);
    return true;
}

#define FOR_UNIT(ps, u, k, x)                                                                   \
    for (int32_t k = (ps)->ustart[u], x = k < (ps)->ustart[(u) + 1] ? (ps)->ulist[k] : -1;      \
         k < (ps)->ustart[(u) + 1]; k++, x = k < (ps)->ustart[(u) + 1] ? (ps)->ulist[k] : -1)

enum dnnmem_status dm_par_prepare(struct dm_sb *b, struct dnnmem_error *err)
{
    const struct dm_graph *g = b->g;
    const struct dm_par *p = &b->run->par;
    if (!b->run->train || (p->kind == DM_PAR_NONE && p->tp <= 1))
        return DNNMEM_OK;
    struct dm_pstate *ps = calloc(1, sizeof *ps);
    if (!ps)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    b->par = ps;
    size_t nt = (size_t)g->n_tensors + 1, nn = (size_t)g->n_nodes + 1;
    ps->unit = malloc(nn * sizeof *ps->unit);
    ps->ufirst = malloc(nn * sizeof *ps->ufirst);
    ps->ulast = malloc(nn * sizeof *ps->ulast);
    ps->gathered = calloc(nn, sizeof *ps->gathered);
    ps->rs_out = malloc(nn * sizeof *ps->rs_out);
    ps->pending_ag = malloc(nn * sizeof *ps->pending_ag);
    ps->sp_buf = malloc(nn * sizeof *ps->sp_buf);
    ps->uall = calloc(nn, sizeof *ps->uall);
    ps->punit = malloc(nt * sizeof *ps->punit);
    ps->full = malloc(nt * sizeof *ps->full);
    ps->bucket = malloc(nt * sizeof *ps->bucket);
    bool *stat = calloc(nt, sizeof *stat);
    if (!ps->unit || !ps->ufirst || !ps->ulast || !ps->gathered || !ps->rs_out || !ps->pending_ag || !ps->sp_buf || !ps->punit ||
        !ps->full || !ps->bucket || !ps->uall || !stat) {
        free(stat);
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < g->n_nodes; i++) { /* BatchNorm's running statistics: buffers */
        const struct dm_node *n = &g->nodes[i];
        if (n->op == DM_OP_BatchNormalization && n->n_in >= 5)
            for (int k = 3; k < 5; k++)
                if (n->in[k] >= 0)
                    stat[n->in[k]] = true;
    }
    for (int32_t i = 0; i < g->n_nodes + 1; i++)
        ps->rs_out[i] = ps->pending_ag[i] = ps->sp_buf[i] = -1;
    for (int32_t x = 0; x < g->n_tensors; x++)
        ps->full[x] = ps->bucket[x] = -1;
    ps->ipg[0] = ps->ipg[1] = ps->gpart = ps->master = ps->fp32_grad = -1;
    ps->last_ag = ps->last_rs = -1;
    if (p->kind == DM_PAR_FSDP || (p->kind == DM_PAR_ZERO && p->zero == 3)) {
        find_units(b, ps);
        param_units(b, ps, stat);
        if (!unit_lists(b, ps)) {
            free(stat);
            return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
        }
    } else {
        for (int32_t x = 0; x < g->n_tensors; x++)
            ps->punit[x] = -1;
    }
    free(stat);
    return DNNMEM_OK;
}

/* Setup: the bytes of weight x's resident storage on this rank. */
uint64_t dm_par_resident_bytes(const struct dm_sb *b, int32_t x)
{
    const struct dm_pstate *ps = b->par;
    if (!ps || ps->punit[x] < 0)
        return b->t[x].bytes;
    if (b->run->par.kind == DM_PAR_FSDP) /* F1 */
        return elems_bytes(b->t[x].dtype, fsdp_padded(b, x));
    if (b->run->par.offload_params) /* Z4 */
        return 0;
    int64_t w = b->run->par.world; /* Z3: ds_tensor */
    return elems_bytes(b->t[x].dtype, (b->t[x].numel + w - 1) / w);
}

/* The bytes of parameter x on this rank that the optimizer's state mirrors. */
uint64_t dm_par_local_bytes(const struct dm_sb *b, int32_t x)
{
    const struct dm_pstate *ps = b->par;
    if (!ps || ps->punit[x] < 0 || b->run->par.kind != DM_PAR_FSDP)
        return b->t[x].bytes;
    return elems_bytes(b->t[x].dtype, fsdp_local(b, x));
}

/* D1: the Reducer's buckets, made at construction (`one`: a single bucket)
 * or rebuilt. */
/* D1: _sync_module_states' flattened broadcast buckets, one at a time. */
static void ddp_broadcast(struct dm_sb *b)
{
    const uint64_t cap = 250ull * 1048576; /* distributed.py: broadcast_bucket_size */
    uint64_t bytes = 0;
    for (int32_t x = 0; x <= b->g->n_tensors; x++) {
        if (x < b->g->n_tensors && (b->g->tensors[x].role != DM_ROLE_WEIGHT ||
                                    !(b->flag[x] & DM_TF_RESIDENT) || !dm_dtype_is_float(b->t[x].dtype)))
            continue;
        if (bytes && (x == b->g->n_tensors || bytes + b->t[x].bytes > cap)) {
            dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_UINT8, bytes, -1, -1,
                        "broadcast_coalesced flat", 0);
            bytes = 0;
        }
        if (x < b->g->n_tensors)
            bytes += b->t[x].bytes;
    }
}

static void ddp_buckets(struct dm_sb *b, struct dm_pstate *ps, bool one)
{
    const struct dm_par *p = &b->run->par;
    const struct dm_train *tr = b->train;
    int32_t first = -1;
    uint64_t bytes = 0, limit = one ? UINT64_MAX : p->ddp_first_bucket_bytes;
    for (int32_t x = b->g->n_tensors - 1; x >= -1; x--) {
        bool close = x < 0 || (first >= 0 && (bytes >= limit ||
                                              (tr->param[x] && b->t[x].dtype != b->t[first].dtype)));
        if (close && first >= 0) {
            int32_t buf = dm_sb_alloc(b, DNNMEM_CAT_GRADIENT, b->t[first].dtype, bytes, -1, -1,
                                      "DDP bucket", 1);
            for (int32_t y = first; y > x; y--)
                if (tr->param[y])
                    ps->bucket[y] = buf;
            first = -1;
            bytes = 0;
            limit = one ? UINT64_MAX : p->ddp_bucket_bytes;
        }
        if (x < 0 || !tr->param[x])
            continue;
        if (first < 0)
            first = x;
        bytes += b->t[x].bytes;
    }
}

/* Z2: each rank's grads_in_partition, the whole parameters its range of the
 * flat group touches (params_in_partition); this rank's, and the rank whose
 * is largest when they differ (struct dm_schedule.par_other_rank). */
static void zero_part_ranks(struct dm_sb *b, struct dm_pstate *ps)
{
    const struct dm_train *tr = b->train;
    int w = b->run->par.world;
    uint64_t part = ps->partition ? ps->partition : 1;
    uint64_t *per = calloc((size_t)w, sizeof *per);
    if (!per)
        return; /* the partition's own size stands */
    uint64_t start = 0;
    for (int32_t x = 0; x < b->g->n_tensors; x++) {
        if (!tr->param[x] || b->t[x].numel <= 0)
            continue;
        uint64_t n = (uint64_t)b->t[x].numel, end = start + n;
        for (uint64_t r = start / part; r <= (end - 1) / part && r < (uint64_t)w; r++)
            per[r] += n;
        start = end;
    }
    ps->gpart_elems = per[b->run->par.rank];
    int heavy = 0;
    for (int r = 1; r < w; r++) {
        if (per[r] != per[0])
            b->s->par_uneven = true;
        if (per[r] > per[heavy])
            heavy = r;
    }
    b->s->par_other_rank = heavy;
    free(per);
}

/* Z1: the flat partition's elements, the fp32 master copy. */
static void zero_start(struct dm_sb *b, struct dm_pstate *ps)
{
    const struct dm_par *p = &b->run->par;
    const struct dm_train *tr = b->train;
    uint64_t total = 0;
    ps->gdtype = DM_FLOAT;
    for (int32_t x = 0; x < b->g->n_tensors; x++)
        if (tr->param[x]) {
            total += (uint64_t)b->t[x].numel;
            ps->gdtype = b->t[x].dtype;
        }
    if (p->zero == 3) { /* Z3: each partition on its own, ceil(numel / world) */
        uint64_t part = 0;
        for (int32_t x = 0; x < b->g->n_tensors; x++)
            if (tr->param[x])
                part += ps->punit[x] < 0 ? (uint64_t)b->t[x].numel
                                         : ((uint64_t)b->t[x].numel + (uint64_t)p->world - 1) /
                                               (uint64_t)p->world;
        ps->partition = part;
    } else {
        uint64_t align = 2 * (uint64_t)p->world;
        ps->partition = (total + align - 1) / align * align / (uint64_t)p->world;
    }
    /* stage 1's grads_in_partition holds the whole parameters its range
     * touches (measured: mlp4 fp32, 2 ranks, rank 0's 41,967,616 B for a
     * 35,629,008 B partition); stage 2's rows are exact with the partition's
     * size, a difference not yet traced to DeepSpeed's lines */
    ps->gpart_elems = ps->partition;
    if (p->zero == 1)
        zero_part_ranks(b, ps);
    /* the 16-bit (or fp32) group flattened while the parameters still hold
     * their own storage (flatten_dense_tensors), which then become views */
    if (p->zero <= 2)
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, ps->gdtype, elems_bytes(ps->gdtype, (int64_t)total),
                    -1, -1, "flattened parameters", 0);
    if (!p->offload_optimizer) {
        ps->master = dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, ps->partition * 4, -1, -1,
                                 "fp32 master partition", DM_SB_PINNED);
        /* initialize_optimizer_states: a zeros grad of the partition, let go */
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, ps->partition * 4, -1, -1,
                    "fp32 grad partition (init)", 0);
    }
}

void dm_par_start(struct dm_sb *b)
{
    struct dm_pstate *ps = b->par;
    if (!ps)
        return;
    if (b->run->par.kind == DM_PAR_DDP) {
        ddp_broadcast(b);
        ddp_buckets(b, ps, true);
    }
    if (b->run->par.kind == DM_PAR_ZERO)
        zero_start(b, ps);
}

/* F2: unit u's all-gather issued: its flat output (and gloo's transient). */
static void issue(struct dm_sb *b, int32_t u)
{
    struct dm_pstate *ps = b->par;
    if (u < 0 || u >= ps->n_units || ps->gathered[u] || ps->pending_ag[u] >= 0 ||
        b->run->par.kind != DM_PAR_FSDP)
        return;
    int64_t shard = b->run->par.shard;
    uint64_t flat = 0;
    enum dm_dtype dt = DM_FLOAT;
    FOR_UNIT(ps, u, k, x) {
        flat += elems_bytes(b->t[x].dtype, fsdp_padded(b, x) * shard);
        dt = b->t[x].dtype;
    }
    if (!flat)
        return;
    ps->pending_ag[u] = dm_sb_alloc(b, DNNMEM_CAT_WEIGHT, dt, flat, -1, -1, "all-gather output", 1);
    if (!b->run->cuda) /* gloo's transient inside the collective */
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, flat, -1, -1, "gloo all_gather", 0);
}

/* F2 / Z3: unit u's parameters unsharded, each its own buffer: FSDP's
 * copy-out of its all-gather (issued now unless prefetched), which lets go
 * of the all-gather before it; ZeRO-3's gathered parameters. */
static void gather(struct dm_sb *b, int32_t u)
{
    struct dm_pstate *ps = b->par;
    if (u < 0 || u >= ps->n_units || ps->gathered[u])
        return;
    issue(b, u);
    ps->gathered[u] = true;
    bool fsdp = b->run->par.kind == DM_PAR_FSDP;
    int64_t shard = b->run->par.shard;
    FOR_UNIT(ps, u, k, x)
        if (ps->full[x] < 0)
            ps->full[x] = dm_sb_alloc(b, DNNMEM_CAT_WEIGHT, b->t[x].dtype,
                                      fsdp ? elems_bytes(b->t[x].dtype, fsdp_padded(b, x) * shard)
                                           : b->t[x].bytes,
                                      x, -1, "all-gathered", 1);
    /* wait_for_unshard defers the free only in the forward, to overlap the
     * copy-out with the next all-gather; in the backward the output goes
     * after its copy-out (measured: mlp4 FSDP2 full, 2 ranks, -0.01%) */
    if (ps->pending_ag[u] >= 0 && ps->backward) {
        dm_sb_unref(b, ps->pending_ag[u]);
        ps->pending_ag[u] = -1;
    } else if (ps->pending_ag[u] >= 0) { /* kept as the last all-gather's state */
        if (ps->last_ag >= 0)
            dm_sb_unref(b, ps->last_ag);
        ps->last_ag = ps->pending_ag[u];
        ps->pending_ag[u] = -1;
    }
}

static void reshard(struct dm_sb *b, int32_t u)
{
    struct dm_pstate *ps = b->par;
    if (u < 0 || !ps->gathered[u])
        return;
    ps->gathered[u] = false;
    FOR_UNIT(ps, u, k, x)
        if (ps->full[x] >= 0) {
            dm_sb_unref(b, ps->full[x]);
            ps->full[x] = -1;
        }
}

/* Z3: from the second step the next units' parameters, up to the prefetch
 * bucket's elements, are gathered ahead (dir: +1 forward, -1 backward). */
static void z3_prefetch(struct dm_sb *b, int32_t u, int dir)
{
    struct dm_pstate *ps = b->par;
    if (b->iteration < 2)
        return;
    int64_t budget = b->run->par.zero_prefetch;
    for (int32_t v = u + dir; v >= 1 && v < ps->n_units && budget > 0; v += dir) {
        int64_t n = ps->unumel[v];
        if (n > budget)
            break;
        budget -= n;
        gather(b, v);
    }
}

/* Z6: whether ZeRO-3 keeps unit u's gathered parameters after its forward.
 * From the second step the module trace is complete (reset_step at each
 * forward's start: INVALID, then RECORD, then COMPLETE), and release_sub_module
 * lets go only of the parameters that __params_to_release finds no reuse of
 * within stage3_max_reuse_distance elements of the trace ahead
 * (partitioned_param_coordinator.py, 0.19.8). The next use of u's parameters
 * is its backward; between are the later units' forwards and their
 * backwards, each counted by all its parameters' ds_numel. The first step
 * releases every module's. */
static bool z3_reused(const struct dm_sb *b, int32_t u)
{
    const struct dm_pstate *ps = b->par;
    if (b->iteration < 2)
        return false;
    int64_t between = 0;
    for (int32_t v = u + 1; v < ps->n_units; v++)
        if (!dm_add_ok(between, ps->uall[v], &between) || !dm_add_ok(between, ps->uall[v], &between))
            return false;
    return between < b->run->par.zero_reuse;
}

/* D1: the second forward's _rebuild_buckets. */
static void ddp_rebuild(struct dm_sb *b, struct dm_pstate *ps)
{
    ps->rebuilt = true;
    for (int32_t x = 0; x < b->g->n_tensors; x++) {
        int32_t buf = ps->bucket[x];
        if (buf < 0)
            continue;
        for (int32_t y = x; y < b->g->n_tensors; y++)
            if (ps->bucket[y] == buf)
                ps->bucket[y] = -1;
        dm_sb_unref(b, buf);
    }
    ddp_buckets(b, ps, false);
}

void dm_par_forward_enter(struct dm_sb *b, int32_t i)
{
    struct dm_pstate *ps = b->par;
    if (ps && i == 0 && b->run->par.kind == DM_PAR_DDP && b->iteration >= 2 && !ps->rebuilt)
        ddp_rebuild(b, ps);
    if (!ps || ps->n_units == 0)
        return;
    if (i == 0)
        gather(b, 0); /* the root's pre-forward runs first */
    int32_t u = ps->unit[i];
    if (u > 0 && ps->ufirst[u] == i) {
        gather(b, u);
        if (b->run->par.kind == DM_PAR_ZERO)
            z3_prefetch(b, u, 1);
    }
}

/* T6: a transient the size of tensor x (an all-reduce's copy). */
static void tp_copy(struct dm_sb *b, int32_t x, int32_t i, const char *what)
{
    if (x >= 0 && b->t[x].rank >= 0)
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, b->t[x].bytes, x, i, what, 0);
}

/* T8: the whole tensor of x, split along the sequence (F = TP x L). */
static uint64_t sp_whole(const struct dm_sb *b, int32_t x)
{
    uint64_t f = 0;
    if (x < 0 || b->t[x].rank < 0 || !dm_umul_ok(b->t[x].bytes, (uint64_t)b->run->par.tp, &f))
        return 0;
    return f;
}

/* T8: a reduce-scatter of x's whole Partial tensor to x's split (L): the cat
 * of the dim-1 chunks, the output (L) and gloo's clone of the input, all live
 * at once, then all but the output gone. */
static void sp_reduce_scatter(struct dm_sb *b, int32_t x, int32_t i, const char *what)
{
    uint64_t f = sp_whole(b, x);
    enum dm_dtype dt = b->t[x].dtype;
    int32_t cat = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, f, x, i, what, 1);
    int32_t out = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, b->t[x].bytes, x, i,
                              "sequence parallel: reduce-scatter output", 1);
    int32_t clone = b->run->cuda ? -1
                                 : dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, f, x, i,
                                               "sequence parallel: gloo's copy of the input", 1);
    dm_sb_unref(b, cat);
    dm_sb_unref(b, clone);
    dm_sb_unref(b, out);
}

/* T8: before a column-parallel linear under --sp reads its input: the
 * all-gather, whose result takes input slot 0 (what the product reads and
 * save.c keeps). Called by the forward after autocast's casts. */
void dm_par_forward_gather(struct dm_sb *b, int32_t i)
{
    const int8_t *role = b->run->par.tp_role;
    const struct dm_node *n = &b->g->nodes[i];
    if (!role || role[i] != DM_TP_COL_SP || n->n_in < 1 || n->in[0] < 0)
        return;
    int32_t x = n->in[0];
    uint64_t f = sp_whole(b, x);
    if (b->in_buf[0] >= 0)
        dm_sb_unref(b, b->in_buf[0]);
    b->in_buf[0] = dm_sb_alloc(b, DNNMEM_CAT_ACTIVATION, b->t[x].dtype, f, x, i,
                               "sequence parallel: all-gathered input", 1);
    dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, f, x, i,
                "sequence parallel: all-gather output (dim 0)", 0);
}

void dm_par_forward_leave(struct dm_sb *b, int32_t i)
{
    struct dm_pstate *ps = b->par;
    const int8_t *role = b->run->par.tp_role;
    if (role && role[i] == DM_TP_ROW)
        tp_copy(b, b->g->nodes[i].out[0], i, "tensor parallel: all-reduce of the row-parallel output");
    if (role && role[i] == DM_TP_ROW_SP) { /* T8: the Partial output, then its reduce-scatter */
        int32_t o = b->g->nodes[i].out[0];
        int32_t part = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[o].dtype, sp_whole(b, o), o, i,
                                   "sequence parallel: the row-parallel Partial output", 1);
        sp_reduce_scatter(b, o, i, "sequence parallel: reduce-scatter's cat of the chunks");
        dm_sb_unref(b, part);
    }
    if (!ps || ps->n_units == 0)
        return;
    int32_t u = ps->unit[i];
    bool zero = b->run->par.kind == DM_PAR_ZERO;
    if (u > 0 && ps->ulast[u] == i && (zero || b->run->par.reshard) && !(zero && z3_reused(b, u)))
        reshard(b, u);
    if (zero && i == b->g->n_nodes - 1)
        reshard(b, 0);
    if (i == b->g->n_nodes - 1 && ps->last_ag >= 0) { /* the root's _post_forward */
        dm_sb_unref(b, ps->last_ag);
        ps->last_ag = -1;
    }
}

void dm_par_backward_enter(struct dm_sb *b, int32_t i)
{
    struct dm_pstate *ps = b->par;
    const int8_t *role = b->run->par.tp_role;
    if (ps && role && role[i] == DM_TP_ROW_SP) { /* T8: the output's grad gathered */
        int32_t o = b->g->nodes[i].out[0];
        uint64_t f = sp_whole(b, o);
        ps->sp_buf[i] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[o].dtype, f, o, i,
                                    "sequence parallel: all-gathered output grad", 1);
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[o].dtype, f, o, i,
                    "sequence parallel: all-gather output (dim 0)", 0);
    }
    if (ps && role && role[i] == DM_TP_COL_SP) { /* T8: the input's grad made whole (Partial) */
        int32_t x = b->g->nodes[i].in[0];
        if (x >= 0 && dm_train_requires_grad(b, x) && sp_whole(b, x) >= b->t[x].bytes)
            ps->sp_buf[i] = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype,
                                        sp_whole(b, x) - b->t[x].bytes, x, i,
                                        "sequence parallel: the input grad's whole sequence", 1);
    }
    if (!ps || ps->n_units == 0)
        return;
    if (i == b->g->n_nodes - 1) {
        ps->backward = true;
        gather(b, 0);
    }
    int32_t u = ps->unit[i];
    if (u > 0 && ps->ulast[u] == i) {
        gather(b, u);
        if (b->run->par.kind == DM_PAR_FSDP)
            issue(b, u - 1 >= 1 ? u - 1 : -1); /* F2: _backward_prefetch's all-gather */
        else
            z3_prefetch(b, u, -1);
    }
}

/* F3: unit u's grads reduce-scattered into its sharded grads. */
static void fsdp_reduce(struct dm_sb *b, int32_t u)
{
    struct dm_pstate *ps = b->par;
    struct dm_train *tr = b->train;
    int64_t shard = b->run->par.shard;
    uint64_t in = 0, out = 0;
    enum dm_dtype dt = DM_FLOAT;
    bool any = false;
    FOR_UNIT(ps, u, k, x)
        if (tr->param[x]) {
            in += elems_bytes(b->t[x].dtype, fsdp_padded(b, x) * shard);
            out += elems_bytes(b->t[x].dtype, fsdp_padded(b, x));
            dt = b->t[x].dtype;
            any |= tr->param_grad[x] >= 0 && tr->param_grad[x] != ps->rs_out[u];
        }
    if (!any)
        return;
    if (ps->last_rs >= 0) { /* the reduce-scatter in flight is waited for */
        dm_sb_unref(b, ps->last_rs);
        ps->last_rs = -1;
    }
    int32_t rs_in = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, in, -1, -1, "reduce-scatter input", 1);
    FOR_UNIT(ps, u, k, x)
        if (tr->param[x] && tr->param_grad[x] >= 0 && tr->param_grad[x] != ps->rs_out[u]) {
            dm_sb_unref(b, tr->param_grad[x]);
            tr->param_grad[x] = -1;
        }
    int32_t rs = dm_sb_alloc(b, DNNMEM_CAT_GRADIENT, dt, out, -1, -1, "sharded grads", 1);
    if (!b->run->cuda) /* gloo's clone of the input */
        dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, in, -1, -1, "gloo reduce_scatter", 0);
    ps->last_rs = rs_in;
    if (ps->rs_out[u] >= 0) { /* accumulated into the sharded grads in place */
        dm_sb_unref(b, rs);
        return;
    }
    ps->rs_out[u] = rs;
    int32_t holders = 0;
    FOR_UNIT(ps, u, k, x)
        if (tr->param[x]) {
            tr->param_grad[x] = rs; /* a view of it */
            holders++;
        }
    dm_sb_ref(b, rs, holders - 1);
}

void dm_par_backward_leave(struct dm_sb *b, int32_t i)
{
    struct dm_pstate *ps = b->par;
    const int8_t *role = b->run->par.tp_role;
    int32_t x = b->g->nodes[i].n_in > 0 ? b->g->nodes[i].in[0] : -1;
    if (role && role[i] == DM_TP_COL && x >= 0 && dm_train_requires_grad(b, x))
        tp_copy(b, x, i, "tensor parallel: all-reduce of the column-parallel input's grad");
    if (ps && role && role[i] == DM_TP_COL_SP && ps->sp_buf[i] >= 0) /* T8 */
        sp_reduce_scatter(b, x, i, "sequence parallel: reduce-scatter's cat of the input grad");
    if (ps && (role && (role[i] == DM_TP_COL_SP || role[i] == DM_TP_ROW_SP)) && ps->sp_buf[i] >= 0) {
        dm_sb_unref(b, ps->sp_buf[i]);
        ps->sp_buf[i] = -1;
    }
    if (!ps || ps->n_units == 0)
        return;
    int32_t u = ps->unit[i];
    if (u > 0 && ps->ufirst[u] == i) {
        reshard(b, u);
        if (b->run->par.kind == DM_PAR_FSDP)
            fsdp_reduce(b, u);
    }
}

/* Z2: the reduce bucket and the grad partition, made when first needed. */
static void zero_bucket(struct dm_sb *b, struct dm_pstate *ps)
{
    if (ps->ipg[0] < 0)
        ps->ipg[0] = dm_sb_alloc(b, DNNMEM_CAT_GRADIENT, ps->gdtype,
                                 elems_bytes(ps->gdtype, b->run->par.zero_bucket), -1, -1,
                                 "ZeRO reduce bucket", 1);
}

static void zero_buffers(struct dm_sb *b, struct dm_pstate *ps)
{
    zero_bucket(b, ps);
    if (ps->gpart < 0 && !b->run->par.offload_optimizer)
        ps->gpart = dm_sb_alloc(b, DNNMEM_CAT_GRADIENT, ps->gdtype,
                                elems_bytes(ps->gdtype, (int64_t)ps->gpart_elems), -1, -1,
                                "grads in partition", 1);
}

/* Z2, stage 1: after the backward, reduce_gradients walks the parameters in
 * order: each grad is copied into the bucket and its storage goes; a full
 * bucket (or a parameter larger than it, reduced on its own) is reduced and
 * the rank's part copied into grads_in_partition, made at the first. */
static void zero1_reduce(struct dm_sb *b, struct dm_pstate *ps)
{
    struct dm_train *tr = b->train;
    int64_t cap = b->run->par.zero_bucket, elems = 0;
    for (int32_t x = 0; x < b->g->n_tensors; x++) {
        if (!tr->param[x] || tr->param_grad[x] < 0)
            continue;
        zero_bucket(b, ps);
        int64_t n = b->t[x].numel;
        if (n > cap || elems + n > cap) {
            if (elems > 0 || n > cap)
                zero_buffers(b, ps);
            elems = 0;
        }
        dm_sb_unref(b, tr->param_grad[x]);
        tr->param_grad[x] = -1;
        if (n <= cap)
            elems += n;
    }
    if (elems > 0)
        zero_buffers(b, ps);
}

/* D1, Z2, Z3: parameter x's .grad is made in this backward. */
void dm_par_grad_ready(struct dm_sb *b, int32_t x)
{
    struct dm_pstate *ps = b->par;
    struct dm_train *tr = b->train;
    if (!ps || tr->param_grad[x] < 0)
        return;
    const struct dm_par *p = &b->run->par;
    if (p->kind == DM_PAR_DDP && p->ddp_bucket_view && ps->bucket[x] >= 0 &&
        tr->param_grad[x] != ps->bucket[x]) {
        dm_sb_unref(b, tr->param_grad[x]);
        tr->param_grad[x] = ps->bucket[x];
        dm_sb_ref(b, ps->bucket[x], 1);
    }
    if (p->kind == DM_PAR_ZERO && p->zero >= 2) {
        zero_buffers(b, ps);
        dm_sb_unref(b, tr->param_grad[x]);
        tr->param_grad[x] = -1;
    }
    if (p->kind == DM_PAR_ZERO && p->zero == 1) /* setup_buckets at the first grad hook */
        zero_bucket(b, ps);
}

/* The end of the backward: the root's post-backward (F3), ZeRO's reduction
 * and its fp32 grad partition (Z2). */
void dm_par_backward_end(struct dm_sb *b)
{
    struct dm_pstate *ps = b->par;
    if (!ps)
        return;
    const struct dm_par *p = &b->run->par;
    ps->backward = false;
    if (ps->n_units > 0) {
        reshard(b, 0);
        if (p->kind == DM_PAR_FSDP)
            fsdp_reduce(b, 0);
        if (ps->last_rs >= 0) { /* the root's final callback waits for the last */
            dm_sb_unref(b, ps->last_rs);
            ps->last_rs = -1;
        }
    }
    if (p->kind != DM_PAR_ZERO)
        return;
    if (p->zero == 1) /* Z2: stage 1 reduces every grad now */
        zero1_reduce(b, ps);
    /* the partition's grads in gradient_accumulation_dtype (fp32): a copy
     * of 16-bit grads; fp32 grads stay in grads_in_partition, which the flat
     * partition's views keep until the step ends (measured: fp32 mlp4, ZeRO-1
     * and -2 on 2 ranks, no partition-sized tensor made there) */
    if (ps->fp32_grad < 0 && !p->offload_optimizer && ps->gpart >= 0 && ps->gdtype == DM_FLOAT &&
        p->zero == 1) {
        ps->fp32_grad = ps->gpart;
        ps->gpart = -1;
    } else if (ps->fp32_grad < 0 && !p->offload_optimizer && ps->gpart >= 0)
        ps->fp32_grad = dm_sb_alloc(b, DNNMEM_CAT_GRADIENT, DM_FLOAT, ps->partition * 4, -1, -1,
                                    "fp32 grad partition", 1);
    if (p->zero <= 2) { /* _release_ipg_buffers */
        for (int k = 0; k < 2; k++)
            if (ps->ipg[k] >= 0) {
                dm_sb_unref(b, ps->ipg[k]);
                ps->ipg[k] = -1;
            }
        if (ps->gpart >= 0) {
            dm_sb_unref(b, ps->gpart);
            ps->gpart = -1;
        }
    }
}

/* ZeRO's step works on the flat fp32 partition: its bytes (0: not ZeRO, or
 * offloaded to the host), and after the step the fp32 grads go. */
uint64_t dm_par_flat_bytes(const struct dm_sb *b)
{
    const struct dm_pstate *ps = b->par;
    if (!ps || b->run->par.kind != DM_PAR_ZERO)
        return 0;
    return b->run->par.offload_optimizer ? 0 : ps->partition * 4;
}

bool dm_par_zero(const struct dm_sb *b)
{
    return b->par && b->run->par.kind == DM_PAR_ZERO;
}

/* zero_grad(set_to_none): the sharded grads' flat buffers are let go with
 * their views (F3). */
void dm_par_zero_grad(struct dm_sb *b)
{
    struct dm_pstate *ps = b->par;
    for (int32_t u = 0; ps && u < ps->n_units; u++)
        ps->rs_out[u] = -1;
}

/* Z5: after the step ZeRO 1/2 all-gathers the updated partitions into the
 * flat group (stage_1_and_2.py step, 0.19.8: single_partition.grad = None,
 * then all_gather_dp_groups -> dist.all_gather_into_tensor(bit16_groups_flat)):
 * the output is the flat buffer itself, and gloo's _allgather_base_ makes a
 * transient of its size, all world partitions (measured: mlp4 ZeRO-2 on 4
 * ranks, its peak, tools/oracle/dist_measure.py trace). */
static void zero_step_gather(struct dm_sb *b, const struct dm_pstate *ps)
{
    const struct dm_par *p = &b->run->par;
    uint64_t elems = 0;
    if (p->kind != DM_PAR_ZERO || p->zero > 2 || p->world < 2 || b->run->cuda ||
        !dm_umul_ok(ps->partition, (uint64_t)p->world, &elems) || elems > INT64_MAX)
        return;
    dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, ps->gdtype, elems_bytes(ps->gdtype, (int64_t)elems), -1,
                -1, "gloo all_gather_into_tensor (ZeRO step)", 0);
}

void dm_par_step_end(struct dm_sb *b)
{
    struct dm_pstate *ps = b->par;
    if (ps && ps->fp32_grad >= 0) {
        dm_sb_unref(b, ps->fp32_grad);
        ps->fp32_grad = -1;
    }
    if (ps)
        zero_step_gather(b, ps);
}

void dm_par_free(struct dm_sb *b)
{
    struct dm_pstate *ps = b->par;
    if (!ps)
        return;
    free(ps->unit);
    free(ps->ufirst);
    free(ps->ulast);
    free(ps->gathered);
    free(ps->rs_out);
    free(ps->pending_ag);
    free(ps->sp_buf);
    free(ps->punit);
    free(ps->ustart);
    free(ps->ulist);
    free(ps->unumel);
    free(ps->uall);
    free(ps->full);
    free(ps->bucket);
    free(ps);
    b->par = NULL;
}
