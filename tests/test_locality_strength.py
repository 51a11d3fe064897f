"""A model's locality strength (moeroof.studies.locality_strength): the committed file against a
fresh study, the strength read off a grid against a hand case, the prior moved along its pairing
against its own quantiles, and the held-out check that gives the model its own centre."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moeroof.data.io import InputError
from moeroof.data.locality import read_locality_strengths
from moeroof.models.locality import Locality
from moeroof.studies import locality_strength as ls


@pytest.fixture(scope="module")
def study():
    return ls.study()


def test_the_committed_strengths_are_what_the_study_gives_today(study):
    committed = read_locality_strengths()
    fresh = study.model_strengths()
    assert set(committed) == set(fresh)
    for model, known in committed.items():
        assert {s.name: s.strength for s in known.sources} == pytest.approx(
            {name: v["strength"] for name, v in fresh[model].items()}, abs=1e-12
        )
        assert all(s.provenance == fresh[model][s.name]["provenance"] for s in known.sources)
        assert known.shape == tuple(
            study.model_shapes()[model][k] for k in ("experts", "top_k", "moe_layers", "expert_bytes")
        )


def test_each_source_is_met_at_its_strength_and_held_out_beats_the_prior_centre(study):
    """At its own strength a source's rows are met within a few points; predicted from the
    model's other source, it is nearer the measurement than the prior's centre is."""
    for f in study.fits:
        own = np.array([np.interp(f.strength, ls.STRENGTHS, row) for row in f.hits])
        measured = np.array(f.measured)
        assert np.max(np.abs(own - measured)) < 0.05, f.name
        assert f.held_out is not None
        held = np.mean(np.abs(np.array(f.held_out) - measured))
        centre = np.mean(np.abs(np.array(f.at_centre) - measured))
        assert held < centre / 2, (f.name, held, centre)


def test_the_strength_is_the_least_squares_point_of_a_linear_grid():
    # hit rate = strength on the grid: a row measured at 0.3 lies at 0.3; two rows at 0.3 and
    # 0.4 of a second curve twice as steep meet in least squares where 2u - 0.4 and u - 0.3 balance
    grid = np.array(ls.STRENGTHS)
    assert ls.strength_of([0.3], grid[None, :]) == pytest.approx(0.3)
    hits = np.stack([grid, 2 * grid])
    # minimise (u - 0.3)² + (2u - 0.4)²: u = (0.3 + 0.8) / 5
    assert ls.strength_of([0.3, 0.4], hits) == pytest.approx(0.22, abs=1e-3)
    # a row the prior cannot move adds nothing: the other row decides
    flat = np.stack([grid, np.zeros_like(grid)])
    assert ls.strength_of([0.6, 0.0], flat) == pytest.approx(0.6)


@pytest.mark.parametrize("u", [0.05, 0.14, 0.5, 0.8])
def test_a_prior_moved_to_a_strength_is_centred_on_its_own_paired_quantiles(u):
    prior = Locality.committed()
    moved = prior.at_strength(u)
    rho, h = prior.paired([u])
    assert moved.centre == pytest.approx((float(rho[0]), float(h[0])), rel=1e-9)
    assert moved.scale == prior.scale and moved.dof == prior.dof
    # its own bands' ends move with it: a weaker centre, a weaker most local end
    if u < 0.5:
        assert moved.paired([0.95])[0][0] < prior.paired([0.95])[0][0]
    with pytest.raises(ValueError, match="strength"):
        prior.at_strength(1.0)


def test_a_model_without_published_streams_keeps_the_prior_and_a_held_out_source_is_left_out():
    from dataclasses import replace

    from moeroof.data.presets import load_model

    prior = Locality.committed()
    assert Locality.committed_for(load_model("qwen3-30b-a3b")) == prior
    model = load_model("glm-5.2")
    known = read_locality_strengths()["glm-5.2"]
    names = tuple(s.name for s in known.sources)
    assert Locality.committed_for(model, without=names) == prior
    mean = np.mean([s.strength for s in known.sources])
    glm = Locality.committed_for(model)
    assert glm.mean == pytest.approx(prior.at_strength(mean).mean)
    assert f"{mean:.2f}" in glm.label and all(n in glm.label for n in names)
    one = Locality.committed_for(model, without=names[:1])
    assert one.mean == pytest.approx(prior.at_strength(known.sources[1].strength).mean)
    assert names[0] not in one.label
    # a TOML that kept the preset's name but changed the model is another model: the prior's own centre
    for field, value in (("experts", 128), ("moe_layers", 27), ("expert_bytes", 3.5e6), ("top_k", 4)):
        assert Locality.committed_for(replace(model, **{field: value})) == prior, field


def test_a_zero_fit_plan_of_the_model_says_where_its_locality_is_centred(capsys):
    from moeroof.cli import main

    rc = main(["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--cache-gib", "40"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "centred at strength" in out and "glm-5.2's published single streams" in out


def test_bad_strength_files_name_their_field(tmp_path):
    bad = tmp_path / "s.json"
    shape = {"experts": 8, "top_k": 2, "moe_layers": 4, "expert_bytes": 1e6}
    good = {"models": {"m": {"shape": shape, "sources": {"a": {"strength": 0.2, "provenance": "x"}}}}}
    cases = {
        '{"models": []}': "models",
        '{"models": {"m": {"sources": {}}}}': "models.m.sources",
        json.dumps({"models": {"m": {"sources": {"a": {"strength": 0.2, "provenance": "x"}}}}}): "models.m.shape",
        json.dumps({"models": {"m": {**good["models"]["m"], "shape": {**shape, "top_k": 0}}}}): "shape.top_k",
        json.dumps(
            {"models": {"m": {"shape": shape, "sources": {"a": {"strength": 1.5, "provenance": "x"}}}}}
        ): "strength",
        json.dumps({"models": {"m": {"shape": shape, "sources": {"a": {"strength": 0.2}}}}}): "provenance",
    }
    for text, field in cases.items():
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(InputError, match=field):
            read_locality_strengths(bad)
    bad.write_text(json.dumps(good), encoding="utf-8")
    read = read_locality_strengths(bad)["m"]
    assert read.sources[0].strength == 0.2 and read.shape == (8, 2, 4, 1e6)
