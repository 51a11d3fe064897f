"""The roofline against published measurements (VALIDATION.md): tolerances and sources stated.

colibri and bigrig are hobby projects; seed 000's 0.243 tok/s is a witnessed cell on a box the
seed does not describe. The tests pin what the model must get right (bytes per cold token, the
published single-stream range, the roofline being an upper bound where nothing was calibrated
on throughput) and that each calibration reproduces its calibration point exactly; the
prediction errors themselves are reported in the net_toks notebook, whatever they are.
"""

from __future__ import annotations

import numpy as np
import pytest

from moeroof.core.paths import DATA_DIR
from moeroof.data.presets import load_hardware, load_model
from moeroof.models.plan import Workload, plan, routing_from_spec
from moeroof.studies.validation import (
    BIGRIG_SCALING,
    COLIBRI_COLD_TOKEN_BYTES,
    calibrate_term,
    hot_set_hit_rate,
    scaling_check,
    single_stream_predictions,
    zipf_for_hit_rate,
)


def test_glm52_cold_token_bytes_match_colibri():
    # colibri docs / JustVugg/colibri#220: ~11 GB per cold token (75 layers x 8 x ~19 MB); ±5 %
    m = load_model("glm-5.2")
    p = plan(m, load_hardware("nvme-gen4"), Workload(), routing_from_spec("uniform", m), [1])
    assert p.ssd_bytes_per_token[0] == pytest.approx(COLIBRI_COLD_TOKEN_BYTES.value, rel=0.05)


@pytest.fixture(scope="module")
def single_rows():
    return {r["setup"]: r for r in single_stream_predictions()}


def test_cold_stream_on_a_1gbs_disk_lands_in_the_published_range(single_rows):
    # colibri docs: ~0.05-0.1 tok/s cold with ~1 GB/s disk and 25 GB RAM; nothing calibrated
    row = single_rows["GLM-5.2 int4, ~1 GB/s disk, 25 GB RAM, cold"]
    assert 0.05 <= row["tok_s_predicted"] <= 0.1


def test_i5_prediction_from_its_hit_rate(single_rows):
    # colibri docs: 0.98 tok/s at 54.7 % hit on an i5-13600K with a PCIe4 drive; the skew is
    # calibrated on the hit rate only, tok/s is predicted: within 25 % (issue 6's aim)
    row = single_rows["GLM-5.2, i5-13600K 62 GB, PCIe4 5.90 GB/s"]
    assert row["hit_rate_model"] == pytest.approx(0.547, abs=1e-6)
    assert abs(row["relative_error"]) < 0.25


def test_roofline_is_an_upper_bound_where_throughput_was_not_calibrated(single_rows):
    # a roofline ignores every inefficiency, so it may not predict below a measurement
    for row in single_rows.values():
        measured = row["tok_s_measured"]
        low = min(measured) if isinstance(measured, tuple) else measured
        assert row["tok_s_predicted"] >= low, row["setup"]


def test_hot_set_hit_rate_and_its_inverse():
    m = load_model("glm-5.2")
    s = zipf_for_hit_rate(m, 32.0, 0.5)
    from moeroof.models.routing import inclusion_probabilities, zipf_weights

    assert hot_set_hit_rate(inclusion_probabilities(zipf_weights(m.experts, s), m.top_k), 32.0) == pytest.approx(
        0.5, abs=1e-6
    )
    assert hot_set_hit_rate(np.full(256, 8 / 256), 32.0) == pytest.approx(32 / 256)
    with pytest.raises(ValueError, match="Zipf"):
        zipf_for_hit_rate(m, 1.0, 0.999)


@pytest.mark.parametrize("term,cached", [("ssd", 44), ("memory", 128)])
def test_bigrig_calibration_reproduces_its_point_and_reports_errors(term, cached):
    # bigrig batch.py (VALIDATION.md): B=1 17.17 ... B=16 63.24 tok/s; calibrate at B=1
    m, hw = load_model("qwen3-30b-a3b-3bit"), load_hardware("apple-m4")
    r = routing_from_spec(str(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz"), m)
    ref = BIGRIG_SCALING.value
    w = Workload(context_tokens=512, cache_bytes=cached * m.moe_layers * m.expert_bytes)
    c = scaling_check(m, hw, w, r, ref["batch"], ref["net_tok_s"], calibrate_at=1, term=term)
    assert c["predicted"][0] == pytest.approx(17.17, rel=1e-8)
    assert len(c["relative_error"]) == 5 and np.all(np.isfinite(c["relative_error"]))
    # the model's aggregate still rises with B, as the measurement does
    assert np.all(np.diff(c["predicted"]) > 0)


def test_calibration_refuses_a_term_that_cannot_bind():
    m, hw = load_model("qwen3-30b-a3b-3bit"), load_hardware("apple-m4")
    r = routing_from_spec("uniform", m)
    w = Workload(context_tokens=512, cache_bytes=44 * m.moe_layers * m.expert_bytes)
    with pytest.raises(ValueError, match="cannot reach"):
        calibrate_term(m, hw, w, r, 1, 17.17, "compute")


def test_gpu_coalescing_bench_against_the_roofline():
    # witnessed: benchmarks/gpu_moe_bench.py on the lab's H200, experts streamed from pinned host
    # memory (data/measurements/gpu_moe_bench-h200-2026-11-29.json); nothing calibrated.
    from moeroof.studies.validation import gpu_bench_check

    c = gpu_bench_check()
    # the union of Zipf-routed tokens: the plug-in model within 3 % of the measured union
    np.testing.assert_allclose(c["union_predicted"], c["union_measured"], rtol=0.03)
    # link-bound uncoalesced copies: within 15 % of the measured rate at every B
    assert np.all(np.abs(c["modes"]["uncoalesced"]["relative_error"]) < 0.15)
    # the roofline bounds the coalesced path from above (per-expert launch overheads it omits)
    assert np.all(np.array(c["modes"]["coalesced"]["relative_error"]) > 0)
    # coalescing pays at large B, as predicted: measured multiple > 4x at B = 128 (baseline uncoalesced)
    assert c["multiple_measured"][-1] > 4
