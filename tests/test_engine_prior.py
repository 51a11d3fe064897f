"""The engine at its priors (moeroof.models.engine_prior): a zero-fit answer holds what the preset
does not state where fit-plan would, and its range is each knob at each end, priced on one work."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.data.presets import DEFAULT_PRIORS, PRIOR_FIELDS, load_hardware, load_model
from moeroof.models.engine_prior import at_prior_centres, held_priors, prior_band
from moeroof.models.plan import Workload, plan, routing_from_spec


def _case(box: str = "nvme-gen4"):
    model = load_model("qwen3-30b-a3b")
    return model, load_hardware(box), Workload(cache_bytes=4 * 2**30), routing_from_spec("zipf:0.9", model)


def test_every_unstated_knob_is_held_and_a_stated_one_is_not():
    _, hw, _, _ = _case()
    assert set(held_priors(hw)) == set(PRIOR_FIELDS)  # the preset states none of them
    stated = replace(hw, provenance={**hw.provenance, "engine_seconds_per_step": "witnessed"})
    assert "engine_seconds_per_step" not in held_priors(stated)
    centred = at_prior_centres(stated)
    assert centred.engine_seconds_per_step == hw.engine_seconds_per_step  # the stated value kept
    assert centred.mem_efficiency == hw.priors["mem_efficiency"][0][1]
    # an assumed value other than the roofline's default, or one set on the command line, is kept
    from moeroof.data.presets import with_overrides

    assert "engine_seconds_per_step" not in held_priors(replace(hw, engine_seconds_per_step=0.03))
    by_flag = with_overrides(hw, {"engine_seconds_per_step": "0s", "mem_efficiency": "0.5"})
    assert {"engine_seconds_per_step", "mem_efficiency"}.isdisjoint(held_priors(by_flag))


def test_the_band_is_each_knob_at_each_end_through_plan_itself():
    """The centre and both ends, recomputed independently: the whole ``plan`` (its own cache
    simulation) on the box with one knob moved at a time, with the terms combined either way
    (``max``, the workload's, and ``sum``: a structural choice of the unmeasured engine)."""
    model, hw, wl, routing = _case()
    batch = [1, 4, 16]
    band = prior_band(model, hw, wl, routing, batch)
    centre = at_prior_centres(hw)
    mid = plan(model, centre, wl, routing, batch).net_tok_s
    assert wl.overlap == "max"
    both = (wl, replace(wl, overlap="sum"))
    ends = [
        plan(model, replace(centre, **{k: v}), w, routing, batch).net_tok_s
        for w in both
        for k, (lo, _, hi) in held_priors(hw).items()
        for v in (lo, hi)
    ]
    ends.append(plan(model, centre, both[1], routing, batch).net_tok_s)
    np.testing.assert_allclose(band.net_tok_s, mid, rtol=1e-12)
    np.testing.assert_allclose(band.low, np.min([mid, *ends], axis=0), rtol=1e-12)
    np.testing.assert_allclose(band.high, np.max([mid, *ends], axis=0), rtol=1e-12)
    assert np.all(band.low < band.net_tok_s) and np.all(band.net_tok_s <= band.high)
    # the roofline (engine 0, efficiencies 1) is never slower than the engine at its centres
    assert np.all(plan(model, hw, wl, routing, batch).net_tok_s >= band.net_tok_s)


def test_a_witnessed_peak_ends_its_efficiency_prior_at_one(tmp_path: Path):
    (lo, mid, hi), _ = DEFAULT_PRIORS["mem_efficiency"]
    witnessed = load_hardware("apple-m4")  # bw_mem witnessed (bigrig's calibrate)
    assert witnessed.provenance["bw_mem_bytes_per_s"] == "witnessed"
    assert witnessed.priors["mem_efficiency"][0] == pytest.approx((lo / hi, mid / hi, 1.0))
    assert "witnessed" in witnessed.priors["mem_efficiency"][1]
    rated = load_hardware("gb10")  # a spec sheet's peak: the prior as published
    assert rated.provenance["bw_mem_bytes_per_s"] != "witnessed"
    assert rated.priors["mem_efficiency"][0] == (lo, mid, hi)
    # a preset's own prior wins over the rescaled one
    text = Path(witnessed.path).read_text()
    text += (
        'mem_efficiency = { value = 1, assumed = true, prior = [0.3, 0.6, 0.8], prior_source = "a test" }\n'
        if "mem_efficiency" not in text
        else ""
    )
    own = tmp_path / "own.toml"
    own.write_text(text)
    assert load_hardware(own).priors["mem_efficiency"][0] == (0.3, 0.6, 0.8)


def test_plan_shows_the_engine_at_its_priors_beside_the_roofline(capsys):
    argv = ["plan", "--model", "qwen3-30b-a3b", "--hardware", "nvme-gen4", "--batch", "1,8", "--cache-gib", "4"]
    assert main([*argv, "--routing", "zipf:0.9", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    mid, lo, hi = (
        np.array(rep[k]) for k in ("net_tok_s_at_priors", "net_tok_s_at_priors_low", "net_tok_s_at_priors_high")
    )
    assert np.all(lo <= mid) and np.all(mid <= hi) and np.all(mid <= np.array(rep["net_tok_s"]))
    assert set(rep["engine_priors"]["held"]) == set(PRIOR_FIELDS)
    assert any(n.startswith("tok/s at priors:") and "20 ms (5–75)" in n for n in rep["notes"])
    assert main([*argv, "--routing", "zipf:0.9"]) == 0
    out = capsys.readouterr().out
    assert "tok/s at priors" in out and f"({lo[0]:.3f}–{hi[0]:.3f})" in out


def test_set_takes_an_efficiency_as_a_share_and_refuses_one_outside_it():
    """``--set mem_efficiency=0.5`` was refused as "must be a positive integer" (the shares share
    the dimensionless kind with the model's counts); the preset's own bounds apply instead."""
    from moeroof.data.presets import with_overrides

    hw = load_hardware("nvme-gen4")
    assert with_overrides(hw, {"mem_efficiency": "0.5", "reclaim_penalty": "0.3"}).mem_efficiency == 0.5
    for key, bad, words in (
        ("mem_efficiency", "1.5", "share of a peak"),
        ("reclaim_exponent", "0.5", ">= 1"),
        ("reclaim_penalty", "-1", ">= 0"),
    ):
        with pytest.raises(ValueError, match=words):
            with_overrides(hw, {key: bad})
    model = load_model("qwen3-30b-a3b")
    with pytest.raises(ValueError, match="positive integer"):
        with_overrides(model, {"top_k": "2.5"})


def test_the_terms_combined_the_other_way_widen_the_band_where_they_bind():
    """GLM-5.2 on a Gen5 NVMe box with a 64 GiB cache: streaming and memory are comparable, so
    the terms summed (one after another) at the priors' centres are slower than any knob's end
    with them overlapped, and the band's low end is the slowest knob end with them summed
    (recomputed through plan)."""
    model, hw = load_model("glm-5.2"), load_hardware("nvme-gen5")
    wl, routing = Workload(cache_bytes=64 * 2**30), routing_from_spec("zipf:0.9", model)
    band = prior_band(model, hw, wl, routing, [1])
    centre = at_prior_centres(hw)
    summed = plan(model, centre, replace(wl, overlap="sum"), routing, [1]).net_tok_s
    ends = [
        plan(model, replace(centre, **{k: v}), wl, routing, [1]).net_tok_s
        for k, (lo, _, hi) in held_priors(hw).items()
        for v in (lo, hi)
    ]
    assert summed[0] < 0.9 * np.min(ends)
    summed_ends = [
        plan(model, replace(centre, **{k: v}), replace(wl, overlap="sum"), routing, [1]).net_tok_s
        for k, (lo, _, hi) in held_priors(hw).items()
        for v in (lo, hi)
    ]
    np.testing.assert_allclose(band.low, np.min([summed, *summed_ends], axis=0), rtol=1e-12)


def test_the_cost_per_touched_pair_is_held_at_its_public_prior_and_prices_every_touched_pair():
    """The per-touched-expert prior (0 – 0.09 – 0.8 ms) is held where the preset is silent, and
    at one rank with the terms summed its high end adds exactly (high − centre) × the pairs the
    step touches to each step's seconds: B / tok/s recomputed from the step's own work."""
    from moeroof.models.plan import batch_works

    model, hw, wl, routing = _case()
    lo, mid, hi = held_priors(hw)["engine_seconds_per_touched_expert"]
    assert lo == 0.0 < mid < hi
    assert "bigrig" in hw.priors["engine_seconds_per_touched_expert"][1]
    batch = np.array([1, 4, 16])
    wl = replace(wl, overlap="sum")
    centre = at_prior_centres(hw)
    assert centre.engine_seconds_per_touched_expert == mid
    (work,) = batch_works(model, centre, wl, routing, batch)
    pairs = np.asarray(work.expert_reads, dtype=float).reshape(-1)
    assert np.all(np.diff(pairs) > 0)  # more agents touch more pairs
    at = {v: plan(model, replace(centre, engine_seconds_per_touched_expert=v), wl, routing, batch) for v in (mid, hi)}
    extra = batch / at[hi].net_tok_s - batch / at[mid].net_tok_s
    np.testing.assert_allclose(extra, (hi - mid) * pairs, rtol=1e-9)
    # the zero-fit band reaches that end
    band = prior_band(model, hw, wl, routing, batch)
    assert np.all(band.low <= at[hi].net_tok_s * (1 + 1e-12))


def test_reads_through_the_page_cache_hold_the_reclaim_work_at_its_prior():
    """With the experts read through the page cache (``--page-cache``) on a box that does not state
    κ, the band takes the reclaim work's high end: its low end is at most plan's rate with κ = 3.3
    and the engine at its centres (each combination of the terms); reads that bypass the page
    cache, or a box that states κ, hold none. On mlx-lm#1438's box at its 75 GB cache, where
    the engine holds most of what the OS leaves, that end lowers the band several-fold."""
    from moeroof.models.engine_prior import PRIOR_RECLAIM_PENALTY

    model, hw = load_model("glm-5.2"), load_hardware("apple-m4-max")
    routing = routing_from_spec("zipf:0.8", model)
    direct = Workload(cache_bytes=69.849 * 2**30)
    buffered = replace(direct, page_cache=True)
    plain = prior_band(model, hw, direct, routing, [1])
    through = prior_band(model, hw, buffered, routing, [1])
    assert "reclaim_penalty" not in plain.held
    assert through.held["reclaim_penalty"] == PRIOR_RECLAIM_PENALTY
    high_kappa = replace(at_prior_centres(hw), reclaim_penalty=PRIOR_RECLAIM_PENALTY[2])
    at_end = min(
        float(plan(model, high_kappa, replace(buffered, overlap=ov), routing, [1]).net_tok_s[0])
        for ov in ("max", "sum")
    )
    assert through.low[0] <= at_end * (1 + 1e-12)
    assert through.low[0] < plain.low[0] / 2
    assert "reclaim_penalty κ 0 (0–3.3" in through.note()
    stated = replace(hw, provenance={**hw.provenance, "reclaim_penalty": "witnessed"})
    assert "reclaim_penalty" not in prior_band(model, stated, buffered, routing, [1]).held
