"""Tests for moeroof.studies.expert_split: relabelings of the firing counts, per-rank LRU on a trace,
the head-node slowdown sweep and the pair-against-booster prediction (seed 003)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import seeded
from moeroof import cachesim as cache
from moeroof.core.paths import DATA_DIR
from moeroof.core.units import GiB
from moeroof.data.io import read_histogram
from moeroof.data.presets import load_hardware, load_model
from moeroof.models.partition import balanced_packing, contiguous_split, imbalance, inclusion_from_histogram
from moeroof.studies import expert_split as S
from moeroof.studies import ladder

SUMMED = DATA_DIR / "histograms" / "glm5-seed003-summed.csv"
PER_LAYER = DATA_DIR / "histograms" / "glm5-seed003-per-layer.csv"


def test_seed_measure_is_max_over_min():
    # seed 003: "the contiguous id split: 39408 / 38544, 1.022x" and LPT "38980 / 38972 ... 1.000x"
    assert S.max_over_min(S.SEED003["id_rows"]) == pytest.approx(S.SEED003["id_imbalance"], abs=5e-4)
    assert S.max_over_min(S.SEED003["lpt_rows"]) == pytest.approx(S.SEED003["lpt_imbalance"], abs=5e-4)
    # max/mean would read 1.011x for the same rows
    assert imbalance(S.SEED003["id_rows"]) == pytest.approx(1.0111, abs=1e-4)
    assert S.max_over_min([0, 0]) == 1.0 and S.max_over_min([1, 0]) == np.inf


def test_relabelings_move_the_id_split_not_lpt():
    load = read_histogram(SUMMED).counts.sum(axis=0)
    d = S.relabel_imbalance(load, 2, 500, seeded("relabel"))
    assert d.id_loads.shape == (500, 2)
    np.testing.assert_allclose(d.id_loads.sum(axis=1), load.sum())
    x = d.id_imbalance("max_min")
    assert x.min() >= 1.0 and x.std() > 0.005  # the id split depends on which ids are hot
    assert d.lpt_imbalance("max_min") < 1.001  # LPT: about 1.000x whatever the labels
    # LPT is a heuristic, not the optimum: a lucky relabeling can beat it, but rarely
    assert np.mean(x < d.lpt_imbalance("max_min")) < 0.05 and np.median(x) > 1.01
    assert 0.0 < d.share_at_or_above(1.022) < 1.0
    # same generator state, same draws
    again = S.relabel_imbalance(load, 2, 500, seeded("relabel"))
    np.testing.assert_array_equal(again.id_loads, d.id_loads)
    with pytest.raises(ValueError):
        S.relabel_imbalance(load, 2, 0, seeded("relabel"))


def _small_trace(layers=6, steps=12, streams=8):
    return ladder.sample_ladder_trace(ladder.FITTED, streams, steps, layers, seeded("split-trace"))


def test_firing_counts_count_every_pick():
    tr = _small_trace()
    c = S.firing_counts(tr, 288, stop_step=4)
    assert c.sum() == np.count_nonzero(tr[:4] >= 0) and c.shape == (288,)


@pytest.mark.parametrize("cache_gib", [0.0, 0.5, 2.0])
def test_trace_split_equals_the_lru_simulator(cache_gib):
    tr = _small_trace()
    layers = tr.shape[2]
    a = balanced_packing(S.firing_counts(tr, 288, stop_step=4), 2)
    ts = S.trace_split(tr, a, cache_gib_per_rank=cache_gib, warmup_steps=4)
    sim = dict(policy="lru", capacity_unit="bytes", item_bytes=ladder.expert_bytes(layers), warmup_steps=4)
    ref = [
        cache.simulate(cache.requests_from_trace(tr, 288, partition=a, rank=r), cache_gib * GiB, **sim)
        for r in range(int(np.max(a)) + 1)
    ]
    for r, res in enumerate(ref):
        assert ts.hits[r] == res.hits and ts.misses[r] == res.misses
        assert ts.gib_per_step[r] == pytest.approx(res.bytes_streamed_per_step[4:].mean() / GiB)
    np.testing.assert_allclose(ts.layer_miss_gib.sum(axis=(1, 2)) / ts.timed_steps, ts.gib_per_step)
    assert ts.picks_per_step.sum() == pytest.approx(8 * layers * ladder.TOP_K)


def test_paced_gib_layer_sync_never_below_step_sync_and_scales_with_slowdown():
    tr = _small_trace()
    ts = S.trace_split(tr, contiguous_split(288, 2), cache_gib_per_rank=0.5, warmup_steps=4)
    step, layer = ts.paced_gib_per_step(), ts.paced_gib_per_step(sync="layer")
    assert layer >= step > 0
    # a rank s times slower at identical work: the bytes it streams count s times
    big = ts.paced_gib_per_step([10.0, 1.0])
    assert big == pytest.approx(10.0 * ts.layer_miss_gib[0].sum(axis=1).mean())
    with pytest.raises(ValueError):
        ts.paced_gib_per_step(sync="never")
    share = ts.layer_share(0)
    assert share.shape == (tr.shape[2],)
    np.testing.assert_allclose(share + ts.layer_share(1), 1.0)


def test_fluid_gain():
    assert S.fluid_gain(1.0) == 1.0
    assert S.fluid_gain(2.6) == pytest.approx(1.8)
    np.testing.assert_allclose(S.fluid_gain([1.0, 3.0]), [1.0, 2.0])


@pytest.fixture(scope="module")
def sweep():
    hist = read_histogram(SUMMED)
    return S.slowdown_sweep(
        inclusion_from_histogram(hist),
        hist.counts.sum(axis=0),
        load_model("glm-5-nvfp4"),
        load_hardware("gb10"),
        [1.0, 1.3, 2.6],
        cache_gib_per_rank=20.0,
        bytes_max_iter=10,
    )


def test_slowdown_sweep_equal_speeds_and_the_head_pace(sweep):
    # equal speeds: weighted is LPT
    assert sweep.step_seconds["weighted"][0] == pytest.approx(sweep.step_seconds["lpt"][0])
    # id and LPT keep 144/144; SSD-bound, the pair runs at the head's pace, s times slower
    for m in ("id", "lpt"):
        assert list(sweep.head_experts[m]) == [144, 144, 144]
        assert set(sweep.bound[m]) == {"ssd"}
        np.testing.assert_allclose(sweep.cost(m), sweep.slowdowns, rtol=1e-9)
    # speed-weighted partitions give the slow head fewer experts and are faster than LPT
    for m in ("weighted", "bytes"):
        assert sweep.head_experts[m][-1] < 144
        assert np.all(sweep.multiple(m)[1:] > 1.0)
    # the pair runs at its slowest rank
    for m in sweep.methods:
        np.testing.assert_allclose(sweep.rank_seconds[m].max(axis=1), sweep.step_seconds[m])
    # bytes keeps the weighted start among its candidates: never slower
    assert np.all(sweep.step_seconds["bytes"] <= sweep.step_seconds["weighted"] * (1 + 1e-12))


def test_pair_vs_booster_small():
    pb = S.pair_vs_booster(ladder.FITTED, load_model("glm-5-nvfp4"), load_hardware("gb10"), seeds=(0,), layers=8)
    # a booster's per-step working set (≈ 2 × a rank's) exceeds 20 GiB: the layer-ordered LRU
    # sweep evicts what the next step needs and it hits almost never; a rank's fits
    assert pb.booster.working_set_gib > 20.0 > pb.pair.working_set_gib
    assert pb.booster.hit_rate < 0.05 < 0.4 < pb.pair.hit_rate
    assert pb.booster.bound == pb.pair.bound == "ssd"
    assert pb.ratio == pytest.approx(pb.bytes_ratio)  # the SSD bandwidth cancels
    assert pb.ratio_witnessed == pytest.approx(21683.9 / 3553.8)
    assert pb.error == pytest.approx(pb.ratio / pb.ratio_witnessed - 1.0)
    assert pb.booster_seconds_at_witnessed_rate == pytest.approx(pb.booster.gib_per_step / (6.62 / 3.5538))


# ----------------------------------------------------------------------------- the tok/s sweep through fit-plan


def test_tok_s_points_calibrate_on_public_rows_only():
    pts = S.tok_s_points()
    cal = [(p, r) for p, r in zip(pts, S.TOK_S_ROWS) if p.calibrates]
    assert cal and all(r.role == "calibration" for _, r in cal)
    assert sorted(p.net_tok_s for p, _ in cal) == [0.37, 2.47, 2.98, 5.21, 5.60, 5.67]
    # the public rows the points file calibrates on, and the two other 80 GiB runs beside its 5.60
    from moeroof.core.paths import DATA_DIR
    from moeroof.data.plan_points import read_plan_points

    shipped = read_plan_points(DATA_DIR / "points" / "seed003-public.plan-points")
    keys = {(p.batch, p.cache_gib, p.ranks, p.net_tok_s) for p, _ in cal}
    file_keys = {(p.batch, p.cache_gib, p.ranks, p.net_tok_s) for p in shipped if p.net_tok_s is not None}
    assert keys - file_keys == {(8, 80.0, 2, 5.21), (8, 80.0, 2, 5.67)} and file_keys <= keys
    # held-out published and withheld rows reach fit-plan without a value
    for p, r in zip(pts, S.TOK_S_ROWS):
        if r.role != "calibration":
            assert p.net_tok_s is None and p.hit_rate is None
    assert {r.role for r in S.TOK_S_ROWS} == {"calibration", "held-out published", "withheld"}
    assert all(r.witnessed_tok_s is None for r in S.TOK_S_ROWS if r.role == "withheld")


@pytest.mark.slow
def test_tok_s_sweep_predicts_withheld_rows_with_bands(monkeypatch):
    import moeroof.fit.plan as FP

    seen = []
    real = FP.fit_plan

    def spy(points, *args, **kwargs):
        seen.extend(points)
        return real(points, *args, **kwargs)

    monkeypatch.setattr(FP, "fit_plan", spy)
    sw = S.tok_s_sweep(load_model("glm-5-nvfp4"), load_hardware("gb10"), "dirichlet", 0.4, 0.2, max_evaluations=4)
    assert sorted(p.net_tok_s for p in seen if p.net_tok_s is not None) == [0.37, 2.47, 2.98, 5.21, 5.60, 5.67]
    for r in sw.rows:
        assert r["low"] <= r["predicted"] <= r["high"]
        assert (
            r["low"] <= min(r["per_token_engine"], r["additive"])
            and max(r["per_token_engine"], r["additive"]) <= r["high"]
        )
        if r["role"] == "withheld":
            assert r["witnessed"] is None and r["error"] is None
        else:
            assert r["error"] == pytest.approx(r["predicted"] / r["witnessed"] - 1.0)
    assert {r["name"] for r in sw.held_out()} == {r.name for r in S.TOK_S_ROWS if r.role == "held-out published"}
