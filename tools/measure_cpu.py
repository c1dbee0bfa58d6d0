#!/usr/bin/python3
"""Measure ground-truth peak tensor memory of real PyTorch (CPU) runs.

Run with Debian's interpreter (python3-torch 1.13, torchvision 0.14, onnx):

    /usr/bin/python3 tools/measure_cpu.py [--out tests/validation] [--jobs 2]
                                          [--only ID_OR_MODEL ...] [--list]

This is a one-off generator: its output, tests/validation/pytorch-cpu-1.13.jsonl,
is committed and `make check` only reads it.  See tests/validation/README.md for
the exact definition of every number.

Method (per configuration, each in its own forked child process, so the
allocator's bookkeeping starts empty and nothing leaks between configurations):
  * the model is built exactly as tools/export_fixtures.py builds it
    (torch.manual_seed(0); spec["make"]()), so it is the graph of the committed
    ONNX fixture; inputs/targets are drawn after torch.manual_seed(1);
  * bytes_before = sum of the distinct storages of every live torch.Tensor
    (gc scan) just before profiling starts: parameters, buffers, inputs,
    targets (and anything else; the breakdown is recorded and checked);
  * the run (two training iterations, or one no_grad inference pass) is done
    inside torch.profiler.profile(activities=[CPU], profile_memory=True);
    every CPU allocator event (nbytes > 0 alloc, < 0 free) is read from
    prof.profiler.kineto_results.events() in time order; the running sum of
    nbytes, added to bytes_before, is the live tensor-byte curve, and its
    maximum is peak_bytes;
  * each step of the loop is wrapped in a record_function("dnnmem/...") range;
    the event tree (kineto_results.experimental_event_tree()) attributes each
    allocation to its range (phase) and to the operator that made it, which
    gives per-phase peaks and the blocks live at the peak.
"""

import argparse
import gc
import inspect
import json
import multiprocessing as mp
import os
import resource
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils.checkpoint as tuc  # noqa: E402
import torchvision  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import export_fixtures  # noqa: E402  (the fixture model definitions)
import hf_torch  # noqa: E402  (transformers' eager causal LMs, re-implemented)

OUT_NAME = "pytorch-cpu-1.13.jsonl"
DETAIL_NAME = "pytorch-cpu-1.13-detail.json"
PREFIX = "dnnmem/"
NUM_THREADS = 1
SGD_LR, SGD_MOMENTUM = 0.01, 0.9
ADAM_LR = 1e-3
ITERS = 2
TOPK = 10

# Per family: batch sizes, sequence length (token models), image size.
FAMILIES = {
    "resnet50": dict(batches=[1, 2, 4], image=224),
    "vgg16": dict(batches=[1, 2, 4], image=224),
    # Training inception_v3 with batch 1 fails: the aux head's BatchNorm sees
    # [1,768,1,1] ("Expected more than 1 value per channel when training").
    "inception_v3": dict(batches=[2, 4, 8], image=299),
    "lstm_lm": dict(batches=[2, 8, 20], seq=35),
    "bert_encoder": dict(batches=[1, 2, 4], seq=128),
}

# HuggingFace configs (tests/models/hf): the model is tools/hf_torch.py built from
# the config.json; input_ids int64 [batch, seq].
HF_MODELS = {
    "tiny-llama-gqa": dict(config="tests/models/hf/tiny-llama-gqa.json", batches=[2], seq=128),
    "tiny-qwen3": dict(config="tests/models/hf/tiny-qwen3.json", batches=[2], seq=128),
    "tiny-gpt2": dict(config="tests/models/hf/tiny-gpt2.json", batches=[2], seq=128),
    # mixture of experts: the router's choice is overwritten with a balanced
    # round-robin assignment (hf_torch.balance_), tokens * top_k / experts each
    "tiny-mixtral": dict(config="tests/models/hf/tiny-mixtral.json", batches=[2], seq=128),
    "tiny-qwen2-moe": dict(config="tests/models/hf/tiny-qwen2-moe.json", batches=[2], seq=128),
    "tiny-qwen3-moe": dict(config="tests/models/hf/tiny-qwen3-moe.json", batches=[2], seq=128),
    # output_router_logits: the load-balancing loss added after the cross-entropy (training only)
    "tiny-mixtral-aux": dict(config="tests/models/hf/tiny-mixtral-aux.json", batches=[2], seq=128),
    "tiny-qwen3-moe-aux": dict(config="tests/models/hf/tiny-qwen3-moe-aux.json", batches=[2],
                               seq=128),
    # 64 experts top-8 over 8 x 256 tokens in 4 layers, a tiny vocab: the aux loss's int64
    # one-hot [8192, 8, 64] and its float copy (50 MiB) make the loss phase's peak
    "tiny-qwen3-moe-aux-wide": dict(config="tests/models/hf/tiny-qwen3-moe-aux-wide.json",
                                    batches=[8], seq=256),
    "tiny-deepseek-v2": dict(config="tests/models/hf/tiny-deepseek-v2.json", batches=[2], seq=128),
    "tiny-deepseek-v3": dict(config="tests/models/hf/tiny-deepseek-v3.json", batches=[2], seq=128),
    # encoder-decoder: input_ids [batch, seq] and decoder_input_ids [batch, target_seq]
    # (labels [batch, target_seq] shifted right, made with the inputs)
    "tiny-t5": dict(config="tests/models/hf/tiny-t5.json", batches=[2], seq=128, target_seq=64),
    "tiny-t5-gated": dict(config="tests/models/hf/tiny-t5-gated.json", batches=[2], seq=96,
                          target_seq=128),
    # images: pixel_values float32 [batch, channels, image_size, image_size]; labels [batch]
    "tiny-vit": dict(config="tests/models/hf/tiny-vit.json", batches=[2, 8], image=True),
    "tiny-opt": dict(config="tests/models/hf/tiny-opt.json", batches=[2], seq=128),
    "tiny-opt-prenorm": dict(config="tests/models/hf/tiny-opt-prenorm.json", batches=[2], seq=128),
    "tiny-neox": dict(config="tests/models/hf/tiny-neox.json", batches=[2], seq=128),
    "tiny-phi3": dict(config="tests/models/hf/tiny-phi3.json", batches=[2], seq=128),
    "tiny-gemma": dict(config="tests/models/hf/tiny-gemma.json", batches=[2], seq=128),
    "tiny-phi": dict(config="tests/models/hf/tiny-phi.json", batches=[2], seq=128),
    "tiny-falcon": dict(config="tests/models/hf/tiny-falcon.json", batches=[2], seq=128),
    # bf16 training only, at a length where the attention's probabilities weigh: their
    # eager softmax in float32 (OPT, GPT-NeoX, Phi-3, Gemma) or in bf16 (Falcon)
    "tiny-opt-s512": dict(config="tests/models/hf/tiny-opt.json", batches=[2], seq=512),
    "tiny-neox-s512": dict(config="tests/models/hf/tiny-neox.json", batches=[2], seq=512),
    "tiny-phi3-s512": dict(config="tests/models/hf/tiny-phi3.json", batches=[2], seq=512),
    "tiny-gemma-s512": dict(config="tests/models/hf/tiny-gemma.json", batches=[2], seq=512),
    "tiny-falcon-s512": dict(config="tests/models/hf/tiny-falcon.json", batches=[2], seq=512),
    # generation rows only: OPT with a vocabulary large enough that the prompt's logits
    # (OPTForCausalLM has no logits_to_keep in 4.51) outweigh the MLP's transients
    "tiny-opt-vocab": dict(config="tests/models/hf/tiny-opt-vocab.json", batches=[]),
    # generation rows only: BioGPT as 4.51 runs it (hf_torch's 4.51 BioGPT: BART's attention)
    "tiny-biogpt": dict(config="tests/models/hf/tiny-biogpt.json", batches=[]),
}
# Generation (mode "generate"): model.generate(input_ids, max_new_tokens=N, do_sample=False)
# of transformers 4.51 with a DynamicCache (hf_torch.greedy_generate), batch 2, a 64-token
# prompt; N = 400 makes the last decode step's peak exceed the prefill's. The decoder
# families of hf_decoders.inc that 4.51 runs with a DynamicCache too (their classes set
# _supports_cache_class; OPT's forward has no logits_to_keep): the same sizes.
GEN_MODELS = ("tiny-llama-gqa", "tiny-qwen3", "tiny-opt", "tiny-neox", "tiny-phi3", "tiny-phi",
              "tiny-falcon", "tiny-gemma", "tiny-opt-vocab")
