"""A prior for per-stream temporal locality, fitted on real decode captures.

Calibrated only on a batch's rows (seed 003's pair at M = 8) or on nothing, the routing model
cannot tell how local one stream is: stickiness ρ (a stream's token keeps an expert of its
previous token) and per-stream hot sets (locality ``c``: each stream routes by its own
``q ~ Dirichlet(c·w)`` around the layer's popularity w) leave a batch's cache nearly unchanged
and decide a single stream's; held at 0 and off, they give one stream none of the locality real
decode shows (docs/sources.md: 42.7 % of a Qwen3 token's experts are its previous token's, against
6.25 % for independent tokens). This module fits those two knobs on every real decode
source the suite can read and pools the fits into a distribution, so that a prediction that
cannot identify them draws them from what real decode does, and their spread widens its band.

**Sources** (:data:`SOURCES`): each gives single-stream rows (``overlap`` at M = 1 and LRU hit
rates of one stream at several per-layer capacities) and, where it has several streams, the same
rows at larger batches (which tell ρ from ``c``: :func:`moeroof.fit.routing.identifiable`):

- ``mixtral``: the Mixtral 8x7B capture (4 sequences, 32 layers, top-2 of 8), replayed
  (:func:`moeroof.studies.knob_transfer.measured_points`);
- ``qwen15``: the Qwen1.5-MoE layer-0 capture (a real vLLM batch of 25, top-4 of 60; a row's
  identity across steps is approximate, so its locality is a lower bound);
- ``qwen3-moe-trace``: the published single-stream table (docs/sources.md; Qwen3-30B-A3B, MLX
  4-bit, 25 prompts: 42.7 % consecutive overlap; LRU 8/16/32/64 experts per layer → 42.4 /
  64.7 / 81.0 / 91.8 %; gajsanders/moe-trace finding 007), numbers only.

The captures are read from ``../shared/data/external`` (never copied: no license); a source
whose files are absent is skipped and said so.

**Per-source fit** (:func:`fit_source`): :func:`moeroof.fit.routing.fit_routing` on every
row of the source — its family, skew, ρ, history and, where the rows identify it, ``c`` — with
its refit parametric bootstrap; the chosen family's draws are the source's knob distribution.
Locality is carried as the hot set's size in a token's picks, ``h = W/K`` with
``W = (c + 1)/(c/E + 1)`` the experts a stream spreads over (:mod:`moeroof.models.locality`),
which transfers between models of different E and K; ``c = ∞`` (off) is ``h = E/K``, and a model
whose ``hK`` reaches its E is off.

**The prior** (:class:`LocalityPrior`, :func:`pool`): a random-effects pool of the sources'
fits, each source one mean however many draws it has; its centre is the point a zero-fit
default uses and its 5–95 % spread goes into the bands.

**Leave one capture out** (:func:`study`): for each source, the prior of the *other*
sources predicts its rows — with the source's popularity from its routing histogram (what a user
has: the pooled expert frequencies, not the cache) and ρ, ``c`` drawn from the prior — against
the same rows with locality off (ρ = 0, ``c`` = ∞: the suite's zero-fit default before the
prior). Errors and coverage are shown whatever they are; no held-out row is used to fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from moeroof.core.results import Result
from moeroof.core.rng import generator
from moeroof.core.stats import Interval, cluster_share_interval, percentile_interval
from moeroof.data.points import Point, measurement_sigma, noise
from moeroof.fit import routing as fit_routing
from moeroof.fit.routing import RoutingKnobs
from moeroof.models.locality import Locality, c_per_expert_from_hot_set, hot_set_from_c, to_scale
from moeroof.studies.knob_transfer import CAPTURES, measured_points
from moeroof.studies.measured import Measured

__all__ = [
    "SOURCES",
    "PRIOR_DRAWS",
    "SINGLE_SOURCE_BETWEEN_SCALE",
    "summary_record",
    "CoverageCheck",
    "coverage_check",
    "SourceRows",
    "SourceFit",
    "LocalityPrior",
    "PriorRow",
    "source_rows",
    "language_counts",
    "Sim",
    "fit_source",
    "pool",
    "predict_rows",
    "stream_check",
    "LocalityStudy",
    "study",
    "popularity_knobs",
]

#: the 5–95 % band of every prior prediction
LEVEL = (0.05, 0.95)
#: measurement-noise draws per (prior draw, seed) in a held-out row's band (:func:`predict_rows`)
BAND_NOISE_DRAWS = 32

#: the real decode sources (module docstring): a capture (``trace``: a path under the external
#: folder, and its replay's batches and per-layer capacities, as
#: :data:`moeroof.studies.knob_transfer.CAPTURES` replays it) or a published table (``rows``)
SOURCES: dict[str, dict[str, Any]] = {
    "mixtral": {
        **CAPTURES["mixtral"],
        "title": "Mixtral 8x7B decode (4 sequences, 32 layers, top-2 of 8)",
        "provenance": "mixtral8x7b-instruct-fp8-vllm-traces (../shared/data/external), replayed",
    },
    "qwen15": {
        **CAPTURES["qwen15"],
        "provenance": "qwen15moe-a27b-gptq-vllm-layer0 (../shared/data/external), replayed",
    },
    "qwen3-moe-trace": {
        "title": "Qwen3-30B-A3B decode, one stream (MLX 4-bit, 25 prompts)",
        "provenance": "gajsanders/moe-trace finding 007 (a hobby project), published numbers (docs/sources.md)",
        "experts": 128,
        "top_k": 8,
        "layers": 48,
        "rows": (
            ("overlap", None, 0.427),
            ("hit_rate", 8, 0.424),
            ("hit_rate", 16, 0.647),
            ("hit_rate", 32, 0.810),
            ("hit_rate", 64, 0.918),
        ),
        # the model's pooled popularity, from another capture of the same model (prefill, GSM8K)
        "histogram": "qwen3-30b-a3b-expert-freq-en-he/gsm_en_he_500_20250921_115824_avg_activation.csv",
        "histogram_tokens": 94200,
    },
}


@dataclass(frozen=True)
class SourceRows:
    """One source's measured rows and the shape of its model; ``counts`` (L, E) its routing
    histogram (the popularity a user would have), or None."""

    name: str
    title: str
    provenance: str
    experts: int
    top_k: int
    layers: int
    points: tuple[Point, ...]
    counts: np.ndarray | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Sim:
    """The simulation settings :func:`study` passes to every fit and prediction (keywords of
    :func:`moeroof.fit.routing.fit_routing` and :func:`~moeroof.fit.routing.simulate_points`)."""

    seeds: Sequence[int] = (0, 1)
    timed_steps: int = 16
    max_sim_layers: int = 8


def _measured(p: Point) -> float:
    """A source row's value: every row of a source is measured."""
    if p.value is None:
        raise ValueError(f"{p.label()}: a source row without a measured value")
    return float(p.value)


