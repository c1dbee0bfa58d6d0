/*
 * shapes.c: the symbolic dims bound (--dim, --batch-size, --seq-len,
 * --input-shape, each stated as an assumption; the first thing wrong with
 * them is recorded in struct dm_bind, and the check table's DM_CHECK_BIND
 * rows say what error it is), every tensor's shape inferred, and the
 * precision applied to the tensors' dtypes.
 */
#include "estimate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


static bool name_is(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (strcasecmp(name, *list) == 0)
            return true;
    return false;
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return false;
}

/* Names exporters give the batch axis: torch.onnx dynamic_axes names chosen by
 * users ("batch", "batch_size"), tf2onnx's "N", "unk__" only by position (not
 * matched), HF optimum's "batch_size". */
static bool is_batch_name(const char *s)
{
    static const char *const names[] = {"n", "b", "bs", "nbatch", NULL};
    return contains_ci(s, "batch") || name_is(s, names);
}

/* Sequence axes: "seq", "seq_len", "sequence", "sequence_length" (optimum);
 * not the KV-cache axes "past_seq_len", "total_seq_len", "max_seq_len",
 * which hold other lengths and must be bound by name. */
static bool is_seq_name(const char *s)
{
    return contains_ci(s, "seq") && !contains_ci(s, "past") && !contains_ci(s, "total") &&
           !contains_ci(s, "max") && !contains_ci(s, "cache");
}
static void dims_str(char *buf, size_t cap, int rank, const int64_t *dims)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < rank && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", k ? "," : "", (long long)dims[k]);
}

/* The first breach binding the dims found: recorded in *b for the check
 * table's DM_CHECK_BIND rows (the error is theirs); binding stops. */
static enum dnnmem_status breach(struct dm_bind *b, enum dm_bind_breach k)
{
    b->breach = k;
    return DNNMEM_E_USAGE;
}

/* Adds the i-th name to a ", "-separated list. */
static void list_add(char *list, size_t cap, int32_t i, const char *name)
{
    size_t len = strlen(list);
    snprintf(list + len, cap - len, "%s%s", i ? ", " : "", name);
}

/* --input-shape: a shape for an input that declares none (shapes[id]), or
 * values for the symbolic dims of one that does (given[sym]). */
static enum dnnmem_status bind_input_shapes(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                            struct dm_shape *shapes, int64_t *given,
                                            const char **given_by, struct dm_bind *b)
{
    for (int32_t i = 0; i < g->n_symbols; i++)
        given[i] = -1;
    for (size_t k = 0; k < cfg->n_input_shapes; k++) {
        const struct dnnmem_input_shape *in = &cfg->input_shapes[k];
        b->name = in->name ? in->name : "?";
        b->rank = (int64_t)in->rank;
        if (!in->name || !in->dims || in->rank < 1 || in->rank > DM_MAX_DIMS)
            return breach(b, DM_BIND_SHAPE_RANK);
        for (size_t d = 0; d < in->rank; d++)
            if (in->dims[d] < 1) {
                b->index = (int64_t)d;
                b->value = in->dims[d];
                return breach(b, DM_BIND_SHAPE_DIM);
            }
        int32_t id = -1;
        for (int32_t i = 0; i < g->n_inputs; i++)
            if (strcmp(g->tensors[g->inputs[i]].name, in->name) == 0)
                id = g->inputs[i];
        if (id < 0) {
            for (int32_t i = 0; i < g->n_inputs; i++)
                list_add(b->list, sizeof b->list, i, g->tensors[g->inputs[i]].name);
            if (!g->n_inputs)
                snprintf(b->list, sizeof b->list, "none");
            return breach(b, DM_BIND_SHAPE_NO_INPUT);
        }
        for (size_t j = 0; j < k; j++)
            if (cfg->input_shapes[j].name && strcmp(cfg->input_shapes[j].name, in->name) == 0)
                return breach(b, DM_BIND_SHAPE_TWICE);
        const struct dm_tensor *tt = &g->tensors[id];
        if (tt->rank < 0) {
            shapes[id].rank = (int)in->rank;
            for (size_t d = 0; d < in->rank; d++)
                shapes[id].dims[d] = in->dims[d];
            continue;
        }
        char *decl = b->decl;
        decl[0] = '\0';
        for (int d = 0; d < tt->rank; d++) {
            size_t len = strlen(decl);
            if (tt->dims[d].sym >= 0)
                snprintf(decl + len, sizeof b->decl - len, "%s%s", d ? "," : "", g->symbols[tt->dims[d].sym]);
            else
                snprintf(decl + len, sizeof b->decl - len, "%s%lld", d ? "," : "", (long long)tt->dims[d].value);
        }
        b->decl_rank = tt->rank;
        if ((size_t)tt->rank != in->rank)
            return breach(b, DM_BIND_SHAPE_RANKS);
        for (int d = 0; d < tt->rank; d++) {
            int32_t sym = tt->dims[d].sym;
            b->index = d;
            b->value = in->dims[d];
            if (sym < 0 && tt->dims[d].value >= 0 && tt->dims[d].value != in->dims[d]) {
                b->other = tt->dims[d].value;
                return breach(b, DM_BIND_SHAPE_FIXED);
            }
            if (sym < 0)
                continue;
            if (given[sym] >= 0 && given[sym] != in->dims[d]) {
                b->dim = g->symbols[sym];
                b->other = given[sym];
                b->by = given_by[sym];
                return breach(b, DM_BIND_SHAPE_SYMBOL);
            }
            given[sym] = in->dims[d];
            given_by[sym] = in->name;
        }
    }
    return DNNMEM_OK;
}

