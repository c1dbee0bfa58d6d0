#!/usr/bin/env python3
"""Per-rank CPU ground truth for multi-process training: torch.distributed over gloo.

    python3 -m venv /tmp/venv-dist
    /tmp/venv-dist/bin/pip install torch==2.13.0 numpy onnx deepspeed
    nice -n 10 /tmp/venv-dist/bin/python tools/oracle/dist_measure.py measure [--only SUBSTR ...]
    nice -n 10 /tmp/venv-dist/bin/python tools/oracle/dist_measure.py trace ID [--rank R]
    python3 tools/oracle/dist_measure.py compare [--dnnmem build/dnnmem] [-v]

`measure` runs every configuration of configs() as one process group: `world` ranks, each a
process forked from this one (which imported torch but ran no op, so every rank starts with
the allocator and the profiler untouched), gloo over 127.0.0.1, one thread per rank; the
group is killed after --timeout seconds.  Each rank appends one JSON row to
tests/validation/dist-cpu.jsonl; configurations already there are skipped (resumable), and
failures go to build/dist/failed.jsonl (skipped too, unless --retry-failed).

What a row's figures are (per rank; docs/parallel-measured.md):
  * setup_bytes_before: a gc scan of the live CPU tensors just before the build (0);
  * the run, inside one torch.profiler.profile(activities=[CPU], profile_memory=True): the
    model's build (torch.manual_seed(0): every rank starts from the same weights; the data
    after manual_seed(1 + rank)), the strategy's setup (DDP(...), fully_shard,
    parallelize_module, the pipeline stage, deepspeed.initialize) and the optimizer, in
    the ranges "setup/build" and "setup"; then two iterations of opt.zero_grad()
    (set_to_none) -> forward -> loss (F.cross_entropy, mean) -> backward -> opt.step();
  * peak_bytes, bytes_before (after setup), end_bytes, setup_peak_bytes: from
    tools/oracle/memhook.c, LD_PRELOAD'ed (main() re-executes itself with it): the requested
    bytes of c10's CPU allocator on every thread.  The profiler's own figures are kept
    (profiler_*): they equal the hook's on every row without a collective, and run high
    under gloo, whose worker thread frees tensors without a profiler event;
  * live_at_peak_top: the largest blocks live at the hook's peak, named by the profiler's
    allocation events (same address and size); `trace` writes all of them to
    build/dist/traces/ID-rR.txt.peak, and every allocation event to ID-rR.txt;
  * gloo's own buffers (inside gloo, its transport) are not c10 allocations: in no row.
`compare` needs no torch: it runs `dnnmem estimate` with the row's strategy as options and
skips the rows whose options dnnmem refuses (exit 2 or 4); --check exits 1 on a miss beyond
2% not listed in --misses.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
OUT = os.path.join(ROOT, "tests", "validation", "dist-cpu.jsonl")
WORK = os.path.join(ROOT, "build", "dist")
GRAPHS = os.path.join("tests", "models", "dist")
ITERS = 2
SGD_LR, SGD_MOMENTUM, ADAM_LR = 0.01, 0.9, 1e-3
BAR = 2.0

# Models: name -> (kind, arguments).  "mlp": residual blocks x + fc2(relu(fc1(x))) on
# [B, dim] and a head Linear(dim, classes); "tfm": pre-LN transformer blocks on [B, seq,
# dim] (separate q, k, v, o Linears so tensor parallel can split them; F.sdpa), mean over the
# sequence, head Linear(dim, classes); "cnn": a stem conv, residual blocks of conv-BN-ReLU-conv-BN
# at one width, global average pooling and a head (BatchNorm's buffers and running stats, which
# DDP broadcasts and FSDP2 does not shard).
MODELS = {
    "mlp4": ("mlp", dict(dim=1024, hidden=2048, blocks=4, classes=1000)),
    "mlp8s": ("mlp", dict(dim=512, hidden=1536, blocks=8, classes=100)),
    "tfm4": ("tfm", dict(dim=512, heads=8, hidden=2048, blocks=4, seq=64, classes=100)),
    # out of sample for --sp (seqpar): other sizes, and dropout (p 0.1) on each branch's output
    # before the residual add, inside the sequence-parallel region
    "tfm2d": ("tfm", dict(dim=256, heads=4, hidden=1024, blocks=2, seq=128, classes=10, drop=0.1)),
    "cnn4": ("cnn", dict(width=64, blocks=4, image=64, classes=100)),
}


def cfg_id(c):
    ps = "".join(f"-{k}{'' if v is True else v}" for k, v in sorted(c["params"].items())
                 if v is not False and v is not None)
    return (f"{c['model']}-{c['strategy']}{ps}-w{c['world']}-b{c['batch']}-"
            f"{'sgd' if c['optimizer'] == 'sgd-momentum' else c['optimizer']}")


def configs():
    out = []

    def add(model, strategy, world, batch=4, optimizer="adam", **params):
        c = dict(model=model, strategy=strategy, params=params, world=world, batch=batch,
                 optimizer=optimizer, dtype="float32", graph=f"{GRAPHS}/{model}.onnx")
        c["id"] = cfg_id(c)
        out.append(c)

    for w in (2, 4):  # sequence parallel out of sample (seqpar): tfm2d, at batch 8
        add("tfm2d", "tp", w, 8, "adam", sp=True)
        add("tfm2d", "tp", w, 8, "sgd-momentum", sp=True)
        add("tfm2d", "tp", w, 8, "adam")
    for m in ("mlp4", "tfm4", "cnn4", "mlp8s"):
        b = 4
        add(m, "single", 1, b, "adam")
        add(m, "single", 1, b, "sgd-momentum")
        for w in (2, 4):
            add(m, "ddp", w, b, "adam")
            add(m, "ddp", w, b, "sgd-momentum")
            add(m, "ddp", w, b, "adam", gradient_as_bucket_view=True)
            add(m, "ddp", w, b, "adam", bucket_cap_mb=5)
            add(m, "ddp", w, b, "adam", bucket_cap_mb=100)
            add(m, "fsdp2", w, b, "adam", reshard_after_forward=True)
            add(m, "fsdp2", w, b, "adam", reshard_after_forward=False)
            add(m, "fsdp2", w, b, "sgd-momentum", reshard_after_forward=True)
            if m != "cnn4":  # tensor and pipeline parallel on the Linear models
                add(m, "tp", w, b, "adam")
                add(m, "tp", w, b, "sgd-momentum")
                if m == "tfm4":  # sequence parallel on the norms (tensor parallel's SP)
                    add(m, "tp", w, b, "adam", sp=True)
                    add(m, "tp", w, b, "sgd-momentum", sp=True)
                    # batch 32: the activations, which SP splits, outweigh the parameters
                    add(m, "tp", w, 32, "adam", sp=True)
                    add(m, "tp", w, 32, "adam")
                add(m, "pp", w, b, "adam", schedule="gpipe", microbatches=4)
                add(m, "pp", w, b, "adam", schedule="1f1b", microbatches=4)
        for w in (2, 4):
            for z in (1, 2, 3):
                # DeepSpeed's default reduce bucket (5e8 elements: a 2 GB fp32 IPG buffer,
                # larger than these models), then 2**20 elements, with ZeRO-3's prefetch
                # bucket and persistence threshold lowered so that they act
                add(m, "deepspeed", w, b, "adam", zero=z)
                add(m, "deepspeed", w, b, "adam", zero=z, reduce_bucket_size=2 ** 20,
                    **({"prefetch_bucket_size": 2 ** 20, "param_persistence_threshold": 2 ** 12}
                       if z == 3 else {}))
    return out


# --------------------------------------------------------------------------
# Models (in the ranks; torch imported there)
# --------------------------------------------------------------------------


def build_model(name):
    import torch
    from torch import nn
    import torch.nn.functional as F
    kind, a = MODELS[name]
    torch.manual_seed(0)

    if kind == "mlp":
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(a["dim"], a["hidden"])
                self.fc2 = nn.Linear(a["hidden"], a["dim"])

            def forward(self, x):
                return x + self.fc2(F.relu(self.fc1(x)))

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList(Block() for _ in range(a["blocks"]))
                self.head = nn.Linear(a["dim"], a["classes"])

            def forward(self, x):
                for b in self.blocks:
                    x = b(x)
                return self.head(x)
        return Net(), a["classes"], (a["dim"],)

    if kind == "tfm":
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                d = a["dim"]
                self.ln1 = nn.LayerNorm(d)
                self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
                self.ln2 = nn.LayerNorm(d)
                self.fc1 = nn.Linear(d, a["hidden"])
                self.fc2 = nn.Linear(a["hidden"], d)
                self.drop = nn.Dropout(a.get("drop", 0.0))

            seq_ranks = 1  # sequence parallel: x holds S / seq_ranks of the sequence

            def forward(self, x):
                B, S, _ = x.shape
                if self.seq_ranks != 1:  # the gathered sequence, which q, k, v see whole
                    S = S * self.seq_ranks
                h = self.ln1(x)
                # -1 heads: under tensor parallel each rank holds heads / tp of them
                q = self.q(h).view(B, S, -1, a["dim"] // a["heads"]).transpose(1, 2)
                k = self.k(h).view(B, S, -1, a["dim"] // a["heads"]).transpose(1, 2)
                v = self.v(h).view(B, S, -1, a["dim"] // a["heads"]).transpose(1, 2)
                y = F.scaled_dot_product_attention(q, k, v)
                o = self.o(y.transpose(1, 2).reshape(B, S, -1))
                if a.get("drop"):  # tfm4 has none: its graph stays as exported
                    o = self.drop(o)
                x = x + o
                m = self.fc2(F.gelu(self.fc1(self.ln2(x))))
                return x + (self.drop(m) if a.get("drop") else m)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList(Block() for _ in range(a["blocks"]))
                self.head = nn.Linear(a["dim"], a["classes"])

            def forward(self, x):
                for b in self.blocks:
                    x = b(x)
                return self.head(x.mean(dim=1))
        return Net(), a["classes"], (a["seq"], a["dim"])

    class CBlock(nn.Module):
        def __init__(self):
            super().__init__()
            w = a["width"]
            self.conv1 = nn.Conv2d(w, w, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(w)
            self.conv2 = nn.Conv2d(w, w, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(w)

        def forward(self, x):
            return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))

    class CNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, a["width"], 3, padding=1)
            self.blocks = nn.ModuleList(CBlock() for _ in range(a["blocks"]))
            self.head = nn.Linear(a["width"], a["classes"])

        def forward(self, x):
            x = F.relu(self.stem(x))
            for b in self.blocks:
                x = b(x)
            return self.head(x.mean(dim=(2, 3)))
    return CNet(), a["classes"], (3, a["image"], a["image"])


def block_modules(model):
    """The repeated blocks FSDP2 wraps one by one: the ModuleList's."""
    return list(model.blocks)


