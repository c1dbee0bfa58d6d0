"""Sizes as functions of the dims (dnnmem.dims): a capture fitted at one batch (and sequence
length) and estimated at another must equal the capture made at that other value, to the
byte, on the CPU and on CUDA; and equal the real CPU measurement where the direct capture
does. Steps whose sizes are not such functions are refused, naming why."""
import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import dnnmem  # noqa: E402
import dnnmem.dims as dd  # noqa: E402
import dnnmem.torch as dt  # noqa: E402
from conftest import ROOT  # noqa: E402
from test_capture import adam, measure, mlp, sgd  # noqa: E402


def cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(inplace=True),
        torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.GELU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(32, 10))


def step(model, batch, dims=None, optimizer=adam, features=(3, 32, 32)):
    for p in model.parameters():
        p.grad = None
    x = torch.empty(batch, *features, device="meta")
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    return dt.capture(model, x, target=y, loss=F.cross_entropy, optimizer=optimizer, dims=dims)


def peaks(cap, **options):
    cpu = cap.estimate(device="cpu", **options)
    cuda = cap.estimate(gpu="A100-80GB", **options)
    return cpu.peak_allocated, cuda.peak_allocated, cuda.peak


def test_fit_of_exact_polynomials():
    # 2 + 3b + 5s + 7bs + 11s^2 on the 3 x 3 grid gives back its coefficients
    xs = [[2, 3, 4], [8, 12, 16]]
    vals = {(i, j): 2 + 3 * b + 5 * s + 7 * b * s + 11 * s * s
            for i, b in enumerate(xs[0]) for j, s in enumerate(xs[1])}
    assert dd.fit(xs, vals) == {(0, 0): 2, (1, 0): 3, (0, 1): 5, (1, 1): 7, (0, 2): 11}
    assert dd.fit([[1, 2, 3]], {(0,): 1, (1,): 2, (2,): 4}) is None  # (b^2 - b + 2) / 2


def test_fitted_cnn_equals_direct_captures():
    with torch.device("meta"):
        model = cnn()
    fitted = step(model, 2, {"batch": 0})
    d = fitted.data
    assert d["version"] == 2
    assert d["dims"] == [{"name": "batch", "value": 2, "min": 1, "fitted": [2, 3, 4], "checked": [1, 6]}]
    conv = next(s["conv"] for s in d["steps"] if s.get("op") == "aten.convolution.default")
    assert conv["input_poly"][0] == [[1, 1]] and "weight_poly" not in conv
    for b in (1, 5, 9):
        direct = step(model, b)
        assert peaks(fitted, batch_size=b) == peaks(direct)


def test_fitted_mlp_equals_cpu_measurement():
    with torch.device("meta"):
        model = mlp()
    fitted = step(model, 2, {"batch": 0}, optimizer=sgd, features=(64,))
    assert fitted.estimate(device="cpu", batch_size=7).peak == measure(mlp, 7, sgd)


def test_step_that_changes_with_the_batch_is_refused():
    class Branch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            y = self.fc(x)
            return y * 2 if x.shape[0] > 3 else y

    with torch.device("meta"):
        model = Branch()
    with pytest.raises(dt.CaptureError, match=r"dims: the step at batch=4 differs from the captured "
                                              r"one at step 3 \(aten.mul.Tensor in the top level, where it ran "
                                              r"aten._log_softmax.default in the top level\)"):
        step(model, 2, {"batch": 0}, features=(8,))


def test_size_that_is_no_polynomial_is_refused():
    class Pad(torch.nn.Module):  # pads the batch to a multiple of 4: 4 at 2, 3, 4; 8 at 6
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(F.pad(x, (0, 0, 0, (-x.shape[0]) % 4)))[: x.shape[0]]

    with torch.device("meta"):
        model = Pad()
    with pytest.raises(dt.CaptureError, match=r"at batch=6 the step's storage '.*' \(bytes\): \d+, "
                                              r"the fit says \d+: its sizes are not polynomials"):
        step(model, 2, {"batch": 0}, features=(8,))


def test_batch_one_that_runs_differently_sets_the_least_value(tmp_path):
    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x.clone() if x.shape[0] == 1 else x)

    with torch.device("meta"):
        model = One()
    fitted = step(model, 2, {"batch": 0}, features=(8,))
    assert fitted.data["dims"][0]["min"] == 2 and fitted.data["dims"][0]["checked"] == [6]
    with pytest.raises(dnnmem.DnnmemError, match="the capture's sizes hold for batch >= 2"):
        fitted.estimate(device="cpu", batch_size=1)
    assert peaks(fitted, batch_size=3) == peaks(step(model, 3, features=(8,)))


def test_python_m_dnnmem_capture_dims(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "mlp.dnnmem"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.path.dirname(__file__))
    subprocess.run([sys.executable, "-m", "dnnmem", "capture", "test_capture:mlp", "--input", "4,64",
                    "--mode", "train", "--dims", "batch=0", "-o", str(out)], check=True, env=env)
    data = json.load(open(out))
    assert data["dims"][0]["name"] == "batch" and data["dims"][0]["value"] == 4
    r = subprocess.run([os.environ.get("DNNMEM_CLI", os.path.join(ROOT, "build", "dnnmem")), "max-batch",
                        str(out), "--gpu", "T4"], capture_output=True, text=True)
    assert r.returncode == 0 and "largest batch size that fits T4" in r.stdout