/* --dim: each names a dim of the graph, with a non-negative value. */
static enum dnnmem_status check_dim_names(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                          struct dm_bind *b)
{
    for (size_t k = 0; k < cfg->n_dims; k++) {
        const struct dnnmem_dim_binding *d = &cfg->dims[k];
        b->name = d->name ? d->name : "?";
        b->value = d->value;
        if (!d->name || d->value < 0)
            return breach(b, DM_BIND_DIM_VALUE);
        bool found = false;
        for (int32_t i = 0; i < g->n_symbols; i++)
            if (strcmp(g->symbols[i], d->name) == 0)
                found = true;
        if (!found) {
            for (int32_t i = 0; i < g->n_symbols; i++)
                list_add(b->list, sizeof b->list, i, g->symbols[i]);
            if (!g->n_symbols)
                snprintf(b->list, sizeof b->list, "none");
            return breach(b, DM_BIND_DIM_UNKNOWN);
        }
    }
    return DNNMEM_OK;
}

static enum dnnmem_status bind_dims(const struct dm_graph *g, const struct dnnmem_config *cfg,
                                    int64_t default_batch, int64_t *vals, struct dm_shape *shapes,
                                    struct dm_assumptions *as, struct dm_bind *b,
                                    struct dnnmem_error *err)
{
    bool batch_used = false, seq_used = false;
    int64_t *given = dm_arena_array(as->arena, (size_t)g->n_symbols + 1, sizeof *given);
    const char **given_by = dm_arena_array(as->arena, (size_t)g->n_symbols + 1, sizeof *given_by);
    if (!given || !given_by)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    DM_TRY(bind_input_shapes(g, cfg, shapes, given, given_by, b));
    DM_TRY(check_dim_names(g, cfg, b));
    /* beam search runs every prompt as num_beams rows (generate's
     * _expand_inputs_for_generation): the model's batch dims are the
     * caller's times num_beams */
    int64_t beams = cfg->mode == DNNMEM_MODE_GENERATE && cfg->num_beams > 1 ? cfg->num_beams : 1;
    for (int32_t i = 0; i < g->n_symbols; i++) {
        const char *name = g->symbols[i];
        const char *key = dm_arena_printf(as->arena, "dims.%s", name);
        bool beamed = beams > 1 && is_batch_name(name);
        b->name = name;
        vals[i] = -1; /* unbound */
        for (size_t k = 0; k < cfg->n_dims; k++)
            if (strcmp(cfg->dims[k].name, name) == 0) {
                vals[i] = cfg->dims[k].value;
                if (beamed && !dm_mul_ok(vals[i], beams, &vals[i]))
                    return breach(b, DM_BIND_DIM_BEAMS);
                if (beamed)
                    dm_assume(as, key, "option", "%lld (--dim %lld x --num-beams %lld)",
                              (long long)vals[i], (long long)(vals[i] / beams), (long long)beams);
                else
                    dm_assume(as, key, "option", "%lld (--dim)", (long long)vals[i]);
            }
        if (given[i] >= 0) {
            b->value = vals[i];
            b->other = given[i];
            b->by = given_by[i];
            if (vals[i] >= 0 && vals[i] != given[i])
                return breach(b, DM_BIND_DIM_SHAPE);
            if (vals[i] < 0)
                dm_assume(as, key, "option", "%lld (--input-shape %s)", (long long)given[i], given_by[i]);
            vals[i] = given[i];
            if (cfg->batch_size > 0 && is_batch_name(name))
                return breach(b, DM_BIND_BATCH_SHAPE);
        }
        if (vals[i] >= 0)
            continue;
        if (is_batch_name(name)) {
            batch_used = true;
            if (!dm_mul_ok(default_batch, beams, &vals[i]))
                return breach(b, DM_BIND_BATCH_BEAMS);
            if (beams > 1)
                dm_assume(as, key, cfg->batch_size > 0 ? "option" : "default",
                          "%lld (batch %lld%s x --num-beams %lld: generate repeat_interleaves the "
                          "prompt and its mask)",
                          (long long)vals[i], (long long)default_batch,
                          cfg->batch_size > 0 ? " (--batch-size)" : " (default)", (long long)beams);
            else if (cfg->batch_size > 0)
                dm_assume(as, key, "option", "%lld (--batch-size)", (long long)vals[i]);
            else
                dm_assume(as, key, "default", "%lld (batch size; set with --batch-size)",
                          (long long)vals[i]);
        } else if (is_seq_name(name) && cfg->seq_len > 0) {
            seq_used = true;
            vals[i] = cfg->seq_len;
            dm_assume(as, key, "option", "%lld (--seq-len)", (long long)vals[i]);
        } else if (i < g->n_sym_default && g->sym_default[i] > 0) {
            vals[i] = g->sym_default[i];
            dm_assume(as, key, "default", "%lld (%s; --dim %s=N sets another)",
                      (long long)vals[i], g->sym_default_why, name);
        } else if (strcmp(name, "expert_tokens") == 0) {
            /* a mixture-of-experts model's tokens per expert depend on the
             * data (src/load/hf.c, dm_shape_expert_tokens); left unbound */
            dm_assume(as, "moe_routing", "default",
                      "uniform: each routed expert gets ceil(batch x seq x top_k / experts) tokens "
                      "in every MoE layer (--dim expert_tokens=N sets N, at most batch x seq)");
        }
    }
    /* transformers 5's experts (GroupedMatMul, src/load/hf/moe.c) compute
     * every token x top_k row: nothing depends on the routing */
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == DM_OP_GroupedMatMul) {
            dm_assume(as, "moe_routing", "default",
                      g->moe_dec_layer
                          ? "none: transformers 5's grouped_mm experts (and the decode steps' "
                            "batched_mm, which copies each row's expert weights) compute all "
                            "batch x seq x top_k rows however the tokens are routed (4.x's "
                            "per-expert loop is the one that depends on it)"
                          : "none: transformers 5's grouped_mm experts compute all batch x seq "
                            "x top_k rows however the tokens are routed (4.x's per-expert loop "
                            "is the one that depends on it)");
            break;
        }
    /* an input shaped by --input-shape alone takes --batch-size as its first dim */
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t id = g->inputs[i];
        struct dm_shape *sh = &shapes[id];
        if (sh->rank < 1)
            continue;
        if (cfg->batch_size > 0) {
            sh->dims[0] = cfg->batch_size;
            batch_used = true;
        }
        char buf[160];
        dims_str(buf, sizeof buf, sh->rank, sh->dims);
        dm_assume(as, dm_arena_printf(as->arena, "input.%s", g->tensors[id].name), "option",
                  "[%s] (--input-shape%s)", buf, cfg->batch_size > 0 ? ", first dim --batch-size" : "");
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const struct dm_tensor *tt = &g->tensors[g->inputs[i]];
        b->name = tt->name;
        if (cfg->batch_size > 0 && !batch_used && tt->rank < 0 && !tt->derive)
            return breach(b, DM_BIND_NO_SHAPE);
    }
    if (cfg->batch_size > 0 && !batch_used)
        return breach(b, DM_BIND_NO_BATCH);
    if (cfg->seq_len > 0 && !seq_used)
        return breach(b, DM_BIND_NO_SEQ);
    return DNNMEM_OK;
}

