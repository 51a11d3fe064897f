"""The decode-step plan: net tokens/sec of B agents on boxes that stream MoE experts (docs/models.md).

Everything is per *step* (one token for each of the B agents); per-token numbers derive from it.
This module builds what each rank does in a step — bytes streamed, bytes read, FLOP, tokens —
and :mod:`moeroof.models.step` (the only place where bytes and FLOP become seconds) turns it
into the step time. Per rank r of R (a rank is a box: its own RAM, SSD, expert cache and share
S_r of the experts, by :data:`PARTITIONS`; one rank owns them all), with H layer shapes (rows
of the routing probabilities π) standing for the model's L MoE layers in equal shares::

    U_r(B)      = L · mean_ℓ Σ_{i ∈ S_r} [1 − (1 − π_ℓi)^B]     (layer, expert) pairs touched
    misses_r(B) = what the cache lets through (moeroof.models.expert_cache: a simulated policy
                  in steady state, default LRU, or a pinned hot set)
    ssd_bytes_r = misses_r · e
    mem_bytes_r = NR + U_r · e + (P + B·(ctx − P)) · kv       dense band once (L1), experts, KV
    flops       = B · (F_token + ctx · F_attn)
    engine      = c_step + c_token · B
    fabric      = 2 · B · L · hidden · act_bytes · (R − 1)/R / BW_link     (R > 1)
    T_step      = max(max_r combine(...)_r / s_r, fabric)  (or + fabric when not overlapped)

The resident band and the batch's KV are on every rank (seed 003: "present on both nodes"), so
each rank reads them once per step and its compute term is the whole model's FLOP per token (an
upper bound). The cache gets what RAM leaves after the OS reserve, the dense band and the KV; a
step whose resident set does not fit is flagged infeasible, and ``pressure_penalty`` slows the
SSD when the requested cache does not fit (mlx-lm#1438).

Baselines, each returned with its name:

- ``uncoalesced`` — same boxes, batch and cache, dense band batched, but every token fetches its
  own routed experts: a missed expert is streamed once per token that routes to it (with the
  pinned hot set, ``B · misses_r(1)``; with a simulated policy, the union times the picks on
  missed experts per distinct request in the same steady state) and ``B · K_r`` experts are read. The multiple
  against it is the coalescing lever L2.
- ``single`` — the same boxes serving one agent (B = 1).
- ``independent-boxes`` — B copies of the boxes each serving one agent: ``B × net(1)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

import numpy as np

from moeroof.core.errors import ParameterError
from moeroof.core.results import Result
from moeroof.data.presets import Hardware, MoEModel
from moeroof.models import expert_cache, step
from moeroof.models.partition import balanced_packing, bytes_partition, contiguous_split, weighted_packing
from moeroof.models.routing import inclusion_probabilities, zipf_log_weights
from moeroof.models.union import as_batch

__all__ = [
    "TERMS",
    "BASELINES",
    "PARTITIONS",
    "CACHE_POLICIES",
    "Workload",
    "RoutingProbabilities",
    "StepBreakdown",
    "StepWork",
    "Plan",
    "routing_from_spec",
    "input_provenance",
    "assign_experts",
    "step_work",
    "evaluate_work",
    "step_breakdown",
    "batch_works",
    "works_rates",
    "batch_breakdown",
    "reclaim_slowdown",
    "RECLAIM_MAX_SHARE",
    "step_terms",
    "plan",
    "plan_rates",
    "transitions",
    "multiple_thresholds",
    "admission_search",
    "auto_cache",
    "CacheDefault",
    "default_cache",
    "cache_parameter",
    "auto_cache_bytes",
    "ram_batch_limit",
    "ram_left_bytes",
    "MAX_ADMISSION_BATCH",
]

TERMS = step.TERMS
BASELINES = ("uncoalesced", "single", "independent-boxes")
PARTITIONS = ("id", "lpt", "weighted", "bytes")
CACHE_POLICIES = expert_cache.POLICIES


@dataclass(frozen=True)
class Workload:
    """What the user runs: context per agent, expert cache, overlap, ranks and engine choices (SI).

    ``cache_bytes``: the expert cache of each rank; ``cache_policy``: :data:`CACHE_POLICIES`
    (``lru`` simulated in steady state by default; ``static`` is a hot set pinned from the true
    routing probabilities, an oracle); ``cache_scope``: ``global`` (one cache shared by the
    layers) or ``layer``; ``seed`` fixes the simulated traces. ``read_size_bytes``: the SSD read
    granularity (None: one expert per read; an engine that faults pages reads at the page size —
    moe-fit's 20× lesson). ``ranks > 1``: the experts are split over ranks by ``partition``
    (:data:`PARTITIONS`, default ``lpt``; ``weighted`` uses ``rank_speed``, ``bytes`` is
    computed for each B alone by :func:`plan`), joined by ``Hardware.bw_link_bytes_per_s``;
    ``rank_speed``: relative speeds (None: equal); ``fabric_overlapped`` puts the exchange under
    the slowest rank or adds it after. ``shared_prefix_tokens`` (lever L3): the first P tokens of
    every agent's context are one shared prefix whose KV is read once per step — KV bytes
    ``(P + B·(ctx − P))·kv`` instead of ``B·ctx·kv``; attention FLOP are unchanged.
    ``page_cache``: the experts are read through the OS page cache (buffered reads, mmap) rather
    than around it (O_DIRECT): the page cache gets what RAM leaves after the OS reserve, the
    resident band, the KV and the expert cache, serves the expert cache's misses it still holds
    (:func:`moeroof.models.expert_cache.page_cache_hit_ratio`) at the cost of a copy through
    memory, and so a larger expert cache can make a step slower (mlx-lm#1438) — memory pressure
    as a model; ``page_cache_share`` is the share of that leftover RAM the page cache keeps (1:
    all of it; a knob ``moeroof fit-plan`` can fit); ``pressure_penalty`` remains as a manual
    slowdown of the SSD when the requested cache does not fit. ``cache_auto``: each batch size
    gets its own cache, what RAM leaves at that B (:func:`auto_cache_bytes`); ``cache_bytes``
    is then ignored, so a row never depends on the other batch sizes asked for.
    """

    context_tokens: int = 4096
    shared_prefix_tokens: int = 0
    cache_bytes: float = 0.0
    overlap: str = "max"
    read_size_bytes: float | None = None
    ranks: int = 1
    partition: str = "lpt"
    rank_speed: tuple[float, ...] | None = None
    fabric_overlapped: bool = True
    pressure_penalty: float = 1.0
    cache_policy: str = "lru"
    cache_scope: str = "global"
    seed: int = 0
    page_cache: bool = False
    page_cache_share: float = 1.0
    cache_auto: bool = False

    def __post_init__(self) -> None:
        if self.overlap not in step.OVERLAPS:
            raise ValueError(f"overlap must be 'max' or 'sum', got {self.overlap!r}")
        if self.context_tokens < 0 or self.cache_bytes < 0:
            raise ValueError("context_tokens and cache_bytes must be >= 0")
        if not 0 <= self.shared_prefix_tokens <= self.context_tokens:
            raise ValueError("shared_prefix_tokens must be in [0, context_tokens]")
        if self.read_size_bytes is not None and not self.read_size_bytes > 0:
            raise ValueError("read_size_bytes must be > 0")
        if int(self.ranks) != self.ranks or self.ranks < 1:
            raise ValueError("ranks must be a positive integer")
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, got {self.partition!r}")
        if self.rank_speed is not None:
            s = np.asarray(self.rank_speed, dtype=float)
            if s.shape != (self.ranks,) or np.any(~np.isfinite(s)) or np.any(s <= 0):
                raise ValueError(f"rank_speed must be {self.ranks} positive finite numbers, got {self.rank_speed!r}")
        if not self.pressure_penalty >= 1.0:
            raise ValueError("pressure_penalty must be >= 1 (1: none)")
        if self.cache_policy not in CACHE_POLICIES:
            raise ValueError(f"cache_policy must be one of {', '.join(CACHE_POLICIES)}, got {self.cache_policy!r}")
        if not 0.0 <= self.page_cache_share <= 1.0:
            raise ValueError(f"page_cache_share must be in [0, 1], got {self.page_cache_share!r}")
        if self.cache_scope not in expert_cache.SCOPES:
            raise ValueError(f"cache_scope must be 'global' or 'layer', got {self.cache_scope!r}")

    @property
    def speeds(self) -> np.ndarray:
        """Relative rank speeds, fastest = 1."""
        s = np.ones(self.ranks) if self.rank_speed is None else np.asarray(self.rank_speed, dtype=float)
        return s / s.max()


@dataclass(frozen=True)
class RoutingProbabilities:
    """Inclusion probabilities π per layer shape, (H, E), Σ_i π_i = K in each row.

    The rows stand for the model's MoE layers in equal shares (a histogram with fewer layers
    than the model is read as a sample of layer shapes). ``provenance`` is the routing input's
    tag: uniform and Zipf are assumptions; a histogram or trace carries its own. ``load`` (E,):
    firing counts per expert summed over layers when the input had them (what a partition
    balances; default Σ_ℓ π). From a trace, a simulated cache runs on the trace itself wherever
    the batch fits in its streams.
    """

    pi: np.ndarray
    label: str
    provenance: str
    notes: tuple[str, ...] = ()
    load: np.ndarray | None = None
    #: the user's trace (steps, streams, layers, K) when the routing came from one, and a key
    #: that names it for the simulations' memo (path, size, modification time)
    trace: np.ndarray | None = None
    trace_key: str | None = None
    #: (family, skew) of a routing given by its knobs — ``uniform`` ("zipf", 0), ``zipf:S``,
    #: ``dirichlet:A`` and ``prior`` ("dirichlet", α) — which a trace with locality samples
    #: from and a skew fit starts at; None for a histogram or trace
    family_skew: tuple[str, float] | None = None

    @property
    def expert_load(self) -> np.ndarray:
        return self.pi.sum(axis=0) if self.load is None else np.asarray(self.load, dtype=float)


#: the popularity draws of a ``dirichlet:A`` or ``prior`` routing: the stand-in layers a global
#: cache runs over (:data:`moeroof.models.expert_cache.GLOBAL_STAND_IN_LAYERS`), at this seed
DIRICHLET_SEED = 0
#: the most quadrature nodes per expert one row's inclusion probabilities hold at once (bounds
#: the memory :func:`dirichlet_routing` asks for before it asks)
INCLUSION_NODES_BOUND = 512


def dirichlet_routing(model: MoEModel, alpha: float, label: str, notes: tuple[str, ...] = ()) -> RoutingProbabilities:
    """Each stand-in layer's popularity ``w ~ Dirichlet(α·1)`` (drawn afresh per layer, so which
    experts are hot differs between layers: :func:`moeroof.fit.routing.layer_popularity`
    at :data:`DIRICHLET_SEED`) and π its top-K inclusion probabilities
    (:func:`~moeroof.models.routing.inclusion_probabilities`); α → ∞ is uniform."""
    from moeroof.core.limits import check_allocation
    from moeroof.models.knob_routing import RoutingKnobs, layer_popularity

    layers = expert_cache.GLOBAL_STAND_IN_LAYERS
    # the inclusion probabilities integrate each row over a grid of a few hundred nodes per expert
    check_allocation(
        model.experts * INCLUSION_NODES_BOUND, 8, "experts × inclusion quadrature nodes", parameter="routing"
    )
    w = layer_popularity(RoutingKnobs(family="dirichlet", skew=float(alpha)), model.experts, layers, DIRICHLET_SEED)
    pi = inclusion_probabilities(np.log(np.maximum(w, 1e-300)), model.top_k, log=True)
    return RoutingProbabilities(pi, label, "assumed", notes, family_skew=("dirichlet", float(alpha)))


def prior_routing(model: MoEModel) -> RoutingProbabilities:
    """The skew prior's routing: Dirichlet at the committed prior's median α
    (:mod:`moeroof.data.skew_prior`, fitted on public routing of fine-grained MoE models)."""
    from moeroof.data.skew_prior import committed_skew_prior

    prior = committed_skew_prior().for_experts(model.experts)
    note = (
        f"routing skew from the {prior.label()}: each layer's expert popularity w ~ Dirichlet(α), drawn per "
        f"layer ({expert_cache.GLOBAL_STAND_IN_LAYERS} stand-in layers)"
    )
    return dirichlet_routing(model, prior.alpha, f"skew prior (Dirichlet α={prior.alpha:.2g})", (note,))


def skew_prior_of(routing: RoutingProbabilities):
    """The committed skew prior (:class:`moeroof.data.skew_prior.SkewPriorSummary`) where
    ``routing`` is its routing (:func:`prior_routing`: Dirichlet at its median α), else None."""
    from moeroof.data.skew_prior import committed_skew_prior

    fs = getattr(routing, "family_skew", None)
    prior = committed_skew_prior()
    # the fine-grained prior or the coarse one (prior_routing picks by the model's E)
    return next(
        (p for p in (prior, prior.for_experts(1)) if fs is not None and tuple(fs) == ("dirichlet", p.alpha)), None
    )


def _routing_of_knobs(spec: str, model: MoEModel) -> RoutingProbabilities | None:
    """A routing given by its knobs (``prior``, ``uniform``, ``zipf:S``, ``dirichlet:A``), else
    None (a path)."""
    from moeroof.core.limits import check_allocation

    e, k = model.experts, model.top_k
    if spec == "prior":
        return prior_routing(model)
    if spec == "uniform":
        return RoutingProbabilities(np.full((1, e), k / e), "uniform", "assumed", family_skew=("zipf", 0.0))
    family = spec.split(":", 1)[0].strip().lower()
    if family not in ("zipf", "dirichlet"):
        return None
    name, letter, example = (
        ("Zipf exponent", "S", "0.9") if family == "zipf" else ("Dirichlet concentration", "A", "0.6")
    )
    value = spec.split(":", 1)[1] if ":" in spec else ""
    if not value.strip():
        raise ValueError(f"routing {spec!r}: give the {name} as {family}:{letter} (e.g. {family}:{example})")
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"routing {spec!r}: expected {family}:{letter} with a number {letter}") from None
    if family == "dirichlet":
        if not np.isfinite(x) or not 1e-3 <= x <= 1e12:
            raise ValueError(f"routing {spec!r}: Dirichlet concentration must be in [0.001, 1e12]")
        return dirichlet_routing(model, x, f"Dirichlet α={x:g}")
    if not np.isfinite(x) or x < 0:
        raise ValueError(f"routing {spec!r}: Zipf exponent must be >= 0")
    check_allocation(e * INCLUSION_NODES_BOUND, 8, "experts × inclusion quadrature nodes", parameter="routing")
    pi = inclusion_probabilities(zipf_log_weights(e, x), k, log=True)[None, :]
    return RoutingProbabilities(pi, f"Zipf s={x:g}", "assumed", family_skew=("zipf", x))


def routing_from_spec(spec: str, model: MoEModel) -> RoutingProbabilities:
    """``prior`` (the skew prior: :func:`prior_routing`), ``uniform``, ``zipf:S``,
    ``dirichlet:A`` (:func:`dirichlet_routing`) or a path to a histogram ``.csv`` / trace
    ``.npz``/``.npy`` (absolute, relative to the working directory where it exists there, else
    relative to ``data/``: :func:`moeroof.core.paths.resolve_data`)."""
    knob = _routing_of_knobs(spec, model)
    if knob is not None:
        return knob
    e, k = model.experts, model.top_k
    from moeroof.core.paths import resolve_data
    from moeroof.data.io import Histogram, check_incidence_sums, load_any
    from moeroof.models.routing import histogram_from_trace, inclusion_from_counts, unseen_mass_note

    path = resolve_data(spec)
    data = load_any(path)
    if data.experts != e or data.top_k != k:
        raise ValueError(
            f"routing {path}: E={data.experts}, K={data.top_k} do not match model {model.name} (E={e}, K={k})"
        )
    notes, trace, trace_key = [], None, None
    if isinstance(data, Histogram):
        notes.extend(check_incidence_sums(data))
        counts, tokens = data.counts, data.tokens
        if data.layers_summed:
            # summed incidence over layers·T: π̄ = count / (layers·T)
            notes.append(
                "the histogram is summed over layers: per-layer skew is averaged away and "
                "the union is overstated (see union_curve)"
            )
    else:
        trace, st = data.topk, path.stat()
        trace_key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        arr = np.asarray(data.topk)
        counts = histogram_from_trace(arr, e)
        tokens = (arr >= 0).all(axis=-1).sum(axis=(0, 1))
    pi, unseen = inclusion_from_counts(counts, tokens, k)
    if (note := unseen_mass_note(unseen)) is not None:
        notes.append(note)
    prov = "witnessed" if data.meta.get("provenance", "projected") == "witnessed" else "projected"
    model_name = data.meta.get("model")
    # an import without --model records "unknown (...)": the file name alone says more
    named = isinstance(model_name, str) and model_name.strip() and not model_name.startswith("unknown")
    label = f"{model_name} ({path.name})" if named else path.name
    load = np.asarray(counts, dtype=float).sum(axis=0)
    return RoutingProbabilities(pi, label, prov, tuple(notes), load=load, trace=trace, trace_key=trace_key)


def ram_left_bytes(
    model: MoEModel, hardware: Hardware, batch, *, context_tokens: int, shared_prefix_tokens: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(left, kv)`` at each B (nB,): the batch's KV ``(P + B·(ctx − P))·kv_bytes_per_token``
    and what RAM leaves beside it, ``RAM − OS reserve − dense band − KV`` (negative: the step
    does not fit). The one place every caller (the step, auto cache, admission) reads it from."""
    bf = as_batch(batch).astype(float)
    p = int(shared_prefix_tokens)
    kv = (p + bf * (int(context_tokens) - p)) * model.kv_bytes_per_token
    return hardware.ram_bytes - hardware.os_reserve_bytes - model.non_routed_bytes - kv, kv


