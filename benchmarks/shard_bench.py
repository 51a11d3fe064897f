"""Per-layer cache simulation sharded by layer: serial against a 2-worker LocalCluster, and a projection.

A seeded synthetic trace of about ``--requests`` requests (a
request is one distinct (step, layer, expert) of a step: the default E=256, K=8, 64 streams,
60 layers and about 7,500 steps give ~10^8) is written as ``.npy`` + sidecar by
``benchmarks/make_big_trace.py`` and memory-mapped by the reader.
:func:`moeroof.run.shard.simulate_by_layer` (LRU, ``--capacity-per-layer`` experts per
layer) runs serially (one task of all layers) and on a ``LocalCluster`` of ``--workers``
processes (one thread each, started and timed apart; one task of ``layers / workers`` layers per
worker); the hits must be identical. Measured beside it:

- the scheduler's cost per task: ``--noop-tasks`` no-op tasks on the same cluster;
- the full-trace validation :func:`moeroof.data.io.read_trace` does on a ``.npy`` (shard.py runs
  it in the parent and again in every task, so every task reads the whole file once);
- the per-layer task time (requests + LRU of one layer read from the memory map), on a sample
  of layers (``--sample-layers``);
- peak resident memory of the parent and of each worker (psutil, sampled every 50 ms; file
  pages of the memory map count as resident once touched);
- the same trace as Parquet (:mod:`moeroof.data.trace_parquet`): its write time and size, one
  worker's half of the layers read by :func:`~moeroof.data.trace_parquet.read_parquet_trace_layers`
  against the memory map's slice of the same layers, and the 2-worker run with tasks that read
  their layers from the Parquet file (what shard.py would do with a Parquet trace).

The projection to ``--project`` workers is a model, not a measurement::

    T(W) = t_check + ceil(L / W) · t_layer_max + ceil(L / ceil(L / W)) · o_task

with t_check the full-trace validation (once, in the parent: the tasks trust it and memory-map
the trace), t_layer_max the slowest sampled layer's task time, o_task the scheduler's cost per
task (the scheduler handles the tasks one after another) and L the layers. Writes
``reports/benchmarks/shard.json`` (untracked) and prints a summary::

    .venv/bin/python benchmarks/shard_bench.py [--requests 1e8] [--workers 2] [--project 64]
    .venv/bin/python benchmarks/shard_bench.py --requests 1e6     # a smoke run, ~1 min
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "reports" / "benchmarks" / "shard.json"
sys.path.insert(0, str(HERE))

import make_big_trace  # noqa: E402  (benchmarks/make_big_trace.py: the seeded .npy writer)


def noop(x: int) -> int:
    return x


class PeakRSS:
    """Peak resident set size of this process and of each descendant, sampled in a thread."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peak: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                continue
            self.peak[proc.pid] = max(self.peak.get(proc.pid, 0), rss)
            if proc.pid not in self.names:
                try:
                    self.names[proc.pid] = "parent" if proc.pid == me.pid else " ".join(proc.cmdline()[-2:])[:60]
                except psutil.Error:
                    self.names[proc.pid] = "?"

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def parent(self) -> int:
        return self.peak.get(os.getpid(), 0)

    def children(self) -> list[int]:
        return sorted((v for k, v in self.peak.items() if k != os.getpid()), reverse=True)


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def parquet_task(path: str, l0: int, l1: int, experts: int, capacity: float, warmup: int):
    """One shard task as shard.py would run it on a Parquet trace: its layers, then the cache."""
    from moeroof import cachesim as cache
    from moeroof.data.trace_parquet import read_parquet_trace_layers

    topk = read_parquet_trace_layers(path, l0, l1)
    req = cache.requests_from_trace(topk, experts)
    res = cache.simulate(req, capacity, policy="lru", scope="layer", warmup_steps=warmup)
    return res.hits, res.misses


