/*
 * optimizer.c: the optimizer's state and step (--optimizer), and zero_grad.
 */
#include "train/train.h"

#include <stdlib.h>

/* ---- the optimizer --------------------------------------------------------------- */

static bool is_adam(enum dnnmem_optimizer o)
{
    return o == DNNMEM_OPT_ADAM || o == DNNMEM_OPT_ADAMW || o == DNNMEM_OPT_ADAMW_HF ||
           o == DNNMEM_OPT_ADAMW_FUSED;
}

/* Parameter-sized state buffers of torch.optim's optimizers (Adafactor and
 * Adam8bit shape theirs: state_bytes). */
static int state_count(enum dnnmem_optimizer o)
{
    switch (o) {
    case DNNMEM_OPT_SGD_MOMENTUM: return 1; /* momentum_buffer, a clone of the grad */
    case DNNMEM_OPT_ADAM:
    case DNNMEM_OPT_ADAMW:
    case DNNMEM_OPT_ADAMW_HF:
    case DNNMEM_OPT_ADAMW_FUSED: return 2;  /* exp_avg, exp_avg_sq (zeros_like) */
    case DNNMEM_OPT_RMSPROP: return 1;      /* square_avg */
    case DNNMEM_OPT_ADAGRAD: return 1;      /* sum */
    case DNNMEM_OPT_SGD:
    case DNNMEM_OPT_NONE:
    case DNNMEM_OPT_ADAFACTOR:
    case DNNMEM_OPT_ADAM8BIT: return 0;
    }
    return 0;
}

/* bitsandbytes' blockwise 8-bit state (bitsandbytes/optim/optimizer.py,
 * Optimizer2State.init_state, 0.35-0.41): a tensor of >= min_8bit_size
 * (4096) elements gets state1 and state2 as uint8 zeros_like(p) and an fp32
 * absmax per block of 2048 elements for each; a smaller one fp32 states. */
#define BNB_MIN_8BIT 4096
#define BNB_BLOCK 2048

/* Adafactor's state (transformers/optimization.py, Adafactor._get_options
 * and step): a tensor of rank >= 2 keeps exp_avg_sq_row, its shape without
 * the last dim, and exp_avg_sq_col, without the second-to-last; a vector a
 * full exp_avg_sq; in the grad's dtype. */
static void adafactor_state(struct dm_sb *b, int32_t x)
{
    const struct dm_tinfo *tx = &b->t[x];
    enum dm_dtype dt = tx->dtype;
    uint64_t bytes;
    if (tx->rank < 2 || tx->dims[tx->rank - 1] == 0 || tx->dims[tx->rank - 2] == 0) {
        dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, dt, tx->bytes, x, -1, "exp_avg_sq", 1);
        return;
    }
    int64_t last = tx->dims[tx->rank - 1], second = tx->dims[tx->rank - 2];
    if (dm_dtype_bytes(dt, tx->numel / last, &bytes))
        dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, dt, bytes, x, -1, "exp_avg_sq_row", 1);
    if (dm_dtype_bytes(dt, tx->numel / second, &bytes))
        dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, dt, bytes, x, -1, "exp_avg_sq_col", 1);
}

static void adam8bit_state(struct dm_sb *b, int32_t x)
{
    const struct dm_tinfo *tx = &b->t[x];
    uint64_t bytes;
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "state2" : "state1";
        if (tx->numel < BNB_MIN_8BIT) {
            if (dm_dtype_bytes(DM_FLOAT, tx->numel, &bytes))
                dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, bytes, x, -1, name, 1);
            continue;
        }
        dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_UINT8, (uint64_t)tx->numel, x, -1, name, 1);
        int64_t blocks = tx->numel / BNB_BLOCK + (tx->numel % BNB_BLOCK > 0);
        if (dm_dtype_bytes(DM_FLOAT, blocks, &bytes))
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, bytes, x, -1,
                        k ? "absmax2" : "absmax1", 1);
    }
}

/* Optimizer state, one set per parameter that has a grad: created at the
 * first step (torch/optim: lazily in step()), except Adagrad's `sum`, which
 * its constructor makes for every parameter, and Keras' under tf.function,
 * built before the first step (src/train/train.c). */
