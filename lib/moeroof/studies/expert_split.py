"""Analyses of seed 003's expert split for the ``expert_split`` notebook (partitions: docs/models.md).

Four questions about splitting GLM-5's 288 routed experts over two GB10 nodes, each answered by
one function built on :mod:`moeroof.models.partition`, :mod:`moeroof.cachesim` and :mod:`moeroof.studies.ladder`:

- :func:`relabel_imbalance` — how much of the id split's token-load imbalance is luck: the
  contiguous id split's ``max/mean`` load over random relabelings of the same firing counts
  (which ids happen to be hot), against greedy LPT with equal cardinality
  (:func:`moeroof.models.partition.balanced_packing`), whose loads do not depend on the labels.
- :func:`trace_split` — what each rank of a partition does with its cache on a trace: token
  picks (the firing counts a partition balances), per-layer union, LRU hits and misses, GiB
  streamed per step, and the cost of synchronising the ranks at every MoE layer.
- :func:`slowdown_sweep` — the pair's predicted step time when one rank (the head node) is
  ``s`` times slower at identical work, for each partition method, under the per-rank step
  model of :func:`moeroof.models.split.split_plan`; :func:`fluid_gain` is the divisible-work
  reference.
- :func:`pair_vs_booster` — the pair against one booster at the same M and cache per node:
  simulated hit rate and streamed GiB (:func:`moeroof.studies.ladder.run_cases`) turned into step times
  by the roofline terms, and their ratio against the seed's witnessed 6.1×.

Witnessed numbers of seed 003 (docs/sources.md) are in
:data:`SEED003`; nothing here reads the seed's withheld rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from moeroof import cachesim as cache
from moeroof.core.results import Result
from moeroof.core.units import GiB
from moeroof.data.plan_points import PlanPoint
from moeroof.data.presets import Hardware, MoEModel
from moeroof.fit.plan import PlanKnobs, box_with_knobs, predict_points
from moeroof.models import step
from moeroof.models.local_routing import routing_from_knobs
from moeroof.models.partition import balanced_packing, contiguous_split, imbalance, partition
from moeroof.models.plan import Workload, plan
from moeroof.models.split import split_plan
from moeroof.studies import ladder

__all__ = [
    "SEED003",
    "MEASURES",
    "max_over_min",
    "RelabelDraws",
    "relabel_imbalance",
    "firing_counts",
    "TraceSplit",
    "trace_split",
    "SlowdownSweep",
    "slowdown_sweep",
    "fluid_gain",
    "Arrangement",
    "PairVsBooster",
    "pair_vs_booster",
    "TokRow",
    "TOK_S_ROWS",
    "tok_s_points",
    "TokSweep",
    "tok_s_sweep",
]

#: witnessed numbers of seed 003 used by the expert_split notebook (each with its table)
SEED003: dict[str, float | tuple[float, ...]] = {
    # "Firing histogram and partition"
    "lpt_rows": (38980.0, 38972.0),
    "lpt_imbalance": 1.000,  # max/min, the seed's measure
    "id_rows": (39408.0, 38544.0),
    "id_imbalance": 1.022,  # max/min: 39408 / 38544
    # "The ladder (pair, M = 8, 40 GiB expert cache per rank)": tok/s of rows 0, 1, 2
    "ladder_tok_s_row0_id_split": 2.49,
    "ladder_tok_s_row1_compact_rows": 2.32,
    "ladder_tok_s_row2_balanced": 2.73,
    "ladder_gain_row2": 0.177,
    # "The head node is 1.3x to 2.6x slower than the peer at identical work"
    "head_slowdown": (1.3, 2.6),
    # "One booster against the pair (M = 8, 20 GiB cache, distinct tokens)"
    "booster_ms_per_step": 21683.9,
    "pair_ms_per_step": 3553.8,
    "pair_hit_rate": 0.538,
    "pair_gib_streamed_per_step": 6.62,
    # "Three runs at 80 GiB gave 5.21, 5.60 and 5.67 tok/s"
    "repeat_tok_s_80gib": (5.21, 5.60, 5.67),
}


def _seed003(key: str) -> float:
    """One of :data:`SEED003`'s scalar figures, as a float."""
    return float(cast(float, SEED003[key]))


# ----------------------------------------------------------------------------- relabelings


def max_over_min(values) -> float:
    """``max / min`` of per-rank values — seed 003's imbalance measure (39408 / 38544 = 1.022×
    for its id split, where ``max / mean`` would be 1.011×); ``inf`` when a rank has none."""
    v = np.asarray(values, dtype=float)
    lo = float(v.min())
    if lo <= 0.0:
        return 1.0 if float(v.max()) <= 0.0 else math.inf
    return float(v.max() / lo)


#: the two imbalance measures: the library's ``max/mean`` and the seed's ``max/min``
MEASURES = {"max_mean": imbalance, "max_min": max_over_min}