def auto_cache_bytes(
    model: MoEModel, hardware: Hardware, batch, *, context_tokens: int = 4096, shared_prefix_tokens: int = 0
) -> np.ndarray:
    """The expert cache ``--cache-gib auto`` gives each rank at each batch size B (nB,)::

        cache(B) = clip(min(RAM − OS reserve − dense band − KV(B), routed bytes), 0)
        KV(B)    = (P + B·(ctx − P)) · kv_bytes_per_token

    what RAM leaves at that B alone (docs/commands.md, `--cache-gib auto`), capped at the whole
    routed set (a larger cache holds nothing more). Each B's cache depends on that B only, never
    on the other batch sizes of a grid."""
    left, _ = ram_left_bytes(
        model, hardware, batch, context_tokens=context_tokens, shared_prefix_tokens=shared_prefix_tokens
    )
    return np.clip(np.minimum(left, float(model.routed_bytes)), 0.0, None)


def auto_cache(
    model: MoEModel, hardware: Hardware, batch, *, context_tokens: int = 4096, shared_prefix_tokens: int = 0
) -> dict[str, Any]:
    """What ``--cache-gib auto`` gives each batch size, and why (:func:`auto_cache_bytes`).

    Returns per-B lists ``batch``, ``cache_bytes``, ``kv_bytes`` and ``limited_by`` (``ram``: the
    leftover RAM; ``routed``: every expert fits; ``none-left``: nothing is left, the step does not
    fit or has no cache) and the parts shared by every B (``ram_bytes``, ``os_reserve_bytes``,
    ``dense_bytes``, ``routed_bytes``, ``context_tokens``, ``shared_prefix_tokens``).
    """
    b = as_batch(batch)
    p = int(shared_prefix_tokens)
    left, kv = ram_left_bytes(model, hardware, b, context_tokens=context_tokens, shared_prefix_tokens=p)
    cache = np.clip(np.minimum(left, float(model.routed_bytes)), 0.0, None)  # auto_cache_bytes
    routed = float(model.routed_bytes)
    limited = ["none-left" if x <= 0 else "routed" if x >= routed else "ram" for x in left]
    return {
        "batch": [int(x) for x in b],
        "cache_bytes": [float(x) for x in cache],
        "kv_bytes": [float(x) for x in kv],
        "limited_by": limited,
        "ram_bytes": float(hardware.ram_bytes),
        "os_reserve_bytes": float(hardware.os_reserve_bytes),
        "dense_bytes": float(model.non_routed_bytes),
        "routed_bytes": routed,
        "context_tokens": int(context_tokens),
        "shared_prefix_tokens": p,
    }


