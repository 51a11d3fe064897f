"""``moeroof validate`` and moeroof.studies.held_out: every held-out case in one table."""

from __future__ import annotations

import json

import pytest

import csvout  # noqa: I001  (tests/csvout.py: results past their run record)
from moeroof.cli import main
from moeroof.studies import held_out, validation


def test_every_step_comparison_point_is_one_row_with_its_own_error():
    rows, skipped = held_out.held_out_rows(["step"])
    assert not skipped
    want = [
        (c.key, b, m, p, e)
        for c in validation.comparisons()
        for b, m, p, e in zip(c.batch, c.measured, c.predicted, c.error)
    ]
    got = [(r["case"], r["at"], r["measured"], r["predicted"], r["error"]) for r in rows]
    assert got == want
    assert all(set(r) == set(held_out.COLUMNS) for r in rows)
    # a consistency row reproduces its calibration: never counted as a prediction
    assert {r["role"] for r in rows} == {"prediction", "consistency"}


def test_the_summary_is_per_case_mean_abs_error_and_band_share():
    rows = [
        {"case": "a", "group": "g", "role": "prediction", "error": 0.1, "error_unit": "points", "inside": True},
        {"case": "a", "group": "g", "role": "prediction", "error": -0.3, "error_unit": "points", "inside": False},
        {"case": "b", "group": "g", "role": "prediction", "error": 0.5, "error_unit": "relative", "inside": None},
    ]
    out = {c["case"]: c for c in held_out.summarise(rows)}
    assert out["a"]["mean_abs_error"] == pytest.approx(0.2) and out["a"]["inside_band"] == 0.5
    assert out["b"]["inside_band"] is None and out["b"]["rows"] == 1


def test_locality_cases_say_when_the_captures_are_absent(tmp_path):
    """Without the captures only the published Qwen3 table is left: with no other source to
    predict it from it is not predicted (from itself it would be no prediction), and both say why."""
    rows, skipped = held_out.held_out_rows(["locality"], external_dir=tmp_path)
    assert rows == []
    assert "absent" in skipped["locality:mixtral"] and "absent" in skipped["locality:qwen15"]
    assert "no other source" in skipped["locality:qwen3-moe-trace (held out)"]


def test_validate_command_prints_table_json_and_csv(capsys):
    assert main(["validate", "--groups", "step"]) == 0
    out = capsys.readouterr().out
    assert "bigrig-engine-B1-B16" in out and "mean |error|" in out and "projected" in out
    assert main(["validate", "--groups", "step", "--json"]) == 0
    rep = csvout.strip_run(json.loads(capsys.readouterr().out))
    assert rep["groups"] == ["step"] and len(rep["rows"]) == sum(len(c.batch) for c in validation.comparisons())
    assert main(["validate", "--groups", "step", "--format", "csv"]) == 0
    header = csvout.data_text(capsys.readouterr().out).splitlines()[0]
    assert header.split(",") == list(held_out.COLUMNS)
    assert main(["validate", "--groups", "step,nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --groups") and err.count("\n") == 1
