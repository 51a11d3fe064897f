"""Where a tok/s curve over cache sizes peaks and the band of a measured peak
(moeroof.models.curve_peak): the band against the closed form of two noisy values' argmax, flat and
sharp tops, monotone curves, and grids that depend on a group's range alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from moeroof.data.plan_points import PlanPoint
from moeroof.models.curve_peak import GRID_SIZES, NOISE_DRAWS, curve_peak, peak_grids, peak_note


def _pt(cache: float, batch: int = 1, ranks: int = 1, policy: str = "lru") -> PlanPoint:
    return PlanPoint(0, batch, cache, ranks, policy, None, None)


@pytest.mark.parametrize("delta", [0.01, 0.05, 0.2, 0.3])
def test_the_band_of_two_sizes_follows_the_closed_form(delta):
    """Two sizes, the second higher by a factor e^δ, each measured with a lognormal noise σ: the
    first is the measured peak with probability Φ(−δ / (σ√2)); the band's low end is the first size
    exactly where that probability is over 5 % (decided away from the boundary)."""
    sigma = 0.05
    p_first = float(norm.cdf(-delta / (sigma * np.sqrt(2.0))))
    assert abs(p_first - 0.05) > 0.02  # the deltas above: far enough from 5 % for a sampled quantile
    curves = np.tile([1.0, float(np.exp(delta))], (400, 1))  # 400 × NOISE_DRAWS measured curves
    got = curve_peak(np.array([10.0, 20.0]), curves[0], curves, sigma)
    assert got["cache_gib"] == 20.0 and got["high"] == 20.0
    assert got["low"] == (10.0 if p_first > 0.05 else 20.0), (p_first, got)


def test_a_flat_top_spreads_the_band_and_a_sharp_peak_keeps_it_narrow():
    grid = np.linspace(10.0, 70.0, GRID_SIZES)
    flat = np.where((grid > 20) & (grid < 40), 1.0, 0.6)
    got = curve_peak(grid, flat, np.tile(flat, (50, 1)), 0.05)
    assert got["low"] < 23.0 and got["high"] > 37.0 and got["interior"]
    sharp = np.exp(-(((grid - 31.0) / 4.0) ** 2))
    got = curve_peak(grid, sharp, np.tile(sharp, (50, 1)), 0.01)
    at = grid[np.argmax(sharp)]
    assert got["cache_gib"] == at and got["high"] - got["low"] <= 2 * (grid[1] - grid[0])


def test_a_rising_curve_has_no_interior_peak_and_says_so():
    grid = np.linspace(5.0, 50.0, GRID_SIZES)
    rising = np.log1p(grid)
    got = curve_peak(grid, rising, rising[None, :], 0.001)
    assert not got["interior"] and got["cache_gib"] == 50.0
    note = peak_note({"batch": 4, "ranks": 2, "policy": "lfu", **got})
    assert (
        "highest at the largest cache, 50 GiB" in note and "no peak between" in note and "B = 4, 2 rank(s), lfu" in note
    )
    got = curve_peak(grid, rising[::-1], rising[None, ::-1], 0.001)
    assert "smallest cache, 5 GiB" in peak_note({"batch": 1, "ranks": 1, "policy": "lru", **got})


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(0.1, 10.0), min_size=3, max_size=12),
    st.floats(0.0, 0.2),
    st.integers(0, 2**16),
)
def test_the_peak_lies_in_its_band_and_the_band_on_the_grid(values, sigma, seed):
    grid = np.linspace(1.0, 2.0, len(values))
    curve = np.array(values)
    got = curve_peak(grid, curve, np.vstack([curve, curve * 0.9]), sigma, seed=seed)
    assert got["low"] <= got["cache_gib"] <= got["high"]
    assert got["low"] in grid and got["high"] in grid and got["cache_gib"] == grid[int(np.argmax(curve))]


def test_the_grid_depends_on_a_groups_range_alone():
    """A peak is reported per group (batch, ranks, policy) of three or more cache sizes; adding a
    row inside a group's range leaves its grid (and so its answer) as it was."""
    pts = [_pt(c) for c in (10.0, 20.0, 70.0)] + [_pt(5.0, batch=8), _pt(9.0, batch=8)]
    (key, grid), *rest = peak_grids(pts)
    assert not rest  # B = 8 has two sizes only: it bounds a peak, it cannot place one
    assert key == (1, 1, "lru") and grid[0] == 10.0 and grid[-1] == 70.0 and grid.size == GRID_SIZES
    (_, again), _ = peak_grids([*pts, _pt(33.3), _pt(5.5, batch=8)])
    assert np.array_equal(grid, again)
    assert NOISE_DRAWS >= 10


def test_a_size_without_a_prediction_is_never_the_peak():
    """NaN where the batch does not fit: never the peak nor in its band (numpy's argmax would
    take the first NaN); a curve with no prediction at all has no peak."""
    grid = np.linspace(10.0, 50.0, 5)
    curve = np.array([np.nan, 1.0, 2.0, np.nan, np.nan])
    got = curve_peak(grid, curve, np.tile(curve, (10, 1)), 0.01)
    assert got["cache_gib"] == 30.0 and got["low"] == got["high"] == 30.0
    assert not got["interior"]  # it rises to the last size the batch fits at: no peak between
    note = peak_note({"batch": 2, "ranks": 1, "policy": "lru", **got})
    assert "highest at the largest cache the batch fits at, 30 GiB" in note, note
    curve[3] = 1.5
    assert curve_peak(grid, curve, curve[None, :], 0.01)["interior"]
    assert curve_peak(grid, np.full(5, np.nan), np.full((3, 5), np.nan), 0.05) is None
