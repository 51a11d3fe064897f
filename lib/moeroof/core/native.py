"""C kernels built with the system's C compiler on first use, cached on disk, loaded by ctypes.

Why not numba alone: a process that calls one numba kernel pays ~0.45 s before it runs
(numba's import, its typing registries, loading the cached machine code), while libCacheSim,
a compiled extension, starts in ~0.1 s. A whole ``moeroof cache`` run on a 10^6–10^7-request
trace is mostly that start-up (whole commands timed against libCacheSim). A shared library of plain C, loaded with
:mod:`ctypes`, costs a few milliseconds to load.

How: :func:`load` hashes the C sources, the compiler's path and the flags; the library is built
once per hash (``cc -O2 -shared -fPIC``: about a second) into ``<cache>/native/`` and reused
after, by every process. ``<cache>`` is the disk memo's folder (``$MOEROOF_CACHE_DIR`` when set
and not empty, else ``$XDG_CACHE_HOME/moeroof`` or ``~/.cache/moeroof``; with the memo turned
off, a per-user folder under the system's temporary directory). A build goes to a temporary
file renamed into place, so two processes building at once both end with a whole library.

The compiler: ``$CC`` when set, else the first of ``cc``, ``gcc``, ``clang`` on ``PATH``. When
none is found or the build fails, :func:`load` returns None and the caller falls back to its
numba kernels (same results, slower start); ``MOEROOF_NATIVE=0`` asks for that fallback,
``MOEROOF_NATIVE=1`` makes a failed build an error (:class:`NativeBuildError`) instead.
:func:`status` says which it was and why.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["ENV", "FLAGS", "NativeBuildError", "build", "load", "status"]

#: ``0``: never build (use the numba kernels); ``1``: a failed build is an error; unset: try
ENV = "MOEROOF_NATIVE"
#: the compiler flags (no -march=native: a cache folder may be shared by machines of other CPUs)
FLAGS = ("-O2", "-std=c99", "-shared", "-fPIC", "-fno-strict-aliasing")

_loaded: dict[str, object] = {}
_status: dict[str, str] = {}


class NativeBuildError(RuntimeError):
    """The C kernels could not be built while ``MOEROOF_NATIVE=1`` required them."""


def _mode() -> str:
    return os.environ.get(ENV, "").strip()


def _compiler() -> str | None:
    import shutil

    given = os.environ.get("CC", "").strip()
    if given:
        return shutil.which(given.split()[0]) and given
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _folder() -> Path:
    import tempfile

    from moeroof.core.disk_memo import memo_root

    root = memo_root()
    if root is None:
        uid = os.getuid() if hasattr(os, "getuid") else "user"
        root = Path(tempfile.gettempdir()) / f"moeroof-{uid}"
    return root / "native"


def status(name: str) -> str:
    """How :func:`load` ended for ``name`` in this process: the library's path, or why not."""
    return _status.get(name, "not loaded")


def load(name: str, sources: list[Path], headers: list[Path] = ()):
    """The shared library built from ``sources`` (a :class:`ctypes.CDLL`), or None.

    Built once per hash of ``sources``, ``headers``, the compiler and :data:`FLAGS`. None when
    ``MOEROOF_NATIVE=0``, when no C compiler is found or the build fails (unless
    ``MOEROOF_NATIVE=1``: then :class:`NativeBuildError` with the compiler's message).
    """
    if name in _loaded:
        return _loaded[name]
    lib = build(name, sources, headers)
    _loaded[name] = lib
    return lib


def build(name: str, sources, headers):
    """:func:`load` without this process's memory of earlier calls (a new build when the
    sources' hash has no library yet)."""
    import ctypes

    try:  # blake2b without hashlib's OpenSSL import (~2 ms of a ~0.15 s command)
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover - another Python implementation
        from hashlib import blake2b

    mode = _mode()
    if mode == "0":
        _status[name] = f"off ({ENV}=0): numba kernels"
        return None
    cc = _compiler()
    if cc is None:
        return _fail(name, "no C compiler found ($CC, cc, gcc, clang)", mode)
    h = blake2b(digest_size=10)
    for f in [*sources, *headers]:
        h.update(Path(f).name.encode())
        h.update(Path(f).read_bytes())
    h.update(" ".join([cc, *FLAGS, sys.platform]).encode())
    folder = _folder()
    target = folder / f"lib{name}-{h.hexdigest()}.so"
    if not target.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return _fail(name, f"cannot write {folder}: {exc.strerror or exc}", mode)
        with _build_lock(folder / f".{target.name}.lock"):
            if not target.exists():  # another process may have built it while this one waited
                why = _compile(cc, sources, target)
                if why is not None:
                    return _fail(name, why, mode)
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as exc:
        return _fail(name, f"cannot load {target}: {exc}", mode)
    _status[name] = str(target)
    return lib


def _compile(cc: str, sources, target: Path) -> str | None:
    """Build ``target`` from ``sources`` through a temporary file; None, or why it failed."""
    import subprocess
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        return f"cannot write {target.parent}: {exc.strerror or exc}"
    cmd = [*cc.split(), *FLAGS, "-o", tmp, *[str(s) for s in sources]]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        Path(tmp).unlink(missing_ok=True)
        return f"{cc} did not run: {exc}"
    if done.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        return f"{cc} failed: {done.stderr.strip()[-2000:]}"
    os.replace(tmp, target)
    return None


@contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` while building, so that processes starting together
    (a report's notebooks, a test session's) build once and the others wait, then load; where
    locks are not available (no fcntl, a folder that refuses the lock file) each builds alone,
    which is still correct (the rename is atomic)."""
    try:
        import fcntl

        handle = open(path, "a")  # noqa: SIM115 - held for the block
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        # removed while held: a waiter holds the same file and finds the library built; a later
        # process finds the library and takes no lock
        with suppress(OSError):
            os.unlink(path)
        handle.close()  # releases the lock


def _fail(name: str, why: str, mode: str):
    _status[name] = why
    if mode == "1":
        raise NativeBuildError(f"C kernels {name!r}: {why}")
    return None
