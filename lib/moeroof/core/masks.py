"""Padding in routing traces: the one definition of a live token.

A trace ``topk`` has shape (steps, streams, layers, K) — or any leading axes before
(layers, K) — and holds expert ids, with :data:`PAD` (``-1``) where a stream has no token. A
token is *live* when all K of its ids are experts (``≥ 0``); the data loader rejects tokens that
are only partly padding (:func:`partial_tokens`), so "all K ids" and "any id" agree on every
trace it accepts. A stream is live at a step when it has a live token in every layer (a capture
that dropped one layer's token would otherwise put fewer than K experts into that layer).
"""

from __future__ import annotations

import numpy as np

__all__ = ["PAD", "live_tokens", "live_streams", "partial_tokens", "ids_or"]

#: the padding id: "no token here"
PAD = -1


def live_tokens(topk) -> np.ndarray:
    """Boolean (..., layers): the token has K expert ids (none is padding)."""
    return (np.asarray(topk) >= 0).all(axis=-1)


def live_streams(topk) -> np.ndarray:
    """Boolean (...,) with the layer and K axes reduced: a live token in every layer."""
    return live_tokens(topk).all(axis=-1)


def partial_tokens(topk) -> np.ndarray:
    """Boolean (..., layers): the token mixes padding and expert ids (invalid in a trace)."""
    pad = np.asarray(topk) == PAD
    return pad.any(axis=-1) & ~pad.all(axis=-1)


def ids_or(topk, fill: int) -> np.ndarray:
    """The ids with every padding entry (any negative id) replaced by ``fill`` — e.g. a sink
    column ``E`` that scatter-based counters then drop."""
    arr = np.asarray(topk)
    return np.where(arr >= 0, arr, fill)
