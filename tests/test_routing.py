"""Routing models: inclusion probabilities against exact enumeration and Monte Carlo."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeroof.models.routing import (
    Dirichlet,
    Uniform,
    Zipf,
    consecutive_overlap,
    histogram_from_trace,
    inclusion_probabilities,
    log_gamma_from_uniforms,
    part_concentrations,
    sample_topk,
    sample_trace,
    zipf_log_weights,
    zipf_weights,
)


def exact_inclusion(w: np.ndarray, k: int) -> np.ndarray:
    """Plackett–Luce inclusion by enumerating every ordered K-tuple (independent derivation)."""
    w = np.asarray(w, dtype=float) / np.sum(w)
    pi = np.zeros(w.size)
    for order in itertools.permutations(range(w.size), k):
        prob, chosen = 1.0, set()
        for j in order:
            # the weight still in the urn, summed afresh: 1 minus the chosen ones cancels to
            # noise when what is left is tiny (hypothesis found 1e-7 off at a weight of 1.5e-9)
            prob *= w[j] / sum(w[i] for i in range(w.size) if i not in chosen)
            chosen.add(j)
        pi[list(order)] += prob
    return pi


@pytest.mark.parametrize("e,k", [(4, 2), (5, 3), (6, 2), (7, 4), (7, 6)])
def test_inclusion_matches_enumeration(e, k, rng):
    for _ in range(3):
        w = rng.dirichlet(np.full(e, 0.4))
        np.testing.assert_allclose(inclusion_probabilities(w, k), exact_inclusion(w, k), atol=1e-8)


def test_inclusion_uniform_exact_and_edges():
    np.testing.assert_array_equal(inclusion_probabilities(np.ones((2, 10)), 3), np.full((2, 10), 0.3))
    w = zipf_weights(10, 1.0)
    np.testing.assert_allclose(inclusion_probabilities(w, 1), w)
    np.testing.assert_array_equal(inclusion_probabilities(w, 10), np.ones(10))


def test_inclusion_matches_monte_carlo(rng):
    w = Zipf(64, 8, 1.1).popularity(2, rng)
    pi = inclusion_probabilities(w, 8)
    n = 100_000
    freq = histogram_from_trace(sample_topk(w, 8, n, rng), 64) / n
    # binomial standard error of each frequency; 5 sigma over 128 cells
    se = np.sqrt(pi * (1 - pi) / n) + 1e-12
    assert np.max(np.abs(freq - pi) / se) < 5


@settings(max_examples=30, deadline=None)
@given(
    e=st.integers(2, 80),
    k_frac=st.floats(0.01, 1.0),
    alpha=st.floats(0.02, 50.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_inclusion_sums_to_k_and_is_monotone(e, k_frac, alpha, seed):
    k = max(1, min(e, int(round(k_frac * e))))
    w = np.random.default_rng(seed).dirichlet(np.full(e, alpha)) + 1e-300
    pi = inclusion_probabilities(w, k)
    assert abs(pi.sum() - k) < 1e-6
    assert np.all((pi >= 0) & (pi <= 1 + 1e-12))
    # a more popular expert is never less likely to be included
    order = np.argsort(w)
    assert np.all(np.diff(pi[order]) >= -1e-9)


def test_sample_topk_distinct_and_seeded():
    w = Zipf(32, 4, 1.0).popularity(3)
    a = sample_topk(w, 4, (50, 2), np.random.default_rng(7))
    b = sample_topk(w, 4, (50, 2), np.random.default_rng(7))
    assert a.shape == (50, 2, 3, 4)
    np.testing.assert_array_equal(a, b)
    srt = np.sort(a, axis=-1)
    assert np.all(np.diff(srt, axis=-1) > 0)


def test_dirichlet_tiny_alpha_stays_valid(rng):
    w = Dirichlet(128, 8, 0.001).popularity(4, rng)
    assert np.all(np.isfinite(w)) and np.allclose(w.sum(1), 1)
    ids = sample_topk(w, 8, 10, rng)
    assert ids.min() >= 0 and ids.max() < 128
    assert np.all(np.diff(np.sort(ids, -1), axis=-1) > 0)


def test_zipf_permutes_per_layer(rng):
    w = Zipf(16, 2, 1.0).popularity(5, rng)
    np.testing.assert_allclose(np.sort(w, axis=1), np.tile(np.sort(zipf_weights(16, 1.0)), (5, 1)))
    assert len({tuple(np.argsort(row)) for row in w}) > 1


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_stickiness_sets_consecutive_overlap(rho, rng):
    e, k = 64, 4
    trace = sample_trace(Uniform(e, k), 400, 8, 2, rng, rho=rho)
    overlap = consecutive_overlap(trace).mean()
    # kept: K·ρ; each of the K(1−ρ) refilled slots is a uniform pick among the E − Kρ
    # non-kept experts, of which K(1−ρ) were previously selected (mean-field expectation)
    kept = k * rho
    refill = k * (1 - rho)
    expected = kept + refill * refill / (e - kept)
    assert overlap == pytest.approx(expected, abs=0.06)


def test_shared_task_popularity_lowers_cross_agent_union(rng):
    model = Zipf(128, 8, 0.6)
    w = model.popularity(4, rng)
    indep = sample_trace(model, 60, 16, 4, rng, popularity=w)
    shared = sample_trace(model, 60, 16, 4, rng, popularity=w, c=5.0, groups=1)

    def mean_union(tr):
        return np.mean([[len(set(tr[s, :, l].ravel())) for l in range(4)] for s in range(tr.shape[0])])

    assert mean_union(shared) < mean_union(indep) - 5


def test_sample_trace_bad_arguments(rng):
    with pytest.raises(ValueError, match="rho"):
        sample_trace(Uniform(8, 2), 2, 2, 1, rng, rho=1.5)
    with pytest.raises(ValueError, match="groups"):
        sample_trace(Uniform(8, 2), 2, 2, 1, rng, groups=3)
    with pytest.raises(ValueError, match="top_k"):
        Uniform(4, 5)
    with pytest.raises(ValueError, match="exponent"):
        Zipf(4, 2, -1.0)


# ----------------------------------------------------------------------------- locality knobs

# sha256 of (dtype, shape, bytes) of sample_trace calls that predate the per-layer knobs and the
# prompt, computed from the code before they were added (seed 20261201): committed figures and
# tests depend on this random stream, so knobs left off must not draw anything of their own.
# The two calls with a finite c ("dirichlet_groups", "zipf_step") were re-pinned when the hot
# sets moved to Gamma draws by inversion from a child stream (common random numbers across c):
# their old digests were 58c48977… and f2a062eb…; the c = inf calls did not change.
# The four calls with ρ > 0 were re-pinned (2026-12-04) when the stickiness draws moved to a
# child stream and two or more kept experts stopped going to numpy's sort, whose order among
# ties depends on the CPU's SIMD path (their digests were 8e7907a1…, bf971cd0…, 06bf2afc… and
# d53a35f2…, true on an AVX-512 box only); the ρ = 0 call did not change.
OLD_CALL_DIGESTS = {
    "uniform": "5a20d31c60c7c60062fe97ab2e692e1f8f8cae26cad050cc7a37a7e13a1984c0",
    "zipf_rho": "aa7698edb225e9148f4b29d368dd206152726c093284c2893789173b997a9c1d",
    "dirichlet_groups": "25cb1166ee7c553ed12dabd9e2be38a0a7dfd4203f6f9029c682cd496285a815",
    "zipf_step": "8652cd7c2bc5c29fbbfd637e6e17628fc971b730ddc39520227f9ee27eb3ed12",
    "popularity": "93a48d94eb10ce58f26c3fe27914f1d254abf09e7c4d2a604d02eb3e2f114be2",
}
OLD_CALLS = {
    "uniform": lambda r: sample_trace(Uniform(16, 2), 20, 3, 2, r),
    "zipf_rho": lambda r: sample_trace(Zipf(32, 4, 0.9), 30, 4, 3, r, rho=0.4),
    "dirichlet_groups": lambda r: sample_trace(Dirichlet(32, 4, 0.4), 25, 6, 2, r, c=3.0, groups=2, rho=0.3),
    "zipf_step": lambda r: sample_trace(Zipf(32, 4, 0.7), 25, 5, 2, r, c=5.0, scope="step", rho=0.2),
    "popularity": lambda r: sample_trace(
        Uniform(8, 2), 15, 2, 2, r, popularity=np.array([[1, 2, 3, 4, 0, 1, 1, 1.0], [1] * 8]), rho=0.5
    ),
}


def trace_digest(a: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(f"{a.dtype}{a.shape}".encode() + a.tobytes()).hexdigest()


@pytest.mark.parametrize("name", sorted(OLD_CALLS))
def test_sample_trace_old_calls_byte_identical(name):
    assert trace_digest(OLD_CALLS[name](np.random.default_rng(20261201))) == OLD_CALL_DIGESTS[name]


_SIMD_PROBE = """
import hashlib, numpy as np
from moeroof.models.routing import Zipf, sample_trace
trace = sample_trace(Zipf(64, 8, 0.9), 120, 4, 6, np.random.default_rng(3), rho=0.5, c=4.0, groups=4)
print(hashlib.sha256(trace.tobytes()).hexdigest())
"""


def test_sample_trace_is_the_same_on_every_simd_path():
    """One trace on every machine: numpy's sorts break ties by their SIMD path (AVX-512, AVX2,
    baseline), so a trace whose picks went through them differed between boxes wherever two
    kept experts tied. The trace drawn with every dispatched SIMD feature of this CPU turned off
    (``NPY_DISABLE_CPU_FEATURES``, as on a box without them) equals the one drawn here."""
    import subprocess

    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # another numpy layout: the probe still runs, on this box's own path
        __cpu_dispatch__, __cpu_features__ = [], {}
    found = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(found)}
    here = subprocess.run([sys.executable, "-c", _SIMD_PROBE], capture_output=True, text=True, check=True)
    plain = subprocess.run([sys.executable, "-c", _SIMD_PROBE], capture_output=True, text=True, env=env, check=True)
    assert plain.stdout == here.stdout and len(here.stdout.strip()) == 64


def test_kept_experts_lead_in_their_previous_order():
    """With ρ = 1 every pick is kept: each step repeats the previous one slot for slot (numpy's
    sort gave some permutation of it)."""
    trace = sample_trace(Zipf(32, 4, 0.5), 30, 3, 2, np.random.default_rng(1), rho=1.0)
    assert np.array_equal(trace[1:], np.broadcast_to(trace[0], trace[1:].shape))


def test_per_layer_knobs_equal_to_scalar_are_the_scalar_draw():
    model = Dirichlet(32, 4, 0.4)
    layers = 3
    scalar = sample_trace(model, 20, 4, layers, np.random.default_rng(7), c=3.0, groups=4, rho=0.3)
    arrays = sample_trace(
        model, 20, 4, layers, np.random.default_rng(7), c=np.full(layers, 3.0), groups=4, rho=np.full(layers, 0.3)
    )
    np.testing.assert_array_equal(scalar, arrays)


def test_per_layer_stickiness_sets_per_layer_overlap(rng):
    """Layer l keeps each previous expert with probability ρ_l. Closed form per layer:
    E[shared] = ρK + (what the (1 − ρ)K refilled slots hit by chance among the (1 − ρ)K previous
    experts not kept) ≈ ρK + (1 − ρ)²·C₀ / (1 − ρ·C₀/K), C₀ the chance overlap at ρ = 0 on the
    same popularity, by Monte Carlo (the first-order ρK + (1 − ρ)·C₀ counts refills that could
    only land on kept experts, which are excluded, and overshoots by about ρ(1 − ρ)·C₀)."""
    e, k = 128, 8
    model = Dirichlet(e, k, 0.4)
    rho = np.array([0.079, 0.3, 0.597, 0.9])  # Qwen3's layers 0 and 7, and two more
    w = model.popularity(rho.size, rng)
    trace = sample_trace(model, 400, 8, rho.size, rng, rho=rho, popularity=w)
    chance = consecutive_overlap(sample_trace(model, 400, 8, rho.size, rng, popularity=w))
    overlap = consecutive_overlap(trace)
    expected = rho * k + (1 - rho) ** 2 * chance / (1 - rho * chance / k)
    # sampling error of a per-layer mean over 3192 pairs is about 0.02–0.05 (pairs overlap);
    # C₀ ≈ 1.5 here, so the first-order form would be 0.2–0.35 too high in the middle layers
    np.testing.assert_allclose(overlap, expected, atol=0.15)
    assert np.all(np.diff(overlap) > 0.5)  # the profile is visible layer by layer


def test_per_stream_hot_set_lowers_the_union_over_time_below_the_plug_in(rng):
    """groups = streams, scope = "trace": each stream routes by its own q_s ~ Dirichlet(c·w).
    At the same marginal inclusion π̄ = E[π(q_s)] (Monte Carlo over q draws, exact π per draw),
    one step of B streams touches the plug-in's U(B) (the streams are independent), but the
    experts B streams touch over W steps stay far below the plug-in of B·W independent tokens."""
    from moeroof.models.routing import log_dirichlet, softmax
    from moeroof.models.union import union_plugin

    e, k, streams, steps, c = 128, 8, 64, 64, 4.0  # many streams: many draws of q_s
    model = Zipf(e, k, 0.8)
    w = model.popularity(1, rng)
    trace = sample_trace(model, steps, streams, 1, rng, popularity=w, c=c, groups=streams, scope="trace")
    q = softmax(log_dirichlet(np.broadcast_to(c * w, (300, 1, e)), rng))
    pi_bar = inclusion_probabilities(q, k).mean(axis=0)

    def measured_union(b: int, window: int) -> float:
        return float(
            np.mean(
                [
                    np.unique(trace[t : t + window, s : s + b, 0]).size
                    for s in range(0, streams, b)
                    for t in range(0, steps, window)
                ]
            )
        )

    one_step = union_plugin(pi_bar, 4, k).union_per_layer[0, 0]
    assert measured_union(4, 1) == pytest.approx(one_step, abs=1.0)
    over_time = union_plugin(pi_bar, 4 * 16, k).union_per_layer[0, 0]
    assert measured_union(4, 16) < 0.6 * over_time


def test_prompt_tokens_prepend_a_cold_start(rng):
    model = Zipf(32, 4, 0.9)
    seed = 11
    with_prompt = sample_trace(model, 20, 3, 2, np.random.default_rng(seed), rho=0.5, prompt_tokens=6)
    assert with_prompt.shape == (26, 3, 2, 4)
    # the prompt is routed like the decode: the same draw as 26 steps without a prompt
    np.testing.assert_array_equal(with_prompt, sample_trace(model, 26, 3, 2, np.random.default_rng(seed), rho=0.5))
    no_prompt = sample_trace(model, 20, 3, 2, np.random.default_rng(seed), rho=0.5, prompt_tokens=0)
    np.testing.assert_array_equal(no_prompt, with_prompt[:20])


def test_per_layer_knob_errors(rng):
    with pytest.raises(ValueError, match="rho"):
        sample_trace(Uniform(8, 2), 2, 2, 3, rng, rho=[0.1, 0.2])
    with pytest.raises(ValueError, match="rho"):
        sample_trace(Uniform(8, 2), 2, 2, 2, rng, rho=[0.1, 1.2])
    with pytest.raises(ValueError, match="c"):
        sample_trace(Uniform(8, 2), 2, 2, 2, rng, c=[1.0, 0.0])
    with pytest.raises(ValueError, match="prompt_tokens"):
        sample_trace(Uniform(8, 2), 2, 2, 2, rng, prompt_tokens=-1)
    with pytest.raises(ValueError, match="c_step"):
        sample_trace(Uniform(8, 2), 2, 2, 2, rng, c_step=0.0)
    with pytest.raises(ValueError, match="c_step"):
        sample_trace(Uniform(8, 2), 2, 2, 2, rng, c_step=[1.0, 2.0, 3.0])


def test_per_layer_heterogeneity_inf_layer_routes_by_w(rng):
    """c = [inf, 0.05]: layer 0 follows w; layer 1's groups concentrate on few experts."""
    e, k = 64, 2
    model = Uniform(e, k)
    trace = sample_trace(model, 200, 4, 2, rng, c=np.array([np.inf, 0.05]), groups=4)
    touched = [np.unique(trace[:, s, 1]).size for s in range(4)]
    assert np.unique(trace[:, :, 0]).size == e
    assert max(touched) < e / 2


