"""Sweep throughput on dask.distributed: one process against a LocalCluster, and a projection.

A plan grid (models × boxes × cache sizes × batch sizes; 10,000 points
by default) is evaluated by :func:`moeroof.run.sweep.run_sweep` serially and on a
``LocalCluster`` of W worker processes (one thread each); the cluster's start is timed apart
from the sweep. The scheduler's cost per task is measured with no-op tasks on the same cluster.
The projection to many workers is a model, stated as such:

    T(W) = N · t_point / W + (N / c(W)) · o_task

with ``t_point`` the serial seconds per point measured here, ``o_task`` the measured per-task
scheduler cost (the scheduler handles every task in one process, so that term does not shrink
with W) and ``c(W)`` the points per task the sweep uses (:func:`moeroof.run.sweep.chunk_size`). Writes ``reports/benchmarks/sweep.json`` (untracked) and prints a summary::

    .venv/bin/python benchmarks/sweep_bench.py [--points 10000] [--workers 2] [--project 64]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "reports" / "benchmarks" / "sweep.json"

MODELS = ["qwen3-30b-a3b", "deepseek-v3", "glm-5.2", "mixtral-8x7b", "kimi-k2"]
BOXES = ["nvme-gen4", "apple-m4-max", "epyc-server", "ddr5-desktop"]


def grid_doc(points: int) -> dict:
    """A plan grid of about ``points`` points: 5 models × 4 boxes × C caches × B batches."""
    per_pair = max(1, points // (len(MODELS) * len(BOXES)))
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512][: max(1, min(10, per_pair))]
    caches = max(1, per_pair // len(batches))
    return {
        "command": "plan",
        "model": MODELS,
        "hardware": BOXES,
        "cache_gib": {"start": 0, "stop": 4 * (caches - 1), "step": 4} if caches > 1 else [0],
        "batch": batches,
        "fixed": {"routing": "uniform", "cache_policy": "static", "context": 4096},
    }


def noop(x: int) -> int:
    return x


def main(argv: list[str] | None = None) -> int:
    from distributed import Client

    from moeroof.run.cluster import local_cluster
    from moeroof.run.sweep import chunk_size, expand, grid_from_dict, run_sweep

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--project", type=int, default=64, help="workers of the projection")
    ap.add_argument("--noop-tasks", type=int, default=2000)
    args = ap.parse_args(argv)

    grid = grid_from_dict(grid_doc(args.points), "<sweep_bench>")
    n = len(expand(grid))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        serial = run_sweep(grid, tmp / "serial.parquet")
        t0 = time.perf_counter()
        cluster = local_cluster(args.workers)
        client = Client(cluster)
        startup = time.perf_counter() - t0
        try:
            client.gather(client.map(noop, range(args.workers * 4), pure=False))  # warm the workers
            t0 = time.perf_counter()
            client.gather(client.map(noop, range(args.noop_tasks), pure=False))
            per_task = (time.perf_counter() - t0) / args.noop_tasks
            parallel = run_sweep(grid, tmp / "parallel.parquet", client=client)
        finally:
            client.close()
            cluster.close()
    if serial["failed"] or parallel["failed"]:
        print(f"failed points: serial {serial['failed']}, parallel {parallel['failed']}", file=sys.stderr)
    t_point = serial["seconds"] / n
    tasks = -(-n // chunk_size(n, args.project))
    projected = n * t_point / args.project + tasks * per_task
    result = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d"),
        "points": n,
        "serial_seconds": serial["seconds"],
        "seconds_per_point": t_point,
        "workers": args.workers,
        "cluster_start_seconds": startup,
        "parallel_seconds": parallel["seconds"],
        "speedup": serial["seconds"] / parallel["seconds"],
        "scheduler_seconds_per_task": per_task,
        "projection": {
            "workers": args.project,
            "seconds": projected,
            "speedup": serial["seconds"] / projected,
            "tasks": tasks,
            "formula": "T(W) = N * t_point / W + (N / c(W)) * o_task (a projection, not a measurement)",
        },
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"{n} plan points: serial {serial['seconds']:.1f} s ({1e3 * t_point:.2f} ms/point); "
        f"{args.workers} workers {parallel['seconds']:.1f} s = {result['speedup']:.2f}x the serial run "
        f"(cluster start {startup:.1f} s apart); scheduler {1e3 * per_task:.2f} ms/task; "
        f"projected {args.project} workers: {projected:.1f} s = {result['projection']['speedup']:.1f}x serial "
        f"(projection). -> {OUT.relative_to(HERE.parent)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
