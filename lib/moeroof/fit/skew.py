"""Fit routing-skew and correlation models to captured data (docs/models.md, fitting).

Two families of fits.

**Histogram fits** (per layer and pooled) of incidence counts ``Y`` with shape (L, E): each routed
token adds 1 to each of its K experts, so a layer holds ``N = Σ_i Y_i = K·T`` picks. The picks
are treated as a multinomial with probabilities ``π_i / K`` (``π_i`` the inclusion probability,
Σ π = K), which ignores that one token's K picks are distinct (tokens are the sampling units of
incidence data, Chao et al. 2014; the multinomial is the usual pick-level approximation):

    log L = log N! − Σ_i log Y_i! + Σ_i Y_i log(π_i / K)

The multinomial coefficient is kept for every model, so log-likelihoods and AIC = 2k − 2 log L
compare across models. Models: ``uniform`` (``π_i = K/E``, k = 0), ``zipf`` (popularity ∝
rank^−s, π from :func:`moeroof.models.routing.inclusion_probabilities`, k = 1) and ``dirichlet``
(popularity ~ Dirichlet(α·1), a Dirichlet-multinomial approximation, k = 1). Goodness of fit is
a parametric bootstrap on the sorted-share curve; parameter intervals are bootstrap percentiles.

**Correlation fits** on a trace (steps, streams, layers, K): the stickiness ρ (consecutive
same-stream overlap) and the heterogeneity concentration c (the cross-agent union at one step
against the independent plug-in ``Σ_i [1 − (1 − π̂_i)^B]``). Both invert a
simulation of :func:`moeroof.models.routing.sample_trace` at a fixed seed.

Every random draw takes an explicit :class:`numpy.random.Generator`; all quantities are counts,
probabilities or pure numbers (no units).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache, partial
from typing import Any, NamedTuple

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.optimize import minimize_scalar
from scipy.special import digamma, gammaln

from moeroof.core.limits import MAX_SKEW_FIT_EXPERTS, check_allocation
from moeroof.core.masks import live_tokens, partial_tokens, trace_counts
from moeroof.core.memo import SourceMemo
from moeroof.core.results import stage_reporter
from moeroof.core.rng import generator
from moeroof.core.stats import (
    Interval,
    basic_interval,
    bootstrap_replicates,
    order_statistic_interval,
    percentile_interval,
)
from moeroof.data.safe_read import checked_blocks
from moeroof.models import routing
from moeroof.models.union import distinct_per_layer, power_sums

__all__ = [
    "check_fit_experts",
    "INVERSION_MEMO",
    "invert_inclusion",
    "MODELS",
    "ModelFit",
    "HistogramFit",
    "CorrelationFit",
    "fit_histogram",
    "popularity_from_inclusion",
    "fit_stickiness",
    "fit_heterogeneity",
    "correlation_gap",
    "fit_correlation",
]

#: histogram models in the order they are reported
MODELS: tuple[str, ...] = ("uniform", "zipf", "dirichlet")

#: bounds of the Zipf exponent search
S_BOUNDS = (0.0, 4.0)
#: bounds of the Dirichlet concentration search (α at the upper bound is indistinguishable
#: from uniform at any realistic N)
ALPHA_BOUNDS = (1e-3, 1e6)


# ---------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class ModelFit:
    """One model fitted to one layer (or pooled over layers).

    ``params``: ``{}`` (uniform), ``{"s": …}`` (zipf) or ``{"alpha": …}`` (dirichlet) — for
    Zipf with a bootstrap, the bias-corrected estimate ``2ŝ − mean(ŝ*)`` (the maximum-likelihood
    ŝ of sorted counts is biased upwards: noise looks like skew); ``ml_params``: the
    maximum-likelihood values themselves (the log-likelihood, AIC and goodness of fit are at
    these); ``ci``: the bootstrap :class:`~moeroof.core.stats.Interval` of each parameter (empty
    when not bootstrapped), which contains ``params``;
    ``gof_statistic``: max |observed − model-mean| sorted share; ``gof_pvalue``: parametric
    bootstrap p-value of that statistic (NaN when no simulations were run).
    """

    model: str
    params: dict[str, float]
    ci: dict[str, Interval]
    log_likelihood: float
    aic: float
    gof_statistic: float
    gof_pvalue: float
    ml_params: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": {k: float(v) for k, v in self.params.items()},
            "ml_params": {k: float(v) for k, v in (self.ml_params or self.params).items()},
            "ci": {k: [float(v.low), float(v.high)] for k, v in self.ci.items()},
            **{key: float(getattr(self, key)) for key in ("log_likelihood", "aic", "gof_statistic", "gof_pvalue")},
        }


@dataclass(frozen=True)
class HistogramFit:
    """Per-layer and pooled fits of a (L, E) incidence histogram; ``chosen`` has the lowest
    pooled AIC."""

    pooled: dict[str, ModelFit]
    per_layer: list[dict[str, ModelFit]]
    chosen: str
    experts: int
    top_k: int
    layers: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able python (floats, lists, str). NaN/inf stay floats (``json`` writes
        them as ``NaN``/``Infinity``)."""
        return {
            "experts": int(self.experts),
            "top_k": int(self.top_k),
            "layers": int(self.layers),
            "chosen": str(self.chosen),
            "models": {name: f.to_dict() for name, f in self.pooled.items()},
            "per_layer": [{name: f.to_dict() for name, f in row.items()} for row in self.per_layer],
        }


@dataclass(frozen=True)
class CorrelationFit:
    """Correlation knobs fitted to a trace (docs/models.md, routing and fitting).

    ``rho``: stickiness; ``c``: heterogeneity concentration (``inf``: none measurable); ``rho_ci``,
    ``c_ci``: their bootstrap :class:`~moeroof.core.stats.Interval` (NaN ends: none);
    ``union_measured`` / ``union_plugin``: mean distinct experts per (step, layer) over cells
    with ≥ 2 live streams, measured and independent plug-in; ``gap = union_plugin −
    union_measured`` (experts per layer per step that independence over-counts: the
    cross-agent correlation).
    """

    rho: float
    rho_ci: Interval
    c: float
    c_ci: Interval
    union_measured: float
    union_plugin: float
    gap: float

    @property
    def union_ratio(self) -> float:
        """measured / plug-in union (1: independent streams)."""
        return self.union_measured / self.union_plugin

    def to_dict(self) -> dict[str, Any]:
        """Every field as floats (an interval as its two ends), then ``union_ratio``."""
        values = {f.name: getattr(self, f.name) for f in fields(self)} | {"union_ratio": self.union_ratio}
        return {k: [float(v.low), float(v.high)] if isinstance(v, Interval) else float(v) for k, v in values.items()}


