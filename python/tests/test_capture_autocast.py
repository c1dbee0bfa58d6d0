"""Mixed precision captured as it runs: torch.autocast's own kernels run on FakeTensors of
the device (dnnmem.torch.capture(device=..., autocast=...)), so the capture holds autocast's
casts (aten._to_copy), its cast cache (the weights' 16-bit copies, kept until the autocast
region ends) and what autograd saves of them. Checked against the real CPU step under
torch.autocast("cpu", dtype=torch.bfloat16), measured as test_capture.measure measures (the
profiler's allocation events and the storages live before); "cuda" autocast (no GPU here):
the casts its policy prescribes, unvalidated against a GPU."""
import gc
import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import dnnmem  # noqa: E402
import dnnmem.torch as dt  # noqa: E402
from conftest import ROOT  # noqa: E402
from test_capture import adam, convnet, image, mlp, sgd, storage_bytes  # noqa: E402

BF16 = ("cpu", torch.bfloat16)
HOST_ISA = dnnmem.host_cpu_isa()


def amp_peak(model, x, y, opt, steps=2, amp=BF16):
    """The real step's peak (test_capture.step_peak's method) with each forward and loss
    under torch.autocast(*amp), as the AMP recipe writes the loop; without an optimizer one
    no_grad forward under it."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if opt is None:
            with torch.no_grad(), torch.autocast(amp[0], dtype=amp[1]):
                out = model(x)
            del out
        for _ in range(steps if opt else 0):
            opt.zero_grad()
            with torch.autocast(amp[0], dtype=amp[1]):
                out = model(x)
                loss = F.cross_entropy(out, y)
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


def measure(build, x, batch, optimizer):
    torch.set_num_threads(1)
    model = build()
    model.train(optimizer is not None)
    y = torch.randint(0, 10, (batch,))
    opt = optimizer(model.parameters()) if optimizer else None
    gc.collect()
    before = storage_bytes([*model.parameters(), *model.buffers(), x] + ([y] if opt else []))
    return before + amp_peak(model, x, y, opt)


def captured(build, x, batch, optimizer, **kw):
    with torch.device("meta"):
        model = build()
    if optimizer:
        kw.update(target=torch.empty(batch, dtype=torch.long, device="meta"), loss=F.cross_entropy,
                  optimizer=optimizer)
    return dt.capture(model, x, **kw)


# the real CPU step minus nothing: the capture's estimate equals it to the byte, but for
# Adam's 12 B (its CPU step counter's wrapped scalar, docs/python.md). On AVX2 a bfloat16
# addmm is ATen's own gemm; with AVX-512 (mkldnn_bf16_device_check(), ATen/native/mkldnn/
# Utils.h) it is oneDNN's matmul, which allocates a scratchpad per call through the CPU
# allocator (measured on an AMX Xeon, torch 2.13.0: 7168 B for [8,64]x[64,128], 13312 B for
# one row of it, 37888 B at 128x128x128), not modelled
@pytest.mark.skipif(HOST_ISA != "avx2", reason="bfloat16 matmuls' kernels modelled on AVX2 only "
                    "(oneDNN's matmul scratchpad on AVX-512 is not)")
@pytest.mark.parametrize("optimizer", [None, sgd, adam], ids=["infer", "sgd", "adam"])
@pytest.mark.parametrize("batch", [1, 8])
def test_bf16_mlp_equals_cpu_measurement(batch, optimizer):
    cap = captured(mlp, torch.empty(batch, 64, device="meta"), batch, optimizer, autocast=BF16)
    est = cap.estimate(device="cpu").peak
    assert est - measure(mlp, torch.randn(batch, 64), batch, optimizer) == (-12 if optimizer is adam else 0)


def test_bf16_mlp_holds_casts_and_cache():
    """What the capture shows: each weight cast once per forward (the cast cache), the casts
    alive until autograd's saved copies die in backward, bf16 activations."""
    cap = captured(mlp, torch.empty(8, 64, device="meta"), 8, sgd, autocast=BF16, steps=1)
    st, steps = cap.storages, cap.steps
    casts = [s for s in steps if s.get("op") == "aten._to_copy.default" and s["phase"] == "forward"]
    made = [st[s["alloc"][0]] for s in casts]
    # per Linear its bias and weight, and the first one's float32 input (the later inputs are
    # bfloat16 already), in the order autocast's linear casts them: 7 casts, all to bfloat16
    assert len(casts) == 7 and all(m["dtype"] == "bfloat16" for m in made)
    assert [m["bytes"] for m in made] == [128 * 2, 128 * 64 * 2, 8 * 64 * 2, 96 * 2, 96 * 128 * 2,
                                          10 * 2, 10 * 96 * 2]
    saved = {i for s in steps for i in s.get("save", [])}
    weight_casts = [s["alloc"][0] for s in casts[1:] if st[s["alloc"][0]]["shape"][0] != 8]
    # the 16-bit weights autograd saves for the grad of the input live into the backward
    freed_at = {i: s["phase"] for s in steps for i in s.get("free", [])}
    assert {freed_at[i] for i in weight_casts if i in saved} == {"backward"}
    addmm = [s for s in steps if s.get("op") == "aten.addmm.default" and s["phase"] == "forward"]
    assert [st[s["alloc"][0]]["dtype"] for s in addmm] == ["bfloat16"] * 3
    assert cap.header["device"] == "cpu" and cap.header["autocast"] == {"device": "cpu", "dtype": "bfloat16"}
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(cap.data, json.load(open(os.path.join(ROOT, "docs", "schema", "capture.schema.json"))))


