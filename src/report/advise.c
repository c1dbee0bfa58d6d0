/*
 * advise.c: the changes that would make a job that does not fit fit, each
 * with its full estimate, ranked by what it costs the user (docs/advice.md).
 *
 * The candidates are the single changes that apply to the job (the table
 * below), each estimated once; the smaller batch and sequence are the
 * largest that fit, found by dnnmem_max_dim. When no single change fits,
 * changes are combined, cheapest first: each is added to the combination
 * when it lowers its estimate, until the combination fits; the cheaper part
 * of that combination is also tried with the largest batch that then fits.
 * Every estimate reuses the model's graph variants (src/estimate/variant.c).
 */
#include "dnnmem-impl.h"

#include <stdlib.h>
#include <string.h>

enum kind {
    K_AMP,        /* --precision amp-bf16 / amp-fp16 */
    K_HALF,       /* --precision bf16 / fp16 (no training) */
    K_BATCH,      /* --batch-size N, the largest that fits */
    K_CKPT,       /* --checkpoint on the repeated blocks */
    K_CKPT_TOP,   /* --checkpoint on every top-level module, when no block repeats */
    K_ADAM8BIT,   /* --optimizer adam8bit */
    K_ADAFACTOR,  /* --optimizer adafactor */
    K_SGD_MOM,    /* --optimizer sgd-momentum */
    K_SGD,        /* --optimizer sgd */
    K_LORA,       /* --lora-r 16 */
    K_KV_FP8,     /* --kv-dtype fp8 (generation) */
    K_INT8,       /* --quant int8 (no training) */
    K_NF4,        /* --quant nf4, with --lora-r 16 when training */
    K_SEQ,        /* --seq-len N, the largest that fits */
    K_COUNT
};

/* What a change touches: a combination holds at most one change of each. */
enum group { G_PRECISION, G_BATCH, G_CKPT, G_OPTIMIZER, G_BASE, G_CACHE, G_SEQ };

/* The ranking (docs/advice.md): cost classes, cheapest first. 1: numerics
 * only, usually faster; 2: throughput, the same update with --grad-accum;
 * 3: speed, results unchanged; 4-6: the optimizer's behaviour; 7-9: the
 * model trained or served (adapters, an 8-bit cache, a quantized base); 10:
 * the task (a shorter context). */
static const struct {
    int cost_rank;
    enum group group;
} rows[K_COUNT] = {
    [K_AMP] = {1, G_PRECISION},     [K_HALF] = {1, G_PRECISION},  [K_BATCH] = {2, G_BATCH},
    [K_CKPT] = {3, G_CKPT},         [K_CKPT_TOP] = {3, G_CKPT},   [K_ADAM8BIT] = {4, G_OPTIMIZER},
    [K_ADAFACTOR] = {5, G_OPTIMIZER}, [K_SGD_MOM] = {6, G_OPTIMIZER}, [K_SGD] = {6, G_OPTIMIZER},
    [K_LORA] = {7, G_BASE},         [K_KV_FP8] = {7, G_CACHE},    [K_INT8] = {8, G_BASE},       [K_NF4] = {9, G_BASE},
    [K_SEQ] = {10, G_SEQ},
};

/* The LoRA rank proposed: PEFT's LoraConfig default is r=8; 16 is the rank
 * the QLoRA paper's guanaco runs and most PEFT examples use (a rank costs
 * adapters of (in + out) x r per target, small either way). */
#define ADVICE_LORA_R 16

enum { MAX_ENTRIES = 24, MAX_PARTS = 6 };

/* The job being advised on and what is found about it. */
struct job {
    const dnnmem_model *m;
    const struct dnnmem_config *cfg;
    int cc;                         /* compute capability (0 = the default 8.0) */
    bool hf_lm;                     /* a HuggingFace causal LM (config.json) */
    struct dm_block_scope blocks;   /* the best repeated blocks, n_specs 0: none */
    const char *ckpt[DM_BLOCK_MAX_SPECS];
    const char *seq_dim;            /* the model's sequence dim, or NULL */
    int64_t base_margin;            /* the job's margin: what a change must raise */
};

