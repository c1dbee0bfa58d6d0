#!/usr/bin/env python3
"""Compare results of the shared gpu/measure.py with dnnmem's estimates of the same rows.

    python3 tools/gpu/compare.py RESULTS.jsonl [RESULTS2.jsonl ...] [--dnnmem build/dnnmem]
                                 [--print-commands] [--check]

Run from the repository root after `make`. Each row whose status is "ok" is estimated with the
dnnmem flags that reproduce it (printed with --print-commands):
  the HF config tests/models/hf/ or tools/gpu/hf-config/<basename of the row's model>, with
  "architectures" set to <Family>ForMaskedLM where measure.py builds AutoModelForMaskedLM (bert,
  roberta, distilbert, albert), -b batch -s seq --mode, --optimizer, --loss, --attn as the row's,
  --precision unless fp32 (measure.py leaves the model as transformers built it then: from
  transformers 5 in the config's dtype), --transformers from versions.txt beside the results,
  --framework pytorch@<torch major.minor> --cuda <cuda> --compute-capability <capability>, and
  --cuda-context: the context measure.py measured at start plus the 132 MiB of kernels a first
  step loads (DNNMEM_LAZY_KERNELS_DEFAULT, itself measured on these rows).
Columns: measured vs estimated peak allocated (max_memory_allocated vs peak_allocated_bytes),
peak reserved (max_memory_reserved vs peak_reserved_bytes), and whole process (device_used_end
vs total_bytes). Rows with optimizer "none" are compared on their first iteration
(max_allocated_first_iter and max_reserved_first_iter against dnnmem --iterations 1): measure.py
never zeroes the grads then, so later iterations hold every parameter's grad, which dnnmem's
zero_grad(set_to_none=True) does not. Rows of more than 3 iterations are estimated with
--iterations ITERS (reserved after as many steps as were run).
--check: exit 1 when a row's allocated peak is off by more than 5% or its whole process by more
than 8%, unless EXPECTED lists the row with the reason.
"""
import argparse, json, os, subprocess, sys, tempfile

MASKED = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM",
          "distilbert": "DistilBertForMaskedLM", "albert": "AlbertForMaskedLM"}
HF = (os.path.join("tests", "models", "hf"), os.path.join("tools", "gpu", "hf-config"))
LAZY_KERNELS = 132 << 20  # DNNMEM_LAZY_KERNELS_DEFAULT in include/dnnmem.h
# Rows off by more than the bars, with what is known of why.
EXPECTED = {
    "qwen3-0.6b-train-b4-s1024-fp32-sdpa":
        "the same run as qwen3-0.6b-train-b4-s1024-bf16-sdpa (transformers 5 builds the bf16 "
        "config in bf16 either way), which measured 2378 MiB more reserved: reserved memory "
        "here depends on what ran before in the process; dnnmem is within 0.6% of the first",
}


def model_path(rec, tmp):
    base = os.path.basename(rec["model"])
    src = next((os.path.join(d, base) for d in HF if os.path.isfile(os.path.join(d, base))),
               os.path.join(HF[0], base))
    conf = json.load(open(src))
    arch = MASKED.get(conf.get("model_type"))
    if arch is None or conf.get("architectures") == [arch]:
        return src
    conf["architectures"] = [arch]
    dst = os.path.join(tmp, arch + "-" + os.path.basename(src))
    with open(dst, "w") as f:
        json.dump(conf, f)
    return dst


def transformers_release(results):
    """The transformers release versions.txt beside a results file records, or None."""
    try:
        words = open(os.path.join(os.path.dirname(results), "versions.txt")).read().split()
        return ".".join(words[words.index("transformers") + 1].split(".")[:2])
    except (OSError, ValueError, IndexError):
        return None


