"""fit-plan: the step model's knobs fitted on measured rows, the other rows predicted with bands.

Round trips: points simulated from known knobs (with noise on the calibration rows) are fitted
back; the knobs come back inside their stated intervals and the held-out rows inside their
bands. Errors: malformed POINTS files name file, row and field."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.core.errors import ParameterError
from moeroof.data.io import InputError
from moeroof.data.plan_points import PlanPoint, read_plan_points
from moeroof.data.presets import load_hardware, load_model
from moeroof.fit import plan as fp
from moeroof.fit.plan import SIGMA_HIT, SIGMA_NET, PlanKnobs, default_knobs, fit_plan, predict_points
from moeroof.models.plan import routing_from_spec


@pytest.fixture(scope="module")
def engine_box():
    m, hw = load_model("qwen3-30b-a3b-3bit"), load_hardware("apple-m4")
    return m, hw, routing_from_spec("zipf:0.8", m)


def points(spec, policy="lru"):
    return [PlanPoint(i + 2, b, c, 1, policy, None, None) for i, (b, c) in enumerate(spec)]


def with_measured(pts, net, cal, noise=None):
    noise = np.ones(len(pts)) if noise is None else noise
    return [dataclasses.replace(p, net_tok_s=float(net[i] * noise[i]) if i in cal else None) for i, p in enumerate(pts)]


def test_engine_terms_round_trip(engine_box):
    m, hw, r = engine_box
    truth = PlanKnobs(engine_seconds_per_step=0.045, engine_seconds_per_agent_token=0.013)
    pts = points([(b, 20.0) for b in (1, 2, 4, 8, 16)])
    net, _ = predict_points(pts, m, hw, r, truth)
    # the engine binds: T = c0 + c1·B exactly (an independent check of the truth points)
    np.testing.assert_allclose(np.array([1, 2, 4, 8, 16]) / net, 0.045 + 0.013 * np.array([1, 2, 4, 8, 16]))
    measured = with_measured(pts, net, {0, 4}, np.array([1.02, 1, 1, 1, 0.99]))
    # overlap left open: two rows cannot tell max from sum, so both fit and the bands hold both
    both = fit_plan(measured, m, hw, r)
    assert set(both.overlaps) == {"max", "sum"}
    for i, row in enumerate(both.rows):
        assert row["low"] <= net[i] <= row["high"]
    fit = fit_plan(measured, m, hw, r, overlap="max")  # the truth's structure: the knobs come back
    assert fit.fitted == ("engine",)
    for key, true in (("engine_seconds_per_step", 0.045), ("engine_seconds_per_agent_token", 0.013)):
        k = fit.knobs[key]
        assert k["identified"] and k["low"] <= true <= k["high"], (key, k)
    for i, row in enumerate(fit.rows):
        assert row["row"] == pts[i].row  # input order
        if row["role"] == "prediction":
            assert row["low"] <= net[i] <= row["high"]


def test_ssd_scale_round_trip_on_an_ssd_bound_box():
    m, hw = load_model("glm-5.2"), load_hardware("nvme-gen4")
    r = routing_from_spec("zipf:0.8", m)
    pts = points([(1, 20.0), (2, 20.0), (8, 20.0), (1, 40.0)])
    net, _ = predict_points(pts, m, hw, r, PlanKnobs(ssd_scale=0.6))
    fit = fit_plan(with_measured(pts, net, {0}), m, hw, r)
    assert fit.fitted == ("ssd-scale",)
    k = fit.knobs["ssd_scale"]
    assert k["value"] == pytest.approx(0.6, rel=1e-6) and k["low"] <= 0.6 <= k["high"]
    np.testing.assert_allclose([row["predicted"] for row in fit.rows], net, rtol=1e-6)


def test_a_knob_the_rows_cannot_move_is_reported_not_identified(engine_box):
    m, hw, r = engine_box
    pts = points([(1, 20.0), (4, 20.0), (16, 20.0)])
    truth = PlanKnobs(engine_seconds_per_step=0.045, engine_seconds_per_agent_token=0.013)
    net, _ = predict_points(pts, m, hw, r, truth)
    fit = fit_plan(with_measured(pts, net, {0, 1, 2}), m, hw, r, fit=("engine", "ssd-scale"))
    # the engine binds at every row: the SSD term has no gradient there, so its scale is not
    # identified and its interval is its whole range; the engine terms are
    assert fit.knobs["ssd_scale"]["identified"] is False
    assert (fit.knobs["ssd_scale"]["low"], fit.knobs["ssd_scale"]["high"]) == (1e-3, 1e3)
    assert fit.knobs["engine_seconds_per_step"]["identified"] is True
    assert any("ssd-scale is not identified" in n for n in fit.notes)


def test_skew_round_trip_from_hit_rates():
    m, hw = load_model("glm-5.2"), load_hardware("nvme-gen4")
    pts = [PlanPoint(i + 2, 1, c, 1, "static", None, None) for i, c in enumerate((10.0, 40.0, 80.0, 160.0))]
    _, hit = predict_points(pts, m, hw, routing_from_spec("zipf:1.1", m), PlanKnobs())
    cal = [dataclasses.replace(p, hit_rate=float(hit[i]) if i in (0, 2) else None) for i, p in enumerate(pts)]
    fit = fit_plan(cal, m, hw, routing_from_spec("zipf:0.8", m), fit=("skew",))
    assert fit.knobs["skew"]["value"] == pytest.approx(1.1, abs=0.03)
    for i in (1, 3):
        assert fit.rows[i]["predicted_hit_rate"] == pytest.approx(hit[i], abs=0.02)


def test_default_knobs_follow_what_the_rows_identify():
    one = [PlanPoint(2, 1, 0, 1, "lru", 1.0, None)]
    two = one + [PlanPoint(3, 8, 0, 1, "lru", 2.0, None)]
    three = two + [PlanPoint(4, 16, 0, 1, "lru", 3.0, None)]
    assert default_knobs(one) == ("ssd-scale",)
    assert default_knobs(two) == ("engine",)
    assert default_knobs(three) == ("engine", "ssd-scale")
    assert default_knobs([PlanPoint(2, 1, 0, 1, "lru", None, 0.5)]) == ("skew",)


def test_more_knobs_than_rows_is_refused(engine_box):
    m, hw, r = engine_box
    with pytest.raises(ParameterError, match="need 2 measured"):  # c0 and the SSD scale; c1 held at one B
        fit_plan([PlanPoint(2, 1, 0, 1, "lru", 10.0, None)], m, hw, r, fit=("engine", "ssd-scale"))
    with pytest.raises(ParameterError, match="unknown knob"):
        fit_plan([PlanPoint(2, 1, 0, 1, "lru", 10.0, None)], m, hw, r, fit=("speed",))


@pytest.mark.parametrize(
    "body,field",
    [
        ("", "file"),
        ("batch,cache_gib,net_tok_s\n", "file"),
        ("batch,cache_gib,net_tok_s\n1,20,\n", "net_tok_s"),
        ("batch,cache_gib,net_tok_s,hit_rate\n1,20,5,1.5\n", "hit_rate"),
        ("batch,cache_gib,net_tok_s\n0,20,5\n", "batch"),
        ("batch,cache_gib,net_tok_s\n1,-1,5\n", "cache_gib"),
        ("batch,cache_gib,net_tok_s,policy\n1,20,5,fifo\n", "policy"),
        ("batch,cache_gib,net_tok_s\n1,20,5\n1,20,6\n", "row"),
        ("batch,cache_gib,speed\n1,20,5\n", "speed"),
        ("batch,net_tok_s\n1,5\n", "cache_gib"),
        ("batch,cache_gib,net_tok_s\n1,20\n", "row"),
    ],
)
def test_bad_points_files_name_the_field(tmp_path, body, field):
    p = tmp_path / "points.csv"
    p.write_text(body)
    with pytest.raises(InputError) as err:
        read_plan_points(p)
    assert err.value.field == field and str(p) in str(err.value)


def test_cli_contract_and_errors(tmp_path, capsys):
    p = tmp_path / "p.csv"
    p.write_text(
        "# bigrig-like\nbatch,cache_gib,ranks,policy,net_tok_s,hit_rate\n1,20,1,lru,17.17,\n4,20,1,lru,,\n16,20,1,lru,63.24,\n"
    )
    args = ["fit-plan", str(p), "--model", "qwen3-30b-a3b-3bit", "--hardware", "apple-m4", "--json"]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [r["batch"] for r in rep["rows"]] == [1, 4, 16]
    assert rep["rows"][1]["role"] == "prediction" and rep["rows"][1]["measured"] is None
    assert rep["rows"][1]["low"] <= rep["rows"][1]["predicted"] <= rep["rows"][1]["high"]
    assert set(rep["knobs"]) >= {"engine_seconds_per_step", "engine_seconds_per_agent_token", "ssd_scale"}
    assert main([*args[:-1], "--fit", "speed"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --fit")
    bad = tmp_path / "bad.csv"
    bad.write_text("batch,cache_gib,net_tok_s\n1,20,x\n")
    assert main(["fit-plan", str(bad), "--model", "glm-5.2", "--hardware", "nvme-gen4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.csv:2: net_tok_s" in err


def test_routing_knobs_from_a_fit_routing_result(tmp_path, capsys):
    """--routing-knobs reads fit-routing's JSON (family, knobs with values; locality off = null)
    and runs the cache on a trace sampled from them; a bad file is one error line naming the flag."""
    knobs = tmp_path / "knobs.json"
    knobs.write_text(
        json.dumps(
            {
                "family": "dirichlet",
                "knobs": {"skew": {"value": 0.4}, "rho": {"value": 0.3}, "locality_c": {"value": None}},
            }
        )
    )
    pts = tmp_path / "p.csv"
    pts.write_text("batch,cache_gib,net_tok_s,hit_rate\n1,4,0.5,\n4,4,,\n")
    args = ["fit-plan", str(pts), "--model", "glm-5.2", "--hardware", "nvme-gen4", "--routing-knobs", str(knobs)]
    assert main([*args, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["routing"].startswith("dirichlet 0.4, ρ=0.3") and "c=" not in rep["routing"]
    assert rep["rows"][0]["predicted"] == pytest.approx(0.5, rel=1e-6)  # its one calibration row
    knobs.write_text(json.dumps({"family": "pareto", "knobs": {}}))
    assert main(args) == 2
    assert capsys.readouterr().err.startswith("error: --routing-knobs")


def test_plan_takes_routing_knobs_and_stickiness_raises_its_hits(tmp_path, capsys):
    """`plan --routing-knobs` runs the cache on a trace sampled from fit-routing's knobs: with the
    same skew, a stickier stream re-uses its experts and the LRU cache hits more."""
    hits = {}
    for rho in (0.0, 0.5):
        f = tmp_path / f"k{rho}.json"
        f.write_text(json.dumps({"family": "dirichlet", "knobs": {"skew": {"value": 0.4}, "rho": {"value": rho}}}))
        args = ["plan", "--model", "glm-5-nvfp4", "--hardware", "gb10", "--routing-knobs", str(f)]
        assert main([*args, "--batch", "1", "--cache-gib", "20", "--context", "512", "--json"]) == 0
        rep = json.loads(capsys.readouterr().out)
        assert rep["routing"].startswith("dirichlet 0.4")
        hits[rho] = rep["cache_hit_rate"][0]
    assert hits[0.5] > hits[0.0] + 0.05, hits


# ----------------------------------------------------------------------------- cache knobs' uncertainty in the bands
def _glm_box():
    m, hw = load_model("glm-5.2"), load_hardware("nvme-gen4")
    return m, hw


def _noisy(pts, net, hit, cal, seed, with_hit=True, scale=0.5):
    """Calibration rows ``cal`` measured with ``scale`` times the noise the fit assumes (σ_net on
    log tok/s, σ_hit on the hit rate); the others left empty. Half the assumed noise keeps a 5–95 %
    interval's miss rate well below one in ten, so a round trip that misses says the interval is
    too narrow, not that the draw was unlucky."""
    rng = np.random.default_rng(seed)
    out = []
    for i, p in enumerate(pts):
        if i not in cal:
            out.append(p)
            continue
        n = float(net[i] * np.exp(rng.normal(0.0, scale * SIGMA_NET)))
        h = float(np.clip(hit[i] + rng.normal(0.0, scale * SIGMA_HIT), 0.0, 1.0)) if with_hit else None
        out.append(dataclasses.replace(p, net_tok_s=n, hit_rate=h))
    return out


@pytest.mark.parametrize(
    "knob,truth,start,cells,cal",
    [
        # skew from hit rates and tok/s, with the SSD scale beside it
        ("skew", {"skew": 1.1}, "zipf:0.8", [(1, 5), (1, 10), (4, 10), (1, 20), (4, 20), (8, 20), (1, 40), (4, 40)],
         {0, 3, 5, 6}),
        # the page-cache share from tok/s alone (small caches feel it, large ones pin the SSD scale)
        ("pressure", {"page_cache_share": 0.5}, "zipf:1.0",
         [(1, 2), (1, 5), (2, 5), (1, 10), (2, 10), (4, 10), (1, 20), (1, 30)], {0, 2, 3, 6, 7}),
    ],
)  # fmt: skip
def test_cache_knob_round_trip_bands_and_interval_cover_the_truth(knob, truth, start, cells, cal):
    m, hw = _glm_box()
    pts = points(cells)
    true_knobs = PlanKnobs(ssd_scale=0.8, **truth)
    # the truth's routing: a skew knob is Zipf s; a pressure truth runs on the routing given
    route = routing_from_spec(start, m)
    net, hit = predict_points(pts, m, hw, route, true_knobs)
    measured = _noisy(pts, net, hit, cal, seed=11, with_hit=knob == "skew")
    fit = fit_plan(measured, m, hw, route, fit=(knob, "ssd-scale"), overlap="max")
    assert fit.fitted == (knob, "ssd-scale")
    key, value = next(iter(truth.items()))
    k = fit.knobs[key]
    assert k["fitted"] and k["identified"], k
    assert k["low"] <= value <= k["high"], (key, k)
    assert k["low"] < k["high"], k  # an interval, not a point
    s = fit.knobs["ssd_scale"]
    assert s["low"] <= 0.8 <= s["high"], s
    for i, row in enumerate(fit.rows):
        assert row["row"] == pts[i].row
        if row["role"] == "prediction":
            assert row["low"] <= net[i] <= row["high"], (i, row, net[i])
            assert row["hit_rate_low"] <= hit[i] <= row["hit_rate_high"], (i, row, hit[i])
            if 0.1 < row["predicted_hit_rate"] < 0.9:
                # a band is where a new measurement falls: at least the 5–95 % span of its noise,
                # 3.29 σ_hit for a normal one (2.5 σ_hit allows for the draws' sampling)
                assert row["hit_rate_high"] - row["hit_rate_low"] >= 2.5 * SIGMA_HIT, (i, row)


def test_a_fitted_cache_knob_widens_the_band_over_the_same_fit_with_it_held():
    """The skew fitted, then held at its fitted value (the routing zipf:ŝ, only the SSD scale
    fitted): the same knobs and predictions, but the fitted skew's uncertainty widens every
    predicted row's band and contains the held fit's band."""
    m, hw = _glm_box()
    pts = points([(1, 5), (1, 10), (4, 10), (1, 20), (4, 20), (8, 20), (1, 40), (4, 40)])
    net, hit = predict_points(pts, m, hw, routing_from_spec("zipf:1.1", m), PlanKnobs(ssd_scale=0.8))
    measured = _noisy(pts, net, hit, {0, 3, 5, 6}, seed=5)
    free = fit_plan(measured, m, hw, routing_from_spec("zipf:0.8", m), fit=("skew", "ssd-scale"), overlap="max")
    s_hat = free.knobs["skew"]["value"]
    held = fit_plan(measured, m, hw, routing_from_spec(f"zipf:{s_hat!r}", m), fit=("ssd-scale",), overlap="max")
    assert "skew" not in held.knobs
    assert held.knobs["ssd_scale"]["value"] == pytest.approx(free.knobs["ssd_scale"]["value"], rel=1e-6)
    for f, h in zip(free.rows, held.rows):
        assert f["predicted"] == pytest.approx(h["predicted"], rel=1e-6)
        assert f["low"] <= h["low"] * (1 + 1e-9) and f["high"] >= h["high"] * (1 - 1e-9), (f, h)
        if f["role"] == "prediction":
            assert f["high"] - f["low"] > 1.02 * (h["high"] - h["low"]), (f, h)
            f_hit, h_hit = f["hit_rate_high"] - f["hit_rate_low"], h["hit_rate_high"] - h["hit_rate_low"]
            # a cache below one token's picks over the layers misses every time at any skew (the
            # global LRU cycles): its hit rate, 0, has nothing for the skew to widen
            assert f_hit > h_hit if h["predicted_hit_rate"] > 0.02 else f_hit >= h_hit, (f, h)


def test_shipped_bigrig_example_predicts_the_withheld_measurements(capsys):
    """data/points/bigrig.plan-points calibrates on bigrig's B = 1 and 16 only; the measured
    26.0 / 41.1 / 54.2 tok/s at B = 2, 4, 8 (docs/sources.md, left empty in the file) must fall
    inside the predicted 5–95 % bands and within 10 % of the prediction."""
    from moeroof.core.paths import DATA_DIR

    path = DATA_DIR / "points" / "bigrig.plan-points"
    args = ["fit-plan", str(path), "--model", "qwen3-30b-a3b-3bit", "--hardware", "apple-m4", "--json"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    withheld = {r["batch"]: r for r in rows if r["measured"] is None}
    assert sorted(withheld) == [2, 4, 8]
    for batch, measured in ((2, 26.0), (4, 41.1), (8, 54.2)):
        r = withheld[batch]
        assert r["low"] <= measured <= r["high"], r
        assert abs(r["predicted"] / measured - 1) <= 0.10, r


# ----------------------------------------------------------------------------- fits that say what they know


def test_default_knobs_are_those_the_routing_allows():
    hits = [PlanPoint(2, 1, 10, 1, "lru", None, 0.5), PlanPoint(3, 1, 20, 1, "lru", 12.0, None)]
    assert "skew" in default_knobs(hits)
    assert "skew" not in default_knobs(hits, routing_is_spec=False)  # a histogram has its own skew
    one_b = [PlanPoint(i + 2, 1, c, 1, "lru", v, None) for i, (c, v) in enumerate(((2, 10.0), (8, 12.0), (16, 13.0)))]
    assert default_knobs(one_b) == ("engine", "ssd-scale")  # c0 and the SSD scale; c1 at its prior


def test_rho_joins_the_default_where_hit_rates_are_measured_at_three_configurations():
    """Two hit rates identify the skew alone (the locality prior holds ρ); three distinct
    configurations identify ρ beside it, with a rate to spare; repeats of one configuration
    count once, and a histogram's routing fits neither."""
    three = [
        PlanPoint(i + 2, 1, c, 1, "lru", None, h) for i, (c, h) in enumerate(((9.3, 0.0), (18.6, 0.24), (70, 0.6)))
    ]
    assert default_knobs(three[:2]) == ("skew",)
    assert default_knobs(three) == ("skew", "rho")
    assert default_knobs([three[0], three[1], dataclasses.replace(three[1], row=9)]) == ("skew",)
    assert default_knobs(three, routing_is_spec=False) == ()


