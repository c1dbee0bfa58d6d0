"""dnnmem.torch.capture against the real thing: the same step run on the CPU, its peak taken
from the profiler's allocation events as tools/oracle/zoo.py measures (live storages before,
plus the running sum of every CPU allocation event), must equal the capture's estimate with
--device cpu to the byte for models whose CPU kernels allocate nothing inside an op."""
import gc
import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import dnnmem  # noqa: E402
import dnnmem.torch as dt  # noqa: E402
from conftest import ROOT  # noqa: E402


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(inplace=True),
                               torch.nn.Linear(128, 96), torch.nn.GELU(), torch.nn.Dropout(0.1),
                               torch.nn.Linear(96, 10))


def sgd(p):
    return torch.optim.SGD(p, lr=0.01, momentum=0.9)


def adam(p):
    return torch.optim.Adam(p, lr=1e-3)


def storage_bytes(ts):
    """The distinct storages of the tensors live before the step (zoo.py's bytes_before:
    parameters, buffers, input, target)."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in ts}.values())


def step_peak(model, x, y, opt, steps, grad_accum=1):
    """The running maximum of the CPU allocation events (torch.profiler, as zoo.py measures
    it) over `steps` training steps of grad_accum micro-batches each, loss / grad_accum (as
    dnnmem.torch.capture runs them), or one no_grad forward without an optimizer."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if opt is None:
            with torch.no_grad():
                out = model(x)
            del out
        for _ in range(steps if opt else 0):
            opt.zero_grad()
            for _ in range(grad_accum):
                out = model(x)
                loss = F.cross_entropy(out, y)
                if grad_accum > 1:
                    loss = loss / grad_accum
                loss.backward()
            opt.step()
            del out, loss
    evs = sorted((int(e.start_ns()), i, int(e.nbytes())) for i, e in
                 enumerate(prof.profiler.kineto_results.events()) if e.nbytes() != 0)
    run = peak = 0
    for _, _, nb in evs:
        run += nb
        peak = max(peak, run)
    return peak


def measure(build, batch, optimizer, steps=2, grad_accum=1):
    """The peak of the step on the CPU, with what lived before it (zoo.py's bytes_before)."""
    torch.set_num_threads(1)
    model = build()
    model.train(optimizer is not None)
    x = torch.randn(batch, 64)
    y = torch.randint(0, 10, (batch,))
    if optimizer is None:
        y = x[:0]  # no target in inference: an empty view adds no bytes
    opt = optimizer(model.parameters()) if optimizer else None
    gc.collect()
    before = storage_bytes([*model.parameters(), *model.buffers(), x, y])
    return before + step_peak(model, x, y, opt, steps, grad_accum)


def capture(build, batch, optimizer, steps=2):
    with torch.device("meta"):
        model = build()
    x = torch.empty(batch, 64, device="meta")
    if optimizer is None:
        return dt.capture(model, x)
    y = torch.empty(batch, dtype=torch.long, device="meta")
    return dt.capture(model, x, target=y, loss=F.cross_entropy, optimizer=optimizer, steps=steps)


@pytest.mark.parametrize("optimizer", [None, sgd, adam], ids=["infer", "sgd", "adam"])
@pytest.mark.parametrize("batch", [1, 8])
def test_capture_equals_cpu_measurement(batch, optimizer):
    cap = capture(mlp, batch, optimizer)
    est = cap.estimate(device="cpu").peak
    # Known miss (docs/python.md): Adam's `step_t += 1` on its CPU step counter wraps the
    # Python 1 in an 8-byte double tensor and casts it to a 4-byte float32 copy inside
    # aten.add_ (wrapped_scalar_tensor, TensorIterator's cast), below the dispatch a capture
    # sees: 12 bytes at the peak of the optimizer step.
    missed = 12 if optimizer is adam else 0
    assert est == measure(mlp, batch, optimizer) - missed


def test_capture_file_roundtrip(tmp_path):
    cap = capture(mlp, 4, sgd)
    path = cap.save(str(tmp_path / "step.dnnmem"))
    data = json.load(open(path))
    assert data["format"] == "dnnmem-capture" and data["version"] == 2 and data["mode"] == "train"
    assert data["batch"] == 4 and data["iterations"] == 2
    kinds = {s["name"]: s["kind"] for s in data["storages"]}
    assert kinds["0.weight"] == "weight" and kinds["input.0"] == "input" and kinds["target"] == "target"
    assert kinds["0.weight.grad"] == "gradient" and kinds["0.weight.grad@2"] == "gradient"
    assert kinds["0.weight.momentum_buffer"] == "optimizer"
    assert data["steps"][0]["phase"] == "setup"
    phases = [s["phase"] for s in data["steps"]]
    assert phases.index("forward") < phases.index("loss") < phases.index("backward") < phases.index("optimizer")
    # relu_ writes its input in place and autograd saves its output
    relu = next(s for s in data["steps"] if s.get("op") == "aten.relu_.default")
    assert relu["write"] == relu["in"] and relu["save"] == relu["in"] and "alloc" not in relu
    # a file estimate equals the in-memory one
    assert dnnmem.estimate(path, device="cpu").peak == cap.estimate(device="cpu").peak
    schema = os.path.join(ROOT, "docs", "schema", "capture.schema.json")
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(data, json.load(open(schema)))


