"""Usage: python3 tools/advice_oos.py BUILD/dnnmem OUT.json (from the repository root).

Out-of-sample advice check (docs/advice.md): every zoo ONNX model (batch 32,
Adam) and every HF config (batch 4, seq 1024, AdamW, bf16, transformers 4.51),
a training step made not to fit: the capacity is its CUDA context plus half the
rest of its estimate. For each, the advice the binary prints: how many
entries, how many fit, the single checkpoint glob offered."""
import json, re, subprocess, sys, glob, os
D = sys.argv[1]
root = "tests/models"
jobs = []
for f in sorted(glob.glob(root + "/zoo/*.onnx")):
    jobs.append((os.path.basename(f), [f, "-b", "32", "--mode", "train", "--optimizer", "adam"]))
for f in sorted(glob.glob(root + "/hf/*.json")):
    jobs.append((os.path.basename(f), [f, "-b", "4", "-s", "1024", "--mode", "train", "--optimizer", "adamw",
                                       "--precision", "bf16", "--transformers", "4.51"]))
rows = []
for name, args in jobs:
    p = subprocess.run([D, "estimate"] + args + ["--json"], capture_output=True, text=True)
    if p.returncode != 0:
        rows.append((name, "error", p.stderr.strip()[:80])); continue
    tot = json.loads(p.stdout)["total_bytes"]
    ctx = json.loads(p.stdout)["cuda_context_bytes"]
    cap = ctx + int((tot - ctx) * 0.5)
    p = subprocess.run([D, "estimate"] + args + ["--memory", str(cap)], capture_output=True, text=True)
    lines = p.stdout.split("\n")
    try:
        i = next(k for k, l in enumerate(lines) if l.startswith("what would change it"))
    except StopIteration:
        rows.append((name, "no-advice", "")); continue
    ent = []
    pending = None
    for l in lines[i + 1:]:
        if not l.startswith("  "):
            break
        m = re.match(r"^  (.*?)\s+([0-9.]+) MiB  (fits|tight|does not fit)$", l)
        if m:
            ch = m.group(1).strip() or pending
            ent.append((ch, m.group(3))); pending = None
        elif l.startswith("  --"):
            pending = l.strip()
    fit = [c for c, v in ent if v != "does not fit"]
    ck = [c for c, v in ent if c and c.startswith("--checkpoint") and " --" not in c[13:]]
    rows.append((name, len(ent), len(fit), ck[0] if ck else "", fit[0] if fit else ""))
json.dump(rows, open(sys.argv[2], "w"), indent=0)
n = len(rows); err = sum(1 for r in rows if r[1] == "error")
ok = [r for r in rows if isinstance(r[1], int)]
print(f"{n} jobs, {err} errors, {sum(1 for r in rows if r[1]=='no-advice')} without advice")
print(f"advice with an entry that fits: {sum(1 for r in ok if r[2] > 0)} of {len(ok)}")
print(f"empty advice: {sum(1 for r in ok if r[1] == 0)}")
from collections import Counter
print("checkpoint offered:", Counter(r[3] for r in ok).most_common(12))
