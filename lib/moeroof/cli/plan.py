"""``moeroof plan``: net tok/s of B agents from the one step model (SSD, memory, compute, engine,
fabric) fed by the cache simulator, what binds at each batch size, and multiples against named
baselines.

::

    moeroof plan --model PRESET|FILE --hardware PRESET|FILE --batch 1,8,64 [--cache-gib X]
                 [--cache-policy lru|lfu|s3fifo|arc|belady|static] [--context N]
                 [--overlap max|sum] [--routing prior|uniform|zipf:S|dirichlet:A|PATH] [--read-size-kib X]
                 [--ranks R [--partition id|lpt|weighted|bytes] [--rank-speed 1,0.6]]
                 [--min-per-agent-tok-s X] [--independent] [--format table|json|csv] [--output FILE]

The numbers come from :func:`moeroof.models.plan.plan`; this module parses the flags into a
:class:`~moeroof.models.plan.Workload` and prints the result. Each row answers its own
question: ``--cache-gib auto`` sizes each B's cache from that B alone, and
``--min-per-agent-tok-s`` searches B itself (:func:`moeroof.models.plan.admission_search`),
so no number depends on the other batch sizes asked for. A batch whose step does not fit in
RAM (the dense band and its KV cache exceed what the OS leaves) gets no rate and no multiple —
no step time, tok/s, B·K/U or baseline multiple (``-`` in the table, empty in the CSV, null in
the JSON; its bound shows ``RAM``) — and the regime changes are found among the feasible
batches only. ``--format csv``: one row per batch.

One stream's temporal locality (stickiness, per-stream hot sets) is what no flag gives and
every real decode shows: a simulated cache (or the OS page cache) runs on traces sampled with
the centre of the locality prior fitted on real decode (``data/fits/locality-prior.json``;
:mod:`moeroof.models.local_routing`), named in the routing label and the notes;
``--independent`` draws independent tokens instead. A trace routing keeps its own streams, and
``--fit`` / ``--routing-knobs`` the locality they hold. Without ``--routing`` each layer's
expert popularity is the skew prior's, fitted on public routing of fine-grained MoE models
(``data/fits/skew-prior.json``, :func:`moeroof.models.plan.prior_routing`); with the locality,
its 5–95 % ends are run as well, and the notes give the spread of each.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from moeroof.cli.flags import (
    BATCH_HELP,
    PARTITIONS,
    RANK_SPEED,
    SET_HELP,
    BatchList,
    Count,
    Real,
    UsageError,
    add_default,
    add_step_arguments,
    load_presets,
    resolve_auto_cache,
    step_options,
)
from moeroof.cli.inputs import input_path, read_routing_knobs
from moeroof.cli.output import Progress, add_output_arguments, emit, fmt, print_notes, table
from moeroof.core.names import header

#: library parameter → the flag that carries it (moeroof.cli.app prints ParameterErrors with it)
PARAMETER_FLAGS = {"rank_speed": "--rank-speed"}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="net tok/s of B agents: the step roofline, what binds, and multiples against named baselines",
        description=(
            "Evaluate the decode-step roofline (SSD, memory, compute, fabric) for a model and a box "
            "at each batch size; every multiple names its baseline (uncoalesced, single, "
            "independent-boxes) and the result says whether any input is not witnessed (projected)."
        ),
    )
    p.add_argument("--model", required=True, help="model preset name (see `moeroof presets`) or a TOML path")
    p.add_argument("--hardware", required=True, help="hardware preset name or a TOML path")
    p.add_argument("--batch", required=True, type=BatchList(), help=BATCH_HELP)
    add_step_arguments(p)
    p.add_argument(
        "--routing",
        help="prior (the skew prior), uniform, zipf:S, dirichlet:A, or a histogram .csv / trace .npz path "
        "(default prior, or with --fit the fit's routing)",
    )
    p.add_argument(
        "--routing-knobs",
        help="a `moeroof fit-routing --json` result: the cache runs on a trace sampled from its knobs "
        "(family, skew, stickiness, locality), instead of --routing",
    )
    p.add_argument(
        "--independent",
        action="store_true",
        help="a stream's tokens independent of one another (no stickiness, no per-stream hot sets) instead of "
        "the locality prior fitted on real decode (data/fits/locality-prior.json), which a simulated cache "
        "otherwise runs with",
    )
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help=SET_HELP)
    p.add_argument(
        "--fit",
        metavar="FIT.json",
        help="run with a `moeroof fit-plan --json` result's knobs (engine terms, SSD scale, page-cache share, "
        "skew, stickiness); the fit's model and box must be these",
    )
    add_default(p, "--ranks", "1", "boxes the experts are split over", type=Count(min=1))
    p.add_argument(
        "--partition",
        default="lpt",
        choices=PARTITIONS,
        help="how the experts are split over ranks (default lpt: DeepSeek EPLB's equal-count LPT)",
    )
    p.add_argument("--rank-speed", type=RANK_SPEED, help="relative speed per rank, comma-separated (e.g. 1,0.6)")
    p.add_argument(
        "--min-per-agent-tok-s",
        type=Real(min=0.0),
        help="admission: report admit_batch, the largest B (searched over every B up to "
        "4096, not only the grid) with at least this per-agent tok/s that fits in RAM, and why B + 1 fails",
    )
    add_output_arguments(p)


def plan_report(args: argparse.Namespace, stage=lambda done, total, what: None) -> dict[str, Any]:
    """The ``plan`` JSON object for parsed arguments; ``stage(done, total, what)`` as each of
    :data:`PLAN_STAGES` begins (a :class:`~moeroof.cli.output.Progress`)."""
    from moeroof.fit.plan import box_with_fit, routing_with_fit
    from moeroof.models.partition import parse_rank_speed
    from moeroof.models.plan import DEFAULT_ROUTING, Workload, admission_search, plan, routing_from_spec

    batch, ranks, floor = args.batch, args.ranks, args.min_per_agent_tok_s
    options = step_options(args)
    # one per rank: two flags together (refused as --rank-speed, PARAMETER_FLAGS)
    speed = None if args.rank_speed is None else tuple(parse_rank_speed(list(args.rank_speed), ranks).tolist())
    model, hardware = load_presets(args)
    fitted = None
    if args.fit is not None:
        from moeroof.data.fit_result import read_fit  # a `moeroof fit-plan --json` result's knobs

        fitted = read_fit(input_path(args.fit))
        for what, have in (("model", model.name), ("hardware", hardware.name)):
            if fitted[what] not in (None, have):
                raise UsageError(f"--fit: {args.fit} was fitted on {what} {fitted[what]}, not {have}")
        hardware = box_with_fit(hardware, fitted)
        options["page_cache"] = options["page_cache"] or fitted["page_cache"]
        if "page_cache_share" in fitted:
            options["page_cache_share"] = fitted["page_cache_share"]
    fit_routing = None if fitted is None else routing_with_fit(model, fitted)
    if fit_routing is not None:
        routing = fit_routing
    elif args.routing_knobs is not None:
        import functools

        # each B runs on a trace sampled with B streams: a row never depends on the grid's largest B
        from moeroof.models.local_routing import routing_from_knobs

        knobs = read_routing_knobs(args.routing_knobs)  # the file read once, its trace sampled per B
        routing = functools.lru_cache(maxsize=None)(
            lambda b: routing_from_knobs(model, *knobs, streams=int(b))  # type: ignore[misc]
        )
    else:
        spec = args.routing or (fitted or {}).get("routing_spec") or DEFAULT_ROUTING
        routing = routing_from_spec(spec, model)
    auto = resolve_auto_cache(options, model, hardware, batch)
    workload = Workload(ranks=ranks, partition=args.partition, rank_speed=speed, **options)
    spreads = {}
    if fitted is None and args.routing_knobs is None:
        routing, spreads = _with_priors(model, hardware, workload, routing, batch, args.independent, stage)
    stage(2, len(PLAN_STAGES), PLAN_STAGES[2])
    result = plan(model, hardware, workload, routing, batch)
    rep = result.to_dict()
    for key, spread in spreads.items():
        if spread is not None:
            rep[key] = {k: v for k, v in spread.items() if k != "note"}
            rep["notes"] = [*rep["notes"], spread["note"]]
    _feasible_only(rep)
    _routing_ranges(rep)
    if fitted is None:
        stage(3, len(PLAN_STAGES), PLAN_STAGES[3])
        _add_engine_priors(rep, model, hardware, workload, routing, batch)
    rep["cache_auto"] = auto
    if auto is not None:
        rep["notes"] = [auto["note"], *rep["notes"]]
    if floor is not None:
        adm = admission_search(model, hardware, workload, routing, floor)
        rep["admit_batch"] = adm["admit_batch"]
        rep["admission"] = adm
    rep["workload"] = {**options, "ranks": ranks, "partition": args.partition, "rank_speed": speed}
    if fitted is not None:
        rep["fit"] = fitted
        taken = ", ".join(f"{k} = {v:.4g}" for k, v in fitted.items() if isinstance(v, float))
        rep["notes"] = [f"knobs from {fitted['path']} (moeroof fit-plan): {taken}", *rep["notes"]]
    return rep


def _add_engine_priors(rep: dict[str, Any], model, hardware, workload, routing, batch) -> None:
    """The engine fit-plan would hold for this unmeasured box, beside the preset's roofline: net
    tok/s at the engine priors, its range, what was held and the note."""
    from moeroof.models.engine_prior import prior_band

    band = prior_band(model, hardware, workload, routing, batch).to_dict()
    for end, key in (("", "net_tok_s"), ("_low", "low"), ("_high", "high")):
        rep[f"net_tok_s_at_priors{end}"] = band[key]
    rep.update(engine_priors={"held": band["held"], "sources": band["sources"]}, notes=[*rep["notes"], band["note"]])


#: what a zero-fit ``plan`` does, in order (its progress line names each as it begins)
PLAN_STAGES = ("the skew prior's ends", "the locality prior's ends", "the plan", "the engine priors")


def _with_priors(model, hardware, workload, routing, batch, independent: bool, stage):
    """A zero-fit plan's routing with one stream's locality at the locality prior's centre
    (:mod:`moeroof.data.locality`; none with ``independent``), and what no row can identify as the
    prediction at each prior's two ends: ``{"skew_band": …, "locality_band": …}`` (None where a
    prior does not apply: the skew prior's only on its own routing)."""
    from moeroof.models.local_routing import locality_band, skew_band, with_locality
    from moeroof.models.locality import Locality

    prior = None if independent else Locality.committed_for(model)
    stage(0, len(PLAN_STAGES), PLAN_STAGES[0])
    spreads = {"skew_band": skew_band(model, hardware, workload, routing, batch, prior)}
    stage(1, len(PLAN_STAGES), PLAN_STAGES[1])
    spreads["locality_band"] = locality_band(model, hardware, workload, routing, batch, prior)
    return with_locality(model, routing, prior, workload=workload), spreads


