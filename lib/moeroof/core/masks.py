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

__all__ = ["PAD", "live_tokens", "live_streams", "partial_tokens", "ids_or", "trace_counts"]

#: the padding id: "no token here"
PAD = -1


def live_tokens(topk) -> np.ndarray:
    """Boolean (..., layers): the token has K expert ids (none is padding)."""
    return np.asarray((np.asarray(topk) >= 0).all(axis=-1))


def live_streams(topk) -> np.ndarray:
    """Boolean (...,) with the layer and K axes reduced: a live token in every layer."""
    return np.asarray(live_tokens(topk).all(axis=-1))


def partial_tokens(topk) -> np.ndarray:
    """Boolean (..., layers): the token mixes padding and expert ids (invalid in a trace)."""
    pad = np.asarray(topk) == PAD
    return pad.any(axis=-1) & ~pad.all(axis=-1)


def ids_or(topk, fill: int) -> np.ndarray:
    """The ids with every padding entry (any negative id) replaced by ``fill`` — e.g. a sink
    column ``E`` that scatter-based counters then drop."""
    arr = np.asarray(topk)
    return np.where(arr >= 0, arr, fill)


def trace_counts(topk, experts: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts (L, E), tokens (L,)) of a (steps, streams, layers, K) id array, padding skipped.

    A token counts each of its K distinct experts once (incidence); tokens per layer are the
    (step, stream) cells with a live token in that layer. Reads a layer at a time, so a
    memory-mapped trace is never loaded whole.
    """
    n_layers = topk.shape[2]
    counts = np.zeros((n_layers, experts), dtype=np.int64)
    tokens = np.zeros(n_layers, dtype=np.int64)
    for l in range(n_layers):
        ids = np.asarray(topk[:, :, l, :])
        live = live_tokens(ids)
        tokens[l] = int(live.sum())
        counts[l] = np.bincount(ids[live].ravel().astype(np.int64), minlength=experts)[:experts]
    return counts, tokens
