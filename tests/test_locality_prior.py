"""The locality prior (moeroof.studies.locality_prior): the random-effects pool against a hand
computation, the stream check, fit-routing with the popularity given, and the study on the real
captures (read in place from ../shared/data/external; skipped where the folder is absent)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from moeroof.core.paths import EXTERNAL_DIR
from moeroof.data.points import Point
from moeroof.fit import routing as fit_routing
from moeroof.fit.routing import RoutingKnobs
from moeroof.models.locality import HOT_SET_CAP, HOT_SET_FLOOR, RHO_FLOOR
from moeroof.studies import locality_prior as lp


def _fit(name: str, rho: list[float], c_per_expert: list[float], experts: int = 64, top_k: int = 4) -> lp.SourceFit:
    return lp.SourceFit(
        name=name,
        family="zipf",
        knobs=RoutingKnobs(family="zipf", skew=0.8),
        rho_draws=tuple(rho),
        c_per_expert_draws=tuple(c_per_expert),
        held={},
        experts=experts,
        top_k=top_k,
    )


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _log_h(c_per_expert: float, experts: int = 64, top_k: int = 4) -> float:
    """log of the hot set in picks, worked by hand: W = (c + 1)/(c/E + 1), h = W/K."""
    c = c_per_expert * experts
    return math.log((c + 1) / (c_per_expert + 1) / top_k)


def test_pool_is_the_random_effects_formula_worked_by_hand():
    a = _fit("a", [0.1, 0.3], [1.0, 4.0])
    b = _fit("b", [0.5, 0.5], [16.0, 16.0])
    prior = lp.pool([a, b], draws=9)
    # source means on the logit / log scales, their between variance (n − 1 = 1 dof) and the
    # mean within variance (numpy's var: the draws' own, ddof 0)
    xa = [(_logit(0.1) + _logit(0.3)) / 2, (_log_h(1.0) + _log_h(4.0)) / 2]
    xb = [0.0, _log_h(16.0)]
    wa = [((_logit(0.1) - _logit(0.3)) / 2) ** 2, ((_log_h(4.0) - _log_h(1.0)) / 2) ** 2]
    for j in range(2):
        m = (xa[j] + xb[j]) / 2
        between = (xa[j] - xb[j]) ** 2 / 2
        scale = math.sqrt(between * 1.5 + wa[j] / 2)
        assert prior.mean[j] == pytest.approx(m, rel=1e-12)
        assert prior.scale[j] == pytest.approx(scale, rel=1e-12)
    assert prior.dof == 1
    r_mid, c_mid = prior.median
    assert r_mid == pytest.approx(1 / (1 + math.exp(-prior.mean[0])), rel=1e-12)
    assert c_mid == pytest.approx(math.exp(prior.mean[1]), rel=1e-12)
    # the draws are the t quantiles at u = (j + 1/2)/9, paired by locality strength: ρ at u
    # (rising), the hot set at 1 − u (falling), so the first draw is the least local stream
    z = student_t.ppf((np.arange(9) + 0.5) / 9, 1)
    want_rho = 1 / (1 + np.exp(-(prior.mean[0] + z * prior.scale[0])))
    assert np.allclose(prior.rho, want_rho, rtol=1e-12)
    want_h = np.clip(np.exp(prior.mean[1] - z * prior.scale[1]), HOT_SET_FLOOR, HOT_SET_CAP)
    assert np.allclose(prior.hot_set, want_h, rtol=1e-9)
    assert np.all(np.diff(prior.rho) > 0) and np.all(np.diff(prior.hot_set) <= 0)
    assert lp.pool([a, b], draws=9) == prior, "the same fits give the same prior"
    q = prior.quantiles((0.05, 0.5, 0.95))
    assert q["rho"][0] < q["rho"][1] < q["rho"][2] and q["rho"][1] == pytest.approx(r_mid)


def test_one_source_has_its_own_spread_plus_the_held_between_source_scale_and_no_dof():
    """One source cannot estimate how far another model lies from it: its bootstrap variance
    (two draws: half their distance, squared) plus the stated τ₀², on each scale."""
    prior = lp.pool([_fit("a", [0.2, 0.4], [2.0, 8.0])])
    assert prior.dof == 0
    within = (abs(_logit(0.2) - _logit(0.4)) / 2) ** 2
    tau = lp.SINGLE_SOURCE_BETWEEN_SCALE
    assert prior.scale[0] == pytest.approx(math.sqrt(within + tau[0] ** 2), rel=1e-12)
    assert prior.scale[1] == pytest.approx(math.sqrt(((_log_h(8.0) - _log_h(2.0)) / 2) ** 2 + tau[1] ** 2), rel=1e-12)


def test_locality_off_stays_off_through_the_pool():
    prior = lp.pool([_fit("a", [0.0, 0.0], [math.inf, math.inf]), _fit("b", [0.0, 0.0], [math.inf, math.inf])])
    # off is a hot set of every expert, E/K = 16 picks of this model: off again for it
    assert prior.hot_set == pytest.approx([16.0] * len(prior.hot_set))
    knobs = prior.knobs(RoutingKnobs(family="zipf", skew=0.8), 64, 4)
    assert all(math.isinf(k.c) for k in knobs) and all(k.rho == pytest.approx(RHO_FLOOR) for k in knobs)


def test_the_stream_check_refuses_rows_less_alike_than_independent_tokens():
    base = RoutingKnobs(family="zipf", skew=0.8)
    # independent tokens of a 64-expert top-4 layer at Zipf 0.8 share more than 1 % of a token's experts
    rows = lp.SourceRows("x", "x", "test", 64, 4, 2, (Point(kind="overlap", batch=1, value=0.01),))
    ok, why = lp.stream_check(rows, base, seeds=(0,))
    assert not ok and "not one stream's tokens" in why
    rows = lp.SourceRows("y", "y", "test", 64, 4, 2, (Point(kind="overlap", batch=1, value=0.6),))
    assert lp.stream_check(rows, base, seeds=(0,))[0]


def test_fit_routing_with_the_popularity_given_recovers_locality_from_one_stream():
    """With the popularity given, one stream's cache rows identify ρ and c: simulated truth."""
    truth = RoutingKnobs(family="zipf", skew=0.8, rho=0.35, c=0.5 * 64, history_tokens=64)
    probe = [Point(kind="overlap", batch=1, value=None)] + [
        Point(kind="hit_rate", batch=1, capacity_experts=float(c), policy="lru", scope="layer", value=None)
        for c in (4, 8, 16, 32)
    ]
    measured = fit_routing.simulate_points(truth, probe, 64, 4, 4, seeds=[777, 778]).mean(axis=0)
    points = [Point(**{**p.__dict__, "value": float(v)}) for p, v in zip(probe, measured)]
    fitted, held = fit_routing.identifiable(points, hold=("skew",))
    assert "locality" in fitted and "rho" in fitted and "skew" not in fitted and "skew" not in held
    assert "locality" not in fit_routing.identifiable(points)[0], "without the popularity one stream cannot tell c"
    fit = fit_routing.fit_routing(
        points, 64, 4, 4, seeds=(0, 1), bootstrap=4, popularity=RoutingKnobs(family="zipf", skew=0.8)
    )
    assert fit.family == "zipf" and fit.knobs["skew"]["value"] == 0.8 and not fit.knobs["skew"]["fitted"]
    assert "given" in fit.knobs["skew"]["held"]
    assert abs(fit.knobs["rho"]["value"] - 0.35) < 0.1
    c = fit.knobs["locality_c"]["value"]
    assert 0.1 * 64 < c < 3 * 64, f"per-stream locality c = {c} far from the truth 32"


