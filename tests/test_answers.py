"""The answer builders of moeroof.present.answers on made-up inputs: names and numbers in, the
words follow them, and "synthetic"/"projected" appear only when true."""

from __future__ import annotations

import math

import pytest

from moeroof.present import answers

WITNESSED = {"model.expert_bytes": "witnessed", "hardware.bw_ssd": "witnessed", "routing": "witnessed"}
MIXED = {"model.expert_bytes": "witnessed", "hardware.bw_ssd": "assumed", "routing": "projected"}


def words(text: str, *present: str, absent: tuple[str, ...] = ()) -> None:
    for w in present:
        assert w in text, f"{w!r} missing from: {text}"
    for w in absent:
        assert w not in text, f"{w!r} should not be in: {text}"


def test_provenance_sentence_says_projected_and_synthetic_only_when_true():
    all_w = answers.provenance_sentence(WITNESSED)
    words(all_w, "witnessed", absent=("projected", "synthetic"))
    mixed = answers.provenance_sentence(MIXED)
    words(mixed, "projected", "hardware.bw_ssd", "routing", absent=("synthetic", "model.expert_bytes"))
    synth = answers.provenance_sentence(MIXED, synthetic=["the histogram `x.csv`"])
    words(synth, "synthetic", "x.csv", "projected")
    many = answers.provenance_sentence({f"in{i}": "assumed" for i in range(9)}, limit=3)
    words(many, "in0", "in2", "6 more", absent=("in3",))


def test_is_synthetic_reads_the_tag():
    assert answers.is_synthetic("synthetic")
    assert not answers.is_synthetic("witnessed")
    assert not answers.is_synthetic("projected")
    assert not answers.is_synthetic(None)


def test_fmt_and_pct():
    assert answers.fmt(0.1234) == "0.123"
    assert answers.fmt(1234.6) == "1235"
    assert answers.fmt(12.345) == "12.3"
    assert answers.fmt(float("nan")) == "n/a"
    assert answers.fmt(math.inf) == "∞"
    assert answers.pct(0.523) == "52 %"
    assert answers.pct(0.523, 1) == "52.3 %"


def net_toks_kwargs(**over):
    kw = dict(
        model="toy-moe",
        hardware="toy-box",
        routing="zipf:0.7",
        cache_gib=12.0,
        context_tokens=2048,
        batch=[1, 2, 4, 8, 16],
        bound=["ssd", "ssd", "ssd", "memory", "memory"],
        fits=[True, True, True, True, False],
        best_net_tok_s=9.5,
        best_batch=8,
        per_agent_first=2.5,
        per_agent_last=1.2,
        last_feasible_batch=8,
        max_multiple=5.1,
        max_multiple_batch=90,
        claim_b_max=128,
        batch_at_4x=64,
        per_agent_at_4x=0.02,
        batch_at_10x=None,
        seed_per_agent_last=3.3,
        inputs=MIXED,
        synthetic=(),
    )
    kw.update(over)
    return kw


def test_a_cache_holding_every_routed_expert_is_said_to_stream_none_once_warm():
    """net_toks and whatif name the box's streaming tier, or, where the cache holds every routed
    expert, that nothing is streamed once it is warm."""
    words(answers.net_toks(**net_toks_kwargs()), "(experts streamed from SSD)", absent=("once warm",))
    full = answers.net_toks(**net_toks_kwargs(holds_all=True))
    words(full, "(every routed expert in its cache: none streamed from SSD once warm)", absent=("experts streamed",))
    w = answers.whatif(
        model="toy", hardware="mac", routing="t.npz", cache_gib=200.0, batch_min=2, batch_max=64,
        best_net_tok_s=3.0, best_batch=32, bound_at_best="compute", hit_rate_at_best=1.0, union_at_max=60.0,
        inputs=WITNESSED, link="page-cache", holds_all=True,
    )  # fmt: skip
    words(w, "(every routed expert in its cache: none streamed from the page cache once warm)")


