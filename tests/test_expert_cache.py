"""The cache a decode step sees (moeroof.models.expert_cache) against independent derivations:
Monte Carlo of the systematic sampler against its exact marginals and the union's closed form,
the hot set against a direct sum, the steady-state simulation against a per-layer LRU
re-computed here from stack distances, Belady as a lower bound, and the memo."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from conftest import seeded
from moeroof import cachesim as cache_mod
from moeroof.models import expert_cache
from moeroof.models.expert_cache import (
    SIMULATED,
    clear_memo,
    hot_set_misses,
    rank_cache,
    steady_state_miss_ratio,
    systematic_topk,
)
from moeroof.models.routing import inclusion_probabilities, zipf_weights
from moeroof.models.union import union_plugin


def zipf_pi(experts: int, k: int, skews, rng=None) -> np.ndarray:
    """(H, E) inclusion probabilities, one Zipf skew per row, each row's ids permuted."""
    rows = []
    for s in skews:
        row = inclusion_probabilities(zipf_weights(experts, s), k)
        rows.append(row if rng is None else row[rng.permutation(experts)])
    pi = np.array(rows)
    return pi * (k / pi.sum(axis=1, keepdims=True))


# ----------------------------------------------------------------------------- systematic_topk


@pytest.mark.parametrize(
    "experts,k,skews",
    [
        (16, 1, (0.0, 1.2)),
        (32, 4, (0.0, 0.8, 1.5)),
        (64, 8, (0.5, 1.1)),
        (12, 6, (2.0,)),  # half the experts picked, some π close to 1
    ],
)
def test_systematic_topk_k_distinct_and_marginals_match_pi(experts, k, skews):
    rng = seeded(f"marginals-{experts}-{k}-{skews}")
    pi = zipf_pi(experts, k, skews, rng)
    steps, streams = 400, 25
    topk = systematic_topk(pi, steps, streams, rng)
    h = pi.shape[0]
    assert topk.shape == (steps, streams, h, k)
    assert topk.min() >= 0 and topk.max() < experts
    srt = np.sort(topk, axis=-1)
    assert np.all(np.diff(srt, axis=-1) > 0), "a token picked an expert twice"
    n = steps * streams
    for layer in range(h):
        freq = np.bincount(topk[:, :, layer].ravel(), minlength=experts) / n
        se = np.sqrt(pi[layer] * (1 - pi[layer]) / n)
        sure = se < 1e-9  # π = 0 or 1: the frequency must be exact
        np.testing.assert_allclose(freq[sure], pi[layer][sure], atol=1e-12)
        z = (freq[~sure] - pi[layer][~sure]) / se[~sure]
        assert np.max(np.abs(z)) < 5.0, (layer, z)
        # the z-scores behave like standard normals (a biased sampler shifts their mean square)
        assert np.mean(z**2) < 2.0


def test_systematic_topk_expert_zero_is_not_favoured_by_the_order():
    """A skew concentrated on the last ids: the random order must still give π exactly."""
    rng = seeded("order")
    pi = zipf_pi(20, 3, (1.3,))[:, ::-1].copy()
    topk = systematic_topk(pi, 2000, 10, rng)
    n = topk.shape[0] * topk.shape[1]
    freq = np.bincount(topk[:, :, 0].ravel(), minlength=20) / n
    se = np.sqrt(pi[0] * (1 - pi[0]) / n)
    assert np.max(np.abs(freq - pi[0]) / se) < 5.0


@pytest.mark.parametrize("batch", [1, 4, 16, 64])
def test_union_on_the_trace_matches_the_plugin_closed_form(batch):
    rng = seeded(f"union-{batch}")
    experts, k = 48, 6
    pi = zipf_pi(experts, k, (0.0, 0.9, 1.4), rng)
    steps = 600
    topk = systematic_topk(pi, steps, batch, rng)
    closed = union_plugin(pi, [batch]).union_per_layer[:, 0]
    for layer in range(pi.shape[0]):
        onehot = np.zeros((steps, experts), dtype=bool)
        np.put_along_axis(onehot, topk[:, :, layer, :].reshape(steps, -1), True, axis=1)
        per_step = onehot.sum(axis=1)
        se = per_step.std(ddof=1) / math.sqrt(steps)
        assert abs(per_step.mean() - closed[layer]) <= 4 * se + 1e-9, (layer, per_step.mean(), closed[layer], se)


