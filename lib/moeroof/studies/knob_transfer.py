"""One knob set from one stream to many, on a real capture.

The question a user with a captured trace asks: fitted on what one stream's cache does (two
cache sizes) and on how much a batch's streams share (one union), do the routing knobs predict
the rest — the single stream at other sizes, the batch's cache, the union at another batch
size? This module *measures* those points on a trace by replay, nothing fitted
(:func:`measured_points`), then fits :func:`moeroof.fit.routing.fit_routing` on the
named calibration rows only and compares its predictions with the withheld measurements
(:func:`knob_transfer`). The errors are shown whatever they are.

**Measured points** (the definitions of :mod:`moeroof.fit.routing`, applied to the
trace): the trace's streams are cut into consecutive batches of M (streams ``0..M−1``,
``M..2M−1``, …; a remainder is dropped), each batch replayed over the steps where all its M
streams are live (a real batch whose members finished early would otherwise shrink);

- ``hit_rate`` (M, C): one LRU cache per layer of C experts (scope ``layer``) or one of C·L
  (scope ``global``), the first ``warmup_steps`` steps simulated but not counted, hits pooled
  over the batches (:func:`moeroof.cachesim.simulate`, default lookup: a layer's experts
  are looked up together);
- ``union`` (M): distinct experts per layer and counted step across the batch, mean over steps,
  layers and batches;
- ``overlap`` (M = 1): experts a stream's token shares with its previous token, / K.

The capture's own streams are sequences decoded one after another in some captures (the
Mixtral set in ``../shared/data/external``): replaying them side by side treats them as
concurrent, which is what a serving batch of those requests would route (routing is per token
and does not depend on the batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from moeroof import cachesim as cache
from moeroof.core.results import Result
from moeroof.data.points import Point
from moeroof.fit import routing as fit_routing
from moeroof.models.routing import consecutive_overlap
from moeroof.models.union import distinct_per_layer
from moeroof.studies.measured import Measured

__all__ = ["CAPTURES", "TransferRow", "TransferCheck", "live_batches", "measured_points", "knob_transfer"]

#: the real captures this check runs on by default (``../shared/data/external``; not
#: redistributable, read from there; :data:`moeroof.studies.locality_prior.SOURCES` replays them
#: too): trace path relative to that folder, and the
#: :func:`knob_transfer` settings — batch sizes and per-layer caches sized to each model's E
#: and K, calibrated on the single stream at two sizes, its overlap and the largest batch's union
CAPTURES: dict[str, dict[str, Any]] = {
    "mixtral": {
        "title": "Mixtral 8x7B (4 sequences, 32 layers, top-2 of 8)",
        "trace": "mixtral8x7b-instruct-fp8-vllm-traces/trace_decode.npz",
        "batches": (1, 2, 4),
        "capacities": (3, 4, 5, 6),
        "calibrate": (("hit_rate", 1, 3), ("hit_rate", 1, 5), ("overlap", 1, None), ("union", 4, None)),
    },
    "qwen15": {
        "title": "Qwen1.5-MoE-A2.7B layer 0 (a real vLLM batch of 25, top-4 of 60)",
        "trace": "qwen15moe-a27b-gptq-vllm-layer0/trace_decode_layer0.npz",
        "batches": (1, 5, 25),
        "capacities": (8, 16, 24, 32),
        "calibrate": (("hit_rate", 1, 8), ("hit_rate", 1, 24), ("overlap", 1, None), ("union", 25, None)),
    },
}


def live_batches(topk: np.ndarray, batch: int) -> list[np.ndarray]:
    """Consecutive batches of ``batch`` streams, each cut to the steps where all its streams are
    live (no ``-1`` padding in any of them): a list of traces (steps_b, batch, layers, K)."""
    topk = np.asarray(topk)
    steps, streams = topk.shape[:2]
    if not 1 <= batch <= streams:
        raise ValueError(f"batch must be in 1..{streams} (the trace's streams), got {batch}")
    live = np.all(topk >= 0, axis=(2, 3))  # (steps, streams)
    out = []
    for b0 in range(0, streams - batch + 1, batch):
        alive = live[:, b0 : b0 + batch].all(axis=1)
        # the steps up to the first one where a stream of the batch is gone
        n = int(np.argmin(alive)) if not alive.all() else steps
        out.append(topk[:n, b0 : b0 + batch])
    return out


def measured_points(
    topk: np.ndarray,
    experts: int,
    *,
    batches: Sequence[int] = (1, 2, 4),
    capacities: Sequence[int] = (3, 4, 5, 6),
    scope: str = "layer",
    policy: str = "lru",
    warmup_steps: int = 8,
) -> list[Point]:
    """The points of the module docstring measured on ``topk`` (steps, streams, layers, K):
    per batch size, a ``union`` row and a ``hit_rate`` row per capacity (experts per layer); an
    ``overlap`` row at M = 1. Values are the replay's; every row carries its value."""
    topk = np.asarray(topk)
    layers, k = topk.shape[2], topk.shape[3]
    out: list[Point] = []
    for m in batches:
        parts = [b for b in live_batches(topk, int(m)) if b.shape[0] > warmup_steps + 1]
        if not parts:
            raise ValueError(f"no batch of {m} streams is live for more than {warmup_steps + 1} steps")
        if m == 1:
            ov = np.concatenate([consecutive_overlap(b[warmup_steps:]).ravel() for b in parts])
            out.append(Point(kind="overlap", batch=1, value=float(np.nanmean(ov)) / k))
        union = np.mean([distinct_per_layer(b[warmup_steps:], experts).mean() for b in parts])
        out.append(Point(kind="union", batch=int(m), value=float(union)))
        reqs = [cache.requests_from_trace(b, experts) for b in parts]
        for c in capacities:
            sims = [
                cache.simulate(r, int(c) * layers, policy=policy, scope=scope, warmup_steps=warmup_steps) for r in reqs
            ]
            hits, total = sum(s.hits for s in sims), sum(s.requests for s in sims)
            value = hits / total if total else math.nan
            out.append(Point("hit_rate", int(m), capacity_experts=float(c), policy=policy, scope=scope, value=value))
    return out