def test_net_toks_names_its_parameters_and_the_seed_correction():
    text = answers.net_toks(**net_toks_kwargs())
    words(
        text,
        "**Answer.**",
        "toy-moe",
        "toy-box",
        "12 GiB",
        "2048-token",
        "zipf:0.7",
        "B = 1…16",
        "**ssd** → **memory**",
        "from B = 16",
        "B = 64",
        "0.02 tok/s",
        "1.2 tokens a minute",
        "seed 000 (the design note",
        "divides only the SSD term by B",
        "3.3 tok/s per agent at B = 8",
        "10× is not reached",
        "projected",
        absent=("synthetic", "GLM"),
    )


def test_net_toks_says_the_routing_priors_range_only_where_one_applies():
    """The routing priors' range at the best batch, in the run's numbers and naming the priors;
    one prior has no "other"; a range that rounds to one value says the routing does not move it;
    no prior, or a non-finite range, says nothing."""
    two = answers.net_toks(
        **net_toks_kwargs(routing_range=(6.25, 14.5), routing_priors=["skew prior", "locality prior"])
    )
    words(two, "No measurement here narrows the routing", "skew prior and locality prior", "the other at its centre",
          "B = 8 gets 6.25–14.5 net tok/s")  # fmt: skip
    one = answers.net_toks(**net_toks_kwargs(routing_range=(2.551, 2.549), routing_priors=["locality prior"]))
    words(one, "locality prior (its 5 % and 95 % ends)", "2.55 net tok/s at every end", absent=("the other",))
    for none in (dict(), dict(routing_range=(float("nan"), 3.0), routing_priors=["skew prior"])):
        assert "narrows the routing" not in answers.net_toks(**net_toks_kwargs(**none))


def test_net_toks_when_4x_is_never_reached_and_all_inputs_witnessed():
    text = answers.net_toks(
        **net_toks_kwargs(batch_at_4x=None, per_agent_at_4x=None, max_multiple=2.2, inputs=WITNESSED)
    )
    words(text, "never reaches 4×", "2.2×", "at B = 90", "nowhere in this range", absent=("projected", "synthetic"))
    one = answers.net_toks(**net_toks_kwargs(bound=["ssd"] * 5, synthetic=["the routing data `h.csv`"]))
    words(one, "every feasible step is **ssd-bound**", "synthetic", "h.csv")


SKEW = dict(
    histogram="mine.csv",
    layers=4,
    pooled_choice="dirichlet",
    layer_winners={"zipf": 3, "dirichlet": 1},
    zipf_s=0.61234,
    zipf_s_range=(0.4, 0.8),
    trace="mine.npz",
    streams=6,
    rho=0.31,
    c=12.0,
    union_ratio=0.9,
    union_measured=45.0,
    union_plugin=50.0,
    batch_max=512,
    union_at_max=200.0,
    ratio_at_max=20.5,
)


@pytest.mark.parametrize(
    ("hist_prov", "trace_prov", "synthetic", "projected"),
    [
        ("witnessed", "witnessed", False, False),
        ("synthetic", "witnessed", True, True),
        ("witnessed", "projected", False, True),
    ],
)
def test_skew_fit_provenance_follows_the_files(hist_prov, trace_prov, synthetic, projected):
    text = answers.skew_fit(**SKEW, histogram_provenance=hist_prov, trace_provenance=trace_prov)
    words(text, "mine.csv", "mine.npz", "**dirichlet**", "zipf in 3", "c = 12", "ρ = 0.31", "B = 512", "20.5×")
    assert ("synthetic" in text) == synthetic
    assert ("projected" in text) == projected


def test_skew_fit_uncorrelated_trace():
    text = answers.skew_fit(
        **{**SKEW, "union_ratio": 1.0, "c": math.inf}, histogram_provenance="witnessed", trace_provenance="witnessed"
    )
    words(text, "no cross-agent correlation", "off (infinite)")


