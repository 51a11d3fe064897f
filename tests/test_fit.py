"""Tests of moeroof.fit.skew: fit → generate → fit round trips, model choice, bad input,
and one calibration check on a real captured trace (published routing skew: docs/sources.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moeroof.core.paths import EXTERNAL_DIR
from moeroof.core.rng import generator
from moeroof.fit import skew as fit
from moeroof.models import routing

MIXTRAL_TRACE = EXTERNAL_DIR / "mixtral8x7b-instruct-fp8-vllm-traces" / "trace_decode.npz"


_rng = generator  # one named stream per test


def _zipf_counts(rng, s, experts=64, top_k=4, layers=4, tokens=20_000):
    w = routing.Zipf(experts, top_k, s).popularity(layers, rng)
    return routing.histogram_from_trace(routing.sample_topk(w, top_k, tokens, rng)[:, None], experts)


# ---------------------------------------------------------------------------------------------
# histogram fits


@pytest.mark.parametrize("s", [0.8, 1.2])
def test_zipf_round_trip(s):
    rng = _rng(f"test_fit_zipf_{s}")
    counts = _zipf_counts(rng, s)
    res = fit.fit_histogram(counts, 4, rng=rng, bootstrap=60, gof_sims=39)
    z = res.pooled["zipf"]
    # 8e4 picks per layer: the bootstrap SE of s is ~0.003; 0.02 leaves room for the sorting bias
    assert z.params["s"] == pytest.approx(s, abs=0.02)
    lo, hi = z.ci["s"]
    assert lo <= z.params["s"] <= hi
    # one draw: a 95 % interval misses the truth 1 time in 20 (this seed's pooled interval ends
    # 7e-5 above 0.8); coverage over many draws is tested below
    assert lo - (hi - lo) / 2 <= s <= hi + (hi - lo) / 2
    for row in res.per_layer:
        assert row["zipf"].params["s"] == pytest.approx(s, abs=0.03)
    assert res.chosen == "zipf"
    assert z.gof_pvalue > 0.01  # the true model is not rejected


def test_dirichlet_round_trip():
    rng = _rng("test_fit_dirichlet")
    experts, top_k, layers, alpha = 64, 4, 8, 0.5
    w = routing.Dirichlet(experts, top_k, alpha).popularity(layers, rng)
    counts = routing.histogram_from_trace(routing.sample_topk(w, top_k, 20_000, rng)[:, None], experts)
    res = fit.fit_histogram(counts, top_k, rng=rng, bootstrap=40, gof_sims=19)
    d = res.pooled["dirichlet"]
    # Looser than Zipf: one layer is a single draw of E = 64 shares (per-layer α scatters by
    # ~±40 %), and the Dirichlet-multinomial ignores without-replacement picks (bias up).
    assert d.params["alpha"] == pytest.approx(alpha, rel=0.25)
    for row in res.per_layer:
        assert alpha / 2 < row["dirichlet"].params["alpha"] < alpha * 2
    lo, hi = d.ci["alpha"]
    assert lo < d.params["alpha"] < hi


def test_aic_picks_uniform_on_uniform_data():
    rng = _rng("test_fit_uniform")
    counts = _zipf_counts(rng, 0.0)
    res = fit.fit_histogram(counts, 4, rng=rng, bootstrap=0, gof_sims=19)
    assert res.chosen == "uniform"
    # the Zipf exponent on noise is small but positive (sorting favours Zipf on noise)
    assert 0.0 <= res.pooled["zipf"].params["s"] < 0.06
    assert res.pooled["uniform"].gof_pvalue > 0.01


def test_aic_picks_zipf_on_skewed_data():
    rng = _rng("test_fit_skewed")
    res = fit.fit_histogram(_zipf_counts(rng, 1.5), 4, rng=rng, bootstrap=0, gof_sims=0)
    assert res.chosen == "zipf"
    assert res.pooled["uniform"].aic - res.pooled["zipf"].aic > 1000
    assert np.isnan(res.pooled["zipf"].gof_pvalue)  # no simulations asked for
    assert res.pooled["zipf"].ci == {}


def test_pooled_vs_per_layer():
    rng = _rng("test_fit_pooled")
    counts = _zipf_counts(rng, 1.0, layers=6)
    res = fit.fit_histogram(counts, 4, rng=rng, bootstrap=0, gof_sims=0)
    s_layer = np.array([row["zipf"].params["s"] for row in res.per_layer])
    s_pool = res.pooled["zipf"].params["s"]
    assert s_layer.min() - 1e-6 <= s_pool <= s_layer.max() + 1e-6
    assert s_pool == pytest.approx(s_layer.mean(), abs=0.01)
    ll = {m: sum(row[m].log_likelihood for row in res.per_layer) for m in fit.MODELS}
    assert res.pooled["uniform"].log_likelihood == pytest.approx(ll["uniform"])
    # one shared α can only lose likelihood against one α per layer (exact MLEs)
    assert res.pooled["dirichlet"].log_likelihood <= ll["dirichlet"] + 1e-6
    # a layer with a different exponent pulls the pooled fit but not the other layers
    counts2 = counts.copy()
    counts2[0] = _zipf_counts(rng, 0.3, layers=1)[0]
    res2 = fit.fit_histogram(counts2, 4, rng=rng, bootstrap=0, gof_sims=0)
    assert res2.per_layer[0]["zipf"].params["s"] == pytest.approx(0.3, abs=0.03)
    assert res2.per_layer[1]["zipf"].params["s"] == pytest.approx(s_layer[1], abs=1e-9)
    assert res2.pooled["zipf"].params["s"] < s_pool


def test_to_dict_json():
    rng = _rng("test_fit_to_dict")
    counts = _zipf_counts(rng, 1.0, experts=16, top_k=2, layers=3, tokens=5_000)
    res = fit.fit_histogram(counts, 2, rng=rng, bootstrap=10, gof_sims=9)
    d = json.loads(json.dumps(res.to_dict()))
    assert set(d) == {"experts", "top_k", "layers", "chosen", "models", "per_layer"}
    assert set(d["models"]) == set(fit.MODELS) and len(d["per_layer"]) == 3
    assert set(d["models"]["zipf"]) == {
        "params",
        "ml_params",
        "ci",
        "log_likelihood",
        "aic",
        "gof_statistic",
        "gof_pvalue",
    }


@pytest.mark.parametrize(
    "counts, top_k",
    [
        (np.array([[3, -1, 2, 5]]), 2),  # negative count
        (np.array([[3, 1, 2, 5]]), 5),  # top_k > E
        (np.array([3, 1, 2, 5]), 2),  # 1-D
        (np.ones((2, 3, 4), dtype=int), 2),  # 3-D
        (np.array([[0, 0, 0, 0]]), 2),  # an empty layer
        (np.array([[1.5, 1, 2, 5]]), 2),  # non-integer
    ],
)
def test_bad_histogram_input(counts, top_k):
    with pytest.raises(ValueError):
        fit.fit_histogram(counts, top_k, rng=_rng("bad"), bootstrap=0, gof_sims=0)


def test_bad_trace_input():
    rng = _rng("bad_trace")
    with pytest.raises(ValueError):
        fit.fit_stickiness(np.zeros((5, 2, 3), dtype=int), 8, rng=rng)  # wrong shape
    with pytest.raises(ValueError):
        fit.fit_stickiness(np.full((5, 2, 3, 2), 9), 8, rng=rng)  # id >= experts
    with pytest.raises(ValueError):
        fit.fit_heterogeneity(np.broadcast_to(np.arange(2), (5, 1, 3, 2)).copy(), 8, rng=rng)  # B = 1


# ---------------------------------------------------------------------------------------------
# correlation fits


@pytest.mark.parametrize("rho", [0.3, 0.7])
def test_stickiness_round_trip(rho):
    rng = _rng(f"test_fit_rho_{rho}")
    trace = routing.sample_trace(routing.Zipf(64, 4, 0.8), 100, 16, 4, rng, rho=rho)
    est, (lo, hi) = fit.fit_stickiness(trace, 64, rng=rng, bootstrap=100)
    assert est == pytest.approx(rho, abs=0.03)
    assert lo <= est <= hi


def test_stickiness_zero_on_independent_tokens():
    rng = _rng("test_fit_rho_0")
    trace = routing.sample_trace(routing.Uniform(16, 2), 100, 8, 4, rng)
    est, (lo, hi) = fit.fit_stickiness(trace, 16, rng=rng, bootstrap=50)
    assert est < 0.03 and lo == 0.0


def _het_trace(rng, c, experts=64, top_k=4, layers=4, streams=16, steps=200):
    """Streams of one step share q ~ Dirichlet(c·w), redrawn every step: one sample_trace call
    with steps × layers 'layers' (q is drawn per layer) reshaped to (steps, streams, layers, K)."""
    m = routing.Zipf(experts, top_k, 0.8)
    w = m.popularity(layers, rng)
    tr = routing.sample_trace(m, 1, streams, layers * steps, rng, c=c, groups=1, popularity=np.tile(w, (steps, 1)))[0]
    return tr.reshape(streams, steps, layers, top_k).transpose(1, 0, 2, 3)


def test_heterogeneity_round_trip():
    rng = _rng("test_fit_c")
    trace = _het_trace(rng, 2.0)
    c, (lo, hi) = fit.fit_heterogeneity(trace, 64, rng=rng, bootstrap=50)
    assert 1.0 < c < 4.0  # within a factor 2
    assert lo <= c <= hi
    gap = fit.correlation_gap(trace, 64)
    assert gap["ratio"] < 0.5 and gap["difference"] > 0


def test_heterogeneity_independent_is_inf():
    rng = _rng("test_fit_c_inf")
    trace = _het_trace(rng, np.inf)
    c, (lo, hi) = fit.fit_heterogeneity(trace, 64, rng=rng, bootstrap=50)
    assert c > 1000
    assert hi == np.inf
    assert fit.correlation_gap(trace, 64)["ratio"] == pytest.approx(1.0, abs=0.01)


def test_fit_correlation_dataclass():
    rng = _rng("test_fit_correlation")
    trace = routing.sample_trace(routing.Uniform(16, 2), 40, 6, 3, rng, rho=0.5)
    res = fit.fit_correlation(trace, 16, rng=rng, bootstrap=20)
    assert 0.35 < res.rho < 0.65
    assert res.gap == pytest.approx(res.union_plugin - res.union_measured)
    json.dumps(res.to_dict())


@pytest.mark.skipif(not MIXTRAL_TRACE.exists(), reason=f"real trace not present: {MIXTRAL_TRACE}")
def test_mixtral_trace_stickiness():
    # published (docs/sources.md): Mixtral 8x7B decode shares 0.75 of 2 experts with the previous token
    # (uniform independent: 0.50); derived from mixtral8x7b-instruct-fp8-vllm-traces.
    with np.load(MIXTRAL_TRACE, allow_pickle=False) as z:
        topk = z["topk"]
    assert topk.shape == (255, 4, 32, 2)
    measured = np.nanmean(routing.consecutive_overlap(topk))
    assert measured == pytest.approx(0.75, abs=0.02)
    rng = _rng("test_fit_mixtral")
    rho, (lo, hi) = fit.fit_stickiness(topk, 8, rng=rng, bootstrap=100)
    assert rho > 0 and lo > 0


def _zipf_picks(rng, s, experts, top_k, layers, picks):
    """Pick-level data of the likelihood's own model: each layer's ``picks`` are multinomial with
    probabilities π(s)/K, π the Zipf inclusion probabilities, in a random expert order."""
    pi = routing.inclusion_probabilities(routing.zipf_weights(experts, s), top_k)
    y = rng.multinomial(picks, pi / pi.sum(), size=layers)
    return np.stack([rng.permutation(row) for row in y])


@pytest.mark.parametrize("seed", range(3))
def test_pooled_zipf_interval_contains_its_estimate_and_the_truth(seed):
    """Over 58 layers the sorting bias of the ML ŝ (≈ +0.001) is ~4 standard errors
    of the pooled fit, so a bias-corrected interval around the uncorrected ŝ excluded ŝ itself
    (s = 0.46114, CI [0.45993, 0.46065] on deepseek-v3-like). Same shape here: E = 256, K = 8,
    58 layers of 160,000 picks at s = 0.46."""
    rng = _rng(f"test_fit_pooled_ci_{seed}")
    s_true = 0.46
    y = _zipf_picks(rng, s_true, 256, 8, 58, 160_000)
    z = fit.fit_histogram(y, 8, rng=rng, bootstrap=100, gof_sims=0, models=("zipf",)).pooled["zipf"]
    lo, hi = z.ci["s"]
    assert lo <= z.params["s"] <= hi
    assert lo <= s_true <= hi
    # the ML estimate is biased upwards (sorting noise looks like skew); the reported one less so
    assert z.ml_params["s"] > s_true
    assert abs(z.params["s"] - s_true) < abs(z.ml_params["s"] - s_true)


def test_per_layer_zipf_intervals_cover_the_generator_exponents():
    """deepseek-v3-like was drawn from known per-layer exponents (its sidecar's generator):
    95 % intervals should cover about 55 of the 58; fewer than 50 has probability < 1 %."""
    from moeroof.core.paths import DATA_DIR
    from moeroof.data.io import read_histogram

    hist = read_histogram(DATA_DIR / "histograms" / "deepseek-v3-like.csv")
    truth = np.asarray(hist.meta["generator"]["s_per_layer"])
    res = fit.fit_histogram(
        hist.counts, hist.top_k, rng=_rng("test_fit_cover"), bootstrap=100, gof_sims=0, models=("zipf",)
    )
    ci = [row["zipf"].ci["s"] for row in res.per_layer]
    est = [row["zipf"].params["s"] for row in res.per_layer]
    assert all(c.contains(e) for c, e in zip(ci, est))
    assert sum(c.contains(t) for c, t in zip(ci, truth)) >= 50
    pooled = res.pooled["zipf"]
    assert pooled.ci["s"].contains(pooled.params["s"])
    assert pooled.ci["s"].level == 0.95 and "100 replicates" in pooled.ci["s"].method


def test_a_mapped_trace_cut_short_is_an_error_not_sigbus(tmp_path):
    """The correlation fits copy a memory-mapped trace through checked block reads: a file
    truncated after it was mapped is a TruncatedError naming it (touching the map would be
    SIGBUS); the same file whole fits as the in-memory array does."""
    import os

    from moeroof.data.safe_read import TruncatedError
    from moeroof.fit.skew import correlation_gap

    rng = np.random.default_rng(3)
    trace = np.stack([rng.permutation(16)[:2] for _ in range(64 * 4 * 2)]).reshape(64, 4, 2, 2).astype(np.int16)
    path = tmp_path / "t.npy"
    np.save(path, trace)
    mapped = np.load(path, mmap_mode="r")
    assert correlation_gap(mapped, 16) == correlation_gap(trace, 16)
    mapped = np.load(path, mmap_mode="r")
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(TruncatedError, match="truncated while being read"):
        correlation_gap(mapped, 16)


def test_popularity_from_inclusion_memo_returns_the_inverted_weights_bit_for_bit(tmp_path, monkeypatch):
    from moeroof.fit import skew as fit_mod
    from moeroof.models.routing import inclusion_probabilities

    monkeypatch.setenv("MOEROOF_CACHE_DIR", str(tmp_path / "memo"))
    fit_mod.INVERSION_MEMO.clear()
    rng = np.random.default_rng(7)
    for layers, e, k in ((3, 16, 4), (2, 32, 8)):
        pi = inclusion_probabilities(rng.dirichlet(np.full(e, 0.4), size=layers), k)
        direct = fit_mod.invert_inclusion(np.atleast_2d(pi), k, 60, 1e-7)
        first = fit_mod.popularity_from_inclusion(pi, k)
        assert np.array_equal(first, direct)
        fit_mod.INVERSION_MEMO.clear()  # a fresh process: the disk's entry
        again = fit_mod.popularity_from_inclusion(pi.copy(), k)
        assert np.array_equal(again, direct) and again.shape == direct.shape
        nudged = pi.copy()
        nudged[0, 0] = np.nextafter(nudged[0, 0], 1.0)  # one ulp off: another key
        assert np.array_equal(
            fit_mod.popularity_from_inclusion(nudged, k), fit_mod.invert_inclusion(nudged, k, 60, 1e-7)
        )
    assert len(list((tmp_path / "memo").rglob("*.json"))) == 4
    fit_mod.INVERSION_MEMO.clear()
