"""Make the suite's embedded synthetic data in data/ from its own routing models.

Every file is synthetic: drawn from :mod:`moeroof.models.routing` with a fixed seed, its generator
parameters matched to a published statistic, which the sidecar names. Real captured routing data
stays in ../shared/data/external (no licence): nothing of it is copied here; where a parameter
is matched to a figure derived from it, only that summary figure is quoted.

    .venv/bin/python scripts/make_data.py          # rewrite data/histograms and data/traces

Outputs (each with a JSON sidecar holding ``provenance: synthetic`` and ``generator``):

- ``histograms/deepseek-v3-like.csv`` — 58 layers × 256 experts, K = 8. Per-layer Zipf exponents
  calibrated so the hottest expert's share of a layer runs min 1.25 %, median 2.36 %,
  max 5.19 % (DeepSeek-V3/R1 on GPQA, johanna-rock/moe-balance, docs/sources.md). The share of the
  top 32 experts (published: 25–54 % per layer) is *not* fitted: it is a prediction, printed
  and stored in the sidecar.
- ``histograms/glm5-seed003-per-layer.csv`` and ``histograms/glm5-seed003-summed.csv`` —
  288 experts, K = 8, 76 MoE layers × 128 decode tokens (76·128·8 = 77,824 picks; seed 003
  reports about 77,950 rows). One Zipf exponent for every layer, each layer its own
  permutation, chosen so the *layer-summed* histogram matches seed 003's published summary
  (counts 133–520, median 265). The per-layer file shows the skew that summing hides.
- ``traces/qwen3-30b-a3b-like.npz`` — (steps 96, streams 16, layers 48, K 8), E = 128.
  Skew: Zipf s with the inclusion log-log slope 0.89 over ranks 1–64 (the steep end of the
  −0.42 to −0.89 English range derived from ``qwen3-30b-a3b-expert-freq-en-he``; a lighter skew
  misses the single-stream column below by more than 5 points). Stickiness per layer matched to
  consecutive-token overlap 7.9 % at layer 0, 59.7 % at layer 7 and 42.7 % averaged over layers
  (gajsanders/moe-trace, a hobby project). Per-stream locality: every stream has a lasting hot
  set ``G_s ~ Gamma(a·w)`` (off in layer 0) and the streams of a step share a context
  ``H_t ~ Gamma(a_t·w)``, routing by ``q_s,t = normalize(G_s + H_t)`` (``c`` and ``c_step`` of
  :func:`moeroof.models.routing.sample_trace`). c matched to the single-stream per-layer LRU hit
  rates at 8 / 16 / 32 / 64 experts (gajsanders/moe-trace finding 007, docs/sources.md), c_step to
  the cross-agent correlation — the union of the 16 streams 0.913 of the independent plug-in of
  the trace's own frequencies, the ratio measured on the real Qwen1.5-MoE layer-0 decode batch
  (44.3 against 48.5 at B = 25; another model and one layer, so this knob is an assumption
  borrowed across models).
"""

from __future__ import annotations

import sys

import numpy as np
from scipy.optimize import brentq

from moeroof.core.paths import DATA_DIR
from moeroof.core.rng import generator as seeded_rng
from moeroof.data.io import write_histogram, write_trace
from moeroof.models.fit import correlation_gap
from moeroof.models.routing import (
    Zipf,
    consecutive_overlap,
    inclusion_probabilities,
    sample_histogram,
    sample_trace,
    zipf_weights,
)
from moeroof.models.union import union_plugin

SCRIPT = "scripts/make_data.py"


# --- DeepSeek-V3-like -------------------------------------------------------------------------


def hottest_share(e: int, k: int, s: float) -> float:
    return float(inclusion_probabilities(zipf_weights(e, s), k)[0] / k)


