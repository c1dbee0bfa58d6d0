"""Mixed precision captured as it runs, against the real step: zoo models (torchvision
ResNet-18, random architectures, timm's ViT-Tiny) trained and run under
torch.autocast("cpu", dtype=torch.bfloat16) for real on the CPU, measured as zoo.py measures
(the profiler's allocation events, the storages live before), then captured with
dnnmem.torch.capture(..., autocast=("cpu", torch.bfloat16)) and estimated with --device cpu
(capture_zoo.run).

    python tools/oracle/autocast_zoo.py --out tests/validation/capture-cpu-autocast.jsonl
    python tools/oracle/autocast_zoo.py --compare tests/validation/capture-cpu-autocast.jsonl

--out measures each configuration (a forked child each, zoo.run_child) and writes the
measured row with its capture's estimate; --compare estimates the committed rows again
(measured values kept) and prints the figures."""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture_zoo  # noqa: E402
import zoo  # noqa: E402

MODELS = (("rand3", "random", 32), ("rand7", "random", 32), ("vit_tiny_patch16_224", "timm", 96),
          ("resnet18", "torchvision", 224))
DTYPE = "bfloat16"


def configs(only):
    out = []
    for model, source, image in MODELS:
        for mode, opt in zoo.RUNS:
            for b in (1, 2):
                tag = "infer" if mode == "inference" else "train-" + ("sgd" if opt == "sgd-momentum" else "adam")
                cfg = dict(id=f"{model}-{tag}-b{b}-i{image}-autocast-{DTYPE}", model=model, source=source,
                           family=zoo.family(model), mode=mode, optimizer=opt, batch=b, image=image,
                           autocast=DTYPE)
                if not only or any(s in cfg["id"] for s in only):
                    out.append(cfg)
    return out


def figures(res):
    errs = [r["error_pct"] for r in res if "error_pct" in r]
    if errs:
        print(f"{len(errs)} rows: median |error| {statistics.median(abs(e) for e in errs):.2f}%, "
              f"{sum(abs(e) <= 1 for e in errs)} within 1%, {sum(abs(e) <= 3 for e in errs)} within 3%, "
              f"worst {min(errs):+.2f}% / {max(errs):+.2f}%; {len(res) - len(errs)} failed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--out", help="measure and write the rows (measured and estimated) here")
    ap.add_argument("--compare", help="estimate the rows of this file again")
    ap.add_argument("--timeout", type=int, default=900)
    a = ap.parse_args()
    import torch  # noqa: F401 - imported once, before the children fork
    res = []
    if a.compare:
        rows = [json.loads(ln) for ln in open(a.compare) if ln.strip()]
        for row in rows:
            if not a.only or any(s in row["id"] for s in a.only):
                r = capture_zoo.run(row)
                print(json.dumps(r), flush=True)
                res.append(r)
        return figures(res)
    # every measurement first, each in a child forked before the parent runs autograd
    # (a capture's backward here would make later forks refuse autograd)
    measured = []
    for cfg in configs(a.only):
        line, err, _ = zoo.run_child(["measure", json.dumps(cfg)], a.timeout)
        if err:
            print(json.dumps(dict(id=cfg["id"], error=err)), flush=True)
        else:
            measured.append(json.loads(line))
    out = open(a.out, "a") if a.out else None
    for row in measured:
        try:
            r = capture_zoo.run(row)
        except Exception as e:  # noqa: BLE001 - a row of the figures
            r = dict(id=row["id"], error=f"{type(e).__name__}: {e}"[:300])
        row["capture"] = r
        print(json.dumps(r), flush=True)
        res.append(r)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
    figures(res)


if __name__ == "__main__":
    main()
