"""The expert cache a decode step sees: a pinned hot set in closed form, or a simulated policy.

Each rank holds a cache of ``c`` experts per MoE layer (its cache bytes over ``L · e``) and
caches only the experts it owns. Per layer shape ℓ (a row of the routing probabilities π, which
stand for the model's layers in equal shares) and batch B, expert i is touched by the step with
probability ``m_ℓi(B) = 1 − (1 − π_ℓi)^B`` (independent tokens), so the expected union is
``U_ℓ(B) = Σ_i m_ℓi(B)`` (:mod:`moeroof.models.union`). What the cache turns into misses:

- ``static`` — a hot set pinned from the routing probabilities themselves: the ``c`` most
  popular experts of the rank in each layer, never evicted; ``misses = Σ_{i ∉ hot} m_ℓi(B)``
  (fractional c interpolates between whole experts). Pinned from the true probabilities it is an
  **oracle**: it knows the popularity no engine has measured, and it is the upper bound of a
  static cache. This was the only cache of the roofline before the simulator fed it.
- ``lru``, ``lfu``, ``s3fifo``, ``arc``, ``belady`` — :func:`moeroof.cachesim.simulate` run
  in steady state on a trace drawn from π at B streams, with the request order of
  ``moeroof cache`` (per step, per layer, the distinct experts in ascending id), one cache per
  rank of ``c · H`` experts over the H simulated layer shapes (scope ``global``: one cache shared
  by the layers, as engines keep it and as seed 003 measured it; ``layer``: ``c`` per layer).
  The simulated miss ratio multiplies the closed-form union: ``misses = U · (misses / requests)``,
  so the union and the memory term stay exact and smooth in B and only the cache is simulated.
  A fractional cache of c experts per layer interpolates between ⌊c⌋ and ⌊c⌋ + 1, as the hot
  set does.

The trace is drawn by systematic sampling (Madow 1949): per step and layer the experts are put
in a random order and each token takes the K experts whose intervals of length π_i on [0, K)
contain ``u, u + 1, …, u + K − 1`` for its own uniform u. Every token then holds K distinct
experts with inclusion probability exactly π_i — the marginals the closed forms use — for any
order, so tokens are independent given the order and the union's expectation is exact. (A
Plackett–Luce draw would need the weights inverted from π first, which costs seconds per
histogram; the cache sees only which experts each step requests.) At most
:data:`MAX_SIMULATED_LAYERS` layer shapes are simulated (evenly spaced rows).

Steady state: ``W`` warm-up steps are simulated and not counted, W twice the steps after which
the expected distinct experts seen per layer reach 0.9 of those reachable (any cache that
matters has filled), at least 4 and at most :data:`MAX_WARMUP_STEPS`; then at least
:data:`MIN_REQUESTS` requests are counted. The trace depends on (π, B, seed) only, never on the
capacity (common random numbers), so LRU's hit rate is non-decreasing in the cache size. Results are memoised (same π, B, capacity, partition, policy and seed: same
answer, no second simulation), so an interactive redraw does not re-simulate.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from moeroof import cachesim as cache_sim
from moeroof.core.limits import MAX_DRAWN_KEYS, check_allocation
from moeroof.core.results import Result
from moeroof.models.union import power_sums

__all__ = [
    "digest",
    "steady_state_sources",
    "steady_trace",
    "warmup_steps",
    "simulated_layer_rows",
    "simulated_rows",
    "GLOBAL_STAND_IN_LAYERS",
    "order_chunk_steps",
    "simulate_ratios",
    "rank_cache_uncached",
    "POLICIES",
    "SIMULATED",
    "SCOPES",
    "MAX_SIMULATED_LAYERS",
    "MAX_WARMUP_STEPS",
    "MIN_REQUESTS",
    "hot_set_misses",
    "systematic_topk",
    "steady_state_miss_ratio",
    "trace_miss_ratio",
    "live_steps",
    "usable_trace_batch",
    "page_cache_hit_ratio",
    "RankCache",
    "rank_cache",
    "policy_label",
    "clear_memo",
    "memoised",
]

POLICIES = ("lru", "lfu", "lfu-perfect", "s3fifo", "arc", "belady", "belady-insert", "static")
SIMULATED = ("lru", "lfu", "lfu-perfect", "s3fifo", "arc", "belady", "belady-insert")
SCOPES = ("global", "layer")
MAX_SIMULATED_LAYERS = 16
MAX_WARMUP_STEPS = 2000
MIN_REQUESTS = 20_000
MIN_COUNTED_STEPS = 8
#: order keys or token picks drawn at once by :func:`systematic_topk` (about 40 B each at work)
ORDER_CHUNK_ENTRIES = 1 << 22
#: bytes per pick of a drawn trace over a simulation: the int32 trace, its requests (item, step
#: and layer ids), the per-pick keys and multiplicities of :func:`simulate_ratios` and their sort
BYTES_PER_PICK = 48
#: the memos of this process (:func:`memoised`) and how many results each keeps: steady-state
#: results, drawn traces, a trace's requests, a trace's LRU curves, rank caches, the plan's packings
_MEMO_SIZES = {"simulations": 4096, "traces": 4, "requests": 4, "curves": 256, "ranks": 4096, "packings": 256}
_memos: dict[str, OrderedDict] = {name: OrderedDict() for name in _MEMO_SIZES}


def clear_memo() -> None:
    """Forget every memoised simulation and trace in this process, and read the disk memo's
    setting again (``MOEROOF_CACHE_DIR=""`` before this call: a truly cold start)."""
    for memo in _memos.values():
        memo.clear()
    _disk.clear()


_disk: list = []  # the DiskMemo of steady-state results, made on first use


def _disk_memo():
    """Steady-state results on disk (:mod:`moeroof.core.memo`), salted with the simulator's
    own source (this module, the cache model and its kernels) and numpy's version, which draws
    the traces: any edit or upgrade misses rather than serving an old number."""
    if not _disk:
        from moeroof.core.memo import DiskMemo, source_salt

        _disk.append(DiskMemo("steady-state", source_salt(steady_state_sources(), np.__version__)))
    return _disk[0]


def steady_state_sources() -> list:
    """The files the steady-state memo is salted with: this module, the cache simulator, and the
    kernels with every C source (read as files: importing would load the library)."""
    from moeroof.core.memo import source_files

    return source_files(["models/expert_cache.py", "cachesim/", "kernels/"])


def memoised(key: tuple, compute, name: str = "simulations", *, disk: bool = False):
    """``compute()`` once per key, kept in the memo ``name`` as an LRU of its size
    (:data:`_MEMO_SIZES`); with ``disk`` also on disk between runs (a tuple of floats)."""
    memo = _memos[name]
    if key in memo:
        memo.move_to_end(key)
        return memo[key]
    stored = _disk_memo().get(key) if disk else None
    if isinstance(stored, list) and all(isinstance(x, (int, float)) for x in stored):
        out = tuple(float(x) for x in stored)
    else:
        out = compute()
        if disk:
            _disk_memo().put(key, [float(x) for x in out])
    memo[key] = out
    if len(memo) > _MEMO_SIZES[name]:
        memo.popitem(last=False)
    return out


def policy_label(policy: str) -> str:
    """How a policy is named in reports: the static set says it is pinned from the truth."""
    return _LABELS.get(policy, f"{policy} (simulated, steady state)")


_LABELS = {
    "static": "pinned hot set (oracle: pinned from the true routing probabilities)",
    "belady": "belady (offline optimum, simulated)",
    "belady-insert": "belady-insert (offline, caches every miss, simulated)",
}


def hot_set_misses(pi: np.ndarray, cache_experts, batch) -> tuple[np.ndarray, np.ndarray]:
    """Union and misses per layer shape for a static hot set of ``cache_experts`` per layer.

    ``pi`` (H, E); ``cache_experts`` (nB,) possibly fractional (linear between whole experts);
    ``batch`` (nB,). Returns (U (H, nB), misses (H, nB)) with ``misses = Σ_{rank ≥ c} m(B)``.
    The power sums go through :func:`moeroof.models.union.power_sums`, grouped by cache size.
    """
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    b = np.atleast_1d(np.asarray(batch))
    h, e = pi.shape
    x = 1.0 - (-np.sort(-pi, axis=1))  # hottest expert first
    union = e - power_sums(x, b)
    c = np.broadcast_to(np.clip(np.asarray(cache_experts, dtype=float), 0.0, e), b.shape)
    lo = np.floor(c).astype(int)
    frac = c - lo

    def misses_from(start: np.ndarray) -> np.ndarray:
        out = np.zeros((h, b.size))
        for s in np.unique(start[start < e]):
            sel = start == s
            out[:, sel] = (e - s) - power_sums(x[:, s:], b[sel])
        return out

    misses = misses_from(lo)
    if np.any(frac > 0):
        misses = (1 - frac) * misses + frac * misses_from(np.minimum(lo + 1, e))
    return union, misses


def order_chunk_steps(steps: int, streams: int, h: int, e: int, k: int) -> int:
    """Steps drawn at once: at most :data:`ORDER_CHUNK_ENTRIES` order keys and token picks per
    chunk (at least one step), so the working memory of a draw is bounded whatever its length."""
    per_step = max(h * e, streams * h * k, 1)
    return max(1, min(steps, ORDER_CHUNK_ENTRIES // per_step))


def systematic_topk(pi: np.ndarray, steps: int, streams: int, rng: np.random.Generator) -> np.ndarray:
    """A trace (steps, streams, H, K) whose tokens include expert i with probability π_i exactly.

    Systematic sampling (Madow 1949) in a random expert order per (step, layer) (module
    docstring). ``pi`` (H, E) with rows summing to an integer K and entries in [0, 1].

    Bounded before anything is drawn (the allocation limits of :mod:`moeroof.core.limits`): the random orders are ``steps · H · E`` keys to
    sort — at most :data:`moeroof.core.limits.MAX_DRAWN_KEYS` (about 10 s) — and the trace with
    its per-pick working arrays (:data:`BYTES_PER_PICK` per pick) must fit in the available
    memory; else a :class:`ValueError` naming the sizes. The draw runs
    in chunks of steps (:func:`order_chunk_steps`); with a PCG64 generator the token uniforms
    come from a copy advanced past every order key, so the chunks consume the stream exactly as
    one draw of all keys then all uniforms would — the trace is the same, byte for byte, at any
    chunk size — and ``rng`` ends where that draw leaves it.
    """
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    h, e = pi.shape
    k = int(round(float(pi[0].sum())))
    if k < 1 or np.any(pi < 0) or np.any(pi > 1 + 1e-9) or not np.allclose(pi.sum(axis=1), k, atol=0.05):
        raise ValueError("pi rows must lie in [0, 1] and sum to the same integer K >= 1")
    steps, streams = int(steps), int(streams)
    keys = steps * h * e  # Python ints: no overflow
    if keys > MAX_DRAWN_KEYS:
        raise ValueError(
            f"simulating the cache would draw {steps} steps × {h} layer shapes × {e} experts = "
            f"{keys:.3g} random-order keys, more than the {MAX_DRAWN_KEYS:.3g} allowed (about 10 s of "
            "sorting); use the pinned hot set (policy static), which is in closed form, or fewer experts",
        )
    # the callers name no flag: the batch, the model's sizes or a POINTS row may be what is too big
    check_allocation(steps * streams * h * k, BYTES_PER_PICK, "a drawn cache trace's steps × batch × layers × K")
    from moeroof.kernels import plan as plan_kernels  # ctypes and the C kernels load only when a trace is drawn

    pi_c = np.ascontiguousarray(pi)
    chunk = order_chunk_steps(steps, streams, h, e, k)
    check_allocation(chunk * max(h * e, streams * h * k), 48, "one chunk of a drawn cache trace")
    bg = rng.bit_generator
    if isinstance(bg, np.random.PCG64):
        u_bg = np.random.PCG64()
        u_bg.state = bg.state
        u_bg.advance(keys)  # one 64-bit output per double: past every order key
        u_rng = np.random.Generator(u_bg)
    else:  # no way to skip ahead: one chunk, the order keys first (as the chunked draw consumes them)
        chunk, u_rng = steps, rng
    out = np.empty((steps, streams, h, k), dtype=np.int32)
    for s0 in range(0, steps, chunk):
        n = min(chunk, steps - s0)
        order = np.argsort(rng.random((n, h, e)), axis=-1)
        # π in each row's order, summed, scaled to K and offset by the global row (step · H +
        # layer) × (K + 1), as one draw of the whole trace adds them: the same floating-point
        # sums, hence the same picks (compiled: the numpy expressions in its docstring)
        flat = plan_kernels.systematic_flat(pi_c, order, s0 * h, k)
        u = u_rng.random((n, streams, h, 1))
        # each point (u + j) + row·(K + 1) searched in flat (side right), relative to its row,
        # clamped to E − 1, names an expert of the row's order: compiled, the same numbers
        out[s0 : s0 + n] = plan_kernels.systematic_picks(flat, u[..., 0], order, s0 * h, k)
    if u_rng is not rng:
        bg.state = u_bg.state
    return out


def digest(*arrays: np.ndarray) -> str:
    """An exact key of arrays: BLAKE2b over each one's dtype, shape and bytes (the memo keys)."""
    hsh = hashlib.blake2b(digest_size=16)
    for a in arrays:
        a = np.ascontiguousarray(a)
        hsh.update(str((a.dtype.str, a.shape)).encode())
        hsh.update(a.tobytes())
    return hsh.hexdigest()


