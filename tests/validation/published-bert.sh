#!/bin/sh
# Published GPU measurements of BERT-base with eager and SDPA attention
# (tests/validation/published-bert.csv) against dnnmem's estimates. The
# source does not say which head the model had, so the absolute peaks are
# printed for BertForMaskedLM, not asserted; the gap eager - sdpa does not
# depend on the head and is asserted within 5%, except where the CSV's last
# column gives the reason it is not yet met (printed, not failed).
# Usage: DNNMEM=build/dnnmem sh tests/validation/published-bert.sh
set -u
D=${DNNMEM:-build/dnnmem}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
sed 's/"BertModel"/"BertForMaskedLM"/' tests/models/hf/bert-base-uncased.json >"$T/bert-mlm.json"
peak() { # ATTN BATCH SEQ -> peak allocated MiB
    "$D" estimate "$T/bert-mlm.json" -b "$2" -s "$3" --mode train --optimizer none --loss sum \
        --precision fp16 --framework pytorch@2.2 --attn "$1" --json |
        sed -n 's/.*"peak_allocated_bytes": *\([0-9]*\).*/\1/p'
}
fail=0 n=0
printf '%-10s %27s %27s %25s\n' "" "eager: measured estimated" "sdpa: measured estimated" "gap: measured estimated"
grep -v '^#' tests/validation/published-bert.csv | while IFS=, read -r b s me ms why; do
    e=$(peak eager "$b" "$s") q=$(peak sdpa "$b" "$s")
    awk -v b="$b" -v s="$s" -v me="$me" -v ms="$ms" -v e="$e" -v q="$q" -v why="$why" 'BEGIN {
        e /= 1048576; q /= 1048576; gm = me - ms; ge = e - q; err = (ge - gm) / gm * 100
        off = err > 5 || err < -5
        printf "b%-3s s%-4s %9.1f %9.1f (%+5.1f%%) %9.1f %9.1f (%+5.1f%%) %8.1f %8.1f (%+4.1f%%)%s\n",
            b, s, me, e, (e - me) / me * 100, ms, q, (q - ms) / ms * 100, gm, ge, err,
            off ? (why != "" ? "  expected miss: " why : "  FAIL") : ""
        exit off && why == "" }' || echo FAIL >>"$T/fail"
done
if [ -s "$T/fail" ]; then
    echo "published BERT: eager - sdpa gap off by more than 5%"
    exit 1
fi
echo "published BERT (A100, torch 2.2, fp16): eager - sdpa gap within 5% or an expected miss on all 6 pairs"
