"""Capture a HuggingFace transformers model's step from its config, on the meta device:
the model is built with from_config under torch.device("meta") (no weights, nothing
downloaded) in the user's own transformers release, and its step captured as
dnnmem.torch.capture captures any module:

    import dnnmem.hf
    cap = dnnmem.hf.capture("config.json", task="causal-lm", attn_implementation="eager",
                            batch_size=2, seq_len=128, mode="train", optimizer="adam")
    cap.estimate(device="cpu")          # or gpu="A100-80GB"; cap.save("step.dnnmem")

The step is the one tools/hf_oracle/measure.py measures (tests/validation/hf-real.md):
input_ids int64 [batch, seq_len] (an encoder-decoder's, T5's, with decoder_input_ids
[batch, target_len]; an image classifier's, ViT's, pixel_values float32 [batch, channels,
image_size, image_size] instead); training: 2 iterations of zero_grad, forward, the loss,
backward, optimizer.step; the loss is cross-entropy of the first output against token ids
[batch, seq_len] (a causal LM's logits upcast to float32 first, as ForCausalLMLoss does;
an encoder-decoder's labels [batch, target_len]; a classifier's labels [batch]);
inference: one forward under no_grad. LoRA: peft=a
peft.LoraConfig (or the dict of its arguments), applied with peft.get_peft_model.
"""
import json
import os

import torch
import torch.nn.functional as F

import dnnmem.torch as _dt

# task -> the transformers Auto class that builds it
TASKS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
    "base": "AutoModel",
}
OPTIMIZERS = {  # the oracle's (tools/hf_oracle/measure.py: SGD_LR, SGD_MOMENTUM, ADAM_LR)
    "sgd": lambda p: torch.optim.SGD(p, lr=0.01),
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_config(config_or_dir):
    """A transformers PretrainedConfig from one, a dict, a config.json or a directory
    holding one (its torch_dtype/dtype dropped: the capture's dtype is `dtype`)."""
    import transformers
    if isinstance(config_or_dir, transformers.PretrainedConfig):
        return config_or_dir
    if isinstance(config_or_dir, dict):
        d = dict(config_or_dir)
    else:
        path = os.fspath(config_or_dir)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        with open(path) as f:
            d = json.load(f)
    d.pop("torch_dtype", None)
    d.pop("dtype", None)
    if "model_type" not in d:
        raise ValueError(f"{config_or_dir}: a transformers config needs \"model_type\"")
    conf = transformers.CONFIG_MAPPING[d["model_type"]].from_dict(d)
    # a class default outside a tiny vocabulary (Phi3Config's pad_token_id 32000) makes
    # nn.Embedding refuse; the padding index costs no memory (as measure.py does)
    if getattr(conf, "pad_token_id", None) is not None and conf.pad_token_id >= conf.vocab_size:
        conf.pad_token_id = None
    return conf


def _task_of(conf, task):
    if task is None:
        if getattr(conf, "is_encoder_decoder", False):  # T5's ForConditionalGeneration
            return "seq2seq-lm"
        arch = (getattr(conf, "architectures", None) or [""])[0]
        if arch.endswith("ForCausalLM") or arch.endswith("LMHeadModel") or not arch:
            return "causal-lm"
        for t, name in TASKS.items():
            suffix = name[len("AutoModel"):]
            if suffix and arch.endswith(suffix):
                return t
        return "base" if arch.endswith("Model") else "causal-lm"
    if task not in TASKS:
        raise ValueError(f"task {task!r} is not modelled; the tasks are {', '.join(TASKS)}")
    return task


def build(config_or_dir, task=None, attn_implementation="eager", dtype="float32", peft=None):
    """The model from_config on the meta device, and its config and task."""
    import transformers
    conf = load_config(config_or_dir)
    task = _task_of(conf, task)
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not modelled; the dtypes are {', '.join(_DTYPES)}")
    cls = getattr(transformers, TASKS[task])
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dkw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56
    with torch.device("meta"):
        model = cls.from_config(conf, attn_implementation=attn_implementation,
                                **{dkw: _DTYPES[dtype]})
        if peft is not None:
            import peft as _peft
            lc = peft if isinstance(peft, _peft.PeftConfig) else _peft.LoraConfig(**peft)
            model = _peft.get_peft_model(model, lc)
    return model, conf, task


def _loss(task):
    def causal(out, target):
        logits = out[0].float()  # ForCausalLMLoss upcasts
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.view(-1))

    def plain(out, target):
        logits = out[0]
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.view(-1))
    return causal if task == "causal-lm" else plain


