"""TensorFlow 2.x (tensorflow-cpu, Keras 3) on the CPU as an oracle for dnnmem.

    tf_measure.py measure [--python /tmp/venv-tf/bin/python] [--only SUBSTR] [--timeout S]
    tf_measure.py compare [--dnnmem build/dnnmem] [--check] [--brief] [REFS.jsonl]

What is measured (docs/validation-tf.md): TensorFlow's own accounting of its CPU
allocator. With TF_CPU_ALLOCATOR_USE_BFC=true, ProcessState::GetCPUAllocator puts a
BFCAllocator (allow_growth, TF_CPU_BFC_MEM_LIMIT_IN_MB, 64 GiB by default;
tensorflow/core/common_runtime/process_state.cc) under the CPU device, through which
every tensor an op outputs or allocates as a temp, every variable and every
host-side input tensor goes; tf.config.experimental.get_memory_info('CPU:0') reads
its AllocatorStats (bytes_in_use, peak_bytes_in_use: chunk sizes, 256 B rounded) and
reset_memory_stats resets the peak to the bytes in use.  A step is run once to trace
it and create the optimizer's slots, the peak reset, and the step run again: the
figure is the peak of that step, weights, slots and the batch included.

Configurations (one child process each, killed after --timeout; results appended to
tests/validation/tf-cpu.jsonl, so a run resumes where it stopped; each row records
the versions):
  fit      model.train_on_batch(x, y): Keras 3's make_train_function, the train step
           under tf.function that model.fit runs (jit_compile "auto" resolves to off on
           a CPU-only machine: keras/src/trainers/trainer.py), without tf.data's
           prefetch buffers
  tape     an eager tf.GradientTape step: forward, loss, tape.gradient,
           optimizer.apply_gradients
  call     model(x, training=False), eager
  predict  model.predict_on_batch(x): the predict step under tf.function
Models: Keras Applications built from config (weights=None) at a small image size,
seeded random functional models (RAND below) and the Keras JSONs of
../shared/models/keras-json that Keras 3 loads; each is saved as model.to_json() to
tests/models/keras-tf/NAME.json, the file dnnmem estimates.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFS = os.path.join(ROOT, "tests/validation/tf-cpu.jsonl")
MODELS = os.path.join(ROOT, "tests/models/keras-tf")
SHARED = os.path.join(ROOT, "..", "shared", "models", "keras-json")

# (name, how it is built, batches, modes)
ALL_MODES = ("fit", "tape", "call", "predict")
APPS = [
    ("mobilenetv2-i96", "app:MobileNetV2:96", (2,)),
    ("resnet50-i64", "app:ResNet50:64", (2,)),
]
# rand7-rand12: seeds added (tfrest) and first measured with the branch point e0ed537;
# rand13-rand18 (tffit2), first measured with e63cfe9
RAND = [("rand%d" % s, "rand:%d" % s, (4,)) for s in range(1, 19)]
# one layer's mechanism each: Input [32, 32, 16] -> the layer -> GlobalAveragePooling2D ->
# Dense(10, softmax) (micro_model)
MICRO = [("micro-%s" % n, "micro:" + n, (8,)) for n in ("conv", "bn", "silu", "gelu", "maxpool",
                                                        "convbn", "convsilu", "convgelu",
                                                        "convsigmoid")]
# Dense stacks ("mlp:IN:UNITS,..."): Input [IN] -> Dense(u, relu) for each u -> Dense(10,
# softmax); Keras' SGD order under tf.function (src/train/tf_fit.c) shows in their fit
MLP = [("mlp3-1024", "mlp:784:1024,1024,1024", (64,)),
       # one hidden layer: the variables' build history (tfrest, src/schedule/tfbuild.c)
       ("mlp1-1024", "mlp:784:1024", (32,))]
SHARED_JSON = [
    ("mnist_small_cnn", "json:mnist_small_cnn_keras2.15.json", (32,)),
    ("fashion_mnist_mlp", "json:fashion_mnist_mlp_keras3.json", (32,)),
]


def configs():
    for name, how, batches in RAND + SHARED_JSON + APPS + MICRO + MLP:
        for b in batches:
            for mode in ALL_MODES:
                yield {"id": "%s-%s-b%d" % (name, mode, b), "model": name, "build": how,
                       "batch": b, "mode": mode}


# ---------------------------------------------------------------- the child


def rand_model(keras, seed):
    """A seeded random functional CNN on 32x32x3: a stem, 2 to 4 blocks drawn from
    plain, residual (Add) and two-branch (Concatenate) ones, each with a drawn
    activation, BatchNormalization or none, pooling between some, and a head."""
    L = keras.layers
    r = random.Random(seed)
    acts = ("relu", "relu6", "elu", "gelu", "sigmoid", "tanh", "swish", "leaky_relu")

    def act(x):
        a = r.choice(acts)
        return L.LeakyReLU(0.1)(x) if a == "leaky_relu" else L.Activation(a)(x)

    def conv(x, c, k=3):
        x = L.Conv2D(c, k, padding="same", use_bias=r.random() < 0.5)(x)
        if r.random() < 0.6:
            x = L.BatchNormalization()(x)
        return act(x)

    inp = keras.Input((32, 32, 3), name="image")
    c = r.choice((8, 16, 24))
    x = conv(inp, c)
    for _ in range(r.randint(2, 4)):
        kind = r.choice(("plain", "res", "cat"))
        if kind == "plain":
            x = conv(x, c)
        elif kind == "res":
            y = conv(x, c)
            y = conv(y, c)
            x = L.Add()([x, y])
        else:
            y = conv(x, c // 2 or 1, 1)
            z = conv(x, c // 2 or 1, 3)
            x = L.Concatenate()([y, z])
            x = conv(x, c, 1)
        if r.random() < 0.5:
            x = r.choice((L.MaxPooling2D, L.AveragePooling2D))(2)(x)
        if r.random() < 0.4:
            c = min(64, c * 2)
            x = conv(x, c, 1)
    if r.random() < 0.5:
        x = L.GlobalAveragePooling2D()(x)
    else:
        x = L.Flatten()(x)
    if r.random() < 0.5:
        x = L.Dropout(0.3)(x)
    if r.random() < 0.5:
        x = act(L.Dense(r.choice((32, 64)))(x))
    out = L.Dense(10, activation="softmax")(x)
    return keras.Model(inp, out, name="rand%d" % seed)


def micro_model(keras, name):
    L = keras.layers
    body = {
        "conv": lambda i: L.Conv2D(16, 3, padding="same")(i),
        "bn": lambda i: L.BatchNormalization()(i),
        "silu": lambda i: L.Activation("silu")(i),
        "gelu": lambda i: L.Activation("gelu")(i),
        "maxpool": lambda i: L.MaxPooling2D(2)(i),
        # the layer on a tensor that needs a grad (tfrest: the tf.function grads of
        # Keras 3's BatchNormalization, silu and exact gelu, src/train/tf.c)
        "convbn": lambda i: L.BatchNormalization()(L.Conv2D(16, 3, padding="same")(i)),
        "convsilu": lambda i: L.Activation("silu")(L.Conv2D(16, 3, padding="same")(i)),
        "convgelu": lambda i: L.Activation("gelu")(L.Conv2D(16, 3, padding="same")(i)),
        # tffit2: Keras 3's sigmoid keeps its input as output._keras_logits (eager tape)
        "convsigmoid": lambda i: L.Activation("sigmoid")(L.Conv2D(16, 3, padding="same")(i)),
    }[name]
    i = keras.Input((32, 32, 16), name="x")
    x = L.GlobalAveragePooling2D()(body(i))
    return keras.Model(i, L.Dense(10, activation="softmax")(x), name="micro_" + name)


def build(keras, how):
    kind, _, rest = how.partition(":")
    if kind == "micro":
        return micro_model(keras, rest)
    if kind == "mlp":
        width, units = rest.split(":")
        L = keras.layers
        i = keras.Input((int(width),), name="x")
        x = i
        for u in units.split(","):
            x = L.Dense(int(u), activation="relu")(x)
        return keras.Model(i, L.Dense(10, activation="softmax")(x), name="mlp")
    if kind == "app":
        name, size = rest.split(":")
        return getattr(keras.applications, name)(weights=None, input_shape=(int(size), int(size), 3))
    if kind == "rand":
        return rand_model(keras, int(rest))
    if kind == "json":
        with open(os.path.join(SHARED, rest)) as f:
            cfg = json.load(f)
        # a Keras 3 file's compile_config makes model_from_json compile the model: its
        # optimizer (Adam in fashion_mnist_mlp_keras3.json) then makes two slots per
        # variable at once, which inference would carry and training's own optimizer
        # would not free; the measurement compiles (or not) as the mode says
        cfg.pop("compile_config", None)
        return keras.models.model_from_json(json.dumps(cfg))
    raise SystemExit("unknown model " + how)


def child(cfg):
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # oneDNN's kernels are on by default only on CPUs with AVX512_VNNI, AVX512_BF16 or
    # AMX (TF 2.9+ release notes); elsewhere (this tool's AVX2 EPYC) TF runs its Eigen
    # kernels, whose convolution gradients allocate a col_buffer of up to 30 MiB
    # (Conv2DBackpropInput/Filter temps, measured). The committed rows ran with oneDNN
    # on (micro-maxpool-call-b8 reproduces 690688 B with it, 659712 B without): set it
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    import numpy as np
    import tensorflow as tf
    import keras

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(0)
    mem = tf.config.experimental.get_memory_info
    model = build(keras, cfg["build"])
    path = os.path.join(MODELS, cfg["model"] + ".json")
    if not os.path.exists(path):
        os.makedirs(MODELS, exist_ok=True)
        with open(path, "w") as f:
            f.write(model.to_json())
    b = cfg["batch"]
    ishape = [b] + [int(d) for d in model.inputs[0].shape[1:]]
    idtype = model.inputs[0].dtype
    x = tf.random.uniform(ishape, 0, 10 if "int" in str(idtype) else 1, dtype=idtype)
    classes = int(model.outputs[0].shape[-1])
    y = tf.random.uniform([b], 0, classes, dtype=tf.int32)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    opt = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    mode = cfg["mode"]
    if mode == "fit":
        model.compile(optimizer=opt, loss=loss_fn)
        step = lambda: model.train_on_batch(x, y)
    elif mode == "tape":
        def step():
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
    elif mode == "call":
        step = lambda: model(x, training=False)
    else:
        step = lambda: model.predict_on_batch(x)
    out = step()  # traces the step, creates the optimizer's slots
    del out
    before = mem("CPU:0")["current"]
    tf.config.experimental.reset_memory_stats("CPU:0")
    if cfg.get("trace"):
        tf.profiler.experimental.start(cfg["trace"])
    out = step()
    info = mem("CPU:0")
    del out
    if cfg.get("trace"):
        tf.profiler.experimental.stop()
    end = mem("CPU:0")["current"]
    params = sum(int(np.prod(v.shape)) * 4 for v in model.weights if str(v.dtype) == "float32")
    return dict(cfg, peak_bytes=int(info["peak"]), bytes_before=int(before),
                end_bytes=int(end), param_bytes=params,
                input_shape=ishape, tensorflow=tf.__version__, keras=keras.__version__,
                python=sys.version.split()[0], numpy=np.__version__,
                onednn="TF_ENABLE_ONEDNN_OPTS=%s, IsMklEnabled %s" % (
                    os.environ["TF_ENABLE_ONEDNN_OPTS"], mkl_enabled()),
                threads=1, cpu=cpu_isa(), file="tests/models/keras-tf/%s.json" % cfg["model"])


def mkl_enabled():
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())


def cpu_isa():
    """The widest x86 vector ISA the CPU has (oneDNN picks its kernels, and some of
    their scratchpads' sizes, by it), and the core count."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("flags"):
                    flags = set(l.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    isa = next((i for i in ("amx_tile", "avx512f", "avx2", "avx") if i in flags), "unknown")
    return "%s, %d cores" % (isa, os.cpu_count() or 0)


def trace_events(logdir):
    """The CPU allocator's events from the profiler's XSpace (TF's memory profiler: each
    BFC allocation and deallocation as a MemoryAllocation / MemoryDeallocation event with
    requested_bytes, allocation_bytes (the chunk), bytes_allocated (in use after it),
    tf_op, region_type and tensor_shape), in time order."""
    import glob
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    xs = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        xs.ParseFromString(f.read())
    evs = []
    for p in xs.planes:
        sm = {k: v.name for k, v in p.stat_metadata.items()}
        em = {k: v.name for k, v in p.event_metadata.items()}
        for line in p.lines:
            for e in line.events:
                name = em.get(e.metadata_id, "")
                if name not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                st = {}
                for s in e.stats:
                    k = sm.get(s.metadata_id, "")
                    which = s.WhichOneof("value")
                    v = getattr(s, which) if which else None
                    if which == "ref_value":
                        v = sm.get(v, v)
                    st[k] = v
                evs.append((line.timestamp_ns + e.offset_ps // 1000, name, st))
    evs.sort(key=lambda t: t[0])
    return evs


def trace(a):
    """One configuration under the profiler: the tensors live at the step's peak."""
    cfg = next(c for c in configs() if c["id"] == a.id)
    logdir = "/tmp/tf_measure_trace_%s" % a.id
    cfg["trace"] = logdir
    p = subprocess.run([a.python, os.path.abspath(__file__), "child", json.dumps(cfg)],
                       capture_output=True, text=True, timeout=a.timeout)
    if p.returncode:
        raise SystemExit(p.stderr.strip().splitlines()[-1])
    row = json.loads(p.stdout.strip().splitlines()[-1])
    q = subprocess.run([a.python, "-c", "import sys, json; sys.path.insert(0, %r); import tf_measure; "
                        "print(json.dumps(tf_measure.trace_events(%r)))"
                        % (os.path.dirname(os.path.abspath(__file__)), logdir)],
                       capture_output=True, text=True)
    evs = json.loads(q.stdout)
    live, peak, at, cur = {}, -1, None, 0
    for i, (_, kind, st) in enumerate(evs):
        addr = st.get("addr")
        if kind == "MemoryAllocation":
            live[addr] = (i, st)
        else:
            live.pop(addr, None)
        if st.get("bytes_allocated", 0) > peak:
            peak, at = st["bytes_allocated"], dict(live)
    print("%s: measured peak %d; %d events in the step, peak %d in use at it" %
          (a.id, row["peak_bytes"], len(evs), peak))
    rows = sorted(at.values(), key=lambda v: -v[1].get("allocation_bytes", 0))
    for i, st in rows[: a.top]:
        print("  %10d (req %10d)  %-28s %-8s %s" % (st.get("allocation_bytes", 0), st.get("requested_bytes", 0),
              st.get("tf_op", "")[:28], st.get("region_type", ""), st.get("shape", "")))


# ---------------------------------------------------------------- measure


def load(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    return rows


def measure(a):
    done = {r["id"] for r in load(a.refs)}
    for cfg in configs():
        if cfg["id"] in done or (a.only and a.only not in cfg["id"]):
            continue
        t0 = time.time()
        try:
            p = subprocess.run([a.python, os.path.abspath(__file__), "child", json.dumps(cfg)],
                               capture_output=True, text=True, timeout=a.timeout)
            res = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else None
            err = None if res else (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        except subprocess.TimeoutExpired:
            res, err = None, "timeout after %ds" % a.timeout
        if res:
            row = json.loads(res)
            row["seconds"] = round(time.time() - t0, 1)
        else:
            row = dict(cfg, error=err[:300])
        with open(a.refs, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(row["id"], row.get("peak_bytes", row.get("error")), flush=True)


# ---------------------------------------------------------------- compare

EXEC = {"fit": "graph", "predict": "graph", "tape": "eager", "call": "eager"}


def estimate(dnnmem, row):
    train = row["mode"] in ("fit", "tape")
    cmd = [dnnmem, "estimate", os.path.join(ROOT, row["file"]), "--framework", "tensorflow",
           "--device", "cpu", "-b", str(row["batch"]), "--tf-execution", EXEC[row["mode"]],
           "--json"]
    if train:
        cmd += ["--mode", "train", "--optimizer", "sgd-momentum"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    d = json.loads(p.stdout)
    return d["needed_bytes"], None


def compare(a):
    rows = [r for r in load(a.refs) if "peak_bytes" in r]
    errs, bad = [], []
    for r in rows:
        est, why = estimate(a.dnnmem, r)
        if est is None:
            bad.append("%s: %s" % (r["id"], why))
            continue
        e = 100.0 * (est - r["peak_bytes"]) / r["peak_bytes"]
        errs.append((e, r["id"]))
        if not a.brief or abs(e) > 3:
            print("%-36s measured %12d  estimate %12d  %+7.2f%%" % (r["id"], r["peak_bytes"], est, e))
    for b in bad:
        print("NO ESTIMATE", b)
    if not errs:
        print("no rows")
        return 1 if a.check else 0
    s = sorted(abs(e) for e, _ in errs)
    med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    within = sum(1 for x in s if x <= 3.0)
    under = [i for e, i in errs if e < -5.0]
    print("tf-cpu: %d rows, median |error| %.2f%%, %d within 3%% (%.0f%%), %d under by > 5%%, "
          "worst %+.2f%%" % (len(errs), med, within, 100.0 * within / len(errs), len(under),
                             max((e for e, _ in errs), key=abs)))
    bars = med <= 1.0 and within >= 0.95 * len(errs) and not under
    print("issue 18's bars (median <= 1%%, 95%% within 3%%, none under by > 5%%): %s"
          % ("met" if bars else "NOT met (tests/validation/tf-expected-misses.txt lists the misses)"))
    if a.write_misses:
        with open(a.misses, "w") as f:
            f.write(MISSES_HEAD)
            for e, i in sorted(errs, key=lambda t: t[1]):
                if abs(e) > 3.0:
                    mode = i.split("-")[-2]
                    why = TRACED.get(i, WHY.get(mode, "untraced")).replace("{fit}", WHY["fit"])
                    f.write("%-36s # %+7.2f%% %s\n" % (i, e, why))
    if not a.check:
        return 0
    misses = set()
    if a.misses and os.path.exists(a.misses):
        with open(a.misses) as f:
            misses = {l.split()[0] for l in f if l.strip() and not l.startswith("#")}
    fail = [i for e, i in errs if abs(e) > 3.0 and i not in misses]
    gone = [i for e, i in errs if abs(e) <= 3.0 and i in misses]
    for i in fail:
        print("FAIL: %s misses by more than 3%% and is not listed in %s" % (i, a.misses))
    for i in gone:
        print("FAIL: %s is listed as a miss but is within 3%%" % i)
    return 1 if fail or gone or bad else 0


MISSES_HEAD = """# Rows of tests/validation/tf-cpu.jsonl that dnnmem misses by more than 3%
# (tools/oracle/tf_measure.py compare --write-misses); `make check` fails on a miss
# not listed here and on a listed row that no longer misses. Each row's cause as
# traced (tf_measure.py trace ID, with TF_ENABLE_ONEDNN_OPTS=1 as the rows ran);
# docs/validation-tf.md has the figures.
"""
# the causes, by mode where not traced per row
CHUNKS = ("BFC chunks from the allocation history: a request gets a free chunk unsplit "
          "when it is under twice the request; which chunks are free depends on every "
          "earlier allocation (the build's initializers, the warm-up step's small tensors), "
          "which dnnmem does not replay")
WHY_FIT_ORDER = ("Keras SGD's order under tf.function is modelled (src/train/tf_fit.c); "
                 "the executor's order of other ops is not")
EAGER_BN = ("candidates: the eager grads of ops other than silu and BatchNormalization "
            "(each grad op a new buffer: which of their intermediates live at once), and "
            "BFC chunks")
WHY = {
    "tape": "untraced since tfrest (the build history, Keras SGD's m swap, eager silu's and "
            "BatchNormalization's grads are modelled); " + EAGER_BN,
    "fit": "untraced since tfrest (the build history; Keras 3 BatchNormalization's, silu's and "
           "gelu's grads under tf.function, src/train/tf.c) and Keras SGD's order "
           "(src/train/tf_fit.c) were modelled; candidates: the executor's order of a node's grads, which follows the graph's edge "
           "order (which of dW and dx runs first; AssignAddVariableOp's copy of a variable a "
           "later input grad still reads), not modelled; run-to-run spread up to 7%; and " + CHUNKS,
    "call": "untraced",
    "predict": "untraced; under tf.function Grappler and the executor's order are modelled "
               "only as buffer forwarding",
}
# rows whose miss was traced (tf_measure.py trace ID)
WEIGHTS = ("weights' chunks: each variable's value is its initializer's output (AddV2), "
           "placed by the build's history: BFC hands out an unsplit chunk under twice the "
           "request (4376064 B for the 3211264 B kernel); dnnmem places the weights in "
           "fresh regions")
TRACED = {
    "rand7-predict-b4": "BFC layout (tfrest, trace rand7-predict-b4): dnnmem's requested peak is "
                        "about 1.17 MB (measured 1302528 B), but its two [4,32,32,32] outputs "
                        "(524288 B) get unsplit 1046016 and 917504 B chunks of the 2 MiB region; "
                        "TF's executor order (the two-branch block's convolutions, each "
                        "BatchNormalization's [C] tensors first) leaves exact holes",
    "fashion_mnist_mlp-fit-b32": "run-to-run spread: re-runs measured 22090240, 22215680, "
                                 "22932480, 23460608 B against the row's 23430400; the estimate "
                                 "(22476800 with the build history) lies among them",
    "rand2-fit-b4": "re-runs (tfrest) measured 2155776, 2196992, 2132480, 2130688 B against the "
                    "row's 2055424: the estimate is 9-15% under all, beyond the spread; " + "{fit}",
    "micro-bn-fit-b8": "BFC layout: dnnmem's requested peak is 1051712 B (measured 1075200, "
                       "-2.2%), but its small tensors take the 524288 B hole the BN output "
                       "left and the next one gets an unsplit 1 MiB chunk; TF's small [C] "
                       "tensors (moments, batchnorm's muls) come before the big ones",
    "fashion_mnist_mlp-call-b32": WEIGHTS,
    "fashion_mnist_mlp-predict-b32": WEIGHTS,
    "fashion_mnist_mlp-tape-b32": "untraced; and " + WEIGHTS,
    "rand5-fit-b4": WHY_FIT_ORDER + "; traced: both exact-gelu layers' gradient_tape/.../Gelu/Square "
                    "([4,16,16,48]) are made in the forward, before the loss, by the executor's "
                    "order (an op of forward tensors alone runs when they are ready), and a "
                    "gradient_tape [4,16,16,48] buffer is live at the peak; not modelled",
    "mlp3-1024-call-b64": "untraced; candidate: " + WEIGHTS + " (traced on fashion_mnist_mlp)",
    "mlp3-1024-predict-b64": "untraced; candidate: " + WEIGHTS + " (traced on fashion_mnist_mlp)",
    "mlp3-1024-tape-b64": "untraced; candidate: " + WEIGHTS + " (traced on fashion_mnist_mlp)",
    "rand4-tape-b4": "over since Keras SGD's eager temporaries (m * momentum, gradient * lr, "
                     "their difference: all three live at the peak for the [16384,64] kernel, "
                     "traced) were modelled: what dnnmem holds beyond that is untraced",
    "rand6-tape-b4": "BFC chunks (traced before tfrest: at the peak a conv output and a "
                     "sigmoid output sit in unsplit chunks, 733952 B and 721152 B for 393216 B "
                     "requests); with the build history replayed -5.6 -> -4.8%: untraced since; "
                     + EAGER_BN,
    "mobilenetv2-i96-tape-b2": "under since tfrest's eager BatchNormalization grad (-2.0 -> "
                               "-3.0%; micro-convbn-tape -10.5 -> +0.7%), untraced; candidate: "
                               "the depthwise convolutions' and relu6's eager grads",
    # tffit2: first measured with e63cfe9; fit re-run 4 more times (5 runs each)
    "rand18-tape-b4": "traced (tffit2, trace rand18-tape-b4; peak at the GlobalAveragePooling2D "
                      "grad's RealDiv, as dnnmem's): TF held two more [4,32,32,8] buffers than "
                      "dnnmem, the BatchNormalization outputs feeding sigmoids (Keras 3's "
                      "_keras_logits, now modelled: -11.6 -> -7.5%); the rest is a BFC chunk: the "
                      "[4,32,32,32] LeakyRelu output sits unsplit in a 1046784 B chunk (524288 B "
                      "requested), which dnnmem's replay does not reproduce",
    "rand16-tape-b4": "traced (tffit2): dnnmem's requested peak 8706316 B is about 1.5% under TF's "
                      "(6381028 B requested in the step plus 2460672 B before it); the over-estimate "
                      "is dnnmem's BFC placement (about 1 MB of chunk slack at its peak, TF's about "
                      "0.18 MB); not modelled",
    "rand13-fit-b4": "5 runs 1651968-1711616 B (3.6% apart): the estimate is 2.7-6.1% under all; " + "{fit}",
    "rand14-fit-b4": "5 runs 1934080-2081536 B (7.6% apart): the estimate is 2.2-9.1% under all; " + "{fit}",
    "rand15-fit-b4": "5 runs 1657088-1677568 B (1.2% apart): the estimate is 3.0-4.3% over all; " + "{fit}",
    "rand1-tape-b4": "traced (tffit2, trace rand1-tape-b4): TF's peak is the forward's end (event "
                     "200 of 1202, the last BiasAdd), requested about 11.83 MB against dnnmem's "
                     "12.07 MB (+2.0%, the rest dnnmem's chunk slack); dnnmem's peak is the "
                     "GlobalAveragePooling2D grad, where it still holds the three silu layers' "
                     "forward Sigmoid outputs, which TF frees when tape.gradient starts (events "
                     "236, 237, 250, before the BroadcastTo at 285) with two AddV2 and a conv "
                     "output the forward's Python references held: not modelled (tf_tape.def's "
                     "Silu row holds the sigmoid through the backward)",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--python", default="/tmp/venv-tf/bin/python")
    m.add_argument("--only", default="")
    m.add_argument("--timeout", type=int, default=300)
    m.add_argument("--refs", default=REFS)
    c = sub.add_parser("compare")
    c.add_argument("refs", nargs="?", default=REFS)
    c.add_argument("--dnnmem", default=os.path.join(ROOT, "build/dnnmem"))
    c.add_argument("--check", action="store_true")
    c.add_argument("--brief", action="store_true")
    c.add_argument("--write-misses", action="store_true")
    c.add_argument("--misses", default=os.path.join(ROOT, "tests/validation/tf-expected-misses.txt"))
    t = sub.add_parser("trace")
    t.add_argument("id")
    t.add_argument("--python", default="/tmp/venv-tf/bin/python")
    t.add_argument("--timeout", type=int, default=300)
    t.add_argument("--top", type=int, default=25)
    ch = sub.add_parser("child")
    ch.add_argument("cfg")
    a = ap.parse_args()
    if a.cmd == "child":
        print(json.dumps(child(json.loads(a.cfg))))
        return 0
    if a.cmd == "trace":
        return trace(a)
    return measure(a) if a.cmd == "measure" else compare(a)


if __name__ == "__main__":
    sys.exit(main() or 0)
