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
# # How many distinct experts does a batch of B agents touch, and how much does coalescing save?
#
# A decode step of B agents streams the *union* U(B) of their selected experts, not B·K: this
# notebook computes U(B) under uniform, Zipf and Dirichlet routing and from a histogram, and shows
# what a histogram summed over layers hides. The answer, computed from this run, opens the report (in
# the notebook it follows the last section). Unchanged by the one step model: `moeroof plan` takes this U(B) as the union
# a step touches and lets its cache decide how much of it streams.

# %% tags=["parameters"]
# fmt: off
experts: int = 256  # routed experts per MoE layer (E)
top_k: int = 8  # experts per token (K)
b_max: int = 1024  # largest batch in the sweep
zipf_s: float = 1.0  # Zipf exponent for the skewed model curve
dirichlet_alpha: float = 0.5  # Dirichlet concentration, smaller means more skew
model_layers: int = 58  # layers drawn for the Dirichlet band
histogram: str = "histograms/deepseek-v3-like.csv"  # histogram .csv: your file (from the working directory, or absolute) or an embedded name under data/
per_layer_histogram: str = "histograms/glm5-seed003-per-layer.csv"  # per-layer histogram to sum: your file (from the working directory, or absolute) or an embedded name under data/
bootstrap: int = 200  # bootstrap replicates for the histogram band
seed_name: str = "union_curve"  # the generator seed is derived from this name
# fmt: on

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import moeroof
from moeroof.core.paths import resolve_data
from moeroof.data.io import read_histogram
from moeroof.models.routing import Dirichlet, Zipf, inclusion_probabilities
from moeroof.models.union import BASELINE, union_histogram, union_plugin, union_uniform
from moeroof.present import answers
from moeroof.present.plots import label_with_baseline, plain_log_ticks, provenance_label, save_figure, show_table, style

rng = np.random.default_rng(sum(map(ord, seed_name)))
key_batches = [1, 8, 16, 64, 128, 256, 1024]  # rows shown in the tables
batch = np.unique(
    np.r_[np.round(np.logspace(0, np.log10(b_max), 40)), [b for b in key_batches if b <= b_max]].astype(int)
)


# %% [markdown]
# ## U(B) and the coalescing ratio under uniform, Zipf and Dirichlet routing
# Uniform is the closed form E·(1 − (1 − K/E)^B); Zipf and Dirichlet use the independent plug-in
# Σ_i [1 − (1 − π_i)^B] with exact Plackett–Luce inclusion probabilities π. Zipf layers differ
# only by a permutation, so they share one curve; Dirichlet layers differ, and the band is the
# 5–95 % range over the drawn layers.

# %%
uniform = union_uniform(experts, top_k, batch)
zipf = union_plugin(inclusion_probabilities(Zipf(experts, top_k, zipf_s).popularity(1), top_k), batch)
dirichlet = union_plugin(
    inclusion_probabilities(Dirichlet(experts, top_k, dirichlet_alpha).popularity(model_layers, rng), top_k), batch
)
dir_lo, dir_hi = np.quantile(dirichlet.union_per_layer, [0.05, 0.95], axis=0)

with style():
    fig, (ax_u, ax_r) = plt.subplots(1, 2, figsize=(11, 4.3))
    for curve, name in [
        (uniform, "uniform (closed form)"),
        (zipf, f"Zipf s={zipf_s}"),
        (dirichlet, f"Dirichlet α={dirichlet_alpha}"),
    ]:
        ax_u.plot(curve.batch, curve.mean, label=name)
        ax_r.plot(curve.batch, curve.coalescing_ratio, label=name)
    ax_u.fill_between(batch, dir_lo, dir_hi, alpha=0.25, color="C2", label="Dirichlet, 5–95 % over layers")
    ax_r.fill_between(batch, batch * top_k / dir_hi, batch * top_k / dir_lo, alpha=0.25, color="C2")
    ax_u.plot(batch, np.minimum(experts, batch * top_k), "k:", lw=1, label="min(E, B·K) bound")
    ax_u.set(
        xscale="log",
        xlabel="batch B (agents per decode step)",
        ylabel="distinct experts per layer U(B)",
        title=f"U(B), E={experts}, K={top_k} — {provenance_label('projected')}",
    )
    ax_r.set(
        xscale="log",
        yscale="log",
        xlabel="batch B (agents per decode step)",
        ylabel=label_with_baseline("coalescing ratio B·K/U", BASELINE),
        title=label_with_baseline("expert fetches saved", BASELINE),
    )
    ax_u.legend(fontsize=8)
    ax_r.legend(fontsize=8)
    for ax in (ax_u, ax_r):
        plain_log_ticks(ax)
    fig.tight_layout()
    save_figure(fig, "union_curve_models")
    plt.show()

