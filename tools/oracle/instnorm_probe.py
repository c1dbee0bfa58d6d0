#!/usr/bin/env python3
"""What F.instance_norm (or, with --group G, F.group_norm) keeps for its backward: the allocator's events of one training
forward and backward of x * S -> InstanceNorm2d(C, affine) -> [relu_] -> * S2 -> sum,
under torch.profiler (profile_memory, one thread), as tools/oracle/zoo.py measures.

    /tmp/zoo-venv/bin/python tools/oracle/instnorm_probe.py [--affine] [--relu-inplace]
        [--n N] [--c C] [--hw HW]
    /usr/bin/python3 tools/oracle/instnorm_probe.py ...      # Debian's torch 1.13

Prints each allocation (+) and free (-) with its phase and op (outermost aten op >
innermost non-factory op), then the bytes live at the end of the forward beyond the
parameters and the input.  The figures in src/train/save.c (InstanceNormalization) and
tests/unit/test-cpu.c come from this script.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402  (Range, tree_allocations)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--affine", action="store_true")
    ap.add_argument("--relu-inplace", action="store_true")
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--c", type=int, default=8)
    ap.add_argument("--hw", type=int, default=8)
    ap.add_argument("--group", type=int, default=0,
                    help="nn.GroupNorm(GROUP, C, affine) instead of InstanceNorm2d")
    a = ap.parse_args()
    import torch
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile
    torch.set_num_threads(1)
    torch.manual_seed(0)
    norm = nn.GroupNorm(a.group, a.c, affine=a.affine) if a.group else \
        nn.InstanceNorm2d(a.c, affine=a.affine)
    S = nn.Parameter(torch.randn(1, a.c, 1, 1))
    S2 = nn.Parameter(torch.randn(1, a.c, 1, 1))
    x = torch.randn(a.n, a.c, a.hw, a.hw)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with zoo.Range("it0/forward"):
            v = norm(x * S)
            if a.relu_inplace:
                v.relu_()
            y = (v * S2).sum()
            del v
        with zoo.Range("it0/backward"):
            y.backward()
        del y
    print(f"torch {torch.__version__}, {type(norm).__name__}, x [{a.n},{a.c},{a.hw},{a.hw}], affine {a.affine}, "
          f"relu_ {a.relu_inplace}")
    live, fwd_end = {}, None
    for _, _, size, ptr, phase, op in zoo.tree_allocations(prof.profiler.kineto_results):
        if phase == "it0/backward" and fwd_end is None:
            fwd_end = dict(live)
        if size > 0:
            live[ptr] = (size, op)
        else:
            live.pop(ptr, None)
        print(f"{size:+8d}  {str(phase):<13} {op}")
    print("live at the end of the forward:")
    for size, op in (fwd_end or live).values():
        print(f"{size:8d}  {op}")


if __name__ == "__main__":
    main()
