#!/usr/bin/env python3
"""The capture path against the PyTorch 2.x CPU zoo (tests/validation/pytorch-cpu-2.x-zoo.jsonl).

    DNNMEM_LIBRARY=build/libdnnmem.so PYTHONPATH=python \\
        /tmp/zoo-venv/bin/python tools/oracle/capture_zoo.py [--only SUBSTR ...] [--out FILE]

For each measured row (same torch and torchvision as the row, which the venv must have), the
model is built on the meta device (tools/oracle/zoo.py's build_model under
torch.device("meta")), its step captured by dnnmem.torch.capture exactly as zoo.py measured
it (1 thread, model.train(), 2 iterations of zero_grad, forward, F.cross_entropy, backward,
step, with SGD(lr 0.01, momentum 0.9) or Adam(lr 1e-3); inference: eval, no_grad, one
forward), then estimated with --device cpu. Prints one line per row: measured peak, the
capture's estimate, the error, and where the capture's peak is; with --out, the rows as
JSON lines (docs/python.md shows the table).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
ROWS = os.path.join(ROOT, "tests", "validation", "pytorch-cpu-2.x-zoo.jsonl")


def run_capture(row):
    """The row's step captured on the meta device (a dnnmem.torch Capture)."""
    import torch
    import torch.nn.functional as F

    import dnnmem.torch as dt
    sys.path.insert(0, HERE)
    import zoo
    torch.set_num_threads(1)
    try:
        with torch.device("meta"):
            model, _, classes = zoo.build_model(row["model"])
    except NotImplementedError:  # a constructor that reads values (regnet): built on the CPU,
        model, _, classes = zoo.build_model(row["model"])  # capture copies it to meta
    b, i = row["batch"], row["image"]
    x = torch.empty(b, 3, i, i, device="meta")
    train = row["mode"] == "train"
    kw = {}
    if train:
        kw["target"] = torch.empty(b, dtype=torch.long, device="meta")
        kw["loss"] = F.cross_entropy
        kw["optimizer"] = ((lambda p: torch.optim.SGD(p, lr=zoo.SGD_LR, momentum=zoo.SGD_MOMENTUM))
                           if row["optimizer"] == "sgd-momentum" else
                           (lambda p: torch.optim.Adam(p, lr=zoo.ADAM_LR)))
    return dt.capture(model, x, steps=zoo.ITERS, **kw)


def run(row, save=None, saved=None):
    """The row's capture estimated; with `save` a folder, the capture is also written there
    (ID.dnnmem); with `saved` a folder, the capture written there earlier is estimated instead
    of capturing again (a build's rules compared on the same captures)."""
    if saved:
        import dnnmem
        path = os.path.join(saved, row["id"] + ".dnnmem")
        with open(path) as f:
            data = json.load(f)
        cap_s, n_storages, n_ops = None, len(data["storages"]), len(data["steps"]) - 1
        r = dnnmem.estimate(path, device="cpu", cpu_threads=1, cpu_isa=row.get("cpu_isa", "avx512"))
    else:
        t0 = time.time()
        cap = run_capture(row)
        cap_s = round(time.time() - t0, 2)
        n_storages, n_ops = len(cap.storages), len(cap.steps) - 1
        if save:
            cap.save(os.path.join(save, row["id"] + ".dnnmem"))
        r = cap.estimate(device="cpu", cpu_threads=1, cpu_isa=row.get("cpu_isa", "avx512"))
    err = 100.0 * (r.peak - row["peak_bytes"]) / row["peak_bytes"]
    return dict(id=row["id"], measured=row["peak_bytes"], estimate=r.peak, error_pct=round(err, 2),
                peak_at=f"{r.peak_phase} {r.peak_node}", measured_at=row.get("peak_phase"),
                capture_s=cap_s, storages=n_storages, ops=n_ops)


def table(path):
    """docs/python.md's table from --out's rows: per model, the error of each configuration,
    and the figures over all rows."""
    import statistics
    rows = [json.loads(line) for line in open(path)]
    cols = ["infer-b1", "infer-b2", "train-sgd-b1", "train-sgd-b2", "train-adam-b1", "train-adam-b2"]
    by = {}
    for r in rows:
        model, rest = r["id"].split("-", 1)
        by.setdefault(model, {})["-".join(rest.split("-")[:-1])] = r
    print("| model | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for model, rs in by.items():
        cells = []
        for c in cols:
            r = rs.get(c)
            cells.append("" if r is None else ("failed" if "error" in r else f"{r['error_pct']:+.2f}%"))
        print(f"| {model} | " + " | ".join(cells) + " |")
    errs = [r["error_pct"] for r in rows if "error_pct" in r]
    if errs:
        within = sum(abs(e) <= 1 for e in errs)
        print(f"\n{len(errs)} rows: median |error| {statistics.median(abs(e) for e in errs):.2f}%, "
              f"{within} within 1%, {sum(abs(e) <= 3 for e in errs)} within 3%, worst "
              f"{min(errs):+.2f}% / {max(errs):+.2f}%; {sum('error' in r for r in rows)} failed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--out")
    ap.add_argument("--table", help="print the table of a finished --out file and exit")
    ap.add_argument("--random", action="store_true",
                    help="also the random architectures (tools/oracle/randnet.py)")
    ap.add_argument("--save", metavar="DIR", help="also write each capture as DIR/ID.dnnmem")
    ap.add_argument("--saved", metavar="DIR",
                    help="estimate the captures --save wrote instead of capturing again")
    a = ap.parse_args()
    if a.table:
        return table(a.table)
    import torch
    import torchvision
    if a.save:
        os.makedirs(a.save, exist_ok=True)
    rows = [json.loads(line) for line in open(ROWS)]
    rows = [r for r in rows if (a.random or r["source"] == "torchvision") and r["torch"] == torch.__version__
            and r["torchvision"] == torchvision.__version__
            and (not a.only or any(s in r["id"] for s in a.only))]
    write_rows(rows, a.out, lambda row: run(row, a.save, a.saved))



def write_rows(rows, out_path, run_one):
    """run_one(row) for each measured row, one JSON line each to stdout and to out_path; a
    model that fails is a row with its error (shared with capture_hf.py)."""
    out = open(out_path, "w") if out_path else None
    for row in rows:
        try:
            res = run_one(row)
        except Exception as e:  # noqa: BLE001 - one failing model is a row of the table
            res = dict(id=row["id"], measured=row["peak_bytes"], error=f"{type(e).__name__}: {e}"[:300])
        print(json.dumps(res), flush=True)
        if out:
            out.write(json.dumps(res) + "\n")
            out.flush()

if __name__ == "__main__":
    main()
