#!/usr/bin/env python3
"""Tiny graphs whose ReLU modules say whether they ran in place (docs/inplace.md).

    /usr/bin/python3 tools/export_inplace_fixtures.py           # torch 1.13: ...-yes.onnx
    /tmp/zoo-venv/bin/python tools/export_inplace_fixtures.py   # torch 2.x: ...-mixed.onnx

The model: b = act1(x * 2.0), c = act2(b), act1 and act2 nn.ReLU modules, exported by
the TorchScript exporter with export_modules_as_functions={nn.ReLU} (opset 15), so each
ReLU is a call of the model-local function torch.nn.modules.activation::ReLU carrying
the module's `inplace` (torch/onnx/utils.py, _get_module_attributes), and without
(opset 14, the plain file).  torch 1.13 writes inplace-modules-yes (both in place),
2.x inplace-modules-mixed (act1 in place, act2 not) and its plain twin.  Each file's
peak under torch.no_grad on a [1, 4, 16, 16] input is measured here with the profiler's
allocation events (as tools/oracle/zoo.py does) and printed; tests/cli/run.sh checks
dnnmem's against them.
"""
import io
import os
import sys
import warnings

import onnx
import torch
import torch.nn as nn

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "models", "onnx")


class M(nn.Module):
    def __init__(self, ip1, ip2):
        super().__init__()
        self.act1 = nn.ReLU(inplace=ip1)
        self.act2 = nn.ReLU(inplace=ip2)

    def forward(self, x):
        return self.act2(self.act1(x * 2.0))


def export(m, path, modules):
    buf = io.BytesIO()
    kw = dict(opset_version=15, export_modules_as_functions={nn.ReLU}) if modules else \
        dict(opset_version=14)
    extra = {} if torch.__version__ < "2" else dict(dynamo=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(1, 4, 16, 16),), buf, input_names=["input"],
                          output_names=["output"], dynamic_axes={"input": {0: "batch"}},
                          **kw, **extra)
    onnx.save(onnx.load_from_string(buf.getvalue()), path)


def measured_peak(m):
    x = torch.randn(1, 4, 16, 16)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                 profile_memory=True) as prof:
        out = m(x)
        del out
    ev = sorted((e for e in prof.profiler.kineto_results.events() if e.nbytes() != 0),
                key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us())
    run = peak = 0
    for e in ev:
        run += e.nbytes()
        peak = max(peak, run)
    return x.untyped_storage().nbytes() if hasattr(x, "untyped_storage") else \
        x.storage().nbytes(), peak


def main():
    old = torch.__version__ < "2"
    todo = [("inplace-modules-yes", (True, True), True)] if old else \
        [("inplace-modules-mixed", (True, False), True), ("inplace-plain-mixed", (True, False), False)]
    for name, ips, modules in todo:
        m = M(*ips).eval()
        export(m, os.path.join(OUT, name + ".onnx"), modules)
        before, peak = measured_peak(m)
        print(f"{name}: torch {torch.__version__}: input {before} B, peak {before + peak} B")


if __name__ == "__main__":
    sys.exit(main())
