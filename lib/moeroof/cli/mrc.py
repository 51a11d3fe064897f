"""``moeroof mrc``: the LRU hit rate at every cache capacity of a trace in one pass (Mattson
stack distances), or the SHARDS sampling estimate, with the Che approximation beside it.

::

    moeroof mrc TRACE [--sample-rate R] [--seed 0] [--lookup layer|request] [--json]
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from moeroof.cli.cache import LOOKUP_HELP, LOOKUPS
from moeroof.cli.common import (
    UsageError,
    add_meta_arguments,
    add_output_arguments,
    emit,
    fmt,
    jsonable,
    non_negative_int,
    positive_float,
    read_trace_arg,
    table,
)
from moeroof.data.io import InputError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "mrc",
        help="LRU hit rate at every capacity in one pass (stack distances), or a SHARDS estimate",
        description=(
            "Exact LRU hit-rate curve for every capacity in experts (Mattson stack distances; one "
            "cache shared by all layers, every request counted), or with --sample-rate the SHARDS "
            "spatial-sampling estimate; the Che approximation from the trace's request counts beside it."
        ),
    )
    p.add_argument("path", metavar="TRACE", help="trace .npz / .npy")
    p.add_argument("--sample-rate", default=None, help="SHARDS sampling rate R in (0, 1] (default: exact)")
    p.add_argument("--seed", default="0", help="seed of the SHARDS hash (default 0)")
    p.add_argument("--lookup", default="layer", choices=LOOKUPS, help=LOOKUP_HELP)
    add_meta_arguments(p)
    add_output_arguments(p)
    p.set_defaults(func=run)


def mrc_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``mrc`` JSON object for parsed arguments."""
    from moeroof.models.cache import (
        che_hit_curve,
        lru_hit_curve,
        request_histogram,
        requests_from_trace,
        shards_hit_curve,
    )

    rate = None if args.sample_rate is None else positive_float(args.sample_rate, "--sample-rate")
    if rate is not None and rate > 1:
        raise UsageError(f"--sample-rate: must lie in (0, 1], got {args.sample_rate!r}")
    seed = non_negative_int(args.seed, "--seed")
    trace = read_trace_arg(args.path, args)
    requests = requests_from_trace(trace.topk, trace.experts)
    if len(requests) == 0:
        raise InputError(trace.path, "-", "topk", "the trace requests no expert (all padding)")
    notes = [
        "one LRU cache shared by all layers, unit sizes, every request counted (no warm-up)",
        "hits judged as each (step, layer) lookup starts"
        if args.lookup == "layer"
        else "hits judged request by request in ascending expert id",
    ]
    if rate is None:
        cap, hit = lru_hit_curve(requests, lookup=args.lookup)
        method = "exact-lru (Mattson stack distances)"
    else:
        cap, hit = shards_hit_curve(requests, rate, seed=seed, lookup=args.lookup)
        method = "shards"
        notes.append(
            f"SHARDS estimate at rate {rate:g}: capacities below {math.ceil(1 / rate)} experts are not resolved"
        )
    counts = request_histogram(requests)  # requests per item: Che's rates and the distinct count
    n_requests = len(requests)
    del requests  # its arrays are as long as the trace; only the curve and the counts remain
    che = che_hit_curve(counts, cap)
    notes.append(
        "che: independent-reference approximation from the trace's request counts; "
        "it ignores the step order a trace has (an approximation, not a bound)"
    )
    return jsonable(
        {
            "capacity_experts": cap,
            "hit_rate": hit,
            "che_hit_rate": che,
            "method": method,
            "lookup": args.lookup,
            "sample_rate": rate,
            "requests": n_requests,
            "distinct_items": int(np.count_nonzero(counts)),
            "steps": trace.steps,
            "layers": trace.layers,
            "experts": trace.experts,
            "source": str(trace.path),
            "provenance": trace.meta.get("provenance"),
            "notes": notes,
        }
    )


def print_mrc(rep: dict[str, Any]) -> None:
    print(f"LRU hit rate by capacity — {rep['source']} ({rep['method']})")
    cap = rep["capacity_experts"]
    picks = sorted({int(round(q * (len(cap) - 1))) for q in np.linspace(0, 1, 11)})
    rows = [[str(cap[i]), fmt(rep["hit_rate"][i], 4), fmt(rep["che_hit_rate"][i], 4)] for i in picks]
    print(table(["capacity (experts)", "hit rate", "che"], rows, ">>>"))
    for note in rep["notes"]:
        print(f"note: {note}")


def run(args: argparse.Namespace) -> int:
    rep = mrc_report(args)
    return emit(rep, args, print_mrc, csv_table=mrc_csv)


def mrc_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per capacity (the whole curve)."""
    cols = ["capacity_experts", "hit_rate", "che_hit_rate"]
    return cols, [list(row) for row in zip(*(rep[c] for c in cols))]
