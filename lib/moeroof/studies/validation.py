"""Hold the step model against published measurements: calibrate, predict the rest, show the error.

The reference figures are the published ones collected in docs/sources.md, each with its source; some come from hobby
projects or issue threads and are marked so. The rule ("predict, then compare"):
a model tuned to every point it is judged on proves nothing, so each check names the point or
quantity it calibrates on, predicts the others, and reports the error whatever it is. A check
that only reproduces its own calibration point is a *consistency* check, never a prediction.

:func:`comparisons` returns every published comparison as :class:`Comparison` rows (role
``prediction`` or ``consistency``), the single list the tests pin in bands
(``tests/validation_bands.toml``) and the net_toks notebook shows.

The cache policy is chosen per source, from what the source's engine does (``Workload.cache_policy``):

- colibri's i5 box: ``lru`` with ``layer`` scope — colibri keeps one LRU expert cache per layer
  (JustVugg/colibri#856, #869: "the per-layer LRU caches"); the box's RAM, less the dense band
  and the OS, is the cache.
- colibri's EPYC box, "77.5 GB pinned": ``static`` — a pinned set of experts. Ours is pinned from
  the true routing probabilities, an **oracle** (the engine pinned from its usage counts); with a
  skew calibrated to the published 98 % hit the oracle and the engine's set hit alike at B = 1.
- bigrig, "44 of 128 experts cached": ``static`` (a pinned set, the oracle again); and the
  all-resident hypothesis, where every expert is in memory and no policy misses anything.
- colibri cold, seed 000 and the H200 bench stream every expert (no cache): the policy is moot.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
from scipy.optimize import brentq, least_squares

from moeroof import cachesim as cache
from moeroof.core.paths import DATA_DIR
from moeroof.core.results import Result
from moeroof.core.units import GB, GiB
from moeroof.data.io import read_trace
from moeroof.data.points import Point
from moeroof.data.presets import Hardware, MoEModel, bench_model, load_hardware, load_model
from moeroof.data.skew_prior import committed_skew_prior
from moeroof.fit.routing import fit_routing
from moeroof.models import expert_cache
from moeroof.models.engine_prior import prior_band
from moeroof.models.locality import Locality
from moeroof.models.plan import RoutingProbabilities, Workload, plan, routing_from_spec
from moeroof.models.routing import inclusion_probabilities, zipf_weights
from moeroof.studies.measured import Measured
from moeroof.studies.skew_prior import top_share

__all__ = [
    "MLX_1438_SWEEP",
    "PublishedSweep",
    "mlx_zero_fit",
    "zero_fit_one_stream",
    "colibri_i5_cache",
    "Reference",
    "Comparison",
    "COLIBRI_COLD_TOKEN_BYTES",
    "SINGLE_STREAM",
    "BIGRIG_SCALING",
    "BIGRIG_HYPOTHESES",
    "scale_term",
    "fit_term",
    "zipf_hit_rate",
    "zipf_for_hit_rate",
    "hot_set_hit_rate",
    "fit_engine_terms",
    "bigrig_setup",
    "bigrig_engine_fit",
    "bigrig_roofline_check",
    "cold_token_bytes_check",
    "single_stream_predictions",
    "gpu_bench_check",
    "comparisons",
    "SINGLE_STREAM_CACHE",
    "ZERO_FIT_WARMUP_STEPS",
    "OTHER_POLICIES",
    "single_stream_cache_points",
    "skew_comparisons",
    "single_stream_cache_check",
    "trace_single_stream_hit_rates",
    "zero_fit_single_stream_check",
    "cache_comparisons",
]


@dataclass(frozen=True)
class Reference:
    """A published number with its source (and whether the source is a hobby project)."""

    what: str
    value: Any
    source: str
    hobby: bool = False


@dataclass(frozen=True)
class Comparison(Result):
    """One published comparison: what the model predicts (or reproduces) against what was measured.

    ``role``: ``prediction`` (the measured values were not used to set any input) or
    ``consistency`` (they were the calibration: reproducing them only checks the calibration
    ran). ``calibrated_on`` names what was fitted and on which point; ``cache`` the cache policy
    and why. ``batch``, ``measured`` and ``predicted`` are parallel lists (one entry for a
    single-stream row); ``relative_error = predicted / measured − 1``.

    ``axis`` names what ``batch`` holds (``B``, the batch size, unless a row sweeps something
    else: ``capacity_experts`` for the single-stream cache column). ``error_unit``:
    ``relative`` (``error`` is the relative error) or ``points`` (hit rates: ``error =
    predicted − measured``, a fraction, so 0.05 is 5 points) — the quantity the bands pin.
    """

    key: str
    source: str
    quantity: str
    role: str
    calibrated_on: str
    cache: str
    batch: tuple[int, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    axis: str = "B"
    error_unit: str = "relative"
    #: the prediction's band per point where it has one (the engine priors' range), else empty
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ("prediction", "consistency"):
            raise ValueError(f"role must be 'prediction' or 'consistency', got {self.role!r}")
        if self.error_unit not in ("relative", "points"):
            raise ValueError(f"error_unit must be 'relative' or 'points', got {self.error_unit!r}")
        if not len(self.batch) == len(self.measured) == len(self.predicted):
            raise ValueError("batch, measured and predicted must have one entry each per point")
        if (self.low or self.high) and not len(self.low) == len(self.high) == len(self.batch):
            raise ValueError("low and high must have one entry each per point, or be empty")

    @property
    def relative_error(self) -> tuple[float, ...]:
        # NaN where nothing was measured to be relative to (a hit rate of 0: its error is in points)
        return tuple(float(p / m - 1.0) if m else float("nan") for p, m in zip(self.predicted, self.measured))

    @property
    def error(self) -> tuple[float, ...]:
        """The pinned error: relative (``predicted / measured − 1``) or, for ``error_unit =
        "points"``, ``predicted − measured``."""
        return tuple(float(cast(float, m.error)) for m in self.points())

    def points(self) -> list[Measured]:
        """One :class:`moeroof.studies.measured.Measured` per point (``at`` its B)."""
        none = (None,) * len(self.batch)
        kw = {k: getattr(self, k) for k in ("role", "error_unit", "axis", "calibrated_on", "source")}
        bands = zip(self.batch, self.measured, self.predicted, self.low or none, self.high or none)
        return [Measured(self.quantity, *band, **kw) for band in bands]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per point (for a table): :meth:`points` under ``key``, ``B`` their ``at``."""
        per_point = zip(self.points(), self.relative_error, self.error)
        same = {"key": self.key, "cache": self.cache}
        return [{**m.record("", self.key), **same, "B": m.at, "relative_error": r, "error": e} for m, r, e in per_point]


#: GLM-5.2 int4: ~11 GB read per cold token (75 layers × 8 experts × ~19 MB)
COLIBRI_COLD_TOKEN_BYTES = Reference(
    "GLM-5.2 int4 bytes per cold token", 11e9, "colibri docs, JustVugg/colibri#220", hobby=True
)

#: single-stream decode of GLM-5.2 with streamed experts (docs/sources.md)
SINGLE_STREAM = {
    "seed-cpu-only": Reference(
        "GLM-5.2, CPU-only server (box not described)", {"tok_s": 0.243}, "seed 000 (witnessed)"
    ),
    "colibri-1gbs": Reference(
        "GLM-5.2 int4, ~1 GB/s disk, 25 GB RAM, cold", {"tok_s": (0.05, 0.1)}, "colibri docs", hobby=True
    ),
    "colibri-i5": Reference(
        "GLM-5.2, i5-13600K 62 GB, PCIe4 5.90 GB/s", {"tok_s": 0.98, "hit": 0.547}, "colibri docs", hobby=True
    ),
    "colibri-epyc": Reference(
        "GLM-5.2, EPYC 7443 430 GB RAM, 77.5 GB pinned", {"tok_s": 1.00, "hit": 0.98}, "colibri docs", hobby=True
    ),
}

#: aggregate tok/s against concurrency, Qwen3-30B-A3B 3-bit with 44 of 128 experts cached
BIGRIG_SCALING = Reference(
    "Qwen3-30B-A3B 3-bit, 44 of 128 experts cached, aggregate tok/s",
    {"batch": [1, 2, 4, 8, 16], "net_tok_s": [17.17, 25.97, 41.08, 54.24, 63.24], "cached_experts": 44},
    "bigrig batch.py (docs/sources.md)",
    hobby=True,
)

