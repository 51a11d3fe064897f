"""The one step model (moeroof.models.step) against hand arithmetic, the engine-term formula,
the exchange's byte count, and monotonicity properties over random boxes (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeroof.data.presets import Hardware, MoEModel, load_hardware, load_model
from moeroof.models import step
from moeroof.models.plan import RoutingProbabilities, Workload, plan
from moeroof.models.step import (
    RANK_TERMS,
    TERMS,
    MissingField,
    RankWork,
    combine,
    evaluate,
    fabric_bytes_per_step,
    rank_terms,
)

# A toy box whose numbers make the arithmetic easy to do by hand.
BW_MEM = 100e9
FLOPS = 2e12
SSD_SIZES = (4096.0, 8e6)
SSD_BW = (0.05e9, 5e9)
LINK = 10e9


def toy_hw(**kw) -> Hardware:
    base = dict(
        name="toybox",
        ram_bytes=256e9,
        bw_mem_bytes_per_s=BW_MEM,
        flops_per_s=FLOPS,
        ssd_read_size_bytes=SSD_SIZES,
        bw_ssd_bytes_per_s=SSD_BW,
        bw_link_bytes_per_s=LINK,
    )
    base.update(kw)
    return Hardware(**base)


def toy_model(**kw) -> MoEModel:
    base = dict(
        name="toy",
        experts=16,
        top_k=2,
        moe_layers=4,
        expert_bytes=1e6,
        non_routed_bytes=1e8,
        kv_bytes_per_token=1e3,
        flops_per_token=1e9,
        hidden_size=1024,
        activation_bytes=2.0,
    )
    base.update(kw)
    return MoEModel(**base)


# ----------------------------------------------------------------------------- rank_terms


def test_rank_terms_match_hand_arithmetic_at_the_curves_end_points():
    hw = toy_hw(engine_seconds_per_step=0.003, engine_seconds_per_agent_token=0.0005)
    batch = np.array([1.0, 4.0, 16.0])
    work = RankWork(
        ssd_bytes=np.array([5e9, 10e9, 2.5e9]),
        mem_bytes=np.array([200e9, 100e9, 50e9]),
        flops=np.array([4e12, 1e12, 0.0]),
        agent_tokens=batch,
        read_size_bytes=8e6,  # the curve's last point: 5 GB/s
        ssd_slowdown=np.array([1.0, 2.0, 1.0]),
    )
    t = rank_terms(hw, work)
    assert set(t) == set(RANK_TERMS)
    np.testing.assert_allclose(t["ssd"], [1.0, 4.0, 0.5])  # 5e9/5e9, 10e9/5e9·2, 2.5e9/5e9
    np.testing.assert_allclose(t["memory"], [2.0, 1.0, 0.5])
    np.testing.assert_allclose(t["compute"], [2.0, 0.5, 0.0])
    np.testing.assert_allclose(t["engine"], [0.003 + 0.0005, 0.003 + 0.002, 0.003 + 0.008])


@pytest.mark.parametrize(
    "read_size,bw",
    [
        (4096.0, 0.05e9),  # first point
        (1024.0, 0.05e9),  # clamped below
        (1e9, 5e9),  # clamped above
        (np.sqrt(4096.0 * 8e6), np.sqrt(0.05e9 * 5e9)),  # log-log midpoint: geometric means
    ],
)
def test_rank_terms_ssd_uses_the_log_log_bandwidth_at_the_read_size(read_size, bw):
    work = RankWork(ssd_bytes=1e9, mem_bytes=0.0, flops=0.0, agent_tokens=1.0, read_size_bytes=read_size)
    assert rank_terms(toy_hw(), work)["ssd"] == pytest.approx(1e9 / bw, rel=1e-9)


# ----------------------------------------------------------------------------- combine


def test_combine_max_and_sum_and_the_bound_name():
    terms = {
        "ssd": np.array([3.0, 1.0, 0.0, 0.2]),
        "memory": np.array([1.0, 2.0, 0.0, 0.1]),
        "compute": np.array([0.5, 0.5, 0.7, 0.3]),
        "engine": np.array([0.0, 0.0, 0.1, 0.4]),
    }
    stack = np.stack([terms[k] for k in RANK_TERMS])
    secs, codes = combine(terms, "max")
    np.testing.assert_allclose(secs, stack.max(axis=0))
    assert [TERMS[c] for c in codes] == ["ssd", "memory", "compute", "engine"]
    secs, codes = combine(terms, "sum")
    np.testing.assert_allclose(secs, [4.5, 3.5, 0.8, 1.0])
    # the bound is the largest term under both overlaps
    assert [TERMS[c] for c in codes] == ["ssd", "memory", "compute", "engine"]


@pytest.mark.parametrize(
    "tied,expected",
    [
        (("ssd", "memory"), "ssd"),
        (("memory", "compute"), "memory"),
        (("compute", "engine"), "compute"),
        (("ssd", "engine"), "ssd"),
        (("memory", "compute", "engine"), "memory"),
    ],
)
@pytest.mark.parametrize("overlap", ["max", "sum"])
def test_combine_breaks_ties_in_terms_order(tied, expected, overlap):
    terms = {k: np.array([2.0 if k in tied else 1.0]) for k in RANK_TERMS}
    # insertion order of the mapping reversed: the tie must still follow TERMS
    terms = dict(reversed(list(terms.items())))
    _, codes = combine(terms, overlap)
    assert TERMS[int(codes[0])] == expected


def test_combine_rejects_an_unknown_overlap():
    with pytest.raises(ValueError, match="overlap"):
        combine({"ssd": np.array([1.0])}, "mean")


# ----------------------------------------------------------------------------- evaluate


def three_ranks():
    """Three ranks of speeds 1, 0.5, 0.8 over two batch sizes, terms chosen by hand."""
    rs = 8e6  # 5 GB/s
    works = [
        # rank 0: ssd 1 s / memory 0.5 s / compute 0.25 s at B=1; ssd 0.2 / memory 1.0 / compute 0.5 at B=2
        RankWork(np.array([5e9, 1e9]), np.array([50e9, 100e9]), np.array([0.5e12, 1e12]), np.array([1.0, 2.0]), rs),
        # rank 1 (half speed): ssd 0.4 / memory 0.3 / compute 0.1; ssd 0.1 / memory 0.6 / compute 0.2
        RankWork(
            np.array([2e9, 0.5e9]),
            np.array([30e9, 60e9]),
            np.array([0.2e12, 0.4e12]),
            np.array([1.0, 2.0]),
            rs,
            speed=0.5,
        ),
        # rank 2 (0.8): ssd 0.6 / memory 0.2 / compute 0.05; ssd 0.3 / memory 0.4 / compute 0.1
        RankWork(
            np.array([3e9, 1.5e9]),
            np.array([20e9, 40e9]),
            np.array([0.1e12, 0.2e12]),
            np.array([1.0, 2.0]),
            rs,
            speed=0.8,
        ),
    ]
    hand = np.array(
        [
            [[1.0, 0.2], [0.5, 1.0], [0.25, 0.5]],
            [[0.4, 0.1], [0.3, 0.6], [0.1, 0.2]],
            [[0.6, 0.3], [0.2, 0.4], [0.05, 0.1]],
        ]
    )  # (rank, term ssd/memory/compute, B)
    speeds = np.array([1.0, 0.5, 0.8])
    return works, hand, speeds


@pytest.mark.parametrize("overlap", ["max", "sum"])
def test_evaluate_is_the_slowest_rank_at_its_speed(overlap):
    works, hand, speeds = three_ranks()
    s = evaluate(toy_hw(), works, overlap=overlap)
    per = hand.max(axis=1) if overlap == "max" else hand.sum(axis=1)  # engine terms are 0
    rank_s = per / speeds[:, None]
    np.testing.assert_allclose(s.rank_seconds, rank_s)
    np.testing.assert_allclose(s.step_seconds, rank_s.max(axis=0))
    np.testing.assert_array_equal(s.slowest_rank, rank_s.argmax(axis=0))
    assert s.ranks == 3
    np.testing.assert_allclose(s.fabric_seconds, 0.0)
    # the bound: the slowest rank's largest term
    names = ["ssd", "memory", "compute"]
    expect = tuple(names[int(hand[r, :, j].argmax())] for j, r in enumerate(rank_s.argmax(axis=0)))
    assert s.bound == expect
    for r in range(3):
        assert s.rank_bound[r] == tuple(names[int(i)] for i in hand[r].argmax(axis=0))
    # terms are reported at full speed
    np.testing.assert_allclose(s.terms["ssd"], hand[:, 0, :])
    np.testing.assert_allclose(s.terms["memory"], hand[:, 1, :])


def test_evaluate_speed_changes_which_rank_is_slowest():
    works, hand, _ = three_ranks()
    # B=1 at max overlap: rank 0 takes 1.0 s, rank 1 0.4/0.5 = 0.8 s, rank 2 0.6/0.8 = 0.75 s
    s = evaluate(toy_hw(), works)
    assert int(s.slowest_rank[0]) == 0
    # rank 1 at speed 0.25: 1.6 s and it binds
    slow = [works[0], replace(works[1], speed=0.25), works[2]]
    s2 = evaluate(toy_hw(), slow)
    assert int(s2.slowest_rank[0]) == 1
    assert s2.step_seconds[0] == pytest.approx(0.4 / 0.25)


@pytest.mark.parametrize("overlap", ["max", "sum"])
@pytest.mark.parametrize("fabric_s", [0.1, 0.9, 1.5, 3.0])
def test_evaluate_fabric_overlapped_or_serial(overlap, fabric_s):
    works, hand, speeds = three_ranks()
    per = hand.max(axis=1) if overlap == "max" else hand.sum(axis=1)
    rank_s = per / speeds[:, None]
    worst = rank_s.max(axis=0)
    slow = rank_s.argmax(axis=0)
    largest_term = np.array([hand[r, :, j].max() / speeds[r] for j, r in enumerate(slow)])
    fb = fabric_s * LINK
    s = evaluate(toy_hw(), works, overlap=overlap, fabric_bytes=fb, fabric_overlapped=True)
    np.testing.assert_allclose(s.fabric_seconds, fabric_s)
    np.testing.assert_allclose(s.step_seconds, np.maximum(worst, fabric_s))
    assert s.fabric_overlapped
    for j in range(2):
        assert (s.bound[j] == "fabric") == (fabric_s > worst[j])
    s = evaluate(toy_hw(), works, overlap=overlap, fabric_bytes=fb, fabric_overlapped=False)
    np.testing.assert_allclose(s.step_seconds, worst + fabric_s)
    assert not s.fabric_overlapped
    for j in range(2):  # serial: the exchange against the slowest rank's largest term
        assert (s.bound[j] == "fabric") == (fabric_s > largest_term[j])


def test_evaluate_rejects_no_ranks_and_bad_speeds():
    works, _, _ = three_ranks()
    with pytest.raises(ValueError):
        evaluate(toy_hw(), [])
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="speed"):
            evaluate(toy_hw(), [works[0], replace(works[1], speed=bad)])


# ----------------------------------------------------------------------------- engine terms


C0, C1 = 0.5, 0.01  # seconds per step, seconds per agent-token
BATCH = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 1024])


def test_engine_terms_give_b_over_c0_plus_c1_b():
    hw = toy_hw(engine_seconds_per_step=C0, engine_seconds_per_agent_token=C1)
    b = BATCH.astype(float)
    # every roofline term far below the engine: the engine binds at every B
    work = RankWork(b * 1e3, b * 1e3, b * 1e3, b, 8e6)
    s = evaluate(hw, [work])
    assert set(s.bound) == {"engine"}
    net = b / s.step_seconds
    np.testing.assert_allclose(net, b / (C0 + C1 * b), rtol=1e-12)
    assert np.all(np.diff(net) > 0)
    assert np.all(net < 1 / C1)
    assert net[-1] > 0.95 / C1  # B = 1024: c0 / (c1·B) ≈ 5 % short of 1/c1


def test_engine_terms_through_plan_on_a_toy_model():
    """plan's net tok/s with a dominating engine cost is the same formula, and the provenance
    keeps the engine terms as inputs."""
    model = toy_model()
    hw = toy_hw(engine_seconds_per_step=C0, engine_seconds_per_agent_token=C1)
    k, e = model.top_k, model.experts
    routing = RoutingProbabilities(np.full((1, e), k / e), "uniform", "assumed")
    p = plan(model, hw, Workload(context_tokens=16, cache_policy="static"), routing, BATCH)
    assert set(p.bound) == {"engine"}
    np.testing.assert_allclose(p.net_tok_s, BATCH / (C0 + C1 * BATCH), rtol=1e-12)
    assert np.all(np.diff(p.net_tok_s) > 0)
    assert {"hardware.engine_seconds_per_step", "hardware.engine_seconds_per_agent_token"} <= set(
        p.provenance["inputs"]
    )


# ----------------------------------------------------------------------------- fabric bytes


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_fabric_bytes_per_step_formula(ranks):
    m = toy_model(moe_layers=7, hidden_size=3000, activation_bytes=2.0)
    b = np.array([1, 3, 16])
    want = 2 * b * 7 * 3000 * 2.0 * (ranks - 1) / ranks
    np.testing.assert_allclose(fabric_bytes_per_step(m, b, ranks), want)


def test_fabric_bytes_on_one_rank_are_zero_even_without_hidden_size():
    m = toy_model(hidden_size=None)
    np.testing.assert_array_equal(fabric_bytes_per_step(m, [1, 8], 1), [0.0, 0.0])


@pytest.mark.parametrize("hidden", [None, 0])
def test_fabric_needs_hidden_size(hidden):
    m = toy_model(hidden_size=hidden)
    with pytest.raises(MissingField) as info:
        fabric_bytes_per_step(m, [8], 2)
    assert info.value.field == "hidden_size" and info.value.kind == "model"
    assert "hidden_size" in str(info.value)


def test_fabric_needs_the_link_bandwidth():
    works, _, _ = three_ranks()
    hw = toy_hw(bw_link_bytes_per_s=None)
    with pytest.raises(MissingField) as info:
        evaluate(hw, works, fabric_bytes=1e6)
    assert info.value.field == "bw_link_bytes_per_s" and info.value.kind == "hardware"
    # no exchange: no link needed
    assert evaluate(hw, works, fabric_bytes=0.0).fabric_seconds.max() == 0.0


def test_plan_with_two_ranks_raises_missing_field_for_either_preset():
    model = toy_model()
    routing = RoutingProbabilities(np.full((1, 16), 2 / 16), "uniform", "assumed")
    w = Workload(context_tokens=16, ranks=2, cache_policy="static")
    with pytest.raises(MissingField, match="hidden_size"):
        plan(replace(model, hidden_size=None), toy_hw(), w, routing, [1, 4])
    with pytest.raises(MissingField, match="bw_link"):
        plan(model, toy_hw(bw_link_bytes_per_s=None), w, routing, [1, 4])
    # one rank needs neither
    plan(replace(model, hidden_size=None), toy_hw(bw_link_bytes_per_s=None), Workload(context_tokens=16), routing, [4])


def test_shipped_presets_two_ranks_fabric_matches_the_formula():
    m, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    b = np.array([1.0, 8.0])
    want = 2 * b * m.moe_layers * m.hidden_size * m.activation_bytes * 0.5
    np.testing.assert_allclose(fabric_bytes_per_step(m, b, 2), want)
    s = evaluate(hw, [RankWork(0.0, 0.0, 0.0, b, 8e6)] * 2, fabric_bytes=want)
    np.testing.assert_allclose(s.fabric_seconds, want / hw.bw_link_bytes_per_s)


# ----------------------------------------------------------------------------- properties

pos = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
nonneg = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)


@st.composite
def step_case(draw):
    ranks = draw(st.integers(1, 3))
    nb = draw(st.integers(1, 3))
    works = []
    for _ in range(ranks):
        arr = lambda: np.array(draw(st.lists(nonneg, min_size=nb, max_size=nb))) * 1e9  # noqa: E731
        works.append(
            RankWork(
                ssd_bytes=arr(),
                mem_bytes=arr(),
                flops=arr() * 100,
                agent_tokens=np.array(draw(st.lists(st.integers(1, 512), min_size=nb, max_size=nb)), dtype=float),
                read_size_bytes=draw(st.sampled_from([4096.0, 65536.0, 1e6, 8e6, 2e7])),
                ssd_slowdown=draw(st.floats(1.0, 4.0)),
                speed=draw(st.floats(0.1, 1.0)),
            )
        )
    hw = toy_hw(
        bw_mem_bytes_per_s=draw(pos) * 1e9,
        flops_per_s=draw(pos) * 1e12,
        bw_ssd_bytes_per_s=(draw(pos) * 1e8, draw(pos) * 1e9),
        bw_link_bytes_per_s=draw(pos) * 1e9,
        engine_seconds_per_step=draw(nonneg) * 1e-3,
        engine_seconds_per_agent_token=draw(nonneg) * 1e-5,
    )
    fabric = draw(nonneg) * 1e8 if ranks > 1 else 0.0
    kw = dict(
        overlap=draw(st.sampled_from(step.OVERLAPS)),
        fabric_bytes=fabric,
        fabric_overlapped=draw(st.booleans()),
    )
    return hw, works, kw


FASTER = {
    "bw_mem": lambda h: replace(h, bw_mem_bytes_per_s=2 * h.bw_mem_bytes_per_s),
    "flops": lambda h: replace(h, flops_per_s=2 * h.flops_per_s),
    "bw_ssd": lambda h: replace(h, bw_ssd_bytes_per_s=tuple(2 * x for x in h.bw_ssd_bytes_per_s)),
    "bw_link": lambda h: replace(h, bw_link_bytes_per_s=2 * h.bw_link_bytes_per_s),
}


@settings(max_examples=60, deadline=None)
@given(case=step_case(), which=st.sampled_from(sorted(FASTER)))
def test_doubling_a_bandwidth_never_lengthens_a_step(case, which):
    hw, works, kw = case
    before = evaluate(hw, works, **kw).step_seconds
    after = evaluate(FASTER[which](hw), works, **kw).step_seconds
    assert np.all(after <= before * (1 + 1e-12))


@settings(max_examples=60, deadline=None)
@given(case=step_case(), data=st.data())
def test_halving_a_ranks_speed_never_shortens_a_step(case, data):
    hw, works, kw = case
    r = data.draw(st.integers(0, len(works) - 1))
    slowed = list(works)
    slowed[r] = replace(works[r], speed=works[r].speed / 2)
    before = evaluate(hw, works, **kw)
    after = evaluate(hw, slowed, **kw)
    assert np.all(after.step_seconds >= before.step_seconds * (1 - 1e-12))
    # and the slowed rank's own seconds exactly double
    np.testing.assert_allclose(after.rank_seconds[r], 2 * before.rank_seconds[r])


@settings(max_examples=25, deadline=None)
@given(ranks=st.integers(1, 600), batches=st.integers(1, 3), slow=st.data())
def test_evaluate_takes_any_number_of_ranks(ranks, batches, slow):
    """Any number of ranks is one step, its slowest rank the one given the most work: the terms'
    common shape was np.broadcast over every rank's four terms, which takes at most 64 arrays, so
    ``plan --ranks 17`` (and up) failed with numpy's 'Need at least 0 and at most 64 array objects'."""
    which = slow.draw(st.integers(0, ranks - 1))
    b = np.arange(1.0, batches + 1)
    works = [RankWork(b * (2e9 if r == which else 1e9), b * 1e9, b * 1e9, b, 8e6) for r in range(ranks)]
    s = evaluate(toy_hw(), works, fabric_bytes=0.0)
    assert s.ranks == ranks and s.rank_seconds.shape == (ranks, batches)
    assert (s.slowest_rank == which).all()
