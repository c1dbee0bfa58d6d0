#!/usr/bin/env python3
"""The configurations of the real-transformers CPU oracle (measure.py, compare.py), and the
small versions of real configs.

    python3 tools/hf_oracle/rows.py --write-small   # tests/validation/hf-small/*.json

A small config is a real one of tests/models/hf/ with the same model_type and every
architectural switch kept (rope scaling, tied embeddings, biases, GQA/MQA, softcapping,
parallel residuals, partial rotary, ...), shrunk: 2 layers, 4 heads of the original head size (hidden 4 x head size, or 256
where the config sets head_dim; grouped keys/values kept grouped, one kv head where there
was one; T5's d_kv is its head size), the MLP's (and each expert's and the shared expert's)
ratio to the hidden size kept, every expert kept, DeepSeek's first layer dense and the second
sparse, a vocabulary of 4096, torch_dtype float32, a pad token id only where it is inside
that vocabulary; the head `architectures` names is kept (BertModel,
AlbertForSequenceClassification, ...).  Standard library only (no torch): compare.py
imports it too.

Rows: make_rows() has the first 471 (the causal LMs: RUNS, GEN, LORA_MODELS) unchanged,
then cover_rows(): every other model type of dnnmem's registry (COVER_TINY, COVER_REAL)
in COVER_RUNS, LoRA (COVER_LORA), and generation: greedy for the new decoders and T5,
sampling (SAMPLE, every warper explicit) and 4 beams for the decoders dnnmem models them
for.  Append-only: a new kind of row goes after these, so ids already measured stay.
"""

import json
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SMALL_DIR = "tests/validation/hf-small"

# tests/models/hf/tiny-*.json that real transformers builds as a causal LM
TINY = ("tiny-llama-gqa", "tiny-qwen3", "tiny-gpt2", "tiny-opt", "tiny-neox", "tiny-phi3",
        "tiny-gemma", "tiny-phi", "tiny-falcon", "tiny-gemma2")
# real configs of tests/models/hf/ shrunk into SMALL_DIR as small-<name>.json
REAL = ("Llama-3.2-1B-Instruct", "Qwen2.5-7B-Instruct", "Qwen3-0.6B", "Mistral-7B-Instruct-v0.3",
        "gemma-2b", "gemma-2-9b", "Phi-3-mini-4k-instruct", "phi-2", "falcon-7b", "pythia-160m",
        "opt-125m", "biogpt")
BATCH, SEQ = 2, 128
# (mode, optimizer, precision, attn), in the order measured (a run cut by its deadline has
# the first kinds for every model): eager everywhere; sdpa (which dnnmem refuses on the
# CPU) on Adam training, to record what it costs
RUNS = [("train", "adam", "fp32", "eager"), ("infer", None, "fp32", "eager"),
        ("train", "adam", "bf16", "eager"), ("train", "sgd-momentum", "fp32", "eager"),
        ("infer", None, "bf16", "eager"), ("train", "adam", "fp32", "sdpa")]
GEN = ("tiny-llama-gqa", "tiny-qwen3", "tiny-gpt2", "tiny-opt", "small-Llama-3.2-1B-Instruct",
       "small-Qwen2.5-7B-Instruct")
GEN_PROMPT, GEN_NEW = 64, (16, 48)
# LoRA (PEFT get_peft_model, LoraConfig with PEFT's default target modules per model_type),
# Adam training in fp32, after the rows above
LORA_MODELS = ("tiny-llama-gqa", "tiny-qwen3", "tiny-gpt2", "tiny-opt", "tiny-neox", "tiny-phi3",
               "tiny-gemma", "tiny-phi", "tiny-falcon", "small-Llama-3.2-1B-Instruct",
               "small-Qwen2.5-7B-Instruct", "small-Mistral-7B-Instruct-v0.3")
LORA = dict(r=8, alpha=16, dropout=0.05)
# batch 1 (eager's matmul takes [1, H, S, D] views as they are) and the loop that keeps the
# previous step's outputs (`outputs = model(x)` rebinding only after the next forward
# returns: dnnmem --keep-outputs), fp32 eager, after the rows above
EXTRA_MODELS = ("tiny-llama-gqa", "tiny-gpt2", "tiny-opt", "tiny-neox", "tiny-phi",
                "small-Llama-3.2-1B-Instruct", "small-pythia-160m", "small-opt-125m")
EXTRA_RUNS = [("train", "adam", 1, False), ("infer", None, 1, False),
              ("train", "adam", BATCH, True), ("infer", None, BATCH, True)]

# Every other model_type of dnnmem's registry (src/load/hf/hf.c), each with the head its
# config's `architectures` names (what the CLI builds: BertModel, RobertaForMaskedLM,
# AlbertForSequenceClassification, DistilBertForMaskedLM, T5ForConditionalGeneration,
# ViTForImageClassification, the causal LMs), tiny (tests/models/hf/) and small (a real
# config shrunk as above).  Measured after the rows above, with their own runs (no SGD).
COVER_TINY = ("tiny-mixtral", "tiny-qwen2-moe", "tiny-qwen3-moe", "tiny-deepseek-v2",
              "tiny-deepseek-v3", "tiny-gemma3", "tiny-t5", "tiny-t5-gated", "tiny-vit")
