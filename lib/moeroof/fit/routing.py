"""Fit routing knobs to measured cache and routing points, and predict the rest with bands
(``moeroof fit-routing``).

**The knobs** (:class:`RoutingKnobs`): the popularity *family* (``dirichlet``: per layer
``w ~ Dirichlet(α·1)``; ``zipf``: ``w ∝ rank^−s`` with a random rank permutation per layer), its
*skew* (α or s), the stickiness *ρ* (a scalar: each of a stream's K experts is kept from its
previous token with probability ρ), the per-stream *locality* ``c`` (each stream routes by its
own ``q ~ Dirichlet(c·w)`` around the layer's popularity, drawn once per trace:
:func:`moeroof.models.routing.sample_trace` with ``groups=streams, scope="trace"``; ``c = ∞`` is
off) and the cache's warm *history* (tokens of the same workload served before the counted
steps, ``ceil(history_tokens / M)`` steps at M streams — the reading of
:mod:`moeroof.studies.ladder`, generalised).

**The simulated points** (:func:`simulate_points`): per seed, one popularity per layer (shared
by every row: the rows measure one model) and, per batch size M, one trace of
``history_steps + timed_steps`` steps of M streams over ``min(layers, max_sim_layers)``
simulated layers (the hit rate, union and overlap do not depend on L; GiB per step is scaled by
``L / simulated``). A row is evaluated on the counted (timed) steps:

- ``hit_rate``: hits / requested (layer, expert) items, pooled over the ranks; each rank caches
  only its own experts (:func:`moeroof.cachesim.requests_from_trace` with ``partition``,
  ``rank``), split by equal-cardinality LPT on each layer's popularity
  (:func:`moeroof.models.partition.balanced_packing`) or contiguous ids; capacity per rank
  ``C_e`` experts per layer, or ``C_gib · GiB / (expert_bytes · L)`` experts per layer, times the
  simulated layers (``scope="global"``: one cache; ``"layer"``: that many per layer); the
  history steps warm the cache and are not counted; ``static`` pins each rank's most popular
  own experts by the true popularity (an oracle of the routing model, not of the trace);
- ``gib_per_step``: misses per counted step per rank, mean over ranks, × ``L / simulated`` ×
  ``expert_bytes`` / GiB;
- ``union``: distinct experts per layer and counted step across the batch;
- ``overlap``: experts a stream's token shares with its previous token, / K (counted steps).

**Common random numbers.** Every knob set is simulated on the same seeds. The popularity is
drawn by inversion — ``log g = log P⁻¹(α + 1, u₁) + log(u₂) / α`` with fixed uniforms (the
``Gamma(α) = Gamma(α+1)·U^{1/α}`` identity of :func:`moeroof.models.routing.log_dirichlet`, P⁻¹
the inverse regularised incomplete gamma), Zipf ranks ordered by the same ``u₁`` — so it moves
smoothly with the skew; the routing's Gumbel and stickiness draws come from
``default_rng([seed, M, …])`` in a fixed order, and each trace is generated backwards in time so
that its counted steps are the generator's first ones and stay put when the history's length
changes (a reversed trace has the same reuse intervals, each with the same distinct items, so
the same LRU hits; overlaps are symmetric).

**The fit** (:func:`fit_routing`), per family: minimise the scaled least squares

    S(θ) = Σ_i ((ȳ_i(θ) − m_i) / τ_i)²,   ȳ_i(θ) = mean over the fit seeds of row i simulated at θ,

over the calibration rows i (measured ``m_i``; ``τ_i`` = :func:`tolerance`: 3 points for hit
rates, 5 for overlaps, 5 % of a union, 10 % of GiB per step) by a coordinate search on a
bounded, transformed box (``log α`` or s, ρ, ``log10(E/c)``, ``log2(1 + history)``): per round
and knob, a grid of :data:`GRID` points across the current span, then the vertex of the parabola
through the best grid point and its neighbours (a 1-D interpolation, as
:func:`moeroof.studies.ladder.fit_knobs` does per knob); the span shrinks 2.5× a round
(:data:`ROUNDS` rounds). With three knobs or more the search runs from two starts (the defaults,
and ρ and history at the middle of their boxes: one search alone can settle in a cold-cache
valley) and the better end is polished by Nelder–Mead (:func:`scipy.optimize.minimize`, simplex
steps a tenth of each box, 40 evaluations), then by at most :data:`REFIT_EVALS` steps of
Levenberg–Marquardt (the Jacobian J of ``ȳ/τ`` by differences over a tenth of each box at θ̂,
kept up to date by Broyden's rank-one updates; the bootstrap's refits end with the same polish).
A family *fits* when every calibration row is met within its tolerance (``max |z_i| ≤ 1``,
``z_i = (ȳ_i − m_i)/τ_i``); the family with the least S is chosen.

**Which knobs are fitted.** No more knobs than distinct calibration conditions, in the order
skew (every row moves it), ρ (needs a hit-rate, GiB or overlap row), history (needs a cache
row), locality (needs cache or overlap rows at two batch sizes or more: per-stream locality is
told from stickiness only by how the cache sees one stream against many); the others are held at
their defaults (ρ 0, locality off, history :data:`DEFAULT_HISTORY` tokens) and the result says why.

**Intervals** (5–95 %): a refit parametric bootstrap. *What they cover*: the error of the
fitted knobs that comes from the noise of the measurement — one measured run of the calibration
rows, with the routing model's own run-to-run spread — and from the fit's own seeds (a mean over
n = ``len(seeds)`` simulated runs), at the stated seeds and settings; they assume the model is
right. The structural uncertainty (another family, a routing the knobs cannot express) is not in
them: it goes into the bands, through every family that fits. *How*: B = ``bootstrap``
replicate measurements at the fitted θ̂,

    m*_b = ȳ(θ̂) + y(θ̂; s_b) − ȳ(θ̂; F_b),

one run at a seed s_b no fit uses, with the fit seeds' own error swapped for that of n fresh
seeds F_b (so a replicate carries both noises and is refitted at the fit's own seeds, whose
simulated rows it shares; this takes the fit seeds' error as nearly constant over the
interval, which is what common random numbers are for). Each replicate is *refitted* —
the same least squares, τ from its own values — from the best of every knob set the fit
evaluated (the search's grids reach the other valleys: a per-stream locality against none, a
cold cache against a warm one), then by the fit's Levenberg–Marquardt polish; so the draws θ*_b
follow the estimator's nonlinearity and its jumps between valleys, which a linearised step
(one Gauss–Newton step per replicate, the method before) does not, and it was too narrow. The
interval, on the transformed scale, is ``x̂ + t_B(q) · rms_b(x*_b − x̂)`` at q = 5 % and 95 %,
clipped to the box and mapped back to the knob's units (Student's t with B degrees of freedom,
for the spread estimated from B draws: 1.86 at B = 8, not the normal 1.64; the percentiles of
eight draws would reach only about 80 %). A *null value* at the lower end of a box
(:data:`NULL_KNOBS`: ρ = 0, no stickiness; locality off) is where the estimator piles up when
it is the truth, and there the spread at θ̂ says little (the bootstrap at a boundary): the null
joins the interval when its profile — the other knobs refitted by the polish with it held —
rises above S(θ̂) by no more than the interval's own end would on the quadratic model,
``t_B² · max(rms², (J⁺ Σ J⁺ᵀ)_jj) / (JᵀJ)⁻¹_jj`` (so the two agree where S is quadratic; Σ the
covariance of the replicates' noise in τ units: the refits' spread at θ̂ understates how far the
estimator strays towards a bound, so the linear spread is the floor there). A knob the rows do not
move at θ̂ (its column of J, over a tenth of its box, below :data:`MIN_SENSITIVITY`) is held at
its fitted value in the refits and gets its whole box as interval, and a note. The coverage
over independent measurement runs is checked by ``tests/test_fit_routing.py``.

**Bands** (5–95 %): for every family that fits within tolerance (the structural uncertainty,
the family choice), each bootstrap draw θ*_b simulated at its own seed (a run no fit uses)
gives a deviation from that family's prediction; the family's band is its prediction
``+ t_B(q) · √(rms_b(deviation)² + σ²)`` — the parameter uncertainty and the run-to-run noise
of the row's simulation, and σ, the noise of one measurement of it by an engine
(:data:`moeroof.data.points.MEASUREMENT_SIGMA`: 2 points on a hit rate or an overlap, 5 % on a
union or the GiB streamed, as fit-plan's bands carry 2 points and 5 %; seed 003's one
published replicate reads about 0.9 points and 4 %). The band is the envelope of the families' bands and of ``predicted``
(the chosen family's mean over the fit seeds at θ̂), hit rates and overlaps clipped to
[0, 1]. The draw's knob error and its row's run noise are independent here, while in a real
measurement the run that moved the fit also moved the rows: the bands are on the wide side
(more than 90 % of measured rows inside, in the coverage runs of the tests). When no family
fits, the best one alone gives the band, and a note says so.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from moeroof import cachesim as cache
from moeroof.core.errors import ParameterError
from moeroof.core.limits import (
    MAX_FIT_EXPERT_CELLS,
    MAX_FIT_SEEDS,
    MAX_SIMULATED_STEPS,
    check_allocation,
)
from moeroof.core.memo import SourceMemo
from moeroof.core.results import Result, stage_reporter
from moeroof.core.rng import generator
from moeroof.core.stats import Interval, bootstrap_replicates, confidence_of, student_t_quantile
from moeroof.core.units import GiB
from moeroof.data.points import CONDITION_COLUMNS, MEASUREMENT_SIGMA, Point, measurement_sigma, noise
from moeroof.models.knob_routing import DEFAULT_HISTORY, FAMILIES, RoutingKnobs, layer_popularity, sample_knob_trace
from moeroof.models.locality import Locality
from moeroof.models.partition import balanced_packing, contiguous_split
from moeroof.models.routing import consecutive_overlap
from moeroof.models.union import distinct_per_layer

__all__ = [
    "simulate_points_uncached",
    "MEMO_SOURCES",
    "FAMILIES",
    "KNOBS",
    "DEFAULT_HISTORY",
    "GRID",
    "ROUNDS",
    "MIN_SENSITIVITY",
    "REFIT_EVALS",
    "NULL_KNOBS",
    "RoutingKnobs",
    "Point",
    "RoutingFit",
    "tolerance",
    "history_steps",
    "layer_popularity",
    "sample_knob_trace",
    "rank_partition",
    "capacity_per_layer",
    "simulate_points",
    "identifiable",
    "fit_routing",
]

#: the knobs, in the order they are fitted when the rows allow
KNOBS = ("skew", "rho", "history", "locality")
#: grid points per knob and round of the coordinate search; rounds
GRID = 5
ROUNDS = 3
#: a knob whose move over 10 % of its box changes no scaled residual by this much is not identified
MIN_SENSITIVITY = 0.05
#: knobs whose lower bound is a null value (ρ 0: no stickiness; locality off): intervals test it
NULL_KNOBS = ("rho", "locality")
#: Levenberg–Marquardt evaluations of the polish that ends the fit and of each bootstrap refit
REFIT_EVALS = 8
#: Nelder–Mead evaluations of the polish after the coordinate search (three knobs or more)
POLISH_EVALS = 40
_DEFAULT_SKEW = {"dirichlet": 0.5, "zipf": 0.8}
#: tolerance floors where a relative tolerance would vanish (union: experts; GiB per step)
_FLOOR = {"hit_rate": 0.03, "overlap": 0.05, "union": 0.25, "gib_per_step": 0.005}


#: knobs held at a prior's values rather than fitted (:class:`RoutingKnobs` fields: ``rho``, ``c``)
_Held = dict[str, Any]


def tolerance(kind: str, measured: float) -> float:
    """τ of a row: the POINTS noise (:func:`moeroof.data.points.noise`) with a floor."""
    return max(noise(kind, measured), _FLOOR[kind])


def history_steps(history_tokens: int, streams: int) -> int:
    """Steps the cache served before the counted ones: ``ceil(history_tokens / M)``."""
    return int(math.ceil(history_tokens / max(1, int(streams))))


def rank_partition(popularity: np.ndarray, ranks: int, method: str = "lpt") -> np.ndarray | None:
    """Owner rank of each (layer, expert): None for one rank; ``lpt`` equal-cardinality LPT on
    each layer's popularity; ``id`` contiguous id ranges."""
    if ranks <= 1:
        return None
    layers, experts = popularity.shape
    if method == "id":
        return np.broadcast_to(contiguous_split(experts, ranks), (layers, experts)).copy()
    if method != "lpt":
        raise ValueError(f"partition must be 'lpt' or 'id', got {method!r}")
    return np.stack([balanced_packing(popularity[layer], ranks) for layer in range(layers)])


