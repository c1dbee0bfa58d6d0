"""The typed API over libdnnmem (no torch needed): values worked by hand for the capture
fixture (tests/cli/run.sh states the sums), and the CLI's answers for an ONNX model."""
import json
import os
import subprocess

import pytest

import dnnmem
from conftest import CLI, RESNET50, TINY


def cli_json(*args):
    out = subprocess.run([CLI, *args, "--json"], capture_output=True, text=True, check=False)
    return json.loads(out.stdout)


def test_capture_cpu_hand_worked():
    r = dnnmem.estimate(TINY, device="cpu")
    # everything live at the optimizer's clone but the first backward mm's output
    assert r.peak == r.peak_allocated == 4096 + 1024 + 64 + 2048 + 4 + 4096 + 4096
    assert (r.peak_phase, r.peak_node, r.peak_op) == ("optimizer", "clone#6", "aten.clone.default")
    assert r.breakdown["gradients"] == 4096 and r.breakdown["optimizer_state"] == 4096
    assert r.breakdown["inputs"] == 1024 + 64
    assert r.verdict is None and r.advice == []
    # the timeline: one point per step, the setup's level first
    assert [p.allocated for p in r.timeline][:3] == [5184, 7232, 7236]
    assert len(r.timeline) == 8
    assert {t.name for t in r.live_at_peak} >= {"fc.weight", "fc.weight.grad", "fc.weight.momentum_buffer"}


def test_capture_cuda_workspaces():
    r = dnnmem.estimate(TINY, gpu="A100-80GB")
    # blocks rounded to 512 B, two cuBLAS workspaces of 8,519,680 B (torch 2.13, sm80)
    assert r.peak_allocated == 16384 + 2 * 8519680
    assert r.breakdown["workspaces"] == 2 * 8519680
    assert r.verdict == "fits"
    assert r.peak == r.peak_reserved + r.context


def test_options_by_cli_names_match_cli():
    r = dnnmem.estimate(RESNET50, mode="train", batch_size=8, optimizer="adam", gpu="T4")
    js = cli_json("estimate", RESNET50, "--mode", "train", "--batch-size", "8", "--optimizer", "adam",
                  "--gpu", "T4")
    assert r.peak == js["total_bytes"] and r.peak_allocated == js["peak_allocated_bytes"]
    assert r.breakdown == js["breakdown"]
    assert r.verdict == js["verdict"]["verdict"]


def test_by_module_matches_cli_and_adds_up():
    r = dnnmem.estimate(RESNET50, mode="train", batch_size=8, optimizer="adam", by_module_depth=1)
    js = cli_json("estimate", RESNET50, "--mode", "train", "--batch-size", "8", "--optimizer", "adam",
                  "--by-module-depth", "1")
    assert [m.name for m in r.by_module] == [m["name"] for m in js["by_module"]["modules"]]
    assert r.by_module[0].name == "/conv1" and r.by_module[-1].name == "(no module)"
    for key, m in r.by_module[0].breakdown.items():
        assert sum(x.breakdown[key] for x in r.by_module) == r.breakdown[key]
    assert dnnmem.estimate(RESNET50, batch_size=8).by_module == []


def test_max_batch_matches_cli():
    n = dnnmem.max_batch(RESNET50, mode="train", gpu="T4")
    out = subprocess.run([CLI, "max-batch", RESNET50, "--mode", "train", "--gpu", "T4", "--json"],
                         capture_output=True, text=True, check=True)
    assert n == json.loads(out.stdout)["value"]
    assert n > 0


def test_advice_when_it_does_not_fit():
    r = dnnmem.estimate(RESNET50, mode="train", batch_size=256, gpu="T4")
    assert r.verdict == "does not fit" and r.margin < 0
    assert r.advice and all(a.total_bytes < r.peak for a in r.advice)
    assert any("batch" in a.change for a in r.advice)
    # a T4 runs no bfloat16: float16 autocast, with what each change costs
    assert any(a.change == "--precision amp-fp16" for a in r.advice)
    assert not any("bf16" in a.change for a in r.advice)
    assert all(a.cost and 1 <= a.cost_rank <= 10 for a in r.advice)


