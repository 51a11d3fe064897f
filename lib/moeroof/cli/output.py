"""The ``moeroof`` subcommands' output: tables, JSON and CSV (with the run record), the report
file, progress lines and the interrupt's exit status."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.cli.flags import UsageError
from moeroof.core.results import plain

__all__ = [
    "EXIT_INTERRUPTED",
    "jsonable",
    "fmt",
    "percent",
    "print_notes",
    "table",
    "FORMATS",
    "REPORT_OUTPUT_HELP",
    "add_output_arguments",
    "output_format",
    "dumps",
    "HASH_WHOLE_BYTES",
    "utc_now",
    "run_record",
    "check_report_target",
    "emit",
    "runner",
    "check_output_file",
    "Progress",
    "new_output",
    "refuse_overwriting",
    "writing_new",
    "interrupted",
    "spelled",
]

EXIT_INTERRUPTED = 130


#: element types a list may hold to be copied as it is (floats checked for NaN / inf)
_PLAIN = {int, float, str, bool, type(None)}


def jsonable(obj: Any) -> Any:
    """JSON-ready copy: numpy arrays and scalars to Python, NaN / inf to None, paths to text."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        kinds = set(map(type, obj))
        if kinds <= _PLAIN:  # a list of plain numbers or strings (a curve): one pass, no call each
            if float in kinds:
                return [x if type(x) is not float or math.isfinite(x) else None for x in obj]
            return list(obj)
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "f" and not np.isfinite(obj).all():
            return np.where(np.isfinite(obj), obj, np.array(None)).tolist()  # NaN / inf → None
        # ints, bools and finite floats as they are: no walk per element
        return obj.tolist() if obj.dtype.kind in "biuf" else jsonable(obj.tolist())
    return plain(obj)  # a scalar: numpy's as Python's, NaN / inf as None, a path as text


def fmt(x: Any, digits: int = 2) -> str:
    """A table cell: ``-`` for a missing value, integers as is, others with ``digits`` decimals."""
    if x is None or isinstance(x, float) and not math.isfinite(x):
        return "-"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.{digits}f}"


def percent(x: Any, digits: int = 2) -> str:
    """A fraction (a hit rate, as the JSON and the CSV keep it) as a table's percentage."""
    return "-" if x is None else fmt(100.0 * float(x), digits)