def _memory_truth(**knobs) -> list[PlanPoint]:
    """Four cache sizes of one stream of GLM-5.2 on the M4 Max preset, tok/s and hit rates as a
    known step makes them (``sum`` overlap; the engine at 20 ms a step and 0.5 ms a touched pair)."""
    model, hw = load_model("glm-5.2"), load_hardware("apple-m4-max")
    routing = routing_from_spec("zipf:1.0", model)
    rows = [PlanPoint(i, 1, c, 1, "lru", None, None) for i, c in enumerate((9.3, 18.6, 40.0, 69.8))]
    truth = PlanKnobs(
        skew=1.0,
        ssd_scale=0.7,
        engine_seconds_per_step=0.02,
        engine_seconds_per_agent_token=0.0,
        engine_seconds_per_touched_expert=5e-4,
        **knobs,
    )
    net, hit = predict_points(rows, model, hw, routing, truth, overlap="sum")
    return [dataclasses.replace(p, net_tok_s=float(n), hit_rate=float(h)) for p, n, h in zip(rows, net, hit)]


def _default_choice(rows, model, hw, routing) -> tuple[tuple[str, ...], str]:
    """The knobs and note :func:`fit_plan`'s default chooses for ``rows`` (every setting at
    fit_plan's defaults), without the fit that follows the choice."""
    from moeroof.fit.plan import choose_memory_knob

    kw = dict(context_tokens=4096, page_cache=False, routing_is_spec=True, max_evaluations=40, locality=None)
    return choose_memory_knob(rows, model, hw, routing, jobs=2, memo={}, **kw)


