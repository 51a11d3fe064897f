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
# # L1, L2 and L3: what each buys alone, against which baseline, and do they compound?
#
# L1 (the dense band read once per step), L2 (expert coalescing across agents) and L3 (a shared
# prefix's KV cache) each shrink one term of the step; this notebook computes what each buys on
# two boxes, whether L2 and L3 compound over one user's session, and what cross-user batching
# adds. The answer, computed from this run, opens the report (in the notebook it follows "The
# answer's numbers, computed").

# %% tags=["parameters"]
# fmt: off
model: str = "glm-5.2"  # model preset name or path to a model TOML
hardware: str = "nvme-gen4"  # hardware preset name or path to a hardware TOML
contrast_hardware: str = "epyc-server"  # a box with RAM for the experts, where the memory term can bind
contrast_cache_gib: float | str = "auto"  # expert cache on the contrast box in GiB, or auto (400 GiB capped at the model's routed experts and at what RAM leaves beside one agent's KV)
routing: str = "prior"  # prior (the skew prior, fitted on public routing), uniform, zipf:S, dirichlet:A, or a histogram or trace: your file (from the working directory, or absolute) or an embedded name under data/
cache_gib: float | str = "auto"  # expert cache in GiB on the main box, simulated LRU by default, or auto (16 GiB capped as the contrast box's)
context_tokens: int = 4096  # context per agent in tokens for the per-B lever curves
prefix_tokens: int = 2048  # shared prefix in tokens: system prompt, tool schemas, repo snapshot
decode_tokens: int = 1024  # tokens each agent decodes in one session
agents: int = 16  # agents in one user's fan-out, the session batch
overlap: str = "max"  # how the step terms combine, max for perfect overlap or sum for serial
locality: str = "prior"  # one stream's temporal locality for the simulated cache: prior (fitted on real decode, data/fits/locality-prior.json) or independent tokens
b_max: int = 256  # largest batch in the lever sweep
users_max: int = 64  # most users sharing one machine batch
# fmt: on

# %%
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

import moeroof
from moeroof.core.paths import resolve_data
from moeroof.core.units import GiB
from moeroof.data.embedded import is_file_spec
from moeroof.data.io import load_any
from moeroof.data.presets import load_hardware, load_model
from moeroof.models.levers import composition, compounding, lever_factors
from moeroof.models.local_routing import cache_sees_locality, locality_parameter, with_locality
from moeroof.models.plan import Workload, cache_parameter, plan, routing_from_spec
from moeroof.present import answers
from moeroof.present.plots import (
    feasibility_boundary,
    label_with_baseline,
    plain_log_ticks,
    provenance_label,
    save_figure,
    show_table,
    show_values,
    style,
)
from moeroof.studies import what_changed

key_batches = [1, 8, 16, 64, 128, 256, 1024]  # rows shown in the tables
batch = np.unique(
    np.r_[np.round(np.logspace(0, np.log10(b_max), 40)), [b for b in key_batches if b <= b_max]].astype(int)
)
users = np.unique(np.r_[np.round(np.logspace(0, np.log10(users_max), 25)), [1, 2, 4, 8, 16, 32, 64]].astype(int))
users = users[users <= users_max]
term_colours = {"ssd": "#4C72B0", "memory": "#DD8452", "compute": "#55A868", "engine": "#8172B3", "fabric": "#C44E52"}

