"""The report index: ``reports/index.html``, one page over every rendered notebook.

``python -m moeroof.present.report`` calls :func:`build_index` after rendering; ``python -m moeroof.present.site
[REPORTS_DIR] [--figures DIR]`` rebuilds it alone. For each report ``NAME.ipynb`` + ``NAME.html``
in the reports directory the index shows:

- the notebook's question (its first markdown heading) and links to the HTML report (outputs
  only) and the executed notebook;
- what its numbers are, read from the answer the run computed (the cell tagged ``answer``):
  **projected** when the answer says some input is not witnessed, **witnessed** when it says
  every input is; the page's header counts them over the runs listed;
- the parameters it ran with: every parameter of the cell tagged ``parameters`` (name, type,
  help) with its default, replaced by the value papermill injected where one was given (read
  from the executed notebook's ``metadata.papermill.parameters``);
- a gallery of its figures: the files ``FIGURES/NAME_*.png`` that ``moeroof.present.plots.save_figure``
  wrote (a figure goes to the notebook with the longest stem that prefixes its name, so
  ``union_curve_models`` belongs to ``union_curve``, not to a notebook ``union``).

Runs with parameters live in their own folders (``REPORTS_DIR/NAME/<hash>/``: report, executed
notebook, ``figures/``); the index lists each after the default renders, headed by the
parameters it was given, with its figures linked in place. The page ends with the glossary
(:mod:`moeroof.present.glossary`).

Figures are copied into ``REPORTS_DIR/figures/`` (unless they are already inside the reports
directory) and linked relatively, so the directory reads from ``file://`` without a server and
can be moved or archived whole. The page holds no timestamps and no absolute paths, so it is
byte-stable: two builds from the same reports give the same bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat
from papermill.translators import PythonTranslator

import moeroof
from moeroof.core import atomic, paths
from moeroof.present.answers import ANSWER_TAG, displayed_markdown
from moeroof.present.glossary import GLOSSARY

__all__ = ["Parameter", "Report", "read_report", "figures_for", "build_index", "render_index", "main"]

INDEX_NAME = "index.html"
#: where the index keeps its copies of the figures, relative to the reports directory
FIGURES_SUBDIR = "figures"


@dataclass(frozen=True)
class Parameter:
    """One notebook parameter as run: ``value`` is the injected one when ``overridden``."""

    name: str
    type_name: str
    default: str
    value: str
    help: str
    overridden: bool


@dataclass(frozen=True)
class Report:
    """A rendered notebook: its stem, question, parameters and figure stems (sorted)."""

    name: str
    title: str
    parameters: tuple[Parameter, ...]
    figures: tuple[str, ...] = ()
    #: folder of a run with parameters relative to the reports directory (``NAME/<hash>/``), or
    #: ``""`` for the default render at the top level
    folder: str = ""
    #: the answer the run computed (Markdown), ``""`` when the notebook displayed none
    answer: str = ""

    @property
    def provenance(self) -> str:
        """What the run's numbers are, from its answer: ``projected`` (the answer says some input
        is not witnessed), ``witnessed`` (it says every input is) or ``""`` (no answer)."""
        if "projected" in self.answer:
            return "projected"
        if "witnessed" in self.answer:
            return "witnessed"
        return ""

    @property
    def anchor(self) -> str:
        """The section id: the stem, plus the run's hash for a run in its own folder."""
        return self.name if not self.folder else f"{self.name}-{self.folder.rstrip('/').rsplit('/', 1)[-1]}"


def _is_answer(cell: nbformat.NotebookNode) -> bool:
    return ANSWER_TAG in cell.get("metadata", {}).get("tags", [])


def _answer(nb: nbformat.NotebookNode) -> str:
    """The run's answer: the Markdown cell tagged ``answer`` the report lifted to the top, or the
    Markdown a code cell tagged ``answer`` displayed (a notebook rendered before the lift)."""
    cell = next((c for c in nb.cells if _is_answer(c)), None)
    if cell is None:
        return ""
    return cell.source if cell.cell_type == "markdown" else "\n\n".join(displayed_markdown(cell))


def _title(nb: nbformat.NotebookNode, name: str) -> str:
    """The first markdown heading (the notebook's question), else the stem."""
    for cell in nb.cells:
        if cell.cell_type != "markdown" or _is_answer(cell):
            continue
        for line in cell.source.splitlines():
            if line.startswith("#"):
                return line.lstrip("#").strip() or name
    return name


