"""Per-layer cache analyses sharded by layer over dask.distributed workers — exactly.

With scope ``"layer"`` (:func:`moeroof.models.cache.simulate`) every layer has its own cache and
its requests touch only that cache, so the layers can be simulated apart and their counts
added: :func:`simulate_by_layer` splits the trace's layers into groups of ``layers_per_task``,
simulates each group as one task (serially, on a ``LocalCluster`` of worker processes, or on a
scheduler by address) and sums hits, misses and the per-step arrays. The answer equals the
one-process :func:`~moeroof.models.cache.simulate` exactly for every policy: each layer's cache
sees the same requests in the same order, and a policy compares only positions within its own
cache (recency, frequency, next use), which removing other layers' requests does not reorder.

:func:`lru_curve_by_layer` is the exact LRU hit curve of the per-layer scope, on the per-layer
capacity axis: a request hits a per-layer LRU cache of C experts iff its stack distance *within
its layer* (Mattson et al. 1970, taken as its (step, layer) lookup starts) is in 1…C. Each task
returns integer hit counts per capacity for its layers; their sum is the curve.

What a task reads: for a trace given as a path, the path and its layer slice — a ``.npy`` trace
is memory-mapped (beyond the reader's copy limit), so a worker reads only the columns of its layers, chunk by chunk over steps (a
``.npz`` member is decompressed whole by each worker); for a trace in memory, the sliced array.
The global scope does not shard this way (one cache shared by all layers): its route to large
traces is SHARDS sampling (:func:`moeroof.models.cache.shards_hit_curve`), with its error stated.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.core.results import Result
from moeroof.data.io import Trace, read_trace
from moeroof.models import cache


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
        t = read_trace(trace)
        return str(Path(trace)), t.layers, t.experts, None
    if isinstance(trace, Trace):
        if isinstance(trace.topk, np.memmap) and trace.path is not None:
            return str(trace.path), trace.layers, trace.experts, dict(trace.meta)
        return trace.topk, trace.layers, trace.experts, None
    raise TypeError(f"trace must be a path or a moeroof.data.io.Trace, got {type(trace).__name__}")


def _slice(source: Any, meta: dict[str, Any] | None, l0: int, l1: int) -> np.ndarray:
    if isinstance(source, str):
        return read_trace(source, meta).topk[:, :, l0:l1]  # a view: a memmap stays on disk
    return source[:, :, l0:l1]


def _payload(source: Any, l0: int, l1: int) -> Any:
    """What goes to the task: the path, or only the layers' columns of an in-memory trace."""
    return source if isinstance(source, str) else np.ascontiguousarray(source[:, :, l0:l1])


def _groups(layers: int, layers_per_task: int) -> list[tuple[int, int]]:
    if layers_per_task < 1:
        raise ValueError(f"layers_per_task must be >= 1, got {layers_per_task}")
    return [(l0, min(l0 + layers_per_task, layers)) for l0 in range(0, layers, layers_per_task)]


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
    is_ranking = (
        p.ndim == 1 and np.issubdtype(p.dtype, np.integer) and (p.size < n or np.array_equal(np.sort(p), np.arange(n)))
    )
    if is_ranking:  # keep the group's items, in rank order, renumbered from the group's first layer
        lo, hi = l0 * experts, l1 * experts
        return p[(p >= lo) & (p < hi)] - lo
    if p.shape == (layers, experts):
        return p[l0:l1].ravel().astype(float)
    if p.size == n:
        return p.ravel()[l0 * experts : l1 * experts].astype(float)
    raise ValueError(f"pinned popularity must have {n} entries (layers·experts), got shape {p.shape}")


# ----------------------------------------------------------------------------- tasks


def _simulate_task(payload, meta, l0, l1, experts, capacity, kw, streams) -> cache.CacheResult:
    topk = _slice(payload, meta, l0, l1) if isinstance(payload, str) else payload
    req = cache.requests_from_trace(topk, experts, streams=streams)
    return cache.simulate(req, capacity, scope="layer", **kw)


def _curve_task(payload, meta, l0, l1, experts, warmup_steps, lookup, streams) -> tuple[list[np.ndarray], int]:
    """Per layer of the group: hits at every per-layer capacity 0..D_l (ints), and counted requests."""
    topk = _slice(payload, meta, l0, l1) if isinstance(payload, str) else payload
    req = cache.requests_from_trace(topk, experts, streams=streams)
    start = cache.lookup_starts(req, lookup)
    counted_all = req.step >= warmup_steps
    out, counted = [], 0
    for la in range(l1 - l0):
        mine = req.layer == la
        items = req.items[mine]
        keep = counted_all[mine]
        counted += int(keep.sum())
        if items.size == 0:
            out.append(np.zeros(1, np.int64))
            continue
        dist = cache.stack_distances(items, start[mine])[keep]
        hist = np.bincount(dist, minlength=experts + 1).astype(np.int64)
        hist[0] = 0  # a first reference misses at every capacity
        out.append(np.cumsum(hist))
    return out, counted


@contextlib.contextmanager
def _client(client: Any, scheduler: str | None, workers: int) -> Iterator[Any]:
    """The client to submit to, or None for serial: as given, by address, or a LocalCluster."""
    if client is not None:
        yield client
        return
    if scheduler is None and workers <= 1:
        yield None
        return
    from distributed import Client, LocalCluster

    if scheduler is not None:
        with Client(scheduler) as c:
            yield c
        return
    cluster = LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None)
    try:
        with Client(cluster) as c:
            yield c
    finally:
        cluster.close()


