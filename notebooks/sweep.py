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
# # Over expert-cache size × batch, which cache policy gives the most net tok/s, and by how much?
#
# One model on one box, one routing: every (cache GiB, B) cell is planned once per expert-cache
# policy — LRU, LFU, S3-FIFO and ARC (online, simulated in steady state), Belady (the offline
# optimum) and a hot set pinned from the true routing probabilities (an oracle) — as a grid of
# `moeroof plan` points swept on Dask (`moeroof.run.sweep`, the engine behind `moeroof
# sweep`). The sweep writes one Parquet row per point; everything below is read back from that
# file. The answer, computed from those rows, opens the report (in the notebook it
# follows the cell that reads them).

# %% tags=["parameters"]
# fmt: off
model: str = "glm-5.2"  # model preset name or path to a model TOML
hardware: str = "nvme-gen4"  # hardware preset name or path to a hardware TOML
routing: str = "zipf:0.9"  # uniform, zipf:S, or a histogram or trace (your file (from the working directory, or absolute) or an embedded name under data/), the same for every point
context_tokens: int = 4096  # context per agent in tokens, the same for every point
cache_gib_max: float = 40.0  # top of the expert-cache axis in GiB, the axis runs from 0 with the stop included
cache_gib_step: float = 8.0  # step of the expert-cache axis in GiB
batch: str = "1,2,4,8,16,32,64,128"  # batch sizes B (agents per decode step), comma separated
policies: str = "lru,lfu,s3fifo,arc,belady,static"  # expert-cache policies compared, comma separated (moeroof.models.plan.CACHE_POLICIES)
baseline: str = "lru"  # the policy every gain is measured against, empty string for none
oracles: str = "belady,static"  # policies no engine can run online (offline optimum, pinned from the true routing), comma separated
tie_tolerance: float = 0.001  # a cell whose best policy beats the runner-up by less than this share counts as a tie
workers: int = 2  # worker processes of a local dask cluster, 1 runs every point in this kernel, serially
scheduler: str = ""  # address of a running dask scheduler (tcp://host:8786) to sweep on instead, empty string for a local one
out: str = ""  # Parquet file the sweep writes and resumes from (absolute path), empty string for a temporary folder
# fmt: on

# %%
import tempfile
from pathlib import Path

import dask
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pyarrow
from IPython.display import Markdown, display
from matplotlib.colors import ListedColormap, LogNorm
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

import moeroof
from moeroof.core.paths import resolve_data
from moeroof.data.io import load_any
from moeroof.models.plan import CACHE_POLICIES
from moeroof.present import answers
from moeroof.present.plots import label_with_baseline, plain_log_ticks, provenance_label, save_figure, show_table, style
from moeroof.run.sweep import expand, grid_from_dict, run_sweep

policy_list = [p.strip() for p in policies.split(",") if p.strip()]
oracle_list = [p.strip() for p in oracles.split(",") if p.strip()]
batch_list = [int(b) for b in batch.split(",") if b.strip()]
grid = grid_from_dict(
    {
        "command": "plan",
        "cache_gib": {"start": 0.0, "stop": float(cache_gib_max), "step": float(cache_gib_step)},
        "batch": batch_list,
        "cache_policy": policy_list,
        "fixed": {
            "model": model,
            "hardware": hardware,
            "routing": routing,
            "context": context_tokens,
        },
    },
    "sweep notebook",
)
temporary = None if out else tempfile.TemporaryDirectory(prefix="moeroof-sweep-")
parquet = Path(out) if out else Path(temporary.name) / "sweep.parquet"
summary = run_sweep(grid, parquet, workers=workers, scheduler=scheduler or None)
print(
    f"{summary['points']} points ("
    + " × ".join(f"{len(v)} {k}" for k, v in grid.axes.items())
    + f"): {summary['skipped']} already in the file, {summary['evaluated']} evaluated, {summary['failed']} failed; "
    f"{summary['where']}"
)

