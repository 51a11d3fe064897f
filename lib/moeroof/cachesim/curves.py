"""Miss-ratio curves: exact LRU in one pass, the Che approximation and SHARDS sampling
(docs/models.md, caches).

**Miss-ratio curve in one pass** (:func:`lru_hit_curve`): LRU has the stack (inclusion)
property, so a request hits a cache of C items iff its *stack distance* — the number of
distinct items referenced since the item's previous reference, itself included — is ≤ C
(Mattson, Gecsei, Slutz & Traiger 1970, "Evaluation techniques for storage hierarchies").
Distances come from a Fenwick (binary indexed) tree over the positions of each item's last
access (Bennett & Kruskal 1975; Almási, Caşcaval & Padua 2002): the distance is the number of
marks after the item's previous position. Positions are compacted whenever the tree fills, so it
holds about two slots per distinct item and stays in cache: O(n log D) for n requests over D
items. Exact: equal to LRU simulation at every capacity (global scope, unit sizes), for either
lookup (with ``lookup="layer"`` a request's distance is read as its lookup starts: the cache of C
items is the top C of the stack, so it hits iff that distance is ≤ C).

**Che approximation** (:func:`che_hit_curve`; Che, Tung & Wang 2002, IEEE JSAC 20(7)): under the
independent reference model with per-request probabilities λ_i, an LRU cache of C items behaves
as if each item stayed for a characteristic time T_C solving ``Σ_i (1 − e^{−λ_i T_C}) = C``;
item i hits with probability ``1 − e^{−λ_i T_C}`` and the hit rate is their λ-weighted mean.

**SHARDS** (:func:`shards_hit_curve`; Waldspurger, Park, Garthwaite & Ahmad 2015, FAST,
fixed-rate variant): keep the requests of items whose hash satisfies ``hash mod P < R·P``
(spatial sampling: every reference of a sampled item is kept), compute their stack distances
exactly and scale each by ``1/R``.
"""

from __future__ import annotations

import numpy as np

from moeroof.cachesim.requests import Requests, check_lookup, item_counts

__all__ = [
    "stack_distances",
    "lru_hit_counts",
    "lru_hit_curve",
    "che_hit_curve",
    "item_hash",
    "shards_hit_curve",
]

#: requests hashed at a time by shards_hit_curve
_HASH_CHUNK = 1 << 22