def _published_rows(spec: dict[str, Any]) -> tuple[Point, ...]:
    return tuple(
        Point(kind="overlap", batch=1, value=float(value)) if kind == "overlap"
        else Point("hit_rate", 1, capacity_experts=float(cap), policy="lru", scope="layer", value=float(value))
        for kind, cap, value in spec["rows"]
    )  # fmt: skip


def source_rows(name: str, external_dir: str | Path | None = None) -> SourceRows:
    """The rows of one of :data:`SOURCES`; ``FileNotFoundError`` when its capture is absent."""
    from moeroof.core.paths import EXTERNAL_DIR
    from moeroof.data.io import read_trace
    from moeroof.models.routing import histogram_from_trace

    if name not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {name!r}")
    spec = SOURCES[name]
    root = Path(external_dir or EXTERNAL_DIR)
    if "trace" in spec:
        path = root / spec["trace"]
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: source {name!r} is absent (the external data folder is not in this clone)"
            )
        trace = read_trace(path)
        topk = np.asarray(trace.topk)
        points = measured_points(topk, int(trace.experts), batches=spec["batches"], capacities=spec["capacities"])
        counts: np.ndarray | None = histogram_from_trace(topk, int(trace.experts))
        shape = (int(trace.experts), int(topk.shape[3]), int(topk.shape[2]))
        return SourceRows(name, spec["title"], spec["provenance"], *shape, tuple(points), counts)
    hist_path = root / spec["histogram"]
    top_k, tokens = int(spec["top_k"]), int(spec["histogram_tokens"])
    counts = language_counts(hist_path, "English", top_k, tokens) if hist_path.is_file() else None
    shape = (int(spec["experts"]), int(spec["top_k"]), int(spec["layers"]))
    return SourceRows(name, spec["title"], spec["provenance"], *shape, _published_rows(spec), counts)


