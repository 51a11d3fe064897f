"""``moeroof cache`` and ``moeroof mrc`` on the embedded trace, and their error paths (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import csvout  # noqa: I001  (tests/csvout.py: CSV output past its run record)
from moeroof import cachesim as cache
from moeroof.cli import main
from moeroof.core.paths import DATA_DIR
from moeroof.data.io import read_trace, write_histogram, write_trace

TRACE = DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz"  # E=128, K=8, 48 layers, 96 steps
CACHE_KEYS = {
    "requests",
    "hits",
    "misses",
    "hit_rate",
    "warmup_steps",
    "bytes_streamed_per_step",
    "unit",
    "policy",
    "capacity_experts",
    "scope",
    "per_step",
}


def run_json(capsys, argv):
    rc = main(argv + ["--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return csvout.strip_run(json.loads(out))


def run_error(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def requests():
    t = read_trace(TRACE)
    return cache.requests_from_trace(t.topk, t.experts)


@pytest.mark.parametrize("policy", cache.POLICIES)
def test_cache_json_contract(capsys, requests, policy):
    rep = run_json(capsys, ["cache", str(TRACE), "--policy", policy, "--capacity-experts", "3000", "--warmup", "8"])
    assert CACHE_KEYS <= set(rep)
    assert rep["policy"] == policy and rep["capacity_experts"] == 3000 and rep["scope"] == "global"
    assert rep["unit"] == "experts" and rep["warmup_steps"] == 8
    assert rep["hits"] + rep["misses"] == rep["requests"] == int((requests.step >= 8).sum())
    assert rep["hit_rate"] == pytest.approx(rep["hits"] / rep["requests"])
    assert len(rep["per_step"]["hits"]) == len(rep["per_step"]["misses"]) == 96
    assert sum(rep["per_step"]["hits"][8:]) == rep["hits"]
    assert rep["bytes_streamed_per_step"] == pytest.approx(np.mean(rep["per_step"]["misses"][8:]))
    want = cache.simulate(requests, 3000, policy=policy, warmup_steps=8)
    assert rep["hits"] == want.hits
    if policy == "static":
        assert rep["oracle"] and any("oracle" in n for n in rep["notes"])


@pytest.mark.parametrize("policy", cache.POLICIES)
def test_cache_a_capacity_of_2_to_the_63_experts_holds_everything(capsys, policy):
    # arc once gave hit rate 0.0 here (its integer capacity overflowed), every other ~0.98
    big = run_json(capsys, ["cache", str(TRACE), "--policy", policy, "--capacity-experts", str(2**63)])
    full = run_json(capsys, ["cache", str(TRACE), "--policy", policy, "--capacity-experts", str(48 * 128)])
    assert big["capacity_experts"] == 2**63
    assert big["hits"] == full["hits"] and big["hit_rate"] > 0.9


def test_cache_in_gib_streams_bytes(capsys, requests):
    eb = 9 * 2**20
    rep = run_json(
        capsys,
        ["cache", str(TRACE), "--policy", "lru", "--capacity-gib", "20", "--expert-bytes", str(eb), "--scope", "layer"],
    )
    assert rep["unit"] == "bytes" and rep["capacity_experts"] == int(20 * 2**30 // eb)
    assert rep["bytes_streamed_per_step"] == pytest.approx(eb * np.mean(rep["per_step"]["misses"]))
    same = cache.simulate(requests, rep["capacity_experts"] // 48 * 48, scope="layer")
    assert rep["hits"] == same.hits  # equal sizes: bytes and experts capacities agree


def test_static_from_a_histogram(capsys, tmp_path, requests):
    counts = cache.request_histogram(requests).reshape(48, 128)
    path = write_histogram(tmp_path / "h.csv", counts, tokens=96, experts=128, top_k=128, model="m", source="test")
    rep = run_json(
        capsys, ["cache", str(TRACE), "--policy", "static", "--capacity-experts", "500", "--histogram", str(path)]
    )
    assert not rep["oracle"]
    assert rep["hits"] == cache.simulate(requests, 500, policy="static").hits


def test_mrc_exact_and_sampled(capsys, requests):
    rep = run_json(capsys, ["mrc", str(TRACE)])
    cap, hit = cache.lru_hit_curve(requests)
    assert rep["capacity_experts"] == cap.tolist()
    assert rep["hit_rate"] == pytest.approx(hit.tolist())
    assert len(rep["che_hit_rate"]) == len(cap)
    c = 4000
    assert rep["hit_rate"][c] == pytest.approx(cache.simulate(requests, c).hit_rate)
    est = run_json(capsys, ["mrc", str(TRACE), "--sample-rate", "0.5"])
    assert est["method"] == "shards" and est["sample_rate"] == 0.5
    assert len(est["capacity_experts"]) == len(est["hit_rate"])


def test_text_output(capsys):
    assert main(["cache", str(TRACE), "--policy", "belady", "--capacity-experts", "100"]) == 0
    assert "hit rate" in capsys.readouterr().out
    assert main(["mrc", str(TRACE)]) == 0
    assert "capacity (experts in all layers)" in capsys.readouterr().out


def bad_trace(tmp_path, topk, meta=None):
    path = tmp_path / "bad.npz"
    np.savez(path, topk=topk, meta=np.array(json.dumps(meta or {"experts": 8, "top_k": 2})))
    return str(path)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--policy", "lru"], "exactly one of --capacity-experts"),
        (["--policy", "lru", "--capacity-experts", "10", "--capacity-gib", "1"], "exactly one"),
        (["--policy", "lru", "--capacity-gib", "1"], "--expert-bytes"),
        (["--policy", "lru", "--capacity-experts", "-3"], "--capacity-experts"),
        (["--policy", "lru", "--capacity-experts", "10", "--warmup", "96"], "--warmup"),
        (["--policy", "lru", "--capacity-experts", "10", "--histogram", "x.csv"], "--histogram"),
        (["--policy", "lru", "--capacity-gib", "1", "--expert-bytes", "0"], "--expert-bytes"),
    ],
)
def test_cache_flag_errors(capsys, argv, match):
    assert match in run_error(capsys, ["cache", str(TRACE)] + argv)


def test_bad_traces(capsys, tmp_path):
    ids = np.zeros((3, 2, 1, 2), dtype=np.int64)
    ids[..., 1] = 1
    ids[1, 0, 0, 1] = 8  # id >= E
    err = run_error(capsys, ["cache", bad_trace(tmp_path, ids), "--policy", "lru", "--capacity-experts", "2"])
    assert "topk[1,0,0,1]" in err and "expert id 8" in err
    err = run_error(capsys, ["mrc", bad_trace(tmp_path, np.zeros((3, 2, 2), dtype=np.int64))])
    assert "topk" in err and "4 dims" in err
    err = run_error(capsys, ["mrc", bad_trace(tmp_path, np.zeros((3, 2, 1, 2), dtype=float))])
    assert "integer dtype" in err
    err = run_error(capsys, ["mrc", str(tmp_path / "missing.npz")])
    assert "no such file" in err
    err = run_error(capsys, ["mrc", str(TRACE), "--sample-rate", "2"])
    assert "--sample-rate" in err
    pad = np.full((2, 1, 1, 2), -1)
    path = write_trace(tmp_path / "pad.npz", pad, {"experts": 4, "top_k": 2})
    assert "all padding" in run_error(capsys, ["mrc", str(path)])
    hist = tmp_path / "h.csv"
    hist.write_text("layer,expert,count\n")
    assert "histogram" in run_error(capsys, ["mrc", str(hist)])


def test_cli_subprocess_exit_status():
    proc = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", "cache", str(TRACE), "--policy", "nope", "--capacity-experts", "3"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_mrc_layer_scope_is_the_per_layer_simulation(capsys, requests):
    rep = run_json(capsys, ["mrc", str(TRACE), "--scope", "layer"])
    assert rep["scope"] == "layer" and rep["capacity_unit"] == "experts in all layers"
    # one meaning of capacity_experts everywhere: the whole cache (48 layers × C per layer)
    assert rep["capacity_experts_per_layer"] == list(range(129)) and rep["sample_rate"] is None
    assert rep["capacity_experts"] == [48 * c for c in range(129)]
    assert rep["hit_rate_stderr"] is None and rep["requests"] == len(requests)
    for c in (1, 8, 32, 100):
        assert rep["hit_rate"][c] == cache.simulate(requests, c * 48, policy="lru", scope="layer").hit_rate
        # the same number cache reports for the same --capacity-experts
        same = run_json(
            capsys, ["cache", str(TRACE), "--policy", "lru", "--scope", "layer", "--capacity-experts", str(48 * c)]
        )
        assert same["capacity_experts"] == rep["capacity_experts"][c] and same["capacity_experts_per_layer"] == c
    assert rep["che_hit_rate"][0] == 0 and rep["che_hit_rate"][-1] == pytest.approx(1.0)
    assert main(["mrc", str(TRACE), "--scope", "layer", "--format", "csv"]) == 0
    head = csvout.data_text(capsys.readouterr().out).splitlines()[0]
    assert head == "capacity_experts,capacity_experts_per_layer,hit_rate,che_hit_rate"
    assert main(["mrc", str(TRACE), "--scope", "layer"]) == 0
    assert "per layer" in capsys.readouterr().out


def test_cache_says_when_a_per_layer_cache_holds_nothing(capsys):
    rep = run_json(capsys, ["cache", str(TRACE), "--policy", "lru", "--scope", "layer", "--capacity-experts", "4"])
    assert rep["capacity_experts"] == 4 and rep["capacity_experts_per_layer"] == 0
    assert any("0 per layer: nothing can be cached" in n for n in rep["notes"])


def test_mrc_slices_state_the_error(capsys):
    rep = run_json(capsys, ["mrc", str(TRACE), "--sample-rate", "0.5", "--slices", "3"])
    assert rep["scope"] == "global" and rep["capacity_unit"] == "experts in all layers" and rep["slices"] == 3
    n = len(rep["capacity_experts"])
    assert len(rep["hit_rate_stderr"]) == len(rep["hit_rate_lower"]) == len(rep["hit_rate_upper"]) == n
    assert all(lo <= h <= hi for lo, h, hi in zip(rep["hit_rate_lower"], rep["hit_rate"], rep["hit_rate_upper"]))
    assert any("error stated" in note for note in rep["notes"])
    assert main(["mrc", str(TRACE), "--sample-rate", "0.5", "--slices", "3", "--format", "csv"]) == 0
    head = csvout.data_text(capsys.readouterr().out).splitlines()[0]
    assert head.split(",")[3:] == ["hit_rate_stderr", "hit_rate_lower", "hit_rate_upper"]
    assert main(["mrc", str(TRACE), "--sample-rate", "0.5", "--slices", "3"]) == 0
    assert "± stderr" in capsys.readouterr().out
    one = run_json(capsys, ["mrc", str(TRACE), "--sample-rate", "0.5", "--slices", "1"])
    plain = run_json(capsys, ["mrc", str(TRACE), "--sample-rate", "0.5"])
    assert one["hit_rate"] == plain["hit_rate"] and one["che_hit_rate"] == plain["che_hit_rate"]
    assert one["hit_rate_stderr"] == [None] * len(one["hit_rate"])  # one slice: no spread to state


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--scope", "layer", "--sample-rate", "0.5"], "--sample-rate applies to --scope global"),
        (["--scope", "layer", "--slices", "2"], "--slices"),
        (["--workers", "2"], "need --sample-rate"),
        (["--slices", "2"], "need --sample-rate"),
        (["--sample-rate", "0.5", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "not both"),
        (["--sample-rate", "0.5", "--slices", "0"], "--slices"),
        (["--scope", "layer", "--workers", "0"], "--workers"),
    ],
)
def test_mrc_shard_flag_errors(capsys, argv, match):
    assert match in run_error(capsys, ["mrc", str(TRACE), *argv])


def _bad_ids(kind: str) -> np.ndarray:
    """A (6, 3, 2, 2) trace over 8 experts with one bad id of ``kind``."""
    rng = np.random.default_rng(7)
    topk = np.argsort(rng.random((6, 3, 2, 8)), axis=-1)[..., :2].astype(np.int64)
    if kind == "range":
        topk[4, 2, 1, 1] = 8
    elif kind == "partial":
        topk[2, 1, 0, 1] = -1
    elif kind == "duplicate":
        topk[3, 0, 1] = [5, 5]
    return topk


BAD_ID_COMMANDS = [
    *(["cache", "--policy", p, "--capacity-experts", "4"] for p in cache.POLICIES),
    ["cache", "--policy", "lru", "--capacity-experts", "4", "--scope", "layer", "--streams", "0"],
    ["cache", "--policy", "belady", "--capacity-gib", "1", "--expert-bytes", "1e8", "--warmup", "1"],
    ["mrc"],
    ["mrc", "--lookup", "request", "--che", "all"],
    ["mrc", "--sample-rate", "0.5"],
    ["mrc", "--scope", "layer"],
    ["mrc", "--sample-rate", "0.5", "--slices", "2"],
    ["union", "--batch", "1,2"],
]


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
@pytest.mark.parametrize("kind", ["range", "partial", "duplicate"])
def test_a_bad_id_errors_through_every_command(capsys, tmp_path, kind, suffix):
    # cache and mrc read the trace without read_trace's pass over its ids and check them in the
    # compiled pass that builds the requests: every command still refuses the trace, in
    # read_trace's words (file, topk[s,t,l,k], reason)
    topk = _bad_ids(kind)
    meta = {"experts": 8, "top_k": 2}
    path = tmp_path / f"bad{suffix}"
    if suffix == ".npy":
        np.save(path, topk)
        (tmp_path / "bad.json").write_text(json.dumps(meta))
    else:
        np.savez(path, topk=topk, meta=np.array(json.dumps(meta)))
    with pytest.raises(Exception) as ei:
        read_trace(path)
    want = str(ei.value)
    assert "topk[" in want
    # the one-process paths of cache and mrc read it without the id pass: theirs finds the id
    from argparse import Namespace

    from moeroof.cli.inputs import read_trace_arg

    assert not read_trace_arg(str(path), Namespace(), lazy=True, check_ids=False).ids_checked
    for argv in BAD_ID_COMMANDS:
        err = run_error(capsys, [argv[0], str(path), *argv[1:]])
        assert err == f"error: {want}\n", argv


def test_mrc_che_grid_and_all(capsys, requests):
    # the embedded trace's curve has thousands of capacities: Che is solved on a grid and
    # interpolated, or at every capacity with --che all (then exactly che_hit_curve)
    grid = run_json(capsys, ["mrc", str(TRACE)])
    every = run_json(capsys, ["mrc", str(TRACE), "--che", "all"])
    cap = np.array(every["capacity_experts"])
    assert cap.size > 1000 and grid["capacity_experts"] == every["capacity_experts"]
    assert grid["hit_rate"] == every["hit_rate"]
    want = cache.che_hit_curve(cache.request_histogram(requests), cap)
    np.testing.assert_allclose(every["che_hit_rate"], want, rtol=0, atol=1e-15)
    g = np.array(grid["che_hit_rate"])
    assert np.max(np.abs(g - want)) < 1e-3
    np.testing.assert_allclose(g[:257], want[:257], rtol=1e-9, atol=0)  # solved, not interpolated, up to 256
    assert any("log-spaced" in note for note in grid["notes"])
    assert any("every capacity" in note for note in every["notes"])


def test_commands_agree_on_npy_and_npz(capsys, tmp_path):
    # a .npy is read a block of steps at a time (read_trace(lazy=True)), a .npz whole: the
    # commands' answers are the same
    t = read_trace(TRACE)
    npy = write_trace(tmp_path / "t.npy", np.asarray(t.topk), t.meta)
    for argv in (
        ["cache", "--policy", "belady", "--capacity-experts", "2000", "--warmup", "4"],
        ["cache", "--policy", "s3fifo", "--capacity-experts", "2000", "--streams", "1,3"],
        ["mrc"],
        ["mrc", "--sample-rate", "0.3"],
        ["union", "--batch", "1,4,16", "--bootstrap", "20"],
    ):
        a = run_json(capsys, [argv[0], str(TRACE), *argv[1:]])
        b = run_json(capsys, [argv[0], str(npy), *argv[1:]])
        for key in ("source", "path"):
            a.pop(key, None)
            b.pop(key, None)
        assert a == b, argv
