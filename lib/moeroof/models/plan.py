"""The decode-step roofline: net tokens/sec of B agents on a box that streams MoE experts (SPEC §2).

Seed 000 writes ``t_agent(B) = max(SSD_term, RAM_term, FLOP_term)`` but divides only its SSD
term by B, mixing per-step and per-token quantities. Here everything is per *step* (one token
for each of the B agents), and the per-token numbers are derived from it::

    T_step(B) = combine( ssd_bytes(B) / BW_ssd(read size),
                         mem_bytes(B) / BW_mem,
                         flops(B)     / FLOPS,
                         [fabric_bytes(B) / BW_link   for split engines] )
      ssd_bytes(B) = Σ_ℓ misses_ℓ(B) · e               experts streamed this step, after the cache
      mem_bytes(B) = NR + Σ_ℓ U_ℓ(B) · e + B · ctx · kv  dense band once (L1), touched experts, KV
      flops(B)     = B · (F_token + ctx · F_attn)
      combine      = max (perfect overlap) or sum (serial)
    per-agent tok/s = 1 / T_step,   net tok/s = B / T_step,   SSD bytes per agent-token = ssd_bytes / B

``U_ℓ(B) = Σ_i [1 − (1 − π_i)^B]`` is the independent-token union (:mod:`moeroof.models.union`). The
expert cache is a static hot set per layer until the cache simulator lands: a cache of C
experts per layer holds the C most popular, and ``misses_ℓ(B) = Σ_{i ∉ hot} [1 − (1 − π_i)^B]``
(fractional C interpolates). Memory pressure: the cache gets what RAM leaves after the OS
reserve, the dense band and the batch's KV cache; a step whose resident set does not fit is
flagged, and an optional ``pressure_penalty`` slows the SSD when the requested cache does not
fit (mlx-lm#1438: a cache that starves the page cache makes decode slower).

Baselines (SPEC §2), each returned with its name:

- ``uncoalesced`` — same box and batch, dense band batched, but every token fetches its own
  routed experts: SSD bytes ``B · Σ_ℓ misses_ℓ(1) · e`` (with no cache, ``B·K·e`` per layer) and
  expert reads ``B · K · e`` per layer. The multiple against it is the coalescing lever L2.
- ``single`` — the same box serving one agent (B = 1).
- ``independent-boxes`` — B boxes each serving one agent: ``B × net(1)`` (B times the hardware).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from moeroof.data.presets import Hardware, MoEModel
from moeroof.models.routing import inclusion_probabilities, zipf_weights
from moeroof.models.union import as_batch, power_sums

__all__ = [
    "TERMS",
    "BASELINES",
    "Workload",
    "Routing",
    "Plan",
    "routing_from_spec",
    "plan",
    "step_terms",
    "transitions",
    "multiple_thresholds",
]

TERMS = ("ssd", "memory", "compute", "fabric")
BASELINES = ("uncoalesced", "single", "independent-boxes")


@dataclass(frozen=True)
class Workload:
    """What the user runs: context per agent, expert cache, overlap and engine choices (SI).

    ``read_size_bytes``: the SSD read granularity (None: one expert per read; an engine that
    faults pages reads at the page size — moe-fit's 20× lesson). ``ranks > 1`` splits the
    experts evenly over ranks joined by ``Hardware.bw_link_bytes_per_s``; each token's hidden
    state goes to the remote ranks and back every MoE layer; ``fabric_overlapped`` puts that
    term under the ``combine`` or adds it after. ``shared_prefix_tokens`` (lever L3): the first
    P tokens of every agent's context are one shared prefix whose KV is stored and read once per
    step for the whole batch — KV bytes ``(P + B·(ctx − P))·kv`` instead of ``B·ctx·kv``;
    attention FLOP are unchanged (every agent still attends over the whole prefix).
    """

    context_tokens: int = 4096
    shared_prefix_tokens: int = 0
    cache_bytes: float = 0.0
    overlap: str = "max"
    read_size_bytes: float | None = None
    ranks: int = 1
    fabric_overlapped: bool = True
    pressure_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.overlap not in ("max", "sum"):
            raise ValueError(f"overlap must be 'max' or 'sum', got {self.overlap!r}")
        if self.context_tokens < 0 or self.cache_bytes < 0:
            raise ValueError("context_tokens and cache_bytes must be >= 0")
        if not 0 <= self.shared_prefix_tokens <= self.context_tokens:
            raise ValueError("shared_prefix_tokens must be in [0, context_tokens]")
        if self.read_size_bytes is not None and not self.read_size_bytes > 0:
            raise ValueError("read_size_bytes must be > 0")
        if int(self.ranks) != self.ranks or self.ranks < 1:
            raise ValueError("ranks must be a positive integer")
        if not self.pressure_penalty >= 1.0:
            raise ValueError("pressure_penalty must be >= 1 (1: none)")


@dataclass(frozen=True)
class Routing:
    """Inclusion probabilities per layer shape, (layers, E), Σ_i π_i = K in each row.

    The rows stand for the model's MoE layers in equal shares (a histogram with fewer layers
    than the model is read as a sample of layer shapes). ``provenance`` is the routing input's
    tag: uniform and Zipf are assumptions; a histogram or trace carries its own.
    """

    pi: np.ndarray
    label: str
    provenance: str
    notes: tuple[str, ...] = ()


def routing_from_spec(spec: str, model: MoEModel) -> Routing:
    """``uniform``, ``zipf:S`` or a path to a histogram ``.csv`` / trace ``.npz``/``.npy``
    (absolute, relative to the working directory, or relative to ``data/``)."""
    e, k = model.experts, model.top_k
    if spec == "uniform":
        return Routing(np.full((1, e), k / e), "uniform", "assumed")
    if spec.startswith("zipf:"):
        try:
            s = float(spec.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"routing {spec!r}: expected zipf:S with a number S") from None
        if not np.isfinite(s) or s < 0:
            raise ValueError(f"routing {spec!r}: Zipf exponent must be >= 0")
        pi = inclusion_probabilities(zipf_weights(e, s), k)[None, :]
        return Routing(pi, f"Zipf s={s:g}", "assumed")
    from moeroof.core.paths import resolve_data
    from moeroof.data.io import Histogram, load_any
    from moeroof.models.routing import histogram_from_trace

    path = resolve_data(spec)
    data = load_any(path)
    if data.experts != e or data.top_k != k:
        raise ValueError(
            f"routing {path}: E={data.experts}, K={data.top_k} do not match model {model.name} (E={e}, K={k})"
        )
    notes = []
    if isinstance(data, Histogram):
        counts, tokens = data.counts, data.tokens
        if data.layers_summed:
            notes.append(
                "the histogram is summed over layers: per-layer skew is averaged away and "
                "the union is overstated (see union_curve)"
            )
            tokens = tokens  # summed incidence over layers·T: π̄ = count / (layers·T)
    else:
        arr = np.asarray(data.topk)
        counts = histogram_from_trace(arr, e)
        tokens = (arr >= 0).all(axis=-1).sum(axis=(0, 1))
    pi = counts / np.maximum(np.asarray(tokens, dtype=float), 1.0)[:, None]
    pi = pi * (k / np.maximum(pi.sum(axis=1, keepdims=True), 1e-300))
    prov = data.meta.get("provenance", "projected")
    prov = "witnessed" if prov == "witnessed" else "projected"
    return Routing(np.clip(pi, 0.0, 1.0), f"{data.meta.get('model', path.name)} ({path.name})", prov, tuple(notes))


@dataclass(frozen=True)
class Plan:
    """The roofline evaluated at each batch size. Arrays have shape (len(batch),)."""

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

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON contract (issue 3): lists of floats, names for the bound terms."""

        def f(a):
            return [float(x) for x in np.asarray(a, dtype=float)]

        return {
            "model": self.model,
            "hardware": self.hardware,
            "routing": self.routing,
            "overlap": self.overlap,
            "batch": [int(b) for b in self.batch],
            "step_seconds": f(self.step_seconds),
            "per_agent_tok_s": f(self.per_agent_tok_s),
            "net_tok_s": f(self.net_tok_s),
            "bound": list(self.bound),
            "terms_seconds": {name: f(v) for name, v in self.terms.items()},
            "ssd_bytes_per_step": f(self.ssd_bytes_per_step),
            "ssd_bytes_per_token": f(self.ssd_bytes_per_token),
            "mem_bytes_per_step": f(self.mem_bytes_per_step),
            "union_per_layer": f(self.union_per_layer),
            "misses_per_layer": f(self.misses_per_layer),
            "coalescing_ratio": f(self.coalescing_ratio),
            "coalescing_baseline": "uncoalesced",
            "cache_experts_per_layer": f(self.cache_experts_per_layer),
            "fits_in_memory": [bool(x) for x in self.fits_in_memory],
            "baselines": {name: {k: f(v) for k, v in d.items()} for name, d in self.baselines.items()},
            "transitions": [dict(t) for t in self.transitions],
            "provenance": dict(self.provenance),
            "notes": list(self.notes),
        }


