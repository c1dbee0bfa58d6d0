"""python -m dnnmem capture: a model's step captured on the meta device into a .dnnmem file.

    python -m dnnmem capture torchvision.models:resnet18 --input 2,3,224,224 \\
        --mode train --optimizer sgd-momentum -o step.dnnmem
    dnnmem estimate step.dnnmem --gpu A100-80GB

MODEL is MODULE:CALLABLE, called with no arguments under torch.device("meta"). Each --input
is one positional input's shape (float32; ,int64 after the shape for token ids:
--input 1,128:int64). Training takes a target of the first input's batch (class ids for
cross_entropy, the output's shape for mse) and the loss and optimizer named.
"""
import argparse
import importlib
import sys

OPTIMIZERS = {  # the zoo's and the CLI's defaults (tools/oracle/zoo.py)
    "sgd": lambda torch, lr: (lambda p: torch.optim.SGD(p, lr=lr or 0.01)),
    "sgd-momentum": lambda torch, lr: (lambda p: torch.optim.SGD(p, lr=lr or 0.01, momentum=0.9)),
    "adam": lambda torch, lr: (lambda p: torch.optim.Adam(p, lr=lr or 1e-3)),
    "adamw": lambda torch, lr: (lambda p: torch.optim.AdamW(p, lr=lr or 1e-3)),
}


def _inputs(torch, specs):
    out = []
    for s in specs:
        shape, _, dtype = s.partition(":")
        dims = [int(d) for d in shape.split(",") if d]
        dt = getattr(torch, dtype or "float32")
        out.append(torch.empty(dims, dtype=dt, device="meta") if dt.is_floating_point
                   else torch.zeros(dims, dtype=dt, device="meta"))
    return out


def capture_main(argv):
    ap = argparse.ArgumentParser(prog="python -m dnnmem capture", description=__doc__.split("\n")[0])
    ap.add_argument("model", help="MODULE:CALLABLE returning the nn.Module")
    ap.add_argument("--input", action="append", required=True, help="SHAPE[:DTYPE], repeatable")
    ap.add_argument("--mode", choices=["infer", "train"], default="infer")
    ap.add_argument("--loss", choices=["cross_entropy", "mse", "sum"], default="cross_entropy")
    ap.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd-momentum")
    ap.add_argument("--lr", type=float)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--dims", help="NAME=AXIS[,NAME=AXIS]: sizes as functions of these input "
                    "axes (batch=0,seq=1), for --batch-size, --seq-len and --dim on the one capture")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    import dnnmem.torch as dt
    mod, _, fn = a.model.partition(":")
    if not fn:
        ap.error(f"{a.model}: expected MODULE:CALLABLE")
    with torch.device("meta"):
        model = getattr(importlib.import_module(mod), fn)()
    inputs = _inputs(torch, a.input)
    kw = {}
    if a.dims:
        try:
            kw["dims"] = {n: int(ax) for n, ax in (d.split("=") for d in a.dims.split(","))}
        except ValueError:
            ap.error(f"--dims {a.dims}: expected NAME=AXIS[,NAME=AXIS], e.g. batch=0,seq=1")
    if a.mode == "train":
        batch = inputs[0].shape[0]
        if a.loss == "cross_entropy":
            kw["target"] = torch.zeros(batch, dtype=torch.long, device="meta")
            kw["loss"] = F.cross_entropy
        elif a.loss == "mse":
            kw["loss"] = lambda out: F.mse_loss(out, torch.zeros_like(out))
        else:
            kw["loss"] = lambda out: out.sum()
        kw["optimizer"] = OPTIMIZERS[a.optimizer](torch, a.lr)
    try:
        cap = dt.capture(model, tuple(inputs), steps=a.steps, path=a.output, **kw)
    except dt.CaptureError as e:
        print(f"dnnmem: {e}", file=sys.stderr)
        return 4
    data = cap.data
    print(f"{a.output}: {len(data['storages'])} storages, {len(data['steps']) - 1} ops "
          f"({cap.header['mode']}, {cap.header['iterations']} iteration(s))")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "capture":
        print("usage: python -m dnnmem capture MODEL --input SHAPE ... -o FILE.dnnmem "
              "(then: dnnmem estimate FILE.dnnmem)", file=sys.stderr)
        return 2
    return capture_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