def flags(rec, model, transformers=None):
    torch_mm = ".".join(rec["torch"].split("+")[0].split(".")[:2])
    a = [model, "-b", str(rec["batch"]), "-s", str(rec["seq"]), "--mode", rec["mode"],
         "--attn", rec.get("attn", "sdpa"),
         "--framework", "pytorch@" + torch_mm, "--cuda", str(rec["cuda"]),
         "--compute-capability", rec["capability"],
         "--cuda-context", "%dB" % (rec["context_bytes"] + LAZY_KERNELS)]
    # measure.py casts for fp16/bf16 and autocasts for amp-*, and for fp32 leaves
    # the model as built: float32 before transformers 5, the config's dtype after
    if rec.get("precision", "fp32") != "fp32":
        a += ["--precision", rec["precision"]]
    if transformers and rec.get("source") == "hf":
        a += ["--transformers", transformers]
    if rec["mode"] == "train":
        a += ["--optimizer", rec.get("optimizer", "sgd"), "--loss", rec.get("loss", "ce")]
    return a


def estimate(dnnmem, args):
    out = subprocess.run([dnnmem, "estimate"] + args + ["--json"], capture_output=True, text=True)
    if out.returncode not in (0, 1):  # 1: does not fit the --gpu given (none is given here)
        raise RuntimeError(out.stderr.strip()[:300])
    return json.loads(out.stdout)


def pct(e, m):
    return "%+6.1f%%" % ((e - m) / m * 100) if m else "   n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--dnnmem", default="build/dnnmem")
    ap.add_argument("--print-commands", action="store_true")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    mib = 1 << 20
    print("%-60s %21s %21s %21s" % ("id (MiB: measured estimated error)", "allocated", "reserved",
                                     "whole process"))
    bad, n, errs = 0, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for fn in a.results:
            for line in open(fn):
                if not line.strip():
                    continue
                rec = json.loads(line)
                if rec.get("status") != "ok":
                    print("%-60s %s" % (rec.get("id"), rec.get("status")))
                    continue
                args = flags(rec, model_path(rec, tmp), transformers_release(fn))
                first = rec["mode"] == "train" and rec.get("optimizer") == "none"
                if first:
                    args += ["--iterations", "1"]
                elif rec.get("iters", 3) > 3:
                    args += ["--iterations", str(rec["iters"])]
                if a.print_commands:
                    print("  %s estimate %s" % (a.dnnmem, " ".join(args)))
                try:
                    e = estimate(a.dnnmem, args)
                except Exception as ex:
                    print("%-60s dnnmem failed: %s" % (rec["id"], ex))
                    bad += 1
                    continue
                m_al = rec["max_allocated_first_iter"] if first else rec["max_allocated"]
                m_re = rec["max_reserved_first_iter"] if first else rec["max_reserved"]
                m_dev = rec["device_used_end"]
                e_al, e_re, e_tot = e["peak_allocated_bytes"], e["peak_reserved_bytes"], e["total_bytes"]
                # the whole process is read after the last iteration: with stale grads
                # (optimizer none) it holds what those iterations reserved, which dnnmem
                # does not model, so there only the context is compared (its estimate
                # plus the reserved memory measured)
                e_dev = e_tot if not first else e_tot - e_re + rec["max_reserved"]
                off = abs(e_al - m_al) > 0.05 * m_al or abs(e_dev - m_dev) > 0.08 * m_dev
                why = EXPECTED.get(rec["id"])
                note = ("  expected miss: " + why) if off and why else "  MISS" if off else ""
                bad += off and not why
                n += 1
                errs.append(abs(e_al - m_al) / m_al * 100)
                print("%-60s %6.0f %6.0f %s %6.0f %6.0f %s %6.0f %6.0f %s%s" % (
                    rec["id"] + (" (1st)" if first else ""), m_al / mib, e_al / mib, pct(e_al, m_al),
                    m_re / mib, e_re / mib, pct(e_re, m_re), m_dev / mib, e_dev / mib,
                    pct(e_dev, m_dev), note))
    errs.sort()
    if n:
        print("%d GPU rows: allocated median |error| %.2f%%, worst %.1f%%; %d beyond the bars "
              "unexplained" % (n, errs[n // 2], errs[-1], bad))
    return 1 if a.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
