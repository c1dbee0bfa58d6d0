/*
 * schedule.c: the framework's schedule of the step: PyTorch eager's (also
 * standing in for the others' op-by-op runs), MXNet's symbolic executor's
 * plan, XLA's buffer assignment under JAX's jit; TensorFlow's rules stated.
 */
#include "estimate.h"

/* JAX's jitted step: the dataflow schedule re-planned as XLA compiles it
 * (src/schedule/xla.c); the assumptions say what came out. */
static enum dnnmem_status xla_plan(const struct dm_graph *g, const struct dm_tinfo *t,
                                   const struct dm_run *run, const struct dnnmem_config *cfg,
                                   struct dm_schedule *sched, struct dm_assumptions *as,
                                   struct dm_xla_stats *out, struct dnnmem_error *err)
{
    struct dm_xla_opts xo = {.train = run->train, .donate = cfg->jax_donate, .alignment = 0,
                             .cpu = cfg->device == DNNMEM_DEVICE_CPU};
    struct dm_xla_stats xs;
    struct dm_schedule planned;
    DM_TRY(dm_xla_plan(g, t, sched, &xo, &planned, &xs, err));
    *out = xs;
    char b1[32], b2[32], b3[32], b4[32];
    int32_t fused = xs.fused_forward + xs.fused_backward + xs.fused_update;
    dm_assume(as, "xla_fusion", "default",
              "%d of %d values get no buffer (%d forward, %d gradients, %d in the update): a value "
              "made by an elementwise op, a broadcast or BatchNorm's normalisation whose only "
              "reader is elementwise or a reduction is fused into it (priority fusion), as are the "
              "update's temporaries; values with several readers or read by the backward, copies, "
              "softmax and layer norms are materialised",
              fused, xs.values, xs.fused_forward, xs.fused_backward, xs.fused_update);
    char parts[256] = "";
    size_t len = 0;
    for (int c = 0; c < DNNMEM_CAT_COUNT && len < sizeof parts; c++)
        if (xs.peak_bytes[c])
            len += (size_t)snprintf(parts + len, sizeof parts - len, "%s %s %s",
                                    len ? "," : "", dnnmem_category_name((enum dnnmem_category)c),
                                    dm_format_bytes(xs.peak_bytes[c], b1));
    const struct dm_step *ps = xs.peak_step >= 0 ? &sched->steps[xs.peak_step] : NULL;
    dm_assume(as, "xla_temp", "default",
              "%s per call: the heap simulator (best fit by decreasing size, the smaller of "
              "spatial %s and temporal %s; %s alignment) over %d buffers, %d values sharing a "
              "dying operand's; at most %s live at once%s%s%s%s%s",
              dm_format_bytes(xs.heap.heap_bytes, b2), dm_format_bytes(xs.heap.spatial_bytes, b3),
              dm_format_bytes(xs.heap.temporal_bytes, b4), xo.cpu ? "64 B, the CPU's" : "128 B",
              xs.heap_values, xs.shared,
              dm_format_bytes(xs.live_peak, b1), ps ? " (" : "",
              ps ? dm_phase_name((enum dm_phase)ps->phase) : "",
              ps && ps->node >= 0 ? dm_arena_printf(as->arena, " '%s'", g->nodes[ps->node].name) : "",
              ps ? "):" : "", parts);
    if (xo.cpu)
        dm_assume(as, "xla_cpu", "default",
                  "XLA's CPU backend: no cuBLAS or cuDNN workspaces; %d parameter copies made at "
                  "the step's start (%s): float32 conversions of bfloat16/float16 matmul and "
                  "convolution weights, and with donation the weights an input gradient reads "
                  "(copy insertion); ReLU's backward reads its input (jax.nn.relu's JVP); "
                  "convolutions run NHWC and max pooling keeps its argmax: %d layout values "
                  "(%s: weight transposes, pooling iotas, indices and zeros; float32-measured, "
                  "bfloat16's not modelled)",
                  xs.copies, dm_format_bytes(xs.copy_bytes, b1), xs.layouts,
                  dm_format_bytes(xs.layout_bytes, b2));
    if (run->train)
        dm_assume(as, "jax_donation", cfg->jax_donate ? "default" : "option",
                  "%s; the entry parameters (weights, batch, optimizer state from optax's init: %s) "
                  "are made before the first call",
                  cfg->jax_donate
                      ? "parameters and optimizer state donated (donate_argnums, the usual train "
                        "step): the updated ones reuse their buffers"
                      : dm_arena_printf(as->arena,
                                        "none (--jax-donate false): each call's new parameters and "
                                        "optimizer state are %d new buffers (%s), the old ones freed "
                                        "after it",
                                        xs.outputs, dm_format_bytes(xs.output_bytes, b1)),
                  dm_format_bytes(xs.entry_bytes, b2));
    else
        dm_assume(as, "xla_outputs", "default",
                  "%d live-out buffers (%s) per call, outside the temp buffer, held by the caller; "
                  "the weights and the batch (%s) are entry parameters",
                  xs.outputs, dm_format_bytes(xs.output_bytes, b1),
                  dm_format_bytes(xs.entry_bytes, b2));
    dm_schedule_free(sched);
    *sched = planned;
    return DNNMEM_OK;
}

