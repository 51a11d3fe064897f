"""One model of a decode step: the only place where bytes and FLOP become seconds (docs/models.md).

A decode *step* gives each of B agents one token. On one rank (one box: its own RAM, SSD,
expert cache and share of the experts) the step's work is five terms::

    ssd      = ssd_bytes / (η_link · BW_ssd(read size)) · slowdown   experts streamed after the cache
    memory   = mem_bytes / (η_mem · BW_mem)                  dense band, touched experts, KV
    compute  = flops / (η_compute · FLOPS)
    engine   = c_step + c_token · B + c_expert · Σ_ℓ U_ℓ     launches, sampling, framework, per touched expert
    t_rank   = combine(ssd, memory, compute, engine) / speed,   combine = max (overlap) or sum (serial)

and across R ranks joined by a link (expert parallelism, seed 003)::

    fabric   = fabric_bytes / BW_link
    T_step   = max(max_r t_rank, fabric)    (exchange overlapped)
             = max_r t_rank + fabric        (not overlapped)
    per-agent tok/s = 1 / T_step,   net tok/s = B / T_step

``slowdown`` ≥ 1 is the memory-pressure penalty on the SSD (mlx-lm#1438: a cache that starves the
page cache makes reads slower); ``speed`` is a rank's relative speed (fastest = 1; seed 003's
head node runs 1.3–2.6× slower at identical work). The engine terms are what a serving engine
spends per step and per agent-token outside the roofline (a fixed per-step cost is what makes
measured tok/s rise with concurrency where the roofline alone is flat: bigrig's curve in
docs/sources.md); they come from the hardware preset, ``assumed`` 0 until measured. ``c_expert``
(``engine_seconds_per_touched_expert``) is paid per (layer, expert) pair the step touches,
``Σ_ℓ U_ℓ`` on the rank (a kernel launch, a dequantisation, the routing glue of each expert
run): it makes a step's time grow with the experts it touches, so throughput grows with
concurrency more slowly than a per-step constant predicts (seed 003's M sweep). The
efficiencies η (``mem_efficiency``, ``compute_efficiency``, ``link_efficiency``, default 1) are
the shares of the peaks an engine reaches (llm-analysis' ``hbm_memory_efficiency`` and
``flops_efficiency``).

The bytes, FLOP and tokens of each rank are built by :mod:`moeroof.models.plan` (from the routing
model and the cache the step sees); this module only turns them into seconds, so ``plan``,
``split``, the levers, the pair-vs-booster analysis and the bench's prediction cannot disagree
about the arithmetic. A preset that lacks a field a term needs raises :class:`MissingField`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from moeroof.core.results import Result
from moeroof.data.presets import Hardware, MoEModel

__all__ = [
    "TERMS",
    "RANK_TERMS",
    "OVERLAPS",
    "MissingField",
    "RankWork",
    "Step",
    "rank_terms",
    "combine",
    "fabric_bytes_per_step",
    "evaluate",
]

#: every term, in the order ties are broken when naming the binding one
TERMS = ("ssd", "memory", "compute", "engine", "fabric")
#: the terms of one rank (the fabric joins ranks)
RANK_TERMS = ("ssd", "memory", "compute", "engine")
OVERLAPS = ("max", "sum")


class MissingField(ValueError):
    """A preset lacks a field that a term of the step needs (never a silent zero)."""

    def __init__(self, kind: str, name: str, field: str, why: str):
        self.kind, self.name, self.field = kind, name, field
        super().__init__(f"{kind} preset {name!r} has no {field}: {why}")


@dataclass(frozen=True)
class RankWork:
    """What one rank does in one decode step, per batch size (arrays of shape (nB,) or scalars).

    ``ssd_bytes``: expert bytes streamed from the SSD (the cache's misses); ``mem_bytes``: bytes
    read from memory (dense band once, touched experts, KV); ``flops``; ``agent_tokens``: tokens
    produced this step (B); ``read_size_bytes``: the SSD read granularity; ``ssd_slowdown`` ≥ 1:
    memory-pressure penalty on the SSD term; ``speed``: relative rank speed (fastest = 1);
    ``touched_experts``: the (layer, expert) pairs the rank runs this step (Σ_ℓ U_ℓ; each
    token's own picks for an uncoalesced engine).
    """

    ssd_bytes: np.ndarray
    mem_bytes: np.ndarray
    flops: np.ndarray
    agent_tokens: np.ndarray
    read_size_bytes: float
    ssd_slowdown: np.ndarray | float = 1.0
    speed: float = 1.0
    touched_experts: np.ndarray | float = 0.0


def rank_terms(hardware: Hardware, work: RankWork) -> dict[str, np.ndarray]:
    """The four per-rank terms in seconds at full speed (module docstring)."""
    bw_ssd = hardware.ssd_bandwidth(work.read_size_bytes) * hardware.link_efficiency
    tokens = np.asarray(work.agent_tokens, dtype=float)
    touched = np.asarray(work.touched_experts, dtype=float)
    return {
        "ssd": np.asarray(work.ssd_bytes, dtype=float) / bw_ssd * np.asarray(work.ssd_slowdown, dtype=float),
        "memory": np.asarray(work.mem_bytes, dtype=float) / (hardware.bw_mem_bytes_per_s * hardware.mem_efficiency),
        "compute": np.asarray(work.flops, dtype=float) / (hardware.flops_per_s * hardware.compute_efficiency),
        "engine": hardware.engine_seconds_per_step
        + hardware.engine_seconds_per_agent_token * tokens
        + hardware.engine_seconds_per_touched_expert * touched,
    }


def combine(terms: Mapping[str, np.ndarray], overlap: str) -> tuple[np.ndarray, np.ndarray]:
    """``max`` or ``sum`` of the terms, and the index (into :data:`TERMS`) of the largest."""
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be 'max' or 'sum', got {overlap!r}")
    names = [n for n in TERMS if n in terms]
    stack = np.stack(np.broadcast_arrays(*[np.asarray(terms[n], dtype=float) for n in names]))
    seconds = stack.max(axis=0) if overlap == "max" else stack.sum(axis=0)
    codes = np.array([TERMS.index(n) for n in names])[stack.argmax(axis=0)]
    return seconds, codes


def fabric_bytes_per_step(model: MoEModel, batch, ranks: int) -> np.ndarray:
    """Bytes over the link per step: ``2 · B · L · hidden · activation_bytes · f_remote``.

    Each token's hidden state goes to the ranks that own its remote picks and back, every MoE
    layer (seed 003's exchange). Tokens are homed evenly on the ranks, so ``f_remote =
    Σ_h (1/R)(1 − K_h/K) = (R − 1)/R`` whatever the partition. One rank: 0.
    """
    b = np.asarray(batch, dtype=float)
    if ranks <= 1:
        return np.zeros_like(b)
    if not model.hidden_size:
        raise MissingField("model", model.name, "hidden_size", f"the exchange between {ranks} ranks needs it")
    return 2.0 * b * model.moe_layers * model.hidden_size * model.activation_bytes * ((ranks - 1) / ranks)


@dataclass(frozen=True)
class Step(Result):
    """A step evaluated at each batch size; per-rank arrays have shape (R, nB).

    ``bound`` names, per B, the binding term of the step: the slowest rank's largest term, or
    ``fabric`` when the exchange is longer than every rank (overlapped) or than the slowest
    rank's largest term (not overlapped).
    """

    terms: Mapping[str, np.ndarray]
    rank_seconds: np.ndarray
    rank_bound: tuple[tuple[str, ...], ...]
    fabric_seconds: np.ndarray
    step_seconds: np.ndarray
    slowest_rank: np.ndarray
    bound: tuple[str, ...]
    overlap: str
    fabric_overlapped: bool

    @property
    def ranks(self) -> int:
        return int(self.rank_seconds.shape[0])


def evaluate(
    hardware: Hardware,
    works: Sequence[RankWork],
    *,
    overlap: str = "max",
    fabric_bytes=0.0,
    fabric_overlapped: bool = True,
) -> Step:
    """Turn each rank's work into seconds and the ranks into one step (module docstring)."""
    if not works:
        raise ValueError("a step needs at least one rank")
    per_rank = [rank_terms(hardware, w) for w in works]
    # broadcast_shapes takes any number of shapes (np.broadcast at most 64 arrays: 4 terms × 17 ranks
    # made plan --ranks 17 fail with numpy's "Need at least 0 and at most 64 array objects")
    n = np.broadcast_shapes(*[np.shape(v) for t in per_rank for v in t.values()]) or (1,)
    if len(n) != 1:
        raise ValueError(f"rank work must be scalars or 1-D arrays over the batch sizes, got shape {n}")
    # each term (rank, B): every rank's at once, combined (max / sum and ties) over the terms
    terms = {
        name: np.stack([np.broadcast_to(np.asarray(t[name], dtype=float), n) for t in per_rank]) for name in RANK_TERMS
    }
    secs, codes = combine(terms, overlap)
    speed = np.array([w.speed for w in works], dtype=float)
    if np.any(~np.isfinite(speed)) or np.any(speed <= 0):
        raise ValueError("rank speeds must be positive finite numbers")
    rank_s = secs / speed[:, None]
    fb = np.broadcast_to(np.asarray(fabric_bytes, dtype=float), n)
    if np.any(fb > 0) and not hardware.bw_link_bytes_per_s:
        raise MissingField(
            "hardware", hardware.name, "bw_link_bytes_per_s", f"the exchange between {len(works)} ranks needs it"
        )
    fabric_s = fb / hardware.bw_link_bytes_per_s if np.any(fb > 0) else np.zeros(n)
    # every array here is (n,) or (ranks, n): the slowest rank's entry of each B is [slowest, cols]
    slowest, cols = rank_s.argmax(axis=0), np.arange(n[0])
    worst = rank_s[slowest, cols]
    step = np.maximum(worst, fabric_s) if fabric_overlapped else worst + fabric_s
    # the slowest rank's largest term at its own speed, against the exchange
    worst_term = (np.maximum.reduce(list(terms.values())) / speed[:, None])[slowest, cols]
    fabric_binds = fabric_s > (worst if fabric_overlapped else worst_term)
    bound = tuple("fabric" if fab else TERMS[int(c)] for fab, c in zip(fabric_binds, codes[slowest, cols]))
    rank_bound = tuple(tuple(TERMS[int(c)] for c in row) for row in codes)
    return Step(
        terms=terms,
        rank_seconds=rank_s,
        rank_bound=rank_bound,
        fabric_seconds=fabric_s,
        step_seconds=step,
        slowest_rank=slowest,
        bound=bound,
        overlap=overlap,
        fabric_overlapped=bool(fabric_overlapped),
    )
