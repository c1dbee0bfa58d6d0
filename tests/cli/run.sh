#!/bin/sh
# CLI tests: exit codes, one-line errors naming the file/flag/node, output
# shapes. Usage: DNNMEM=build/dnnmem sh tests/cli/run.sh
set -u
D=${DNNMEM:-build/dnnmem}
PY=${PYTHON:-/usr/bin/python3}
M=tests/models
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0

# expect CODE NEEDLE -- ARGS...: exit code and a substring of stdout+stderr
expect() {
    code=$1 needle=$2
    shift 3
    "$D" "$@" >"$T/out" 2>"$T/err"
    got=$?
    if [ "$got" -ne "$code" ] || ! cat "$T/out" "$T/err" | grep -qF -- "$needle"; then
        echo "FAIL: dnnmem $* -> exit $got (want $code), want '$needle' in:"
        sed 's/^/    /' "$T/out" "$T/err" | head -20
        fail=$((fail + 1))
        return
    fi
    # errors are one line on stderr
    if [ "$code" -ne 0 ] && [ "$(wc -l <"$T/err")" -gt 2 ]; then
        echo "FAIL: dnnmem $*: error is not one line:"
        sed 's/^/    /' "$T/err"
        fail=$((fail + 1))
        return
    fi
    pass=$((pass + 1))
}

expect 0 "dnnmem 0.1.0" -- --version
expect 0 "Examples:" -- --help
expect 0 "--batch-size" -- estimate --help
expect 2 "no command given" --
expect 2 "unknown command" -- frobnicate
expect 2 "no MODEL given" -- estimate
expect 2 "--frob: unknown option" -- estimate $M/fixtures/resnet50.onnx --frob
expect 2 "--batch-size abc" -- estimate $M/fixtures/resnet50.onnx --batch-size abc
expect 2 "--batch-size 0" -- estimate $M/fixtures/resnet50.onnx --batch-size 0
expect 2 "--dim batch" -- estimate $M/fixtures/resnet50.onnx --dim batch
expect 2 "--mode fly" -- estimate $M/fixtures/resnet50.onnx --mode fly
expect 2 "--cuda-context lots" -- estimate $M/fixtures/resnet50.onnx --cuda-context lots
expect 2 "--dim nope: " -- estimate $M/fixtures/resnet50.onnx --dim nope=3
expect 2 "dim 'seq'" -- estimate $M/fixtures/bert_encoder.onnx --batch-size 2
expect 2 "--batch-size: " -- estimate $M/onnx/mnist-8_cntk.onnx --batch-size 4
expect 3 "/nonexistent.onnx: cannot open" -- estimate /nonexistent.onnx
# resource budgets (docs/untrusted-input.md): exit 6, the budget named
expect 6 "resnet50.onnx: the graph has 175 nodes, beyond the budget of 100 (--max-nodes)" -- \
    estimate $M/fixtures/resnet50.onnx -b 1 --max-nodes 100
expect 6 "the graph grows beyond the budget of 300 nodes (--max-nodes)" -- \
    estimate $M/hf/tiny-llama-gqa.json -b 1 -s 8 --max-nodes 300
expect 2 "--max-nodes 0: expected a positive integer" -- estimate $M/fixtures/resnet50.onnx --max-nodes 0
# an ONNX file exported in eval mode (BatchNorm folded into onnx::Conv_* weights, no
# Dropout) gets a warning for a training estimate, in the text and in JSON's warnings[];
# not for inference, nor for a training-mode export
expect 0 "warning      $M/onnx/tiny_cnn_eval_export.onnx looks exported in eval mode (no BatchNormalization, 4 folded" -- \
    estimate $M/onnx/tiny_cnn_eval_export.onnx --mode train -b 2
expect 0 '"tests/models/onnx/tiny_cnn_eval_export.onnx looks exported in eval mode' -- \
    estimate $M/onnx/tiny_cnn_eval_export.onnx --mode train -b 2 --json
expect 0 '"warnings": []' -- estimate $M/onnx/tiny_cnn_eval_export.onnx -b 2 --json
expect 0 '"warnings": []' -- estimate tests/models/zoo/resnet18-i224.onnx --mode train -b 2 --json
# in-place facts from the file (docs/inplace.md): b = act1(x * 2), c = act2(b), two nn.ReLU
# modules exported as functions (tools/export_inplace_fixtures.py), each call carrying its
# `inplace`; [1,4,16,16] float32 is 4 KiB.  Measured with the profiler under no_grad
# (torch 2.14.1): both in place 8 KiB (input, x * 2), act2 out of place 12 KiB (its output
# too); the file's facts win over --inplace either way
IP="estimate --device cpu --framework pytorch@2.14 --input-shape input=1,4,16,16"
expect 0 "peak         8.00 KiB" -- $IP $M/onnx/inplace-modules-yes.onnx --inplace none
expect 0 "from the model: 2 activations in place, 0 out of place" -- \
    $IP $M/onnx/inplace-modules-yes.onnx --inplace none
expect 0 "peak         12.00 KiB" -- $IP $M/onnx/inplace-modules-mixed.onnx
expect 0 "from the model: 1 activations in place, 1 out of place" -- $IP $M/onnx/inplace-modules-mixed.onnx
# the same model exported plainly says nothing: --inplace auto runs both in place (8 KiB, 4
# under the measured 12 KiB), and the warning gives the bound --inplace none makes
expect 0 "peak         8.00 KiB" -- $IP $M/onnx/inplace-plain-mixed.onnx
expect 0 "warning      2 activations the model file does not say run in place: --inplace auto ran them in place where PyTorch allows; run out of place (--inplace none) the peak is 12.00 KiB (+50.0%)" -- \
    $IP $M/onnx/inplace-plain-mixed.onnx
expect 0 '"warnings": []' -- $IP $M/onnx/inplace-modules-mixed.onnx --json
expect 4 "function-recursive.onnx: the model's local functions call each other more than 16 deep (or recursively)" -- \
    estimate $M/onnx/function-recursive.onnx
# a transformers release outside the modelled ones is refused, naming them
expect 4 "--transformers 4.40 for model_type 'gpt2' is not modelled: dnnmem builds it from transformers 4.48" -- \
    estimate $M/hf/gpt2.json --transformers 4.40
expect 4 "--transformers 4.39 is not modelled: dnnmem builds transformers 4.40 to 5.25" -- \
    estimate $M/hf/gpt2.json --transformers 4.39
expect 4 "--transformers 5.30 is not modelled" -- estimate $M/hf/gpt2.json --transformers 5.30
expect 0 "transformers   5.24" -- estimate $M/hf/gpt2.json --transformers 5.24 -s 8
expect 4 "--transformers 5.26 is not modelled: dnnmem builds transformers 4.40 to 5.25" -- \
    estimate $M/hf/gpt2.json --transformers 5.26
expect 0 "transformers   5.25" -- estimate $M/hf/gpt2.json --transformers 5.25 -s 8
# 5.25's from_pretrained kernelizes by default (use_kernels None -> True): on a GPU the
# hub kernels are said to be left out, not silently assumed away
expect 0 "hub_kernels    none: the model as from_config, or from_pretrained(use_kernels=False)" -- \
    estimate $M/hf/gpt2.json --transformers 5.25 -s 8
# and so is a PyTorch release outside the modelled ones, from the flag or a capture
expect 4 "PyTorch 2.16 is not modelled: dnnmem has PyTorch's rules for 1.10 to 2.15" -- \
    estimate $M/hf/gpt2.json -s 8 --framework pytorch@2.16
expect 4 "PyTorch 1.9 is not modelled" -- estimate $M/hf/gpt2.json -s 8 --framework pytorch@1.9
expect 0 "pytorch 2.14" -- estimate $M/hf/gpt2.json -s 8 --framework pytorch@2.14
# 2.15 is modelled (measured: tests/validation/pytorch-cpu-2.15-zoo.jsonl), from the flag or a capture
expect 0 "pytorch 2.15" -- estimate $M/hf/gpt2.json -s 8 --framework pytorch@2.15
sed 's/"torch": "2.14.1"/"torch": "2.15.0"/' $M/capture/conv-infer.dnnmem >"$T/torch215.dnnmem"
expect 0 "peak" -- estimate "$T/torch215.dnnmem" --device cpu
sed 's/"torch": "2.14.1"/"torch": "2.16.0"/' $M/capture/conv-infer.dnnmem >"$T/torch216.dnnmem"
expect 4 "PyTorch 2.16 is not modelled" -- estimate "$T/torch216.dnnmem" --device cpu
expect 0 "peak" -- estimate "$T/torch216.dnnmem" --device cpu --framework pytorch@2.15
# a config's defaults: the newest release (printed), its torch_dtype, the Trainer's AdamW
expect 0 "the newest release modelled" -- estimate $M/hf/gpt2.json -s 8
expect 0 "bf16: the config's torch_dtype bfloat16" -- estimate $M/hf/tiny-granite.json -s 8
expect 0 "adamw: the Trainer's default" -- estimate $M/hf/tiny-olmo2.json -s 8 --mode train
expect 0 "adamw-fused (torch.optim.AdamW(fused=True)): the Trainer's default" -- \
    estimate $M/hf/tiny-olmo2.json -s 8 --mode train --framework pytorch@2.8
# stated, it is no default: printed without [default]
if ! "$D" estimate $M/hf/tiny-olmo2.json -s 8 --mode train --optimizer sgd-momentum |
    grep -q '^  optimizer      sgd-momentum$'; then
    echo "FAIL: --optimizer sgd-momentum on a HuggingFace config is not printed as stated"
    fail=$((fail + 1))
fi
expect 0 "optimizer      sgd-momentum  [default]" -- estimate $M/fixtures/resnet50.onnx --mode train
# the encoder heads; multiple choice's input needs its choices
expect 0 "(start_loss + end_loss) / 2" -- \
    estimate $M/hf/bert-large-uncased-whole-word-masking-finetuned-squad.json -s 64 --mode train
expect 2 "dim 'choices' (axis 1 of input 'input_ids') is not bound" -- \
    estimate tests/validation/hf-small/small-roberta-base-MultipleChoice.json -s 16
expect 0 "dims.choices   4 (--dim)" -- \
    estimate tests/validation/hf-small/small-roberta-base-MultipleChoice.json -s 16 --dim choices=4
# a decoder's sequence classification without pad_token_id: a batch of 1, as transformers
python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
d["architectures"] = ["LlamaForSequenceClassification"]; d.pop("pad_token_id", None)
json.dump(d, open(sys.argv[2], "w"))' $M/hf/tiny-llama-gqa.json "$T/seqcls.json"
expect 4 "a ForSequenceClassification head without pad_token_id takes a batch of 1" -- \
    estimate "$T/seqcls.json" -b 2 -s 16
expect 0 "LlamaForSequenceClassification's CrossEntropyLoss" -- \
    estimate "$T/seqcls.json" -s 16 --mode train
# no PEFT default targets for the later families
expect 2 "PEFT has no default target_modules for model_type 'starcoder2'" -- \
    estimate $M/hf/tiny-starcoder2.json -s 8 --mode train --lora-r 8
expect 2 "PEFT has no default target_modules for model_type 'qwen3_moe'" -- \
    estimate $M/hf/tiny-qwen3-moe.json -s 8 --mode train --lora-r 8
# gpt_oss: no PEFT default targets, no sdpa (_supports_sdpa False), 4.56-5.24 only
expect 2 "PEFT has no default target_modules for model_type 'gpt_oss'" -- \
    estimate $M/hf/tiny-gpt-oss.json -s 8 --mode train --lora-r 8
expect 4 "gpt_oss sets _supports_sdpa False" -- estimate $M/hf/tiny-gpt-oss.json -s 8 --attn sdpa
expect 4 "--attn flash is not modelled for this model" -- \
    estimate $M/hf/tiny-gpt-oss.json -s 8 --attn flash --precision bf16
expect 4 "for model_type 'gpt_oss' is not modelled: dnnmem builds it from transformers 4.56" -- \
    estimate $M/hf/tiny-gpt-oss.json -s 8 --transformers 4.55
expect 0 "eager: scores, softmax and dropout materialised (the model has no sdpa path" -- \
    estimate $M/hf/tiny-gpt-oss.json -s 8
expect 0 "moe_routing    uniform" -- estimate $M/hf/tiny-gpt-oss.json -s 8 --transformers 4.56
expect 0 "model.layers.0.mlp.experts.gate_up_proj" -- \
    estimate $M/hf/gpt-oss-config-defaults.json -s 128 --mode train --lora-r 8 \
    --lora-targets q_proj,v_proj --transformers 4.56 --top 40
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["output_router_logits"] = True
json.dump(d, open(sys.argv[2], "w"))' $M/hf/tiny-gpt-oss.json "$T/oss-aux.json"
expect 4 "config field 'output_router_logits' is true; gpt_oss's load-balancing loss is not modelled" -- \
    estimate "$T/oss-aux.json" -s 8
# the published gpt-oss checkpoints' mxfp4 experts (quantization_config)
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]))
d["quantization_config"] = {"quant_method": "mxfp4"}; json.dump(d, open(sys.argv[2], "w"))' \
    $M/hf/tiny-gpt-oss.json "$T/oss-mxfp4.json"
expect 4 "quant_method 'mxfp4' is not modelled (modelled: gptq, awq, bitsandbytes, fp8)" -- \
    estimate "$T/oss-mxfp4.json" -s 8
# PEFT's default for phi is q_proj, v_proj, fc1, fc2 (peft/utils/constants.py)
expect 0 "targets q_proj,v_proj,fc1,fc2 (PEFT's default for the model type)" -- \
    estimate $M/hf/tiny-phi.json -s 8 --mode train --lora-r 8

# corrupt files
head -c 3000 $M/fixtures/resnet50.onnx >"$T/truncated.onnx"
expect 3 "truncated.onnx: not a valid ONNX model" -- estimate "$T/truncated.onnx"
printf 'not a model at all' >"$T/garbage.onnx"
expect 3 "garbage.onnx" -- estimate "$T/garbage.onnx"
: >"$T/empty.onnx"
expect 3 "empty.onnx: empty file" -- estimate "$T/empty.onnx"
expect 4 "unsupported op 'com.microsoft.extensions::DecodeImage'" -- \
    estimate $M/onnx/superresolution_with_pre_post_processing_op18.onnx

