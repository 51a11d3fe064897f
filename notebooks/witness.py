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
# # Does the roofline predict a measured MoE decode step on the machine at hand?
#
# `moeroof calibrate` measures this machine's disk (bypassing the page cache), memory and
# float32 FLOP/s; `moeroof bench` times decode steps of a small MoE whose experts stream from that
# disk, coalesced and against the `uncoalesced` baseline (every token reading its own experts);
# the roofline predicts the same steps from the calibration alone. A committed default-size run
# and a run on an H200 GPU are predicted the same way. The answer, computed from this run, opens
# the report (in the notebook it follows the H200 section).

# %% tags=["parameters"]
# fmt: off
file_mib: int = 64  # scratch file of each calibrate run in MiB
calibrate_seconds: float = 3.0  # time budget of each calibrate run in seconds
calibrate_after: bool = True  # calibrate again after the bench to show how far the device drifts
experts: int = 16  # experts per layer E of the live bench
layers: int = 2  # MoE layers L of the live bench
top_k: int = 2  # experts per token K of the live bench
d_model: int = 512  # hidden size d; an expert is 2 x d x f float32
d_ff: int = 512  # expert width f
batch: str = "1,2,4,8,16"  # batch sizes of the live bench, comma-separated
steps: int = 3  # counted decode steps per mode and batch size
routing: str = "uniform"  # routing model of the live bench: uniform or zipf:S
seed: int = 0  # seed of routing, gates and weights
scratch_dir: str = ""  # folder for scratch files, empty for the system temp dir
replay_bench: str = "measurements/bench-cpu-2026-11-29.json"  # a saved default-size bench run to predict too, empty for none
replay_calibration: str = "measurements/calibrate-cpu-2026-11-29.toml"  # calibrate TOML measured just before that run
replay_calibration_after: str = "measurements/calibrate-cpu-2026-11-29-after.toml"  # calibrate TOML measured just after it, empty for none
# fmt: on

# %%
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import moeroof
from moeroof.cli import parse_batch
from moeroof.core.paths import resolve_data
from moeroof.core.units import MiB
from moeroof.data.presets import load_hardware
from moeroof.measure.bench import StackShape, measure_engine, median_abs_error, predict_bench, run_bench
from moeroof.measure.calibrate import calibrate
from moeroof.measure.hf_block import hf_block_check
from moeroof.present import answers
from moeroof.present.plots import (
    label_with_baseline,
    plain_log_ticks,
    provenance_label,
    save_figure,
    show_table,
    show_values,
    style,
)
from moeroof.studies.validation import gpu_bench_check

batch_list = parse_batch(batch)
scratch = scratch_dir or None
OVERLAPS = ("sum", "max")

# %% [markdown]
# ## The live run: calibrate, bench, calibrate again
# The calibration before the bench is the prediction's input; the one after only shows how far
# the device moved while the bench ran. Both are witnessed; the bench never feeds the model.

# %%
cal_kw = dict(
    file_bytes=file_mib * 2**20, seconds=calibrate_seconds, mem_bytes=64 * 2**20, matmul_n=1024, scratch_dir=scratch
)
# the engine terms (per step, per agent-token) of the bench's own numpy loop, timed on this box
cal_before = calibrate(
    None, name="live-before", seed=seed, engine=lambda: measure_engine(layers=layers, top_k=top_k), **cal_kw
)
live = run_bench(
    StackShape(experts, layers, d_model, d_ff),
    top_k,
    batch_list,
    routing=routing,
    steps=steps,
    warmup_steps=1,
    seed=seed,
    scratch_dir=scratch,
)
cal_after = calibrate(None, name="live-after", seed=seed + 1, **cal_kw) if calibrate_after else None
print(
    f"read path: calibrate {cal_before.read_path}, bench {live['read_path']}; expert {live['expert_bytes'] / MiB:g} MiB"
)
runs = {"live": (live, cal_before.hardware(), cal_after.hardware() if cal_after is not None else None)}
if replay_bench:
    replay = json.loads(resolve_data(replay_bench).read_text())
    runs["default"] = (
        replay,
        load_hardware(resolve_data(replay_calibration)),
        load_hardware(resolve_data(replay_calibration_after)) if replay_calibration_after else None,
    )
    print(
        f"replayed: {replay['command']} on {replay['date']} ({replay['machine']['cpu']}, read path {replay['read_path']})"
    )

# %%
from dataclasses import replace  # noqa: E402