# %%
table = pd.DataFrame(
    {
        "B": batch,
        "U uniform": uniform.mean,
        f"U Zipf s={zipf_s}": zipf.mean,
        f"U Dirichlet α={dirichlet_alpha}": dirichlet.mean,
        f"ratio uniform (vs {BASELINE})": uniform.coalescing_ratio,
        f"ratio Zipf (vs {BASELINE})": zipf.coalescing_ratio,
    }
)
show_table(table[table.B.isin(key_batches)])

# %% [markdown]
# ## From a histogram (by default the embedded synthetic one), with a bootstrap band
# Rarefaction Σ_i [1 − C(T − Y_i, B)/C(T, B)] is exact for B ≤ T tokens; beyond T the curve is
# Chao's extrapolation. The band is the iNEXT bootstrap (estimate ± 1.96·sd). Point `histogram`
# at your own file to redo this on your data.

# %%
hist = read_histogram(resolve_data(histogram))
curve = union_histogram(
    hist.counts, hist.tokens, batch, top_k=hist.top_k, experts=hist.experts, bootstrap=bootstrap, rng=rng
)
uniform_h = union_uniform(hist.experts, hist.top_k, batch)
label = f"{hist.meta.get('model', hist.path.name)}, data: {hist.provenance or 'unlabelled'}"

with style():
    fig, (ax_u, ax_r) = plt.subplots(1, 2, figsize=(11, 4.3))
    ax_u.plot(batch, curve.mean, color="C3", label="rarefaction / extrapolation, mean over layers")
    ax_u.fill_between(
        batch, curve.mean_band.low, curve.mean_band.high, color="C3", alpha=0.3, label="95 % bootstrap band"
    )
    lo, hi = np.quantile(curve.union_per_layer, [0.05, 0.95], axis=0)
    ax_u.fill_between(batch, lo, hi, color="C3", alpha=0.1, label="5–95 % over layers")
    ax_u.plot(batch, uniform_h.mean, "k--", lw=1, label="uniform routing (closed form)")
    ax_r.plot(batch, curve.coalescing_ratio, color="C3", label="histogram")
    ax_r.plot(batch, uniform_h.coalescing_ratio, "k--", lw=1, label="uniform")
    ax_u.set(
        xscale="log",
        xlabel="batch B",
        ylabel="distinct experts per layer U(B)",
        title=f"{label}\n{provenance_label('witnessed-inputs' if hist.provenance == 'witnessed' else 'projected')}",
    )
    ax_r.set(
        xscale="log",
        yscale="log",
        xlabel="batch B",
        ylabel=label_with_baseline("B·K/U", BASELINE),
        title=label_with_baseline("coalescing ratio", BASELINE),
    )
    ax_u.legend(fontsize=8)
    ax_r.legend(fontsize=8)
    for ax in (ax_u, ax_r):
        plain_log_ticks(ax)
    fig.tight_layout()
    save_figure(fig, "union_curve_histogram")
    plt.show()

show_table(
    pd.DataFrame(
        {
            "B": batch,
            "U per layer": curve.mean,
            "ci low": curve.mean_band.low,
            "ci high": curve.mean_band.high,
            "U total (all layers)": curve.total,
            f"B·K/U (vs {BASELINE})": curve.coalescing_ratio,
            "method": curve.method,
        }
    ).query("B in @key_batches")
)

# %% [markdown]
# ## What summing a histogram over layers hides
# Seed 003 (a lab report on a two-node GB10 run of a GLM-5 MoE engine) published only a histogram summed over all layers (288 experts, counts 133–520). Each
# layer here is strongly skewed, but each layer's hot experts are different ones, so the sum looks
# nearly flat. Treating the summed shares as one layer's routing (the plug-in with
# π̄_i = summed_i / T) overstates U(B): per-layer skew is averaged away before the concave map
# 1 − (1 − π)^B, and Jensen's inequality says that only ever raises the union.

