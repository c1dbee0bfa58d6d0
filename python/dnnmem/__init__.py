"""dnnmem: how much device memory a deep-learning job takes, before it runs.

    import dnnmem
    r = dnnmem.estimate("resnet50.onnx", mode="train", batch_size=32, gpu="A100-80GB")
    print(r.peak, r.verdict, r.breakdown["activations"])
    dnnmem.max_batch("resnet50.onnx", mode="train", gpu="A100-80GB")

A model is a path (ONNX, a HuggingFace config.json or model directory, Keras, MXNet, a
captured step .dnnmem), bytes of one, or a loaded Model. Options take the CLI's names
(docs/options.md), with '_' for '-': batch_size=32 is --batch-size 32; True is a flag;
a list repeats a repeatable option (freeze=["*.bias", "fc.*"]). Torch is not needed
here; dnnmem.torch captures a PyTorch model's step (it imports torch).
"""
import ctypes
import json
import os
from dataclasses import dataclass
from typing import Dict, Optional

from . import _lib
from ._lib import lib
from .host import host_cpu_isa
from .result import Advice, Module, Result, Tensor, TimelinePoint

__all__ = ["DnnmemError", "Model", "Result", "Tensor", "TimelinePoint", "Advice", "Module", "Gpu",
           "Comparison", "estimate", "max_batch", "max_seq_len", "advise", "compare", "gpus", "load",
           "host_cpu_isa"]
__version__ = "0.1.1"

# the CLI's exit code of each status family (cli/main.c, exit_code; README "Exit codes")
_EXIT = {0: 0, 10: 2, 41: 2, 20: 3, 30: 3, 31: 3, 40: 3, 50: 4, 61: 1, 60: 5, 70: 5}


class DnnmemError(Exception):
    """A failed call: `message` is the library's one line, `status` its enum dnnmem_status
    (10 usage, 20 I/O, 30 parse, 31 model, 40 shape, 41 unbound, 50 unsupported, 60 host
    memory, 61 does not fit, 70 internal), `exit_code` what the CLI exits with."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message
        self.exit_code = _EXIT.get(status, 5)
        self.status_name = lib.dnnmem_status_name(status).decode()


def _check(status, err):
    if status != 0:
        raise DnnmemError(status, err.message.decode("utf-8", "replace"))


class Model:
    """A loaded model (dnnmem_model); load once, estimate many times."""

    def __init__(self, source, name=None):
        err = _lib.Error()
        h = ctypes.c_void_p()
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            self.path = name or "<buffer>"
            st = lib.dnnmem_model_load_buffer(data, len(data), self.path.encode(), ctypes.byref(h),
                                              ctypes.byref(err))
        else:
            self.path = os.fspath(source)
            st = lib.dnnmem_model_load(self.path.encode(), ctypes.byref(h), ctypes.byref(err))
        _check(st, err)
        self._h = h

    def close(self):
        if getattr(self, "_h", None):
            lib.dnnmem_model_free(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"dnnmem.Model({self.path!r})"


def load(source, name=None):
    """Load a model file (or bytes of one) for several estimates."""
    return Model(source, name)


def _model(m):
    return m if isinstance(m, Model) else Model(m)


class _Config:
    """A dnnmem_config and its option store, set by the CLI's option names."""

    def __init__(self, options, timeline=False):
        self.cfg = lib.dnnmem_config_new()
        self.opts = lib.dnnmem_options_new()
        if not self.cfg or not self.opts:
            self.close()
            raise MemoryError("dnnmem: out of memory")
        lib.dnnmem_config_set_timeline(self.cfg, timeline)
        err = _lib.Error()
        for key, value in options.items():
            name = key.replace("_", "-")
            if not lib.dnnmem_option_find(name.encode()):
                name = key  # an alias spelt with '_' (batch_size)
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if v is None or v is False:
                    continue
                text = None if v is True else str(v)
                _check(lib.dnnmem_config_set(self.cfg, self.opts, name.encode(),
                                             text.encode() if text is not None else None,
                                             ctypes.byref(err)), err)
        _check(lib.dnnmem_config_check(self.cfg, self.opts, ctypes.byref(err)), err)

    def close(self):
        if self.cfg:
            lib.dnnmem_config_free(self.cfg)
        if self.opts:
            lib.dnnmem_options_free(self.opts)
        self.cfg = self.opts = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _result(rh, mh):
    """A Result from a dnnmem_result (freed here)."""
    try:
        js = json.loads(_lib.to_string(lib.dnnmem_report_json, rh, mh))
        csv = _lib.to_string(lib.dnnmem_report_timeline_csv, rh)
        text = _lib.to_string(lib.dnnmem_report_text, rh, mh)
    finally:
        lib.dnnmem_result_free(rh)
    return Result.from_report(js, csv, text)