COVER_REAL = ("bert-base-uncased", "roberta-base", "albert-base-v2", "distilbert-base-uncased",
              "t5-small", "vit-base-patch16-224", "Mixtral-8x7B-v0.1", "Qwen3-30B-A3B",
              "DeepSeek-V2-Lite", "DeepSeek-V3")
COVER_RUNS = [("train", "adam", "fp32", "eager"), ("infer", None, "fp32", "eager"),
              ("train", "adam", "bf16", "eager"), ("infer", None, "bf16", "eager"),
              ("train", "adam", "fp32", "sdpa")]
# encoder-decoder rows: the decoder's length (decoder_input_ids [batch, TARGET_SEQ])
TARGET_SEQ = 64
# generation beyond greedy (the decoders on a DynamicCache or legacy tuple cache; dnnmem
# refuses beams on Gemma 2/3's HybridCache): sampling with GenerationConfig's top_k 50
# (explicit: transformers 5 changed generation defaults), and beam search of 4 beams
SAMPLE = dict(do_sample=True, top_k=50, top_p=1.0, temperature=1.0)
BEAMS = 4
COVER_GEN = ("tiny-mixtral", "tiny-qwen2-moe", "tiny-qwen3-moe", "tiny-deepseek-v2",
             "tiny-deepseek-v3", "tiny-gemma3", "tiny-t5")
SAMPLE_GEN = GEN + ("tiny-neox", "tiny-phi3", "tiny-gemma", "tiny-falcon", "tiny-mixtral",
                    "tiny-qwen3-moe", "tiny-gemma2", "tiny-gemma3")
BEAM_GEN = GEN + ("tiny-neox", "tiny-phi3", "tiny-gemma", "tiny-falcon", "tiny-mixtral",
                  "tiny-qwen3-moe")
COVER_NEW = 16
# target modules where PEFT 0.21.2's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING has
# no entry (get_peft_model then raises): the attention's query and value projections,
# passed explicitly (dnnmem gets them as --lora-targets from the row)
LORA_EXPLICIT = {"albert": ["query", "value"], "distilbert": ["q_lin", "v_lin"],
                 "vit": ["query", "value"], "qwen2_moe": ["q_proj", "v_proj"],
                 "qwen3_moe": ["q_proj", "v_proj"], "deepseek_v2": ["q_proj", "v_proj"],
                 "deepseek_v3": ["q_b_proj", "kv_b_proj"], "gpt_oss": ["q_proj", "v_proj"]}
COVER_LORA = ("tiny-mixtral", "tiny-qwen3-moe", "tiny-deepseek-v3", "tiny-gemma3", "tiny-t5",
              "tiny-vit", "small-bert-base-uncased", "small-roberta-base",
              "small-albert-base-v2", "small-distilbert-base-uncased")


# The encoder heads (measure.py --heads, tests/validation/hf-real-heads-cpu.jsonl): small
# versions of these real configs, one per head, the head named in 'architectures' (the
# class prefix is the config's); measured eager (dnnmem refused sdpa on the CPU when they were taken)
HEAD_REAL = ("bert-base-uncased", "roberta-base", "albert-base-v2", "distilbert-base-uncased")
HEAD_CLASS = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert", "distilbert": "DistilBert"}
HEADS = ("ForQuestionAnswering", "ForTokenClassification", "ForMultipleChoice",
         "ForSequenceClassification")
HEAD_LABELS = 5  # token and sequence classification (question answering: 2)
HEAD_CHOICES = 4  # multiple choice: input_ids [batch, 4, seq] (--dim choices=4)
HEAD_RUNS = [("train", "adam", "fp32"), ("infer", None, "fp32"), ("train", "adam", "bf16")]
# decoders with a token-classification and a question-answering head: tiny configs of
# tests/models/hf/ with the head in 'architectures'
HEAD_TINY = ("tiny-llama-gqa", "tiny-qwen3")
HEAD_CLASS.update(llama="Llama", qwen3="Qwen3")
DECODER_HEADS = ("ForTokenClassification", "ForQuestionAnswering", "ForSequenceClassification")