/* One change or combination, estimated. */
struct entry {
    enum kind parts[MAX_PARTS];
    int n_parts;
    int64_t batch, seq;             /* K_BATCH / K_SEQ values */
    uint64_t total;
    enum dnnmem_verdict verdict;
    int64_t margin;
    int cost_rank;
};

struct advice_set {
    struct entry e[MAX_ENTRIES];
    int n;
};

static bool fits(const struct entry *e) { return e->verdict != DNNMEM_VERDICT_DOES_NOT_FIT; }

/* cfg with the entry's parts applied (the batch and seq as given). */
static void apply(const struct job *j, const struct entry *e, struct dnnmem_config *c)
{
    *c = *j->cfg;
    bool bf16 = (j->cc ? j->cc : DM_CC_DEFAULT) >= 80;
    for (int k = 0; k < e->n_parts; k++)
        switch (e->parts[k]) {
        case K_AMP:
            c->precision = bf16 ? DNNMEM_PRECISION_AMP_BF16 : DNNMEM_PRECISION_AMP_FP16;
            c->precision_set = true; /* as --precision would */
            break;
        case K_HALF:
            c->precision = bf16 ? DNNMEM_PRECISION_BF16 : DNNMEM_PRECISION_FP16;
            c->precision_set = true;
            break;
        case K_BATCH: c->batch_size = e->batch; break;
        case K_CKPT:
            c->checkpoint = j->ckpt;
            c->n_checkpoint = (size_t)j->blocks.n_specs;
            break;
        case K_CKPT_TOP: {
            static const char *const top[] = {"/*"};
            c->checkpoint = top;
            c->n_checkpoint = 1;
            break;
        }
        /* as --optimizer would: not a HuggingFace config's AdamW default */
        case K_ADAM8BIT: c->optimizer = DNNMEM_OPT_ADAM8BIT, c->optimizer_set = true; break;
        case K_ADAFACTOR: c->optimizer = DNNMEM_OPT_ADAFACTOR, c->optimizer_set = true; break;
        case K_SGD_MOM: c->optimizer = DNNMEM_OPT_SGD_MOMENTUM, c->optimizer_set = true; break;
        case K_SGD: c->optimizer = DNNMEM_OPT_SGD, c->optimizer_set = true; break;
        case K_LORA: c->lora.r = ADVICE_LORA_R; break;
        case K_KV_FP8: c->kv_dtype = DNNMEM_KV_FP8; break;
        case K_INT8: c->quant = DNNMEM_QUANT_INT8; break;
        case K_NF4:
            c->quant = DNNMEM_QUANT_NF4;
            if (c->mode == DNNMEM_MODE_TRAIN && c->lora.r == 0)
                c->lora.r = ADVICE_LORA_R;
            break;
        case K_SEQ: c->seq_len = e->seq; break;
        case K_COUNT: break;
        }
}