@dataclass(frozen=True, kw_only=True)
class TransferRow(Measured):
    """One measured point: its role, the measurement, the prediction and its 5–95 % band
    (``quantity`` its label, ``at`` its batch)."""

    kind: str
    capacity_experts: float | None

    @property
    def label(self) -> str:
        return self.quantity

    @property
    def batch(self) -> int:
        return int(self.at)

    @property
    def error(self) -> float:
        """predicted − measured, in points (× 100) for hit rates and overlaps, experts for a union."""
        scale = 1.0 if self.kind == "union" else 100.0
        return (self.predicted - cast(float, self.measured)) * scale


@dataclass(frozen=True)
class TransferCheck(Result):
    """Fitted on the calibration rows, the withheld rows predicted: the knobs, the family and
    every row (module docstring)."""

    source: str
    family: str
    knobs: dict[str, Any]
    rows: tuple[TransferRow, ...]
    notes: tuple[str, ...] = field(default=())

    def held_out(self) -> tuple[TransferRow, ...]:
        return tuple(r for r in self.rows if r.role == "predicted")


def _is_calibration(p: Point, calibrate: Sequence[tuple]) -> bool:
    return any(
        p.kind == kind and p.batch == batch and (cap is None or p.capacity_experts == float(cap))
        for kind, batch, cap in calibrate
    )


def knob_transfer(
    trace,
    *,
    calibrate: Sequence[tuple] = (("hit_rate", 1, 3), ("hit_rate", 1, 5), ("overlap", 1, None), ("union", 4, None)),
    batches: Sequence[int] = (1, 2, 4),
    capacities: Sequence[int] = (3, 4, 5, 6),
    scope: str = "layer",
    warmup_steps: int = 8,
    seeds: Sequence[int] = (0, 1),
    bootstrap: int = 8,
    **fit_kw,
) -> TransferCheck:
    """Measure :func:`measured_points` on ``trace`` (a path or a trace with ``topk``,
    ``experts``, ``meta``), fit routing knobs on the rows named by ``calibrate`` — tuples
    ``(kind, batch, capacity or None)`` — and predict every other row with bands
    (:func:`moeroof.fit.routing.fit_routing`; extra keywords go to it)."""
    from moeroof.data.io import read_trace

    if not hasattr(trace, "topk"):
        trace = read_trace(trace)
    topk = np.asarray(trace.topk)
    experts = int(trace.experts)
    layers, k = topk.shape[2], topk.shape[3]
    measured = measured_points(
        topk, experts, batches=batches, capacities=capacities, scope=scope, warmup_steps=warmup_steps
    )
    role = ["calibration" if _is_calibration(p, calibrate) else "predicted" for p in measured]
    if "calibration" not in role:
        raise ValueError("no measured row matches the calibration list")
    points = [p if r == "calibration" else Point(**{**p.__dict__, "value": None}) for p, r in zip(measured, role)]
    fit = fit_routing.fit_routing(points, experts, k, layers, seeds=seeds, bootstrap=bootstrap, **fit_kw).to_dict()
    rows: list[TransferRow] = []
    for p, r, out in zip(measured, role, fit["rows"]):
        # a measured row: its value is given
        values = float(cast(float, p.value)), float(out["predicted"]), float(out["low"]), float(out["high"])
        rows.append(TransferRow(p.label(), p.batch, *values, r, kind=p.kind, capacity_experts=p.capacity_experts))
    provenance = (trace.meta or {}).get("provenance", "unknown") if hasattr(trace, "meta") else "unknown"
    source = f"{getattr(trace, 'path', 'trace')} (provenance: {provenance})"
    return TransferCheck(source, str(fit["family"]), fit["knobs"], tuple(rows), tuple(fit.get("notes", ())))


def run_capture(name: str, external_dir=None, **kw) -> TransferCheck:
    """:func:`knob_transfer` on one of :data:`CAPTURES` read from ``external_dir`` (default
    the suite's ``../shared/data/external``); ``FileNotFoundError`` when the capture is absent."""
    from pathlib import Path

    from moeroof.core.paths import EXTERNAL_DIR

    if name not in CAPTURES:
        raise ValueError(f"capture must be one of {', '.join(CAPTURES)}, got {name!r}")
    spec = CAPTURES[name]
    path = Path(external_dir or EXTERNAL_DIR) / spec["trace"]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: capture {name!r} not present (the external data folder is not in this clone)")
    settings = {key: spec[key] for key in ("batches", "capacities", "calibrate")}
    settings.update(kw)
    return knob_transfer(path, **settings)