# ----------------------------------------------------------------------------- common random numbers in c


@pytest.mark.parametrize("a", [1e-4, 0.05, 0.7, 3.0, 400.0])
def test_log_gamma_from_uniforms_is_gamma_distributed(a):
    """KS test of the inversion sampler against the Gamma(a) CDF from scipy. For a < 1 the CDF
    is taken in log space, ``P(log G <= y) = e^{a·y} / Γ(a+1) · ₁F₁(a; a+1; −e^y)`` (the series
    of the lower incomplete gamma), since most draws at a = 1e-4 are below e^-1000."""
    from scipy import stats
    from scipy.special import gammainc, gammaln, hyp1f1

    n = 20_000
    u = np.random.default_rng(41).random((2, n))
    log_g = log_gamma_from_uniforms(np.full(n, a), u)
    assert np.all(np.isfinite(log_g))
    if a < 1:
        x = np.exp(log_g)
        # ₁F₁ to first order where x is tiny (scipy's hyp1f1 returns inf at x = 1e-300)
        series = np.where(x < 1e-8, 1.0 - a / (a + 1.0) * x, hyp1f1(a, a + 1.0, -np.maximum(x, 1e-8)))
        cdf = np.exp(a * log_g - gammaln(a + 1.0)) * series
    else:
        cdf = gammainc(a, np.exp(log_g))
    assert stats.kstest(cdf, "uniform").pvalue > 1e-3


