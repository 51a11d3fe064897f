"""``plan --cache-gib auto`` (the default), infeasible rows without multiples, and the link
term named per preset. Expected numbers are worked from the preset
TOMLs by hand, not from the code."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import csvout  # noqa: I001  (tests/csvout.py: results past their run record)
from moeroof.cli import main
from moeroof.core.errors import ParameterError
from moeroof.data.presets import load_hardware, load_model
from moeroof.models.plan import auto_cache, cache_parameter, default_cache

GIB = 2**30


def plan_json(capsys, *argv: str) -> dict:
    assert main(["plan", *argv, "--json"]) == 0, capsys.readouterr().err
    return csvout.strip_run(json.loads(capsys.readouterr().out))


def test_auto_cache_is_what_ram_leaves_on_a_ram_limited_box():
    # glm-5.2 on nvme-gen4: RAM 62 GB, OS reserve 4 GiB, dense band 9.9 GB, KV 70272 B/token;
    # at 4096 tokens, B = 1: 62e9 − 4·2^30 − 9.9e9 − 1·4096·70272 = 47,517,198,592 B and
    # B = 8: 62e9 − 4·2^30 − 9.9e9 − 8·4096·70272 = 45,502,359,808 B (the routed set,
    # 256 · 75 · 19 MB = 364.8 GB, is far larger): each B its own
    auto = auto_cache(load_model("glm-5.2"), load_hardware("nvme-gen4"), [1, 8], context_tokens=4096)
    assert auto["cache_bytes"] == pytest.approx([47_517_198_592, 45_502_359_808], rel=1e-12)
    assert auto["limited_by"] == ["ram", "ram"] and auto["batch"] == [1, 8]


def test_auto_cache_holds_every_expert_when_ram_allows():
    # mixtral-8x7b on a 128 GB M4 Max: routed set 8 · 32 · 352,321,536 B = 84 GiB; RAM leaves
    # 128e9 − 8·2^30 − 3,210,739,712 − 4096·131072 = 115,662,454,784 B at B = 1: all of it
    auto = auto_cache(load_model("mixtral-8x7b"), load_hardware("apple-m4-max"), [1], context_tokens=4096)
    assert auto["cache_bytes"] == [8 * 32 * 352_321_536] == [84 * GIB]
    assert auto["limited_by"] == ["routed"]


def test_auto_cache_is_sized_for_each_batch_alone():
    # glm-5.2 on h200-pcie-offload at 32768 tokens: RAM 143771 MiB − 4 GiB = 146,459,852,800 B;
    # B = 1: 146,459,852,800 − 9.9e9 − 1·32768·70272 = 134,257,179,904 B;
    # B = 8: 146,459,852,800 − 9.9e9 − 8·32768·70272 = 118,138,469,632 B;
    # B = 64 needs 9.9e9 + 64·32768·70272 = 157,271,065,344 B > what is left: no cache, no step
    model, hw = load_model("glm-5.2"), load_hardware("h200-pcie-offload")
    auto = auto_cache(model, hw, [1, 8, 64], context_tokens=32768)
    assert auto["cache_bytes"] == pytest.approx([134_257_179_904, 118_138_469_632, 0.0], rel=1e-12)
    assert auto["limited_by"] == ["ram", "ram", "none-left"]
    # the cache of a B does not change with the other batch sizes asked for
    for grid in ([8], [1, 8], [8, 64], [2, 8, 4096]):
        got = auto_cache(model, hw, grid, context_tokens=32768)
        assert got["cache_bytes"][got["batch"].index(8)] == auto["cache_bytes"][1]


def test_a_report_s_auto_cache_is_its_preferred_size_capped_by_the_model_and_the_box():
    # glm-5.2 on nvme-gen4: RAM leaves 47,517,198,592 B at B = 1 (above): 30 GiB fits as it is
    glm, nvme = load_model("glm-5.2"), load_hardware("nvme-gen4")
    got = default_cache(glm, nvme, preferred_bytes=30 * GIB)
    assert got.cache_bytes == 30 * GIB and "preferred" in got.why
    # 50 GiB = 53,687,091,200 B does not fit: what RAM leaves at B = 1, said so
    got = default_cache(glm, nvme, preferred_bytes=50 * GIB)
    assert got.cache_bytes == pytest.approx(47_517_198_592, rel=1e-12) and "RAM leaves" in got.why
    # mixtral on the M4 Max: its routed set, 84 GiB, is below 100 GiB and what RAM leaves
    got = default_cache(load_model("mixtral-8x7b"), load_hardware("apple-m4-max"), preferred_bytes=100 * GIB)
    assert got.cache_bytes == 84 * GIB and "every routed expert of mixtral-8x7b" in got.why
    # glm-5.2 at 32768 tokens on a 30 GiB box: 32e9 − 4 GiB − 9.9e9 − 32768·70272 < 0: no cache
    tiny = replace(nvme, ram_bytes=32e9)
    got = default_cache(glm, tiny, preferred_bytes=30 * GIB, context_tokens=32768 * 8)
    assert got.cache_bytes == 0.0 and got.why.startswith("no cache")


def test_cache_parameter_takes_a_number_or_auto():
    glm, nvme = load_model("glm-5.2"), load_hardware("nvme-gen4")
    assert cache_parameter(12.5, glm, nvme, preferred_gib=30.0) == (12.5, None)
    gib, why = cache_parameter("auto", glm, nvme, preferred_gib=30.0)
    assert gib == 30.0 and why
    with pytest.raises(ParameterError, match="cache_gib.*number of GiB or auto"):
        cache_parameter("lots", glm, nvme, preferred_gib=30.0)


def test_plan_default_is_auto_and_says_so(capsys):
    """Mixtral on a 128 GB Mac: with the cache it would have, no longer SSD-bound at 0.31 tok/s."""
    base = ["--model", "mixtral-8x7b", "--hardware", "apple-m4-max", "--batch", "1"]
    zero = plan_json(capsys, *base, "--cache-gib", "0")
    auto = plan_json(capsys, *base)
    assert zero["bound"] == ["ssd"] and zero["cache_auto"] is None and zero["cache_gib"] == [0]
    assert auto["cache_gib"] == pytest.approx([84.0]) and auto["cache_auto"]["limited_by"] == ["routed"]
    # a cache of every routed expert misses at most a rare expert's first touch in the counted half
    assert auto["bound"] != ["ssd"] and auto["cache_hit_rate"][0] >= 0.999
    assert auto["per_agent_tok_s"][0] > 20 * zero["per_agent_tok_s"][0]
    assert auto["notes"][0].startswith("expert cache auto, per batch size")
    assert "B=1: 84.0 GiB (every routed expert)" in auto["notes"][0]
    # the same as asking for that many GiB by hand
    manual = plan_json(capsys, *base, "--cache-gib", "84")
    assert manual["step_seconds"] == pytest.approx(auto["step_seconds"], rel=1e-12)
    # in the table too
    assert main(["plan", *base]) == 0
    out = capsys.readouterr().out
    assert "expert cache: auto, each B its own" in out and "note: expert cache auto" in out
    row = next(line for line in out.splitlines() if line.split()[:1] == ["1"])
    assert row.split()[1] == "84.0"


def test_infeasible_rows_have_no_multiple(capsys):
    # uniform routing: what fits in RAM does not depend on it, and the skew prior's ends would triple the run
    argv = ["--model", "glm-5.2", "--hardware", "h200-pcie-offload", "--batch", "1,8,64", "--context", "32768"]
    argv += ["--routing", "uniform"]
    rep = plan_json(capsys, *argv)
    assert rep["fits_in_memory"] == [True, True, False]
    for d in rep["baselines"].values():
        assert d["multiple"][2] is None and d["multiple"][0] is not None and d["multiple"][1] is not None
    # no rate on a step that cannot run: not its own, not the uncoalesced one on the same box
    for key in ("step_seconds", "per_agent_tok_s", "net_tok_s", "coalescing_ratio", "bound"):
        assert rep[key][2] is None and rep[key][0] is not None, key
    assert rep["baselines"]["uncoalesced"]["net_tok_s"][2] is None
    assert all(v[2] is None for v in rep["terms_seconds"].values())
    assert rep["infeasible_reason"][:2] == [None, None]
    assert "B=64" in rep["infeasible_reason"][2] and "exceed" in rep["infeasible_reason"][2]
    assert main(["plan", *argv]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.split()[:1] == ["64"]).split()
    # B, cache GiB, then no step, rate or multiple: only U/layer (the routing's) is a number
    assert row[0] == "64" and row[-1] == "NO" and "RAM" in row
    numbers = [c for c in row[2:-1] if c not in ("-", "RAM")]
    assert len(numbers) == 1, row
    assert "infeasible at B=64" in out
    assert main(["plan", *argv, "--format", "csv"]) == 0
    lines = csvout.data_text(capsys.readouterr().out).splitlines()
    header, last = lines[0].split(","), lines[-1].split(",")
    for key in ("step_seconds", "per_agent_tok_s", "net_tok_s", "multiple_vs_uncoalesced", "bound"):
        assert last[header.index(key)] == "", key


def test_the_link_term_is_named_per_preset(capsys, tmp_path):
    # no expert cache: every expert a step touches crosses the link, which binds
    h200 = plan_json(
        capsys, "--model", "glm-5.2", "--hardware", "h200-pcie-offload", "--batch", "1", "--cache-gib", "0"
    )
    assert h200["link_name"] == "pcie" and h200["bound"] == ["ssd"]  # the JSON key stays the model's term
    assert any("streaming tier is pcie" in n for n in h200["notes"])
    nvme = plan_json(capsys, "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1")
    assert nvme["link_name"] == "ssd"
    assert (
        main(["plan", "--model", "glm-5.2", "--hardware", "h200-pcie-offload", "--batch", "1", "--cache-gib", "0"]) == 0
    )
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
