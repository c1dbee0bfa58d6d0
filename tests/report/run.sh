#!/bin/sh
# The HTML timeline report in headless Chromium (Debian's chromium): the page
# loads without script errors, its chart has every series, the capacity and
# the peak, and a screenshot is written to $OUT (build/report-test).
set -u
D=${DNNMEM:-build/dnnmem}
OUT=${OUT:-build/report-test}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
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
"$D" estimate tests/models/fixtures/resnet50.onnx -b 64 --mode train --optimizer adam --gpu T4 \
    --report "$OUT/report.html" --timeline "$OUT/timeline.csv" >/dev/null
check "dnnmem wrote the page" test -s "$OUT/report.html"
check "timeline CSV has a header and one row per step" \
    sh -c "head -1 '$OUT/timeline.csv' | grep -q '^step,iteration,phase' && [ \$(wc -l <'$OUT/timeline.csv') -gt 100 ]"
# Chromium started as the workplace's probe does: no sandbox (root), no GPU,
# no background networking, a fresh profile
PROFILE=$(mktemp -d)
trap 'rm -rf "$PROFILE"' EXIT
run_chromium() {
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$PROFILE" --enable-logging=stderr --v=0 "$@"
}
URL="file://$(cd "$OUT" && pwd)/report.html"
run_chromium --dump-dom "$URL" >"$OUT/dom.html" 2>"$OUT/chromium.log"
check "the page's script ran to the end" grep -q 'data-ready="1"' "$OUT/dom.html"
check "no script error" sh -c "! grep -q 'Uncaught' '$OUT/chromium.log'"
check "the chart has its 12 series" grep -q 'data-series="12"' "$OUT/dom.html"
for s in weights workspaces inputs activations "saved for backward" gradients "optimizer state" \
    temporaries "kv cache" "cuda context" "reserved, free"; do
    check "series '$s' drawn" grep -q "path class=\"series\" data-series=\"$s\"" "$OUT/dom.html"
done
check "capacity line" grep -q 'id="capacity"' "$OUT/dom.html"
check "peak marker" grep -q 'id="peak"' "$OUT/dom.html"
check "live tensors listed" grep -q '/conv1/Conv_output_0' "$OUT/dom.html"
run_chromium --window-size=1200,1300 --screenshot="$OUT/report.png" "$URL" >/dev/null 2>&1
check "screenshot written" test -s "$OUT/report.png"
echo "report: $pass passed, $fail failed (screenshot: $OUT/report.png)"
[ "$fail" -eq 0 ]