needs_captures = pytest.mark.skipif(
    not (EXTERNAL_DIR / lp.SOURCES["mixtral"]["trace"]).is_file(),
    reason="the external captures (../shared/data/external) are not beside this clone",
)


@needs_captures
def test_study_on_the_real_captures():
    st = lp.study(seeds=(0,), bootstrap=4)
    # the Qwen1.5 batch rows change hands between steps (not logged): less alike than independent
    assert set(st.left_out) == {"qwen15"} and "not one stream's tokens" in st.left_out["qwen15"]
    assert set(st.in_prior) == {"mixtral", "qwen3-moe-trace"}
    fits = {f.name: f for f in st.fits}
    # Qwen3's stream is the stickier one (42.7 % of a token's experts are its last token's)
    assert np.mean(fits["qwen3-moe-trace"].rho_draws) > np.mean(fits["mixtral"].rho_draws) > 0.05
    rho_mid, _ = st.prior.median
    lo, hi = sorted(np.mean(fits[n].rho_draws) for n in st.in_prior)
    assert lo < rho_mid < hi, "the prior's centre lies between its two sources"
    assert st.prior.dof == 1 and "docs/sources.md" in st.prior.provenance
    # every source is predicted, and only from the others: Qwen3 from Mixtral alone
    summary = {r["source"]: r for r in st.summary()}
    assert set(summary) == {"mixtral", "qwen15", "qwen3-moe-trace"}
    rows = [r for r in st.rows if r.source == "qwen3-moe-trace"]
    assert [round(r.measured, 3) for r in rows] == [0.427, 0.424, 0.647, 0.810, 0.918]
    # each stream predicted from the other's locality beats locality off, the suite's old default
    for name in st.in_prior:
        assert summary[name]["mean_abs_error_points"] < summary[name]["mean_abs_error_off_points"], name