def test_union_curve_regime_map_levers_and_whatif_name_their_inputs():
    u = answers.union_curve(
        experts=64, top_k=4, batch_max=256, probe_batch=32, uniform_union=55.0, zipf_s=0.9, zipf_union=40.0,
        dirichlet_alpha=0.3, dirichlet_union=35.0, histogram="h.csv", histogram_union=45.0, histogram_ratio=2.8,
        histogram_provenance="witnessed", summed_histogram="s.csv", summed_union=50.0, per_layer_union=30.0,
        summed_provenance="witnessed",
    )  # fmt: skip
    words(u, "E = 64", "K = 4", "B = 32", "h.csv", "s.csv", "overstates", "projected", absent=("synthetic",))
    r = answers.regime_map(
        model="toy", routing="zipf:0.8", overlap="sum", cache_policy="LRU", batch_max=512, inputs=WITNESSED,
        boxes={"boxA": {"terms": ["ssd", "compute"], "best": 7.5, "best_batch": 128, "best_cache_gib": 40.0,
                        "cache_gib_max": 80.0, "infeasible_share": 0.25}},
    )  # fmt: skip
    words(r, "toy", "boxA", "ssd and compute", "7.5", "B = 128", "25 %", "`sum`", absent=("projected", "synthetic"))
    lv = answers.levers(
        model="toy", hardware="boxA", contrast_hardware="boxB", routing="r.csv", cache_gib=4.0,
        contrast_cache_gib=99.0, batch_max=64, factors={"boxA": {"L1": 1.5, "L2": 3.0}}, probe_batch=64,
        binds={"boxA": "ssd"}, agents=8, session_product=2.0, session_combined=2.5, cross_user_gain=1.7,
        users_max=16, inputs=MIXED, synthetic=["the routing data `r.csv`"],
    )  # fmt: skip
    words(lv, "boxA", "boxB", "99 GiB", "L2 3×", "8 agents", "at least multiplicatively", "synthetic", "projected")
    w = answers.whatif(
        model="toy", hardware="boxA", routing="t.npz", cache_gib=2.0, batch_min=2, batch_max=64,
        best_net_tok_s=3.0, best_batch=32, bound_at_best="ssd", hit_rate_at_best=0.25, union_at_max=60.0,
        inputs=WITNESSED,
    )  # fmt: skip
    words(w, "toy", "t.npz", "2 GiB", "B = 2…64", "25 %", absent=("projected", "synthetic"))


WITNESS = dict(
    machine="toy-cpu, 4 logical cores",
    read_path="o_direct",
    shape="E = 16 experts, L = 2 layers, K = 2, expert 2 MiB",
    routing="zipf:0.9",
    batch=[2, 4, 32],
    steps=5,
    file_mib=48,
    calibration={"read bandwidth": "1.5 GB/s at the expert size", "memory": "30 GB/s"},
    bound=["ssd", "ssd", "compute"],
    errors={
        "sum": {"coalesced": [0.1, -0.3, 0.05], "uncoalesced": [0.02, 0.04, -0.06]},
        "max": {"coalesced": [0.5, 0.6, 0.7]},
    },
    drift=-0.12,
)


def test_witness_names_its_run_and_calls_projected_only_what_rests_on_unwitnessed_inputs():
    text = answers.witness(
        **WITNESS, inputs={"the live bench": "witnessed", "bw_ssd of the live calibration": "witnessed"}
    )
    words(
        text,
        "**Answer.**",
        "toy-cpu",
        "o_direct",
        "48 MiB",
        "1.5 GB/s",
        "`zipf:0.9`",
        "5 counted steps",
        "B = 2…32",
        "ssd and compute",
        "coalesced median |error| 10.0 %, worst 30.0 %",
        "uncoalesced median |error| 4.0 %, worst 6.0 %",
        "(`max`): coalesced median |error| 60.0 %",
        "-12.0 %",
        "witnessed",
        absent=("projected", "synthetic", "replays", "H200"),
    )
    full = answers.witness(
        **{**WITNESS, "drift": None, "bound": ["ssd"]},
        replay="runs/old.json",
        replay_errors={"coalesced": [0.2, 0.4]},
        gpu={"name": "GPU-X", "date": "2026-01-02", "median_abs_error": {"coalesced": 0.25}, "batch": 64,
             "multiple_measured": 5.0, "multiple_predicted": 6.5},
        inputs={"the live bench": "witnessed", "engine terms of the old calibration": "assumed"},
    )  # fmt: skip
    words(
        full,
        "every step is predicted **ssd-bound**",
        "runs/old.json",
        "coalesced median |error| 30.0 %, worst 40.0 %",
        "GPU-X",
        "B = 64",
        "5× measured against 6.5× predicted",
        "engine terms of the old calibration (not witnessed) are **projected**",
        absent=("synthetic", "moved"),
    )


