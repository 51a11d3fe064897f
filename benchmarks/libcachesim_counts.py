"""libCacheSim's hit counts on moeroof's request streams: the expected counts of the cache tests.

Each stream below is replayed request by request (``moeroof cache
--lookup request``: the order ``requests_from_trace`` makes, one item per (step, layer, expert),
unit sizes) through libCacheSim (the ``libcachesim`` package from PyPI, its C simulator: the
stream written as an ``oracleGeneral`` binary trace — the format that carries the next access
time Belady needs — read by ``TraceReader`` and run by ``c_process_trace``), and the hit counts
are written to ``tests/data/libcachesim_counts.json`` beside the command that made them.
``tests/test_cache_libcachesim.py`` checks that :func:`moeroof.cachesim.simulate` gives
exactly these counts (always), and that libCacheSim still gives them when it is installed.

moeroof policy → libCacheSim cache (``libcachesim.libcachesim_python.<name>_init``):

- ``lru`` → ``LRU``; ``lfu`` → ``LFU`` (in-cache LFU); ``arc`` → ``ARC``;
- ``s3fifo`` with ``s3fifo_threshold`` 1 and 2 → ``S3FIFOv0`` with ``move-to-main-threshold``
  1 and 2 (2 is libCacheSim's default; the Python class ``libcachesim.S3FIFO`` is the later
  ``S3FIFO``, not this one);
- ``belady-insert`` → ``Belady``.

``lfu-perfect`` and ``belady`` (with bypass) have no libCacheSim counterpart. Streams: the
embedded trace (one cache of C experts; and one cache per layer, each layer's sub-stream run
through its own libCacheSim cache and the counts summed), a synthetic MoE routing stream
(layer-cyclic, skewed, drawn with integer hashing only so that it is the same on every machine
and numpy version) and a skewed independent-reference stream. Capacities start at 20 experts:
libCacheSim's S3FIFOv0 refuses a cache under 10 objects and, under 20, its small queue of one
object admits nothing.

::

    .venv/bin/pip install libcachesim            # ~10 MB wheel (manylinux_2_34 x86_64)
    .venv/bin/python benchmarks/libcachesim_counts.py             # writes the JSON, a few seconds
    .venv/bin/python benchmarks/libcachesim_counts.py --no-write  # compare only

Exit status 3 when moeroof and libCacheSim disagree on any count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "libcachesim_counts.json"
COMMAND = ".venv/bin/python benchmarks/libcachesim_counts.py"
EMBEDDED = REPO / "data" / "traces" / "qwen3-30b-a3b-like.npz"

#: (moeroof policy, s3fifo_threshold or None, libCacheSim cache, its parameters)
POLICIES = (
    ("lru", None, "LRU", ""),
    ("lfu", None, "LFU", ""),
    ("arc", None, "ARC", ""),
    ("s3fifo", 1, "S3FIFOv0", "move-to-main-threshold=1"),
    ("s3fifo", 2, "S3FIFOv0", "move-to-main-threshold=2"),
    ("belady-insert", None, "Belady", ""),
)

#: stream name → (scope, capacities in experts per cache)
CAPACITIES = {
    "embedded": ("global", (2000, 2500, 3000, 3333, 4000, 5555)),
    "embedded-per-layer": ("layer", (20, 37, 64)),
    "synthetic-moe": ("global", (150, 333, 400, 500, 650)),
    "synthetic-irm": ("global", (20, 100, 300, 800)),
}


# ----------------------------------------------------------------------------- streams


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping arithmetic): the same bits everywhere."""
    x = x.astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _skewed(keys: np.ndarray, n: int) -> np.ndarray:
    """A skewed draw in 0..n−1 per key from integers only: uniform below a uniform bound below a
    uniform bound (low ids most likely; about 12 % of the draws are 0 for n = 64)."""
    h = [_mix(keys * np.uint64(3) + np.uint64(i)) for i in range(3)]
    bound = np.uint64(1) + h[0] % np.uint64(n)
    bound = np.uint64(1) + h[1] % bound
    return (h[2] % bound).astype(np.int64)


