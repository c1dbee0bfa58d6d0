#!/usr/bin/env python3
"""Measure the GPU memory of JAX's jitted training and inference steps.

The kit of issue 5 (validating dnnmem's `--framework jax`, `--jax-execution
jit`); tools/gpu/README.md, section "JAX (issue 5)", says how to run it.

    XLA_PYTHON_CLIENT_PREALLOCATE=false \\
        python3 tools/gpu/jax_measure.py tools/gpu/jax-configs.jsonl OUT.jsonl

CONFIGS is a JSONL file, one configuration a line (unknown keys are kept):

    id         a name for the row (default: its line number)
    model      jax_mlp | jax_cnn | jax_transformer (MODELS below; the same
               networks as tools/gpu/jax-models/<model>.onnx)
    batch      batch size
    seq        sequence length (jax_transformer only; default 256)
    mode       train | infer
    optimizer  sgd | sgd-momentum | adam (dnnmem's --optimizer names; train)
    dtype      float32 | bfloat16 (parameters, activations and optimizer
               state all in it: dnnmem's --precision fp32 | bf16)
    donate     true | false: jax.jit(step, donate_argnums=(0, 1)), the
               parameters and the optimizer state (train; default true)
    loss       ce | sum (dnnmem's --loss; default ce)
    impl       hand | optax: the update written here with optax's formulas
               (default), or optax's own sgd / adam
    iters      steps run (default 3)

Each configuration runs in a process of its own (this script re-invoked with
--child), because the allocator's peak_bytes_in_use cannot be reset from
Python: a fresh process starts it at zero. Per configuration the child

  1. lowers and compiles the step on abstract arguments (jax.ShapeDtypeStruct)
     before any array exists, and records compiled.memory_analysis() (XLA's
     CompiledMemoryStats: temp, argument, output, alias and generated-code
     sizes) and a summary of the optimized HLO (fusions, custom calls, the
     cuBLAS / cuDNN scratch buffers inside the temp allocation);
  2. records memory_stats() after compiling: autotuning may allocate through
     the same allocator, so its peak is kept apart (compile_peak_bytes);
  3. makes the parameters, optimizer state and batch on the host (numpy) and
     device_puts them, so that nothing but those arrays is allocated;
  4. runs `iters` steps with the compiled executable, blocking on each, and
     records memory_stats() (the whole dict) after each step.

When the compile-time peak is not below the final peak (the run's peak is
then hidden), and time is left, the configuration is run once more in a new
process that loads the executable from JAX's persistent compilation cache,
which the first process wrote: no autotuning, so the peak is the run's
(`rerun`). One JSON object a line is written to OUT.jsonl and flushed as each
configuration finishes; a failing configuration records its error and the
rest go on. The first line is a probe (versions, device, memory_stats keys,
the models' parameter shapes against their ONNX files). With --dump-hlo (the
default) XLA's dumps of the step's module (after-optimizations HLO, buffer
assignment, memory usage report) are packed into OUT's stem + "-hlo.tar.gz".

Facts relied on (sources named where used):
  - XLA_PYTHON_CLIENT_PREALLOCATE=false: JAX allocates as needed instead of
    preallocating 75% of the device (docs.jax.dev, "GPU memory allocation");
    it must be set before the backend starts, hence in the child's
    environment before `import jax`.
  - Device.memory_stats() returns the allocator's AllocatorStats as a dict:
    num_allocs, bytes_in_use, peak_bytes_in_use, largest_alloc_size,
    bytes_limit, bytes_reserved, peak_bytes_reserved, ... pool_bytes,
    peak_pool_bytes where set (openxla/xla xla/python/py_device.cc,
    PyDevice::MemoryStats); there is no call to reset the peak.
  - compiled.memory_analysis() returns CompiledMemoryStats; "the on-device
    memory needed to run an executable is at least generated_code +
    argument + output - alias + temp" (openxla/xla xla/pjrt/
    pjrt_executable.h). Attributes differ between versions: every int
    attribute present is recorded.
  - donate_argnums: "the corresponding input buffer is donated to hold an
    output" (docs.jax.dev, buffer donation).
  - optax.sgd(lr, momentum) is trace (t = g + momentum * t) then a scale by
    -lr; optax.adam keeps (count, mu, nu) with mu and nu of the parameters'
    dtype (optax transform.py, scale_by_adam / trace). The hand-written
    update below follows those formulas.

Only jax.jit, jax.value_and_grad, jax.nn, jax.numpy, jax.lax
(dot_general, conv_general_dilated, reduce_window), jax.device_put,
jax.ShapeDtypeStruct, .lower().compile(), memory_analysis() and
memory_stats() are used; every optional call is guarded.

The model definitions below import nothing but the standard library and
numpy, so tools/gpu/jax_export.py (Debian's python3 with torch) checks them
against the torch networks it exports, numerically, with NumpyOps.
"""

import argparse
import glob
import io
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_DIR = os.path.join(HERE, "jax-models")

# --------------------------------------------------------------------------
# The networks (shared with jax_export.py, which builds the torch twins)
# --------------------------------------------------------------------------

