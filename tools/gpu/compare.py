#!/usr/bin/env python3
"""Compare results of the shared gpu/measure.py with dnnmem's estimates of the same rows.

    python3 tools/gpu/compare.py RESULTS.jsonl [RESULTS2.jsonl ...] [--dnnmem build/dnnmem] [--print-commands]

Run from the repository root after `make`. Each row whose status is "ok" is estimated with the
dnnmem flags that reproduce it (printed with --print-commands):
  the HF config tests/models/hf/ or tools/gpu/hf-config/<basename of the row's model>, with "architectures" set to
  <Family>ForMaskedLM where measure.py builds AutoModelForMaskedLM (bert, roberta, distilbert,
  albert), -b batch -s seq --mode, --optimizer, --loss, --precision, --attn as the row's;
  --framework pytorch@<torch major.minor> --cuda <cuda> --compute-capability <capability>
  --cuda-context <context_bytes>B from the versions measure.py recorded.
Columns: measured vs estimated peak allocated (max_memory_allocated vs peak_allocated_bytes),
peak reserved (max_memory_reserved vs peak_reserved_bytes), and whole process (device_used_end
vs total_bytes). Rows of more than 3 iterations are also estimated with --iterations ITERS
(reserved after as many steps as were run). Rows with optimizer "none": measure.py never zeroes
the grads, so iterations after the first hold every parameter's grad; the first iteration alone
(max_allocated_first_iter) is printed beside it.
"""
import argparse, json, os, subprocess, sys, tempfile

MASKED = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM",
          "distilbert": "DistilBertForMaskedLM", "albert": "AlbertForMaskedLM"}
HF = (os.path.join("tests", "models", "hf"), os.path.join("tools", "gpu", "hf-config"))


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
         "--compute-capability", rec["capability"], "--cuda-context", "%dB" % rec["context_bytes"]]
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
    a = ap.parse_args()
    mib = 1 << 20
    print("%-58s %21s %21s %21s" % ("id (MiB: measured estimated error)", "allocated", "reserved",
                                     "whole process"))
    with tempfile.TemporaryDirectory() as tmp:
        for fn in a.results:
            for line in open(fn):
                if not line.strip():
                    continue
                rec = json.loads(line)
                if rec.get("status") != "ok":
                    print("%-58s %s" % (rec.get("id"), rec.get("status")))
                    continue
                args = flags(rec, model_path(rec, tmp), transformers_release(fn))
                if a.print_commands:
                    print("  %s estimate %s" % (a.dnnmem, " ".join(args)))
                try:
                    e = estimate(a.dnnmem, args)
                except Exception as ex:
                    print("%-58s dnnmem failed: %s" % (rec["id"], ex))
                    continue
                m_al, m_re, m_dev = rec["max_allocated"], rec["max_reserved"], rec["device_used_end"]
                e_al, e_re, e_tot = e["peak_allocated_bytes"], e["peak_reserved_bytes"], e["total_bytes"]
                print("%-58s %6.0f %6.0f %s %6.0f %6.0f %s %6.0f %6.0f %s" % (
                    rec["id"], m_al / mib, e_al / mib, pct(e_al, m_al), m_re / mib, e_re / mib,
                    pct(e_re, m_re), m_dev / mib, e_tot / mib, pct(e_tot, m_dev)))
                if rec.get("optimizer") == "none" and rec["mode"] == "train":
                    f = rec["max_allocated_first_iter"]
                    print("%-58s %6.0f %6.0f %s" % ("  first iteration alone (no stale grads)",
                                                    f / mib, e_al / mib, pct(e_al, f)))
                if rec.get("iters", 3) > 3:
                    e2 = estimate(a.dnnmem, args + ["--iterations", str(rec["iters"])])
                    print("%-58s %6.0f %6.0f %s %6.0f %6.0f %s   (first step: allocated %.0f, reserved %.0f)" % (
                        "  dnnmem --iterations %d" % rec["iters"], m_al / mib,
                        e2["peak_allocated_bytes"] / mib, pct(e2["peak_allocated_bytes"], m_al),
                        m_re / mib, e2["peak_reserved_bytes"] / mib, pct(e2["peak_reserved_bytes"], m_re),
                        rec["max_allocated_first_iter"] / mib, rec["max_reserved_first_iter"] / mib))


if __name__ == "__main__":
    sys.exit(main())
