"""``moeroof validate`` and moeroof.studies.held_out: every held-out case in one table."""

from __future__ import annotations

import json

import pytest

import csvout  # noqa: I001  (tests/csvout.py: results past their run record)
from moeroof.cli import main
from moeroof.studies import held_out, validation


def test_every_step_comparison_point_is_one_row_with_its_own_error():
    rows, skipped = held_out.held_out_rows(["step"])
    assert not skipped
    want = [
        (c.key, b, m, p, e)
        for c in validation.comparisons()
        for b, m, p, e in zip(c.batch, c.measured, c.predicted, c.error)
    ]
    got = [(r["case"], r["at"], r["measured"], r["predicted"], r["error"]) for r in rows]
    assert got == want
    assert all(set(r) == set(held_out.COLUMNS) for r in rows)
    # a consistency row reproduces its calibration: never counted as a prediction
    assert {r["role"] for r in rows} == {"prediction", "consistency"}


def test_the_routing_group_is_fit_routing_on_seed_003s_public_rows():
    """seed 003's fit-routing case (the issue's "many streams → one"): the calibration rows come back
    as consistency, every withheld case is predicted with its band and no error, and the booster
    table's pair row — public, measured in another run at the 20 GiB row's conditions — is held out
    with its error against the published 53.8 % and 6.62 GiB (small settings: the rows' shape)."""
    from moeroof.studies import ladder

    rows = held_out.routing_rows(seeds=(0,), bootstrap=0, max_sim_layers=2, families=("dirichlet",))
    assert all(set(r) == set(held_out.COLUMNS) and r["group"] == "routing" for r in rows)
    by_role: dict = {}
    for r in rows:
        by_role.setdefault(r["role"], []).append(r)
    withheld = by_role["withheld"]
    assert {r["quantity"].split(", ")[1].split(":")[0] for r in withheld} == {c.name for c in ladder.WITHHELD_CASES}
    assert all(
        r["measured"] is None and r["error"] is None and r["low"] <= r["predicted"] <= r["high"] for r in withheld
    )
    assert len(withheld) == 2 * len(ladder.WITHHELD_CASES)  # a hit rate and GiB per step each
    cal = {r["case"]: r for r in by_role["consistency"] if "pair-m8-20" in r["quantity"]}
    assert cal["seed003-fit-routing-calibration-hit"]["measured"] == 0.525
    assert cal["seed003-fit-routing-calibration-gib"]["measured"] == 7.02
    held = {r["case"]: r for r in by_role["prediction"]}
    hit, gib = held["seed003-fit-routing-held-out-hit"], held["seed003-fit-routing-held-out-gib"]
    assert hit["error_unit"] == "points" and hit["error"] == pytest.approx(hit["predicted"] - 0.538)
    assert gib["error_unit"] == "relative" and gib["error"] == pytest.approx(gib["predicted"] / 6.62 - 1.0)
    # the held-out row has the 20 GiB calibration row's conditions: the same prediction
    assert hit["predicted"] == cal["seed003-fit-routing-calibration-hit"]["predicted"]


def test_the_summary_is_per_case_mean_abs_error_and_band_share():
    rows = [
        {"case": "a", "group": "g", "role": "prediction", "error": 0.1, "error_unit": "points", "inside": True},
        {"case": "a", "group": "g", "role": "prediction", "error": -0.3, "error_unit": "points", "inside": False},
        {"case": "b", "group": "g", "role": "prediction", "error": 0.5, "error_unit": "relative", "inside": None},
    ]
    out = {c["case"]: c for c in held_out.summarise(rows)}
    assert out["a"]["mean_abs_error"] == pytest.approx(0.2) and out["a"]["inside_band"] == 0.5
    assert out["b"]["inside_band"] is None and out["b"]["rows"] == 1


def test_locality_cases_say_when_the_captures_are_absent(tmp_path):
    """Without the captures only the published Qwen3 table is left: with no other source to
    predict it from it is not predicted (from itself it would be no prediction), and both say why."""
    rows, skipped = held_out.held_out_rows(["locality"], external_dir=tmp_path)
    assert rows == []
    assert "absent" in skipped["locality:mixtral"] and "absent" in skipped["locality:qwen15"]
    assert "no other source" in skipped["locality:qwen3-moe-trace (held out)"]


