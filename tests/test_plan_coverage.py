"""fit-plan's band coverage on simulated truths (moeroof.studies.plan_coverage)."""

from __future__ import annotations

import numpy as np
import pytest

from moeroof.core.paths import DATA_DIR
from moeroof.data.plan_points import read_plan_points
from moeroof.fit.plan import PRIOR_RECLAIM_PENALTY, PRIOR_SECONDS_PER_AGENT_TOKEN, PRIOR_SECONDS_PER_STEP
from moeroof.studies import plan_coverage as pc


def test_coverage_counts_the_predicted_rows_inside_their_bands():
    res = pc.plan_coverage(2)
    assert len(res.truths) == 2 and {t["overlap"] for t in res.truths} == {"max", "sum"}
    rows = [r for t in res.truths for r in t["rows"]]
    shipped = read_plan_points(DATA_DIR / "points" / pc.POINTS)
    predicted = [p for p in shipped if p.net_tok_s is None]
    assert res.rows == len(rows) == 2 * len(predicted)
    # the share is a recount of the rows (not the study's own tally)
    assert res.inside == pytest.approx(np.mean([r["low"] <= r["truth"] <= r["high"] for r in rows]))
    per = [np.mean([r["inside"] for r in t["rows"]]) for t in res.truths]
    assert min(per) <= res.interval().low <= res.inside <= res.interval().high <= max(per)
    # a held-out truth is a new measurement, as the band is a new measurement's: the simulated rate
    # with the calibration rows' lognormal noise (a few σ at most), not the simulated rate itself
    ratio = np.log([r["truth"] / r["expected"] for r in rows])
    assert np.all(ratio != 0.0) and np.all(np.abs(ratio) < 5 * pc.NOISE)
    for t in res.truths:  # every truth is a box the priors allow
        assert PRIOR_SECONDS_PER_STEP[0] <= t["engine_seconds_per_step"] <= PRIOR_SECONDS_PER_STEP[2]
        assert 0 <= t["engine_seconds_per_agent_token"] <= PRIOR_SECONDS_PER_AGENT_TOKEN[2]
        assert 1e-4 <= t["engine_seconds_per_touched_expert"] <= 1e-3
        assert PRIOR_RECLAIM_PENALTY[0] <= t["reclaim_penalty"] <= PRIOR_RECLAIM_PENALTY[2]
    assert pc.plan_coverage(1).truths[0] == res.truths[0]  # truth j is the same whatever the count


def test_truths_must_be_positive():
    with pytest.raises(ValueError, match="truths"):
        pc.plan_coverage(0)


def test_it_calibrates_where_seed_003s_points_file_measures():
    """The study calibrates on the rows the shipped file measures (and predicts the rows it leaves
    empty, counted above): four M = 8 rows, the 40 GiB one among them."""
    shipped = read_plan_points(DATA_DIR / "points" / pc.POINTS)
    res = pc.plan_coverage(1)
    assert res.calibration == tuple((p.batch, p.cache_gib, p.ranks) for p in shipped if p.net_tok_s is not None)
    assert len(res.calibration) == 4 and (8, 40.0, 2) in res.calibration
