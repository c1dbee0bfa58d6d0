#!/bin/sh
# cli.sh: the speed targets of issue 12, as whole-process wall times of the CLI
# (what a user waits for: start, load, estimate, report, exit).
#
#   sh bench/cli.sh NEW_DNNMEM                 one binary
#   sh bench/cli.sh BASE_DNNMEM NEW_DNNMEM     two, in the same run: before and after
#   make bench                                 this (with build/dnnmem), after bench/bench
#   make bench BENCH_BASE=/path/to/dnnmem      the same against a baseline binary
#   CAPTURE=FILE sh bench/cli.sh ...           with case (d), a capture's estimate (below)
#
# Each case runs RUNS times per binary (default 5; the two binaries take turns,
# so a busy machine slows both alike) and prints the median, the fastest run,
# the target, and with two binaries new/base (below 1: faster) and whether
# their outputs are byte-identical. ONLY=bc runs some cases (by letter). It prints and never fails: timings depend
# on the machine and its load.
#
# The time is the process's alone: perf stat's "seconds time elapsed" (from
# its fork of the binary to the binary's exit; nothing of this script, which
# with date(1) around the call added about 1.5 ms) and, as "cpu", its
# task-clock (user + system time, which a loaded machine inflates less).
# Without a usable perf (not installed, or perf_event_paranoid above 2) the
# wall time falls back to date(1) around the call, and cpu is not shown.
set -u
RUNS=${RUNS:-5}
case $# in
1) BASE= NEW=$1 ;;
2) BASE=$1 NEW=$2 ;;
*) echo "usage: sh bench/cli.sh [BASE_DNNMEM] NEW_DNNMEM" >&2; exit 2 ;;
esac
abs() { case $1 in /*) echo "$1" ;; *) echo "$(pwd)/$1" ;; esac; }
NEW=$(abs "$NEW")
[ -n "$BASE" ] && BASE=$(abs "$BASE")
cd "$(dirname "$0")/.." || exit 2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# The cases: name, target (ms), arguments.
CASES='a|DeepSeek-V3 bf16 train estimate, s 64|1000|estimate tests/models/hf/DeepSeek-V3-bf16.json --mode train --precision bf16 -s 64
b|Llama-3.1-70B train estimate, s 512|25|estimate tests/models/hf/Llama-3.1-70B-Instruct.json --mode train -s 512
c|Llama-3.1-70B max-batch, LoRA r16 + nf4, H100-80GB|200|max-batch tests/models/hf/Llama-3.1-70B-Instruct.json --mode train -s 512 --lora-r 16 --quant nf4 --gpu H100-80GB
e|Llama-3.1-70B train estimate, bf16 AdamW eager, 1 x 4096, H100-80GB (the job of d)|330|estimate tests/models/hf/Llama-3.1-70B-Instruct.json --mode train -s 4096 -b 1 --precision bf16 --optimizer adamw --attn eager --gpu H100-80GB
f|plan tfm4, 8 GPUs, global batch 64 (164 configurations; issue 19: 500 in 2 s)|2000|plan tests/models/dist/tfm4.onnx --mode train --device cpu --memory 1GiB --gpus 8 --global-batch 64
g|plan tfm4, 8 GPUs, global batch 256 (236 configurations)|2000|plan tests/models/dist/tfm4.onnx --mode train --device cpu --memory 1GiB --gpus 8 --global-batch 256
h|plan Llama-3.1-8B bf16, s 4096, 64 H100-80GB, global batch 64 (30 configurations)|2000|plan tests/models/hf/Llama-3.1-8B-Instruct.json --mode train -s 4096 --precision bf16 --optimizer adamw --gpu H100-80GB --gpus 64 --global-batch 64
i|plan Llama-3.1-8B bf16, s 4096, 8 H100-80GB, global batch 256 (156 configurations, 1 to 256 micro-steps)|2000|plan tests/models/hf/Llama-3.1-8B-Instruct.json --mode train -s 4096 --precision bf16 --optimizer adamw --gpu H100-80GB --gpus 8 --global-batch 256
j|the same as (i), --every-micro-step (every micro-step replayed, as before 2026-12-03)|2000|plan tests/models/hf/Llama-3.1-8B-Instruct.json --mode train -s 4096 --precision bf16 --optimizer adamw --gpu H100-80GB --gpus 8 --global-batch 256 --every-micro-step'
# (j) needs a build that has --every-micro-step (docs/speed.md "plan"): (i) against (j)
# in one binary is the repeated micro-steps' share; (i)'s output and (j)'s are the same.
# (d), issue 15's "a captured graph estimates as fast as the graph path": a
# capture (6.3 MB, not in the repository) named by CAPTURE=FILE, made by
#   python -m dnnmem capture hf tests/models/hf/Llama-3.1-70B-Instruct.json --task causal-lm \
#       --dtype bfloat16 --optimizer adamw -b 1 --seq-len 4096 --mode train --steps 1 -o FILE
# Its target is (e)'s CPU time as measured on 2026-12-03 (docs/speed.md).
[ -n "${CAPTURE:-}" ] && CASES="d|Llama-3.1-70B train capture estimate, bf16 AdamW, 1 x 4096, H100-80GB|330|estimate $(abs "$CAPTURE") --gpu H100-80GB
$CASES"

PERF=
LC_ALL=C perf stat -e task-clock -o "$T/probe" true >/dev/null 2>&1 && PERF=1
# One run: wall microseconds appended to $T/$1.us (and CPU microseconds to
# $T/$1.cpu with perf), output kept in $T/$1.out.
run() {
    tag=$1 bin=$2
    shift 2
    if [ -n "$PERF" ]; then
        LC_ALL=C perf stat -e task-clock -o "$T/perf" "$bin" "$@" >"$T/$tag.out" 2>&1
        awk '/ task-clock/ {gsub(",", "", $1); cpu = $1 * 1000}
             /seconds time elapsed/ {wall = $1 * 1000000}
             END {printf "%d\n", wall >> "'"$T/$tag.us"'"; printf "%d\n", cpu >> "'"$T/$tag.cpu"'"}' \
            "$T/perf"
        return
    fi
    t0=$(date +%s%N)
    "$bin" "$@" >"$T/$tag.out" 2>&1
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000)) >>"$T/$tag.us"
}
# median and fastest of a file of microseconds, in ms
stats() { sort -n "$1" | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                                               printf "%.1f %.1f", m / 1000, v[1] / 1000}'; }

echo "dnnmem CLI wall time, median of $RUNS runs (ms; fastest in brackets)$([ -n "$PERF" ] &&
    echo ", the process alone (perf stat); cpu: its task-clock" ||
    echo ", with date(1) around each call (no perf)")"
[ -n "$BASE" ] && echo "  base: $BASE" && echo "  new:  $NEW"
[ -r /proc/loadavg ] && echo "  load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc 2>/dev/null || echo ?) CPUs)"
echo "$CASES" | while IFS='|' read -r id name target args; do
    case ${ONLY:-abcdefghij} in *"$id"*) ;; *) continue ;; esac
    : >"$T/new.us"
    : >"$T/base.us"
    : >"$T/new.cpu"
    : >"$T/base.cpu"
    i=0
    while [ $i -lt "$RUNS" ]; do
        # shellcheck disable=SC2086 # args are words
        [ -n "$BASE" ] && run base "$BASE" $args
        # shellcheck disable=SC2086
        run new "$NEW" $args
        i=$((i + 1))
    done
    set -- $(stats "$T/new.us")
    nm=$1 nf=$2
    if [ -n "$BASE" ]; then
        set -- $(stats "$T/base.us")
        bm=$1 bf=$2
        same=$(cmp -s "$T/base.out" "$T/new.out" && echo identical || echo DIFFERENT)
        ratio=$(awk -v n="$nm" -v b="$bm" 'BEGIN {printf "%.3f", (b > 0 ? n / b : 0)}')
        printf '(%s) %s\n    base %s [%s]  new %s [%s]  new/base %s  target %s: %s  output %s\n' \
            "$id" "$name" "$bm" "$bf" "$nm" "$nf" "$ratio" "$target" \
            "$(awk -v n="$nm" -v t="$target" 'BEGIN {print n <= t ? "met" : "not met"}')" "$same"
        if [ -n "$PERF" ]; then
            set -- $(stats "$T/base.cpu") $(stats "$T/new.cpu")
            printf '    cpu: base %s [%s]  new %s [%s]  new/base %s\n' "$1" "$2" "$3" "$4" \
                "$(awk -v n="$3" -v b="$1" 'BEGIN {printf "%.3f", (b > 0 ? n / b : 0)}')"
        fi
    else
        printf '(%s) %s\n    %s [%s]  target %s: %s\n' "$id" "$name" "$nm" "$nf" "$target" \
            "$(awk -v n="$nm" -v t="$target" 'BEGIN {print n <= t ? "met" : "not met"}')"
        [ -n "$PERF" ] && printf '    cpu: %s [%s]\n' $(stats "$T/new.cpu")
    fi
done
