"""``moeroof fit-plan``: fit the step model's knobs to a box's measured points, predict the rest.

::

    moeroof fit-plan POINTS.csv --model PRESET|FILE --hardware PRESET|FILE [--routing SPEC]
                     [--routing-knobs FILE] [--fit engine,expert,ssd-scale,reclaim,reclaim-shape,pressure,skew,rho]
                     [--context N] [--page-cache] [--format table|json|csv] [--output FILE]

POINTS columns: ``batch``, ``cache_gib``, ``ranks``, ``policy``, ``net_tok_s``, ``hit_rate``
(empty: predict); see :mod:`moeroof.data.plan_points`. The fit is
:func:`moeroof.fit.plan.fit_plan`; this module parses the flags and prints its result.
"""

from __future__ import annotations

import argparse
from typing import Any

from moeroof.cli.flags import SET_HELP, Choice, Count, add_default, load_presets
from moeroof.cli.inputs import input_path, read_routing_knobs
from moeroof.cli.output import Progress, add_output_arguments, fmt, print_notes, runner, table
from moeroof.core.limits import usable_cores

#: the knobs --fit takes: moeroof.fit.plan.KNOBS, spelled here so that the parser needs no
#: scipy (tests/test_fit_plan.py holds the two equal)
KNOBS = ("engine", "expert", "ssd-scale", "reclaim", "reclaim-shape", "pressure", "skew", "rho")
#: library parameter → the flag that carries it (moeroof.cli.app prints ParameterErrors with it)
PARAMETER_FLAGS = {"family": "--routing-knobs"}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "fit-plan",
        help="fit the step model's knobs (engine terms, SSD scale, reclaim, page-cache share, skew, stickiness) to measured points",
        description=(
            "Calibrate on the rows of POINTS.csv that carry a measured net_tok_s or hit_rate, predict the rows "
            "that do not, with 5-95 %% bands; every prediction is `moeroof plan` with the fitted knobs."
        ),
    )
    p.add_argument("path", metavar="POINTS", help="CSV: batch, cache_gib, ranks, policy, net_tok_s, hit_rate")
    p.add_argument("--model", required=True, help="model preset name or TOML path")
    p.add_argument("--hardware", required=True, help="hardware preset name or TOML path")
    p.add_argument(
        "--routing",
        default="prior",
        help="prior (the skew prior, default), uniform, zipf:S, dirichlet:A (the start of a skew fit) "
        "or a histogram/trace path",
    )
    p.add_argument(
        "--routing-knobs",
        help="a `moeroof fit-routing --json` result: the cache runs on a trace sampled from its knobs",
    )
    p.add_argument(
        "--fit",
        type=Choice(KNOBS, many=True),
        help=f"knobs to fit, comma-separated from {','.join(KNOBS)} "
        "(default: what the rows identify, and a memory knob where they rule one in)",
    )
    add_default(p, "--context", "4096", "context tokens per agent", type=Count(min=0))
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help=SET_HELP)
    p.add_argument("--page-cache", action="store_true", help="experts read through the OS page cache (see plan)")
    p.add_argument(
        "--overlap",
        choices=("max", "sum"),
        help="how the step's terms combine; default: fit both, keep the better, and widen the bands by the other "
        "when it meets the calibration rows too",
    )
    p.add_argument(
        "--no-locality-prior",
        action="store_true",
        help="run the cache on independent tokens instead of holding stickiness "
        "and per-stream locality at the locality prior fitted on real decode (data/fits/locality-prior.json)",
    )
    add_output_arguments(p)