@dataclass(frozen=True)
class CacheDefault:
    """What a notebook's ``cache_gib = "auto"`` became: ``cache_bytes`` and ``why``, in words."""

    cache_bytes: float
    why: str


def default_cache(
    model: MoEModel,
    hardware: Hardware,
    *,
    preferred_bytes: float,
    context_tokens: int = 4096,
    shared_prefix_tokens: int = 0,
) -> CacheDefault:
    """The one expert cache a report uses for every batch size when its ``cache_gib`` is ``auto``::

        cache = clip(min(preferred, routed bytes, RAM − OS reserve − dense band − KV(1)), 0)

    the notebook's preferred size, capped at the model's whole routed set (a larger cache holds
    nothing more) and at what RAM leaves beside one agent's KV (:func:`ram_left_bytes` at B = 1),
    so that a default made for one model never asks another for more than it has or its box can
    hold. Larger batches add KV: where a batch's KV does not fit beside this cache, the plan marks
    that batch infeasible rather than shrinking the cache (``--cache-gib auto`` in ``plan`` sizes
    a cache per batch instead, :func:`auto_cache_bytes`)."""
    left, _ = ram_left_bytes(
        model, hardware, [1], context_tokens=context_tokens, shared_prefix_tokens=shared_prefix_tokens
    )
    left_1 = float(left[0])
    routed = float(model.routed_bytes)
    preferred = float(preferred_bytes)
    g = 2.0**30
    cache = max(min(preferred, routed, left_1), 0.0)
    if cache == preferred:
        why = f"{preferred / g:g} GiB, the report's preferred size (it fits {model.name} on {hardware.name})"
    elif cache == routed and routed <= left_1:
        why = f"{cache / g:.1f} GiB, every routed expert of {model.name} (a larger cache holds nothing more)"
    elif left_1 > 0:
        why = (
            f"{cache / g:.1f} GiB, what {hardware.name}'s RAM leaves beside the OS reserve, the dense band and one "
            f"agent's KV at {int(context_tokens)} tokens (the preferred {preferred / g:g} GiB does not fit)"
        )
    else:
        why = f"no cache: {model.name}'s dense band and one agent's KV do not fit in {hardware.name}'s RAM"
    return CacheDefault(cache, why)


def cache_parameter(
    value: float | str,
    model: MoEModel,
    hardware: Hardware,
    *,
    preferred_gib: float,
    context_tokens: int = 4096,
    name: str = "cache_gib",
) -> tuple[float, str | None]:
    """A report's cache parameter ``name`` in GiB: ``(value, None)`` for a number, ``(gib, why)``
    for ``auto`` (:func:`default_cache` with the report's preferred size). Raises
    :class:`ParameterError` naming ``name`` for anything else."""
    if isinstance(value, str):
        if value.strip().lower() != "auto":
            raise ParameterError(name, f"expected a number of GiB or auto, got {value!r}")
        chosen = default_cache(model, hardware, preferred_bytes=preferred_gib * 2.0**30, context_tokens=context_tokens)
        return chosen.cache_bytes / 2.0**30, chosen.why
    return float(value), None


def auto_cache_note(auto: Mapping[str, Any]) -> str:
    """One sentence saying what ``auto`` chose at each B and why, from :func:`auto_cache`'s numbers."""
    g = 2.0**30
    head = (
        f"expert cache auto, per batch size: RAM {auto['ram_bytes'] / g:.1f} GiB − OS reserve "
        f"{auto['os_reserve_bytes'] / g:.1f} − dense band {auto['dense_bytes'] / g:.1f} − that batch's KV at "
        f"{auto['context_tokens']} tokens, capped at the routed set {auto['routed_bytes'] / g:.1f} GiB"
    )
    tails = {"routed": " (every routed expert)", "none-left": " (nothing left)"}
    cells = [
        f"B={b}: {c / g:.1f} GiB{tails.get(why, '')}"
        for b, c, why in zip(auto["batch"], auto["cache_bytes"], auto["limited_by"])
    ]
    if len(cells) > 6:
        cells = [*cells[:3], "…", *cells[-2:]]
    return f"{head}: {', '.join(cells)}"


