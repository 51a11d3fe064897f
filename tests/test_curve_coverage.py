"""fit-plan's band coverage on simulated one-stream cache curves (moeroof.studies.curve_coverage)."""

from __future__ import annotations

import numpy as np
import pytest

from moeroof.core.paths import DATA_DIR
from moeroof.data.plan_points import read_plan_points
from moeroof.data.skew_prior import committed_skew_prior
from moeroof.fit.plan import PRIOR_RECLAIM_PENALTY, PRIOR_SECONDS_PER_AGENT_TOKEN, PRIOR_SECONDS_PER_STEP
from moeroof.studies import curve_coverage as cc


@pytest.fixture(scope="module")
def two():
    return cc.curve_coverage(2)


def test_coverage_counts_the_predicted_rows_inside_their_bands(two):
    """Both shares are recounts of the rows (not the study's tally); the rows are the points file's
    empty ones for each truth, one truth of each family, each a box the priors allow."""
    shipped = read_plan_points(DATA_DIR / "points" / cc.POINTS)
    empty = [p.cache_gib for p in shipped if p.net_tok_s is None]
    assert [t["family"] for t in two.truths] == ["zipf", "dirichlet"]
    rows = [r for t in two.truths for r in t["rows"]]
    assert two.rows == len(rows) == 2 * len(empty)
    assert all([r["cache_gib"] for r in t["rows"]] == empty for t in two.truths)
    assert two.inside_tok_s == pytest.approx(np.mean([r["low"] <= r["truth"] <= r["high"] for r in rows]))
    hits = [r["hit_rate_low"] <= r["truth_hit_rate"] <= r["hit_rate_high"] for r in rows]
    assert two.inside_hit_rate == pytest.approx(np.mean(hits))
    # the intervals resample truths: each holds its share, and the two truths' own shares bound it
    for name, share in (("tok_s", two.inside_tok_s), ("hit_rate", two.inside_hit_rate)):
        ci, key = two.intervals()[name], "inside" if name == "tok_s" else "hit_rate_inside"
        per = [np.mean([r[key] for r in t["rows"]]) for t in two.truths]
        assert min(per) <= ci.low <= share <= ci.high <= max(per), name
    # a predicted row's truth is a new measurement, as the band is a new measurement's: the simulated
    # values with the calibration rows' noise (a few σ at most), not the simulated values themselves
    ratio = np.log([r["truth"] / r["expected"] for r in rows])
    assert np.all(ratio != 0.0) and np.all(np.abs(ratio) < 5 * cc.NOISE)
    shift = np.array([r["truth_hit_rate"] - r["expected_hit_rate"] for r in rows])
    assert np.all(shift != 0.0) and np.all(np.abs(shift) < 5 * cc.HIT_NOISE)
    zipf, dirichlet = two.truths
    assert cc.ZIPF_S[0] <= zipf["skew_parameter"] <= cc.ZIPF_S[1]
    lo, hi = committed_skew_prior().alpha_range
    assert lo <= dirichlet["skew_parameter"] <= hi
    for t in two.truths:
        assert PRIOR_SECONDS_PER_STEP[0] <= t["engine_seconds_per_step"] <= PRIOR_SECONDS_PER_STEP[2]
        assert 0 <= t["engine_seconds_per_agent_token"] <= PRIOR_SECONDS_PER_AGENT_TOKEN[2]
        assert PRIOR_RECLAIM_PENALTY[0] <= t["reclaim_penalty"] <= PRIOR_RECLAIM_PENALTY[2]
        assert 1.0 <= t["reclaim_exponent"] <= 3.0


def test_it_calibrates_where_the_points_file_measures_and_truth_j_does_not_depend_on_the_count(two):
    shipped = read_plan_points(DATA_DIR / "points" / cc.POINTS)
    assert two.calibration == tuple(p.cache_gib for p in shipped if p.net_tok_s is not None)
    assert cc.curve_coverage(1).truths[0] == two.truths[0]


def test_truths_must_be_positive():
    with pytest.raises(ValueError, match="truths"):
        cc.curve_coverage(0)
