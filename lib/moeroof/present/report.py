"""Render the notebooks into reports: ``moeroof report [--notebooks NAME ...] [-p NAME VALUE] [-f PARAMS.yaml] [--out DIR]``.

(also ``python -m moeroof.present.report``, which ``make report`` runs.)

The ``.py`` percent notebooks are the source of truth (docs/development.md); papermill is the runner, the
same way CI and ``papermill nb.ipynb out.ipynb -p ...`` run them, so a report is exactly what a
user would get. For each notebook this writes ``NAME.ipynb`` (executed, the answer its cell tagged
``answer`` displayed lifted to the top: :func:`lift_answer`), ``NAME.html`` (outputs only, like ``nbconvert --no-input``, with no scripts from a CDN and no widget views, so it reads
offline) and the figures the notebook saves, then rebuilds ``reports/index.html`` over every
report there (:mod:`moeroof.present.site`: parameters, links, a gallery of the saved figures).

Where a run writes (one output folder per run, so runs never overwrite each other or the
committed figures):

- the default render (no ``-p``, no ``-f``, no ``--out``; ``make report``): ``reports/NAME.*``
  and the committed ``figures/`` (``MOEROOF_FIGURES_DIR`` overrides the figures folder);
- a run with parameters: ``reports/NAME/<params-hash>/`` holds ``NAME.ipynb``, ``NAME.html`` and
  ``figures/``; the hash is of the parameters as injected, so the same parameters land in the
  same folder and different ones never collide;
- ``--out DIR``: ``DIR/NAME.*`` and ``DIR/figures/``, whatever the parameters.

A parameter value that names an existing file or folder relative to the working directory is
made absolute before it is injected, because the notebook runs in ``notebooks/``: ``-p trace
../mine.npz`` means the file the user sees, not one beside the notebooks.

Each ``-p`` value is read as the type the notebook declares for it (``-p cache_gib 8`` is the
float 8.0, ``-p batch 8`` the text "8" where ``batch`` is text). What can be checked before a
kernel starts is: an unknown notebook or parameter, a value not of the declared type, an
``--out`` that is a file, ``--jobs`` below 1, a ``--cell-timeout`` that is not a positive number
each raise :class:`ReportError`, one ``error:`` line and exit 2 in the CLI, before anything
renders. A notebook that fails prints ``error: NAME failed: cell [N] raised TYPE: message`` (one
line) and is saved, traceback and all, as ``NAME.failed.ipynb`` in its run folder; the others
still render, and the run exits 2.

Reports are reproducible: papermill and nbclient stamp wall-clock times and random cell ids into
the notebook, so those are removed or made deterministic before saving; rendering a deterministic
notebook twice gives the same bytes. Each file is written whole or not at all (temp file +
``os.replace``, :mod:`moeroof.core.atomic`), so an interrupted render never leaves a half report that looks finished.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moeroof.core import atomic, paths
from moeroof.core.errors import ParameterError

# papermill and nbconvert import nbformat, which imports jsonschema, which imports rfc3987_syntax
# (when installed) for its "iri" format checker — and that builds a grammar at import: 0.7 s of
# every process that renders (the parent and each worker), more than a small notebook's own run.
# nbformat's notebook schema checks no IRI, so it is hidden here and jsonschema skips that format.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

if TYPE_CHECKING:  # the Jupyter stack loads when a render starts, not when `moeroof` builds its parser
    import nbformat

#: kernel pinned by name: the kernel of the interpreter running this (papermill swaps a bare
#: ``python`` in the kernelspec for ``sys.executable``), so the report sees the installed suite
KERNEL_NAME = "python3"
#: papermill's per-notebook and per-cell wall-clock keys, and nbclient's per-cell timing block
_PAPERMILL_TIME_KEYS = ("start_time", "end_time", "duration")
_CELL_TIMING_KEY = "execution"
#: the variable save_figure reads for its folder (moeroof.core.paths.figures_dir)
FIGURES_ENV = "MOEROOF_FIGURES_DIR"
#: the longest a cell may run before its render is abandoned and retried once: far above any
#: default cell (the slowest takes about a minute), so only a stuck kernel reaches it; a stuck
#: kernel (a lost reply: the kernel idle, the client waiting) would otherwise hang the run
CELL_TIMEOUT_S = 1200.0
#: the environment variable that overrides it (the tests set a short one)
CELL_TIMEOUT_ENV = "MOEROOF_CELL_TIMEOUT_S"


class ReportError(ValueError):
    """A report that cannot start: an unknown notebook, a parameter the notebooks do not take or
    of the wrong type, an output folder that is a file. Raised before anything renders; the CLI
    prints it as one ``error:`` line (exit 2)."""


class ReportParameterError(ReportError, ParameterError):
    """A bad value of one of :func:`run`'s parameters (``notebooks``, ``out``, ``jobs``,
    ``cell_timeout``, ``notebooks_dir``): the command line names the flag that carried it."""


class NotebookFailed(RuntimeError):
    """A notebook raised while executing; the message (one line) names the notebook, the cell and
    its exception, and where the executed notebook with the traceback was saved, if it was."""


class CellTimedOut(NotebookFailed):
    """A cell ran past the timeout (a stuck kernel, or parameters far heavier than the defaults)."""


class KernelDied(CellTimedOut):
    """The kernel died mid-render (killed from outside, out of memory): like a stuck kernel, the
    render is tried once more in a fresh one."""


def discover(notebooks_dir: Path, names: Sequence[str] | None = None) -> list[Path]:
    """The percent notebooks to render, sorted by name; ``names`` selects a subset (stems)."""
    found = {p.stem: p for p in sorted(Path(notebooks_dir).glob("*.py"))}
    if not names:
        return list(found.values())
    missing = [n for n in names if n not in found]
    if missing:
        known = ", ".join(found) or "none"
        raise ReportParameterError(
            "notebooks", f"no notebook named {', '.join(missing)} in {notebooks_dir} (found: {known})"
        )
    return [found[n] for n in names]


def _display_path(path: Path) -> str:
    """Repository-relative path when inside the checkout, else the bare name: no machine-specific text."""
    try:
        return path.resolve().relative_to(paths.REPO_ROOT).as_posix()
    except ValueError:
        return path.name


def strip_volatile(nb: nbformat.NotebookNode, *, input_path: str, output_path: str) -> nbformat.NotebookNode:
    """Remove run times and random ids so the saved notebook depends only on its content.

    Papermill records start/end/duration per notebook and per cell, nbclient records
    ``execution`` timestamps per cell, and nbformat gives every cell a random id. Papermill also
    stores the input as given (a whole notebook object when it is passed one) and the output path
    (a temp file here); those become stable repository-relative paths.
    """
    meta = nb.metadata.get("papermill")
    if meta is not None:
        for key in _PAPERMILL_TIME_KEYS:
            meta.pop(key, None)
        meta.update(input_path=input_path, output_path=output_path)
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop(_CELL_TIMING_KEY, None)
        for key in _PAPERMILL_TIME_KEYS:
            cell.metadata.get("papermill", {}).pop(key, None)
        if "id" in cell:
            cell["id"] = f"cell-{index}"
    return nb


#: widget views in a notebook's outputs: they need a live kernel, so a static report drops them
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"


def strip_widgets(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop widget views and the saved widget state (``metadata.widgets``).

    A report has no kernel behind it, so a control could not move anything; nbclient saves the
    widget models with random ids (not byte-stable), and nbconvert would load the widget
    manager from a CDN to show them (not readable offline). Notebooks with controls render their
    default state as a static figure too (notebooks/whatif.py), which is what the report shows.
    """
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.get("outputs"):
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW_MIME not in o.get("data", {})]
    return nb