def steady_trace(sub: np.ndarray, own: np.ndarray, batch: int, seed: int) -> tuple[np.ndarray, int]:
    """The drawn trace of a steady-state simulation and its warm-up (module docstring): one trace
    per (π, B, seed) whatever the capacity (common random numbers: LRU's inclusion property then
    makes its hit rate non-decreasing in the cache size), the warm-up long enough to fill the
    largest cache that matters, then at least :data:`MIN_REQUESTS` counted requests."""
    q = 1.0 - (1.0 - sub[:, own]) ** batch
    warm = warmup_steps(sub[:, own], batch)
    per_step = max(float(np.mean(q.sum(axis=1))) * sub.shape[0], 1e-9)
    steps = warm + int(min(500, max(MIN_COUNTED_STEPS, math.ceil(MIN_REQUESTS / per_step))))

    def draw() -> np.ndarray:  # kept for the next capacity or rank (read only)
        topk = systematic_topk(sub, steps, batch, np.random.default_rng([seed, batch, steps]))
        topk.setflags(write=False)
        return topk

    return memoised((digest(sub), batch, steps, seed), draw, "traces"), warm


def warmup_steps(pi: np.ndarray, batch: int) -> int:
    """The warm-up of a steady-state simulation at ``batch`` streams on layers of inclusion
    probabilities ``pi`` (module docstring): twice the steps after which the expected distinct
    experts seen per layer reach 0.9 of those reachable, at least 4, at most
    :data:`MAX_WARMUP_STEPS`."""
    q = 1.0 - (1.0 - np.clip(np.asarray(pi, dtype=float), 0.0, 1.0)) ** int(batch)
    reachable = float(np.mean(np.sum(q > 1e-12, axis=1)))
    return int(min(MAX_WARMUP_STEPS, max(4, 2 * _fill_steps(q, 0.9 * reachable))))