/* The dtype most weight bytes have, for the assumptions line. */
static const char *weight_dtype(const struct dm_graph *g, const struct dm_tinfo *t)
{
    uint64_t by[DM_DTYPE_COUNT] = {0};
    for (int32_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].role == DM_ROLE_WEIGHT && t[i].rank >= 0)
            by[t[i].dtype] += t[i].bytes;
    int best = 0;
    for (int d = 1; d < DM_DTYPE_COUNT; d++)
        if (by[d] > by[best])
            best = d;
    return best ? dm_dtype_name((enum dm_dtype)best) : "none";
}

/* --precision (or the model's default): autocast, or 2-byte floats. */
static void apply_precision(struct dm_est *e)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    const struct dm_graph *g = e->g;
    struct dm_tinfo *t = e->t;
    struct dm_run *run = &e->run;
    struct dm_assumptions *as = &e->as;
    if (c->precision == DNNMEM_PRECISION_AMP_FP16 || c->precision == DNNMEM_PRECISION_AMP_BF16) {
        run->amp = c->precision == DNNMEM_PRECISION_AMP_FP16 ? DM_FLOAT16 : DM_BFLOAT16;
        dm_amp_retype(g, t, run->amp);
        dm_assume(as, "precision", "option",
                  "%s: torch.autocast, fp32 weights, grads and optimizer state; cached parameter "
                  "casts; GradScaler state negligible",
                  run->amp == DM_FLOAT16 ? "amp-fp16" : "amp-bf16");
    } else if (c->precision != DNNMEM_PRECISION_FP32 || (g->quant_method && g->quant_fp16_default)) {
        /* model.half() / .to(bfloat16) converts every floating-point
         * parameter and buffer, so every float32 tensor the model makes from
         * them, its grads and optimizer state become 2-byte. A quantized
         * model's quantizer makes float16 the default (update_torch_dtype). */
        bool qdefault = c->precision == DNNMEM_PRECISION_FP32;
        enum dm_dtype half = c->precision == DNNMEM_PRECISION_BF16 ? DM_BFLOAT16 : DM_FLOAT16;
        for (int32_t i = 0; i < g->n_tensors; i++)
            if (t[i].rank >= 0 && t[i].dtype == DM_FLOAT && !g->tensors[i].keep_fp32) {
                t[i].dtype = half;
                t[i].bytes = (uint64_t)t[i].numel * 2;
            }
        if (o->cfg_dtype)
            dm_assume(as, "precision", "default",
                      "%s: the config's torch_dtype %s, as from_pretrained(torch_dtype=\"auto\") "
                      "and transformers 5 load it (transformers 4.x without torch_dtype loads "
                      "float32: --precision fp32)",
                      c->precision == DNNMEM_PRECISION_FP16 ? "fp16" : "bf16", g->stored_dtype);
        else if (qdefault)
            dm_assume(as, "precision", "default",
                      "fp16: from_pretrained of a %s model without torch_dtype loads its other "
                      "weights in float16 (the quantizer's update_torch_dtype; --precision bf16 for "
                      "bfloat16)",
                      g->quant_method);
        else
            dm_assume(as, "precision", "option", "%s (every float32 tensor becomes 2-byte)",
                      c->precision == DNNMEM_PRECISION_FP16 ? "fp16" : "bf16");
    } else if (g->quant_method) {
        dm_assume(as, "precision", "default",
                  "float32 for the weights %s leaves unquantized: its quantizer's default without "
                  "torch_dtype (update_dtype; --precision bf16 loads them as stored)",
                  g->quant_method);
    } else if (g->stored_dtype && strcmp(g->stored_dtype, "float32") != 0 && !c->precision_set) {
        const char *flag = strcmp(g->stored_dtype, "bfloat16") == 0  ? " bf16"
                           : strcmp(g->stored_dtype, "float16") == 0 ? " fp16"
                                                                     : " P";
        dm_assume(as, "precision", "default",
                  "float32, as from_pretrained without torch_dtype loads a %s checkpoint "
                  "(--precision%s loads it as stored, torch_dtype=\"auto\")",
                  g->stored_dtype, flag);
    } else {
        dm_assume(as, "precision", c->precision_set ? "option" : "default", "as the model: %s",
                  weight_dtype(g, t));
    }
}

