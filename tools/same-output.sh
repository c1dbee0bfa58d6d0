#!/bin/sh
# Checks that a change leaves what dnnmem computes untouched: every CLI call
# of the CLI tests, the validation scripts and the GPU/JAX comparisons, plus a
# sweep of every bundled and shared model file, is run with a baseline binary
# and with the new one, and stdout, stderr and exit code must be byte-identical.
# The validation program (library level) is diffed the same way.
#
# Usage: sh tools/same-output.sh BASE_BUILD [NEW_BUILD]
#   BASE_BUILD: a build directory of the baseline (dnnmem, tests/validate),
#               e.g. made by: git worktree add /tmp/base main && make -C /tmp/base
#   NEW_BUILD:  default build
# Exit 0 when identical; otherwise prints each differing call and exits 1.
set -u
BASE=$1
NEW=${2:-build}
for b in "$BASE" "$NEW"; do
    [ -x "$b/dnnmem" ] || { echo "same-output: $b/dnnmem: not built" >&2; exit 2; }
done
BASE=$(cd "$BASE" && pwd) NEW=$(cd "$NEW" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
: >"$T/diffs"

# A dnnmem stand-in that runs both binaries with the same arguments and
# standard input, records any difference, and answers as the new one (so the
# test scripts still check the new binary; files it writes are the new ones).
cat >"$T/dnnmem" <<EOF
#!/bin/sh
w=\$(mktemp -d "$T/call.XXXXXX")
cat >"\$w/in" 2>/dev/null || : >"\$w/in"
"$BASE/dnnmem" "\$@" <"\$w/in" >"\$w/o1" 2>"\$w/e1"; r1=\$?
"$NEW/dnnmem" "\$@" <"\$w/in" >"\$w/o2" 2>"\$w/e2"; r2=\$?
if [ \$r1 -ne \$r2 ] || ! cmp -s "\$w/o1" "\$w/o2" || ! cmp -s "\$w/e1" "\$w/e2"; then
    { echo "== dnnmem \$* (exit \$r1 -> \$r2)"
      diff "\$w/o1" "\$w/o2" | head -20; diff "\$w/e1" "\$w/e2" | head -10; } >>"$T/diffs"
fi
echo x >>"$T/count"
cat "\$w/o2"; cat "\$w/e2" >&2
rm -rf "\$w"
exit \$r2
EOF
chmod +x "$T/dnnmem"
W=$T/dnnmem

run() { "$@" >/dev/null 2>&1 </dev/null || :; }
run env DNNMEM="$W" sh tests/cli/run.sh
run env DNNMEM="$W" sh tests/validation/published-gpu.sh
run env DNNMEM="$W" sh tests/validation/published-trainer.sh
run env DNNMEM="$W" sh tests/validation/published-tf.sh
run python3 tools/gpu/compare.py --dnnmem "$W" tools/gpu/results/open-encoders.jsonl \
    tools/gpu/results/open-decoders.jsonl tools/gpu/results/hf-more.jsonl \
    tools/gpu/results/hf-causal.jsonl
run python3 tools/gpu/compare.py --dnnmem "$W" --commands-only tools/gpu/hf-more.jsonl
run python3 tools/gpu/jax_compare.py --dnnmem "$W" tools/gpu/results/jax.jsonl

# Every model file, in each mode, as text and as JSON.
for f in tests/models/*/*.onnx tests/models/*/*.json ../shared/models/*/*.json \
         ../shared/models/*/*.onnx; do
    [ -f "$f" ] || continue
    case $f in */SOURCES.md|*/fixtures/*.json) continue ;; esac
    for m in infer train generate; do
        run "$W" estimate "$f" --mode "$m" -b 2 -s 64
        run "$W" estimate "$f" --mode "$m" -b 2 -s 64 --json
    done
    run "$W" estimate "$f" --mode train -b 2 -s 64 --optimizer adam --precision amp-bf16 --gpu A100-80GB
    run "$W" max-batch "$f" --mode train -s 128 --gpu A100-80GB
done

# The library-level validation set.
if [ -x "$BASE/tests/validate" ] && [ -x "$NEW/tests/validate" ]; then
    for b in BASE NEW; do
        eval d=\$$b
        "$d/tests/validate" tests/validation/pytorch-cpu-1.13.jsonl \
            tests/validation/expected-misses.txt >"$T/validate.$b" 2>&1
    done
    if ! cmp -s "$T/validate.BASE" "$T/validate.NEW"; then
        { echo "== tests/validate"; diff "$T/validate.BASE" "$T/validate.NEW" | head -20; } >>"$T/diffs"
    fi
fi

n=$(wc -l <"$T/count" 2>/dev/null || echo 0)
if [ -s "$T/diffs" ]; then
    cat "$T/diffs"
    echo "same-output: $(grep -c '^== ' "$T/diffs") of $n calls differ"
    exit 1
fi
echo "same-output: $n calls identical"
