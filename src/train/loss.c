/*
 * loss.c: the loss (--loss) and its backward, which hands the outputs
 * their grads, with a mixture of experts' auxiliary loss.
 */
#include "train/train.h"

/* A mixture of experts' auxiliary loss with output_router_logits, as
 * transformers 4.51's MixtralForCausalLM (and Qwen2-MoE, Qwen3-MoE) adds it
 * right after the cross-entropy: load_balancing_loss_func on the returned
 * router logits of the L sparse layers, each [T, E] (N = L x T rows, k
 * experts a token), whose locals live until it returns:
 *   concatenated_gate_logits = torch.cat(router_logits)          [N, E]
 *   routing_weights = softmax(., dim=-1)  (kept by SoftmaxBackward; float32
 *                                          under autocast, its fp32 list)
 *   _, selected_experts = topk(routing_weights, k)               [N, k] x 2
 *   expert_mask = one_hot(selected_experts, E)            int64 [N, k, E]
 *   tokens_per_expert = mean(expert_mask.float(), 0)   float32 copy, [k, E]
 *   router_prob_per_expert = mean(routing_weights, 0)            [E]
 *   sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * E
 * (the product's backward keeps tokens_per_expert), then loss += coef x it.
 * Its backward runs before the cross-entropy's (the engine takes the most
 * recent nodes first): the [k, E] product's grad summed to [1, E], the
 * mean's [N, E], the softmax's [N, E] (and autocast's cast back), whose
 * slices are the router logits' grads (one buffer, shared). The returned
 * router logits are held with the model's other outputs.
 * What the backward takes: */
struct aux {
    int32_t rw, tpe;        /* the routing weights and tokens_per_expert kept, or -1 */
    enum dm_dtype dt, pt;   /* the router logits' type, the routing weights' */
    uint64_t b_ne, b_pne, b_ke4, b_e;
};

static void aux_forward(struct dm_sb *b, struct aux *a)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    a->rw = a->tpe = -1;
    if (!tr->router_buf || tr->router_buf[0] < 0)
        return;
    const struct dm_tinfo *r0 = &b->t[g->router[0]];
    enum dm_dtype dt = r0->dtype, pt = b->run->amp != DM_UNDEFINED ? DM_FLOAT : dt;
    int64_t T = r0->rank == 2 ? r0->dims[0] : 0, E = r0->rank == 2 ? r0->dims[1] : 0;
    int64_t k = g->router_top_k, N, NE, NK, NKE;
    uint64_t b_ne, b_pne, b_pnk, b_nk8, b_nke8, b_nke4, b_ke4, b_e;
    if (!dm_mul_ok(T, g->n_router, &N) || !dm_mul_ok(N, E, &NE) || !dm_mul_ok(N, k, &NK) ||
        !dm_mul_ok(NK, E, &NKE) || !dm_dtype_bytes(dt, NE, &b_ne) ||
        !dm_dtype_bytes(pt, NE, &b_pne) || !dm_dtype_bytes(pt, NK, &b_pnk) ||
        !dm_dtype_bytes(DM_INT64, NK, &b_nk8) || !dm_dtype_bytes(DM_INT64, NKE, &b_nke8) ||
        !dm_dtype_bytes(DM_FLOAT, NKE, &b_nke4) || !dm_dtype_bytes(DM_FLOAT, k * E, &b_ke4) ||
        !dm_dtype_bytes(pt, E, &b_e))
        return;
    *a = (struct aux){-1, -1, dt, pt, b_ne, b_pne, b_ke4, b_e};
    int32_t cat = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, b_ne, -1, -1, "aux.router_logits_cat", 1);
    int32_t up = pt != dt ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, pt, b_pne, -1, -1, "autocast", 1)
                          : -1;
    a->rw = dm_sb_alloc(b, DNNMEM_CAT_SAVED, pt, b_pne, -1, -1, "aux.routing_weights", 1);
    dm_sb_unref(b, up);
    int32_t vals = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, pt, b_pnk, -1, -1, "aux.topk", 1);
    int32_t sel = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_INT64, b_nk8, -1, -1, "aux.topk", 1);
    int32_t mask = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_INT64, b_nke8, -1, -1,
                               "aux.expert_mask", 1);
    int32_t f = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, b_nke4, -1, -1, "aux.expert_mask", 1);
    a->tpe = dm_sb_alloc(b, DNNMEM_CAT_SAVED, DM_FLOAT, b_ke4, -1, -1, "aux.tokens_per_expert", 1);
    dm_sb_unref(b, f);
    int32_t prob = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, pt, b_e, -1, -1, "aux.router_prob", 1);
    int32_t prod = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, b_ke4, -1, -1, "aux", 1);
    int32_t sum = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux", 1);
    dm_sb_unref(b, prod);
    int32_t loss = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux", 1);
    dm_sb_unref(b, sum);
    /* the function returns: its locals go */
    int32_t locals[] = {cat, vals, sel, mask, prob};
    for (size_t j = 0; j < sizeof locals / sizeof *locals; j++)
        dm_sb_unref(b, locals[j]);
    /* loss += coef * aux_loss (coef * aux a new scalar, the add in place) */
    int32_t scaled = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux", 1);
    dm_sb_unref(b, loss);
    dm_sb_unref(b, scaled);
    /* the router logits are returned with the logits: held as they are */
    for (int32_t r = 0; r < g->n_router; r++) {
        tr->held[tr->n_held++] = tr->router_buf[r];
        tr->router_buf[r] = -1;
    }
}

