"""Seed 003's expert-cache ladder: calibrated synthetic GLM-5-NVFP4 traces, the two-rank cache
experiment, the fit of the routing knobs and the predictions of the withheld rows.

**The model.** GLM-5 with NVFP4 experts: E = 288 routed experts, top-K = 8 (seed 003, witnessed),
L MoE layers (seed 003 does not give L; the ``glm-5-nvfp4`` preset assumes 75 as for GLM-5.2).
One rank's 144 experts are 91 GiB (witnessed), so one (layer, expert) item is

    e = 91 GiB / 144 / L            (9.05 MB at L = 75)

and every quantity in GiB here (cache sizes, GiB streamed per step) is independent of L: a cache
of C GiB holds ``C / 91 · 144`` experts per layer whatever L is. L changes only how many
independent layers the statistics average over.

Routing (:func:`sample_ladder_trace`, through :func:`moeroof.models.routing.sample_trace`): per layer a
popularity w (``dirichlet``: ``w ~ Dirichlet(α·1)`` drawn per layer — the default, see below;
or ``zipf``: ``w ∝ rank^−s`` with a random rank permutation per layer); M streams, each decoding
its own token sequence (the seed's distinct-token workload: stream i is fed token 100 + 997·i);
each token picks K experts by Plackett–Luce on w; stickiness ρ keeps each of a stream's previous
K experts with probability ρ; the cross-agent knob c (``scope="step"``, one task group: the M
streams of a step share ``q ~ Dirichlet(c·w)``) is ∞ (off) by default — the fit below has no
need of it, and a finite c lowers the one-step union far below the seed's "about 50" (c = 30
already gives about 37 at M = 8 for Zipf s = 0.7 layers).

The experiment (:func:`run_cases`, seed 003's protocol): 3 warm-up + 10 timed decode steps, hit
rate and bytes over the 10 timed steps. A *pair* is two ranks with the contiguous id split
(experts 0–143 on rank 0, 144–287 on rank 1), a *booster* one rank owning all 288; each rank has
its own cache of C GiB (LRU by default; capacity in bytes, one cache shared by all layers —
global scope). A decode step requests, layer by layer in layer order, the union of the step's
experts that the rank owns (:func:`moeroof.cachesim.requests_from_trace`). A hit is counted per
requested (layer, expert) item of that union, not per token-route.

**Which "GiB streamed/step" the seed publishes: per rank.** With the hit rate counted over the
union, a rank streams ``(1 − h) · U_rank · L · e = (1 − h) · U_rank · 91/144 GiB`` per step.
The 20 GiB point (52.5 %, 7.02 GiB) gives ``U_rank = 7.02 / (0.475 · 0.632) = 23.4`` experts per
layer; the 80 GiB point (98.3 %, 0.25 GiB) gives 23.3 — the same, and twice that (46.7) is the
seed's "about 50" distinct experts per layer at M = 8. Read as the sum over both ranks, the
same numbers would mean a union of 23 per layer for the pair, contradicting "about 50". So the
published figure is GiB per rank per step (the mean of the two ranks; they are near equal under
an id split), and so is :attr:`CaseResult.gib_streamed_per_step`; a booster's is its only rank.
Counting hits per token-route instead (M·K/2 = 32 per rank and layer) fits neither point.

**The cache must have been warm.** Started empty, 13 steps of M = 8 cannot reach 98.3 % at
80 GiB: a rank's layer touches ~23 experts a step, but far more than that over 13 steps, and
every first touch misses — cold, the 80 GiB hit rate stays near 85–90 % for any skew and
stickiness that match the 20 GiB point. So the model gives the cache a history: before the 3
warm-up steps it has served ``history_tokens`` earlier tokens of the same workload
(``ceil(history_tokens / M)`` steps of M streams). The history sets the 80 GiB hit rate almost
alone (the cold tail: which experts were ever seen); its value is fitted, and it is an
*effective* warmth, not a measured one (earlier runs, a parity decode, or a preload could each
have warmed the cache). Counting the history in tokens makes the cache's coverage of the experts
the same at every M; counting it in steps of the case's own M is the other reading
(``history_unit="steps"``) and is shown beside it as a sensitivity.

**Why Dirichlet, not Zipf.** With the union pinned at ≈ 47 (U_rank ≈ 23.4), Zipf layers keep a
tail warm enough that even a long-warmed 80 GiB LRU misses 4–6 % (hit ≤ 96 %); a Dirichlet
layer's tail is much colder (the least popular 12.5 % of experts carry under 1 % of the picks at
α = 1, against about 2 % for Zipf s = 1), and it reaches 98.3 %. :func:`fit_knobs` fits either.

**The fit** (:func:`fit_knobs`, sequential, each step a 1-D interpolation on a small grid at
fixed seeds, common random numbers): (1) the skew from the per-layer union at M = 8 (which ρ
and the history do not move); (2) ρ from the 20 GiB hit rate at that skew; (3) the history
from the 80 GiB hit rate. The targets are :data:`CALIBRATION` only — the withheld rows are
predicted, never fitted. Bands (:func:`summarize`) are 5–95 % over seeds: each seed redraws the
layers' popularity and the routing, i.e. the spread a re-run of the 10-step experiment on an
equally skewed model would show; :func:`predict` over :data:`FITTED_DRAWS` (a parametric
bootstrap of the fit, :func:`bootstrap_knobs`) adds the parameter uncertainty. Neither band
covers the model's structural choices (popularity family, what the history means, L); the
notebook shows those as sensitivities beside the bands.

**The general fitter** (:func:`fit_routing_predictions`): the same public rows as
``moeroof fit-routing`` points (:func:`public_points`: hit rate and GiB/step at 20 and 80 GiB,
the union of 50 across both ranks; the withheld cases as empty rows), fitted by
:func:`moeroof.fit.routing.fit_routing` and predicted with its bands (parameter,
run-to-run and family); :func:`write_fit_routing_predictions` writes them with their bands.
:func:`fit_knobs` stays as the seed-specific reference; the distance between the two
calibrations is shown as a structural band. **The answer** (:func:`answer_rows`, written by
:func:`write_predictions` to predictions.csv with the method of each row): the cases at the
calibration's M from :func:`fit_knobs`, those at another M from the general fit, since the
seed-specific knobs hold no per-stream locality, which rows at one M cannot identify.

Sources: seed 003 (docs/sources.md) for every witnessed number;
Mattson et al. 1970 for the stack distances behind :func:`moeroof.cachesim.lru_hit_curve`.
"""

