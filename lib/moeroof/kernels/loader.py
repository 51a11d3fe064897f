"""The C kernels, compiled at install, loaded by ctypes.

Every compiled kernel of the suite (the cache policies, the request stream, stack distances,
the routing and plan kernels) has one source, in C, in ``kernels/native/``. Why C, loaded with
:mod:`ctypes`: a shared library of plain C costs a few milliseconds to load, where a JIT
(numba, which the suite used before) costs ~0.45 s of start-up in every process that calls a
kernel, most of a whole ``moeroof cache`` run on a 10^6–10^7-request trace.

How: ``pip install`` (``setup.py``, setuptools' build backend) compiles ``kernels/native/*.c``
into the extension ``moeroof.kernels._native``, an empty Python module whose plain C
functions :func:`load` opens with :mod:`ctypes`. An editable install builds it in place beside
the sources; ``make`` rebuilds it when a source changes. The library carries the hash of the
sources it was built from (:mod:`moeroof.kernels.sources`), and :func:`load` uses it only
when that is the hash of the sources beside it: a library built before an edit is never used.
Nothing is compiled at run time and no binary is written anywhere.

When the extension is missing (installed without a C compiler) or stale, :func:`load` raises
:class:`NativeBuildError`, saying why and what rebuilds it; :func:`status` says how loading
ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from moeroof.kernels.sources import MODULE, SOURCE_DIR, sources_hash

__all__ = ["MODULE", "NativeBuildError", "load", "status", "typed"]

#: what rebuilds the library (said where it is missing or stale)
REBUILD = "make (or: pip install -e .) builds it"

_loaded: dict[tuple[str, Path], object] = {}
_status: dict[tuple[str, Path], str] = {}


class NativeBuildError(RuntimeError):
    """The C kernels are not built, or were built from other sources than those beside them."""


def status(name: str = MODULE, sources: Path | None = None) -> str:
    """How :func:`load` ended for ``name`` (and ``sources``) in this process: the library's
    path, or why not."""
    return _status.get(_key(name, sources), "not loaded")


def _key(name: str, sources: Path | None) -> tuple[str, Path]:
    return name, Path(sources) if sources is not None else Path(__file__).resolve().parents[2] / SOURCE_DIR


def load(name: str = MODULE, sources: Path | None = None):
    """The C library of the extension module ``name`` (a :class:`ctypes.CDLL`).

    :class:`NativeBuildError`, saying why, when the extension is not built or was built from
    other sources than those in ``sources`` (default: the package's ``kernels/native/``). Tried
    once a process.
    """
    key = _key(name, sources)
    if key not in _loaded:
        _loaded[key], _status[key] = _open(*key)
    if _loaded[key] is None:
        raise NativeBuildError(f"the C kernels ({name}) cannot be used: {_status[key]}")
    return _loaded[key]


def typed(signatures: Mapping[str, tuple[str, str | None]]) -> Any:
    """The library of :func:`load` with the functions ``signatures`` names typed for
    :mod:`ctypes`: name → (argument codes, result code or None), a code per value: ``P`` a
    pointer (an array's data), ``I`` int64, ``i`` int, ``D`` double. Each kernel module types its
    own functions (the library is one object)."""
    import ctypes

    codes = {"P": ctypes.c_void_p, "I": ctypes.c_int64, "i": ctypes.c_int, "D": ctypes.c_double}
    lib = load()
    for fname, (args, result) in signatures.items():
        fn = getattr(lib, fname)
        fn.argtypes, fn.restype = [codes[c] for c in args], None if result is None else codes[result]
    return lib


def _open(name: str, folder: Path):
    """The library and what became of it: its path, or why it is None."""
    import ctypes
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.has_location:
        return None, f"{name} is not built: {REBUILD}"
    try:
        lib = ctypes.CDLL(spec.origin)
    except OSError as exc:
        return None, f"cannot load {spec.origin}: {exc}"
    built = getattr(lib, "mr_sources_hash", None)
    if built is None:
        return None, f"{spec.origin} says nothing of its sources: {REBUILD}"
    built.restype = ctypes.c_char_p
    if built().decode() != sources_hash(folder):
        return None, f"{spec.origin} was built from other sources than {folder} (stale after an edit): {REBUILD}"
    return lib, spec.origin