/* Whether a single change applies to the job at all. */
static bool applies(const struct job *j, enum kind k)
{
    const struct dnnmem_config *c = j->cfg;
    bool train = c->mode == DNNMEM_MODE_TRAIN, cuda = c->device == DNNMEM_DEVICE_CUDA;
    bool fp32 = c->precision == DNNMEM_PRECISION_FP32;
    bool adam = c->optimizer == DNNMEM_OPT_ADAM || c->optimizer == DNNMEM_OPT_ADAMW ||
                c->optimizer == DNNMEM_OPT_ADAMW_HF;
    bool hf_base = j->hf_lm && cuda && c->quant == DNNMEM_QUANT_NONE;
    /* bitsandbytes, transformers' Adafactor and PEFT are PyTorch's */
    bool torch = c->framework == DNNMEM_FW_PYTORCH;
    switch (k) {
    case K_AMP: return train && cuda && fp32;
    case K_HALF: return !train && cuda && fp32;
    case K_BATCH: return c->batch_size > 1;
    case K_CKPT: return train && c->n_checkpoint == 0 && j->blocks.n_specs > 0;
    case K_CKPT_TOP: return train && c->n_checkpoint == 0 && j->blocks.n_specs == 0;
    /* bitsandbytes' optimizers run on CUDA only */
    case K_ADAM8BIT: return train && cuda && torch && adam;
    case K_ADAFACTOR:
        return train && torch && (adam || c->optimizer == DNNMEM_OPT_ADAM8BIT ||
                         c->optimizer == DNNMEM_OPT_RMSPROP || c->optimizer == DNNMEM_OPT_ADAGRAD ||
                         c->optimizer == DNNMEM_OPT_SGD_MOMENTUM);
    case K_SGD_MOM: return train && adam;
    case K_SGD: return train && c->optimizer == DNNMEM_OPT_SGD_MOMENTUM;
    case K_LORA: return train && torch && hf_base && c->lora.r == 0;
    case K_KV_FP8:
        return c->mode == DNNMEM_MODE_GENERATE && torch && cuda && c->kv_dtype == DNNMEM_KV_AUTO;
    case K_INT8: return !train && torch && hf_base;
    case K_NF4: return torch && hf_base;
    case K_SEQ: return j->seq_dim && c->seq_len > 1;
    case K_COUNT: break;
    }
    return false;
}

static void record(struct entry *e, const struct dnnmem_result *r)
{
    e->total = r->total_bytes;
    e->verdict = r->verdict;
    e->margin = r->margin_bytes;
    e->cost_rank = 0;
    for (int k = 0; k < e->n_parts; k++)
        if (rows[e->parts[k]].cost_rank > e->cost_rank)
            e->cost_rank = rows[e->parts[k]].cost_rank;
}

/* The entry estimated; *ok false when its options do not apply to the model
 * (an unsupported or refused combination). */
static enum dnnmem_status estimate_entry(const struct job *j, struct entry *e, bool *ok,
                                         struct dnnmem_error *err)
{
    struct dnnmem_config c;
    apply(j, e, &c);
    struct dnnmem_result *r = NULL;
    enum dnnmem_status s = dm_estimate_once(j->m, &c, &r, err);
    *ok = s == DNNMEM_OK;
    if (s == DNNMEM_E_UNSUPPORTED || s == DNNMEM_E_USAGE || s == DNNMEM_E_UNBOUND)
        return DNNMEM_OK;
    if (s == DNNMEM_OK)
        record(e, r);
    dnnmem_result_free(r);
    return s;
}

/* The entry with its last part a search (K_BATCH or K_SEQ): the largest value
 * below the job's that fits with the other parts; *ok false when none does. */
static enum dnnmem_status search_entry(const struct job *j, struct entry *e, bool *ok,
                                       struct dnnmem_error *err)
{
    struct dnnmem_config c;
    e->n_parts--;
    apply(j, e, &c);
    e->n_parts++;
    bool seq = e->parts[e->n_parts - 1] == K_SEQ;
    int64_t limit = seq ? c.seq_len - 1 : c.batch_size - 1, v = 0;
    struct dnnmem_result *at = NULL;
    const char *dim = seq ? j->seq_dim : NULL;
    if (seq && c.mode == DNNMEM_MODE_GENERATE) /* the prompt is seq_len, not the dim */
        c.seq_len = 0;
    enum dnnmem_status s = dm_max_dim(j->m, &c, dim, limit, false, &v, &at, NULL, err);
    if (s == DNNMEM_OK && v == 0) /* none leaves the headroom free: the largest that fits (tight) */
        s = dm_max_dim(j->m, &c, dim, limit, true, &v, &at, NULL, err);
    *ok = s == DNNMEM_OK && v > 0 && at;
    if (s == DNNMEM_E_UNSUPPORTED || s == DNNMEM_E_USAGE || s == DNNMEM_E_UNBOUND)
        s = DNNMEM_OK;
    if (*ok) {
        *(seq ? &e->seq : &e->batch) = v;
        record(e, at);
    }
    dnnmem_result_free(at);
    return s;
}