def export_graph(name, path):
    import io
    import warnings

    import onnx
    import torch
    model, _, shape = build_model(name)
    model.train()
    dyn = {"input": {0: "batch"}, "output": {0: "batch"}}
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, *shape),), buf, dynamo=False,
                          export_params=True, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=14,
                          input_names=["input"], output_names=["output"], dynamic_axes=dyn)
    m = onnx.load_from_string(buf.getvalue())
    # graph only, as tools/export_fixtures.py's strip_initializers: every initializer
    # EXTERNAL in a file that is not shipped, its bytes dropped
    location, offset = os.path.basename(path)[:-5] + ".weights", 0
    for t in m.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        length = n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        t.ClearField("raw_data")
        for f in ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                  "uint64_data"):
            t.ClearField(f)
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        t.data_location = onnx.TensorProto.EXTERNAL
        offset += length
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(m.SerializeToString())
    os.replace(path + ".tmp", path)


# --------------------------------------------------------------------------
# Strategies (in the ranks)
# --------------------------------------------------------------------------


def make_optimizer(name, params):
    import torch
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=SGD_LR, momentum=SGD_MOMENTUM)
    return torch.optim.Adam(params, lr=ADAM_LR)


def ds_config(cfg):
    p = cfg["params"]
    # DeepSpeed's defaults unless the configuration sets them (deepspeed/runtime/zero/config.py:
    # reduce_bucket_size and allgather_bucket_size 5e8, stage3_prefetch_bucket_size 5e7,
    # stage3_param_persistence_threshold 1e5, overlap_comm True for stage 3 only,
    # contiguous_gradients True); the client optimizer is torch's.
    zo = {"stage": p["zero"]}
    for k, dk in (("reduce_bucket_size", "reduce_bucket_size"),
                  ("prefetch_bucket_size", "stage3_prefetch_bucket_size"),
                  ("param_persistence_threshold", "stage3_param_persistence_threshold")):
        if k in p:
            zo[dk] = p[k]
    return {"train_micro_batch_size_per_gpu": cfg["batch"], "gradient_accumulation_steps": 1,
            "zero_optimization": zo, "zero_allow_untested_optimizer": True,
            "zero_force_ds_cpu_optimizer": False, "steps_per_print": 10 ** 9,
            "wall_clock_breakdown": False}


