"""Only the optional CPU kernel library; everything else is in pyproject.toml.

pyproject cannot declare ext_modules, hence this file. The library is built at install
(``pip install .``, ``pip wheel .``, and in place by ``pip install -e .``); ``optional=True``
lets an install without a C compiler, or off x86-64, succeed without it, and
``spectool_serving.backends.kernels`` then builds it on first use or keeps torch's kernels.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent
BACKENDS = Path("serving", "spectool_serving", "backends")
SPEC = runpy.run_path(str(HERE / BACKENDS / "_kernel_sources.py"))
NAME = "spectool_serving.backends." + SPEC["INSTALLED_STEM"]


class BuildKernels(build_ext):
    """A custom build_ext rather than three libraries: an Extension takes one set of compile
    flags for all its sources, the kernels need their own per source (``SOURCES``), and
    ``_layers.c`` calls ``_sgemm.c``'s GEMM, so they belong in one library."""

    def get_ext_filename(self, fullname: str) -> str:
        if fullname.split(".")[-1] != SPEC["INSTALLED_STEM"]:
            return super().get_ext_filename(fullname)
        # a plain C library for ctypes, not a Python module: no ABI tag, a name no import matches
        parts = fullname.split(".")
        return os.path.join(*parts[:-1], SPEC["installed_name"](HERE / BACKENDS))

    def build_extension(self, ext: Extension) -> None:
        if ext.name != NAME:
            return super().build_extension(ext)
        objects = []
        for source in ext.sources:
            extra = [*SPEC["FLAGS"], *SPEC["SOURCES"][Path(source).name]]
            objects += self.compiler.compile([source], output_dir=self.build_temp, extra_postargs=extra)
        self.compiler.link_shared_object(
            objects,
            self.get_ext_fullpath(ext.name),
            libraries=list(SPEC["LIBRARIES"]),
            extra_postargs=list(SPEC["LINK_FLAGS"]),
        )


setup(
    ext_modules=[Extension(NAME, sources=[str(BACKENDS / name) for name in SPEC["SOURCES"]], optional=True)],
    cmdclass={"build_ext": BuildKernels},
)
