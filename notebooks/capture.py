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
# # What do B concurrent streams captured from an MoE model's own routers show — how far below independent routing is their union, which skew model fits, and what hit rate does an LRU expert cache get?

# %% tags=["parameters"]
# fmt: off
model_dir: str = ""  # a local Hugging Face MoE checkpoint folder; empty: build a tiny random one
family: str = "qwen3_moe"  # the tiny model's family (mixtral, qwen2_moe, qwen3_moe, deepseek_v3, olmoe, gpt_oss, glm4_moe)
tiny_experts: int = 128  # routed experts per MoE layer of the tiny model
tiny_top_k: int = 8  # experts per token of the tiny model
tiny_layers: int = 8  # layers of the tiny model
streams: int = 32  # concurrent streams B (distinct prompts decoded together)
max_new_tokens: int = 64  # new tokens per stream: 1 prefill + N - 1 decode steps
prompts: str = ""  # prompt file (.jsonl token ids or text, one a line); empty: generated distinct token-id prompts
prompt_len: int = 24  # longest generated prompt in tokens (lengths drawn from half of it up to it)
ignore_eos: bool = True  # decode every stream to max_new_tokens, through its EOS
dtype: str = "auto"  # weights' dtype: auto (as stored), float32, bfloat16 or float16
device: str = "cpu"  # cpu, cuda or cuda:i
torch_threads: int = 1  # torch's CPU threads (0: torch's default, one per core); 1 keeps reports rendered side by side from oversubscribing the cores
save_dir: str = ""  # keep the capture's trace + histogram in this folder; empty: a temp folder, removed at the end
external: str = "mixtral,qwen15,qwen3-gsm-en"  # external real captures to analyse too, comma separated (empty: none)
cache_share: float = 0.5  # the LRU cache size the answer quotes, as a share of all (layer, expert) pairs
fit_bootstrap: int = 30  # bootstrap replicates for the skew fit's intervals
gof_sims: int = 29  # simulations for the goodness-of-fit p-values
union_bootstrap: int = 100  # bootstrap replicates for the measured union's band
seed: int = 0  # seeds the tiny model's weights, the generated prompts and every random draw
# fmt: on

# %%
import json
import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display
from matplotlib.ticker import MaxNLocator

import moeroof
from moeroof.cachesim import che_hit_curve, lru_hit_curve, request_histogram, requests_from_trace
from moeroof.core.paths import EXTERNAL_DIR
from moeroof.data.hf_config import FAMILIES
from moeroof.data.importers import import_matrix, import_table, write_imported
from moeroof.data.io import read_histogram, read_trace
from moeroof.fit.skew import fit_histogram
from moeroof.measure.capture import (
    capture_meta,
    capture_routing,
    load_checkpoint,
    read_prompts,
    require_capture_packages,
    tokenize_prompts,
    write_capture,
)
from moeroof.measure.tiny_models import tiny_checkpoint
from moeroof.models.routing import inclusion_probabilities, zipf_weights
from moeroof.models.union import trace_against_plugin
from moeroof.present import answers
from moeroof.present.plots import plain_log_ticks, provenance_label, pvalue_text, save_figure, show_table, style

torch, transformers = require_capture_packages()
if torch_threads > 0:
    torch.set_num_threads(torch_threads)
torch.manual_seed(seed)
torch.use_deterministic_algorithms(True, warn_only=True)
transformers.utils.logging.disable_progress_bar()
work = Path(tempfile.mkdtemp(prefix="moeroof-capture-"))
keep = Path(save_dir).expanduser() if save_dir else work
keep.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## Capture: B distinct streams decoded together, routing recorded at the routers
# By default a tiny random-initialised checkpoint is built from transformers' own config class
# (`moeroof.measure.tiny_models`) and saved to a temporary folder; `-p model_dir PATH` captures
# a real local checkpoint instead (never downloaded). `moeroof.measure.capture` — what
# `moeroof capture` runs — decodes the streams together (left padding, greedy) and records each
# token's top-K expert ids from a forward hook on every MoE layer's router module. The trace
# holds the decode steps; the histogram beside it holds prefill and decode.

# %%
tiny = not model_dir
if tiny:
    checkpoint = tiny_checkpoint(
        family,
        work / f"tiny-{family}",
        seed,
        experts=tiny_experts,
        top_k=tiny_top_k,
        layers=tiny_layers,
        hidden=64,
        vocab=1024,
        moe_width=32,
    )
else:
    checkpoint = Path(model_dir).expanduser()