def print_notes(notes: Iterable[Any], prefix: str = "note: ") -> None:
    """The notes a table is followed by, one a line."""
    for note in notes:
        print(f"{prefix}{note}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """Fixed-width table; ``align`` has one of ``<`` / ``>`` per column."""
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(headers)]
    lines = ["  ".join(f"{h:{a}{w}}" for h, a, w in zip(headers, align, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(f"{c:{a}{w}}" for c, a, w in zip(r, align, widths)).rstrip() for r in rows]
    return "\n".join(lines)


FORMATS = ("table", "json", "csv")


#: what ``--report-output`` says in the --help of a command whose own ``-o/--output`` is its data file
REPORT_OUTPUT_HELP = (
    "write the printed report (in the --format chosen) to FILE, atomically, instead of stdout; "
    "-o/--output is the data file the command writes, never the report"
)

#: what ``--output`` says in the --help of a command whose report is the only file it writes
_OUTPUT_HELP = "write the report to FILE (atomically; never one of the command's inputs) instead of stdout"


def add_output_arguments(p: Any, *, output: bool = True, report_output: bool = True) -> None:
    """``--format table|json|csv`` (``--json`` = ``--format json``) and the file the printed
    report goes to instead of stdout (atomically; never one of the command's inputs):
    ``--output FILE``, or ``--report-output FILE`` where the command's own ``-o/--output`` names
    the data it writes (``output=False``: trace, histogram, import, calibrate, sweep, …).
    ``report_output=False`` (with ``output=False``) adds no report file flag (``bench``, whose
    ``--output`` is its JSON report already)."""
    p.add_argument("--format", choices=FORMATS, help="output format (default table)")
    p.add_argument("--json", action="store_true", help="print one JSON object (the same as --format json)")
    if output or report_output:
        flag, text = ("--output", _OUTPUT_HELP) if output else ("--report-output", REPORT_OUTPUT_HELP)
        p.add_argument(flag, dest="report_output", metavar="FILE", help=text)


def output_format(args: Any) -> str:
    """The chosen format: ``--json`` and ``--format`` must agree."""
    chosen = getattr(args, "format", None)
    if getattr(args, "json", False):
        if chosen not in (None, "json"):
            raise UsageError(f"--json and --format {chosen} disagree: give one")
        return "json"
    return chosen or "table"


def dumps(obj: Any) -> str:
    """JSON with objects indented and every list of numbers or strings on one line (``mrc``'s
    curve is two lines, not 18,000); NaN and ±inf become null (:func:`jsonable`), so no report
    ever fails to print for an out-of-range number."""

    def render(v: Any, ind: int) -> str:
        pad = "  " * (ind + 1)
        if isinstance(v, dict):
            if not v:
                return "{}"
            items = [f"{pad}{json.dumps(str(k))}: {render(x, ind + 1)}" for k, x in v.items()]
            return "{\n" + ",\n".join(items) + "\n" + "  " * ind + "}"
        if isinstance(v, list):
            if set(map(type, v)).isdisjoint((dict, list)):  # every item flat (jsonable made only these)
                return json.dumps(v, allow_nan=False, ensure_ascii=False)
            return "[\n" + ",\n".join(pad + render(x, ind + 1) for x in v) + "\n" + "  " * ind + "]"
        return json.dumps(v, allow_nan=False, ensure_ascii=False)

    return render(jsonable(obj), 0)


#: an input is hashed whole up to this size; a larger one by its size, first and last MiB
HASH_WHOLE_BYTES = 256 << 20
_HASH_EDGE_BYTES = 1 << 20


def _file_hash(path: Path) -> dict[str, Any]:
    """``{"path", "bytes", "sha256"}`` of an input; past :data:`HASH_WHOLE_BYTES` the hash is of
    its size, first and last MiB (``"sha256_of": "size+head+tail"``), said so, not a whole hash."""
    import hashlib

    size = path.stat().st_size
    out: dict[str, Any] = {"path": str(path), "bytes": size}
    with open(path, "rb") as fh:  # read-only
        if size <= HASH_WHOLE_BYTES:
            h = hashlib.file_digest(fh, "sha256")
        else:
            h = hashlib.sha256(str(size).encode() + fh.read(_HASH_EDGE_BYTES))
            fh.seek(size - _HASH_EDGE_BYTES)
            h.update(fh.read(_HASH_EDGE_BYTES))
            out["sha256_of"] = "size+head+tail"
    out["sha256"] = h.hexdigest()
    return out


def utc_now() -> str:
    """The run's UTC time, ISO 8601 to the second; ``SOURCE_DATE_EPOCH`` (the reproducible-builds
    convention) fixes it, so two runs can give the same bytes."""
    import datetime
    import time

    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    when = datetime.datetime.fromtimestamp(int(epoch) if epoch.isdigit() else time.time(), datetime.UTC)
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def run_record(args: Any, inputs: Sequence[str | os.PathLike[str]] = ()) -> dict[str, Any]:
    """What every JSON, CSV and Parquet result carries (vLLM's ``--save-result`` convention):
    the suite's version, the command line, each input file with its size and SHA-256 (what the
    arguments name — data files, their sidecars, preset files — and ``inputs``), and the UTC time."""
    import shlex

    import moeroof

    argv = getattr(args, "argv", None)
    files = _input_files(args)
    files += [Path(x).expanduser().resolve() for x in inputs if Path(x).expanduser().is_file()]
    seen: dict[str, dict[str, Any]] = {}
    for f in dict.fromkeys(files):
        with contextlib.suppress(OSError):
            seen[str(f)] = _file_hash(f)
    return {
        "moeroof_version": moeroof.__version__,
        "command": "moeroof " + shlex.join(argv) if argv is not None else None,
        "inputs": list(seen.values()),
        "utc": utc_now(),
    }


def _csv_comment(record: dict[str, Any]) -> str:
    """The run record as ``#`` comment lines above a CSV's header (pandas: ``comment="#"``; the
    suite's own CSV readers skip them)."""
    lines = [f"# moeroof {record['moeroof_version']}, {record['utc']}: {record['command'] or '(library)'}"]
    lines += [f"# input {i['path']} ({i['bytes']} bytes) sha256 {i['sha256']}" for i in record["inputs"]]
    return "".join(line.replace("\n", " ") + "\n" for line in lines)


def _csv_text(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([headers, *(["" if x is None else x for x in r] for r in rows)])
    return buf.getvalue()


#: flags whose value names a preset by name as well as by path (the preset file is an input)
_PRESET_FLAGS = {"model": "models", "hardware": "hardware"}
#: flags that are never input files (what a command writes, and argparse's own)
_NOT_INPUTS = ("output", "report_output", "func", "parameter_flags", "command", "format", "import_format")


def _candidates(key: str, text: str) -> list[Path]:
    """The files a flag value may name: the path from the working directory, the suite's
    ``data/`` file of that name (where commands resolve embedded names), and for ``--model`` /
    ``--hardware`` the shipped preset of that name."""
    p = Path(text).expanduser()
    out = [p]
    if not p.is_absolute():
        out.append(_data_dir() / p)
    sub = _PRESET_FLAGS.get(key)
    if sub is not None and p.suffix.lower() != ".toml":
        out.append(_data_dir() / "presets" / sub / f"{text}.toml")
    return out


def _data_dir() -> Path:
    from moeroof.core.paths import DATA_DIR

    return DATA_DIR


def _input_files(args: Any) -> list[Path]:
    """Every existing file a flag or argument of this run names, with the sidecar beside it
    (what a report file must not be): paths as given, embedded ``data/`` names, preset names."""
    out = []
    for key, value in vars(args).items():
        if key in _NOT_INPUTS or not isinstance(value, (str, list)) or not value:
            continue
        texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]
        # each text whole, and each of its comma-separated items
        for text in dict.fromkeys(t.strip() for whole in texts for t in [whole, *whole.split(",")]):
            for p in _candidates(key, text) if text else ():
                try:  # the file and its sidecar
                    out += [f.resolve() for f in (p, p.with_suffix(".json")) if p.is_file() and f.is_file()]
                except (OSError, ValueError):  # a name too long or holding NUL: not a file
                    continue
    return out


def _written_files(args: Any) -> list[Path]:
    """The data files a command writes with its own ``-o/--output`` (and their sidecars): a
    report file must not be one of them either."""
    if not isinstance(getattr(args, "output", None), str):
        return []
    p = Path(args.output).expanduser()
    return [p.resolve(), p.with_suffix(".json").resolve()]


def check_report_target(target: str, args: Any, inputs: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """The report file ``target`` (``--output`` / ``--report-output``), refused when it is one of
    the command's inputs or their sidecars (``inputs`` adds files the arguments do not name, such
    as the preset files ``presets`` reads), a data file the command writes with ``-o``, anything
    in the shipped presets folder, or a folder."""
    from moeroof.core import atomic

    flag = _report_flag(args)
    path = Path(target).expanduser()
    named = [Path(x).expanduser() for x in inputs]
    named += [x.with_suffix(".json") for x in named]
    if any(atomic.same_file(path, x) for x in [*_input_files(args), *named]):
        raise UsageError(f"{flag}: {target} is one of this command's inputs; refusing to overwrite it")
    if any(atomic.same_file(path, x) for x in _written_files(args)):
        raise UsageError(f"{flag}: {target} is the data file this command writes with -o; give the report another name")
    presets = (_data_dir() / "presets").resolve()
    resolved = path.resolve()
    if resolved == presets or presets in resolved.parents:
        raise UsageError(f"{flag}: {target} is in the shipped presets folder ({presets}); refusing to write there")
    # a folder, or a folder that is not there or cannot be written: said now, before the work
    return check_output_file(target, flag)


#: a command's readable table, and its ``--format csv`` (headers, rows), of its report
Printer = Callable[[dict[str, Any]], None]
CsvTable = Callable[[dict[str, Any]], tuple[list[str], list[list[Any]]]]


def emit(rep: dict[str, Any], args: Any, printer: Printer, csv_table: CsvTable, *, inputs: Sequence[Any] = ()) -> int:
    """Print (or with ``--output FILE`` / ``--report-output FILE`` write, atomically) a report as
    JSON (:func:`dumps`), CSV (``csv_table``: the command's own ``(headers, rows)``) or the
    command's readable table; exit status 0.

    ``args`` is the parsed namespace (``--format``, ``--json``, the report file). ``inputs``: files
    the command read that its arguments do not name (the report file must not be one of them
    either: :func:`check_report_target`)."""
    fmt_name = output_format(args)
    target = getattr(args, "report_output", None)
    target = target if isinstance(target, str) else None
    if target is not None:
        path = check_report_target(target, args, inputs)
    # the run record (a command that wrote a file of the same report put it there already)
    record = rep.get("run") if isinstance(rep.get("run"), dict) else None
    if fmt_name == "json":
        text = dumps({**rep, "run": record or run_record(args, inputs)}) + "\n"
    elif fmt_name == "csv":
        text = _csv_comment(record or run_record(args, inputs)) + _csv_text(*csv_table(rep))
    else:
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            printer(rep)
        text = buf.getvalue()
    if target is None:
        sys.stdout.write(text)
        return 0
    from moeroof.core import atomic

    try:
        atomic.write_text(path, text)
    except OSError as err:
        raise UsageError(f"{_report_flag(args)}: cannot write {target} ({err.strerror or err})") from None
    print(f"wrote {target}", file=sys.stderr)
    return 0


def runner(report: Callable[[Any], dict[str, Any]], printer: Printer, csv_table: CsvTable) -> Callable[[Any], int]:
    """A subcommand's ``run``: its ``report`` of the parsed arguments, emitted (:func:`emit`)."""
    return lambda args: emit(report(args), args, printer, csv_table)


def _report_flag(args: Any) -> str:
    return "--report-output" if isinstance(getattr(args, "output", None), str) else "--output"


def check_output_file(text: str, flag: str = "--output") -> Path:
    """An output file that a command will write after it has measured: refused now if it is a
    folder, or its folder does not exist or cannot be written (so no measurement is wasted)."""
    from moeroof.core import atomic

    out = Path(text).expanduser()
    if out.is_dir():
        raise UsageError(f"{flag}: {text} is a folder; give a file name")
    try:
        atomic.check_writable_folder(out)
    except FileNotFoundError:
        raise UsageError(f"{flag}: the folder {out.resolve().parent} does not exist") from None
    except OSError as exc:
        raise UsageError(
            f"{flag}: cannot write in {exc.filename or out.resolve().parent} ({exc.strerror or exc})"
        ) from None
    return out


class Progress(contextlib.AbstractContextManager["Progress"]):
    """One self-rewriting stderr line while a long command works: ``fit [#####·····] 4/9 zipf: bootstrap``.

    Shown only when stderr is a terminal, so pipes, logs and tests see the command's output
    alone; ``MOEROOF_PROGRESS=1`` forces it on, ``0`` off. Never written to stdout. Call it as
    ``progress(done, total, what)`` (the library's progress callbacks), then :meth:`close`.
    """

    WIDTH = 20

    def __init__(self, label: str, stream: Any = None, enabled: bool | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            forced = os.environ.get("MOEROOF_PROGRESS", "").strip()
            enabled = forced == "1" if forced in ("0", "1") else bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.shown = False

    def __call__(self, done: int, total: int, what: str = "") -> None:
        if not self.enabled or total <= 0:
            return
        filled = min(self.WIDTH, max(0, round(self.WIDTH * done / total)))
        bar = "#" * filled + "·" * (self.WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {what}\x1b[K")
        self.stream.flush()
        self.shown = True

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Clear the line (the command's own output follows on a clean line)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def new_output(args: Any, suffixes: tuple[str, ...], words: str = "") -> Path:
    """``-o OUT``, the data file a command writes: one of ``suffixes`` (``words`` says them in the
    message, default ``.a or .b``), and not there already unless ``--force``."""
    out = Path(args.output)
    if out.suffix.lower() not in suffixes:
        raise UsageError(f"-o: expected a {words or ' or '.join(suffixes)} path, got {args.output!r}")
    if not args.force and out.exists():
        raise UsageError(f"-o: {out} exists (pass --force to replace it)")
    return out


def refuse_overwriting(out: Path, inputs: Sequence[Path], what: str, name: Path | None = None) -> None:
    """``-o OUT`` refused where it, or the sidecar written beside a ``.csv`` / ``.npy``, is one of
    ``inputs``: ``-o: writing PATH would overwrite WHAT`` (``name``: the path said instead)."""
    from moeroof.core import atomic
    from moeroof.data.io import sidecar_path

    for path in [out] + ([sidecar_path(out)] if out.suffix.lower() in (".csv", ".npy") else []):
        if any(atomic.same_file(path, source) for source in inputs):
            raise UsageError(f"-o: writing {name or path} would overwrite {what}")


@contextlib.contextmanager
def writing_new(out: Path) -> Iterator[None]:
    """Around the write of ``-o OUT``: a file created there since :func:`new_output` looked is
    the same refusal."""
    try:
        yield
    except FileExistsError as exc:
        # the data layer names what is there: the result, or the sidecar written beside it
        there = getattr(exc, "path", out)
        what = f"{out}'s sidecar {there}" if there != out else f"{out}"
        raise UsageError(f"-o: {what} exists (pass --force to replace it)") from None


def interrupted() -> int:
    """A measurement stopped by Ctrl-C or a signal: one line on stderr, exit status 130."""
    print("error: interrupted (scratch files removed)", file=sys.stderr)
    return EXIT_INTERRUPTED


def spelled(words: Sequence[str], options: Iterable[tuple[str, Any]]) -> str:
    """The command line a written file records, quoted for a shell: ``words``, then each option
    ``(FLAG, VALUE)`` given (a list comma-separated; True: the flag alone; None or False: left out)."""
    import shlex

    out = list(words)
    for flag, value in options:
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return shlex.join(out)