@settings(max_examples=60, deadline=None)
@given(
    log10_a=st.floats(-300.0, 12.0),
    rel=st.floats(1e-9, 1.0),
    u0=st.floats(0.0, 1.0, exclude_max=True),
    u1=st.floats(0.0, 1.0, exclude_max=True),
)
def test_log_gamma_from_uniforms_is_finite_and_monotone_in_the_shape(log10_a, rel, u0, u1):
    """The coupling behind common random numbers: at fixed uniforms ``log G`` is finite (shapes
    down to the 1e-300 floor, uniforms down to an exact 0) and non-decreasing in the shape."""

    a = 10.0**log10_a
    u = np.array([[u0, u0], [u1, u1]])
    lo, hi = log_gamma_from_uniforms(np.array([a, a * (1 + rel)]), u)
    assert np.isfinite(lo) and np.isfinite(hi)
    assert hi >= lo - 1e-12 * max(1.0, abs(lo))


def hot_set_trace(c, seed=7, **kw):
    model = Zipf(128, 8, 0.8)
    w = model.popularity(2, np.random.default_rng(99))
    kw.setdefault("groups", 8)
    return sample_trace(model, 150, 8, 2, np.random.default_rng(seed), c=c, scope="trace", popularity=w, **kw)


def single_stream_lru_hit_rate(trace, capacity=32, warmup=40):
    """Each stream alone, one LRU of ``capacity`` experts per layer; hits pooled over streams."""
    from moeroof import cachesim as cache

    steps, streams, layers, _ = trace.shape
    hits = reqs = 0
    for s in range(streams):
        req = cache.requests_from_trace(np.ascontiguousarray(trace[:, [s]]), 128)
        res = cache.simulate(req, capacity * layers, scope="layer", warmup_steps=warmup)
        hits, reqs = hits + res.hits, reqs + res.requests
    return hits / reqs


def test_finite_c_draws_nothing_from_the_generator():
    """The hot sets come from a child stream: rng ends where a c = inf call leaves it."""
    model = Zipf(32, 4, 0.7)
    ends = []
    for kw in ({}, {"c": 3.0, "groups": 2}, {"c": 3.0, "scope": "step"}, {"c_step": 2.0}, {"c": 1.0, "c_step": 2.0}):
        rng = np.random.default_rng(5)
        sample_trace(model, 12, 4, 2, rng, rho=0.3, **kw)
        ends.append(rng.random())
    assert len(set(ends)) == 1


@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.MT19937, np.random.Philox, np.random.SFC64])
def test_hot_sets_follow_the_generator_state(bit_generator):
    """The child streams are seeded by the generator's state: a restored state gives the same
    trace, and one more draw before the call gives other hot sets (with c = 0.05 the hot sets
    decide which experts a stream touches at all)."""
    model = Uniform(64, 2)
    rng = np.random.Generator(bit_generator(11))
    state = rng.bit_generator.state
    a = sample_trace(model, 30, 4, 2, rng, c=0.05, groups=4, c_step=1.0)
    rng.bit_generator.state = state
    np.testing.assert_array_equal(a, sample_trace(model, 30, 4, 2, rng, c=0.05, groups=4, c_step=1.0))
    rng.bit_generator.state = state
    rng.random()
    b = sample_trace(model, 30, 4, 2, rng, c=0.05, groups=4, c_step=1.0)
    assert not np.array_equal(np.unique(a[:, 0, 0]), np.unique(b[:, 0, 0]))


def test_nearby_c_changes_few_entries_and_large_c_tends_to_inf():
    base = hot_set_trace(20.0)
    assert np.mean(hot_set_trace(20.0 * (1 + 1e-3)) != base) < 0.01
    assert np.mean(hot_set_trace(21.0) != base) < 0.2
    assert np.mean(hot_set_trace(1e12) != hot_set_trace(np.inf)) < 1e-3


