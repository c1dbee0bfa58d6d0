#!/bin/sh
# The Python package's tests (python/tests, docs/python.md) against a build's library.
# Usage: sh tests/python.sh BUILD_DIR PYTHON
# PYTHON must have pytest (and torch >= 2.1 for the capture tests, which skip without it);
# without pytest the tests are skipped. pytest's exit code 5 (no test ran) passes.
B=$(cd "$1" && pwd) PY=${2:-python3}
if ! "$PY" -c 'import pytest' 2>/dev/null; then
    echo "python/tests: skipped ($PY has no pytest; make check-python PYTEST_PYTHON=venv/bin/python)"
    exit 0
fi
echo "python/tests ($PY)"
DNNMEM_LIBRARY="$B/libdnnmem.so" DNNMEM_CLI="$B/dnnmem" PYTHONPATH=python \
    "$PY" -m pytest -q -p no:cacheprovider python/tests
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 5 ]