MODELS = {
    # Gemm + bias + ReLU: Linear(1024, 4096), 2 x Linear(4096, 4096),
    # Linear(4096, 1000); input [batch, 1024] float.
    "jax_mlp": dict(kind="mlp", d_in=1024, hidden=(4096, 4096, 4096), classes=1000),
    # Conv 3x3 (pad 1) + bias + ReLU, MaxPool 2x2 after the first three;
    # 64x64 input, NCHW; then Flatten, Linear(256*8*8, 512) + ReLU,
    # Linear(512, 100).
    "jax_cnn": dict(kind="cnn", image=64, in_ch=3, channels=(64, 128, 256, 256),
                    pool_after=(0, 1, 2), fc=512, classes=100),
    # Out of sample for the CPU's rule 8 (xla.c; added 2026-12-03, after the
    # rule was traced on jax_cnn): five convs, two straight conv -> ReLU ->
    # conv pairs, pooling after the second and fourth; 32x32 input;
    # Linear(128*8*8, 256) + ReLU, Linear(256, 10).
    "jax_cnn5": dict(kind="cnn", image=32, in_ch=3, channels=(32, 64, 64, 128, 128),
                     pool_after=(1, 3), fc=256, classes=10),
    # A BERT-style (post-LN) encoder stack with a token head: token and
    # position embeddings, 4 blocks of LayerNorm(attention) + LayerNorm(GELU
    # MLP), no dropout, no mask; logits [batch, seq, vocab], cross-entropy
    # per token.
    "jax_transformer": dict(kind="transformer", vocab=8192, d=512, heads=8, layers=4,
                            ffn=2048, max_pos=512, eps=1e-5, seq=256),
    # Out of sample for the CPU's rules 7h, 8e and 8s (xla.c; added
    # 2026-12-03, after they were traced on jax_transformer): 6 blocks,
    # d 384, 4 heads of 96, ffn 1536, vocab 5000, max_pos 256.
    "jax_transformer6": dict(kind="transformer", vocab=5000, d=384, heads=4, layers=6,
                             ffn=1536, max_pos=256, eps=1e-5, seq=128),
}


def param_shapes(model):
    """[(name, shape)] in the torch module's named_parameters() order."""
    m = MODELS[model]
    out = []
    if m["kind"] == "mlp":
        dims = (m["d_in"],) + tuple(m["hidden"]) + (m["classes"],)
        for i in range(len(dims) - 1):
            out += [(f"fc{i + 1}.weight", (dims[i + 1], dims[i])), (f"fc{i + 1}.bias", (dims[i + 1],))]
    elif m["kind"] == "cnn":
        cin = m["in_ch"]
        for i, c in enumerate(m["channels"]):
            out += [(f"conv{i + 1}.weight", (c, cin, 3, 3)), (f"conv{i + 1}.bias", (c,))]
            cin = c
        side = m["image"] // (2 ** len(m["pool_after"]))
        flat = cin * side * side
        out += [("fc1.weight", (m["fc"], flat)), ("fc1.bias", (m["fc"],)),
                ("fc2.weight", (m["classes"], m["fc"])), ("fc2.bias", (m["classes"],))]
    elif m["kind"] == "transformer":
        d, f = m["d"], m["ffn"]
        out += [("tok.weight", (m["vocab"], d)), ("pos.weight", (m["max_pos"], d))]
        for l in range(m["layers"]):
            p = f"blocks.{l}."
            for n in ("q", "k", "v", "o"):
                out += [(p + n + ".weight", (d, d)), (p + n + ".bias", (d,))]
            out += [(p + "ln1.weight", (d,)), (p + "ln1.bias", (d,)),
                    (p + "fc1.weight", (f, d)), (p + "fc1.bias", (f,)),
                    (p + "fc2.weight", (d, f)), (p + "fc2.bias", (d,)),
                    (p + "ln2.weight", (d,)), (p + "ln2.bias", (d,))]
        out += [("head.weight", (m["vocab"], d)), ("head.bias", (m["vocab"],))]
    else:
        raise ValueError(model)
    return out


def batch_spec(model, batch, seq=None):
    """(x shape, x kind 'float' | 'ids', label shape, number of classes)."""
    m = MODELS[model]
    if m["kind"] == "mlp":
        return (batch, m["d_in"]), "float", (batch,), m["classes"]
    if m["kind"] == "cnn":
        return (batch, m["in_ch"], m["image"], m["image"]), "float", (batch,), m["classes"]
    s = int(seq or m["seq"])
    if s > m["max_pos"]:
        raise ValueError(f"seq {s} > max_pos {m['max_pos']}")
    return (batch, s), "ids", (batch, s), m["vocab"]


def layernorm(F, x, g, b, eps):
    # As torch 1.13 exports nn.LayerNorm at opset 14 (ReduceMean, Sub, Pow,
    # ReduceMean, Add, Sqrt, Div, Mul, Add), which is also flax's formula.
    xp = F.xp
    mu = xp.mean(x, axis=-1, keepdims=True)
    dx = x - mu
    var = xp.mean(dx ** 2, axis=-1, keepdims=True)
    return dx / xp.sqrt(var + eps) * g + b