model, layout = load_checkpoint(checkpoint, dtype=dtype, device=device)
if not tiny and layout.family != family:
    print(f"note: the checkpoint is {layout.family}; the family parameter ({family}) applies to the tiny model only")
family_name = FAMILIES[layout.family][1]
vocab = int(model.config.vocab_size)

if prompts:
    prompt_file = Path(prompts).expanduser()
    prompt_ids = tokenize_prompts(read_prompts(prompt_file)[:streams], checkpoint, vocab)
    if len(prompt_ids) < streams:
        raise ValueError(f"{prompt_file} holds {len(prompt_ids)} prompts; {streams} streams need {streams}")
    if len({tuple(p) for p in prompt_ids}) < streams:
        raise ValueError(f"{prompt_file}: the first {streams} prompts are not distinct")
    prompt_label = f"the first {streams} prompts of `{prompt_file.name}`"
else:
    prng = np.random.default_rng([seed, 1])
    seen: set[tuple[int, ...]] = set()
    prompt_ids = []
    while len(prompt_ids) < streams:
        n = int(prng.integers(max(prompt_len // 2, 1), prompt_len + 1))
        ids = tuple(int(t) for t in prng.integers(2, vocab, size=n))
        if ids not in seen:
            seen.add(ids)
            prompt_ids.append(list(ids))
    prompt_file = work / "prompts.jsonl"
    prompt_file.write_text("".join(json.dumps(p) + "\n" for p in prompt_ids), encoding="utf-8")
    prompt_label = f"generated distinct token-id prompts, seed {seed}"

result = capture_routing(
    model, layout, prompt_ids, max_new_tokens=max_new_tokens, eos_token_ids=[] if ignore_eos else None
)
stored = str(next(model.parameters()).dtype).replace("torch.", "")
source = (
    f"moeroof.measure.capture on {'a tiny random ' + family_name + ' checkpoint' if tiny else checkpoint} "
    f"(notebooks/capture.py, {streams} streams, {max_new_tokens} new tokens)"
)
meta = capture_meta(result, model_dir=checkpoint, prompts_path=prompt_file, dtype=stored, device=device, source=source)
trace_path, hist_path = write_capture(
    result, meta, keep / "capture.npz", keep / "capture.csv", overwrite=bool(save_dir)
)
cap_trace, cap_hist = read_trace(trace_path), read_histogram(hist_path)
model_label = f"tiny random {family_name}" if tiny else meta["model"]
display(
    show_table(
        pd.DataFrame(
            {
                "": [
                    "model",
                    "family",
                    "experts E, K",
                    "MoE layers",
                    "streams B",
                    "decode steps in the trace",
                    "prompt tokens (per stream)",
                    "prefill + decode tokens per layer (histogram)",
                    "dtype, device",
                    "checkpoint hash",
                    "provenance",
                ],
                "capture": [
                    model_label,
                    family_name,
                    f"{layout.experts}, {layout.top_k}",
                    str(len(result.layer_ids)),
                    str(streams),
                    str(cap_trace.steps),
                    f"{min(result.prompt_tokens)}–{max(result.prompt_tokens)}",
                    str(int(cap_hist.tokens[0])),
                    f"{stored}, {device}",
                    meta["checkpoint_hash"][:23] + "…",
                    f"{cap_trace.provenance}"
                    + (" (routing of a random-initialised model nobody serves)" if tiny else ""),
                ],
            }
        )
    )
)
del model

# %% [markdown]
# ## The external real captures, imported as `moeroof import` does
# Read in place from `../shared/data/external/` (no licence: never copied into the project;
# the imports go to a temporary folder): Mixtral 8x7B (4 requests decoded one at a time,
# aligned here by token index — not a serving batch), Qwen1.5-MoE layer 0 (real vLLM decode
# steps of up to 25 requests) and Qwen3-30B-A3B's per-layer activation frequencies on GSM8K in
# English (a histogram: no token order, so the skew fit only). Skipped, with the reason, when
# the folder is absent.

# %%
EXTERNAL = {
    "mixtral": dict(
        label="Mixtral 8x7B",
        note="4 requests decoded one at a time, aligned by token index: not a serving batch",
        path="mixtral8x7b-instruct-fp8-vllm-traces/decode_routing.csv",
        kind="table",
        kw=dict(
            columns={"stream": ["dataset", "problem_id"], "step": ["token_idx"], "layer": ["layer"]},
            expert_cols=["expert_0", "expert_1"],
            experts=8,
            top_k=2,
            model="mixtral-8x7b-instruct",
        ),
    ),
    "qwen15": dict(
        label="Qwen1.5-MoE-A2.7B layer 0",
        note="real vLLM decode steps of up to 25 requests",
        path="qwen15moe-a27b-gptq-vllm-layer0/layer0_routing_by_step.csv",
        kind="table",
        kw=dict(
            columns={"step": ["step"], "stream": ["row_in_step"]},
            filters=[("phase", "decode")],
            expert_cols=[f"expert_{i}" for i in range(4)],
            experts=60,
            top_k=4,
            model="qwen1.5-moe-a2.7b",
        ),
    ),
    "qwen3-gsm-en": dict(
        label="Qwen3-30B-A3B GSM8K English",
        note="per-layer activation frequencies with T = 94,200 tokens, the capture's own estimate; a histogram only",
        path="qwen3-30b-a3b-expert-freq-en-he/gsm_en_he_500_20250921_115824_avg_activation.csv",
        kind="matrix",
        kw=dict(
            layer_col="Layer",
            expert_prefix="Expert_",
            filters=[("Language", "English")],
            top_k=8,
            tokens=94200,
            model="qwen3-30b-a3b",
        ),
    ),
}

sources = [
    dict(
        key="capture",
        name=model_label,
        label=("tiny random " if tiny else "") + family_name,
        note="",
        trace=cap_trace,
        hist=cap_hist,
    )
]
skipped = {}
for key in [k.strip() for k in external.split(",") if k.strip()]:
    if key not in EXTERNAL:
        raise ValueError(f"external: unknown capture {key!r}; expected some of {', '.join(EXTERNAL)}")
    spec = EXTERNAL[key]
    src = EXTERNAL_DIR / spec["path"]
    if not src.is_file():
        skipped[spec["label"]] = f"{src} is absent (the external data folder is not in this clone)"
        print(f"skipped {key}: {skipped[spec['label']]}")
        continue
    if spec["kind"] == "table":
        imported = import_table(src, **spec["kw"], command=f"import_table({src.name})")
        trace = read_trace(write_imported(work / f"{key}.npz", imported))
        hist = read_histogram(write_imported(work / f"{key}.csv", imported))
    else:
        trace = None
        hist = read_histogram(write_imported(work / f"{key}.csv", import_matrix(src, **spec["kw"])))
    sources.append(dict(key=key, name=spec["label"], label=spec["label"], note=spec["note"], trace=trace, hist=hist))
    shape = f"trace {' × '.join(map(str, trace.topk.shape))}" if trace is not None else "no trace"
    print(
        f"imported {key}: {shape}; histogram {hist.counts.shape[0]} layers × {hist.experts} experts, K = {hist.top_k}"
    )

# %% [markdown]
# ## Union against the independent plug-in
# Measured: the distinct experts of B streams drawn from a step's live streams, per layer
# (`moeroof.models.union.union_from_trace`, what `moeroof union TRACE` runs; band: bootstrap
# over steps). Independent plug-in: Σ_i [1 − (1 − π̂_i)^B] with π̂ the trace's own inclusion
# frequencies per layer. Measured below the plug-in: the streams of a step share experts more
# than independent routing would; above it, less.

# %%
for i, s in enumerate(sources):
    tr = s["trace"]
    if tr is not None:
        s["union"] = trace_against_plugin(
            np.asarray(tr.topk),
            experts=tr.experts,
            top_k=tr.top_k,
            rng=np.random.default_rng([seed, 2, i]),
            bootstrap=union_bootstrap,
        )

trace_sources = [s for s in sources if s["trace"] is not None]
display(
    show_table(
        pd.DataFrame(
            [
                {
                    "capture": s["name"],
                    "streams × steps × layers": f"{s['trace'].streams} × {s['trace'].steps} × {s['trace'].layers}",
                    "E, K": f"{s['trace'].experts}, {s['trace'].top_k}",
                    "B": s["union"].b_top,
                    "measured U(B)": s["union"].union_measured,
                    "plug-in U(B)": s["union"].union_plugin,
                    "measured / plug-in": s["union"].union_measured / s["union"].union_plugin,
                    "per layer: lowest": float(np.nanmin(s["union"].ratio_per_layer)),
                    "per layer: highest": float(np.nanmax(s["union"].ratio_per_layer)),
                    "provenance": s["trace"].provenance,
                }
                for s in trace_sources
            ]
        )
    )
)

with style():
    n = len(trace_sources)
    fig, axes = plt.subplots(2, n, figsize=(4.2 * n, 7.2), squeeze=False)
    for col, s in enumerate(trace_sources):
        ax_u, ax_l = axes[0, col], axes[1, col]
        u = s["union"]
        m, p = u.measured, u.plugin
        ok = ~np.isnan(m.mean)
        ax_u.plot(u.batch[ok], m.mean[ok], "o", color="C2", ms=4, label="measured (mean over layers)")
        ax_u.fill_between(u.batch[ok], m.mean_band.low[ok], m.mean_band.high[ok], color="C2", alpha=0.3)
        ax_u.plot(u.batch, p.mean, color="C1", label="independent plug-in, own π̂")
        ax_u.set(
            xscale="log",
            yscale="log",
            xlabel="streams B",
            ylabel="distinct experts per layer U(B)",
            title=f"{s['label']}\n{provenance_label('witnessed')}; plug-in: model",
        )
        plain_log_ticks(ax_u)
        ax_u.legend(fontsize=7)
        layers = np.arange(len(u.ratio_per_layer))
        ax_l.plot(layers, u.ratio_per_layer, "o-", ms=3, color="C2")
        ax_l.axhline(1.0, color="k", ls=":", lw=1, label="independent routing")
        ax_l.set(
            xlabel="MoE layer (position)",
            ylabel=f"measured / plug-in at B = {u.b_top}",
            title=f"per layer, B = {u.b_top}",
        )
        ax_l.set_xlim(-0.5, len(layers) - 0.5)
        ax_l.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax_l.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "capture_union")
    plt.show()

# %% [markdown]
# ## Skew fit
# Uniform, Zipf and Dirichlet fitted to each histogram, pooled over layers and per layer, chosen
# by AIC (`moeroof.fit.skew.fit_histogram`, what `moeroof fit` runs). The capture's histogram
# counts prefill and decode tokens.

# %%
for i, s in enumerate(sources):
    s["fit"] = fit_histogram(
        s["hist"].counts,
        s["hist"].top_k,
        rng=np.random.default_rng([seed, 3, i]),
        bootstrap=fit_bootstrap,
        gof_sims=gof_sims,
    )

rows = []
for s in sources:
    f = s["fit"]
    z = f.pooled["zipf"]
    winners = pd.Series([min(row, key=lambda k: row[k].aic) for row in f.per_layer]).value_counts()
    rows.append(
        {
            "histogram": s["name"],
            "layers × E, K": f"{f.layers} × {f.experts}, {f.top_k}",
            "tokens per layer": int(np.median(s["hist"].tokens)),
            "pooled AIC choice": f.chosen,
            "Zipf s (95 % interval)": f"{z.params['s']:.3f} [{z.ci['s'].low if 's' in z.ci else np.nan:.3f}, "
            f"{z.ci['s'].high if 's' in z.ci else np.nan:.3f}]",
            "Dirichlet α": f.pooled["dirichlet"].params["alpha"],
            "per-layer winners": ", ".join(f"{k} {v}" for k, v in winners.items()),
            f"GoF p of the choice ({gof_sims} sims)": pvalue_text(f.pooled[f.chosen].gof_pvalue, gof_sims),
        }
    )
display(show_table(pd.DataFrame(rows)))

with style():
    n = len(sources)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 4.0), squeeze=False)
    for ax, s in zip(axes[0], sources):
        h, f = s["hist"], s["fit"]
        shares = h.counts / h.counts.sum(axis=1, keepdims=True)
        ranks = np.arange(1, h.experts + 1)
        ax.plot(ranks, np.sort(shares, axis=1)[:, ::-1].mean(axis=0), ".", ms=4, label="observed (mean over layers)")
        zs = f.pooled["zipf"].params["s"]
        ax.plot(
            ranks,
            inclusion_probabilities(zipf_weights(h.experts, zs), h.top_k) / h.top_k,
            "-",
            lw=1,
            label=f"Zipf s = {zs:.2f}",
        )
        ax.axhline(1 / h.experts, color="k", ls=":", lw=1, label="uniform")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="expert rank in its layer",
            ylabel="share of the layer's picks",
            title=f"{s['label']}\n{provenance_label('witnessed')}; AIC: {f.chosen}",
        )
        plain_log_ticks(ax)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "capture_skew")
    plt.show()

