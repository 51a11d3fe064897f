"""The report index (moeroof.present.site) and the offline, byte-stable reports it links (issue 7)."""

from __future__ import annotations

import re

import nbformat
import pytest

import moeroof
from moeroof.core.paths import NOTEBOOKS_DIR
from moeroof.present import report, site


def _fake_report(reports, name, *, title, params_src, injected=None):
    """A minimal executed notebook + HTML, as moeroof.present.report writes them."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"# {title}\n\n**Answer.** …"),
        nbformat.v4.new_code_cell(params_src, metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("x = 1"),
    ]
    nb.metadata["papermill"] = {"parameters": injected or {}}
    reports.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, reports / f"{name}.ipynb")
    (reports / f"{name}.html").write_text("<html><body>report</body></html>")


def _png(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG fake " + path.stem.encode())


@pytest.fixture
def layout(tmp_path):
    reports, figures = tmp_path / "reports", tmp_path / "figures"
    _fake_report(
        reports,
        "union",
        title="Union <small>?",
        params_src="b_max: int = 1024  # largest batch\n",
        injected={"b_max": 64},
    )
    _fake_report(
        reports,
        "union_curve",
        title="Curve?",
        params_src='experts: int = 256  # routed experts (E)\nname: str = "a"  # a name\n',
    )
    for stem in ("union_alone", "union_curve_models", "union_curve_histogram", "orphan_figure"):
        _png(figures / f"{stem}.png")
        (figures / f"{stem}.svg").write_text(f"<svg>{stem}</svg>")
    (reports / "stale.ipynb").write_text("{}")  # no stale.html beside it: not a report
    return reports, figures


def test_figures_go_to_the_longest_matching_notebook(layout):
    _, figures = layout
    got = site.figures_for(["union", "union_curve"], figures)
    assert got == {"union": ("union_alone",), "union_curve": ("union_curve_histogram", "union_curve_models")}
    assert site.figures_for(["x"], figures.parent / "missing") == {"x": ()}


def test_parameters_merge_defaults_with_injected_values(layout):
    reports, _ = layout
    r = site.read_report(reports / "union.ipynb")
    assert r.title == "Union <small>?"
    (p,) = r.parameters
    assert (p.name, p.type_name, p.default, p.value, p.help, p.overridden) == (
        "b_max",
        "int",
        "1024",
        "64",
        "largest batch",
        True,
    )
    names = [(p.name, p.value, p.overridden) for p in site.read_report(reports / "union_curve.ipynb").parameters]
    assert names == [("experts", "256", False), ("name", '"a"', False)]


def test_index_links_copies_and_is_byte_stable(layout):
    reports, figures = layout
    index = site.build_index(reports, figures)
    first = index.read_bytes()
    assert site.build_index(reports, figures).read_bytes() == first, "two builds must give the same bytes"
    text = first.decode()
    assert str(reports.parent) not in text and "file:" not in text, "no absolute paths in the index"
    assert not re.search(r"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d", text), "no timestamps in the index"
    assert f"moeroof {moeroof.__version__}" in text
    for name in ("union", "union_curve"):
        assert f'href="{name}.html"' in text and f'href="{name}.ipynb"' in text
    assert "stale" not in text and "orphan_figure" not in text
    assert "Union &lt;small&gt;?" in text, "titles are escaped"
    assert re.search(r'class="over"><code>64 <small>\(default 1024\)</small>', text)
    # figures are copied beside the index and linked relatively, so reports/ reads on its own
    for stem in ("union_alone", "union_curve_models", "union_curve_histogram"):
        assert f'src="figures/{stem}.png"' in text
        assert (reports / "figures" / f"{stem}.png").read_bytes() == (figures / f"{stem}.png").read_bytes()
        assert (reports / "figures" / f"{stem}.svg").is_file()
    assert not (reports / "figures" / "orphan_figure.png").exists()


def test_index_over_figures_already_inside_reports(tmp_path):
    reports = tmp_path / "reports"
    _fake_report(reports, "nb", title="Q", params_src="a: int = 1  # a\n")
    _png(reports / "figures" / "nb_one.png")
    text = site.build_index(reports, reports / "figures").read_text()
    assert 'src="figures/nb_one.png"' in text


def test_strip_widgets_drops_views_and_state():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    cell = nbformat.v4.new_code_cell("w")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data", data={report.WIDGET_VIEW_MIME: {"model_id": "abc"}, "text/plain": "VBox()"}
        ),
        nbformat.v4.new_output("display_data", data={"text/plain": "kept"}),
    ]
    nb.cells = [cell]
    out = report.strip_widgets(nb)
    assert "widgets" not in out.metadata
    assert [o.data["text/plain"] for o in out.cells[0].outputs] == ["kept"]


@pytest.mark.notebook
def test_whatif_report_renders_offline_and_the_same_twice(tmp_path, monkeypatch):
    """`python -m moeroof.present.report` twice: same report bytes, same index bytes, nothing from a CDN."""
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(tmp_path / "figures"))
    out = tmp_path / "reports"
    argv = [
        "--notebooks",
        "whatif",
        "--out",
        str(out),
        "--notebooks-dir",
        str(NOTEBOOKS_DIR),
        "-p",
        "b_max",
        "32",
        "-p",
        "trace_steps",
        "16",
        "-p",
        "trace_layers",
        "2",
    ]
    assert report.main(argv) == 0
    first = {p.name: p.read_bytes() for p in out.glob("*.*")}
    assert set(first) == {"whatif.ipynb", "whatif.html", "index.html"}
    assert report.main(argv) == 0
    assert {p.name: p.read_bytes() for p in out.glob("*.*")} == first
    html = first["whatif.html"].decode()
    assert not re.search(r'<script[^>]+src="https?:', html), "a report must not load scripts from the network"
    assert report.WIDGET_VIEW_MIME not in first["whatif.ipynb"].decode()
    index = first["index.html"].decode()
    assert 'src="figures/whatif_state.png"' in index and "<code>32 <small>(default 256)</small>" in index
    assert (out / "figures" / "whatif_state.png").is_file()