#: layers a global cache is simulated over where π has one row standing for every layer (a
#: ``uniform`` or ``zipf:S`` routing); a plan's sampled traces hold as many
#: (:data:`moeroof.models.local_routing.TRACE_LAYERS` is this), so that independent tokens are the
#: stickiness-0 limit of those traces
GLOBAL_STAND_IN_LAYERS = 8


def simulated_rows(pi: np.ndarray, scope: str) -> np.ndarray:
    """The rows of π a steady-state simulation runs on: :func:`simulated_layer_rows`' rows, and
    for a global cache on a π of one row, that row for :data:`GLOBAL_STAND_IN_LAYERS` layers.
    One global cache spans the model's layers, which a token visits in order: below one token's
    picks over them it misses every time (cyclic; mlx-lm#1438 measured 0 % at 10 GB), which one
    layer alone, holding the cache's share per layer, does not show."""
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    if scope == "global" and pi.shape[0] == 1:
        return np.repeat(pi, GLOBAL_STAND_IN_LAYERS, axis=0)
    return pi[simulated_layer_rows(pi.shape[0])]


def simulated_layer_rows(h: int) -> np.ndarray:
    """The layers (rows of π) a steady-state simulation draws: all of them up to
    :data:`MAX_SIMULATED_LAYERS`, else that many spread evenly."""
    if h <= MAX_SIMULATED_LAYERS:
        return np.arange(h)
    return np.unique(np.round(np.linspace(0, h - 1, MAX_SIMULATED_LAYERS)).astype(int))


