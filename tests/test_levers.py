"""Levers L1/L2/L3, their compounding and the per-user ⊗ cross-user composition."""

from __future__ import annotations

import numpy as np
import pytest

from moeroof.models.levers import composition, compounding, lever_factors, prefill_seconds, session_seconds
from moeroof.models.plan import Workload, plan
from test_plan import toy_hw, toy_model, zipf_routing

BATCH = np.array([1, 4, 16, 64])


def test_l2_is_the_uncoalesced_multiple_and_l1_l3_are_neutral_at_b1():
    m, h = toy_model(), toy_hw()
    r = zipf_routing(m, 0.9)
    w = Workload(context_tokens=1024)
    f = lever_factors(m, h, w, r, BATCH, prefix_tokens=512)
    np.testing.assert_allclose(f.l2_coalescing, plan(m, h, w, r, BATCH).baselines["uncoalesced"]["multiple"])
    assert f.l1_dense_amortization[0] == pytest.approx(1.0) and f.l3_prefix_decode[0] == pytest.approx(1.0)
    assert np.all(f.l1_dense_amortization >= 1 - 1e-12) and np.all(f.l3_prefix_decode >= 1 - 1e-12)
    assert f.baselines["l2_coalescing"] == "uncoalesced"


def test_l1_on_a_memory_bound_box_is_the_dense_read_ratio():
    # SSD and compute infinitely fast: the step is memory time, so L1 = mem(B·NR) / mem(NR)
    m = toy_model()
    h = toy_hw(bw_ssd_bytes_per_s=(1e30, 1e30), flops_per_s=1e30)
    r = zipf_routing(m, 0.9)
    w = Workload(context_tokens=0)
    p = plan(m, h, w, r, BATCH)
    f = lever_factors(m, h, w, r, BATCH)
    expected = (p.mem_bytes_per_step + (BATCH - 1) * m.non_routed_bytes) / p.mem_bytes_per_step
    np.testing.assert_allclose(f.l1_dense_amortization, expected)


def test_l3_without_prefix_is_neutral():
    m, h = toy_model(), toy_hw()
    f = lever_factors(m, h, Workload(context_tokens=2048), zipf_routing(m, 1.0), BATCH, prefix_tokens=0)
    np.testing.assert_allclose(f.l3_prefix_decode, 1.0)


def test_compounding_reduces_to_single_levers():
    m, h = toy_model(), toy_hw()
    r = zipf_routing(m, 0.8)
    w = Workload(context_tokens=0)
    no_prefix = compounding(m, h, w, r, agents=16, prefix_tokens=0, decode_tokens=100)
    assert no_prefix["f3"] == pytest.approx(1.0) and no_prefix["f23"] == pytest.approx(no_prefix["f2"])
    c = compounding(m, h, w, r, agents=16, prefix_tokens=1000, decode_tokens=100)
    # shared prefix saves exactly (agents − 1) prefills when KV reads are free (kv = 0 context)
    saved = c["seconds"]["neither"] - c["seconds"]["L3"]
    assert saved == pytest.approx(15 * prefill_seconds(m, h, w, r, 1000), rel=1e-9)
    assert c["f23"] >= max(c["f2"], c["f3"]) - 1e-12
    assert c["baseline"].startswith("uncoalesced")


def test_session_time_adds_prefill_and_decode():
    m, h = toy_model(kv_bytes_per_token=0.0), toy_hw()
    r = zipf_routing(m, 0.8)
    w = Workload(context_tokens=0)
    t = session_seconds(m, h, w, r, 4, 200, 50, coalesced=True, shared_prefix=False)
    step = plan(m, h, w, r, [4]).step_seconds[0]
    assert t == pytest.approx(4 * prefill_seconds(m, h, w, r, 200) + 50 * step)


def test_composition_gain_is_subadditive_union():
    m, h = toy_model(experts=128, top_k=8), toy_hw()
    r = zipf_routing(m, 0.7)
    out = composition(m, h, Workload(context_tokens=512), r, agents=4, users=[1, 2, 8, 32])
    gain = np.array(out["cross_user_expert_gain"])
    users = np.array(out["users"])
    assert gain[0] == pytest.approx(1.0) and out["multiple_vs_baseline"][0] == pytest.approx(1.0)
    assert np.all(gain >= 1 - 1e-12) and np.all(gain <= users + 1e-12)
    assert np.all(np.diff(gain) >= -1e-12)
    assert "per-user" in out["baseline"]


def test_shared_prefix_cuts_kv_reads_but_not_attention_flops():
    from dataclasses import replace

    m = toy_model(attn_flops_per_context_token=1e6)
    h = toy_hw()
    r = zipf_routing(m, 0.8)
    w = Workload(context_tokens=1000)
    b = np.array([1, 8, 32])
    plain = plan(m, h, w, r, b)
    shared = plan(m, h, replace(w, shared_prefix_tokens=600), r, b)
    np.testing.assert_allclose(plain.terms["compute"], shared.terms["compute"])
    saved = plain.mem_bytes_per_step - shared.mem_bytes_per_step
    np.testing.assert_allclose(saved, (b - 1) * 600 * m.kv_bytes_per_token)
    with pytest.raises(ValueError, match="shared_prefix_tokens"):
        Workload(context_tokens=10, shared_prefix_tokens=11)


def test_no_lever_factor_where_the_step_does_not_fit():
    from moeroof.data.presets import load_hardware, load_model
    from moeroof.models.levers import lever_factors
    from moeroof.models.plan import Workload, routing_from_spec

    m, hw = load_model("glm-5.2"), load_hardware("h200-pcie-offload")
    w = Workload(context_tokens=32768, cache_policy="static")
    f = lever_factors(m, hw, w, routing_from_spec("zipf:0.8", m), [1, 8, 64], prefix_tokens=1024)
    assert list(f.fits_in_memory) == [True, True, False]
    for factor in (f.l1_dense_amortization, f.l2_coalescing, f.l3_prefix_decode):
        assert np.all(np.isfinite(factor[:2])) and np.isnan(factor[2])