_TERM_FIELDS = {"memory": "bw_mem_bytes_per_s", "compute": "flops_per_s", "ssd": "bw_ssd_bytes_per_s"}


def scale_term(hardware: Hardware, term: str, factor: float) -> Hardware:
    """The box with one term's bandwidth (memory, ssd curve, or compute) multiplied by ``factor``."""
    if term not in _TERM_FIELDS:
        raise ValueError(f"term must be one of {sorted(_TERM_FIELDS)}, got {term!r}")
    value = getattr(hardware, _TERM_FIELDS[term])
    scaled: Any = tuple(x * factor for x in value) if term == "ssd" else value * factor
    return replace(hardware, **{_TERM_FIELDS[term]: scaled})


def fit_term(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: RoutingProbabilities,
    batch: int,
    measured_net_tok_s: float,
    term: str,
) -> tuple[Hardware, float]:
    """Scale one term's bandwidth so that net tok/s at ``batch`` equals the measurement.

    Net tok/s is non-decreasing in every bandwidth, so the factor is found by a bracketed root
    on log(factor). Raises ValueError when no factor in [1e-4, 1e4] reaches the measurement
    (the term cannot explain it: another term binds).
    """

    def gap(log_f: float) -> float:
        hw = scale_term(hardware, term, float(np.exp(log_f)))
        return float(np.log(plan(model, hw, workload, routing, [batch]).net_tok_s[0] / measured_net_tok_s))

    lo, hi = np.log(1e-4), np.log(1e4)
    if gap(lo) > 0 or gap(hi) < 0:
        raise ValueError(f"scaling the {term} term alone cannot reach {measured_net_tok_s} tok/s at B={batch}")
    log_f = brentq(gap, lo, hi, xtol=1e-10)
    factor = float(np.exp(log_f))
    return scale_term(hardware, term, factor), factor


def hot_set_hit_rate(pi_row: np.ndarray, cache_experts: float) -> float:
    """Single-token hit rate of a static hot set of ``cache_experts`` per layer: Σ_hot π / K."""
    srt = np.sort(pi_row)[::-1]
    c = float(np.clip(cache_experts, 0, srt.size))
    lo = int(np.floor(c))
    cum = np.r_[0.0, np.cumsum(srt)]
    hit = cum[lo] + (c - lo) * (srt[lo] if lo < srt.size else 0.0)
    return float(hit / srt.sum())


def zipf_hit_rate(
    model: MoEModel, s: float, cache_experts: float, *, policy: str = "static", scope: str = "layer", seed: int = 0
) -> float:
    """Single-stream (B = 1) hit rate of a cache of ``cache_experts`` per layer under Zipf(s) routing.

    ``static``: the hot set pinned from the true probabilities (an oracle), Σ_hot π / K in closed
    form; a simulated policy (``lru``, …): :func:`moeroof.models.expert_cache.rank_cache` in
    steady state at ``seed``, exactly what :func:`moeroof.models.plan.plan` sees for the same π.
    """
    pi = inclusion_probabilities(zipf_weights(model.experts, s), model.top_k)[None, :]
    if policy == "static":
        return hot_set_hit_rate(pi[0], cache_experts)
    rc = expert_cache.rank_cache(
        pi, [1], cache_experts, np.zeros(model.experts, dtype=np.int64), policy=policy, scope=scope, seed=seed
    )
    return float(rc.hit_rate[0, 0])


def zipf_for_hit_rate(
    model: MoEModel, cache_experts: float, hit: float, *, policy: str = "static", scope: str = "layer", seed: int = 0
) -> float:
    """The Zipf exponent whose cache of ``cache_experts`` per layer hits ``hit`` at B = 1.

    ``policy`` as :func:`zipf_hit_rate`. A simulated hit rate is a step function of s at a fixed
    seed (whole draws change), so the root is the crossing brentq brackets to 1e-6 in s.
    """

    def gap(s: float) -> float:
        return zipf_hit_rate(model, s, cache_experts, policy=policy, scope=scope, seed=seed) - hit

    if gap(0.0) >= 0:
        return 0.0
    if gap(4.0) < 0:
        raise ValueError(
            f"no Zipf exponent up to 4 gives a {hit:.1%} hit rate with {cache_experts:.1f} experts cached per layer"
        )
    xtol = 1e-8 if policy == "static" else 1e-6
    return float(brentq(gap, 0.0, 4.0, xtol=xtol))


def _with_engine(hardware: Hardware, c0: float, c1: float, source: str | None = None) -> Hardware:
    """The box with the two engine terms set; tagged ``projected`` with ``source`` when given."""
    hw = replace(hardware, engine_seconds_per_step=float(c0), engine_seconds_per_agent_token=float(c1))
    if source is None:
        return hw
    keys = ("engine_seconds_per_step", "engine_seconds_per_agent_token")
    prov = {**hardware.provenance, **dict.fromkeys(keys, "projected")}
    return replace(hw, provenance=prov, sources={**hardware.sources, **dict.fromkeys(keys, source)})


def _calibration_batches(b: np.ndarray, calibrate_on: Sequence[int]) -> tuple[tuple[int, ...], list[int]]:
    """The two calibration batch sizes of :func:`fit_engine_terms` and their places in ``b``."""
    cal = tuple(int(x) for x in calibrate_on)
    if len(cal) != 2 or cal[0] == cal[1]:
        raise ValueError(f"calibrate_on must name exactly two different batch sizes, got {calibrate_on!r}")
    missing = [x for x in cal if x not in b]
    if missing:
        raise ValueError(f"calibrate_on {missing} not among the measured batch sizes {b.tolist()}")
    idx = [int(np.flatnonzero(b == x)[0]) for x in cal]
    return cal, idx


def _solve_engine(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: RoutingProbabilities,
    cal: tuple[int, ...],
    t_meas: np.ndarray,
    roof: np.ndarray,
    fitted_to: str,
) -> tuple[float, float, str]:
    """c0, c1 and the method of :func:`fit_engine_terms`: the closed form where it reproduces both
    calibration points, else least squares on the log step times."""
    bc = np.array(cal, dtype=float)

    def reproduces(c0: float, c1: float) -> bool:
        if c0 < 0 or c1 < 0:
            return False
        t = plan(model, _with_engine(hardware, c0, c1), workload, routing, list(cal)).step_seconds
        return bool(np.allclose(t, t_meas, rtol=1e-9, atol=0.0))

    y = t_meas - roof if workload.overlap == "sum" else t_meas
    c1 = float((y[1] - y[0]) / (bc[1] - bc[0]))
    c0 = float(y[0] - c1 * bc[0])
    method = "closed form"
    if not reproduces(c0, c1):

        def resid(c: np.ndarray) -> np.ndarray:
            t = plan(model, _with_engine(hardware, c[0], c[1]), workload, routing, list(cal)).step_seconds
            return np.log(t / t_meas)

        x0 = np.clip([c0, c1], 1e-9, None)
        sol = least_squares(resid, x0, bounds=([0.0, 0.0], [np.inf, np.inf]), x_scale=float(t_meas.max()), xtol=1e-14)
        c0, c1 = (float(v) for v in sol.x)
        method = "numerical (scipy.optimize.least_squares)"
        if np.max(np.abs(resid(sol.x))) > 1e-6:
            raise ValueError(
                f"no engine terms c0, c1 >= 0 reproduce {fitted_to} at B={cal[0]} and B={cal[1]} "
                f"(best relative miss {np.max(np.abs(resid(sol.x))):.2%})"
            )
    return c0, c1, method


