"""One stream's locality on top of a routing (moeroof.models.local_routing): what plan's cache runs on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from moeroof.core.errors import ParameterError
from moeroof.core.units import GiB
from moeroof.data.presets import load_hardware, load_model
from moeroof.models import local_routing as lr
from moeroof.models.locality import Locality
from moeroof.models.plan import RoutingProbabilities, Workload, plan, routing_from_spec
from moeroof.models.routing import histogram_from_trace, inclusion_probabilities, zipf_log_weights

MODEL = load_model("qwen3-30b-a3b")
BOX = load_hardware("nvme-gen4")


def _cache(experts_per_layer: float) -> Workload:
    return Workload(cache_bytes=experts_per_layer * MODEL.moe_layers * MODEL.expert_bytes)


def _histogram(rows: int = 3) -> RoutingProbabilities:
    rng = np.random.default_rng(5)
    pi = np.stack(
        [inclusion_probabilities(zipf_log_weights(MODEL.experts, 0.9)[rng.permutation(MODEL.experts)], 8, log=True)]
        * rows
    )
    return RoutingProbabilities(pi, "a histogram", "witnessed")


def test_trace_steps_keep_stream_steps_bounded():
    assert [lr.trace_steps(b) for b in (1, 32)] == [lr.TRACE_STEPS] * 2
    assert lr.trace_steps(64) == math.ceil(lr.TRACE_STREAM_STEPS / 64)
    assert lr.trace_steps(10_000) == lr.TRACE_MIN_STEPS
    steps = [lr.trace_steps(b) for b in range(1, 600)]
    assert all(a >= b for a, b in zip(steps, steps[1:]))  # never more steps for more streams


def test_a_trace_of_few_streams_is_long_enough_to_warm_its_cache():
    """Given the layers' π, one stream of a many-expert model gets a trace whose first half is the
    steady-state warm-up (expert_cache.warmup_steps), never fewer steps than without π, never more
    for more streams, and at most TRACE_MAX_STEPS."""
    from moeroof.models.expert_cache import warmup_steps

    pi = routing_from_spec("zipf:0.8", load_model("glm-5-nvfp4")).pi
    steps = [lr.trace_steps(b, pi) for b in range(1, 80)]
    assert all(a >= b for a, b in zip(steps, steps[1:]))
    assert all(s >= lr.trace_steps(b) for b, s in zip(range(1, 80), steps))
    assert steps[0] >= min(lr.TRACE_MAX_STEPS, 2 * warmup_steps(pi, 1)) > lr.TRACE_STEPS
    assert lr.trace_steps(1, np.full((2, 4096), 8 / 4096)) == lr.TRACE_MAX_STEPS
    # lengthened, a trace never holds more stream-steps than the cap (nor fewer steps than unlengthened):
    # experts so rare that no B warms them within the cap give each B the same requests
    rare = np.full((2, 4096), 16 / 4096)
    rare[:, ::2] = 1e-9  # half the experts so rare that no warm-up within the caps meets them
    for b in (1, 2, 8, 16, 32, 64, 200):
        n = lr.trace_steps(b, rare)
        assert n <= max(math.ceil(lr.TRACE_MAX_STREAM_STEPS / b), lr.trace_steps(b))
        assert n >= lr.trace_steps(b)
    assert lr.trace_steps(32, rare) * 32 == lr.TRACE_MAX_STREAM_STEPS == lr.trace_steps(8, rare) * 8


def test_a_cache_that_holds_every_expert_misses_nothing_in_steady_state():
    """A cache of all of a layer's experts, one stream, the locality prior: once warm, LRU never
    evicts, so the steady-state hit rate is 1 up to the first touches of experts so rare the
    warm-up had not met them (a 96-step trace left 4.7 % of them in the counted half)."""
    base = routing_from_spec("zipf:0.8", MODEL)
    w = _cache(MODEL.experts)
    local = lr.with_locality(MODEL, base, Locality.committed(), workload=w)
    p = plan(MODEL, load_hardware("gb10"), w, local, [1, 8])  # a box whose RAM holds them all
    assert p.cache_hit_rate[0] > 0.99 and p.cache_hit_rate[1] > 0.99


def test_histogram_trace_keeps_the_histograms_marginals():
    """ρ = 0, no hot sets: the trace's own frequencies are the histogram's π (Plackett–Luce
    weights inverted from π), within sampling error — an independent check of the inversion."""
    base = _histogram(rows=1)
    r = lr.LocalRouting(MODEL, base, 0.0, math.inf, "test")(32)
    counts = histogram_from_trace(r.trace, MODEL.experts).astype(float)
    freq = counts / (r.trace.shape[0] * 32)
    expected = np.broadcast_to(base.pi[0], freq.shape)
    sd = np.sqrt(expected * (1 - expected) / (r.trace.shape[0] * 32))
    assert np.all(np.abs(freq - expected) < 5 * sd + 1e-9)
    assert np.array_equal(r.pi, base.pi) and r.trace_key.startswith("local:")


def test_no_locality_agrees_with_independent_tokens():
    """ρ = 0 and c = inf on a uniform routing: the trace's hit rate is what independent tokens give,
    c/E for one stream under LRU (each expert equally likely, nothing carried over)."""
    base = routing_from_spec("uniform", MODEL)
    w = _cache(32)
    p = plan(MODEL, BOX, w, lr.LocalRouting(MODEL, base, 0.0, math.inf, "none"), [1])
    assert p.cache_hit_rate[0] == pytest.approx(32 / MODEL.experts, abs=0.05)


def test_the_prior_makes_one_stream_hit_more_than_independent_tokens():
    base = routing_from_spec("zipf:0.8", MODEL)
    w = _cache(16)
    loc = Locality.committed()
    local = lr.with_locality(MODEL, base, loc, workload=w)
    assert isinstance(local, lr.LocalRouting)
    p_local = plan(MODEL, BOX, w, local, [1])
    p_indep = plan(MODEL, BOX, w, base, [1])
    assert p_local.cache_hit_rate[0] > p_indep.cache_hit_rate[0] + 0.05
    assert f"ρ = {loc.centre[0]:.3g}" in p_local.routing and any("locality prior" in n for n in p_local.notes)


def test_a_row_does_not_depend_on_the_grid():
    local = lr.with_locality(MODEL, routing_from_spec("zipf:0.8", MODEL), Locality.committed(), workload=_cache(16))
    alone = plan(MODEL, BOX, _cache(16), local, [8])
    together = plan(MODEL, BOX, _cache(16), local, [1, 8, 64])
    assert together.net_tok_s[1] == alone.net_tok_s[0]
    assert together.cache_hit_rate[1] == alone.cache_hit_rate[0]


def test_locality_only_where_the_step_can_see_it():
    base = routing_from_spec("uniform", MODEL)
    loc = Locality.committed()
    assert lr.with_locality(MODEL, base, loc, workload=Workload()) is base  # no cache
    assert (
        lr.with_locality(MODEL, base, loc, workload=_cache(8).__class__(cache_bytes=GiB, cache_policy="static")) is base
    )
    assert lr.with_locality(MODEL, base, None) is base
    assert isinstance(lr.with_locality(MODEL, base, loc, workload=Workload(page_cache=True)), lr.LocalRouting)
    traced = RoutingProbabilities(base.pi, "t", "witnessed", trace=np.zeros((4, 1, 1, 8), np.int32), trace_key="k")
    assert lr.with_locality(MODEL, traced, loc, workload=_cache(8)) is traced  # a trace keeps its own


def test_locality_parameter():
    assert lr.locality_parameter("independent") is None
    assert isinstance(lr.locality_parameter(" Prior "), Locality)
    with pytest.raises(ParameterError, match="locality"):
        lr.locality_parameter("sticky")


def test_plan_cli_takes_the_prior_unless_independent(capsys):
    import json

    from moeroof.cli.app import main

    argv = ["plan", "--model", "qwen3-30b-a3b", "--hardware", "nvme-gen4", "--batch", "1", "--cache-gib", "8"]
    assert main([*argv, "--json"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert main([*argv, "--independent", "--json"]) == 0
    off = json.loads(capsys.readouterr().out)
    rho = Locality.committed().centre[0]
    assert f"ρ = {rho:.3g}" in on["routing"] and "ρ" not in off["routing"]
    assert any("locality prior" in n for n in on["notes"]) and not any("locality prior" in n for n in off["notes"])
    assert on["cache_hit_rate"][0] > off["cache_hit_rate"][0]
    band = on["locality_band"]
    assert band["cache_hit_rate_low"][0] <= on["cache_hit_rate"][0] <= band["cache_hit_rate_high"][0]
    assert any("5–95 % range of the locality prior" in n for n in on["notes"]) and "locality_band" not in off


def test_the_band_spans_the_prior_from_nearly_independent_tokens_to_its_most_local_stream():
    """plan's locality band: the least local end (ρ at 5 %, the hot set at 95 %: off for this
    model) hits as independent tokens do, within the traces' noise; the most local end hits more
    than the centre, which lies between; each end is a plan on its own traces."""
    base = routing_from_spec("zipf:0.8", MODEL)
    w = _cache(16)
    loc = Locality.committed()
    band = lr.locality_band(MODEL, BOX, w, base, [1], loc)
    least, most = band["ends"]
    assert least["end"] == "least local" and math.isinf(least["c_per_expert"]), least
    indep = plan(MODEL, BOX, w, base, [1]).cache_hit_rate[0]
    assert least["cache_hit_rate"][0] == pytest.approx(indep, abs=0.04)
    centre = plan(MODEL, BOX, w, lr.with_locality(MODEL, base, loc, workload=w), [1]).cache_hit_rate[0]
    assert band["cache_hit_rate_low"][0] <= centre <= band["cache_hit_rate_high"][0]
    assert most["cache_hit_rate"][0] > centre + 0.05
    assert band["net_tok_s_low"][0] <= band["net_tok_s_high"][0]
    assert "5–95 %" in band["note"] and "B = 1: hit" in band["note"]
    # a batch that does not fit in RAM gets no number at either end (KV of 4,096 agents × 4,096 tokens)
    big = lr.locality_band(MODEL, BOX, w, base, [1, 4096], loc)
    assert big["cache_hit_rate_low"][1] is None and big["net_tok_s_high"][1] is None
    assert all(e["net_tok_s"][1] is None for e in big["ends"]) and "B = 4096" not in big["note"]
    assert big["net_tok_s_low"][0] == pytest.approx(band["net_tok_s_low"][0])
    # no band where the step cannot see locality
    assert lr.locality_band(MODEL, BOX, Workload(), base, [1], loc) is None
    assert lr.locality_band(MODEL, BOX, w, base, [1], None) is None