def _feasible_only(rep: dict[str, Any]) -> None:
    """No multiple on a batch that does not fit in RAM (B·K/U included: the baselines' are null
    already), and regime changes among the feasible batches only (a change "at B* = 1024" where
    1024 does not fit is no regime of this box)."""
    from moeroof.models.plan import transitions

    fits = [bool(x) for x in rep["fits_in_memory"]]  # their multiples are null already (Plan.to_dict)
    keep = [i for i, ok in enumerate(fits) if ok]
    batch = np.array([rep["batch"][i] for i in keep], dtype=np.int64)
    rep["transitions"] = [dict(t) for t in transitions(batch, tuple(rep["bound"][i] for i in keep))]
    if len(keep) < len(fits):
        rep["transitions_among"] = "feasible batches only"


def print_plan(rep: dict[str, Any]) -> None:
    prov = rep["provenance"]
    ranks = rep["ranks"]
    boxes = f"{ranks} × {rep['hardware']} ({rep['partition']} partition)" if ranks > 1 else rep["hardware"]
    print(f"net tok/s — {rep['model']} on {boxes}, routing {rep['routing']}, overlap {rep['overlap']}")
    if rep.get("cache_auto"):
        print(f"expert cache: auto, each B its own (column cache GiB), {rep['cache']}")
    else:
        print(f"expert cache: {fmt(max(rep['cache_gib'], default=0.0), 1)} GiB per box, {rep['cache']}")
    unwitnessed = f" (not witnessed: {', '.join(prov['non_witnessed'])})" if prov["non_witnessed"] else ""
    print(f"result: {prov['result']}{unwitnessed}")
    link = rep.get("link_name", "ssd")
    link = "SSD" if link == "ssd" else link
    # the schema's headers (moeroof.core.names), the streaming tier named for this box
    headers = [header(n).replace("SSD", link) if n == "ssd_bytes_per_token" else header(n) for n in TABLE_COLUMNS]
    print(table(headers, [_table_row(rep, i) for i in range(len(rep["batch"]))], ">>>>>><>>>>>>>><"))
    _print_below_table(rep)