def assign_experts(
    model: MoEModel, hardware: Hardware, workload: Workload, routing: RoutingProbabilities, batch
) -> np.ndarray:
    """Rank of each expert (E,) for ``workload.partition`` over ``workload.ranks`` ranks.

    ``id``: contiguous ids; ``lpt``: DeepSeek EPLB's equal-cardinality LPT on the firing load;
    ``weighted``: LPT for ranks of unequal speed (cardinality ∝ speed); ``bytes``: balances the
    expected streamed bytes under the hot-set model at the largest batch of ``batch``
    (:func:`moeroof.models.partition.bytes_partition`; :func:`plan` asks it one B at a time, so
    that each batch size gets the partition of its own step). One rank: all zeros.
    """
    e = routing.pi.shape[1]
    r = workload.ranks
    if r == 1:
        return np.zeros(e, dtype=np.int64)
    if r > e:  # the parameter named, so the command line says --ranks (it said "ranks=1000000 …")
        raise ParameterError("ranks", f"{r} ranks for {e} experts (at most one rank per expert)")
    load = routing.expert_load
    if workload.partition == "id":
        return contiguous_split(e, r)
    if workload.partition in ("lpt", "weighted"):
        # a fit asks for the same packing at every evaluation: memoised on the load's exact bytes
        speeds = workload.speeds if workload.partition == "weighted" else np.ones(0)
        key = (workload.partition, r, expert_cache.digest(np.asarray(load, dtype=float), speeds))

        def pack() -> np.ndarray:
            return balanced_packing(load, r) if workload.partition == "lpt" else weighted_packing(load, speeds)

        return expert_cache.memoised(key, pack, "packings").copy()
    b = int(np.max(as_batch(batch)))
    ctx, prefix = workload.context_tokens, workload.shared_prefix_tokens
    cache = workload.cache_bytes
    if workload.cache_auto:
        cache = float(auto_cache_bytes(model, hardware, [b], context_tokens=ctx, shared_prefix_tokens=prefix)[0])
    kw: dict[str, Any] = dict(batch=b, cache_bytes_per_rank=cache, rank_speed=workload.speeds, load=load)
    kw.update(context_tokens=ctx, overlap=workload.overlap, read_size_bytes=workload.read_size_bytes)
    return bytes_partition(routing.pi, model, hardware, r, **kw)[0]


@dataclass(frozen=True)
class StepWork:
    """What each rank does in a step at each B, before any of it becomes seconds: the bytes, FLOP
    and touched experts of :func:`step_work`, with what RAM left for the caches. Per-rank arrays
    (R, nB); ``union_pairs`` / ``missed_pairs`` count (layer, expert) pairs over all L MoE layers.
    A fit that moves only the knobs that price the work (the engine terms, the SSD scale, the
    efficiencies, the reclaim work) evaluates one :class:`StepWork` many times (:func:`evaluate_work`)."""

    batch: np.ndarray
    assignment: np.ndarray
    speed: np.ndarray
    union_pairs: np.ndarray
    missed_pairs: np.ndarray
    expert_reads: np.ndarray
    picks_per_token: np.ndarray
    ssd_bytes: np.ndarray
    mem_bytes: np.ndarray
    flops: np.ndarray
    fabric_bytes: np.ndarray
    read_size_bytes: float
    available_bytes: np.ndarray
    cache_bytes: np.ndarray
    cache_experts_per_layer: np.ndarray
    fits: np.ndarray
    pressured: np.ndarray
    page_cache_bytes: np.ndarray  # (nB,) the OS page cache of each rank
    page_hit_pairs: np.ndarray  # (R, nB) misses served from the page cache

    @property
    def ranks(self) -> int:
        return int(self.assignment.max()) + 1 if self.assignment.size else 1

    @property
    def cache_hit_rate(self) -> np.ndarray:
        """Per rank (R, nB): ``1 − misses / union``."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.union_pairs > 0, 1.0 - self.missed_pairs / self.union_pairs, 1.0)

    @cached_property
    def pooled_hit_rate(self) -> np.ndarray:
        """Over all ranks (nB,): ``1 − Σ_r misses / Σ_r union``, 1 where nothing is touched (kept:
        a fit re-prices one work many times)."""
        u = self.union_pairs.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(u > 0, 1.0 - self.missed_pairs.sum(axis=0) / u, 1.0)


@dataclass(frozen=True)
class StepBreakdown(StepWork, Result):
    """One step per batch size, rank by rank: the work (:class:`StepWork`: the inputs of
    :func:`moeroof.models.step.evaluate`) and its result ``step``, priced under ``cache_policy``."""

    step: step.Step
    cache_policy: str


#: the fields of a :class:`StepWork` laid along the batch sizes (last axis), and those its price reads
_BATCH_FIELDS = tuple(
    f.name for f in fields(StepWork) if f.name not in ("assignment", "speed", "picks_per_token", "read_size_bytes")
)
_PRICED_FIELDS = tuple(
    "batch ssd_bytes mem_bytes expert_reads flops fabric_bytes available_bytes cache_bytes pressured".split()
)


def _joined(works: Sequence[StepWork], names: Sequence[str] = _BATCH_FIELDS) -> StepWork:
    """``works`` of one shape (ranks, speeds, read size) as one along their batch sizes: the fields
    ``names`` joined in order, the others the last work's (the largest B's assignment and picks)."""
    if len(works) == 1:
        return works[0]
    joined: dict[str, Any] = {n: np.concatenate([getattr(w, n) for w in works], axis=-1) for n in names}
    return replace(works[-1], **joined)


def _cache_given(model: MoEModel, workload: Workload, available: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The expert cache a rank gets at each B (bytes) and whether RAM cut it below the asked size:
    ``auto``, all that RAM leaves (at most every routed byte); else the asked size, at most that."""
    if workload.cache_auto:
        return np.clip(np.minimum(available, float(model.routed_bytes)), 0.0, None), np.zeros(
            available.shape, dtype=bool
        )
    return np.clip(np.minimum(workload.cache_bytes, available), 0.0, None), workload.cache_bytes > available


