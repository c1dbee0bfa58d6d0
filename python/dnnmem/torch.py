"""Capture a PyTorch model's step on the meta device: every aten op of the forward, the
loss, the backward and the optimizer step, each tensor's storage, what autograd saves and
when each storage dies, with no weights, no compute and no GPU; written as a capture file
(docs/capture-format.md) that dnnmem estimates like any model file:

    import torch, torchvision, dnnmem.torch
    with torch.device("meta"):
        model = torchvision.models.resnet18()
    x = torch.empty(2, 3, 224, 224, device="meta")
    y = torch.empty(2, dtype=torch.long, device="meta")
    cap = dnnmem.torch.capture(model, x, target=y, loss=torch.nn.functional.cross_entropy,
                               optimizer=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9))
    cap.save("step.dnnmem")        # dnnmem estimate step.dnnmem --gpu A100-80GB
    dnnmem.estimate(cap.path_or_bytes(), device="cpu")

How (torch.utils._python_dispatch.TorchDispatchMode): each op's outputs whose storage
(untyped_storage, identified by its StorageImpl) is new were allocated by it; a weakref
finalizer on the storage's Python object (which PyTorch keeps while the StorageImpl lives)
reports its death, attributed to the op it followed; torch.autograd.graph.saved_tensors_hooks
reports what autograd saves; mutable arguments in an op's schema are its in-place writes.
"""
import contextlib
import copy
import json
import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

FORMAT_VERSION = 2  # 2: sizes may be functions of the dims (dnnmem.dims)


class CaptureError(RuntimeError):
    """The model cannot be captured: the op and module that failed, and what to do."""


def _dtype_name(dt):
    return str(dt).replace("torch.", "")


def _short(func):
    name = str(func)  # "aten.convolution.default"
    return name.split(".")[1] if name.startswith("aten.") else name


_CONV_OPS = (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default)


def _conv_facts(func, args, kwargs, out):
    """What the device's convolution kernel choice reads (the replay's oneDNN rule,
    src/estimate/captured.c): the sizes of input, weight and output, stride, dilation,
    padding, groups, transposed, dtype."""
    named = {a.name: (args[i] if i < len(args) else kwargs.get(a.name))
             for i, a in enumerate(func._schema.arguments)}
    x, w = named["input"], named["weight"]
    facts = {"input": list(x.shape), "weight": list(w.shape), "stride": list(named["stride"]),
             "dilation": list(named["dilation"]), "padding": list(named["padding"]),
             "groups": int(named["groups"]),
             "transposed": bool(named["transposed"]), "dtype": _dtype_name(x.dtype)}
    # the layout the CPU kernels pick by: mkldnn_conv_use_channels_last and
    # thnn_conv_use_channels_last (aten/src/ATen/native/ConvUtils.h) read
    # input.suggest_memory_format() and weight.suggest_memory_format()
    facts["channels_last"] = _channels_last(x) or _channels_last(w)
    facts["weight_channels_last"] = _channels_last(w)  # weight.contiguous(channels_last) copies none
    if func is torch.ops.aten.convolution.default:
        facts["bias"] = named.get("bias") is not None
    else:  # convolution_backward: which of grad_input, grad_weight, grad_bias it makes
        facts["output_mask"] = [bool(m) for m in named["output_mask"]]
        facts["grad_output_channels_last"] = _channels_last(named["grad_output"])
        facts["bias"] = bool(named["output_mask"][2])
    out0 = out if isinstance(out, torch.Tensor) else (
        out[0] if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor) else None)
    if func is torch.ops.aten.convolution.default and out0 is not None:
        facts["output"] = list(out0.shape)
    elif func is torch.ops.aten.convolution_backward.default:
        facts["output"] = list(named["grad_output"].shape)
    return facts


def _dense(t):
    """TensorImpl::is_non_overlapping_and_dense: its elements fill its storage's span once
    (strides a permutation of a contiguous tensor's), from sizes and strides alone."""
    import torch._prims_common as pc
    dense = getattr(pc, "is_non_overlapping_and_dense_or_false", None)  # its name in torch 2.13
    return (dense or pc.is_non_overlapping_and_dense)(t)


def _channels_last(t):
    """c10's suggest_memory_format(t) == ChannelsLast for a 4-D tensor (its strides ordered as
    NHWC's), as torch._prims_common.suggest_memory_format computes it."""
    if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.layout != torch.strided:
        return False
    try:
        from torch._prims_common import suggest_memory_format
        return suggest_memory_format(t) == torch.channels_last
    except ImportError:  # older torch: the plain test
        return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


# Ops whose meta kernel takes bfloat16 only (the CUDA kernel's constraint) where the CPU's
# takes float32 too: aten._grouped_mm (transformers 5's grouped_mm experts, which it picks
# on the CPU from torch 2.9). The capture asks the meta kernel for the output's shape with
# bfloat16 stand-ins of the float operands and makes the output in the operands' dtype.
_BF16_META = (torch.ops.aten._grouped_mm.default,)


