"""``moeroof validate``: every held-out case, fitted only on its calibration, against what was
measured (:mod:`moeroof.studies.held_out`).

::

    moeroof validate [--groups step,cache,skew,locality,regimes,routing] [--format table|json|csv] [--output FILE]

One row per held-out point: the case, its role (``prediction`` or ``consistency``), what it was
calibrated on, measured, predicted, the error (relative or in points) and, where the case has a
band, whether the measurement lies inside it; then one line per case. The ``locality`` group
reads the real captures from ``../shared/data/external`` and says so when they are absent.
"""

from __future__ import annotations

import argparse
from typing import Any

from moeroof.cli.flags import Choice
from moeroof.cli.output import Progress, add_output_arguments, fmt, runner, table

#: moeroof.studies.held_out.GROUPS, spelled out so that building the parser imports no study
#: (tests/test_cli_flags.py checks that they agree)
GROUPS = ("step", "cache", "skew", "locality", "regimes", "routing")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate",
        help="every held-out validation case against its published or captured measurement",
        description=(
            "Print every validation case: fitted only on what it names as calibration (or on nothing), "
            "its predictions against the measurements it was not fitted on, with the error and, where the "
            "case has one, whether the measurement lies inside its band (a fit's 5-95 %, or a zero-fit row's engine-prior range)."
        ),
    )
    p.add_argument(
        "--groups",
        default=",".join(GROUPS),
        type=Choice(GROUPS, many=True),
        help="which cases, comma separated: step (throughput and bytes), cache (single-stream caches), skew (the "
        "zero-fit routings against a published routing skew), "
        "locality (the locality prior, leave one capture out), regimes (fit-plan across concurrency and "
        "memory pressure: seed 003's withheld rows, mlx-lm#1438's peak), routing (fit-routing on seed 003's "
        "public pair rows: its withheld rows, one booster at M = 1 among them) (default: all)",
    )
    add_output_arguments(p)


def validate_report(args: argparse.Namespace) -> dict[str, Any]:
    from moeroof.core.limits import usable_cores
    from moeroof.studies.held_out import held_out_rows, summarise

    groups = list(args.groups)
    with Progress("validate") as progress:
        # fit-plan's two overlaps side by side where two cores are free (the same numbers)
        rows, skipped = held_out_rows(groups, progress=progress, jobs=min(2, usable_cores()))
    return {"groups": groups, "rows": rows, "cases": summarise(rows), "skipped": skipped, "provenance": "projected"}


def _err(r: dict[str, Any]) -> str:
    if r["error"] is None:
        return "-"
    if r["error_unit"] == "points":
        return f"{r['error'] * 100:+.1f} pt"
    return f"{r['error'] * 100:+.0f} %"


def _band(r: dict[str, Any]) -> str:
    """``low–high`` where the row has a band (a withheld row's too: what its truth is held to)."""
    if r.get("low") is None or r.get("high") is None:
        return "-"
    return f"{fmt(r['low'], 3)}–{fmt(r['high'], 3)}"


def print_validate(rep: dict[str, Any]) -> None:
    rows = [
        [r["case"], r["role"], str(r["quantity"])[:48], "-" if r["at"] is None else str(r["at"])]
        + [fmt(r["measured"], 3), fmt(r["predicted"], 3), _band(r), _err(r)]
        + ["-" if r["inside"] is None else ("yes" if r["inside"] else "no")]
        for r in rep["rows"]
    ]
    headers = ["case", "role", "quantity", "at", "measured", "predicted", "band", "error", "in band"]
    print(table(headers, rows, "<<<>>>>>>"))
    print()
    for c in rep["cases"]:
        unit = "points" if c["error_unit"] == "points" else "%"
        band = "" if c["inside_band"] is None else f"; {c['inside_band']:.0%} inside the band"
        err = "none measured" if c["mean_abs_error"] is None else f"{c['mean_abs_error'] * 100:.1f} {unit}"
        print(f"{c['case']} ({c['role']}, {c['rows']} rows): mean |error| {err}{band}")
    for what, why in rep["skipped"].items():
        print(f"skipped {what}: {why}")
    print("every number is projected (the models on the suite's inputs) against the measurements named in each case")


def csv_table(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    from moeroof.studies.held_out import COLUMNS

    return list(COLUMNS), [[r[c] for c in COLUMNS] for r in rep["rows"]]


run = runner(validate_report, print_validate, csv_table)