#: the tag the answer's source cell keeps once its answer is lifted to the top
ANSWER_SOURCE_TAG = "answer-source"


def lift_answer(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Open the report with the run's answer: the Markdown the cell tagged ``answer`` displayed
    becomes the first cell (a Markdown cell tagged ``answer``), before the notebook's fixed title
    and question; the source cell keeps its other outputs and is tagged ``answer-source``.

    A notebook computes its answer after the cells that yield the numbers, so executed as
    written the answer would sit deep in the report under fixed prose; lifted, the first words
    a reader sees are the run's own (model, box, cache, provenance, numbers). A notebook whose
    answer cell displayed no Markdown (or has none) is left as it is.
    """
    import nbformat

    from moeroof.present.answers import ANSWER_TAG, displayed_markdown

    tagged = [c for c in nb.cells if ANSWER_TAG in c.get("metadata", {}).get("tags", [])]
    texts = displayed_markdown(tagged[0]) if len(tagged) == 1 and tagged[0].cell_type == "code" else []
    if not texts:
        return nb
    cell = tagged[0]
    cell.outputs = [out for out in cell.outputs if "text/markdown" not in out.get("data", {})]
    cell.metadata["tags"] = [ANSWER_SOURCE_TAG if t == ANSWER_TAG else t for t in cell.metadata["tags"]]
    lifted = nbformat.v4.new_markdown_cell("\n\n".join(t.strip() for t in texts), metadata={"tags": [ANSWER_TAG]})
    nb.cells.insert(0, lifted)
    return nb


#: the lab template without the scripts it loads from a CDN (require.js, MathJax): the reports
#: hold no JavaScript outputs and no LaTeX, and must read without a network (reports/index.html)
_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
"""


def to_html(nb: nbformat.NotebookNode, name: str) -> str:
    """HTML of the outputs only (inputs and prompts hidden, as ``nbconvert --no-input``), offline."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        extra_loaders=[DictLoader({"moeroof_offline.html.j2": _OFFLINE_TEMPLATE})],
        template_file="moeroof_offline.html.j2",
    )
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": name}})
    return body


def cell_timeout() -> float:
    """The cell timeout in force: ``$MOEROOF_CELL_TIMEOUT_S`` when it is a positive number (the
    tests set a short one), else :data:`CELL_TIMEOUT_S`."""
    from moeroof.present.kernel_watch import env_seconds

    return env_seconds(CELL_TIMEOUT_ENV, CELL_TIMEOUT_S)


def _one_line(text: str) -> str:
    """An exception message on one line: colour codes dropped, every run of whitespace one space."""
    import re

    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(text)).split())


def _execute_once(
    path: Path, parameters: dict | None, cell_timeout_s: float, failed_path: Path | None = None
) -> nbformat.NotebookNode:
    import jupytext
    import papermill as pm
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    from moeroof.present.kernel_client import SlicedKernelManager
    from moeroof.present.kernel_watch import IdleKernelWatch

    nb = jupytext.read(path)
    # papermill saves the executed notebook (the failing cell's traceback in it) before raising;
    # it writes to a temp file beside failed_path, renamed to failed_path only on an error
    partial = failed_path.with_name(f".{failed_path.stem}.{os.getpid()}.tmp.ipynb") if failed_path else None
    watch = IdleKernelWatch()
    try:
        with watch:  # a kernel idle mid-render is stopped: a dead kernel, retried below, not a 20-minute wait
            return pm.execute_notebook(
                nb,
                str(partial) if partial is not None else None,
                request_save_on_cell_execute=False,
                parameters=parameters or {},
                kernel_name=KERNEL_NAME,
                language="python",  # a percent notebook may carry no kernelspec; injecting parameters needs it
                cwd=str(path.parent),
                progress_bar=False,
                execution_timeout=cell_timeout_s,
                # the kernel's own log (a TCP-transport warning on every start, an interrupt at
                # shutdown) is noise between the progress lines; a cell's error still ends the
                # render through papermill, with its cell and message
                extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
                # a wait for the kernel's reply polls again every second: one poll for the whole
                # cell timeout was seen to wait on, the kernel gone idle (kernel_client)
                kernel_manager_class=SlicedKernelManager,
            )
    except PapermillExecutionError as err:
        where = ""
        if partial is not None and failed_path is not None and partial.is_file():
            os.replace(partial, failed_path)
            where = f"; the executed notebook, with its traceback: {failed_path}"
        raise NotebookFailed(
            f"{path.stem} failed: cell [{err.exec_count}] raised {err.ename}: {_one_line(err.evalue)}{where}"
        ) from None
    except CellTimeoutError:
        raise CellTimedOut(f"{path.stem} failed: a cell ran past {cell_timeout_s:g} s") from None
    except DeadKernelError:
        if watch.killed:
            why = (
                f"its kernel sat idle mid-render for {watch.idle_s:g} s (no CPU in it or below it) and was stopped; "
                + watch.summary(watch.killed[-1])
            )
            raise KernelDied(f"{path.stem} failed: {why}") from None
        raise KernelDied(f"{path.stem} failed: its kernel died") from None
    except RuntimeError as err:
        # a kernel that dies as it starts (two kernels started at once can draw one port, and the
        # second cannot bind it): a fresh kernel draws fresh ports
        if "Kernel died before replying to kernel_info" not in str(err):
            raise
        raise KernelDied(f"{path.stem} failed: its kernel died as it started ({_one_line(str(err))})") from None
    except NoSuchKernel as err:
        raise NotebookFailed(
            f"{path.stem} failed: no Jupyter kernel {err.name!r}; install ipykernel in this environment"
        ) from None
    finally:
        if partial is not None:
            partial.unlink(missing_ok=True)


def execute(
    path: Path, parameters: dict | None = None, *, cell_timeout_s: float | None = None, failed_path: Path | None = None
) -> nbformat.NotebookNode:
    """Run one percent notebook through papermill in its own directory; raise NotebookFailed on
    error. A cell that runs past ``cell_timeout_s`` (default :func:`cell_timeout`) ends the
    attempt and the notebook runs once more in a fresh kernel (a kernel that stops answering —
    idle, its reply lost — is rare and does not repeat); so does a kernel that dies mid-render
    (:class:`KernelDied`: killed, as one must kill a kernel seen idle mid-cell, or out of
    memory) or as it starts (a port two kernels drew at once); a second failure of either kind
    raises it, saying twice.

    Papermill does not save after every cell: the caller writes the finished notebook once,
    whole. A notebook that fails is saved to ``failed_path`` when given (its folder must
    exist), the failing cell's traceback in it, and the error names that file.
    """
    timeout = cell_timeout() if cell_timeout_s is None else float(cell_timeout_s)
    try:
        return _execute_once(path, parameters, timeout, failed_path)
    except CellTimedOut as err:
        print(f"retry  {path.stem:<24} {err}; once more in a fresh kernel", file=sys.stderr, flush=True)
        try:
            return _execute_once(path, parameters, timeout, failed_path)
        except CellTimedOut as again:
            raise type(again)(f"{again} twice (each in a fresh kernel)") from None


def render(
    path: Path,
    out_dir: Path,
    parameters: dict | None = None,
    *,
    figures_dir: Path | None = None,
    cell_timeout_s: float | None = None,
) -> tuple[Path, Path]:
    """Execute ``path`` and write ``out_dir/NAME.ipynb`` and ``out_dir/NAME.html``; return both paths.

    ``figures_dir``, when given, is where the notebook's figures go (the kernel inherits
    ``MOEROOF_FIGURES_DIR`` for the length of this render); otherwise the environment decides.
    The kernel runs one BLAS thread (:data:`KERNEL_ENV`: the same bytes on any machine).
    ``cell_timeout_s`` as for :func:`execute` (a stuck cell: one retry in a fresh kernel).
    """
    name = path.stem
    ipynb_path, html_path = out_dir / f"{name}.ipynb", out_dir / f"{name}.html"
    failed_path = out_dir / f"{name}.failed.ipynb"
    out_dir.mkdir(parents=True, exist_ok=True)
    with _figures_env(figures_dir):
        nb = execute(path, parameters, cell_timeout_s=cell_timeout_s, failed_path=failed_path)
    # each step edits the notebook in place and returns it
    nb = strip_volatile(lift_answer(nb), input_path=_display_path(path), output_path=_display_path(ipynb_path))
    html = to_html(strip_widgets(nb), name)
    import nbformat

    atomic.write_text(ipynb_path, nbformat.writes(nb) + "\n")
    atomic.write_text(html_path, html)
    failed_path.unlink(missing_ok=True)  # an earlier failed run's notebook no longer says anything true
    return ipynb_path, html_path


#: the kernels' environment. Their BLAS and OpenMP threads: one. A BLAS reduction splits its sums by thread, so the
#: last digits of a result (and of a figure's coordinates: capture_skew.svg's fit) followed the
#: machine's core count; with one thread each, a render gives the same bytes on any machine, and
#: notebooks rendered side by side (``--jobs``) do not oversubscribe the cores.
KERNEL_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # a kernel stopped for sitting idle mid-cell (moeroof.present.kernel_watch) gets SIGABRT first,
    # on which faulthandler writes every thread's Python stack to the kernel's standard error
    "PYTHONFAULTHANDLER": "1",
}


@contextmanager
def _figures_env(figures_dir: Path | None) -> Iterator[None]:
    """While a kernel starts: ``MOEROOF_FIGURES_DIR`` at ``figures_dir`` (when given) and
    :data:`KERNEL_ENV`; the environment restored after."""
    given = {**KERNEL_ENV, **({FIGURES_ENV: str(figures_dir)} if figures_dir is not None else {})}
    before = {k: os.environ.get(k) for k in given}
    os.environ.update(given)
    try:
        yield
    finally:
        os.environ.update({k: v for k, v in before.items() if v is not None})
        for k in [k for k, v in before.items() if v is None]:
            os.environ.pop(k, None)


def parameters_hash(parameters: dict) -> str:
    """Twelve hex digits of SHA-256 over the parameters as canonical JSON (sorted keys).

    The folder name of a run with parameters: equal parameters give the same folder (a re-run
    replaces its own report), different ones never share one.
    """
    import hashlib

    text = json.dumps(parameters, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def absolute_paths(parameters: dict, cwd: Path) -> dict:
    """String values naming an existing path relative to ``cwd`` made absolute; the rest as given.

    Notebooks run with ``notebooks/`` as their working directory, so a relative path the user
    typed would otherwise resolve there (or under ``data/``) instead of where the user is.
    Values that exist nowhere (``zipf:1.2``, an embedded ``histograms/x.csv``) are left alone.
    """

    def local(value) -> bool:
        return isinstance(value, str) and bool(value) and not Path(value).is_absolute() and (cwd / value).exists()

    return {name: str((cwd / value).resolve()) if local(value) else value for name, value in parameters.items()}


@dataclass(frozen=True)
class Target:
    """Where one notebook's render goes: the report folder and the figures folder (None = environment's)."""

    out_dir: Path
    figures_dir: Path | None


def target_for(name: str, parameters: dict | None, out: Path | None, reports_dir: Path) -> Target:
    """The folders of one render, by the rules in the module docstring."""
    if out is not None:
        return Target(out, out / "figures")
    if parameters:
        run = reports_dir / name / parameters_hash(parameters)
        return Target(run, run / "figures")
    return Target(reports_dir, None)


def read_parameters_file(path: Path) -> dict:
    """A YAML (or JSON) mapping of parameter names to values, as papermill's ``-f``."""
    import yaml

    from moeroof.core.input_files import read_input_bytes
    from moeroof.core.limits import MAX_TOML_BYTES, check_document, plain_value_error

    try:
        raw = read_input_bytes(path, MAX_TOML_BYTES)  # bounded (check_document refuses more); a FIFO refused
        text = raw.decode("utf-8")
    except OSError as err:
        raise ValueError(f"{path}: cannot read the parameters file: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: the parameters file is not UTF-8 text") from None
    try:
        # size and flow-style nesting ([[[…]]], {{…}}) before the recursive YAML parser sees it
        check_document(text, "the parameters file", max_bytes=MAX_TOML_BYTES)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    try:
        data = yaml.load(text, Loader=_strict_yaml_loader())  # noqa: S506 - a SafeLoader (below)
    except RecursionError:  # block-style nesting by indentation, deeper than the parser recurses
        raise ValueError(f"{path}: the parameters file nests too deeply to read") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        row = f"{mark.line + 1}" if mark is not None else "-"
        raise ValueError(f"{path}:{row}: not valid YAML ({getattr(err, 'problem', err)})") from None
    except ValueError as err:  # an integer of more digits than Python converts
        raise ValueError(f"{path}: {plain_value_error(err)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{path}: a parameters file is a mapping of names to values, got {type(data).__name__}")
    for name, value in data.items():
        _check_expanded_size(value, path, name)
        _check_numbers(value, path, name)
    return data