static void aux_backward(struct dm_sb *b, const struct aux *a)
{
    const struct dm_graph *g = b->g;
    if (a->rw < 0)
        return;
    int32_t s1 = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux.grad", 1);
    int32_t s2 = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, 4, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, s1);
    /* MulBackward: grad * tokens_per_expert [k, E], summed to [1, E] */
    int32_t gk = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, a->b_ke4, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, s2);
    dm_sb_unref(b, a->tpe);
    int32_t ge = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->pt, a->b_e, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, gk);
    /* MeanBackward: the expanded grad / N, [N, E]; SoftmaxBackward */
    int32_t gm = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->pt, a->b_pne, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, ge);
    int32_t gs = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->pt, a->b_pne, -1, -1, "aux.grad", 1);
    dm_sb_unref(b, gm);
    dm_sb_unref(b, a->rw);
    if (a->pt != a->dt) { /* autocast's copy back to the router logits' type */
        int32_t down = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, a->dt, a->b_ne, -1, -1, "aux.grad", 1);
        dm_sb_unref(b, gs);
        gs = down;
    }
    /* CatBackward: each router logits' grad a slice of it */
    for (int32_t r = 0; r < g->n_router; r++)
        if (b->train->rg[g->router[r]]) {
            dm_sb_ref(b, gs, 1);
            dm_deliver(b, g->router[r], gs, false);
        }
    dm_sb_unref(b, gs);
}

/* The loss and its backward, which hands the outputs their grads. The loss
 * reads output 0, or every output that requires grad (loss_all_outputs: the
 * terms are added, e.g. a main and an auxiliary head).
 * ce: F.cross_entropy(output, target) = log_softmax (kept by
 * NllLossBackward0), nll_loss and a total_weight scalar; mse:
 * F.mse_loss(output, target) (MseLossBackward0 keeps both); sum: .sum(),
 * whose grad is an expansion of the scalar grad (a view). */
/* --pp, a stage before the last (src/estimate/pipeline.c, P3): no loss;
 * the backward starts from each output's grad, received into micro-batch
 * j's buffer (src/schedule/schedule.c, pp_setup). */
static void pp_received_grads(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    dm_sb_step(b, DM_PHASE_BACKWARD, -1);
    for (int32_t k = g->n_outputs - 1; k >= 0; k--) {
        int32_t x = g->outputs[k];
        int32_t buf = b->pp_buf[(size_t)x * (size_t)b->run->par.micro + (size_t)b->pp_micro];
        if (!tr->rg[x] || buf < 0)
            continue;
        dm_sb_ref(b, buf, 1);
        dm_deliver(b, x, buf, false);
    }
}

