"""The compiled kernels of moeroof.kernels.plan and the exact memos of the plan, each
checked bit for bit against the numpy code it replaced (reference copies kept here)."""

from __future__ import annotations

import numpy as np
import pytest

from moeroof.core.units import GiB
from moeroof.data.presets import load_hardware, load_model
from moeroof.fit.plan import PlanKnobs, predict_points
from moeroof.kernels import plan as plan_kernels
from moeroof.models import expert_cache
from moeroof.models import partition as P
from moeroof.models.local_routing import routing_from_knobs
from moeroof.models.plan import Workload, assign_experts, plan, plan_rates, routing_from_spec

# ----------------------------------------------------------------------------- references


def systematic_topk_reference(pi, steps, streams, rng, chunk=None):
    """expert_cache.systematic_topk before the compiled picks (validation dropped)."""
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    h, e = pi.shape
    k = int(round(float(pi[0].sum())))
    keys = steps * h * e
    if chunk is None:
        chunk = expert_cache.order_chunk_steps(steps, streams, h, e, k)
    bg = rng.bit_generator
    if isinstance(bg, np.random.PCG64):
        u_bg = np.random.PCG64()
        u_bg.state = bg.state
        u_bg.advance(keys)
        u_rng = np.random.Generator(u_bg)
    else:
        chunk, u_rng = steps, rng
    out = np.empty((steps, streams, h, k), dtype=np.int32)
    for s0 in range(0, steps, chunk):
        n = min(chunk, steps - s0)
        order = np.argsort(rng.random((n, h, e)), axis=-1)
        p = np.take_along_axis(np.broadcast_to(pi, (n, h, e)), order, axis=-1)
        cs = np.cumsum(p, axis=-1)
        cs *= k / cs[..., -1:]
        rows = (s0 + np.arange(n)).reshape(n, 1) * h + np.arange(h)
        flat = (cs + rows[..., None] * (k + 1.0)).ravel()
        u = u_rng.random((n, streams, h, 1)) + np.arange(k)
        pts = u + rows.reshape(n, 1, h, 1) * (k + 1.0)
        idx = np.searchsorted(flat, pts.ravel(), side="right").reshape(n, streams, h, k)
        row_start = np.arange(n * h).reshape(n, 1, h, 1) * e
        pos = np.minimum(idx - row_start, e - 1)
        out[s0 : s0 + n] = np.take_along_axis(
            np.broadcast_to(order[:, None], (n, streams, h, e)), pos.astype(np.int64), axis=-1
        )
    if u_rng is not rng:
        bg.state = u_bg.state
    return out


def swap_T_reference(hs, v, pos, m_out, m_in):
    """partition.HotSetSearch.swap_T before the compiled gain sums."""
    n_out = m_out.shape[1]
    total = np.zeros(n_out) if m_in is None else np.zeros((n_out, m_in.shape[1]))
    for c, wt in hs._cs():
        if c == 0:
            continue
        vc, vc1, tc = hs._edges(v, c)
        top = pos < c
        t_rem = tc[:, None] - np.where(top, m_out - vc1[:, None], 0.0)
        if m_in is None:
            total = total + wt * t_rem.sum(axis=0)
            continue
        w = np.where(top, vc1[:, None], vc[:, None])
        gain = np.maximum(m_in[:, None, :] - w[:, :, None], 0.0)
        total = total + wt * (t_rem.sum(axis=0)[:, None] + gain.sum(axis=0))
    return hs.scale * total


def _pi(rng, h, e, k, skew):
    w = rng.dirichlet(np.full(e, skew), size=h)
    from moeroof.models.routing import inclusion_probabilities

    return np.stack([inclusion_probabilities(np.log(row + 1e-300), k, log=True) for row in w])


