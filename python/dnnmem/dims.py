"""Sizes as functions of the dims (docs/capture-format.md, "Sizes as functions of the dims").

A capture holds the sizes of the step it ran. With `dims={"batch": 0, "seq": 1}`,
dnnmem.torch.capture runs the same step again at other values of each named input axis and
writes every size (a storage's bytes, its shape's dims, a convolution's sizes) as a
polynomial of the dims, so that one capture answers `--batch-size`, `--seq-len`, `--dim`,
sweeps, max-batch and max-seq-len.

The fit is exact, not a regression. Per dim with the captured value b and step
s = max(1, b // 2), the step runs on the grid {b, b+s, b+2s} of every dim (3^N runs for N
dims), and each size seen there is interpolated as the polynomial of degree at most 2 in
each dim that takes those values (exact rational arithmetic; its coefficients must be
integers). Two more runs per dim check it, the other dims at their captured values:
b + 4s (beyond the grid: a size that is not such a polynomial, e.g. one padded to a block,
fails it and the capture is refused, naming the storage) and 1 (when b > 1: a step that
runs differently at 1, e.g. a view that is a copy at other values, makes the capture valid
from b up only, its "min"). Every run must make the same storages in the same ops; where
one does not, the sizes are not functions of the dims and the capture is refused, naming
the first op that differs.
"""
import itertools
from fractions import Fraction

MAX_DEGREE = 2


class DimsError(ValueError):
    """The step's sizes cannot be written as functions of the dims: what differed, where."""


