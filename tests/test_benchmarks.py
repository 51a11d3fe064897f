"""Smoke test of benchmarks/run.py (docs/benchmarks.md): it runs, reports both items, and agrees with its
references. Timings are not asserted here (a loaded CI box may miss a floor: exit 1 is allowed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


def test_benchmark_quick_runs_and_agrees():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--no-write"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 3, f"library and reference disagree:\n{out}"
    assert proc.returncode in (0, 1), f"benchmark crashed (exit {proc.returncode}):\n{out}"
    assert "1. plug-in U(B)" in proc.stdout, out
    assert "2. rarefaction U(B) + bootstrap band" in proc.stdout, out
    assert "| item | floor | best | median |" in proc.stdout, out
    assert "DISAGREE" not in proc.stdout, out


def test_whole_command_comparison_runs_and_every_count_agrees():
    """benchmarks/vs_libcachesim.py at 10^5 requests: moeroof's hit counts equal the C reference's
    (and libCacheSim's where it is installed); exit 3 would mean a disagreement."""
    script = SCRIPT.with_name("vs_libcachesim.py")
    proc = subprocess.run(
        [sys.executable, str(script), "--sizes", "1e5", "--repeats", "1", "--no-write"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{out}"
    assert "DISAGREE" not in out and "every hit count agrees" in out, out
    assert "moeroof cache --policy belady-insert" in out and "moeroof mrc" in out, out


def test_fit_plan_timing_quick_runs_and_its_fits_repeat():
    """benchmarks/fit_plan_bench.py --quick: bigrig's fit timed against the guide's 10 s budget;
    exit 3 would mean two fits of the same rows disagreed (exit 1, over budget, is allowed on a
    loaded box)."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT.with_name("fit_plan_bench.py")), "--quick", "--no-write", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), f"exit {proc.returncode}:\n{out}"
    assert "| bigrig |" in proc.stdout and "DISAGREE" not in out, out
