# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext,-all
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Which skew model fits captured routing, how correlated are the agents, and what is U(B) out to B = 1024?
#
# Fits uniform, Zipf and Dirichlet routing to a histogram (pooled and per layer, by AIC), measures
# on a trace how far the union of a step's streams falls below independent routing (the
# cross-agent correlation c) and the stickiness ρ of consecutive tokens, and extrapolates U(B)
# with bands. The answer, computed from this run's files, opens the report (in the
# notebook it follows the extrapolation). Run it on a
# captured file with `-p histogram PATH` or `-p trace PATH`. Unchanged by the one step model:
# a fitted histogram or skew is what `moeroof plan --routing` draws its cache traces
# from, but nothing here passes through it.

# %% tags=["parameters"]
# fmt: off
histogram: str = "histograms/deepseek-v3-like.csv"  # histogram .csv: your file (from the working directory, or absolute) or an embedded name under data/
trace: str = "traces/qwen3-30b-a3b-like.npz"  # trace .npz or .npy: your file (from the working directory, or absolute) or an embedded name under data/
b_max: int = 1024  # largest batch size to extrapolate to
fit_bootstrap: int = 50  # bootstrap replicates for the parameter intervals
gof_sims: int = 49  # simulations for the goodness-of-fit p-values
union_bootstrap: int = 200  # bootstrap replicates for union bands
max_layers: int = 0  # fit only the first N layers, 0 for all
seed_name: str = "skew_fit"  # the generator seed is derived from this name
# fmt: on

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import moeroof
from moeroof.core.paths import resolve_data
from moeroof.data.io import read_histogram, read_trace
from moeroof.fit.skew import correlation_gap, fit_correlation, fit_histogram, popularity_from_inclusion
from moeroof.models.routing import consecutive_overlap, histogram_from_trace, inclusion_probabilities, zipf_weights
from moeroof.models.union import (
    BASELINE,
    union_correlated,
    union_from_trace,
    union_histogram,
    union_plugin,
    union_uniform,
)
from moeroof.present import answers
from moeroof.present.plots import plain_log_ticks, provenance_label, pvalue_text, save_figure, show_table, style

rng = np.random.default_rng(sum(map(ord, seed_name)))
key_batches = [1, 8, 16, 64, 128, 256, 1024]  # rows shown in the tables
batch = np.unique(
    np.r_[np.round(np.logspace(0, np.log10(b_max), 40)), [b for b in key_batches if b <= b_max]].astype(int)
)


hist = read_histogram(resolve_data(histogram))
counts = hist.counts if max_layers <= 0 else hist.counts[:max_layers]
tokens = hist.tokens if max_layers <= 0 else hist.tokens[:max_layers]
hist_label = f"{hist.meta.get('model', hist.path.name)}, data: {hist.provenance or 'unlabelled'}"
hist_prov = provenance_label("witnessed-inputs" if hist.provenance == "witnessed" else "projected")
if hist.layers_summed:
    print("warning: this histogram is summed over layers; per-layer skew is averaged away (see union_curve)")

# %% [markdown]
# ## Fit: uniform, Zipf and Dirichlet, pooled and per layer
# Maximum likelihood on the picks (multinomial with probabilities π_i/K); Zipf's π are exact
# Plackett–Luce inclusion probabilities of w ∝ rank^−s, with ranks taken from the observed
# order (which flatters Zipf on noise); Dirichlet is a Dirichlet-multinomial approximation.
# AIC = 2k − 2 log L; the goodness of fit is a parametric bootstrap on the sorted-share curve.
# The table's Zipf s is the bias-corrected estimate 2ŝ − mean(ŝ*) over the bootstrap (the ML ŝ
# of sorted counts reads noise as skew), so it lies inside its own 95 % interval; log L, AIC and
# the goodness of fit are at the ML value, shown beside it.

# %%
fit = fit_histogram(counts, hist.top_k, rng=rng, bootstrap=fit_bootstrap, gof_sims=gof_sims)
best_aic = min(m.aic for m in fit.pooled.values())
per_layer_aic = {name: sum(row[name].aic for row in fit.per_layer) for name in fit.pooled}


def param_text(params):
    return ", ".join(f"{k} = {v:.4g}" for k, v in params.items()) or "–"


def ci_text(ci):
    return "; ".join(f"{k} [{iv.low:.4g}, {iv.high:.4g}]" for k, iv in ci.items()) or "–"


