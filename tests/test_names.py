"""One schema of output names (moeroof.core.names): plan's table, CSV and JSON and a sweep's
rows say each quantity by the same name."""

from __future__ import annotations

import csv
import io
import json

from moeroof.cli import main
from moeroof.cli.plan import CSV_COLUMNS, TABLE_COLUMNS
from moeroof.core.names import QUANTITIES, header

ARGS = ["plan", "--model", "qwen3-30b-a3b", "--hardware", "nvme-gen4", "--batch", "1,4", "--routing", "zipf:0.9"]


def _out(capsys, argv):
    assert main(argv) == 0
    return capsys.readouterr().out


def test_plan_csv_columns_are_the_json_keys_and_in_the_schema(capsys):
    rep = json.loads(_out(capsys, [*ARGS, "--json"]))
    text = _out(capsys, [*ARGS, "--format", "csv"])
    rows = list(csv.reader(line for line in io.StringIO(text) if not line.startswith("#")))
    assert tuple(rows[0]) == CSV_COLUMNS
    for name in CSV_COLUMNS:
        assert name in QUANTITIES, name
        # a flat multiple is the JSON's baselines.NAME.multiple; every other column a JSON key
        base = next((b for b in rep["baselines"] if "multiple_vs_" + b.replace("-", "_") == name), None)
        assert base is not None or name in rep, name
    i = CSV_COLUMNS.index("ssd_bytes_per_token")
    assert float(rows[2][i]) == rep["ssd_bytes_per_token"][1]
    j = CSV_COLUMNS.index("multiple_vs_uncoalesced")
    assert float(rows[2][j]) == rep["baselines"]["uncoalesced"]["multiple"][1]


def test_plan_table_headers_come_from_the_schema(capsys):
    out = _out(capsys, ARGS).splitlines()
    head = next(line for line in out if line.startswith("B "))
    for name in TABLE_COLUMNS:
        assert name in QUANTITIES and header(name) in head, name


def test_sweep_rows_use_the_schema(tmp_path):
    from moeroof.run.sweep import evaluate_point

    inputs = {"model": "qwen3-30b-a3b", "hardware": "nvme-gen4", "batch": 2, "cache_policy": "static"}
    row = evaluate_point({"point_id": 0, "command": "plan", "inputs": inputs})
    assert row["error"] is None, row["error"]
    bookkeeping = {"point_id", "command", "error", "moeroof_version", "elapsed_s", *inputs}
    unknown = sorted(k for k in row if k not in QUANTITIES and k not in bookkeeping)
    assert not unknown, f"sweep columns outside moeroof.core.names: {unknown}"


def test_every_json_and_csv_result_records_its_run(capsys, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764547200")  # 2025-12-01T00:00:00Z
    rep = json.loads(_out(capsys, [*ARGS, "--json"]))
    run = rep["run"]
    assert run["command"] == "moeroof " + " ".join([*ARGS, "--json"])
    assert run["utc"] == "2025-12-01T00:00:00Z" and run["moeroof_version"]
    names = {i["path"].rsplit("/", 1)[-1] for i in run["inputs"]}
    assert {"qwen3-30b-a3b.toml", "nvme-gen4.toml"} <= names
    import hashlib
    from pathlib import Path

    for i in run["inputs"]:
        assert i["sha256"] == hashlib.sha256(Path(i["path"]).read_bytes()).hexdigest()
    text = _out(capsys, [*ARGS, "--format", "csv"])
    first = text.splitlines()[0]
    assert first.startswith("# moeroof ") and "2025-12-01T00:00:00Z" in first and "--format csv" in first
    assert any(line.startswith("# input ") and "sha256" in line for line in text.splitlines())


def test_a_sweep_parquet_records_its_run(tmp_path, capsys):
    from moeroof.core.paths import DATA_DIR
    from moeroof.run.sweep import read_run

    out = tmp_path / "s.parquet"
    grid = tmp_path / "g.toml"
    grid.write_text(
        'command = "plan"\nbatch = [1, 2]\n[fixed]\nmodel = "qwen3-30b-a3b"\nhardware = "nvme-gen4"\n'
        'cache_policy = "static"\n'
    )
    assert main(["sweep", str(grid), "-o", str(out), "--workers", "1", "--json"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    run = read_run(out)
    assert run is not None and run["command"].startswith("moeroof sweep ") and run["utc"].endswith("Z")
    assert any(i["path"] == str(grid.resolve()) for i in run["inputs"])
    assert DATA_DIR.is_dir()
