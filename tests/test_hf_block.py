"""The transformers MoE block measurement (benchmarks/hf_moe_block.py) against the roofline:
the comparison on a made-up measurement whose answers are known by hand, the committed H200
run's schema, and that the errors the witness notebook reports come from that file."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from moeroof.core.paths import DATA_DIR, REPO_ROOT
from moeroof.data.presets import load_hardware
from moeroof.measure import hf_block
from moeroof.measure.hf_block import ARMS, DEFAULT_PATH, hf_block_check, load

E, K, D, F = 16, 2, 64, 32
SCALE = 1024  # experts of a few MiB, so the link term dominates the roofline
GU, DN = 2 * D * F * 2 * SCALE, D * F * 2 * SCALE
EB = GU + DN
BATCH = [1, 2, 4, 8]
HW = load_hardware("h200-pcie-offload")


def _union(b):
    """The independent-token union of uniform top-K routing, by hand."""
    return E * (1 - (1 - K / E) ** b)


def _roofline(arm, b):
    """The link term alone (it dominates here): one read of the expert size per expert copied."""
    n = b * K if arm == "uncoalesced" else _union(b)
    return n * EB / HW.ssd_bandwidth(EB)


def made_up(overhead=1e-3, later_overhead=2e-3, copy_factor=1.0):
    """A measurement whose step = roofline + overhead per expert application (``overhead`` at
    B = 1, ``later_overhead`` at every other B) and whose copy-only time is ``copy_factor`` × the
    link curve's time for its copies."""
    per_copy = GU / HW.ssd_bandwidth(GU) + DN / HW.ssd_bandwidth(DN)
    rows = []
    for arm in ARMS:
        for b in BATCH:
            apps = b * K if arm == "uncoalesced" else _union(b)
            step = _roofline(arm, b) + (overhead if b == 1 else later_overhead) * apps
            picks = np.full(E, b * K * 3 // E)
            rows.append(
                {
                    "router": "uniform",
                    "batch": b,
                    "mode": arm,
                    "step_seconds": step,
                    "net_tok_s": b / step,
                    "expert_copies_per_step": apps,
                    "bytes_per_step": apps * EB,
                    "union_per_step": _union(b),
                    "copy_only_seconds": apps * per_copy * copy_factor,
                    "compute_only_seconds": 1e-4,
                    "expert_picks": picks.tolist(),
                }
            )
    parity = [
        {"router": "uniform", "batch": b, "mode": arm, "max_abs_error": e, "max_rel_error": 2 * e, "rel_l2_error": e}
        for b, arm, e in ((1, "coalesced", 0.0), (2, "coalesced-grouped_mm", 3e-3), (4, "coalesced-grouped_mm", 1e-3))
    ]
    cfg = {
        "experts": E,
        "top_k": K,
        "hidden_size": D,
        "moe_intermediate_size": F,
        "expert_bytes": EB,
        "copy_bytes": {"gate_up_proj": GU, "down_proj": DN},
        "flops_per_token": 2 * 3 * D * F * K,
    }
    return {
        "provenance": "witnessed",
        "machine": {"gpu": "GPU-X"},
        "date": "2026-01-02",
        "command": "python3 benchmarks/hf_moe_block.py",
        "config": cfg,
        "rows": rows,
        "parity": parity,
    }


def test_roofline_errors_calibration_from_b1_only_and_copy_times_on_a_made_up_measurement():
    c = hf_block_check(data=made_up(), hardware=HW)
    assert c["gpu"] == "GPU-X" and c["date"] == "2026-01-02"
    r = c["routers"]["uniform"]
    assert r["batch"] == BATCH
    assert r["union_predicted"] == pytest.approx([_union(b) for b in BATCH], rel=1e-9)
    for arm in ARMS:
        a = r["arms"][arm]
        apps = np.array([b * K if arm == "uncoalesced" else _union(b) for b in BATCH])
        roof = np.array([_roofline(arm, b) for b in BATCH])
        meas = roof + np.where(np.array(BATCH) == 1, 1e-3, 2e-3) * apps
        assert a["measured"] == pytest.approx(meas.tolist(), rel=1e-12)
        assert a["predicted"] == pytest.approx(roof.tolist(), rel=1e-9)
        assert a["relative_error"] == pytest.approx((roof / meas - 1).tolist(), rel=1e-9)
        assert a["median_abs_error"] == pytest.approx(float(np.median(np.abs(roof / meas - 1))), rel=1e-9)
        # the overhead comes from B = 1 alone: 1 ms, although every later point carries 2 ms
        assert a["overhead_per_application_s"] == pytest.approx(1e-3, rel=1e-9)
        cal = roof + 1e-3 * apps
        assert a["calibrated"] == pytest.approx(cal.tolist(), rel=1e-9)
        assert a["calibrated_relative_error"][0] == pytest.approx(0.0, abs=1e-12)
        assert a["calibrated_median_abs_error"] == pytest.approx(float(np.median(np.abs(cal / meas - 1)[1:])), rel=1e-9)
        assert all(e < 0 for e in a["calibrated_relative_error"][1:])
        assert a["copy_relative_error"] == pytest.approx([0.0] * len(BATCH), abs=1e-12)
    assert c["routers"]["uniform"]["arms"]["coalesced-grouped_mm"]["roofline_arm"] == "coalesced"
    assert c["parity"]["coalesced"] == {
        "max_abs_error": 0.0,
        "max_rel_error": 0.0,
        "rel_l2_error": 0.0,
        "all_finite": True,
    }
    assert c["parity"]["coalesced-grouped_mm"]["rel_l2_error"] == 3e-3
    assert c["parity"]["coalesced-grouped_mm"]["max_rel_error"] == 6e-3


def test_a_calibration_that_holds_predicts_every_point_and_slow_copies_show():
    c = hf_block_check(data=made_up(later_overhead=1e-3, copy_factor=1.25), hardware=HW)
    for a in c["routers"]["uniform"]["arms"].values():
        assert a["calibrated_relative_error"] == pytest.approx([0.0] * len(BATCH), abs=1e-9)
        assert a["copy_median_abs_error"] == pytest.approx(1 - 1 / 1.25, rel=1e-9)


def test_a_skewed_router_is_modelled_from_its_measured_picks():
    data = made_up()
    for row in data["rows"]:
        row["router"] = "skewed"
        row["expert_picks"] = [12] * 2 + [1] * (E - 2)  # two hot experts
    r = hf_block_check(data=data, hardware=HW)["routers"]["skewed"]
    assert r["routing_provenance"] == "witnessed"
    pi = np.array([12] * 2 + [1] * (E - 2), dtype=float)
    pi = pi * K / pi.sum()
    want = [float(np.sum(1 - (1 - pi) ** b)) for b in BATCH]
    assert r["union_predicted"] == pytest.approx(want, rel=1e-6)
    assert r["union_predicted"][-1] < _union(BATCH[-1])


def test_load_names_what_a_measurement_lacks(tmp_path):
    data = made_up()
    del data["rows"][0]["copy_only_seconds"]
    del data["config"]["copy_bytes"]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"config\.copy_bytes.*rows\[0\]\.copy_only_seconds"):
        load(path)


