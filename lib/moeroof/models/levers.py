"""The three levers of seed 000 as factors against named baselines, and how they compose (docs/models.md).

- **L1 weight-stream amortization**: the dense band (attention, shared experts, LM head) is read
  once per step for all B agents instead of once per token. Factor: ``T_step(dense per token) /
  T_step`` at the same B — baseline ``per-token dense reads``.
- **L2 cross-agent expert coalescing**: a step streams the union of the batch's experts.
  Factor: ``net(B) / net_uncoalesced(B)`` — baseline ``uncoalesced`` (:mod:`moeroof.models.plan`).
- **L3 shared-prefix KV reuse**: a prefix of P tokens (system prompt, tool schemas, repo
  snapshot) is prefilled once for all B agents and, in decode, its KV is read once per step for
  the batch rather than once per agent. Factor on a session's time — baseline ``per-agent
  prefix``.

Do the levers compound? Over a session of ``decode_tokens`` per agent after a shared prefix, the
four combinations (neither, L2, L3, both) give ``f2``, ``f3`` and ``f23`` against the neither
case. A session is prefill P plus decode D; when L3 shortens only P (by a) and L2 only D (by c),
``f23 − f2·f3`` has the sign of ``P·D·(1 − 1/a)(1 − 1/c) ≥ 0``: levers acting on disjoint parts
of the session compound *at least* multiplicatively (the time they save adds, so the combined
factor beats the product of the factors). ``f23 / (f2·f3)`` is reported; it falls below 1 only
when the levers compete for the same seconds (e.g. L3's shared-prefix KV reads and L2's
expert stream both shortening one memory-bound decode step).

The per-user ⊗ cross-user composition: a machine runs ``users`` users' fan-outs of
``agents`` each in one continuous batch of ``users·agents`` tokens per step. What composes: the
expert stream — the machine-wide union ``U(users·agents)`` is shared by everyone in the step,
so cross-user batching multiplies the per-user coalescing ratio by
``users·U(agents) / U(users·agents)``. The union never exceeds E per layer, so once it
saturates the bytes streamed per step stop growing while more tokens share them: the
cross-user gain then grows in proportion to users, until another term binds. What does not
overlap: the dense band is already read once per step in both (L1 counts once, not twice);
KV is per user (no cross-tenant prefix reuse, so L3 stays within a user's fan-out and the
batch's KV reads and memory grow linearly with users — on small boxes RAM, not the union,
ends cross-user batching).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from moeroof.core.results import Result
from moeroof.data.presets import Hardware, MoEModel
from moeroof.models.plan import RoutingProbabilities, Workload, batch_breakdown, plan, step_breakdown
from moeroof.models.union import as_batch

__all__ = ["LeverFactors", "lever_factors", "prefill_seconds", "session_seconds", "compounding", "composition"]


@dataclass(frozen=True)
class LeverFactors(Result):
    """Each lever's factor at each B, against its named baseline."""

    batch: np.ndarray
    l1_dense_amortization: np.ndarray
    l2_coalescing: np.ndarray
    l3_prefix_decode: np.ndarray
    baselines: dict[str, str]
    fits_in_memory: np.ndarray


def _step(model, hardware, workload, routing, batch, **kw) -> np.ndarray:
    # a routing that depends on B (one stream's locality: a trace per batch size) runs B by B
    if callable(routing):
        return batch_breakdown(model, hardware, workload, routing, as_batch(batch), **kw).step.step_seconds
    return step_breakdown(model, hardware, workload, routing, batch, **kw).step.step_seconds


def lever_factors(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: RoutingProbabilities,
    batch,
    prefix_tokens: int = 0,
) -> LeverFactors:
    """L1, L2 and the decode part of L3 as separate factors (each > 1 means faster; NaN where
    the step does not fit in RAM, as the plan's multiples).

    L3 in decode: the shared prefix's KV is stored and read once per step
    (``Workload.shared_prefix_tokens``): ``P + B·(ctx − P)`` tokens of KV per step instead of
    ``B·ctx``; attention FLOP are unchanged.
    """
    b = as_batch(batch)
    base = _step(model, hardware, workload, routing, b)
    l1 = _step(model, hardware, workload, routing, b, dense_once=False) / base
    current = plan(model, hardware, workload, routing, b)
    l2 = current.baselines["uncoalesced"]["multiple"]
    shared = replace(workload, shared_prefix_tokens=min(prefix_tokens, workload.context_tokens))
    l3 = base / _step(model, hardware, shared, routing, b)
    runs = np.asarray(current.fits_in_memory, dtype=bool)  # no factor where the step cannot run
    return LeverFactors(
        b,
        np.where(runs, l1, np.nan),
        np.asarray(l2),
        np.where(runs, l3, np.nan),
        {
            "l1_dense_amortization": "per-token dense reads",
            "l2_coalescing": "uncoalesced",
            "l3_prefix_decode": "per-agent prefix KV",
        },
        np.asarray(current.fits_in_memory),
    )