from IPython.display import Markdown, display  # noqa: E402

hw_live = cal_before.hardware()
no_engine = replace(hw_live, engine_seconds_per_step=0.0, engine_seconds_per_agent_token=0.0)
err_with = median_abs_error(predict_bench(live, hw_live, overlap="sum"))
err_without = median_abs_error(predict_bench(live, no_engine, overlap="sum"))
display(
    Markdown(
        f"**What changed.** The prediction now goes through the one step model, whose new engine "
        f"term is measured here by `moeroof calibrate`: {hw_live.engine_seconds_per_step * 1e6:.1f} µs per step "
        f"and {hw_live.engine_seconds_per_agent_token * 1e6:.1f} µs per agent-token for the bench's numpy loop "
        f"(L = {layers}, K = {top_k}). On this live run the median |error| of net tok/s (`sum`) is "
        + ", ".join(
            f"{m} {100 * err_with[m]:.1f} % with it against {100 * err_without[m]:.1f} % without" for m in err_with
        )
        + "."
        + "".join(
            f" The replayed run {name!r} predicts with "
            + (
                "engine terms of 0: its calibration has none (they are assumed)."
                if hw.provenance.get("engine_seconds_per_step", "assumed") == "assumed"
                else f"its calibration's engine terms, {hw.engine_seconds_per_step * 1e6:.1f} µs per step and "
                f"{hw.engine_seconds_per_agent_token * 1e6:.1f} µs per agent-token."
            )
            for name, (_, hw, _) in runs.items()
            if name != "live"
        )
    )
)

# %% [markdown]
# ## Predicted against measured, per mode and batch
# For each run: the roofline from the calibration before the bench, with `sum` (serial) and
# `max` (perfect overlap) combining the terms, and from the calibration after it (`sum`).
# Relative error = predicted / measured − 1.

# %%
preds, tables = {}, []
for name, (rep, hw, hw_after) in runs.items():
    for overlap in OVERLAPS:
        preds[name, overlap] = predict_bench(rep, hw, overlap=overlap)
    if hw_after is not None:
        preds[name, "sum, after"] = predict_bench(rep, hw_after, overlap="sum")
    p = preds[name, "sum"]
    tables.append(
        pd.DataFrame(
            {
                "run": name,
                "mode": rep["mode"],
                "B": rep["batch"],
                "measured net tok/s": rep["net_tok_s"],
                "predicted (sum)": p["predicted_net_tok_s"],
                "error (sum)": p["relative_error"],
                "error (max)": preds[name, "max"]["relative_error"],
                **({"error (sum, after)": preds[name, "sum, after"]["relative_error"]} if hw_after is not None else {}),
                "bound": p["bound"],
                "measured U": rep["union_per_layer"],
                "modelled U": p["predicted_union_per_layer"],
                "MB read": np.asarray(rep["bytes_read_per_step"]) / 1e6,
            }
        )
    )
table = pd.concat(tables, ignore_index=True)
summary = pd.DataFrame(
    [
        {
            "run": name,
            "prediction": key,
            **{f"median |error| {m}": v for m, v in median_abs_error(p).items()},
            "max |error|": float(np.max(np.abs(p["relative_error"]))),
        }
        for (name, key), p in preds.items()
    ]
)
display(show_table(summary, percent=[c for c in summary.columns if "error" in c]))
for name, (rep, hw, hw_after) in runs.items():
    modes_, b_ = np.asarray(rep["mode"]), np.asarray(rep["batch"])
    for b in np.unique(b_):
        sel = b_ == b
        if set(modes_[sel]) == {"coalesced", "uncoalesced"}:
            get = lambda key, m, sel=sel, modes_=modes_: np.asarray(key)[sel][modes_[sel] == m][0]  # noqa: E731
            meas = get(rep["net_tok_s"], "coalesced") / get(rep["net_tok_s"], "uncoalesced")
            pred = get(preds[name, "sum"]["predicted_net_tok_s"], "coalesced") / get(
                preds[name, "sum"]["predicted_net_tok_s"], "uncoalesced"
            )
            print(
                f"{name} B={b}: coalesced / uncoalesced net tok/s measured {meas:.2f}x, predicted (sum) {pred:.2f}x "
                f"(baseline: uncoalesced)"
            )
    e = rep["expert_bytes"]
    drift = (hw_after.ssd_bandwidth(e) / hw.ssd_bandwidth(e) - 1) if hw_after is not None else float("nan")
    print(
        f"{name}: calibrated read bandwidth at the expert size {e / MiB:g} MiB: before {hw.ssd_bandwidth(e) / 1e9:.3f} GB/s, "
        f"after {hw_after.ssd_bandwidth(e) / 1e9 if hw_after is not None else float('nan'):.3f} GB/s, drift {drift:+.1%}"
    )
