"""Intervals and resampling: the one place the suite turns replicates into an interval.

:class:`Interval` is the suite's one interval type: ``low`` and ``high`` (floats, or arrays of
one shape for an interval per layer or per batch size), the confidence ``level`` and the
``method`` that made it. Every interval is two-sided at confidence ``level`` (0.95 → the 2.5 %
and 97.5 % points), or between two named tail probabilities (``(0.05, 0.95)``: the 5–95 %
bands of the fits).

:func:`bootstrap_replicates` is the one resampling loop: it draws the resamples from the
caller's explicit generator (indices over units, moving blocks over ordered units) or takes them
from the caller's own parametric draw, evaluates the statistic on each and stacks the values.
The interval functions then only read replicates, so an interval is a pure function of them.

The plain percentile interval is ``numpy.quantile`` with its default (linear) interpolation,
the same numbers ``numpy.percentile`` gives at ``100·q``. ``scipy.stats.bootstrap`` is not
used: it draws its own resamples, and the suite's bands are pinned to the draws of its
generators (committed figures and tests).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Interval",
    "bootstrap_replicates",
    "confidence_of",
    "tail_probabilities",
    "student_t_quantile",
    "percentile_interval",
    "basic_interval",
    "order_statistic_interval",
    "cluster_share_interval",
]

#: a confidence level (0.95: central) or the two tail probabilities of an interval ((0.05, 0.95))
Level = float | Sequence[float]


@dataclass(frozen=True)
class Interval:
    """A two-sided interval ``[low, high]`` at confidence ``level``, and the ``method`` that made
    it (e.g. ``"percentile bootstrap, 200 replicates"``).

    ``low`` and ``high`` are floats, or arrays of one shape (one interval per entry: per layer,
    per batch size, per row); :meth:`contains` and :meth:`clip` work entrywise,
    :meth:`at` picks one entry's interval. An interval unpacks as its two ends
    (``low, high = interval``). A NaN end (no replicate left) contains nothing.
    """

    low: Any
    high: Any
    level: float
    method: str

    def __post_init__(self) -> None:
        if not 0.0 < float(self.level) <= 1.0:
            raise ValueError(f"an interval's level must lie in (0, 1], got {self.level!r}")

    def contains(self, x: Any) -> Any:
        """Whether ``low <= x <= high`` (entrywise for array ends or an array ``x``)."""
        inside = np.logical_and(np.less_equal(self.low, x), np.less_equal(x, self.high))
        return bool(inside) if np.ndim(inside) == 0 else inside

    def as_tuple(self) -> tuple[Any, Any]:
        """``(low, high)``."""
        return self.low, self.high

    def __iter__(self) -> Iterator[Any]:
        return iter((self.low, self.high))

    def at(self, index: Any) -> Interval:
        """The interval of the entries ``index`` selects (numpy indexing) of array ends; a single
        entry's ends become floats."""
        return self._ends(lambda end: np.asarray(end)[index])

    def clip(self, lower: float, upper: float) -> Interval:
        """Both ends clipped to ``[lower, upper]`` (a parameter's allowed range)."""
        return self._ends(lambda end: np.clip(end, lower, upper))

    def _ends(self, f: Callable[[Any], Any]) -> Interval:
        """The interval with ``f`` of each end (a 0-d result as a float), at the same level and method."""
        return Interval(_scalar(f(self.low)), _scalar(f(self.high)), self.level, self.method)


def _scalar(x: Any) -> Any:
    """A 0-d array or numpy scalar as a Python float (exact); arrays unchanged."""
    return float(x) if np.ndim(x) == 0 else x


def confidence_of(level: Level) -> float:
    """The confidence an interval at ``level`` carries: ``level`` itself, or ``q_hi − q_lo`` for
    two tail probabilities (``(0.05, 0.95)`` → 0.9)."""
    if isinstance(level, (int, float, np.floating)):
        return float(level)
    q_lo, q_hi = tail_probabilities(level)
    return round(q_hi - q_lo, 12)