static enum dnnmem_status add(const struct job *j, struct advice_set *set, const struct entry *e,
                              struct dnnmem_error *err)
{
    if (set->n == MAX_ENTRIES)
        return DNNMEM_OK;
    struct entry x = *e;
    bool ok;
    enum kind last = x.parts[x.n_parts - 1];
    DM_TRY(last == K_BATCH || last == K_SEQ ? search_entry(j, &x, &ok, err)
                                            : estimate_entry(j, &x, &ok, err));
    /* a change that leaves no more room is no advice (the margin: capacity
     * less the total, or TensorFlow's and JAX's limit less what the job
     * allocates, when their allocator reserves the whole limit) */
    if (ok && x.margin > j->base_margin)
        set->e[set->n++] = x;
    return DNNMEM_OK;
}

/* The entry's options, as the CLI takes them. */
static void change_text(const struct job *j, const struct entry *e, char *buf, size_t n)
{
    bool bf16 = (j->cc ? j->cc : DM_CC_DEFAULT) >= 80;
    size_t o = 0;
    buf[0] = '\0';
    for (int k = 0; k < e->n_parts && o < n; k++) {
        const char *sp = k ? " " : "";
        int w = 0;
        switch (e->parts[k]) {
        case K_AMP: w = snprintf(buf + o, n - o, "%s--precision %s", sp, bf16 ? "amp-bf16" : "amp-fp16"); break;
        case K_HALF: w = snprintf(buf + o, n - o, "%s--precision %s", sp, bf16 ? "bf16" : "fp16"); break;
        case K_BATCH: w = snprintf(buf + o, n - o, "%s--batch-size %lld", sp, (long long)e->batch); break;
        case K_CKPT:
            for (int s = 0; s < j->blocks.n_specs && o < n; s++) {
                w = snprintf(buf + o, n - o, "%s--checkpoint '%s'", s ? " " : sp, j->blocks.spec[s]);
                o += w > 0 ? (size_t)w : 0;
            }
            w = 0;
            break;
        case K_CKPT_TOP: w = snprintf(buf + o, n - o, "%s--checkpoint '/*'", sp); break;
        case K_ADAM8BIT: w = snprintf(buf + o, n - o, "%s--optimizer adam8bit", sp); break;
        case K_ADAFACTOR: w = snprintf(buf + o, n - o, "%s--optimizer adafactor", sp); break;
        case K_SGD_MOM: w = snprintf(buf + o, n - o, "%s--optimizer sgd-momentum", sp); break;
        case K_SGD: w = snprintf(buf + o, n - o, "%s--optimizer sgd", sp); break;
        case K_LORA: w = snprintf(buf + o, n - o, "%s--lora-r %d", sp, ADVICE_LORA_R); break;
        case K_KV_FP8: w = snprintf(buf + o, n - o, "%s--kv-dtype fp8", sp); break;
        case K_INT8: w = snprintf(buf + o, n - o, "%s--quant int8", sp); break;
        case K_NF4:
            w = j->cfg->mode == DNNMEM_MODE_TRAIN && j->cfg->lora.r == 0
                    ? snprintf(buf + o, n - o, "%s--lora-r %d --quant nf4", sp, ADVICE_LORA_R)
                    : snprintf(buf + o, n - o, "%s--quant nf4", sp);
            break;
        case K_SEQ: w = snprintf(buf + o, n - o, "%s--seq-len %lld", sp, (long long)e->seq); break;
        case K_COUNT: break;
        }
        o += w > 0 ? (size_t)w : 0;
    }
}

