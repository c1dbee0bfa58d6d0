#!/usr/bin/env python3
"""What PyTorch allocates for an MLP run on a constant buffer (Swin V2's continuous
position bias, timm's swin_transformer_v2_cr `meta_mlp(relative_coordinates_log)`): the
allocator's events of x + fc2(drop(act(fc1(c)))) under torch.profiler (profile_memory,
one thread), as tools/oracle/zoo.py measures.

    /tmp/zoo-venv/bin/python tools/oracle/weightmlp_probe.py [--train] [--p P]
    /usr/bin/python3 tools/oracle/weightmlp_probe.py ...      # Debian's torch 1.13

c [64, 2] a buffer, fc1 Linear(2, 32), ReLU, Dropout(P), fc2 Linear(32, 4), x [2, 64, 4]
the input; --train: model.train(), the sum's backward; else eval() under no_grad.
Prints each allocation (+) and free (-) with its phase and op.  The figures in
tests/unit/test-cpu.c (test_weight_computed_chain) come from this script.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402  (Range, tree_allocations)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--p", type=float, default=0.0)
    a = ap.parse_args()
    import torch
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile
    torch.set_num_threads(1)
    torch.manual_seed(0)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.randn(64, 2))
            self.fc1 = nn.Linear(2, 32)
            self.act = nn.ReLU()
            self.drop = nn.Dropout(a.p)
            self.fc2 = nn.Linear(32, 4)

        def forward(self, x):
            return x + self.fc2(self.drop(self.act(self.fc1(self.c))))

    m = M().train(a.train)
    x = torch.randn(2, 64, 4)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if a.train:
            with zoo.Range("it0/forward"):
                y = m(x).sum()
            with zoo.Range("it0/backward"):
                y.backward()
            del y
        else:
            with torch.no_grad(), zoo.Range("it0/forward"):
                y = m(x)
            del y
    print(f"torch {torch.__version__}, train {a.train}, p {a.p}")
    for _, _, size, ptr, phase, op in zoo.tree_allocations(prof.profiler.kineto_results):
        print(f"{size:+8d}  {str(phase):<13} {op}")


if __name__ == "__main__":
    main()