def test_the_default_fits_the_memory_knob_the_rows_rule_in():
    """Rows at four cache sizes of one batch size: made by a step whose reads slow with the OS's
    reclaim work (κ = 3), the default fit takes ``reclaim`` with its shape n and meets them (from
    three rows, n beside κ and the SSD scale, the engine held at its priors); made without a memory
    effect, it takes neither; a named --fit is not second-guessed. Each says what it tried."""
    model, hw = load_model("glm-5.2"), load_hardware("apple-m4-max")
    routing = routing_from_spec("zipf:1.0", model)
    reclaimed = fit_plan(_memory_truth(reclaim_penalty=3.0), model, hw, routing, jobs=2)
    assert "reclaim" in reclaimed.fitted and "pressure" not in reclaimed.fitted
    assert reclaimed.cost < 1.0  # the rows met within a fraction of their noise
    assert any("rule out the step without the reclaim work" in n for n in reclaimed.notes)
    # four tok/s rows: the shape n beside κ, the engine's per-touched-expert cost and the SSD scale
    assert {"reclaim-shape", "engine"} <= set(reclaimed.fitted)
    # three: too few for n beside all three, so n is held at its prior's centre, its ends in the
    # bands, and the engine's cost per touched expert stays fitted
    rows = _memory_truth(reclaim_penalty=3.0)
    three = fit_plan([rows[0], rows[1], rows[3]], model, hw, routing, jobs=2)  # 9.3, 18.6 and 69.8 GiB
    assert {"reclaim", "engine"} <= set(three.fitted) and "reclaim-shape" not in three.fitted
    n_held = three.knobs["reclaim_exponent"]
    assert n_held["held"].startswith("prior") and (n_held["low"], n_held["value"], n_held["high"]) == (1.0, 2.0, 3.0)
    assert any("held at its prior's centre 2" in n for n in three.notes)
    assert any(n.startswith("reclaim_exponent (n of the reclaim work's rise") for n in three.notes)
    # a second run of the 18.6 GiB row is a fourth tok/s row but no fourth configuration: the same
    # knobs chosen (the choice alone: the fit that follows it is the one above)
    again = dataclasses.replace(rows[1], row=9, net_tok_s=rows[1].net_tok_s * 1.02)
    repeated, said = _default_choice([rows[0], rows[1], rows[3], again], model, hw, routing)
    assert {"reclaim", "engine"} <= set(repeated) and "reclaim-shape" not in repeated
    assert "too few configurations measured for n" in said
    plain_rows = _memory_truth()
    plain, said = _default_choice(plain_rows, model, hw, routing)
    assert not {"reclaim", "pressure"} & set(plain)
    assert "neither rules out its absence" in said
    named = fit_plan(plain_rows, model, hw, routing, fit=["skew", "engine", "ssd-scale"], overlap="sum")
    assert named.fitted == ("skew", "engine", "ssd-scale")
    assert not any(n.startswith("memory knob:") for n in named.notes)
    # the reclaim truth's rows fitted without a memory knob, as named: missed, and the default pointed to
    blind = fit_plan(rows, model, hw, routing, fit=["skew", "engine", "ssd-scale"], overlap="sum")
    (missed,) = [n for n in blind.notes if n.startswith("misfit:")]
    assert "without --fit, fit-plan tries both memory knobs" in missed


def test_seed003s_public_rows_rule_in_the_page_cache():
    """Seed 003's four public M = 8 rows (the ladder's 20 → 40 GiB barely moves the step, 40 → 80
    halves it): of the two memory knobs the page cache's share lowers the default's cost past its
    profile cut, the reclaim work does not (docs/validation.md)."""
    from moeroof.core.paths import DATA_DIR
    from moeroof.fit.plan import choose_memory_knob
    from moeroof.models.locality import Locality

    pts = read_plan_points(DATA_DIR / "points" / "seed003-public.plan-points")
    model, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    routing = routing_from_spec("prior", model)
    kw = dict(routing_is_spec=True, locality=Locality.committed(), memo={}, context_tokens=4096)
    knobs, note = choose_memory_knob(pts, model, hw, routing, page_cache=False, max_evaluations=40, **kw)
    assert knobs == ("skew", "engine", "ssd-scale", "pressure")
    assert "rule out the step without the page cache's share" in note


def test_a_histogram_routing_fits_without_skew_by_default(tmp_path, capsys):
    pts = tmp_path / "p.csv"
    pts.write_text(
        "batch,cache_gib,ranks,policy,net_tok_s,hit_rate\n1,20,1,lru,,0.45\n8,20,1,lru,,0.30\n4,20,1,lru,,\n"
    )
    argv = ["fit-plan", str(pts), "--model", "glm-5-nvfp4", "--hardware", "gb10"]
    argv += ["--routing", "histograms/glm5-seed003-per-layer.csv", "--json"]
    assert main(argv) == 2  # nothing the histogram routing leaves to fit from hit rates alone: said so
    err = capsys.readouterr().err
    assert "skew fits a Zipf routing" not in err and "nothing to fit" in err


def test_one_batch_size_holds_the_per_token_cost_at_its_prior(engine_box, tmp_path, capsys):
    """Three rows at B = 1 with --fit engine,ssd-scale: not refused; the per-token engine cost
    is held at its stated prior, says why, and the band at another B covers both ends of it."""
    from moeroof.fit.plan import PRIOR_SECONDS_PER_AGENT_TOKEN

    m, hw, r = engine_box
    pts = points([(1, 2.0), (1, 8.0), (1, 16.0), (8, 8.0)])
    truth = PlanKnobs(engine_seconds_per_step=0.02, engine_seconds_per_agent_token=0.0)
    net, _ = predict_points(pts, m, hw, r, truth)
    fit = fit_plan(with_measured(pts, net, {0, 1, 2}), m, hw, r, fit=("engine", "ssd-scale"), overlap="max")
    held = fit.knobs["engine_seconds_per_agent_token"]
    assert held["fitted"] is False and held["identified"] is False and held["held"].startswith("prior")
    assert (held["low"], held["value"], held["high"]) == PRIOR_SECONDS_PER_AGENT_TOKEN and held["value"] > 0
    assert "one batch size" in held["why"]
    # the B = 8 band holds the predictions at both ends of the prior (c0 re-fitted at each)
    row = fit.rows[3]
    for end in (PRIOR_SECONDS_PER_AGENT_TOKEN[0], PRIOR_SECONDS_PER_AGENT_TOKEN[2]):
        k = PlanKnobs(
            engine_seconds_per_step=fit.knobs["engine_seconds_per_step"]["value"],
            engine_seconds_per_agent_token=end,
            ssd_scale=fit.knobs["ssd_scale"]["value"],
        )
        at_end, _ = predict_points(pts[3:], m, hw, r, k)
        assert row["low"] <= at_end[0] * 1.05 and at_end[0] * 0.95 <= row["high"], (end, row)
    assert any("held at its prior" in n for n in fit.notes)


