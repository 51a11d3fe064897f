"""A partition evaluated rank by rank at one batch size: ``moeroof split`` (docs/models.md, partitions; seed 003).

:func:`split_plan` runs :func:`moeroof.models.plan.step_breakdown` — the same step model and
cache as ``moeroof plan`` — on a given assignment of experts to ranks and reports each rank: its
experts, token load, expected union and misses, streamed bytes, terms and seconds, and the
imbalance by each measure (``max / mean`` over ranks of token load, load per unit speed, union,
streamed bytes and predicted seconds). ``moeroof plan --ranks R --partition M`` and
``moeroof split --method M`` with the same model, box, histogram, cache and batch therefore
report the same per-rank step seconds. :func:`split_report` is the ``split`` command's JSON
object built from a histogram file.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from moeroof.core.errors import ParameterError
from moeroof.core.results import Result
from moeroof.core.units import GiB
from moeroof.data.io import check_incidence_sums, read_histogram
from moeroof.data.presets import Hardware, MoEModel, load_hardware, load_model
from moeroof.models.expert_cache import policy_label
from moeroof.models.local_routing import with_locality
from moeroof.models.partition import METHODS, bytes_partition, imbalance, parse_rank_speed, partition
from moeroof.models.plan import RoutingProbabilities, Workload, input_provenance, step_breakdown
from moeroof.models.routing import inclusion_from_counts, unseen_mass_note

__all__ = ["SplitPlan", "split_plan", "split_report"]


@dataclass(frozen=True, eq=False)
class SplitPlan(Result):
    """A partition evaluated by the per-rank step model (module docstring). Per-rank arrays
    have shape (R,); ``assignment`` (E,) is the rank of each expert."""

    method: str
    ranks: int
    batch: int
    assignment: np.ndarray
    experts_per_rank: np.ndarray
    speed: np.ndarray  # normalised: fastest = 1
    load_rows: np.ndarray
    picks_per_token: np.ndarray
    union_pairs: np.ndarray
    missed_pairs: np.ndarray
    streamed_bytes: np.ndarray
    terms_seconds: dict[str, np.ndarray]
    rank_seconds: np.ndarray
    bound: tuple[str, ...]
    cache_bytes_per_rank: float
    cache_experts_per_layer: float
    fabric_bytes: float
    fabric_seconds: float
    remote_share: float
    fabric_overlapped: bool
    step_seconds: float
    tok_s: float
    imbalance: dict[str, float]
    notes: tuple[str, ...] = ()
    cache_policy: str = "lru"

    @property
    def cache_hit(self) -> np.ndarray:
        """Per rank (R,): ``1 − misses / union`` (1 where the rank touches nothing)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.union_pairs > 0, 1.0 - self.missed_pairs / self.union_pairs, 1.0)

    @property
    def slowest_rank(self) -> int:
        return int(np.argmax(self.rank_seconds))


def _checked_assignment(assignment, experts: int, rank_speed, batch, cache_bytes_per_rank) -> tuple:
    """:func:`split_plan`'s partition, batch and cache checked: (assignment int64, ranks, batch)."""
    a = np.asarray(assignment, dtype=np.int64)
    if a.shape != (experts,):
        raise ValueError(f"assignment has shape {a.shape}, expected ({experts},)")
    if a.min() < 0:
        raise ValueError("assignment: every expert needs a rank >= 0")
    ranks = max(int(a.max()) + 1, 0 if rank_speed is None else len(rank_speed))
    batch = int(batch)
    if batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if cache_bytes_per_rank < 0:
        raise ValueError("cache per rank must be >= 0")
    return a, ranks, batch


def _split_imbalance(load_rows, speed, union, streamed, rank_seconds) -> dict[str, float]:
    """Max over mean across ranks of each per-rank quantity (load per speed: of load / speed
    against the total load over the total speed)."""
    return {
        "token_load": imbalance(load_rows),
        "load_per_speed": float((load_rows / speed).max() / (load_rows.sum() / speed.sum()))
        if load_rows.sum() > 0
        else 1.0,
        "union": imbalance(union),
        "streamed_bytes": imbalance(streamed),
        "predicted_seconds": imbalance(rank_seconds),
    }


