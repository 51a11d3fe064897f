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
# # What do seed 003's withheld cache rows look like, and where does an LRU expert cache fall off a cliff?
#
# Seed 003 is a lab report on a two-GB10 run of a GLM-5 MoE engine (288 experts, top-8): the
# pair (two nodes, each a rank holding half the experts, with an LRU expert cache of C GiB) and
# one booster (one GB10 machine holding every expert). It publishes two of the pair's cache
# points at M = 8 streams and withholds the other rows of its ladder. Calibrated on the published
# points, what hit rate and GiB streamed per step does each withheld row see — under LRU, LFU, a
# pinned hot set, S3-FIFO or the offline optimum (Belady) — and where does LRU fall off a cliff?
# The last sections recalibrate with the general `moeroof fit-routing` and ask whether one knob
# set fitted on a single stream carries to a batch, on real captures. The answer, computed from
# this run, opens the report (in the notebook it follows the section on caches past 80 GiB).

# %% tags=["parameters"]
# fmt: off
layers: int = 75  # MoE layers simulated, assumed as in the glm-5-nvfp4 preset, GiB results do not depend on it
seeds: int = 8  # seeds per prediction band, each a full 10-step experiment
fit: bool = False  # re-run the knob search instead of using the knobs stored in moeroof.ladder
fit_seeds: int = 8  # seeds averaged per grid point when fit is True
fit_layers: int = 15  # layers per simulated run in the search
parameter_uncertainty: bool = True  # draw the knobs from the bootstrap of the fit, else fixed knobs
bootstrap_replicates: int = 8  # refits in the parametric bootstrap when fit is True
policy_seeds: int = 3  # seeds for the policy comparison
policies: str = "lru,lfu,static,belady,s3fifo"  # cache policies compared side by side, comma separated
big_caches: str = "80,88,90,100,120"  # cache sizes past 80 GiB per rank for the FP8 plan, comma separated
sensitivity: bool = True  # refit with Zipf layers and recount the history in steps, as model-choice checks
sensitivity_seeds: int = 2  # seeds per sensitivity band
sensitivity_layers: int = 25  # layers per sensitivity run, fewer than layers only adds noise
seed_name: str = "cache_ladder"  # the generator seed is derived from this name
routing_fit_seeds: int = 2  # fit-routing section: seeds averaged per evaluated knob set
routing_fit_bootstrap: int = 6  # fit-routing section: bootstrap draws per family for the bands
routing_fit_layers: int = 12  # fit-routing section: layers simulated (results do not depend on L)
routing_fit_locality: str = "prior"  # fit-routing section: per-stream locality the rows cannot identify, prior (as the CLI) or independent
transfer_captures: str = "mixtral,qwen15"  # real captures for the one-knob-set check, comma separated (empty: skip)
transfer_bootstrap: int = 6  # one-knob-set check: bootstrap draws per family for the bands
external_dir: str = ""  # folder of the real captures (empty: ../shared/data/external beside the repository)
# fmt: on

# %%
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

import moeroof
from moeroof.core.memo import memo_root
from moeroof.models.local_routing import locality_parameter
from moeroof.models.routing import histogram_from_trace
from moeroof.present import answers
from moeroof.present.plots import (
    plain_log_ticks,
    plain_value,
    provenance_label,
    save_figure,
    show_table,
    show_values,
    style,
)
from moeroof.studies import ladder

rng = np.random.default_rng(sum(map(ord, seed_name)))
run_seeds = [int(s) for s in rng.integers(2**31, size=seeds)]
policy_list = [p.strip() for p in policies.split(",") if p.strip()]
big_list = [float(x) for x in big_caches.split(",") if x.strip()]
item_gib = ladder.expert_bytes(layers) / 2**30
PROJ = provenance_label("projected")
WIT = provenance_label("witnessed")

if fit:
    fit_result = ladder.fit_knobs(ladder.CALIBRATION, seeds=range(fit_seeds), layers=fit_layers)
    knobs = fit_result.knobs
    draws = (
        ladder.bootstrap_knobs(
            knobs, replicates=bootstrap_replicates, layers=layers, fit_seeds=range(fit_seeds), fit_layers=fit_layers
        )
        if parameter_uncertainty
        else [knobs]
    )
    for note in fit_result.notes:
        print("fit note:", note)
else:
    fit_result = None
    knobs = ladder.FITTED
    draws = list(ladder.FITTED_DRAWS) if parameter_uncertainty else [knobs]
print("knobs:", knobs.label())

# %% [markdown]
# ## The model and its fitted knobs
# GLM-5-NVFP4 as seed 003 gives it: E = 288, K = 8, one rank's 144 experts = 91 GiB, so one
# (layer, expert) item is 91 GiB / 144 / L (L = 75 assumed: 9.05 MB); every GiB figure here is
# independent of L. Each layer gets its own Dirichlet(α) popularity (experts' shares vary
# widely, hot experts at random ids); M streams each decode their own tokens (the seed's
# distinct-token workload), a token keeps each of its stream's previous experts with
# probability ρ; the cross-agent knob c is off (a finite c drives the one-step union far
# under 50). The experiment is seed 003's: 3 warm-up + 10 timed steps, a pair splits ids
# 144/144 (0–143 on rank 0), each rank has an LRU cache of C GiB shared by all layers; a step
# requests, layer by layer, the union of the experts the rank owns. A cache started empty
# cannot reach 98.3 % at 80 GiB in 13 steps (first touches alone cost more than 1.7 %), so the
# cache has served `history` earlier tokens of the same workload — an effective warmth, fitted.
#
# The fit sees only the calibration points: α from the union at M = 8 (46.7 per layer, which
# the published hit rates and GiB imply; the seed says "about 50"), ρ from the 20 GiB hit
# rate, the history from the 80 GiB hit rate. Spread: a parametric bootstrap (refits to
# simulated 75-layer calibration runs) — how well one published run per point pins the knobs.