def test_witness_reports_the_hf_block_run_its_errors_calibration_and_parity():
    hf = {
        "name": "GPU-Y",
        "date": "2026-03-04",
        "block": "Qwen3MoeSparseMoeBlock",
        "median_abs_error": {"uncoalesced": 0.615, "coalesced-grouped_mm": 0.011},
        "calibrated_median_abs_error": {"uncoalesced": 0.067},
        "batch": 128,
        "multiple_measured": 18.4,
        "parity": {"uncoalesced": 0.0, "coalesced-grouped_mm": 0.0044},
    }
    text = answers.witness(**WITNESS, hf_block=hf, inputs={"the live bench": "witnessed", "routing": "assumed"})
    words(
        text,
        "GPU-Y",
        "`Qwen3MoeSparseMoeBlock`",
        "2026-03-04",
        "uncoalesced median |error| 61.5 % (6.7 % with an overhead per expert application from B = 1)",
        "coalesced-grouped_mm median |error| 1.1 %;",
        "at B = 128 coalescing buys 18.4× measured",
        "uncoalesced equal",
        "coalesced-grouped_mm within 0.44 % relative L2",
        "routing (not witnessed) are **projected**",
    )
    # the grouped arm has no calibrated figure, so none is claimed for it
    assert "1.1 % (" not in text
    assert "Qwen3MoeSparseMoeBlock" not in answers.witness(**WITNESS, inputs={"the live bench": "witnessed"})


SPLIT = dict(
    model="toy-moe",
    hardware="toy-node",
    histogram="sum.csv",
    per_layer_histogram="layers.csv",
    streams=12,
    cache_gib=16.0,
    ladder_cache_gib=48.0,
    relabel_draws=300,
    trace_seeds=3,
    trace_layers=9,
    id_imbalance=1.0123,
    seed_id_imbalance=1.022,
    relabel_share=0.4,
    lpt_gains={"hot set": 1.004, "LRU": 1.021},
    witnessed_gain=1.177,
    slowdown=2.0,
    slowdown_cost=1.9,
    weighted_gain=1.3,
    bytes_gain=1.45,
    bound_gain=1.5,
    booster_hit=0.01,
    pair_hit=0.5,
    booster_multiple=4.0,
    plan_multiple=3.0,
    booster_witnessed=6.1,
)


def test_expert_split_names_its_run_and_follows_the_inputs():
    text = answers.expert_split(**SPLIT, inputs=MIXED, synthetic=["`sum.csv`"])
    words(
        text,
        "**Answer.**",
        "toy-moe",
        "toy-node",
        "M = 12",
        "sum.csv",
        "layers.csv",
        "48 GiB",
        "16 GiB",
        "300 random relabelings",
        "40 %",
        "3 sampled traces of 9 layers",
        "1.004–1.021×",
        "1.177×",
        "2× slower",
        "1.3×",
        "1.45×",
        "1.5×",
        "booster (one GB10 machine",
        "seed 003 (a lab report",
        "4× faster",
        "3× by `moeroof plan`",
        "witnessed 6.1×",
        "1.0 %",
        "synthetic",
        "projected",
        absent=("fit-plan",),
    )
    plain = answers.expert_split(
        **{**SPLIT, "plan_multiple": None, "booster_witnessed": None},
        fit_plan={"held": 6, "median_error": 0.12, "covered": 5, "fitted": "engine, wobble"},
        inputs=WITNESSED,
    )
    words(
        plain,
        "6 held-out",
        "12 %",
        "5 inside",
        "(fitting engine, wobble)",
        "(baseline: one booster)",
        absent=("synthetic", "projected", "moeroof plan`"),
    )


