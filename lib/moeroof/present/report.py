"""Render the notebooks into reports: ``python -m moeroof.present.report [--notebooks NAME ...] [--out DIR]``.

The ``.py`` percent notebooks are the source of truth (STYLE.md); papermill is the runner, the
same way CI and ``papermill nb.ipynb out.ipynb -p ...`` run them, so a report is exactly what a
user would get. For each notebook this writes ``DIR/NAME.ipynb`` (executed) and ``DIR/NAME.html``
(outputs only, like ``nbconvert --no-input``, with no scripts from a CDN and no widget views,
so it reads offline), then rebuilds ``DIR/index.html`` over every report there
(:mod:`moeroof.present.site`: parameters, links, a gallery of the saved figures).

Reports are reproducible: papermill and nbclient stamp wall-clock times and random cell ids into
the notebook, so those are removed or made deterministic before saving; rendering a deterministic
notebook twice gives the same bytes. Each file is written whole or not at all (temp file +
``os.replace``, :mod:`moeroof.core.atomic`), so an interrupted render never leaves a half report that looks finished.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import jupytext
import nbformat
import papermill as pm
from jinja2 import DictLoader
from jupyter_client.kernelspec import NoSuchKernel
from nbconvert import HTMLExporter
from papermill.exceptions import PapermillExecutionError

from moeroof.core import atomic, paths
from moeroof.present.site import build_index

#: kernel pinned by name: the kernel of the interpreter running this (papermill swaps a bare
#: ``python`` in the kernelspec for ``sys.executable``), so the report sees the installed suite
KERNEL_NAME = "python3"
#: papermill's per-notebook and per-cell wall-clock keys, and nbclient's per-cell timing block
_PAPERMILL_TIME_KEYS = ("start_time", "end_time", "duration")
_CELL_TIMING_KEY = "execution"


class NotebookFailed(RuntimeError):
    """A notebook raised while executing; the message names the cell and the error, no traceback."""


def discover(notebooks_dir: Path, names: Sequence[str] | None = None) -> list[Path]:
    """The percent notebooks to render, sorted by name; ``names`` selects a subset (stems)."""
    found = {p.stem: p for p in sorted(Path(notebooks_dir).glob("*.py"))}
    if not names:
        return list(found.values())
    missing = [n for n in names if n not in found]
    if missing:
        known = ", ".join(found) or "none"
        raise SystemExit(
            f"moeroof.present.report: no notebook named {', '.join(missing)} in {notebooks_dir} (found: {known})"
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
        meta["input_path"] = input_path
        meta["output_path"] = output_path
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop(_CELL_TIMING_KEY, None)
        cell_meta = cell.metadata.get("papermill")
        if cell_meta is not None:
            for key in _PAPERMILL_TIME_KEYS:
                cell_meta.pop(key, None)
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


#: the lab template without the scripts it loads from a CDN (require.js, MathJax): the reports
#: hold no JavaScript outputs and no LaTeX, and must read without a network (reports/index.html)
_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
"""


def to_html(nb: nbformat.NotebookNode, name: str) -> str:
    """HTML of the outputs only (inputs and prompts hidden, as ``nbconvert --no-input``), offline."""
    exporter = HTMLExporter(
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        extra_loaders=[DictLoader({"moeroof_offline.html.j2": _OFFLINE_TEMPLATE})],
        template_file="moeroof_offline.html.j2",
    )
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": name}})
    return body


def execute(path: Path, parameters: dict | None = None) -> nbformat.NotebookNode:
    """Run one percent notebook through papermill in its own directory; raise NotebookFailed on error.

    ``output_path=None`` keeps papermill from saving after every cell: the caller writes the
    finished notebook once, whole.
    """
    nb = jupytext.read(path)
    try:
        return pm.execute_notebook(
            nb,
            None,
            parameters=parameters or {},
            kernel_name=KERNEL_NAME,
            language="python",  # a percent notebook may carry no kernelspec; injecting parameters needs it
            cwd=str(path.parent),
            progress_bar=False,
        )
    except PapermillExecutionError as err:
        raise NotebookFailed(f"{path.name}: cell [{err.exec_count}] raised {err.ename}: {err.evalue}") from None
    except NoSuchKernel as err:
        raise NotebookFailed(
            f"{path.name}: no Jupyter kernel {err.name!r}; install ipykernel in this environment"
        ) from None


def render(path: Path, out_dir: Path, parameters: dict | None = None) -> tuple[Path, Path]:
    """Execute ``path`` and write ``out_dir/NAME.ipynb`` and ``out_dir/NAME.html``; return both paths."""
    name = path.stem
    ipynb_path, html_path = out_dir / f"{name}.ipynb", out_dir / f"{name}.html"
    nb = execute(path, parameters)
    nb = strip_volatile(nb, input_path=_display_path(path), output_path=_display_path(ipynb_path))
    nb = strip_widgets(nb)
    html = to_html(nb, name)
    atomic.write_text(ipynb_path, nbformat.writes(nb) + "\n")
    atomic.write_text(html_path, html)
    return ipynb_path, html_path


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m moeroof.present.report",
        description="Execute the percent notebooks with papermill and write .ipynb and .html reports.",
    )
    parser.add_argument("--notebooks", nargs="+", metavar="NAME", help="notebook stems to render (default: all)")
    parser.add_argument("--out", type=Path, default=paths.REPORTS_DIR, help="output directory (default: %(default)s)")
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
    return parser.parse_args(argv)


def _coerce(value: str):
    """papermill's -p convention: numbers become numbers, everything else stays a string."""
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    if value in ("True", "False"):
        return value == "True"
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Render every selected notebook, one line each with its wall time; non-zero if any failed."""
    args = _parse_args(argv)
    notebooks = discover(args.notebooks_dir, args.notebooks)
    if not notebooks:
        print(f"moeroof.present.report: no notebooks (*.py) in {args.notebooks_dir}", file=sys.stderr)
        return 2
    parameters = {name: _coerce(value) for name, value in args.parameter} or None
    if parameters:
        # figures/ holds the default renders that design docs link; a what-if run must not
        # overwrite them, so its figures go beside its report (the kernel inherits the env)
        os.environ.setdefault("MOEROOF_FIGURES_DIR", str(args.out / "figures"))
    failures = []
    for path in notebooks:
        start = time.perf_counter()
        try:
            _, html_path = render(path, args.out, parameters)
        except NotebookFailed as err:
            failures.append(str(err))
            print(f"FAILED {path.stem:<24} {time.perf_counter() - start:6.1f} s  {err}", file=sys.stderr, flush=True)
            continue
        print(f"ok     {path.stem:<24} {time.perf_counter() - start:6.1f} s  -> {html_path}", flush=True)
    # the index lists every report in the directory (this run's and earlier ones), failed or not
    print(f"index  {'':<24} {'':>8}  -> {build_index(args.out, paths.figures_dir())}", flush=True)
    if failures:
        print(f"moeroof.present.report: {len(failures)} of {len(notebooks)} notebooks failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