show_table(
    pd.DataFrame(
        [
            {
                "model": name,
                "pooled estimate (Zipf s bias-corrected)": param_text(m.params),
                "95 % interval of the estimate": ci_text(m.ci),
                "inside its interval": all(iv.contains(m.params[k]) for k, iv in m.ci.items()) if m.ci else None,
                "ML value (log L, AIC, GoF at it)": param_text(m.ml_params or m.params),
                "log L": m.log_likelihood,
                "AIC (pooled)": m.aic,
                "ΔAIC": m.aic - best_aic,
                "AIC (per-layer parameters)": per_layer_aic[name],
                "GoF statistic": m.gof_statistic,
                f"GoF p ({gof_sims} simulations)": pvalue_text(m.gof_pvalue, gof_sims),
                "chosen": "✓" if name == fit.chosen else "",
            }
            for name, m in fit.pooled.items()
        ]
    ),
    digits=5,
)

# %%
s_layer = np.array([row["zipf"].params["s"] for row in fit.per_layer])
alpha_layer = np.array([row["dirichlet"].params["alpha"] for row in fit.per_layer])
best_layer = [min(row, key=lambda name: row[name].aic) for row in fit.per_layer]
shares = counts / counts.sum(axis=1, keepdims=True)
picks = np.argsort(s_layer)[[0, len(s_layer) // 2, -1]]

with style():
    fig, (ax_s, ax_r) = plt.subplots(1, 2, figsize=(11, 4.3))
    ax_s.plot(np.arange(len(s_layer)), s_layer, "o-", ms=3, label="Zipf s per layer")
    ax_s.axhline(fit.pooled["zipf"].params["s"], color="C0", ls="--", lw=1, label="pooled s")
    ax_s.set(xlabel="layer", ylabel="fitted Zipf exponent s", title=f"{hist_label}\n{hist_prov}")
    ax_s.legend(fontsize=8)
    ranks = np.arange(1, hist.experts + 1)
    for i, layer in enumerate(picks):
        obs = -np.sort(-shares[layer])
        model = inclusion_probabilities(zipf_weights(hist.experts, s_layer[layer]), hist.top_k) / hist.top_k
        ax_r.plot(ranks, obs, ".", ms=3, color=f"C{i}", label=f"layer {layer} observed (in the histogram)")
        ax_r.plot(ranks, model, "-", lw=1, color=f"C{i}", label=f"layer {layer} Zipf s={s_layer[layer]:.2f}")
    ax_r.axhline(1 / hist.experts, color="k", ls=":", lw=1, label="uniform")
    ax_r.set(
        xscale="log",
        yscale="log",
        xlabel="expert rank in layer",
        ylabel="share of the layer's picks",
        title="flattest, median and steepest layer",
    )
    plain_log_ticks(ax_r)
    ax_r.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "skew_fit_histogram")
    plt.show()

wins = pd.Series(best_layer).value_counts().to_dict()
print(
    f"pooled choice by AIC: {fit.chosen}; per-layer winners: "
    f"{', '.join(f'{k} in {v}' for k, v in wins.items())} of {len(best_layer)} layers; "
    f"per-layer Zipf s from {s_layer.min():.2f} to {s_layer.max():.2f} (pooled {fit.pooled['zipf'].params['s']:.3f})"
)

# %% [markdown]
# ## A trace: stickiness, and the measured union against the independent plug-in
# Measured: the distinct experts of a step's live streams, per layer. Independent plug-in:
# Σ_i [1 − (1 − π̂_i)^B] with π̂ the trace's own expert frequencies. A measured union below the
# plug-in means the agents of a step overlap more than independent routing would — the
# cross-agent correlation, fitted as the concentration c of a step-shared context
# q ~ Dirichlet(c·w). Stickiness ρ is fitted to the consecutive-token overlap of each stream.

# %%
tr = read_trace(resolve_data(trace))
topk = np.asarray(tr.topk)
trace_label = f"{tr.meta.get('model', tr.path.name)}, data: {tr.provenance or 'unlabelled'}"
gap = correlation_gap(topk, tr.experts)
corr = fit_correlation(topk, tr.experts, rng=rng, bootstrap=fit_bootstrap)
overlap = consecutive_overlap(topk) / tr.top_k
trace_prov = provenance_label("witnessed-inputs" if tr.provenance == "witnessed" else "projected")


def interval(ci):
    return f"[{ci.low:.3g}, {ci.high:.3g}]"


show_table(
    pd.DataFrame(
        {
            "quantity": [
                "stickiness ρ",
                "heterogeneity c (∞: no correlation)",
                "measured union per (step, layer)",
                "independent plug-in",
                "measured / plug-in",
                "mean consecutive overlap (share of K)",
                "uniform chance overlap (K/E)",
            ],
            trace_label: [
                f"{corr.rho:.3f} {interval(corr.rho_ci)}",
                f"{corr.c:.3g} {interval(corr.c_ci)}",
                f"{corr.union_measured:.1f}",
                f"{corr.union_plugin:.1f}",
                f"{corr.union_ratio:.3f}",
                f"{float(np.nanmean(overlap)):.1%}",
                f"{tr.top_k / tr.experts:.1%}",
            ],
        }
    )
)

# %%
from IPython.display import Markdown, display  # noqa: E402

display(
    Markdown(
        f"**Cross-agent correlation on {trace_label}.** The streams of a step touch {corr.union_measured:.1f} "
        f"distinct experts per layer against {corr.union_plugin:.1f} for independent routing with the trace's own "
        f"frequencies ({corr.union_ratio:.3f}×): "
        + (
            f"{1 - corr.union_ratio:.1%} fewer — the streams are correlated, fitted as heterogeneity c = {corr.c:.3g}."
            if corr.union_ratio < 0.98
            else "no fewer — no cross-agent correlation within a step "
            + ("(the fitted c is infinite: off)." if not np.isfinite(corr.c) else f"(fitted c = {corr.c:.3g}).")
        )
        + f" Stickiness ρ = {corr.rho:.3f}."
    )
)
print(
    f"measured union is {corr.union_ratio:.3f} of the independent plug-in "
    f"({corr.union_measured:.1f} vs {corr.union_plugin:.1f} distinct experts per step and layer, "
    f"B ≈ {gap['mean_batch']:.0f}); fitted c = {corr.c:.3g} {interval(corr.c_ci)}, "
    f"ρ = {corr.rho:.3f} {interval(corr.rho_ci)}"
)
with style():
    fig, (ax_o, ax_g) = plt.subplots(1, 2, figsize=(11, 4.3))
    ax_o.plot(np.arange(len(overlap)), overlap, "o-", ms=3, label="measured on the trace")
    ax_o.axhline(tr.top_k / tr.experts, color="k", ls=":", lw=1, label="uniform chance K/E")
    ax_o.set(
        xlabel="layer",
        ylabel="experts shared with the previous token (share of K)",
        title=f"{trace_label}\nconsecutive-token overlap; fitted ρ = {corr.rho:.3f}",
    )
    ax_o.legend(fontsize=8)
    ax_g.plot(gap["per_layer"]["union_plugin"], label="independent plug-in (own frequencies)")
    ax_g.plot(gap["per_layer"]["union_measured"], label="measured on the trace")
    ax_g.set(
        xlabel="layer",
        ylabel=f"distinct experts per step (B ≈ {gap['mean_batch']:.0f})",
        title=f"cross-agent correlation: measured / plug-in = {corr.union_ratio:.3f}\nplug-in: {trace_prov}",
    )
    ax_g.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, "skew_fit_trace")
    plt.show()

