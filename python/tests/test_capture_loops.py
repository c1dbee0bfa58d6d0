"""Training loops as they run, captured and checked against the real CPU step (the
profiler's allocation events: test_capture.measure): activation checkpointing (both
torch.utils.checkpoint implementations, with the CPU RNG states they keep) and gradient
accumulation (autocast: test_capture_autocast.py)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import dnnmem.torch as dt  # noqa: E402
from test_capture import adam, measure, mlp, sgd  # noqa: E402


class Blocks(torch.nn.Module):
    """Three residual MLP blocks, each run under torch.utils.checkpoint."""

    def __init__(self, reentrant=False, preserve_rng=True):
        super().__init__()
        torch.manual_seed(0)
        self.inp = torch.nn.Linear(64, 128)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 128))
            for _ in range(3))
        self.out = torch.nn.Linear(128, 10)
        self.kw = {"use_reentrant": reentrant, "preserve_rng_state": preserve_rng}

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = x + checkpoint(b, x, **self.kw)
        return self.out(x)


def captured(build, batch, optimizer, **kw):
    with torch.device("meta"):
        model = build()
    x = torch.empty(batch, 64, device="meta")
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    return dt.capture(model, x, target=y, loss=F.cross_entropy, optimizer=optimizer, **kw)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("preserve_rng", [True, False], ids=["rng", "no-rng"])
def test_checkpoint_equals_cpu_measurement(reentrant, preserve_rng):
    def build():
        return Blocks(reentrant, preserve_rng)
    cap = captured(build, 16, sgd)
    rng = [s for s in cap.data["storages"] if s["name"].startswith("torch.get_rng_state")]
    # preserve_rng_state: each checkpointed forward keeps one CPU generator state (5056 B),
    # and fork_rng takes one more at each recomputation: 3 blocks x 2 x 2 iterations
    assert len(rng) == (12 if preserve_rng else 0)
    assert all(s["bytes"] == 5056 and s["device"] == "host" for s in rng)
    assert cap.estimate(device="cpu").peak == measure(build, 16, sgd)


@pytest.mark.parametrize("optimizer", [sgd, adam], ids=["sgd", "adam"])
def test_grad_accumulation_equals_cpu_measurement(optimizer):
    cap = captured(mlp, 8, optimizer, grad_accum=3)
    assert cap.data["grad_accum"] == 3
    # Adam's 12 B (test_capture.test_capture_equals_cpu_measurement)
    missed = 12 if optimizer is adam else 0
    assert cap.estimate(device="cpu").peak == measure(mlp, 8, optimizer, grad_accum=3) - missed
    assert "3 micro-batches per optimizer step" in cap.estimate(device="cpu").text