# %%
knob_table = pd.DataFrame(
    {
        "knob": [
            f"skew ({knobs.family} {knobs.skew_name})",
            "stickiness ρ",
            "history (tokens before the warm-up)",
            "cross-agent c",
        ],
        "fitted": [knobs.skew, knobs.rho, knobs.history_tokens, knobs.c],
        "5 % (bootstrap)": [
            np.quantile([d.skew for d in draws], 0.05),
            np.quantile([d.rho for d in draws], 0.05),
            np.quantile([d.history_tokens for d in draws], 0.05),
            knobs.c,
        ],
        "95 % (bootstrap)": [
            np.quantile([d.skew for d in draws], 0.95),
            np.quantile([d.rho for d in draws], 0.95),
            np.quantile([d.history_tokens for d in draws], 0.95),
            knobs.c,
        ],
        "set by": ["union per layer at M=8", "20 GiB hit rate", "80 GiB hit rate", "fixed (off)"],
    }
)
show_table(knob_table, digits=4)

# %%
if fit_result is not None:
    with style():
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
        for ax, x, y, target, xl, yl, logx in [
            (
                axes[0],
                fit_result.skew_grid,
                fit_result.union_on_grid,
                fit_result.union_target,
                f"{knobs.family} skew",
                "union per layer, M=8",
                True,
            ),
            (
                axes[1],
                fit_result.rho_grid,
                fit_result.hit20_on_grid,
                ladder.CALIBRATION[0].hit_rate,
                "stickiness ρ",
                "hit rate, 20 GiB",
                False,
            ),
            (
                axes[2],
                fit_result.history_grid,
                fit_result.hit80_on_grid,
                ladder.CALIBRATION[1].hit_rate,
                "history, tokens",
                "hit rate, 80 GiB",
                True,
            ),
        ]:
            ax.plot(x, y, "o-", label=f"simulated, {fit_result.layers} layers × {len(fit_result.seeds)} seeds")
            ax.axhline(target, color="k", ls=":", label="target (seed 003, witnessed)")
            ax.set(xlabel=xl, ylabel=yl, xscale="log" if logx else "linear")
            plain_log_ticks(ax)
            ax.legend(fontsize=7)
        fig.suptitle(f"knob search, pair at M=8 — {PROJ}", fontsize=9)
        fig.tight_layout()
        save_figure(fig, "cache_ladder_fit")
        plt.show()

# %% [markdown]
# ## Calibration points: published against the model
# Mean over seeds and the 5–95 % band (routing redrawn per seed, knobs drawn from the
# bootstrap). "Union" is the distinct experts per layer a step requests across both ranks; the
# seed says "about 50", its GiB and hit rates imply 46.7.

# %%
bands, results = ladder.predict(draws, ladder.PREDICTION_CASES, run_seeds, layers=layers)
by_name = {b.case.name: b for b in bands}
cal_rows = []
for t in ladder.CALIBRATION:
    b = by_name[t.case.name]
    cal_rows += [
        {
            "point": t.case.name,
            "quantity": "hit rate %",
            "published (witnessed)": 100 * t.hit_rate,
            "model": 100 * b.hit_rate,
            "5 %": 100 * b.hit_rate_band.low,
            "95 %": 100 * b.hit_rate_band.high,
            "error": 100 * (b.hit_rate - t.hit_rate),
        },
        {
            "point": t.case.name,
            "quantity": "GiB streamed/step/rank",
            "published (witnessed)": t.gib_streamed_per_step,
            "model": b.gib_streamed_per_step,
            "5 %": b.gib_band.low,
            "95 %": b.gib_band.high,
            "error": b.gib_streamed_per_step - t.gib_streamed_per_step,
        },
    ]
b8 = by_name["pair-m8-20"]
cal_rows.append(
    {
        "point": "pair M=8",
        "quantity": "union per layer (both ranks)",
        "published (witnessed)": ladder.UNION_PUBLISHED,
        "model": b8.union_per_layer,
        "5 %": b8.union_band.low,
        "95 %": b8.union_band.high,
        "error": b8.union_per_layer - ladder.UNION_PUBLISHED,
    }
)
calibration = pd.DataFrame(cal_rows)
print(
    "union implied by the published (hit, GiB) pairs, per rank:",
    [round(ladder.implied_rank_union(t.hit_rate, t.gib_streamed_per_step), 2) for t in ladder.CALIBRATION],
)
show_table(calibration)

# %% [markdown]
# ## Predictions of the withheld rows
# All LRU, 20–80 GiB per rank, M streams; GiB streamed per step is per rank (for the pair, the
# mean of its two ranks): the means over seeds, with their bands. The rows at the calibration's M
# are the ones written to `predictions.csv`; the rows at another M come there from the general fit
# (`moeroof fit-routing`, its section below) where it holds the locality prior, the per-stream
# locality these knobs lack (the file's `method` column names which answers each row).