@dataclass(frozen=True)
class RelabelDraws(Result):
    """Per-rank token loads of the id split, one row per random relabeling of the experts
    (``id_loads`` (draws, R)), and of LPT (``lpt_loads`` (R,), the same for every relabeling)."""

    id_loads: np.ndarray
    lpt_loads: np.ndarray

    @property
    def draws(self) -> int:
        return int(self.id_loads.shape[0])

    def id_imbalance(self, measure: str = "max_min") -> np.ndarray:
        """The id split's imbalance per relabeling (``"max_min"``, the seed's, or ``"max_mean"``)."""
        f = MEASURES[measure]
        return np.array([f(row) for row in self.id_loads])

    def lpt_imbalance(self, measure: str = "max_min") -> float:
        return float(MEASURES[measure](self.lpt_loads))

    def share_at_or_above(self, x: float, measure: str = "max_min") -> float:
        """Share of relabelings whose id-split imbalance is ≥ ``x`` (an upper-tail p-value)."""
        return float(np.mean(self.id_imbalance(measure) >= x))


def relabel_imbalance(load, ranks: int, draws: int, rng: np.random.Generator) -> RelabelDraws:
    """The id split's per-rank loads over ``draws`` random relabelings of the firing counts.

    Each draw permutes which expert id carries which count (``rng.permutation``) and splits the
    ids contiguously (:func:`moeroof.models.partition.contiguous_split`). Equal-cardinality LPT
    (:func:`moeroof.models.partition.balanced_packing`) sees only the sorted counts, so its loads do not
    depend on the labels: one row serves every draw.
    """
    w = np.asarray(load, dtype=float)
    if w.ndim != 1 or w.size < ranks:
        raise ValueError(f"load must be a 1-D array of at least {ranks} counts")
    if int(draws) < 1:
        raise ValueError(f"draws must be >= 1, got {draws!r}")
    ids = contiguous_split(w.size, ranks)
    lpt_loads = np.bincount(balanced_packing(w, ranks), weights=w, minlength=ranks)
    out = np.array([np.bincount(ids, weights=rng.permutation(w), minlength=ranks) for _ in range(int(draws))])
    return RelabelDraws(out, lpt_loads)


# ----------------------------------------------------------------------------- trace split


def firing_counts(topk, experts: int, *, start_step: int = 0, stop_step: int | None = None) -> np.ndarray:
    """Per-expert firing counts summed over streams and layers for steps ``[start, stop)`` of a
    trace ``topk`` (steps, streams, layers, K), ``-1`` padding ignored — the histogram an engine
    records and a firing-count partition balances."""
    block = np.asarray(topk[start_step:stop_step])
    picks = block[block >= 0]
    return np.bincount(picks.ravel(), minlength=int(experts)).astype(np.int64)


@dataclass(frozen=True)
class TraceSplit(Result):
    """One partition on one trace, counted over the timed steps (after ``warmup_steps``).

    Per rank (arrays of length R): ``picks_per_step`` token-routes to the rank's experts (its
    firing-count load), ``union_per_layer`` distinct experts requested per layer and step,
    ``hit_rate``, ``gib_per_step`` streamed. ``layer_miss_gib`` (R, timed steps, layers):
    GiB each rank streams at each layer of each timed step.
    """

    assignment: np.ndarray
    ranks: int
    layers: int
    timed_steps: int
    cache_gib_per_rank: float
    item_bytes: float
    picks_per_step: np.ndarray
    union_per_layer: np.ndarray
    hits: np.ndarray
    misses: np.ndarray
    hit_rate: np.ndarray
    gib_per_step: np.ndarray
    layer_miss_gib: np.ndarray

    def imbalance(self) -> dict[str, float]:
        """``max/mean`` over ranks of token picks, union, misses and streamed GiB."""
        per_rank = {"token_load": self.picks_per_step, "union": self.union_per_layer, "misses": self.misses}
        return {k: imbalance(v) for k, v in {**per_rank, "streamed_gib": self.gib_per_step}.items()}

    def layer_share(self, rank: int = 0) -> np.ndarray:
        """Per layer, rank ``rank``'s share of the GiB streamed over the timed steps (NaN for a
        layer that streamed nothing): 1/R everywhere only if every layer is balanced."""
        tot = self.layer_miss_gib.sum(axis=(0, 1))
        mine = self.layer_miss_gib[rank].sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(tot > 0, mine / tot, np.nan)

    def paced_gib_per_step(self, slowdown=None, sync: str = "step") -> float:
        """Streamed GiB per step at the pace of the slowest rank, in fast-rank GiB.

        ``slowdown`` (R,) ≥ 1 multiplies each rank's bytes (a rank s× slower at identical work
        takes s× as long; default all 1). ``sync="step"``: the ranks meet once per step,
        ``mean_steps max_r s_r·Σ_ℓ g_{r,ℓ}``; ``"layer"``: they meet at every MoE layer (the
        expert-parallel exchange of each layer's activations), ``mean_steps Σ_ℓ max_r s_r·g_{r,ℓ}``
        — never less. Divide by an SSD bandwidth for seconds when the SSD binds.
        """
        s = np.ones(self.ranks) if slowdown is None else np.asarray(slowdown, dtype=float)
        if s.shape != (self.ranks,):
            raise ValueError(f"slowdown must have {self.ranks} entries")
        g = self.layer_miss_gib * s[:, None, None]
        if sync == "step":
            return float(g.sum(axis=2).max(axis=0).mean())
        if sync == "layer":
            return float(g.max(axis=0).sum(axis=1).mean())
        raise ValueError(f"sync must be 'step' or 'layer', got {sync!r}")