def test_identified_means_a_bounded_interval(engine_box):
    m, hw, r = engine_box
    pts = points([(1, 20.0), (4, 20.0), (16, 20.0)])
    net, _ = predict_points(
        pts, m, hw, r, PlanKnobs(engine_seconds_per_step=0.045, engine_seconds_per_agent_token=0.013)
    )
    for fit in (
        fit_plan(with_measured(pts, net, {0, 1, 2}), m, hw, r, fit=("engine", "ssd-scale"), overlap="max"),
        fit_plan(with_measured(pts, net, {0}), m, hw, r, fit=("ssd-scale",), overlap="max"),
    ):
        for name, k in fit.knobs.items():
            if k.get("identified"):
                lo, hi = {"ssd_scale": (1e-3, 1e3)}.get(name, (0.0, 10.0))
                assert k["high"] < hi and (k["low"] > lo or name != "ssd_scale"), (name, k)
            elif "identified" in k:
                assert k.get("why"), (name, k)


def test_plan_runs_with_a_fit_and_reproduces_its_predictions(tmp_path, capsys):
    """plan --fit FIT.json gives, at each row's batch and cache, the fit's own prediction."""
    out = tmp_path / "fit.json"
    argv = ["fit-plan", "data/points/bigrig.plan-points", "--model", "qwen3-30b-a3b-3bit", "--hardware", "apple-m4"]
    assert main([*argv, "--json", "--output", str(out)]) == 0
    capsys.readouterr()
    rep = json.loads(out.read_text())
    for row in rep["rows"]:
        assert main(
            [
                "plan", "--model", "qwen3-30b-a3b-3bit", "--hardware", "apple-m4", "--fit", str(out),
                "--batch", str(row["batch"]), "--cache-gib", f"{row['cache_gib']:g}", "--overlap", rep["overlap"],
                "--json",
            ]
        ) == 0  # fmt: skip
        got = json.loads(capsys.readouterr().out)
        assert got["net_tok_s"][0] == pytest.approx(row["predicted"], rel=1e-9), row
        assert got["notes"][0].startswith(f"knobs from {out}")
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({**rep, "model": "glm-5.2"}))
    assert (
        main(["plan", "--model", "qwen3-30b-a3b-3bit", "--hardware", "apple-m4", "--fit", str(bad), "--batch", "1"])
        == 2
    )
    assert "fitted on model glm-5.2" in capsys.readouterr().err


