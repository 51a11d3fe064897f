"""Results carry ``to_dict()``: plain JSON-ready Python, the same numbers as the fields."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from moeroof import cachesim as cache
from moeroof.core.results import Result, plain
from moeroof.core.units import GiB
from moeroof.data.presets import load_hardware, load_model
from moeroof.models.plan import Workload, routing_from_spec, step_breakdown
from moeroof.models.split import split_plan


@dataclasses.dataclass(frozen=True)
class Inner(Result):
    x: float
    tags: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Outer(Result):
    arr: np.ndarray
    inner: Inner
    table: dict
    path: Path
    flag: np.bool_


def test_plain_converts_every_kind_and_drops_non_finite():
    o = Outer(np.array([[1, 2], [3, 4]]), Inner(float("nan"), ("a", "b")), {1: np.float32(0.5)}, Path("/x"), np.True_)
    d = o.to_dict()
    assert d == {
        "arr": [[1, 2], [3, 4]],
        "inner": {"x": None, "tags": ["a", "b"]},
        "table": {"1": 0.5},
        "path": "/x",
        "flag": True,
    }
    json.dumps(d, allow_nan=False)
    assert plain(np.int64(3)) == 3 and type(plain(np.int64(3))) is int
    assert plain(math.inf) is None


@pytest.fixture(scope="module")
def pair():
    m, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    r = routing_from_spec("histograms/glm5-seed003-per-layer.csv", m)
    return m, hw, r


def test_step_breakdown_and_split_plan_round_trip_through_json(pair):
    m, hw, r = pair
    b = step_breakdown(m, hw, Workload(cache_bytes=20 * GiB, ranks=2, context_tokens=512), r, [1, 8])
    d = json.loads(json.dumps(b.to_dict(), allow_nan=False))
    np.testing.assert_allclose(d["step"]["step_seconds"], b.step.step_seconds)
    np.testing.assert_allclose(d["step"]["rank_seconds"], b.step.rank_seconds)
    assert d["assignment"] == b.assignment.tolist() and d["cache_policy"] == "lru"
    s = split_plan(b.assignment, r.pi, m, hw, batch=8, cache_bytes_per_rank=20 * GiB, context_tokens=512)
    ds = json.loads(json.dumps(s.to_dict(), allow_nan=False))
    assert ds["step_seconds"] == pytest.approx(float(b.step.step_seconds[1]))
    assert set(ds["terms_seconds"]) == {"ssd", "memory", "compute", "engine"}


def test_cache_result_to_dict():
    topk = np.random.default_rng(0).integers(0, 16, size=(20, 4, 2, 2))
    req = cache.requests_from_trace(topk, 16)
    res = cache.simulate(req, 8, policy="lru")
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert d["hits"] + d["misses"] == d["requests"] == len(req)
    assert d["hit_rate"] == pytest.approx(res.hit_rate)