def setup_strategy(cfg, model, rank, world):
    """Wraps the model as the strategy does; returns (module to call, optimizer, step kind,
    extra row fields)."""
    import torch
    s, p = cfg["strategy"], cfg["params"]
    if s == "single":
        return model, make_optimizer(cfg["optimizer"], model.parameters()), "plain", {}
    if s == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        kw = {k: p[k] for k in ("bucket_cap_mb", "gradient_as_bucket_view") if k in p}
        m = DDP(model, **kw)
        return m, make_optimizer(cfg["optimizer"], m.parameters()), "plain", {}
    if s == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        raf = p["reshard_after_forward"]
        for b in block_modules(model):
            fully_shard(b, mesh=mesh, reshard_after_forward=raf)
        fully_shard(model, mesh=mesh, reshard_after_forward=raf)
        return model, make_optimizer(cfg["optimizer"], model.parameters()), "plain", {}
    if s == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        mesh = init_device_mesh("cpu", (world,))
        plan = {}
        if p.get("sp"):
            # sequence parallel (torch/distributed/tensor/parallel/style.py): the norms'
            # inputs and outputs Shard(1), their weights Replicate; each column-parallel
            # linear all-gathers its Shard(1) input, each row-parallel one reduce-scatters
            # its Partial output to Shard(1); the block's input is this rank's S / tp
            from torch.distributed.tensor import Shard
            from torch.distributed.tensor.parallel import SequenceParallel
            for i, b in enumerate(model.blocks):
                b.seq_ranks = world
                for n in ("ln1", "ln2"):
                    plan[f"blocks.{i}.{n}"] = SequenceParallel()
                for n in ("q", "k", "v", "fc1"):
                    plan[f"blocks.{i}.{n}"] = ColwiseParallel(input_layouts=Shard(1))
                for n in ("o", "fc2"):
                    plan[f"blocks.{i}.{n}"] = RowwiseParallel(output_layouts=Shard(1))
            parallelize_module(model, mesh, plan)
            return model, make_optimizer(cfg["optimizer"], model.parameters()), "plain", {
                "tp_plan": "SequenceParallel: ln1, ln2; ColwiseParallel(input_layouts=Shard(1)): "
                           "q, k, v, fc1; RowwiseParallel(output_layouts=Shard(1)): o, fc2; the "
                           "input this rank's S / tp; the head (after the mean over the local "
                           "sequence) replicated"}
        for i, b in enumerate(model.blocks):
            names = ("fc1", "fc2") if not hasattr(b, "q") else ("q", "k", "v", "o", "fc1", "fc2")
            for n in names:
                plan[f"blocks.{i}.{n}"] = RowwiseParallel() if n in ("o", "fc2") else ColwiseParallel()
        parallelize_module(model, mesh, plan)
        return model, make_optimizer(cfg["optimizer"], model.parameters()), "plain", {
            "tp_plan": "ColwiseParallel: fc1 (and q, k, v); RowwiseParallel: fc2 (and o); "
                       "the head replicated"}
    if s == "pp":
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
        from torch import nn
        import torch.nn.functional as F
        blocks = list(model.blocks)
        per = len(blocks) // world
        mine = blocks[rank * per:(rank + 1) * per]
        mods = list(mine) + ([model.head] if rank == world - 1 else [])

        class Stage(nn.Module):
            def __init__(self):
                super().__init__()
                self.mods = nn.ModuleList(mods)
                self.pool = hasattr(model.blocks[0], "q") and rank == world - 1

            def forward(self, x):
                for i, mod in enumerate(self.mods):
                    if self.pool and i == len(self.mods) - 1:
                        x = x.mean(dim=1)
                    x = mod(x)
                return x
        stage_mod = Stage()
        del model.blocks, model.head  # the other stages' layers are not this rank's
        stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
        cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[p["schedule"]]
        sched = cls(stage, n_microbatches=p["microbatches"],
                    loss_fn=lambda out, y: F.cross_entropy(out, y))
        return sched, make_optimizer(cfg["optimizer"], stage_mod.parameters()), "pp", {
            "pp_layers": f"blocks {rank * per}..{(rank + 1) * per - 1}"
                         + (" + head" if rank == world - 1 else "")}
    if s == "deepspeed":
        import deepspeed
        opt = make_optimizer(cfg["optimizer"], model.parameters())
        eng, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config(cfg))
        return eng, opt, "ds", {"deepspeed": deepspeed.__version__, "ds_config": ds_config(cfg)}
    raise ValueError(f"unknown strategy {s}")