def _parameters(nb: nbformat.NotebookNode) -> tuple[Parameter, ...]:
    """Parameters cell (papermill's own parser) merged with the values papermill injected."""
    injected = dict(nb.metadata.get("papermill", {}).get("parameters") or {})
    cell = next((c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])), None)
    declared = PythonTranslator.inspect(cell) if cell is not None else []
    out = []
    for p in declared:
        over = p.name in injected
        value = repr(injected.pop(p.name)) if over else p.default
        out.append(Parameter(p.name, p.inferred_type_name, p.default, value, p.help, over))
    for name in sorted(injected):  # injected but not declared: papermill runs them anyway
        out.append(Parameter(name, "", "", repr(injected[name]), "not in the parameters cell", True))
    return tuple(out)


def read_report(ipynb: Path) -> Report:
    """Title and parameters of one executed notebook (figures are filled in by :func:`figures_for`)."""
    nb = nbformat.read(ipynb, as_version=4)
    return Report(name=ipynb.stem, title=_title(nb, ipynb.stem), parameters=_parameters(nb), answer=_answer(nb))


def figures_for(names: Sequence[str], figures_dir: Path) -> dict[str, tuple[str, ...]]:
    """Figure stems per notebook: ``NAME_*.png`` in ``figures_dir``, longest matching stem wins."""
    out: dict[str, list[str]] = {n: [] for n in names}
    by_length = sorted(names, key=len, reverse=True)
    for png in sorted(Path(figures_dir).glob("*.png")):
        owner = next((n for n in by_length if png.stem.startswith(f"{n}_")), None)
        if owner is not None:
            out[owner].append(png.stem)
    return {n: tuple(v) for n, v in out.items()}


