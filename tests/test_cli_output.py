"""``--format json|csv|table`` and ``--output FILE`` on every command, compact
JSON."""

from __future__ import annotations

import json

import pytest

import csvout  # noqa: I001  (tests/csvout.py: CSV output past its run record)
from moeroof.cli import main
from moeroof.cli.app import COMMANDS, build_parser
from moeroof.core.paths import DATA_DIR

TRACE = str(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz")


def test_every_command_takes_format_and_json():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # noqa: SLF001 (argparse has no public accessor)
    for name, p in sub.choices.items():
        if name == "report":  # its owner's (moeroof.present.report's arguments)
            continue
        if name == "import":  # the flags are each FORMAT's
            inner = next(a for a in p._actions if a.dest == "import_format")  # noqa: SLF001
            p = inner.choices["table"]
        flags = {s for a in p._actions for s in a.option_strings}  # noqa: SLF001
        assert {"--format", "--json"} <= flags, name
        assert "--output" in flags, name
    assert len(COMMANDS) >= 13


def test_mrc_json_is_compact_and_csv_is_the_whole_curve(capsys):
    assert main(["mrc", TRACE, "--json"]) == 0
    out = capsys.readouterr().out
    rep = json.loads(out)
    assert out.count("\n") < 40  # arrays on one line (it was 18,456 lines)
    assert main(["mrc", TRACE, "--format", "csv"]) == 0
    rows = csvout.rows(capsys.readouterr().out)
    assert rows[0] == ["capacity_experts", "hit_rate", "che_hit_rate"]
    assert len(rows) - 1 == len(rep["capacity_experts"])
    assert [float(x) for x in rows[-1][:2]] == pytest.approx([rep["capacity_experts"][-1], rep["hit_rate"][-1]])


def test_union_csv_has_one_row_per_batch(capsys):
    # uniform closed form, E = 4, K = 2: U(B) = 4·(1 − (1/2)^B) → 2, 3, 3.75
    assert main(["union", "--uniform", "4", "2", "--batch", "1-4", "--format", "csv"]) == 0
    rows = csvout.dict_rows(capsys.readouterr().out)
    assert [int(r["batch"]) for r in rows] == [1, 2, 4]
    assert [float(r["union_per_layer"]) for r in rows] == pytest.approx([2.0, 3.0, 3.75])


def test_output_is_written_whole_and_stdout_stays_empty(tmp_path, capsys):
    target = tmp_path / "u.json"
    assert main(["union", "--uniform", "4", "2", "--batch", "1", "--json", "--output", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"wrote {target}" in err
    assert json.loads(target.read_text())["union_per_layer"] == pytest.approx([2.0])
    assert [p.name for p in tmp_path.iterdir()] == ["u.json"]  # no temporary left behind


def test_output_refuses_an_input(tmp_path, capsys):
    hist = tmp_path / "h.csv"
    hist.write_bytes((DATA_DIR / "histograms" / "deepseek-v3-like.csv").read_bytes())
    (tmp_path / "h.json").write_bytes((DATA_DIR / "histograms" / "deepseek-v3-like.json").read_bytes())
    before = hist.read_bytes(), (tmp_path / "h.json").read_bytes()
    for target in (hist, tmp_path / "h.json"):
        assert main(["union", str(hist), "--batch", "1", "--bootstrap", "0", "--output", str(target)]) == 2
        err = capsys.readouterr().err
        assert "one of this command's inputs" in err and err.count("\n") == 1
    assert (hist.read_bytes(), (tmp_path / "h.json").read_bytes()) == before


def test_json_and_another_format_disagree(capsys):
    assert main(["union", "--uniform", "4", "2", "--batch", "1", "--json", "--format", "csv"]) == 2
    assert "disagree" in capsys.readouterr().err


def test_table_to_a_file(tmp_path, capsys):
    target = tmp_path / "plan.txt"
    argv = ["plan", "--model", "mixtral-8x7b", "--hardware", "apple-m4-max", "--batch", "1", "--output", str(target)]
    assert main(argv) == 0
    assert capsys.readouterr().out == ""
    assert target.read_text().startswith("net tok/s — mixtral-8x7b on apple-m4-max")


def test_fit_states_the_gof_floor_and_its_interval(capsys):
    argv = ["fit", str(DATA_DIR / "histograms" / "deepseek-v3-like.csv"), "--bootstrap", "20", "--gof-sims", "9"]
    assert main([*argv, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["gof_pvalue_floor"] == pytest.approx(0.1)  # 1 / (9 + 1)
    z = rep["models"]["zipf"]
    assert z["ci"]["s"][0] <= z["params"]["s"] <= z["ci"]["s"][1]
    if z["gof_pvalue"] == pytest.approx(0.1):
        assert any("floor 1/(sims+1) = 0.1 with 9 simulations" in n for n in rep["notes"])
    assert main(argv) == 0
    assert "95% CI" in capsys.readouterr().out
