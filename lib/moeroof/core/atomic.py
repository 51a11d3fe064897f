"""Atomic file writes: the one way the suite writes an output file.

Every writer goes through :func:`write_via`: the content is written to a temp file in the
target's own directory (so the final rename never crosses a filesystem), flushed and fsynced,
optionally checked, given the mode of an ordinary new file (``0o644``) and moved over the target
with :func:`os.replace`. A reader sees the old file or the new one, never half of one; on any
error (a failed check included) the temp file is removed and the target is left as it was, and
an :class:`OSError` names the target (not the temp file). A target that is a device or a pipe
(``/dev/null``, ``/dev/stdout``, a FIFO) is written into directly, never replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "FILE_MODE",
    "OutputBusyError",
    "Part",
    "write_via",
    "write_together",
    "write_bytes",
    "write_text",
    "copy_file",
    "same_file",
    "check_writable_folder",
    "exclusive",
]

#: mode of every written file (``mkstemp`` makes 0600; outputs are meant to be read by anyone)
FILE_MODE = 0o644


def write_via(
    path: str | os.PathLike[str],
    write: Callable[[IO[Any]], Any],
    *,
    binary: bool = True,
    newline: str | None = None,
    check: Callable[[Path], Any] | None = None,
    durable: bool = True,
) -> Path:
    """Write ``path`` atomically through ``write(handle)``; return it as a :class:`~pathlib.Path`.

    ``handle`` is the open temp file: binary, or text (UTF-8, ``newline`` as :func:`open` takes
    it) when ``binary`` is false. ``check(temp_path)``, when given, runs on the complete temp
    file before the rename and vetoes it by raising. Parent directories are created.
    ``durable=False`` skips the fsync before the rename: for files whose reader checks them
    and can recompute them (the disk memo), where a power cut may leave an empty file but a run
    must not wait for the disk a thousand times (~5 ms each on a VM's disk).
    """
    return write_together([Part(Path(path), write, binary, newline, check)], durable=durable)[0]


@dataclass(frozen=True)
class Part:
    """One file of :func:`write_together`: its path and how to write it (as :func:`write_via`)."""

    path: Path
    write: Callable[[IO[Any]], Any]
    binary: bool = True
    newline: str | None = None
    check: Callable[[Path], Any] | None = None


def write_together(parts: Sequence[Part], *, durable: bool = True) -> list[Path]:
    """Write several files as one result (a table and its sidecar): both or neither.

    Every part is written to its temp file first (:func:`write_via`'s way); a part that fails (a
    full disk, a folder in the way, a check) removes every temp file and leaves every target as it
    was. Only then are the temp files renamed over their targets, in order; should a rename fail
    there, the targets already renamed get back what they replaced (each replaced file is kept as
    a hard link until the last rename; where the file system has none, a renamed target without
    a predecessor is removed). A device or pipe among the parts is written into when staged."""
    staged: list[tuple[Path, str | None]] = []
    try:
        for part in parts:
            staged.append((Path(part.path), _stage(part, durable)))
    except BaseException:
        for _, tmp in staged:
            _unlink(tmp)
        raise
    done: list[tuple[Path, str | None]] = []  # (target renamed, what it replaced)
    failing = staged[0][0] if staged else Path()
    try:
        for target, tmp in staged:
            if tmp is None:
                continue
            # one part: nothing to put back, so no link is made (the common single-file write)
            failing, kept = target, _keep(target) if len(staged) > 1 else None
            try:
                os.replace(tmp, target)
            except BaseException:
                _unlink(kept)
                raise
            done.append((target, kept))
    except BaseException as exc:
        for target, kept in reversed(done):
            with contextlib.suppress(OSError):
                if kept is not None:
                    os.replace(kept, target)
                else:
                    os.unlink(target)
        for _, tmp in staged:
            _unlink(tmp)
        if isinstance(exc, OSError):
            raise _named(exc, failing) from None
        raise
    for _, kept in done:
        _unlink(kept)
    return [target for target, _ in staged]


def _keep(target: Path) -> str | None:
    """A hard link to ``target``'s present file (None: no file there, or no hard links here)."""
    if not target.is_file():
        return None
    kept = f"{target.parent / ('.' + target.name)}.{os.getpid()}.{id(target)}.kept"
    try:
        os.link(target, kept)
    except OSError:
        return None
    return kept


def _unlink(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _stage(part: Part, durable: bool) -> str | None:
    """``part`` written to a complete, checked temp file beside its target (returned), or straight
    into a device or pipe (None); on any error nothing is left behind."""
    target = Path(part.path)
    text_args: dict[str, Any] = {} if part.binary else {"encoding": "utf-8", "newline": part.newline}
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        # a device or a pipe (/dev/null, /dev/stdout, a FIFO): written into, never replaced
        try:
            with open(target, "wb" if part.binary else "w", **text_args) as handle:
                part.write(handle)
                handle.flush()
        except OSError as exc:
            raise _named(exc, target) from None
        return None
    for folder in (target.parent, *target.parent.parents):
        if folder.exists():
            if not folder.is_dir():  # a path under a file
                raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(folder))
            break
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _named(exc, target) from None
    try:
        with os.fdopen(fd, "wb" if part.binary else "w", **text_args) as handle:
            part.write(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if part.check is not None:
            part.check(Path(tmp))
        os.chmod(tmp, FILE_MODE)
    except BaseException as exc:
        _unlink(tmp)
        if isinstance(exc, OSError):  # name the target, not the temp file
            raise _named(exc, target) from None
        raise
    return tmp


def _named(exc: OSError, target: Path) -> OSError:
    """``exc`` again, naming ``target`` (a full disk, a read-only folder, a folder as the target)."""
    if exc.errno is None:  # numpy's short write ("16384 requested and 1468 written") says no file
        return OSError(None, f"could not write it whole ({exc}): a full disk or a file size limit?", str(target))
    return type(exc)(exc.errno, exc.strerror, str(target))


def write_bytes(path: str | os.PathLike[str], data: bytes, *, check: Callable[[Path], Any] | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`write_via`)."""
    return write_via(path, lambda fh: fh.write(data), check=check)


def write_text(
    path: str | os.PathLike[str],
    text: str,
    *,
    newline: str | None = "\n",
    check: Callable[[Path], Any] | None = None,
    durable: bool = True,
) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; ``"\\n"`` stays ``"\\n"`` unless ``newline``
    says otherwise (see :func:`write_via`)."""
    return write_via(path, lambda fh: fh.write(text), binary=False, newline=newline, check=check, durable=durable)


def copy_file(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Copy the bytes of ``source`` to ``target`` atomically (mode :data:`FILE_MODE`)."""
    return write_bytes(target, Path(source).read_bytes())


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` name one file: the same resolved path (symbolic links followed),
    or, both existing, the same inode (a hard link)."""
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.resolve() == pb.resolve():
        return True
    try:
        return os.path.samefile(pa, pb)
    except OSError:
        return False


def check_writable_folder(path: str | os.PathLike[str]) -> Path:
    """The folder ``path`` will be written into, checked by creating and removing a file there
    (permission bits alone would let root past a read-only mount); :class:`FileNotFoundError`
    when the folder does not exist, :class:`NotADirectoryError` when it is a file, the
    :class:`OSError` of the probe when it cannot be written."""
    target = Path(path).expanduser()
    folder = target.resolve().parent
    with contextlib.suppress(OSError):
        if not stat.S_ISREG(os.stat(target).st_mode) and not target.is_dir():
            return folder  # a device or pipe is written into, not replaced (write_via)
    if not folder.exists():
        raise FileNotFoundError(2, "no such folder", str(folder))
    if not folder.is_dir():
        raise NotADirectoryError(20, "not a folder", str(folder))
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{Path(path).name}.", suffix=".probe", dir=folder)
    except OSError as exc:  # name the folder, not the probe's random name
        raise type(exc)(exc.errno, exc.strerror, str(folder)) from None
    os.close(fd)
    os.unlink(probe)
    return folder


class OutputBusyError(OSError):
    """Another process holds the output's lock (:func:`exclusive`)."""


@contextlib.contextmanager
def exclusive(path: str | os.PathLike[str], what: str = "another moeroof process") -> Iterator[Path]:
    """Hold ``path``'s lock while a read-modify-write of it runs, so that two writers of one
    output never both report success while one of them is lost: the second fails at once with
    :class:`OutputBusyError` naming the output, instead of waiting.

    The lock is an exclusive ``flock`` on the hidden file ``.NAME.lock`` beside ``path``, removed
    when the holder is done (a holder killed with SIGKILL leaves it, and the kernel releases the
    lock, so the next run takes it). Taking it checks that the file locked is still the one at
    that name (a holder may have removed it in between); where ``fcntl`` is missing (Windows)
    nothing is locked."""
    target = Path(path).expanduser()
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this platform
        yield target
        return
    lock = target.with_name(f".{target.name}.lock")
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise _named(exc, target) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusyError(
                errno.EBUSY,
                f"{what} is writing it now (its lock {lock.name} is held); wait for it or give another output",
                str(target),
            ) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed it after we opened it: lock the new one
    try:
        yield target
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) while the block writes, then raise it (``KeyboardInterrupt``) once the
    block is done: a save that keeps what a run computed must finish whole rather than be cut by
    the interrupt it is saving for. Only where Python's own handler is installed, on the main
    thread (an ignored SIGINT stays ignored; another handler is left alone)."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt
