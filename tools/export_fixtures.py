#!/usr/bin/python3
"""Export the DNNMem evaluation model families to graph-only ONNX fixtures.

Run with Debian's interpreter (it carries python3-torch, torchvision, onnx):

    /usr/bin/python3 tools/export_fixtures.py [--out tests/models/fixtures]

For each model <m> this writes:
  <m>.onnx  the training-mode graph (Dropout and training BatchNorm kept),
            with every initializer's bytes stripped: each initializer is
            marked data_location=EXTERNAL, location="<m>.weights" (a file
            that is never written) with the offset/length its bytes would
            occupy there.  Dims and data_type are kept, so sizes can still be
            computed from the graph alone.
  <m>.json  sidecar with PyTorch's own parameter/buffer byte counts and the
            ONNX initializer totals, so a test can compare the estimator's
            "weights" figure with what PyTorch holds.

Deterministic (torch.manual_seed(0)); re-runnable; prints a summary table.
"""

import argparse
import io
import json
import math
import os
import re
import sys
import tempfile
import time
import warnings

import onnx
import torch
import torch.nn as nn
import torchvision

OPSET = 14  # BatchNormalization-14 has the training_mode attribute.

# ONNX TensorProto.DataType -> element size in bytes.
ONNX_DTYPE_SIZE = {
    onnx.TensorProto.FLOAT: 4,
    onnx.TensorProto.UINT8: 1,
    onnx.TensorProto.INT8: 1,
    onnx.TensorProto.UINT16: 2,
    onnx.TensorProto.INT16: 2,
    onnx.TensorProto.INT32: 4,
    onnx.TensorProto.INT64: 8,
    onnx.TensorProto.BOOL: 1,
    onnx.TensorProto.FLOAT16: 2,
    onnx.TensorProto.DOUBLE: 8,
    onnx.TensorProto.UINT32: 4,
    onnx.TensorProto.UINT64: 8,
    onnx.TensorProto.COMPLEX64: 8,
    onnx.TensorProto.COMPLEX128: 16,
    onnx.TensorProto.BFLOAT16: 2,
}


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

class LSTMLanguageModel(nn.Module):
    """PyTorch examples/word_language_model (LSTM, untied), vocab 10000, 650/650, 2 layers.

    nn.LSTM(650, 650, num_layers=2, dropout=0.5) cannot be exported in
    training mode by torch 1.13 ("RNN/GRU/LSTM dropout in training mode" is
    unimplemented in symbolic_opset9._generic_rnn).  The two layers are
    therefore two single-layer nn.LSTM modules with an explicit
    nn.Dropout(0.5) between them, which is exactly what nn.LSTM's inter-layer
    dropout does.  Parameter shapes and counts are identical to the 2-layer
    module (only the names differ: rnn.0.weight_ih_l0 vs rnn.weight_ih_l1).
    """

    def __init__(self, ntoken=10000, ninp=650, nhid=650, nlayers=2, dropout=0.5):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.ModuleList(
            [nn.LSTM(ninp if i == 0 else nhid, nhid, num_layers=1) for i in range(nlayers)]
        )
        self.decoder = nn.Linear(nhid, ntoken)
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, tokens):  # tokens: (seq, batch) int64
        x = self.drop(self.encoder(tokens))
        for i, layer in enumerate(self.rnn):
            if i > 0:
                x = self.drop(x)  # nn.LSTM's inter-layer dropout
            x, _ = layer(x)
        x = self.drop(x)
        return self.decoder(x)  # (seq, batch, vocab)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads = heads
        self.head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x):  # (b, s, h) -> (b, heads, s, head_size)
        new_shape = x.size()[:-1] + (self.heads, self.head_size)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, x):
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.size()[:-2] + (self.heads * self.head_size,))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, inter, dropout, eps):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads, dropout)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_drop = nn.Dropout(dropout)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, inter)
        self.act = nn.GELU()
        self.output = nn.Linear(inter, hidden)
        self.out_drop = nn.Dropout(dropout)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x):
        a = self.attn_norm(self.attn_drop(self.attn_out(self.attention(x))) + x)
        h = self.act(self.intermediate(a))
        return self.out_norm(self.out_drop(self.output(h)) + a)


