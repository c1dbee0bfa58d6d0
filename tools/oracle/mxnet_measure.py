#!/usr/bin/env python3
"""MXNet 1.9 on the CPU as dnnmem's oracle: peak storage bytes of one
configuration, measured with MXNet's own accounting.

MXNet's profiler, with profile_memory=True, keeps one counter per device
("Memory: cpu/0"), raised by every Storage::Alloc and lowered by every Free
by the handle's byte size (src/profiler/storage_profiler.h, storage.cc,
1.9.1). On the CPU the storage manager is NaiveStorageManager (no pool): the
counter is the bytes the process holds in MXNet arrays, and its maximum is
the peak. Phase markers (a small array of a distinctive size, made and
freed between phases) split the counter's trace into phases.

One configuration per process (a fresh process: nothing cached):
  mxnet_measure.py run --kind symbol --model FILE --shape 8,3,224,224 --mode train
  mxnet_measure.py run --kind gluon --model resnet18_v1 --shape ... --mode train
  mxnet_measure.py all --out tests/validation/mxnet-cpu-1.9.jsonl   (resumable)
Each line of the output records the MXNet and numpy versions, the
configuration, the peak over the whole run, the peak from the first forward
on, and the counter at each marker.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MARK_BASE = 7777  # float32 elements of the marker arrays: 7777 + phase index

def parse_shape(s):
    return tuple(int(x) for x in s.split(','))

def run_one(a):
    os.environ.setdefault('OMP_NUM_THREADS', '2')
    if not a.mkldnn:  # MXNet's own CPU kernels: no oneDNN, no subgraph fusion
        os.environ['MXNET_MKLDNN_ENABLED'] = '0'
        os.environ['MXNET_SUBGRAPH_BACKEND'] = 'NONE'
    if a.engine == 'naive':  # synchronous: each array freed when Python drops it
        os.environ['MXNET_ENGINE_TYPE'] = 'NaiveEngine'
    import mxnet as mx
    import numpy as np
    prof = tempfile.mktemp(suffix='.json', prefix='mxprof')
    mx.profiler.set_config(profile_memory=True, profile_symbolic=False, profile_imperative=False,
                           profile_api=False, aggregate_stats=False, filename=prof)
    shape = parse_shape(a.shape)
    phases = []

    def mark(name):
        mx.nd.waitall()
        phases.append(name)
        m = mx.nd.zeros((MARK_BASE + len(phases),))
        m.wait_to_read()
        del m
        mx.nd.waitall()

    data = mx.nd.random.uniform(shape=shape)
    label = mx.nd.array(np.random.randint(0, 10, size=(shape[0],)).astype('float32'))
    mx.nd.waitall()
    mx.profiler.set_state('run')
    mark('start')
    if a.kind == 'symbol':
        sym = mx.sym.load(a.model)
        args = sym.list_arguments()
        label_names = [n for n in ('softmax_label',) if n in args]
        mod = mx.mod.Module(sym, data_names=['data'], label_names=label_names, context=mx.cpu())
        train = a.mode == 'train'
        mod.bind(data_shapes=[('data', shape)],
                 label_shapes=[(n, (shape[0],)) for n in label_names] or None,
                 for_training=train)
        mark('bind')
        mod.init_params(mx.init.Xavier())
        mark('init_params')
        if train:
            mod.init_optimizer(optimizer='sgd',
                               optimizer_params={'learning_rate': 0.01, 'momentum': 0.9})
            mark('init_optimizer')
        batch = mx.io.DataBatch([data], [label] if label_names else None)
        for it in range(a.iterations):
            mod.forward(batch, is_train=train)
            mark('forward%d' % it)
            if train:
                mod.backward()
                mark('backward%d' % it)
                mod.update()
                mark('update%d' % it)
            mod.get_outputs()[0].wait_to_read()
    else:
        from mxnet.gluon.model_zoo import vision
        from mxnet import gluon, autograd
        net = vision.get_model(a.model, classes=a.classes)
        net.initialize(mx.init.Xavier())
        if a.hybridize:
            net.hybridize(static_alloc=a.static_alloc, static_shape=a.static_alloc)
        mark('init')
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        trainer = gluon.Trainer(net.collect_params(), 'sgd',
                                {'learning_rate': 0.01, 'momentum': 0.9}) if a.mode == 'train' else None
        mark('trainer')
        for it in range(a.iterations):
            if a.mode == 'train':
                with autograd.record():
                    out = net(data)
                    loss = loss_fn(out, label)
                mark('forward%d' % it)
                loss.backward()
                mark('backward%d' % it)
                trainer.step(shape[0])
                mark('update%d' % it)
                del out, loss
            else:
                out = net(data)
                out.wait_to_read()
                mark('forward%d' % it)
                del out
    mx.nd.waitall()
    mark('end')
    mx.profiler.set_state('stop')
    mx.profiler.dump()
    with open(prof) as f:
        ev = [e for e in json.load(f)['traceEvents'] if e.get('ph') == 'C']
    os.unlink(prof)
    ev.sort(key=lambda e: e['ts'])
    vals = [list(e['args'].values())[0] for e in ev]
    # the markers: a rise of exactly (MARK_BASE + k) * 4 bytes and the fall after it
    at = {}
    prev = 0
    own = set()  # the markers' own values, left out of the peaks
    for i, v in enumerate(vals):
        d = v - prev
        k = d // 4 - MARK_BASE
        if d > 0 and d % 4 == 0 and 1 <= k <= len(phases) and phases[k - 1] not in at:
            at[phases[k - 1]] = (i, prev)
            own.add(i)
        prev = v
    vals = [prev_v if i in own else v for i, (v, prev_v) in enumerate(zip(vals, [0] + vals[:-1]))]
    if a.trace:  # every change of at least a.trace bytes, by phase (stderr)
        cur, prev = 'start', 0
        starts = {at[p][0]: p for p in at}
        for i, v in enumerate(vals):
            cur = starts.get(i, cur)
            if abs(v - prev) >= a.trace:
                print('%-14s %+12d %12d' % (cur, v - prev, v), file=sys.stderr)
            prev = v
    first_fwd = at.get('init_optimizer', at.get('init_params', at.get('trainer', (0, 0))))[0]
    peak = max(vals) if vals else 0
    peak_steps = max(vals[first_fwd:]) if vals else 0
    return {
        'mxnet': mx.__version__, 'numpy': np.__version__, 'python': sys.version.split()[0],
        'mkldnn_built': bool(mx.runtime.Features().is_enabled('MKLDNN')), 'mkldnn': a.mkldnn, 'engine': a.engine,
        'kind': a.kind, 'model': os.path.basename(a.model), 'shape': list(shape), 'mode': a.mode,
        'iterations': a.iterations, 'hybridize': a.hybridize if a.kind == 'gluon' else None,
        'peak_bytes': peak, 'peak_steps_bytes': peak_steps,
        'at_marks': {p: at[p][1] for p in phases if p in at},
    }

# the configurations of the committed reference (tests/validation/mxnet-cpu-1.9.jsonl)
SYMBOLS = '../shared/models/mxnet-symbol'
CONFIGS = []
for f, shp in [('resnet-18-symbol.json', '8,3,224,224'), ('resnet-50-symbol.json', '4,3,224,224'),
               ('mobilenet-symbol.json', '8,3,224,224'), ('squeezenet_v1.2-symbol.json', '8,3,224,224'),
               ('mobilefacenet-symbol.json', '8,3,112,112'),
               ('resnet-50-finetuned-mxnet1.2-symbol.json', '4,3,224,224'),
               ('mlp-legacy-v0.8-symbol.json', '64,784'),
               ('gluon-hybridsequential-lenet-symbol.json', '32,1,28,28')]:
    for mode in ('infer', 'train'):
        CONFIGS.append(['--kind', 'symbol', '--model', os.path.join(SYMBOLS, f), '--shape', shp,
                        '--mode', mode])

# the smallest graph of the FC backward's in-place rule (mxplan.c rule 3)
for mode in ('infer', 'train'):
    CONFIGS.append(['--kind', 'symbol', '--model', 'tests/models/mxnet/bn-conv-fc-symbol.json',
                    '--shape', '4,3,32,32', '--mode', mode])
CONFIGS.append(['--kind', 'symbol', '--model', os.path.join(SYMBOLS, 'gluon-resnet50-3d-video-symbol.json'),
                '--shape', '2,3,8,112,112', '--mode', 'infer'])
for net, shp in [('resnet18_v1', '8,3,224,224'), ('mobilenet0.25', '8,3,224,224'),
                 ('squeezenet1.1', '8,3,224,224')]:
    for mode in ('infer', 'train'):
        CONFIGS.append(['--kind', 'gluon', '--model', net, '--shape', shp, '--mode', mode])

# mxnet2 (2026-12-04): seeded random architectures and Gluon model-zoo networks exported
# as symbols (tools/oracle/mxnet_gen.py writes tests/models/mxnet/randnet-*, zoo-*), run
# through Module.bind/fit, two batch sizes each
GEN = 'tests/models/mxnet'
for seed in range(1, 9):
    for b in (8, 32):
        for mode in ('infer', 'train'):
            CONFIGS.append(['--kind', 'symbol', '--model', os.path.join(GEN, 'randnet-s%d-symbol.json' % seed),
                            '--shape', '%d,3,32,32' % b, '--mode', mode])
for net in ('resnet18_v1', 'resnet18_v2', 'mobilenet1.0', 'mobilenetv2_1.0', 'squeezenet1.1',
            'alexnet', 'vgg11', 'densenet121', 'inceptionv3'):
    side = 299 if net.startswith('inception') else 224
    for b in (2, 4):
        for mode in ('infer', 'train'):
            CONFIGS.append(['--kind', 'symbol', '--model', os.path.join(GEN, 'zoo-%s-symbol.json' % net),
                            '--shape', '%d,3,%d,%d' % (b, side, side), '--mode', mode])

# MXNet's own CPU kernels (the rows dnnmem is compared with); the default
# oneDNN build's rows are measured with --mkldnn 1 (printed only)
CONFIGS = [c + ['--mkldnn', '0'] for c in CONFIGS]

def key(cfg):
    return ' '.join(cfg)

def run_all(a):
    done = set()
    if os.path.exists(a.out):
        with open(a.out) as f:
            for line in f:
                if line.strip():
                    done.add(json.loads(line)['config'])
    for cfg in CONFIGS:
        if key(cfg) in done:
            continue
        try:
            p = subprocess.run([sys.executable, __file__, 'run'] + cfg, capture_output=True,
                               text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print('timeout:', key(cfg), file=sys.stderr)
            continue
        if p.returncode != 0:
            print('failed:', key(cfg), p.stderr.strip().splitlines()[-1:], file=sys.stderr)
            continue
        rec = json.loads(p.stdout.strip().splitlines()[-1])
        rec['config'] = key(cfg)
        with open(a.out, 'a') as f:
            f.write(json.dumps(rec, sort_keys=True) + '\n')
        print(key(cfg), rec['peak_bytes'], file=sys.stderr)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('cmd', choices=['run', 'all'])
    ap.add_argument('--kind', choices=['symbol', 'gluon'], default='symbol')
    ap.add_argument('--model')
    ap.add_argument('--shape')
    ap.add_argument('--mode', choices=['infer', 'train'], default='train')
    ap.add_argument('--iterations', type=int, default=2)
    ap.add_argument('--classes', type=int, default=1000)
    ap.add_argument('--hybridize', type=int, default=1)
    ap.add_argument('--static-alloc', type=int, default=0)
    ap.add_argument('--out', default='tests/validation/mxnet-cpu-1.9.jsonl')
    ap.add_argument('--timeout', type=int, default=600)
    ap.add_argument('--mkldnn', type=int, default=1, help='0: MXNET_MKLDNN_ENABLED=0, no subgraph backend')
    ap.add_argument('--engine', choices=['threaded', 'naive'], default='threaded',
                    help='naive: MXNET_ENGINE_TYPE=NaiveEngine')
    ap.add_argument('--trace', type=int, default=0, help='print changes of at least N bytes')
    a = ap.parse_args()
    if a.cmd == 'run':
        print(json.dumps(run_one(a), sort_keys=True))
    else:
        run_all(a)

if __name__ == '__main__':
    main()