def deepseek_v3_like() -> dict:
    e, k, layers, tokens = 256, 8, 58, 20_000
    lo, med, hi = 0.0125, 0.0236, 0.0519
    # targets spread log-linearly min → median → max over the 58 layers
    q = np.linspace(0.0, 1.0, layers)
    log_targets = np.where(
        q <= 0.5,
        np.log(lo) + (np.log(med) - np.log(lo)) * q / 0.5,
        np.log(med) + (np.log(hi) - np.log(med)) * (q - 0.5) / 0.5,
    )
    s_layers = np.array(
        [brentq(lambda s, t=t: np.log(hottest_share(e, k, s)) - t, 0.0, 3.0, xtol=1e-6) for t in log_targets]
    )
    rng = seeded_rng("deepseek-v3-like")
    order = rng.permutation(layers)  # the skew profile over depth is not published: shuffle it
    s_layers = s_layers[order]
    popularity = np.stack([zipf_weights(e, s)[rng.permutation(e)] for s in s_layers])
    counts = sample_histogram(popularity, k, tokens, rng)
    shares = counts / counts.sum(axis=1, keepdims=True)
    hottest = shares.max(axis=1)
    top32 = np.sort(shares, axis=1)[:, -32:].sum(axis=1)
    check = {
        "hottest_share_min_median_max": [float(hottest.min()), float(np.median(hottest)), float(hottest.max())],
        "hottest_share_published": [lo, med, hi],
        "top32_share_min_max_predicted": [float(top32.min()), float(top32.max())],
        "top32_share_published": [0.25, 0.54],
    }
    write_histogram(
        DATA_DIR / "histograms" / "deepseek-v3-like.csv",
        counts,
        tokens=tokens,
        experts=e,
        top_k=k,
        model="DeepSeek-V3-like (synthetic)",
        source=f"synthetic, {SCRIPT}; skew matched to DeepSeek-V3/R1 GPQA hottest-expert shares "
        "(johanna-rock/moe-balance, via docs/sources.md)",
        provenance="synthetic",
        generator={
            "model": "Zipf per layer, random rank permutation per layer",
            "experts": e,
            "top_k": k,
            "tokens_per_layer": tokens,
            "s_per_layer": [round(float(s), 6) for s in s_layers],
            "seed_name": "deepseek-v3-like",
            "calibrated_on": "hottest-expert share per layer: min 1.25%, median 2.36%, max 5.19%",
            "check": check,
        },
    )
    return check


# --- seed 003's GLM-5 layer-summed histogram ------------------------------------------------


def glm5_summed_stats(s: float, seeds: int = 12) -> np.ndarray:
    e, k, layers, tokens = 288, 8, 76, 128
    pi = inclusion_probabilities(zipf_weights(e, s), k)
    out = []
    for seed in range(seeds):
        rng = seeded_rng(1000 + seed)
        # the summed count of an expert is a sum of binomials over layers (Gumbel-top-K would
        # agree in distribution per layer; binomials keep the calibration sweep fast)
        perm = np.argsort(rng.random((layers, e)), axis=1)
        summed = rng.binomial(tokens, pi[perm]).sum(axis=0)
        out.append([summed.min(), np.median(summed), summed.max()])
    return np.mean(out, axis=0)


def glm5_seed003() -> dict:
    e, k, layers, tokens = 288, 8, 76, 128
    target = np.array([133.0, 265.0, 520.0])
    grid = np.round(np.arange(0.30, 1.61, 0.05), 2)
    loss = [float(np.sum(np.log(glm5_summed_stats(s) / target) ** 2)) for s in grid]
    s = float(grid[int(np.argmin(loss))])
    rng = seeded_rng("glm5-seed003")
    popularity = np.stack([zipf_weights(e, s)[rng.permutation(e)] for _ in range(layers)])
    per_layer = sample_histogram(popularity, k, tokens, rng)
    summed = per_layer.sum(axis=0, keepdims=True)
    check = {
        "summed_min_median_max": [int(summed.min()), float(np.median(summed)), int(summed.max())],
        "summed_published": [133, 265, 520],
        "total_picks": int(summed.sum()),
        "total_published": "about 77,950 rows",
        "per_layer_max_over_mean_median": float(np.median(per_layer.max(axis=1) / per_layer.mean(axis=1))),
        "summed_max_over_mean": float(summed.max() / summed.mean()),
    }
    generator = {
        "model": "Zipf, one exponent for all layers, random rank permutation per layer",
        "experts": e,
        "top_k": k,
        "layers": layers,
        "tokens_per_layer": tokens,
        "s": s,
        "s_grid": [float(grid[0]), float(grid[-1]), 0.05],
        "seed_name": "glm5-seed003",
        "calibrated_on": "seed 003 layer-summed histogram: min 133, median 265, max 520",
        "check": check,
    }
    source = (
        f"synthetic, {SCRIPT}; matched to seed 003's published 288-expert layer-summed "
        "firing histogram (133-520, median 265)"
    )
    write_histogram(
        DATA_DIR / "histograms" / "glm5-seed003-per-layer.csv",
        per_layer,
        tokens=tokens,
        experts=e,
        top_k=k,
        model="GLM-5-like, seed 003 (synthetic)",
        source=source,
        provenance="synthetic",
        generator=generator,
    )
    write_histogram(
        DATA_DIR / "histograms" / "glm5-seed003-summed.csv",
        summed,
        tokens=tokens * layers,
        experts=e,
        top_k=k,
        model="GLM-5-like, seed 003 (synthetic)",
        source=source + "; the sum over layers of glm5-seed003-per-layer.csv",
        layers_summed=True,
        provenance="synthetic",
        generator=generator,
    )
    return check


