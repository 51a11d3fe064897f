"""Tests for moeroof.models.partition: EPLB-equivalent LPT, exhaustive optima, the seed 003 histogram,
the weighted and bytes partitions, the per-rank step model, and the split_report contract."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest

from conftest import seeded
from moeroof.core.errors import ParameterError
from moeroof.core.paths import DATA_DIR
from moeroof.core.units import GiB
from moeroof.data.io import InputError, read_histogram
from moeroof.data.presets import load_hardware, load_model
from moeroof.models import partition as P
from moeroof.models.plan import Workload, plan, routing_from_spec
from moeroof.models.split import split_plan, split_report
from moeroof.models.step import MissingField

SUMMED = DATA_DIR / "histograms" / "glm5-seed003-summed.csv"
PER_LAYER = DATA_DIR / "histograms" / "glm5-seed003-per-layer.csv"


def eplb_balanced_packing_reference(weight, num_packs):
    """A straightforward mirror of DeepSeek EPLB's ``balanced_packing`` (deepseek-ai/EPLB,
    eplb.py) for one layer, in plain Python: items by weight descending; each goes to the pack
    with the smallest weight among packs holding fewer than n/m items — Python's ``min`` keeps
    the first, i.e. lowest-index, pack on ties; with one item per pack, the identity. EPLB's
    torch sort does not fix the order of equal weights; this uses a stable sort (ascending id
    among equals), as moeroof does — the pack loads do not depend on that choice."""
    n = len(weight)
    assert n % num_packs == 0
    per_pack = n // num_packs
    if per_pack == 1:
        return list(range(n))
    order = sorted(range(n), key=lambda i: -weight[i])
    pack_weights = [0.0] * num_packs
    pack_items = [0] * num_packs
    out = [-1] * n
    for item in order:
        pack = min((p for p in range(num_packs) if pack_items[p] < per_pack), key=pack_weights.__getitem__)
        out[item] = pack
        pack_weights[pack] += weight[item]
        pack_items[pack] += 1
    return out


# ----------------------------------------------------------------------------- LPT


@pytest.mark.parametrize("n,m", [(8, 2), (12, 3), (12, 4), (288, 2), (288, 8), (256, 16), (5, 5)])
def test_lpt_matches_eplb_reference(n, m):
    rng = seeded(f"eplb{n}-{m}")
    for trial in range(20):
        # integer counts with many ties (as firing histograms have), and continuous weights
        w = rng.integers(1, 30, size=n).astype(float) if trial % 2 else rng.random(n) * 100
        got = P.balanced_packing(w, m)
        assert got.tolist() == eplb_balanced_packing_reference(w.tolist(), m)
        assert np.all(np.bincount(got, minlength=m) == n // m)


def test_lpt_with_capacities_matches_a_first_minimum_scan():
    """Unequal capacities (some full early, some zero) and tied weights: each item goes to the
    first rank, in rank order, with room and the least load — scanned here item by item."""
    rng = seeded("lpt-capacity")
    for trial in range(40):
        m = int(rng.integers(2, 6))
        n = int(rng.integers(m, 40))
        cap = rng.multinomial(n, np.ones(m) / m) + rng.integers(0, 2, size=m)
        cap[rng.integers(m)] = 0 if trial % 3 == 0 and cap.sum() - cap.max() >= n else cap[0]
        if cap.sum() < n:
            cap[0] += n - cap.sum()
        w = rng.integers(0, 6, size=n).astype(float) if trial % 2 else rng.random(n)
        loads, room, want = [0.0] * m, list(cap), [-1] * n
        for i in sorted(range(n), key=lambda j: (-w[j], j)):
            p = min((q for q in range(m) if room[q] > 0), key=lambda q: (loads[q], q))
            want[i] = p
            loads[p] += w[i]
            room[p] -= 1
        assert P.balanced_packing(w, m, capacity=cap).tolist() == want


def test_lpt_pack_loads_do_not_depend_on_tie_order():
    # EPLB's torch sort may order equal weights differently; the loads must not change
    w = np.array([5, 5, 5, 3, 3, 2, 2, 2, 1, 1, 1, 1], dtype=float)
    a = P.balanced_packing(w, 3)
    perm = seeded("ties").permutation(w.size)
    b = P.balanced_packing(w[perm], 3)
    assert sorted(np.bincount(a, w, 3)) == sorted(np.bincount(b, w[perm], 3))


def _all_labels(n, m):
    return np.array(list(itertools.product(range(m), repeat=n)), dtype=np.int64)


def _makespans(labels, w, m):
    onehot = labels[:, :, None] == np.arange(m)[None, None, :]
    return (onehot * w[None, :, None]).sum(axis=1).max(axis=1), onehot.sum(axis=1)


@pytest.mark.parametrize("m", [2, 3])
def test_lpt_unconstrained_within_graham_bound(m):
    # Graham 1969: LPT makespan <= (4/3 - 1/(3m)) OPT on identical machines (no cardinality)
    rng = seeded(f"graham{m}")
    n = 8 if m == 2 else 7
    labels = _all_labels(n, m)
    bound = 4 / 3 - 1 / (3 * m)
    worst = 1.0
    for _ in range(40):
        w = rng.random(n)
        a = P.balanced_packing(w, m, capacity=[n] * m)
        got = np.bincount(a, w, m).max()
        opt = _makespans(labels, w, m)[0].min()
        assert got <= bound * opt + 1e-12
        worst = max(worst, got / opt)
    assert worst < bound


@pytest.mark.parametrize("m,k", [(2, 2), (3, 2), (2, 3), (3, 3)])
def test_lpt_equal_cardinality_against_exhaustive(m, k):
    """Equal cardinality, k = n/m items per rank, against the exhaustive equal-cardinality optimum.

    Bounds tested: k = 2 — the greedy pairs the i-th largest with the i-th smallest, which is
    optimal (ratio 1); k = 3 — LPT restricted to machines with fewer than 3 jobs is within
    4/3 − 1/(3m) of the optimum (Kellerer & Woeginger 1993, "A tight bound for 3-partitioning",
    Discrete Appl. Math. 45). Larger k are not bounded here (for a related "layered" LPT the tight
    ratio is 2 − 1/m, Wu & Yao 2007).
    """
    rng = seeded(f"card{m}{k}")
    n = m * k
    labels = _all_labels(n, m)
    spans, counts = _makespans(labels, np.ones(n), m)
    feasible = labels[np.all(counts == k, axis=1)]
    bound = 1.0 if k == 2 else 4 / 3 - 1 / (3 * m)
    for trial in range(40):
        w = rng.integers(1, 50, size=n).astype(float) if trial % 2 else rng.random(n)
        a = P.balanced_packing(w, m)
        assert np.all(np.bincount(a, minlength=m) == k)
        got = np.bincount(a, w, m).max()
        opt = _makespans(feasible, w, m)[0].min()
        assert got <= bound * opt * (1 + 1e-12)


def test_capacities_and_id_split():
    assert P.capacities(10, ranks=3).tolist() == [4, 3, 3]
    assert P.contiguous_split(10, 3).tolist() == [0] * 4 + [1] * 3 + [2] * 3
    assert P.contiguous_split(288, 2).tolist() == [0] * 144 + [1] * 144  # seed 003's 144/144
    a = P.balanced_packing(np.arange(10.0), 3)
    assert np.bincount(a).tolist() == [4, 3, 3]
    assert P.capacities(288, [1.0, 0.5]).tolist() == [192, 96]
    assert P.capacities(4, [1.0, 1000.0]).tolist() == [1, 3]  # every rank keeps an expert
    with pytest.raises(ValueError):
        P.contiguous_split(3, 4)


def test_weighted_equals_lpt_at_equal_speeds_and_follows_speed():
    rng = seeded("weighted")
    w = rng.integers(100, 500, size=48).astype(float)
    assert P.weighted_packing(w, [2.0, 2.0, 2.0]).tolist() == P.balanced_packing(w, 3).tolist()
    a = P.weighted_packing(w, [1.0, 0.5])
    assert np.bincount(a).tolist() == [32, 16]
    loads = np.bincount(a, w)
    # load per unit speed balanced to within one item's weight
    assert abs(loads[0] / 1.0 - loads[1] / 0.5) <= w.max() / 0.5


# ----------------------------------------------------------------------------- seed 003 histogram


def test_seed003_histogram_lpt_vs_id_split():
    """Seed 003 (its own 288-count histogram): LPT 38980 / 38972 rows (1.000×), id split
    39408 / 38544 (1.022×). Our synthetic seed-003-matched histogram: LPT 38915 / 38909
    (1.00008×), id split 39182 / 38642 (1.0069×) — the id split is more even here than in the
    seed (the synthetic per-layer permutations decorrelate id from popularity)."""
    lpt = split_report(SUMMED, 2, "lpt")
    ids = split_report(SUMMED, 2, "id")
    assert lpt["experts_per_rank"] == [144, 144]
    assert lpt["imbalance"] <= 1.001
    assert ids["imbalance"] > lpt["imbalance"]
    assert lpt["load_rows"] == [38915, 38909]
    assert ids["load_rows"] == [39182, 38642]
    assert sum(lpt["load_rows"]) == int(read_histogram(SUMMED).counts.sum())
    assert any("summed over layers" in n and "per-layer skew is hidden" in n for n in lpt["notes"])


def test_weighted_gives_the_faster_rank_more_experts_and_beats_id():
    # seed 003: the head node is 1.3x to 2.6x slower at identical work; rank 1 at half speed
    kw = dict(cache_gib_per_rank=20.0)
    w = split_report(SUMMED, 2, "weighted", "1,0.5", **kw)
    i = split_report(SUMMED, 2, "id", "1,0.5", **kw)
    assert w["experts_per_rank"][0] > w["experts_per_rank"][1]
    assert w["imbalance_by"]["predicted_seconds"] < i["imbalance_by"]["predicted_seconds"]
    assert max(w["predicted_step_seconds"]) < max(i["predicted_step_seconds"])
    assert w["inputs"]["rank_speed"] == [1.0, 0.5]


@pytest.mark.parametrize(
    "ranks,speed,cache",
    [(2, None, 0.0), (2, None, 20.0), (2, None, 80.0), (2, "1,0.5", 20.0), (3, "1,0.7,0.4", 40.0), (4, None, 10.0)],
)
def test_bytes_never_slower_than_lpt(ranks, speed, cache):
    # the bytes partition searches under the pinned hot set: it is never slower there
    b = split_report(SUMMED, ranks, "bytes", speed, cache_gib_per_rank=cache, cache_policy="static")
    lpt = split_report(SUMMED, ranks, "lpt", speed, cache_gib_per_rank=cache, cache_policy="static")
    assert max(b["predicted_step_seconds"]) <= max(lpt["predicted_step_seconds"]) * (1 + 1e-12)
    assert b["step_seconds"] <= lpt["step_seconds"] * (1 + 1e-12)
    assert len(b["assignment"]) == 288 and set(b["assignment"]) == set(range(ranks))


def test_bytes_per_layer_histogram_and_simulated_cache():
    # a smaller per-layer case: the first 8 layers of the seed-003-matched per-layer histogram
    h = read_histogram(PER_LAYER)
    pi = P.inclusion_from_histogram(h)[:8]
    model, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    kw = dict(batch=8, cache_bytes_per_rank=20 * GiB, rank_speed=[1.0, 0.6], load=h.counts[:8].sum(0))
    a, _ = P.bytes_partition(pi, model, hw, 2, **kw)
    pb = split_plan(a, pi, model, hw, cache_policy="static", **kw)
    pl = split_plan(P.balanced_packing(kw["load"], 2), pi, model, hw, cache_policy="static", **kw)
    assert pb.rank_seconds.max() <= pl.rank_seconds.max() * (1 + 1e-12)
    # a simulated LRU never beats the offline optimum on the same partition, and with no cache
    # every touched expert misses
    lru = split_plan(a, pi, model, hw, cache_policy="lru", **kw)
    opt = split_plan(a, pi, model, hw, cache_policy="belady", **kw)
    assert np.all(lru.missed_pairs >= opt.missed_pairs - 1e-9)
    none = split_plan(a, pi, model, hw, cache_policy="lru", **{**kw, "cache_bytes_per_rank": 0.0})
    np.testing.assert_allclose(none.missed_pairs, none.union_pairs)


# ----------------------------------------------------------------------------- step model


def test_one_rank_matches_roofline_plan():
    model, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    routing = routing_from_spec(str(SUMMED), model)
    for cache in (0.0, 20 * GiB, 80 * GiB):
        for policy in ("static", "lru"):
            ref = plan(model, hw, Workload(context_tokens=512, cache_bytes=cache, cache_policy=policy), routing, [8])
            p = split_plan(
                np.zeros(288, dtype=int),
                routing.pi,
                model,
                hw,
                batch=8,
                cache_bytes_per_rank=cache,
                cache_policy=policy,
                context_tokens=512,
            )
            assert p.step_seconds == pytest.approx(float(ref.step_seconds[0]), rel=1e-12)
            assert p.streamed_bytes[0] == pytest.approx(float(ref.ssd_bytes_per_step[0]), rel=1e-12)


def test_hot_set_fast_path_agrees_with_step_terms():
    """The local search's closed-form swap / move deltas against recomputation through
    roofline.step_terms (split_plan), at a fractional cache size and on per-layer data."""
    rng = seeded("hotset")
    h = read_histogram(PER_LAYER)
    pi = P.inclusion_from_histogram(h)[:5, :40]
    pi = pi / pi.sum(axis=1, keepdims=True) * 2.0
    model, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    model = dataclasses.replace(model, experts=40, top_k=2)
    for cache_experts in (0.0, 3.4, 7.0, 25.0):
        cache = cache_experts * model.moe_layers * model.expert_bytes
        speed = np.array([1.0, 0.7])
        consts = P.RankConstants.build(
            model, hw, batch=8, cache_bytes=cache, context_tokens=512, overlap="max", read_size_bytes=None
        )
        m = 1 - (1 - pi) ** 8
        hs = P.HotSetSearch(m, consts, speed)
        a = rng.permutation(np.repeat([0, 1], 20))
        ref = split_plan(
            a,
            pi,
            model,
            hw,
            batch=8,
            cache_bytes_per_rank=cache,
            rank_speed=speed,
            cache_policy="static",
            context_tokens=512,
        )
        idx = [np.flatnonzero(a == r) for r in (0, 1)]
        st = [hs.rank_state(i) for i in idx]
        for r in (0, 1):
            u, t = st[r][0], st[r][1]
            assert hs.seconds(u, t, r) == pytest.approx(ref.rank_seconds[r], rel=1e-10)
        # every swap of rank 0's item a with rank 1's item b, and every move of a to rank 1
        t_swap = hs.swap_T(st[0][2], st[0][3], m[:, idx[0]], m[:, idx[1]])
        t_move = hs.swap_T(st[0][2], st[0][3], m[:, idx[0]], None)
        t_add = hs.add_T(st[1][2], m[:, idx[0]])
        for ai in range(0, 20, 3):
            rest = np.delete(idx[0], ai)
            assert t_move[ai] == pytest.approx(hs.rank_state(rest)[1], rel=1e-10, abs=1e-12)
            assert t_add[ai] == pytest.approx(hs.rank_state(np.append(idx[1], idx[0][ai]))[1], rel=1e-10, abs=1e-12)
            for bi in range(0, 20, 4):
                new = np.append(rest, idx[1][bi])
                assert t_swap[ai, bi] == pytest.approx(hs.rank_state(new)[1], rel=1e-10, abs=1e-12)


def test_fabric_term_and_overlap():
    model, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    h = read_histogram(SUMMED)
    pi = P.inclusion_from_histogram(h)
    a = P.contiguous_split(288, 2)
    hidden = 4096  # illustrative, overriding the preset's assumed 6144
    on = split_plan(a, pi, model, hw, batch=8, hidden_size=hidden, fabric_overlapped=True)
    off = split_plan(a, pi, model, hw, batch=8, hidden_size=hidden, fabric_overlapped=False)
    expect = 2 * 8 * model.moe_layers * hidden * model.activation_bytes * 0.5
    assert on.remote_share == pytest.approx(0.5)
    assert on.fabric_bytes == pytest.approx(expect)
    assert on.fabric_seconds == pytest.approx(expect / hw.bw_link_bytes_per_s)
    assert off.step_seconds == pytest.approx(on.rank_seconds.max() + on.fabric_seconds)
    assert on.step_seconds == pytest.approx(max(on.rank_seconds.max(), on.fabric_seconds))
    # a model without hidden_size cannot size the exchange: an explicit error, never a silent 0
    with pytest.raises(MissingField, match="hidden_size"):
        split_plan(a, pi, dataclasses.replace(model, hidden_size=None), hw, batch=8)
    with pytest.raises(MissingField, match="bw_link_bytes_per_s"):
        split_plan(a, pi, model, dataclasses.replace(hw, bw_link_bytes_per_s=None), batch=8)
    assert on.ranks == 2 and np.flatnonzero(on.assignment == 1)[0] == 144


# ----------------------------------------------------------------------------- contract and errors


def test_split_report_contract_is_json():
    r = split_report(SUMMED, 2, "bytes", [1, 0.5], batch=8, cache_gib_per_rank=20)
    for key in (
        "assignment",
        "load_rows",
        "imbalance",
        "method",
        "ranks",
        "predicted_step_seconds",
        "inputs",
        "notes",
        "imbalance_by",
        "step_seconds",
        "tok_s",
    ):
        assert key in r
    assert r["method"] == "bytes" and r["ranks"] == 2 and len(r["predicted_step_seconds"]) == 2
    assert r["imbalance"] == pytest.approx(max(r["load_rows"]) / np.mean(r["load_rows"]))
    assert set(r["imbalance_by"]) == {"token_load", "load_per_speed", "union", "streamed_bytes", "predicted_seconds"}
    assert r["inputs"]["cache_gib_per_rank"] == 20.0 and r["inputs"]["batch"] == 8
    json.dumps(r, allow_nan=False)
    # a histogram of another model: id / lpt still partition, weighted / bytes need the model
    other = DATA_DIR / "histograms" / "deepseek-v3-like.csv"
    r = split_report(other, 4, "lpt")
    assert r["imbalance"] < 1.001 and "predicted_step_seconds" not in r
    with pytest.raises(ParameterError, match="^model: ") as err:
        split_report(other, 4, "bytes")
    assert err.value.parameter == "model"


@pytest.mark.parametrize(
    "speed,match",
    [
        ("1", "2 ranks"),
        ([1.0, 2.0, 3.0], "3 speeds for 2 ranks"),
        ("1,0", "positive"),
        ("1,-2", "positive"),
        ("1,fast", "not a number"),
        ([1.0, float("nan")], "positive"),
        ([1.0, True], "not a number"),
        ("", "not a number"),
        (3.0, "comma-separated"),
    ],
)
def test_bad_rank_speed(speed, match):
    # the library names its parameter; the CLI turns it into --rank-speed (tests/test_cli_split.py)
    with pytest.raises(ParameterError, match="^rank_speed: ") as err:
        split_report(SUMMED, 2, "weighted", speed)
    assert err.match(match) and err.value.parameter == "rank_speed"


def test_bad_histogram_and_arguments(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        split_report(tmp_path / "missing.csv", 2, "lpt")
    bad = tmp_path / "bad.csv"
    bad.write_text("layer,expert,count\n0,0,5\n0,1,x\n")
    bad.with_suffix(".json").write_text(
        json.dumps(
            {
                "model": "m",
                "experts": 2,
                "top_k": 1,
                "layers": 1,
                "tokens": 10,
                "source": "test",
                "layers_summed": False,
            }
        )
    )
    with pytest.raises(InputError, match=r"bad\.csv:3: count"):
        split_report(bad, 2, "lpt")
    with pytest.raises(ParameterError, match="^method: "):
        split_report(SUMMED, 2, "random")
    with pytest.raises(ParameterError, match="^ranks: "):
        split_report(SUMMED, 0, "lpt")
    with pytest.raises(ParameterError, match="^ranks: "):
        split_report(SUMMED, 289, "lpt")