# %%
per_layer = read_histogram(resolve_data(per_layer_histogram))
layered = union_histogram(
    per_layer.counts, per_layer.tokens, batch, top_k=per_layer.top_k, experts=per_layer.experts, bootstrap=0
)
summed_pi = per_layer.counts.sum(axis=0) / per_layer.tokens.sum()
summed = union_plugin(summed_pi[None, :], batch, top_k=per_layer.top_k)
uniform_p = union_uniform(per_layer.experts, per_layer.top_k, batch)
shares = per_layer.counts / per_layer.counts.sum(axis=1, keepdims=True)
summed_shares = per_layer.counts.sum(axis=0) / per_layer.counts.sum()

with style():
    fig, (ax_h, ax_u) = plt.subplots(1, 2, figsize=(11, 4.3))
    ranks = np.arange(1, per_layer.experts + 1)
    ax_h.plot(ranks, np.median(-np.sort(-shares, axis=1), axis=0), label="per layer (median over layers)")
    ax_h.plot(ranks, -np.sort(-summed_shares), label="summed over layers")
    ax_h.axhline(1 / per_layer.experts, color="k", ls=":", lw=1, label="uniform 1/E")
    ax_h.set(
        xscale="log",
        yscale="log",
        xlabel="expert rank",
        ylabel="share of the layer's picks",
        title="summing flattens the histogram",
    )
    ax_u.plot(batch, layered.mean, label="per-layer rarefaction (what the cache sees)")
    ax_u.plot(batch, summed.mean, label="summed histogram read as one layer")
    ax_u.plot(batch, uniform_p.mean, "k--", lw=1, label="uniform")
    ax_u.set(
        xscale="log",
        xlabel="batch B",
        ylabel="distinct experts per layer U(B)",
        title=f"{per_layer.meta.get('model', '')}\n"
        f"{provenance_label('witnessed-inputs' if per_layer.provenance == 'witnessed' else 'projected')}",
    )
    ax_h.legend(fontsize=8)
    ax_u.legend(fontsize=8)
    for ax in (ax_h, ax_u):
        plain_log_ticks(ax)
    fig.tight_layout()
    save_figure(fig, "union_curve_summed_hides_skew")
    plt.show()

b_show = batch[batch <= per_layer.tokens.min()]
show_table(
    pd.DataFrame(
        {
            "B": b_show,
            "per-layer U": layered.mean[: b_show.size],
            "summed-as-one-layer U": summed.mean[: b_show.size],
            f"per-layer B·K/U (vs {BASELINE})": layered.coalescing_ratio[: b_show.size],
            f"summed B·K/U (vs {BASELINE})": summed.coalescing_ratio[: b_show.size],
        }
    ).query("B in @key_batches")
)

# %% tags=["answer"]
from IPython.display import Markdown, display  # noqa: E402

probe = int(batch[np.searchsorted(batch, min(64, b_max))])
i = int(np.searchsorted(batch, probe))
display(
    Markdown(
        answers.union_curve(
            experts=experts,
            top_k=top_k,
            batch_max=int(batch[-1]),
            probe_batch=probe,
            uniform_union=float(uniform.mean[i]),
            zipf_s=zipf_s,
            zipf_union=float(zipf.mean[i]),
            dirichlet_alpha=dirichlet_alpha,
            dirichlet_union=float(dirichlet.mean[i]),
            histogram=histogram,
            histogram_union=float(curve.mean[i]),
            histogram_ratio=float(curve.coalescing_ratio[i]),
            histogram_provenance=hist.provenance,
            summed_histogram=per_layer_histogram,
            summed_union=float(summed.mean[i]),
            per_layer_union=float(layered.mean[i]),
            summed_provenance=per_layer.provenance,
        )
    )
)

# %% [markdown]
# ## Versions and parameters

# %%
print(f"moeroof {moeroof.__version__}, numpy {np.__version__}")
for name, value in {
    "experts": experts,
    "top_k": top_k,
    "b_max": b_max,
    "zipf_s": zipf_s,
    "dirichlet_alpha": dirichlet_alpha,
    "model_layers": model_layers,
    "histogram": histogram,
    "per_layer_histogram": per_layer_histogram,
    "bootstrap": bootstrap,
    "seed_name": seed_name,
}.items():
    print(f"{name} = {value}")