def test_hit_rate_is_smooth_and_monotone_in_c():
    """Smaller c, hotter private hot sets, more single-stream hits. At a fixed seed, along a grid
    of c in steps of 2.5 %, every step changes few trace entries and lowers the hit rate (with
    the rejection sampler some steps redrew every Gumbel (97 % of the entries changed) and the
    hit rate rose at c = 27: 0.8925 → 0.8941)."""
    grid = np.arange(20.0, 30.01, 0.5)
    traces = [hot_set_trace(c) for c in grid]
    changed = [np.mean(a != b) for a, b in zip(traces[:-1], traces[1:])]
    assert max(changed) < 0.15, changed
    hits = np.array([single_stream_lru_hit_rate(t) for t in traces])
    steps = np.diff(hits)
    assert np.all(steps < 0), steps
    assert np.max(-steps) < 3 * (hits[0] - hits[-1]) / steps.size


# ----------------------------------------------------------------------------- step context c_step


def test_c_step_inf_is_the_draw_without_it():
    model = Dirichlet(32, 4, 0.4)
    for kw in ({}, {"c": 3.0, "groups": 4}, {"c": 5.0, "scope": "step"}, {"c": np.array([np.inf, 2.0])}):
        plain = sample_trace(model, 15, 4, 2, np.random.default_rng(3), rho=0.3, **kw)
        for c_step in (np.inf, np.array([np.inf, np.inf])):
            with_inf = sample_trace(model, 15, 4, 2, np.random.default_rng(3), rho=0.3, c_step=c_step, **kw)
            np.testing.assert_array_equal(plain, with_inf)


def test_part_concentrations_split_the_harmonic_total():

    c = np.array([4.0, np.inf, 7.0, np.inf, 1e-3])
    cs = np.array([np.inf, 2.0, 3.0, np.inf, 1e5])
    a_g, a_t = part_concentrations(c, cs)
    np.testing.assert_array_equal(a_g[[0, 1, 3]], [4.0, 0.0, 0.0])
    np.testing.assert_array_equal(a_t[[0, 1, 3]], [0.0, 2.0, 0.0])
    total = 1.0 / (1.0 / c[[2, 4]] + 1.0 / cs[[2, 4]])
    np.testing.assert_allclose(a_g[[2, 4]] + a_t[[2, 4]], total, rtol=1e-12)
    np.testing.assert_allclose(a_g[[2, 4]], total**2 / c[[2, 4]], rtol=1e-12)


def _collisions(trace):
    """K = 1 traces: the rate at which one stream repeats its expert at the next step, and at
    which two streams pick the same expert at one step (streams s and s + 1)."""
    ids = trace[..., 0]  # (steps, streams, layers)
    return float(np.mean(ids[1:] == ids[:-1])), float(np.mean(ids[:, 1:] == ids[:, :-1]))


@pytest.mark.parametrize("c, c_step", [(3.0, np.inf), (np.inf, 2.0), (3.0, 2.0), (0.5, 8.0)])
def test_c_step_mean_and_second_moments(c, c_step):
    """K = 1, ρ = 0: a token picks expert i with probability q_s,t,i, so over independent traces

    - the pick frequency estimates E[q] (= w for every c, c_step),
    - a stream's repeat rate at the next step estimates Σ_i E[q_s,t,i · q_s,t+1,i] (lasting part),
    - two streams' same-step collision rate estimates Σ_i E[q_s,t,i · q_s',t,i] (step context).

    The second moments are derived independently: closed forms for one part alone (Dirichlet:
    E[q_i²] = w_i(α w_i + 1)/(α + 1), independent parts multiply to w_i²) and otherwise a Monte
    Carlo of the docstring's construction with numpy's own gamma sampler,
    q = (G + H)/Σ(G + H), G ~ Gamma(a_g w), H ~ Gamma(a_t w), 1/A = 1/c + 1/c_step, a_g = A²/c."""
    e = 8
    w = zipf_weights(e, 1.0)[np.random.default_rng(2).permutation(e)]
    reps, streams, steps = 60, 40, 40
    freq, lag, cross = [], [], []
    for seed in range(reps):
        tr = sample_trace(
            Uniform(e, 1),
            steps,
            streams,
            1,
            np.random.default_rng(seed),
            c=c,
            c_step=c_step,
            groups=streams,
            popularity=w[None],
        )
        freq.append(np.bincount(tr.ravel(), minlength=e) / tr.size)
        lag_r, cross_r = _collisions(tr)
        lag.append(lag_r)
        cross.append(cross_r)
    freq, lag, cross = np.array(freq), np.array(lag), np.array(cross)

    def second(alpha):
        return float(np.sum(w * (alpha * w + 1) / (alpha + 1))) if np.isfinite(alpha) else float(np.sum(w * w))

    if np.isinf(c_step):
        want_lag, want_cross = second(c), float(np.sum(w * w))
    elif np.isinf(c):
        want_lag, want_cross = float(np.sum(w * w)), second(c_step)
    else:
        A = 1.0 / (1.0 / c + 1.0 / c_step)
        a_g, a_t = A * A / c, A * A / c_step
        r = np.random.default_rng(123)
        n = 400_000
        g, g2 = r.standard_gamma(a_g * w, size=(2, n, e))
        h, h2 = r.standard_gamma(a_t * w, size=(2, n, e))

        def q(x, y):
            return (x + y) / (x + y).sum(axis=1, keepdims=True)

        want_lag = float(np.mean(np.sum(q(g, h) * q(g, h2), axis=1)))
        want_cross = float(np.mean(np.sum(q(g, h) * q(g2, h), axis=1)))
    se = freq.std(axis=0, ddof=1) / np.sqrt(reps)
    assert np.all(np.abs(freq.mean(axis=0) - w) < 5 * se + 1e-3), (freq.mean(axis=0), w)
    for got, want, name in ((lag, want_lag, "lag"), (cross, want_cross, "cross")):
        tol = 5 * got.std(ddof=1) / np.sqrt(reps) + 2e-3
        assert abs(got.mean() - want) < tol, (name, got.mean(), want, tol)


def test_step_context_alone_is_the_shared_step_draw():
    """c = inf, c_step = C routes every step by one Dirichlet(C·w) shared by all streams: the
    same law as c = C, groups = 1, scope = "step" (another random stream): one-step unions agree."""
    from moeroof.models.union import distinct_per_layer

    model = Zipf(128, 8, 0.7)
    w = model.popularity(2, np.random.default_rng(1))
    a = sample_trace(model, 300, 8, 2, np.random.default_rng(2), c_step=6.0, popularity=w)
    b = sample_trace(model, 300, 8, 2, np.random.default_rng(3), c=6.0, groups=1, scope="step", popularity=w)
    ua, ub = distinct_per_layer(a, 128), distinct_per_layer(b, 128)
    se = np.hypot(ua.std(), ub.std()) / np.sqrt(ua.shape[0])
    np.testing.assert_allclose(ua.mean(axis=0), ub.mean(axis=0), atol=5 * se)


def _marginal_plugin(w, k, alpha, b):
    """Plug-in one-step union of b independent tokens at the marginal inclusion E[π(q)],
    q ~ Dirichlet(α·w) (numpy's sampler; α = inf: q = w)."""
    from moeroof.models.union import union_plugin

    if np.isinf(alpha):
        pi = inclusion_probabilities(w, k)
    else:
        r = np.random.default_rng(17)
        q = np.stack([r.dirichlet(alpha * row, size=150) for row in w], axis=1)
        pi = inclusion_probabilities(q, k).mean(axis=0)
    return union_plugin(pi, b, k).union_per_layer[:, 0]