def _bf16_meta(func, args, kwargs):
    dtypes = [a.dtype for a in args if isinstance(a, torch.Tensor) and a.dtype.is_floating_point]
    if not dtypes or all(d == torch.bfloat16 for d in dtypes):
        raise RuntimeError(f"{func}: the meta kernel refused its operands")

    def stand_in(a):
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point:
            return torch.empty_strided(a.shape, a.stride(), dtype=torch.bfloat16, device=a.device)
        return a
    out = func(*[stand_in(a) for a in args], **{k: stand_in(v) for k, v in kwargs.items()})
    dt = kwargs.get("out_dtype") or dtypes[0]
    return torch.empty(out.shape, dtype=dt, device=out.device)


class _Functions(TorchFunctionMode):
    """What the recorder, below the autograd and autocast keys, cannot see or decide:

    - torch.autocast turned on inside the step for a device its tensors are not on is
      refused: it casts nothing there (meta tensors, or a fake "cpu" step under "cuda"
      autocast); on a capture's fake device (capture(device=...)) it runs as it does there;
    - F.scaled_dot_product_attention runs the kernel the CPU picks, not the meta device's
      (meta's _fused_sdp_choice is the math kernel whatever the inputs; attention.cpp): the
      CPU's choice is asked of small CPU stand-ins with the same batch, heads, head dims,
      dtypes, mask, dropout and causality (sdp_utils_cpp.cpp reads no sequence length but
      its being nonzero), and where it is the flash kernel, the step runs
      aten._scaled_dot_product_flash_attention_for_cpu on the meta inputs, after the boolean
      mask's conversion to an additive one (convert_boolean_attn_mask), as
      at::scaled_dot_product_attention does on the CPU."""

    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        off = _autocast_elsewhere(self.cap.device)
        if off:
            where = self.cap.modules[-1] if self.cap.modules else "the top level"
            raise CaptureError(f"dnnmem.torch.capture: {getattr(func, '__name__', func)} in {where} runs "
                               f"under torch.autocast({off!r}), which casts nothing on the step's "
                               f"{self.cap.device} tensors (its casts would be silently absent): "
                               f"capture with device={off!r} (autocast is modelled on a capture's "
                               f"device only)")
        if func is torch.nn.functional.scaled_dot_product_attention:
            out = _sdpa_as_cpu(self.cap, *args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


def _sdpa_as_cpu(cap, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
    """The CPU's sdpa on meta inputs (_Functions), or None where the meta device's own path
    is the CPU's too (the math kernel) or the inputs are not plain meta tensors."""
    ts = [query, key, value] + ([attn_mask] if attn_mask is not None else [])
    if not all(isinstance(t, torch.Tensor) and t.device.type in ("meta", "cpu") and t.dim() == 4
               for t in ts[:3]) or cap.device not in ("meta", "cpu") \
            or (attn_mask is not None and not isinstance(attn_mask, torch.Tensor)):
        return None

    cast = _autocast_cast(cap)

    def stand_in(t, seq_dims):  # the same sizes but 1 (or 0) along the sequence dims
        return torch.zeros([min(n, 1) if d >= t.dim() - seq_dims else n for d, n in enumerate(t.shape)],
                           dtype=cast(t).dtype)
    with _disable_current_modes():  # the stand-ins are not the step's
        q, k, v = (torch.zeros([*t.shape[:-2], min(t.shape[-2], 1), t.shape[-1]], dtype=cast(t).dtype)
                   for t in (query, key, value))  # the sequence dim (-2) 1, the head dim kept
        m = stand_in(attn_mask, 2) if attn_mask is not None else None
        choice = torch.ops.aten._fused_sdp_choice(q, k, v, m, dropout_p, is_causal, scale=scale,
                                                  enable_gqa=enable_gqa)
    if choice != 1:  # SDPBackend.flash_attention (its CPU kernel takes grouped k and v as they are)
        return None
    cap.sdpa_cpu += 1
    # under the CPU's autocast, sdpa is a lower_precision_fp op (autocast_mode.cpp): its
    # floating arguments are cast first, as the AutocastCPU kernel does before the choice
    query, key, value = cast(query), cast(key), cast(value)
    attn_mask = cast(attn_mask) if attn_mask is not None else None
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.where(attn_mask.logical_not(), float("-inf"),
                                torch.scalar_tensor(0.0, dtype=query.dtype, device=attn_mask.device))
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]


def _autocast_cast(cap):
    """What the CPU's autocast does to a lower_precision_fp op's argument on this step
    (cached_cast, ATen/autocast_mode.h: a floating tensor on the device, not float64, to
    the autocast dtype; anything else unchanged), as a function; the identity when it is
    off. Only the functions the recorder runs above the autocast key use it."""
    if cap.device != "cpu" or not _autocast_enabled("cpu"):
        return lambda t: t
    dt = torch.get_autocast_dtype("cpu")
    return lambda t: (t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point()
                      and t.dtype not in (torch.float64, dt) and t.device.type == "cpu" else t)


class _Recorder(TorchDispatchMode):
    """Records storages and steps; see the module's docstring."""

    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "profiler":  # record_function's ranges: no memory
            return func(*args, **kwargs)
        cap = self.cap
        flat_in, _ = tree_flatten((args, kwargs))
        step = cap.open_step(str(func))
        ins = [cap.storage_of(t, step) for t in flat_in if isinstance(t, torch.Tensor)]
        try:
            try:
                out = func(*args, **kwargs)
            except RuntimeError:
                if func not in _BF16_META:
                    raise
                out = _bf16_meta(func, args, kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised with the op and the module
            where = step.get("module") or "the top level"
            raise CaptureError(
                f"dnnmem.torch.capture: {func} in {where} ({cap.phase}) cannot run on the meta "
                f"device: {str(e).splitlines()[0] if str(e) else type(e).__name__}; the step must "
                f"not read tensor values (.item(), .tolist(), data-dependent shapes) nor call "
                f"custom device kernels: capture the model without them") from e
        flat_out, _ = tree_flatten(out)
        outs = []
        for t in flat_out:
            if isinstance(t, torch.Tensor):
                outs.append(cap.output(t, step))
        writes = []
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                v = args[i] if i < len(args) else kwargs.get(a.name)
                for t in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(t, torch.Tensor):
                        writes.append(cap.storage_of(t))
        step["in"] = list(dict.fromkeys(s for s in ins if s is not None))  # argument order
        step["out"] = list(dict.fromkeys(s for s in outs if s is not None))
        if writes:
            step["write"] = list(dict.fromkeys(s for s in writes if s is not None))
        cap.mark_accumulation(func, args, step)
        if func in _CONV_OPS:
            step["conv"] = _conv_facts(func, args, kwargs, out)
        return out


class Capture:
    """A captured step: .data is the capture file's object (docs/capture-format.md)."""

    def __init__(self, model_name, mode, iterations, batch, optimizer):
        self.storages = []      # the file's storages, by id
        self.steps = []
        self.live = {}          # StorageImpl address -> id, while it lives
        self.phase, self.iteration = "setup", 1
        self.modules = []       # the module stack (forward pre/post hooks)
        self.pending_frees = []
        self.names = set()
        self.node_ids = {}      # (iteration, id(autograd node)) -> its number
        self.made_by = {}       # storage id -> the node number of the backward step that made it
        self.header = {"format": "dnnmem-capture", "version": FORMAT_VERSION,
                       "producer": f"dnnmem.torch {__import__('dnnmem').__version__}",
                       "torch": torch.__version__, "model": model_name, "mode": mode, "iterations": iterations}
        if batch:
            self.header["batch"] = batch
        if optimizer:
            self.header["optimizer"] = optimizer
        self.steps.append({"phase": "setup", "iteration": 1, "alloc": []})
        self._fitted = None     # the file's object when its sizes were fitted (dnnmem.dims)
        self.sdpa_cpu = 0       # F.scaled_dot_product_attention calls run as the CPU's flash kernel
        self.device = "meta"    # the model's tensors' device type: meta, or a fake device

    # ---- storages ----
    def _key(self, t):
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse and other storage-less tensors
            return None, None
        return st._cdata, st

    def storage_of(self, t, step=None):
        """The id of t's storage. One not seen before was made where no op shows it: by
        torch.tensor() from Python data (the factory runs below the dispatch mode; the op
        reading it, lift_fresh, is the first to show it), so it is allocated at this step;
        without a step (writes, saves), at setup."""
        key, st = self._key(t)
        if key is None:
            return None
        sid = self.live.get(key)
        if sid is None:
            kind = {"forward": "activation", "loss": "activation", "setup": "buffer"}.get(
                self.phase, "temporary")
            sid = self.register(t, st, key, kind, f"external#{len(self.storages)}",
                                step if step is not None else self.steps[0])
        return sid

    def unique(self, name):
        """name, or name@2, name@3 ... (the file's names are unique: a later iteration's
        .grad is another storage of the same name)"""
        base, k = name, 1
        while name in self.names:
            k += 1
            name = f"{base}@{k}"
        self.names.add(name)
        return name

    def register(self, t, st, key, kind, name, step):
        sid = len(self.storages)
        name = self.unique(name)
        self.storages.append({"name": name, "kind": kind, "bytes": int(st.nbytes()),
                              "dtype": _dtype_name(t.dtype), "shape": list(t.shape),
                              "device": "model" if t.device.type == self.device else "host"})
        self.live[key] = sid
        weakref.finalize(st, self._died, key, sid)
        step.setdefault("alloc", []).append(sid)
        if "_node" in step:
            self.made_by[sid] = step["_node"]
        return sid

    def _died(self, key, sid):
        if self.live.get(key) == sid:
            del self.live[key]
        self.pending_frees.append(sid)

    def output(self, t, step):
        key, st = self._key(t)
        if key is None:
            return None
        sid = self.live.get(key)
        if sid is not None and self.storages[sid]["bytes"] != st.nbytes():
            # resized in place (an out= op): the old bytes freed, new ones allocated
            self.pending_frees.append(sid)
            self.flush_frees(step)
            del self.live[key]
            sid = None
        if sid is None:
            kind = {"forward": "activation", "loss": "activation"}.get(self.phase, "temporary")
            name = f"{step['module'] + '/' if step.get('module') else ''}{_short(step['op'])}" \
                   f"#{len(self.steps) - 1}.out{len(step.get('alloc', []))}"
            sid = self.register(t, st, key, kind, name, step)
        return sid

    # ---- steps ----
    def flush_frees(self, step=None):
        """Frees seen since the last op belong after it (its "free" list)."""
        if not self.pending_frees:
            return
        step = step or self.steps[-1]
        step.setdefault("free", []).extend(self.pending_frees)
        self.pending_frees = []

    def open_step(self, op):
        self.flush_frees()
        step = {"phase": self.phase, "iteration": self.iteration, "op": op}
        if self.phase in ("forward", "loss") and self.modules:
            step["module"] = self.modules[-1]
        elif self.phase == "backward":
            node = torch._C._current_autograd_node()
            if node is not None:
                step["module"] = node.name()
                # the node instance (its Python wrapper is cached on the C++ node, which
                # the graph task keeps alive during the backward): which node made what
                step["_node"] = self.node_ids.setdefault((self.iteration, id(node)), len(self.node_ids))
        self.steps.append(step)
        return step

    def mark_accumulation(self, func, args, step):
        """Mark the autograd engine's own gradient sums that the real engine makes in place:
        InputBuffer::accumulate (torch/csrc/autograd/input_buffer.cpp) runs `old + var` after
        a node returns, where `old` is the gradient an earlier node put in the next node's
        buffer and `var` the one this node just made. Outside a capture it adds into `old` in
        place (old.add_(var)) when can_accumulate_inplace(old) holds: not a subclass, dense
        and non-overlapping, and the last reference to it and to its storage; under a
        dispatch mode isTensorSubclassLike is true for every tensor
        (ATen/TensorSubclassLikeUtils.h), so the capture sees a new buffer. The replay
        (src/estimate/captured.c) applies the real rule to steps marked "accumulate".

        A view never passes: a view op's output keeps its base alive (the view's autograd
        meta holds `base_`, torch/csrc/autograd/variable.h ViewInfo, also under no_grad), so
        its storage's use count is 2. That is a tied weight's gradient from an nn.Linear
        (TBackward0's `grad.t()`) or a broadcast parameter's (the engine's sum_to, a view of
        the keepdim sum): there the real engine sums out of place, as captured (measured,
        python/tests/test_capture.py test_shared_weight_gradient_sum)."""
        if func is not torch.ops.aten.add.Tensor or self.phase != "backward" or len(step["in"]) != 2:
            return
        node = step.get("_node")
        made = self.made_by
        old = step["in"][0]
        t = args[0] if args else None
        if not isinstance(t, torch.Tensor) or t._is_view() or not _dense(t):
            return
        # `old` is a gradient an earlier node made (a passthrough node such as AddBackward0
        # hands on `var` unchanged, so only `old`'s maker is checked)
        if node is not None and made.get(old) not in (None, node):
            step["accumulate"] = True

    def saved(self, t):
        key, _ = self._key(t)
        sid = self.live.get(key) if key is not None else None
        if sid is not None:
            self.steps[-1].setdefault("save", []).append(sid)
        return t

    def set_kind(self, t, kind, name=None):
        key, _ = self._key(t)
        sid = self.live.get(key) if key is not None else None
        if sid is not None and self.storages[sid]["kind"] in ("activation", "temporary"):
            self.storages[sid]["kind"] = kind
            if name:
                self.names.discard(self.storages[sid]["name"])
                self.storages[sid]["name"] = self.unique(name)

    @property
    def data(self):
        if self._fitted is not None:
            return self._fitted
        self.flush_frees()
        if self.sdpa_cpu:
            self.header["sdpa"] = {"calls": self.sdpa_cpu, "kernel": "cpu"}
        steps = [{k: v for k, v in s.items() if not k.startswith("_")} for s in self.steps]
        return dict(self.header, storages=self.storages, steps=steps)

    def to_json(self):
        return json.dumps(self.data, separators=(",", ":"))

    def save(self, path):
        with open(path, "w") as f:
            f.write(self.to_json())
        self.path = path
        return path

    def estimate(self, **options):
        """dnnmem.estimate of this capture (options by the CLI's names: device="cpu", gpu=...)."""
        import dnnmem
        return dnnmem.estimate(dnnmem.load(self.to_json().encode(), self.header["model"] + ".dnnmem"),
                               **options)


# The devices a capture runs on: meta, or FakeTensors of a device (meta storages that say
# they are on it, torch._subclasses.fake_tensor), on which that device's autocast runs:
# at::autocast's casts test the tensor's device (is_autocast_eligible, autocast_mode.h:
# tensor.is_cpu() / is_cuda(), which a FakeTensor answers with its fake device), and its
# AutocastCPU / AutocastCUDA dispatch keys come from that device (the meta device has none).
_DEVICES = ("meta", "cpu", "cuda")
_AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)  # torch.autocast's supported dtypes


def _to_fake(model, inputs, mode, device):
    """A copy of the meta model and the meta inputs as FakeTensors of `device` (tied
    parameters stay tied)."""
    from torch._subclasses.fake_tensor import FakeTensor
    dev, memo = torch.device(device), {}

    def fake(t):
        if id(t) not in memo:
            memo[id(t)] = FakeTensor(mode, t.detach(), dev)
            if isinstance(t, torch.nn.Parameter):
                memo[id(t)] = torch.nn.Parameter(memo[id(t)], requires_grad=t.requires_grad)
        return memo[id(t)]
    model = copy.deepcopy(model)
    for m in model.modules():
        for table in (m._parameters, m._buffers):
            for n, t in table.items():
                if t is not None:
                    table[n] = fake(t)
    return model, [fake(x) if isinstance(x, torch.Tensor) else x for x in inputs]


@contextlib.contextmanager
def _fake_cuda_amp(device):
    """torch.autocast("cuda") and GradScaler("cuda") turn themselves off where CUDA is not
    available (torch/amp/autocast_mode.py: amp_definitely_not_available); on a fake "cuda"
    step they are to run as on a GPU, so that test answers no while the step runs."""
    if device != "cuda":
        yield
        return
    import torch.cuda.amp.common as common
    orig, orig_bf16 = common.amp_definitely_not_available, torch.cuda.is_bf16_supported
    common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda *a, **k: True
    try:
        yield
    finally:
        common.amp_definitely_not_available, torch.cuda.is_bf16_supported = orig, orig_bf16


def _to_meta(model, inputs):
    if any(p.device.type != "meta" for p in model.parameters()):
        model = copy.deepcopy(model).to("meta")
    metas = [x.to("meta") if isinstance(x, torch.Tensor) and x.device.type != "meta" else x
             for x in inputs]
    return model, metas


@contextlib.contextmanager
def _module_names(model, cap):
    names = {m: n for n, m in model.named_modules()}

    def pre(m, _args):
        cap.modules.append(names.get(m, type(m).__name__))

    def post(m, _args, _out):
        if cap.modules:
            cap.modules.pop()

    hooks = [m.register_forward_pre_hook(pre) for m in names]
    hooks += [m.register_forward_hook(post) for m in names]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


@contextlib.contextmanager
def _host_rng_states(cap):
    """torch.get_rng_state() makes its CPU tensor below the dispatcher, so no op shows it: a
    copy of the CPU generator's state (5056 B for mt19937), which torch.utils.checkpoint's
    preserve_rng_state keeps from each checkpointed forward until its recomputation, and
    torch.random.fork_rng makes again there (torch/utils/checkpoint.py, torch/random.py).
    Each call is recorded as a step of its own that allocates it (a host storage: left out
    of a CUDA estimate, counted with --device cpu). fork_rng skips everything for
    device_type "meta" (the recomputation of a meta model); the capture takes the CPU
    generator's state there as a CPU or CUDA run does, and drops it when the block ends."""
    import torch.random as trandom
    orig, orig_fork = torch.get_rng_state, trandom.fork_rng

    @contextlib.contextmanager
    def fork(devices=None, enabled=True, *args, device_type=None, **kw):
        if not (enabled and device_type == "meta"):
            with orig_fork(devices, enabled, *args, device_type=device_type, **kw):
                yield
            return
        state = torch.get_rng_state()  # noqa: F841 - held while the block runs
        try:
            yield
        finally:
            del state

    def recorded():
        t = orig()
        cap.flush_frees()
        step = {"phase": cap.phase, "iteration": cap.iteration}
        cap.steps.append(step)
        st = t.untyped_storage()
        cap.register(t, st, st._cdata, "temporary", "torch.get_rng_state", step)
        return t
    torch.get_rng_state = trandom.get_rng_state = recorded
    trandom.fork_rng = fork
    try:
        yield
    finally:
        torch.get_rng_state = trandom.get_rng_state = orig
        trandom.fork_rng = orig_fork


def capture(model, example_inputs, loss=None, optimizer=None, target=None, steps=2, path=None,
            kwargs=None, dims=None, grad_accum=1, device=None, autocast=None, grad_scaler=None):
    """Run `steps` training steps (or, without loss, one inference forward under no_grad)
    of `model` on the meta device and record them.

    model: an nn.Module, ideally built under `with torch.device("meta")` (one with real
    weights is deep-copied to meta). example_inputs: a tensor or a tuple of them, passed to
    model(*inputs). loss: loss(output, target) or loss(output) -> a scalar tensor; with it
    each step is zero_grad, forward, loss, backward, optimizer.step (as a training loop
    writes it: the output and the loss are held until the step ends). optimizer: a
    function of the parameters returning a torch.optim.Optimizer (or None: no step).
    kwargs: keyword inputs, model(*inputs, **kwargs) (tensors among them are inputs too).
    dims: {"batch": 0, "seq": 1, ...}, a name for an axis of the inputs and the target: the
    step is captured at other sizes of those axes too and every size is written as a
    function of the dims (dnnmem.dims), so that --batch-size, --seq-len and --dim NAME=V,
    sweeps and the max searches work on the one capture.
    grad_accum: micro-batches per optimizer step; each runs forward, loss / grad_accum and
    backward, its output and loss held until the next one's forward returns (as
    `out = model(x)` in a loop rebinds them), the gradients summed into .grad.
    device: "meta" (the default), "cpu" or "cuda": the step's tensors are FakeTensors of
    that device (meta storages), so that its torch.autocast runs as it does there. Called
    under torch.autocast(D, ...), the default is D and the whole step runs under it.
    autocast: (device_type, dtype), e.g. ("cpu", torch.bfloat16): each forward and loss run
    under torch.autocast(device_type, dtype) (the AMP recipe's loop; backward and the
    optimizer step outside it); device defaults to device_type.
    grad_scaler: True or a dict of torch.amp.GradScaler's arguments (init_scale, ...): the
    loop is the AMP recipe's, scaler.scale(loss).backward(), scaler.step(optimizer),
    scaler.update(), on the step's device (cpu or cuda: not meta), its scale, growth tracker,
    found_inf and unscale's temporaries captured as they run. The gradients are assumed
    finite (scaler.step reads found_inf.item(), a value a capture has not): the optimizer
    always steps, and the file says so ("grad_scaler": {"assumes": "finite"}).
    Returns a Capture; with `path`, also written there."""
    if not isinstance(grad_accum, int) or grad_accum < 1:
        raise ValueError(f"grad_accum {grad_accum!r}: a number of micro-batches >= 1")
    device, autocast = _device_of(device, autocast)
    scaler_args = _grad_scaler_args(grad_scaler, device, loss, optimizer)
    if device == "cuda" and loss is not None:
        # autograd's engine runs a cuda tensor's backward on the device's thread, which asks the
        # CUDA runtime for the device (hasPrimaryContext): no GPU, no backward
        raise CaptureError("dnnmem.torch.capture: device 'cuda' captures inference only (autograd's "
                           "backward on cuda tensors needs a GPU); train: capture with device='cpu'")
    inputs = list(example_inputs) if isinstance(example_inputs, (tuple, list)) else [example_inputs]
    kwargs = dict(kwargs or {})
    names = list(kwargs)
    model, metas = _to_meta(model, inputs + [kwargs[k] for k in names])
    inputs, kwargs = metas[:len(inputs)], dict(zip(names, metas[len(inputs):]))
    if isinstance(target, torch.Tensor) and target.device.type != "meta":
        target = target.to("meta")
    run = _Run(device, autocast, scaler_args)
    if run.fake is not None:
        model, metas = _to_fake(model, [*inputs, *kwargs.values(), target], run.fake, device)
        inputs, kwargs, target = metas[:len(inputs)], dict(zip(names, metas[len(inputs):-1])), metas[-1]
    if not dims:
        cap = _capture_once(model, inputs, kwargs, target, loss, optimizer, steps, grad_accum, run)
    else:
        cap = _capture_dims(model, inputs, kwargs, target, loss, optimizer, steps, grad_accum, dims, run)
    if path:
        cap.save(path)
    return cap


def _capture_dims(model, inputs, kwargs, target, loss, optimizer, steps, grad_accum, dims, run):
    """The step at the dims' captured values, its sizes fitted as functions of the dims
    (dnnmem.dims.combine runs it at the other values)."""
    from . import dims as _dims
    if not isinstance(dims, dict) or not dims or not all(
            isinstance(n, str) and n.isidentifier() and isinstance(a, int) and a >= 0
            for n, a in dims.items()):
        raise ValueError("dims: a dict of a name and an axis of the inputs, e.g. {'batch': 0, 'seq': 1}")
    tensors = [x for x in [*inputs, *kwargs.values()] if isinstance(x, torch.Tensor)]
    names, axes, bases = list(dims), list(dims.values()), []
    for n, a in dims.items():
        t = next((x for x in tensors if x.dim() > a), None)
        if t is None:
            raise ValueError(f"dims: no input has an axis {a} (dim {n!r})")
        bases.append(int(t.shape[a]))

    def resized(x, values):
        if not isinstance(x, torch.Tensor):
            return x
        shape = list(x.shape)
        for a, b, v in zip(axes, bases, values):
            if a < len(shape) and shape[a] == b:
                shape[a] = v
        return x if shape == list(x.shape) else x.new_empty(shape)  # meta or fake, as x

    def run_at(values):
        for p in model.parameters():
            p.grad = None
        xs = [resized(x, values) for x in inputs]
        kws = {k: resized(x, values) for k, x in kwargs.items()}
        y = resized(target, values)
        c = _capture_once(model, xs, kws, y, loss, optimizer, steps, grad_accum, run)
        data = json.loads(c.to_json())  # while the inputs live (their deaths are not the step's)
        del xs, kws, y
        return data
    try:
        data = _dims.combine(names, bases, run_at)
    except _dims.DimsError as e:
        raise CaptureError(f"dnnmem.torch.capture: dims: {e}") from e
    cap = Capture(data["model"], data["mode"], data["iterations"], data.get("batch"), data.get("optimizer"))
    cap._fitted = data
    return cap


class _Run:
    """Where a capture's step runs: its device type, the FakeTensorMode of a fake device
    (None on meta) and the autocast of its forward and loss (device type, dtype, or None)."""

    def __init__(self, device, autocast, scaler_args=None):
        from torch._subclasses.fake_tensor import FakeTensorMode
        self.device, self.autocast, self.scaler_args = device, autocast, scaler_args
        self.fake = FakeTensorMode(allow_non_fake_inputs=True) if device != "meta" else None

    def context(self):
        """The fake device's mode (below the recorder: entered first)."""
        stack = contextlib.ExitStack()
        if self.fake is not None:
            stack.enter_context(_fake_cuda_amp(self.device))
            stack.enter_context(self.fake)
        return stack

    def forward(self):
        """The forward's and the loss's autocast, or nothing."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.autocast[0], dtype=self.autocast[1])


class _FiniteGradScaler(torch.amp.GradScaler if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")
                        else object):
    """torch.amp.GradScaler whose step assumes the gradients finite: GradScaler._maybe_opt_step
    (torch/amp/grad_scaler.py) steps only if sum(found_inf.item()) is 0, a value that a
    capture's tensors do not have; everything else (scale, unscale_, update) runs as it is."""

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)