# The families added after the first oracle (measure.py --archs,
# tests/validation/hf-real-archs-cpu.jsonl): their tiny configs, the RUNS above and greedy
# generation (PEFT has no default LoRA targets for them)
ARCH_TINY = ("tiny-granite", "tiny-olmo2", "tiny-starcoder2")
# gpt_oss (transformers 4.55+; measured at 4.56.2 and 5.24.0): its tiny config and the
# GptOssConfig defaults shrunk (every one of the 128 experts kept), after the rows above:
# RUNS without sdpa (GptOssPreTrainedModel._supports_sdpa is False: from_config raises),
# greedy generation, and LoRA on q_proj and v_proj (PEFT 0.21.2 has no default targets
# for gpt_oss).  Every expert gets tokens: the tiny router sends 2 x 128 tokens x top-2 to 4
# experts, the small one 256 x 4 to 128 (the "experts_hit" field records how many)
GPTOSS_TINY, GPTOSS_REAL, GPTOSS_FROM = ("tiny-gpt-oss",), ("gpt-oss-config-defaults",), (4, 55)
# whisper (WhisperForConditionalGeneration; measured at 5.24.0 and 4.56.2, the latter from a
# pip --target copy of transformers 4.56.2 put ahead of the 5.24 venv on PYTHONPATH, with
# huggingface_hub 0.35.3, tokenizers 0.22.1 and requests), after the rows above: its tiny
# config and whisper-tiny shrunk (shrink_whisper), input_features [batch, num_mel_bins,
# 2 * max_source_positions] (3000 frames) and a decoder of WHISPER_SEQ tokens (dnnmem's seq),
# eager and sdpa, inference and Adam / AdamW training, then greedy generation
WHISPER_TINY, WHISPER_REAL, WHISPER_SEQ = ("tiny-whisper",), ("whisper-tiny",), 64
WHISPER_RUNS = [("train", "adam", "fp32", "eager"), ("infer", None, "fp32", "eager"),
                ("train", "adam", "bf16", "eager"), ("infer", None, "bf16", "eager"),
                ("train", "adam", "fp32", "sdpa"), ("infer", None, "fp32", "sdpa"),
                ("train", "adamw", "fp32", "eager")]


def release(version):
    """'4.51.3' -> '4.51' (dnnmem's --transformers X.Y)."""
    return ".".join(version.split(".")[:2])