def _fill_steps(q: np.ndarray, target: float) -> int:
    """Smallest n with ``mean_ℓ Σ_i [1 − (1 − q_ℓi)^n] ≥ target`` (doubling, then bisection)."""

    def seen(n: int) -> float:
        return float(np.mean(np.sum(1.0 - (1.0 - q) ** n, axis=1)))

    if target <= 0:
        return 1
    hi = 1
    while seen(hi) < target:
        hi *= 2
        if hi >= MAX_WARMUP_STEPS:
            return MAX_WARMUP_STEPS
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if seen(mid) < target else (lo, mid)
    return hi


def simulate_ratios(
    topk: np.ndarray,
    experts: int,
    own: np.ndarray,
    assignment: np.ndarray | None,
    rank: int,
    c: float,
    policy: str,
    scope: str,
    warm: int,
    pinned: np.ndarray | None = None,
    counted_steps: np.ndarray | None = None,
    requests: tuple[cache_sim.Requests, np.ndarray] | None = None,
) -> tuple[float, float, float]:
    """Simulate one rank's cache on ``topk`` (steps, streams, H, K), counted after ``warm`` steps:
    (misses per request, token misses per request, distinct requests per layer and step). The OS
    page cache beside it is :func:`page_cache_hit_counts`' (every size at once). ``static`` pins
    ``pinned`` (a popularity over the H·E items) per layer.
    ``counted_steps`` (bool per step) narrows the counted steps further: a user's trace counts only
    the steps where all its streams are live, so a finished stream's padding does not dilute the
    union or the miss ratios. ``requests``: :func:`trace_requests` of these arguments, where the
    caller keeps it for the trace's other capacities."""
    h = topk.shape[2]
    req, counted, mult = _counted_requests(topk, experts, own, assignment, rank, warm, counted_steps, requests)
    hit = _expert_cache_hits(req, h, c, policy, scope, warm, pinned)[counted]
    n = hit.size
    req_ratio = float(1.0 - hit.mean()) if n else 0.0
    token_ratio = float(mult[~hit].sum() / n) if n else 0.0
    return req_ratio, token_ratio, _distinct_per_layer_step(topk.shape[0], h, n, warm, counted_steps)


def _expert_cache_hits(
    req: cache_sim.Requests, h: int, c: float, policy: str, scope: str, warm: int, pinned: np.ndarray | None
) -> np.ndarray:
    """Whether each request hits the expert cache of ``c`` experts per layer (bool per request)."""
    capacity = math.floor(c) * h  # scope "layer" splits it back into c per layer
    static = policy == "static"  # a hot set pinned per layer; else the policy, warmed up
    how: dict[str, Any] = dict(scope="layer", pinned=pinned) if static else dict(scope=scope, warmup_steps=warm)
    res = cache_sim.simulate(req, capacity, policy=policy, return_hits=True, **how)
    assert res.request_hits is not None  # asked for (return_hits)
    return np.asarray(res.request_hits)


def page_cache_hit_counts(req: cache_sim.Requests, hits: np.ndarray, warm: int) -> np.ndarray:
    """The OS page cache's hits counted after ``warm`` steps at every capacity 0 … D items (D the
    distinct items it sees; larger capacities hit as D): an LRU over all layers fed the requests
    the expert cache missed (``~hits``, bool per request of ``req``).

    One stack-distance pass serves every capacity (:func:`moeroof.cachesim.lru_hit_counts`, the
    lookup of a (step, layer)): the same hits as simulating each capacity (Mattson et al. 1970)."""
    miss = ~np.asarray(hits, dtype=bool)
    below = cache_sim.Requests(req.items[miss], req.step[miss], req.layer[miss], req.steps, req.layers, req.experts)
    return cache_sim.lru_hit_counts(below, warmup_steps=warm)[0]


def _counted(step: np.ndarray, warm: int, counted_steps: np.ndarray | None) -> np.ndarray:
    """Whether each of the steps ``step`` (ids) is counted: from ``warm`` on, and only on
    ``counted_steps`` where given."""
    counted = step >= warm
    if counted_steps is not None:
        counted &= np.asarray(counted_steps, dtype=bool)[step]
    return counted


def _counted_requests(
    topk: np.ndarray, experts: int, own: np.ndarray, assignment, rank: int, warm: int, counted_steps, requests
) -> tuple[cache_sim.Requests, np.ndarray, np.ndarray]:
    """The rank's requests of ``topk`` (``requests`` where the caller keeps them, else
    :func:`trace_requests`), which of them are counted (:func:`_counted`) and the tokens of those."""
    part = None if assignment is None else np.asarray(assignment, dtype=np.int64)
    req, mult = trace_requests(topk, experts, own, part, rank) if requests is None else requests
    counted = _counted(req.step, warm, counted_steps)
    return req, counted, mult[counted]