def _hot_set_misses(pi: np.ndarray, cache_experts: np.ndarray, batch: np.ndarray):
    """Union and misses per layer shape for a static hot set of ``cache_experts`` per layer.

    ``pi`` (H, E); ``cache_experts`` (nB,) possibly fractional (linear between whole
    experts); ``batch`` (nB,). Returns (U (H, nB), misses (H, nB)) with
    ``misses = Σ_{rank ≥ C} [1 − (1 − π)^B]``. The tail power sums go through
    :func:`moeroof.models.union.power_sums`, grouped by cache size (one group unless RAM pressure makes
    the cache shrink with B).
    """
    h, e = pi.shape
    x = 1.0 - (-np.sort(-pi, axis=1))  # hottest expert first
    union = e - power_sums(x, batch)
    c = np.clip(np.asarray(cache_experts, dtype=float), 0.0, e)
    lo = np.floor(c).astype(int)
    frac = c - lo

    def misses_from(start: np.ndarray) -> np.ndarray:
        out = np.zeros((h, batch.size))
        for s in np.unique(start):
            sel = start == s
            if s < e:
                out[:, sel] = (e - s) - power_sums(x[:, s:], batch[sel])
        return out

    misses = misses_from(lo)
    if np.any(frac > 0):
        hi = np.minimum(lo + 1, e)
        misses = (1 - frac) * misses + frac * misses_from(hi)
    return union, misses


