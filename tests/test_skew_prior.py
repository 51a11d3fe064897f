"""The skew prior: its pool by hand, its hottest-share inversion, the committed file against a fresh
study, its reader's errors, and the routing plan and fit-plan start from."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from moeroof.core.paths import EXTERNAL_DIR
from moeroof.data.io import InputError
from moeroof.data.presets import load_model
from moeroof.data.skew_prior import FINE_GRAINED_EXPERTS, committed_skew_prior, read_skew_prior
from moeroof.fit import plan as fit_plan
from moeroof.models import plan as plan_mod
from moeroof.models.local_routing import LocalRouting, spec_skew
from moeroof.studies import skew_prior

HAVE_QWEN3 = (EXTERNAL_DIR / skew_prior.QWEN3_DIR / "meta.json").is_file()


def _unit(model: str, alpha: float) -> skew_prior.SkewUnit:
    return skew_prior.SkewUnit(model, "w", 128, 8, alpha, "by hand", "test")


def test_the_pool_by_hand():
    """Two models, three and one units: the centre is the mean of the models' mean log α; the
    within-model variance the first model's sample variance; the between-model variance the model
    means' variance less the within share each mean carries; the range a t with units − models dof."""
    a = [0.3, 0.5, 0.8]
    units = [_unit("m1", x) for x in a] + [_unit("m2", 1.2)]
    p = skew_prior.pool(units)
    la = np.log(a)
    m1, m2 = la.mean(), math.log(1.2)
    within = la.var(ddof=1)
    between = max(np.var([m1, m2], ddof=1) - within * np.mean([1 / 3, 1]), 0.0)
    centre_var = (between + within * np.mean([1 / 3, 1])) / 2
    scale = math.sqrt(between + within + centre_var)
    assert p.alpha == pytest.approx(math.exp((m1 + m2) / 2))
    assert p.dof == 2 and p.units == 4 and p.models == ("m1", "m2")
    assert p.alpha_high == pytest.approx(math.exp((m1 + m2) / 2 + scale * stats.t.ppf(0.95, 2)))
    assert p.alpha_low * p.alpha_high == pytest.approx(p.alpha**2)


def test_one_unit_has_no_spread():
    p = skew_prior.pool([_unit("m", 0.7)])
    assert p.alpha == pytest.approx(0.7) and p.scale == 0.0 and p.alpha_low == p.alpha_high


def test_the_hottest_share_falls_with_alpha_and_inverts():
    shares = [float(skew_prior.hottest_share(a, 256, 8)) for a in (0.2, 0.6, 2.0, 20.0)]
    assert all(x > y for x, y in zip(shares, shares[1:]))
    assert shares[-1] > 1 / 256  # never below uniform's 1/E
    alpha = skew_prior.alpha_from_hottest_share(shares[1], 256, 8)
    assert alpha == pytest.approx(0.6, rel=1e-3)


def test_the_committed_prior_reads_and_names_its_sources():
    prior = committed_skew_prior()
    assert prior.alpha_range[0] < prior.alpha < prior.alpha_range[1]
    assert "deepseek-v3" in prior.sources and "skew-prior.json" in prior.label()
    coarse = prior.for_experts(8)
    assert coarse.alpha > 5 * prior.alpha and coarse.sources != prior.sources
    assert prior.for_experts(FINE_GRAINED_EXPERTS) is prior


@pytest.mark.skipif(not HAVE_QWEN3, reason="the Qwen3 capture is not beside this clone (../shared/data/external)")
def test_the_committed_file_is_a_fresh_study():
    fresh = skew_prior.summary_record(skew_prior.study())
    committed = json.loads(committed_skew_prior().path.read_text(encoding="utf-8"))
    assert committed["alpha"] == pytest.approx(fresh["alpha"], rel=1e-9)
    assert committed["quantiles"]["alpha"] == pytest.approx(fresh["quantiles"]["alpha"], rel=1e-9)
    assert committed["held_out"]["deepseek-v3"]["prior_alpha"] == pytest.approx(
        fresh["held_out"]["deepseek-v3"]["prior_alpha"], rel=1e-9
    )


@pytest.mark.parametrize(
    "doc, field",
    [
        ({}, "alpha"),
        ({"alpha": 0.6}, "quantiles.alpha"),
        ({"alpha": 0.6, "quantiles": {"alpha": [0.7, 0.8, 0.9]}}, "quantiles.alpha"),
        ({"alpha": 0.6, "quantiles": {"alpha": [0.2, 0.6, 2]}}, "sources"),
        ({"alpha": 0.6, "quantiles": {"alpha": [0.2, 0.6, 2]}, "sources": ["x"]}, "provenance"),
    ],
)
def test_a_bad_prior_file_names_its_field(tmp_path, doc, field):
    p = tmp_path / "skew.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        read_skew_prior(p)


def test_plan_and_fit_plan_start_from_the_skew_prior():
    # fit-plan's parser holds its default equal to fit_plan.DEFAULT_ROUTING (tests/test_fit_plan.py)
    assert plan_mod.DEFAULT_ROUTING == fit_plan.DEFAULT_ROUTING == "prior"
    model = load_model("deepseek-v3")
    r = plan_mod.routing_from_spec("prior", model)
    assert spec_skew(r) == ("dirichlet", committed_skew_prior().alpha)
    assert (
        plan_mod.skew_prior_of(r) is not None
        and plan_mod.skew_prior_of(plan_mod.routing_from_spec("zipf:0.8", model)) is None
    )
    np.testing.assert_allclose(r.pi.sum(axis=1), model.top_k, rtol=1e-9)
    # the layers draw their own popularity: which experts are hottest differs between them
    assert len({int(np.argmax(row)) for row in r.pi}) > 1


