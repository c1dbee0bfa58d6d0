import os

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TINY = os.path.join(ROOT, "tests", "models", "capture", "tiny-train.dnnmem")
RESNET50 = os.path.join(ROOT, "tests", "models", "fixtures", "resnet50.onnx")
CLI = os.environ.get("DNNMEM_CLI", os.path.join(ROOT, "build", "dnnmem"))


@pytest.fixture
def tiny():
    return TINY
