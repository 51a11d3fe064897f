"""``plan --cache-gib auto`` (the default), infeasible rows without multiples, and the link
term named per preset (issue 12, deliverable 4). Expected numbers are worked from the preset
TOMLs by hand, not from the code."""

from __future__ import annotations

import json

import pytest

from moeroof.cli import main
from moeroof.data.presets import load_hardware, load_model
from moeroof.models.plan import auto_cache

GIB = 2**30


def plan_json(capsys, *argv: str) -> dict:
    assert main(["plan", *argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_auto_cache_is_what_ram_leaves_on_a_ram_limited_box():
    # glm-5.2 on nvme-gen4: RAM 62 GB, OS reserve 4 GiB, dense band 9.9 GB, KV 70272 B/token;
    # at B = 8 and 4096 tokens: 62e9 − 4·2^30 − 9.9e9 − 8·4096·70272 = 45,502,359,808 B
    # (the routed set, 256 · 75 · 19 MB = 364.8 GB, is far larger)
    auto = auto_cache(load_model("glm-5.2"), load_hardware("nvme-gen4"), [1, 8], context_tokens=4096)
    assert auto["cache_bytes"] == pytest.approx(45_502_359_808, rel=1e-12)
    assert auto["limited_by"] == "ram" and auto["batch"] == 8 and auto["too_large"] == []


def test_auto_cache_holds_every_expert_when_ram_allows():
    # mixtral-8x7b on a 128 GB M4 Max: routed set 8 · 32 · 352,321,536 B = 84 GiB; RAM leaves
    # 128e9 − 8·2^30 − 3,210,739,712 − 4096·131072 = 115,662,454,784 B at B = 1: all of it
    auto = auto_cache(load_model("mixtral-8x7b"), load_hardware("apple-m4-max"), [1], context_tokens=4096)
    assert auto["cache_bytes"] == 8 * 32 * 352_321_536 == 84 * GIB
    assert auto["limited_by"] == "routed"


def test_auto_cache_is_sized_for_the_largest_batch_that_fits():
    # glm-5.2 on h200-pcie-offload at 32768 tokens: RAM 143771 MiB − 4 GiB = 146,459,852,800 B;
    # B = 64 needs 9.9e9 + 64·32768·70272 = 157,271,065,344 B > that: it cannot fit, so the cache
    # is sized at B = 8: 146,459,852,800 − 9.9e9 − 8·32768·70272 = 118,138,469,632 B
    auto = auto_cache(load_model("glm-5.2"), load_hardware("h200-pcie-offload"), [1, 8, 64], context_tokens=32768)
    assert auto["batch"] == 8 and auto["too_large"] == [64]
    assert auto["cache_bytes"] == pytest.approx(118_138_469_632, rel=1e-12)


def test_plan_default_is_auto_and_says_so(capsys):
    """Mixtral on a 128 GB Mac: with the cache it would have, no longer SSD-bound at 0.31 tok/s."""
    base = ["--model", "mixtral-8x7b", "--hardware", "apple-m4-max", "--batch", "1"]
    zero = plan_json(capsys, *base, "--cache-gib", "0")
    auto = plan_json(capsys, *base)
    assert zero["bound"] == ["ssd"] and zero["cache_auto"] is None and zero["cache_gib"] == 0
    assert auto["cache_gib"] == pytest.approx(84.0) and auto["cache_auto"]["limited_by"] == "routed"
    assert auto["bound"] != ["ssd"] and auto["cache_hit_rate"][0] == pytest.approx(1.0)
    assert auto["per_agent_tok_s"][0] > 20 * zero["per_agent_tok_s"][0]
    assert auto["notes"][0].startswith("expert cache auto: 84.0 GiB")
    # the same as asking for that many GiB by hand
    manual = plan_json(capsys, *base, "--cache-gib", "84")
    assert manual["step_seconds"] == pytest.approx(auto["step_seconds"], rel=1e-12)
    # in the table too
    assert main(["plan", *base]) == 0
    out = capsys.readouterr().out
    assert "84.0 GiB per box (auto)" in out and "note: expert cache auto" in out


def test_infeasible_rows_have_no_multiple(capsys):
    argv = ["--model", "glm-5.2", "--hardware", "h200-pcie-offload", "--batch", "1,8,64", "--context", "32768"]
    rep = plan_json(capsys, *argv)
    assert rep["fits_in_memory"] == [True, True, False]
    for d in rep["baselines"].values():
        assert d["multiple"][2] is None and d["multiple"][0] is not None and d["multiple"][1] is not None
    assert rep["infeasible_reason"][:2] == [None, None]
    assert "B=64" in rep["infeasible_reason"][2] and "exceed" in rep["infeasible_reason"][2]
    assert main(["plan", *argv]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.split()[:1] == ["64"])
    assert row.split()[-4:] == ["-", "-", "-", "NO"]
    assert "infeasible at B=64" in out


def test_the_link_term_is_named_per_preset(capsys, tmp_path):
    h200 = plan_json(capsys, "--model", "glm-5.2", "--hardware", "h200-pcie-offload", "--batch", "1")
    assert h200["link_name"] == "pcie" and h200["bound"] == ["ssd"]  # the JSON key stays the model's term
    assert any("streaming tier is pcie" in n for n in h200["notes"])
    nvme = plan_json(capsys, "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1")
    assert nvme["link_name"] == "ssd"
    assert main(["plan", "--model", "glm-5.2", "--hardware", "h200-pcie-offload", "--batch", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(line for line in out if line.startswith("B "))
    assert "pcie GB/token" in header and "SSD" not in header
    row = next(line for line in out if line.startswith("1 "))
    assert " pcie " in row
    # a preset naming an unknown link is refused by name
    text = load_hardware("nvme-gen4").path.read_text().replace('name = "nvme-gen4"', 'name = "x"\nlink = "floppy"')
    bad = tmp_path / "x.toml"
    bad.write_text(text)
    assert main(["plan", "--model", "glm-5.2", "--hardware", str(bad), "--batch", "1"]) == 2
    assert "link: must be one of ssd, pcie, host-link, page-cache" in capsys.readouterr().err