def fit_engine_terms(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: RoutingProbabilities,
    batch,
    measured_net_tok_s,
    calibrate_on: Sequence[int] = (1, 16),
    *,
    fitted_to: str = "measured net tok/s",
) -> tuple[Hardware, dict[str, Any]]:
    """Fit the engine terms on exactly two measured points, predict the others.

    The step at B is ``T(B) = combine(roofline terms(B), c0 + c1·B)``
    (:mod:`moeroof.models.step`; c0 = ``engine_seconds_per_step``, c1 =
    ``engine_seconds_per_agent_token``, both ≥ 0) and the measurement gives
    ``T_meas(B) = B / net_tok_s(B)``. The two points ``B1, B2`` of ``calibrate_on`` give two
    equations in (c0, c1); every other input stays as ``hardware`` and ``workload`` have it.

    - ``max`` overlap, the engine term binding at both points (``T_meas(Bi) > roofline(Bi)``):
      closed form, ``c1 = (T2 − T1) / (B2 − B1)``, ``c0 = T1 − c1·B1``.
    - ``sum`` overlap: the same line through ``T_meas(Bi) − roofline(Bi)`` (the engine adds).
    - otherwise (a negative root, several ranks): ``scipy.optimize.least_squares`` on
      ``log T(Bi) − log T_meas(Bi)`` with c0, c1 ≥ 0.

    Every result is checked by re-evaluating :func:`moeroof.models.plan.plan` at B1 and B2.
    Raises ValueError when the roofline alone (engine 0) is already slower than a calibration
    point — engine terms only add time — or when no c0, c1 ≥ 0 reproduces both points.

    Returns the box with both fields set, tagged ``projected`` with the source "fitted to
    ``fitted_to`` at B=B1 and B=B2", and the comparison: per B ``measured``, ``predicted``,
    ``relative_error`` (predicted / measured − 1), ``role`` (``calibration`` or
    ``prediction``), ``bound``, ``roofline_net_tok_s`` (engine 0), plus ``c0``, ``c1``,
    ``method`` and the median and largest absolute error over the predicted points.
    """
    b = np.asarray(batch, dtype=int)
    meas = np.asarray(measured_net_tok_s, dtype=float)
    cal, idx = _calibration_batches(b, calibrate_on)
    bc = np.array(cal, dtype=float)
    t_meas = bc / meas[idx]
    base = _with_engine(hardware, 0.0, 0.0)
    roof = plan(model, base, workload, routing, list(cal)).step_seconds
    slow = [x for x, r, t in zip(cal, roof, t_meas) if r > t * (1 + 1e-9)]
    if slow:
        raise ValueError(
            f"the roofline alone is slower than measured at B={slow} ({fitted_to}): engine terms only add time"
        )

    c0, c1, method = _solve_engine(model, hardware, workload, routing, cal, t_meas, roof, fitted_to)
    source = (
        f"fitted to {fitted_to} at B={cal[0]} and B={cal[1]} (moeroof.studies.validation.fit_engine_terms, {method})"
    )
    hw = _with_engine(hardware, c0, c1, source)
    p, roof_all = plan(model, hw, workload, routing, b), plan(model, base, workload, routing, b)
    err = p.net_tok_s / meas - 1.0
    held_out = ~np.isin(b, cal)
    return hw, {
        "calibrate_on": list(cal),
        "c0": c0,
        "c1": c1,
        "method": method,
        "source": source,
        "batch": b.tolist(),
        "measured": meas.tolist(),
        "predicted": p.net_tok_s.tolist(),
        "relative_error": err.tolist(),
        "role": ["prediction" if h else "calibration" for h in held_out],
        "bound": list(p.bound),
        "roofline_net_tok_s": roof_all.net_tok_s.tolist(),
        "roofline_bound": list(roof_all.bound),
        "median_abs_error_predicted": float(np.median(np.abs(err[held_out]))) if held_out.any() else float("nan"),
        "max_abs_error_predicted": float(np.max(np.abs(err[held_out]))) if held_out.any() else float("nan"),
    }


#: bigrig's box under two readings of "44 of 128 experts cached" (bigrig batch.py, docs/sources.md):
#: ``pinned-44``: 44 experts per layer pinned (``static``: pinned from the trace's own routing
#: probabilities, an oracle), the misses page-faulted from the SSD through mmap at the preset's
#: 0.70 GB/s; ``resident``: the 3-bit model's 12.7 GB of experts all in memory (44 pinned by the
#: engine, the rest of the mmapped file in the OS page cache of the assumed 32 GB box), so the
#: memory term is the roofline and no policy misses anything (``static`` with every expert)
BIGRIG_HYPOTHESES = {
    "pinned-44": "44 of 128 experts pinned (oracle hot set), misses via mmap from the SSD",
    "resident": "every expert in memory (44 pinned + the page cache)",
}