def _table_row(rep: dict[str, Any], i: int) -> list[str]:
    """The readable table's cells at batch index i (:data:`TABLE_COLUMNS`), from the CSV's values:
    a range in its centre's cell."""
    v = _csv_row(rep, i)
    per_token = v["ssd_bytes_per_token"]
    cells = [str(v["batch"]), fmt(v["cache_gib"], 1), fmt(v["step_seconds"], 3), fmt(v["per_agent_tok_s"], 3)]
    cells.append(_with_range(v["net_tok_s"], _over_routing(rep, "net_tok_s", i), 3))
    priors = (v["net_tok_s_at_priors_low"], v["net_tok_s_at_priors_high"])
    cells += [_with_range(v["net_tok_s_at_priors"], priors, 3), _bound(rep, i)]
    cells += [fmt(None if per_token is None else per_token / 1e9, 3), fmt(v["union_per_layer"], 1)]
    cells.append(_with_range(v["cache_hit_rate"], _over_routing(rep, "cache_hit_rate", i), 1, 100.0))
    cells += [fmt(v[c], 2) for c in ("gib_streamed_per_step", "coalescing_ratio", *_MULTIPLES[:2])]
    return cells + [fmt(v[_MULTIPLES[2]], 3), "yes" if v["fits_in_memory"] else "NO"]


