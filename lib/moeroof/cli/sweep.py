"""``moeroof sweep``: a grid of ``plan`` / ``cache`` / ``union`` / ``fit-routing`` points evaluated
serially or as tasks on dask.distributed, one Parquet row per point.

::

    moeroof sweep GRID.toml -o OUT.parquet [--workers N] [--scheduler ADDRESS]
                  [--format table|json|csv] [--report-output FILE]

``-o`` is the Parquet file of the rows; the printed summary (``--format csv``: one row) goes to
stdout or ``--report-output FILE``.

The grid format, the commands and their keys (:data:`moeroof.run.sweep.KEYS`), the point
ids, resuming and the row schema are :mod:`moeroof.run.sweep`'s; the help's epilog lists the
keys. Building this parser imports no dask: :func:`run` does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from moeroof.cli.flags import WORKERS, UsageError
from moeroof.cli.inputs import input_path
from moeroof.cli.output import Progress, add_output_arguments, check_output_file, emit, fmt, run_record

EPILOG = """\
grid keys per command (* required; paths are read from the working directory, else data/):
  plan         model*, hardware*, batch*, cache_gib (GiB or "auto"), cache_policy, cache_scope,
               context, overlap, routing, read_size_kib, ranks, partition, seed, page_cache
  union        batch*; histogram (a path), or experts, top_k, layers (the uniform closed form)
  cache        capacity* (experts), policy, scope, warmup_steps, streams (B), and either
               trace (a file; streams takes its first B) or a synthetic trace sampled per point:
               routing (uniform | zipf:S | dirichlet:ALPHA), experts, top_k, layers, steps, streams,
               seed (all required with routing), rho (stickiness, default 0) -- the trace
               `moeroof trace` writes for the same knobs and seed
  fit-routing  points* (a POINTS .csv), experts*, top_k*, layers*, expert_bytes, seeds (fit seeds,
               default 4), seed (the first, default 0), bootstrap (8), timed_steps (16), families
               (default "dirichlet,zipf"), max_sim_layers (16), max_history (2048), calibrate
               ("all", or the POINTS line numbers that calibrate, e.g. "8,10"; the other measured
               rows are held out and scored)

examples: data/sweeps/example-plan.toml (36 points), example-cache-policy.toml (360),
example-fit-routing.toml (12)
"""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="a grid of plan / cache / union / fit-routing points, serially or on dask.distributed, to Parquet",
        description=(  # line breaks kept (the epilog's table needs the raw formatter)
            "Evaluate every point of a grid TOML (axes as lists or {start, stop, step} ranges,\n"
            "command = plan | cache | union | fit-routing, fixed inputs in [fixed]) and write one\n"
            "Parquet row per point (inputs, outputs, provenance; a failed point keeps its error in\n"
            "the error column). A run on an existing OUT skips the points it already holds (failed\n"
            "points are tried again)."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("grid", metavar="GRID.toml", help="the grid file (examples in data/sweeps/)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT.parquet",
        help="the Parquet file to write (resumed); the printed summary goes to --report-output",
    )
    p.add_argument(
        "--workers",
        default="1",
        type=WORKERS,
        help="worker processes of a local dask.distributed cluster (default 1: serial, no cluster)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on an existing dask.distributed scheduler (tcp://host:8786) instead of a local cluster",
    )
    add_output_arguments(p, output=False)


def print_summary(rep: dict[str, Any]) -> None:
    print(
        f"sweep {rep['grid']} ({rep['command']}): {rep['points']} points, {rep['skipped']} already in "
        f"{rep['output']}, {rep['evaluated']} evaluated ({rep['failed']} failed) in {fmt(rep['seconds'], 3)} s, "
        f"{rep['where']}"
    )
    if rep["failed"]:
        print("failed points keep their error in the 'error' column; run again to retry them")


#: ``--format csv``: the one row of the summary
CSV_COLUMNS = ("grid", "command", "output", "points", "skipped", "evaluated", "failed", "seconds", "where")


def sweep_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row, the sweep's summary (the points themselves are the Parquet rows)."""
    return list(CSV_COLUMNS), [[rep.get(c) for c in CSV_COLUMNS]]


def run(args: argparse.Namespace) -> int:
    from moeroof.core import atomic
    from moeroof.run.sweep import read_grid, run_sweep

    workers = args.workers
    grid_path = input_path(args.grid)
    out = check_output_file(args.output, "--output")
    if atomic.same_file(out, grid_path):
        raise UsageError(f"--output: {args.output} is the grid file; refusing to overwrite it")
    grid = read_grid(grid_path)
    with Progress("sweep") as progress:
        rep = run_sweep(grid, out, workers=workers, scheduler=args.scheduler, progress=progress, run=run_record(args))
    print(f"wrote {out}", file=sys.stderr)
    return emit(rep, args, print_summary, csv_table=sweep_csv)