/* --tp N: the parameters this rank holds a shard of (src/graph/tp.c), which
 * shape inference divides, and the assumption saying which. */
static enum dnnmem_status tp_split(struct dm_est *e, struct dm_infer *ctx, struct dnnmem_error *err)
{
    int8_t *split = dm_arena_array(&e->arena, (size_t)e->g->n_tensors + 1, sizeof *split);
    if (!split)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", e->g->path);
    int8_t *role = dm_arena_array(&e->arena, (size_t)e->g->n_nodes + 1, sizeof *role);
    if (!role)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", e->g->path);
    struct dm_tp_summary sum;
    DM_TRY(dm_tp_plan(e->g, e->run.par.tp, split, role, &sum, err));
    e->run.par.tp_role = role;
    e->tp_role = role;
    ctx->split = split;
    ctx->split_ranks = e->run.par.tp;
    e->tp_split = split;
    dm_assume(&e->as, "tensor_parallel", "option",
              "%d ranks: %d column-parallel linears (the first '%s': weight rows and bias split) "
              "paired with %d row-parallel ones (the first '%s': weight columns split, bias whole, "
              "output %s); %d parameters split, the rest replicated",
              e->run.par.tp, sum.n_col, sum.first_col, sum.n_row,
              sum.first_row ? sum.first_row : "none",
              e->run.par.sp ? "reduce-scattered along the sequence" : "all-reduced", sum.n_split);
    return DNNMEM_OK;
}