show_table(table, percent=[c for c in table.columns if c.startswith("error")])

# %% [markdown]
# ## Figure: measured against predicted net tok/s, the error per B, and the coalescing ratio
# Markers are measured (witnessed); lines are the roofline from the calibration before the run
# (a model on witnessed inputs). The shaded band spans the `sum` predictions from the
# calibrations before and after the bench: the device's own drift.


# %%
def witness_figure(name: str) -> None:
    rep = runs[name][0]
    mode_arr = np.asarray(rep["mode"])
    b_arr = np.asarray(rep["batch"])
    colors = {"uncoalesced": "C3", "coalesced": "C0"}
    with style():
        fig, (ax_n, ax_e, ax_c) = plt.subplots(1, 3, figsize=(14, 4.3))
        for mode in ("uncoalesced", "coalesced"):
            sel = mode_arr == mode
            if not sel.any():
                continue
            c = colors[mode]
            label = mode if mode == "coalesced" else "baseline: uncoalesced"
            ax_n.plot(b_arr[sel], np.asarray(rep["net_tok_s"])[sel], "o", color=c, label=f"{label}, measured")
            for overlap, ls in (("sum", "-"), ("max", ":")):
                ax_n.plot(
                    b_arr[sel],
                    np.asarray(preds[name, overlap]["predicted_net_tok_s"])[sel],
                    ls,
                    color=c,
                    label=f"{label}, predicted ({overlap})",
                )
                ax_e.plot(
                    b_arr[sel],
                    100 * np.asarray(preds[name, overlap]["relative_error"])[sel],
                    ls,
                    marker="o",
                    color=c,
                    label=f"{mode} ({overlap})",
                )
            if (name, "sum, after") in preds:
                lo = np.asarray(preds[name, "sum"]["predicted_net_tok_s"])[sel]
                hi = np.asarray(preds[name, "sum, after"]["predicted_net_tok_s"])[sel]
                ax_n.fill_between(b_arr[sel], np.minimum(lo, hi), np.maximum(lo, hi), color=c, alpha=0.15, lw=0)
        coal = mode_arr == "coalesced"
        ax_c.plot(b_arr[coal], np.asarray(rep["coalescing_ratio"])[coal], "ko", label="measured B·K/U")
        ax_c.plot(
            b_arr[coal],
            np.asarray(preds[name, "sum"]["predicted_coalescing_ratio"])[coal],
            "k-",
            label="modelled: independent tokens",
        )
        ax_e.axhspan(-25, 25, color="0.9", lw=0, label="±25 %")
        ax_e.axhline(0, color="k", lw=0.8)
        ax_n.set(xscale="log", yscale="log", xlabel="batch B (agents)", ylabel="net tok/s (all agents)")
        ax_e.set(xscale="log", xlabel="batch B (agents)", ylabel="predicted / measured − 1 (%)")
        ax_c.set(
            xscale="log", xlabel="batch B (agents)", ylabel=label_with_baseline("coalescing ratio B·K/U", "uncoalesced")
        )
        for ax in (ax_n, ax_e, ax_c):
            plain_log_ticks(ax)
            ax.legend(fontsize=6)
        shape = f"E={rep['experts']} L={rep['layers']} K={rep['top_k']}, expert {rep['expert_bytes'] / MiB:g} MiB"
        ax_n.set_title(
            f"{name} run: {shape}, {rep['read_path']} reads\nmarkers {provenance_label('witnessed')}; "
            f"lines {provenance_label('witnessed-inputs')}",
            fontsize=8,
        )
        ax_e.set_title(f"error of the roofline, {rep['date'][:10]}", fontsize=8)
        ax_c.set_title(f"routing {rep['routing']}; baseline uncoalesced", fontsize=8)
        fig.tight_layout()
        if name != "live":
            # the live run re-measures this box each render: it stays in the report, not in figures/
            save_figure(fig, f"witness_{name}")
        plt.show()


for name in runs:
    witness_figure(name)