m = load_model(model)
boxes = {"main": load_hardware(hardware), "contrast": load_hardware(contrast_hardware)}
route = routing_from_spec(str(resolve_data(routing)) if is_file_spec(routing) else routing, m)
cache_gib, why_main = cache_parameter(cache_gib, m, boxes["main"], preferred_gib=16.0, context_tokens=context_tokens)
contrast_cache_gib, why_contrast = cache_parameter(
    contrast_cache_gib,
    m,
    boxes["contrast"],
    preferred_gib=400.0,
    context_tokens=context_tokens,
    name="contrast_cache_gib",
)
# defaults that depend on the model, said in the answer
defaults_taken = [
    f"`{n}` `auto` → {w}" for n, w in (("cache_gib", why_main), ("contrast_cache_gib", why_contrast)) if w
]
work = {
    "main": Workload(context_tokens=context_tokens, cache_bytes=cache_gib * GiB, overlap=overlap),
    "contrast": Workload(context_tokens=context_tokens, cache_bytes=contrast_cache_gib * GiB, overlap=overlap),
}
# one stream's locality for the simulated cache (the prior fitted on real decode, or none); a trace keeps its own
prior = locality_parameter(locality, model=m)
local_route = with_locality(m, route, prior)
routes = {k: local_route if cache_sees_locality(work[k]) else route for k in boxes}
route = routes["main"]
plans = {k: plan(m, boxes[k], work[k], routes[k], batch) for k in boxes}
result = {k: p.provenance["result"] for k, p in plans.items()}
prov = provenance_label("projected") + (
    "" if set(result.values()) == {"projected"} else "; some results from witnessed inputs only"
)
for k, p in plans.items():
    for note in p.notes:
        print(f"{boxes[k].name}: {note}")


def box_label(k):
    gib = work[k].cache_bytes / GiB
    return f"{boxes[k].name}, cache {gib:.4g} GiB requested"


# %% [markdown]
# ## What changed with the one step model
# The same plans and lever factors with the cache the step used to see, a hot set pinned from the
# true routing probabilities (`cache_policy="static"`, an oracle), against this notebook's own
# (`lru` unless changed), at the feasible B where net tok/s differs most and at the largest
# feasible B.

# %%
oracle = what_changed.ORACLE_POLICY
changed = {
    k: what_changed.compare_plans(
        {
            work[k].cache_policy: plans[k],
            oracle: plan(m, boxes[k], replace(work[k], cache_policy=oracle), routes[k], batch),
        },
        work[k].cache_policy,
        oracle,
    )
    for k in boxes
}
lever_policies = {
    k: {
        pol: lever_factors(
            m, boxes[k], replace(work[k], cache_policy=pol), routes[k], batch, prefix_tokens=prefix_tokens
        )
        for pol in (work[k].cache_policy, oracle)
    }
    for k in boxes
}
paragraph = []
for n, k in enumerate(boxes):
    c = changed[k]
    paragraph.append(what_changed.plan_paragraph(c, cache_gib=work[k].cache_bytes / GiB, lead=n == 0, l2=False))
    paragraph.append(
        "Levers "
        + "; ".join(
            what_changed.lever_lines(lever_policies[k], i, policy=c.policy, reference=c.reference) for i in c.points()
        )
        + "."
    )
display(Markdown(" ".join(paragraph)))


# %% [markdown]
# ## (a) Each lever alone, at each B, against its own baseline
# - **L1** dense-band amortization: the step reads the non-routed band (attention, shared
#   experts, LM head) once for all B agents. Baseline `per-token dense reads`: the same step with
#   that band read B times.
# - **L2** expert coalescing: the step streams the union U(B) of the batch's experts. Baseline
#   `uncoalesced`: every agent fetches its own K experts per layer from the same SSD.
# - **L3** (decode part) shared-prefix KV: the prefix's KV is read once per step, not once per
#   agent. Baseline `per-agent prefix KV`.
#
# Each factor is T_step(baseline) / T_step at the same B, with the two other levers as in the
# modelled engine (dense once, coalesced, no prefix sharing). A lever only buys time where the
# term it shrinks is the binding one: the background colour is the binding term of the modelled
# step; hatched B are infeasible (the dense band and the batch's KV exceed RAM).

# %%
factors = {k: lever_policies[k][work[k].cache_policy] for k in boxes}  # computed for the paragraph above
lever_names = {
    "l1_dense_amortization": "L1 dense once per step",
    "l2_coalescing": "L2 expert coalescing",
    "l3_prefix_decode": f"L3 shared {prefix_tokens}-token prefix, decode",
}


def shade_regimes(ax, p):
    edges = np.r_[p.batch[0] * 0.9, np.sqrt(p.batch[1:] * p.batch[:-1]), p.batch[-1] * 1.1]
    for i, name in enumerate(p.bound):
        if p.fits_in_memory[i]:  # no term binds a step that cannot run
            ax.axvspan(edges[i], edges[i + 1], color=term_colours[name], alpha=0.12, lw=0)
        else:
            ax.axvspan(edges[i], edges[i + 1], facecolor="none", edgecolor="0.5", hatch="//", lw=0)
    feasibility_boundary(ax, p.batch, p.fits_in_memory)


