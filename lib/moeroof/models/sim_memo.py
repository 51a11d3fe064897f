"""Exact memo of pure simulations, in this process and on disk between runs.

A simulation whose numbers depend on nothing but its arguments (every draw seeded by them:
:func:`moeroof.fit.routing.simulate_points`, :func:`moeroof.studies.ladder.run_cases`)
is kept under a key of those arguments as plain values (floats by ``repr``, which is exact), in
an LRU of this process and in :class:`moeroof.core.disk_memo.DiskMemo` under a salt: a hash of
the source files that compute it and of the versions of numpy (its streams draw the traces),
scipy and numba (the kernels). An edit of any of those files, or an upgrade, misses rather than
serving an old number; a number read back is the number simulated, bit for bit (JSON keeps a
float's ``repr``, NaN and infinities included).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["SourceMemo", "source_files"]

#: the package root the source paths are relative to (``moeroof/``)
_ROOT = Path(__file__).resolve().parent.parent


def source_files(sources: Sequence[str]) -> list[Path]:
    """The files ``sources`` names, relative to the package: a name ending in ``/`` is every
    ``.py`` file below that folder and every C source the kernels are built from (``.c``, ``.h``:
    models/native/), sorted, so a module the computation reaches through an import nobody listed
    still salts the memo."""
    out: list[Path] = []
    for entry in sources:
        if entry.endswith("/"):
            out += sorted(p for ext in ("*.py", "*.c", "*.h") for p in (_ROOT / entry).rglob(ext))
        else:
            out.append(_ROOT / entry)
    return out


class SourceMemo:
    """``get(key)`` / ``put(key, value)`` of JSON-able values for one pure computation, whose
    code is the files ``sources`` (paths relative to the ``moeroof`` package)."""

    def __init__(self, name: str, sources: Sequence[str], size: int = 4096) -> None:
        self.name, self.sources, self.size = name, tuple(sources), int(size)
        self._memo: OrderedDict = OrderedDict()
        self._disk: list = []

    def clear(self) -> None:
        """Forget what this process holds, and read the disk memo's setting again."""
        self._memo.clear()
        self._disk.clear()

    def _disk_memo(self):
        if not self._disk:
            from importlib.metadata import PackageNotFoundError, version

            import numpy as np
            import scipy

            from moeroof.core.disk_memo import DiskMemo, source_salt

            try:
                numba_version = version("numba")  # not imported: that loads numba
            except PackageNotFoundError:
                numba_version = "none"
            files = source_files(self.sources)
            self._disk.append(DiskMemo(self.name, source_salt(files, np.__version__, scipy.__version__, numba_version)))
        return self._disk[0]

    def get(self, key: tuple) -> Any | None:
        """The value kept for ``key`` (this process's, else the disk's), or None."""
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        value = self._disk_memo().get(key)
        if value is not None:
            self._remember(key, value)
        return value

    def put(self, key: tuple, value: Any) -> None:
        """Keep ``value`` (JSON-able: lists, floats, ints, strings) for ``key``."""
        self._remember(key, value)
        self._disk_memo().put(key, value)

    def _remember(self, key: tuple, value: Any) -> None:
        self._memo[key] = value
        if len(self._memo) > self.size:
            self._memo.popitem(last=False)