# %% [markdown]
# ## The rows, read back from the Parquet file
# Only this grid's points (by `point_id`, a hash of a point's inputs) are kept when `out` names
# a file that holds other points too. A cell is compared only when every policy ran there without
# an error and the batch fits in RAM (the dense band and the batch's KV cache; the same for every
# policy); in a compared cell the best policy wins when it beats the runner-up by at least
# `tie_tolerance`, else the cell is a tie.

# %%
ids = {p["point_id"] for p in expand(grid)}
rows = pd.read_parquet(parquet, engine="pyarrow")
rows = rows[rows["point_id"].isin(ids)].reset_index(drop=True)
if temporary is not None:
    temporary.cleanup()
failed_rows = rows[rows["error"].notna()]
good = rows[rows["error"].isna()].copy()
if good.empty:
    raise RuntimeError(f"every point of the sweep failed; the first error: {failed_rows['error'].iloc[0]}")
good["cache_gib"] = good["cache_gib"].astype(float)

run_model = "+".join(sorted(good["model"].unique()))
run_box = "+".join(sorted(good["hardware"].unique()))
run_routing = "+".join(sorted(good["routing"].unique()))
run_context = int(good["context"].iloc[0])
cache_axis = np.array(sorted(float(c) for c in grid.axes["cache_gib"]))
batch_axis = np.array(sorted(int(b) for b in grid.axes["batch"]))
cells = pd.MultiIndex.from_product([cache_axis, batch_axis], names=["cache_gib", "batch"])
net = good.pivot(index=["cache_gib", "batch"], columns="cache_policy", values="net_tok_s").reindex(
    index=cells, columns=policy_list
)
fits = (
    good.pivot(index=["cache_gib", "batch"], columns="cache_policy", values="fits_in_memory")
    .reindex(index=cells, columns=policy_list)
    .eq(True)
)
compared = net.notna().all(axis=1) & fits.all(axis=1)
online_list = [p for p in policy_list if p not in oracle_list]

# provenance from the rows themselves: projected as soon as one row rests on a non-witnessed input
not_witnessed = sorted({n for s in good["non_witnessed"].fillna("") for n in s.split(",") if n})
projected = bool((good["result"] == "projected").any()) or bool(not_witnessed)
PROV = provenance_label("projected" if projected else "witnessed-inputs")
synthetic = (
    [f"the routing data `{routing}`"]
    if not (routing == "uniform" or routing.startswith("zipf:"))
    and answers.is_synthetic(load_any(resolve_data(routing)).provenance)
    else []
)
if synthetic:
    PROV += "; synthetic routing data"


def rank_cells(table, names):
    """Per compared cell: the best of ``names``, its net tok/s, the runner-up and best ÷ runner-up."""
    sub = table.loc[compared, names]
    order = np.argsort(-sub.to_numpy(), axis=1, kind="stable")
    vals = np.take_along_axis(sub.to_numpy(), order, axis=1)
    ranked = pd.DataFrame(
        {
            "best": np.array(names)[order[:, 0]],
            "best net tok/s": vals[:, 0],
            "runner-up": np.array(names)[order[:, 1]] if len(names) > 1 else "",
            "margin": vals[:, 0] / vals[:, 1] if len(names) > 1 else np.inf,
        },
        index=sub.index,
    )
    ranked["winner"] = np.where(ranked["margin"] >= 1 + tie_tolerance, ranked["best"], "tie")
    return ranked


def largest_gain(names):
    """The largest net tok/s multiple of any of ``names`` over the baseline at the same cell."""
    others = [p for p in names if p != baseline]
    if baseline not in policy_list or not others or not compared.any():
        return None
    ratio = net.loc[compared, others].div(net.loc[compared, baseline], axis=0)
    flat = ratio.to_numpy()
    i, j = np.unravel_index(np.argmax(flat), flat.shape)
    cache_at, batch_at = ratio.index[i]
    return {"policy": others[j], "multiple": float(flat[i, j]), "cache_gib": cache_at, "batch": int(batch_at)}