def _check_numbers(value, path: Path, name: str) -> None:
    """Refuses an integer of more than :data:`~moeroof.core.limits.MAX_INT_DIGITS` digits, naming
    the parameter: PyYAML raised Python's refusal past 4,300 digits from inside the loader, and
    the error named the file alone (the loader keeps such a number as text: :func:`_strict_yaml_loader`)."""
    from moeroof.core.limits import LongNumberError, long_number_in

    found = long_number_in(value)
    if found is not None:
        where, digits = found
        key = name if where == "value" else f"{name}{'' if where.startswith('[') else '.'}{where}"
        raise ValueError(f"{path}: {key}: {LongNumberError(key, digits)}")


#: values (scalars, list items, mapping entries) one parameter may expand to through YAML
#: aliases: a few hundred bytes of nested aliases expand to 10^9 items (an "alias bomb")
MAX_PARAMETER_ITEMS = 100_000


def _check_expanded_size(value, path: Path, name: str) -> None:
    """Refuses a value that expands, aliases followed, to more than :data:`MAX_PARAMETER_ITEMS`
    items (or refers to itself): YAML shares an aliased node, so the file reads in bytes, and
    only printing or passing it on would expand it (a report that quoted it ran past a minute
    and 2 GB)."""
    seen, stack = 0, [value]
    while stack:
        seen += 1
        if seen > MAX_PARAMETER_ITEMS:
            raise ValueError(
                f"{path}: {name}: expands through YAML aliases to more than {MAX_PARAMETER_ITEMS:,} items "
                "(a parameter is a number, a name or a short list)"
            )
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _strict_yaml_loader():
    """PyYAML's SafeLoader, refusing a mapping that gives one key twice (it keeps the last
    silently, so ``b_max: 64`` then ``b_max: 1024`` would run one of the file's two answers)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # "<<": merged keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    twice = key in seen
                except TypeError:  # unhashable: SafeLoader names it
                    break
                if twice:
                    why = f"the key {key!r} is given twice: which value is meant is ambiguous"
                    raise yaml.constructor.ConstructorError(None, None, why, key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node):
            """An int, or past ``MAX_INT_DIGITS`` digits its text (named by :func:`_check_numbers`)."""
            from moeroof.core.limits import MAX_INT_DIGITS, LongNumber

            text = str(self.construct_scalar(node))
            if len(text.replace("_", "").lstrip("+-")) > MAX_INT_DIGITS:
                return LongNumber(text)
            return super().construct_yaml_int(node)

    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    return StrictLoader


def build_parser(prog: str = "python -m moeroof.present.report") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Execute the notebooks with papermill and write .ipynb and .html reports. Without parameters "
            "(make report) they go to reports/ and figures/; with -p/-f each notebook's run goes to its "
            "own folder reports/NAME/<params-hash>/ (report, executed notebook, figures)."
        ),
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The report options, shared by ``python -m moeroof.present.report`` and ``moeroof report``."""
    parser.add_argument("--notebooks", nargs="+", metavar="NAME", help="notebook stems to render (default: all)")
    parser.add_argument(
        "--out",
        type=Path,
        help="write NAME.ipynb, NAME.html and figures/ under DIR (default: reports/, or reports/NAME/<hash>/ with parameters)",
    )
    parser.add_argument(
        "--notebooks-dir",
        type=Path,
        default=paths.NOTEBOOKS_DIR,
        help="where the .py notebooks live (default: %(default)s)",
    )
    parser.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="override a notebook parameter, as papermill's -p (VALUE read as YAML-ish: 64 → int)",
    )
    parser.add_argument(
        "-f",
        "--parameters-file",
        type=Path,
        metavar="PARAMS.yaml",
        help="parameters from a YAML file, as papermill's -f (-p values win)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="render up to N notebooks at once, each in its own process and kernel "
        "(default: the number of cores; 1 renders one after another)",
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        metavar="SECONDS",
        help="abandon a render whose cell runs longer and retry it once in a fresh kernel "
        f"(default: ${CELL_TIMEOUT_ENV} or {CELL_TIMEOUT_S:g}; raise it for parameters far heavier than the defaults)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (each notebook's report, executed notebook, figures folder, seconds, error) "
        "instead of lines; progress goes to stderr",
    )
    parser.add_argument(
        "--help-notebook",
        metavar="NAME",
        help="list a notebook's parameters (name, type, default, what it is) and exit, as papermill's --help-notebook",
    )


