#!/usr/bin/env python3
"""Which op makes a zoo miss: the profiler's allocations against dnnmem's, event by event.

    /tmp/zoo-venv/bin/python tools/oracle/attribute.py ID [--dnnmem build/dnnmem] [--top N]
        [--measured FILE.json] [--estimate-args "..."] [--window N]
    python3 tools/oracle/attribute.py ID --measured FILE.json    # FILE saved before: no torch

ID is a configuration of tools/oracle/zoo.py (e.g. shufflenet_v2_x1_0-train-sgd-b2-i224).
The tool

  1. re-runs that configuration's measurement exactly as zoo.py measure does
     (zoo.profiled_run: same seeds, phases and profiler settings; one thread) and takes
     the event tree's Allocation nodes in time order, each with its size, pointer, phase
     (it0/forward, ...) and operator (outermost aten op > innermost non-factory op, as
     live_at_peak_top); a free is matched to its allocation by pointer;
  2. runs `dnnmem estimate` on the row's graph with the options zoo.py compare uses and
     `--events`, dnnmem's every allocation and free with its step's phase, iteration,
     node and op and the buffer's name (setup events are the bytes live before the run,
     and are checked against the measured bytes_before);
  3. aligns the two sequences of allocations phase by phase (measured itN/P against
     dnnmem's iteration N+1, P, the numbering printed; the measured cleanup with
     dnnmem's optimizer, where the schedule frees the output and loss) by order, size
     and op kind (KINDS maps PyTorch's op names and dnnmem's ONNX ops to kinds: conv,
     batchnorm, act, ...): difflib's longest matching runs of (size, kind), then of
     size alone in the stretches between them;
  4. prints the first divergence (the first allocation of a phase left unpaired on
     either side, '>', with a few events of context on both sides), and the difference
     between the two live sets at both peaks: at the measured peak, the measured live
     blocks against dnnmem's live buffers at the aligned point (after the partner of
     the last paired allocation), and the same at dnnmem's peak.  Live on one side
     only: per size, the blocks one side has more of (those whose partner is not live
     first), so a mis-pairing of equal sizes does not show as a difference; listed by
     phase, op and size, grouped, largest first.

--measured FILE.json saves the measured events (or reads them, when FILE exists), so the
alignment can be redone without torch after a change to dnnmem; --estimate-args adds
dnnmem options (a what-if: "--inplace none"); --window N lists the last N events up to
each peak on both sides.  A miss names its op within seconds (the run is
the same as the measurement, a second or two for the random models).
"""

import argparse
import collections
import csv
import difflib
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo  # noqa: E402

