"""The idle-kernel watch (moeroof.present.kernel_watch): a child process whose whole tree uses
no CPU is stopped after the idle time, one that works (itself or through a child) is not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from moeroof.present.kernel_watch import IDLE_KERNEL_S, IdleKernelWatch, idle_kernel_seconds, tree_cpu_ticks

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
    """The sleeping child's tree holds its working child's CPU: over a second of it after 1.5 s,
    where the child alone uses a few ticks to start."""
    proc = subprocess.Popen([sys.executable, "-c", SPINS_BELOW])
    try:
        time.sleep(1.5)
        assert tree_cpu_ticks(proc.pid) > 25
    finally:
        proc.wait()


def test_the_idle_time_comes_from_the_environment_when_it_is_a_positive_number(monkeypatch):
    monkeypatch.setenv("MOEROOF_IDLE_KERNEL_S", "7.5")
    assert idle_kernel_seconds() == 7.5
    for bad in ("0", "-3", "inf", "soon"):
        monkeypatch.setenv("MOEROOF_IDLE_KERNEL_S", bad)
        assert idle_kernel_seconds() == IDLE_KERNEL_S