def bootstrap_replicates(
    statistic: Callable[[Any], Any],
    replicates: int,
    *,
    n: int | None = None,
    rng: np.random.Generator | None = None,
    block: int | None = None,
    draw: Callable[[int], Any] | None = None,
    batched: bool = False,
    chunk: int | None = None,
    draw_in_chunks: bool = False,
) -> np.ndarray:
    """``replicates`` values of ``statistic`` on resamples, stacked along a new first axis.

    The resamples, drawn in this order from the caller's generator ``rng`` or draw:

    - ``n`` (nonparametric): index rows into ``n`` units drawn with replacement, all at once
      (``rng.integers(0, n, size=(replicates, n))``); the statistic takes a ``(r, n)`` stack of
      index rows and returns ``r`` values, ``r`` = ``chunk`` rows at a time (default: all);
    - ``n`` and ``block`` (block bootstrap over ``n`` ordered units: their ``nb = ⌈n/block⌉``
      non-overlapping blocks of ``block`` consecutive units, drawn with replacement): per
      replicate, ``rng.integers(0, nb, size=nb)`` blocks, their units in order, the last block
      cut at ``n``; the statistic takes the 1-D indices and returns one value;
    - ``draw`` (parametric, the caller's own generator or seeds): ``batched``, ``draw(replicates)``
      returns every resample stacked on a first axis in one call and the statistic takes ``chunk``
      of them at a time as for ``n`` (``draw_in_chunks``: ``draw(r)`` is called per chunk instead,
      so only a chunk of resamples is ever held; for a draw that continues one generator's stream
      element by element, the same resamples); otherwise ``draw(b)`` is the b-th resample, drawn
      just before the statistic takes it.

    Values that are numbers or arrays are stacked (``numpy.stack``); others (a fitted knob set)
    come back as an object array.
    """
    if int(replicates) != replicates or replicates < 1:
        raise ValueError(f"replicates must be a positive integer, got {replicates!r}")
    if (draw is None) == (n is None):
        raise ValueError("give either n (resampled indices) or draw (the caller's own resamples)")
    if (block is not None and draw is not None) or (batched and draw is None):
        raise ValueError("block goes with n (indices), batched with draw (the caller's own resamples)")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk!r}")
    if draw is not None:
        if not batched:
            return _stack([statistic(draw(b)) for b in range(replicates)])
        if draw_in_chunks and chunk is not None:
            sizes = [min(int(chunk), replicates - i) for i in range(0, replicates, int(chunk))]
            return np.concatenate([np.asarray(statistic(draw(r))) for r in sizes])
        stacked = draw(replicates)
    else:
        if rng is None or n is None:
            raise ValueError("index resamples need an explicit rng")
        if int(n) != n or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        if block is not None:
            return _stack([statistic(x) for x in _block_indices(n, block, replicates, rng)])
        stacked = rng.integers(0, n, size=(replicates, n))
    step = replicates if chunk is None else int(chunk)
    return np.concatenate([np.asarray(statistic(stacked[i : i + step])) for i in range(0, replicates, step)])