def test_systematic_topk_rejects_bad_rows():
    rng = seeded("bad")
    with pytest.raises(ValueError):
        systematic_topk(np.array([[0.5, 0.5, 0.5]]), 2, 2, rng)  # sums to 1.5
    with pytest.raises(ValueError):
        systematic_topk(np.array([[1.5, 0.5, 0.0]]), 2, 2, rng)  # π > 1
    with pytest.raises(ValueError):
        systematic_topk(np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]), 2, 2, rng)  # K differs


# ----------------------------------------------------------------------------- hot_set_misses


def direct_hot_set(pi_row: np.ndarray, c: float, b: int) -> tuple[float, float]:
    """Union and misses of a pinned hot set of the c hottest experts by a plain loop: the
    expert at position floor(c) of the ranking is cached for the fraction c − floor(c)."""
    order = sorted(range(pi_row.size), key=lambda i: -pi_row[i])
    union = misses = 0.0
    for pos, i in enumerate(order):
        m = 1.0 - (1.0 - pi_row[i]) ** b
        union += m
        cached = 1.0 if pos + 1 <= c else max(0.0, c - pos)
        misses += (1.0 - min(cached, 1.0)) * m
    return union, misses


@pytest.mark.parametrize("cache", [0, 1, 3, 2.5, 7.25, 15.9, 16, 40])
def test_hot_set_misses_against_a_direct_sum(cache):
    rng = seeded(f"hot-{cache}")
    pi = zipf_pi(16, 3, (0.0, 0.7, 1.6), rng)
    batch = np.array([1, 2, 5, 17, 64])
    u, m = hot_set_misses(pi, np.full(batch.shape, float(cache)), batch)
    assert u.shape == m.shape == (3, batch.size)
    for layer in range(3):
        for j, b in enumerate(batch):
            du, dm = direct_hot_set(pi[layer], float(cache), int(b))
            assert u[layer, j] == pytest.approx(du, rel=1e-10)
            assert m[layer, j] == pytest.approx(dm, rel=1e-10, abs=1e-12)
    if cache == 0:
        np.testing.assert_allclose(m, u)
    if cache >= 16:
        np.testing.assert_allclose(m, 0.0, atol=1e-12)


def test_hot_set_misses_with_a_cache_per_batch_size():
    pi = zipf_pi(10, 2, (1.0,))
    batch = np.array([1, 4, 4, 9])
    caches = np.array([0.0, 2.0, 3.5, 9.0])
    _, m = hot_set_misses(pi, caches, batch)
    for j in range(batch.size):
        assert m[0, j] == pytest.approx(direct_hot_set(pi[0], caches[j], int(batch[j]))[1], rel=1e-10, abs=1e-12)


# ----------------------------------------------------------------------------- steady state


def test_everything_cached_misses_nothing_and_less_than_one_expert_misses_all():
    pi = zipf_pi(24, 4, (0.8, 1.2))
    for policy in SIMULATED:
        assert steady_state_miss_ratio(pi, 4, 24.0, policy=policy) == (0.0, 0.0)
        assert steady_state_miss_ratio(pi, 4, 0.5, policy=policy) == (1.0, 1.0)
    # with a partition: rank 1 owns 8 experts, a cache of 8 holds them all
    a = (np.arange(24) % 3 == 0).astype(np.int64)
    assert steady_state_miss_ratio(pi, 4, 8.0, assignment=a, rank=1) == (0.0, 0.0)


@pytest.mark.parametrize("policy", ["lru", "belady"])
def test_rank_cache_below_one_expert_streams_every_pick(policy):
    pi = zipf_pi(24, 4, (0.8, 1.2))
    batch = np.array([1, 3, 8])
    a = np.zeros(24, dtype=np.int64)
    rc = rank_cache(pi, batch, np.full(3, 0.6), a, policy=policy)
    np.testing.assert_allclose(rc.misses_per_layer, rc.union_per_layer)
    np.testing.assert_allclose(rc.hit_rate, 0.0, atol=1e-12)
    np.testing.assert_allclose(rc.picks_per_token, [4.0])
    np.testing.assert_allclose(rc.token_misses_per_layer, batch[None, :] * 4.0)
    # the whole model fits: nothing misses
    full = rank_cache(pi, batch, np.full(3, 24.0), a, policy=policy)
    np.testing.assert_allclose(full.misses_per_layer, 0.0)
    np.testing.assert_allclose(full.union_per_layer, union_plugin(pi, batch).mean[None, :])