# --- the committed H200 run ---


def test_committed_h200_run_schema_and_internal_consistency():
    data = load()
    assert DEFAULT_PATH == DATA_DIR / "measurements" / "hf-moe-block-h200-2026-11-30.json"
    assert data["provenance"] == "witnessed"
    assert data["date"] == "2026-11-30"
    assert data["command"].startswith("python3 benchmarks/hf_moe_block.py --out $OUT/")
    m = data["machine"]
    assert "H200" in m["gpu"] and m["driver"] and m["cuda"] and m["torch"].startswith("2.")
    assert m["transformers"] == "5.24.0"
    cfg = data["config"]
    assert cfg["block"].endswith("qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock")
    assert (cfg["experts"], cfg["top_k"], cfg["hidden_size"], cfg["moe_intermediate_size"]) == (128, 8, 2048, 768)
    assert cfg["dtype"] == "bfloat16" and cfg["pinned"] is True
    assert cfg["copy_bytes"] == {"gate_up_proj": 2 * 768 * 2048 * 2, "down_proj": 2048 * 768 * 2}
    assert cfg["expert_bytes"] == sum(cfg["copy_bytes"].values())
    assert cfg["flops_per_token"] == 2 * 3 * 2048 * 768 * 8
    batches = [1, 2, 4, 8, 16, 32, 64, 128]
    assert data["arms"] == list(ARMS)
    keys = {(r["router"], r["mode"], r["batch"]) for r in data["rows"]}
    assert keys == {(router, arm, b) for router in ("uniform", "skewed") for arm in ARMS for b in batches}
    for r in data["rows"]:
        b, k = r["batch"], cfg["top_k"]
        assert r["steps_timed"] == cfg["repeats"] == len(r["step_seconds_each"])
        assert r["step_seconds"] == pytest.approx(float(np.median(r["step_seconds_each"])))
        assert r["net_tok_s"] == pytest.approx(b / r["step_seconds"])
        assert r["bytes_per_step"] == pytest.approx(r["expert_copies_per_step"] * cfg["expert_bytes"])
        assert sum(r["expert_picks"]) == b * k * r["steps_timed"]
        assert min(k, 128) <= r["union_per_step"] <= min(b * k, 128)
        if r["mode"] == "uncoalesced":
            assert r["expert_copies_per_step"] == b * k
        else:  # one copy per expert of the step's union
            assert r["expert_copies_per_step"] == pytest.approx(r["union_per_step"])
    # parity: every arm at every B and router, finite; the eager arms run the reference's own code
    assert {(p["router"], p["mode"], p["batch"]) for p in data["parity"]} == keys
    for p in data["parity"]:
        assert p["finite"]
        assert p["rel_l2_error"] <= 1e-2 and p["max_rel_error"] <= 5e-2  # bf16
        if p["mode"] != "coalesced-grouped_mm":
            assert p["max_abs_error"] == 0.0


