"""Memory pressure that can rise, peak and fall: the OS's reclaim work on the reads,
``1 + κ·(u/(1 − u))^n`` (moeroof.models.plan.reclaim_slowdown), against hand arithmetic, the
monotone curve it replaces at κ = 0, and a fit-plan round trip on a simulated mlx-lm#1438-like truth."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest

from moeroof.core.errors import ParameterError
from moeroof.core.units import GiB
from moeroof.data.plan_points import PlanPoint
from moeroof.data.presets import load_hardware, load_model
from moeroof.fit.plan import PlanKnobs, fit_plan, predict_points
from moeroof.models.plan import RECLAIM_MAX_SHARE, Workload, plan, ram_left_bytes, reclaim_slowdown, routing_from_spec


def test_reclaim_slowdown_by_hand():
    hw = replace(load_hardware("apple-m4-max"), reclaim_penalty=2.0)
    m = load_model("glm-5.2")
    available, _ = ram_left_bytes(m, hw, np.array([1]), context_tokens=4096)
    usable = hw.ram_bytes - hw.os_reserve_bytes
    for cache in (0.0, 10 * GiB, 60 * GiB):
        u = (usable - (available[0] - cache)) / usable
        assert float(reclaim_slowdown(hw, available, cache)[0]) == pytest.approx(1 + 2.0 * u / (1 - u))
    # capped where the engine holds everything: finite, at the cap's value
    full = float(reclaim_slowdown(hw, available, available[0] + 10 * GiB)[0])
    assert full == pytest.approx(1 + 2.0 * RECLAIM_MAX_SHARE / (1 - RECLAIM_MAX_SHARE))
    assert float(reclaim_slowdown(replace(hw, reclaim_penalty=0.0), available, 60 * GiB)[0]) == 1.0


def _curve(kappa: float, caches):
    m, hw = load_model("qwen3-30b-a3b"), replace(load_hardware("nvme-gen4"), reclaim_penalty=kappa)
    r = routing_from_spec("zipf:0.8", m)
    return np.array([plan(m, hw, Workload(cache_bytes=c * GiB, overlap="sum"), r, [1]).net_tok_s[0] for c in caches])


def test_without_reclaim_a_bigger_cache_is_never_slower_and_with_it_the_curve_peaks():
    caches = [2, 6, 12, 20, 30, 40, 48]
    flat = _curve(0.0, caches)
    assert np.all(np.diff(flat) >= -1e-12)  # LRU's inclusion property and nothing else in the way
    peaked = _curve(3.0, caches)
    top = int(np.argmax(peaked))
    assert 0 < top < len(caches) - 1, peaked  # rises, peaks in the middle, falls
    assert np.all(peaked <= flat + 1e-12)  # reclaim work only ever slows the reads


def test_fit_plan_recovers_reclaim_and_predicts_the_peak_between_three_points():
    """A simulated truth with κ = 3 measured at three caches (tok/s and hit rates), as mlx-lm#1438
    measured GLM-5.2: fit-plan's ssd-scale, reclaim and skew come back, κ inside its interval,
    and the predicted curve between the points peaks where the truth's does (one grid step)."""
    m, hw = load_model("qwen3-30b-a3b"), load_hardware("nvme-gen4")
    r = routing_from_spec("zipf:0.8", m)
    caches = [2.0, 12.0, 48.0, 6.0, 20.0, 30.0, 40.0]
    pts = [PlanPoint(i + 2, 1, c, 1, "lru", None, None) for i, c in enumerate(caches)]
    truth = PlanKnobs(reclaim_penalty=3.0, skew=0.8)
    net, hit = predict_points(pts, m, hw, r, truth, overlap="sum")
    measured = [
        dataclasses.replace(p, net_tok_s=float(net[i]), hit_rate=float(hit[i])) if i < 3 else p
        for i, p in enumerate(pts)
    ]
    fit = fit_plan(measured, m, hw, r, fit=("ssd-scale", "reclaim", "skew"), overlap="sum")
    k = fit.knobs["reclaim_penalty"]
    assert k["fitted"] and k["low"] <= 3.0 <= k["high"], k
    order = np.argsort(caches)
    pred = np.array([row["predicted"] for row in fit.rows])[order]
    true = net[order]
    assert abs(int(np.argmax(pred)) - int(np.argmax(true))) <= 1, (pred, true)
    for row, t in zip(fit.rows[3:], net[3:]):
        assert row["low"] <= t <= row["high"], (row, t)
    _truth_peak_inside(fit, m, hw, r, truth)


