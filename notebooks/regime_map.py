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
# # Across batch B and expert-cache size, which resource binds and what net tok/s results?
#
# Each cell is one decode step of the one step model: the binding term is the largest of the
# SSD, memory, compute and engine terms, and net tok/s is B over the step time; hatched cells are
# infeasible (the dense band and the batch's KV exceed RAM). The answer, computed from this run's
# maps, opens the report (in the notebook it follows the setup cell); every number it uses is printed under "The answer's numbers".

# %% tags=["parameters"]
# fmt: off
model: str = "glm-5.2"  # model preset name or path to a model TOML
hardware: str = "nvme-gen4"  # hardware preset name or path to a hardware TOML
contrast_hardware: str = "epyc-server"  # a second box drawn beside the first, empty string for none
routing: str = "prior"  # prior (the skew prior, fitted on public routing), uniform, zipf:S, dirichlet:A, or a histogram or trace: your file (from the working directory, or absolute) or an embedded name under data/
context_tokens: int = 4096  # context per agent in tokens
overlap: str = "max"  # combine for the bound map contours, max for perfect overlap or sum for serial
b_max: int = 1024  # largest batch on the B axis
n_batch: int = 48  # batch grid points, log-spaced integers from 1 to b_max, at least 2
cache_gib_max: float = 0.0  # top of the cache axis in GiB, 0 for what RAM leaves beside the dense band
n_cache: int = 41  # cache grid points from 0 to cache_gib_max, at least 2
cache_policy: str = "lru"  # the expert cache the step sees: lru (simulated, default), lfu, s3fifo, arc, belady, or static (pinned oracle)
# fmt: on

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display
from matplotlib.colors import BoundaryNorm, ListedColormap, LogNorm
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

import moeroof
from moeroof.core.paths import resolve_data
from moeroof.core.units import GiB
from moeroof.data.embedded import is_file_spec
from moeroof.data.io import load_any
from moeroof.data.presets import load_hardware, load_model
from moeroof.models.expert_cache import policy_label
from moeroof.models.plan import Workload, input_provenance, routing_from_spec
from moeroof.present import answers
from moeroof.present.plots import plain_log_ticks, provenance_label, save_figure, show_table, style
from moeroof.studies import what_changed
from moeroof.studies.regime_map import BOUND_CODES, regime_map

key_batches = [1, 8, 16, 64, 128, 256, 1024]  # rows shown in the tables
batch = np.unique(
    np.r_[np.round(np.logspace(0, np.log10(b_max), n_batch)), [b for b in key_batches if b <= b_max]].astype(int)
)
term_colours = {"ssd": "#4C72B0", "memory": "#DD8452", "compute": "#55A868", "engine": "#8172B3", "fabric": "#C44E52"}

m = load_model(model)
route = routing_from_spec(str(resolve_data(routing)) if is_file_spec(routing) else routing, m)
boxes = [load_hardware(hardware)] + ([load_hardware(contrast_hardware)] if contrast_hardware else [])


def cache_axis_gib(hw):
    """0 → what RAM leaves beside the OS reserve and dense band, capped at the whole routed model."""
    if cache_gib_max > 0:
        return cache_gib_max
    return max(min(hw.ram_bytes - hw.os_reserve_bytes - m.non_routed_bytes, m.routed_bytes), 0.0) / GiB


maps = {}
for hw in boxes:
    cache = np.linspace(0.0, cache_axis_gib(hw), n_cache) * GiB
    for ov in ("max", "sum"):
        work = Workload(context_tokens=context_tokens, overlap=ov, cache_policy=cache_policy)
        maps[hw.name, ov] = regime_map(m, hw, work, route, batch, cache)
prov = provenance_label("projected")
if any(r.provenance != "projected" for r in maps.values()):
    prov += "; some from witnessed inputs only"
print(
    f"{m.name}: {m.routed_bytes / GiB:.0f} GiB of routed experts; routing {route.label}; context {context_tokens} tokens"
)
print(f"expert cache: {policy_label(cache_policy)}")
for hw in boxes:
    print(f"{hw.name}: cache axis 0 to {cache_axis_gib(hw):.1f} GiB; RAM {hw.ram_bytes / GiB:.1f} GiB")

# %% tags=["answer"]
answer_boxes = {}
for hw in boxes:
    r = maps[hw.name, overlap]
    ok = r.fits_in_memory
    net = np.where(ok, r.net_tok_s, -np.inf)
    i, j = np.unravel_index(np.argmax(net), net.shape)
    answer_boxes[hw.name] = {
        "terms": [t for t in BOUND_CODES if (r.bound[ok] == t).any()],
        "best": float(net[i, j]),
        "best_batch": int(r.batch[j]),
        "best_cache_gib": float(r.cache_bytes[i] / GiB),
        "cache_gib_max": float(r.cache_bytes[-1] / GiB),
        "infeasible_share": float(np.mean(~ok)),
        "link": hw.link,
    }
