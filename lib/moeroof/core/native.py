"""The C kernels, compiled at install, loaded by ctypes.

Why not numba alone: a process that calls one numba kernel pays ~0.45 s before it runs
(numba's import, its typing registries, loading the cached machine code), while libCacheSim,
a compiled extension, starts in ~0.1 s. A whole ``moeroof cache`` run on a 10^6–10^7-request
trace is mostly that start-up (whole commands timed against libCacheSim). A shared library of
plain C, loaded with :mod:`ctypes`, costs a few milliseconds to load.

How: ``pip install`` (``setup.py``, setuptools' build backend) compiles ``models/native/*.c``
into the extension ``moeroof.models._cache_native``, an empty Python module whose plain C
functions :func:`load` opens with :mod:`ctypes`. An editable install builds it in place beside
the sources; ``make`` rebuilds it when a source changes. The library carries the hash of the
sources it was built from (:mod:`moeroof.core.native_sources`), and :func:`load` uses it only
when that is the hash of the sources beside it: a library built before an edit is never used.
Nothing is compiled at run time and no binary is written anywhere.

When the extension is missing (a build without a C compiler) or stale, :func:`load` returns
None and the caller runs its numba kernels (the same results, a slower start);
``MOEROOF_NATIVE=0`` asks for that fallback, ``MOEROOF_NATIVE=1`` makes a missing or stale
library an error (:class:`NativeBuildError`) instead. :func:`status` says which it was and why.
"""

from __future__ import annotations

import os
from pathlib import Path

from moeroof.core.native_sources import MODULE, SOURCE_DIR, sources_hash

__all__ = ["ENV", "MODULE", "NativeBuildError", "load", "status"]

#: ``0``: never load (use the numba kernels); ``1``: a missing or stale library is an error;
#: unset: load it when it is there and fresh
ENV = "MOEROOF_NATIVE"
#: what rebuilds the library (said where it is missing or stale)
REBUILD = "make (or: pip install -e .) builds it"

_loaded: dict[tuple[str, Path], object] = {}
_status: dict[tuple[str, Path], str] = {}


class NativeBuildError(RuntimeError):
    """The C kernels are not built, or were built from other sources, while ``MOEROOF_NATIVE=1``
    required them."""


def _mode() -> str:
    return os.environ.get(ENV, "").strip()


def status(name: str = MODULE, sources: Path | None = None) -> str:
    """How :func:`load` ended for ``name`` (and ``sources``) in this process: the library's
    path, or why not."""
    return _status.get(_key(name, sources), "not loaded")


def _key(name: str, sources: Path | None) -> tuple[str, Path]:
    return name, Path(sources) if sources is not None else Path(__file__).resolve().parents[2] / SOURCE_DIR


def load(name: str = MODULE, sources: Path | None = None):
    """The C library of the extension module ``name`` (a :class:`ctypes.CDLL`), or None.

    None when ``MOEROOF_NATIVE=0``, when the extension is not built, or when it was built from
    other sources than those in ``sources`` (default: the package's ``models/native/``), unless
    ``MOEROOF_NATIVE=1``: then :class:`NativeBuildError`, saying why. Tried once a process.
    """
    key = _key(name, sources)
    if key not in _loaded:
        lib, _status[key] = _open(*key)
        if lib is None and _mode() == "1":
            raise NativeBuildError(f"C kernels {name!r}: {_status[key]}")
        _loaded[key] = lib
    return _loaded[key]


def _open(name: str, folder: Path):
    """The library and what became of it: its path, or why it is None."""
    import ctypes
    import importlib.util

    if _mode() == "0":
        return None, f"off ({ENV}=0): numba kernels"
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