def step_terms(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: Routing,
    batch,
    *,
    coalesced: bool = True,
    dense_once: bool = True,
) -> dict[str, np.ndarray]:
    """Per-step bytes, FLOP and the four time terms at each B (the body of :func:`plan`).

    ``coalesced=False`` is the ``uncoalesced`` baseline (every token fetches its own experts);
    ``dense_once=False`` reads the dense band once per token instead of once per step (the
    baseline of lever L1).
    """
    b = as_batch(batch)
    bf = b.astype(float)
    e_bytes = model.expert_bytes
    layers = model.moe_layers
    p = workload.shared_prefix_tokens
    kv_step = (p + bf * (workload.context_tokens - p)) * model.kv_bytes_per_token
    dense = model.non_routed_bytes * (1.0 if dense_once else bf)
    available = hardware.ram_bytes - hardware.os_reserve_bytes - model.non_routed_bytes - kv_step
    cache_eff = np.clip(np.minimum(workload.cache_bytes, available), 0.0, None)
    pressured = workload.cache_bytes > available
    fits = available >= 0
    cache_experts = np.minimum(cache_eff / (layers * e_bytes), model.experts)
    union, misses = _hot_set_misses(routing.pi, cache_experts, b)
    union, misses = union.mean(axis=0), misses.mean(axis=0)
    expert_reads = union
    if not coalesced:
        # each token fetches its own misses: B × misses(1) with the same cache
        misses = _hot_set_misses(routing.pi, cache_experts, np.ones_like(b))[1].mean(axis=0) * bf
        expert_reads = model.top_k * bf
    read_size = workload.read_size_bytes if workload.read_size_bytes is not None else e_bytes
    bw_ssd = hardware.ssd_bandwidth(read_size)
    ssd_bytes = layers * misses * e_bytes
    mem_bytes = dense + layers * expert_reads * e_bytes + kv_step
    flops = bf * (model.flops_per_token + workload.context_tokens * model.attn_flops_per_context_token)
    ssd_s = ssd_bytes / bw_ssd * np.where(pressured, workload.pressure_penalty, 1.0)
    terms = {
        "ssd": ssd_s,
        "memory": mem_bytes / hardware.bw_mem_bytes_per_s,
        "compute": flops / hardware.flops_per_s,
    }
    if workload.ranks > 1 and hardware.bw_link_bytes_per_s:
        hidden = model.hidden_size or 0
        remote = (workload.ranks - 1) / workload.ranks
        fabric_bytes = 2.0 * bf * layers * hidden * model.activation_bytes * remote
        terms["fabric"] = fabric_bytes / hardware.bw_link_bytes_per_s
    return {
        "batch": b,
        "terms": terms,
        "ssd_bytes": ssd_bytes,
        "mem_bytes": mem_bytes,
        "union": union,
        "misses": misses,
        "cache_experts": cache_experts,
        "fits": fits,
    }


