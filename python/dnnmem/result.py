"""The typed result of an estimate, read from the library's JSON report (schema
dnnmem.estimate/1, docs/schema/estimate.schema.json) and its timeline CSV."""
import csv
import html
import io
from dataclasses import dataclass, field
from typing import Dict, List, Optional

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n):
    """IEC units, as the CLI prints them ("97.49 MiB")."""
    x, u = float(n), 0
    while x >= 1024 and u < len(_UNITS) - 1:
        x, u = x / 1024, u + 1
    return f"{int(n)} B" if u == 0 else f"{x:.2f} {_UNITS[u]}"


@dataclass
class Tensor:
    """A tensor live at the peak (struct dnnmem_tensor_info)."""
    name: str
    dtype: str
    category: str
    dims: Optional[List[int]]
    bytes: int
    allocated: int
    producer_node: str
    producer_op: str


@dataclass
class TimelinePoint:
    """Memory at one step (struct dnnmem_timeline_point): bytes by category, allocated and
    reserved (context excluded)."""
    step: int
    iteration: int
    phase: str
    node: str
    op: str
    category_bytes: Dict[str, int]
    allocated: int
    reserved: int


@dataclass
class Module:
    """What one module scope holds at the peak (by_module=True; struct dnnmem_module_info):
    requested bytes by kind (the breakdown's keys), their sum and the buffers counted."""
    name: str
    live_bytes: int
    tensors: int
    breakdown: Dict[str, int]


@dataclass
class Advice:
    """A change that would make the job fit (struct dnnmem_advice): the options to add, its
    estimate, and what it costs (cost_rank 1 cheapest .. 10; docs/advice.md)."""
    change: str
    total_bytes: int
    verdict: str
    margin_bytes: int = 0
    cost_rank: int = 0
    cost: str = ""


