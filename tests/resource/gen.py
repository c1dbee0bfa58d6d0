#!/usr/bin/env python3
"""Adversarial model files for the resource test (issue 17), each under 1 MB.

    python3 tests/resource/gen.py OUT_DIR
    python3 tests/resource/gen.py --big FILE    the 100 MB ONNX case alone

writes one file (or model directory) per case into OUT_DIR and prints one
line per case: "NAME<TAB>ARGS", the dnnmem arguments after the path.
tests/resource/run.sh runs each through the CLI under tests/resource/rlimit.c's
limits; every one must end with an answer or a one-line error.

Only the standard library (CI's python3 has no onnx package): the ONNX cases
are protobuf written by hand (the wire format: varint tags, length-delimited
fields), from the field numbers of onnx.proto (libonnx-dev).
"""

import copy
import io
import json
import os
import struct
import sys
import zipfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HF = os.path.join(ROOT, "tests", "models", "hf")
MAX = 1 << 20


# ---- protobuf by hand ------------------------------------------------------

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def vfield(field, n):
    return key(field, 0) + varint(n)


def lfield(field, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return key(field, 2) + varint(len(payload)) + payload


# onnx.proto field numbers
def value_info(name, dims, elem=1):  # ValueInfoProto{name 1, type 2}
    shape = b"".join(lfield(1, vfield(1, d) if isinstance(d, int) else lfield(2, d)) for d in dims)
    tensor = vfield(1, elem) + lfield(2, shape)  # TypeProto.Tensor{elem_type 1, shape 2}
    return lfield(1, name) + lfield(2, lfield(1, tensor))  # TypeProto{tensor_type 1}


def node(op, ins, outs, attrs=b"", name=""):  # NodeProto{input 1, output 2, name 3, op_type 4, attribute 5}
    return (b"".join(lfield(1, i) for i in ins) + b"".join(lfield(2, o) for o in outs) +
            (lfield(3, name) if name else b"") + lfield(4, op) + attrs)


def model(nodes, inputs, outputs, inits=b"", extra=b""):
    # GraphProto{node 1, name 2, initializer 5, input 11, output 12}
    graph = (b"".join(lfield(1, n) for n in nodes) + lfield(2, "g") + inits +
             b"".join(lfield(11, v) for v in inputs) + b"".join(lfield(12, v) for v in outputs))
    # ModelProto{ir_version 1, producer_name 2, graph 7, opset_import 8 {version 2}}
    return vfield(1, 8) + lfield(2, "adversary") + lfield(7, graph) + lfield(8, vfield(2, 14)) + extra


def relu_chain(n):
    nodes = [node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    return model(nodes, [value_info("t0", ["batch", 8])], [value_info(f"t{n}", ["batch", 8])])


# ---- the cases -----------------------------------------------------------------

def hf(name, **changes):
    d = json.load(open(os.path.join(HF, name)))
    d.update(changes)
    return json.dumps(d).encode()


def cases():
    c = {}
    seq = "--batch-size 1 --seq-len 16"
    # HuggingFace configs: joint caps (experts x layers), fields at their caps
    c["hf-experts-65536.json"] = (hf("DeepSeek-V3.json", n_routed_experts=65536), seq)
    c["hf-experts-4096.json"] = (hf("Mixtral-8x7B-v0.1.json", num_local_experts=4096), seq)
    c["hf-llama-caps.json"] = (hf("Llama-3.2-1B-Instruct.json", vocab_size=2**31, hidden_size=2**31,
                                  intermediate_size=2**31, num_hidden_layers=4096,
                                  num_attention_heads=2**16, num_key_value_heads=2**16,
                                  head_dim=2**15, max_position_embeddings=2**31), seq)
    c["hf-llama-heads.json"] = (hf("TinyLlama-1.1B-Chat-v1.0.json", num_attention_heads=2**31,
                                   num_key_value_heads=1), seq)
    c["hf-layers-1e308.json"] = (hf("tiny-llama-gqa.json").replace(
        b'"num_hidden_layers": 4', b'"num_hidden_layers": 1e308'), seq)
    c["hf-negative.json"] = (hf("tiny-llama-gqa.json", hidden_size=-64), seq)
    c["hf-nested-arrays.json"] = (b'{"model_type": "llama", "x": ' + b"[" * 200000 +
                                  b"]" * 200000 + b"}", seq)
    c["hf-long-string.json"] = (hf("tiny-llama-gqa.json", model_type="llama" * 180000), seq)
    c["hf-many-keys.json"] = (b'{"model_type": "llama", ' +
                              b", ".join(b'"k%d": 1' % i for i in range(80000)) + b"}", seq)
    c["hf-whitespace.json"] = (b" " * (MAX - 4096) + hf("tiny-llama-gqa.json"), seq)
    c["hf-lora-targets.json"] = (hf("tiny-llama-gqa.json"),
                                 seq + " --mode train --lora-r 65536 --lora-targets " +
                                 ",".join(["q_proj"] * 2000))
    # a model directory whose safetensors header lies about its length
    c["hf-dir-lying-header"] = ({"config.json": hf("tiny-llama-gqa.json"),
                                 "model.safetensors": struct.pack("<Q", 2**63 - 1) + b"{}"}, seq)
    c["hf-dir-huge-tensor"] = ({"config.json": hf("tiny-llama-gqa.json"),
                                "model.safetensors": (lambda h: struct.pack("<Q", len(h)) + h)(
                                    json.dumps({"w": {"dtype": "F32", "shape": [2**40, 2**40],
                                                      "data_offsets": [0, 2**62]}}).encode())},
                               seq)
    # ONNX: repeated fields, lying and absurd sizes, long chains, wide nodes
    x, y = value_info("x", ["batch", 8]), value_info("y", ["batch", 8])
    c["onnx-metadata-props.onnx"] = (model([node("Relu", ["x"], ["y"])], [x], [y],
                                           extra=lfield(14, b"") * 500000), "-b 1")
    c["onnx-unknown-fields.onnx"] = (model([node("Relu", ["x"], ["y"])], [x], [y],
                                           extra=vfield(1000, 1) * 300000), "-b 1")
    c["onnx-attr-ints.onnx"] = (model([node("Relu", ["x"], ["y"],
                                            attrs=lfield(5, lfield(1, "j") + vfield(20, 7) +
                                                         vfield(8, 1) * 450000))], [x], [y]), "-b 1")
    c["onnx-relu-chain.onnx"] = (relu_chain(40000), "-b 1")
    c["onnx-wide-concat.onnx"] = (model([node("Concat", ["x"] * 100000, ["y"],
                                              attrs=lfield(5, lfield(1, "axis") + vfield(20, 2) +
                                                           vfield(3, 1)))], [x], [y]), "-b 1")
    c["onnx-absurd-dims.onnx"] = (model([node("Relu", ["x"], ["y"])],
                                        [value_info("x", [2**62, 2**62])], [y]), "")
    # TensorProto{dims 1, data_type 2, name 8}: a weight of 2^40 x 2^40 floats, no data
    big = lfield(5, vfield(1, 2**40) + vfield(1, 2**40) + vfield(2, 1) + lfield(8, "w"))
    c["onnx-lying-initializer.onnx"] = (model([node("MatMul", ["x", "w"], ["y"])], [x], [y],
                                              inits=big), "-b 1")
    c["onnx-deep-nesting.onnx"] = ((lambda m: [m := lfield(7, m) for _ in range(3000)][-1])(b""), "-b 1")
    c["onnx-truncated.onnx"] = (relu_chain(100)[:-7], "-b 1")
    c["onnx-length-lies.onnx"] = (key(7, 2) + varint(2**40) + b"\x0a\x00", "-b 1")
    # Keras: many layers, deep nesting of models
    dense = {"class_name": "Dense", "config": {"name": "d", "units": 4, "activation": "relu"}}
    layers = [{"class_name": "InputLayer", "config": {"batch_shape": [None, 4], "name": "in"}}]
    for i in range(10000):
        d = copy.deepcopy(dense)
        d["config"]["name"] = f"d{i}"
        layers.append(d)
    c["keras-many-layers.json"] = (json.dumps({"class_name": "Sequential", "config": {
        "name": "s", "layers": layers}, "keras_version": "3.6.0"}, separators=(",", ":")).encode(),
                                   "-b 1")
    nest = {"class_name": "Sequential", "config": {"name": "n0", "layers": [dense]}}
    for i in range(1, 300):
        nest = {"class_name": "Sequential", "config": {"name": f"n{i}", "layers": [nest]}}
    c["keras-nested.json"] = (json.dumps({"class_name": "Sequential", "config": {
        "name": "top", "layers": [layers[0], nest]}, "keras_version": "3.6.0"}).encode(), "-b 1")
    # a .keras zip whose config.json inflates to 20 MiB of spaces (a zip bomb, 1000:1)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("metadata.json", '{"keras_version": "3.6.0"}')
        z.writestr("config.json", b" " * (20 << 20) + b"{}")
    c["keras-zip-bomb.keras"] = (bomb.getvalue(), "-b 1")
    # MXNet: a long chain of symbols
    nodes = [{"op": "null", "name": "data", "inputs": []}]
    for i in range(12000):
        nodes.append({"op": "relu", "name": f"a{i}", "inputs": [[i, 0, 0]]})
    c["mxnet-chain-symbol.json"] = (json.dumps({"nodes": nodes, "arg_nodes": [0],
                                                "heads": [[len(nodes) - 1, 0, 0]],
                                                "attrs": {"mxnet_version": ["int", 10600]}},
                                               separators=(",", ":")).encode(),
                                    "--input-shape data=1,8")
    return c


def big(path):
    """The 100 MB case of issue 17, not kept: one attribute's ints repeated
    50 million times (2 bytes each, unpacked), a graph protobuf-c would take
    ~1.8 GB to unpack."""
    x, y = value_info("x", ["batch", 8]), value_info("y", ["batch", 8])
    attr = lfield(5, lfield(1, "j") + vfield(20, 7) + vfield(8, 1) * 50000000)
    open(path, "wb").write(model([node("Relu", ["x"], ["y"], attrs=attr)], [x], [y]))


def main():
    if sys.argv[1] == "--big":
        big(sys.argv[2])
        return
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, (data, args) in cases().items():
        path = os.path.join(out, name)
        if isinstance(data, dict):
            os.makedirs(path, exist_ok=True)
            for f, b in data.items():
                open(os.path.join(path, f), "wb").write(b)
            size = sum(len(b) for b in data.values())
        else:
            open(path, "wb").write(data)
            size = len(data)
        assert size < MAX, f"{name}: {size} bytes, not under 1 MB"
        print(f"{name}\t{args}")


if __name__ == "__main__":
    main()