def trace_split(
    topk, assignment, *, cache_gib_per_rank: float, warmup_steps: int, item_bytes: float | None = None
) -> TraceSplit:
    """Per-rank LRU caches on a trace under an expert → rank ``assignment`` (E,).

    Rank r requests, layer by layer, the union of each step's experts it owns
    (:func:`moeroof.cachesim.requests_from_trace`) and caches them in its own LRU cache of
    ``cache_gib_per_rank`` GiB shared by all layers (global scope). Items are equal-sized
    (``item_bytes``, default :func:`moeroof.studies.ladder.expert_bytes` at the trace's layer count),
    so a cache holds ``⌊C/e⌋`` items and a request hits iff its LRU stack distance is in
    ``1…⌊C/e⌋`` (Mattson et al. 1970; :func:`moeroof.cachesim.stack_distances`) — the same hits as
    :func:`moeroof.cachesim.simulate` with ``policy="lru"``, kept per (step, layer) here.
    """
    arr = np.asarray(topk)
    steps, _, layers, _ = arr.shape
    a = np.asarray(assignment, dtype=np.int64)
    experts = a.size
    ranks = int(a.max()) + 1
    warm = int(warmup_steps)
    if not 0 <= warm < steps:
        raise ValueError(f"warmup_steps must be in [0, {steps}), got {warmup_steps!r}")
    e = ladder.expert_bytes(layers) if item_bytes is None else float(item_bytes)
    cap = int(math.floor(float(cache_gib_per_rank) * GiB / e + 1e-9))
    timed = steps - warm
    picks = np.bincount(a[arr[warm:][arr[warm:] >= 0]], minlength=ranks).astype(float) / timed
    union = np.zeros(ranks)
    hits = np.zeros(ranks, dtype=np.int64)
    misses = np.zeros(ranks, dtype=np.int64)
    layer_miss = np.zeros((ranks, timed, layers))
    for r in range(ranks):
        req = cache.requests_from_trace(arr, experts, partition=a, rank=r)
        dist = cache.stack_distances(req.items)
        hit = (dist >= 1) & (dist <= cap)
        keep = req.step >= warm
        cell = (req.step[keep] - warm).astype(np.int64) * layers + req.layer[keep]
        union[r] = keep.sum() / (timed * layers)
        hits[r] = int(hit[keep].sum())
        misses[r] = int((~hit[keep]).sum())
        layer_miss[r] = np.bincount(cell[~hit[keep]], minlength=timed * layers).reshape(timed, layers) * e / GiB
    req_n = hits + misses
    hit_rate = np.where(req_n > 0, hits / np.maximum(req_n, 1), np.nan)
    return TraceSplit(a, ranks, int(layers), int(timed), float(cache_gib_per_rank), e, picks, union, hits, misses,
                      hit_rate, misses * e / GiB / timed, layer_miss)  # fmt: skip


# ----------------------------------------------------------------------------- slowdown


def fluid_gain(slowdown) -> np.ndarray | float:
    """What a perfectly divisible, speed-weighted split buys against an equal split when one of
    two ranks is ``s`` times slower: equal halves take ``s·W/2``; giving the slow rank
    ``W/(1+s)`` takes ``s·W/(1+s)``; the multiple is ``(1+s)/2``. A reference that ignores the
    caches (a rank that owns more experts also misses more of them)."""
    s = np.asarray(slowdown, dtype=float)
    out = (1.0 + s) / 2.0
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class SlowdownSweep(Result):
    """Predicted pair step time per partition method against the head node's slowdown.

    ``step_seconds[method]`` (n,), ``head_experts[method]`` (n,) experts the slow rank owns,
    ``streamed_gib[method]`` (n, R) and ``rank_seconds[method]`` (n, R) per rank (the latter with
    the slowdown applied), ``bound[method]`` binding term of the slowest rank.
    """

    slowdowns: np.ndarray
    head_rank: int
    methods: tuple[str, ...]
    step_seconds: dict[str, np.ndarray]
    head_experts: dict[str, np.ndarray]
    streamed_gib: dict[str, np.ndarray]
    bound: dict[str, tuple[str, ...]]
    rank_seconds: dict[str, np.ndarray]
    cache_gib_per_rank: float
    batch: int
    notes: tuple[str, ...] = field(default=())

    def multiple(self, method: str, baseline: str = "lpt") -> np.ndarray:
        """``step(baseline) / step(method)`` at each slowdown: > 1 means ``method`` is faster."""
        return self.step_seconds[baseline] / self.step_seconds[method]

    def cost(self, method: str) -> np.ndarray:
        """``step(method, s) / step(method, s = 1)`` — what the slow head costs a partition, against
        the same partition on two equal ranks (requires 1 in ``slowdowns``)."""
        i = np.flatnonzero(np.isclose(self.slowdowns, 1.0))
        if not i.size:
            raise ValueError("cost needs slowdown 1.0 in the sweep")
        return self.step_seconds[method] / self.step_seconds[method][i[0]]


