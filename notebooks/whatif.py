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
# # What if the box, the cache or the routing were different: how do net tok/s and U(B) move?
#
# Open this notebook in `make lab` and move the controls at the end: net tok/s with its regimes
# and baselines, U(B) and the cache hit rate are redrawn from `moeroof.models.plan.plan`,
# `moeroof.models.union` and the cache simulator on every change. The report shows the state the
# parameters set; its answer, computed from that state, follows the setup cell. Routing is the
# Zipf `skew` control, or a histogram or trace file given as `routing` (like net_toks' `routing`).

# %% tags=["parameters"]
# fmt: off
model: str = "glm-5.2"  # model preset name or a TOML path
hardware: str = "nvme-gen4"  # hardware preset name or a TOML path
b_min: int = 1  # smallest batch in the sweep
b_max: int = 256  # largest batch in the sweep
cache_gib: float | str = "auto"  # expert cache in GiB, or auto (30 GiB capped at the model's routed experts and at what RAM leaves beside one agent's KV)
skew: float = 0.5  # Zipf exponent s of expert popularity, 0 for uniform routing (when routing is empty)
routing: str = ""  # histogram or trace (your file (from the working directory, or absolute) or an embedded name under data/; or uniform, zipf:S) for the routing, empty for the skew control
stickiness: float = 0.3  # chance that an expert of the last step is picked again (simulated cache only)
ssd_gb_s: float = 0.0  # peak SSD read bandwidth in GB/s, 0 keeps the preset's curve
mem_gb_s: float = 0.0  # memory bandwidth in GB/s, 0 keeps the preset's
overlap: str = "max"  # max for perfect overlap, sum for serial terms
context_tokens: int = 4096  # context per agent in tokens
locality: str = "prior"  # one stream's temporal locality for the plan's simulated cache: prior (fitted on real decode, data/fits/locality-prior.json) or independent tokens
cache_policy: str = "lru"  # the expert cache plan simulates: lru (default), lfu, s3fifo, arc, belady, or static (pinned oracle)
trace_streams: int = 8  # agents in the simulated trace of the cache-over-time panel
trace_steps: int = 64  # decode steps in the simulated trace
trace_layers: int = 8  # MoE layers drawn for the simulated trace
seed_name: str = "whatif"  # the trace's generator seed is derived from this name
fit: str = ""  # a moeroof fit-plan --json result (your file, or an embedded name under data/) whose fitted engine terms, SSD scale and skew the state runs with; empty for none
# fmt: on

# %%
from dataclasses import replace

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

import moeroof
from moeroof.cachesim import requests_from_trace, simulate
from moeroof.core.paths import resolve_data
from moeroof.core.units import GB, GiB, gb_per_s
from moeroof.data.embedded import is_file_spec
from moeroof.data.fit_result import read_fit
from moeroof.data.io import load_any
from moeroof.data.presets import list_presets, load_hardware, load_model
from moeroof.fit.plan import box_with_fit, routing_with_fit
from moeroof.fit.skew import popularity_from_inclusion
from moeroof.models.local_routing import cache_sees_locality, locality_parameter, with_locality
from moeroof.models.plan import CACHE_POLICIES, Workload, cache_parameter, plan, routing_from_spec
from moeroof.models.routing import Zipf, sample_trace
from moeroof.models.union import BASELINE, union_plugin, union_uniform
from moeroof.present import answers
from moeroof.present.plots import (
    label_with_baseline,
    plain_log_ticks,
    provenance_label,
    save_figure,
    shade_regimes,
    show_table,
    style,
)
from moeroof.studies import what_changed

seed = sum(map(ord, seed_name))
locality_parameter(locality)  # a bad value stops the report here, before the controls are built
local_routes: dict = {}
presets = list_presets()
KEY_BATCHES = [1, 8, 16, 64, 128, 256, 1024]  # rows shown in the table