def synthetic_moe_topk(steps=200, streams=8, layers=12, experts=64, k=6) -> np.ndarray:
    """topk (steps, streams, layers, K): each token's K picks skewed towards a per-layer ordering
    of the experts (a token may pick an expert twice: the step's union is what is requested)."""
    idx = np.arange(steps * streams * layers * k, dtype=np.uint64).reshape(steps, streams, layers, k)
    e = _skewed(idx + np.uint64(1 << 40), experts)
    layer = np.arange(layers, dtype=np.int64)[None, None, :, None]
    a = 2 * (layer % 16) + 1  # odd: a bijection of 0..E−1 for E a power of two
    return ((e * a + 7 * layer) % experts).astype(np.int16)


def synthetic_irm_items(n=100_000, items=2000) -> np.ndarray:
    """An independent-reference stream: ``n`` skewed draws over ``items`` ids, ids shuffled."""
    x = _skewed(np.arange(n, dtype=np.uint64) + np.uint64(1 << 50), items)
    return ((x * 7919) % items).astype(np.int64)  # 7919 is prime: a bijection of 0..items−1


def streams() -> dict:
    """name → :class:`moeroof.cachesim.Requests` of every stream."""
    from moeroof.cachesim import Requests, requests_from_trace
    from moeroof.data.io import read_trace

    t = read_trace(EMBEDDED)
    embedded = requests_from_trace(t.topk, t.experts)
    moe = requests_from_trace(synthetic_moe_topk(), 64)
    irm = synthetic_irm_items()
    n = irm.size
    irm_req = Requests(irm, np.arange(n, dtype=np.int32), np.zeros(n, np.int16), n, 1, 2000)
    return {"embedded": embedded, "embedded-per-layer": embedded, "synthetic-moe": moe, "synthetic-irm": irm_req}


def fingerprint(req) -> dict:
    """Size and SHA-256 of a stream's item ids (little-endian int64): the tests check it before
    the counts, so a changed stream reads as one."""
    items = np.ascontiguousarray(req.items, dtype="<i8")
    return {"requests": int(items.size), "sha256": hashlib.sha256(items.tobytes()).hexdigest()}


def moeroof_hits(req, scope: str, capacity: int, policy: str, threshold) -> int:
    """moeroof's hits: ``capacity`` experts per cache (one per layer with scope layer)."""
    from moeroof.cachesim import simulate

    total = capacity * (req.layers if scope == "layer" else 1)
    kw = {} if threshold is None else {"s3fifo_threshold": threshold}
    return simulate(req, total, policy=policy, scope=scope, lookup="request", **kw).hits


# ----------------------------------------------------------------------------- libCacheSim