def _print_below_table(rep: dict[str, Any]) -> None:
    """What :func:`print_plan` prints under the table: per-rank steps, admission, regime changes,
    notes, infeasible batches and what the ranges and multiples are."""
    ranks = rep["ranks"]
    if ranks > 1:
        per = rep["per_rank_step_seconds"]
        cells = ", ".join(
            f"B={b}: " + " / ".join(fmt(per[r][i], 3) for r in range(ranks)) for i, b in enumerate(rep["batch"])
        )
        print(f"per-rank step s: {cells}")
    if "admission" in rep:
        adm = rep["admission"]
        if adm["admit_batch"] is None:
            print(
                f"admission: no B gives {adm['min_per_agent_tok_s']:g} tok/s per agent and fits in RAM: {adm['reason']}"
            )
        else:
            print(
                f"admission: admit_batch = {adm['admit_batch']} (≥ {adm['min_per_agent_tok_s']:g} tok/s per agent: "
                f"{adm['per_agent_tok_s']:.3g}; B·K/U = {adm['coalescing_ratio']:.2f}× against uncoalesced; "
                f"{adm['ssd_bytes_per_token'] / 1e9:.3g} GB SSD per token; cache {adm['cache_bytes'] / 2**30:.1f} GiB); "
                f"B = {adm['next_batch']} is refused: {adm['reason']}"
            )
    among = " (among the batches that fit in RAM)" if rep.get("transitions_among") else ""
    for t in rep["transitions"]:
        print(f"regime change: {t['from']} → {t['to']} at B* = {t['batch']}{among}")
    print_notes(rep["notes"])
    for b, why in zip(rep["batch"], rep.get("infeasible_reason") or []):
        if why:
            print(f"infeasible at B={b}: {why} (no multiple)")
    if any(_over_routing(rep, "net_tok_s", i) for i in range(len(rep["batch"]))):
        names = [w for k, w in (("skew_band", "the skew"), ("locality_band", "one stream's locality")) if rep.get(k)]
        which = (
            f"{names[0]} at its 5 % and 95 % ends"
            if len(names) == 1
            else "the skew's and one stream's locality's 5 % and 95 % ends, one at a time, the other at its centre"
        )
        print(
            f"ranges: net tok/s and hit % over the routing priors' ends ({which}; the notes above name them); "
            "tok/s at priors over the engine priors' ends"
        )
    print(
        "multiples: net tok/s against each named baseline; B·K/U is against uncoalesced; "
        "- where the step does not fit in RAM (no rate, no multiple)"
    )