def _labels(items: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(ids, label, D): ``label[ids]`` relabels the item ids to 0..D−1 (order kept). O(n) by
    bincount when ids are small (``ids`` is then ``items`` itself, not a copy); else by sorting."""
    items = np.asarray(items)
    if items.size and items.min() >= 0 and items.max() < 4 * items.size + 2**20:
        present = item_counts(items) > 0
        label = np.cumsum(present, dtype=np.int64) - 1
        ids = items if items.dtype in (np.int32, np.int64) else items.astype(np.int64)
        return np.ascontiguousarray(ids), label, int(present.sum())
    uniq, inv = np.unique(items, return_inverse=True)
    return np.ascontiguousarray(inv.ravel(), dtype=np.int64), np.arange(uniq.size, dtype=np.int64), int(uniq.size)


def _stack_pass(items, off, cstep, per_request: bool, *, warm: int = 0, distances: bool = False):
    """Run the stack kernel over the lookups ``off``: (distances or None, histogram by distance 0..D, D)."""
    from moeroof.kernels import cache as kernels

    ids, label, d = _labels(items)
    n = ids.size
    out = np.empty(n if distances else 0, dtype=np.int64)
    hist = np.zeros(0 if distances else d + 1, dtype=np.int64)
    kernels.stack_kernel(ids, label, d, int(2 * d + 64), off, cstep, bool(per_request), int(warm), out, hist)
    return (out if distances else None), hist, d


def _one_lookup(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The lookups of a stream without steps: one span (each request then its own lookup)."""
    return np.array([0, n], dtype=np.int64), np.zeros(1, dtype=np.int64)


def stack_distances(items: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """LRU stack distance of every request (Mattson et al. 1970); 0 marks a first reference.

    ``start`` (bool per request, :func:`lookup_starts`): distances are taken as each lookup
    starts, so a request of a lookup does not count the lookup's earlier requests; default
    every request its own lookup.
    """
    from moeroof.kernels import cache as kernels

    items = np.asarray(items)
    if items.size == 0:
        return np.zeros(0, dtype=np.int64)
    if start is None:
        off, cstep = _one_lookup(items.size)
        return _stack_pass(items, off, cstep, True, distances=True)[0]
    start = np.ascontiguousarray(start, dtype=bool)
    if start.shape != items.shape:
        raise ValueError(f"start must have one flag per request, shape {items.shape}, got {start.shape}")
    off = kernels.offsets_from_starts(start)
    return _stack_pass(items, off, np.zeros(off.size - 1, np.int64), False, distances=True)[0]


def lru_hit_counts(requests, *, warmup_steps: int = 0, lookup: str = "layer") -> tuple[np.ndarray, int]:
    """Exact LRU hits at every capacity 0..D (D distinct items) in one pass, as integers: (hits
    of the counted requests at each capacity, the requests counted). :func:`lru_hit_curve`'s
    numbers before the division, for a caller that divides by another count."""
    is_req = isinstance(requests, Requests)
    items = requests.items if is_req else np.asarray(requests)
    if warmup_steps and not is_req:
        raise ValueError("warmup_steps needs a Requests stream (item ids carry no steps)")
    check_lookup(lookup)
    if items.size == 0:
        return np.zeros(1, dtype=np.int64), 0
    off, cstep = requests.lookups() if is_req else _one_lookup(items.size)
    # the histogram of stack distances straight from the kernel: no array as long as the trace
    _, hist, _ = _stack_pass(items, off, cstep, lookup == "request" or not is_req, warm=max(int(warmup_steps), 0))
    n = int(hist.sum())
    hist[0] = 0  # a first reference misses at every capacity
    return np.cumsum(hist), n


def lru_hit_curve(requests, *, warmup_steps: int = 0, lookup: str = "layer") -> tuple[np.ndarray, np.ndarray]:
    """Exact LRU hit rate at every capacity 0..D (D distinct items) in one pass.

    A request hits a cache of C items iff its stack distance is in 1…C (Mattson et al. 1970).
    With ``lookup="layer"`` the distance is taken as the request's (step, layer) lookup starts:
    an LRU cache of C items holds the top C of the stack, so a request hits iff its item is
    among them when its lookup starts — the same hits as :func:`simulate` with that lookup, at
    every capacity. An item-id array carries no steps: each request is its own lookup.
    Global scope, unit sizes. ``requests`` is a :class:`Requests` or an item-id array; with
    ``warmup_steps`` (a :class:`Requests` only) the distances are taken over the whole stream,
    so the warm-up still fills the stack, but only requests of steps ≥ ``warmup_steps`` are
    counted. Returns (capacity_experts int64, hit_rate; NaN when nothing is counted).
    """
    hits, n = lru_hit_counts(requests, warmup_steps=warmup_steps, lookup=lookup)
    cap = np.arange(hits.size, dtype=np.int64)
    return cap, (hits / n if n else np.full(hits.size, np.nan))


def che_hit_curve(item_frequencies, capacities) -> np.ndarray:
    """Che et al. (2002) LRU hit rate for each capacity under the independent reference model.

    ``item_frequencies``: request counts or rates per item (zeros ignored; normalized to λ).
    Solves ``Σ_i (1 − e^{−λ_i T}) = C`` for the characteristic time T (log-space Newton from a
    grid start, vectorized over capacities) and returns ``Σ_i λ_i (1 − e^{−λ_i T})``.
    Capacities ≥ the number of items with λ > 0 hit always (1.0); capacity 0 never.
    """
    f = np.asarray(item_frequencies, dtype=float).ravel()
    if np.any(~np.isfinite(f)) or np.any(f < 0):
        raise ValueError("item frequencies must be finite and >= 0")
    caps = np.asarray(capacities, dtype=float)
    f = f[f > 0]
    if f.size == 0:
        return np.full(caps.shape, np.nan)
    lam_all = f / f.sum()
    lam, mult = np.unique(lam_all, return_counts=True)
    mult = mult.astype(float)
    m = float(lam_all.size)
    flat = caps.ravel()
    res = np.zeros(caps.size)
    res[flat >= m] = 1.0
    inner = np.flatnonzero((flat > 0) & (flat < m))
    if inner.size:

        def occ(t):  # (nC,) → Σ mult (1 − e^{−λ T}), derivative w.r.t. log T, hit rate
            e = np.exp(-np.outer(t, lam))
            fill = (mult * -np.expm1(-np.outer(t, lam))).sum(axis=1)
            dlog = (mult * lam * e).sum(axis=1) * t
            return fill, dlog

        # start: the occupancy on a log grid of T, inverted by interpolation (occupancy ↑ in T)
        lo = np.log(max(flat[inner].min(), 1e-300))  # T ≥ C since 1 − e^{−x} ≤ x
        c_max = flat[inner].max()
        hi = np.log(-np.log1p(-min(c_max / m, 1 - 1e-16)) / lam.min()) + 1.0
        grid = np.linspace(lo, hi, 512)
        g_fill = np.concatenate([occ(np.exp(grid[i : i + 64]))[0] for i in range(0, grid.size, 64)])
        for j0 in range(0, inner.size, 256):
            idx = inner[j0 : j0 + 256]
            c = flat[idx]
            u = np.interp(c, g_fill, grid)
            for _ in range(8):
                fill, dlog = occ(np.exp(u))
                step = (fill - c) / np.maximum(dlog, 1e-300)
                u = np.clip(u - step, lo - 1.0, hi + 1.0)
                if np.max(np.abs(step)) < 1e-12:
                    break
            t = np.exp(u)
            res[idx] = (mult * lam * -np.expm1(-np.outer(t, lam))).sum(axis=1)
    return res.reshape(caps.shape)


def item_hash(items: np.ndarray, seed: int) -> np.ndarray:
    """The SHARDS hash: splitmix64 of (item, seed) → uniform in [0, 1); numpy uint64 arithmetic wraps."""
    z = np.asarray(items).astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (int(seed) + 1)) % 2**64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53)