def split_plan(
    assignment,
    pi: np.ndarray,
    model: MoEModel,
    hardware: Hardware,
    *,
    batch: int = 8,
    cache_bytes_per_rank: float = 0.0,
    rank_speed=None,
    load=None,
    hidden_size: int | None = None,
    method: str = "",
    locality=None,
    **step_kw,
) -> SplitPlan:
    """A given partition at one batch size, rank by rank: :func:`step_breakdown` (the same model
    ``plan`` uses) with ``assignment``, reported per rank. ``pi`` (H, E); ``load`` (E,) firing
    counts for ``load_rows`` (default π summed over rows); ``hidden_size`` overrides the model's.
    ``step_kw``: the step's other :class:`~moeroof.models.plan.Workload` fields (``context_tokens``,
    ``overlap``, ``fabric_overlapped``, ``read_size_bytes``, ``cache_policy``, ``cache_scope``,
    ``seed``, ``page_cache``), its defaults ``moeroof plan``'s (context 4096 tokens; seed 003
    capped it at 512).
    ``locality`` (a :class:`~moeroof.models.locality.Locality`, or None: independent tokens):
    one stream's locality for a simulated cache, as ``plan`` takes it
    (:func:`moeroof.models.local_routing.with_locality`).
    """
    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    a, ranks, batch = _checked_assignment(assignment, pi.shape[1], rank_speed, batch, cache_bytes_per_rank)
    if hidden_size is not None:
        model = replace(model, hidden_size=int(hidden_size))
    load = pi.sum(axis=0) if load is None else np.asarray(load, dtype=float)
    speeds = None if rank_speed is None else tuple(float(x) for x in rank_speed)
    workload = Workload(cache_bytes=float(cache_bytes_per_rank), ranks=ranks, rank_speed=speeds, **step_kw)
    routing = RoutingProbabilities(pi, "split", "projected", load=load)
    local = with_locality(model, routing, locality, workload=workload)
    if callable(local):
        routing = local(batch)
    br = step_breakdown(model, hardware, workload, routing, [batch], assignment=a)
    st, speed = br.step, br.speed
    union, missed, streamed = br.union_pairs[:, 0], br.missed_pairs[:, 0], br.ssd_bytes[:, 0]
    rank_s = st.rank_seconds[:, 0]
    load_rows = np.bincount(a, weights=load, minlength=ranks)
    return SplitPlan(
        method=method,
        ranks=ranks,
        batch=batch,
        assignment=a,
        experts_per_rank=np.bincount(a, minlength=ranks),
        speed=speed,
        load_rows=load_rows,
        picks_per_token=br.picks_per_token,
        union_pairs=union,
        missed_pairs=missed,
        streamed_bytes=streamed,
        terms_seconds={k: v[:, 0] for k, v in st.terms.items()},
        rank_seconds=rank_s,
        bound=tuple(row[0] for row in st.rank_bound),
        cache_bytes_per_rank=float(cache_bytes_per_rank),
        cache_experts_per_layer=float(br.cache_experts_per_layer[0]),
        fabric_bytes=float(br.fabric_bytes[0]),
        fabric_seconds=float(st.fabric_seconds[0]),
        remote_share=(ranks - 1) / ranks if ranks > 1 else 0.0,
        fabric_overlapped=bool(workload.fabric_overlapped),
        step_seconds=float(st.step_seconds[0]),
        tok_s=batch / float(st.step_seconds[0]),
        imbalance=_split_imbalance(load_rows, speed, union, streamed, rank_s),
        cache_policy=workload.cache_policy,
        notes=tuple(routing.notes),
    )


# ----------------------------------------------------------------------------- the split report