# %% [markdown]
# ## The same lever on a GPU: experts streamed over PCIe to an H200
# A witnessed run of `benchmarks/gpu_moe_bench.py` on the lab's H200 (data file
# `data/measurements/gpu_moe_bench-h200-2026-11-29.json`, machine, date and command inside):
# 64 experts × 8 layers of fp16 matrices in pinned host memory, Zipf routing, top-4; uncoalesced
# copies every token's experts, coalesced copies the layer's union once. Predicted with the
# `h200-pcie-offload` preset, whose link curve was measured on the same machine; nothing is
# calibrated on the bench.

# %%
gpu = gpu_bench_check()
with style():
    fig, (ax_n, ax_u) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode, color in (("uncoalesced", "C3"), ("coalesced", "C0")):
        label = mode if mode == "coalesced" else "baseline: uncoalesced"
        ax_n.plot(gpu["batch"], gpu["modes"][mode]["measured"], "o", color=color, label=f"{label}, measured")
        ax_n.plot(gpu["batch"], gpu["modes"][mode]["predicted"], "-", color=color, label=f"{label}, predicted")
    ax_n.set(
        xscale="log",
        yscale="log",
        xlabel="batch B (tokens per step)",
        ylabel="net tok/s",
        title=f"{gpu['gpu']}, {gpu['date']}: markers {provenance_label('witnessed')}\nlines {provenance_label('witnessed-inputs')}",
    )
    ax_u.plot(gpu["batch"], gpu["multiple_measured"], "ko", label="measured")
    ax_u.plot(gpu["batch"], gpu["multiple_predicted"], "k-", label="roofline")
    ax_u.set(
        xscale="log",
        xlabel="batch B (tokens per step)",
        ylabel=label_with_baseline("coalesced / uncoalesced net tok/s", "uncoalesced"),
        title="what coalescing buys on the GPU",
    )
    for ax in (ax_n, ax_u):
        plain_log_ticks(ax)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "witness_gpu_h200")
    plt.show()
print(
    f"H200 median |error| of predicted net tok/s: uncoalesced {gpu['modes']['uncoalesced']['median_abs_error']:.0%}, "
    f"coalesced {gpu['modes']['coalesced']['median_abs_error']:.0%}; coalescing multiple at B = {gpu['batch'][-1]}: "
    f"measured {gpu['multiple_measured'][-1]:.2f}x, predicted {gpu['multiple_predicted'][-1]:.2f}x (baseline uncoalesced); "
    f"union per layer measured {gpu['union_measured'][-1]:.1f}, modelled {gpu['union_predicted'][-1]:.1f}"
)

# %% [markdown]
# ## The real block: transformers' Qwen3-MoE block on the H200
# A witnessed run of `benchmarks/hf_moe_block.py` on the lab's H200 (data file
# `data/measurements/hf-moe-block-h200-2026-11-30.json`, machine, date and command inside):
# transformers' own `Qwen3MoeSparseMoeBlock`, random-initialised, 128 experts, top-8, hidden 2048,
# moe_intermediate 768 (Qwen3-30B-A3B's widths), bf16, its experts in pinned host memory and copied
# to the GPU every step. `uncoalesced` copies each token's 8 experts and runs the block's experts
# forward on that token alone; `coalesced` copies the batch's union once and runs the block's own
# (eager, one expert at a time) experts forward; `coalesced-grouped_mm` makes the same copies and
# runs the block's `grouped_mm` implementation. Routers: the random-init one (near-uniform; the
# model takes `uniform`) and a skewed one (gate rows scaled by 2 … 1; the model takes its measured
# picks). Lines: the roofline with the `h200-pcie-offload` preset, nothing calibrated; dashed: the
# same plus one overhead per expert application taken from each arm's B = 1 row alone.

# %%
hf = hf_block_check()
HF_COLORS = {"uncoalesced": "C3", "coalesced": "C0", "coalesced-grouped_mm": "C2"}
with style():
    fig, axes = plt.subplots(1, len(hf["routers"]), figsize=(11, 4.2), sharey=True, squeeze=False)
    for ax, (router, rr) in zip(axes[0], hf["routers"].items()):
        for arm, a in rr["arms"].items():
            label = arm if arm != "uncoalesced" else "baseline: uncoalesced"
            color = HF_COLORS[arm]
            ax.plot(rr["batch"], np.array(a["measured"]) * 1e3, "o", color=color, label=f"{label}, measured")
            if arm != "coalesced-grouped_mm":  # its roofline line is the coalesced one
                ax.plot(
                    rr["batch"],
                    np.array(a["predicted"]) * 1e3,
                    "-",
                    color=color,
                    label=f"{a['roofline_arm']}, roofline",
                )
            ax.plot(
                rr["batch"],
                np.array(a["calibrated"]) * 1e3,
                "--",
                color=color,
                lw=1,
                label=f"{label}, + overhead from B = 1",
            )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="batch B (tokens per step)",
            ylabel="step ms (one MoE block)",
            title=f"{router} router (model routing: {rr['routing']})",
        )
        plain_log_ticks(ax)
        ax.legend(fontsize=6)
    fig.suptitle(
        f"transformers Qwen3MoeSparseMoeBlock on {hf['gpu']}, {hf['date']}: markers {provenance_label('witnessed')}, "
        f"lines {provenance_label('witnessed-inputs')}",
        fontsize=9,
    )
    fig.tight_layout()
    save_figure(fig, "witness_hf_block")
    plt.show()

