#!/usr/bin/env python3
"""Peak live tensor bytes of real transformers models on the CPU (PyTorch 2.x).

    VENV/bin/python tools/hf_oracle/measure.py OUT.jsonl [--only SUBSTR ...] [--list]
        [--deadline SECONDS] [--timeout SECONDS] [--detail DETAIL.jsonl]

The oracle for dnnmem's HuggingFace path (tests/validation/hf-real.md): the models are
transformers' own classes, not a re-implementation.  Run it with a virtual environment that
has torch (CPU) and one transformers release (tools/hf_oracle/setup.sh makes them); every
row records torch's and transformers' versions, and its id starts with the release, so one
OUT.jsonl holds several releases.  Resumable: rows whose id is already in OUT.jsonl are
skipped; each finished row is appended at once.  Time-bounded: each configuration runs in
its own forked child, killed after --timeout seconds (the row is then recorded with
"status": "timeout"), and no new configuration starts after --deadline seconds.

What is measured (the definitions of tools/measure_cpu.py, tests/validation/README.md):
  * the model: the class dnnmem builds for the config, AutoModelForCausalLM.from_config
    for a causal LM, else the class its `architectures` names (BertModel,
    RobertaForMaskedLM, AlbertForSequenceClassification, DistilBertForMaskedLM,
    T5ForConditionalGeneration, ViTForImageClassification; _from_config), with
    attn_implementation=ATTN after torch.manual_seed(0) (random weights, nothing
    downloaded), built in float32 and, for bf16 rows, converted by
    model.to(torch.bfloat16) (dnnmem's --precision bf16), or, for rows with "load":
    "torch_dtype" (releases before 4.51), built with torch_dtype=bfloat16 as
    from_pretrained(torch_dtype=...) loads (float32 buffers made with .float() stay so);
  * inputs after manual_seed(1) (rows.kind): input_ids int64 [batch, seq] uniform in
    [0, vocab); T5 also decoder_input_ids = model._shift_right(labels [batch,
    target_seq]); ViT pixel_values float32 [batch, channels, image, image] (the model
    casts them to its dtype).  Targets: class ids for dnnmem's --loss ce of the first
    output (inputs());
  * bytes_before: the distinct storages of every live torch.Tensor (gc scan) just before
    profiling: parameters, buffers, inputs, targets (bytes_before_unaccounted must be 0);
  * the curve: inside torch.profiler.profile(activities=[CPU], profile_memory=True), every
    event of prof.profiler.kineto_results.events() whose nbytes() is not 0.  In PyTorch 2.x
    these are the "[memory]" events that c10's CPU allocator reports to the profiler
    (reportMemoryUsage: + the requested size at allocation, - at free), with device_type()
    CPU and start_ns(); taken in (start_ns, recorded order).  live(i) = bytes_before + the
    running sum; peak_bytes = bytes_before + max(0, max of the running sum).  The event
    tree (kineto_results.experimental_event_tree(), Allocation nodes with alloc_size and
    ptr) gives each event its phase (the dnnmem/<phase> range around each step) and the
    operator that made it: "top_live_at_peak" in the detail file;
  * training (2 iterations): opt.zero_grad() (set_to_none=True, torch 2.x's default) ->
    out = model(input_ids) (use_cache as the config says: the output holds the cache) ->
    loss = F.cross_entropy(out[0].float() flattened to [-1, last], targets) (dnnmem's
    --loss ce on an HF causal LM: ForCausalLMLoss's logits.float(), no shift; the other
    models' first output as it is, as their own CrossEntropyLoss takes it) ->
    loss.backward() -> opt.step() -> del out, loss.  model.train().  SGD lr 0.01 momentum
    0.9, Adam lr 1e-3 (foreach None: the single-tensor path on CPU tensors);
  * inference: model.eval(), torch.no_grad(), out = model(input_ids), del out;
  * generate: model.generate(input_ids, max_new_tokens=N, do_sample=False) with eos and pad
    tokens unset (every row runs N forwards), under its own no_grad, model.eval();
    sampling rows pass do_sample=True and every warper (top_k, top_p, temperature), beam
    rows num_beams (early_stopping False, length_penalty 1);
  * lora rows: peft.get_peft_model(model, LoraConfig(r, lora_alpha, lora_dropout,
    task_type="CAUSAL_LM", "SEQ_2_SEQ_LM" for T5, none for the encoders)) with PEFT's
    default target modules, or rows.LORA_EXPLICIT's where PEFT has none (recorded with
    peft's version);
  * checkpoint rows (dnnmem --checkpoint SPEC, the row's "checkpoint"): the model's own
    activation_checkpointing_enable() (5.24; gradient_checkpointing_enable() before it),
    every layer, its defaults (5.24: use_reentrant=False, modeling_utils.py);
  * keep_outputs rows (dnnmem --keep-outputs): no `del out, loss` between the iterations, so
    the previous step's outputs live until `out = model(x)` rebinds the name (inference: a
    second forward while the first's outputs are held);
  * torch.set_num_threads(1) (dnnmem --cpu-threads 1);
  * --archs: the later families' rows (rows.make_arch_rows: granite, olmo2, starcoder2),
    measured as the causal LMs above; --mamba: mamba's (rows.mamba_rows), likewise;
  * --heads: the encoder heads' rows (rows.make_head_rows): AutoModel<head>.from_config
    (the head the config's architectures names), input_ids [batch, seq] ([batch, choices,
    seq] for ForMultipleChoice); training calls model(input_ids, <labels>) and backpropagates
    the model's own loss (out.loss: question answering's (start + end) / 2 against
    start_positions and end_positions [batch], token classification's labels [batch, seq],
    sequence classification's and multiple choice's labels [batch]), the labels made with
    the inputs (uniform, after manual_seed(1)).
"""

import argparse
import gc
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))
import zoo  # noqa: E402  (host_cpu_isa)
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import rows as rowdefs  # noqa: E402  (the configurations: shared with compare.py)

PREFIX = "dnnmem/"
ITERS = 2
SGD_LR, SGD_MOMENTUM, ADAM_LR = 0.01, 0.9, 1e-3
TOPK = 12


class rf:
    """A profiler range that allocates nothing (torch.profiler.record_function makes a
    tensor handle, which would be an allocation event)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.h = torch.ops.profiler._record_function_enter_new(self.name, None)

    def __exit__(self, *exc):
        torch.ops.profiler._record_function_exit._RecordFunction(self.h)


def storages(tensors):
    seen = {}
    for t in tensors:
        if t is not None:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def live_bytes():
    gc.collect()
    seen = {}
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and o.device.type == "cpu" and not o.is_sparse \
                    and not o.is_meta:
                st = o.untyped_storage()
                if st.nbytes():
                    seen[st.data_ptr()] = st.nbytes()
        except Exception:  # noqa: BLE001 - tensor subclasses without a storage
            pass
    return sum(seen.values())


def config(row):
    with open(os.path.join(ROOT, row["config"])) as f:
        d = json.load(f)
    d.pop("torch_dtype", None)
    d.pop("dtype", None)
    conf = transformers.CONFIG_MAPPING[d["model_type"]].from_dict(d)
    # a class default outside a tiny vocabulary (Phi3Config's pad_token_id 32000) makes
    # nn.Embedding refuse; the padding index costs no memory
    if getattr(conf, "pad_token_id", None) is not None and conf.pad_token_id >= conf.vocab_size:
        conf.pad_token_id = None
    return conf


def model_class(row, conf):
    """The class dnnmem builds for the config: a --heads row's AutoModel<head>, a causal LM's
    AutoModelForCausalLM, else the head its `architectures` names (BertModel, ...)."""
    if row.get("head"):
        return getattr(transformers, "AutoModel" + row["head"])
    if rowdefs.kind(row["model_type"]) == "causal":
        return transformers.AutoModelForCausalLM
    return getattr(transformers, conf.architectures[0])


def build(row):
    conf = config(row)
    torch.manual_seed(0)
    cls = model_class(row, conf)
    made = torch.bfloat16 if row.get("load") == "torch_dtype" else torch.float32
    kw = {rowdefs.dtype_kw(transformers.__version__): made}
    if cls.__name__.startswith("AutoModel"):
        model = cls.from_config(conf, attn_implementation=row["attn"], **kw)
    else:
        model = cls._from_config(conf, attn_implementation=row["attn"], **kw)
    if row["precision"] == "bf16" and made != torch.bfloat16:
        model = model.to(torch.bfloat16)
    if row.get("checkpoint"):  # every layer (5.24: activation_checkpointing_enable, whose
        # default is use_reentrant=False; before 5.x: gradient_checkpointing_enable)
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    if row.get("lora"):  # PEFT's defaults for the model_type's target modules
        import peft
        lc = row["lora"]
        task = dict(causal="CAUSAL_LM", seq2seq="SEQ_2_SEQ_LM").get(
            rowdefs.kind(row["model_type"]))
        kw = dict(r=lc["r"], lora_alpha=lc["alpha"], lora_dropout=lc["dropout"], task_type=task)
        try:
            model = peft.get_peft_model(model, peft.LoraConfig(**kw))
        except ValueError:  # PEFT has no default target modules for this model_type
            model = peft.get_peft_model(model, peft.LoraConfig(
                target_modules=rowdefs.LORA_EXPLICIT[row["model_type"]], **kw))
    return model, conf


def op_label(node):
    names, phase = [], None
    p = node.parent
    while p is not None:
        if p.name.startswith(PREFIX):
            phase = p.name[len(PREFIX):]
            break
        names.append(p.name)
        p = p.parent
    names.reverse()
    names = [n for n in names if not n.startswith("autograd::engine::evaluate_function: ")]
    return phase, " > ".join(names[:2] + (["..."] if len(names) > 3 else []) + names[-1:]
                             if len(names) > 3 else names)


def inputs(row, conf, model, train):
    """(the model's first input, the loss's targets or None, the other keyword inputs).
    Targets are class ids for dnnmem's --loss ce of the first output: token ids [B, S]
    for a causal or masked LM, [B, T] labels for T5 and whisper (decoder_input_ids =
    model._shift_right(labels), as T5ForConditionalGeneration makes them), [B, hidden]
    ids for a base model's last_hidden_state, [B] labels for a classifier."""
    b, k = row["batch"], rowdefs.kind(row["model_type"])
    if k == "image":
        n = conf.image_size
        x = torch.randn(b, conf.num_channels, n, n)
        y = torch.randint(0, conf.num_labels, (b,), dtype=torch.long) if train else None
        return x, y, {}
    s, v = row.get("seq"), conf.vocab_size
    if k == "speech":  # whisper: log-mel features in the model's dtype (Conv1d takes no
        # other), decoder_input_ids = shift_tokens_right(labels), as its forward makes them
        from transformers.models.whisper.modeling_whisper import shift_tokens_right
        dtype = next(model.parameters()).dtype
        x = torch.randn(b, conf.num_mel_bins, 2 * conf.max_source_positions).to(dtype)
        if row["mode"] == "generate":  # generate() makes the decoder's start tokens
            return x, None, {}
        labels = torch.randint(0, v, (b, s), dtype=torch.long)
        dec = shift_tokens_right(labels, conf.pad_token_id, conf.decoder_start_token_id)
        return x, (labels if train else None), dict(decoder_input_ids=dec)
    x = torch.randint(0, v, (b, s), dtype=torch.long)
    if k == "seq2seq":
        if row["mode"] == "generate":
            return x, None, {}
        t = row["target_seq"]
        labels = torch.randint(0, v, (b, t), dtype=torch.long)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        dec = base._shift_right(labels)
        return x, (labels if train else None), dict(decoder_input_ids=dec)
    if not train:
        return x, None, {}
    arch = conf.architectures[0] if k == "encoder" else ""
    if arch.endswith("ForSequenceClassification"):
        y = torch.randint(0, conf.num_labels, (b,), dtype=torch.long)
    elif arch.endswith("Model"):
        y = torch.randint(0, getattr(conf, "hidden_size", getattr(conf, "dim", 0)), (b, s),
                          dtype=torch.long)
    else:
        y = torch.randint(0, v, (b, s), dtype=torch.long)
    return x, y, {}


