"""The C kernels (``lib/moeroof/kernels/native/``) are compiled at install into the extension
``moeroof.kernels._native`` (docs/development.md, "The compiled core"); everything else
is in pyproject.toml."""

import importlib.util
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
# loaded by its path: moeroof's package (and numpy) is not importable while it is being built
_spec = importlib.util.spec_from_file_location("_native_sources", HERE / "lib/moeroof/kernels/sources.py")
_ns = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ns)

folder = HERE / "lib" / _ns.SOURCE_DIR
files = _ns.native_files(folder)
setup(
    ext_modules=[
        Extension(
            _ns.MODULE,
            sources=[str(f.relative_to(HERE)) for f in files if f.suffix == ".c"],
            depends=[str(f.relative_to(HERE)) for f in files if f.suffix == ".h"],
            define_macros=[("MR_SOURCES_HASH", f'"{_ns.sources_hash(folder)}"')],
            # the flags the kernels were written for: ISO C and no FMA contraction (the same
            # floating-point results on every machine), -O2 after Python's own -O3, no -march
            # (one build serves every CPU of the platform)
            extra_compile_args=["-O2", "-std=c11", "-ffp-contract=off", "-fno-strict-aliasing"],
        )
    ]
)