with style():
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for ax, k in zip(axes, boxes):
        lf, p = factors[k], plans[k]
        shade_regimes(ax, p)
        for i, (attr, name) in enumerate(lever_names.items()):
            ax.plot(
                lf.batch,
                getattr(lf, attr),
                color=f"C{i}",
                lw=4.5 - 1.2 * i,
                alpha=0.9,
                label=label_with_baseline(name, lf.baselines[attr]),
            )
        ax.axhline(1, color="k", lw=0.8)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="batch B (agents per decode step)",
            ylabel="factor: baseline step time / step time",
            title=f"{box_label(k)}\nctx {context_tokens} tokens, {overlap} overlap — {prov}",
        )
        ax.title.set_fontsize(10)
        plain_log_ticks(ax, "x")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}×"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}×" if f"{y:.0e}"[0] in "2356" else ""))
    handles, labels = axes[1].get_legend_handles_labels()
    bound_seen = sorted({b for p in plans.values() for b in p.bound}, key=list(term_colours).index)
    handles += [Patch(color=term_colours[b], alpha=0.3, label=f"{b} binds") for b in bound_seen]
    handles += [Patch(facecolor="none", edgecolor="0.5", hatch="//", label="infeasible: KV + dense exceed RAM")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    save_figure(fig, "levers_alone")
    plt.show()

rows = []
for k in boxes:
    lf, p = factors[k], plans[k]
    for i, b in enumerate(lf.batch):
        if b in key_batches:
            rows.append(
                {
                    "box": boxes[k].name,
                    "B": int(b),
                    "binds": p.bound[i],
                    "fits in RAM": bool(p.fits_in_memory[i]),
                    "net tok/s": p.net_tok_s[i],
                    f"L1 (vs {lf.baselines['l1_dense_amortization']})": lf.l1_dense_amortization[i],
                    f"L2 (vs {lf.baselines['l2_coalescing']})": lf.l2_coalescing[i],
                    f"L3 decode (vs {lf.baselines['l3_prefix_decode']})": lf.l3_prefix_decode[i],
                }
            )
show_table(pd.DataFrame(rows))

# %% [markdown]
# ## (b) Do L2 and L3 compound over a session?
# A question the engine behind seed 000 (the design note this suite checks) asks of its levers.
# One user's fan-out of `agents` agents: prefill the shared prefix, then decode `decode_tokens`
# each in one batch at the session's mean context. Baseline (`neither`): every agent prefills
# its own copy of the prefix and decode is uncoalesced. L3 here is mostly the prefill computed
# once instead of `agents` times (plus the decode KV read once); L2 shortens only decode steps.
# f23 / (f2·f3) is the compounding efficiency: 1 means the factors multiply. Because they
# shorten *different parts of an additive session time*, each lever alone is capped by the part
# it leaves untouched (Amdahl), and together they beat the product: f23 ≥ f2·f3. A value below
# 1 would mean both levers remove the same seconds, as happens when they relieve the same
# binding term of a max-overlapped step.

# %%
comp = {k: compounding(m, boxes[k], work[k], routes[k], agents, prefix_tokens, decode_tokens) for k in boxes}
combos = ["neither", "L2", "L3", "L2+L3"]
summary = pd.DataFrame(
    {
        boxes[k].name: {
            **{f"session seconds, {c}": comp[k]["seconds"][c] for c in combos},
            **{f"net tok/s, {c}": comp[k]["net_tok_s"][c] for c in combos},
            "f2 (L2 alone)": comp[k]["f2"],
            "f3 (L3 alone)": comp[k]["f3"],
            "f23 (both)": comp[k]["f23"],
            "f2·f3": comp[k]["product_f2_f3"],
            "compounding efficiency f23/(f2·f3)": comp[k]["compounding_efficiency"],
        }
        for k in boxes
    }
)
print(
    f"baseline of every factor: {comp['main']['baseline']}; {agents} agents, prefix {prefix_tokens}, "
    f"decode {decode_tokens} tokens each"
)
show_table(summary.rename_axis("quantity").reset_index())

# %%
with style():
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    for ax, k in zip(axes, boxes):
        c = comp[k]
        vals = [c["net_tok_s"][x] for x in combos]
        mult = [1.0, c["f2"], c["f3"], c["f23"]]
        bars = ax.bar(combos, vals, color=["0.6", "C1", "C2", "C3"])
        for bar, f in zip(bars, mult):
            ax.annotate(
                f"×{f:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=9
            )
        ax.axhline(
            vals[0] * c["product_f2_f3"], color="k", ls=":", lw=1, label=f"neither × f2·f3 = ×{c['product_f2_f3']:.2f}"
        )
        ax.set(
            ylabel="session net tok/s, all agents",
            title=f"{box_label(k)}\n{label_with_baseline('multiples', c['baseline'])}\n{prov}",
        )
        ax.title.set_fontsize(9)
        ax.legend(fontsize=8, loc="upper left")
        ax.margins(y=0.15)
    fig.tight_layout()
    save_figure(fig, "levers_compounding")
    plt.show()

# %% [markdown]
# ## (c) A user's coalesced fan-out inside a cross-user machine batch
# What composes between one user's fan-out and batching across users, another question of that
# engine.
# `users` users, each with a fan-out of `agents` agents, run in one continuous batch of
# users·agents tokens per step. Baseline `per-user steps`: the same users time-sliced, one
# user's fan-out per step (its aggregate equals one user's net tok/s).
#
# **What composes.** The expert stream: the machine-wide union U(users·agents) is shared by
# everyone in the step, so the machine's coalescing ratio is the per-user ratio times the
# cross-user gain users·U(agents) / U(users·agents). **What does not overlap.** The dense band is
# read once per step either way: L1 counts once, not once per user. KV is per user: no
# cross-tenant prefix reuse, so L3 stays inside a user's fan-out and the batch's KV reads and KV
# memory grow linearly with users. The union is bounded by E per layer: once it saturates,
# the SSD bytes per step stop growing and every added user's tokens ride the same stream,
# until memory, compute or RAM for the KV ends it.

# %%
g = composition(m, boxes["main"], work["main"], route, agents, users)
gb = np.array(g["machine_batch"])
u_machine = gb * m.top_k / np.array(g["machine_coalescing_ratio"])  # U = B·K / ratio
fits = np.array(g["fits_in_memory"])
sat = users[u_machine >= 0.9 * m.experts]
sat_text = (
    f"the union passes 90 % of E = {m.experts} at {sat[0]} users (B = {sat[0] * agents})"
    if sat.size
    else f"the union stays below 90 % of E = {m.experts} up to {users_max} users "
    f"(U = {u_machine[-1]:.0f} at B = {gb[-1]})"
)
infeasible_text = (
    f"from {users[~fits][0]} users (B = {users[~fits][0] * agents}) the KV of the machine batch exceeds RAM"
    if (~fits).any()
    else "every machine batch fits in RAM"
)
print(f"{sat_text}; {infeasible_text}")

with style():
    fig, (ax_n, ax_r) = plt.subplots(1, 2, figsize=(11, 4.5))
    if (~fits).any():  # infeasibility grows with B: one span from the first infeasible user count
        for ax in (ax_n, ax_r):
            ax.axvspan(
                np.sqrt(users[~fits][0] * users[fits][-1]),
                users[-1] * 1.1,
                facecolor="none",
                edgecolor="0.6",
                hatch="//",
                lw=0,
            )
    ax_n.plot(
        users[fits],
        np.array(g["net_tok_s"])[fits],
        "o-",
        ms=3,
        color="C3",
        label="machine batch, users·agents per step",
    )
    if (~fits).any():
        ax_n.plot(
            users[~fits],
            np.array(g["net_tok_s"])[~fits],
            "o:",
            ms=3,
            color="0.6",
            label="hatched: infeasible, KV exceeds RAM",
        )
    ax_n.axhline(g["net_tok_s_baseline"], color="k", ls="--", lw=1, label=g["baseline"])
    ax_n.set(
        xscale="log",
        yscale="log",
        xlabel=f"users sharing the machine, {agents} agents each",
        ylabel="machine net tok/s",
        title=f"{box_label('main')}\n{prov}",
    )
    ax_r.plot(
        users,
        np.full(users.size, g["per_user_coalescing_ratio"]),
        color="C0",
        label=label_with_baseline(f"per-user B·K/U, B = {agents}", "uncoalesced"),
    )
    ax_r.plot(
        users, g["machine_coalescing_ratio"], color="C3", label=label_with_baseline("machine B·K/U", "uncoalesced")
    )
    ax_r.plot(users, g["cross_user_expert_gain"], color="C2", label="cross-user gain users·U(agents)/U(users·agents)")
    ax_r.plot(
        users,
        g["multiple_vs_baseline"],
        color="C1",
        ls="--",
        label=label_with_baseline("net tok/s multiple", "per-user steps"),
    )
    if sat.size:
        ax_r.axvline(sat[0], color="k", ls=":", lw=1, label="union at 90 % of E")
    ax_r.set(
        xscale="log",
        yscale="log",
        xlabel=f"users sharing the machine, {agents} agents each",
        ylabel="multiple",
        title=f"what cross-user batching multiplies, {route.label} routing",
    )
    for ax in (ax_n, ax_r):
        plain_log_ticks(ax)
    ax_n.legend(fontsize=8)
    ax_r.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "levers_composition")
    plt.show()