def _bound(rep: dict[str, Any], i: int) -> str:
    """The binding term as the table shows it: the streaming tier by its name on this box, and
    ``RAM`` where the step does not fit (no term binds a step that cannot run)."""
    if not rep["fits_in_memory"][i]:
        return "RAM"
    return rep["bound"][i] if rep["bound"][i] != "ssd" else rep.get("link_name", "ssd")


#: the columns the readable table shows inside another's cell (a range in parentheses); the CSV's last
_IN_CELLS: tuple[str, ...] = ("net_tok_s_at_priors_low", "net_tok_s_at_priors_high", "net_tok_s_routing_low")
_IN_CELLS += ("net_tok_s_routing_high", "cache_hit_rate_routing_low", "cache_hit_rate_routing_high")
_MULTIPLES = ("multiple_vs_uncoalesced", "multiple_vs_single", "multiple_vs_independent_boxes")
#: the CSV's columns that are empty where the step does not fit in RAM (no rate, no multiple)
_RATES: tuple[str, ...] = ("step_seconds", "per_agent_tok_s", "net_tok_s", "bound", "ssd_bytes_per_token")
_RATES += ("cache_hit_rate", "gib_streamed_per_step", "coalescing_ratio", *_MULTIPLES)
#: ``--format csv``: one row per batch size (hit_rate a fraction: the mean over ranks with R > 1),
#: the same names as the JSON and the table (moeroof.core.names)
CSV_COLUMNS: tuple[str, ...] = ("batch", "cache_gib", "step_seconds", "per_agent_tok_s", "net_tok_s")
CSV_COLUMNS += ("net_tok_s_at_priors", "bound", "link_name", "ssd_bytes_per_token", "union_per_layer", "cache_hit_rate")
CSV_COLUMNS += ("gib_streamed_per_step", "coalescing_ratio", *_MULTIPLES)
CSV_COLUMNS += ("fits_in_memory", "infeasible_reason", *_IN_CELLS)
#: the readable table's columns: the CSV's but the link (named in the header), the reason
#: (printed below the table) and the ranges (in their centre's cell)
TABLE_COLUMNS = tuple(c for c in CSV_COLUMNS if c not in ("link_name", "infeasible_reason", *_IN_CELLS))