def capacity_per_layer(point: Point, layers: int, expert_bytes: float | None) -> float:
    """A row's cache per rank in experts per layer (``capacity_gib`` through ``expert_bytes · L``)."""
    if point.capacity_experts is not None:
        return float(point.capacity_experts)
    if point.capacity_gib is None:
        raise ValueError(f"{point.label()}: no capacity")
    if expert_bytes is None:
        raise ValueError("capacity_gib needs expert_bytes")
    return float(point.capacity_gib) * GiB / (float(expert_bytes) * layers)


def _cache_row(point, trace, popularity, warm, layers, expert_bytes, req_memo, timed) -> float:
    sim_layers, experts = popularity.shape
    owner = rank_partition(popularity, point.ranks, point.partition)
    slots = math.floor(capacity_per_layer(point, layers, expert_bytes) * sim_layers + 1e-9)
    runs = []
    for r in range(point.ranks):
        key = (point.ranks, point.partition, r)
        if key not in req_memo:
            req_memo[key] = cache.requests_from_trace(
                trace, experts, partition=owner, rank=None if owner is None else r
            )
        # static: each rank pins its most popular own experts
        own = popularity if owner is None else np.where(owner == r, popularity, 0.0)
        pinned = own.ravel() if point.policy == "static" else None
        res = cache.simulate(
            req_memo[key], slots, policy=point.policy, scope=point.scope, warmup_steps=warm, pinned=pinned
        )
        runs.append(res)
    if point.kind == "gib_per_step":
        return float(np.mean([res.misses / timed * layers / sim_layers * (expert_bytes or 0.0) / GiB for res in runs]))
    reqs = sum(res.requests for res in runs)
    return sum(res.hits for res in runs) / reqs if reqs else float("nan")


#: bytes per pick of a simulated run: the int32 trace, its cache requests (item, step and layer
#: ids) and the simulator's per-request state
BYTES_PER_PICK = 48
#: bytes per (stream, layer, expert) of one step of :func:`moeroof.models.routing.sample_trace`
#: (log weights, uniforms, scores and the kernel's rows, float64 each)
BYTES_PER_SCORE = 40