ranked = rank_cells(net, policy_list)
ranked_online = rank_cells(net, online_list) if 1 < len(online_list) < len(policy_list) else None
wins = {p: int((ranked["winner"] == p).sum()) for p in policy_list}
online_wins = None if ranked_online is None else {p: int((ranked_online["winner"] == p).sum()) for p in online_list}
best_gain = largest_gain(policy_list)
online_gain = largest_gain(online_list) if ranked_online is not None else None
print(
    f"{len(rows)} rows of this grid in {parquet.name}: {len(good)} evaluated, {len(failed_rows)} failed; "
    f"{int(compared.sum())} of {len(cells)} cells compared; model {run_model}, box {run_box}, routing {run_routing}"
)

# %% tags=["answer"]
where_words = "one process, serially" if summary["where"] == "serial" else f"a dask {summary['where']}"
display(
    Markdown(
        answers.sweep(
            model=run_model,
            hardware=run_box,
            routing=run_routing,
            context_tokens=run_context,
            points=len(rows),
            failed=len(failed_rows),
            where=where_words,
            policies=policy_list,
            cache_gib=(float(cache_axis[0]), float(cache_axis[-1])),
            batch=(int(batch_axis[0]), int(batch_axis[-1])),
            cells=len(cells),
            compared=int(compared.sum()),
            wins=wins,
            ties=int((ranked["winner"] == "tie").sum()),
            tie_tolerance=tie_tolerance,
            online=online_list,
            online_wins=online_wins,
            baseline=baseline if baseline in policy_list else None,
            best_gain=best_gain,
            online_gain=online_gain,
            inputs={name: "not witnessed" for name in not_witnessed}
            if not_witnessed
            else ({"the plan": "projected"} if projected else {}),
            synthetic=synthetic,
        )
    )
)


# %% [markdown]
# ## Net tok/s surfaces, one per policy
# Each panel is one policy's net tok/s (all agents) over the expert cache requested and B, on
# one log colour scale shared by every panel. Hatched cells: the batch does not fit in RAM, or
# the point failed.


# %%
def edges(x, log):
    """Cell edges around grid centres, for pcolormesh."""
    x = np.asarray(x, dtype=float)
    if x.size == 1:
        return np.r_[x[0] / 1.5, x[0] * 1.5] if log else np.r_[x[0] - 0.5, x[0] + 0.5]
    if log:
        mid = np.sqrt(x[1:] * x[:-1])
        return np.r_[x[0] ** 2 / mid[0], mid, x[-1] ** 2 / mid[-1]]
    mid = (x[1:] + x[:-1]) / 2
    return np.r_[x[0] - (mid[0] - x[0]), mid, x[-1] + (x[-1] - mid[-1])]


x_edges, y_edges = edges(batch_axis, True), edges(cache_axis, False)


def surface(values):
    """A (cache, B) array from a Series indexed by (cache_gib, batch)."""
    return values.reindex(cells).to_numpy(dtype=float).reshape(cache_axis.size, batch_axis.size)


def hatch(ax, mask):
    for i, j in zip(*np.nonzero(mask)):
        ax.add_patch(
            Rectangle(
                (x_edges[j], y_edges[i]),
                x_edges[j + 1] - x_edges[j],
                y_edges[i + 1] - y_edges[i],
                fill=False,
                hatch="//",
                edgecolor="0.55",
                linewidth=0,
            )
        )


def axes_labels(ax):
    ax.set(xscale="log", xlabel="batch B (agents per decode step)", ylabel="expert cache requested (GiB)")
    ax.set_xlim(x_edges[0], x_edges[-1])
    ax.set_ylim(y_edges[0], y_edges[-1])
    if cache_axis.size <= 12:  # a tick on every cache size of the grid
        ax.set_yticks(cache_axis, [f"{c:g}" for c in cache_axis])
    plain_log_ticks(ax, "x")
    ax.grid(False)