def language_counts(path: Path, language: str, top_k: int, tokens: int) -> np.ndarray:
    """Per-layer counts (L, E) of one language's rows of a Qwen3 expert-frequency capture
    (``Layer``, ``Expert_*`` and ``Language`` columns; :func:`moeroof.data.importers.import_matrix`)."""
    from moeroof.data.importers import import_matrix

    filters = [("Language", language)]
    imported = import_matrix(
        path, layer_col="Layer", expert_prefix="Expert_", filters=filters, top_k=top_k, tokens=tokens
    )
    return np.asarray(imported.counts)


@dataclass(frozen=True)
class SourceFit(Result):
    """One source's knobs: the chosen family's fit and its draws as ``(rho, c_per_expert)``
    (``inf``: locality off); ``held`` the knobs its rows could not identify, and why."""

    name: str
    family: str
    knobs: RoutingKnobs
    rho_draws: tuple[float, ...]
    c_per_expert_draws: tuple[float, ...]
    held: dict[str, str]
    experts: int
    top_k: int

    @property
    def hot_set_draws(self) -> np.ndarray:
        """The draws' hot sets in a token's picks, ``h = W/K`` (:mod:`moeroof.models.locality`)."""
        c = np.asarray(self.c_per_expert_draws, dtype=float) * self.experts
        return hot_set_from_c(c, self.experts, self.top_k)


def fit_source(
    rows: SourceRows,
    *,
    sim: Sim = Sim(),
    bootstrap: int = 8,
    progress: Callable[[int, int, str], None] | None = None,
    popularity: RoutingKnobs | None = None,
) -> SourceFit:
    """:func:`moeroof.fit.routing.fit_routing` on every row of one source, its popularity
    held at its routing histogram's (``popularity``, default :func:`popularity_knobs`: the
    locality is what the cache rows show beyond the pooled popularity); the chosen family's
    bootstrap draws become the source's distribution."""
    fit = fit_routing.fit_routing(
        list(rows.points),
        rows.experts,
        rows.top_k,
        rows.layers,
        bootstrap=bootstrap,
        progress=progress,
        popularity=popularity if popularity is not None else popularity_knobs(rows),
        **asdict(sim),
    )
    chosen = next(f for f in fit.family_fits if f.family == fit.family)
    draws = chosen.draws or (chosen.knobs,)
    rho, c_e = tuple(float(d.rho) for d in draws), tuple(float(d.c) / float(rows.experts) for d in draws)
    return SourceFit(rows.name, chosen.family, chosen.knobs, rho, c_e, dict(fit.held), rows.experts, rows.top_k)


#: the between-source scale a prior of ONE source cannot estimate, on (logit ρ, log h): held at
#: the spread of stickiness across the layers of one model, as published for Qwen3-30B-A3B's decode
#: (docs/sources.md, gajsanders/moe-trace: 7.9 % of a token's experts kept at layer 0 and 59.7 % at
#: layer 7 against 6.25 % for independent tokens, ρ ≈ 0.018 and 0.57: 4.3 apart on the logit scale,
#: taken as the 5 % and 95 % ends, 4.3 / (2 · 1.645) = 1.3); the same on log h, assumed
SINGLE_SOURCE_BETWEEN_SCALE = (1.3, 1.3)
#: draws of the prior's predictive distribution (deterministic quantiles: no Monte Carlo noise)
PRIOR_DRAWS = 32