def forward(model, P, x, F):
    """The network on parameters P (a dict by torch names) and input x."""
    m = MODELS[model]
    if m["kind"] == "mlp":
        n = len(m["hidden"]) + 1
        h = x
        for i in range(1, n):
            h = F.relu(F.linear(h, P[f"fc{i}.weight"], P[f"fc{i}.bias"]))
        return F.linear(h, P[f"fc{n}.weight"], P[f"fc{n}.bias"])
    if m["kind"] == "cnn":
        h = x
        for i in range(len(m["channels"])):
            h = F.relu(F.conv3x3(h, P[f"conv{i + 1}.weight"], P[f"conv{i + 1}.bias"]))
            if i in m["pool_after"]:
                h = F.maxpool2(h)
        h = h.reshape(h.shape[0], -1)  # torch.flatten(x, 1) on NCHW
        h = F.relu(F.linear(h, P["fc1.weight"], P["fc1.bias"]))
        return F.linear(h, P["fc2.weight"], P["fc2.bias"])
    # transformer
    xp = F.xp
    B, S = x.shape
    d, H = m["d"], m["heads"]
    dh = d // H
    h = F.embed(P["tok.weight"], x) + P["pos.weight"][:S][None]
    for l in range(m["layers"]):
        p = f"blocks.{l}."

        def heads(t):  # [B, S, d] -> [B, H, S, dh]
            return t.reshape(B, S, H, dh).transpose(0, 2, 1, 3)

        q = heads(F.linear(h, P[p + "q.weight"], P[p + "q.bias"]))
        k = heads(F.linear(h, P[p + "k.weight"], P[p + "k.bias"]))
        v = heads(F.linear(h, P[p + "v.weight"], P[p + "v.bias"]))
        s = xp.matmul(q, k.transpose(0, 1, 3, 2)) / math.sqrt(dh)
        a = F.softmax(s)
        c = xp.matmul(a, v).transpose(0, 2, 1, 3).reshape(B, S, d)
        h = layernorm(F, F.linear(c, P[p + "o.weight"], P[p + "o.bias"]) + h,
                      P[p + "ln1.weight"], P[p + "ln1.bias"], m["eps"])
        f = F.linear(F.gelu(F.linear(h, P[p + "fc1.weight"], P[p + "fc1.bias"])),
                     P[p + "fc2.weight"], P[p + "fc2.bias"])
        h = layernorm(F, f + h, P[p + "ln2.weight"], P[p + "ln2.bias"], m["eps"])
    return F.linear(h, P["head.weight"], P["head.bias"])


class NumpyOps:
    """The primitives in numpy (float64-safe, slow): only for checking the
    definitions against torch (jax_export.py) and for dry runs."""

    def __init__(self):
        import numpy
        self.xp = numpy

    def linear(self, x, w, b):  # torch's F.linear: x @ w.T + b
        return x @ w.T + b

    def relu(self, x):
        return self.xp.maximum(x, 0)

    def conv3x3(self, x, w, b):  # stride 1, padding 1, NCHW / OIHW
        np = self.xp
        B, C, Hh, Ww = x.shape
        xp_ = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.empty((B, C, 3, 3, Hh, Ww), dtype=x.dtype)
        for i in range(3):
            for j in range(3):
                cols[:, :, i, j] = xp_[:, :, i:i + Hh, j:j + Ww]
        y = np.einsum("bcijhw,ocij->bohw", cols, w, optimize=True)
        return y + b[None, :, None, None]

    def maxpool2(self, x):
        B, C, Hh, Ww = x.shape
        return x.reshape(B, C, Hh // 2, 2, Ww // 2, 2).max(axis=(3, 5))

    def gelu(self, x):  # nn.GELU(): exact, with erf
        erf = self.xp.vectorize(math.erf)
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))

    def softmax(self, x):
        e = self.xp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def log_softmax(self, x):
        s = x - x.max(axis=-1, keepdims=True)
        return s - self.xp.log(self.xp.exp(s).sum(axis=-1, keepdims=True))

    def embed(self, table, ids):
        return table[ids]


