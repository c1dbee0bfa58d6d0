#!/usr/bin/env python3
"""XLA's own memory accounting of JAX's jitted steps on the CPU backend.

The CPU oracle of issue 18 (JAX): for each configuration, the step of
tools/gpu/jax_measure.py (the same networks as tools/gpu/jax-models/*.onnx,
the same hand-written and optax updates) is lowered on abstract arguments
and compiled for the CPU, and `compiled.memory_analysis()` is recorded:
XLA's CompiledMemoryStats (argument, output, alias and temp sizes), the
figures its buffer assignment fixed at compile time. No array is made and
no step is run: the numbers are the compiler's, not an allocator's.

    python3 -m venv /tmp/venv-jax && /tmp/venv-jax/bin/pip install jax optax
    /tmp/venv-jax/bin/python tools/oracle/jax_cpu_measure.py \\
        [--configs FILE.jsonl | --grid] OUT.jsonl [--dump DIR]

Configurations: FILE.jsonl in jax_measure.py's format (id, model, batch,
seq, mode, optimizer, dtype, donate, loss, impl), or --grid: the grid
below (every model, inference and four updates, donated and not, fp32 and
bf16, two batch sizes). One process per configuration (this script with
--child), so one compile cannot leak into the next; resumable: ids already
`ok` in OUT.jsonl are skipped. The first line of a fresh OUT is a probe
with the versions (jax, jaxlib, optax, numpy, python) and the device.

--dump DIR keeps XLA's buffer-assignment dump of each step
(--xla_dump_to; the *buffer-assignment.txt files) for tracing a miss.

Facts relied on:
  - CompiledMemoryStats: argument_size_in_bytes, output_size_in_bytes,
    alias_size_in_bytes, temp_size_in_bytes; "the on-device memory needed
    to run an executable is at least generated_code + argument + output -
    alias + temp" (openxla/xla xla/pjrt/pjrt_executable.h). The compared
    peak is argument + output - alias + temp.
  - The CPU platform is forced with JAX_PLATFORMS=cpu (docs.jax.dev,
    configuration options: jax_platforms).
"""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import jax_measure as jm  # noqa: E402  (the networks and steps; imports numpy only)

# The grid: (model, batches, seq) with every mode/update/donation/dtype.
GRID_MODELS = [("jax_mlp", (64, 256), None), ("jax_cnn", (8, 32), None),
               ("jax_transformer", (2, 8), 128)]
GRID_UPDATES = [("infer", None, "hand"), ("train", "sgd", "hand"),
                ("train", "sgd-momentum", "hand"), ("train", "adam", "hand"),
                ("train", "adam", "optax")]


def grid():
    rows = []
    for model, batches, seq in GRID_MODELS:
        short = model.split("_", 1)[1][:3]
        for b in batches:
            for mode, opt, impl in GRID_UPDATES:
                for dtype in ("float32", "bfloat16"):
                    for donate in ((True, False) if mode == "train" else (False,)):
                        tag = "infer" if mode == "infer" else opt + ("-optax" if impl == "optax" else "")
                        cid = f"{short}-b{b}-{tag}-{'f32' if dtype == 'float32' else 'bf16'}"
                        if mode == "train" and not donate:
                            cid += "-nodonate"
                        c = {"id": cid, "model": model, "batch": b, "mode": mode, "dtype": dtype,
                             "impl": impl, "donate": donate}
                        if opt:
                            c["optimizer"] = opt
                        if seq:
                            c["seq"] = seq
                        rows.append(c)
    return rows


def versions():
    import jax
    v = jm.versions(jax)
    v.pop("platform_version", None)
    return v