GEN_BATCH, GEN_PROMPT, GEN_NEW_TOKENS = 2, 64, (16, 48, 400)
# GPT-2 generation, the same sizes: 4.51 keeps GPT-2 on the legacy tuple cache
# (hf_torch.gpt2_greedy_generate, picked by hf_torch.generate_greedy).
GEN_GPT2_MODELS = ("tiny-gpt2", "tiny-biogpt")
GEN_GPT2_DESC = ("greedy generate() of transformers 4.51, GPT-2's legacy tuple cache (each "
                 "layer torch.cats onto the previous tuple, which model_inputs holds until the "
                 "next step's prepare_inputs_for_generation), every position's logits, "
                 "attention_mask ones [B, seq] made (1 - m) * finfo.min [B, 1, 1, L] by the eager "
                 "forward; seq is the prompt; new_tokens forwards (the prefill and "
                 "new_tokens - 1 decode steps)")
GEN_BIOGPT_DESC = ("greedy generate() of transformers 4.51, BioGPT's legacy tuple cache (no Cache "
                   "class: each layer torch.cats onto the previous tuple, which model_inputs holds "
                   "until the next step's prepare_inputs_for_generation), every position's logits, "
                   "attention_mask ones [B, seq] made _expand_mask's [B, 1, q, L] by the eager "
                   "forward (no position_ids: the positions come from the mask's cumsum); seq is "
                   "the prompt; new_tokens forwards (the prefill and new_tokens - 1 decode steps)")
# T5 generation (encoder-decoder, hf_torch.t5_greedy_generate): the same batch and prompt
# (the encoder's input), 16, 48 and 400 new tokens (decoder forwards; at 400 the decode
# steps' peak exceeds the encoder's).
GEN_T5_MODELS, GEN_T5_NEW_TOKENS = ("tiny-t5", "tiny-t5-gated"), (16, 48, 400)
GEN_T5_DESC = ("greedy generate() of transformers 4.51 for T5ForConditionalGeneration: "
               "attention_mask ones [B, seq] int64, the encoder run once (its output kept), "
               "decoder_input_ids [B, 1] of decoder_start_token_id, an EncoderDecoderCache of two "
               "DynamicCaches (the self-attention keys and values torch.cat'ed per token, the "
               "cross-attention ones made at the first decoder forward and reused), every decoder "
               "position's logits (no logits_to_keep); seq is the prompt; new_tokens decoder "
               "forwards (the prefill and new_tokens - 1 decode steps), no eos stop")
# Generation with transformers 4.51's HybridCache (Gemma 2, Gemma 3 text: config
# cache_implementation "hybrid", hf_torch.hybrid_generate): (batch, prompt, new tokens)
# around the 64-token window: prompts shorter and longer than it, caches of
# P + N - 1 = 47 (under the window), 79, 111 and 143 positions.
HYBRID_GEN = {"tiny-gemma2": dict(config="tests/models/hf/tiny-gemma2.json",
                                  runs=((2, 32, 16), (2, 32, 48), (1, 96, 16), (2, 96, 48))),
              "tiny-gemma3": dict(config="tests/models/hf/tiny-gemma3.json",
                                  runs=((2, 32, 48), (1, 96, 16), (2, 96, 48)))}
# Beam search (num_beams > 1, do_sample False: hf_torch.beam_generate, transformers 4.51.3's
# vectorized _beam_search) and sampling (do_sample True with TopK / TopP warpers:
# hf_torch's greedy loops with hf_torch.sampling_processors) on the families that show the
# mechanisms: a DynamicCache with GQA (Llama), the legacy tuple cache (GPT-2: three caches at
# the reorder), and OPT's every-position prefill logits at vocabulary 8192 (the [B*K, P, V]
# logits live through the first log_softmax). Batch 2, prompt 64, 16 and 48 new tokens.
BEAM_MODELS, BEAM_SIZES = ("tiny-llama-gqa", "tiny-gpt2", "tiny-opt-vocab"), (2, 4)
SAMPLE_MODELS = ("tiny-llama-gqa", "tiny-gpt2", "tiny-opt-vocab")
# (top_k, top_p, temperature): 4.51's warpers in _get_logits_processor's order
SAMPLE_RUNS = ((50, 0.9, 1.0), (50, 1.0, 0.7))
# and 400 new tokens, where the decode steps' peak exceeds the prefill's: the reorder and the
# scorer (Llama, OPT at vocabulary 8192) and the warpers held through the forwards
BEAM_LONG, SAMPLE_LONG = (("tiny-llama-gqa", 4), ("tiny-opt-vocab", 4)), \
    ("tiny-llama-gqa", "tiny-opt-vocab")
MOE_MODELS = ("tiny-mixtral", "tiny-qwen2-moe", "tiny-qwen3-moe", "tiny-deepseek-v2", "tiny-deepseek-v3",
              "tiny-mixtral-aux", "tiny-qwen3-moe-aux", "tiny-qwen3-moe-aux-wide")
BF16_ONLY = ("tiny-gpt2", "tiny-opt", "tiny-neox", "tiny-phi3", "tiny-gemma", "tiny-phi", "tiny-falcon")
LONG_BF16 = ("tiny-opt-s512", "tiny-neox-s512", "tiny-phi3-s512", "tiny-gemma-s512", "tiny-falcon-s512")
BF16_ONLY += LONG_BF16
AUX_MODELS = ("tiny-mixtral-aux", "tiny-qwen3-moe-aux", "tiny-qwen3-moe-aux-wide")  # training only
# LoRA variant (PEFT LoraConfig; default target_modules per model_type).
LORA_R, LORA_ALPHA, LORA_DROPOUT = 8, 16, 0.05
LORA_TARGETS = {"llama": ["q_proj", "v_proj"], "gpt2": ["c_attn"], "t5": ["q", "v"],
                "vit": ["query", "value"], "opt": ["q_proj", "v_proj"],
                "gpt_neox": ["query_key_value"], "phi3": ["qkv_proj"], "gemma": ["q_proj", "v_proj"],
                "phi": ["q_proj", "v_proj"], "falcon": ["query_key_value"]}
