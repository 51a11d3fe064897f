"""The idle-kernel watch (moeroof.present.kernel_watch): a child process whose whole tree uses
no CPU is stopped after the idle time, one that works (itself or through a child) is not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from moeroof.present.kernel_watch import (
    IDLE_KERNEL_S,
    IdleKernelWatch,
    idle_kernel_seconds,
    thread_waits,
    tree_cpu_ticks,
)

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the watch reads /proc (Linux)")

SLEEPS = "import time; time.sleep(20)  # fake-kernel"
SPINS = "import time\nt = time.time()\nwhile time.time() - t < 4: pass  # fake-kernel"
# the child sleeps while its own child works: the tree is busy
SPINS_BELOW = (
    "import subprocess, sys\n"
    "busy = 'import time\\nt = time.time()\\nwhile time.time() - t < 4: pass'\n"
    "subprocess.run([sys.executable, '-c', busy])  # fake-kernel"
)


def _watched(code: str, idle_s: float, wait_s: float) -> tuple[list[int], int]:
    """Run ``code`` as a child under a watch of ``idle_s`` for at most ``wait_s`` seconds: (killed pids, its pid)."""
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        with IdleKernelWatch(idle_s, marker="fake-kernel", poll_s=0.2) as watch:
            end = time.monotonic() + wait_s
            while time.monotonic() < end and proc.poll() is None:
                time.sleep(0.1)
        return list(watch.killed), proc.pid
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_an_idle_child_is_stopped_after_the_idle_time():
    t = time.monotonic()
    killed, pid = _watched(SLEEPS, idle_s=1.0, wait_s=10.0)
    assert killed == [pid]
    assert time.monotonic() - t < 8.0


def test_a_working_child_is_left_alone():
    killed, _ = _watched(SPINS, idle_s=1.0, wait_s=3.0)
    assert killed == []


def test_a_child_whose_own_child_works_is_left_alone():
    killed, _ = _watched(SPINS_BELOW, idle_s=1.0, wait_s=3.0)
    assert killed == []


def test_a_tree_counts_its_descendants_cpu():
    """The sleeping child's tree holds its working child's CPU: more than a quarter second of it
    within the grandchild's 4 s of work, where the child alone uses a few ticks to start."""
    proc = subprocess.Popen([sys.executable, "-c", SPINS_BELOW])
    try:
        # a quarter second of CPU below it within the child's 4 s of work (polled: a loaded box
        # gives the working grandchild less than a core)
        end = time.monotonic() + 4.0
        while tree_cpu_ticks(proc.pid) <= 25 and time.monotonic() < end:
            time.sleep(0.1)
        assert tree_cpu_ticks(proc.pid) > 25
    finally:
        proc.wait()


def test_the_idle_time_comes_from_the_environment_when_it_is_a_positive_number(monkeypatch):
    monkeypatch.setenv("MOEROOF_IDLE_KERNEL_S", "7.5")
    assert idle_kernel_seconds() == 7.5
    for bad in ("0", "-3", "inf", "soon"):
        monkeypatch.setenv("MOEROOF_IDLE_KERNEL_S", bad)
        assert idle_kernel_seconds() == IDLE_KERNEL_S


def test_an_idle_child_leaves_its_threads_waits_and_its_python_stack():
    """Before it is killed the watch reads what each thread waits on (kept for the retry's message),
    and sends SIGABRT first: a child with faulthandler on (as the renderer starts kernels) writes
    its Python stack, the function it sat in named, to its standard error."""
    import os

    code = "import time\ndef sits_in_here():\n    time.sleep(20)\nsits_in_here()  # fake-kernel"
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    try:
        with IdleKernelWatch(1.0, marker="fake-kernel", poll_s=0.2) as watch:
            end = time.monotonic() + 10.0
            while time.monotonic() < end and proc.poll() is None:
                time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        err = proc.communicate()[1]
    assert watch.killed == [proc.pid]
    lines = watch.diagnostics[proc.pid]
    assert lines and all(line.startswith(f"{proc.pid}/") for line in lines)
    assert lines[0].split()[2] == "S"  # the main thread asleep, not running
    assert f"{proc.pid}/{proc.pid}" in watch.summary(proc.pid)
    assert "sits_in_here" in err and "Aborted" in err


def test_thread_waits_lists_a_child_below_the_process():
    proc = subprocess.Popen([sys.executable, "-c", SPINS_BELOW])
    try:
        # the child spins for 4 s once started; a loaded box may take seconds to start it
        end, pids = time.monotonic() + 3.5, set()
        while len(pids) < 2 and time.monotonic() < end:
            time.sleep(0.1)
            pids = {int(line.split("/")[0]) for line in thread_waits(proc.pid)}
        assert proc.pid in pids and len(pids) == 2  # the process and the child it started
    finally:
        proc.wait()
