"""The ``moeroof`` program: the top-level parser, ``--version``, and how errors end a run.

:func:`build_parser` gathers the subcommands, one module each (``add_parser(subparsers)`` and
``run(args) -> int``); :func:`main` runs the chosen one and maps what it raises to an exit
status:

- a library :class:`moeroof.core.errors.ParameterError`: ``error: --flag: what is wrong``, the
  flag the subcommand maps the parameter to (``parameter_flags``), status 2;
- a library :class:`ValueError` (:class:`moeroof.data.io.InputError`, ``FILE:ROW: FIELD: what is
  wrong``) or a bad flag value (:class:`moeroof.cli.common.UsageError`): one ``error: <message>``
  line on stderr, status 2, never a traceback;
- argparse usage errors: argparse's own message, status 2; ``--help`` / ``--version``: status 0;
- Ctrl-C: status 130, quietly (``calibrate`` and ``bench`` say first that their scratch files
  are gone);
- a closed stdout (``moeroof ... | head``): status 0.

Building the parser imports no subcommand's library code (the numba-compiled cache simulator
included): each ``run`` imports what it needs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from moeroof import __version__
from moeroof.cli import (
    bench,
    cache,
    calibrate,
    fit,
    fit_plan,
    fit_routing,
    histogram,
    import_,
    mrc,
    plan,
    presets,
    report,
    split,
    trace,
    union,
)
from moeroof.cli.common import EXIT_INTERRUPTED
from moeroof.core.errors import ParameterError

__all__ = ["COMMANDS", "EXIT_USAGE", "build_parser", "main"]

EXIT_USAGE = 2

# In `moeroof --help` order.
COMMANDS = (
    union,
    fit,
    fit_routing,
    plan,
    fit_plan,
    presets,
    trace,
    histogram,
    import_,
    cache,
    mrc,
    calibrate,
    bench,
    split,
    report,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moeroof",
        description="MoE inference analysis: expert union U(B), routing-skew fits, the net tok/s roofline and presets.",
    )
    parser.add_argument("--version", action="version", version=f"moeroof {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or usage, 130 interrupted)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse usage error (2) or --help / --version (0)
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    try:
        return args.func(args)
    except ParameterError as exc:  # a library parameter: say which flag carried it
        flags = getattr(args, "parameter_flags", {})
        flag = flags.get(exc.parameter, "--" + exc.parameter.replace("_", "-"))
        print(f"error: {flag}: {exc.detail}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # UsageError, InputError, or a library check on the inputs (K > E, ...)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `moeroof ... | head`
        sys.stderr.close()
        return 0
