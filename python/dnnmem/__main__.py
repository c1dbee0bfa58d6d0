"""python -m dnnmem capture: a model's step captured on the meta device into a .dnnmem file.

    python -m dnnmem capture torchvision.models:resnet18 --input 2,3,224,224 \\
        --mode train --optimizer sgd-momentum -o step.dnnmem
    python -m dnnmem capture hf config.json --task causal-lm --attn eager \\
        --batch-size 2 --seq-len 128 --mode train --optimizer adam -o step.dnnmem
    dnnmem estimate step.dnnmem --gpu A100-80GB

MODEL is MODULE:CALLABLE, called with no arguments under torch.device("meta"). Each --input
is one positional input's shape (float32; ,int64 after the shape for token ids:
--input 1,128:int64). Training takes a target of the first input's batch (class ids for
cross_entropy, the output's shape for mse) and the loss and optimizer named. `capture hf`
builds a transformers model from its config (dnnmem.hf.capture). Both take --grad-accum N
(micro-batches per optimizer step), --autocast DEVICE:DTYPE (cpu:bfloat16, cuda:float16: each
forward and loss under torch.autocast) and --device meta|cpu|cuda (the step's tensors'
device: FakeTensors of it). Exit codes as the dnnmem CLI's: 2 a bad flag, 3 a model or
config that cannot be read or built, 4 a step the capture does not model.
"""
import argparse
import importlib
import json
import sys

OPTIMIZERS = {  # the zoo's and the CLI's defaults (tools/oracle/zoo.py)
    "sgd": lambda torch, lr: (lambda p: torch.optim.SGD(p, lr=lr or 0.01)),
    "sgd-momentum": lambda torch, lr: (lambda p: torch.optim.SGD(p, lr=lr or 0.01, momentum=0.9)),
    "adam": lambda torch, lr: (lambda p: torch.optim.Adam(p, lr=lr or 1e-3)),
    "adamw": lambda torch, lr: (lambda p: torch.optim.AdamW(p, lr=lr or 1e-3)),
}
DEVICES = ("meta", "cpu", "cuda")           # dnnmem.torch._DEVICES
AUTOCAST_DTYPES = ("bfloat16", "float16")   # torch.autocast's (dnnmem.torch._AUTOCAST_DTYPES)
HF_TASKS = ("causal-lm", "masked-lm", "sequence-classification", "token-classification",
            "seq2seq-lm", "image-classification", "base")  # dnnmem.hf.TASKS
EXIT_USAGE, EXIT_MODEL, EXIT_UNSUPPORTED = 2, 3, 4  # the dnnmem CLI's exit codes (docs/options.md)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (the dnnmem CLI's style), exit code 2."""

    def error(self, message):
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _fail(prog, code, message):
    print(f"{prog}: {message}", file=sys.stderr)
    return code


def _inputs(torch, specs):
    out = []
    for s in specs:
        shape, _, dtype = s.partition(":")
        dims = [int(d) for d in shape.split(",") if d]
        dt = getattr(torch, dtype or "float32")
        out.append(torch.empty(dims, dtype=dt, device="meta") if dt.is_floating_point
                   else torch.zeros(dims, dtype=dt, device="meta"))
    return out


def _step_flags(ap):
    """The flags of both captures: how the step runs."""
    ap.add_argument("--mode", choices=["infer", "train"], default="infer")
    ap.add_argument("--steps", type=int, default=2, help="training iterations (default 2)")
    ap.add_argument("--grad-accum", type=int, default=1, metavar="N",
                    help="micro-batches of forward, loss / N and backward per optimizer step")
    ap.add_argument("--autocast", metavar="DEVICE:DTYPE",
                    help="each forward and loss under torch.autocast: cpu:bfloat16, cuda:float16, ...")
    ap.add_argument("--grad-scaler", action="store_true",
                    help="the AMP recipe's torch.amp.GradScaler, the gradients assumed finite")
    ap.add_argument("--device", choices=DEVICES,
                    help="the step's tensors' device (default meta; the --autocast device)")
    ap.add_argument("-o", "--output", required=True)