def fit_plan_report(args: argparse.Namespace) -> dict[str, Any]:
    from moeroof.data.io import InputError
    from moeroof.data.plan_points import read_plan_points
    from moeroof.fit.plan import fit_plan
    from moeroof.models.local_routing import routing_from_knobs, spec_skew
    from moeroof.models.locality import Locality
    from moeroof.models.plan import routing_from_spec

    fit, context = args.fit, args.context
    path = input_path(args.path)
    points = read_plan_points(path)
    model, hardware = load_presets(args)
    for pt in points:  # a row's ranks, named in the file: plan's own check would say --ranks
        if pt.ranks > model.experts:
            raise InputError(path, pt.row, "ranks", f"{pt.ranks} ranks for the model's {model.experts} experts")
    if args.routing_knobs is not None:
        streams = max(p.batch for p in points)  # the cache runs on a trace sampled from the knobs
        routing = routing_from_knobs(model, *read_routing_knobs(args.routing_knobs), streams=streams)
        is_spec = False
    else:
        routing = routing_from_spec(args.routing, model)
        is_spec = spec_skew(routing) is not None
    with Progress("fit-plan") as progress:
        res = fit_plan(
            points,
            model,
            hardware,
            routing,
            fit=fit,
            context_tokens=context,
            page_cache=args.page_cache,
            routing_is_spec=is_spec,
            overlap=args.overlap,
            locality=None if args.no_locality_prior else Locality.committed_for(model),
            progress=progress,
            # the two overlaps side by side where this process may use two cores (the same numbers)
            jobs=min(2, usable_cores()),
        )
    rep = res.to_dict()
    rep.update(
        model=model.name,
        hardware=hardware.name,
        # the skew family the fit chose where it is not the given routing's (its knobs are that family's)
        routing=res.family_routing or routing.label,
        points=str(args.path),
        context_tokens=context,
        page_cache=bool(args.page_cache),
        # what plan --fit runs on: the routing as given (a knob file's routing is not a spec)
        routing_spec=None if args.routing_knobs is not None else args.routing,
    )
    return rep


def print_fit_plan(rep: dict[str, Any]) -> None:
    print(
        f"fit-plan — {rep['model']} on {rep['hardware']}, routing {rep['routing']}, overlap {rep['overlap']}; "
        f"fitted: {', '.join(rep['fitted'])}"
    )
    for name, k in rep["knobs"].items():
        band = "" if "low" not in k else f"  [{fmt(k['low'], 4)}, {fmt(k['high'], 4)}]"
        if k.get("fitted"):
            why = "" if k.get("identified", True) else f"  — not identified: {k.get('why', 'the rows do not bound it')}"
            print(f"  {name} = {fmt(k['value'], 4)} {k.get('unit', '')}{band}{why}")
        elif k.get("held", "").startswith("prior"):
            held = f"held at its {k['held']}{band} — {k.get('why', '')}"
            print(f"  {name} = {fmt(k['value'], 4)} {k.get('unit', '')} {held}")
    headers = ["row", "B", "cache GiB", "ranks", "policy", "role", "measured", "predicted", "5 %", "95 %", "hit % pred"]
    rows = [
        [str(r["row"]), str(r["batch"]), fmt(r["cache_gib"], 1), str(r["ranks"]), r["policy"], r["role"]]
        + [fmt(r[c], 3) for c in ("measured", "predicted", "low", "high")]
        + [fmt(100 * r["predicted_hit_rate"], 1)]
        for r in rep["rows"]
    ]
    print(table(headers, rows, ">>>>><>>>>>"))
    print_notes(rep["notes"])
    from moeroof.models.curve_peak import peak_note

    for peak in rep.get("peaks", ()):
        print(f"peak: {peak_note(peak)}")
    print("net tok/s; bands: 5-95 % of a new measurement (the fitted knobs' spread, the seeds, the measurement noise)")


#: ``--format csv``: one row per POINTS row (predicted_hit_rate a fraction)
CSV_COLUMNS: tuple[str, ...] = ("row", "batch", "cache_gib", "ranks", "policy", "role", "measured", "predicted", "low")
CSV_COLUMNS += ("high", "predicted_hit_rate")


def fit_plan_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per POINTS row, measured against predicted net tok/s with the band."""
    return list(CSV_COLUMNS), [[r.get(c) for c in CSV_COLUMNS] for r in rep["rows"]]


run = runner(fit_plan_report, print_fit_plan, fit_plan_csv)