# --- Qwen3-30B-A3B-like trace ----------------------------------------------------------------


def inclusion_slope(e: int, k: int, s: float, ranks: int = 64) -> float:
    pi = inclusion_probabilities(zipf_weights(e, s), k)[:ranks]
    return float(np.polyfit(np.log(np.arange(1, ranks + 1)), np.log(pi), 1)[0])


def overlap_profile(layers: int) -> np.ndarray:
    """Consecutive-token overlap share per layer: 7.9 % at 0, 59.7 % at 7, mean 42.7 %.

    Rising linearly to layer 7, then falling linearly so that the mean over layers is 42.7 %
    (only those three figures are published; the shape between them is an assumption).
    """
    first, peak, mean = 0.079, 0.597, 0.427
    ramp = np.linspace(first, peak, 8)
    rest = layers - 8
    # linear from peak (layer 8) to `end` (last layer) with the required mean
    end = 2 * (mean * layers - ramp.sum()) / rest - peak
    return np.r_[ramp, np.linspace(peak, end, rest)]


#: the single-stream per-layer LRU column the trace's per-stream locality is matched to
#: (gajsanders/moe-trace finding 007, docs/sources.md): experts per layer → hit rate
SINGLE_STREAM_LRU = {8: 0.424, 16: 0.647, 32: 0.810, 64: 0.918}
#: the sizes the locality is matched on (all four, now that the cache judges a layer's experts
#: together: a cache of 8 can reach the consecutive overlap)
LOCALITY_SIZES = (8, 16, 32, 64)
#: candidate per-stream locality c (Dirichlet concentration c·w; smaller is more local)
LOCALITY_GRID = (20.0, 30.0, 40.0, 55.0, 75.0, 100.0)
#: candidate step-shared context c_step (smaller: the streams of a step share more)
CONTEXT_GRID = (10.0, 20.0, 40.0, 80.0, 160.0)
#: the Zipf skew's inclusion log-log slope over ranks 1-64 (the steep end of the -0.42 to -0.89 range)
QWEN3_SLOPE = 0.89
#: the union of a real decode batch against the independent plug-in of its own frequencies: the
#: Qwen1.5-MoE layer-0 batch of 25 (../shared/data/external, summary figures only)
UNION_RATIO_TARGET = 44.27 / 48.49


def qwen3_rho_profile(e: int, k: int, s: float, c, c_step, layers: int) -> np.ndarray:
    """Stickiness per layer that gives :func:`overlap_profile` under Zipf(s) with per-stream
    locality c and step context c_step: the consecutive overlap as a function of ρ, measured
    on 16 calibration layers (locality raises the chance overlap, a fresh context lowers it,
    so ρ depends on both)."""
    rho_grid = np.linspace(0.0, 0.95, 20)
    rng = seeded_rng("qwen3-like-calibration")
    cal_layers = 16
    pop = np.stack([zipf_weights(e, s)[rng.permutation(e)] for _ in range(cal_layers)])
    curve = np.array(
        [
            np.nanmean(
                consecutive_overlap(
                    sample_trace(
                        Zipf(e, k, s),
                        100,
                        16,
                        cal_layers,
                        rng,
                        c=c,
                        c_step=c_step,
                        groups=16,
                        scope="trace",
                        rho=r,
                        popularity=pop,
                    )
                )
            )
            / k
            for r in rho_grid
        ]
    )
    curve = np.maximum.accumulate(curve)  # monotone for the inverse
    target = overlap_profile(layers)
    # layers whose target is below the chance overlap (ρ = 0) overshoot it; take the excess off the
    # layers past the peak, so the mean over layers stays on the published 42.7 %
    reached = np.maximum(target, curve[0])
    tail = np.arange(layers) >= 8
    target = np.where(tail, np.maximum(target - (reached - target).sum() / tail.sum(), curve[0]), reached)
    return np.interp(target, curve, rho_grid, left=0.0)


