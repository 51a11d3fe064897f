"""``moeroof presets``: the JSON contract, the readable tables, and errors (exit 2, no traceback)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import csvout  # noqa: I001  (tests/csvout.py: results past their run record)
import moeroof.data.presets as presets_mod
from moeroof.cli import main
from moeroof.data.presets import HARDWARE_FIELDS, MODEL_FIELDS, list_presets, load_hardware, load_model

#: every preset that must ship
ISSUE_MODELS = {
    "glm-5.2",
    "glm-5-nvfp4",
    "deepseek-v3",
    "qwen3-235b-a22b",
    "qwen3-30b-a3b",
    "mixtral-8x7b",
    "gpt-oss-120b",
    "kimi-k2",
}
ISSUE_HARDWARE = {"nvme-gen4", "nvme-gen5", "ddr5-desktop", "epyc-server", "gb10", "apple-m4-max", "h200-pcie-offload"}
TAGS = {"witnessed", "projected", "assumed"}


@pytest.fixture(scope="module")
def report() -> dict:
    return _run_json()


def _run_json() -> dict:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["presets", "--json"])
    assert rc == 0, err.getvalue()
    assert err.getvalue() == ""
    return csvout.strip_run(json.loads(out.getvalue()))


def test_json_lists_every_issue_preset(report):
    assert set(report) == {"models", "hardware"}
    assert ISSUE_MODELS <= set(report["models"])
    assert ISSUE_HARDWARE <= set(report["hardware"])
    shipped = list_presets()
    assert set(report["models"]) == set(shipped["models"])
    assert set(report["hardware"]) == set(shipped["hardware"])


def _check_entry(entry: dict, fields: dict[str, tuple[str, bool]], path: str) -> None:
    assert isinstance(entry["description"], str) and entry["description"]
    assert entry["path"] == path
    prov, sources = entry["provenance"], entry["sources"]
    assert set(prov) == set(sources)
    required = {k for k, (_, req) in fields.items() if req}
    assert required <= set(prov) <= set(fields)
    for key in prov:
        assert key in entry, key  # every tagged field is reported, in SI under its dataclass name
        assert prov[key] in TAGS
        assert isinstance(sources[key], str) and sources[key].strip()
    numeric = {k for k in entry if k in fields}
    assert numeric == set(prov)  # and nothing is reported without its tag


def test_json_model_entries(report):
    for name, entry in report["models"].items():
        m = load_model(name)
        _check_entry(entry, MODEL_FIELDS, str(m.path))
        for key in entry["provenance"]:
            assert entry[key] == pytest.approx(getattr(m, key)), (name, key)
        assert type(entry["experts"]) is int and type(entry["top_k"]) is int and type(entry["moe_layers"]) is int
        assert entry["provenance"] == dict(m.provenance) and entry["sources"] == dict(m.sources)
    # SI, not GB: GLM-5.2's ~19 MB expert is 1.9e7 bytes
    assert report["models"]["glm-5.2"]["expert_bytes"] == pytest.approx(19e6)
    assert report["models"]["deepseek-v3"]["flops_per_token"] == pytest.approx(74e9)


def test_json_hardware_entries(report):
    for name, entry in report["hardware"].items():
        h = load_hardware(name)
        _check_entry(entry, HARDWARE_FIELDS, str(h.path))
        sizes, bws = entry["ssd_read_size_bytes"], entry["bw_ssd_bytes_per_s"]
        assert isinstance(sizes, list) and isinstance(bws, list) and len(sizes) == len(bws) >= 2
        assert sizes == pytest.approx(list(h.ssd_read_size_bytes)) and bws == pytest.approx(list(h.bw_ssd_bytes_per_s))
        assert entry["bw_mem_bytes_per_s"] == pytest.approx(h.bw_mem_bytes_per_s)
    assert report["hardware"]["nvme-gen4"]["bw_ssd_bytes_per_s"][2] == pytest.approx(4.13e9)
    assert report["hardware"]["gb10"]["bw_link_bytes_per_s"] == pytest.approx(25e9)
    assert "bw_link_bytes_per_s" not in report["hardware"]["nvme-gen4"]  # not set → not reported


def test_json_is_strict_json(report):
    text = json.dumps(report, allow_nan=False)  # no NaN / inf anywhere
    assert json.loads(text) == report


def test_tables(capsys):
    assert main(["presets"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    head_m = next(ln for ln in lines if ln.startswith("model "))
    for col in ("E", "K", "layers", "expert MB", "non-routed GB", "KV KiB/token", "GFLOP/token"):
        assert col in head_m
    head_h = next(ln for ln in lines if ln.startswith("hardware ") and "RAM GiB" in ln)
    for col in (
        "RAM GiB",
        "mem GB/s",
        "TFLOP/s",
        "experts from",
        "stream GB/s @128KiB",
        "stream GB/s @8MiB",
        "fabric GB/s",
    ):
        assert col in head_h
    for name in ISSUE_MODELS | ISSUE_HARDWARE:
        assert any(ln.split()[:1] == [name] for ln in lines), name
    assert "w = witnessed" in out and "p = projected" in out and "a = assumed" in out
    # GLM-5.2: 256 experts, top-8, 75 layers, 19.0 MB per expert, all witnessed
    glm = next(ln.split() for ln in lines if ln.startswith("glm-5.2 "))
    assert glm[1:7] == ["256", "w", "8", "w", "75", "w"]
    assert glm[7:9] == ["19.0", "w"]
    # nvme-gen4: 4.13 GB/s at 8 MiB (moe-fit), 0.85 at 128 KiB (interpolated → projected)
    gen4 = next(ln.split() for ln in lines if ln.startswith("nvme-gen4 "))
    assert gen4[7:12] == ["ssd", "0.85", "p", "4.13", "p"]
    h200 = next(ln.split() for ln in lines if ln.startswith("h200-pcie-offload "))
    assert h200[7] == "pcie", "the H200 preset streams its experts over PCIe, not from an SSD"
    assert gen4[-1] == "-"  # no fabric
    # measured host→device curve read between its measured points: interpolated → projected
    h200 = next(ln.split() for ln in lines if ln.startswith("h200-pcie-offload "))
    hw = load_hardware("h200-pcie-offload")
    expected = [f"{hw.ssd_bandwidth(128 * 1024) / 1e9:.2f}", "p", f"{hw.ssd_bandwidth(8 * 1024**2) / 1e9:.2f}", "p"]
    assert h200[8:12] == expected
    # the counts in the legend add up to every tagged number
    rep = _run_json()
    total = sum(len(e["provenance"]) for kind in rep.values() for e in kind.values())
    legend = next(ln for ln in lines if ln.startswith("provenance:"))
    counts = re.search(r"(\d+) witnessed, (\d+) projected, (\d+) assumed", legend)
    assert counts is not None, legend
    assert sum(int(c) for c in counts.groups()) == total


def test_ssd_cell_interpolates_like_the_library():
    """The table's SSD column agrees with Hardware.ssd_bandwidth at 128 KiB and 8 MiB."""
    rep = _run_json()
    from moeroof.cli.presets import ssd_cell

    for name, entry in rep["hardware"].items():
        h = load_hardware(name)
        for size in (128 * 1024, 8 * 1024**2):
            shown = float(ssd_cell(entry, size).split()[0])
            assert shown == pytest.approx(h.ssd_bandwidth(size) / 1e9, abs=0.006), (name, size)