def split_report(
    histogram_path: str | os.PathLike[str],
    ranks: int,
    method: str,
    rank_speed=None,
    *,
    batch: int = 8,
    cache_gib_per_rank: float = 0.0,
    model: str | MoEModel = "glm-5-nvfp4",
    hardware: str | Hardware = "gb10",
    context_tokens: int = 4096,
    overlap: str = "max",
    fabric_overlapped: bool = True,
    read_size_bytes: float | None = None,
    hidden_size: int | None = None,
    cache_policy: str = "lru",
    cache_scope: str = "global",
    seed: int = 0,
    page_cache: bool = False,
    locality=None,
) -> dict[str, Any]:
    """The ``moeroof split`` contract: a partition of a histogram's experts and its step model.

    Keys: ``method``, ``ranks``, ``experts``, ``assignment`` (rank of each expert, in expert
    order), ``experts_per_rank``, ``load_rows`` (per rank, Σ firing counts over layers),
    ``imbalance`` (max/mean of ``load_rows``), ``imbalance_by`` (token_load, load_per_speed,
    union, streamed_bytes, predicted_seconds), and — when the histogram matches the model
    (E, K) — ``predicted_step_seconds`` (per rank), ``step_seconds``, ``tok_s``, ``per_rank``,
    ``fabric``; ``inputs`` (everything used, with provenance), ``notes``. ``weighted`` and
    ``bytes`` need the model to match. Histogram errors are :class:`moeroof.data.io.InputError`
    (``FILE:ROW: FIELD: …``); a bad parameter is a :class:`moeroof.core.errors.ParameterError`
    naming it. The defaults (context 4096 tokens, max overlap, LRU cache) are ``moeroof plan``'s,
    so the two commands agree; seed 003 capped its context at 512 tokens.
    """
    if method not in METHODS:
        raise ParameterError("method", f"expected one of {', '.join(METHODS)}, got {method!r}")
    e = (hist := read_histogram(histogram_path)).experts
    speeds_given, cache_gib = _checked_split_arguments(ranks, e, rank_speed, batch, cache_gib_per_rank)
    mdl = model if isinstance(model, MoEModel) else load_model(model)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    matches = mdl.experts == e and mdl.top_k == hist.top_k
    if not matches and method in ("weighted", "bytes"):
        raise ParameterError(
            "model",
            f"{mdl.name} has E={mdl.experts}, K={mdl.top_k} but the histogram has "
            f"E={e}, K={hist.top_k}; method {method!r} needs the step model (give a matching model)",
        )
    pi, load, notes = _histogram_routing(hist)
    speed = np.ones(int(ranks)) if speeds_given is None else speeds_given
    plan_kw: dict[str, Any] = dict(batch=int(batch), cache_bytes_per_rank=cache_gib * GiB, rank_speed=speed,
                                   load=load, context_tokens=int(context_tokens), overlap=overlap,
                                   read_size_bytes=read_size_bytes)  # fmt: skip
    assignment, won = _assign(method, pi, load, mdl, hw, int(ranks), speeds_given, plan_kw, notes)
    load_rows = np.bincount(assignment, weights=load, minlength=int(ranks))
    out, inputs = _partition_fields(method, int(ranks), assignment, load_rows, hist, speeds_given, speed)
    if matches:
        p = split_plan(
            assignment, pi, mdl, hw, fabric_overlapped=fabric_overlapped, hidden_size=hidden_size,
            method=method, cache_policy=cache_policy, cache_scope=cache_scope, seed=seed,
            page_cache=page_cache, locality=locality, **plan_kw,
        )  # fmt: skip
        notes.extend(p.notes)
        out.update(_step_model_fields(p))
        prov = _split_provenance(hist, mdl, hw, int(ranks), speeds_given)
        inputs.update(
            {"model": mdl.name, "hardware": hw.name, "batch": int(batch), "cache_gib_per_rank": cache_gib,
             "cache_experts_per_layer": p.cache_experts_per_layer, "context_tokens": int(context_tokens),
             "overlap": overlap, "fabric_overlapped": bool(fabric_overlapped), "read_size_bytes": read_size_bytes,
             "cache_policy": cache_policy, "cache_scope": cache_scope, "cache": policy_label(cache_policy),
             "seed": int(seed), "page_cache": bool(page_cache), "provenance": prov}
        )  # fmt: skip
        out["provenance"] = "projected" if any(v != "witnessed" for v in prov.values()) else "witnessed-inputs"
    else:
        out["imbalance_by"] = {"token_load": imbalance(load_rows)}
        notes.append(f"the histogram (E={e}, K={hist.top_k}) does not match model {mdl.name} "
                     f"(E={mdl.experts}, K={mdl.top_k}): no step model, loads only")  # fmt: skip
    out.update(inputs=inputs, **({"bytes_candidate": won} if won is not None else {}), notes=notes)
    return out


def _checked_split_arguments(ranks, experts: int, rank_speed, batch, cache_gib_per_rank) -> tuple[Any, float]:
    """:func:`split_report`'s ranks, speeds, batch and cache checked: (the given speeds or
    None, the cache in GiB per rank)."""
    if isinstance(ranks, (bool, np.bool_)) or not isinstance(ranks, numbers.Integral) or ranks < 1:
        raise ParameterError("ranks", f"expected a positive integer, got {ranks!r}")
    if int(ranks) > experts:
        raise ParameterError("ranks", f"{ranks} ranks for {experts} experts (at most one rank per expert)")
    speeds_given = None if rank_speed is None else parse_rank_speed(rank_speed, int(ranks))
    if isinstance(batch, (bool, np.bool_)) or not isinstance(batch, numbers.Integral) or batch < 1:
        raise ParameterError("batch", f"expected a positive integer, got {batch!r}")
    cache_gib = float(cache_gib_per_rank)
    if not math.isfinite(cache_gib) or cache_gib < 0:
        raise ParameterError("cache_gib_per_rank", f"expected a non-negative number, got {cache_gib_per_rank!r}")
    return speeds_given, cache_gib