from __future__ import annotations

import csv
import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from moeroof import cachesim as cache
from moeroof.core import atomic, paths
from moeroof.core.masks import ids_or
from moeroof.core.memo import SourceMemo
from moeroof.core.results import Result
from moeroof.core.rng import generator
from moeroof.core.stats import Interval, bootstrap_replicates, percentile_interval
from moeroof.core.units import GiB
from moeroof.data.points import Point
from moeroof.fit.routing import RoutingFit, fit_routing
from moeroof.models.routing import Dirichlet, Zipf, sample_trace
from moeroof.models.union import distinct_per_layer

__all__ = [
    "CASES_MEMO",
    "CASES_SOURCES",
    "run_cases_uncached",
    "EXPERTS",
    "TOP_K",
    "RANK_EXPERTS",
    "RANK_EXPERT_BYTES",
    "ASSUMED_LAYERS",
    "WARMUP_STEPS",
    "TIMED_STEPS",
    "UNION_PUBLISHED",
    "Knobs",
    "FITTED",
    "FITTED_DRAWS",
    "Case",
    "Target",
    "CALIBRATION",
    "PREDICTION_CASES",
    "CASE_COLUMNS",
    "PREDICTIONS_COLUMNS",
    "CALIBRATION_STREAMS",
    "CaseResult",
    "Band",
    "FitResult",
    "expert_bytes",
    "capacity_experts",
    "implied_rank_union",
    "partition",
    "history_steps",
    "sample_ladder_trace",
    "run_cases",
    "summarize",
    "predict",
    "fit_knobs",
    "bootstrap_knobs",
    "LadderCurve",
    "ladder_curve",
    "predictions_path",
    "write_predictions",
    "answer_rows",
    "HELD_OUT",
    "WITHHELD_CASES",
    "FIT_ROUTING_COLUMNS",
    "public_points",
    "RoutingPredictions",
    "fit_routing_predictions",
    "write_fit_routing_predictions",
]

#: routed experts per MoE layer (seed 003 setup, witnessed)
EXPERTS = 288
#: experts per token (seed 003 setup, witnessed)
TOP_K = 8
#: experts per rank under the 144/144 split (seed 003)
RANK_EXPERTS = 144
#: one rank's 144 experts, all layers: 91 GiB (seed 003, witnessed)
RANK_EXPERT_BYTES = 91.0 * GiB
#: MoE layers: not in seed 003; the glm-5-nvfp4 preset assumes GLM-5.2's 75 (assumed)
ASSUMED_LAYERS = 75
#: seed 003 timing protocol: 3 warm-up + 10 timed decode steps per M (witnessed)
WARMUP_STEPS = 3
TIMED_STEPS = 10
#: "about 50" distinct experts per layer at M = 8, distinct tokens, across both ranks (seed 003)
UNION_PUBLISHED = 50.0


@dataclass(frozen=True)
class Knobs:
    """Routing knobs of a synthetic GLM-5-NVFP4 trace and the cache's warmth.

    ``family``: ``"dirichlet"`` (``skew`` = α, per-layer ``Dirichlet(α·1)`` popularity; smaller
    is more skewed) or ``"zipf"`` (``skew`` = s, ``rank^−s`` with a random rank permutation
    per layer). ``rho``: stickiness. ``c``: cross-agent concentration (``scope="step"``, one
    group; ``inf`` = off). ``history_tokens``: tokens of the same workload the cache served
    before the 3 warm-up steps; ``history_unit="tokens"`` turns them into ``ceil(h / M)`` steps
    at M streams, ``"steps"`` reads ``history_tokens / 8`` as steps at every M (the M = 8 steps
    it was fitted as).
    """

    family: str = "dirichlet"
    skew: float = 0.3153
    rho: float = 0.1699
    history_tokens: int = 247
    c: float = math.inf
    history_unit: str = "tokens"

    def __post_init__(self) -> None:
        if self.family not in ("dirichlet", "zipf"):
            raise ValueError(f"family must be 'dirichlet' or 'zipf', got {self.family!r}")
        if not (np.isfinite(self.skew) and self.skew >= 0) or (self.family == "dirichlet" and self.skew <= 0):
            raise ValueError(f"skew must be finite and > 0 (>= 0 for zipf), got {self.skew!r}")
        if not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"rho must be in [0, 1], got {self.rho!r}")
        if int(self.history_tokens) != self.history_tokens or self.history_tokens < 0:
            raise ValueError(f"history_tokens must be an integer >= 0, got {self.history_tokens!r}")
        if not self.c > 0:
            raise ValueError(f"c must be > 0 (inf for none), got {self.c!r}")
        if self.history_unit not in ("tokens", "steps"):
            raise ValueError(f"history_unit must be 'tokens' or 'steps', got {self.history_unit!r}")

    @property
    def skew_name(self) -> str:
        return "α" if self.family == "dirichlet" else "s"

    def label(self) -> str:
        c = "" if math.isinf(self.c) else f", c={self.c:g}"
        return (
            f"{self.family} {self.skew_name}={self.skew:.3g}, ρ={self.rho:.3g}{c}, history {self.history_tokens} tokens"
        )


#: where the fitted knobs live (numbers, the call and seeds that produced them, date, provenance)
FITS_PATH = paths.DATA_DIR / "fits" / "ladder-knobs.toml"


def _load_fitted(path: Path = FITS_PATH) -> tuple[Knobs, tuple[Knobs, ...]]:
    """:data:`FITTED` and :data:`FITTED_DRAWS` from ``data/fits/ladder-knobs.toml`` (projected:
    fitted to seed 003's pair 20 and 80 GiB rows, never to the withheld rows)."""
    import tomllib

    doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    fit, draws = doc["fitted"], doc["draws"]

    def knobs(family: str, d) -> Knobs:
        return Knobs(family=family, skew=float(d["skew"]), rho=float(d["rho"]), history_tokens=int(d["history_tokens"]))

    rows = tuple(knobs(draws["family"], dict(zip(draws["columns"], row))) for row in draws["rows"])
    return knobs(fit["family"], fit), rows