def check_sizes(
    points: Sequence[Point],
    experts: int,
    top_k: int,
    layers: int,
    *,
    seeds: int,
    timed_steps: int,
    max_sim_layers: int = 16,
    max_history: int = 2048,
) -> None:
    """Refuse, before anything is simulated, a fit whose runs cannot be held or finished:
    more than :data:`~moeroof.core.limits.MAX_FIT_SEEDS` seeds, more than
    :data:`~moeroof.core.limits.MAX_SIMULATED_STEPS` steps per run, a popularity of more than
    :data:`~moeroof.core.limits.MAX_FIT_EXPERT_CELLS` experts × simulated layers (redrawn at every
    one of the hundreds of evaluations), and a row whose run — ``ceil(max_history / M) +
    timed_steps`` steps of M streams × min(L, max_sim_layers) layers × K picks
    (:data:`BYTES_PER_PICK` each), and one step's scores over the E experts
    (:data:`BYTES_PER_SCORE` each) — does not fit in the available memory. Sizes are Python ints
    (nothing overflows); the error names the parameter, or the POINTS row."""
    if not 1 <= seeds <= MAX_FIT_SEEDS:
        raise ParameterError("seeds", f"{seeds} fit seeds is outside the sane range 1 … {MAX_FIT_SEEDS}")
    if not 1 <= timed_steps <= MAX_SIMULATED_STEPS:
        raise ParameterError(
            "timed_steps", f"{timed_steps} counted steps per run is outside the sane range 1 … {MAX_SIMULATED_STEPS}"
        )
    sim_layers = int(min(layers, max_sim_layers))
    if experts * sim_layers > MAX_FIT_EXPERT_CELLS:
        raise ParameterError(
            "experts",
            f"{experts} experts × {sim_layers} simulated layers = {experts * sim_layers} popularity entries, "
            f"more than the {MAX_FIT_EXPERT_CELLS} a fit can redraw at each of its hundreds of evaluations",
        )
    first: dict[int, Point] = {}  # the first row of each batch size
    for p in points:
        first.setdefault(int(p.batch), p)
    for m, p in first.items():
        steps = -(-int(max_history) // m) + int(timed_steps)
        where = f"row {p.row} ({p.label()})" if p.row else p.label()
        if steps > MAX_SIMULATED_STEPS:
            raise ParameterError(
                "timed_steps", f"{where}: {steps} steps per run, more than the {MAX_SIMULATED_STEPS} allowed"
            )
        try:
            check_allocation(steps * m * sim_layers * top_k, BYTES_PER_PICK, "steps × batch × layers × K of a run")
            check_allocation(m * sim_layers * experts, BYTES_PER_SCORE, "batch × layers × experts of a step")
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


def simulate_points(
    knobs: RoutingKnobs,
    points: Sequence[Point],
    experts: int,
    top_k: int,
    layers: int,
    expert_bytes: float | None = None,
    seeds: Sequence[int] = (0, 1),
    *,
    timed_steps: int = 16,
    max_sim_layers: int = 16,
) -> np.ndarray:
    """Every point simulated at the knobs, one row per seed: shape (len(seeds), len(points)).

    ``layers`` L of the model (GiB per step and ``capacity_gib`` scale with it), of which
    ``min(L, max_sim_layers)`` are simulated; ``timed_steps`` counted steps after the history.

    Memoised exactly: the rows depend on nothing but the arguments (the seeds fix every draw), so
    a call repeated in this process, or in another run with the same sources and versions
    (:data:`_MEMO`), returns the numbers simulated before, bit for bit.
    """
    points = list(points)
    sizes = dict(seeds=max(1, len(seeds)), timed_steps=int(timed_steps), max_sim_layers=max_sim_layers)
    check_sizes(points, experts, top_k, layers, **sizes, max_history=int(knobs.history_tokens))
    args = (knobs, points, experts, top_k, layers, expert_bytes, seeds, timed_steps, max_sim_layers)
    return _MEMO.array(_points_key(*args), (len(seeds), len(points)), lambda: simulate_points_uncached(*args))


#: the source files :func:`simulate_points` runs (relative to the package): the disk memo's salt
MEMO_SOURCES = ("fit/routing.py", "models/", "cachesim/", "kernels/", "core/", "data/")  # all a row can reach
#: simulated rows kept in this process and on disk between runs (:mod:`moeroof.core.memo`)
_MEMO = SourceMemo("fit-routing-points", MEMO_SOURCES)

#: forget every simulated row kept in this process, and read the disk memo's setting again
clear_memo = _MEMO.clear


def _points_key(knobs, points, experts, top_k, layers, expert_bytes, seeds, timed_steps, max_sim_layers) -> tuple:
    """Everything :func:`simulate_points` reads, as plain values (floats by ``repr``: exact)."""
    return (
        (knobs.family, float(knobs.skew), float(knobs.rho), float(knobs.c), int(knobs.history_tokens)),
        tuple(
            (p.kind, int(p.batch), _opt(p.capacity_experts), _opt(p.capacity_gib), p.policy, p.scope)
            + (int(p.ranks), p.partition)
            for p in points
        ),
        (int(experts), int(top_k), int(layers), _opt(expert_bytes)),
        tuple(int(s) for s in seeds),
        (int(timed_steps), int(max_sim_layers)),
    )


def _opt(x) -> float | None:
    return None if x is None else float(x)


def simulate_points_uncached(knobs, points, experts, top_k, layers, expert_bytes, seeds, timed_steps, max_sim_layers):
    """:func:`simulate_points`' computation, not memoised."""
    sim_layers = int(min(layers, max_sim_layers))
    out = np.full((len(seeds), len(points)), np.nan)
    for j, seed in enumerate(seeds):
        w = layer_popularity(knobs, experts, sim_layers, int(seed))
        for m in sorted({p.batch for p in points}):
            warm = history_steps(knobs.history_tokens, m)
            # generated backwards in time: the counted steps are the generator's first ones, so they
            # do not move when the history's length does (common random numbers in the history
            # too); reversing keeps every reuse interval and its distinct items, hence LRU's hits
            # every layer simulated: its first is the model's first MoE layer (no locality)
            trace = sample_knob_trace(
                knobs, w, top_k, m, warm + timed_steps, int(seed), first_layer=sim_layers == layers
            )[::-1]
            req_memo: dict[tuple, cache.Requests] = {}
            for i, p in enumerate(points):
                if p.batch != m:
                    continue
                if p.kind == "union":
                    out[j, i] = float(distinct_per_layer(trace[warm:], experts).mean())
                elif p.kind == "overlap":
                    out[j, i] = float(np.nanmean(consecutive_overlap(trace[warm:]))) / top_k
                else:
                    out[j, i] = _cache_row(p, trace, w, warm, layers, expert_bytes, req_memo, timed_steps)
    return out


# ----------------------------------------------------------------------------- which knobs


def identifiable(points: Sequence[Point], hold: Sequence[str] = ()) -> tuple[tuple[str, ...], dict[str, str]]:
    """The knobs the calibration rows can identify (fitted, in :data:`KNOBS` order) and, for
    each held knob, why (module docstring); the knobs in ``hold`` are given, neither fitted nor
    counted."""
    cal = [p for p in points if p.calibrates]
    n = len({p.conditions for p in cal})
    cache_rows = [p for p in cal if p.kind in ("hit_rate", "gib_per_step")]
    local_batches = {p.batch for p in cal if p.kind in ("hit_rate", "gib_per_step", "overlap")}
    eligible: dict[str, str] = {
        "skew": "",
        "rho": "" if local_batches else "no hit-rate, GiB or overlap row",
        "history": "" if cache_rows else "no cache row (hit_rate or gib_per_step)",
        # per-stream locality and the skew look alike in one stream's cache; with the popularity
        # given, one batch size's cache rows tell them apart
        "locality": ""
        if len(local_batches) >= 2 or ("skew" in hold and cache_rows)
        else "needs cache or overlap rows at two batch sizes or more (one stream against many)",
    }
    fitted: list[str] = []
    held: dict[str, str] = {}
    for name in KNOBS:
        if name in hold:
            continue
        if eligible[name]:
            held[name] = eligible[name]
        elif len(fitted) >= n:
            held[name] = f"only {n} distinct calibration row(s): at most {n} knob(s) fitted"
        else:
            fitted.append(name)
    return tuple(fitted), held


# ----------------------------------------------------------------------------- knob space


def _box(name: str, family: str, max_history: int) -> tuple[float, float]:
    if name == "skew":
        return (math.log(0.01), math.log(20.0)) if family == "dirichlet" else (0.0, 3.0)
    if name == "rho":
        return (0.0, 0.95)
    if name == "locality":
        return (-2.0, 1.0)
    return (0.0, math.log2(1 + max_history))


def _to_x(k: RoutingKnobs, name: str, experts: int) -> float:
    if name == "skew":
        return math.log(k.skew) if k.family == "dirichlet" else k.skew
    if name == "rho":
        return k.rho
    if name == "locality":
        return -2.0 if math.isinf(k.c) else math.log10(experts / k.c)
    return math.log2(1 + k.history_tokens)


def _set(k: RoutingKnobs, name: str, x: float, experts: int) -> RoutingKnobs:
    if name == "skew":
        return replace(k, skew=float(math.exp(x) if k.family == "dirichlet" else x))
    if name == "rho":
        return replace(k, rho=float(x))
    if name == "locality":
        # the lower end of the box (-2) stands for "off"
        return replace(k, c=math.inf if x <= -2.0 + 1e-9 else float(experts * 10.0 ** (-x)))
    return replace(k, history_tokens=int(round(2.0**x - 1)))


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class FamilyFit(Result):
    """One family's fit: knobs, scaled residual S, largest |z|, whether every calibration row is
    met within tolerance, and its knob draws and intervals (the refit parametric bootstrap;
    empty when not drawn)."""

    family: str
    knobs: RoutingKnobs
    residual: float
    max_abs_z: float
    fits: bool
    predicted: np.ndarray
    draws: tuple[RoutingKnobs, ...]
    unidentified: tuple[str, ...]
    evaluations: int
    #: 5–95 % interval of each fitted knob in its own units (``history``: tokens; ``locality``: c)
    intervals: dict[str, Interval] = field(default_factory=dict)
    #: per draw, its weight in the bands (empty: equal); set where the draws carry a prior's
    #: draws of held knobs, each refitted with them held (:func:`_prior_draws`)
    draw_weights: tuple[float, ...] = ()


@dataclass(frozen=True)
class RoutingFit(Result):
    """What :func:`fit_routing` found; :meth:`to_dict` is the ``fit-routing --json`` object."""

    family: str
    knobs: dict[str, Any]
    families: dict[str, Any]
    rows: list[dict[str, Any]]
    fitted: tuple[str, ...]
    held: dict[str, str]
    method: dict[str, str]
    experts: int
    top_k: int
    layers: int
    simulated_layers: int
    timed_steps: int
    expert_bytes: float | None
    seeds: tuple[int, ...]
    bootstrap: int
    notes: tuple[str, ...] = field(default=())
    family_fits: tuple[FamilyFit, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d.pop("family_fits")
        return d


# ----------------------------------------------------------------------------- the fit


def _search(f, x0: np.ndarray, boxes: Sequence[tuple[float, float]]) -> tuple[np.ndarray, float]:
    """Coordinate search with a parabolic refinement per knob, :data:`ROUNDS` rounds of
    :data:`GRID` points (module docstring)."""
    x = np.array(x0, dtype=float)
    best = f(x)
    lo, hi = np.array(boxes, dtype=float).T  # the boxes' lower and upper ends

    def at(j: int, v: float) -> float:
        """f with knob j moved to v."""
        y = x.copy()
        y[j] = v
        return f(y)

    for r in range(ROUNDS):
        for j in range(x.size):
            span = (hi[j] - lo[j]) / 2.5**r
            a = max(lo[j], x[j] - span / 2)
            b = min(hi[j], a + span)
            a = max(lo[j], b - span)
            pts = np.linspace(a, b, GRID)
            vals = np.array([at(j, p) for p in pts])
            k = int(np.argmin(vals))
            cand = [(vals[k], pts[k])]
            if 0 < k < GRID - 1:
                x0_, x1_, x2_ = pts[k - 1 : k + 2]
                f0, f1, f2 = vals[k - 1 : k + 2]
                den = (x1_ - x0_) * (f1 - f2) - (x1_ - x2_) * (f1 - f0)
                if den != 0:
                    v = x1_ - 0.5 * ((x1_ - x0_) ** 2 * (f1 - f2) - (x1_ - x2_) ** 2 * (f1 - f0)) / den
                    if x0_ < v < x2_:
                        cand.append((at(j, v), v))
            val, p = min(cand, key=lambda t: t[0])
            if val < best:
                best = val
                x[j] = p
    return x, best


def _polish(f, x0: np.ndarray, f0: float, boxes: Sequence[tuple[float, float]]) -> tuple[np.ndarray, float]:
    """Nelder–Mead from the coordinate search's point (simplex steps a tenth of each box, at most
    :data:`POLISH_EVALS` evaluations), clipped to the box; the coordinate search leaves narrow
    valleys between knobs unexplored."""
    from scipy.optimize import minimize

    lo, hi = np.array(boxes, dtype=float).T  # the boxes' lower and upper ends
    clipped = lambda x: f(np.clip(x, lo, hi)) + float(np.sum((x - np.clip(x, lo, hi)) ** 2))
    # a tenth of each box along each axis, inwards from the upper end
    simplex = np.vstack([x0, x0 + np.diag(0.1 * (hi - lo) * np.where(x0 < hi - 0.1 * (hi - lo), 1, -1))])
    res = minimize(
        clipped,
        x0,
        method="Nelder-Mead",
        options={"initial_simplex": simplex, "maxfev": POLISH_EVALS, "xatol": 1e-3, "fatol": 1e-4},
    )
    x = np.clip(res.x, lo, hi)
    fx = f(x)
    return (x, fx) if fx < f0 else (x0, f0)


def _levenberg_marquardt(
    resid, x0: np.ndarray, r0: np.ndarray, jac: np.ndarray, free: np.ndarray, boxes, max_evals: int
) -> tuple[np.ndarray, np.ndarray]:
    """Levenberg–Marquardt on the ``free`` coordinates from ``x0``, its Jacobian (``jac`` at the
    start) kept up to date by Broyden's rank-one updates instead of new differences: the step
    ``−(JᵀJ + λ·diag JᵀJ)⁻¹ Jᵀ r`` (a coordinate at a bound that the step pushes out is dropped
    from it), clipped to the box; λ /3 after a step that lowers S, ×4 after one that does not.
    Stops when the step is below 10⁻³ of every box or after ``max_evals`` residuals. Returns x
    and r(x)."""
    lo, hi = np.array(boxes, dtype=float).T  # the boxes' lower and upper ends
    x, r = np.array(x0, dtype=float), np.array(r0, dtype=float)
    s = _sum_sq(r)
    jac = np.array(jac, dtype=float)
    lam = 1e-2
    for _ in range(max_evals):
        act = np.array(free, dtype=bool)
        step = np.zeros_like(x)
        for _ in range(2):
            step[:] = 0.0
            if act.any():
                ja = jac[:, act]
                a = ja.T @ ja
                g = ja.T @ _finite(r)
                step[act] = -np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-9), g)
            out = act & (((x <= lo) & (step < 0)) | ((x >= hi) & (step > 0)))
            if not out.any():
                break
            act &= ~out
        xn = np.clip(x + np.where(act, step, 0.0), lo, hi)
        dx = xn - x
        if not np.all(np.isfinite(dx)) or np.all(np.abs(dx) < 1e-3 * (hi - lo)):
            break
        rn = resid(xn)
        if np.all(np.isfinite(rn)):  # Broyden: the secant along the step just taken
            jac += np.outer(rn - _finite(r) - jac @ dx, dx) / float(dx @ dx)
        if _sum_sq(rn) < s:
            x, r, s = xn, rn, _sum_sq(rn)
            lam /= 3.0
        else:
            lam *= 4.0
    return x, r