HF_LOSS = ("F.cross_entropy(logits.view(B*S, V), target.view(B*S)), mean; logits = output[0].float() "
           "[B,S,V]; target (B,S) int64 uniform in [0,V) (independent of the input tokens); "
           "the output tuple (logits, per-layer key/value cache) is held until `del out`")
HF_LOSS_T5 = ("F.cross_entropy(logits.view(B*T, V), labels.view(B*T)), mean, as "
              "T5ForConditionalGeneration computes it (CrossEntropyLoss(ignore_index=-100), no "
              "-100 labels); logits = output[0] [B,T,V]; labels (B,T) int64 uniform in [0,V); "
              "decoder_input_ids = _shift_right(labels), made with the inputs; the output tuple "
              "(logits, past_key_values, encoder_last_hidden_state) is held until `del out`")
HF_LOSS_IMAGE = ("F.cross_entropy(logits[B,num_labels], labels[B] int64 in [0,num_labels)), mean "
                 "(ViTForImageClassification's single_label_classification loss)")

LOSSES = {
    "resnet50": "F.cross_entropy(logits[B,1000], target[B] int64 in [0,1000)), mean",
    "vgg16": "F.cross_entropy(logits[B,1000], target[B] int64 in [0,1000)), mean",
    "inception_v3": "F.cross_entropy(logits[B,1000], target[B]), mean; main output only "
                    "(train-mode forward returns InceptionOutputs(logits, aux_logits); aux_logits "
                    "is computed but not in the loss, so its branch is not back-propagated and its "
                    "graph/saved tensors stay alive until the output is deleted at iteration end)",
    "inception_v3+aux": "F.cross_entropy(logits, target) + 0.4 * F.cross_entropy(aux_logits, target), "
                        "both mean (both outputs back-propagated)",
    "lstm_lm": "F.cross_entropy(output.view(S*B,10000), target.view(S*B)), mean; target (S,B) int64 "
               "uniform in [0,10000) (independent of the input tokens)",
    "bert_encoder": "loss = output.sum() + pooled.sum() (output [B,S,768], pooled [B,768]; "
                    "no extra head)",
}

# --------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------


class rf:
    """A profiler range like torch.profiler.record_function, minus its tensor handle:
    record_function allocates torch.zeros(1) plus a 288-byte handle, which would show up
    as allocation events; the ScriptObject-returning _new op allocates nothing."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.h = torch.ops.profiler._record_function_enter_new(self.name, None)

    def __exit__(self, *exc):
        torch.ops.profiler._record_function_exit._RecordFunction(self.h)
        self.h = None


def make_configs():
    cfgs = []
    for model, fam in FAMILIES.items():
        for b in fam["batches"]:
            base = dict(model=model, batch=b, seq=fam.get("seq"), image=fam.get("image"))
            runs = [("inference", None, "none"),
                    ("train", "sgd-momentum", "none"),
                    ("train", "adam", "none")]
            # Variants at the two smallest batch sizes only (CPU time).
            if b in fam["batches"][:2]:
                runs += [("train", "sgd-momentum", "grad-accum-2"),
                         ("train", "sgd-momentum", "checkpoint")]
                if model == "inception_v3":
                    runs.append(("train", "sgd-momentum", "aux-loss"))
            for mode, opt, variant in runs:
                c = dict(base, mode=mode, optimizer=opt, variant=variant)
                tag = "infer" if mode == "inference" else "train-" + ("sgd" if opt == "sgd-momentum" else "adam")
                parts = [model, tag, f"b{b}"]
                if c["seq"]:
                    parts.append(f"s{c['seq']}")
                if variant != "none":
                    parts.append(variant)
                c["id"] = "-".join(parts)
                cfgs.append(c)
    for model, hf in HF_MODELS.items():
        for b in hf["batches"]:
            for mode, opt, variant in (("inference", None, "none"), ("train", "sgd-momentum", "none"),
                                       ("train", "adam", "none"), ("train", "adam", "lora"),
                                       ("train", "adam", "bf16"), ("train", "adam", "lora-bf16")):
                # LoRA: every family but Qwen3 (Llama's) and the MoE models; bf16: the Llama
                # family and the MoE models, and without LoRA the decoders whose eager softmax
                # runs in float32 or the run's dtype (BF16_ONLY)
                if (variant.startswith("lora") and model in ("tiny-qwen3",) + MOE_MODELS) or \
                        (variant.endswith("bf16") and
                         model not in ("tiny-llama-gqa", "tiny-qwen3") + MOE_MODELS and
                         not (variant == "bf16" and model in BF16_ONLY)) or \
                        (model in AUX_MODELS and mode == "inference") or \
                        (model in LONG_BF16 and variant != "bf16"):
                    continue
                tag = "infer" if mode == "inference" else "train-" + ("sgd" if opt == "sgd-momentum" else "adam")
                image = None
                if hf.get("image"):
                    with open(os.path.join(ROOT, hf["config"])) as f:
                        image = json.load(f).get("image_size", 224)
                dims = f"i{image}" if image else f"s{hf['seq']}"
                if hf.get("target_seq"):
                    dims += f"-t{hf['target_seq']}"
                c = dict(model=model, hf_config=hf["config"], batch=b, seq=hf.get("seq"),
                         image=image, mode=mode, optimizer=opt, variant=variant,
                         id=f"{model}-{tag}-b{b}-{dims}"
                            + ("" if variant == "none" else "-" + variant))
                if hf.get("target_seq"):
                    c["target_seq"] = hf["target_seq"]
                cfgs.append(c)
        if model in GEN_MODELS or model in GEN_GPT2_MODELS:
            for n in GEN_NEW_TOKENS:
                cfgs.append(dict(model=model, hf_config=hf["config"], batch=GEN_BATCH,
                                 seq=GEN_PROMPT, image=None, mode="generate", optimizer=None,
                                 variant="none", new_tokens=n,
                                 id=f"{model}-generate-b{GEN_BATCH}-p{GEN_PROMPT}-n{n}"))
        if model in GEN_T5_MODELS:
            for n in GEN_T5_NEW_TOKENS:
                cfgs.append(dict(model=model, hf_config=hf["config"], batch=GEN_BATCH,
                                 seq=GEN_PROMPT, image=None, mode="generate", optimizer=None,
                                 variant="none", new_tokens=n,
                                 id=f"{model}-generate-b{GEN_BATCH}-p{GEN_PROMPT}-n{n}"))
        for n in GEN_NEW_TOKENS:
            if model in BEAM_MODELS:
                for k in BEAM_SIZES:
                    if n == GEN_NEW_TOKENS[2] and (model, k) not in BEAM_LONG:
                        continue
                    cfgs.append(dict(model=model, hf_config=hf["config"], batch=GEN_BATCH,
                                     seq=GEN_PROMPT, image=None, mode="generate", optimizer=None,
                                     variant="none", new_tokens=n, num_beams=k,
                                     id=f"{model}-generate-b{GEN_BATCH}-p{GEN_PROMPT}-n{n}-beams{k}"))
            if model in SAMPLE_MODELS:
                for top_k, top_p, temp in SAMPLE_RUNS:
                    if n == GEN_NEW_TOKENS[2] and (model not in SAMPLE_LONG or temp != 1.0):
                        continue
                    tag = f"k{top_k}" + (f"-p{top_p:g}" if top_p < 1.0 else "") + \
                          (f"-t{temp:g}" if temp != 1.0 else "")
                    cfgs.append(dict(model=model, hf_config=hf["config"], batch=GEN_BATCH,
                                     seq=GEN_PROMPT, image=None, mode="generate", optimizer=None,
                                     variant="none", new_tokens=n, do_sample=True, top_k=top_k,
                                     top_p=top_p, temperature=temp,
                                     id=f"{model}-generate-b{GEN_BATCH}-p{GEN_PROMPT}-n{n}-sample-{tag}"))
    for model, hy in HYBRID_GEN.items():
        for b, p, n in hy["runs"]:
            cfgs.append(dict(model=model, hf_config=hy["config"], batch=b, seq=p, image=None,
                             mode="generate", optimizer=None, variant="none", new_tokens=n,
                             id=f"{model}-generate-b{b}-p{p}-n{n}"))
    return cfgs


def hf_config(cfg):
    with open(os.path.join(ROOT, cfg["hf_config"])) as f:
        return json.load(f)


# --------------------------------------------------------------------------
# Model set-up
# --------------------------------------------------------------------------


class Checkpointed(nn.Module):
    """Runs `inner` under torch.utils.checkpoint.checkpoint (1.13 defaults:
    use_reentrant=True, preserve_rng_state=True)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return tuc.checkpoint(self.inner, *args)