def notebook_help(notebooks_dir: Path, name: str) -> str:
    """``--help-notebook NAME``: each parameter the notebook declares, with its type, default and
    help comment (papermill's ``--help-notebook``)."""
    (path,) = discover(notebooks_dir, [name])
    params = _inspect_parameters(path)
    lines = [f"Parameters of {path.stem} ({_display_path(path)}), set with -p NAME VALUE or -f PARAMS.yaml:"]
    width = max((len(q.name) for q in params), default=0)
    lines += [f"  {q.name:<{width}}  {q.inferred_type_name} (default {q.default}): {q.help}" for q in params]
    lines += [] if params else ["  (none)"]
    return "\n".join(lines) + "\n"


def _coerce(value: str):
    """papermill's -p convention: numbers become numbers, everything else stays a string (for a
    parameter no notebook declares a type for; :func:`typed_parameters` does the rest)."""
    for cast in (int, float):
        with suppress(ValueError):
            return cast(value)
    if value in ("True", "False"):
        return value == "True"
    return value


def declared_parameters(path: Path) -> dict[str, Any]:
    """The parameters ``path`` declares in its cell tagged ``parameters``, as papermill reads them
    (``name: type = default  # help``: each with ``name``, ``inferred_type_name``, ``default``, ``help``)."""
    return {p.name: p for p in _inspect_parameters(path)}