def _combine(terms: Mapping[str, np.ndarray], workload: Workload) -> tuple[np.ndarray, tuple[str, ...]]:
    names = [n for n in TERMS if n in terms]
    inner = [n for n in names if not (n == "fabric" and not workload.fabric_overlapped)]
    stack = np.stack([terms[n] for n in inner])
    step = stack.max(axis=0) if workload.overlap == "max" else stack.sum(axis=0)
    if "fabric" in terms and not workload.fabric_overlapped:
        step = step + terms["fabric"]
    all_stack = np.stack([terms[n] for n in names])
    bound = tuple(names[i] for i in all_stack.argmax(axis=0))
    return step, bound


def transitions(batch: np.ndarray, bound: tuple[str, ...]) -> tuple[dict, ...]:
    """Where the binding term changes along the batch grid: ``{from, to, batch}`` with
    ``batch`` the first B of the new regime (B*)."""
    out = []
    for i in range(1, len(bound)):
        if bound[i] != bound[i - 1]:
            out.append({"from": bound[i - 1], "to": bound[i], "batch": int(batch[i])})
    return tuple(out)


def _provenance(model: MoEModel, hardware: Hardware, workload: Workload, routing: Routing, used_fabric: bool) -> dict:
    model_keys = [
        "experts",
        "top_k",
        "moe_layers",
        "expert_bytes",
        "non_routed_bytes",
        "kv_bytes_per_token",
        "flops_per_token",
    ]
    if model.attn_flops_per_context_token:
        model_keys.append("attn_flops_per_context_token")
    hw_keys = ["ram_bytes", "bw_mem_bytes_per_s", "flops_per_s", "ssd_read_size_bytes", "bw_ssd_bytes_per_s"]
    if hardware.os_reserve_bytes:
        hw_keys.append("os_reserve_bytes")
    if used_fabric:
        hw_keys.append("bw_link_bytes_per_s")
        model_keys.append("hidden_size")
    inputs = {f"model.{k}": model.provenance.get(k, "assumed") for k in model_keys}
    inputs.update({f"hardware.{k}": hardware.provenance.get(k, "assumed") for k in hw_keys})
    inputs["routing"] = routing.provenance
    non_witnessed = sorted(k for k, v in inputs.items() if v != "witnessed")
    return {
        "result": "projected" if non_witnessed else "witnessed-inputs",
        "non_witnessed": non_witnessed,
        "inputs": inputs,
    }


def plan(model: MoEModel, hardware: Hardware, workload: Workload, routing: Routing, batch) -> Plan:
    """Evaluate the step roofline and every named baseline at each batch size (module docstring)."""
    b = as_batch(batch)
    cur = step_terms(model, hardware, workload, routing, b)
    step, bound = _combine(cur["terms"], workload)
    net = b / step
    unc = step_terms(model, hardware, workload, routing, b, coalesced=False)
    unc_step, _ = _combine(unc["terms"], workload)
    one = step_terms(model, hardware, workload, routing, [1])
    one_step, _ = _combine(one["terms"], workload)
    net_single = np.full(b.size, 1.0 / one_step[0])
    baselines = {
        "uncoalesced": {"net_tok_s": b / unc_step, "multiple": net / (b / unc_step)},
        "single": {"net_tok_s": net_single, "multiple": net / net_single},
        "independent-boxes": {"net_tok_s": b * net_single, "multiple": net / (b * net_single)},
    }
    notes = list(routing.notes)
    if not np.all(cur["fits"]):
        first = int(b[np.argmin(cur["fits"])])
        notes.append(
            f"from B={first} the dense band and the batch's KV cache exceed RAM: those steps are infeasible as modelled"
        )
    if np.any(workload.cache_bytes > (hardware.ram_bytes - hardware.os_reserve_bytes - model.non_routed_bytes)):
        notes.append(
            "the requested expert cache does not fit beside the resident set: it was capped at what RAM leaves"
        )
    return Plan(
        batch=b,
        step_seconds=step,
        terms=cur["terms"],
        bound=bound,
        per_agent_tok_s=1.0 / step,
        net_tok_s=net,
        ssd_bytes_per_step=cur["ssd_bytes"],
        ssd_bytes_per_token=cur["ssd_bytes"] / b,
        mem_bytes_per_step=cur["mem_bytes"],
        union_per_layer=cur["union"],
        misses_per_layer=cur["misses"],
        coalescing_ratio=b * model.top_k / cur["union"],
        cache_experts_per_layer=cur["cache_experts"],
        fits_in_memory=cur["fits"],
        baselines=baselines,
        transitions=transitions(b, bound),
        provenance=_provenance(model, hardware, workload, routing, "fabric" in cur["terms"]),
        overlap=workload.overlap,
        model=model.name,
        hardware=hardware.name,
        routing=routing.label,
        notes=tuple(notes),
    )


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
