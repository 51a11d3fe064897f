"""One knob set from one stream to many (moeroof.studies.knob_transfer): the measured points
against hand counts, a round trip on a trace sampled from known knobs, and the real captures."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from conftest import seeded
from moeroof.core.paths import EXTERNAL_DIR
from moeroof.fit import routing as fit_routing
from moeroof.studies import knob_transfer as kt


def hand_trace():
    """(steps 4, streams 2, layers 1, K 2) over E = 4; stream 1 finishes after step 2."""
    t = np.array(
        [
            [[[0, 1]], [[1, 2]]],
            [[[1, 3]], [[2, 3]]],
            [[[0, 1]], [[0, 2]]],
            [[[1, 2]], [[-1, -1]]],
        ],
        dtype=np.int64,
    )
    return t


def test_live_batches_cut_at_the_first_finished_stream():
    t = hand_trace()
    ones = kt.live_batches(t, 1)
    assert [b.shape[0] for b in ones] == [4, 3]
    (pair,) = kt.live_batches(t, 2)
    assert pair.shape == (3, 2, 1, 2) and np.all(pair >= 0)
    with pytest.raises(ValueError, match="batch"):
        kt.live_batches(t, 3)


def lru_per_layer_by_hand(steps_sets, cap, warm):
    """One LRU of ``cap`` experts; each step's set is looked up before any of its misses loads."""
    c: OrderedDict = OrderedDict()
    hits = total = 0
    for s, ids in enumerate(steps_sets):
        resident = {x for x in ids if x in c}
        if s >= warm:
            hits += len(resident)
            total += len(ids)
        for x in sorted(ids):
            if x in c:
                c.move_to_end(x)
            else:
                c[x] = True
                while len(c) > cap:
                    c.popitem(last=False)
    return hits, total


def test_measured_points_equal_hand_counts():
    t = hand_trace()
    pts = {
        (p.kind, p.batch, p.capacity_experts): p.value
        for p in kt.measured_points(t, 4, batches=(1, 2), capacities=(2, 3), warmup_steps=1)
    }
    # overlap over the counted steps (from step 1; each against its previous counted step):
    # stream 0: {0,1}&{1,3} = 1, {1,2}&{0,1} = 1; stream 1: {0,2}&{2,3} = 1 -> 1 of K = 2 each
    assert pts[("overlap", 1, None)] == pytest.approx(np.mean([1, 1, 1]) / 2)
    # union of the pair over steps 1, 2 (warm-up 1): {1,3,2} = 3, {0,1,2} = 3
    assert pts[("union", 2, None)] == pytest.approx(3.0)
    assert pts[("union", 1, None)] == pytest.approx(2.0)
    for cap in (2, 3):
        h = n = 0
        for s, steps in ((0, 4), (1, 3)):
            a, b = lru_per_layer_by_hand([set(t[i, s, 0].tolist()) for i in range(steps)], cap, 1)
            h += a
            n += b
        assert pts[("hit_rate", 1, float(cap))] == pytest.approx(h / n)
        pair_sets = [set(t[i, :, 0].ravel().tolist()) for i in range(3)]
        a, b = lru_per_layer_by_hand(pair_sets, cap, 1)
        assert pts[("hit_rate", 2, float(cap))] == pytest.approx(a / b)


def test_round_trip_on_a_trace_sampled_from_known_knobs():
    # a "capture" drawn from known knobs: the fit on one stream's cache (two sizes), its overlap
    # and the batch's union predicts the batch's cache within a few points
    truth = fit_routing.RoutingKnobs(family="dirichlet", skew=0.4, rho=0.3, history_tokens=0)
    rng = seeded("knob-transfer-round-trip")
    w = fit_routing.layer_popularity(truth, 16, 4, int(rng.integers(1000, 2000)))
    # the capture holds all 4 layers of its model: its first MoE layer has no locality
    topk = fit_routing.sample_knob_trace(truth, w, 2, 4, 120, 77, first_layer=True)

    class Capture:
        pass

    cap = Capture()
    cap.topk, cap.experts, cap.meta, cap.path = topk, 16, {"provenance": "synthetic"}, "sampled"
    res = kt.knob_transfer(
        cap,
        batches=(1, 4),
        capacities=(3, 5, 7),
        calibrate=(("hit_rate", 1, 3), ("hit_rate", 1, 7), ("overlap", 1, None), ("union", 4, None)),
        bootstrap=4,
    )
    held = [r for r in res.held_out() if r.kind == "hit_rate"]
    assert len(held) == 4
    for r in held:
        assert abs(r.error) <= 6.0, r
    assert sum(r.inside for r in held) >= 3
    assert "synthetic" in res.source


def test_no_calibration_row_is_refused():
    with pytest.raises(ValueError, match="calibration"):
        kt.knob_transfer(
            type("T", (), {"topk": hand_trace(), "experts": 4, "meta": {}})(),
            batches=(1,),
            capacities=(2,),
            warmup_steps=1,
            calibrate=(("union", 9, None),),
        )


needs_external = pytest.mark.skipif(
    not EXTERNAL_DIR.is_dir(), reason=f"captured routing data not present at {EXTERNAL_DIR} (not redistributable)"
)


@pytest.mark.slow
@needs_external
@pytest.mark.parametrize("name, max_points", [("mixtral", 7.0), ("qwen15", 6.0)])
def test_real_captures_one_knob_set_predicts_the_withheld_rows(name, max_points):
    """Pinned as today (2026-11-30): on Mixtral 8x7B the largest held-out hit-rate error was
    +5.0 points (the pair's cache at 4 experts), on Qwen1.5 layer 0 +3.4 (5 streams, 16);
    unions within 3 %. A change that makes either worse than the bound must say why."""
    res = kt.run_capture(name, bootstrap=4)
    held = res.held_out()
    hits = [r for r in held if r.kind == "hit_rate"]
    assert len(hits) >= 10
    assert max(abs(r.error) for r in hits) <= max_points, [(r.label, r.error) for r in hits]
    for r in held:
        if r.kind == "union" and r.batch > 1:
            assert abs(r.predicted / r.measured - 1) <= 0.05, r
    assert sum(r.inside for r in held) >= 0.8 * len(held)
    assert "witnessed" in res.source