# %% [markdown]
# ## U(B) extrapolated to B = 1…1024
# From the histogram: rarefaction up to its T tokens, Chao's extrapolation beyond (band:
# iNEXT bootstrap). From the fitted pooled Zipf model: the plug-in, with the band from the
# interval of s. From the trace: measured up to its number of streams; beyond, the correlated
# model with the fitted c (band: Monte Carlo error), beside the independent plug-in.

# %%
h_curve = union_histogram(
    counts, tokens, batch, top_k=hist.top_k, experts=hist.experts, bootstrap=union_bootstrap, rng=rng
)
s_hat = fit.pooled["zipf"].params["s"]
s_lo, s_hi = fit.pooled["zipf"].ci.get("s", (s_hat, s_hat))


def zipf_curve(s):
    return union_plugin(inclusion_probabilities(zipf_weights(hist.experts, s), hist.top_k)[None, :], batch, hist.top_k)


z_mid, z_lo, z_hi = zipf_curve(s_hat), zipf_curve(s_hi), zipf_curve(s_lo)
t_batch = batch[batch <= tr.streams]
measured = union_from_trace(topk, t_batch, experts=tr.experts, rng=rng, bootstrap=union_bootstrap)
pi_hat = histogram_from_trace(topk, tr.experts) / np.maximum((topk >= 0).all(axis=-1).sum(axis=(0, 1)), 1)[:, None]
w_hat = popularity_from_inclusion(pi_hat, tr.top_k, tol=1e-5)
independent = union_plugin(inclusion_probabilities(w_hat, tr.top_k), batch, tr.top_k)
correlated = (
    union_correlated(w_hat, tr.top_k, batch, c=corr.c, rng=rng, draws=8) if np.isfinite(corr.c) else independent
)