def test_capture_refuses_item_naming_the_op():
    class Bad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x) * self.fc(x).sum().item()

    with torch.device("meta"):
        m = Bad()
    with pytest.raises(dt.CaptureError, match=r"aten._local_scalar_dense.default in the top level \(forward\)"):
        dt.capture(m, torch.empty(2, 4, device="meta"))


def test_real_weights_are_copied_to_meta():
    m = mlp()  # on the CPU
    cap = dt.capture(m, torch.randn(2, 64))
    assert all(p.device.type == "cpu" for p in m.parameters())
    assert cap.estimate(device="cpu").peak == capture(mlp, 2, None).estimate(device="cpu").peak


def test_python_m_dnnmem_capture(tmp_path):
    import subprocess
    import sys
    (tmp_path / "mymodels.py").write_text(
        "import torch\n"
        "def mlp():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(inplace=True),\n"
        "        torch.nn.Linear(128, 96), torch.nn.GELU(), torch.nn.Dropout(0.1), torch.nn.Linear(96, 10))\n")
    out = tmp_path / "step.dnnmem"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "dnnmem", "capture", "mymodels:mlp", "--input", "8,64",
                        "--mode", "train", "--optimizer", "sgd-momentum", "-o", str(out)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    # the same step as test_capture_equals_cpu_measurement[8-sgd], measured on the CPU
    assert dnnmem.estimate(str(out), device="cpu").peak == measure(mlp, 8, sgd)


def convnet(kind):
    """Small conv nets whose CPU kernels allocate inside the ops (the replay's oneDNN and THNN
    rules, src/schedule/cpuconv.c): dense (a "first" 3-channel conv, a strided 3x3, a 1x1),
    depthwise with a 1x1, and a channels-last model (weights and input)."""
    nn = torch.nn
    torch.manual_seed(0)
    if kind == "dense":
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.ReLU(),
                             nn.Conv2d(16, 24, 3, stride=2, padding=1), nn.ReLU(),
                             nn.Conv2d(24, 24, 1), nn.Flatten(), nn.Linear(24 * 8 * 8, 10))
    if kind == "depthwise":
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(),
                             nn.Conv2d(16, 32, 1, bias=False), nn.Flatten(), nn.Linear(32 * 16 * 16, 10))
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 24, 3, padding=1),
                         nn.Flatten(), nn.Linear(24 * 16 * 16, 10)).to(memory_format=torch.channels_last)


def image(kind, batch, device=None):
    x = torch.randn(batch, 3, 16, 16) if device is None else torch.empty(batch, 3, 16, 16, device=device)
    return x.to(memory_format=torch.channels_last) if kind == "channels-last" else x


def measure_conv(kind, batch, optimizer, steps=2):
    torch.set_num_threads(1)
    model = convnet(kind)
    model.train(optimizer is not None)
    x, y = image(kind, batch), torch.randint(0, 10, (batch,))
    opt = optimizer(model.parameters()) if optimizer else None
    gc.collect()
    before = storage_bytes([*model.parameters(), *model.buffers(), x] + ([y] if opt else []))
    return before + step_peak(model, x, y, opt, steps)


# Measured with torch 2.14.1 (the rules' release) and 2.13.0 alike, one thread: the capture's
# estimate minus the real peak, with --cpu-isa the host's (oneDNN's blocked layouts differ:
# 16 floats a channel block on AVX-512, 8 on AVX2). Known misses below the dispatch, not
# traced yet: the dense net's training at batch 2 on AVX-512 (224 B; exact on an AVX2 EPYC,
# 2026-12-02) and the channels-last one's on both (96 B: a bias-sized buffer of the backward).
HOST_ISA = dnnmem.host_cpu_isa()
CONV_MISS = {("dense", 2, "sgd", "avx512"): -224, ("channels-last", 2, "sgd", "avx512"): -96,
             ("channels-last", 2, "sgd", "avx2"): -96}


@pytest.mark.parametrize("optimizer", [None, sgd], ids=["infer", "sgd"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("kind", ["dense", "depthwise", "channels-last"])
@pytest.mark.skipif(HOST_ISA is None, reason="oneDNN's layouts are modelled for x64 AVX2/AVX-512 only")
def test_conv_capture_equals_cpu_measurement(kind, batch, optimizer):
    with torch.device("meta"):
        model = convnet(kind)
    x = image(kind, batch, "meta")
    kw = {}
    if optimizer:
        kw = dict(target=torch.empty(batch, dtype=torch.long, device="meta"), loss=F.cross_entropy,
                  optimizer=optimizer)
    est = dt.capture(model, x, **kw).estimate(device="cpu", cpu_threads=1, cpu_isa=HOST_ISA).peak
    miss = CONV_MISS.get((kind, batch, "sgd" if optimizer else "infer", HOST_ISA), 0)
    assert est - measure_conv(kind, batch, optimizer) == miss