void dm_optimizer_state(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    enum dnnmem_optimizer opt = b->run->optimizer;
    int nstate = state_count(opt);
    bool adam = is_adam(opt);
    /* bitsandbytes' quantization maps, one per optimizer: "dynamic" and
     * "udynamic", 256 fp32 values each (create_dynamic_map) */
    if (opt == DNNMEM_OPT_ADAM8BIT)
        for (int k = 0; k < 2; k++)
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, 256 * 4, -1, -1,
                        k ? "qmap_udynamic" : "qmap_dynamic", 1);
    /* Adam's and Adagrad's `step` is a 0-dim fp32 tensor on the CPU unless
     * capturable or fused (torch/optim/adam.py): host memory, so it counts
     * only when the device is the CPU. Fused, it is on the parameter's
     * device, made before exp_avg (_init_group: torch.zeros((), device=
     * p.device) when fused) */
    bool step_scalar = (opt == DNNMEM_OPT_ADAM || opt == DNNMEM_OPT_ADAMW ||
                        opt == DNNMEM_OPT_ADAGRAD) && !b->run->cuda;
    bool step_first = opt == DNNMEM_OPT_ADAMW_FUSED;
    if (dm_par_zero(b)) { /* ZeRO: the state of the flat fp32 partition (parallel.c, Z1) */
        uint64_t flat = dm_par_flat_bytes(b);
        for (int k = 0; flat && k < nstate; k++)
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, flat, -1, -1,
                        adam ? (k ? "exp_avg_sq (partition)" : "exp_avg (partition)")
                             : "state (partition)", 1);
        return;
    }
    for (int32_t x = 0; x < g->n_tensors; x++) {
        /* made up front (Adagrad, Keras' fit), it is every trainable weight's */
        bool every = opt == DNNMEM_OPT_ADAGRAD || b->run->tf_graph;
        if (!tr->param[x] || (tr->param_grad[x] < 0 && !every))
            continue;
        if (opt == DNNMEM_OPT_ADAFACTOR)
            adafactor_state(b, x);
        if (opt == DNNMEM_OPT_ADAM8BIT)
            adam8bit_state(b, x);
        if (step_first)
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, 4, x, -1, "step", 1);
        for (int k = 0; k < nstate; k++) {
            const char *what = opt == DNNMEM_OPT_SGD_MOMENTUM ? "momentum_buffer"
                               : adam                         ? (k ? "exp_avg_sq" : "exp_avg")
                               : opt == DNNMEM_OPT_RMSPROP    ? "square_avg"
                                                              : "sum";
            /* Keras 3 on TF makes a slot as a variable of zeros (tfbuild.c) */
            int32_t sb = b->run->tf_build
                             ? dm_sb_tf_fill_variable(b, DNNMEM_CAT_OPTIMIZER, t[x].dtype,
                                                      dm_par_local_bytes(b, x), x, what)
                             : dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, t[x].dtype,
                                           dm_par_local_bytes(b, x), x, -1, what, 1);
            if (opt == DNNMEM_OPT_SGD_MOMENTUM)
                dm_tf_fit_state(b, x, sb);
            if (opt == DNNMEM_OPT_SGD_MOMENTUM && tr->tf_m)
                tr->tf_m[x] = sb;
        }
        if (step_scalar)
            dm_sb_alloc(b, DNNMEM_CAT_OPTIMIZER, DM_FLOAT, 4, x, -1, "step", 1);
    }
}

/* Keras 3's SGD on TF (keras/src/optimizers/sgd.py update_step, one variable
 * at a time): with momentum, assign(m, subtract(multiply(m, momentum),
 * multiply(gradient, lr))) then assign_add(variable, m); without,
 * assign_sub(variable, multiply(gradient, lr)). Eagerly the two products
 * and their difference are three param-sized tensors live at once (the
 * products are the subtract's arguments, freed when it returns; m's
 * variable takes the difference, its old buffer freed). Measured (TF 2.21,
 * Keras 3.15, tf_measure.py trace rand4-tape-b4): at the step's peak the
 * [16384,64] kernel's grad, both Mul outputs and the Sub's. Eager only:
 * under tf.function the executor frees each grad after its last use and
 * Sub may forward into a product's buffer, neither modelled here (with
 * the eager rule the fit rows of fashion_mnist_mlp and rand4 came out
 * +32% and +12% over), so the graph keeps PyTorch's rule (none). */