/* What one part costs the user, in words. */
static int cost_part(const struct job *j, const struct entry *e, enum kind k, char *buf, size_t n)
{
    bool bf16 = (j->cc ? j->cc : DM_CC_DEFAULT) >= 80;
    const struct dnnmem_config *c = j->cfg;
    switch (k) {
    case K_AMP:
        /* bf16 needs compute capability 8.0 (torch.cuda.is_bf16_supported);
         * fp16 autocast needs a GradScaler against underflow (PyTorch AMP docs) */
        return bf16 ? snprintf(buf, n, "numerics: autocast's bf16 mixed precision, usually faster")
                    : snprintf(buf, n, "numerics: autocast's fp16 mixed precision with a GradScaler "
                                       "(no bf16 before compute capability 8.0), usually faster");
    case K_HALF:
        return snprintf(buf, n, "numerics: %s weights and activations", bf16 ? "bfloat16" : "float16");
    case K_BATCH:
        if (c->mode == DNNMEM_MODE_TRAIN) {
            int64_t acc = c->batch_size / e->batch + (c->batch_size % e->batch != 0), eff;
            if (!dm_mul_ok(acc, e->batch, &eff))
                eff = INT64_MAX;
            return snprintf(buf, n,
                            "throughput: %lld sample%s per step; --grad-accum %lld keeps an "
                            "effective batch of %lld",
                            (long long)e->batch, e->batch == 1 ? "" : "s", (long long)acc,
                            (long long)eff);
        }
        return snprintf(buf, n, "throughput: %lld sample%s per pass instead of %lld",
                        (long long)e->batch, e->batch == 1 ? "" : "s", (long long)c->batch_size);
    case K_CKPT:
        /* torch.utils.checkpoint reruns each segment's forward in the backward */
        return snprintf(buf, n, "speed: the %d blocks' forwards run again in the backward",
                        (int)j->blocks.blocks);
    case K_CKPT_TOP:
        return snprintf(buf, n, "speed: every top-level module's forward runs again in the backward");
    case K_ADAM8BIT:
        return snprintf(buf, n, "optimizer: bitsandbytes' 8-bit Adam (blockwise-quantized moments)");
    case K_ADAFACTOR:
        return snprintf(buf, n, "optimizer: Adafactor (factored second moments, no momentum)");
    case K_SGD_MOM: return snprintf(buf, n, "optimizer: SGD with momentum instead of Adam");
    case K_SGD: return snprintf(buf, n, "optimizer: SGD without momentum");
    case K_LORA:
        return snprintf(buf, n, "model: rank-%d LoRA adapters trained, the base frozen", ADVICE_LORA_R);
    case K_KV_FP8:
        return snprintf(buf, n, "model: the KV cache stored in 8-bit floats (a quantized cache)");
    case K_INT8: return snprintf(buf, n, "model: an 8-bit base (LLM.int8()), slower matmuls");
    case K_NF4:
        return snprintf(buf, n, "model: a 4-bit NF4 base%s, dequantized at each matmul",
                        c->mode == DNNMEM_MODE_TRAIN ? " under LoRA adapters (QLoRA)" : "");
    case K_SEQ:
        return snprintf(buf, n, "task: %lld tokens instead of %lld", (long long)e->seq,
                        (long long)c->seq_len);
    case K_COUNT: break;
    }
    return 0;
}

static void cost_text(const struct job *j, const struct entry *e, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int k = 0; k < e->n_parts && o + 3 < n; k++) {
        if (k) {
            strcpy(buf + o, "; ");
            o += 2;
        }
        int w = cost_part(j, e, e->parts[k], buf + o, n - o);
        o += w > 0 ? (size_t)w : 0;
    }
}

/* The first single change of each kind, cheapest first (the order they are
 * combined in). */