def _finite(z: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(z), z, 0.0)


def _sum_sq(z: np.ndarray) -> float:
    return float(np.sum(np.where(np.isfinite(z), z, 1e3) ** 2))


class _Problem:
    """One family's least squares on the calibration rows: the mean simulated rows at x (the
    transformed knobs) and seeds, memoised. ``model`` is (E, K, L, expert bytes), ``sim`` the
    simulation's keywords of :func:`simulate_points`, ``held`` knobs held at a prior's values."""

    def __init__(
        self,
        family: str,
        points: Sequence[Point],
        model: tuple[int, int, int, float | None],
        fitted: Sequence[str],
        start: RoutingKnobs | None,
        max_history: int,
        sim: dict[str, int],
        held: _Held | None = None,
    ) -> None:
        self.points = list(points)
        self.cal = [p for p in self.points if p.calibrates]
        self.m = np.array([p.value for p in self.cal], dtype=float)
        self.tau = np.array([tolerance(p.kind, float(v)) for p, v in zip(self.cal, self.m)])
        base = start if start is not None else RoutingKnobs(family=family, skew=_DEFAULT_SKEW[family])
        # held: knobs the rows cannot identify, held at a prior rather than at their nulls
        self.base = replace(base, family=family, **(held or {}))
        self.names = tuple(fitted)
        self.boxes = [_box(n, family, max_history) for n in self.names]
        self.lo, self.hi = np.array(self.boxes, dtype=float).reshape(-1, 2).T  # (no knob: two empty arrays)
        self.model = model
        self.sim = sim
        self.memo: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def held_at(self, held: _Held) -> _Problem:
        """The same problem with the knobs ``held`` set in its base (and a memo of its own)."""
        sub = copy.copy(self)
        sub.base, sub.memo = replace(self.base, **held), {}
        return sub

    def knobs(self, x) -> RoutingKnobs:
        k = self.base
        for name, v in zip(self.names, x):
            k = _set(k, name, float(v), self.model[0])
        return k

    def mean(self, x, seeds) -> np.ndarray:
        k = self.knobs(x)
        key = (tuple(seeds), k.skew, k.rho, k.c, k.history_tokens)
        if key not in self.memo:
            y = simulate_points(k, self.cal, *self.model, seeds, **self.sim).mean(axis=0)
            self.memo[key] = (np.array(x, dtype=float), y)
        return self.memo[key][1]

    def resid(self, seeds, m: np.ndarray | None = None, tau: np.ndarray | None = None) -> Callable:
        """x ↦ the scaled residuals ``(mean calibration rows at x − m) / tau`` (default: the
        measured rows and their tolerances)."""
        m, tau = (self.m, self.tau) if m is None else (m, tau)
        return lambda x: (self.mean(x, seeds) - m) / tau

    def polish(self, x: np.ndarray, seeds) -> tuple[np.ndarray, np.ndarray]:
        """The Levenberg–Marquardt polish from x (the Jacobian by differences at x, the knobs the
        rows move free): the polished x and its scaled residuals."""
        resid = self.resid(seeds)
        jac = _jacobian(self, x, seeds)
        return _levenberg_marquardt(resid, x, resid(x), jac, _identified(self, jac), self.boxes, REFIT_EVALS)

    def explored(self, seeds) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every (x, mean calibration rows) evaluated at ``seeds`` so far."""
        return [v for key, v in self.memo.items() if key[0] == tuple(seeds)]

    def x_of(self, k: RoutingKnobs) -> np.ndarray:
        return np.array([min(max(_to_x(k, n, self.model[0]), b[0]), b[1]) for n, b in zip(self.names, self.boxes)])


def _jacobian(prob: _Problem, x: np.ndarray, seeds) -> np.ndarray:
    """d(ȳ/τ)/dx at x by one-sided differences of 10 % of each box (inwards at a bound)."""
    y0 = prob.mean(x, seeds)
    jac = np.zeros((len(prob.cal), len(prob.names)))
    for j in range(len(prob.names)):
        h = 0.1 * (prob.hi[j] - prob.lo[j])
        step = h if x[j] + h <= prob.hi[j] else -h
        y = x.copy()
        y[j] += step
        jac[:, j] = (prob.mean(y, seeds) - y0) / prob.tau / step
    return np.nan_to_num(jac)


def _to_units(prob: _Problem, name: str, low_x: float, high_x: float, level: float, method: str) -> Interval:
    """A knob's interval [low_x, high_x] on the transformed scale, in the knob's own units."""
    if name == "history":  # whole tokens, outwards
        return Interval(
            float(math.floor(2.0**low_x - 1 + 1e-9)), float(math.ceil(2.0**high_x - 1 - 1e-9)), level, method
        )
    a, b = (_knob_value(_set(prob.base, name, x, prob.model[0]), name) for x in (low_x, high_x))
    # locality: a larger x is a smaller c (the box's lower end: off)
    return Interval(min(a, b), max(a, b), level, method)


def _fit_family(
    family: str, points: Sequence[Point], model: tuple, *, fitted, start, seeds, sim, max_history, held=None
) -> tuple[_Problem, FamilyFit]:
    """One family's fit to the calibration points (module docstring, the fit), without its
    bootstrap (:func:`_bootstrap`); ``predicted`` is every point at the fitted knobs, mean over
    ``seeds``."""
    prob = _Problem(family, points, model, fitted, start, max_history, sim, held)
    names, boxes = prob.names, prob.boxes
    mean_z = prob.resid(seeds)
    objective: Callable[[np.ndarray], float] = lambda x: _sum_sq(mean_z(x))
    x_hat = prob.x_of(prob.base)
    if names:
        # two starts: the defaults, and a sticky, warm one (the middle of the ρ and history boxes);
        # a coordinate search alone can settle in a cold-cache valley
        alt = np.where([n in ("rho", "history") for n in names], 0.5 * (prob.lo + prob.hi), x_hat)
        starts = [x_hat] + ([alt] if len(names) > 2 and not np.array_equal(alt, x_hat) else [])
        x_hat, s = min((_search(objective, x, boxes) for x in starts), key=lambda t: t[1])
        if len(names) > 1:
            x_hat, s = _polish(objective, x_hat, s, boxes)
        # the Levenberg–Marquardt polish the bootstrap's refits end with: the estimator they replay
        x_hat, _ = prob.polish(x_hat, seeds)
    s = objective(x_hat)
    z = mean_z(x_hat)
    predicted = simulate_points(prob.knobs(x_hat), prob.points, *prob.model, seeds, **prob.sim).mean(axis=0)
    max_abs_z = float(np.max(np.abs(z))) if z.size else 0.0
    fits = bool(np.all(np.isfinite(z)) and max_abs_z <= 1.0)
    return prob, FamilyFit(family, prob.knobs(x_hat), float(s), max_abs_z, fits, predicted, (), (), len(prob.memo))


def _identified(prob: _Problem, jac: np.ndarray) -> np.ndarray:
    """Knobs whose move over 10 % of their box changes some scaled residual by MIN_SENSITIVITY."""
    sens = np.abs(jac).max(axis=0) * 0.1 * (prob.hi - prob.lo) if jac.size else np.zeros(len(prob.names))
    return sens >= MIN_SENSITIVITY


def _replicate_measurement(prob: _Problem, ff: FamilyFit, seeds: tuple[int, ...], y_hat: np.ndarray, b: int):
    """The b-th replicate measurement of the refit parametric bootstrap at θ̂ (a seed no fit uses),
    with the fit seeds' own error swapped for that of n fresh seeds: ȳ(θ̂) + y(θ̂; s_b) −
    ȳ(θ̂; fresh seeds); and that noise in τ units."""
    y_b = simulate_points(ff.knobs, prob.cal, *prob.model, [10_000 + 97 * b], **prob.sim)[0]
    fresh = [50_000 + 1_000 * b + i for i in range(len(seeds))]
    y_f = simulate_points(ff.knobs, prob.cal, *prob.model, fresh, **prob.sim).mean(axis=0)
    return y_hat + y_b - y_f, _finite((y_b - y_f) / prob.tau)


def _refit(prob: _Problem, seeds: tuple[int, ...], jac: np.ndarray, ok: np.ndarray, explored, replicate):
    """One replicate measurement refitted (module docstring, Intervals): from the best of every
    knob set the fit evaluated (they hold the other valleys), then the Levenberg–Marquardt
    polish; the refitted knobs (transformed scale) and the replicate's noise, end to end."""
    m_b, noise_b = replicate
    tau_b = np.array([tolerance(p.kind, v) if np.isfinite(v) else t for p, v, t in zip(prob.cal, m_b, prob.tau)])
    x0, y0 = min(explored, key=lambda v: _sum_sq((v[1] - m_b) / tau_b))
    jac_b = jac * (prob.tau / tau_b)[:, None]
    resid = prob.resid(seeds, m_b, tau_b)
    x_b, _ = _levenberg_marquardt(resid, x0, (y0 - m_b) / tau_b, jac_b, ok, prob.boxes, REFIT_EVALS)
    return np.concatenate([x_b, noise_b])