def dtype_kw(version):
    """from_config's dtype keyword: torch_dtype before 4.56, dtype after."""
    major, minor = (int(x) for x in version.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def models(tiny=TINY, real=REAL):
    out = [(m, f"tests/models/hf/{m}.json") for m in tiny]
    out += [(f"small-{m}", f"{SMALL_DIR}/small-{m}.json") for m in real]
    return out


# releases before 4.51: the model types dnnmem builds there (hf.c's table: gpt_neox and opt
# from 4.40; llama, mistral, gemma and gpt2 from 4.48, the attention interface), and their
# bf16 rows built as from_pretrained(torch_dtype=bfloat16) loads (the
# default dtype set while the modules are made: float32 buffers made with .float(), 4.40-4.44
# GPT-NeoX's rotary caches, stay float32), which dnnmem's --precision bf16 models
LEGACY_TYPES = {(4, 40): ("gpt_neox", "opt"),
                (4, 48): ("gpt_neox", "opt", "llama", "mistral", "gemma", "gpt2")}


def legacy(rel):
    major, minor = (int(x) for x in rel.split(".")[:2])
    return (major, minor) < (4, 51)


def legacy_types(rel):
    v = tuple(int(x) for x in rel.split(".")[:2])
    return LEGACY_TYPES[max((k for k in LEGACY_TYPES if k <= v), default=(4, 40))]


def kind(model_type):
    """How a model is called: causal (input_ids), encoder (input_ids, no cache), seq2seq
    (input_ids, decoder_input_ids) or image (pixel_values)."""
    if model_type in ("bert", "roberta", "albert", "distilbert"):
        return "encoder"
    if model_type == "whisper":  # input_features, decoder_input_ids
        return "speech"
    return {"t5": "seq2seq", "mt5": "seq2seq", "vit": "image"}.get(model_type, "causal")


def shape_tag(base):
    """The id's shape part: -s<seq> (and -t<target> for seq2seq), -i<image> for images."""
    k = kind(base["model_type"])
    if k == "image":
        return f"i{base['image']}"
    return f"s{SEQ}" + (f"-t{TARGET_SEQ}" if k == "seq2seq" else "")


def cover_rows(rel):
    """The rows of the other model types and generation styles (after make_rows' first
    kinds, which stay as they were)."""
    rows, bases = [], {}
    for model, config in models(COVER_TINY, COVER_REAL):
        with open(os.path.join(ROOT, config)) as f:
            d = json.load(f)
        b = dict(release=rel, model=model, model_type=d["model_type"], config=config,
                 batch=BATCH)
        if kind(d["model_type"]) == "seq2seq":
            b["target_seq"] = TARGET_SEQ
        if kind(d["model_type"]) == "image":
            b["image"] = d.get("image_size", 224)
        bases[model] = b
    for mode, opt, prec, attn in COVER_RUNS:
        tag = mode if opt is None else "train-adam"
        for model, b in bases.items():
            r = dict(b, id=f"tf{rel}/{model}-{tag}-b{BATCH}-{shape_tag(b)}-{prec}-{attn}",
                     mode=mode, optimizer=opt, precision=prec, attn=attn)
            if kind(b["model_type"]) != "image":
                r["seq"] = SEQ
            rows.append(r)
    for model, b in bases.items():
        if model in COVER_LORA:
            rows.append(dict(b, id=f"tf{rel}/{model}-train-adam-b{BATCH}-{shape_tag(b)}"
                                   "-fp32-eager-lora", mode="train", optimizer="adam",
                             precision="fp32", attn="eager", lora=LORA,
                             **({} if kind(b["model_type"]) == "image" else {"seq": SEQ})))
    gen_bases = dict(bases)
    for model, config in models():
        with open(os.path.join(ROOT, config)) as f:
            gen_bases[model] = dict(release=rel, model=model, config=config, batch=BATCH,
                                    model_type=json.load(f)["model_type"])
    gens = [(m, "generate", {}) for m in COVER_GEN]
    gens += [(m, "generate-sample", dict(sample=SAMPLE)) for m in SAMPLE_GEN]
    gens += [(m, f"generate-beam{BEAMS}", dict(num_beams=BEAMS)) for m in BEAM_GEN]
    for model, tag, extra in gens:
        b = gen_bases[model]
        rows.append(dict(b, id=f"tf{rel}/{model}-{tag}-b{BATCH}-p{GEN_PROMPT}-n{COVER_NEW}"
                               "-fp32-eager", mode="generate", optimizer=None, seq=GEN_PROMPT,
                         new_tokens=COVER_NEW, precision="fp32", attn="eager", **extra))
    return rows


def make_rows(rel):
    rows, bases = [], []
    for model, config in models():
        with open(os.path.join(ROOT, config)) as f:
            mt = json.load(f)["model_type"]
        if legacy(rel) and mt not in legacy_types(rel):
            continue
        bases.append(dict(release=rel, model=model, model_type=mt, config=config, batch=BATCH))
    for mode, opt, prec, attn in RUNS:
        tag = mode if opt is None else "train-" + ("sgd" if opt.startswith("sgd") else "adam")
        for base in bases:
            model = base["model"]
            rows.append(dict(base, id=f"tf{rel}/{model}-{tag}-b{BATCH}-s{SEQ}-{prec}-{attn}",
                             mode=mode, optimizer=opt, seq=SEQ, precision=prec, attn=attn,
                             **({"load": "torch_dtype"} if legacy(rel) and prec != "fp32"
                                else {})))
    for base in bases:
        model = base["model"]
        if model in GEN:
            for n in GEN_NEW:
                rows.append(dict(base, id=f"tf{rel}/{model}-generate-b{BATCH}-p{GEN_PROMPT}-n{n}"
                                          "-fp32-eager", mode="generate", optimizer=None,
                                 seq=GEN_PROMPT, new_tokens=n, precision="fp32", attn="eager"))
    for base in bases:  # peft 0.21 does not import with the releases before 4.51
        if base["model"] in LORA_MODELS and not legacy(rel):
            rows.append(dict(base, id=f"tf{rel}/{base['model']}-train-adam-b{BATCH}-s{SEQ}-fp32-eager"
                                      "-lora", mode="train", optimizer="adam", seq=SEQ,
                             precision="fp32", attn="eager", lora=LORA))
    for mode, opt, b, keep in EXTRA_RUNS:
        tag = mode if opt is None else "train-adam"
        for base in bases:
            if base["model"] in EXTRA_MODELS:
                rows.append(dict(base, batch=b, id=f"tf{rel}/{base['model']}-{tag}-b{b}-s{SEQ}"
                                 f"-fp32-eager{'-keep' if keep else ''}", mode=mode,
                                 optimizer=opt, seq=SEQ, precision="fp32", attn="eager",
                                 **({"keep_outputs": True} if keep else {})))
    return rows + ([] if legacy(rel) else cover_rows(rel))


def make_arch_rows(rel):
    rows = []
    for mode, opt, prec, attn in RUNS:
        tag = mode if opt is None else "train-" + ("sgd" if opt.startswith("sgd") else "adam")
        for model in ARCH_TINY:
            config = f"tests/models/hf/{model}.json"
            with open(os.path.join(ROOT, config)) as f:
                mt = json.load(f)["model_type"]
            rows.append(dict(release=rel, model=model, model_type=mt, config=config, batch=BATCH,
                             id=f"tf{rel}/{model}-{tag}-b{BATCH}-s{SEQ}-{prec}-{attn}",
                             mode=mode, optimizer=opt, seq=SEQ, precision=prec, attn=attn))
    for model in ARCH_TINY:
        config = f"tests/models/hf/{model}.json"
        with open(os.path.join(ROOT, config)) as f:
            mt = json.load(f)["model_type"]
        n = GEN_NEW[0]
        rows.append(dict(release=rel, model=model, model_type=mt, config=config, batch=BATCH,
                         id=f"tf{rel}/{model}-generate-b{BATCH}-p{GEN_PROMPT}-n{n}-fp32-eager",
                         mode="generate", optimizer=None, seq=GEN_PROMPT, new_tokens=n,
                         precision="fp32", attn="eager"))
    return rows + gptoss_rows(rel) + whisper_rows(rel)


# Mamba (src/load/hf/mamba.c: the torch slow path, no mamba_ssm / causal_conv1d kernels):
# fp32 training (Adam, SGD with momentum) and inference at a few batch sizes and lengths
MAMBA_TINY = ("tiny-mamba", "tiny-mamba-untied", "tiny-mamba-wide")
MAMBA_SHAPES = ((2, 128), (1, 64), (4, 32))
MAMBA_RUNS = [("train", "adam"), ("train", "sgd-momentum"), ("infer", None)]
# and training with gradient checkpointing (transformers' activation_checkpointing_enable,
# every MambaBlock): the layers it wraps, as dnnmem's --checkpoint names them
MAMBA_GC = "/backbone/layers.*"


def mamba_rows(rel):
    """mamba's rows (MAMBA_*; measure.py --mamba, tests/validation/hf-real-mamba-cpu.jsonl)."""
    rows = []
    for model in MAMBA_TINY:
        config = f"tests/models/hf/{model}.json"
        for batch, seq in MAMBA_SHAPES:
            for mode, opt in MAMBA_RUNS:
                tag = mode if opt is None else "train-" + ("sgd" if opt.startswith("sgd") else "adam")
                rows.append(dict(release=rel, model=model, model_type="mamba", config=config,
                                 batch=batch, id=f"tf{rel}/{model}-{tag}-b{batch}-s{seq}-fp32-eager",
                                 mode=mode, optimizer=opt, seq=seq, precision="fp32",
                                 attn="eager"))
    for r in [r for r in rows if r["mode"] == "train"]:
        rows.append(dict(r, id=r["id"].replace("-b", "-gc-b", 1), checkpoint=MAMBA_GC))
    return rows


DEEPSEEK_NEW = (("tiny-deepseek-v2-b", "deepseek_v2"), ("tiny-deepseek-v3-b", "deepseek_v3"))
DEEPSEEK_RUNS = (("infer", None, "fp32", "eager"), ("infer", None, "bf16", "eager"),
                 ("train", "adam", "fp32", "eager"), ("train", "adam", "bf16", "eager"),
                 ("train", "adam", "fp32", "sdpa"), ("infer", None, "fp32", "sdpa"))
DEEPSEEK_GEN = ((64, 16), (8, 480))  # (prompt, new tokens): 480 tokens after 8, the decode steps' peak


def deepseek_rows(rel):
    """DeepSeek's rows of issue 14 (measure.py --deepseek, tests/validation/
    hf-real-deepseek-cpu.jsonl): two configs of other dims than the tiny ones (DEEPSEEK_NEW)
    in DEEPSEEK_RUNS and DEEPSEEK_GEN, and the tiny V2/V3 in decode-heavy generation."""
    rows = []
    for model, mt in DEEPSEEK_NEW:
        base = dict(release=rel, model=model, model_type=mt, config=f"tests/models/hf/{model}.json",
                    batch=BATCH)
        for mode, opt, prec, attn in DEEPSEEK_RUNS:
            tag = mode if opt is None else "train-adam"
            rows.append(dict(base, id=f"tf{rel}/{model}-{tag}-b{BATCH}-s{SEQ}-{prec}-{attn}",
                             mode=mode, optimizer=opt, seq=SEQ, precision=prec, attn=attn))
        for p, n in DEEPSEEK_GEN:
            rows.append(dict(base, id=f"tf{rel}/{model}-generate-b{BATCH}-p{p}-n{n}-fp32-eager",
                             mode="generate", optimizer=None, seq=p, new_tokens=n,
                             precision="fp32", attn="eager"))
    p, n = DEEPSEEK_GEN[1]
    for model, mt in (("tiny-deepseek-v2", "deepseek_v2"), ("tiny-deepseek-v3", "deepseek_v3")):
        rows.append(dict(release=rel, model=model, model_type=mt,
                         config=f"tests/models/hf/{model}.json", batch=BATCH,
                         id=f"tf{rel}/{model}-generate-b{BATCH}-p{p}-n{n}-fp32-eager",
                         mode="generate", optimizer=None, seq=p, new_tokens=n, precision="fp32",
                         attn="eager"))
    return rows


def whisper_rows(rel):
    """whisper's rows (WHISPER_*): seq is the decoder's length."""
    rows = []
    for model, config in models(WHISPER_TINY, WHISPER_REAL):
        b = dict(release=rel, model=model, model_type="whisper", config=config, batch=BATCH)
        for mode, opt, prec, attn in WHISPER_RUNS:
            tag = mode if opt is None else "train-" + opt
            rows.append(dict(b, id=f"tf{rel}/{model}-{tag}-b{BATCH}-s{WHISPER_SEQ}-{prec}-{attn}",
                             mode=mode, optimizer=opt, seq=WHISPER_SEQ, precision=prec,
                             attn=attn))
    # then greedy generation: generate(input_features, max_new_tokens=COVER_NEW), the decoder
    # started from [batch, 1] decoder_start_token_id (no seq: the prompt is the audio)
    for model, config in models(WHISPER_TINY, WHISPER_REAL):
        rows.append(dict(release=rel, model=model, model_type="whisper", config=config,
                         batch=BATCH, id=f"tf{rel}/{model}-generate-b{BATCH}-n{COVER_NEW}-fp32-eager",
                         mode="generate", optimizer=None, new_tokens=COVER_NEW,
                         precision="fp32", attn="eager"))
    for model, config in models(WHISPER_TINY, WHISPER_REAL):  # and with sdpa (no scores)
        rows.append(dict(release=rel, model=model, model_type="whisper", config=config,
                         batch=BATCH, id=f"tf{rel}/{model}-generate-b{BATCH}-n{COVER_NEW}-fp32-sdpa",
                         mode="generate", optimizer=None, new_tokens=COVER_NEW,
                         precision="fp32", attn="sdpa"))
    return rows


def gptoss_rows(rel):
    """gpt_oss's rows (GPTOSS_*), for the releases that have it."""
    if tuple(int(x) for x in rel.split(".")[:2]) < GPTOSS_FROM:
        return []
    rows = []
    for model, config in models(GPTOSS_TINY, GPTOSS_REAL):
        b = dict(release=rel, model=model, model_type="gpt_oss", config=config, batch=BATCH)
        for mode, opt, prec, attn in RUNS:
            if attn == "sdpa":
                continue
            tag = mode if opt is None else "train-" + ("sgd" if opt.startswith("sgd") else "adam")
            rows.append(dict(b, id=f"tf{rel}/{model}-{tag}-b{BATCH}-s{SEQ}-{prec}-{attn}",
                             mode=mode, optimizer=opt, seq=SEQ, precision=prec, attn=attn))
        rows.append(dict(b, id=f"tf{rel}/{model}-generate-b{BATCH}-p{GEN_PROMPT}-n{GEN_NEW[0]}"
                               "-fp32-eager", mode="generate", optimizer=None, seq=GEN_PROMPT,
                         new_tokens=GEN_NEW[0], precision="fp32", attn="eager"))
        rows.append(dict(b, id=f"tf{rel}/{model}-train-adam-b{BATCH}-s{SEQ}-fp32-eager-lora",
                         mode="train", optimizer="adam", seq=SEQ, precision="fp32",
                         attn="eager", lora=LORA))
    # then sampling and beam search on the tiny config, and the loop that keeps the previous
    # step's outputs (--keep-outputs)
    b = dict(release=rel, model="tiny-gpt-oss", model_type="gpt_oss", batch=BATCH,
             config="tests/models/hf/tiny-gpt-oss.json")
    for tag, extra in (("generate-sample", dict(sample=SAMPLE)),
                       (f"generate-beam{BEAMS}", dict(num_beams=BEAMS))):
        rows.append(dict(b, id=f"tf{rel}/tiny-gpt-oss-{tag}-b{BATCH}-p{GEN_PROMPT}-n{COVER_NEW}"
                               "-fp32-eager", mode="generate", optimizer=None, seq=GEN_PROMPT,
                         new_tokens=COVER_NEW, precision="fp32", attn="eager", **extra))
    for mode, opt in (("train", "adam"), ("infer", None)):
        tag = mode if opt is None else "train-adam"
        rows.append(dict(b, id=f"tf{rel}/tiny-gpt-oss-{tag}-b{BATCH}-s{SEQ}-fp32-eager-keep",
                         mode=mode, optimizer=opt, seq=SEQ, precision="fp32", attn="eager",
                         keep_outputs=True))
    return rows


TRAINER_OPT_MODELS = (("tiny-llama-gqa", "tests/models/hf/tiny-llama-gqa.json", None),
                      ("small-bert-base-uncased-TokenClassification",
                       f"{SMALL_DIR}/small-bert-base-uncased-TokenClassification.json",
                       "ForTokenClassification"))


def head_models():
    out = []
    for m in HEAD_REAL:
        for head in HEADS:
            out.append((f"small-{m}-{head[3:]}", f"{SMALL_DIR}/small-{m}-{head[3:]}.json", head))
    for m in HEAD_TINY:
        for head in DECODER_HEADS:
            out.append((f"{m}-{head[3:]}", f"{SMALL_DIR}/{m}-{head[3:]}.json", head))
    return out


def with_head(d, head):
    """A decoder's tiny config with `head` in its architectures."""
    d = dict(d)
    d["architectures"] = [HEAD_CLASS[d["model_type"]] + head]
    if head in ("ForTokenClassification", "ForSequenceClassification"):
        d["num_labels"] = HEAD_LABELS
    if head == "ForSequenceClassification":  # batches above 1 need it (last non-pad token)
        d["pad_token_id"] = 0
    return d


def make_head_rows(rel):
    rows = []
    for mode, opt, prec in HEAD_RUNS:
        tag = mode if opt is None else "train-" + opt
        for model, config, head in head_models():
            with open(os.path.join(ROOT, config)) as f:
                mt = json.load(f)["model_type"]
            r = dict(release=rel, model=model, model_type=mt, config=config, batch=BATCH,
                     head=head, id=f"tf{rel}/{model}-{tag}-b{BATCH}-s{SEQ}-{prec}-eager",
                     mode=mode, optimizer=opt, seq=SEQ, precision=prec, attn="eager")
            if head == "ForMultipleChoice":
                r["choices"] = HEAD_CHOICES
            rows.append(r)
    # the Trainer's optimizers: torch.optim.AdamW (adamw_torch) and AdamW(fused=True)
    # (adamw_torch_fused, its default from 4.54 on PyTorch 2.8+)
    for model, config, head in TRAINER_OPT_MODELS:
        with open(os.path.join(ROOT, config)) as f:
            mt = json.load(f)["model_type"]
        for opt in ("adamw", "adamw-fused"):
            r = dict(release=rel, model=model, model_type=mt, config=config, batch=BATCH,
                     id=f"tf{rel}/{model}-train-{opt}-b{BATCH}-s{SEQ}-fp32-eager", mode="train",
                     optimizer=opt, seq=SEQ, precision="fp32", attn="eager")
            if head:
                r["head"] = head
            rows.append(r)
    return rows


# The other decoders' task heads (measure.py --decoder-heads,
# tests/validation/hf-real-decoder-heads-cpu.jsonl): each type's heads as transformers 5.24
# has them (the classes of its modeling file: OPT has no ForTokenClassification; Phi, Phi-3,
# Gemma and Gemma 2 no ForQuestionAnswering), on its tiny config (Mistral's and Qwen2's:
# their small configs), the head in 'architectures'; AdamW training and inference in fp32,
# eager, then AdamW training under sdpa
DECODER_HEAD_MODELS = (
    ("tests/models/hf", "tiny-gpt2", DECODER_HEADS),
    ("tests/models/hf", "tiny-opt", ("ForQuestionAnswering", "ForSequenceClassification")),
    ("tests/models/hf", "tiny-neox", DECODER_HEADS),
    ("tests/models/hf", "tiny-falcon", DECODER_HEADS),
    ("tests/models/hf", "tiny-phi", ("ForTokenClassification", "ForSequenceClassification")),
    ("tests/models/hf", "tiny-phi3", ("ForTokenClassification", "ForSequenceClassification")),
    ("tests/models/hf", "tiny-gemma", ("ForTokenClassification", "ForSequenceClassification")),
    ("tests/models/hf", "tiny-gemma2", ("ForTokenClassification", "ForSequenceClassification")),
    (SMALL_DIR, "small-Mistral-7B-Instruct-v0.3", DECODER_HEADS),
    (SMALL_DIR, "small-Qwen2.5-7B-Instruct", DECODER_HEADS),
    # then StarCoder2 and the MoE decoders (generic classes in 4.56.2 and 5.24.0)
    ("tests/models/hf", "tiny-starcoder2", ("ForTokenClassification", "ForSequenceClassification")),
    ("tests/models/hf", "tiny-mixtral", DECODER_HEADS),
    ("tests/models/hf", "tiny-qwen2-moe", DECODER_HEADS),
    ("tests/models/hf", "tiny-qwen3-moe", DECODER_HEADS))
HEAD_CLASS.update(gpt2="GPT2", opt="OPT", gpt_neox="GPTNeoX", falcon="Falcon", phi="Phi",
                  phi3="Phi3", gemma="Gemma", gemma2="Gemma2", mistral="Mistral", qwen2="Qwen2",
                  starcoder2="Starcoder2", mixtral="Mixtral", qwen2_moe="Qwen2Moe",
                  qwen3_moe="Qwen3Moe")
DECODER_HEAD_RUNS = [("train", "adamw", "eager"), ("infer", None, "eager"),
                     ("train", "adamw", "sdpa")]


def make_decoder_head_rows(rel):
    rows = []
    for mode, opt, attn in DECODER_HEAD_RUNS:
        tag = mode if opt is None else "train-" + opt
        for _, m, heads in DECODER_HEAD_MODELS:
            for head in heads:
                model, config = f"{m}-{head[3:]}", f"{SMALL_DIR}/{m}-{head[3:]}.json"
                with open(os.path.join(ROOT, config)) as f:
                    mt = json.load(f)["model_type"]
                rows.append(dict(release=rel, model=model, model_type=mt, config=config,
                                 batch=BATCH, head=head, mode=mode, optimizer=opt, seq=SEQ,
                                 precision="fp32", attn=attn,
                                 id=f"tf{rel}/{model}-{tag}-b{BATCH}-s{SEQ}-fp32-{attn}"))
    return rows


def shrink_encoder(d, head):
    """An encoder config shrunk as shrink() does (2 layers, 4 heads of 64, vocabulary 4096),
    with `head` in its architectures."""
    d = dict(d)
    for k in ("id2label", "label2id", "_name_or_path"):
        d.pop(k, None)
    if d["model_type"] == "distilbert":
        d.update(dim=256, n_heads=4, hidden_dim=1024, n_layers=2)
    else:
        d.update(hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                 num_hidden_layers=2)
    d["vocab_size"] = 4096
    d["torch_dtype"] = "float32"
    d["architectures"] = [HEAD_CLASS[d["model_type"]] + head]
    if head in ("ForTokenClassification", "ForSequenceClassification"):
        d["num_labels"] = HEAD_LABELS
    return d


def shrink(d):
    d = dict(d)
    hid_keys = [k for k in ("hidden_size", "n_embd", "d_model", "dim") if k in d]
    hidden = d[hid_keys[0]] if hid_keys else 768
    heads_key = next(k for k in ("num_attention_heads", "n_head", "num_heads", "n_heads")
                     if k in d)
    heads = d[heads_key]
    kv = d.get("num_key_value_heads") or heads
    # 4 heads of the original width (an explicit head_dim stays, the hidden size is 256;
    # T5's d_kv is its head_dim)
    width = 256 if d.get("head_dim") else 4 * d["d_kv"] if "d_kv" in d else 4 * (hidden // heads)
    for k in hid_keys:
        d[k] = width
    d[heads_key] = 4
    if "num_key_value_heads" in d:
        d["num_key_value_heads"] = 4 if kv == heads else 1 if kv == 1 else 2
    # the MLP's (and each expert's, and the shared expert's) ratio to the hidden size
    for k in ("intermediate_size", "ffn_dim", "n_inner", "d_ff", "hidden_dim",
              "moe_intermediate_size", "shared_expert_intermediate_size"):
        if d.get(k):
            d[k] = max(64, round(d[k] / hidden * width / 64) * 64)
    for k in ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "n_layers"):
        if k in d:
            d[k] = 2
    if "max_window_layers" in d:
        d["max_window_layers"] = 2
    # DeepSeek: the first k layers dense, the others mixture of experts: one of each
    if d.get("first_k_dense_replace"):
        d["first_k_dense_replace"] = 1
    if "vocab_size" in d:
        d["vocab_size"] = min(d["vocab_size"], 4096)
    if d.get("pad_token_id") is not None and d["pad_token_id"] >= d.get("vocab_size", 0):
        d["pad_token_id"] = None
    d.pop("dtype", None)
    d["torch_dtype"] = "float32"
    for k in ("_name_or_path", "auto_map", "quantization_config"):
        d.pop(k, None)
    if isinstance(d.get("layer_types"), list):  # one per layer kept
        d["layer_types"] = d["layer_types"][:2]
    return d


def shrink_whisper(d):
    """A whisper config shrunk: 2 encoder and 2 decoder layers, a vocabulary of 4096 (the
    special token ids moved inside it), the widths, heads, mel bins and positions kept."""
    d = dict(d)
    for k in ("_name_or_path", "begin_suppress_tokens", "suppress_tokens", "forced_decoder_ids",
              "transformers_version"):
        d.pop(k, None)
    d.update(encoder_layers=2, decoder_layers=2, num_hidden_layers=2, vocab_size=4096,
             pad_token_id=4095, bos_token_id=4095, eos_token_id=4095, decoder_start_token_id=4094)
    d["torch_dtype"] = "float32"
    return d


def write_small():
    os.makedirs(os.path.join(ROOT, SMALL_DIR), exist_ok=True)
    for m in REAL + COVER_REAL + GPTOSS_REAL:
        with open(os.path.join(ROOT, "tests/models/hf", m + ".json")) as f:
            d = shrink(json.load(f))
        with open(os.path.join(ROOT, SMALL_DIR, f"small-{m}.json"), "w") as f:
            json.dump(d, f, indent=1, sort_keys=True)
            f.write("\n")
    for m in WHISPER_REAL:
        with open(os.path.join(ROOT, "tests/models/hf", m + ".json")) as f:
            d = shrink_whisper(json.load(f))
        with open(os.path.join(ROOT, SMALL_DIR, f"small-{m}.json"), "w") as f:
            json.dump(d, f, indent=1, sort_keys=True)
            f.write("\n")
    for m in HEAD_REAL:
        with open(os.path.join(ROOT, "tests/models/hf", m + ".json")) as f:
            real = json.load(f)
        for head in HEADS:
            with open(os.path.join(ROOT, SMALL_DIR, f"small-{m}-{head[3:]}.json"), "w") as f:
                json.dump(shrink_encoder(real, head), f, indent=1, sort_keys=True)
                f.write("\n")
    for m in HEAD_TINY:
        with open(os.path.join(ROOT, "tests/models/hf", m + ".json")) as f:
            tiny = json.load(f)
        for head in DECODER_HEADS:
            with open(os.path.join(ROOT, SMALL_DIR, f"{m}-{head[3:]}.json"), "w") as f:
                json.dump(with_head(tiny, head), f, indent=1, sort_keys=True)
                f.write("\n")
    for where, m, heads in DECODER_HEAD_MODELS:
        with open(os.path.join(ROOT, where, m + ".json")) as f:
            base = json.load(f)
        for head in heads:
            with open(os.path.join(ROOT, SMALL_DIR, f"{m}-{head[3:]}.json"), "w") as f:
                json.dump(with_head(base, head), f, indent=1, sort_keys=True)
                f.write("\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-small"]:
        write_small()
    else:
        print(__doc__)