def _misses_and_reads(rc, bf: np.ndarray, coalesced: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per layer and B, from a rank cache ``rc``: the misses, the page-cache hits among them and
    the expert reads — the step's union once (coalesced), or every token's own picks."""
    misses, page_hits = rc.misses_per_layer, rc.page_hits_per_layer
    if coalesced:
        return misses, page_hits, rc.union_per_layer
    # each token's miss goes to the page cache as the step's misses do
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(misses > 0, page_hits / misses, 0.0)
    token_misses = rc.token_misses_per_layer
    return token_misses, token_misses * share, rc.picks_per_token[:, None] * bf


def step_work(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: RoutingProbabilities,
    batch,
    *,
    assignment=None,
    coalesced: bool = True,
    dense_once: bool = True,
    extra_flops=0.0,
) -> StepWork:
    """Every rank's work at each B (the arguments of :func:`step_breakdown`): the cache the step
    sees, what it streams, reads and computes. Of the hardware it reads the memory sizes and,
    for the ``bytes`` partition, what the partition balances; nothing that prices the work."""
    b = as_batch(batch)
    bf = b.astype(float)
    pi = np.atleast_2d(np.asarray(routing.pi, dtype=float))
    if pi.shape[1] != model.experts:
        raise ValueError(f"routing has E={pi.shape[1]} experts, model {model.name} has {model.experts}")
    a = assign_experts(model, hardware, workload, routing, b) if assignment is None else np.asarray(assignment)
    a = a.astype(np.int64)
    if a.shape != (model.experts,) or a.min() < 0:
        raise ValueError(f"assignment must give a rank >= 0 to each of the {model.experts} experts")
    ranks = max(int(a.max()) + 1, workload.ranks)
    speed = workload.speeds if ranks == workload.ranks else np.ones(ranks)
    e_bytes, layers, ctx = model.expert_bytes, model.moe_layers, workload.context_tokens
    available, kv_step = ram_left_bytes(
        model, hardware, b, context_tokens=ctx, shared_prefix_tokens=workload.shared_prefix_tokens
    )
    cache_eff, pressured = _cache_given(model, workload, available)
    cache_experts = cache_eff / (layers * e_bytes)
    kw: dict[str, Any] = dict(policy=workload.cache_policy, scope=workload.cache_scope, seed=workload.seed)
    kw.update(trace=routing.trace, trace_key=routing.trace_key)
    # the OS page cache of the streamed files gets what RAM leaves after everything else
    page_bytes = (
        workload.page_cache_share * np.clip(available - cache_eff, 0.0, None)
        if workload.page_cache
        else np.zeros_like(bf)
    )
    page_experts = page_bytes / (layers * e_bytes)
    rc = expert_cache.rank_cache(
        pi, b, cache_experts, a, page_cache_experts_per_layer=page_experts if workload.page_cache else None, **kw
    )
    misses, page_hits, reads = _misses_and_reads(rc, bf, coalesced)
    missed_pairs, page_pairs = layers * misses, layers * page_hits
    dense = model.non_routed_bytes * (1.0 if dense_once else bf)
    return StepWork(
        batch=b,
        assignment=a,
        speed=speed,
        union_pairs=layers * rc.union_per_layer,
        missed_pairs=missed_pairs,
        expert_reads=layers * reads,
        picks_per_token=rc.picks_per_token,
        ssd_bytes=(missed_pairs - page_pairs) * e_bytes,
        # a page-cache hit is a copy out of the page cache: read and write through memory
        mem_bytes=dense + layers * reads * e_bytes + kv_step + 2.0 * page_pairs * e_bytes,
        flops=bf * (model.flops_per_token + ctx * model.attn_flops_per_context_token)
        + np.asarray(extra_flops, dtype=float),
        fabric_bytes=step.fabric_bytes_per_step(model, bf, ranks),
        read_size_bytes=workload.read_size_bytes if workload.read_size_bytes is not None else e_bytes,
        available_bytes=available,
        cache_bytes=cache_eff,
        cache_experts_per_layer=np.minimum(cache_experts, model.experts),
        fits=available >= 0,
        pressured=pressured,
        page_cache_bytes=page_bytes,
        page_hit_pairs=page_pairs,
    )


def evaluate_work(hardware: Hardware, workload: Workload, work: StepWork) -> step.Step:
    """The step in seconds (:func:`moeroof.models.step.evaluate`) of ``work`` on ``hardware``:
    the pressure and reclaim slowdown on the reads, each rank at its speed, the exchange
    (``workload``'s pressure penalty, overlap and exchange overlap)."""
    bf = work.batch.astype(float)
    slowdown = np.where(work.pressured, workload.pressure_penalty, 1.0) * reclaim_slowdown(
        hardware, work.available_bytes, work.cache_bytes
    )
    works = [
        step.RankWork(
            work.ssd_bytes[r],
            work.mem_bytes[r],
            work.flops,
            bf,
            work.read_size_bytes,
            slowdown,
            float(work.speed[r]),
            touched_experts=work.expert_reads[r],
        )
        for r in range(work.ssd_bytes.shape[0])
    ]
    return step.evaluate(
        hardware,
        works,
        overlap=workload.overlap,
        fabric_bytes=work.fabric_bytes,
        fabric_overlapped=workload.fabric_overlapped,
    )


def works_rates(
    hardware: Hardware, workload: Workload, works: Sequence[StepWork]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(net_tok_s, cache_hit_rate)`` of each of ``works`` on ``hardware`` (:func:`evaluate_work`
    with ``workload``'s pressure penalty, overlap and exchange overlap): the works of one shape
    (ranks, speeds, read size) joined along their batch sizes and evaluated as one step — the same
    numbers element by element (every term is per B), one evaluation instead of many."""
    out: list = [None] * len(works)
    shapes: dict[tuple, list[int]] = {}
    for i, w in enumerate(works):
        shapes.setdefault((w.ssd_bytes.shape[0], float(w.read_size_bytes), tuple(w.speed)), []).append(i)
    for idx in shapes.values():
        joined = _joined([works[i] for i in idx], _PRICED_FIELDS)
        net = joined.batch / evaluate_work(hardware, workload, joined).step_seconds
        at = 0
        for i in idx:
            n = works[i].batch.size
            out[i] = (net[at : at + n], works[i].pooled_hit_rate)
            at += n
    return out


def step_breakdown(
    model: MoEModel, hardware: Hardware, workload: Workload, routing: RoutingProbabilities, batch, **kw
) -> StepBreakdown:
    """Build every rank's work at each B (:func:`step_work`, which takes ``kw``) and evaluate the
    step (:func:`evaluate_work`; module docstring).

    ``coalesced=False`` is the ``uncoalesced`` baseline (every token fetches its own experts);
    ``dense_once=False`` reads the dense band once per token instead of once per step (the
    baseline of lever L1); ``assignment`` overrides the partition; ``extra_flops`` (nB,) adds
    work to the compute term (prefill's attention over the prompt).
    """
    return _breakdown(hardware, workload, step_work(model, hardware, workload, routing, batch, **kw))


def _breakdown(hardware: Hardware, workload: Workload, work: StepWork) -> StepBreakdown:
    """The breakdown of ``work``: its fields, its step priced on ``hardware``, the policy."""
    kw = {f.name: getattr(work, f.name) for f in fields(StepWork)}
    return StepBreakdown(**kw, step=evaluate_work(hardware, workload, work), cache_policy=workload.cache_policy)


#: the held share u of what the OS leaves at which the reclaim slowdown stops growing (it
#: diverges at 1: a box that holds every byte it has reclaims nothing)
RECLAIM_MAX_SHARE = 0.99
#: the routing ``moeroof plan`` runs without ``--routing`` (or a fit's): the skew prior
#: (:func:`prior_routing`), as ``moeroof fit-plan``'s
DEFAULT_ROUTING = "prior"


def reclaim_slowdown(hardware: Hardware, available_bytes, cache_bytes) -> np.ndarray:
    """The OS's reclaim work on the reads, ``1 + κ · (u / (1 − u))^n`` (κ =
    ``hardware.reclaim_penalty``, n = ``hardware.reclaim_exponent`` ≥ 1), where ``u`` is the share
    of what the OS leaves (RAM − reserve) that the engine holds — the resident band, the KV and the
    expert cache — capped at :data:`RECLAIM_MAX_SHARE`. Each page a read brings in must first be
    taken from what is free; with the page cache filling the rest that is cheap while most RAM is
    free, and it grows without bound as the held share nears all of it (n = 1: the queueing form
    u/(1 − u); a larger n stays lower while memory is free and steepens near full — both assumed
    shapes, n fitted where the rows tell them apart, ``moeroof fit-plan --fit reclaim,reclaim-shape``):
    so a larger expert cache saves reads and makes each remaining read dearer, and tok/s can rise,
    peak and fall with the cache (mlx-lm#1438). κ = 0: no reclaim work."""
    kappa = float(hardware.reclaim_penalty)
    usable = max(hardware.ram_bytes - hardware.os_reserve_bytes, 1.0)
    held = usable - (np.asarray(available_bytes, dtype=float) - np.asarray(cache_bytes, dtype=float))
    u = np.clip(held / usable, 0.0, RECLAIM_MAX_SHARE)
    n = float(hardware.reclaim_exponent)
    if n == 1.0:  # the queueing form in its own order of operations: the same floats as before n existed
        return 1.0 + kappa * u / (1.0 - u)
    return 1.0 + kappa * (u / (1.0 - u)) ** n


def _per_batch(workload: Workload, b: np.ndarray) -> bool:
    """Whether the partition depends on the batch size (``bytes`` over several ranks): then each
    B is evaluated alone, with the partition of its own step, so no row depends on the grid."""
    return workload.ranks > 1 and workload.partition == "bytes" and b.size > 1


def batch_breakdown(
    model: MoEModel, hardware: Hardware, workload: Workload, routing, b: np.ndarray, **kw
) -> StepBreakdown:
    """:func:`step_breakdown` with the partition of the workload: over the whole grid at once, or
    one B at a time where the partition depends on B (:func:`_per_batch`) or the routing is a
    callable ``B -> RoutingProbabilities`` (a trace sampled with B streams): :func:`batch_works`."""
    return _breakdown(hardware, workload, _joined(batch_works(model, hardware, workload, routing, b, **kw)))


def batch_works(
    model: MoEModel, hardware: Hardware, workload: Workload, routing, b: np.ndarray, **kw
) -> list[StepWork]:
    """:func:`step_work` (``kw``: its ``coalesced``, ``dense_once``) over the whole grid at once,
    or one B at a time where the partition depends on B (:func:`_per_batch`) or the routing is a
    callable ``B -> RoutingProbabilities`` (a trace sampled with B streams), so that no row
    depends on the grid."""
    if not callable(routing) and not _per_batch(workload, b):
        return [step_work(model, hardware, workload, routing, b, **kw)]
    return [
        step_work(model, hardware, workload, routing(int(bi)) if callable(routing) else routing, b[i : i + 1], **kw)
        for i, bi in enumerate(b)
    ]


def step_terms(
    model: MoEModel, hardware: Hardware, workload: Workload, routing: RoutingProbabilities, batch, **kw
) -> dict[str, Any]:
    """The step at each B as plain arrays (for the levers, the bench and notebooks); ``kw``: the
    keywords of :func:`step_work` (``coalesced``, ``dense_once``, …).

    ``terms``: the slowest rank's terms at its speed, plus ``fabric`` with R > 1; ``step_seconds``
    and ``bound`` as :class:`moeroof.models.step.Step`; bytes summed over ranks; ``union`` and
    ``misses`` per layer, summed over ranks.
    """
    return _as_arrays(step_breakdown(model, hardware, workload, routing, batch, **kw), model)


def _as_arrays(br: StepBreakdown, model: MoEModel) -> dict[str, Any]:
    st = br.step
    slow = st.slowest_rank
    cols = np.arange(br.batch.size)
    terms = {k: v[slow, cols] / br.speed[slow] for k, v in st.terms.items()}
    if br.ranks > 1:
        terms["fabric"] = st.fabric_seconds
    return {
        "batch": br.batch,
        "terms": terms,
        "step_seconds": st.step_seconds,
        "bound": st.bound,
        "ssd_bytes": br.ssd_bytes.sum(axis=0),
        "mem_bytes": br.mem_bytes[slow, cols],
        "union": br.union_pairs.sum(axis=0) / model.moe_layers,
        "misses": br.missed_pairs.sum(axis=0) / model.moe_layers,
        "cache_experts": br.cache_experts_per_layer,
        "fits": br.fits,
        "breakdown": br,
    }


@dataclass(frozen=True)
class Plan:
    """The step model evaluated at each batch size. Arrays have shape (len(batch),); per-rank
    arrays (R, nB). Where a step does not fit in RAM (``fits_in_memory`` False) its rates
    (``per_agent_tok_s``, ``net_tok_s``), ``coalescing_ratio``, the uncoalesced baseline's rate
    and every multiple are NaN: no number that would only hold if the step ran. ``step_seconds``
    and ``terms`` keep what the model computes (what it would take), for diagnosis."""

    batch: np.ndarray
    step_seconds: np.ndarray
    terms: Mapping[str, np.ndarray]
    bound: tuple[str, ...]
    per_agent_tok_s: np.ndarray
    net_tok_s: np.ndarray
    ssd_bytes_per_step: np.ndarray
    ssd_bytes_per_token: np.ndarray
    mem_bytes_per_step: np.ndarray
    union_per_layer: np.ndarray
    misses_per_layer: np.ndarray
    coalescing_ratio: np.ndarray
    cache_experts_per_layer: np.ndarray
    fits_in_memory: np.ndarray
    baselines: Mapping[str, Mapping[str, np.ndarray]]
    transitions: tuple[dict, ...]
    provenance: Mapping[str, Any]
    overlap: str
    model: str
    hardware: str
    routing: str
    notes: tuple[str, ...] = ()
    ranks: int = 1
    partition: str = "lpt"
    cache_policy: str = "lru"
    cache_label: str = ""
    cache_hit_rate: np.ndarray = field(default_factory=lambda: np.zeros(0))
    per_rank_step_seconds: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    per_rank_cache_hit_rate: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    per_rank_ssd_bytes_per_step: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    fabric_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    assignment: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    page_cache_bytes: np.ndarray | None = None
    page_cache_hit_share: np.ndarray | None = None
    link_name: str = "ssd"
    infeasible_reason: tuple[str | None, ...] = ()
    #: the expert cache each rank has at each B (nB,): the workload's, capped at what RAM leaves
    cache_bytes_per_rank: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON contract: lists of floats, names for the bound terms; with R > 1,
        ``cache_hit_rate`` and ``gib_streamed_per_step`` are per rank (R lists over B).

        ``bound`` keeps the step model's term names (``ssd`` for the streaming tier);
        ``link_name`` says what that tier is on this box (``ssd``, ``pcie``, ``host-link``,
        ``page-cache``). A step whose resident set does not fit in RAM has no number that would
        only hold if it ran: its step seconds, tok/s, terms, bound, B·K/U and multiples are
        ``null`` (the uncoalesced baseline's tok/s too: the same box at that B), and its reason
        is in ``infeasible_reason`` (null when it fits). ``cache_gib``: each B's expert cache.
        """

        def f(a):
            return [float(x) for x in np.asarray(a, dtype=float)]

        ok = [bool(x) for x in self.fits_in_memory]

        def mult(a):
            return [float(x) if fit else None for x, fit in zip(np.asarray(a, dtype=float), ok)]

        gib = self.per_rank_ssd_bytes_per_step / 2**30
        per_rank = self.ranks > 1
        feasible_net = {"uncoalesced"}  # the same box at B: no rate where B does not fit
        return {
            **{k: getattr(self, k) for k in ("model", "hardware", "routing", "overlap", "ranks")},
            "partition": self.partition if per_rank else None,
            "cache_policy": self.cache_policy,
            "cache": self.cache_label,
            "batch": [int(b) for b in self.batch],
            **{k: mult(getattr(self, k)) for k in ("step_seconds", "per_agent_tok_s", "net_tok_s")},
            "bound": [t if fit else None for t, fit in zip(self.bound, ok)],
            "link_name": self.link_name,
            "terms_seconds": {name: mult(v) for name, v in self.terms.items()},
            "per_rank_step_seconds": [mult(r) for r in self.per_rank_step_seconds],
            "cache_gib": f(self.cache_bytes_per_rank / 2**30),
            "cache_hit_rate": [f(r) for r in self.per_rank_cache_hit_rate] if per_rank else f(self.cache_hit_rate),
            "gib_streamed_per_step": [f(r) for r in gib] if per_rank else f(gib[0]),
            **{k: f(getattr(self, k)) for k in _PER_B_FIELDS},
            "coalescing_ratio": mult(self.coalescing_ratio),
            "coalescing_baseline": "uncoalesced",
            "cache_experts_per_layer": f(self.cache_experts_per_layer),
            "fits_in_memory": [bool(x) for x in self.fits_in_memory],
            "baselines": {
                name: {
                    k: mult(v) if k == "multiple" or (k == "net_tok_s" and name in feasible_net) else f(v)
                    for k, v in d.items()
                }
                for name, d in self.baselines.items()
            },
            "infeasible_reason": list(self.infeasible_reason) or [None] * len(ok),
            "transitions": [dict(t) for t in self.transitions],
            "page_cache_gib": None if self.page_cache_bytes is None else f(self.page_cache_bytes / 2**30),
            "page_cache_hit_share": None if self.page_cache_hit_share is None else f(self.page_cache_hit_share),
            "provenance": dict(self.provenance),
            "notes": list(self.notes),
        }


#: :meth:`Plan.to_dict`'s plain per-B lists, in its order
_PER_B_FIELDS = (
    "ssd_bytes_per_step",
    "ssd_bytes_per_token",
    "mem_bytes_per_step",
    "union_per_layer",
    "misses_per_layer",
)


def transitions(batch: np.ndarray, bound: tuple[str, ...]) -> tuple[dict, ...]:
    """Where the binding term changes along the batch grid: ``{from, to, batch}`` with
    ``batch`` the first B of the new regime (B*)."""
    return tuple(
        {"from": bound[i - 1], "to": bound[i], "batch": int(batch[i])}
        for i in range(1, len(bound))
        if bound[i] != bound[i - 1]
    )


def input_provenance(
    model: MoEModel, hardware: Hardware, routing_provenance: str, ranks: int, *, attention: bool | None = None
) -> dict:
    """The provenance of every preset field and input the step model uses: ``inputs`` (name →
    ``witnessed``/``projected``/``assumed``), ``non_witnessed`` and ``result`` (``projected`` when
    any input is not witnessed). ``attention``: include the attention FLOP field (default: when
    the model has it)."""
    model_keys = "experts top_k moe_layers expert_bytes non_routed_bytes kv_bytes_per_token flops_per_token".split()
    if model.attn_flops_per_context_token if attention is None else attention and model.attn_flops_per_context_token:
        model_keys.append("attn_flops_per_context_token")
    hw_keys = (
        "ram_bytes bw_mem_bytes_per_s flops_per_s ssd_read_size_bytes bw_ssd_bytes_per_s engine_seconds_per_step "
        "engine_seconds_per_agent_token"
    ).split()
    if hardware.os_reserve_bytes or "os_reserve_bytes" in hardware.provenance:
        # a preset that leaves it out has it at 0, tagged assumed: never silently
        hw_keys.append("os_reserve_bytes")
    if ranks > 1:
        hw_keys.append("bw_link_bytes_per_s")
        model_keys.append("hidden_size")
    inputs = {f"model.{k}": model.provenance.get(k, "assumed") for k in model_keys}
    inputs.update({f"hardware.{k}": hardware.provenance.get(k, "assumed") for k in hw_keys})
    inputs["routing"] = routing_provenance
    non_witnessed = sorted(k for k, v in inputs.items() if v != "witnessed")
    return {
        "result": "projected" if non_witnessed else "witnessed-inputs",
        "non_witnessed": non_witnessed,
        "inputs": inputs,
    }


def _provenance(
    model: MoEModel, hardware: Hardware, workload: Workload, routing: RoutingProbabilities, ranks: int
) -> dict:
    out = input_provenance(model, hardware, routing.provenance, ranks)
    if ranks > 1 and workload.partition == "weighted" and workload.rank_speed is None:
        out["inputs"]["rank_speed"] = "assumed"
        out["non_witnessed"] = sorted(k for k, v in out["inputs"].items() if v != "witnessed")
        out["result"] = "projected"
    return out


def plan_rates(
    model: MoEModel, hardware: Hardware, workload: Workload, routing, batch
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(batch, net_tok_s, cache_hit_rate)`` of :func:`plan` alone: the same step, computed the
    same way, without the baselines, notes and provenance (two more steps per call) — what a fit
    asks of the plan hundreds of times."""
    b = as_batch(batch)
    rates = works_rates(hardware, workload, batch_works(model, hardware, workload, routing, b))
    return b, np.concatenate([r[0] for r in rates]), np.concatenate([r[1] for r in rates])


def _infeasible_reasons(model, hardware, workload, b, br, notes: list[str]) -> list[str | None]:
    """Why each batch size's step does not fit in RAM (None where it does); a note from the
    first that does not."""
    g = 2.0**30
    left = hardware.ram_bytes - hardware.os_reserve_bytes
    _, kv_all = ram_left_bytes(
        model, hardware, b, context_tokens=workload.context_tokens, shared_prefix_tokens=workload.shared_prefix_tokens
    )
    reasons: list[str | None] = [
        None
        if fits
        else f"dense band {model.non_routed_bytes / g:.1f} GiB + KV of B={int(bi)} {float(kv) / g:.1f} GiB exceed the "
        f"{left / g:.1f} GiB RAM leaves after the OS reserve"
        for bi, fits, kv in zip(b, br.fits, kv_all)
    ]
    if not np.all(br.fits):
        first = int(b[np.argmin(br.fits)])
        notes.append(
            f"from B={first} the dense band and the batch's KV cache exceed RAM: those steps are infeasible as "
            "modelled and get no multiple"
        )
    return reasons


def _plan_notes(hardware, workload, routing, route_at, b, br, link: str) -> list[str]:
    """What a plan must say of its streaming tier, its expert cache and the page cache."""
    notes: list[str] = []
    if link != "ssd":
        notes.append(
            f"on {hardware.name} the streaming tier is {link}: the 'ssd' term (bound 'ssd' in JSON) is the "
            f"{link} transfer"
        )
    if np.any(br.pressured & br.fits):
        notes.append(
            "the requested expert cache does not fit beside the resident set: it was capped at what RAM leaves"
        )
    if routing.trace is not None and workload.cache_policy != "static":
        on_trace = np.array([expert_cache.usable_trace_batch(route_at(int(bb)).trace, int(bb)) for bb in b])
        if on_trace.any():
            shown = ", ".join(str(int(bb)) for bb in b[on_trace])
            notes.append(
                f"cache simulated on the trace's own streams at B = {shown} (over the steps where its first B "
                "streams are all live; its correlations included, the union measured there)"
                + ("; elsewhere on traces drawn from its histogram (independent tokens)" if not on_trace.all() else "")
            )
        else:
            notes.append(
                "the trace has too few steps with B streams live together at every B asked: the cache ran on "
                "traces drawn from its histogram (independent tokens)"
            )
    if workload.page_cache:
        notes.append(
            "experts read through the OS page cache: it gets what RAM leaves after the reserve, the resident band, "
            "the KV and the expert cache, and serves the misses it still holds (a copy through memory)"
        )
    if workload.cache_policy == "static":
        notes.append(
            "cache: a hot set pinned from the true routing probabilities — an oracle no engine has; "
            "a simulated policy (lru, s3fifo, …) is what an engine sees"
        )
    return notes


def plan(model: MoEModel, hardware: Hardware, workload: Workload, routing, batch) -> Plan:
    """Evaluate the step model and every named baseline at each batch size (module docstring).

    ``routing``: a :class:`RoutingProbabilities`, or a callable ``B -> RoutingProbabilities``
    for a routing that depends on B (a trace sampled from knobs with B streams); each row then
    runs on its own (label, provenance and notes are the largest B's)."""
    b = as_batch(batch)
    route_at = routing if callable(routing) else (lambda _b: routing)
    per_b = routing
    routing = route_at(int(b.max()))
    cur = _as_arrays(batch_breakdown(model, hardware, workload, per_b, b), model)
    step_s = cur["step_seconds"]
    net = b / step_s
    unc = batch_breakdown(model, hardware, workload, per_b, b, coalesced=False)
    # the single agent on the same boxes, with the partition of its own step: the same for every row
    one = batch_breakdown(model, hardware, workload, per_b, np.array([1], dtype=np.int64))
    br: StepBreakdown = cur["breakdown"]
    # a step that does not fit in RAM has no rate and no multiple: NaN, so that no curve, best
    # or multiple is ever read off it (plots stop at the boundary by themselves)
    runs = np.asarray(br.fits, dtype=bool)
    net = np.where(runs, net, np.nan)
    single_fits = bool(np.asarray(one.fits, dtype=bool)[0])
    net_single = np.full(b.size, 1.0 / one.step.step_seconds[0] if single_fits else np.nan)
    unc_net = np.where(runs, b / unc.step.step_seconds, np.nan)
    baselines = {
        "uncoalesced": {"net_tok_s": unc_net, "multiple": net / unc_net},
        "single": {"net_tok_s": net_single, "multiple": net / net_single},
        "independent-boxes": {"net_tok_s": b * net_single, "multiple": net / (b * net_single)},
    }
    notes = list(routing.notes)
    reasons = _infeasible_reasons(model, hardware, workload, b, br, notes)
    link = getattr(hardware, "link", "ssd")
    notes += _plan_notes(hardware, workload, routing, route_at, b, br, link)
    st = br.step
    return Plan(
        batch=b,
        step_seconds=step_s,
        terms=cur["terms"],
        bound=st.bound,
        per_agent_tok_s=np.where(runs, 1.0 / step_s, np.nan),
        net_tok_s=net,
        ssd_bytes_per_step=cur["ssd_bytes"],
        ssd_bytes_per_token=cur["ssd_bytes"] / b,
        mem_bytes_per_step=cur["mem_bytes"],
        union_per_layer=cur["union"],
        misses_per_layer=cur["misses"],
        coalescing_ratio=np.where(runs, b * model.top_k / cur["union"], np.nan),
        cache_experts_per_layer=br.cache_experts_per_layer,
        fits_in_memory=br.fits,
        baselines=baselines,
        transitions=transitions(b, st.bound),
        provenance=_provenance(model, hardware, workload, routing, br.ranks),
        overlap=workload.overlap,
        model=model.name,
        hardware=hardware.name,
        routing=routing.label,
        notes=tuple(notes),
        ranks=br.ranks,
        partition=workload.partition,
        cache_policy=workload.cache_policy,
        cache_label=expert_cache.policy_label(workload.cache_policy),
        cache_hit_rate=br.pooled_hit_rate,
        per_rank_step_seconds=st.rank_seconds,
        per_rank_cache_hit_rate=br.cache_hit_rate,
        per_rank_ssd_bytes_per_step=br.ssd_bytes,
        fabric_seconds=st.fabric_seconds,
        assignment=br.assignment,
        page_cache_bytes=br.page_cache_bytes if workload.page_cache else None,
        page_cache_hit_share=_page_share(br) if workload.page_cache else None,
        link_name=link,
        infeasible_reason=tuple(reasons),
        cache_bytes_per_rank=np.asarray(br.cache_bytes, dtype=float),
    )


def _page_share(br: StepBreakdown) -> np.ndarray:
    """Of the expert cache's misses (all ranks), the share the OS page cache served."""
    missed = br.missed_pairs.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(missed > 0, br.page_hit_pairs.sum(axis=0) / missed, 0.0)


def multiple_thresholds(p: Plan, thresholds=(4.0, 10.0)) -> list[dict[str, Any]]:
    """For each baseline: the largest multiple over the batch grid, where it occurs, and the
    first B at which each threshold is reached among feasible steps (None: never)."""
    rows = []
    ok = np.asarray(p.fits_in_memory, dtype=bool)
    for name, d in p.baselines.items():
        mult = np.where(ok, d["multiple"], np.nan)
        row = {
            "baseline": name,
            "max_multiple": float(np.nanmax(mult)) if ok.any() else float("nan"),
            "at_batch": int(p.batch[int(np.nanargmax(mult))]) if ok.any() else None,
        }
        for t in thresholds:
            hit = np.flatnonzero(mult >= t)
            row[f"first_batch_at_{t:g}x"] = int(p.batch[hit[0]]) if hit.size else None
        rows.append(row)
    return rows


#: the largest batch the admission search tries: beyond it the search says it hit a bound
MAX_ADMISSION_BATCH = 4096


def ram_batch_limit(model: MoEModel, hardware: Hardware, workload: Workload) -> int | None:
    """The largest B whose resident set fits in RAM (the dense band and the KV of B agents
    within RAM − OS reserve: :func:`step_breakdown`'s ``fits``), 0 when not even one agent fits,
    None when the KV does not grow with B (no RAM bound)."""
    p = workload.shared_prefix_tokens
    per_agent = (workload.context_tokens - p) * model.kv_bytes_per_token

    def fits(b: int) -> bool:  # the step's own expression, so the edge agrees to the byte
        left_b, _ = ram_left_bytes(model, hardware, [b], context_tokens=workload.context_tokens, shared_prefix_tokens=p)
        return bool(left_b[0] >= 0)

    if per_agent <= 0:
        return None if fits(1) else 0
    # RAM's bound on B in closed form, one past it at most where the step's own floats round up
    left = hardware.ram_bytes - hardware.os_reserve_bytes - model.non_routed_bytes - p * model.kv_bytes_per_token
    return _largest_passing(fits, max(int(left // per_agent), 0) + 2)


def _largest_passing(passes: Callable[[int], bool], top: int) -> int:
    """The largest B in 1..``top`` that ``passes`` (0: not even B = 1), for a test that holds
    below some B and fails from there: doubling from 1 to the first failure, then bisection."""
    if top < 1 or not passes(1):
        return 0
    lo, probe = 1, 2
    while probe <= top and passes(probe):
        lo, probe = probe, probe * 2
    hi: int | None = probe if probe <= top else None  # the first B seen to fail
    if hi is None and lo < top:
        if passes(top):
            lo = top
        else:
            hi = top
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo


def admission_search(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing,
    min_per_agent_tok_s: float,
    *,
    max_batch: int = MAX_ADMISSION_BATCH,
) -> dict[str, Any]:
    """Admission control searched over B itself, not over a grid: the largest
    B ≤ ``max_batch`` whose resident set fits in RAM and whose per-agent tok/s is at least
    ``min_per_agent_tok_s``, with the reason B + 1 is refused.

    The per-agent rate 1/T_step(B) falls as B grows (more KV, more distinct experts), so the
    search doubles B from 1 until a step fails and bisects between the last that passed and the
    first that failed; each B is evaluated alone (the step at ``[B]``), so the answer
    does not depend on any grid. ``routing``: a :class:`RoutingProbabilities`, or a callable
    ``B -> RoutingProbabilities`` (a routing sampled with B streams).

    Returns ``admit_batch`` (None when not even B = 1 qualifies), its per-agent and net tok/s,
    coalescing ratio (against ``uncoalesced``), SSD bytes per agent-token and cache, and
    ``next_batch`` / ``next_fails`` (``rate``: B + 1 is below the floor, its rate in
    ``next_per_agent_tok_s``; ``ram``: B + 1 does not fit; ``bound``: the search stopped at
    ``max_batch`` and larger batches were not tried), ``reason`` in words, ``hit_bound`` and the
    batches ``evaluated``.
    """
    x = float(min_per_agent_tok_s)
    if not np.isfinite(x) or x < 0:
        raise ValueError(f"the per-agent tok/s floor must be a finite number >= 0, got {min_per_agent_tok_s!r}")
    if int(max_batch) < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
    route = routing if callable(routing) else (lambda b: routing)
    ram = ram_batch_limit(model, hardware, workload)
    top = int(max_batch) if ram is None else min(int(max_batch), ram)
    rates: dict[int, float] = {}

    def rate(b: int) -> float:
        if b not in rates:
            br = batch_breakdown(model, hardware, workload, route(b), np.array([b], dtype=np.int64))
            rates[b] = float(1.0 / br.step.step_seconds[0])  # as Plan.per_agent_tok_s, to the bit
        return rates[b]

    out: dict[str, Any] = {"min_per_agent_tok_s": x, "admit_batch": None, "search_bound": int(max_batch)}
    lo = _largest_passing(lambda b: rate(b) >= x, top)
    nxt = lo + 1
    if nxt > top and (ram is None or nxt <= ram):
        fails, why = "bound", f"the search stopped at B = {int(max_batch)}: larger batches were not tried"
    elif ram is not None and nxt > ram:
        fails = "ram"
        why = (
            f"B = {nxt} does not fit in RAM (the dense band and the KV of {nxt} agents at "
            f"{workload.context_tokens} tokens exceed what the OS reserve leaves)"
        )
    else:
        fails = "rate"
        why = f"B = {nxt} gets {rate(nxt):.3g} tok/s per agent, below {x:g}"
        out["next_per_agent_tok_s"] = rate(nxt)
    out.update(next_batch=nxt, next_fails=fails, reason=why, hit_bound=fails == "bound")
    if lo >= 1:
        p = plan(model, hardware, workload, route(lo), [lo])
        out.update(
            admit_batch=lo,
            per_agent_tok_s=float(p.per_agent_tok_s[0]),
            net_tok_s=float(p.net_tok_s[0]),
            coalescing_ratio=float(p.coalescing_ratio[0]),
            coalescing_baseline="uncoalesced",
            ssd_bytes_per_token=float(p.ssd_bytes_per_token[0]),
            cache_bytes=float(p.cache_bytes_per_rank[0]),
        )
    out["evaluated"] = sorted(rates)
    return out