# %% [markdown]
# ## One state of the controls, drawn
# `whatif` evaluates one state: it loads the presets, overrides the bandwidths when asked (a
# configuration change, so those inputs become `assumed`), and calls the library:
# `moeroof.models.plan.plan` for net tok/s, its regimes, the cache hit rate and the `uncoalesced`
# and `single` baselines, under the chosen cache policy and under the pinned oracle (`static`) for
# the comparison; `union.union_plugin` for U(B) under Zipf routing; `routing.sample_trace` and
# `cache.simulate` for the cache hit rate over time. `draw` only plots what comes back.
#
# **Stickiness** does not enter `plan`: its cache is simulated in steady state on traces drawn
# from the routing probabilities with independent tokens (or pinned from them), and neither
# depends on what the previous step picked. The library models stickiness only in sampled traces
# (`routing.sample_trace(rho=…)`), whose hit rate the cache simulator measures; that hit rate is
# not fed back into `plan`. So the stickiness control moves the third panel only, where LRU and
# LFU on the sticky trace (same GiB, per layer) are set beside the hit rate `plan` sees at the
# same B under the chosen policy and under the pinned oracle.


# %%
def whatif(
    model, hardware, b_range, cache_gib, skew, stickiness, ssd_gb_s, mem_gb_s, overlap, cache_policy, routing=""
):
    """Library results for one state of the controls (no model logic here: loads and calls)."""
    m = load_model(model)
    hw = load_hardware(hardware)
    fitted = read_fit(resolve_data(fit)) if fit.strip() else None
    fit_knobs = []
    if fitted is not None:  # the box as the fit made it (plan --fit does the same)
        hw = box_with_fit(hw, fitted)
        fit_knobs = [
            k for k in ("engine_seconds_per_step", "engine_seconds_per_agent_token", "ssd_scale") if k in fitted
        ]
        if "skew" in fitted and not routing.strip():
            skew = fitted["skew"]
            fit_knobs.append("skew")
    changed = {}
    if ssd_gb_s > 0:  # scale the preset's read-size curve so that its peak is ssd_gb_s
        factor = ssd_gb_s * GB / max(hw.bw_ssd_bytes_per_s)
        changed["bw_ssd_bytes_per_s"] = tuple(b * factor for b in hw.bw_ssd_bytes_per_s)
    if mem_gb_s > 0:
        changed["bw_mem_bytes_per_s"] = mem_gb_s * GB
    if changed:
        hw = replace(hw, **changed, provenance={**hw.provenance, **{k: "assumed" for k in changed}})
    lo, hi = sorted(int(b) for b in b_range)
    grid = np.round(np.logspace(np.log10(lo), np.log10(max(hi, lo)), 40))
    batch = np.unique(np.r_[grid, [b for b in KEY_BATCHES if lo <= b <= hi]].astype(int))
    named = routing.strip()  # a routing the user gave (else the skew control's)
    spec = named or ("uniform" if skew == 0 else f"zipf:{skew}")
    routing = routing_from_spec(spec, m)
    # a routing file's layers (cycled) drive the sampled trace; otherwise the Zipf skew does
    from_file = is_file_spec(spec)
    popularity = (
        popularity_from_inclusion(routing.pi, m.top_k, tol=1e-5)[np.arange(trace_layers) % routing.pi.shape[0]]
        if from_file
        else None
    )
    workload = Workload(
        context_tokens=context_tokens, cache_bytes=cache_gib * GiB, overlap=overlap, cache_policy=cache_policy
    )
    # the plan's cache on streams with the locality prior: one routing object per routing, so that
    # its traces (sampled per B, whatever the cache) serve every later state of the controls
    if (spec, m.name) not in local_routes:
        # a fit's own held locality where it has one (as plan --fit), else the prior (the model's)
        held = None if fitted is None else routing_with_fit(m, fitted)
        prior = None if fitted else locality_parameter(locality, model=m)
        local_routes[spec, m.name] = held if held is not None and not named else with_locality(m, routing, prior)
    if cache_sees_locality(workload):
        routing = local_routes[spec, m.name]
    comparison = what_changed.compare_policies(m, hw, workload, routing, batch)
    p = comparison.plans[cache_policy]
    union = union_plugin(routing.pi, batch)
    uniform = union_uniform(m.experts, m.top_k, batch)
    at_streams = {
        pol: plan(m, hw, replace(workload, cache_policy=pol), routing, [trace_streams])
        for pol in dict.fromkeys((cache_policy, what_changed.ORACLE_POLICY))
    }
    cache_experts = float(at_streams[cache_policy].cache_experts_per_layer[0])
    hit_rate = {}
    for rho in sorted({0.0, float(stickiness)}):
        # a fresh generator per state: the same controls always draw the same trace
        topk = sample_trace(
            Zipf(m.experts, m.top_k, skew),
            trace_steps,
            trace_streams,
            trace_layers,
            np.random.default_rng(seed),
            rho=rho,
            popularity=popularity,
        )
        requests = requests_from_trace(topk, m.experts)
        for policy in ("lru", "lfu") if rho == stickiness else ("lru",):
            res = simulate(requests, cache_experts * trace_layers, policy=policy, scope="layer")
            hit_rate[policy, rho] = res.hits_per_step / np.maximum(res.hits_per_step + res.misses_per_step, 1)
    return {
        "model": m,
        "hardware": hw,
        "plan": p,
        "union": union,
        "uniform": uniform,
        "hit_rate": hit_rate,
        "plan_hit": {pol: float(q.cache_hit_rate[0]) for pol, q in at_streams.items()},
        "changed": comparison,
        "cache_experts": cache_experts,
        "cache_gib": cache_gib,
        "skew": skew,
        "routing_spec": spec,
        "routing_data_provenance": load_any(resolve_data(spec)).provenance if from_file else None,
        "fit_knobs": fit_knobs,
    }