SMALL_PI = zipf_pi(32, 4, (0.4, 1.0, 1.5), seeded("small-pi"))


@pytest.mark.parametrize("batch,cache", [(1, 6.0), (4, 6.0), (4, 12.0), (16, 9.0)])
def test_belady_bounds_every_policy_and_token_misses_bound_misses(batch, cache):
    res = {p: steady_state_miss_ratio(SMALL_PI, batch, cache, policy=p, seed=3) for p in SIMULATED}
    for p, (req, tok) in res.items():
        assert 0.0 <= req <= 1.0
        assert tok >= req - 1e-12, p
        assert res["belady"][0] <= req + 1e-12, (p, res)
    if batch == 1:  # one token per step: each distinct request is one pick
        for req, tok in res.values():
            assert tok == pytest.approx(req, abs=1e-12)


def test_belady_bounds_every_policy_on_a_rank_of_a_partition():
    a = np.arange(32) % 2
    for rank in (0, 1):
        res = {
            p: steady_state_miss_ratio(SMALL_PI, 8, 5.0, policy=p, assignment=a, rank=rank, seed=1) for p in SIMULATED
        }
        best = res["belady"][0]
        assert all(best <= r + 1e-12 for r, _ in res.values()), res


def fill_steps(q: np.ndarray, target: float) -> int:
    """Smallest n ≥ 1 whose expected distinct experts per layer reach ``target`` (linear scan)."""
    n = 1
    while np.mean(np.sum(1.0 - (1.0 - q) ** n, axis=1)) < target and n < expert_cache.MAX_WARMUP_STEPS:
        n += 1
    return n


def per_layer_lru(pi: np.ndarray, batch: int, c: float, seed: int) -> tuple[float, float]:
    """What steady_state_miss_ratio(scope="layer", policy="lru") computes, re-derived: the same
    trace (seeded as the module documents), then per layer an LRU of floor(c) experts whose hits
    are the requests at stack distance 1..floor(c) as each step's lookup of the layer starts
    (Mattson et al.), counting the steps after
    the warm-up only; token misses weight each missed request by the tokens that picked it."""
    h, e = pi.shape
    assert h <= expert_cache.MAX_SIMULATED_LAYERS
    q = 1.0 - (1.0 - pi) ** batch
    reachable = float(np.mean(np.sum(q > 1e-12, axis=1)))
    # the trace does not depend on the capacity (common random numbers): warm-up to 0.9 of the
    # reachable experts, seeded by (seed, B, steps)
    warm = min(expert_cache.MAX_WARMUP_STEPS, max(4, 2 * fill_steps(q, 0.9 * reachable)))
    per_step = float(np.mean(q.sum(axis=1))) * h
    counted = int(min(500, max(expert_cache.MIN_COUNTED_STEPS, math.ceil(expert_cache.MIN_REQUESTS / per_step))))
    rng = np.random.default_rng([seed, batch, warm + counted])
    topk = systematic_topk(pi, warm + counted, batch, rng)
    cap = math.floor(c)
    hits = requests = token_misses = 0
    for layer in range(h):
        items, steps, mult = [], [], []
        for s in range(topk.shape[0]):
            ids, counts = np.unique(topk[s, :, layer, :], return_counts=True)  # ascending ids
            items.append(ids)
            steps.append(np.full(ids.size, s))
            mult.append(counts)
        items, steps, mult = np.concatenate(items), np.concatenate(steps), np.concatenate(mult)
        # a layer's experts of one step are looked up together (moeroof.cachesim's default)
        dist = cache_mod.stack_distances(items, np.r_[True, steps[1:] != steps[:-1]])
        hit = (dist >= 1) & (dist <= cap)
        keep = steps >= warm
        hits += int(hit[keep].sum())
        requests += int(keep.sum())
        token_misses += int(mult[keep & ~hit].sum())
    return 1.0 - hits / requests, token_misses / requests