def _copy_figures(stems: Sequence[str], src: Path, dst: Path) -> None:
    """Copy ``stem.png`` (and ``stem.svg`` where present) into ``dst`` unless already identical."""
    dst.mkdir(parents=True, exist_ok=True)
    for source in (src / f"{stem}{suffix}" for stem in stems for suffix in (".png", ".svg")):
        target = dst / source.name
        if source.is_file() and not (target.is_file() and target.read_bytes() == source.read_bytes()):
            atomic.copy_file(source, target)


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2.2em; border-top: 1px solid #ddd; padding-top: 1em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
td, th { border: 1px solid #ddd; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
td.over { font-weight: bold; } code { font-size: 0.95em; }
.gallery { display: flex; flex-wrap: wrap; gap: 1em; }
.gallery figure { margin: 0; width: 360px; } .gallery img { width: 100%; border: 1px solid #eee; }
.gallery figcaption { font-size: 0.8em; }
nav li { margin: 0.2em 0; }
""".strip()


def _heading(r: Report) -> str:
    """``name`` for the default render; ``name (run hash: a=1, b=2)`` for a run with parameters."""
    if not r.folder:
        return r.name
    given = ", ".join(f"{p.name}={p.value}" for p in r.parameters if p.overridden)
    run = r.folder.rstrip("/").rsplit("/", 1)[-1]
    return f"{r.name} (run {run}: {given})" if given else f"{r.name} (run {run})"


#: what each provenance means, as the index says it per report
_PROVENANCE_WORDS = {
    "projected": "projected: the answer names inputs that are not witnessed (a model, an assumed preset value "
    "or synthetic data), so its numbers are the model's",
    "witnessed": "witnessed: every input the answer rests on is witnessed",
    "": "not stated: the run displayed no answer",
}


def provenance_summary(reports: Sequence[Report]) -> str:
    """The index's sentence on what the numbers are, counted over the runs listed."""
    if not reports:
        return "No reports yet."
    parts = []
    for key, words in (
        ("projected", "projected (some input is not witnessed)"),
        ("witnessed", "on witnessed inputs only"),
        ("", "without an answer"),
    ):
        names = [_heading(r) for r in reports if r.provenance == key]
        if names:
            parts.append(f"{len(names)} {words}: {', '.join(names)}")
    n = len(reports)
    return (
        f"Each report opens with its answer, computed from the run, which says what its numbers are. "
        f"Of the {n} report{'s' if n != 1 else ''} listed, " + "; ".join(parts) + "."
    )


def render_index(reports: Sequence[Report], *, version: str) -> str:
    """The index page; a pure function of its arguments (no clock, no paths beyond relative links)."""
    e = html.escape
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>moeroof reports</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
        "<h1>moeroof reports</h1>",
        f"<p>Rendered with moeroof {e(version)} by <code>make report</code> (papermill). Each report is the "
        "notebook's outputs without code; the parameters are those it ran with (bold: given on the "
        "command line, the rest are the notebook's defaults).</p>",
        f"<p>{e(provenance_summary(reports))}</p>",
        "<nav><ul>",
    ]
    lines += [f'<li><a href="#{e(r.anchor)}">{e(_heading(r))}</a>: {e(r.title)}</li>' for r in reports]
    lines += ['<li><a href="#glossary">glossary</a></li>', "</ul></nav>"]
    for r in reports:
        lines += [
            f'<section id="{e(r.anchor)}">',
            f"<h2>{e(_heading(r))}: {e(r.title)}</h2>",
            f'<p><a href="{e(r.folder)}{e(r.name)}.html">report (HTML)</a> · '
            f'<a href="{e(r.folder)}{e(r.name)}.ipynb">executed notebook (.ipynb)</a> · '
            f"source <code>notebooks/{e(r.name)}.py</code>"
            + (f" · folder <code>{e(r.folder)}</code>" if r.folder else "")
            + "</p>",
            f'<p class="provenance">Numbers: {e(_PROVENANCE_WORDS[r.provenance])}.</p>',
        ]
        if r.parameters:
            lines.append(
                "<table><thead><tr><th>parameter</th><th>value</th><th>type</th><th>meaning</th></tr></thead><tbody>"
            )
            for p in r.parameters:
                value = e(p.value) + (f" <small>(default {e(p.default)})</small>" if p.overridden and p.default else "")
                cls = ' class="over"' if p.overridden else ""
                lines.append(
                    f"<tr><td><code>{e(p.name)}</code></td><td{cls}><code>{value}</code></td>"
                    f"<td>{e(p.type_name)}</td><td>{e(p.help)}</td></tr>"
                )
            lines.append("</tbody></table>")
        else:
            lines.append("<p>No parameters cell.</p>")
        if r.figures:
            srcs = [(stem, e(f"{r.folder}{FIGURES_SUBDIR}/{stem}")) for stem in r.figures]
            lines += ['<div class="gallery">'] + [
                f'<figure><a href="{src}.png"><img src="{src}.png" alt="{e(stem)}"></a>'
                f"<figcaption>{e(stem)}</figcaption></figure>"
                for stem, src in srcs
            ]
            lines.append("</div>")
        else:
            lines.append("<p>No saved figures.</p>")
        lines.append("</section>")
    lines += ['<section id="glossary">', "<h2>Glossary</h2>", "<dl>"]
    lines += [f"<dt><b>{e(term)}</b></dt><dd>{e(meaning)}</dd>" for term, meaning in GLOSSARY]
    lines += ["</dl>", "</section>", "</body>", "</html>", ""]
    return "\n".join(lines)


def build_index(
    reports_dir: str | os.PathLike[str] | None = None, figures_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Write ``reports_dir/index.html`` over every ``NAME.ipynb`` with its ``NAME.html``; return its path.

    Runs with parameters in their own folders (``NAME/<hash>/NAME.ipynb``, as
    :mod:`moeroof.present.report` writes them) are listed after the default renders, each with
    the parameters it was given and the figures in its folder.

    ``figures_dir`` defaults to :func:`moeroof.core.paths.figures_dir` (where the renders saved them).
    """
    reports_dir = Path(reports_dir) if reports_dir is not None else paths.REPORTS_DIR
    figures_dir = Path(figures_dir) if figures_dir is not None else paths.figures_dir()
    ipynbs = [p for p in sorted(reports_dir.glob("*.ipynb")) if p.with_suffix(".html").is_file()]
    reports = [read_report(p) for p in ipynbs]
    figs = figures_for([r.name for r in reports], figures_dir)
    local = reports_dir / FIGURES_SUBDIR
    all_stems = [s for r in reports for s in figs[r.name]]
    if all_stems and figures_dir.resolve() != local.resolve():
        _copy_figures(all_stems, figures_dir, local)
    reports = [dataclasses.replace(r, figures=figs[r.name]) for r in reports]
    # runs with parameters: reports_dir/NAME/<hash>/NAME.ipynb with their figures beside them
    for ipynb in sorted(reports_dir.glob("*/*/*.ipynb")):
        if ipynb.parent.parent.name != ipynb.stem or not ipynb.with_suffix(".html").is_file():
            continue
        r = read_report(ipynb)
        run_figs = figures_for([r.name], ipynb.parent / FIGURES_SUBDIR)[r.name]
        folder = ipynb.parent.relative_to(reports_dir).as_posix() + "/"
        reports.append(dataclasses.replace(r, figures=run_figs, folder=folder))
    text = render_index(reports, version=moeroof.__version__)
    target = reports_dir / INDEX_NAME
    atomic.write_text(target, text)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moeroof.present.site", description="Rebuild reports/index.html.")
    parser.add_argument("reports_dir", nargs="?", type=Path, default=paths.REPORTS_DIR, help="default: %(default)s")
    parser.add_argument(
        "--figures", type=Path, default=None, help="figures directory (default: moeroof.core.paths.figures_dir())"
    )
    args = parser.parse_args(argv)
    print(f"index  -> {build_index(args.reports_dir, args.figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
