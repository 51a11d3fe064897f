"""The engine at its priors: what a zero-fit answer expects where no row identifies the engine.

A preset states a box's peaks; its engine terms (seconds per step, per agent token) and
efficiencies (shares of the memory, compute and streaming peaks an engine reaches) are rarely
measured, and a preset that does not measure them holds them at 0 and 1, *assumed*: the step
model's roofline. ``moeroof fit-plan`` holds every such knob the rows cannot identify at the
box's prior (:data:`moeroof.data.presets.DEFAULT_PRIORS`, or the preset's own ``prior``) and
widens its bands to each end. This module asks the same of a zero-fit answer, so that
``plan`` and ``fit-plan`` assume one engine for an unmeasured box:

- :func:`held_priors`: the knobs of :data:`~moeroof.data.presets.PRIOR_FIELDS` the preset does
  not state (tagged ``assumed``), each with its prior ``(low, centre, high)``;
- :func:`prior_band`: net tok/s at each B with those knobs at their centres, and the band over
  each knob moved to each of its ends with the others at their centres (the envelope of the
  one-at-a-time ends: what fit-plan's bands take in where every end is admitted, the rows
  absent), each with the terms combined either way (``max`` or ``sum``: a structural choice of
  the engine, which fit-plan's bands also take, whole, where both meet the rows). The work of the
  step (the cache, the bytes) is computed once; only its price moves.

The cost per touched (layer, expert) pair is held like the others where the preset does not
state it: 0.09 ms (0–0.8 ms) from public engines (:data:`~moeroof.data.presets.DEFAULT_PRIORS`).
fit-plan, which has a calibration step to bound it, holds it instead at a share of that step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from moeroof.core.results import Result, plain
from moeroof.data.presets import DEFAULTS, PRIOR_FIELDS, Hardware, MoEModel

__all__ = [
    "PRIOR_RECLAIM_PENALTY",
    "PRIOR_RECLAIM_EXPONENT",
    "held_priors",
    "unstated",
    "at_prior_centres",
    "PriorBand",
    "prior_band",
]

#: κ of the OS's reclaim work on the reads (``Hardware.reclaim_penalty``,
#: :func:`moeroof.models.plan.reclaim_slowdown`) where the preset does not state it and
#: ``moeroof fit-plan`` does not fit ``reclaim``, or a zero-fit step reads through the page cache
#: (``Workload.page_cache``; reads that bypass it, as O_DIRECT's do, take no page from the OS):
#: (low, held, high). Held at 0 (assumed: an engine whose cache leaves the OS room, or pins its
#: memory), its high end in the bands (a fit's as far as its calibration rows admit it) — the
#: largest public value, mlx-lm#1438's Apple M5 Max with a 75 GB expert cache beside 128 GB,
#: fitted on its three cache sizes (``fit-plan --fit ssd-scale,reclaim,skew,rho``, the queueing
#: form n = 1): κ = 3.3. Seed 003's GB10 head node, which ran 1.3–2.6× slower than its peer at the
#: same work from memory reclaim, reads as κ ≈ 0.03–0.5 in that form.
PRIOR_RECLAIM_PENALTY = (0.0, 0.0, 3.3)
#: the shape n of that rise, ``1 + κ·(u/(1 − u))^n`` (``Hardware.reclaim_exponent``), where
#: ``moeroof fit-plan`` fits κ but the rows are too few for n beside the engine and SSD terms and
#: the preset does not state it: (low, held, high). No public measurement gives n: the range runs
#: from the queueing form (n = 1) to a rise that stays low while memory is free and steepens near
#: full (n = 3; mlx-lm#1438's three sizes with the engine held at its prior fit n = 1.6), the
#: range the suite's simulated one-stream curves draw n from (:mod:`moeroof.studies.curve_coverage`),
#: held at its middle, its ends in the bands as far as the calibration rows admit them. Holding n
#: there and fitting the engine's cost per touched expert predicts those curves' held-out rows
#: closer than holding that cost at its prior and fitting n (docs/validation.md).
PRIOR_RECLAIM_EXPONENT = (1.0, 2.0, 3.0)
#: where :data:`PRIOR_RECLAIM_PENALTY` comes from, in a band's sources
RECLAIM_SOURCE = (
    "0 assumed (an engine whose cache leaves the OS room); 3.3 the largest public fit, mlx-lm#1438's three "
    "cache sizes in the queueing form"
)


def held_priors(hardware: Hardware) -> dict[str, tuple[float, float, float]]:
    """``field → (low, centre, high)`` (SI) for every prior knob ``hardware`` leaves unstated:
    tagged ``assumed`` and at the roofline's default (engine 0, efficiency 1). A value measured or
    cited, an assumed value other than the default, or one set on the command line (``--set``) is
    the user's statement about the engine and is kept."""
    return {
        key: tuple(float(v) for v in hardware.priors[key][0])  # type: ignore[misc]
        for key in PRIOR_FIELDS
        if key in hardware.priors and unstated(hardware, key)
    }