class JaxOps:
    """The primitives as a JAX user writes them (jax.nn, jax.lax)."""

    def __init__(self, jax):
        import jax.numpy as jnp
        from jax import lax
        self.jax, self.xp, self.lax = jax, jnp, lax

    def linear(self, x, w, b):
        # x @ w.T with w kept [out, in] as torch stores it: dot_general
        # contracting x's last dim with w's dim 1 (no transpose op).
        y = self.lax.dot_general(x, w, (((x.ndim - 1,), (1,)), ((), ())))
        return y + b

    def relu(self, x):
        return self.jax.nn.relu(x)

    def conv3x3(self, x, w, b):
        y = self.lax.conv_general_dilated(
            x, w, window_strides=(1, 1), padding=((1, 1), (1, 1)),
            dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]

    def maxpool2(self, x):
        # as flax.linen.max_pool: reduce_window with lax.max from -inf
        return self.lax.reduce_window(x, -self.xp.inf, self.lax.max,
                                      (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def gelu(self, x):
        return self.jax.nn.gelu(x, approximate=False)

    def softmax(self, x):
        return self.jax.nn.softmax(x, axis=-1)

    def log_softmax(self, x):
        return self.jax.nn.log_softmax(x, axis=-1)

    def embed(self, table, ids):
        return self.xp.take(table, ids, axis=0)


def loss_value(model, P, x, y, F, loss):
    logits = forward(model, P, x, F)
    if loss == "sum":
        return F.xp.sum(logits)
    flat = logits.reshape(-1, logits.shape[-1])
    logp = F.log_softmax(flat)
    picked = F.xp.take_along_axis(logp, y.reshape(-1, 1), axis=1)
    return -F.xp.mean(picked)


# --------------------------------------------------------------------------
# Helpers shared by parent and child
# --------------------------------------------------------------------------

def log(*a):
    print("[jax_measure]", *a, file=sys.stderr, flush=True)


def as_bool(v, default):
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def normalise(cfg, lineno):
    c = dict(cfg)
    c.setdefault("id", f"row{lineno}")
    c["id"] = re.sub(r"[^A-Za-z0-9_.-]", "_", str(c["id"]))
    if c.get("model") not in MODELS:
        raise ValueError(f"unknown model {c.get('model')!r} (have {sorted(MODELS)})")
    c["batch"] = int(c["batch"])
    c["mode"] = c.get("mode", "train")
    if c["mode"] not in ("train", "infer"):
        raise ValueError(f"mode {c['mode']!r}")
    c["optimizer"] = c.get("optimizer", "sgd-momentum") if c["mode"] == "train" else None
    if c["optimizer"] not in (None, "sgd", "sgd-momentum", "adam"):
        raise ValueError(f"optimizer {c['optimizer']!r}")
    c["dtype"] = c.get("dtype", "float32")
    if c["dtype"] not in ("float32", "bfloat16"):
        raise ValueError(f"dtype {c['dtype']!r}")
    c["donate"] = as_bool(c.get("donate"), True) if c["mode"] == "train" else False
    c["loss"] = c.get("loss", "ce")
    if c["loss"] not in ("ce", "sum"):
        raise ValueError(f"loss {c['loss']!r}")
    c["impl"] = c.get("impl", "hand")
    if c["impl"] not in ("hand", "optax"):
        raise ValueError(f"impl {c['impl']!r}")
    c["iters"] = int(c.get("iters", 3))
    if MODELS[c["model"]]["kind"] == "transformer":
        c["seq"] = int(c.get("seq") or MODELS[c["model"]]["seq"])
    else:
        c.pop("seq", None)
    return c


def read_configs(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            rows.append((n, json.loads(line)))
    return rows


def nvml_used():
    """Device memory used (NVML), and this process's, where NVML says."""
    try:
        import pynvml  # nvidia-ml-py
    except Exception:  # noqa: BLE001
        return None
    out = {}
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mi = pynvml.nvmlDeviceGetMemoryInfo(h)
        out.update(device_used=int(mi.used), device_total=int(mi.total))
        try:
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid == os.getpid() and p.usedGpuMemory is not None:
                    out["process_used"] = int(p.usedGpuMemory)
        except Exception as e:  # noqa: BLE001
            out["process_error"] = str(e)[:200]
        try:
            out["driver"] = pynvml.nvmlSystemGetDriverVersion()
            if isinstance(out["driver"], bytes):
                out["driver"] = out["driver"].decode()
        except Exception:  # noqa: BLE001
            pass
    except Exception as e:  # noqa: BLE001
        out["error"] = str(e)[:200]
    return out


# --------------------------------------------------------------------------
# The child: one configuration
# --------------------------------------------------------------------------

def mem_stats(dev):
    try:
        s = dev.memory_stats()
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    if s is None:
        return None
    return {str(k): (int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v))
            for k, v in dict(s).items()}


def memory_analysis(compiled):
    try:
        ma = compiled.memory_analysis()
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    if ma is None:
        return None
    if isinstance(ma, (list, tuple)):  # one per device in some versions
        ma = ma[0] if ma else None
        if ma is None:
            return None
    out = {}
    for k in dir(ma):
        if k.startswith("_"):
            continue
        try:
            v = getattr(ma, k)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(v, int) and not isinstance(v, bool):
            out[k] = int(v)
    return out


_SCRATCH = re.compile(r"\b[su]8\[(\d+)\]")
_CC = re.compile(r"=\s*(\(.*?\)|\S+)\s+custom-call\(.*?custom_call_target=\"([^\"]+)\"")


def hlo_summary(text):
    """Counts from the optimized HLO text: fusions, custom calls by target,
    and the s8/u8 scratch outputs of cuBLAS / cuDNN custom calls (the
    workspaces XLA places in the temp allocation)."""
    out = {"chars": len(text), "fusions": 0, "custom_calls": {}, "scratch_bytes": []}
    entry = False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("ENTRY "):
            entry = True
        elif entry and s == "}":
            entry = False
        if " fusion(" in s and entry:
            out["fusions"] += 1
        m = _CC.search(s)
        if m:
            target = m.group(2)
            out["custom_calls"][target] = out["custom_calls"].get(target, 0) + 1
            shape = m.group(1)
            if shape.startswith("("):
                parts = _SCRATCH.findall(shape)
                if parts:
                    out["scratch_bytes"].append([target, int(parts[-1])])
    sb = [b for _, b in out["scratch_bytes"]]
    out["scratch_max"] = max(sb) if sb else 0
    out["scratch_sum"] = sum(sb)
    out["scratch_bytes"] = sorted(out["scratch_bytes"], key=lambda t: -t[1])[:40]
    return out


def versions(jax):
    v = {"python": sys.version.split()[0], "jax": getattr(jax, "__version__", None)}
    try:
        import jaxlib
        v["jaxlib"] = getattr(jaxlib, "__version__", None)
        if v["jaxlib"] is None:
            from jaxlib import version as jv
            v["jaxlib"] = jv.__version__
    except Exception:  # noqa: BLE001
        pass
    for mod in ("numpy", "optax", "flax", "ml_dtypes"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            pass
    try:
        from importlib import metadata
        for dist in ("jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin", "jax-cuda12-pjrt",
                     "nvidia-cudnn-cu13", "nvidia-cublas"):
            try:
                v[dist] = metadata.version(dist)
            except Exception:  # noqa: BLE001
                pass
    except Exception:  # noqa: BLE001
        pass
    try:
        v["platform_version"] = str(jax.devices()[0].client.platform_version)[:300]
    except Exception:  # noqa: BLE001
        pass
    return v


def device_info(jax):
    try:
        d = jax.devices()[0]
    except Exception as e:  # noqa: BLE001
        return None, {"error": str(e)[:300]}
    info = {"platform": getattr(d, "platform", None), "device_kind": getattr(d, "device_kind", None),
            "count": len(jax.devices())}
    for k in ("compute_capability", "core_count"):
        try:
            info[k] = str(getattr(d, k))
        except Exception:  # noqa: BLE001
            pass
    return d, info


def setup_jax_config(jax):
    """Persistent compilation cache (written by the first run, read by a
    rerun), when the parent asked for it. jax config options are read from
    env vars of the same name too; update() is tried for safety."""
    cache = os.environ.get("JAXKIT_CACHE_DIR")
    if not cache:
        return
    for k, v in (("jax_compilation_cache_dir", cache),
                 ("jax_persistent_cache_min_compile_time_secs", 0.0),
                 ("jax_persistent_cache_min_entry_size_bytes", -1)):
        try:
            jax.config.update(k, v)
        except Exception as e:  # noqa: BLE001
            log(f"jax.config.update({k}) failed: {e}")


def host_arrays(cfg, np, dtype):
    """Parameters and the batch on the host: weights ~ N(0, 1/fan_in),
    biases 0, LayerNorm gains 1; int32 ids and labels."""
    rng = np.random.default_rng(0)
    P = {}
    for name, shape in param_shapes(cfg["model"]):
        if name.endswith(".bias"):
            a = np.zeros(shape, np.float32)
        elif ".ln" in name:
            a = np.ones(shape, np.float32)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            if name in ("tok.weight", "pos.weight"):
                fan_in = 1
            a = rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / math.sqrt(fan_in))
        P[name] = a.astype(np.dtype(dtype))
    xs, xkind, ys, classes = batch_spec(cfg["model"], cfg["batch"], cfg.get("seq"))
    if xkind == "ids":
        x = rng.integers(0, MODELS[cfg["model"]]["vocab"], xs, dtype=np.int32)
    else:
        x = rng.standard_normal(xs, dtype=np.float32).astype(np.dtype(dtype))
    y = rng.integers(0, classes, ys, dtype=np.int32)
    return P, x, y


def build_fns(cfg, jax, F, dtype):
    """(step function, abstract-args builder, make-optimizer-state on host)."""
    jnp = F.xp
    model, loss = cfg["model"], cfg["loss"]
    lr, mom, b1, b2, eps = 1e-3, 0.9, 0.9, 0.999, 1e-8

    if cfg["mode"] == "infer":
        def infer_step(P, x):
            return forward(model, P, x, F)
        return infer_step, None

    def loss_fn(P, x, y):
        return loss_value(model, P, x, y, F, loss)

    opt = cfg["optimizer"]
    if cfg["impl"] == "optax":
        import optax
        tx = {"sgd": lambda: optax.sgd(lr), "sgd-momentum": lambda: optax.sgd(lr, momentum=mom),
              "adam": lambda: optax.adam(lr, b1=b1, b2=b2, eps=eps)}[opt]()

        def train_step(P, S, x, y):
            l, g = jax.value_and_grad(loss_fn)(P, x, y)
            u, S2 = tx.update(g, S, P)
            return optax.apply_updates(P, u), S2, l
        return train_step, tx

    tm = jax.tree_util.tree_map

    def train_step(P, S, x, y):
        l, g = jax.value_and_grad(loss_fn)(P, x, y)
        if opt == "sgd":
            return tm(lambda p, d: (p - lr * d).astype(p.dtype), P, g), S, l
        if opt == "sgd-momentum":
            t = tm(lambda d, t0: (d + mom * t0).astype(t0.dtype), g, S["trace"])
            return tm(lambda p, t1: (p - lr * t1).astype(p.dtype), P, t), {"trace": t}, l
        count = S["count"] + 1
        cf = count.astype(jnp.float32)
        bc1, bc2 = 1 - b1 ** cf, 1 - b2 ** cf
        mu = tm(lambda d, m: (b1 * m + (1 - b1) * d).astype(m.dtype), g, S["mu"])
        nu = tm(lambda d, v: (b2 * v + (1 - b2) * d * d).astype(v.dtype), g, S["nu"])

        def upd(p, m, v):
            mh = m / bc1.astype(m.dtype)
            vh = v / bc2.astype(v.dtype)
            return (p - lr * (mh / (jnp.sqrt(vh) + eps))).astype(p.dtype)
        return tm(upd, P, mu, nu), {"count": count, "mu": mu, "nu": nu}, l
    return train_step, None


def opt_state_host(cfg, np, P):
    opt = cfg["optimizer"]
    if opt == "sgd":
        return {}
    if opt == "sgd-momentum":
        return {"trace": {k: np.zeros_like(v) for k, v in P.items()}}
    return {"count": np.zeros((), np.int32), "mu": {k: np.zeros_like(v) for k, v in P.items()},
            "nu": {k: np.zeros_like(v) for k, v in P.items()}}


def nbytes_tree(jax, t):
    return int(sum(getattr(a, "nbytes", 0) for a in jax.tree_util.tree_leaves(t)))


def child_main(cfg, result_path):
    rec = dict(cfg)
    rec.update(status="error", pid=os.getpid(), env={k: os.environ.get(k) for k in (
        "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_ALLOCATOR", "XLA_FLAGS", "JAXKIT_CACHE_DIR")})
    t0 = time.time()
    phase = "import"

    def save():
        rec["seconds"] = round(time.time() - t0, 2)
        with open(result_path, "w") as f:
            json.dump(rec, f)

    try:
        import numpy as np
        import jax
        setup_jax_config(jax)
        rec["versions"] = versions(jax)
        phase = "backend"
        dev, rec["device"] = device_info(jax)
        F = JaxOps(jax)
        jnp = F.xp
        dtype = jnp.float32 if cfg["dtype"] == "float32" else jnp.bfloat16
        stats = {"start": mem_stats(dev)}
        rec["stats"] = stats

        phase = "trace"
        step, tx = build_fns(cfg, jax, F, dtype)
        P_h, x_h, y_h = host_arrays(cfg, np, dtype)
        sds = jax.ShapeDtypeStruct
        P_a = {k: sds(v.shape, v.dtype) for k, v in P_h.items()}
        x_a, y_a = sds(x_h.shape, x_h.dtype), sds(y_h.shape, y_h.dtype)
        train = cfg["mode"] == "train"
        if train:
            if tx is not None:
                S_a = jax.eval_shape(tx.init, P_a)
                S_h = None
            else:
                S_h = opt_state_host(cfg, np, P_h)
                S_a = jax.tree_util.tree_map(lambda a: sds(a.shape, a.dtype), S_h)
            jitted = jax.jit(step, donate_argnums=(0, 1) if cfg["donate"] else ())
            args_a = (P_a, S_a, x_a, y_a)
        else:
            jitted = jax.jit(step)
            args_a = (P_a, x_a)

        phase = "compile"
        tc = time.time()
        lowered = jitted.lower(*args_a)
        compiled = lowered.compile()
        rec["compile_seconds"] = round(time.time() - tc, 2)
        rec["memory_analysis"] = memory_analysis(compiled)
        try:
            rec["hlo"] = hlo_summary(compiled.as_text())
        except Exception as e:  # noqa: BLE001
            rec["hlo"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        stats["after_compile"] = mem_stats(dev)

        phase = "setup"
        put = jax.device_put
        P = {k: put(v) for k, v in P_h.items()}
        if train:
            S = tx.init(P) if tx is not None else jax.tree_util.tree_map(put, S_h)
        x, y = put(x_h), put(y_h)
        jax.block_until_ready((P, S, x, y) if train else (P, x))
        del P_h, x_h, y_h
        S_h = None
        rec["param_count"] = int(sum(int(np.prod(s)) for _, s in param_shapes(cfg["model"])))
        rec["param_bytes"] = nbytes_tree(jax, P)
        rec["opt_state_bytes"] = nbytes_tree(jax, S) if train else 0
        rec["batch_bytes"] = nbytes_tree(jax, (x, y) if train else (x,))
        stats["after_setup"] = mem_stats(dev)

        phase = "run"
        steps, losses = [], []
        tr = time.time()
        for i in range(cfg["iters"]):
            if train:
                P, S, l = compiled(P, S, x, y)
                l.block_until_ready()
                jax.block_until_ready((P, S))
                losses.append(float(l))
            else:
                out = compiled(P, x)
                out.block_until_ready()
                if i == 0:
                    rec["output_bytes"] = int(out.nbytes)
                del out  # the caller drops each output before the next call
            steps.append(mem_stats(dev))
        rec["run_seconds"] = round(time.time() - tr, 3)
        rec["losses"] = losses
        stats["steps"] = steps
        stats["end"] = mem_stats(dev)
        rec["nvml_end"] = nvml_used()

        end = stats["end"] or {}
        comp = stats.get("after_compile") or {}
        peak = end.get("peak_bytes_in_use")
        cpeak = comp.get("peak_bytes_in_use")
        rec["peak_bytes_in_use"] = peak
        rec["compile_peak_bytes"] = cpeak
        rec["peak_pool_bytes"] = end.get("peak_pool_bytes")
        if isinstance(peak, int) and isinstance(cpeak, int):
            rec["peak_masked_by_compile"] = cpeak >= peak
        rec["status"] = "ok"
        phase = "done"
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{phase}: {type(e).__name__}: {e}"[:2000]
        rec["traceback"] = traceback.format_exc()[-3000:]
    save()
    return 0 if rec["status"] == "ok" else 1


def probe_main(result_path):
    """Versions, the device, memory_stats keys, and the models' parameter
    shapes against the ONNX files' initializers (onnx, when importable)."""
    rec = {"probe": True, "status": "error"}
    t0 = time.time()
    try:
        import jax
        rec["versions"] = versions(jax)
        dev, rec["device"] = device_info(jax)
        rec["memory_stats"] = mem_stats(dev) if dev is not None else None
        rec["status"] = "ok"
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        rec["traceback"] = traceback.format_exc()[-3000:]
    rec["shapes"] = check_onnx_shapes()
    rec["seconds"] = round(time.time() - t0, 2)
    with open(result_path, "w") as f:
        json.dump(rec, f)
    return 0


def check_onnx_shapes():
    try:
        import onnx
    except Exception as e:  # noqa: BLE001
        return {"skipped": f"no onnx: {e}"[:200]}
    out = {}
    for model in MODELS:
        path = os.path.join(MODEL_DIR, model + ".onnx")
        try:
            m = onnx.load(path, load_external_data=False)
            inits = {t.name: tuple(int(d) for d in t.dims) for t in m.graph.initializer}
            want = dict(param_shapes(model))
            bad = sorted(k for k in set(inits) | set(want) if inits.get(k) != want.get(k))
            out[model] = "match" if not bad else {"mismatch": bad[:20]}
        except Exception as e:  # noqa: BLE001
            out[model] = f"error: {type(e).__name__}: {e}"[:200]
    return out


# --------------------------------------------------------------------------
# The parent
# --------------------------------------------------------------------------

def run_child(argv, env, timeout, result_path):
    """Run a child; returns (result dict or None, rc, seconds, tail of its
    output). The child's output goes on to ours as it comes (the log); at the
    timeout its process group (its own session: the child and anything it
    started, e.g. ptxas) is killed."""
    import threading
    t0 = time.time()
    tail = []
    try:
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    except Exception as e:  # noqa: BLE001
        return None, -1, 0.0, [f"spawn failed: {e}"]

    def pump():
        for raw in iter(p.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line.rstrip("\n"))
            del tail[:-40]

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    rc = None
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, 9)
        except Exception:  # noqa: BLE001
            p.kill()
        p.wait()
        rc = "timeout"
    th.join(timeout=5)
    res = None
    if os.path.exists(result_path):
        try:
            with open(result_path) as f:
                res = json.load(f)
        except Exception:  # noqa: BLE001
            res = None
    return res, rc, round(time.time() - t0, 2), list(tail)


def pack_dumps(dump_root, ids, tar_path, cap=15 << 20):
    """The step modules' dumps, per row, into one tar.gz under `cap` bytes:
    buffer assignments and memory reports first, then optimized HLO."""
    groups = [("*buffer-assignment*", "*memory-usage-report*"), ("*after_optimizations.txt",)]
    picked = []
    for pats in groups:
        for rid in ids:
            d = os.path.join(dump_root, rid)
            for pat in pats:
                for f in sorted(glob.glob(os.path.join(d, pat))):
                    if ("train_step" in f or "infer_step" in f) and f not in [p for p, _ in picked]:
                        picked.append((f, f"{rid}/{os.path.basename(f)}"))
    if not picked:
        return None
    kept = list(picked)
    while kept:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as t:
            for f, arc in kept:
                t.add(f, arcname=arc)
        if buf.tell() <= cap:
            with open(tar_path, "wb") as out:
                out.write(buf.getvalue())
            return {"files": len(kept), "dropped": len(picked) - len(kept), "bytes": buf.tell()}
        kept = kept[: max(0, len(kept) * 3 // 4)]
    return None


def parent_main(a):
    t_start = time.time()
    rows = []
    for n, raw in read_configs(a.configs):
        try:
            rows.append(normalise(raw, n))
        except Exception as e:  # noqa: BLE001
            rid = re.sub(r"[^A-Za-z0-9_.-]", "_", str(raw.get("id", f"row{n}")))
            rows.append({"id": rid, "status": "error", "error": f"config: {e}", "config": raw})
    if a.only:
        rows = [r for r in rows if r.get("id") in a.only]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)) or ".", exist_ok=True)
    work = tempfile.mkdtemp(prefix="jaxkit-")
    dump_root = os.path.join(work, "dump")
    cache_dir = os.path.join(work, "cache")
    os.makedirs(cache_dir, exist_ok=True)
    base_env = dict(os.environ)
    base_env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    base_env.setdefault("PYTHONUNBUFFERED", "1")
    base_env["JAXKIT_CACHE_DIR"] = cache_dir
    base_env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    base_env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    base_env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
    if a.no_cache:
        for k in ("JAXKIT_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR"):
            base_env.pop(k, None)

    def env_for(rid):
        e = dict(base_env)
        if a.dump_hlo:
            d = os.path.join(dump_root, rid)
            os.makedirs(d, exist_ok=True)
            flags = (f"--xla_dump_to={d} --xla_dump_hlo_as_text "
                     f"--xla_dump_hlo_module_re=jit_(train|infer)_step")
            e["XLA_FLAGS"] = (e.get("XLA_FLAGS", "") + " " + flags).strip()
        return e

    out = open(a.out, "a" if a.append else "w")

    def emit(rec):
        out.write(json.dumps(rec, sort_keys=False) + "\n")
        out.flush()

    # the probe: versions, device, and whether XLA accepts the dump flags
    nv0 = nvml_used()
    rp = os.path.join(work, "probe.json")
    res, rc, secs, tail = run_child(["--probe", "--result", rp], env_for("probe"),
                                    min(a.timeout, 90), rp)
    if (res is None or res.get("status") != "ok") and a.dump_hlo:
        log("probe failed with the dump flags; again without them")
        a.dump_hlo = False
        res, rc, secs, tail = run_child(["--probe", "--result", rp], env_for("probe"),
                                    min(a.timeout, 90), rp)
    probe = res or {"probe": True, "status": "error", "error": f"rc {rc}", "tail": tail[-20:]}
    probe.update(nvml_before=nv0, probe_wall_seconds=secs, dump_hlo=a.dump_hlo,
                 argv=sys.argv, budget=a.budget)
    emit(probe)
    log(f"probe: {probe.get('status')} {probe.get('versions', {}).get('jax')} "
        f"{(probe.get('device') or {}).get('device_kind')} in {secs}s")

    done_ids = []
    for r in rows:
        rid = r["id"]
        if r.get("status") == "error":
            emit(r)
            continue
        elapsed = time.time() - t_start
        if elapsed > a.budget:
            emit(dict(r, status="skipped", error=f"time budget {a.budget}s spent ({elapsed:.0f}s)"))
            continue
        timeout = max(15.0, min(a.timeout, a.budget + a.grace - elapsed))
        log(f"{rid}: {json.dumps(r)} (timeout {timeout:.0f}s)")
        rpath = os.path.join(work, rid + ".json")
        res, rc, secs, tail = run_child(["--child", json.dumps(r), "--result", rpath],
                                        env_for(rid), timeout, rpath)
        if res is None:
            res = dict(r, status="timeout" if rc == "timeout" else "error",
                       error=f"child exited {rc} without a result", tail=tail[-25:])
        res["rc"] = rc
        res["wall_seconds"] = secs
        if res.get("status") != "ok" and "tail" not in res:
            res["tail"] = tail[-25:]
        done_ids.append(rid)
        # a compile-time peak hides the run's: run again from the cache
        elapsed = time.time() - t_start
        if (res.get("status") == "ok" and res.get("peak_masked_by_compile") and not a.no_cache
                and elapsed + 15 < a.budget + a.grace):
            log(f"{rid}: the compile peak hides the run's; again from the compilation cache")
            rpath2 = os.path.join(work, rid + "-rerun.json")
            res2, rc2, secs2, tail2 = run_child(
                ["--child", json.dumps(r), "--result", rpath2], env_for(rid),
                max(15.0, min(a.timeout, a.budget + a.grace - elapsed)), rpath2)
            if res2 is None:
                res2 = {"status": "error", "error": f"child exited {rc2}", "tail": tail2[-15:]}
            res["rerun"] = {k: res2.get(k) for k in (
                "status", "error", "compile_seconds", "peak_bytes_in_use", "compile_peak_bytes",
                "peak_masked_by_compile", "peak_pool_bytes", "stats", "memory_analysis", "seconds")}
            res["rerun"]["wall_seconds"] = secs2
        emit(res)
        log(f"{rid}: {res.get('status')} peak {res.get('peak_bytes_in_use')} temp "
            f"{(res.get('memory_analysis') or {}).get('temp_size_in_bytes')} in {secs}s"
            + (f" ({res.get('error')})" if res.get("error") else ""))
    out.close()
    if a.dump_hlo:
        tar_path = a.hlo_tar or re.sub(r"(\.jsonl?)?$", "", a.out, count=1) + "-hlo.tar.gz"
        try:
            info = pack_dumps(dump_root, done_ids, tar_path)
            log(f"HLO dumps: {info} -> {tar_path if info else 'none'}")
        except Exception as e:  # noqa: BLE001
            log(f"packing the HLO dumps failed: {e}")
    log(f"all done in {time.time() - t_start:.1f}s")
    return 0


def dry_run(path):
    """Every row parses and normalises; ids are unique; per row the
    parameter, optimizer-state and batch bytes the child will allocate."""
    ids, bad = set(), 0
    for n, raw in read_configs(path):
        try:
            c = normalise(raw, n)
            if c["id"] in ids:
                raise ValueError(f"duplicate id {c['id']}")
            ids.add(c["id"])
        except Exception as e:  # noqa: BLE001
            print(f"line {n}: {e}")
            bad += 1
            continue
        esize = 4 if c["dtype"] == "float32" else 2
        nparam = sum(math.prod(s) for _, s in param_shapes(c["model"]))
        nstate = {"sgd": 0, "sgd-momentum": 1, "adam": 2, None: 0}[c["optimizer"]]
        xs, xkind, ys, _ = batch_spec(c["model"], c["batch"], c.get("seq"))
        xb = math.prod(xs) * (4 if xkind == "ids" else esize)
        yb = math.prod(ys) * 4 if c["mode"] == "train" else 0
        print(f"{c['id']:<20} {c['model']:<16} b{c['batch']:<5} {c['mode']:<5} "
              f"{str(c['optimizer']):<12} {c['dtype']:<8} donate={c['donate']!s:<5} "
              f"params {nparam * esize / 2**20:8.1f} MiB  state {nstate * nparam * esize / 2**20:8.1f} MiB  "
              f"batch {(xb + yb) / 2**20:6.2f} MiB")
    print(f"{len(ids)} rows ok, {bad} bad")
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--budget", type=float, default=140.0,
                    help="seconds after which no further configuration starts (default 140)")
    ap.add_argument("--grace", type=float, default=25.0,
                    help="a started configuration may run this far past the budget (default 25)")
    ap.add_argument("--timeout", type=float, default=75.0, help="per configuration (default 75)")
    ap.add_argument("--only", nargs="*", help="only these row ids")
    ap.add_argument("--append", action="store_true", help="append to OUT")
    ap.add_argument("--no-dump-hlo", dest="dump_hlo", action="store_false",
                    help="do not dump and pack XLA's HLO / buffer assignment")
    ap.add_argument("--hlo-tar", help="where to pack the dumps (default OUT's stem + -hlo.tar.gz)")
    ap.add_argument("--no-cache", action="store_true",
                    help="no persistent compilation cache (and so no rerun of masked peaks)")
    ap.add_argument("--dry-run", action="store_true",
                    help="check CONFIGS and print each row's sizes; no jax, no numpy needed")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        return child_main(json.loads(a.child), a.result)
    if a.probe:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        return probe_main(a.result)
    if a.dry_run:
        return dry_run(a.configs)
    if not a.configs or not a.out:
        ap.error("CONFIGS and OUT are required")
    return parent_main(a)


if __name__ == "__main__":
    sys.exit(main())