# %%
pred = pd.DataFrame(
    [
        {
            "case": b.case.name,
            "arrangement": b.case.arrangement,
            "M": b.case.streams,
            "cache GiB/rank": b.case.cache_gib_per_rank,
            "hit %": 100 * b.hit_rate,
            "hit 5 %": 100 * b.hit_rate_band.low,
            "hit 95 %": 100 * b.hit_rate_band.high,
            "GiB/step/rank": b.gib_streamed_per_step,
            "GiB 5 %": b.gib_band.low,
            "GiB 95 %": b.gib_band.high,
            "union/layer": b.union_per_layer,
            "working set GiB/rank": b.rank_union_per_layer * layers * item_gib,
            "role": "calibration (witnessed)"
            if b.case.name in {t.case.name for t in ladder.CALIBRATION}
            else "prediction (projected)",
        }
        for b in bands
    ]
)
show_table(pred)

# %% [markdown]
# ## The ladder: hit rate and GiB per step against the cache, pair and booster at M = 8
# Exact LRU curves (stack distances, one pass per rank and seed) on the same traces; shaded the
# 5–95 % band over seeds. Dotted: a rank's per-step working set (the union it requests in one
# step). Below it LRU's hit rate is ~0: the pair's working set is ~15 GiB per rank, the
# booster's ~29 GiB.

# %%
grid = np.arange(0.0, 125.0, 1.0)
curve_pair = ladder.ladder_curve(draws, 2, 8, grid, run_seeds, layers=layers)
curve_boost = ladder.ladder_curve(draws, 1, 8, grid, run_seeds, layers=layers)
curve_boost1 = ladder.ladder_curve(draws, 1, 1, grid, run_seeds, layers=layers)
witnessed = [(t.case.cache_gib_per_rank, t.hit_rate, t.gib_streamed_per_step) for t in ladder.CALIBRATION]

with style():
    fig, (ax_h, ax_g) = plt.subplots(1, 2, figsize=(12, 4.5))
    for crv, name, color in [
        (curve_pair, "pair, id split, M=8", "C0"),
        (curve_boost, "one booster, M=8", "C3"),
        (curve_boost1, "one booster, M=1", "C2"),
    ]:
        for ax, y in ((ax_h, 100 * crv.hit_rate), (ax_g, crv.gib_streamed_per_step)):
            lo, hi = np.quantile(y, [0.05, 0.95], axis=0)
            ax.plot(grid, y.mean(axis=0), color=color, label=f"{name} (LRU), {PROJ}")
            ax.fill_between(grid, lo, hi, color=color, alpha=0.25, lw=0)
            ax.axvline(crv.working_set_gib.mean(), color=color, ls=":", lw=1)
    for b in bands:
        if b.case.name.startswith(("pair-m8", "booster-m8", "booster-m1")):
            color = "C0" if b.case.ranks == 2 else ("C3" if b.case.streams == 8 else "C2")
            ax_h.errorbar(
                b.case.cache_gib_per_rank,
                100 * b.hit_rate,
                yerr=[[100 * (b.hit_rate - b.hit_rate_band.low)], [100 * (b.hit_rate_band.high - b.hit_rate)]],
                fmt="s",
                color=color,
                mfc="white",
                ms=6,
            )
            ax_g.errorbar(
                b.case.cache_gib_per_rank,
                b.gib_streamed_per_step,
                yerr=[[b.gib_streamed_per_step - b.gib_band.low], [b.gib_band.high - b.gib_streamed_per_step]],
                fmt="s",
                color=color,
                mfc="white",
                ms=6,
            )
    ax_h.plot(
        [w[0] for w in witnessed], [100 * w[1] for w in witnessed], "k*", ms=12, label=f"seed 003 pair, M=8: {WIT}"
    )
    ax_g.plot([w[0] for w in witnessed], [w[2] for w in witnessed], "k*", ms=12, label=f"seed 003 pair, M=8: {WIT}")
    ax_h.axvline(91, color="k", lw=0.8, alpha=0.5, label="91 GiB: all of a pair rank's experts")
    ax_h.set(
        xlabel="expert cache per rank, GiB",
        ylabel="cache hit rate, %",
        ylim=(-2, 102),
        title=f"LRU hit rate (squares: simulated cases, dotted: per-step working set)\n{knobs.label()}",
    )
    ax_g.set(
        xlabel="expert cache per rank, GiB",
        ylabel="GiB streamed per step per rank",
        yscale="symlog",
        title=f"GiB streamed per step per rank (LRU)\n{PROJ}",
    )
    plain_log_ticks(ax_g, "y")
    ax_h.legend(fontsize=7, loc="lower right")
    ax_g.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "cache_ladder_curve")
    plt.show()

# %% [markdown]
# ## Why LRU falls off a cliff
# A step sweeps the layers in order and requests each layer's union once, so an expert used in
# step t and again in step t+1 at the same layer has one whole step of other layers' requests
# between its two uses: its stack distance is about a step's working set. When the cache is
# smaller than that (the booster at M = 8: ~47 experts × 75 layers ≈ 29 GiB against 20 GiB),
# LRU has always just evicted what the next step needs — a cyclic sweep larger than the cache
# is LRU's worst case, and the hit rate is ~0, not "somewhat lower". A policy that keeps a fixed
# part of the sweep (static hot set, Belady) keeps hitting there; see the policies below. The
# per-rank view below plots the exact LRU curve against the cache in units of the working set.