def _partition_fields(method, ranks: int, assignment, load_rows, hist, speeds_given, speed):
    """A split report's partition fields and the inputs every split records (a dict each)."""
    out: dict[str, Any] = {
        "method": method,
        "ranks": ranks,
        "experts": hist.experts,
        "assignment": [int(x) for x in assignment],
        "experts_per_rank": [int(x) for x in np.bincount(assignment, minlength=ranks)],
        "load_rows": [int(x) if float(x).is_integer() else float(x) for x in load_rows],
        "imbalance": imbalance(load_rows),
    }
    inputs: dict[str, Any] = {
        "histogram": str(hist.path),
        "histogram_provenance": hist.provenance or "unknown",
        "layers_summed": bool(hist.layers_summed),
        "rank_speed": None if speeds_given is None else [float(x) for x in speeds_given],
        "rank_speed_normalised": [float(x) for x in speed / speed.max()],
    }
    return out, inputs


def _split_provenance(hist, mdl, hw, ranks: int, speeds_given) -> dict[str, str]:
    """The provenance of every input of a split's step model (speeds not given: assumed)."""
    routing_tag = "witnessed" if hist.provenance == "witnessed" else "projected"
    prov = dict(input_provenance(mdl, hw, routing_tag, ranks, attention=True)["inputs"])
    if speeds_given is None:
        prov["rank_speed"] = "assumed"
    return prov


def _histogram_routing(hist) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """π of a split's histogram, its firing load per expert, and what the split must say of it:
    its incidence sums, a layer sum, one partition for every layer, the unseen experts' share."""
    notes: list[str] = check_incidence_sums(hist)
    if hist.layers_summed:
        notes.append(
            "the histogram is summed over layers: π per expert is count / (layers·T), the layer "
            "average; per-layer skew is hidden, so per-rank union and misses are those of the "
            "averaged layer and the partition balances the layer sum only"
        )
    if hist.layers > 1:
        notes.append(
            f"one partition for all {hist.layers} layers (expert id → rank, as in seed 003, the two-GB10 lab report); "
            "EPLB's balanced_packing would pack each layer separately"
        )
    pi, unseen = inclusion_from_counts(hist.counts, hist.tokens, hist.top_k)
    if (note := unseen_mass_note(unseen)) is not None:
        notes.append(note)
    return pi, hist.counts.sum(axis=0).astype(float), notes


def _assign(method, pi, load, mdl, hw, ranks: int, speeds_given, plan_kw: dict, notes: list[str]):
    """The partition by ``method`` (the rank of each expert) and, for ``bytes``, its winning
    candidate (else None); what the user must know of it is appended to ``notes``."""
    speed = plan_kw["rank_speed"]
    won = None
    if method == "bytes":
        assignment, won = bytes_partition(pi, mdl, hw, ranks, **plan_kw)
        notes.append(
            f"bytes: best candidate was {won!r} (starts lpt / weighted / greedy; '+search': "
            "improved by swaps and moves under the hot-set model)"
        )
    else:
        assignment = partition(method, load, ranks, rank_speed=speed)
    if method == "weighted" and speeds_given is None:
        notes.append("weighted without --rank-speed: equal speeds, the same partition as lpt")
    if method in ("id", "lpt") and speeds_given is not None and not np.all(speed == speed[0]):
        notes.append(f"{method} ignores --rank-speed when partitioning; the speeds enter the predicted times only")
    return assignment, won


def _step_model_fields(p) -> dict[str, Any]:
    """The step model's fields of a split report, from :func:`split_plan`'s result."""
    return {
        "imbalance_by": dict(p.imbalance),
        "predicted_step_seconds": [float(x) for x in p.rank_seconds],
        "step_seconds": float(p.step_seconds),
        "tok_s": float(p.tok_s),
        "slowest_rank": p.slowest_rank,
        "per_rank": {
            **{k: [float(x) for x in getattr(p, k)] for k in ("union_pairs", "missed_pairs", "streamed_bytes")},
            "streamed_gib": [float(x / GiB) for x in p.streamed_bytes],
            "cache_hit": [float(x) for x in p.cache_hit],
            "picks_per_token": [float(x) for x in p.picks_per_token],
            "terms_seconds": {k: [float(x) for x in v] for k, v in p.terms_seconds.items()},
            "bound": list(p.bound),
        },
        "fabric": {
            "bytes_per_step": p.fabric_bytes,
            "seconds": p.fabric_seconds,
            "remote_share": p.remote_share,
            "overlapped": p.fabric_overlapped,
        },
    }
