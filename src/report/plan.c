/*
 * plan.c: the parallel configurations of a training job that fit a GPU
 * (dnnmem plan; docs/parallel.md "plan").
 *
 * Three small stages: form the candidates of one world size (the engines of
 * the table below x TP x PP x micro-batch x checkpointing), sort them in the
 * order below, and estimate each in full with dnnmem_estimate until the
 * step budget runs out, keeping those that fit. With fewest_gpus the world
 * sizes 1, 2, ... are tried in turn and the first where one fits is kept.
 *
 * The order, cheapest first (each key after the one before):
 *  1. the model-parallel size TP x PP, smallest first, TP before PP at the
 *     same size: Megatron-LM (Narayanan et al., SC21, "Efficient Large-Scale
 *     Language Model Training on GPU Clusters", takeaways #1 and #2: a
 *     model-parallel size t x p just large enough for the model to fit,
 *     tensor parallelism within a server first, data parallelism for the rest);
 *  2. the data-parallel engine's tier (the table): transformers' DeepSpeed
 *     guide (docs/source/en/deepspeed.md, "How to Choose Which ZeRO Stage and
 *     Offloads To Use For Best Performance"): Stage 0 (DDP) > Stage 1 >
 *     Stage 2 > Stage 2 + offload > Stage 3 > Stage 3 + offloads, faster
 *     first; FSDP's modes at the stage PyTorch equates them with
 *     (torch/distributed/fsdp/api.py, ShardingStrategy: NO_SHARD like DDP,
 *     SHARD_GRAD_OP gradients and optimizer states sharded as ZeRO-2,
 *     FULL_SHARD everything as ZeRO-3, HYBRID_SHARD FULL_SHARD within a node
 *     and replicated across nodes, its all-gathers and reduce-scatters only
 *     within a node, so before FULL_SHARD);
 *  3. activation checkpointing off before on (torch.utils.checkpoint reruns
 *     each block's forward in the backward: no sharding or communication,
 *     but compute; transformers' guide tries it before ZeRO-2, this order
 *     after: every row is listed either way);
 *  4. the fewest micro-steps per optimizer step (the largest micro-batch):
 *     gradient accumulation steps under DP; pipeline micro-batches under PP,
 *     at least PP of them (1F1B's steady state needs M >= PP: Megatron's
 *     schedule, torch.distributed.pipelining's Schedule1F1B).
 * The keys name each configuration once, so the order is total; the rows
 * keep it (the estimates run in it).
 *
 * Constraints: a parallel option the caller fixes (--zero, --fsdp, --offload,
 * --tp, --pp, --checkpoint) restricts the search to the configurations with
 * that value (--zero 3: ZeRO-3 and its two offloads; --checkpoint SPEC: its
 * specs, on, for every row); a set no configuration can have is refused up
 * front, named (check_want).
 */
#include "dnnmem-impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The data-parallel engines, in the order of rule 2: a row's tier is its
 * index here (DDP before FSDP's NO_SHARD, the reference it imitates; ZeRO-2
 * before SHARD_GRAD_OP, HYBRID before FULL, ZeRO before FSDP at a stage). */
static const struct engine {
    int zero;
    enum dnnmem_fsdp fsdp;
    enum dnnmem_offload offload;
} engines[] = {
    {0, DNNMEM_FSDP_NONE, DNNMEM_OFFLOAD_NONE}, /* DDP (one process on one GPU) */
    {0, DNNMEM_FSDP_NO_SHARD, DNNMEM_OFFLOAD_NONE},
    {1, DNNMEM_FSDP_NONE, DNNMEM_OFFLOAD_NONE},
    {2, DNNMEM_FSDP_NONE, DNNMEM_OFFLOAD_NONE},
    {0, DNNMEM_FSDP_SHARD_GRAD_OP, DNNMEM_OFFLOAD_NONE},
    {2, DNNMEM_FSDP_NONE, DNNMEM_OFFLOAD_OPTIMIZER},
    {3, DNNMEM_FSDP_NONE, DNNMEM_OFFLOAD_NONE},
    {0, DNNMEM_FSDP_HYBRID, DNNMEM_OFFLOAD_NONE},
    {0, DNNMEM_FSDP_FULL, DNNMEM_OFFLOAD_NONE},
    {3, DNNMEM_FSDP_NONE, DNNMEM_OFFLOAD_OPTIMIZER},
    {3, DNNMEM_FSDP_NONE, DNNMEM_OFFLOAD_PARAMS},
};
enum { N_ENGINES = sizeof engines / sizeof engines[0] };

