"""The witnessed transformers MoE block on a GPU (``benchmarks/hf_moe_block.py``) against the roofline.

The bench times transformers' own ``Qwen3MoeSparseMoeBlock`` (128
experts, top-8, hidden 2048, moe_intermediate 768, bf16) with its experts in pinned host memory,
copied to the GPU per decode step: ``uncoalesced`` copies every token's K experts and applies the
block's experts forward to each token alone; ``coalesced`` copies the batch's union once and runs
the block's own (eager, per-expert loop) experts forward over the batch;
``coalesced-grouped_mm`` makes the same copies and runs the block's ``grouped_mm`` implementation.

:func:`hf_block_check` holds the suite's one step model (:func:`moeroof.models.plan.plan`) against
every arm, as :func:`moeroof.studies.validation.gpu_bench_check` does for the synthetic bench:
one MoE layer of E experts of ``expert_bytes`` (gate_up_proj + down_proj, bf16), no dense band, no
KV, no expert cache, the ``h200-pcie-offload`` preset (its link curve measured on the same
machine, ``data/measurements/h200_link.json``), ``max`` overlap unless asked. The routing input:
``uniform`` for the random-init router (an assumption the measured union checks), the measured
picks of the skewed router (a witnessed routing input, never a time). Nothing is fitted on the
timed points. A second line, **calibrated at B = 1**, adds one overhead per expert application
(the host syncs and launches of the per-expert loop), taken from each arm's own B = 1 row alone
and predicted for every other B with the modelled number of applications (B·K uncoalesced, the
modelled union coalesced). A third check predicts each arm's copy-only time from the link curve
and the bytes of the copies it made (two copies per expert: ``gate_up_proj`` and ``down_proj``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.core.paths import DATA_DIR
from moeroof.data.presets import Hardware, MoEModel, bench_model, load_hardware
from moeroof.models.plan import RoutingProbabilities, Workload, plan, routing_from_spec

DEFAULT_PATH = DATA_DIR / "measurements" / "hf-moe-block-h200-2026-11-30.json"
ARMS = ("uncoalesced", "coalesced", "coalesced-grouped_mm")
#: the roofline's arm for each measured arm
ROOFLINE_ARM = {"uncoalesced": "uncoalesced", "coalesced": "coalesced", "coalesced-grouped_mm": "coalesced"}
ROW_KEYS = tuple(
    "router batch mode step_seconds net_tok_s expert_copies_per_step bytes_per_step union_per_step copy_only_seconds "
    "compute_only_seconds expert_picks".split()
)
CONFIG_KEYS = tuple("experts top_k hidden_size moe_intermediate_size expert_bytes copy_bytes flops_per_token".split())


def load(path=None) -> dict[str, Any]:
    """The committed measurement (or ``path``), checked for the keys the comparison reads."""
    data = json.loads(Path(path if path is not None else DEFAULT_PATH).read_text())
    missing = [k for k in ("provenance", "machine", "date", "command", "config", "rows", "parity") if k not in data]
    missing += [f"config.{k}" for k in CONFIG_KEYS if k not in data.get("config", {})]
    for i, row in enumerate(data.get("rows", [])):
        missing += [f"rows[{i}].{k}" for k in ROW_KEYS if k not in row]
    if missing:
        raise ValueError(f"{path or DEFAULT_PATH}: missing {', '.join(missing[:8])}")
    return data


def block_model(cfg: dict[str, Any]) -> MoEModel:
    """One MoE layer of the bench's block as the suite's model (every number from the config)."""
    sizes = {k: cfg[k] for k in ("experts", "top_k", "expert_bytes", "flops_per_token")}
    return bench_model("hf-qwen3-moe-block", moe_layers=1, **sizes)


def router_routing(data: dict[str, Any], router: str, model: MoEModel) -> RoutingProbabilities:
    """``uniform`` for the random-init router; for any other router its measured picks (all timed
    steps of every arm and B pooled) as inclusion probabilities π_e = picks_e / tokens."""
    if router == "uniform":
        return routing_from_spec("uniform", model)
    rows = [r for r in data["rows"] if r["router"] == router]
    picks = np.sum([np.asarray(r["expert_picks"], dtype=float) for r in rows], axis=0)
    pi = picks * model.top_k / picks.sum()
    return RoutingProbabilities(pi[None, :], f"{router} router, measured picks", "witnessed")


def hf_block_check(path=None, *, data: dict | None = None, hardware: Hardware | None = None, overlap: str = "max"):
    """Each router and arm of the measurement against the roofline (module docstring).

    Returns ``{"gpu", "date", "command", "machine", "config", "routers": {router: {"batch",
    "union_measured", "union_predicted", "arms": {arm: {...}}}}, "parity"}``; per arm the measured
    and predicted step seconds, ``relative_error`` (predicted / measured − 1) and its median
    |·| (``median_abs_error``); the same for ``calibrated`` (overhead per expert application from
    B = 1 alone: ``overhead_per_application_s``; its median over B ≥ 2 only) and for the
    copy-only times (``copy_predicted``, ``copy_relative_error``); the measured net tok/s and
    bytes per step. ``parity`` gives the worst errors of each arm against the block's own forward.
    """
    data = data if data is not None else load(path)
    cfg = data["config"]
    model = block_model(cfg)
    hw = hardware if hardware is not None else load_hardware("h200-pcie-offload")
    # seconds of one expert's copies over the link curve: each matrix is one copy
    per_copy = float(sum(b / hw.ssd_bandwidth(b) for b in cfg["copy_bytes"].values()))
    out: dict[str, Any] = {"gpu": data["machine"].get("gpu"), **{k: data[k] for k in ("date", "command", "machine")}}
    out.update(config=cfg, overlap=overlap, routers={})
    for router in dict.fromkeys(r["router"] for r in data["rows"]):
        rows = [r for r in data["rows"] if r["router"] == router]
        batch = sorted({int(r["batch"]) for r in rows})
        routing = router_routing(data, router, model)
        p = plan(model, hw, Workload(context_tokens=0, overlap=overlap, cache_bytes=0.0), routing, batch)
        b = np.asarray(batch, dtype=float)
        roof = {"coalesced": np.asarray(p.step_seconds), "uncoalesced": b / p.baselines["uncoalesced"]["net_tok_s"]}
        applications = {"coalesced": np.asarray(p.union_per_layer), "uncoalesced": b * model.top_k}
        entry: dict[str, Any] = {"batch": batch, "routing": routing.label, "routing_provenance": routing.provenance}
        entry.update(union_predicted=np.asarray(p.union_per_layer).tolist(), arms={})
        for arm in ARMS:
            sel = {int(r["batch"]): r for r in rows if r["mode"] == arm}
            if set(sel) != set(batch):
                continue
            col = {k: np.array([sel[x][k] for x in batch], dtype=float) for k in ROW_KEYS[3:10]}
            meas = col["step_seconds"]
            pred = roof[ROOFLINE_ARM[arm]]
            apps = applications[ROOFLINE_ARM[arm]]
            overhead = max((meas[0] - pred[0]) / apps[0], 0.0) if batch[0] == 1 else float("nan")
            cal = pred + overhead * apps
            err, cal_err = pred / meas - 1, cal / meas - 1
            copy_pred = col["expert_copies_per_step"] * per_copy
            copy_err = copy_pred / col["copy_only_seconds"] - 1
            entry["arms"][arm] = {
                "roofline_arm": ROOFLINE_ARM[arm],
                **_listed(measured=meas, predicted=pred, relative_error=err),
                "median_abs_error": _median_abs(err),
                "overhead_per_application_s": float(overhead),
                **_listed(calibrated=cal, calibrated_relative_error=cal_err),
                "calibrated_median_abs_error": _median_abs(cal_err[1:]) if len(batch) > 1 else float("nan"),
                **_listed(
                    copy_measured=col["copy_only_seconds"], copy_predicted=copy_pred, copy_relative_error=copy_err
                ),
                "copy_median_abs_error": _median_abs(copy_err),
                **_listed(compute_only=col["compute_only_seconds"], net_tok_s=col["net_tok_s"]),
                **_listed(bytes_per_step=col["bytes_per_step"], copies_per_step=col["expert_copies_per_step"]),
                **_listed(union_measured=col["union_per_step"]),
            }
        first = next(iter(entry["arms"].values()), None)
        entry["union_measured"] = first["union_measured"] if first else []
        out["routers"][router] = entry
    out["parity"] = _worst_parity(data["parity"])
    return out


def _listed(**arrays: np.ndarray) -> dict[str, list]:
    return {k: v.tolist() for k, v in arrays.items()}


def _median_abs(err: np.ndarray) -> float:
    return float(np.median(np.abs(err)))


def _worst_parity(rows) -> dict[str, dict[str, float]]:
    """Per arm, the worst errors of its outputs against the block's own forward, and whether
    every output was finite."""
    parity: dict[str, dict[str, float]] = {}
    errors = ("max_abs_error", "max_rel_error", "rel_l2_error")
    for row in rows:
        worst = parity.setdefault(row["mode"], {**dict.fromkeys(errors, 0.0), "all_finite": True})
        for key in errors:
            worst[key] = max(worst[key], float(row[key]))
        worst["all_finite"] = worst["all_finite"] and bool(row.get("finite", True))
    return parity
