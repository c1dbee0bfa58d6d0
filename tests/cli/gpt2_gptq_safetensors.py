#!/usr/bin/python3
"""Write DIR/model.safetensors as a GPT-2 GPTQ checkpoint (4 bits, group 128,
tests/models/hf/gpt2-gptq-4bit.json) holds it: optimum's save_pretrained of
the model whose Conv1D layers auto-gptq's QuantLinear replaced, so each
layer keeps qweight int32 [in / 32 * 4, out], qzeros int32 [in / 128,
out / 32 * 4], scales float16 [in / 128, out], g_idx int32 [in] and its
float16 bias (auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py), the rest in
float16 (torch_dtype); the header over sparse zero data, so the file takes no
disk space. Usage: gpt2_gptq_safetensors.py DIR [BAD]; BAD 1 stores the
first layer's qzeros with group size 64, BAD 2 its qweight as float16."""
import json
import struct
import sys

d, bad = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
L, E, V, P, BITS, G = 12, 768, 50257, 1024, 4, 128
sizes = {"I32": 4, "F16": 2}
tensors = [("transformer.wte.weight", "F16", [V, E]), ("transformer.wpe.weight", "F16", [P, E])]
for i in range(L):
    h = "transformer.h.%d." % i
    tensors += [(h + "ln_1.weight", "F16", [E]), (h + "ln_1.bias", "F16", [E]),
                (h + "ln_2.weight", "F16", [E]), (h + "ln_2.bias", "F16", [E])]
    for name, nx, nf in (("attn.c_attn", E, 3 * E), ("attn.c_proj", E, E),
                         ("mlp.c_fc", E, 4 * E), ("mlp.c_proj", 4 * E, E)):
        g = 64 if bad == 1 and i == 0 and name == "attn.c_attn" else G
        qw = "F16" if bad == 2 and i == 0 and name == "attn.c_attn" else "I32"
        tensors += [(h + name + ".qweight", qw, [nx // 32 * BITS, nf]),
                    (h + name + ".qzeros", "I32", [nx // g, nf // 32 * BITS]),
                    (h + name + ".scales", "F16", [nx // g, nf]),
                    (h + name + ".g_idx", "I32", [nx]),
                    (h + name + ".bias", "F16", [nf])]
tensors += [("transformer.ln_f.weight", "F16", [E]), ("transformer.ln_f.bias", "F16", [E])]
header, off = {"__metadata__": {"format": "pt"}}, 0
for name, dtype, shape in tensors:
    n = sizes[dtype]
    for s in shape:
        n *= s
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
    off += n
blob = json.dumps(header).encode()
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(blob)))
    f.write(blob)
    f.truncate(8 + len(blob) + off)