# %%
with style():
    fig, ax = plt.subplots(figsize=(7, 4.3))
    for crv, name, color in [
        (curve_pair, "pair, M=8", "C0"),
        (curve_boost, "one booster, M=8", "C3"),
        (curve_boost1, "one booster, M=1", "C2"),
    ]:
        ws = crv.working_set_gib.mean()
        ax.plot(grid / ws, 100 * crv.hit_rate.mean(axis=0), color=color, label=f"{name}: working set {ws:.1f} GiB/rank")
    ax.axvline(1.0, color="k", ls=":", lw=1, label="cache = one step's working set")
    for t in ladder.CALIBRATION:
        ax.plot(t.case.cache_gib_per_rank / curve_pair.working_set_gib.mean(), 100 * t.hit_rate, "k*", ms=11)
    ax.plot([], [], "k*", label=f"seed 003 pair, M=8: {WIT}")
    ax.set(
        xscale="log",
        xlim=(0.3, 30),
        xlabel="cache per rank / per-step working set per rank",
        ylabel="LRU hit rate, %",
        title=f"the LRU cliff at one step's working set\n{PROJ}",
    )
    plain_log_ticks(ax, "x")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "cache_ladder_cliff")
    plt.show()

# %% [markdown]
# ## Policies side by side (pair, M = 8)
# LRU; LFU (in-cache: an evicted expert's count is forgotten, as libCacheSim's); a static hot set pinned from the firing
# histogram of the steps before timing (history + warm-up: what an engine could have recorded,
# not an oracle); Belady's MIN (offline optimum, the bound); S3-FIFO. Same traces for every
# policy. Plus the booster at 20 GiB, where LRU sits at the cliff.

# %%
pol_cases = [ladder.Case(f"pair-m8-{int(g)}-{p}", 2, 8, g, p) for g in (20.0, 40.0, 60.0, 80.0) for p in policy_list]
pol_cases += [ladder.Case(f"booster-m8-20-{p}", 1, 8, 20.0, p) for p in policy_list]
pol_bands, _ = ladder.predict(draws, pol_cases, run_seeds[:policy_seeds], layers=layers)
policy_table = pd.DataFrame(
    [
        {
            "arrangement": b.case.arrangement,
            "cache GiB/rank": b.case.cache_gib_per_rank,
            "policy": b.case.policy,
            "hit %": 100 * b.hit_rate,
            "GiB/step/rank": b.gib_streamed_per_step,
        }
        for b in pol_bands
    ]
)
with style():
    fig, (ax_p, ax_b) = plt.subplots(1, 2, figsize=(12, 4.3), gridspec_kw={"width_ratios": [3, 1]})
    pair = policy_table[policy_table.arrangement.str.startswith("pair")]
    width = 0.8 / len(policy_list)
    sizes = sorted(pair["cache GiB/rank"].unique())
    for i, p in enumerate(policy_list):
        sub = pair[pair.policy == p].set_index("cache GiB/rank").loc[sizes]
        ax_p.bar(np.arange(len(sizes)) + (i - (len(policy_list) - 1) / 2) * width, sub["hit %"], width, label=p)
    lru_x = (policy_list.index("lru") - (len(policy_list) - 1) / 2) * width if "lru" in policy_list else 0.0
    ax_p.plot(
        [sizes.index(t.case.cache_gib_per_rank) + lru_x for t in ladder.CALIBRATION],
        [100 * t.hit_rate for t in ladder.CALIBRATION],
        "k*",
        ms=12,
        label=f"seed 003, LRU engine: {WIT}",
    )
    ax_p.set(
        xticks=range(len(sizes)),
        xticklabels=[f"{s:g} GiB" for s in sizes],
        ylabel="hit rate, %",
        ylim=(0, 118),
        title=f"pair, id split, M=8, cache per rank — {PROJ}",
    )
    ax_p.legend(fontsize=7, ncol=3, loc="upper left")
    boost = policy_table[~policy_table.arrangement.str.startswith("pair")]
    bars = ax_b.bar(boost.policy, boost["hit %"], color=[f"C{i}" for i in range(len(boost))])
    ax_b.bar_label(bars, fmt="%.0f %%", fontsize=7)
    ax_b.set(ylabel="hit rate, %", ylim=(0, 100), title=f"one booster, 20 GiB, M=8\n{PROJ}")
    ax_b.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    save_figure(fig, "cache_ladder_policies")
    plt.show()
show_table(
    policy_table.pivot_table(index=["arrangement", "cache GiB/rank"], columns="policy", values="hit %").reset_index(),
    digits=3,
)

# %% [markdown]
# ## What a cache past 80 GiB would buy (the seed's FP8 plan)
# The seed's "Next": shrink the 16.6 GiB BF16 resident half (FP8 halves it to 8.3 GiB) and give
# the freed memory to the cache: 80 → ~88 GiB per rank. At 91 GiB a rank holds all its experts.
# In this model the pair's hit rate is already flat from ~60 GiB: the remaining misses are first
# touches of cold experts the warm cache has never seen, which no capacity avoids — so the FP8
# plan buys ~nothing for the expert cache at M = 8 here (it may still buy memory for KV or M).

