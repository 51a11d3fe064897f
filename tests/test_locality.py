"""The locality distribution (moeroof.models.locality): the hot set in picks against Monte
Carlo, its inverse, off, the draws paired by strength, and the first MoE layer without
locality (layer_knobs; the trace that holds it, exactly the independent draw there)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeroof.models.locality import (
    C_PER_EXPERT_FLOOR,
    Locality,
    c_per_expert_from_hot_set,
    hot_set_from_c,
    layer_knobs,
)


@pytest.mark.parametrize(("experts", "c"), [(8, 4.7), (128, 75.0), (64, 3.0)])
def test_the_hot_set_is_the_experts_a_stream_spreads_over_by_monte_carlo(experts, c):
    """W = (c + 1)/(c/E + 1) is 1/E[Σ q_i²] for q ~ Dirichlet(c/E, …, c/E): against draws."""
    rng = np.random.default_rng(5)
    q = rng.dirichlet(np.full(experts, c / experts), size=200_000)
    w_mc = 1.0 / np.mean(np.sum(q * q, axis=1))
    assert hot_set_from_c(c, experts, 1) == pytest.approx(w_mc, rel=0.01)


@settings(max_examples=60, deadline=None)
@given(
    experts=st.integers(4, 1024),
    top_k=st.integers(1, 4),
    c_per_expert=st.floats(C_PER_EXPERT_FLOOR, 1e3),
)
def test_a_models_c_comes_back_from_its_hot_set(experts, top_k, c_per_expert):
    h = hot_set_from_c(c_per_expert * experts, experts, top_k)
    assert 0 < h * top_k <= experts
    assert c_per_expert_from_hot_set(h, experts, top_k) == pytest.approx(c_per_expert, rel=1e-6)


def test_off_is_every_expert_and_a_hot_set_of_every_expert_is_off():
    assert hot_set_from_c(math.inf, 60, 4) == pytest.approx(15.0)
    assert math.isinf(c_per_expert_from_hot_set(15.0, 60, 4)) and math.isinf(c_per_expert_from_hot_set(40.0, 60, 4))
    # the same hot set in picks is local for a model of more experts
    assert c_per_expert_from_hot_set(15.0, 256, 4) < 1.0


def test_the_same_hot_set_in_picks_is_a_different_c_per_expert_for_each_model():
    """Mixtral's (8 experts, top-2) and Qwen3's (128, top-8) fitted hot sets are 3.9 and 6.0
    picks apart from what c/E says (34 and 0.59): the transfer the prior carries."""
    h_mixtral = float(hot_set_from_c(33.6 * 8, 8, 2))
    h_qwen3 = float(hot_set_from_c(0.586 * 128, 128, 8))
    assert 3.5 < h_mixtral < 4.0 < 5.5 < h_qwen3 < 6.5
    # Qwen3's hot set for Mixtral's shape: 48 experts of 8 is off
    assert math.isinf(c_per_expert_from_hot_set(h_qwen3, 8, 2))


def test_draws_pair_the_knobs_by_strength_and_give_each_model_its_c():
    loc = Locality((math.log(0.25 / 0.75), math.log(5.0)), (0.6, 0.4), 1)
    pairs = loc.draws(8)
    rho = [r for r, _ in pairs]
    h = [x for _, x in pairs]
    assert rho == sorted(rho) and h == sorted(h, reverse=True), "least local first"
    for_model = loc.draws_for(8, 256, 8)
    assert [r for r, _ in for_model] == rho
    assert [c for _, c in for_model] == pytest.approx([float(c_per_expert_from_hot_set(x, 256, 8)) for x in h])
    r_c, c_c = loc.centre_for(256, 8)
    assert r_c == pytest.approx(0.25) and c_c == pytest.approx(float(c_per_expert_from_hot_set(5.0, 256, 8)))


def test_layer_knobs_turn_the_first_layer_off_and_keep_the_rest():
    rho, c = layer_knobs(0.3, 12.0, 4)
    assert rho.tolist() == [0.0, 0.3, 0.3, 0.3] and c.tolist() == [math.inf, 12.0, 12.0, 12.0]
    given_rho, given_c = np.array([0.5, 0.1, 0.2]), np.array([3.0, 4.0, math.inf])
    rho, c = layer_knobs(given_rho, given_c, 3)
    assert rho.tolist() == [0.0, 0.1, 0.2] and c.tolist() == [math.inf, 4.0, math.inf]
    assert given_rho[0] == 0.5 and given_c[0] == 3.0  # the caller's arrays are left alone
    rho, c = layer_knobs(0.4, math.inf, 1)  # a trace of the first layer alone has no locality
    assert rho.tolist() == [0.0] and c.tolist() == [math.inf]


def test_a_trace_that_holds_the_first_layer_routes_it_as_independent_tokens():
    """With first_layer, the trace's layer 0 is exactly the draw with locality off (the Gumbel
    draws are the same at every ρ and c) and its other layers exactly the draw without the rule
    (the stickiness and hot-set draws come from child streams of fixed size)."""
    from moeroof.fit.routing import RoutingKnobs, layer_popularity, sample_knob_trace

    knobs = RoutingKnobs(family="zipf", skew=0.9, rho=0.5, c=20.0)
    w = layer_popularity(knobs, 32, 3, 4)
    ruled = sample_knob_trace(knobs, w, 4, 3, 60, 9, first_layer=True)
    plain = sample_knob_trace(knobs, w, 4, 3, 60, 9)
    off = sample_knob_trace(RoutingKnobs(family="zipf", skew=0.9), w, 4, 3, 60, 9)
    assert np.array_equal(ruled[:, :, 0], off[:, :, 0]) and not np.array_equal(ruled[:, :, 0], plain[:, :, 0])
    assert np.array_equal(ruled[:, :, 1:], plain[:, :, 1:])


def test_a_simulated_first_layer_alone_sees_no_locality():
    """fit-routing's simulation of every layer of a model applies the rule: a one-layer model's
    hit rate is the same at any ρ and c; a model simulated on fewer layers than it has (stand-ins
    for its typical layers) keeps the knobs on all of them."""
    from moeroof.data.points import Point
    from moeroof.fit.routing import RoutingKnobs, simulate_points

    pts = [Point(kind="hit_rate", batch=1, capacity_experts=6.0, policy="lru", scope="layer", value=None)]
    flat, local = RoutingKnobs(family="zipf", skew=0.8), RoutingKnobs(family="zipf", skew=0.8, rho=0.6, c=5.0)
    one = [float(simulate_points(k, pts, 32, 4, 1, seeds=(0, 1)).mean()) for k in (flat, local)]
    assert one[0] == one[1]
    many = [float(simulate_points(k, pts, 32, 4, 40, seeds=(0, 1), max_sim_layers=2).mean()) for k in (flat, local)]
    assert many[1] > many[0] + 0.05
