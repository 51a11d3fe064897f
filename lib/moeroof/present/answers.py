"""The answer each notebook opens with, built from the run's own parameters and results.

A notebook's first markdown cell states its question only; right after the computation that
yields the headline numbers it displays the answer built here (a cell tagged ``answer``). Every
builder is pure: names and numbers in, one Markdown string out, so the words follow the run —
the model, box, cache, routing source and batch range it was given — and are unit-tested on
made-up inputs (tests/test_answers.py).

Provenance words follow the inputs (the suite's rule that only measured numbers are
served as measurements): a result is **projected** only when some input is not witnessed, and
data is called **synthetic** only when its own provenance tag says so
(:func:`provenance_sentence`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANSWER_TAG",
    "displayed_markdown",
    "is_synthetic",
    "LINK_WORDS",
    "stream_source",
    "expert_source",
    "term_name",
    "provenance_sentence",
    "fmt",
    "pct",
    "union_curve",
    "skew_fit",
    "NetToks",
    "net_toks",
    "levers",
    "regime_map",
    "cache_ladder",
    "expert_split",
    "witness",
    "whatif",
    "capture_answer",
    "sweep",
]

#: the cell tag that marks the answer's output in every notebook
ANSWER_TAG = "answer"


def displayed_markdown(cell: Mapping[str, Any]) -> list[str]:
    """The Markdown texts a notebook cell displayed (its outputs' ``text/markdown``), in order."""
    shown = (out.get("data", {}).get("text/markdown") for out in cell.get("outputs", []))
    return ["".join(md) if isinstance(md, list) else str(md) for md in shown if md is not None]


#: data-provenance tags that mean "made by the suite's own models, not captured"
SYNTHETIC_TAGS = frozenset({"synthetic"})


#: how an answer names a box's streaming tier (a hardware preset's ``link``, a plan's
#: ``link_name``): the step model calls that term ``ssd`` whatever it is on the box
LINK_WORDS = {"ssd": "SSD", "pcie": "PCIe link", "host-link": "host link", "page-cache": "page cache"}


def stream_source(link: str = "ssd") -> str:
    """Where the experts come from on a box whose streaming tier is ``link``: ``from SSD``,
    ``over the PCIe link``, ``over the host link``, ``from the page cache``."""
    prep = {"ssd": "from", "page-cache": "from the"}.get(link, "over the")
    return f"{prep} {LINK_WORDS.get(link, link)}"


def expert_source(link: str = "ssd", holds_all: bool = False) -> str:
    """Where a box's experts come from, as :func:`stream_source` says it: ``experts streamed
    from SSD``, or where its expert cache holds every routed expert (``holds_all``), that none is
    streamed once the cache is warm."""
    if holds_all:
        return f"every routed expert in its cache: none streamed {stream_source(link)} once warm"
    return f"experts streamed {stream_source(link)}"


def term_name(term: str, link: str = "ssd") -> str:
    """A binding term as the box knows it: the step model's ``ssd`` is the box's ``link``."""
    return link if term == "ssd" else term


def is_synthetic(provenance: str | None) -> bool:
    """Whether a data file's provenance tag says it is synthetic (generated, not captured)."""
    return (provenance or "").strip().lower() in SYNTHETIC_TAGS


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt(x: float, digits: int = 3, *, exponent_from: float = 1e6) -> str:
    """A number to ``digits`` significant figures, plain (no exponent for ordinary sizes: below
    1e-3 or from ``exponent_from`` on)."""
    if _missing(x):
        return "n/a"
    x = float(x)
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x != 0 and (abs(x) >= exponent_from or abs(x) < 1e-3):
        return f"{x:.{digits - 1}e}"
    if abs(x) >= 10**digits:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def pct(x: float, decimals: int = 0) -> str:
    """A share in [0, 1] as a percentage, e.g. ``0.523 → '52 %'``."""
    return "n/a" if _missing(x) else f"{100 * float(x):.{decimals}f} %"


def _join(items: Iterable[object]) -> str:
    """``a, b and c``: the items as text, the last two joined by "and"."""
    *head, last = [str(i) for i in items] or [""]
    return f"{', '.join(head)} and {last}" if head else last


def _batch_range(batch: Sequence[int]) -> str:
    b = [int(x) for x in batch]
    return f"B = {min(b)}…{max(b)}"


def _not_witnessed(inputs: Mapping[str, str], limit: int = 6) -> str:
    """The inputs whose tag is not ``witnessed``: the first ``limit`` named, the rest counted ("" when none)."""
    names = [name for name, tag in inputs.items() if str(tag) != "witnessed"]
    return _join(names[:limit] + ([f"{len(names) - limit} more"] if len(names) > limit else []))


def provenance_sentence(inputs: Mapping[str, str], *, synthetic: Iterable[str] = (), limit: int = 6) -> str:
    """One sentence on what the numbers are, from the inputs' provenance tags.

    ``inputs`` maps an input's name to its tag (``witnessed``, ``assumed``, ``projected``,
    ``synthetic``…); ``synthetic`` names the data inputs that are synthetic. "projected" appears
    only when some input is not witnessed, "synthetic" only when ``synthetic`` names something.
    """
    synthetic = [s for s in synthetic if s]
    verb = "is" if len(synthetic) == 1 else "are"
    parts = [f"{_join(synthetic)} {verb} synthetic (made by the suite's own models, not captured)"] if synthetic else []
    named = _not_witnessed(inputs, limit)
    parts.append(
        f"every model number is **projected**: not witnessed here: {named}"
        if named
        else "every input is **witnessed**; numbers measured on it are witnessed and the model's numbers "
        "are the model on witnessed inputs"
    )
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def union_curve(
    *,
    experts: int,
    top_k: int,
    batch_max: int,
    probe_batch: int,
    uniform_union: float,
    zipf_s: float,
    zipf_union: float,
    dirichlet_alpha: float,
    dirichlet_union: float,
    histogram: str,
    histogram_union: float,
    histogram_ratio: float,
    histogram_provenance: str,
    summed_histogram: str,
    summed_union: float,
    per_layer_union: float,
    summed_provenance: str,
) -> str:
    """union_curve: U(B) under the closed forms and a histogram, and what summing over layers hides."""
    b = int(probe_batch)
    ratio_uniform = b * top_k / uniform_union
    direction = "overstates" if summed_union > per_layer_union else "does not overstate"
    text = (
        f"**Answer.** With E = {experts} experts and K = {top_k} per token, a step of B = {b} agents "
        f"touches U({b}) ≈ {fmt(uniform_union)} distinct experts per layer under uniform routing — a "
        f"coalescing ratio B·K/U of {fmt(ratio_uniform)}× against the `uncoalesced` baseline (each "
        f"agent fetching its own K experts). Skew lowers the union: Zipf s = {fmt(zipf_s)} gives "
        f"{fmt(zipf_union)}, Dirichlet α = {fmt(dirichlet_alpha)} gives {fmt(dirichlet_union)}. "
        f"The histogram `{histogram}` gives {fmt(histogram_union)} ({fmt(histogram_ratio)}× against "
        f"`uncoalesced`; rarefaction with a bootstrap band, curves out to B = {batch_max}). "
        f"Summing `{summed_histogram}` over layers {direction} the union: read as one layer it gives "
        f"{fmt(summed_union)} at B = {b} against {fmt(per_layer_union)} from the per-layer counts. "
    )
    inputs = {
        "the closed-form routing models": "projected",
        f"the histogram `{histogram}`": histogram_provenance,
        f"the per-layer histogram `{summed_histogram}`": summed_provenance,
    }
    return text + _tagged_sentence(inputs)


def skew_fit(
    *,
    histogram: str,
    histogram_provenance: str,
    layers: int,
    pooled_choice: str,
    layer_winners: Mapping[str, int],
    zipf_s: float,
    zipf_s_range: tuple[float, float],
    trace: str,
    trace_provenance: str,
    streams: int,
    rho: float,
    c: float,
    union_ratio: float,
    union_measured: float,
    union_plugin: float,
    batch_max: int,
    union_at_max: float,
    ratio_at_max: float,
) -> str:
    """skew_fit: which skew model fits, how correlated the streams are, and U(B) out to b_max."""
    winners = ", ".join(f"{name} in {n}" for name, n in sorted(layer_winners.items(), key=lambda kv: -kv[1]))
    lo, hi = zipf_s_range
    if union_ratio < 0.98:
        corr = (
            f"{pct(1 - union_ratio, 1)} fewer than independent routing with the trace's own frequencies "
            f"({fmt(union_plugin)}): the streams of a step are correlated, fitted as heterogeneity c = {fmt(c)}"
        )
    else:
        c_text = "off (infinite)" if not math.isfinite(c) else fmt(c)
        corr = (
            f"no fewer than independent routing with the trace's own frequencies ({fmt(union_plugin)}): no "
            f"cross-agent correlation within a step (fitted c {c_text})"
        )
    text = (
        f"**Answer.** On the histogram `{histogram}` ({layers} layers fitted) the pooled AIC chooses "
        f"**{pooled_choice}**; per layer the AIC winner is {winners}, with Zipf s from {fmt(lo)} to {fmt(hi)} "
        f"(pooled s = {fmt(zipf_s, 4)}). "
        f"On the trace `{trace}` ({streams} streams) a step touches {fmt(union_measured)} distinct experts per "
        f"layer, {corr}; the stickiness of consecutive tokens is ρ = {fmt(rho)}. Extrapolated to "
        f"B = {batch_max}, the histogram's union is {fmt(union_at_max)} experts per layer, a coalescing ratio "
        f"of {fmt(ratio_at_max)}× against `uncoalesced`. "
    )
    return text + _tagged_sentence({histogram: histogram_provenance, trace: trace_provenance})


def _tagged_sentence(inputs: Mapping[str, str]) -> str:
    """:func:`provenance_sentence` with the inputs tagged synthetic named as synthetic."""
    return provenance_sentence(inputs, synthetic=[n for n, t in inputs.items() if is_synthetic(t)])


@dataclass(frozen=True, kw_only=True)
class NetToks:
    """:func:`net_toks`' inputs, each named as there."""

    model: str
    hardware: str
    routing: str
    cache_gib: float
    context_tokens: int
    batch: Sequence[int]
    bound: Sequence[str]
    fits: Sequence[bool]
    best_net_tok_s: float
    best_batch: int
    per_agent_first: float
    per_agent_last: float
    last_feasible_batch: int
    max_multiple: float
    max_multiple_batch: int | None
    claim_b_max: int
    batch_at_4x: int | None
    per_agent_at_4x: float | None
    batch_at_10x: int | None
    seed_per_agent_last: float
    inputs: Mapping[str, str]
    synthetic: Iterable[str] = ()
    link: str = "ssd"
    defaults: Iterable[str] = ()
    #: the expert cache holds every routed expert (none streamed once warm)
    holds_all: bool = False
    at_priors: tuple[float, float, float] | None = None
    held_priors: Sequence[str] = ()
    routing_range: tuple[float, float] | None = None
    routing_priors: Sequence[str] = ()


def net_toks(**inputs: Any) -> str:
    """net_toks: net and per-agent tok/s over B, what binds, and where the seed's 4–10× holds
    (``inputs``: the fields of :class:`NetToks`).

    ``routing_range``: net tok/s at ``best_batch`` over the ends of the ``routing_priors``, one at
    a time, with the centre (:func:`moeroof.models.local_routing.skew_band`, ``locality_band``).

    ``at_priors``: net tok/s at ``best_batch`` with the knobs ``held_priors`` (those the preset
    leaves unstated) at the box's priors (:func:`moeroof.models.engine_prior.prior_band`: centre,
    low, high), said after the preset's own; nothing is said where no knob is held.

    ``batch``, ``bound`` and ``fits`` are the plotted grid; the multiples are against
    ``uncoalesced`` over the claim grid up to ``claim_b_max``; ``seed_per_agent_last`` is seed
    000's formula (only the SSD term divided by B) at ``last_feasible_batch``. ``link`` is what
    the box streams experts over (the plan's ``link_name``): the ``ssd`` term is named for it.
    ``defaults``: the defaults that followed the model (:func:`defaults_sentence`).
    """
    a = NetToks(**inputs)
    binds, ram = _binds_clauses(a.batch, a.bound, a.fits, a.link)
    text = (
        f"**Answer.** For **{a.model}** on **{a.hardware}** ({expert_source(a.link, a.holds_all)}) with "
        f"**{fmt(a.cache_gib)} GiB** of expert cache, {a.context_tokens}-token contexts and routing from "
        f"`{a.routing}`, over {_batch_range(a.batch)} {binds}{ram}. "
        f"Net tok/s peaks at {fmt(a.best_net_tok_s)} at B = {a.best_batch}; per-agent tok/s falls from "
        f"{fmt(a.per_agent_first)} at B = {min(int(b) for b in a.batch)} to {fmt(a.per_agent_last)} at B = "
        f"{a.last_feasible_batch}. "
    )
    text += _routing_range_sentence(a) + _at_priors_sentence(a) + _claim_sentence(a) + _seed_sentence(a)
    return text + defaults_sentence(a.defaults) + provenance_sentence(a.inputs, synthetic=a.synthetic)


def _binds_clauses(batch: Sequence[int], bound: Sequence[str], fits: Sequence[bool], link: str) -> tuple[str, str]:
    """:func:`net_toks`' clauses on the binding terms of the feasible steps and where RAM runs out."""
    terms = list(dict.fromkeys(term_name(t, link) for t, ok in zip(bound, fits, strict=True) if ok))
    if not terms:
        binds = "no batch of the range fits in RAM (the KV cache and dense band exceed it)"
    elif len(terms) == 1:
        binds = f"every feasible step is **{terms[0]}-bound**"
    else:
        binds = "the binding term goes " + " → ".join(f"**{t}**" for t in terms)
    infeasible = [int(b) for b, ok in zip(batch, fits, strict=True) if not ok]
    ram = f"; from B = {infeasible[0]} the batch's KV cache and dense band exceed RAM" if infeasible else ""
    return binds, ram


def _claim_sentence(a: NetToks) -> str:
    """:func:`net_toks`' sentence on the multiple against the ``uncoalesced`` baseline."""
    head = "Against the `uncoalesced` baseline (same box, every token fetching its own experts) the multiple "
    if a.batch_at_4x is not None and a.per_agent_at_4x is not None:
        return (
            f"{head}first reaches 4× at B = {a.batch_at_4x}, where each agent gets {fmt(a.per_agent_at_4x)} tok/s "
            f"(about {fmt(60 * a.per_agent_at_4x, 2)} tokens a minute)"
            + (f"; 10× at B = {a.batch_at_10x}" if a.batch_at_10x is not None else "; 10× is not reached")
            + f" within B ≤ {a.claim_b_max} (largest {fmt(a.max_multiple)}×). "
        )
    at = f" at B = {a.max_multiple_batch}" if a.max_multiple_batch is not None else ""
    return (
        f"{head}never reaches 4× among feasible steps within B ≤ {a.claim_b_max} (largest {fmt(a.max_multiple)}×{at}). "
    )


def _seed_sentence(a: NetToks) -> str:
    """:func:`net_toks`' sentence on where this corrects seed 000's formula."""
    stream_term = (
        "SSD term"
        if a.link == "ssd"
        else f"streaming term (here the {LINK_WORDS.get(a.link, a.link)}; seed 000's SSD term)"
    )
    return (
        "Where this corrects seed 000 (the design note this suite exists for): its formula divides only the "
        f"{stream_term} by B, so the batch's other costs are charged as if a step served one token, and "
        "per-agent tok/s holds up as B grows — by that formula "
        f"{fmt(a.seed_per_agent_last)} tok/s per agent at B = {a.last_feasible_batch}. Here one step serves all B "
        f"agents and every term is paid once per step, so per-agent tok/s falls ({fmt(a.per_agent_first)} → "
        f"{fmt(a.per_agent_last)}), and the seed's "
        '"4–10×+" appears'
        + (
            f" only at about {fmt(60 * a.per_agent_at_4x, 2)} tokens a minute per agent."
            if a.per_agent_at_4x is not None
            else " nowhere in this range."
        )
        + " "
    )


def _routing_range_sentence(a: NetToks) -> str:
    """:func:`net_toks`' sentence on the routing priors' range at ``best_batch``; empty without one."""
    if a.routing_range is None or not a.routing_priors or not all(math.isfinite(x) for x in a.routing_range):
        return ""
    lo, hi = a.routing_range
    ends = (
        "its 5 % and 95 % ends"
        if len(a.routing_priors) == 1
        else "each at its 5 % and 95 % ends, the other at its centre"
    )
    spread = (
        f"{fmt(lo)} net tok/s at every end (the routing does not move it here)"
        if fmt(lo) == fmt(hi)
        else f"{fmt(lo)}–{fmt(hi)} net tok/s"
    )
    return (
        f"No measurement here narrows the routing: over the {_join(list(a.routing_priors))} ({ends}) "
        f"B = {a.best_batch} gets {spread}. "
    )


def _at_priors_sentence(a: NetToks) -> str:
    """:func:`net_toks`' sentence on the engine at the box's priors; empty where nothing is held."""
    if a.at_priors is None or not a.held_priors or not all(math.isfinite(x) for x in a.at_priors):
        return ""
    mid, lo, hi = a.at_priors
    return (
        f"These rates run the engine as the preset states it; with what it leaves unstated "
        f"({', '.join(f'`{k}`' for k in a.held_priors)}) at the box's priors (what `fit-plan` holds where no row "
        f"identifies them), B = {a.best_batch} gets {fmt(mid)} net tok/s ({fmt(lo)}–{fmt(hi)} over the priors' "
        "ends). "
    )


def defaults_sentence(defaults: Iterable[str]) -> str:
    """The defaults a run took because they depend on the model (``routing `auto` → …``), in
    one sentence; empty when none did."""
    items = [d for d in defaults if d]
    return f"Defaults that follow the model: {'; '.join(items)}. " if items else ""


def levers(
    *,
    model: str,
    hardware: str,
    contrast_hardware: str,
    routing: str,
    cache_gib: float,
    contrast_cache_gib: float,
    batch_max: int,
    factors: Mapping[str, Mapping[str, float]],
    probe_batch: int,
    binds: Mapping[str, str],
    agents: int,
    session_product: float,
    session_combined: float,
    cross_user_gain: float,
    users_max: int,
    inputs: Mapping[str, str],
    synthetic: Iterable[str] = (),
    links: Mapping[str, str] | None = None,
    defaults: Iterable[str] = (),
    holds_all: Iterable[str] = (),
) -> str:
    """levers: what L1, L2 and L3 each buy at one batch on each box, and whether L2 and L3 compound.

    ``factors[box][lever]`` is each lever's factor at ``probe_batch`` against its baseline;
    ``binds[box]`` the binding term there; ``links[box]`` what the box streams experts over
    (default ``ssd``), which names its ``ssd`` term; ``holds_all``: the boxes whose expert cache
    holds every routed expert (nothing streamed once it is warm, said instead of the link).
    """
    rows = []
    full = set(holds_all)
    for box, f in factors.items():
        named = ", ".join(f"{lever} {fmt(v)}×" for lever, v in f.items())
        link = (links or {}).get(box, "ssd")
        bound = term_name(binds.get(box, "?"), link)
        rows.append(f"on **{box}** ({expert_source(link, box in full)}; {bound}-bound at B = {probe_batch}) {named}")
    compound = "at least multiplicatively" if session_combined >= session_product * 0.999 else "below the product"
    return (
        f"**Answer.** For **{model}** with routing `{routing}` (a {fmt(cache_gib)} GiB expert cache on {hardware}, "
        f"{fmt(contrast_cache_gib)} GiB on {contrast_hardware}; B up to {batch_max}) each lever buys time only "
        f"where the term it shrinks binds — L1 against `per-token dense reads`, L2 against `uncoalesced`, L3 "
        f"against `per-agent prefix KV`: " + "; ".join(rows) + ". "
        f"Over one user's fan-out session of {agents} agents, L2 and L3 together give {fmt(session_combined)}× "
        f"against {fmt(session_product)}× for the product of each alone: they compound {compound}. Cross-user "
        f"batching at {users_max} users (the most that fit in RAM) multiplies the per-user coalescing by {fmt(cross_user_gain)}× "
        "(against `per-user steps`). " + defaults_sentence(defaults) + provenance_sentence(inputs, synthetic=synthetic)
    )


def regime_map(
    *,
    model: str,
    routing: str,
    overlap: str,
    cache_policy: str,
    boxes: Mapping[str, Mapping[str, Any]],
    batch_max: int,
    inputs: Mapping[str, str],
    synthetic: Iterable[str] = (),
) -> str:
    """regime_map: per box, which terms bind over batch × cache and the best feasible net tok/s.

    ``boxes[name]`` holds ``terms`` (binding terms that occur on feasible cells), ``best``
    (net tok/s), ``best_batch``, ``best_cache_gib``, ``cache_gib_max`` and
    ``infeasible_share`` (share of cells where KV + dense band exceed RAM), and optionally
    ``link``, what the box streams experts over (default ``ssd``), which names its ``ssd`` term.
    """
    links = [str(d.get("link", "ssd")) for d in boxes.values()]
    rows = []
    for (name, d), link in zip(boxes.items(), links):
        terms = _join([term_name(str(t), link) for t in d["terms"]]) or "none"
        rows.append(
            f"on **{name}** (cache 0–{fmt(d['cache_gib_max'])} GiB) {terms} bind on feasible cells; the best "
            f"feasible cell gives {fmt(d['best'])} net tok/s at B = {d['best_batch']} with "
            f"{fmt(d['best_cache_gib'])} GiB of cache; {pct(d['infeasible_share'])} of the cells are infeasible"
        )
    return (
        f"**Answer.** For **{model}** with routing `{routing}` over B = 1…{batch_max}, a {cache_policy} expert "
        f"cache and `{overlap}` overlap of the step terms: " + "; ".join(rows) + ". "
        f"A bigger batch raises net tok/s where the {_join([LINK_WORDS.get(x, x) for x in dict.fromkeys(links)])} "
        + ("binds" if len(set(links)) <= 1 else "bind")
        + ", until the batch's KV cache crowds out the expert cache or RAM. "
        + provenance_sentence(inputs, synthetic=synthetic)
    )


def _ladder_rows(ps: Iterable[Mapping[str, Any]]) -> str:
    """cache_ladder's rows: each case's hit rate and GiB per step with their 5–95 % bands."""
    return "; ".join(
        f"{p['case']} {pct(p['hit'], 1)} hit ({pct(p['hit_lo'], 1)}–{pct(p['hit_hi'], 1)}), {fmt(p['gib'])} "
        f"GiB/step ({fmt(p['gib_lo'])}–{fmt(p['gib_hi'])})"
        for p in ps
    )


def _ladder_other_m(
    other_m: Sequence[Mapping[str, Any]],
    calibration_streams: Sequence[int],
    predictions_file: str,
    other_m_file: str | None,
    without_locality: Sequence[str],
) -> str:
    """cache_ladder's sentences on the rows at another M than the calibration's (its docstring)."""
    at = f"At another M than the calibration's {_join([str(m) for m in sorted(calibration_streams)])}"
    text = ""
    if other_m:
        old = _join([f"{p['case']} {pct(p['old_hit'], 1)}" for p in other_m if p.get("old_hit") is not None])
        text += (
            f"{at}, those knobs hold no per-stream locality "
            "(one stream reusing its own experts), which rows at one M cannot identify; there the answer is the "
            "general fit's with the locality prior (`moeroof fit-routing` on the public rows, below; method "
            f"fit-routing in `{predictions_file}`"
            + (f", with its bands in `{other_m_file}`" if other_m_file else "")
            + f"): {_ladder_rows(other_m)}"
            + (f" (the seed-specific knobs' hit rates: {old})" if old else "")
            + ". "
        )
    if without_locality:
        text += (
            f"{at} ({_join(list(without_locality))}) these rows hold no per-stream "
            "locality (one stream reusing its own experts), which rows at one M cannot identify: the general fit "
            "that holds the locality prior there was run with locality off. "
        )
    return text


def cache_ladder(
    *,
    model: str,
    layers: int,
    seeds: int,
    knobs: str,
    refitted: bool,
    calibration: Sequence[tuple[str, float, float]],
    predictions: Sequence[Mapping[str, Any]],
    cliff: Mapping[str, Any] | None,
    big_cache: tuple[float, float, float] | None,
    predictions_file: str,
    inputs: Mapping[str, str],
    synthetic: Iterable[str] = (),
    other_m: Sequence[Mapping[str, Any]] = (),
    calibration_streams: Sequence[int] = (),
    other_m_file: str | None = None,
    without_locality: Sequence[str] = (),
) -> str:
    """cache_ladder: predicted hit rate and GiB streamed per step for each withheld row, and the LRU cliff.

    ``without_locality``: the cases at another M that the seed-specific knobs answer because the
    general fit was run with locality off — said as holding no per-stream locality.

    ``other_m``: the withheld cases at another M than the calibration's (``calibration_streams``),
    answered by the general fit with the locality prior instead (the mappings of ``predictions``
    plus ``old_hit``, the seed-specific knobs' hit rate; in ``predictions_file`` too, their bands in
    ``other_m_file``): those knobs
    hold no per-stream locality, which rows at one M cannot identify, so their rows at another M
    are left out of the first list and said with the general fit's.

    ``calibration`` are the witnessed points (case, hit rate, GiB per step per rank) the knobs
    were fitted to; ``predictions`` one mapping per withheld case with ``case``, ``hit``,
    ``hit_lo``, ``hit_hi`` (shares), ``gib``, ``gib_lo``, ``gib_hi``; ``cliff`` the case where
    LRU falls off its cliff (``case``, ``hit``, ``gib``, ``working_set_gib``, ``cache_gib`` and
    ``policies``, other policies' hit rates there), or None when no case does; ``big_cache``
    (largest cache GiB per rank, hit rate, GiB per step) past the calibrated range.
    """
    cal = _join([f"{case} ({pct(h, 1)} hit, {fmt(g)} GiB/step)" for case, h, g in calibration])
    elsewhere = {p["case"] for p in other_m}
    how = "refitted in this run" if refitted else "stored from the fit"
    text = (
        f"**Answer.** Calibrated on the points seed 003 (a lab report on a two-GB10 run of a {model} engine: "
        f"its pair of nodes, each with an LRU expert cache) published — {cal} — the routing knobs ({knobs}; "
        f"{how}) drive traces of L = {layers} layers whose exact LRU simulation predicts each withheld row, per "
        f"rank, as the mean over {seeds} seeds with its 5–95 % band: "
        f"{_ladder_rows(p for p in predictions if p['case'] not in elsewhere)}. "
        + (
            f"`{predictions_file}` holds the answer (method fit_knobs). "
            if other_m
            else f"These rows are written to `{predictions_file}`. "
        )
    )
    text += _ladder_other_m(other_m, calibration_streams, predictions_file, other_m_file, without_locality)
    if cliff is not None:
        named = ", ".join(f"{k} {pct(v)}" for k, v in (cliff.get("policies") or {}).items())
        alt = f" (the other policies there: {named})" if named else ""
        text += (
            f"LRU falls off its cliff at {cliff['case']}: {pct(cliff['hit'], 1)} hit and {fmt(cliff['gib'])} GiB "
            f"streamed per step, because one step's layer-ordered sweep ({fmt(cliff['working_set_gib'])} GiB) is larger "
            f"than the {fmt(cliff['cache_gib'])} GiB cache, so LRU evicts each expert just before the next step needs "
            f"it{alt}. "
        )
    else:
        text += "No predicted row falls off LRU's cliff (every per-step working set fits its cache). "
    if big_cache is not None:
        g, h, gib = big_cache
        text += f"At {fmt(g)} GiB per rank the pair hits {pct(h, 1)} ({fmt(gib)} GiB/step). "
    return text + provenance_sentence(inputs, synthetic=synthetic)


def expert_split(
    *,
    model: str,
    hardware: str,
    histogram: str,
    per_layer_histogram: str,
    streams: int,
    cache_gib: float,
    ladder_cache_gib: float,
    relabel_draws: int,
    trace_seeds: int,
    trace_layers: int,
    id_imbalance: float,
    seed_id_imbalance: float,
    relabel_share: float,
    lpt_gains: Mapping[str, float],
    witnessed_gain: float,
    slowdown: float,
    slowdown_cost: float,
    weighted_gain: float,
    bytes_gain: float,
    bound_gain: float,
    booster_hit: float,
    pair_hit: float,
    booster_multiple: float,
    plan_multiple: float | None,
    booster_witnessed: float | None,
    fit_plan: Mapping[str, Any] | None = None,
    inputs: Mapping[str, str],
    synthetic: Iterable[str] = (),
) -> str:
    """expert_split: which partition, what a slow head node costs, and the pair against one booster.

    ``id_imbalance`` is the id split's max/min token load on ``histogram``, ``relabel_share`` the
    share of ``relabel_draws`` random relabelings at or above seed 003's ``seed_id_imbalance``;
    ``lpt_gains`` LPT's tok/s multiple against the id split per model at ``ladder_cache_gib``,
    against the witnessed ``witnessed_gain``; at head-node slowdown ``slowdown`` the LPT pair is
    ``slowdown_cost``× slower than at 1, and the weighted / bytes-balanced partitions buy
    ``weighted_gain`` / ``bytes_gain`` against LPT (divisible-work bound ``bound_gain``);
    ``booster_multiple`` the pair's multiple over one booster from the ladder-calibrated traces,
    ``plan_multiple`` the same from ``moeroof plan`` (LRU simulated); ``fit_plan`` optional
    ``held`` (rows), ``median_error`` and ``covered`` (rows inside their band) of fit-plan on
    seed 003's held-out published tok/s, and ``fitted`` (the knobs it fitted, in words).
    """
    gains = sorted(lpt_gains.values())
    lo, hi = (gains[0], gains[-1]) if gains else (math.nan, math.nan)
    text = (
        f"**Answer.** Splitting **{model}**'s experts over a pair of **{hardware}** ranks (two nodes), M = {streams} "
        f"streams, by the layer-summed histogram `{histogram}` (per-layer counts `{per_layer_histogram}`). "
        f"Balancing firing counts (LPT, greedy largest-first packing) against the contiguous id split: the id "
        f"split's token imbalance here is {fmt(id_imbalance, 4)}× (max/min), and the {fmt(seed_id_imbalance, 4)}× "
        f"that seed 003 (a lab report on a two-GB10 run of a GLM-5 engine) published sits where "
        f"{pct(relabel_share)} of {relabel_draws} random relabelings of the same counts lie at or above it — "
        "which ids are hot is luck. "
        f"At {fmt(ladder_cache_gib)} GiB of cache per rank the models give LPT {fmt(lo, 4)}–{fmt(hi, 4)}× the id "
        f"split's tok/s (hot sets on both histograms, LRU on {trace_seeds} sampled traces of {trace_layers} layers), "
        f"against seed 003's witnessed {fmt(witnessed_gain, 4)}× from its balanced row: the partition is not where "
        f"that gain came from. "
        f"With the head node {fmt(slowdown)}× slower at {fmt(cache_gib)} GiB per rank the LPT pair runs "
        f"{fmt(slowdown_cost)}× slower; weighting experts by speed buys {fmt(weighted_gain)}× and balancing "
        f"streamed bytes {fmt(bytes_gain)}× against LPT at the same slowdown (divisible-work bound (1+s)/2 = "
        f"{fmt(bound_gain)}×). "
        f"Against one booster (one GB10 machine holding all experts, the same {fmt(cache_gib)} GiB cache) the pair "
        f"is {fmt(booster_multiple)}× faster from the ladder-calibrated traces"
    )
    text += _booster_tail(plan_multiple, booster_witnessed, booster_hit, pair_hit)
    if fit_plan:
        text += (
            "`moeroof fit-plan`, calibrated on seed 003's public tok/s rows only"
            + (f" (fitting {fit_plan['fitted']})" if fit_plan.get("fitted") else "")
            + f", predicts its {int(fit_plan['held'])} "
            f"held-out published rows with median |error| {pct(fit_plan['median_error'])} "
            f"({int(fit_plan['covered'])} inside their 5–95 % band). "
        )
    return text + provenance_sentence(inputs, synthetic=synthetic)


def _booster_tail(
    plan_multiple: float | None, booster_witnessed: float | None, booster_hit: float, pair_hit: float
) -> str:
    """:func:`expert_split`'s end of the pair-against-one-booster sentence: plan's multiple where
    given, the witnessed one with its baseline, and the hit rates of LRU's cliff."""
    text = "" if plan_multiple is None else f" and {fmt(plan_multiple)}× by `moeroof plan` with its simulated LRU"
    if booster_witnessed is not None:
        text += f", against seed 003's witnessed {fmt(booster_witnessed)}×"
    return text + (
        " (baseline: one booster)"
        f": LRU's cliff — the booster's per-step working set exceeds its cache and it hits {pct(booster_hit, 1)}, "
        f"a rank of the pair {pct(pair_hit, 1)}. "
    )


def _arm_errors(errors: Mapping[str, Sequence[float]]) -> str:
    """``coalesced median 3 %, worst 9 %; uncoalesced …`` from relative errors per arm."""
    by_arm = {arm: sorted(abs(float(x)) for x in errs) for arm, errs in errors.items()}
    parts = [
        f"{arm} median |error| {pct(statistics.median(e), 1)}, worst {pct(e[-1], 1)}" for arm, e in by_arm.items() if e
    ]
    return "; ".join(parts) or "no rows"


def witness(
    *,
    machine: str,
    read_path: str,
    shape: str,
    routing: str,
    batch: Sequence[int],
    steps: int,
    file_mib: float,
    calibration: Mapping[str, str],
    bound: Iterable[str],
    errors: Mapping[str, Mapping[str, Sequence[float]]],
    drift: float | None,
    replay: str | None = None,
    replay_errors: Mapping[str, Sequence[float]] | None = None,
    gpu: Mapping[str, object] | None = None,
    hf_block: Mapping[str, object] | None = None,
    inputs: Mapping[str, str],
) -> str:
    """witness: how well the roofline, calibrated on this machine, predicts its own measured steps.

    ``errors[overlap][arm]`` are the live run's relative errors of net tok/s (predicted / measured
    − 1) per batch, for ``overlap`` ``sum`` and ``max`` and the ``coalesced`` and ``uncoalesced``
    arms; ``calibration`` the calibrated rates as text (name → value with unit); ``drift`` the
    change of the calibrated read bandwidth at the expert size from before to after the bench
    (None when not re-calibrated); ``replay_errors`` the same (``sum``) for the replayed run
    ``replay``; ``gpu`` the witnessed GPU run (``name``, ``date``, ``median_abs_error`` per arm,
    ``batch``, ``multiple_measured``, ``multiple_predicted``); ``hf_block`` the witnessed
    transformers MoE block run (``name``, ``date``, ``block``, ``median_abs_error`` and
    ``calibrated_median_abs_error`` per arm (the roofline's step seconds; calibrated: one
    overhead per expert application taken from B = 1 alone), ``batch``, ``multiple_measured``
    (best coalesced arm against ``uncoalesced``), ``parity`` (worst relative L2 error per arm,
    0 for equal outputs)). ``inputs`` maps every input the predictions rest on to its provenance tag: the measurements are witnessed; a prediction is
    called **projected** only when some input behind it is not.
    """
    cal = ", ".join(f"{k} {v}" for k, v in calibration.items())
    terms = list(dict.fromkeys(bound))
    binds = (
        f"every step is predicted **{terms[0]}-bound**"
        if len(terms) == 1
        else "the predicted binding term is " + _join(terms)
    )
    text = (
        f"**Answer.** On **{machine}** ({read_path} reads), `moeroof calibrate` (a {fmt(file_mib)} MiB scratch "
        f"file) measured {cal}. From that calibration alone — never tuned on the bench — the roofline predicts "
        f"the decode steps of a bench MoE ({shape}, `{routing}` routing, {steps} counted steps) measured here at "
        f"{_batch_range(batch)}, coalesced and against the `uncoalesced` baseline; {binds}. "
        f"With the terms added (`sum`, a serial read-then-compute loop): {_arm_errors(errors.get('sum', {}))}"
    )
    if "max" in errors:
        text += f"; with perfect overlap (`max`): {_arm_errors(errors['max'])}"
    text += ". "
    if drift is not None and math.isfinite(drift):
        text += (
            f"The calibrated read bandwidth at the expert size moved {100 * drift:+.1f} % between the calibrations "
            "before and after the bench: the floor of any prediction's error on this disk. "
        )
    if replay and replay_errors:
        text += f"The committed run `{replay}` predicts from its own calibration with {_arm_errors(replay_errors)}. "
    text += (_gpu_sentence(gpu) if gpu else "") + (_hf_block_sentence(hf_block) if hf_block else "")
    return text + _witnessed_sentence(inputs)


def _gpu_sentence(gpu: Mapping[str, Any]) -> str:
    """:func:`witness`' sentence on the witnessed GPU run."""
    med = gpu["median_abs_error"]
    return (
        f"On the witnessed {gpu['name']} run ({gpu['date']}, experts streamed from host memory over PCIe) "
        + "; ".join(f"{arm} median |error| {pct(e, 1)}" for arm, e in med.items())
        + f"; at B = {gpu['batch']} coalescing buys {fmt(gpu['multiple_measured'])}× measured against "
        f"{fmt(gpu['multiple_predicted'])}× predicted (baseline `uncoalesced`). "
    )


def _hf_block_sentence(hf_block: Mapping[str, Any]) -> str:
    """:func:`witness`' sentence on the witnessed transformers MoE block run."""
    med, cal = hf_block["median_abs_error"], hf_block.get("calibrated_median_abs_error", {})
    return (
        f"On the witnessed {hf_block['name']} run of transformers' own `{hf_block['block']}` ({hf_block['date']}, "
        "experts streamed from pinned host memory) the roofline's step seconds miss by "
        + "; ".join(
            f"{arm} median |error| {pct(e, 1)}"
            + (f" ({pct(cal[arm], 1)} with an overhead per expert application from B = 1)" if arm in cal else "")
            for arm, e in med.items()
        )
        + f"; at B = {hf_block['batch']} coalescing buys {fmt(hf_block['multiple_measured'])}× measured "
        "(baseline `uncoalesced`); outputs against the block's own forward: "
        + ", ".join(
            f"{arm} {'within ' + pct(v, 2) + ' relative L2' if v else 'equal'}" for arm, v in hf_block["parity"].items()
        )
        + ". "
    )


def _witnessed_sentence(inputs: Mapping[str, str]) -> str:
    """:func:`witness`' closing sentence: which predictions are projected (resting on an input not witnessed)."""
    named = _not_witnessed(inputs)
    if named:
        return (
            f"The measurements are **witnessed**; the predictions resting on {named} (not witnessed) are "
            "**projected**, the others are the model on witnessed inputs."
        )
    return "The measurements are **witnessed**; every prediction is the model on witnessed inputs."


def whatif(
    *,
    model: str,
    hardware: str,
    routing: str,
    cache_gib: float,
    batch_min: int,
    batch_max: int,
    best_net_tok_s: float | None,
    best_batch: int | None,
    bound_at_best: str | None,
    hit_rate_at_best: float | None,
    union_at_max: float,
    inputs: Mapping[str, str],
    synthetic: Iterable[str] = (),
    link: str = "ssd",
    infeasible_from: int | None = None,
    infeasible_reason: str | None = None,
    fit: str | None = None,
    fit_knobs: Sequence[str] = (),
    defaults: Iterable[str] = (),
    holds_all: bool = False,
) -> str:
    """whatif: the state the controls start in (the report shows that state); ``link`` is what
    the box streams experts over, which names the ``ssd`` term (``holds_all``: the cache holds
    every routed expert, so none is streamed once warm). ``best_*`` is None when no
    batch of the range fits in RAM; ``infeasible_from`` is the first B that does not fit (None:
    all do) and ``infeasible_reason`` why; ``fit``: a fit-plan result the box runs with, and
    ``fit_knobs`` the knobs of it the state took; ``defaults`` the defaults that followed the
    model (:func:`defaults_sentence`)."""
    head = (
        f"**Answer (this state).** **{model}** on **{hardware}** ({expert_source(link, holds_all)}), routing "
        f"`{routing}`, a {fmt(cache_gib)} GiB expert cache: "
    )
    if best_net_tok_s is None or best_batch is None:
        why = f" ({infeasible_reason})" if infeasible_reason else ""
        body = (
            f"no batch of B = {batch_min}…{batch_max} fits in RAM{why}, so there is no tok/s to give; "
            "lower the batch range or the context. "
        )
    else:
        edge = (
            f"; from B = {infeasible_from} the batch does not fit in RAM (no rate shown there)"
            if infeasible_from is not None
            else ""
        )
        body = (
            f"the best feasible net tok/s over B = {batch_min}…{batch_max} is {fmt(best_net_tok_s)} at "
            f"B = {best_batch} ({term_name(bound_at_best or '', link)}-bound, cache hit rate "
            f"{pct(hit_rate_at_best or 0.0)}){edge}. "
        )
    taken = ", ".join(fit_knobs) or "none of its knobs (it fitted none that the state uses)"
    fitted = f"The box runs with the knobs of `{fit}` (moeroof fit-plan, projected): {taken}. " if fit else ""
    tail = f"U({batch_max}) is {fmt(union_at_max)} experts per layer. Move the controls (`make lab`) to redraw. "
    return head + body + tail + fitted + defaults_sentence(defaults) + provenance_sentence(inputs, synthetic=synthetic)


def _capture_source(src: Mapping[str, Any], cache_share: float, *, first: bool) -> str:
    """One capture's union, fit and cache numbers as a sentence (see :func:`capture_answer`)."""
    parts = []
    if src.get("union_measured") is not None:
        b, um, up = int(src["batch"]), float(src["union_measured"]), float(src["union_plugin"])
        ratio = um / up
        if ratio < 0.98:
            how = f"{pct(1 - ratio, 1)} below independent routing: the streams of a step share experts"
        elif ratio > 1.02:
            how = f"{pct(ratio - 1, 1)} above independent routing: the streams of a step spread wider"
        else:
            how = "as independent routing would"
        lo_hi = src.get("ratio_layers")
        per_layer = f", per layer {fmt(lo_hi[0])}–{fmt(lo_hi[1])}×" if lo_hi and lo_hi[0] != lo_hi[1] else ""
        plugin = "the independent plug-in Σ_i [1 − (1 − π̂_i)^B] with its own frequencies" if first else "the plug-in"
        parts.append(
            f"at B = {b} a step touches {fmt(um)} distinct experts per layer against {fmt(up)} for {plugin} "
            f"({fmt(ratio)}×{per_layer}), {how}"
        )
    parts.append(f"the pooled AIC chooses **{src['fit_choice']}** (Zipf s = {fmt(float(src['zipf_s']))})")
    if src.get("lru_hit") is not None:
        parts.append(
            f"an exact LRU cache of {pct(cache_share)} of the (layer, expert) pairs hits {pct(float(src['lru_hit']))} "
            f"of the requests, against {pct(float(src['che_hit']))} for independent references with the same "
            "frequencies (Che)"
        )
        step, cap = src.get("step_items"), src.get("capacity")
        below_che = float(src["lru_hit"]) < 0.8 * float(src["che_hit"])  # both read as floats just above
        if step is not None and cap is not None and float(step) > float(cap) and below_che:
            parts[-1] += (
                f" — LRU's cliff: a step asks for {fmt(float(step))} pairs, more than the {fmt(float(cap))} it holds, so "
                "LRU evicts each pair before the next step asks again"
            )
    return "; ".join(parts)


def capture_answer(
    *,
    model: str,
    family: str,
    tiny: bool,
    seed: int,
    experts: int,
    top_k: int,
    layers: int,
    streams: int,
    decode_steps: int,
    prompts: str,
    cache_share: float,
    sources: Sequence[Mapping[str, object]],
    skipped: Mapping[str, str] | None = None,
) -> str:
    """capture: the pipeline end to end — capture, union against the independent plug-in, skew
    fit, cache curve — on the capture (``sources[0]``) and the external captures after it.

    Each source: ``name``, ``note`` (may be empty), ``provenance``, ``fit_choice``, ``zipf_s``,
    and for a trace ``batch``, ``union_measured``, ``union_plugin``, ``ratio_layers`` (lowest,
    highest per-layer measured / plug-in), ``lru_hit``, ``che_hit`` (None for a histogram only).
    A tiny random model's routing is witnessed routing of a model nobody serves: said so.
    """
    if not sources:
        raise ValueError("sources: the capture itself comes first")
    what = (
        f"witnessed routing of a random-initialised tiny {family} model that nobody serves (E = {experts}, "
        f"K = {top_k}, {layers} MoE layers, weights from seed {seed})"
        if tiny
        else f"witnessed routing of the {family} checkpoint `{model}` (E = {experts}, K = {top_k}, {layers} MoE layers)"
    )
    text = (
        f"**Answer.** Captured at the routers: {what}, {streams} streams ({prompts}) decoded together for "
        f"{decode_steps} decode steps. On it, {_capture_source(sources[0], cache_share, first=True)}. "
    )
    if tiny:
        text += (
            "Random weights: this shows the pipeline works end to end, not how a trained model routes — the "
            "real captures below are the evidence. "
        )
    ext = list(sources[1:])
    if ext:
        items = []
        for s in ext:
            note = f" ({s['note']})" if s.get("note") else ""
            items.append(f"**{s['name']}**{note}: {_capture_source(s, cache_share, first=False)}")
        text += "The same analyses on the external real captures: " + "; ".join(items) + ". "
    for name, reason in (skipped or {}).items():
        text += f"Skipped {name}: {reason}. "
    inputs = {f"the capture of {model}": str(sources[0].get("provenance"))}
    inputs.update({str(s["name"]): str(s.get("provenance")) for s in ext})
    return text + provenance_sentence(inputs)


def _cell(cache_gib: float, batch: int) -> str:
    return f"{fmt(cache_gib)} GiB, B = {int(batch)}"


def _wins(wins: Mapping[str, int], of: str) -> str:
    """``**lfu** gives the most net tok/s in 40 of OF (then arc in 8, …)`` from win counts (the
    first of equal counts in ``wins``' order wins)."""
    ranked = sorted(((n, i, p) for i, (p, n) in enumerate(wins.items()) if n > 0), key=lambda t: (-t[0], t[1]))
    top_n, _, top = ranked[0]
    rest = ", ".join(f"{p} in {n}" for n, _, p in ranked[1:])
    return f"**{top}** gives the most net tok/s in {top_n} of {of}" + (f" (then {rest})" if rest else "")


def sweep(
    *,
    model: str,
    hardware: str,
    routing: str,
    context_tokens: int,
    points: int,
    failed: int,
    where: str,
    policies: Sequence[str],
    cache_gib: tuple[float, float],
    batch: tuple[int, int],
    cells: int,
    compared: int,
    wins: Mapping[str, int],
    ties: int,
    tie_tolerance: float,
    online: Sequence[str] = (),
    online_wins: Mapping[str, int] | None = None,
    baseline: str | None = None,
    best_gain: Mapping[str, object] | None = None,
    online_gain: Mapping[str, object] | None = None,
    inputs: Mapping[str, str],
    synthetic: Iterable[str] = (),
) -> str:
    """sweep: which cache policy gives the most net tok/s over a swept (cache GiB × B) grid.

    Every number comes from the sweep's Parquet rows: ``points`` rows (``failed`` of them with
    an error) over ``cells`` (cache, B) cells of ``cache_gib`` (lowest, highest) × ``batch``
    (lowest, highest), one row per cell and policy; ``compared`` cells have every policy
    evaluated and fit in RAM. ``wins[policy]`` counts the compared cells a policy wins by at
    least ``tie_tolerance`` (a share) over the runner-up, ``ties`` the rest. ``online`` are the
    policies an engine can run (the others are oracles), ``online_wins`` their wins among
    themselves. ``best_gain`` / ``online_gain``: the largest net tok/s multiple of any (online)
    policy over ``baseline`` at the same cell — ``policy``, ``multiple``, ``cache_gib``,
    ``batch``. ``inputs`` maps the inputs the rows rest on to their provenance tags (the rows'
    ``non_witnessed`` column): "projected" only when one is not witnessed.
    """
    failed_text = f", {failed} of them failed (error rows)" if failed else ", none failed"
    text = (
        f"**Answer.** For **{model}** on **{hardware}** with routing `{routing}` and {context_tokens}-token "
        f"contexts, across {points} points ({len(policies)} cache policies × {cells} cells of cache "
        f"{fmt(cache_gib[0])}–{fmt(cache_gib[1])} GiB × B = {batch[0]}…{batch[1]}, swept on {where}{failed_text}), "
    )
    tol = pct(tie_tolerance, 1)
    if compared == 0:
        text += "no cell has every policy evaluated and fitting in RAM, so no policy can be ranked. "
        return text + provenance_sentence(inputs, synthetic=synthetic)
    skipped = cells - compared
    scope = f"{compared} cells where every policy ran and the batch fits in RAM" if skipped else f"{compared} cells"
    if any(n > 0 for n in wins.values()):
        text += _wins(wins, f"the {scope}")
        text += f"; {ties} cells are ties (best within {tol} of the runner-up). "
    else:
        text += f"no policy beats the runner-up by {tol} or more in any of the {scope}. "
    if online_wins is not None and len(online) > 1 and len(online) < len(policies):
        oracles = [p for p in policies if p not in online]
        text += f"Among the policies an engine can run online ({_join(online)}; {_join(oracles)} are oracles), "
        if any(n > 0 for n in online_wins.values()):
            text += _wins(online_wins, f"the {compared} cells") + ". "
        else:
            text += f"none beats another by {tol} or more in any cell. "
    if baseline and best_gain is not None:
        text += _gain_sentence(baseline, best_gain, online_gain, tie_tolerance)
    return text + provenance_sentence(inputs, synthetic=synthetic)


def _gain_sentence(baseline: str, g: Mapping[str, Any], o: Mapping[str, Any] | None, tie_tolerance: float) -> str:
    """:func:`sweep`'s sentence on the largest net tok/s multiple over ``baseline`` at one cell
    (``g``), and the online policies' largest (``o``) where another policy's; or that none
    beats it by ``tie_tolerance``."""
    if float(g["multiple"]) <= 1 + tie_tolerance:
        return f"No policy beats {baseline} by {pct(tie_tolerance, 1)} or more in any cell. "
    text = (
        f"The largest gain over {baseline} is {fmt(float(g['multiple']))}× ({g['policy']}, against "
        f"{baseline} at the same cache and B) at {_cell(float(g['cache_gib']), int(g['batch']))}"
    )
    if o is not None and o["policy"] != g["policy"] and float(o["multiple"]) > 1 + tie_tolerance:
        text += (
            f"; of the online policies {o['policy']} gains most, {fmt(float(o['multiple']))}× against "
            f"{baseline} at {_cell(float(o['cache_gib']), int(o['batch']))}"
        )
    return text + ". "


def _worst_cases(preds: Sequence[Mapping[str, Any]]) -> str:
    """validation's sentence naming the predicted case of the largest mean |error|, relative and
    in points ("" with no predicted case)."""
    if not preds:
        return ""
    named = []
    for unit, how in (
        ("relative", lambda e: f"{pct(e)} mean |error|"),
        ("points", lambda e: f"{fmt(100 * e, 3)} points"),
    ):
        worst = max((c for c in preds if c["error_unit"] == unit), key=lambda c: c["mean_abs_error"], default=None)
        if worst is not None:
            named.append(f"`{worst['case']}` ({how(worst['mean_abs_error'])})")
    return f"Worst: {_join(named)}. "


def _coverage_sentences(
    coverage: tuple[float, float, int, Sequence[int]] | None,
    plan_coverage: tuple[float, int, int, Sequence[tuple[int, float, int]]] | None,
    curve_coverage: tuple[float, float, int, int, Sequence[float]] | None,
) -> list[str]:
    """:func:`validation`'s sentences on the simulated-truth coverage checks it was given."""
    out: list[str] = []
    if coverage is not None:
        on, off, n, cal = coverage
        out.append(
            f"On {n} one-stream rows of simulated truths drawn from the locality prior (calibrated on rows at "
            f"M = {', '.join(str(b) for b in sorted(set(cal)))} only), {pct(on)} lie inside their 90 % band with the "
            f"prior and {pct(off)} with locality off. "
        )
    if plan_coverage is not None:
        share, n_rows, n_truths, plan_cal = plan_coverage
        at = f"M = {_join([str(b) for b in sorted({c[0] for c in plan_cal})])}"
        sizes = _join([f"{g:g}" for g in sorted({c[1] for c in plan_cal})])
        out.append(
            f"On {n_truths} simulated boxes drawn from fit-plan's priors (engine, SSD, locality, reclaim work, page cache; terms "
            f"combined by max or sum, not told), calibrated on {len(plan_cal)} of seed 003's rows ({at}; {sizes} GiB), "
            f"{pct(share)} of {n_rows} predicted rows lie inside fit-plan's 90 % band (each truth a new "
            "measurement, as the band is a new measurement's: its simulated value with the calibration rows' noise). "
        )
    if curve_coverage is not None:
        on_net, on_hit, n_rows, n_truths, gib = curve_coverage
        out.append(
            f"On {n_truths} simulated one-stream cache curves (the popularity's family, Zipf or Dirichlet, and max or "
            f"sum not told), calibrated at {_join([f'{g:.3g}' for g in gib])} GiB as mlx-lm#1438's rows are, "
            f"{pct(on_net)} of {n_rows} predicted tok/s and {pct(on_hit)} of their hit rates lie inside fit-plan's "
            "90 % bands (each truth a new measurement, with noise). "
        )
    return out


def validation(
    *,
    cases: Sequence[Mapping[str, Any]],
    rows: Sequence[Mapping[str, Any]],
    skipped: Mapping[str, str],
    groups: Sequence[str],
    tok_s_target: float = 0.20,
    hit_target: float = 0.05,
    coverage: tuple[float, float, int, Sequence[int]] | None = None,
    plan_coverage: tuple[float, int, int, Sequence[tuple[int, float, int]]] | None = None,
    curve_coverage: tuple[float, float, int, int, Sequence[float]] | None = None,
) -> str:
    """validation: how the held-out predictions (``rows`` of :mod:`moeroof.studies.held_out`,
    ``cases`` its summary) meet the targets — relative errors within ``tok_s_target`` and hit-rate
    errors within ``hit_target`` (a fraction: 0.05 is 5 points) — and how many banded rows lie
    inside their band (a fit's 5–95 %, or a zero-fit row's engine-prior range); the worst case by mean |error|; what was skipped. ``coverage``:
    (share inside with the locality prior, without it, rows, the calibration rows' batch sizes) of
    the simulated-truth check; ``plan_coverage``: (share inside, predicted rows, truths, the calibration rows'
    (B, cache GiB, ranks)) of fit-plan's (:func:`moeroof.studies.plan_coverage.plan_coverage`);
    ``curve_coverage``: (tok/s share inside, hit-rate share inside, predicted rows, truths, the
    calibrated cache sizes in GiB) of fit-plan's on one-stream cache curves
    (:func:`moeroof.studies.curve_coverage.curve_coverage`)."""
    pred = [r for r in rows if r["role"] == "prediction"]
    banded = [r for r in pred if r["inside"] is not None]
    consistency = sum(r["role"] == "consistency" for r in rows)
    parts = [
        f"**Answer.** Over the {_join(list(groups))} cases, {len(pred)} held-out predictions in "
        f"{sum(c['role'] == 'prediction' for c in cases)} cases (and {consistency} consistency rows that only "
        "reproduce their own calibration, not counted): "
    ]
    within = []
    for unit, target, what in (
        ("relative", tok_s_target, f"relative errors within {pct(tok_s_target)}"),
        ("points", hit_target, f"hit-rate and overlap errors within {fmt(100 * hit_target, 2)} points"),
    ):
        if unit_rows := [r for r in pred if r["error_unit"] == unit]:
            within.append(f"{sum(abs(r['error']) <= target for r in unit_rows)} of {len(unit_rows)} {what}")
    parts.append(_join(within) + ". " if within else "none. ")
    if banded:
        inside = sum(bool(r["inside"]) for r in banded)
        parts.append(
            f"Of the {len(banded)} rows with a band (a fit's 5–95 %, or the range of a zero-fit row's engine "
            f"priors), {inside} lie inside it ({pct(inside / len(banded))}). "
        )
    parts.append(_worst_cases([c for c in cases if c["role"] == "prediction"]))
    withheld = [r for r in rows if r["role"] == "withheld"]
    if withheld:
        named = sorted({r["case"] for r in withheld})
        parts.append(
            f"{len(withheld)} more rows ({', '.join(f'`{c}`' for c in named)}) predict truths withheld from this "
            "repository: their predictions and bands are in the table, to be held against the measurements. "
        )
    parts += _coverage_sentences(coverage, plan_coverage, curve_coverage)
    if skipped:
        parts.append(f"Skipped: {'; '.join(f'{k} ({v})' for k, v in skipped.items())}. ")
    replayed = any(r["group"] == "locality" for r in rows)
    parts.append(
        "Every prediction is **projected** (the models on the suite's inputs) against measurements that are "
        "published (some by hobby projects, named in the table)"
        + (" or replayed from real captures." if replayed else ".")
    )
    return "".join(parts)
