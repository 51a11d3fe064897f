"""Padding in traces (core.masks): live tokens and streams, and the per-layer incidence counts."""

from __future__ import annotations

import numpy as np

from moeroof.core.masks import live_streams, live_tokens, trace_counts


def test_trace_counts_by_hand():
    topk = np.full((1, 1, 2, 2), -1)  # one step, one stream, two layers; layer 1 has no token
    topk[0, 0, 0] = [0, 1]
    counts, tokens = trace_counts(topk, 3)
    assert counts.tolist() == [[1, 1, 0], [0, 0, 0]] and tokens.tolist() == [1, 0]


def test_trace_counts_sum_to_k_per_live_token():
    rng = np.random.default_rng(0)
    topk = np.stack([rng.permutation(16)[:4] for _ in range(5 * 3 * 2)]).reshape(5, 3, 2, 4)
    topk[1, 2] = -1  # stream 2 has no token at step 1
    counts, tokens = trace_counts(topk, 16)
    assert tokens.tolist() == [14, 14]
    assert counts.sum(axis=1).tolist() == [56, 56]
    assert counts[0, topk[0, 0, 0, 0]] >= 1


def test_live_tokens_and_streams():
    topk = np.zeros((1, 2, 2, 2), dtype=int)
    topk[0, 1, 1] = -1  # stream 1 lacks its layer-1 token
    assert live_tokens(topk).tolist() == [[[True, True], [True, False]]]
    assert live_streams(topk).tolist() == [[True, False]]
