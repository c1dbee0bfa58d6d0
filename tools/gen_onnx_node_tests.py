#!/usr/bin/python3
"""Generate ONNX's own backend *node* test cases into a directory.

Usage: gen_onnx_node_tests.py [--op-type OP] OUTDIR

Uses the test-case generators shipped with the installed onnx package
(onnx.backend.test.case.node.*, as run by `onnx/backend/test/cmd_tools.py
generate-data`), but only the node cases (no model/"real" cases, which need
network downloads).  Run with the system interpreter that has onnx, e.g.
Debian's /usr/bin/python3 with python3-onnx (onnx 1.12 -> 922 cases).

Layout written (same as onnx's backend test data):

  OUTDIR/<case>/model.onnx
  OUTDIR/<case>/test_data_set_0/input_<j>.pb    (j over graph inputs)
  OUTDIR/<case>/test_data_set_0/output_<j>.pb   (j over graph outputs)
  OUTDIR/MANIFEST.tsv

MANIFEST.tsv has no header; one line per case, sorted by case name, with
tab-separated fields:
  case name
  op type(s): the op_type of the single node, or for multi-node graphs the
              distinct op_types of the top-level nodes in order of first
              appearance, comma-separated (subgraph bodies are not listed)
  number of graph inputs  (= number of input_*.pb files)
  number of graph outputs (= number of output_*.pb files)

Deterministic and idempotent: numpy/random are seeded before every generator
(onnx seeds numpy itself too), protobufs are serialised deterministically,
files are only rewritten when their content changes, and stale case
directories from an earlier run are removed.  Generator failures are isolated
per export function; each is reported on stderr and the exit status is 1 if
any failed (0 otherwise).  Set GEN_ONNX_TRACEBACK=1 for tracebacks.
"""

import argparse
import importlib
import os
import pkgutil
import random
import shutil
import sys
import traceback
import warnings

import numpy as np

# --- numpy >= 1.24 compatibility --------------------------------------------
# onnx 1.12's generators use aliases removed in numpy 1.24 (np.float in
# bernoulli.py, np.object in castlike.py, np.bool mentioned in batchnorm.py).
# Re-add them before the generator modules are imported.
_NP_ALIASES = {
    "bool": bool,
    "int": int,
    "float": float,
    "complex": complex,
    "object": object,
    "str": str,
    "long": int,
    "unicode": str,
}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # numpy warns when probing these names
    for _name, _typ in _NP_ALIASES.items():
        try:
            getattr(np, _name)
        except AttributeError:
            setattr(np, _name, _typ)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
import onnx.backend.test.case.base as case_base  # noqa: E402

# --- per-export failure isolation --------------------------------------------
# onnx runs every `export*` staticmethod while the class body is being
# created (metaclass _Exporter); one raising export would abort the whole
# module and, via import_recursive, the whole collection.  Wrap each export
# so a failure only loses that export's cases, and record it.
FAILURES = []  # (where, reason)
NOTES = []  # (where, remark): reported, but not failures
_CURRENT_MODULE = [None]


def _exporter_init(cls, name, bases, dct):
    for k, v in dct.items():
        if not k.startswith("export"):
            continue
        if not isinstance(v, staticmethod):
            raise ValueError("Only staticmethods could be named as export.*")
        export = getattr(cls, k)
        try:
            case_base.Snippets[name].append(
                case_base.process_snippet(name, k, export))
        except Exception:  # snippet extraction is documentation only
            pass
        np.random.seed(seed=0)
        random.seed(0)
        try:
            export()
        except Exception as e:  # noqa: BLE001
            FAILURES.append(("%s.%s.%s" % (_CURRENT_MODULE[0], name, k),
                             "%s: %s" % (type(e).__name__,
                                         str(e).splitlines()[0] if str(e) else "")))
            if os.environ.get("GEN_ONNX_TRACEBACK"):
                traceback.print_exc()
    super(case_base._Exporter, cls).__init__(name, bases, dct)


case_base._Exporter.__init__ = _exporter_init

import onnx.backend.test.case.node as node_test  # noqa: E402


def collect_node_cases(op_type):
    node_test._TargetOpType = op_type
    for _, modname, ispkg in sorted(pkgutil.iter_modules(node_test.__path__),
                                    key=lambda t: t[1]):
        full = "%s.%s" % (node_test.__name__, modname)
        _CURRENT_MODULE[0] = modname
        try:
            importlib.import_module(full)
        except Exception as e:  # noqa: BLE001
            FAILURES.append((full, "import failed: %s: %s" % (type(e).__name__, e)))
    _CURRENT_MODULE[0] = None
    return list(node_test._NodeTestCases)


