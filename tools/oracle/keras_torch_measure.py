"""Keras 3 on its torch backend (KERAS_BACKEND=torch, torch CPU) as an oracle: one step of a
Keras model file (tests/models/keras-tf/), peak CPU bytes from torch.profiler's memory events
(kineto, profile_memory=True: every c10 CPU allocation and free, as tools/measure_cpu.py) on
top of what lives before the step (the variables, the batch; in `fit` the optimizer's
momentums and the int64 labels).

    /tmp/venv-tf/bin/python tools/oracle/keras_torch_measure.py FILE BATCH call|predict|fit

(/tmp/venv-tf: tensorflow-cpu 2.21 brings keras 3.15.1; pip install torch==2.13.0.) `call` is
model(x) under torch.no_grad(), `predict` predict_on_batch (eager on torch), `fit`
train_on_batch (the torch trainer's eager step; jit_compile "auto" is off for torch) with
SGD(momentum 0.9). Prints one JSON row; docs/validation-tf.md has the figures.
"""
import os, sys, json
os.environ["KERAS_BACKEND"]="torch"
import torch, keras
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(1)
path, b, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
d=json.load(open(path)); d.pop("compile_config", None)
m=keras.models.model_from_json(json.dumps(d))
shape=[b]+[int(s) for s in m.inputs[0].shape[1:]]
x=torch.rand(shape)
y=torch.randint(0, int(m.outputs[0].shape[-1]), (b,))
if mode=="fit":
    m.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss=keras.losses.SparseCategoricalCrossentropy())
    step=lambda: m.train_on_batch(x, y)
elif mode=="call":
    def step():
        with torch.no_grad(): return m(x, training=False)
else:
    step=lambda: m.predict_on_batch(x)
r=step(); del r
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    r=step(); del r
evs=[]
for i,e in enumerate(prof.profiler.kineto_results.events()):
    nb=int(e.nbytes() or 0)
    if nb and str(e.device_type()).endswith("CPU"): evs.append((e.start_ns() if hasattr(e,"start_ns") else e.start_us(), i, nb))
evs.sort(); run=pk=0
for _,_,nb in evs: run+=nb; pk=max(pk,run)
import math; params=sum(math.prod(v.shape)*4 for v in m.weights)
before=params+x.numel()*4+(params+b*8 if mode=="fit" else 0)
print(json.dumps({"id":"%s-%s-b%d"%(os.path.basename(path)[:-5],mode,b),"file":path,"mode":mode,"batch":b,
                  "peak_bytes":before+pk,"bytes_before":before,"peak_rel":pk,"param_bytes":params,
                  "torch":torch.__version__,"keras":keras.__version__,"backend":"torch","threads":1}))