@dataclass
class Result:
    """One estimate (struct dnnmem_result). Bytes are ints.

    peak: what the process takes on the device (reserved + context, total_bytes);
    peak_allocated / peak_reserved: torch.cuda.max_memory_allocated / _reserved;
    breakdown: bytes by kind at the allocated peak (weights, activations, ..., rounding,
    allocator_slack, cuda_context); live_at_peak: the largest tensors of each kind there;
    verdict: "fits", "tight", "does not fit", or None without a capacity; advice: changes
    that would make it fit (when it does not); timeline: one point per step; by_module: the
    bytes at the peak by module scope (by_module=True or by_module_depth=N); parallel: with
    gpus=N, the world size, global batch, the rank reported and one row per distinct group
    of ranks (JSON's "parallel", docs/parallel.md), else {}."""
    peak: int
    peak_allocated: int
    peak_reserved: int
    context: int
    needed: int
    breakdown: Dict[str, int]
    peak_phase: str
    peak_iteration: int
    peak_node: str
    peak_op: str
    live_at_peak: List[Tensor]
    live_at_peak_total: int
    verdict: Optional[str]
    capacity: Optional[int]
    margin: Optional[int]
    assumptions: Dict[str, str]
    warnings: List[str]
    model: dict
    timeline: List[TimelinePoint] = field(default_factory=list)
    advice: List[Advice] = field(default_factory=list)
    by_module: List[Module] = field(default_factory=list)
    parallel: dict = field(default_factory=dict)
    text: str = ""
    report: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_report(cls, js, timeline_csv="", text=""):
        v = js.get("verdict") or {}
        peak = js.get("peak") or {}
        return cls(
            peak=js["total_bytes"], peak_allocated=js["peak_allocated_bytes"],
            peak_reserved=js["peak_reserved_bytes"], context=js["cuda_context_bytes"],
            needed=js.get("needed_bytes", js["peak_allocated_bytes"] + js["cuda_context_bytes"]),
            breakdown=dict(js["breakdown"]), peak_phase=peak.get("phase", ""),
            peak_iteration=peak.get("iteration", 1), peak_node=peak.get("node") or "",
            peak_op=peak.get("op") or "",
            live_at_peak=[Tensor(**t) for t in js.get("live_at_peak", [])],
            live_at_peak_total=js.get("live_at_peak_total", 0),
            verdict=v.get("verdict"), capacity=v.get("capacity_bytes"),
            margin=v.get("margin_bytes"),
            assumptions={a["key"]: a["value"] for a in js.get("assumptions", [])},
            warnings=list(js.get("warnings", [])), model=js.get("model", {}),
            timeline=_timeline(timeline_csv),
            by_module=[Module(**m) for m in (js.get("by_module") or {}).get("modules", [])],
            parallel=dict(js.get("parallel") or {}), text=text, report=js)

    def __str__(self):
        return self.text or f"peak {format_bytes(self.peak)}"

    def _repr_html_(self):
        e = html.escape
        rows = "".join(f"<tr><td>{e(k)}</td><td style='text-align:right'>{e(format_bytes(b))}</td></tr>"
                       for k, b in self.breakdown.items() if b)
        live = "".join(
            f"<tr><td>{e(t.category)}</td><td><code>{e(t.name)}</code></td><td>{e(t.dtype)}</td>"
            f"<td>{e(str(t.dims) if t.dims is not None else '')}</td>"
            f"<td style='text-align:right'>{e(format_bytes(t.bytes))}</td><td>{e(t.producer_op)}</td></tr>"
            for t in self.live_at_peak)
        verdict = (f"<b>{e(self.verdict)}</b> on {e(format_bytes(self.capacity))}, margin "
                   f"{e(format_bytes(abs(self.margin)))}{' short' if self.margin < 0 else ''}"
                   if self.verdict else "no capacity given")
        advice = "".join(f"<li>{e(a.change)}: {e(format_bytes(a.total_bytes))} ({e(a.verdict)})</li>"
                         for a in self.advice)
        return (f"<div><p><b>peak {e(format_bytes(self.peak))}</b> (allocated "
                f"{e(format_bytes(self.peak_allocated))}, reserved {e(format_bytes(self.peak_reserved))}, "
                f"context {e(format_bytes(self.context))}) at {e(self.peak_phase)} "
                f"<code>{e(self.peak_node)}</code> {e(self.peak_op)}; {verdict}</p>"
                f"<table><tr><th>kind</th><th>bytes at the peak</th></tr>{rows}</table>"
                + (f"<p>would fit with:</p><ul>{advice}</ul>" if advice else "")
                + f"<table><tr><th>kind</th><th>tensor live at the peak</th><th>dtype</th><th>dims</th>"
                f"<th>bytes</th><th>made by</th></tr>{live}</table></div>")

    def plot(self, ax=None):
        """The timeline by kind (matplotlib, when installed): stacked bytes per step."""
        import matplotlib.pyplot as plt  # optional dependency
        if ax is None:
            _, ax = plt.subplots(figsize=(10, 4))
        kinds = [k for k in (self.timeline[0].category_bytes if self.timeline else {})
                 if any(p.category_bytes[k] for p in self.timeline)]
        xs = [p.step for p in self.timeline]
        ax.stackplot(xs, *[[p.category_bytes[k] / 2**20 for p in self.timeline] for k in kinds],
                     labels=kinds)
        ax.set_xlabel("step")
        ax.set_ylabel("MiB")
        ax.legend(loc="upper left", fontsize="small")
        return ax


def _timeline(text):
    if not text:
        return []
    rows = csv.DictReader(io.StringIO(text))
    fixed = {"step", "iteration", "phase", "node", "op", "allocated", "reserved", "cuda_context"}
    out = []
    for r in rows:
        out.append(TimelinePoint(
            step=int(r["step"]), iteration=int(r["iteration"]), phase=r["phase"], node=r["node"],
            op=r["op"], category_bytes={k: int(v) for k, v in r.items() if k not in fixed},
            allocated=int(r["allocated"]), reserved=int(r["reserved"])))
    return out