def _truth_peak_inside(fit, m, hw, r, truth) -> None:
    """The truth's own curve on the fit's peak grid (the rows' cache range, evenly:
    moeroof.models.curve_peak) peaks inside the band the fit gives for a measured peak, and the
    fit's peak is interior, as the truth's is."""
    from moeroof.models.curve_peak import peak_grids

    (pk,) = fit.peaks
    ((_, grid),) = peak_grids([PlanPoint(0, 1, row["cache_gib"], 1, "lru", None, None) for row in fit.rows])
    curve, _ = predict_points(
        [PlanPoint(0, 1, float(c), 1, "lru", None, None) for c in grid], m, hw, r, truth, overlap="sum"
    )
    top = float(grid[int(np.argmax(curve))])
    assert pk["interior"] and pk["low"] <= top <= pk["high"], (pk, top)


def test_reclaim_exponent_by_hand_and_one_is_the_queueing_form():
    m = load_model("glm-5.2")
    base = replace(load_hardware("apple-m4-max"), reclaim_penalty=0.8)
    available, _ = ram_left_bytes(m, base, np.array([1]), context_tokens=4096)
    usable = base.ram_bytes - base.os_reserve_bytes
    for cache in (5 * GiB, 30 * GiB, 70 * GiB):
        u = (usable - (available[0] - cache)) / usable
        for n in (1.0, 1.7, 3.0):
            got = float(reclaim_slowdown(replace(base, reclaim_exponent=n), available, cache)[0])
            assert got == pytest.approx(1 + 0.8 * (u / (1 - u)) ** n)
    # a larger n is lower while the held share is under half of what the OS leaves, higher above
    lo, hi = 10 * GiB, 90 * GiB
    n1, n3 = replace(base, reclaim_exponent=1.0), replace(base, reclaim_exponent=3.0)
    u_lo = (usable - (available[0] - lo)) / usable
    assert u_lo < 0.5 and reclaim_slowdown(n3, available, lo)[0] < reclaim_slowdown(n1, available, lo)[0]
    assert reclaim_slowdown(n3, available, hi)[0] > reclaim_slowdown(n1, available, hi)[0]


def test_a_preset_reclaim_exponent_below_one_is_refused_naming_the_field(tmp_path):
    from moeroof.data.io import InputError
    from moeroof.data.presets import PRESETS_DIR

    text = (PRESETS_DIR / "hardware" / "apple-m4-max.toml").read_text()
    bad = tmp_path / "box.toml"
    bad.write_text(text + "\nreclaim_exponent = { value = 0.5, assumed = true }\n")
    with pytest.raises(InputError, match="reclaim_exponent"):
        load_hardware(str(bad))
    good = tmp_path / "good.toml"
    good.write_text(text + "\nreclaim_exponent = { value = 2, assumed = true }\n")
    assert load_hardware(str(good)).reclaim_exponent == 2.0