composition_table = pd.DataFrame(
    {
        "users": g["users"],
        "machine B": gb,
        "binds": g["bound"],
        "fits in RAM": fits,
        "machine net tok/s": g["net_tok_s"],
        f"multiple (vs {g['baseline']})": g["multiple_vs_baseline"],
        "U per layer": u_machine,
        "machine B·K/U (vs uncoalesced)": g["machine_coalescing_ratio"],
        "cross-user expert gain": g["cross_user_expert_gain"],
    }
).query("users in [1, 2, 4, 8, 16, 32, 64]")
show_table(composition_table)

# %% [markdown]
# ## The answer's numbers, computed
# Every number the answer above refers to, from the variables of this notebook (only feasible B
# count: those where the dense band and the batch's KV fit in RAM).


# %%
def at_b(x, lf, b):
    """x at batch b if b is on the grid and feasible, else None."""
    i = np.flatnonzero((lf.batch == b) & lf.fits_in_memory)
    return float(x[i[0]]) if i.size else None


def regimes(p):
    """Binding term along the feasible B grid as 'term at B = lo–hi' segments, then where RAM runs out."""
    ok = np.asarray(p.fits_in_memory)
    b, bound = p.batch[ok], [t for t, f in zip(p.bound, ok) if f]
    segs, start = [], 0
    for i in range(1, len(bound) + 1):
        if i == len(bound) or bound[i] != bound[start]:
            segs.append(f"{bound[start]} at B = {b[start]}" + (f"–{b[i - 1]}" if i - 1 > start else ""))
            start = i
    tail = f", infeasible from B = {p.batch[~ok][0]}" if (~ok).any() else ", every B feasible"
    return ", ".join(segs) + tail


