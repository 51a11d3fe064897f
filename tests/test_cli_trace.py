"""``moeroof trace`` (a routing trace sampled from knobs) and ``moeroof cache --streams``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moeroof import cachesim as cache
from moeroof.cli import main
from moeroof.data.io import read_trace
from moeroof.models.routing import Dirichlet, Zipf, consecutive_overlap, sample_trace


def run_json(capsys, argv: list[str]) -> dict:
    rc = main(argv + ["--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def run_error(capsys, argv: list[str], flag: str) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert flag in err, err
    assert "Traceback" not in err
    return err


SMALL = ["--streams", "4", "--steps", "30", "--experts", "32", "--top-k", "4", "--layers", "3"]


def test_trace_writes_a_readable_trace_with_its_knobs(capsys, tmp_path):
    out = tmp_path / "t.npz"
    argv = ["trace", "--family", "dirichlet:0.4", "--rho", "0.35", *SMALL, "--seed", "5", "-o", str(out)]
    rep = run_json(capsys, argv)
    t = read_trace(out)
    assert t.topk.shape == (30, 4, 3, 4) and rep["shape"] == [30, 4, 3, 4]
    assert (t.experts, t.top_k, t.layer_ids) == (32, 4, (0, 1, 2))
    assert t.meta["model"] == "synthetic" and t.meta["provenance"] == "projected"
    knobs = t.meta["knobs"]
    assert knobs["family"] == "dirichlet" and knobs["skew"] == 0.4 and knobs["rho"] == 0.35
    assert (knobs["streams"], knobs["steps"], knobs["seed"], knobs["prompt_tokens"]) == (4, 30, 5, 0)
    assert knobs["locality_c"] is None and knobs["step_context_c"] is None
    assert "--family dirichlet:0.4" in t.meta["source"] and "--rho 0.35" in t.meta["source"]
    # the library draw with the same knobs and seed, on every layer but the first MoE layer,
    # which has no locality (moeroof.models.locality, Depth)
    expected = sample_trace(Dirichlet(32, 4, 0.4), 30, 4, 3, np.random.default_rng(5), rho=np.array([0.0, 0.35, 0.35]))
    np.testing.assert_array_equal(t.topk, expected)
    np.testing.assert_allclose(rep["consecutive_overlap"], consecutive_overlap(expected))


def test_trace_defaults_and_same_seed_same_bytes(capsys, tmp_path):
    a, b, c = tmp_path / "a.npz", tmp_path / "b.npz", tmp_path / "c.npz"
    argv = ["trace", "--family", "zipf:0.9", "--streams", "2", "--steps", "5"]
    run_json(capsys, argv + ["-o", str(a)])
    run_json(capsys, argv + ["-o", str(b)])
    run_json(capsys, argv + ["--seed", "1", "-o", str(c)])
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    t = read_trace(a)
    assert t.topk.shape == (5, 2, 8, 8) and t.experts == 256  # defaults: 256 experts, top-8, 8 layers


def test_trace_refuses_to_overwrite_without_force(capsys, tmp_path):
    out = tmp_path / "t.npz"
    argv = ["trace", "--family", "uniform", *SMALL, "-o", str(out)]
    run_json(capsys, argv)
    before = out.read_bytes()
    run_error(capsys, argv + ["--seed", "3"], "-o")
    assert out.read_bytes() == before
    run_json(capsys, argv + ["--seed", "3", "--force"])
    assert out.read_bytes() != before


def test_trace_profile_locality_and_prompt(capsys, tmp_path):
    out = tmp_path / "t.npz"
    rep = run_json(
        capsys,
        [
            "trace",
            "--family",
            "dirichlet:0.4",
            "--rho-profile",
            "0.05,0.6",
            "--locality",
            "2",
            "--prompt-tokens",
            "16",
            "--streams",
            "4",
            "--steps",
            "200",
            "--experts",
            "64",
            "--top-k",
            "4",
            "-o",
            str(out),
        ],
    )
    t = read_trace(out)
    assert t.topk.shape == (216, 4, 2, 4)  # --layers from the profile; the prompt comes first
    assert t.meta["prompt_steps"] == 16 and t.meta["knobs"]["rho"] == [0.05, 0.6]
    assert t.meta["knobs"]["locality_c"] == 2.0
    expected = sample_trace(
        Dirichlet(64, 4, 0.4),
        200,
        4,
        2,
        np.random.default_rng(0),
        rho=np.array([0.05, 0.6]),
        c=2.0,
        groups=4,
        scope="trace",
        prompt_tokens=16,
    )
    np.testing.assert_array_equal(t.topk, expected)
    overlap = rep["consecutive_overlap"]
    assert overlap[1] > overlap[0]  # ρ 0.6 against 0.05 (the hot sets of C = 2 share much by chance)


def test_trace_locality_with_step_context(capsys, tmp_path):
    """--locality C and --step-context CS together: each stream's lasting hot set and the step's
    shared context (sample_trace's c and c_step); --step-context alone is c_step only."""
    both, alone = tmp_path / "both.npz", tmp_path / "alone.npz"
    common = ["trace", "--family", "zipf:0.8", "--rho", "0.2", *SMALL, "--seed", "4"]
    run_json(capsys, common + ["--locality", "20", "--step-context", "30", "-o", str(both)])
    run_json(capsys, common + ["--step-context", "30", "-o", str(alone)])
    t = read_trace(both)
    assert t.meta["knobs"]["locality_c"] == 20.0 and t.meta["knobs"]["step_context_c"] == 30.0
    assert "--locality 20 --step-context 30" in t.meta["source"]
    model = Zipf(32, 4, 0.8)
    # the first MoE layer has no locality (ρ 0, no hot set); the step context is every layer's
    rho, c = np.array([0.0, 0.2, 0.2]), np.array([np.inf, 20.0, 20.0])
    expected = sample_trace(
        model, 30, 4, 3, np.random.default_rng(4), rho=rho, c=c, c_step=30.0, groups=4, scope="trace"
    )
    np.testing.assert_array_equal(t.topk, expected)
    expected_alone = sample_trace(model, 30, 4, 3, np.random.default_rng(4), rho=rho, c_step=30.0)
    np.testing.assert_array_equal(read_trace(alone).topk, expected_alone)
    assert read_trace(alone).meta["knobs"]["locality_c"] is None


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--family", "zipf"], "--family"),
        (["--family", "dirichlet:0"], "--family"),
        (["--family", "pareto:1"], "--family"),
        (["--family", "uniform", "--rho", "1.5"], "--rho"),
        (["--family", "uniform", "--rho", "nan"], "--rho"),
        (["--family", "uniform", "--rho-profile", "0.1,0.2"], "--rho-profile"),  # 3 layers given
        (["--family", "uniform", "--rho-profile", "0.1,,0.2"], "--rho-profile"),
        (["--family", "uniform", "--rho", "0.1", "--rho-profile", "0.1,0.2,0.3"], "--rho-profile"),
        (["--family", "uniform", "--locality", "0"], "--locality"),
        (["--family", "uniform", "--step-context", "0"], "--step-context"),
        (["--family", "uniform", "--locality", "1", "--step-context", "-2"], "--step-context"),
        (["--family", "uniform", "--prompt-tokens", "-1"], "--prompt-tokens"),
        (["--family", "uniform", "--top-k", "40"], "--top-k"),
        (["--family", "uniform", "--seed", "x"], "--seed"),
    ],
)
def test_trace_bad_flags(capsys, tmp_path, extra, flag):
    argv = ["trace", "--streams", "2", "--steps", "3", "--experts", "32", "--top-k", "4", "--layers", "3"]
    # later flags win in argparse, so an override of --top-k follows the defaults above
    run_error(capsys, argv + extra + ["-o", str(tmp_path / "t.npz")], flag)
    assert not (tmp_path / "t.npz").exists()