def apply_checkpointing(name, model):
    """Wrap every block in Checkpointed; returns a description of what was wrapped."""
    if name == "resnet50":
        for n in ("layer1", "layer2", "layer3", "layer4"):
            setattr(model, n, Checkpointed(getattr(model, n)))
        return ("layer1..layer4 (each a whole Bottleneck stage) checkpointed; stem "
                "(conv1,bn1,relu,maxpool) and avgpool/flatten/fc not")
    if name == "vgg16":
        blocks, cur = [], []
        for m in model.features:
            cur.append(m)
            if isinstance(m, nn.MaxPool2d):
                blocks.append(nn.Sequential(*cur))
                cur = []
        assert not cur and len(blocks) == 5
        # Block 1's input (the image) does not require grad; with reentrant
        # checkpointing its parameters would then get no gradient, so it is
        # left un-checkpointed.
        model.features = nn.Sequential(blocks[0], *[Checkpointed(b) for b in blocks[1:]])
        return ("features split at each MaxPool into 5 blocks (conv..conv,maxpool); blocks 2-5 "
                "checkpointed, block 1 not (its input needs no grad: reentrant checkpoint would "
                "drop its parameter grads); avgpool/classifier not")
    if name == "inception_v3":
        names = ["Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c",
                 "Mixed_6d", "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c"]
        for n in names:
            setattr(model, n, Checkpointed(getattr(model, n)))
        return ("each of the 11 Mixed_* blocks checkpointed; stem convs/pools, AuxLogits, "
                "avgpool/dropout/fc not")
    if name == "lstm_lm":
        for i in range(len(model.rnn)):
            model.rnn[i] = Checkpointed(model.rnn[i])
        return "each of the 2 nn.LSTM layers checkpointed; embedding, dropouts, decoder not"
    if name == "bert_encoder":
        for i in range(len(model.layers)):
            model.layers[i] = Checkpointed(model.layers[i])
        return "each of the 12 BertLayer checkpointed; embeddings(+LayerNorm,dropout), pooler not"
    raise ValueError(name)


def make_inputs(cfg, n_sets):
    """Input/target tensors for n_sets micro-batches (drawn after manual_seed(1))."""
    torch.manual_seed(1)
    b, name = cfg["batch"], cfg["model"]
    sets = []
    for _ in range(n_sets):
        if cfg.get("hf_config") and cfg.get("image"):
            hc = hf_config(cfg)
            labels = len(hc["id2label"]) if hc.get("id2label") else hc.get("num_labels", 2)
            s = cfg["image"]
            x = torch.randn(b, hc.get("num_channels", 3), s, s)
            y = torch.randint(0, labels, (b,), dtype=torch.long)
        elif cfg.get("hf_config") and cfg.get("target_seq"):
            hc = hf_config(cfg)
            v = hc["vocab_size"]
            ids = torch.randint(0, v, (b, cfg["seq"]), dtype=torch.long)
            y = torch.randint(0, v, (b, cfg["target_seq"]), dtype=torch.long)
            x = (ids, hf_torch.t5_shift_right(y, hc))  # model(input_ids, decoder_input_ids)
        elif cfg.get("hf_config"):
            v = hf_config(cfg)["vocab_size"]
            x = torch.randint(0, v, (b, cfg["seq"]), dtype=torch.long)
            y = torch.randint(0, v, (b, cfg["seq"]), dtype=torch.long)
        elif name in ("resnet50", "vgg16", "inception_v3"):
            s = cfg["image"]
            x = torch.randn(b, 3, s, s)
            y = torch.randint(0, 1000, (b,), dtype=torch.long)
        elif name == "lstm_lm":
            x = torch.randint(0, 10000, (cfg["seq"], b), dtype=torch.long)
            y = torch.randint(0, 10000, (cfg["seq"], b), dtype=torch.long)
        elif name == "bert_encoder":
            x = torch.randint(0, 30522, (b, cfg["seq"]), dtype=torch.long)
            y = None
        sets.append((x, y))
    return sets


def compute_loss(cfg, out, y):
    name = cfg["model"]
    if cfg.get("hf_config"):
        logits = out[0].float()  # ForCausalLMLoss; a no-op on a float32 model
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        if isinstance(out, tuple) and len(out) == 3:  # output_router_logits: + coef * aux
            hc = hf_config(cfg)
            experts = hc.get("num_local_experts", hc.get("num_experts"))
            aux_loss = hf_torch.load_balancing_loss_func(out[2], experts, hc["num_experts_per_tok"])
            loss += hc.get("router_aux_loss_coef", 0.001) * aux_loss.to(loss.device)
        return loss
    if name in ("resnet50", "vgg16"):
        return F.cross_entropy(out, y)
    if name == "inception_v3":
        if cfg["variant"] == "aux-loss":
            return F.cross_entropy(out.logits, y) + 0.4 * F.cross_entropy(out.aux_logits, y)
        return F.cross_entropy(out.logits, y)
    if name == "lstm_lm":
        return F.cross_entropy(out.view(-1, out.size(-1)), y.view(-1))
    if name == "bert_encoder":
        seq_out, pooled = out
        return seq_out.sum() + pooled.sum()
    raise ValueError(name)