# estimates
expect 0 "peak" -- estimate $M/fixtures/resnet50.onnx --batch-size 8
expect 0 "dims.batch" -- estimate $M/fixtures/resnet50.onnx --batch-size 8
expect 0 "[default]" -- estimate $M/fixtures/resnet50.onnx
expect 0 "cuda_context" -- estimate $M/fixtures/bert_encoder.onnx -b 4 -s 128
expect 0 "1.00 GiB" -- estimate $M/fixtures/resnet50.onnx --cuda-context 1GiB --top 1
expect 0 "peak" -- estimate $M/onnx/light_resnet50.onnx
expect 0 "peak" -- estimate $M/onnx/mnist-8_cntk.onnx
expect 0 "peak" -- estimate $M/onnx/super_resolution_pytorch0.2.onnx
expect 0 "peak" -- estimate $M/onnx/lstm_keras2onnx_tiny.onnx --dim N=4 --dim M1=7

# training
R=$M/fixtures/resnet50.onnx
expect 0 "optimizer state" -- estimate $R -b 8 --mode train --optimizer adam
expect 0 "momentum_buffer" -- estimate $R -b 8 --mode train --top 400
expect 0 "set_to_none=False" -- estimate $R -b 8 --mode train --framework pytorch@1.13
expect 0 "host: bytes as requested" -- estimate $R -b 2 --mode train --device cpu
expect 0 "checkpoint     /layer*" -- estimate $R -b 8 --mode train --checkpoint '/layer*'
expect 0 "precision      bf16" -- estimate $R -b 8 --mode train --precision bf16
expect 0 "checkpoint     /layers.*:2" -- estimate $M/fixtures/bert_encoder.onnx -b 2 -s 64 --mode train \
    --loss sum --checkpoint '/layers.*:2' --precision amp-bf16
expect 2 "':K' must be a positive count" -- estimate $R --mode train --checkpoint '/layer*:x'
expect 0 "gradients" -- estimate $R -b 8 --mode train --freeze 'layer[123]*' --grad-accum 4
expect 0 "every output" -- estimate $M/fixtures/inception_v3.onnx -b 2 --mode train --loss ce-all
expect 2 "--checkpoint /nothing*: no node" -- estimate $R -b 8 --mode train --checkpoint '/nothing*'
expect 2 "--optimizer lion" -- estimate $R --mode train --optimizer lion
expect 2 "--framework theano: expected pytorch, tensorflow, mxnet or jax" -- estimate $R --framework theano
expect 2 "--device tpu" -- estimate $R --device tpu
expect 2 "--precision amp-fp8" -- estimate $R --mode train --precision amp-fp8
expect 0 "amp-fp16: torch.autocast" -- estimate $R -b 8 --mode train --precision amp-fp16
expect 4 "autocast on the CPU" -- estimate $R -b 8 --mode train --precision amp-bf16 --device cpu

# devices, verdicts, searches, sweeps
expect 0 "A100-80GB:3g.40gb" -- gpus
expect 0 "verdict      fits in" -- estimate $R -b 32 --mode train --gpu A100-40GB
expect 0 "verdict      tight" -- estimate $R -b 476 --mode train --optimizer adam --gpu A100-40GB
expect 1 "verdict      does not fit" -- estimate $R -b 256 --mode train --optimizer adam --gpu T4
expect 1 "what would change it" -- estimate $R -b 64 --mode train --optimizer adam --memory 4GiB
expect 1 "--precision amp-bf16" -- estimate $R -b 64 --mode train --optimizer adam --memory 4GiB
expect 2 "--gpu GTX-480: unknown GPU" -- estimate $R --gpu GTX-480
expect 2 "--memory lots" -- estimate $R --memory lots
expect 2 "--headroom 150%" -- estimate $R --memory 8GB --headroom 150%
expect 2 "--headroom 150: expected a fraction or a percentage" -- estimate $R --memory 8GB --headroom 150
expect 0 "verdict      tight" -- estimate $R -b 32 --mode train --gpu A100-40GB --headroom 95%
expect 2 "give the device" -- max-batch $R --mode train
expect 0 "largest batch size that fits A100-40GB with 5% left free: 423" -- max-batch $R --mode train --optimizer adam --gpu A100-40GB
expect 0 "at 423: 38174.0 MiB (allocated 35310.6 MiB), fits: margin 2339.8 MiB (5.8% of 40513.8 MiB)" -- \
    max-batch $R --mode train --optimizer adam --gpu A100-40GB
expect 0 "largest batch size that fits A100-40GB with 10% left free: " -- max-batch $R --mode train \
    --optimizer adam --gpu A100-40GB --headroom 10
expect 0 "largest seq that fits" -- max-seq-len $M/fixtures/bert_encoder.onnx -b 8 --mode train --gpu L4 --limit 4096
expect 1 "largest batch size that fits" -- max-batch $M/fixtures/vgg16.onnx --mode train --memory 1GiB
expect 0 "reserved MiB" -- estimate $M/fixtures/bert_encoder.onnx -b 8,16 -s 128,256 --mode train
expect 0 "batch_size,seq_len,total_bytes" -- estimate $R -b 8,16,32 --csv --gpu L4
expect 1 "does not fit" -- estimate $R -b 8,256 --mode train --gpu T4
expect 2 "--batch-size 8,x" -- estimate $R -b 8,x

expect 0 "24.00 GiB (--memory 24GiB)" -- estimate $R --memory 24GiB
expect 0 "17179869184 bytes = 16.00 GiB (--memory 16G: G read as GiB, 2^30 bytes)" -- estimate $R --memory 16G
expect 2 "--gpu A100: unknown GPU; did you mean A100-40GB, A100-40GB-PCIe, A100-80GB, A100-80GB-PCIe?" -- \
    estimate $R --gpu A100
expect 2 "did you mean RTX-4090?" -- estimate $R --gpu rtx4090
expect 0 "a .dnnmem file" -- --help
# a CNN sweep has no seq column; compare with a device prints each verdict
"$D" estimate $R -b 8,16 --gpu T4 >"$T/sweep" 2>&1
if head -1 "$T/sweep" | grep -q seq || ! grep -q "^         8 " "$T/sweep"; then
    echo "FAIL: a CNN sweep prints a seq column:"; sed 's/^/    /' "$T/sweep"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
expect 0 "8,,819986432," -- estimate $R -b 8,16 --csv
expect 0 "verdict              A: tight in 14.75 GiB: margin 437.81 MiB" -- compare $R -b 160 --mode train \
    --optimizer adam --gpu T4 --with "--precision amp-fp16"
expect 0 "                       B: fits in 14.75 GiB: margin 6.49 GiB" -- compare $R -b 160 --mode train \
    --optimizer adam --gpu T4 --with "--precision amp-fp16"

# advice (issue 16): the change that fits, ranked, printed before the tensors and in JSON
L8=$M/hf/Llama-3.1-8B-Instruct.json
L8J="--mode train -b 4 -s 4096 --lora-r 16 --precision bf16 --optimizer adamw --transformers 4.51"
expect 1 "  --checkpoint '/model/layers.*'                    51166.0 MiB  fits" -- estimate $L8 $L8J --gpu A100-80GB
expect 1 "speed: the 32 blocks' forwards run again in the backward" -- estimate $L8 $L8J --gpu A100-80GB
expect 0 "at           backward, step 2, the loss: cross_entropy backward (NllLossBackward0, LogSoftmaxBackward0)" -- \
    estimate $L8 $L8J --gpu A100-80GB --checkpoint '/model/layers.*'
"$D" estimate $L8 $L8J --gpu A100-80GB >"$T/adv" 2>&1
a=$(grep -n "^what would change it" "$T/adv" | cut -d: -f1)
l=$(grep -n "^live at the peak" "$T/adv" | cut -d: -f1)
if [ -z "$a" ] || [ -z "$l" ] || [ "$a" -gt "$l" ]; then
    echo "FAIL: the advice is not printed before the tensors"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
expect 1 "  --quant nf4                                       24460.8 MiB  fits" -- \
    estimate $M/hf/Mixtral-8x7B-v0.1.json --precision bf16 --transformers 4.51 -b 1 -s 512 --gpu H100-80GB
expect 1 "  --checkpoint '/model/layers.*' --lora-r 16 --quant nf4 --batch-size 7" -- estimate $L8 --mode train \
    -b 8 -s 2048 --precision bf16 --optimizer adamw --transformers 4.51 --gpu A100-40GB
# a T4 (sm75) is offered float16 autocast, never bfloat16
"$D" estimate $R -b 256 --mode train --optimizer adam --gpu T4 >"$T/t4" 2>&1
if grep -q "amp-bf16" "$T/t4" || ! grep -q "^  --precision amp-fp16 " "$T/t4"; then
    echo "FAIL: T4 advice:"; sed 's/^/    /' "$T/t4"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
"$D" estimate $L8 $L8J --gpu A100-80GB --json >"$T/adv.json"
if "$PY" - "$T/adv.json" <<'EOF2'
import json, sys
d = json.load(open(sys.argv[1]))
a = d["advice"]
assert a and a[0]["verdict"] == "fits", a
ck = [x for x in a if x["change"] == "--checkpoint '/model/layers.*'"]
assert ck and ck[0]["verdict"] == "fits" and ck[0]["cost_rank"] == 3, ck
assert all(x["margin_bytes"] == d["verdict"]["capacity_bytes"] - x["total_bytes"] for x in a)
assert d["peak"]["op"].startswith("cross_entropy backward"), d["peak"]
EOF2
then pass=$((pass + 1)); else echo "FAIL: advice in --json"; fail=$((fail + 1)); fi
expect 0 "22.35 GiB (--memory 24GB)" -- estimate $R --memory 24GB
expect 0 "optimizer state" -- compare $R -b 64 --mode train --with "--optimizer adam"
expect 0 "inception_v3.onnx" -- compare $R $M/fixtures/inception_v3.onnx -b 8 --mode train
expect 2 "compare: give two models" -- compare $R -b 8
"$D" estimate $R -b 2 --timeline "$T/tl.csv" >/dev/null && grep -q "^step,iteration,phase" "$T/tl.csv" && pass=$((pass + 1)) || { echo "FAIL: --timeline"; fail=$((fail + 1)); }
# --events: on the CPU (bytes as requested) the running total's maximum is the peak
ev_peak=$("$D" estimate $R -b 2 --device cpu --mode train --events "$T/ev.csv" --json |
    sed -n 's/^ *"peak_allocated_bytes": \([0-9]*\),*$/\1/p')
ev_max=$(awk -F, 'NR > 1 && $NF + 0 > m { m = $NF + 0 } END { printf "%d", m }' "$T/ev.csv")
[ -n "$ev_peak" ] && [ "$ev_peak" = "$ev_max" ] && head -1 "$T/ev.csv" | grep -q "^event,step,iteration,phase,node,op,kind,bytes" &&
    pass=$((pass + 1)) || { echo "FAIL: --events ($ev_max, peak $ev_peak)"; fail=$((fail + 1)); }
expect 2 "--with: this option needs a value" -- compare $R --with
# more arguments than compare holds: refused (they were dropped past 255, --with
# with them, and one more was written past the array; seen reading cli/main.c for fuzz/fuzz-cli.c)
expect 2 "compare: 303 arguments; at most 253" -- compare $R $(for i in $(seq 150); do printf ' -b 8'; done) --with "--mode train"
# -h within compare prints the help (it crashed on the side it left without a
# result; found by fuzz/fuzz-cli.c)
expect 0 "Examples:" -- compare $R -h --with "--mode train"
expect 0 "Examples:" -- compare $R -b 8 --with "--mode train -h"
expect 2 "--with: more than 254 options" -- compare $R -b 8 --with "$(for i in $(seq 300); do printf ' -b'; done)"

# calibration file
printf '{"cuda_context_bytes": 500000000, "compute_capability": "9.0"}' >"$T/cal.json"
expect 0 "476.84 MiB (--cuda-context)" -- estimate $R --calibration "$T/cal.json"
expect 0 "32.00 MiB per handle" -- estimate $R --calibration "$T/cal.json"
printf '{"context": 5}' >"$T/bad.json"
expect 2 "key 'context' is unknown" -- estimate $R --calibration "$T/bad.json"
printf '{"cuda_context_bytes": ' >"$T/trunc.json"
expect 2 "--calibration $T/trunc.json" -- estimate $R --calibration "$T/trunc.json"
# a JSON model file's top-level keys choose its front end (docs/untrusted-input.md, "Read
# once"): the keys of no kind or of two are an error
printf '{"hidden_size": 64, "x": {"nodes": [], "heads": []}}' >"$T/unknown.json"
expect 4 "unknown.json: a JSON file that is not a model dnnmem reads: not a HuggingFace config.json" -- \
    estimate "$T/unknown.json"
printf '{"class_name": "Sequential", "config": {}, "vocab_size": 10}' >"$T/ambiguous.json"
expect 3 "ambiguous JSON: it has the keys of a Keras model (class_name and config) and of a HuggingFace" -- \
    estimate "$T/ambiguous.json"
# what is not a regular file or is larger than a calibration file is refused before it is read
expect 2 "--calibration /dev/zero: not a regular file" -- estimate $R --calibration /dev/zero
head -c 1048577 /dev/zero | tr '\0' ' ' >"$T/big.json"
expect 6 "--calibration $T/big.json: 1048577 bytes, beyond the 1 MiB a calibration file may have" -- \
    estimate $R --calibration "$T/big.json"

# KV-cache decoders with ONNX Runtime contrib ops (Attention, GroupQueryAttention)
G=$M/onnx/tiny-random-gpt2_past_ort-fused.onnx
expect 2 "dim 'past_seq_len'" -- estimate $G --dim batch_size=1 --seq-len 1 --dim total_seq_len=9
expect 0 "present_0  <- Attention" -- \
    estimate $G --dim batch_size=2 --seq-len 1 --dim past_seq_len=127 --dim total_seq_len=128
expect 0 "[2,2,16,16]" -- estimate $M/onnx/tiny-qwen35_decoder_gqa.onnx --dim batch_size=2 \
    --seq-len 16 --dim past_seq_len=0 --dim total_seq_len=16 --top 50