# %%
big_cases = [ladder.Case(f"pair-m8-{g:g}", 2, 8, g) for g in big_list]
big_bands, _ = ladder.predict(draws, big_cases, run_seeds, layers=layers)
big_table = pd.DataFrame(
    [
        {
            "cache GiB/rank": b.case.cache_gib_per_rank,
            "share of a rank's experts %": 100 * min(1.0, b.case.cache_gib_per_rank / 91),
            "hit %": 100 * b.hit_rate,
            "hit 5 %": 100 * b.hit_rate_band.low,
            "hit 95 %": 100 * b.hit_rate_band.high,
            "GiB/step/rank": b.gib_streamed_per_step,
            "GiB 5 %": b.gib_band.low,
            "GiB 95 %": b.gib_band.high,
        }
        for b in big_bands
    ]
)
show_table(big_table)

# %% [markdown]
# ## Model-choice sensitivity (not in the bands above)
# The bands above cover routing noise and the fit's parameter spread, not the model's
# structure. Two calibrated alternatives: **Zipf layers** (refit: s, ρ; Zipf's warmer tail
# cannot reach 98.3 % at 80 GiB for any history, so it misses that point) and **history
# counted in steps** of the case's own M (identical at M = 8; more warmth at M = 16, 32, much
# less at M = 1). Run at `sensitivity_layers` layers and `sensitivity_seeds` seeds: a check of
# direction and size, not a band.

# %%
if sensitivity:
    sens_seeds = run_seeds[:sensitivity_seeds]
    zipf_fit = ladder.fit_knobs(ladder.CALIBRATION, family="zipf", seeds=range(2), layers=fit_layers)
    variants = {
        f"Zipf layers ({zipf_fit.knobs.label()})": zipf_fit.knobs,
        "history counted in steps": replace(knobs, history_unit="steps"),
    }
    for note in zipf_fit.notes:
        print("zipf fit:", note)
    rows = [
        {
            "variant": "fitted (Dirichlet, history in tokens)",
            "case": b.case.name,
            "hit %": 100 * b.hit_rate,
            "GiB/step/rank": b.gib_streamed_per_step,
        }
        for b in bands
    ]
    for name, kn in variants.items():
        vb, _ = ladder.predict(kn, ladder.PREDICTION_CASES, sens_seeds, layers=sensitivity_layers)
        rows += [
            {"variant": name, "case": b.case.name, "hit %": 100 * b.hit_rate, "GiB/step/rank": b.gib_streamed_per_step}
            for b in vb
        ]
    sens = pd.DataFrame(rows)
    for value in ("hit %", "GiB/step/rank"):
        display(
            show_table(
                sens.pivot_table(index="case", columns="variant", values=value, sort=False)
                .rename_axis(columns=None)
                .reset_index()
            )
        )

# %% [markdown]
# ## An out-of-sample check: the summed firing histogram
# Seed 003's parity decode recorded 288 per-expert counts summed over layers: 133 to 520,
# median 265, none idle. Not fitted. With K = 8 and L = 75 (assumed) a median of 265 means about
# 127 tokens per layer; one stream decoding 127 tokens under the fitted knobs gives the range
# below (mean over seeds and the seeds' extremes). Uniform routing would give about 215–315:
# the per-layer skew survives the sum in the extremes even though it averages out in the middle.

# %%
hist_rows = []
for name, kn in [("fitted", knobs), ("uniform (α = 1e4)", replace(knobs, skew=1e4, rho=0.0))]:
    stats = []
    for s in run_seeds[:5]:
        counts = histogram_from_trace(
            ladder.sample_ladder_trace(kn, 1, 127, layers, np.random.default_rng(s)), ladder.EXPERTS
        ).sum(axis=0)
        stats.append((counts.min(), np.median(counts), counts.max(), int((counts == 0).sum())))
    st = np.array(stats)
    hist_rows.append(
        {
            "model": name,
            "min": st[:, 0].mean(),
            "median": st[:, 1].mean(),
            "max": st[:, 2].mean(),
            "max range over seeds": f"{st[:, 2].min():.0f}–{st[:, 2].max():.0f}",
            "idle experts": st[:, 3].mean(),
        }
    )
hist_rows.append(
    {
        "model": "seed 003 parity decode (witnessed)",
        "min": 133,
        "median": 265,
        "max": 520,
        "max range over seeds": "",
        "idle experts": 0,
    }
)
show_table(pd.DataFrame(hist_rows))

# %% [markdown]
# ## Calibrated by `moeroof fit-routing` on the public rows only
# The same question through the general fitter instead of the seed-specific `fit_knobs`
# (`ladder.fit_routing_predictions`). Calibration rows — the only numbers the fit sees — are
# seed 003's public pair points at M = 8 (id split, 2 ranks, LRU over all layers, per rank):
# the hit rate and GiB/step at 20 and 80 GiB, and the union of distinct experts per layer
# across both ranks, "about 50", taken as 50 (`fit_knobs` used the 46.7 the hit rates and GiB
# imply). `fit-routing` fits the skew, ρ and the warm history (five rows at one M: the
# per-stream locality is held at the locality prior, as the CLI holds it, or off with
# `routing_fit_locality = "independent"`), for the Dirichlet and the Zipf family, and predicts every
# withheld case with empty values; bands are 5–95 % over the bootstrap draws of every family
# that fits and the prior's draws (parameter, run-to-run, family and locality uncertainty), with a
# new measurement's noise (`data.points.MEASUREMENT_SIGMA`). The booster table's pair row
# (53.8 %, 6.62 GiB) is public and has the 20 GiB calibration row's conditions, measured in
# another run: it is held out and its error stated. Beside each prediction, the `fit_knobs`
# prediction of the same case (the sections above): the distance between the two is the
# structural band. `predictions-fit-routing.csv` has the columns of `predictions.csv` plus
# `hit_rate_low`, `hit_rate_high`, `gib_low`, `gib_high`, the role, the witnessed values (public
# rows only) and the `fit_knobs` means.