# %% [markdown]
# ## The cache curve
# Exact LRU hit rate at every capacity (`moeroof.cachesim.lru_hit_curve`, one stack-distance
# pass over `requests_from_trace`: one request per distinct (step, layer, expert), a step's
# lookups of a layer starting together), against Che's approximation for independent references
# with the same item frequencies. Capacity as a share of all (layer, expert) pairs; cold start
# included.

# %%
for s in trace_sources:
    tr = s["trace"]
    req = requests_from_trace(np.asarray(tr.topk), tr.experts)
    cap, hit = lru_hit_curve(req)
    items = tr.layers * tr.experts
    che = che_hit_curve(request_histogram(req), cap)
    at = min(int(round(cache_share * items)), len(hit) - 1)
    s.update(
        cache_cap=cap,
        cache_hit=hit,
        cache_che=che,
        items=items,
        requests=len(req),
        step_items=len(req) / max(req.steps, 1),
        capacity=cache_share * items,
        lru_hit=float(hit[at]),
        che_hit=float(che[at]),
    )

display(
    show_table(
        pd.DataFrame(
            [
                {
                    "trace": s["name"],
                    "(layer, expert) pairs": s["items"],
                    "requests": s["requests"],
                    f"LRU hit rate at {cache_share:.0%} of the pairs": s["lru_hit"],
                    "Che, independent references": s["che_hit"],
                    "requests per step": s["step_items"],
                    "pairs ever requested": int(s["cache_cap"][-1]),
                }
                for s in trace_sources
            ]
        ),
        percent=[f"LRU hit rate at {cache_share:.0%} of the pairs", "Che, independent references"],
    )
)