def bigrig_setup(hypothesis: str = "resident", overlap: str = "max"):
    """``(model, hardware, workload, routing)`` of bigrig's measurements, presets as they are.

    Model ``qwen3-30b-a3b-3bit``, box ``apple-m4`` (engine terms as the preset has them: 0,
    assumed), routing the embedded Qwen3-30B-A3B-like trace (synthetic: projected), 512-token
    contexts (bigrig's batch.py prompts are short; assumed). ``hypothesis``: a key of
    :data:`BIGRIG_HYPOTHESES`; both use the ``static`` cache policy (see there).
    """

    if hypothesis not in BIGRIG_HYPOTHESES:
        raise ValueError(f"hypothesis must be one of {sorted(BIGRIG_HYPOTHESES)}, got {hypothesis!r}")
    m = load_model("qwen3-30b-a3b-3bit")
    hw = load_hardware("apple-m4")
    r = routing_from_spec(str(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz"), m)
    cached = BIGRIG_SCALING.value["cached_experts"] if hypothesis == "pinned-44" else m.experts
    cache_bytes = cached * m.moe_layers * m.expert_bytes
    return m, hw, Workload(context_tokens=512, cache_bytes=cache_bytes, overlap=overlap, cache_policy="static"), r


def bigrig_engine_fit(
    calibrate_on: Sequence[int] = (1, 16), hypothesis: str = "resident", overlap: str = "max"
) -> tuple[Hardware, dict[str, Any]]:
    """bigrig's concurrency curve with engine terms: :func:`fit_engine_terms` on two of its five
    points (default B = 1 and 16: the widest lever arm for the per-token slope, so the three
    held-out points are interpolations; ``(1, 2)`` makes B = 4…16 an extrapolation), every
    other input as :func:`bigrig_setup` has it. Under ``pinned-44`` it raises ValueError: the
    preset's 0.70 GB/s mmap stream makes the roofline alone about 3× slower than measured at B = 1
    (on the embedded trace's routing)."""
    m, hw, w, r = bigrig_setup(hypothesis, overlap)
    ref = BIGRIG_SCALING.value
    return fit_engine_terms(
        m, hw, w, r, ref["batch"], ref["net_tok_s"], calibrate_on, fitted_to="bigrig's aggregate tok/s (batch.py)"
    )


def bigrig_roofline_check(hypothesis: str, term: str, overlap: str = "max") -> dict[str, Any]:
    """The roofline alone against bigrig's curve: one bandwidth (``term``) calibrated at B = 1
    (:func:`fit_term`), the other four points predicted with their relative errors; engine terms 0
    as the preset has them."""
    m, hw, w, r = bigrig_setup(hypothesis, overlap)
    b = np.asarray(BIGRIG_SCALING.value["batch"], dtype=int)
    measured = np.asarray(BIGRIG_SCALING.value["net_tok_s"], dtype=float)
    hw, factor = fit_term(m, hw, w, r, 1, float(measured[int(np.flatnonzero(b == 1)[0])]), term)
    p = plan(m, hw, w, r, b)
    err = p.net_tok_s / measured - 1.0
    held_out = b != 1
    return {
        "term": term,
        "factor": factor,
        "calibrate_at": 1,
        "batch": b.tolist(),
        "measured": measured.tolist(),
        "predicted": p.net_tok_s.tolist(),
        "relative_error": err.tolist(),
        "bound": list(p.bound),
        "median_abs_error_held_out": float(np.median(np.abs(err[held_out]))),
        "max_abs_error_held_out": float(np.max(np.abs(err[held_out]))),
        "hypothesis": hypothesis,
    }


def cold_token_bytes_check() -> dict[str, Any]:
    """GLM-5.2 int4 bytes read per cold token: the model (uniform routing, no cache, B = 1, so
    ``L · K · e``) against colibri's ~11 GB; nothing calibrated."""

    m = load_model("glm-5.2")
    p = plan(m, load_hardware("nvme-gen4"), Workload(cache_bytes=0.0), routing_from_spec("uniform", m), [1])
    predicted = float(p.ssd_bytes_per_token[0])
    measured = float(COLIBRI_COLD_TOKEN_BYTES.value)
    return {"measured": measured, "predicted": predicted, "relative_error": predicted / measured - 1.0}


def _zipf_routing(model, s: float) -> RoutingProbabilities:
    """One stream's routing of Zipf exponent ``s`` over the model's experts (one row for every layer)."""
    return RoutingProbabilities(
        inclusion_probabilities(zipf_weights(model.experts, s), model.top_k)[None, :], f"Zipf s={s:.3f}", "projected"
    )


def single_stream_predictions() -> list[dict[str, Any]]:
    """GLM-5.2 single-stream rows (docs/sources.md): what each calibrates on, predicted vs measured.

    - colibri, ~1 GB/s disk, 25 GB RAM, cold: no cache, a flat 1 GB/s SSD; nothing calibrated.
    - colibri, i5-13600K (preset ``nvme-gen4``): the cache is what RAM leaves, run as colibri
      runs it, one LRU per layer (``lru``, scope ``layer``, simulated in steady state); the Zipf
      skew is calibrated so that LRU hits the measured 54.7 % at B = 1; tok/s is predicted.
    - colibri, EPYC 7443 (preset ``epyc-server``): 77.5 GB pinned (``static``: our pinned set
      is chosen from the true probabilities, an oracle), the skew calibrated so it hits the
      measured 98 %; tok/s predicted.
    - seed 000's CPU-only witness: the box is not described; assumed ``epyc-server`` streaming
      every expert from its NVMe (no cache, so neither policy nor skew matters at B = 1), as the
      seed's "CPU-offload" suggests; nothing calibrated.

    Each row: ``key``, ``cache_policy``, ``calibrated_on``, ``zipf_s``, ``cache_gb``,
    ``hit_rate_model`` / ``hit_rate_measured``, ``tok_s_measured`` (a (low, high) range for the
    cold row) / ``tok_s_predicted`` and ``relative_error`` against the measured value (the
    range's midpoint), ``bound``, ``source``.
    """

    model = load_model("glm-5.2")
    rows = []
    per_expert_layer = model.moe_layers * model.expert_bytes

    def row(key, hw, cache_bytes, s, calibrated_on, policy, scope="layer"):
        ref = SINGLE_STREAM[key]
        w = Workload(context_tokens=512, cache_bytes=cache_bytes, cache_policy=policy, cache_scope=scope)
        route = _zipf_routing(model, s)
        p = plan(model, hw, w, route, [1])
        band = prior_band(model, hw, w, route, [1])
        measured = ref.value["tok_s"]
        mid = float(np.mean(measured)) if isinstance(measured, tuple) else float(measured)
        return {
            "key": key,
            "setup": ref.what,
            "hardware": hw.name,
            "cache_policy": p.cache_label if cache_bytes > 0 else "none (every expert streamed)",
            "calibrated_on": calibrated_on,
            "zipf_s": s,
            "cache_gb": float(p.cache_experts_per_layer[0] * per_expert_layer / GB),
            "hit_rate_model": float(p.cache_hit_rate[0]),
            "hit_rate_measured": ref.value.get("hit"),
            "tok_s_measured": measured,
            "tok_s_predicted": float(p.net_tok_s[0]),
            "relative_error": float(p.net_tok_s[0] / mid - 1),
            "tok_s_at_priors": float(band.net_tok_s[0]),
            "tok_s_at_priors_band": (float(band.low[0]), float(band.high[0])),
            "bound": p.bound[0],
            "source": ref.source + (" (hobby project)" if ref.hobby else ""),
        }

    gen4 = load_hardware("nvme-gen4")
    epyc = load_hardware("epyc-server")
    slow = replace(
        gen4,
        name="nvme-gen4, 1 GB/s disk, 25 GB RAM",
        ram_bytes=25 * GB,
        ssd_read_size_bytes=(4096.0, 1e8),
        bw_ssd_bytes_per_s=(1 * GB, 1 * GB),
    )
    rows.append(row("colibri-1gbs", slow, 0.0, 0.0, "nothing (cold: no cache)", "static"))
    # the i5 box: cache = what its RAM leaves beside the dense band and the OS; colibri's per-layer LRU
    i5_cache = colibri_i5_cache(model, gen4)
    s_i5 = zipf_for_hit_rate(model, i5_cache / per_expert_layer, 0.547, policy="lru", scope="layer")
    rows.append(row("colibri-i5", gen4, i5_cache, s_i5, "hit rate 54.7 % → Zipf s (LRU per layer)", "lru"))
    # the EPYC box: 77.5 GB pinned (our pinned set is the oracle's)
    s_epyc = zipf_for_hit_rate(model, 77.5 * GB / per_expert_layer, 0.98, policy="static")
    rows.append(row("colibri-epyc", epyc, 77.5 * GB, s_epyc, "hit rate 98 % → Zipf s (pinned set)", "static"))
    # "sub-1 tok/s CPU-offload": every expert streamed, none pinned
    assumed = "nothing (box assumed: epyc-server streaming every expert, no cache)"
    rows.append(row("seed-cpu-only", epyc, 0.0, 0.0, assumed, "static"))
    return rows


def _touched_cost_fit(model, hw, workload, routing, batch, measured_b1: float, coalesced: bool):
    """The cost per touched (layer, expert) pair (``engine_seconds_per_touched_expert``, s) at
    which the step model's net tok/s at B = 1 equals ``measured_b1`` (0 where the model is
    already as slow), and the model's tok/s at every ``batch`` with it: a 1-D root of a rate that
    falls as the cost grows (``brentq``)."""

    def rate(c: float, b) -> np.ndarray:
        p = plan(model, replace(hw, engine_seconds_per_touched_expert=c), workload, routing, b)
        return np.asarray(p.net_tok_s if coalesced else p.baselines["uncoalesced"]["net_tok_s"], dtype=float)

    def gap(c: float) -> float:
        return float(rate(c, [1])[0]) - measured_b1

    c = 0.0
    if gap(0.0) > 0:
        hi = 1e-6
        while gap(hi) > 0:
            hi *= 4.0
        c = float(brentq(gap, 0.0, hi, xtol=1e-15, rtol=1e-12))
    return c, rate(c, batch)


def gpu_bench_check(path=None) -> dict[str, Any]:
    """The witnessed GPU coalescing bench (``benchmarks/gpu_moe_bench.py`` on the lab's H200)
    against the roofline with the ``h200-pcie-offload`` preset, nothing calibrated.

    The bench's model: E experts × L layers of two fp16 d×f matrices in pinned host memory,
    Zipf(s) routing, top-K; no dense band, no KV. Predicted step: copies over the measured
    host→device curve at the expert's size, against the matmul FLOP at the measured bf16 rate,
    combined by ``max``. Returns per mode and B: measured and predicted net tok/s and the
    relative error, plus the measured and modelled coalescing multiple (baseline
    ``uncoalesced``).
    """

    path = Path(path) if path is not None else DATA_DIR / "measurements" / "gpu_moe_bench-h200-2026-11-29.json"
    data = json.loads(path.read_text())
    cfg = data["config"]
    model = bench_model(
        "gpu-bench-moe",
        experts=cfg["experts"],
        top_k=cfg["top_k"],
        moe_layers=cfg["layers"],
        expert_bytes=cfg["expert_bytes"],
        flops_per_token=2 * 2 * cfg["d_model"] * cfg["d_ff"] * cfg["top_k"] * cfg["layers"],
    )
    hw = load_hardware("h200-pcie-offload")
    routing = routing_from_spec(f"zipf:{cfg['zipf_s']}", model)
    rows = data["rows"]
    batch = sorted({r["batch"] for r in rows})
    # no expert cache: the bench keeps every expert in pinned host memory and copies the step's
    # union (coalesced) or each token's picks (uncoalesced), so the cache policy plays no part
    workload = Workload(context_tokens=0, overlap="max", cache_bytes=0.0)
    p = plan(model, hw, workload, routing, batch)
    predicted = {"coalesced": p.net_tok_s, "uncoalesced": p.baselines["uncoalesced"]["net_tok_s"]}
    out = {"batch": batch, "gpu": data["gpu"], "date": data["date"], "command": data["command"], "modes": {}}

    def measured(mode: str, key: str = "net_tok_s") -> list:
        return [next(r[key] for r in rows if r["batch"] == b and r["mode"] == mode) for b in batch]

    for mode in ("uncoalesced", "coalesced"):
        meas = np.array(measured(mode))
        pred = np.asarray(predicted[mode])
        band = prior_band(model, hw, workload, routing, batch, coalesced=mode == "coalesced")
        # each mode's cost per touched (layer, expert) pair fitted on its B = 1 row alone, the rest
        # predicted: the two paths copy and launch differently, so each has its own
        c, fitted = _touched_cost_fit(model, hw, workload, routing, batch, float(meas[0]), mode == "coalesced")
        out["modes"][mode] = {
            "measured": meas.tolist(),
            "predicted": pred.tolist(),
            "relative_error": (pred / meas - 1).tolist(),
            "median_abs_error": float(np.median(np.abs(pred / meas - 1))),
            "at_priors": band.net_tok_s.tolist(),
            "at_priors_low": band.low.tolist(),
            "at_priors_high": band.high.tolist(),
            "fit_b1": {"engine_seconds_per_touched_expert": c, "predicted": fitted.tolist()},
        }
    coalesced, uncoalesced = out["modes"]["coalesced"], out["modes"]["uncoalesced"]
    out["multiple_fit_b1"] = (np.array(coalesced["fit_b1"]["predicted"]) / uncoalesced["fit_b1"]["predicted"]).tolist()
    out["multiple_measured"] = (np.array(coalesced["measured"]) / uncoalesced["measured"]).tolist()
    out["multiple_predicted"] = np.asarray(p.baselines["uncoalesced"]["multiple"]).tolist()
    out["union_measured"] = measured("coalesced", "union_per_layer")
    out["union_predicted"] = p.union_per_layer.tolist()
    return out


def _split(c: dict[str, Any], key: str, **kw) -> list[Comparison]:
    """A fit's result (``batch``, ``measured``, ``predicted``, ``role`` and, where it has them,
    ``notes``, one per point) as a consistency row (its calibration points) and a prediction row
    (the rest)."""
    out = []
    for role, suffix, want in (("consistency", "-calibration", "calibration"), ("prediction", "", "prediction")):
        sel = [i for i, r in enumerate(c["role"]) if r == want]
        if sel:
            pick: dict[str, Any] = {
                k: tuple(c[k][i] for i in sel) for k in ("batch", "measured", "predicted", "notes") if k in c
            }
            out.append(Comparison(key=key + suffix, role=role, **pick, **kw))
    return out


def _colibri_rows() -> list[Comparison]:
    """colibri's bytes read per cold token (seed 000)."""
    cold = cold_token_bytes_check()
    return [
        Comparison(
            "colibri-cold-token-bytes",
            COLIBRI_COLD_TOKEN_BYTES.source + " (hobby project)",
            "GLM-5.2 int4 bytes read per cold token",
            "prediction",
            "nothing",
            "none (cold)",
            (1,),
            (cold["measured"],),
            (cold["predicted"],),
        )
    ]


def _single_stream_rows() -> list[Comparison]:
    """Single-stream GLM-5.2's hit rates and tok/s at B = 1 (calibrated and at the priors)."""
    out: list[Comparison] = []
    for r in single_stream_predictions():
        measured = r["tok_s_measured"]
        notes: tuple[str, ...] = ()
        if isinstance(measured, tuple):
            notes = (f"published as a range {measured[0]}–{measured[1]} tok/s: measured is its midpoint",)
            measured = float(np.mean(measured))
        band = tuple((x,) for x in r["tok_s_at_priors_band"])
        # (key suffix, role, quantity, measured, predicted, notes, band)
        rows: list[tuple] = []
        if r["hit_rate_measured"] is not None:
            hit = ("cache hit rate at B=1", r["hit_rate_measured"], r["hit_rate_model"], (), ((), ()))
            rows.append(("-hit", "consistency", *hit))
        rows += [
            ("-tok-s", "prediction", f"tok/s at B=1 ({r['hardware']}, bound {r['bound']})", measured,
             r["tok_s_predicted"], notes, ((), ())),
            ("-tok-s-at-priors", "prediction", f"tok/s at B=1, engine at the box's priors ({r['hardware']})", measured,
             r["tok_s_at_priors"], notes, band),
        ]  # fmt: skip
        out += [
            Comparison(r["key"] + suffix, r["source"], f"{r['setup']}: {q}", role, r["calibrated_on"], r["cache_policy"],
                       (1,), (float(ms),), (pr,), nt, low=lo, high=hi)
            for suffix, role, q, ms, pr, nt, (lo, hi) in rows
        ]  # fmt: skip
    return out


def _bigrig_rows() -> list[Comparison]:
    """bigrig's concurrency curve: engine terms fitted on two points, and the roofline alone with one
    bandwidth fitted at B = 1."""
    out: list[Comparison] = []
    bigrig = BIGRIG_SCALING.source + " (hobby project)"
    for cal in ((1, 16), (1, 2)):
        _, c = bigrig_engine_fit(cal)
        out += _split(
            c,
            f"bigrig-engine-B{cal[0]}-B{cal[1]}",
            source=bigrig,
            quantity=f"aggregate tok/s, roofline + engine terms (c0 {c['c0'] * 1e3:.1f} ms, c1 {c['c1'] * 1e3:.2f} ms)",
            calibrated_on=f"engine terms c0, c1 on B={cal[0]} and B={cal[1]}",
            cache=BIGRIG_HYPOTHESES["resident"],
        )
    for hyp, term in (("pinned-44", "ssd"), ("resident", "memory")):
        c = bigrig_roofline_check(hyp, term)
        c["role"] = ["calibration" if b == 1 else "prediction" for b in c["batch"]]
        out += _split(
            c,
            f"bigrig-roofline-{term}",
            source=bigrig,
            quantity=f"aggregate tok/s, roofline alone ({term} bandwidth ×{c['factor']:.3g})",
            calibrated_on=f"{term} bandwidth on B=1",
            cache=BIGRIG_HYPOTHESES[hyp],
        )
    return out


def _h200_rows(g: dict[str, Any]) -> list[Comparison]:
    """The witnessed H200 bench, predicted from nothing; then with each mode's cost per touched
    expert fitted on its B = 1 row, B = 2…128 predicted."""
    h200 = f"witnessed: benchmarks/gpu_moe_bench.py on the lab's {g['gpu']}, {g['date']} (data/measurements/)"
    b, none = tuple(int(x) for x in g["batch"]), "none (experts in pinned host memory, the union copied every step)"
    rows: list[tuple[str, str, Any, Any, tuple, tuple]] = [
        ("h200-union", "distinct experts per layer per step", g["union_measured"], g["union_predicted"], (), ())
    ]
    for mode in ("uncoalesced", "coalesced"):
        d = g["modes"][mode]
        rows += [(f"h200-{mode}", f"net tok/s, {mode}", d["measured"], d["predicted"], (), ()),
                 (f"h200-{mode}-at-priors", f"net tok/s, {mode}, engine at the box's priors", d["measured"],
                  d["at_priors"], tuple(d["at_priors_low"]), tuple(d["at_priors_high"]))]  # fmt: skip
    q = "coalesced / uncoalesced net tok/s (baseline uncoalesced)"
    rows.append(("h200-multiple", q, g["multiple_measured"], g["multiple_predicted"], (), ()))
    # every one predicts from nothing, on the same batches
    out = [
        Comparison(key, h200, q, "prediction", "nothing", none, b, tuple(ms), tuple(pr), low=lo, high=hi)
        for key, q, ms, pr, lo, hi in rows
    ]
    fit_note = (
        "terms combined by max (the host issues while the GPU copies): where the fitted engine term "
        "binds it is the whole step, so the cost is all of handling one (layer, expert) pair "
        "(its copies, launches and index transfer), not an extra on top of the copy"
    )
    role = ["calibration"] + ["prediction"] * (len(b) - 1)

    def fit_rows(key: str, measured, predicted, quantity: str, calibrated_on: str) -> list[Comparison]:
        c = {"batch": b, "measured": measured, "predicted": predicted, "role": role}
        return _split(
            c, key, source=h200, quantity=quantity, calibrated_on=calibrated_on, cache=none, notes=(fit_note,)
        )

    fits = {}
    for mode in ("uncoalesced", "coalesced"):
        d = g["modes"][mode]
        fits[mode] = f"{d['fit_b1']['engine_seconds_per_touched_expert'] * 1e6:.3g} µs"
        q = f"net tok/s, {mode}, cost per touched expert fitted at B = 1 ({fits[mode]})"
        out += fit_rows(f"h200-{mode}-fit-B1", d["measured"], d["fit_b1"]["predicted"], q,
                        f"the {mode} B = 1 row (engine_seconds_per_touched_expert)")  # fmt: skip
    q = ("coalesced / uncoalesced net tok/s (baseline uncoalesced), each mode's cost per touched "
         f"expert fitted at B = 1 ({fits['coalesced']} coalesced, {fits['uncoalesced']} uncoalesced)")  # fmt: skip
    return out + fit_rows(
        "h200-multiple-fit-B1", g["multiple_measured"], g["multiple_fit_b1"], q, "each mode's B = 1 row"
    )


def comparisons() -> list[Comparison]:
    """Every published comparison (docs/sources.md) the model is held against, on today's code.

    Single-stream GLM-5.2 (colibri, seed 000), bigrig's concurrency curve (engine terms fitted on
    two points; the roofline alone with one bandwidth fitted at B = 1), the witnessed H200
    bench and mlx-lm#1438's sweep predicted from nothing (:func:`mlx_zero_fit`). Calibration
    points reproduced are ``consistency`` rows; the rest are predictions.
    """
    out = _colibri_rows()
    out += _single_stream_rows()
    out += _bigrig_rows()
    out += _h200_rows(gpu_bench_check())
    out += _colibri_i5_zero_fit_rows()
    out += _zero_fit_sweep_rows()
    return out


@dataclass(frozen=True)
class PublishedSweep:
    """A published sweep of one configuration over expert-cache sizes: each point's cache in GB
    (as the source gives it; GB = 1e9 bytes), tok/s and cache hit rate. The points file calibrates on some of its
    sizes and leaves the others empty; validate predicts those and compares."""

    source: str
    points: tuple[tuple[float, float, float], ...]

    def at_gib(self, cache_gib: float) -> tuple[float, float] | None:
        """(tok/s, hit rate) of the point at ``cache_gib`` GiB (the points file's sizes, GB
        rounded to 0.01 GiB), or None where the sweep has none."""
        for gb, tok_s, hit in self.points:
            if abs(gb * GB / GiB - cache_gib) < 0.01:
                return tok_s, hit
        return None

    @property
    def peak_gib(self) -> float:
        """The size (GiB) of the sweep's highest tok/s."""
        return max(self.points, key=lambda p: p[1])[0] * GB / GiB


#: mlx-lm#1438's sweep of its materialized expert cache (GLM-5.2 4-bit affine, Apple M5 Max with
#: 128 GB, everything else fixed; the thread's comment of 2026-07-22, docs/sources.md): its 10, 20
#: and 75 GB rows are the points file's calibration; 30-60 GB are predicted and compared
MLX_1438_SWEEP = PublishedSweep(
    "mlx-lm#1438, the thread's sweep of the materialized cache (2026-07-22)",
    (
        (10, 0.40, 0.00),
        (20, 0.48, 0.24),
        (30, 0.55, 0.40),
        (35, 0.57, 0.44),
        (40, 0.46, 0.46),
        (50, 0.45, 0.51),
        (60, 0.34, 0.55),
        (75, 0.17, 0.60),
    ),
)


def zero_fit_one_stream(model: MoEModel, hw: Hardware, workload: Workload, prior: Locality) -> dict[str, Any]:
    """One stream (B = 1) on ``workload``'s cache predicted from nothing, as a zero-fit ``moeroof
    plan`` runs it: the skew prior's routing with one stream's locality at the centre of
    ``prior`` (the model's, :meth:`moeroof.models.locality.Locality.committed_for`, less the
    published single stream judged: a row is never predicted from itself).
    ``hit`` with ``hit_low``/``hit_high`` over the two priors' ends (one at a time, the other at
    its centre); ``tok_s`` at the engine priors (:func:`moeroof.models.engine_prior.prior_band`)
    with the band of the engine priors' ends at the centre routing and at each routing prior's
    ends; ``prior``: the locality prior's label."""
    from moeroof.models.local_routing import with_locality
    from moeroof.models.plan import dirichlet_routing, prior_routing

    centre = prior_routing(model)
    rho, c_e = prior.paired_for([0.05, 0.95], model.experts, model.top_k)
    skew_ends = [dirichlet_routing(model, a, f"Dirichlet α={a:.2g}") for a in committed_skew_prior().alpha_range]
    # the centre, each skew end at the locality's centre, each locality end at the skew's centre
    routes = [with_locality(model, r, prior, workload=workload) for r in (centre, *skew_ends)]
    routes += [with_locality(model, centre, (float(r), float(c), prior.label)) for r, c in zip(rho, c_e)]
    hits = [float(plan(model, hw, workload, r, [1]).cache_hit_rate[0]) for r in routes]
    bands = [prior_band(model, hw, workload, r, [1]) for r in routes]
    return {
        "hit": hits[0],
        "hit_low": min(hits),
        "hit_high": max(hits),
        "tok_s": float(bands[0].net_tok_s[0]),
        "tok_s_low": min(float(b.low[0]) for b in bands),
        "tok_s_high": max(float(b.high[0]) for b in bands),
        "prior": prior.label,
    }


def mlx_zero_fit() -> list[dict[str, Any]]:
    """mlx-lm#1438's sweep (:data:`MLX_1438_SWEEP`) predicted from nothing
    (:func:`zero_fit_one_stream`) on the points file's box and policy (GLM-5.2 on
    ``apple-m4-max``, one global LRU, its reads not through the page cache: the plan's default):
    per size, ``gb``, the measured ``hit_rate`` and ``tok_s``, and the prediction (``predicted``:
    :func:`zero_fit_one_stream`'s dict)."""
    model, hw = load_model("glm-5.2"), load_hardware("apple-m4-max")
    prior = Locality.committed_for(model, without=("mlx-lm-1438",))  # this engine held out
    return [
        {
            "gb": float(gb),
            "hit_rate": float(hit),
            "tok_s": float(tok_s),
            "predicted": zero_fit_one_stream(model, hw, Workload(cache_bytes=gb * GB, cache_policy="lru"), prior),
        }
        for gb, tok_s, hit in MLX_1438_SWEEP.points
    ]


def colibri_i5_cache(model: MoEModel, hw: Hardware) -> float:
    """colibri's i5 box's expert cache (bytes): what its RAM leaves beside the OS, the dense band
    and a 512-token context (the colibri rows' context)."""
    return float(hw.ram_bytes - hw.os_reserve_bytes - model.non_routed_bytes - 512 * model.kv_bytes_per_token)


def zero_fit_calibration(prior: str) -> str:
    """What a zero-fit row is calibrated on, its locality prior's label ``prior`` named."""
    return (
        "nothing of this engine: plan at B = 1 with the skew prior's routing, one stream's locality at the centre "
        f"of the {prior}, and the engine priors"
    )


def _zero_fit_rows(source: str, quantity: str, cache: str, at: tuple, zs: list, rows: tuple, axis: str = "B"):
    """Comparisons predicted from nothing: ``zs`` :func:`zero_fit_one_stream`'s dicts, one per point
    of ``at``; ``rows`` (case, what, measured values) for the hit rate (in points), then tok/s at
    the engine priors (relative)."""
    return [
        Comparison(case, source, f"{quantity}: {what}", "prediction", zero_fit_calibration(zs[0]["prior"]), cache, at, measured,
                   tuple(z[key] for z in zs), axis=axis, error_unit=unit,
                   low=tuple(z[f"{key}_low"] for z in zs), high=tuple(z[f"{key}_high"] for z in zs))
        for (case, what, measured), key, unit in zip(rows, ("hit", "tok_s"), ("points", "relative"))
    ]  # fmt: skip


def _colibri_i5_zero_fit_rows() -> list[Comparison]:
    """colibri's i5 box (GLM-5.2, one stream, the cache what its RAM leaves, one LRU per layer, as
    :func:`single_stream_predictions` runs it) predicted from nothing (:func:`zero_fit_one_stream`):
    the hit rate its ``-hit`` row calibrates the Zipf skew on, and tok/s, against the measured."""
    model, hw, ref = load_model("glm-5.2"), load_hardware("nvme-gen4"), SINGLE_STREAM["colibri-i5"]
    w = Workload(context_tokens=512, cache_bytes=colibri_i5_cache(model, hw), cache_policy="lru", cache_scope="layer")
    rows = (
        ("colibri-i5-hit-zero-fit", "cache hit rate at B=1", (float(ref.value["hit"]),)),
        ("colibri-i5-tok-s-zero-fit", "tok/s at B=1, engine at the box's priors", (float(ref.value["tok_s"]),)),
    )
    source = ref.source + (" (hobby project)" if ref.hobby else "")
    cache = "lru, one cache per layer (colibri's), steady state"
    z = zero_fit_one_stream(model, hw, w, Locality.committed_for(model, without=("colibri-i5",)))
    return _zero_fit_rows(source, ref.what, cache, (1,), [z], rows)


def _zero_fit_sweep_rows() -> list[Comparison]:
    """:func:`mlx_zero_fit` as two comparisons: hit rates (points) and tok/s at the engine priors."""
    sweep = mlx_zero_fit()
    cache = "lru, one global cache (the points file's), steady state; reads not through the page cache (plan's default)"
    rows = (
        ("mlx-lm-1438-zero-fit-hit", "cache hit rate", tuple(r["hit_rate"] for r in sweep)),
        ("mlx-lm-1438-zero-fit-tok-s-at-priors", "tok/s, engine at the box's priors", tuple(r["tok_s"] for r in sweep)),
    )
    quantity = "GLM-5.2 4-bit, Apple M5 Max 128 GB (apple-m4-max), one stream"
    at = tuple(int(r["gb"]) for r in sweep)
    return _zero_fit_rows(MLX_1438_SWEEP.source, quantity, cache, at, [r["predicted"] for r in sweep], rows, "cache_gb")


# ----------------------------------------------------------------------------- single-stream caches

#: Qwen3-30B-A3B single-stream decode, one LRU cache per layer (docs/sources.md, "Single-stream
#: expert caches"): gajsanders/moe-trace finding 007, a hobby project
SINGLE_STREAM_CACHE = Reference(
    "Qwen3-30B-A3B (128 experts, top-8, 48 layers), MLX 4-bit, 25 prompts, decode: per-layer LRU hit rate at batch 1",
    {
        "experts": 128,
        "top_k": 8,
        "layers": 48,
        "capacity_experts": (8, 16, 32, 64),
        "hit_rate": (0.424, 0.647, 0.810, 0.918),
    },
    "gajsanders/moe-trace finding 007 (docs/sources.md)",
    hobby=True,
)
#: the two sizes :func:`single_stream_cache_check` calibrates on; the other two are predicted
CACHE_CALIBRATION_SIZES = (8, 32)
#: the policies predicted beside LRU (no published value: what a user would act on)
OTHER_POLICIES = ("lfu", "s3fifo", "arc", "belady")
#: steps of each stream not counted by the zero-fit replay: the fewest tokens (64 / K = 8) that can
#: fill the largest cache of the column, so every counted request meets a cache that could be full
ZERO_FIT_WARMUP_STEPS = 8


def single_stream_cache_points(calibrate_on: Sequence[int] = CACHE_CALIBRATION_SIZES):
    """The POINTS of the single-stream column (:class:`moeroof.data.points.Point`, batch 1, scope
    ``layer``): LRU at 8/16/32/64 experts per layer with the published value at the sizes of
    ``calibrate_on`` (calibration) and empty elsewhere, then the same four sizes under each of
    :data:`OTHER_POLICIES`, empty (predicted)."""

    ref = SINGLE_STREAM_CACHE.value
    pts = []
    for policy in ("lru",) + OTHER_POLICIES:
        for cap, hit in zip(ref["capacity_experts"], ref["hit_rate"]):
            value = float(hit) if policy == "lru" and cap in calibrate_on else None
            pts.append(Point("hit_rate", 1, capacity_experts=float(cap), policy=policy, scope="layer", value=value))
    return pts


@functools.lru_cache(maxsize=4)
def _single_stream_fit(calibrate_on: tuple[int, ...], seeds: tuple[int, ...], bootstrap: int):

    ref = SINGLE_STREAM_CACHE.value
    pts = single_stream_cache_points(calibrate_on)
    return pts, fit_routing(pts, ref["experts"], ref["top_k"], ref["layers"], seeds=seeds, bootstrap=bootstrap)


def single_stream_cache_check(
    calibrate_on: Sequence[int] = CACHE_CALIBRATION_SIZES, seeds: Sequence[int] = (0, 1, 2), bootstrap: int = 8
) -> dict[str, Any]:
    """Fit the published single-stream per-layer LRU column on two sizes, predict the other two
    and the other policies (docs/validation.md).

    The POINTS (:func:`single_stream_cache_points`): Qwen3-30B-A3B, E = 128, K = 8, L = 48,
    batch 1, one cache per layer; LRU at 8 and 32 experts per layer carry the published 42.4 %
    and 81.0 % (calibration), LRU at 16 and 64 and all four sizes under LFU, S3-FIFO, ARC and
    Belady are predicted. :func:`moeroof.fit.routing.fit_routing` runs at ``seeds``
    (0, 1, 2) with ``bootstrap`` 8 replicate draws (about 15 s on a 2-core box; memoised).

    **What two hit rates identify.** Two calibration rows identify two knobs, and
    ``fit_routing`` takes them in its order: the *skew* (every row moves it) and the stickiness
    *ρ* (a hit-rate row moves it). Held: the warm *history* at its default (256 tokens of the
    same stream before the counted steps: a warm, steady-state cache, as a decode of 25 prompts
    mostly is) — with only two rows a third knob would be fitted to noise; per-stream
    *locality* is off, because one batch size cannot tell a stream's own hot set from
    stickiness (both make one stream reuse its experts; only the same cache seen by one stream
    and by many separates them). The family (Dirichlet α or Zipf s) is chosen by the fit, and
    every family that meets both rows within tolerance widens the bands. So the two sizes pin
    the curve's level (skew) and its short-range reuse (ρ: the 8-expert cache is almost the
    previous token's experts); the held-out 16 and 64 test the shape between and beyond.

    Returns ``fit`` (the :class:`~moeroof.fit.routing.RoutingFit`), ``calibrate_on``,
    ``seeds``, ``bootstrap`` and ``rows``: one dict per POINTS row (``policy``,
    ``capacity_experts``, ``role`` — ``calibration``, ``prediction`` (LRU held out: a published
    value to compare) or ``projection`` (other policies: nothing measured) —, ``measured``
    (None when unpublished or a projection), ``predicted``, ``low``, ``high``, ``error_points``
    (predicted − measured, in points, where measured)).
    """
    cal = tuple(int(c) for c in calibrate_on)
    pts, fit = _single_stream_fit(cal, tuple(int(s) for s in seeds), int(bootstrap))
    ref = dict(zip(SINGLE_STREAM_CACHE.value["capacity_experts"], SINGLE_STREAM_CACHE.value["hit_rate"]))
    rows = []
    for p, r in zip(pts, fit.rows):
        cap = int(p.capacity_experts)
        if p.policy != "lru":
            role, measured = "projection", None
        else:
            role, measured = ("calibration" if cap in cal else "prediction"), float(ref[cap])
        row = {"policy": p.policy, "capacity_experts": cap, "role": role, "measured": measured}
        row |= {k: r[k] for k in ("predicted", "low", "high")}
        rows.append(row | {"error_points": None if measured is None else 100.0 * (r["predicted"] - measured)})
    return {"fit": fit, "calibrate_on": cal, "seeds": tuple(seeds), "bootstrap": int(bootstrap), "rows": rows}


def trace_single_stream_hit_rates(
    trace=None,
    capacities: Sequence[int] = (8, 16, 32, 64),
    *,
    policy: str = "lru",
    warmup_steps: int = ZERO_FIT_WARMUP_STEPS,
) -> dict[str, Any]:
    """Single-stream hit rates of one cache per layer replayed on a trace, nothing fitted.

    Each stream alone (:func:`moeroof.cachesim.requests_from_trace` with ``streams=[s]``),
    ``capacity`` experts in each layer's cache (scope ``layer``), the first ``warmup_steps``
    steps simulated but not counted; the hit rate of each capacity is the mean over the
    streams. ``trace``: a path, a :class:`~moeroof.data.io.Trace`-like object with ``topk`` and
    ``experts``, or None for the embedded ``data/traces/qwen3-30b-a3b-like.npz``. Returns
    ``capacity_experts``, ``hit_rate`` (mean over streams), ``per_stream`` (streams ×
    capacities), ``warmup_steps``, ``steps``, ``streams``, ``layers``.
    """

    if trace is None:
        trace = DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz"
    if not hasattr(trace, "topk"):
        trace = read_trace(trace)
    topk = np.asarray(trace.topk)
    steps, streams, layers, _ = topk.shape
    caps = [int(c) for c in capacities]
    per = np.zeros((streams, len(caps)))
    for s in range(streams):
        req = cache.requests_from_trace(topk, int(trace.experts), streams=np.array([s]))
        for j, c in enumerate(caps):
            per[s, j] = cache.simulate(
                req, c * layers, policy=policy, scope="layer", warmup_steps=warmup_steps
            ).hit_rate
    return {
        "capacity_experts": caps,
        "hit_rate": per.mean(axis=0).tolist(),
        "per_stream": per.tolist(),
        "warmup_steps": int(warmup_steps),
        "steps": int(steps),
        "streams": int(streams),
        "layers": int(layers),
        "policy": policy,
    }


def zero_fit_single_stream_check(trace=None) -> dict[str, Any]:
    """The published single-stream LRU column against the embedded trace, nothing fitted
    (:func:`trace_single_stream_hit_rates` with its defaults): per size ``measured``,
    ``predicted``, ``error_points`` (predicted − measured, in points), plus the replay's
    settings."""
    ref = SINGLE_STREAM_CACHE.value
    z = trace_single_stream_hit_rates(trace, ref["capacity_experts"])
    z["measured"] = list(ref["hit_rate"])
    z["predicted"] = z["hit_rate"]
    z["error_points"] = [100.0 * (p - m) for p, m in zip(z["predicted"], z["measured"])]
    return z


#: DeepSeek-V3/R1 on GPQA, per layer (johanna-rock/moe-balance; docs/sources.md): the hottest
#: expert's share of a layer's picks (min, median, max) and the top 32 of 256 experts' share (range)
DEEPSEEK_SKEW = Reference(
    "DeepSeek-V3/R1 (256 routed experts, top-8), GPQA: per-layer routing skew",
    {"hottest_share": (0.0125, 0.0236, 0.0519), "top32_share": (0.25, 0.54)},
    "johanna-rock/moe-balance (docs/sources.md)",
)
#: routings held against it besides the skew prior: a flat one, and the Zipf exponent that was
#: fit-plan's default (uniform was plan's) before both took the skew prior on 2026-12-06
OTHER_ROUTINGS = (("uniform", "the uniform routing"), ("zipf:0.8", "a Zipf routing, s = 0.8"))


def _layer_shares(pi: np.ndarray, k: int) -> tuple[float, float]:
    """The hottest expert's and the top 32's shares of a layer's picks (π/K), each the median
    over the routing's layers (the layers draw their own popularity: a mean over layers first
    would flatten it)."""
    p = -np.sort(-np.asarray(pi, dtype=float), axis=1) / k
    return float(np.median(p[:, 0])), float(np.median(p[:, :32].sum(axis=1)))


def skew_comparisons() -> list[Comparison]:
    """Zero-fit routings against a published routing skew: DeepSeek-V3's hottest expert's share
    of a layer's picks (the median layer) and the top 32 experts' share (the middle of the
    layers' range), for the ``deepseek-v3`` preset's E and K, a share of picks being π/K.

    - ``deepseek-v3-skew-prior-held-out`` (prediction): the skew prior fitted without DeepSeek-V3
      (Qwen3 alone: the committed study's held-out record), its median over
      :data:`moeroof.studies.skew_prior.HOTTEST_DRAWS` layer draws; the band its 5 and 95 % α;
    - ``deepseek-v3-skew-prior`` (consistency): the committed prior, which DeepSeek-V3's hottest
      share helped fit — the routing ``plan`` and ``fit-plan`` start from;
    - ``deepseek-v3-skew-uniform``, ``-zipf`` (prediction): :data:`OTHER_ROUTINGS`, from
      :func:`moeroof.models.plan.routing_from_spec`."""

    model = load_model("deepseek-v3")
    e, k = model.experts, model.top_k

    def shares(alpha: float) -> tuple[float, float]:
        return float(top_share(alpha, e, k, 1)), float(top_share(alpha, e, k, 32))

    prior = committed_skew_prior()
    rows: list[tuple[str, str, str, Any, Any, Any]] = []  # (key, role, calibrated on, predicted, low, high)
    held = prior.held_out.get("deepseek-v3")
    if held and held.get("prior_range"):
        a_lo, a_hi = (float(v) for v in held["prior_range"])
        ends = np.array([shares(a_lo), shares(a_hi)])
        cal = (
            f"the skew prior without DeepSeek-V3 ({held.get('from', 'the other models')}): α = "
            f"{float(held['prior_alpha']):.2g} (5–95 % {a_lo:.2g}–{a_hi:.2g}); nothing of DeepSeek-V3"
        )
        pred = shares(float(held["prior_alpha"]))
        rows.append(("deepseek-v3-skew-prior-held-out", "prediction", cal, pred, ends.min(axis=0), ends.max(axis=0)))
    cal = (
        f"the skew prior (α = {prior.alpha:.2g}, fitted on {', '.join(prior.sources)}: this median hottest share "
        "among them), the routing plan and fit-plan start from"
    )
    rows.append(("deepseek-v3-skew-prior", "consistency", cal, shares(prior.alpha), (), ()))
    for spec, who in OTHER_ROUTINGS:
        name = spec.split(":", 1)[0]  # uniform, zipf: a key without dots (the pins are TOML tables)
        pred = _layer_shares(routing_from_spec(spec, model).pi, k)
        rows.append(
            (f"deepseek-v3-skew-{name}", "prediction", f"nothing: {who} ({spec}), no skew knob fitted", pred, (), ())
        )
    ref = DEEPSEEK_SKEW
    hottest, (lo32, hi32) = ref.value["hottest_share"][1], ref.value["top32_share"]
    quantity = (
        f"DeepSeek-V3 (E={e}, K={k}): hottest expert's share of a layer's picks (the median layer) and the top "
        f"32 experts' share (the layers' range {lo32:.0%}–{hi32:.0%}, its middle), in that order"
    )
    measured = (hottest, 0.5 * (lo32 + hi32))

    def floats(v) -> tuple[float, ...]:
        return tuple(float(x) for x in v)

    return [
        Comparison(key, ref.source, quantity, role, cal, "none (routing statistics)", (1, 32), measured, floats(pred),
                   axis="top experts", low=floats(lo), high=floats(hi))
        for key, role, cal, pred, lo, hi in rows
    ]  # fmt: skip


def cache_comparisons() -> list[Comparison]:
    """The published single-stream cache column (docs/sources.md) as :class:`Comparison` rows, errors in
    points (``error_unit = "points"``, ``axis = "capacity_experts"``, every row at batch 1):

    - ``qwen3-single-stream-lru-fit-calibration`` (consistency): the 8- and 32-expert rows the
      fit was calibrated on, reproduced;
    - ``qwen3-single-stream-lru-fit`` (prediction): the 16- and 64-expert rows, held out;
    - ``qwen3-single-stream-lru-zero-fit``: the four sizes replayed on the embedded trace,
      nothing fitted — a *consistency* row, because ``scripts/make_data.py`` matched the
      trace's per-stream locality to this column (16, 32 and 64 experts), so it only shows the
      embedded data still stands for it.

    The other policies' predictions (:func:`single_stream_cache_check`, role ``projection``)
    have no measured value and are not comparisons: they are shown, never pinned.
    """
    ref = SINGLE_STREAM_CACHE
    source = ref.source + " (hobby project)"
    quantity = "single-stream (B=1) hit rate of one LRU cache per layer, Qwen3-30B-A3B (E=128, K=8, L=48)"
    chk = single_stream_cache_check()
    fit = chk["fit"]
    label = fit.family_fits[[f.family for f in fit.family_fits].index(fit.family)].knobs.label()
    cal_label = (
        f"fit-routing on LRU at {' and '.join(str(c) for c in chk['calibrate_on'])} experts per layer "
        f"(fitted {', '.join(fit.fitted)}: {label}; seeds {list(chk['seeds'])}, bootstrap {chk['bootstrap']})"
    )
    lru = [r for r in chk["rows"] if r["policy"] == "lru"]
    c = {k: [r[k] for r in lru] for k in ("measured", "predicted", "role")}
    c["batch"] = [r["capacity_experts"] for r in lru]
    c["notes"] = [f"{r['capacity_experts']} experts: band {r['low']:.1%}–{r['high']:.1%}" for r in lru]
    cache_label = "lru, one cache per layer (simulated on traces drawn from the fitted knobs)"
    out = _split(c, "qwen3-single-stream-lru-fit", source=source, quantity=quantity, calibrated_on=cal_label,
                 cache=cache_label, axis="capacity_experts", error_unit="points")  # fmt: skip
    z = zero_fit_single_stream_check()
    out.append(
        Comparison(
            "qwen3-single-stream-lru-zero-fit",
            source,
            quantity + ", replayed on the embedded trace",
            "consistency",
            "nothing fitted here; the embedded trace's per-stream locality was matched to this column "
            "(scripts/make_data.py)",
            f"lru, one cache per layer, each of the trace's {z['streams']} streams alone, "
            f"first {z['warmup_steps']} of {z['steps']} steps not counted",
            tuple(z["capacity_experts"]),
            tuple(z["measured"]),
            tuple(z["predicted"]),
            axis="capacity_experts",
            error_unit="points",
        )
    )
    return out
