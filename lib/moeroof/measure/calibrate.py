"""``moeroof calibrate``: measure the roofline's inputs on the machine at hand.

The roofline (:mod:`moeroof.models.plan`) needs four numbers of a box; this module measures each of
them and writes them as a hardware TOML in the presets schema (:mod:`moeroof.data.presets`), every
field ``witnessed = true`` with the date and the method in its ``source``:

- ``bw_ssd_bytes_per_s`` at ``ssd_read_size_bytes`` (128 KiB … 16 MiB): random reads of a
  scratch file in rounds that visit every read size in a shuffled order, one read at a time
  (queue depth 1, as the bench reads), at page-aligned offsets,
  **bypassing the page cache** — ``O_DIRECT`` into page-aligned anonymous-``mmap`` buffers with
  ``os.preadv`` (path ``o_direct``), or, where the filesystem refuses ``O_DIRECT`` (tmpfs,
  some network filesystems), buffered reads with ``posix_fadvise(POSIX_FADV_DONTNEED)`` on the
  whole file before each measurement and on each range after it is read (path ``fadvise``).
  ``bandwidth = Σ bytes / Σ seconds`` over the reads of one cell. Sequential reads (offsets
  0, s, 2s, … wrapping at the end) are measured too and written in the file's header comment.
- ``bw_mem_bytes_per_s``: ``numpy.copyto`` of one large float64 array into another; bytes =
  2 × array bytes (each byte read once and written once, STREAM's "copy" convention); the
  median over repeats after one warm-up.
- ``flops_per_s``: dense ``n × n`` float32 matmul (the bench's precision, numpy's BLAS with its
  default threads); FLOP = 2n³ per product; the median over repeats after one warm-up.
- ``ram_bytes`` and ``os_reserve_bytes``: ``MemTotal`` and ``MemTotal − MemAvailable`` of
  ``/proc/meminfo`` at calibration time (``os.sysconf`` where there is no /proc).

- ``engine_seconds_per_step`` and ``engine_seconds_per_agent_token`` (the step model's engine
  term ``c0 + c1·B``, :mod:`moeroof.models.step`): the overhead of *this suite's own numpy decode
  loop* (``moeroof bench``'s) on this box — not of any other serving engine. ``calibrate`` takes
  the measurement as a callable (``engine=``; the CLI passes
  :func:`moeroof.measure.bench.measure_engine`, which times the bench's decode step on a tiny
  in-memory stack at B = 1 … 32 so that reads, bytes and FLOP are negligible) and
  :func:`fit_engine_line` fits ``t(B) = c0 + c1·B`` by least squares; ``engine=None`` leaves
  the two fields out (they load as ``assumed`` 0).

The page-cached read bandwidth (the same file read twice through the page cache, the second
pass timed) has no field in the schema; it is reported and written in the header comment.

Size and time are bounded by flags (``file_bytes``, ``seconds``); bad sizes are refused before
any work (:func:`check_disk`, :func:`check_memory`). Scratch files live in a fresh directory
that :func:`scratch_space` removes on every exit, SIGINT, SIGTERM and SIGHUP included (and
that the next run sweeps away after a SIGKILL, :func:`sweep_stale_scratch`). The TOML is
written to a temp file beside the target, checked with :func:`moeroof.data.presets.load_hardware`,
then moved over the target with ``os.replace`` (:mod:`moeroof.core.atomic`: whole file or none).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import mmap
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

try:
    import fcntl
except ImportError:  # not POSIX: no scratch locks, so no sweeping either
    fcntl = None  # type: ignore[assignment]

import numpy as np

from moeroof.core import atomic
from moeroof.core.rng import generator
from moeroof.core.units import GiB, KiB, MiB

__all__ = [
    "ALIGN",
    "READ_SIZES_BYTES",
    "READ_PATHS",
    "ResourceError",
    "DeviceFile",
    "Progress",
    "aligned_buffer",
    "scratch_space",
    "sweep_stale_scratch",
    "process_start_time",
    "SCRATCH_PREFIX",
    "SCRATCH_LOCK",
    "meminfo",
    "check_disk",
    "check_memory",
    "machine_info",
    "write_scratch_file",
    "measure_reads",
    "measure_page_cache",
    "measure_memory",
    "measure_matmul",
    "EngineFit",
    "fit_engine_line",
    "Calibration",
    "calibrate",
    "hardware_toml",
]

#: O_DIRECT needs offsets, lengths and buffers aligned to the logical block size; 4 KiB covers
#: 512-byte and 4 KiB devices alike
ALIGN = 4096
#: the read sizes of the SSD curve: 128 KiB · 2^i, i = 0…7 → 128 KiB … 16 MiB
READ_SIZES_BYTES = tuple(int(128 * KiB) << i for i in range(8))
READ_PATHS = ("auto", "o_direct", "fadvise")
#: disk left free beside a scratch file, bytes
DISK_MARGIN_BYTES = 256 * MiB
#: share of MemAvailable a run may take
MEMORY_SHARE = 0.5
_CHUNK_BYTES = int(16 * MiB)


class ResourceError(ValueError):
    """A size that the disk or memory cannot hold; raised before any work starts."""


# ----------------------------------------------------------------------------- resources


def meminfo() -> dict[str, float]:
    """``{"total": MemTotal, "available": MemAvailable}`` in bytes (/proc/meminfo, else sysconf)."""
    out: dict[str, float] = {}
    names = {"MemTotal": "total", "MemAvailable": "available"}
    with contextlib.suppress(OSError), open("/proc/meminfo") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in names:
                out[names[key]] = float(rest.split()[0]) * 1024.0
    if "total" not in out:
        page = os.sysconf("SC_PAGE_SIZE")
        out["total"] = float(page * os.sysconf("SC_PHYS_PAGES"))
        with contextlib.suppress(ValueError, OSError):
            out["available"] = float(page * os.sysconf("SC_AVPHYS_PAGES"))
    out.setdefault("available", out["total"])
    return out


def _fmt_bytes(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / MiB:.1f} MiB"


def check_disk(directory: str | os.PathLike[str], nbytes: float, what: str) -> None:
    """Refuse ``nbytes`` of scratch in ``directory`` unless the disk keeps a margin free
    (:data:`DISK_MARGIN_BYTES`); ``what`` names the parameter in the message."""
    free = shutil.disk_usage(directory).free
    if nbytes + DISK_MARGIN_BYTES > free:
        raise ResourceError(
            f"{what}: needs {_fmt_bytes(nbytes)} of scratch in {directory} but the disk has "
            f"{_fmt_bytes(free)} free (keeping {_fmt_bytes(DISK_MARGIN_BYTES)} spare); use a smaller size or another scratch directory"
        )


def check_memory(nbytes: float, what: str) -> None:
    """Refuse a run that would take more than :data:`MEMORY_SHARE` of the memory available
    (:func:`moeroof.core.limits.available_memory`: ``MemAvailable``, lowered to what an
    address-space limit leaves; ``MemAvailable`` alone let ``calibrate --matmul-n 20000`` under a
    4 GB ``ulimit -v`` pass, measure its reads, and run out of memory at its matmul)."""
    from moeroof.core.limits import available_memory

    avail = float(available_memory())
    if nbytes > MEMORY_SHARE * avail:
        raise ResourceError(
            f"{what}: needs {_fmt_bytes(nbytes)} of memory but only {_fmt_bytes(avail)} is available "
            f"(at most {MEMORY_SHARE:.0%} of it may be used); use a smaller size"
        )


def machine_info(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """What the measurement ran on: CPU model, logical cores, memory, kernel, Python, numpy, and
    the filesystem holding ``path``. No host name."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        cpu = next((line.split(":", 1)[1].strip() for line in fh if line.lower().startswith("model name")), cpu)
    info: dict[str, Any] = {"cpu": cpu, "logical_cores": os.cpu_count(), "ram_bytes": meminfo()["total"]}
    info.update(system=f"{platform.system()} {platform.release()}", python=platform.python_version())
    info["numpy"] = np.__version__
    if path is not None:
        info["filesystem"] = _filesystem(Path(path))
    return info