def head_inputs(row, conf, train):
    """A --heads row's input_ids ([B, S], [B, choices, S] for ForMultipleChoice), no targets
    (the head computes its own loss) and, in training, the labels its forward takes."""
    v, b, s = conf.vocab_size, row["batch"], row["seq"]
    head = row["head"]
    x = torch.randint(0, v, (b, row["choices"], s) if row.get("choices") else (b, s),
                      dtype=torch.long)
    labels = {}
    if train and head == "ForQuestionAnswering":
        labels = dict(start_positions=torch.randint(0, s, (b,), dtype=torch.long),
                      end_positions=torch.randint(0, s, (b,), dtype=torch.long))
    elif train and head == "ForTokenClassification":
        labels = dict(labels=torch.randint(0, conf.num_labels, (b, s), dtype=torch.long))
    elif train and head == "ForSequenceClassification":
        labels = dict(labels=torch.randint(0, conf.num_labels, (b,), dtype=torch.long))
    elif train and head == "ForMultipleChoice":
        labels = dict(labels=torch.randint(0, row["choices"], (b,), dtype=torch.long))
    return x, None, labels


def gen_kwargs(row):
    """model.generate's keywords: greedy, sampling (the row's warpers, explicit) or beams."""
    kw = dict(max_new_tokens=row["new_tokens"], min_new_tokens=None, do_sample=False)
    if row.get("sample"):
        kw.update(row["sample"])
    if row.get("num_beams"):
        kw.update(num_beams=row["num_beams"], early_stopping=False, length_penalty=1.0)
    return kw