def main(argv: list[str] | None = None) -> int:
    from distributed import Client

    from moeroof import cachesim as cache
    from moeroof.data.io import read_trace
    from moeroof.data.trace_parquet import read_parquet_trace_layers, write_parquet_trace
    from moeroof.run.cluster import local_cluster
    from moeroof.run.shard import simulate_by_layer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=float, default=1e8, help="about this many requests (default 1e8)")
    ap.add_argument("--layers", type=int, default=60)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--capacity-per-layer", type=int, default=64, help="LRU experts per layer (default 64)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--project", type=int, default=64, help="workers of the projection")
    ap.add_argument("--noop-tasks", type=int, default=2000)
    ap.add_argument("--sample-layers", type=int, default=6, help="layers timed one by one (default 6)")
    ap.add_argument("--no-parquet", action="store_true", help="skip the Parquet measurements")
    ap.add_argument("--tmp", type=Path, default=None, help="folder for the trace files (default: a temp folder)")
    args = ap.parse_args(argv)

    L = args.layers
    capacity = args.capacity_per_layer * L
    result: dict = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d"),
        "command": "benchmarks/shard_bench.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        npy = Path(tmp) / "trace.npy"
        t0 = time.perf_counter()
        made = make_big_trace.make(
            npy, args.requests, layers=L, experts=args.experts, streams=args.streams, top_k=args.top_k, seed=args.seed
        )
        result["trace"] = {**made, "write_seconds": time.perf_counter() - t0}
        print(
            f"trace: {made['steps']} steps x {made['streams']} streams x {L} layers x K={args.top_k}, "
            f"E={args.experts}: {gib(made['bytes'])} .npy, written in {result['trace']['write_seconds']:.1f} s",
            flush=True,
        )

        t0 = time.perf_counter()
        trace = read_trace(npy)
        t_check = time.perf_counter() - t0
        mapped = isinstance(trace.topk, np.memmap)  # else read_trace copied it (under its copy limit)
        result["read_trace_check_seconds"] = t_check
        result["trace"]["memory_mapped"] = mapped
        print(
            f"read_trace: {'memory-mapped' if mapped else 'COPIED into memory (under the reader copy limit)'}, "
            f"full-trace check {t_check:.1f} s",
            flush=True,
        )

        # ---- serial: one task of all layers, in this process
        with PeakRSS() as rss_serial:
            t0 = time.perf_counter()
            serial = simulate_by_layer(npy, capacity, "lru", capacity_unit="experts")
            t_serial = time.perf_counter() - t0
        requests = serial.requests
        result["requests"] = requests
        result["serial"] = {"seconds": t_serial, "hits": serial.hits, "parent_peak_rss": rss_serial.parent()}
        print(
            f"requests: {requests:,} ({requests:.3g}); LRU {args.capacity_per_layer} experts/layer: "
            f"hit rate {serial.hit_rate:.4f}",
            flush=True,
        )
        print(f"serial (workers=1): {t_serial:.1f} s, parent peak RSS {gib(rss_serial.parent())}", flush=True)

        # ---- per-layer task time, a sample of layers (the memory map's slice, no validation)
        sample = sorted(set(np.linspace(0, L - 1, min(args.sample_layers, L)).round().astype(int).tolist()))
        per_layer = []
        per = args.capacity_per_layer
        for l in sample:
            t0 = time.perf_counter()
            req = cache.requests_from_trace(trace.topk[:, :, l : l + 1], trace.experts)
            cache.simulate(req, per, policy="lru", scope="layer")
            per_layer.append(time.perf_counter() - t0)
            del req
        result["per_layer_seconds"] = dict(zip(map(str, sample), per_layer))
        t_layer_mean, t_layer_max = float(np.mean(per_layer)), float(np.max(per_layer))

        # ---- a cluster of W workers, started apart
        t0 = time.perf_counter()
        cluster = local_cluster(args.workers)
        client = Client(cluster)
        t_start = time.perf_counter() - t0
        try:
            client.gather(client.map(noop, range(args.workers * 4), pure=False))  # warm the workers
            t0 = time.perf_counter()
            client.gather(client.map(noop, range(args.noop_tasks), pure=False))
            o_task = (time.perf_counter() - t0) / args.noop_tasks
            with PeakRSS() as rss_par:
                t0 = time.perf_counter()
                par = simulate_by_layer(npy, capacity, "lru", capacity_unit="experts", client=client)
                t_par = time.perf_counter() - t0
            if (par.hits, par.misses) != (serial.hits, serial.misses) or not np.array_equal(
                par.hits_per_step, serial.hits_per_step
            ):
                print(f"MISMATCH: serial hits {serial.hits}, {args.workers} workers {par.hits}", file=sys.stderr)
                return 3
            result["cluster"] = {
                "workers": args.workers,
                "start_seconds": t_start,
                "seconds": t_par,
                "speedup": t_serial / t_par,
                "hits": par.hits,
                "hits_identical": True,
                "parent_peak_rss": rss_par.parent(),
                "worker_peak_rss": rss_par.children(),
                "process_names": {str(k): v for k, v in rss_par.names.items()},
                "scheduler_seconds_per_task": o_task,
            }
            print(
                f"{args.workers} workers: {t_par:.1f} s = {t_serial / t_par:.2f}x serial (cluster start "
                f"{t_start:.1f} s apart); hits identical ({par.hits:,}); parent peak RSS "
                f"{gib(rss_par.parent())}, processes under it: {', '.join(map(gib, rss_par.children()))}",
                flush=True,
            )
            print(f"scheduler: {1e3 * o_task:.2f} ms/task ({args.noop_tasks} no-op tasks)", flush=True)

            # ---- Parquet: write, one worker's half read both ways, the cluster run on Parquet
            if not args.no_parquet:
                pq_path = Path(tmp) / "trace.parquet"
                t0 = time.perf_counter()
                write_parquet_trace(pq_path, trace.topk, trace.meta)
                t_write = time.perf_counter() - t0
                from moeroof.data.trace_parquet import parquet_trace_info

                info = parquet_trace_info(pq_path)
                half = math.ceil(L / args.workers)
                t0 = time.perf_counter()
                a = read_parquet_trace_layers(pq_path, 0, half)
                t_pq_half = time.perf_counter() - t0
                t0 = time.perf_counter()
                b = np.array(read_trace(npy, trace.meta).topk[:, :, 0:half])  # shard.py's task read, made dense
                t_npy_half = time.perf_counter() - t0
                t0 = time.perf_counter()
                np.array(trace.topk[:, :, 0:half])  # the slice alone, no validation
                t_slice_half = time.perf_counter() - t0
                same = bool(np.array_equal(a, b))
                del a, b
                groups = [(l0, min(l0 + half, L)) for l0 in range(0, L, half)]
                with PeakRSS() as rss_pq:
                    t0 = time.perf_counter()
                    futs = [
                        client.submit(parquet_task, str(pq_path), l0, l1, trace.experts, per * (l1 - l0), 0, pure=False)
                        for l0, l1 in groups
                    ]
                    parts = client.gather(futs)
                    t_pq_par = time.perf_counter() - t0
                pq_hits = sum(h for h, _ in parts)
                result["parquet"] = {
                    "write_seconds": t_write,
                    "bytes": pq_path.stat().st_size,
                    "rows": info.rows,
                    "row_groups": info.row_groups,
                    "half_layers": half,
                    "read_half_seconds": t_pq_half,
                    "npy_task_read_half_seconds": t_npy_half,
                    "npy_slice_half_seconds": t_slice_half,
                    "same_array": same,
                    "cluster_seconds": t_pq_par,
                    "cluster_hits_identical": pq_hits == serial.hits,
                    "cluster_worker_peak_rss": rss_pq.children(),
                }
                print(
                    f"parquet: written in {t_write:.1f} s, {gib(pq_path.stat().st_size)} "
                    f"({info.rows:,} rows, {info.row_groups} row groups); layers 0-{half - 1}: "
                    f"read_parquet_trace_layers {t_pq_half:.1f} s, .npy as a shard task reads it "
                    f"(read_trace check + slice) {t_npy_half:.1f} s, the memmap slice alone "
                    f"{t_slice_half:.1f} s; same array: {same}",
                    flush=True,
                )
                print(
                    f"parquet tasks on {args.workers} workers: {t_pq_par:.1f} s, hits identical: "
                    f"{pq_hits == serial.hits}; worker peak RSS {', '.join(map(gib, rss_pq.children()))}",
                    flush=True,
                )
                if pq_hits != serial.hits or not same:
                    return 3
        finally:
            client.close()
            cluster.close()

    W = args.project
    k = math.ceil(L / W)
    tasks = math.ceil(L / k)
    t_proj = t_check + k * t_layer_max + tasks * o_task
    result["projection"] = {
        "workers": W,
        "layers_per_task": k,
        "tasks": tasks,
        "t_check": t_check,
        "t_layer_mean": t_layer_mean,
        "t_layer_max": t_layer_max,
        "seconds": t_proj,
        "speedup": t_serial / t_proj,
        "formula": "T(W) = t_check + ceil(L/W) t_layer_max + ceil(L/ceil(L/W)) o_task (a projection, not a measurement)",
    }
    print(
        f"full-trace check (read_trace .npy): {t_check:.1f} s; per-layer task: mean {t_layer_mean:.2f} s, "
        f"max {t_layer_max:.2f} s over layers {sample}",
        flush=True,
    )
    print(
        f"PROJECTION (not measured) for {W} workers: {tasks} tasks of {k} layer(s): T = {t_check:.1f} + "
        f"{k}x{t_layer_max:.2f} + {tasks}x{1e3 * o_task:.2f} ms = {t_proj:.1f} s = {t_serial / t_proj:.1f}x serial"
    )
    result["loadavg_at_end"] = os.getloadavg()  # the box is shared: a load above its cores slows every timing
    print(
        f"load average at the end (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
        f"on {os.cpu_count()} cores"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {OUT.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