@dataclass(frozen=True)
class LocalityPrior(Result):
    """The locality prior (module docstring): on the scales ``logit ρ`` and ``log h``, the
    sources' mean ``mean``, the predictive spread ``scale`` and its degrees of freedom ``dof``
    (Student's t; 0: one source, normal with its own bootstrap spread), the pooled draws (ρ and
    the hot set ``h`` in a token's picks) and where they came from."""

    sources: tuple[str, ...]
    mean: tuple[float, float]
    scale: tuple[float, float]
    dof: int
    rho: tuple[float, ...]
    hot_set: tuple[float, ...]
    provenance: str

    @property
    def median(self) -> tuple[float, float]:
        """``(rho, hot_set)`` at the prior's centre: the point a zero-fit default uses."""
        return self.locality.centre

    @property
    def locality(self) -> Locality:
        """The prior as a :class:`moeroof.models.locality.Locality` (what predictions draw from)."""
        return Locality(self.mean, self.scale, self.dof, f"locality prior fitted on {', '.join(self.sources)}")

    def quantiles(self, q: Sequence[float] = (0.05, 0.5, 0.95)) -> dict[str, list[float]]:
        """ρ and ``h`` at the quantiles ``q`` of the predictive distribution."""
        rho, h = self.locality.quantiles(q)
        return {"rho": [float(v) for v in rho], "hot_set": [float(v) for v in h]}

    def knobs(self, base: RoutingKnobs, experts: int, top_k: int) -> list[RoutingKnobs]:
        """``base`` (its family, skew and history) with each of the prior's draws of ρ and ``c``
        (the draw's hot set for a model of ``experts``, top-``top_k``)."""
        c_e = c_per_expert_from_hot_set(np.asarray(self.hot_set), experts, top_k)
        return [replace(base, rho=float(r), c=float(c) * experts) for r, c in zip(self.rho, c_e)]


def pool(fits: Sequence[SourceFit], *, draws: int = PRIOR_DRAWS) -> LocalityPrior:
    """The prior of the module docstring, a random-effects pool of the sources' fits: on the
    scales ``x = (logit ρ, log h)`` (``h`` the hot set in a token's picks, ``E/K`` where off), each
    source i gives the mean ``x̄_i`` and variance ``v_i`` of its bootstrap draws; over n sources

        m = mean_i x̄_i,   s_b² = var_i x̄_i (n − 1 dof),   scale² = s_b² · (1 + 1/n) + mean_i v_i

    and a new model's knobs are ``m + scale · t_{n−1}`` (Student's t: the between-source spread
    is estimated from n sources, so with two the tails are wide), each knob's draws the t
    quantiles at ``(j + ½)/draws``, paired by locality strength (:meth:`Locality.paired`: ρ's
    quantile ``u`` with ``h``'s ``1 − u``). One source alone cannot estimate how far another model's locality lies
    from it: ``scale² = v_1 + τ₀²`` with τ₀ held at :data:`SINGLE_SOURCE_BETWEEN_SCALE` (a stated
    prior from published per-layer spread), normal, ``dof`` = 0."""
    if not fits:
        raise ValueError("a prior needs at least one source fit")
    per = [to_scale(np.asarray(f.rho_draws), f.hot_set_draws) for f in fits]
    means = np.stack([x.mean(axis=0) for x in per])
    within = np.stack([x.var(axis=0) for x in per]).mean(axis=0)
    n = len(fits)
    m = means.mean(axis=0)
    if n >= 2:
        between = means.var(axis=0, ddof=1)
        scale = np.sqrt(between * (1.0 + 1.0 / n) + within)
        dof = n - 1
    else:
        scale = np.sqrt(within + np.square(SINGLE_SOURCE_BETWEEN_SCALE))
        dof = 0
    loc = Locality((float(m[0]), float(m[1])), (float(scale[0]), float(scale[1])), int(dof))
    pairs = loc.draws(draws)
    rho, h = tuple(float(r) for r, _ in pairs), tuple(float(x) for _, x in pairs)
    names = tuple(f.name for f in fits)
    prov = "; ".join(SOURCES[k]["provenance"] if k in SOURCES else k for k in names)
    return LocalityPrior(names, loc.mean, loc.scale, loc.dof, rho, h, prov)