class BertEncoder(nn.Module):
    """BERT-base encoder + pooler (no MLM/NSP heads, no attention mask)."""

    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, inter=3072,
                 max_pos=512, types=2, dropout=0.1, eps=1e-12):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(types, hidden)
        self.emb_norm = nn.LayerNorm(hidden, eps=eps)
        self.emb_drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            [BertLayer(hidden, heads, inter, dropout, eps) for _ in range(layers)]
        )
        self.pooler = nn.Linear(hidden, hidden)
        self.pooler_act = nn.Tanh()

    def forward(self, input_ids):  # (batch, seq) int64
        seq = input_ids.size(1)
        pos = torch.arange(seq, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        types = torch.zeros_like(input_ids)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(pos)
             + self.token_type_embeddings(types))
        x = self.emb_drop(self.emb_norm(x))
        for layer in self.layers:
            x = layer(x)
        pooled = self.pooler_act(self.pooler(x[:, 0]))
        return x, pooled


def make_specs():
    """(name, constructor, example inputs, input names, output names, dynamic axes, notes)."""
    img_axes = {"input": {0: "batch"}}
    return [
        dict(
            name="resnet50",
            make=lambda: torchvision.models.resnet50(weights=None),
            args=lambda: (torch.randn(2, 3, 224, 224),),
            inputs=["input"], outputs=["output"],
            axes=dict(img_axes, output={0: "batch"}),
            notes="torchvision.models.resnet50(weights=None), input (batch,3,224,224)",
        ),
        dict(
            name="vgg16",
            make=lambda: torchvision.models.vgg16(weights=None),
            args=lambda: (torch.randn(2, 3, 224, 224),),
            inputs=["input"], outputs=["output"],
            axes=dict(img_axes, output={0: "batch"}),
            notes="torchvision.models.vgg16(weights=None), input (batch,3,224,224)",
        ),
        dict(
            name="inception_v3",
            make=lambda: torchvision.models.inception_v3(
                weights=None, aux_logits=True, init_weights=False),
            args=lambda: (torch.randn(2, 3, 299, 299),),
            inputs=["input"], outputs=["output", "aux_output"],
            axes=dict(img_axes, output={0: "batch"}, aux_output={0: "batch"}),
            notes="torchvision.models.inception_v3(weights=None, aux_logits=True, "
                  "init_weights=False), input (batch,3,299,299); training-mode "
                  "forward returns (logits, aux_logits) -> outputs output, aux_output",
        ),
        dict(
            name="lstm_lm",
            make=lambda: LSTMLanguageModel(),
            args=lambda: (torch.randint(0, 10000, (35, 2), dtype=torch.long),),
            inputs=["tokens"], outputs=["output"],
            axes={"tokens": {0: "seq", 1: "batch"}, "output": {0: "seq", 1: "batch"}},
            notes="word_language_model LSTM: Embedding(10000,650) -> Dropout(0.5) -> "
                  "LSTM(650,650) -> Dropout(0.5) -> LSTM(650,650) -> Dropout(0.5) -> "
                  "Linear(650,10000); tokens (seq,batch) int64; zero initial state. "
                  "Two 1-layer nn.LSTM instead of nn.LSTM(num_layers=2, dropout=0.5) "
                  "because torch 1.13 cannot export RNN dropout in training mode; "
                  "parameter shapes/bytes identical.",
        ),
        dict(
            name="bert_encoder",
            make=lambda: BertEncoder(),
            args=lambda: (torch.randint(0, 30522, (2, 128), dtype=torch.long),),
            inputs=["input_ids"], outputs=["output", "pooled_output"],
            axes={"input_ids": {0: "batch", 1: "seq"},
                  "output": {0: "batch", 1: "seq"},
                  "pooled_output": {0: "batch"}},
            notes="BERT-base encoder (vocab 30522, hidden 768, 12 layers, 12 heads, "
                  "intermediate 3072, GELU(erf), dropout 0.1, LayerNorm eps 1e-12) + "
                  "pooler (dense+tanh on token 0); input_ids (batch,seq) int64; "
                  "no attention mask; token_type_ids all zero; no MLM/NSP heads.",
        ),
        dict(
            name="bert_large_encoder",
            make=lambda: BertEncoder(hidden=1024, layers=24, heads=16, inter=4096),
            args=lambda: (torch.randint(0, 30522, (2, 128), dtype=torch.long),),
            inputs=["input_ids"], outputs=["output", "pooled_output"],
            axes={"input_ids": {0: "batch", 1: "seq"},
                  "output": {0: "batch", 1: "seq"},
                  "pooled_output": {0: "batch"}},
            notes="BERT-large-sized encoder (24 layers, hidden 1024, 16 heads, "
                  "intermediate 4096), otherwise as bert_encoder; the 24-layer "
                  "transformer of the speed benchmark.",
        ),
    ]


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def tensor_bytes_from_proto(t):
    n = 1
    for d in t.dims:
        n *= d
    return n * ONNX_DTYPE_SIZE[t.data_type]


