"""Atomic file writes: the one way the suite writes an output file.

Every writer goes through :func:`write_via`: the content is written to a temp file in the
target's own directory (so the final rename never crosses a filesystem), flushed and fsynced,
optionally checked, given the mode of an ordinary new file (``0o644``) and moved over the target
with :func:`os.replace`. A reader sees the old file or the new one, never half of one; on any
error (a failed check included) the temp file is removed and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["FILE_MODE", "write_via", "write_bytes", "write_text", "copy_file"]

#: mode of every written file (``mkstemp`` makes 0600; outputs are meant to be read by anyone)
FILE_MODE = 0o644


def write_via(
    path: str | os.PathLike[str],
    write: Callable[[IO[Any]], Any],
    *,
    binary: bool = True,
    newline: str | None = None,
    check: Callable[[Path], Any] | None = None,
) -> Path:
    """Write ``path`` atomically through ``write(handle)``; return it as a :class:`~pathlib.Path`.

    ``handle`` is the open temp file: binary, or text (UTF-8, ``newline`` as :func:`open` takes
    it) when ``binary`` is false. ``check(temp_path)``, when given, runs on the complete temp
    file before the rename and vetoes it by raising. Parent directories are created.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        text_args = {} if binary else {"encoding": "utf-8", "newline": newline}
        with os.fdopen(fd, "wb" if binary else "w", **text_args) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if check is not None:
            check(Path(tmp))
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def write_bytes(path: str | os.PathLike[str], data: bytes, *, check: Callable[[Path], Any] | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`write_via`)."""
    return write_via(path, lambda fh: fh.write(data), check=check)


def write_text(
    path: str | os.PathLike[str],
    text: str,
    *,
    newline: str | None = "\n",
    check: Callable[[Path], Any] | None = None,
) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; ``"\\n"`` stays ``"\\n"`` unless ``newline``
    says otherwise (see :func:`write_via`)."""
    return write_via(path, lambda fh: fh.write(text), binary=False, newline=newline, check=check)


def copy_file(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Copy the bytes of ``source`` to ``target`` atomically (mode :data:`FILE_MODE`)."""
    return write_bytes(target, Path(source).read_bytes())
