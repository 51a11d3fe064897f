"""fit-routing: a round trip at the default settings (knobs → one simulated measurement at a
seed no fit uses → fit → every identified knob back within its interval, the held-out rows
within their bands), the intervals' coverage over independent measurement runs, a family that
cannot fit says so, only identifiable knobs are fitted, and the CLI's JSON contract."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.fit.routing import (
    DEFAULT_HISTORY,
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
#: the one measured run of the round trip: a seed that neither the fit nor its bootstrap uses
MEASUREMENT_SEED = 100
#: the CLI's defaults: ``--seeds 4 --bootstrap 8`` (and fit_routing's history box of 2048 tokens)
CLI_SEEDS, CLI_BOOTSTRAP = tuple(range(4)), 8


def _measure(truth, points, experts, top_k, layers, seed, **sim):
    """One measured run of ``points`` at ``seed``: the calibration rows carry its values."""
    measured = simulate_points(truth, points, experts, top_k, layers, seeds=(seed,), **sim)[0]
    return [replace(p, value=float(v)) if p.calibrates else p for p, v in zip(points, measured)], measured


@pytest.fixture(scope="module")
def round_trip():
    """One measured run at MEASUREMENT_SEED, fitted at the CLI's defaults."""
    given, measured = _measure(TRUTH, CAL + HELD_OUT, E, K, L, MEASUREMENT_SEED)
    return fit_routing(given, E, K, L, seeds=CLI_SEEDS, bootstrap=CLI_BOOTSTRAP), measured


def _contains(entry: dict, true: float) -> bool:
    """The interval of a knob entry (None = infinite: locality off) contains ``true``."""
    low = math.inf if entry["low"] is None else entry["low"]
    high = math.inf if entry["high"] is None else entry["high"]
    return low <= true <= high


@pytest.mark.slow  # the shared round-trip fit takes ~35 s; `make test` runs it
def test_round_trip_recovers_the_knobs_within_their_intervals(round_trip):
    fit, _ = round_trip
    d = fit.to_dict()
    assert d["family"] == "dirichlet"
    assert d["fitted"] == ["skew", "rho", "history", "locality"]
    assert d["bootstrap"] == CLI_BOOTSTRAP and MEASUREMENT_SEED not in d["seeds"]
    k = d["knobs"]
    assert k["skew"]["parameter"] == "alpha"
    truth = {"skew": TRUTH.skew, "rho": TRUTH.rho, "history_tokens": TRUTH.history_tokens, "locality_c": TRUTH.c}
    for key, true in truth.items():
        entry = k[key]
        assert entry["fitted"] is True
        value = math.inf if entry["value"] is None else entry["value"]
        assert _contains(entry, value), (key, entry)  # the interval holds the fitted value
        if key in ("skew", "rho"):
            # identified: one run's 90 % interval misses the truth one time in ten (how often is
            # what the coverage tests below count over many runs); twice its half-width toward
            # the truth must reach it. Measurement seeds 100–103 on 2026-12-04: 6 of 8 held it
            # at once (skew at 100 and ρ at 102 missed), all 8 at twice.
            side = entry["high"] - value if true > value else value - entry["low"]
            assert abs(true - value) <= 2.0 * side, (key, entry)
        else:
            assert _contains(entry, true), (key, entry)  # unidentified: the interval is the box
    # skew and stickiness are identified here and their intervals say something (their boxes are
    # α 0.01-20 and ρ 0-0.95)
    assert "unidentified" not in k["skew"] and "unidentified" not in k["rho"]
    assert k["skew"]["value"] / 2 < k["skew"]["low"] and k["skew"]["high"] < 2 * k["skew"]["value"], k["skew"]
    assert k["rho"]["high"] - k["rho"]["low"] < 0.3, k["rho"]
    assert abs(k["skew"]["value"] - TRUTH.skew) < 0.1 and abs(k["rho"]["value"] - TRUTH.rho) < 0.08


@pytest.mark.slow  # the shared round-trip fit takes ~35 s; `make test` runs it
def test_round_trip_predicts_held_out_rows_within_the_bands(round_trip):
    fit, measured = round_trip
    rows = fit.to_dict()["rows"]
    assert [r["row"] for r in rows] == [p.row for p in CAL + HELD_OUT]  # input order
    for r, m in zip(rows, measured):
        assert r["low"] <= r["predicted"] <= r["high"]
        assert r["low"] <= m <= r["high"], r
        if not r["calibrates"]:
            assert r["measured"] is None and abs(r["predicted"] - m) < 0.06
            assert r["high"] > r["low"]  # the knobs' uncertainty and the run's noise widen it


