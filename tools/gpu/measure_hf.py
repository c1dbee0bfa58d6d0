#!/usr/bin/env python3
"""Measure real GPU memory of HuggingFace training, inference and generation, for dnnmem.

The project's own companion to the shared gpu/measure.py, for what that script cannot do (a model
head, gradient checkpointing and accumulation, LoRA, generation, a forced sdpa backend, zeroed
grads without an optimizer, per-phase and whole-process peaks, the transformers/peft versions).
Rows keep measure.py's output fields, so tools/gpu/compare.py reads both.

    python3 measure_hf.py configs.jsonl results.jsonl [--only ID,ID] [--deadline SECONDS]
                                                      [--no-sdpa-probe] [--dry-run]

Reads configurations, one JSON object per line, runs each in this process (the allocator emptied
and cuBLAS workspaces cleared between rows), and appends one JSON line per configuration to
results.jsonl, flushed as each row ends. The first line printed (not written) is the process's
metadata. A row that fails records status "oom" or "error: ..." (with "traceback") and the next
row runs. --deadline: rows not started within SECONDS of the start are written with status
"skipped: deadline". --dry-run: check the file and print a time estimate per row, without CUDA.

A configuration (defaults after '='):
    {"id": "bert-large-cls-train-b4-s512-fp32-ckpt",      # unique
     "source": "hf",                                      # = hf, the only source here
     "model": "../../tests/models/hf/x.json",             # HF config, relative to this file's folder
     "mode": "train" | "infer" | "generate",
     "batch": 4,
     "seq": 512,                                          # train/infer tokens; generate: = prompt_len
     "prompt_len": 512, "new_tokens": 256,                # generate: model.generate(max_new_tokens=
                                                          #   min_new_tokens=new_tokens), greedy, cached
     "precision": "fp32" | "fp16" | "bf16" | "amp-fp16" | "amp-bf16",
                                                          # = fp32. The model is always built in
                                                          # float32 (dtype=torch.float32 passed to
                                                          # from_config: transformers 5 would use the
                                                          # config's dtype), then cast by model.to()
                                                          # for fp16/bf16; amp-* autocasts
     "attn": "eager" | "sdpa",                            # = sdpa (attn_implementation)
     "head": "causal-lm" | "masked-lm" | "seq-cls",       # = masked-lm for bert, roberta, distilbert,
                                                          # albert, else causal-lm (as measure.py);
                                                          # seq-cls: AutoModelForSequenceClassification,
                                                          # num_labels from the config (default 2)
     "optimizer": "sgd" | "sgd-momentum" | "adam" | "adamw" | "none",   # = sgd; trainable params only
     "loss": "ce" | "sum",                                # = ce: cross-entropy of logits.float()
                                                          # against the input ids (LM heads, as
                                                          # measure.py) or randint(num_labels,
                                                          # (batch,)) (seq-cls); sum: logits.sum()
     "iters": 3,                                          # = 3 (generate: 1): optimizer steps /
                                                          # generate calls
     "grad_accum": 1,                                     # micro-batches (each of `batch`) per step,
                                                          # loss / grad_accum
     "grad_ckpt": false,                                  # model.gradient_checkpointing_enable(
     "reentrant": false,                                  #   gradient_checkpointing_kwargs=
                                                          #   {"use_reentrant": reentrant}),
                                                          #   config.use_cache = False
     "lora": {"r": 8, "alpha": 16, "targets": ["q_proj", "v_proj"], "dropout": 0.0},
                                                          # peft.get_peft_model after the cast (PEFT's
                                                          # float32 adapters over a 16-bit base)
     "zero_grad": false,                                  # model.zero_grad(set_to_none=True) at each
                                                          # step's start even with optimizer none
                                                          # (with an optimizer, optimizer.zero_grad(
                                                          # set_to_none=True) always runs)
     "sdpa_backend": "flash" | "efficient" | "cudnn" | "math",
                                                          # forward, backward and generate inside
                                                          # torch.nn.attention.sdpa_kernel(backend)
     "attention_mask": false,                             # pass attention_mask=ones (train/infer;
                                                          # generate always passes one)
     "cudnn_benchmark": false}

Recorded once (the metadata line, and copied into every row): gpu, gpu_total_bytes, capability,
torch, cuda, cudnn, driver (pynvml, else nvidia-smi, else null), transformers, peft, accelerate,
python, alloc_conf (PYTORCH_CUDA_ALLOC_CONF), script, and context_bytes: device memory in use
after CUDA init (cudaMemGetInfo) minus what the allocator reserved, as measure.py.

Recorded per row (bytes), besides the configuration:
  status                    "ok" | "oom" | "error: ..." | "skipped: deadline"
  seconds, build_seconds    the whole row; building the model on the CPU
  params, trainable_params  parameter counts (after LoRA)
  param_dtype               the model's parameter dtype after the cast, before LoRA ("float32",
                            "bfloat16", "float16"): what dnnmem's --precision must say
  param_bytes_by_dtype      {dtype: bytes} over all parameters (after LoRA)
  model_class               the class built (type(model).__name__, the base model's under PEFT)
  num_labels                seq-cls only
  attn_implementation       model.config._attn_implementation as built
  build_kwargs              the from_config keywords that were accepted
  grad_ckpt_enabled, use_reentrant, input_require_grads   what checkpointing was set up
  lora_targets_found        LoRA: the number of modules PEFT wrapped
  max_allocated_first_iter, max_reserved_first_iter       torch.cuda.max_memory_allocated /
                            max_memory_reserved over the first iteration (step or generate call)
  max_allocated_steady, max_reserved_steady               the same over iterations 2.. (equal to
                            the first iteration's when iters is 1)
  max_allocated, max_reserved                             the larger of the two
  phases_first_iter, phases_steady   per phase, {"allocated", "reserved", "device_used"}: the peak
                            allocated and reserved within the phase (reset_peak_memory_stats at
                            each phase start; the phases tile the iteration, so their maximum is
                            the iteration's peak) and cudaMemGetInfo's used memory at its end.
                            train: "forward" (zero_grad, forward, loss; over micro-batches),
                            "backward", "step" (optimizer step, scaler update); infer: "forward";
                            generate: "prefill" (from the call's start to the end of the first
                            forward) and "decode" (the rest of the call)
  peak_phase_first_iter, peak_phase_steady   the phase holding the allocated peak
  device_used_start         cudaMemGetInfo used after the model moved to the GPU
  device_used_end           after the last iteration (as measure.py)
  device_used_peak_sampled  the largest cudaMemGetInfo used over all phase ends: the whole
                            process's peak as far as sampling at phase boundaries sees it
                            (reserved memory does not shrink within a row)
  allocated_end             torch.cuda.memory_allocated() after the last iteration
  num_alloc_retries         the allocator's cudaMalloc retries (memory_stats)
  sdpa_calls, sdpa_backends, sdpa_masked_calls, sdpa_gqa_calls, sdpa_causal_calls
                            F.scaled_dot_product_attention calls seen through a wrapper, and for
                            the first 512 of them the backend torch._fused_sdp_choice picks for the
                            same arguments under the same sdpa_kernel setting ({name: count});
                            sdpa_backend_probe_error if that private call failed
  generated_tokens, forwards   generate: tokens appended per call, model forwards per call
  allocated_after_prefill, allocated_after_last_forward   generate, first call
  warnings                  up to 12 distinct Python warnings and transformers/peft log records
"""
import argparse, collections, contextlib, functools, gc, json, logging, os, sys, time, traceback, warnings