@pytest.mark.parametrize("batch,cache", [(1, 5.0), (4, 7.0), (8, 10.6)])
def test_layer_scoped_lru_equals_a_per_layer_lru_recomputed_here(batch, cache):
    seed = 11
    got = steady_state_miss_ratio(SMALL_PI, batch, cache, policy="lru", scope="layer", seed=seed)
    want = per_layer_lru(SMALL_PI, batch, cache, seed)
    assert got[0] == pytest.approx(want[0], abs=1e-12)
    assert got[1] == pytest.approx(want[1], abs=1e-12)


def test_layer_scoped_lru_against_lru_hit_curve_per_layer():
    """The same per-layer figure from lru_hit_curve (one pass, every capacity) on each layer's
    request stream built by requests_from_trace."""
    batch, c, seed = 4, 7.0, 5
    h = SMALL_PI.shape[0]
    q = 1.0 - (1.0 - SMALL_PI) ** batch
    reachable = float(np.mean(np.sum(q > 1e-12, axis=1)))
    warm = min(expert_cache.MAX_WARMUP_STEPS, max(4, 2 * fill_steps(q, 0.9 * reachable)))
    counted = int(min(500, max(8, math.ceil(expert_cache.MIN_REQUESTS / (float(np.mean(q.sum(axis=1))) * h)))))
    steps = warm + counted
    topk = systematic_topk(SMALL_PI, steps, batch, np.random.default_rng([seed, batch, steps]))
    hits = total = 0.0
    for layer in range(h):
        req = cache_mod.requests_from_trace(topk[:, :, [layer], :], SMALL_PI.shape[1])
        cap, rate = cache_mod.lru_hit_curve(req, warmup_steps=warm)
        n = int((req.step >= warm).sum())
        hits += rate[min(7, cap[-1])] * n
        total += n
    got = steady_state_miss_ratio(SMALL_PI, batch, c, policy="lru", scope="layer", seed=seed)[0]
    assert got == pytest.approx(1.0 - hits / total, abs=1e-12)


def test_lru_hit_rate_never_falls_as_the_cache_grows():
    """One trace per (π, B, seed) for every capacity: LRU's inclusion property (Mattson et al.)
    then holds across the plan's cache sizes, exactly."""
    for batch in (1, 4, 16):
        miss = [steady_state_miss_ratio(SMALL_PI, batch, float(c), policy="lru", seed=3)[0] for c in range(1, 12)]
        assert np.all(np.diff(miss) <= 1e-15), (batch, miss)


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("batch", [1, 5, 16])
def test_lru_ratio_curve_is_simulate_ratios_at_every_capacity(ranks, batch):
    """The global LRU's ratios at every whole cache from one stack-distance pass are the very
    floats one simulation per capacity gives (what steady_state_miss_ratio returned before)."""
    pi = inclusion_probabilities(seeded(f"lru-curve-{batch}").dirichlet(np.full(40, 0.3), size=6), 4)
    assignment = None if ranks == 1 else seeded("lru-curve-ranks").permutation(np.arange(40) % ranks)
    for rank in range(ranks):
        own = np.ones(40, dtype=bool) if assignment is None else assignment == rank
        n_own = int(own.sum())
        topk, warm = expert_cache.steady_trace(pi, own, batch, 11)
        curve = expert_cache.lru_ratio_curve(topk, 40, own, assignment, rank, warm, n_own - 1)
        assert len(curve) == 2 * (n_own - 1)
        for c in range(1, n_own):
            ref = expert_cache.simulate_ratios(topk, 40, own, assignment, rank, float(c), "lru", "global", warm)
            assert (curve[c - 1], curve[n_own - 1 + c - 1]) == ref[:2], (rank, c)


