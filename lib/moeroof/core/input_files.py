"""Opening the files a user names, so that no read can block (docs/robustness.md).

``open()`` of a FIFO waits for a writer, forever if none comes, and a read of a character device
(``/dev/zero``, a terminal) never ends. Every reader of a file the user names opens it through
:func:`open_input`: the file is opened with ``O_NONBLOCK`` (opening a FIFO then returns at once),
the descriptor itself is checked with ``fstat`` (no window between the check and the read in which
the name could be swapped), anything but a regular file is refused with
:class:`NotRegularFileError`, and only then is the descriptor set back to blocking reads and
wrapped in a file object. A folder is :class:`IsADirectoryError`, a missing file
:class:`FileNotFoundError`, as :func:`open` raises them.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from typing import IO, Any, Literal, overload

__all__ = ["NotRegularFileError", "file_kind", "open_input", "read_input_bytes", "check_regular"]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


class NotRegularFileError(OSError):
    """The path names something other than a regular file (a FIFO, a socket, a device): reading
    it could block or never end. ``str()`` is the reason alone (``not a regular file (a FIFO)``)
    (named pipe))``); the path is in ``filename``."""

    def __init__(self, path: Any, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", os.fspath(path))

    def __str__(self) -> str:
        return str(self.strerror)


def file_kind(mode: int) -> str:
    """What a ``st_mode`` that is not a regular file's names (``a FIFO``, ``a socket``, ...)."""
    return next((kind for test, kind in _KINDS if test(mode)), "a special file")


def check_regular(path: str | os.PathLike[str], mode: int | None = None) -> None:
    """Refuse ``path`` unless it is a regular file (symbolic links followed): the errors of
    :func:`open_input`, without opening it (for readers that take a path, such as numpy's and
    pandas'); ``mode``, when given, is its ``st_mode`` (an open descriptor's)."""
    mode = os.stat(path).st_mode if mode is None else mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", os.fspath(path))
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(path, file_kind(mode))


@overload
def open_input(
    path: str | os.PathLike[str], *, text: Literal[False] = False, encoding: str = ..., newline: str | None = ...
) -> io.BufferedReader: ...


@overload
def open_input(
    path: str | os.PathLike[str], *, text: Literal[True], encoding: str = ..., newline: str | None = ...
) -> io.TextIOWrapper: ...


def open_input(
    path: str | os.PathLike[str], *, text: bool = False, encoding: str = "utf-8", newline: str | None = None
) -> IO[Any]:
    """``open(path)`` for reading (binary, or ``text`` in ``encoding``), refusing anything but a
    regular file before a read can block (module docstring)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        check_regular(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        if text:
            return open(fd, encoding=encoding, newline=newline)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the regular file ``path`` (:func:`open_input`): one more
    than the limit tells the caller the file is longer than it may be."""
    with open_input(path) as fh:
        return fh.read(limit + 1)
