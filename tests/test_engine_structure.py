"""Engine structure: efficiencies on the memory, compute and link terms, a cost per
(layer, expert) pair a step touches, and fit-plan holding what one batch size cannot identify at
sourced priors — checked against hand arithmetic, the closed-form union and simulated truths."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import replace

import numpy as np
import pytest

from moeroof.data.io import InputError
from moeroof.data.plan_points import PlanPoint
from moeroof.data.presets import load_hardware, load_model
from moeroof.fit.plan import (
    PRIOR_SECONDS_PER_AGENT_TOKEN,
    PRIOR_SECONDS_PER_STEP,
    PlanKnobs,
    box_with_knobs,
    fit_plan,
    predict_points,
)
from moeroof.models.plan import Workload, plan, routing_from_spec
from moeroof.models.step import RankWork, rank_terms
from moeroof.models.union import union_plugin

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_rank_terms_by_hand():
    hw = replace(
        load_hardware("nvme-gen4"),
        engine_seconds_per_step=0.01,
        engine_seconds_per_agent_token=0.002,
        engine_seconds_per_touched_expert=3e-4,
        mem_efficiency=0.5,
        compute_efficiency=0.25,
        link_efficiency=0.8,
    )
    work = RankWork(
        ssd_bytes=np.array([4e9]),
        mem_bytes=np.array([30e9]),
        flops=np.array([1e12]),
        agent_tokens=np.array([8.0]),
        read_size_bytes=8 * 2**20,
        touched_experts=np.array([1200.0]),
    )
    t = rank_terms(hw, work)
    assert t["ssd"][0] == pytest.approx(4e9 / (0.8 * float(hw.ssd_bandwidth(8 * 2**20))))
    assert t["memory"][0] == pytest.approx(30e9 / (0.5 * hw.bw_mem_bytes_per_s))
    assert t["compute"][0] == pytest.approx(1e12 / (0.25 * hw.flops_per_s))
    assert t["engine"][0] == pytest.approx(0.01 + 0.002 * 8 + 3e-4 * 1200)


@pytest.mark.parametrize("value", ["0", "1.5"])
def test_an_efficiency_outside_0_1_is_refused_naming_the_field(tmp_path, value):
    text = (ROOT / "data" / "presets" / "hardware" / "nvme-gen4.toml").read_text()
    # the preset states its own (CPU decode) mem_efficiency: this box's replaces it
    text = "\n".join(line for line in text.splitlines() if not line.startswith("mem_efficiency"))
    path = tmp_path / "box.toml"
    path.write_text(text + f"\nmem_efficiency = {{ value = {value}, assumed = true }}\n")
    with pytest.raises(InputError, match=r"mem_efficiency.*\(0, 1\]"):
        load_hardware(path)


def test_the_engine_term_counts_the_pairs_the_step_touches():
    """No cache, serial terms: the engine term is c0 + c1·B + c_U · L · U(B), U the closed-form
    union of independent tokens (moeroof.models.union), and the uncoalesced baseline's is
    c_U · L · B·K (each token runs its own experts)."""
    m = load_model("qwen3-30b-a3b")
    hw = replace(load_hardware("nvme-gen4"), engine_seconds_per_step=0.01, engine_seconds_per_touched_expert=2e-4)
    r = routing_from_spec("zipf:0.8", m)
    b = np.array([1, 4, 16, 64])
    p = plan(m, hw, Workload(overlap="sum"), r, b)
    u = union_plugin(r.pi, b).union_per_layer.mean(axis=0)
    np.testing.assert_allclose(p.terms["engine"], 0.01 + 2e-4 * m.moe_layers * u, rtol=1e-9)
    plain = plan(m, replace(hw, engine_seconds_per_touched_expert=0.0), Workload(overlap="sum"), r, b)
    unc = p.baselines["uncoalesced"]["net_tok_s"]
    unc_plain = plain.baselines["uncoalesced"]["net_tok_s"]
    np.testing.assert_allclose(b / unc - b / unc_plain, 2e-4 * m.moe_layers * b * m.top_k, rtol=1e-9)


SEED003 = [  # (B, cache GiB, ranks): seed 003's public M = 8 settings first, then the M sweep
    (8, 20.0, 1),
    (8, 20.0, 2),
    (8, 80.0, 2),
    (1, 80.0, 2),
    (16, 80.0, 2),
    (32, 80.0, 2),
]


@pytest.fixture(scope="module")
def seed003_box():
    m, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    return m, hw, routing_from_spec("histograms/glm5-seed003-per-layer.csv", m)


@pytest.mark.parametrize("c0", [PRIOR_SECONDS_PER_STEP[1], 0.07])
def test_one_batch_size_fits_the_per_touched_expert_cost_and_predicts_other_concurrency(seed003_box, c0):
    """A simulated truth whose engine time is mostly per touched expert (as seed 003's, 25×
    below its roofline), measured at M = 8 only: fit-plan fits c_U with the per-step and
    per-token costs at their priors, and predicts M = 1, 16 and 32 — exactly where the truth's
    per-step cost is the prior's centre, inside the bands where it is near the prior's upper end."""
    m, hw, r = seed003_box
    truth = PlanKnobs(
        engine_seconds_per_step=c0,
        engine_seconds_per_agent_token=PRIOR_SECONDS_PER_AGENT_TOKEN[1],
        engine_seconds_per_touched_expert=6e-4,
        # the efficiencies no row identifies, at the centres of the box's priors as the fit holds them
        mem_efficiency=hw.priors["mem_efficiency"][0][1],
        compute_efficiency=hw.priors["compute_efficiency"][0][1],
    )
    pts = [PlanPoint(i + 2, b, c, k, "lru", None, None) for i, (b, c, k) in enumerate(SEED003)]
    net, _ = predict_points(pts, m, hw, r, truth, overlap="sum")
    measured = [dataclasses.replace(p, net_tok_s=float(net[i])) if i < 3 else p for i, p in enumerate(pts)]
    fit = fit_plan(measured, m, hw, r, overlap="sum")
    cu = fit.knobs["engine_seconds_per_touched_expert"]
    assert cu["fitted"] and cu["low"] <= 6e-4 <= cu["high"], cu
    held = fit.knobs["engine_seconds_per_step"]
    assert not held["fitted"] and (held["low"], held["value"], held["high"]) == PRIOR_SECONDS_PER_STEP
    for i, row in enumerate(fit.rows[3:], start=3):
        assert row["low"] <= net[i] <= row["high"], (row, net[i])
        if c0 == PRIOR_SECONDS_PER_STEP[1]:
            assert row["predicted"] == pytest.approx(net[i], rel=0.03), row
    # the old structure (a per-step constant alone) would have said M = 1 is slower than M = 8 per step
    # by nothing: its one-stream rate is B/T with T fixed — far below the truth here
    box = box_with_knobs(hw, PlanKnobs(engine_seconds_per_step=float(8 / net[2])))
    assert (
        1 / plan(m, box, Workload(cache_bytes=80 * 2**30, ranks=2, overlap="sum"), r, [1]).step_seconds[0] < net[3] / 2
    )
    assert any(re.search(r"engine_seconds_per_step at its prior", n) for n in fit.notes)


def _box_with(tmp_path, line: str):
    text = (ROOT / "data" / "presets" / "hardware" / "gb10.toml").read_text()
    text = re.sub(r"^engine_seconds_per_step = .*$", line, text, flags=re.M)
    path = tmp_path / "box.toml"
    path.write_text(text)
    return path


def test_a_preset_carries_its_own_efficiency_prior(tmp_path):
    path = _box_with(
        tmp_path,
        'engine_seconds_per_step = { value = 0, unit = "ms", assumed = true }\n'
        'mem_efficiency = { value = 0.8, unit = "1", source = "x", prior = [0.5, 0.8, 0.9], prior_source = "a kernel" }',
    )
    hw = load_hardware(path)
    assert hw.priors["mem_efficiency"] == ((0.5, 0.8, 0.9), "a kernel")
    assert load_hardware("gb10").priors["mem_efficiency"][0] == (0.4, 0.7, 0.9)  # the suite's, from llama.cpp#2188


def test_a_preset_carries_its_own_engine_prior_and_fit_plan_holds_it(tmp_path, seed003_box):
    m, _, r = seed003_box
    path = _box_with(
        tmp_path,
        'engine_seconds_per_step = { value = 0, unit = "ms", assumed = true, prior = [1, 3, 9], '
        'prior_source = "a test\'s engine" }',
    )
    hw = load_hardware(path)
    (lo, mid, hi), source = hw.priors["engine_seconds_per_step"]
    assert (lo, mid, hi) == pytest.approx((1e-3, 3e-3, 9e-3)) and source == "a test's engine"
    assert load_hardware("gb10").priors["engine_seconds_per_step"][0] == PRIOR_SECONDS_PER_STEP
    pts = [PlanPoint(i + 2, b, c, k, "lru", None, None) for i, (b, c, k) in enumerate(SEED003)]
    truth = PlanKnobs(
        engine_seconds_per_step=3e-3, engine_seconds_per_agent_token=2e-4, engine_seconds_per_touched_expert=5e-4
    )
    net, _ = predict_points(pts, m, hw, r, truth, overlap="sum")
    measured = [dataclasses.replace(p, net_tok_s=float(net[i])) if i < 3 else p for i, p in enumerate(pts)]
    fit = fit_plan(measured, m, hw, r, overlap="sum")
    held = fit.knobs["engine_seconds_per_step"]
    assert (held["low"], held["value"], held["high"]) == pytest.approx((1e-3, 3e-3, 9e-3))
    assert held["held"] == "prior (the gb10 preset's)"
    assert held["source"] == "a test's engine"


@pytest.mark.parametrize(
    "line, message",
    [
        (
            'engine_seconds_per_step = { value = 0, unit = "ms", assumed = true, prior = [3, 1, 9], prior_source = "x" }',
            "low <= centre",
        ),
        ('engine_seconds_per_step = { value = 0, unit = "ms", assumed = true, prior = [1, 3, 9] }', "prior_source"),
        (
            'engine_seconds_per_step = { value = 0, unit = "ms", assumed = true, prior = [1, 3], prior_source = "x" }',
            "three finite",
        ),
        (
            'engine_seconds_per_step = { value = 0, unit = "ms", assumed = true }\nram_bytes = { value = 128, unit = "GB", source = "x", prior = [1, 2, 3], prior_source = "x" }',
            "takes no prior",
        ),
        (
            'engine_seconds_per_step = { value = 0, unit = "ms", assumed = true }\n'
            'mem_efficiency = { value = 0.8, unit = "1", source = "x", prior = [0.5, 0.8, 1.2], prior_source = "x" }',
            "efficiency's prior must lie in",
        ),
    ],
)
def test_a_bad_prior_names_the_file_and_field(tmp_path, line, message):
    path = _box_with(tmp_path, line)
    if "ram_bytes = { value = 128" in line:  # the second ram_bytes replaces the first
        text = path.read_text()
        text = re.sub(r"^ram_bytes = \{ value = 128, unit = \"GB\", source = \"NVIDIA.*$\n", "", text, flags=re.M)
        path.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        load_hardware(path)
    assert str(path) in str(err.value)


def test_per_token_prior_reaches_what_bigrig_rows_give_as_per_token_cost_alone():
    """The per-agent-token prior's high end is sourced, not assumed: bigrig's B = 1 and 16 rows,
    fitted with a per-step and a per-token cost and nothing per touched expert, give the most
    per-token cost a public engine's rows admit; the prior's range must reach it (within 2 %) and
    its centre stay below it."""
    from moeroof.studies.validation import bigrig_engine_fit

    _, fitted = bigrig_engine_fit()
    low, centre, high = PRIOR_SECONDS_PER_AGENT_TOKEN
    assert high == pytest.approx(fitted["c1"], rel=0.02)
    assert low == 0.0 < centre < fitted["c1"]