# %%
# the per-stream locality the general fit holds where the rows cannot identify it (None: off)
rf_locality = locality_parameter(routing_fit_locality, "routing_fit_locality")
rfit = ladder.fit_routing_predictions(
    seeds=range(routing_fit_seeds),
    bootstrap=routing_fit_bootstrap,
    max_sim_layers=min(routing_fit_layers, layers),
    old_bands=bands,
    locality=rf_locality,
)
rk = rfit.fit.knobs
print(
    f"fit-routing: family {rfit.fit.family}; "
    + "; ".join(f"{name} {v['value']:.4g} [{v['low']:.4g}, {v['high']:.4g}]" for name, v in rk.items() if v["fitted"])
    + f"; {rfit.seconds:.1f} s"
)
for note in rfit.fit.notes:
    print("note:", note)
display(
    show_table(
        pd.DataFrame(
            [
                {
                    "family": fam,
                    "fits": d["fits"],
                    "largest miss (tolerances)": d["max_abs_z"],
                    "residual S": d["residual"],
                    "knobs": d["label"],
                    "in the bands": d["contributes_to_bands"],
                }
                for fam, d in rfit.fit.families.items()
            ]
        )
    )
)
display(
    show_table(
        pd.DataFrame(
            [
                {
                    "calibration row": p.label(),
                    "measured": r["measured"],
                    "predicted": r["predicted"],
                    "5 %": r["low"],
                    "95 %": r["high"],
                }
                for p, r in zip(rfit.points, rfit.fit.rows)
                if p.calibrates
            ]
        ),
        digits=4,
    )
)
fr_table = pd.DataFrame(
    [
        {
            "case": r["case"],
            "role": r["role"],
            "hit %": 100 * r["hit_rate"],
            "hit 5–95 %": f"{100 * r['hit_rate_low']:.1f}–{100 * r['hit_rate_high']:.1f}",
            "witnessed hit %": None if r["witnessed_hit_rate"] is None else 100 * r["witnessed_hit_rate"],
            "fit_knobs hit %": None if r["fit_knobs_hit_rate"] is None else 100 * r["fit_knobs_hit_rate"],
            "GiB/step/rank": r["gib_streamed_per_step"],
            "GiB 5–95 %": f"{r['gib_low']:.2f}–{r['gib_high']:.2f}",
            "witnessed GiB": r["witnessed_gib_streamed_per_step"],
            "fit_knobs GiB": r["fit_knobs_gib_streamed_per_step"],
        }
        for r in rfit.rows
    ]
)
fr_written = ladder.write_fit_routing_predictions(rfit)
print("wrote", fr_written.name, "in", fr_written.parent.name)
# the answer: fit_knobs' rows at the calibration's M, the general fit's at another M where it holds
# the locality prior (with locality off it holds no more of one stream's locality than fit_knobs)
answering_rows = rfit.rows if rf_locality is not None else []
written = ladder.write_predictions(bands, routing_rows=answering_rows)
print("wrote", written.name, "in", written.parent.name)
display(show_table(fr_table))