def test_c_step_with_lasting_hot_sets_gives_both_effects():
    """c finite and c_step finite (groups = streams, scope = "trace"): a single stream's LRU hits
    more than with c = inf (its lasting hot set), and the B streams of a step touch fewer
    experts than the plug-in at the marginal inclusion (the shared context). Each effect
    vanishes with its knob at inf: with c = inf a single stream hits as often as one routed by
    a fresh Dirichlet(c_step·w) every step (numpy's sampler, Gumbel-top-K by hand), and with
    c_step = inf the one-step union is the plug-in."""
    from moeroof.models.union import distinct_per_layer

    e, k, layers, streams, steps, b = 128, 8, 1, 32, 250, 8
    c, c_step = 20.0, 30.0
    model = Zipf(e, k, 0.8)
    w = model.popularity(layers, np.random.default_rng(99))

    def trace(cc, cs):
        return sample_trace(
            model, steps, streams, layers, np.random.default_rng(3), c=cc, c_step=cs, groups=streams, popularity=w
        )

    def union_ratio(tr, cc, cs):
        alpha = np.inf if np.isinf(cc) and np.isinf(cs) else 1.0 / (1.0 / cc + 1.0 / cs)
        measured = distinct_per_layer(tr.reshape(-1, b, layers, k), e).mean(axis=0)
        return float(np.mean(measured / _marginal_plugin(w, k, alpha, b)))

    both, no_c, no_step = trace(c, c_step), trace(np.inf, c_step), trace(c, np.inf)
    hit_both, hit_no_c = single_stream_lru_hit_rate(both), single_stream_lru_hit_rate(no_c)
    assert hit_both > hit_no_c + 0.1, (hit_both, hit_no_c)
    assert single_stream_lru_hit_rate(no_step) > hit_both  # the step context dilutes the hot set

    r = np.random.default_rng(8)
    g = r.standard_gamma(c_step * w, size=(steps, streams, layers, e))
    scores = np.log(g / g.sum(axis=-1, keepdims=True)) + r.gumbel(size=g.shape)
    fresh = np.argsort(-scores, axis=-1)[..., :k].astype(np.int32)
    assert hit_no_c == pytest.approx(single_stream_lru_hit_rate(fresh), abs=0.01)

    assert union_ratio(both, c, c_step) < 0.9
    assert union_ratio(no_c, np.inf, c_step) < 0.8
    assert union_ratio(no_step, c, np.inf) == pytest.approx(1.0, abs=0.025)


def test_nearby_c_step_changes_few_entries():
    base = hot_set_trace(20.0, c_step=30.0)
    assert np.mean(hot_set_trace(20.0, c_step=30.0 * (1 + 1e-3)) != base) < 0.01
    assert np.mean(hot_set_trace(20.0 * (1 + 1e-3), c_step=30.0) != base) < 0.01


def exact_inclusion_fractions(w, k: int) -> list[float]:
    """Plackett–Luce inclusion in exact rationals (weights as Fractions, any dynamic range)."""
    from fractions import Fraction

    w = [Fraction(x) for x in w]
    total = sum(w)
    pi = [Fraction(0)] * len(w)
    for order in itertools.permutations(range(len(w)), k):
        prob, left = Fraction(1), total
        for j in order:
            prob *= w[j] / left
            left -= w[j]
        for j in order:
            pi[j] += prob
    return [float(x) for x in pi]


@pytest.mark.parametrize("s", [2, 200, 400, 1000])
def test_zipf_inclusion_in_log_space_matches_exact_rationals(s):
    # r^-s underflows from s ≈ 300 (E = 256), and the integral then lost the top-K
    from fractions import Fraction

    e, k = 7, 3
    exact = exact_inclusion_fractions([Fraction(1, r**s) for r in range(1, e + 1)], k)
    got = inclusion_probabilities(zipf_log_weights(e, s), k, log=True)
    np.testing.assert_allclose(got, exact, atol=1e-9)


@pytest.mark.parametrize("k", [3, 4])
def test_tiered_inclusion_straddling_tier_matches_exact_rationals(k):
    # two experts far above the rest, then a tier of three of comparable weight, then one far below
    from fractions import Fraction

    exps = [0, 1, 1000, 1001, 1002, 3000]
    exact = exact_inclusion_fractions([Fraction(1, 2**x) for x in exps], k)
    got = inclusion_probabilities(-np.log(2.0) * np.array(exps, dtype=float), k, log=True)
    np.testing.assert_allclose(got, exact, atol=1e-9)
    assert got.sum() == pytest.approx(k, abs=1e-12)


@pytest.mark.parametrize("s", [400, 1000, 10_000, 1e6])
def test_zipf_large_s_includes_exactly_the_top_k(s):
    # as s → ∞ every token picks ranks 1…K: π = 1 there, 0 elsewhere, U(B) = K for every B
    pi = inclusion_probabilities(zipf_log_weights(256, s), 8, log=True)
    np.testing.assert_allclose(pi[:8], 1.0, atol=1e-12)
    np.testing.assert_allclose(pi[8:], 0.0, atol=1e-12)
    assert np.isfinite(zipf_log_weights(256, s)).all()


def test_zipf_weights_unchanged_where_they_are_representable():
    w = zipf_weights(64, 1.3)
    r = np.arange(1, 65, dtype=float)
    np.testing.assert_allclose(w, r**-1.3 / np.sum(r**-1.3), rtol=1e-13)


def test_zero_weights_come_after_every_positive_one():
    # fewer positive weights than K: the positive ones are always in, the zeros share the rest
    pi = inclusion_probabilities(np.array([0.5, 0.5, 0.0, 0.0, 0.0, 0.0]), 3)
    np.testing.assert_allclose(pi, [1, 1, 0.25, 0.25, 0.25, 0.25], atol=1e-12)


def test_zipf_trace_at_large_s_routes_the_top_k_ranks():
    rng = np.random.default_rng(5)
    tr = sample_trace(Zipf(32, 4, 5000.0), 6, 3, 2, rng)
    for layer in range(2):
        assert len(np.unique(tr[:, :, layer, :])) == 4


# ----------------------------------------------------------------------------- compiled kernels
#
# The compiled inclusion programme and trace sampler must give the numbers the numpy code gave,
# bit for bit (committed figures depend on them): each is checked against a reference copy of
# the numpy implementation it replaced.


# the numpy sample_trace the kernel replaced: one copy, kept with the benchmark that times it
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from report_hotspots import sample_trace_reference as _sample_trace_reference  # noqa: E402