def _run(fn, tasks: list[tuple], client: Any) -> list[Any]:
    if client is None:
        return [fn(*t) for t in tasks]
    futures = [client.submit(fn, *t, pure=False) for t in tasks]
    try:
        return client.gather(futures)
    finally:
        client.cancel([f for f in futures if not f.done()])


def _default_per_task(layers: int, client: Any, workers: int) -> int:
    n = workers
    if client is not None:
        n = max(1, len(client.scheduler_info().get("workers", {})))
    return max(1, math.ceil(layers / max(1, n)))


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
    """:func:`moeroof.models.cache.simulate` with ``scope="layer"``, layers sharded over tasks.

    ``trace``: a path (each task reads its own layers; a ``.npy`` trace is memory-mapped) or a
    :class:`~moeroof.data.io.Trace` (a memory-mapped one is re-opened by path in the tasks, an
    in-memory one sends each task its layers' columns). ``capacity`` is the total, as for
    ``simulate`` (``capacity / layers`` per layer, floored to whole experts for an expert
    capacity). ``streams`` as for :func:`~moeroof.models.cache.requests_from_trace`. Tasks run
    serially unless ``client``, ``scheduler`` (an address) or ``workers > 1`` (a LocalCluster of
    that many processes) is given; ``layers_per_task`` defaults to the layers over the workers.
    The result equals the one-process simulation: hits, misses and per-step arrays (byte sums
    per step are added group by group, exact for integer byte sizes).
    """
    if policy not in cache.POLICIES:
        raise ValueError(f"policy must be one of {', '.join(cache.POLICIES)}, got {policy!r}")
    if capacity_unit not in cache.UNITS:
        raise ValueError(f"capacity_unit must be 'experts' or 'bytes', got {capacity_unit!r}")
    capacity = float(capacity)
    if not np.isfinite(capacity) or capacity < 0:
        raise ValueError(f"capacity must be finite and >= 0, got {capacity!r}")
    source, layers, experts, meta = _source(trace)
    per = capacity / layers
    if capacity_unit == "experts":
        per = math.floor(per + 1e-9)
    with _client(client, scheduler, workers) as c:
        k = _default_per_task(layers, c, workers) if layers_per_task is None else int(layers_per_task)
        tasks = []
        for l0, l1 in _groups(layers, k):
            kw = {
                "policy": policy,
                "capacity_unit": capacity_unit,
                "item_bytes": _slice_items(item_bytes, layers, experts, l0, l1),
                "warmup_steps": warmup_steps,
                "pinned": _slice_pinned(pinned, layers, experts, l0, l1),
                "lookup": lookup,
            }
            cap = _group_capacity(float(per), l1 - l0, capacity_unit)
            tasks.append((_payload(source, l0, l1), meta, l0, l1, experts, cap, kw, streams))
        parts = _run(_simulate_task, tasks, c)
    hits_ps = np.sum([p.hits_per_step for p in parts], axis=0)
    miss_ps = np.sum([p.misses_per_step for p in parts], axis=0)
    bytes_ps = np.zeros_like(parts[0].bytes_streamed_per_step)
    for p in parts:  # group by group, in layer order
        bytes_ps = bytes_ps + p.bytes_streamed_per_step
    w = min(int(warmup_steps), hits_ps.size)
    hits, misses = int(hits_ps[w:].sum()), int(miss_ps[w:].sum())
    total = hits + misses
    notes = list(parts[0].notes)
    return cache.CacheResult(
        policy=policy,
        capacity=capacity,
        capacity_unit=capacity_unit,
        scope="layer",
        warmup_steps=int(warmup_steps),
        requests=total,
        hits=hits,
        misses=misses,
        hit_rate=hits / total if total else float("nan"),
        hits_per_step=hits_ps,
        misses_per_step=miss_ps,
        bytes_streamed_per_step=bytes_ps,
        bytes_unit=parts[0].bytes_unit,
        notes=tuple(notes),
    )


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

    Hits at per-layer capacity C equal :func:`moeroof.models.cache.simulate` with
    ``policy="lru", scope="layer"`` and a total capacity of C · layers, for every C. Tasks and
    the trace argument as for :func:`simulate_by_layer`; the counts are integers, summed exactly.
    """
    source, layers, experts, meta = _source(trace)
    with _client(client, scheduler, workers) as c:
        k = _default_per_task(layers, c, workers) if layers_per_task is None else int(layers_per_task)
        groups = _groups(layers, k)
        tasks = [
            (_payload(source, l0, l1), meta, l0, l1, experts, int(warmup_steps), lookup, streams) for l0, l1 in groups
        ]
        parts = _run(_curve_task, tasks, c)
    hits = np.zeros(experts + 1, np.int64)
    counted = 0
    for per_layer, n in parts:
        counted += n
        for cum in per_layer:
            hits[: cum.size] += cum
            hits[cum.size :] += cum[-1]  # beyond the layer's distinct items: every reuse hits
    cap = np.arange(experts + 1, dtype=np.int64)
    rate = hits / counted if counted else np.full(experts + 1, np.nan)
    return LayerCurve(
        capacity_per_layer=cap, hits=hits, requests=counted, hit_rate=rate, layers=layers, tasks=len(groups)
    )
