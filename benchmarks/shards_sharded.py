#!/usr/bin/env python
"""Measured error of SHARDS over hash slices (moeroof.run.shard.shards_curve_sharded)
against the exact global LRU curve, and whether its stated error covers it.

::

    python benchmarks/shards_sharded.py [--trace PATH | --steps 800] [--rates 0.01,0.1]
                                        [--slices 1,2,8] [--seeds 0,1,2] [--workers 1]

Without ``--trace`` a synthetic trace like the embedded Qwen3-30B-A3B-like one (48 layers,
E = 128, K = 8, 16 streams, Zipf 0.99, stickiness 0.3, per-stream locality 30, step context
80) is drawn by ``moeroof trace`` into a temporary folder; 800 steps are about 2·10^6 requests.
For every rate R, slice count S and hash seed it prints the absolute error |estimate − exact|
(mean and max over the capacities ≥ 1/R, and max over those ≥ S/R, the slices' resolution),
the share of capacities ≥ S/R where the exact curve lies within 3 stderr (+0.01) and within the
stated band [lower, upper], and the band's mean width; ``max(unw)`` is the max error of the
unweighted mean of the slices' curves (the design the weighted ratio estimator replaced).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def draw_trace(folder: Path, steps: int, seed: int) -> Path:
    from moeroof.cli import main

    out = folder / "trace.npz"
    argv = ["trace", "--family", "zipf:0.99", "--streams", "16", "--steps", str(steps), "--layers", "48"]
    argv += ["--experts", "128", "--top-k", "8", "--rho", "0.3", "--locality", "30", "--step-context", "80"]
    argv += ["--seed", str(seed), "-o", str(out), "--json"]
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        if main(argv) != 0:
            sys.exit("moeroof trace failed")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=None)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--rates", type=_floats, default=[0.01, 0.1])
    ap.add_argument("--slices", type=_ints, default=[1, 2, 8])
    ap.add_argument("--seeds", type=_ints, default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()

    from moeroof import cachesim as cache
    from moeroof.data.io import read_trace
    from moeroof.run.shard import shards_curve_sharded

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.trace) if args.trace else draw_trace(Path(tmp), args.steps, 0)
        trace = read_trace(path)
        t0 = time.perf_counter()
        req = cache.requests_from_trace(trace.topk, trace.experts)
        cap, exact = cache.lru_hit_curve(req)
        t_exact = time.perf_counter() - t0
        print(
            f"trace {trace.steps} steps × {trace.streams} streams × {trace.layers} layers, E={trace.experts}: "
            f"{len(req):,} requests over {cap[-1]:,} items; exact curve {t_exact:.1f} s"
        )
        del req
        head = [
            "R",
            "S",
            "seed",
            "S/R",
            "mean>1/R",
            "max>1/R",
            "max>S/R",
            "3se>S/R",
            "band>S/R",
            "width",
            "max(unw)",
            "s",
        ]
        print("  ".join(f"{h:>9}" for h in head))
        for rate in args.rates:
            for s in args.slices:
                for seed in args.seeds:
                    t0 = time.perf_counter()
                    res = shards_curve_sharded(path, rate, slices=s, seed=seed, workers=args.workers)
                    dt = time.perf_counter() - t0
                    ix = np.minimum(cap, res.capacity[-1])
                    err = np.abs(res.hit_rate[ix] - exact)
                    n_j = res.slice_requests
                    unw = np.mean(res.slice_hit_rate[n_j > 0], axis=0)[ix]
                    a, b = cap >= 1 / rate, cap >= res.resolution
                    se = np.nan_to_num(res.stderr[ix])
                    in3 = (err <= 3 * se + 0.01)[b].mean() if s > 1 else float("nan")
                    inb = ((exact >= res.lower[ix]) & (exact <= res.upper[ix]))[b].mean()
                    width = (res.upper[ix] - res.lower[ix])[b].mean()
                    row = [f"{rate:g}", s, seed, f"{res.resolution:g}", f"{err[a].mean():.4f}", f"{err[a].max():.3f}"]
                    row += [f"{err[b].max():.3f}", f"{in3:.3f}", f"{inb:.3f}", f"{width:.3f}"]
                    row += [f"{np.abs(unw - exact)[b].max():.3f}", f"{dt:.1f}"]
                    print("  ".join(f"{str(x):>9}" for x in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
