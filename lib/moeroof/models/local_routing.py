"""A routing with one stream's temporal locality: the cache runs on a trace, not on independent tokens.

A :class:`~moeroof.models.plan.RoutingProbabilities` gives what a step's union needs — the
inclusion probabilities π of each layer shape — but says nothing of how a stream's tokens follow
each other; drawn from π alone, consecutive tokens are independent and a single stream's cache
hits only what popularity gives it. Real decode is more local (stickiness ρ: Qwen3-30B-A3B keeps
42.7 % of its experts from one token to the next; per-stream hot sets ``q ~ Dirichlet(c·w)``).
:class:`LocalRouting` keeps π and adds, for each batch size B, a trace of B streams sampled with
the stickiness ρ and the per-stream locality c
(:func:`moeroof.fit.routing.sample_knob_trace`, the sampler ``moeroof fit-routing``
fits with), on which :func:`moeroof.models.plan.plan` simulates the cache and measures the
union; :func:`moeroof.models.plan.plan` calls it once per B, so no row depends on another.

The popularity the trace draws from:

- a routing given by its knobs (``uniform``, ``zipf:S``, ``dirichlet:A``, the skew prior):
  the family's own per-layer popularity, exactly as
  ``moeroof fit-plan`` and ``moeroof plan --routing-knobs`` sample it
  (:func:`routing_from_knobs`: Zipf weights in a random order, or Dirichlet draws, per layer; π is the trace's own
  histogram), so a zero-fit ``plan`` and a zero-fit ``fit-plan`` agree;
- a histogram: the Plackett–Luce weights whose top-K inclusion probabilities are its rows
  (:func:`moeroof.models.routing.weights_from_inclusion`), at most :data:`TRACE_LAYERS` rows
  spread evenly; π stays the histogram's (the trace's marginals are its, up to sampling).

A trace routing carries its own correlations and is left as it is. Each trace has
:func:`trace_steps` steps (96 up to 32 streams, then fewer; more for a stream or two of a model
of many experts, so the cache is warm: the cache is counted over the second half) of :data:`TRACE_LAYERS` layers.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from moeroof.core.errors import ParameterError
from moeroof.core.limits import AllocationError
from moeroof.data.presets import MoEModel
from moeroof.models.expert_cache import GLOBAL_STAND_IN_LAYERS
from moeroof.models.knob_routing import RoutingKnobs, layer_popularity, sample_knob_trace
from moeroof.models.plan import RoutingProbabilities
from moeroof.models.routing import histogram_from_trace, weights_from_inclusion

__all__ = [
    "TRACE_STEPS",
    "TRACE_STREAM_STEPS",
    "TRACE_MIN_STEPS",
    "TRACE_MAX_STEPS",
    "TRACE_MAX_STREAM_STEPS",
    "trace_steps",
    "TRACE_LAYERS",
    "LocalRouting",
    "routing_from_knobs",
    "with_locality",
    "locality_band",
    "skew_band",
    "spec_skew",
    "cache_sees_locality",
    "LOCALITY_CHOICES",
    "locality_parameter",
    "over_prior_ends",
]

#: decode steps of each sampled trace of at most :data:`TRACE_STREAM_STEPS` / TRACE_STEPS
#: streams (the cache is counted over the second half); :func:`trace_steps` for more streams
TRACE_STEPS = 96
#: stream-steps a trace of many streams keeps (fewer steps, each with more requests)
TRACE_STREAM_STEPS = 3072
#: the fewest steps of any trace: a cache that one step of many streams fills is warm after a
#: few, and the second half still counts twelve steps of every stream
TRACE_MIN_STEPS = 24
#: the most steps a trace of few streams is lengthened to (:func:`trace_steps`)
TRACE_MAX_STEPS = 1024
#: the most stream-steps a trace is lengthened to (:func:`trace_steps`): the cap counts the
#: requests the cache sees, as eight streams' 1,024 steps, so more streams get fewer steps
TRACE_MAX_STREAM_STEPS = 8 * TRACE_MAX_STEPS
#: layer shapes of each sampled trace (one global cache over them, as engines keep it): the
#: stand-in layers a one-row routing's global cache runs over too, so independent tokens are the
#: stickiness-0 limit of these traces
TRACE_LAYERS = GLOBAL_STAND_IN_LAYERS


def trace_steps(streams: int, pi: np.ndarray | None = None) -> int:
    """Steps of a sampled trace of ``streams`` streams: :data:`TRACE_STEPS` up to 32 streams,
    then ``⌈TRACE_STREAM_STEPS / streams⌉`` and never below :data:`TRACE_MIN_STEPS` — the
    sampler's cost grows with streams × steps, and a step of many streams already touches most
    of what a cache holds.

    Given the layers' inclusion probabilities ``pi``, a trace of few streams is lengthened so that
    its first half (the cache's warm-up: the counted half follows) is at least the warm-up
    :mod:`moeroof.models.expert_cache` gives its drawn traces
    (:func:`~moeroof.models.expert_cache.warmup_steps`: twice the steps after which the streams
    have touched 0.9 of a layer's reachable experts): otherwise one stream of a 288-expert model
    fills a cache of most experts only late in the counted half and its first touches read as
    steady-state misses (seed 003's one stream at 80 GiB: 90.5 % hits in 96 steps, below the
    99.6 % of eight streams). At most :data:`TRACE_MAX_STEPS` steps and, lengthened, at most
    :data:`TRACE_MAX_STREAM_STEPS` stream-steps: a cache warms by the requests it sees, and B
    streams make B a step (a skewed routing's rarest experts would otherwise hold every B at
    1,024 steps, 32 streams' trace four times eight streams' requests)."""
    b = max(int(streams), 1)
    steps = int(max(TRACE_MIN_STEPS, min(TRACE_STEPS, math.ceil(TRACE_STREAM_STEPS / b))))
    if pi is not None:
        from moeroof.models.expert_cache import warmup_steps

        cap = min(TRACE_MAX_STEPS, math.ceil(TRACE_MAX_STREAM_STEPS / b))
        steps = max(steps, min(cap, 2 * warmup_steps(pi, b)))
    return int(steps)


def routing_from_knobs(
    model: MoEModel, family: str, skew: float, rho: float = 0.0, c: float = math.inf, *, streams: int, seed: int = 0
) -> RoutingProbabilities:
    """A routing whose cache runs on a trace sampled from knobs, as ``moeroof fit-routing``
    samples them (:func:`moeroof.fit.routing.layer_popularity` and
    :func:`~moeroof.fit.routing.sample_knob_trace`: family Zipf s or Dirichlet α,
    stickiness ρ, per-stream locality c): :func:`trace_steps` steps, ``streams`` streams,
    :data:`TRACE_LAYERS` layers; π is the trace's own histogram."""
    if family not in ("zipf", "dirichlet"):
        raise ParameterError("family", f"expected zipf or dirichlet, got {family!r}")
    knobs = RoutingKnobs(family=family, skew=float(skew), rho=float(rho), c=float(c))
    popularity = layer_popularity(knobs, model.experts, TRACE_LAYERS, int(seed))
    # the popularity's inclusion probabilities, K·w capped at 1, for the warm-up's length
    steps = trace_steps(streams, np.minimum(model.top_k * np.asarray(popularity, dtype=float), 1.0))
    topk = sample_knob_trace(knobs, popularity, model.top_k, int(streams), steps, int(seed))
    counts = histogram_from_trace(topk, model.experts).astype(float)
    pi = counts / float(steps * streams)
    pi = pi * (model.top_k / np.maximum(pi.sum(axis=1, keepdims=True), 1e-300))
    key = f"knobs:{family}:{skew:.6g}:{rho:.6g}:{c:.6g}:{streams}:{steps}:{model.experts}:{model.top_k}:{seed}"
    label = f"{family} {skew:.3g}, ρ={rho:.3g}" + ("" if math.isinf(c) else f", c={c:.3g}")
    return RoutingProbabilities(np.clip(pi, 0.0, 1.0), label, "projected", trace=topk, trace_key=key)


def spec_skew(routing: RoutingProbabilities) -> tuple[str, float] | None:
    """The (family, skew) of a routing given by its knobs (``uniform``: Zipf 0, ``zipf:S``,
    ``dirichlet:A``, ``prior``), else None (a histogram or trace has its own popularity)."""
    fs = getattr(routing, "family_skew", None)
    return None if fs is None else (str(fs[0]), float(fs[1]))


@functools.lru_cache(maxsize=16)
def _weights(pi_bytes: bytes, shape: tuple[int, int], top_k: int) -> np.ndarray:
    pi = np.frombuffer(pi_bytes, dtype=float).reshape(shape)
    w, _ = weights_from_inclusion(pi, top_k)
    w.setflags(write=False)
    return w


@dataclass(frozen=True)
class LocalRouting:
    """``base`` with stickiness ``rho`` and per-stream locality ``c`` (module docstring): called
    with B it gives the routing of a B-stream step, its trace sampled at ``seed``; its own
    ``label``, ``provenance``, ``notes``, ``pi`` and ``load`` are the base's, the label and notes
    saying what locality was added and where it came from (``source``)."""

    model: MoEModel
    base: RoutingProbabilities
    rho: float
    c: float
    source: str
    seed: int = 0
    #: the (family, skew) to sample at, exactly (None: the base's own, :func:`spec_skew`)
    family_skew: tuple[str, float] | None = None
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def skew(self) -> tuple[str, float] | None:
        return spec_skew(self.base) if self.family_skew is None else self.family_skew

    @property
    def label(self) -> str:
        c = "" if math.isinf(self.c) else f", c = {self.c / self.model.experts:.3g}·E"
        return f"{self.base.label}, ρ = {self.rho:.3g}{c}"

    @property
    def provenance(self) -> str:
        return "projected" if self.base.provenance == "witnessed" else self.base.provenance

    @property
    def pi(self) -> np.ndarray:
        return self.base.pi

    @property
    def load(self) -> np.ndarray | None:
        return self.base.load

    @property
    def expert_load(self) -> np.ndarray:
        return self.base.expert_load

    @property
    def trace(self) -> None:
        return None

    @property
    def notes(self) -> tuple[str, ...]:
        c = (
            "no per-stream hot set"
            if math.isinf(self.c)
            else f"per-stream hot sets c = {self.c / self.model.experts:.3g}·E"
        )
        return (
            *self.base.notes,
            f"one stream's temporal locality from the {self.source}: stickiness ρ = {self.rho:.3g}, {c}; the "
            f"cache is simulated on a trace of B such streams ({TRACE_STEPS} steps, more for a few streams to warm the cache, fewer from B = 33 on; "
            f"{TRACE_LAYERS} layer shapes) sampled for each batch size",
        )

    def __call__(self, batch: int) -> RoutingProbabilities:
        b = int(batch)
        if b < 1:
            raise ValueError(f"batch must be >= 1, got {batch!r}")
        if b not in self._memo:
            try:
                self._memo[b] = self._at(b)
            except AllocationError as err:  # the trace's arrays grow with B: say so, and what turns it off
                why = f"B = {b} streams: the locality prior's {err}; --independent runs the cache without it"
                raise ParameterError("batch", why) from None
        return self._memo[b]

    def _at(self, b: int) -> RoutingProbabilities:
        fs = self.skew
        if fs is not None:
            r = routing_from_knobs(self.model, fs[0], fs[1], self.rho, self.c, streams=b, seed=self.seed)
            return RoutingProbabilities(
                r.pi, self.label, self.provenance, self.notes, trace=r.trace, trace_key=r.trace_key
            )
        pi = np.asarray(self.base.pi, dtype=float)
        rows = pi[np.unique(np.round(np.linspace(0, pi.shape[0] - 1, min(TRACE_LAYERS, pi.shape[0]))).astype(int))]
        if rows.shape[0] < TRACE_LAYERS:  # one global cache over TRACE_LAYERS layers, whatever the histogram has
            rows = rows[np.arange(TRACE_LAYERS) % rows.shape[0]]
        rows = np.ascontiguousarray(rows)
        w = _weights(rows.tobytes(), rows.shape, self.model.top_k)
        from moeroof.models.expert_cache import digest

        knobs = RoutingKnobs(family="zipf", skew=0.0, rho=float(self.rho), c=float(self.c))
        steps = trace_steps(b, rows)
        topk = sample_knob_trace(knobs, w, self.model.top_k, b, steps, self.seed)
        key = f"local:{digest(w)}:{self.rho:.6g}:{self.c:.6g}:{b}:{steps}:{self.seed}"
        return RoutingProbabilities(
            self.base.pi, self.label, self.provenance, self.notes, load=self.base.load, trace=topk, trace_key=key
        )


def cache_sees_locality(workload) -> bool:
    """Whether a :class:`~moeroof.models.plan.Workload`'s step depends on how a stream's tokens
    follow each other: a simulated cache (not the ``static`` hot set, which is in closed form)
    with room for an expert, or the OS page cache. Without one the union alone counts, and its
    expectation is the closed form's at any locality."""
    if workload.cache_policy == "static":
        return False
    return bool(workload.cache_auto or workload.cache_bytes > 0 or workload.page_cache)


def with_locality(model: MoEModel, routing: RoutingProbabilities, locality, *, workload=None, seed: int = 0):
    """``routing`` with one stream's locality at ``locality`` — a
    :class:`~moeroof.models.locality.Locality` (its centre) or ``(rho, c_per_expert, source)`` —
    or ``routing`` itself when ``locality`` is None, the routing is a trace (its own correlations
    stay) or ``workload``'s step does not depend on the locality (:func:`cache_sees_locality`)."""
    if locality is None or routing.trace is not None:
        return routing
    if workload is not None and not cache_sees_locality(workload):
        return routing
    if isinstance(locality, tuple):
        rho, c_per_expert, source = locality
    else:
        (rho, c_per_expert), source = locality.centre_for(model.experts, model.top_k), locality.label
    return LocalRouting(model, routing, float(rho), float(c_per_expert) * model.experts, str(source), int(seed))


def locality_band(
    model: MoEModel, hardware, workload, routing: RoutingProbabilities, batch, locality, *, seed: int = 0
):
    """Net tok/s and cache hit rate at each batch size with one stream's locality at the prior's
    two ends — its least local (ρ at the 5 % quantile, the hot set ``h`` at the 95 %) and most
    local (ρ at 95 %, ``h`` at 5 %): :meth:`~moeroof.models.locality.Locality.paired`, the pairing
    its draws follow — beside the centre :func:`with_locality` gives: the spread a zero-fit
    ``plan`` cannot narrow. None where :func:`with_locality` adds no locality (no prior, a trace
    routing, a step that does not see it). Each end runs :func:`moeroof.models.plan.plan` on its
    own traces (the same seed), so the band costs two more plans."""
    from moeroof.models.plan import plan

    if locality is None or routing.trace is not None or not cache_sees_locality(workload):
        return None
    rho, h = locality.paired([0.05, 0.95])
    _, c_e = locality.paired_for([0.05, 0.95], model.experts, model.top_k)
    ends = []
    for i, name in enumerate(("least local", "most local")):
        end = (float(rho[i]), float(c_e[i]), f"{locality.label}, its {name} end")
        res = plan(model, hardware, workload, with_locality(model, routing, end, seed=seed), batch)
        ends.append(_end(name, res, rho=float(rho[i]), hot_set=float(h[i]), c_per_expert=float(c_e[i])))
    summary = _ends_summary(ends, res)
    least, most = ends

    def said(e) -> str:
        c = "off for this model" if math.isinf(e["c_per_expert"]) else f"c = {e['c_per_expert']:.3g}·E"
        return f"ρ {e['rho']:.2g} with a hot set of {e['hot_set']:.2g}·K experts, {c}"

    note = (
        f"one stream's locality over the 5–95 % range of the {locality.label}, from its least local end "
        f"({said(least)}) to its most local ({said(most)}): {summary.pop('rows')}"
    )
    return {"note": note, "ends": ends, **summary, "label": locality.label}


def _end(name: str, res, **where: float) -> dict:
    """One end of a band: its name, where it is, and its plan ``res``'s rates."""
    rates = {"net_tok_s": np.asarray(res.net_tok_s, dtype=float)}
    rates["cache_hit_rate"] = np.asarray(res.cache_hit_rate, dtype=float)  # pooled over ranks
    return {"end": name, **where, **rates}


def _ends_summary(ends: list[dict], res) -> dict:
    """The low and high net tok/s and hit rate over a prior's ends (``ends``' arrays, the last
    plan ``res`` for the batches and what fits), None where a batch does not fit in RAM (as
    plan's own rates), and ``rows``: each fitting batch's ranges in words."""
    fits = np.asarray(res.fits_in_memory, dtype=bool)
    net = np.array([e["net_tok_s"] for e in ends])
    hit = np.array([e["cache_hit_rate"] for e in ends])
    for e in ends:
        for key in ("net_tok_s", "cache_hit_rate"):
            e[key] = [float(v) if ok else None for v, ok in zip(e[key], fits)]

    def over(a: np.ndarray, pick) -> list[float | None]:
        return [float(pick(a[:, i])) if ok else None for i, ok in enumerate(fits)]

    rows = [
        f"B = {b}: hit {100 * hit[:, i].min():.3g}–{100 * hit[:, i].max():.3g} %, "
        f"net tok/s {net[:, i].min():.4g}–{net[:, i].max():.4g}"
        for i, b in enumerate(np.asarray(res.batch).tolist())
        if fits[i]
    ]
    return {
        "net_tok_s_low": over(net, np.min),
        "net_tok_s_high": over(net, np.max),
        "cache_hit_rate_low": over(hit, np.min),
        "cache_hit_rate_high": over(hit, np.max),
        "rows": "; ".join(rows) if rows else "no batch fits in RAM",
    }


def over_prior_ends(centre: float | None, bands, key: str, i: int) -> tuple[float, float] | None:
    """(low, high) of ``key`` (``net_tok_s`` or ``cache_hit_rate``) at batch index ``i`` over the
    ``bands`` (:func:`skew_band`, :func:`locality_band` results; None entries skipped: each prior
    at its two ends, the other at its centre) and the ``centre``; None where no band has a value
    there or the centre is None (the step does not fit in RAM)."""
    ends = [v for band in bands if band for v in (band[f"{key}_low"][i], band[f"{key}_high"][i]) if v is not None]
    if centre is None or not ends:
        return None
    return float(min(centre, *ends)), float(max(centre, *ends))


def skew_band(
    model: MoEModel, hardware, workload, routing: RoutingProbabilities, batch, locality=None, *, seed: int = 0
):
    """Net tok/s and cache hit rate at each batch size with the routing skew at the skew prior's
    two ends — its most skewed (α at the 5 % quantile) and least skewed (95 %) — beside the centre
    ``routing`` gives, one stream's locality (``locality``, as :func:`with_locality`) at its
    centre: the spread a zero-fit answer cannot narrow. None unless ``routing`` is the skew
    prior's (:func:`moeroof.models.plan.prior_routing`). Each end runs
    :func:`moeroof.models.plan.plan` on its own routing (the same seeds): two more plans."""
    from moeroof.models.plan import dirichlet_routing, plan, skew_prior_of

    prior = skew_prior_of(routing)
    if prior is None:
        return None
    ends = []
    for alpha, name in zip(prior.alpha_range, ("most skewed", "least skewed")):
        end = dirichlet_routing(model, alpha, f"Dirichlet α={alpha:.2g}")
        res = plan(model, hardware, workload, with_locality(model, end, locality, workload=workload, seed=seed), batch)
        ends.append(_end(name, res, alpha=float(alpha)))
    summary = _ends_summary(ends, res)
    note = (
        f"routing skew over the {prior.range_name} range of the {prior.label()}, from its most skewed end (α "
        f"{prior.alpha_range[0]:.2g}) to its least (α {prior.alpha_range[1]:.2g}), one stream's locality at its centre: "
        f"{summary.pop('rows')}"
    )
    return {"note": note, "ends": ends, **summary, "label": prior.label()}


LOCALITY_CHOICES = ("prior", "independent")


def locality_parameter(value: str, name: str = "locality", *, model: MoEModel | None = None):
    """A report's ``locality`` parameter: ``prior`` — the committed locality prior
    (:meth:`moeroof.models.locality.Locality.committed`; for ``model``, where given,
    :meth:`~moeroof.models.locality.Locality.committed_for`: centred where its published single
    streams lie) — or ``independent`` (None: tokens independent of one another)."""
    from moeroof.models.locality import Locality

    v = str(value).strip().lower()
    if v not in LOCALITY_CHOICES:
        raise ParameterError(name, f"expected one of {', '.join(LOCALITY_CHOICES)}, got {value!r}")
    if v != "prior":
        return None
    return Locality.committed() if model is None else Locality.committed_for(model)