short = {"l1_dense_amortization": "L1", "l2_coalescing": "L2", "l3_prefix_decode": "L3 decode"}


def lever_line(lf, attr):
    ok = lf.fits_in_memory
    x, b = np.asarray(getattr(lf, attr))[ok], lf.batch[ok]
    j = int(np.argmax(x))
    at64 = at_b(getattr(lf, attr), lf, 64)
    return (
        f"{short[attr]} against `{lf.baselines[attr]}`: max {x[j]:.2f}× at B = {b[j]}, "
        + (f"{at64:.2f}× at B = 64, " if at64 is not None else "")
        + f"{x[-1]:.2f}× at the largest feasible B = {b[-1]}"
    )


for k in boxes:
    lf, p = factors[k], plans[k]
    ok = p.fits_in_memory
    print(
        f"{box_label(k)}: cache room for {p.cache_experts_per_layer[0]:.0f} experts per layer at B = {p.batch[0]} "
        f"(E = {m.experts}), {p.cache_label}, hit {p.cache_hit_rate[0]:.1%} there; binds {regimes(p)}; best net tok/s {p.net_tok_s[ok].max():.2f} "
        f"(at B = {p.batch[ok][np.argmax(p.net_tok_s[ok])]})"
    )
    for attr in lever_names:
        print(f"  {lever_line(lf, attr)}")
