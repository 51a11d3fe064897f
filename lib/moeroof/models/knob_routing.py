"""Routing from knobs: a trace sampled from a routing family's skew, stickiness ρ and per-stream
locality c (:class:`RoutingKnobs`), as ``moeroof fit-routing`` fits them
(:mod:`moeroof.fit.routing`) and ``plan`` and ``fit-plan`` run them
(:mod:`moeroof.models.local_routing`). The popularity is drawn by inversion from fixed uniforms
(common random numbers: smooth in the skew), the trace by
:func:`moeroof.models.routing.sample_trace` with one hot set per stream."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import gammaincinv

from moeroof.core.rng import generator
from moeroof.models.locality import layer_knobs
from moeroof.models.routing import Uniform, sample_trace, zipf_weights

__all__ = ["FAMILIES", "DEFAULT_HISTORY", "RoutingKnobs", "layer_popularity", "sample_knob_trace"]

FAMILIES = ("dirichlet", "zipf")
#: history held when not fitted: a warm cache (tokens before the counted steps)
DEFAULT_HISTORY = 256


@dataclass(frozen=True)
class RoutingKnobs:
    """Routing knobs and the cache's warmth (module docstring). ``skew`` is α (``dirichlet``:
    smaller is more skewed) or s (``zipf``: larger is more skewed); ``c`` the per-stream
    locality (``inf`` = off); ``history_tokens`` tokens served before the counted steps."""

    family: str = "dirichlet"
    skew: float = 0.5
    rho: float = 0.0
    c: float = math.inf
    history_tokens: int = DEFAULT_HISTORY

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if not np.isfinite(self.skew) or self.skew < 0 or (self.family == "dirichlet" and self.skew <= 0):
            raise ValueError(f"skew must be finite and > 0 (>= 0 for zipf), got {self.skew!r}")
        if not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"rho must be in [0, 1], got {self.rho!r}")
        if not self.c > 0:
            raise ValueError(f"c must be > 0 (inf for off), got {self.c!r}")
        if int(self.history_tokens) != self.history_tokens or self.history_tokens < 0:
            raise ValueError(f"history_tokens must be an integer >= 0, got {self.history_tokens!r}")

    @property
    def skew_name(self) -> str:
        return "alpha" if self.family == "dirichlet" else "s"

    def label(self) -> str:
        c = "off" if math.isinf(self.c) else f"{self.c:.3g}"
        return (
            f"{self.family} {self.skew_name}={self.skew:.3g}, rho={self.rho:.3g}, locality c={c}, "
            f"history {self.history_tokens} tokens"
        )


def layer_popularity(knobs: RoutingKnobs, experts: int, layers: int, seed: int) -> np.ndarray:
    """Per-layer popularity (layers, E) of the knobs' family at ``seed``, by inversion from fixed
    uniforms (common random numbers: smooth in the skew; module docstring)."""
    u = generator(int(seed), "popularity").random((2, layers, experts))
    u1 = np.clip(u[0], 1e-12, 1 - 1e-12)
    if knobs.family == "zipf":
        ranks = np.argsort(np.argsort(u1, axis=1), axis=1)  # a random permutation per layer
        return zipf_weights(experts, knobs.skew)[ranks]
    a = float(knobs.skew)
    logg = np.log(np.maximum(gammaincinv(a + 1.0, u1), 1e-300)) + np.log(np.maximum(u[1], 1e-300)) / a
    logw = logg - np.logaddexp.reduce(logg, axis=1, keepdims=True)
    return np.exp(logw)


def sample_knob_trace(
    knobs: RoutingKnobs,
    popularity: np.ndarray,
    top_k: int,
    streams: int,
    steps: int,
    seed: int,
    *,
    first_layer: bool = False,
) -> np.ndarray:
    """A trace (steps, M, layers, K) under the knobs: stickiness ρ and per-stream locality c
    (:func:`moeroof.models.routing.sample_trace`, ``groups=streams, scope="trace"``), drawn from
    ``default_rng([seed, M, "routing"])``. ``first_layer``: the trace's layer 0 is the model's
    first MoE layer (the trace holds all its layers, in order), which has no locality
    (:func:`moeroof.models.locality.layer_knobs`); otherwise every layer stands for a typical one
    and carries the knobs."""
    layers, experts = popularity.shape
    rng = generator(int(seed), int(streams), "routing")
    rho, c = layer_knobs(knobs.rho, knobs.c, layers) if first_layer else (knobs.rho, knobs.c)
    kw: dict[str, Any] = dict(c=c, rho=rho, groups=streams, scope="trace", popularity=popularity)
    return sample_trace(Uniform(experts, top_k), steps, streams, layers, rng, **kw)