LADDER = dict(
    model="toy-moe",
    layers=6,
    seeds=3,
    knobs="dirichlet α=0.5",
    refitted=False,
    calibration=[("pair-a", 0.5, 7.0), ("pair-b", 0.98, 0.3)],
    predictions=[
        {"case": "pair-c", "hit": 0.9, "hit_lo": 0.88, "hit_hi": 0.92, "gib": 1.5, "gib_lo": 1.2, "gib_hi": 1.8}
    ],
    big_cache=(120.0, 0.983, 0.24),
    predictions_file="run/predictions.csv",
)


def test_cache_ladder_names_its_run_the_rows_and_the_cliff():
    cliff = {"case": "box-x", "hit": 0.001, "gib": 28.5, "working_set_gib": 29.0, "cache_gib": 20.0,
             "policies": {"belady": 0.6}}  # fmt: skip
    text = answers.cache_ladder(**LADDER, cliff=cliff, inputs={"points": "witnessed", "knobs": "projected"})
    words(
        text,
        "**Answer.**",
        "toy-moe",
        "seed 003 (a lab report",
        "pair-a (50.0 % hit, 7 GiB/step)",
        "dirichlet α=0.5",
        "stored from the fit",
        "L = 6 layers",
        "over 3 seeds",
        "pair-c 90.0 % hit (88.0 %–92.0 %), 1.5 GiB/step (1.2–1.8)",
        "run/predictions.csv",
        "cliff at box-x",
        "29 GiB",
        "belady 60 %",
        "120 GiB",
        "projected",
        absent=("synthetic",),
    )
    none = answers.cache_ladder(
        **{**LADDER, "refitted": True, "big_cache": None}, cliff=None, inputs={"points": "witnessed"}
    )
    words(none, "refitted in this run", "No predicted row falls off", absent=("projected", "synthetic", "120 GiB"))


def test_cache_ladder_says_rows_at_another_m_hold_no_locality_where_the_general_fit_ran_without_it():
    text = answers.cache_ladder(
        **LADDER, cliff=None, inputs={"points": "witnessed"}, calibration_streams=[8], without_locality=["pair-c"]
    )
    words(text, "At another M than the calibration's 8 (pair-c) these rows hold no per-stream locality",
          "run with locality off", absent=("general fit's with the locality prior",))  # fmt: skip
    words(answers.cache_ladder(**LADDER, cliff=None, inputs={}), "These rows are written to", absent=("locality",))


def test_cache_ladder_answers_the_rows_at_another_m_from_the_general_fit():
    """The withheld rows at another M than the calibration's leave the seed-specific list and are
    said with the general fit's numbers and file, the seed-specific hit rate beside them."""
    other = {"case": "pair-c", "hit": 0.756, "hit_lo": 0.512, "hit_hi": 0.9, "gib": 1.23, "gib_lo": 0.51,
             "gib_hi": 2.47, "old_hit": 0.463}  # fmt: skip
    text = answers.cache_ladder(
        **LADDER, cliff=None, inputs={"points": "witnessed"}, other_m=[other], calibration_streams=[8],
        other_m_file="run/predictions-fit-routing.csv",
    )  # fmt: skip
    words(
        text,
        "At another M than the calibration's 8",
        "no per-stream locality",
        "pair-c 75.6 % hit (51.2 %–90.0 %), 1.23 GiB/step (0.51–2.47)",
        "method fit-routing in `run/predictions.csv`, with its bands in `run/predictions-fit-routing.csv`",
        "the seed-specific knobs' hit rates: pair-c 46.3 %",
        "`run/predictions.csv` holds the answer (method fit_knobs)",
        absent=("pair-c 90.0 % hit", "These rows are written to"),
    )