title_run = f"{run_model} on {run_box}, routing {run_routing}, ctx {run_context} tokens — {PROV}"
shown_values = net.where(fits).to_numpy(dtype=float)
finite = shown_values[np.isfinite(shown_values) & (shown_values > 0)]
norm = LogNorm(vmin=finite.min(), vmax=finite.max()) if finite.size else None
ncols = min(3, len(policy_list))
nrows = -(-len(policy_list) // ncols)
with style():
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(4.4 * ncols, 3.5 * nrows + 0.8), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[len(policy_list) :]:
        ax.set_visible(False)
    for ax, policy in zip(axes.flat, policy_list):
        z = surface(net[policy].where(fits[policy]))
        mesh = ax.pcolormesh(x_edges, y_edges, np.ma.masked_invalid(z), cmap="viridis", norm=norm)
        hatch(ax, ~np.isfinite(z))
        axes_labels(ax)
        ax.set_title(policy + (" (oracle)" if policy in oracle_list else ""), fontsize=10)
    cb = fig.colorbar(mesh, ax=axes, label="net tok/s, all agents (log scale)", shrink=0.9)
    cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    cb.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
    fig.suptitle(f"net tok/s over expert cache × batch, one panel per cache policy\n{title_run}", fontsize=10)
    save_figure(fig, "sweep_net_tok_s")
    plt.show()

# %% [markdown]
# ## The best policy per cell, and by how much
# Colour: the policy with the most net tok/s in the cell; the number is its net tok/s over the
# runner-up's in the same cell ("tie" when that is under `tie_tolerance`). Left: every policy;
# right: only the policies an engine can run online (the oracles left out).

# %%
palette = dict(zip(CACHE_POLICIES, ["#4C72B0", "#DD8452", "#55A868", "#8172B3", "#C44E52", "#937860"]))
colour_names = [*policy_list, "tie"]
cmap = ListedColormap([palette.get(p, "#777777") for p in policy_list] + ["#dddddd"])
panels = [("every policy", ranked)] + ([("online policies only", ranked_online)] if ranked_online is not None else [])
with style():
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 5.0), squeeze=False, layout="constrained")
    for ax, (name, r) in zip(axes[0], panels):
        code = surface(r["winner"].map({p: i for i, p in enumerate(colour_names)}).astype(float))
        ax.pcolormesh(x_edges, y_edges, np.ma.masked_invalid(code), cmap=cmap, vmin=-0.5, vmax=len(colour_names) - 0.5)
        hatch(ax, ~np.isfinite(code))
        margin = surface(r["margin"])
        for i, j in zip(*np.nonzero(np.isfinite(code))):
            m = margin[i, j]
            label = "tie" if m < 1 + tie_tolerance else (f"{m:.3f}×" if m < 1.01 else f"{m:.2f}×")
            ax.text(
                np.sqrt(x_edges[j] * x_edges[j + 1]),
                (y_edges[i] + y_edges[i + 1]) / 2,
                label,
                ha="center",
                va="center",
                fontsize=6.5,
            )
        axes_labels(ax)
        ax.set_title(
            f"{name}: best policy per cell\n"
            + label_with_baseline("number: its net tok/s ÷ the runner-up's", "the runner-up in that cell"),
            fontsize=9,
        )
    present = [p for p in colour_names if any((r["winner"] == p).any() for _, r in panels)]
    handles = [Patch(color=palette.get(p, "#dddddd") if p != "tie" else "#dddddd", label=p) for p in present]
    if not compared.all():
        handles.append(Patch(facecolor="none", edgecolor="0.55", hatch="//", label="not compared (RAM or failed)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8)
    fig.suptitle(f"which cache policy gives the most net tok/s\n{title_run}", fontsize=10)
    save_figure(fig, "sweep_best_policy")
    plt.show()

# %% [markdown]
# ## How often each policy wins, and where
# Cells won by each policy (by at least `tie_tolerance` over the runner-up), among every policy
# and among the online ones, with its net tok/s against the baseline at the same cell.

# %%
win_rows = []
for p in policy_list:
    row = {
        "policy": p,
        "oracle": p in oracle_list,
        "cells won (every policy)": wins[p],
        "share of compared cells": wins[p] / max(int(compared.sum()), 1),
    }
    if online_wins is not None:
        row["cells won (online only)"] = online_wins.get(p, np.nan)
    if baseline in policy_list and compared.any():
        ratio = net.loc[compared, p] / net.loc[compared, baseline]
        row[f"median × {baseline}"] = float(ratio.median())
        row[f"largest × {baseline}"] = float(ratio.max())
    win_rows.append(row)
win_rows.append(
    {
        "policy": "tie",
        "cells won (every policy)": int((ranked["winner"] == "tie").sum()),
        "share of compared cells": float((ranked["winner"] == "tie").mean()) if len(ranked) else np.nan,
        **(
            {"cells won (online only)": int((ranked_online["winner"] == "tie").sum())}
            if ranked_online is not None
            else {}
        ),
    }
)
show_table(pd.DataFrame(win_rows), percent=["share of compared cells"])

# %% [markdown]
# Per cache size (a row of the map): the policy that wins most of its B cells, over which B, and
# the largest margin over the runner-up there.

# %%
region_rows = []
for c in cache_axis:
    if c not in ranked.index.get_level_values("cache_gib"):
        region_rows.append({"cache GiB": c, "compared cells": 0})
        continue
    r = ranked.xs(c, level="cache_gib")
    counts = r["winner"].value_counts()
    top = max(policy_list, key=lambda p: (counts.get(p, 0), -policy_list.index(p)))
    won = r.index[r["winner"] == top]
    row = {
        "cache GiB": c,
        "compared cells": len(r),
        "most wins": top if counts.get(top, 0) else "tie",
        "cells won": int(counts.get(top, 0)),
        "at B": ", ".join(str(b) for b in won) or "—",
        "ties": int(counts.get("tie", 0)),
        "largest margin over the runner-up": float(r["margin"].max()),
    }
    if ranked_online is not None:
        o = ranked_online.xs(c, level="cache_gib")["winner"].value_counts()
        best_online = max(online_list, key=lambda p: (o.get(p, 0), -online_list.index(p)))
        row["most wins online"] = best_online if o.get(best_online, 0) else "tie"
    region_rows.append(row)
show_table(pd.DataFrame(region_rows))

# %% [markdown]
# ## Failed points
# A point that raised keeps its error in the Parquet's `error` column (the sweep goes on; a
# resumed run on the same `out` file retries it).

# %%
if failed_rows.empty:
    print(f"no failed points among {len(rows)}")
else:
    show_table(failed_rows[["cache_gib", "batch", "cache_policy", "error"]].reset_index(drop=True))

# %% [markdown]
# ## Versions and parameters

# %%
print(
    f"moeroof {moeroof.__version__}, dask {dask.__version__}, pyarrow {pyarrow.__version__}, "
    f"pandas {pd.__version__}, numpy {np.__version__}; Parquet rows written by moeroof "
    + ", ".join(sorted(rows["moeroof_version"].unique()))
)
for name, value in {
    "model": model,
    "hardware": hardware,
    "routing": routing,
    "context_tokens": context_tokens,
    "cache_gib_max": cache_gib_max,
    "cache_gib_step": cache_gib_step,
    "batch": batch,
    "policies": policies,
    "baseline": baseline,
    "oracles": oracles,
    "tie_tolerance": tie_tolerance,
    "workers": workers,
    "scheduler": scheduler,
    "out": out,
}.items():
    print(f"{name} = {value}")