for k in boxes:
    c = comp[k]
    print(
        f"session on {boxes[k].name} ({agents} agents, {prefix_tokens}-token prefix, {decode_tokens} tokens each, "
        f"against `{c['baseline']}`): f2 = {c['f2']:.2f}, f3 = {c['f3']:.2f}, f23 = {c['f23']:.2f} "
        f"{'above' if c['f23'] > c['product_f2_f3'] else 'at or below'} f2·f3 = {c['product_f2_f3']:.2f} "
        f"(efficiency {c['compounding_efficiency']:.3f})"
    )
gain = np.array(g["cross_user_expert_gain"])
last_ok = int(np.flatnonzero(fits)[-1])
compute_users = users[np.array(g["bound"]) == "compute"]
print(
    f"cross-user on {boxes['main'].name} (against `{g['baseline']}`): per-user B·K/U {g['per_user_coalescing_ratio']:.2f} "
    f"for {agents} agents; cross-user gain {gain[last_ok]:.2f} and machine B·K/U {g['machine_coalescing_ratio'][last_ok]:.2f} "
    f"at {users[last_ok]} users, the most that fit; {sat_text}; {infeasible_text}; "
    f"feasible machine batches bind on {', '.join(sorted(set(np.array(g['bound'])[fits])))}; "
    + (
        f"compute first binds at {compute_users[0]} users (B = {compute_users[0] * agents}, "
        f"{'feasible' if fits[users == compute_users[0]][0] else 'infeasible'})"
        if compute_users.size
        else f"compute never binds up to {users_max} users"
    )
)

# %% tags=["answer"]
probe_b = int(batch[np.searchsorted(batch, min(64, b_max))])
display(
    Markdown(
        answers.levers(
            model=m.name,
            hardware=boxes["main"].name,
            contrast_hardware=boxes["contrast"].name,
            routing=route.label,
            cache_gib=cache_gib,
            contrast_cache_gib=contrast_cache_gib,
            batch_max=int(batch[-1]),
            factors={
                boxes[k].name: {
                    short[a]: v
                    for a in lever_names
                    if (v := at_b(getattr(factors[k], a), factors[k], probe_b)) is not None
                }
                for k in boxes
            },
            probe_batch=probe_b,
            binds={boxes[k].name: plans[k].bound[int(np.flatnonzero(plans[k].batch == probe_b)[0])] for k in boxes},
            agents=agents,
            session_product=comp["main"]["product_f2_f3"],
            session_combined=comp["main"]["f23"],
            cross_user_gain=float(gain[last_ok]),
            users_max=int(users[last_ok]),
            inputs={k: v for p in plans.values() for k, v in p.provenance["inputs"].items()},
            links={boxes[k].name: plans[k].link_name for k in boxes},
            defaults=defaults_taken,
            holds_all=[boxes[k].name for k in boxes if m.holds_every_expert(work[k].cache_bytes)],
            synthetic=[f"the routing data `{routing}`"]
            if is_file_spec(routing) and answers.is_synthetic(load_any(resolve_data(routing)).provenance)
            else [],
        )
    )
)

# %% [markdown]
# ## Versions and parameters

# %%
print(f"moeroof {moeroof.__version__}, numpy {np.__version__}")
display(
    show_values(
        {
            "model": model,
            "hardware": hardware,
            "contrast_hardware": contrast_hardware,
            "contrast_cache_gib": contrast_cache_gib,
            "routing": routing,
            "cache_gib": cache_gib,
            "context_tokens": context_tokens,
            "prefix_tokens": prefix_tokens,
            "decode_tokens": decode_tokens,
            "agents": agents,
            "overlap": overlap,
            "b_max": b_max,
            "users_max": users_max,
        }
    )
)
display(
    show_values(
        {
            f"provenance of the {k} plan ({p.hardware})": f"{p.provenance['result']}; not witnessed: "
            + (", ".join(p.provenance["non_witnessed"]) or "none")
            for k, p in plans.items()
        },
        name="result",
    )
)