def test_the_errors_the_witness_notebook_reports_are_computed_from_the_committed_run():
    data = json.loads(DEFAULT_PATH.read_text())
    c = hf_block_check()
    hw = load_hardware("h200-pcie-offload")
    eb = data["config"]["expert_bytes"]
    for router, r in c["routers"].items():
        for arm, a in r["arms"].items():
            rows = sorted(
                (x for x in data["rows"] if x["router"] == router and x["mode"] == arm), key=lambda x: x["batch"]
            )
            meas = np.array([x["step_seconds"] for x in rows])
            assert a["measured"] == meas.tolist()
            assert a["relative_error"] == pytest.approx((np.array(a["predicted"]) / meas - 1).tolist(), rel=1e-12)
            assert a["median_abs_error"] == pytest.approx(float(np.median(np.abs(np.array(a["predicted"]) / meas - 1))))
            if arm == "uncoalesced":  # the roofline of this arm is every token's K copies over the link
                b = np.array(r["batch"], dtype=float)
                link = b * data["config"]["top_k"] * eb / hw.ssd_bandwidth(eb)
                assert a["predicted"] == pytest.approx(link.tolist(), rel=1e-6)
    src = (REPO_ROOT / "notebooks" / "witness.py").read_text()
    assert "hf = hf_block_check()" in src
    assert re.search(r'"median_abs_error": \{arm: a\["median_abs_error"\] for arm, a in hf_u\.items\(\)\}', src)
    assert 'save_figure(fig, "witness_hf_block")' in src


def test_module_has_no_device_dependency():
    # the comparison runs on the CI machine: no torch, no transformers
    src = (REPO_ROOT / "lib" / "moeroof" / "measure" / "hf_block.py").read_text()
    assert "import torch" not in src and "transformers import" not in src
    assert hf_block.__doc__
