"""``moeroof split``: partition a firing histogram's experts over ranks and predict each rank's
decode step.

::

    moeroof split HISTOGRAM --ranks R --method id|lpt|weighted|bytes [--rank-speed 1,0.6]
                  [--batch M] [--cache-gib X] [--cache-policy lru|…|static] [--context N]
                  [--model PRESET|FILE] [--hardware PRESET|FILE] [--set FIELD=VALUE]
                  [--format table|json|csv] [--output FILE]

The partition, the per-rank load and the step model are :func:`moeroof.models.split.split_report`
— the step model of ``moeroof plan``, with the same defaults for the flags they share, so
``plan --ranks R --partition M`` and ``split --method M`` agree; this module parses the flags
and prints its result.
"""

from __future__ import annotations

import argparse
from typing import Any

from moeroof.cli.flags import (
    PARTITIONS,
    RANK_SPEED,
    SET_HELP,
    Count,
    add_default,
    add_step_arguments,
    load_presets,
    resolve_auto_cache,
    step_options,
)
from moeroof.cli.inputs import input_path
from moeroof.cli.output import add_output_arguments, emit, fmt, print_notes, table
from moeroof.core.limits import MAX_BATCH

METHODS = PARTITIONS
#: library parameter → the flag that carries it (moeroof.cli.app prints ParameterErrors with it)
PARAMETER_FLAGS = {"cache_gib_per_rank": "--cache-gib"}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "split",
        help="partition experts over ranks (id, lpt, weighted, bytes) and predict each rank's step",
        description=(
            "Split a firing histogram's experts over ranks: contiguous ids, equal-cardinality LPT "
            "(DeepSeek EPLB's balanced_packing), weighted by per-rank speed, or balancing expected "
            "streamed bytes; reports per-rank load, imbalance and the predicted per-rank step."
        ),
    )
    p.add_argument("path", metavar="HISTOGRAM", help="histogram .csv with its sidecar .json")
    p.add_argument("--ranks", required=True, type=Count(min=1), help="number of ranks")
    p.add_argument("--method", required=True, choices=METHODS, help="partition method")
    p.add_argument("--rank-speed", type=RANK_SPEED, help="relative speed per rank, comma-separated (e.g. 1,0.6)")
    add_default(p, "--batch", "8", "concurrent streams M for the step model", type=Count(min=1, max=MAX_BATCH))
    add_step_arguments(p)
    add_default(p, "--model", "glm-5-nvfp4", "model preset or TOML for the step model")
    add_default(p, "--hardware", "gb10", "hardware preset or TOML per rank")
    p.add_argument(
        "--independent",
        action="store_true",
        help="a stream's tokens independent of one another instead of the locality prior fitted on real decode "
        "(as plan --independent)",
    )
    p.add_argument("--set", action="append", metavar="FIELD=VALUE", help=SET_HELP)
    add_output_arguments(p)


def split_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``split`` JSON object for parsed arguments (the library builds it)."""
    from moeroof.models.locality import Locality
    from moeroof.models.split import split_report as build

    options = step_options(args)
    batch = args.batch
    model, hardware = load_presets(args)
    auto = resolve_auto_cache(options, model, hardware, [batch])
    step = {k: v for k, v in options.items() if k not in ("cache_bytes", "cache_auto")}  # the step model's
    rep = build(
        input_path(args.path),
        args.ranks,
        args.method,
        args.rank_speed,
        batch=batch,
        cache_gib_per_rank=options["cache_bytes"] / 2**30,
        model=model,
        hardware=hardware,
        locality=None if args.independent else Locality.committed_for(model),
        **step,
    )
    rep["cache_gib"] = options["cache_bytes"] / 2**30
    rep["cache_auto"] = auto
    if auto is not None:
        rep["notes"] = [auto["note"], *rep.get("notes", [])]
    return rep


def print_split(rep: dict[str, Any], source: str) -> None:
    print(f"expert split — {source}, {rep['ranks']} ranks, method {rep['method']}")
    if "cache_policy" in rep.get("inputs", {}):
        print(f"expert cache: {rep['inputs']['cache']}")
    pred = rep.get("predicted_step_seconds")
    headers = ["rank", "experts", "load rows"] + ["predicted step s"] * (pred is not None)
    rows = [[str(r), str(n), str(load)] + [fmt(p, 3)] * (pred is not None) for r, n, load, p, *_ in split_csv(rep)[1]]
    print(table(headers, rows, ">" * len(headers)))
    print(f"imbalance (max/mean load rows): {rep['imbalance']:.4f}×")
    for key, value in rep.get("imbalance_by", {}).items():
        print(f"  imbalance by {key}: {value:.4f}×")
    if rep.get("tok_s") is not None:
        print(
            f"predicted step {rep['step_seconds']:.3f} s, {rep['tok_s']:.3f} tok/s (the pair runs at its slowest rank)"
        )
    print_notes(rep.get("notes", []))


#: ``--format csv``: one row per rank
CSV_COLUMNS: tuple[str, ...] = ("rank", "experts", "load_rows", "predicted_step_seconds", "streamed_gib_per_step")
CSV_COLUMNS += ("cache_hit_rate", "bound", "method", "imbalance")


def split_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per rank (experts, load, predicted step, streamed GiB, hit rate)."""
    per = rep.get("per_rank") or {}
    pred = rep.get("predicted_step_seconds")

    def at(values: Any, r: int) -> Any:
        return values[r] if isinstance(values, list) and r < len(values) else None

    rows = [
        [r, rep["experts_per_rank"][r], rep["load_rows"][r], at(pred, r)]
        + [at(per.get(k), r) for k in ("streamed_gib", "cache_hit", "bound")]
        + [rep["method"], rep["imbalance"]]
        for r in range(rep["ranks"])
    ]
    return list(CSV_COLUMNS), rows


def run(args: argparse.Namespace) -> int:
    return emit(split_report(args), args, lambda r: print_split(r, args.path), csv_table=split_csv)
