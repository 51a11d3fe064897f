"""moeroof.studies.what_changed: the simulated cache against the pinned oracle, computed and worded."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from moeroof.core.units import GiB
from moeroof.data.presets import load_hardware, load_model
from moeroof.models.levers import lever_factors
from moeroof.models.plan import Workload, plan, routing_from_spec
from moeroof.studies import what_changed as wc
from moeroof.studies.regime_map import regime_map

BATCH = [1, 2, 8, 32]


@pytest.fixture(scope="module")
def setup():
    m = load_model("glm-5.2")
    hw = load_hardware("nvme-gen4")
    route = routing_from_spec("zipf:0.8", m)
    work = Workload(context_tokens=4096, cache_bytes=16 * GiB)
    return m, hw, route, work


@pytest.fixture(scope="module")
def comparison(setup):
    m, hw, route, work = setup
    return wc.compare_policies(m, hw, work, route, BATCH)


def test_compare_policies_evaluates_both_policies_on_one_grid(setup, comparison):
    m, hw, route, work = setup
    c = comparison
    assert (c.policy, c.reference) == ("lru", "static")
    assert c.plans["lru"].cache_policy == "lru" and c.plans["static"].cache_policy == "static"
    np.testing.assert_array_equal(c.batch, BATCH)
    static = plan(m, hw, replace(work, cache_policy="static"), route, BATCH)
    np.testing.assert_allclose(c.plans["static"].net_tok_s, static.net_tok_s)
    np.testing.assert_allclose(c.ratio(), c.plans["lru"].net_tok_s / static.net_tok_s)


def test_largest_gap_is_the_feasible_batch_of_the_largest_log_ratio(comparison):
    c = comparison
    ok = np.flatnonzero(c.fits)
    gap = np.abs(np.log(c.ratio()))
    i = c.largest_gap()
    assert i in ok and gap[i] == pytest.approx(gap[ok].max())
    assert c.largest_feasible() == ok[-1]
    assert c.points() == sorted({i, int(ok[-1])})


def test_no_feasible_batch_means_no_points(setup):
    m, hw, route, work = setup
    c = wc.compare_policies(m, hw, replace(work, context_tokens=10_000_000), route, [64])
    assert not c.fits.any()
    assert c.largest_gap() is None and c.points() == []
    assert "no batch of the grid fits in RAM" in wc.plan_paragraph(c, cache_gib=16)


def test_the_pinned_oracle_hits_at_least_as_often_as_lru_here(comparison):
    """At 16 GiB (about 12 experts per layer) the oracle keeps the hottest; LRU is flushed."""
    c = comparison
    assert np.all(c.plans["static"].cache_hit_rate >= c.plans["lru"].cache_hit_rate - 1e-12)


def test_paragraph_carries_the_numbers_of_the_run(comparison):
    c = comparison
    text = wc.plan_paragraph(c, cache_gib=16)
    assert text.startswith(wc.INTRO)
    assert "glm-5.2" in text and "nvme-gen4" in text and "16 GiB" in text
    for i in c.points():
        d = c.at(i)
        assert f"at B = {d['batch']}: net tok/s {d['lru']['net_tok_s']:.3g} (LRU" in text
        assert f"against {d['static']['net_tok_s']:.3g} (pinned oracle" in text
    j = c.points()[-1]
    assert f"{c.at(j)['lru']['l2_vs_uncoalesced']:.2f}× with LRU" in text
    bare = wc.plan_paragraph(c, cache_gib=16, lead=False, l2=False)
    assert not bare.startswith("**") and "Coalescing" not in bare


def test_bound_changes_list_only_feasible_differences(comparison):
    c = comparison
    for ch in c.bound_changes():
        i = int(np.flatnonzero(c.batch == ch["batch"])[0])
        assert c.fits[i] and ch["lru"] != ch["static"]


def test_compare_plans_checks_its_inputs(comparison):
    c = comparison
    with pytest.raises(ValueError, match="no plan"):
        wc.compare_plans({"lru": c.plans["lru"]})
    with pytest.raises(ValueError, match="evaluated with cache policy"):
        wc.compare_plans({"lru": c.plans["static"], "static": c.plans["static"]})
    with pytest.raises(ValueError, match="unknown|must be one of"):
        wc.short_label("fifo")
    assert wc.short_label("static") == "pinned oracle" and wc.short_label("lru") == "LRU"


def test_lever_lines_name_each_baseline_and_both_policies(setup):
    m, hw, route, work = setup
    f = {
        pol: lever_factors(m, hw, replace(work, cache_policy=pol), route, BATCH, prefix_tokens=1024)
        for pol in ("lru", "static")
    }
    text = wc.lever_lines(f, len(BATCH) - 1)
    assert text.startswith(f"at B = {BATCH[-1]}: L2 (against `uncoalesced`) ")
    for baseline in ("uncoalesced", "per-token dense reads", "per-agent prefix KV"):
        assert f"against `{baseline}`" in text
    a, r = f["lru"].l2_coalescing[-1], f["static"].l2_coalescing[-1]
    assert f"{a:.2f}× with LRU against {r:.2f}× with the pinned oracle" in text or "under both" in text
    same = wc.lever_lines({"lru": f["static"], "static": f["static"]}, 0)
    assert same.count("under both") == 3


def test_map_comparison_best_cells_and_paragraph(setup):
    m, hw, route, work = setup
    cache = np.array([0.0, 8.0, 32.0]) * GiB
    maps = {pol: regime_map(m, hw, replace(work, cache_policy=pol), route, [1, 8], cache) for pol in ("lru", "static")}
    c = wc.compare_maps(maps)
    best = c.best_cell("static")
    net = np.where(c.fits, maps["static"].net_tok_s, -np.inf)
    assert best["net_tok_s"] == pytest.approx(net.max())
    assert sum(c.bound_counts("lru").values()) == int(c.fits.sum())
    lo, hi = c.ratio_range()
    assert 0 < lo <= hi
    assert 0.0 <= c.changed_share() <= 1.0
    text = wc.map_paragraph(c, box="nvme-gen4", gib=GiB)
    assert text.startswith("On nvme-gen4: best feasible cell") and "pinned oracle" in text
    with pytest.raises(ValueError, match="one \\(cache, batch\\) grid"):
        wc.compare_maps({"lru": maps["lru"], "static": regime_map(m, hw, work, route, [1], cache)})