enum dnnmem_status dm_est_schedule(struct dm_est *e, struct dnnmem_error *err)
{
    const struct dm_est_opts *o = e->o;
    const struct dnnmem_config *c = &o->cfg;
    if (e->run.train && e->run.par.pp > 1)
        DM_TRY(dm_est_stage(e, err));
    const struct dm_graph *g = e->g;
    struct dm_tinfo *t = e->t;
    struct dm_run *run = &e->run;
    struct dm_assumptions *as = &e->as;
    if (o->tf_graph && run->cuda)
        run->tf_nhwc = dm_tf_layout_nhwc(g, t, run);
    if (c->framework == DNNMEM_FW_TENSORFLOW)
        dm_assume(as, "tf_ops", "default", "%s",
                  o->tf_graph
                      ? dm_arena_printf(
                            as->arena,
                            "graph rules: elementwise kernels write into a dying input's buffer "
                            "(forward_input_or_allocate_output), activation, Sub, Mul, Div and Clip "
                            "grads into a dying incoming grad's or kept operand's; Dropout keeps a "
                            "float mask only; fused LayerNorm keeps no normalized * gamma; %s%s%s; "
                            "not modelled: its boundary transposes, memory optimizer swapping",
                            run->cuda ? "the layout optimizer runs the GPU graph "
                                      : "the CPU graph stays NHWC (the layout optimizer "
                                        "converts GPU graphs only), its kernels NHWC",
                            !run->cuda ? "" : run->tf_nhwc ? "NHWC" : "NCHW",
                            !run->cuda ? ""
                            : run->tf_nhwc
                                ? " (fp16/bf16 convolutions): fused BatchNorm transposes in training"
                                : ": fused BatchNorm needs no transposes")
                      : "eager GradientTape rules: each op keeps the inputs and outputs its "
                        "TF gradient reads (src/train/tf_tape.def: AddV2 and ConcatV2 keep "
                        "their inputs, MaxPool its output, Dropout x, x * scale and a float "
                        "mask; PyTorch's rule for ops without a row); "
                        "Keras 2's fused BatchNorm on NHWC data transposes to NCHW (2 "
                        "input-sized temporaries forward, 3 backward); Keras 2's fused "
                        "LayerNorm keeps its normalized outputs; op chains, oneDNN "
                        "(tf_eager.def); no tf.function/Grappler");
    DM_TRY(dm_est_check(DM_CHECK_SCHEDULE, g, o, err));
    /* the allocators dm_est_replay will replay the schedule through */
    uint64_t cap = c->capacity_bytes > 0 ? (uint64_t)c->capacity_bytes : 0;
    run->fp = (struct dm_fp_opts){
        .on = c->accum_fixed_point && run->train && !o->other_fw && !o->mx_planned &&
              !c->timeline && !c->events,
        .caching = run->cuda && c->alloc_round_bytes < 0, .round = e->round,
        .capped = run->cuda && cap > e->context ? cap - e->context : 0};
    enum dnnmem_status s = dm_schedule_build(g, t, run, &e->sched, err);
    if (s != DNNMEM_OK && e->sched.refusal.kind != DM_REFUSE_NONE)
        s = dm_est_check_built(g, o, &e->sched.refusal, err);
    DM_TRY(s);
    if (o->mx_planned) {
        struct dm_schedule planned;
        struct dm_mxplan_stats ps;
        DM_TRY(dm_mxnet_plan(g, &e->sched, 0, &planned, &ps, err));
        dm_schedule_free(&e->sched);
        e->sched = planned;
        char pb[32];
        dm_assume(as, "schedule", "default",
                  "MXNet symbolic executor (Module.bind): nnvm's PlanMemory over one %s: %d "
                  "entries into %d storages (%s; free list by size, match range 16; %d in "
                  "place), each allocated once and kept",
                  run->train ? "forward + backward" : "forward", ps.entries, ps.storages,
                  dm_format_bytes(ps.storage_bytes, pb), ps.inplace);
        if (!run->cuda) {
            uint64_t cb = 0;
            char b1[32];
            DM_TRY(dm_mxnet_module_copies(g, t, &e->sched, &cb, err));
            dm_assume(as, "module_params", "default",
                      "%s: Module.bind's own zeros copy of the parameters and auxiliary states "
                      "(_arg_params, _aux_params; module.py) on the default context, the CPU: "
                      "the executor's memory with --device cpu (host memory beside a GPU)",
                      dm_format_bytes(cb, b1));
            DM_TRY(dm_mxnet_cpu_temp(g, t, &e->sched, &cb, err));
            dm_assume(as, "temp_space", "default",
                      "%s: the executor's one kTempSpace, grown to the largest im2col column "
                      "buffer of MXNet's own CPU Convolution (C_in x kernel x output spatial; "
                      "convolution-inl.h) and kept; the oneDNN kernels' scratch and fused weight "
                      "copies (MXNET_MKLDNN_ENABLED=1, the pip build's default) are not modelled",
                      dm_format_bytes(cb, b1));
        }
        if (run->train)
            dm_assume(as, "executor_arrays", "default",
                      "weights, inputs and gradients (grad_req write) bound once before the first "
                      "op; optimizer state made at the first update and kept; fused optimizer "
                      "updates, no temporaries");
        dm_assume(as, "entry_lifetimes", "default",
                  "which entries exist and when their last reader runs: the op order of the "
                  "eager schedule, with what each op's backward reads from MXNet %d.%d's "
                  "FGradient registrations (mx_ops); --mxnet-executor naive: the eager schedule",
                  run->mx_version / 100, run->mx_version % 100);
    }
    if (o->jax_jit)
        DM_TRY(xla_plan(g, t, run, c, &e->sched, as, &e->xla, err));
    /* CUDA: the caching allocator with PyTorch's defaults (or a plain
     * rounding when the user overrides the rounding); CPU: exact sizes */
    return DNNMEM_OK;
}
