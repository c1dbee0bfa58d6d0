#!/usr/bin/python3
"""Write DIR/model.safetensors as openai-community/gpt2 publishes it: the
header (names without the "transformer." prefix, Conv1D weights [in, out],
each layer's attn.bias causal-mask buffer) over sparse zero data, so the file
takes no disk space. Usage: gpt2_safetensors.py DIR [EXTRA_POSITIONS]; a
nonzero EXTRA_POSITIONS makes wpe.weight disagree with config.json."""
import json
import struct
import sys

d, extra = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
L, E, V, P = 12, 768, 50257, 1024
tensors = [("wte.weight", [V, E]), ("wpe.weight", [P + extra, E])]
for i in range(L):
    h = "h.%d." % i
    tensors += [(h + "ln_1.weight", [E]), (h + "ln_1.bias", [E]), (h + "attn.bias", [1, 1, P, P]),
                (h + "attn.c_attn.weight", [E, 3 * E]), (h + "attn.c_attn.bias", [3 * E]),
                (h + "attn.c_proj.weight", [E, E]), (h + "attn.c_proj.bias", [E]),
                (h + "ln_2.weight", [E]), (h + "ln_2.bias", [E]),
                (h + "mlp.c_fc.weight", [E, 4 * E]), (h + "mlp.c_fc.bias", [4 * E]),
                (h + "mlp.c_proj.weight", [4 * E, E]), (h + "mlp.c_proj.bias", [E])]
tensors += [("ln_f.weight", [E]), ("ln_f.bias", [E])]
header, off = {"__metadata__": {"format": "pt"}}, 0
for name, shape in tensors:
    n = 1
    for s in shape:
        n *= s
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + 4 * n]}
    off += 4 * n
blob = json.dumps(header).encode()
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(blob)))
    f.write(blob)
    f.truncate(8 + len(blob) + off)
