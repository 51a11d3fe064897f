"""The report index (moeroof.present.site) and the offline, byte-stable reports it links."""

from __future__ import annotations

import html
import re

import nbformat
import pytest

import moeroof
from moeroof.cli.app import main as cli_main
from moeroof.core import paths
from moeroof.core.paths import NOTEBOOKS_DIR, REPO_ROOT
from moeroof.present import report, site
from moeroof.present.glossary import GLOSSARY


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


def test_index_lists_runs_in_their_own_folders_with_their_parameters(layout):
    reports, figures = layout
    run = reports / "union" / "0123456789ab"
    _fake_report(
        run, "union", title="Union <small>?", params_src="b_max: int = 1024  # largest batch\n", injected={"b_max": 8}
    )
    _png(run / "figures" / "union_alone.png")
    # a folder that is not NAME/<hash>/NAME.ipynb is not a run
    _fake_report(reports / "other" / "x", "union", title="stray", params_src="")
    text = site.build_index(reports, figures).read_text()
    assert 'href="union/0123456789ab/union.html"' in text and 'href="union/0123456789ab/union.ipynb"' in text
    assert 'src="union/0123456789ab/figures/union_alone.png"' in text
    assert "union (run 0123456789ab: b_max=8)" in text
    assert 'id="union-0123456789ab"' in text and 'id="union"' in text
    assert "stray" not in text
    # the default render is still there with its own parameters
    assert re.search(r'class="over"><code>64 <small>\(default 1024\)</small>', text)


def test_index_ends_with_the_glossary(layout):
    reports, figures = layout
    text = site.build_index(reports, figures).read_text()
    assert '<section id="glossary">' in text
    for term, _ in GLOSSARY:
        assert f"<dt><b>{html.escape(term)}</b></dt>" in text


def test_the_docs_glossary_names_every_term():
    page = (REPO_ROOT / "docs" / "glossary.md").read_text()
    missing = [term for term, _ in GLOSSARY if f"**{term}**" not in page]
    assert not missing, f"docs/glossary.md lacks {missing} (moeroof.present.glossary is the list)"


def test_parameters_hash_is_stable_and_separates_runs():
    a = report.parameters_hash({"model": "qwen3-30b-a3b", "cache_gib": 8})
    assert a == report.parameters_hash({"cache_gib": 8, "model": "qwen3-30b-a3b"}), "key order must not matter"
    assert re.fullmatch(r"[0-9a-f]{12}", a)
    assert a != report.parameters_hash({"model": "qwen3-30b-a3b", "cache_gib": 8.5})
    assert a != report.parameters_hash({"model": "qwen3-30b-a3b", "cache_gib": "8"}), "8 and '8' are different runs"


def test_where_a_render_goes(tmp_path):
    reports = tmp_path / "reports"
    default = report.target_for("net_toks", None, None, reports)
    assert default == report.Target(reports, None), "the default render writes reports/ and the figures env/figures/"
    run = report.target_for("net_toks", {"cache_gib": 8}, None, reports)
    assert run.out_dir.parent == reports / "net_toks" and run.figures_dir == run.out_dir / "figures"
    assert run.out_dir.name == report.parameters_hash({"cache_gib": 8})
    out = report.target_for("net_toks", {"cache_gib": 8}, tmp_path / "mine", reports)
    assert out == report.Target(tmp_path / "mine", tmp_path / "mine" / "figures")
    assert report.target_for("net_toks", None, tmp_path / "mine", reports).figures_dir == tmp_path / "mine" / "figures"


def test_parameter_paths_resolve_against_the_working_directory(tmp_path):
    (tmp_path / "mine.csv").write_text("layer,expert,count\n")
    (tmp_path / "sub").mkdir()
    given = {
        "histogram": "mine.csv",
        "trace": "sub/../mine.csv",
        "routing": "zipf:1.2",
        "b_max": 64,
        "embedded": "histograms/deepseek-v3-like.csv",
        "absolute": "/nowhere/x.csv",
    }
    got = report.absolute_paths(given, tmp_path)
    assert got["histogram"] == str((tmp_path / "mine.csv").resolve())
    assert got["trace"] == str((tmp_path / "mine.csv").resolve())
    for name in ("routing", "b_max", "embedded", "absolute"):
        assert got[name] == given[name]


