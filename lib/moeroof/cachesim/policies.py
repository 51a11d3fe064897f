"""Cache policies replayed over a request stream: hits, misses and bytes streamed per step
(docs/models.md, caches).

**Simulation** (:func:`simulate`): every request is a hit if the item is cached, else a miss
that streams the item's bytes. *When* it is judged is the ``lookup``: by default as its
(step, layer) starts — an engine looks up all of a layer's experts, computes with the cached
ones and fetches the misses, so a miss never evicts an expert the same layer still needs (with
K = 8 and a per-layer cache of 8 experts, the hit rate is then the consecutive-token overlap
of the layer's selections); ``lookup="request"`` judges each request in its own turn, the way a
trace-driven simulator such as libCacheSim replays the same request order (a miss can then
evict an expert requested later in the same layer, so a cache of K experts hits less than the
overlap). Either way the contents evolve request by request in the order below. Capacity
counts experts (each item one slot) or bytes (items may
differ in size); scope ``"global"`` is one cache shared by all layers, ``"layer"`` one cache per
layer with ``capacity / layers`` each (floored to whole experts for an expert capacity). An item
larger than its cache is streamed and never cached. Per-rank ownership
(:func:`requests_from_trace` with a partition and a rank): a partition maps experts to ranks and
each rank caches only its own experts in its own cache. Policies:

- ``"lru"`` — evict the least recently used item (demand paging: every miss is inserted).
- ``"lfu"`` — *in-cache* LFU, as libCacheSim's ``LFU`` (``cache/eviction/LFU.c``) and most
  engines keep it: evict the cached item with the fewest requests since it entered the cache; an
  evicted item's count is forgotten, so it comes back with a count of 1. Ties go to the item
  that reached its count earliest — the least recently used among equal counts, which is
  libCacheSim's order (a FIFO list per count: an item joins the tail of its new count's list
  on every request and the head of the lowest count's list is evicted).
- ``"lfu-perfect"`` — *perfect* LFU: counts run over every request since the start of the trace,
  an evicted item's history survives its eviction (Breslau et al. 1999, "Web caching and
  Zipf-like distributions", INFOCOM, name the two variants); ties as ``"lfu"``. Under the
  independent reference model it converges to the static hot set; on a stream that cycles
  through more items than fit, it keeps the items that were popular, where in-cache LFU keeps
  recycling the newest arrivals (what our ``moeroof cache`` ``lfu`` once did).
- ``"static"`` — a hot set pinned from a histogram (most popular items that fit, greedily in
  rank order, per cache), loaded on first use (a miss: every policy starts cold) and never
  evicted; other items bypass the cache. With no histogram the
  trace's own request counts are used: an *oracle* hot set (it has seen the future).
- ``"belady"`` — Belady's MIN (Belady 1966) with bypass: on a miss with a full cache, evict the
  cached item whose next use is farthest in the future — or bypass the incoming item when its
  own next use is farther still (the stream is computed from a scratch buffer, as a static hot
  set does). With unit sizes this is the offline optimum over every policy, bypassing or not,
  so it bounds all the others. With unequal sizes optimal caching is NP-hard; the same rule
  (evict farthest first until the item fits, never an item needed sooner than it) is then a
  heuristic, not a bound.
- ``"belady-insert"`` — Belady's MIN as demand paging, libCacheSim's ``Belady``
  (``cache/eviction/Belady.c``): every miss is inserted, evicting the cached items used farthest
  in the future until it fits. With unit sizes it is the optimum among policies that insert
  every miss (Belady 1966; Mattson et al. 1970 prove it), at most ``"belady"``'s hits: an item that is never requested
  again still displaces one that is.
- ``"s3fifo"`` — S3-FIFO (Yang et al. 2023, "FIFO queues are all you need for cache eviction",
  SOSP; the original algorithm, libCacheSim ``S3FIFOv0``, ``cache/eviction/S3FIFOv0.c``): a small
  FIFO S of ``floor(0.1 · capacity)`` (libCacheSim's integer share), a main FIFO M (the rest)
  and a ghost FIFO G of ids (``floor(0.9 · capacity)``). New items enter S, items found in G
  enter M. A counter counts hits. Evicting from S (while M holds no more than its share and S
  is not empty): the tail moves to M with its counter cleared if it was hit at least
  ``s3fifo_threshold`` times (the *move-to-main threshold*), else it leaves for G. Evicting
  from M: the tail is reinserted with its counter ``min(counter, 3) − 1`` (a 2-bit clock) while
  the counter is > 0, else evicted. The threshold defaults to
  :data:`S3FIFO_MOVE_TO_MAIN_THRESHOLD` = 1 — an item is promoted if it was reused while in S,
  as the algorithm's authors describe it, and this simulator's behaviour before the parameter
  existed; libCacheSim's ``S3FIFOv0`` defaults to
  :data:`LIBCACHESIM_S3FIFO_THRESHOLD` = 2 (``move-to-main-threshold=2``). (libCacheSim's
  ``S3FIFO``, without ``v0``, is a later variant and differs.)
- ``"arc"`` — Adaptive Replacement Cache (Megiddo & Modha 2003, FAST, Fig. 4): recency list
  T1, frequency list T2 and their ghosts B1, B2; the target size p of T1 adapts on ghost hits.
  Unit sizes only (capacity in experts).

**Against libCacheSim** (``tests/test_cache_libcachesim.py``): with ``lookup="request"``, unit
sizes and one cache, the hit counts of ``lru``, ``lfu``, ``arc``, ``s3fifo`` (threshold 1 and 2)
and ``belady-insert`` equal libCacheSim's ``LRU``, ``LFU``, ``ARC``, ``S3FIFOv0`` (same
``move-to-main-threshold``) and ``Belady`` on the embedded trace and synthetic streams, at
several capacities (committed counts from ``benchmarks/libcachesim_counts.py``, and live when
the ``libcachesim`` package is installed). ``lfu-perfect`` and ``belady`` have no libCacheSim
counterpart. libCacheSim's S3FIFOv0 refuses a cache of fewer than 10 objects and admits
nothing into a small queue of one object; the comparison starts at 20 experts.

Warm-up steps are simulated but excluded from the counted hits and misses; per-step arrays
cover every step so callers can see the warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from moeroof.cachesim.requests import (
    MAX_ITEMS,
    Requests,
    check_lookup,
    hot_set_ranking,
    item_counts,
    next_use,
    request_histogram,
)
from moeroof.core.results import Result

__all__ = [
    "POLICIES",
    "SCOPES",
    "UNITS",
    "S3FIFO_SMALL_FRACTION",
    "S3FIFO_MOVE_TO_MAIN_THRESHOLD",
    "LIBCACHESIM_S3FIFO_THRESHOLD",
    "CacheResult",
    "simulate",
    "result_from_counts",
    "check_cache_args",
    "is_ranking",
]

POLICIES = ("lru", "lfu", "lfu-perfect", "static", "belady", "belady-insert", "s3fifo", "arc")


SCOPES = ("global", "layer")


UNITS = ("experts", "bytes")


#: share of the capacity given to S3-FIFO's small queue (Yang et al. 2023, §4)
S3FIFO_SMALL_FRACTION = 0.1


#: S3-FIFO's default move-to-main threshold: hits in the small queue that move an item to main
S3FIFO_MOVE_TO_MAIN_THRESHOLD = 1


#: libCacheSim S3FIFOv0's default move-to-main threshold (``move-to-main-threshold=2``)
LIBCACHESIM_S3FIFO_THRESHOLD = 2


@dataclass(frozen=True)
class CacheResult(Result):
    """Outcome of one simulation; totals count the steps after warm-up only.

    ``hits_per_step``, ``misses_per_step`` and ``bytes_streamed_per_step`` cover every step,
    warm-up included. ``bytes_streamed_per_step`` counts experts when no item sizes were given.
    """

    policy: str
    capacity: float
    capacity_unit: str
    scope: str
    warmup_steps: int
    requests: int
    hits: int
    misses: int
    hit_rate: float
    hits_per_step: np.ndarray
    misses_per_step: np.ndarray
    bytes_streamed_per_step: np.ndarray
    bytes_unit: str = "bytes"
    notes: tuple[str, ...] = field(default=())
    #: per request, whether it hit (only with ``simulate(..., return_hits=True)``)
    request_hits: np.ndarray | None = None

    @property
    def mean_bytes_streamed_per_step(self) -> float:
        """Mean streamed bytes (or experts, see ``bytes_unit``) over the counted steps."""
        counted = self.bytes_streamed_per_step[self.warmup_steps :]
        return float(counted.mean()) if counted.size else float("nan")


def _item_sizes(item_bytes, layers: int, experts: int) -> np.ndarray | None:
    if item_bytes is None:
        return None
    b = np.asarray(item_bytes, dtype=float)
    n_items = layers * experts
    if b.ndim == 0 or b.shape in ((experts,), (layers, experts)):
        b = np.broadcast_to(b, (layers, experts)).ravel()
    elif b.shape != (n_items,):
        raise ValueError(
            f"item_bytes must be a scalar or have shape ({experts},), ({layers}, {experts}) or ({n_items},), got {b.shape}"
        )
    if not np.all(np.isfinite(b)) or np.any(b <= 0):
        raise ValueError("item_bytes must be finite and > 0")
    return np.ascontiguousarray(b)


def _groups(scope: str, capacity: float, unit: str, layers: int, experts: int):
    n_items = layers * experts
    if scope == "global":
        group = np.zeros(n_items, dtype=np.int64)
        cap = np.array([float(capacity)])
    else:
        group = np.repeat(np.arange(layers, dtype=np.int64), experts)
        cap = np.full(layers, capacity / layers if layers else 0.0)  # zero layers: no group, nothing to split
    if unit == "experts":
        cap = np.floor(cap + 1e-9)
    return group, cap


def _clamp_capacity(cap, group, occ, items, n_items, unit, *, everything=False) -> np.ndarray:
    """Each group's capacity, capped at what its distinct requested items occupy (every item of
    the group with ``everything``: a pinned hot set may rank items the stream never requests).

    A cache that holds every item it will ever see never evicts, so any larger capacity gives
    the same hits; the cap keeps the kernels' integer arithmetic in range (a capacity of 2^63
    experts overflowed ARC's list lengths and it hit nothing). In bytes the cap is twice the
    total, so that float rounding in the kernels' running sums can never make it bind.
    """
    present = np.ones(n_items, dtype=bool) if everything else item_counts(items, n_items) > 0
    need: np.ndarray = np.bincount(group[present], weights=occ[present], minlength=cap.size)[: cap.size]
    if unit == "bytes":
        need = 2.0 * need
    return np.minimum(cap, need)


def is_ranking(p: np.ndarray, n_items: int) -> bool:
    """Whether a pinned set ``p`` is a ranking (item ids, most popular first), not a popularity
    per item: 1-D integers, fewer than ``n_items`` of them or a permutation of them all."""
    return (
        p.ndim == 1
        and np.issubdtype(p.dtype, np.integer)
        and (p.size < n_items or np.array_equal(np.sort(p), np.arange(n_items)))
    )


def _pinned_mask(pinned, group, cap, occ, n_items) -> np.ndarray:
    """Greedy fill of each group's cache with the top-ranked items that fit."""
    p = np.asarray(pinned)
    if is_ranking(p, n_items):
        if p.size and (p.min() < 0 or p.max() >= n_items):
            raise ValueError(f"pinned ranking holds item ids outside [0, {n_items})")
        ranking = p.astype(np.int64)
    else:
        if p.size != n_items:
            raise ValueError(f"pinned popularity must have {n_items} entries (layers·experts), got shape {p.shape}")
        ranking = hot_set_ranking(p)
    mask = np.zeros(n_items, dtype=bool)
    used = np.zeros(cap.size)
    for x in ranking:
        g = group[x]
        if not mask[x] and used[g] + occ[x] <= cap[g]:
            mask[x] = True
            used[g] += occ[x]
    return mask


