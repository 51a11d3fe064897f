"""Where a tok/s curve over expert-cache sizes peaks, and where a measured one would.

On a box whose expert cache competes for memory, tok/s can rise, peak and fall with the cache
(docs/validation.md, "Across concurrency and memory pressure"): more cache saves reads and makes
each remaining read dearer. A few measured sizes rarely place the peak closer than the curve's
flatness allows, so a peak comes with a band. For every group of a points file's rows of one
batch size, rank count and policy with :data:`MIN_SIZES` or more cache sizes:

- the grid: :data:`GRID_SIZES` sizes evenly from the group's smallest cache to its largest. It
  depends on the group's range only, never on which sizes between its ends are asked for, so a
  row added inside the range does not move the answer;
- the peak: the grid size of the highest predicted tok/s, the curve averaged over the simulation
  seeds (a sampled trace's steps make a single seed's curve saw-toothed);
- its band, 5–95 %: where the highest *measured* value on that grid would fall. For each curve
  the fit predicts (its knob sets × the seeds) :data:`NOISE_DRAWS` measured curves are drawn, each
  size times its own lognormal noise of the fit's measurement σ, and their argmax taken. A flat
  top spreads the band over all of it; a sharp peak keeps it narrow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from moeroof.core.stats import percentile_interval

__all__ = ["GRID_SIZES", "MIN_SIZES", "NOISE_DRAWS", "peak_grids", "curve_peak", "peak_note"]

#: sizes on a group's grid between (and including) its smallest and largest cache
GRID_SIZES = 41
#: the fewest distinct cache sizes of one group for which a peak is reported (two only bound it)
MIN_SIZES = 3
#: noisy measured curves drawn from each predicted one
NOISE_DRAWS = 20


def peak_grids(points: Sequence[Any]) -> list[tuple[tuple[int, int, str], np.ndarray]]:
    """``((batch, ranks, policy), grid in GiB)`` for every group of ``points`` (objects with
    ``batch``, ``ranks``, ``policy``, ``cache_gib``) with :data:`MIN_SIZES` or more distinct
    cache sizes, in the order the groups first appear; the grid as the module docstring says."""
    groups: dict[tuple[int, int, str], set[float]] = {}
    for p in points:
        groups.setdefault((int(p.batch), int(p.ranks), str(p.policy)), set()).add(float(p.cache_gib))
    return [
        (key, np.linspace(min(sizes), max(sizes), GRID_SIZES))
        for key, sizes in groups.items()
        if len(sizes) >= MIN_SIZES
    ]


def curve_peak(
    grid: np.ndarray, best: np.ndarray, curves: np.ndarray, sigma: float, seed: int = 0
) -> dict[str, Any] | None:
    """The peak of ``best`` (tok/s on ``grid``) and the 5–95 % band of a measured curve's argmax
    (module docstring) over ``curves`` (one predicted curve a row, the fit's spread), each drawn
    :data:`NOISE_DRAWS` times with a lognormal noise of ``sigma``. ``interior``: whether the
    peak lies strictly inside the grid's sizes with a prediction (a curve that only rises or
    only falls peaks at an end).
    A size with no prediction (NaN: the batch does not fit there) is never the peak; None where
    ``best`` has none at all."""
    grid, best = np.asarray(grid, dtype=float), np.asarray(best, dtype=float)
    finite = np.flatnonzero(np.isfinite(best))
    if finite.size == 0:
        return None
    best = np.where(np.isfinite(best), best, -np.inf)
    curves = np.atleast_2d(np.asarray(curves, dtype=float))
    curves = np.where(np.isfinite(curves), curves, -np.inf)
    rng = np.random.default_rng(seed)
    noisy = curves[:, None, :] * np.exp(rng.normal(0.0, sigma, size=(curves.shape[0], NOISE_DRAWS, grid.size)))
    tops = grid[np.argmax(noisy, axis=-1)].ravel()
    i = int(np.argmax(best))
    at = float(grid[i])
    band = percentile_interval(tops, (0.05, 0.95), resampling="noisy curves' peaks")
    return {
        "cache_gib": at,
        "tok_s": float(best[i]),
        "low": min(band.low, at),
        "high": max(band.high, at),
        "grid_low": float(grid[0]),
        "grid_high": float(grid[-1]),
        "grid_sizes": int(grid.size),
        # strictly inside the sizes with a prediction: a curve that rises up to the last size the
        # batch fits at has no peak there, it runs out of memory
        "interior": bool(finite[0] < i < finite[-1]),
        # where a curve without a peak between is highest: the largest or smallest size with a prediction
        "end": None if finite[0] < i < finite[-1] else ("largest" if i == finite[-1] else "smallest"),
    }


def peak_note(peak: dict[str, Any], unit: str = "tok/s") -> str:
    """One sentence for a :func:`curve_peak` result with its group (``batch``, ``ranks``,
    ``policy``), its words from its numbers: where the curve peaks or that it only rises or
    falls, and the band of a measured peak."""
    where = f"B = {peak['batch']}, {peak['ranks']} rank(s), {peak['policy']}"
    grid = f"{peak['grid_sizes']} cache sizes from {peak['grid_low']:.3g} to {peak['grid_high']:.3g} GiB"
    band = f"a measured peak would fall at {peak['low']:.3g}–{peak['high']:.3g} GiB (5–95 %)"
    if peak["interior"]:
        head = f"{unit} peaks at {peak['cache_gib']:.3g} GiB of expert cache ({peak['tok_s']:.3g} {unit})"
    else:
        fits = " the batch fits at" if peak["end"] == "largest" and peak["cache_gib"] < peak["grid_high"] else ""
        head = (
            f"{unit} is highest at the {peak['end']} cache{fits}, {peak['cache_gib']:.3g} GiB "
            f"({peak['tok_s']:.3g} {unit}): no peak between"
        )
    return f"{where}: {head} on a grid of {grid}; {band}"
