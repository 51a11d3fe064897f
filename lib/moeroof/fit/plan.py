"""Fit the one step model's knobs to a box's measured points, predict the rest (``moeroof fit-plan``).

A user has measured a few configurations of a box — net tok/s (and perhaps the cache hit rate)
at some batch sizes, cache sizes, rank counts and cache policies — and wants the others.
Every prediction is :func:`moeroof.models.plan.plan` with the presets as given except the
fitted knobs (:data:`KNOBS`):

- ``engine``: the two engine terms, c0 = ``engine_seconds_per_step`` and c1 =
  ``engine_seconds_per_agent_token`` (:mod:`moeroof.models.step`), both ≥ 0;
- ``expert``: the engine cost per (layer, expert) pair a step touches, ``c_U =
  engine_seconds_per_touched_expert`` (≥ 0). With every measured rate at one batch size it is
  what ``engine`` fits (the per-step and per-token costs held at :data:`PRIOR_SECONDS_PER_STEP`
  and :data:`PRIOR_SECONDS_PER_AGENT_TOKEN`, from public engines, their ends in the bands); at
  two or more batch sizes ``engine`` fits the per-step and per-token costs and c_U is held at
  :data:`PRIOR_TOUCHED_SHARE` (its end in the bands) unless ``expert`` is named too;
- ``ssd-scale``: a factor on the box's whole SSD bandwidth curve;
- ``reclaim``: κ of the OS's reclaim work on the reads (``Hardware.reclaim_penalty``,
  :func:`moeroof.models.plan.reclaim_slowdown`: reads slow by ``1 + κ·u/(1 − u)`` as the share u
  of RAM the engine holds nears all the OS leaves), ≥ 0;
- ``reclaim-shape`` (with ``reclaim``): the exponent n ≥ 1 of that rise, ``1 + κ·(u/(1 − u))^n``
  (``Hardware.reclaim_exponent``; where not named, the preset's where it states one, else held at
  :data:`PRIOR_RECLAIM_EXPONENT`'s centre 2 beside a fitted κ, its ends in the bands): a larger n
  keeps the reads cheap while memory is free and steepens near full, so the cache at which tok/s
  peaks moves with it (mlx-lm#1438's three sizes: docs/validation.md, "Across concurrency and memory
  pressure"); its lower bound 1 is the queueing form itself, a real value as κ = 0 is;
- ``pressure``: the share of the RAM left beside the expert cache that the OS page cache keeps
  (``Workload.page_cache_share``; fitting it turns the page cache on);
- ``skew``: the Zipf exponent s of the routing (``zipf:s``, replacing the routing given);
- ``rho``: the stickiness ρ of each stream (the cache is then simulated on a trace sampled with
  :func:`routing_from_knobs` at the fitted skew and ρ; one stream's hot set is then held off, and
  the bands take it towards the locality prior's most local end as far as the rows admit it:
  :meth:`_PriorEnds._hot_set_ends`).

**Fit.** Rows with a measured value calibrate, rows without are predicted. The residuals are
``log(predicted / measured net tok/s) / σ_net`` and ``(predicted − measured hit rate) / σ_hit``
with σ_net = :data:`SIGMA_NET` (5 %) and σ_hit = :data:`SIGMA_HIT` (2 points), the noise a
measurement is assumed to carry. The knobs that shape the cache (skew, ρ, pressure) are
searched by Nelder–Mead (the cache simulations are piecewise constant in them, at fixed seeds;
a single one first on a grid over its bounds, :func:`search_cache_knobs`);
for each candidate the smooth knobs (engine, ssd-scale) are solved by bounded least squares
(``scipy.optimize.least_squares``) — a variable projection. By default the fit takes what the
rows can identify (:func:`default_knobs`): with hit rates, the skew, and with hit rates at three or
more configurations the stickiness ρ beside it; with one net tok/s row the SSD scale, with two
the engine terms, with three or more both. Where the rows measure tok/s at three or more cache
sizes of one batch size and rank count, how the step bends with the cache can tell a memory knob,
and which one the box has — the page cache's share (``pressure``) or the reclaim work
(``reclaim``) — is a structural choice the default makes from the rows
(:func:`choose_memory_knob`): each is tried at the default knobs' best cache knobs, and one joins
the fit where the rows rule out its absence — the default's cost lies above the knob's profile
cut (below), or the measured tok/s falls as the cache grows by more than two measurements' noise,
which the step without either cannot (:func:`measured_fall`) — the lower cost where both do; the other stays held at its prior, its end in the
bands as far as the rows admit it. The reclaim work joins with its shape n where the tok/s rows
are enough for it, else with n held at its prior's centre (:data:`PRIOR_RECLAIM_EXPONENT`, its
ends in the bands) and the engine terms still fitted (:func:`with_reclaim_shape`). The popularity's family is another
structural choice: where the skew is fitted on a hit-rate curve (hit rates at
three or more cache sizes of one batch size), the other family is fitted too. The family held —
the one named with the routing, or without one :data:`CURVE_FAMILY_PRIOR`, the family of one
stream's curves that the published single-stream column prefers — is left only where the other
fits better by more than χ²₁(0.90), the other's bands joining where it meets the rows
(:func:`with_other_family`).

**Bands** (5–95 % of a new measurement), from two parts.

*Smooth knobs.* Their covariance ``(JᵀJ)⁻¹`` from the weighted residuals at the solution (at
the best cache knobs θ̂; scaled by the residual variance when rows outnumber knobs) is sampled
(:data:`BAND_DRAWS` draws, clipped to the bounds); every row is predicted at each draw and at
:data:`BAND_SEEDS` simulation seeds, times a lognormal measurement noise (the larger of σ_net
and the calibration rows' own scatter) on tok/s and plus a normal one on hit rates (the larger
of σ_hit and the calibration hit rates' scatter, clipped to [0, 1]): the 5 and 95 % quantiles
L_i, H_i around the best prediction ŷ_i(θ̂).

*Cache knobs θ* (skew, ρ, pressure; when fitted), by profile likelihood. With
S(θ) = min over the smooth knobs of Σ r² (the variable projection's cost, the smooth knobs
re-solved at each θ) and n, p_x, p_θ the numbers of measured values (tok/s and hit rates),
smooth knobs and cache knobs, the retained set is

    R = {θ : S(θ) ≤ S(θ̂) + χ²₁(0.90) · max(S(θ̂) / (n − p_x − p_θ), 1)},  χ²₁(0.90) = 1.645² = 2.71

(:data:`PROFILE_CHI2`; the scale as for the smooth knobs' covariance). A cache knob's 5–95 %
interval is its range over R — the profile-likelihood interval (Venzon & Moolgavkar 1988,
Appl. Statist. 37:87; Bates & Watts 1988, *Nonlinear Regression Analysis and Its
Applications*, ch. 6) — and a row's prediction over R is its prediction profile interval
(Kreutz, Raue & Timmer 2012, BMC Syst. Biol. 6:120). The band of row i is the smooth part's
band moved to the retained sets and united:

    low_i = min_{θ∈R'} ŷ_i(θ) · L_i / ŷ_i(θ̂),   high_i = max_{θ∈R'} ŷ_i(θ) · H_i / ŷ_i(θ̂)

where R' ⊆ R holds each cache knob's two ends over R and sets spread evenly over the rest, at
most :data:`BAND_PROFILE_SETS` (:func:`band_sets`): a prediction over R moves with the knobs,
so its extremes lie at or near their ends, and a row at a batch size no calibration row has
needs its own traces at every set (all of R cost a default fit four times its search).

(hit rates: the same with the smooth part's hit-rate quantiles added as differences, not
ratios, clipped to [0, 1]); a smooth knob's interval, x̂ ± 1.645 sd from the covariance, is
likewise united over the values x̂(θ) it is re-solved to on R. Adding the two parts' widths
rather than combining them is conservative. R is known at the evaluated points only: the
search's evaluations, then, for a single knob, each side's first crossing of the threshold among
them (its grid over the bounds brackets one), bisected (:func:`_bracket_profile`); for several,
lines walked out from θ̂ (both ways along each knob's axis, each pair's diagonals and the
principal axes of the points found inside) until S crosses the threshold, the crossing bisected
(:func:`_explore_profile`). S is piecewise constant in θ (the
simulations run at fixed seeds), so a crossing is located to a fraction of a step, and a region
in several pieces counts only where a line reaches it. Where a walk finds a lower cost than
Nelder–Mead did, the fit moves there and the profile is walked again around it (at most
:data:`PROFILE_RESTARTS` times; then the fit still moves to the lowest cost, the profile is what
has been evaluated) — unless the lower cost is within :data:`PROFILE_KEEP_SHARE` of the
threshold's margin (χ²₁(0.90)·s²) below the best: then the fit moves there and keeps the cut
the walk bracketed, S ≤ S(θ̂) + margin — the new best's own cut widened by the drop, at most
that share of its margin (conservative, and a second walk of the same region saved). Without
cache knobs the bands are the smooth part's alone.

*Measured neighbours.* A row without a measured hit rate, of a batch size, rank count and stack
policy (LRU, Belady's: a larger cache holds what a smaller one would, so it hits at least as
often on the same requests; Mattson, Gecsei, Slutz & Traiger 1970, IBM Syst. J. 9:78) whose hit
rate is measured at a smaller or a larger cache, keeps its hit-rate band above the nearest
smaller one's measurement and below the nearest larger one's, each less ``z₀.₉₅·√2·σ_hit`` (the
5 % tail of the two measurements' noises): the profile's and the held knobs' ends can reach hit
rates the measured neighbours rule out (:func:`hit_bands_within_measured`).

**Peaks.** For every group of rows of one batch size, rank count and policy with three or more
cache sizes, :attr:`PlanFit.peaks` says where the predicted tok/s peaks over the group's cache
range and where the highest value of a measured curve would fall (5–95 %): the best knobs and
:data:`PEAK_SMOOTH_DRAWS` of the smooth knobs' draws, each at :data:`BAND_SEEDS`, and the
retained cache-knob sets the bands take (R', :func:`band_sets`) at the first seed — the
seeds' scatter is in the best knobs' curves already, and another seed of a cache-knob set
samples its traces anew — measured with the band's noise (:mod:`moeroof.models.curve_peak`,
where the grid and the band are defined).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple, TypeAlias

import numpy as np
from scipy.optimize import least_squares, minimize

from moeroof.core.errors import ParameterError
from moeroof.core.results import Result
from moeroof.core.stats import Interval, confidence_of, percentile_interval
from moeroof.core.units import GiB
from moeroof.data.plan_points import PlanPoint
from moeroof.data.points import MEASUREMENT_SIGMA
from moeroof.data.presets import DEFAULT_PRIORS, EFFICIENCY_FIELDS, Hardware, MoEModel
from moeroof.models.curve_peak import curve_peak, peak_grids
from moeroof.models.engine_prior import PRIOR_RECLAIM_EXPONENT, PRIOR_RECLAIM_PENALTY, unstated
from moeroof.models.local_routing import LocalRouting, routing_from_knobs, spec_skew
from moeroof.models.locality import Locality, c_per_expert_from_hot_set, from_scale, hot_set_from_c, to_scale
from moeroof.models.plan import (
    RoutingProbabilities,
    Workload,
    batch_works,
    prior_routing,
    routing_from_spec,
    skew_prior_of,
    works_rates,
)
from moeroof.models.union import as_batch

__all__ = [
    "box_with_knobs",
    "memory_curve_note",
    "worst_calibration_miss",
    "with_memory_note",
    "KNOBS",
    "SIGMA_NET",
    "SIGMA_HIT",
    "BAND_DRAWS",
    "BAND_SEEDS",
    "PROFILE_CHI2",
    "BAND_PROFILE_SETS",
    "band_sets",
    "after_walk",
    "PROFILE_KEEP_SHARE",
    "search_cache_knobs",
    "SEARCH_GRID_POINTS",
    "END_SHARES",
    "FIT_STAGES",
    "PlanKnobs",
    "PlanFit",
    "default_knobs",
    "predict_points",
    "fit_plan",
    "box_with_fit",
    "routing_with_fit",
    "PRIOR_SECONDS_PER_AGENT_TOKEN",
    "PRIOR_SECONDS_PER_STEP",
    "PRIOR_TOUCHED_SHARE",
    "PRIOR_RECLAIM_PENALTY",
    "CURVE_FAMILY_PRIOR",
    "STACK_POLICIES",
    "PRIOR_RECLAIM_EXPONENT",
    "measured_fall",
    "hit_bands_within_measured",
    "with_other_family",
    "with_reclaim_shape",
]

KNOBS = ("engine", "expert", "ssd-scale", "reclaim", "reclaim-shape", "pressure", "skew", "rho")
#: the routing ``moeroof fit-plan`` starts from without ``--routing``: the skew prior, as
#: ``moeroof plan``'s (the CLI spells it, held equal by a test, so that its parser needs no scipy)
DEFAULT_ROUTING = "prior"
#: one measurement's noise on tok/s (lognormal σ) and on a hit rate (points): the σ of a new
#: measurement that fit-routing's bands carry too (:data:`moeroof.data.points.MEASUREMENT_SIGMA`)
SIGMA_NET = 0.05
SIGMA_HIT = MEASUREMENT_SIGMA["hit_rate"][0]
BAND_DRAWS = 200
BAND_SEEDS = (0, 1, 2)
#: the tail probabilities of the bands and the knobs' intervals (5–95 %)
BAND_TAILS = (0.05, 0.95)
#: policies whose hit rate cannot fall as the cache grows (the stack algorithms: a larger cache holds
#: what a smaller one would, Mattson et al. 1970): :func:`hit_bands_within_measured` holds bands by it
STACK_POLICIES = frozenset({"lru", "belady"})
#: what a fit does, in order (``progress`` says which has begun): the knobs searched, the bands
#: sampled, each held prior's ends tried
FIT_STAGES = ("search", "bands", "prior ends")
#: the shares of the way from a held knob's centre to an end of its prior that the bands try,
#: farthest first: the first the calibration rows admit (cost within the profile threshold) is used
END_SHARES = (1.0, 0.5, 0.25)
#: cache-knob evaluations at each end a held knob is tried at, before the rows are said to rule it out
END_EVALUATIONS = 8
PROFILE_CHI2 = 1.6448536269514722**2  # χ²₁ at 0.90 = z₀.₉₅²: a two-sided 5–95 % profile interval
#: z₀.₉₅·√2: the 5 % tail of the difference of two measurements, each with the same noise σ (in σ)
TWO_MEASUREMENTS_Z = math.sqrt(2.0 * PROFILE_CHI2)
#: the popularity family held where a hit-rate curve's rows cannot tell the two apart and the routing
#: is the skew prior's (no family the user named): fitted on two of the published single-stream LRU
#: column's four sizes, Zipf predicts the other two within 3.4 points on average (every one of the six
#: pairs), the Dirichlet within 9.6 — its thin tail saturates the curve (docs/validation.md, "The
#: family of one stream's curve"; :mod:`moeroof.studies.family_prior` computes it, a test holds it)
CURVE_FAMILY_PRIOR = "zipf"
PROFILE_STEP = 0.01
PROFILE_BISECTIONS = 4
PROFILE_RESTARTS = 2
#: a walk's lower cost within this share of the profile's margin below the best moves the fit
#: but keeps the cut the walk bracketed (module docstring, Bands): a drop that small moves the
#: region's edge by less than the bisections' precision, and a second walk would re-evaluate it
PROFILE_KEEP_SHARE = 0.1
#: the most retained cache-knob sets a band is united over (module docstring, Bands); a peak's
#: band takes the same sets (module docstring, Peaks)
BAND_PROFILE_SETS = 8
#: of those sets, the most a forked child predicts beside the held knobs' prior ends (``jobs`` ≥ 2:
#: the two processes' shares of the work about equal on seed 003's default fit)
SETS_BESIDE = 1
#: the smooth knobs' draws whose curves a peak's band takes
PEAK_SMOOTH_DRAWS = 24
_SMOOTH = ("engine", "expert", "ssd-scale", "reclaim", "reclaim-shape")
_CACHE = ("skew", "rho", "pressure")


@dataclass(frozen=True)
class PlanKnobs(Result):
    """The knobs a fit may move; None: as the presets and routing have it."""

    engine_seconds_per_step: float | None = None
    engine_seconds_per_agent_token: float | None = None
    ssd_scale: float = 1.0
    page_cache_share: float | None = None
    skew: float | None = None
    rho: float = 0.0
    #: per-stream locality c of Dirichlet(c·w) (inf: off); only from the locality prior, never fitted
    c: float = math.inf
    #: engine seconds per (layer, expert) pair a step touches
    engine_seconds_per_touched_expert: float | None = None
    #: κ of the OS's reclaim work on the reads (:func:`moeroof.models.plan.reclaim_slowdown`)
    reclaim_penalty: float | None = None
    #: n ≥ 1 of the reclaim work's rise, ``1 + κ·(u/(1 − u))^n`` (None: the preset's)
    reclaim_exponent: float | None = None
    #: the shares of the memory, compute and streaming-tier peaks the engine reaches (None: the preset's)
    mem_efficiency: float | None = None
    compute_efficiency: float | None = None
    link_efficiency: float | None = None


#: the per-agent-token and per-step engine costs where the rows cannot identify them (every
#: measured rate at one batch size: the pairs a rank touches depend on B, and neither can be told
#: from a per-touched-expert cost there): (low, held, high) seconds — the suite's defaults
#: (:data:`moeroof.data.presets.DEFAULT_PRIORS`, with their sources: vLLM's 5–6.6 ms of fixed MoE
#: cost per step on an Arc Pro B70, bigrig's 37 ms at B = 1; the per-token range assumed); a
#: hardware preset may carry its own (``prior = [...]``, ``prior_source``), which fit-plan takes.
#: The rest of the measured engine time is then per touched expert (fitted), as engines far below
#: their roofline spend it (seed 003's pair at 80 GiB: 25× below its memory bandwidth).
PRIOR_SECONDS_PER_AGENT_TOKEN = DEFAULT_PRIORS["engine_seconds_per_agent_token"][0]
PRIOR_SECONDS_PER_STEP = DEFAULT_PRIORS["engine_seconds_per_step"][0]

#: the share φ of the fastest calibration step that is spent per (layer, expert) pair touched
#: (``engine_seconds_per_touched_expert`` = φ · min over the calibration rows of the measured step
#: time over the pairs a rank touches there, Σ_ℓ U_ℓ): (low, held, high). Rows at one batch size
#: cannot tell a per-step cost from a per-touched-expert one (the pairs touched depend on B only);
#: public engines span the range — bigrig's two end points (Qwen3-30B-A3B 3-bit on an Apple M4,
#: docs/sources.md) put 36 % of its B = 1 step and 85 % of its B = 16 step on the touched experts
#: (T = 37 ms + 0.055 ms per pair), and seed 003's engine, whose report asks to "measure M = 1,
#: where fixed per-step costs are largest", runs 25× below its memory roofline at 80 GiB. Used
#: where rows at two or more batch sizes fit the per-step and per-token costs, which absorb a
#: per-touched-expert cost to first order: held at 0 there (assumed), the bands carry the share 1
#: end (all of the fastest calibration step per pair).
PRIOR_TOUCHED_SHARE = (0.0, 0.0, 1.0)


#: the OS page cache's share of the RAM the expert cache leaves (``Workload.page_cache_share``)
#: where neither ``--fit pressure`` nor ``--page-cache`` says whether the engine's reads go through
#: it: (low, held, high). Held at 0 (assumed: reads that bypass it, as O_DIRECT's do), its high
#: end 1 (the kernel's default for buffered or mmap reads: every free page caches file data) in
#: the bands where it meets every calibration row within :data:`WITHIN_NOISE_Z` — whether a box's
#: streamed reads are served from the page cache is a structural choice the rows may not decide.
PRIOR_PAGE_CACHE_SHARE = (0.0, 0.0, 1.0)

#: a structural alternative (the other overlap, the page cache on) widens the bands where it meets
#: every calibration row within this many σ (its largest |z|)
WITHIN_NOISE_Z = 2.0


def default_knobs(points: Sequence[PlanPoint], *, routing_is_spec: bool = True) -> tuple[str, ...]:
    """What the calibration rows can identify and the routing allows (module docstring): ``skew``
    only for a Zipf routing (a histogram or trace has its own skew) with measured hit rates;
    ``engine`` once rates are measured at two configurations (:attr:`PlanPoint.conditions`; at
    one batch size its per-touched-expert part, the per-step and per-token parts held at their
    priors; repeated runs of one configuration count once); ``ssd-scale`` from one, or from a
    third beside the engine; ``rho`` beside the skew where hit rates are measured at three or more
    configurations: two cache knobs and a rate to spare — a single stream's locality is then the
    rows' to tell, not the locality prior's. ``expert`` (the
    per-touched-expert cost beside the per-step and per-token ones, at two or more batch sizes)
    only when named; a memory knob only as :func:`choose_memory_knob` adds it."""
    # configurations, not rows: repeated runs of one measure its noise, not another knob
    n_net = len({p.conditions for p in points if p.net_tok_s is not None})
    n_hit = sum(p.hit_rate is not None for p in points)
    batches = {p.batch for p in points if p.net_tok_s is not None}
    engine_params = 2 if len(batches) >= 2 else 1
    knobs: list[str] = []
    if n_hit and routing_is_spec:
        knobs.append("skew")
        if len({p.conditions for p in points if p.hit_rate is not None}) >= 3:
            knobs.append("rho")
    if n_net == 1:
        knobs.append("ssd-scale")
    elif n_net >= 2:
        knobs.append("engine")
        if n_net >= engine_params + 1:
            knobs.append("ssd-scale")
    return tuple(knobs)


def memory_curve_note(points: Sequence[PlanPoint], fitted: Sequence[str]) -> str | None:
    """A note where the calibration rows measure tok/s at three or more expert-cache sizes of one
    batch size and rank count and neither memory knob (``pressure``, the page cache's share;
    ``reclaim``, the reclaim work) is fitted: such a curve's bend can tell one of them, but which
    one a box has is a structural choice :func:`default_knobs` does not make; where no knob is
    named, :func:`choose_memory_knob` makes it from the rows (seed 003's ladder reads as the page
    cache, mlx-lm#1438's peak as reclaim: docs/validation.md), and this note goes with named knobs."""
    sizes: dict[tuple[int, int], set[float]] = {}
    for p in points:
        if p.net_tok_s is not None:
            sizes.setdefault((p.batch, p.ranks), set()).add(float(p.cache_gib))
    n = max((len(v) for v in sizes.values()), default=0)
    if n < 3 or {"pressure", "reclaim"} & set(fitted):
        return None
    return (
        f"the rows measure tok/s at {n} expert-cache sizes of one batch size: how the step bends with the "
        "cache can tell the page cache's share of the RAM the cache leaves (knob pressure) or the reclaim "
        "work as free memory runs out (knob reclaim); neither is fitted unless named — which one the box "
        "has is a structural choice"
    )


#: the box's fields a fit sets where fitted or held, beside its engine's per-step and per-token costs and SSD curve
_BOX_FIELDS = ("engine_seconds_per_touched_expert", "reclaim_penalty", "reclaim_exponent", *EFFICIENCY_FIELDS)


def box_with_knobs(hardware: Hardware, knobs: PlanKnobs) -> Hardware:
    """The box as the knobs make it: SSD bandwidth scaled, engine terms set where fitted."""
    changes: dict[str, Any] = {"bw_ssd_bytes_per_s": tuple(b * knobs.ssd_scale for b in hardware.bw_ssd_bytes_per_s)}
    if knobs.engine_seconds_per_step is not None:
        changes["engine_seconds_per_step"] = float(knobs.engine_seconds_per_step)
        changes["engine_seconds_per_agent_token"] = float(knobs.engine_seconds_per_agent_token or 0.0)
    for key in _BOX_FIELDS:
        if getattr(knobs, key) is not None:
            changes[key] = float(getattr(knobs, key))
    return replace(hardware, **changes)


def box_with_fit(hardware: Hardware, fit: dict[str, Any]) -> Hardware:
    """The box as a fit-plan result makes it (:func:`moeroof.data.fit_result.read_fit`): its
    engine terms set, its SSD curve scaled; each field so changed tagged ``projected`` (fitted to
    measurements, not itself measured) with the fit named as its source."""
    from types import MappingProxyType

    changed: dict[str, Any] = {}
    for key in ("engine_seconds_per_step", "engine_seconds_per_agent_token", *_BOX_FIELDS):
        if key in fit:
            changed[key] = float(fit[key])
    if "ssd_scale" in fit:
        changed["bw_ssd_bytes_per_s"] = tuple(b * float(fit["ssd_scale"]) for b in hardware.bw_ssd_bytes_per_s)
    prov, sources = dict(hardware.provenance), dict(hardware.sources)
    for key in changed:
        prov[key] = "projected"
        sources[key] = f"fitted by moeroof fit-plan ({fit.get('path', 'a fit')})"
    return replace(hardware, **changed, provenance=MappingProxyType(prov), sources=MappingProxyType(sources))


def skew_parameter(family: str, skew: float) -> float:
    """The family's own parameter at a fit's skew knob: Zipf s itself; for a Dirichlet routing
    the knob is the popularity's coefficient of variation ``1/√α`` (0 uniform, as Zipf's 0, and
    bounded as Zipf's s is), so ``α = 1/skew²`` (at most 1e12: uniform)."""
    if family == "zipf":
        return float(skew)
    return float(min(1.0 / max(float(skew), 1e-6) ** 2, 1e12))


def skew_knob(family: str, parameter: float) -> float:
    """The inverse of :func:`skew_parameter`: the skew knob of a family's parameter."""
    return float(parameter) if family == "zipf" else float(1.0 / math.sqrt(max(float(parameter), 1e-12)))


def skew_spec(family: str, skew: float) -> str:
    """The routing spec of a family at a skew knob (``zipf:S``, ``dirichlet:A``)."""
    return f"{family}:{skew_parameter(family, skew):.10g}"


def routing_with_fit(model: MoEModel, fit: dict[str, Any]):
    """The routing a fit-plan result ran on when it fitted the skew or held one stream's
    locality (None: neither): its family at the fitted skew (else its spec routing's own), or
    with stickiness ρ > 0 or a per-stream locality c a
    :class:`~moeroof.models.local_routing.LocalRouting` (``B -> RoutingProbabilities``, a trace
    of B streams), as the fit ran; a histogram's fit with held locality, the same on its π."""
    rho = float(fit.get("rho", 0.0))
    c_per_expert = fit.get("locality_c_per_expert")
    c = math.inf if c_per_expert is None else float(c_per_expert) * model.experts
    local = rho > 0 or not math.isinf(c)
    spec = str(fit.get("routing_spec") or "")
    if "skew" in fit:
        # a fit written before the family was recorded fitted a Zipf routing
        family = str(fit.get("skew_family") or "zipf")
        base = routing_from_spec(skew_spec(family, float(fit["skew"])), model)
    elif local:
        base = routing_from_spec(spec, model)
        if base.trace is not None:
            return None  # a trace keeps its own correlations (fit_plan's note)
        if spec_skew(base) is None:
            # a histogram's popularity with the fit's held locality on top, as the fit ran
            return LocalRouting(model, base, rho, c, "locality the fit held")
    else:
        return None
    if local:
        return LocalRouting(model, base, rho, c, "locality the fit held", family_skew=spec_skew(base))
    return base


def _skew_start(routing: RoutingProbabilities, default: float = 0.8) -> tuple[str, float]:
    """A routing's family and skew knob (:func:`skew_knob`) where a fit starts its skew: its own
    for a routing given by knobs, else Zipf ``default``."""
    fs = spec_skew(routing)
    return ("zipf", default) if fs is None else (fs[0], skew_knob(*fs))


def _routing(
    model: MoEModel, base: RoutingProbabilities, knobs: PlanKnobs, streams: int, seed: int, routes: dict | None = None
):
    local = knobs.rho > 0.0 or not math.isinf(knobs.c)
    if knobs.skew is None and not local:
        return base
    family, s0 = _skew_start(base)
    s = s0 if knobs.skew is None else float(knobs.skew)
    key = (family, s, knobs.skew is None, float(knobs.rho), float(knobs.c), streams, seed if local else 0)
    make: Callable[[], Any]
    if local and knobs.skew is None and spec_skew(base) is None:
        # a histogram's own popularity, with the locality on top (moeroof.models.local_routing)
        make = lambda: LocalRouting(model, base, float(knobs.rho), float(knobs.c), "held locality", seed)(streams)
    elif local:
        make = lambda: routing_from_knobs(
            model, family, skew_parameter(family, s), knobs.rho, knobs.c, streams=streams, seed=seed
        )
    else:
        make = lambda: routing_from_spec(skew_spec(family, s), model)
    return _memo(routes, key, make)  # one fit asks for the same routing many times (draws, seeds, rows)


def predict_points(
    points: Sequence[PlanPoint],
    model: MoEModel,
    hardware: Hardware,
    routing: RoutingProbabilities,
    knobs: PlanKnobs,
    *,
    context_tokens: int = 4096,
    page_cache: bool = False,
    seed: int = 0,
    overlap: str = "max",
    routes: dict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted net tok/s and hit rate of every point (in order), as :func:`plan` computes them
    (:func:`moeroof.models.plan.plan_rates`). ``routes``: a memo the caller keeps for one fit (one
    ``hardware``, ``routing`` and ``points``): the routings sampled or computed from the knobs
    (skew, ρ, streams, seed) and the step work of each row (:class:`~moeroof.models.plan.StepWork`,
    keyed by the knobs that change it), so that moving only the knobs that price the work (the
    engine terms, the SSD scale, the efficiencies, the reclaim work) re-evaluates seconds and
    does not rebuild the caches. The numbers are the same with or without it."""
    hw = box_with_knobs(hardware, knobs)
    local = knobs.rho > 0.0 or not math.isinf(knobs.c)
    if local:
        # a trace sampled with each row's own B streams (as plan --fit runs it): a row's prediction
        # never depends on the largest B among the other rows
        def route(b: int) -> RoutingProbabilities:
            return _routing(model, routing, knobs, int(b), seed, routes)
    else:
        route = _routing(model, routing, knobs, max(p.batch for p in points), seed, routes)
    share = 1.0 if knobs.page_cache_share is None else float(knobs.page_cache_share)
    pc = page_cache or knobs.page_cache_share is not None
    net = np.empty(len(points))
    hit = np.empty(len(points))
    # the rows' groups (one cache, rank count and policy each) and their workloads: the same at
    # every call of one fit but for the page cache's share and the seed
    rows_key = tuple((p.cache_gib, p.ranks, p.policy, p.batch) for p in points)
    # the routing named too: one memo may serve fits on several routings (the other skew family's)
    layout_key = ("groups", routing.label, rows_key, pc, share, seed, context_tokens, overlap)
    workload = Workload(
        context_tokens=context_tokens, page_cache=pc, page_cache_share=share, seed=seed, overlap=overlap
    )
    layout = _memo(routes, layout_key, partial(_row_groups, points, workload))
    jobs = []
    for n_group, (idx, w, b) in enumerate(layout):
        # the work depends on the box's prices only through the bytes partition (it balances them)
        key = ("work", layout_key, n_group, knobs.skew, knobs.rho, knobs.c, local)
        works = _memo(None if w.partition == "bytes" else routes, key, partial(batch_works, model, hw, w, route, b))
        jobs.append((idx, b, works))
    # every row's work evaluated at once (plan's numbers, without its baselines): the prices
    # (engine terms, SSD scale, efficiencies, reclaim work) are the same for every row of one call
    flat = [x for _, _, works in jobs for x in works]
    # the first group's workload: its pressure penalty, overlap and exchange are every group's
    rates = iter(works_rates(hw, layout[0][1], flat))
    for idx, b, works in jobs:
        got = [next(rates) for _ in works]
        where = {int(bb): j for j, bb in enumerate(b)}
        at = [where[points[i].batch] for i in idx]
        net[idx] = np.concatenate([r[0] for r in got])[at]
        hit[idx] = np.concatenate([r[1] for r in got])[at]
    return net, hit


def _memo(routes: dict | None, key: tuple, make: Callable[[], Any]) -> Any:
    """``make()``, kept in ``routes`` under ``key`` and taken from there the next time (None: made each time)."""
    if routes is None:
        return make()
    if key not in routes:
        routes[key] = make()
    return routes[key]


def _row_groups(points: Sequence[PlanPoint], base: Workload) -> list[tuple[list[int], Workload, np.ndarray]]:
    """:func:`predict_points`' groups of rows, one per (cache size, rank count, policy): the
    rows' indices, their workload (``base`` with that cache, ranks and policy) and their batch
    sizes, ascending."""
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault((p.cache_gib, p.ranks, p.policy), []).append(i)
    return [
        (
            idx,
            replace(base, cache_bytes=cache * GiB, ranks=ranks, cache_policy=policy),
            as_batch(sorted({points[i].batch for i in idx})),
        )
        for (cache, ranks, policy), idx in groups.items()
    ]


#: points of the grid a single cache knob is first evaluated on, its bounds included (:func:`search_cache_knobs`)
SEARCH_GRID_POINTS = 7
#: the share of a single cache knob's range at which its Nelder–Mead search stops (:func:`search_cache_knobs`)
SEARCH_XATOL = 1e-2


def search_cache_knobs(cost: Callable[[np.ndarray], float], z0: np.ndarray, bounds, max_evaluations: int) -> str:
    """Minimise ``cost`` over the cache knobs from ``z0`` within ``bounds`` (one (low, high) per
    knob) in at most ``max_evaluations`` evaluations; says how. Several knobs: Nelder–Mead from
    ``z0``. One knob: the cost is rough at fine scales (each value samples its own traces: two
    values 0.002 apart differ by a few units) and can have more than one basin, so the knob is
    first evaluated on :data:`SEARCH_GRID_POINTS` evenly spaced values over its bounds and at
    ``z0``, then Nelder–Mead starts at the best of them with a step of half the grid's spacing and
    stops when its simplex is :data:`SEARCH_XATOL` of the range (not on the cost's change, which
    the roughness never lets settle; nor finer: below about 1 % of the range the cost's
    differences are the roughness, and the profile brackets the knob's interval to a 32nd of the
    grid's spacing anyway)."""
    if len(z0) != 1:
        minimize(cost, z0, method="Nelder-Mead", options={"maxfev": int(max_evaluations), "xatol": 1e-3, "fatol": 1e-3})
        return "by Nelder–Mead"
    lo, hi = (float(v) for v in bounds[0])
    grid = np.linspace(lo, hi, SEARCH_GRID_POINTS)
    tried = {float(z0[0]): cost(z0)}
    for g in grid:
        tried.setdefault(float(g), cost(np.array([g])))
    best = min(tried, key=lambda z: tried[z])
    step = (hi - lo) / (SEARCH_GRID_POINTS - 1) / 2
    other = best + step if best + step <= hi else best - step
    left = int(max_evaluations) - len(tried)
    if left > 0:
        minimize(
            cost,
            np.array([best]),
            method="Nelder-Mead",
            options={
                "maxfev": left,
                "xatol": SEARCH_XATOL * (hi - lo),
                "fatol": np.inf,
                "initial_simplex": np.array([[best], [other]]),
            },
        )
    return f"on a grid of {SEARCH_GRID_POINTS} values and the start, then by Nelder–Mead from the best"


def band_sets(profile: Sequence[dict[str, Any]], names: Sequence[str], most: int) -> list[dict[str, Any]]:
    """At most ``most`` of the retained cache-knob sets ``profile`` (in their order): the sets
    holding each knob's smallest and largest value over the profile, then sets spread evenly
    over the rest. Fewer than ``most``: all of them."""
    if len(profile) <= most:
        return list(profile)
    chosen: list[int] = []
    for n in names:
        vals = [e["outer"][n] for e in profile]
        for j in (int(np.argmin(vals)), int(np.argmax(vals))):
            if j not in chosen:
                chosen.append(j)
    rest = [j for j in range(len(profile)) if j not in chosen]
    room = max(most - len(chosen), 0)
    if room and rest:
        chosen += [rest[int(v)] for v in np.unique(np.linspace(0, len(rest) - 1, min(room, len(rest))).round())]
    return [profile[j] for j in sorted(chosen)]


def _bracket_profile(inside, tried, z_hat: float) -> None:
    """One cache knob's profile (:func:`_explore_profile`): both ways from ``z_hat``, the
    evaluated values ``tried()`` (the search's grid holds the bounds) give the first crossing —
    the farthest value inside before the nearest one outside — which is bisected
    :data:`PROFILE_BISECTIONS` times; a side inside up to its bound needs nothing more. The
    grid's spacing brackets each crossing as a walk of doubling steps would, without its steps."""
    for sgn in (1.0, -1.0):
        side = sorted((z for z in tried() if sgn * (z - z_hat) > 0), key=lambda z: sgn * (z - z_hat))
        z_in, z_out = z_hat, None
        for z in side:
            if not inside(np.array([z])):
                z_out = z
                break
            z_in = z
        if z_out is not None:
            _bisect(lambda z: inside(np.array([z])), z_in, z_out)


def _bisect(inside: Callable[[float], bool], t_in: float, t_out: float) -> None:
    """Bisect a profile's crossing between ``t_in`` (inside) and ``t_out`` (outside) :data:`PROFILE_BISECTIONS`
    times (``inside(t)``, the profile test, records each evaluation)."""
    for _ in range(PROFILE_BISECTIONS):
        t = 0.5 * (t_in + t_out)
        if inside(t):
            t_in = t
        else:
            t_out = t


def _explore_profile(inside, kept, z_hat: np.ndarray, lo: np.ndarray, hi: np.ndarray, tried) -> None:
    """Walk out from the best cache knobs ``z_hat`` along lines until ``inside(z)`` (the profile
    test, which records the evaluation) fails, then bisect the crossing (:data:`PROFILE_BISECTIONS`
    times): first both ways along every knob's axis and, with two or more knobs, every pair's
    diagonals, in units of each knob's range (first step :data:`PROFILE_STEP`, doubling); then both
    ways along the principal axes of the sets ``kept()`` has found inside so far, so that a region
    stretched along no axis is still walked to its ends. One knob, whose search evaluated a grid
    over its bounds (``tried()``: the values evaluated so far): :func:`_bracket_profile` instead."""
    p = z_hat.size
    if p == 1:
        _bracket_profile(inside, tried, float(z_hat[0]))
        return
    span = hi - lo

    def walk(u: np.ndarray) -> None:
        t_in, t_out, t, prev = 0.0, None, PROFILE_STEP, z_hat
        while t_out is None:
            z = np.clip(z_hat + t * u * span, lo, hi)
            if np.array_equal(z, prev):  # the line has left the box: inside up to its bounds
                return
            prev = z
            if inside(z):
                t_in, t = t, 2.0 * t
            else:
                t_out = t
        _bisect(lambda s: inside(np.clip(z_hat + s * u * span, lo, hi)), t_in, t_out)

    eye = np.eye(p)
    lines = [eye[i] for i in range(p)]
    lines += [eye[i] + sgn * eye[j] for i in range(p) for j in range(i + 1, p) for sgn in (1.0, -1.0)]
    for u in lines:
        for sgn in (1.0, -1.0):
            walk(sgn * u)
    inner = np.array(kept(), dtype=float).reshape(-1, p)
    if p >= 2 and len(inner) > p:
        d = (inner - z_hat) / span
        _, vecs = np.linalg.eigh(d.T @ d)
        for v in vecs.T:
            for sgn in (1.0, -1.0):
                walk(sgn * v / np.max(np.abs(v)))


@dataclass(frozen=True)
class PlanFit(Result):
    """``knobs``: name → value, low, high, fitted, unit; ``rows``: one per input point in input
    order (role, measured, predicted, low, high, measured and predicted hit rate)."""

    knobs: dict[str, dict[str, Any]]
    rows: list[dict[str, Any]]
    fitted: tuple[str, ...]
    cost: float
    notes: tuple[str, ...] = field(default=())
    overlap: str = "max"
    overlaps: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per group of rows with three or more cache sizes (one batch size, rank count and policy):
    #: where the predicted tok/s peaks over them and the 5–95 % band of a measured peak
    #: (:mod:`moeroof.models.curve_peak`)
    peaks: tuple[dict[str, Any], ...] = ()
    #: the routing the knobs were fitted on where the fit chose the other skew family than the
    #: routing it was given fits in (:func:`with_other_family`), else None
    family_routing: str | None = None


def _peaks(
    pts, predict, best: PlanKnobs, draws: Sequence[PlanKnobs], sets: Sequence[PlanKnobs], sigma: float
) -> list[dict[str, Any]]:
    """:attr:`PlanFit.peaks`: for each group of :func:`moeroof.models.curve_peak.peak_grids`, the
    best knobs' curve averaged over :data:`BAND_SEEDS`, the curves of ``best`` and ``draws`` (the
    smooth knobs' draws) at each seed and of ``sets`` (cache-knob sets) at the first
    (``predict(knobs, seed, rows)`` → (tok/s, hit rate)), measured with noise ``sigma``."""
    out = []
    for (b, ranks, policy), grid in peak_grids(pts):
        rows = [PlanPoint(-1, b, float(c), ranks, policy, None, None) for c in grid]
        curves = np.array(
            [predict(k, sd, rows)[0] for k in (best, *draws) for sd in BAND_SEEDS]
            + [predict(k, BAND_SEEDS[0], rows)[0] for k in sets]
        )
        best_curve = curves[: len(BAND_SEEDS)].mean(axis=0)
        peak = curve_peak(grid, best_curve, curves, sigma)
        if peak is not None:  # None: the batch fits at no size of the group
            out.append({"batch": b, "ranks": ranks, "policy": policy, **peak})
    return out


class _Smooth(NamedTuple):
    """One smooth knob's parameter: the knob ``--fit`` names, its name in the notes, its
    :class:`PlanKnobs` field (the knob table's key), its bounds and unit, and where the least squares
    start it (None: the engine's, :func:`_engine_start`)."""

    knob: str
    label: str
    field: str
    bounds: tuple[float, float]
    unit: str
    start: float | None = None


#: the smooth knobs' parameters, in the order of their vector
_SMOOTH_PARAMS = (
    _Smooth("engine", "c0", "engine_seconds_per_step", (0.0, 10.0), "s"),
    _Smooth("engine", "c1", "engine_seconds_per_agent_token", (0.0, 10.0), "s"),
    _Smooth("expert", "expert", "engine_seconds_per_touched_expert", (0.0, 0.1), "s"),
    _Smooth("ssd-scale", "ssd-scale", "ssd_scale", (1e-3, 1e3), "×", 1.0),
    _Smooth("reclaim", "reclaim", "reclaim_penalty", (0.0, 50.0), "κ", 0.5),
    _Smooth("reclaim-shape", "reclaim-shape", "reclaim_exponent", (1.0, 4.0), "n", 1.5),
)
#: the cache knobs' bounds, by their names in ``--fit``
_CACHE_BOUNDS = {"skew": (0.0, 3.0), "rho": (0.0, 0.95), "pressure": (0.0, 1.0)}


def _smooth_params(names: Sequence[str], hold_token: bool) -> list[_Smooth]:
    """The fitted smooth knobs' parameters, in the order of their vector: with every measured rate at one
    batch size (``hold_token``) the engine's one is its per-touched-expert cost."""
    fitted = (set(names) - {"engine"}) | {"expert"} if hold_token else set(names)
    return [p for p in _SMOOTH_PARAMS if p.knob in fitted]


def _locality_note(prior: _HeldLocality, reached) -> str:
    """fit-plan's note on the locality ``prior`` it held: its centre, and how much of its 5–95 %
    range the calibration rows admitted (``reached``: each end's ρ and share t)."""
    (r_a, t_a), (r_b, t_b) = reached
    rng = f"ρ {float(prior.rho_ends[0]):.2g}–{float(prior.rho_ends[1]):.2g}"
    if t_a == 1.0 and t_b == 1.0:
        tail = f"; the bands include its least and most local ends ({rng})"
    elif t_a == 0.0 and t_b == 0.0:
        tail = (
            f"; of its 5–95 % range ({rng}) the calibration rows admit neither end, not even a quarter of "
            "the way: the locality stays at its centre (the bands carry none of its spread)"
        )
    else:
        tail = (
            f"; of its 5–95 % range ({rng}) the calibration rows admit ρ {r_a:.2g}–{r_b:.2g}, and the bands cover that"
        )
    return (
        f"stickiness and per-stream locality held at the {prior.label}: the cache runs on a trace with "
        f"ρ = {prior.rho:.2f} and a per-stream hot set of {prior.hot_set:.2g}·K experts"
        + (" (off for this model)" if math.isinf(prior.c_per_expert) else f" (c = {prior.c_per_expert:.3g}·E)")
        + tail
    )


def _span(values) -> Interval:
    """A cache knob's profile-likelihood interval: its range over the retained sets ``values``."""
    return Interval(float(min(values)), float(max(values)), confidence_of(BAND_TAILS), "profile likelihood")


def _identified(sol, x: np.ndarray, labels: Sequence[str], notes: list[str]) -> np.ndarray:
    """Which fitted smooth knobs (``x``, named ``labels``) the rows identify, from the solution's
    Jacobian; a note for each that is not (appended to ``notes``). A knob is identified unless it
    has a component along a direction the rows do not constrain: a zero column, or collinear
    columns (c0 and c1 at one batch size)."""
    identified = np.ones(x.size, dtype=bool)
    if sol is None or not x.size:
        return identified
    jac = np.asarray(sol.jac, dtype=float) * np.maximum(np.abs(x), 1e-12)  # relative sensitivities
    _, sing, vt = np.linalg.svd(jac, full_matrices=True)
    sing = np.concatenate([sing, np.zeros(vt.shape[0] - sing.size)])
    null = vt[sing <= 1e-6 * max(float(sing.max()), 1e-300)]
    identified = ~(np.abs(null) > 0.1).any(axis=0) if null.size else identified
    for name, ok in zip(labels, identified):
        if not ok:
            notes.append(
                f"{name} is not identified by these rows (another term binds at every calibration row, or the "
                "rows cannot tell it from another knob, e.g. per-step and per-token engine cost at one batch size)"
            )
    return identified


def _held_entries(hardware: Hardware, held: _HeldKnobs) -> dict[str, dict[str, Any]]:
    """The knob table's entries of the knobs ``held`` at priors: the box's efficiencies and, where
    the locality prior is held, its ρ's and c/E's (centre, 5 % and 95 %)."""
    out: dict[str, dict[str, Any]] = {}
    for key in held.efficiency:
        (lo_e, mid_e, hi_e), src = hardware.priors[key]
        why = "no row here tells it from the engine and SSD terms: held at its prior, the bands cover its range"
        out[key] = _held_entry(mid_e, lo_e, hi_e, "prior", why, "share", source=src)
    if held.reclaim:
        lo_r, mid_r, hi_r = PRIOR_RECLAIM_PENALTY
        why = "not fitted (--fit reclaim fits it): held at its prior, the bands cover its high end as far as the rows admit"
        out["reclaim_penalty"] = _held_entry(mid_r, lo_r, hi_r, "prior", why, "κ")
    if held.shape:
        lo_n, mid_n, hi_n = PRIOR_RECLAIM_EXPONENT
        why = (
            "not fitted (--fit reclaim,reclaim-shape fits it; the default fits it where the rows measure a "
            "configuration for it beside the other knobs): held at its prior, the bands cover its range as far as the rows admit"
        )
        out["reclaim_exponent"] = _held_entry(mid_n, lo_n, hi_n, "prior", why, "n")
    if held.page:
        lo_p, mid_p, hi_p = PRIOR_PAGE_CACHE_SHARE
        why = (
            "not fitted (--fit pressure fits it, --page-cache turns it on at 1): held at its prior, off, the bands "
            f"cover its high end where it meets every calibration row within {WITHIN_NOISE_Z:g} σ"
        )
        out["page_cache_share"] = _held_entry(mid_p, lo_p, hi_p, "prior", why, "share")
    local = held.locality
    if local is None:
        return out
    why = (
        "the rows cannot identify one stream's locality: held at the locality prior fitted on real decode "
        "(assumed for this model), its 5–95 % range in the bands"
    )
    ranges = ((local.rho, *local.rho_ends), (local.c_per_expert, *local.c_per_expert_range))
    for (key, unit), (value, lo, hi) in zip((("rho", "ρ"), ("locality_c_per_expert", "c/E")), ranges):
        out[key] = _held_entry(value, float(lo), float(hi), local.label, why, unit)
    return out


def _held_entry(value, low, high, held: str, why: str, unit: str, **more: Any) -> dict[str, Any]:
    """A knob table entry of a knob held (not fitted, not identified) over its prior range."""
    return _entry(value, low, high, unit, fitted=False, identified=False, held=held, **more, why=why)


def _entry(value, low, high, unit: str, *, fitted: bool, identified: bool, **more: Any) -> dict[str, Any]:
    """A knob table entry: its value and 5–95 % range, whether it is fitted and identified, ``more`` (why
    it is held or not identified, ...) and its unit."""
    return {"value": value, "low": low, "high": high, "fitted": fitted, "identified": identified, **more, "unit": unit}


#: where the search starts a cache knob (the skew: its routing's own, :func:`_skew_start`)
_CACHE_STARTS = {"rho": 0.2, "pressure": 0.5}

#: one held knob's end as far as the rows admit it (:meth:`_PriorEnds.admitted_end`): the share t of
#: the way from its centre to the end, and the rows' (tok/s, hit rate) there (None: not past the centre)
_EndAnswer: TypeAlias = tuple[float, tuple[np.ndarray, np.ndarray] | None]


def _named_knobs(rows: _Rows, fit: Sequence[str] | None, routing_is_spec: bool) -> tuple[tuple[str, ...], bool]:
    """The knobs a fit fits: ``fit``, or what the rows identify (:func:`default_knobs`); and whether
    it holds the per-token engine cost (:attr:`_Fit.hold_token`). Raises
    :class:`ParameterError` for an unknown knob, a knob named without the one it is fitted with,
    more knobs than the rows can identify, ``skew`` on a routing not given by its knobs, or none."""
    names = tuple(default_knobs(rows.points, routing_is_spec=routing_is_spec) if fit is None else fit)
    for k in names:
        if k not in KNOBS:
            raise ParameterError("fit", f"unknown knob {k!r} (known: {', '.join(KNOBS)})")
    n_net, n_hit = int(rows.net_measured.sum()), int(rows.hit_measured.sum())
    # every measured rate at one batch size: the per-token engine cost cannot be told from the
    # per-step one; it is held at its prior (PRIOR_SECONDS_PER_AGENT_TOKEN) and widens the bands
    hold_token = "engine" in names and len(rows.net_batches) < 2
    if "reclaim-shape" in names and "reclaim" not in names:
        raise ParameterError("fit", "reclaim-shape (the reclaim work's exponent) is fitted with reclaim: name both")
    if "expert" in names and "engine" not in names:
        raise ParameterError("fit", "expert (the per-touched-expert engine cost) is fitted with engine: name both")
    # one batch size: the engine's one fitted knob is the per-touched-expert cost, its per-step and
    # per-token costs held at their priors; two or more: per-step and per-token fitted (and the
    # per-touched-expert cost where named), else held at its prior share
    n_smooth = len(_smooth_params(names, hold_token))
    if n_smooth > n_net:
        raise ParameterError(
            "fit",
            f"{', '.join(k for k in names if k in _SMOOTH)} need {n_smooth} measured net tok/s rows, the file has {n_net}",
        )
    cache_knobs = [k for k in names if k in _CACHE]
    if len(cache_knobs) > n_hit + max(n_net - n_smooth, 0):
        raise ParameterError("fit", f"{', '.join(cache_knobs)} need more calibration rows than the file has")
    if "skew" in names and not routing_is_spec:
        raise ParameterError(
            "fit",
            "skew fits a routing given by its knobs: start from prior, uniform, zipf:S or dirichlet:A, not a file",
        )
    if not names:
        raise ParameterError("fit", "nothing to fit: the rows identify no knob")
    return names, hold_token


@dataclass(frozen=True)
class _Rows:
    """A fit's rows in input order and what they measure: which have a measured net tok/s
    (``net_measured``) and hit rate (``hit_measured``), and those values (NaN where not measured)."""

    points: list[PlanPoint]
    net_measured: np.ndarray
    hit_measured: np.ndarray
    net: np.ndarray
    hit: np.ndarray
    #: the rows with a measured value (the search prices these alone: a row's prediction never
    #: depends on the others asked with it; the bands predict every row)
    calibrates: np.ndarray
    calibration_points: list[PlanPoint]

    @classmethod
    def of(cls, points: list[PlanPoint]) -> _Rows:
        """The rows of ``points`` (a list: the fit keeps it)."""
        net_measured = np.array([p.net_tok_s is not None for p in points])
        hit_measured = np.array([p.hit_rate is not None for p in points])
        calibrates = net_measured | hit_measured
        return cls(
            points,
            net_measured,
            hit_measured,
            np.array([p.net_tok_s if p.net_tok_s is not None else np.nan for p in points]),
            np.array([p.hit_rate if p.hit_rate is not None else np.nan for p in points]),
            calibrates,
            [p for p, used in zip(points, calibrates) if used],
        )

    @property
    def net_batches(self) -> list[int]:
        """The batch sizes at which a net tok/s is measured, ascending."""
        return sorted({p.batch for p in self.points if p.net_tok_s is not None})

    @property
    def n_residuals(self) -> int:
        """The measured values (net tok/s and hit rates) the fit's residuals compare with."""
        return int(self.net_measured.sum() + self.hit_measured.sum())

    def step_seconds(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows with a measured net tok/s: their batch sizes and their measured step times (s)."""
        measured = [p for p in self.points if p.net_tok_s is not None]
        batches = np.array([p.batch for p in measured], dtype=float)
        return batches, batches / np.array([p.net_tok_s for p in measured])


@dataclass(frozen=True)
class _HeldLocality:
    """The locality prior a fit holds (``_fit_one``'s ``locality``; not on a trace, whose own
    correlations are what the cache sees, nor with ρ fitted): the cache runs on a trace at its
    centre, and the bands try its least and most local ends (:meth:`Locality.paired` at 5 % and 95 %)."""

    label: str
    #: ρ, the per-stream hot set h (a share of the picks) and this model's c/E at the centre
    rho: float
    hot_set: float
    c_per_expert: float
    #: ρ at the least and the most local end, and h paired with each
    rho_ends: tuple[float, float]
    hot_set_ends: tuple[float, float]
    #: c/E at its 5 % and 95 %, which the knob table gives as its range
    c_per_expert_range: tuple[float, float]


def _held_locality(
    locality: Locality | None, model: MoEModel, routing: RoutingProbabilities, names: tuple[str, ...]
) -> _HeldLocality | None:
    """The locality prior as a fit with ``names`` holds it on ``routing``; None where it holds none."""
    if locality is None or routing.trace is not None or "rho" in names:
        return None
    r_c, c_c = locality.centre_for(model.experts, model.top_k)
    h_c = locality.centre[1]
    (r_lo, r_hi), (h_hi, h_lo) = locality.paired([0.05, 0.95])
    c_hi, c_lo = (float(v) for v in c_per_expert_from_hot_set([h_hi, h_lo], model.experts, model.top_k))
    return _HeldLocality(locality.label, r_c, h_c, c_c, (r_lo, r_hi), (h_hi, h_lo), (c_lo, c_hi))


@dataclass(frozen=True)
class _HeldKnobs:
    """The knobs a fit holds at priors and their values now. ``values``: the engine's per-agent-token,
    per-step and per-touched-expert costs (``token``, ``step``, ``touched``), the efficiencies held
    and, where the skew prior's routing is held, its skew knob; ``local``: the stickiness ρ and the
    per-stream locality c (inf: off). Each sits at its prior's centre but while the bands try its
    ends (:class:`_PriorEnds`, which puts it back)."""

    values: dict[str, float]
    local: dict[str, float]
    #: the efficiencies held: all of them but the streaming tier's where the SSD scale is fitted
    efficiency: list[str]
    #: the skew prior (:func:`moeroof.models.plan.skew_prior_of`) where its routing's skew is held, else None
    skew_prior: Any
    locality: _HeldLocality | None
    #: the fastest calibration step over the (layer, expert) pairs a rank touches there, s per pair
    #: (0 without the engine fitted): the per-touched-expert cost at its prior share 1
    touched_cap: float
    #: where ``--fit`` does not name the engine: the engine costs (``step``, ``token``, ``touched``)
    #: the preset leaves unstated, held at the box's priors (:data:`ENGINE_FIELDS`), never at its 0
    engine: tuple[str, ...] = ()

    @property
    def reclaim(self) -> bool:
        """The reclaim work's κ is held at :data:`PRIOR_RECLAIM_PENALTY` (``values["reclaim"]``)."""
        return "reclaim" in self.values

    @property
    def page(self) -> bool:
        """The page cache's share is held at :data:`PRIOR_PAGE_CACHE_SHARE` (``values["page"]``)."""
        return "page" in self.values

    @property
    def shape(self) -> bool:
        """The reclaim work's shape n is held at :data:`PRIOR_RECLAIM_EXPONENT` (``values["shape"]``)
        where its κ is fitted without it."""
        return "shape" in self.values


def _touched_pairs(points: Sequence[PlanPoint], model: MoEModel, routing: RoutingProbabilities) -> np.ndarray:
    """The (layer, expert) pairs a rank touches at each row with a measured net tok/s (independent tokens)."""
    from moeroof.models.union import union_plugin

    measured = [p for p in points if p.net_tok_s is not None]
    per_layer = [float(np.mean(union_plugin(routing.pi, [p.batch]).union_per_layer)) for p in measured]
    return np.array([max(model.moe_layers * u / p.ranks, 1e-9) for u, p in zip(per_layer, measured)])


#: the engine costs a fit holds, each with its :class:`PlanKnobs` (and preset) field
ENGINE_FIELDS = {
    "step": "engine_seconds_per_step",
    "token": "engine_seconds_per_agent_token",
    "touched": "engine_seconds_per_touched_expert",
}


def _held_knobs(
    names: tuple[str, ...],
    hardware: Hardware,
    routing: RoutingProbabilities,
    held_locality: _HeldLocality | None,
    touched_cap: float,
    experts: int,
    page_cache: bool = False,
) -> _HeldKnobs:
    """The held knobs at their priors' centres: the engine costs the rows cannot tell apart, the
    efficiencies no row here identifies (the engine and SSD terms absorb what they can; the
    streaming tier's only where its scale is not fitted), the skew prior's skew where it is not
    fitted, the locality prior's ρ and c (``experts``: the model's, for c = c/E · E), the reclaim
    work's κ where nothing states it, and the page cache's share where neither ``pressure`` is
    fitted nor ``page_cache`` turns it on; where ``names`` leaves the engine out, its costs the
    preset does not state, at the box's engine priors (a named fit without ``engine`` does not
    hold the roofline's 0)."""
    local = {"rho": 0.0, "c": math.inf}
    if held_locality is not None:
        local = {"rho": held_locality.rho, "c": held_locality.c_per_expert * experts}  # inf (off) stays inf
    # the engine priors of this box (its preset's, else the suite's)
    values = {
        "token": hardware.priors["engine_seconds_per_agent_token"][0][1],
        "step": hardware.priors["engine_seconds_per_step"][0][1],
        "touched": PRIOR_TOUCHED_SHARE[1] * touched_cap,
    }
    efficiency = [k for k in EFFICIENCY_FIELDS if k != "link_efficiency" or "ssd-scale" not in names]
    values.update({k: hardware.priors[k][0][1] for k in efficiency})
    skew_prior = None if "skew" in names else skew_prior_of(routing)
    values.update({} if skew_prior is None else {"skew": skew_knob("dirichlet", skew_prior.alpha)})
    if "reclaim" not in names and unstated(hardware, "reclaim_penalty"):
        values["reclaim"] = PRIOR_RECLAIM_PENALTY[1]
    if "pressure" not in names and not page_cache:
        values["page"] = PRIOR_PAGE_CACHE_SHARE[1]
    if "reclaim" in names and "reclaim-shape" not in names and unstated(hardware, "reclaim_exponent"):
        values["shape"] = PRIOR_RECLAIM_EXPONENT[1]
    engine: tuple[str, ...] = ()
    if "engine" not in names:
        engine = tuple(k for k, f in ENGINE_FIELDS.items() if f in hardware.priors and unstated(hardware, f))
        values.update({k: hardware.priors[ENGINE_FIELDS[k]][0][1] for k in engine})
    return _HeldKnobs(values, local, efficiency, skew_prior, held_locality, touched_cap, engine)


def _engine_start(
    names: tuple[str, ...], hold_token: bool, rows: _Rows, held: _HeldKnobs, pairs: np.ndarray, high: list[float]
) -> list[float]:
    """Where the least squares start the fitted engine costs: at one batch size the per-touched-expert
    cost that the measured step times leave beside the held per-step and per-token costs; else on the
    line T = c0 + c1·B through them (and 1e-6 s per touched pair where that is fitted too). ``high``: their
    upper bounds, in the order of their vector."""
    bs, ts = rows.step_seconds()
    if hold_token:
        # the measured step times less the held per-step and per-token costs, over the pairs touched
        cu = float(np.min((ts - held.values["step"] - held.values["token"] * bs) / pairs))
        return [float(np.clip(cu, 1e-9, high[0]))]
    # under ``max`` overlap an engine term below the roofline has no gradient, so it must start where it binds
    if np.unique(bs).size >= 2:
        c1, c0 = np.polyfit(bs, ts, 1)
    else:
        c0, c1 = float(ts[0]), 0.0
    start = [float(np.clip(c0, 1e-6, high[0])), float(np.clip(c1, 1e-7, high[1]))]
    return start + [1e-6] if "expert" in names else start


@dataclass(frozen=True)
class _Fit:
    """One overlap's fit (:func:`_fit_one`) and what its stages share: the rows, the knobs it
    fits (``names``; the smooth ones a vector of ``params``, solved from
    ``smooth_start``; the cache ones ``cache_names``, searched) and those it holds, and how it
    predicts the rows at a set of knobs."""

    rows: _Rows
    model: MoEModel
    hardware: Hardware
    routing: RoutingProbabilities
    names: tuple[str, ...]
    #: every measured rate at one batch size: the per-token engine cost cannot be told from the
    #: per-step one; both are held at their priors and widen the bands
    hold_token: bool
    held: _HeldKnobs
    params: list[_Smooth]
    smooth_start: list[float]
    cache_names: list[str]
    overlap: str
    context_tokens: int
    page_cache: bool
    max_evaluations: int
    locality: Locality | None
    #: :func:`predict_points`' memo of routings and step works for this fit (and, in
    #: :func:`fit_plan`, the other overlap's)
    routes: dict
    #: whether the search walks the cache knobs' profile (False: the search's best alone, as
    #: :func:`choose_memory_knob` reads it)
    walk: bool = True

    @property
    def holds_touched(self) -> bool:
        """The engine is fitted at two or more batch sizes and its per-touched-expert cost held at its prior share."""
        return "engine" in self.names and "expert" not in self.names and not self.hold_token

    def smooth_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The smooth knobs' bounds as arrays (a draw of them is clipped to these)."""
        low, high = (np.array([p.bounds[j] for p in self.params], dtype=float) for j in (0, 1))
        return low, high

    def knobs_of(self, outer: dict[str, float], inner: np.ndarray) -> PlanKnobs:
        """The knobs at cache knobs ``outer`` and smooth knobs ``inner`` (in the order of
        :attr:`params`), every held knob at its value now."""
        held = self.held.values
        k = PlanKnobs(rho=self.held.local["rho"], c=self.held.local["c"], **{e: held[e] for e in self.held.efficiency})
        if "engine" in self.names:  # the engine costs held at their priors where not fitted (set next)
            k = replace(
                k,
                engine_seconds_per_step=held["step"],
                engine_seconds_per_agent_token=held["token"],
                engine_seconds_per_touched_expert=held["touched"],
            )
        k = replace(k, **{ENGINE_FIELDS[e]: held[e] for e in self.held.engine})
        k = replace(k, **{p.field: float(v) for p, v in zip(self.params, inner)})
        if self.held.skew_prior is not None or "skew" in outer:
            k = replace(k, skew=outer.get("skew", held.get("skew")))
        if "rho" in outer:
            k = replace(k, rho=outer["rho"])
        if "pressure" in outer:
            k = replace(k, page_cache_share=outer["pressure"])
        if self.held.reclaim:
            k = replace(k, reclaim_penalty=held["reclaim"])
        if self.held.shape:
            k = replace(k, reclaim_exponent=held["shape"])
        if self.held.page and held["page"] > 0:  # at its centre, 0, the page cache stays off
            k = replace(k, page_cache_share=held["page"])
        return k

    def predict(
        self, k: PlanKnobs, seed: int = 0, rows: Sequence[PlanPoint] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Net tok/s and hit rate of ``rows`` (default: every row of the fit) at knobs ``k``."""
        return predict_points(
            self.rows.points if rows is None else rows,
            self.model,
            self.hardware,
            self.routing,
            k,
            context_tokens=self.context_tokens,
            page_cache=self.page_cache,
            seed=seed,
            overlap=self.overlap,
            routes=self.routes,
        )

    def max_abs_z(self, k: PlanKnobs) -> float:
        """The largest |z| of the calibration rows at knobs ``k`` (0 without a calibration row)."""
        return float(np.max(np.abs(self.residuals(k)))) if self.rows.calibrates.any() else 0.0

    def residuals(self, k: PlanKnobs, seed: int = 0) -> np.ndarray:
        """The weighted residuals at knobs ``k`` (module docstring, Fit): log tok/s over σ_net, then hit rates over σ_hit."""
        rows = self.rows
        net, hit = self.predict(k, seed, rows.calibration_points)
        r_net = np.log(net[rows.net_measured[rows.calibrates]] / rows.net[rows.net_measured]) / SIGMA_NET
        r_hit = (hit[rows.hit_measured[rows.calibrates]] - rows.hit[rows.hit_measured]) / SIGMA_HIT
        return np.concatenate([r_net, r_hit])

    def solve_inner(self, outer: dict[str, float], start: np.ndarray | None = None) -> tuple[np.ndarray, float, Any]:
        """The smooth knobs solved at cache knobs ``outer`` by bounded least squares (from ``start``,
        else :attr:`smooth_start`): their values, the cost Σ r² and the solution (None without smooth knobs)."""
        if not self.smooth_start:
            r = self.residuals(self.knobs_of(outer, np.zeros(0)))
            return np.zeros(0), float(r @ r), None
        sol = least_squares(
            lambda x: self.residuals(self.knobs_of(outer, x)),
            np.array(self.smooth_start) if start is None else start,
            bounds=self.smooth_bounds(),
            x_scale="jac",
        )
        return sol.x, float(2.0 * sol.cost), sol

    def outer_of(self, z: np.ndarray) -> dict[str, float]:
        """The cache knobs of a search's vector ``z``, each clipped to its bounds."""
        return {n: float(np.clip(v, *_CACHE_BOUNDS[n])) for n, v in zip(self.cache_names, z)}

    def cache_start(self) -> np.ndarray:
        """Where the search starts the cache knobs (the skew at its routing's own)."""
        starts = {"skew": _skew_start(self.routing)[1], **_CACHE_STARTS}
        return np.array([starts[n] for n in self.cache_names])

    def profile_threshold(self, cost: float, n_smooth_fitted: int) -> tuple[float, float]:
        """The profile's cut (module docstring, Bands): the best cost plus χ²₁(0.90) times the
        residual variance ``s²`` (the cost per degree of freedom, at least 1), and ``s²``."""
        dof = self.rows.n_residuals - n_smooth_fitted - len(self.cache_names)
        s2 = max(cost / dof, 1.0) if dof > 0 else 1.0
        return cost + PROFILE_CHI2 * s2, s2


def _setup_fit(
    points: Sequence[PlanPoint],
    model: MoEModel,
    hardware: Hardware,
    routing: RoutingProbabilities,
    *,
    fit: Sequence[str] | None,
    routing_is_spec: bool,
    locality: Locality | None,
    memo: dict,
    **settings: Any,
) -> _Fit:
    """:func:`_fit_one`'s fit before it runs: the knobs checked (:func:`_named_knobs`), the held
    ones at their priors' centres, the smooth knobs' bounds and start. ``settings``: the rest of
    :class:`_Fit` (``overlap``, ``context_tokens``, ``page_cache``, ``max_evaluations``)."""
    pts = list(points)
    rows = _Rows.of(pts)
    names, hold_token = _named_knobs(rows, fit, routing_is_spec)
    # the per-touched-expert engine cost, held at its prior share of the fastest calibration step
    # (PRIOR_TOUCHED_SHARE): per row, the measured step time over the pairs a rank touches there
    touched_cap = 0.0
    pairs = np.zeros(0)
    if "engine" in names:
        pairs = _touched_pairs(pts, model, routing)
        touched_cap = float(np.min(rows.step_seconds()[1] / pairs))
    held = _held_knobs(
        names,
        hardware,
        routing,
        _held_locality(locality, model, routing, names),
        touched_cap,
        model.experts,
        bool(settings.get("page_cache")),
    )
    params = _smooth_params(names, hold_token)
    start = (
        _engine_start(names, hold_token, rows, held, pairs, [p.bounds[1] for p in params]) if "engine" in names else []
    )
    return _Fit(
        rows=rows,
        model=model,
        hardware=hardware,
        routing=routing,
        names=names,
        hold_token=hold_token,
        held=held,
        params=params,
        smooth_start=start + [p.start for p in params if p.start is not None],
        cache_names=[k for k in _CACHE if k in names],
        locality=locality,
        routes=memo,
        **settings,
    )


@dataclass(frozen=True)
class _Best:
    """The search's answer: the best cache knobs ``outer`` (empty without cache knobs), the smooth
    knobs ``x`` solved there, its cost ``total`` and least-squares solution ``sol`` (None without
    smooth knobs), and the retained cache-knob sets ``profile`` (module docstring, Bands: each
    ``{"outer", "x", "cost", "sol"}``; empty without cache knobs)."""

    outer: dict[str, float]
    x: np.ndarray
    total: float
    sol: Any
    profile: list[dict[str, Any]]


def _search(fit: _Fit, notes: list[str]) -> _Best:
    """The fit's knobs at their best: without cache knobs the smooth knobs solved once; with them
    the cache knobs searched and their profile walked (:func:`_search_profile`)."""
    if not fit.cache_names:
        x, total, sol = fit.solve_inner({})
        return _Best({}, x, total, sol, [])
    return _search_profile(fit, notes)


def after_walk(best_cost: float, lowest_cost: float, threshold: float) -> str:
    """What the profile does once a walk around the best (cost ``best_cost``, cut ``threshold``)
    has evaluated a lowest cost ``lowest_cost`` (module docstring, Bands): ``"stop"`` where it is
    not lower; ``"keep"`` — move to it, keep the walked cut — where it is lower by at most
    :data:`PROFILE_KEEP_SHARE` of the margin ``threshold − best_cost``; else ``"walk"`` — move to
    it and walk again with its own cut."""
    if lowest_cost >= best_cost:
        return "stop"
    return "keep" if best_cost - lowest_cost <= PROFILE_KEEP_SHARE * (threshold - best_cost) else "walk"


def _search_profile(fit: _Fit, notes: list[str]) -> _Best:
    """The cache knobs searched (:func:`search_cache_knobs`), the smooth knobs re-solved at each
    set, then the profile walked out from the best (:func:`_explore_profile`), the search moving to
    a lower cost the walk finds (at most :data:`PROFILE_RESTARTS` times); says how in ``notes``."""
    names = fit.cache_names
    evaluated: dict[tuple[float, ...], dict[str, Any]] = {}
    span = np.array([_CACHE_BOUNDS[n][1] - _CACHE_BOUNDS[n][0] for n in names])

    def evaluate(o: dict[str, float]) -> dict[str, Any]:
        key = tuple(o[n] for n in names)
        if key not in evaluated:
            # the inner fit starts from the nearest set solved so far (in units of each
            # knob's range; the first from the smooth knobs' start): its engine and SSD terms are near
            start = None
            if evaluated:
                near = min(evaluated, key=lambda z: float(np.sum(((np.array(z) - key) / span) ** 2)))
                start = evaluated[near]["x"]
            xo, c, so = fit.solve_inner(o, start)
            evaluated[key] = {"outer": o, "x": xo, "cost": c, "sol": so}
        return evaluated[key]

    bounds = [_CACHE_BOUNDS[n] for n in names]
    how = search_cache_knobs(
        lambda z: evaluate(fit.outer_of(z))["cost"], fit.cache_start(), bounds, fit.max_evaluations
    )
    n_search = len(evaluated)
    best = min(evaluated.values(), key=lambda e: e["cost"])
    if not fit.walk:
        return _Best(best["outer"], best["x"], best["cost"], best["sol"], [])
    lo, hi = (np.array([b[j] for b in bounds], dtype=float) for j in (0, 1))
    moved, kept_cut = 0, False
    while True:
        threshold, s2 = fit.profile_threshold(best["cost"], best["x"].size)
        if moved > PROFILE_RESTARTS:  # no more walks: the profile is what has been evaluated
            break
        _explore_profile(
            lambda z, t=threshold: evaluate(fit.outer_of(z))["cost"] <= t,
            lambda t=threshold: [k for k, e in evaluated.items() if e["cost"] <= t],
            np.array([best["outer"][n] for n in names]),
            lo,
            hi,
            lambda: [k[0] for k in evaluated],  # read for one knob alone
        )
        lower = min(evaluated.values(), key=lambda e: e["cost"])
        step = after_walk(best["cost"], lower["cost"], threshold)
        if step == "stop":
            break
        best, moved = lower, moved + 1  # the walk found a better fit: centre the profile there
        if step == "keep":  # so little lower that the walked cut stands (module docstring, Bands)
            kept_cut = True
            break
    profile = [e for e in evaluated.values() if e["cost"] <= threshold]
    notes.append(
        f"cache knobs ({', '.join(names)}) searched {how} ({n_search} evaluations, at most "
        f"{fit.max_evaluations}); their profile — every evaluated set whose cost, the engine and SSD terms re-solved, "
        f"is within {PROFILE_CHI2:.2f} × {s2:.3g} of the best ({len(evaluated) - n_search} more evaluations, "
        f"{len(profile)} sets kept) — gives their intervals and widens the bands"
        + (
            f"; the profile's walk found a better fit than Nelder–Mead's {moved} time(s) and moved there"
            if moved
            else ""
        )
        + (
            f", keeping the cut it walked ({threshold - best['cost']:.3g} above the new best: its cost is "
            f"within {PROFILE_KEEP_SHARE:g} of the margin below the old)"
            if kept_cut
            else ""
        )
    )
    return _Best(best["outer"], best["x"], best["cost"], best["sol"], profile)


def hit_bands_within_measured(
    points: Sequence[PlanPoint], hit0: np.ndarray, hit_low: np.ndarray, hit_high: np.ndarray, hit_noise: float
) -> tuple[np.ndarray, np.ndarray, int]:
    """Each row without a measured hit rate keeps its hit-rate band (``hit_low``, ``hit_high``
    about its prediction ``hit0``) between its measured neighbours (module docstring, Bands): of
    one batch size, rank count and stack policy (:data:`STACK_POLICIES`) a larger cache hits at
    least as often on the same requests — the inclusion property of stack algorithms (Mattson,
    Gecsei, Slutz & Traiger 1970, IBM Syst. J. 9:78) — so a new measurement at a cache size lies
    above the one measured at the nearest smaller size and below the nearest larger one, less the
    5 % tail of the two measurements' noises, ``z₀.₉₅·√2·σ_hit`` (``hit_noise``; repeated runs of
    a size: their mean). The row's prediction stays inside its band. Returns the new low and high
    and how many bands moved."""
    margin = TWO_MEASUREMENTS_Z * hit_noise
    low, high, moved = np.array(hit_low, dtype=float), np.array(hit_high, dtype=float), 0
    for i, p in enumerate(points):
        if p.hit_rate is not None or p.policy not in STACK_POLICIES:
            continue
        same = [
            q for q in points if q.hit_rate is not None and (q.batch, q.ranks, q.policy) == (p.batch, p.ranks, p.policy)
        ]
        below = [q for q in same if q.cache_gib <= p.cache_gib]
        above = [q for q in same if q.cache_gib >= p.cache_gib]
        lo, hi = low[i], high[i]
        if below:
            near = max(q.cache_gib for q in below)
            floor = float(np.mean([q.hit_rate for q in below if q.cache_gib == near])) - margin
            lo = max(lo, min(floor, hit0[i]))
        if above:
            near = min(q.cache_gib for q in above)
            cap = float(np.mean([q.hit_rate for q in above if q.cache_gib == near])) + margin
            hi = min(hi, max(cap, hit0[i]))
        if (lo, hi) != (low[i], high[i]):
            low[i], high[i], moved = lo, hi, moved + 1
    return low, high, moved


@dataclass
class _Band:
    """Every row's 5–95 % band (module docstring, Bands) about its best prediction (``net0``,
    ``hit0``): tok/s from ``low`` to ``high``, hit rate from ``hit_low`` to ``hit_high``; widened as
    the held knobs' ends are tried (:meth:`widen`), then moved to the retained cache-knob sets.
    ``noise`` and ``hit_noise``: the measurement noise it assumes (σ on log tok/s; on hit rates, in points)."""

    net0: np.ndarray
    hit0: np.ndarray
    low: np.ndarray
    high: np.ndarray
    hit_low: np.ndarray
    hit_high: np.ndarray
    noise: float
    hit_noise: float

    def widen(self, net_e: np.ndarray, hit_e: np.ndarray | None = None) -> None:
        """Take in a prediction elsewhere (tok/s ``net_e``, hit rates ``hit_e``): the band at the
        best knobs moved to it, as a ratio for tok/s and a difference for hit rates."""
        self.low = np.minimum(self.low, net_e * (self.low / self.net0))
        self.high = np.maximum(self.high, net_e * (self.high / self.net0))
        if hit_e is not None:
            self.hit_low = np.minimum(self.hit_low, np.clip(hit_e - (self.hit0 - self.hit_low), 0.0, 1.0))
            self.hit_high = np.maximum(self.hit_high, np.clip(hit_e + (self.hit_high - self.hit0), 0.0, 1.0))

    def over_sets(self, at: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """The band at the best knobs moved to each retained cache-knob set's predictions ``at`` and united
        (module docstring, Bands): tok/s bands as ratios, hit-rate bands as differences clipped to [0, 1]."""
        nets, hits = np.array([a[0] for a in at]), np.array([a[1] for a in at])
        self.low, self.high = nets.min(axis=0) * (self.low / self.net0), nets.max(axis=0) * (self.high / self.net0)
        self.hit_low = np.clip(hits.min(axis=0) - (self.hit0 - self.hit_low), 0.0, 1.0)
        self.hit_high = np.clip(hits.max(axis=0) + (self.hit_high - self.hit0), 0.0, 1.0)

    def within_measured(self, points: Sequence[PlanPoint], notes: list[str]) -> None:
        """The hit-rate bands held between their measured neighbours (:func:`hit_bands_within_measured`),
        and a note where any moved."""
        self.hit_low, self.hit_high, moved = hit_bands_within_measured(
            points, self.hit0, self.hit_low, self.hit_high, self.hit_noise
        )
        if moved:
            margin = TWO_MEASUREMENTS_Z * self.hit_noise
            notes.append(
                f"hit-rate bands of {moved} row(s) held between the hit rates measured at the nearest smaller and "
                f"larger cache of their batch size, ranks and policy, less {100 * margin:.2g} points of the two "
                "measurements' noise: a stack policy's cache hits at least as often when larger"
            )

    def rows(self, points: Sequence[PlanPoint]) -> list[dict[str, Any]]:
        """The fit's output rows, one per point: its role, measured values, prediction and band."""
        net, hit = (self.net0, self.low, self.high), (self.hit0, self.hit_low, self.hit_high)
        return [
            {
                **{key: getattr(p, key) for key in ("row", "batch", "cache_gib", "ranks", "policy")},
                "role": "calibration" if p.calibrates else "prediction",
                "measured": p.net_tok_s,
                **{key: float(v[i]) for key, v in zip(("predicted", "low", "high"), net)},
                "relative_error": None if p.net_tok_s is None else float(self.net0[i] / p.net_tok_s - 1.0),
                "measured_hit_rate": p.hit_rate,
                **{key: float(v[i]) for key, v in zip(("predicted_hit_rate", "hit_rate_low", "hit_rate_high"), hit)},
            }
            for i, p in enumerate(points)
        ]


def _smooth_draws(
    best: _Best, rng: np.random.Generator, notes: list[str]
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """The smooth knobs at the best fit and :data:`BAND_DRAWS` draws from their covariance
    ``(JᵀJ)⁻¹`` (scaled by the residual variance when rows outnumber knobs), and the covariance
    (None without smooth knobs); a note where it is singular (then the best knobs alone)."""
    draws = [best.x]
    cov = None
    if best.sol is not None and best.x.size:
        jac = np.asarray(best.sol.jac, dtype=float)
        dof = jac.shape[0] - best.x.size
        scale = max(best.total / dof, 1.0) if dof > 0 else 1.0
        try:
            cov = np.linalg.pinv(jac.T @ jac) * scale
            draws += list(rng.multivariate_normal(best.x, cov, size=BAND_DRAWS, method="eigh"))
        except np.linalg.LinAlgError:
            notes.append("the smooth knobs' covariance is singular: bands from the simulation seeds only")
    return draws, cov


def _smooth_band(
    fit: _Fit, best: _Best, best_knobs: PlanKnobs, notes: list[str]
) -> tuple[_Band, list[np.ndarray], np.ndarray | None]:
    """The bands' smooth part (module docstring, Bands): every row predicted at each of the
    smooth knobs' draws (:func:`_smooth_draws`) and :data:`BAND_SEEDS`, times a measurement noise;
    with the draws and the covariance."""
    rng = np.random.default_rng(12345)
    draws, cov = _smooth_draws(best, rng, notes)
    lo_b, hi_b = fit.smooth_bounds()
    preds = [
        fit.predict(fit.knobs_of(best.outer, np.clip(d, lo_b, hi_b) if best.x.size else d), sd)
        for sd in BAND_SEEDS
        for d in draws
    ]
    net0, hit0 = fit.predict(best_knobs)
    rows = fit.rows
    # a band is where a new measurement falls: the knobs' spread times the measurement noise,
    # the larger of σ_net and the calibration rows' own scatter about the fit
    r_net = np.log(net0[rows.net_measured] / rows.net[rows.net_measured])
    noise = max(SIGMA_NET, float(np.sqrt(np.mean(r_net**2))) if r_net.size else 0.0)
    preds_net = np.array([p[0] for p in preds])
    preds_net = preds_net * np.exp(rng.normal(0.0, noise, size=preds_net.shape))
    # the same for a hit rate: the larger of σ_hit and the calibration hit rates' scatter, in points
    r_hit = hit0[rows.hit_measured] - rows.hit[rows.hit_measured]
    hit_noise = max(SIGMA_HIT, float(np.sqrt(np.mean(r_hit**2))) if r_hit.size else 0.0)
    preds_hit = np.array([p[1] for p in preds])
    preds_hit = np.clip(preds_hit + rng.normal(0.0, hit_noise, size=preds_hit.shape), 0.0, 1.0)
    net_band, hit_band = (
        percentile_interval(v, BAND_TAILS, resampling="draws x seeds x noise") for v in (preds_net, preds_hit)
    )
    band = _Band(
        net0,
        hit0,
        low=np.minimum(net_band.low, net0),
        high=np.maximum(net_band.high, net0),
        hit_low=np.minimum(hit_band.low, hit0),
        hit_high=np.maximum(hit_band.high, hit0),
        noise=noise,
        hit_noise=hit_noise,
    )
    return band, draws, cov


def _as_far_as(cut: Sequence[str]) -> str:
    """A note's tail naming the held knobs' ends the calibration rows cut short (empty: none)."""
    return "" if not cut else f", as far as the calibration rows admit them ({'; '.join(cut)})"


@dataclass(frozen=True)
class _PriorEnds:
    """The bands' held-knob part (module docstring): each knob the fit holds at a prior, at the
    ends of that prior as far as the calibration rows admit it (:meth:`admitted_end`), widens
    ``band``; :meth:`run` tries them all and says so in ``notes``. An end widens the bands only as
    far as the rows admit it: re-solved there, its cost within ``admit`` (the profile threshold of
    the best fit, :data:`PROFILE_CHI2`). ``done``: the ends' answers in the order they are asked,
    each computed here; ``replay``: those of a forked child that computed them all beside this
    process's band sets, answered in turn (pure functions: the same numbers)."""

    fit: _Fit
    #: the best cache knobs, where each end is first solved
    outer: dict[str, float]
    admit: float
    band: _Band
    notes: list[str]
    done: list[_EndAnswer] = field(default_factory=list)
    replay: list[_EndAnswer] = field(default_factory=list)

    def admitted_end(
        self,
        set_at: Callable[[float], None],
        search: bool = True,
        within_noise: bool = False,
        shares: Sequence[float] = END_SHARES,
    ) -> _EndAnswer:
        """``set_at(t)`` puts the held knob a share t of the way from its centre to one end; the
        farthest of t = 1, ½, ¼ the rows admit, with its prediction (None: the rows rule out all).
        The smooth knobs are re-solved there and, where cache knobs are fitted, a short search
        (:data:`END_EVALUATIONS`) moves them too: an end the rows rule out only at the centre's
        skew is not an end they rule out (``search=False``: not, for a knob that only prices the
        reads, where the search would cost more than the rest of the ends). ``within_noise``: an
        end is admitted only where it also meets every calibration row within 2 σ, as the other
        overlap must to widen the bands (a structural choice, not a knob's range). ``shares``: the
        shares tried, in turn (default :data:`END_SHARES`)."""
        if self.replay:
            return self.replay.pop(0)
        self.done.append(self._first_admitted(set_at, search, within_noise, shares))
        return self.done[-1]

    def _first_admitted(
        self, set_at: Callable[[float], None], search: bool, within_noise: bool, shares: Sequence[float]
    ) -> _EndAnswer:
        """:meth:`admitted_end`'s answer computed: each of ``shares`` in turn."""
        fit = self.fit
        for t in shares:
            set_at(t)
            xe, cost, _ = fit.solve_inner(self.outer)
            at_outer = self.outer
            if cost > self.admit and fit.cache_names and search:
                cost, xe, at_outer = self._end_search()
            knobs = fit.knobs_of(at_outer, xe)
            if cost <= self.admit and (not within_noise or fit.max_abs_z(knobs) <= WITHIN_NOISE_Z):
                return t, fit.predict(knobs)
        return 0.0, None

    def _end_search(self) -> tuple[float, np.ndarray, dict[str, float]]:
        """The cache knobs moved from the best by a short Nelder–Mead search (:data:`END_EVALUATIONS`),
        the smooth knobs re-solved at each set: the lowest cost found, its smooth and cache knobs."""
        fit = self.fit
        tried: dict[tuple[float, ...], tuple[float, np.ndarray, dict[str, float]]] = {}

        def cost_at(z: np.ndarray) -> float:
            o = fit.outer_of(z)
            key = tuple(o[n] for n in fit.cache_names)
            if key not in tried:
                xo, co, _ = fit.solve_inner(o)
                tried[key] = (co, xo, o)
            return tried[key][0]

        minimize(
            cost_at,
            np.array([self.outer[n] for n in fit.cache_names]),
            method="Nelder-Mead",
            options={"maxfev": END_EVALUATIONS, "xatol": 1e-2, "fatol": 1e-2},
        )
        return min(tried.values(), key=lambda v: v[0])

    def widen_at_ends(
        self, key: str, ends: Sequence[float], *, hits: bool = False, search: bool = True, within_noise: bool = False
    ) -> list[str]:
        """The held knob ``key`` at each end of its prior, the smooth knobs re-solved there: the
        band covers what the rows cannot rule out, moved by each end's prediction (``hits``: the
        hit rates' band too); returns a phrase for each end the rows cut short."""
        held = self.fit.held.values
        centre = held[key]
        cut = []
        for end in ends:

            def set_at(t: float, end: float = end) -> None:
                held[key] = centre + t * (end - centre)

            t, at = self.admitted_end(set_at, search, within_noise)
            if at is not None:
                self.band.widen(at[0], at[1] if hits else None)
            if t < 1.0:
                cut.append(f"{key} {'not past its centre' if at is None else f'to {t:g} of the way to {end:.3g}'}")
        held[key] = centre
        return cut

    def run(self) -> None:
        """Each held knob at the ends of its prior (:meth:`admitted_end`): the bands widened, the notes said."""
        fit = self.fit
        if fit.hold_token:
            self._engine_ends()
        if fit.holds_touched:
            self._touched_ends()
        if fit.held.engine:
            self._unnamed_engine_ends()
        self._efficiency_ends()
        if fit.held.reclaim:
            self._reclaim_ends()
        if fit.held.shape:
            self._shape_ends()
        if fit.held.page:
            self._page_cache_ends()
        if fit.held.skew_prior is not None:
            self._skew_ends(fit.held.skew_prior)
        if fit.held.locality is not None:
            self._locality_ends(fit.held.locality)
        elif fit.locality is not None and fit.routing.trace is not None and "rho" not in fit.names:
            self.notes.append(
                "the locality prior is not applied to a trace routing: the cache runs on the trace's own streams, "
                "their correlations included"
            )
        elif fit.locality is not None and fit.routing.trace is None:
            self._hot_set_ends(fit.locality)

    def _engine_ends(self) -> None:
        """The per-token and per-step engine costs, held at one batch size, at their priors' ends."""
        fit, held = self.fit, self.fit.held.values
        token_prior = fit.hardware.priors["engine_seconds_per_agent_token"][0]
        step_prior = fit.hardware.priors["engine_seconds_per_step"][0]
        cut = self.widen_at_ends("token", (token_prior[0], token_prior[2]))
        cut += self.widen_at_ends("step", (step_prior[0], step_prior[2]))
        self.notes.append(
            f"engine_seconds_per_agent_token is held at its prior {held['token'] * 1e3:g} ms "
            f"(range {token_prior[0] * 1e3:g}–{token_prior[2] * 1e3:g} ms, "
            f"assumed) and engine_seconds_per_step at its prior {held['step'] * 1e3:g} ms (range "
            f"{step_prior[0] * 1e3:g}–{step_prior[2] * 1e3:g} ms, {_prior_origin(fit.hardware)}): every "
            f"measured rate is at B = {fit.rows.net_batches[0]}, where the per-token and per-step engine costs cannot be told "
            "from the per-touched-expert one, which is fitted; the bands include the predictions at both ends of "
            "both ranges" + _as_far_as(cut)
        )

    def _unnamed_engine_ends(self) -> None:
        """The engine costs a fit that does not name ``engine`` holds at the box's priors, each at its ends."""
        priors, held = self.fit.hardware.priors, self.fit.held.values
        cut = []
        for key in self.fit.held.engine:
            lo, _, hi = priors[ENGINE_FIELDS[key]][0]
            cut += self.widen_at_ends(key, (lo, hi))
        said = ", ".join(
            f"{ENGINE_FIELDS[k]} {held[k] * 1e3:g} ms (range {priors[ENGINE_FIELDS[k]][0][0] * 1e3:g}–"
            f"{priors[ENGINE_FIELDS[k]][0][2] * 1e3:g} ms)"
            for k in self.fit.held.engine
        )
        self.notes.append(
            f"engine held at the box's priors ({_prior_origin(self.fit.hardware)}) where the fit leaves it out "
            f"and the preset does not state it: {said}; the bands include the predictions at both ends"
            + _as_far_as(cut)
        )

    def _touched_ends(self) -> None:
        """The per-touched-expert engine cost, held at its prior share, at the share's ends."""
        cap, held = self.fit.held.touched_cap, self.fit.held.values
        # 0 puts the whole engine time on the step, 1 on the touched experts
        cut = self.widen_at_ends("touched", (PRIOR_TOUCHED_SHARE[0] * cap, PRIOR_TOUCHED_SHARE[2] * cap))
        self.notes.append(
            f"engine_seconds_per_touched_expert is held at {held['touched'] * 1e3:.3g} ms per (layer, expert) pair "
            f"touched: its prior share {PRIOR_TOUCHED_SHARE[1]:g} (range {PRIOR_TOUCHED_SHARE[0]:g}–"
            f"{PRIOR_TOUCHED_SHARE[2]:g}, assumed) of the fastest calibration step over the pairs a rank touches "
            "there (the per-step and per-token costs fitted at two or more batch sizes absorb it to first order); "
            "the bands include both ends" + _as_far_as(cut)
        )

    def _efficiency_ends(self) -> None:
        """The efficiencies held at the box's priors, each at its prior's ends."""
        priors, held, efficiency = self.fit.hardware.priors, self.fit.held.values, self.fit.held.efficiency
        cut = []
        for key in efficiency:
            (lo_e, _, hi_e), _ = priors[key]
            cut += self.widen_at_ends(key, (lo_e, hi_e))
        self.notes.append(
            "efficiencies held at the box's priors: "
            + ", ".join(
                f"{key} {held[key]:g} (range {priors[key][0][0]:g}–{priors[key][0][2]:g})" for key in efficiency
            )
            + (
                "; link_efficiency is the fitted SSD scale's (the preset's, 1 unless it says)"
                if "link_efficiency" not in efficiency
                else ""
            )
            + " — no row here tells them from the engine and SSD terms; the bands include the predictions at both ends"
            + _as_far_as(cut)
        )

    def _reclaim_ends(self) -> None:
        """The reclaim work's κ, held at its prior's centre, at its high end (hit rates do not move)."""
        lo, mid, hi = PRIOR_RECLAIM_PENALTY
        # κ prices the reads the cache leaves, it does not change them: the cache knobs stay at the best
        cut = self.widen_at_ends("reclaim", (hi,), search=False)
        self.notes.append(
            f"reclaim_penalty (κ of the OS's reclaim work on the reads, 1 + κ·(u/(1 − u))^n) is held at {mid:g} "
            f"(range {lo:g}–{hi:g}: 0 assumed, {hi:g} the largest public fit, mlx-lm#1438's) where neither the "
            "preset states it nor --fit names reclaim; the bands include its high end" + _as_far_as(cut)
        )

    def _shape_ends(self) -> None:
        """The reclaim work's shape n, held at its prior's centre beside a fitted κ, at both ends."""
        lo, mid, hi = PRIOR_RECLAIM_EXPONENT
        # n shapes how the reads the cache leaves are priced, it does not change them: no search
        cut = self.widen_at_ends("shape", (lo, hi), search=False)
        self.notes.append(
            f"reclaim_exponent (n of the reclaim work's rise, 1 + κ·(u/(1 − u))^n) is held at {mid:g} (range "
            f"{lo:g}–{hi:g}: the queueing form to a rise that stays low while memory is free, assumed) where κ is "
            "fitted without it and the preset does not state it; the bands include both ends" + _as_far_as(cut)
        )

    def _page_cache_ends(self) -> None:
        """The page cache's share, held at its prior's centre (off), at its high end (hit rates do not move)."""
        lo, mid, hi = PRIOR_PAGE_CACHE_SHARE
        # the page cache serves reads the expert cache misses, it does not change them: the cache
        # knobs stay. A structural choice, as the overlap is: its end widens the bands only where it
        # meets every calibration row within 2 σ (admitted by the profile threshold alone, as a
        # knob's range, the bands over-covered simulated truths: 94 of 96 inside their 90 % bands)
        cut = self.widen_at_ends("page", (hi,), search=False, within_noise=True)
        self.notes.append(
            f"the OS page cache's share of the RAM the expert cache leaves is held at {mid:g} (range {lo:g}–{hi:g}: "
            f"{lo:g} assumed, reads that bypass it; {hi:g} the kernel's default for buffered or mmap reads) where "
            "neither --fit pressure nor --page-cache says: the bands include its high end" + _as_far_as(cut)
        )

    def _skew_ends(self, skew_prior: Any) -> None:
        """The skew prior's routing skew, held at its centre, at the ends of its range (hit rates too)."""
        # the most skewed end first (the smallest α); the skew knob is 1/√α
        ends = tuple(skew_knob("dirichlet", a) for a in skew_prior.alpha_range)
        cut = self.widen_at_ends("skew", ends, hits=True)
        self.notes.append(
            f"routing skew held at the {skew_prior.label()}: the bands include both ends of its "
            f"{skew_prior.range_name} range" + _as_far_as(cut)
        )

    def _hot_set_ends(self, locality: Locality) -> None:
        """Where ρ is fitted, one stream's hot set is held off (ρ and the skew stand for the stream's
        locality, and beside them the rows do not identify it); the bands take it from off to the
        locality prior's most local hot set (h at its 5 % quantile), ρ and the skew re-searched there,
        as far as the calibration rows admit it, the nearest share tried first (where the rows rule
        it out, as mlx-lm#1438's do, the farther ones would cost a fit of three rows about 3 s more
        for nothing) — a hot set makes one stream's curve saturate where ρ alone does not, so
        leaving it out would narrow the bands silently."""
        local, model = self.fit.held.local, self.fit.model
        saved = dict(local)
        # log h from off (c = ∞: every expert) to the prior's 5 % quantile
        off_x = math.log(float(hot_set_from_c(math.inf, model.experts, model.top_k)))
        end_x = math.log(float(locality.quantiles([0.05])[1][0]))

        def set_at(t: float) -> None:
            h_t = math.exp(off_x + t * (end_x - off_x))
            local.update(c=float(c_per_expert_from_hot_set(h_t, model.experts, model.top_k)) * model.experts)

        # the nearest share first: where the rows rule out even that, the farther ones are not tried
        t, at = self.admitted_end(set_at, shares=END_SHARES[-1:])
        if at is not None:
            far_t, far_at = self.admitted_end(set_at, shares=END_SHARES[:-1])
            if far_at is not None:
                t, at = far_t, far_at
            self.band.widen(*at)
        local.update(saved)
        reached = math.exp(off_x + t * (end_x - off_x))
        self.notes.append(
            "one stream's hot set (the locality prior's per-stream c) is off where ρ is fitted: the stickiness "
            "and the skew fitted to the hit rates stand for the stream's locality; the bands include the prior's "
            f"most local hot set, {math.exp(end_x):.2g}·K experts"
            + (
                ""
                if t >= 1.0
                else f", as far as the calibration rows admit it ({reached:.2g}·K)"
                if at is not None
                else " — which the calibration rows rule out: the bands carry none of it"
            )
        )

    def _locality_ends(self, prior: _HeldLocality) -> None:
        """The locality at its least and most local ends (ρ and c at their 5 % and 95 % quantiles,
        the other knobs re-solved there): the band covers what the prior cannot rule out."""
        local, model = self.fit.held.local, self.fit.model
        saved = dict(local)
        centre_x = to_scale(prior.rho, prior.hot_set)
        reached = []
        for r_end, h_end in zip(prior.rho_ends, prior.hot_set_ends):
            end_x = to_scale(float(r_end), float(h_end))

            def set_at(t: float, end_x: np.ndarray = end_x) -> None:
                r_t, h_t = from_scale(centre_x + t * (end_x - centre_x))
                c_t = c_per_expert_from_hot_set(h_t, model.experts, model.top_k)
                local.update(rho=float(r_t), c=float(c_t) * model.experts)

            t, at = self.admitted_end(set_at)
            if at is not None:
                self.band.widen(*at)
            reached.append((float(from_scale(centre_x + t * (end_x - centre_x))[0]), t))
        local.update(saved)
        self.notes.append(_locality_note(prior, reached))


def _sets_and_peaks(
    fit: _Fit, best: _Best, best_knobs: PlanKnobs, draws: list[np.ndarray], ends: _PriorEnds, jobs: int
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[dict[str, Any]]]:
    """Every row predicted at each of R' (module docstring, Bands; :func:`band_sets`), and the
    peaks (:func:`_peaks`: the best knobs, R' and :data:`PEAK_SMOOTH_DRAWS` of the smooth knobs'
    ``draws``). ``jobs`` ≥ 2: a forked child tries the held knobs' prior ends (``ends``, whose
    answers it hands back for replay) and predicts the last :data:`SETS_BESIDE` sets meanwhile."""
    # R', which the peaks' band takes too: each retained cache-knob set with its engine and SSD terms re-solved
    sets = [fit.knobs_of(e["outer"], e["x"]) for e in band_sets(best.profile, fit.cache_names, BAND_PROFILE_SETS)]
    here = len(sets) - min(SETS_BESIDE, len(sets) // 2)

    def beside_work() -> tuple[list, list]:
        """With a second core, a forked child runs the ends and predicts the last SETS_BESIDE sets while this
        process predicts the others and the peaks (none of which reads the ends), then replays the ends."""
        ends.run()
        return ends.done, [fit.predict(k) for k in sets[here:]]

    beside = _fork_call(beside_work) if jobs >= 2 else None
    try:
        at = [fit.predict(k) for k in sets[: here if beside is not None else len(sets)]]
        # where tok/s peaks over the cache sizes of a group of rows, with the band of a measured peak:
        # the best knobs, the profile's retained cache-knob sets and draws of the smooth knobs
        lo_b, hi_b = fit.smooth_bounds()
        smooth = [fit.knobs_of(best.outer, np.clip(d, lo_b, hi_b)) for d in draws[1 : 1 + PEAK_SMOOTH_DRAWS]]
        peaks = _peaks(fit.rows.points, fit.predict, best_knobs, smooth, sets, ends.band.noise)
        got = beside.result() if beside is not None else None
    except BaseException:
        if beside is not None:
            beside.stop()
        raise
    ends.replay[:] = got[0] if got is not None else []
    at += got[1] if got is not None else [fit.predict(k) for k in sets[len(at) :]]
    return at, peaks


def _held_touched_entry(held: _HeldKnobs) -> dict[str, Any]:
    """The knob table's entry of the per-touched-expert engine cost held at its prior share."""
    cap = held.touched_cap
    return _held_entry(
        held.values["touched"],
        PRIOR_TOUCHED_SHARE[0] * cap,
        PRIOR_TOUCHED_SHARE[2] * cap,
        "prior share of the fastest calibration step (assumed)",
        f"held at {PRIOR_TOUCHED_SHARE[1]:g} of the fastest calibration step per pair touched "
        f"({cap * 1e3:.3g} ms per pair if all of it were): the rows cannot tell a per-touched-expert "
        "cost from a per-step one; the bands cover shares 0 to 1",
        "s",
    )


def _fit_knobs(fit: _Fit, best: _Best, cov: np.ndarray | None, notes: list[str]) -> dict:
    """:attr:`PlanFit.knobs`: the fitted knobs' values and intervals (:func:`_knob_table`; the
    cache knobs' their profile's, the smooth knobs' united over the values re-solved on it) and
    the held knobs' entries; a note for each knob the rows do not identify."""
    profile = best.profile
    cache_intervals = {n: _span([e["outer"][n] for e in profile]) for n in fit.cache_names} if profile else {}
    identified = _identified(best.sol, best.x, [p.label for p in fit.params], notes)
    xs = np.array([e["x"] for e in profile]) if profile and best.x.size else best.x[None, :]
    knobs = _knob_table(fit, best, xs, cov, identified, cache_intervals)
    if fit.holds_touched:
        knobs["engine_seconds_per_touched_expert"] = _held_touched_entry(fit.held)
    knobs.update(_held_entries(fit.hardware, fit.held))
    for n, interval in cache_intervals.items():
        if interval.as_tuple() == tuple(float(b) for b in _CACHE_BOUNDS[n]):
            notes.append(f"{n} is not identified by these rows: its profile spans its whole range")
    return knobs


def _fit_one(
    points: Sequence[PlanPoint],
    model: MoEModel,
    hardware: Hardware,
    routing: RoutingProbabilities,
    *,
    overlap: str,
    stage: Callable[[str], None] = lambda what: None,
    after_search: Callable[[float, float], bool] | None = None,
    jobs: int = 1,
    **kw: Any,
) -> PlanFit:
    """Fit the named knobs on the calibration rows, predict every row with bands (module
    docstring); ``stage(what)`` is called as each of :data:`FIT_STAGES` begins; ``after_search(cost,
    max_abs_z)`` False ends the fit once its knobs are fitted: what :func:`fit_plan` reads of an overlap that
    neither fits better nor meets every calibration row within 2 σ, its cost and worst calibration z as the
    whole fit would give them; ``jobs`` ≥ 2: the held knobs' prior ends run in a forked child beside the band
    sets (the same numbers). ``kw``: :func:`_setup_fit`'s (``memo``: the routings and step works of
    :func:`predict_points`, kept across the fits of one :func:`fit_plan`; its keys name the overlap where
    the work depends on it). Raises :class:`ParameterError` for an unknown knob, a knob the rows cannot
    identify (more smooth parameters than measured net tok/s rows), or ``skew`` with a routing
    that is not Zipf. ``locality`` (the locality prior): with any routing but a trace and ρ not
    fitted, the cache runs on a trace with the prior's centre ρ and per-stream locality c, and
    the bands take in its least and most local ends (5 % and 95 %)."""
    f = _setup_fit(points, model, hardware, routing, overlap=overlap, **kw)
    notes: list[str] = []
    stage(FIT_STAGES[0])
    best = _search(f, notes)
    best_knobs = f.knobs_of(best.outer, best.x)
    max_z = f.max_abs_z(best_knobs)
    total = float(best.total)
    overlaps = {overlap: {"cost": total, "max_abs_z": max_z}}
    searched = PlanFit(knobs={}, rows=[], fitted=f.names, cost=total, overlap=overlap, overlaps=overlaps)
    if after_search is not None and not after_search(total, max_z):
        return searched
    stage(FIT_STAGES[1])
    band, draws, cov = _smooth_band(f, best, best_knobs, notes)
    stage(FIT_STAGES[2])
    # an end of a held knob's prior widens the bands only as far as the calibration rows admit it:
    # re-solved there, its cost within the profile threshold of the best fit (PROFILE_CHI2)
    ends = _PriorEnds(f, best.outer, f.profile_threshold(best.total, best.x.size)[0], band, notes)
    at, peaks = _sets_and_peaks(f, best, best_knobs, draws, ends, jobs)
    # the ends after the band sets and the peaks, which do not read them: with jobs ≥ 2 a forked
    # child has run them beside those, and its answers are replayed here (the same numbers)
    ends.run()
    if best.profile:
        band.over_sets(at)
    band.within_measured(f.rows.points, notes)
    rows = band.rows(f.rows.points)
    knobs = _fit_knobs(f, best, cov, notes)
    notes.append(
        f"bands: 5–95 % of a new measurement (the knobs' spread × a measurement noise of {band.noise:.1%} on tok/s, "
        f"± {100 * band.hit_noise:.2g} points on hit rates)"
    )
    return replace(searched, knobs=knobs, rows=rows, notes=tuple(notes), peaks=tuple(peaks))


#: the memory knobs :func:`choose_memory_knob` tries, each with what it stands for in its note
MEMORY_KNOBS = {"pressure": "the page cache's share", "reclaim": "the reclaim work"}
#: the page cache's shares :func:`choose_memory_knob` tries: sixths (0 is the default fit itself;
#: a coarser set misses seed 003's, about one half, by more than the rows' noise)
MEMORY_SHARES = tuple(i / 6 for i in range(1, 7))


def _memory_search(setup: Callable[..., _Fit], base: tuple[str, ...], overlap: str) -> _Best:
    """The default knobs' best under one overlap as :func:`choose_memory_knob` tries them
    (``setup(fit, overlap, **settings)``: its :func:`_setup_fit`): the search's first evaluations
    alone (a single cache knob's grid and start, which the fit that follows evaluates again from
    the memo), no profile walk: a structure is told at the grid's resolution."""
    return _search(setup(base, overlap, max_evaluations=SEARCH_GRID_POINTS + 1, walk=False), [])


def _memory_tries(
    setup: Callable[..., _Fit], base: tuple[str, ...], overlap: str, best: _Best | None = None
) -> tuple[float, dict[str, tuple[float, float]]]:
    """:func:`choose_memory_knob`'s tries under one overlap: the default knobs' best cost
    (``best``, else :func:`_memory_search`'s), and each memory knob's (cost, profile cut) at their
    best cache knobs."""
    best = _memory_search(setup, base, overlap) if best is None else best
    tried: dict[str, tuple[float, float]] = {}
    for knob in MEMORY_KNOBS:
        try:
            f = setup((*base, knob), overlap)
        except ParameterError:  # too few rows beside the default knobs
            continue
        # the least squares start where the default's ended (κ at its start beside them)
        if knob == "reclaim":
            outers, start = [best.outer], np.append(best.x, [p.start for p in f.params if p.knob == knob])
        else:
            outers, start = [{**best.outer, knob: v} for v in MEMORY_SHARES], best.x
        x, cost, _ = min((f.solve_inner(o, start) for o in outers), key=lambda r: r[1])
        tried[knob] = (cost, f.profile_threshold(cost, x.size)[0])
    return best.total, tried


def measured_fall(points: Sequence[PlanPoint]) -> tuple[PlanPoint, PlanPoint] | None:
    """The two calibration rows of one batch size, rank count and stack policy
    (:data:`STACK_POLICIES`) whose tok/s falls the most as the cache grows, where it falls by
    more than two measurements' noise allows (``log(t₁/t₂) > z₀.₉₅·√2·σ_net``), else None. The
    step without a memory knob cannot fall so: a larger cache of a stack policy reads no more
    from the SSD, and nothing else in the step grows with the cache."""
    limit, fall = TWO_MEASUREMENTS_Z * SIGMA_NET, None
    rows = [p for p in points if p.net_tok_s is not None and p.policy in STACK_POLICIES]
    for a in rows:
        for b in rows:
            same = (a.batch, a.ranks, a.policy) == (b.batch, b.ranks, b.policy)
            if same and a.cache_gib < b.cache_gib and math.log(a.net_tok_s / b.net_tok_s) > limit:  # type: ignore[operator]
                limit, fall = math.log(a.net_tok_s / b.net_tok_s), (a, b)  # type: ignore[operator]
    return fall


def _fall_words(fall: tuple[PlanPoint, PlanPoint] | None) -> str:
    """:func:`choose_memory_knob`'s clause on a measured fall (empty: none)."""
    if fall is None:
        return ""
    a, b = fall
    return (
        f"; the measured tok/s falls from {a.net_tok_s:.3g} at {a.cache_gib:g} GiB to {b.net_tok_s:.3g} at "
        f"{b.cache_gib:g} GiB, more than two measurements' noise allows, which the step without a memory knob "
        "cannot (a larger cache of a stack policy reads no more): that rules out its absence whatever the costs"
    )


def choose_memory_knob(
    points: Sequence[PlanPoint],
    model: MoEModel,
    hardware: Hardware,
    routing: RoutingProbabilities,
    overlaps: Sequence[str] = ("max", "sum"),
    jobs: int = 1,
    **kw: Any,
) -> tuple[tuple[str, ...], str]:
    """The default knobs (:func:`default_knobs`) and, where the rows measure a cache curve
    (:func:`memory_curve_note`), the memory knob that explains its bend. Under each of
    ``overlaps`` (how the terms combine decides which term a memory knob moves), each of
    :data:`MEMORY_KNOBS` is tried at the default fit's best cache knobs (the search's first
    :data:`SEARCH_GRID_POINTS` + 1 evaluations, without its profile walk) — ``reclaim`` by
    re-solving the smooth knobs with κ among them, ``pressure`` by re-solving them at each of
    :data:`MEMORY_SHARES` and keeping the best. A knob joins the fit where
    the rows rule out its absence: the default fit is the knob at 0 (κ = 0, the page cache off),
    and the default's lowest cost lies above the knob's profile cut at its lowest (its cost plus
    χ²₁(0.90)·s², :meth:`_Fit.profile_threshold`): 0 is outside the knob's 5–95 % profile interval
    — or, where the base step holds no memory effect (the page cache off, no reclaim work stated),
    the measured tok/s falls as the cache grows by more than the noise allows
    (:func:`measured_fall`), which no cost can say otherwise: a residual variance inflated by
    rows neither form meets would widen the cut past any difference. Of two that do, the lower cost; the reclaim work with its shape (:func:`with_reclaim_shape`).
    Returns the knobs and a note saying what was tried. ``jobs`` ≥ 2:
    the later overlaps' tries in a forked child (the same numbers). ``kw``: :func:`_setup_fit`'s
    (``memo`` shared with the fit that follows: the traces sampled here serve it)."""
    base = tuple(default_knobs(points, routing_is_spec=kw["routing_is_spec"]))

    def setup(fit: Sequence[str], overlap: str, **more: Any) -> _Fit:
        return _setup_fit(points, model, hardware, routing, fit=fit, overlap=overlap, **{**kw, **more})

    first = _memory_search(setup, base, overlaps[0])
    # with a second core, the other overlaps' tries beside this one's (each a pure function of its
    # inputs), forked once the first search has sampled the traces they share
    beside = _fork_call(lambda: [_memory_tries(setup, base, ov) for ov in overlaps[1:]]) if jobs >= 2 else None
    try:
        per_overlap = [_memory_tries(setup, base, overlaps[0], first)]
        got = beside.result() if beside is not None else None
    except BaseException:
        if beside is not None:
            beside.stop()
        raise
    per_overlap += got if got is not None else [_memory_tries(setup, base, ov) for ov in overlaps[1:]]
    without = min(w for w, _ in per_overlap)
    tried: dict[str, tuple[float, float]] = {}  # knob: (its lowest cost, its profile cut there)
    for _, costs in per_overlap:
        for knob, (cost, cut) in costs.items():
            if cost < tried.get(knob, (math.inf, math.inf))[0]:
                tried[knob] = (cost, cut)
    said = ", ".join(f"{MEMORY_KNOBS[k]} ({k}) {c:.3g}, its cut {t:.3g}" for k, (c, t) in tried.items())
    # where the base step holds neither memory effect (page cache off, no reclaim work stated), a fall
    fall = None if kw.get("page_cache") or hardware.reclaim_penalty else measured_fall(points)
    ruled_in = [k for k, (c, t) in tried.items() if t < without or fall is not None]
    head = (
        "memory knob: the rows measure tok/s at three or more cache sizes of one batch size; each memory knob was "
        f"tried at the default fit's best cache knobs ({said}) against {without:.3g} without it{_fall_words(fall)}"
    )
    if not ruled_in:
        return base, f"{head}: neither rules out its absence (a cost without it inside its cut), none is fitted"
    chosen = min(ruled_in, key=lambda k: tried[k][0])
    knobs, shape = (*base, chosen), ""
    if chosen == "reclaim":
        knobs, shape = with_reclaim_shape(setup, base)
    return knobs, (
        f"{head}: the rows rule out the step without {MEMORY_KNOBS[chosen]}, which is fitted ({chosen}){shape}; "
        "the other stays held at its prior, its end in the bands as far as the rows admit it"
    )


def with_reclaim_shape(setup: Callable[..., _Fit], base: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    """The default knobs with the reclaim work chosen: its size κ and, where the rows are enough,
    its shape n (``reclaim-shape``), and a note's clause; enough means as many configurations
    measured (batch, cache, ranks, policy: repeated runs of one count once) as smooth knobs. Too
    few: n is held at :data:`PRIOR_RECLAIM_EXPONENT`'s centre (its ends in the bands) and the
    engine's cost per touched expert stays fitted — at one batch size a fixed time per token,
    which sets how much a hit saves at every cache size, where n only bends the curve near full
    memory: on simulated one-stream curves (:mod:`moeroof.studies.curve_coverage`) holding n
    predicts the held-out rows closer than holding that cost at its prior and fitting n
    (docs/validation.md)."""
    knobs = (*base, "reclaim", "reclaim-shape")
    try:
        f = setup(knobs, "max")
        # repeated runs of one configuration measure its noise, not the curve's shape
        if len(f.params) <= len({p.conditions for p in f.rows.points if p.net_tok_s is not None}):
            return knobs, " with its shape n (reclaim-shape)"
    except ParameterError:  # more smooth knobs than tok/s rows
        pass
    lo, mid, hi = PRIOR_RECLAIM_EXPONENT
    held = setup((*base, "reclaim"), "max").held.shape
    where = f"at its prior's centre {mid:g} (range {lo:g}–{hi:g}, its ends in the bands)" if held else "at the preset's"
    beside = ", ".join([*(k for k in base if k in _SMOOTH), "reclaim"])  # the smooth knobs n would join
    return (*base, "reclaim"), (
        f" with its shape n held {where}: too few configurations measured for n beside the fitted {beside}"
    )


def _default_memory_knob(
    points: Sequence[PlanPoint],
    model: MoEModel,
    hardware: Hardware,
    routing: RoutingProbabilities,
    kw: dict[str, Any],
    overlap: str | None,
    jobs: int,
    progress: Callable[[int, int, str], None] | None,
) -> tuple[tuple[str, ...] | None, str | None]:
    """:func:`fit_plan`'s knobs where none is named (``kw["fit"]`` None) and the rows measure a
    cache curve (:func:`choose_memory_knob`, with its note); (None, None) elsewhere. ``kw``:
    :func:`_setup_fit`'s settings; ``overlap``, ``jobs``, ``progress``: fit_plan's."""
    base = default_knobs(points, routing_is_spec=kw["routing_is_spec"])
    if kw["fit"] is not None or not memory_curve_note(points, base):
        return None, None
    if progress is not None:
        progress(0, len(FIT_STAGES) * (1 if overlap else 2), "memory knob: trying pressure and reclaim")
    tries = (overlap,) if overlap is not None else ("max", "sum")
    setup = {k: v for k, v in kw.items() if k != "fit"}
    return choose_memory_knob(points, model, hardware, routing, tries, jobs, **setup)


def fit_plan(
    points: Sequence[PlanPoint],
    model: MoEModel,
    hardware: Hardware,
    routing: RoutingProbabilities,
    *,
    fit: Sequence[str] | None = None,
    context_tokens: int = 4096,
    page_cache: bool = False,
    routing_is_spec: bool = True,
    max_evaluations: int = 40,
    overlap: str | None = None,
    locality: Locality | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    jobs: int = 1,
) -> PlanFit:
    """Fit the named knobs on the calibration rows, predict every row with bands (module
    docstring); ``progress(done, total, what)`` as each stage of each overlap begins and once at the
    end (done = total). ``overlap``: ``max`` or ``sum``; None fits both and keeps the better (lower
    cost), and the other widens the bands when it too meets every calibration row within
    2 σ — how the terms combine is a structural choice the rows may not decide. Raises
    :class:`ParameterError` for an unknown knob, a knob the rows cannot identify (more smooth
    parameters than measured net tok/s rows), or ``skew`` with a routing that is not Zipf.

    ``jobs`` ≥ 2 with both overlaps to fit: the ``sum`` fit runs in a forked process beside the
    ``max`` one from the start (each fit is a pure function of its inputs: the same numbers as
    ``jobs = 1``; max's cost, which sum reads where it misses a calibration row by more than 2 σ,
    comes down a pipe); where the platform cannot fork, or the child dies, it runs here after
    ``max``."""
    kw: dict[str, Any] = dict(
        fit=fit,
        context_tokens=context_tokens,
        page_cache=page_cache,
        routing_is_spec=routing_is_spec,
        max_evaluations=max_evaluations,
        locality=locality,
        # the routings sampled for one overlap's fit serve the other's (a forked fit starts empty)
        memo={},
    )
    if overlap is not None and overlap not in ("max", "sum"):
        raise ParameterError("overlap", f"expected max or sum, got {overlap!r}")
    chosen, structure_note = _default_memory_knob(points, model, hardware, routing, kw, overlap, jobs, progress)
    kw["fit"] = chosen if chosen is not None else fit
    overlaps_tried = ("max", "sum") if overlap is None else (overlap,)
    # the other skew family's fit comes after the overlaps' (:func:`with_other_family`)
    names = kw["fit"] if kw["fit"] is not None else default_knobs(points, routing_is_spec=routing_is_spec)
    alt_routing = _other_family(routing, model, names, points)
    total = len(FIT_STAGES) * (len(overlaps_tried) + (alt_routing is not None))
    args = (points, model, hardware, routing)
    fits = _fit_overlaps(args, kw, overlap, overlaps_tried, total, jobs, progress)
    out = fits[overlap] if overlap is not None else _better_overlap(fits)
    if alt_routing is not None:
        stage = _family_stages(progress, len(FIT_STAGES) * len(overlaps_tried), total)
        out = with_other_family(out, args, alt_routing, kw, jobs, stage)
    if progress is not None:
        progress(total, total, "done")
    # the default's own note says what it tried; a named fit gets the reminder of what the rows could tell
    out = with_memory_note(out, points) if structure_note is None else replace(out, notes=(*out.notes, structure_note))
    return _with_misfit_note(out, points, named=fit is not None)


def _fit_overlaps(
    args: tuple,
    kw: dict[str, Any],
    overlap: str | None,
    overlaps_tried: tuple[str, ...],
    total: int,
    jobs: int,
    progress: Callable[[int, int, str], None] | None,
) -> dict[str, PlanFit]:
    """:func:`fit_plan`'s fit under each of ``overlaps_tried`` (``jobs`` ≥ 2 with both: ``sum`` in a
    forked process beside ``max`` from the start), their stages counted out of ``total``."""
    fits: dict[str, PlanFit] = {}
    beside = None
    ends = _search_ends({}, _pipe() if jobs >= 2 else None) if overlap is None else {overlap: None}
    for i, ov in enumerate(overlaps_tried):
        stages = iter(range(i * len(FIT_STAGES), (i + 1) * len(FIT_STAGES)))

        def stage(what: str, ov=ov, stages=stages) -> None:
            nonlocal beside
            if jobs >= 2 and overlap is None and ov == "max" and beside is None:
                # from the start: the second core would idle through max's search, which is serial
                # (sum samples the traces its search shares with max's again, on that core)
                beside = _fork_call(lambda: _fit_one(*args, overlap="sum", after_search=ends["sum"], **kw))
            done = next(stages)
            if progress is not None:
                progress(done, total, f"{ov}: {what}" + (" (the other overlap beside it)" if beside else ""))

        try:
            got = beside.result() if beside is not None and ov == "sum" else None
            fits[ov] = (
                got
                if got is not None
                else _fit_one(*args, overlap=ov, stage=stage, after_search=ends[ov], jobs=jobs, **kw)
            )
        except BaseException:
            if beside is not None:
                beside.stop()
            raise
    return fits


def _other_family(
    routing: RoutingProbabilities, model: MoEModel, fitted: Sequence[str], points: Sequence[PlanPoint]
) -> RoutingProbabilities | None:
    """The routing of the other skew family where a fit fits the skew of a routing given by its
    knobs and the rows measure a hit-rate curve — hit rates at as many cache sizes of one batch
    size, rank count and policy as a peak asks (:func:`moeroof.models.curve_peak.peak_grids`),
    whose shape between them is what the family decides (elsewhere the second fit is not paid
    for: it would take a default fit of seed 003's rows past the 10 s a fit may take): Zipf at
    s = 0.8 for a Dirichlet (the skew prior's or the user's), the skew prior's Dirichlet for a
    Zipf — each the start its skew is fitted from; else None."""
    fs = spec_skew(routing)
    if fs is None or "skew" not in fitted or not peak_grids([p for p in points if p.hit_rate is not None]):
        return None
    return routing_from_spec("zipf:0.8", model) if fs[0] == "dirichlet" else prior_routing(model)


def _family_stages(progress: Callable[[int, int, str], None] | None, first: int, total: int) -> Callable[[str], None]:
    """The other skew family's ``stage`` callback: its stages counted from ``first`` of ``total``."""
    stages = iter(range(first, total))

    def stage(what: str) -> None:
        if progress is not None:
            progress(next(stages), total, f"the other skew family: {what}")

    return stage


def with_other_family(
    out: PlanFit,
    args: tuple,
    alt_routing: RoutingProbabilities,
    kw: dict[str, Any],
    jobs: int,
    stage: Callable[[str], None] = lambda what: None,
) -> PlanFit:
    """``out`` with the skew family it was not given (``alt_routing``: :func:`_other_family`)
    fitted as well, at its overlap, knobs and rows: a structural choice the rows may not decide, as
    the overlap is. The family held — the given one, or :data:`CURVE_FAMILY_PRIOR` where the routing
    is the skew prior's (the user named none) — stays unless the other fits better by more than the
    profile's χ²₁(0.90) (a likelihood-ratio test at 90 %: a cost lower within the noise is no
    reason to leave it); the bands take in the other's predictions where it too meets every
    calibration row within 2 σ."""
    points, model, hardware, routing = args
    family, alt_family = (_skew_start(r)[0] for r in (routing, alt_routing))
    # the family held: the prior's where the routing is the skew prior's (the user named none)
    by_prior = skew_prior_of(routing) is not None and alt_family == CURVE_FAMILY_PRIOR

    def replaces(cost: float) -> bool:  # the other family's fit at this cost takes out's place
        return not out.cost + PROFILE_CHI2 < cost if by_prior else cost + PROFILE_CHI2 < out.cost

    def worth_finishing(cost: float, max_z: float) -> bool:  # its bands are read, or it replaces out
        return max_z <= WITHIN_NOISE_Z or replaces(cost)

    alt = _fit_one(
        points,
        model,
        hardware,
        alt_routing,
        overlap=out.overlap,
        stage=stage,
        after_search=worth_finishing,
        jobs=jobs,
        **kw,
    )
    switch = replaces(alt.cost)
    costs = f"cost {alt.cost:.3g} for {alt_family} against {out.cost:.3g} for {family}"
    if by_prior:
        note = (
            f"family: {alt_family}, the family prior of one stream's hit-rate curves (it predicts the published "
            f"single-stream column's held-out sizes closer: docs/validation.md), held over the skew prior's {family} "
            f"({costs}; the {family} would stay only where it fits better by more than {PROFILE_CHI2:.2f})"
            if switch
            else f"family: {family} kept over {alt_family}, the family prior of one stream's hit-rate curves: it fits "
            f"better by more than {PROFILE_CHI2:.2f} ({costs})"
        )
    else:
        note = (
            f"family: {alt_family} fits better than the {family} given ({costs}, lower by more than "
            f"{PROFILE_CHI2:.2f}): the knobs are its"
            if switch
            else f"family: {family} kept ({costs}; the given family stays unless the other fits better by more "
            f"than {PROFILE_CHI2:.2f})"
        )
    best, other, other_family = (
        (replace(alt, family_routing=alt_routing.label), out, family) if switch else (out, alt, alt_family)
    )
    notes = [note + (": the knobs are its" if by_prior and switch else "")]
    if other.overlaps[other.overlap]["max_abs_z"] <= WITHIN_NOISE_Z:
        best = _widened_by(best, other)
        notes.append(f"the {other_family} family also meets the calibration rows: the bands include its predictions")
    return replace(best, notes=(*best.notes, *notes))


def _with_misfit_note(out: PlanFit, points: Sequence[PlanPoint], named: bool) -> PlanFit:
    """``out`` with :func:`misfit_note` where it misses its calibration rows; a ``named`` fit of
    rows that measure a cache curve is pointed to the default's memory-knob choice."""
    missed = misfit_note(out.rows)
    if missed is None:
        return out
    if named and memory_curve_note(points, ()) is not None:
        missed += (
            "; the rows measure tok/s at three or more cache sizes of one batch size: without --fit, fit-plan tries "
            "both memory knobs (pressure, reclaim) and fits the one they rule in"
        )
    return replace(out, notes=(*out.notes, missed))


def misfit_note(rows: Sequence[dict[str, Any]]) -> str | None:
    """A note where the fit misses any of its calibration values (``rows``: :attr:`PlanFit.rows`)
    by more than :data:`WITHIN_NOISE_Z` σ of the noise a measurement is assumed to carry
    (:data:`SIGMA_NET` on log tok/s, :data:`SIGMA_HIT` on hit rates): each such value and its
    miss, worst first. The bands widen by the rows' scatter, but a miss this size says the knobs
    fitted do not explain the rows; None where every value is met within it."""
    misses = []
    for r in rows:
        if r["role"] != "calibration":
            continue
        if r["measured"] is not None:
            z = math.log(r["predicted"] / r["measured"]) / SIGMA_NET
            misses.append((abs(z), f"row {r['row']} tok/s {100 * r['relative_error']:+.0f} %"))
        if r["measured_hit_rate"] is not None:
            z = (r["predicted_hit_rate"] - r["measured_hit_rate"]) / SIGMA_HIT
            misses.append((abs(z), f"row {r['row']} hit rate {100 * SIGMA_HIT * z:+.1f} points"))
    beyond = sorted((m for m in misses if m[0] > WITHIN_NOISE_Z), key=lambda m: -m[0])
    if not beyond:
        return None
    return (
        f"misfit: the fit misses {len(beyond)} of its {len(misses)} calibration values by more than "
        f"{WITHIN_NOISE_Z:g} σ of the noise assumed ({SIGMA_NET:.0%} on tok/s, {100 * SIGMA_HIT:g} points on hit rates): "
        + ", ".join(f"{what} ({z:.1f} σ)" for z, what in beyond)
        + "; the bands take in the rows' scatter, but misses beyond the noise say the knobs fitted do not fully "
        "explain the rows"
    )


def _search_ends(searched: dict[str, float], channel: Any = None) -> dict[str, Callable[[float, float], bool]]:
    """``_fit_one``'s ``after_search`` for each overlap where both are fitted (max first): max's
    records its cost and goes on; sum's goes on only where its bands are read — where it fits
    better than max (max wins a tie) or meets every calibration row within 2 σ
    (:func:`_better_overlap`); elsewhere only its cost and worst z are, and it ends there.
    ``channel`` (a pipe's two ends): max's cost sent to a sum fit forked before max's search
    ended, which waits for it only where it needs it."""

    def at_max(cost: float, max_z: float) -> bool:
        searched["max"] = cost
        if channel is not None:
            channel[1].send(cost)
        return True

    def at_sum(cost: float, max_z: float) -> bool:
        if max_z <= WITHIN_NOISE_Z:
            return True
        if "max" not in searched:  # forked before max's search ended: its cost comes down the pipe
            searched["max"] = float(channel[0].recv())
        return cost < searched["max"]

    return {"max": at_max, "sum": at_sum}


def _better_overlap(fits: dict[str, PlanFit]) -> PlanFit:
    """Of the two overlaps' fits, the one of lower cost, saying so; its bands widened by the
    other's where that too meets every calibration row within 2 σ."""
    best = min(fits.values(), key=lambda f: f.cost)
    other = fits["sum" if best.overlap == "max" else "max"]
    overlaps = {ov: f.overlaps[ov] for ov, f in fits.items()}
    for ov in overlaps:
        overlaps[ov]["chosen"] = ov == best.overlap
    notes = list(best.notes) + [
        f"overlap: {best.overlap} fits better (cost {best.cost:.3g} against {other.cost:.3g} for {other.overlap})"
    ]
    if other.overlaps[other.overlap]["max_abs_z"] <= WITHIN_NOISE_Z:
        best = _widened_by(best, other)
        notes.append(f"{other.overlap} overlap also meets the calibration rows: the bands include its predictions")
    return replace(best, notes=tuple(notes), overlaps=overlaps)


def _widened_by(best: PlanFit, other: PlanFit) -> PlanFit:
    """``best`` with every band (its rows' tok/s and hit rates, its peaks') widened to take in
    ``other``'s: the other overlap, where it too meets the calibration rows."""

    def united(a: dict[str, Any], b: dict[str, Any], lows: tuple[str, ...], highs: tuple[str, ...]) -> dict[str, Any]:
        return {**a, **{k: min(a[k], b[k]) for k in lows}, **{k: max(a[k], b[k]) for k in highs}}

    rows = [united(r, o, ("low", "hit_rate_low"), ("high", "hit_rate_high")) for r, o in zip(best.rows, other.rows)]
    peaks = tuple(united(pk, po, ("low",), ("high",)) for pk, po in zip(best.peaks, other.peaks))
    return replace(best, rows=rows, peaks=peaks)


def with_memory_note(fit: PlanFit, points: Sequence[PlanPoint]) -> PlanFit:
    """``fit`` with :func:`memory_curve_note`'s note where it applies, saying how far the fit
    misses its calibration rows (:func:`worst_calibration_miss`) where that exceeds twice the
    measurement noise."""
    note = memory_curve_note(points, fit.fitted)
    if note is None:
        return fit
    miss = worst_calibration_miss(fit.rows)
    if miss is not None and abs(miss[1]) > 2 * SIGMA_NET:
        # the rows' own verdict on the structure left out: the user sees how far the fit misses
        # them and what to name, not a reminder that holds for every such file
        named = ",".join(fit.fitted)
        note += (
            f"; without either this fit misses its own calibration rows by up to {100 * miss[1]:+.0f} % "
            f"(row {miss[0]}), more than twice the measurement noise: --fit {named},pressure or "
            f"--fit {named},reclaim may follow the bend (compare their costs)"
        )
    return replace(fit, notes=(*fit.notes, note))


def worst_calibration_miss(rows: Sequence[dict[str, Any]]) -> tuple[Any, float] | None:
    """The calibration row whose predicted tok/s is farthest from its measurement, in log ratio,
    as (its row, ``predicted / measured − 1``); None without a measured calibration row."""
    cal = [r for r in rows if r["role"] == "calibration" and r["measured"]]
    if not cal:
        return None
    worst = max(cal, key=lambda r: abs(math.log(r["predicted"] / r["measured"])))
    return worst["row"], worst["predicted"] / worst["measured"] - 1.0


class _Forked:
    """One call running in a forked child (:func:`_fork_call`); :meth:`result` is its value,
    re-raises its error, or is None where the child died (the caller then makes the call itself)."""

    def __init__(self, process, conn) -> None:
        self.process, self.conn = process, conn

    def result(self) -> Any:
        try:
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            kind, value = "lost", None
        finally:
            self.conn.close()
            self.process.join()
        if kind == "error":
            raise value
        return value if kind == "ok" else None

    def stop(self) -> None:
        """End the child (the parent's own fit failed or was interrupted)."""
        if self.process.is_alive():
            self.process.terminate()
        self.process.join()


def _pipe() -> Any:
    """A one-way pipe's (receiving, sending) ends for a forked child (None where this platform cannot fork)."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    return multiprocessing.get_context("fork").Pipe(duplex=False)


def _fork_call(call: Callable[[], Any]) -> _Forked | None:
    """Start ``call()`` in a forked process (its inputs inherited, not pickled: presets hold
    read-only mappings; its value comes back pickled); None where this platform cannot fork or
    this process is a daemon."""
    import multiprocessing

    # a daemonic process (a pool's worker) may not have children: the caller makes the call itself
    if "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.current_process().daemon:
        return None
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send(("ok", call()))
        except Exception as err:  # the parent re-raises it as the serial call would
            send.send(("error", err))
        finally:
            send.close()

    process = ctx.Process(target=child, daemon=True)
    process.start()
    send.close()
    return _Forked(process, recv)


def _prior_origin(hardware: Hardware) -> str:
    """Where the box's per-step engine prior comes from: its preset, or the suite's public engines."""
    mine = hardware.priors.get("engine_seconds_per_step")
    if mine is not None and mine != DEFAULT_PRIORS["engine_seconds_per_step"]:
        return f"the {hardware.name} preset's"
    return "from public engines"


def _cache_knob_entries(outer, routing: RoutingProbabilities, cache_intervals) -> dict[str, dict[str, Any]]:
    """The fitted cache knobs' entries of :func:`_knob_table` (skew in its routing's family: Zipf
    s, or 1/√α with α beside it; ρ; the page cache's share), each with its profile interval."""
    family = _skew_start(routing)[0]
    skew_unit = "Zipf s" if family == "zipf" else "Dirichlet 1/√α"
    out: dict[str, dict[str, Any]] = {}
    for name, key, unit in (
        ("skew", "skew", skew_unit),
        ("rho", "rho", "ρ"),
        ("pressure", "page_cache_share", "share"),
    ):
        if name not in outer:
            continue
        interval = cache_intervals[name]
        whole = interval.as_tuple() == tuple(float(b) for b in _CACHE_BOUNDS[name])
        out[key] = _entry(float(outer[name]), interval.low, interval.high, unit, fitted=True, identified=not whole)
        if whole:
            out[key]["why"] = "its profile spans its whole range: every value fits the rows as well"
        if name == "skew":
            out[key]["family"] = family
            if family == "dirichlet":
                out[key]["alpha"] = skew_parameter(family, float(outer[name]))
    return out


def _fitted_entry(param: _Smooth, value: float, column: np.ndarray, sd: float, identified: bool) -> dict[str, Any]:
    """One fitted smooth knob's entry of :func:`_knob_table`: ``value``, its profile's values ``column``
    and its standard error ``sd`` give its 5–95 % interval, inside its bounds."""
    z = 1.6448536269514722  # the 5–95 % interval of a normal
    lo, hi = param.bounds
    if not identified:  # the rows do not move this knob: any value in its bounds fits
        why = (
            "the rows cannot move it: another term binds at every calibration row, or it cannot be told from "
            "another knob (per-step and per-token engine cost at one batch size)"
        )
        return _entry(value, lo, hi, param.unit, fitted=True, identified=False, why=why)
    low = max(float(column.min() - z * sd), lo)
    high = min(float(column.max() + z * sd), hi)
    out = _entry(value, low, high, param.unit, fitted=True, identified=True)
    # 0 s (and the reclaim exponent 1, the queueing form) is a real value; the SSD scale's 1e-3 is not
    reach_low = low <= lo * (1 + 1e-9) and param.field == "ssd_scale"
    reach_high = high >= hi * (1 - 1e-9)
    if not np.isfinite(sd) or reach_low or reach_high:  # an interval to the end of the range is no bound
        ends = "both ends" if reach_low and reach_high else "the upper end" if reach_high else "the lower end"
        out["identified"] = False
        out["why"] = (
            f"its 5–95 % interval reaches {ends} of its allowed range ({lo:g}–{hi:g}): the rows do not bound it"
            if np.isfinite(sd)
            else "the rows give it no spread (a singular fit)"
        )
    return out


def _held_engine_entries(hardware: Hardware, net_batches: Sequence[int]) -> dict[str, dict[str, Any]]:
    """The engine's per-step and per-token entries of :func:`_knob_table` when every measured rate
    is at one batch size: held at their priors."""
    out: dict[str, dict[str, Any]] = {}
    for key, held, what, more in (
        (
            "engine_seconds_per_step",
            f"prior ({_prior_origin(hardware)})",
            "a per-step engine cost cannot be told from a per-touched-expert one",
            {"source": hardware.priors["engine_seconds_per_step"][1]},
        ),
        (
            "engine_seconds_per_agent_token",
            "prior (assumed)",
            "the per-token engine cost cannot be told from the per-step one",
            {},
        ),
    ):
        lo, centre, hi = hardware.priors[key][0]
        why = (
            f"every measured rate is at one batch size (B = {', '.join(map(str, net_batches))}): {what}; held at its "
            "prior, the bands cover its range"
        )
        out[key] = _held_entry(centre, lo, hi, held, why, "s", **more)
    return out


def _knob_table(
    fit: _Fit, best: _Best, xs: np.ndarray, cov: np.ndarray | None, identified, cache_intervals: dict[str, Interval]
) -> dict:
    """Each knob's value and 5–95 % interval; ``identified`` means the interval is bounded —
    inside the knob's range, not reaching an end that is not a natural limit (0 engine time,
    0 stickiness) — and a knob that is not says ``why`` in plain words."""
    names, hardware, routing, outer = fit.names, fit.hardware, fit.routing, best.outer
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None)) if cov is not None else np.full(best.x.size, np.nan)
    out = {
        p.field: _fitted_entry(p, float(best.x[j]), xs[:, j], sd[j], identified[j]) for j, p in enumerate(fit.params)
    }
    if fit.hold_token:
        out.update(_held_engine_entries(hardware, fit.rows.net_batches))
    if "engine" not in names:
        why = "the fit leaves the engine out and the preset does not state it: held at its prior, the bands cover its range"
        for key, field_name in ENGINE_FIELDS.items():
            if key in fit.held.engine:
                lo, centre, hi = hardware.priors[field_name][0]
                out[field_name] = _held_entry(centre, lo, hi, f"prior ({_prior_origin(hardware)})", why, "s")
            elif key != "touched":  # the preset states it: its own value
                value = float(getattr(hardware, field_name))
                out[field_name] = {"value": value, "fitted": False, "unit": "s", "held": "the preset's"}
    if "ssd-scale" not in names:
        out["ssd_scale"] = {"value": 1.0, "fitted": False, "unit": "×", "held": "the preset's SSD curve"}
    out.update(_cache_knob_entries(outer, routing, cache_intervals))
    if "skew" not in outer:
        out["routing"] = {"value": routing.label, "fitted": False}
    return out
