"""Do fit-plan's bands cover? Simulated truths that include the structural choices.

A 90 % band (fit-plan's 5–95 %) should hold about 90 % of new measurements. Where the truth is
known it can be counted: each truth here is a box drawn from the priors fit-plan holds — the
per-step engine cost log-uniform over :data:`moeroof.fit.plan.PRIOR_SECONDS_PER_STEP`'s
range, the per-token cost uniform over :data:`~moeroof.fit.plan.PRIOR_SECONDS_PER_AGENT_TOKEN`'s,
a per-touched-expert cost log-uniform over 0.1–1 ms, an SSD scale log-uniform over 0.3–1.5, one
stream's stickiness and per-stream locality one draw of the committed locality prior (the two
paired by strength, as :meth:`moeroof.models.locality.Locality.draws` pairs them), the OS's
reclaim work κ at the centre of :data:`moeroof.fit.plan.PRIOR_RECLAIM_PENALTY` (0) for half the
truths and uniform up to its high end for the rest, the OS page cache off
(:data:`moeroof.fit.plan.PRIOR_PAGE_CACHE_SHARE`'s centre) for half the truths and its share of
the RAM the expert cache leaves uniform up to 1 for the rest — each truth from its own
generator, the same whatever the count — and three structural choices fit-plan is not told: the
terms combined by ``max`` or ``sum`` (alternating), whether the memory the engine holds slows its
reads (κ, which fit-plan holds at its prior) and whether its reads go through the page cache
(held off, its high end in the bands where it meets the calibration rows within 2 σ). Its rows are seed 003's
settings (:data:`POINTS`: GLM-5 NVFP4 on GB10, its per-layer histogram), simulated by
:func:`moeroof.fit.plan.predict_points` at a simulation seed no fit uses, with a
lognormal measurement noise of :data:`NOISE` on the calibration rows' tok/s and a normal one of
:data:`HIT_NOISE` on their hit rates; a predicted row's truth is a new measurement too (its
simulated rate times the same noise, drawn apart: the band is a new measurement's); fit-plan sees the four M = 8 rows a user of seed 003 has
(data/points/seed003-public.plan-points: tok/s at 20 GiB on one booster and on the pair, at 40
and 80 GiB on the pair, and the pair's hit rates at 20 and 80 GiB) — three cache sizes of one
batch size, so its default also chooses the memory knob the rows rule in
(:func:`moeroof.fit.plan.choose_memory_knob`) — and predicts that file's withheld rows: 60 GiB,
M = 1, 16 and 32 at 80 GiB, one booster at M = 1. The realised share inside the bands is
reported whatever it is.
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
from moeroof.fit.plan import (
    PRIOR_PAGE_CACHE_SHARE,
    PRIOR_RECLAIM_PENALTY,
    PRIOR_SECONDS_PER_AGENT_TOKEN,
    PRIOR_SECONDS_PER_STEP,
    SIGMA_HIT,
    SIGMA_NET,
    PlanKnobs,
    fit_plan,
    predict_points,
)
from moeroof.models.locality import Locality
from moeroof.models.plan import routing_from_spec

__all__ = ["POINTS", "NOISE", "HIT_NOISE", "TRUTH_SEED", "PlanCoverage", "plan_coverage"]

#: the points file under data/points whose rows the study takes: measured values calibrate (a
#: truth's, in their place: tok/s and hit rate where the file has each), empty rows are predicted
POINTS = "seed003-public.plan-points"
#: lognormal measurement noise (σ of log tok/s) on the calibration rows and the truths: the noise
#: fit-plan's bands say they carry (a truth measured with less would count a band too narrow inside)
NOISE = SIGMA_NET
#: measurement noise (σ, as a share) on the calibration rows' hit rates and the truths: the bands'
#: (:data:`moeroof.data.points.MEASUREMENT_SIGMA`; 1 point before 2026-12-07, half what they carry)
HIT_NOISE = SIGMA_HIT
#: the simulation seed of the truths (fit-plan simulates at seed 0 and its band seeds 0–2)
TRUTH_SEED = 7


@dataclass(frozen=True)
class PlanCoverage(Result):
    """``truths``: one dict per truth (its knobs, overlap, and per predicted row the truth, the
    prediction, the band and whether the truth is inside); ``inside`` the share of predicted rows
    inside their band, ``rows`` how many; ``calibration``: the rows fit-plan calibrates on, as
    (B, cache GiB, ranks)."""

    truths: tuple[dict, ...]
    inside: float
    rows: int
    calibration: tuple[tuple[int, float, int], ...] = ()

    def interval(self) -> Interval:
        """The share inside with its 5–95 % interval over the truths resampled
        (:func:`moeroof.core.stats.cluster_share_interval`: a truth's rows share its knobs)."""
        return cluster_share_interval([[r["inside"] for r in t["rows"]] for t in self.truths])


#: the drawn knobs every simulated truth reports (here and in :mod:`moeroof.studies.curve_coverage`), in order
DRAWN_KNOBS = (
    "engine_seconds_per_step",
    "engine_seconds_per_agent_token",
    "engine_seconds_per_touched_expert",
    "ssd_scale",
    "rho",
    "reclaim_penalty",
)
#: the drawn knobs each truth of :func:`plan_coverage` reports: those and the page cache's share
_KNOB_COLUMNS = (*DRAWN_KNOBS, "page_cache_share")


def _truth_knobs(rng, prior, model) -> tuple:
    """A simulated box's knobs drawn from fit-plan's priors (module docstring) with ``rng``, and
    its one stream's c/E."""
    u = rng.random(7)
    # ρ and c/E paired by locality strength, as the prior's draws are (Locality.paired)
    (rho,), (c_per_expert,) = prior.paired_for([u[4]], model.experts, model.top_k)
    # κ: the prior's centre (no reclaim work) below ½, else uniform up to its high end
    kappa = 0.0 if u[5] < 0.5 else PRIOR_RECLAIM_PENALTY[2] * (2.0 * u[5] - 1.0)
    # the page cache: off (the prior's centre) below ½, else its share uniform up to the high end
    share = None if u[6] < 0.5 else PRIOR_PAGE_CACHE_SHARE[2] * (2.0 * u[6] - 1.0)
    lo, _, hi = PRIOR_SECONDS_PER_STEP
    knobs = PlanKnobs(
        engine_seconds_per_step=float(math.exp(math.log(lo) + u[0] * (math.log(hi) - math.log(lo)))),
        engine_seconds_per_agent_token=float(PRIOR_SECONDS_PER_AGENT_TOKEN[2] * u[1]),
        engine_seconds_per_touched_expert=float(math.exp(math.log(1e-4) + u[2] * math.log(10.0))),
        ssd_scale=float(math.exp(math.log(0.3) + u[3] * math.log(5.0))),
        rho=float(rho),
        c=float(c_per_expert) * model.experts,
        reclaim_penalty=float(kappa),
        page_cache_share=share,
    )
    return knobs, float(c_per_expert)


def plan_coverage(truths: int = 8, *, progress: Callable[[int, int], None] | None = None) -> PlanCoverage:
    """Fit-plan's band coverage on ``truths`` simulated truths (module docstring)."""
    if int(truths) < 1:
        raise ValueError(f"truths must be >= 1, got {truths!r}")
    model, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    routing = routing_from_spec("histograms/glm5-seed003-per-layer.csv", model)
    prior = Locality.committed()
    shipped = read_plan_points(DATA_DIR / "points" / POINTS)
    pts = [replace(p, net_tok_s=None, hit_rate=None) for p in shipped]
    cal = [i for i, p in enumerate(shipped) if p.net_tok_s is not None]
    out = []
    inside = total = 0
    for j in range(int(truths)):
        # truth j from its own stream: the same box whatever the number of truths asked for
        rng = generator("plan-coverage", j)
        knobs, c_per_expert = _truth_knobs(rng, prior, model)
        overlap = ("max", "sum")[j % 2]
        net, hit = predict_points(pts, model, hw, routing, knobs, seed=TRUTH_SEED, overlap=overlap)
        noise = np.exp(rng.normal(0.0, NOISE, size=len(cal)))
        hit_noise = rng.normal(0.0, HIT_NOISE, size=len(cal))
        measured = list(pts)
        for k, i in enumerate(cal):
            # the hit rate where seed 003 reports one: the pair's at 20 and 80 GiB
            h = float(np.clip(hit[i] + hit_noise[k], 0.0, 1.0)) if shipped[i].hit_rate is not None else None
            measured[i] = replace(pts[i], net_tok_s=float(net[i] * noise[k]), hit_rate=h)
        fit = fit_plan(measured, model, hw, routing, routing_is_spec=False, locality=prior)
        # a held-out row's truth is a new measurement, as the band's is: the simulated rate times the
        # calibration rows' noise, drawn from a stream of its own (the calibration draws unchanged)
        held_noise = np.exp(generator("plan-coverage-held-out", j).normal(0.0, NOISE, size=len(pts)))
        rows = []
        for i, row in enumerate(fit.rows):
            if i in cal:
                continue
            truth = float(net[i] * held_noise[i])
            ok = bool(row["low"] <= truth <= row["high"])
            inside += ok
            total += 1
            band = {k: row[k] for k in ("predicted", "low", "high")}
            rows.append(
                {"batch": row["batch"], "cache_gib": row["cache_gib"], "truth": truth, "expected": float(net[i])}
                | band
                | {"inside": ok}
            )
        drawn = {k: getattr(knobs, k) for k in _KNOB_COLUMNS} | {"locality_c_per_expert": float(c_per_expert)}
        out.append({"truth": j, "overlap": overlap, "overlap_chosen": fit.overlap, **drawn, "rows": rows})
        if progress is not None:
            progress(j + 1, int(truths))
    calibration = tuple((shipped[i].batch, shipped[i].cache_gib, shipped[i].ranks) for i in cal)
    return PlanCoverage(tuple(out), inside / max(total, 1), total, calibration)