def test_trace_bad_output_suffix_and_count(capsys, tmp_path):
    run_error(capsys, ["trace", "--family", "uniform", *SMALL, "-o", str(tmp_path / "t.csv")], "-o")
    run_error(
        capsys,
        ["trace", "--family", "uniform", "--streams", "0", "--steps", "3", "-o", str(tmp_path / "t.npz")],
        "--streams",
    )
    big = ["trace", "--family", "uniform", "--streams", "100000", "--steps", "100000", "-o", str(tmp_path / "t.npz")]
    run_error(capsys, big, "--steps")


def test_trace_is_a_subcommand(capsys):
    from moeroof.cli.app import COMMANDS

    assert "trace" in [c.__name__.rsplit(".", 1)[1] for c in COMMANDS]
    assert main(["trace", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: moeroof trace ")


# ----------------------------------------------------------------------------- cache --streams


@pytest.fixture
def sampled(capsys, tmp_path):
    out = tmp_path / "t.npz"
    argv = ["trace", "--family", "dirichlet:0.4", "--rho", "0.5", "--locality", "3", "--streams", "6"]
    run_json(capsys, argv + ["--steps", "60", "--experts", "64", "--top-k", "4", "--layers", "4", "-o", str(out)])
    return out


@pytest.mark.parametrize("policy", ["lru", "belady"])
def test_cache_streams_replays_the_chosen_streams(capsys, sampled, policy):
    rep = run_json(
        capsys,
        ["cache", str(sampled), "--policy", policy, "--capacity-experts", "60", "--warmup", "5", "--streams", "0,3"],
    )
    t = read_trace(sampled)
    requests = cache.requests_from_trace(np.ascontiguousarray(t.topk[:, [0, 3]]), t.experts)
    res = cache.simulate(requests, 60.0, policy=policy, capacity_unit="experts", warmup_steps=5)
    assert (rep["hits"], rep["misses"], rep["requests"]) == (res.hits, res.misses, res.requests)
    assert rep["hit_rate"] == pytest.approx(res.hit_rate)
    assert rep["per_step"]["misses"] == list(res.misses_per_step)
    assert rep["stream_ids"] == [0, 3] and rep["streams"] == 2 and rep["trace_streams"] == 6
    everything = run_json(
        capsys, ["cache", str(sampled), "--policy", policy, "--capacity-experts", "60", "--warmup", "5"]
    )
    assert everything["stream_ids"] == list(range(6)) and everything["streams"] == 6
    assert everything["requests"] > rep["requests"]


@pytest.mark.parametrize("value", ["6", "0,0", "0,,1", "a", "-1", ""])
def test_cache_bad_streams(capsys, sampled, value):
    err = run_error(
        capsys, ["cache", str(sampled), "--policy", "lru", "--capacity-experts", "60", "--streams", value], "--streams"
    )
    if value == "6":
        assert "6 streams" in err


def test_trace_without_locality_flags_takes_the_locality_prior(capsys, tmp_path):
    """No --rho / --locality: the centre of the committed locality prior, said in the notes; the
    same draw as sample_trace with those knobs; --independent draws independent tokens."""
    from moeroof.data.locality import read_locality_prior

    prior = read_locality_prior()
    out = tmp_path / "prior.npz"
    rep = run_json(capsys, ["trace", "--family", "zipf:0.8", *SMALL, "--seed", "2", "-o", str(out)])
    knobs = rep["knobs"]
    # the prior's hot set of h·K experts for this model (32 experts, top-4), worked by hand:
    # W = (c + 1)/(c/E + 1) solved for c
    w = prior.hot_set * 4
    c = (w - 1) / (1 - w / 32)
    assert knobs["rho"] == prior.rho and knobs["locality_c"] == pytest.approx(c)
    assert "locality prior" in knobs["locality_prior"] and any("locality prior" in n for n in rep["notes"])
    # on every layer but the first MoE layer, which has no locality (moeroof.models.locality, Depth)
    rho, c = np.array([0.0, prior.rho, prior.rho]), np.array([np.inf, knobs["locality_c"], knobs["locality_c"]])
    expected = sample_trace(Zipf(32, 4, 0.8), 30, 4, 3, np.random.default_rng(2), rho=rho, c=c, groups=4)
    assert np.array_equal(read_trace(out).topk, expected), "the prior's knobs, drawn as sample_trace draws them"
    assert f"--rho {prior.rho:g}" in rep["source"], "the source command line reproduces the draw"
    flat = tmp_path / "flat.npz"
    ind = run_json(capsys, ["trace", "--family", "zipf:0.8", *SMALL, "--seed", "2", "--independent", "-o", str(flat)])
    assert ind["knobs"]["rho"] == 0.0 and ind["knobs"]["locality_c"] is None and "locality_prior" not in ind["knobs"]
    # real decode's stickiness: consecutive tokens share more experts than independent ones
    assert np.mean(rep["consecutive_overlap"]) > np.mean(ind["consecutive_overlap"])
    run_error(
        capsys,
        ["trace", "--family", "zipf:0.8", *SMALL, "--independent", "--rho", "0.2", "-o", str(tmp_path / "x.npz")],
        "--independent",
    )


def test_family_prior_is_the_skew_prior_dirichlet_and_says_so(capsys, tmp_path):
    """``--family prior`` draws the same trace as ``--family dirichlet:α`` at the committed prior's α for
    this E (the coarse prior below 64 experts), names it, and reproduces itself by name."""
    from moeroof.data.skew_prior import committed_skew_prior

    for experts in ("32", "128"):
        small = ["--streams", "3", "--steps", "20", "--experts", experts, "--top-k", "4", "--layers", "2", "--rho", "0"]
        alpha = committed_skew_prior().for_experts(int(experts)).alpha
        a, b = tmp_path / f"a{experts}.npz", tmp_path / f"b{experts}.npz"
        rep = run_json(capsys, ["trace", "--family", "prior", *small, "-o", str(a)])
        run_json(capsys, ["trace", "--family", f"dirichlet:{alpha!r}", *small, "-o", str(b)])
        assert rep["knobs"]["family"] == "dirichlet" and rep["knobs"]["skew"] == alpha
        assert "skew-prior.json" in rep["knobs"]["skew_prior"] and any("skew prior" in n for n in rep["notes"])
        np.testing.assert_array_equal(read_trace(a).topk, read_trace(b).topk)
        assert "--family prior" in rep["source"]