@dataclass(frozen=True, kw_only=True)
class PriorRow(Measured):
    """One held-out row predicted from a prior: median and 5–95 % band over the prior's draws,
    and the prediction with locality off (ρ = 0, no per-stream locality); ``quantity`` its
    label, ``source`` the held-out source, ``error`` in points as a fraction."""

    error_unit: str = "points"
    axis: str | None = "row"
    kind: str
    locality_off: float

    @property
    def label(self) -> str:
        return self.quantity

    @property
    def error_points(self) -> float:
        """predicted − measured, in points (× 100)."""
        return (self.predicted - cast(float, self.measured)) * 100.0

    @property
    def error_off_points(self) -> float:
        return (self.locality_off - cast(float, self.measured)) * 100.0


def popularity_knobs(rows: SourceRows, *, rng_seed: int = 0) -> RoutingKnobs:
    """The popularity a user has for the source's model: the family and skew that its routing
    histogram fits best (:func:`moeroof.fit.skew.fit_histogram`, pooled, by AIC), locality off.
    Without a histogram: Zipf s = 0.8, the suite's default."""
    from moeroof.fit.skew import fit_histogram

    if rows.counts is None:
        return RoutingKnobs(family="zipf", skew=0.8)
    rng = np.random.default_rng(rng_seed)
    fit = fit_histogram(rows.counts, rows.top_k, rng=rng, bootstrap=0, gof_sims=0, models=("zipf", "dirichlet"))
    family = fit.chosen if fit.chosen in ("zipf", "dirichlet") else "zipf"
    params = fit.pooled[family].params
    skew = float(params["s"] if family == "zipf" else params["alpha"])
    return RoutingKnobs(family=family, skew=skew)


def predict_rows(
    prior: LocalityPrior,
    rows: SourceRows,
    base: RoutingKnobs,
    *,
    sim: Sim = Sim(),
) -> list[PriorRow]:
    """Every row of ``rows`` simulated at ``base`` with each of the prior's draws (module
    docstring): the median over draws (each the mean over ``seeds``), the 5–95 % band of a new
    measurement, and ``base`` with locality off. The band takes the prior's draws, each seed's
    simulation alone (the prediction's own Monte Carlo noise) and a measurement noise of the
    POINTS tolerance (:func:`moeroof.data.points.noise`: 3 points on a hit rate, 5 on an overlap),
    :data:`BAND_NOISE_DRAWS` normal draws each from a fixed seed: where a locality the prior
    cannot move (a first layer alone) leaves no spread of draws, the band is still where a
    measurement would fall."""
    pts = [Point(**{**p.__dict__, "value": None}) for p in rows.points]
    kw = asdict(sim)
    per_seed = np.stack(
        [
            fit_routing.simulate_points(k, pts, rows.experts, rows.top_k, rows.layers, **kw)
            for k in prior.knobs(base, rows.experts, rows.top_k)
        ]
    )  # (draws, seeds, rows)
    sims = per_seed.mean(axis=1)
    tau = np.array([noise(p.kind, _measured(p)) for p in rows.points])
    rng = np.random.default_rng(20261206)
    noisy = per_seed[:, :, None, :] + rng.normal(0.0, 1.0, (*per_seed.shape[:2], BAND_NOISE_DRAWS, len(pts))) * tau
    noisy = noisy.reshape(-1, len(pts))
    shares = np.array([p.kind in ("hit_rate", "overlap") for p in rows.points])
    noisy[:, shares] = np.clip(noisy[:, shares], 0.0, 1.0)  # a hit rate or an overlap is a share
    off = _locality_off(base, rows, pts, **kw)
    mid = np.quantile(sims, 0.5, axis=0)
    band = percentile_interval(noisy, LEVEL, resampling="prior draws x seeds x noise")
    out: list[PriorRow] = []
    for p, m, a, b, o in zip(rows.points, mid, band.low, band.high, off):
        pred = float(m), float(a), float(b)
        out.append(PriorRow(p.label(), None, _measured(p), *pred, source=rows.name, kind=p.kind, locality_off=float(o)))
    return out