# --------------------------------------------------------------------------
# One rank
# --------------------------------------------------------------------------


def allocations(kr):
    """tools/oracle/zoo.py's tree_allocations with the thread of each event:
    (t, id, size, ptr, phase, op, tid), in time order."""
    from zoo import PREFIX
    out, stack = [], list(kr.experimental_event_tree())
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if "Allocation" not in str(n.tag):
            continue
        ef = n.extra_fields
        size = int(ef.alloc_size)
        if size == 0 or not str(ef.device).startswith("cpu"):
            continue
        names, phase, q = [], None, n.parent
        while q is not None:
            if q.name.startswith(PREFIX):
                phase = q.name[len(PREFIX):]
                break
            names.append(q.name)
            q = q.parent
        names.reverse()
        outer = names[0] if names else "(python)"
        inner = [x for x in names if not x.startswith(("aten::empty", "aten::zeros",
                                                       "aten::resize_"))]
        op = outer if not inner or inner[-1] == outer else f"{outer} > {inner[-1]}"
        out.append((int(n.start_time_ns), int(n.id), size, int(ef.ptr), phase, op,
                    int(n.start_tid)))
    out.sort()
    return out


def profiler_levels(evs, allocs, tree_ok):
    """The profiler's running sum: (end level, setup peak, peak over the iterations, its
    event index, level after setup).  Setup is every event before the first one in an
    iteration's range (gloo's thread has no range)."""
    level, setup_peak, peak, peak_i, setup_sum = 0, 0, 0, -1, None
    phases = [a[4] for a in allocs] if tree_ok else [None] * len(evs)
    first_it = next((i for i, ph in enumerate(phases) if (ph or "").startswith("it")), len(evs))
    for i, (_, _, nb) in enumerate(evs):
        in_setup = i < first_it
        if not in_setup and setup_sum is None:
            setup_sum = level
        level += nb
        if in_setup:
            setup_peak = max(setup_peak, level)
        elif level > peak:
            peak, peak_i = level, i
    return level, setup_peak, peak, peak_i, level if setup_sum is None else setup_sum


