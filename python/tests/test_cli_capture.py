"""python -m dnnmem capture's flags (docs/python.md): the file it writes estimates as the
API's capture of the same step does (and, where the step was measured, as the real CPU step),
and a bad flag is one line on stderr with the dnnmem CLI's exit code (2 usage, 3 model,
4 not modelled)."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import dnnmem  # noqa: E402
import dnnmem.torch as dt  # noqa: E402
from conftest import ROOT  # noqa: E402
from test_capture import measure, mlp, sgd  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "dnnmem", "capture", *args], capture_output=True,
                          text=True, env=env, cwd=cwd)


def api(batch, optimizer=None, **kw):
    with torch.device("meta"):
        model = mlp()
    x = torch.empty(batch, 64, device="meta")
    if optimizer:
        kw.update(target=torch.zeros(batch, dtype=torch.long, device="meta"), loss=F.cross_entropy,
                  optimizer=optimizer)
    return dt.capture(model, x, **kw)


def test_grad_accum_flag_equals_the_api_and_the_cpu(tmp_path):
    out = tmp_path / "accum.dnnmem"
    r = cli("test_capture:mlp", "--input", "8,64", "--mode", "train", "--optimizer", "sgd-momentum",
            "--grad-accum", "3", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "3 micro-batches" in r.stdout
    assert json.loads(out.read_text())["grad_accum"] == 3
    peak = dnnmem.estimate(str(out), device="cpu").peak
    assert peak == api(8, sgd, grad_accum=3).estimate(device="cpu").peak
    # the real CPU step (test_capture_loops.test_grad_accumulation_equals_cpu_measurement)
    assert peak == measure(mlp, 8, sgd, grad_accum=3)
    # 3 micro-batches hold more than 1 (the gradients' sums), so the flag took effect
    assert peak != api(8, sgd).estimate(device="cpu").peak


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_autocast_flag_equals_the_api(tmp_path, mode):
    out = tmp_path / "amp.dnnmem"
    train = ["--mode", "train", "--optimizer", "sgd-momentum"] if mode == "train" else []
    r = cli("test_capture:mlp", "--input", "8,64", *train, "--autocast", "cpu:bfloat16", "-o", str(out))
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert data["autocast"] == {"device": "cpu", "dtype": "bfloat16"} and data["device"] == "cpu"
    casts = [s for s in data["steps"][1:] if s.get("op") == "aten._to_copy.default"]
    assert casts  # the weights' bfloat16 copies
    ref = api(8, sgd if mode == "train" else None, autocast=("cpu", torch.bfloat16))
    assert dnnmem.estimate(str(out), device="cpu").peak == ref.estimate(device="cpu").peak
    plain = api(8, sgd if mode == "train" else None)
    assert ref.estimate(device="cpu").peak != plain.estimate(device="cpu").peak


def test_device_flag_equals_the_api(tmp_path):
    out = tmp_path / "cpu.dnnmem"
    r = cli("test_capture:mlp", "--input", "2,64", "--device", "cpu", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["device"] == "cpu"
    assert dnnmem.estimate(str(out), device="cpu").peak == api(2, device="cpu").estimate(device="cpu").peak


BAD = [  # (flags, exit code, what the one line names)
    (["--grad-accum", "0", "--mode", "train"], 2, "--grad-accum 0"),
    (["--grad-accum", "2"], 2, "--grad-accum 2: gradient accumulation needs --mode train"),
    (["--autocast", "cpu:int8"], 2, "--autocast cpu:int8"),
    (["--autocast", "bfloat16"], 2, "--autocast bfloat16"),
    (["--autocast", "cpu:bfloat16", "--device", "meta"], 2, "--autocast cpu:bfloat16 with --device meta"),
    (["--device", "tpu"], 2, "--device"),
    (["--steps", "0", "--mode", "train"], 2, "--steps 0"),
]


@pytest.mark.parametrize("flags,code,text", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_flag_is_one_line(tmp_path, flags, code, text):
    r = cli("test_capture:mlp", "--input", "2,64", *flags, "-o", str(tmp_path / "x.dnnmem"))
    assert r.returncode == code
    assert len(r.stderr.strip().splitlines()) == 1 and text in r.stderr, r.stderr
    assert not (tmp_path / "x.dnnmem").exists()


def test_missing_model_is_exit_3(tmp_path):
    r = cli("no_such_module_xyz:mlp", "--input", "2,64", "-o", str(tmp_path / "x.dnnmem"))
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1
    assert "no_such_module_xyz:mlp" in r.stderr


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA build captures device cuda")
def test_cuda_device_on_a_cpu_build_is_exit_4(tmp_path):
    r = cli("test_capture:mlp", "--input", "2,64", "--device", "cuda", "-o", str(tmp_path / "x.dnnmem"))
    assert r.returncode == 4 and len(r.stderr.strip().splitlines()) == 1
    assert "device 'cuda' needs a CUDA build of torch" in r.stderr


# the hf subcommand: a tiny config's measured rows (tests/validation/hf-real-cpu.jsonl)
def hf_row(name):
    transformers = pytest.importorskip("transformers")
    release = ".".join(transformers.__version__.split(".")[:2])
    rows = {r["id"]: r for r in map(json.loads, open(os.path.join(ROOT, "tests", "validation",
                                                                   "hf-real-cpu.jsonl")))}
    r = rows.get(f"tf{release}/{name}")
    if r is None or r.get("status") != "ok":
        pytest.skip(f"no row {name} measured with transformers {release}")
    return r


@pytest.mark.parametrize("name,missed", [("tiny-llama-gqa-infer-b2-s128-fp32-eager", 0),
                                         # 32 B: test_hf.test_hf_training_equals_cpu_measurement
                                         ("tiny-llama-gqa-train-sgd-b2-s128-fp32-eager", 32)])
def test_hf_subcommand_equals_the_api_and_the_cpu(tmp_path, name, missed):
    import dnnmem.hf
    r = hf_row(name)
    out = tmp_path / "hf.dnnmem"
    p = cli("hf", os.path.join(ROOT, r["config"]), "--task", "causal-lm", "--attn", r["attn"],
            "--batch-size", str(r["batch"]), "--seq-len", str(r["seq"]), "--mode", r["mode"],
            "--optimizer", r.get("optimizer") or "sgd-momentum", "-o", str(out))
    assert p.returncode == 0, p.stderr
    peak = dnnmem.estimate(str(out), device="cpu", cpu_threads=1).peak_allocated
    assert peak == r["peak_bytes"] - missed
    cap = dnnmem.hf.capture(os.path.join(ROOT, r["config"]), task="causal-lm",
                            attn_implementation=r["attn"], batch_size=r["batch"], seq_len=r["seq"],
                            mode=r["mode"], optimizer=r.get("optimizer") or "sgd-momentum")
    assert peak == cap.estimate(device="cpu", cpu_threads=1).peak_allocated


def test_hf_subcommand_grad_accum_and_autocast(tmp_path):
    import dnnmem.hf
    r = hf_row("tiny-llama-gqa-train-sgd-b2-s128-fp32-eager")
    out = tmp_path / "hf.dnnmem"
    p = cli("hf", os.path.join(ROOT, r["config"]), "--task", "causal-lm", "-b", "2", "--seq-len", "32",
            "--mode", "train", "--steps", "1", "--grad-accum", "2", "--autocast", "cpu:bfloat16",
            "-o", str(out))
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["grad_accum"] == 2 and data["autocast"] == {"device": "cpu", "dtype": "bfloat16"}
    cap = dnnmem.hf.capture(os.path.join(ROOT, r["config"]), task="causal-lm", batch_size=2, seq_len=32,
                            steps=1, grad_accum=2, autocast=("cpu", torch.bfloat16))
    assert dnnmem.estimate(str(out), device="cpu").peak == cap.estimate(device="cpu").peak


@pytest.mark.parametrize("flags,code,text", [
    (["--task", "translation"], 2, "--task"),
    (["--attn", "flash"], 2, "--attn"),
    (["--batch-size", "0"], 2, "--batch-size 0"),
    (["--dims", "batch,heads"], 2, "--dims batch,heads"),
    (["--peft", "[1]"], 2, "--peft"),
], ids=["task", "attn", "batch", "dims", "peft"])
def test_hf_bad_flag_is_one_line(tmp_path, flags, code, text):
    r = cli("hf", os.path.join(ROOT, "tests", "models", "hf", "tiny-llama-gqa.json"), *flags,
            "-o", str(tmp_path / "x.dnnmem"))
    assert r.returncode == code
    assert len(r.stderr.strip().splitlines()) == 1 and text in r.stderr, r.stderr


def test_hf_missing_config_is_exit_3(tmp_path):
    pytest.importorskip("transformers")
    r = cli("hf", str(tmp_path / "nothing.json"), "-o", str(tmp_path / "x.dnnmem"))
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1
    assert "nothing.json" in r.stderr