def test_fit_plan_recovers_the_reclaim_shape_and_the_peak_moves_with_it():
    """A truth whose reclaim work rises late and steeply (n = 2.5), its engine inside the box's
    priors but not at their centres (the fits hold it there): fitted with reclaim alone (the
    queueing form, n = 1) the curve between the points peaks at another cache than the truth's;
    with reclaim-shape, calibrated on rows that include one on the fall (40 GiB: with a single
    row past the peak κ and n trade off along a valley the rows cannot resolve), the exponent
    comes back inside its interval and the peak where the truth's is (one grid step), the
    withheld rows inside their bands."""
    m, hw = load_model("qwen3-30b-a3b"), load_hardware("nvme-gen4")
    r = routing_from_spec("zipf:0.8", m)
    caches = [2.0, 12.0, 48.0, 40.0, 6.0, 20.0, 30.0, 44.0]
    pts = [PlanPoint(i + 2, 1, c, 1, "lru", None, None) for i, c in enumerate(caches)]
    engine = dict(
        engine_seconds_per_step=0.01, engine_seconds_per_agent_token=0.0, engine_seconds_per_touched_expert=2e-4
    )
    truth = PlanKnobs(reclaim_penalty=0.5, reclaim_exponent=2.5, skew=0.8, **engine)
    net, hit = predict_points(pts, m, hw, r, truth, overlap="sum")
    measured = [
        dataclasses.replace(p, net_tok_s=float(net[i]), hit_rate=float(hit[i])) if i < 4 else p
        for i, p in enumerate(pts)
    ]
    order = np.argsort(caches)
    true_top = int(np.argmax(net[order]))
    assert 0 < true_top < len(caches) - 1, net[order]  # the truth peaks in the middle
    queueing = fit_plan(measured, m, hw, r, fit=("ssd-scale", "reclaim", "skew"), overlap="sum")
    q_pred = np.array([row["predicted"] for row in queueing.rows])[order]
    assert int(np.argmax(q_pred)) != true_top, (q_pred, net[order])
    fit = fit_plan(measured, m, hw, r, fit=("ssd-scale", "reclaim", "reclaim-shape", "skew"), overlap="sum")
    k = fit.knobs["reclaim_exponent"]
    assert k["fitted"] and k["low"] <= 2.5 <= k["high"], k
    pred = np.array([row["predicted"] for row in fit.rows])[order]
    assert abs(int(np.argmax(pred)) - true_top) <= 1, (pred, net[order])
    for row, t in zip(fit.rows[4:], net[4:]):
        assert row["low"] <= t <= row["high"], (row, t)
    _truth_peak_inside(fit, m, hw, r, truth)
    with pytest.raises(ParameterError, match="reclaim-shape"):
        fit_plan(measured, m, hw, r, fit=("ssd-scale", "reclaim-shape", "skew"), overlap="sum")


def _reclaim_truth_rows(kappa: float):
    """A box with reclaim work κ, measured (tok/s and hit rate) at two small caches, and a large
    one left to predict: qwen3-30b-a3b on nvme-gen4, one stream, zipf:0.8. The box states its
    engine (the preset's 0, as witnessed), so the fits hold no engine prior and κ's is the only
    prior whose end can widen the bands."""
    m, hw = load_model("qwen3-30b-a3b"), load_hardware("nvme-gen4")
    engine = ("engine_seconds_per_step", "engine_seconds_per_agent_token", "engine_seconds_per_touched_expert")
    hw = replace(hw, provenance={**hw.provenance, **dict.fromkeys(engine, "witnessed")})
    r = routing_from_spec("zipf:0.8", m)
    pts = [PlanPoint(i + 2, 1, c, 1, "lru", None, None) for i, c in enumerate((2.0, 6.0, 40.0))]
    net, hit = predict_points(pts, m, hw, r, PlanKnobs(reclaim_penalty=kappa, skew=0.8), overlap="sum")
    measured = [
        dataclasses.replace(p, net_tok_s=float(net[i]), hit_rate=float(hit[i])) if i < 2 else p
        for i, p in enumerate(pts)
    ]
    return m, hw, r, measured, net


def test_reclaim_work_not_fitted_is_held_at_its_prior_and_its_high_end_widens_the_bands():
    """κ is never a silent 0: where --fit does not name reclaim and the preset does not state it,
    fit-plan holds it at PRIOR_RECLAIM_PENALTY's centre, says so in the knob table and a note, and
    the bands take in its high end as far as the rows admit. A truth with κ = 1.5 measured at two
    small caches (where the reclaim work is small) lies inside the band of the large cache it
    predicts; at κ held at 0 alone (the preset stating it) it lies below that band."""
    from moeroof.fit.plan import PRIOR_RECLAIM_PENALTY

    m, hw, r, measured, truth = _reclaim_truth_rows(1.5)
    fit = fit_plan(measured, m, hw, r, fit=("ssd-scale", "skew"), overlap="sum")
    held = fit.knobs["reclaim_penalty"]
    assert (held["value"], held["low"], held["high"]) == PRIOR_RECLAIM_PENALTY and not held["fitted"]
    assert any(n.startswith("reclaim_penalty") for n in fit.notes)
    row = fit.rows[2]
    assert row["low"] <= truth[2] <= row["high"], (row, truth[2])
    stated = replace(hw, provenance={**hw.provenance, "reclaim_penalty": "witnessed"})
    silent = fit_plan(measured, m, stated, r, fit=("ssd-scale", "skew"), overlap="sum")
    assert "reclaim_penalty" not in silent.knobs
    assert truth[2] < silent.rows[2]["low"], (silent.rows[2], truth[2])
    assert silent.rows[2]["low"] > row["low"]