static void keras_sgd_temps(struct dm_sb *b, int32_t x, uint64_t pb)
{
    if (b->run->optimizer == DNNMEM_OPT_SGD) {
        dm_sb_unref(b, dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, pb, x, -1,
                                   "gradient * lr", 1));
        return;
    }
    int32_t mm = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, pb, x, -1, "m * momentum", 1);
    int32_t gl = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, pb, x, -1, "gradient * lr", 1);
    int32_t d = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, b->t[x].dtype, pb, x, -1,
                            "m * momentum - gradient * lr", 1);
    /* the subtract returns: its arguments go, m * momentum first; then
     * AssignVariableOp gives m the difference's buffer and frees m's old one
     * (measured: trace of mlp3-1024-tape-b64 from process start, each
     * variable's Mul, Mul, Sub, two frees of the Muls, the old slot's free
     * under AssignVariableOp) */
    dm_sb_unref(b, mm);
    dm_sb_unref(b, gl);
    int32_t *m = b->train->tf_m ? &b->train->tf_m[x] : NULL;
    if (m && *m >= 0) {
        dm_sb_unref(b, *m);
        *m = d;
        b->s->buf[d].category = DNNMEM_CAT_OPTIMIZER;
        b->s->buf[d].what = "momentum";
    } else {
        dm_sb_unref(b, d);
    }
}

