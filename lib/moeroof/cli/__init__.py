"""``moeroof`` command line: the union curve, skew fits, the roofline plan, presets, cache
simulation, expert splits and measurements from the shell.

::

    moeroof union --uniform E K --batch 1,8,64 [--layers L] [--json]
    moeroof union PATH --batch 1,8,64 [--bootstrap 200] [--seed 0] [--draws 4] [--json]
    moeroof fit HISTOGRAM [--bootstrap 100] [--gof-sims 99] [--seed 0] [--json]
    moeroof plan --model PRESET|FILE --hardware PRESET|FILE --batch 1,8,64 [--cache-gib X]
                 [--context N] [--overlap max|sum] [--routing uniform|zipf:S|PATH] [--json]
    moeroof presets [--json]
    moeroof split HISTOGRAM --ranks R --method id|lpt|weighted|bytes [--rank-speed 1,0.6] [--json]
    moeroof cache TRACE --policy lru|lfu|static|belady|s3fifo|arc
                  (--capacity-experts N | --capacity-gib X --expert-bytes N) [--scope global|layer]
                  [--warmup S] [--histogram PATH] [--json]
    moeroof mrc TRACE [--sample-rate R] [--json]
    moeroof calibrate [--output calibrated.toml] [--file-mib 2048] [--seconds 30] [--scratch-dir D] [--json]
    moeroof bench [--experts 32 --layers 4 --top-k 4 --d-model 1024 --d-ff 1024] [--batch 1,2,4,8,16,32]
                  [--mode both|coalesced|uncoalesced] [--routing uniform|zipf:S | --trace PATH] [--json] [--output F]

Random draws use ``numpy.random.default_rng(seed)`` (default seed 0), so outputs are
reproducible. Bad input prints ``error: FILE:ROW: FIELD: what is wrong`` (or ``error: <message>``
for a bad flag) on stderr and exits with status 2; argparse usage errors exit 2 as well.

Layout: :mod:`moeroof.cli.app` (the parser, ``--version``, errors → exit status),
:mod:`moeroof.cli.flags` (each flag's declared constraint, the usage error), :mod:`moeroof.cli.inputs`
(input files: where a path is looked up, traces and histograms read), :mod:`moeroof.cli.output`
(tables, JSON and CSV, the report file, progress) and one module per subcommand
(``union``, ``fit``, ``plan``, ``presets``, ``cache``, ``mrc``, ``split``, ``calibrate``,
``bench``), each with ``add_parser(subparsers)``, ``run(args)`` (:func:`moeroof.cli.app.build_parser`
wires the one to the other), its ``*_report`` builder and its ``print_*`` table.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main", "parse_batch"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``moeroof`` console script: :func:`moeroof.cli.app.main`, imported here so that a
    Ctrl-C while the suite (numpy, the subcommands) is still loading exits 130 quietly too."""
    try:
        from moeroof.cli.app import main as run
    except KeyboardInterrupt:
        return 130
    return run(argv)


def __getattr__(name: str) -> Any:
    # the parser and its helpers load on first use, not when the console script starts
    home = {"build_parser": "moeroof.cli.app", "parse_batch": "moeroof.cli.flags"}.get(name)
    if home is not None:
        return getattr(importlib.import_module(home), name)
    raise AttributeError(f"module 'moeroof.cli' has no attribute {name!r}")