static int by_rank(const void *pa, const void *pb)
{
    const struct entry *a = pa, *b = pb;
    bool fa = fits(a), fb = fits(b);
    if (fa != fb)
        return fa ? -1 : 1;
    if (a->cost_rank != b->cost_rank)
        return a->cost_rank < b->cost_rank ? -1 : 1;
    if (a->n_parts != b->n_parts)
        return a->n_parts < b->n_parts ? -1 : 1;
    return a->margin > b->margin ? -1 : a->margin < b->margin;
}

/* e with part k in its group's place (replacing that group's part), or added. */
static void put_part(struct entry *e, enum kind k)
{
    for (int p = 0; p < e->n_parts; p++)
        if (rows[e->parts[p]].group == rows[k].group) {
            e->parts[p] = k;
            return;
        }
    if (e->n_parts < MAX_PARTS)
        e->parts[e->n_parts++] = k;
}

/* The last part of a combination searched (the largest batch, or sequence,
 * that fits with the others); *ok as search_entry's. */
static enum dnnmem_status with_search(const struct job *j, struct entry *e, enum kind k, bool *ok,
                                      struct dnnmem_error *err)
{
    *ok = false;
    if (!applies(j, k) || e->n_parts >= MAX_PARTS)
        return DNNMEM_OK;
    e->parts[e->n_parts++] = k;
    DM_TRY(search_entry(j, e, ok, err));
    if (!*ok)
        e->n_parts--;
    return DNNMEM_OK;
}

/* A combination that fits, less each part it still fits without, the
 * costliest tried first (the searched value kept as found). */
static enum dnnmem_status prune(const struct job *j, struct entry *e, struct dnnmem_error *err)
{
    for (int rank = 10; rank >= 1 && e->n_parts > 1; rank--)
        for (int p = 0; p < e->n_parts && e->n_parts > 1; p++) {
            enum kind k = e->parts[p];
            if (rows[k].cost_rank != rank || k == K_BATCH || k == K_SEQ)
                continue;
            struct entry x = *e;
            memmove(x.parts + p, x.parts + p + 1, (size_t)(x.n_parts - p - 1) * sizeof *x.parts);
            x.n_parts--;
            bool ok;
            DM_TRY(estimate_entry(j, &x, &ok, err));
            if (ok && fits(&x)) {
                *e = x;
                p--;
            }
        }
    return DNNMEM_OK;
}

static void push(struct advice_set *set, const struct entry *e)
{
    if (e->n_parts >= 2 && set->n < MAX_ENTRIES)
        set->e[set->n++] = *e;
}

/* No single change fits: combine them, cheapest first, each kept when it
 * lowers the estimate, until the combination fits; when none does, with the
 * largest batch, else the largest sequence, that then fits. A combination
 * that fits is pruned of the parts it fits without. When it fits without a
 * search, its cheaper parts are also tried with the largest batch. */