def qwen3_knobs(e: int, k: int, s: float, c: float, c_step: float, layers: int) -> tuple[np.ndarray, np.ndarray]:
    """(ρ per layer, c per layer): per-stream locality c on every layer but layer 0, whose
    published 7.9 % overlap shows no reuse (c = ∞ there, its ρ from the curve without locality);
    the step context c_step on every layer."""
    rho = qwen3_rho_profile(e, k, s, c, c_step, layers)
    rho[0] = qwen3_rho_profile(e, k, s, np.inf, c_step, layers)[0]
    return rho, np.r_[np.inf, np.full(layers - 1, float(c))]


def qwen3_sample(e, k, s, c, c_step, rho_layers, steps, streams, seed_name) -> np.ndarray:
    """The trace (steps, streams, layers, K) int16: Zipf(s) with a random rank permutation per
    layer, stickiness ρ per layer, each stream's lasting hot set and every step's shared context
    (``q_s,t = normalize(G_s + H_t)``, :func:`moeroof.models.routing.sample_trace`; c per layer,
    ∞ = none)."""
    layers = len(rho_layers)
    rng = seeded_rng(seed_name)
    popularity = np.stack([zipf_weights(e, s)[rng.permutation(e)] for _ in range(layers)])
    topk = sample_trace(
        Zipf(e, k, s),
        steps,
        streams,
        layers,
        rng,
        c=np.asarray(c, dtype=float),
        c_step=float(c_step),
        groups=streams,
        scope="trace",
        rho=np.asarray(rho_layers, dtype=float),
        popularity=popularity,
    )
    return topk.astype(np.int16)


def own_union_ratio(topk: np.ndarray, e: int) -> float:
    """Distinct experts per (step, layer) over all streams, against the independent plug-in of
    the trace's own per-layer frequencies (what ``skew_fit`` measures:
    :func:`moeroof.models.fit.correlation_gap`)."""
    return float(correlation_gap(topk, e)["ratio"])