# --------------------------------------------------------------------------
# Measurement helpers
# --------------------------------------------------------------------------


def _call(obj, name, default=None):
    """obj.name() or obj.name (API differs between torch versions)."""
    v = getattr(obj, name, default)
    return v() if callable(v) else v


def storage_key(t):
    st = t.storage()
    return st.data_ptr(), st.nbytes()


def live_tensor_storages():
    """{data_ptr: nbytes} of every distinct CPU storage reachable from a live torch.Tensor."""
    gc.collect()
    seen = {}
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and o.device.type == "cpu" and not o.is_sparse:
                p, n = storage_key(o)
                if n:
                    seen[p] = n
        except Exception:  # noqa: BLE001 - odd tensor subclasses
            pass
    return seen


def unique_bytes(tensors):
    seen = {}
    for t in tensors:
        if t is not None:
            p, n = storage_key(t)
            seen[p] = n
    return sum(seen.values())


ALLOC_HELPERS = {
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::zeros", "aten::zeros_like",
    "aten::ones_like", "aten::ones", "aten::new_empty", "aten::new_empty_strided", "aten::new_zeros",
    "aten::resize_", "aten::full", "aten::full_like", "aten::new_full", "aten::fill_", "aten::zero_",
}


def node_name(n):
    return _call(n, "name", "?")


def node_tag(n):
    return str(_call(n, "tag", ""))


def op_path(node):
    """Names from the phase range (exclusive) down to the allocation (exclusive)."""
    names, phase = [], None
    p = _call(node, "parent")
    while p is not None:
        nm = node_name(p)
        if nm.startswith(PREFIX):
            phase = nm[len(PREFIX):]
            break
        names.append(nm)
        p = _call(p, "parent")
    names.reverse()
    # Drop "autograd::engine::evaluate_function: X" when followed by "X".
    out = []
    for nm in names:
        if out and out[-1].startswith("autograd::engine::evaluate_function: ") and \
                out[-1].endswith(": " + nm):
            out[-1] = nm
        else:
            out.append(nm)
    return phase, out


def describe_op(path):
    """Short label: the outermost op (module-level aten op or backward node) and the innermost
    non-allocator op."""
    if not path:
        return "(python, outside any op)"
    inner = [n for n in path if n not in ALLOC_HELPERS]
    first = path[0]
    last = inner[-1] if inner else path[-1]
    return first if first == last else f"{first} > {last}"


def tree_allocations(kr):
    """Allocation nodes of the event tree in time order: dicts with size, ptr, time, phase, op."""
    roots = kr.experimental_event_tree()
    allocs, stack = [], list(roots)
    ops = []
    while stack:
        n = stack.pop()
        tag = node_tag(n)
        if "Allocation" in tag:
            ef = n.extra_fields
            dev = str(getattr(ef, "device", "cpu"))
            size = int(_call(ef, "alloc_size"))
            if size != 0 and dev.startswith("cpu"):
                phase, path = op_path(n)
                allocs.append(dict(t=int(_call(n, "start_time_ns")), id=int(_call(n, "id")),
                                   size=size, ptr=int(_call(ef, "ptr")), phase=phase,
                                   op=describe_op(path), path=path))
        else:
            ops.append(n)
        stack.extend(_call(n, "children") or [])
    allocs.sort(key=lambda a: (a["t"], a["id"]))
    return allocs, ops


def kineto_memory_events(kr):
    """(start_us, nbytes) of CPU memory events from kineto_results.events(), time-ordered
    (stable sort: events recorded in the same microsecond keep their recorded order)."""
    evs = []
    for i, e in enumerate(kr.events()):
        nb = int(_call(e, "nbytes", 0) or 0)
        if nb == 0:
            continue
        if not str(_call(e, "device_type", "CPU")).endswith("CPU"):
            continue
        evs.append((int(_call(e, "start_us")), i, nb))
    evs.sort()
    return [(t, nb) for t, _, nb in evs]


def count_ops(ops_nodes):
    counts = {}
    for n in ops_nodes:
        nm = node_name(n)
        if nm.startswith("aten::"):
            counts[nm] = counts.get(nm, 0) + 1
    return counts


# --------------------------------------------------------------------------
# One configuration (runs in a forked child)
# --------------------------------------------------------------------------