/* Bounds: the GPUs and global batch a plan takes, the candidates formed for
 * one world size (beyond it the plan is marked truncated), and the
 * micro-steps of one configuration (--grad-accum's own bound, src/options.c;
 * an estimate replays each, so this bounds its time too). */
enum { PLAN_MAX_GPUS = 4096, PLAN_MAX_CANDIDATES = 1 << 16, PLAN_MAX_MICRO_STEPS = 1000 };
#define PLAN_MAX_GLOBAL_BATCH ((int64_t)1 << 24)

/* What the estimates said of a TP size so far. */
enum tp_state { TP_UNTRIED = 0, TP_TAKEN, TP_REFUSED };

struct cand {
    int gpus, dp, tp, pp, engine;
    bool ckpt;
    int64_t micro, per_rank; /* micro-batch; samples per rank per step */
    int steps;               /* grad-accum (pp 1) or micro-batches (pp > 1) */
    int gpn;                 /* gpus_per_node for this world (0: one node) */
};

/* What does not change between candidates. */
struct job {
    const dnnmem_model *m;
    const struct dnnmem_config *cfg;
    const struct dnnmem_plan_options *po;
    bool tp_ok;                    /* the engine's TP takes the model (not a HF config) */
    /* the caller's constraints (cfg->par, cfg->checkpoint): 0 / false = free */
    int want_tp, want_pp;
    bool want_engine, want_ckpt;   /* want_engine: only engines engine_ok keeps */
    struct dm_block_scope blocks;  /* the repeated blocks (n_specs 0: none) */
    const char *ckpt[DM_BLOCK_MAX_SPECS];
    struct cand *c;
    size_t n, cap;
    bool truncated, oom;
    uint8_t tp_state[PLAN_MAX_GPUS + 1]; /* per TP size: enum tp_state */
};

void dnnmem_plan_options_init(struct dnnmem_plan_options *po)
{
    memset(po, 0, sizeof *po);
    po->gpus = 1;
}

static int steps_of(const struct dnnmem_plan_options *po)
{
    return po->max_steps ? po->max_steps : DNNMEM_PLAN_STEPS_DEFAULT;
}

/* ---- stage 1: the candidates of one world size ------------------------------ */

static void add_cand(struct job *j, const struct cand *c)
{
    if (j->n == PLAN_MAX_CANDIDATES) {
        j->truncated = true;
        return;
    }
    if (!dm_grow((void **)&j->c, sizeof *j->c, j->n, &j->cap)) {
        j->oom = true;
        j->truncated = true;
        return;
    }
    j->c[j->n++] = *c;
}

/* The micro-batches of per_rank samples: each divisor, largest first, in at
 * most PLAN_MAX_MICRO_STEPS micro-steps. */
static void add_micro(struct job *j, struct cand c)
{
    for (int64_t steps = 1; steps <= c.per_rank && steps <= PLAN_MAX_MICRO_STEPS; steps++) {
        if (c.per_rank % steps)
            continue;
        if (c.pp > 1 && steps < c.pp) /* rule 4: M >= PP */
            continue;
        c.micro = c.per_rank / steps;
        c.steps = (int)steps;
        add_cand(j, &c);
        if (j->truncated)
            return;
    }
}

/* Engine e has every engine value the caller fixed (zero, fsdp, offload). */
static bool engine_ok(const struct job *j, int e)
{
    const struct dnnmem_parallel *par = &j->cfg->par;
    return !j->want_engine || ((!par->zero || engines[e].zero == par->zero) &&
                               (!par->fsdp || engines[e].fsdp == par->fsdp) &&
                               (!par->offload || engines[e].offload == par->offload));
}

