#!/usr/bin/env python3
"""The configurations of the real-transformers CPU oracle (measure.py, compare.py), and the
small versions of real configs.

    python3 tools/hf_oracle/rows.py --write-small   # tests/validation/hf-small/*.json

A small config is a real one of tests/models/hf/ with the same model_type and every
architectural switch kept (rope scaling, tied embeddings, biases, GQA/MQA, softcapping,
parallel residuals, partial rotary, ...), shrunk: 2 layers, 4 heads of the original head size (hidden 4 x head size, or 256
where the config sets head_dim; grouped keys/values kept grouped, one kv head where there
was one), the MLP's ratio to the
hidden size kept, a vocabulary of 4096, torch_dtype float32, a pad token id only where it is
inside that vocabulary.  Standard library only (no torch): compare.py imports it too.
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


def release(version):
    """'4.51.3' -> '4.51' (dnnmem's --transformers X.Y)."""
    return ".".join(version.split(".")[:2])


def dtype_kw(version):
    """from_config's dtype keyword: torch_dtype before 4.56, dtype after."""
    major, minor = (int(x) for x in version.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def models():
    out = [(m, f"tests/models/hf/{m}.json") for m in TINY]
    out += [(f"small-{m}", f"{SMALL_DIR}/small-{m}.json") for m in REAL]
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
    return rows


def shrink(d):
    d = dict(d)
    hid_keys = [k for k in ("hidden_size", "n_embd", "d_model") if k in d]
    hidden = d[hid_keys[0]] if hid_keys else 768
    heads_key = next(k for k in ("num_attention_heads", "n_head") if k in d)
    heads = d[heads_key]
    kv = d.get("num_key_value_heads") or heads
    # 4 heads of the original width (an explicit head_dim stays, the hidden size is 256)
    width = 256 if d.get("head_dim") else 4 * (hidden // heads)
    for k in hid_keys:
        d[k] = width
    d[heads_key] = 4
    if "num_key_value_heads" in d:
        d["num_key_value_heads"] = 4 if kv == heads else 1 if kv == 1 else 2
    for k in ("intermediate_size", "ffn_dim", "n_inner"):
        if d.get(k):
            d[k] = max(64, round(d[k] / hidden * width / 64) * 64)
    for k in ("num_hidden_layers", "n_layer"):
        if k in d:
            d[k] = 2
    if "max_window_layers" in d:
        d["max_window_layers"] = 2
    d["vocab_size"] = min(d["vocab_size"], 4096)
    if d.get("pad_token_id") is not None and d["pad_token_id"] >= d["vocab_size"]:
        d["pad_token_id"] = None
    d.pop("dtype", None)
    d["torch_dtype"] = "float32"
    for k in ("_name_or_path", "auto_map", "quantization_config"):
        d.pop(k, None)
    return d


def write_small():
    os.makedirs(os.path.join(ROOT, SMALL_DIR), exist_ok=True)
    for m in REAL:
        with open(os.path.join(ROOT, "tests/models/hf", m + ".json")) as f:
            d = shrink(json.load(f))
        with open(os.path.join(ROOT, SMALL_DIR, f"small-{m}.json"), "w") as f:
            json.dump(d, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-small"]:
        write_small()
    else:
        print(__doc__)