def _bootstrap(prob: _Problem, ff: FamilyFit, seeds, bootstrap: int, level: tuple[float, float]) -> FamilyFit:
    """The refit parametric bootstrap (module docstring): B knob draws and the intervals."""
    names = prob.names
    if not names or bootstrap <= 0:
        return ff
    x_hat = prob.x_of(ff.knobs)
    jac = _jacobian(prob, x_hat, seeds)
    ok = _identified(prob, jac)
    y_hat = prob.mean(x_hat, seeds)
    explored = prob.explored(seeds)  # the fit's own evaluations: the refits start from the best
    out = bootstrap_replicates(
        lambda rep: _refit(prob, seeds, jac, ok, explored, rep),
        bootstrap,
        draw=lambda b: _replicate_measurement(prob, ff, seeds, y_hat, b),
    )
    xs, noise = out[:, : len(names)].copy(), out[:, len(names) :].copy()  # (B, knobs), (B, rows)

    # intervals: x̂ + t_B(level) · (root mean square of x*_b − x̂) on the transformed scale, clipped
    t_lo, t_hi = (float(v) for v in student_t_quantile(level, bootstrap))
    sd = np.sqrt(np.mean((xs - x_hat) ** 2, axis=0))
    low_x = np.where(ok, np.clip(x_hat + t_lo * sd, prob.lo, prob.hi), prob.lo)
    high_x = np.where(ok, np.clip(x_hat + t_hi * sd, prob.lo, prob.hi), prob.hi)
    # a null value (no stickiness, no per-stream locality) is a bound of the box, where the
    # estimator piles up and the refits' spread at θ̂ understates how far it strays: the null
    # joins the interval when its profile (the other knobs refitted with it held) rises above
    # S(θ̂) by no more than the interval's end would on the quadratic model, (t · sd)² / (JᵀJ)⁻¹_jj,
    # sd the larger of the refits' and the linear one, J⁺ Σ J⁺ᵀ (Σ the replicates' noise, /τ)
    cov, lin = np.zeros((2, len(names), len(names)))
    if ok.any():
        pinv = np.linalg.pinv(jac[:, ok])
        cov[np.ix_(ok, ok)] = pinv @ pinv.T
        lin[np.ix_(ok, ok)] = pinv @ (noise.T @ noise / bootstrap) @ pinv.T

    real = prob.resid(seeds)
    s_hat = _sum_sq(real(x_hat))
    for j, name in enumerate(names):
        if name not in NULL_KNOBS or not ok[j] or low_x[j] <= prob.lo[j] or cov[j, j] <= 0:
            continue
        others = np.arange(len(names)) != j
        starts = [x for x, _ in prob.explored(seeds) if x[j] <= prob.lo[j]] + [np.where(others, x_hat, prob.lo[j])]
        x0 = min(starts, key=lambda x: _sum_sq(real(x)))
        _, r_null = _levenberg_marquardt(real, x0, real(x0), jac, ok & others, prob.boxes, REFIT_EVALS)
        if _sum_sq(r_null) - s_hat <= t_lo**2 * max(sd[j] ** 2, lin[j, j]) / cov[j, j]:
            low_x[j] = prob.lo[j]
    how = f"refit parametric bootstrap, fitted value + Student t quantile x rms deviation, {bootstrap} replicates"
    intervals = {
        name: _to_units(prob, name, float(low_x[j]), float(high_x[j]), confidence_of(level), how)
        for j, name in enumerate(names)
    }
    # the draws: the refits' knob sets, a knob the rows do not identify drawn anywhere in its box
    rng = generator(int(seeds[0]), "bootstrap")
    for x in xs:
        x[~ok] = rng.uniform(prob.lo[~ok], prob.hi[~ok])  # one draw per knob, in order, as one by one
    return replace(
        ff,
        draws=tuple(prob.knobs(x) for x in xs),
        unidentified=tuple(n_ for n_, good in zip(names, ok) if not good),
        intervals=intervals,
    )


