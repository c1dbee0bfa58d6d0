#!/usr/bin/python3
"""Export the JAX kit's networks (tools/gpu/jax_measure.py, MODELS) from torch.

Run with Debian's interpreter (python3-torch 1.13, onnx), from anywhere:

    /usr/bin/python3 tools/gpu/jax_export.py [--out tools/gpu/jax-models] [--no-check]

For each model <m> of jax_measure.MODELS it

  1. builds the torch network from the same dimensions, and checks that its
     named_parameters() are jax_measure.param_shapes(<m>), name for name and
     shape for shape;
  2. checks the definitions numerically: jax_measure.forward() run with
     NumpyOps (numpy, float64) on the torch module's weights must give the
     torch module's output on a small batch (relative error < 1e-4), so the
     pure-JAX network, which is that same forward() with JaxOps, computes
     the same function (the primitives aside: dot_general for x @ W.T,
     conv_general_dilated NCHW/OIHW with padding 1, reduce_window max 2x2,
     jax.nn.gelu(approximate=False), jax.nn.softmax, jnp.take);
  3. exports <m>.onnx as tools/export_fixtures.py does: training mode,
     opset 14, no constant folding, dynamic batch (and seq), every
     initializer's bytes stripped (marked EXTERNAL in <m>.weights, a file
     never written; dims and types kept); and <m>.json, a sidecar with the
     parameter count and bytes, the initializers' shapes and the ops;
  4. checks that the ONNX initializers are exactly param_shapes(<m>).

Deterministic (torch.manual_seed(0)).
"""

import argparse
import io
import json
import math
import os
import sys
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import jax_measure as jm  # noqa: E402  (imports nothing but numpy)
from export_fixtures import strip_initializers, tensor_bytes_from_proto  # noqa: E402

OPSET = 14


class MLP(nn.Module):
    def __init__(self, d_in, hidden, classes):
        super().__init__()
        dims = (d_in,) + tuple(hidden) + (classes,)
        for i in range(len(dims) - 1):
            setattr(self, f"fc{i + 1}", nn.Linear(dims[i], dims[i + 1]))
        self.n = len(dims) - 1
        self.act = nn.ReLU()

    def forward(self, x):
        for i in range(1, self.n):
            x = self.act(getattr(self, f"fc{i}")(x))
        return getattr(self, f"fc{self.n}")(x)


class CNN(nn.Module):
    def __init__(self, image, in_ch, channels, pool_after, fc, classes):
        super().__init__()
        cin = in_ch
        for i, c in enumerate(channels):
            setattr(self, f"conv{i + 1}", nn.Conv2d(cin, c, 3, padding=1))
            cin = c
        self.n, self.pool_after = len(channels), tuple(pool_after)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        side = image // (2 ** len(pool_after))
        self.fc1 = nn.Linear(cin * side * side, fc)
        self.fc2 = nn.Linear(fc, classes)

    def forward(self, x):
        for i in range(self.n):
            x = self.act(getattr(self, f"conv{i + 1}")(x))
            if i in self.pool_after:
                x = self.pool(x)
        x = torch.flatten(x, 1)
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d, heads, ffn, eps):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1 = nn.LayerNorm(d, eps=eps)
        self.fc1 = nn.Linear(d, ffn)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn, d)
        self.ln2 = nn.LayerNorm(d, eps=eps)

    def forward(self, h):
        B, S, d = h.shape
        H = self.heads
        dh = d // H

        def split(t):
            return t.reshape(B, S, H, dh).permute(0, 2, 1, 3)

        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dh)
        a = torch.softmax(s, dim=-1)
        c = torch.matmul(a, v).permute(0, 2, 1, 3).reshape(B, S, d)
        h = self.ln1(self.o(c) + h)
        return self.ln2(self.fc2(self.act(self.fc1(h))) + h)