@pytest.mark.slow  # the shared round-trip fit takes ~35 s; `make test` runs it
def test_a_family_that_cannot_fit_says_so(round_trip):
    fit, _ = round_trip
    d = fit.to_dict()
    assert d["families"]["dirichlet"]["fits"] is True
    zipf = d["families"]["zipf"]
    assert zipf["fits"] is False and zipf["max_abs_z"] > 1 and zipf["contributes_to_bands"] is False
    assert zipf["residual"] > d["families"]["dirichlet"]["residual"]
    assert any(n.startswith("zipf cannot fit") for n in d["notes"])


# a small, fast configuration for the coverage checks: a union and an overlap identify the skew
# and the stickiness (history and locality held; the truth holds them at their defaults)
SMALL = dict(experts=16, top_k=2, layers=4)
SMALL_SIM = dict(timed_steps=8)
SMALL_TRUTH = RoutingKnobs("dirichlet", skew=0.3, rho=0.3, history_tokens=DEFAULT_HISTORY)
SMALL_POINTS = [
    Point("union", 4, value=0.0),
    Point("overlap", 4, value=0.0),
    Point("hit_rate", 2, capacity_experts=6),
    Point("hit_rate", 4, capacity_experts=8),
]
#: the fit's scale for each knob (its intervals are symmetric there)
_SCALE = {"skew": math.log, "rho": float}


def _coverage(measurement_seeds) -> dict[str, int]:
    """Over one fit per measurement run: how many intervals (skew and rho pooled) hold the truth,
    how many would at half their size about the fitted value (on the fit's scale), how many
    held-out rows fall in their bands, and the counts' denominators."""
    out = {"runs": 0, "knobs": 0, "covered": 0, "half_covered": 0, "rows": 0, "in_band": 0}
    for seed in measurement_seeds:
        given, measured = _measure(SMALL_TRUTH, SMALL_POINTS, seed=seed, **SMALL, **SMALL_SIM)
        fit = fit_routing(given, **SMALL, families=("dirichlet",), seeds=(0, 1), bootstrap=8, **SMALL_SIM)
        d = fit.to_dict()
        assert d["fitted"] == ["skew", "rho"] and seed not in d["seeds"]
        out["runs"] += 1
        for key, scale in _SCALE.items():
            k = d["knobs"][key]
            lo, value, hi, true = (scale(v) for v in (k["low"], k["value"], k["high"], getattr(SMALL_TRUTH, key)))
            out["knobs"] += 1
            out["covered"] += lo <= true <= hi
            out["half_covered"] += value - (value - lo) / 2 <= true <= value + (hi - value) / 2
        for r, m in zip(d["rows"], measured):
            if not r["calibrates"]:
                out["rows"] += 1
                out["in_band"] += r["low"] <= m <= r["high"]
    return out


def test_intervals_cover_the_truth_over_independent_runs():
    """Eight measurement runs (the fit's seeds fixed at 0, 1), 16 intervals at 90 %: honest ones
    miss about 1.6; at least 13 must hold the truth (observed: 15; the linearised bootstrap this
    replaced held 11 on these runs; 14 since the sampler's stickiness draws moved to a child
    stream on 2026-12-04), fewer at half their size (observed: 9, then 10: they are not wider
    than the noise needs), and at least 13 of the 16 held-out rows fall in their bands (16, then
    14)."""
    c = _coverage(range(300, 308))
    assert c["knobs"] == 16 and c["covered"] >= 13, c
    assert c["half_covered"] < c["covered"], c
    assert c["in_band"] >= 13, c  # 16 held-out rows in 90 % bands


@pytest.mark.slow  # 30 fits, ~25 s
def test_intervals_cover_the_truth_over_many_independent_runs():
    """Thirty runs, 60 intervals at 90 %: at least 50 must hold the truth (observed: 56, skew and
    rho 28 each; the linearised bootstrap held 43, about 72 %), at most 85 % of them at half their
    size (observed: 36, 60 %, as a normal spread gives), and at least 50 of the 60 held-out rows
    fall in their bands (observed: 58; the linearised bootstrap's: 49)."""
    c = _coverage(range(300, 330))
    assert c["knobs"] == 60 and c["covered"] >= 50, c
    assert c["half_covered"] <= 0.85 * c["knobs"], c
    assert c["in_band"] >= 50, c


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
        "# synthetic\nkind,batch,capacity_experts_per_layer,value\nunion,4,,11.5\nhit_rate,4,24,\noverlap,4,,0.45\n",
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


