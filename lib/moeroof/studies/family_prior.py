"""Which popularity family predicts one stream's hit-rate curve: cross-validated on the published column.

Two families of per-layer popularity stand behind every simulated cache (:mod:`moeroof.fit.routing`):
a Zipf power law (s) and a Dirichlet draw (α, the skew prior's family). With a stickiness ρ beside
the skew, each family meets two or three hit rates of one stream's cache exactly, so the rows a user
has cannot tell them apart — yet they bend differently between and beyond those rows: a Dirichlet
popularity's thin tail makes its curve saturate, a power law's keeps rising about as the logarithm
of the cache. Which shape one stream's cache has is a structural choice that a prior from public
measurements decides where the rows do not (docs/validation.md, "The family of one stream's curve").

**The evidence** (:func:`cross_validate`): the published single-stream LRU column (Qwen3-30B-A3B,
one LRU per layer at 8 / 16 / 32 / 64 experts: 42.4 / 64.7 / 81.0 / 91.8 %; docs/sources.md), fitted
by :func:`moeroof.fit.routing.fit_routing` on every pair of its sizes with both families, each family
predicting the two sizes left out. Held-out errors are computed, never tuned on: the family whose
held-out predictions are closer is the prior (:attr:`FamilyCV.preferred`), which ``moeroof fit-plan`` holds
where a hit-rate curve's rows cannot decide (:data:`moeroof.fit.plan.CURVE_FAMILY_PRIOR`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from moeroof.core.results import Result
from moeroof.fit.routing import fit_routing
from moeroof.studies.validation import SINGLE_STREAM_CACHE, single_stream_cache_points

__all__ = ["Split", "FamilyCV", "cross_validate"]


@dataclass(frozen=True)
class Split(Result):
    """One pair of calibration sizes: per family its fitted knobs' label and its errors (points,
    predicted − measured) at the two sizes left out, and the family fit-routing chose there."""

    calibrate_on: tuple[int, ...]
    held_out: tuple[int, ...]
    labels: dict[str, str]
    errors_points: dict[str, tuple[float, ...]]
    chosen: str


@dataclass(frozen=True)
class FamilyCV(Result):
    """Every split of :func:`cross_validate` and, per family, the mean absolute held-out error in points."""

    splits: tuple[Split, ...]
    mean_abs_error_points: dict[str, float]
    source: str

    @property
    def preferred(self) -> str:
        """The family with the smaller mean absolute held-out error."""
        return min(self.mean_abs_error_points, key=lambda k: self.mean_abs_error_points[k])


def cross_validate(calibration_rows: int = 2, seeds: Sequence[int] = (0, 1, 2)) -> FamilyCV:
    """Fit the published single-stream LRU column on every ``calibration_rows`` of its four sizes with
    both families (fit-routing: skew and ρ, the history at its default, no bootstrap) and predict the
    others; returns the splits and each family's mean absolute held-out error (about 20 s on a 2-core
    box at three seeds)."""
    ref = SINGLE_STREAM_CACHE.value
    caps = tuple(int(c) for c in ref["capacity_experts"])
    measured = dict(zip(caps, (float(h) for h in ref["hit_rate"])))
    splits = []
    for cal in itertools.combinations(caps, int(calibration_rows)):
        pts = single_stream_cache_points(cal)
        fit = fit_routing(pts, ref["experts"], ref["top_k"], ref["layers"], seeds=tuple(seeds), bootstrap=0)
        held = [i for i, p in enumerate(pts) if p.policy == "lru" and int(p.capacity_experts) not in cal]
        labels, errors = {}, {}
        for ff in fit.family_fits:
            pred = np.asarray(ff.predicted, dtype=float)
            labels[ff.family] = ff.knobs.label()
            errors[ff.family] = tuple(float(100.0 * (pred[i] - measured[int(pts[i].capacity_experts)])) for i in held)
        splits.append(Split(cal, tuple(int(pts[i].capacity_experts) for i in held), labels, errors, fit.family))
    families = splits[0].errors_points.keys()
    mean = {f: float(np.mean([abs(e) for s in splits for e in s.errors_points[f]])) for f in families}
    return FamilyCV(tuple(splits), mean, SINGLE_STREAM_CACHE.source)