def test_fitted_reclaim_work_is_not_also_held():
    m, hw, r, measured, _ = _reclaim_truth_rows(1.5)
    fit = fit_plan(measured, m, hw, r, fit=("ssd-scale", "reclaim", "skew"), overlap="sum")
    assert fit.knobs["reclaim_penalty"]["fitted"]
    assert not any(n.startswith("reclaim_penalty (κ") for n in fit.notes)


def _page_cache_truth_rows():
    """A box whose reads go through the OS page cache (share 1), measured (tok/s and hit rate) at
    two large caches, and a small one left to predict: qwen3-30b-a3b on nvme-gen4, one stream,
    zipf:0.8, the efficiencies at the box's priors' centres (as fit-plan holds them)."""
    m, hw = load_model("qwen3-30b-a3b"), load_hardware("nvme-gen4")
    r = routing_from_spec("zipf:0.8", m)
    eff = {k: hw.priors[k][0][1] for k in ("mem_efficiency", "compute_efficiency")}
    pts = [PlanPoint(i + 2, 1, c, 1, "lru", None, None) for i, c in enumerate((20.0, 30.0, 4.0))]
    net, hit = predict_points(pts, m, hw, r, PlanKnobs(page_cache_share=1.0, skew=0.8, **eff), overlap="sum")
    measured = [
        dataclasses.replace(p, net_tok_s=float(net[i]), hit_rate=float(hit[i])) if i < 2 else p
        for i, p in enumerate(pts)
    ]
    return m, hw, r, measured, net


def test_the_page_cache_not_stated_is_held_off_and_its_high_end_widens_the_bands(monkeypatch):
    """Whether a box's reads go through the OS page cache is never decided silently: where neither
    --fit pressure nor --page-cache says, fit-plan holds its share at PRIOR_PAGE_CACHE_SHARE's
    centre (off), says so in the knob table and a note, and its high end (share 1) widens the
    bands where it meets every calibration row within 2 σ. Rows measured on a box whose page cache
    holds the reads admit it: the band of the row it predicts reaches past the one fitted with
    the end at the centre (the page cache off alone), and holds it."""
    from moeroof.fit import plan as fp

    m, hw, r, measured, truth = _page_cache_truth_rows()
    fit = fit_plan(measured, m, hw, r, fit=("ssd-scale", "skew"), overlap="sum")
    held = fit.knobs["page_cache_share"]
    assert (held["value"], held["low"], held["high"]) == fp.PRIOR_PAGE_CACHE_SHARE and not held["fitted"]
    assert any("OS page cache's share of the RAM the expert cache leaves is held at 0" in n for n in fit.notes)
    monkeypatch.setattr(fp, "PRIOR_PAGE_CACHE_SHARE", (0.0, 0.0, 0.0))
    off = fit_plan(measured, m, hw, r, fit=("ssd-scale", "skew"), overlap="sum")
    row, row_off = fit.rows[2], off.rows[2]
    assert row["low"] <= row_off["low"] and row["high"] >= row_off["high"]
    assert row["high"] > row_off["high"] * 1.2, (row, row_off)
    assert row["low"] <= truth[2] <= row["high"]


def test_the_page_cache_stated_is_not_also_held():
    m, hw, r, measured, _ = _page_cache_truth_rows()
    on = fit_plan(measured, m, hw, r, fit=("ssd-scale", "skew"), overlap="sum", page_cache=True)
    fitted = fit_plan(measured, m, hw, r, fit=("ssd-scale", "skew", "pressure"), overlap="sum")
    assert "page_cache_share" not in on.knobs and fitted.knobs["page_cache_share"]["fitted"]
    for f in (on, fitted):
        assert not any("OS page cache's share of the RAM the expert cache leaves is held" in n for n in f.notes)