def _bad_presets_dir(tmp_path, monkeypatch, mutate):
    """A copy of the shipped presets with one file broken, swapped in for data/presets."""
    root = tmp_path / "presets"
    shutil.copytree(presets_mod.PRESETS_DIR, root)
    broken = mutate(root)
    monkeypatch.setattr(presets_mod, "PRESETS_DIR", root)
    return broken


def test_broken_model_preset_is_exit_2(tmp_path, monkeypatch, capsys):
    def mutate(root):
        p = root / "models" / "glm-5.2.toml"
        p.write_text(
            p.read_text().replace(
                'expert_bytes = { value = 19, unit = "MB"', 'expert_bytes = { value = 19, unit = "GB/s"'
            )
        )
        return p

    broken = _bad_presets_dir(tmp_path, monkeypatch, mutate)
    for argv in (["presets"], ["presets", "--json"]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        # the other presets are still listed; the broken one is named with its error
        assert "deepseek-v3" in out and "nvme-gen4" in out
        assert err.startswith(f"error: {broken}:-: expert_bytes: ")
        assert "Traceback" not in err and err.count("\n") == 1
    rep = json.loads(out)
    assert "glm-5.2" not in rep["models"] and rep["broken"]["models/glm-5.2"].startswith(f"{broken}:-: expert_bytes")


def test_broken_hardware_preset_is_exit_2(tmp_path, monkeypatch, capsys):
    def mutate(root):
        p = root / "hardware" / "extra.toml"
        p.write_text("this is = not [toml\n")
        return p

    broken = _bad_presets_dir(tmp_path, monkeypatch, mutate)
    assert main(["presets"]) == 2
    out, err = capsys.readouterr()
    assert "glm-5.2" in out and "nvme-gen4" in out  # the others still listed
    assert err.startswith(f"error: {broken}:-: toml: not valid TOML")
    assert "Traceback" not in err


def test_usage_error_is_exit_2(capsys):
    assert main(["presets", "--frobnicate"]) == 2
    out, err = capsys.readouterr()
    assert "unrecognized arguments" in err and "Traceback" not in err


def test_console_entry_point_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", "presets", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert ISSUE_MODELS <= set(rep["models"]) and ISSUE_HARDWARE <= set(rep["hardware"])
    assert all(math.isfinite(e["bw_mem_bytes_per_s"]) for e in rep["hardware"].values())


_MIXTRAL = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}  # fmt: skip


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from(["num_local_experts", "hidden_size", "intermediate_size", "vocab_size"]),
    power=st.integers(40, 62),
)
def test_preset_from_hf_refuses_a_config_past_the_preset_bounds_naming_the_config(tmp_path_factory, key, power):
    """A config.json whose sizes make a preset past its bounds (2^40 … 2^62 experts, hidden size,
    expert width or vocabulary) is refused naming the config, and no preset is left behind: the
    preset was written, then refused on loading, naming the output and leaving it there."""
    d = tmp_path_factory.mktemp("hf")
    (d / "ckpt").mkdir()
    (d / "ckpt" / "config.json").write_text(json.dumps({**_MIXTRAL, key: 1 << power}))
    out = d / "p.toml"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["preset-from-hf", str(d / "ckpt"), "-o", str(out)])
    assert code == 2 and err.getvalue().startswith(f"error: {d / 'ckpt' / 'config.json'}:-: "), err.getvalue()
    assert "a preset's" in err.getvalue() and not out.exists()
    assert sorted(p.name for p in d.iterdir()) == ["ckpt"]