# ---------------------------------------------------------------------------------------------
# input checks and small helpers


def _check_counts(counts: Any, top_k: int) -> np.ndarray:
    y = np.asarray(counts)
    if y.ndim != 2 or y.shape[0] < 1 or y.shape[1] < 1:
        raise ValueError(f"counts must have shape (layers, experts), got shape {y.shape}")
    if y.dtype.kind not in "iuf" or not np.all(np.isfinite(y)):
        raise ValueError("counts must be finite numbers")
    if np.any(y != np.round(y)):
        raise ValueError("counts must be integers")
    if np.any(y < 0):
        raise ValueError("counts must be non-negative")
    experts = y.shape[1]
    if int(top_k) != top_k or not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be an integer in [1, experts={experts}], got {top_k!r}")
    y = y.astype(np.int64)
    if np.any(y.sum(axis=1) == 0):
        raise ValueError("every layer needs at least one count")
    return y


def _sorted_desc(y: np.ndarray) -> np.ndarray:
    return -np.sort(-y, axis=-1)


# ---------------------------------------------------------------------------------------------
# Zipf: inclusion probabilities in rank order depend only on (E, K, s) — tabulate once


@lru_cache(maxsize=32)
def _zipf_table(experts: int, top_k: int) -> tuple[CubicSpline, np.ndarray, np.ndarray]:
    """Cubic spline of log π_r(s) over s ∈ [0, 4] (41 knots, |error| ≲ 2e-5 in log π for
    E = 256) and the same on a fine grid (step 0.01) for vectorised grid search."""
    knots = np.linspace(*S_BOUNDS, 41)
    spline = CubicSpline(knots, _zipf_log_pi_exact(experts, top_k, knots), axis=0)
    fine = np.linspace(*S_BOUNDS, 401)
    return spline, fine, spline(fine)


def _zipf_log_pi_exact(experts: int, top_k: int, s: np.ndarray) -> np.ndarray:
    """log π (rank order) computed directly (one vectorised call) for each s in ``s``."""
    s = np.atleast_1d(np.asarray(s, dtype=float))
    w = np.stack([routing.zipf_weights(experts, x) for x in s])
    return np.log(np.maximum(routing.inclusion_probabilities(w, top_k), 1e-300))


def _zipf_grid_mle(ysorted: np.ndarray, top_k: int) -> np.ndarray:
    """Zipf MLE of s for each row of ``ysorted`` (..., E): fine-grid argmax of Σ Y_r log π_r(s)
    then the vertex of the parabola through the three grid points around it."""
    _, fine, log_pi = _zipf_table(ysorted.shape[-1], top_k)
    ll = ysorted.astype(float) @ log_pi.T  # (..., G)
    g = np.argmax(ll, axis=-1)
    h = fine[1] - fine[0]
    gi = np.clip(g, 1, fine.size - 2)
    fm, f0, fp = (np.take_along_axis(ll, (gi + d)[..., None], -1)[..., 0] for d in (-1, 0, 1))
    denom = fm - 2.0 * f0 + fp
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = np.where(denom < 0, 0.5 * h * (fm - fp) / denom, 0.0)
    s = fine[gi] + np.clip(delta, -h, h)
    s = np.where((g == 0) | (g == fine.size - 1), fine[g], s)
    return np.clip(s, *S_BOUNDS)


