#!/usr/bin/env python3
"""Which allocations a real CPU step makes that its capture does not (and the reverse):
the multiset of allocation sizes of the profiler-measured step (tools/oracle/zoo.py's
method, its event tree naming the op) against the sizes of the storages the capture made.

    DNNMEM_LIBRARY=build/libdnnmem.so PYTHONPATH=python \\
        /tmp/zoo-venv/bin/python tools/oracle/capture_diff.py resnet18-train-sgd-b1-i224
"""
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    import capture_zoo
    import zoo
    rid = sys.argv[1]
    row = next(json.loads(l) for l in open(capture_zoo.ROWS) if json.loads(l)["id"] == rid)
    torch.set_num_threads(1)
    # the measured step, as zoo.measure runs it
    model, _, classes = zoo.build_model(row["model"])
    train = row["mode"] == "train"
    model.train(train)
    x = torch.randn(row["batch"], 3, row["image"], row["image"])
    y = torch.randint(0, classes, (row["batch"],))
    opt = None
    if train:
        opt = (torch.optim.SGD(model.parameters(), lr=zoo.SGD_LR, momentum=zoo.SGD_MOMENTUM)
               if row["optimizer"] == "sgd-momentum" else torch.optim.Adam(model.parameters(), lr=zoo.ADAM_LR))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if not train:
            with torch.no_grad():
                out = model(x)
            del out
        for _ in range(zoo.ITERS if train else 0):
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            del out, loss
    measured = collections.Counter()
    where = collections.defaultdict(collections.Counter)
    for _, _, size, _, _, op in zoo.tree_allocations(prof.profiler.kineto_results):
        if size > 0:
            measured[size] += 1
            where[size][op] += 1
    # the capture's new storages
    cap = capture_zoo.run_capture(row)
    captured = collections.Counter(s["bytes"] for i, s in enumerate(cap.storages)
                                   if i not in set(cap.steps[0]["alloc"]) and s["bytes"])
    print(f"{rid}: measured {sum(measured.values())} allocations, captured {sum(captured.values())}")
    extra = measured - captured
    for size, n in sorted(extra.items(), key=lambda kv: -kv[0] * kv[1])[:12]:
        print(f"  not captured: {n} x {size} B  ({', '.join(f'{o} x{c}' for o, c in where[size].most_common(2))})")
    for size, n in sorted((captured - measured).items(), key=lambda kv: -kv[0] * kv[1])[:6]:
        print(f"  captured, not measured: {n} x {size} B")


if __name__ == "__main__":
    main()
