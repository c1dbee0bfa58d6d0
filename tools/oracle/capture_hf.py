#!/usr/bin/env python3
"""dnnmem.hf.capture against real transformers on the CPU and against the config.json path.

    DNNMEM_LIBRARY=build/libdnnmem.so PYTHONPATH=python \\
        VENV/bin/python tools/oracle/capture_hf.py [--only SUBSTR ...] [--out FILE] [--table FILE]

VENV has torch, transformers and peft (the release of the rows compared: the measured rows of
tests/validation/hf-real-cpu.jsonl whose "release" is the venv's transformers X.Y). For each
measured training or inference row of a causal LM or an encoder (eager or sdpa, float32 or
bfloat16, LoRA or not; T5, ViT and the generate rows are left out: their inputs are not
dnnmem.hf.capture's), the model is built from the row's config on the meta device by
dnnmem.hf.capture (batch, sequence, optimizer, attention and LoRA of the row, 2 iterations)
and estimated with --device cpu --cpu-threads 1; the same row is estimated from its
config.json (tools/hf_oracle/compare.py's command: --transformers X.Y --attn ... ). Prints one
JSON line per row: measured peak, the capture's estimate and error, the config path's.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
ROWS = os.path.join(ROOT, "tests", "validation", "hf-real-cpu.jsonl")
sys.path.insert(0, os.path.join(ROOT, "tools", "hf_oracle"))


def wanted(r, release):
    import rows as rowdefs
    return (r["release"] == release and r.get("status") == "ok" and r["mode"] in ("train", "infer")
            and not r.get("head") and rowdefs.kind(r["model_type"]) in ("causal", "encoder"))


def lora_of(r):
    if not r.get("lora"):
        return None
    import rows as rowdefs
    task = "CAUSAL_LM" if rowdefs.kind(r["model_type"]) == "causal" else None
    lc = r["lora"]
    return dict(r=lc["r"], lora_alpha=lc["alpha"], lora_dropout=lc["dropout"],
                target_modules=r["lora_targets"], task_type=task)


def run(r, dnnmem_cli):
    import compare
    import dnnmem.hf
    t0 = time.time()
    # the oracle builds float32 and converts (model.to(torch.bfloat16)), as --precision bf16
    import rows as rowdefs
    # the oracle's model (measure.py's model_class): a causal LM's AutoModelForCausalLM, an
    # encoder's architectures class (the default task)
    task = "causal-lm" if rowdefs.kind(r["model_type"]) == "causal" else None
    cap = dnnmem.hf.capture(os.path.join(ROOT, r["config"]), task=task, attn_implementation=r["attn"],
                            peft=lora_of(r), batch_size=r["batch"], seq_len=r["seq"],
                            mode=r["mode"], optimizer=r.get("optimizer") or "sgd-momentum",
                            dtype="bfloat16" if r["precision"] == "bf16" else "float32")
    cap_s = time.time() - t0
    est = cap.estimate(device="cpu", cpu_threads=1, cpu_isa=r.get("cpu_isa", "avx512")).peak_allocated
    cfg, why = compare.estimate(dnnmem_cli, r)
    m = r["peak_bytes"]
    out = dict(id=r["id"], measured=m, capture=est, capture_pct=round(100.0 * (est - m) / m, 2),
               config=cfg, config_pct=None if cfg is None else round(100.0 * (cfg - m) / m, 2),
               capture_s=round(cap_s, 2), storages=len(cap.storages))
    if why:
        out["config_error"] = why
    return out


def table(path):
    import statistics
    rows = [json.loads(line) for line in open(path)]
    print("| row | measured | capture | config.json path |")
    print("|---|---|---|---|")
    for r in rows:
        c = "failed" if "error" in r else f"{r['capture_pct']:+.2f}%"
        k = "" if "error" in r else ("refused" if r.get("config") is None else f"{r['config_pct']:+.2f}%")
        print(f"| {r['id']} | {r['measured']} | {c} | {k} |")
    ok = [r for r in rows if "error" not in r]
    if ok:
        ce = [abs(r["capture_pct"]) for r in ok]
        ke = [abs(r["config_pct"]) for r in ok if r.get("config_pct") is not None]
        print(f"\n{len(ok)} rows captured ({len(rows) - len(ok)} failed): capture median |error| "
              f"{statistics.median(ce):.2f}%, {sum(e <= 1 for e in ce)} within 1%, worst "
              f"{max(ce):.2f}%; config.json path on {len(ke)}: median "
              f"{statistics.median(ke) if ke else 0:.2f}%, {sum(e <= 1 for e in ke)} within 1%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--out")
    ap.add_argument("--table")
    ap.add_argument("--dnnmem", default=os.path.join(ROOT, "build", "dnnmem"))
    a = ap.parse_args()
    if a.table:
        return table(a.table)
    import torch
    import transformers
    torch.set_num_threads(1)
    release = ".".join(transformers.__version__.split(".")[:2])
    rows = [json.loads(line) for line in open(ROWS)]
    rows = [r for r in rows if wanted(r, release) and (not a.only or any(s in r["id"] for s in a.only))]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from capture_zoo import write_rows
    write_rows(rows, a.out, lambda r: run(r, a.dnnmem))


if __name__ == "__main__":
    main()