static void tp_dims(char *buf, size_t cap, const struct dm_tinfo *t)
{
    buf[0] = '[';
    dims_str(buf + 1, cap - 2, t->rank, t->dims);
    strcat(buf, "]");
}

/* --tp: every activation a rank makes is the whole model's, or (a slice,
 * src/graph/tp.c) the whole model's with one dim divided by the ranks; a
 * view that names a count the split changes (view(B, -1, heads, d) with
 * the heads' count written out) would infer another shape silently. */
static enum dnnmem_status tp_check(const struct dm_est *e, const struct dm_tinfo *whole,
                                   struct dnnmem_error *err)
{
    const struct dm_graph *g = e->g;
    const int8_t *split = e->tp_split;
    int64_t n = e->run.par.tp;
    for (int32_t i = 0; i < g->n_tensors; i++) {
        const struct dm_tinfo *a = &e->t[i], *w = &whole[i];
        if (g->tensors[i].role != DM_ROLE_ACTIVATION || g->tensors[i].producer < 0 ||
            a->rank < 0 || a->absent || a->is_const)
            continue;
        int differ = 0;
        bool ok = a->rank == w->rank;
        for (int k = 0; ok && k < a->rank; k++)
            if (a->dims[k] != w->dims[k]) {
                differ++;
                ok = split[i] == DM_TP_SLICE && a->dims[k] * n == w->dims[k];
            }
        if (ok && (differ == 0 || differ == 1))
            continue;
        char got[96], want[96];
        tp_dims(got, sizeof got, a);
        tp_dims(want, sizeof want, w);
        const struct dm_node *nd = &g->nodes[g->tensors[i].producer];
        return dm_fail(err, DNNMEM_E_UNSUPPORTED,
                       "%s: --tp %lld: node '%s' (%s) makes '%s' %s on a rank, the whole model "
                       "%s: not the whole shape or one dim split by %lld (a view naming a count "
                       "the split changes, such as the heads; modelled: views with -1 for it)",
                       g->path, (long long)n, nd->name, dm_ops[nd->op].name, g->tensors[i].name,
                       got, want, (long long)n);
    }
    return DNNMEM_OK;
}

/* --sp: the activations sequence parallelism splits along dim 1 (dm_sp_plan,
 * src/graph/tp.c S1-S5), inferred whole, take this rank's S / tp rows; the
 * sequence must divide (Megatron's divide() asserts it; DTensor's Shard(1)
 * of a plain tensor takes the rank's part as given). */