_TRACE_CASES = [
    # (model, steps, streams, layers, knobs): the notebooks' shapes and every branch of the kernel
    (Uniform(288, 8), 6, 8, 12, {}),
    (Uniform(288, 8), 6, 8, 12, {"rho": 0.05}),
    (Uniform(288, 8), 6, 8, 12, {"rho": 0.71, "groups": 8}),
    (Zipf(64, 8, 1.2), 8, 4, 3, {"rho": 0.3, "c": 2.0, "groups": 4}),
    (Zipf(64, 8, 400.0), 5, 3, 2, {"rho": 0.2}),  # weights far below 1e-300: never screened
    (Dirichlet(288, 8, 0.3), 6, 4, 5, {"rho": 0.17, "scope": "step"}),
    (Dirichlet(32, 4, 0.4), 8, 6, 2, {"c": 3.0, "c_step": 1.5, "groups": 2, "rho": 0.3}),
    (Dirichlet(16, 3, 0.05), 8, 3, 2, {"c": 0.05, "scope": "step", "rho": 1.0}),
    (Uniform(8, 2), 12, 2, 4, {"rho": np.linspace(0.0, 0.9, 4), "prompt_tokens": 3}),
    (Uniform(6, 6), 5, 2, 2, {"rho": 0.5}),  # K = E: no boundary
    (Uniform(5, 1), 5, 2, 2, {"rho": 0.5}),
    # per-stream hot sets on a skewed popularity: most weights underflow beside the hot set, and
    # the screen drops those whose score cannot reach the K+1 best however large their draw
    (Dirichlet(288, 8, 0.28), 6, 4, 3, {"rho": 0.25, "c": 40.0, "groups": 4}),
]


@pytest.mark.parametrize("case", range(len(_TRACE_CASES)))
@pytest.mark.parametrize("seed", [0, 1, 20261201])
def test_sample_trace_matches_the_numpy_reference_bit_for_bit(case, seed):
    model, steps, streams, layers, knobs = _TRACE_CASES[case]
    r_new, r_ref = np.random.default_rng(seed), np.random.default_rng(seed)
    new = sample_trace(model, steps, streams, layers, r_new, **knobs)
    ref = _sample_trace_reference(model, steps, streams, layers, r_ref, **knobs)
    assert new.dtype == ref.dtype == np.int32
    assert np.array_equal(new, ref)
    assert r_new.bit_generator.state == r_ref.bit_generator.state  # the same draws, no more


def test_sample_trace_zero_popularity_and_too_few_positive_match_the_reference():
    for seed in range(4):
        pop = np.random.default_rng(seed).random((3, 20))
        pop[:, :12] = 0.0  # zero weights: -inf scores, never screened
        few = np.zeros((3, 20))
        few[:, :2] = 1.0  # fewer positive weights than K: ties at -inf, left to numpy
        tiny = pop.copy()
        tiny[:, :12] = 1e-310  # log weights near -713: below the rest by far more than any draw
        for popularity, c in ((pop, np.inf), (pop, 1.0), (few, np.inf), (tiny, np.inf)):
            knobs = {"rho": 0.3, "c": c, "groups": 3, "popularity": popularity}
            r_new, r_ref = np.random.default_rng(seed), np.random.default_rng(seed)
            new = sample_trace(Uniform(20, 4), 15, 3, 3, r_new, **knobs)
            ref = _sample_trace_reference(Uniform(20, 4), 15, 3, 3, r_ref, **knobs)
            assert np.array_equal(new, ref)


@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.MT19937, np.random.Philox])
def test_gumbel_from_uniforms_is_generator_gumbel_bit_for_bit(bit_generator):
    from moeroof.kernels import routing as routing_kernels
    from moeroof.models.routing import gumbel_uniforms

    a, b = np.random.Generator(bit_generator(7)), np.random.Generator(bit_generator(7))
    g = a.gumbel(size=(200, 301))
    u = gumbel_uniforms(b, (200, 301))
    assert np.array_equal(g.ravel().view(np.int64), routing_kernels.gumbel_from_uniforms(u.ravel()).view(np.int64))
    assert np.array_equal(a.random(8), b.random(8))  # both generators end in the same state


class _ZerosGenerator:
    """A stand-in generator whose doubles are a fixed sequence with exact zeros in it (a real
    stream returns 0 with probability 2^-53): ``random(n)`` and ``random(out=...)`` read it on."""

    def __init__(self, seq):
        self.seq, self.pos = np.asarray(seq, dtype=float), 0

    def random(self, size=None, out=None):
        n = out.size if out is not None else int(np.prod(size))
        vals = self.seq[self.pos : self.pos + n]
        self.pos += n
        if out is None:
            return vals.copy().reshape(size)
        out.reshape(n)[:] = vals
        return out


@pytest.mark.parametrize("into", [False, True])
def test_gumbel_uniforms_skip_exact_zeros_with_and_without_a_buffer(into):
    from moeroof.models.routing import gumbel_uniforms

    seq = np.random.default_rng(3).random(40)
    seq[[2, 5, 11, 13]] = 0.0  # zeros in the first draw and in the redraws
    want = seq[seq != 0.0][:12].reshape(3, 4)
    fake = _ZerosGenerator(seq)
    buf = np.full((3, 4), -1.0)
    got = gumbel_uniforms(fake, (3, 4), out=buf if into else None)
    assert np.array_equal(got, want)
    assert (got is buf) == into
    # the draws consumed, as Generator.gumbel consumes them: up to the 12th nonzero one, no more
    assert fake.pos == int(np.flatnonzero(seq != 0.0)[11]) + 1 == 16
    with pytest.raises(ValueError, match="C-contiguous"):
        gumbel_uniforms(_ZerosGenerator(seq), (3, 4), out=np.empty((4, 3)).T)


@pytest.mark.parametrize("n", list(range(0, 129)))
def test_pairwise_sum_is_numpys_sum(n):
    from moeroof.kernels import routing as routing_kernels

    x = np.random.default_rng(n).random((3, n)) * 10.0 ** np.random.default_rng(n + 1).integers(-8, 8, (3, n))
    want = np.sum(x, axis=-1)
    got = np.array([routing_kernels.pairwise_sum(np.ascontiguousarray(row), n) for row in x])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("e,k", [(128, 8), (16, 3), (40, 12), (60, 4), (30, 17), (10, 9)])
@pytest.mark.parametrize("alpha", [0.05, 1.0])
def test_inclusion_kernel_matches_the_numpy_programme_bit_for_bit(e, k, alpha, monkeypatch):
    from moeroof.models import routing as R

    w = np.random.default_rng(e * k).dirichlet(np.full(e, alpha), size=4)
    compiled = inclusion_probabilities(w, k)
    monkeypatch.setattr(R, "_KERNEL_MAX_K", 0)  # the numpy programme (kept for K > 128)
    assert np.array_equal(compiled, inclusion_probabilities(w, k))