def _block_indices(n: int, block: int, replicates: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Each replicate's indices of a block bootstrap (see :func:`bootstrap_replicates`), drawn as
    the replicate is asked for."""
    if int(block) != block or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    nb = -(-int(n) // int(block))
    starts = np.arange(nb) * block
    for _ in range(replicates):
        pick = starts[rng.integers(0, nb, size=nb)]
        sel = (pick[:, None] + np.arange(block)[None, :]).ravel()
        yield sel[sel < n]


def _stack(values: list[Any]) -> np.ndarray:
    arrays = [np.asarray(v) for v in values]
    if all(a.dtype != object for a in arrays):
        return np.stack(arrays)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def tail_probabilities(level: Level) -> tuple[float, float]:
    """``(q, 1 − q)`` with ``q = (1 − level) / 2``: the quantiles bounding a central interval.
    A pair ``(q_lo, q_hi)`` names the two tails itself (``(0.05, 0.95)``: the 5–95 % bands) and
    comes back as floats, unchanged."""
    if not isinstance(level, (int, float, np.floating)):
        q_lo, q_hi = (float(v) for v in level)
        if not 0.0 <= q_lo < q_hi <= 1.0:
            raise ValueError(f"tail probabilities must satisfy 0 <= low < high <= 1, got {tuple(level)!r}")
        return q_lo, q_hi
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
    replicates, level: Level = 0.95, *, axis: int | None = 0, ignore_nan: bool = False, resampling: str = "bootstrap"
) -> Interval:
    """Percentile interval of ``replicates`` along ``axis``: ends of the shape of the other axes
    (floats for 1-D replicates; ``ignore_nan``: NaN replicates are left out, as
    ``numpy.nanquantile``). ``resampling`` says where the replicates come from, for the
    interval's ``method`` (``"percentile bootstrap, 200 replicates"``)."""
    x = np.asarray(replicates, dtype=float)
    q = np.asarray(tail_probabilities(level))
    quantile = np.nanquantile if ignore_nan else np.quantile
    low, high = quantile(x, q, axis=axis)
    count = x.size if axis is None else x.shape[axis]
    return Interval(_scalar(low), _scalar(high), confidence_of(level), f"percentile {resampling}, {count} replicates")


def basic_interval(
    estimate, replicates, level: Level = 0.95, *, axis: int = 0, ignore_nan: bool = False, resampling: str = "bootstrap"
) -> Interval:
    """Basic (reverse-percentile) interval ``[2θ̂ − q_hi, 2θ̂ − q_lo]`` of an ``estimate`` θ̂
    from its ``replicates`` along ``axis`` (Davison & Hinkley 1997, §5.2): corrects a replicate
    distribution that is shifted against θ̂ by the same bias as θ̂ against the truth."""
    pct = percentile_interval(replicates, level, axis=axis, ignore_nan=ignore_nan, resampling=resampling)
    est = np.asarray(estimate, dtype=float)
    method = pct.method.replace("percentile", "basic (reverse-percentile)", 1)
    return Interval(_scalar(2.0 * est - pct.high), _scalar(2.0 * est - pct.low), pct.level, method)


def order_statistic_interval(replicates, level: float = 0.95, *, resampling: str = "bootstrap") -> Interval:
    """Interval from order statistics of a 1-D sample, with no interpolation: the
    ``⌊q·(n−1)⌋``-th and ``⌈(1−q)·(n−1)⌉``-th smallest of the non-NaN replicates. Safe for
    infinite replicates (interpolating between ``inf`` and a number gives NaN). NaN, NaN when
    no replicate is left."""
    x = np.asarray(replicates, dtype=float).ravel()
    srt = np.sort(x[~np.isnan(x)])
    method = f"order-statistic {resampling}, {x.size} replicates"
    if srt.size == 0:
        return Interval(math.nan, math.nan, float(level), method)
    q, _ = tail_probabilities(level)
    lo = srt[int(np.floor(q * (srt.size - 1)))]
    hi = srt[int(np.ceil((1.0 - q) * (srt.size - 1)))]
    return Interval(float(lo), float(hi), float(level), method)


#: resamples of :func:`cluster_share_interval`
CLUSTER_REPLICATES = 4000


def cluster_share_interval(
    flags: Sequence[Sequence[bool]], level: Level = (0.05, 0.95), *, seed: int = 20261208
) -> Interval:
    """The share of true ``flags`` (one sequence per cluster: a simulated truth's rows) with a
    percentile interval over the clusters resampled with replacement (the cluster bootstrap:
    rows of one truth share its knobs, so they are not independent; Davison & Hinkley 1997,
    §3.8): each of :data:`CLUSTER_REPLICATES` resamples takes as many clusters as there are and
    gives the share of their rows, ``Σ inside / Σ rows`` (clusters may differ in size). A fixed
    ``seed``: the same flags give the same interval on every machine."""
    inside = np.array([float(np.sum(f)) for f in flags])
    rows = np.array([float(len(f)) for f in flags])
    if not inside.size or not rows.sum():
        raise ValueError("a share needs at least one cluster with a row")
    idx = np.random.default_rng(seed).integers(0, inside.size, size=(CLUSTER_REPLICATES, inside.size))
    with np.errstate(invalid="ignore"):  # a resample of empty clusters only: no share (left out)
        shares = inside[idx].sum(axis=1) / rows[idx].sum(axis=1)
    return percentile_interval(
        shares, level, ignore_nan=True, resampling=f"cluster bootstrap over {inside.size} clusters"
    )