def run_config(cfg):
    t_wall0 = time.time()
    # gc.get_objects() + isinstance() touches torch.distributed's deprecated attribute.
    warnings.filterwarnings("ignore", message=r"torch\.distributed\.reduce_op")
    torch.set_num_threads(cfg.get("threads", NUM_THREADS))
    name = cfg["model"]
    train = cfg["mode"] == "train"
    variant = cfg["variant"]

    # Model exactly as export_fixtures.export_one builds it (HF: hf_torch from the config).
    torch.manual_seed(0)
    if cfg.get("hf_config"):
        model = hf_torch.build(hf_config(cfg))
    else:
        model = {s["name"]: s for s in export_fixtures.make_specs()}[name]["make"]()
    if variant.endswith("bf16"):  # model.to(torch.bfloat16): parameters and float buffers
        model = model.to(torch.bfloat16)
    if variant.startswith("lora"):  # PEFT's defaults for the architecture, rank 8, dropout 0.05;
        # adapters made after the base's conversion stay float32 (autocast_adapter_dtype)
        targets = LORA_TARGETS[hf_config(cfg)["model_type"]]
        hf_torch.add_lora(model, LORA_R, LORA_ALPHA, LORA_DROPOUT, targets)
    param_bytes = unique_bytes(list(model.parameters()))
    buffer_bytes = unique_bytes(list(model.buffers()))
    ckpt_desc = apply_checkpointing(name, model) if variant == "checkpoint" else None
    model.train(train)

    n_sets = 2 if variant == "grad-accum-2" else 1
    sets = make_inputs(cfg, n_sets)
    if cfg["mode"] == "generate":  # the prompt only
        sets = [(x, None) for x, _ in sets]
    input_bytes = unique_bytes([t for x, _ in sets for t in (x if isinstance(x, tuple) else (x,))])
    target_bytes = unique_bytes([y for _, y in sets if y is not None])

    opt = None
    if cfg["optimizer"] == "sgd-momentum":
        opt = torch.optim.SGD(model.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)
    elif cfg["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR)

    # In-place ReLU facts (module flags; functional relu in inception's BasicConv2d).
    relu_modules = [m for m in model.modules() if isinstance(m, nn.ReLU)]
    relu_inplace_modules = sum(1 for m in relu_modules if m.inplace)
    dropout_modules = sum(1 for m in model.modules() if isinstance(m, nn.Dropout))
    bn_modules = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]

    before_map = live_tensor_storages()
    bytes_before = sum(before_map.values())
    accounted = param_bytes + buffer_bytes + input_bytes + target_bytes

    torch.manual_seed(2)  # dropout / RNG during the measured run
    acts = [ProfilerActivity.CPU]
    with profile(activities=acts, profile_memory=True, record_shapes=False,
                 with_stack=False) as prof:
        if cfg["mode"] == "generate":  # generate() runs under torch.no_grad() itself
            sampling = (hf_torch.sampling_processors(cfg["top_k"], cfg["top_p"], cfg["temperature"])
                        if cfg.get("do_sample") else None)
            out = hf_torch.generate(model, sets[0][0], cfg["new_tokens"],
                                    phase=lambda ph: rf(PREFIX + ph),
                                    num_beams=cfg.get("num_beams", 1), sampling=sampling)
            with rf(PREFIX + "it0/cleanup"):
                del out
        elif not train:
            with torch.no_grad():
                x = sets[0][0]
                with rf(PREFIX + "it0/forward"):
                    out = model(*x) if isinstance(x, tuple) else model(x)
                with rf(PREFIX + "it0/cleanup"):
                    del out
        else:
            for it in range(ITERS):
                p = f"{PREFIX}it{it}/"
                with rf(p + "zero_grad"):
                    opt.zero_grad()  # 1.13 default set_to_none=False
                for mb, (x, y) in enumerate(sets):
                    q = p if n_sets == 1 else f"{p}mb{mb}/"
                    with rf(q + "forward"):
                        out = model(*x) if isinstance(x, tuple) else model(x)
                    with rf(q + "loss"):
                        loss = compute_loss(cfg, out, y)
                        if n_sets > 1:
                            loss = loss / n_sets
                    with rf(q + "backward"):
                        loss.backward()
                    if mb < n_sets - 1:
                        with rf(q + "cleanup"):
                            del out, loss
                with rf(p + "optimizer"):
                    opt.step()
                with rf(p + "cleanup"):
                    del out, loss
    kr = prof.profiler.kineto_results

    # ---- primary curve: kineto events ----
    mem = kineto_memory_events(kr)
    running, peak_rel, peak_idx = 0, 0, -1
    for i, (_, nb) in enumerate(mem):
        running += nb
        if running > peak_rel:
            peak_rel, peak_idx = running, i
    end_rel = running
    trace_start = int(_call(kr, "trace_start_us", 0) or 0)

    # ---- event tree: phases, ops, live blocks ----
    detail = {}
    phases = {}
    tree_ok = False
    try:
        allocs, op_nodes = tree_allocations(kr)
        tree_ok = [a["size"] for a in allocs] == [nb for _, nb in mem]
    except Exception as e:  # noqa: BLE001
        allocs, op_nodes = [], []
        detail["tree_error"] = f"{type(e).__name__}: {e}"

    grad_ptrs = {p.grad.data_ptr() for p in model.parameters() if p.grad is not None}
    state_ptrs = set()
    if opt is not None:
        for st in opt.state.values():
            for v in st.values():
                if torch.is_tensor(v):
                    state_ptrs.add(v.storage().data_ptr())
    grad_bytes_after = unique_bytes([p.grad for p in model.parameters()])
    no_grad_params = [p for p in model.parameters() if p.grad is None]
    state_bytes_after = unique_bytes([v for st in (opt.state.values() if opt else [])
                                      for v in st.values() if torch.is_tensor(v)])

    peak_phase = None
    live_at_peak = []
    if tree_ok:
        running = 0
        live = {}
        cur_phase_order = []
        for i, a in enumerate(allocs):
            running += a["size"]
            ph = a["phase"] or "(outside)"
            if ph not in phases:
                phases[ph] = dict(start_bytes=bytes_before + running - a["size"], peak_bytes=0,
                                  end_bytes=0, events=0)
                cur_phase_order.append(ph)
            d = phases[ph]
            d["peak_bytes"] = max(d["peak_bytes"], bytes_before + running)
            d["end_bytes"] = bytes_before + running
            d["events"] += 1
            if a["size"] > 0:
                live[a["ptr"]] = (i, a)
            else:
                live.pop(a["ptr"], None)
            if i == peak_idx:
                peak_phase = ph
                live_at_peak = [v for _, v in sorted(live.values(), key=lambda t: t[0])]
        # blocks still live at the end (to tell persistent grads/state from temporaries)
        live_end_ids = {a["id"] for _, a in live.values()}

        def label(a):
            if a["id"] in live_end_ids and a["ptr"] in grad_ptrs:
                return "param.grad"
            if a["id"] in live_end_ids and a["ptr"] in state_ptrs:
                return "optimizer.state"
            return "other"

        by_label, by_op, by_phase = {}, {}, {}
        for a in live_at_peak:
            lb = label(a)
            by_label[lb] = by_label.get(lb, 0) + a["size"]
            if lb == "other":
                by_op[a["op"]] = by_op.get(a["op"], 0) + a["size"]
                by_phase[a["phase"] or "(outside)"] = by_phase.get(a["phase"] or "(outside)", 0) + a["size"]
        top = sorted(live_at_peak, key=lambda a: -a["size"])[:TOPK]
        detail["live_at_peak_bytes_by_label"] = by_label
        detail["live_at_peak_other_bytes_by_alloc_phase"] = dict(
            sorted(by_phase.items(), key=lambda kv: -kv[1]))
        detail["live_at_peak_other_bytes_by_op"] = dict(
            sorted(by_op.items(), key=lambda kv: -kv[1])[:25])
        detail["live_at_peak_count"] = len(live_at_peak)
        detail["top_live_at_peak"] = [
            dict(bytes=a["size"], label=label(a), phase=a["phase"], op=a["op"],
                 path=" > ".join(a["path"][-6:])) for a in top]
        top_other = sorted((a for a in live_at_peak if label(a) == "other"),
                           key=lambda a: -a["size"])[:TOPK]
        detail["top_other_live_at_peak"] = [
            dict(bytes=a["size"], phase=a["phase"], op=a["op"],
                 path=" > ".join(a["path"][-6:])) for a in top_other]
        if cfg.get("dump"):
            with open(os.path.join(cfg["dump"], cfg["id"] + ".tsv"), "w") as f:
                f.write("index\tt_ns\tbytes\tlive_abs\tphase\top_path\n")
                run = bytes_before
                for i, a in enumerate(allocs):
                    run += a["size"]
                    f.write(f"{i}\t{a['t'] - allocs[0]['t']}\t{a['size']}\t{run}\t"
                            f"{a['phase']}\t{' > '.join(a['path'])}\n")
        # The event that made the peak.
        pa = allocs[peak_idx] if peak_idx >= 0 else None
        if pa:
            detail["peak_event"] = dict(bytes=pa["size"], phase=pa["phase"], op=pa["op"],
                                        path=" > ".join(pa["path"]))
        # Largest single allocation events of the whole run.
        big = sorted((a for a in allocs if a["size"] > 0), key=lambda a: -a["size"])[:TOPK]
        detail["largest_allocations"] = [dict(bytes=a["size"], phase=a["phase"], op=a["op"])
                                         for a in big]
    else:
        by_label = {}

    ops = count_ops(op_nodes)
    conv_ops = {k: v for k, v in ops.items() if "conv" in k}
    relu_ops = {k: v for k, v in ops.items() if k in ("aten::relu", "aten::relu_")}
    drop_ops = {k: v for k, v in ops.items() if "dropout" in k or "bernoulli" in k}
    detail["conv_ops"] = conv_ops
    detail["relu_ops"] = relu_ops
    detail["dropout_ops"] = drop_ops
    detail["lstm_ops"] = {k: v for k, v in ops.items() if "lstm" in k or "rnn" in k}

    after_map = live_tensor_storages()
    bytes_after = sum(after_map.values())

    if cfg["mode"] == "generate":  # one entry for all decode steps (the row stays short)
        steps = [ph for ph in phases if ph.endswith("/decode")]
        if steps:
            agg = dict(start_bytes=phases[steps[0]]["start_bytes"],
                       peak_bytes=max(phases[ph]["peak_bytes"] for ph in steps),
                       end_bytes=phases[steps[-1]]["end_bytes"],
                       events=sum(phases[ph]["events"] for ph in steps), steps=len(steps))
            phases = {ph: d for ph, d in phases.items() if ph not in steps}
            phases["decode"] = agg

    # Aggregate phase peaks by kind (max over iterations / micro-batches).
    kinds = {}
    for ph, d in phases.items():
        if ph.startswith("("):
            continue
        k = ph.split("/")[-1]
        kinds[k] = max(kinds.get(k, 0), d["peak_bytes"])

    ru = resource.getrusage(resource.RUSAGE_SELF)
    rec = dict(
        id=cfg["id"], model=name,
        fixture=cfg.get("hf_config") or f"tests/models/fixtures/{name}.onnx",
        mode=cfg["mode"], optimizer=cfg["optimizer"],
        optimizer_args=(dict(lr=SGD_LR, momentum=SGD_MOMENTUM, foreach=False)
                        if cfg["optimizer"] == "sgd-momentum" else
                        dict(lr=ADAM_LR, betas=[0.9, 0.999], eps=1e-8, foreach=False)
                        if cfg["optimizer"] == "adam" else None),
        batch=cfg["batch"], seq=cfg["seq"], image=cfg["image"], variant=variant,
        **({"new_tokens": cfg["new_tokens"],
            "generation": ("greedy generate() of transformers 4.51, "
                           + ("HybridCache (cache_implementation \"hybrid\", max_cache_len "
                              "seq + new_tokens - 1, made before the prefill and kept as "
                              "model._cache), "
                              if isinstance(model, hf_torch.Gemma2ForCausalLM) else "DynamicCache, ")
                           + ("logits_to_keep=1, " if "logits_to_keep" in
                              inspect.signature(model.forward).parameters
                              else "every position's logits (the forward takes no "
                                   "logits_to_keep), ")
                           + "attention_mask ones [B, seq]; seq is the "
                           "prompt; new_tokens forwards (the prefill and new_tokens - 1 "
                           "decode steps)")}
           if cfg["mode"] == "generate" else {}),
        **({"target_seq": cfg["target_seq"]} if cfg.get("target_seq") else {}),
        lora=(dict(r=LORA_R, alpha=LORA_ALPHA, dropout=LORA_DROPOUT,
                   targets=LORA_TARGETS[hf_config(cfg)["model_type"]])
              if variant.startswith("lora") else None),
        micro_batches=n_sets, iterations=ITERS if train else 1,
        loss=None if not train else (LOSSES["inception_v3+aux"] if variant == "aux-loss"
                                     else HF_LOSS_T5 if cfg.get("target_seq")
                                     else HF_LOSS_IMAGE if cfg.get("hf_config") and cfg.get("image")
                                     else HF_LOSS if cfg.get("hf_config")
                                     else LOSSES[name]) + (" ; divided by 2 per micro-batch"
                                                           if n_sets > 1 else ""),
        zero_grad_set_to_none=False if train else None,
        checkpoint=ckpt_desc,
        grad_mode="enabled" if train else "torch.no_grad()",
        module_mode="train()" if train else "eval()",
        bytes_before=bytes_before,
        peak_bytes=bytes_before + peak_rel,
        peak_minus_before=peak_rel,
        peak_event_index=peak_idx,
        peak_time_us=(mem[peak_idx][0] - trace_start) if peak_idx >= 0 else None,
        peak_phase=peak_phase,
        memory_events=len(mem),
        end_bytes=bytes_before + end_rel,
        peak_by_phase_kind=kinds,
        phases=phases,
        live_at_peak_grad_bytes=by_label.get("param.grad"),
        live_at_peak_optimizer_state_bytes=by_label.get("optimizer.state"),
        live_at_peak_other_bytes=by_label.get("other"),
        param_bytes=param_bytes, buffer_bytes=buffer_bytes,
        input_bytes=input_bytes, target_bytes=target_bytes,
        bytes_before_unaccounted=bytes_before - accounted,
        grad_bytes_after=grad_bytes_after, optimizer_state_bytes_after=state_bytes_after,
        params_without_grad=len(no_grad_params) if train else None,
        params_without_grad_bytes=unique_bytes(no_grad_params) if train else None,
        live_tensor_bytes_after_gc=bytes_after,
        end_check_ok=(bytes_after == bytes_before + end_rel),
        tree_matches_events=tree_ok,
        relu_modules=len(relu_modules), relu_inplace_modules=relu_inplace_modules,
        relu_functional_inplace=functional_inplace_relu(name),
        relu_ops_observed=relu_ops,
        dropout_modules=dropout_modules, batchnorm_modules=len(bn_modules),
        num_threads=torch.get_num_threads(),
        blas_loaded=loaded_blas(),
        torch_version=torch.__version__, torchvision_version=torchvision.__version__,
        command="/usr/bin/python3 tools/measure_cpu.py",
    )
    if cfg["mode"] == "generate" and cfg["model"] == "tiny-gpt2":
        rec["generation"] = GEN_GPT2_DESC
    elif cfg["mode"] == "generate" and cfg["model"] in GEN_GPT2_MODELS:
        rec["generation"] = GEN_BIOGPT_DESC
    elif cfg["mode"] == "generate" and cfg["model"] in GEN_T5_MODELS:
        rec["generation"] = GEN_T5_DESC
    if cfg.get("num_beams", 1) > 1:
        rec["num_beams"] = cfg["num_beams"]
        rec["generation"] = (
            "beam search generate() of transformers 4.51.3 (num_beams %d, do_sample False, "
            "_beam_search vectorized: running_sequences/sequences [B, num_beams, seq + "
            "new_tokens] int64, running_beam_indices/beam_indices [B, num_beams, new_tokens] "
            "int32; per step logits[:, -1] float32 [B*num_beams, V], log_softmax, + beam "
            "scores, topk of 2*num_beams over [B, num_beams*V], gathers; the cache reordered by "
            "index_select after every forward: %s), input_ids and attention_mask "
            "repeat_interleave'd to B*num_beams; no eos; seq is the prompt; new_tokens forwards"
            % (cfg["num_beams"], "the legacy tuple rebuilt whole (_reorder_cache)"
               if cfg["model"] in GEN_GPT2_MODELS else "DynamicCache.reorder_cache, per layer "
               "keys then values"))
    if cfg.get("do_sample"):
        rec.update(do_sample=True, top_k=cfg["top_k"], top_p=cfg["top_p"],
                   temperature=cfg["temperature"])
        rec["generation"] = (
            "sampling generate() of transformers 4.51 (do_sample True: _sample with the "
            "logits warpers of _get_logits_processor: temperature %g, top_k %d, top_p %g; "
            "softmax, multinomial(num_samples=1)) on %s; no eos; seq is the prompt; new_tokens "
            "forwards" % (cfg["temperature"], cfg["top_k"], cfg["top_p"],
                          "the legacy tuple cache" if cfg["model"] in GEN_GPT2_MODELS
                          else "a DynamicCache"))
    timing = dict(cpu_s=round(ru.ru_utime + ru.ru_stime, 2), wall_s=round(time.time() - t_wall0, 2),
                  max_rss_bytes=ru.ru_maxrss * 1024)
    return rec, detail, timing