def estimate(model, **options):
    """Estimate one job: a Result (peak, breakdown, live at peak, verdict, advice when it
    does not fit, timeline). `model`: a path, bytes or a Model; options by the CLI's names."""
    m = _model(model)
    with _Config(options, timeline=True) as c:
        err = _lib.Error()
        rh = ctypes.c_void_p()
        _check(lib.dnnmem_estimate(m._h, c.cfg, ctypes.byref(rh), ctypes.byref(err)), err)
        r = _result(rh, m._h)
        if r.verdict == "does not fit":
            r.advice = _advise(m, c)
    return r


def _advise(m, c):
    err = _lib.Error()
    arr = ctypes.POINTER(_lib.Advice)()
    n = ctypes.c_size_t()
    _check(lib.dnnmem_advise(m._h, c.cfg, ctypes.byref(arr), ctypes.byref(n), ctypes.byref(err)), err)
    try:
        return [Advice(arr[i].change.decode(), int(arr[i].total_bytes),
                       lib.dnnmem_verdict_name(arr[i].verdict).decode(), int(arr[i].margin_bytes),
                       int(arr[i].cost_rank), arr[i].cost.decode()) for i in range(n.value)]
    finally:
        lib.dnnmem_advice_free(arr, n)


def advise(model, **options):
    """Changes that would make a job that does not fit fit (a capacity: gpu= or memory=)."""
    m = _model(model)
    with _Config(options) as c:
        return _advise(m, c)


@dataclass
class Gpu:
    """A GPU of the catalogue (struct dnnmem_gpu; src/report/gpus.def sources each figure)."""
    name: str
    device_name: str
    total_bytes: int
    compute_capability: int
    reserved_bytes: int
    source: str


def gpus():
    """The built-in GPU catalogue, as `dnnmem gpus` lists it (names for gpu=)."""
    out = []
    for i in range(lib.dnnmem_gpu_count()):
        g = lib.dnnmem_gpu_at(i).contents
        out.append(Gpu(g.name.decode(), (g.device_name or b"").decode(), int(g.total_bytes),
                       int(g.compute_capability), int(g.reserved_bytes), (g.source or b"").decode()))
    return out


@dataclass
class Comparison:
    """Two estimates side by side (dnnmem compare): `change` is B - A by kind."""
    a: Result
    b: Result
    change: Dict[str, int]
    text: str


def compare(model, a=None, b=None, model_b=None, label_a="A", label_b="B"):
    """Estimate `model` under options `a` and `model_b` (default: the same model) under
    options `b` (dicts by the CLI's names), as `dnnmem compare` prints them."""
    ma = _model(model)
    mb = _model(model_b) if model_b is not None else ma
    handles = []
    try:
        for m, opts in ((ma, a or {}), (mb, b or {})):
            with _Config(opts, timeline=True) as c:
                err = _lib.Error()
                rh = ctypes.c_void_p()
                _check(lib.dnnmem_estimate(m._h, c.cfg, ctypes.byref(rh), ctypes.byref(err)), err)
                handles.append(rh)
        text = _lib.to_string(lib.dnnmem_report_compare, handles[0], label_a.encode(), handles[1],
                              label_b.encode())
        ra = _result(handles[0], ma._h)
        handles[0] = None
        rb = _result(handles[1], mb._h)
        handles[1] = None
    finally:
        for h in handles:
            if h:
                lib.dnnmem_result_free(h)
    change = {k: rb.breakdown.get(k, 0) - v for k, v in ra.breakdown.items()}
    change["total"] = rb.peak - ra.peak
    return Comparison(ra, rb, change, text)


def _seq_dim(m: Model) -> Optional[str]:
    """The model's sequence dim, as the CLI's max-seq-len picks it."""
    i = 0
    while True:
        name = lib.dnnmem_model_symbol(m._h, i)
        if name is None:
            return None
        name = name.decode()
        if "seq" in name and "past" not in name and "total" not in name:
            return name
        i += 1


def max_seq_len(model, limit=1 << 20, dim=None, **options):
    """The largest sequence length that fits the capacity given (gpu= or memory=): the
    model's sequence dim (or `dim`), by the library's exact search."""
    m = _model(model)
    dim = dim or _seq_dim(m)
    if dim is None:
        raise DnnmemError(10, f"{m.path} has no sequence dim; name one with dim=")
    return max_batch(m, limit=limit, dim=dim, **options)


def max_batch(model, limit=65536, dim=None, **options):
    """The largest batch (or dim `dim`) that fits the capacity given (gpu= or memory=), by the
    library's exact search: an int, 0 when even 1 does not fit."""
    m = _model(model)
    with _Config(options) as c:
        err = _lib.Error()
        value = ctypes.c_int64()
        at, nxt = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.dnnmem_max_dim(m._h, c.cfg, dim.encode() if dim else None, limit,
                                  ctypes.byref(value), ctypes.byref(at), ctypes.byref(nxt),
                                  ctypes.byref(err)), err)
        lib.dnnmem_result_free(at)
        lib.dnnmem_result_free(nxt)
        return int(value.value)