def test_validate_command_prints_table_json_and_csv(capsys):
    assert main(["validate", "--groups", "step"]) == 0
    out = capsys.readouterr().out
    assert "bigrig-engine-B1-B16" in out and "mean |error|" in out and "projected" in out
    # a banded row prints its band beside its prediction, as the JSON holds it
    assert main(["validate", "--groups", "step", "--json"]) == 0
    rep = csvout.strip_run(json.loads(capsys.readouterr().out))
    banded = next(r for r in rep["rows"] if r["low"] is not None and r["high"] is not None)
    line = next(x for x in out.splitlines() if x.startswith(banded["case"] + " ") and f"{banded['low']:.3f}"[:4] in x)
    assert "–" in line, line
    assert rep["groups"] == ["step"] and len(rep["rows"]) == sum(len(c.batch) for c in validation.comparisons())
    assert main(["validate", "--groups", "step", "--format", "csv"]) == 0
    header = csvout.data_text(capsys.readouterr().out).splitlines()[0]
    assert header.split(",") == list(held_out.COLUMNS)
    assert main(["validate", "--groups", "step,nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --groups") and err.count("\n") == 1


def test_regime_cases_are_fit_plan_on_the_shipped_points_files(monkeypatch):
    """Each ``regimes`` row is fit-plan's own row on the points file it names (the same command a
    user runs), withheld truths carry a prediction and band and no error, and mlx-lm#1438's peak
    row compares the predicted curve's peak with the reported one."""
    from moeroof.core.paths import DATA_DIR
    from moeroof.data.plan_points import read_plan_points
    from moeroof.fit import plan as fp

    # the fits regime_rows makes, seen as they return (one run, not two: each fit takes seconds)
    seen: list = []

    def spy(points, model, hardware, routing, **kw):
        res = real(points, model, hardware, routing, **kw)
        seen.append((list(points), model.name, hardware.name, routing.label, kw, res))
        return res

    real = fp.fit_plan
    monkeypatch.setattr(fp, "fit_plan", spy)
    # the newcomer's default fit of seed 003's rows is the costliest (~25 s) and builds its rows by the
    # same path as the curated case on the same file: held here to what it is, not run again
    (default,) = [c for c in held_out.REGIME_CASES if c[0] == "seed003-default"]
    (curated,) = [c for c in held_out.REGIME_CASES if c[0] == "seed003-m-sweep"]
    assert default[1:4] == curated[1:4] and default[4] == "prior" and default[5] is None and default[6] is None
    monkeypatch.setattr(held_out, "REGIME_CASES", tuple(c for c in held_out.REGIME_CASES if c is not default))
    rows = held_out.regime_rows(jobs=2)  # the validate command's: the two overlaps side by side
    assert all(set(r) == set(held_out.COLUMNS) for r in rows)
    withheld = [r for r in rows if r["role"] == "withheld"]
    assert withheld and all(r["measured"] is None and r["error"] is None for r in withheld)
    assert all(r["low"] <= r["predicted"] <= r["high"] for r in withheld)
    # the mlx-lm#1438 fit was docs/validation.md's command: its file, presets, routing and knobs
    (mlx,) = [x for x in seen if x[1] == "glm-5.2" and x[4]["fit"] is not None]
    pts, _, box, label, kw, fit = mlx
    assert pts == read_plan_points(DATA_DIR / "points" / "mlx-lm-1438.plan-points")
    assert box == "apple-m4-max" and "s=0.8" in label.replace(" ", "")
    assert tuple(kw["fit"]) == ("ssd-scale", "reclaim", "reclaim-shape", "skew", "rho")
    (peak,) = [r for r in rows if r["case"] == "mlx-lm-1438-peak" and r["role"] == "prediction"]
    (pk,) = fit.peaks  # the fit's peak over the file's cache range, with a measured peak's band
    assert peak["predicted"] == pk["cache_gib"] and peak["error"] == pytest.approx(
        pk["cache_gib"] / peak["measured"] - 1
    )
    # the measured peak is the published sweep's: 0.57 tok/s at 35 GB, the highest of its sizes
    assert peak["measured"] == pytest.approx(35e9 / 2**30)
    # the sweep's sizes the file calibrates on are the file's own measured rows, tok/s and hit rate
    sweep = held_out.MLX_1438_SWEEP
    calibration = [p for p in pts if p.net_tok_s is not None]
    assert [sweep.at_gib(p.cache_gib) for p in calibration] == [(p.net_tok_s, p.hit_rate) for p in calibration]
    # every other size it measured is one of the file's empty rows, predicted by the fit and compared
    empty = {p.cache_gib for p in pts if p.net_tok_s is None and p.hit_rate is None}
    for kind, key, unit in (("sweep", "predicted", "relative"), ("sweep-hit", "predicted_hit_rate", "points")):
        got = [r for r in rows if r["case"] == f"mlx-lm-1438-peak-{kind}"]
        assert len(got) == len(sweep.points) - len(calibration) and all(r["error_unit"] == unit for r in got)
        fitted = [r for r in fit.rows if r["role"] != "calibration" and sweep.at_gib(r["cache_gib"]) is not None]
        assert {r["cache_gib"] for r in fitted} <= empty and len(fitted) == len(got)
        assert [r["predicted"] for r in got] == [r[key] for r in fitted]
        truth = [sweep.at_gib(r["cache_gib"])[kind == "sweep-hit"] for r in fitted]
        assert [r["measured"] for r in got] == truth
    assert (peak["low"], peak["high"]) == (pk["low"], pk["high"]) and pk["grid_low"] < pk["grid_high"]
    assert peak["inside"] == (pk["low"] <= peak["measured"] <= pk["high"])
    cons = [r for r in rows if r["case"] == "mlx-lm-1438-peak-calibration" and r["role"] == "consistency"]
    assert [r["predicted"] for r in cons] == [r["predicted"] for r in fit.rows if r["role"] == "calibration"]
    # the newcomer's fit of the same rows: every flag at its default, its peak held to the same range;
    # the rows cannot tell the skew prior's Dirichlet from Zipf, so the family prior's Zipf is held
    # and the Dirichlet, which meets them too, widens the bands
    (newcomer,) = [x for x in seen if x[1] == "glm-5.2" and x[4]["fit"] is None]
    assert newcomer[0] == pts and "reclaim" in newcomer[5].fitted
    assert "zipf" in (newcomer[5].family_routing or "").lower()
    assert any("family prior of one stream's hit-rate curves" in n for n in newcomer[5].notes)
    assert any(n.startswith("the dirichlet family also meets") for n in newcomer[5].notes)
    (default_peak,) = [r for r in rows if r["case"] == "mlx-lm-1438-default-peak" and r["role"] == "prediction"]
    assert (
        default_peak["measured"] == peak["measured"] and default_peak["predicted"] == newcomer[5].peaks[0]["cache_gib"]
    )
    # seed 003's public rows in another arrangement: the fit's row at their B, cache and ranks
    from moeroof.studies.expert_split import TOK_S_ROWS

    (sweep,) = [x for x in seen if x[1] == "glm-5-nvfp4"]
    by_config = {(r["batch"], r["cache_gib"], r["ranks"]): r for r in sweep[5].rows}
    arranged = [r for r in rows if r["case"] == "seed003-m-sweep-arrangements"]
    truths = [t for t in TOK_S_ROWS if t.role == "held-out published"]
    assert [r["measured"] for r in arranged] == [t.witnessed_tok_s for t in truths] and len(truths) == 4
    for r, t in zip(arranged, truths):
        fitted = by_config[(t.batch, t.cache_gib, t.ranks)]
        assert r["role"] == "prediction" and (r["predicted"], r["low"], r["high"]) == (
            fitted["predicted"],
            fitted["low"],
            fitted["high"],
        )
    out = {c["case"]: c for c in held_out.summarise(rows)}
    assert out["seed003-m-sweep"]["mean_abs_error"] is not None  # over its calibration rows only
    _held_to_todays_errors(rows)


#: the regime cases' errors as of 2026-12-07 (a85b10f's successors: the mlx-lm#1438 sweep, the
#: other skew family and its prior for one stream's curves, which makes the default's Zipf; last, the
#: default's reclaim shape held at its prior with the engine fitted), pinned as bands: a change that moves one by more than the tolerance
#: (relative, or points for hit rates) must re-pin it here, in the open. A band says "as today",
#: not "good"; whether each truth lies inside its 90 % band is pinned too. seed003-default is left
#: out (the test above does not run its ~25 s fit).
REGIME_ERRORS_TODAY = {
    "seed003-m-sweep": (-0.0052, 0.0142, 0.0, -0.0089),
    "seed003-m-sweep-hit": (0.0285, 0.0089),
    "seed003-m-sweep-arrangements": (0.1134, 0.1862, 0.2731, 0.0819),
    "mlx-lm-1438-peak-sweep": (-0.0626, -0.1382, 0.0111, -0.1036, -0.0805),
    "mlx-lm-1438-peak-sweep-hit": (-0.0203, -0.0371, -0.0297, -0.018, -0.0154),
    "mlx-lm-1438-peak": (-0.3893,),
    "mlx-lm-1438-default-peak-sweep": (-0.0477, -0.1059, 0.0685, -0.0292, -0.001),
    "mlx-lm-1438-default-peak-sweep-hit": (-0.0203, -0.0371, -0.0297, -0.018, -0.0154),
    "mlx-lm-1438-default-peak": (-0.1571,),
}
REGIME_INSIDE_TODAY = {"seed003-m-sweep-arrangements": (True, False, False, True)}
REGIME_TOLERANCE = {"relative": 0.03, "points": 0.015}


def _held_to_todays_errors(rows) -> None:
    for case, today in REGIME_ERRORS_TODAY.items():
        got = [r for r in rows if r["case"] == case and r["error"] is not None]
        assert len(got) == len(today), case
        # a peak's cache moves on its grid's steps (1.5 GiB, ~5 % at 30 GiB): a wider band
        tol = 0.1 if case.endswith("peak") else REGIME_TOLERANCE[got[0]["error_unit"]]
        inside = REGIME_INSIDE_TODAY.get(case, (True,) * len(today))
        for r, e, ok in zip(got, today, inside):
            assert abs(r["error"] - e) <= tol, (case, r["at"], r["error"], e)
            assert r["inside"] in (None, ok), (case, r)