def test_a_large_alpha_is_uniform_and_the_trace_samples_its_family():
    model = load_model("qwen3-30b-a3b")
    flat = plan_mod.routing_from_spec("dirichlet:1e9", model)
    np.testing.assert_allclose(flat.pi, model.top_k / model.experts, rtol=1e-3)
    skewed = plan_mod.routing_from_spec("dirichlet:0.3", model)
    local = LocalRouting(model, skewed, 0.0, math.inf, "test")
    one = local(4)
    # ρ = 0, no hot set: the trace's marginals are the Dirichlet popularity's (the same draws)
    counts = np.asarray(one.pi)
    assert local.skew == ("dirichlet", 0.3)
    assert np.corrcoef(counts.ravel(), np.asarray(skewed.pi).ravel())[0, 1] > 0.8


def test_the_skew_knob_maps_to_alpha_and_back():
    for alpha in (0.2, 0.6, 3.0):
        assert fit_plan.skew_parameter("dirichlet", fit_plan.skew_knob("dirichlet", alpha)) == pytest.approx(alpha)
    assert fit_plan.skew_parameter("zipf", 0.8) == 0.8
    assert fit_plan.skew_parameter("dirichlet", 0.0) == 1e12  # the knob's 0 is uniform


def test_held_out_alphas_come_from_other_models_only():
    """Qwen3 held out leaves DeepSeek-V3's one unit (its α found again from the published share);
    a coarse model's is the other coarse unit's; a model of neither group has none."""
    alpha, what = skew_prior.held_out_alpha("qwen3-30b-a3b")
    assert alpha == pytest.approx(skew_prior.deepseek_unit().alpha, rel=1e-6) and "deepseek-v3" in what
    doc = json.loads(committed_skew_prior().path.read_text(encoding="utf-8"))
    coarse = {u["model"]: u["alpha"] for u in doc["coarse"]["units"]}
    assert skew_prior.held_out_alpha("mixtral")[0] == pytest.approx(coarse["qwen15"])
    assert skew_prior.held_out_alpha("qwen15")[0] == pytest.approx(coarse["mixtral"])
    assert skew_prior.held_out_alpha("no-such-model") is None


@pytest.mark.skipif(not HAVE_QWEN3, reason="the captures are not beside this clone (../shared/data/external)")
def test_zero_fit_rows_predict_each_source_from_nothing_of_its_model():
    """Each pooled source from the locality prior of the other and the skew prior without its model
    (a small study: one seed, two bootstrap draws)."""
    from moeroof.studies import locality_prior

    st = locality_prior.study(sources=("mixtral", "qwen3-moe-trace"), seeds=(0,), bootstrap=2)
    pairs = skew_prior.zero_fit_rows(st)
    assert {r.source for r, _ in pairs} == {"mixtral", "qwen3-moe-trace"}
    for r, what in pairs:
        other = "qwen3-moe-trace" if r.source == "mixtral" else "mixtral"
        assert what.startswith(f"nothing of the model: the locality prior of {other};") and "histogram" not in what
    qwen3 = [r for r, _ in pairs if r.source == "qwen3-moe-trace" and r.kind == "hit_rate"]
    assert np.mean([abs(r.error_points) for r in qwen3]) < 8.0 and all(r.inside for r in qwen3)


def test_a_fit_result_routes_in_its_skew_family():
    """plan --fit: a Dirichlet skew knob s is α = 1/s²; a result written before the family was
    recorded is Zipf; with stickiness the trace samples the same family and α."""
    model = load_model("qwen3-30b-a3b")
    r = fit_plan.routing_with_fit(model, {"skew": 0.5, "skew_family": "dirichlet", "routing_spec": "prior"})
    assert spec_skew(r) == ("dirichlet", pytest.approx(4.0))
    old = fit_plan.routing_with_fit(model, {"skew": 0.9, "routing_spec": "zipf:0.8"})
    assert spec_skew(old) == ("zipf", 0.9)
    local = fit_plan.routing_with_fit(model, {"skew": 0.5, "skew_family": "dirichlet", "rho": 0.3})
    assert isinstance(local, LocalRouting) and local.skew == ("dirichlet", pytest.approx(4.0)) and local.rho == 0.3
    held = fit_plan.routing_with_fit(model, {"routing_spec": "prior", "rho": 0.3})
    assert local.skew != held.skew and held.skew == ("dirichlet", committed_skew_prior().alpha)


def test_read_fit_keeps_the_skew_family(tmp_path):
    from moeroof.data.fit_result import read_fit

    doc = {"model": "m", "hardware": "h", "knobs": {"skew": {"value": 0.5, "fitted": True, "family": "dirichlet"}}}
    p = tmp_path / "fit.json"
    p.write_text(json.dumps(doc))
    assert read_fit(p)["skew_family"] == "dirichlet"
    doc["knobs"]["skew"]["family"] = "pareto"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"knobs\.skew\.family"):
        read_fit(p)