def _prior_draws(
    prob: _Problem, ff: FamilyFit, seeds, pairs: Sequence[tuple[float, float]], held: Sequence[str]
) -> FamilyFit:
    """The draws of a family whose held knobs come from a prior: for each prior draw ``(ρ_b,
    c_b/E)``, the held knobs set to it and the fitted ones refitted with them held (the
    Levenberg–Marquardt polish from θ̂: a profile of the calibration rows), weighted by
    ``w_b ∝ exp(−S_b / 2)``, ``S_b`` the refit's scaled residual — the prior conditioned on the
    rows (importance weights), without charging a draw for the other knobs it would move."""
    e = int(prob.model[0])
    x_hat = prob.x_of(ff.knobs)
    draws, s_b = [], []
    for r_b, c_b in pairs:
        drawn = {"rho": float(r_b), "locality": float(c_b) * e}  # inf (off) stays inf
        sub = prob.held_at({"c" if name == "locality" else name: drawn[name] for name in held})
        x_b, r = sub.polish(x_hat, seeds) if prob.names else (x_hat, sub.resid(seeds)(x_hat))
        draws.append(sub.knobs(x_b))
        s_b.append(_sum_sq(r))
    s_arr = np.array(s_b)
    w = np.exp(-0.5 * (s_arr - np.nanmin(s_arr)))
    w = np.where(np.isfinite(w), w, 0.0)
    return replace(ff, draws=tuple(draws), draw_weights=tuple(float(v) for v in w))


def _knob_value(k: RoutingKnobs, name: str) -> float:
    return {"skew": k.skew, "rho": k.rho, "locality": k.c, "history": float(k.history_tokens)}[name]


_KNOB_KEYS = {"skew": "skew", "rho": "rho", "locality": "locality_c", "history": "history_tokens"}


def _sigma_words() -> str:
    """:data:`moeroof.data.points.MEASUREMENT_SIGMA` as the bands' description says it."""
    return ", ".join(
        f"{kind} {100 * a:g} points" if a else f"{kind} {100 * r:g} %" for kind, (a, r) in MEASUREMENT_SIGMA.items()
    )