def draw(s):
    """Three panels: net tok/s with regimes and baselines, U(B) and misses, cache hits over time."""
    p, m, hw = s["plan"], s["model"], s["hardware"]
    batch = p.batch
    mark = "o" if batch.size < 3 else None  # a B range of one or two sizes: points, not empty lines
    with style():
        fig, (ax_n, ax_u, ax_c) = plt.subplots(1, 3, figsize=(15, 4.6))
        regimes = shade_regimes(ax_n, batch, p.bound, p.fits_in_memory)
        # rates are NaN where the step does not fit: the curves stop at the boundary
        ax_n.plot(batch, p.net_tok_s, "k-", lw=2, marker=mark, label="coalesced (this model)")
        ax_n.plot(batch, p.baselines["uncoalesced"]["net_tok_s"], "C3--", marker=mark, label="baseline: uncoalesced")
        ax_n.plot(batch, p.baselines["single"]["net_tok_s"], "C0:", marker=mark, label="baseline: single (B = 1)")
        handles, labels = ax_n.get_legend_handles_labels()
        ax_n.legend(handles + [h for h, _ in regimes], labels + [lab for _, lab in regimes], fontsize=7)
        ax_n.set(xscale="log", yscale="log", xlabel="batch B (concurrent agents)", ylabel="net tok/s (all agents)")
        plain_log_ticks(ax_n)
        ax_n.set_title(
            f"{m.name} on {hw.name}: SSD {gb_per_s(max(hw.bw_ssd_bytes_per_s)):.3g} GB/s, "
            f"memory {gb_per_s(hw.bw_mem_bytes_per_s):.3g} GB/s\n"
            f"{provenance_label(p.provenance['result'])}, overlap {p.overlap}",
            fontsize=9,
        )

        ax_u.plot(batch, s["union"].mean, "k-", lw=2, marker=mark, label=f"U(B), {p.routing}")
        ax_u.plot(
            batch,
            np.where(p.fits_in_memory, p.misses_per_layer, np.nan),
            "C2-",
            marker=mark,
            label=f"misses after a {s['cache_gib']:g} GiB cache, {what_changed.short_label(p.cache_policy)}",
        )
        ax_u.plot(batch, s["uniform"].mean, "C3--", lw=1, label="U(B), uniform routing")
        ax_u.plot(batch, np.minimum(m.experts, batch * m.top_k), "k:", lw=1, label="min(E, B·K) bound")
        ax_u.set(xscale="log", xlabel="batch B", ylabel="distinct experts per layer")
        plain_log_ticks(ax_u)
        fit = np.flatnonzero(p.fits_in_memory)  # a multiple only where the step runs
        ax_u.set_title(
            f"E={m.experts}, K={m.top_k}; "
            + (
                f"{label_with_baseline('B·K/U', BASELINE)} at B={batch[fit[-1]]}: "
                f"{s['union'].coalescing_ratio[fit[-1]]:.2f}"
                if fit.size
                else "no B of the range fits in RAM"
            ),
            fontsize=9,
        )
        ax_u.legend(fontsize=7)

        steps = np.arange(1, len(next(iter(s["hit_rate"].values()))) + 1)
        for i, ((policy, rho), rate) in enumerate(sorted(s["hit_rate"].items())):
            ax_c.plot(
                steps,
                rate,
                f"C{i}-",
                lw=1.2,
                clip_on=False,
                label=f"{policy.upper()} on a sampled trace, stickiness ρ={rho:g}",
            )
        for pol, hit in s["plan_hit"].items():
            ax_c.axhline(
                hit,
                color="k" if pol == p.cache_policy else "0.55",
                ls=":" if pol == p.cache_policy else "--",
                label=f"what plan sees: {what_changed.short_label(pol)}, hit {hit:.1%}",
            )
        ax_c.set(ylim=(0, 1), xlabel="decode step", ylabel="cache hit rate per step")
        ax_c.set_title(
            f"cache over time: {s['cache_experts']:.0f} experts per layer, B={trace_streams}, "
            f"{trace_layers} layers\n{provenance_label('projected')}",
            fontsize=9,
        )
        ax_c.legend(fontsize=7)
        fig.tight_layout()
    return fig


