"""Builds libdnnmem from the repository's C sources with its Makefile and bundles the
shared library into the package (docs/python.md: why ctypes, not a C extension)."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = "libdnnmem.so"


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if not os.path.exists(os.path.join(ROOT, "Makefile")):
            raise RuntimeError("dnnmem: build from the repository (python/ beside the Makefile)")
        out = os.path.abspath(os.path.join(self.build_lib, "..", "c"))
        jobs = os.environ.get("DNNMEM_MAKE_JOBS", "2")
        subprocess.check_call(["make", "-C", ROOT, "-j" + jobs, "B=" + out, os.path.join(out, LIB)])
        dest = os.path.join(self.build_lib, "dnnmem", LIB)
        shutil.copyfile(os.path.realpath(os.path.join(out, LIB)), dest)


setup(cmdclass={"build_py": BuildWithLibrary})