@needs_captures
def test_the_committed_prior_is_what_the_study_gives_today():
    """data/fits/locality-prior.json against a fresh study at the script's settings."""
    import json

    from moeroof.data.locality import read_locality_prior

    committed = read_locality_prior()
    st = lp.study()
    rho, h = st.prior.median
    assert committed.rho == pytest.approx(rho, rel=1e-6) and committed.hot_set == pytest.approx(h, rel=1e-6)
    assert committed.sources == st.prior.sources
    raw = json.loads(committed.path.read_text(encoding="utf-8"))
    fresh = {r["source"]: r["mean_abs_error_points"] for r in st.summary()}
    assert {r["source"]: r["mean_abs_error_points"] for r in raw["held_out"]} == pytest.approx(fresh, rel=1e-6)


def test_the_committed_prior_reads_and_bad_files_name_their_field(tmp_path):
    from moeroof.data.io import InputError
    from moeroof.data.locality import read_locality_prior

    prior = read_locality_prior()
    assert 0 < prior.rho < 1 and prior.rho_range[0] <= prior.rho <= prior.rho_range[1]
    assert "locality prior" in prior.label() and "assumed" in prior.label()
    bad = tmp_path / "p.json"
    bad.write_text('{"rho": 1.5}', encoding="utf-8")
    with pytest.raises(InputError, match="rho"):
        read_locality_prior(bad)
    bad.write_text('{"rho": 0.2, "hot_set": 4.5, "quantiles": {}}', encoding="utf-8")
    with pytest.raises(InputError, match="quantiles"):
        read_locality_prior(bad)
    with pytest.raises(InputError, match="no such file"):
        read_locality_prior(tmp_path / "none.json")


def test_bands_with_the_prior_cover_one_stream_truths_the_prior_allows():
    """Two truths drawn from the prior, calibrated on M = 8 rows: their one-stream rows inside
    the bands with the prior, more of them than with locality off."""
    from moeroof.data.locality import read_locality_prior
    from moeroof.models.locality import Locality

    cc = lp.coverage_check(Locality.from_summary(read_locality_prior()), truths=2)
    assert cc.rows == 6 and len(cc.truths) == 2
    assert cc.inside_with_prior >= 5 / 6 and cc.inside_with_prior > cc.inside_without
    per = [np.mean(t["with_prior"]) for t in cc.truths]
    assert min(per) <= cc.interval().low <= cc.inside_with_prior <= cc.interval().high <= max(per)