def slowdown_sweep(
    pi: np.ndarray,
    load,
    model: MoEModel,
    hardware: Hardware,
    slowdowns: Sequence[float],
    *,
    methods: Sequence[str] = ("id", "lpt", "weighted", "bytes"),
    head_rank: int = 0,
    ranks: int = 2,
    batch: int = 8,
    cache_gib_per_rank: float = 20.0,
    bytes_max_iter: int | None = 30,
    **plan_kw,
) -> SlowdownSweep:
    """The pair's step (:func:`moeroof.models.split.split_plan`) when rank ``head_rank`` runs
    ``s`` times slower than the others at identical work (speed ``1/s``), for each method.

    ``id`` and ``lpt`` ignore the speeds (the same partition at every s); ``weighted`` gives the
    slow rank ``≈ E/(1+s)`` experts (two ranks) and packs the load to finish together;
    ``bytes`` searches for the partition that minimises the slowest rank's predicted time
    (:func:`moeroof.models.partition.bytes_partition`, local search capped at ``bytes_max_iter``
    improving moves per start: the first few dozen moves give nearly all of the gain). The cache
    is the pinned hot set (``cache_policy="static"``, the model the ``bytes`` search optimises)
    unless ``plan_kw`` names another policy.
    """
    plan_kw = {"cache_policy": "static", **plan_kw}
    s_grid = np.asarray(slowdowns, dtype=float)
    if np.any(~np.isfinite(s_grid)) or np.any(s_grid < 1.0):
        raise ValueError("slowdowns must be finite and >= 1")
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    w = np.asarray(load, dtype=float)
    cache_bytes = float(cache_gib_per_rank) * GiB
    runs: dict[str, list] = {m: [] for m in methods}  # per method: (partition, split plan) at each slowdown
    notes: list[str] = []
    bytes_kw = dict(
        pi=pi, model=model, hardware=hardware, batch=batch, cache_bytes_per_rank=cache_bytes, max_iter=bytes_max_iter,
        **{k: v for k, v in plan_kw.items() if k in ("context_tokens", "overlap", "read_size_bytes")},
    )  # fmt: skip
    for s in s_grid:
        speed = np.ones(ranks)
        speed[head_rank] = 1.0 / s
        kw = dict(batch=batch, cache_bytes_per_rank=cache_bytes, rank_speed=speed, load=w, **plan_kw)
        for m in methods:
            a = partition(m, w, ranks, rank_speed=speed, **(bytes_kw if m == "bytes" else {}))
            p = split_plan(a, pi, model, hardware, method=m, **kw)
            runs[m].append((a, p))
            notes += p.notes
    steps = {m: np.array([p.step_seconds for _, p in rs], dtype=float) for m, rs in runs.items()}
    head = {m: np.array([np.sum(a == head_rank) for a, _ in rs], dtype=np.int64) for m, rs in runs.items()}
    gib = {m: np.array([p.streamed_bytes / GiB for _, p in rs]).reshape(-1, ranks) for m, rs in runs.items()}
    rank_s = {m: np.array([p.rank_seconds for _, p in rs], dtype=float).reshape(-1, ranks) for m, rs in runs.items()}
    bounds = {m: tuple(p.bound[p.slowest_rank] for _, p in rs) for m, rs in runs.items()}
    return SlowdownSweep(
        s_grid, int(head_rank), tuple(methods), steps, head, gib, bounds, rank_s, float(cache_gib_per_rank), int(batch),
        tuple(dict.fromkeys(notes)),
    )  # fmt: skip


# ----------------------------------------------------------------------------- pair vs booster


@dataclass(frozen=True)
class Arrangement(Result):
    """One arrangement's simulated cache behaviour and predicted step (means over seeds).

    ``gib_per_step``: GiB the slowest-streaming rank streams per step (the booster's only rank);
    ``working_set_gib``: what one of its ranks requests per step (``U_rank · L · e``);
    ``terms_seconds``: SSD, memory and compute terms of that rank; ``step_seconds`` their max.
    """

    name: str
    ranks: int
    experts_per_rank: int
    hit_rate: float
    hit_rate_range: tuple[float, float]
    gib_per_step: float
    gib_range: tuple[float, float]
    working_set_gib: float
    terms_seconds: dict[str, float]
    step_seconds: float
    bound: str


@dataclass(frozen=True)
class PairVsBooster(Result):
    """The pair (id split) against one booster at the same M and cache GiB per node.

    ``ratio``: predicted ``step(booster) / step(pair)`` (baseline: one booster; > 1 means the
    pair is faster); ``bytes_ratio``: the ratio of streamed GiB per step alone;
    ``ratio_witnessed``: seed 003's 21683.9 / 3553.8 ms; ``error``: ``ratio / witnessed − 1``.
    ``witnessed_pair_gib_per_s``: the rate the seed's pair streamed at (6.62 GiB in 3553.8 ms);
    ``booster_seconds_at_witnessed_rate``: the predicted booster GiB at that rate.
    """

    booster: Arrangement
    pair: Arrangement
    ratio: float
    ratio_range: tuple[float, float]
    bytes_ratio: float
    ratio_witnessed: float
    error: float
    ssd_bytes_per_s: float
    read_size_bytes: float
    streams: int
    cache_gib: float
    layers: int
    seeds: tuple[int, ...]
    assumed: tuple[str, ...]
    witnessed_pair_gib_per_s: float = float("nan")
    booster_seconds_at_witnessed_rate: float = float("nan")
    notes: tuple[str, ...] = field(default=())