@pytest.mark.parametrize("ranks", [1, 2])
def test_trace_lru_reads_one_curve_and_matches_a_simulation_per_capacity(monkeypatch, ranks):
    """A user's (or a sampled) trace under a global LRU: trace_miss_ratio serves every capacity
    from one stack-distance pass, counted on the steps where the B streams are all live (a
    finished stream pads with -1), and gives the floats of one simulation per capacity."""
    from moeroof.models.routing import Uniform, sample_trace

    monkeypatch.setenv("MOEROOF_CACHE_DIR", "")
    clear_memo()
    trace = sample_trace(Uniform(40, 4), 60, 3, 6, seeded("trace-curve"), rho=0.3).copy()
    trace[45:, 2] = -1  # stream 2 has finished
    assignment = None if ranks == 1 else seeded("trace-curve-ranks").permutation(np.arange(40) % ranks)
    calls = []
    real = expert_cache.cache_sim.simulate
    monkeypatch.setattr(expert_cache.cache_sim, "simulate", lambda *a, **k: calls.append(1) or real(*a, **k))
    full = expert_cache.live_steps(trace, 3)
    idx = np.flatnonzero(full)
    warm = int(idx[idx.size // 2])
    for rank in range(ranks):
        own = np.ones(40, dtype=bool) if assignment is None else assignment == rank
        got = [
            expert_cache.trace_miss_ratio(trace, "t", 3, float(c), experts=40, assignment=assignment, rank=rank)
            for c in range(1, int(own.sum()))
        ]
        assert not calls
        monkeypatch.setattr(expert_cache.cache_sim, "simulate", real)
        for c, g in enumerate(got, start=1):
            ref = expert_cache.simulate_ratios(
                trace[:, :3], 40, own, assignment, rank, float(c), "lru", "global", warm, counted_steps=full
            )
            assert g == ref[:3], (rank, c)
        monkeypatch.setattr(expert_cache.cache_sim, "simulate", lambda *a, **k: calls.append(1) or real(*a, **k))


def test_steady_state_lru_reads_its_curve_and_matches_a_simulation(monkeypatch):
    """steady_state_miss_ratio's global LRU (served from the curve) against simulate_ratios on
    the same steady-state trace, at every capacity, with no simulate call at all."""
    monkeypatch.setenv("MOEROOF_CACHE_DIR", "")
    clear_memo()
    calls = []
    real = expert_cache.cache_sim.simulate
    monkeypatch.setattr(expert_cache.cache_sim, "simulate", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = [steady_state_miss_ratio(SMALL_PI, 4, float(c), policy="lru", seed=5) for c in range(1, SMALL_PI.shape[1])]
    assert not calls
    monkeypatch.setattr(expert_cache.cache_sim, "simulate", real)
    own = np.ones(SMALL_PI.shape[1], dtype=bool)
    sub = SMALL_PI[expert_cache.simulated_layer_rows(SMALL_PI.shape[0])]
    topk, warm = expert_cache.steady_trace(sub, own, 4, 5)
    for c, pair in enumerate(got, start=1):
        ref = expert_cache.simulate_ratios(topk, SMALL_PI.shape[1], own, None, 0, float(c), "lru", "global", warm)
        assert pair == ref[:2], c


# ----------------------------------------------------------------------------- the memo


def test_memo_returns_the_same_value_without_simulating_again(monkeypatch):
    calls = []
    real = expert_cache.cache_sim.simulate

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(expert_cache.cache_sim, "simulate", counting)
    monkeypatch.setenv("MOEROOF_CACHE_DIR", "")  # the in-process memo alone (the disk's: test_memo)
    clear_memo()
    args = (SMALL_PI, 4, 6.0)
    first = steady_state_miss_ratio(*args, policy="s3fifo", seed=21)
    assert len(calls) == 1
    again = steady_state_miss_ratio(*args, policy="s3fifo", seed=21)
    assert again == first and len(calls) == 1
    # a fractional capacity with the same whole experts is the same simulation
    assert steady_state_miss_ratio(SMALL_PI, 4, 6.7, policy="s3fifo", seed=21) == first and len(calls) == 1
    # another seed, policy or batch simulates
    steady_state_miss_ratio(*args, policy="s3fifo", seed=22)
    steady_state_miss_ratio(*args, policy="lfu", seed=21)
    steady_state_miss_ratio(SMALL_PI, 5, 6.0, policy="s3fifo", seed=21)
    assert len(calls) == 4
    clear_memo()
    fresh = steady_state_miss_ratio(*args, policy="s3fifo", seed=21)
    assert len(calls) == 5
    assert fresh == first  # the simulation is deterministic in its seed


def test_steady_state_rejects_unknown_policy_and_scope():
    with pytest.raises(ValueError, match="policy"):
        steady_state_miss_ratio(SMALL_PI, 4, 6.0, policy="static")
    with pytest.raises(ValueError, match="scope"):
        steady_state_miss_ratio(SMALL_PI, 4, 6.0, scope="rank")
    with pytest.raises(ValueError, match="policy"):
        rank_cache(SMALL_PI, [1], 4.0, np.zeros(32, dtype=np.int64), policy="fifo")


# ----------------------------------------------------------------------------- the user's own trace


def test_a_trace_routing_simulates_on_the_trace_itself():
    """With routing from a trace, a simulated cache runs on the trace's own first B streams (its
    union measured there, independent of the closed form) and on drawn traces beyond its streams."""
    from moeroof.core.paths import DATA_DIR
    from moeroof.data.presets import load_hardware, load_model
    from moeroof.models.plan import Workload, plan, routing_from_spec

    m, hw = load_model("qwen3-30b-a3b"), load_hardware("apple-m4")
    r = routing_from_spec(str(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz"), m)
    assert r.trace is not None and r.trace_key
    steps, streams, layers, _ = r.trace.shape
    b = 4
    p = plan(m, hw, Workload(context_tokens=1024, cache_bytes=4 * 2**30), r, [b, streams + 1])
    # the union at B = 4: distinct experts per (step, layer) over the counted half, on the
    # layers the simulation keeps, recomputed here directly from the array
    rows = np.unique(np.round(np.linspace(0, layers - 1, expert_cache.MAX_SIMULATED_LAYERS)).astype(int))
    sub = np.asarray(r.trace)[steps // 2 :, :b][:, :, rows]
    distinct = [len(set(sub[s, :, j].ravel()) - {-1}) for s in range(sub.shape[0]) for j in range(rows.size)]
    assert p.union_per_layer[0] == pytest.approx(np.mean(distinct), rel=1e-12)
    assert any("trace's own streams" in n for n in p.notes)
    # beyond the trace's streams: the closed-form union of the trace's histogram
    assert p.union_per_layer[1] == pytest.approx(float(union_plugin(r.pi, [streams + 1]).mean[0]), rel=1e-9)


def test_a_finished_streams_padding_does_not_dilute_the_traces_union():
    """A capture pads a finished stream with −1. The union at B is counted over the steps where
    the first B streams are all live: one live stream routes exactly K distinct experts per layer,
    whatever share of the trace it is live for (the padded steps gave U(1) = 0.6 at K = 2 on a
    real capture)."""
    from moeroof.models.expert_cache import live_steps, trace_miss_ratio, usable_trace_batch

    rng = np.random.default_rng(7)
    steps, streams, layers, k, e = 40, 3, 2, 2, 8
    trace = np.stack([rng.permutation(e)[:k] for _ in range(steps * streams * layers)]).reshape(
        steps, streams, layers, k
    )
    trace[10:, 0] = -1  # stream 0 finishes after 10 steps
    trace[30:, 1] = -1  # stream 1 after 30
    assert live_steps(trace, 1).sum() == 10 and live_steps(trace, 2).sum() == 10
    assert live_steps(trace, 3)[:10].all() and not live_steps(trace, 3)[10:].any()
    _, _, u1 = trace_miss_ratio(trace, "pad-test", 1, 2.0, experts=e)
    assert u1 == pytest.approx(k)
    # B = 2 over steps 5..9 (the second half of the 10 live steps), recounted by hand
    _, _, u2 = trace_miss_ratio(trace, "pad-test", 2, 2.0, experts=e)
    by_hand = [len(set(trace[s, :2, j].ravel())) for s in range(5, 10) for j in range(layers)]
    assert u2 == pytest.approx(np.mean(by_hand))
    # a stream never live alongside the others: no usable step, and trace_miss_ratio says so
    short = trace.copy()
    short[1:, 0] = -1
    short[:1, 1] = -1
    assert not usable_trace_batch(short, 2)
    with pytest.raises(ValueError, match="all live"):
        trace_miss_ratio(short, "pad-short", 2, 2.0, experts=e)


def test_a_global_cache_on_one_row_of_pi_spans_stand_in_layers_and_cycles_below_a_tokens_picks():
    """A ``uniform`` or ``zipf:S`` routing has one row of π standing for every layer. One global
    cache spans the model's layers, visited in order: with fewer slots than a token's picks over
    them, LRU misses every time (each expert is evicted before the next token reaches its layer),
    while one cache per layer of the same size still hits; and independent tokens are the
    stickiness-0 limit of the sampled traces a plan runs the locality prior on (within 2 points)."""
    from moeroof.data.presets import load_hardware, load_model
    from moeroof.models.local_routing import routing_from_knobs
    from moeroof.models.plan import Workload, plan, routing_from_spec

    m, hw = load_model("qwen3-30b-a3b"), load_hardware("nvme-gen4")
    per_expert_layer = m.moe_layers * m.expert_bytes
    independent = routing_from_spec("zipf:1.0", m)
    for c in (6, 12, 40):  # experts per layer: below K = 8, above it, well above
        w = Workload(cache_bytes=c * per_expert_layer)
        glob = float(plan(m, hw, w, independent, [1]).cache_hit_rate[0])
        layer = float(plan(m, hw, replace(w, cache_scope="layer"), independent, [1]).cache_hit_rate[0])
        traced = routing_from_knobs(m, "zipf", 1.0, rho=1e-9, streams=1, seed=0)
        limit = float(plan(m, hw, w, traced, [1]).cache_hit_rate[0])
        if c < m.top_k:
            assert glob < 0.01 < 0.05 < layer, (c, glob, layer)
        assert abs(glob - limit) < 0.02, (c, glob, limit)


def _page_hits_simulated(topk, experts, own, assignment, rank, c, policy, warm, page, pinned=None) -> float:
    """The OS page cache simulated directly: the expert cache's missed requests fed to an LRU of
    ``page`` experts per layer over all layers, its hits counted after ``warm``, per counted
    request of the expert cache (one simulation per page-cache size, as before the one-pass curve)."""
    part = None if assignment is None else np.asarray(assignment, dtype=np.int64)
    req = expert_cache.cache_sim.requests_from_trace(topk, experts, partition=part, rank=None if part is None else rank)
    h = topk.shape[2]
    how = dict(scope="layer", pinned=pinned) if policy == "static" else dict(scope="global", warmup_steps=warm)
    res = expert_cache.cache_sim.simulate(req, c * h, policy=policy, return_hits=True, **how)
    miss = ~res.request_hits
    n = int((req.step >= warm).sum())
    if not miss.any() or n == 0:
        return 0.0
    below = expert_cache.cache_sim.Requests(
        items=req.items[miss], step=req.step[miss], layer=req.layer[miss], steps=req.steps, layers=h, experts=experts
    )
    return expert_cache.cache_sim.simulate(below, page * h, policy="lru", scope="global", warmup_steps=warm).hits / n


@pytest.mark.parametrize("policy", ["lru", "lfu", "s3fifo", "static"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_page_cache_curve_equals_one_simulation_per_page_size(monkeypatch, policy, ranks):
    """page_cache_hit_ratio reads every page-cache size from one stack-distance pass over the expert
    cache's misses; each equals simulating the page cache at that size (LRU's inclusion property),
    on drawn steady-state traces and on a user's trace, for any expert-cache policy."""
    from moeroof.models.routing import Uniform, sample_trace

    monkeypatch.setenv("MOEROOF_CACHE_DIR", "")
    clear_memo()
    e = 24
    pi = inclusion_probabilities(seeded(f"page-{policy}").dirichlet(np.full(e, 0.4), size=5), 3)
    assignment = None if ranks == 1 else seeded("page-ranks").permutation(np.arange(e) % ranks)
    trace = sample_trace(Uniform(e, 3), 50, 4, 5, seeded("page-trace"), rho=0.3)
    for rank in range(ranks):
        own = np.ones(e, dtype=bool) if assignment is None else assignment == rank
        kw = dict(policy=policy, assignment=assignment, rank=rank, seed=2)
        for batch, c in ((1, 2), (3, 4)):
            topk, warm = expert_cache.steady_trace(expert_cache.simulated_rows(pi, "global"), own, batch, 2)
            pinned = np.where(own[None, :], pi, -1.0).ravel() if policy == "static" else None
            for page in (1, 3, 8, 40):
                ref = _page_hits_simulated(topk, e, own, assignment, rank, c, policy, warm, page, pinned)
                assert expert_cache.page_cache_hit_ratio(pi, batch, c, page, **kw) == ref, (rank, batch, c, page)
                if policy != "static":
                    got = expert_cache.page_cache_hit_ratio(pi, batch, c, page, trace=trace, trace_key="t", **kw)
                    on = trace[:, :batch]
                    assert got == _page_hits_simulated(on, e, own, assignment, rank, c, policy, 25, page), page
