"""Seed 003's cache ladder: synthetic traces, ownership, calibration against the published
points, the LRU cliff and predictions.csv (moeroof.studies.ladder)."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest

from moeroof import cachesim as cache
from moeroof.core import paths
from moeroof.core.units import GiB
from moeroof.data.presets import load_model
from moeroof.studies import ladder


def test_trace_has_the_glm5_shape_and_distinct_ids():
    rng = np.random.default_rng(sum(map(ord, "test_ladder")))
    tr = ladder.sample_ladder_trace(ladder.FITTED, streams=4, steps=5, layers=3, rng=rng)
    assert tr.shape == (5, 4, 3, ladder.TOP_K) and tr.dtype == np.int32
    assert tr.min() >= 0 and tr.max() < ladder.EXPERTS == 288
    srt = np.sort(tr, axis=-1)
    assert np.all(np.diff(srt, axis=-1) > 0), "a token picks K distinct experts"
    # distinct-token workload: streams do not all route alike
    assert len({tuple(tr[0, s, 0]) for s in range(4)}) > 1


def test_item_bytes_match_the_preset_and_cache_shares_do_not_depend_on_layers():
    preset = load_model("glm-5-nvfp4")
    assert preset.moe_layers == ladder.ASSUMED_LAYERS
    assert ladder.expert_bytes(75) == pytest.approx(preset.expert_bytes, abs=1.0)
    # seed 003: "80 GiB holds 88% of a rank's experts"
    for layers in (15, 75):
        share = ladder.capacity_experts(80.0, layers) / (ladder.RANK_EXPERTS * layers)
        assert share == pytest.approx(0.88, abs=0.005)


def test_published_gib_per_step_reads_per_rank():
    # seed 003: (52.5 %, 7.02 GiB) and (98.3 %, 0.25 GiB) imply the same per-rank union, and
    # twice it is the seed's "about 50" distinct experts per layer at M = 8
    u = [ladder.implied_rank_union(t.hit_rate, t.gib_streamed_per_step) for t in ladder.CALIBRATION]
    assert u[0] == pytest.approx(23.4, abs=0.1) and u[1] == pytest.approx(23.3, abs=0.1)
    assert abs(2 * np.mean(u) - ladder.UNION_PUBLISHED) < 0.1 * ladder.UNION_PUBLISHED


def test_partitions_give_the_right_ownership():
    pair = ladder.partition(2)
    assert pair.shape == (288,)
    assert np.all(pair[:144] == 0) and np.all(pair[144:] == 1)
    assert np.all(ladder.partition(1) == 0)
    with pytest.raises(ValueError):
        ladder.partition(3)
    rng = np.random.default_rng(7)
    tr = ladder.sample_ladder_trace(ladder.FITTED, 8, 3, 4, rng)
    r0 = cache.requests_from_trace(tr, 288, partition=pair, rank=0)
    r1 = cache.requests_from_trace(tr, 288, partition=pair, rank=1)
    assert np.all(r0.items % 288 < 144) and np.all(r1.items % 288 >= 144)
    whole = cache.requests_from_trace(tr, 288, partition=ladder.partition(1), rank=0)
    assert len(whole) == len(r0) + len(r1)


def test_run_cases_ranks_and_accounting():
    cases = [ladder.Case("p", 2, 8, 20.0), ladder.Case("b", 1, 8, 20.0)]
    pair, boost = ladder.run_cases(ladder.FITTED, cases, seed=3, layers=6)
    assert len(pair.rank_hit_rates) == 2 and len(boost.rank_hit_rates) == 1
    # same trace for both arrangements: the booster's rank sees the pair's two unions together
    assert boost.rank_union_per_layer == pytest.approx(2 * pair.rank_union_per_layer)
    assert pair.union_per_layer == pytest.approx(boost.union_per_layer)
    # GiB per rank per step = miss share × union per rank × 91/144 GiB (L cancels)
    implied = (1 - pair.hit_rate) * pair.rank_union_per_layer * 91 / 144
    assert pair.gib_streamed_per_step == pytest.approx(implied, rel=0.05)
    assert pair.warmup_steps == ladder.history_steps(ladder.FITTED, 8) + ladder.WARMUP_STEPS


def test_calibration_reproduces_the_published_points_at_small_size():
    # targets: seed 003 "Expert cache against the headroom", pair, M = 8. Tolerance at 15 layers
    # and 4 seeds: 2.5 pp hit, 8 % GiB, union 46.7 ± 2 (the published GiB and hits imply 46.7)
    results = [
        r
        for s in range(4)
        for r in ladder.run_cases(ladder.FITTED, [t.case for t in ladder.CALIBRATION], seed=s, layers=15)
    ]
    bands = {b.case.name: b for b in ladder.summarize(results)}
    for t in ladder.CALIBRATION:
        b = bands[t.case.name]
        assert b.hit_rate == pytest.approx(t.hit_rate, abs=0.025), t.source
        assert b.gib_streamed_per_step == pytest.approx(t.gib_streamed_per_step, rel=0.08), t.source
    assert bands["pair-m8-20"].union_per_layer == pytest.approx(46.7, abs=2.0)


def test_fit_recovers_the_stored_knobs():
    fit = ladder.fit_knobs(seeds=(0, 1), layers=15)  # fewer layers coarsen the global LRU's cycle
    assert not fit.notes
    assert fit.knobs.skew == pytest.approx(ladder.FITTED.skew, abs=0.04)
    assert fit.knobs.rho == pytest.approx(ladder.FITTED.rho, abs=0.05)
    assert fit.knobs.history_tokens == pytest.approx(ladder.FITTED.history_tokens, rel=0.3)


def test_lru_falls_off_the_cliff_when_a_step_outgrows_the_cache():
    # one booster, M = 8, 20 GiB: a step's working set (~29 GiB) exceeds the cache
    pair, boost = ladder.run_cases(
        ladder.FITTED, [ladder.Case("p", 2, 8, 20.0), ladder.Case("b", 1, 8, 20.0)], seed=1, layers=10
    )
    assert boost.rank_union_per_layer * 91 / 144 > 20.0
    assert boost.hit_rate < 0.01
    assert pair.hit_rate > 0.4
    belady = ladder.run_cases(ladder.FITTED, [ladder.Case("b", 1, 8, 20.0, "belady")], seed=1, layers=10)[0]
    assert belady.hit_rate > 0.3


def test_lru_curve_equals_simulation_after_warmup():
    tr = ladder.sample_ladder_trace(ladder.FITTED, 8, 12, 5, np.random.default_rng(11))
    req = cache.requests_from_trace(tr, 288, partition=ladder.partition(2), rank=0)
    cap, rate = cache.lru_hit_curve(req, warmup_steps=4)
    for c in (30, 80, 150, 400):
        sim = cache.simulate(req, c, policy="lru", warmup_steps=4)
        assert rate[min(c, cap[-1])] == pytest.approx(sim.hit_rate, abs=1e-12)


def test_predictions_csv_has_the_exact_columns_and_cases(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(tmp_path / "figures"))
    target = ladder.predictions_path()
    assert target == tmp_path / "cache_ladder" / "predictions.csv"
    bands, _ = ladder.predict(ladder.FITTED, ladder.PREDICTION_CASES, [0], layers=3)
    written = ladder.write_predictions(bands)
    assert written == target
    with open(written, newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == (
        "case",
        "ranks",
        "streams",
        "cache_gib_per_rank",
        "policy",
        "hit_rate",
        "gib_streamed_per_step",
        "method",
    )
    names = [r[0] for r in rows[1:]]
    assert names == [
        "pair-m8-20",
        "pair-m8-40",
        "pair-m8-60",
        "pair-m8-80",
        "booster-m8-20",
        "booster-m1-20",
        "pair-m1-80",
        "pair-m16-80",
        "pair-m32-80",
    ]
    for r in rows[1:]:
        assert r[4] == "lru" and 0.0 <= float(r[5]) <= 1.0 and float(r[6]) >= 0.0
        assert int(r[1]) == (1 if r[0].startswith("booster") else 2)
        assert r[7] == "fit_knobs"  # no general fit given: every row is the seed-specific knobs
    assert sorted(p.name for p in target.parent.iterdir()) == ["predictions.csv"], "no temp file left behind"


def test_predictions_path_defaults_to_reports(monkeypatch):
    monkeypatch.delenv("MOEROOF_FIGURES_DIR", raising=False)
    assert ladder.predictions_path() == paths.REPORTS_DIR / "cache_ladder" / "predictions.csv"


def test_history_units():
    k = replace(ladder.FITTED, history_tokens=256)
    assert ladder.history_steps(k, 8) == 32 and ladder.history_steps(k, 1) == 256 and ladder.history_steps(k, 32) == 8
    ks = replace(k, history_unit="steps")
    assert ladder.history_steps(ks, 1) == ladder.history_steps(ks, 32) == 32


@pytest.mark.parametrize(
    "kw",
    [{"family": "pareto"}, {"skew": 0.0}, {"rho": 1.5}, {"history_tokens": -1}, {"c": 0.0}, {"history_unit": "days"}],
)
def test_bad_knobs_are_rejected(kw):
    with pytest.raises(ValueError):
        replace(ladder.FITTED, **kw)


@pytest.mark.parametrize("kw", [{"ranks": 3}, {"streams": 0}, {"cache_gib_per_rank": -1.0}, {"policy": "fifo"}])
def test_bad_cases_are_rejected(kw):
    with pytest.raises(ValueError):
        replace(ladder.Case("x", 2, 8, 20.0), **kw)


def test_expert_bytes_units():
    assert ladder.expert_bytes(1) * ladder.RANK_EXPERTS == pytest.approx(91 * GiB)


def test_stored_knobs_come_from_the_data_file_with_their_provenance():
    # data/fits/ladder-knobs.toml holds the numbers; ladder.FITTED / FITTED_DRAWS are read from it
    import tomllib

    doc = tomllib.loads(ladder.FITS_PATH.read_text(encoding="utf-8"))
    assert doc["provenance"] == "projected" and "20 GiB" in doc["fitted_on"] and "80 GiB" in doc["fitted_on"]
    assert doc["fitted"]["function"].endswith("fit_knobs") and doc["fitted"]["seeds"] == list(range(8))
    assert ladder.FITTED == ladder.Knobs(
        family=doc["fitted"]["family"],
        skew=doc["fitted"]["skew"],
        rho=doc["fitted"]["rho"],
        history_tokens=doc["fitted"]["history_tokens"],
    )
    assert len(ladder.FITTED_DRAWS) == doc["draws"]["replicates"] == len(doc["draws"]["rows"])
    assert all(k.family == "dirichlet" for k in ladder.FITTED_DRAWS)


@pytest.mark.slow
def test_a_fresh_fit_at_the_stored_seeds_reproduces_the_stored_knobs():
    # the exact call data/fits/ladder-knobs.toml names (about 6 s); tolerance stored beside the knobs
    import tomllib

    doc = tomllib.loads(ladder.FITS_PATH.read_text(encoding="utf-8"))["fitted"]
    tol = doc["tolerance"]
    fit = ladder.fit_knobs(ladder.CALIBRATION, seeds=doc["seeds"], layers=doc["layers"])
    assert not fit.notes
    assert fit.knobs.family == ladder.FITTED.family
    assert fit.knobs.skew == pytest.approx(ladder.FITTED.skew, abs=tol["skew"])
    assert fit.knobs.rho == pytest.approx(ladder.FITTED.rho, abs=tol["rho"])
    assert abs(fit.knobs.history_tokens - ladder.FITTED.history_tokens) <= tol["history_tokens"]


# ----------------------------------------------------------------------------- fit-routing on the public rows


def _public_values() -> set[float]:
    vals = {ladder.UNION_PUBLISHED}
    for t in ladder.CALIBRATION:
        vals |= {t.hit_rate, t.gib_streamed_per_step}
    return vals


def test_public_points_calibrate_on_public_rows_only():
    pts = ladder.public_points()
    cal = [p for p in pts if p.calibrates]
    assert {p.value for p in cal} == _public_values()
    assert len(cal) == 5 and all(p.ranks == 2 and p.partition == "id" and p.batch == 8 for p in cal)
    # every withheld case comes as a hit-rate and a GiB row with no value
    empty = [p for p in pts if not p.calibrates]
    assert len(empty) == 2 * len(ladder.WITHHELD_CASES)
    assert {(p.batch, p.capacity_gib, p.ranks) for p in empty} == {
        (c.streams, c.cache_gib_per_rank, c.ranks) for c in ladder.WITHHELD_CASES
    }
    # no held-out published value (53.8 %, 6.62 GiB) reaches the points
    assert not {t.hit_rate for t in ladder.HELD_OUT} & {p.value for p in pts}
    assert not {t.gib_streamed_per_step for t in ladder.HELD_OUT} & {p.value for p in pts}


def test_fit_routing_predictions_bands_every_withheld_case(monkeypatch):
    seen = []
    real = ladder.fit_routing

    def spy(points, *args, **kwargs):
        seen.extend(points)
        return real(points, *args, **kwargs)

    monkeypatch.setattr(ladder, "fit_routing", spy)
    pred = ladder.fit_routing_predictions(seeds=(0,), bootstrap=2, max_sim_layers=2, families=("dirichlet",))
    assert {p.value for p in seen if p.calibrates} == _public_values()
    rows = {r["case"]: r for r in pred.rows}
    for c in ladder.WITHHELD_CASES:
        r = rows[c.name]
        assert r["role"] == "withheld" and r["witnessed_hit_rate"] is None
        assert r["hit_rate_low"] <= r["hit_rate"] <= r["hit_rate_high"]
        assert r["gib_low"] <= r["gib_streamed_per_step"] <= r["gib_high"]
    assert {r["role"] for r in pred.rows} == {"calibration", "withheld", "held-out published"}
    assert [h["case"] for h in pred.held_out_errors()] == [t.case.name for t in ladder.HELD_OUT]


def test_fit_routing_predictions_csv_adds_band_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(tmp_path / "figures"))
    pred = ladder.fit_routing_predictions(seeds=(0,), bootstrap=0, max_sim_layers=2, families=("dirichlet",))
    out = ladder.write_fit_routing_predictions(pred)
    assert out == tmp_path / "cache_ladder" / "predictions-fit-routing.csv"
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == ladder.FIT_ROUTING_COLUMNS
    assert ladder.FIT_ROUTING_COLUMNS[: len(ladder.CASE_COLUMNS)] == ladder.CASE_COLUMNS
    assert [r["case"] for r in rows] == [c.name for c in ladder.PREDICTION_CASES] + [
        t.case.name for t in ladder.HELD_OUT
    ]
    # predictions.csv is the answer: the seed-specific knobs' rows at the calibration's M = 8, the
    # general fit's at every other M (the booster at M = 1, the pair at 1, 16 and 32 streams)
    bands, _ = ladder.predict(ladder.FITTED, ladder.PREDICTION_CASES, [0], layers=3)
    with ladder.write_predictions(bands, routing_rows=pred.rows).open() as f:
        answer = list(csv.DictReader(f))
    general = {r["case"]: r for r in pred.rows}
    seed_specific = {b.case.name: b for b in bands}
    assert ladder.CALIBRATION_STREAMS == (8,)
    assert [r["case"] for r in answer] == [c.name for c in ladder.PREDICTION_CASES]
    assert {r["case"] for r in answer if r["method"] == "fit-routing"} == {
        "booster-m1-20",
        "pair-m1-80",
        "pair-m16-80",
        "pair-m32-80",
    }
    for r in answer:
        if r["method"] == "fit-routing":
            want = general[r["case"]]["hit_rate"], general[r["case"]]["gib_streamed_per_step"]
        else:
            assert r["method"] == "fit_knobs" and r["streams"] == "8"
            want = seed_specific[r["case"]].hit_rate, seed_specific[r["case"]].gib_streamed_per_step
        assert (r["hit_rate"], r["gib_streamed_per_step"]) == tuple(f"{v:.4f}" for v in want)


def test_run_cases_memo_returns_the_simulated_results_bit_for_bit(tmp_path, monkeypatch):
    from moeroof.studies.ladder import CASES_MEMO, run_cases_uncached

    monkeypatch.setenv("MOEROOF_CACHE_DIR", str(tmp_path / "memo"))
    CASES_MEMO.clear()
    cases = [ladder.PREDICTION_CASES[0], ladder.PREDICTION_CASES[4], ladder.PREDICTION_CASES[5]]
    kw = dict(seed=3, layers=4, timed_steps=6, warmup_steps=2)
    direct = run_cases_uncached(ladder.FITTED, cases, **kw)
    first = ladder.run_cases(ladder.FITTED, cases, **kw)
    assert first == direct
    assert len(list((tmp_path / "memo").rglob("*.json"))) == 1
    CASES_MEMO.clear()  # a fresh process: the disk's entry
    again = ladder.run_cases(ladder.FITTED, cases, **kw)
    assert again == direct and all(a.case is c for a, c in zip(again, cases))
    for a, d in zip(again, direct):
        for name in ("hit_rate", "gib_streamed_per_step", "union_per_layer", "rank_union_per_layer"):
            assert type(getattr(a, name)) is type(getattr(d, name)) and getattr(a, name) == getattr(d, name)
    # another seed or knob misses, and is simulated
    other = ladder.run_cases(replace(ladder.FITTED, rho=0.5), cases, **kw)
    assert other == run_cases_uncached(replace(ladder.FITTED, rho=0.5), cases, **kw) and other != direct
    assert len(list((tmp_path / "memo").rglob("*.json"))) == 2
    CASES_MEMO.clear()