def points(base):
    """The grid values of a dim captured at `base`, and its two check values (low, high);
    low is None when base is 1."""
    s = max(1, base // 2)
    return [base + k * s for k in range(MAX_DEGREE + 1)], (1 if base > 1 else None), base + 4 * s


def _solve_1d(xs, ys):
    """The coefficients c[0..n-1] of the polynomial through (xs[i], ys[i]) (Vandermonde,
    solved exactly)."""
    n = len(xs)
    m = [[Fraction(x) ** j for j in range(n)] + [Fraction(y)] for x, y in zip(xs, ys)]
    for c in range(n):
        p = next(r for r in range(c, n) if m[r][c] != 0)
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c and m[r][c] != 0:
                f = m[r][c] / m[c][c]
                m[r] = [a - f * b for a, b in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(grid_xs, values):
    """The monomial coefficients {exponents: int} of the tensor-product polynomial taking
    values[idx] at (grid_xs[0][idx[0]], grid_xs[1][idx[1]], ...); None when a coefficient is
    not an integer."""
    nd = len(grid_xs)
    coef = dict(values)  # index tuple -> value, transformed axis by axis into exponents
    for axis in range(nd):
        out = {}
        for rest in itertools.product(*[range(len(grid_xs[a])) for a in range(nd) if a != axis]):
            def key(j):
                r = list(rest)
                r.insert(axis, j)
                return tuple(r)
            line = [coef[key(j)] for j in range(len(grid_xs[axis]))]
            for j, c in enumerate(_solve_1d(grid_xs[axis], line)):
                out[key(j)] = c
        coef = out
    if any(c.denominator != 1 for c in coef.values()):
        return None
    return {e: int(c) for e, c in coef.items() if c != 0}


def evaluate(poly, at):
    return sum(c * eval_monomial(e, at) for e, c in poly.items())


def eval_monomial(exps, at):
    v = 1
    for e, x in zip(exps, at):
        v *= x ** e
    return v


def as_json(poly):
    """[[coefficient, e_0, e_1, ...], ...], the terms in a fixed order."""
    return [[c, *e] for e, c in sorted(poly.items())]


# ---- the structure of a capture, its sizes stripped ----
_SIZE_KEYS = ("input", "weight", "output")


def _skeleton(data):
    st = [(s["name"], s["kind"], s["dtype"], s["device"], len(s["shape"])) for s in data["storages"]]
    steps = [{k: (v if k != "conv" else {ck: cv for ck, cv in v.items() if ck not in _SIZE_KEYS})
              for k, v in s.items()} for s in data["steps"]]
    return st, steps


def _first_difference(a, b):
    """A sentence naming where capture b's structure leaves capture a's."""
    (sa, pa), (sb, pb) = _skeleton(a), _skeleton(b)
    def op(s):
        return f"{s.get('op', s['phase'])} in {s.get('module') or 'the top level'}"
    for k, (x, y) in enumerate(zip(pa, pb)):
        if x != y:
            return f"step {k} ({op(y)}" + (f", where it ran {op(x)})" if op(x) != op(y) else ")")
    if len(pa) != len(pb):
        return f"the step count ({len(pa)} and {len(pb)})"
    for k, (x, y) in enumerate(zip(sa, sb)):
        if x != y:
            return f"storage {k} ('{x[0]}')"
    return f"the storage count ({len(sa)} and {len(sb)})"


def _fields(data):
    """Every size of a capture, in a fixed order: (path, value)."""
    for i, s in enumerate(data["storages"]):
        yield ("s", i, "bytes"), s["bytes"]
        for d, v in enumerate(s["shape"]):
            yield ("s", i, "shape", d), v
    for k, s in enumerate(data["steps"]):
        for key in _SIZE_KEYS:
            for d, v in enumerate(s.get("conv", {}).get(key, [])):
                yield ("c", k, key, d), v


def _name(data, path):
    if path[0] == "s":
        return f"storage '{data['storages'][path[1]]['name']}' ({'bytes' if path[2] == 'bytes' else 'shape'})"
    st = data["steps"][path[1]]
    return f"the {path[2]} of {st['op']} (step {path[1]})"


def combine(names, bases, run):
    """The capture at the dims' captured values, its sizes as polynomials of the dims.

    names, bases: the dims and their captured values; run(values) -> the capture's data
    (a dict as Capture.data) of the step with the dims at those values."""
    nd = len(names)
    grids, lows, highs = zip(*[points(b) for b in bases])
    runs = {}
    for idx in itertools.product(range(MAX_DEGREE + 1), repeat=nd):
        runs[idx] = run([grids[a][idx[a]] for a in range(nd)])
    base = runs[(0,) * nd]
    skel = _skeleton(base)
    for idx, data in runs.items():
        if _skeleton(data) != skel:
            at = ", ".join(f"{n}={grids[a][idx[a]]}" for a, n in enumerate(names))
            raise DimsError(f"the step at {at} differs from the captured one at "
                            f"{_first_difference(base, data)}: its sizes are not functions of "
                            f"{', '.join(names)}; capture at fixed values")
    fields = {idx: dict(_fields(data)) for idx, data in runs.items()}
    polys = {}
    for path, v0 in fields[(0,) * nd].items():
        values = {idx: f[path] for idx, f in fields.items()}
        if all(v == v0 for v in values.values()):
            continue
        p = fit(grids, values)
        if p is None:
            raise DimsError(f"{_name(base, path)} is not a polynomial in {', '.join(names)} with "
                            f"integer coefficients; capture at fixed values")
        polys[path] = p
    mins = list(bases)
    checked = [[] for _ in names]
    for a in range(nd):
        for value, is_low in ((highs[a], False), (lows[a], True)):
            if value is None:
                continue
            at = list(bases)
            at[a] = value
            data = run(at)
            bad = None
            if _skeleton(data) != skel:
                bad = f"differs at {_first_difference(base, data)}"
            else:
                got = dict(_fields(data))
                for path, v0 in fields[(0,) * nd].items():
                    want = evaluate(polys[path], at) if path in polys else v0
                    if got[path] != want:
                        bad = f"{_name(base, path)}: {got[path]}, the fit says {want}"
                        break
            if bad is None:
                checked[a].append(value)
                if is_low:
                    mins[a] = value
            elif not is_low:
                raise DimsError(f"at {names[a]}={value} the step's {bad}: its sizes are not "
                                f"polynomials of degree <= {MAX_DEGREE} in {names[a]}; capture at "
                                f"fixed values")
    out = base
    for path, p in polys.items():
        terms = as_json(p)
        if path[0] == "s":
            s = out["storages"][path[1]]
            if path[2] == "bytes":
                s["bytes_poly"] = terms
            else:
                s.setdefault("shape_poly", list(s["shape"]))[path[3]] = terms
        else:
            cv = out["steps"][path[1]]["conv"]
            cv.setdefault(path[2] + "_poly", list(cv[path[2]]))[path[3]] = terms
    out["dims"] = [{"name": n, "value": b, "min": m, "fitted": list(g), "checked": sorted(c)}
                   for n, b, m, g, c in zip(names, bases, mins, grids, checked)]
    return out