def test_table_says_off_for_an_infinite_locality_bound(capsys):
    # the JSON holds an infinite c as null; the table must not print it as a bare "-"
    from moeroof.cli.fit_routing import print_fit_routing

    rep = {
        "source": "x.points",
        "experts": 8,
        "top_k": 2,
        "layers": 1,
        "families": {"dirichlet": {"residual": 0.1, "fits": True}},
        "family": "dirichlet",
        "knobs": {
            "skew": {"value": 0.3, "fitted": True, "low": 0.2, "high": 0.4},
            "locality_c": {"value": None, "off": True, "fitted": True, "low": 40.0, "high": None},
        },
        "rows": [],
        "notes": [],
    }
    print_fit_routing(rep)
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("locality_c"))
    assert "off" in line.split("fitted")[0] and line.rstrip().endswith("[40.000, off]"), line


def test_fit_routing_progress_counts_its_stages():
    """The progress callback sees every stage in order and ends at its total; it changes no result."""
    from moeroof.data.points import Point
    from moeroof.fit.routing import fit_routing

    points = [Point(kind="union", batch=4, value=9.0), Point(kind="union", batch=1, value=None)]
    seen = []
    kw = dict(seeds=(0,), bootstrap=2, timed_steps=4, max_sim_layers=2)
    with_progress = fit_routing(points, 16, 4, 2, progress=lambda d, t, w: seen.append((d, t, w)), **kw)
    without = fit_routing(points, 16, 4, 2, **kw)
    assert with_progress.to_dict() == without.to_dict()
    done = [d for d, _, _ in seen]
    assert done == sorted(done) and seen[-1][0] == seen[-1][1] and seen[-1][2] == "done"
    assert any(w.endswith(": fit") for _, _, w in seen) and any(w == "bands" for _, _, w in seen)


def test_simulate_points_memo_returns_the_simulated_numbers_bit_for_bit(tmp_path, monkeypatch):
    from moeroof.fit import routing as fr

    monkeypatch.setenv("MOEROOF_CACHE_DIR", str(tmp_path / "memo"))
    fr.clear_memo()
    pts = [Point("union", 4), Point("hit_rate", 4, capacity_experts=20), Point("overlap", 2)]
    args = (E, K, L, None, (3, 4), 8, 16)
    direct = fr.simulate_points_uncached(TRUTH, pts, *args)
    first = simulate_points(TRUTH, pts, E, K, L, seeds=(3, 4), timed_steps=8)
    assert np.array_equal(first, direct)
    assert len(list((tmp_path / "memo").rglob("*.json"))) == 1
    first[:] = -1.0  # a caller's edit does not reach the memo
    again = simulate_points(TRUTH, pts, E, K, L, seeds=(3, 4), timed_steps=8)
    assert np.array_equal(again, direct)
    fr.clear_memo()  # a fresh process: the disk's entry, read back exactly
    from_disk = simulate_points(TRUTH, pts, E, K, L, seeds=(3, 4), timed_steps=8)
    assert np.array_equal(from_disk, direct) and from_disk.dtype == np.float64
    # any argument the rows depend on is in the key: another skew, seed or row misses
    other = simulate_points(replace(TRUTH, skew=0.31), pts, E, K, L, seeds=(3, 4), timed_steps=8)
    assert np.array_equal(other, fr.simulate_points_uncached(replace(TRUTH, skew=0.31), pts, *args))
    assert not np.array_equal(other, direct)
    swapped = simulate_points(TRUTH, pts, E, K, L, seeds=(4, 3), timed_steps=8)
    assert np.array_equal(swapped, direct[::-1])
    assert len(list((tmp_path / "memo").rglob("*.json"))) == 3
    fr.clear_memo()


def test_the_simulation_memo_is_salted_by_every_module_it_can_reach():
    """A folder in a memo's sources stands for every module below it: an edit of any model,
    core or data module (routing, the cache kernels, the seeded generators, the POINTS reader)
    misses instead of serving an old number."""
    from moeroof.core.memo import source_files
    from moeroof.fit import routing as fit_routing

    names = {p.relative_to(p.parents[1]).as_posix() for p in source_files(fit_routing.MEMO_SOURCES)}
    for module in (
        "models/routing.py",
        "cachesim/policies.py",
        "kernels/cache.py",
        "fit/routing.py",
        "core/rng.py",
        "data/points.py",
    ):
        assert module in names, module