def run(row):
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    model, conf = build(row)
    train = row["mode"] == "train"
    model.train(train)
    torch.manual_seed(1)
    head = row.get("head")
    if head:
        x, y, extra = head_inputs(row, conf, train)
    else:
        x, y, extra = inputs(row, conf, model, train)
    opt = None
    if row.get("optimizer") == "sgd-momentum":
        opt = torch.optim.SGD(model.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)
    elif row.get("optimizer") == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR)
    elif row.get("optimizer") in ("adamw", "adamw-fused"):  # the Trainer's adamw_torch(_fused)
        opt = torch.optim.AdamW(model.parameters(), lr=ADAM_LR,
                                fused=row["optimizer"] == "adamw-fused")
    if row["mode"] == "generate":
        gc_ = model.generation_config
        gc_.eos_token_id = gc_.pad_token_id = gc_.bos_token_id = None
    param_bytes = storages(model.parameters())
    buffer_bytes = storages(model.buffers())
    accounted = param_bytes + buffer_bytes + storages([x, y] + list(extra.values()))
    causal = rowdefs.kind(row["model_type"]) == "causal"
    hit = experts_hit(model, x, extra) if row["model_type"] == "gpt_oss" else None
    before = live_bytes()
    torch.manual_seed(2)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if row["mode"] == "generate":
            with rf(PREFIX + "generate"):
                out = model.generate(x, **gen_kwargs(row))
            with rf(PREFIX + "cleanup"):
                del out
        elif not train:
            with torch.no_grad():
                with rf(PREFIX + "it0/forward"):
                    out = model(x, **extra)
                if row.get("keep_outputs"):  # the name holds the first outputs meanwhile
                    with rf(PREFIX + "it1/forward"):
                        out = model(x, **extra)
                with rf(PREFIX + "it0/cleanup"):
                    del out
        else:
            for it in range(ITERS):
                p = f"{PREFIX}it{it}/"
                with rf(p + "zero_grad"):
                    opt.zero_grad()
                with rf(p + "forward"):
                    out = model(x, **extra)
                with rf(p + "loss"):
                    if head:  # the head's own loss, computed in its forward
                        loss = out.loss
                    else:
                        # a causal LM's own loss upcasts (ForCausalLMLoss); the others'
                        # CrossEntropyLoss takes the logits as they are
                        logits = out[0].float() if causal else out[0]
                        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.view(-1))
                        del logits
                with rf(p + "backward"):
                    loss.backward()
                with rf(p + "optimizer"):
                    opt.step()
                if row.get("keep_outputs") and it + 1 < ITERS:
                    continue  # `out` and `loss` rebound by the next step's forward and loss
                with rf(p + "cleanup"):
                    del out, loss
    kr = prof.profiler.kineto_results
    evs = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(kr.events())
                 if e.nbytes() != 0 and str(e.device_type()).endswith("CPU"))
    running, peak, peak_i = 0, 0, -1
    for i, (_, _, nb) in enumerate(evs):
        running += nb
        if running > peak:
            peak, peak_i = running, i
    end = running
    # the event tree: phase and operator of each allocation, what is live at the peak
    allocs, stack = [], list(kr.experimental_event_tree())
    while stack:
        n = stack.pop()
        if "Allocation" in str(n.tag):
            ef = n.extra_fields
            if ef.alloc_size != 0 and str(ef.device).startswith("cpu"):
                allocs.append((n.start_time_ns, n.id, ef.alloc_size, ef.ptr, n))
        stack.extend(n.children)
    allocs.sort(key=lambda a: (a[0], a[1]))
    tree_ok = [a[2] for a in allocs] == [nb for _, _, nb in evs]
    live, at_peak, phases, run_ = {}, [], {}, before
    for i, (_, _, size, ptr, node) in enumerate(allocs):
        run_ += size
        ph, _ = op_label(node)
        ph = ph or "(outside)"
        phases[ph] = max(phases.get(ph, 0), run_)
        if size > 0:
            live[ptr] = (i, size, node)
        else:
            live.pop(ptr, None)
        if i == peak_i and tree_ok:
            at_peak = sorted(live.values(), key=lambda t: -t[1])
    top = []
    for _, size, node in at_peak[:TOPK]:
        ph, op = op_label(node)
        top.append(dict(bytes=size, phase=ph, op=op))
    kinds = {}
    for ph, pk in phases.items():
        k = ph.split("/")[-1]
        kinds[k] = max(kinds.get(k, 0), pk)
    del opt
    after = live_bytes()
    rec = dict(row)
    rec.pop("dump", None)
    rec.update(
        status="ok", bytes_before=before, peak_bytes=before + peak, end_bytes=before + end,
        peak_phase=(op_label(allocs[peak_i][4])[0] if tree_ok and peak_i >= 0 else None),
        peak_by_phase_kind=kinds, memory_events=len(evs), param_bytes=param_bytes,
        buffer_bytes=buffer_bytes, bytes_before_unaccounted=before - accounted,
        tree_matches_events=tree_ok, end_check_ok=after >= before,
        torch=torch.__version__, transformers_version=transformers.__version__,
        num_threads=torch.get_num_threads(), cpu_isa=zoo.host_cpu_isa())
    if hit is not None:
        rec["experts_hit_min"] = hit
    if row.get("lora"):
        import peft
        rec["peft_version"] = peft.__version__
        rec["lora_targets"] = sorted(model.peft_config["default"].target_modules)
    detail = dict(id=row["id"], top_live_at_peak=top, live_at_peak_count=len(at_peak))
    if row.get("dump"):  # every block live at the peak, with its full operator path
        with open(os.path.join(row["dump"], row["id"].replace("/", "_") + ".tsv"), "w") as f:
            for i, size, node in sorted(at_peak, key=lambda t: t[0]):
                names, p = [], node.parent
                while p is not None:
                    names.append(p.name)
                    p = p.parent
                f.write(f"{i}\t{size}\t{' < '.join(names)}\n")
    return rec, detail


