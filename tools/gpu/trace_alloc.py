#!/usr/bin/env python3
"""Record PyTorch's CUDA caching-allocator trace of a few training steps, for
finding which allocation makes a measured figure differ from dnnmem's.

    python3 tools/gpu/trace_alloc.py tools/gpu/trace-configs.jsonl OUTDIR

Run on the GPU machine (PyTorch 2.1 or later, transformers). Each line of the
configuration file has the fields of the shared gpu/measure.py for "source":
"hf" (model: a config.json path relative to the file's folder, mode "train" or "infer",
batch, seq, precision fp32|fp16|bf16|amp-fp16|amp-bf16, attn eager|sdpa,
optimizer none|sgd|adam|adamw, loss ce|sum, iters, default 2) and an "id".
The model is built as measure.py builds it (AutoModelForMaskedLM for bert,
roberta, distilbert and albert, else AutoModelForCausalLM), in float32 unless
the precision says fp16/bf16 (dtype passed explicitly, so transformers 5's
dtype="auto" does not apply), on the GPU.

For each configuration, OUTDIR/trace-ID.json.gz holds:
  "meta": versions, the configuration, and per phase (zero_grad, forward, loss,
          backward, step, per iteration) memory_allocated / memory_reserved at
          its end and max_memory_allocated within it;
  "frames": a table of "file:line:function" strings (the innermost frame in
          transformers, torch/nn, torch/optim, torch/autograd or this script);
  "events": [action, size, address offset, stream, frame index, phase index]
          per allocator event, in order: action 0 alloc, 1 free_requested,
          2 free_completed, 3 segment_alloc, 4 segment_free, 5 other (see
          torch.cuda.memory._snapshot()'s "device_traces"), sizes in bytes as
          the trace gives them (the block size for alloc/free, the segment's
          for segment_*), addresses relative to the lowest address seen.
Phases are told apart by their index (events are tagged while they are read:
the trace is read after each phase, from where the previous read ended).
At most MAX_EVENTS events per configuration are kept (the rest counted).

tools/gpu/trace_summary.py reads these files on any machine.
"""
import gzip, json, os, sys, time, traceback

MAX_EVENTS = 400000
ACTIONS = {"alloc": 0, "free_requested": 1, "free_completed": 2, "segment_alloc": 3,
           "segment_free": 4}
KEEP = ("transformers/", "torch/nn/", "torch/optim/", "torch/autograd/", "trace_alloc.py")

import torch  # noqa: E402