# ----------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("h,n_out,n_in", [(1, 3, 4), (7, 144, 144), (75, 20, 31), (92, 1, 9), (16, 144, 143)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gain_sums_equals_numpy_bit_for_bit(h, n_out, n_in, seed):
    rng = np.random.default_rng(seed)
    m_in = rng.random((h, n_in)) ** 3
    w = rng.random((h, n_out)) ** 3
    w[:, ::3] = 0.0  # ties with m_in = 0 and zero edges, as past the end of a rank's sort
    m_in[:, ::5] = 0.0
    ref = np.maximum(m_in[:, None, :] - w[:, :, None], 0.0).sum(axis=0)
    got = plan_kernels.gain_sums(m_in, w)
    assert got.shape == ref.shape
    assert got.tobytes() == ref.tobytes()


@pytest.mark.parametrize("cache", [0.0, 3.0, 10.5, 200.0])
@pytest.mark.parametrize("seed", [3, 4])
def test_swap_T_equals_the_numpy_reference(cache, seed):
    rng = np.random.default_rng(seed)
    h, e = 12, 64
    m = -np.expm1(8 * np.log1p(-np.clip(_pi(rng, h, e, 4, 0.3), 0.0, 1.0)))

    class Consts:
        layers = 75
        cache_experts = cache

    hs = P.HotSetSearch(m, Consts(), np.ones(2))
    a = rng.permutation(np.arange(e) % 2)
    ir, js = np.flatnonzero(a == 0), np.flatnonzero(a == 1)
    _, _, vr, pr = hs.rank_state(ir)
    for m_in in (m[:, js], None):
        ref = swap_T_reference(hs, vr, pr, m[:, ir], m_in)
        got = hs.swap_T(vr, pr, m[:, ir], m_in)
        assert got.tobytes() == ref.tobytes()


@pytest.mark.parametrize(
    "h,e,k,steps,streams,skew",
    [
        (1, 16, 2, 5, 3, 0.5),
        (4, 64, 8, 40, 8, 0.2),
        (16, 288, 8, 30, 8, 0.4),
        (3, 9, 9, 4, 2, 1.0),
        (2, 50, 1, 60, 1, 0.1),
    ],
)
@pytest.mark.parametrize("seed", [0, 7, 11])
def test_systematic_topk_equals_the_numpy_reference(h, e, k, steps, streams, skew, seed):
    pi = _pi(np.random.default_rng(seed + 100), h, e, k, skew)
    r1, r2 = np.random.default_rng([seed, 5]), np.random.default_rng([seed, 5])
    got = expert_cache.systematic_topk(pi, steps, streams, r1)
    ref = systematic_topk_reference(pi, steps, streams, r2)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert np.array_equal(got, ref)
    assert r1.bit_generator.state == r2.bit_generator.state  # the stream ends where it did


@pytest.mark.parametrize("seed", [0, 1])
def test_systematic_topk_in_chunks_and_with_another_generator_equals_the_reference(monkeypatch, seed):
    pi = _pi(np.random.default_rng(seed), 5, 40, 6, 0.3)
    monkeypatch.setattr(expert_cache, "ORDER_CHUNK_ENTRIES", 5 * 40 * 3)  # 3 steps a chunk
    got = expert_cache.systematic_topk(pi, 20, 4, np.random.default_rng(seed))
    ref = systematic_topk_reference(pi, 20, 4, np.random.default_rng(seed), chunk=3)
    assert np.array_equal(got, ref)
    got = expert_cache.systematic_topk(pi, 20, 4, np.random.Generator(np.random.MT19937(seed)))
    ref = systematic_topk_reference(pi, 20, 4, np.random.Generator(np.random.MT19937(seed)))
    assert np.array_equal(got, ref)


def _picks_reference(flat, u, order, row0, k):
    n, streams, h = u.shape
    e = order.shape[2]
    rows = (row0 + np.arange(n * h)).reshape(n, h)
    pts = (u[..., None] + np.arange(k)) + rows.reshape(n, 1, h, 1) * (k + 1.0)
    idx = np.searchsorted(flat, pts.ravel(), side="right").reshape(n, streams, h, k)
    pos = np.minimum(idx - np.arange(n * h).reshape(n, 1, h, 1) * e, e - 1)
    return np.take_along_axis(np.broadcast_to(order[:, None], (n, streams, h, e)), pos, axis=-1)