def qwen3_like() -> dict:
    """The Qwen3-30B-A3B-like trace (module docstring), in three calibration passes:

    1. skew: Zipf s with inclusion slope :data:`QWEN3_SLOPE` over ranks 1-64;
    2. cross-agent correlation: the step context c_step of :data:`CONTEXT_GRID` whose union of
       the 16 streams comes closest to :data:`UNION_RATIO_TARGET` of the plug-in of the trace's
       own frequencies, at the middle c of :data:`LOCALITY_GRID`;
    3. per-stream locality c: of :data:`LOCALITY_GRID`, the c whose trace (the stored draw)
       replays the published single-stream per-layer LRU column closest (least largest miss at
       :data:`LOCALITY_SIZES`; moeroof.studies.validation.trace_single_stream_hit_rates: each
       stream alone, first 8 steps not counted); ρ per layer is recalibrated at each (c, c_step)
       so the consecutive overlap stays on :func:`overlap_profile`. Locality is off on layer 0.
    """
    from types import SimpleNamespace

    from moeroof.studies.validation import ZERO_FIT_WARMUP_STEPS, trace_single_stream_hit_rates

    e, k, layers, steps, streams = 128, 8, 48, 96, 16
    s = brentq(lambda x: inclusion_slope(e, k, x) + QWEN3_SLOPE, 0.05, 3.0, xtol=1e-6)
    w1 = zipf_weights(e, s)[None, :]
    caps = list(SINGLE_STREAM_LRU)
    published = np.array([SINGLE_STREAM_LRU[x] for x in caps])
    matched = np.isin(caps, LOCALITY_SIZES)

    def replay(topk):
        return np.array(trace_single_stream_hit_rates(SimpleNamespace(topk=topk, experts=e), caps)["hit_rate"])

    # 2. the step context, at the middle of the locality grid
    c_mid = LOCALITY_GRID[len(LOCALITY_GRID) // 2]
    ratios = {}
    for cs in CONTEXT_GRID:
        rho_g, c_l = qwen3_knobs(e, k, s, c_mid, cs, layers)
        ratios[cs] = own_union_ratio(qwen3_sample(e, k, s, c_l, cs, rho_g, steps, streams, "qwen3-like-context"), e)
    c_step = min(ratios, key=lambda cs: abs(ratios[cs] - UNION_RATIO_TARGET))
    # 3. per-stream locality: the c of the grid whose trace (the stored draw) misses the column least
    scan = []
    for c in LOCALITY_GRID:
        rho_c, c_l = qwen3_knobs(e, k, s, c, c_step, layers)
        tr = qwen3_sample(e, k, s, c_l, c_step, rho_c, steps, streams, "qwen3-30b-a3b-like")
        hits = replay(tr)
        scan.append((float(np.max(np.abs(hits - published)[matched])), c, rho_c, c_l, tr))
    _, c, rho_layers, c_layers, topk = min(scan, key=lambda t: t[0])
    measured_overlap = consecutive_overlap(topk) / k
    plugin16 = float(union_plugin(inclusion_probabilities(w1, k), [streams]).mean[0])
    hits = replay(topk)
    gap = correlation_gap(topk, e)
    check = {
        "overlap_layer0": float(measured_overlap[0]),
        "overlap_layer7": float(measured_overlap[7]),
        "overlap_mean": float(measured_overlap.mean()),
        "overlap_published": {"layer0": 0.079, "layer7": 0.597, "mean": 0.427},
        "union16_measured": gap["union_measured"],
        "union16_plugin_true_popularity": plugin16,
        "union16_plugin_own_histogram": gap["union_plugin"],
        "union_ratio_own_histogram": gap["ratio"],
        "union_ratio_target": UNION_RATIO_TARGET,
        "union_ratio_by_c_step": {str(cs): round(r, 4) for cs, r in ratios.items()},
        "single_stream_lru_capacity_experts": caps,
        "single_stream_lru_hit_rate": [round(float(h), 4) for h in hits],
        "single_stream_lru_published": [float(x) for x in published],
        "single_stream_lru_error_points": [round(float(100 * (h - p)), 2) for h, p in zip(hits, published)],
        "single_stream_lru_warmup_steps": ZERO_FIT_WARMUP_STEPS,
        "locality_scan_max_miss_points": {str(cc): round(100 * m, 2) for m, cc, *_ in scan},
    }
    meta = {
        "model": "Qwen3-30B-A3B-like (synthetic)",
        "experts": e,
        "top_k": k,
        "layer_ids": list(range(layers)),
        "axes": ["step", "stream", "layer", "k"],
        "source": f"synthetic, {SCRIPT}; skew, stickiness and single-stream locality matched to published "
        "Qwen3-30B-A3B statistics (docs/sources.md), cross-agent correlation to the real Qwen1.5-MoE decode batch",
        "provenance": "synthetic",
        "generator": {
            "model": "Zipf, random rank permutation per layer; stickiness rho per layer; every stream routes by "
            "q_s,t = normalize(G_s + H_t): a lasting per-stream hot set G_s (concentration c, every layer but "
            "layer 0) and a context H_t shared by the streams of a step (concentration c_step), marginally "
            "Dirichlet(A·w) with 1/A = 1/c + 1/c_step (moeroof.models.routing.sample_trace)",
            "s": round(float(s), 6),
            "inclusion_slope": QWEN3_SLOPE,
            "rho_per_layer": [round(float(r), 4) for r in rho_layers],
            "c": c,
            "c_layer0": "off (inf): layer 0's published overlap, 7.9 %, shows no reuse",
            "c_step": c_step,
            "groups": streams,
            "scope": "trace",
            "steps": steps,
            "streams": streams,
            "seed_name": "qwen3-30b-a3b-like",
            "calibrated_on": f"inclusion slope {QWEN3_SLOPE} (ranks 1-64); consecutive overlap 7.9% (layer 0), "
            "59.7% (layer 7), 42.7% (mean); per-stream locality c on the single-stream per-layer LRU hit rates "
            "42.4 / 64.7 / 81.0 / 91.8 % at 8 / 16 / 32 / 64 experts (gajsanders/moe-trace finding 007; each stream "
            f"alone, first {ZERO_FIT_WARMUP_STEPS} steps not counted, a layer's experts looked up together); step "
            f"context c_step on the union ratio {UNION_RATIO_TARGET:.3f} of the plug-in of the trace's own "
            "frequencies at the full batch (the real Qwen1.5-MoE layer-0 decode batch of 25)",
            "check": check,
        },
    }
    write_trace(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz", topk, meta)
    return check


def main() -> int:
    for name, make in [
        ("deepseek-v3-like", deepseek_v3_like),
        ("glm5-seed003", glm5_seed003),
        ("qwen3-30b-a3b-like", qwen3_like),
    ]:
        check = make()
        print(f"{name}:")
        for key, value in check.items():
            print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