class Transformer(nn.Module):
    def __init__(self, vocab, d, heads, layers, ffn, max_pos, eps, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_pos, d)
        self.blocks = nn.ModuleList([Block(d, heads, ffn, eps) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        S = ids.shape[1]
        pos = torch.arange(S, dtype=torch.long, device=ids.device).unsqueeze(0)
        h = self.tok(ids) + self.pos(pos)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def build(model):
    m = dict(jm.MODELS[model])
    kind = m.pop("kind")
    return {"mlp": MLP, "cnn": CNN, "transformer": Transformer}[kind](**m)


def example(model, batch=2, seq=16):
    xs, xkind, _, _ = jm.batch_spec(model, batch, seq)
    if xkind == "ids":
        return torch.randint(0, jm.MODELS[model]["vocab"], xs, dtype=torch.long)
    return torch.randn(*xs)


def check_shapes(model, net):
    got = [(n, tuple(p.shape)) for n, p in net.named_parameters()]
    want = [(n, tuple(s)) for n, s in jm.param_shapes(model)]
    if got != want:
        raise SystemExit(f"{model}: torch parameters differ from jax_measure.param_shapes:\n"
                         f"  torch {got}\n  jax   {want}")


def check_numeric(model, net):
    """jax_measure.forward with NumpyOps (float64) against torch (float64)."""
    net64 = build(model).double()
    net64.load_state_dict(net.state_dict())
    net64.eval()
    x = example(model)
    xin = x.double() if x.is_floating_point() else x
    with torch.no_grad():
        ref = net64(xin).numpy()
    P = {n: p.detach().double().numpy() for n, p in net64.named_parameters()}
    got = jm.forward(model, P, xin.numpy(), jm.NumpyOps())
    if got.shape != ref.shape:
        raise SystemExit(f"{model}: numpy forward shape {got.shape} != torch {ref.shape}")
    err = float(np.max(np.abs(got - ref)) / (np.max(np.abs(ref)) + 1e-12))
    # and the loss, cross-entropy on class ids, against F.cross_entropy
    seq = x.shape[1] if jm.MODELS[model]["kind"] == "transformer" else None
    _, _, ys, classes = jm.batch_spec(model, x.shape[0], seq)
    y = torch.randint(0, classes, ys)
    ref_l = float(nn.functional.cross_entropy(torch.from_numpy(ref).reshape(-1, ref.shape[-1]),
                                              y.reshape(-1)))
    got_l = float(jm.loss_value(model, P, xin.numpy(), y.numpy(), jm.NumpyOps(), "ce"))
    lerr = abs(got_l - ref_l) / max(abs(ref_l), 1e-12)
    if err > 1e-4 or lerr > 1e-6:
        raise SystemExit(f"{model}: numpy forward differs from torch: output {err:.3g}, loss {lerr:.3g}")
    return err, lerr


def export(model, net, outdir):
    net.train()
    x = example(model)
    ids = jm.MODELS[model]["kind"] == "transformer"
    in_name = "ids" if ids else "x"
    axes = {in_name: {0: "batch", 1: "seq"} if ids else {0: "batch"},
            "logits": {0: "batch", 1: "seq"} if ids else {0: "batch"}}
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), buf, export_params=True,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=OPSET,
                          input_names=[in_name], output_names=["logits"], dynamic_axes=axes,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX)
    m = onnx.load_from_string(buf.getvalue())
    inits = {t.name: tuple(int(d) for d in t.dims) for t in m.graph.initializer}
    init_bytes = sum(tensor_bytes_from_proto(t) for t in m.graph.initializer)
    want = dict(jm.param_shapes(model))
    if inits != want:
        extra = sorted(set(inits) - set(want))
        missing = sorted(set(want) - set(inits))
        diff = sorted(k for k in set(inits) & set(want) if inits[k] != want[k])
        raise SystemExit(f"{model}: ONNX initializers differ: extra {extra} missing {missing} "
                         f"shape {diff}")
    stripped = strip_initializers(m, f"{model}.weights")
    assert stripped == init_bytes
    path = os.path.join(outdir, f"{model}.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    back = onnx.load(path, load_external_data=False)
    assert len(back.graph.initializer) == len(inits)

    def dims(vi):
        return [d.dim_param if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]

    params = list(net.named_parameters())
    info = dict(
        model=model,
        definition=jm.MODELS[model],
        onnx_file=f"{model}.onnx",
        weights_location=f"{model}.weights",
        weights_file_written=False,
        torch_version=torch.__version__,
        onnx_version=onnx.__version__,
        opset=OPSET,
        export_mode="TRAINING",
        do_constant_folding=False,
        graph_inputs={i.name: dims(i) for i in m.graph.input if i.name not in inits},
        graph_outputs={o.name: dims(o) for o in m.graph.output},
        param_count=sum(p.numel() for _, p in params),
        param_bytes=sum(p.numel() * p.element_size() for _, p in params),
        initializer_count=len(inits),
        initializer_bytes=init_bytes,
        initializers={k: list(v) for k, v in inits.items()},
        node_count=len(m.graph.node),
        op_types=sorted({n.op_type for n in m.graph.node}),
        onnx_file_bytes=os.path.getsize(path),
    )
    with open(os.path.join(outdir, f"{model}.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "jax-models"))
    ap.add_argument("--no-check", action="store_true", help="skip the numeric check")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for model in jm.MODELS:
        if a.only and model not in a.only:
            continue
        torch.manual_seed(0)
        net = build(model)
        check_shapes(model, net)
        num = "skipped" if a.no_check else "output rel err %.2g, loss rel err %.2g" % check_numeric(model, net)
        info = export(model, net, a.out)
        print(f"{model}: {info['param_count']} params ({info['param_bytes']} B), "
              f"{info['initializer_count']} initializers = param_shapes, {info['node_count']} nodes, "
              f"{info['onnx_file_bytes']} B file; numpy forward vs torch: {num}")
        print(f"  ops: {','.join(info['op_types'])}")


if __name__ == "__main__":
    main()
