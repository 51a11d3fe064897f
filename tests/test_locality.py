"""The locality distribution (moeroof.models.locality): the hot set in picks against Monte
Carlo, its inverse, off, and the draws paired by strength."""

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
