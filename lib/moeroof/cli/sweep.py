"""``moeroof sweep``: a grid of ``plan`` / ``cache`` / ``union`` points evaluated serially or as
tasks on dask.distributed, one Parquet row per point.

::

    moeroof sweep GRID.toml -o OUT.parquet [--workers N] [--scheduler ADDRESS] [--json]

The grid format, the point ids, resuming and the row schema are
:mod:`moeroof.studies.sweep`'s. Building this parser imports no dask: :func:`run` does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from moeroof.cli.common import (
    Progress,
    UsageError,
    add_output_arguments,
    check_output_file,
    emit,
    fmt,
    input_path,
    positive_int,
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="a grid of plan / cache / union points, serially or on dask.distributed, to Parquet",
        description=(
            "Evaluate every point of a grid TOML (axes as lists or {start, stop, step} ranges, a "
            "command = plan | cache | union, fixed inputs in [fixed]) and write one Parquet row per point "
            "(inputs, outputs, provenance; a failed point keeps its error in the error column). A run on "
            "an existing OUT skips the points it already holds (failed points are tried again)."
        ),
    )
    p.add_argument("grid", metavar="GRID.toml", help="the grid file (examples in data/sweeps/)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.parquet", help="the Parquet file to write (resumed)")
    p.add_argument(
        "--workers",
        default="1",
        help="worker processes of a local dask.distributed cluster (default 1: serial, no cluster)",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run on an existing dask.distributed scheduler (tcp://host:8786) instead of a local cluster",
    )
    add_output_arguments(p, output=False)
    p.set_defaults(func=run)


def print_summary(rep: dict[str, Any]) -> None:
    print(
        f"sweep {rep['grid']} ({rep['command']}): {rep['points']} points, {rep['skipped']} already in "
        f"{rep['output']}, {rep['evaluated']} evaluated ({rep['failed']} failed) in {fmt(rep['seconds'], 3)} s, "
        f"{rep['where']}"
    )
    if rep["failed"]:
        print("failed points keep their error in the 'error' column; run again to retry them")


def run(args: argparse.Namespace) -> int:
    from moeroof.studies.sweep import read_grid, run_sweep

    workers = positive_int(args.workers, "--workers")
    grid_path = input_path(args.grid)
    out = check_output_file(args.output, "--output")
    if out.resolve() == grid_path.resolve():
        raise UsageError(f"--output: {args.output} is the grid file; refusing to overwrite it")
    grid = read_grid(grid_path)
    progress = Progress("sweep")
    try:
        rep = run_sweep(grid, out, workers=workers, scheduler=args.scheduler, progress=progress)
    finally:
        progress.close()
    print(f"wrote {out}", file=sys.stderr)
    return emit(rep, args, print_summary)
