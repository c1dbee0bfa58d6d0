#!/usr/bin/env python3
"""Compare XLA's CPU memory analysis (tools/oracle/jax_cpu_measure.py) with
dnnmem's plan of the same jitted step (`--framework jax --device cpu`).

From the repository root, after `make` (stdlib only):

    python3 tools/oracle/jax_cpu_compare.py tests/validation/jax-cpu.jsonl \\
        [--dnnmem build/dnnmem] [--check] [--misses FILE] [--brief]

For every `ok` row it runs

    dnnmem estimate tools/gpu/jax-models/<model>.onnx -b B [-s S] --mode M
        --framework jax@<jax version> --device cpu --precision fp32|bf16
        [--optimizer O --loss L --jax-donate true|false] --json

and compares, relative to the measurement:

  peak   argument + output - alias + temp (CompiledMemoryStats; the least
         memory the executable needs, xla/pjrt/pjrt_executable.h) against
         dnnmem's peak_allocated_bytes (entry parameters, the call's new
         outputs and the temp buffer, exact host sizes);
  temp   temp_size_in_bytes against dnnmem's XLA temp buffer;
  args   argument_size_in_bytes against dnnmem's entry parameters;
  outs   output_size_in_bytes - alias_size_in_bytes against the outputs
         dnnmem's call allocates.

--check exits 1 unless every row off +-3% is listed in --misses (id, a
tab, the mechanism), no listed row is back within it, and every row was
compared; with --bars also unless the bars of issue 18 hold for the peak
(median |error| <= 1%, 95% of rows within +-3%, none under -5%). The
summary line says whether the bars hold either way.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def command(r, ver, a):
    cmd = [a.dnnmem, "estimate", os.path.join(a.models, r["model"] + ".onnx"), "-b", str(r["batch"])]
    if r.get("seq"):
        cmd += ["-s", str(r["seq"])]
    cmd += ["--mode", r["mode"], "--framework", f"jax@{ver}" if ver else "jax", "--device", "cpu",
            "--precision", {"float32": "fp32", "bfloat16": "bf16"}[r.get("dtype", "float32")]]
    if r["mode"] == "train":
        cmd += ["--optimizer", r.get("optimizer") or "sgd-momentum", "--loss", r.get("loss", "ce"),
                "--jax-donate", "true" if r.get("donate", True) else "false"]
    return cmd + ["--json"]


def pct(m, e):
    return None if not m or e is None else (e - m) / m * 100.0


def mib(b):
    return "-" if b is None else f"{b / (1 << 20):.2f}"


def fp(p):
    return "-" if p is None else f"{p:+.2f}%"


def read_misses(path):
    out = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    k, _, why = line.rstrip("\n").partition("\t")
                    out[k.strip()] = why.strip()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--dnnmem", default=os.path.join(ROOT, "build", "dnnmem"))
    ap.add_argument("--models", default=os.path.join(ROOT, "tools", "gpu", "jax-models"))
    ap.add_argument("--misses")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bars", action="store_true", help="with --check: fail unless the bars hold")
    ap.add_argument("--brief", action="store_true", help="only rows off +-3% and the summary")
    a = ap.parse_args()
    rows, probe = [], {}
    with open(a.results) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                (probe.update(r) if r.get("probe") else rows.append(r))
    v = probe.get("versions") or {}
    ver = re.match(r"\d+\.\d+(?:\.\d+)?", str(v.get("jax", "")))
    ver = ver.group(0) if ver else None
    print(f"XLA CPU memory_analysis, jax {v.get('jax')} jaxlib {v.get('jaxlib')} optax "
          f"{v.get('optax')}; MiB; d = (estimate - measured) / measured")
    fmt = "%-34s %10s %10s %8s %10s %10s %8s %10s %10s %9s %9s  %s"
    print(fmt % ("id", "peak meas", "est", "d", "temp meas", "est", "d", "args meas", "est",
                 "outs meas", "est", "verdict"))
    misses = read_misses(a.misses)
    errs, off, back, failed = [], [], [], []
    for r in rows:
        if r.get("status") != "ok":
            failed.append(f"{r.get('id')}: not measured: {str(r.get('error'))[:120]}")
            continue
        p = subprocess.run(command(r, ver, a), capture_output=True, text=True)
        try:
            d = json.loads(p.stdout)
            x = d["framework"]["xla"]
        except Exception:  # noqa: BLE001
            failed.append(f"{r['id']}: dnnmem rc {p.returncode}: {p.stderr.strip()[:200]}")
            continue
        ma = r["memory_analysis"]
        m_outs = ma["output_size_in_bytes"] - ma["alias_size_in_bytes"]
        m_peak = ma["argument_size_in_bytes"] + m_outs + ma["temp_size_in_bytes"]
        e_peak = d["peak_allocated_bytes"]
        dp = pct(m_peak, e_peak)
        dt = pct(ma["temp_size_in_bytes"], x["temp_bytes"])
        errs.append(dp)
        listed = r["id"] in misses
        if abs(dp) > 3:
            off.append(r["id"])
            verdict = ("expected: " + misses[r["id"]]) if listed else "OFF"
        else:
            verdict = "ok (listed as a miss: remove it)" if listed else "ok"
            if listed:
                back.append(r["id"])
        if not a.brief or abs(dp) > 3:
            print(fmt % (r["id"][:34], mib(m_peak), mib(e_peak), fp(dp), mib(ma["temp_size_in_bytes"]),
                         mib(x["temp_bytes"]), fp(dt), mib(ma["argument_size_in_bytes"]),
                         mib(x["argument_bytes"]), mib(m_outs), mib(x["output_bytes"]), verdict[:90]))
    for f_ in failed:
        print("  " + f_)
    if not errs:
        print("no rows compared")
        return 1
    med = statistics.median(abs(e) for e in errs)
    within = sum(1 for e in errs if abs(e) <= 3) / len(errs)
    worst_under = min(errs)
    unlisted = [i for i in off if i not in misses]
    print(f"{len(errs)} rows: median |peak error| {med:.2f}%, {within * 100:.1f}% within +-3%, "
          f"most under {worst_under:+.2f}%, most over {max(errs):+.2f}%; "
          f"{len(off)} off +-3% ({len(unlisted)} unlisted" + (f": {', '.join(unlisted)}" if unlisted else "")
          + ")" + (f"; listed but within: {', '.join(back)}" if back else ""))
    bars = med <= 1 and within >= 0.95 and worst_under >= -5
    print("bars (median |error| <= 1%, 95% within +-3%, none under -5%): " +
          ("met" if bars else "NOT met"))
    listed = not unlisted and not back and not failed
    if a.check and (not listed or (a.bars and not bars)):
        print("FAILED: " + ("the bars" if listed else
                            "every row off +-3% must be listed in --misses with its mechanism, "
                            "and only those"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