@pytest.mark.parametrize("seed", range(6))
def test_systematic_picks_off_the_row_and_out_of_order_equal_numpy(seed):
    # points beyond their own row (u > 1, u < 0) and a row's points out of order: the kernel's
    # fall-backs (the whole-array search, a fresh search in the row) give numpy's index too
    rng = np.random.default_rng(seed)
    n, streams, h, e, k = 3, 5, 2, 7, 3
    cs = np.cumsum(rng.random((n, h, e)), axis=-1)
    cs *= k / cs[..., -1:]
    row0 = int(rng.integers(0, 50))
    rows = row0 + np.arange(n * h).reshape(n, h)
    flat = (cs + rows[..., None] * (k + 1.0)).ravel()
    u = rng.uniform(-0.9, 2.5, size=(n, streams, h))
    u[0] = rng.random((streams, h))  # one step of ordinary uniforms
    order = np.stack([np.stack([rng.permutation(e) for _ in range(h)]) for _ in range(n)])
    got = plan_kernels.systematic_picks(flat, u, order, row0, k)
    assert np.array_equal(got, _picks_reference(flat, u, order, row0, k))


# ----------------------------------------------------------------------------- memos


@pytest.fixture
def glm():
    return load_model("glm-5-nvfp4"), load_hardware("gb10")


def test_rank_cache_memo_gives_the_computed_result_as_fresh_arrays(glm):
    mdl, _ = glm
    pi = routing_from_spec("zipf:0.9", mdl).pi
    a = P.balanced_packing(pi.sum(axis=0), 2)
    args = (pi, np.array([1, 8]), np.array([20.5, 7.0]), a)
    expert_cache.clear_memo()
    fresh = expert_cache.rank_cache_uncached(
        np.atleast_2d(pi), args[1], args[2], a, "lru", "global", 0, None, None, None
    )
    first = expert_cache.rank_cache(*args, policy="lru")
    first.misses_per_layer[:] = -1.0  # a caller writing into its copy changes nothing stored
    again = expert_cache.rank_cache(*args, policy="lru")
    for f in ("union_per_layer", "misses_per_layer", "token_misses_per_layer", "picks_per_token"):
        assert getattr(again, f).tobytes() == getattr(fresh, f).tobytes()
    other = expert_cache.rank_cache(pi, np.array([1, 8]), np.array([20.5, 7.0]), a, policy="lru", seed=1)
    assert not np.array_equal(other.misses_per_layer, again.misses_per_layer)  # the seed is in the key
    static = expert_cache.rank_cache(*args, policy="static")
    assert not np.array_equal(static.misses_per_layer, again.misses_per_layer)


def test_assign_experts_memo_returns_the_packing_each_time(glm):
    mdl, hw = glm
    route = routing_from_spec("zipf:1.1", mdl)
    for part, speed in (("lpt", None), ("weighted", (1.0, 0.6))):
        w = Workload(ranks=2, partition=part, rank_speed=speed)
        ref = (
            P.balanced_packing(route.expert_load, 2)
            if part == "lpt"
            else P.weighted_packing(route.expert_load, w.speeds)
        )
        a1 = assign_experts(mdl, hw, w, route, [8])
        a1[:] = 0
        assert np.array_equal(assign_experts(mdl, hw, w, route, [8]), ref)


@pytest.mark.parametrize("ranks,policy,cache", [(1, "lru", 20.0), (2, "lru", 40.0), (2, "static", 20.0)])
def test_plan_rates_are_plans_numbers(glm, ranks, policy, cache):
    mdl, hw = glm
    route = routing_from_knobs(mdl, "dirichlet", 0.3, 0.2, streams=16)
    w = Workload(context_tokens=512, cache_bytes=cache * GiB, ranks=ranks, cache_policy=policy)
    p = plan(mdl, hw, w, route, [1, 8, 16, 32])
    b, net, hit = plan_rates(mdl, hw, w, route, [1, 8, 16, 32])
    assert np.array_equal(b, p.batch)
    assert net.tobytes() == p.net_tok_s.tobytes()
    assert hit.tobytes() == p.cache_hit_rate.tobytes()


