"""torch.amp.GradScaler captured as it runs (dnnmem.torch.capture(grad_scaler=...)): its
scale and growth tracker, unscale_'s inv_scale and found_inf, and update's, on the step's
device, the gradients assumed finite (the file says so and the estimate prints it). The
MLP's step with GradScaler("cpu") is measured on the CPU as test_capture measures steps."""
import gc

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"):
    pytest.skip("torch.amp.GradScaler is torch >= 2.3", allow_module_level=True)
import torch.nn.functional as F  # noqa: E402

import dnnmem.torch as dt  # noqa: E402
from test_capture import adam, mlp, sgd, storage_bytes  # noqa: E402


def scaled_peak(model, x, y, opt, steps=2, amp=None):
    """The real step's peak (test_capture.step_peak's method) in the AMP recipe's loop:
    scaler.scale(loss).backward(), scaler.step(opt), scaler.update()."""
    from torch.profiler import ProfilerActivity, profile
    scaler = torch.amp.GradScaler("cpu")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(steps):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=amp) if amp else torch.autocast("cpu", enabled=False):
                out = model(x)
                loss = F.cross_entropy(out, y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            del out, loss
    evs = sorted((int(e.start_ns()), i, int(e.nbytes())) for i, e in
                 enumerate(prof.profiler.kineto_results.events()) if e.nbytes() != 0)
    run = peak = 0
    for _, _, nb in evs:
        run += nb
        peak = max(peak, run)
    return peak


def measure(batch, optimizer, amp=None):
    torch.set_num_threads(1)
    model = mlp()
    x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
    opt = optimizer(model.parameters())
    gc.collect()
    return storage_bytes([*model.parameters(), x, y]) + scaled_peak(model, x, y, opt, amp=amp)


def captured(batch, optimizer, **kw):
    with torch.device("meta"):
        model = mlp()
    x = torch.empty(batch, 64, device="meta")
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    return dt.capture(model, x, target=y, loss=F.cross_entropy, optimizer=optimizer, **kw)


@pytest.mark.parametrize("optimizer", [sgd, adam], ids=["sgd", "adam"])
@pytest.mark.parametrize("amp", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_grad_scaler_equals_cpu_measurement(optimizer, amp):
    kw = {"autocast": ("cpu", amp)} if amp else {"device": "cpu"}
    cap = captured(8, optimizer, grad_scaler=True, **kw)
    assert cap.data["grad_scaler"] == {"assumes": "finite"}
    ops = [s.get("op") for s in cap.data["steps"]]
    assert "aten._amp_foreach_non_finite_check_and_unscale_.default" in ops
    assert "aten._amp_update_scale_.default" in ops
    names = {s["name"]: s for s in cap.data["storages"]}
    # the scale and the growth tracker: 0-dim float32 and int32, kept as optimizer state
    assert names["grad_scaler.scale"]["bytes"] == 4 and names["grad_scaler.scale"]["kind"] == "optimizer"
    assert names["grad_scaler.growth_tracker"]["bytes"] == 4
    est = cap.estimate(device="cpu")
    # Adam's 12 B: its step counter's wrapped scalar (test_capture)
    assert est.peak == measure(8, optimizer, amp) - (12 if optimizer is adam else 0)
    assert "grad_scaler" in est.assumptions and "finite" in est.assumptions["grad_scaler"]


def test_grad_scaler_flag_equals_the_api(tmp_path):
    from test_cli_capture import cli
    import dnnmem
    out = tmp_path / "gs.dnnmem"
    r = cli("test_capture:mlp", "--input", "8,64", "--mode", "train", "--optimizer", "sgd-momentum",
            "--device", "cpu", "--grad-scaler", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert dnnmem.estimate(str(out), device="cpu").peak == measure(8, sgd)
    r = cli("test_capture:mlp", "--input", "8,64", "--mode", "train", "--grad-scaler", "-o", str(out))
    assert r.returncode == 2 and "--grad-scaler runs on the step's device" in r.stderr


def test_an_unmodelled_grad_scaler_assumption_is_refused():
    import json

    import dnnmem
    data = json.loads(captured(2, sgd, device="cpu", grad_scaler=True).to_json())
    data["grad_scaler"] = {"assumes": "overflow"}
    with pytest.raises(dnnmem.DnnmemError) as e:
        dnnmem.estimate(json.dumps(data).encode(), device="cpu")
    assert e.value.exit_code == 4 and '"grad_scaler" must be {"assumes": "finite"}' in e.value.message


def test_grad_scaler_is_refused_where_it_cannot_run():
    with pytest.raises(dt.CaptureError, match="grad_scaler runs on the step's device"):
        captured(2, sgd, grad_scaler=True)  # meta
    with pytest.raises(ValueError, match="pass loss and optimizer"):
        with torch.device("meta"):
            model = mlp()
        dt.capture(model, torch.empty(2, 64, device="meta"), device="cpu", grad_scaler=True)
    with pytest.raises(ValueError, match="True or a dict"):
        captured(2, sgd, device="cpu", grad_scaler="yes")