def _locality_off(base: RoutingKnobs, rows: SourceRows, pts: list[Point], **kw) -> np.ndarray:
    """``pts`` of ``rows``' model simulated at ``base`` with locality off (ρ = 0, ``c`` = ∞), the mean over seeds."""
    off = replace(base, rho=0.0, c=math.inf)
    return fit_routing.simulate_points(off, pts, rows.experts, rows.top_k, rows.layers, **kw).mean(axis=0)


def stream_check(rows: SourceRows, base: RoutingKnobs, *, seeds: Sequence[int] = (0, 1)) -> tuple[bool, str]:
    """Whether a source's single-stream rows are one stream's tokens: its measured consecutive
    overlap is at least what independent tokens give at its popularity (``base`` with locality
    off). A lower overlap means the rows' identity across steps is not a stream's (a batch slot
    that changes hands), so the source measures no locality and does not enter the prior."""
    pts = [p for p in rows.points if p.kind == "overlap" and p.batch == 1]
    if not pts:
        return True, "no overlap row: kept"
    off = float(_locality_off(base, rows, [Point(**{**pts[0].__dict__, "value": None})], seeds=seeds)[0])
    measured = _measured(pts[0])
    if measured + 1e-9 < off:
        return False, (
            f"its consecutive overlap {measured:.3f} is below the {off:.3f} of independent tokens at its popularity: "
            "its rows are not one stream's tokens"
        )
    return True, f"consecutive overlap {measured:.3f} against {off:.3f} for independent tokens"


@dataclass(frozen=True)
class LocalityStudy(Result):
    """The prior fitted on every available source, each source's knobs and why it is (not) in
    the prior, and the leave-one-capture-out rows (module docstring)."""

    prior: LocalityPrior
    fits: tuple[SourceFit, ...]
    in_prior: dict[str, str]
    left_out: dict[str, str]
    rows: tuple[PriorRow, ...]
    skipped: dict[str, str]
    settings: dict[str, Any]

    def summary(self) -> list[dict[str, Any]]:
        """Per held-out source: mean |error| in points with the prior and with locality off, and
        the share of its rows inside the prior's 5–95 % band (hit-rate and overlap rows)."""
        out = []
        for name in dict.fromkeys(r.source for r in self.rows):
            rs = [r for r in self.rows if r.source == name and r.kind in ("hit_rate", "overlap")]
            out.append(
                {
                    "source": name,
                    "rows": len(rs),
                    "mean_abs_error_points": float(np.mean([abs(r.error_points) for r in rs])),
                    "mean_abs_error_off_points": float(np.mean([abs(r.error_off_points) for r in rs])),
                    "inside_band": float(np.mean([r.inside for r in rs])),
                }
            )
        return out