with style():
    fig, (ax_h, ax_g) = plt.subplots(1, 2, figsize=(12, 4.6))
    xs = np.arange(len(rfit.rows))
    for ax, key, lo, hi, old_key, wit_key, scale, unit in (
        (
            ax_h,
            "hit_rate",
            "hit_rate_low",
            "hit_rate_high",
            "fit_knobs_hit_rate",
            "witnessed_hit_rate",
            100,
            "hit rate, %",
        ),
        (
            ax_g,
            "gib_streamed_per_step",
            "gib_low",
            "gib_high",
            "fit_knobs_gib_streamed_per_step",
            "witnessed_gib_streamed_per_step",
            1,
            "GiB streamed per step, per rank",
        ),
    ):
        y = np.array([r[key] for r in rfit.rows]) * scale
        yerr = np.array([[r[key] - r[lo], r[hi] - r[key]] for r in rfit.rows]).T * scale
        ax.errorbar(xs - 0.12, y, yerr=yerr, fmt="o", color="C0", capsize=3, label="fit-routing, 5–95 %")
        old_y = [np.nan if r[old_key] is None else r[old_key] * scale for r in rfit.rows]
        ax.plot(xs + 0.12, old_y, "s", color="C1", label="fit_knobs (seed-specific)")
        wit = [np.nan if r[wit_key] is None else r[wit_key] * scale for r in rfit.rows]
        ax.plot(xs, wit, "k*", ms=11, label="seed 003, " + WIT)
        ax.set_xticks(xs, [r["case"] for r in rfit.rows], rotation=60, ha="right", fontsize=7)
        ax.set(ylabel=unit, title=f"seed 003's rows: calibrated on the public ones\n{PROJ}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "cache_ladder_fit_routing")
    plt.show()

# %%
by_case = {r["case"]: r for r in rfit.rows}
withheld_rows = [r for r in rfit.rows if r["role"] == "withheld"]
gap = [abs(r["hit_rate"] - r["fit_knobs_hit_rate"]) for r in withheld_rows if r["fit_knobs_hit_rate"] is not None]
outside = [
    r["case"]
    for r in withheld_rows
    if r["fit_knobs_hit_rate"] is not None and not r["hit_rate_low"] <= r["fit_knobs_hit_rate"] <= r["hit_rate_high"]
]
held = rfit.held_out_errors()


def _band(r, key="hit_rate", lo="hit_rate_low", hi="hit_rate_high", pct=True):
    f = 100 if pct else 1
    return f"{f * r[key]:.1f} ({f * r[lo]:.1f}–{f * r[hi]:.1f})" if pct else f"{r[key]:.2f} ({r[lo]:.2f}–{r[hi]:.2f})"


display(
    Markdown(
        f"**fit-routing on the public rows.** Calibrated on {len(rfit.calibration_points)} public rows only "
        f"(hit rate and GiB/step at 20 and 80 GiB, union {ladder.UNION_PUBLISHED:g}), the {rfit.fit.family} family "
        f"fits (α or s = {rk['skew']['value']:.3g}, ρ = {rk['rho']['value']:.3g}, history "
        f"{rk['history_tokens']['value']:.0f} tokens; {', '.join(f for f, d in rfit.fit.families.items() if not d['fits']) or 'no family'} "
        f"cannot fit within tolerance) in {rfit.seconds:.0f} s of wall time"
        + (" (simulations kept on disk by an earlier run are read back, not rerun)" if memo_root() else "")
        + ". Predicted hit % (5–95 %) and GiB/step per rank: "
        + "; ".join(
            f"{r['case']} {_band(r)} %, {_band(r, 'gib_streamed_per_step', 'gib_low', 'gib_high', pct=False)} GiB"
            for r in withheld_rows
        )
        + ". "
        + "".join(
            f"Held out, {h['case']}: hit error {100 * h['hit_rate_error']:+.1f} points "
            f"({'inside' if h['hit_rate_covered'] else 'outside'} the band), GiB error {h['gib_error']:+.2f} "
            f"({'inside' if h['gib_covered'] else 'outside'}). "
            for h in held
        )
        + f"Against the seed-specific `fit_knobs` predictions the withheld hit rates move by up to "
        f"{100 * max(gap, default=0.0):.1f} points (median {100 * float(np.median(gap)) if gap else 0.0:.1f}); "
        f"{len(outside)} of {len(gap)} `fit_knobs` hit rates fall outside the new band"
        + (f" ({', '.join(outside)})" if outside else "")
        + " — the structural band the two calibrations span, not held by either band. All projected."
    )
)

# %% tags=["answer"]
calibrated_cases = {t.case.name for t in ladder.CALIBRATION}
answer = ladder.answer_rows(bands, answering_rows)
by_name = {b.case.name: b for b in bands}


def working_set_gib(b) -> float:
    return float(b.rank_union_per_layer * layers * item_gib)


over = [b for b in bands if b.case.policy == "lru" and working_set_gib(b) > b.case.cache_gib_per_rank]
cliff_band = min(over, key=lambda b: b.hit_rate) if over else None
display(
    Markdown(
        answers.cache_ladder(
            model="GLM-5-NVFP4",
            layers=layers,
            seeds=len(run_seeds),
            knobs=knobs.label(),
            refitted=fit,
            calibration=[(t.case.name, t.hit_rate, t.gib_streamed_per_step) for t in ladder.CALIBRATION],
            predictions=[
                {
                    "case": b.case.name,
                    "hit": b.hit_rate,
                    "hit_lo": b.hit_rate_band.low,
                    "hit_hi": b.hit_rate_band.high,
                    "gib": b.gib_streamed_per_step,
                    "gib_lo": b.gib_band.low,
                    "gib_hi": b.gib_band.high,
                }
                for b in bands
                if b.case.name not in calibrated_cases
            ],
            cliff=None
            if cliff_band is None
            else {
                "case": cliff_band.case.name,
                "hit": cliff_band.hit_rate,
                "gib": cliff_band.gib_streamed_per_step,
                "working_set_gib": working_set_gib(cliff_band),
                "cache_gib": cliff_band.case.cache_gib_per_rank,
                "policies": {
                    pb.case.policy: pb.hit_rate
                    for pb in pol_bands
                    if pb.case.name.startswith(cliff_band.case.name + "-") and pb.case.policy != "lru"
                },
            },
            big_cache=(
                big_bands[-1].case.cache_gib_per_rank,
                big_bands[-1].hit_rate,
                big_bands[-1].gib_streamed_per_step,
            )
            if big_bands
            else None,
            predictions_file=f"{written.parent.name}/{written.name}",
            # the withheld rows at another M than the calibration's: the general fit with the locality
            # prior answers them (these knobs hold no per-stream locality, which one M cannot identify)
            other_m=[
                {
                    "case": r["case"],
                    "hit": r["hit_rate"],
                    "hit_lo": r["hit_rate_low"],
                    "hit_hi": r["hit_rate_high"],
                    "gib": r["gib_streamed_per_step"],
                    "gib_lo": r["gib_low"],
                    "gib_hi": r["gib_high"],
                    "old_hit": by_name[r["case"]].hit_rate,
                }
                for r in answer
                if r["method"] == "fit-routing"
            ],
            calibration_streams=list(ladder.CALIBRATION_STREAMS),
            # the rows at another M the seed-specific knobs answer: the general fit ran with locality off
            without_locality=[
                r["case"]
                for r in answer
                if r["streams"] not in ladder.CALIBRATION_STREAMS and r["method"] == "fit_knobs"
            ],
            other_m_file=f"{fr_written.parent.name}/{fr_written.name}",
            inputs={
                "seed 003's published pair points": "witnessed",
                "the routing knobs fitted to them and the traces sampled from them": "projected",
                f"L = {layers} MoE layers": "assumed",
            }
            | (
                {"the locality prior the general fit holds (fitted on other models' decode)": "assumed"}
                if rf_locality is not None
                else {}
            ),
        )
    )
)

# %% [markdown]
# ## One knob set from one stream to many, on real captures
# Does a knob set fitted on what *one* stream's cache does carry to a batch? On each real capture
# in `../shared/data/external` (read from there, never copied: no license), the points are
# measured by replaying the trace (`moeroof.studies.knob_transfer`: LRU per layer, the layer's
# experts looked up together, the first 8 steps not counted; batches are consecutive streams,
# cut to the steps where all are live). `fit-routing` sees only the single stream's hit rate at
# two cache sizes, its consecutive overlap and the largest batch's union; every other row — the
# single stream at other sizes, every batch cache, the smaller batches' unions — is predicted
# with 5–95 % bands and compared with the replay. The captures are witnessed; the predictions
# projected.

# %%
from moeroof.studies import knob_transfer  # noqa: E402

transfer = {}
for name in [c.strip() for c in transfer_captures.split(",") if c.strip()]:
    try:
        transfer[name] = knob_transfer.run_capture(name, external_dir or None, bootstrap=transfer_bootstrap)
    except FileNotFoundError as err:
        print("skipped:", err)
for name, res in transfer.items():
    spec = knob_transfer.CAPTURES[name]
    fitted = "; ".join(
        f"{k} {v['value']:.3g} [{v['low']:.3g}, {v['high']:.3g}]" for k, v in res.knobs.items() if v.get("fitted")
    )
    print(f"{spec['title']}: {res.source}\n  family {res.family}; {fitted}")
    for note in res.notes:
        print("  note:", note)
    display(
        show_table(
            pd.DataFrame(
                [
                    {
                        "row": r.label,
                        "role": r.role,
                        "measured": r.measured,
                        "predicted": r.predicted,
                        "5 %": r.low,
                        "95 %": r.high,
                        "error (points; experts for a union)": r.error,
                        "inside": r.inside,
                    }
                    for r in res.rows
                ]
            )
        )
    )

# %%
if transfer:
    parts = []
    for name, res in transfer.items():
        held = [r for r in res.held_out() if r.kind == "hit_rate"]
        worst = max(held, key=lambda r: abs(r.error))
        unions = [r for r in res.held_out() if r.kind == "union" and r.batch > 1]
        inside = sum(r.inside for r in res.held_out())
        parts.append(
            f"**{knob_transfer.CAPTURES[name]['title']}**: {len(held)} withheld hit rates, errors "
            f"{min(r.error for r in held):+.1f} to {max(r.error for r in held):+.1f} points (largest: "
            f"{worst.label}, {worst.error:+.1f})"
            + (
                "; "
                + ", ".join(f"union at M = {r.batch} {100 * (r.predicted / r.measured - 1):+.1f} %" for r in unions)
                if unions
                else ""
            )
            + f"; {inside} of {len(res.held_out())} withheld rows inside their bands ({res.family} family)"
        )
    display(
        Markdown(
            "**One knob set, one stream to many.** "
            + ". ".join(parts)
            + ". Calibrated on the single stream and the largest batch's union only; projected predictions "
            "against witnessed replays."
        )
    )
else:
    print("no real capture available: the check did not run")

# %% [markdown]
# ## Versions and parameters

# %%
print(f"moeroof {moeroof.__version__}, numpy {np.__version__}, pandas {pd.__version__}")
display(
    show_values(
        {
            "layers": layers,
            "seeds": seeds,
            "fit": fit,
            "fit_seeds": fit_seeds,
            "fit_layers": fit_layers,
            "parameter_uncertainty": parameter_uncertainty,
            "bootstrap_replicates": bootstrap_replicates,
            "policy_seeds": policy_seeds,
            "policies": policies,
            "big_caches": big_caches,
            "sensitivity": sensitivity,
            "sensitivity_seeds": sensitivity_seeds,
            "sensitivity_layers": sensitivity_layers,
            "seed_name": seed_name,
            "routing_fit_seeds": routing_fit_seeds,
            "routing_fit_bootstrap": routing_fit_bootstrap,
            "routing_fit_layers": routing_fit_layers,
            "transfer_captures": transfer_captures,
            "transfer_bootstrap": transfer_bootstrap,
            "external_dir": external_dir,
        }
    )
)
print("knobs:", knobs.label() if hasattr(knobs, "label") else plain_value(knobs))
