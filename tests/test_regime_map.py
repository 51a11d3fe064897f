"""Regime maps: every cell is the roofline's plan at that point, and the map behaves as the roofline says."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from moeroof.core.units import GB, TB, GiB
from moeroof.data.presets import Hardware, load_hardware, load_model
from moeroof.models.plan import TERMS, Workload, plan, routing_from_spec
from moeroof.studies.regime_map import BOUND_CODES, regime_map

MODEL = load_model("glm-5.2")
BOX = load_hardware("nvme-gen4")
ROUTING = routing_from_spec("zipf:0.8", MODEL)
BATCH = np.array([1, 2, 5, 16, 50, 128, 400, 1000])

#: a box whose RAM holds every routed expert (a made-up big-memory server, numbers assumed):
#: with the whole model cached the SSD term vanishes and memory or compute must bind
BIG = Hardware(
    name="test-big-ram",
    ram_bytes=1.5 * TB,
    bw_mem_bytes_per_s=400 * GB,
    flops_per_s=10e12,
    ssd_read_size_bytes=(4096.0, 19e6),
    bw_ssd_bytes_per_s=(0.03 * GB, 6 * GB),
    os_reserve_bytes=8 * GiB,
)


@pytest.mark.parametrize("overlap", ["max", "sum"])
def test_every_cell_equals_plan_at_that_point(overlap):
    caches = np.array([0.0, 8, 24, 200]) * GiB  # the last one exceeds RAM: capped by the roofline
    w = Workload(context_tokens=2048, overlap=overlap)
    m = regime_map(MODEL, BOX, w, ROUTING, BATCH, caches)
    assert m.net_tok_s.shape == m.bound.shape == m.fits_in_memory.shape == (caches.size, BATCH.size)
    for i, c in enumerate(caches):
        p = plan(MODEL, BOX, replace(w, cache_bytes=float(c)), ROUTING, BATCH)
        np.testing.assert_allclose(m.net_tok_s[i], p.net_tok_s, rtol=1e-12)
        np.testing.assert_allclose(m.step_seconds[i], p.step_seconds, rtol=1e-12)
        assert tuple(m.bound[i]) == p.bound
        np.testing.assert_array_equal(m.fits_in_memory[i], p.fits_in_memory)
        assert m.transitions[i] == p.transitions
    assert m.overlap == overlap
    assert m.provenance == "projected"  # glm-5.2's kv and FLOP numbers are assumed


def test_net_tok_s_non_decreasing_in_cache_without_memory_pressure():
    # keep every requested cache below what RAM leaves at the largest B: no capping, no pressure
    w = Workload(context_tokens=1024)
    batch = np.array([1, 4, 16, 64, 200])
    leftover = (
        BOX.ram_bytes - BOX.os_reserve_bytes - MODEL.non_routed_bytes - batch.max() * 1024 * MODEL.kv_bytes_per_token
    )
    caches = np.linspace(0, leftover, 9)
    m = regime_map(MODEL, BOX, w, ROUTING, batch, caches)
    assert m.fits_in_memory.all()
    np.testing.assert_allclose(m.cache_effective_bytes, np.broadcast_to(caches[:, None], m.net_tok_s.shape), rtol=1e-9)
    assert np.all(np.diff(m.net_tok_s, axis=0) >= -1e-12 * m.net_tok_s[1:])


def test_sum_overlap_is_never_faster_than_max():
    caches = np.array([0.0, 16]) * GiB
    w = Workload(context_tokens=4096)
    mx = regime_map(MODEL, BOX, w, ROUTING, BATCH, caches)
    sm = regime_map(MODEL, BOX, replace(w, overlap="sum"), ROUTING, BATCH, caches)
    ok = mx.fits_in_memory
    assert np.array_equal(ok, sm.fits_in_memory) and ok.any() and not ok.all()
    assert np.all(sm.net_tok_s[ok] <= mx.net_tok_s[ok] * (1 + 1e-12))
    # a cell that does not fit in RAM has no rate, under either overlap
    assert np.all(np.isnan(mx.net_tok_s[~ok])) and np.all(np.isnan(sm.net_tok_s[~ok]))
    np.testing.assert_array_equal(sm.bound, mx.bound)  # the binding term is the largest term either way


def test_bound_codes_and_names():
    m = regime_map(MODEL, BIG, Workload(context_tokens=4096), ROUTING, BATCH, [0.0, MODEL.routed_bytes])
    assert set(np.unique(m.bound)) <= set(TERMS)
    np.testing.assert_array_equal(m.bound_code, np.vectorize(BOUND_CODES.get)(m.bound))


def test_caching_every_expert_moves_the_bound_off_the_ssd():
    # no cache: the SSD binds at B = 1; all experts cached on a box with room: SSD bytes are zero
    m = regime_map(MODEL, BIG, Workload(context_tokens=4096), ROUTING, [1, 8, 64], [0.0, MODEL.routed_bytes])
    assert m.bound[0, 0] == "ssd"
    assert "ssd" not in set(m.bound[1])
    assert m.net_tok_s[1, 0] > m.net_tok_s[0, 0]


def test_infeasible_cells_are_flagged_when_kv_exceeds_ram():
    w = Workload(context_tokens=32768)
    per_agent = 32768 * MODEL.kv_bytes_per_token
    room = BOX.ram_bytes - BOX.os_reserve_bytes - MODEL.non_routed_bytes
    m = regime_map(MODEL, BOX, w, ROUTING, BATCH, [0.0, 8 * GiB])
    expected = BATCH * per_agent <= room
    np.testing.assert_array_equal(m.fits_in_memory, np.broadcast_to(expected, m.fits_in_memory.shape))
    assert not expected.all() and expected.any()


@pytest.mark.parametrize("bad", [[], [-1.0], [np.nan], [[1.0, 2.0]]])
def test_bad_cache_sizes_are_rejected(bad):
    with pytest.raises(ValueError, match="cache_bytes"):
        regime_map(MODEL, BOX, Workload(), ROUTING, [1, 2], bad)