def test_flags_and_repeats():
    r = dnnmem.estimate(RESNET50, mode="train", batch_size=2, freeze=["conv1.*", "bn1.*"])
    assert r.assumptions  # set through the store, repeated
    with pytest.raises(dnnmem.DnnmemError) as e:
        dnnmem.estimate(RESNET50, mode="fly")
    assert e.value.status == 10 and e.value.exit_code == 2
    assert str(e.value) == "--mode fly: expected infer, train or generate"
    with pytest.raises(dnnmem.DnnmemError, match="unknown option"):
        dnnmem.estimate(RESNET50, no_such_option=3)


def test_bad_capture_bytes():
    data = open(TINY, "rb").read()
    with pytest.raises(dnnmem.DnnmemError) as e:
        dnnmem.estimate(data[:700])
    assert e.value.exit_code == 3 and "not a complete capture" in e.value.message
    with pytest.raises(dnnmem.DnnmemError) as e:
        dnnmem.estimate(data.replace(b'"version": 1', b'"version": 7'))
    assert e.value.status == 50 and e.value.exit_code == 4
    with pytest.raises(dnnmem.DnnmemError) as e:
        dnnmem.estimate(TINY, batch_size=8)
    assert e.value.exit_code == 2 and "--batch-size" in e.value.message


def test_model_reuse_and_html():
    with dnnmem.load(TINY) as m:
        a = dnnmem.estimate(m, device="cpu")
        b = dnnmem.estimate(m, device="cpu")
    assert a.peak == b.peak
    h = a._repr_html_()
    assert "peak 15.07 KiB" in h and "fc.weight.momentum_buffer" in h
    assert "peak         15.07 KiB" in str(a)


def test_missing_file():
    with pytest.raises(dnnmem.DnnmemError) as e:
        dnnmem.estimate(os.path.join("/nonexistent", "m.onnx"))
    assert e.value.status == 20 and e.value.exit_code == 3


def test_max_seq_len_matches_cli():
    gpt2 = os.path.join(os.path.dirname(RESNET50), "..", "hf", "gpt2.json")
    n = dnnmem.max_seq_len(gpt2, gpu="T4", mode="train", batch_size=4)
    out = subprocess.run([CLI, "max-seq-len", gpt2, "--gpu", "T4", "--mode", "train", "-b", "4", "--json"],
                         capture_output=True, text=True, check=True)
    assert n == json.loads(out.stdout)["value"] and n > 0
    with pytest.raises(dnnmem.DnnmemError, match="no sequence dim"):
        dnnmem.max_seq_len(RESNET50, gpu="T4")


def test_gpus_catalogue():
    g = {x.name: x for x in dnnmem.gpus()}
    out = subprocess.run([CLI, "gpus"], capture_output=True, text=True, check=True).stdout
    assert all(name in out for name in g)
    assert g["A100-80GB"].compute_capability == 80 and g["A100-80GB"].total_bytes > 80 * 10**9


def test_compare_capture_cpu_vs_cuda():
    c = dnnmem.compare(TINY, a={"device": "cpu"}, b={"gpu": "A100-80GB"})
    assert c.a.peak == 15428 and c.b.peak_allocated == 17055744
    assert c.change["workspaces"] == 2 * 8519680 and c.change["total"] == c.b.peak - 15428
    assert "A  " in c.text and "B  " in c.text


def test_keep_outputs_by_cli_name():
    gpt2 = os.path.join(os.path.dirname(RESNET50), "..", "hf", "tiny-gpt2.json")
    args = dict(mode="train", batch_size=2, seq_len=64, attn="eager")
    kept = dnnmem.estimate(gpt2, keep_outputs=True, **args)
    js = cli_json("estimate", gpt2, "--mode", "train", "-b", "2", "-s", "64", "--attn", "eager",
                  "--keep-outputs")
    assert kept.peak_allocated == js["peak_allocated_bytes"]
    assert kept.peak_allocated >= dnnmem.estimate(gpt2, **args).peak_allocated


def test_host_cpu_isa_reads_the_flags(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert dnnmem.host_cpu_isa(str(f)) == "avx2"
    f.write_text("flags\t\t: fpu avx2 avx512f avx512bw\n")
    assert dnnmem.host_cpu_isa(str(f)) == "avx512"
    f.write_text("Features\t: fp asimd\n")
    assert dnnmem.host_cpu_isa(str(f)) is None
    assert dnnmem.host_cpu_isa(str(tmp_path / "absent")) is None