def write_oracle_general(items: np.ndarray, path: Path) -> None:
    """libCacheSim's oracleGeneral binary trace: per request ``<IQIq`` (clock time, object id,
    size, next access time as a request index, −1 when none). Object ids are items + 1."""
    items = np.asarray(items, dtype=np.int64)
    n = items.size
    nxt = np.full(n, -1, np.int64)
    last = np.full(int(items.max()) + 1 if n else 1, -1, np.int64)
    for t in range(n - 1, -1, -1):  # a backward pass, as moeroof.cachesim.next_use does
        x = items[t]
        nxt[t] = last[x]
        last[x] = t
    rec = np.zeros(n, dtype=np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")]))
    rec["t"] = np.arange(n)
    rec["id"] = items + 1
    rec["size"] = 1
    rec["next"] = nxt
    rec.tofile(path)


def libcachesim_hits(path: Path, n: int, capacity: int, cache: str, params: str) -> int:
    """Hits of libCacheSim's ``cache`` of ``capacity`` objects on the oracleGeneral trace."""
    import libcachesim
    from libcachesim import libcachesim_python as lcs

    # bytes = objects of size 1, no metadata; a hash table of 2^16 buckets (2^24 by default: 128 MiB to
    # clear per cache) holds these streams' few thousand ids
    common = lcs.CommonCacheParams(cache_size=int(capacity), hashpower=16)
    c = getattr(lcs, f"{cache}_init")(common, params)
    reader = libcachesim.TraceReader(str(path), libcachesim.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = lcs.c_process_trace(c, reader._reader, 0, -1)
    return n - int(round(miss_ratio * n))


def libcachesim_counts(reqs: dict, tmp: Path) -> list[dict]:
    """Every (stream, capacity, policy) row with libCacheSim's hits."""
    rows = []
    for name, (scope, caps) in CAPACITIES.items():
        req = reqs[name]
        if scope == "layer":  # one libCacheSim cache per layer on that layer's sub-stream
            parts = [req.items[req.layer == layer] for layer in range(req.layers)]
        else:
            parts = [req.items]
        paths = []
        for i, items in enumerate(parts):
            paths.append((tmp / f"{name}-{i}.oracleGeneral", items.size))
            write_oracle_general(items, paths[-1][0])
        for cap in caps:
            for policy, threshold, cache, params in POLICIES:
                hits = sum(libcachesim_hits(p, n, cap, cache, params) for p, n in paths if n)
                rows.append(
                    {
                        "stream": name,
                        "scope": scope,
                        "capacity_experts": cap,
                        "policy": policy,
                        "s3fifo_threshold": threshold,
                        "libcachesim": cache + (f" {params}" if params else ""),
                        "requests": int(len(req)),
                        "hits": int(hits),
                    }
                )
    return rows


def dumps(doc: dict) -> str:
    """The JSON document with one row a line (diffs stay readable)."""
    head = json.dumps({k: v for k, v in doc.items() if k != "rows"}, indent=1)[:-2]
    rows = ",\n  ".join(json.dumps(r) for r in doc["rows"])
    return f'{head},\n "rows": [\n  {rows}\n ]\n}}\n'


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true", help=f"compare only; do not rewrite {OUT.relative_to(REPO)}")
    args = ap.parse_args(argv)
    from importlib.metadata import version

    import libcachesim  # noqa: F401  (fail early, with the install hint in the docstring)

    t0 = time.perf_counter()
    reqs = streams()
    with tempfile.TemporaryDirectory() as tmp:
        rows = libcachesim_counts(reqs, Path(tmp))
    bad = 0
    print(f"{'stream':20s} {'cap':>5s} {'policy':22s} {'libCacheSim':>11s} {'moeroof':>9s}")
    for r in rows:
        ours = moeroof_hits(reqs[r["stream"]], r["scope"], r["capacity_experts"], r["policy"], r["s3fifo_threshold"])
        label = r["policy"] + (f" (threshold {r['s3fifo_threshold']})" if r["s3fifo_threshold"] else "")
        flag = "" if ours == r["hits"] else "   DISAGREE"
        bad += bool(flag)
        print(f"{r['stream']:20s} {r['capacity_experts']:5d} {label:22s} {r['hits']:11d} {ours:9d}{flag}")
    doc = {
        "command": COMMAND,
        "libcachesim": version("libcachesim"),
        "what": (
            "libCacheSim hit counts, request by request (moeroof cache --lookup request order), unit sizes; "
            "scope layer: one cache of capacity_experts per layer, hits summed over the layers"
        ),
        "streams": {name: fingerprint(req) for name, req in reqs.items()},
        "rows": rows,
    }
    print(f"{len(rows)} counts, {bad} disagreeing, {time.perf_counter() - t0:.1f} s")
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(dumps(doc), encoding="utf-8")
        print(f"wrote {OUT.relative_to(REPO)}")
    return 3 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