hf_rows = []
for router, rr in hf["routers"].items():
    for arm, a in rr["arms"].items():
        for i, b in enumerate(rr["batch"]):
            hf_rows.append(
                {
                    "router": router,
                    "arm": arm,
                    "B": b,
                    "step ms": a["measured"][i] * 1e3,
                    "roofline ms": a["predicted"][i] * 1e3,
                    "error": a["relative_error"][i],
                    "+ overhead ms": a["calibrated"][i] * 1e3,
                    "error, + overhead": a["calibrated_relative_error"][i] if b != rr["batch"][0] else np.nan,
                    "union": a["union_measured"][i],
                    "union modelled": rr["union_predicted"][i],
                    "GB copied": a["bytes_per_step"][i] / 1e9,
                    "copy-only error": a["copy_relative_error"][i],
                    "net tok/s": a["net_tok_s"][i],
                }
            )
show_table(pd.DataFrame(hf_rows), percent=("error", "error, + overhead", "copy-only error"))
hf_u = hf["routers"]["uniform"]["arms"]
hf_multiple = max(hf_u[a]["net_tok_s"][-1] for a in hf_u if a != "uncoalesced") / hf_u["uncoalesced"]["net_tok_s"][-1]
print(
    "median |error| of the roofline's step seconds (uniform router): "
    + "; ".join(
        f"{arm} {a['median_abs_error']:.0%} (with the B = 1 overhead {a['calibrated_median_abs_error']:.0%}, "
        f"{a['overhead_per_application_s'] * 1e3:.3f} ms per expert application)"
        for arm, a in hf_u.items()
    )
    + f"; copy-only times from the link curve within {max(a['copy_median_abs_error'] for a in hf_u.values()):.0%} (median); "
    f"parity (worst relative L2 against the block's own forward): "
    + ", ".join(f"{arm} {p['rel_l2_error']:.1e}" for arm, p in hf["parity"].items())
)

# %% tags=["answer"]
ENGINE_KEYS = ("engine_seconds_per_step", "engine_seconds_per_agent_token")
PREDICTION_KEYS = ("bw_ssd_bytes_per_s", "ssd_read_size_bytes", "bw_mem_bytes_per_s", "flops_per_s", *ENGINE_KEYS)


def errors_by_mode(pred: dict) -> dict[str, list[float]]:
    modes_ = np.asarray(pred["mode"])
    err = np.asarray(pred["relative_error"])
    return {m: err[modes_ == m].tolist() for m in ("coalesced", "uncoalesced") if np.any(modes_ == m)}


e_live = live["expert_bytes"]
answer_inputs = {}
for name, (rep, hw, _) in runs.items():
    answer_inputs[f"the {name} bench"] = rep.get("provenance", "witnessed")
    for key in PREDICTION_KEYS:
        answer_inputs[f"{key} of the {name} run's calibration"] = hw.provenance.get(key, "assumed")
gpu_hw = load_hardware("h200-pcie-offload")
for key in PREDICTION_KEYS:
    answer_inputs[f"{key} of the `h200-pcie-offload` preset"] = gpu_hw.provenance.get(key, "assumed")
