"""``moeroof report``: render notebooks into reports, each run in its own folder.

::

    moeroof report [--notebooks NAME ...] [-p NAME VALUE ...] [-f PARAMS.yaml] [--out DIR]

The same renderer as ``make report`` (:mod:`moeroof.present.report`, which documents where each
run writes): without parameters ``reports/NAME.html`` and the committed ``figures/``; with
``-p``/``-f`` ``reports/NAME/<params-hash>/`` (report, executed notebook, figures); with
``--out DIR`` under ``DIR``. Paths given as parameters resolve against the working directory.
The parser imports nothing heavy: papermill and nbconvert load only when a render starts.
"""

from __future__ import annotations

import argparse
from typing import Any

from moeroof.present import report


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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return report.run(args, prog="moeroof report")