# JSON: valid, integer bytes, inputs echoed
"$D" estimate $M/fixtures/vgg16.onnx --batch-size 4 --json >"$T/v.json" 2>&1
if "$PY" - "$T/v.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "dnnmem.estimate/1", d["schema"]
assert isinstance(d["total_bytes"], int) and d["total_bytes"] > d["peak_allocated_bytes"] > 0
b = d["breakdown"]
assert sum(v for k, v in b.items() if k not in ("cuda_context", "allocator_slack")) == d["peak_allocated_bytes"]
assert d["peak_allocated_bytes"] + b["allocator_slack"] == d["peak_reserved_bytes"]
assert d["peak_reserved_bytes"] + d["cuda_context_bytes"] == d["total_bytes"]
assert any(a["key"] == "dims.batch" and a["value"].startswith("4") for a in d["assumptions"])
assert d["live_at_peak"] and d["live_at_peak"][0]["allocated"] >= d["live_at_peak"][-1]["allocated"]
EOF
then pass=$((pass + 1)); else echo "FAIL: --json output"; fail=$((fail + 1)); fi

# JSON against the published schema (docs/schema/estimate.schema.json)
check_schema() {
    if "$PY" -c 'import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))' \
        "$1" docs/schema/estimate.schema.json; then
        pass=$((pass + 1))
    else
        echo "FAIL: $2 does not match the schema"
        fail=$((fail + 1))
    fi
}
check_schema "$T/v.json" "inference JSON"
"$D" estimate $M/fixtures/resnet50.onnx -b 4 --mode train --optimizer adam --memory 1GiB --json >"$T/t.json"
check_schema "$T/t.json" "training JSON with a verdict"
"$D" estimate $M/hf/Llama-3.1-8B-Instruct.json --mode train -b 4 -s 4096 --lora-r 16 --precision bf16 \
    --optimizer adamw --transformers 4.51 --gpu A100-80GB --json >"$T/adv.json"
check_schema "$T/adv.json" "JSON with advice[]"
"$D" estimate $M/hf/tiny-llama-gqa.json -b 2 --prompt-len 16 --mode generate --new-tokens 400 \
    --json >"$T/g.json"
check_schema "$T/g.json" "generation JSON (kv_cache, decode phase)"
"$D" estimate $M/capture/tiny-train.dnnmem --gpu A100-80GB --json >"$T/c.json"
check_schema "$T/c.json" "a captured step's JSON (docs/capture-format.md)"
# --by-module (src/report/modules.c): the table in the text, JSON's by_module against the
# schema, each category summed over the modules the breakdown's; a sweep's text has no room
"$D" estimate $M/hf/tiny-llama-gqa.json -b 2 --prompt-len 16 --mode generate --new-tokens 40 \
    --by-module --json >"$T/gm.json"
check_schema "$T/gm.json" "generation JSON with by_module"
"$D" estimate $M/fixtures/resnet50.onnx -b 4 --mode train --optimizer adam --by-module-depth 3 \
    --json >"$T/tm.json"
check_schema "$T/tm.json" "training JSON with by_module"
for j in gm tm; do
    if "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1])); mods = d["by_module"]["modules"]
for k in mods[0]["breakdown"]:
    assert sum(m["breakdown"][k] for m in mods) == d["breakdown"][k], k
for m in mods:
    assert sum(m["breakdown"].values()) == m["live_bytes"], m["name"]
assert sys.argv[2] != "gm" or any(m["name"] == "/model/layers.0" and m["breakdown"]["kv_cache"] > 0 for m in mods)
assert sys.argv[2] != "tm" or (d["by_module"]["depth"] == 3 and mods[3]["name"] == "/layer1/layer1.0/conv1")' \
        "$T/$j.json" "$j"; then
        pass=$((pass + 1))
    else
        echo "FAIL: $j.json: by_module does not add up to the breakdown"
        fail=$((fail + 1))
    fi
done
expect 0 "by module at the peak (depth 2; requested bytes)" -- estimate $M/fixtures/resnet50.onnx \
    -b 4 --mode train --by-module
expect 0 "  /layer1/layer1.0  " -- estimate $M/fixtures/resnet50.onnx -b 4 --mode train --by-module
# a captured step's parameters (read by no node) in the scope their names name
expect 0 "  fc              4.00 KiB    4.00 KiB" -- estimate $M/capture/tiny-train.dnnmem --by-module
# GPT-2's attn.bias and masked_bias buffers (4.x; 5.x has none), which no node reads, in
# their layer's attn
expect 0 "  /transformer/h.0/attn    1.25 MiB  192.00 KiB" -- estimate $M/hf/tiny-gpt2.json -b 2 -s 32 \
    --transformers 4.51 --by-module-depth 3
expect 2 "--by-module-depth 0: expected 1..64" -- estimate $M/fixtures/resnet50.onnx --by-module-depth 0
expect 2 "--by-module: one estimate at a time, not a sweep or --csv" -- \
    estimate $M/fixtures/resnet50.onnx -b 4,8 --by-module
# --report computes the table for its page; the text does not show it unless asked
"$D" estimate $M/fixtures/resnet50.onnx -b 4 --report "$T/r.html" >"$T/r.txt"
if ! grep -q "by module" "$T/r.txt" && grep -q 'id="modules"' "$T/r.html"; then
    pass=$((pass + 1))
else
    echo "FAIL: --report: the module table belongs in the page only"
    fail=$((fail + 1))
fi
# the capture files themselves against their schema (docs/schema/capture.schema.json)
for f in tiny-train tiny-train-dims; do
    if "$PY" -c 'import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))' \
        $M/capture/$f.dnnmem docs/schema/capture.schema.json; then
        pass=$((pass + 1))
    else
        echo "FAIL: tests/models/capture/$f.dnnmem does not match docs/schema/capture.schema.json"
        fail=$((fail + 1))
    fi
done

# LoRA, 4-bit weights, optimizers of transformers and bitsandbytes
G=$M/hf/tiny-llama-gqa.json
expect 0 "lora           rank 8, alpha 16, dropout 0.05, targets q_proj,k_proj" -- estimate $G -s 16 \
    --mode train --lora-r 8 --lora-alpha 16 --lora-dropout 0.05 --lora-targets q_proj,k_proj
expect 0 "targets q_proj,v_proj (PEFT's default for the model type)" -- estimate $G -s 16 --mode train --lora-r 4
expect 2 "--lora-r 0: expected a rank in 1..1048576" -- estimate $G -s 16 --mode train --lora-r 0
expect 2 "--lora-dropout 1.5: expected a probability in [0, 1)" -- estimate $G -s 16 --mode train \
    --lora-r 4 --lora-dropout 1.5
expect 2 "--lora-targets qkv: no linear module of the model is named so" -- estimate $G -s 16 \
    --mode train --lora-r 4 --lora-targets q_proj,qkv
expect 2 "--lora-r applies to --mode train" -- estimate $G -s 16 --lora-r 4
expect 2 "--lora-r applies to HuggingFace config.json models" -- estimate $M/fixtures/resnet50.onnx \
    --mode train --lora-r 4
expect 0 "quant          bitsandbytes 4-bit nf4 with double quantization" -- estimate $G -s 16 --quant nf4
expect 0 "quant          bitsandbytes 4-bit fp4" -- estimate $G -s 16 --mode train --quant fp4 --lora-r 8
expect 0 "quant          bitsandbytes 8-bit LLM.int8() (Int8Params int8 [out, in], SCB float32 [out])" -- \
    estimate $G -s 16 --quant int8
expect 0 "quant_kernels  bitsandbytes 0.45+ MatMul8bitLt" -- estimate $G -s 16 --mode train \
    --quant int8 --lora-r 8
expect 0 "precision      fp16: from_pretrained of a bitsandbytes model without torch_dtype" -- \
    estimate $G -s 16 --quant nf4
expect 2 "--quant int4: expected none, nf4, nf4-single, fp4 or int8" -- estimate $G -s 16 --quant int4
expect 2 "--quant in training needs --lora-r" -- estimate $G -s 16 --mode train --quant nf4
# PEFT's prepare_model_for_kbit_training
expect 0 "kbit_prep      PEFT prepare_model_for_kbit_training: float16/bfloat16 parameters but Params4bit to float32" -- \
    estimate $G -s 16 --mode train --quant nf4 --lora-r 8 --kbit-prep
expect 0 "checkpoint     /model/layers.* (--kbit-prep: every layer)" -- estimate $G -s 16 --mode train \
    --quant nf4 --lora-r 8 --kbit-prep
expect 0 "use_gradient_checkpointing=False" -- estimate $G -s 16 --mode train --quant int8 --lora-r 8 \
    --kbit-prep-no-gc
expect 0 "--kbit-prep-no-gc      the same with use_gradient_checkpointing=False" -- estimate --help
expect 2 "--kbit-prep needs --lora-r" -- estimate $G -s 16 --mode train --quant nf4 --kbit-prep
expect 2 "--kbit-prep needs --lora-r" -- estimate $G -s 16 --quant nf4 --kbit-prep
expect 2 "--kbit-prep needs a quantized model: --quant or a config's quantization_config" -- \
    estimate $G -s 16 --mode train --lora-r 8 --kbit-prep
expect 2 "drop --checkpoint, or use --kbit-prep-no-gc with it" -- estimate $G -s 16 --mode train \
    --quant nf4 --lora-r 8 --kbit-prep --checkpoint '/model/layers.*'
expect 4 "--kbit-prep with --attn flash" -- estimate $G -s 16 --mode train --quant nf4 --lora-r 8 \
    --kbit-prep --attn flash --precision bf16
expect 4 "ALBERT does not support gradient checkpointing" -- estimate $M/hf/albert-base-v2.json -s 16 \
    --mode train --quant nf4 --lora-r 8 --lora-targets query,value --kbit-prep
expect 4 "quantized linear layers on the CPU are not modelled" -- estimate $G -s 16 --quant int8 \
    --device cpu
expect 0 "optimizer      adafactor" -- estimate $G -s 16 --mode train --optimizer adafactor
expect 0 "optimizer      adam8bit (bitsandbytes, blockwise)" -- estimate $G -s 16 --mode train \
    --optimizer adam8bit
expect 2 "--optimizer lion: expected sgd-momentum, sgd, adam, adamw, adamw-fused, rmsprop, adagrad, adamw-hf" -- \
    estimate $G -s 16 --mode train --optimizer lion

# generation (HuggingFace causal LMs)
G=$M/hf/tiny-llama-gqa.json
expect 0 "kv cache" -- estimate $G -b 2 --prompt-len 16 --mode generate --new-tokens 400
expect 0 "at           decode, step" -- estimate $G -b 2 --prompt-len 16 --mode generate --new-tokens 400
expect 0 "kv_dtype       fp8" -- estimate $G -s 16 --mode generate --new-tokens 4 --kv-dtype fp8
expect 2 "--mode generate needs --new-tokens" -- estimate $G -s 16 --mode generate
expect 2 "--new-tokens 0: expected 1..1048576" -- estimate $G -s 16 --mode generate --new-tokens 0
expect 2 "--new-tokens and --kv-dtype apply to --mode generate" -- estimate $G -s 16 --new-tokens 4
expect 2 "--kv-dtype int4: expected auto, fp32, fp16, bf16 or fp8" -- estimate $G -s 16 \
    --mode generate --new-tokens 4 --kv-dtype int4
expect 4 "--mode generate needs a HuggingFace causal LM" -- estimate $M/hf/bert-base-uncased.json \
    -s 16 --mode generate --new-tokens 4
# GPT-2: transformers 4.51's legacy tuple cache (no Cache class, so no --kv-dtype)
expect 0 "with the legacy tuple cache, no Cache class (GPT-2, BioGPT)" -- estimate \
    $M/hf/tiny-gpt2.json -s 16 --mode generate --new-tokens 4 --transformers 4.51
# BioGPT: the same in 4.51 (BART's attention on the past_key_value tuple), every position's logits
expect 0 "the legacy tuple cache, no Cache class (GPT-2, BioGPT) (transformers 4.51): a prefill of the prompt (seq) keeping every position's logits" \
    -- estimate $M/hf/biogpt.json -s 16 --mode generate --new-tokens 4 --transformers 4.51
expect 4 "--kv-dtype needs a Cache class; transformers 4.51 keeps this model's legacy tuple cache" -- \
    estimate $M/hf/tiny-gpt2.json -s 16 --mode generate --new-tokens 4 --kv-dtype fp16 \
    --transformers 4.51
# T5: the encoder once, the decoder from one token (no --dim target_seq, no --kv-dtype)
expect 0 "generate: greedy model.generate() of an encoder-decoder (transformers 4.51)" -- \
    estimate $M/hf/tiny-t5.json -b 2 -s 16 --mode generate --new-tokens 4
expect 2 "drop --dim target_seq" -- estimate $M/hf/tiny-t5.json -s 16 --mode generate \
    --new-tokens 4 --dim target_seq=4
expect 4 "--kv-dtype is not modelled for encoder-decoder generation" -- estimate \
    $M/hf/tiny-t5.json -s 16 --mode generate --new-tokens 4 --kv-dtype fp16
expect 4 "--mode generate applies to HuggingFace causal LM and T5 configs" -- estimate \
    $M/fixtures/resnet50.onnx --mode generate --new-tokens 4
# beam search (4.51.3's _beam_search) and sampling (the logits warpers): the assumptions,
# the defaults that change the estimate, one-line errors naming the flag
expect 0 "dims.batch     8 (batch 2 (--batch-size) x --num-beams 4" -- estimate $G -b 2 -s 16 \
    --mode generate --new-tokens 4 --num-beams 4
expect 0 "num_beams      4: _beam_search" -- estimate $G -b 2 -s 16 --mode generate --new-tokens 4 \
    --num-beams 4
expect 0 "eos_token      none: every beam runs all 4 forwards" -- estimate $G -s 16 \
    --mode generate --new-tokens 4 --num-beams 2
expect 0 "the legacy tuple rebuilt whole" -- estimate $M/hf/tiny-gpt2.json -s 16 --mode generate \
    --new-tokens 4 --num-beams 2 --transformers 4.51