answer_inputs["the routing of the HF block's random-init router (modelled `uniform`)"] = hf["routers"]["uniform"][
    "routing_provenance"
]
display(
    Markdown(
        answers.witness(
            machine=f"{live['machine']['cpu']}, {live['machine']['logical_cores']} logical cores",
            read_path=live["read_path"],
            shape=(
                f"E = {live['experts']} experts, L = {live['layers']} layers, K = {live['top_k']}, "
                f"expert {live['expert_bytes'] / MiB:g} MiB"
            ),
            routing=str(live["routing"]),
            batch=batch_list,
            steps=steps,
            file_mib=file_mib,
            calibration={
                "read bandwidth": f"{hw_live.ssd_bandwidth(e_live) / 1e9:.3g} GB/s at the expert size",
                "memory": f"{hw_live.bw_mem_bytes_per_s / 1e9:.3g} GB/s",
                "compute": f"{hw_live.flops_per_s / 1e9:.3g} GFLOP/s",
                "engine terms": (
                    f"{hw_live.engine_seconds_per_step * 1e6:.1f} µs per step and "
                    f"{hw_live.engine_seconds_per_agent_token * 1e6:.1f} µs per agent-token"
                ),
            },
            bound=preds["live", "sum"]["bound"],
            errors={overlap: errors_by_mode(preds["live", overlap]) for overlap in OVERLAPS},
            drift=(cal_after.hardware().ssd_bandwidth(e_live) / hw_live.ssd_bandwidth(e_live) - 1)
            if cal_after is not None
            else None,
            replay=replay_bench or None,
            replay_errors=errors_by_mode(preds["default", "sum"]) if "default" in runs else None,
            gpu={
                "name": gpu["gpu"],
                "date": gpu["date"],
                "median_abs_error": {m: gpu["modes"][m]["median_abs_error"] for m in ("coalesced", "uncoalesced")},
                "batch": gpu["batch"][-1],
                "multiple_measured": gpu["multiple_measured"][-1],
                "multiple_predicted": gpu["multiple_predicted"][-1],
            },
            hf_block={
                "name": hf["gpu"],
                "date": hf["date"],
                "block": "Qwen3MoeSparseMoeBlock",
                "median_abs_error": {arm: a["median_abs_error"] for arm, a in hf_u.items()},
                "calibrated_median_abs_error": {
                    arm: a["calibrated_median_abs_error"] for arm, a in hf_u.items() if arm != "coalesced-grouped_mm"
                },
                "batch": hf["routers"]["uniform"]["batch"][-1],
                "multiple_measured": hf_multiple,
                "parity": {arm: p["rel_l2_error"] for arm, p in hf["parity"].items()},
            },
            inputs=answer_inputs,
        )
    )
)

# %% [markdown]
# ## Where the gap comes from
# The step as the bench saw it, against the model's terms: the effective read bandwidth of the
# step (bytes read ÷ step time, an upper bound on the time reading took) against the calibrated
# bandwidth at the expert's read size, before and after; what the `sum` model leaves out shows
# up as the measured step minus the predicted one.

# %%
rows = []
for name, (rep, hw, hw_after) in runs.items():
    e = rep["expert_bytes"]
    for i, (b, mode) in enumerate(zip(rep["batch"], rep["mode"])):
        p = preds[name, "sum"]
        rows.append(
            {
                "run": name,
                "mode": mode,
                "B": b,
                "step s": rep["step_seconds"][i],
                "step s median": rep.get("step_seconds_median", rep["step_seconds"])[i],
                "predicted s": p["predicted_step_seconds"][i],
                "unexplained s": rep["step_seconds"][i] - p["predicted_step_seconds"][i],
                "effective GB/s": rep["bytes_read_per_step"][i] / rep["step_seconds"][i] / 1e9,
                "calibrated GB/s before": hw.ssd_bandwidth(e) / 1e9,
                "calibrated GB/s after": hw_after.ssd_bandwidth(e) / 1e9 if hw_after is not None else np.nan,
                "step spread max/min": max(rep["step_seconds_each"][i]) / min(rep["step_seconds_each"][i]),
            }
        )
gap = pd.DataFrame(rows)
show_table(gap)

# %% [markdown]
# ## Versions and parameters

# %%
print(f"moeroof {moeroof.__version__}, numpy {np.__version__}, pandas {pd.__version__}")
display(
    show_values(
        {
            "file_mib": file_mib,
            "calibrate_seconds": calibrate_seconds,
            "calibrate_after": calibrate_after,
            "experts": experts,
            "layers": layers,
            "top_k": top_k,
            "d_model": d_model,
            "d_ff": d_ff,
            "batch": batch,
            "steps": steps,
            "routing": routing,
            "seed": seed,
            "scratch_dir": scratch_dir,
            "replay_bench": replay_bench,
            "replay_calibration": replay_calibration,
            "replay_calibration_after": replay_calibration_after,
        }
    )
)
display(show_values(live["machine"], name="machine", value=""))
