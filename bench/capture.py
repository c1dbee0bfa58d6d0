#!/usr/bin/env python3
"""capture.py: the capture speed target of issue 15 (a ResNet-50 training step captured in
at most 2 s), as wall and CPU time of dnnmem.torch.capture.

    DNNMEM_LIBRARY=build/libdnnmem.so PYTHONPATH=python VENV/bin/python bench/capture.py \\
        [--runs 5] [--batch 32]

VENV has torch and torchvision. Each run builds torchvision's resnet50 under
torch.device("meta") (not timed) and captures 2 iterations of zero_grad, forward,
cross_entropy, backward and SGD(momentum) (timed: dnnmem.torch.capture alone), then
estimates it with --device cpu (timed apart). Prints the median and the fastest of the
runs, wall and process CPU time. It never fails: timings depend on the machine and its
load (on a shared machine the CPU time is the steadier figure).
"""
import argparse
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import torchvision

    import dnnmem.torch as dt
    torch.set_num_threads(1)
    wall, cpu, est = [], [], []
    for _ in range(a.runs):
        with torch.device("meta"):
            model = torchvision.models.resnet50()
        x = torch.empty(a.batch, 3, 224, 224, device="meta")
        y = torch.empty(a.batch, dtype=torch.long, device="meta")
        t0, c0 = time.perf_counter(), time.process_time()
        cap = dt.capture(model, x, target=y, loss=F.cross_entropy,
                         optimizer=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), steps=2)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        t1 = time.perf_counter()
        cap.estimate(device="cpu", cpu_threads=1)
        est.append(time.perf_counter() - t1)
    print(f"resnet50 train b{a.batch}, 2 iterations, {len(cap.storages)} storages, "
          f"{len(cap.steps) - 1} ops: capture wall median {statistics.median(wall):.2f} s "
          f"(fastest {min(wall):.2f}), cpu median {statistics.median(cpu):.2f} s "
          f"(fastest {min(cpu):.2f}); target 2 s; estimate median {statistics.median(est):.2f} s")


if __name__ == "__main__":
    main()