# Op kinds for the alignment: (kind, fragments of PyTorch's op names, lowercase without
# "_" and "::", forward and autograd node names alike; ONNX ops of dnnmem's nodes).  The
# first kind one of whose fragments is in a measured op's name is its kind; a node's
# kind is the kind listing its ONNX op; anything else is "?", aligned by size alone.
KINDS = (
    ("conv", ("convolution", "conv2d", "conv1d", "conv3d", "slowconv", "mkldnnconv"),
     ("Conv", "ConvTranspose")),
    ("batchnorm", ("batchnorm",), ("BatchNormalization",)),
    ("groupnorm", ("groupnorm",), ("GroupNormalization",)),
    ("instancenorm", ("instancenorm",), ("InstanceNormalization",)),
    ("layernorm", ("layernorm",), ("LayerNormalization",)),
    ("linear", ("addmm", "linear", "matmul", "bmm", "atenmm", "mmbackward"),
     ("Gemm", "MatMul")),
    ("pool", ("maxpool", "avgpool", "adaptiveavg", "adaptivemax"),
     ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")),
    ("mean", ("atenmean", "meanbackward", "atensum", "sumbackward"), ("ReduceMean", "ReduceSum")),
    ("cat", ("atencat", "catbackward"), ("Concat",)),
    ("split", ("split", "chunk", "slice", "narrow", "unbind"), ("Split", "Slice")),
    ("copy", ("contiguous", "clone", "transpose", "permute", "view", "reshape", "copy"),
     ("Transpose", "Reshape", "Flatten", "Identity")),
    ("softmax", ("softmax",), ("Softmax", "LogSoftmax")),
    ("dropout", ("dropout", "bernoulli", "nativedropout"), ("Dropout",)),
    ("act", ("relu", "threshold", "hardtanh", "hardswish", "hardsigmoid", "silu", "sigmoid",
             "tanh", "gelu", "elu", "mish", "leakyrelu", "softplus", "erf"),
     ("Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Gelu", "Elu", "Selu",
      "Mish", "LeakyRelu", "Softplus", "Erf", "SiLU")),
    ("arith", ("atenadd", "atenmul", "atendiv", "atensub", "addbackward", "mulbackward",
               "divbackward", "subbackward"), ("Add", "Mul", "Div", "Sub")),
)
TORCH_KIND = [(k, frags) for k, frags, _ in KINDS]
ONNX_KIND = {op: k for k, _, ops in KINDS for op in ops}


def torch_kind(op):
    s = op.lower().replace("_", "").replace("::", "")
    for k, frags in TORCH_KIND:
        if any(f in s for f in frags):
            return k
    return "?"


class Ev:
    """One allocation (bytes > 0) or free (bytes < 0) on either side."""
    __slots__ = ("i", "bytes", "seg", "op", "kind", "name", "partner", "free_at", "alloc_at")

    def __init__(self, i, nbytes, seg, op, kind, name):
        self.i, self.bytes, self.seg, self.op, self.name = i, nbytes, seg, op, name
        self.kind = "optim" if seg[1] in ("optimizer", "zero_grad") else \
            "loss" if seg[1] == "loss" else kind
        self.partner = None   # allocation on the other side aligned with this one
        self.free_at = None   # for an allocation: its free's index (None: never freed)
        self.alloc_at = None  # for a free: its allocation's index


def measured_events(cfg):
    """The profiler's allocations of a fresh run of cfg, as zoo.measure takes them."""
    p = zoo.profiled_run(cfg)
    allocs = zoo.tree_allocations(p["kr"])
    if [a[2] for a in allocs] != [nb for _, _, nb in p["evs"]]:
        sys.exit("attribute: the event tree's allocations differ from the profiler's events")
    return p["before"], [dict(bytes=a[2], ptr=a[3], phase=a[4] or "(outside)", op=a[5])
                         for a in allocs]


def measured_seq(raw):
    """Ev list with each free linked to its allocation (by pointer)."""
    evs, open_ = [], {}
    for i, r in enumerate(raw):
        it, _, ph = r["phase"].partition("/")
        if ph == "cleanup":       # dnnmem frees out and loss at the end of the optimizer step
            ph = "optimizer"
        seg = (int(it[2:]) + 1 if it.startswith("it") else 0, ph)
        e = Ev(i, r["bytes"], seg, r["op"], torch_kind(r["op"]), f"{r['phase']} {r['op']}")
        if r["bytes"] > 0:
            open_[r["ptr"]] = e
        else:
            a = open_.pop(r["ptr"], None)
            if a is not None:
                a.free_at, e.alloc_at = i, a.i
        evs.append(e)
    return evs


def dnnmem_seq(dnnmem, row, extra):
    """dnnmem's events (setup apart) as Ev list, its setup bytes and its --json result."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "events.csv")
        est, err = zoo.estimate(dnnmem, row, ["--events", path] + extra)
        if err:
            sys.exit(f"attribute: dnnmem: {err}")
        with open(path) as f:
            rows = list(csv.DictReader(f))
    setup, evs, open_ = 0, [], {}
    for r in rows:
        nb = int(r["bytes"]) * (1 if r["kind"] == "alloc" else -1)
        if r["phase"] == "setup":
            setup += nb
            continue
        i = len(evs)
        e = Ev(i, nb, (int(r["iteration"]), r["phase"]), f"{r['op']} {r['node']}",
               ONNX_KIND.get(r["op"], "?"),
               f"{r['phase']} it{r['iteration']} {r['op']} {r['node']} [{r['category']}] {r['buffer']}")
        key = (r["buffer"], int(r["bytes"]))
        if nb > 0:
            open_.setdefault(key, []).append(e)
        elif open_.get(key):
            a = open_[key].pop()
            a.free_at, e.alloc_at = i, a.i
        evs.append(e)
    return setup, evs, est


def segments(evs):
    out = collections.OrderedDict()
    for e in evs:
        out.setdefault(e.seg, []).append(e)
    return out


def pair_runs(ma, da, key):
    """Pair equal runs of ma and da by key (difflib); the unpaired stretches between
    them, as (i1, i2, j1, j2)."""
    sm = difflib.SequenceMatcher(None, [key(e) for e in ma], [key(e) for e in da], autojunk=False)
    rest = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            for a, b in zip(ma[i1:i2], da[j1:j2]):
                a.partner, b.partner = b, a
        else:
            rest.append((i1, i2, j1, j2))
    return rest


def divergence(seg, ma, da):
    """The first unpaired allocation of a segment on either side, with context."""
    i = next((k for k, e in enumerate(ma) if e.partner is None), None)
    if i is not None:  # the dnnmem event after the last pair before it
        j = next((da.index(ma[k].partner) + 1 for k in range(i - 1, -1, -1) if ma[k].partner), 0)
    else:
        j = next((k for k, e in enumerate(da) if e.partner is None), None)
        if j is None:
            return None
        i = next((ma.index(da[k].partner) + 1 for k in range(j - 1, -1, -1) if da[k].partner), 0)
    odd = {id(x) for x in ma[i:i + 6] + da[j:j + 6] if x.partner is None}
    return seg, ma[max(0, i - 3):i + 6], da[max(0, j - 3):j + 6], odd


def align(ms, ds):
    """Pair allocations segment by segment: first by (size, op kind), then what is left
    between those pairs by size alone; returns the first divergence (segment, measured
    events, dnnmem events around it, the unpaired ones) or None."""
    first = None
    dsegs = segments(ds)
    for seg, mev in segments(ms).items():
        ma = [e for e in mev if e.bytes > 0]
        da = [e for e in dsegs.get(seg, []) if e.bytes > 0]
        for i1, i2, j1, j2 in pair_runs(ma, da, lambda e: (e.bytes, e.kind)):
            pair_runs(ma[i1:i2], da[j1:j2], lambda e: e.bytes)
        if first is None:
            first = divergence(seg, ma, da)
    return first


def peak_index(evs):
    level, peak, at = 0, None, -1
    for e in evs:
        level += e.bytes
        if peak is None or level > peak:
            peak, at = level, e.i
    return peak or 0, at


def live_at(evs, k):
    """Allocations made at or before index k and not yet freed there."""
    return [e for e in evs[:k + 1] if e.bytes > 0 and (e.free_at is None or e.free_at > k)]


def other_index(evs, k):
    """The other side's index aligned with this side's index k: the partner of the last
    paired allocation at or before k (-1 before any)."""
    for e in reversed(evs[:k + 1]):
        if e.bytes > 0 and e.partner is not None:
            return e.partner.i
    return -1


def grouped(blocks, top):
    g = collections.Counter()
    n = collections.Counter()
    for e in blocks:
        g[(e.seg, e.op, e.bytes)] += e.bytes
        n[(e.seg, e.op, e.bytes)] += 1
    lines = []
    for (seg, op, nb), tot in sorted(g.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"      {tot:>12,d} B  {n[(seg, op, nb)]:>3} x {nb:>10,d}  it{seg[0]} {seg[1]:<9} {op}")
    return lines


def surplus(lh, lt, k2):
    """The blocks of lh (one side's live set) that lt (the other's, at its index k2) has
    no block of the same size for: per size, as many as lh has more, those whose partner
    is not live at k2 first (the pairing decides which, the sizes how many)."""
    count = collections.Counter(e.bytes for e in lt)
    mine = collections.defaultdict(list)
    for e in lh:
        mine[e.bytes].append(e)
    out = []
    for nb, es in mine.items():
        extra = len(es) - count[nb]
        if extra > 0:
            es.sort(key=lambda e: e.partner is not None and e.partner.i <= k2 and
                    (e.partner.free_at is None or e.partner.free_at > k2))
            out += es[:extra]
    return out


def diff_live(here, k, there):
    """The live sets at `here`'s index k and `there`'s aligned index, and the blocks live
    on one side only (by size)."""
    k2 = other_index(here, k)
    lh, lt = live_at(here, k), live_at(there, k2)
    return k2, lh, lt, surplus(lh, lt, k2), surplus(lt, lh, k)


def print_first(first):
    if first is None:
        print("\nfirst divergence: none (every allocation pairs with one of the same size)")
        return
    seg, mrun, drun, odd = first
    print(f"\nfirst divergence in it{seg[0]} {seg[1]} ('>' unpaired):")
    for e in mrun:
        print(f"   torch  {'>' if id(e) in odd else ' '} {e.bytes:>11,d}  {e.name}")
    for e in drun:
        print(f"   dnnmem {'>' if id(e) in odd else ' '} {e.bytes:>11,d}  {e.name}")


def report(row, before, ms, setup, ds, est, first, top, window=0):
    mpeak, mk = peak_index(ms)
    dpeak, dk = peak_index(ds)
    print(f"{row['id']}: measured {before + mpeak:,d} B (row: {row.get('peak_bytes', 0):,d}), "
          f"dnnmem {setup + dpeak:,d} B (--json: {est['peak_allocated_bytes']:,d}), "
          f"{100.0 * (setup + dpeak - before - mpeak) / (before + mpeak):+.2f}%")
    print(f"  before the run: measured {before:,d} B, dnnmem's setup {setup:,d} B "
          f"({setup - before:+,d})")
    paired = sum(1 for e in ms if e.bytes > 0 and e.partner is not None)
    print(f"  allocations: torch {sum(e.bytes > 0 for e in ms)}, dnnmem {sum(e.bytes > 0 for e in ds)}, "
          f"paired {paired}")
    print_first(first)
    for title, here, k, there, names in (
            ("at the measured peak", ms, mk, ds, ("torch only", "dnnmem only")),
            ("at dnnmem's peak", ds, dk, ms, ("dnnmem only", "torch only"))):
        k2, lh, lt, oh, ot = diff_live(here, k, there)
        sh, st = sum(e.bytes for e in oh), sum(e.bytes for e in ot)
        print(f"\n{title}")
        where = here[k].name if k >= 0 else "(start)"
        there_at = there[k2].name if k2 >= 0 else "(start)"
        print(f"  {names[0].split()[0]} event {k}: {where}")
        print(f"  {names[1].split()[0]} aligned event {k2}: {there_at}")
        print(f"  live: {names[0].split()[0]} {sum(e.bytes for e in lh):,d} B, "
              f"{names[1].split()[0]} {sum(e.bytes for e in lt):,d} B")
        print(f"    {names[0]}: {sh:,d} B")
        print("\n".join(grouped(oh, top)))
        print(f"    {names[1]}: {st:,d} B")
        print("\n".join(grouped(ot, top)))
        if window:
            for side, evs, j in ((names[0].split()[0], here, k), (names[1].split()[0], there, k2)):
                print(f"    {side}'s last {window} events to {j}:")
                for e in evs[max(0, j - window + 1):j + 1]:
                    print(f"      {e.bytes:>+12,d}  {e.name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("id")
    ap.add_argument("--dnnmem", default=os.path.join(zoo.ROOT, "build", "dnnmem"))
    ap.add_argument("--measured", help="measured events: read this file if it exists, else write it")
    ap.add_argument("--estimate-args", default="", help="more dnnmem options (what-ifs)")
    ap.add_argument("--variant", choices=sorted(zoo.VARIANTS), default="plain",
                    help="which export of the model dnnmem reads (zoo.py's VARIANTS)")
    ap.add_argument("--ref", default=zoo.OUT, help="the rows (zoo.OUT_113: the 1.13 ones, "
                    "measured and estimated with pytorch@1.13)")
    ap.add_argument("--top", type=int, default=12, help="groups listed per side")
    ap.add_argument("--window", type=int, default=0, help="also list each side's N events up to each peak")
    a = ap.parse_args()
    cfgs = {c["id"]: c for c in zoo.configs()}
    if a.id not in cfgs:
        sys.exit(f"attribute: {a.id}: not a zoo configuration")
    cfg = cfgs[a.id]
    row = next((r for r in zoo.read_rows(a.ref) if r["id"] == a.id), dict(cfg))
    row = dict(row, graph=zoo.graph_path(row, a.variant))
    if a.measured and os.path.exists(a.measured):
        with open(a.measured) as f:
            saved = json.load(f)
        before, raw = saved["before"], saved["events"]
    else:
        before, raw = measured_events(cfg)
        if a.measured:
            with open(a.measured, "w") as f:
                json.dump(dict(id=a.id, before=before, events=raw), f)
    ms = measured_seq(raw)
    setup, ds, est = dnnmem_seq(a.dnnmem, row, a.estimate_args.split())
    report(row, before, ms, setup, ds, est, align(ms, ds), a.top, a.window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