def test_parameters_file(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text("model: qwen3-30b-a3b\ncache_gib: 8\nvalidate: false\n")
    assert report.read_parameters_file(good) == {"model": "qwen3-30b-a3b", "cache_gib": 8, "validate": False}
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: a\ncache_gib: [8\n")
    with pytest.raises(ValueError, match=r"bad\.yaml:\d+: not valid YAML"):
        report.read_parameters_file(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="a parameters file is a mapping"):
        report.read_parameters_file(listy)
    with pytest.raises(ValueError, match="cannot read the parameters file"):
        report.read_parameters_file(tmp_path / "absent.yaml")


def test_report_command_refuses_a_bad_parameters_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("[")
    assert cli_main(["report", "--notebooks", "whatif", "-f", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bad.yaml" in err and "Traceback" not in err
    assert cli_main(["report", "--notebooks", "no_such_notebook"]) == 2
    assert "no notebook named no_such_notebook" in capsys.readouterr().err


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
def test_whatif_report_renders_offline_in_its_own_folder_and_the_same_twice(tmp_path, monkeypatch):
    """`moeroof report -p ...` twice: its own folder, same bytes, figures beside it, nothing from a CDN."""
    committed = tmp_path / "committed-figures"
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(committed))  # stands for figures/: must stay untouched
    reports = tmp_path / "reports"
    monkeypatch.setattr(paths, "REPORTS_DIR", reports)
    argv = ["report", "--notebooks", "whatif", "-p", "b_max", "32", "-p", "trace_steps", "16"]
    argv += ["-p", "trace_layers", "2", "--notebooks-dir", str(NOTEBOOKS_DIR)]
    assert cli_main(argv) == 0
    run = reports / "whatif" / report.parameters_hash({"b_max": 32, "trace_steps": 16, "trace_layers": 2})
    first = {p.name: p.read_bytes() for p in run.glob("*.*")}
    assert set(first) == {"whatif.ipynb", "whatif.html"}
    assert (run / "figures" / "whatif_state.png").is_file(), "a run's figures go to its own folder"
    assert not committed.exists(), "a run with parameters must not write the default figures"
    index_first = (reports / "index.html").read_bytes()
    assert cli_main(argv) == 0
    assert {p.name: p.read_bytes() for p in run.glob("*.*")} == first
    assert (reports / "index.html").read_bytes() == index_first
    html_text = first["whatif.html"].decode()
    assert not re.search(r'<script[^>]+src="https?:', html_text), "a report must not load scripts from the network"
    assert report.WIDGET_VIEW_MIME not in first["whatif.ipynb"].decode()
    index = index_first.decode()
    assert (
        f'src="whatif/{run.name}/figures/whatif_state.png"' in index
        and "<code>32 <small>(default 256)</small>" in index
    )


@pytest.mark.notebook
def test_parallel_render_writes_the_same_bytes_as_the_serial_one(tmp_path, capfd):
    """`--jobs 2` renders two notebooks at once (a process and a kernel each) into the same
    bytes as `--jobs 1`, with a start line and an end line per notebook."""
    small = ["-p", "b_max", "32", "-p", "trace_steps", "16", "-p", "trace_layers", "2"]
    small += ["-p", "model_layers", "4", "-p", "bootstrap", "10"]
    got = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        argv = ["--notebooks", "whatif", "union_curve", "--notebooks-dir", str(NOTEBOOKS_DIR), *small]
        assert report.main([*argv, "--out", str(out), "--jobs", str(jobs)]) == 0
        said = capfd.readouterr().out  # fd level: the pool's processes print too
        # found anywhere, not at line starts: the kernels share this stdout and may leave a partial line
        started = sorted(re.findall(r"\[\d/2\] (\w+) \.\.\.", said))
        assert started == ["union_curve", "whatif"], f"start lines (--jobs {jobs}) in {said!r}"
        ended = sorted(re.findall(r"ok +(\w+) +[\d.]+ s", said))
        assert ended == ["union_curve", "whatif"], f"end lines (--jobs {jobs}) in {said!r}"
        got[jobs] = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert {"whatif.ipynb", "whatif.html", "union_curve.ipynb", "union_curve.html"} <= set(got[1])
    assert got[2].keys() == got[1].keys()
    differ = sorted(name for name in got[1] if got[1][name] != got[2][name] and name.endswith((".ipynb", ".html")))
    assert not differ, f"--jobs 2 wrote other bytes than --jobs 1: {differ}"


STALLS_ONCE = """\
# %% tags=["parameters"]
marker = ""
stall_s = 60.0

# %%
import time
from pathlib import Path

first = not Path(marker).exists()
Path(marker).write_text("ran")
if first or stall_s < 0:
    time.sleep(abs(stall_s))
print("finished")
"""


@pytest.mark.notebook
def test_a_cell_past_the_timeout_is_retried_once_in_a_fresh_kernel(tmp_path, capfd):
    """A kernel stuck in one cell ends that attempt; the second attempt (fresh kernel) finishes.
    A cell stuck every time fails the notebook with one line naming the timeout."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    (nb_dir / "stall.py").write_text(STALLS_ONCE)
    marker = tmp_path / "marker"
    argv = ["--notebooks", "stall", "--notebooks-dir", str(nb_dir), "--cell-timeout", "4", "--jobs", "1"]
    assert report.main([*argv, "-p", "marker", str(marker), "--out", str(tmp_path / "once")]) == 0
    said = capfd.readouterr()
    assert re.search(r"retry +stall .*ran past 4 s", said.err), said.err
    assert "finished" in (tmp_path / "once" / "stall.ipynb").read_text()
    marker.unlink()
    stuck = ["-p", "marker", str(marker), "-p", "stall_s", "-60", "--out", str(tmp_path / "stuck")]
    assert report.main([*argv, *stuck]) == 2
    err = capfd.readouterr().err
    assert re.search(r"^error: stall failed: a cell ran past 4 s twice.*--cell-timeout", err, re.M), err
    assert "Traceback" not in err


@pytest.mark.notebook
def test_a_kernel_idle_mid_cell_is_stopped_and_retried_long_before_the_cell_timeout(tmp_path, capfd, monkeypatch):
    """A kernel that sits idle in a cell (the idle hang: no CPU, papermill waiting) is stopped by
    the idle-kernel watch after MOEROOF_IDLE_KERNEL_S, not after the cell timeout: the render is
    retried once in a fresh kernel, says why and what the kernel waited on, and finishes."""
    import time

    monkeypatch.setenv("MOEROOF_IDLE_KERNEL_S", "3")
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    (nb_dir / "stall.py").write_text(STALLS_ONCE)
    marker = tmp_path / "marker"
    argv = ["--notebooks", "stall", "--notebooks-dir", str(nb_dir), "--cell-timeout", "600", "--jobs", "1"]
    t = time.monotonic()
    assert report.main([*argv, "-p", "marker", str(marker), "--out", str(tmp_path / "once")]) == 0
    assert time.monotonic() - t < 60
    said = capfd.readouterr()
    assert re.search(r"retry +stall .*sat idle mid-render for 3 s", said.err), said.err
    # what it waited on, for the next person to read: its threads' states, and (faulthandler, on
    # the SIGABRT before the kill) the Python stack of the cell it sat in
    assert re.search(r"its threads \(pid/tid name state wait channel\): \d+/\d+ ", said.err), said.err
    assert "Fatal Python error: Aborted" in said.err and "in <module>" in said.err, said.err
    assert "finished" in (tmp_path / "once" / "stall.ipynb").read_text()


DIES_ONCE = """\
# %% tags=["parameters"]
marker = ""
always = False

# %%
import os
import signal
from pathlib import Path

first = not Path(marker).exists()
Path(marker).write_text("ran")
if first or always:
    os.kill(os.getpid(), signal.SIGKILL)  # the kernel dies, as one killed from outside
print("finished")
"""


@pytest.mark.notebook
def test_a_kernel_that_dies_mid_render_is_retried_once_in_a_fresh_kernel(tmp_path, capfd):
    """A kernel killed mid-cell (as one must kill a kernel seen idle in a cell, or the OOM killer
    does) ends that attempt, not the whole report: the second attempt, in a fresh kernel,
    finishes. A kernel that dies every time fails the notebook with one line, no traceback and no
    --cell-timeout hint."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    (nb_dir / "dies.py").write_text(DIES_ONCE)
    marker = tmp_path / "marker"
    argv = ["--notebooks", "dies", "--notebooks-dir", str(nb_dir), "--jobs", "1"]
    assert report.main([*argv, "-p", "marker", str(marker), "--out", str(tmp_path / "once")]) == 0
    said = capfd.readouterr()
    assert re.search(r"retry +dies .*kernel died", said.err), said.err
    assert "finished" in (tmp_path / "once" / "dies.ipynb").read_text()
    marker.unlink()
    always = ["-p", "marker", str(marker), "-p", "always", "True", "--out", str(tmp_path / "always")]
    assert report.main([*argv, *always]) == 2
    err = capfd.readouterr().err
    assert re.search(r"^error: dies failed: its kernel died twice", err, re.M), err
    assert "Traceback" not in err and "--cell-timeout" not in err


@pytest.mark.notebook
def test_a_kernel_that_dies_as_it_starts_is_retried_once(tmp_path, monkeypatch, capfd):
    """Two kernels started at once can draw one port; the second dies before it answers
    (jupyter_client's RuntimeError): the render is tried once more, in a fresh kernel with fresh
    ports, and finishes. Any other RuntimeError is not retried."""
    import papermill as pm

    nb = tmp_path / "ok.py"
    nb.write_text('# %%\nprint("finished")\n')
    real, calls = pm.execute_notebook, []

    def dies_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return real(*args, **kwargs)

    monkeypatch.setattr(pm, "execute_notebook", dies_first)
    done = report.execute(nb)
    assert len(calls) == 2 and "finished" in str(done.cells[0].outputs)
    assert re.search(r"retry +ok .*its kernel died as it started", capfd.readouterr().err)

    def other(*args, **kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(pm, "execute_notebook", other)
    with pytest.raises(RuntimeError, match="something else"):
        report.execute(nb)


def test_report_refuses_a_timeout_that_is_not_positive(capsys):
    assert report.main(["--notebooks", "whatif", "--cell-timeout", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --cell-timeout: must be a positive number of seconds")


def first_text(page: str) -> str:
    """The first visible words of an HTML page's body (no style, script or head)."""
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.parts, self.skip, self.body = [], 0, False

        def handle_starttag(self, tag, attrs):
            self.body |= tag == "body"
            self.skip += tag in ("style", "script", "head")

        def handle_endtag(self, tag):
            self.skip -= tag in ("style", "script", "head")

        def handle_data(self, data):
            if self.body and not self.skip:
                self.parts.append(data)

    parser = Text()
    parser.feed(page)
    return " ".join("".join(parser.parts).split())[:400]


def _answered(reports, name, answer, *, lifted):
    """An executed notebook whose answer is lifted (a Markdown cell tagged answer first) or not
    (displayed by a code cell tagged answer, as papermill leaves it)."""
    nb = nbformat.v4.new_notebook()
    title = nbformat.v4.new_markdown_cell(f"# Question of {name}?")
    if lifted:
        nb.cells = [nbformat.v4.new_markdown_cell(answer, metadata={"tags": ["answer"]}), title]
    else:
        cell = nbformat.v4.new_code_cell("display(Markdown(a))", metadata={"tags": ["answer"]})
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": answer})]
        nb.cells = [title, cell]
    reports.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, reports / f"{name}.ipynb")
    (reports / f"{name}.html").write_text("<html><body>report</body></html>")


def test_index_says_what_each_run_s_numbers_are_from_its_answer(tmp_path):
    reports = tmp_path / "reports"
    _answered(reports, "a", "**Answer.** x. Every model number is **projected**: not witnessed here: y.", lifted=True)
    _answered(reports, "b", "**Answer.** x. Every input is **witnessed**; numbers measured …", lifted=False)
    _answered(reports / "b" / "0123456789ab", "b", "**Answer.** Every input is **witnessed**.", lifted=True)
    r = site.read_report(reports / "a.ipynb")
    assert r.title == "Question of a?" and r.provenance == "projected"
    assert site.read_report(reports / "b.ipynb").provenance == "witnessed"
    text = site.build_index(reports, tmp_path / "figures").read_text()
    assert "Every number is projected unless" not in text
    assert (
        "Of the 3 reports listed, 1 projected (some input is not witnessed): a; 2 on witnessed inputs only: b, b (run 0123456789ab)."
        in text
    )
    assert text.count("Numbers: witnessed: every input") == 2 and text.count("Numbers: projected:") == 1
    # all projected: the header says so, and names no witnessed run
    only = tmp_path / "only"
    _answered(only, "a", "**Answer.** … **projected** …", lifted=True)
    text = site.build_index(only, tmp_path / "figures").read_text()
    assert "Of the 1 report listed, 1 projected (some input is not witnessed): a." in text
    assert "witnessed inputs only" not in text


def test_lift_answer_opens_the_notebook_with_the_answer():
    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_code_cell("display(...)", metadata={"tags": ["answer"]})
    answer.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="note\n"),
        nbformat.v4.new_output("display_data", data={"text/markdown": "**Answer.** 42."}),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# Q?"), nbformat.v4.new_code_cell("x = 1"), answer]
    out = report.lift_answer(nb)
    assert [c.cell_type for c in out.cells] == ["markdown", "markdown", "code", "code"]
    assert out.cells[0].source == "**Answer.** 42." and out.cells[0].metadata["tags"] == ["answer"]
    assert out.cells[1].source == "# Q?"
    assert out.cells[3].metadata["tags"] == ["answer-source"] and [o.output_type for o in out.cells[3].outputs] == [
        "stream"
    ]
    assert first_text(report.to_html(out, "q")).startswith("Answer. 42. Q?")
    # nothing tagged, or no Markdown displayed: left as it is
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Q?")])
    assert report.lift_answer(plain).cells[0].source == "# Q?"