def child(cfg, dump):
    """Compile one configuration; return its record."""
    rec = dict(cfg, status="error")
    t0 = time.time()
    try:
        import numpy as np
        import jax
        rec["versions"] = versions()
        dev = jax.devices()[0]
        rec["device"] = {"platform": dev.platform, "device_kind": dev.device_kind}
        F = jm.JaxOps(jax)
        dtype = F.xp.float32 if cfg["dtype"] == "float32" else F.xp.bfloat16
        step, tx = jm.build_fns(cfg, jax, F, dtype)
        P_h, x_h, y_h = jm.host_arrays(cfg, np, dtype)
        sds = jax.ShapeDtypeStruct
        P_a = {k: sds(v.shape, v.dtype) for k, v in P_h.items()}
        x_a, y_a = sds(x_h.shape, x_h.dtype), sds(y_h.shape, y_h.dtype)
        if cfg["mode"] == "train":
            if tx is not None:
                S_a = jax.eval_shape(tx.init, P_a)
            else:
                S_h = jm.opt_state_host(cfg, np, P_h)
                S_a = jax.tree_util.tree_map(lambda a: sds(a.shape, a.dtype), S_h)
            jitted = jax.jit(step, donate_argnums=(0, 1) if cfg["donate"] else ())
            args = (P_a, S_a, x_a, y_a)
        else:
            jitted = jax.jit(step)
            args = (P_a, x_a)
        compiled = jitted.lower(*args).compile()
        rec["memory_analysis"] = jm.memory_analysis(compiled)
        ma = rec["memory_analysis"]
        rec["peak_bytes"] = (ma["argument_size_in_bytes"] + ma["output_size_in_bytes"] -
                             ma["alias_size_in_bytes"] + ma["temp_size_in_bytes"])
        rec["param_bytes"] = int(sum(a.nbytes for a in P_h.values()))
        rec["status"] = "ok"
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {e}"[:1000]
        rec["traceback"] = traceback.format_exc()[-2000:]
    rec["seconds"] = round(time.time() - t0, 2)
    return rec


def done_ids(path):
    ids = set()
    if not os.path.exists(path):
        return ids, False
    probe = False
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            probe = probe or bool(r.get("probe"))
            if r.get("status") == "ok" and "id" in r:
                ids.add(r["id"])
    return ids, probe


def parent(a):
    if a.grid:
        cfgs = grid()
    else:
        cfgs = [r for _, r in jm.read_configs(a.configs)]
    cfgs = [jm.normalise(c, n) for n, c in enumerate(cfgs, 1)]
    have, probe = done_ids(a.out)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    with open(a.out, "a") as out:
        if not probe:
            r = subprocess.run([sys.executable, __file__, "--probe"], env=env,
                               capture_output=True, text=True, timeout=a.timeout)
            out.write(r.stdout.strip() + "\n")
            out.flush()
        for c in cfgs:
            if c["id"] in have:
                continue
            cenv = dict(env)
            if a.dump:
                cenv["XLA_FLAGS"] = (f"--xla_dump_to={os.path.join(a.dump, c['id'])} "
                                     "--xla_dump_hlo_module_re=jit_(train|infer)_step")
            try:
                r = subprocess.run([sys.executable, __file__, "--child", json.dumps(c)], env=cenv,
                                   capture_output=True, text=True, timeout=a.timeout)
                line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else json.dumps(
                    dict(c, status="error", error=f"rc {r.returncode}: {r.stderr[-500:]}"))
            except subprocess.TimeoutExpired:
                line = json.dumps(dict(c, status="error", error=f"timeout {a.timeout}s"))
            out.write(line + "\n")
            out.flush()
            rec = json.loads(line)
            print(f"{c['id']}: {rec['status']} {rec.get('peak_bytes', rec.get('error', ''))}",
                  file=sys.stderr, flush=True)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", nargs="?")
    p.add_argument("--configs")
    p.add_argument("--grid", action="store_true")
    p.add_argument("--dump")
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--child")
    p.add_argument("--probe", action="store_true")
    a = p.parse_args(argv)
    if a.probe:
        import jax
        d = jax.devices()[0]
        print(json.dumps({"probe": True, "status": "ok", "versions": versions(),
                          "device": {"platform": d.platform, "device_kind": d.device_kind},
                          "oracle": "compiled.memory_analysis() on the CPU backend"}))
        return 0
    if a.child:
        print(json.dumps(child(json.loads(a.child), a.dump)))
        return 0
    if not a.out or (not a.grid and not a.configs):
        p.error("OUT.jsonl and --configs FILE or --grid are needed")
    return parent(a)


if __name__ == "__main__":
    sys.exit(main())