def unstated(hardware: Hardware, key: str) -> bool:
    """Whether ``hardware`` leaves ``key`` at its default, assumed: a value measured or cited, an
    assumed value other than the default, or one set on the command line (``--set``) is the
    user's statement about the box."""
    return (
        hardware.provenance.get(key, "assumed") == "assumed"
        and getattr(hardware, key) == DEFAULTS[key]
        and not str(hardware.sources.get(key, "")).startswith("set on the command line")
    )


def at_prior_centres(hardware: Hardware) -> Hardware:
    """``hardware`` with every knob of :func:`held_priors` at its prior's centre."""
    centres: dict[str, Any] = {key: c for key, (_, c, _) in held_priors(hardware).items()}
    return replace(hardware, **centres)


@dataclass(frozen=True)
class PriorBand(Result):
    """Net tok/s at each B with the engine at its priors: the centre, the band's ends, and the
    knobs held (field → (low, centre, high), SI); NaN where the step does not fit in RAM."""

    batch: np.ndarray
    net_tok_s: np.ndarray
    low: np.ndarray
    high: np.ndarray
    held: dict[str, tuple[float, float, float]]
    sources: dict[str, str]

    def note(self) -> str:
        """One line: which knobs were held where, and what the band is."""
        if not self.held:
            return "the preset states every engine term and efficiency: tok/s at priors is its net tok/s"
        parts = [_describe(k, v) for k, v in self.held.items()]
        return (
            "tok/s at priors: the engine knobs this preset does not state, held at the box's priors (as "
            "moeroof fit-plan holds them where rows cannot identify them): "
            + "; ".join(parts)
            + "; the range is the envelope of each knob at each of its ends (the others at their centres), with "
            "the terms combined either way (max or sum: overlapped or one after another, which no prior "
            "decides)"
        )

    def to_dict(self) -> dict[str, Any]:
        """Its fields but the batch, plain (NaN: None), and the note."""
        fields = ("net_tok_s", "low", "high", "held", "sources")
        return {**{k: plain(getattr(self, k)) for k in fields}, "note": self.note()}


def _describe(key: str, v: tuple[float, float, float]) -> str:
    lo, c, hi = v
    if key.startswith("engine_seconds"):
        return f"{key} {c * 1e3:g} ms ({lo * 1e3:g}–{hi * 1e3:g})"
    if key == "reclaim_penalty":
        return f"{key} κ {c:g} ({lo:g}–{hi:g}: the OS's reclaim work on the reads the page cache takes)"
    return f"{key} {c:.3g} ({lo:.3g}–{hi:.3g})"


def prior_band(model: MoEModel, hardware: Hardware, workload, routing, batch, *, coalesced: bool = True) -> PriorBand:
    """:class:`PriorBand` of the step at each B (the arguments of :func:`moeroof.models.plan.plan`;
    ``routing`` may be a callable ``B -> RoutingProbabilities``; ``coalesced=False``: the
    uncoalesced baseline's step). The step's work is
    :func:`moeroof.models.plan.batch_works`'s, priced by
    :func:`moeroof.models.plan.works_rates` on the box at its centres and at each end."""
    from moeroof.models.plan import batch_works, works_rates
    from moeroof.models.union import as_batch

    b = as_batch(batch)
    held = held_priors(hardware)
    sources = {key: hardware.priors[key][1] for key in held}
    if workload.page_cache and unstated(hardware, "reclaim_penalty"):
        # reads through the page cache take pages from the OS: its reclaim work at the prior's ends
        held["reclaim_penalty"] = PRIOR_RECLAIM_PENALTY
        sources["reclaim_penalty"] = RECLAIM_SOURCE
    centre = at_prior_centres(hardware)
    works = batch_works(model, centre, workload, routing, b, coalesced=coalesced)
    fits = np.concatenate([np.asarray(w.fits, dtype=bool) for w in works])

    def rates(box: Hardware, wl=workload) -> np.ndarray:
        return np.concatenate([r[0] for r in works_rates(box, wl, works)])

    mid = rates(centre)
    # how an unmeasured engine combines its terms (overlapped or one after another) is a structural
    # choice no prior decides: the band takes the other combination too, at the centres and at
    # each knob's ends (as fit-plan's bands take the other overlap's whole band)
    overlaps = [workload] + ([replace(workload, overlap="sum" if workload.overlap == "max" else "max")] if held else [])
    ends = [
        rates(replace(centre, **cast(dict[str, Any], {key: end})), wl)
        for wl in overlaps
        for key, (lo, _, hi) in held.items()
        for end in (lo, hi)
    ] + [rates(centre, wl) for wl in overlaps[1:]]
    stack = np.stack([mid, *ends])
    nan = np.full(b.shape, np.nan)
    return PriorBand(
        batch=b,
        net_tok_s=np.where(fits, mid, nan),
        low=np.where(fits, stack.min(axis=0), nan),
        high=np.where(fits, stack.max(axis=0), nan),
        held=held,
        sources=sources,
    )