def _kernel_items(items, n_items: int) -> np.ndarray:
    """The request items as the C kernels read them (int32, contiguous), checked in [0, n_items)."""
    if n_items >= MAX_ITEMS:
        raise ValueError(f"{n_items} items: the cache simulator keys its tables by int32 item ids, below 2^31")
    items = np.ascontiguousarray(items)
    if items.size and (items.min() < 0 or items.max() >= n_items):
        raise ValueError(f"request item ids must lie in [0, {n_items})")
    return items if items.dtype == np.int32 else items.astype(np.int32)


def simulate(
    requests: Requests,
    capacity: float,
    *,
    policy: str = "lru",
    capacity_unit: str = "experts",
    item_bytes=None,
    scope: str = "global",
    warmup_steps: int = 0,
    pinned=None,
    return_hits: bool = False,
    lookup: str = "layer",
    s3fifo_threshold: int = S3FIFO_MOVE_TO_MAIN_THRESHOLD,
) -> CacheResult:
    """Simulate one cache policy on a request stream (see the module docstring for policies).

    ``capacity`` in experts (``capacity_unit="experts"``: every item takes one slot) or bytes
    (``"bytes"``: items take ``item_bytes``, required). ``item_bytes`` is a scalar or an array
    (experts,), (layers, experts) or (layers·experts,); it also sets the bytes streamed per miss
    (default 1 per item: the per-step figure then counts experts, ``bytes_unit="experts"``).
    ``scope="layer"``: one cache per layer with ``capacity / layers`` each. ``pinned`` (static
    only): a ranking (item ids, most popular first) or a popularity array (layers·experts,)
    or (layers, experts); default the stream's own request counts (an oracle hot set).
    ``lookup``: ``"layer"`` (default) judges a request a hit if its item is cached when its
    (step, layer) lookup starts, as an engine that serves a layer's cached experts and fetches
    its misses does; ``"request"`` judges each request in its own turn, as libCacheSim does
    (see :func:`lookup_starts`). The cache contents evolve request by request either way.
    ``s3fifo_threshold`` (``policy="s3fifo"`` only): hits in S3-FIFO's small queue that move an
    item to the main queue, an integer ≥ 1 (default 1; libCacheSim's S3FIFOv0 uses 2).
    """
    capacity = check_cache_args(policy, capacity_unit, scope, capacity)
    warmup_steps = int(warmup_steps)
    if warmup_steps < 0:
        raise ValueError("warmup_steps must be >= 0")
    if scope == "layer" and requests.layers < 1:
        # a cache per layer of a trace with no layer: there is no cache to split the capacity over
        raise ValueError("the trace has 0 layers: a per-layer cache (scope layer) needs at least one")
    layers, experts = requests.layers, requests.experts
    n_items = layers * experts
    sizes = _item_sizes(item_bytes, layers, experts)
    if capacity_unit == "bytes" and sizes is None:
        raise ValueError("capacity_unit='bytes' needs item_bytes (bytes per expert)")
    occ: np.ndarray = np.ones(n_items) if sizes is None or capacity_unit == "experts" else sizes
    s3fifo_threshold = _checked_policy_options(policy, capacity_unit, pinned, s3fifo_threshold)
    group, cap = _groups(scope, capacity, capacity_unit, layers, experts)
    items = _kernel_items(requests.items, n_items)
    cap = _clamp_capacity(cap, group, occ, items, n_items, capacity_unit, everything=policy == "static")
    check_lookup(lookup)
    off, cstep = requests.lookups()
    steps = int(requests.steps)
    weighted = sizes is not None
    # the kernels count hits, misses and streamed bytes per step; flags per request only on demand
    hit_flags = np.zeros(items.size if return_hits else 0, dtype=bool)
    tail = (off, cstep, lookup == "request", steps, sizes if weighted else np.zeros(1), weighted, hit_flags)
    notes: list[str] = []
    if policy == "static":
        if pinned is None:
            pinned = request_histogram(requests)
            notes.append("static: hot set pinned from the trace's own request histogram — an oracle hot set")
        pinned = _pinned_mask(pinned, group, cap, occ, n_items)
    hits_ps, miss_ps, bytes_ps = _replay(policy, items, group, cap, occ, tail, pinned, s3fifo_threshold, notes)
    res = result_from_counts(
        hits_ps, miss_ps, miss_ps.astype(float) if sizes is None else bytes_ps, policy=policy, capacity=capacity,
        capacity_unit=capacity_unit, scope=scope, warmup_steps=warmup_steps,
        bytes_unit="experts" if sizes is None else "bytes", notes=tuple(notes),
    )  # fmt: skip
    return replace(res, request_hits=hit_flags) if return_hits else res