def prefill_seconds(
    model: MoEModel, hardware: Hardware, workload: Workload, routing: RoutingProbabilities, tokens: int
) -> float:
    """One prompt of ``tokens`` tokens prefilled as a single step of that many tokens.

    The step's union is over all prompt tokens (it saturates quickly), its FLOP are
    ``tokens·F_token`` plus attention over an average context of ``tokens/2``, and it writes
    (not reads) its KV — so KV is left out of the memory term.
    """
    if tokens <= 0:
        return 0.0
    w = replace(workload, context_tokens=0)
    attention = tokens * (tokens / 2.0) * model.attn_flops_per_context_token
    return float(_step(model, hardware, w, routing, [tokens], extra_flops=attention)[0])


def session_seconds(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: RoutingProbabilities,
    agents: int,
    prefix_tokens: int,
    decode_tokens: int,
    *,
    coalesced: bool,
    shared_prefix: bool,
) -> float:
    """Wall time for ``agents`` agents to prefill a shared prefix and decode ``decode_tokens`` each.

    Decode runs as one batch of ``agents`` with the mean context over the session
    (``prefix + decode/2``); with ``shared_prefix`` the prefix's KV is read once per step.
    """
    prefill = prefill_seconds(model, hardware, workload, routing, prefix_tokens)
    prefill_total = prefill if shared_prefix else agents * prefill
    mean_ctx = int(round(prefix_tokens + decode_tokens / 2.0))
    w = replace(workload, context_tokens=mean_ctx, shared_prefix_tokens=prefix_tokens if shared_prefix else 0)
    step = _step(model, hardware, w, routing, [agents], coalesced=coalesced)[0]
    return prefill_total + decode_tokens * step


def compounding(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: RoutingProbabilities,
    agents: int,
    prefix_tokens: int,
    decode_tokens: int,
) -> dict[str, Any]:
    """Compounding: L2 and L3 alone and together over one session, against the neither case."""
    seconds = {
        name: session_seconds(
            model, hardware, workload, routing, agents, prefix_tokens, decode_tokens, coalesced=c, shared_prefix=s
        )
        for name, c, s in (("neither", False, False), ("L2", True, False), ("L3", False, True), ("L2+L3", True, True))
    }
    base = seconds["neither"]
    f2, f3, f23 = base / seconds["L2"], base / seconds["L3"], base / seconds["L2+L3"]
    return {
        "baseline": "uncoalesced decode, per-agent prefix prefill",
        "seconds": seconds,
        "f2": f2,
        "f3": f3,
        "f23": f23,
        "product_f2_f3": f2 * f3,
        "compounding_efficiency": f23 / (f2 * f3),
        "net_tok_s": {k: agents * decode_tokens / v for k, v in seconds.items()},
    }


def composition(
    model: MoEModel, hardware: Hardware, workload: Workload, routing: RoutingProbabilities, agents: int, users
) -> dict[str, Any]:
    """Per-user ⊗ cross-user: one user's coalesced fan-out of ``agents`` inside a machine batch of ``users``.

    Returns per ``users`` value: the machine step's net tok/s, the per-user coalescing ratio,
    the machine-wide ratio, the cross-user gain on the expert stream
    (``users·U(agents)/U(users·agents)``), and net tok/s against ``users`` separate steps of
    one user each (time-sliced, no cross-user batching) — the baseline ``per-user steps``.
    """
    u = as_batch(users)
    machine = plan(model, hardware, workload, routing, u * agents)
    alone = plan(model, hardware, workload, routing, [agents])
    per_user_ratio = float(alone.coalescing_ratio[0])
    u_agents = float(alone.union_per_layer[0])
    sliced_net = float(alone.net_tok_s[0])  # u users time-sliced: same aggregate as one user
    return {
        "users": [int(x) for x in u],
        "agents_per_user": int(agents),
        "machine_batch": [int(x) for x in u * agents],
        "net_tok_s": [float(x) for x in machine.net_tok_s],
        "baseline": "per-user steps (time-sliced, no cross-user batching)",
        "net_tok_s_baseline": sliced_net,
        "multiple_vs_baseline": [float(x / sliced_net) for x in machine.net_tok_s],
        "per_user_coalescing_ratio": per_user_ratio,
        "machine_coalescing_ratio": [float(x) for x in machine.coalescing_ratio],
        "cross_user_expert_gain": [float(x * u_agents / y) for x, y in zip(u, machine.union_per_layer)],
        "bound": list(machine.bound),
        "fits_in_memory": [bool(x) for x in machine.fits_in_memory],
    }