def shards_hit_curve(requests, rate, *, seed=0, lookup: str = "layer") -> tuple[np.ndarray, np.ndarray]:
    """SHARDS estimate of the LRU hit-rate curve (Waldspurger et al. 2015, fixed rate R).

    Keeps every request of the items with ``hash(item) < R`` (hash uniform on [0, 1), seeded),
    computes exact stack distances d_s of that sub-stream and scales them by 1/R: the hit rate
    at capacity k/R is the share of sampled requests with d_s ≤ k (the share of the actual
    sample: the paper's SHARDS_adj, which takes the share of the expected sample size N·R, was
    not more accurate on MoE-like streams — 20 480 items, Zipf 0.7 per layer — in our checks, and
    nothing used it). Integer capacities in between
    are interpolated linearly (from 0 at capacity 0). Capacities below 1/R are not resolved.
    Returns (capacity_experts 0..⌈D_s/R⌉, hit_rate), D_s the distinct sampled items.
    ``lookup`` as in :func:`lru_hit_curve` (a lookup of the sub-stream is what its sampled
    requests of one (step, layer) form).
    """
    rate = float(rate)
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sample rate must lie in (0, 1], got {rate!r}")
    check_lookup(lookup)
    is_req = isinstance(requests, Requests)
    items = requests.items if is_req else np.asarray(requests)
    table = is_req and (items.size == 0 or (items.min() >= 0 and items.max() < requests.n_items))
    if table:  # the hash of each item id once, then a table look-up per request
        keep = (item_hash(np.arange(requests.n_items), seed) < rate)[items]
    else:
        keep = np.empty(items.size, dtype=bool)
        for i in range(0, items.size, _HASH_CHUNK):  # the hash's uint64 temporaries, chunk by chunk
            keep[i : i + _HASH_CHUNK] = item_hash(items[i : i + _HASH_CHUNK], seed) < rate
    sub = items[keep]
    if sub.size == 0:
        return np.zeros(1, dtype=np.int64), np.full(1, np.nan)
    if is_req:
        from moeroof.kernels import cache as kernels

        off, cstep = requests.lookups()
        off = kernels.subset_offsets(off, keep)
    else:
        off, cstep = _one_lookup(sub.size)
    del keep
    _, hist, d_s = _stack_pass(sub, off, cstep, lookup == "request" or not is_req)
    hist[0] = 0
    points = np.maximum(np.cumsum(hist.astype(float)) / float(sub.size), 0.0)  # hit rate at capacities k/R, k = 0..D_s
    c_max = int(np.ceil(d_s / rate - 1e-9))
    cap = np.arange(c_max + 1, dtype=np.int64)
    est = np.interp(cap, np.arange(d_s + 1) / rate, points)
    return cap, np.clip(est, 0.0, 1.0)