def study(
    external_dir: str | Path | None = None,
    *,
    sources: Sequence[str] = tuple(SOURCES),
    seeds: Sequence[int] = (0, 1),
    bootstrap: int = 8,
    timed_steps: int = 16,
    max_sim_layers: int = 8,
    progress: Callable[[int, int, str], None] | None = None,
) -> LocalityStudy:
    """Fit every available source, pool those whose rows are a stream's (:func:`stream_check`)
    into the prior, and predict each source from the prior of the *other* pooled sources (a
    source left out of the prior is predicted from all of it; a source with no other pooled
    source is not predicted, and ``skipped`` says so)."""
    sim = Sim(seeds, timed_steps, max_sim_layers)
    available: list[SourceRows] = []
    skipped: dict[str, str] = {}
    for name in sources:
        try:
            available.append(source_rows(name, external_dir))
        except FileNotFoundError as err:
            skipped[name] = str(err)
    if not available:
        raise FileNotFoundError("no locality source is present: " + "; ".join(skipped.values()))
    fits: list[SourceFit] = []
    in_prior: dict[str, str] = {}
    left_out: dict[str, str] = {}
    # each source's popularity, fitted once to its histogram: the stream check, its fit and its
    # held-out prediction all run at it
    bases = {rows.name: popularity_knobs(rows) for rows in available}
    for i, rows in enumerate(available):
        if progress is not None:
            progress(i, len(available) + 1, f"fit {rows.name}")
        ok, why = stream_check(rows, bases[rows.name], seeds=seeds)
        (in_prior if ok else left_out)[rows.name] = why
        fits.append(fit_source(rows, sim=sim, bootstrap=bootstrap, popularity=bases[rows.name]))
    pooled = [f for f in fits if f.name in in_prior]
    if not pooled:
        raise ValueError("no source's rows are one stream's tokens: " + "; ".join(left_out.values()))
    if progress is not None:
        progress(len(available), len(available) + 1, "leave one capture out")
    rows_out: list[PriorRow] = []
    for rows in available:
        others = [f for f in pooled if f.name != rows.name]
        if not others:  # predicted from itself would be no prediction
            skipped[f"{rows.name} (held out)"] = "no other source in the prior to predict it from"
            continue
        rows_out += predict_rows(pool(others), rows, bases[rows.name], sim=sim)
    kw = {k: v for k, v in asdict(sim).items() if k != "seeds"}
    settings = {"seeds": list(seeds), "bootstrap": int(bootstrap), **kw}
    return LocalityStudy(pool(pooled), tuple(fits), in_prior, left_out, tuple(rows_out), skipped, settings)


def summary_record(st: LocalityStudy) -> dict[str, Any]:
    """What ``data/fits/locality-prior.json`` holds (:mod:`moeroof.data.locality`): the prior's
    centre, scale and quantiles, each source's fitted summary and why it is (not) in the prior,
    the held-out errors and the settings — summary figures only (the captures' rows stay in
    ../shared/data/external). Written by ``scripts/fit_locality_prior.py``."""
    rho_mid, h_mid = st.prior.median
    q = st.prior.quantiles((0.05, 0.5, 0.95))
    return {
        "what": (
            "locality prior: stickiness rho and the per-stream hot set (hot_set: its size in a token's picks, "
            "h = W/K, W = (c + 1)/(c/E + 1)) of real decode (moeroof.studies.locality_prior)"
        ),
        "rho": rho_mid,
        "hot_set": h_mid,
        "quantiles": {"q": [0.05, 0.5, 0.95], **q},
        "scale": {"logit_rho": st.prior.scale[0], "log_hot_set": st.prior.scale[1], "dof": st.prior.dof},
        "sources": list(st.prior.sources),
        "provenance": st.prior.provenance,
        "fits": {
            f.name: {
                "family": f.family,
                "skew": float(f.knobs.skew),
                "rho_mean": float(np.mean(f.rho_draws)),
                "c_per_expert_median": float(np.median(f.c_per_expert_draws)),
                "hot_set_median": float(np.median(f.hot_set_draws)),
                "in_prior": f.name in st.in_prior,
                "why": st.in_prior.get(f.name) or st.left_out.get(f.name, ""),
            }
            for f in st.fits
        },
        "held_out": st.summary(),
        "skipped": dict(st.skipped),
        "settings": dict(st.settings),
    }