static enum dnnmem_status combine(const struct job *j, struct advice_set *set,
                                  struct dnnmem_error *err)
{
    struct entry singles[MAX_ENTRIES];
    int n_singles = 0;
    for (int k = 0; k < set->n; k++) {
        if (fits(&set->e[k]))
            return DNNMEM_OK;
        enum kind p = set->e[k].parts[0];
        if (set->e[k].n_parts == 1 && p != K_BATCH && p != K_SEQ)
            singles[n_singles++] = set->e[k];
    }
    qsort(singles, (size_t)n_singles, sizeof *singles, by_rank);
    struct entry chain = {.n_parts = 0, .margin = j->base_margin};
    for (int s = 0; s < n_singles && !(chain.n_parts && fits(&chain)); s++) {
        struct entry x = chain;
        put_part(&x, singles[s].parts[0]);
        bool ok;
        DM_TRY(estimate_entry(j, &x, &ok, err));
        if (ok && x.margin > chain.margin)
            chain = x;
    }
    if (!chain.n_parts)
        return DNNMEM_OK;
    bool ok = fits(&chain), searched = false;
    struct entry best = chain;
    if (!ok)
        DM_TRY(with_search(j, &best, K_BATCH, &ok, err));
    if (!ok)
        DM_TRY(with_search(j, &best, K_SEQ, &ok, err));
    searched = ok && !fits(&chain);
    if (ok && fits(&best))
        DM_TRY(prune(j, &best, err));
    push(set, ok ? &best : &chain);
    if (ok && !searched && chain.n_parts >= 2) { /* the cheaper parts, a smaller batch */
        struct entry y = chain;
        int worst = 0;
        for (int p = 1; p < y.n_parts; p++)
            if (rows[y.parts[p]].cost_rank >= rows[y.parts[worst]].cost_rank)
                worst = p;
        memmove(y.parts + worst, y.parts + worst + 1,
                (size_t)(y.n_parts - worst - 1) * sizeof *y.parts);
        y.n_parts--;
        bool found;
        DM_TRY(with_search(j, &y, K_BATCH, &found, err));
        if (found && fits(&y)) {
            DM_TRY(prune(j, &y, err));
            push(set, &y);
        }
    }
    return DNNMEM_OK;
}

/* The model's sequence dim, as max-seq-len finds it: a name with "seq" that
 * is not a past or total length. */
static const char *seq_dim(const dnnmem_model *m)
{
    struct dnnmem_model_info info;
    dnnmem_model_get_info(m, &info);
    for (size_t k = 0; k < info.n_symbols; k++) {
        const char *name = dnnmem_model_symbol(m, k);
        if (strstr(name, "seq") && !strstr(name, "past") && !strstr(name, "total"))
            return name;
    }
    return NULL;
}

/* The job's facts: the device, the model's kind, its repeated blocks (the
 * depth whose per-block checkpointing estimates lowest, of up to three). */
static enum dnnmem_status find_job(struct job *j, struct dnnmem_error *err)
{
    const struct dm_graph *g = dm_model_graph(j->m);
    if (!g)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    j->cc = j->cfg->compute_capability;
    j->hf_lm = g->format && strcmp(g->format, "huggingface") == 0 && g->loss_upcast;
    j->seq_dim = seq_dim(j->m);
    if (j->cfg->mode != DNNMEM_MODE_TRAIN || j->cfg->n_checkpoint)
        return DNNMEM_OK;
    struct dm_block_scope found[3];
    size_t n = dm_repeated_blocks(g, found, 3);
    int64_t best = INT64_MIN;
    struct dm_block_scope keep = {0};
    for (size_t k = 0; k < n; k++) {
        j->blocks = found[k];
        for (int s = 0; s < found[k].n_specs; s++)
            j->ckpt[s] = j->blocks.spec[s];
        struct entry e = {.parts = {K_CKPT}, .n_parts = 1};
        bool ok;
        DM_TRY(estimate_entry(j, &e, &ok, err));
        if (ok && e.margin > best) {
            best = e.margin;
            keep = found[k];
        }
    }
    j->blocks = keep;
    for (int s = 0; s < keep.n_specs; s++)
        j->ckpt[s] = j->blocks.spec[s];
    return DNNMEM_OK;
}

/* The ranked entries for the job. */
static enum dnnmem_status advise_set(struct job *j, struct advice_set *set, struct dnnmem_error *err)
{
    DM_TRY(find_job(j, err));
    set->n = 0;
    for (int k = 0; k < K_COUNT; k++)
        if (applies(j, (enum kind)k)) {
            struct entry e = {.parts = {(enum kind)k}, .n_parts = 1};
            DM_TRY(add(j, set, &e, err));
        }
    DM_TRY(combine(j, set, err));
    qsort(set->e, (size_t)set->n, sizeof *set->e, by_rank);
    return DNNMEM_OK;
}

