#!/usr/bin/env python3
"""Summarise an allocator trace written by tools/gpu/trace_alloc.py, and set it
beside dnnmem's timeline of the same configuration.

    python3 tools/gpu/trace_summary.py TRACE.json.gz [--timeline STEPS.csv] [--top N]
                                       [--replay build/trace_replay]

Per phase (setup, then itN/zero_grad, forward, loss, backward, step, cleanup):
the peak of allocated bytes replayed from the alloc/free events, allocated and
reserved at the phase's end (as recorded), the segments created in it (count,
bytes) and, with --timeline (dnnmem estimate ... --timeline STEPS.csv, with
--iterations equal to the trace's iterations), dnnmem's figures for the same
phase: its peak allocated within the phase and reserved at its end. Then the
N largest segment allocations with the request that made each (its size and
frame), and the N largest recorded blocks live at the trace's allocated peak.

The trace starts after the model is on the device: what was allocated then
(the setup phase's "allocated") is counted from the start, and a free of a
block allocated before the recording takes its size from the event.

--replay BIN (tools/gpu/trace_replay.c, built as its header says): feeds the
trace's own requests and frees, in order, to dnnmem's caching-allocator
simulation and prints, per phase, the segments it made against the trace's,
then every request where the two differ. Blocks allocated before the
recording are unknown to it (and its frees of them skipped), so a trace whose
setup left free cached memory (a process that ran other models first) differs
early; a fresh one should match. Standard library only.
"""
import argparse, csv, gzip, json, subprocess

MIB = 1 << 20
ALLOC, FREE_REQ, FREE_DONE, SEG_ALLOC, SEG_FREE = range(5)


def load(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def replay(tr):
    """Per phase: (peak allocated, segments made, their bytes); the segments
    with the request that made each; the global peak and its live set."""
    phases = tr["meta"]["phases"]
    events = tr["events"]
    # what the setup had allocated before the recording began
    cur = phases[0]["allocated"] if phases else 0
    live, peak, peak_live = {}, cur, {}
    per = [{"peak": 0, "segs": 0, "seg_bytes": 0} for _ in phases]
    segs = []
    # a block leaves the allocated count when its free completes (at once
    # unless another stream still uses it); older traces log only the request
    free_action = FREE_DONE if any(e[0] == FREE_DONE for e in events) else FREE_REQ
    for i, (action, size, addr, stream, frame, ph) in enumerate(events):
        p = per[ph] if ph < len(per) else per[-1]
        if action == ALLOC:
            live[(addr, stream)] = (size, frame)
            cur += size
            p["peak"] = max(p["peak"], cur)
            if cur > peak:
                peak, peak_live = cur, dict(live)
        elif action == free_action:
            blk = live.pop((addr, stream), None)
            # a block from before the recording: the event gives its size
            cur -= blk[0] if blk else size
        elif action == SEG_ALLOC:
            p["segs"] += 1
            p["seg_bytes"] += size
            nxt = next((e for e in events[i + 1:] if e[0] == ALLOC), None)
            segs.append((size, nxt[1] if nxt else 0, nxt[4] if nxt else frame, ph))
    return per, segs, peak, peak_live


def replay_sim(tr, binary):
    """The trace's requests through dnnmem's caching allocator (trace_replay):
    per request, (phase, size, frame, segment bytes traced, simulated)."""
    events = tr["events"]
    free_action = FREE_DONE if any(e[0] == FREE_DONE for e in events) else FREE_REQ
    live, lines, reqs, pending = {}, [], [], 0
    for action, size, addr, stream, frame, ph in events:
        if action == SEG_ALLOC:
            pending += size
        elif action == ALLOC:
            key = len(reqs) + 1
            live[(addr, stream)] = key
            lines.append("A %d %d" % (key, size))
            reqs.append([ph, size, frame, pending, 0])
            pending = 0
        elif action == free_action:
            key = live.pop((addr, stream), None)
            if key is not None:
                lines.append("F %d" % key)
    out = subprocess.run([binary], input="\n".join(lines) + "\n", capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        key, _granted, seg, _reserved = (int(w) for w in line.split())
        reqs[key - 1][4] = seg
    return reqs


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
    ap.add_argument("--replay", metavar="BIN")
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
    print("\nlargest segment allocations (the request that made each):")
    for size, req, frame, ph in sorted(segs, reverse=True)[:a.top]:
        print("  %9.1f MiB  for %12d B  %-16s %s" % (
            size / MIB, req, names[ph] if ph < len(names) else "?", tr["frames"][frame]))
    print("\nlargest recorded blocks live at the allocated peak:")
    for (addr, stream), (size, frame) in sorted(peak_live.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print("  %9.1f MiB  %s" % (size / MIB, tr["frames"][frame]))
    if a.replay:
        reqs = replay_sim(tr, a.replay)
        print("\ndnnmem's caching allocator on the trace's own requests (segment MiB):")
        print("%-16s %10s %10s" % ("phase", "traced", "simulated"))
        for i, name in enumerate(names):
            t = sum(r[3] for r in reqs if r[0] == i)
            s = sum(r[4] for r in reqs if r[0] == i)
            if t or s:
                print("%-16s %10.1f %10.1f" % (name, t / MIB, s / MIB))
        diff = [r for r in reqs if r[3] != r[4]]
        print("requests where they differ: %d of %d" % (len(diff), len(reqs)))
        for ph, size, frame, t, s in diff[:max(a.top, 0)]:
            print("  %-16s %12d B  traced %8.1f  simulated %8.1f MiB  %s" % (
                names[ph] if ph < len(names) else "?", size, t / MIB, s / MIB, tr["frames"][frame]))


if __name__ == "__main__":
    main()