def _arrangements(
    runs: list[list[ladder.CaseResult]],
    cases: list[ladder.Case],
    layers: int,
    rank_step: Callable[[np.ndarray, np.ndarray], step.Step],
) -> tuple[dict[str, Arrangement], dict[str, list[float]]]:
    """The booster's and the pair's :class:`Arrangement` (at the seeds' mean) and step seconds per seed."""
    per_seed_steps: dict[str, list[float]] = {}
    arrs: dict[str, Arrangement] = {}
    for j, name in enumerate(("booster", "pair")):
        res = [r[j] for r in runs]
        gib_seed = np.array([max(x.rank_gib_streamed_per_step) for x in res])
        hit_seed = np.array([x.hit_rate for x in res])
        ws_seed = np.array([x.rank_union_per_layer * layers * ladder.expert_bytes(layers) / GiB for x in res])
        per_seed_steps[name] = list(rank_step(gib_seed, ws_seed).step_seconds)
        g, ws = float(gib_seed.mean()), float(ws_seed.mean())
        st = rank_step(np.array([g]), np.array([ws]))
        terms = {k: float(v[0, 0]) for k, v in st.terms.items()}
        ranks = cases[j].ranks
        hits, gibs = (float(hit_seed.min()), float(hit_seed.max())), (float(gib_seed.min()), float(gib_seed.max()))
        arrs[name] = Arrangement(cases[j].arrangement, ranks, ladder.EXPERTS // ranks, float(hit_seed.mean()), hits, g,
                                 gibs, ws, terms, float(st.step_seconds[0]), st.bound[0])  # fmt: skip
    return arrs, per_seed_steps