def test_fit_plan_holds_one_stream_s_locality_at_the_prior(capsys, tmp_path):
    """Zero-fit locality: a Zipf routing's cache runs on a trace with the locality prior's ρ and c
    (more hits for one stream than independent tokens give), the bands take in the prior's ends,
    the knob table says where it came from (for GLM-5.2, the prior centred where its published
    single streams lie); --no-locality-prior is the independent cache."""
    from moeroof.data.presets import load_model
    from moeroof.models.locality import Locality

    pts = tmp_path / "one.plan-points"
    pts.write_text("batch,cache_gib,net_tok_s\n1,12,0.5\n1,24,\n4,12,\n", encoding="utf-8")
    base = ["fit-plan", str(pts), "--model", "glm-5.2", "--hardware", "nvme-gen4", "--routing", "zipf:0.8"]
    assert main([*base, "--overlap", "max", "--json"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert main([*base, "--overlap", "max", "--no-locality-prior", "--json"]) == 0
    off = json.loads(capsys.readouterr().out)
    prior = Locality.committed_for(load_model("glm-5.2"))
    assert prior != Locality.committed()  # the model's own centre, not the captures'
    assert on["knobs"]["rho"]["value"] == pytest.approx(prior.centre[0]) and not on["knobs"]["rho"]["identified"]
    assert "locality prior" in on["knobs"]["rho"]["held"] and "rho" not in off["knobs"]
    assert "published single streams" in on["knobs"]["rho"]["held"]
    assert any("locality prior" in n for n in on["notes"]) and not any("locality prior" in n for n in off["notes"])
    # one stream of a sticky, local routing finds more of its experts in the same cache
    hit_on = [r["predicted_hit_rate"] for r in on["rows"]]
    hit_off = [r["predicted_hit_rate"] for r in off["rows"]]
    assert hit_on[0] > hit_off[0] and hit_on[1] > hit_off[1]
    # the prior's spread widens one stream's hit bands (at B = 4 both caches thrash: LRU's cliff)
    for a, b in zip(on["rows"][:2], off["rows"][:2]):
        assert a["hit_rate_high"] - a["hit_rate_low"] > b["hit_rate_high"] - b["hit_rate_low"]


@pytest.mark.parametrize("routing", ["zipf:0.8", "histograms/deepseek-v3-like.csv"])
def test_plan_with_a_fit_that_held_locality_reproduces_its_predictions(tmp_path, capsys, routing):
    """The fit's held locality travels with it — on a Zipf routing and on a histogram's own π
    (Plackett–Luce weights inverted from it): plan --fit at each row's B and cache gives the
    fit's own prediction, and a row's prediction does not depend on the other rows' batches."""
    pts = tmp_path / "one.plan-points"
    pts.write_text("batch,cache_gib,net_tok_s\n1,12,0.5\n2,24,\n", encoding="utf-8")
    fit_json = tmp_path / "fit.json"
    args = ["--model", "glm-5.2" if routing.startswith("zipf") else "deepseek-v3", "--hardware", "nvme-gen4"]
    assert main(["fit-plan", str(pts), *args, "--routing", routing, "--overlap", "max", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert "locality prior" in fit["knobs"]["rho"]["held"]
    fit_json.write_text(json.dumps(fit), encoding="utf-8")
    for row in fit["rows"]:
        argv = [
            "plan",
            *args,
            "--fit",
            str(fit_json),
            "--batch",
            str(row["batch"]),
            "--cache-gib",
            str(row["cache_gib"]),
        ]
        assert main([*argv, "--overlap", "max", "--json"]) == 0
        rep = json.loads(capsys.readouterr().out)
        assert rep["net_tok_s"][0] == pytest.approx(row["predicted"], rel=1e-9)
        assert rep["cache_hit_rate"][0] == pytest.approx(row["predicted_hit_rate"], abs=1e-12)
    # the B = 1 row alone predicts what it predicted beside the B = 2 row
    pts.write_text("batch,cache_gib,net_tok_s\n1,12,0.5\n", encoding="utf-8")
    assert main(["fit-plan", str(pts), *args, "--routing", routing, "--overlap", "max", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["rows"][0]["predicted_hit_rate"] == pytest.approx(fit["rows"][0]["predicted_hit_rate"], abs=1e-12)


def test_the_prior_s_ends_widen_the_bands_only_as_far_as_the_rows_admit(engine_box):
    """One stream with no locality at all (ρ = 0, no hot sets), its hit rates measured at two
    cache sizes: the locality prior's most local end (ρ ≈ 0.9: most of a token's experts kept)
    would give it far more hits than measured, so the rows rule it out and the bands stop short
    of it — while the withheld cache size's tok/s still lies inside its band."""
    from moeroof.models.locality import Locality

    m, hw, routing = engine_box
    pts = points([(1, 1.0), (1, 3.0), (1, 2.0)])
    truth = PlanKnobs(ssd_scale=0.8, rho=0.0)
    net, hit = predict_points(pts, m, hw, routing, truth, seed=7)
    measured = [
        dataclasses.replace(p, net_tok_s=float(net[i]), hit_rate=float(hit[i])) if i < 2 else p
        for i, p in enumerate(pts)
    ]
    prior = Locality.committed()
    res = fit_plan(measured, m, hw, routing, fit=["ssd-scale"], overlap="max", locality=prior)
    note = next(n for n in res.notes if "locality prior" in n)
    assert "the calibration rows admit" in note, note
    (_, r_hi), _ = prior.quantiles([0.05, 0.95])
    admitted_hi = float(note.split("admit ρ ")[1].split("–")[1].split(",")[0])
    assert admitted_hi < float(r_hi) - 0.1
    withheld = res.rows[2]
    assert withheld["low"] <= net[2] <= withheld["high"]
    # the ends computed in a forked child beside the band sets and replayed: the same fit to the last bit
    from moeroof.core.results import plain

    forked = fit_plan(measured, m, hw, routing, fit=["ssd-scale"], overlap="max", locality=prior, jobs=2)
    assert json.dumps(plain(forked.to_dict()), sort_keys=True) == json.dumps(plain(res.to_dict()), sort_keys=True)


def test_the_efficiencies_are_held_at_the_box_s_priors_and_their_ends_widen_the_bands(engine_box):
    """No row tells an efficiency from the engine terms: fit-plan holds mem_efficiency and
    compute_efficiency at the centres of the box's priors (named in the knob table, read back by
    plan --fit), and where the memory term binds their ranges widen the bands — wider than the same
    fit on a box whose priors are a single point."""
    from types import MappingProxyType

    m, hw, routing = engine_box
    pts = points([(1, 12.0), (16, 12.0), (4, 12.0)])
    truth = PlanKnobs(engine_seconds_per_step=0.005, engine_seconds_per_agent_token=1e-4, mem_efficiency=0.7)
    net, _ = predict_points(pts, m, hw, routing, truth)
    measured = with_measured(pts, net, cal=[0, 1])
    wide = fit_plan(measured, m, hw, routing, fit=["engine"], overlap="max")
    point = {k: ((c, c, c), "a point") for k, ((_, c, _), _) in hw.priors.items()}
    narrow = fit_plan(
        measured, m, dataclasses.replace(hw, priors=MappingProxyType(point)), routing, fit=["engine"], overlap="max"
    )
    for key in ("mem_efficiency", "compute_efficiency"):
        k = wide.knobs[key]
        assert not k["fitted"] and k["value"] == hw.priors[key][0][1] and k["held"] == "prior"
        assert (k["low"], k["high"]) == (hw.priors[key][0][0], hw.priors[key][0][2])
    w, n = wide.rows[2], narrow.rows[2]
    assert w["high"] / w["low"] > 1.05 * (n["high"] / n["low"]), (w, n)
    assert w["low"] <= net[2] <= w["high"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_overlap_whose_bands_are_not_read_ends_after_its_search_and_changes_nothing(engine_box, jobs):
    """Both overlaps fitted: the one not chosen that misses a calibration row by more than 2 σ is
    read only for its cost and worst z, so its fit ends after its search — and the answer is
    what the two whole fits (each overlap alone, run to the end) give."""
    from moeroof.core.results import plain

    m, hw, routing = engine_box
    pts = points([(1, 12.0), (16, 12.0), (4, 12.0)])
    net, _ = predict_points(pts, m, hw, routing, PlanKnobs(engine_seconds_per_step=0.01))
    measured = with_measured(pts, net, cal=[0, 1])
    got = fit_plan(measured, m, hw, routing, fit=["engine"], jobs=jobs)
    whole = {ov: fit_plan(measured, m, hw, routing, fit=["engine"], overlap=ov) for ov in ("max", "sum")}
    assert got.overlap == "max" and whole["sum"].overlaps["sum"]["max_abs_z"] > 2.0  # sum is cut here
    assert whole["sum"].rows  # run to the end it has rows and bands, which the answer never reads
    for field in ("rows", "knobs", "peaks", "fitted", "cost"):
        assert json.dumps(plain(getattr(got, field)), sort_keys=True) == json.dumps(
            plain(getattr(whole["max"], field)), sort_keys=True
        )
    for ov in ("max", "sum"):
        assert got.overlaps[ov] == {**whole[ov].overlaps[ov], "chosen": ov == "max"}
    assert (
        f"overlap: max fits better (cost {whole['max'].cost:.3g} against {whole['sum'].cost:.3g} for sum)" in got.notes
    )


def test_fit_plan_reports_its_progress_stage_by_stage(engine_box, capsys, monkeypatch):
    """Every stage of every overlap tried is announced in order, then done = total; the CLI draws
    it on stderr only when asked (MOEROOF_PROGRESS), stdout staying the JSON alone."""
    from moeroof.fit.plan import FIT_STAGES

    m, hw, routing = engine_box
    pts = points([(1, 12.0), (16, 12.0), (4, 12.0)])
    net, _ = predict_points(pts, m, hw, routing, PlanKnobs(engine_seconds_per_step=0.01))
    measured = with_measured(pts, net, cal=[0, 1])
    seen = []
    res = fit_plan(measured, m, hw, routing, fit=["engine"], progress=lambda d, t, w: seen.append((d, t, w)))
    total = 2 * len(FIT_STAGES)
    # the overlap that is not chosen and misses a calibration row by more than 2 σ ends after its
    # search (its bands are never read): its later stages are not announced, and done jumps to total
    other = "sum" if res.overlap == "max" else "max"
    cut = other == "sum" and res.overlaps["sum"]["max_abs_z"] > 2.0
    stages = [f"{ov}: {s}" for ov in ("max", "sum") for s in (FIT_STAGES[:1] if cut and ov == "sum" else FIT_STAGES)]
    assert [w for _, _, w in seen[:-1]] == stages and seen[-1][0] == total and {t for _, t, _ in seen} == {total}
    assert [d for d, _, _ in seen[:-1]] == list(range(len(stages)))
    one = []
    fit_plan(measured, m, hw, routing, fit=["engine"], overlap="sum", progress=lambda d, t, w: one.append(d))
    assert one == list(range(len(FIT_STAGES) + 1))
    from moeroof.core.paths import DATA_DIR

    monkeypatch.setenv("MOEROOF_PROGRESS", "1")
    argv = [
        "fit-plan",
        str(DATA_DIR / "points" / "bigrig.plan-points"),
        "--model",
        "qwen3-30b-a3b-3bit",
        "--hardware",
        "apple-m4",
        "--routing",
        "zipf:0.8",
    ]
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["rows"] and "fit-plan [" in err and f"{total}/{total} done" in err
    monkeypatch.setenv("MOEROOF_PROGRESS", "0")
    assert main([*argv, "--json"]) == 0
    assert "fit-plan [" not in capsys.readouterr().err


def test_predictions_with_a_fit_memo_equal_fresh_ones(engine_box):
    """predict_points keeps each row's step work in the fit's memo and re-prices it when only the
    engine terms, SSD scale, efficiencies or reclaim move: the numbers must equal a fresh call's
    (no memo) bit for bit, also after the locality knobs move (a new trace, new work)."""
    m, hw, r = engine_box
    pts = points([(1, 2.0), (4, 2.0), (8, 6.0), (2, 12.0)])
    memo: dict = {}
    first = PlanKnobs(ssd_scale=0.7, engine_seconds_per_step=0.01, rho=0.3, c=40.0)
    predict_points(pts, m, hw, r, first, routes=memo)
    for k in (
        dataclasses.replace(first, ssd_scale=0.4, engine_seconds_per_touched_expert=2e-4, reclaim_penalty=0.5),
        dataclasses.replace(first, mem_efficiency=0.6, compute_efficiency=0.3),
        dataclasses.replace(first, rho=0.5),
        dataclasses.replace(first, rho=0.0, c=float("inf"), skew=1.1),
    ):
        for seed in (0, 1):  # a fit's band seeds share its memo
            got = predict_points(pts, m, hw, r, k, routes=memo, seed=seed)
            fresh = predict_points(pts, m, hw, r, k, seed=seed)
            np.testing.assert_array_equal(got[0], fresh[0])
            np.testing.assert_array_equal(got[1], fresh[1])
    # and the memo is used: a price-only change adds no work to it
    size = len(memo)
    predict_points(pts, m, hw, r, dataclasses.replace(first, ssd_scale=0.9), routes=memo)
    assert len(memo) == size


def test_the_cli_offers_the_library_knobs():
    from moeroof.cli.fit_plan import KNOBS as CLI_KNOBS
    from moeroof.fit.plan import DEFAULT_ROUTING, KNOBS

    assert CLI_KNOBS == KNOBS
    # the routing fit-plan starts from without --routing is the library's (validate's skew group names it)
    from moeroof.cli.app import build_parser

    args = build_parser().parse_args(["fit-plan", "p.csv", "--model", "m", "--hardware", "h"])
    assert args.routing == DEFAULT_ROUTING


def test_both_overlaps_side_by_side_give_the_same_fit_and_leave_no_process():
    """``jobs=2`` fits ``sum`` in a forked child beside ``max``: the same result to the last bit,
    and a fit that fails in the parent ends its child too."""
    import multiprocessing

    from moeroof.core.paths import DATA_DIR
    from moeroof.core.results import plain

    pts = read_plan_points(DATA_DIR / "points" / "bigrig.plan-points")
    model, hw = load_model("qwen3-30b-a3b-3bit"), load_hardware("apple-m4")
    routing = routing_from_spec("uniform", model)
    serial = fit_plan(pts, model, hw, routing, jobs=1)
    forked = fit_plan(pts, model, hw, routing, jobs=2)
    assert json.dumps(plain(forked.to_dict()), sort_keys=True) == json.dumps(plain(serial.to_dict()), sort_keys=True)
    with pytest.raises(ParameterError):
        fit_plan(pts, model, hw, routing, fit=["engine", "expert", "ssd-scale", "reclaim"], jobs=2)
    assert not multiprocessing.active_children()


def test_a_sum_fit_forked_before_max_searched_waits_for_maxs_cost_where_it_needs_it():
    """``jobs=2`` forks the ``sum`` fit as ``max``'s search starts, before max's cost is known;
    where sum misses a calibration row by more than 2 σ it needs that cost to decide whether its
    bands are read, and takes it from the pipe: seed 003's public rows (sum misses one by more)
    give the serial fit to the bit."""
    import multiprocessing

    from moeroof.core.paths import DATA_DIR
    from moeroof.core.results import plain
    from moeroof.fit.plan import WITHIN_NOISE_Z

    pts = read_plan_points(DATA_DIR / "points" / "seed003-public.plan-points")
    model, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    routing = routing_from_spec("prior", model)
    kw = dict(fit=["skew", "engine", "ssd-scale"], max_evaluations=10)
    serial = fit_plan(pts, model, hw, routing, jobs=1, **kw)
    forked = fit_plan(pts, model, hw, routing, jobs=2, **kw)
    assert json.dumps(plain(forked.to_dict()), sort_keys=True) == json.dumps(plain(serial.to_dict()), sort_keys=True)
    assert serial.overlaps["sum"]["max_abs_z"] > WITHIN_NOISE_Z  # the branch that reads max's cost
    assert not multiprocessing.active_children()


def test_a_cache_curve_at_one_batch_size_names_the_memory_knobs_it_could_fit():
    """Rates at three or more cache sizes of one batch size and rank count: the note names the
    two memory knobs the bend could tell (none is fitted by default); two sizes, or sizes spread
    over batch sizes, or either knob fitted: no note."""
    from moeroof.fit.plan import memory_curve_note

    three = [PlanPoint(i + 2, 8, c, 2, "lru", v, None) for i, (c, v) in enumerate(((20, 2.5), (40, 3.0), (80, 5.6)))]
    note = memory_curve_note(three, ("engine", "ssd-scale"))
    assert note is not None and "3 expert-cache sizes" in note and "pressure" in note and "reclaim" in note
    assert memory_curve_note(three, ("engine", "ssd-scale", "pressure")) is None
    assert memory_curve_note(three, ("ssd-scale", "reclaim")) is None
    assert memory_curve_note(three[:2], ("engine",)) is None
    spread = [dataclasses.replace(p, batch=b) for p, b in zip(three, (1, 8, 16))]
    assert memory_curve_note(spread, ("engine",)) is None
    unmeasured = [*three[:2], dataclasses.replace(three[2], net_tok_s=None)]
    assert memory_curve_note(unmeasured, ("engine",)) is None


def test_band_sets_keep_every_knobs_ends_and_spread_the_rest():
    """The band's retained sets (fit_plan.band_sets): each cache knob's smallest and largest
    value over the profile are always among them, at most ``most`` in all, in profile order; a
    profile no larger than ``most`` is kept whole."""
    from moeroof.fit.plan import band_sets

    rng = np.random.default_rng(7)
    profile = [{"outer": {"skew": float(a), "rho": float(b)}, "i": i} for i, (a, b) in enumerate(rng.random((40, 2)))]
    sub = band_sets(profile, ("skew", "rho"), 10)
    assert len(sub) == 10
    order = [e["i"] for e in sub]
    assert order == sorted(order) and len(set(order)) == 10
    for n in ("skew", "rho"):
        vals = [e["outer"][n] for e in profile]
        got = [e["outer"][n] for e in sub]
        assert min(vals) in got and max(vals) in got
    # the rest is spread over the profile, not bunched at its start
    assert max(order) > 30 and min(order) < 5
    assert band_sets(profile[:7], ("skew",), 10) == profile[:7]


def test_a_walks_small_drop_moves_the_fit_and_keeps_the_walked_cut():
    """After a profile walk (fit_plan.after_walk): no lower cost stops; a lower cost by at most
    PROFILE_KEEP_SHARE of the margin (threshold − best) moves the fit and keeps the cut, which
    then lies above the new best by at most (1 + share) margins — conservative by the drop;
    a larger drop walks again."""
    from moeroof.fit.plan import PROFILE_KEEP_SHARE, after_walk

    best, margin = 16.4, 22.2
    threshold = best + margin
    assert after_walk(best, best, threshold) == "stop"
    assert after_walk(best, best + 1.0, threshold) == "stop"
    for drop in (0.01 * margin, 0.99 * PROFILE_KEEP_SHARE * margin):
        assert after_walk(best, best - drop, threshold) == "keep"
        assert margin < threshold - (best - drop) <= (1 + PROFILE_KEEP_SHARE) * margin + 1e-12
    for drop in (1.5 * PROFILE_KEEP_SHARE * margin, 0.9 * margin, 3 * margin):
        assert after_walk(best, best - drop, threshold) == "walk"


def test_one_cache_knob_is_searched_on_a_grid_first_and_finds_the_deeper_basin():
    """A single cache knob (fit_plan.search_cache_knobs): on a rough cost with a shallow basin at
    the start and a deeper one elsewhere — the shape seed 003's default fit showed, Nelder–Mead
    from the skew prior's centre settling at 1.61 where the profile's walk later found 0.41 — the
    grid finds the deeper basin; the budget of evaluations holds; several knobs still go to
    Nelder–Mead from the start."""
    from scipy.optimize import minimize

    from moeroof.fit.plan import SEARCH_GRID_POINTS, search_cache_knobs

    def rough(z):
        x = float(np.asarray(z).reshape(-1)[0])
        smooth = min(40 * (x - 0.4) ** 2, 5 + 10 * (x - 1.6) ** 2)
        return smooth + 0.5 * np.sin(900 * x)  # roughness a hundredth of the range wide

    calls = []

    def cost(z):
        calls.append(float(np.asarray(z)[0]))
        return rough(z)

    how = search_cache_knobs(cost, np.array([1.3]), [(0.0, 3.0)], 40)
    assert "grid" in how and len(calls) <= 40
    assert len(calls) >= SEARCH_GRID_POINTS + 1
    best = min(calls, key=rough)
    assert abs(best - 0.4) < 0.1 and rough([best]) < 1.0
    # Nelder–Mead alone from the same start stays in the shallow basin: the grid is what finds the other
    alone = minimize(rough, np.array([1.3]), method="Nelder-Mead", options={"maxfev": 40})
    assert abs(float(alone.x[0]) - 1.6) < 0.2
    calls.clear()
    assert search_cache_knobs(lambda z: cost(z) + float(np.sum(np.asarray(z) ** 2)), np.array([1.3, 0.2]),
                              [(0.0, 3.0), (0.0, 0.95)], 25) == "by Nelder–Mead"  # fmt: skip
    assert len(calls) <= 26


def test_the_memory_note_says_how_far_the_fit_misses_its_calibration_rows():
    """Where the rows bend with the cache and no memory knob is fitted, the note gives the worst
    calibration miss (row and relative error, recomputed here from the rows) and what to name,
    only when that miss exceeds twice the measurement noise."""
    from moeroof.fit.plan import PlanFit, with_memory_note, worst_calibration_miss

    three = [PlanPoint(i + 2, 8, c, 2, "lru", v, None) for i, (c, v) in enumerate(((20, 2.5), (40, 3.0), (80, 5.6)))]

    def fit_with(predicted):
        rows = [
            {"row": p.row, "role": "calibration", "measured": p.net_tok_s, "predicted": q}
            for p, q in zip(three, predicted)
        ]
        return PlanFit(knobs={}, rows=rows, fitted=("engine", "ssd-scale"), cost=1.0)

    far = with_memory_note(fit_with((3.2, 2.7, 5.6)), three)
    assert worst_calibration_miss(far.rows) == (2, pytest.approx(3.2 / 2.5 - 1))
    assert "misses its own calibration rows by up to +28 % (row 2)" in far.notes[-1]
    assert "--fit engine,ssd-scale,pressure" in far.notes[-1] and "--fit engine,ssd-scale,reclaim" in far.notes[-1]
    near = with_memory_note(fit_with((2.55, 2.9, 5.6)), three)
    assert "misses" not in near.notes[-1] and "structural choice" in near.notes[-1]
    assert worst_calibration_miss([{"row": 1, "role": "prediction", "measured": None, "predicted": 1.0}]) is None


def test_a_fit_that_does_not_name_the_engine_holds_it_at_the_boxs_priors(engine_box):
    """The engine is never a silent 0: where --fit leaves it out and the preset does not state it,
    its per-step, per-token and per-touched-expert costs sit at the box's priors' centres (knob
    table, a note), and the bands take in their ends. A truth whose engine lies at the far end of
    those ranges (70 ms a step, 0.7 ms a touched pair), measured at B = 1 and 2, lies inside the
    band of the B = 16 row it predicts; a box that states its engine (0, witnessed) keeps it, and
    the same row's band then lies below the truth."""
    from moeroof.data.presets import DEFAULT_PRIORS

    m, hw, r = engine_box
    truth = PlanKnobs(engine_seconds_per_step=0.07, engine_seconds_per_touched_expert=7e-4)
    pts = points([(1, 8.0), (2, 8.0), (16, 8.0)])
    net, _ = predict_points(pts, m, hw, r, truth)
    measured = with_measured(pts, net, {0, 1})
    fit = fit_plan(measured, m, hw, r, fit=("ssd-scale",), overlap="max")
    for key in ("engine_seconds_per_step", "engine_seconds_per_agent_token", "engine_seconds_per_touched_expert"):
        entry = fit.knobs[key]
        assert not entry["fitted"] and entry["held"].startswith("prior"), entry
        assert (entry["low"], entry["value"], entry["high"]) == DEFAULT_PRIORS[key][0]
    assert any(n.startswith("engine held at the box's priors") for n in fit.notes)
    row = fit.rows[2]
    assert row["low"] <= net[2] <= row["high"], (row, net[2])
    engine = ("engine_seconds_per_step", "engine_seconds_per_agent_token", "engine_seconds_per_touched_expert")
    stated = dataclasses.replace(hw, provenance={**hw.provenance, **dict.fromkeys(engine, "witnessed")})
    bare = fit_plan(measured, m, stated, r, fit=("ssd-scale",), overlap="max")
    assert bare.knobs["engine_seconds_per_step"] == {"value": 0.0, "fitted": False, "unit": "s", "held": "the preset's"}
    assert "engine_seconds_per_touched_expert" not in bare.knobs
    assert not any(n.startswith("engine held") for n in bare.notes)
    assert bare.rows[2]["high"] < net[2], (bare.rows[2], net[2])


def test_the_misfit_note_names_each_calibration_value_missed_beyond_the_noise():
    """A tok/s 20 % high is ln(1.2)/5 % = 3.6 σ, a hit rate 5 points low 2.5 σ: both named, worst
    first; a tok/s 5 % high (1 σ), a 3-point hit-rate miss (1.5 σ) and prediction rows are not.
    Every value within 2 σ: no note."""
    from moeroof.fit.plan import misfit_note

    def row(n, role, measured, predicted, hit=None, hit_pred=0.5):
        rel = None if measured is None else predicted / measured - 1.0
        return {
            "row": n,
            "role": role,
            "measured": measured,
            "predicted": predicted,
            "relative_error": rel,
            "measured_hit_rate": hit,
            "predicted_hit_rate": hit_pred,
        }

    rows = [
        row(2, "calibration", 1.0, 1.05, hit=0.53),
        row(3, "calibration", 2.0, 2.4, hit=0.55),
        row(4, "prediction", None, 9.0),
    ]
    note = misfit_note(rows)
    assert note is not None and "misses 2 of its 4 calibration values" in note
    assert note.index("row 3 tok/s +20 % (3.6 σ)") < note.index("row 3 hit rate -5.0 points (2.5 σ)")
    assert "row 2" not in note and "row 4" not in note
    assert misfit_note(rows[:1] + rows[2:]) is None


def test_the_default_counts_configurations_not_repeated_runs():
    """Two runs of one configuration are one tok/s configuration: the default takes the SSD scale
    alone from them, as from one row; a second configuration at the same batch size brings in the
    engine's one knob there (its per-touched-expert cost) beside it."""
    from moeroof.fit.plan import default_knobs

    one = PlanPoint(2, 8, 20.0, 2, "lru", 2.4, None)
    assert default_knobs([one, dataclasses.replace(one, row=3, net_tok_s=2.5)]) == ("ssd-scale",)
    assert default_knobs([one, dataclasses.replace(one, row=3, cache_gib=80.0, net_tok_s=5.6)]) == (
        "engine",
        "ssd-scale",
    )


def _family_truth(caches, hit_sizes):
    """Rows at ``caches`` (GiB, B = 1) simulated from a Zipf truth (s = 1.0) whose engine and
    efficiencies sit at the box's priors (what a fit that leaves them out holds), measured (tok/s
    and hit rate) at the first ``hit_sizes``."""
    m, hw = load_model("qwen3-30b-a3b"), load_hardware("nvme-gen4")
    pr = hw.priors
    held = ("engine_seconds_per_step", "engine_seconds_per_agent_token", "mem_efficiency", "compute_efficiency")
    truth = PlanKnobs(skew=1.0, engine_seconds_per_touched_expert=1e-4, **{k: pr[k][0][1] for k in held})
    pts = points([(1, c) for c in caches])
    net, hit = predict_points(pts, m, hw, routing_from_spec("zipf:0.8", m), truth, overlap="max")
    measured = [
        dataclasses.replace(p, net_tok_s=float(net[i]), hit_rate=float(hit[i])) if i < hit_sizes else p
        for i, p in enumerate(pts)
    ]
    return m, hw, measured, net, hit


def test_the_other_skew_family_is_fitted_too_and_replaces_the_given_one_only_where_it_fits_clearly_better():
    """A structural choice the rows may decide: on a hit-rate curve (three cache sizes of one B) a
    fit on the skew prior's Dirichlet fits Zipf too. The Zipf truth is met by Zipf and not by the
    Dirichlet, so the knobs are Zipf's (the family prior of one stream's curves, which the
    Dirichlet would have to beat by more than χ²₁(0.90)) — the skew back at the truth's, its
    family recorded for `plan --fit`, the routing named — and the withheld sizes fall inside their
    bands; given Zipf, the fit keeps it, and the Dirichlet, which misses the rows, widens nothing."""
    m, hw, measured, net, hit = _family_truth([2.0, 12.0, 40.0, 6.0, 20.0, 30.0], 3)
    knobs = ("engine", "ssd-scale", "skew")
    switched = fit_plan(measured, m, hw, routing_from_spec("prior", m), fit=knobs, overlap="max")
    kept = fit_plan(measured, m, hw, routing_from_spec("zipf:0.8", m), fit=knobs, overlap="max")
    for fit in (switched, kept):
        assert fit.knobs["skew"]["family"] == "zipf" and fit.knobs["skew"]["value"] == pytest.approx(1.0, abs=0.05)
        for row, t_net, t_hit in list(zip(fit.rows, net, hit))[3:]:
            assert row["low"] <= t_net <= row["high"] and row["hit_rate_low"] <= t_hit <= row["hit_rate_high"]
    assert switched.family_routing is not None and "zipf" in switched.family_routing.lower()
    assert any(n.startswith("family: zipf, the family prior of one stream's hit-rate curves") for n in switched.notes)
    assert kept.family_routing is None and any(n.startswith("family: zipf kept") for n in kept.notes)
    assert not any("dirichlet family also meets" in n for n in kept.notes)


def test_a_dirichlet_curve_keeps_its_family_over_the_family_prior_where_it_fits_clearly_better():
    """The family prior holds Zipf only where the rows cannot tell the families apart: a Dirichlet
    truth (α = 0.3, no locality) whose curve saturates at 40 GiB is met by the skew prior's
    Dirichlet and missed by Zipf by more than χ²₁(0.90), so the Dirichlet stays, its α recovered;
    a Dirichlet the user names stays by the older rule (the given family), with no prior said."""
    m, hw = load_model("qwen3-30b-a3b"), load_hardware("nvme-gen4")
    pr = hw.priors
    held = ("engine_seconds_per_step", "engine_seconds_per_agent_token", "mem_efficiency", "compute_efficiency")
    truth = PlanKnobs(engine_seconds_per_touched_expert=1e-4, **{k: pr[k][0][1] for k in held})
    pts = points([(1, c) for c in (2.0, 12.0, 40.0, 6.0)])
    net, hit = predict_points(pts, m, hw, routing_from_spec("dirichlet:0.3", m), truth, overlap="max")
    measured = [
        dataclasses.replace(p, net_tok_s=float(net[i]), hit_rate=float(hit[i])) if i < 3 else p
        for i, p in enumerate(pts)
    ]
    knobs = ("engine", "ssd-scale", "skew")
    on_prior = fit_plan(measured, m, hw, routing_from_spec("prior", m), fit=knobs, overlap="max")
    named = fit_plan(measured, m, hw, routing_from_spec("dirichlet:0.5", m), fit=knobs, overlap="max")
    for fit in (on_prior, named):
        assert fit.family_routing is None and fit.knobs["skew"]["family"] == "dirichlet"
        assert fit.knobs["skew"]["alpha"] == pytest.approx(0.3, rel=0.1)
    assert any(n.startswith("family: dirichlet kept over zipf, the family prior") for n in on_prior.notes)
    assert any(n.startswith("family: dirichlet kept (cost") for n in named.notes)
    assert not any("family prior" in n for n in named.notes)


def test_the_other_skew_family_is_not_fitted_below_three_hit_rate_sizes():
    """With hit rates at two cache sizes the second family's fit is not paid for: no family note,
    the given family's knobs."""
    m, hw, measured, _, _ = _family_truth([2.0, 40.0, 12.0], 2)
    measured[2] = dataclasses.replace(measured[2], net_tok_s=None)
    fit = fit_plan(measured, m, hw, routing_from_spec("prior", m), fit=("engine", "skew"), overlap="max")
    assert fit.family_routing is None and fit.knobs["skew"]["family"] == "dirichlet"
    assert not any(n.startswith("family:") for n in fit.notes)


def test_a_fitted_stickiness_carries_the_priors_hot_set_in_the_bands_as_far_as_the_rows_admit():
    """One stream whose locality is a hot set (h = 1.5·K) beside a little stickiness, measured at
    three cache sizes: fitted with ρ (the hot set held off) the withheld sizes fall outside the
    bands; with the locality prior the bands take the hot set towards its most local end as far
    as the rows admit it, ρ and the skew re-searched there, and every withheld truth is inside."""
    from moeroof.models.locality import Locality, c_per_expert_from_hot_set

    m, hw = load_model("qwen3-30b-a3b"), load_hardware("nvme-gen4")
    pr = hw.priors
    held = ("engine_seconds_per_step", "engine_seconds_per_agent_token", "mem_efficiency", "compute_efficiency")
    c = float(c_per_expert_from_hot_set(1.5, m.experts, m.top_k)) * m.experts
    truth = PlanKnobs(skew=0.7, rho=0.1, c=c, engine_seconds_per_touched_expert=1e-4, **{k: pr[k][0][1] for k in held})
    pts = points([(1, x) for x in (3.0, 6.0, 40.0, 4.5, 9.0, 20.0)])
    route = routing_from_spec("zipf:0.8", m)
    net, hit = predict_points(pts, m, hw, route, truth, overlap="max")
    measured = [
        dataclasses.replace(p, net_tok_s=float(net[i]), hit_rate=float(hit[i])) if i < 3 else p
        for i, p in enumerate(pts)
    ]
    knobs = ("engine", "skew", "rho")
    with_prior = fit_plan(measured, m, hw, route, fit=knobs, overlap="max", locality=Locality.committed())
    without = fit_plan(measured, m, hw, route, fit=knobs, overlap="max")

    def inside(fit):
        return [
            r["low"] <= t_net <= r["high"] and r["hit_rate_low"] <= t_hit <= r["hit_rate_high"]
            for r, t_net, t_hit in list(zip(fit.rows, net, hit))[3:]
        ]

    assert not all(inside(without)) and all(inside(with_prior))
    (said,) = [n for n in with_prior.notes if "hot set" in n]
    assert "as far as the calibration rows admit it" in said and "rule out" not in said
    # the point prediction is the fit's own (the hot set off): only the bands move
    assert [r["predicted"] for r in with_prior.rows] == [r["predicted"] for r in without.rows]


def test_a_fitted_stickiness_says_the_locality_priors_hot_set_is_off():
    """Never silent: where ρ is fitted beside the locality prior, a note says its per-stream hot set
    is not held; where ρ is held (at the prior), the note is the prior's own and this one is absent."""
    from moeroof.models.locality import Locality

    m, hw, measured, _, _ = _family_truth([2.0, 12.0, 40.0, 6.0], 3)
    prior = Locality.committed()
    route = routing_from_spec("zipf:0.8", m)
    fitted = fit_plan(measured, m, hw, route, fit=("engine", "skew", "rho"), overlap="max", locality=prior)
    held = fit_plan(measured, m, hw, route, fit=("engine", "skew"), overlap="max", locality=prior)
    said = "one stream's hot set (the locality prior's per-stream c) is off where ρ is fitted"
    assert any(n.startswith(said) for n in fitted.notes)
    assert not any(n.startswith(said) for n in held.notes)
    assert any("locality prior" in n for n in held.notes)


def _stub_fit(cost: float, max_z: float, finished: bool, label: str) -> fp.PlanFit:
    rows = [{"row": 1, "role": "prediction", "family": label}] if finished else []
    overlaps = {"max": {"cost": cost, "max_abs_z": max_z}}
    return fp.PlanFit(knobs={}, rows=rows, fitted=("skew",), cost=cost, overlap="max", overlaps=overlaps)


@pytest.mark.parametrize("alt_cost", [99.0, 100.0, 101.0, 102.0, 120.0])
def test_the_family_a_fit_keeps_is_always_finished(monkeypatch, alt_cost):
    """Where the other skew family replaces the fit (the curve family prior held over the skew
    prior's Dirichlet unless the Dirichlet fits better by more than χ²₁(0.90)), its fit ran to its
    rows: both fits missing their rows (no band joins) and the Zipf's cost within 2.71 above the
    Dirichlet's once cut it short after its search and returned no rows at all."""
    model = load_model("glm-5.2")
    dirichlet, zipf = fp.prior_routing(model), routing_from_spec("zipf:0.8", model)
    out = _stub_fit(100.0, 9.0, True, "dirichlet")

    def fake_fit_one(*args, after_search=None, **kw):
        finished = after_search is None or after_search(alt_cost, 9.0)
        return _stub_fit(alt_cost, 9.0, finished, "zipf")

    monkeypatch.setattr(fp, "_fit_one", fake_fit_one)
    got = fp.with_other_family(out, ([], model, None, dirichlet), zipf, {}, 1)
    # the family prior's Zipf is held unless the Dirichlet fits better by more than 2.71
    keeps_zipf = not 100.0 + fp.PROFILE_CHI2 < alt_cost
    assert got.rows and got.rows[0]["family"] == ("zipf" if keeps_zipf else "dirichlet")


def test_hit_rate_bands_stay_between_the_measured_neighbours():
    """A stack policy's hit rate cannot fall as its cache grows: a row between two measured sizes
    keeps its band above the smaller one's measurement and below the larger one's, less the 5 %
    tail of two measurements' noise; the prediction stays inside; a FIFO-like policy (no inclusion
    property) and another batch size are left alone."""
    pts = [
        PlanPoint(1, 1, 10.0, 1, "lru", 1.0, 0.40),
        PlanPoint(2, 1, 20.0, 1, "lru", None, None),
        PlanPoint(3, 1, 40.0, 1, "lru", 1.0, 0.60),
        PlanPoint(4, 1, 50.0, 1, "lru", None, None),
        PlanPoint(5, 1, 20.0, 1, "s3fifo", None, None),
        PlanPoint(6, 2, 20.0, 1, "lru", None, None),
    ]
    n = len(pts)
    hit0 = np.array([0.40, 0.30, 0.60, 0.65, 0.5, 0.5])
    low, high, moved = fp.hit_bands_within_measured(pts, hit0, np.zeros(n), np.ones(n), SIGMA_HIT)
    margin = 1.6448536 * np.sqrt(2.0) * SIGMA_HIT
    # row 2: above 0.40 − margin, but its prediction 0.30 lies below that and stays inside
    assert low[1] == pytest.approx(0.30) and high[1] == pytest.approx(0.60 + margin)
    # row 4: above the 40 GiB measurement less the margin; no larger size measured: no cap
    assert low[3] == pytest.approx(0.60 - margin) and high[3] == 1.0
    assert (low[4], high[4], low[5], high[5]) == (0.0, 1.0, 0.0, 1.0)
    assert low[0] == 0.0 and high[2] == 1.0  # measured rows keep theirs
    assert moved == 2


def test_a_measured_fall_is_one_no_step_without_a_memory_knob_makes():
    """tok/s falling as the cache grows by more than two measurements' noise (z₀.₉₅·√2·5 % in log
    terms, 11.6 %) can only come from a memory knob where the policy is a stack one; the largest
    fall is named; other batch sizes, ranks and a non-stack policy are not compared across."""
    from moeroof.fit.plan import measured_fall

    def row(i, cache, tok, policy="lru", batch=1):
        return PlanPoint(i, batch, cache, 1, policy, tok, None)

    assert measured_fall([row(1, 10.0, 1.0), row(2, 20.0, 0.90), row(3, 40.0, 1.2)]) is None  # 10.5 %
    a, b = measured_fall([row(1, 10.0, 1.0), row(2, 20.0, 1.3), row(3, 40.0, 0.5), row(4, 50.0, 0.6)])
    assert (a.row, b.row) == (2, 3)
    assert measured_fall([row(1, 10.0, 1.0), row(2, 20.0, 0.5, "s3fifo")]) is None
    assert measured_fall([row(1, 10.0, 1.0), row(2, 20.0, 0.5, batch=2)]) is None
    assert measured_fall([row(1, 10.0, 0.5), row(2, 20.0, 1.0), PlanPoint(3, 1, 30.0, 1, "lru", None, 0.9)]) is None


def test_a_steep_fall_rules_the_memory_knob_in_whatever_the_costs(monkeypatch):
    """One stream measured at three cache sizes whose tok/s doubles and then falls fourfold (a
    simulated truth of the curve coverage study, rounded), fitted on the skew prior's routing as a
    newcomer's default: the reclaim work the choice tries meets the rows better than the step
    without it but far from within their noise, the residual variance the cut scales by grows with
    that misfit, and the cut alone does not rule the knob in — the fall from 18.6 to 69.8 GiB does."""
    from moeroof.fit import plan as fp

    model, hw = load_model("glm-5.2"), load_hardware("apple-m4-max")
    routing = routing_from_spec("prior", model)
    rows = [
        PlanPoint(1, 1, 9.313, 1, "lru", 0.37, 0.0),
        PlanPoint(2, 1, 18.626, 1, "lru", 0.755, 0.47),
        PlanPoint(3, 1, 69.849, 1, "lru", 0.176, 0.95),
    ]
    assert fp.measured_fall(rows) == (rows[1], rows[2])
    knobs, said = _default_choice(rows, model, hw, routing)
    assert "reclaim" in knobs and "falls from 0.755 at 18.626 GiB to 0.176 at 69.849 GiB" in said
    monkeypatch.setattr(fp, "measured_fall", lambda points: None)  # the cut alone
    knobs_cut, said_cut = _default_choice(rows, model, hw, routing)
    assert "reclaim" not in knobs_cut and "neither rules out its absence" in said_cut