def _bands(contributing, best, points, model: tuple[int, int, int, float | None], level, sim) -> Interval:
    """Bands (module docstring), an interval per point: per family, its prediction ± t_B × the root
    mean square of (a draw's simulated row − the prediction) with a new measurement's noise σ
    (:func:`moeroof.data.points.measurement_sigma`) in quadrature; the envelope over the families and
    the chosen prediction; hit rates and overlaps clipped to [0, 1], the others to ≥ 0. A family
    whose draws carry a prior's draws of held knobs weights them by its ``draw_weights``
    (:func:`_prior_draws`: the prior conditioned on the calibration rows)."""
    low = np.array(best.predicted, dtype=float)
    high = low.copy()
    for f in contributing:
        predicted = np.array(f.predicted, dtype=float)
        # a new measurement's own noise (data.points.MEASUREMENT_SIGMA), beside the draws' spread
        sigma = np.array([measurement_sigma(p.kind, v) for p, v in zip(points, predicted)])
        rms, n_eff = np.zeros_like(predicted), math.inf
        if f.draws:
            ys = np.concatenate(
                [simulate_points(kb, points, *model, [20_000 + 89 * b], **sim) for b, kb in enumerate(f.draws)]
            )
            ok = np.isfinite(ys)
            w = np.asarray(f.draw_weights, dtype=float) if f.draw_weights else np.ones(len(ys))
            dev2 = np.where(ok, ys - f.predicted, 0.0) ** 2
            rms = np.sqrt((w[:, None] * dev2).sum(axis=0) / np.maximum((w[:, None] * ok).sum(axis=0), 1e-300))
            # weighted draws count as their effective number (Kish: (Σw)² / Σw²), not as all of them
            n_eff = float(w.sum() ** 2 / max(float((w**2).sum()), 1e-300))
        t_lo, t_hi = student_t_quantile(level, max(n_eff, 1.0))  # the normal's without draws (n_eff inf)
        spread = np.sqrt(rms**2 + sigma**2)
        low = np.fmin(low, predicted + t_lo * spread)
        high = np.fmax(high, predicted + t_hi * spread)
    unit = np.array([p.kind in ("hit_rate", "overlap") for p in points])
    how = (
        "envelope over the families that fit of prediction + Student t quantile x rms deviation of its bootstrap "
        "draws with a new measurement's noise in quadrature"
    )
    return Interval(np.maximum(low, 0.0), np.where(unit, np.minimum(high, 1.0), high), confidence_of(level), how)


def _fit_families(
    families: Sequence[str],
    points: list[Point],
    model: tuple[int, int, int, float | None],
    kw: dict[str, Any],
    bootstrap: int,
    level: tuple[float, float],
    prior: tuple[list[tuple[float, float]], tuple[str, ...], dict[str, str], Locality | None],
    report: Callable[[str], None],
    notes: list[str],
) -> tuple[list[FamilyFit], int, list[int]]:
    """Each family's fit, the best family's index and those that fit the rows (the best alone,
    with a note, when none does; a note for each that cannot); ``model`` is (E, K, L, expert
    bytes). The bootstrap only where its draws are used (the families of the bands and the best
    one), and there, with the locality prior's draws ``prior`` (draws, fitted, held, the prior),
    those draws."""
    problems = []
    for family in families:
        report(f"{family}: fit")
        problems.append(_fit_family(family, points, model, **kw))
    best_i = min(range(len(problems)), key=lambda i: problems[i][1].residual)
    chosen = [i for i, (_, f) in enumerate(problems) if f.fits]
    if not chosen:
        chosen = [best_i]
        notes.append(
            f"no family meets every calibration row within tolerance; the bands come from the best "
            f"({problems[best_i][1].family}) alone"
        )
    prior_pairs, fitted, held, locality = prior
    held_names = [n for n in ("rho", "locality") if n not in fitted and n in held]
    fits = []
    for i, (prob, f) in enumerate(problems):
        used = i in chosen or i == best_i
        report(f"{f.family}: bootstrap ({bootstrap})" if used else f"{f.family}: no bootstrap")
        if used:
            f = _bootstrap(prob, f, kw["seeds"], int(bootstrap), level)
        if used and prior_pairs:  # the held knobs drawn from the prior, the fitted ones refitted with each draw
            f = _prior_draws(prob, f, kw["seeds"], prior_pairs, held_names)
        fits.append(f)
    if prior_pairs:
        assert locality is not None
        notes.append(
            f"{' and '.join(held_names)} held at the {locality.label} (the rows cannot identify them); the bands "
            "include its spread: each of its draws with the fitted knobs refitted, weighted by the calibration rows"
        )
    notes.extend(
        f"{f.family} cannot fit the calibration rows: its best miss is {f.max_abs_z:.2g} tolerances "
        f"(residual {f.residual:.3g})"
        for f in fits
        if not f.fits
    )
    return fits, best_i, chosen


def _knob_entries(
    best: Any,
    fitted: tuple[str, ...],
    held: dict[str, str],
    locality: Locality | None,
    quantiles: tuple[Any, Any] | None,
    experts: int,
    notes: list[str],
) -> dict[str, Any]:
    """The knobs of the chosen family with their intervals (the locality prior's where it holds
    them: ``quantiles``), whether each is identified and why not."""
    knobs: dict[str, Any] = {}
    for name in KNOBS:
        value = _knob_value(best.knobs, name)
        low, high = map(float, best.intervals[name]) if name in best.intervals else (value, value)
        entry: dict[str, Any] = {"value": value, "fitted": name in fitted, "low": low, "high": high}
        if locality is not None and quantiles is not None and name in ("rho", "locality") and name not in fitted:
            lo_q, hi_q = quantiles
            j, scale = (0, 1.0) if name == "rho" else (1, float(experts))
            entry.update(low=float(lo_q[j]) * scale, high=float(hi_q[j]) * scale, prior=locality.label)
        if name == "skew":
            entry["parameter"] = best.knobs.skew_name
        if name == "locality":
            entry["off"] = math.isinf(best.knobs.c)
            entry["note"] = "c of Dirichlet(c·w) per stream; null = off (infinite)"
        if name in held:
            entry["held"] = held[name]
        if name in best.unidentified:
            entry["unidentified"] = "the calibration rows barely move it: its interval is its whole search box"
            notes.append(f"{name}: not identified by the calibration rows (interval = its search box)")
        # one meaning with fit-plan: identified = fitted to a bounded interval, and a why when not
        entry["identified"] = name in fitted and name not in best.unidentified
        if not entry["identified"]:
            entry["why"] = entry.get("unidentified") or entry.get("held") or "held, not fitted"
        knobs[_KNOB_KEYS[name]] = entry
    return knobs


def _family_summaries(fits: list, contributing: list) -> dict[str, dict[str, Any]]:
    """Each family's fit in brief: its residual, whether it fits, its knobs, whether it is in the bands."""
    return {
        f.family: {
            "residual": f.residual,
            "max_abs_z": f.max_abs_z,
            "fits": f.fits,
            "knobs": {
                "skew": f.knobs.skew,
                "rho": f.knobs.rho,
                "locality_c": f.knobs.c,
                "history_tokens": f.knobs.history_tokens,
            },
            "label": f.knobs.label(),
            "contributes_to_bands": any(f is c for c in contributing),
            "evaluations": f.evaluations,
        }
        for f in fits
    }


def _prediction_rows(points: list[Point], best: Any, band: Any) -> list[dict[str, Any]]:
    """Every point with the best family's prediction and the bands."""
    return [
        {"row": p.row, **dict(zip(CONDITION_COLUMNS, p.conditions)), "calibrates": p.calibrates, "measured": p.value}
        | {"predicted": float(best.predicted[i]), "low": float(band.low[i]), "high": float(band.high[i])}
        for i, p in enumerate(points)
    ]