void dnnmem_advice_free(struct dnnmem_advice *a, size_t n)
{
    if (!a)
        return;
    for (size_t k = 0; k < n; k++) {
        free((char *)a[k].change);
        free((char *)a[k].cost);
    }
    free(a);
}

/* The set as advice, each string from `dup` (malloc, or the result's arena). */
static bool to_advice(const struct job *j, const struct advice_set *set, struct dnnmem_advice *a,
                      struct dm_arena *arena)
{
    for (int k = 0; k < set->n; k++) {
        char change[1024], cost[1024];
        change_text(j, &set->e[k], change, sizeof change);
        cost_text(j, &set->e[k], cost, sizeof cost);
        a[k] = (struct dnnmem_advice){.total_bytes = set->e[k].total,
                                      .verdict = set->e[k].verdict,
                                      .margin_bytes = set->e[k].margin,
                                      .cost_rank = set->e[k].cost_rank};
        a[k].change = arena ? dm_arena_strdup(arena, change) : strdup(change);
        a[k].cost = arena ? dm_arena_strdup(arena, cost) : strdup(cost);
        if (!a[k].change || !a[k].cost)
            return false;
    }
    return true;
}

static enum dnnmem_status check_args(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                     struct dnnmem_error *err)
{
    if (!m || !cfg || cfg->capacity_bytes <= 0)
        return dm_fail(err, DNNMEM_E_USAGE, "advice needs a device capacity (--gpu or --memory)");
    return DNNMEM_OK;
}

enum dnnmem_status dnnmem_advise(const dnnmem_model *m, const struct dnnmem_config *cfg,
                                 struct dnnmem_advice **out, size_t *n, struct dnnmem_error *err)
{
    if (!out || !n)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_advise: NULL argument");
    *out = NULL;
    *n = 0;
    DM_TRY(check_args(m, cfg, err));
    struct dnnmem_result *r = NULL;
    DM_TRY(dnnmem_estimate(m, cfg, &r, err));
    struct job j = {.m = m, .cfg = cfg, .base_margin = r->margin_bytes};
    dnnmem_result_free(r);
    struct advice_set *set = malloc(sizeof *set);
    if (!set)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    enum dnnmem_status s = advise_set(&j, set, err);
    struct dnnmem_advice *a = s == DNNMEM_OK ? calloc((size_t)set->n + 1, sizeof *a) : NULL;
    if (s == DNNMEM_OK && (!a || !to_advice(&j, set, a, NULL))) {
        dnnmem_advice_free(a, (size_t)set->n);
        a = NULL;
        s = dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    }
    if (s == DNNMEM_OK) {
        *out = a;
        *n = (size_t)set->n;
    }
    free(set);
    return s;
}

enum dnnmem_status dnnmem_result_advise(struct dnnmem_result *r, const dnnmem_model *m,
                                        const struct dnnmem_config *cfg, struct dnnmem_error *err)
{
    if (!r)
        return dm_fail(err, DNNMEM_E_USAGE, "dnnmem_result_advise: NULL result");
    DM_TRY(check_args(m, cfg, err));
    r->advice = NULL;
    r->n_advice = 0;
    if (r->verdict != DNNMEM_VERDICT_DOES_NOT_FIT)
        return DNNMEM_OK;
    struct job j = {.m = m, .cfg = cfg, .base_margin = r->margin_bytes};
    struct advice_set *set = malloc(sizeof *set);
    if (!set)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    enum dnnmem_status s = advise_set(&j, set, err);
    struct dm_arena *arena = dm_result_arena(r);
    struct dnnmem_advice *a =
        s == DNNMEM_OK ? dm_arena_array(arena, (size_t)set->n + 1, sizeof *a) : NULL;
    if (s == DNNMEM_OK && (!a || !to_advice(&j, set, a, arena)))
        s = dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    if (s == DNNMEM_OK) {
        r->advice = a;
        r->n_advice = (size_t)set->n;
    }
    free(set);
    return s;
}