@dataclass(frozen=True)
class CoverageCheck(Result):
    """Held-out coverage of fit-routing's bands with the locality prior, on simulated truths
    drawn from the prior itself: per truth, its knobs and whether each one-stream row fell
    inside its 5–95 % band (with the prior, and with locality held off)."""

    truths: tuple[dict[str, Any], ...]
    inside_with_prior: float
    inside_without: float
    rows: int
    #: the calibration rows' (batch, per-layer capacity)
    calibration: tuple[tuple[int, float], ...] = ()

    def interval(self) -> Interval:
        """The share inside with the prior, with its 5–95 % interval over the truths resampled
        (:func:`moeroof.core.stats.cluster_share_interval`: a truth's rows share its knobs)."""
        return cluster_share_interval([t["with_prior"] for t in self.truths])


def coverage_check(
    prior: Locality,
    *,
    truths: int = 8,
    experts: int = 64,
    top_k: int = 4,
    layers: int = 4,
    skew: float = 0.8,
    calibration: Sequence[tuple[int, float]] = ((8, 8.0), (8, 16.0)),
    held_out: Sequence[tuple[int, float]] = ((1, 4.0), (1, 8.0), (1, 16.0)),
    seeds: Sequence[int] = (0, 1),
    bootstrap: int = 4,
) -> CoverageCheck:
    """Many streams → one stream, on truths the prior says are possible: each truth's ρ and
    ``c/E`` are one of ``truths`` draws of ``prior`` (:meth:`Locality.draws_for`; Zipf ``skew``, a
    warm history), its rows measured by simulation at seeds no fit uses; ``fit_routing`` on the
    ``calibration`` rows (batch, per-layer LRU capacity) with the prior and without it predicts
    the ``held_out`` rows, each truth a new measurement (its simulated rate with one measurement's
    noise, :func:`moeroof.data.points.measurement_sigma`, as the band is a new measurement's).
    Coverage near the nominal 90 % says the bands carry the prior's spread; the structural choices
    (family, lookup) are held at the truth's."""
    probe = [
        Point(kind="hit_rate", batch=int(m), capacity_experts=float(c), policy="lru", scope="layer", value=None)
        for m, c in (*calibration, *held_out)
    ]
    n_cal = len(calibration)
    out = []
    hits_on = hits_off = total = 0
    for j, (rho, c_e) in enumerate(prior.draws_for(int(truths), experts, top_k)):
        truth = RoutingKnobs(family="zipf", skew=float(skew), rho=float(rho), c=c_e * experts, history_tokens=64)
        measured = fit_routing.simulate_points(
            truth, probe, experts, top_k, layers, seeds=[9_000 + 2 * j, 9_001 + 2 * j]
        ).mean(axis=0)
        pts = [
            Point(**{**p.__dict__, "value": float(v) if i < n_cal else None})
            for i, (p, v) in enumerate(zip(probe, measured))
        ]
        # a held-out row's truth is a new measurement, as the band is a new measurement's: the simulated
        # rate with one measurement's noise (data.points.measurement_sigma), drawn from a stream of its own
        shift = generator("locality-coverage-held-out", j).normal(0.0, 1.0, len(pts))
        remeasured = [
            float(np.clip(v + shift[i] * measurement_sigma(p.kind, v), 0.0, 1.0))
            for i, (p, v) in enumerate(zip(probe, measured))
        ]
        inside = {}
        for name, loc in (("with_prior", prior), ("without", None)):
            f = fit_routing.fit_routing(pts, experts, top_k, layers, seeds=seeds, bootstrap=bootstrap, locality=loc)
            inside[name] = [
                bool(f.rows[i]["low"] <= remeasured[i] <= f.rows[i]["high"]) for i in range(n_cal, len(pts))
            ]
        hits_on += sum(inside["with_prior"])
        hits_off += sum(inside["without"])
        total += len(held_out)
        out.append({"rho": float(rho), "c_per_expert": float(c_e), **inside})
    cal = tuple((int(m), float(c)) for m, c in calibration)
    return CoverageCheck(tuple(out), hits_on / total, hits_off / total, total, cal)