def _grad_scaler_args(grad_scaler, device, loss, optimizer):
    """capture's grad_scaler checked: GradScaler's keyword arguments, or None."""
    if grad_scaler is None or grad_scaler is False:
        return None
    if grad_scaler is not True and not isinstance(grad_scaler, dict):
        raise ValueError(f"grad_scaler {grad_scaler!r}: True or a dict of torch.amp.GradScaler's arguments")
    if loss is None or optimizer is None:
        raise ValueError("grad_scaler: a GradScaler scales a training step's loss: pass loss and optimizer")
    if _FiniteGradScaler.__bases__ == (object,):
        raise CaptureError(f"dnnmem.torch.capture: grad_scaler needs torch.amp.GradScaler (torch >= 2.3); "
                           f"this is {torch.__version__}")
    if device == "meta":
        raise CaptureError("dnnmem.torch.capture: grad_scaler runs on the step's device, and a meta "
                           "capture has none: capture with device='cpu' (or autocast=...)")
    return {} if grad_scaler is True else dict(grad_scaler)


def _device_of(device, autocast):
    """capture's device and autocast arguments checked; the device they imply."""
    if autocast is not None:
        if not (isinstance(autocast, (tuple, list)) and len(autocast) == 2 and autocast[0] in _DEVICES[1:]
                and autocast[1] in _AUTOCAST_DTYPES):
            raise ValueError(f"autocast {autocast!r}: (device_type, dtype) with device_type one of "
                             f"'cpu', 'cuda' and dtype torch.bfloat16 or torch.float16 (what is modelled)")
        if device is not None and device != autocast[0]:
            raise ValueError(f"autocast {autocast[0]!r} on device {device!r}: it casts nothing there; "
                             f"capture with device={autocast[0]!r}")
        device = autocast[0]
    on = [d for d in _DEVICES[1:] if _autocast_enabled(d)]
    if device is None:
        device = on[0] if on else "meta"
    if device not in _DEVICES:
        raise ValueError(f"device {device!r}: one of {', '.join(map(repr, _DEVICES))} (what is modelled)")
    if device == "cuda" and torch.version.cuda is None:
        # FakeTensors of "cuda" need the CUDA device guard a CUDA build registers (autograd's
        # InputMetadata asks it for a stream; a CPU-only build aborts the process there)
        raise CaptureError(f"dnnmem.torch.capture: device 'cuda' needs a CUDA build of torch (no GPU "
                           f"needed); this is {torch.__version__}: install a +cu build to capture "
                           f"CUDA autocast, or capture with device='cpu'")
    off = _autocast_elsewhere(device)
    if off:
        raise CaptureError(f"dnnmem.torch.capture: called under torch.autocast({off!r}), which casts "
                           f"nothing on the step's {device} tensors (its casts would be silently "
                           f"absent): capture with device={off!r}")
    return device, autocast