expect 0 "generate: beam-search model.generate()" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --num-beams 2
expect 0 "top_k          50, GenerationConfig's default" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --do-sample
expect 0 "top_p          1.0: no TopPLogitsWarper  [default]" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --do-sample
expect 0 "temperature    1.0: no TemperatureLogitsWarper  [default]" -- estimate $G -s 16 \
    --mode generate --new-tokens 4 --do-sample
expect 0 "top_p          0.9 (TopPLogitsWarper" -- estimate $G -s 16 --mode generate --new-tokens 4 \
    --do-sample --top-k 50 --top-p 0.9 --temperature 0.7
expect 0 "top_k          0: no TopKLogitsWarper" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --do-sample --top-k 0
expect 0 "generate: sampling model.generate()" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --do-sample
expect 2 "--num-beams 0: expected 1..4096" -- estimate $G -s 16 --mode generate --new-tokens 4 \
    --num-beams 0
expect 2 "--num-beams x: expected 1..4096" -- estimate $G -s 16 --mode generate --new-tokens 4 \
    --num-beams x
expect 2 "--top-k -3: expected a count (0: no top-k warper)" -- estimate $G -s 16 \
    --mode generate --new-tokens 4 --do-sample --top-k -3
expect 2 "--top-p 1.5: expected a probability in (0, 1]" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --do-sample --top-p 1.5
expect 2 "--top-p 0: expected a probability in (0, 1]" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --do-sample --top-p 0
expect 2 "--temperature -1: expected a positive number" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --do-sample --temperature -1
expect 2 "--temperature hot: expected a positive number" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --do-sample --temperature hot
expect 2 "--top-k, --top-p and --temperature apply to --do-sample" -- estimate $G -s 16 \
    --mode generate --new-tokens 4 --top-p 0.9
expect 2 "--num-beams and --do-sample apply to --mode generate" -- estimate $G -s 16 --num-beams 4
expect 2 "--num-beams and --do-sample apply to --mode generate" -- estimate $G -s 16 --do-sample
expect 4 "--do-sample with --num-beams 2 (beam sampling" -- estimate $G -s 16 --mode generate \
    --new-tokens 4 --num-beams 2 --do-sample
expect 4 "--num-beams with a HybridCache (Gemma 2/3" -- estimate $M/hf/tiny-gemma2.json -s 16 \
    --mode generate --new-tokens 4 --num-beams 2
expect 4 "--num-beams with an encoder-decoder" -- estimate $M/hf/tiny-t5.json -s 16 \
    --mode generate --new-tokens 4 --num-beams 2
# mixture of experts: the routing assumption, its override, the fp8 DeepSeek-V3 config
# (4.x's per-expert loop; transformers 5's grouped_mm experts take every row)
expect 0 "moe_routing    uniform: each routed expert gets ceil(batch x seq x top_k / experts)" -- \
    estimate $M/hf/tiny-mixtral.json -b 2 -s 16 --transformers 4.56
expect 0 "dims.expert_tokens 32 (--dim)" -- estimate $M/hf/tiny-qwen3-moe.json -b 2 -s 16 \
    --dim expert_tokens=32 --transformers 4.56
expect 0 "moe_routing    none: transformers 5's grouped_mm experts compute all" -- \
    estimate $M/hf/tiny-mixtral.json -b 2 -s 16
expect 2 "--dim expert_tokens: $M/hf/tiny-qwen3-moe.json has no dim of that name (it has: batch, seq)" \
    -- estimate $M/hf/tiny-qwen3-moe.json -b 2 -s 16 --dim expert_tokens=32
expect 4 "transformers 5.0 runs MoE experts with its \"eager\" loop over the 3-D parameters' slices before PyTorch 2.9" \
    -- estimate $M/hf/tiny-mixtral.json -b 2 -s 16 --transformers 5.0 --framework pytorch@2.8
expect 0 "transformers   5.0" -- estimate $M/hf/tiny-mixtral.json -b 2 -s 16 --transformers 5.0 \
    --framework pytorch@2.9
# 64 new tokens: the prefill and 63 decode steps, the peak in the last
expect 0 "at           decode, step 63" -- estimate $M/hf/tiny-deepseek-v3.json -b 2 -s 16 \
    --mode generate --new-tokens 64 --device cpu
# on CUDA, 5.x's decode steps switch the experts to batched_mm: each of the S = 2 x 4
# rows gathers its expert's gate_up_proj [2 x 128, 256] and down_proj [256, 128]
# float32: 8 x 262144 = 2 MiB and 8 x 131072 = 1 MiB
expect 0 "2.00 MiB  float32  -                    moe.gate_up_proj[expert_ids]" -- \
    estimate $M/hf/tiny-deepseek-v3.json -b 2 -s 16 --mode generate --new-tokens 64
expect 0 "1.00 MiB  float32  -                    moe.down_proj[expert_ids]" -- \
    estimate $M/hf/tiny-deepseek-v3.json -b 2 -s 16 --mode generate --new-tokens 64