# %% [markdown]
# ## What changed with the one step model
# The state of the controls under the chosen cache policy against the pinned oracle
# (`cache_policy="static"`), at the feasible B where net tok/s differs most and at the largest
# feasible B.

# %%
defaults_taken = []  # defaults that depend on the model, said in the answer
cache_gib, cache_why = cache_parameter(
    cache_gib, load_model(model), load_hardware(hardware), preferred_gib=30.0, context_tokens=context_tokens
)
if cache_why:
    defaults_taken.append(f"cache `auto` → {cache_why}")
state = whatif(
    model, hardware, (b_min, b_max), cache_gib, skew, stickiness, ssd_gb_s, mem_gb_s, overlap, cache_policy, routing
)


def answer(s):
    """The answer for one state, from moeroof.present.answers."""
    q = s["plan"]
    ok = np.asarray(q.fits_in_memory, dtype=bool)
    i = int(np.nanargmax(np.where(ok, q.net_tok_s, np.nan))) if ok.any() else None
    bad = np.flatnonzero(~ok)
    return answers.whatif(
        model=s["model"].name,
        hardware=s["hardware"].name,
        routing=s["routing_spec"],
        cache_gib=s["cache_gib"],
        batch_min=int(q.batch[0]),
        batch_max=int(q.batch[-1]),
        best_net_tok_s=None if i is None else float(q.net_tok_s[i]),
        best_batch=None if i is None else int(q.batch[i]),
        bound_at_best=None if i is None else q.bound[i],
        hit_rate_at_best=None if i is None else float(q.cache_hit_rate[i]),
        infeasible_from=int(q.batch[bad[0]]) if bad.size else None,
        fit=fit.strip() or None,
        fit_knobs=s["fit_knobs"],
        defaults=defaults_taken if s is state else (),
        infeasible_reason=q.infeasible_reason[bad[0]] if bad.size else None,
        union_at_max=float(s["union"].mean[-1]),
        inputs=q.provenance["inputs"],
        link=q.link_name,
        holds_all=s["model"].holds_every_expert(s["cache_gib"] * GiB),
        synthetic=[f"the routing data `{s['routing_spec']}`"]
        if answers.is_synthetic(s["routing_data_provenance"])
        else [],
    )


# %% tags=["answer"]
display(Markdown(answer(state)))

# %%
display(Markdown(what_changed.plan_paragraph(state["changed"], cache_gib=cache_gib)))

# %%
fig = draw(state)
save_figure(fig, "whatif_state")
plt.show()

# %%
p = state["plan"]
print(
    "regime transitions (B* = first batch of the new regime):",
    "; ".join(f"{t['from']} → {t['to']} at B = {t['batch']}" for t in p.transitions) or "none in range",
)
for note in p.notes:
    print("note:", note)
show_table(
    pd.DataFrame(
        {
            "B": p.batch,
            "net tok/s": p.net_tok_s,
            "bound": p.bound,
            "× uncoalesced": p.baselines["uncoalesced"]["multiple"],
            "U per layer": p.union_per_layer,
            "misses per layer": p.misses_per_layer,
            f"hit rate, {p.cache_policy}": p.cache_hit_rate,
            "fits in RAM": p.fits_in_memory,
        }
    ).query("B in @KEY_BATCHES"),
    percent=[f"hit rate, {p.cache_policy}"],
)