static enum dnnmem_status form(struct job *j, int n, struct dnnmem_error *err)
{
    j->n = 0;
    const struct dnnmem_config *cfg = j->cfg;
    int gpn = cfg->par.gpus_per_node;
    if (gpn > 0 && n > gpn && n % gpn)
        return DNNMEM_OK; /* no world of whole nodes */
    int64_t batch = cfg->batch_size > 0 ? cfg->batch_size : 1;
    int layers = j->blocks.n_specs ? (int)j->blocks.blocks : 0;
    for (int tp = 1; tp <= n; tp++) {
        /* a fixed TP is tried even on a HF config: the engine's refusal names it */
        if (n % tp || (j->want_tp ? tp != j->want_tp : tp > 1 && !j->tp_ok))
            continue;
        for (int pp = 1; pp <= n / tp; pp++) {
            /* the engine splits L blocks evenly: PP must divide them */
            if ((n / tp) % pp || (pp > 1 && (layers == 0 || layers % pp)) ||
                (j->want_pp && pp != j->want_pp))
                continue;
            int dp = n / (tp * pp);
            int64_t per_rank = batch;
            if (j->po->global_batch) {
                if (j->po->global_batch % dp)
                    continue;
                per_rank = j->po->global_batch / dp;
            }
            /* TP and PP run with DDP only (docs/parallel.md "Decided") */
            int n_eng = tp * pp > 1 ? 1 : N_ENGINES;
            for (int e = 0; e < n_eng; e++) {
                bool hybrid = engines[e].fsdp == DNNMEM_FSDP_HYBRID;
                if ((hybrid && !(gpn > 0 && n > gpn)) || !engine_ok(j, e))
                    continue; /* one node: hybrid is full sharding */
                for (int ck = j->want_ckpt; ck < (layers || j->want_ckpt ? 2 : 1); ck++) {
                    struct cand c = {.gpus = n, .dp = dp, .tp = tp, .pp = pp, .engine = e,
                                     .ckpt = ck, .per_rank = per_rank,
                                     .gpn = gpn > 0 && n > gpn ? gpn : 0};
                    add_micro(j, c);
                }
            }
        }
    }
    if (j->oom)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    return DNNMEM_OK;
}

/* ---- stage 2: the order (rules 1-4 at the top) ---------------------------- */

static int cmp_int(int64_t a, int64_t b) { return (a > b) - (a < b); }

static int by_order(const void *pa, const void *pb)
{
    const struct cand *a = pa, *b = pb;
    int d = cmp_int(a->tp * a->pp, b->tp * b->pp);
    if (!d)
        d = cmp_int(a->pp, b->pp);
    if (!d)
        d = cmp_int(a->engine, b->engine);
    if (!d)
        d = cmp_int(a->ckpt, b->ckpt);
    return d ? d : cmp_int(a->steps, b->steps);
}

/* ---- stage 3: the estimates ------------------------------------------------- */

/* The checkpoint specs of a row with checkpointing on: the caller's when
 * fixed, else the repeated blocks'. */
static const char *const *ckpt_specs(const struct job *j, size_t *n)
{
    if (j->want_ckpt) {
        *n = j->cfg->n_checkpoint;
        return j->cfg->checkpoint;
    }
    *n = (size_t)j->blocks.n_specs;
    return j->ckpt;
}

static void cand_config(const struct job *j, const struct cand *c, struct dnnmem_config *cfg)
{
    const struct engine *e = &engines[c->engine];
    *cfg = *j->cfg;
    cfg->par.gpus = c->gpus;
    cfg->par.gpus_per_node = c->gpn;
    cfg->par.tp = c->tp;
    cfg->par.pp = c->pp;
    cfg->par.zero = e->zero;
    cfg->par.fsdp = e->fsdp;
    cfg->par.offload = e->offload;
    cfg->batch_size = c->pp > 1 ? c->per_rank : c->micro;
    cfg->grad_accum = c->pp > 1 ? 0 : c->steps;
    cfg->par.micro_batches = c->pp > 1 ? c->steps : 0;
    size_t n;
    const char *const *spec = ckpt_specs(j, &n);
    cfg->checkpoint = c->ckpt ? spec : NULL;
    cfg->n_checkpoint = c->ckpt ? n : 0;
    cfg->accum_fixed_point = !j->po->every_micro_step;
}

