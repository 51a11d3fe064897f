"""CSVs as spreadsheets save them — "CSV UTF-8" with a byte-order mark, CRLF line ends — read
as the same data as the plain file, by every reader of CSV: histograms (union), ``import
table``, ``import matrix``, POINTS (fit-routing) and plan points (fit-plan)."""

from __future__ import annotations

import json
import shutil

import pytest

from moeroof.cli import main
from moeroof.core.paths import DATA_DIR
from moeroof.data.plan_points import read_plan_points
from moeroof.data.points import read_points

BOM = "\ufeff"


def spreadsheet_copy(src, dst):
    """``src`` as Excel's "CSV UTF-8" writes it: a BOM, then CRLF line ends."""
    text = src.read_text(encoding="utf-8").replace("\r\n", "\n")
    dst.write_bytes((BOM + text.replace("\n", "\r\n")).encode("utf-8"))
    assert dst.read_bytes().startswith(b"\xef\xbb\xbf") and b"\r\n" in dst.read_bytes()
    return dst


def run_json(capsys, argv):
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_histogram_from_a_spreadsheet_reads_the_same(tmp_path, capsys):
    src = DATA_DIR / "histograms" / "deepseek-v3-like.csv"
    copy = spreadsheet_copy(src, tmp_path / "h.csv")
    shutil.copy(src.with_suffix(".json"), tmp_path / "h.json")
    plain = run_json(capsys, ["union", str(src), "--batch", "1,8", "--bootstrap", "0"])
    sheet = run_json(capsys, ["union", str(copy), "--batch", "1,8", "--bootstrap", "0"])
    assert sheet["union_per_layer"] == plain["union_per_layer"]


def test_import_table_and_matrix_from_a_spreadsheet(tmp_path, capsys):
    table = tmp_path / "t.csv"
    rows = ["stream,step,layer,expert_0,expert_1"]
    rows += [
        f"{s},{t},{layer},{(s + t + layer) % 8},{(s + 2 * t + layer + 1) % 8}"
        for s in range(3)
        for t in range(4)
        for layer in range(2)
    ]
    table.write_text("\n".join(rows) + "\n")
    sheet = spreadsheet_copy(table, tmp_path / "t-sheet.csv")
    args = ["--columns", "stream=stream,step=step,layer=layer", "--expert-cols", "expert_0,expert_1"]
    args += ["--experts", "8", "--top-k", "2"]
    a = run_json(capsys, ["import", "table", str(table), "-o", str(tmp_path / "a.csv"), *args])
    b = run_json(capsys, ["import", "table", str(sheet), "-o", str(tmp_path / "b.csv"), *args])
    assert a.keys() == b.keys()
    assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text()

    matrix = tmp_path / "m.csv"
    matrix.write_text("Layer,Expert_0,Expert_1,Expert_2,Expert_3\n0,10,20,30,40\n1,40,30,20,10\n")
    msheet = spreadsheet_copy(matrix, tmp_path / "m-sheet.csv")
    margs = ["--layer-col", "Layer", "--expert-prefix", "Expert_", "--top-k", "1"]
    run_json(capsys, ["import", "matrix", str(matrix), "-o", str(tmp_path / "ma.csv"), *margs])
    run_json(capsys, ["import", "matrix", str(msheet), "-o", str(tmp_path / "mb.csv"), *margs])
    assert (tmp_path / "ma.csv").read_text() == (tmp_path / "mb.csv").read_text()


@pytest.mark.parametrize(
    ("name", "reader"),
    [
        ("example.points", lambda p: read_points(p, experts=64, expert_bytes=4194304)),
        ("bigrig.plan-points", read_plan_points),
    ],
)
def test_points_files_from_a_spreadsheet(tmp_path, name, reader):
    src = DATA_DIR / "points" / name
    copy = spreadsheet_copy(src, tmp_path / name)
    assert reader(copy) == reader(src)