void dm_optimizer_step(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    const struct dm_tinfo *t = b->t;
    enum dnnmem_optimizer opt = b->run->optimizer;
    if (opt == DNNMEM_OPT_NONE)
        return;
    dm_sb_step(b, DM_PHASE_OPTIMIZER, -1);
    bool adam = opt == DNNMEM_OPT_ADAM || opt == DNNMEM_OPT_ADAMW;
    if (!tr->state_made) {
        dm_optimizer_state(b);
        tr->state_made = true;
    }
    /* The update's param-sized temporaries (torch/optim/adam.py, rmsprop.py,
     * adagrad.py; defaults: no weight decay, no amsgrad, not centered): Adam
     * divides sqrt(exp_avg_sq)
     * by the bias correction out of place, so the for-loop implementation
     * holds two (the first is freed as the second is made); RMSprop's
     * square_avg.sqrt() and Adagrad's state_sum.sqrt() are one each, the rest
     * updates in place; SGD has none. The for-loop implementation (1.13, and
     * the CPU) makes them one parameter at a time; the foreach one (CUDA from
     * 2.0) makes the sqrt of every parameter at once and frees them after.
     * transformers' AdamW adds eps to the sqrt in place: one temporary.
     * Adafactor, per parameter: update = grad**2 + eps (two made, the first
     * freed), the factored estimate (or exp_avg_sq.rsqrt()) replacing it,
     * then p.add_(-update): never more than two live. Adam8bit: one fused
     * kernel per parameter, no temporaries. Fused AdamW: _foreach_add_ on
     * the steps, then torch._fused_adamw_ updates every tensor in place
     * (adam.py, _fused_adam): none. */
    if (b->run->tf_ops && !b->run->tf_graph &&
        (opt == DNNMEM_OPT_SGD_MOMENTUM || opt == DNNMEM_OPT_SGD) && !dm_par_zero(b)) {
        for (int32_t x = 0; x < g->n_tensors; x++)
            if (tr->param[x] && tr->param_grad[x] >= 0)
                keras_sgd_temps(b, x, dm_par_local_bytes(b, x));
        return;
    }
    int temps = opt == DNNMEM_OPT_ADAMW_FUSED                              ? 0
                : adam || opt == DNNMEM_OPT_ADAFACTOR                      ? 2
                : opt == DNNMEM_OPT_RMSPROP || opt == DNNMEM_OPT_ADAGRAD ||
                          opt == DNNMEM_OPT_ADAMW_HF                       ? 1
                                                                           : 0;
    bool foreach = b->run->cuda && b->run->torch_version >= 200 &&
                   (adam || opt == DNNMEM_OPT_RMSPROP || opt == DNNMEM_OPT_ADAGRAD);
    if (dm_par_zero(b)) { /* one flat fp32 partition: its temporaries, as one parameter's */
        uint64_t flat = dm_par_flat_bytes(b);
        /* on CUDA DeepSpeed builds its FusedAdam for an "Adam"/"AdamW" config
         * (deepspeed/runtime/engine.py, _configure_basic_optimizer), which
         * updates in place through multi_tensor_apply: no temporaries */
        if (b->run->cuda && is_adam(opt))
            temps = 0;
        int32_t sq = flat && temps ? dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, flat, -1, -1,
                                                 "sqrt (partition)", 1) : -1;
        for (int k = 1; sq >= 0 && k < temps; k++) { /* each made before the last is freed */
            int32_t next = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, DM_FLOAT, flat, -1, -1,
                                       "denom (partition)", 1);
            dm_sb_unref(b, sq);
            sq = next;
        }
        if (sq >= 0)
            dm_sb_unref(b, sq);
        dm_par_step_end(b);
        return;
    }
    int32_t *batch = NULL, n_batch = 0;
    if (foreach && temps)
        batch = malloc(((size_t)g->n_tensors + 1) * sizeof *batch);
    /* The for-loop implementation's last temporary is a local of the loop
     * (Adam's `denom`, RMSprop's `avg`, Adagrad's `std`: torch/optim/adam.py
     * _single_tensor_adam, rmsprop.py, adagrad.py, 2.14.1 and 1.13.0 alike),
     * so a parameter's stays live until the next parameter's is made and the
     * name rebound, and the last one's until the function returns. Measured
     * (profiler, CPU, torch 2.14.1 and 1.13.0; params of 4096, 1024, 256
     * floats): Adam allocates sqrt, denom, frees sqrt and only then the
     * previous denom; RMSprop and Adagrad allocate the next one, then free
     * the previous. */
    bool held_local = !foreach && (adam || opt == DNNMEM_OPT_RMSPROP || opt == DNNMEM_OPT_ADAGRAD);
    int32_t held = -1;
    for (int32_t x = 0; temps && x < g->n_tensors; x++) {
        if (!tr->param[x] || tr->param_grad[x] < 0)
            continue;
        bool af = opt == DNNMEM_OPT_ADAFACTOR;
        uint64_t pb = dm_par_local_bytes(b, x);
        int32_t sq = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, pb, x, -1,
                                 af ? "grad_sq" : "sqrt", 1);
        if (batch) {
            batch[n_batch++] = sq;
            continue;
        }
        for (int k = 1; k < (af ? 4 : temps); k++) { /* each made before the last is freed */
            static const char *const adafactor[] = {"", "update", "approx_sq_grad", "neg_update"};
            int32_t next = dm_sb_alloc(b, DNNMEM_CAT_TEMPORARY, t[x].dtype, pb, x, -1,
                                       af ? adafactor[k] : "denom", 1);
            dm_sb_unref(b, sq);
            sq = next;
        }
        if (held_local) { /* the previous parameter's, freed as the name is rebound */
            if (held >= 0)
                dm_sb_unref(b, held);
            held = sq;
        } else {
            dm_sb_unref(b, sq);
        }
    }
    if (held >= 0)
        dm_sb_unref(b, held);
    /* the foreach temporaries are one Python list (torch._foreach_sqrt's
     * result, a local of _multi_tensor_adam), freed when the function
     * returns: CPython's list_dealloc drops its items last to first, so the
     * last parameter's goes first and the first parameter's last (an H200
     * allocator trace of Llama-3.2-1B under AdamW, PyTorch 2.11: the frees
     * run down the layers and end with embed_tokens') */
    for (int32_t k = n_batch - 1; k >= 0; k--)
        dm_sb_unref(b, batch[k]);
    free(batch);
}

void dm_train_zero_grad(struct dm_sb *b)
{
    struct dm_train *tr = b->train;
    /* zero_grad(set_to_none): False in 1.13 (grads zeroed in place, kept),
     * True from 2.0 (grads freed) (torch/optim/optimizer.py). */
    if (b->run->torch_version < 200)
        return;
    dm_sb_step(b, DM_PHASE_ZERO_GRAD, -1);
    for (int32_t x = 0; x < b->g->n_tensors; x++)
        if (tr->param_grad[x] >= 0) {
            dm_sb_unref(b, tr->param_grad[x]);
            tr->param_grad[x] = -1;
        }
    if (b->par)
        dm_par_zero_grad(b);
}