CAPTURE_SOURCE = {
    "name": "tiny random Qwen3-MoE",
    "note": "",
    "provenance": "witnessed",
    "batch": 4,
    "union_measured": 9.0,
    "union_plugin": 10.0,
    "ratio_layers": (0.85, 0.95),
    "fit_choice": "zipf",
    "zipf_s": 0.7,
    "lru_hit": 0.0,
    "che_hit": 0.5,
    "step_items": 300.0,
    "capacity": 128.0,
}
CAPTURE = dict(
    model="tiny random Qwen3-MoE",
    family="Qwen3-MoE",
    tiny=True,
    seed=7,
    experts=16,
    top_k=2,
    layers=2,
    streams=4,
    decode_steps=7,
    prompts="generated distinct token-id prompts, seed 7",
    cache_share=0.5,
)


def test_capture_answer_names_the_run_and_says_witnessed_of_a_model_nobody_serves():
    histogram_only = {
        **{k: None for k in CAPTURE_SOURCE},
        "name": "Qwen3-30B-A3B GSM8K English",
        "note": "a histogram only",
        "provenance": "witnessed",
        "fit_choice": "dirichlet",
        "zipf_s": 0.95,
    }
    spread = {**CAPTURE_SOURCE, "name": "Mixtral 8x7B", "note": "not a serving batch", "union_measured": 10.5,
              "ratio_layers": (1.0, 1.1), "lru_hit": 0.45, "step_items": 50.0}  # fmt: skip
    text = answers.capture_answer(**CAPTURE, sources=[CAPTURE_SOURCE, spread, histogram_only])
    words(
        text,
        "**Answer.**",
        "witnessed routing of a random-initialised tiny Qwen3-MoE model that nobody serves",
        "E = 16, K = 2, 2 MoE layers, weights from seed 7",
        "4 streams (generated distinct token-id prompts, seed 7)",
        "7 decode steps",
        "at B = 4 a step touches 9 distinct experts per layer against 10 for the independent plug-in",
        "(0.9×, per layer 0.85–0.95×), 10.0 % below independent routing: the streams of a step share experts",
        "**zipf** (Zipf s = 0.7)",
        "an exact LRU cache of 50 % of the (layer, expert) pairs hits 0 % of the requests, against 50 %",
        "LRU's cliff: a step asks for 300 pairs, more than the 128 it holds",
        "not how a trained model routes",
        "**Mixtral 8x7B** (not a serving batch): at B = 4",
        "5.0 % above independent routing",
        "hits 45 % of the requests",
        "**Qwen3-30B-A3B GSM8K English** (a histogram only): the pooled AIC chooses **dirichlet** (Zipf s = 0.95)",
        "every input is **witnessed**".capitalize(),
        absent=("projected", "synthetic", "Skipped"),
    )
    assert text.count("LRU's cliff") == 1  # Mixtral: 45 % is not far below 50 %, and 50 pairs fit
    assert (
        "**Qwen3-30B-A3B GSM8K English** (a histogram only): the pooled AIC chooses **dirichlet** (Zipf s = 0.95)."
        in text
    )


def test_capture_answer_on_a_real_checkpoint_with_skipped_captures():
    as_independent = {**CAPTURE_SOURCE, "union_measured": 9.9, "ratio_layers": (0.99, 0.99), "lru_hit": 0.48}
    text = answers.capture_answer(
        **{**CAPTURE, "tiny": False, "model": "Qwen3-30B-A3B"},
        sources=[as_independent],
        skipped={"Mixtral 8x7B": "/x/decode_routing.csv is absent"},
    )
    words(
        text,
        "witnessed routing of the Qwen3-MoE checkpoint `Qwen3-30B-A3B`",
        "as independent routing would",
        "Skipped Mixtral 8x7B: /x/decode_routing.csv is absent.",
        "witnessed",
        absent=("nobody serves", "random", "×, per layer", "cliff", "projected", "synthetic"),
    )
    with pytest.raises(ValueError):
        answers.capture_answer(**CAPTURE, sources=[])
    # an unlabelled capture is not served as witnessed
    assert "projected" in answers.capture_answer(**CAPTURE, sources=[{**CAPTURE_SOURCE, "provenance": "unknown"}])


