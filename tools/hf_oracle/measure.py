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
  * the model: AutoModelForCausalLM.from_config(config, attn_implementation=ATTN) after
    torch.manual_seed(0) (random weights, nothing downloaded), built in float32 and, for
    bf16 rows, converted by model.to(torch.bfloat16) (dnnmem's --precision bf16), or, for
    rows with "load": "torch_dtype" (releases before 4.51), built with torch_dtype=bfloat16
    as from_pretrained(torch_dtype=...) loads (float32 buffers made with .float() stay so);
    input_ids and targets int64 [batch, seq] uniform in [0, vocab) after manual_seed(1);
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
    loss = F.cross_entropy(out.logits.float().view(B*S, V), target.view(B*S)) (dnnmem's
    --loss ce on an HF causal LM: ForCausalLMLoss's logits.float(), no shift) ->
    loss.backward() -> opt.step() -> del out, loss.  model.train().  SGD lr 0.01 momentum
    0.9, Adam lr 1e-3 (foreach None: the single-tensor path on CPU tensors);
  * inference: model.eval(), torch.no_grad(), out = model(input_ids), del out;
  * generate: model.generate(input_ids, max_new_tokens=N, do_sample=False) with eos and pad
    tokens unset (every row runs N forwards), under its own no_grad, model.eval();
  * lora rows: peft.get_peft_model(model, LoraConfig(r, lora_alpha, lora_dropout,
    task_type="CAUSAL_LM")) with PEFT's default target modules (recorded with peft's version);
  * keep_outputs rows (dnnmem --keep-outputs): no `del out, loss` between the iterations, so
    the previous step's outputs live until `out = model(x)` rebinds the name (inference: a
    second forward while the first's outputs are held);
  * torch.set_num_threads(1) (dnnmem --cpu-threads 1).
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


def build(row):
    conf = config(row)
    torch.manual_seed(0)
    made = torch.bfloat16 if row.get("load") == "torch_dtype" else torch.float32
    model = transformers.AutoModelForCausalLM.from_config(
        conf, attn_implementation=row["attn"], **{rowdefs.dtype_kw(transformers.__version__):
                                                  made})
    if row["precision"] == "bf16" and made != torch.bfloat16:
        model = model.to(torch.bfloat16)
    if row.get("lora"):  # PEFT's defaults for the model_type's target modules
        import peft
        lc = row["lora"]
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=lc["r"], lora_alpha=lc["alpha"], lora_dropout=lc["dropout"], task_type="CAUSAL_LM"))
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


def run(row):
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    model, conf = build(row)
    train = row["mode"] == "train"
    model.train(train)
    torch.manual_seed(1)
    v, b, s = conf.vocab_size, row["batch"], row["seq"]
    x = torch.randint(0, v, (b, s), dtype=torch.long)
    y = torch.randint(0, v, (b, s), dtype=torch.long) if train else None
    opt = None
    if row.get("optimizer") == "sgd-momentum":
        opt = torch.optim.SGD(model.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)
    elif row.get("optimizer") == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR)
    if row["mode"] == "generate":
        gc_ = model.generation_config
        gc_.eos_token_id = gc_.pad_token_id = gc_.bos_token_id = None
    param_bytes = storages(model.parameters())
    buffer_bytes = storages(model.buffers())
    accounted = param_bytes + buffer_bytes + storages([x, y])
    before = live_bytes()
    torch.manual_seed(2)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if row["mode"] == "generate":
            with rf(PREFIX + "generate"):
                out = model.generate(x, max_new_tokens=row["new_tokens"], do_sample=False,
                                     min_new_tokens=None)
            with rf(PREFIX + "cleanup"):
                del out
        elif not train:
            with torch.no_grad():
                with rf(PREFIX + "it0/forward"):
                    out = model(x)
                if row.get("keep_outputs"):  # the name holds the first outputs meanwhile
                    with rf(PREFIX + "it1/forward"):
                        out = model(x)
                with rf(PREFIX + "it0/cleanup"):
                    del out
        else:
            for it in range(ITERS):
                p = f"{PREFIX}it{it}/"
                with rf(p + "zero_grad"):
                    opt.zero_grad()
                with rf(p + "forward"):
                    out = model(x)
                with rf(p + "loss"):
                    logits = out.logits.float()
                    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
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
        num_threads=torch.get_num_threads())
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
    ap.add_argument("--dump", help="write each row's blocks live at the peak as DIR/<id>.tsv "
                    "(index, bytes, operator path; debugging, not committed)")
    a = ap.parse_args()
    rel = rowdefs.release(transformers.__version__)
    todo = rowdefs.make_rows(rel)
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
        transformers.AutoModelForCausalLM._model_mapping[type(config(row))]
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