def test_every_knob_says_whether_it_is_identified_and_why_not(capsys):
    """fit-routing's knobs carry fit-plan's meaning of identified: fitted to a bounded interval,
    with the reason in words where not."""
    argv = ["fit-routing", "data/points/example.points", "--experts", "64", "--top-k", "4", "--layers", "8"]
    argv += ["--expert-bytes", "4194304", "--seeds", "1", "--bootstrap", "0", "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    rep = json.loads(capsys.readouterr().out)
    for name, k in rep["knobs"].items():
        assert isinstance(k["identified"], bool), name
        assert k["identified"] == (k["fitted"] and "unidentified" not in k), name
        if not k["identified"]:
            assert isinstance(k["why"], str) and k["why"], name


def _batch_rows_only():
    """A simulated truth with real stickiness and per-stream hot sets, measured at M = 8 only
    (what seed 003's pair rows are), and one stream's cache to predict."""
    from moeroof.data.points import Point

    truth = RoutingKnobs(family="zipf", skew=0.8, rho=0.3, c=0.6 * 64, history_tokens=64)
    probe = [
        Point(kind="hit_rate", batch=m, capacity_experts=float(c), policy="lru", scope="layer", value=None)
        for m, caps in ((8, (8, 16)), (1, (4, 8, 16)))
        for c in caps
    ]
    measured = simulate_points(truth, probe, 64, 4, 4, seeds=[901, 902]).mean(axis=0)
    points = [Point(**{**p.__dict__, "value": float(v) if p.batch == 8 else None}) for p, v in zip(probe, measured)]
    return points, measured


def test_the_locality_prior_holds_what_batch_rows_cannot_identify_and_widens_only_what_it_should():
    """Many streams → one stream: with locality off the single-stream truths fall below the bands;
    held at the locality prior (its draws weighted by the calibration rows) they are inside, and
    the calibration rows' bands stay as narrow."""
    from moeroof.data.locality import read_locality_prior
    from moeroof.models.locality import Locality

    points, measured = _batch_rows_only()
    prior = Locality.from_summary(read_locality_prior())
    off = fit_routing(points, 64, 4, 4, seeds=(0, 1), bootstrap=6)
    on = fit_routing(points, 64, 4, 4, seeds=(0, 1), bootstrap=6, locality=prior)
    one = [i for i, p in enumerate(points) if p.batch == 1]
    cal = [i for i, p in enumerate(points) if p.batch == 8]
    inside = [on.rows[i]["low"] <= measured[i] <= on.rows[i]["high"] for i in one]
    assert all(inside), [(on.rows[i]["low"], measured[i], on.rows[i]["high"]) for i in one]
    assert not all(off.rows[i]["low"] <= measured[i] <= off.rows[i]["high"] for i in one)
    assert sum(abs(on.rows[i]["predicted"] - measured[i]) for i in one) < sum(
        abs(off.rows[i]["predicted"] - measured[i]) for i in one
    ), "the prior's centre is nearer one stream's truth than no locality"
    width = {name: [f.rows[i]["high"] - f.rows[i]["low"] for i in cal] for name, f in (("on", on), ("off", off))}
    assert all(a <= 1.5 * b + 1e-9 for a, b in zip(width["on"], width["off"])), width
    held = on.knobs["locality_c"]
    assert not held["identified"] and "locality prior" in held["held"] and held["prior"] == prior.label
    lo, hi = prior.quantiles_for([0.05, 0.95], 64, 4)
    assert held["value"] == pytest.approx(prior.centre_for(64, 4)[1] * 64) and held["low"] == pytest.approx(lo[1] * 64)
    assert any("locality prior" in n for n in on.notes) and not any("locality prior" in n for n in off.notes)


def test_fit_routing_command_takes_the_locality_prior_unless_told_not_to(capsys, tmp_path):
    points, measured = _batch_rows_only()
    f = tmp_path / "batch.csv"
    f.write_text(
        "kind,batch,capacity_experts_per_layer,policy,scope,value\n"
        + "".join(
            f"hit_rate,{p.batch},{p.capacity_experts:g},lru,layer,{'' if p.value is None else p.value}\n"
            for p in points
        ),
        encoding="utf-8",
    )
    base = [
        "fit-routing",
        str(f),
        "--experts",
        "64",
        "--top-k",
        "4",
        "--layers",
        "4",
        "--seeds",
        "2",
        "--bootstrap",
        "4",
    ]
    assert main([*base, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert "prior" in rep["knobs"]["locality_c"] and any("locality prior" in n for n in rep["notes"])
    assert main([*base, "--no-locality-prior", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert "prior" not in rep["knobs"]["locality_c"] and rep["knobs"]["locality_c"]["value"] is None  # off