def _step_options(ap, a):
    """capture's grad_accum, device and autocast from the flags (a bad one: ap.error)."""
    import torch
    if a.steps < 1:
        ap.error(f"--steps {a.steps}: a number of iterations >= 1")
    if a.grad_accum < 1:
        ap.error(f"--grad-accum {a.grad_accum}: a number of micro-batches >= 1")
    if a.grad_accum > 1 and a.mode != "train":
        ap.error(f"--grad-accum {a.grad_accum}: gradient accumulation needs --mode train")
    kw = {"grad_accum": a.grad_accum}
    if a.grad_scaler:
        if a.mode != "train":
            ap.error("--grad-scaler: a GradScaler scales a training step's loss: needs --mode train")
        if (a.device or (a.autocast or "meta").partition(":")[0]) == "meta":
            ap.error("--grad-scaler runs on the step's device: add --device cpu or --autocast")
        kw["grad_scaler"] = True
    if a.autocast is not None:
        dev, _, dtype = a.autocast.partition(":")
        if dev not in DEVICES[1:] or dtype not in AUTOCAST_DTYPES:
            ap.error(f"--autocast {a.autocast}: expected DEVICE:DTYPE with DEVICE cpu or cuda and "
                     f"DTYPE {' or '.join(AUTOCAST_DTYPES)} (what is modelled), e.g. cpu:bfloat16")
        if a.device is not None and a.device != dev:
            ap.error(f"--autocast {a.autocast} with --device {a.device}: autocast casts nothing on "
                     f"{a.device} tensors; use --device {dev} or leave it out")
        kw["autocast"] = (dev, getattr(torch, dtype))
    if a.device is not None:
        kw["device"] = a.device
    return kw


def _report(a, cap):
    data = cap.data
    h = cap.header
    extra = "".join([f", {data['grad_accum']} micro-batches" if data.get("grad_accum") else "",
                     f", autocast {data['autocast']['device']}:{data['autocast']['dtype']}"
                     if data.get("autocast") else ""])
    print(f"{a.output}: {len(data['storages'])} storages, {len(data['steps']) - 1} ops "
          f"({h['mode']}, {h['iterations']} iteration(s){extra})")
    return 0


def capture_main(argv):
    ap = _Parser(prog="python -m dnnmem capture", description=__doc__.split("\n")[0])
    ap.add_argument("model", help="MODULE:CALLABLE returning the nn.Module")
    ap.add_argument("--input", action="append", required=True, help="SHAPE[:DTYPE], repeatable")
    ap.add_argument("--loss", choices=["cross_entropy", "mse", "sum"], default="cross_entropy")
    ap.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd-momentum")
    ap.add_argument("--lr", type=float)
    ap.add_argument("--dims", help="NAME=AXIS[,NAME=AXIS]: sizes as functions of these input "
                    "axes (batch=0,seq=1), for --batch-size, --seq-len and --dim on the one capture")
    _step_flags(ap)
    a = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    import dnnmem.torch as dt
    mod, _, fn = a.model.partition(":")
    if not fn:
        ap.error(f"{a.model}: expected MODULE:CALLABLE")
    kw = _step_options(ap, a)
    try:
        inputs = _inputs(torch, a.input)
    except (ValueError, AttributeError, TypeError):
        ap.error(f"--input {' '.join(a.input)}: expected SHAPE[:DTYPE], e.g. 2,3,224,224 or 1,128:int64")
    if a.dims:
        try:
            kw["dims"] = {n: int(ax) for n, ax in (d.split("=") for d in a.dims.split(","))}
        except ValueError:
            ap.error(f"--dims {a.dims}: expected NAME=AXIS[,NAME=AXIS], e.g. batch=0,seq=1")
    try:
        with torch.device("meta"):
            model = getattr(importlib.import_module(mod), fn)()
    except (ImportError, AttributeError) as e:
        return _fail(ap.prog, EXIT_MODEL, f"{a.model}: {str(e).splitlines()[0]}")
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
        return _fail("dnnmem", EXIT_UNSUPPORTED, str(e))
    return _report(a, cap)


