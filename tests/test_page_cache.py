"""Memory pressure as a model: the OS page cache beside the expert cache."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.core.paths import DATA_DIR
from moeroof.core.units import GiB
from moeroof.data.presets import load_hardware, load_model
from moeroof.models import expert_cache
from moeroof.models.plan import Workload, plan, routing_from_spec, step_breakdown
from moeroof.models.routing import inclusion_probabilities, zipf_weights

PI = np.array([inclusion_probabilities(zipf_weights(64, s), 4) for s in (0.8, 1.1, 1.4)])


@pytest.mark.parametrize("batch,page", [(1, 6.0), (2, 10.0), (4, 20.0)])
def test_page_cache_alone_is_an_lru_of_its_size(batch, page):
    """With no expert cache every request reaches the page cache, so its hits per request are
    those of an LRU of the page cache's size on the same drawn trace (steady_state_miss_ratio)."""
    hits = expert_cache.page_cache_hit_ratio(PI, batch, 0.0, page, seed=2)
    miss_lru, _ = expert_cache.steady_state_miss_ratio(PI, batch, page, policy="lru", seed=2)
    assert hits == pytest.approx(1.0 - miss_lru, abs=1e-12)


def test_page_cache_hits_fall_as_the_expert_cache_takes_its_memory():
    """Expert cache + page cache sharing a fixed budget: moving memory into the expert cache
    shrinks the page cache, which never serves more of the remaining misses."""
    total = 30.0
    served = [
        expert_cache.page_cache_hit_ratio(PI, 2, float(c), total - c, seed=1) for c in (0.0, 5.0, 10.0, 15.0, 20.0)
    ]
    assert np.all(np.diff(served) <= 1e-12), served
    assert served[0] > served[-1]


@pytest.fixture(scope="module")
def box():
    m = load_model("qwen3-235b-a22b")
    hw = load_hardware("apple-m4-max")
    return m, hw, routing_from_spec("zipf:0.8", m)


def test_bytes_add_up_and_the_copy_goes_through_memory(box):
    m, hw, r = box
    w = Workload(context_tokens=4096, cache_bytes=20 * GiB)
    off = step_breakdown(m, hw, w, r, [1, 2])
    on = step_breakdown(m, hw, dataclasses.replace(w, page_cache=True), r, [1, 2])
    e, layers = m.expert_bytes, m.moe_layers
    np.testing.assert_allclose(on.missed_pairs, off.missed_pairs)  # the expert cache is the same
    np.testing.assert_allclose(on.ssd_bytes, (on.missed_pairs - on.page_hit_pairs) * e)
    np.testing.assert_allclose(on.mem_bytes - off.mem_bytes, 2.0 * on.page_hit_pairs * e)
    assert np.all(on.page_hit_pairs >= 0) and np.all(on.page_hit_pairs <= on.missed_pairs)
    # the page cache has what RAM leaves beside the expert cache
    kv = np.array([1, 2]) * 4096 * m.kv_bytes_per_token
    left = hw.ram_bytes - hw.os_reserve_bytes - m.non_routed_bytes - kv - 20 * GiB
    np.testing.assert_allclose(on.page_cache_bytes, left)
    assert layers > 0


def test_tok_s_against_cache_size_is_not_monotone_with_a_page_cache(box):
    """Without a page cache a larger LRU expert cache never slows a step (LRU's inclusion
    property, one trace for every size); with one, it can: the cache starves the page cache
    (mlx-lm#1438's shape), by itself, with no threshold set by hand."""
    m, hw, r = box
    sizes = np.arange(0, 100, 10)
    net = {
        pc: np.array(
            [
                plan(m, hw, Workload(context_tokens=4096, cache_bytes=c * GiB, page_cache=pc), r, [1]).net_tok_s[0]
                for c in sizes
            ]
        )
        for pc in (False, True)
    }
    assert np.all(np.diff(net[False]) >= -1e-12)
    assert np.any(np.diff(net[True]) < -1e-3)
    assert net[True][0] > net[False][0]  # with no expert cache the page cache still serves hits


def test_cli_reports_the_page_cache(capsys):
    h = str(DATA_DIR / "histograms" / "glm5-seed003-per-layer.csv")
    args = [
        "plan",
        "--model",
        "glm-5-nvfp4",
        "--hardware",
        "gb10",
        "--routing",
        h,
        "--batch",
        "1,8",
        "--cache-gib",
        "20",
    ]
    assert main([*args, "--json"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["page_cache_gib"] is None
    assert main([*args, "--page-cache", "--json"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert len(on["page_cache_gib"]) == 2 and all(0 <= s <= 1 for s in on["page_cache_hit_share"])
    assert all(a <= b for a, b in zip(on["step_seconds"], off["step_seconds"]))