static const char *fsdp_name(enum dnnmem_fsdp f)
{
    static const char *const names[] = {"none", "full", "shard-grad-op", "hybrid", "no-shard"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "?";
}

static const char *offload_name(enum dnnmem_offload o)
{
    return o == DNNMEM_OFFLOAD_OPTIMIZER ? "optimizer" : o == DNNMEM_OFFLOAD_PARAMS ? "params" : "none";
}

/* The options that select c, as dnnmem estimate takes them (malloc'd). */
static char *cand_options(const struct job *j, const struct cand *c)
{
    const struct engine *e = &engines[c->engine];
    char buf[1024];
    size_t o = 0;
#define PUT(...) (o += (size_t)snprintf(buf + o, o < sizeof buf ? sizeof buf - o : 0, __VA_ARGS__))
    PUT("--gpus %d", c->gpus);
    if (c->gpn)
        PUT(" --gpus-per-node %d", c->gpn);
    if (c->tp > 1)
        PUT(" --tp %d", c->tp);
    if (c->pp > 1)
        PUT(" --pp %d --micro-batches %d", c->pp, c->steps);
    if (e->zero)
        PUT(" --zero %d", e->zero);
    if (e->offload)
        PUT(" --offload %s", offload_name(e->offload));
    if (e->fsdp)
        PUT(" --fsdp %s", fsdp_name(e->fsdp));
    size_t n_spec;
    const char *const *spec = ckpt_specs(j, &n_spec);
    for (size_t s = 0; c->ckpt && s < n_spec; s++)
        PUT(" --checkpoint '%s'", spec[s]);
    PUT(" --batch-size %lld", (long long)(c->pp > 1 ? c->per_rank : c->micro));
    if (c->pp == 1 && c->steps > 1)
        PUT(" --grad-accum %d", c->steps);
#undef PUT
    if (o >= sizeof buf)
        return NULL;
    size_t len = strlen(buf) + 1;
    char *s = malloc(len);
    return s ? memcpy(s, buf, len) : NULL;
}

static enum dnnmem_status keep_row(const struct job *j, const struct cand *c,
                                   const struct dnnmem_result *r, struct dnnmem_plan *p,
                                   size_t *cap, struct dnnmem_error *err)
{
    if (!dm_grow((void **)&p->rows, sizeof *p->rows, p->n_rows, cap))
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    const struct engine *e = &engines[c->engine];
    struct dnnmem_plan_row *row = &p->rows[p->n_rows];
    *row = (struct dnnmem_plan_row){
        .gpus = c->gpus, .dp = c->dp, .tp = c->tp, .pp = c->pp, .zero = e->zero, .fsdp = e->fsdp,
        .offload = e->offload, .checkpoint = c->ckpt, .micro_batch = c->micro,
        .grad_accum = c->pp > 1 ? 1 : c->steps, .micro_batches = c->pp > 1 ? c->steps : 1,
        .global_batch = c->per_rank * c->dp, .tier = c->engine, .options = cand_options(j, c),
        .total_bytes = r->total_bytes, .peak_allocated = r->peak_allocated, .rank = r->rank,
        .verdict = r->verdict, .margin_bytes = r->margin_bytes};
    memcpy(row->category_bytes, r->category_bytes, sizeof row->category_bytes);
    if (!row->options)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    p->n_rows++;
    return DNNMEM_OK;
}

/* A refusal about this configuration (not modelled, a dim it does not
 * divide) skips it; any other error ends the plan. Under TP a shape error
 * is the split's: a head count TP does not divide makes a view whose -1
 * cannot be inferred (docs/parallel.md T7), or a split dim a local shape
 * the next op refuses. */
static bool refusal(enum dnnmem_status s, const struct cand *c)
{
    return s == DNNMEM_E_USAGE || s == DNNMEM_E_UNSUPPORTED || s == DNNMEM_E_UNBOUND ||
           (s == DNNMEM_E_SHAPE && c->tp > 1);
}

/* Estimate j's candidates in order while steps are left; the fitting ones
 * become p's rows. */
static enum dnnmem_status run(struct job *j, struct dnnmem_plan *p, char *refused, size_t n_refused,
                              struct dnnmem_error *first, struct dnnmem_error *err)
{
    size_t cap = 0;
    for (size_t k = 0; k < j->n; k++) {
        if ((int)p->n_estimated == steps_of(j->po)) {
            p->truncated = true;
            break;
        }
        const struct cand *c = &j->c[k];
        /* a TP size whose first candidate (the plainest: PP 1, DDP, no
         * checkpointing, the largest micro-batch) is refused is refused for
         * every other: the split is of the weights and heads, whatever the
         * batch or stage */
        if (c->tp > 1 && j->tp_state[c->tp] == TP_REFUSED) {
            p->n_skipped++;
            continue;
        }
        struct dnnmem_config cfg;
        cand_config(j, c, &cfg);
        struct dnnmem_result *r = NULL;
        struct dnnmem_error e;
        enum dnnmem_status s = dnnmem_estimate(j->m, &cfg, &r, &e);
        p->n_estimated++;
        if (c->tp > 1 && s == DNNMEM_OK)
            j->tp_state[c->tp] = TP_TAKEN;
        if (s != DNNMEM_OK) {
            if (!refusal(s, c)) {
                *err = e;
                return s;
            }
            if (c->tp > 1 && j->tp_state[c->tp] == TP_UNTRIED)
                j->tp_state[c->tp] = TP_REFUSED;
            if (!p->n_refused++) {
                *first = e;
                snprintf(refused, n_refused, "%s", e.message);
            }
            continue;
        }
        s = DNNMEM_OK;
        if (r->verdict == DNNMEM_VERDICT_DOES_NOT_FIT)
            p->n_over++;
        else
            s = keep_row(j, &j->c[k], r, p, &cap, err);
        dnnmem_result_free(r);
        if (s != DNNMEM_OK)
            return s;
    }
    return DNNMEM_OK;
}

/* ---- the call ------------------------------------------------------------------ */

/* The options the plan chooses itself, and cannot take as constraints, are
 * refused; zero, fsdp, offload, tp, pp and checkpoint are constraints
 * (check_want). */
static enum dnnmem_status check_args(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                     const struct dnnmem_plan_options *po, struct dnnmem_error *err)
{
    if (!m || !cfg || !po)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_plan: NULL argument");
    const struct dnnmem_parallel *par = &cfg->par;
    static const char pre[] = "plan: ";
    if (cfg->mode != DNNMEM_MODE_TRAIN)
        return dm_fail(err, DNNMEM_E_USAGE, "%splans a training job: give --mode train", pre);
    if (cfg->capacity_bytes <= 0)
        return dm_fail(err, DNNMEM_E_USAGE, "%sgive the device with --gpu NAME or --memory SIZE", pre);
    if (po->gpus < 1 || po->gpus > PLAN_MAX_GPUS)
        return dm_fail(err, DNNMEM_E_USAGE, "%s--gpus %d: expected 1 to %d GPUs", pre, po->gpus,
                       PLAN_MAX_GPUS);
    if (po->global_batch < 0 || po->global_batch > PLAN_MAX_GLOBAL_BATCH)
        return dm_fail(err, DNNMEM_E_USAGE, "%s--global-batch %lld: expected 1 to %lld", pre,
                       (long long)po->global_batch, (long long)PLAN_MAX_GLOBAL_BATCH);
    if (po->max_steps < 0 || po->max_steps > DNNMEM_PLAN_MAX_STEPS)
        return dm_fail(err, DNNMEM_E_USAGE, "%s--max-steps %d: expected 1 to %d", pre, po->max_steps,
                       DNNMEM_PLAN_MAX_STEPS);
    if (par->sp) /* not one of the plan's dimensions (docs/parallel.md "Sequence parallel") */
        return dm_fail(err, DNNMEM_E_USAGE,
                       "%s--sp: the plan does not search sequence parallelism yet; estimate a "
                       "configuration with `dnnmem estimate --tp N --sp`", pre);
    /* what the plan chooses itself, and why */
#define SPLIT " (the micro-steps come from --global-batch or --batch-size, the samples per rank)"
    const struct {
        bool set;
        const char *flag;
    } chosen[] = {
        {par->gpus > 1 && par->gpus != po->gpus, "--gpus (dnnmem_plan_options.gpus)"},
        {par->nodes > 0, "--nodes (give --gpus and --gpus-per-node)"},
        {par->micro_batches != 0, "--micro-batches" SPLIT},
        {cfg->grad_accum > 1, "--grad-accum" SPLIT},
        {par->rank >= 0, "--rank (each row is its most loaded rank)"},
    };
#undef SPLIT
    for (size_t k = 0; k < sizeof chosen / sizeof chosen[0]; k++)
        if (chosen[k].set)
            return dm_fail(err, DNNMEM_E_USAGE, "%s%s: the plan chooses it; leave it out", pre,
                           chosen[k].flag);
    return DNNMEM_OK;
}

/* The facts of the model every candidate shares. */
static enum dnnmem_status find_job(struct job *j, struct dnnmem_error *err)
{
    const struct dm_graph *g = dm_model_graph(j->m);
    if (!g)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    /* the engine refuses --tp on a HuggingFace config (docs/parallel.md) */
    j->tp_ok = !(g->format && strcmp(g->format, "huggingface") == 0);
    struct dm_block_scope found[1];
    if (dm_repeated_blocks(g, found, 1) == 1) {
        j->blocks = found[0];
        for (int s = 0; s < j->blocks.n_specs; s++)
            j->ckpt[s] = j->blocks.spec[s];
    }
    return DNNMEM_OK;
}

/* The constraints fixed, as flags ("--zero 3 --tp 2 --checkpoint"), for the
 * errors; "" when none. */
static const char *want_text(const struct job *j, char *buf, size_t n)
{
    const struct dnnmem_parallel *par = &j->cfg->par;
    size_t o = 0;
    buf[0] = 0;
#define PUT(...) (o += (size_t)snprintf(buf + o, o < n ? n - o : 0, __VA_ARGS__))
    if (par->zero)
        PUT(" --zero %d", par->zero);
    if (par->fsdp)
        PUT(" --fsdp %s", fsdp_name(par->fsdp));
    if (par->offload)
        PUT(" --offload %s", offload_name(par->offload));
    if (j->want_tp)
        PUT(" --tp %d", j->want_tp);
    if (j->want_pp)
        PUT(" --pp %d", j->want_pp);
    if (j->want_ckpt)
        PUT(" --checkpoint");
#undef PUT
    return buf[0] ? buf + 1 : buf;
}

/* The caller's constraints (docs/parallel.md "plan"): kept in j, and refused
 * up front, named, where no configuration of the search can have them. */
static enum dnnmem_status check_want(struct job *j, struct dnnmem_error *err)
{
    const struct dnnmem_parallel *par = &j->cfg->par;
    const struct dnnmem_plan_options *po = j->po;
    j->want_tp = par->tp > 1 ? par->tp : 0;
    j->want_pp = par->pp > 1 ? par->pp : 0;
    j->want_engine = par->zero || par->fsdp || par->offload;
    j->want_ckpt = j->cfg->n_checkpoint > 0;
    char buf[256];
    const char *what = want_text(j, buf, sizeof buf);
    bool any = false;
    for (int e = 0; e < N_ENGINES; e++)
        any |= engine_ok(j, e);
    if (!any)
        return dm_fail(err, DNNMEM_E_CONSTRAINT,
                       "plan: %s: no engine the plan forms has it (DDP, ZeRO 1-3, ZeRO 2 and 3 "
                       "with --offload optimizer, ZeRO 3 with --offload params, FSDP's four "
                       "modes: docs/parallel.md \"plan\")", what);
    int gpn = par->gpus_per_node;
    if (par->fsdp == DNNMEM_FSDP_HYBRID && !(gpn > 0 && po->gpus > gpn))
        return dm_fail(err, DNNMEM_E_CONSTRAINT, "plan: --fsdp hybrid: replicates across "
                       "nodes: give --gpus-per-node below --gpus %d", po->gpus);
    if ((j->want_tp || j->want_pp) && j->want_engine)
        return dm_fail(err, DNNMEM_E_UNSUPPORTED, "plan: %s: TP and PP with ZeRO, FSDP or "
                       "offload are not modelled (modelled: TP and PP under DDP)", what);
    int64_t mp = 1;
    if (!dm_mul_ok(j->want_tp ? j->want_tp : 1, j->want_pp ? j->want_pp : 1, &mp) ||
        mp > po->gpus || (!po->fewest_gpus && po->gpus % mp))
        return dm_fail(err, DNNMEM_E_CONSTRAINT, "plan: %s: TP x PP (%lld) does not divide "
                       "--gpus %d (the world is DP x TP x PP)", what, (long long)mp, po->gpus);
    int64_t layers = j->blocks.n_specs ? j->blocks.blocks : 0;
    if (j->want_pp && (!layers || layers % j->want_pp))
        return dm_fail(err, DNNMEM_E_CONSTRAINT, "plan: --pp %d: the plan splits the model's "
                       "repeated blocks evenly, and it has %lld", j->want_pp, (long long)layers);
    return DNNMEM_OK;
}

void dnnmem_plan_free(struct dnnmem_plan *p)
{
    if (!p)
        return;
    for (size_t k = 0; k < p->n_rows; k++)
        free((char *)p->rows[k].options);
    free(p->rows);
    free((char *)p->first_refusal);
    free((char *)p->device_label);
    free(p);
}

static char *dup_str(const char *src)
{
    size_t len = strlen(src) + 1;
    char *s = malloc(len);
    return s ? memcpy(s, src, len) : NULL;
}

/* The constraints no world size met: which. */
static enum dnnmem_status impossible(const struct job *j, struct dnnmem_error *err)
{
    const struct dnnmem_plan_options *po = j->po;
    char buf[256];
    const char *what = want_text(j, buf, sizeof buf);
    if (po->global_batch)
        return dm_fail(err, DNNMEM_E_CONSTRAINT,
                       "plan: --global-batch %lld: no configuration of %s%d GPUs%s%s makes it (the "
                       "data-parallel size must divide it; with PP, into at least PP "
                       "micro-batches%s)",
                       (long long)po->global_batch, po->fewest_gpus ? "1 to " : "", po->gpus,
                       *what ? " with " : "", what,
                       j->tp_ok ? "" : "; TP is not modelled on a HuggingFace config");
    if (j->want_pp)
        return dm_fail(err, DNNMEM_E_CONSTRAINT, "plan: --pp %d: --batch-size %lld does not "
                       "split into at least %d micro-batches", j->want_pp,
                       (long long)(j->cfg->batch_size > 0 ? j->cfg->batch_size : 1), j->want_pp);
    return dm_fail(err, DNNMEM_E_CONSTRAINT, "plan: --gpus %d%s: no configuration of whole nodes "
                   "(--gpus-per-node %d)", po->gpus, po->fewest_gpus ? " --fewest-gpus" : "",
                   j->cfg->par.gpus_per_node);
}

enum dnnmem_status dnnmem_plan(const dnnmem_model *m, const struct dnnmem_config *cfg,
                               const struct dnnmem_plan_options *po, struct dnnmem_plan **out,
                               struct dnnmem_error *err)
{
    if (!out)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_plan: NULL argument");
    *out = NULL;
    DM_TRY(check_args(m, cfg, po, err));
    struct job j = {.m = m, .cfg = cfg, .po = po};
    DM_TRY(find_job(&j, err));
    DM_TRY(check_want(&j, err));
    struct dnnmem_plan *p = calloc(1, sizeof *p);
    char refused[sizeof err->message] = "";
    struct dnnmem_error first = {0};
    if (!p)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    *p = (struct dnnmem_plan){.gpus_searched = po->gpus, .fewest_gpus = po->fewest_gpus,
                              .global_batch = po->global_batch,
                              .capacity_bytes = (uint64_t)cfg->capacity_bytes,
                              .max_steps = steps_of(po)};
    enum dnnmem_status s = DNNMEM_OK;
    for (int n = po->fewest_gpus ? 1 : po->gpus; n <= po->gpus && s == DNNMEM_OK; n++) {
        s = form(&j, n, err);
        p->n_candidates += j.n;
        p->truncated |= j.truncated;
        j.truncated = false;
        if (s != DNNMEM_OK || !j.n)
            continue;
        qsort(j.c, j.n, sizeof *j.c, by_order);
        s = run(&j, p, refused, sizeof refused, &first, err);
        if (s == DNNMEM_OK && p->n_rows) {
            p->gpus = n;
            break;
        }
        if (p->truncated)
            break;
    }
    free(j.c);
    if (s == DNNMEM_OK && !p->n_candidates)
        s = impossible(&j, err);
    /* every estimate refused: the first refusal is the answer */
    if (s == DNNMEM_OK && p->n_estimated && p->n_refused == p->n_estimated && !p->n_rows) {
        *err = first;
        s = first.status;
    }
    if (s == DNNMEM_OK) {
        p->first_refusal = dup_str(refused);
        p->device_label = dup_str(cfg->device_label ? cfg->device_label : "");
        if (!p->first_refusal || !p->device_label)
            s = dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    }
    if (s != DNNMEM_OK) {
        dnnmem_plan_free(p);
        return s;
    }
    *out = p;
    return DNNMEM_OK;
}

/* ---- the reports ------------------------------------------------------------- */

static const char *engine_name(const struct dnnmem_plan_row *r, char *buf, size_t n)
{
    if (r->zero)
        snprintf(buf, n, "zero-%d%s%s", r->zero, r->offload ? "+offload-" : "",
                 r->offload ? offload_name(r->offload) : "");
    else if (r->fsdp)
        snprintf(buf, n, "fsdp-%s", fsdp_name(r->fsdp));
    else
        snprintf(buf, n, "%s", r->gpus > 1 ? "ddp" : "single");
    return buf;
}

int dnnmem_report_plan_text(const struct dnnmem_plan *p, const dnnmem_model *m, FILE *f)
{
    double gib = 1024.0 * 1024.0 * 1024.0;
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    fprintf(f, "model        %s\n", info.path);
    if (*p->device_label)
        fprintf(f, "device       %s\n", p->device_label);
    fprintf(f, "plan         %s%d GPUs of %.2f GiB; %zu configurations formed, %zu estimated "
            "(%zu refused, %zu over), %zu skipped (a TP size refused)%s\n",
            p->fewest_gpus ? "the fewest of 1 to " : "", p->gpus_searched,
            (double)p->capacity_bytes / gib, p->n_candidates, p->n_estimated, p->n_refused,
            p->n_over, p->n_skipped, p->truncated ? "; stopped at --max-steps" : "");
    if (p->n_refused)
        fprintf(f, "refused      first: %s\n", p->first_refusal);
    if (!p->n_rows) {
        fprintf(f, "fits         none\n");
        return ferror(f) ? -1 : 0;
    }
    fprintf(f, "fits         %zu configurations on %d GPUs, in the engines' order (docs/parallel.md)\n",
            p->n_rows, p->gpus);
    fprintf(f, "%4s %3s %3s %3s %-24s %4s %6s %5s %7s %11s %11s  %s\n", "#", "dp", "tp", "pp",
            "engine", "ckpt", "micro", "steps", "global", "total GiB", "margin GiB", "options");
    for (size_t k = 0; k < p->n_rows; k++) {
        const struct dnnmem_plan_row *r = &p->rows[k];
        char eng[48];
        fprintf(f, "%4zu %3d %3d %3d %-24s %4s %6lld %5d %7lld %11.2f %11.2f  %s%s\n", k + 1, r->dp,
                r->tp, r->pp, engine_name(r, eng, sizeof eng), r->checkpoint ? "on" : "off",
                (long long)r->micro_batch, r->grad_accum * r->micro_batches,
                (long long)r->global_batch, (double)r->total_bytes / gib,
                (double)r->margin_bytes / gib, r->options,
                r->verdict == DNNMEM_VERDICT_TIGHT ? "  (tight)" : "");
    }
    return ferror(f) ? -1 : 0;
}

int dnnmem_report_plan_json(const struct dnnmem_plan *p, const dnnmem_model *m, FILE *f)
{
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    json_t *rows = json_array();
    for (size_t k = 0; k < p->n_rows; k++) {
        const struct dnnmem_plan_row *r = &p->rows[k];
        char eng[48];
        json_array_append_new(
            rows, json_pack("{s:I, s:s, s:i, s:i, s:i, s:i, s:s, s:i, s:s, s:s, s:b, s:I, s:i, s:i, "
                            "s:I, s:i, s:I, s:I, s:i, s:s, s:I}",
                            "order", (json_int_t)(k + 1), "options", r->options, "gpus", r->gpus,
                            "dp", r->dp, "tp", r->tp, "pp", r->pp, "engine",
                            engine_name(r, eng, sizeof eng), "zero", r->zero, "fsdp",
                            fsdp_name(r->fsdp), "offload", offload_name(r->offload), "checkpoint",
                            r->checkpoint, "micro_batch", (json_int_t)r->micro_batch, "grad_accum",
                            r->grad_accum, "micro_batches", r->micro_batches, "global_batch",
                            (json_int_t)r->global_batch, "tier", r->tier, "total_bytes",
                            (json_int_t)r->total_bytes, "peak_allocated_bytes",
                            (json_int_t)r->peak_allocated, "rank", r->rank, "verdict",
                            dnnmem_verdict_name(r->verdict), "margin_bytes",
                            (json_int_t)r->margin_bytes));
    }
    json_t *root = json_pack(
        "{s:s, s:s, s:s, s:s, s:I, s:i, s:b, s:i, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:s, s:o}",
        "schema", "dnnmem.plan/1", "tool_version", DNNMEM_VERSION, "model", info.path, "device",
        p->device_label, "capacity_bytes", (json_int_t)p->capacity_bytes, "gpus_searched",
        p->gpus_searched, "fewest_gpus", p->fewest_gpus, "gpus", p->gpus, "global_batch",
        p->global_batch ? json_integer((json_int_t)p->global_batch) : json_null(), "max_steps",
        (json_int_t)p->max_steps, "candidates", (json_int_t)p->n_candidates, "estimated",
        (json_int_t)p->n_estimated, "refused", (json_int_t)p->n_refused, "over",
        (json_int_t)p->n_over, "skipped", (json_int_t)p->n_skipped, "truncated", p->truncated, "first_refusal", p->first_refusal,
        "configurations", rows);
    if (!root)
        return -1;
    int rc = json_dumpf(root, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    fputc('\n', f);
    return rc || ferror(f) ? -1 : 0;
}