with style():
    fig, (ax_h, ax_t) = plt.subplots(1, 2, figsize=(11, 4.3))
    ax_h.plot(batch, h_curve.mean, color="C3", label="histogram: rarefaction / extrapolation")
    ax_h.fill_between(batch, h_curve.mean_band.low, h_curve.mean_band.high, color="C3", alpha=0.3)
    ax_h.plot(batch, z_mid.mean, color="C0", label=f"pooled Zipf s={s_hat:.3f}")
    ax_h.fill_between(batch, z_lo.mean, z_hi.mean, color="C0", alpha=0.3)
    ax_h.plot(batch, union_uniform(hist.experts, hist.top_k, batch).mean, "k--", lw=1, label="uniform")
    ax_h.set(
        xscale="log",
        xlabel="batch B",
        ylabel="distinct experts per layer U(B)",
        title=f"{hist_label}\n{hist_prov}",
    )
    ax_h.legend(fontsize=8)
    ax_t.plot(t_batch, measured.mean, "o", color="C2", label="measured on the trace")
    ax_t.fill_between(t_batch, measured.mean_band.low, measured.mean_band.high, color="C2", alpha=0.3)
    ax_t.plot(batch, correlated.mean, color="C2", label=f"correlated model, c={corr.c:.0f}")
    ax_t.fill_between(batch, correlated.mean_band.low, correlated.mean_band.high, color="C2", alpha=0.2)
    ax_t.plot(batch, independent.mean, color="C1", label="independent plug-in")
    ax_t.plot(batch, union_uniform(tr.experts, tr.top_k, batch).mean, "k--", lw=1, label="uniform")
    ax_t.set(
        xscale="log",
        xlabel="batch B",
        ylabel="distinct experts per layer U(B)",
        title=f"{trace_label}\nmeasured points; curves: {trace_prov}",
    )
    ax_t.legend(fontsize=8)
    for ax in (ax_h, ax_t):
        plain_log_ticks(ax)
    fig.tight_layout()
    save_figure(fig, "skew_fit_extrapolation")
    plt.show()

rows = {
    "B": batch,
    "histogram U": h_curve.mean,
    "histogram band": [f"[{a:.1f}, {b:.1f}]" for a, b in zip(h_curve.mean_band.low, h_curve.mean_band.high)],
    f"histogram B·K/U (vs {BASELINE})": h_curve.coalescing_ratio,
    "Zipf U": z_mid.mean,
    "trace: correlated U": correlated.mean,
    "trace: independent U": independent.mean,
    f"trace: correlated B·K/U (vs {BASELINE})": correlated.coalescing_ratio,
    "method (histogram)": h_curve.method,
}
show_table(pd.DataFrame(rows).query("B in @key_batches"))

# %% tags=["answer"]
display(
    Markdown(
        answers.skew_fit(
            histogram=histogram,
            histogram_provenance=hist.provenance,
            layers=len(fit.per_layer),
            pooled_choice=fit.chosen,
            layer_winners=wins,
            zipf_s=s_hat,
            zipf_s_range=(float(s_layer.min()), float(s_layer.max())),
            trace=trace,
            trace_provenance=tr.provenance,
            streams=tr.streams,
            rho=corr.rho,
            c=corr.c,
            union_ratio=corr.union_ratio,
            union_measured=corr.union_measured,
            union_plugin=corr.union_plugin,
            batch_max=int(batch[-1]),
            union_at_max=float(h_curve.mean[-1]),
            ratio_at_max=float(h_curve.coalescing_ratio[-1]),
        )
    )
)

# %% [markdown]
# ## Versions and parameters

# %%
print(f"moeroof {moeroof.__version__}, numpy {np.__version__}")
for name, value in {
    "histogram": histogram,
    "trace": trace,
    "b_max": b_max,
    "fit_bootstrap": fit_bootstrap,
    "gof_sims": gof_sims,
    "union_bootstrap": union_bootstrap,
    "max_layers": max_layers,
    "seed_name": seed_name,
}.items():
    print(f"{name} = {value}")