def test_predict_points_matches_plan_row_by_row(glm):
    from moeroof.studies.expert_split import tok_s_points

    mdl, hw = glm
    route = routing_from_knobs(mdl, "dirichlet", 0.3, 0.2, streams=32)
    pts = tok_s_points()
    k = PlanKnobs(engine_seconds_per_step=0.2, engine_seconds_per_agent_token=0.01, ssd_scale=0.7)
    net, hit = predict_points(pts, mdl, hw, route, k, context_tokens=512)
    from moeroof.fit.plan import box_with_knobs

    for i, p in enumerate(pts):
        w = Workload(context_tokens=512, cache_bytes=p.cache_gib * GiB, ranks=p.ranks, cache_policy=p.policy)
        res = plan(mdl, box_with_knobs(hw, k), w, route, [p.batch])
        assert net[i] == res.net_tok_s[0] and hit[i] == res.cache_hit_rate[0]


def _pick_counts_reference(topk, own):
    """simulate_ratios' counts before the kernel: np.unique over the owned picks' keys."""
    h, e = topk.shape[2], own.size
    mine = own[np.clip(topk, 0, None)] & (topk >= 0)
    keys = (np.arange(topk.shape[0])[:, None, None, None] * (h * e) + np.arange(h)[None, None, :, None] * e + topk)[
        mine
    ]
    return np.unique(keys, return_counts=True)[1]


@pytest.mark.parametrize(
    "shape,e",
    [
        ((30, 8, 4, 3), 40),
        ((5, 1, 1, 1), 3),
        ((12, 64, 16, 8), 288),
        ((3, 2, 2, 2), 5),
        # few distinct picks against E (sorted, not scanned), and both ways within one trace
        ((40, 1, 6, 8), 256),
        ((20, 5, 4, 8), 288),
    ],
)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int16])
def test_pick_counts_are_uniques_counts(shape, e, dtype):
    rng = np.random.default_rng(e)
    topk = rng.integers(-1, e, size=shape).astype(dtype)  # -1: a finished stream's padding
    for own in (np.ones(e, dtype=bool), rng.random(e) < 0.5, np.zeros(e, dtype=bool)):
        got = plan_kernels.pick_counts(topk, own)
        ref = _pick_counts_reference(topk, own)
        assert got.dtype == ref.dtype and np.array_equal(got, ref)


def test_systematic_flat_is_the_numpy_expression():
    for seed in range(4):
        rng = np.random.default_rng(seed)
        h, e, k, n, row0 = 3 + seed, 20 + 7 * seed, 1 + seed, 5, 13 * seed
        pi = _pi(rng, h, e, k, 0.3)
        order = np.argsort(rng.random((n, h, e)), axis=-1)
        p = np.take_along_axis(np.broadcast_to(pi, (n, h, e)), order, axis=-1)
        cs = np.cumsum(p, axis=-1)
        cs *= k / cs[..., -1:]
        rows = row0 + np.arange(n * h).reshape(n, h)
        ref = (cs + rows[..., None] * (k + 1.0)).ravel()
        assert plan_kernels.systematic_flat(pi, order, row0, k).tobytes() == ref.tobytes()