try:
    import torch
except ImportError:  # --dry-run needs no torch
    torch = None

SCRIPT = "measure_hf.py 1"
DEVICE = "cuda"  # the offline test harness sets "cpu"
FIELDS = {"id", "source", "model", "mode", "batch", "seq", "prompt_len", "new_tokens",
          "precision", "attn", "head", "optimizer", "loss", "iters", "grad_accum", "grad_ckpt",
          "reentrant", "lora", "zero_grad", "sdpa_backend", "attention_mask", "cudnn_benchmark",
          "num_beams", "do_sample", "top_k", "top_p", "note"}
HEADS = {"causal-lm": "AutoModelForCausalLM", "masked-lm": "AutoModelForMaskedLM",
         "seq-cls": "AutoModelForSequenceClassification"}
MASKED_FAMILIES = ("bert", "roberta", "distilbert", "albert")
BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}  # torch dtype names
AMP = {"amp-fp16": "float16", "amp-bf16": "bfloat16"}
PROBE_LIMIT = 512


# ---------------------------------------------------------------- device and versions

def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def device_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def driver_version():
    try:
        import pynvml
        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        pass
    try:
        import subprocess
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:
        return None


def module_version(name):
    try:
        mod = __import__(name)
        return getattr(mod, "__version__", "?")
    except Exception as e:
        return "missing (%s)" % type(e).__name__