def _csv_row(rep: dict[str, Any], i: int) -> dict[str, Any]:
    """The values at batch index i by :data:`CSV_COLUMNS`: the rates and multiples None where the
    step does not fit in RAM, the ranges None where there is none."""
    fits = bool(rep["fits_in_memory"][i])
    row = {k: rep[k][i] for k in ("batch", "cache_gib", "step_seconds", "per_agent_tok_s", "net_tok_s")}
    # an at-priors value: None with --fit (the fit's knobs are the answer)
    row.update({k: (rep.get(k) or [None] * (i + 1))[i] for k in ("net_tok_s_at_priors", *_IN_CELLS[:2])})
    row.update(bound=_bound(rep, i), link_name=rep.get("link_name", "ssd"))
    row.update({k: rep[k][i] for k in ("ssd_bytes_per_token", "union_per_layer", "coalescing_ratio")})
    row["cache_hit_rate"] = _centre(rep, "cache_hit_rate", i)
    row["gib_streamed_per_step"] = rep["ssd_bytes_per_step"][i] / 2**30 if fits else None
    for column, baseline in zip(_MULTIPLES, ("uncoalesced", "single", "independent-boxes")):
        row[column] = rep["baselines"][baseline]["multiple"][i]
    if not fits:
        row.update(dict.fromkeys(_RATES))
    reasons = rep.get("infeasible_reason") or [None] * len(rep["batch"])
    row.update(fits_in_memory=fits, infeasible_reason=reasons[i] or None)
    for key in ("net_tok_s", "cache_hit_rate"):
        row[f"{key}_routing_low"], row[f"{key}_routing_high"] = _over_routing(rep, key, i) or (None, None)
    return row


def plan_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per batch; multiples empty where the step does not fit."""
    rows = [_csv_row(rep, i) for i in range(len(rep["batch"]))]
    return list(CSV_COLUMNS), [[row[c] for c in CSV_COLUMNS] for row in rows]


def _routing_ranges(rep: dict[str, Any]) -> None:
    """``net_tok_s_routing_low``/``_high`` and ``cache_hit_rate_routing_low``/``_high``: at each
    batch, the range over the routing priors' ends and the centre
    (:func:`moeroof.models.local_routing.over_prior_ends`); None where neither prior applies (a
    fit, a trace, ``--independent`` without the skew prior) or the step does not fit in RAM."""
    from moeroof.models.local_routing import over_prior_ends

    bands = [rep.get("skew_band"), rep.get("locality_band")]
    for key in ("net_tok_s", "cache_hit_rate"):
        spans = [over_prior_ends(_centre(rep, key, i), bands, key, i) for i in range(len(rep["batch"]))]
        rep[f"{key}_routing_low"] = [None if sp is None else sp[0] for sp in spans]
        rep[f"{key}_routing_high"] = [None if sp is None else sp[1] for sp in spans]


def _centre(rep: dict[str, Any], key: str, i: int) -> float | None:
    """``key`` at batch index i (a hit rate pooled over ranks); None where the step does not fit in RAM."""
    if not rep["fits_in_memory"][i]:
        return None
    return _pooled(rep[key], i) if key == "cache_hit_rate" else rep[key][i]


def _over_routing(rep: dict[str, Any], key: str, i: int) -> tuple[float, float] | None:
    """(low, high) of ``key`` at batch index i over the routing priors (:func:`_routing_ranges`)."""
    low, high = rep.get(f"{key}_routing_low"), rep.get(f"{key}_routing_high")
    return None if low is None or high is None or low[i] is None else (low[i], high[i])


def _with_range(value: float | None, span: tuple[float, float] | None, digits: int, scale: float = 1.0) -> str:
    """``value (low–high)`` as the table shows a centre and its range; the value alone without one."""
    if value is None:
        return fmt(None, digits)
    if span is None:
        return fmt(scale * value, digits)
    return f"{fmt(scale * value, digits)} ({fmt(scale * span[0], digits)}–{fmt(scale * span[1], digits)})"


def _pooled(hit: list, i: int) -> float:
    """The hit rate at batch index i; per-rank lists (R > 1) are shown as their mean."""
    return float(hit[i]) if not isinstance(hit[0], list) else sum(r[i] for r in hit) / len(hit)


def run(args: argparse.Namespace) -> int:
    with Progress("plan") as progress:  # a zero-fit plan runs the priors' ends too: seconds
        rep = plan_report(args, progress)
    return emit(rep, args, print_plan, csv_table=plan_csv)
