"""Bootstrap intervals: the one place the suite turns replicates into an interval.

Every interval here is two-sided at confidence ``level`` (0.95 → the 2.5 % and 97.5 %
points). Replicate arrays come from the callers' own resampling (bootstraps over steps, blocks
or a parametric model, drawn from their explicit generators); these functions only read them,
so an interval is a pure function of its replicates.

The plain percentile interval is ``numpy.quantile`` with its default (linear) interpolation,
the same numbers ``numpy.percentile`` gives at ``100·q``. ``scipy.stats.bootstrap`` is not
used: it draws its own resamples, and the suite's bands are pinned to the draws of its
generators (committed figures and tests).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "tail_probabilities",
    "student_t_quantile",
    "percentile_interval",
    "basic_interval",
    "order_statistic_interval",
]


def tail_probabilities(level: float) -> tuple[float, float]:
    """``(q, 1 − q)`` with ``q = (1 − level) / 2``: the quantiles bounding a central interval."""
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must lie in (0, 1), got {level!r}")
    q = 0.5 * (1.0 - level)
    return q, 1.0 - q


def student_t_quantile(q, dof: float) -> np.ndarray:
    """Student's t quantiles at ``q`` with ``dof`` degrees of freedom (``dof <= 0`` or infinite:
    the normal's): the values of ``scipy.stats.t.ppf`` / ``norm.ppf``, from :mod:`scipy.special`
    (``stdtrit``, ``ndtri``) because ``scipy.stats`` takes ~0.3 s to import. ``stdtrit(df, 0)``
    is +inf where the ppf is −inf: q = 0 gives −inf here, as there."""
    from scipy.special import ndtri, stdtrit

    q = np.asarray(q, dtype=float)
    dof = float(dof)
    z = stdtrit(dof, q) if 0.0 < dof < np.inf else ndtri(q)
    return np.where(q == 0.0, -np.inf, z)


def percentile_interval(
    replicates, level: float = 0.95, *, axis: int | None = 0, ignore_nan: bool = False
) -> np.ndarray:
    """Percentile interval of ``replicates`` along ``axis``: an array ``[low, high]`` of shape
    ``(2,) + the other axes`` (``ignore_nan``: NaN replicates are left out, as
    ``numpy.nanquantile``)."""
    q = np.asarray(tail_probabilities(level))
    quantile = np.nanquantile if ignore_nan else np.quantile
    return quantile(np.asarray(replicates, dtype=float), q, axis=axis)


def basic_interval(estimate, replicates, level: float = 0.95, *, axis: int = 0, ignore_nan: bool = False) -> np.ndarray:
    """Basic (reverse-percentile) interval ``[2θ̂ − q_hi, 2θ̂ − q_lo]`` of an ``estimate`` θ̂
    from its ``replicates`` along ``axis`` (Davison & Hinkley 1997, §5.2): corrects a replicate
    distribution that is shifted against θ̂ by the same bias as θ̂ against the truth."""
    lo, hi = percentile_interval(replicates, level, axis=axis, ignore_nan=ignore_nan)
    est = np.asarray(estimate, dtype=float)
    return np.stack([2.0 * est - hi, 2.0 * est - lo])


def order_statistic_interval(replicates, level: float = 0.95) -> tuple[float, float]:
    """Interval from order statistics of a 1-D sample, with no interpolation: the
    ``⌊q·(n−1)⌋``-th and ``⌈(1−q)·(n−1)⌉``-th smallest of the non-NaN replicates. Safe for
    infinite replicates (interpolating between ``inf`` and a number gives NaN). NaN, NaN when
    no replicate is left."""
    x = np.asarray(replicates, dtype=float).ravel()
    srt = np.sort(x[~np.isnan(x)])
    if srt.size == 0:
        return float("nan"), float("nan")
    q, _ = tail_probabilities(level)
    lo = srt[int(np.floor(q * (srt.size - 1)))]
    hi = srt[int(np.ceil((1.0 - q) * (srt.size - 1)))]
    return float(lo), float(hi)