def versions():
    p = torch.cuda.get_device_properties(0)
    v = {"gpu": p.name, "gpu_total_bytes": p.total_memory, "capability": "%d.%d" % (p.major, p.minor),
         "torch": torch.__version__, "cuda": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
         "driver": driver_version()}
    for name in ("transformers", "peft", "accelerate"):
        v[name] = module_version(name)
    v["python"] = sys.version.split()[0]
    v["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    v["script"] = SCRIPT
    return v


# ---------------------------------------------------------------- sdpa probe

class SdpaProbe:
    """Wraps torch.nn.functional.scaled_dot_product_attention (transformers looks it up at each
    call) to count calls and ask torch._fused_sdp_choice which backend the same call takes."""

    def __init__(self):
        import torch.nn.functional as F
        self.F = F
        self.orig = getattr(F, "scaled_dot_product_attention", None)
        self.names = {}
        try:
            from torch.nn.attention import SDPBackend
            self.names = {int(v): k for k, v in SDPBackend.__members__.items()}
        except Exception:
            pass
        self.reset()
        if self.orig is not None:
            probe = self

            @functools.wraps(self.orig)
            def scaled_dot_product_attention(*args, **kw):
                return probe(*args, **kw)

            F.scaled_dot_product_attention = scaled_dot_product_attention

    def reset(self):
        self.calls = self.masked = self.gqa = self.causal = 0
        self.backends = collections.Counter()
        self.error = None

    def __call__(self, *args, **kw):
        self.calls += 1
        try:
            q, k, v = args[:3] if len(args) >= 3 else (kw.get("query"), kw.get("key"), kw.get("value"))
            names = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
            given = dict(zip(names, args[3:]))
            given.update({n: kw[n] for n in names if n in kw})
            mask, gqa, causal = given.get("attn_mask"), bool(given.get("enable_gqa")), bool(given.get("is_causal"))
            self.masked += mask is not None
            self.gqa += gqa
            self.causal += causal
            if self.calls <= PROBE_LIMIT and self.error is None:
                choice = torch._fused_sdp_choice(q, k, v, mask, float(given.get("dropout_p") or 0.0),
                                                 causal, scale=given.get("scale"),
                                                 **({"enable_gqa": True} if gqa else {}))
                self.backends[self.names.get(int(choice), str(int(choice)))] += 1
        except Exception as e:
            self.error = ("%s: %s" % (type(e).__name__, e))[:300]
        return self.orig(*args, **kw)

    def record(self):
        r = {"sdpa_calls": self.calls, "sdpa_backends": dict(self.backends),
             "sdpa_masked_calls": self.masked, "sdpa_gqa_calls": self.gqa,
             "sdpa_causal_calls": self.causal}
        if self.error:
            r["sdpa_backend_probe_error"] = self.error
        return r


PROBE = None


def sdpa_context(name):
    if not name:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(getattr(SDPBackend, BACKENDS[name]))


# ---------------------------------------------------------------- per-phase peaks

class Phases:
    """Peak allocated/reserved per phase. Each phase starts with reset_peak_memory_stats, and
    phases follow one another without gaps, so the largest phase peak is the iteration's."""

    def __init__(self):
        self.first, self.steady, self.samples = {}, {}, []
        self.it = 0

    def start(self):
        sync()
        torch.cuda.reset_peak_memory_stats()

    def end(self, name):
        sync()
        a, r, u = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(), device_used()
        d = self.first if self.it == 0 else self.steady
        p = d.setdefault(name, {"allocated": 0, "reserved": 0, "device_used": 0})
        p["allocated"], p["reserved"], p["device_used"] = max(p["allocated"], a), max(p["reserved"], r), max(p["device_used"], u)
        self.samples.append(u)
        torch.cuda.reset_peak_memory_stats()

    @staticmethod
    def peak(d, key):
        return max((p[key] for p in d.values()), default=0)

    def record(self):
        steady = self.steady or self.first
        res = {"phases_first_iter": self.first, "phases_steady": self.steady,
               "max_allocated_first_iter": self.peak(self.first, "allocated"),
               "max_reserved_first_iter": self.peak(self.first, "reserved"),
               "max_allocated_steady": self.peak(steady, "allocated"),
               "max_reserved_steady": self.peak(steady, "reserved"),
               "peak_phase_first_iter": max(self.first, key=lambda k: self.first[k]["allocated"]) if self.first else None,
               "peak_phase_steady": max(steady, key=lambda k: steady[k]["allocated"]) if steady else None,
               "device_used_peak_sampled": max(self.samples, default=0)}
        res["max_allocated"] = max(res["max_allocated_first_iter"], res["max_allocated_steady"])
        res["max_reserved"] = max(res["max_reserved_first_iter"], res["max_reserved_steady"])
        return res


# ---------------------------------------------------------------- captured warnings

class Captured(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.items = []

    def add(self, text):
        text = " ".join(str(text).split())[:300]
        if text not in self.items and len(self.items) < 12:
            self.items.append(text)

    def emit(self, record):
        try:
            self.add("%s: %s" % (record.name, record.getMessage()))
        except Exception:
            pass


@contextlib.contextmanager
def capture_warnings(cap):
    loggers = [logging.getLogger(n) for n in ("transformers", "peft", "accelerate")]
    for lg in loggers:
        lg.addHandler(cap)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            yield
        finally:
            for w in caught:
                cap.add("%s: %s" % (w.category.__name__, w.message))
            for lg in loggers:
                lg.removeHandler(cap)


# ---------------------------------------------------------------- configuration

def check(cfg):
    """The row's problems with its fields, as a string, or None."""
    bad = sorted(set(cfg) - FIELDS)
    if bad:
        return "unknown fields " + ", ".join(bad)
    if cfg.get("source", "hf") != "hf":
        return "source must be hf"
    if cfg.get("mode") not in ("train", "infer", "generate"):
        return "mode must be train, infer or generate"
    if cfg.get("precision", "fp32") not in ("fp32", "fp16", "bf16", "amp-fp16", "amp-bf16"):
        return "bad precision"
    if cfg.get("attn", "sdpa") not in ("eager", "sdpa"):
        return "attn must be eager or sdpa"
    if cfg.get("head") is not None and cfg["head"] not in HEADS:
        return "head must be one of " + ", ".join(HEADS)
    if cfg.get("optimizer", "sgd") not in ("sgd", "sgd-momentum", "adam", "adamw", "none"):
        return "bad optimizer"
    if cfg.get("loss", "ce") not in ("ce", "sum"):
        return "loss must be ce or sum"
    if cfg.get("sdpa_backend") is not None and cfg["sdpa_backend"] not in BACKENDS:
        return "sdpa_backend must be one of " + ", ".join(BACKENDS)
    if cfg["mode"] == "generate":
        if not cfg.get("new_tokens") or not (cfg.get("prompt_len") or cfg.get("seq")):
            return "generate needs prompt_len and new_tokens"
        if cfg.get("head", "causal-lm") != "causal-lm":
            return "generate needs the causal-lm head"
    elif not cfg.get("seq"):
        return "seq missing"
    if cfg.get("lora") is not None:
        lo = cfg["lora"]
        if not isinstance(lo, dict) or not lo.get("r") or set(lo) - {"r", "alpha", "targets", "dropout"}:
            return "lora must be {r, alpha, targets, dropout}"
    if int(cfg.get("grad_accum", 1)) < 1 or int(cfg.get("iters", 1)) < 1 or int(cfg.get("batch", 0)) < 1:
        return "batch, iters and grad_accum must be >= 1"
    return None


def default_head(conf):
    if getattr(conf, "model_type", None) in MASKED_FAMILIES or \
            any(a.endswith("ForMaskedLM") for a in (getattr(conf, "architectures", None) or [])):
        return "masked-lm"
    return "causal-lm"


def estimate_seconds(cfg, path):
    """A rough time for the row on one H200: the CPU build (~8 s per billion parameters, in
    float32) and the steps (or tokens) at a conservative rate."""
    try:
        with open(path) as f:
            c = json.load(f)
    except Exception:
        return None
    c = c.get("text_config", c)
    h = c.get("hidden_size") or c.get("n_embd") or c.get("dim") or 768
    n_layers = c.get("num_hidden_layers") or c.get("n_layer") or c.get("n_layers") or 12
    inter = c.get("intermediate_size") or c.get("n_inner") or c.get("hidden_dim") or 4 * h
    vocab = c.get("vocab_size") or 32000
    gated = c.get("model_type") in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3")
    params = vocab * h + n_layers * (4 * h * h + (3 if gated else 2) * h * inter)
    if c.get("model_type") == "albert":
        params = vocab * c.get("embedding_size", 128) + 4 * h * h + 2 * h * inter
    t = 0.5 + 8e-9 * params
    iters = int(cfg.get("iters", 1 if cfg["mode"] == "generate" else 3))
    if cfg["mode"] == "generate":
        per_token = 0.004 + 0.0012 * n_layers
        t += iters * (cfg["new_tokens"] * per_token + 0.3)
    else:
        tokens = cfg["batch"] * cfg["seq"] * int(cfg.get("grad_accum", 1))
        flops = (6 if cfg["mode"] == "train" else 2) * params * tokens
        if cfg.get("grad_ckpt"):
            flops *= 4 / 3
        rate = 30e12 if cfg.get("precision", "fp32") == "fp32" else 150e12
        t += iters * (flops / rate + 0.05 * int(cfg.get("grad_accum", 1)) + 0.03 * n_layers / 4)
    return round(t, 1)


# ---------------------------------------------------------------- building

def build(cfg, path, rec):
    import transformers
    conf = transformers.AutoConfig.from_pretrained(path)
    attn = cfg.get("attn", "sdpa")
    try:
        conf._attn_implementation = attn
    except Exception as e:
        rec.setdefault("build_notes", []).append("config._attn_implementation: %s" % e)
    head = cfg.get("head") or default_head(conf)
    rec["head"] = head
    if head == "seq-cls" and getattr(conf, "pad_token_id", None) is None:
        eos = getattr(conf, "eos_token_id", None)
        conf.pad_token_id = (eos[0] if isinstance(eos, (list, tuple)) else eos) or 0
    if cfg.get("grad_ckpt"):
        conf.use_cache = False
    cls = getattr(transformers, HEADS[head])
    # float32 on the CPU, cast below: transformers 5 would build in the config's dtype (bf16
    # init on the CPU is several times slower, and "fp32" would not be float32)
    tries = [{"attn_implementation": attn, "dtype": torch.float32},
             {"attn_implementation": attn, "torch_dtype": torch.float32},
             {"attn_implementation": attn}]
    m, err = None, None
    for kw in tries:
        try:
            m = cls.from_config(conf, **kw)
            rec["build_kwargs"] = sorted(kw)
            break
        except TypeError as e:
            if "dtype" not in str(e) and "attn_implementation" not in str(e):
                raise
            err = e
    if m is None:
        raise err
    if any(p.dtype != torch.float32 for p in m.parameters()):
        rec.setdefault("build_notes", []).append(
            "built in %s, cast to float32" % sorted({str(p.dtype) for p in m.parameters()}))
        m = m.float()
    return m, conf


def set_config_dtype(m, dt):
    for attr in ("dtype", "torch_dtype"):
        try:
            setattr(m.config, attr, dt)
            return
        except Exception:
            pass


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def prepare(cfg, path, rec):
    """The model on the device, cast, checkpointed and LoRA'd as the row says; its inputs."""
    prec = cfg.get("precision", "fp32")
    t = time.time()
    m, conf = build(cfg, path, rec)
    rec["build_seconds"] = round(time.time() - t, 2)
    if prec in DTYPES:
        dt = getattr(torch, DTYPES[prec])
        m = m.to(dt)
        set_config_dtype(m, dt)
    numel = collections.Counter()
    for p in m.parameters():
        numel[p.dtype] += p.numel()
    rec["param_dtype"] = dtype_name(numel.most_common(1)[0][0])
    rec["model_class"] = type(m).__name__
    try:
        rec["attn_implementation"] = m.config._attn_implementation
    except Exception:
        pass
    if rec["head"] == "seq-cls":
        rec["num_labels"] = int(getattr(m.config, "num_labels", 2) or 2)
    if cfg.get("grad_ckpt"):
        reentrant = bool(cfg.get("reentrant", False))
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        m.config.use_cache = False
        rec["use_reentrant"] = reentrant
        rec["grad_ckpt_enabled"] = bool(getattr(m, "is_gradient_checkpointing", True))
        if cfg.get("lora") and reentrant:
            # the frozen embeddings' output must require grad for a reentrant segment's backward
            m.enable_input_require_grads()
            rec["input_require_grads"] = True
    if cfg.get("lora"):
        import peft
        lo = cfg["lora"]
        lc = peft.LoraConfig(r=int(lo["r"]), lora_alpha=lo.get("alpha", 8),
                             target_modules=lo.get("targets") or None,
                             lora_dropout=float(lo.get("dropout", 0.0)), bias="none")
        m = peft.get_peft_model(m, lc)
        rec["lora_targets_found"] = sum(1 for n, _ in m.named_modules() if n.endswith(".lora_A"))
    by_dtype = collections.Counter()
    for p in m.parameters():
        by_dtype[dtype_name(p.dtype)] += p.numel() * p.element_size()
    rec["param_bytes_by_dtype"] = dict(by_dtype)
    rec["params"] = sum(p.numel() for p in m.parameters())
    rec["trainable_params"] = sum(p.numel() for p in m.parameters() if p.requires_grad)
    m = m.to(DEVICE)
    b = int(cfg["batch"])
    s = int(cfg.get("prompt_len") or cfg["seq"]) if cfg["mode"] == "generate" else int(cfg["seq"])
    x = torch.randint(0, conf.vocab_size, (b, s))
    if rec["head"] == "seq-cls":
        y = torch.randint(0, rec["num_labels"], (b,))
    else:
        y = x.clone()
    return m, x.to(DEVICE), y.to(DEVICE)


# ---------------------------------------------------------------- running

def make_optimizer(name, params):
    return {"sgd": lambda: torch.optim.SGD(params, lr=1e-3),
            "sgd-momentum": lambda: torch.optim.SGD(params, lr=1e-3, momentum=0.9),
            "adam": lambda: torch.optim.Adam(params, lr=1e-4),
            "adamw": lambda: torch.optim.AdamW(params, lr=1e-4),
            "none": lambda: None}[name]()


def make_scaler():
    try:
        return torch.amp.GradScaler("cuda")
    except Exception:
        return torch.cuda.amp.GradScaler()


def logits_of(out):
    if hasattr(out, "logits"):
        return out.logits
    return out[0] if isinstance(out, (tuple, list)) else out


def run_one(cfg, path, rec):
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = bool(cfg.get("cudnn_benchmark", False))
    prec = cfg.get("precision", "fp32")
    mode = cfg["mode"]
    m, x, y = prepare(cfg, path, rec)
    amp = getattr(torch, AMP[prec]) if prec in AMP else None
    autocast = lambda: torch.autocast(DEVICE, dtype=amp, enabled=amp is not None)
    backend = cfg.get("sdpa_backend")
    iters = int(cfg.get("iters", 1 if mode == "generate" else 3))
    accum = int(cfg.get("grad_accum", 1))
    kw = {"attention_mask": torch.ones_like(x)} if cfg.get("attention_mask") else {}
    opt_name = cfg.get("optimizer", "sgd") if mode == "train" else "none"
    params = [p for p in m.parameters() if p.requires_grad]
    opt = make_optimizer(opt_name, params)
    scaler = make_scaler() if prec == "amp-fp16" and mode == "train" else None
    ph = Phases()
    sync()
    rec["device_used_start"] = device_used()
    if PROBE is not None:
        PROBE.reset()
    hook = None
    if mode == "generate":
        base = m.get_base_model() if hasattr(m, "get_base_model") else m
        state = {"forwards": 0}

        def on_forward(module, inputs, output):
            state["forwards"] += 1
            if state["forwards"] == 1:
                ph.end("prefill")
                if ph.it == 0:
                    rec["allocated_after_prefill"] = torch.cuda.memory_allocated()
            if ph.it == 0:
                rec["allocated_after_last_forward"] = torch.cuda.memory_allocated()

        hook = base.register_forward_hook(on_forward)
        conf = base.config
        pad = getattr(conf, "pad_token_id", None)
        if pad is None:
            eos = getattr(conf, "eos_token_id", None)
            pad = (eos[0] if isinstance(eos, (list, tuple)) else eos) or 0
        n_new = int(cfg["new_tokens"])
        # beam search (num_beams > 1) or sampling (do_sample, top_k, top_p); min_new_tokens
        # keeps every beam running every step, as dnnmem assumes (no early stop on EOS)
        gen_kw = dict(attention_mask=torch.ones_like(x), max_new_tokens=n_new, min_new_tokens=n_new,
                      do_sample=bool(cfg.get("do_sample", False)),
                      num_beams=int(cfg.get("num_beams", 1)), use_cache=True, pad_token_id=pad)
        if cfg.get("do_sample"):
            gen_kw.update(top_k=int(cfg.get("top_k", 50)), top_p=float(cfg.get("top_p", 1.0)))
    ph.start()
    try:
        for it in range(iters):
            ph.it = it
            if mode == "generate":
                m.eval()
                state["forwards"] = 0
                with torch.no_grad(), autocast(), sdpa_context(backend):
                    out = m.generate(x, **gen_kw)
                ph.end("decode" if state["forwards"] else "prefill")
                if it == 0:
                    seqs = out.sequences if hasattr(out, "sequences") else out
                    rec["generated_tokens"] = int(seqs.shape[1] - x.shape[1])
                    del seqs
                    rec["forwards"] = state["forwards"]
                del out
            elif mode == "infer":
                m.eval()
                with torch.no_grad(), autocast(), sdpa_context(backend):
                    out = m(x, **kw)
                del out
                ph.end("forward")
            else:
                m.train()
                if opt is not None:
                    opt.zero_grad(set_to_none=True)
                elif cfg.get("zero_grad"):
                    m.zero_grad(set_to_none=True)
                for micro in range(accum):
                    with autocast(), sdpa_context(backend):
                        out = m(x, **kw)
                        logits = logits_of(out)
                        if cfg.get("loss", "ce") == "sum":
                            loss = logits.sum()
                        else:
                            loss = torch.nn.functional.cross_entropy(
                                logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
                        if accum > 1:
                            loss = loss / accum
                    ph.end("forward")
                    with sdpa_context(backend):
                        (scaler.scale(loss) if scaler else loss).backward()
                    ph.end("backward")
                    if micro == accum - 1 and opt is not None:
                        if scaler:
                            scaler.step(opt)
                            scaler.update()
                        else:
                            opt.step()
                        ph.end("step")
                    # as measure.py: the outputs live through the step, then go
                    del out, logits, loss
        sync()
        rec["device_used_end"] = device_used()
        rec["allocated_end"] = torch.cuda.memory_allocated()
        try:
            rec["num_alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries")
        except Exception:
            pass
        rec.update(ph.record())
    finally:
        if hook is not None:
            hook.remove()
        if PROBE is not None:
            rec.update(PROBE.record())
        del m, opt, x, y


def resolve(cfg, configs_path):
    p = cfg["model"]
    return p if os.path.isabs(p) else os.path.join(os.path.dirname(os.path.abspath(configs_path)), p)


def is_oom(e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower()


def cleanup():
    gc.collect()
    sync()
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
        try:
            torch._C._cuda_clearCublasWorkspaces()
        except Exception:
            pass


def read_configs(path, only):
    rows, ids = [], set()
    for n, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        cfg = json.loads(line)
        if cfg.get("id") in ids or not cfg.get("id"):
            raise SystemExit("%s:%d: missing or repeated id %r" % (path, n, cfg.get("id")))
        ids.add(cfg["id"])
        if only and cfg["id"] not in only:
            continue
        rows.append(cfg)
    return rows


def dry_run(rows, configs_path):
    total, bad = 0.0, 0
    for cfg in rows:
        problem = check(cfg)
        path = resolve(cfg, configs_path)
        if problem is None and not os.path.isfile(path):
            problem = "no file " + path
        est = estimate_seconds(cfg, path) if problem is None else None
        total += est or 0
        bad += problem is not None
        print("%-58s %s" % (cfg["id"], problem or "ok, ~%.0f s" % est))
    print("%d rows, %d with problems; ~%.0f s of rows (plus ~15 s to start)" % (len(rows), bad, total))
    return 1 if bad else 0


def main(argv=None):
    global PROBE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("configs")
    ap.add_argument("results", nargs="?")
    ap.add_argument("--only", help="comma-separated ids to run")
    ap.add_argument("--deadline", type=float, help="start no row after this many seconds")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--no-sdpa-probe", action="store_true",
                    help="leave F.scaled_dot_product_attention unwrapped (no sdpa_* fields)")
    a = ap.parse_args(argv)
    t0 = time.time()
    rows = read_configs(a.configs, set(a.only.split(",")) if a.only else None)
    if a.dry_run:
        return dry_run(rows, a.configs)
    if not a.results:
        ap.error("results file needed")
    if DEVICE == "cuda":
        torch.cuda.init()
    torch.zeros(1, device=DEVICE)
    sync()
    meta = versions()
    meta["context_bytes"] = device_used() - torch.cuda.memory_reserved()
    print(json.dumps(meta), flush=True)
    if not a.no_sdpa_probe:
        try:
            PROBE = SdpaProbe()
        except Exception as e:
            print("sdpa probe not installed:", e, flush=True)
    with open(a.results, "a") as out:
        for cfg in rows:
            rec = dict(cfg, **meta)
            rec.setdefault("source", "hf")
            problem = check(cfg)
            if problem is None and cfg["mode"] == "generate":
                rec["seq"] = int(cfg.get("prompt_len") or cfg["seq"])
                rec["prompt_len"] = rec["seq"]
            t = time.time()
            if a.deadline is not None and t - t0 > a.deadline:
                rec["status"] = "skipped: deadline"
            elif problem:
                rec["status"] = "error: " + problem
            else:
                cap = Captured()
                try:
                    with capture_warnings(cap):
                        run_one(cfg, resolve(cfg, a.configs), rec)
                    rec["status"] = "ok"
                except Exception as e:
                    rec["status"] = "oom" if is_oom(e) else \
                        "error: " + "".join(traceback.format_exception_only(type(e), e)).strip()[:300]
                    rec["traceback"] = traceback.format_exc()[-2000:]
                if cap.items:
                    rec["warnings"] = cap.items
                cleanup()
            rec["seconds"] = round(time.time() - t, 2)
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(rec["id"], rec["status"], rec.get("max_allocated"), rec.get("max_reserved"),
                  rec.get("peak_phase_first_iter"), rec.get("sdpa_backends"), rec["seconds"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