def _capture_once(model, inputs, kwargs, target, loss, optimizer, steps, grad_accum, run):
    """One capture of the step (capture's arguments, on meta or the fake device already)."""
    train = loss is not None
    model.train(train)
    opt = optimizer(model.parameters()) if (train and optimizer) else None
    batch = next((int(x.shape[0]) for x in inputs if isinstance(x, torch.Tensor) and x.dim()), 0)
    cap = Capture(type(model).__name__, "train" if train else "infer", steps if train else 1, batch,
                  _optimizer_text(opt))
    cap.device = run.device
    if run.device != "meta":
        cap.header["device"] = run.device
    if run.autocast is not None:
        cap.header["autocast"] = {"device": run.autocast[0], "dtype": _dtype_name(run.autocast[1])}
    if train and grad_accum > 1:
        cap.header["grad_accum"] = grad_accum
    scaler = None
    if train and run.scaler_args is not None:
        scaler = _FiniteGradScaler(run.device, **run.scaler_args)
        cap.header["grad_scaler"] = {"assumes": "finite"}
    # nn.RNN/LSTM/GRU: on meta the per-step cells' ops (addmm, sigmoid_, ...), where CUDA runs
    # cuDNN's fused RNN (aten._cudnn_rnn: flattened weights, its workspace and reserve); the
    # estimate warns of them on CUDA (docs/capture-format.md, "Meta and the device")
    rnn = sum(isinstance(m, torch.nn.RNNBase) for m in model.modules())
    if rnn:
        cap.header["rnn"] = {"modules": rnn}
    setup = cap.steps[0]
    for n, p in model.named_parameters():
        cap.register(p, p.untyped_storage(), p.untyped_storage()._cdata, "weight", n, setup)
    for n, b in model.named_buffers():
        if b.untyped_storage()._cdata not in cap.live:
            cap.register(b, b.untyped_storage(), b.untyped_storage()._cdata, "buffer", n, setup)
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            cap.register(x, x.untyped_storage(), x.untyped_storage()._cdata, "input", f"input.{i}", setup)
    for k, x in kwargs.items():
        if isinstance(x, torch.Tensor) and x.untyped_storage()._cdata not in cap.live:
            cap.register(x, x.untyped_storage(), x.untyped_storage()._cdata, "input", k, setup)
    if isinstance(target, torch.Tensor):
        cap.register(target, target.untyped_storage(), target.untyped_storage()._cdata, "target",
                     "target", setup)
    params = dict(model.named_parameters())
    with run.context(), _module_names(model, cap), _host_rng_states(cap), _Functions(cap), _Recorder(cap), \
            torch.autograd.graph.saved_tensors_hooks(cap.saved, lambda t: t):
        if not train:
            cap.phase = "forward"
            with torch.no_grad(), run.forward():
                out = model(*inputs, **kwargs)
            del out
        for it in range(1, steps + 1 if train else 1):
            cap.iteration = it
            if opt:
                cap.phase = "zero_grad"
                opt.zero_grad()
            for _ in range(grad_accum):
                with run.forward():
                    cap.phase = "forward"
                    out = model(*inputs, **kwargs)
                    cap.phase = "loss"
                    lv = loss(out, target) if target is not None else loss(out)
                if grad_accum > 1:
                    lv = lv / grad_accum
                if scaler is not None:
                    # scaler.scale(loss).backward(): the scaled loss a temporary of the
                    # statement, the loss held by its variable until the step ends
                    scaled = scaler.scale(lv)
                    cap.phase = "backward"
                    scaled.backward()
                    del scaled
                else:
                    cap.phase = "backward"
                    lv.backward()
            for n, p in params.items():
                if p.grad is not None:
                    cap.set_kind(p.grad, "gradient", n + ".grad")
            if opt:
                cap.phase = "optimizer"
                if scaler is not None:
                    scaler.step(opt)    # unscale_ (found_inf, inv_scale), then opt.step()
                    scaler.update()
                    for n, t in (("scale", scaler._scale), ("growth_tracker", scaler._growth_tracker)):
                        if isinstance(t, torch.Tensor):
                            cap.set_kind(t, "optimizer", f"grad_scaler.{n}")
                else:
                    opt.step()
                for p, state in opt.state.items():
                    for k, v in state.items():
                        if isinstance(v, torch.Tensor):
                            cap.set_kind(v, "optimizer", f"{_name_of(params, p)}.{k}")
            del out, lv
        cap.flush_frees()
    return cap


def _autocast_enabled(device):
    try:
        return torch.is_autocast_enabled(device)
    except TypeError:  # torch < 2.4: no device argument
        return torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()


def _autocast_elsewhere(device):
    """The device type of an autocast that is on but casts nothing on the step's tensors
    (a device other than theirs), or None."""
    return next((d for d in _DEVICES[1:] if d != device and _autocast_enabled(d)), None)


def _name_of(params, p):
    return next((n for n, q in params.items() if q is p), "param")


def _optimizer_text(opt):
    """"SGD(lr=0.01, momentum=0.9)": the optimizer and its main hyperparameters."""
    if opt is None:
        return None
    keys = ("lr", "momentum", "betas", "eps", "weight_decay", "foreach", "fused")
    args = ", ".join(f"{k}={opt.defaults[k]}" for k in keys
                     if k in opt.defaults and opt.defaults[k] not in (None, 0, False))
    return f"{type(opt).__name__}({args})"