#: knobs found by ``fit_knobs(CALIBRATION, seeds=range(8), layers=15)`` (5.7 s; the notebook
#: re-runs the search with ``fit = True``), stored in :data:`FITS_PATH` with their provenance;
#: ``bootstrap_knobs(FITTED, replicates=10)`` (26 s) gives :data:`FITTED_DRAWS`: refits to 10
#: simulated 75-layer calibration runs — the parameter uncertainty one published run per point
#: leaves
FITTED, FITTED_DRAWS = _load_fitted()


@dataclass(frozen=True)
class Case:
    """One run of the seed 003 experiment: ``ranks`` (2: pair with the id split, 1: one booster
    with all 288 experts), ``streams`` M, a cache of ``cache_gib_per_rank`` GiB on each rank."""

    name: str
    ranks: int
    streams: int
    cache_gib_per_rank: float
    policy: str = "lru"

    def __post_init__(self) -> None:
        if self.ranks not in (1, 2):
            raise ValueError(f"ranks must be 1 (booster) or 2 (pair), got {self.ranks!r}")
        if int(self.streams) != self.streams or self.streams < 1:
            raise ValueError(f"streams must be a positive integer, got {self.streams!r}")
        if not self.cache_gib_per_rank >= 0:
            raise ValueError(f"cache_gib_per_rank must be >= 0, got {self.cache_gib_per_rank!r}")
        if self.policy not in cache.POLICIES:
            raise ValueError(f"policy must be one of {cache.POLICIES}, got {self.policy!r}")

    @property
    def arrangement(self) -> str:
        return "pair, id split 144/144" if self.ranks == 2 else "one booster, all 288 experts"


@dataclass(frozen=True)
class Target:
    """A witnessed calibration point: hit rate (fraction) and GiB streamed per step per rank."""

    case: Case
    hit_rate: float
    gib_streamed_per_step: float
    source: str


#: the only numbers the fit sees (seed 003, "Expert cache against the headroom", balanced
#: partition, overlap on, M = 8; the partition does not change a synthetic trace's statistics,
#: whose layers have randomly placed hot experts)
CALIBRATION: tuple[Target, ...] = (
    Target(Case("pair-m8-20", 2, 8, 20.0), 0.525, 7.02, "seed 003: cache 20 GiB/rank, M=8: 52.5 % hit, 7.02 GiB/step"),
    Target(Case("pair-m8-80", 2, 8, 80.0), 0.983, 0.25, "seed 003: cache 80 GiB/rank, M=8: 98.3 % hit, 0.25 GiB/step"),
)

#: the rows predicted for predictions.csv (withheld rows of seed 003 and the calibration rows)
PREDICTION_CASES: tuple[Case, ...] = (
    Case("pair-m8-20", 2, 8, 20.0),
    Case("pair-m8-40", 2, 8, 40.0),
    Case("pair-m8-60", 2, 8, 60.0),
    Case("pair-m8-80", 2, 8, 80.0),
    Case("booster-m8-20", 1, 8, 20.0),
    Case("booster-m1-20", 1, 1, 20.0),
    Case("pair-m1-80", 2, 1, 80.0),
    Case("pair-m16-80", 2, 16, 80.0),
    Case("pair-m32-80", 2, 32, 80.0),
)
#: a case's conditions and its predicted hit rate and GiB streamed per step per rank
CASE_COLUMNS = ("case", "ranks", "streams", "cache_gib_per_rank", "policy", "hit_rate", "gib_streamed_per_step")
#: predictions.csv: each case's answer and the method that gives it (:func:`answer_rows`)
PREDICTIONS_COLUMNS = (*CASE_COLUMNS, "method")
#: the M of the calibration rows: :func:`fit_knobs`' knobs answer the cases at it, the general fit
#: (:func:`fit_routing_predictions`, with the locality prior) those at another M
#: (:func:`answer_rows`)
CALIBRATION_STREAMS: tuple[int, ...] = tuple(sorted({t.case.streams for t in CALIBRATION}))


def expert_bytes(layers: int = ASSUMED_LAYERS) -> float:
    """Bytes of one (layer, expert) item: ``91 GiB / 144 / L`` (seed 003; L assumed)."""
    if int(layers) != layers or layers < 1:
        raise ValueError(f"layers must be a positive integer, got {layers!r}")
    return RANK_EXPERT_BYTES / RANK_EXPERTS / layers


def capacity_experts(cache_gib: float, layers: int = ASSUMED_LAYERS) -> int:
    """Whole items a cache of ``cache_gib`` GiB holds (all layers): ``⌊C / e⌋``."""
    return int(math.floor(cache_gib * GiB / expert_bytes(layers) + 1e-9))


def implied_rank_union(hit_rate: float, gib_streamed_per_step: float) -> float:
    """Distinct experts per layer a rank requests per step, implied by a published (hit, GiB)
    pair read per rank: ``U_rank = g / ((1 − h) · 91/144 GiB)`` (independent of L)."""
    return gib_streamed_per_step * GiB / ((1.0 - hit_rate) * RANK_EXPERT_BYTES / RANK_EXPERTS)