def _filesystem(path: Path) -> str:
    """Type and device of the mount holding ``path`` (longest mount-point prefix in /proc/mounts)."""
    best, fs = "", "unknown"
    target = str(path.resolve())
    with contextlib.suppress(OSError), open("/proc/mounts") as fh:
        for dev, mnt, kind, *_ in (parts for parts in map(str.split, fh) if len(parts) >= 3):
            inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best):
                best, fs = mnt, f"{kind} on {dev} at {mnt}"
    return fs


# ----------------------------------------------------------------------------- scratch space


#: the signals that end a measurement cleanly (scratch removed, exit 130): Ctrl-C, a kill, and a
#: closed terminal or ssh session (SIGHUP), all alike
_SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None)

#: a scratch folder is ``SCRATCH_PREFIX`` + mkdtemp's 8 random characters; nothing else is swept
SCRATCH_PREFIX = ".moeroof-scratch-"
_SCRATCH_NAME = re.compile(re.escape(SCRATCH_PREFIX) + r"[a-z0-9_]{8}")
#: the file inside a scratch folder that its run holds an exclusive lock on while it lives
SCRATCH_LOCK = ".owner.lock"
_IMPORTED_AT = time.time()


def process_start_time() -> float:
    """When this process started (wall clock, from /proc; else when this module was imported)."""
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime"))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime in ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT


def _lock_free(folder: Path) -> bool:
    """Whether no live run holds ``folder``'s lock (a missing lock file: its run died before
    taking it, or predates locks)."""
    try:
        fd = os.open(folder / SCRATCH_LOCK, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        return isinstance(err, FileNotFoundError)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def sweep_stale_scratch(parent: str | os.PathLike[str]) -> list[Path]:
    """Remove the scratch folders a killed run (SIGKILL, power loss) left in ``parent``; returns
    them. Only folders named exactly ``.moeroof-scratch-XXXXXXXX`` (not links), last changed
    before this process started, whose run no longer holds their lock, are removed; nothing
    else in ``parent`` is touched. A no-op where file locks are not available."""
    if fcntl is None:
        return []
    start = process_start_time() - 2.0  # /proc's boot time has 1 s resolution
    removed: list[Path] = []
    try:
        entries = [entry for entry in os.scandir(parent) if _SCRATCH_NAME.fullmatch(entry.name)]
    except OSError:
        return removed
    for entry in entries:
        try:
            stale = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < start
        except OSError:
            continue
        if stale and _lock_free(Path(entry.path)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def scratch_space(base: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """A fresh directory for scratch files under ``base`` (default: the system temp dir), removed
    with everything in it when the block exits — normally, on an exception, on Ctrl-C (SIGINT),
    SIGTERM or SIGHUP (turned into ``KeyboardInterrupt`` so ``finally`` runs). The run holds a
    lock on the folder while it lives; stale folders of killed runs in ``base`` are swept first
    (:func:`sweep_stale_scratch`). Signals are ignored
    while the directory is removed, so a second Ctrl-C cannot leave half of it behind. Signal
    handlers are only installed from the main thread (elsewhere Python forbids it)."""
    parent = Path(base) if base is not None else Path(tempfile.gettempdir())
    if not parent.is_dir():
        raise ResourceError(f"scratch_dir: {parent} is not a directory")
    main = threading.current_thread() is threading.main_thread()
    old = {sig: signal.signal(sig, _raise_interrupt) for sig in _SIGNALS} if main else {}
    sweep_stale_scratch(parent)
    path = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
    lock = None
    try:
        if fcntl is not None:
            lock = os.open(path / SCRATCH_LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)  # held until the folder goes: a later run leaves it be
        yield path
    finally:
        for sig in old:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if lock is not None:
                os.close(lock)
            shutil.rmtree(path, ignore_errors=True)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


# ----------------------------------------------------------------------------- device reads


def aligned_buffer(nbytes: int) -> mmap.mmap:
    """A writable, page-aligned anonymous buffer of ``nbytes`` rounded up to :data:`ALIGN`
    (anonymous ``mmap`` memory starts on a page boundary, which O_DIRECT requires)."""
    n = max(ALIGN, -(-int(nbytes) // ALIGN) * ALIGN)
    return mmap.mmap(-1, n)


class DeviceFile(contextlib.AbstractContextManager["DeviceFile"]):
    """A file opened so that its reads reach the device, not the page cache.

    ``read_path="auto"`` tries ``O_DIRECT`` (a test read of one aligned block) and falls back to
    ``fadvise`` when the filesystem refuses it; ``"o_direct"`` or ``"fadvise"`` force one (a
    forced ``o_direct`` that is refused raises :class:`ResourceError`). With ``fadvise`` every
    :meth:`read_into` drops the range it read (``POSIX_FADV_DONTNEED``) so a later read of the
    same range goes to the device again; :meth:`drop_cache` drops the whole file.
    ``bytes_read`` and ``reads`` count what :meth:`read_into` returned.
    """

    def __init__(self, path: str | os.PathLike[str], read_path: str = "auto") -> None:
        if read_path not in READ_PATHS:
            raise ValueError(f"read_path must be one of {READ_PATHS}, got {read_path!r}")
        self.path = Path(path)
        self.fd = -1
        self.bytes_read = self.reads = 0
        self.read_path = self.refused = ""
        if read_path in ("auto", "o_direct"):
            self._try_direct()
            if not self.read_path and read_path == "o_direct":
                raise ResourceError(f"read_path o_direct: {self.path.parent} refuses O_DIRECT ({self.refused})")
        if not self.read_path:
            if not hasattr(os, "posix_fadvise"):
                why = "this system has neither O_DIRECT nor posix_fadvise: reads cannot bypass the page cache"
                raise ResourceError(why)
            self.fd = os.open(self.path, os.O_RDONLY)
            self.read_path = "fadvise"
            self.drop_cache()

    def _try_direct(self) -> None:
        flag = getattr(os, "O_DIRECT", None)
        if flag is None:
            self.refused = "no O_DIRECT on this system"
            return
        fd = -1
        try:
            fd = os.open(self.path, os.O_RDONLY | flag)
            with aligned_buffer(ALIGN) as buf:
                os.preadv(fd, [buf], 0)
        except OSError as err:
            if fd >= 0:
                os.close(fd)
            self.refused = err.strerror or str(err)
            return
        self.fd, self.read_path = fd, "o_direct"

    @property
    def method(self) -> str:
        """One line saying how reads bypass the page cache."""
        if self.read_path == "o_direct":
            return "O_DIRECT, page-aligned mmap buffers, os.preadv, one read at a time"
        why = f" (O_DIRECT refused: {self.refused})" if self.refused else ""
        return "buffered os.preadv with posix_fadvise DONTNEED before each measurement and after each read" + why

    def read_into(self, buf: mmap.mmap | memoryview, offset: int, nbytes: int) -> int:
        """Read ``nbytes`` at ``offset`` into the start of ``buf`` (both multiples of
        :data:`ALIGN` on the ``o_direct`` path); short reads are continued; returns bytes read."""
        done = 0
        with memoryview(buf) as view:
            while done < nbytes:
                with view[done:nbytes] as part:
                    n = os.preadv(self.fd, [part], offset + done)
                if n == 0:
                    break
                done += n
        if self.read_path == "fadvise":
            os.posix_fadvise(self.fd, offset, nbytes, os.POSIX_FADV_DONTNEED)
        self.bytes_read += done
        self.reads += 1
        return done

    def drop_cache(self) -> None:
        """Drop the file's cached pages (``fadvise`` path; a no-op under ``O_DIRECT``)."""
        if self.read_path == "fadvise":
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ----------------------------------------------------------------------------- progress


class Progress:
    """A plain-text progress bar on stderr: ``\\r``-redrawn on a terminal, one line per phase
    otherwise (CI logs). ``advance`` takes the fraction of the whole run just completed."""

    def __init__(self, title: str, *, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.title = title
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = 0.0
        self.label = ""
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()

    def phase(self, label: str) -> None:
        if self.enabled and not self.tty:
            print(f"{self.title}: {self.done:4.0%} {label}", file=self.stream, flush=True)
        self.status(label)

    def status(self, label: str) -> None:
        """A finer label within a phase: redrawn on a terminal, not logged line by line."""
        self.label = label
        self._draw()

    def advance(self, fraction: float) -> None:
        self.done = min(1.0, self.done + max(0.0, fraction))
        self._draw()

    def _draw(self) -> None:
        if self.tty:
            fill = int(round(self.done * 30))  # of a 30-character bar
            line = f"\r{self.title} [{'#' * fill + '-' * (30 - fill)}] {self.done:4.0%} {self.label[:40]:<40}"
            print(line, end="", file=self.stream, flush=True)

    def finish(self) -> None:
        self.done = 1.0
        if self.tty:
            self._draw()
            print(file=self.stream, flush=True)
        elif self.enabled:
            print(f"{self.title}: done", file=self.stream, flush=True)


# ----------------------------------------------------------------------------- measurements


def write_scratch_file(
    path: Path, nbytes: int, rng: np.random.Generator, progress: Progress | None = None, share: float = 0.0
) -> None:
    """Write ``nbytes`` (a multiple of :data:`ALIGN`) of incompressible data and ``fsync`` it.

    One random 16 MiB chunk is generated and written repeatedly with the first 8 bytes of each
    4 KiB block stamped with the block's index, so no two blocks are equal (a deduplicating or
    compressing layer below would otherwise flatter the reads)."""
    chunk = np.frombuffer(bytearray(rng.bytes(_CHUNK_BYTES)), dtype=np.uint64).reshape(-1, ALIGN // 8)
    blocks = chunk.shape[0]  # per chunk
    with open(path, "wb") as fh:
        for i, start in enumerate(range(0, nbytes, _CHUNK_BYTES)):
            n = min(_CHUNK_BYTES, nbytes - start)
            chunk[:, 0] = np.arange(i * blocks, (i + 1) * blocks, dtype=np.uint64)
            fh.write(chunk.data.cast("B")[:n])
            if progress is not None:
                progress.advance(share * n / nbytes)
        fh.flush()
        os.fsync(fh.fileno())


@dataclass
class ReadCell:
    """One (pattern, read size) measurement: Σ bytes / Σ seconds over ``reads`` reads."""

    pattern: str
    read_size_bytes: int
    reads: int
    bytes: int
    seconds: float

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else float("nan")


def measure_reads(
    dev: DeviceFile,
    file_bytes: int,
    read_size: int,
    pattern: str,
    seconds: float,
    rng: np.random.Generator,
    *,
    min_reads: int = 2,
) -> ReadCell:
    """Time reads of ``read_size`` bytes until ``seconds`` have passed (at least ``min_reads``,
    at most four passes over the file's worth of bytes). ``pattern`` ``"random"``: offsets
    uniform over the file at multiples of :data:`ALIGN`; ``"sequential"``: o, o + s, o + 2s, …
    from a random aligned o, wrapping to 0 at the end of the file. Only the ``preadv`` calls
    are timed."""
    if pattern not in ("random", "sequential"):
        raise ValueError(f"pattern must be 'random' or 'sequential', got {pattern!r}")
    if read_size > file_bytes:
        raise ValueError(f"read size {read_size} exceeds the file ({file_bytes} bytes)")
    dev.drop_cache()
    slots = (file_bytes - read_size) // ALIGN + 1
    per_pass = max(1, file_bytes // read_size)
    busy = 0.0
    reads = nbytes = 0
    next_seq = int(rng.integers(0, slots)) * ALIGN if pattern == "sequential" else 0
    with aligned_buffer(read_size) as buf:
        while reads < min_reads or (busy < seconds and reads < 4 * per_pass):
            if pattern == "random":
                offset = int(rng.integers(0, slots)) * ALIGN
            else:  # wrapping to 0 where the next read would pass the end
                offset = next_seq if next_seq + read_size <= file_bytes else 0
                next_seq = offset + read_size
            t0 = time.perf_counter()
            nbytes += dev.read_into(buf, offset, read_size)
            busy += time.perf_counter() - t0
            reads += 1
    return ReadCell(pattern, read_size, reads, nbytes, busy)


def measure_page_cache(path: Path, nbytes: int, read_size: int, seconds: float) -> ReadCell:
    """Page-cached read bandwidth: read the first ``nbytes`` of ``path`` once through the page
    cache (untimed, to load it), then time repeated passes of ``read_size`` reads over it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with aligned_buffer(read_size) as buf, memoryview(buf)[:read_size] as view:
            for off in range(0, nbytes, read_size):
                os.preadv(fd, [view], off)
            reads = done = 0
            busy = 0.0
            while reads == 0 or busy < seconds:
                for off in range(0, nbytes, read_size):
                    t0 = time.perf_counter()
                    done += os.preadv(fd, [view], off)
                    busy += time.perf_counter() - t0
                    reads += 1
        return ReadCell("page-cache", read_size, reads, done, busy)
    finally:
        os.close(fd)


def _median_rate(work: float, run: Callable[[], object], seconds: float, min_repeats: int = 3) -> tuple[float, int]:
    """``work / t`` for the median ``t`` of repeated ``run()`` calls after one untimed warm-up."""
    run()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_repeats or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return work / float(np.median(times)), len(times)


def measure_memory(nbytes: int, seconds: float) -> tuple[float, int]:
    """Memory bandwidth (bytes/s) of ``numpy.copyto`` between two float64 arrays of ``nbytes``
    each; bytes moved per copy = 2 · nbytes. Returns (median rate, repeats)."""
    n = max(1, int(nbytes) // 8)
    src = np.ones(n)
    dst = np.empty_like(src)
    return _median_rate(2.0 * n * 8, lambda: np.copyto(dst, src), seconds)


def measure_matmul(n: int, seconds: float, rng: np.random.Generator) -> tuple[float, int]:
    """Dense float32 matmul FLOP/s of ``n × n`` by ``n × n`` (2n³ FLOP per product), numpy's BLAS
    with its default threads. Returns (median rate, repeats)."""
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    return _median_rate(2.0 * float(n) ** 3, lambda: np.matmul(a, b, out=out), seconds)


def fit_engine_line(batch, seconds) -> tuple[float, float, float]:
    """Least-squares line ``t(B) = c0 + c1·B`` through measured step seconds; returns
    ``(c0, c1, rms_residual)`` in seconds.

    Both coefficients are kept ≥ 0 (a preset's value may not be negative, and an engine never
    gives time back): when the unconstrained fit (``numpy.linalg.lstsq``) has a negative one,
    the better of the two one-parameter fits (``c0 = 0`` or ``c1 = 0``) is taken — the
    non-negative least-squares solution of a two-column problem."""
    b = np.asarray(batch, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if b.ndim != 1 or b.shape != t.shape or b.size < 2 or np.unique(b).size < 2:
        raise ValueError("fit_engine_line needs at least two different batch sizes, one time each")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(b))):
        raise ValueError("fit_engine_line: batch sizes and seconds must be finite")
    design = np.column_stack([np.ones_like(b), b])
    (c0, c1), *_ = np.linalg.lstsq(design, t, rcond=None)
    if c0 < 0 or c1 < 0:
        candidates = [(max(0.0, float(np.mean(t))), 0.0), (0.0, max(0.0, float(b @ t / (b @ b))))]
        c0, c1 = min(candidates, key=lambda c: float(np.sum((c[0] + c[1] * b - t) ** 2)))
    rms = float(np.sqrt(np.mean((c0 + c1 * b - t) ** 2)))
    return float(c0), float(c1), rms


@dataclass
class EngineFit:
    """The engine terms of a decode loop timed at several batch sizes (:func:`fit_engine_line`).

    ``batch`` and ``step_seconds``: the B grid and the median step seconds at each;
    ``seconds_per_step`` (c0) and ``seconds_per_agent_token`` (c1) the fit, with its
    ``rms_residual_seconds``; ``source``: what was timed (written into the TOML); ``extra``:
    JSON-ready side measurements (e.g. another mode's fit), reported but not written as fields.
    """

    seconds_per_step: float
    seconds_per_agent_token: float
    rms_residual_seconds: float
    batch: list[int]
    step_seconds: list[float]
    source: str
    repeats: int
    wall_seconds: float
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {k: list(v) if isinstance(v, list) else v for k, v in vars(self).items() if k != "extra"}
        return {("engine_" if k.startswith("seconds_per") else "") + k: v for k, v in d.items()} | self.extra


# ----------------------------------------------------------------------------- the run


@dataclass
class Calibration:
    """What :func:`calibrate` measured (SI units) and where it wrote the TOML."""

    date: str
    command: str
    read_path: str
    read_method: str
    machine: dict[str, Any]
    ram_bytes: float
    os_reserve_bytes: float
    bw_mem_bytes_per_s: float
    flops_per_s: float
    random: list[ReadCell]
    sequential: list[ReadCell]
    page_cache: ReadCell
    file_bytes: int
    seconds_budget: float
    wall_seconds: float
    mem_bytes: int
    matmul_n: int
    output: Path | None = None
    name: str = ""
    notes: list[str] = field(default_factory=list)
    engine: EngineFit | None = None

    def hardware(self):
        """The calibration as a :class:`moeroof.data.presets.Hardware`, read back through the presets
        loader from its TOML (a temp file, removed), so it is exactly what the file would give."""
        from moeroof.data.presets import load_hardware

        with tempfile.TemporaryDirectory(prefix="moeroof-calibration-") as tmp:
            path = Path(tmp) / "hardware.toml"
            path.write_text(hardware_toml(self), encoding="utf-8")
            return replace(load_hardware(path), path=self.output)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: SI numbers, the curves as lists, provenance ``witnessed``."""

        def fields(names: str, of: Any = self) -> dict[str, Any]:
            return {k: getattr(of, k) for k in names.split()}

        def cells(cs: list[ReadCell]) -> dict[str, list]:
            return {k: [getattr(c, k) for c in cs] for k in ("read_size_bytes", "bytes_per_s", "reads")}

        return {
            "what": "moeroof calibrate",
            "provenance": "witnessed",
            **fields("date command machine name"),
            "output": str(self.output) if self.output else None,
            **fields("read_path read_method ram_bytes os_reserve_bytes bw_mem_bytes_per_s flops_per_s"),
            "ssd_random": cells(self.random),
            "ssd_sequential": cells(self.sequential),
            **{f"page_cache_{k}": v for k, v in fields("bytes_per_s read_size_bytes", self.page_cache).items()},
            **fields("file_bytes mem_bytes matmul_n seconds_budget wall_seconds"),
            "engine": self.engine.to_dict() if self.engine is not None else None,
            "notes": list(self.notes),
        }


def _toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _toml_num(x: float) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 2**53 else repr(x)


def hardware_toml(cal: Calibration) -> str:
    """The presets-schema TOML for a calibration: every field ``witnessed = true``, the date and
    the method in its ``source``; the sequential curve and the page-cached bandwidth, which the
    schema has no field for, in the header comment."""
    d = cal.date
    gbs = lambda x: f"{x / 1e9:.3f}"  # noqa: E731
    sizes = [c.read_size_bytes for c in cal.random]
    size_txt = ", ".join(f"{s / KiB:g} KiB" if s < MiB else f"{s / MiB:g} MiB" for s in sizes)
    header = [
        f"# Witnessed by `moeroof calibrate` on {d} (UTC). Re-run it to refresh; do not edit the numbers by hand.",
        f"# command: {cal.command}",
        "# machine: " + ", ".join(f"{k} {v}" for k, v in cal.machine.items()),
        f"# read path: {cal.read_path} ({cal.read_method})",
        f"# read sizes: {size_txt}",
        "# random reads, GB/s (bw_ssd_bytes_per_s below): " + ", ".join(gbs(c.bytes_per_s) for c in cal.random),
        "# sequential reads, GB/s (not in the schema):     " + ", ".join(gbs(c.bytes_per_s) for c in cal.sequential),
        f"# page-cached reads at {cal.page_cache.read_size_bytes / MiB:g} MiB, GB/s (not in the schema): {gbs(cal.page_cache.bytes_per_s)}",
    ]
    eng = cal.engine
    if eng is not None:
        us = lambda x: f"{x * 1e6:.1f}"  # noqa: E731
        header += [
            "# engine terms (engine_seconds_per_* below): the overhead of this suite's own numpy bench engine on this box",
            f"# engine step seconds at B = {', '.join(map(str, eng.batch))}, us: "
            + ", ".join(map(us, eng.step_seconds)),
            f"# engine fit: t = {us(eng.seconds_per_step)} us + {us(eng.seconds_per_agent_token)} us x B, "
            f"rms residual {us(eng.rms_residual_seconds)} us",
        ] + [f"# engine note: {n}" for n in eng.notes]
    header += [f"# note: {n}" for n in cal.notes]
    desc = f"measured by moeroof calibrate on {d}: {cal.machine.get('cpu')}, {cal.machine.get('logical_cores')} logical cores"
    mem_how = f"numpy.copyto of {cal.mem_bytes / MiB:g} MiB float64 arrays, bytes = 2 x array (read + write), median of repeats"
    flops_how = (
        f"float32 numpy matmul {cal.matmul_n}x{cal.matmul_n}, 2n^3 FLOP, default BLAS threads, median of repeats"
    )
    ssd_how = (
        f"random {cal.read_path} reads of a {cal.file_bytes / MiB:g} MiB scratch file, queue depth 1, "
        f"4 KiB-aligned offsets, sum bytes / sum seconds ({cal.read_method})"
    )
    fields: list[tuple[str, Any, str, str]] = [  # (key, value, unit, how it was measured)
        ("ram_bytes", cal.ram_bytes, "B", "MemTotal of /proc/meminfo"),
        ("bw_mem_bytes_per_s", cal.bw_mem_bytes_per_s, "B/s", mem_how),
        ("flops_per_s", cal.flops_per_s, "FLOP/s", flops_how),
        ("ssd_read_size_bytes", sizes, "B", "read sizes of the random-read measurement"),
        ("bw_ssd_bytes_per_s", [c.bytes_per_s for c in cal.random], "B/s", ssd_how),
        ("os_reserve_bytes", cal.os_reserve_bytes, "B", "MemTotal - MemAvailable of /proc/meminfo"),
    ]
    if eng is not None:
        for c, key in (("c0", "seconds_per_step"), ("c1", "seconds_per_agent_token")):
            fields.append((f"engine_{key}", getattr(eng, key), "s", f"{c} of {eng.source}"))
    body = ['kind = "hardware"', f"name = {_toml_str(cal.name)}", f"description = {_toml_str(desc)}"]
    for key, value, unit, how in fields:
        val = "[" + ", ".join(map(_toml_num, value)) + "]" if isinstance(value, list) else _toml_num(value)
        source = _toml_str(f"moeroof calibrate {d}: {how}")
        body.append(f"{key} = {{ value = {val}, unit = {_toml_str(unit)}, source = {source}, witnessed = true }}")
    return "\n".join(header + body) + "\n"


def _measure(
    base: Path | None,
    file_bytes: int,
    page_bytes: int,
    sizes: list[int],
    seconds: float,
    rounds: int,
    read_path: str,
    mem_bytes: int,
    matmul_n: int,
    engine: Callable[[], EngineFit] | None,
    rng: np.random.Generator,
    prog: Progress,
) -> dict[str, Any]:
    """:class:`Calibration`'s measured fields: write the scratch file and time its reads
    (``random``, ``sequential``, ``read_path``, ``read_method``, ``page_cache``), then memory
    copy (``bw_mem_bytes_per_s``), float32 matmul (``flops_per_s``) and ``engine`` (the engine's
    fit or None). ``seconds`` is shared as: 70 % the SSD cells (random and sequential at each
    read size), 10 % page-cached reads, 10 % memory copy, 10 % matmul; the engine outside it.

    The SSD cells are visited in ``rounds`` rounds, each in a fresh random order, and each
    cell's bandwidth is Σ bytes / Σ seconds over its visits: a shared device's slow spells then
    fall on every read size alike instead of bending the curve at whichever size they hit;
    writing the scratch file of ``file_bytes`` comes on top, bounded by its size.
    """
    with scratch_space(base) as scratch:
        path = scratch / "calibrate.bin"
        prog.phase(f"writing a {file_bytes / MiB:g} MiB scratch file")
        write_scratch_file(path, file_bytes, rng, prog, share=0.1)
        cells = [(pattern, size) for size in sizes for pattern in ("random", "sequential")]
        visit_s = 0.7 * seconds / (len(cells) * rounds)
        acc: dict[tuple[str, int], ReadCell] = {c: ReadCell(c[0], c[1], 0, 0, 0.0) for c in cells}
        with DeviceFile(path, read_path) as dev:
            for r in range(rounds):
                prog.phase(f"{dev.read_path} reads, round {r + 1}/{rounds}")
                for j in rng.permutation(len(cells)):
                    pattern, size = cells[j]
                    label = f"{size / KiB:g} KiB" if size < MiB else f"{size / MiB:g} MiB"
                    prog.status(f"{dev.read_path} reads, round {r + 1}/{rounds}: {pattern} {label}")
                    got = measure_reads(dev, file_bytes, size, pattern, visit_s, rng, min_reads=1)
                    cell = acc[pattern, size]
                    for k in ("reads", "bytes", "seconds"):
                        setattr(cell, k, getattr(cell, k) + getattr(got, k))
                    prog.advance(0.6 / (len(cells) * rounds))
            out: dict[str, Any] = {p: [acc[p, size] for size in sizes] for p in ("random", "sequential")}
            out.update(read_path=dev.read_path, read_method=dev.method)
        prog.phase("page-cached reads")
        out["page_cache"] = measure_page_cache(path, page_bytes, min(int(MiB), file_bytes), 0.1 * seconds)
        prog.advance(0.1)
    prog.phase("memory copy")
    out["bw_mem_bytes_per_s"] = measure_memory(mem_bytes, 0.1 * seconds)[0]
    prog.advance(0.1)
    prog.phase("float32 matmul")
    out["flops_per_s"] = measure_matmul(matmul_n, 0.1 * seconds, rng)[0]
    prog.advance(0.1)
    out["engine"] = None
    if engine is not None:
        prog.phase("engine overhead (the bench's decode loop, tiny in-memory stack)")
        out["engine"] = engine()
    return out


def calibrate(
    output: str | os.PathLike[str] | None,
    *,
    file_bytes: int = int(2 * GiB),
    seconds: float = 30.0,
    mem_bytes: int = int(256 * MiB),
    matmul_n: int = 2048,
    scratch_dir: str | os.PathLike[str] | None = None,
    read_path: str = "auto",
    name: str | None = None,
    seed: int = 0,
    rounds: int = 5,
    engine: Callable[[], EngineFit] | None = None,
    command: str = "",
    progress: Progress | None = None,
) -> Calibration:
    """Measure the box and write a witnessed hardware TOML to ``output`` (None: write nothing).

    ``seconds`` is the budget of the timed measurements, shared as: 70 % the SSD cells (random
    and sequential at each read size), 10 % page-cached reads, 10 % memory copy, 10 % matmul.
    The SSD cells are visited in ``rounds`` rounds in a fresh random order each (:func:`_measure`);
    writing the scratch file comes on top. Read sizes larger than the file are dropped (with a note). The scratch directory is a fresh folder
    under ``scratch_dir`` (default: the output's folder, so the file sits on the filesystem the
    user cares about; the system temp dir when there is no output), removed on every exit.
    All sizes are checked against free disk and available memory before anything is written.

    ``engine``: a callable that times a decode loop and returns its :class:`EngineFit` (the CLI
    passes :func:`moeroof.measure.bench.measure_engine`; this module cannot import the bench,
    which imports it), run last, outside the time budget (it takes a fraction of a second);
    its c0 and c1 are written as ``engine_seconds_per_step`` and
    ``engine_seconds_per_agent_token``, witnessed. ``None``: not measured, not written.
    """
    if not file_bytes >= 128 * KiB:
        raise ValueError("file_bytes: the scratch file must hold at least one 128 KiB read")
    if not seconds > 0:
        raise ValueError("seconds: must be > 0")
    if mem_bytes < 1 or matmul_n < 1:
        raise ValueError("mem_bytes and matmul_n must be positive")
    file_bytes = -(-int(file_bytes) // ALIGN) * ALIGN
    out = Path(output) if output is not None else None
    base = Path(scratch_dir) if scratch_dir is not None else (out.resolve().parent if out is not None else None)
    if base is not None and not base.is_dir():
        if scratch_dir is not None:
            raise ResourceError(f"scratch_dir: {base} is not a directory")
        raise ResourceError(f"output: the folder {base} does not exist")
    check_disk(base if base is not None else tempfile.gettempdir(), file_bytes, "file_bytes")
    page_bytes = min(file_bytes, int(256 * MiB))
    check_memory(2 * mem_bytes + 3 * 4 * matmul_n**2 + page_bytes + READ_SIZES_BYTES[-1], "mem_bytes/matmul_n")
    sizes = [s for s in READ_SIZES_BYTES if s <= file_bytes]
    notes = []
    if len(sizes) < len(READ_SIZES_BYTES):
        notes.append(f"read sizes above the {file_bytes / MiB:g} MiB scratch file were not measured")
    rng = generator(seed)
    prog = progress if progress is not None else Progress("calibrate", enabled=False)
    t_start = time.perf_counter()
    date = _dt.datetime.now(_dt.UTC).date().isoformat()
    mem = meminfo()
    got = _measure(
        base, file_bytes, page_bytes, sizes, seconds, rounds, read_path, mem_bytes, matmul_n, engine, rng, prog
    )
    if got["read_path"] == "fadvise":
        notes.append("reads bypass the page cache by posix_fadvise DONTNEED, not O_DIRECT: " + got["read_method"])
    cal = Calibration(
        date=date, command=command or "moeroof calibrate (library call)",
        machine=machine_info(base if base is not None else tempfile.gettempdir()),
        ram_bytes=mem["total"], os_reserve_bytes=max(0.0, mem["total"] - mem["available"]), **got,
        file_bytes=file_bytes, seconds_budget=seconds, wall_seconds=time.perf_counter() - t_start,
        mem_bytes=int(mem_bytes), matmul_n=int(matmul_n), output=out, name=name or f"calibrated-{date}", notes=notes,
    )  # fmt: skip
    if out is not None:
        from moeroof.data.presets import load_hardware

        atomic.write_text(out, hardware_toml(cal), check=load_hardware)
    prog.finish()
    return cal