def rank_main(cfg, rank, world, port, conn, trace):
    try:
        row = measure_rank(cfg, rank, world, port, trace)
        conn.send((json.dumps(row), None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        import traceback
        tb = traceback.format_exc().strip().splitlines()
        conn.send((None, f"rank {rank}: {type(e).__name__}: {str(e).strip()[:300]} | "
                   + " | ".join(tb[-4:])))


def measure_rank(cfg, rank, world, port, trace):
    import platform

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    from zoo import Range, live_storages
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    if cfg["strategy"] == "deepspeed":
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    elif world > 1 or cfg["strategy"] != "single":
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
    setup_before = sum(live_storages().values())
    hook = memhook()
    hook.memhook_enable(1)
    hook0, log0 = hook.memhook_current(), hook.memhook_log_len()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        # built under the profiler: a free in setup (the full parameters that sharding
        # replaces) of a block allocated before profiling would go unreported
        with Range("setup/build"):
            model, classes, shape = build_model(cfg["model"])
            model.train()
            torch.manual_seed(1 + rank)
            B = cfg["batch"]
            if cfg["params"].get("sp"):  # this rank's part of the sequence (dim 1)
                shape = (shape[0] // world,) + tuple(shape[1:])
            x = torch.randn(B, *shape)
            y = torch.randint(0, classes, (B,), dtype=torch.long)
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        torch.manual_seed(2)
        with Range("setup"):
            m, opt, kind, extra = setup_strategy(cfg, model, rank, world)
        del model
        mid = sum(live_storages().values())
        hook_setup_peak, hook_before = hook.memhook_peak() - hook0, hook.memhook_current() - hook0
        hook.memhook_reset_peak()
        log1 = hook.memhook_log_len()
        if world > 1:
            dist.barrier()
        t0 = time.time()
        for it in range(ITERS):
            with Range(f"it{it}/zero_grad"):
                opt.zero_grad() if kind != "ds" else m.zero_grad()
            if kind == "pp":
                with Range(f"it{it}/schedule"):
                    if rank == 0:
                        m.step(x)
                    elif rank == world - 1:
                        m.step(target=y, losses=[])
                    else:
                        m.step()
            else:
                with Range(f"it{it}/forward"):
                    out = m(x)
                with Range(f"it{it}/loss"):
                    loss = F.cross_entropy(out.full_tensor() if hasattr(out, "full_tensor")
                                           else out, y)
                with Range(f"it{it}/backward"):
                    loss.backward() if kind != "ds" else m.backward(loss)
            with Range(f"it{it}/optimizer"):
                opt.step() if kind != "ds" else m.step()
            if kind != "pp":
                with Range(f"it{it}/cleanup"):
                    del out, loss
        run_s = time.time() - t0
        hook_peak, hook_end = hook.memhook_peak() - hook0, hook.memhook_current() - hook0
        log2 = hook.memhook_log_len()
    kr = prof.profiler.kineto_results
    allocs = allocations(kr)
    evs = sorted((int(e.start_ns()), i, int(e.nbytes())) for i, e in enumerate(kr.events())
                 if e.nbytes() != 0 and str(e.device_type()).endswith("CPU"))
    after = sum(live_storages().values())
    tree_ok = [a[2] for a in allocs] == [nb for _, _, nb in evs]
    # setup events: those inside the "setup" range (the tree says which); without a
    # matching tree, by time against the first iteration's first event
    level, setup_peak, peak, peak_i, setup_sum = profiler_levels(evs, allocs, tree_ok)
    top, peak_phase, by_phase = [], None, {}
    if tree_ok:
        live, lv = {}, 0
        for i, a in enumerate(allocs):
            lv += a[2]
            ph = (a[4] or "(outside)").split("/")[-1]
            by_phase[ph] = max(by_phase.get(ph, 0), setup_before + lv)
            if a[2] > 0:
                live[a[3]] = a
            else:
                live.pop(a[3], None)
            if i == peak_i:
                peak_phase = a[4]
                top = [dict(bytes=b[2], phase=b[4], op=b[5])
                       for b in sorted(live.values(), key=lambda b: -b[2])[:8]]
    hook_top, hook_live, log_peak = hook_live_at_peak(hook, log0, log1, log2, allocs, hook_before)
    if trace is not None:
        with open(trace + ".peak", "w") as f:
            f.write(f"# live at the hook's peak ({setup_before + hook_peak} B): bytes phase op\n")
            for b, ph, op in hook_live:
                f.write(f"{b:>12} {ph or '-':<16} {op}\n")
        with open(trace, "w") as f:
            lv = 0
            for a in allocs:
                lv += a[2]
                f.write(f"{a[4] or '-':<16} {a[2]:>+12} {setup_before + lv:>12} "
                        f"{a[3]:x} t{a[6]} {a[5]}\n")
    rows_extra = {}
    if cfg["strategy"] == "deepspeed":
        rows_extra = ds_estimates(cfg, m, world)
    row = dict(cfg, rank=rank, torch=torch.__version__, python=platform.python_version(),
               backend="gloo" if world > 1 or cfg["strategy"] != "single" else None,
               num_threads=torch.get_num_threads(), iterations=ITERS,
               loss=f"F.cross_entropy(out[B,{classes}], y[B] int64), mean",
               optimizer_args=(dict(lr=SGD_LR, momentum=SGD_MOMENTUM, foreach=None)
                               if cfg["optimizer"] == "sgd-momentum" else
                               dict(lr=ADAM_LR, foreach=None)),
               zero_grad_set_to_none=True, param_bytes_full=param_bytes,
               setup_bytes_before=setup_before,
               bytes_before=setup_before + hook_before,
               peak_bytes=setup_before + hook_peak, end_bytes=setup_before + hook_end,
               setup_peak_bytes=setup_before + hook_setup_peak,
               hook_overflow=hook.memhook_overflow(), hook_filter="libc10.so callers, alignment 64",
               hook_log_matches=log_peak == hook_peak,
               profiler_bytes_before=setup_before + setup_sum,
               profiler_peak_bytes=setup_before + peak, profiler_end_bytes=setup_before + level,
               profiler_setup_peak_bytes=setup_before + setup_peak, 
               gc_unseen_bytes_before=setup_before + setup_sum - mid,
               peak_phase=peak_phase, gc_unseen_bytes_end=setup_before + level - after,
               end_check_ok=after == setup_before + level,
               memory_events=len(evs), tree_matches_events=tree_ok,
               peak_by_phase_kind=by_phase, profiler_live_at_peak_top=top,
               live_at_peak_top=hook_top, run_s=round(run_s, 2),
               **extra, **rows_extra)
    if world > 1 or cfg["strategy"] != "single":
        dist.barrier()
        dist.destroy_process_group()
    return row


def hook_live_at_peak(hook, log0, log1, log2, allocs, before):
    """The blocks live at the hook's peak over the iterations, named by the profiler's
    allocation events (every allocation has one, on every thread; only frees go missing):
    each hook allocation takes the next profiler allocation of the same address and size.
    Returns (the top 12 as dicts, every block as (bytes, phase, op), largest first)."""
    import ctypes
    n = log2 - log0
    buf = (ctypes.c_longlong * (2 * max(n, 1)))()
    hook.memhook_log_copy.restype = ctypes.c_size_t
    got = hook.memhook_log_copy(ctypes.c_size_t(log0), ctypes.c_size_t(n), buf)
    ev = [(buf[2 * i], buf[2 * i + 1]) for i in range(got)]
    names = {}
    for a in allocs:
        names.setdefault((a[3], a[2]), []).append((a[4], a[5]))
    used = {}
    live, level, peak, peak_live = {}, 0, None, None
    for i, (b, p) in enumerate(ev):
        if b > 0:
            k = (p, b)
            j = used.get(k, 0)
            used[k] = j + 1
            nm = names.get(k, [])
            live[p] = (b,) + (nm[j] if j < len(nm) else (None, "(no profiler event)"))
        else:
            live.pop(p, None)
        level += b
        if i >= log1 - log0 and (peak is None or level > peak):
            peak, peak_live = level, dict(live)
    blocks = sorted((peak_live or {}).values(), key=lambda x: -x[0])
    return ([dict(bytes=b, phase=ph, op=op) for b, ph, op in blocks[:12]],
            [x for x in blocks if x[0] >= 65536], peak)


def memhook():
    """tools/oracle/memhook.c, preloaded (main() re-executes with LD_PRELOAD)."""
    import ctypes
    lib = ctypes.CDLL(None)
    for f in ("memhook_current", "memhook_peak", "memhook_overflow", "memhook_log_len"):
        getattr(lib, f).restype = ctypes.c_longlong
    return lib


def build_memhook():
    so = os.path.join(WORK, "memhook.so")
    src = os.path.join(HERE, "memhook.c")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        os.makedirs(WORK, exist_ok=True)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, src, "-ldl", "-lpthread"],
                       check=True)
    return so


def ds_estimates(cfg, engine, world):
    """DeepSpeed's own model-state estimators for this model and world (one node), as a
    cross-check: bytes per GPU and per CPU, the largest of their options."""
    out = {}
    try:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
        n = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel()
                for p in engine.module.parameters())
        if cfg["params"]["zero"] in (1, 2):
            g, c = estimate_zero2_model_states_mem_needs(n, num_gpus_per_node=world, num_nodes=1,
                                                         cpu_offload=False)
        else:
            largest = max(p.ds_numel if hasattr(p, "ds_numel") else p.numel()
                          for p in engine.module.parameters())
            g, c, _ = estimate_zero3_model_states_mem_needs(n, largest, num_gpus_per_node=world,
                                                            num_nodes=1, cpu_offload=False,
                                                            cpu_offload_params=False,
                                                            zero_init=False)
        out = dict(ds_estimator_gpu_bytes=int(g), ds_estimator_cpu_bytes=int(c),
                   ds_estimator_params=int(n))
    except Exception as e:  # noqa: BLE001 - recorded
        out = dict(ds_estimator_error=f"{type(e).__name__}: {e}")
    return out


# --------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------


def read_rows(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_group(cfg, timeout, trace_rank=None, trace_path=None):
    """One configuration's process group: world forked ranks; (rows, error).  Every rank's
    allocation trace goes to build/dist/traces/ID-rR.txt (or trace_path for trace_rank)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    port = free_port()
    procs, pipes = [], []
    for r in range(cfg["world"]):
        rx, tx = ctx.Pipe(duplex=False)
        p = ctx.Process(target=rank_main, args=(cfg, r, cfg["world"], port, tx,
                                                trace_path if r == trace_rank else
                                                os.path.join(WORK, "traces", f"{cfg['id']}-r{r}.txt")))
        p.start()
        tx.close()
        procs.append(p)
        pipes.append(rx)
    deadline = time.time() + timeout
    rows, errs = [None] * len(procs), []
    for r, rx in enumerate(pipes):
        left = max(0.1, deadline - time.time())
        if rx.poll(left):
            try:
                line, err = rx.recv()
            except EOFError:
                line, err = None, f"rank {r}: died"
            if err:
                errs.append(err)
            else:
                rows[r] = json.loads(line)
        else:
            errs.append(f"rank {r}: timeout after {timeout} s")
            break
    for p in procs:
        p.join(2 if not errs else 0.5)
        if p.exitcode is None:
            p.kill()
            p.join()
    if not errs and any(r is None for r in rows):
        errs.append("a rank gave no row")
    return (None, errs[0]) if errs else (rows, None)


def ensure_graph(cfg):
    path = os.path.join(ROOT, cfg["graph"])
    if not os.path.exists(path):
        import multiprocessing as mp
        p = mp.get_context("fork").Process(target=export_graph, args=(cfg["model"], path))
        p.start()
        p.join(600)
    return os.path.exists(path)


def cmd_measure(a):
    import torch  # noqa: F401 - imported once; the ranks are forked
    import torch.distributed  # noqa: F401
    done = {r["id"] for r in read_rows(a.out)}
    os.makedirs(os.path.join(WORK, "traces"), exist_ok=True)
    failed_path = os.path.join(WORK, "failed.jsonl")
    failed = set() if a.retry_failed else {r["id"] for r in read_rows(failed_path)}
    todo = [c for c in configs() if c["id"] not in done and c["id"] not in failed
            and (not a.only or any(s in c["id"] for s in a.only))]
    print(f"{len(todo)} configurations to measure ({len(done)} done, {len(failed)} failed)",
          flush=True)
    for c in todo:
        if not ensure_graph(c):
            print(f"FAIL {c['id']}: export", flush=True)
        t0 = time.time()
        rows, err = run_group(c, a.timeout)
        if err:
            print(f"FAIL {c['id']}: {err}", flush=True)
            with open(failed_path, "a") as f:
                f.write(json.dumps(dict(id=c["id"], error=err)) + "\n")
            continue
        with open(a.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print(f"{c['id']}: " + " ".join(f"{r['peak_bytes'] / 2**20:.2f}" for r in rows)
              + f" MiB ({time.time() - t0:.0f} s)"
              + ("" if all(r["tree_matches_events"] and not r["hook_overflow"] for r in rows)
                 else "  CHECK FAILED")
              + "  (profiler: " + " ".join(f"{r['profiler_peak_bytes'] / 2**20:.2f}" for r in rows)
              + ")", flush=True)


def cmd_trace(a):
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    cfg = next(c for c in configs() if c["id"] == a.id)
    path = a.out or os.path.join(WORK, f"trace-{a.id}-r{a.rank}.txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rows, err = run_group(cfg, a.timeout, a.rank, path)
    print(err or f"{path}: peak {rows[a.rank]['peak_bytes']}, before {rows[a.rank]['bytes_before']}")


# dnnmem's options for a row, where it models the strategy (None: skipped).  The names are
# those of the multi-GPU options (src/options.def, "Data parallelism").
def row_options(r):
    s, p = r["strategy"], r["params"]
    if s == "single":
        return []
    if s == "ddp":
        o = ["--gpus", str(r["world"])]
        if "bucket_cap_mb" in p:
            o += ["--ddp-bucket-mb", str(p["bucket_cap_mb"])]
        if p.get("gradient_as_bucket_view"):
            o += ["--ddp-bucket-view"]
        return o
    if s == "fsdp2":
        return ["--gpus", str(r["world"]), "--fsdp",
                "full" if p["reshard_after_forward"] else "shard-grad-op", "--fsdp-wrap", "/blocks.*"]
    if s == "deepspeed":
        o = ["--gpus", str(r["world"]), "--zero", str(p["zero"])]
        for k, flag in (("reduce_bucket_size", "--zero-bucket-size"),
                        ("prefetch_bucket_size", "--zero-prefetch-size"),
                        ("param_persistence_threshold", "--zero-persist-threshold")):
            if k in p:
                o += [flag, str(p[k])]
        return o
    if s == "tp":
        return ["--gpus", str(r["world"]), "--tp", str(r["world"])] + (["--sp"] if p.get("sp") else [])
    if s == "pp":
        return ["--gpus", str(r["world"]), "--pp", str(r["world"]), "--micro-batches",
                str(p["microbatches"]), "--pp-schedule", p["schedule"], "--rank", str(r["rank"])]
    return None


def read_misses(path):
    out = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for ln in f:
                ln = ln.split("#", 1)
                if ln[0].strip():
                    out[ln[0].strip()] = ln[1].strip() if len(ln) > 1 else ""
    return out


def cmd_compare(a):
    """Each row against `dnnmem estimate` with its options.  Rows whose options dnnmem
    refuses (exit 2 or 4: not modelled) are counted as skipped, by strategy.  With --check:
    exit 1 when a compared row misses by more than the bar (2%) without being listed in
    --misses ('ID rR  # mechanism' lines), or a listed row no longer misses."""
    rows = read_rows(a.ref)
    misses = read_misses(a.misses)
    done, skipped, bad = [], {}, 0
    say = (lambda *x: None) if a.brief else print
    say(f"{'configuration':<56} {'rank':>4} {'measured':>10} {'estimated':>10} {'error':>8}")
    for r in rows:
        key = f"{r['id']} r{r['rank']}"
        opts = row_options(r)
        if opts is None:
            skipped[r["strategy"]] = skipped.get(r["strategy"], 0) + 1
            continue
        cmd = [a.dnnmem, "estimate", os.path.join(ROOT, r["graph"]), "--device", "cpu",
               "--framework", "pytorch@" + ".".join(r["torch"].split(".")[:2]),
               "--cpu-threads", "1", "--batch-size", str(r["batch"]), "--mode", "train",
               "--optimizer", r["optimizer"], "--json"] + opts
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode not in (0, 1):
            why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            if p.returncode not in (2, 4):  # a crash or a model error is a problem
                print(f"{key:<61} error: {why}")
                bad += 1
            skipped[r["strategy"]] = skipped.get(r["strategy"], 0) + 1
            if a.verbose:
                say(f"{key:<61} refused: {why}")
            continue
        est = json.loads(p.stdout)
        got = est["peak_allocated_bytes"]
        ranks = est.get("ranks")
        if ranks:  # the row of this rank (a distinct rank's row lists the ranks it stands for)
            mine = [x for x in ranks if r["rank"] in (x.get("ranks") or [x.get("rank")])]
            for k in ("peak_allocated_bytes", "allocated_bytes", "peak_bytes"):
                if mine and k in mine[0]:
                    got = mine[0][k]
                    break
        e = 100.0 * (got - r["peak_bytes"]) / r["peak_bytes"]
        mark = ""
        if abs(e) > BAR and key not in misses:
            mark, bad = "  MISS", bad + 1
        elif abs(e) > BAR:
            mark = "  (expected miss)"
        elif key in misses:
            mark, bad = "  UNEXPECTED PASS", bad + 1
        (print if mark.strip() in ("MISS", "UNEXPECTED PASS") else say)(
            f"{r['id']:<56} {r['rank']:>4} {r['peak_bytes'] / 2**20:>6.2f} MiB "
            f"{got / 2**20:>6.2f} MiB {e:>+7.2f}%{mark}")
        done.append(dict(r, error=e))
    groups = {}
    for r in done:
        groups.setdefault(r["strategy"] + ("+sp" if r["params"].get("sp") else ""),
                          []).append(r["error"])
    print(f"\n{'strategy':<10} {'rows':>4} {'median|e|':>10} {'within2%':>9} {'worst':>8}")
    for k, es in sorted(groups.items()):
        print(f"{k:<10} {len(es):>4} {statistics.median(abs(e) for e in es):>9.2f}% "
              f"{100 * sum(abs(e) <= BAR for e in es) / len(es):>8.0f}% "
              f"{max(es, key=abs):>+7.2f}%")
    for k, n in sorted(skipped.items()):
        print(f"{k:<10} {n:>4} rows skipped (options dnnmem refuses: not modelled)")
    print(f"multi-process CPU rows (torch.distributed, gloo): {len(done)} compared, "
          f"{sum(skipped.values())} skipped, {bad} problems")
    return 1 if (a.check and bad) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--only", nargs="*")
    m.add_argument("--out", default=OUT)
    m.add_argument("--timeout", type=int, default=300)
    m.add_argument("--retry-failed", action="store_true")
    t = sub.add_parser("trace")
    t.add_argument("id")
    t.add_argument("--rank", type=int, default=0)
    t.add_argument("--out")
    t.add_argument("--timeout", type=int, default=300)
    c = sub.add_parser("compare")
    c.add_argument("--ref", default=OUT)
    c.add_argument("--dnnmem", default=os.path.join(ROOT, "build", "dnnmem"))
    c.add_argument("--misses", help="expected misses: 'ID rR  # mechanism' lines")
    c.add_argument("--check", action="store_true", help="exit 1 on a problem")
    c.add_argument("--brief", action="store_true", help="print only problems and the figures")
    c.add_argument("-v", "--verbose", action="store_true")
    sub.add_parser("list")
    a = ap.parse_args()
    if a.cmd in ("measure", "trace") and "memhook.so" not in os.environ.get("LD_PRELOAD", ""):
        env = dict(os.environ, LD_PRELOAD=build_memhook())
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    if a.cmd == "list":
        for c in configs():
            print(c["id"])
        return 0
    return {"measure": cmd_measure, "trace": cmd_trace, "compare": cmd_compare}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