def hf_main(argv):
    ap = _Parser(prog="python -m dnnmem capture hf",
                 description="a transformers model's step from its config (dnnmem.hf.capture)")
    ap.add_argument("config", metavar="CONFIG_OR_DIR", help="a config.json or a directory holding one")
    ap.add_argument("--task", choices=HF_TASKS,
                    help="the Auto class's head (default: the config's architectures)")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="eager",
                    help="transformers' attn_implementation (default eager)")
    ap.add_argument("-b", "--batch-size", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--target-len", type=int, help="seq2seq-lm's decoder tokens (default --seq-len)")
    ap.add_argument("--image-size", type=int, help="image-classification's side (default the config's)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                    help="the model's parameters' dtype (default float32)")
    ap.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd-momentum")
    ap.add_argument("--peft", metavar="JSON", help="peft.LoraConfig's arguments as a JSON object, "
                    "e.g. '{\"r\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"]}'")
    ap.add_argument("--dims", help="batch[,seq]: sizes as functions of them")
    _step_flags(ap)
    a = ap.parse_args(argv)
    kw = _step_options(ap, a)
    for flag, v in (("--batch-size", a.batch_size), ("--seq-len", a.seq_len),
                    ("--target-len", a.target_len), ("--image-size", a.image_size)):
        if v is not None and v < 1:
            ap.error(f"{flag} {v}: a size >= 1")
    if a.dims:
        kw["dims"] = a.dims.split(",")
        if not set(kw["dims"]) <= {"batch", "seq"}:
            ap.error(f"--dims {a.dims}: expected batch, seq or batch,seq")
    if a.peft:
        try:
            kw["peft"] = json.loads(a.peft)
        except ValueError as e:
            ap.error(f"--peft: not a JSON object ({e})")
        if not isinstance(kw["peft"], dict):
            ap.error("--peft: expected a JSON object of peft.LoraConfig's arguments")
    try:
        import dnnmem.hf as hf
        import dnnmem.torch as dt
    except ImportError as e:
        return _fail(ap.prog, EXIT_UNSUPPORTED, f"needs torch and transformers ({e})")
    try:
        conf = hf.load_config(a.config)
    except (OSError, ValueError, KeyError) as e:
        return _fail(ap.prog, EXIT_MODEL, f"{a.config}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    try:
        cap = hf.capture(conf, task=a.task, attn_implementation=a.attn, batch_size=a.batch_size,
                         seq_len=a.seq_len, mode=a.mode, optimizer=a.optimizer, dtype=a.dtype,
                         steps=a.steps, path=a.output, target_len=a.target_len,
                         image_size=a.image_size, **kw)
    except dt.CaptureError as e:
        return _fail("dnnmem", EXIT_UNSUPPORTED, str(e))
    except ImportError as e:  # peft
        return _fail(ap.prog, EXIT_UNSUPPORTED, f"{e} (--peft needs the peft package)")
    except ValueError as e:
        return _fail(ap.prog, EXIT_UNSUPPORTED, f"{a.config}: {str(e).splitlines()[0]}")
    return _report(a, cap)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "capture":
        print("usage: python -m dnnmem capture MODEL --input SHAPE ... -o FILE.dnnmem "
              "| python -m dnnmem capture hf CONFIG_OR_DIR ... -o FILE.dnnmem "
              "(then: dnnmem estimate FILE.dnnmem)", file=sys.stderr)
        return EXIT_USAGE
    if argv[1:2] == ["hf"]:
        return hf_main(argv[2:])
    return capture_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