@pytest.mark.parametrize("batch,cache", [(1, 5.0), (16, 20.0), (64, 100.0)])
def test_simulate_ratios_as_with_the_numpy_counts(monkeypatch, batch, cache):
    mdl = load_model("glm-5-nvfp4")
    pi = routing_from_spec("zipf:0.8", mdl).pi
    a = P.balanced_packing(pi.sum(axis=0), 2)
    own = a == 1
    topk = expert_cache.systematic_topk(pi, 40, batch, np.random.default_rng(batch))
    args = (topk, pi.shape[1], own, a, 1, cache, "lru", "global", 10)
    got = expert_cache.simulate_ratios(*args)
    monkeypatch.setattr(plan_kernels, "pick_counts", _pick_counts_reference)
    assert got == expert_cache.simulate_ratios(*args)


# ----------------------------------------------------------------------------- edges and errors


@pytest.mark.parametrize("h,n_out,n_in", [(5, 7, 130), (40, 3, 67), (2, 2, 9)])
def test_gain_sums_with_nan_inf_and_signed_zeros_equal_numpy_but_for_signs(h, n_out, n_in):
    # NaN inputs, inf − inf (NaN) and -0.0 gains: every nonzero number is numpy's bit for bit, the
    # NaNs and zeros are where numpy's are (their signs: the next two tests)
    rng = np.random.default_rng(h)
    m_in, w = rng.random((h, n_in)) - 0.5, rng.random((h, n_out)) - 0.5
    m_in[rng.random(m_in.shape) < 0.03] = np.nan
    m_in[rng.random(m_in.shape) < 0.05] = np.inf
    w[rng.random(w.shape) < 0.05] = np.inf
    m_in[:, ::4], w[:, ::3] = -0.0, 0.0
    m_in[0, 1] = np.nan
    with np.errstate(invalid="ignore"):
        ref = np.maximum(m_in[:, None, :] - w[:, :, None], 0.0).sum(axis=0)
    got = plan_kernels.gain_sums(m_in, w)
    nan = np.isnan(ref)
    assert nan.any() and (ref == 0.0).any()
    assert np.array_equal(got, ref, equal_nan=True)
    assert got[~nan & (ref != 0.0)].tobytes() == ref[~nan & (ref != 0.0)].tobytes()


@pytest.mark.parametrize("n_in", [1, 16, 70, 200])
def test_gain_sums_keep_negative_zero_gains(n_in):
    # -0.0 - 0.0 = -0.0, a gain kept as it is (maximum's first argument, as the compiled kernel
    # took it; numpy's maximum gives +0.0): a sum of them is -0.0, with +0.0 where any gain is
    m_in = np.full((3, n_in), -0.0)
    got = plan_kernels.gain_sums(m_in, np.array([[0.0, 0.0], [0.0, -0.0], [0.0, 0.0]]))
    assert (got == 0.0).all() and np.signbit(got[0]).all() and not np.signbit(got[1]).any()


@pytest.mark.parametrize("n_in", [1, 16, 70, 200])
def test_gain_sums_where_two_nans_meet_keeps_the_later_one(n_in):
    # +NaN then -NaN gains (and the other way): the sum carries the later gain's NaN, as the
    # compiled kernel always did, whatever the width its columns are summed at
    pos, neg = np.nan, np.copysign(np.nan, -1.0)
    for first, later in ((pos, neg), (neg, pos)):
        m_in = np.array([[first] * n_in, [1.0] * n_in, [later] * n_in])
        got = plan_kernels.gain_sums(m_in, np.zeros((3, 2)))
        assert np.isnan(got).all() and (np.signbit(got) == np.signbit(later)).all()


def test_gain_sums_of_no_layers_are_zeros_and_shapes_must_agree():
    assert np.array_equal(plan_kernels.gain_sums(np.zeros((0, 3)), np.zeros((0, 2))), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="m_in's H"):
        plan_kernels.gain_sums(np.zeros((3, 4)), np.zeros((2, 5)))