def strip_initializers(model, location):
    """Mark every initializer EXTERNAL in `location`; drop its bytes. Returns total bytes."""
    offset = 0
    for t in model.graph.initializer:
        length = tensor_bytes_from_proto(t)
        t.ClearField("raw_data")
        for f in ("float_data", "int32_data", "string_data", "int64_data",
                  "double_data", "uint64_data"):
            t.ClearField(f)
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)),
                     ("length", str(length))):
            e = t.external_data.add()
            e.key = k
            e.value = v
        t.data_location = onnx.TensorProto.EXTERNAL
        offset += length
    return offset


def export_one(spec, outdir):
    name = spec["name"]
    torch.manual_seed(0)
    t0 = time.time()
    model = spec["make"]()
    model.train()
    args = spec["args"]()

    # PyTorch-side byte counts (taken before export; export does not change sizes).
    params = list(model.named_parameters())
    buffers = list(model.named_buffers())
    param_count = sum(p.numel() for _, p in params)
    param_bytes = sum(p.numel() * p.element_size() for _, p in params)
    buffer_bytes = sum(b.numel() * b.element_size() for _, b in buffers)
    buffer_count = sum(b.numel() for _, b in buffers)
    # Tied weights would be counted once by model.parameters() already.

    buf = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.onnx.export(
            model, args, buf,
            export_params=True,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            opset_version=OPSET,
            input_names=spec["inputs"],
            output_names=spec["outputs"],
            dynamic_axes=spec["axes"],
            operator_export_type=torch.onnx.OperatorExportTypes.ONNX,
        )
    # Collapse per-tensor repeats (e.g. one per BatchNorm num_batches_tracked).
    grouped = {}
    for w in caught:
        msg = str(w.message).splitlines()[0].strip()
        msg = re.sub(r"'[^']*'", "'<name>'", msg)
        msg = re.sub(r"\s*\(Triggered internally at[^)]*\)\.?", "", msg)
        key = f"{w.category.__name__}: {msg}"
        grouped[key] = grouped.get(key, 0) + 1
    export_warnings = [f"{k} [x{n}]" if n > 1 else k for k, n in sorted(grouped.items())]
    export_s = time.time() - t0

    m = onnx.load_from_string(buf.getvalue())
    inits = list(m.graph.initializer)
    init_bytes_by_name = {t.name: tensor_bytes_from_proto(t) for t in inits}
    init_bytes = sum(init_bytes_by_name.values())
    init_elems = sum(math.prod(t.dims) for t in inits)
    init_dtypes = sorted({onnx.TensorProto.DataType.Name(t.data_type) for t in inits})

    # Match initializers back to PyTorch parameters and buffers by name.
    pnames = {n: p for n, p in params}
    bnames = {n: b for n, b in buffers}
    missing_params = [n for n in pnames if n not in init_bytes_by_name]
    buffers_not_init = [
        dict(name=n, dtype=str(b.dtype).replace("torch.", ""), shape=list(b.shape),
             bytes=b.numel() * b.element_size())
        for n, b in buffers if n not in init_bytes_by_name
    ]
    buffers_as_init = [n for n in bnames if n in init_bytes_by_name]
    extra_inits = [
        dict(name=t.name, dims=list(t.dims),
             dtype=onnx.TensorProto.DataType.Name(t.data_type),
             bytes=init_bytes_by_name[t.name])
        for t in inits if t.name not in pnames and t.name not in bnames
    ]
    size_mismatch = [
        n for n, x in list(pnames.items()) + list(bnames.items())
        if n in init_bytes_by_name and init_bytes_by_name[n] != x.numel() * x.element_size()
    ]

    # Graph facts.
    op_types = sorted({n.op_type for n in m.graph.node})
    domains = sorted({n.domain for n in m.graph.node if n.domain not in ("", "ai.onnx")})
    aten_ops = sorted({n.op_type for n in m.graph.node
                       if n.op_type.startswith("ATen") or n.domain.startswith("org.pytorch")})
    opsets = {o.domain or "ai.onnx": o.version for o in m.opset_import}
    const_nodes = sum(1 for n in m.graph.node if n.op_type == "Constant")

    def dims(vi):
        return [d.dim_param if d.dim_param else d.dim_value
                for d in vi.type.tensor_type.shape.dim]

    graph_inputs = {i.name: dims(i) for i in m.graph.input if i.name not in init_bytes_by_name}
    graph_outputs = {o.name: dims(o) for o in m.graph.output}

    # Strip weights and save graph-only model.
    weights_name = f"{name}.weights"
    stripped_total = strip_initializers(m, weights_name)
    assert stripped_total == init_bytes
    onnx_path = os.path.join(outdir, f"{name}.onnx")
    # Bytes are serialised directly: onnx.save would try to write external data.
    with open(onnx_path, "wb") as f:
        f.write(m.SerializeToString())
    file_size = os.path.getsize(onnx_path)

    # Verify: loads without external data, and the checker.
    back = onnx.load(onnx_path, load_external_data=False)
    assert len(back.graph.initializer) == len(inits)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL and not t.raw_data
               for t in back.graph.initializer)
    checker = {}

    def run_checker(how, target, **kw):
        try:
            onnx.checker.check_model(target, **kw)
            checker[how] = "ok"
        except Exception as e:  # noqa: BLE001 - report whatever the checker says
            msg = str(e).splitlines()[0][:300].replace(os.path.abspath(outdir) + os.sep, "")
            checker[how] = f"{type(e).__name__}: {msg}"

    # As saved: onnx 1.12's checker insists the external file exists.
    run_checker("as_saved", onnx_path)
    # With a sparse (all-zero, no disk blocks) stand-in for <m>.weights next to
    # a copy, the checker sees a complete model; full_check adds shape inference.
    with tempfile.TemporaryDirectory() as td:
        tmp_onnx = os.path.join(td, f"{name}.onnx")
        with open(tmp_onnx, "wb") as f:
            f.write(back.SerializeToString())
        with open(os.path.join(td, weights_name), "wb") as f:
            f.truncate(init_bytes)
        run_checker("with_sparse_weights_full_check", tmp_onnx, full_check=True)

    # Tensors computed only from initializers/Constants (no graph input): the
    # exporter materialises e.g. transposed Linear weights for MatMul and the
    # LSTM's re-ordered W/R/B concatenations as graph nodes because constant
    # folding is off.  Sizes from ONNX shape inference where fully static.
    inferred = onnx.shape_inference.infer_shapes(back)
    static = {}
    for v in inferred.graph.value_info:
        tt = v.type.tensor_type
        ds = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if tt.elem_type in ONNX_DTYPE_SIZE and all(d is not None for d in ds):
            static[v.name] = math.prod(ds) * ONNX_DTYPE_SIZE[tt.elem_type]
    consts = set()          # Constant outputs and anything computed only from them
    wsrc = set(init_bytes_by_name)  # initializers and tensors computed only from them + consts
    derived = []
    for n in back.graph.node:
        ins = [i for i in n.input if i]
        if n.op_type == "Constant" or (ins and all(i in consts for i in ins)):
            consts.update(n.output)
        elif ins and all(i in wsrc or i in consts for i in ins):
            wsrc.update(n.output)
            derived.extend((n.op_type, o, static.get(o)) for o in n.output)
    weight_derived = dict(
        count=len(derived),
        ops=sorted({d[0] for d in derived}),
        bytes_static=sum(d[2] for d in derived if d[2] is not None),
        unknown_size=sum(1 for d in derived if d[2] is None),
    )

    info = dict(
        model=name,
        notes=spec["notes"],
        onnx_file=f"{name}.onnx",
        weights_location=weights_name,
        weights_file_written=False,
        torch_version=torch.__version__,
        torchvision_version=torchvision.__version__,
        onnx_version=onnx.__version__,
        opset=OPSET,
        opset_import=opsets,
        export_mode="TRAINING",
        do_constant_folding=False,
        example_input_shapes=[list(a.shape) for a in args],
        graph_inputs=graph_inputs,
        graph_outputs=graph_outputs,
        param_count=param_count,
        param_bytes=param_bytes,
        buffer_count=buffer_count,
        buffer_bytes=buffer_bytes,
        param_plus_buffer_bytes=param_bytes + buffer_bytes,
        buffers_not_initializers=buffers_not_init,
        buffers_not_initializers_bytes=sum(b["bytes"] for b in buffers_not_init),
        buffers_as_initializers=len(buffers_as_init),
        params_not_initializers=missing_params,
        initializers_not_params_or_buffers=extra_inits,
        initializer_size_mismatches=size_mismatch,
        initializer_count=len(inits),
        initializer_elements=init_elems,
        initializer_bytes=init_bytes,
        initializer_dtypes=init_dtypes,
        initializer_bytes_minus_param_plus_buffer_bytes=init_bytes - (param_bytes + buffer_bytes),
        weight_derived_tensors=weight_derived,
        node_count=len(m.graph.node),
        constant_nodes=const_nodes,
        op_types=op_types,
        custom_domains=domains,
        aten_fallback_ops=aten_ops,
        onnx_file_bytes=file_size,
        checker=checker,
        export_warnings=export_warnings,
    )
    with open(os.path.join(outdir, f"{name}.json"), "w") as f:
        json.dump(info, f, indent=2, sort_keys=False)
        f.write("\n")
    info["export_seconds"] = round(export_s, 2)  # stdout only, not in the JSON
    return info


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "models", "fixtures"))
    ap.add_argument("--only", nargs="*", help="export only these model names")
    a = ap.parse_args()
    outdir = os.path.normpath(a.out)
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))

    t0 = time.time()
    rows = []
    for spec in make_specs():
        if a.only and spec["name"] not in a.only:
            continue
        print(f"exporting {spec['name']} ...", file=sys.stderr, flush=True)
        rows.append(export_one(spec, outdir))

    hdr = ("model", "params", "param_B", "buffer_B", "buf_not_init_B",
           "init_n", "init_B", "init-(p+b)", "wderiv_B", "onnx_B", "nodes", "secs")
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, opset {OPSET}, out {outdir}")
    print("%-13s %11s %12s %10s %14s %6s %12s %10s %10s %8s %6s %6s" % hdr)
    for r in rows:
        print("%-13s %11d %12d %10d %14d %6d %12d %10d %10d %8d %6d %6.1f" % (
            r["model"], r["param_count"], r["param_bytes"], r["buffer_bytes"],
            r["buffers_not_initializers_bytes"], r["initializer_count"],
            r["initializer_bytes"], r["initializer_bytes_minus_param_plus_buffer_bytes"],
            r["weight_derived_tensors"]["bytes_static"], r["onnx_file_bytes"], r["node_count"], r["export_seconds"]))
    for r in rows:
        print(f"{r['model']}: ops={','.join(r['op_types'])}")
        if r["aten_fallback_ops"] or r["custom_domains"]:
            print(f"  !! aten/custom ops: {r['aten_fallback_ops']} {r['custom_domains']}")
        print(f"  checker={r['checker']}")
        for w in r["export_warnings"]:
            print(f"  warning: {w}")
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
