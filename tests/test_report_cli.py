"""`moeroof report` keeps the CLI contract: every failure is one ``error:`` line and exit 2, no
traceback; what can be checked before a kernel starts (notebook names, parameter names and
types, the output folder, --jobs, --cell-timeout) is refused before anything renders.

A tiny notebook stands in for the real ones, so each kernel run takes a few seconds.
"""

from __future__ import annotations

import json
import os
import re

import pytest

import csvout  # noqa: I001  (tests/csvout.py: results past their run record)
from moeroof.cli.app import main as cli_main
from moeroof.core import paths
from moeroof.present import report

pytest.importorskip("papermill")
pytest.importorskip("jupytext")

TINY = """\
# %% tags=["parameters"]
count: int = 3  # how many
scale: float = 1.0  # a factor
label: str = "x"  # a text
loud: bool = False  # a switch

# %%
if count < 0:
    raise ValueError(f"count must be >= 0,\\n got {count}")
print(label * count, scale, loud)
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A folder holding the tiny notebook; the renders stay under tmp_path."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    (nb_dir / "tiny.py").write_text(TINY)
    monkeypatch.setattr(report.paths, "REPORTS_DIR", tmp_path / "reports")
    return nb_dir


def _no_render(monkeypatch):
    def refuse(*_, **__):
        raise AssertionError("a notebook ran although the request was refused before rendering")

    monkeypatch.setattr(report, "execute", refuse)


def one_error_line(err: str) -> str:
    """The one ``error:`` line in ``err``; the rest may only be progress ([1/1] …, index …)."""
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert all(line == errors[0] or line.startswith(("[", "index ")) for line in lines), err
    assert "Traceback" not in err
    return errors[0]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--notebooks", "../../etc/passwd"], "error: --notebooks: no notebook named ../../etc/passwd"),
        (["--notebooks", "tiny", "--cell-timeout", "nan"], "error: --cell-timeout: 'nan' is not a finite number > 0"),
        (["--notebooks", "tiny", "--cell-timeout", "0"], "error: --cell-timeout: '0' is not a finite number > 0"),
        (["--notebooks", "tiny", "--jobs", "0"], "error: --jobs: '0' is not a positive integer"),
        (["--notebooks", "tiny", "--jobs", "two"], "error: --jobs: 'two' is not a positive integer"),
        (["--notebooks", "tiny", "-p", "count", "abc"], "error: -p count: tiny takes int count (default 3), got 'abc'"),
        (["--notebooks", "tiny", "-p", "scale", "nan"], "error: -p scale: tiny takes float scale"),
        (["--notebooks", "tiny", "-p", "loud", "maybe"], "error: -p loud: tiny takes bool loud"),
        (
            ["--notebooks", "tiny", "-p", "nope", "1"],
            "error: -p nope: tiny has no such parameter (its parameters: count",
        ),
    ],
)
def test_a_bad_request_is_one_error_line_before_anything_runs(tiny, monkeypatch, capsys, argv, said):
    _no_render(monkeypatch)
    assert cli_main(["report", "--notebooks-dir", str(tiny), *argv]) == 2
    assert one_error_line(capsys.readouterr().err).startswith(said)


ALIAS_BOMB = "count:\n  - &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  - &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi")
)  # a few hundred bytes, 10^9 items expanded


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("count: 4\ncount: 5\n", "{f}:2: not valid YAML (the key 'count' is given twice"),
        ("scale: 1\nloud: true\nscale: 2\n", "{f}:3: not valid YAML (the key 'scale' is given twice"),
        (ALIAS_BOMB, "{f}: count: expands through YAML aliases to more than 100,000 items"),
        ("count: &c [1, *c]\n", "{f}: count: expands through YAML aliases to more than 100,000 items"),
        ("count: 1" + "0" * 5000 + "\n", "{f}: count: a number of 5001 digits"),
        ("nope: 1\n", "{f}: nope: tiny has no such parameter (its parameters: count"),
        ("count: 2.5\n", "{f}: count: tiny takes int count (default 3), got 2.5"),
        (
            "count: [" + ", ".join(["7"] * 5000) + "]\n",
            "{f}: count: tiny takes int count (default 3), got [7, 7, 7, 7, 7, 7, ...]",
        ),
    ],
)
def test_a_hostile_parameters_file_is_one_error_line_naming_it(tiny, tmp_path, monkeypatch, capsys, text, said):
    """A key given twice (PyYAML keeps the last), an alias bomb or a self-referring alias on a
    declared parameter (quoting it in the type error ran past a minute and 2 GB), an integer past
    Python's digit limit (the message named no file) and a value of the wrong type or name: one
    error line naming the file, before anything renders; a long value is quoted short."""
    _no_render(monkeypatch)
    params = tmp_path / "params.yaml"
    params.write_text(text)
    assert cli_main(["report", "--notebooks-dir", str(tiny), "--notebooks", "tiny", "-f", str(params)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("error: " + said.format(f=params)), line
    assert len(line) < 400


def test_yaml_merge_keys_may_be_overridden_and_a_flag_names_itself(tiny, tmp_path):
    """A merged mapping's keys are overridden by the mapping's own (YAML's merge rule, not a key
    given twice); a -p value beside a -f file is named as -p."""
    params = tmp_path / "params.yaml"
    params.write_text("base: &b {count: 3, scale: 1.5}\nrun:\n  <<: *b\n  count: 4\n")
    assert report.read_parameters_file(params)["run"] == {"count": 4, "scale": 1.5}
    with pytest.raises(report.ReportError, match=r"^-p scale: tiny takes float scale"):
        report.typed_parameters({"count": 2, "scale": "x"}, {"scale"}, [tiny / "tiny.py"], params)
    with pytest.raises(report.ReportError, match=rf"^{re.escape(str(params))}: count: tiny takes int count"):
        report.typed_parameters({"count": "x", "scale": "2"}, {"scale"}, [tiny / "tiny.py"], params)


def test_out_naming_a_file_is_refused_before_rendering(tiny, tmp_path, monkeypatch, capsys):
    _no_render(monkeypatch)
    file = tmp_path / "a-file"
    file.write_text("keep me")
    for out, said in ((file, "is a file, not a folder"), (file / "sub", "is a file, so")):
        assert cli_main(["report", "--notebooks-dir", str(tiny), "--notebooks", "tiny", "--out", str(out)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert line.startswith("error: --out: ") and said in line
    assert file.read_text() == "keep me"


def test_parameters_take_the_type_each_notebook_declares(tiny):
    path = tiny / "tiny.py"
    (typed,) = report.typed_parameters(
        {"count": "4", "scale": "8", "label": "8", "loud": "true"}, {"count", "scale", "label", "loud"}, [path]
    )
    assert typed == {"count": 4, "scale": 8.0, "label": "8", "loud": True}
    assert type(typed["scale"]) is float and type(typed["label"]) is str
    # a -f value keeps its YAML type where it fits the declared one
    (from_file,) = report.typed_parameters({"count": 2, "label": 12}, set(), [path])
    assert from_file == {"count": 2, "label": "12"}
    with pytest.raises(report.ReportError, match="takes int count"):
        report.typed_parameters({"count": 2.5}, set(), [path])


@pytest.mark.notebook
def test_a_failing_notebook_is_one_error_line_naming_its_exception_and_saved_notebook(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["report", "--notebooks-dir", str(tiny), "--notebooks", "tiny", "-p", "count", "-1", "--out", str(out)]
    assert cli_main([*argv, "--json"]) == 2
    said = capsys.readouterr()
    line = one_error_line(said.err)
    failed = out / "tiny.failed.ipynb"
    assert line.startswith("error: tiny failed: cell [") and "raised ValueError: count must be >= 0, got -1" in line
    assert line.endswith(str(failed)) and failed.is_file()
    saved = json.loads(failed.read_text())
    outputs = [o for c in saved["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert outputs and outputs[0]["ename"] == "ValueError" and outputs[0]["traceback"]
    assert not (out / "tiny.html").exists() and not list(out.glob(".*tmp*"))
    runs = json.loads(said.out)["runs"]
    assert runs[0]["ok"] is False and runs[0]["error"] == line.removeprefix("error: ")
    # the same folder rendered fine drops the stale failed notebook
    assert cli_main([*argv[:-5], "-p", "count", "2", "--out", str(out)]) == 0
    assert (out / "tiny.html").is_file() and not failed.exists()
    assert "xx 1.0 False" in (out / "tiny.ipynb").read_text()


@pytest.mark.notebook
def test_the_summary_as_csv_and_into_a_report_file(tiny, tmp_path, capsys):
    """--format csv prints one row per run (progress on stderr); --report-output writes the same
    summary to a file instead, and JSON agrees with it."""
    import csv
    import io

    out = tmp_path / "run"
    base = ["report", "--notebooks-dir", str(tiny), "--notebooks", "tiny", "--out", str(out), "-p", "count", "2"]
    assert cli_main([*base, "--format", "csv"]) == 0
    said = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(csvout.data_text(said.out))))  # past the run record
    assert [r["notebook"] for r in rows] == ["tiny"] and rows[0]["ok"] == "True"
    assert rows[0]["html"] == str(out / "tiny.html") and float(rows[0]["seconds"]) > 0
    assert "[1/1] tiny" in said.err
    target = tmp_path / "summary.json"
    assert cli_main([*base, "--json", "--report-output", str(target)]) == 0
    assert capsys.readouterr().out == ""
    summary = json.loads(target.read_text())
    assert summary["runs"][0]["html"] == rows[0]["html"] and summary["index"].endswith("index.html")
    assert summary["run"]["command"].startswith("moeroof report ")


def test_longest_first_orders_by_the_last_render_and_the_timings_round_trip(tmp_path):
    """A pool starts the notebooks whose last render took longest first (LPT); notebooks never
    timed keep their given order after them; the timings file merges runs and a broken file is
    only a lost hint."""
    stems = ["a", "b", "c", "d"]
    assert report.longest_first(stems, {}) == [0, 1, 2, 3]
    assert report.longest_first(stems, {"c": 30.0, "a": 2.0, "d": 40.0}) == [3, 2, 0, 1]
    report.record_timings(tmp_path, [{"notebook": "a", "ok": True, "seconds": 3.5}])
    report.record_timings(tmp_path, [{"notebook": "b", "ok": True, "seconds": 9.0}, {"notebook": "c", "ok": False}])
    assert report.read_timings(tmp_path) == {"a": 3.5, "b": 9.0}
    (tmp_path / report.TIMINGS_NAME).write_text("{not json")
    assert report.read_timings(tmp_path) == {}


def test_a_fresh_clone_orders_by_the_timings_the_notebooks_folder_ships(tmp_path):
    nb_dir, root = tmp_path / "nbs", tmp_path / "reports"
    nb_dir.mkdir()
    report.record_timings(nb_dir, [{"notebook": "a", "ok": True, "seconds": 30.0}])
    assert report.start_timings(root, nb_dir) == {"a": 30.0}  # nothing rendered yet
    report.record_timings(root, [{"notebook": "b", "ok": True, "seconds": 2.0}])
    assert report.start_timings(root, nb_dir) == {"b": 2.0}  # the last render wins
    shipped = report.read_timings(paths.NOTEBOOKS_DIR)
    assert set(shipped) == {p.stem for p in report.discover(paths.NOTEBOOKS_DIR)}  # one per notebook


def test_a_notebook_that_reuses_anothers_fits_starts_after_it():
    """With --jobs, a notebook named in report.AFTER waits for the one it reuses (the next in the
    order takes its place meanwhile), and the start numbers count the real starts."""
    import operator

    # job(n, x) = n + x: each result gives back the start number n of its job
    args = [(0, 0), (0, 100), (0, 200), (0, 300)]
    got = dict(report.render_parallel(args, 2, [0, 1, 2, 3], {1: 0}, job=operator.add))
    starts = {i: got[i] - 100 * i for i in got}
    assert sorted(starts) == [0, 1, 2, 3] and sorted(starts.values()) == [1, 2, 3, 4]
    assert starts[0] == 1 and starts[2] == 2  # 1 waits: 2 takes its place
    assert starts[1] > starts[0]
    # a notebook waiting for one not rendered in this run is not kept waiting forever
    got = dict(report.render_parallel(args[:2], 2, [1, 0], {0: 5}, job=operator.add))
    assert sorted(got) == [0, 1]
    for stem in [*report.AFTER, *report.AFTER.values()]:
        assert (paths.NOTEBOOKS_DIR / f"{stem}.py").exists() or (paths.NOTEBOOKS_DIR / f"{stem}.ipynb").exists()


def test_a_parameters_file_nested_or_too_big_is_one_error_line_naming_it(tiny, tmp_path, monkeypatch, capsys):
    """-f FILE is bounded before the (recursive) YAML parser sees it: a 100,000-deep flow list
    and a file over 1 MiB are one error line naming the file, before anything renders."""
    _no_render(monkeypatch)
    deep = tmp_path / "deep.yaml"
    deep.write_text("count: " + "[" * 100_000 + "]" * 100_000 + "\n")
    big = tmp_path / "big.yaml"
    big.write_text("label: " + "x" * (1 << 20) + "\n")
    for path, said in ((deep, "deep"), (big, "more than")):
        assert cli_main(["report", "--notebooks-dir", str(tiny), "--notebooks", "tiny", "-f", str(path)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert str(path) in line and said in line, line


def test_rendering_skips_the_iri_grammar_and_still_validates_notebooks():
    """present.report hides rfc3987_syntax (0.7 s of grammar building at import, for a format
    nbformat's schema never checks): papermill loads without it and notebooks still validate,
    a broken one still fails."""
    import subprocess
    import sys

    code = (
        "import sys, moeroof.present.report, papermill, nbformat\n"
        "assert sys.modules['rfc3987_syntax'] is None\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')])\n"
        "nbformat.validate(nb)\n"
        "nb.cells[0]['cell_type'] = 'nonsense'\n"
        "try:\n"
        "    nbformat.validate(nb)\n"
        "except nbformat.ValidationError:\n"
        "    print('invalid caught')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "invalid caught"


ENV_NOTEBOOK = """# %% tags=["parameters"]
out: str = ""  # where the kernel writes what it was given

# %%
import json
import os

names = ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"]
with open(out, "w") as fh:
    json.dump({k: os.environ.get(k) for k in names}, fh)
"""


@pytest.mark.notebook
def test_kernels_run_one_blas_thread_whatever_the_machine(tmp_path, monkeypatch):
    """A BLAS reduction's last digits follow its thread count, and with them a figure's bytes:
    the kernels get one thread (capture_skew.svg differed between 1 and 2 threads), and the
    rendering process's own environment is left as it was."""
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    (nb_dir / "envnb.py").write_text(ENV_NOTEBOOK)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    said = tmp_path / "said.json"
    argv = ["report", "--notebooks-dir", str(nb_dir), "--out", str(tmp_path / "run"), "-p", "out", str(said)]
    assert cli_main(argv) == 0
    assert json.loads(said.read_text()) == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert os.environ["OPENBLAS_NUM_THREADS"] == "7" and "OMP_NUM_THREADS" not in os.environ