def _distinct_per_layer_step(steps: int, layers: int, n: int, warm: int, counted_steps: np.ndarray | None) -> float:
    """The ``n`` counted requests per counted step and layer (the measured union of the rank)."""
    return float(n / (max(int(_counted(np.arange(steps), warm, counted_steps).sum()), 1) * layers))


def trace_requests(
    topk: np.ndarray, experts: int, own: np.ndarray, partition: np.ndarray | None, rank: int
) -> tuple[cache_sim.Requests, np.ndarray]:
    """One rank's requests of ``topk`` (:func:`moeroof.cachesim.requests_from_trace`) and the
    tokens per request: how many of the step's tokens routed to the (layer, expert), counted in
    (step, layer, expert) order — request order, so the counts line up with the requests. The
    same at every capacity of the trace."""
    from moeroof.kernels import plan as plan_kernels  # ctypes and the C kernels load only when a cache is simulated

    req = cache_sim.requests_from_trace(
        topk, int(experts), partition=partition, rank=None if partition is None else rank
    )
    return req, plan_kernels.pick_counts(np.ascontiguousarray(topk), np.asarray(own, dtype=bool))


@dataclass(frozen=True)
class _Source:
    """What one rank's cache is simulated on (:func:`_simulation_source`)."""

    name: tuple  # the trace in the memo keys: ("drawn", digest(sub), seed) or ("trace", trace_key)
    #: (*trace, batch, digest of the rank's experts, its assignment and rank or None): the memo keys'
    #: part that is the same at every capacity
    ident: tuple
    own: np.ndarray  # bool (E,): the rank's experts
    draw: Callable[[], tuple[np.ndarray, int, Callable[[], tuple[cache_sim.Requests, np.ndarray]]]]


def _simulation_source(experts, batch, assignment, rank, sub, seed=0, trace=None, trace_key=None, warm=0) -> _Source:
    """The source of a simulation of rank ``rank``'s cache (``assignment`` None: one rank owns
    all) at ``batch`` streams: a steady trace drawn from the π rows ``sub`` by ``seed``
    (:func:`steady_trace`), or the user's ``trace`` (its first ``batch`` streams on its simulated
    layers, warmed over ``warm`` steps), with the memo keys' parts that name it. Its ``draw()``
    gives the trace (steps, B, H, K), the warm-up and its requests (:func:`trace_requests`, memoised
    by ``ident``: a user's trace by its key alone) when called."""
    own = np.ones(int(experts), dtype=bool) if assignment is None else np.asarray(assignment) == rank
    part = None if assignment is None else np.asarray(assignment, dtype=np.int64)
    name = ("drawn", digest(sub), int(seed)) if trace is None else ("trace", str(trace_key))
    owner = None if part is None else (digest(part), int(rank))
    ident = (*(name if trace is None else name[1:]), int(batch), digest(own.astype(np.int8)), owner)

    def draw() -> tuple[np.ndarray, int, partial]:
        if trace is None:
            topk, w = steady_trace(sub, own, int(batch), int(seed))
        else:
            topk, w = np.asarray(trace[:, :batch][:, :, simulated_layer_rows(trace.shape[2])]), warm
        make = partial(trace_requests, topk, experts, own, part, rank)
        return topk, w, partial(memoised, ("requests", *ident), make, "requests")

    return _Source(name, ident, own, draw)