answer_inputs = {}
for hw in boxes:  # an input counts as witnessed only if it is witnessed on every box
    for k, tag in input_provenance(m, hw, route.provenance, 1)["inputs"].items():
        answer_inputs[k] = tag if answer_inputs.get(k, "witnessed") == "witnessed" else answer_inputs[k]
display(
    Markdown(
        answers.regime_map(
            model=m.name,
            routing=route.label,
            overlap=overlap,
            cache_policy=policy_label(cache_policy),
            boxes=answer_boxes,
            batch_max=int(batch[-1]),
            inputs=answer_inputs,
            synthetic=[f"the routing data `{routing}`"]
            if is_file_spec(routing) and answers.is_synthetic(load_any(resolve_data(routing)).provenance)
            else [],
        )
    )
)


# %% [markdown]
# ## What changed with the one step model
# The same maps (`overlap` parameter) with the cache the step used to see, a hot set pinned from
# the true routing probabilities (`cache_policy="static"`, an oracle), against this notebook's
# `cache_policy`: the best feasible cell, how many cells change their binding term, and where
# the bound changes along B at the largest cache.

# %%
oracle = what_changed.ORACLE_POLICY
map_changes = {}
for hw in boxes:
    r = maps[hw.name, overlap]
    pinned = regime_map(
        m,
        hw,
        Workload(context_tokens=context_tokens, overlap=overlap, cache_policy=oracle),
        route,
        batch,
        r.cache_bytes,
    )
    map_changes[hw.name] = what_changed.compare_maps({cache_policy: r, oracle: pinned}, cache_policy, oracle)
display(
    Markdown(
        " ".join(
            [what_changed.INTRO, f"{m.name}, {route.label} routing, ctx {context_tokens} tokens, {overlap} overlap."]
            + [what_changed.map_paragraph(c, box=name, gib=GiB) for name, c in map_changes.items()]
        )
    )
)


def edges(x, log):
    """Cell edges around grid centres, for pcolormesh."""
    x = np.asarray(x, dtype=float)
    if log:
        mid = np.sqrt(x[1:] * x[:-1])
        return np.r_[x[0] ** 2 / mid[0], mid, x[-1] ** 2 / mid[-1]]
    mid = (x[1:] + x[:-1]) / 2
    return np.r_[x[0] - (mid[0] - x[0]), mid, x[-1] + (x[-1] - mid[-1])]


def hatch_infeasible(ax, r):
    if not r.fits_in_memory.all():
        ax.contourf(
            r.batch,
            r.cache_bytes / GiB,
            (~r.fits_in_memory).astype(float),
            levels=[0.5, 1.5],
            colors="none",
            hatches=["//"],
        )
        ax.contour(
            r.batch, r.cache_bytes / GiB, (~r.fits_in_memory).astype(float), levels=[0.5], colors="0.3", linewidths=1
        )


# %% [markdown]
# ## Which term binds
# Each cell is `moeroof.models.plan.plan` at one requested cache size (the expert cache, a
# simulated LRU in steady state by default: the `cache_policy` parameter) and one B: T_step =
# combine(SSD, memory, compute, engine) and the binding term is the largest of them. The binding term is the same under `max` and `sum`
# overlap (it is the largest term either way); the contours are net tok/s under the `overlap`
# parameter. Hatched cells are infeasible as modelled: the dense band plus the batch's KV cache
# exceed RAM (the cache gets only what RAM leaves, so at large B a requested cache is capped and
# the map goes flat along the cache axis).

# %%
present = sorted({b for r in maps.values() for b in np.unique(r.bound)}, key=list(BOUND_CODES).index)
cmap = ListedColormap([term_colours[t] for t in BOUND_CODES])
norm = BoundaryNorm(np.arange(len(BOUND_CODES) + 1) - 0.5, cmap.N)