with style():
    fig, ax = plt.subplots(figsize=(6.4, 4.3))
    for i, s in enumerate(trace_sources):
        x = s["cache_cap"] / s["items"]
        ax.plot(x, s["cache_hit"], color=f"C{i}", label=f"{s['label']}: exact LRU (measured trace)")
        ax.plot(x, s["cache_che"], color=f"C{i}", ls="--", lw=1, label=f"{s['label']}: Che, independent")
    ax.axvline(cache_share, color="k", ls=":", lw=1)
    ax.set(
        xlabel="LRU capacity (share of all (layer, expert) pairs)",
        ylabel="hit rate",
        xlim=(0, 1),
        ylim=(0, 1),
        title=f"the cache curve; {provenance_label('witnessed')} traces",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "capture_cache")
    plt.show()

# %% tags=["answer"]
display(
    Markdown(
        answers.capture_answer(
            model=model_label,
            family=family_name,
            tiny=tiny,
            seed=seed,
            experts=layout.experts,
            top_k=layout.top_k,
            layers=len(result.layer_ids),
            streams=streams,
            decode_steps=cap_trace.steps,
            prompts=prompt_label,
            cache_share=cache_share,
            sources=[
                {
                    "name": s["name"],
                    "note": s["note"],
                    "provenance": (s["trace"] if s["trace"] is not None else s["hist"]).provenance,
                    **(
                        {
                            "batch": s["union"].b_top,
                            "union_measured": s["union"].union_measured,
                            "union_plugin": s["union"].union_plugin,
                            "ratio_layers": (
                                float(np.nanmin(s["union"].ratio_per_layer)),
                                float(np.nanmax(s["union"].ratio_per_layer)),
                            ),
                        }
                        if "union" in s
                        else {"batch": None, "union_measured": None, "union_plugin": None, "ratio_layers": None}
                    ),
                    "fit_choice": s["fit"].chosen,
                    "zipf_s": s["fit"].pooled["zipf"].params["s"],
                    "lru_hit": s.get("lru_hit"),
                    "che_hit": s.get("che_hit"),
                    "step_items": s.get("step_items"),
                    "capacity": s.get("capacity"),
                }
                for s in sources
            ],
            skipped=skipped,
        )
    )
)

# %% [markdown]
# ## Versions and parameters

# %%
shutil.rmtree(work, ignore_errors=True)  # the tiny checkpoint, prompts and imports; a save_dir stays
if save_dir:
    print(f"kept {trace_path} and {hist_path}")
print(
    f"moeroof {moeroof.__version__}, numpy {np.__version__}, torch {torch.__version__}, transformers {transformers.__version__}"
)
for name, value in {
    "model_dir": model_dir,
    "family": family,
    "tiny_experts": tiny_experts,
    "tiny_top_k": tiny_top_k,
    "tiny_layers": tiny_layers,
    "streams": streams,
    "max_new_tokens": max_new_tokens,
    "prompts": prompts,
    "prompt_len": prompt_len,
    "ignore_eos": ignore_eos,
    "dtype": dtype,
    "device": device,
    "save_dir": save_dir,
    "external": external,
    "cache_share": cache_share,
    "fit_bootstrap": fit_bootstrap,
    "gof_sims": gof_sims,
    "union_bootstrap": union_bootstrap,
    "seed": seed,
}.items():
    print(f"{name} = {value}")