# %% [markdown]
# ## Controls
# In JupyterLab (`make lab`) this cell shows the controls and, below them, the same three panels,
# redrawn for each change (a slider redraws when it is released). The static report has no
# kernel behind the page, so it shows the default state above only.


# %%
def _options(names, current):
    return sorted(set(names) | {current})


batch_choices = [2**i for i in range(13)]
controls = {
    "model": widgets.Dropdown(options=_options(presets["models"], model), value=model, description="model"),
    "hardware": widgets.Dropdown(
        options=_options(presets["hardware"], hardware), value=hardware, description="hardware"
    ),
    "b_range": widgets.SelectionRangeSlider(
        options=sorted(set(batch_choices) | {b_min, b_max}),
        value=(b_min, b_max),
        description="B range",
        continuous_update=False,
    ),
    "cache_gib": widgets.FloatSlider(
        value=cache_gib, min=0.0, max=512.0, step=1.0, description="cache GiB", continuous_update=False
    ),
    "skew": widgets.FloatSlider(
        value=skew, min=0.0, max=2.0, step=0.05, description="Zipf skew s", continuous_update=False
    ),
    "stickiness": widgets.FloatSlider(
        value=stickiness, min=0.0, max=0.95, step=0.05, description="stickiness ρ", continuous_update=False
    ),
    "ssd_gb_s": widgets.FloatSlider(
        value=ssd_gb_s, min=0.0, max=64.0, step=0.1, description="SSD GB/s", continuous_update=False
    ),
    "mem_gb_s": widgets.FloatSlider(
        value=mem_gb_s, min=0.0, max=5000.0, step=1.0, description="memory GB/s", continuous_update=False
    ),
    "overlap": widgets.ToggleButtons(options=["max", "sum"], value=overlap, description="overlap"),
    "cache_policy": widgets.Dropdown(options=list(CACHE_POLICIES), value=cache_policy, description="cache policy"),
    "routing": widgets.Text(value=routing, description="routing file", placeholder="empty: the Zipf skew"),
}
for c in controls.values():
    c.style.description_width = "90px"


def redraw(**values):
    """The widget callback: library calls through `whatif`, then the paragraph and the figure;
    a state the library refuses (a routing file whose E, K are not the model's, a missing file)
    shows its one-line error, as the command line prints it, instead of a traceback."""
    try:
        s = whatif(**values)
    except (ValueError, OSError) as err:
        display(Markdown(f"**error:** {err}"))
        return
    display(Markdown(answer(s)))
    display(Markdown(what_changed.plan_paragraph(s["changed"], cache_gib=values["cache_gib"])))
    draw(s)
    plt.show()


figure_out = widgets.interactive_output(redraw, controls)
help_text = widgets.HTML(
    "SSD and memory GB/s at 0 keep the hardware preset's numbers; "
    "stickiness moves the right-hand panel only (see the text above); "
    "cache policy static is the pinned oracle, the others are simulated in steady state."
)
widgets.VBox(
    [
        widgets.HBox([widgets.VBox(list(controls.values())[:5]), widgets.VBox(list(controls.values())[5:])]),
        help_text,
        figure_out,
    ]
)

# %% [markdown]
# ## Versions and parameters

# %%
print(f"moeroof {moeroof.__version__}, numpy {np.__version__}, ipywidgets {widgets.__version__}")
for name, value in {
    "model": model,
    "hardware": hardware,
    "b_min": b_min,
    "b_max": b_max,
    "cache_gib": cache_gib,
    "skew": skew,
    "stickiness": stickiness,
    "ssd_gb_s": ssd_gb_s,
    "mem_gb_s": mem_gb_s,
    "overlap": overlap,
    "context_tokens": context_tokens,
    "cache_policy": cache_policy,
    "trace_streams": trace_streams,
    "trace_steps": trace_steps,
    "trace_layers": trace_layers,
    "seed_name": seed_name,
    "routing": routing,
    "fit": fit,
}.items():
    print(f"{name} = {value}")
