"""Do fit-plan's bands cover a cache curve? Simulated one-stream truths that include the popularity's family.

:mod:`moeroof.studies.plan_coverage` counts coverage where seed 003's rows are (a measured
per-layer histogram: the popularity is known). This study counts it where mlx-lm#1438's are: one
stream of GLM-5.2 on the ``apple-m4-max`` box, measured at three expert-cache sizes — tok/s and hit
rate at the rows ``data/points/mlx-lm-1438.plan-points`` measures (10, 20 and 75 GB) — and the
rest of the curve predicted (its empty rows). Nothing of the popularity is known there, so fit-plan
runs as a newcomer runs it, every flag at its default: the skew prior's routing (a Dirichlet),
its skew and stickiness fitted to the hit rates, the memory knob the rows rule in, the other skew
family fitted beside it (:func:`moeroof.fit.plan.with_other_family`'s rule).

Each truth is a box drawn from fit-plan's priors, from its own generator (the same whatever the
count): the per-step engine cost log-uniform over
:data:`moeroof.fit.plan.PRIOR_SECONDS_PER_STEP`'s range, the per-token cost uniform over
:data:`~moeroof.fit.plan.PRIOR_SECONDS_PER_AGENT_TOKEN`'s, a per-touched-expert cost
log-uniform over 0.01–0.8 ms, an SSD scale log-uniform over 0.3–1.5, one stream's stickiness and
per-stream locality one draw of the committed locality prior (paired by strength), the OS's
reclaim work κ uniform over :data:`~moeroof.fit.plan.PRIOR_RECLAIM_PENALTY`'s range and its shape
n uniform over 1–3 — and two structural choices fit-plan is not told: the popularity's family
(Zipf, s log-uniform over 0.6–1.4, or Dirichlet, α log-uniform over the skew prior's 5–95 %;
alternating) and the terms combined by ``max`` or ``sum`` (alternating in pairs). The rows are
simulated by :func:`moeroof.fit.plan.predict_points` at a simulation seed no fit uses, with a
lognormal noise of :data:`NOISE` on the calibration rows' tok/s and a normal one of
:data:`HIT_NOISE` on their hit rates; a predicted row's truth is a new measurement too (its
simulated values with the same noise, drawn apart: the band is a new measurement's). The realised
shares inside the bands (tok/s and hit rates apart) are reported whatever they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from moeroof.core.paths import DATA_DIR
from moeroof.core.results import Result
from moeroof.core.rng import generator
from moeroof.core.stats import Interval, cluster_share_interval
from moeroof.data.plan_points import read_plan_points
from moeroof.data.presets import load_hardware, load_model
from moeroof.data.skew_prior import committed_skew_prior
from moeroof.fit.plan import (
    PRIOR_RECLAIM_EXPONENT,
    PRIOR_RECLAIM_PENALTY,
    PRIOR_SECONDS_PER_AGENT_TOKEN,
    PRIOR_SECONDS_PER_STEP,
    PlanKnobs,
    fit_plan,
    predict_points,
)
from moeroof.models.locality import Locality
from moeroof.models.plan import routing_from_spec

# the measurement noise and the truths' simulation seed of fit-plan's other coverage study
from moeroof.studies.plan_coverage import DRAWN_KNOBS, HIT_NOISE, NOISE, TRUTH_SEED

__all__ = ["POINTS", "NOISE", "HIT_NOISE", "TRUTH_SEED", "ZIPF_S", "CurveCoverage", "curve_coverage"]

#: the points file under data/points whose rows the study takes: its measured rows calibrate (a
#: truth's values in their place), its empty rows are predicted
POINTS = "mlx-lm-1438.plan-points"
#: the range of a Zipf truth's exponent s (log-uniform)
ZIPF_S = (0.6, 1.4)
#: the range of a truth's reclaim shape n (uniform): the ends of the prior fit-plan holds n at
RECLAIM_EXPONENT = (PRIOR_RECLAIM_EXPONENT[0], PRIOR_RECLAIM_EXPONENT[2])


@dataclass(frozen=True)
class CurveCoverage(Result):
    """``truths``: one dict per truth (its family and skew parameter, overlap, knobs, and per
    predicted row the truth's tok/s and hit rate, the predictions and bands, whether each truth
    is inside); ``inside_tok_s`` and ``inside_hit_rate``: the shares of predicted rows inside
    their bands, over ``rows`` rows; ``calibration``: the calibrated cache sizes (GiB)."""

    truths: tuple[dict, ...]
    inside_tok_s: float
    inside_hit_rate: float
    rows: int
    calibration: tuple[float, ...] = ()

    def intervals(self) -> dict[str, Interval]:
        """``tok_s`` and ``hit_rate``: each share inside with its 5–95 % interval over the truths
        resampled (:func:`moeroof.core.stats.cluster_share_interval`: a truth's rows share its knobs)."""
        return {
            name: cluster_share_interval([[r[key] for r in t["rows"]] for t in self.truths])
            for name, key in (("tok_s", "inside"), ("hit_rate", "hit_rate_inside"))
        }


def _truth(j: int, prior: Locality, model) -> tuple[str, PlanKnobs, dict]:
    """Truth ``j``: its routing spec, its knobs and what was drawn (module docstring)."""
    rng = generator("curve-coverage", j)
    u = rng.random(9)
    (rho,), (c_per_expert,) = prior.paired_for([u[4]], model.experts, model.top_k)
    if j % 2 == 0:
        s = math.exp(math.log(ZIPF_S[0]) + u[7] * math.log(ZIPF_S[1] / ZIPF_S[0]))
        family, parameter = "zipf", s
    else:
        lo, hi = committed_skew_prior().for_experts(model.experts).alpha_range
        family, parameter = "dirichlet", math.exp(math.log(lo) + u[7] * math.log(hi / lo))
    lo_step, _, hi_step = PRIOR_SECONDS_PER_STEP
    knobs = PlanKnobs(
        engine_seconds_per_step=float(math.exp(math.log(lo_step) + u[0] * math.log(hi_step / lo_step))),
        engine_seconds_per_agent_token=float(PRIOR_SECONDS_PER_AGENT_TOKEN[2] * u[1]),
        engine_seconds_per_touched_expert=float(math.exp(math.log(1e-5) + u[2] * math.log(80.0))),
        ssd_scale=float(math.exp(math.log(0.3) + u[3] * math.log(5.0))),
        rho=float(rho),
        c=float(c_per_expert) * model.experts,
        reclaim_penalty=float(PRIOR_RECLAIM_PENALTY[2] * u[5]),
        reclaim_exponent=float(RECLAIM_EXPONENT[0] + u[6] * (RECLAIM_EXPONENT[1] - RECLAIM_EXPONENT[0])),
    )
    drawn = {"family": family, "skew_parameter": float(parameter), "locality_c_per_expert": float(c_per_expert)}
    return f"{family}:{parameter:.10g}", knobs, drawn


def curve_coverage(truths: int = 8, *, progress: Callable[[int, int], None] | None = None) -> CurveCoverage:
    """Fit-plan's band coverage on ``truths`` simulated one-stream cache curves (module docstring)."""
    if int(truths) < 1:
        raise ValueError(f"truths must be >= 1, got {truths!r}")
    model, hw = load_model("glm-5.2"), load_hardware("apple-m4-max")
    prior = Locality.committed()
    shipped = read_plan_points(DATA_DIR / "points" / POINTS)
    pts = [replace(p, net_tok_s=None, hit_rate=None) for p in shipped]
    cal = [i for i, p in enumerate(shipped) if p.net_tok_s is not None]
    out, inside_net, inside_hit = [], 0, 0
    for j in range(int(truths)):
        spec, knobs, drawn = _truth(j, prior, model)
        overlap = ("max", "sum")[(j // 2) % 2]
        net, hit = predict_points(
            pts, model, hw, routing_from_spec(spec, model), knobs, seed=TRUTH_SEED, overlap=overlap
        )
        rng = generator("curve-coverage-noise", j)
        noise, hit_noise = np.exp(rng.normal(0.0, NOISE, size=len(cal))), rng.normal(0.0, HIT_NOISE, size=len(cal))
        measured = list(pts)
        for k, i in enumerate(cal):
            h = float(np.clip(hit[i] + hit_noise[k], 0.0, 1.0))
            measured[i] = replace(pts[i], net_tok_s=float(net[i] * noise[k]), hit_rate=h)
        fit = fit_plan(measured, model, hw, routing_from_spec("prior", model), routing_is_spec=True, locality=prior)
        # a predicted row's truth is a new measurement, as the band's is: the simulated values with the
        # calibration rows' noise, drawn from a stream of its own (the calibration draws unchanged)
        held = generator("curve-coverage-held-out", j)
        held_net, held_hit = np.exp(held.normal(0.0, NOISE, size=len(pts))), held.normal(0.0, HIT_NOISE, size=len(pts))
        rows = []
        for i, row in enumerate(fit.rows):
            if i in cal:
                continue
            truth, truth_hit = float(net[i] * held_net[i]), float(np.clip(hit[i] + held_hit[i], 0.0, 1.0))
            ok_net = bool(row["low"] <= truth <= row["high"])
            ok_hit = bool(row["hit_rate_low"] <= truth_hit <= row["hit_rate_high"])
            inside_net, inside_hit = inside_net + ok_net, inside_hit + ok_hit
            rows.append(
                {
                    "cache_gib": row["cache_gib"],
                    "truth": truth,
                    "expected": float(net[i]),
                    **{k: row[k] for k in ("predicted", "low", "high")},
                    "inside": ok_net,
                    "truth_hit_rate": truth_hit,
                    "expected_hit_rate": float(hit[i]),
                    **{k: row[k] for k in ("predicted_hit_rate", "hit_rate_low", "hit_rate_high")},
                    "hit_rate_inside": ok_hit,
                }
            )
        fields = (*DRAWN_KNOBS, "reclaim_exponent")
        chosen = {"overlap_chosen": fit.overlap, "family_chosen": fit.knobs.get("skew", {}).get("family")}
        out.append(
            {"truth": j, "overlap": overlap, **drawn, **{k: getattr(knobs, k) for k in fields}, **chosen, "rows": rows}
        )
        if progress is not None:
            progress(j + 1, int(truths))
    n = sum(len(t["rows"]) for t in out)
    calibration = tuple(float(shipped[i].cache_gib) for i in cal)
    return CurveCoverage(tuple(out), inside_net / max(n, 1), inside_hit / max(n, 1), n, calibration)