def versions():
    p = torch.cuda.get_device_properties(0)
    v = {"gpu": p.name, "capability": "%d.%d" % (p.major, p.minor), "torch": torch.__version__,
         "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    for mod in ("transformers", "peft"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:
            v[mod] = None
    return v


def build(cfg):
    import transformers
    conf = transformers.AutoConfig.from_pretrained(cfg["model"])
    attn = cfg.get("attn", "sdpa")
    conf._attn_implementation = attn
    masked = conf.model_type in ("bert", "roberta", "distilbert", "albert") or \
        any(a.endswith("ForMaskedLM") for a in (conf.architectures or []))
    cls = transformers.AutoModelForMaskedLM if masked else transformers.AutoModelForCausalLM
    prec = cfg.get("precision", "fp32")
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(prec, torch.float32)
    m = None
    for kw in ({"attn_implementation": attn, "dtype": dt},
               {"attn_implementation": attn, "torch_dtype": dt},
               {"attn_implementation": attn}):
        try:
            m = cls.from_config(conf, **kw)
            break
        except (TypeError, ValueError):
            continue
    if m is None:
        raise RuntimeError("from_config failed for every keyword set")
    m = m.to(dt)
    x = torch.randint(0, conf.vocab_size, (cfg["batch"], cfg["seq"]))
    return m, x


class Reader:
    """Reads the allocator trace incrementally and tags each event with a phase."""

    def __init__(self):
        self.seen = 0
        self.events = []
        self.frames, self.frame_index = [], {}
        self.dropped = 0
        self.base = None

    def frame(self, frames):
        name = "?"
        for f in frames or []:
            fn = f.get("filename", "")
            if any(k in fn for k in KEEP):
                short = fn.split("site-packages/")[-1]
                name = "%s:%s:%s" % (short, f.get("line", "?"), f.get("name", "?"))
                break
        if name not in self.frame_index:
            self.frame_index[name] = len(self.frames)
            self.frames.append(name)
        return self.frame_index[name]

    def read(self, phase):
        snap = torch.cuda.memory._snapshot()
        traces = snap.get("device_traces") or [[]]
        tr = traces[0] if traces else []
        new = tr[self.seen:]
        self.seen = len(tr)
        for e in new:
            if len(self.events) >= MAX_EVENTS:
                self.dropped += 1
                continue
            addr = int(e.get("addr", 0) or 0)
            # events without an address (snapshot markers) do not move the base
            if addr and (self.base is None or addr < self.base):
                self.base = addr
            self.events.append([ACTIONS.get(e.get("action"), 5), int(e.get("size", 0) or 0), addr,
                                int(e.get("stream", 0) or 0), self.frame(e.get("frames")), phase])
        return len(new)


def run_one(cfg, out_dir, meta0):
    torch.manual_seed(0)
    m, x = build(cfg)
    m = m.cuda()
    x = x.cuda()
    prec = cfg.get("precision", "fp32")
    amp = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(prec)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = {"sgd": lambda: torch.optim.SGD(params, lr=1e-3),
           "adam": lambda: torch.optim.Adam(params, lr=1e-4),
           "adamw": lambda: torch.optim.AdamW(params, lr=1e-4),
           "none": lambda: None}[cfg.get("optimizer", "adamw")]()
    scaler = torch.amp.GradScaler("cuda") if prec == "amp-fp16" else None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    kw = {"max_entries": MAX_EVENTS + 10000}
    try:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", **kw)
    except TypeError:
        torch.cuda.memory._record_memory_history(True, **kw)
    rd = Reader()
    phases = []

    def mark(name):
        torch.cuda.synchronize()
        n = rd.read(len(phases))
        phases.append({"phase": name, "events": n, "allocated": torch.cuda.memory_allocated(),
                       "reserved": torch.cuda.memory_reserved(),
                       "max_allocated": torch.cuda.max_memory_allocated()})
        torch.cuda.reset_peak_memory_stats()

    mark("setup")
    if cfg.get("mode") == "infer":  # model(x) under no_grad, eval, as measure_hf.py's infer
        m.eval()
        for it in range(cfg.get("iters", 1)):
            with torch.no_grad(), torch.autocast("cuda", dtype=amp, enabled=amp is not None):
                out = m(x)
            mark("it%d/forward" % (it + 1))
            del out
            mark("it%d/cleanup" % (it + 1))
    m.train()
    for it in range(cfg.get("iters", 2) if cfg.get("mode", "train") == "train" else 0):
        p = "it%d/" % (it + 1)
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        else:
            m.zero_grad(set_to_none=True)
        mark(p + "zero_grad")
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            out = m(x)
            logits = out.logits if hasattr(out, "logits") else out[0]
        mark(p + "forward")
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            if cfg.get("loss", "ce") == "sum":
                loss = logits.sum()
            else:
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]).float(), x.reshape(-1))
        mark(p + "loss")
        (scaler.scale(loss) if scaler else loss).backward()
        mark(p + "backward")
        if opt is not None:
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
        mark(p + "step")
        del out, logits, loss
        mark(p + "cleanup")
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except TypeError:
        torch.cuda.memory._record_memory_history(False)
    base = rd.base or 0
    for e in rd.events:
        e[2] = e[2] - base if e[2] else 0
    rec = {"meta": dict(meta0, config=cfg, phases=phases, dropped=rd.dropped,
                        params=sum(q.numel() for q in m.parameters())),
           "frames": rd.frames, "events": rd.events}
    path = os.path.join(out_dir, "trace-%s.json.gz" % cfg["id"])
    with gzip.open(path, "wt") as f:
        json.dump(rec, f, separators=(",", ":"))
    del m, opt, x
    return path, len(rd.events), rd.dropped


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cfg_path, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    torch.zeros(1, device="cuda")
    meta0 = versions()
    print(json.dumps(meta0), flush=True)
    for line in open(cfg_path):
        if not line.strip():
            continue
        cfg = json.loads(line)
        if not os.path.isabs(cfg["model"]):
            cfg["model"] = os.path.join(os.path.dirname(os.path.abspath(cfg_path)), cfg["model"])
        t = time.time()
        try:
            path, n, dropped = run_one(cfg, out_dir, meta0)
            print(cfg["id"], "ok", path, n, "events", dropped, "dropped",
                  "%.1f s" % (time.time() - t), flush=True)
        except Exception as e:
            print(cfg["id"], "error:", "".join(traceback.format_exception_only(type(e), e)).strip(),
                  flush=True)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