def check_cache_args(policy: str, capacity_unit: str, scope: str, capacity: float) -> float:
    """The policy, unit, scope and capacity of a simulation checked (ValueError); the capacity."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if capacity_unit not in UNITS:
        raise ValueError(f"capacity_unit must be 'experts' or 'bytes', got {capacity_unit!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be 'global' or 'layer', got {scope!r}")
    capacity = float(capacity)
    if not np.isfinite(capacity) or capacity < 0:
        raise ValueError(f"capacity must be finite and >= 0, got {capacity!r}")
    return capacity


def _checked_policy_options(policy, capacity_unit, pinned, s3fifo_threshold) -> int:
    """The options that belong to one policy checked (ARC's unit sizes, the pinned set, S3-FIFO's
    threshold); the threshold as an int."""
    if policy == "arc" and capacity_unit != "experts":
        raise ValueError("arc is implemented for unit sizes only: give the capacity in experts")
    if policy != "static" and pinned is not None:
        raise ValueError("pinned applies to policy='static' only")
    if isinstance(s3fifo_threshold, bool) or int(s3fifo_threshold) != s3fifo_threshold or s3fifo_threshold < 1:
        raise ValueError(f"s3fifo_threshold must be an integer >= 1, got {s3fifo_threshold!r}")
    if policy != "s3fifo" and s3fifo_threshold != S3FIFO_MOVE_TO_MAIN_THRESHOLD:
        raise ValueError("s3fifo_threshold applies to policy='s3fifo' only")
    return int(s3fifo_threshold)


def _replay(policy, items, group, cap, occ, tail, mask, s3fifo_threshold, notes: list[str]):
    """The counts of ``policy``'s kernel over the stream (``mask``: the pinned set of
    ``static``); what the result must say of the policy is appended to ``notes``."""
    from moeroof.kernels import cache as kernels

    if policy == "lru":
        return kernels.lru_pass(items, group, cap, occ, *tail)
    if policy in ("lfu", "lfu-perfect"):
        mode = kernels.HEAP_LFU if policy == "lfu" else kernels.HEAP_LFU_PERFECT
        return kernels.heap_pass(items, group, cap, occ, mode, np.zeros(1, np.int64), *tail)
    if policy == "belady":
        notes.append(
            "belady: offline optimum (Belady's MIN with bypass); the bound on every policy"
            + ("" if occ.size == 0 or np.all(occ == occ[0]) else " only for equal sizes — a heuristic here")
        )
        return kernels.heap_pass(items, group, cap, occ, kernels.HEAP_BELADY, next_use(items, np.int32), *tail)
    if policy == "belady-insert":
        notes.append(
            "belady-insert: offline (Belady's MIN inserting every miss, libCacheSim's Belady); "
            "the optimum of demand paging, at most belady's hits"
        )
        return kernels.heap_pass(items, group, cap, occ, kernels.HEAP_BELADY_INSERT, next_use(items, np.int32), *tail)
    if policy == "s3fifo":
        if s3fifo_threshold != S3FIFO_MOVE_TO_MAIN_THRESHOLD:
            notes.append(f"s3fifo: an item moves from the small queue to main after {s3fifo_threshold} hits")
        return kernels.s3fifo_pass(items, group, cap, occ, S3FIFO_SMALL_FRACTION, s3fifo_threshold, *tail)
    if policy == "arc":
        return kernels.arc_pass(items, group, cap, *tail)
    # static, cold start like every other policy: a pinned item loads on first use
    return kernels.static_pass(items, mask, *tail[:2], *tail[3:])  # the tail but the lookup flag: it takes none


def result_from_counts(
    hits_per_step, misses_per_step, bytes_streamed_per_step, *, policy: str, capacity: float, capacity_unit: str,
    scope: str, warmup_steps: int, bytes_unit: str, notes: tuple[str, ...] = (),
) -> CacheResult:  # fmt: skip
    """A :class:`CacheResult` from per-step hits, misses and bytes streamed: the totals count the
    steps from ``warmup_steps`` on (a run sharded over layers sums its parts' steps first)."""
    w = min(int(warmup_steps), len(hits_per_step))
    hits, misses = int(hits_per_step[w:].sum()), int(misses_per_step[w:].sum())
    total = hits + misses
    counts = (total, hits, misses, hits / total if total else float("nan"))
    steps = (hits_per_step, misses_per_step, bytes_streamed_per_step)
    return CacheResult(policy, capacity, capacity_unit, scope, warmup_steps, *counts, *steps, bytes_unit, notes)