def page_cache_hit_ratio(
    pi: np.ndarray,
    batch: int,
    cache_experts_per_layer: float,
    page_cache_experts_per_layer: float,
    *,
    policy: str = "lru",
    scope: str = "global",
    assignment: np.ndarray | None = None,
    rank: int = 0,
    seed: int = 0,
    trace: np.ndarray | None = None,
    trace_key: str | None = None,
) -> float:
    """Reads served by the OS page cache per distinct request, in the same steady state as
    :func:`steady_state_miss_ratio` (or on the user's ``trace``), memoised.

    The page cache holds what RAM leaves after the resident band, the KV cache, the expert cache
    and the OS reserve; it sees only the expert cache's misses (an expert the engine holds is
    not re-read, so its pages age out of the page cache), and it is taken as one LRU over the
    layers (the kernel's active/inactive lists are an LRU approximation). With a pinned hot set
    (``static``) the expert cache holds each layer's ``c`` most popular experts of π."""
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    # the user's trace where it has the B streams, warmed over the first half of its steps
    user = (trace, trace_key, max(1, len(trace) // 2)) if trace is not None and batch <= trace.shape[1] else ()
    sub = pi[simulated_layer_rows(pi.shape[0])] if user else simulated_rows(pi, scope)
    src = _simulation_source(pi.shape[1], batch, assignment, rank, sub, seed, *user)
    c = float(math.floor(max(cache_experts_per_layer, 0.0)))
    page = float(math.floor(max(page_cache_experts_per_layer, 0.0)))
    if not src.own.any() or batch < 1 or page < 1 or c >= src.own.sum():
        return 0.0

    def curve() -> tuple[np.ndarray, int, int]:
        # every page-cache size from one pass over the expert cache's misses (page_cache_hit_counts):
        # a fit moves the page cache's share, not the expert cache, so one simulation serves them all
        topk, warm, requests = src.draw()
        pinned = None
        if policy == "static" and sub.shape[0] == topk.shape[2]:
            pinned = np.where(src.own[None, :], sub, -1.0).ravel()
        req, _ = requests()  # the same at every cache size, kept where trace_miss_ratio keeps them
        hits = _expert_cache_hits(req, topk.shape[2], c, policy, scope, warm, pinned)
        return page_cache_hit_counts(req, hits, warm), int(np.count_nonzero(req.step >= warm)), topk.shape[2]

    key = ("page", src.name, int(batch), int(c), policy, scope, src.ident[-2])
    counts, n, h = memoised(key, curve, "curves")
    # the hits at page · h items, h the layers simulated (page_cache_hit_counts: larger capacities hit as its last)
    return float(int(counts[min(int(page) * h, counts.size - 1)]) / n) if n else 0.0


MIN_LIVE_STEPS = 2


def live_steps(trace: np.ndarray, batch: int) -> np.ndarray:
    """Bool per step: the trace's first ``batch`` streams all route a token there (no −1 in any
    of their slots, in any layer). A capture pads a finished stream with −1; a step where one of
    the B streams is done is a step of fewer than B agents."""
    sub = np.asarray(trace[:, :batch])
    return np.asarray((sub >= 0).reshape(sub.shape[0], -1).all(axis=1))


def usable_trace_batch(trace: np.ndarray, batch: int) -> bool:
    """Whether :func:`trace_miss_ratio` can run at ``batch``: the trace has that many streams and at
    least :data:`MIN_LIVE_STEPS` steps where they are all live."""
    return 1 <= batch <= trace.shape[1] and int(live_steps(trace, batch).sum()) >= MIN_LIVE_STEPS


def trace_miss_ratio(
    trace: np.ndarray,
    trace_key: str,
    batch: int,
    cache_experts_per_layer: float,
    *,
    experts: int,
    policy: str = "lru",
    scope: str = "global",
    assignment: np.ndarray | None = None,
    rank: int = 0,
) -> tuple[float, float, float]:
    """A simulated policy on the user's own trace (its first ``batch`` streams), memoised by
    ``trace_key``: ``(misses, token misses)`` per distinct request and the distinct requests per
    layer and step (the measured union of the rank). Counted over the steps where all ``batch``
    streams are live (:func:`live_steps`: a finished stream pads with −1 and would dilute the
    union), the second half of them, after every step before warmed the cache. The trace's own
    correlations (shared context, stickiness) stay in; at most :data:`MAX_SIMULATED_LAYERS` layers
    (evenly spaced) are used."""
    if policy not in SIMULATED:
        raise ValueError(f"policy must be one of {', '.join(SIMULATED)}, got {policy!r}")
    streams = trace.shape[1]
    if not 1 <= batch <= streams:
        raise ValueError(f"batch {batch} outside the trace's 1..{streams} streams")
    full = live_steps(trace, batch)
    idx = np.flatnonzero(full)
    if idx.size < MIN_LIVE_STEPS:
        raise ValueError(
            f"the trace has {idx.size} steps with its first {batch} streams all live; "
            f"at least {MIN_LIVE_STEPS} are needed to simulate a cache at that batch"
        )
    warm = int(idx[idx.size // 2])
    src = _simulation_source(experts, batch, assignment, rank, None, 0, trace, trace_key, warm)
    c = float(math.floor(cache_experts_per_layer))
    key = (*src.name, int(batch), int(c), policy, scope, src.ident[-2])
    n_own = int(src.own.sum())

    if policy == "lru" and scope == "global" and 1 <= c <= n_own - 1:
        # every capacity from one stack-distance pass (the same floats as one simulation each)
        def curve() -> tuple[tuple[float, ...], float]:
            topk, _, requests = src.draw()
            req = requests()
            ratios = lru_ratio_curve(
                topk, experts, src.own, assignment, rank, warm, n_own - 1, counted_steps=full, requests=req
            )
            n = int(_counted(req[0].step, warm, full).sum())
            return ratios, _distinct_per_layer_step(topk.shape[0], topk.shape[2], n, warm, full)

        ratios, distinct = memoised(("trace-lru-curve", *src.ident, warm), curve, "curves")
        i = int(c) - 1
        return memoised(key, lambda: (ratios[i], ratios[n_own - 1 + i], distinct))

    def compute() -> tuple[float, float, float]:
        topk, _, requests = src.draw()
        args = (topk, experts, src.own, assignment, rank, c, policy, scope, warm)
        return simulate_ratios(*args, counted_steps=full, requests=requests())

    return memoised(key, compute)


def steady_state_miss_ratio(
    pi: np.ndarray,
    batch: int,
    cache_experts_per_layer: float,
    *,
    policy: str = "lru",
    scope: str = "global",
    assignment: np.ndarray | None = None,
    rank: int = 0,
    seed: int = 0,
) -> tuple[float, float]:
    """Misses per request of a simulated policy in steady state (module docstring), memoised.

    ``pi`` (H, E) the full routing probabilities; ``assignment`` (E,) ranks of the experts (None:
    one rank owns all); the cache holds ``cache_experts_per_layer`` of the rank's experts per
    layer. Returns ``(misses, token misses)`` per distinct request: the share of the step's
    distinct requests that miss, and the tokens' picks that land on a missed expert per distinct
    request (≥ the first: an uncoalesced engine streams a missed expert once per token that
    routes to it). Both multiply the closed-form union.
    """
    if policy not in SIMULATED:
        raise ValueError(f"policy must be one of {', '.join(SIMULATED)}, got {policy!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be 'global' or 'layer', got {scope!r}")
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    e = pi.shape[1]
    sub = simulated_rows(pi, scope)
    src = _simulation_source(e, batch, assignment, rank, sub, seed)
    own, n_own = src.own, int(src.own.sum())
    c = float(cache_experts_per_layer)
    if n_own == 0 or batch < 1 or c >= n_own:
        return 0.0, 0.0  # nothing to cache, or every owned expert fits: after the cold start nothing misses
    if c < 1.0:
        return 1.0, 1.0
    c = float(math.floor(c))  # whole experts: the memo key, the warm-up and the trace's seed agree
    key = (digest(sub, own.astype(np.int8)), int(batch), int(c), policy, scope, int(seed))

    if policy == "lru" and scope == "global":
        # every whole cache c = 1 … n_own − 1 of the rank from one stack-distance pass on the
        # steady-state trace, which does not depend on c: memoised (in memory and on disk) as one
        # curve, the misses first, then the token misses
        def curve() -> tuple[float, ...]:
            topk, warm, _ = src.draw()
            return lru_ratio_curve(topk, e, own, assignment, rank, warm, n_own - 1)

        ratios = memoised(("lru-curve", key[0], int(batch), int(seed)), curve, disk=True)
        i = int(c) - 1
        return ratios[i], ratios[n_own - 1 + i]

    def compute() -> tuple[float, float]:
        topk, warm, _ = src.draw()
        return simulate_ratios(topk, e, own, assignment, rank, c, policy, scope, warm)[:2]

    return memoised(key, compute, disk=True)


def lru_ratio_curve(
    topk: np.ndarray,
    experts: int,
    own: np.ndarray,
    assignment: np.ndarray | None,
    rank: int,
    warm: int,
    max_c: int,
    *,
    counted_steps: np.ndarray | None = None,
    requests: tuple[cache_sim.Requests, np.ndarray] | None = None,
) -> tuple[float, ...]:
    """:func:`simulate_ratios`' first two numbers for ``policy="lru", scope="global"`` at every
    cache c = 1 … ``max_c`` experts per layer at once (the ``max_c`` miss ratios, then the
    ``max_c`` token-miss ratios), the same floats.

    A request hits an LRU cache of C items iff its stack distance, taken as its (step, layer)
    lookup starts, is in 1 … C (Mattson et al. 1970; :func:`moeroof.cachesim.lru_hit_curve`),
    so with the cache of ``c · H`` items the counted hits are the counted requests of distance
    1 … c·H: integer counts, divided by the requests counted as :func:`simulate_ratios` divides
    them (``1 − hits / n`` and ``missed picks / n``, each a correctly rounded quotient).
    ``counted_steps`` and ``requests`` as for :func:`simulate_ratios`."""
    h = topk.shape[2]
    req, counted, mult = _counted_requests(topk, experts, own, assignment, rank, warm, counted_steps, requests)
    d = cache_sim.stack_distances(req.items, cache_sim.lookup_starts(req, "layer"))[counted]
    n = int(d.size)
    if n == 0:
        return (0.0,) * (2 * max_c)
    caps = np.arange(1, max_c + 1, dtype=np.int64) * h
    size = max(int(d.max()), int(caps[-1])) + 1
    # hits at capacity C: requests of distance 1 … C (distance 0 is a first reference, a miss)
    count = np.bincount(d, minlength=size).astype(np.int64)
    # integer sums as floats below 2^53 (a trace's picks are far fewer): exact
    picks = np.bincount(d, weights=mult, minlength=size).astype(np.int64)
    count[0] = picks[0] = 0
    hits = np.cumsum(count)[caps]
    hit_picks = np.cumsum(picks)[caps]
    total_picks = int(mult.astype(np.int64).sum())
    req_ratio = [float(1.0 - int(x) / n) for x in hits]
    token_ratio = [float((total_picks - int(x)) / n) for x in hit_picks]
    return tuple(req_ratio + token_ratio)


@dataclass(frozen=True)
class RankCache(Result):
    """Per rank and batch size (R, nB): expected union and misses per layer shape (mean over
    the rows of π), and the hit rate ``1 − misses / union``. For the pinned hot set the token
    misses are ``B · Σ_{i ∉ hot} π_i`` (= B × the misses of one token); for a simulated policy
    the union times the simulated picks on missed experts per distinct request, in the same
    steady state (so token misses ≥ misses, as for the hot set)."""

    union_per_layer: np.ndarray
    misses_per_layer: np.ndarray
    picks_per_token: np.ndarray  # (R,): expected routed picks per token on the rank, K_r
    #: (R, nB): picks per layer that land on a missed expert, summed over the B tokens — what an
    #: uncoalesced engine streams (a missed expert once per token that routes to it)
    token_misses_per_layer: np.ndarray
    policy: str
    scope: str
    #: (R, nB): of the misses, the reads the OS page cache serves (0 without a page cache)
    page_hits_per_layer: np.ndarray

    @property
    def hit_rate(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.union_per_layer > 0, 1.0 - self.misses_per_layer / self.union_per_layer, 1.0)


def rank_cache(
    pi: np.ndarray,
    batch,
    cache_experts_per_layer,
    assignment: np.ndarray,
    *,
    policy: str = "lru",
    scope: str = "global",
    seed: int = 0,
    trace: np.ndarray | None = None,
    trace_key: str | None = None,
    page_cache_experts_per_layer=None,
) -> RankCache:
    """Union and misses of every rank at every batch size (module docstring).

    ``cache_experts_per_layer`` (nB,) or scalar: each rank's cache in experts per layer (the same
    on every rank: identical boxes); ``assignment`` (E,) rank of each expert. ``trace`` (steps,
    streams, H, K) with a ``trace_key``: a simulated policy runs on the user's own trace (its first
    B streams; :func:`trace_miss_ratio`) wherever B fits in it, and the union is the one measured
    there; beyond, traces are drawn from π. ``page_cache_experts_per_layer`` (nB,) or scalar:
    the OS page cache beside the expert cache (:func:`page_cache_hit_ratio`), whose hits
    come back as ``page_hits_per_layer``.

    Memoised exactly: the same inputs (π, B, cache, assignment and page cache by an exact
    digest of their bytes; policy, scope, seed and the trace's key) give the stored result, as
    fresh arrays. A fit evaluates the plan hundreds of times at knobs that move only the
    hardware's speeds, so the cache — which does not depend on them — repeats.
    """
    if policy not in POLICIES:
        raise ValueError(f"cache policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    b = np.atleast_1d(np.asarray(batch, dtype=np.int64))
    a = np.asarray(assignment, dtype=np.int64)

    def per_batch(x) -> np.ndarray:
        return np.broadcast_to(np.asarray(x, dtype=float), b.shape)

    c = per_batch(cache_experts_per_layer)
    pg = None if page_cache_experts_per_layer is None else per_batch(page_cache_experts_per_layer)
    compute = partial(rank_cache_uncached, pi, b, c, a, policy, scope, seed, trace, trace_key, pg)
    if trace is not None and trace_key is None:  # a trace with no name: nothing to key it by
        return compute()
    inputs = digest(pi, b, c, a, np.zeros(0) if pg is None else pg)
    key = (inputs, pg is None, policy, scope, int(seed), None if trace is None else str(trace_key))
    out = memoised(key, compute, "ranks")
    return replace(out, **{k: v.copy() for k, v in vars(out).items() if isinstance(v, np.ndarray)})


def rank_cache_uncached(pi: np.ndarray, b, c, a, policy: str, scope: str, seed: int, trace, trace_key, pg) -> RankCache:
    """:func:`rank_cache` itself, on its normalised inputs (``c`` and ``pg`` broadcast to B)."""
    ranks = int(a.max()) + 1
    union, misses, token_misses, page_hits = np.zeros((4, ranks, b.size))
    picks = np.zeros(ranks)
    # which B run on the user's trace: one scan of its streams per B, not one per rank
    on_trace = [trace is not None and policy != "static" and usable_trace_batch(trace, int(bb)) for bb in b]
    for r in range(ranks):
        idx = np.flatnonzero(a == r)
        if idx.size == 0:
            continue
        picks[r] = float(pi[:, idx].sum(axis=1).mean())
        c_r = np.minimum(c, idx.size)
        u, m = hot_set_misses(pi[:, idx], c_r, b)
        union[r] = u.mean(axis=0)
        if policy == "static":
            misses[r] = m.mean(axis=0)
            token_misses[r] = b * hot_set_misses(pi[:, idx], c_r, np.ones_like(b))[1].mean(axis=0)
        else:
            for j, (bb, cc) in enumerate(zip(b, c_r)):
                if on_trace[j]:
                    assert trace is not None  # on_trace is False without one
                    kw = dict(experts=pi.shape[1], policy=policy, scope=scope, assignment=a, rank=r)
                    req, tok, u_trace = trace_miss_ratio(trace, str(trace_key), int(bb), float(cc), **kw)
                    union[r, j] = u_trace
                    misses[r, j], token_misses[r, j] = u_trace * req, u_trace * tok
                elif cc < 1.0:  # no whole expert fits: every pick misses
                    misses[r, j], token_misses[r, j] = union[r, j], bb * picks[r]
                elif cc < idx.size:
                    req, tok = _whole_experts_miss_ratio(pi, int(bb), float(cc), policy, scope, a, r, seed)
                    misses[r, j], token_misses[r, j] = union[r, j] * req, union[r, j] * tok
        # the misses the OS page cache of pg experts per layer serves (page_cache_hit_ratio), at most the misses
        kw = dict(policy=policy, scope=scope, assignment=a, rank=r, seed=seed, trace=trace, trace_key=trace_key)
        for j, (bb, cc, pp) in enumerate(zip(b, c_r, () if pg is None else pg)):
            if pp >= 1.0 and misses[r, j] > 0:
                ratio = page_cache_hit_ratio(pi, int(bb), float(cc), float(pp), **kw)
                page_hits[r, j] = min(union[r, j] * ratio, misses[r, j])
    return RankCache(union, misses, picks, token_misses, policy, scope, page_hits)


def _whole_experts_miss_ratio(
    pi: np.ndarray, b: int, cache: float, policy: str, scope: str, a: np.ndarray, rank: int, seed: int
) -> tuple[float, float]:
    """:func:`steady_state_miss_ratio` (per request, per token) of rank ``rank``'s cache of
    ``cache`` experts per layer: at whole experts, interpolated linearly between the two whole
    sizes around a fractional one (as the hot set's fractional cache is)."""
    lo = math.floor(cache)
    frac = cache - lo
    kw: dict[str, Any] = dict(policy=policy, scope=scope, assignment=a, rank=rank, seed=seed)
    req, tok = steady_state_miss_ratio(pi, b, float(lo), **kw)
    if frac > 0:
        req_hi, tok_hi = steady_state_miss_ratio(pi, b, float(lo + 1), **kw)
        req, tok = (1 - frac) * req + frac * req_hi, (1 - frac) * tok + frac * tok_hi
    return req, tok
