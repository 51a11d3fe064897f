"""Stop a notebook kernel that sits idle mid-render, so that its render is retried at once.

A kernel has been seen to stop answering in the middle of a render (the idle hang the
``ipykernel`` pin in ``pyproject.toml`` names): the kernel uses no CPU while papermill waits for a
reply that never comes, until the cell timeout (:data:`moeroof.present.report.CELL_TIMEOUT_S`,
20 minutes) ends the attempt. A working cell uses CPU in the kernel or in a process it started
(a Dask worker, a compiler), so a kernel whose whole process tree has used none for
:data:`IDLE_KERNEL_S` is taken for hung: :class:`IdleKernelWatch` kills it, papermill reports a
dead kernel, and the render is retried once in a fresh kernel (as for any kernel that dies).

Before it is killed, what it was waiting on is kept for the next person to read (that showed
the hang the renderer's kernel client, :mod:`moeroof.present.kernel_client`, now avoids; the watch
stays as the backstop): each thread of the kernel and of every process below it, with its name,
state and kernel wait channel (``/proc/PID/task/TID/wchan``: a futex is a lock, ``ep_poll`` or
``do_select`` a wait for a message), in :attr:`IdleKernelWatch.diagnostics`, which the renderer
prints with its retry; and the kernel is first sent ``SIGABRT``, on which a kernel started with
``PYTHONFAULTHANDLER=1`` (:data:`moeroof.present.report.KERNEL_ENV`) writes every thread's
Python stack to its standard error, then, if still alive after :data:`ABORT_GRACE_S`, ``SIGKILL``.

CPU time is read from ``/proc/PID/stat`` (utime + stime, and cutime + cstime of the children it
has reaped); where there is no ``/proc`` (macOS, Windows) nothing is watched and the cell timeout
remains the only bound. The kernels watched are this process's children whose command line names
``ipykernel`` (papermill starts each kernel as a child of the process that renders).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import suppress
from pathlib import Path

__all__ = [
    "IDLE_KERNEL_S",
    "IDLE_KERNEL_ENV",
    "IDLE_CPU_SHARE",
    "env_seconds",
    "idle_kernel_seconds",
    "IdleKernelWatch",
    "tree_cpu_ticks",
    "thread_waits",
    "ABORT_GRACE_S",
]

#: seconds a kernel's process tree may use no CPU before it is taken for hung: far above any
#: pause of a working cell (the default cells compute without waiting on anything outside)
IDLE_KERNEL_S = 120.0
#: the environment variable that overrides it (a positive number of seconds; the tests set a short one)
IDLE_KERNEL_ENV = "MOEROOF_IDLE_KERNEL_S"
#: below this share of one core over the whole idle window a tree counts as idle: an idle kernel's
#: own threads (heartbeat, I/O) still wake now and then; a working cell uses most of a core
IDLE_CPU_SHARE = 0.01

#: seconds a kernel sent SIGABRT (to write its Python stacks) has to end before SIGKILL
ABORT_GRACE_S = 2.0

_PROC = Path("/proc")


def env_seconds(name: str, default: float) -> float:
    """``$name`` where it is a positive number of seconds, else ``default``."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if 0 < value < float("inf") else default


def idle_kernel_seconds() -> float:
    """:data:`IDLE_KERNEL_S`, or ``$MOEROOF_IDLE_KERNEL_S`` where that is a positive number."""
    return env_seconds(IDLE_KERNEL_ENV, IDLE_KERNEL_S)


def _stat_fields(path: Path) -> list[str] | None:
    """The fields of a ``/proc/…/stat`` after ``pid (comm)`` (comm may hold spaces), the state
    letter first; None once the process or thread is gone."""
    text = _read(path)
    return text[text.rindex(")") + 2 :].split() if ")" in text else None


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, CPU ticks: own and reaped children's) of ``pid``; None once it is gone."""
    fields = _stat_fields(_PROC / str(pid) / "stat")
    return None if fields is None else (int(fields[1]), sum(int(f) for f in fields[11:15]))


def _processes() -> dict[int, tuple[int, int]]:
    """pid → (parent pid, CPU ticks) of every process this one can see."""
    stats = {int(entry.name): _stat(int(entry.name)) for entry in _PROC.iterdir() if entry.name.isdigit()}
    return {pid: got for pid, got in stats.items() if got is not None}


def tree_cpu_ticks(pid: int, table: dict[int, tuple[int, int]] | None = None) -> int:
    """CPU ticks used so far by ``pid`` and every process below it (``table``: :func:`_processes`'s)."""
    table = _processes() if table is None else table
    return sum(table.get(p, (0, 0))[1] for p in _descendants(pid, table))


