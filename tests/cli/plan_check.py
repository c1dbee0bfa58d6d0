"""dnnmem plan's JSON against docs/schema/plan.schema.json, its rows against
dnnmem estimate, and its errors and exit codes (docs/parallel.md "plan").

Usage: python3 tests/cli/plan_check.py build/dnnmem
"""
import json
import subprocess
import sys

import jsonschema

D = sys.argv[1]
SCHEMA = json.load(open("docs/schema/plan.schema.json"))
MLP = "tests/models/dist/mlp4.onnx"
BASE = ["--mode", "train", "--device", "cpu", "--optimizer", "adam"]
passed = failed = 0


def run(args):
    p = subprocess.run([D] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + what)


def plan_json(args):
    rc, out, err = run(["plan", MLP] + BASE + args + ["--json"])
    check(rc in (0, 1), f"plan {args}: exit {rc}: {err.strip()}")
    d = json.loads(out)
    try:
        jsonschema.validate(d, SCHEMA)
        check(True, "")
    except jsonschema.ValidationError as e:
        check(False, f"plan {args}: does not match the schema: {e.message}")
    return rc, d


# 4 GPUs, a global batch of 16: every row makes 16, is the engine's own estimate
rc, d = plan_json(["--memory", "2GiB", "--gpus", "4", "--global-batch", "16"])
check(rc == 0 and d["configurations"], "plan on 4 GPUs: rows expected")
check(all(r["global_batch"] == 16 for r in d["configurations"]), "every row's global batch is 16")
check(d["estimated"] == d["refused"] + d["over"] + len(d["configurations"]), "estimated = refused + over + rows")
for r in d["configurations"][:3] + d["configurations"][-2:]:
    rc2, out, err = run(["estimate", MLP] + BASE + ["--memory", "2GiB", "--json"] + r["options"].replace("'", "").split())
    check(rc2 == 0 and json.loads(out)["total_bytes"] == r["total_bytes"],
          f"row {r['order']} ({r['options']}): estimate gives {rc2} {err.strip()}")
orders = [(r["tp"] * r["pp"], r["pp"], r["tier"]) for r in d["configurations"]]
check(orders == sorted(orders), "rows in the order: TP x PP, PP, tier")

# --fewest-gpus: mlp4 trains in 2 GiB on one GPU
rc, d = plan_json(["--memory", "2GiB", "--gpus", "8", "--fewest-gpus"])
check(d["gpus"] == 1 and all(r["gpus"] == 1 for r in d["configurations"]), "fewest GPUs at 2 GiB: 1")
# too small for any: exit 1, no rows
rc, d = plan_json(["--memory", "1MiB", "--gpus", "2", "--max-steps", "20"])
check(rc == 1 and d["configurations"] == [] and d["gpus"] == 0, "1 MiB: exit 1 and no rows")
check(d["estimated"] == 20 and d["truncated"], "--max-steps 20 bounds the estimates")

# tfm4's 8 heads of 64 (hidden 512): TP 16 leaves 32 features, a view of 64-wide heads
# that cannot infer its -1 (docs/parallel.md T7): refused once, its 11 other candidates
# (DP 1, 32 samples in 6 micro-batch sizes, checkpointing off and on) skipped
rc, out, err = run(["plan", "tests/models/dist/tfm4.onnx"] + BASE + ["--memory", "1GiB", "--gpus", "16",
                                                                    "--global-batch", "32", "--json"])
d = json.loads(out)
jsonschema.validate(d, SCHEMA)
check(rc == 0 and d["refused"] == 1 and d["skipped"] == 11 and "cannot be inferred" in d["first_refusal"]
      and all(r["tp"] <= 8 for r in d["configurations"]) and any(r["tp"] == 8 for r in d["configurations"]),
      f"tfm4 on 16 GPUs: TP 16 refused: {rc} {d['refused']} {d['skipped']} {d['first_refusal']}")

