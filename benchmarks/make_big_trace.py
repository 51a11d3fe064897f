#!/usr/bin/env python
"""Write a large synthetic expert trace as ``.npy`` (+ ``.json`` sidecar) for memory benchmarks.

::

    python benchmarks/make_big_trace.py OUT.npy [--requests 1e8] [--layers 80] [--experts 256]
                                        [--streams 32] [--top-k 8] [--seed 0]

The array (steps, streams, layers, K) int16 is written chunk by chunk through
``np.lib.format.open_memmap``, so writing 10^8 requests needs a few MiB of memory, not the file.
Each token takes K distinct experts ``b, b + s, …, b + (K − 1)·s (mod E)``: a skewed base b
(``⌊E·u²⌋``, popular low ids) and an odd stride s ∈ {1, 3, 5, 7}, distinct because s is odd and
E a power of two (any E: the stride is then made coprime to E). The step count is chosen from
a probe of the distinct experts per (step, layer) so the request stream (``moeroof cache``'s
order: per step, per layer, the batch's distinct experts) has about ``--requests`` entries.
Cheap to draw (no Gumbel over E per token): ~10^8 requests in well under a minute.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np


def _strides(experts: int) -> np.ndarray:
    return np.array([s for s in (1, 3, 5, 7, 9, 11, 13) if math.gcd(s, experts) == 1][:4] or [1], dtype=np.int64)


def draw(rng: np.random.Generator, steps: int, streams: int, layers: int, experts: int, k: int) -> np.ndarray:
    """(steps, streams, layers, K) int16 of K distinct experts per token."""
    base = np.floor(experts * rng.random((steps, streams, layers, 1)) ** 2).astype(np.int64)
    strides = _strides(experts)
    stride = strides[rng.integers(0, strides.size, (steps, streams, layers, 1))]
    out = (base + stride * np.arange(k)) % experts
    return out.astype(np.int16)


def distinct_per_step_layer(block: np.ndarray, experts: int) -> float:
    """Mean distinct experts per (step, layer) of a block."""
    s, _, l, _ = block.shape
    present = np.zeros((s, l, experts), dtype=bool)
    present[np.arange(s)[:, None, None, None], np.arange(l)[None, None, :, None], block.astype(np.int64)] = True
    return float(present.sum(axis=2).mean())


def make(
    path: Path,
    requests: float,
    *,
    layers: int = 80,
    experts: int = 256,
    streams: int = 32,
    top_k: int = 8,
    seed: int = 0,
) -> dict:
    if experts > 2**15 - 1 or top_k > experts:
        raise SystemExit("experts must be < 32768 (int16) and top-k <= experts")
    rng = np.random.default_rng(seed)
    probe = distinct_per_step_layer(draw(np.random.default_rng(seed + 1), 16, streams, layers, experts, top_k), experts)
    steps = max(1, int(round(requests / (layers * probe))))
    path = Path(path)
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.int16, shape=(steps, streams, layers, top_k))
    chunk = max(1, 4_000_000 // (streams * layers * top_k))
    for s0 in range(0, steps, chunk):
        s1 = min(steps, s0 + chunk)
        arr[s0:s1] = draw(rng, s1 - s0, streams, layers, experts, top_k)
    arr.flush()
    del arr
    meta = {
        "model": "synthetic-big",
        "experts": experts,
        "top_k": top_k,
        "layer_ids": list(range(layers)),
        "axes": ["step", "stream", "layer", "k"],
        "pad_value": -1,
        "source": f"benchmarks/make_big_trace.py --requests {requests:g} --seed {seed}",
        "provenance": "synthetic",
    }
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return {
        "path": str(path),
        "steps": steps,
        "streams": streams,
        "layers": layers,
        "experts": experts,
        "top_k": top_k,
        "expected_requests": int(round(steps * layers * probe)),
        "bytes": path.stat().st_size,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="output .npy (the sidecar .json is written beside it)")
    p.add_argument("--requests", type=float, default=1e8, help="about this many requests (default 1e8)")
    p.add_argument("--layers", type=int, default=80)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.out.suffix != ".npy":
        p.error("the output must end in .npy")
    info = make(a.out, a.requests, layers=a.layers, experts=a.experts, streams=a.streams, top_k=a.top_k, seed=a.seed)
    json.dump(info, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