@settings(max_examples=40, deadline=None)
@given(
    e=st.integers(2, 7),
    k_frac=st.floats(0.01, 1.0),
    alpha=st.floats(0.05, 20.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_inclusion_kernel_matches_enumeration_and_invariants(e, k_frac, alpha, seed):
    k = max(1, min(e, int(round(k_frac * e))))
    w = np.random.default_rng(seed).dirichlet(np.full(e, alpha)) + 1e-12
    pi = inclusion_probabilities(w, k)
    assert np.allclose(pi, exact_inclusion(w, k), rtol=1e-7, atol=1e-9)
    assert abs(pi.sum() - k) < 1e-6
    assert np.all((pi >= 0) & (pi <= 1))
    order = np.argsort(w, kind="stable")
    assert np.all(np.diff(pi[order]) >= -1e-9)


def test_importing_routing_loads_no_kernel_library():
    import subprocess
    import sys

    code = "import sys, moeroof.models.routing; print('moeroof.kernels.routing' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- the C kernels by their definitions
#
# routing_kernels runs C (kernels/native/routing.c); each kernel is held here against a plain
# numpy or pure-Python statement of what it computes, bit for bit, on small cases and edges.


def _below_k_programme(p: np.ndarray, k: int) -> np.ndarray:
    """``P(N_{-j}(t) < K)`` by the prefix/suffix programme in plain numpy: the distribution of
    the arrivals among the experts before j times the cumulated one among those after j,
    summed by ``np.sum``."""
    m, e, n = p.shape
    prefix = [np.zeros((m, n, k))]
    prefix[0][:, :, 0] = 1.0
    for j in range(e):
        pj, cur = p[:, j, :, None], prefix[-1]
        nxt = cur * (1.0 - pj)
        nxt[:, :, 1:] += cur[:, :, :-1] * pj
        prefix.append(nxt)
    suffix = np.zeros((m, n, k))
    suffix[:, :, 0] = 1.0
    out = np.empty((m, e, n))
    for j in range(e - 1, -1, -1):
        out[:, j, :] = np.sum(prefix[j] * np.cumsum(suffix, axis=-1)[:, :, ::-1], axis=-1)
        pj = p[:, j, :, None]
        nxt = suffix * (1.0 - pj)
        nxt[:, :, 1:] += suffix[:, :, :-1] * pj
        suffix = nxt
    return out


@pytest.mark.parametrize("m,e", [(1, 1), (3, 2), (1, 7), (3, 40)])
@pytest.mark.parametrize("k", [1, 2, 7, 8, 9, 16])
def test_inclusion_below_k_is_the_numpy_programme_bit_for_bit(m, e, k):
    from moeroof.kernels import routing as routing_kernels

    rng = np.random.default_rng(m * 1000 + e * 10 + k)
    for n in (1, 5, 33, 70):  # one block of nodes, several, and a partial last one
        p = rng.random((m, e, n)) ** 3
        p[rng.random(p.shape) < 0.1] = 0.0  # experts that cannot have arrived, and ones that have
        p[rng.random(p.shape) < 0.1] = 1.0
        got = routing_kernels.inclusion_below_k(p, k)
        assert np.array_equal(got.view(np.int64), _below_k_programme(p, k).view(np.int64)), n


def test_log_weight_rows_is_the_row_maximum_and_libm_exp():
    import math

    from moeroof.kernels import routing as routing_kernels

    rng = np.random.default_rng(4)
    logq = rng.standard_normal((6, 50)) * 30
    logq[rng.random(logq.shape) < 0.3] = -np.inf
    logq[2] = -np.inf  # no finite entry
    logq[3, :10] = math.log(1e-320)
    top, rel = routing_kernels.log_weight_rows(logq)
    assert np.array_equal(top, logq.max(axis=1))
    want = [[math.exp(x - m) if m > -math.inf else 0.0 for x in row] for row, m in zip(logq.tolist(), top.tolist())]
    assert np.array_equal(rel.view(np.int64), np.array(want).view(np.int64))


def _top_k_reference(logq, u, keep_u, rho, prev, k):
    """One step of a trace by its definition, in pure Python: per row the kept experts (slot q of
    ``prev`` where ``keep_u < rho``) in their slots' order, then the others by descending score
    ``logq + G(u)``, ``G(u) = 0.0 - 1.0 * log(-log(1.0 - u))`` with libm's log (math.log), equal
    scores (−inf ones included) by ascending id."""
    import math

    def score(lq: float, ui: float) -> float:  # −inf + any draw is −inf
        return lq + (0.0 - 1.0 * math.log(-math.log(1.0 - ui))) if lq > -math.inf else -math.inf

    rows, e = logq.shape
    out = np.empty((rows, k), np.int32)
    for r in range(rows):
        kept = [] if prev is None else [int(prev[r, q]) for q in range(keep_u.shape[1]) if keep_u[r, q] < rho[r]]
        ranked = sorted((-score(logq[r, i], u[r, i]), i) for i in range(e) if i not in kept)
        out[r] = kept + [i for _, i in ranked[: k - len(kept)]]
    return out


def _log_weights(kind: str, rows: int, e: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "dirichlet":
        with np.errstate(divide="ignore"):
            return np.log(rng.dirichlet(np.full(e, 0.3), size=rows))
    if kind == "zeros":  # zero weights, a row with fewer finite weights than K, one with none
        lq = rng.standard_normal((rows, e)) * 3
        lq[rng.random((rows, e)) < 0.5] = -np.inf
        lq[0, 1:] = -np.inf
        lq[-1] = -np.inf
        return lq
    if kind == "tiny":  # weights of 1e-320 (log -737) beside ordinary ones
        lq = rng.standard_normal((rows, e))
        lq[rng.random((rows, e)) < 0.6] = np.log(1e-320)
        return lq
    if kind == "huge":  # |log weight| beyond 1e9: the rows the screen leaves alone, and a row far below 0
        lq = rng.standard_normal((rows, e)) * 5 + 1e10
        lq[0, : max(1, e // 2)] = -1e10
        lq[0, -1] = 0.0
        return lq
    return np.round(rng.standard_normal((rows, e)))  # "ties": equal weights


@pytest.mark.parametrize("kind", ["dirichlet", "zeros", "tiny", "huge", "ties"])
def test_top_k_steps_is_the_top_k_of_the_gumbel_scores(kind):
    """The trace kernel against its definition (:func:`_top_k_reference`) over every screen's
    branch: skewed and equal weights, zero ones, 1e-320 ones, |log weight| > 1e9; draws with
    exact ties (eighths) and at the extremes; no stickiness, ρ = 1, ρ near 1, ρ per row."""
    from moeroof.kernels import routing as routing_kernels

    rng = np.random.default_rng(sum(map(ord, kind)))
    for case in range(40):
        e = int(rng.choice([1, 2, 3, 5, 8, 13, 40, 130, 384]))
        k = int(rng.integers(1, min(e, 16) + 1))
        rows, steps = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        logq = _log_weights(kind, rows, e, rng)
        u = rng.random((steps, rows, e))
        if case % 3 == 1:
            u = rng.integers(1, 8, u.shape) / 8.0
        elif case % 3 == 2:
            u[rng.random(u.shape) < 0.1] = 2.0**-53
            u[rng.random(u.shape) < 0.1] = 1.0 - 2.0**-53
        keep_u = rng.random((steps, rows, k if case % 4 else 0))
        rho = rng.choice([np.zeros(rows), np.ones(rows), np.full(rows, 1.0 - 1e-12), rng.random(rows)])
        top, rel = routing_kernels.log_weight_rows(logq)
        out = np.full((steps, rows, k), -1, np.int32)
        routing_kernels.top_k_steps(logq, top, rel, u, keep_u, rho, out, 0, k)
        prev = None
        for t in range(steps):
            want = _top_k_reference(logq, u[t], keep_u[t], rho, prev, k)
            assert np.array_equal(out[t], want), (case, t, e, k)
            prev = want
        # step by step from the middle of the trace, into another dtype: the same picks
        wide = out.astype(np.int64)
        wide[1:] = -1
        for t in range(1, steps):
            routing_kernels.top_k_steps(logq, top, rel, u[t : t + 1], keep_u[t : t + 1], rho, wide, t, k)
        assert np.array_equal(wide, out)


def test_the_routing_kernels_refuse_to_run_without_the_c_library(monkeypatch):
    """No fallback: without the C library a kernel raises NativeBuildError saying why."""
    from moeroof.kernels import loader
    from moeroof.kernels import routing as routing_kernels
    from moeroof.models.routing import Uniform, sample_trace

    def unbuilt(*args, **kwargs):
        raise loader.NativeBuildError("the C kernels (moeroof.kernels._native) cannot be used: not built")

    monkeypatch.setattr(loader, "load", unbuilt)
    routing_kernels.library.cache_clear()
    try:
        with pytest.raises(loader.NativeBuildError, match="not built"):
            routing_kernels.gumbel_from_uniforms(np.full(3, 0.5))
        with pytest.raises(loader.NativeBuildError, match="not built"):
            sample_trace(Uniform(8, 2), 2, 2, 1, np.random.default_rng(0))
    finally:
        routing_kernels.library.cache_clear()


def test_weights_from_inclusion_reproduce_the_inclusion_probabilities():
    """The weights' own top-K inclusion probabilities (recomputed by inclusion_probabilities) are
    the targets: a skewed row, a row with experts never chosen (weight 0) and one with an expert
    every token takes (π = 1)."""
    from moeroof.models.routing import inclusion_probabilities, weights_from_inclusion

    rng = np.random.default_rng(11)
    k, e = 4, 24
    base = rng.dirichlet(np.full(e, 0.3), size=3)
    base[1, :5] = 0.0
    base[1] /= base[1].sum()
    pi = inclusion_probabilities(base, k)
    pi[2] = np.r_[1.0, inclusion_probabilities(base[2:3, 1:] / base[2, 1:].sum(), k - 1)[0]]
    assert np.all(pi <= 1.0) and np.allclose(pi.sum(axis=1), k)
    w, err = weights_from_inclusion(pi, k)
    assert err <= 1e-9
    assert np.allclose(w.sum(axis=1), 1.0)
    assert np.all(w[1, :5] == 0.0)
    assert np.max(np.abs(inclusion_probabilities(w, k) - pi)) <= 1e-8


class _ZerosInjected:
    """A real generator whose ``random`` returns exact zeros at chosen draw positions (each
    draw still consumes the real stream), and whose ``gumbel`` rejects them as numpy's does:
    the reference sample_trace (``rng.gumbel``) and the suite's (uniforms into a buffer) must
    then consume the same draws and give the same trace."""

    def __init__(self, seed, zeros):
        self.rng, self.zeros, self.pos = np.random.default_rng(seed), set(zeros), 0

    def random(self, size=None, out=None):
        vals = self.rng.random(size if out is None else out.shape)
        flat = vals.reshape(-1)
        for i in range(flat.size):
            if self.pos + i in self.zeros:
                flat[i] = 0.0
        self.pos += flat.size
        if out is None:
            return vals
        out[...] = vals
        return out

    def gumbel(self, size):
        from moeroof.kernels import routing as routing_kernels
        from moeroof.models.routing import gumbel_uniforms

        u = gumbel_uniforms(self, tuple(size))
        return routing_kernels.gumbel_from_uniforms(u.ravel()).reshape(size)


def test_sample_trace_redraws_exact_zero_uniforms_as_numpys_gumbel():
    model = Uniform(16, 3)
    zeros = [5, 40, 41, 200, 777]  # in the first step's draws, twice in a row, and in later steps
    got = sample_trace(model, 6, 4, 3, _ZerosInjected(9, zeros))
    want = _sample_trace_reference(model, 6, 4, 3, _ZerosInjected(9, zeros))
    np.testing.assert_array_equal(got, want)
    plain = sample_trace(model, 6, 4, 3, np.random.default_rng(9))
    assert not np.array_equal(got, plain)  # the zeros did move the stream


# ----------------------------------------------------------------------------- unseen experts


def test_unseen_mass_is_good_turing_and_tracks_the_true_missing_mass():
    """A short sample's zero is not a zero probability: over 400 samples of 300 picks from a
    Zipf(1.1) popularity over 200 experts, the mass the estimate gives the never-picked experts
    (N₁/N, Good 1953) averages the true mass of those experts within 0.01 — the estimator's bias
    is O(1/N) — where a raw count / N gives them none."""
    from moeroof.models.routing import inclusion_from_counts

    rng = np.random.default_rng(5)
    e, n = 200, 300
    p = 1.0 / np.arange(1, e + 1) ** 1.1
    p /= p.sum()
    est, true = [], []
    for _ in range(400):
        counts = rng.multinomial(n, p)[None, :]
        pi, unseen = inclusion_from_counts(counts, [n], 1)
        zero = counts[0] == 0
        assert pi.sum() == pytest.approx(1.0) and unseen == pytest.approx((counts == 1).sum() / n)
        assert np.allclose(pi[0, zero], unseen / zero.sum())  # spread evenly over the unseen
        est.append(pi[0, zero].sum())
        true.append(p[zero].sum())
    assert np.mean(true) > 0.1  # the raw estimate's error would be this large
    assert abs(np.mean(est) - np.mean(true)) < 0.01


@given(st.lists(st.integers(1, 50), min_size=2, max_size=12), st.integers(1, 3))
@settings(max_examples=50, deadline=None)
def test_a_sample_that_saw_every_expert_is_read_as_count_over_tokens(counts, k):
    """No zero count: π is count / T rescaled to sum to K, untouched by the unseen share."""
    from moeroof.models.routing import inclusion_from_counts

    c = np.array([counts], dtype=float)
    pi, unseen = inclusion_from_counts(c, [c.sum() / k], k)
    assert unseen == 0.0
    np.testing.assert_allclose(pi, np.clip(c / c.sum() * k, 0, 1))


_ZERO_WEIGHT_PROBE = """
import hashlib, numpy as np
from moeroof.models.routing import sample_topk
w = np.zeros((3, 40)); w[:, [5, 17, 30]] = [1.0, 2.0, 3.0]
picks = sample_topk(w, 8, 500, np.random.default_rng(11))
print(hashlib.sha256(picks.tobytes()).hexdigest())
"""


def test_sample_topk_with_fewer_positive_weights_than_k_is_the_same_everywhere():
    """Where fewer than K weights are positive, the zero-weight experts tie at −inf: they fill
    the remaining slots in id order (after the positive ones, which come first by their
    perturbed scores), and the picks drawn with every dispatched SIMD feature turned off equal
    the ones drawn here (numpy's partition orders ties by its SIMD path)."""
    import subprocess

    w = np.zeros((3, 40))
    w[:, [5, 17, 30]] = [1.0, 2.0, 3.0]
    picks = sample_topk(w, 8, 500, np.random.default_rng(11))
    assert np.all(np.sort(picks[..., :3], axis=-1) == [5, 17, 30])
    rest = [e for e in range(40) if e not in (5, 17, 30)][:5]
    assert np.all(picks[..., 3:] == rest)
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:
        __cpu_dispatch__, __cpu_features__ = [], {}
    found = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(found)}
    here = subprocess.run([sys.executable, "-c", _ZERO_WEIGHT_PROBE], capture_output=True, text=True, check=True)
    plain = subprocess.run(
        [sys.executable, "-c", _ZERO_WEIGHT_PROBE], capture_output=True, text=True, env=env, check=True
    )
    assert plain.stdout == here.stdout and len(here.stdout.strip()) == 64
