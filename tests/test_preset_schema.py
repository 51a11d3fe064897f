"""Presets a user can write: the schema documented (docs/presets.md, ``presets --schema``), every bad field
of a file reported at once, no silent zeros, and ``plan --set`` for one run."""

from __future__ import annotations

import json
import re

import pytest

from moeroof.cli import main
from moeroof.core.paths import REPO_ROOT
from moeroof.data.presets import (
    DEFAULTS,
    HARDWARE_FIELDS,
    MODEL_FIELDS,
    PresetError,
    load_hardware,
    load_model,
    parse_quantity,
    schema_rows,
    with_overrides,
)
from moeroof.models.plan import input_provenance


def _error(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_the_schema_covers_every_field_in_the_docs_and_the_command(capsys):
    fields = {r["field"] for r in schema_rows()}
    assert set(MODEL_FIELDS) | set(HARDWARE_FIELDS) <= fields
    section = (REPO_ROOT / "docs" / "presets.md").read_text()
    for name in fields:
        assert f"`{name}`" in section, name
    assert main(["presets", "--schema", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert {r["field"] for r in rep["fields"]} == fields
    for r in rep["fields"]:
        if r["field"] in DEFAULTS:
            assert r["default"] == DEFAULTS[r["field"]] and not r["required"]


def test_every_bad_field_is_reported_at_once(tmp_path, capsys):
    text = load_hardware("nvme-gen4").path.read_text()
    text = re.sub(r"^ram_bytes = .*$", "", text, flags=re.M)  # missing
    text = text.replace('flops_per_s = { value = 1.0, unit = "TFLOP/s"', 'flops_per_s = { value = 1.0, unit = "GB"')
    text = text.replace(
        'bw_mem_bytes_per_s = { value = 60, unit = "GB/s", assumed = true',
        'bw_mem_bytes_per_s = { value = -60, unit = "GB/s", assumed = true',
    )
    bad = tmp_path / "box.toml"
    bad.write_text(text)
    with pytest.raises(PresetError) as err:
        load_hardware(bad)
    assert {e.field for e in err.value.errors} == {"ram_bytes", "flops_per_s", "bw_mem_bytes_per_s"}
    line = _error(capsys, "plan", "--model", "glm-5.2", "--hardware", str(bad), "--batch", "1")
    for name in ("ram_bytes: missing", "flops_per_s:", "bw_mem_bytes_per_s:"):
        assert name in line, line


def test_a_default_is_an_assumption_that_shows(tmp_path):
    text = load_hardware("nvme-gen4").path.read_text()
    text = re.sub(
        r"^(os_reserve_bytes|engine_seconds_per_step|engine_seconds_per_agent_token) = .*$", "", text, flags=re.M
    )
    path = tmp_path / "box.toml"
    path.write_text(text)
    hw = load_hardware(path)
    assert hw.os_reserve_bytes == 0.0 and hw.engine_seconds_per_step == 0.0
    for key in ("os_reserve_bytes", "engine_seconds_per_step", "engine_seconds_per_agent_token"):
        assert hw.provenance[key] == "assumed" and "default 0 (not in the preset)" in hw.sources[key]
    prov = input_provenance(load_model("glm-5.2"), hw, "assumed", 1)
    assert "hardware.os_reserve_bytes" in prov["non_witnessed"]


@pytest.mark.parametrize(
    ("text", "dimension", "si"),
    [
        ("64GB", "bytes", 64e9),
        ("7 GB/s", "bytes_per_s", 7e9),
        ("2ms", "seconds", 2e-3),
        ("6GiB", "bytes", 6 * 2**30),
        ("48", "count", 48.0),
    ],
)
def test_quantities_as_a_user_writes_them(text, dimension, si):
    assert parse_quantity(text, dimension) == pytest.approx(si)


@pytest.mark.parametrize(
    ("text", "dimension"), [("64", "bytes"), ("64GB/s", "bytes"), ("x", "bytes"), ("-1GB", "bytes"), ("3GB", "count")]
)
def test_bad_quantities_say_why(text, dimension):
    with pytest.raises(ValueError):
        parse_quantity(text, dimension)


def test_set_overrides_a_field_for_one_run(capsys):
    hw = load_hardware("nvme-gen4")
    moved = with_overrides(hw, {"ram_bytes": "128GB", "bw_ssd_bytes_per_s": "11.4GB/s"})
    assert moved.ram_bytes == 128e9 and max(moved.bw_ssd_bytes_per_s) == pytest.approx(11.4e9)
    ratio = [a / b for a, b in zip(moved.bw_ssd_bytes_per_s, hw.bw_ssd_bytes_per_s)]
    assert ratio == pytest.approx([2.0] * len(ratio))  # the curve's shape kept: 5.7 → 11.4 GB/s at the peak
    assert moved.provenance["ram_bytes"] == "assumed" and "command line" in moved.sources["ram_bytes"]
    assert load_hardware("nvme-gen4").ram_bytes == 62e9, "the preset itself is untouched"
    base = ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--cache-gib", "0", "--json"]
    a = json.loads((main(base), capsys.readouterr().out)[1])
    b = json.loads((main([*base, "--set", "bw_ssd_bytes_per_s=11.4GB/s"]), capsys.readouterr().out)[1])
    assert a["bound"] == ["ssd"] and b["step_seconds"][0] == pytest.approx(a["step_seconds"][0] / 2, rel=1e-6)
    assert "--set bw_ssd_bytes_per_s=11.4GB/s" in b["run"]["command"]
    for bad in ("ram=1", "ram_bytes=64", "ram_bytes", "model.ram_bytes=64GB"):
        assert "--set" in _error(capsys, *base[:-1], "--set", bad)


def test_fit_plan_takes_set_too(capsys):
    base = ["fit-plan", "data/points/bigrig.plan-points", "--model", "qwen3-30b-a3b-3bit", "--hardware", "apple-m4"]
    base += ["--routing", "zipf:0.8"]  # quicker than the skew prior's ends; --set does not depend on it
    a = json.loads((main([*base, "--json"]), capsys.readouterr().out)[1])
    b = json.loads((main([*base, "--set", "bw_mem_bytes_per_s=2GB/s", "--json"]), capsys.readouterr().out)[1])
    assert "--set bw_mem_bytes_per_s=2GB/s" in b["run"]["command"]  # a box 60x slower to read: memory binds
    assert [r["predicted"] for r in a["rows"]] != [r["predicted"] for r in b["rows"]]
    assert "--set" in _error(capsys, *base, "--set", "bw_ssd_bytes_per_s=fast")


def test_split_takes_set_as_a_hardware_file_with_that_field(capsys, tmp_path):
    """``split --set F=V`` answers as ``split --hardware FILE`` where FILE is the preset with F = V."""
    # --set on a read-size curve scales it to the new peak, its shape kept (as above)
    text = (REPO_ROOT / "data" / "presets" / "hardware" / "gb10.toml").read_text(encoding="utf-8")
    curve = [0.028, 0.43, 0.85, 4.13, 5.7]
    scaled = ", ".join(repr(v * 2.0 / 5.7) for v in curve)
    edited = text.replace(
        f"bw_ssd_bytes_per_s = {{ value = [{', '.join(map(str, curve))}]", f"bw_ssd_bytes_per_s = {{ value = [{scaled}]"
    )
    assert edited != text
    box = tmp_path / "gb10-2gbs.toml"
    box.write_text(edited.replace('name = "gb10"', 'name = "gb10-2gbs"'), encoding="utf-8")
    base = ["split", "data/histograms/glm5-seed003-summed.csv", "--ranks", "2", "--method", "lpt", "--json"]
    a = json.loads((main([*base, "--hardware", str(box)]), capsys.readouterr().out)[1])
    b = json.loads((main([*base, "--set", "bw_ssd_bytes_per_s=2GB/s"]), capsys.readouterr().out)[1])
    assert b["step_seconds"] == pytest.approx(a["step_seconds"], rel=1e-9)
    assert b["predicted_step_seconds"] == pytest.approx(a["predicted_step_seconds"], rel=1e-9)
    c = json.loads((main(base), capsys.readouterr().out)[1])
    assert c["step_seconds"] != pytest.approx(b["step_seconds"], rel=1e-3), "the override moved the answer"
    assert "--set" in _error(capsys, *base[:-1], "--set", "bw_ssd_bytes_per_s=fast")