def experts_hit(model, x, extra):
    """The fewest experts any MoE layer routes a token to, in one no_grad forward of the
    row's input before the measurement (outside the profile): with random init an expert
    may get no token, and then no gradient (gpt_oss rows record it)."""
    counts, hooks = [], []
    for m in model.modules():
        if type(m).__name__.endswith("TopKRouter"):
            hooks.append(m.register_forward_hook(
                lambda mod, inp, out: counts.append(int(out[-1].unique().numel()))))
    was = model.training
    model.eval()
    with torch.no_grad():
        model(x, **extra)
    model.train(was)
    for h in hooks:
        h.remove()
    return min(counts) if counts else None


def child(row, conn):
    try:
        conn.send(run(row))
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))
    conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--detail", help="append what is live at each peak here (JSON lines)")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--deadline", type=float, default=3000)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--heads", action="store_true",
                    help="the encoder heads' rows (rows.make_head_rows), not the causal LMs'")
    ap.add_argument("--decoder-heads", action="store_true",
                    help="the other decoders' task heads (rows.make_decoder_head_rows)")
    ap.add_argument("--archs", action="store_true",
                    help="the later families' rows (rows.make_arch_rows)")
    ap.add_argument("--mamba", action="store_true",
                    help="mamba's rows (rows.mamba_rows: the torch slow path)")
    ap.add_argument("--deepseek", action="store_true",
                    help="DeepSeek's issue-14 rows (rows.deepseek_rows)")
    ap.add_argument("--dump", help="write each row's blocks live at the peak as DIR/<id>.tsv "
                    "(index, bytes, operator path; debugging, not committed)")
    a = ap.parse_args()
    rel = rowdefs.release(transformers.__version__)
    todo = rowdefs.deepseek_rows(rel) if a.deepseek else rowdefs.mamba_rows(rel) if a.mamba else rowdefs.make_head_rows(rel) if a.heads else \
        rowdefs.make_decoder_head_rows(rel) if a.decoder_heads else rowdefs.make_arch_rows(rel) if a.archs \
        else rowdefs.make_rows(rel)
    if a.only:
        todo = [r for r in todo if any(s in r["id"] for s in a.only)]
    done = set()
    if os.path.exists(a.out):
        with open(a.out) as f:
            done = {json.loads(line)["id"] for line in f if line.strip()}
    todo = [dict(r, dump=a.dump) if a.dump else r for r in todo if r["id"] not in done]
    if a.dump:
        os.makedirs(a.dump, exist_ok=True)
    if a.list:
        print("\n".join(r["id"] for r in todo))
        return
    for row in todo:  # import each modeling module once, before the children fork
        try:
            conf = config(row)
            cls = model_class(row, conf)
            if cls.__name__.startswith("AutoModel"):
                cls._model_mapping[type(conf)]
        except Exception:  # noqa: BLE001 - a type this release lacks: the row records it
            pass
    ctx = mp.get_context("fork")
    t0 = time.time()
    for row in todo:
        if time.time() - t0 > a.deadline:
            print(f"deadline: {len(todo)} rows not started", file=sys.stderr)
            break
        r_, w_ = ctx.Pipe(duplex=False)
        p = ctx.Process(target=child, args=(row, w_))
        t = time.time()
        p.start()
        w_.close()
        res = r_.recv() if r_.poll(a.timeout) else None
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
        if res is None:
            rec, det = dict(row, status="timeout", timeout_s=a.timeout,
                            transformers_version=transformers.__version__,
                            torch=torch.__version__), None
        elif res[0] == "error":
            rec, det = dict(row, status="error", error=res[1].strip().splitlines()[-1][:300],
                            transformers_version=transformers.__version__,
                            torch=torch.__version__), None
        else:
            rec, det = res
        with open(a.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if det and a.detail:
            with open(a.detail, "a") as f:
                f.write(json.dumps(det) + "\n")
        print(f"{row['id']:64s} {rec['status']:7s} "
              f"{rec.get('peak_bytes', 0) / 2**20:9.2f} MiB {time.time() - t:6.1f}s",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
