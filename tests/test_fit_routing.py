"""fit-routing: a round trip (knobs → simulated points at other seeds → fit → the knobs back
within their intervals, the held-out rows within their bands), a family that cannot fit says
so, only identifiable knobs are fitted, and the CLI's JSON contract."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.models.fit_routing import (
    Point,
    RoutingKnobs,
    fit_routing,
    identifiable,
    layer_popularity,
    simulate_points,
)

E, K, L = 64, 4, 8
TRUTH = RoutingKnobs("dirichlet", skew=0.3, rho=0.3, history_tokens=128)
CAL = [
    Point("union", 4, value=0.0, row=2),
    Point("overlap", 4, value=0.0, row=3),
    Point("hit_rate", 4, capacity_experts=24, value=0.0, row=4),
    Point("hit_rate", 1, capacity_experts=8, value=0.0, row=5),
    Point("hit_rate", 8, capacity_experts=40, value=0.0, row=6),
]
HELD_OUT = [
    Point("hit_rate", 4, capacity_experts=16, row=7),
    Point("hit_rate", 2, capacity_experts=12, row=8),
    Point("hit_rate", 8, capacity_experts=32, policy="lfu", row=9),
]


@pytest.fixture(scope="module")
def round_trip():
    """Measured = mean of two runs at seeds the fit never uses; the fit runs at seeds 0, 1."""
    points = CAL + HELD_OUT
    measured = simulate_points(TRUTH, points, E, K, L, seeds=(100, 101)).mean(axis=0)
    given = [replace(p, value=float(v)) if p.calibrates else p for p, v in zip(points, measured)]
    return fit_routing(given, E, K, L, seeds=(0, 1), bootstrap=8, max_history=1024), measured


@pytest.mark.slow  # the shared round-trip fit takes ~13 s; `make test` runs it
def test_round_trip_recovers_the_knobs_within_their_intervals(round_trip):
    fit, _ = round_trip
    d = fit.to_dict()
    assert d["family"] == "dirichlet"
    assert d["fitted"] == ["skew", "rho", "history", "locality"]
    k = d["knobs"]
    assert k["skew"]["parameter"] == "alpha"
    for key, true in (("skew", TRUTH.skew), ("rho", TRUTH.rho), ("history_tokens", TRUTH.history_tokens)):
        assert k[key]["low"] <= true <= k[key]["high"], (key, k[key])
        assert k[key]["low"] <= k[key]["value"] <= k[key]["high"]
    # locality is off in the truth: the interval reaches c >= 10·E (each stream's Dirichlet(c·w)
    # then has a concentration of 10 per expert: barely local) or off (None, infinite c)
    high = k["locality_c"]["high"]
    assert high is None or high >= 10 * E
    assert abs(k["skew"]["value"] - TRUTH.skew) < 0.1 and abs(k["rho"]["value"] - TRUTH.rho) < 0.08


@pytest.mark.slow  # the shared round-trip fit takes ~13 s; `make test` runs it
def test_round_trip_predicts_held_out_rows_within_the_bands(round_trip):
    fit, measured = round_trip
    rows = fit.to_dict()["rows"]
    assert [r["row"] for r in rows] == [p.row for p in CAL + HELD_OUT]  # input order
    for r, m in zip(rows, measured):
        assert r["low"] <= r["predicted"] <= r["high"]
        assert r["low"] <= m <= r["high"], r
        if not r["calibrates"]:
            assert r["measured"] is None and abs(r["predicted"] - m) < 0.06


@pytest.mark.slow  # the shared round-trip fit takes ~13 s; `make test` runs it
def test_a_family_that_cannot_fit_says_so(round_trip):
    fit, _ = round_trip
    d = fit.to_dict()
    assert d["families"]["dirichlet"]["fits"] is True
    zipf = d["families"]["zipf"]
    assert zipf["fits"] is False and zipf["max_abs_z"] > 1 and zipf["contributes_to_bands"] is False
    assert zipf["residual"] > d["families"]["dirichlet"]["residual"]
    assert any(n.startswith("zipf cannot fit") for n in d["notes"])


def test_only_identifiable_knobs_are_fitted():
    fitted, held = identifiable([Point("union", 8, value=20.0)])
    assert fitted == ("skew",)
    assert "no hit-rate" in held["rho"] and "no cache row" in held["history"] and "two batch" in held["locality"]
    fitted, held = identifiable(
        [Point("hit_rate", 8, capacity_experts=24, value=0.8), Point("hit_rate", 8, capacity_experts=32, value=0.9)]
    )
    assert fitted == ("skew", "rho") and "only 2 distinct" in held["history"]


def test_simulate_points_shape_common_random_numbers_and_monotone_skew():
    pts = [Point("union", 4), Point("hit_rate", 4, capacity_experts=20), Point("overlap", 2)]
    a = simulate_points(TRUTH, pts, E, K, L, seeds=(0, 1), timed_steps=8)
    assert a.shape == (2, 3)
    assert np.array_equal(a, simulate_points(TRUTH, pts, E, K, L, seeds=(0, 1), timed_steps=8))
    skewed = simulate_points(replace(TRUTH, skew=0.05), pts, E, K, L, seeds=(0, 1), timed_steps=8)
    assert skewed[:, 0].mean() < a[:, 0].mean() and skewed[:, 1].mean() > a[:, 1].mean()
    w = layer_popularity(TRUTH, E, L, 0)
    assert w.shape == (L, E) and np.allclose(w.sum(axis=1), 1.0)


def test_gib_per_step_scales_with_layers_and_expert_bytes():
    pts = [Point("hit_rate", 4, capacity_gib=0.0, ranks=2), Point("gib_per_step", 4, capacity_gib=0.0, ranks=2)]
    y = simulate_points(TRUTH, pts, E, K, 4, expert_bytes=2**20, seeds=(0,), timed_steps=8)[0]
    assert y[0] == 0.0  # no cache: every request misses
    union = simulate_points(TRUTH, [Point("union", 4)], E, K, 4, seeds=(0,), timed_steps=8)[0, 0]
    # a rank streams its share of the union, every layer: (U / 2) · L · 1 MiB
    assert y[1] == pytest.approx(union / 2 * 4 * 2**20 / 2**30, rel=0.15)


def test_cli_json_contract(tmp_path, capsys):
    path = tmp_path / "points.csv"
    path.write_text(
        "# synthetic\nkind,batch,capacity_experts,value\nunion,4,,11.5\nhit_rate,4,24,\noverlap,4,,0.45\n",
        encoding="utf-8",
    )
    argv = ["fit-routing", str(path), "--experts", "64", "--top-k", "4", "--layers", "4"]
    assert main([*argv, "--seeds", "1", "--bootstrap", "2", "--timed-steps", "8", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert {"knobs", "family", "families", "rows", "fitted", "held", "method", "notes"} <= set(rep)
    assert set(rep["families"]) == {"dirichlet", "zipf"} and rep["family"] in rep["families"]
    assert [r["row"] for r in rep["rows"]] == [3, 4, 5]
    assert [r["measured"] for r in rep["rows"]] == [11.5, None, 0.45]
    assert all({"measured", "predicted", "low", "high"} <= set(r) for r in rep["rows"])
    assert set(rep["knobs"]) == {"skew", "rho", "history_tokens", "locality_c"}
    assert rep["knobs"]["history_tokens"]["fitted"] is False and "held" in rep["knobs"]["history_tokens"]
    assert "bootstrap" in rep["method"]["intervals"]
    assert main([*argv, "--seeds", "1", "--bootstrap", "2", "--timed-steps", "8"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "union" in out


def test_cli_flag_errors_exit_2(tmp_path, capsys):
    path = tmp_path / "points.csv"
    path.write_text("kind,batch,capacity_gib,value\nhit_rate,4,1.0,0.5\n", encoding="utf-8")
    base = ["fit-routing", str(path), "--experts", "64", "--top-k", "4", "--layers", "4"]
    assert main([*base, "--json"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}:2: capacity_gib: needs the expert size")
    assert main(["fit-routing", str(path), "--experts", "4", "--top-k", "8", "--layers", "4"]) == 2
    assert capsys.readouterr().err.startswith("error: --top-k:")


def test_knobs_validate():
    with pytest.raises(ValueError, match="family"):
        RoutingKnobs("pareto")
    with pytest.raises(ValueError, match="rho"):
        RoutingKnobs(rho=1.5)
    assert "off" in RoutingKnobs(c=math.inf).label()