def test_answers_name_the_link_a_box_streams_over():
    """The step model's ``ssd`` term is what the box streams experts over: an H200 (``pcie``)
    answer never says SSD, except where it quotes seed 000's own SSD term."""
    pcie = answers.net_toks(**net_toks_kwargs(link="pcie"))
    words(pcie, "experts streamed over the PCIe link", "**pcie** → **memory**", "streaming term (here the PCIe link")
    assert "SSD" not in pcie.replace("seed 000's SSD term", ""), pcie
    ssd = answers.net_toks(**net_toks_kwargs())
    words(ssd, "experts streamed from SSD", "**ssd** → **memory**", absent=("PCIe",))
    r = answers.regime_map(
        model="toy", routing="zipf:0.8", overlap="max", cache_policy="LRU", batch_max=64, inputs=WITNESSED,
        boxes={"h200": {"terms": ["ssd", "compute"], "best": 7.5, "best_batch": 16, "best_cache_gib": 40.0,
                        "cache_gib_max": 80.0, "infeasible_share": 0.0, "link": "host-link"}},
    )  # fmt: skip
    words(r, "host-link and compute bind", "where the host link binds", absent=("SSD", "ssd"))
    lv = answers.levers(
        model="toy", hardware="h200", contrast_hardware="desk", routing="r.csv", cache_gib=4.0,
        contrast_cache_gib=9.0, batch_max=64, factors={"h200": {"L2": 3.0}, "desk": {"L2": 2.0}}, probe_batch=64,
        binds={"h200": "ssd", "desk": "ssd"}, agents=8, session_product=2.0, session_combined=2.5,
        cross_user_gain=1.7, users_max=16, inputs=WITNESSED, links={"h200": "pcie"},
    )  # fmt: skip
    words(
        lv,
        "**h200** (experts streamed over the PCIe link; pcie-bound",
        "**desk** (experts streamed from SSD; ssd-bound",
    )
    # a box whose cache holds every routed expert streams none once warm: the words say so, not the link
    full = answers.levers(
        model="toy", hardware="h200", contrast_hardware="desk", routing="r.csv", cache_gib=4.0,
        contrast_cache_gib=900.0, batch_max=64, factors={"h200": {"L2": 3.0}, "desk": {"L2": 1.1}}, probe_batch=64,
        binds={"h200": "ssd", "desk": "compute"}, agents=8, session_product=2.0, session_combined=2.5,
        cross_user_gain=1.7, users_max=16, inputs=WITNESSED, links={"h200": "pcie"}, holds_all=["desk"],
    )  # fmt: skip
    words(
        full,
        "**h200** (experts streamed over the PCIe link; pcie-bound",
        "**desk** (every routed expert in its cache: none streamed from SSD once warm; compute-bound",
        absent=("**desk** (experts streamed",),
    )
    w = answers.whatif(
        model="toy", hardware="mac", routing="t.npz", cache_gib=2.0, batch_min=2, batch_max=64,
        best_net_tok_s=3.0, best_batch=32, bound_at_best="ssd", hit_rate_at_best=0.25, union_at_max=60.0,
        inputs=WITNESSED, link="page-cache",
    )  # fmt: skip
    words(w, "experts streamed from the page cache", "(page-cache-bound", absent=("SSD", "ssd-bound"))


def test_validation_names_the_rows_fit_plans_coverage_calibrated_on():
    """The coverage sentence counts and names the calibration rows it is given (batch sizes and
    cache sizes), not a count written into the words."""

    def said(cal) -> str:
        return answers.validation(cases=[], rows=[], skipped={}, groups=["step"], plan_coverage=(0.875, 40, 8, cal))

    four = said([(8, 20.0, 1), (8, 20.0, 2), (8, 80.0, 2), (8, 40.0, 2)])
    assert "calibrated on 4 of seed 003's rows (M = 8; 20, 40 and 80 GiB), 88 % of 40 predicted rows" in four
    two = said([(1, 10.0, 1), (4, 10.0, 1)])
    assert "calibrated on 2 of seed 003's rows (M = 1 and 4; 10 GiB)" in two