def _descendants(pid: int, table: dict[int, tuple[int, int]]) -> list[int]:
    """``pid`` and every process below it in ``table`` (:func:`_processes`'s), parents first."""
    children: dict[int, list[int]] = {}
    for p, (parent, _) in table.items():
        children.setdefault(parent, []).append(p)
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += sorted(children.get(p, []))
    return out


def _read(path: Path) -> str:
    """A ``/proc`` file's text, stripped; ``?`` once it is gone (or cannot be read)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return "?"


def thread_waits(pid: int, table: dict[int, tuple[int, int]] | None = None) -> list[str]:
    """One line per thread of ``pid`` and of every process below it: ``PID/TID name state wchan``
    (the state letter of ``/proc/PID/task/TID/stat``, S sleeping, R running, D in I/O; the wait
    channel the kernel reports, 0 where it has none)."""
    table = _processes() if table is None else table
    lines = []
    for p in _descendants(pid, table):
        try:
            tids = sorted(int(t.name) for t in (_PROC / str(p) / "task").iterdir() if t.name.isdigit())
        except OSError:
            continue
        for tid in tids:
            task = _PROC / str(p) / "task" / str(tid)
            state = (_stat_fields(task / "stat") or ["?"])[0]
            lines.append(f"{p}/{tid} {_read(task / 'comm')} {state} {_read(task / 'wchan') or '0'}")
    return lines


class IdleKernelWatch:
    """A thread, while the ``with`` block runs, that kills any kernel child of this process whose
        process tree has used no CPU (below :data:`IDLE_CPU_SHARE` of a core) for ``idle_s`` seconds
    (module docstring); ``killed`` lists them.
        ``marker``: what a kernel's command line holds."""

    def __init__(self, idle_s: float | None = None, *, marker: str = "ipykernel", poll_s: float | None = None):
        self.idle_s = idle_kernel_seconds() if idle_s is None else float(idle_s)
        self.poll_s = min(5.0, self.idle_s / 4) if poll_s is None else float(poll_s)
        self.marker = marker
        self.killed: list[int] = []
        #: kernel pid → :func:`thread_waits` as it was found idle, before it was killed
        self.diagnostics: dict[int, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="idle-kernel-watch", daemon=True)

    def __enter__(self) -> IdleKernelWatch:
        if _PROC.is_dir():
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        history: dict[int, list[tuple[float, int]]] = {}  # kernel pid → (when, its tree's ticks), oldest first
        me, per_s = os.getpid(), os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(self.poll_s):
            table = _processes()
            now = time.monotonic()
            children = [p for p, (parent, _) in table.items() if parent == me]
            for pid in [p for p in children if self.marker in _read(_PROC / str(p) / "cmdline")]:
                seen = history.setdefault(pid, [])
                seen.append((now, tree_cpu_ticks(pid, table)))
                while len(seen) > 1 and now - seen[1][0] >= self.idle_s:
                    seen.pop(0)  # keep one sample at least idle_s old
                since, ticks = seen[0]
                used = seen[-1][1] - ticks
                if now - since >= self.idle_s and used < IDLE_CPU_SHARE * (now - since) * per_s:
                    self._kill(pid, table)

    def _kill(self, pid: int, table: dict[int, tuple[int, int]]) -> None:
        if pid in self.killed:
            return
        self.diagnostics[pid] = thread_waits(pid, table)
        try:
            # SIGABRT first: a kernel with faulthandler on writes its threads' Python stacks
            os.kill(pid, signal.SIGABRT)
        except OSError:
            return
        end = time.monotonic() + ABORT_GRACE_S
        while time.monotonic() < end and not _gone(pid):
            time.sleep(0.05)
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        self.killed.append(pid)

    def summary(self, pid: int, most: int = 12) -> str:
        """What ``pid``'s threads were waiting on when it was found idle, on one line (at most ``most`` threads)."""
        lines = self.diagnostics.get(pid, [])
        shown = "; ".join(lines[:most]) + (f"; … {len(lines) - most} more" if len(lines) > most else "")
        return f"its threads (pid/tid name state wait channel): {shown}" if lines else "its threads: not read"


def _gone(pid: int) -> bool:
    """``pid`` has ended: no longer there, or waiting to be reaped (state Z)."""
    fields = _stat_fields(_PROC / str(pid) / "stat")
    return fields is None or fields[0] == "Z"