# bfloat16 convolutions run on THNN's slow_conv2d on AVX2 (oneDNN's bf16 needs AVX-512: its
# buffers there are not modelled); measured on an AVX2 EPYC with torch 2.13.0, one thread
@pytest.mark.parametrize("optimizer", [None, sgd], ids=["infer", "sgd"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("kind", ["dense", "depthwise"])
@pytest.mark.skipif(HOST_ISA != "avx2", reason="bfloat16 convolutions' kernels modelled on AVX2 only")
def test_bf16_conv_equals_cpu_measurement(kind, batch, optimizer):
    cap = captured(lambda: convnet(kind), image(kind, batch, "meta"), batch, optimizer, autocast=BF16)
    est = cap.estimate(device="cpu", cpu_threads=1, cpu_isa=HOST_ISA).peak
    assert est == measure(lambda: convnet(kind), image(kind, batch), batch, optimizer)


def test_capture_under_autocast_runs_the_whole_step_under_it():
    """capture() called inside torch.autocast("cpu"): the step runs on fake CPU tensors, all
    of it under autocast (the caller's loop)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cap = captured(mlp, torch.empty(2, 64, device="meta"), 2, sgd, steps=1)
    assert cap.header["device"] == "cpu" and "autocast" not in cap.header
    assert any(s.get("op") == "aten._to_copy.default" for s in cap.steps)


class Policy(torch.nn.Module):
    """Ops of autocast's CUDA lists (aten/src/ATen/autocast_mode.cpp): linear
    (lower_precision_fp: float16), softmax (fp32_set_opt_dtype), layer_norm (fp32);
    the Linear's weight read twice (the cast cache: cast once)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        b = self.fc(self.fc(x))
        return self.norm(torch.cat([b.softmax(-1), x], 1))


# device "cuda" needs a CUDA build of torch (no GPU) and captures inference only; the casts
# are autocast's own kernels' (AutocastCUDA on FakeTensors of "cuda"), the replay on a GPU
# unvalidated
@pytest.mark.skipif(torch.version.cuda is None, reason="FakeTensors of 'cuda' need a CUDA build of torch")
def test_cuda_autocast_casts_as_its_policy_prescribes():
    with torch.device("meta"):
        model = Policy()
    cap = dt.capture(model, torch.empty(4, 16, device="meta"), autocast=("cuda", torch.float16))
    st = cap.storages
    ops = [(s["op"].split(".")[1], [st[i]["dtype"] for i in s.get("in", [])],
            [(st[i]["dtype"], st[i]["shape"]) for i in s.get("alloc", [])]) for s in cap.steps[1:]
           if s["op"].split(".")[1] in ("_to_copy", "addmm", "_softmax", "cat", "native_layer_norm")]
    assert ops == [
        ("_to_copy", ["float32"], [("float16", [16])]),        # fc.bias
        ("_to_copy", ["float32"], [("float16", [16, 16])]),    # fc.weight, cached for the 2nd call
        ("_to_copy", ["float32"], [("float16", [4, 16])]),     # x
        ("addmm", ["float16"] * 3, [("float16", [4, 16])]),
        ("addmm", ["float16"] * 3, [("float16", [4, 16])]),    # no cast: the cache's copies
        # softmax is fp32_set_opt_dtype: dtype=float32 passed, no copy (half_to_float)
        ("_softmax", ["float16"], [("float32", [4, 16])]),
        ("cat", ["float32"] * 2, [("float32", [4, 32])]),
        ("native_layer_norm", ["float32"] * 3, [("float32", [4, 32]), ("float32", [4, 1]),
                                                ("float32", [4, 1])])]
    assert cap.header["device"] == "cuda"
    assert cap.estimate(gpu="A100-80GB").peak_allocated > 0   # replayed as a CUDA step


def test_cuda_training_is_refused():
    with pytest.raises(dt.CaptureError, match="device 'cuda' captures inference only|needs a CUDA build"):
        captured(mlp, torch.empty(2, 64, device="meta"), 2, sgd, autocast=("cuda", torch.float16))


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CPU-only build's refusal")
def test_cuda_on_a_cpu_only_build_is_refused():
    with pytest.raises(dt.CaptureError, match="device 'cuda' needs a CUDA build of torch"):
        captured(mlp, torch.empty(2, 64, device="meta"), 2, sgd, autocast=("cuda", torch.float16))


def test_autocast_elsewhere_is_refused():
    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(64, 10)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.fc(x)
    with pytest.raises(dt.CaptureError, match=r"linear in fc runs under torch.autocast\('cpu'\).*"
                                              r"capture with device='cpu'"):
        captured(Inner, torch.empty(2, 64, device="meta"), 2, sgd)
    # on the device it names, the same model is captured with its casts
    cap = captured(Inner, torch.empty(2, 64, device="meta"), 2, sgd, device="cpu")
    assert any(s.get("op") == "aten._to_copy.default" for s in cap.steps)
    with pytest.raises(ValueError, match="dtype torch.bfloat16 or torch.float16"):
        captured(mlp, torch.empty(2, 64, device="meta"), 2, sgd, autocast=("cpu", torch.float32))
    with pytest.raises(ValueError, match="capture with device='cuda'"):
        captured(mlp, torch.empty(2, 64, device="meta"), 2, sgd, device="cpu",
                 autocast=("cuda", torch.float16))
