"""Per-layer cache analyses sharded by layer over dask.distributed workers — exactly.

With scope ``"layer"`` (:func:`moeroof.cachesim.simulate`) every layer has its own cache and
its requests touch only that cache, so the layers can be simulated apart and their counts
added: :func:`simulate_by_layer` splits the trace's layers into groups of ``layers_per_task``,
simulates each group as one task (serially, on a ``LocalCluster`` of worker processes, or on a
scheduler by address) and sums hits, misses and the per-step arrays. The answer equals the
one-process :func:`~moeroof.cachesim.simulate` exactly for every policy: each layer's cache
sees the same requests in the same order, and a policy compares only positions within its own
cache (recency, frequency, next use), which removing other layers' requests does not reorder.

:func:`lru_curve_by_layer` is the exact LRU hit curve of the per-layer scope, on the per-layer
capacity axis: a request hits a per-layer LRU cache of C experts iff its stack distance *within
its layer* (Mattson et al. 1970, taken as its (step, layer) lookup starts) is in 1…C. Each task
returns integer hit counts per capacity for its layers; their sum is the curve.

What a task reads: for a trace given as a path, the path and its layer slice. The trace is
checked whole once, where the run starts; a task then memory-maps a ``.npy`` trace whatever its
size (a worker reads only its layers' columns, chunk by chunk over steps, and holds no copy), reads
a Parquet trace (:mod:`moeroof.data.trace_parquet`) row group by row group keeping its layers'
rows (each task checks the rows it reads), and decompresses an ``.npz`` member whole. For a trace
in memory, a task gets the sliced array.
The global scope does not shard this way (one cache shared by all layers): its route to large
traces is SHARDS sampling (:func:`moeroof.cachesim.shards_hit_curve`), and
:func:`shards_curve_sharded` shards *that* over disjoint slices of the sampled hash range, one task
each, whose spread states its error (an estimate, not exact: see :class:`ShardsCurve`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moeroof import cachesim as cache
from moeroof.core.limits import MAX_SHARDS_SLICES
from moeroof.core.results import Result
from moeroof.data.io import Trace, read_trace
from moeroof.data.safe_read import load_npy
from moeroof.data.trace_parquet import iter_parquet_trace_steps, parquet_trace_info, read_parquet_trace_layers
from moeroof.run.cluster import open_client, worker_count


@dataclass(frozen=True)
class LayerCurve(Result):
    """Exact per-layer LRU curve: every layer has a cache of ``capacity_per_layer`` experts.

    ``hits`` (C+1,) int: counted requests that hit, summed over layers; ``requests`` counted
    requests (after warm-up); ``hit_rate = hits / requests`` (NaN when nothing is counted).
    """

    capacity_per_layer: np.ndarray
    hits: np.ndarray
    requests: int
    hit_rate: np.ndarray
    layers: int
    tasks: int


# ----------------------------------------------------------------------------- what a task reads


def _source(trace: Any) -> tuple[Any, int, int, dict[str, Any] | None]:
    """(source, layers, experts, meta): source a path when workers can read it, else the array."""
    if isinstance(trace, (str, os.PathLike)):
        # a Parquet trace's footer only (each task checks the rows it reads); any other checked
        # whole, once, here: the tasks trust it
        t = parquet_trace_info(trace) if _is_parquet(trace) else read_trace(trace)
        return str(Path(trace)), t.layers, t.experts, None
    if isinstance(trace, Trace):
        if isinstance(trace.topk, np.memmap) and trace.path is not None:
            return str(trace.path), trace.layers, trace.experts, dict(trace.meta)
        return trace.topk, trace.layers, trace.experts, None
    raise TypeError(f"trace must be a path or a moeroof.data.io.Trace, got {type(trace).__name__}")


def _is_parquet(path: Any) -> bool:
    return str(path).lower().endswith(".parquet")


def _slice(payload: Any, meta: dict[str, Any] | None, l0: int, l1: int) -> np.ndarray:
    """Layers l0..l1 of the trace as a task reads them: a Parquet trace row group by row group
    (only those layers' rows kept), a ``.npy`` memory-mapped whatever its size (already checked
    where the run started, so a task reads only its layers' columns), an ``.npz`` decompressed;
    an array payload is already the task's layers (:func:`_payload`)."""
    if not isinstance(payload, str):
        return payload
    if _is_parquet(payload):
        return read_parquet_trace_layers(payload, l0, l1)
    if payload.lower().endswith(".npy"):
        return load_npy(payload, copy_limit=0)[:, :, l0:l1]
    return read_trace(payload, meta).topk[:, :, l0:l1]


def _step_chunks(payload: Any, meta: dict[str, Any] | None, layers: int, steps_per_chunk: int):
    """(first step, dense chunk) over the whole trace; a Parquet trace in one pass over its rows."""
    if isinstance(payload, str) and _is_parquet(payload):
        s0 = 0
        for block in iter_parquet_trace_steps(payload, steps_per_chunk):
            yield s0, block
            s0 += block.shape[0]
        return
    topk = _slice(payload, meta, 0, layers)
    for s0 in range(0, int(topk.shape[0]), steps_per_chunk):
        yield s0, topk[s0 : s0 + steps_per_chunk]


def _payload(source: Any, l0: int, l1: int) -> Any:
    """What goes to the task: the path, or only the layers' columns of an in-memory trace."""
    return source if isinstance(source, str) else np.ascontiguousarray(source[:, :, l0:l1])


def _groups(layers: int, client: Any, workers: int, layers_per_task: int | None) -> list[tuple[int, int]]:
    """The tasks' layer ranges: ``layers_per_task`` layers each, by default the layers spread
    evenly over the workers."""
    if layers_per_task is None:
        layers_per_task = max(1, math.ceil(layers / max(1, worker_count(client, workers))))
    per = int(layers_per_task)
    if per < 1:
        raise ValueError(f"layers_per_task must be >= 1, got {per}")
    return [(l0, min(l0 + per, layers)) for l0 in range(0, layers, per)]


def _group_capacity(per: float, n: int, unit: str) -> float:
    """A capacity whose share over ``n`` layers is ``per`` exactly, as simulate() divides it."""
    c = per * n
    if unit == "experts":
        return c  # whole experts: c / n is exact
    for _ in range(256):  # float: step by ulps until c / n rounds to per
        q = c / n
        if q == per:
            return c
        c = float(np.nextafter(c, math.inf if q < per else -math.inf))
    raise ArithmeticError(f"no float capacity splits as {per!r} over {n} layers")  # pragma: no cover


def _slice_items(a: Any, layers: int, experts: int, l0: int, l1: int) -> Any:
    """Per-item array (layers·experts,) or (layers, experts) cut to layers l0..l1; else as is."""
    if a is None:
        return None
    b = np.asarray(a)
    if b.shape == (layers, experts):
        return b[l0:l1]
    if b.shape == (layers * experts,):
        return b[l0 * experts : l1 * experts]
    return b


def _slice_pinned(pinned: Any, layers: int, experts: int, l0: int, l1: int) -> Any:
    if pinned is None:
        return None
    p = np.asarray(pinned)
    n = layers * experts
    if cache.is_ranking(p, n):  # keep the group's items, in rank order, renumbered from the group's first layer
        lo, hi = l0 * experts, l1 * experts
        return p[(p >= lo) & (p < hi)] - lo
    if p.size != n:
        raise ValueError(f"pinned popularity must have {n} entries (layers·experts), got shape {p.shape}")
    return p.ravel()[l0 * experts : l1 * experts].astype(float)  # (layers, experts) or flat


# ----------------------------------------------------------------------------- tasks


def _requests(payload, meta, l0: int, l1: int, experts: int, streams: Any) -> cache.Requests:
    """The request stream of a task's layers l0..l1."""
    return cache.requests_from_trace(_slice(payload, meta, l0, l1), experts, streams=streams)


def _simulate_task(payload, meta, l0, l1, experts, capacity, kw, streams) -> cache.CacheResult:
    return cache.simulate(_requests(payload, meta, l0, l1, experts, streams), capacity, scope="layer", **kw)


def _curve_task(payload, meta, l0, l1, experts, warmup_steps, lookup, streams) -> tuple[np.ndarray, int]:
    """The group's hits at every per-layer capacity 0..E (ints, summed over its layers), and its
    counted requests. A layer's stack distances are at most E (its distinct items), so each
    layer's cumulative hits already span every capacity 0..E."""
    req = _requests(payload, meta, l0, l1, experts, streams)
    start = cache.lookup_starts(req, lookup)
    counted_all = req.step >= warmup_steps
    hits, counted = np.zeros(experts + 1, np.int64), 0
    for la in range(l1 - l0):
        mine = req.layer == la
        keep = counted_all[mine]
        counted += int(keep.sum())
        dist = cache.stack_distances(req.items[mine], start[mine])[keep]  # none for a layer without requests
        hist = np.bincount(dist, minlength=experts + 1).astype(np.int64)
        hist[0] = 0  # a first reference misses at every capacity
        hits += np.cumsum(hist)
    return hits, counted


def _run(fn, tasks: list[tuple], client: Any) -> list[Any]:
    if client is None:
        return [fn(*t) for t in tasks]
    futures = [client.submit(fn, *t, pure=False) for t in tasks]
    try:
        return client.gather(futures)
    finally:
        client.cancel([f for f in futures if not f.done()])


#: what a sharded run is called when distributed is not installed
_PURPOSE = "a sharded run (dask.distributed)"


# ----------------------------------------------------------------------------- public


def simulate_by_layer(
    trace: Any,
    capacity: float,
    policy: str = "lru",
    *,
    capacity_unit: str = "experts",
    item_bytes: Any = None,
    warmup_steps: int = 0,
    pinned: Any = None,
    lookup: str = "layer",
    streams: Any = None,
    layers_per_task: int | None = None,
    client: Any = None,
    scheduler: str | None = None,
    workers: int = 1,
) -> cache.CacheResult:
    """:func:`moeroof.cachesim.simulate` with ``scope="layer"``, layers sharded over tasks.

    ``trace``: a path (each task reads its own layers; a ``.npy`` trace is memory-mapped) or a
    :class:`~moeroof.data.io.Trace` (a memory-mapped one is re-opened by path in the tasks, an
    in-memory one sends each task its layers' columns). ``capacity`` is the total, as for
    ``simulate`` (``capacity / layers`` per layer, floored to whole experts for an expert
    capacity). ``streams`` as for :func:`~moeroof.cachesim.requests_from_trace`. Tasks run
    serially unless ``client``, ``scheduler`` (an address) or ``workers > 1`` (a LocalCluster of
    that many processes) is given; ``layers_per_task`` defaults to the layers over the workers.
    The result equals the one-process simulation: hits, misses and per-step arrays (byte sums
    per step are added group by group, exact for integer byte sizes).
    """
    capacity = cache.check_cache_args(policy, capacity_unit, "layer", capacity)
    source, layers, experts, meta = _source(trace)
    per = capacity / layers
    if capacity_unit == "experts":
        per = math.floor(per + 1e-9)
    with open_client(client, scheduler, workers, _PURPOSE) as c:
        tasks = []
        fixed = dict(policy=policy, capacity_unit=capacity_unit, warmup_steps=warmup_steps, lookup=lookup)
        for l0, l1 in _groups(layers, c, workers, layers_per_task):
            kw = dict(fixed, item_bytes=_slice_items(item_bytes, layers, experts, l0, l1))
            kw["pinned"] = _slice_pinned(pinned, layers, experts, l0, l1)
            cap = _group_capacity(float(per), l1 - l0, capacity_unit)
            tasks.append((_payload(source, l0, l1), meta, l0, l1, experts, cap, kw, streams))
        parts = _run(_simulate_task, tasks, c)
    hits_ps = np.sum([p.hits_per_step for p in parts], axis=0)
    miss_ps = np.sum([p.misses_per_step for p in parts], axis=0)
    # group by group, in layer order
    bytes_ps = sum((p.bytes_streamed_per_step for p in parts), np.zeros_like(parts[0].bytes_streamed_per_step))
    return cache.result_from_counts(
        hits_ps, miss_ps, bytes_ps, policy=policy, capacity=capacity, capacity_unit=capacity_unit, scope="layer",
        warmup_steps=int(warmup_steps), bytes_unit=parts[0].bytes_unit, notes=tuple(parts[0].notes),
    )  # fmt: skip


def lru_curve_by_layer(
    trace: Any,
    *,
    warmup_steps: int = 0,
    lookup: str = "layer",
    streams: Any = None,
    layers_per_task: int | None = None,
    client: Any = None,
    scheduler: str | None = None,
    workers: int = 1,
) -> LayerCurve:
    """Exact LRU hit curve with one cache per layer, at every per-layer capacity 0..E experts.

    Hits at per-layer capacity C equal :func:`moeroof.cachesim.simulate` with
    ``policy="lru", scope="layer"`` and a total capacity of C · layers, for every C. Tasks and
    the trace argument as for :func:`simulate_by_layer`; the counts are integers, summed exactly.
    """
    source, layers, experts, meta = _source(trace)
    with open_client(client, scheduler, workers, _PURPOSE) as c:
        groups = _groups(layers, c, workers, layers_per_task)
        tasks = [
            (_payload(source, l0, l1), meta, l0, l1, experts, int(warmup_steps), lookup, streams) for l0, l1 in groups
        ]
        parts = _run(_curve_task, tasks, c)
    hits = np.sum([h for h, _ in parts], axis=0)
    counted = sum(n for _, n in parts)
    cap = np.arange(experts + 1, dtype=np.int64)
    rate = hits / counted if counted else np.full(experts + 1, np.nan)
    return LayerCurve(
        capacity_per_layer=cap, hits=hits, requests=counted, hit_rate=rate, layers=layers, tasks=len(groups)
    )


# ----------------------------------------------------------------------------- SHARDS over slices
#
# The global scope (one cache shared by all layers) does not split by layer: a request's stack
# distance counts every layer's items. Its route to large traces is SHARDS spatial sampling
# (Waldspurger et al. 2015), and sampling does split: the hash range [0, R) of the sampled items
# is cut into S disjoint slices [j·R/S, (j+1)·R/S), each a SHARDS sample at rate R/S on its own.
# A task reads the trace itself, keeps only its slice's requests (chunk by chunk over steps, so
# it never holds the whole request stream) and returns the histogram of its stack distances.


@dataclass(frozen=True)
class ShardsCurve(Result):
    """SHARDS estimate of the global LRU curve from ``slices`` disjoint hash slices, with its error.

    ``capacity`` (C+1,) experts 0..C; ``hit_rate`` the estimate: every sampled request's stack
    distance is estimated from its own slice (the distance within the slice scaled by S/R) and
    the hit rate at capacity c is the share of all sampled requests with an estimated distance
    ≤ c — the mean of the slices' curves weighted by their sampled requests (the ratio estimator,
    as SHARDS takes the share of the sampled requests). ``stderr`` its sampling error per
    capacity, from the spread of the S slice curves (the ratio estimator's cluster variance,
    ``sqrt(S/(S−1) · Σ_j w_j² (h_j − h)²)`` with ``w_j`` the slices' shares of the sampled
    requests; ``std/√S`` when the slices are equally large); NaN with one slice.

    The stderr does not cover the estimate's *bias*: a slice estimates a distance d by X·S/R,
    X the distinct sampled items among the d (about Binomial(d, p), p = R/S), so the estimate
    is the true curve blurred over capacities c ± σ(c), ``σ(c) = sqrt(c·(1−p)/p)`` — small where
    the curve is straight, as large as the jump at a cliff (the global scope of a decode trace
    has one where a step's working set fits). ``lower``/``upper`` widen it into the stated
    band: ``hit_rate`` read 3σ(c) + 1/p below and above c (one grid step S/R for the
    interpolation), minus/plus 3 stderr there (0 for one slice). ``resolution`` = S/R experts:
    below it a slice's curve is interpolated from 0, not measured.
    ``slice_hit_rate`` (S, C+1) each slice's own curve (held at its last value beyond its range),
    ``slice_requests`` (S,) their sampled requests, ``requests`` the requests of the stream and
    ``item_requests`` (layers·experts,) requests per item (item = layer·experts + expert).
    """

    capacity: np.ndarray
    hit_rate: np.ndarray
    stderr: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    rate: float
    slices: int
    seed: int
    resolution: float
    slice_hit_rate: np.ndarray
    slice_requests: np.ndarray
    requests: int
    item_requests: np.ndarray
    tasks: int


#: half-width of the stated band in σ(c) of the distance estimate, and in stderr
BAND_SIGMAS = 3.0

#: requests_from_trace is called on this many (step, layer, expert) cells at a time per task
_SLICE_CHUNK_CELLS = 1 << 22


def _shards_task(payload, meta, layers, experts, lo, hi, seed, lookup, streams, want_counts):
    """One slice: (distance histogram 0..D_j, D_j, sampled requests, requests, item counts or None)."""
    chunk = max(1, _SLICE_CHUNK_CELLS // max(1, layers * experts))
    items, step, layer = [], [], []
    counts = np.zeros(layers * experts, np.int64) if want_counts else None
    total = steps = 0
    for s0, block in _step_chunks(payload, meta, layers, chunk):
        steps = s0 + int(block.shape[0])
        req = cache.requests_from_trace(block, experts, streams=streams)
        total += len(req)
        if counts is not None:
            counts += np.bincount(req.items, minlength=layers * experts)
        h = cache.item_hash(req.items, seed)
        keep = (h >= lo) & (h < hi)
        items.append(req.items[keep])
        step.append(req.step[keep] + np.int32(s0))
        layer.append(req.layer[keep])
    if sum(len(x) for x in items) == 0:
        return np.zeros(1, np.int64), 0, 0, total, counts
    sub = cache.Requests(np.concatenate(items), np.concatenate(step), np.concatenate(layer), steps, layers, experts)
    del items, step, layer
    d = int(np.count_nonzero(np.bincount(sub.items)))
    dist = cache.stack_distances(sub.items, cache.lookup_starts(sub, lookup))
    return np.bincount(dist, minlength=d + 1).astype(np.int64), d, len(sub), total, counts


def _slice_curve(hist: np.ndarray, d: int, n: int, rate: float) -> np.ndarray:
    """A slice's curve on capacities 0..⌈D/rate⌉, computed as shards_hit_curve computes it."""
    if n == 0:
        return np.full(1, np.nan)
    hist = hist.copy()
    hist[0] = 0  # a first reference misses at every capacity
    points = np.maximum(np.cumsum(hist.astype(float)) / float(n), 0.0)  # at capacities k/rate
    cap = np.arange(int(np.ceil(d / rate - 1e-9)) + 1, dtype=np.int64)
    return np.clip(np.interp(cap, np.arange(d + 1) / rate, points), 0.0, 1.0)


def _band(hit: np.ndarray, err: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """The stated band: the estimate read BAND_SIGMAS·σ(c) + 1/p either side, ± BAND_SIGMAS stderr."""
    cap = np.arange(hit.size, dtype=float)
    w = BAND_SIGMAS * np.sqrt(cap * (1.0 - p) / p) + 1.0 / p
    lo = np.clip(np.floor(cap - w), 0, hit.size - 1).astype(np.int64)
    hi = np.clip(np.ceil(cap + w), 0, hit.size - 1).astype(np.int64)
    se = np.nan_to_num(err, nan=0.0)
    with np.errstate(invalid="ignore"):
        lower = np.clip(hit[lo] - BAND_SIGMAS * se[lo], 0.0, 1.0)
        upper = np.clip(hit[hi] + BAND_SIGMAS * se[hi], 0.0, 1.0)
    return lower, upper


def _combined(per: np.ndarray, n_j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The slices' curves ``per`` (S, capacities) combined, each weighted by its requests ``n_j``,
    and the standard error of the combination (NaN for one slice, all NaN with no request)."""
    s, size = per.shape
    total = int(n_j.sum())
    if total == 0:
        return np.full(size, np.nan), np.full(size, np.nan)
    w = n_j / total  # exactly 1.0 for one slice: the curve is then shards_hit_curve's
    filled = np.where(n_j[:, None] > 0, per, 0.0)
    hit = np.sum(w[:, None] * filled, axis=0)
    if s == 1:
        return hit, np.full(size, np.nan)
    return hit, np.sqrt(s / (s - 1) * np.sum((w[:, None] * (filled - hit)) ** 2, axis=0))


def shards_curve_sharded(
    trace: Any,
    rate: float,
    *,
    slices: int | None = None,
    seed: int = 0,
    lookup: str = "layer",
    streams: Any = None,
    client: Any = None,
    scheduler: str | None = None,
    workers: int = 1,
) -> ShardsCurve:
    """SHARDS estimate of the global-scope LRU curve from ``slices`` disjoint hash slices, one task each.

    Item i is sampled iff ``hash(i) < rate`` (the hash of
    :func:`moeroof.cachesim.shards_hit_curve`, same ``seed``), and belongs to slice j iff
    its hash lies in ``[j·rate/S, (j+1)·rate/S)``: every slice is a SHARDS sample at rate R/S
    and together they are the rate-R sample. A task reads the trace (a path: as
    :func:`simulate_by_layer`'s tasks do; a :class:`~moeroof.data.io.Trace` in memory: sent
    once per worker), keeps its slice's requests chunk by chunk over steps and returns the
    histogram of their stack distances; no task holds the whole request stream or the other
    slices' samples. The combined curve and its standard error are described in
    :class:`ShardsCurve`. With one slice the curve equals ``shards_hit_curve(…, rate,
    seed=seed)`` exactly. The answer depends on ``slices``, never on how the tasks are run:
    serially unless ``client``, ``scheduler`` (an address) or ``workers > 1`` (a LocalCluster of
    that many processes) is given; ``slices`` defaults to the workers (the cluster's workers for
    a client or scheduler). Every slice resolves capacities ≥ S/R experts only (the stack
    distance within a slice counts a share R/S of the items), so more slices buy an error bar
    and parallelism at the cost of resolution.
    """
    rate = float(rate)
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sample rate must lie in (0, 1], got {rate!r}")
    cache.check_lookup(lookup)
    if slices is not None and not 1 <= int(slices) <= MAX_SHARDS_SLICES:
        raise ValueError(f"slices must be in 1 … {MAX_SHARDS_SLICES}, got {slices}")
    source, layers, experts, meta = _source(trace)
    with open_client(client, scheduler, workers, _PURPOSE) as c:
        s = worker_count(c, workers) if slices is None else int(slices)
        edges = [j * rate / s for j in range(s)] + [rate]  # 0 = e_0 < … < e_S = R, the last edge R itself
        payload = source
        if c is not None and not isinstance(source, str):
            payload = c.scatter(source, broadcast=True, hash=False)  # once per worker, not per task
        tasks = [
            (payload, meta, layers, experts, edges[j], edges[j + 1], int(seed), lookup, streams, j == 0)
            for j in range(s)
        ]
        parts = _run(_shards_task, tasks, c)
    sub_rate = rate / s
    curves = [_slice_curve(h, d, n, sub_rate) for h, d, n, _, _ in parts]
    size = max(cv.size for cv in curves)
    cap = np.arange(size, dtype=np.int64)
    per = np.array([cv[np.minimum(cap, cv.size - 1)] for cv in curves])  # held at the last value
    n_j = np.array([n for _, _, n, _, _ in parts], dtype=np.int64)
    hit, err = _combined(per, n_j)
    lower, upper = _band(hit, err, sub_rate)
    return ShardsCurve(
        capacity=cap, hit_rate=hit, stderr=err, lower=lower, upper=upper,
        rate=rate, slices=s, seed=int(seed), resolution=s / rate, slice_hit_rate=per, slice_requests=n_j,
        requests=int(parts[0][3]), item_requests=parts[0][4], tasks=len(tasks),
    )  # fmt: skip