with style():
    fig, axes = plt.subplots(1, len(boxes), figsize=(6.2 * len(boxes), 5.0), squeeze=False)
    for ax, hw in zip(axes[0], boxes):
        r = maps[hw.name, overlap]
        ax.pcolormesh(
            edges(r.batch, True), edges(r.cache_bytes / GiB, False), r.bound_code, cmap=cmap, norm=norm, alpha=0.85
        )
        lo, hi = np.nanmin(r.net_tok_s), np.nanmax(r.net_tok_s)
        levels = [x for x in (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if lo < x < hi]
        if levels:
            # contours only over feasible cells: they stop at the hatched region instead of running into it
            feasible = np.ma.masked_where(~r.fits_in_memory, r.net_tok_s)
            cs = ax.contour(r.batch, r.cache_bytes / GiB, feasible, levels=levels, colors="k", linewidths=0.8)
            ax.clabel(cs, fmt=lambda v: f"{v:g} tok/s", fontsize=7)
        hatch_infeasible(ax, r)
        ax.set(
            xscale="log",
            xlabel="batch B (agents per decode step)",
            ylabel="expert cache requested (GiB)",
            title=f"{hw.name}: binding term, net tok/s contours ({overlap} overlap)\n{m.name}, {route.label}, "
            f"ctx {context_tokens} tokens — {prov}",
        )
        plain_log_ticks(ax, "x")
        ax.title.set_fontsize(9)
    handles = [Patch(color=term_colours[t], label=f"{t} binds") for t in present]
    handles.append(Patch(facecolor="none", edgecolor="0.3", hatch="//", label="infeasible: dense band + KV exceed RAM"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save_figure(fig, "regime_map_bound")
    plt.show()

# %% [markdown]
# ## Net tok/s, perfect overlap against serial terms
# `max` assumes SSD reads, memory reads and compute overlap perfectly; `sum` runs them one after
# the other. The truth of an engine lies between. Both panels share one log colour scale; masked
# (hatched, white) cells are infeasible and carry no number.

# %%
with style():
    fig, axes = plt.subplots(len(boxes), 2, figsize=(12, 4.4 * len(boxes)), squeeze=False, layout="constrained")
    for row, hw in zip(axes, boxes):
        both = [maps[hw.name, ov] for ov in ("max", "sum")]
        vals = np.concatenate([r.net_tok_s[r.fits_in_memory] for r in both])
        lognorm = LogNorm(vmin=vals.min(), vmax=vals.max()) if vals.size else None
        for ax, r in zip(row, both):
            shown = np.ma.masked_where(~r.fits_in_memory, r.net_tok_s)
            mesh = ax.pcolormesh(
                edges(r.batch, True), edges(r.cache_bytes / GiB, False), shown, cmap="viridis", norm=lognorm
            )
            hatch_infeasible(ax, r)
            ax.set(
                xscale="log",
                xlabel="batch B (agents per decode step)",
                ylabel="expert cache requested (GiB)",
                title=f"{hw.name}, {r.overlap} overlap",
            )
            plain_log_ticks(ax, "x")
        cb = fig.colorbar(mesh, ax=row, label="net tok/s, all agents (log scale)")
        cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        cb.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
    fig.suptitle(
        f"net tok/s over batch and cache: {m.name}, {route.label}, ctx {context_tokens} tokens — {prov}\n"
        "hatched, blank: infeasible, the dense band and the batch's KV exceed RAM",
        fontsize=10,
    )
    save_figure(fig, "regime_map_net_tok_s")
    plt.show()

# %% [markdown]
# ## Regime boundaries B* at a few cache sizes
# From `Plan.transitions` along the B grid (B* is the first grid B of the new regime, so it is
# as coarse as the grid), with the first infeasible B and net tok/s at a few B (`overlap`
# parameter).

# %%
rows = []
for hw in boxes:
    r = maps[hw.name, overlap]
    for i in np.unique(np.round(np.linspace(0, r.cache_bytes.size - 1, 5)).astype(int)):
        infeasible = r.batch[~r.fits_in_memory[i]]
        row = {
            "box": hw.name,
            "cache GiB": r.cache_bytes[i] / GiB,
            "bound at B=1": r.bound[i, 0],
            "transitions (B*)": "; ".join(f"{t['from']}→{t['to']} at B={t['batch']}" for t in r.transitions[i])
            or "none",
            "infeasible from B": int(infeasible[0]) if infeasible.size else "—",
        }
        for b in (1, 16, 64, 256):
            if b in r.batch:
                j = int(np.flatnonzero(r.batch == b)[0])
                row[f"net tok/s B={b}"] = r.net_tok_s[i, j] if r.fits_in_memory[i, j] else np.nan
        rows.append(row)
show_table(pd.DataFrame(rows))

# %%
best = []
for hw in boxes:
    for ov in ("max", "sum"):
        r = maps[hw.name, ov]
        net = np.where(r.fits_in_memory, r.net_tok_s, -np.inf)
        i, j = np.unravel_index(np.argmax(net), net.shape)
        best.append(
            {
                "box": hw.name,
                "overlap": ov,
                "best net tok/s": net[i, j],
                "at B": int(r.batch[j]),
                "cache GiB requested": r.cache_bytes[i] / GiB,
                "cache GiB after RAM pressure": r.cache_effective_bytes[i, j] / GiB,
                "binds": r.bound[i, j],
                "share of feasible cells SSD-bound": float(np.mean(r.bound[r.fits_in_memory] == "ssd")),
            }
        )
show_table(pd.DataFrame(best), percent=["share of feasible cells SSD-bound"])

# %% [markdown]
# ## The answer's numbers, computed
# Every number behind the answer above, from the maps of this notebook (feasible cells only:
# the dense band and the batch's KV fit in RAM). Net tok/s under the `overlap` parameter unless
# a line names `sum`.


# %%
def feasible_net(r):
    return np.where(r.fits_in_memory, r.net_tok_s, np.nan)


def best_cell(r):
    net = np.where(r.fits_in_memory, r.net_tok_s, -np.inf)
    i, j = np.unravel_index(np.argmax(net), net.shape)
    return net[i, j], int(r.batch[j]), r.cache_bytes[i] / GiB


for hw in boxes:
    r, r_sum = maps[hw.name, overlap], maps[hw.name, "sum"]
    ok, net = r.fits_in_memory, feasible_net(r)
    terms = ", ".join(t for t in BOUND_CODES if (r.bound[ok] == t).any())
    ssd_share = float(np.mean(r.bound[ok] == "ssd"))
    rises_b = bool(np.all(np.nan_to_num(np.diff(net, axis=1), nan=0) >= -1e-9))
    rises_c = bool(np.all(np.nan_to_num(np.diff(net, axis=0), nan=0) >= -1e-9))
    infeasible = r.batch[(~ok).any(axis=0)]
    compute_b = r.batch[(r.bound == "compute").any(axis=0)]
    largest_ok = r.batch[ok.any(axis=0)][-1]
    print(
        f"{hw.name}, {overlap} overlap: feasible cells bind on {terms} ({ssd_share:.0%} SSD-bound); "
        f"net tok/s never falls with B: {rises_b}, never falls with cache: {rises_c}; "
        f"{net[0, 0]:.2f} at B = 1 with no cache, {net[-1, 0]:.2f} with the whole {r.cache_bytes[-1] / GiB:.1f} GiB cache axis"
    )
    print(f"  KV exhausts RAM from B = {infeasible[0]}" if infeasible.size else "  every cell fits in RAM", end="")
    print(f"; compute first binds at B = {compute_b[0]}" if compute_b.size else "; compute never binds", end="")
    print(f"; largest feasible B = {largest_ok}")
    mem = (r.bound == "memory") & ok
    if mem.any():
        c_lo = r.cache_bytes[mem.any(axis=1)][0]
        print(
            f"  memory binds only with at least {c_lo / GiB:.0f} GiB cached ({c_lo / m.routed_bytes:.0%} of "
            f"{m.routed_bytes / GiB:.0f} GiB of routed experts) and only up to B = {r.batch[mem.any(axis=0)][-1]}; "
            f"with the whole cache axis B* = "
            + "; ".join(f"{t['from']}→{t['to']} at B = {t['batch']}" for t in r.transitions[-1])
        )
    else:
        print("  memory binds in no feasible cell")
    if ok[:, -1].all():
        print(
            f"  compute binds at the largest B = {r.batch[-1]} for every cache size: "
            f"{bool((r.bound[:, -1] == 'compute').all())}; net tok/s there {net[:, -1].min():.2f}–{net[:, -1].max():.2f} "
            f"across cache sizes (map maximum {np.nanmax(net):.2f})"
        )
    else:
        print(f"  the largest B = {r.batch[-1]} is infeasible at {np.mean(~ok[:, -1]):.0%} of cache sizes")
    b_max_net, b_at, c_at = best_cell(r)
    s_net, s_at, s_c = best_cell(r_sum)
    print(
        f"  best feasible cell: {b_max_net:.2f} tok/s at B = {b_at}, {c_at:.1f} GiB requested ({overlap}); "
        f"{s_net:.2f} tok/s at B = {s_at}, {s_c:.1f} GiB requested (sum); binding term identical under max and sum "
        f"in every cell: {bool(np.array_equal(maps[hw.name, 'max'].bound, r_sum.bound))}"
    )

# %% [markdown]
# ## Versions and parameters

# %%
print(f"moeroof {moeroof.__version__}, numpy {np.__version__}")
for name, value in {
    "model": model,
    "hardware": hardware,
    "contrast_hardware": contrast_hardware,
    "routing": routing,
    "context_tokens": context_tokens,
    "overlap": overlap,
    "b_max": b_max,
    "n_batch": n_batch,
    "cache_gib_max": cache_gib_max,
    "n_cache": n_cache,
    "cache_policy": cache_policy,
}.items():
    print(f"{name} = {value}")