def _inspect_parameters(path: Path) -> list:
    """papermill's reading of the cell of ``path`` tagged ``parameters`` (empty without one)."""
    import jupytext
    from papermill.translators import PythonTranslator

    cells = [c for c in jupytext.read(path).cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    return PythonTranslator.inspect(cells[0]) if cells else []


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _short_repr(value) -> str:
    """``repr(value)`` with long strings and lists cut (``[1, 2, 3, 4, 5, 6, ...]``): an error
    line quotes a value, never a whole file of it."""
    import reprlib

    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlevel = 80, 80, 3
    return short.repr(value)


def _as_type(name: str, value, declared: Any, notebook: str, where: str = ""):
    """``value`` (text from ``-p`` or a value from ``-f``) as the type ``notebook`` declares for
    ``name``; ReportError when it is not one, led by ``where`` (default ``-p NAME``)."""
    kind = declared.inferred_type_name
    wrong = f"{where or f'-p {name}'}: {notebook} takes {kind} {name} (default {declared.default}), got {_short_repr(value)}"
    if kind == "str":
        if isinstance(value, (dict, list)):
            raise ReportError(wrong)
        return value if isinstance(value, str) else str(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ReportError(wrong + " (true or false)")
    if kind in ("int", "float"):
        if isinstance(value, bool):
            raise ReportError(wrong)
        try:
            number = float(value) if kind == "float" else int(str(value).strip())
        except (TypeError, ValueError):
            raise ReportError(wrong) from None
        if kind == "float" and not math.isfinite(number):
            raise ReportError(wrong + " (a finite number)")
        return number
    return _coerce(value) if isinstance(value, str) else value


def typed_parameters(
    given: dict, text_values: set[str], notebooks: Sequence[Path], parameters_file: Path | None = None
) -> list[dict]:
    """Each notebook's parameters: ``given`` values read as the type that notebook declares
    (``-p cache_gib 8`` is the float 8.0, ``-p batch 8`` the text "8" where batch is text);
    values in ``text_values`` (from ``-p``) that no notebook types read as papermill's -p
    would. A name that no selected notebook declares, or a value that is not of the declared
    type, raises ReportError before anything runs, naming ``-p NAME`` or, for a value the
    ``parameters_file`` gave, ``FILE: NAME``."""

    def where(names: Sequence[str]) -> str:
        from_file = [n for n in names if n not in text_values and parameters_file is not None]
        flags = [n for n in names if n not in from_file]
        said = [f"-p {', '.join(flags)}"] if flags else []
        return "; ".join([*said, *([f"{parameters_file}: {', '.join(from_file)}"] if from_file else [])])

    declared = {path.stem: declared_parameters(path) for path in notebooks}
    unknown = [n for n in given if not any(n in d for d in declared.values())]
    if unknown:
        if len(notebooks) == 1:
            stem = notebooks[0].stem
            known = ", ".join(declared[stem]) or "none"
            raise ReportError(f"{where(unknown)}: {stem} has no such parameter (its parameters: {known})")
        raise ReportError(f"{where(unknown)}: none of the selected notebooks has such a parameter")

    def typed(path: Path, name: str, value):
        if name in declared[path.stem]:
            return _as_type(name, value, declared[path.stem][name], path.stem, where([name]))
        return _coerce(value) if name in text_values else value

    return [{name: typed(path, name, value) for name, value in given.items()} for path in notebooks]


def check_out_dir(out: Path) -> None:
    """``--out`` must be a folder, or a path one can be made at: refused before anything renders."""
    if out.exists() and not out.is_dir():
        raise ReportParameterError("out", f"{out} is a file, not a folder")
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ReportParameterError("out", f"{parent} is a file, so {out} cannot be a folder")
            if not out.exists() and not os.access(parent, os.W_OK | os.X_OK):
                raise ReportParameterError("out", f"cannot make {out}: {parent} is not writable")
            break
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise ReportParameterError("out", f"{out} is not writable")


def _render_job(
    n: int,
    total: int,
    path: Path,
    out_dir: Path,
    parameters: dict | None,
    figures_dir: Path | None,
    to_stderr: bool,
    cell_timeout_s: float | None = None,
) -> tuple[Path | None, Path | None, str | None, float]:
    """One notebook's render, in this process or a pool's: the start line, then (ipynb, html,
    error text or None, seconds). The start line is printed where the render runs, so with
    ``--jobs N`` it appears when the notebook really starts."""
    print(f"[{n}/{total}] {path.stem} ...", file=sys.stderr if to_stderr else sys.stdout, flush=True)
    start = time.perf_counter()
    try:
        ipynb_path, html_path = render(
            path, out_dir, parameters, figures_dir=figures_dir, cell_timeout_s=cell_timeout_s
        )
    except NotebookFailed as err:  # a cell raised or ran past the timeout twice
        timed_out = isinstance(err, CellTimedOut) and not isinstance(err, KernelDied)
        hint = " (--cell-timeout SECONDS allows cells longer)" if timed_out else ""
        return None, None, f"{err}{hint}", time.perf_counter() - start
    except OSError as err:  # the report folder refused a write (full disk, permissions)
        error = f"{path.stem} failed: cannot write {err.filename or out_dir}: {err.strerror or err}"
        return None, None, error, time.perf_counter() - start
    return ipynb_path, html_path, None, time.perf_counter() - start


#: seconds each notebook's last render took, kept in the reports folder to order the next run
TIMINGS_NAME = ".render-seconds.json"


def read_timings(root: Path) -> dict[str, float]:
    """The last render's seconds per notebook under ``root`` (empty when none or unreadable:
    they only order the work)."""
    try:
        raw = json.loads((Path(root) / TIMINGS_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def start_timings(root: Path, notebooks_dir: Path) -> dict[str, float]:
    """The seconds that order a run: the last render's under ``root``, else the ones the
    notebooks' folder ships (a cold render's, committed: a fresh clone has rendered nothing, and
    in file order its longest notebook could start last)."""
    return read_timings(root) or read_timings(notebooks_dir)


def longest_first(stems: Sequence[str], timings: dict[str, float]) -> list[int]:
    """Indices of ``stems`` in the order a pool should start them: the longest last render first
    (LPT, Graham 1969: the two longest notebooks no longer share one worker at the end), those
    never timed after, in their given order."""
    return sorted(range(len(stems)), key=lambda i: (-timings.get(stems[i], -1.0), i))


#: notebooks that reuse another's simulations through the disk memo: with ``--jobs`` each starts
#: only once the one it names has finished, so that, cold, the two do not compute the same fits
#: side by side (expert_split's fit-routing points are all among cache_ladder's)
AFTER = {"expert_split": "cache_ladder"}


def render_parallel(
    jobs_args: list[tuple], jobs: int, order: Sequence[int], after: dict[int, int] | None = None, job=None
) -> Iterator[tuple[int, tuple]]:
    """Render in ``jobs`` worker processes (spawned: a fresh interpreter each, nothing inherited
    from this one's threads), started in ``order``; yield (index, outcome) as each notebook
    finishes. ``after`` maps a notebook to one it waits for (:data:`AFTER`): it starts when that
    one has finished, the next in ``order`` taking its place meanwhile. Each render starts its
    own kernel, as the serial loop does, so the files are the same bytes whatever the order.
    ``job`` (default :func:`_render_job`) is called as ``job(n, *args[1:])``, ``n`` counting
    the starts."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    job = _render_job if job is None else job
    after = dict(after or {})
    waiting = list(order)
    done: set[int] = set()
    started = 0
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        running: dict = {}
        try:
            while waiting or running:
                while waiting and len(running) < jobs:
                    ready = [i for i in waiting if after.get(i) is None or after[i] in done]
                    if not ready:
                        break
                    i = ready[0]
                    waiting.remove(i)
                    started += 1  # "[n/N]" counts in the order the renders really start
                    running[pool.submit(job, started, *jobs_args[i][1:])] = i
                if not running:  # every one left waits for one that never runs: start them anyway
                    after.clear()
                    continue
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    i = running.pop(future)
                    done.add(i)
                    yield i, future.result()
        finally:
            for future in running:
                future.cancel()


def record_timings(root: Path, runs: list[dict]) -> None:
    """Merge this run's seconds into the timings file (written whole; a folder that refuses the
    write only loses the ordering hint)."""
    done = {r["notebook"]: r["seconds"] for r in runs if r.get("ok")}
    if not done:
        return
    timings = {**read_timings(root), **done}
    with suppress(OSError):
        atomic.write_text(Path(root) / TIMINGS_NAME, json.dumps(timings, indent=1, sort_keys=True) + "\n")


def run(args: argparse.Namespace, *, prog: str = "moeroof.present.report") -> int:
    """:func:`render_all`, and with ``--json`` its summary printed as one JSON object; the exit
    status (2 when a notebook failed)."""
    if getattr(args, "help_notebook", None):
        sys.stdout.write(notebook_help(args.notebooks_dir, args.help_notebook))
        return 0
    code, summary = render_all(args)
    if getattr(args, "json", False):
        print(json.dumps(summary, indent=1, default=str))
    return code


def _checked_inputs(args: argparse.Namespace) -> tuple[list[Path], dict, list, int, float]:
    """``(notebooks, parameters given, each notebook's parameters, jobs, cell timeout)``, every
    check that needs no kernel done (raises ReportError)."""
    notebooks = discover(args.notebooks_dir, args.notebooks)
    if not notebooks:
        raise ReportParameterError("notebooks_dir", f"no notebooks (*.py) in {args.notebooks_dir}")
    try:
        given = read_parameters_file(args.parameters_file) if args.parameters_file else {}
    except ValueError as err:
        raise ReportError(str(err)) from None
    given.update(dict(args.parameter))
    typed = typed_parameters(given, {name for name, _ in args.parameter}, notebooks, args.parameters_file)
    per_notebook: list[dict | None] = [absolute_paths(p, Path.cwd()) or None for p in typed]
    # every combination that can be checked without a kernel is, all problems in one line
    from moeroof.present import preflight

    for path, params in zip(notebooks, per_notebook):
        try:
            preflight.check(path.stem, declared_parameters(path), params or {})
        except preflight.PreflightError as err:
            raise ReportError(str(err)) from None
    if args.out is not None:
        check_out_dir(args.out)
    jobs = getattr(args, "jobs", None)
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    if jobs < 1:
        raise ReportParameterError("jobs", f"must be at least 1, got {jobs}")
    jobs = min(jobs, len(notebooks))
    cell_timeout_s = getattr(args, "cell_timeout", None)
    cell_timeout_s = cell_timeout() if cell_timeout_s is None else cell_timeout_s
    if not 0 < cell_timeout_s < float("inf"):
        raise ReportParameterError("cell_timeout", f"must be a positive number of seconds, got {cell_timeout_s}")
    return notebooks, given, per_notebook, jobs, cell_timeout_s


def _schedule(args: argparse.Namespace, notebooks: list[Path], jobs: int) -> tuple[list[int], dict[int, int]]:
    """``(the order renders start in, {notebook: the one it waits for})``: in parallel, the longest
    first by earlier timings."""
    order = list(range(len(notebooks)))
    after: dict[int, int] = {}
    if jobs > 1:
        root = args.out if args.out is not None else paths.REPORTS_DIR
        order = longest_first([p.stem for p in notebooks], start_timings(root, args.notebooks_dir))
        index_of = {p.stem: i for i, p in enumerate(notebooks)}
        after = {index_of[a]: index_of[b] for a, b in AFTER.items() if a in index_of and b in index_of}
    return order, after


def _collect(finished, notebooks: list[Path], targets: list, per_notebook: list, say) -> tuple[list[dict], list[str]]:
    """``(one entry per run in the notebooks' order, the errors)``, a line printed as each finishes."""
    failures: list[str] = []
    results: dict[int, dict] = {}
    for i, (ipynb_path, html_path, error, seconds) in finished:
        path, target = notebooks[i], targets[i]
        entry = {"notebook": path.stem, "folder": str(target.out_dir), "parameters": per_notebook[i] or {}}
        entry["figures"] = str(target.figures_dir if target.figures_dir is not None else paths.figures_dir())
        if error is not None:
            failures.append(error)
            outcome = {"ok": False, "error": error}
            print(f"error: {error}", file=sys.stderr, flush=True)
        else:
            outcome = {"ok": True, "html": str(html_path), "ipynb": str(ipynb_path)}
            print(f"ok     {path.stem:<24} {seconds:6.1f} s  -> {html_path}", file=say, flush=True)
        results[i] = {**entry, **outcome, "seconds": round(seconds, 1)}
    return [results[i] for i in sorted(results)], failures


def render_all(args: argparse.Namespace) -> tuple[int, dict]:
    """Render every selected notebook, one line as each starts and one as it ends.

    Everything that can be checked first is (the notebooks, each parameter's name and type, the
    parameters together — :mod:`moeroof.present.preflight`: model against routing E and K,
    ranges, files —, the output folder, ``--jobs``, ``--cell-timeout``) and raises ReportError
    before anything runs.
    A notebook that fails prints one ``error: NAME failed: …`` line (its cell, the exception, the
    executed notebook saved with the traceback) and the run returns 2 once the others are done.
    Returns the exit status and the summary: the parameters given, one entry per run (notebook,
    folder, figures, ok, html/ipynb or error, seconds) and the index written. With ``args.json``
    the lines go to stderr (stdout is left to the summary).
    """
    notebooks, given, per_notebook, jobs, cell_timeout_s = _checked_inputs(args)
    as_json = getattr(args, "json", False)
    say = sys.stderr if as_json else sys.stdout  # with --json stdout carries the JSON alone
    targets = [
        target_for(path.stem, params, args.out, paths.REPORTS_DIR) for path, params in zip(notebooks, per_notebook)
    ]
    order, after = _schedule(args, notebooks, jobs)
    starts = {i: n for n, i in enumerate(order, 1)}  # "[n/N]" counts in the order renders start
    jobs_args = [
        (starts[i], len(notebooks), path, target.out_dir, params, target.figures_dir, as_json, cell_timeout_s)
        for i, (path, target, params) in enumerate(zip(notebooks, targets, per_notebook))
    ]
    finished = (
        enumerate(_render_job(*job) for job in jobs_args)
        if jobs == 1
        else render_parallel(jobs_args, jobs, order, after)
    )
    runs, failures = _collect(finished, notebooks, targets, per_notebook, say)
    root = args.out if args.out is not None else paths.REPORTS_DIR
    record_timings(root, runs)
    # the index lists every report under its folder (this run's and earlier ones, runs with
    # parameters included), failed or not
    from moeroof.present.site import build_index

    figures = args.out / "figures" if args.out is not None else paths.figures_dir()
    index = build_index(root, figures)
    print(f"index  {'':<24} {'':>8}  -> {index}", file=say, flush=True)
    return (2 if failures else 0), {"parameters": given, "runs": runs, "index": str(index)}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m moeroof.present.report`` (``make report``): a bad request is one ``error:`` line, exit 2."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ReportError as err:
        if isinstance(err, ParameterError):  # the flag that carried the value, as the CLI says it
            print(f"error: --{err.parameter.replace('_', '-')}: {err.detail}", file=sys.stderr)
        else:
            print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
