"""``moeroof plan``: net tok/s of B agents from the decode-step roofline (SSD, memory, compute,
fabric), what binds at each batch size, and multiples against named baselines.

::

    moeroof plan --model PRESET|FILE --hardware PRESET|FILE --batch 1,8,64 [--cache-gib X]
                 [--context N] [--overlap max|sum] [--routing uniform|zipf:S|PATH]
                 [--read-size-kib X] [--ranks R] [--json]

The numbers come from :func:`moeroof.models.plan.plan`; this module parses the flags into a
:class:`~moeroof.models.plan.Workload` and prints the result.
"""

from __future__ import annotations

import argparse
from typing import Any

from moeroof.cli.common import (
    UsageError,
    emit,
    fmt,
    non_negative_float,
    non_negative_int,
    parse_batch,
    positive_int,
    table,
)


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
    p.add_argument("--batch", required=True, help="batch sizes, comma-separated (e.g. 1,8,64)")
    p.add_argument("--cache-gib", default="0", help="expert cache in GiB (default 0)")
    p.add_argument("--context", default="4096", help="context tokens per agent (default 4096)")
    p.add_argument(
        "--overlap", default="max", choices=("max", "sum"), help="combine the terms by max (overlap) or sum (serial)"
    )
    p.add_argument(
        "--routing", default="uniform", help="uniform, zipf:S, or a histogram .csv / trace .npz path (default uniform)"
    )
    p.add_argument("--read-size-kib", default=None, help="SSD read size in KiB (default: one expert per read)")
    p.add_argument("--ranks", default="1", help="ranks the experts are split over (fabric term when > 1; default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)


def plan_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``plan`` JSON object (issue 3's contract) for parsed arguments."""
    from moeroof.core.units import to_si
    from moeroof.data.presets import load_hardware, load_model
    from moeroof.models.plan import Workload, plan, routing_from_spec

    batch = parse_batch(args.batch)
    cache = non_negative_float(args.cache_gib, "--cache-gib")
    context = non_negative_int(args.context, "--context")
    read_kib = None if args.read_size_kib is None else non_negative_float(args.read_size_kib, "--read-size-kib")
    if read_kib == 0:
        raise UsageError("--read-size-kib: must be > 0")
    ranks = positive_int(args.ranks, "--ranks")
    model = load_model(args.model)
    hardware = load_hardware(args.hardware)
    routing = routing_from_spec(args.routing, model)
    workload = Workload(
        context_tokens=context,
        cache_bytes=to_si(cache, "GiB"),
        overlap=args.overlap,
        read_size_bytes=None if read_kib is None else to_si(read_kib, "KiB"),
        ranks=ranks,
    )
    rep = plan(model, hardware, workload, routing, batch).to_dict()
    rep["workload"] = {
        "context_tokens": context,
        "cache_bytes": to_si(cache, "GiB"),
        "overlap": args.overlap,
        "read_size_bytes": workload.read_size_bytes,
        "ranks": ranks,
    }
    return rep


def print_plan(rep: dict[str, Any]) -> None:
    prov = rep["provenance"]
    print(f"net tok/s — {rep['model']} on {rep['hardware']}, routing {rep['routing']}, overlap {rep['overlap']}")
    print(
        f"result: {prov['result']}"
        + (f" (not witnessed: {', '.join(prov['non_witnessed'])})" if prov["non_witnessed"] else "")
    )
    headers = [
        "B",
        "step s",
        "tok/s/agent",
        "net tok/s",
        "bound",
        "SSD GB/token",
        "U/layer",
        "B·K/U",
        "× uncoalesced",
        "× single",
        "× indep-boxes",
        "fits RAM",
    ]
    rows = []
    for i, b in enumerate(rep["batch"]):
        base = rep["baselines"]
        rows.append(
            [
                str(b),
                fmt(rep["step_seconds"][i], 3),
                fmt(rep["per_agent_tok_s"][i], 3),
                fmt(rep["net_tok_s"][i], 3),
                rep["bound"][i],
                fmt(rep["ssd_bytes_per_token"][i] / 1e9, 3),
                fmt(rep["union_per_layer"][i], 1),
                fmt(rep["coalescing_ratio"][i], 2),
                fmt(base["uncoalesced"]["multiple"][i], 2),
                fmt(base["single"]["multiple"][i], 2),
                fmt(base["independent-boxes"]["multiple"][i], 3),
                "yes" if rep["fits_in_memory"][i] else "NO",
            ]
        )
    print(table(headers, rows, ">>>><>>>>>><"))
    for t in rep["transitions"]:
        print(f"regime change: {t['from']} → {t['to']} at B* = {t['batch']}")
    for note in rep["notes"]:
        print(f"note: {note}")
    print("multiples: net tok/s against each named baseline; B·K/U is against uncoalesced")


def run(args: argparse.Namespace) -> int:
    rep = plan_report(args)
    return emit(rep, args.json, print_plan)