"$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
d["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
json.dump(d, open(sys.argv[2], "w"))' $M/hf/DeepSeek-V3-bf16.json "$T/v3-fp8.json"
expect 0 "quant          fp8 e4m3 weights [out, in], float32 weight_scale_inv per 128x128 block" -- \
    estimate "$T/v3-fp8.json" -s 16 --transformers 4.56
expect 0 "compute capability 8.9 (the least fp8 kernels run on)" -- estimate "$T/v3-fp8.json" -s 16 \
    --transformers 4.56
# transformers 5's experts are 3-D parameters, not the linears the quantizers replace
expect 4 "transformers 5.25's MoE experts (3-D parameters) under quantization are not modelled" -- \
    estimate "$T/v3-fp8.json" -s 16
expect 4 "fp8 checkpoints need compute capability 8.9 or later" -- estimate "$T/v3-fp8.json" -s 16 \
    --gpu A100-80GB
expect 4 "transformers' fp8 quantizer is not trainable" -- estimate "$T/v3-fp8.json" -s 16 \
    --mode train --lora-r 8 --gpu H100-80GB
# quantization_config: gptq (tests/unit/test-hf.c pins its bytes), the rest an error naming it
Q=$M/hf/gpt2-gptq-4bit.json
expect 0 "quant          gptq 4-bit, group 128 (auto-gptq QuantLinear" -- estimate $Q -s 16
expect 0 "quant_kernels  auto-gptq exllama" -- estimate $Q -s 16 --mode generate --new-tokens 4
expect 2 "a gptq checkpoint in training needs --lora-r" -- estimate $Q -s 16 --mode train
expect 2 "no grad passes through the quantized layers' kernels" -- estimate $Q -s 16 --mode train \
    --lora-r 8
expect 0 "lora           rank 8" -- estimate $Q -s 16 --mode train --lora-r 8 --lora-targets all-linear
expect 0 "gptq: no parameter cast; gradient_checkpointing_enable (reentrant) of /transformer/h.*" -- \
    estimate $Q -s 16 --mode train --lora-r 8 --kbit-prep
"$D" estimate $Q -s 16 --json >"$T/gptq.json"
check_schema "$T/gptq.json" "GPTQ checkpoint JSON"
expect 2 "--quant: the config is quantized already (quant_method 'gptq')" -- estimate $Q -s 16 \
    --quant nf4
for m in mxfp4 hqq eetq compressed-tensors; do
    "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
d["quantization_config"] = {"quant_method": sys.argv[3]}
json.dump(d, open(sys.argv[2], "w"))' $M/hf/tiny-llama-gqa.json "$T/q-$m.json" $m
    expect 4 "quant_method '$m' is not modelled (modelled: gptq, awq, bitsandbytes, fp8)" -- \
        estimate "$T/q-$m.json" -s 16
done
if "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
v = d["verdict"]
assert v["verdict"] == "does not fit" and v["margin_bytes"] == v["capacity_bytes"] - d["total_bytes"], v' \
    "$T/t.json"; then pass=$((pass + 1)); else echo "FAIL: verdict fields"; fail=$((fail + 1)); fi

# HuggingFace config.json: the graph is built from the config; weights are the
# parameter count (1,100,048,384 for TinyLlama, tests/unit/test-hf.c) times 4
# bytes plus the rotary inv_freq buffer (head_dim 64 / 2 floats = 128 bytes).
H=$M/hf
"$D" estimate $H/TinyLlama-1.1B-Chat-v1.0.json -b 1 -s 128 --json >"$T/hf.json"
if "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["breakdown"]["weights"] == 1100048384 * 4 + 128, d["breakdown"]' "$T/hf.json"; then
    pass=$((pass + 1)); else echo "FAIL: TinyLlama weights"; fail=$((fail + 1)); fi
mkdir "$T/gpt2" && cp $H/gpt2.json "$T/gpt2/config.json"
expect 0 "huggingface" -- estimate "$T/gpt2" -s 64
expect 2 "dim 'seq'" -- estimate $H/gpt2.json -b 1
# a model directory's safetensors headers are checked against config.json
mkdir "$T/g2st" && cp $H/gpt2.json "$T/g2st/config.json"
"$PY" tests/cli/gpt2_safetensors.py "$T/g2st"
expect 0 "model.safetensors: 160 tensors, 522.70 MiB float32; names and shapes match" -- \
    estimate "$T/g2st" -s 64
"$D" estimate "$T/g2st" -s 64 --json >"$T/g2st.json"
check_schema "$T/g2st.json" "HuggingFace directory JSON with a checkpoint"
"$PY" tests/cli/gpt2_safetensors.py "$T/g2st" 1
expect 3 "tensor 'wpe.weight' is [1025,768] in the checkpoint, [1024,768] from config.json" -- \
    estimate "$T/g2st" -s 64
# a GPTQ checkpoint's headers: qweight, qzeros, scales, g_idx as auto-gptq stores them
mkdir "$T/gq" && cp $H/gpt2-gptq-4bit.json "$T/gq/config.json"
"$PY" tests/cli/gpt2_gptq_safetensors.py "$T/gq"
expect 0 "model.safetensors: 292 tensors, 117.68 MiB float16; names and shapes match" -- \
    estimate "$T/gq" -s 64
"$PY" tests/cli/gpt2_gptq_safetensors.py "$T/gq" 1
expect 3 "tensor 'transformer.h.0.attn.c_attn.qzeros' is [12,288] in the checkpoint, [6,288] from" -- \
    estimate "$T/gq" -s 64
"$PY" tests/cli/gpt2_gptq_safetensors.py "$T/gq" 2
expect 3 "tensor 'transformer.h.0.attn.c_attn.qweight' is F16 in the checkpoint, int32 from" -- \
    estimate "$T/gq" -s 64
printf '\377\377\377\000\000\000\000\000{}' >"$T/g2st/model.safetensors"
expect 3 "model.safetensors: header length 16777215 does not fit the file" -- estimate "$T/g2st" -s 64
# a bf16 checkpoint loads as bf16 by default (its torch_dtype), and the line names 4.x's float32
expect 0 "bf16: the config's torch_dtype bfloat16, as from_pretrained(torch_dtype=\"auto\") and transformers 5 load it (transformers 4.x without torch_dtype loads float32: --precision fp32)" -- \
    estimate $H/Llama-3.2-1B-Instruct.json -s 8
# attention implementation: transformers' choice by PyTorch version, or --attn
expect 0 "attention      sdpa: F.scaled_dot_product_attention" -- estimate $H/gpt2.json -s 8
expect 0 "attention      eager: scores" -- estimate $H/gpt2.json -s 8 --framework pytorch@2.0
expect 0 "attention      sdpa: F.scaled_dot_product_attention" -- \
    estimate $H/gpt2.json -s 8 --framework pytorch@2.1
expect 0 "attention      eager: scores" -- estimate $H/gpt2.json -s 8 --framework pytorch@2.1 --device cpu
expect 2 "--attn bogus: expected eager, sdpa, flash or auto" -- estimate $H/gpt2.json -s 8 --attn bogus
# --sdpa-backend: sdpa_kernel(SDPBackend.X) around the step
expect 2 "--sdpa-backend bogus: expected auto, flash, efficient, cudnn or math" -- \
    estimate $H/gpt2.json -s 8 --sdpa-backend bogus
expect 2 "--sdpa-backend applies to HuggingFace config.json models" -- \
    estimate $M/fixtures/resnet50.onnx -b 2 --sdpa-backend math
expect 4 "--sdpa-backend efficient: PyTorch has no such kernel" -- \
    estimate $H/tiny-llama-gqa.json -s 64 --precision bf16 --transformers 4.56 --sdpa-backend efficient
expect 0 "the math kernel, forced" -- estimate $H/gpt2.json -s 8 --sdpa-backend math
expect 0 "flash_attention_2: flash-attn's flash_attn_func" -- \
    estimate $H/tiny-llama-gqa.json -s 64 --attn flash --precision bf16 --mode train
expect 2 "--attn flash: FlashAttention-2 runs in fp16/bf16 only" -- \
    estimate $H/tiny-llama-gqa.json -s 64 --attn flash
expect 2 "--attn flash: FlashAttention-2 needs compute capability 8.0" -- \
    estimate $H/tiny-llama-gqa.json -s 64 --attn flash --precision bf16 --gpu T4
expect 4 "--attn flash: transformers 4.51's BioGPT has no flash_attention_2" -- \
    estimate $H/biogpt.json -s 8 --attn flash --precision fp16 --transformers 4.51
expect 0 "flash_attention_2: flash-attn's flash_attn_func" -- \
    estimate $H/biogpt.json -s 8 --attn flash --precision fp16 --transformers 4.52
expect 4 "flash_attention_2 for model_type 'bert' is not modelled" -- \
    estimate $H/bert-base-uncased.json -s 8 --attn flash --precision fp16
expect 0 "flash_attention_2: flash-attn's flash_attn_func" -- \
    estimate $H/opt-125m.json -s 8 --attn flash --precision fp16
expect 0 "flash_attention_2: flash-attn's flash_attn_func" -- \
    estimate $H/gpt2.json -s 8 --attn flash --precision fp16
# the transformers release: 5.25, the newest modelled, by default; a bf16 config runs
# in bf16 (its torch_dtype) in every release unless --precision says otherwise; 5.x
# passes grouped keys/values to sdpa (enable_gqa): the math kernel in float32
expect 0 "transformers   5.25 (its modelling code, as the HuggingFace front end builds it; the newest release modelled)" -- \
    estimate $H/Qwen3-0.6B.json -s 64
expect 0 "precision      bf16: the config's torch_dtype bfloat16" -- \
    estimate $H/Qwen3-0.6B.json -s 64 --transformers 4.51
expect 0 "precision      as the model: float32" -- \
    estimate $H/Qwen3-0.6B.json -s 64 --transformers 5.17 --precision fp32
expect 0 "cuDNN attention for fp16/bf16 (PyTorch 2.11+ on sm90/sm100" -- \
    estimate $H/Qwen3-0.6B.json -s 64 --transformers 5.17 --framework pytorch@2.11 --gpu H100-80GB
expect 2 "--transformers 4: expected a release such as 4.51 or 5.17" -- \
    estimate $H/Qwen3-0.6B.json --transformers 4
expect 2 "--transformers applies to HuggingFace config.json models" -- \
    estimate $R --transformers 5.17
expect 2 "--attn applies to HuggingFace config.json models" -- \
    estimate $M/fixtures/resnet50.onnx --attn sdpa
expect 0 "the CPU flash kernel" -- estimate $H/gpt2.json -s 8 --attn sdpa --device cpu
expect 4 "--sdpa-backend on the CPU is not modelled" -- \
    estimate $H/gpt2.json -s 8 --attn sdpa --device cpu --sdpa-backend math
expect 2 "--attn sdpa needs PyTorch 2.0" -- estimate $H/gpt2.json -s 8 --attn sdpa --framework pytorch@1.13
printf '{"model_type":"bloom","hidden_size":64}' >"$T/bloom.json"
expect 4 "model_type 'bloom' is not supported" -- estimate "$T/bloom.json" -s 8
printf '{"model_type":"llama","hidden_size":64}' >"$T/novocab.json"
expect 3 "'vocab_size' is missing" -- estimate "$T/novocab.json" -s 8
printf '{"model_type":"llama","hidden_size":64,"vocab_size":10,"intermediate_size":8,"num_attention_heads":4,"num_hidden_layers":-1}' >"$T/neg.json"
expect 3 "'num_hidden_layers' must be positive" -- estimate "$T/neg.json" -s 8
printf '{"model_type":"llama","hidden_size":64,' >"$T/trunc.json"
expect 3 "trunc.json" -- estimate "$T/trunc.json" -s 8

# Framework runtimes (--framework tensorflow|mxnet|jax[@VERSION]): the
# schedule stays PyTorch eager's (MXNet: its executor's plan by default); the
# allocator, limit and context change.
R=$M/fixtures/resnet50.onnx
expect 2 "--framework caffe: expected pytorch, tensorflow, mxnet or jax" -- estimate $R --framework caffe
expect 2 "--framework tensorflow@two: expected tensorflow@VERSION" -- estimate $R --framework tensorflow@two
expect 2 "--framework jax@: expected jax@VERSION" -- estimate $R --framework jax@
expect 2 "--mxnet-pool huge: expected naive or round" -- estimate $R --framework mxnet --mxnet-pool huge
expect 2 "--mxnet-round-cutoff 40: expected 20..34" -- estimate $R --framework mxnet --mxnet-round-cutoff 40
expect 2 "--jax-mem-fraction 1.5: expected a fraction in (0, 1]" -- estimate $R --framework jax --jax-mem-fraction 1.5
expect 2 "--jax-preallocate maybe: expected true or false" -- estimate $R --framework jax --jax-preallocate maybe
expect 2 "--tf-allow-growth: applies to --framework tensorflow" -- estimate $R --framework mxnet --tf-allow-growth
expect 2 "--mxnet-pool: applies to --framework mxnet" -- estimate $R --mxnet-pool round
expect 2 "--alloc-round: replaces PyTorch's caching allocator; not with --framework tensorflow" -- \
    estimate $R --framework tensorflow --alloc-round 512
expect 2 "--framework jax --jax-execution eager: on the CPU only JAX's jitted step is modelled" -- \
    estimate $R --framework jax --jax-execution eager --device cpu
expect 0 "xla_cpu        XLA's CPU backend: no cuBLAS or cuDNN workspaces" -- \
    estimate $R -b 8 --framework jax --device cpu
expect 0 "allocator      host: XLA's CPU client allocates each buffer by itself" -- \
    estimate $R -b 8 --framework jax --device cpu
# MXNet on the CPU: host storage, Module's own parameter copy, the im2col temp space
X=$M/mxnet
expect 0 "MXNet's CPU storage: NaiveStorageManager<CPUDeviceStorage>" -- \
    estimate $X/resnet-18-symbol.json --framework mxnet --device cpu --input-shape data=8,3,224,224
expect 0 "module_params  44.63 MiB: Module.bind's own zeros copy" -- \
    estimate $X/resnet-18-symbol.json --framework mxnet --device cpu --input-shape data=8,3,224,224
# conv0: 3 x 7 x 7 x 112 x 112 x 4 B = 7,375,872 B, as measured (tools/oracle/mxnet_measure.py)
expect 0 "temp_space     7.03 MiB: the executor's one kTempSpace" -- \
    estimate $X/resnet-18-symbol.json --framework mxnet --device cpu --input-shape data=8,3,224,224
# The oneDNN build's max pooling workspace output (pooling.cc, 1.9.1): LeNet's two max pools add
# a [32,5,12,12] and a [32,5,4,4] int32 entry to the plan (measured 754,720 B peak, mxnet2)
expect 0 "8 entries into 5 storages (551.25 KiB" -- estimate $X/gluon-hybridsequential-lenet-symbol.json \
    --framework mxnet --device cpu --input-shape data=32,1,28,28
# MXNet's clip (Gluon's ReLU6) runs out of place (no FInplaceOption): MobileNetV2 training
# planned 370 entries into 218 storages (126.57 MiB) with hardtanh_'s in place, -17% of the
# measured 248,950,944 B; out of place it is +0.00% (mxnet2)
expect 0 "406 entries into 253 storages (167.02 MiB" -- estimate $X/zoo-mobilenetv2_1.0-symbol.json \
    --framework mxnet --device cpu --input-shape data=2,3,224,224 --mode train
# The shared real MXNet files a new user tries (issue 18): each estimates, or says why not
expect 0 "input.l0_init_h [8,128]: [batch of 't0_l0_i2h_output', 128]" -- \
    estimate $X/lstm-ocr-ctc-symbol.json --framework mxnet --input-shape data=8,30,80 --mode train
expect 0 "input.label    [8,4]: [rows of 'fullyconnected0_output' / input_length 30" -- \
    estimate $X/lstm-ocr-ctc-symbol.json --framework mxnet --input-shape data=8,30,80 --mode train
expect 0 "needs" -- estimate $X/gluon-resnet50-3d-video-symbol.json --framework mxnet \
    --input-shape data=2,3,16,112,112 --mode train
expect 3 "X has rank 4 but W has rank 5: a 3-D convolution reads [N, C, D, H, W] data" -- \
    estimate $X/gluon-resnet50-3d-video-symbol.json --framework mxnet --input-shape data=2,3,112,112
# MobileFaceNet was saved for 112 x 112 faces: fc1_weight's __shape__ (128, 512) says so
expect 3 "the file fixes the shape of 'fc1_weight', so the data reaching it is not the size" -- \
    estimate $X/mobilefacenet-symbol.json --framework mxnet --input-shape data=8,3,224,224
expect 0 "needs" -- estimate $X/mobilefacenet-symbol.json --framework mxnet \
    --input-shape data=8,3,112,112 --mode train
for f in $X/*-symbol.json; do
    case $f in
    *3d-video*) shp=2,3,16,112,112 ;; *lstm-ocr*) shp=8,30,80 ;; *mobilefacenet*) shp=8,3,112,112 ;;
    *lenet*) shp=8,1,28,28 ;; *mlp*) shp=8,784 ;; *inceptionv3*) shp=2,3,299,299 ;; *) shp=8,3,224,224 ;;
    esac
    for mode in infer train; do
        expect 0 "needs" -- estimate "$f" --framework mxnet --input-shape data=$shp --mode $mode
        expect 0 "MXNet's CPU storage" -- estimate "$f" --framework mxnet --device cpu \
            --input-shape data=$shp --mode $mode
    done
done
expect 0 "framework      tensorflow 2.15 (runtime" -- estimate $R -b 8 --framework tensorflow@2.15
# TensorFlow: the step under tf.function (as model.fit) by default, eager on request
expect 0 "schedule       TensorFlow's graph executor over the step's dataflow" -- \
    estimate $R -b 8 --framework tensorflow@2.15
expect 0 "tf_execution   graph: the step under tf.function" -- estimate $R -b 8 --framework tensorflow
expect 0 "inplace        n/a under tf.function" -- estimate $R -b 8 --framework tensorflow
expect 0 "the layout optimizer runs the GPU graph NCHW: fused BatchNorm needs no transposes" -- \
    estimate $R -b 8 --mode train --framework tensorflow
expect 0 "the layout optimizer runs the GPU graph NHWC (fp16/bf16 convolutions)" -- \
    estimate $R -b 8 --mode train --framework tensorflow --precision amp-fp16
expect 0 "schedule       PyTorch 2.6 eager's" -- \
    estimate $R -b 8 --framework tensorflow@2.15 --tf-execution eager
expect 0 "tf_execution   eager: op by op under a GradientTape" -- \
    estimate $R -b 8 --framework tensorflow --tf-execution eager
expect 0 "tf_ops         eager GradientTape rules: each op keeps the inputs and outputs its TF gradient reads" -- \
    estimate $R -b 8 --framework tensorflow --tf-execution eager
expect 2 "--tf-execution xla: expected graph or eager" -- \
    estimate $R --framework tensorflow --tf-execution xla
expect 2 "--tf-execution: applies to --framework tensorflow" -- estimate $R --tf-execution graph
expect 2 "--tf-execution: applies to --framework tensorflow" -- \
    estimate $R --framework jax --tf-execution eager
# JAX: the jitted step by default (XLA's buffer assignment), op by op on request
expect 0 "jax_execution  jit: the whole step is one jax.jit call" -- estimate $R -b 8 --framework jax
expect 0 "schedule       XLA's buffer assignment over the step's dataflow" -- \
    estimate $R -b 8 --framework jax
expect 0 "xla_temp       " -- estimate $R -b 8 --framework jax
expect 0 "xla_outputs    1 live-out buffers (31.25 KiB) per call" -- estimate $R -b 8 --framework jax
expect 0 "jax_donation   parameters and optimizer state donated" -- \
    estimate $R -b 8 --mode train --framework jax
expect 0 "jax_donation   none (--jax-donate false): each call's new parameters" -- \
    estimate $R -b 8 --mode train --framework jax --jax-donate false
expect 0 "XLA temp buffer" -- estimate $R -b 8 --mode train --framework jax
expect 0 "jax_execution  op by op (not jitted)" -- \
    estimate $R -b 8 --framework jax --jax-execution eager
expect 0 "schedule       PyTorch 2.6 eager's" -- estimate $R -b 8 --framework jax --jax-execution eager
expect 2 "--jax-execution pjit: expected jit or eager" -- \
    estimate $R --framework jax --jax-execution pjit
expect 2 "--jax-donate maybe: expected true or false" -- estimate $R --framework jax --jax-donate maybe
expect 2 "--jax-execution: applies to --framework jax" -- estimate $R --jax-execution jit
expect 4 "--framework jax: gradient accumulation under jit" -- \
    estimate $R -b 8 --mode train --framework jax --grad-accum 2
expect 0 "grad_accum     2 micro-batches" -- \
    estimate $R -b 8 --mode train --framework jax --grad-accum 2 --jax-execution eager
expect 0 "entry_lifetimes which entries exist" -- estimate $R -b 8 --framework mxnet
expect 0 "process      the whole memory limit + CUDA context: TensorFlow reserves" -- \
    estimate $R -b 8 --framework tensorflow
expect 0 "needs        " -- estimate $R -b 8 --framework tensorflow --gpu A100-80GB
expect 0 "what nvidia-smi shows; TensorFlow reserves its whole memory limit" -- \
    estimate $R -b 8 --framework tensorflow --gpu A100-80GB
expect 0 "what nvidia-smi shows; regions grown as needed" -- \
    estimate $R -b 8 --framework tensorflow --tf-allow-growth --gpu A100-80GB
expect 0 "what nvidia-smi shows; the pool's buffers" -- estimate $R -b 8 --framework mxnet@1.9.1
expect 0 "MXNet pooled storage manager, Round" -- estimate $R -b 8 --framework mxnet --mxnet-pool round
# MXNet's executor: nnvm's static plan by default, the eager schedule with naive
expect 2 "--mxnet-executor static: expected planned or naive" -- \
    estimate $R --framework mxnet --mxnet-executor static
expect 2 "--mxnet-executor: applies to --framework mxnet" -- estimate $R --mxnet-executor naive
expect 0 "MXNet symbolic executor (Module.bind): nnvm's PlanMemory over one forward + backward" -- \
    estimate $R -b 8 --mode train --framework mxnet
expect 0 "zero_grad      none: the executor's gradients are bound once" -- \
    estimate $R -b 8 --mode train --framework mxnet
expect 0 "PlanMemory over one forward:" -- estimate $R -b 8 --framework mxnet --mxnet-executor planned
expect 0 "mxnet_executor naive: the eager schedule through MXNet's pool" -- \
    estimate $R -b 8 --mode train --framework mxnet --mxnet-executor naive
# backward mirroring (MXNET_BACKWARD_DO_MIRROR): off by default, printed
expect 0 "mx_mirror      MXNET_BACKWARD_DO_MIRROR=0 (MXNet's default)" -- \
    estimate $R -b 8 --mode train --framework mxnet
expect 0 "mx_mirror      MXNET_BACKWARD_DO_MIRROR=1: every op but Convolution" -- \
    estimate $R -b 8 --mode train --framework mxnet --mxnet-mirror --mxnet-executor naive
expect 2 "--mxnet-mirror: applies to --framework mxnet" -- estimate $R --mxnet-mirror
expect 0 "0.9 x" -- estimate $R -b 8 --framework jax@0.4.13 --gpu T4
expect 1 "does not fit" -- estimate $R -b 8 --mode train --framework tensorflow --memory 1GiB
# TensorFlow without allow_growth on an A100-80GB (compute capability 8.0):
# limit = capacity - context 426 MiB - MinSystemMemory 1536 MiB, rounded
# down to 256 B (Extend); the process takes that plus the context.
"$D" estimate $R -b 8 --framework tensorflow@2.15 --gpu A100-80GB --json >"$T/tf.json"
check_schema "$T/tf.json" "TensorFlow JSON"
if "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
f, cap, ctx = d["framework"], d["verdict"]["capacity_bytes"], d["cuda_context_bytes"]
assert f["name"] == "tensorflow" and f["version"] == "2.15" and f["allocator"] == "bfc", f
assert ctx == 426 << 20 and f["reserved_is_limit"] and not f["limit_unknown"], f
assert f["limit_bytes"] == cap - ctx - (1536 << 20), f
assert d["peak_reserved_bytes"] == f["limit_bytes"] // 256 * 256, d["peak_reserved_bytes"]
assert d["total_bytes"] == d["peak_reserved_bytes"] + ctx
assert d["needed_bytes"] == d["peak_allocated_bytes"] + ctx < d["total_bytes"]' "$T/tf.json"; then
    pass=$((pass + 1)); else echo "FAIL: TensorFlow totals"; fail=$((fail + 1)); fi
# JAX preallocates 0.75 of the device; MXNet holds what its pool grew to
"$D" estimate $R -b 8 --framework jax --gpu A100-80GB --json >"$T/jax.json"
"$D" estimate $R -b 8 --mode train --framework mxnet --mxnet-executor naive --gpu T4 --json >"$T/mx.json"
check_schema "$T/mx.json" "MXNet JSON"
# the planned executor frees nothing during the run: the pool holds exactly
# what is in use
"$D" estimate $R -b 8 --mode train --framework mxnet --gpu T4 --json >"$T/mxp.json"
check_schema "$T/mxp.json" "MXNet planned JSON"
if "$PY" -c 'import json, sys
m = json.load(open(sys.argv[1]))
assert m["peak_reserved_bytes"] == m["peak_allocated_bytes"] > 0, m
assert m["total_bytes"] == m["needed_bytes"] == m["peak_allocated_bytes"] + m["cuda_context_bytes"]' \
    "$T/mxp.json"; then
    pass=$((pass + 1)); else echo "FAIL: MXNet planned totals"; fail=$((fail + 1)); fi
if "$PY" -c 'import json, sys
j, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cap = j["verdict"]["capacity_bytes"]
assert j["framework"]["limit_bytes"] == int(cap * 0.75), j["framework"]
assert j["total_bytes"] == int(cap * 0.75) // 256 * 256 + j["cuda_context_bytes"]
f = m["framework"]
assert f["name"] == "mxnet" and f["allocator"] == "pooled-storage" and not f["reserved_is_limit"], f
assert m["cuda_context_bytes"] == 1343 << 20  # CUDA 11.2: eager loading
assert f["limit_bytes"] == m["verdict"]["capacity_bytes"] - m["cuda_context_bytes"]
assert m["total_bytes"] == m["peak_reserved_bytes"] + m["cuda_context_bytes"] > m["needed_bytes"]' \
    "$T/jax.json" "$T/mx.json"; then
    pass=$((pass + 1)); else echo "FAIL: JAX and MXNet totals"; fail=$((fail + 1)); fi
# MXNet symbol JSON: every file, every layout, with --input-shape
X=$M/mxnet
for f in resnet-18 resnet-50 resnet-50-finetuned-mxnet1.2 squeezenet_v1.2 mobilenet; do
    expect 0 "(mxnet, opset 17" -- estimate $X/$f-symbol.json --input-shape data=1,3,224,224
done
expect 0 "input.data     [1,3,112,112] (--input-shape)" -- \
    estimate $X/mobilefacenet-symbol.json --input-shape data=1,3,112,112
expect 0 "mxnet 1.4.1 (symbol JSON, 'attrs')" -- \
    estimate $X/gluon-hybridsequential-lenet-symbol.json --input-shape data=1,1,28,28 --mode train --json
expect 0 "input.data     [4,3,16,112,112] (--input-shape, first dim --batch-size)" -- \
    estimate $X/gluon-resnet50-3d-video-symbol.json --input-shape data=1,3,16,112,112 -b 4
expect 0 "mxnet symbol JSON, 'param' layout (0.8)" -- \
    estimate $X/mlp-legacy-v0.8-symbol.json --input-shape data=1,784 --mode train --optimizer adam --json
expect 0 "mxnet 0.9.1 (symbol JSON, 'attr')" -- estimate $X/lstm-ocr-ctc-symbol.json \
    --input-shape data=1,30,80 --input-shape l0_init_h=1,128 --input-shape l0_init_c=1,128 \
    --input-shape l1_init_h=1,128 --input-shape l1_init_c=1,128 --input-shape label=1,4 --mode train --json
# weights: ResNet-18 (model zoo) 11,691,950 params + 7,942 BN buffers, float32,
# + 19 num_batches_tracked: 46,799,720 B
"$D" estimate $X/resnet-18-symbol.json --input-shape data=1,3,224,224 --json >"$T/mx18.json"
if "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(r["breakdown"]["weights"] != 46799720)' "$T/mx18.json" 2>/dev/null; then
    pass=$((pass + 1)); else echo "FAIL: MXNet ResNet-18 weights"; fail=$((fail + 1)); fi
expect 0 "largest batch size that fits T4" -- \
    max-batch $X/resnet-18-symbol.json --input-shape data=1,3,224,224 --gpu T4
expect 2 "input 'data' declares no shape; give it one with --input-shape data=D1,D2,..." -- \
    estimate $X/resnet-18-symbol.json
expect 2 "input 'data' declares no shape; give it one with --input-shape data=D1,D2,... (--batch-size then" -- \
    estimate $X/resnet-18-symbol.json -b 8
expect 2 "--input-shape image: " -- estimate $X/resnet-18-symbol.json --input-shape image=1,3,224,224
expect 2 "(its inputs: data, softmax_label)" -- \
    estimate $X/resnet-18-symbol.json --input-shape image=1,3,224,224
expect 2 "--input-shape data: expected 1 to 8 positive dims" -- \
    estimate $X/resnet-18-symbol.json --input-shape data=1,3,x
expect 2 "--input-shape data3: expected NAME=D1,D2,..." -- \
    estimate $X/resnet-18-symbol.json --input-shape data3
expect 2 "--input-shape data: given twice" -- estimate $X/resnet-18-symbol.json \
    --input-shape data=1,3,224,224 --input-shape data=2,3,224,224
expect 3 "node 'pre_fc1' (Gemm)" -- estimate $X/mobilefacenet-symbol.json --input-shape data=1,3,224,224
# the fuzz corpus's symbols: Conv/BN/LeakyReLU/Pooling full/Reshape -3 -2/
# SliceChannel/FullyConnected/SoftmaxOutput; 0.8 Embedding + 2-layer
# bidirectional GRU + _mul_scalar + softmax
expect 0 "saved for backward" -- estimate fuzz/corpus/mxnet/mxnet-tiny-conv-symbol.json \
    --input-shape data=2,2,8,8 --mode train
expect 0 "rnn/MxRNN" -- estimate fuzz/corpus/mxnet/mxnet-legacy-rnn-symbol.json --input-shape data=7,2 \
    --mode train --top 20
# --input-shape on ONNX: binds the symbolic dims; rank and fixed dims must agree
expect 0 "dims.batch     4 (--input-shape input)" -- \
    estimate $M/fixtures/resnet50.onnx --input-shape input=4,3,224,224
expect 2 "--input-shape input: 3 dims given, but" -- \
    estimate $M/fixtures/resnet50.onnx --input-shape input=4,3,224
expect 2 "dim 2 is 300, but" -- estimate $M/fixtures/resnet50.onnx --input-shape input=4,3,300,224
# bad symbols: unknown op, malformed attribute (node and attribute named)
printf '{"nodes": [{"op": "null", "name": "data", "inputs": []}, {"op": "Frobnicate", "name": "fx", "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]}' >"$T/op-symbol.json"
expect 4 "node 'fx': op 'Frobnicate' is not supported" -- estimate "$T/op-symbol.json"
printf '{"nodes": [{"op": "null", "name": "data", "inputs": []}, {"op": "Pooling", "name": "pool1", "attrs": {"kernel": "(2, 2", "pool_type": "max"}, "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]}' >"$T/attr-symbol.json"
expect 3 "node 'pool1' (Pooling): attribute 'kernel' is \"(2, 2\"" -- estimate "$T/attr-symbol.json"
printf '{"nodes": [{"op": "null", "name": "data", "inputs": []}], "heads": [[0, 0' >"$T/trunc-symbol.json"
expect 3 "trunc-symbol.json: not valid JSON" -- estimate "$T/trunc-symbol.json"
# Keras model JSON (model.to_json(), Keras 3 config.json)
K=$M/keras
expect 0 "(keras, opset 17," -- estimate $K/mnist_small_cnn_keras2.15.json --batch-size 32 --mode train
expect 0 "weights               18.08 MiB" -- estimate $K/mnist_small_cnn_keras2.15.json --batch-size 32 --mode train
expect 0 "dims.batch     32 (--batch-size)" -- estimate $K/resnet50_keras2.1.6.json --batch-size 32 --mode train
expect 0 "weights               97.80 MiB" -- estimate $K/resnet50_keras2.1.6.json -b 1
expect 0 "optimizer state        8.04 MiB" -- estimate $K/resnet50_transfer_keras3.json --batch-size 32 --mode train
expect 0 "(keras, opset 17," -- estimate $K/lstm_sentiment_keras2.10.json --batch-size 32 --mode train --optimizer adam
# a Keras Application whose JSON leaves the input size open gets its
# keras.applications default_size (InceptionV3: 299), stated, and --dim overrides it
expect 0 "dims.height    299 (keras.applications.InceptionV3's default_size, the model being named 'inception_v3'; --dim height=N sets another)  [default]" -- estimate $K/inceptionv3_keras2.1.6.json
for F in $K/inceptionv3_keras2.1.6.json; do
    a=$("$D" estimate $F -b 2 --mode train 2>&1 | grep '^peak'); b=$("$D" estimate $F -b 2 --mode train --dim height=299 --dim width=299 2>&1 | grep '^peak')
    c=$("$D" estimate $F -b 2 --mode train --dim height=320 --dim width=320 2>&1 | grep '^peak')
    if [ -z "$a" ] || [ "$a" != "$b" ] || [ "$a" = "$c" ]; then echo "FAIL: inception's default size is not 299x299: '$a' / '$b' / '$c'"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
done
printf '%s' '{"class_name": "Functional", "keras_version": "2.15.0", "config": {"name": "mobilenet_0.50_160", "layers": [{"class_name": "InputLayer", "name": "in", "config": {"name": "in", "batch_input_shape": [null, null, null, 3], "dtype": "float32"}, "inbound_nodes": []}, {"class_name": "Conv2D", "name": "c", "config": {"name": "c", "filters": 4, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same", "use_bias": false}, "inbound_nodes": [[["in", 0, 0, {}]]]}], "input_layers": [["in", 0, 0]], "output_layers": [["c", 0, 0]]}}' >"$T/kmobile.json"
# MobileNet's rows are in its name: [2,160,160,4] float32 = 800 KiB of output
expect 0 "dims.width     160 (keras.applications.MobileNet's default_size, the model being named 'mobilenet_0.50_160'" -- estimate "$T/kmobile.json" -b 2
expect 0 "800.00 KiB  float32  [2,4,160,160]" -- estimate "$T/kmobile.json" -b 2
sed 's/mobilenet_0.50_160/mynet/' "$T/kmobile.json" >"$T/kopen.json"
expect 2 "dim 'height' (axis 1 of input 'in') is not bound; pass --dim height=N (the model leaves its input size open; or --input-shape in=... for the whole shape)" -- estimate "$T/kopen.json" -b 2
expect 0 "dims.height    299 (--dim)" -- estimate $K/inceptionv3_keras2.1.6.json --dim height=299 --dim width=299
# Keras 2's fused BatchNorm under TF: the grad kernel's NHWC -> NCHW transposes
# at the peak when eager or when Grappler keeps the graph NHWC (fp16 convolutions)
expect 0 "BatchNormalization.x_backprop_transformed (NCHW)" -- \
    estimate $K/resnet50_keras2.1.6.json -b 32 --mode train --framework tensorflow --gpu A100-80GB \
    --tf-execution eager
expect 0 "BatchNormalization.x_backprop_transformed (NCHW)" -- \
    estimate $K/resnet50_keras2.1.6.json -b 32 --mode train --framework tensorflow --gpu A100-80GB \
    --precision amp-fp16
expect 2 "--seq-len: " -- estimate $K/lstm_sentiment_keras2.10.json --seq-len 64
# TensorFlow on the CPU (its CPU BFC allocator) and Keras 3's Functional holding every
# layer output to the end of an eager call: relu, tanh, sigmoid on [4,16384] float32
# (256 KiB each), measured with TF 2.21 / Keras 3.15 (docs/validation-tf.md): model(x)
# peaks at the input and the three outputs, predict_on_batch at the input and one
KT=$M/keras-tf
expect 0 "needs        1.00 MiB  (peak in use 1.00 MiB + CUDA context 0 B" -- \
    estimate $KT/acts3.json --framework tensorflow --device cpu -b 4 --tf-execution eager
expect 0 "needs        512.00 KiB  (peak in use 512.00 KiB + CUDA context 0 B" -- \
    estimate $KT/acts3.json --framework tensorflow --device cpu -b 4
expect 0 "allocator      TensorFlow's CPU BFC (TF_CPU_ALLOCATOR_USE_BFC=true" -- \
    estimate $KT/acts3.json --framework tensorflow --device cpu -b 4
expect 0 "memory_limit   1.00 GiB (--tf-memory-limit)" -- \
    estimate $KT/acts3.json --framework tensorflow --device cpu -b 4 --tf-memory-limit 1GiB
# the eager tape of Keras 3's unfused BatchNormalization (x * inv; x, the model's input, is
# not watched) and eager _MeanGrad's broadcast beside its RealDiv: one layer on
# [8,32,32,16] float32 then GlobalAveragePooling2D and Dense, measured 3146752 B and
# 2582272 B (tf-cpu.jsonl); model(x) of the Conv2D: its pre-bias output beside BiasAdd's,
# measured 2080768 B (tf_eager.def)
expect 0 "needs        3.00 MiB  (peak in use 3.00 MiB" -- estimate $KT/micro-bn.json \
    --framework tensorflow --device cpu -b 8 --mode train --tf-execution eager
expect 0 "/batch_normalization/BatchNormalization.x * inv  <- BatchNormalization" -- \
    estimate $KT/micro-bn.json --framework tensorflow --device cpu -b 8 --mode train --tf-execution eager
expect 0 "/conv2d/Conv_output_0.broadcast_to(grad) (_MeanGrad)  <- GlobalAveragePool" -- \
    estimate $KT/micro-conv.json --framework tensorflow --device cpu -b 8 --mode train --tf-execution eager
expect 0 "/conv2d/Conv.pre-bias output (BiasAdd's input)  <- Conv" -- estimate $KT/micro-conv.json \
    --framework tensorflow --device cpu -b 8 --tf-execution eager
# (1.98 MiB: 2080768 B measured; 2079744 with the variables' build history, tfbuild.c)
expect 0 "needs        1.98 MiB  (peak in use 1.98 MiB" -- estimate $KT/micro-conv.json \
    --framework tensorflow --device cpu -b 8 --tf-execution eager
# TensorFlow's build history (src/schedule/tfbuild.c): Dense(1024) on [784] is its
# initializer's AddV2 output, in the 8 MiB region's rest after the Mul: 8388608 - 3211264
# = 5177344 B (4.94 MiB; BFC does not split a chunk under twice the request); model(x)
# at batch 32 measured 5587200 B (5.33 MiB; tf-cpu.jsonl mlp1-1024-call-b32)
expect 0 "4.94 MiB  float32  [784,1024]           dense/kernel" -- estimate $KT/mlp1-1024.json \
    --framework tensorflow --device cpu -b 32 --tf-execution eager
expect 0 "needs        5.33 MiB  (peak in use 5.33 MiB" -- estimate $KT/mlp1-1024.json \
    --framework tensorflow --device cpu -b 32 --tf-execution eager
# tf.function's grads of Keras 3's BatchNormalization (two Tiles), silu (1 - sigmoid) and
# exact gelu (0.5 * x and erfc kept) after a Conv2D: fit at batch 8 measured 3143936,
# 3143936 and 3672576 B (3.00, 3.00, 3.50 MiB; 2.50 MiB each without them; tf.c)
for m in convbn:3.00 convsilu:3.00 convgelu:3.50; do
    expect 0 "needs        ${m#*:} MiB  (peak in use ${m#*:} MiB" -- estimate $KT/micro-${m%:*}.json \
        --framework tensorflow --device cpu -b 8 --tf-execution graph --mode train --optimizer sgd-momentum
done
# Keras 3's sigmoid keeps its input as output._keras_logits (keras/src/backend/tensorflow/
# nn.py), held while the tape holds the output (tffit2): a GradientTape step at batch 8
# measured 3107328 B (2.96 MiB; 2.49 MiB without the conv output; tf.c TF_W_KERAS3)
expect 0 "/conv2d/Conv_output_0  <- Conv" -- estimate $KT/micro-convsigmoid.json \
    --framework tensorflow --device cpu -b 8 --tf-execution eager --mode train --optimizer sgd-momentum
expect 0 "needs        2.99 MiB  (peak in use 2.99 MiB" -- estimate $KT/micro-convsigmoid.json \
    --framework tensorflow --device cpu -b 8 --tf-execution eager --mode train --optimizer sgd-momentum
printf '%s' '{"class_name": "Sequential", "keras_version": "2.15.0", "config": {"name": "s", "layers": [{"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, null], "dtype": "int32"}}, {"class_name": "Embedding", "config": {"name": "e", "input_dim": 100, "output_dim": 8}}, {"class_name": "GRU", "config": {"name": "g", "units": 4}}]}}' >"$T/kseq.json"
expect 0 "dims.seq       64 (--seq-len)" -- estimate "$T/kseq.json" --seq-len 64 -b 2 --mode train
printf '%s' '{"class_name": "Sequential", "keras_version": "2.15.0", "config": {"name": "s", "layers": [{"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4]}}, {"class_name": "Lambda", "config": {"name": "my_lambda"}}]}}' >"$T/klambda.json"
expect 4 "klambda.json: layer 'my_lambda' (Lambda): class 'Lambda' is not supported" -- estimate "$T/klambda.json"
printf '%s' '{"class_name": "Sequential", "keras_version": "2.15.0", "config": {"name": "s", "layers": [{"class_name": "Dense", "config": {"name": "d", "units": 3}}]}}' >"$T/knoshape.json"
expect 3 "knoshape.json: the input shape is missing" -- estimate "$T/knoshape.json"
printf '%s' '{"class_name": "Sequential", "keras_version": "2.15.0", "config": {"name": "s", "layers": [{"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4]}}, {"class_name": "Dense", "config": {"name": "d"}}]}}' >"$T/knounits.json"
expect 3 "layer 'd' (Dense): config field 'units' is missing" -- estimate "$T/knounits.json"
printf '%s' '{"class_name": "Sequential", "keras_version": "2.15.0", "config": {"name": "s", "layers": [{"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4]}}, {"class_name": "Dense", "config": {"name": "d", "units": 4000000000000}}]}}' >"$T/kabsurd.json"
expect 3 "config field 'units' is 4000000000000, an absurd size" -- estimate "$T/kabsurd.json"
printf 'PK\003\004rest of a zip' >"$T/model.keras"
expect 3 "model.keras: a zip archive (a .keras model?) that cannot be read" -- estimate "$T/model.keras"
# a Keras 3 .keras archive (zip: metadata.json, config.json, weights) built
# from the bare config JSON: the same estimate, found by content whatever its name
"$PY" - "$K/fashion_mnist_mlp_keras3.json" "$T" <<'EOF'
import sys, zipfile
cfg, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(out + "/mlp.keras", "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("metadata.json", '{"keras_version": "3.9.9", "date_saved": "2024-01-01@00:00:00"}')
    z.write(cfg, "config.json")
    z.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n")
with zipfile.ZipFile(out + "/nocfg.keras", "w") as z:
    z.writestr("metadata.json", "{}")
EOF
cp "$T/mlp.keras" "$T/mlp.bin"
"$D" estimate "$K/fashion_mnist_mlp_keras3.json" -b 32 --mode train | grep -E '^(peak|breakdown|  )' >"$T/json.txt"
for f in mlp.keras mlp.bin; do
    "$D" estimate "$T/$f" -b 32 --mode train | grep -E '^(peak|breakdown|  )' >"$T/zip.txt"
    if [ -s "$T/json.txt" ] && cmp -s "$T/json.txt" "$T/zip.txt"; then
        pass=$((pass + 1))
    else
        echo "FAIL: $f: estimate differs from the bare config JSON's"
        diff "$T/json.txt" "$T/zip.txt" | head -10
        fail=$((fail + 1))
    fi
done
expect 0 "mlp.keras (keras, opset 17, 11 nodes" -- estimate "$T/mlp.keras" -b 32
expect 3 "nocfg.keras: config.json: no such member" -- estimate "$T/nocfg.keras"
head -c 200 "$T/mlp.keras" >"$T/trunc.keras"
expect 3 "trunc.keras: a zip archive (a .keras model?) that cannot be read" -- estimate "$T/trunc.keras"

# a captured step (docs/capture-format.md): tests/models/capture/tiny-train.dnnmem, worked by
# hand. CPU (exact sizes): the peak is at the optimizer's clone, with everything live but the
# first backward mm's output (freed): 4096 + 1024 + 64 + 2048 + 4 + 4096 + 4096 = 15428 B.
# CUDA: the same blocks rounded to 512 B (64 -> 512, 4 -> 512: 16384 B) plus two cuBLAS
# workspaces of 8,519,680 B (torch 2.13, sm80: the forward mm's handle, and the backward
# mm's on autograd's thread) = 17,055,744 B allocated.
C=$M/capture/tiny-train.dnnmem
expect 0 '"peak_allocated_bytes": 15428,' -- estimate $C --device cpu --json
expect 0 '"peak_allocated_bytes": 17055744,' -- estimate $C --json
expect 0 "at           optimizer, step 1, node 6 of 7: 'clone#6' (aten.clone.default)" -- estimate $C --device cpu
expect 0 'fits' -- estimate $C --gpu A100-80GB
expect 2 "tiny-train.dnnmem: --batch-size: the capture's sizes are those of the batch it ran" -- estimate $C -b 8
expect 0 '"peak_allocated_bytes": 15428,' -- estimate $C --device cpu -b 4 --json
expect 2 "tiny-train.dnnmem: --optimizer: the capture ran its own optimizer" -- estimate $C --optimizer adam
expect 2 "tiny-train.dnnmem: --precision: the capture ran in its own dtypes" -- estimate $C --precision amp-bf16
expect 2 "tiny-train.dnnmem: --framework: a capture is a PyTorch eager step" -- estimate $C --framework jax
# the same step with its sizes as functions of the batch (format 2, "dims": dnnmem.dims):
# input 256 B, target 16 B and both mm outputs 512 B per sample, valid from batch 2. At
# batch 10 the peak moves to the second backward mm, with both mm outputs live: 4096 + 2560
# + 160 + 5120 + 4 + 5120 + 4096 = 21156 B. max-batch in 30000 B less 5%: 4096 + 4 + 4096 +
# 1296 B per sample <= 28500 at 15 (27636 B), not at 16 (28932 B).
D2=$M/capture/tiny-train-dims.dnnmem
expect 0 '"peak_allocated_bytes": 15428,' -- estimate $D2 --device cpu --json
expect 0 '"peak_allocated_bytes": 21156,' -- estimate $D2 --device cpu -b 10 --json
expect 0 "at           backward, step 1, node 5 of 7: 'fc/mm#5' (aten.mm.default)" -- estimate $D2 --device cpu -b 10
expect 0 "dims.batch     10 (captured at 4; sizes as functions of the dims, for batch >= 2)" -- estimate $D2 --device cpu -b 10
expect 0 '"peak_allocated_bytes": 21156,' -- estimate $D2 --device cpu --dim batch=10 --json
expect 0 "largest batch size that fits 30000B with 5% left free: 15" -- max-batch $D2 --memory 30000B --device cpu
expect 2 "tiny-train-dims.dnnmem: --batch-size 1: the capture's sizes hold for batch >= 2 (the step ran differently below); capture at 1" -- estimate $D2 -b 1
expect 2 "tiny-train-dims.dnnmem: --dim seq: the capture's sizes are functions of batch; capture with dims= (dnnmem.torch.capture) to vary it" -- estimate $D2 --dim seq=8
expect 2 "tiny-train-dims.dnnmem: --seq-len: the capture's sizes are not functions of a sequence dim" -- estimate $D2 --seq-len 8
sed 's/"bytes_poly": \[\[256, 1\]\]/"bytes_poly": [[255, 1]]/' $D2 >"$T/poly.dnnmem"
expect 3 'poly.dnnmem: storage 1: "bytes_poly": its function of the dims does not give 1024 at the captured dims' -- estimate "$T/poly.dnnmem"
sed 's/"bytes_poly": \[\[256, 1\]\]/"bytes_poly": [[256, 4]]/' $D2 >"$T/poly4.dnnmem"
expect 3 'poly4.dnnmem: storage 1: "bytes_poly": 4 is out of range [0, 3]' -- estimate "$T/poly4.dnnmem"
sed 's/"dims": .*\]}\],//' $D2 >"$T/nodims.dnnmem"
expect 3 'nodims.dnnmem: storage '"'"'input.0'"'"': "bytes_poly" is a function of the dims, and the capture declares no "dims"' -- estimate "$T/nodims.dnnmem"
sed 's/"bytes_poly": \[\[512, 1\]\]/"bytes_poly": [[128, 2]]/' $D2 >"$T/big.dnnmem"
expect 0 '"peak_allocated_bytes": 15428,' -- estimate "$T/big.dnnmem" --device cpu --json
expect 3 'big.dnnmem: storage 3: its size at these dims is negative or above 2^50 bytes' -- estimate "$T/big.dnnmem" -b 200000000
# autograd's gradient sum in place (src/estimate/captured.c, accumulate_in_place): the add
# marked "accumulate" reuses grad_a: 1024 + 4096 + 4096 = 9216 B at the peak; unmarked, the
# capture's own new buffer: + 4096 = 13312 B
A=$M/capture/accumulate.dnnmem
expect 0 '"peak_allocated_bytes": 9216,' -- estimate $A --device cpu --json
sed 's/, "accumulate": true//' $A >"$T/noacc.dnnmem"
expect 0 '"peak_allocated_bytes": 13312,' -- estimate "$T/noacc.dnnmem" --device cpu --json
sed 's/"accumulate": true/"accumulate": 1/' $A >"$T/acc1.dnnmem"
expect 3 'acc1.dnnmem: step 3: "accumulate" must be true or false' -- estimate "$T/acc1.dnnmem"
# oneDNN's buffers around a CPU convolution, by the ONNX path's rules (src/schedule/cpuconv.c):
# batch 2 takes oneDNN; 3 in channels, a 3x3 kernel: the "first convolution" kernel, which
# reads the input as it is, reorders the weight with its out channels padded to 16 (16 x 3 x
# 9 floats, 1728 B, freed before the output) and computes into a blocked destination of 2 x
# 16 x 64 floats (8192 B) live while the ATen output is made: 864 + 1536 + 8192 + 4096 =
# 14688 B, what the same Conv as an ONNX graph estimates; float16 (no CPU rule) or CUDA:
# 864 + 1536 + 4096 = 6496
V=$M/capture/conv-infer.dnnmem
expect 0 '"peak_allocated_bytes": 14688,' -- estimate $V --device cpu --json
expect 0 '"peak_allocated_bytes": 14688,' -- estimate $V --device cpu --cpu-isa avx512 --json
# AVX2's blocks of 8: the destination 2 x 8 x 64 floats, 4096 B: 864 + 1536 + 4096 + 4096
expect 0 '"peak_allocated_bytes": 10592,' -- estimate $V --device cpu --cpu-isa avx2 --json
# --cpu-l2: the L2 oneDNN's AVX2 gemm convolution tiles its columns to (cpuconv.c,
# onednn_gemm_scratch), shown with an AVX2 estimate of a graph with a conv
expect 2 "--cpu-l2 1: expected a size of at least 4 KiB such as 512KiB" -- estimate $V --device cpu --cpu-l2 1
expect 0 "cpu_l2         524288 B (oneDNN's gemm convolution tiles its im2col columns to it)  [default]" \
    -- estimate $M/fixtures/resnet50.onnx -b 1 --device cpu --cpu-isa avx2
expect 0 "cpu_l2         1048576 B (oneDNN's gemm convolution tiles its im2col columns to it)" \
    -- estimate $M/fixtures/resnet50.onnx -b 1 --device cpu --cpu-isa avx2 --cpu-l2 1MiB
# a capture's "padding" gives the replay the conv's geometry: at dilation 4, padding 4, the
# AVX2 JIT forward declines (left padding 4 over its unrolling of 3) and gemm_convolution runs
# on the plain input and weight: its columns 3 x 9 x 64 floats + 128 = 7040 B, a plain
# destination of 4096: 864 + 1536 + 7040 + 4096 = 13536 (measured, torch 2.14.1, AVX2, one
# thread: +7040 +4096 -7040 +4096 -4096); without "padding" the geometry is not known and
# the JIT rule stays (10592)
sed 's/"dilation": \[1, 1\],/"dilation": [4, 4], "padding": [4, 4],/' $V >"$T/dil.dnnmem"
expect 0 '"peak_allocated_bytes": 13536,' -- estimate "$T/dil.dnnmem" --device cpu --cpu-isa avx2 --json
sed 's/"dilation": \[1, 1\],/"dilation": [4, 4],/' $V >"$T/dil0.dnnmem"
expect 0 '"peak_allocated_bytes": 10592,' -- estimate "$T/dil0.dnnmem" --device cpu --cpu-isa avx2 --json
sed 's/"bias": false/"bias_": false/' $V >"$T/nobias.dnnmem"
expect 3 'nobias.dnnmem: step 1: "conv" needs "bias" (true or false; a capture by dnnmem.torch before 0.1.1 lacks it: capture again)' -- estimate "$T/nobias.dnnmem"
sed 's/"dtype": "float32",$/"dtype": "float16",/' $V >"$T/conv16.dnnmem"
expect 0 '"peak_allocated_bytes": 6496,' -- estimate "$T/conv16.dnnmem" --device cpu --json
expect 0 '"peak_allocated_bytes": 6656,' -- estimate $V --json
sed 's/"groups": 1/"groups": 0/' $V >"$T/conv0.dnnmem"
expect 3 'conv0.dnnmem: step 1: "conv": "groups": 0 is out of range' -- estimate "$T/conv0.dnnmem"
# bad captures: each one line, each its exit code
head -c 700 $C >"$T/trunc.dnnmem"
expect 3 "trunc.dnnmem: not a complete capture (JSON: " -- estimate "$T/trunc.dnnmem"
sed 's/"version": 1/"version": 3/' $C >"$T/v3.dnnmem"
expect 4 "v3.dnnmem: capture format version 3; this dnnmem reads versions 1 to 2" -- estimate "$T/v3.dnnmem"
sed 's/"bytes": 4096/"bytes": -4096/' $C >"$T/neg.dnnmem"
expect 3 "neg.dnnmem: storage 0: \"bytes\": -4096 is out of range" -- estimate "$T/neg.dnnmem"
sed 's/"bytes": 1024/"bytes": 9223372036854775807/' $C >"$T/huge.dnnmem"
expect 3 "huge.dnnmem: storage 1: \"bytes\": 9223372036854775807 is out of range" -- estimate "$T/huge.dnnmem"
sed 's/"shape": \[16, 64\]/"shape": [4194304, 4194304, 4194304]/' $C >"$T/dims.dnnmem"
expect 3 "dims.dnnmem: storage 0: shape has too many elements" -- estimate "$T/dims.dnnmem"
sed 's/"alloc": \[5\]/"alloc": [3]/' $C >"$T/twice.dnnmem"
expect 3 "twice.dnnmem: step 4 allocates storage 'fc:mm#1.out0' a second time" -- estimate "$T/twice.dnnmem"
sed 's/"free": \[5\]/"free": [7]/' $C >"$T/early.dnnmem"
expect 3 "early.dnnmem: step 5 frees storage 'fc.weight.momentum_buffer', which was never allocated" -- \
    estimate "$T/early.dnnmem"
sed 's/"in": \[5, 1\]/"in": [5, 1, 8]/' $C >"$T/range.dnnmem"
expect 3 "range.dnnmem: step 5: \"in\": 8 is out of range [0, 7]" -- estimate "$T/range.dnnmem"
sed 's/"dtype": "int64"/"dtype": "int128"/' $C >"$T/dtype.dnnmem"
expect 4 "dtype.dnnmem: storage 'target': dtype 'int128' is not modelled" -- estimate "$T/dtype.dnnmem"
sed 's/"mode": "train"/"mode": "infer"/' $C >"$T/infer.dnnmem"
expect 2 "infer.dnnmem: --mode train: the capture is of inference" -- estimate "$T/infer.dnnmem" --mode train

# data parallelism (docs/parallel.md): the ranks' rows, the global batch, JSON's parallel
# against the schema, and the layouts refused, each one line naming the constraint
L=$M/hf/Llama-3.2-1B-Instruct.json
expect 0 "ranks        4, global batch 8; this report is rank 0, the most loaded" -- \
    estimate $L --mode train -b 2 -s 256 --gpus 4
expect 0 "  ranks 0-3 " -- estimate $L --mode train -b 2 -s 256 --gpus 4 --zero 3
expect 0 "DeepSpeed ZeRO-2 (0.19.6): reduce_bucket_size 500000000, the step on the host (DeepSpeedCPUAdam), optimizer offloaded" -- \
    estimate $L --mode train -b 2 -s 256 --gpus 4 --zero 2 --offload optimizer
expect 0 "units '/model/layers.*' and the root" -- estimate $L --mode train -b 2 -s 256 --gpus 2 --fsdp full
expect 0 "  rank 2 " -- estimate $L --mode train -b 2 -s 256 --gpus 3 --fsdp full
expect 0 "nccl           16.00 MiB per communicator x 2" -- \
    estimate $L --mode train -b 2 -s 256 --nodes 2 --gpus-per-node 4 --fsdp hybrid
"$D" estimate $L --mode train -b 2 -s 256 --gpus 3 --fsdp full --json >"$T/par.json"
check_schema "$T/par.json" "data-parallel JSON (parallel.ranks[])"
expect 2 "--zero and --fsdp are two engines' sharding" -- estimate $L --mode train --gpus 2 --zero 1 --fsdp full
expect 2 "--gpus 8 is not --nodes x --gpus-per-node" -- \
    estimate $L --mode train --gpus 8 --nodes 2 --gpus-per-node 2
expect 4 "--tp is not modelled for HuggingFace configs yet" -- estimate $L --mode train --gpus 4 --tp 2
TPM=$M/dist/mlp4.onnx
expect 0 "tensor_parallel 2 ranks: 4 column-parallel linears (the first '/blocks.0/fc1/Gemm'" -- \
    estimate $TPM --mode train -b 4 --device cpu --gpus 4 --tp 2
expect 0 "ranks        4, global batch 8" -- estimate $TPM --mode train -b 4 --device cpu --gpus 4 --tp 2
expect 2 "--tp 3 does not divide the world of 4 ranks" -- estimate $TPM --mode train --gpus 4 --tp 3
expect 2 "dim 0 of parameter 'blocks.0.fc1.weight' (2048) does not divide by 3" -- \
    estimate $TPM --mode train --device cpu --tp 3
expect 4 "--tp 2: no column-parallel linear whose output reaches a row-parallel one" -- \
    estimate $M/dist/cnn4.onnx --mode train --device cpu --tp 2
# --sp (docs/parallel.md "Sequence parallel"): tfm4 at TP 2 measured 106,257,856 B per rank
# (torch 2.13 gloo, tests/validation/dist-cpu.jsonl tfm4-tp-sp-w2-b4-adam)
TFM=$M/dist/tfm4.onnx
expect 0 '"peak_allocated_bytes": 106257836' -- estimate $TFM --mode train -b 4 --device cpu --tp 2 --sp \
    --framework pytorch@2.13 --cpu-threads 1 --optimizer adam --json
expect 0 "this rank 0: tensor parallel over all of them with sequence parallel" -- \
    estimate $TFM --mode train -b 4 --device cpu --tp 2 --sp
expect 0 "sequence_parallel 2 ranks: 33 activations split along dim 1" -- \
    estimate $TFM --mode train -b 4 --device cpu --tp 2 --sp
expect 0 "over tensor-parallel groups of 2 with sequence parallel" -- \
    estimate $TFM --mode train -b 4 --device cpu --gpus 4 --tp 2 --sp
"$D" estimate $TFM --mode train -b 4 --device cpu --gpus 4 --tp 2 --sp --json >"$T/sp.json"
check_schema "$T/sp.json" "sequence-parallel JSON (parallel.sequence_parallel)"
expect 0 '"sequence_parallel": true' -- estimate $TFM --mode train -b 4 --device cpu --tp 2 --sp --json
expect 2 "--sp (sequence parallel) splits the tensor-parallel group's norm and dropout regions along the sequence: it needs --tp 2 or more" -- \
    estimate $TFM --mode train --device cpu --sp
expect 4 "--sp with --pp is not modelled" -- estimate $TFM --mode train --device cpu --tp 2 --pp 2 --sp
expect 4 "mlp4.onnx: --sp: no input has a sequence to split" -- estimate $TPM --mode train --device cpu --tp 2 --sp
expect 2 "--sp: the plan does not search sequence parallelism yet" -- \
    plan $TFM --mode train --device cpu --memory 8GiB --gpus 2 --sp
# Llama-3.2-1B over 2 stages, by hand: a layer 60,821,504 bf16 parameters (q, o 2048 x 2048;
# k, v 512 x 2048; gate, up, down 8192 x 2048; two norms), 121,643,008 B; the first stage
# 8 layers and embed_tokens (128256 x 2048, 525,336,576 B), the last 8 layers, the final
# norm (4,096 B) and the tied lm_head's copy of the embedding (Megatron's shared embedding)
expect 0 '"weights": 1498480640' -- estimate $L --mode train -b 2 -s 512 --pp 2 --rank 0 --json
expect 0 '"weights": 1498484736' -- estimate $L --mode train -b 2 -s 512 --pp 2 --rank 1 --json
expect 0 "  rank 1           159.76 MiB" -- estimate $TPM --mode train -b 4 --device cpu --optimizer adam \
    --framework pytorch@2.13 --cpu-threads 1 --pp 2 --micro-batches 4 --pp-schedule gpipe
expect 0 "ranks        8, global batch 8" -- estimate $TPM --mode train -b 4 --device cpu --gpus 8 --tp 2 --pp 2
expect 0 "nccl           16.00 MiB per communicator x 3" -- estimate $TPM --mode train -b 4 --gpus 8 --tp 2 --pp 2
expect 2 "--batch-size 4 does not split into --micro-batches 3" -- estimate $TPM --mode train -b 4 --pp 3
expect 4 "--pp 3: the model's repeated blocks (4 found) do not split evenly into 3 stages" -- \
    estimate $TPM --mode train -b 6 --pp 3 --micro-batches 2
expect 4 "--pp-schedule interleaved-1f1b is not modelled" -- \
    estimate $TPM --mode train --pp 2 --pp-schedule interleaved-1f1b
expect 2 "--micro-batches, --pp-schedule and --pp-split apply to --pp" -- estimate $TPM --mode train --micro-batches 2
expect 2 "--pp 2 (x --tp) does not divide the world of 6 ranks" -- estimate $TPM --mode train --gpus 6 --tp 2 --pp 2
# --pp-split 1,3 on mlp4: a block is 16,789,504 B (fc1 2048 x 1024 + 2048, fc2 1024 x 2048 +
# 1024, float32); the last stage's three and the head (1000 x 1024 + 1000: 4,100,000 B)
expect 0 '"weights": 16789504' -- estimate $TPM --mode train -b 4 --device cpu --pp 2 --pp-split 1,3 --rank 0 --json
expect 0 '"weights": 54468512' -- estimate $TPM --mode train -b 4 --device cpu --pp 2 --pp-split 1,3 --rank 1 --json
expect 2 "--pp-split 1,2: expected 2 counts of at least 1 summing to the model's 4 repeated blocks" -- \
    estimate $TPM --mode train -b 4 --pp 2 --pp-split 1,2
expect 2 "--pp-split x: expected the blocks of each stage" -- estimate $TPM --mode train --pp 2 --pp-split x
expect 2 "--micro-batches, --pp-schedule and --pp-split apply to --pp" -- estimate $TPM --mode train --pp-split 2,2
"$D" estimate $TPM --mode train -b 4 --device cpu --pp 2 --json >"$T/pp.json"
check_schema "$T/pp.json" "pipeline-parallel JSON (parallel.ranks[] per stage)"
expect 2 "add --mode train" -- estimate $L --gpus 2
expect 2 "--offload params (offload_param) needs --zero 3" -- estimate $L --mode train --gpus 2 --zero 2 --offload params
expect 2 "--zero 4: expected 0, 1, 2 or 3" -- estimate $L --mode train --zero 4
expect 2 "--fsdp half: expected none, full, shard-grad-op, hybrid or no-shard" -- estimate $L --mode train --fsdp half
expect 2 "--rank 5: outside the world of 2 ranks" -- estimate $L --mode train --gpus 2 --rank 5
expect 4 "a captured step is one process's" -- estimate $M/capture/tiny-train.dnnmem --gpus 2
# dnnmem plan (docs/parallel.md "plan"): its JSON against docs/schema/plan.schema.json,
# its rows against dnnmem estimate, its errors and exit codes
if "$PY" tests/cli/plan_check.py "$D"; then pass=$((pass + 1)); else echo "FAIL: tests/cli/plan_check.py"; fail=$((fail + 1)); fi

echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
