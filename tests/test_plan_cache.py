"""The plan with the cache it sees: the booster's LRU cliff derived from the working set, plan
and split agreeing through the CLI, the uncoalesced baseline, admission against a brute-force
scan, error messages, and the engine terms' provenance on every shipped box."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.core.paths import DATA_DIR
from moeroof.core.units import GiB
from moeroof.data.presets import PRESETS_DIR, MoEModel, list_presets, load_hardware, load_model
from moeroof.models import expert_cache
from moeroof.models.plan import (
    CACHE_POLICIES,
    RoutingProbabilities,
    Workload,
    admission_search,
    plan,
    routing_from_spec,
    step_breakdown,
)
from moeroof.models.routing import inclusion_probabilities, zipf_weights
from moeroof.models.split import split_plan
from moeroof.models.union import union_plugin

HIST = DATA_DIR / "histograms" / "glm5-seed003-per-layer.csv"
BOOSTER_BATCH = [1, 2, 4, 8, 16]


def run_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def run_error(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return err


# ----------------------------------------------------------------------------- the booster's cliff


@pytest.fixture(scope="module")
def booster():
    model, hw = load_model("glm-5-nvfp4"), load_hardware("gb10")
    routing = routing_from_spec("histograms/glm5-seed003-per-layer.csv", model)
    out = {}
    for policy in ("lru", "static"):
        w = Workload(context_tokens=512, cache_bytes=20 * GiB, cache_policy=policy)
        out[policy] = plan(model, hw, w, routing, BOOSTER_BATCH)
    return model, routing, out


def test_booster_lru_cliff_is_where_the_working_set_exceeds_the_cache(booster):
    model, routing, plans = booster
    lru, static = plans["lru"], plans["static"]
    b = np.array(BOOSTER_BATCH)
    i1, i4, i8 = (BOOSTER_BATCH.index(x) for x in (1, 4, 8))
    # the cache the step sees is the whole 20 GiB (RAM leaves room for it at context 512)
    cache_bytes = lru.cache_experts_per_layer * model.moe_layers * model.expert_bytes
    np.testing.assert_allclose(cache_bytes, 20 * GiB, rtol=1e-9)
    # the per-step working set: U(B) experts per layer, L layers, e bytes each (closed form)
    working_set = union_plugin(routing.pi, b).mean * model.moe_layers * model.expert_bytes
    assert working_set[i1] < 20 * GiB < working_set[i8]
    # LRU over a cyclic layer-by-layer stream: a working set larger than the cache evicts every
    # expert before its next use, so the hit rate collapses exactly where it stops fitting
    hit = lru.cache_hit_rate
    assert hit[i8] < 0.01
    assert hit[i1] > 0.2
    for j in range(b.size):
        assert (hit[j] < 0.01) == (working_set[j] > 20 * GiB), (b[j], hit[j], working_set[j] / GiB)
    assert lru.net_tok_s[i8] < lru.net_tok_s[i4]
    # the pinned hot set has no cliff: at M = 8 it still hits where LRU's collapsed (41 % on the
    # histogram's raw counts, the figure first reported; the closed form is the next test's)
    assert static.cache_hit_rate[i8] > 0.3
    assert static.net_tok_s[i8] >= static.net_tok_s[i4]
    assert np.all(static.cache_hit_rate >= lru.cache_hit_rate - 1e-9)


def test_booster_static_hit_rate_is_the_hot_set_closed_form(booster):
    """Pinned hot set: hit rate = 1 − Σ_{i ∉ top c} m_i / Σ_i m_i per layer, the c hottest
    experts by π, pooled over the layers (a direct sum here)."""
    model, routing, plans = booster
    static = plans["static"]
    c = float(static.cache_experts_per_layer[0])
    lo, frac = int(np.floor(c)), c - np.floor(c)
    for j, b in enumerate(BOOSTER_BATCH):
        m = 1.0 - (1.0 - np.sort(routing.pi, axis=1)[:, ::-1]) ** b
        missed = m[:, lo + 1 :].sum(axis=1) + (1 - frac) * m[:, lo]
        want = 1.0 - missed.sum() / m.sum()
        assert static.cache_hit_rate[j] == pytest.approx(want, rel=1e-9)


# ----------------------------------------------------------------------------- plan and split agree


@pytest.mark.parametrize("policy", ["lru", "static"])
@pytest.mark.parametrize("partition,speed", [("lpt", None), ("id", None), ("weighted", "1,0.6")])
def test_plan_and_split_report_the_same_per_rank_seconds(policy, partition, speed, capsys):
    common = ["--batch", "8", "--cache-gib", "20", "--cache-policy", policy]
    extra = [] if speed is None else ["--rank-speed", speed]
    p = run_json(
        capsys,
        "plan",
        "--model",
        "glm-5-nvfp4",
        "--hardware",
        "gb10",
        "--routing",
        str(HIST),
        "--ranks",
        "2",
        "--partition",
        partition,
        *common,
        *extra,
    )
    s = run_json(capsys, "split", str(HIST), "--ranks", "2", "--method", partition, *common, *extra)
    plan_rank_s = [row[0] for row in p["per_rank_step_seconds"]]
    assert len(plan_rank_s) == 2
    np.testing.assert_allclose(plan_rank_s, s["predicted_step_seconds"], rtol=1e-9)
    assert p["step_seconds"][0] == pytest.approx(s["step_seconds"], rel=1e-9)
    assert p["net_tok_s"][0] == pytest.approx(s["tok_s"], rel=1e-9)
    if speed is not None:  # the slow rank's seconds are its full-speed work / 0.6
        slow = s["per_rank"]["terms_seconds"]
        full = max(slow[k][1] for k in slow)
        assert s["predicted_step_seconds"][1] == pytest.approx(full / 0.6, rel=1e-9)


# ----------------------------------------------------------------------------- uncoalesced, one rank


def toy_model(**kw) -> MoEModel:
    base = dict(
        name="toy",
        experts=32,
        top_k=4,
        moe_layers=8,
        expert_bytes=20e6,
        non_routed_bytes=2e9,
        kv_bytes_per_token=50e3,
        flops_per_token=2e10,
        hidden_size=2048,
    )
    base.update(kw)
    return MoEModel(**base)


def toy_routing(model: MoEModel, skews=(0.6, 1.2)) -> RoutingProbabilities:
    pi = np.array([inclusion_probabilities(zipf_weights(model.experts, s), model.top_k) for s in skews])
    return RoutingProbabilities(pi, "zipf rows", "assumed")


TOY_HW = replace(load_hardware("nvme-gen4"), name="toy-nvme", bw_link_bytes_per_s=25e9)
TOY_BATCH = [1, 3, 8, 16]


@pytest.mark.parametrize("policy", CACHE_POLICIES)
@pytest.mark.parametrize("ranks", [1, 2])
def test_uncoalesced_streams_at_least_what_coalesced_streams(policy, ranks):
    model = toy_model()
    routing = toy_routing(model)
    cache = 6.5 * model.moe_layers * model.expert_bytes  # 6.5 experts per layer per rank
    w = Workload(context_tokens=256, cache_bytes=cache, cache_policy=policy, ranks=ranks)
    co = step_breakdown(model, TOY_HW, w, routing, TOY_BATCH)
    un = step_breakdown(model, TOY_HW, w, routing, TOY_BATCH, coalesced=False)
    assert np.all(un.ssd_bytes >= co.ssd_bytes * (1 - 1e-12))
    assert np.all(un.mem_bytes >= co.mem_bytes * (1 - 1e-12))  # B·K_r ≥ U_r experts read
    assert np.all(un.step.step_seconds >= co.step.step_seconds * (1 - 1e-12))
    assert np.any(un.ssd_bytes > co.ssd_bytes * 1.01)  # not vacuous: some B > 1 differs
    # B = 1: one token, nothing to coalesce
    np.testing.assert_allclose(un.ssd_bytes[:, 0], co.ssd_bytes[:, 0], rtol=1e-12)
    p = plan(model, TOY_HW, w, routing, TOY_BATCH)
    assert np.all(p.baselines["uncoalesced"]["multiple"] >= 1 - 1e-12)


@pytest.mark.parametrize("policy", ["lru", "belady", "static"])
@pytest.mark.parametrize("overlap", ["max", "sum"])
def test_one_rank_plan_equals_split_plan_with_every_expert_on_rank_0(policy, overlap):
    model = toy_model()
    routing = toy_routing(model)
    cache = 9.0 * model.moe_layers * model.expert_bytes
    w = Workload(context_tokens=300, cache_bytes=cache, cache_policy=policy, overlap=overlap, seed=4)
    p = plan(model, TOY_HW, w, routing, TOY_BATCH)
    for j, b in enumerate(TOY_BATCH):
        s = split_plan(
            np.zeros(model.experts, dtype=np.int64),
            routing.pi,
            model,
            TOY_HW,
            batch=b,
            cache_bytes_per_rank=cache,
            context_tokens=300,
            overlap=overlap,
            cache_policy=policy,
            seed=4,
        )
        assert s.ranks == 1
        assert s.step_seconds == pytest.approx(p.step_seconds[j], rel=1e-12)
        assert s.rank_seconds[0] == pytest.approx(p.per_rank_step_seconds[0, j], rel=1e-12)
        assert s.streamed_bytes[0] == pytest.approx(p.ssd_bytes_per_step[j], rel=1e-12)
        assert s.fabric_bytes == 0.0
        for k, v in s.terms_seconds.items():
            assert v[0] == pytest.approx(p.terms[k][j], rel=1e-12, abs=1e-15)


# ----------------------------------------------------------------------------- admission

ADMIT_BATCH = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


@pytest.fixture(scope="module")
def admit_case():
    # long contexts on a small box: from some B on the step does not fit in RAM
    model = load_model("qwen3-30b-a3b")
    hw = load_hardware("apple-m4")
    routing = routing_from_spec("zipf:0.9", model)
    w = Workload(context_tokens=32768, cache_policy="static", cache_auto=True)
    every = list(range(1, 41))
    return model, hw, w, routing, plan(model, hw, w, routing, every)


def brute_admit(p, x):
    """The largest B of an exhaustive scan of B = 1, 2, 3, … that fits and keeps the floor."""
    best = None
    for i, b in enumerate(p.batch):
        if p.per_agent_tok_s[i] >= x and p.fits_in_memory[i] and (best is None or b > best):
            best = int(b)
    return best


def test_admission_search_against_an_exhaustive_scan(admit_case):
    model, hw, w, routing, p = admit_case
    assert not np.all(p.fits_in_memory), "the case should include infeasible batches"
    assert np.any(p.fits_in_memory)
    ram = int(p.batch[p.fits_in_memory].max())
    rates = p.per_agent_tok_s[p.fits_in_memory]
    floors = [0.0, *np.sort(rates), *(0.5 * (rates[:-1] + rates[1:])), float(rates.max()) * 1.01]
    for x in floors:
        adm = admission_search(model, hw, w, routing, x)
        want = brute_admit(p, x)
        assert adm["admit_batch"] == want, x
        assert adm["next_batch"] == (want or 0) + 1
        if want is None:
            assert adm["next_fails"] == "rate" and adm["next_per_agent_tok_s"] < x
        else:
            i = list(p.batch).index(want)
            assert adm["per_agent_tok_s"] == pytest.approx(p.per_agent_tok_s[i]) and adm["per_agent_tok_s"] >= x
            assert adm["net_tok_s"] == pytest.approx(want * adm["per_agent_tok_s"])
            assert adm["ssd_bytes_per_token"] == pytest.approx(p.ssd_bytes_per_token[i])
            if want == ram:
                assert adm["next_fails"] == "ram" and "does not fit in RAM" in adm["reason"]
            else:
                assert adm["next_fails"] == "rate" and adm["next_per_agent_tok_s"] < x
                assert adm["next_per_agent_tok_s"] == pytest.approx(p.per_agent_tok_s[i + 1])
    with pytest.raises(ValueError):
        admission_search(model, hw, w, routing, -1.0)
    with pytest.raises(ValueError):
        admission_search(model, hw, w, routing, float("nan"))


def test_admission_search_says_when_it_hit_its_bound():
    # no context: the KV does not grow with B, nothing bounds B in RAM; a floor of 0 admits all
    model = load_model("qwen3-30b-a3b")
    w = Workload(context_tokens=0, cache_policy="static", cache_auto=True)
    adm = admission_search(model, load_hardware("apple-m4"), w, routing_from_spec("uniform", model), 0.0, max_batch=50)
    assert adm["admit_batch"] == 50 and adm["hit_bound"] and adm["next_fails"] == "bound"
    assert "stopped at B = 50" in adm["reason"]


def test_cli_admission_searches_b_not_the_grid(capsys):
    base = ["plan", "--model", "qwen3-30b-a3b", "--hardware", "apple-m4", "--routing", "zipf:0.9"]
    base += ["--context", "32768", "--cache-policy", "static"]
    rep = run_json(capsys, *base, "--batch", "1-40")
    assert "admit_batch" not in rep
    x = 0.1  # between the rates of B = 4 (0.129) and B = 5 (0.090), worked from the scan above
    answers = set()
    for grid in ("1", "1,2", "1:512:x2", "3,17"):
        rep = run_json(capsys, *base, "--batch", grid, "--min-per-agent-tok-s", repr(x))
        answers.add((rep["admit_batch"], rep["admission"]["next_batch"], rep["admission"]["next_fails"]))
    assert answers == {(4, 5, "rate")}
    rep = run_json(capsys, *base, "--batch", "1", "--min-per-agent-tok-s", "100")
    assert rep["admit_batch"] is None and rep["admission"]["next_fails"] == "rate"
    assert main([*base, "--batch", "1", "--min-per-agent-tok-s", "0"]) == 0
    out = capsys.readouterr().out
    assert "admit_batch = 7" in out and "B = 8 is refused: B = 8 does not fit in RAM" in out
    err = run_error(capsys, *base, "--batch", "1", "--min-per-agent-tok-s", "-1")
    assert err.startswith("error: ") and "--min-per-agent-tok-s" in err
    assert len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- errors

BOOSTER_ARGS = ["plan", "--model", "glm-5-nvfp4", "--hardware", "gb10", "--batch", "1,8"]


def test_unknown_cache_policy_is_a_usage_error(capsys):
    err = run_error(capsys, *BOOSTER_ARGS, "--cache-policy", "nope")
    assert "--cache-policy" in err and "nope" in err
    err = run_error(capsys, "split", str(HIST), "--ranks", "2", "--method", "lpt", "--cache-policy", "nope")
    assert "--cache-policy" in err


def test_model_without_hidden_size_on_two_ranks_names_it(capsys, tmp_path):
    text = (PRESETS_DIR / "models" / "glm-5-nvfp4.toml").read_text()
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.startswith("hidden_size")]
    assert len(kept) == len(lines) - 1
    toml = tmp_path / "no-hidden.toml"
    toml.write_text("".join(kept).replace('name = "glm-5-nvfp4"', 'name = "no-hidden"'))
    argv = ["plan", "--model", str(toml), "--hardware", "gb10", "--batch", "1,8", "--routing", str(HIST)]
    err = run_error(capsys, *argv, "--ranks", "2")
    assert err.startswith("error: ") and "hidden_size" in err
    assert len(err.strip().splitlines()) == 1
    # one rank needs no exchange: the same model plans
    assert main([*argv, "--json"]) == 0
    capsys.readouterr()


def test_rank_speed_count_must_match_ranks(capsys):
    err = run_error(capsys, *BOOSTER_ARGS, "--ranks", "2", "--rank-speed", "1")
    assert err.startswith("error: ") and "--rank-speed" in err
    assert len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- provenance

HARDWARE = sorted(list_presets()["hardware"])


@pytest.mark.parametrize("hardware", HARDWARE)
def test_engine_terms_are_assumed_on_every_shipped_box(hardware):
    hw = load_hardware(hardware)
    model = load_model("qwen3-30b-a3b")
    p = plan(
        model, hw, Workload(context_tokens=1024, cache_policy="static"), routing_from_spec("uniform", model), [1, 4]
    )
    prov = p.provenance
    for key in ("hardware.engine_seconds_per_step", "hardware.engine_seconds_per_agent_token"):
        assert key in prov["non_witnessed"]
        assert prov["inputs"][key] == "assumed"
    assert prov["result"] == "projected"
    # assumed 0 until measured: the engine term is zero in every step
    assert hw.engine_seconds_per_step == 0 and hw.engine_seconds_per_agent_token == 0


# ----------------------------------------------------------------------------- a known defect


def test_steady_state_does_not_depend_on_call_history():
    pi = np.array([inclusion_probabilities(zipf_weights(128, s), 4) for s in (1.0, 1.3)])
    kw = dict(policy="lru", scope="layer")
    expert_cache.clear_memo()
    cold = expert_cache.steady_state_miss_ratio(pi, 2, 40.9, **kw)
    expert_cache.clear_memo()
    expert_cache.steady_state_miss_ratio(pi, 2, 40.0, **kw)
    warm = expert_cache.steady_state_miss_ratio(pi, 2, 40.9, **kw)
    expert_cache.clear_memo()
    assert warm == cold


def test_split_provenance_names_the_engine_terms_its_step_uses(capsys):
    rep = run_json(capsys, "split", str(HIST), "--ranks", "2", "--method", "lpt", "--cache-policy", "static")
    prov = rep["inputs"]["provenance"]
    assert prov.get("hardware.engine_seconds_per_step") == "assumed"
    assert prov.get("hardware.engine_seconds_per_agent_token") == "assumed"


def test_plan_and_split_say_the_unseen_experts_got_their_good_turing_share(capsys):
    """The seed 003 histogram is a 128-token sample with experts a layer never saw fire: plan and
    split read it the same way and both say so, with the largest per-layer share N₁/N."""
    from moeroof.data.io import read_histogram

    h = read_histogram(HIST)
    c = np.asarray(h.counts, dtype=float)
    share = max((c[i] == 1).sum() / c[i].sum() for i in range(c.shape[0]) if (c[i] == 0).any())
    p = run_json(capsys, "plan", "--model", "glm-5-nvfp4", "--hardware", "gb10", "--routing", str(HIST), "--batch", "8")
    s = run_json(capsys, "split", str(HIST), "--ranks", "2", "--method", "lpt", "--batch", "8")
    for rep in (p, s):
        (note,) = [n for n in rep["notes"] if "Good–Turing" in n]
        assert f"at most {share:.1%}" in note
