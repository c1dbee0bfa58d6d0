#!/bin/sh
# The HTML report in headless Chromium (Debian's chromium), on a CNN that does
# not fit (ResNet-50 training, batch 256, on a T4: advice) and an LLM whose
# peak is one step (Llama-3.2-1B LoRA, every layer checkpointed: the loss's
# log_softmax, its grad and the logits' grad). tests/report/check.py checks
# each page's DOM after its script ran against the timeline CSV, the JSON
# (--by-module) and the text of the same estimate: the script ran, no
# network, the legend and areas are the series used, the peak marker at the
# first step of the most allocated memory and at least a pixel wide, round
# IEC ticks, a boundary per change of phase or iteration, zoom (#view=A-B),
# the breakdown, module and advice tables, the command line and version.
# Screenshots go to $OUT (docs/report-cnn.png and docs/report-llm.png are
# copies of them).
set -u
D=${DNNMEM:-build/dnnmem}
OUT=${OUT:-build/report-test}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
if [ ! -x "$CHROMIUM" ]; then
    if [ "${CI:-}" = true ]; then echo "report: chromium missing"; exit 1; fi
    echo "report: SKIPPED (no $CHROMIUM; .ci/run installs Debian's chromium)"
    exit 0
fi
pass=0
fail=0
check() { # check DESCRIPTION COMMAND...
    d=$1
    shift
    if "$@"; then pass=$((pass + 1)); else echo "FAIL: report: $d"; fail=$((fail + 1)); fi
}
# Chromium started as the workplace's probe does: no sandbox (root), no GPU,
# no background networking, a fresh profile
PROFILE=$(mktemp -d)
trap 'rm -rf "$PROFILE"' EXIT
run_chromium() {
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$PROFILE" --enable-logging=stderr --v=0 "$@"
}
# report NAME "ARGS" EXPECTED-COMMAND-LINE: one page and its checks
report() {
    name=$1 args=$2 command=$3
    # shellcheck disable=SC2086
    eval "\"$D\" estimate $args --report \"$OUT/$name.html\" --timeline \"$OUT/$name.csv\"" \
        >"$OUT/$name.txt"
    eval "\"$D\" estimate $args --json --by-module" >"$OUT/$name.json"
    check "$name: dnnmem wrote the page" test -s "$OUT/$name.html"
    url="file://$(cd "$OUT" && pwd)/$name.html"
    run_chromium --dump-dom "$url" >"$OUT/$name.dom.html" 2>"$OUT/$name.chromium.log"
    check "$name: no script error" sh -c "! grep -q 'Uncaught' '$OUT/$name.chromium.log'"
    # a view of 101 steps around the peak, and one that leaves it out
    k=$("$PY" -c 'import csv,sys; a=[int(r["allocated"]) for r in csv.DictReader(open(sys.argv[1]))]; print(a.index(max(a)))' "$OUT/$name.csv")
    lo=$((k > 50 ? k - 50 : 0))
    run_chromium --dump-dom "$url#view=$lo-$((k + 50))" >"$OUT/$name.zoom.html" 2>/dev/null
    if [ "$k" -gt 20 ]; then away="0-10"; else away="$((k + 10))-$((k + 20))"; fi
    run_chromium --dump-dom "$url#view=$away" >"$OUT/$name.away.html" 2>/dev/null
    check "$name: the page's checks (tests/report/check.py)" "$PY" tests/report/check.py "$name" \
        "$OUT/$name.html" "$OUT/$name.dom.html" "$OUT/$name.zoom.html" "$OUT/$name.away.html" \
        "$OUT/$name.csv" "$OUT/$name.json" "$OUT/$name.txt" "$command"
    run_chromium --window-size=1100,1150 --hide-scrollbars --screenshot="$OUT/$name.png" "$url" \
        >/dev/null 2>&1
    check "$name: screenshot written" test -s "$OUT/$name.png"
}
M=tests/models
report cnn "$M/fixtures/resnet50.onnx -b 256 --mode train --optimizer adam --gpu T4" \
    "dnnmem estimate $M/fixtures/resnet50.onnx -b 256 --mode train --optimizer adam --gpu T4 --report $OUT/cnn.html --timeline $OUT/cnn.csv"
# explicit transformers, attention, torch and precision: the page, not HF's defaults, is tested
report llm "$M/hf/Llama-3.2-1B-Instruct.json --mode train --lora-r 16 -b 4 -s 2048 --precision bf16 --attn sdpa --transformers 4.51 --framework pytorch@2.6 --optimizer adamw --checkpoint '/model/layers.*' --gpu A10G" \
    "dnnmem estimate $M/hf/Llama-3.2-1B-Instruct.json --mode train --lora-r 16 -b 4 -s 2048 --precision bf16 --attn sdpa --transformers 4.51 --framework pytorch@2.6 --optimizer adamw --checkpoint '/model/layers.*' --gpu A10G --report $OUT/llm.html --timeline $OUT/llm.csv"
echo "report: $pass passed, $fail failed (screenshots: $OUT/cnn.png, $OUT/llm.png)"
[ "$fail" -eq 0 ]
