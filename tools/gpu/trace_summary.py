#!/usr/bin/env python3
"""Summarise an allocator trace written by tools/gpu/trace_alloc.py, and set it
beside dnnmem's timeline of the same configuration.

    python3 tools/gpu/trace_summary.py TRACE.json.gz [--timeline STEPS.csv] [--top N]

Per phase (setup, then itN/zero_grad, forward, loss, backward, step, cleanup):
the peak of allocated bytes replayed from the alloc/free events, allocated and
reserved at the phase's end (as recorded), the segments created in it (count,
bytes) and, with --timeline (dnnmem estimate ... --timeline STEPS.csv, with
--iterations equal to the trace's iterations), dnnmem's figures for the same
phase: its peak allocated within the phase and reserved at its end. Then the
N largest segment allocations with the frame that asked for them, and the N
largest blocks live at the trace's allocated peak. Standard library only.
"""
import argparse, csv, gzip, json

MIB = 1 << 20
ALLOC, FREE_REQ, FREE_DONE, SEG_ALLOC, SEG_FREE = range(5)


def load(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def replay(tr):
    """Per phase: (peak allocated, segments made, their bytes); the global peak's live set."""
    phases = tr["meta"]["phases"]
    live, cur, peak, peak_live = {}, 0, 0, {}
    per = [{"peak": 0, "segs": 0, "seg_bytes": 0} for _ in phases]
    segs = []
    # a block leaves the allocated count when its free completes (at once
    # unless another stream still uses it); older traces log only the request
    free_action = FREE_DONE if any(e[0] == FREE_DONE for e in tr["events"]) else FREE_REQ
    for action, size, addr, stream, frame, ph in tr["events"]:
        p = per[ph] if ph < len(per) else per[-1]
        if action == ALLOC:
            live[(addr, stream)] = (size, frame)
            cur += size
            p["peak"] = max(p["peak"], cur)
            if cur > peak:
                peak, peak_live = cur, dict(live)
        elif action == free_action:
            blk = live.pop((addr, stream), None)
            if blk:
                cur -= blk[0]
        elif action == SEG_ALLOC:
            p["segs"] += 1
            p["seg_bytes"] += size
            segs.append((size, frame, ph))
    return per, segs, peak, peak_live


def dnnmem_phases(path, names):
    """dnnmem's timeline folded onto the trace's phase names: max allocated, last reserved."""
    rows = list(csv.DictReader(open(path)))
    alias = {"optimizer": "step"}
    out = {}
    for r in rows:
        ph = r["phase"] if r["phase"] == "setup" else "it%s/%s" % (r["iteration"],
                                                                   alias.get(r["phase"], r["phase"]))
        o = out.setdefault(ph, {"peak": 0, "reserved": 0})
        o["peak"] = max(o["peak"], int(r["allocated"]))
        o["reserved"] = int(r["reserved"])
    return {n: out.get(n) for n in names}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--timeline")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    tr = load(a.trace)
    meta = tr["meta"]
    print("%s: %s" % (meta["config"]["id"], {k: meta.get(k) for k in ("gpu", "torch", "transformers")}))
    if meta.get("dropped"):
        print("warning: %d events were dropped (MAX_EVENTS)" % meta["dropped"])
    per, segs, peak, peak_live = replay(tr)
    names = [p["phase"] for p in meta["phases"]]
    dn = dnnmem_phases(a.timeline, names) if a.timeline else {}
    print("%-16s %10s %10s %10s %6s %10s   %10s %10s" % (
        "phase (MiB)", "peak", "alloc end", "reserved", "segs", "seg MiB", "dnnmem pk", "dnnmem res"))
    for i, p in enumerate(meta["phases"]):
        d = dn.get(p["phase"]) or {}
        print("%-16s %10.1f %10.1f %10.1f %6d %10.1f   %10s %10s" % (
            p["phase"], per[i]["peak"] / MIB, p["allocated"] / MIB, p["reserved"] / MIB,
            per[i]["segs"], per[i]["seg_bytes"] / MIB,
            "%.1f" % (d["peak"] / MIB) if d else "-", "%.1f" % (d["reserved"] / MIB) if d else "-"))
    print("replayed allocated peak %.1f MiB (recorded max_memory_allocated per phase: %.1f MiB)"
          % (peak / MIB, max(p["max_allocated"] for p in meta["phases"]) / MIB))
    print("\nlargest segment allocations:")
    for size, frame, ph in sorted(segs, reverse=True)[:a.top]:
        print("  %9.1f MiB  %-16s %s" % (size / MIB, names[ph] if ph < len(names) else "?",
                                          tr["frames"][frame]))
    print("\nlargest blocks live at the allocated peak:")
    for (addr, stream), (size, frame) in sorted(peak_live.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print("  %9.1f MiB  %s" % (size / MIB, tr["frames"][frame]))


if __name__ == "__main__":
    main()
