#!/usr/bin/env python3
"""Write fuzz/corpus/safetensors/: checkpoints of fuzz-safetensors.c's tiny GPT-2
(n_embd 16, 1 layer, 32 positions, vocabulary 50) as openai-community/gpt2
lays them out (tests/cli/gpt2_safetensors.py), one matching, one with a
shape that disagrees, one in bfloat16, and a sharded index."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "safetensors")
E, V, P = 16, 50, 32


def tensors(extra=0):
    t = [("wte.weight", [V, E]), ("wpe.weight", [P + extra, E])]
    h = "h.0."
    t += [(h + "ln_1.weight", [E]), (h + "ln_1.bias", [E]), (h + "attn.bias", [1, 1, P, P]),
          (h + "attn.c_attn.weight", [E, 3 * E]), (h + "attn.c_attn.bias", [3 * E]),
          (h + "attn.c_proj.weight", [E, E]), (h + "attn.c_proj.bias", [E]),
          (h + "ln_2.weight", [E]), (h + "ln_2.bias", [E]),
          (h + "mlp.c_fc.weight", [E, 4 * E]), (h + "mlp.c_fc.bias", [4 * E]),
          (h + "mlp.c_proj.weight", [4 * E, E]), (h + "mlp.c_proj.bias", [E]),
          ("ln_f.weight", [E]), ("ln_f.bias", [E])]
    return t


def write(name, dtype="F32", size=4, extra=0):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for n, shape in tensors(extra):
        k = size
        for s in shape:
            k *= s
        header[n] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + k]}
        off += k
    blob = json.dumps(header).encode()
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob + bytes(off))


os.makedirs(OUT, exist_ok=True)
write("gpt2-tiny.safetensors")
write("gpt2-tiny-bad-shape.safetensors", extra=1)
write("gpt2-tiny-bf16.safetensors", "BF16", 2)
index = {"metadata": {"total_size": 123456},
         "weight_map": {n: "model-0000%d-of-00002.safetensors" % (1 + i % 2)
                        for i, (n, _) in enumerate(tensors())}}
with open(os.path.join(OUT, "index.json"), "w") as f:
    json.dump(index, f)