def _value_proto_bytes(value, vi):
    t = vi.type
    if t.HasField("map_type"):
        p = numpy_helper.from_dict(value, vi.name)
    elif t.HasField("sequence_type"):
        p = numpy_helper.from_list(value, vi.name)
    elif t.HasField("optional_type"):
        p = numpy_helper.from_optional(value, vi.name)
    else:
        if not t.HasField("tensor_type"):
            raise ValueError("value %r has unsupported type" % vi.name)
        p = numpy_helper.from_array(value, vi.name)
    return p.SerializeToString(deterministic=True)


def _write_if_changed(path, data):
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def case_files(case):
    """Return {relative path: bytes} for one case (raises on failure)."""
    model = case.model
    assert model is not None and case.data_sets
    files = {"model.onnx": model.SerializeToString(deterministic=True)}
    g = model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        d = "test_data_set_%d" % i
        if len(inputs) != len(g.input) or len(outputs) != len(g.output):
            raise ValueError("data set %d has %d inputs/%d outputs, graph has %d/%d"
                             % (i, len(inputs), len(outputs), len(g.input), len(g.output)))
        for j, v in enumerate(inputs):
            files["%s/input_%d.pb" % (d, j)] = _value_proto_bytes(v, g.input[j])
        for j, v in enumerate(outputs):
            files["%s/output_%d.pb" % (d, j)] = _value_proto_bytes(v, g.output[j])
    return files


def op_types(graph):
    seen = []
    for n in graph.node:
        if n.op_type not in seen:
            seen.append(n.op_type)
    return ",".join(seen)


def sync_case_dir(case_dir, files):
    """Make case_dir contain exactly `files`."""
    os.makedirs(case_dir, exist_ok=True)
    wanted_dirs = {os.path.dirname(p) for p in files if os.path.dirname(p)}
    for d in wanted_dirs:
        os.makedirs(os.path.join(case_dir, d), exist_ok=True)
    for rel, data in files.items():
        _write_if_changed(os.path.join(case_dir, rel), data)
    for root, dirs, names in os.walk(case_dir, topdown=False):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), case_dir)
            if rel not in files:
                os.remove(os.path.join(root, n))
        rel_root = os.path.relpath(root, case_dir)
        if rel_root != "." and rel_root not in wanted_dirs:
            try:
                os.rmdir(root)
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("-t", "--op-type", default=None,
                    help="only cases whose node op_type is OP (as cmd_tools -t)")
    args = ap.parse_args()

    cases = collect_node_cases(args.op_type)
    outdir = args.outdir
    os.makedirs(outdir, exist_ok=True)

    by_name = {}
    for c in cases:
        if c.name in by_name:
            # onnx 1.12 defines test_reduce_sum_negative_axes_keepdims_random
            # and test_resize_tf_crop_and_resize twice; cmd_tools (and the
            # data shipped with onnx) keep the later one.  Do the same.
            NOTES.append((c.name, "case name defined twice; later definition kept "
                          "(as onnx cmd_tools generate-data)"))
        by_name[c.name] = c

    manifest = []
    written = set()
    for name in sorted(by_name):
        c = by_name[name]
        try:
            files = case_files(c)
        except Exception as e:  # noqa: BLE001
            FAILURES.append((name, "serialisation failed: %s: %s" % (type(e).__name__, e)))
            continue
        sync_case_dir(os.path.join(outdir, name), files)
        written.add(name)
        g = c.model.graph
        manifest.append("%s\t%s\t%d\t%d\n" % (name, op_types(g), len(g.input), len(g.output)))

    # remove case directories left over from earlier runs (only ones that
    # look like ours: contain model.onnx)
    for entry in sorted(os.listdir(outdir)):
        p = os.path.join(outdir, entry)
        if (entry not in written and os.path.isdir(p)
                and os.path.exists(os.path.join(p, "model.onnx"))):
            shutil.rmtree(p)

    _write_if_changed(os.path.join(outdir, "MANIFEST.tsv"),
                      "".join(manifest).encode("utf-8"))

    for where, why in NOTES:
        print("gen_onnx_node_tests: note: %s: %s" % (where, why), file=sys.stderr)
    for where, why in FAILURES:
        print("gen_onnx_node_tests: FAILED %s: %s" % (where, why), file=sys.stderr)
    print("gen_onnx_node_tests: onnx %s: %d cases generated, %d failures"
          % (onnx.__version__, len(written), len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