# fixed parallel options restrict the search: every row has them, and is the engine's estimate
for fixed, key, want in [(["--zero", "3"], "zero", 3), (["--fsdp", "shard-grad-op"], "fsdp", "shard-grad-op"),
                         (["--tp", "2"], "tp", 2)]:
    rc, d = plan_json(["--memory", "2GiB", "--gpus", "4", "--global-batch", "16"] + fixed)
    rows = d["configurations"]
    check(rc == 0 and rows and all(r[key] == want for r in rows), f"plan {fixed}: every row has it")
    for r in rows[:1] + rows[-1:]:
        rc2, out, err = run(["estimate", MLP] + BASE + ["--memory", "2GiB", "--json"] + r["options"].replace("'", "").split())
        check(rc2 == 0 and json.loads(out)["total_bytes"] == r["total_bytes"], f"plan {fixed}: row {r['options']}: {err.strip()}")
# --pp 2 on tfm4 (4 blocks): every row PP 2, at least 2 micro-batches, with --checkpoint its spec on every row
rc, out, err = run(["plan", "tests/models/dist/tfm4.onnx"] + BASE + ["--memory", "1GiB", "--gpus", "4", "--global-batch", "8",
                                                                    "--pp", "2", "--checkpoint", "/blocks.*", "--json"])
d = json.loads(out)
rows = d["configurations"]
check(rc == 0 and rows and all(r["pp"] == 2 and r["micro_batches"] >= 2 and r["checkpoint"] for r in rows)
      and d["candidates"] == len(rows), f"tfm4 --pp 2 --checkpoint: {rc} {err.strip()}")

# errors: one line on stderr, the constraint named, the exit code of its kind
for code, needle, args in [
    (2, "plan: give the GPUs with --gpus N", ["--memory", "2GiB"]),
    (2, "plan: give the device with --gpu NAME or --memory SIZE", ["--gpus", "2"]),
    (2, "--max-steps 1001: at most 1000", ["--memory", "2GiB", "--gpus", "2", "--max-steps", "1001"]),
    (2, "--max-steps 0: expected a positive integer", ["--memory", "2GiB", "--gpus", "2", "--max-steps", "0"]),
    (2, "--global-batch x: expected a positive integer", ["--memory", "2GiB", "--gpus", "2", "--global-batch", "x"]),
    (2, "plan: --grad-accum (the micro-steps come from", ["--memory", "2GiB", "--gpus", "2", "--grad-accum", "2"]),
    (7, "plan: --tp 3: TP x PP (3) does not divide --gpus 4", ["--memory", "2GiB", "--gpus", "4", "--tp", "3"]),
    (7, "plan: --zero 2 --fsdp full: no engine the plan forms has it",
     ["--memory", "2GiB", "--gpus", "4", "--zero", "2", "--fsdp", "full"]),
    (4, "plan: --zero 3 --tp 2: TP and PP with ZeRO, FSDP or offload are not modelled",
     ["--memory", "2GiB", "--gpus", "4", "--zero", "3", "--tp", "2"]),
    (7, "plan: --gpus 3: no configuration of whole nodes (--gpus-per-node 2)",
     ["--memory", "2GiB", "--gpus", "3", "--gpus-per-node", "2"]),
]:
    rc, out, err = run(["plan", MLP] + BASE + args)
    check(rc == code and needle in err and len(err.strip().splitlines()) <= 2,
          f"plan {args}: exit {rc} (want {code}), want '{needle}' in '{err.strip()}'")
rc, out, err = run(["plan", MLP, "--device", "cpu", "--memory", "2GiB", "--gpus", "2"])
check(rc == 2 and "plan: plans a training job: give --mode train" in err, f"plan without --mode train: {rc} {err}")

# a global batch of 3 on 4 GPUs of a HuggingFace config (4 layers; no TP): DP 2 and 4
# do not divide 3, and PP 4 (DP 1) would need 4 micro-batches of 3 samples: exit 7
rc, out, err = run(["plan", "tests/models/hf/tiny-llama-gqa.json", "--mode", "train", "-s", "8", "--device", "cpu",
                    "--memory", "1GiB", "--gpus", "4", "--global-batch", "3"])
check(rc == 7 and "plan: --global-batch 3: no configuration of 4 GPUs makes it" in err
      and "TP is not modelled on a HuggingFace config" in err, f"global batch 3: exit {rc}: {err.strip()}")
# with 6 it does: DP 2 (3 per rank) or PP 2 x DP 2, or DP 1 x PP 4 is still out (6 / 4)


print(f"plan: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
