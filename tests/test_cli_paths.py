"""User paths resolve against the working directory first, then under the suite's data/;
``--batch`` range syntax; ``--routing zipf`` without an exponent."""

from __future__ import annotations

import json
import shutil

import pytest

from moeroof.cli import main
from moeroof.cli.flags import UsageError, parse_batch
from moeroof.core.paths import DATA_DIR, DataPathError, resolve_data

EMBEDDED = "histograms/deepseek-v3-like.csv"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,8,64", [1, 8, 64]),
        ("64,8,8,1", [1, 8, 64]),
        # doubling span: the powers of two strictly between, and both ends
        ("1-64", [1, 2, 4, 8, 16, 32, 64]),
        ("3-20", [3, 4, 8, 16, 20]),
        ("5-5", [5]),
        # geometric ×2 from 1 to 256: 2^0 … 2^8
        ("1:256:x2", [1, 2, 4, 8, 16, 32, 64, 128, 256]),
        # ×3 from 2: 2, 6, 18, 54 (162 > 100: HI is not added when the steps miss it)
        ("2:100:x3", [2, 6, 18, 54]),
        # arithmetic +8 from 1: 1 + 8j for j = 0..7 (65 > 64)
        ("1:64:+8", [1, 9, 17, 25, 33, 41, 49, 57]),
        ("8:32:+8", [8, 16, 24, 32]),
        ("1,2,8:64:x2", [1, 2, 8, 16, 32, 64]),
    ],
)
def test_batch_syntax(text, expected):
    assert parse_batch(text) == expected


@pytest.mark.parametrize(
    "text, words",
    [
        ("64-1", "below LO"),
        ("1:8", "LO:HI:xF"),
        ("1:8:x1", "factor must be > 1"),
        ("1:8:xq", "must be a number"),
        ("1:8:y2", "xF (geometric"),
        ("1:8:+0", "positive integer"),
        ("0-4", "'0' is not a positive integer"),
        ("-3", "not a positive integer"),
        ("1,,2", "expected comma-separated batch sizes"),
        ("1:100000:+1", "at most"),
    ],
)
def test_batch_syntax_errors(text, words):
    with pytest.raises(UsageError, match=r"^--batch") as err:
        parse_batch(text)
    assert words in str(err.value)


def test_cli_batch_error_is_one_line(capsys):
    assert main(["union", "--uniform", "8", "2", "--batch", "1:8:x1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: --batch")


def test_a_relative_path_from_the_working_directory_wins(tmp_path, monkeypatch):
    (tmp_path / "histograms").mkdir()
    for suffix in (".csv", ".json"):
        shutil.copy(DATA_DIR / EMBEDDED.replace(".csv", suffix), tmp_path / "histograms")
    monkeypatch.chdir(tmp_path)
    assert resolve_data(EMBEDDED) == (tmp_path / EMBEDDED).resolve()
    # an embedded name not present here still resolves under data/
    assert resolve_data("traces/qwen3-30b-a3b-like.npz") == DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz"
    # absolute paths are as given
    assert resolve_data(DATA_DIR / EMBEDDED) == DATA_DIR / EMBEDDED


def test_a_missing_relative_path_names_both_places(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataPathError) as err:
        resolve_data("histograms/mine.csv")
    msg = str(err.value)
    assert str(tmp_path / "histograms" / "mine.csv") in msg and str(DATA_DIR / "histograms" / "mine.csv") in msg
    assert isinstance(err.value, ValueError) and isinstance(err.value, FileNotFoundError)


@pytest.mark.parametrize("command", ["union", "plan"])
def test_union_and_plan_read_the_same_file_from_the_working_directory(tmp_path, monkeypatch, capsys, command):
    """Both commands take ``histograms/x.csv`` from the working directory when it is there."""
    (tmp_path / "histograms").mkdir()
    for suffix in (".csv", ".json"):
        shutil.copy(DATA_DIR / EMBEDDED.replace(".csv", suffix), tmp_path / "histograms" / f"mine{suffix}")
    monkeypatch.chdir(tmp_path)
    if command == "union":
        argv = ["union", "histograms/mine.csv", "--batch", "1", "--bootstrap", "0", "--json"]
    else:
        argv = ["plan", "--model", "deepseek-v3", "--hardware", "nvme-gen4", "--batch", "1"]
        argv += ["--routing", "histograms/mine.csv", "--cache-gib", "0", "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    rep = json.loads(capsys.readouterr().out)
    where = rep["source"] if command == "union" else rep["routing"]
    assert "mine.csv" in where


def test_missing_file_error_names_both_places(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["union", "histograms/none.csv", "--batch", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path) in err and str(DATA_DIR) in err


@pytest.mark.parametrize("spec", ["zipf", "zipf:"])
def test_routing_zipf_without_an_exponent_says_so(capsys, spec):
    argv = ["plan", "--model", "mixtral-8x7b", "--hardware", "apple-m4-max", "--batch", "1", "--routing", spec]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "zipf:S" in err and "no such file" not in err and err.count("\n") == 1