def test_systematic_flat_counts_negative_order_indices_from_the_end_and_raises_as_python():
    rng = np.random.default_rng(9)
    n, h, e, k = 2, 3, 11, 2
    pi = _pi(rng, h, e, k, 0.5)
    order = np.argsort(rng.random((n, h, e)), axis=-1)
    order[rng.random(order.shape) < 0.4] -= e  # numpy's take reads -i as e - i
    p = np.take_along_axis(np.broadcast_to(pi, (n, h, e)), order, axis=-1)
    cs = np.cumsum(p, axis=-1)
    cs *= k / cs[..., -1:]
    ref = (cs + (5 + np.arange(n * h)).reshape(n, h, 1) * (k + 1.0)).ravel()
    assert plan_kernels.systematic_flat(pi, order, 5, k).tobytes() == ref.tobytes()
    bad = order.copy()
    bad[1, 2, 4] = e
    with pytest.raises(IndexError, match="order index beyond E"):
        plan_kernels.systematic_flat(pi, bad, 5, k)
    zero = pi.copy()
    zero[1] = 0.0  # a row summing to 0: k / 0.0, Python's error (numpy's would be inf)
    with pytest.raises(ZeroDivisionError):
        plan_kernels.systematic_flat(zero, order, 5, k)


def test_systematic_picks_far_before_its_row_raise_index_error_as_numpy():
    rng = np.random.default_rng(2)
    n, streams, h, e, k = 3, 2, 1, 5, 2
    cs = np.cumsum(rng.random((n, h, e)), axis=-1)
    cs *= k / cs[..., -1:]
    flat = (cs + np.arange(n * h).reshape(n, h, 1) * (k + 1.0)).ravel()
    u = rng.random((n, streams, h))
    order = np.stack([np.stack([rng.permutation(e) for _ in range(h)]) for _ in range(n)])
    assert np.array_equal(plan_kernels.systematic_picks(flat, u, order, 0, k), _picks_reference(flat, u, order, 0, k))
    u[2, 1, 0] = -3.0 * (k + 1)  # below the whole array: index 0, 2·E before its row
    with pytest.raises(IndexError):
        _picks_reference(flat, u, order, 0, k)
    with pytest.raises(IndexError, match="index out of the row"):
        plan_kernels.systematic_picks(flat, u, order, 0, k)


def test_pick_counts_skip_every_negative_id_and_raise_on_an_id_beyond_e():
    rng = np.random.default_rng(4)
    e = 30
    topk = rng.integers(-4, e, size=(6, 3, 2, 4))
    own = rng.random(e) < 0.6
    assert np.array_equal(plan_kernels.pick_counts(topk, own), _pick_counts_reference(topk, own))
    ids = np.clip(topk, 0, None)  # unsigned ids: read as the same values
    assert np.array_equal(plan_kernels.pick_counts(ids.astype(np.uint8), own), _pick_counts_reference(ids, own))
    topk[5, 2, 1, 3] = e
    with pytest.raises(IndexError):
        _pick_counts_reference(topk, own)
    with pytest.raises(IndexError, match="an expert id beyond E"):
        plan_kernels.pick_counts(topk, own)


def test_without_the_c_library_every_kernel_raises_native_build_error(monkeypatch):
    from moeroof.kernels import loader

    def unbuilt(*args, **kwargs):
        raise loader.NativeBuildError("the C kernels (moeroof.kernels._native) cannot be used: not built")

    monkeypatch.setattr(loader, "load", unbuilt)
    plan_kernels.library.cache_clear()
    one = np.ones((1, 1, 1))
    calls = [
        lambda: plan_kernels.gain_sums(np.ones((1, 2)), np.ones((1, 2))),
        lambda: plan_kernels.systematic_flat(np.ones((1, 1)), np.zeros((1, 1, 1), np.int64), 0, 1),
        lambda: plan_kernels.systematic_picks(one.ravel(), one * 0.5, np.zeros((1, 1, 1), np.int64), 0, 1),
        lambda: plan_kernels.pick_counts(np.zeros((1, 1, 1, 1), np.int64), np.ones(1, bool)),
    ]
    try:
        for call in calls:
            with pytest.raises(loader.NativeBuildError, match="not built"):
                call()
    finally:
        plan_kernels.library.cache_clear()