def functional_inplace_relu(name):
    """inception_v3's BasicConv2d applies F.relu(x, inplace=True) (no nn.ReLU module)."""
    if name != "inception_v3":
        return False
    import inspect
    import torchvision.models.inception as inc
    return "inplace=True" in inspect.getsource(inc.BasicConv2d.forward)


def loaded_blas():
    """Basename of the BLAS library mapped into this process (speed only; see --blas-dir)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line.split()[-1]}
        return ",".join(sorted(os.path.basename(x) for x in libs)) or None
    except OSError:
        return None


def child(cfg):
    try:
        return cfg["id"], run_config(cfg), None
    except Exception:  # noqa: BLE001
        return cfg["id"], None, traceback.format_exc()


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def mib(x):
    return "-" if x is None else f"{x / 2**20:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "validation"))
    ap.add_argument("--jobs", type=int, default=2, help="configurations measured in parallel "
                    "(each child uses %d intra-op thread)" % NUM_THREADS)
    ap.add_argument("--only", nargs="*", help="config ids, or model names, or substrings")
    ap.add_argument("--threads", type=int, default=NUM_THREADS,
                    help="intra-op threads per config (default %(default)s; the committed file "
                    "uses 1: conv backend choice and so the bytes depend on it)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dump", help="also write every allocation event of each config as "
                    "DIR/<id>.tsv (debugging; not committed)")
    ap.add_argument("--dry", action="store_true", help="do not write files")
    ap.add_argument("--merge", action="store_true", help="keep the rows already in the output "
                    "files: the measured configurations replace their own rows or are appended")
    ap.add_argument("--blas-dir", default=os.environ.get("DNNMEM_BLAS_DIR"),
                    help="folder with a faster libblas.so.3 (e.g. Debian libopenblas0-serial's "
                    "openblas-serial/ extracted anywhere); the tool re-executes itself with "
                    "LD_LIBRARY_PATH set to it.  Speed only: BLAS workspaces are not allocated "
                    "through PyTorch's allocator, so the measured bytes do not depend on it")
    a = ap.parse_args()
    if a.blas_dir and os.environ.get("_DNNMEM_REEXEC") != "1":
        env = dict(os.environ, _DNNMEM_REEXEC="1",
                   LD_LIBRARY_PATH=os.pathsep.join(
                       x for x in (os.path.abspath(a.blas_dir), os.environ.get("LD_LIBRARY_PATH"))
                       if x))
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, env)

    cfgs = make_configs()
    for c in cfgs:
        c["threads"] = a.threads
    if a.dump:
        os.makedirs(a.dump, exist_ok=True)
        for c in cfgs:
            c["dump"] = os.path.abspath(a.dump)
    if a.only:
        cfgs = [c for c in cfgs if any(s == c["model"] or s in c["id"] for s in a.only)]
    if a.list:
        for c in cfgs:
            print(c["id"])
        return
    args, skip = [], False
    for x in sys.argv[1:]:  # drop --out/--dump and their values; hide the BLAS folder
        if skip:
            skip = False
        elif x in ("--out", "--dump"):
            skip = True
        elif not x.startswith(("--out=", "--dump=")):
            args.append("<dir>" if a.blas_dir and x == a.blas_dir else
                        "--blas-dir=<dir>" if x.startswith("--blas-dir=") else x)
    cmd = " ".join(["/usr/bin/python3 tools/measure_cpu.py"] + args)

    t0 = time.time()
    ctx = mp.get_context("fork")
    results, details, errors = {}, {}, {}
    with ctx.Pool(processes=max(1, a.jobs), maxtasksperchild=1) as pool:
        for cid, res, err in pool.imap_unordered(child, cfgs):
            if err:
                errors[cid] = err
                print(f"FAILED {cid}\n{err}", file=sys.stderr, flush=True)
                continue
            rec, det, tm = res
            rec["command"] = cmd
            results[cid], details[cid] = rec, det
            print(f"{cid:48s} peak {mib(rec['peak_bytes']):>9} MiB  before "
                  f"{mib(rec['bytes_before']):>8}  {tm['cpu_s']:6.1f}s cpu  "
                  f"maxrss {mib(tm['max_rss_bytes'])} MiB", file=sys.stderr, flush=True)
    wall = time.time() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru.ru_utime + ru.ru_stime

    order = [c["id"] for c in cfgs if c["id"] in results]
    if not a.dry:
        os.makedirs(a.out, exist_ok=True)
        rows, dets = {}, {}
        if a.merge:  # existing rows first, in their order; measured ones replace or append
            try:
                with open(os.path.join(a.out, OUT_NAME)) as f:
                    for line in f:
                        if line.strip():
                            r = json.loads(line)
                            rows[r["id"]] = line.rstrip("\n")
                with open(os.path.join(a.out, DETAIL_NAME)) as f:
                    dets = json.load(f)
            except FileNotFoundError:
                pass
        for cid in order:
            rows[cid] = json.dumps(results[cid], sort_keys=False)
            dets[cid] = details[cid]
        with open(os.path.join(a.out, OUT_NAME), "w") as f:
            for line in rows.values():
                f.write(line + "\n")
        with open(os.path.join(a.out, DETAIL_NAME), "w") as f:
            json.dump(dets, f, indent=1)
            f.write("\n")

    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{a.threads} thread(s)/config, jobs {a.jobs}")
    print("%-46s %10s %9s %10s %10s %10s %6s %5s" % (
        "id", "peak_MiB", "bef_MiB", "fwd_MiB", "bwd_MiB", "opt_MiB", "phase", "ok"))
    for cid in order:
        r = results[cid]
        k = r["peak_by_phase_kind"]
        ok = "y" if (r["end_check_ok"] and r["tree_matches_events"]
                     and r["bytes_before_unaccounted"] == 0) else "N"
        print("%-46s %10s %9s %10s %10s %10s %6s %5s" % (
            cid, mib(r["peak_bytes"]), mib(r["bytes_before"]), mib(k.get("forward")),
            mib(k.get("backward")), mib(k.get("optimizer")),
            (r["peak_phase"] or "-").split("/")[-1][:6], ok))
    print(f"configs {len(order)} ok, {len(errors)} failed; wall {wall:.1f}s, "
          f"children cpu {cpu:.1f}s")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
