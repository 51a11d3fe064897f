"""``moeroof fit-routing``: fit routing knobs (family, skew, stickiness, per-stream locality, warm
history) to measured cache and routing points, and predict the rows left empty with bands.

::

    moeroof fit-routing POINTS.csv --experts E --top-k K --layers L [--expert-bytes N]
                        [--seeds 4] [--bootstrap 8] [--timed-steps 16] [--format table|json|csv] [--output FILE]

POINTS (:mod:`moeroof.data.points`): ``kind,batch,capacity_experts_per_layer|capacity_gib,policy,scope,
ranks,partition,value``; rows with a value calibrate, rows without are predicted. The method is
:mod:`moeroof.fit.routing`'s.
"""

from __future__ import annotations

import argparse
from typing import Any

from moeroof.cli.flags import EXPERTS, LAYERS, REPLICATES, TOP_K, Bytes, Count, UsageError, add_default
from moeroof.cli.inputs import input_path
from moeroof.cli.output import Progress, add_output_arguments, fmt, jsonable, print_notes, runner, table
from moeroof.core.errors import ParameterError
from moeroof.core.limits import MAX_FIT_SEEDS, MAX_SIMULATED_STEPS


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "fit-routing",
        help="fit routing knobs to measured hit rates, GiB/step, unions and overlaps; predict the rest with bands",
        description="Fit the routing knobs (family, skew, stickiness rho, per-stream locality c, warm history) "
        "jointly to the rows of a POINTS file that carry a value, by least squares over simulated points at "
        "fixed seeds, and predict every row with a 5-95 % band (over the families that fit and the "
        "bootstrap draws of the knobs).",
    )
    p.add_argument(
        "path", metavar="POINTS", help="POINTS .csv (kind,batch,capacity_experts_per_layer|capacity_gib,...,value)"
    )
    p.add_argument("--experts", required=True, type=EXPERTS, help="routed experts per layer E")
    p.add_argument("--top-k", required=True, type=TOP_K, help="experts per token K")
    p.add_argument("--layers", required=True, type=LAYERS, help="MoE layers L (at most 16 are simulated)")
    p.add_argument("--expert-bytes", type=Bytes(), help="bytes of one expert of one layer (capacity_gib, gib_per_step)")
    add_default(p, "--seeds", "4", "fit seeds, common random numbers", type=Count(min=1, max=MAX_FIT_SEEDS))
    add_default(p, "--bootstrap", "8", "bootstrap replicates for intervals and bands", type=REPLICATES)
    add_default(
        p, "--timed-steps", "16", "counted decode steps per simulated run", type=Count(min=1, max=MAX_SIMULATED_STEPS)
    )
    p.add_argument(
        "--no-locality-prior",
        action="store_true",
        help="hold stickiness and per-stream locality the rows cannot identify at 0 and off, instead of at the "
        "locality prior fitted on real decode (data/fits/locality-prior.json, its spread in the bands)",
    )
    add_output_arguments(p)


def fit_routing_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``fit-routing`` JSON object for parsed arguments."""
    experts, top_k, layers, expert_bytes = args.experts, args.top_k, args.layers, args.expert_bytes
    if top_k > experts:
        raise UsageError(f"--top-k: K={top_k} exceeds --experts E={experts}")
    from moeroof.data.points import read_points
    from moeroof.fit.routing import fit_routing
    from moeroof.models.locality import Locality

    locality = None if args.no_locality_prior else Locality.committed()
    points = read_points(input_path(args.path), experts=experts, expert_bytes=expert_bytes)
    knobs: dict[str, Any] = dict(
        seeds=range(args.seeds), bootstrap=args.bootstrap, timed_steps=args.timed_steps, locality=locality
    )
    try:
        with Progress("fit-routing") as progress:
            result = fit_routing(points, experts, top_k, layers, expert_bytes, progress=progress, **knobs)
    except ParameterError:
        raise
    except ValueError as exc:
        if str(exc).startswith("row "):  # the library knows the row, the command line the file
            raise ValueError(f"{args.path}:{str(exc)[4:]}") from None
        raise
    return {**jsonable(result.to_dict()), "source": str(args.path), "provenance": "projected"}


def _interval(k: dict[str, Any], name: str = "") -> str:
    # an infinite locality c (null in the JSON) is "off": no per-stream hot set
    def end(v: Any) -> str:
        return "off" if v is None and name == "locality_c" else fmt(v, 3)

    return f"[{end(k.get('low'))}, {end(k.get('high'))}]"


def _capacity(per_layer: Any, gib: Any) -> str:
    if per_layer is not None:
        return fmt(per_layer, 1) + "/layer"
    return "-" if gib is None else fmt(gib, 1) + " GiB"


def print_fit_routing(rep: dict[str, Any]) -> None:
    print(f"routing knobs fitted to {rep.get('source')} — E={rep['experts']} K={rep['top_k']} L={rep['layers']}")
    families = [(n, fmt(f["residual"], 3), "fits" if f["fits"] else "does not fit") for n, f in rep["families"].items()]
    print("families: " + "; ".join(f"{n} residual {residual} {fits}" for n, residual, fits in families))
    print(f"chosen: {rep['family']}")
    for name, k in rep["knobs"].items():
        value = "off" if name == "locality_c" and k.get("off") else fmt(k.get("value"), 3)
        how = "fitted " + _interval(k, name) if k.get("fitted") else f"held ({k.get('held', 'default')})"
        print(f"  {name:<15} {value:>10}  {how}")
    rows = [  # the CSV's rows, the capacity in one cell
        [str(row), kind, str(batch), _capacity(per_layer, gib), "-" if policy is None else policy]
        + [fmt(x, 3) for x in values]
        for row, kind, batch, per_layer, gib, policy, *values in fit_routing_csv(rep)[1]
    ]
    headers = ["row", "kind", "batch", "capacity", "policy", "measured", "predicted", "low", "high"]
    print(table(headers, rows, "><>>>>>>>"))
    print_notes(rep.get("notes", []))


#: ``--format csv``: one row per POINTS row
CSV_COLUMNS: tuple[str, ...] = ("row", "kind", "batch", "capacity_experts_per_layer", "capacity_gib", "policy")
CSV_COLUMNS += ("measured", "predicted", "low", "high")


def fit_routing_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per POINTS row, measured against predicted with the 5-95 % band
    (the fitted knobs are in the JSON); the policy only on the rows a cache policy makes."""
    cache_row = ("hit_rate", "gib_per_step")
    rows = [
        [r.get(c) if c != "policy" or r.get("kind") in cache_row else None for c in CSV_COLUMNS] for r in rep["rows"]
    ]
    return list(CSV_COLUMNS), rows


run = runner(fit_routing_report, print_fit_routing, fit_routing_csv)
