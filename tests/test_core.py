"""moeroof.core helpers: atomic writes, seeded generators, bootstrap intervals, live-token masks."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from moeroof.core import atomic, masks, rng, stats

# ----------------------------------------------------------------------------- atomic


def test_atomic_writes_whole_files_with_a_readable_mode(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    assert atomic.write_text(target, "a\nb\n") == target
    assert target.read_bytes() == b"a\nb\n"
    assert stat.S_IMODE(target.stat().st_mode) == atomic.FILE_MODE
    atomic.write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    atomic.write_via(target, lambda fh: fh.write("x,y\r\n"), binary=False, newline="")
    assert target.read_bytes() == b"x,y\r\n"
    copy = atomic.copy_file(target, tmp_path / "copy.csv")
    assert copy.read_bytes() == b"x,y\r\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["copy.csv", "out.txt", "sub"]


@pytest.mark.parametrize("how", ["writer", "check"])
def test_atomic_write_that_fails_leaves_the_old_file_and_no_temp(tmp_path, how):
    target = tmp_path / "out.txt"
    target.write_text("old\n")

    def writer(fh):
        fh.write(b"half")
        if how == "writer":
            raise RuntimeError("disk full")

    def check(path):
        assert path.read_bytes() == b"half" and path.parent == tmp_path
        raise ValueError("not valid")

    with pytest.raises((RuntimeError, ValueError)):
        atomic.write_via(target, writer, check=check if how == "check" else None)
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


# ----------------------------------------------------------------------------- rng


def test_generators_are_the_streams_they_replace():
    def same(a, b):
        return np.array_equal(a.integers(0, 2**62, size=8), b.integers(0, 2**62, size=8))

    assert same(rng.generator(7), np.random.default_rng(7))
    assert same(rng.generator("deepseek-v3-like"), np.random.default_rng(sum(map(ord, "deepseek-v3-like"))))
    assert same(rng.generator(3, 8), np.random.default_rng([3, 8]))
    assert same(rng.generator(3, "a"), np.random.default_rng([3, 97]))
    assert not same(rng.generator(3, 8), rng.generator(3, 9))
    assert rng.seed_of("ab") == 97 + 98 and rng.seed_of(5) == 5
    with pytest.raises(ValueError, match="seed"):
        rng.generator(-1)


# ----------------------------------------------------------------------------- stats


def test_percentile_interval_is_what_the_folded_copies_computed():
    x = np.random.default_rng(0).normal(size=(200, 3))
    for level in (0.95, 0.9):
        alpha, q = (1.0 - level) / 2.0, 50.0 * (1.0 - level)  # union's and fit's spelling
        got = stats.percentile_interval(x, level)
        np.testing.assert_array_equal(got, np.quantile(x, [alpha, 1.0 - alpha], axis=0))
        np.testing.assert_array_equal(got, np.percentile(x, [q, 100.0 - q], axis=0))
    x[0, 0] = np.nan
    q = 50.0 * (1.0 - 0.95)
    np.testing.assert_array_equal(
        stats.percentile_interval(x, 0.95, ignore_nan=True), np.nanpercentile(x, [q, 100.0 - q], axis=0)
    )
    assert stats.tail_probabilities(0.95) == pytest.approx((0.025, 0.975))
    with pytest.raises(ValueError, match="level"):
        stats.tail_probabilities(1.0)


def test_basic_and_order_statistic_intervals():
    reps = np.arange(101, dtype=float)  # percentiles 2.5 and 97.5 are 2.5 and 97.5
    lo, hi = stats.basic_interval(60.0, reps, 0.95)
    assert (lo, hi) == pytest.approx((2 * 60 - 97.5, 2 * 60 - 2.5))
    with_inf = np.concatenate([reps, [np.inf] * 10, [np.nan]])
    lo, hi = stats.order_statistic_interval(with_inf, 0.95)
    assert lo == 2.0 and hi == np.inf
    assert np.isnan(stats.order_statistic_interval([np.nan], 0.95)).all()


# ----------------------------------------------------------------------------- masks


def test_live_tokens_streams_and_partial_tokens():
    topk = np.array(
        [
            [[[0, 1], [2, 3]], [[-1, -1], [4, 5]], [[6, 7], [-1, -1]]],  # step 0: streams 1, 2 miss a layer
            [[[0, -1], [2, 3]], [[1, 2], [3, 4]], [[-1, -1], [-1, -1]]],  # step 1: stream 0 partly padded
        ]
    )
    assert masks.live_tokens(topk).tolist() == [
        [[True, True], [False, True], [True, False]],
        [[False, True], [True, True], [False, False]],
    ]
    assert masks.live_streams(topk).tolist() == [[True, False, False], [False, True, False]]
    assert np.argwhere(masks.partial_tokens(topk)).tolist() == [[1, 0, 0]]
    assert masks.ids_or(topk, 9)[0, 1, 0].tolist() == [9, 9]


def test_student_t_quantile_is_scipy_stats_ppf():
    """core.stats.student_t_quantile (scipy.special, no scipy.stats import) equals
    scipy.stats.t.ppf, and norm.ppf for dof 0, everywhere including q = 0, 1 and outside [0, 1]."""
    from scipy.stats import norm, t

    from moeroof.core.stats import student_t_quantile

    q = np.concatenate([np.linspace(-0.25, 1.25, 3001), [0.0, 1.0, 0.05, 0.95, 1e-300]])
    for dof in (1, 2.5, 6, 30.0, 1e4):
        np.testing.assert_array_equal(student_t_quantile(q, dof), t.ppf(q, dof))
    np.testing.assert_array_equal(student_t_quantile(q, 0), norm.ppf(q))