static enum dnnmem_status sp_split(struct dm_est *e, struct dnnmem_error *err)
{
    const struct dm_graph *g = e->g;
    int8_t *split = (int8_t *)e->tp_split;
    int64_t n = e->run.par.tp;
    int32_t n_gather = 0, n_seq = 0;
    DM_TRY(dm_sp_plan(g, e->t, split, e->tp_role, &n_gather, err));
    for (int32_t i = 0; i < g->n_tensors; i++) {
        struct dm_tinfo *t = &e->t[i];
        if (split[i] != DM_TP_SEQ || t->rank < 2 || t->absent)
            continue;
        if (t->dims[1] % n != 0)
            return dm_fail(err, DNNMEM_E_USAGE,
                           "%s: --sp: the sequence (dim 1 of '%s', %lld) does not divide by --tp "
                           "%lld (each rank holds S / TP of it)",
                           g->path, g->tensors[i].name, (long long)t->dims[1], (long long)n);
        t->dims[1] /= n;
        t->numel /= n;
        if (!dm_dtype_bytes(t->dtype, t->numel, &t->bytes))
            return dm_fail(err, DNNMEM_E_SHAPE, "%s: '%s' overflows", g->path,
                           g->tensors[i].name);
        t->value = NULL;
        n_seq++;
    }
    int32_t n_rs = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        n_rs += e->tp_role[i] == DM_TP_ROW_SP;
    dm_assume(&e->as, "sequence_parallel", "option",
              "%lld ranks: %d activations split along dim 1 (the sequence, S / %lld each: the "
              "input, the norms, dropout and residual adds); %d column-parallel linears "
              "all-gather their input (each gathered input saved for the backward, as "
              "DTensor's ColwiseParallel(input_layouts=Shard(1)) keeps it), %d row-parallel "
              "ones reduce-scatter their output; the norms' weights replicated",
              (long long)n, n_seq, (long long)n, n_gather, n_rs);
    return DNNMEM_OK;
}

enum dnnmem_status dm_est_shapes(struct dm_est *e, struct dnnmem_error *err)
{
    const struct dm_graph *g = e->g;
    struct dm_arena *arena = &e->arena;
    e->syms = dm_arena_array(arena, (size_t)g->n_symbols + 1, sizeof *e->syms);
    e->t = malloc(((size_t)g->n_tensors + 1) * sizeof *e->t);
    struct dm_shape *shapes = dm_arena_array(arena, (size_t)g->n_tensors + 1, sizeof *shapes);
    if (!e->syms || !e->t || !shapes)
        return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
    for (int32_t i = 0; i < g->n_tensors; i++)
        shapes[i].rank = -1;
    struct dm_bind b = {.breach = DM_BIND_OK};
    /* --pp: each forward runs one micro-batch (check.c: the batch splits) */
    int64_t batch = dm_default_int(&e->o->d, BATCH) / (e->run.par.pp > 1 ? e->run.par.micro : 1);
    enum dnnmem_status s = bind_dims(g, &e->o->cfg, batch, e->syms,
                                     shapes, &e->as, &b, err);
    if (b.breach)
        return dm_est_check_bind(g, e->o, &b, err);
    if (s != DNNMEM_OK)
        return s;
    struct dm_infer ctx = {.g = g, .arena = arena, .t = e->t, .sym_values = e->syms,
                           .input_shapes = shapes, .err = err};
    struct dm_tinfo *whole = NULL;
    if (e->run.par.tp > 1) { /* the whole model's shapes first, to check the rank's against */
        DM_TRY(dm_infer_shapes(&ctx));
        whole = malloc(((size_t)g->n_tensors + 1) * sizeof *whole);
        if (!whole)
            return dm_fail(err, DNNMEM_E_NOMEM, "%s: out of memory", g->path);
        memcpy(whole, e->t, (size_t)g->n_tensors * sizeof *whole);
        s = tp_split(e, &ctx, err);
    }
    if (s == DNNMEM_OK)
        s = dm_infer_shapes(&ctx);
    if (s == DNNMEM_OK && whole)
        s = tp_check(e, whole, err);
    free(whole);
    DM_TRY(s);
    if (e->run.par.sp)
        DM_TRY(sp_split(e, err));
    /* inputs the caller left unshaped whose shape the model implies */
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t id = g->inputs[i];
        const struct dm_derive *dv = g->tensors[id].derive;
        if (!dv || !dv->why || shapes[id].rank >= 0 || e->t[id].rank < 0)
            continue;
        char buf[160];
        dims_str(buf, sizeof buf, e->t[id].rank, e->t[id].dims);
        dm_assume(&e->as, dm_arena_printf(arena, "input.%s", g->tensors[id].name), "default",
                  "[%s]: %s (--input-shape %s=... sets it)", buf, dv->why, g->tensors[id].name);
    }
    DM_TRY(dm_est_check(DM_CHECK_SHAPES, g, e->o, err));
    apply_precision(e);
    return DNNMEM_OK;
}
