"""Routing models: inclusion probabilities against exact enumeration and Monte Carlo."""

from __future__ import annotations

import itertools

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
    sample_topk,
    sample_trace,
    zipf_weights,
)


def exact_inclusion(w: np.ndarray, k: int) -> np.ndarray:
    """Plackett–Luce inclusion by enumerating every ordered K-tuple (independent derivation)."""
    w = np.asarray(w, dtype=float) / np.sum(w)
    pi = np.zeros(w.size)
    for order in itertools.permutations(range(w.size), k):
        prob, left = 1.0, 1.0
        for j in order:
            prob *= w[j] / left
            left -= w[j]
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
