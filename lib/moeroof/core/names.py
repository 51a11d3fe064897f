"""One schema of output names: each quantity a result reports has one name, one unit and one
table header, shared by the JSON, the CSV, the Parquet rows of a sweep and the readable tables.

``plan``'s table once said ``SSD GB/token`` where its CSV said ``link_bytes_per_token`` and its
JSON ``ssd_bytes_per_token``; the multiple was ``multiple_vs_uncoalesced`` in the CSV,
``x_uncoalesced`` in a sweep and ``baselines.uncoalesced.multiple`` in the JSON. Here each has one
name (the JSON's nested ``baselines.NAME.multiple`` is the same quantity as the flat
``multiple_vs_NAME`` of a row), and ``tests/test_names.py`` holds every command's columns to it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Quantity", "QUANTITIES", "header"]


@dataclass(frozen=True)
class Quantity:
    """One reported quantity: its ``name`` (JSON key, CSV column, Parquet column), ``unit`` (SI,
    or a count or fraction) and the ``header`` a readable table gives it."""

    name: str
    unit: str
    header: str
    meaning: str


_Q = [
    Quantity("batch", "agents", "B", "concurrent agents (streams), one token each per decode step"),
    Quantity("cache_gib", "GiB", "cache GiB", "the expert cache each box has at this B (auto: what RAM leaves)"),
    Quantity("step_seconds", "s", "step s", "seconds per decode step (null where the step does not fit in RAM)"),
    Quantity("per_agent_tok_s", "tok/s", "tok/s/agent", "tokens per second each agent gets"),
    Quantity("net_tok_s", "tok/s", "net tok/s", "tokens per second of all B agents together"),
    Quantity(
        "net_tok_s_at_priors",
        "tok/s",
        "tok/s at priors",
        "net tok/s with the engine terms and efficiencies the preset does not state at the box's priors",
    ),
    Quantity("net_tok_s_at_priors_low", "tok/s", "at priors low", "the low end of net_tok_s_at_priors' range"),
    Quantity("net_tok_s_at_priors_high", "tok/s", "at priors high", "the high end of net_tok_s_at_priors' range"),
    Quantity(
        "net_tok_s_routing_low",
        "tok/s",
        "routing low",
        "the lowest net tok/s over the routing priors' ends (skew, one stream's locality; each at its 5 % and 95 % "
        "ends, the other at its centre) and the centre",
    ),
    Quantity("net_tok_s_routing_high", "tok/s", "routing high", "the highest net tok/s over the same ends"),
    Quantity(
        "cache_hit_rate_routing_low",
        "fraction",
        "hit routing low",
        "the lowest cache hit rate over the routing priors' ends and the centre",
    ),
    Quantity("cache_hit_rate_routing_high", "fraction", "hit routing high", "the highest over the same ends"),
    Quantity("bound", "term", "bound", "the term that binds the step (RAM in a table where it does not fit)"),
    Quantity(
        "ssd_bytes_per_token", "bytes", "SSD GB/token", "bytes streamed over the link per agent-token (link_name)"
    ),
    Quantity("union_per_layer", "experts", "U/layer", "distinct experts a step touches per MoE layer"),
    Quantity("cache_hit_rate", "fraction", "hit %", "of the experts a step touches, the share the cache held"),
    Quantity("gib_streamed_per_step", "GiB", "GiB/step", "GiB streamed per step (per rank)"),
    Quantity("coalescing_ratio", "×", "B·K/U", "B·K/U, against the uncoalesced baseline"),
    Quantity("multiple_vs_uncoalesced", "×", "× uncoalesced", "net tok/s over the uncoalesced baseline's"),
    Quantity("multiple_vs_single", "×", "× single", "net tok/s over one agent's on the same boxes"),
    Quantity("multiple_vs_independent_boxes", "×", "× indep-boxes", "net tok/s over B boxes serving one agent each"),
    Quantity("fits_in_memory", "bool", "fits RAM", "whether the dense band and the batch's KV fit in RAM"),
    Quantity("infeasible_reason", "text", "why infeasible", "why the step does not fit (empty where it does)"),
    Quantity("link_name", "text", "link", "what the streaming tier is on this box (ssd, pcie, host-link, …)"),
    Quantity("cache_auto", "bool", "auto cache", "whether the cache was sized by --cache-gib auto"),
    Quantity(
        "cache_gib_used", "GiB", "cache GiB used", "a sweep point's cache: its cache_gib input, or what auto gave"
    ),
    Quantity("capacity_experts", "experts", "capacity (experts in all layers)", "the whole cache, all layers"),
    Quantity("capacity_experts_per_layer", "experts", "per layer", "the cache of one layer (scope layer)"),
    Quantity("capacity_gib", "GiB", "capacity GiB", "the whole cache of a box in GiB"),
    Quantity("hit_rate", "fraction", "hit rate %", "hits per requested (layer, expert) item"),
    Quantity("result", "text", "result", "projected, or witnessed-inputs when every input is witnessed"),
    Quantity("non_witnessed", "text", "not witnessed", "the inputs that are not witnessed"),
]

QUANTITIES: dict[str, Quantity] = {q.name: q for q in _Q}


def header(name: str) -> str:
    """The table header of a quantity (``KeyError`` for a name outside the schema)."""
    return QUANTITIES[name].header