def _thin(y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Binomial thinning ``Y = Y_a + Y_b`` (``Y_a ~ Bin(Y, 1/2)``: two independent multinomial
    halves) and each half's rank of every expert (0 = most counted, ties broken at random)."""
    ya = rng.binomial(y, 0.5)
    yb = y - ya
    # a rank is the inverse permutation of the order: the argsort of the argsort
    ra, rb = (np.argsort(np.argsort(-(half + 0.5 * rng.random(half.shape)), axis=1), axis=1) for half in (ya, yb))
    return ya, yb, ra, rb


def _zipf_crossfit(y: np.ndarray, log_p_rank: np.ndarray, splits: list) -> np.ndarray:
    """Cross-fitted Zipf log-likelihood (without the multinomial coefficient), per layer:
    ``Σ_i Y_b,i log p_{rank_a(i)} + Y_a,i log p_{rank_b(i)}`` — each half is scored with the
    rank order of the other half — averaged over the thinnings in ``splits``. Scored with its own
    (sorted) order, noise looks like skew and gains O(E) nats per layer even on uniform data."""
    out = np.zeros(y.shape[0])
    for ya, yb, ra, rb in splits:
        out += (yb * np.take_along_axis(log_p_rank, ra, axis=1)).sum(axis=1)
        out += (ya * np.take_along_axis(log_p_rank, rb, axis=1)).sum(axis=1)
    return out / len(splits)


def _zipf_polish(ysorted: np.ndarray, top_k: int, s0: float) -> float:
    """Refine one estimate with bounded Brent (scipy ``minimize_scalar``) on the spline."""
    spline, fine, _ = _zipf_table(ysorted.shape[-1], top_k)
    h = fine[1] - fine[0]
    lo, hi = max(S_BOUNDS[0], s0 - h), min(S_BOUNDS[1], s0 + h)
    yf = ysorted.astype(float)
    res = minimize_scalar(lambda s: -float(yf @ spline(s)), bounds=(lo, hi), method="bounded", options={"xatol": 1e-7})
    return float(res.x) if -res.fun >= float(yf @ spline(s0)) else float(s0)


# ---------------------------------------------------------------------------------------------
# Dirichlet-multinomial


def _dm_loglik(y: np.ndarray, alpha: np.ndarray, score: bool = False) -> np.ndarray:
    """Dirichlet-multinomial log-likelihood without the multinomial coefficient, per row:
    ``lnΓ(Eα) − lnΓ(N + Eα) + Σ_i [lnΓ(Y_i + α) − lnΓ(α)]``; ``alpha`` broadcasts against
    ``y[..., 0]``. ``score``: its derivative in α instead (ψ for lnΓ, the first two terms × E)."""
    e = y.shape[-1]
    a = np.asarray(alpha, dtype=float)
    n = y.sum(axis=-1)
    f, c = (digamma, e) if score else (gammaln, 1)
    return c * f(e * a) - c * f(n + e * a) + f(y + a[..., None]).sum(axis=-1) - e * f(a)


def _dirichlet_mle(y: np.ndarray, pooled: bool) -> np.ndarray:
    """α MLE of the Dirichlet-multinomial for y (R, L, E): per (R, L) or, pooled, per R (one α
    shared by the L layers). Coarse grid in log α, then bisection on the score."""
    r, layers, _ = y.shape
    yf = y.astype(float)
    grid = np.linspace(np.log(ALPHA_BOUNDS[0]), np.log(ALPHA_BOUNDS[1]), 46)

    def total(la: Any, score: bool = False) -> np.ndarray:
        """The log-likelihood (or its score) at log α = ``la``, per (R, L) or, pooled, per (R, 1)."""
        v = _dm_loglik(yf, np.broadcast_to(np.exp(la), (r, layers)), score)
        return v.sum(axis=1, keepdims=True) if pooled else v

    g = np.argmax(np.stack([total(la) for la in grid]), axis=0)
    lo, hi = grid[np.maximum(g - 1, 0)], grid[np.minimum(g + 1, grid.size - 1)]
    for _ in range(45):  # bisection: the score is positive below the maximum
        mid = 0.5 * (lo + hi)
        up = total(mid, score=True) > 0
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    la = 0.5 * (lo + hi)
    la = np.where(g == 0, grid[0], np.where(g == grid.size - 1, grid[-1], la))
    alpha = np.exp(la)
    return alpha[:, 0] if pooled else alpha


# ---------------------------------------------------------------------------------------------
# goodness of fit


def _gof(obs_sorted: np.ndarray, sims_sorted: np.ndarray, pooled: bool) -> tuple[Any, Any]:
    """Sorted-share statistic: per layer ``D_l = max_r |ŝ_lr − m̄_lr|`` (arrays (L,)) or, pooled,
    ``max_l D_l``, with ``m̄`` the mean sorted shares of the simulations, and its p-value
    p = (1 + #{D* ≥ D}) / (1 + M); NaN without simulations."""
    m = sims_sorted.shape[0]
    if m == 0:
        return (math.nan, math.nan) if pooled else (np.full(obs_sorted.shape[0], np.nan),) * 2
    mean = sims_sorted.mean(axis=0)
    d_obs = np.abs(obs_sorted - mean).max(axis=-1)  # (L,)
    d_sim = np.abs(sims_sorted - mean).max(axis=-1)  # (M, L)
    if pooled:
        d_obs, d_sim = d_obs.max(), d_sim.max(axis=1)
    return d_obs, (1.0 + (d_sim >= d_obs - 1e-15).sum(axis=0)) / (m + 1.0)


def _model_pick_probs(
    model: str, experts: int, top_k: int, param: np.ndarray, sims: int, rng: np.random.Generator
) -> np.ndarray:
    """(M, L, E) pick probabilities for simulation; ``param`` (L,) per-layer parameters."""
    layers = param.shape[0]
    if model == "uniform":
        return np.full((sims, layers, experts), 1.0 / experts)
    if model == "zipf":
        log_pi = _zipf_log_pi_exact(experts, top_k, param)  # (L, E) rank order
        return np.broadcast_to(np.exp(log_pi) / top_k, (sims, layers, experts))
    conc = np.broadcast_to(param[None, :, None], (sims, layers, experts)).astype(float)
    return np.exp(routing.log_dirichlet(conc, rng))


class _Estimate(NamedTuple):
    """One model's parameter in :func:`fit_histogram`, per layer (L,) and pooled, with the picks N
    of each layer (L,) and ``shape`` (experts E, top_k K): what its simulations are drawn from."""

    model: str
    p_layer: np.ndarray
    p_pool: float
    n: np.ndarray
    shape: tuple[int, int]


def _parametric_replicates(est: _Estimate, bootstrap: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The refits of :func:`fit_histogram`'s parametric bootstrap: per layer (R, L) and pooled
    (R,), each from one batch of R histograms drawn at the fitted parameters (per layer at p_l;
    pooled: every layer at the pooled one) — Zipf: picks ``Multinomial(N, π(ŝ)/K)``, sorted and
    refitted; Dirichlet: ``w* ~ Dirichlet(α̂)``, picks ``Multinomial(N, w*)``. Drawn from ``rng``
    in this order: the per-layer batch, then the pooled one."""
    model, p_layer, p_pool, n, (experts, k) = est
    layers = len(n)

    def draw(r: int, at: Any) -> np.ndarray:
        """R histograms at the pick probabilities ``at`` (Zipf) or the concentration ``at`` (Dirichlet)."""
        if model != "zipf":
            at = np.exp(routing.log_dirichlet(np.broadcast_to(at, (r, layers, experts)).astype(float), rng))
        return rng.multinomial(np.broadcast_to(n, (r, layers)), np.broadcast_to(at, (r, layers, experts)))

    if model == "zipf":
        # parametric: picks simulated at the fitted exponents, sorted and refitted
        q = np.exp(_zipf_log_pi_exact(experts, k, np.append(p_layer, p_pool)))
        q = q / q.sum(axis=1, keepdims=True)
        cases: list[tuple[Any, Callable[[np.ndarray], np.ndarray]]] = [
            (q[:layers], lambda y: _zipf_grid_mle(_sorted_desc(y), k)),
            (q[layers], lambda y: _zipf_refit(_sorted_desc(y).sum(axis=1), k)),
        ]
    else:
        cases = [
            (p_layer[:, None], lambda y: _dirichlet_mle(y, pooled=False)),
            (p_pool, lambda y: _dirichlet_mle(y, pooled=True)),
        ]
    b_layer, b_pool = (
        bootstrap_replicates(refit, bootstrap, draw=partial(draw, at=at), batched=True) for at, refit in cases
    )
    return b_layer, b_pool


def _zipf_refit(ysorted: np.ndarray, top_k: int) -> np.ndarray:
    """The Zipf exponent of each row of sorted counts (R, E): grid, then polish."""
    return np.array([_zipf_polish(row, top_k, g) for row, g in zip(ysorted, _zipf_grid_mle(ysorted, top_k))])


# ---------------------------------------------------------------------------------------------
# histogram fits


def _histogram_estimate(
    model: str, y: np.ndarray, ysorted: np.ndarray, coef: np.ndarray, k: int, splits: list
) -> tuple[np.ndarray, float, np.ndarray, float, str | None]:
    """One model's point estimates and log-likelihoods of :func:`fit_histogram`: per layer (L,) and
    pooled, with the name of its parameter (None for ``uniform``).

    - ``uniform``: π_i = K/E, k = 0.
    - ``zipf``: w ∝ rank^−s, π(s) = Plackett–Luce inclusion of w (the Zipf routing model), s ∈ [0, 4], k = 1.
      ŝ uses each expert's rank in the observed counts — the maximum-likelihood assignment
      over permutations. Sorting noise looks like skew, so this favours Zipf on noise: on
      uniform data ŝ > 0 (≈ 0.03 at E = 64, N = 8e4) and the sorted log L beats the uniform
      one by O(E) nats per layer (≈ 27 at E = 64), so AIC would always pick Zipf. The reported
      ``log_likelihood`` (and AIC) of Zipf is therefore *cross-fitted*: the counts are split by
      binomial thinning into two independent halves, each half is scored at ŝ with the rank
      order of the other half, averaged over ``crossfit_splits`` thinnings. It has no sorting
      optimism (a noise order earns nothing) and loses little under real skew (the top ranks
      are stable). The Zipf routing model draws a random permutation per layer, whose exact
      likelihood averages over all E! orders (a permanent); the cross-fit stands in for it.
    - ``dirichlet``: w ~ Dirichlet(α·1) per layer, and the picks are approximated by a
      Dirichlet-multinomial with N draws from w itself, ``log L = log N! − Σ log Y_i! +
      lnΓ(Eα) − lnΓ(N+Eα) + Σ [lnΓ(Y_i+α) − lnΓ(α)]``. The approximation ignores that the K
      picks of a token are without replacement (which flattens π against K·w), so α is biased
      upwards (less skew) when K·max w is not small. α ∈ [1e-3, 1e6], k = 1.
    """
    layers, experts = y.shape
    if model == "uniform":
        ll_layer = coef + (y * np.log(1.0 / experts)).sum(axis=1)
        return np.zeros(layers), 0.0, ll_layer, float(ll_layer.sum()), None
    if model == "zipf":
        p_layer = _zipf_refit(ysorted, k)
        ysum = ysorted.sum(axis=0)
        p_pool = _zipf_polish(ysum, k, float(_zipf_grid_mle(ysum, k)))
        log_p = _zipf_log_pi_exact(experts, k, np.append(p_layer, p_pool)) - np.log(k)
        ll_layer = coef + _zipf_crossfit(y, log_p[:layers], splits)
        ll_pool = float(coef.sum() + _zipf_crossfit(y, np.broadcast_to(log_p[layers], y.shape), splits).sum())
        return p_layer, p_pool, ll_layer, ll_pool, "s"
    p_layer = _dirichlet_mle(y[None], pooled=False)[0]
    p_pool = float(_dirichlet_mle(y[None], pooled=True)[0])
    ll_layer = coef + _dm_loglik(y.astype(float), p_layer)
    ll_pool = float(coef.sum() + _dm_loglik(y.astype(float), np.full(layers, p_pool)).sum())
    return p_layer, p_pool, ll_layer, ll_pool, "alpha"


def _histogram_intervals(
    est: _Estimate, bootstrap: int, level: float, rng: np.random.Generator
) -> tuple[Any, Any, np.ndarray, float]:
    """One parametrised model's intervals (per layer, pooled) and reported estimates (per layer,
    pooled) in :func:`fit_histogram`; no intervals without replicates.

    Intervals (``level``) from ``bootstrap`` replicates:
    - Zipf: parametric — picks ``Y* ~ Multinomial(N, π(ŝ)/K)`` per layer simulated at the
      fitted exponent (per layer at ŝ_l; pooled: every layer at the pooled ŝ), sorted and
      refitted. The ML ŝ of sorted counts is biased upwards (sorting noise looks like skew;
      ≈ +0.001 per layer at E = 256, N = 1.6e5), and the bias does not shrink when layers are
      pooled while the spread does: over 58 such layers it is ~4 standard errors. The
      replicates carry the same bias, so the *basic* interval ``(2ŝ − q_hi, 2ŝ − q_lo)``
      corrects it — and the reported estimate is the bias-corrected ``2ŝ − mean(ŝ*)``, which
      lies inside it (reporting the raw ŝ with that interval put the estimate outside its own
      interval: s = 0.46114, CI [0.45993, 0.46065] on deepseek-v3-like). The ML ŝ stays in
      ``ml_params``. Resampling ``Y/N`` instead re-sorts an already sorted-biased profile and
      under-corrects (per-layer coverage of the known exponents of deepseek-v3-like: 52/58
      against 55/58 for the parametric interval).
    - Dirichlet: parametric (w* ~ Dirichlet(α̂), Y* ~ Multinomial(N, w*)). Resampling picks
      would hold this layer's w fixed and miss the main uncertainty of α — one layer is a
      single draw of E shares from Dirichlet(α) — so its intervals would be far too narrow.
    """
    model, p_layer, p_pool, _, _ = est
    if bootstrap <= 0:
        return None, None, p_layer, p_pool
    b_layer, b_pool = _parametric_replicates(est, bootstrap, rng)
    how = "parametric bootstrap"
    if model != "zipf":  # ends (L,) per layer, float ends pooled
        ci_layer, ci_pool = (percentile_interval(b, level, ignore_nan=True, resampling=how) for b in (b_layer, b_pool))
        return ci_layer, ci_pool, p_layer, p_pool
    # basic (reverse-percentile) interval: re-sorting resampled counts adds the
    # sorting bias a second time, so percentiles sit above ŝ (and miss the truth)
    ci_layer = basic_interval(p_layer, b_layer, level, ignore_nan=True, resampling=how).clip(*S_BOUNDS)
    ci_pool = basic_interval(p_pool, b_pool, level, ignore_nan=True, resampling=how).clip(*S_BOUNDS)
    # the same correction for the estimate: 2ŝ − mean(ŝ*), inside the basic interval
    est_layer = np.clip(2.0 * p_layer - np.nanmean(b_layer, axis=0), *S_BOUNDS)
    est_pool = float(np.clip(2.0 * p_pool - np.nanmean(b_pool), *S_BOUNDS))
    return ci_layer, ci_pool, est_layer, est_pool


def _histogram_gof(
    est: _Estimate, obs_shares: np.ndarray, gof_sims: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """One model's goodness of fit in :func:`fit_histogram`: statistics and p-values per layer,
    then pooled.

    Goodness of fit: parametric bootstrap with ``gof_sims`` histograms simulated from the
    fitted model at each layer's N (multinomial picks; Dirichlet: a fresh w per simulation).
    Statistic per layer: max over ranks of |observed sorted share − mean simulated sorted
    share|; pooled: the max over layers. p-value: (1 + #{simulated ≥ observed}) / (1 + sims).
    """
    model, p_layer, p_pool, n, shape = est

    def simulated(param: np.ndarray) -> np.ndarray:
        """Sorted shares of ``gof_sims`` multinomial draws of each layer's N picks at ``param``."""
        p = _model_pick_probs(model, *shape, param, gof_sims, rng)  # (sims, L, E)
        y = rng.multinomial(np.broadcast_to(n, p.shape[:-1]), p / p.sum(axis=-1, keepdims=True))
        return _sorted_desc(y) / n[:, None]

    # simulated at each layer's parameter, then at the pooled one (in this order from rng)
    d_l, pv_l = _gof(obs_shares, simulated(p_layer), pooled=False)
    d_p, pv_p = _gof(obs_shares, simulated(np.full(n.size, p_pool)), pooled=True)
    return d_l, pv_l, d_p, pv_p


def _model_fit(
    model: str, name: str | None, est: float, ml: float, ci: Any, ll: float, d: float, pv: float
) -> ModelFit:
    """One :class:`ModelFit` of :func:`fit_histogram` (one layer's, or the pooled one): the reported
    and the ML estimate of the parameter ``name`` (None: no parameter), its interval (None:
    none), the log-likelihood and the goodness of fit's statistic and p-value."""
    kp = int(name is not None)  # uniform has none, Zipf and Dirichlet one each
    return ModelFit(
        model=model,
        params={} if name is None else {name: float(est)},
        ml_params={} if name is None else {name: float(ml)},
        ci={} if ci is None or name is None else {name: ci},
        log_likelihood=float(ll),
        aic=2.0 * kp - 2.0 * float(ll),
        gof_statistic=float(d),
        gof_pvalue=float(pv),
    )


def check_fit_experts(experts: int) -> None:
    """Refuse a skew fit over more than :data:`moeroof.core.limits.MAX_SKEW_FIT_EXPERTS` experts
    before it tabulates anything (ValueError in the user's terms)."""
    if experts > MAX_SKEW_FIT_EXPERTS:
        raise ValueError(
            f"E = {experts} experts: the skew fit tabulates inclusion probabilities over every expert, "
            f"and takes at most {MAX_SKEW_FIT_EXPERTS} (published models: 8 to 384)"
        )


def fit_histogram(
    counts: Any,
    top_k: int,
    *,
    rng: np.random.Generator,
    bootstrap: int = 100,
    gof_sims: int = 99,
    models: tuple[str, ...] = MODELS,
    level: float = 0.95,
    crossfit_splits: int = 8,
    progress: Callable[[int, int, str], None] | None = None,
) -> HistogramFit:
    """Fit uniform, Zipf and Dirichlet popularity models to per-layer incidence counts.

    ``progress(done, total, what)``, when given, is called as each stage (a model's estimate,
    bootstrap, goodness of fit) starts and once at the end; it changes no result.

    ``counts`` (L, E): incidence counts (each routed token adds 1 to each of its K experts).
    Likelihood: the N = Σ Y picks of a layer are multinomial with probabilities π_i/K,
    ``log L = log N! − Σ log Y_i! + Σ Y_i log(π_i/K)`` (pick-level approximation of
    incidence data, Chao et al. 2014). AIC = 2k − 2 log L; ``chosen`` is the lowest pooled AIC.

    The models, their estimates and ``zipf``'s cross-fitted likelihood: :func:`_histogram_estimate`.

    Pooled fits share one parameter over all layers (each layer keeps its own rank order for
    Zipf); pooled log L is the sum over layers.

    Goodness of fit (``gof_sims`` simulations): :func:`_histogram_gof`. Intervals (``level``) from
    ``bootstrap`` replicates, and Zipf's bias-corrected estimate: :func:`_histogram_intervals`.
    """
    y = _check_counts(counts, top_k)
    check_fit_experts(y.shape[1])
    if not models or any(m not in MODELS for m in models):
        raise ValueError(f"models must be a non-empty subset of {MODELS}, got {models!r}")
    if bootstrap < 0 or gof_sims < 0:
        raise ValueError("bootstrap and gof_sims must be >= 0")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    layers, experts = y.shape
    k = int(top_k)
    n = y.sum(axis=1)
    ysorted = _sorted_desc(y)
    coef = gammaln(n + 1.0) - gammaln(y + 1.0).sum(axis=-1)  # log N! − Σ log Y_i!, (L,)
    obs_shares = ysorted / n[:, None]

    # binomial thinnings for the cross-fitted Zipf likelihood, shared by per-layer and pooled
    splits = [_thin(y, rng) for _ in range(crossfit_splits)] if "zipf" in models else []
    per_layer: list[dict[str, ModelFit]] = [{} for _ in range(layers)]
    pooled: dict[str, ModelFit] = {}
    todo = [m for m in MODELS if m in models]
    report = stage_reporter(progress, 3 * len(todo))
    for model in todo:
        report(f"{model}: estimate")
        p_layer, p_pool, ll_layer, ll_pool, name = _histogram_estimate(model, y, ysorted, coef, k, splits)
        est = _Estimate(model, p_layer, p_pool, n, (experts, k))
        report(f"{model}: bootstrap ({bootstrap})")
        ci_layer, ci_pool, est_layer, est_pool = _histogram_intervals(est, bootstrap if name else 0, level, rng)
        report(f"{model}: goodness of fit ({gof_sims} simulations)")
        d_l, pv_l, d_p, pv_p = _histogram_gof(est, obs_shares, gof_sims, rng)
        for l in range(layers):
            ci = None if ci_layer is None else ci_layer.at(l)
            per_layer[l][model] = _model_fit(model, name, est_layer[l], p_layer[l], ci, ll_layer[l], d_l[l], pv_l[l])
        pooled[model] = _model_fit(model, name, est_pool, p_pool, ci_pool, ll_pool, d_p, pv_p)
    report("done")
    chosen = min(pooled, key=lambda m: pooled[m].aic)
    return HistogramFit(pooled=pooled, per_layer=per_layer, chosen=chosen, experts=experts, top_k=k, layers=layers)


# ---------------------------------------------------------------------------------------------
# correlation fits on traces


def _in_memory(topk: Any) -> np.ndarray:
    """The trace as an in-memory int64 array. A memory-mapped trace is copied a block of steps at
    a time through :func:`moeroof.data.safe_read.checked_blocks`, so a file cut short while it is
    read is an error, not SIGBUS (the fits touch every id several times; the int64 copy they work
    on is made anyway)."""
    if not isinstance(topk, np.memmap) or topk.ndim != 4:
        return np.asarray(topk)
    check_allocation(topk.size, 8, "the trace's ids")
    out = np.empty(topk.shape, dtype=np.int64)
    for s0, block in checked_blocks(topk):
        out[s0 : s0 + block.shape[0]] = block
    return out


def _check_trace(topk: Any, experts: int) -> np.ndarray:
    arr = _in_memory(topk)
    if arr.ndim != 4:
        raise ValueError(f"trace must have shape (steps, streams, layers, K), got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"trace ids must be integers, got dtype {arr.dtype}")
    if int(experts) != experts or experts < 1:
        raise ValueError(f"experts must be a positive integer, got {experts!r}")
    if not 1 <= arr.shape[-1] <= experts:
        raise ValueError(f"top_k={arr.shape[-1]} must be in [1, experts={experts}]")
    if arr.size and (arr.min() < -1 or arr.max() >= experts):
        raise ValueError(f"trace ids must be in [-1, {experts - 1}] (-1 = padding)")
    if partial_tokens(arr).any():
        raise ValueError("a token is partly padding: a token has K expert ids or K times -1")
    return arr.astype(np.int64)


def _inclusion_hat(arr: np.ndarray, experts: int) -> np.ndarray:
    """π̂ (L, E): incidence counts over live tokens per layer."""
    counts, tokens = trace_counts(arr, experts)  # (L, E), (L,)
    return counts / np.maximum(tokens, 1.0)[:, None]


def popularity_from_inclusion(pi: np.ndarray, top_k: int, *, iters: int = 60, tol: float = 1e-7) -> np.ndarray:
    """Invert Plackett–Luce inclusion: find w (rows sum to 1) with ``π(w) ≈ pi`` per row.

    Fixed point ``w ← w · π̂ / π(w)`` from ``w = π̂/K`` (exact for K = 1 and for uniform rows).
    Targets are clipped to [1e-9, 1 − 1e-6] and renormalised to Σ = K (an expert never seen
    stays reachable with negligible weight). Stops when max |π(w) − π̂| < ``tol``.

    Memoised exactly (:mod:`moeroof.core.memo`, keyed on a digest of ``pi``'s bytes): the
    stickiness and heterogeneity fits of one trace invert the same inclusion, and a later run
    with the same sources reads the weights back, bit for bit.
    """
    pi = np.ascontiguousarray(np.atleast_2d(np.asarray(pi, dtype=float)))
    k = int(top_k)
    key = (hashlib.blake2b(pi.tobytes(), digest_size=20).hexdigest(), pi.shape, k, int(iters), float(tol))
    return INVERSION_MEMO.array(key, pi.shape, lambda: invert_inclusion(pi, k, iters, tol))


#: the source files :func:`popularity_from_inclusion` runs (the disk memo's salt)
INVERSION_MEMO = SourceMemo("popularity-from-inclusion", ("fit/skew.py", "models/", "kernels/", "core/"))


def invert_inclusion(pi: np.ndarray, k: int, iters: int, tol: float) -> np.ndarray:
    """:func:`popularity_from_inclusion`'s computation, not memoised."""
    target = np.clip(pi, 1e-9, 1.0 - 1e-6)
    target *= k / target.sum(axis=1, keepdims=True)
    target = np.minimum(target, 1.0 - 1e-6)
    w = target / target.sum(axis=1, keepdims=True)
    if k == 1:
        return w
    for _ in range(iters):
        cur = routing.inclusion_probabilities(w, k)
        if np.max(np.abs(cur - target)) < tol:
            break
        w = w * target / np.maximum(cur, 1e-300)
        w /= w.sum(axis=1, keepdims=True)
    return w


def _block_sums(x: np.ndarray, block: int) -> np.ndarray:
    """Sum x (T, S, ...) over blocks of ``block`` consecutive entries of axis 0, per S:
    returns (S · ceil(T/block), ...)."""
    xp = np.add.reduceat(x, np.arange(0, x.shape[0], block), axis=0)  # (ceil(T/block), S, ...)
    return np.moveaxis(xp, 1, 0).reshape((-1,) + x.shape[2:])


def fit_stickiness(
    topk: Any,
    experts: int,
    *,
    rng: np.random.Generator,
    bootstrap: int = 200,
    level: float = 0.95,
    block: int = 16,
    grid: int = 11,
    sim_streams: int = 32,
    sim_steps: int = 48,
    burn_in: int = 8,
) -> tuple[float, Interval]:
    """Fit the stickiness ρ of :func:`moeroof.models.routing.sample_trace` to a trace.

    Measured: the mean number of experts a stream shares with its own previous token
    (:func:`moeroof.models.routing.consecutive_overlap`, averaged over layers weighted by their
    number of valid pairs). Model: each of the K previous experts is kept with probability ρ
    (m ~ Bin(K, ρ)), the other K − m are refilled by Plackett–Luce among the non-kept experts,
    with the per-layer popularity w that reproduces the trace's inclusion frequencies π̂
    (:func:`popularity_from_inclusion`). Its overlap O(ρ) is exact at ρ = 0 (independent
    tokens: ``Σ_i π_i²``) and ρ = 1 (K); in between it is simulated at one fixed seed on
    ``grid`` points (``sim_streams`` × ``sim_steps`` per layer, the first ``burn_in`` pairs
    dropped so the chain is near stationary) and made monotone. ρ solves O(ρ) = measured by
    linear interpolation; ρ = 0 when the measured overlap is at or below the independent one.

    Interval: moving-block bootstrap — each stream's consecutive pairs are cut into blocks of
    ``block`` pairs and blocks are resampled with replacement (keeping within-stream
    dependence; works with few streams); the model curve is held at the full-data popularity.
    """
    arr = _check_trace(topk, experts)
    steps, streams, layers, k = arr.shape
    if steps < 2:
        raise ValueError("a stickiness fit needs at least two steps")
    shared, valid = routing.pair_overlap(arr)
    pairs = valid.sum(axis=(0, 1)).astype(float)  # (L,)
    if pairs.sum() == 0:
        raise ValueError("the trace has no consecutive pair of live tokens")
    per_layer = np.nan_to_num(routing.consecutive_overlap(arr))
    measured = float((per_layer * pairs).sum() / pairs.sum())

    weights = pairs / pairs.sum()
    w = popularity_from_inclusion(_inclusion_hat(arr, experts), k)
    rhos = np.linspace(0.0, 1.0, grid)
    seed = int(rng.integers(2**63))
    model = routing.Uniform(experts, k)

    def simulated(rho: float) -> float:
        tr = routing.sample_trace(
            model, sim_steps + burn_in, sim_streams, layers, generator(seed), rho=rho, popularity=w
        )
        return float(weights @ np.nan_to_num(routing.consecutive_overlap(tr[burn_in:])))

    independent = float(weights @ (routing.inclusion_probabilities(w, k) ** 2).sum(axis=1))
    curve = np.array([independent] + [simulated(float(r)) for r in rhos[1:-1]] + [float(k)])
    curve = np.maximum.accumulate(curve) + np.arange(grid) * 1e-12  # strictly increasing for interpolation

    def invert(o: np.ndarray) -> np.ndarray:
        return np.where(o <= curve[0], 0.0, np.interp(o, curve, rhos))

    rho = float(invert(np.array(measured)))
    if bootstrap <= 0:
        return rho, Interval(math.nan, math.nan, level, "no bootstrap")
    num_b = _block_sums(shared.astype(float), block)  # (nb, L)
    den_b = _block_sums(valid.astype(float), block)
    keep = den_b.sum(axis=1) > 0
    num_b, den_b = num_b[keep].sum(axis=1), den_b[keep].sum(axis=1)
    overlap = lambda rows: num_b[rows].sum(axis=1) / np.maximum(den_b[rows].sum(axis=1), 1.0)
    o_star = bootstrap_replicates(overlap, bootstrap, n=num_b.size, rng=rng)
    return rho, percentile_interval(invert(o_star), level, ignore_nan=True, resampling="block bootstrap")


def _plugin_table(pi: np.ndarray, bmax: int) -> np.ndarray:
    """Independent plug-in union ``Σ_i [1 − (1 − π_i)^b]`` for b = 0…bmax: (..., bmax+1)."""
    p = np.clip(pi, 0.0, 1.0)
    out = np.zeros(p.shape[:-1] + (bmax + 1,))
    if bmax >= 1:
        out[..., 1:] = p.shape[-1] - power_sums(1.0 - p, np.arange(1, bmax + 1))
    return out


def correlation_gap(topk: Any, experts: int) -> dict[str, Any]:
    """The cross-agent correlation of a trace: the measured union against the
    independent plug-in.

    Over every (step, layer) cell with B ≥ 2 live streams, measured U = distinct experts of the
    live streams; plug-in = ``Σ_i [1 − (1 − π̂_i)^B]`` with π̂ the layer's inclusion frequency
    over the whole trace (independent tokens). Returns means over the cells
    (``union_measured``, ``union_plugin``, ``ratio`` = measured/plug-in, ``difference`` =
    plug-in − measured), ``cells``, ``mean_batch`` and ``per_layer`` lists of both unions
    (NaN for a layer without cells). A ratio below 1 means agents overlap more than
    independent routing would; above 1, less (e.g. streams on different tasks).
    """
    arr = _check_trace(topk, experts)
    # distinct experts U and live streams B of each (step, layer)
    u, b = distinct_per_layer(arr, experts), live_tokens(arr).sum(axis=1)
    table = _plugin_table(_inclusion_hat(arr, experts), arr.shape[1])  # (L, S+1)
    plug = np.take_along_axis(table, b.T, axis=1).T  # (steps, L)
    cell = b >= 2
    ncell, per_n = int(cell.sum()), cell.sum(axis=0)
    with np.errstate(invalid="ignore"):  # no cell (in all or in a layer): NaN
        um, up, mean_batch = (float(v[cell].sum() / ncell) for v in (u, plug, b))
        pl_m, pl_p = (np.where(cell, v, 0).sum(axis=0) / per_n for v in (u, plug))
    return {
        "union_measured": um,
        "union_plugin": up,
        "ratio": um / up,
        "difference": up - um,
        "cells": ncell,
        "mean_batch": mean_batch,
        "per_layer": {"union_measured": [float(x) for x in pl_m], "union_plugin": [float(x) for x in pl_p]},
    }


def _heterogeneity_tables(
    w: np.ndarray, seed: int, cs: np.ndarray, shape: tuple[int, int, int, int], bmax: int
) -> tuple[np.ndarray, np.ndarray]:
    """Model tables of :func:`fit_heterogeneity`: union and plug-in per (c, layer, b), at one fixed
    seed; ``shape`` is (replicates, layers, experts, top-k)."""
    replicates, layers, experts, k = shape
    model = routing.Uniform(experts, k)
    pop = np.tile(w, (replicates, 1))
    u_mod, p_mod = np.zeros((2, cs.size, layers, bmax + 1))
    for j, c in enumerate(cs):
        tr = routing.sample_trace(
            model, 1, bmax, layers * replicates, generator(seed), c=float(c), groups=1, popularity=pop
        )[0]
        tr = tr.reshape(bmax, replicates, layers, k)
        onehot = np.zeros((bmax, replicates, layers, experts), dtype=bool)
        np.put_along_axis(onehot, tr, True, axis=-1)
        u_mod[j, :, 1:] = np.logical_or.accumulate(onehot, axis=0).sum(axis=-1).mean(axis=1).T
        p_mod[j] = _plugin_table(onehot.mean(axis=(0, 1)), bmax)  # of the marginal inclusion π̄ (L, E)
    return u_mod, p_mod


def _invert_ratio(r: float, curve: np.ndarray, cs: np.ndarray) -> float:
    """c whose model ratio on ``cs`` is ``r``: inf at r ≥ 1, c_min at or below R(c_min), the deficit
    1 − R extrapolated ∝ 1/(c+1) beyond the grid's top."""
    if not np.isfinite(r):
        return float("nan")
    curve = np.maximum.accumulate(curve) + np.arange(curve.size) * 1e-12
    if r >= 1.0:
        return float("inf")
    if r <= curve[0]:
        return float(cs[0])
    if r >= curve[-1]:
        deficit_top = max(1.0 - curve[-1], 1e-12)
        return float((cs[-1] + 1.0) * deficit_top / (1.0 - r) - 1.0)
    return float(np.exp(np.interp(r, curve, np.log(cs))))


def fit_heterogeneity(
    topk: Any,
    experts: int,
    *,
    rng: np.random.Generator,
    bootstrap: int = 200,
    level: float = 0.95,
    block: int = 16,
    c_grid: np.ndarray | None = None,
    replicates: int | None = None,
) -> tuple[float, Interval]:
    """Fit the heterogeneity concentration c of :func:`moeroof.models.routing.sample_trace`.

    Model: at each step the live streams share one popularity ``q ~ Dirichlet(c·w)`` per layer
    (``groups=1``; q redrawn every step) and route independently given q, so their union
    falls below the independent plug-in ``Σ_i [1 − (1 − π̄_i)^B]`` (π̄: the model's marginal
    inclusion). Measured: the ratio of the mean union to the mean plug-in over cells with
    B ≥ 2 live streams (:func:`correlation_gap`). Matching this *ratio* rather than the raw
    union keeps the fit honest about w: w is taken as the popularity whose Plackett–Luce
    inclusion is the trace's π̂ (:func:`popularity_from_inclusion`), but under Dirichlet
    noise the marginal inclusion E_q[π(q)] is not π(w), and the ratio compares each union
    with its own marginal. The model ratio R(c) at the observed batch sizes is simulated at one
    fixed seed on ``c_grid`` (default 10^−2…10^2, 13 points; ``replicates`` independent q per
    layer and grid point, each with the largest live batch) and interpolated in log c.
    Beyond the grid's top, the deficit 1 − R is extrapolated ∝ 1/(c+1) (the variance of q
    scales so); c = inf when the measured ratio is ≥ 1; at or below R(c_min), c = c_min.

    Interval: moving-block bootstrap over steps (blocks of ``block`` consecutive steps; π̂ and
    the cell mix are re-estimated per replicate, the simulated model tables are held fixed).
    """
    arr = _check_trace(topk, experts)
    steps, streams, layers, k = arr.shape
    # distinct experts U and live streams B of each (step, layer)
    u, b = distinct_per_layer(arr, experts), live_tokens(arr).sum(axis=1)
    cell = b >= 2
    if not cell.any():
        raise ValueError("a heterogeneity fit needs steps with at least two live streams")
    bmax = int(b.max())
    cs = np.logspace(-2, 2, 13) if c_grid is None else np.sort(np.asarray(c_grid, dtype=float))
    if np.any(~np.isfinite(cs)) or np.any(cs <= 0):
        raise ValueError("c_grid must be finite and > 0")
    if replicates is None:
        replicates = int(np.clip(2_000_000 // (bmax * layers * experts), 16, 512))

    # --- model tables: union and plug-in per (c, layer, b) at one fixed seed
    w = popularity_from_inclusion(_inclusion_hat(arr, experts), k)
    seed = int(rng.integers(2**63))
    u_mod, p_mod = _heterogeneity_tables(w, seed, cs, (replicates, layers, experts, k), bmax)

    counts_all = np.zeros((steps, layers, experts))
    t_i, _, l_i, _ = np.nonzero(arr >= 0)
    np.add.at(counts_all, (t_i, l_i, arr[arr >= 0]), 1.0)
    tokens = b.astype(float)  # live tokens (steps, L)
    onehot_b = np.zeros((steps, layers, bmax + 1))
    onehot_b[(*np.nonzero(cell), b[cell])] = 1.0  # cell mix n[l, b]
    u_cell = np.where(cell, u, 0).astype(float)

    def ratio_parts(sel: np.ndarray) -> tuple[float, np.ndarray]:
        """measured ratio and model ratios (C,) for the steps ``sel`` (with repeats)."""
        pi_hat = counts_all[sel].sum(axis=0) / np.maximum(tokens[sel].sum(axis=0), 1.0)[:, None]
        nmix = onehot_b[sel].sum(axis=0)  # (L, bmax+1)
        plug = float((_plugin_table(pi_hat, bmax) * nmix).sum())
        meas = float(u_cell[sel].sum()) / plug if plug > 0 else float("nan")
        mod = np.einsum("clb,lb->c", u_mod, nmix) / np.einsum("clb,lb->c", p_mod, nmix)
        return meas, mod

    meas, mod = ratio_parts(np.arange(steps))
    c_hat = _invert_ratio(meas, mod, cs)
    if bootstrap <= 0:
        return c_hat, Interval(math.nan, math.nan, level, "no bootstrap")
    reps = bootstrap_replicates(
        lambda sel: _invert_ratio(*ratio_parts(sel), cs), bootstrap, n=steps, rng=rng, block=block
    )
    # c may be inf: no interpolation
    return c_hat, order_statistic_interval(reps, level, resampling="block bootstrap")


def fit_correlation(
    topk: Any,
    experts: int,
    *,
    rng: np.random.Generator,
    bootstrap: int = 200,
    level: float = 0.95,
) -> CorrelationFit:
    """Stickiness (:func:`fit_stickiness`), heterogeneity (:func:`fit_heterogeneity`, c = NaN
    when no step has two live streams) and :func:`correlation_gap` of one trace."""
    rho, rho_ci = fit_stickiness(topk, experts, rng=rng, bootstrap=bootstrap, level=level)
    gap = correlation_gap(topk, experts)
    if gap["cells"] > 0:
        c, c_ci = fit_heterogeneity(topk, experts, rng=rng, bootstrap=bootstrap, level=level)
    else:
        c, c_ci = math.nan, Interval(math.nan, math.nan, level, "no step with two live streams")
    return CorrelationFit(rho, rho_ci, c, c_ci, gap["union_measured"], gap["union_plugin"], gap["difference"])
