"""The ``moeroof`` program: the top-level parser, ``--version``, and how errors end a run.

:func:`build_parser` gathers the subcommands, one module each (``add_parser(subparsers)``,
``run(args) -> int`` and, where a library parameter travels under another flag's name,
``PARAMETER_FLAGS``), and wires each parser to its ``run``; :func:`main` runs the chosen one and maps what it raises to an exit
status:

- a library :class:`moeroof.core.errors.ParameterError`: ``error: --flag: what is wrong``, the
  flag the subcommand maps the parameter to (its ``PARAMETER_FLAGS``), status 2;
- a library :class:`ValueError` (:class:`moeroof.data.io.InputError`, ``FILE:ROW: FIELD: what is
  wrong``) or a bad flag value (:class:`moeroof.cli.flags.UsageError`): one ``error: <message>``
  line on stderr, status 2, never a traceback (the few numpy messages that would say nothing to
  a user — "zero-size array to reduction operation", … — are said in the user's terms,
  :func:`user_message`);
- what the machine refuses: :class:`OSError` (a read-only folder, a full disk, a folder given as
  a file, permission denied; the file named), :class:`MemoryError`, :class:`OverflowError`,
  :class:`RecursionError`: one ``error:`` line, status 2;
- a flag value its declared constraint refuses (:mod:`moeroof.cli.flags`: ``type=Count(min=1)``,
  ``choices=``, …): ``error: --flag: what is wrong``, status 2, before the command runs;
- other argparse usage errors (a missing argument, an unknown flag): argparse's usage and
  message, status 2; ``--help`` / ``--version``: status 0;
- Ctrl-C: status 130, quietly (``calibrate`` and ``bench`` say first that their scratch files
  are gone, and treat SIGTERM and SIGHUP alike);
- a closed stdout (``moeroof ... | head``): status 0;
- anything else is a bug: ``error: internal error: <type>: <message> (please report)``, status
  70 (``EX_SOFTWARE``). With ``MOEROOF_DEBUG=1`` in the environment every unexpected exception
  (and the machine's, above) is re-raised with its traceback, for developers.

numpy's floating-point RuntimeWarnings ("divide by zero encountered in …") are not shown unless
``MOEROOF_DEBUG=1``: a result that is not finite is printed as ``-`` / ``null``.

Building the parser imports no subcommand's library code (the compiled cache simulator
included): each ``run`` imports what it needs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import keyword
import os
import sys
import warnings
from collections.abc import Sequence

from moeroof.cli.flags import FlagParser, declare_choices
from moeroof.cli.output import EXIT_INTERRUPTED
from moeroof.core.errors import ParameterError, wraps_interrupt
from moeroof.core.limits import plain_value_error
from moeroof.kernels.loader import NativeBuildError

__all__ = [
    "COMMAND_MODULES",
    "EXIT_CONFIG",
    "EXIT_INTERNAL",
    "EXIT_USAGE",
    "build_parser",
    "debug_enabled",
    "main",
    "user_message",
]

EXIT_USAGE = 2
#: an unexpected exception: a bug in moeroof (sysexits' EX_SOFTWARE)
EXIT_INTERNAL = 70
#: an install whose C kernels are missing or stale (sysexits' EX_CONFIG)
EXIT_CONFIG = 78

#: the commands, in `moeroof --help` order
COMMAND_NAMES: tuple[str, ...] = ("union", "fit", "fit-routing", "plan", "fit-plan", "presets", "preset-from-hf")
COMMAND_NAMES += ("trace", "histogram", "import", "capture", "cache", "mrc", "calibrate", "bench", "split", "sweep")
COMMAND_NAMES += ("report", "validate")
#: (command, its module in moeroof.cli): the name with "-" as "_", and a trailing "_" where the name is a
#: Python keyword (cli/import_.py). A command's module is imported only when the command line names it
#: (its parser alone is built, ~20 ms less per run: a whole ``moeroof cache`` on a 10^6-request trace is
#: ~0.15 s); ``--help`` or a command not in this list builds the parser of every one.
COMMAND_MODULES = tuple((c, c.replace("-", "_") + "_" * keyword.iskeyword(c)) for c in COMMAND_NAMES)


def _module(name: str):
    return importlib.import_module(f"moeroof.cli.{name}")


def __getattr__(name: str):
    """``COMMANDS``: every subcommand's module, in ``--help`` order (imported when asked for)."""
    if name == "COMMANDS":
        return tuple(_module(m) for _, m in COMMAND_MODULES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Version(argparse.Action):
    """``--version``: the version is looked up only when asked for (importlib.metadata costs
    ~20 ms, a fifth of a quick command's start-up)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from moeroof import __version__

        print(f"moeroof {__version__}")  # on stdout, as argparse's own version action
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``moeroof`` parser: every subcommand's, or, when ``argv`` starts with a command's
    name, that command's alone (the same parse of that ``argv``: the other subcommands are not
    imported)."""
    parser = FlagParser(
        prog="moeroof",
        description="MoE inference analysis: expert union U(B), routing-skew fits, the net tok/s roofline and presets.",
        epilog="Exit status: 0 ok, 2 bad input or usage (one 'error:' line), 70 internal error (a bug: please "
        "report it; MOEROOF_DEBUG=1 shows its traceback), 130 interrupted.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    named = dict(COMMAND_MODULES)
    first = argv[0] if argv else None
    for name, module in COMMAND_MODULES if first not in named else [(first, named[first])]:
        command = _module(module)
        command.add_parser(subparsers)
        flags = getattr(command, "PARAMETER_FLAGS", {})
        subparsers.choices[name].set_defaults(func=command.run, parameter_flags=flags)
    declare_choices(parser)
    return parser


_NO_DATA = "an input holds no data (an empty file, a header only, or a zero-length trace)"
_TOO_LARGE = (
    "an input asks for an array larger than this machine can address; check its sizes (experts, layers, tokens, steps)"
)
#: numpy messages that say nothing to a user, and what they mean on a moeroof input
_NUMPY_MESSAGES = (
    ("zero-size array to reduction operation", _NO_DATA),
    ("cannot reshape array of size 0", _NO_DATA),
    ("Maximum allowed dimension exceeded", _TOO_LARGE),
    ("array is too big", _TOO_LARGE),
    ("negative dimensions are not allowed", "an input gives a negative size"),
    (
        "Out of range float values are not JSON compliant",
        "a result is not a finite number (an input value is out of range)",
    ),
)

#: OSError numbers in words
_OS_WORDS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "is a folder, not a file",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENOENT: "no such file or folder",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ELOOP: "too many symbolic links",
    errno.EFBIG: "the file is too large",
    errno.EIO: "input/output error",
}


def debug_enabled() -> bool:
    """``MOEROOF_DEBUG=1``: unexpected exceptions keep their traceback."""
    return os.environ.get("MOEROOF_DEBUG", "").strip() not in ("", "0")


def user_message(exc: BaseException) -> str:
    """The one line (after ``error: ``) that says what went wrong, in the user's terms."""
    if isinstance(exc, OSError):
        what = (exc.errno is not None and _OS_WORDS.get(exc.errno)) or exc.strerror or str(exc) or type(exc).__name__
        names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
        return f"{' → '.join(names)}: {what}" if names else what
    if isinstance(exc, MemoryError):
        detail = str(exc).strip()
        return "out of memory" + (f" ({detail})" if detail else "") + ": use a smaller input, batch or sample count"
    if isinstance(exc, RecursionError):
        return "an input is nested too deeply to read"
    if isinstance(exc, OverflowError):
        return f"a number is too large to compute with ({exc}); check the sizes and values given"
    text = plain_value_error(exc)
    for needle, words in _NUMPY_MESSAGES:
        if needle in text:
            return words
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or usage, 70 a bug, 78 the C kernels
    not built, 130 interrupted)."""
    debug = debug_enabled()
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # a refused flag value or usage error (2), or --help / --version (0)
            return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
        args.argv = list(argv)  # the command line every JSON/CSV result records (output.run_record)
        with warnings.catch_warnings():
            if not debug:  # numpy's "divide by zero encountered in …": the result says it (- / null)
                warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*encountered in")
            return _run(args, debug)
    except KeyboardInterrupt:  # Ctrl-C outside a measurement (one in it says so itself)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace, debug: bool) -> int:
    try:
        target = getattr(args, "report_output", None)
        if isinstance(target, str):  # refused before any work (a fit, a measurement, a file written)
            from moeroof.cli.output import check_report_target

            check_report_target(target, args)
        return args.func(args)
    except ParameterError as exc:  # a library parameter: say which flag carried it
        flags = getattr(args, "parameter_flags", {})
        flag = flags.get(exc.parameter, "--" + exc.parameter.replace("_", "-"))
        print(f"error: {flag}: {exc.detail}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # quiet, unless the command says what it kept (sweep)
        if str(exc):
            print(f"error: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except NativeBuildError as exc:  # the install, not the input: say what rebuilds it
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except BrokenPipeError:  # `moeroof ... | head`
        _quiet_stdout()
        return 0
    # UsageError, InputError, a library check on the inputs (K > E, ...), or what the machine refuses
    except (ValueError, OSError, MemoryError, OverflowError, RecursionError) as exc:
        if debug and not isinstance(exc, ValueError):
            raise
        print(f"error: {user_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug: one line, not a traceback
        if wraps_interrupt(exc):  # Ctrl-C inside an extension can come back as a SystemError
            return EXIT_INTERRUPTED
        if debug:
            raise
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
        print(f"error: internal error: {type(exc).__name__}: {detail} (please report)", file=sys.stderr)
        return EXIT_INTERNAL


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's final flush is silent."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    with contextlib.suppress(OSError):
        sys.stderr.close()
