"""Results kept on disk between runs, for pure computations that are slow to repeat.

The step model simulates the expert cache in steady state (:mod:`moeroof.models.expert_cache`):
deterministic in its inputs, a few tenths of a second each: kept on disk, a second ``moeroof
plan`` with the same model, routing, batch and cache reads its numbers back and simulates
nothing.

A result is stored under a *salt*: a hash of the source files of the code that computes it and
of the numpy version (its random streams draw the traces), so an edit or an upgrade can never
serve a stale number — it simply misses. Each entry is one small JSON file holding its key as
text, checked on read (a hash collision or a file damaged in any way is a miss, then
overwritten), written whole or not at all (:mod:`moeroof.core.atomic`).

Where: ``$MOEROOF_CACHE_DIR`` when set (an empty value turns the disk memo off), else
``$XDG_CACHE_HOME/moeroof``, else ``~/.cache/moeroof``. A folder that cannot be written turns
it off for the run, silently: it only ever saves time.

Two memos share the folder: :class:`DiskMemo`, one computation's results under one salt, and
:class:`SourceMemo`, an exact memo of a pure simulation in this process (an LRU) and on disk,
whose salt hashes the source files that compute it (paths relative to the package, a folder
standing for every ``.py``, ``.c`` and ``.h`` below it) and the versions of numpy (its streams
draw the traces) and scipy. An edit of any of those files, or an upgrade,
misses rather than serving an old number; a number read back is the number computed, bit for
bit (JSON keeps a float's ``repr``, NaN and infinities included).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ENV", "KEEP_SALTS", "DiskMemo", "SourceMemo", "memo_root", "source_files", "source_salt"]

#: salt folders kept per memo (the newest written): older code's entries are deleted
KEEP_SALTS = 4

#: the environment variable naming the folder ("" turns the disk memo off)
ENV = "MOEROOF_CACHE_DIR"


def memo_root() -> Path | None:
    """The folder entries go under, or None when the disk memo is off."""
    given = os.environ.get(ENV)
    if given is not None:
        return Path(given).expanduser() if given.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "moeroof"


def source_salt(files: Iterable[str | os.PathLike[str]], *extra: str) -> str:
    """A hash of the files' bytes and the ``extra`` strings (versions): what a result depends on."""
    h = hashlib.blake2b(digest_size=12)
    for f in files:
        h.update(Path(f).read_bytes())
    for text in extra:
        h.update(text.encode())
    return h.hexdigest()


class DiskMemo:
    """``get(key)`` / ``put(key, value)`` for JSON-able values under ``memo_root()/name/salt``.

    ``key`` is any value whose ``repr`` is stable across runs (tuples of str, int, float)."""

    def __init__(self, name: str, salt: str) -> None:
        self.name, self.salt = name, salt
        root = memo_root()
        self.folder: Path | None = None if root is None else root / name / salt

    @staticmethod
    def _path(folder: Path, text: str) -> Path:
        return folder / f"{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}.json"

    def _prune(self, folder: Path) -> None:
        """Keep this memo's :data:`KEEP_SALTS` most recently written salt folders (this one
        included) and delete the rest: every edit of the simulator or upgrade makes a new salt,
        and the old ones are never read again. A folder's time moves with each entry written, so
        a salt another checkout still uses stays; one deleted under it only misses, and is made
        again at its next write."""
        import shutil

        def written(p: Path) -> float:
            try:
                return p.stat().st_mtime
            except OSError:
                return 0.0

        try:
            others = [p for p in folder.parent.iterdir() if p.is_dir() and p != folder]
        except OSError:
            return
        for old in sorted(others, key=written, reverse=True)[KEEP_SALTS - 1 :]:
            shutil.rmtree(old, ignore_errors=True)

    def get(self, key: Any) -> Any | None:
        if self.folder is None:
            return None
        text = repr(key)
        try:
            entry = json.loads(self._path(self.folder, text).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != text or "value" not in entry:
            return None
        return entry["value"]

    def put(self, key: Any, value: Any) -> None:
        folder = self.folder
        if folder is None:
            return
        from moeroof.core import atomic

        text = repr(key)
        try:
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                self._prune(folder)
            # not fsynced: a damaged or empty entry reads as a miss (checked on read) and is recomputed
            atomic.write_text(self._path(folder, text), json.dumps({"key": text, "value": value}), durable=False)
        except (OSError, ValueError, TypeError):
            self.folder = None  # cannot write here: stop trying for this run


#: the package root the source paths are relative to (``moeroof/``)
_ROOT = Path(__file__).resolve().parent.parent


def source_files(sources: Sequence[str]) -> list[Path]:
    """The files ``sources`` names, relative to the package: a name ending in ``/`` is every
    ``.py`` file below that folder and every C source the kernels are built from (``.c``, ``.h``:
    kernels/native/), sorted, so a module the computation reaches through an import nobody listed
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
            import numpy as np
            import scipy

            files = source_files(self.sources)
            self._disk.append(DiskMemo(self.name, source_salt(files, np.__version__, scipy.__version__)))
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

    def array(self, key: tuple, shape: tuple[int, ...], compute: Callable[[], Any]) -> Any:
        """The float array kept for ``key`` when it has ``shape``, else ``compute()``'s, kept as a
        list (JSON keeps every float exactly: its ``repr``, NaN included)."""
        import numpy as np

        stored = self.get(key)
        try:
            out = np.array(stored, dtype=float) if isinstance(stored, list) else None
        except (TypeError, ValueError):
            out = None
        if out is None or out.shape != tuple(shape):
            out = compute()
            self.put(key, out.tolist())
        return out

    def _remember(self, key: tuple, value: Any) -> None:
        self._memo[key] = value
        if len(self._memo) > self.size:
            self._memo.popitem(last=False)
