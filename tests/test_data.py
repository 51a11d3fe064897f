"""The embedded data: labelled synthetic, and matched to the published statistics it cites.

Each check recomputes the statistic from the stored file (not from the generator), against
the published figure (docs/sources.md) or seed 003's, with the tolerance stated.
"""

from __future__ import annotations

import numpy as np
import pytest

from moeroof.core.paths import DATA_DIR
from moeroof.data.io import load_any, read_histogram, read_trace
from moeroof.models.routing import consecutive_overlap

FILES = sorted(p for p in DATA_DIR.rglob("*") if p.suffix in {".csv", ".npz", ".npy"})


def test_data_folder_has_the_embedded_sets():
    names = {p.name for p in FILES}
    assert {
        "deepseek-v3-like.csv",
        "glm5-seed003-per-layer.csv",
        "glm5-seed003-summed.csv",
        "qwen3-30b-a3b-like.npz",
    } <= names


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_embedded_file_is_labelled_synthetic_with_its_generator(path):
    data = load_any(path)
    assert data.meta.get("provenance") == "synthetic"
    assert "scripts/make_data.py" in data.meta.get("source", "")
    generator = data.meta.get("generator")
    assert isinstance(generator, dict) and generator.get("calibrated_on")


def test_deepseek_like_hottest_expert_share_matches_published():
    # DeepSeek-V3/R1 on GPQA (johanna-rock/moe-balance): hottest expert's share of a layer
    # min 1.25 %, median 2.36 %, max 5.19 %. Tolerance 5 % relative (sampling noise of 20k tokens).
    h = read_histogram(DATA_DIR / "histograms" / "deepseek-v3-like.csv")
    shares = h.counts / h.counts.sum(axis=1, keepdims=True)
    hottest = shares.max(axis=1)
    np.testing.assert_allclose([hottest.min(), np.median(hottest), hottest.max()], [0.0125, 0.0236, 0.0519], rtol=0.05)
    assert h.layers == 58 and h.experts == 256 and h.top_k == 8


def test_glm5_summed_histogram_matches_seed_003():
    # seed 003: 288 per-expert counts summed over layers, 133 to 520, median 265, no expert idle;
    # total about 77,950 rows. Tolerance 5 % on each summary figure.
    summed = read_histogram(DATA_DIR / "histograms" / "glm5-seed003-summed.csv")
    per_layer = read_histogram(DATA_DIR / "histograms" / "glm5-seed003-per-layer.csv")
    y = summed.counts[0]
    assert summed.layers_summed and summed.experts == 288
    np.testing.assert_allclose([y.min(), np.median(y), y.max()], [133, 265, 520], rtol=0.05)
    assert y.sum() == pytest.approx(77_950, rel=0.01)
    np.testing.assert_array_equal(per_layer.counts.sum(axis=0), y)


def test_qwen3_like_trace_overlap_matches_published():
    # Qwen3-30B-A3B decode (gajsanders/moe-trace, a hobby project): consecutive tokens share
    # 42.7 % of their 8 experts on average, 59.7 % at layer 7. Tolerance 0.02 absolute.
    # Layer 0's published 7.9 % is below the chance overlap of this skew and is not met.
    t = read_trace(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz")
    overlap = consecutive_overlap(np.asarray(t.topk)) / t.top_k
    assert overlap.mean() == pytest.approx(0.427, abs=0.02)
    assert overlap[7] == pytest.approx(0.597, abs=0.02)
    assert overlap[0] < overlap[7]
