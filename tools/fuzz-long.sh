#!/bin/sh
# A long fuzzing run of every libFuzzer target (issue 17): each target for
# SECONDS (default 3600) in turn, from its seed corpus, with the limits of
# `make fuzz-run`; prints one row per target (executions, seconds, what was
# found) and the total. Needs `make fuzz` first. Artifacts (crashes, leaks,
# timeouts) go to build-fuzz/long-TARGET-*; each one found becomes a
# regression test.
#   nice sh tools/fuzz-long.sh [SECONDS] [TARGET ...]
set -u
secs=${1:-3600}
[ $# -gt 0 ] && shift
targets=${*:-$(sed -n 's/^FUZZ_TARGETS := //p' Makefile)}
total=0
printf '| target | executions | seconds | crashes, leaks, timeouts |\n|---|---:|---:|---|\n'
for t in $targets; do
    [ -x "build-fuzz/fuzz-$t" ] || { echo "fuzz-long: build-fuzz/fuzz-$t: not built (make fuzz)" >&2; exit 2; }
    rm -rf "build-fuzz/long-$t" && mkdir -p "build-fuzz/long-$t"
    "build-fuzz/fuzz-$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="build-fuzz/long-$t-" "build-fuzz/long-$t" "fuzz/corpus/$t" \
        >"build-fuzz/long-$t.log" 2>&1
    runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "build-fuzz/long-$t.log")
    took=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "build-fuzz/long-$t.log")
    found=$(ls build-fuzz/long-"$t"-* 2>/dev/null | wc -l)
    printf '| %s | %s | %s | %s |\n' "$t" "${runs:-?}" "${took:-?}" "$found"
    total=$((total + ${runs:-0}))
done
echo "total: $total executions"
