"""One question, one answer: a plan row depends only on its own B, never on the other batch sizes
asked for (the auto cache, the byte-balanced partition and a routing sampled with B streams are
each computed per B), and admission is monotone in the rate asked (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeroof.data.presets import load_hardware, load_model
from moeroof.models.local_routing import routing_from_knobs
from moeroof.models.plan import Workload, admission_search, auto_cache_bytes, plan, routing_from_spec

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

MODEL = load_model("qwen3-30b-a3b")
BOX = load_hardware("apple-m4")  # 16 GB: the KV of a few dozen agents at 8k tokens exhausts it


GB10 = load_hardware("gb10")  # the pair of boxes joined by a link


def _case(name: str):
    """(workload, routing, box) of each way a row could have depended on the grid."""
    zipf = routing_from_spec("zipf:0.9", MODEL)
    if name == "auto-lru":
        return Workload(context_tokens=8192, cache_auto=True, cache_policy="lru"), zipf, BOX
    if name == "bytes-partition":
        w = Workload(context_tokens=65536, cache_auto=True, cache_policy="static", ranks=2, partition="bytes")
        return w, zipf, GB10
    if name == "knob-trace":
        return (
            Workload(context_tokens=8192, cache_auto=True, cache_policy="lru"),
            lambda b: routing_from_knobs(MODEL, "zipf", 0.9, 0.4, math.inf, streams=int(b)),
            BOX,
        )
    raise AssertionError(name)


ROW_KEYS = (
    "step_seconds",
    "per_agent_tok_s",
    "net_tok_s",
    "bound",
    "cache_gib",
    "cache_hit_rate",
    "ssd_bytes_per_step",
    "union_per_layer",
    "coalescing_ratio",
    "fits_in_memory",
    "infeasible_reason",
)


def _row(rep: dict, b: int) -> dict:
    i = rep["batch"].index(b)
    # per-rank lists (R > 1) hold one list over B per rank
    out = {k: [r[i] for r in rep[k]] if isinstance(rep[k][0], list) else rep[k][i] for k in ROW_KEYS}
    out["baselines"] = {name: {k: v[i] for k, v in d.items()} for name, d in rep["baselines"].items()}
    return out


@pytest.mark.parametrize("name", ["auto-lru", "bytes-partition", "knob-trace"])
@SETTINGS
@given(data=st.data())
def test_a_row_is_the_same_in_any_grid(name, data):
    w, routing, box = _case(name)
    b = data.draw(st.integers(1, 24), label="B")
    others = data.draw(st.lists(st.integers(1, 48), max_size=3), label="other batch sizes")
    grid = sorted({b, *others})
    alone = plan(MODEL, box, w, routing, [b]).to_dict()
    within = plan(MODEL, box, w, routing, grid).to_dict()
    assert _row(within, b) == _row(alone, b)


def test_the_auto_cache_of_a_row_is_what_ram_leaves_at_that_b():
    w, routing, _ = _case("auto-lru")
    grid = [1, 4, 16, 64]
    rep = plan(MODEL, BOX, w, routing, grid).to_dict()
    want = auto_cache_bytes(MODEL, BOX, grid, context_tokens=8192) / 2**30
    assert rep["cache_gib"] == pytest.approx(list(want), rel=1e-12)
    assert rep["cache_gib"][0] > rep["cache_gib"][1] > 0  # a larger batch leaves less RAM


@SETTINGS
@given(
    lo=st.floats(0.0, 1.5, allow_nan=False),
    gap=st.floats(0.0, 1.0, allow_nan=False),
    policy=st.sampled_from(["static", "lru"]),
)
def test_admission_is_monotone_in_the_rate_asked(lo, gap, policy):
    w = Workload(context_tokens=2048, cache_auto=True, cache_policy=policy)
    routing = routing_from_spec("zipf:0.9", MODEL)
    a = admission_search(MODEL, BOX, w, routing, lo, max_batch=256)
    c = admission_search(MODEL, BOX, w, routing, lo + gap, max_batch=256)
    assert (c["admit_batch"] or 0) <= (a["admit_batch"] or 0)
    for adm in (a, c):
        if adm["admit_batch"] is not None:
            assert adm["per_agent_tok_s"] >= adm["min_per_agent_tok_s"]
        assert adm["next_batch"] == (adm["admit_batch"] or 0) + 1
        assert adm["next_fails"] in ("rate", "ram", "bound")


def test_the_rate_falls_with_b_where_the_search_assumes_it():
    """The search bisects on per-agent tok/s falling with B: held on every B up to the RAM edge."""
    for policy in ("static", "lru"):
        w = Workload(context_tokens=2048, cache_auto=True, cache_policy=policy)
        p = plan(MODEL, BOX, w, routing_from_spec("zipf:0.9", MODEL), list(range(1, 80)))
        rate = p.per_agent_tok_s[p.fits_in_memory]
        assert rate.size > 10 and np.all(np.diff(rate) <= 1e-12 * rate[:-1]), policy
