"""``moeroof report``: render notebooks into reports, each run in its own folder.

::

    moeroof report [--notebooks NAME ...] [-p NAME VALUE ...] [-f PARAMS.yaml] [--out DIR]
                   [--format table|json|csv] [--report-output FILE]

The same renderer as ``make report`` (:mod:`moeroof.present.report`, which documents where each
run writes): without parameters ``reports/NAME.html`` and the committed ``figures/``; with
``-p``/``-f`` ``reports/NAME/<params-hash>/`` (report, executed notebook, figures); with
``--out DIR`` under ``DIR``. Paths given as parameters resolve against the working directory.
The parser imports nothing heavy: papermill and nbconvert load only when a render starts.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from moeroof.cli.flags import Count, Real
from moeroof.cli.output import FORMATS, REPORT_OUTPUT_HELP, emit, output_format
from moeroof.present import report

#: the renderer's numeric flags (moeroof.present.report adds them with type=int / float, below
#: this layer), declared here as the command line's other flags are
NUMBERS = {"--jobs": Count(min=1), "--cell-timeout": Real(min=0.0, open_low=True)}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="render notebooks into HTML reports (each run with parameters in its own folder)",
        description=(
            "Execute the notebooks with papermill and write .ipynb and .html reports plus their figures. "
            "Without parameters they go to reports/ and figures/ (what make report does); with -p/-f each "
            "notebook's run goes to its own folder reports/NAME/<params-hash>/; --out DIR puts everything "
            "under DIR. reports/index.html lists every run with its parameters."
        ),
    )
    report.add_arguments(p)
    for action in p._actions:  # argparse keeps its actions here and nowhere public
        for flag in set(action.option_strings) & set(NUMBERS):
            action.type = NUMBERS[flag]
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="the summary at the end: table (default; the lines as each notebook renders), json or csv "
        "(one row per run); with json or csv the progress lines go to stderr",
    )
    p.add_argument("--report-output", dest="report_output", metavar="FILE", help=REPORT_OUTPUT_HELP)


def run(args: argparse.Namespace) -> int:
    if args.help_notebook:
        sys.stdout.write(report.notebook_help(args.notebooks_dir, args.help_notebook))
        return 0
    fmt = output_format(args)
    args.json = fmt != "table"  # the renderer's lines go to stderr, stdout is the summary's
    code, summary = report.render_all(args)
    args.format, args.json = fmt, False
    emit(summary, args, _print_summary, _csv_rows)
    return code


RUN_COLUMNS = ("notebook", "ok", "seconds", "folder", "html", "error")


def _csv_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """One row per run: the notebook, whether it rendered, its seconds, its folder, the HTML
    report or the error."""
    rows = [[run.get(c, "") for c in RUN_COLUMNS] for run in summary["runs"]]
    return list(RUN_COLUMNS), rows


def _print_summary(summary: dict[str, Any]) -> None:
    runs = summary["runs"]
    failed = [r["notebook"] for r in runs if not r.get("ok")]
    failures = f", {len(failed)} failed ({', '.join(failed)})" if failed else ""
    print(f"{len(runs)} report(s) rendered{failures}; index: {summary['index']}")