def _pair_assumptions(
    knobs: ladder.Knobs, hardware: Hardware, layers: int, bw_ssd: float, read: float, streams: int, cache_gib: float
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What :func:`pair_vs_booster` assumes, and its notes."""
    assumed = (
        f"routing knobs {knobs.label()} (fitted to the pair's 20 and 80 GiB rows of seed 003)",
        f"L = {layers} MoE layers (cancels: GiB per step and cache GiB do not depend on L)",
        f"SSD {bw_ssd / 1e9:.2f} GB/s at {read / 2**20:.2f} MiB reads ({hardware.name}, assumed; cancels in the ratio while the SSD binds)",
        "both nodes equally fast; the exchange hidden",
    )
    notes = ["equal node speeds: the seed's head node runs 1.3–2.6× slower; which node the booster ran on is not given"]
    if int(streams) != 8 or float(cache_gib) != 20.0:
        notes.append(
            f"the witnessed ratio is seed 003's at M = 8 and 20 GiB, not at M = {streams} and {cache_gib:g} GiB"
        )
    return assumed, tuple(notes)


def pair_vs_booster(
    knobs: ladder.Knobs,
    model: MoEModel,
    hardware: Hardware,
    *,
    streams: int = 8,
    cache_gib: float = 20.0,
    seeds: Sequence[int] = (0, 1, 2, 3),
    layers: int = ladder.ASSUMED_LAYERS,
    context_tokens: int = 512,
    read_size_bytes: float | None = None,
) -> PairVsBooster:
    """Predict seed 003's pair/booster step-time ratio from the calibrated cache model.

    Hit rate and GiB streamed per step per rank: :func:`moeroof.studies.ladder.run_cases` (LRU, one
    cache of ``cache_gib`` per node, the seed's 3 + 10 step protocol, ``knobs`` fitted to the
    pair's 20 and 80 GiB rows only). Each rank's step goes through the one step model
    (:func:`moeroof.models.step.evaluate`, max overlap)::

        ssd     = streamed_bytes / BW_ssd(read size)          (read size: one expert, e, by default)
        memory  = (NR + U_rank·L·e + M·ctx·kv) / BW_mem
        compute = M · FLOP_per_token / FLOPS
        step    = max(ssd, memory, compute)

    The pair's step is its slower-streaming rank's; both nodes are taken at equal speed (the
    head node's 1.3–2.6× slowdown is not in the prediction) and the exchange is taken as hidden
    (the preset model has no hidden size to size it). When the SSD binds on both, the ratio is
    the ratio of streamed bytes and the SSD bandwidth cancels.
    """
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("give at least one seed")
    cases = [ladder.Case(name, ranks, int(streams), float(cache_gib)) for name, ranks in (("booster", 1), ("pair", 2))]
    runs = [ladder.run_cases(knobs, cases, seed=s, layers=layers) for s in seeds]
    read = float(model.expert_bytes) if read_size_bytes is None else float(read_size_bytes)
    bw_ssd = float(hardware.ssd_bandwidth(read))
    mem_base = float(model.non_routed_bytes) + streams * context_tokens * float(model.kv_bytes_per_token)
    flops = streams * (float(model.flops_per_token) + context_tokens * float(model.attn_flops_per_context_token))

    def rank_step(gib: np.ndarray, ws_gib: np.ndarray) -> step.Step:
        """One rank's step through the one step model, for each (streamed, working set) pair."""
        work = step.RankWork(
            ssd_bytes=np.asarray(gib) * GiB,
            mem_bytes=mem_base + np.asarray(ws_gib) * GiB,
            flops=np.full(np.size(gib), flops),
            agent_tokens=np.full(np.size(gib), float(streams)),
            read_size_bytes=read,
        )
        return step.evaluate(hardware, [work], overlap="max")

    arrs, per_seed_steps = _arrangements(runs, cases, layers, rank_step)
    per_seed_ratio = np.array(per_seed_steps["booster"]) / np.array(per_seed_steps["pair"])
    ratio = arrs["booster"].step_seconds / arrs["pair"].step_seconds
    witnessed = _seed003("booster_ms_per_step") / _seed003("pair_ms_per_step")
    assumed, notes = _pair_assumptions(knobs, hardware, layers, bw_ssd, read, streams, cache_gib)
    rate = _seed003("pair_gib_streamed_per_step") / (_seed003("pair_ms_per_step") / 1e3)
    booster, pair = arrs["booster"], arrs["pair"]
    return PairVsBooster(
        booster,
        pair,
        float(ratio),
        (float(per_seed_ratio.min()), float(per_seed_ratio.max())),
        booster.gib_per_step / pair.gib_per_step,
        witnessed,
        float(ratio / witnessed - 1.0),
        bw_ssd,
        read,
        int(streams),
        float(cache_gib),
        int(layers),
        seeds,
        assumed,
        witnessed_pair_gib_per_s=rate,
        booster_seconds_at_witnessed_rate=booster.gib_per_step / rate,
        notes=notes,
    )


# ----------------------------------------------------------------------------- the M sweep's tok/s


@dataclass(frozen=True)
class TokRow:
    """One row of seed 003's tok/s: a configuration (``batch`` M, ``cache_gib`` per rank,
    ``ranks``: 2 the pair, 1 one booster), its ``role`` (``calibration``: public and fitted;
    ``held-out published``: public, never fitted, its error is stated; ``withheld``: not in the
    excerpt, predicted) and, for public rows, the witnessed tok/s (and hit rate where given)."""

    name: str
    batch: int
    cache_gib: float
    ranks: int
    role: str
    witnessed_tok_s: float | None = None
    witnessed_hit_rate: float | None = None
    source: str = ""


#: seed 003's tok/s rows (docs/sources.md). Calibration: the public rows
#: ``data/points/seed003-public.plan-points`` calibrates on — the table "Expert cache against the
#: headroom" (balanced partition, overlap on, M = 8: the configuration of the withheld 40/60 GiB
#: rows and of the M sweep) at 20 GiB and the three 80 GiB runs, the ladder's row 3 at 40 GiB
#: (balanced + overlapped: that table's configuration) and one booster at 20 GiB (0.37). Held out:
#: the pair with the id split as recorded (2.25) and the ladder's other three 40 GiB rows (each one
#: engine change from row 3). Withheld: 40 and 60 GiB at M = 8 and the M sweep at 80 GiB.
TOK_S_ROWS: tuple[TokRow, ...] = (
    TokRow("pair-m8-20", 8, 20.0, 2, "calibration", 2.47, 0.525, "headroom table: 20 GiB, 2.47 tok/s, 52.5 %"),
    TokRow("pair-m8-80-run1", 8, 80.0, 2, "calibration", 5.21, None, "three runs at 80 GiB: 5.21"),
    TokRow("pair-m8-80", 8, 80.0, 2, "calibration", 5.60, 0.983, "headroom table: 80 GiB, 5.60 tok/s, 98.3 %"),
    TokRow("pair-m8-80-run3", 8, 80.0, 2, "calibration", 5.67, None, "three runs at 80 GiB: 5.67"),
    TokRow("booster-m8-20", 8, 20.0, 1, "calibration", 0.37, None, "booster table: one booster, 0.37"),
    TokRow("pair-m8-20-id", 8, 20.0, 2, "held-out published", 2.25, 0.538, "booster table: pair, id split, 2.25"),
    TokRow("ladder0-id-40", 8, 40.0, 2, "held-out published", 2.49, None, "ladder row 0: id split, 2.49"),
    TokRow("ladder1-compact-40", 8, 40.0, 2, "held-out published", 2.32, None, "ladder row 1: compact rows, 2.32"),
    TokRow("ladder2-balanced-40", 8, 40.0, 2, "held-out published", 2.73, None, "ladder row 2: balanced, 2.73"),
    TokRow("ladder3-overlap-40", 8, 40.0, 2, "calibration", 2.98, None, "ladder row 3: overlapped, 2.98"),
    TokRow("pair-m8-40", 8, 40.0, 2, "withheld", source="headroom table: 40 GiB (withheld)"),
    TokRow("pair-m8-60", 8, 60.0, 2, "withheld", source="headroom table: 60 GiB (withheld)"),
    TokRow("pair-m1-80", 1, 80.0, 2, "withheld", source="M sweep at 80 GiB: M = 1 (withheld)"),
    TokRow("pair-m16-80", 16, 80.0, 2, "withheld", source="M sweep at 80 GiB: M = 16 (withheld)"),
    TokRow("pair-m32-80", 32, 80.0, 2, "withheld", source="M sweep at 80 GiB: M = 32 (withheld)"),
)


def tok_s_points(rows: Sequence[TokRow] = TOK_S_ROWS) -> list:
    """``fit-plan`` points (:class:`moeroof.data.plan_points.PlanPoint`, LRU): the calibration rows
    carry their witnessed tok/s and hit rate; every other row — held-out published or withheld —
    is empty (predicted). ``row`` is the index in ``rows`` + 2 (as a file with a header)."""
    cal = [r.role == "calibration" for r in rows]
    return [
        PlanPoint(i + 2, int(r.batch), float(r.cache_gib), int(r.ranks), "lru",
                  r.witnessed_tok_s if c else None, r.witnessed_hit_rate if c else None)
        for i, (r, c) in enumerate(zip(rows, cal))
    ]  # fmt: skip


@dataclass(frozen=True)
class TokSweep(Result):
    """:func:`tok_s_sweep`: the ``fit-plan`` result, the routing knobs it ran on, and one dict per
    row (``name``, ``batch``, ``cache_gib``, ``ranks``, ``role``, ``witnessed``, ``predicted``,
    ``low``, ``high`` — the band widened by the structural alternative — ``fit_plan_low``,
    ``fit_plan_high``, ``per_token_engine`` (tok/s with the fitted engine time charged per
    agent token instead of per step), ``additive`` (tok/s of the additive step, engine time +
    streamed GiB / rate, fitted on the same rows: :func:`_additive_tok_s`; ``additive`` on the
    result holds its two constants), ``predicted_hit_rate``, ``error`` (predicted/witnessed − 1,
    public rows) and ``covered``)."""

    fit: Any
    routing: dict
    rows: list[dict]
    seconds: float
    additive: dict = field(default_factory=dict)

    def held_out(self) -> list[dict]:
        return [r for r in self.rows if r["role"] == "held-out published"]


def _per_token_engine_tok_s(
    fit: Any,
    pts: list,
    model: MoEModel,
    hardware: Hardware,
    route: Any,
    rows: list[TokRow],
    context_tokens: int,
    memory: PlanKnobs,
) -> np.ndarray:
    """Net tok/s of the other structural end: the fitted engine time at M = 8 charged per agent
    token (c0 = 0, c1 = engine seconds at M = 8 / 8), at the fitted SSD scale and ``memory``
    knobs (:func:`_fitted_memory`)."""
    k = fit.knobs
    ref = 8
    # the engine's seconds at M = 8 (the fitted box's own engine term there), charged per agent token
    engine = ("engine_seconds_per_step", "engine_seconds_per_agent_token", "engine_seconds_per_touched_expert")
    box = box_with_knobs(hardware, PlanKnobs(**{name: float(k[name]["value"]) for name in engine}))
    ranks = max(r.ranks for r in rows if r.role == "calibration")  # the calibration rows' arrangement
    at_ref = plan(model, box, Workload(ranks=ranks, context_tokens=context_tokens), route, [ref]).terms["engine"]
    alt = replace(
        memory,
        engine_seconds_per_step=0.0,
        engine_seconds_per_agent_token=float(np.max(at_ref)) / ref,
        ssd_scale=float(k["ssd_scale"]["value"]),
    )
    alt_net, _ = predict_points(pts, model, hardware, route, alt, context_tokens=context_tokens)
    return alt_net


def _sweep_rows(
    rows: list[TokRow], fit_rows: list[dict[str, Any]], alt_net: np.ndarray, add_net: np.ndarray
) -> list[dict[str, Any]]:
    """:func:`tok_s_sweep`'s rows: fit-plan's prediction, its band widened by both structural ends."""
    out = []
    for r, fr, a, d in zip(rows, fit_rows, alt_net, add_net):
        lo, hi = min(fr["low"], float(a), float(d)), max(fr["high"], float(a), float(d))
        w = r.witnessed_tok_s
        out.append(
            {
                **{k: getattr(r, k) for k in ("name", "batch", "cache_gib", "ranks", "role")},
                "witnessed": w,
                "predicted": fr["predicted"],
                "low": lo,
                "high": hi,
                "fit_plan_low": fr["low"],
                "fit_plan_high": fr["high"],
                "per_token_engine": float(a),
                "additive": float(d),
                "predicted_hit_rate": fr["predicted_hit_rate"],
                "error": None if w is None else fr["predicted"] / w - 1.0,
                "covered": None if w is None else bool(lo <= w <= hi),
                "source": r.source,
            }
        )
    return out


def tok_s_sweep(
    model: MoEModel,
    hardware: Hardware,
    family: str,
    skew: float,
    rho: float,
    c: float = math.inf,
    *,
    rows: Sequence[TokRow] = TOK_S_ROWS,
    context_tokens: int = 512,
    max_evaluations: int = 40,
) -> TokSweep:
    """Seed 003's tok/s through ``moeroof fit-plan``: calibrate the one step model on the public
    calibration rows of :data:`TOK_S_ROWS` only, predict every other row with bands.

    The routing is :func:`moeroof.models.local_routing.routing_from_knobs` at the routing knobs
    ``family``, ``skew``, ``rho``, ``c`` (those ``fit-routing`` found on the public cache rows;
    the plan's LRU runs in steady state on a trace sampled from them, so it has no warm-history
    knob). Fitted: what ``fit-plan``'s default takes from these rows — the engine and the SSD
    scale, and, where the rows measure tok/s at three or more cache sizes of one batch size (as
    :data:`TOK_S_ROWS` do), the memory knob they rule in (:func:`moeroof.fit.plan.choose_memory_knob`). Every public tok/s is at M = 8, where
    the pairs a rank touches are fixed, so the engine's fitted knob is its cost per touched
    (layer, expert) pair, with the per-step and per-token costs held at their priors from public
    engines (:data:`moeroof.fit.plan.PRIOR_SECONDS_PER_STEP`; their ends in fit-plan's bands). The
    other structural end — the same engine time at M = 8 charged per agent token (c0 = 0, c1 =
    engine seconds at M = 8 / 8) — is predicted too (:func:`moeroof.fit.plan.predict_points`,
    with the fitted memory knob) and widens the band: that is the structural uncertainty of the
    M sweep, which no public row can resolve. Under overlap ``max`` (the default here) the step is the largest of its terms,
    so wherever the stream is shorter than the engine term a cache change moves nothing; the seed's step times add
    (3243 ms at 20 GiB, 1429 ms at 80 GiB for 7.02 against 0.25 GiB streamed), so the additive
    step fitted on the same rows (:func:`_additive_tok_s`) is the second structural alternative
    in the band.
    """
    from moeroof.fit.plan import fit_plan  # looked up at the call (the tests spy on it)

    rows = list(rows)
    pts = tok_s_points(rows)
    streams = max(r.batch for r in rows)
    route = routing_from_knobs(model, family, float(skew), float(rho), float(c), streams=streams)
    t0 = time.perf_counter()
    fit = fit_plan(
        pts,
        model,
        hardware,
        route,
        context_tokens=context_tokens,
        routing_is_spec=False,
        max_evaluations=max_evaluations,
    )
    seconds = time.perf_counter() - t0
    memory = _fitted_memory(fit)
    alt_net = _per_token_engine_tok_s(fit, pts, model, hardware, route, rows, context_tokens, memory)
    add_net, add_coef = _additive_tok_s(pts, model, box_with_knobs(hardware, memory), route, context_tokens, memory)
    out = _sweep_rows(rows, fit.rows, alt_net, add_net)
    routing = {"family": family, "skew": float(skew), "rho": float(rho), "c": float(c), "streams": streams}
    return TokSweep(fit, routing, out, float(seconds), add_coef)


def _fitted_memory(fit: Any) -> PlanKnobs:
    """The memory knobs ``fit`` fitted (the page cache's share, the reclaim work's κ and shape), as
    :class:`~moeroof.fit.plan.PlanKnobs` the structural alternatives run with (the rest None)."""
    fields = ("page_cache_share", "reclaim_penalty", "reclaim_exponent")
    got = {f: float(fit.knobs[f]["value"]) for f in fields if fit.knobs.get(f, {}).get("fitted")}
    return PlanKnobs(**got)


def _additive_tok_s(pts, model: MoEModel, hardware: Hardware, route, context_tokens: int, memory: PlanKnobs):
    """The additive reading of a step (no overlap between the engine and the stream):
    ``T = t0 + G / r`` with G the slowest rank's streamed GiB per step that ``plan``'s cache
    predicts for the row, t0 and r solved by least squares on the calibration rows' step times
    ``B / tok/s``. Returns every row's tok/s and ``{"engine_seconds": t0, "gib_per_s": r}``."""
    gib = np.empty(len(pts))
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(pts):
        groups.setdefault((p.cache_gib, p.ranks), []).append(i)
    for (cache_gib, ranks), idx in groups.items():
        w = Workload(context_tokens=context_tokens, cache_bytes=cache_gib * GiB, ranks=ranks, cache_policy="lru")
        if memory.page_cache_share is not None:  # the streamed bytes the page cache leaves, as the fit has them
            w = replace(w, page_cache=True, page_cache_share=memory.page_cache_share)
        batch = sorted({pts[i].batch for i in idx})
        res = plan(model, hardware, w, route, batch)
        per_rank = np.atleast_2d(res.per_rank_ssd_bytes_per_step).max(axis=0) / GiB
        for i in idx:
            gib[i] = per_rank[batch.index(pts[i].batch)]
    cal = [i for i, p in enumerate(pts) if p.net_tok_s is not None]
    t = np.array([pts[i].batch / pts[i].net_tok_s for i in cal])
    a = np.column_stack([np.ones(len(cal)), gib[cal]])
    (t0, inv_r), *_ = np.linalg.lstsq(a, t, rcond=None)
    t0, inv_r = max(float(t0), 0.0), max(float(inv_r), 1e-9)
    step_s = t0 + gib * inv_r
    batches = np.array([p.batch for p in pts], dtype=float)
    return batches / step_s, {"engine_seconds": t0, "gib_per_s": 1.0 / inv_r}