def _example(conf, task, batch_size, seq_len, target_len, image_size, train):
    """(inputs, keyword inputs, target) of measure.py's step for the task: an encoder-decoder's
    decoder_input_ids (its _shift_right(labels), the labels' shape) beside input_ids, an image
    classifier's pixel_values (float32 as an image processor makes them; ViT's embeddings cast
    them to the weights' dtype) in place of them, each on meta; the target None in inference."""
    meta = dict(device="meta")
    if task == "image-classification":
        n = image_size or conf.image_size
        x = torch.zeros(batch_size, conf.num_channels, n, n, dtype=torch.float32, **meta)
        return [x], {}, torch.zeros(batch_size, dtype=torch.long, **meta) if train else None
    x = torch.zeros(batch_size, seq_len, dtype=torch.long, **meta)
    if task == "seq2seq-lm":
        t = target_len or seq_len
        dec = torch.zeros(batch_size, t, dtype=torch.long, **meta)
        return [x], {"decoder_input_ids": dec}, torch.zeros(batch_size, t, dtype=torch.long, **meta) \
            if train else None
    labels = (batch_size,) if task == "sequence-classification" else (batch_size, seq_len)
    return [x], {}, torch.zeros(labels, dtype=torch.long, **meta) if train else None


def capture(config_or_dir, task=None, attn_implementation="eager", peft=None, batch_size=1,
            seq_len=128, mode="train", optimizer="sgd-momentum", dtype="float32", steps=2,
            path=None, dims=None, grad_accum=1, target_len=None, image_size=None, device=None,
            autocast=None, grad_scaler=None):
    """Build the model from its config on meta and capture its step (a dnnmem.torch Capture).

    task: one of TASKS (default: seq2seq-lm for an encoder-decoder config, else the head the
    config's architectures names, a base model for "...Model" (GPT2Model: pass
    task="causal-lm" for its LM head), else causal-lm).
    attn_implementation: transformers' ("eager", "sdpa"). peft: a peft.LoraConfig or the dict
    of its arguments. mode: "train" or "infer". optimizer: one of OPTIMIZERS or a function
    of the parameters returning a torch.optim.Optimizer. dims: some of ("batch", "seq"), the
    sizes written as functions of them (dnnmem.dims), for --batch-size and --seq-len ("seq"
    only for a model of one token sequence). target_len: seq2seq-lm's decoder tokens (default
    seq_len). image_size: image-classification's side (default the config's image_size;
    seq_len is not read). grad_accum, device, autocast, grad_scaler: dnnmem.torch.capture's (micro-batches
    per optimizer step; the step's tensors' device; (device_type, dtype) of torch.autocast
    around each forward and loss)."""
    axes = {"batch": 0, "seq": 1}
    if dims is not None and (isinstance(dims, str) or not set(dims) <= set(axes)):
        raise ValueError(f"dims {dims!r}: a list of 'batch' and 'seq'")
    if mode not in ("train", "infer"):
        raise ValueError(f"mode {mode!r} is not modelled; the modes are train and infer")
    model, conf, task = build(config_or_dir, task, attn_implementation, dtype, peft)
    if dims and "seq" in dims and task in ("seq2seq-lm", "image-classification"):
        raise ValueError(f"dims 'seq' of a {task} model is not modelled (its inputs' axis 1 is "
                         f"not one token sequence): use dims=['batch']")
    dims = {d: axes[d] for d in dims} if dims else None
    inputs, kwargs, y = _example(conf, task, batch_size, seq_len, target_len, image_size,
                                 mode == "train")
    if mode == "infer":
        return _dt.capture(model, tuple(inputs), steps=1, path=path, dims=dims, kwargs=kwargs,
                           device=device, autocast=autocast)
    if isinstance(optimizer, str):
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {optimizer!r} is not modelled; the optimizers are "
                             f"{', '.join(OPTIMIZERS)}")
        optimizer = OPTIMIZERS[optimizer]
    return _dt.capture(model, tuple(inputs), target=y, loss=_loss(task), optimizer=optimizer,
                       steps=steps, path=path, dims=dims, grad_accum=grad_accum, kwargs=kwargs,
                       device=device, autocast=autocast, grad_scaler=grad_scaler)