void dm_train_loss(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    if (b->run->par.pp > 1 && b->run->par.stage < b->run->par.pp - 1) {
        pp_received_grads(b);
        return;
    }
    int32_t n_out = b->run->loss_all_outputs || b->run->loss == DNNMEM_LOSS_SUM ? g->n_outputs : 1;
    /* a head's own loss over several outputs (ForQuestionAnswering's start
     * and end logits), then divided by their count: one more scalar */
    bool mean = b->run->loss == DNNMEM_LOSS_CE && !b->run->loss_all_outputs && g->loss_terms > 1 &&
                g->loss_terms <= g->n_outputs;
    if (mean)
        n_out = g->loss_terms;
    int32_t logp[64], extra[64], self32[64];
    int32_t value = -1;
    enum dm_dtype dt = b->t[g->outputs[0]].dtype;
    dm_sb_step(b, DM_PHASE_LOSS, -1);
    if (b->s->n_steps)
        b->s->steps[b->s->n_steps - 1].loss = DM_STEP_LOSS;
    for (int32_t k = 0; k < n_out && k < 64; k++) {
        int32_t x = g->outputs[k];
        const struct dm_tinfo *o = &b->t[x];
        logp[k] = extra[k] = self32[k] = -1;
        if (!tr->rg[x])
            continue;
        if (dm_mx_loss_head(b, x)) { /* MXNet: the op is the loss (dm_mx_save) */
            tr->mx_head[g->tensors[x].producer] = true;
            continue;
        }
        if (b->run->loss == DNNMEM_LOSS_CE) {
            /* cross_entropy is on autocast's fp32 list, and transformers'
             * causal-LM loss calls logits.float() whatever the precision: an
             * fp32 copy of the logits feeds log_softmax, whose fp32 result
             * NllLossBackward keeps. Pure fp16/bf16 without either stays low. */
            uint64_t b32 = (uint64_t)o->numel * 4;
            bool upcast = b->run->amp != DM_UNDEFINED || g->loss_upcast;
            int32_t up = upcast && o->dtype != DM_FLOAT && o->dtype != DM_DOUBLE
                             ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, b32, x, -1, "autocast", 1)
                             : -1;
            logp[k] = dm_sb_alloc(b, DNNMEM_CAT_SAVED, up >= 0 ? DM_FLOAT : o->dtype,
                                  up >= 0 ? b32 : o->bytes, -1, -1, "loss.log_softmax", 1);
            if (up >= 0 && b->run->torch_version < 111) { /* LogSoftmaxBackward's self */
                self32[k] = up;
                b->s->buf[up].category = DNNMEM_CAT_SAVED;
            } else {
                dm_sb_unref(b, up);
            }
            extra[k] = dm_sb_alloc(b, DNNMEM_CAT_SAVED, o->dtype, 4, -1, -1, "loss.total_weight", 1);
        }
        int32_t part = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, o->dtype, 4, -1, -1, "loss", 1);
        if (value < 0) {
            value = part;
        } else { /* loss = loss + w * part, out of place */
            int32_t sum = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, o->dtype, 4, -1, -1, "loss", 1);
            dm_sb_unref(b, value);
            dm_sb_unref(b, part);
            value = sum;
        }
    }
    if (mean && value >= 0) {
        int32_t q = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, 4, -1, -1, "loss", 1);
        dm_sb_unref(b, value);
        value = q;
    }
    struct aux aux;
    aux_forward(b, &aux);
    if (value >= 0)
        tr->held[tr->n_held++] = value;
    /* a traced step: once the loss is made, nothing outside holds the
     * outputs (MSE's backward reads them: released after it) */
    if (b->run->dataflow && b->run->loss != DNNMEM_LOSS_MSE) {
        for (int32_t k = 0; k < tr->n_held; k++)
            dm_sb_unref(b, tr->held[k]);
        tr->n_held = 0;
    }
    /* backward from the loss: its grad is ones_like(loss) */
    dm_sb_step(b, DM_PHASE_BACKWARD, -1);
    if (b->s->n_steps)
        b->s->steps[b->s->n_steps - 1].loss = DM_STEP_LOSS_BACKWARD;
    /* MXNet's loss heads make no loss value and read no head gradient */
    int32_t gl = value >= 0 ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, dt, 4, -1, -1, "loss.grad", 1)
                            : -1;
    aux_backward(b, &aux);
    for (int32_t k = n_out - 1; k >= 0; k--) {
        int32_t x = g->outputs[k];
        const struct dm_tinfo *o = &b->t[x];
        if (k >= 64 || !tr->rg[x] || dm_mx_loss_head(b, x))
            continue;
        switch (b->run->loss) {
        case DNNMEM_LOSS_CE: {
            /* copied: dm_sb_alloc may move the buffer array */
            const enum dm_dtype lp_dtype = (enum dm_dtype)b->s->buf[logp[k]].dtype;
            const uint64_t lp_bytes = b->s->buf[logp[k]].bytes;
            int32_t gnll = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, lp_dtype, lp_bytes, -1, -1,
                                       "loss.nll_grad", 1);
            dm_sb_unref(b, extra[k]);
            int32_t gx = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, lp_dtype, lp_bytes, x, -1, "grad", 1);
            dm_sb_unref(b, gnll);
            dm_sb_unref(b, logp[k]);
            dm_sb_unref(b, self32[k]);
            if (lp_bytes != o->bytes) { /* back to the logits' type */
                int32_t down = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, o->dtype, o->bytes, x, -1,
                                           "grad", 1);
                dm_sb_unref(b, gx);
                gx = down;
            }
            dm_deliver(b, x, gx, false);
            break;
        }
        case DNNMEM_LOSS_MSE:
            dm_deliver(b, x, dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, o->dtype, o->bytes, x, -1, "grad", 1),
                    false);
            break;
        case DNNMEM_LOSS_SUM: /* SumBackward0 expands the scalar grad: a view */
            dm_sb_ref(b, gl, 1);
            dm_deliver(b, x, gl, false);
            break;
        }
    }
    dm_sb_unref(b, gl);
}