def partition(ranks: int, experts: int = EXPERTS) -> np.ndarray:
    """Owner rank of each expert id: one booster owns all; a pair splits ids contiguously
    (experts 0…E/2−1 on rank 0, the rest on rank 1), seed 003's id split 144/144."""
    if ranks == 1:
        return np.zeros(experts, dtype=np.int64)
    if ranks == 2:
        return (np.arange(experts) >= experts // 2).astype(np.int64)
    raise ValueError(f"ranks must be 1 or 2, got {ranks!r}")


def history_steps(knobs: Knobs, streams: int) -> int:
    """Decode steps the cache served before the warm-up: ``ceil(history_tokens / M)`` (tokens)
    or ``ceil(history_tokens / 8)`` at every M (steps, as fitted at M = 8)."""
    per_step = streams if knobs.history_unit == "tokens" else 8
    return int(math.ceil(knobs.history_tokens / per_step))


def sample_ladder_trace(knobs: Knobs, streams: int, steps: int, layers: int, rng: np.random.Generator) -> np.ndarray:
    """A synthetic GLM-5-NVFP4 trace (steps, M, layers, K): each stream decodes its own token
    sequence under the knobs (:func:`moeroof.models.routing.sample_trace`, ``scope="step"``)."""
    model = Dirichlet(EXPERTS, TOP_K, knobs.skew) if knobs.family == "dirichlet" else Zipf(EXPERTS, TOP_K, knobs.skew)
    return sample_trace(model, steps, streams, layers, rng, c=knobs.c, rho=knobs.rho, groups=1, scope="step")


@functools.lru_cache(maxsize=32)
def _trace(knobs: Knobs, streams: int, steps: int, layers: int, seed: int) -> np.ndarray:
    """The trace of one (knobs, M, seed), drawn from ``default_rng([seed, M])`` and kept (read
    only) so the cases, curves and policies of a notebook share it instead of redrawing it."""
    topk = sample_ladder_trace(knobs, streams, steps, layers, generator(int(seed), int(streams)))
    topk.setflags(write=False)
    return topk


@dataclass(frozen=True)
class CaseResult(Result):
    """One simulated run of a case at one seed, counted over the 10 timed steps.

    ``hit_rate``: hits / requests pooled over the ranks; ``gib_streamed_per_step``: mean over
    the ranks of a rank's streamed GiB per timed step (what seed 003 publishes, see the module
    docstring); ``union_per_layer``: distinct experts per layer and step across all ranks (the
    seed's "about 50"); ``rank_union_per_layer``: per rank, mean over ranks (the per-step
    working set of a rank is ``rank_union_per_layer · L`` items); ``warmup_steps``: history +
    warm-up steps simulated before the timed ones.
    """

    case: Case
    seed: int
    hit_rate: float
    gib_streamed_per_step: float
    union_per_layer: float
    rank_union_per_layer: float
    rank_hit_rates: tuple[float, ...]
    rank_gib_streamed_per_step: tuple[float, ...]
    warmup_steps: int
    layers: int


def _union_per_layer(topk: np.ndarray, experts: int, owner: np.ndarray | None = None, rank: int = 0) -> float:
    """Mean over steps and layers of the distinct experts a step requests (optionally one rank's)."""
    ids = np.asarray(topk)
    if owner is not None:
        ids = np.where(owner[ids_or(ids, 0)] == rank, ids, -1)
    return float(distinct_per_layer(ids, experts).mean())


def _static_pin(req: cache.Requests, warm: int) -> np.ndarray:
    """A static hot set from the firing histogram of the steps before timing (what an engine
    would have recorded), not from the timed steps themselves (that would be an oracle)."""
    return np.bincount(req.items[req.step < warm], minlength=req.n_items)


def run_cases(
    knobs: Knobs,
    cases: Iterable[Case],
    *,
    seed: int,
    layers: int = ASSUMED_LAYERS,
    timed_steps: int = TIMED_STEPS,
    warmup_steps: int = WARMUP_STEPS,
) -> list[CaseResult]:
    """Simulate the cases at one seed; cases with the same M share one trace (common random
    numbers: a pair and a booster at M = 8 see the same routing, and so do all cache sizes).

    Per M the trace has ``history_steps + warmup_steps + timed_steps`` steps, drawn from
    ``numpy.random.default_rng([seed, M])``; only the timed steps are counted. Capacity in bytes
    (``e = 91 GiB / 144 / L`` per item), global scope, one cache per rank.

    Memoised exactly (:mod:`moeroof.core.memo`): the results depend on nothing but the
    arguments (the seed fixes every draw), so a call repeated in this process, or in another run
    with the same sources and versions, returns the numbers simulated before, bit for bit.
    """
    cases = list(cases)
    key = (
        astuple(knobs),
        tuple(astuple(c) for c in cases),
        (int(seed), int(layers), int(timed_steps), int(warmup_steps)),
    )
    stored = CASES_MEMO.get(key)
    if isinstance(stored, list) and len(stored) == len(cases):
        return [_case_result(case, int(seed), v) for case, v in zip(cases, stored)]
    results = run_cases_uncached(
        knobs, cases, seed=seed, layers=layers, timed_steps=timed_steps, warmup_steps=warmup_steps
    )
    CASES_MEMO.put(key, [_case_values(r) for r in results])
    return results


#: the source files :func:`run_cases` runs (relative to the package): the disk memo's salt
CASES_SOURCES = (
    "studies/ladder.py",
    "fit/",
    "models/",
    "cachesim/",
    "kernels/",
    "core/",
    "data/",
)  # every module a case can reach
CASES_MEMO = SourceMemo("ladder-cases", CASES_SOURCES)


#: a :class:`CaseResult`'s numbers as the memo stores them, in order: (field, type of it or of its per-rank entries)
_CASE_VALUES = tuple((f.name, int if f.type == "int" else float) for f in fields(CaseResult))[2:]


def _case_values(r: CaseResult) -> list:
    """A result's numbers, JSON-able (floats by repr: exact; the per-rank tuples as lists)."""
    values = [(getattr(r, f), t) for f, t in _CASE_VALUES]
    return [[t(x) for x in v] if isinstance(v, tuple) else t(v) for v, t in values]


def _case_result(case: Case, seed: int, v: list) -> CaseResult:
    values: list = [tuple(t(y) for y in x) if isinstance(x, list) else t(x) for (_, t), x in zip(_CASE_VALUES, v)]
    return CaseResult(case, seed, *values)  # the fields after case and seed, in order


def run_cases_uncached(knobs: Knobs, cases: list[Case], *, seed, layers, timed_steps, warmup_steps) -> list[CaseResult]:
    """:func:`run_cases`' computation, not memoised."""
    seed, layers = int(seed), int(layers)
    item = expert_bytes(layers)
    out: dict[str, CaseResult] = {}
    for m in sorted({c.streams for c in cases}):
        warm = history_steps(knobs, m) + warmup_steps
        topk = _trace(knobs, int(m), warm + timed_steps, layers, seed)
        timed = topk[warm:]
        union = _union_per_layer(timed, EXPERTS)
        requests: dict[tuple[int, int], cache.Requests] = {}
        for case in (c for c in cases if c.streams == m):
            owner = partition(case.ranks)
            results = []
            sim: dict[str, Any] = dict(
                policy=case.policy, capacity_unit="bytes", item_bytes=item, scope="global", warmup_steps=warm
            )
            for r in range(case.ranks):
                key = (case.ranks, r)
                if key not in requests:
                    requests[key] = cache.requests_from_trace(topk, EXPERTS, partition=owner, rank=r)
                pinned = _static_pin(requests[key], warm) if case.policy == "static" else None
                results.append(cache.simulate(requests[key], case.cache_gib_per_rank * GiB, pinned=pinned, **sim))
            hits = sum(r.hits for r in results)
            reqs = sum(r.requests for r in results)
            hit_rate = hits / reqs if reqs else float("nan")
            rank_hits = tuple(float(r.hit_rate) for r in results)
            rank_gib = tuple(float(r.bytes_streamed_per_step[warm:].mean() / GiB) for r in results)
            gib = float(np.mean(rank_gib))
            rank_union = float(np.mean([_union_per_layer(timed, EXPERTS, owner, r) for r in range(case.ranks)]))
            out[case.name] = CaseResult(case, seed, hit_rate, gib, union, rank_union, rank_hits, rank_gib, warm, layers)
    return [out[c.name] for c in cases]


@dataclass(frozen=True)
class Band(Result):
    """A case's prediction over seeds: mean and the 5–95 % band (an
    :class:`~moeroof.core.stats.Interval` over the seeds' results) of the hit rate and the GiB
    streamed per step per rank, and of the per-layer union (both ranks)."""

    case: Case
    hit_rate: float
    hit_rate_band: Interval
    gib_streamed_per_step: float
    gib_band: Interval
    union_per_layer: float
    union_band: Interval
    rank_union_per_layer: float
    seeds: int


def summarize(results: Sequence[CaseResult], level: tuple[float, float] = (0.05, 0.95)) -> list[Band]:
    """Group results by case (first-seen order) into mean and quantile bands over seeds."""
    by_case: dict[str, list[CaseResult]] = {}
    for r in results:
        by_case.setdefault(r.case.name, []).append(r)
    bands = []
    for rs in by_case.values():
        h = np.array([r.hit_rate for r in rs])
        g = np.array([r.gib_streamed_per_step for r in rs])
        u = np.array([r.union_per_layer for r in rs])
        hq, gq, uq = (percentile_interval(x, level, resampling="over seeds") for x in (h, g, u))
        ru = float(np.mean([r.rank_union_per_layer for r in rs]))
        bands.append(Band(rs[0].case, float(h.mean()), hq, float(g.mean()), gq, float(u.mean()), uq, ru, len(rs)))
    return bands


def predict(
    knobs: Knobs | Sequence[Knobs], cases: Sequence[Case], seeds: Sequence[int], *, layers: int = ASSUMED_LAYERS
) -> tuple[list[Band], list[CaseResult]]:
    """Run every case at every seed and summarize. ``knobs`` may be a sequence (e.g.
    :data:`FITTED_DRAWS`): seed j then runs with ``knobs[j % n]``, so the band carries the
    parameter uncertainty of the fit as well as the run-to-run noise of a 10-step experiment."""
    draws = [knobs] if isinstance(knobs, Knobs) else list(knobs)
    results = [
        r for j, s in enumerate(seeds) for r in run_cases(draws[j % len(draws)], cases, seed=int(s), layers=layers)
    ]
    return summarize(results), results


# ----------------------------------------------------------------------------- fit


@dataclass(frozen=True)
class FitResult(Result):
    """Fitted knobs, the grids each step searched and what they gave (for plots and checks)."""

    knobs: Knobs
    union_target: float
    skew_grid: np.ndarray
    union_on_grid: np.ndarray
    rho_grid: np.ndarray
    hit20_on_grid: np.ndarray
    history_grid: np.ndarray
    hit80_on_grid: np.ndarray
    seeds: tuple[int, ...]
    layers: int
    notes: tuple[str, ...] = field(default=())


def _interp_root(x: np.ndarray, y: np.ndarray, target: float, log_x: bool = False) -> tuple[float, str]:
    """x where the sampled curve y(x) (monotone up to noise) crosses ``target``; clamps to the
    grid's ends with a note."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    xs = np.log(x) if log_x else x
    if target <= y.min() or target >= y.max():
        end = x[np.argmin(np.abs(y - target))]
        return float(end), f"target {target:.4g} outside the grid's range [{y.min():.4g}, {y.max():.4g}]: clamped"
    # the first crossing along x
    above = y >= target
    i = int(np.argmax(above != above[0]))
    x0, x1, y0, y1 = xs[i - 1], xs[i], y[i - 1], y[i]
    v = x0 + (target - y0) * (x1 - x0) / (y1 - y0)
    return float(np.exp(v) if log_x else v), ""


def fit_knobs(
    targets: Sequence[Target] = CALIBRATION,
    *,
    family: str = "dirichlet",
    start: Knobs | None = None,
    seeds: Sequence[int] = (0, 1, 2, 3),
    layers: int = 15,
    skew_grid: Sequence[float] | None = None,
    rho_grid: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.4),
    history_grid: Sequence[int] = (64, 128, 192, 256, 384, 512),
    union_target: float | None = None,
) -> FitResult:
    """Fit skew, ρ and the cache's history to the calibration targets, in three 1-D steps.

    (1) ``skew`` so the per-layer union at M = 8 (both ranks) equals ``union_target`` — by
    default twice the mean of :func:`implied_rank_union` over the targets (46.7 for seed 003,
    the "about 50" made precise by the published GiB and hit rates); (2) ``rho`` so the first
    target's hit rate (20 GiB) is met at that skew; (3) ``history_tokens`` so the second
    target's (80 GiB) is met, interpolated in log history. Each step simulates the grid at the
    same ``seeds`` (common random numbers) with ``layers`` layers and averages over seeds;
    fewer layers than the final 75 only add noise (the GiB and hit rate do not depend on L).
    """
    start = replace(start or replace(FITTED, skew=FITTED.skew if family == "dirichlet" else 0.9), family=family)
    t20, t80 = targets[0], targets[1]
    if union_target is None:
        union_target = 2.0 * float(np.mean([implied_rank_union(t.hit_rate, t.gib_streamed_per_step) for t in targets]))
    if skew_grid is None:
        skew_grid = (0.2, 0.3, 0.4, 0.55, 0.8) if family == "dirichlet" else (0.6, 0.75, 0.9, 1.05, 1.2)
    seeds = tuple(int(s) for s in seeds)
    notes: list[str] = []

    def search(name: str, grid, vary: Callable[[float], Knobs], case: Case, target, attr="hit_rate", log_x=False):
        """One step: ``attr`` (the mean over seeds) at each knob of ``grid``, and where it crosses ``target``."""
        xs = np.asarray(grid, dtype=float)
        runs = [[run_cases(vary(float(x)), [case], seed=s, layers=layers)[0] for s in seeds] for x in xs]
        ys = np.array([np.mean([getattr(r, attr) for r in rs]) for rs in runs])
        root, note = _interp_root(xs, ys, target, log_x=log_x)
        notes.extend([f"{name}: {note}"] if note else [])
        return xs, ys, root

    # (1) skew from the union: short traces, no history needed
    short, probe = replace(start, history_tokens=0), replace(t20.case, cache_gib_per_rank=0.0)
    skews, unions, skew = search(
        "skew", skew_grid, lambda x: replace(short, skew=x), probe, union_target, "union_per_layer", log_x=True
    )
    # (2) ρ from the 20 GiB hit rate (a 20 GiB cache turns over within two steps: little history needed)
    warm20 = replace(start, skew=skew, history_tokens=min(start.history_tokens, 8 * t20.case.streams))
    rhos, hit20, rho = search("rho", rho_grid, lambda x: replace(warm20, rho=x), t20.case, t20.hit_rate)
    # (3) history from the 80 GiB hit rate
    at80 = replace(start, skew=skew, rho=rho)
    hist, hit80, history = search(
        "history", history_grid, lambda x: replace(at80, history_tokens=int(x)), t80.case, t80.hit_rate, log_x=True
    )
    knobs = replace(start, skew=round(skew, 4), rho=round(rho, 4), history_tokens=int(round(history)))
    return FitResult(
        knobs, float(union_target), skews, unions, rhos, hit20, hist, hit80, seeds, int(layers), tuple(notes)
    )


# ----------------------------------------------------------------------------- curves


@dataclass(frozen=True)
class LadderCurve(Result):
    """Exact LRU hit rate and GiB streamed per step per rank against the cache size per rank
    (global scope), one row per seed; ``working_set_gib``: a rank's per-step working set
    (``U_rank · L · e``, the union it requests in one step), one per seed."""

    ranks: int
    streams: int
    cache_gib: np.ndarray
    hit_rate: np.ndarray
    gib_streamed_per_step: np.ndarray
    working_set_gib: np.ndarray
    seeds: tuple[int, ...]


def ladder_curve(
    knobs: Knobs | Sequence[Knobs],
    ranks: int,
    streams: int,
    cache_gib: Sequence[float],
    seeds: Sequence[int],
    *,
    layers: int = ASSUMED_LAYERS,
    timed_steps: int = TIMED_STEPS,
    warmup_steps: int = WARMUP_STEPS,
) -> LadderCurve:
    """LRU hit rate at every cache size in one pass per rank (:func:`moeroof.cachesim.lru_hit_curve`
    after the warm-up; exact, equal
    item sizes so a byte capacity is ``⌊C / e⌋`` items), pooled over the ranks, on the same
    traces as :func:`run_cases` (same seed → same trace)."""
    draws = [knobs] if isinstance(knobs, Knobs) else list(knobs)
    seeds = tuple(int(s) for s in seeds)
    grid = np.asarray(cache_gib, dtype=float)
    item = expert_bytes(layers)
    cap_items = np.floor(grid * GiB / item + 1e-9).astype(np.int64)
    hits_out, gib_out, ws_out = [], [], []
    for j, seed in enumerate(seeds):
        kn = draws[j % len(draws)]
        warm = history_steps(kn, streams) + warmup_steps
        topk = _trace(kn, int(streams), warm + timed_steps, int(layers), int(seed))
        owner = partition(ranks)
        hits = np.zeros(grid.size)
        total = 0
        miss_gib = np.zeros(grid.size)
        for r in range(ranks):
            req = cache.requests_from_trace(topk, EXPERTS, partition=owner, rank=r)
            cap, rate = cache.lru_hit_curve(req, warmup_steps=warm)
            n = int((req.step >= warm).sum())
            h = rate[np.minimum(cap_items, cap[-1])]
            hits += h * n
            total += n
            miss_gib += (1.0 - h) * n * item / GiB / timed_steps
        hits_out.append(hits / total)
        gib_out.append(miss_gib / ranks)
        ws_out.append(total / ranks / timed_steps * item / GiB)
    return LadderCurve(ranks, streams, grid, np.array(hits_out), np.array(gib_out), np.array(ws_out), seeds)


# ----------------------------------------------------------------------------- output


def predictions_path() -> Path:
    """Where the notebook writes predictions.csv: ``reports/cache_ladder/predictions.csv``, or
    beside the figures directory when ``MOEROOF_FIGURES_DIR`` is set (tests: never reports/)."""
    env = os.environ.get("MOEROOF_FIGURES_DIR")
    base = Path(env).parent if env else paths.REPORTS_DIR
    return base / "cache_ladder" / "predictions.csv"


def answer_rows(bands: Sequence[Band], routing_rows: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The report's answer for each case of ``bands``, in their order: at the calibration's M
    (:data:`CALIBRATION_STREAMS`) the seed-specific knobs' mean over seeds (``method``
    ``fit_knobs``); at another M the general fit's prediction where ``routing_rows``
    (:attr:`RoutingPredictions.rows`) has the case (``fit-routing``) — the seed-specific knobs
    hold no per-stream locality, which rows at one M cannot identify, and the general fit holds the
    locality prior there (docs/reports.md). Each row: :data:`PREDICTIONS_COLUMNS`' fields plus
    the 5–95 % band of the method that answers (``hit_rate_low`` … ``gib_high``)."""
    general = {r["case"]: r for r in routing_rows}
    out = []
    for b in bands:
        row = {k: getattr(b.case, k) for k in ("ranks", "streams", "cache_gib_per_rank", "policy")}
        r = general.get(b.case.name) if b.case.streams not in CALIBRATION_STREAMS else None
        if r is not None:
            keys = ("hit_rate", "gib_streamed_per_step", "hit_rate_low", "hit_rate_high", "gib_low", "gib_high")
            row |= {k: float(r[k]) for k in keys} | {"method": "fit-routing"}
        else:
            row |= {"hit_rate": b.hit_rate, "gib_streamed_per_step": b.gib_streamed_per_step, "method": "fit_knobs"}
            row |= {"hit_rate_low": b.hit_rate_band.low, "hit_rate_high": b.hit_rate_band.high}
            row |= {"gib_low": b.gib_band.low, "gib_high": b.gib_band.high}
        out.append({"case": b.case.name, **row})
    return out


def write_predictions(
    bands: Sequence[Band],
    path: str | os.PathLike[str] | None = None,
    routing_rows: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Write the report's answer (:func:`answer_rows` of ``bands`` and ``routing_rows``), one row
    per case with :data:`PREDICTIONS_COLUMNS` (hit rate a fraction, GiB per step per rank, the
    method that answers it), atomically (:func:`moeroof.core.atomic.write_via`)."""
    rows = [
        [r["case"], r["ranks"], r["streams"], f"{r['cache_gib_per_rank']:g}", r["policy"]]
        + [f"{r['hit_rate']:.4f}", f"{r['gib_streamed_per_step']:.4f}", r["method"]]
        for r in answer_rows(bands, routing_rows)
    ]
    return _write_csv(Path(path) if path is not None else predictions_path(), PREDICTIONS_COLUMNS, rows)


def _write_csv(target: Path, columns: Sequence[str], rows: Iterable[Sequence]) -> Path:
    """``columns`` and ``rows`` as CSV at ``target``, atomically (:func:`moeroof.core.atomic.write_via`)."""

    def write(handle) -> None:
        w = csv.writer(handle, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)

    return atomic.write_via(target, write, binary=False, newline="")


def bootstrap_knobs(
    knobs: Knobs,
    targets: Sequence[Target] = CALIBRATION,
    *,
    replicates: int = 8,
    seed: int = 0,
    layers: int = ASSUMED_LAYERS,
    fit_seeds: Sequence[int] = (0, 1, 2, 3),
    fit_layers: int = 15,
) -> list[Knobs]:
    """Parametric bootstrap of the fit: simulate the calibration runs at ``knobs`` (one 10-step
    experiment each, ``layers`` layers, seeds ``seed + 1000 + j``), read each replicate's hit
    rates and GiB as if they had been published, and refit. The spread of the refitted knobs is
    what one published run of each calibration point can pin down."""

    def published(j: int) -> list[Target]:
        sim = run_cases(knobs, [t.case for t in targets], seed=seed + 1000 + j, layers=layers)
        return [
            replace(t, hit_rate=r.hit_rate, gib_streamed_per_step=r.gib_streamed_per_step) for t, r in zip(targets, sim)
        ]

    def refit(fake: list[Target]) -> Knobs:
        return fit_knobs(fake, family=knobs.family, start=knobs, seeds=fit_seeds, layers=fit_layers).knobs

    return list(bootstrap_replicates(refit, replicates, draw=published)) if replicates > 0 else []


# ----------------------------------------------------------------------------- fit-routing

#: the published rows that are not calibration rows of the fit but can check it: the booster
#: table's pair row (id split, exchange as recorded, M = 8, 20 GiB: 53.8 %, 6.62 GiB/step)
#: has the conditions of the 20 GiB calibration row, measured in another run (seed 003, witnessed)
HELD_OUT: tuple[Target, ...] = (
    Target(
        Case("pair-m8-20-booster-table", 2, 8, 20.0),
        0.538,
        6.62,
        "seed 003, one booster against the pair: pair, id split, M=8, 20 GiB: 53.8 % hit, 6.62 GiB/step",
    ),
)
#: the withheld cases of :data:`PREDICTION_CASES` (predicted, never fitted)
WITHHELD_CASES: tuple[Case, ...] = tuple(
    c for c in PREDICTION_CASES if c.name not in {t.case.name for t in CALIBRATION}
)
#: predictions-fit-routing.csv: every case as the general fit predicts it (:data:`CASE_COLUMNS`), its
#: 5–95 % band, the row's role, and the seed-specific fit_knobs means beside them
FIT_ROUTING_COLUMNS: tuple[str, ...] = (*CASE_COLUMNS, "hit_rate_low", "hit_rate_high", "gib_low", "gib_high", "role")
FIT_ROUTING_COLUMNS += tuple(f"{who}_{k}" for who in ("witnessed", "fit_knobs") for k in CASE_COLUMNS[-2:])


def _point(kind: str, case: Case, value: float | None) -> Point:
    value = None if value is None else float(value)
    gib = float(case.cache_gib_per_rank)
    return Point(kind, int(case.streams), None, gib, case.policy, "global", int(case.ranks), "id", value)


def public_points(
    cases: Sequence[Case] = WITHHELD_CASES, *, targets: Sequence[Target] = CALIBRATION, union: float = UNION_PUBLISHED
) -> list[Point]:
    """Seed 003's public rows as ``fit-routing`` points, then the cases to predict (empty values).

    Calibration (values): for each target (the pair's 20 and 80 GiB rows at M = 8) a ``hit_rate``
    and a ``gib_per_step`` row (per rank, 2 ranks, contiguous id split, global scope, LRU), and
    the ``union`` at M = 8 — distinct experts per layer and step across the whole batch, which
    :func:`moeroof.fit.routing.simulate_points` counts over all experts whatever the
    ranks: the seed's "about 50" across both ranks, taken as 50 (tolerance 5 %, 2.5 experts).
    Then a ``hit_rate`` and a ``gib_per_step`` row per case, value empty: predicted, never fitted.
    """
    pts: list[Point] = []
    for t in targets:
        pts += [_point("hit_rate", t.case, t.hit_rate), _point("gib_per_step", t.case, t.gib_streamed_per_step)]
    pts.append(Point(kind="union", batch=int(targets[0].case.streams), ranks=2, partition="id", value=float(union)))
    for c in cases:
        pts += [_point("hit_rate", c, None), _point("gib_per_step", c, None)]
    return pts


@dataclass(frozen=True)
class RoutingPredictions(Result):
    """:func:`fit_routing_predictions`: the ``fit-routing`` result, the points it saw, and one row
    per case (:data:`FIT_ROUTING_COLUMNS` as a dict, values as numbers; ``role`` is
    ``calibration``, ``withheld`` or ``held-out published``)."""

    fit: RoutingFit
    points: tuple[Point, ...]
    rows: list[dict]
    seconds: float

    @property
    def calibration_points(self) -> tuple[Point, ...]:
        return tuple(p for p in self.points if p.calibrates)

    def held_out_errors(self) -> list[dict]:
        """Predicted − witnessed on every published row that was not calibrated (points for the
        hit rate, GiB for the stream), with whether the band covers the witnessed value."""
        return [
            {
                "case": r["case"],
                "hit_rate_error": r["hit_rate"] - r["witnessed_hit_rate"],
                "hit_rate_covered": r["hit_rate_low"] <= r["witnessed_hit_rate"] <= r["hit_rate_high"],
                "gib_error": r["gib_streamed_per_step"] - r["witnessed_gib_streamed_per_step"],
                "gib_covered": r["gib_low"] <= r["witnessed_gib_streamed_per_step"] <= r["gib_high"],
            }
            for r in self.rows
            if r["role"] == "held-out published"
        ]


def fit_routing_predictions(
    *,
    seeds: Sequence[int] = (0, 1),
    bootstrap: int = 6,
    max_sim_layers: int = 12,
    families: Sequence[str] = ("dirichlet", "zipf"),
    old_bands: Sequence[Band] | None = None,
    union: float = UNION_PUBLISHED,
    locality=None,
) -> RoutingPredictions:
    """Calibrate ``moeroof fit-routing`` on seed 003's public rows only (:func:`public_points`)
    and predict the withheld cases with its 5–95 % bands (parameter, run-to-run and family).

    The experiment is the seed's: 10 timed steps after the fitted warm history (which holds the
    3 warm-up steps), E = 288, K = 8, L = 75 (assumed), an item 91 GiB / 144 / L; fitted: skew,
    ρ and history (five calibration rows at one M); the per-stream locality the rows cannot
    identify is held at ``locality`` (a :class:`moeroof.models.locality.Locality`: the locality
    prior, as ``moeroof fit-routing`` holds it by default, its draws in the bands; None: off).
    ``old_bands``: the seed-specific :func:`fit_knobs` predictions (:func:`predict` at
    :data:`FITTED` or :data:`FITTED_DRAWS`) of the same cases, shown beside the new ones — the
    two calibrations differ in the union target (46.7 implied there, 50 published here), the
    partition of the popularity and the search, so their difference is a structural band that
    neither method's own band holds. The calibration rows come back as rows too (role
    ``calibration``), and so does :data:`HELD_OUT` (``held-out published``, its witnessed values
    beside the prediction of its conditions).
    """
    import time

    cases = list(PREDICTION_CASES)
    points = public_points(list(WITHHELD_CASES), union=union)
    # the calibration cases are predicted too (their rows with the value are the fitted rows)
    t0 = time.perf_counter()
    fit = fit_routing(
        points,
        EXPERTS,
        TOP_K,
        ASSUMED_LAYERS,
        expert_bytes(ASSUMED_LAYERS),
        families=tuple(families),
        seeds=tuple(int(s) for s in seeds),
        bootstrap=int(bootstrap),
        timed_steps=TIMED_STEPS,
        max_sim_layers=int(max_sim_layers),
        locality=locality,
    )
    seconds = time.perf_counter() - t0
    by_cond = {(p.kind, p.batch, p.capacity_gib, p.ranks, p.policy): r for p, r in zip(points, fit.rows)}
    old = {b.case.name: b for b in (old_bands or ())}
    witnessed = {t.case.name: t for t in (*CALIBRATION, *HELD_OUT)}
    rows = []
    for c in [*cases, *(t.case for t in HELD_OUT)]:
        key = (c.streams, float(c.cache_gib_per_rank), c.ranks, c.policy)
        h, g = by_cond[("hit_rate", *key)], by_cond[("gib_per_step", *key)]
        rows.append(_prediction_row(c, h, g, witnessed.get(c.name), old.get(c.name)))
    return RoutingPredictions(fit, tuple(points), rows, float(seconds))


def _prediction_row(c, h: dict, g: dict, w, b) -> dict:
    """One case's row of :func:`fit_routing_predictions`: its hit-rate and GiB-per-step
    predictions ``h`` and ``g`` (fit rows), the witnessed values ``w`` and the seed-specific
    fit's ``b`` where there are any, and its role."""
    role = "withheld"
    if c.name in {t.case.name for t in CALIBRATION}:
        role = "calibration"
    elif c.name in {t.case.name for t in HELD_OUT}:
        role = "held-out published"
    row = {"case": c.name, **{k: getattr(c, k) for k in ("ranks", "streams", "cache_gib_per_rank", "policy")}}
    row |= {"hit_rate": h["predicted"], "gib_streamed_per_step": g["predicted"], "hit_rate_low": h["low"]}
    row |= {"hit_rate_high": h["high"], "gib_low": g["low"], "gib_high": g["high"], "role": role}
    for prefix, src in (("witnessed", w), ("fit_knobs", b)):
        for k in CASE_COLUMNS[-2:]:  # hit_rate, gib_streamed_per_step
            row[f"{prefix}_{k}"] = None if src is None else getattr(src, k)
    return row


def write_fit_routing_predictions(pred: RoutingPredictions, path: str | os.PathLike[str] | None = None) -> Path:
    """Write :attr:`RoutingPredictions.rows` with :data:`FIT_ROUTING_COLUMNS` — every case as the
    general fit predicts it, with its 5–95 % band, the role, the witnessed
    values (public rows only) and the fit_knobs means — atomically; by default
    ``predictions-fit-routing.csv`` beside :func:`predictions_path`."""
    target = Path(path) if path is not None else predictions_path().with_name("predictions-fit-routing.csv")

    def cell(v) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:g}" if v == int(v) and abs(v) >= 1 else f"{v:.4f}"
        return str(v)

    return _write_csv(target, FIT_ROUTING_COLUMNS, ([cell(r[k]) for k in FIT_ROUTING_COLUMNS] for r in pred.rows))
