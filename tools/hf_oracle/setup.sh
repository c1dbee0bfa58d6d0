#!/bin/sh
# Virtual environments for tools/hf_oracle/measure.py: torch 2.13 (CPU), peft and one
# transformers release each, under DIR (default /tmp/hfreal):
#   sh tools/hf_oracle/setup.sh [DIR]   ->  DIR/venv-4.42, DIR/venv-4.46, DIR/venv-4.51,
#                                           DIR/venv-4.56, DIR/venv-5, DIR/venv-5.25
# then, per release (resumable; rows already in the file are skipped):
#   nice -n 19 DIR/venv-4.51/bin/python tools/hf_oracle/measure.py \
#       tests/validation/hf-real-cpu.jsonl --detail tests/validation/hf-real-cpu-detail.jsonl
# 5.25 (tests/validation/hf-real-5.25-cpu.jsonl, every kind of row: plain, --heads,
# --decoder-heads, --archs, --mamba, --deepseek into the one file) also installs kernels
# 0.19.1, now a dependency of transformers (from_config does not kernelize)
set -e
dir=${1:-/tmp/hfreal}
mkdir -p "$dir"
# 4.42 and 4.46: the releases of transformers' published Pythia and OPT SDPA tables, whose
# GPT-NeoX and OPT code dnnmem models (peft 0.21 does not import with them: no LoRA rows)
for spec in 4.42:transformers==4.42.4 4.46:transformers==4.46.3 4.51:transformers==4.51.3 \
    4.56:transformers==4.56.2 5:transformers==5.24.0 5.25:transformers==5.25.0; do
    v=${spec%%:*}
    [ -x "$dir/venv-$v/bin/python" ] || python3 -m venv "$dir/venv-$v"
    "$dir/venv-$v/bin/pip" install -q torch==2.13.0 "${spec#*:}" peft==0.21.2
done