def _method(level: tuple[float, float], bootstrap: int) -> dict[str, str]:
    """How :func:`fit_routing` fits, in words."""
    pct = f"{100 * level[0]:g}-{100 * level[1]:g} %"
    return {
        "fit": "least squares S = sum(((mean over seeds of simulated row - measured) / tolerance)^2) by a "
        "coordinate search (grid + parabolic step per knob, span shrinking 2.5x per round), Nelder-Mead and a "
        "Levenberg-Marquardt polish at fixed seeds (common random numbers); one fit per family, the least S chosen",
        "tolerance": "hit_rate 0.03, overlap 0.05, union 5 % (>= 0.25), gib_per_step 10 % (>= 0.005 GiB); "
        "a family fits when every calibration row is within its tolerance",
        "intervals": f"{pct} of a refit parametric bootstrap ({int(bootstrap)} replicates): replicate "
        "measurements at the fitted knobs (one run at a seed no fit uses, plus the fit seeds' own noise), each "
        "refitted (best evaluated knob set, then the same polish); fitted value + Student t quantile x root mean "
        "square of the refits' deviations on the fit's scale (log skew, rho, log2(1 + history), log10(E/c)). "
        "Covers the measurement noise of one run and of the fit seeds at these seeds, not the family choice",
        "bands": f"{pct} of a new measurement: per family that fits, its prediction + Student t quantile x the "
        "root mean square deviation of its bootstrap draws, each simulated at its own seed (parameter + run-to-run "
        f"noise), with one measurement's noise in quadrature ({_sigma_words()}); the envelope over the families "
        "(family uncertainty)",
    }


def _fit_setup(
    points: Sequence[Point],
    model: tuple[int, int, int, float | None],
    seeds: Sequence[int],
    sim: dict[str, int],
    max_history: int,
    popularity: RoutingKnobs | None,
    locality: Locality | None,
    level: tuple[float, float],
    bootstrap: int,
) -> tuple[list[Point], tuple[str, ...], dict[str, str], Any, list[tuple[float, float]], dict]:
    """:func:`fit_routing`'s checks and what its fits share: the points, the fitted and held knobs
    (with why: a given popularity holds the skew), the locality prior's quantiles and draws, and
    the keywords of :func:`_fit_family`. ``model`` is (E, K, L, expert bytes), ``sim`` the
    simulation's keywords (timed steps, simulated layers).

    ``locality`` (:class:`moeroof.models.locality.Locality`, the locality prior fitted on real
    decode) holds ρ and ``c`` where the rows cannot identify them at its centre instead of at 0
    and off (saying so in ``held``), and :func:`fit_routing` pairs each bootstrap draw with one of
    its draws, so that its spread goes into the bands; its quantiles at ``level`` are the held
    knobs' intervals. Without a prior (None): nothing held, no draws, no quantiles."""
    experts, top_k, layers, _ = model
    points = list(points)
    if not points or not any(p.calibrates for p in points):
        raise ValueError("no calibration point: at least one point needs a value")
    check_sizes(
        points,
        int(experts),
        int(top_k),
        int(layers),
        seeds=len(seeds),  # before the seeds are listed: a range of 10^9 is not made a tuple
        timed_steps=int(sim["timed_steps"]),
        max_sim_layers=sim["max_sim_layers"],
        max_history=max_history,
    )
    fitted, held = identifiable(points, hold=("skew",) if popularity is not None else ())
    if popularity is not None:
        held["skew"] = f"given: the routing's popularity ({popularity.skew_name} = {popularity.skew:.3g}), not fitted"
    held_values: _Held = {}
    prior_pairs, quantiles = [], None
    if locality is not None:
        rho_c, c_c = locality.centre_for(int(experts), int(top_k))
        quantiles = locality.quantiles_for([level[0], level[1]], int(experts), int(top_k))
        lo_q, hi_q = quantiles
        if "rho" not in fitted:
            held_values["rho"] = rho_c
            held["rho"] = (
                held.get("rho", "not identified")
                + f"; held at the {locality.label}: centre {rho_c:.3g} (5–95 % {lo_q[0]:.2g}–{hi_q[0]:.2g}), in the bands"
            )
        if "locality" not in fitted:
            held_values["c"] = c_c * int(experts)  # inf (off) stays inf
            held["locality"] = (
                held.get("locality", "not identified")
                + f"; held at the {locality.label}: centre a hot set of {locality.centre[1]:.2g}·K experts "
                + ("(off for this model)" if math.isinf(c_c) else f"(c = {c_c:.3g}·E)")
                + ", its spread in the bands"
            )
        # the prior's draws lie on one curve (least to most local): 16 points sample it finely
        # enough that the draws the calibration rows weight up are not one or two
        prior_pairs = locality.draws_for(max(int(bootstrap), 16), int(experts), int(top_k)) if held_values else []
    ints = tuple(int(s) for s in seeds)
    kw = dict(held=held_values, fitted=fitted, start=popularity, seeds=ints, sim=sim, max_history=max_history)
    return points, fitted, held, quantiles, prior_pairs, kw


def fit_routing(
    points: Sequence[Point],
    experts: int,
    top_k: int,
    layers: int,
    expert_bytes: float | None = None,
    *,
    families: Sequence[str] = FAMILIES,
    seeds: Sequence[int] = (0, 1),
    bootstrap: int = 8,
    timed_steps: int = 16,
    max_sim_layers: int = 16,
    max_history: int = 2048,
    level: tuple[float, float] = (0.05, 0.95),
    progress: Callable[[int, int, str], None] | None = None,
    popularity: RoutingKnobs | None = None,
    locality: Locality | None = None,
) -> RoutingFit:
    """Fit the routing knobs jointly to the calibration points (rows with a value), one fit per
    family, and predict every point with 5–95 % bands (module docstring for the method).

    ``popularity``, when given, is the routing's popularity known from elsewhere (its family and
    skew, e.g. fitted to the model's routing histogram): only that family is fitted, its skew is
    held there, and the rows go to the locality knobs (ρ, history, ``c``).

    ``locality``, when given, is the locality prior: :func:`_fit_setup`.

    ``progress(done, total, what)``, when given, is called as each stage starts (a family's fit,
    its bootstrap, the bands) and at the end; it changes no result."""
    if popularity is not None:
        families = (popularity.family,)
    report = stage_reporter(progress, 2 * len(families) + 1)
    model = (experts, top_k, layers, expert_bytes)
    sim = dict(timed_steps=timed_steps, max_sim_layers=max_sim_layers)
    points, fitted, held, quantiles, prior_pairs, kw = _fit_setup(
        points, model, seeds, sim, max_history, popularity, locality, level, bootstrap
    )
    notes: list[str] = []
    prior = (prior_pairs, fitted, held, locality)
    fits, best_i, chosen = _fit_families(families, points, model, kw, bootstrap, level, prior, report, notes)
    report("bands")
    best = fits[best_i]
    contributing = [fits[i] for i in chosen]
    band = _bands(contributing, best, points, model, level, sim)
    knobs = _knob_entries(best, fitted, held, locality, quantiles, experts, notes)
    report("done")
    return RoutingFit(
        family=best.family,
        knobs=knobs,
        families=_family_summaries(fits, contributing),
        rows=_prediction_rows(points, best, band),
        fitted=fitted,
        held=held,
        method=_method(level, bootstrap),
        experts=int(experts),
        top_k=int(top_k),
        layers=int(layers),
        simulated_layers=int(min(layers, max_sim_layers)),
        timed_steps=int(timed_steps),
        expert_bytes=None if expert_bytes is None else float(expert_bytes),
        seeds=kw["seeds"],
        bootstrap=int(bootstrap),
        notes=tuple(notes),
        family_fits=tuple(fits),
    )
