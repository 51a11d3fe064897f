"""moeroof's cache policies against libCacheSim: the same hit counts on the same streams.

``tests/data/libcachesim_counts.json`` holds libCacheSim's hit counts for ``lru``, ``lfu``,
``arc``, ``s3fifo`` (move-to-main threshold 1 and 2) and ``belady-insert`` on the streams of
``benchmarks/libcachesim_counts.py`` (the embedded trace, globally and per layer, and two
synthetic streams; request by request, unit sizes), written by the command it records. The
committed counts are checked against :func:`moeroof.cachesim.simulate` on every run; where the
``libcachesim`` package is installed (``pip install libcachesim``: not in the ``test`` extra, its
wheels are for manylinux_2_34 x86_64 only) libCacheSim is also run live and must reproduce them.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from moeroof import cachesim as cache
from moeroof.cli import main

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "libcachesim_counts.py"
COUNTS = REPO / "tests" / "data" / "libcachesim_counts.json"
#: the policies with a libCacheSim counterpart, and the counterpart
COUNTERPARTS = {
    ("lru", None): "LRU",
    ("lfu", None): "LFU",
    ("arc", None): "ARC",
    ("s3fifo", 1): "S3FIFOv0 move-to-main-threshold=1",
    ("s3fifo", 2): "S3FIFOv0 move-to-main-threshold=2",
    ("belady-insert", None): "Belady",
}


def _script():
    spec = importlib.util.spec_from_file_location("libcachesim_counts", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def script():
    return _script()


@pytest.fixture(scope="module")
def counts():
    return json.loads(COUNTS.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def streams(script, counts):
    reqs = script.streams()
    for name, req in reqs.items():  # a changed stream, not a changed policy, would fail below
        assert script.fingerprint(req) == counts["streams"][name], f"stream {name} is not the one counted"
    return reqs


def test_the_counts_record_their_command_and_cover_every_counterpart(script, counts):
    assert counts["command"] == script.COMMAND == ".venv/bin/python benchmarks/libcachesim_counts.py"
    assert counts["libcachesim"]
    rows = counts["rows"]
    assert {(r["policy"], r["s3fifo_threshold"]): r["libcachesim"] for r in rows} == COUNTERPARTS
    for name, (scope, caps) in script.CAPACITIES.items():
        mine = [r for r in rows if r["stream"] == name]
        assert {r["scope"] for r in mine} == {scope}
        assert sorted({r["capacity_experts"] for r in mine}) == sorted(caps)
        assert len(mine) == len(caps) * len(COUNTERPARTS)
    assert {r["stream"] for r in rows} == set(counts["streams"]) == set(script.CAPACITIES)
    # the counts discriminate: the policies differ on some stream and capacity
    by = {(r["stream"], r["capacity_experts"], r["policy"], r["s3fifo_threshold"]): r["hits"] for r in rows}
    assert by[("embedded", 3333, "lfu", None)] != by[("embedded", 3333, "lru", None)]
    assert by[("embedded", 3333, "s3fifo", 1)] != by[("embedded", 3333, "s3fifo", 2)]


@pytest.mark.parametrize("stream", ["embedded", "embedded-per-layer", "synthetic-moe", "synthetic-irm"])
def test_moeroof_hits_equal_libcachesims(script, counts, streams, stream):
    rows = [r for r in counts["rows"] if r["stream"] == stream]
    req = streams[stream]
    got = {}
    for r in rows:
        assert r["requests"] == len(req)
        key = (r["capacity_experts"], r["policy"], r["s3fifo_threshold"])
        got[key] = script.moeroof_hits(req, r["scope"], *key)
    want = {(r["capacity_experts"], r["policy"], r["s3fifo_threshold"]): r["hits"] for r in rows}
    assert got == want


def test_perfect_lfu_and_bypassing_belady_are_not_libcachesims(counts, streams):
    # the two variants without a counterpart differ from it on the embedded trace
    by = {(r["capacity_experts"], r["policy"]): r["hits"] for r in counts["rows"] if r["stream"] == "embedded"}
    req = streams["embedded"]
    for cap in (2500, 3333, 4000):
        perfect = cache.simulate(req, cap, policy="lfu-perfect", lookup="request").hits
        assert perfect > by[(cap, "lfu")]  # it remembers the counts of the experts it evicted
        bypass = cache.simulate(req, cap, policy="belady", lookup="request").hits
        assert bypass > by[(cap, "belady-insert")]  # it declines to cache what is needed last


def test_the_command_line_gives_libcachesims_counts(capsys, counts):
    by = {
        (r["capacity_experts"], r["policy"], r["s3fifo_threshold"]): r["hits"]
        for r in counts["rows"]
        if r["stream"] == "embedded"
    }
    trace = str(REPO / "data" / "traces" / "qwen3-30b-a3b-like.npz")
    for policy, extra, threshold in (
        ("lfu", [], None),
        ("belady-insert", [], None),
        ("s3fifo", [], 1),
        ("s3fifo", ["--s3fifo-threshold", "2"], 2),
    ):
        argv = ["cache", trace, "--policy", policy, "--capacity-experts", "3333", "--lookup", "request"]
        assert main(argv + extra + ["--json"]) == 0
        rep = json.loads(capsys.readouterr().out)
        assert rep["hits"] == by[(3333, policy, threshold)], policy
        assert rep["s3fifo_threshold"] == threshold
        assert rep["oracle"] == (policy == "belady-insert")


def test_the_parser_spells_the_librarys_names():
    from moeroof.cli import cache as cli_cache

    assert cli_cache.POLICIES == cache.POLICIES
    assert cli_cache.S3FIFO_THRESHOLD == cache.S3FIFO_MOVE_TO_MAIN_THRESHOLD


def test_libcachesim_live_reproduces_the_committed_counts(script, counts, streams, tmp_path):
    # Only where libcachesim is installed (pip install libcachesim); the comparison above runs
    # everywhere against the counts it wrote.
    pytest.importorskip("libcachesim", reason="libcachesim not installed: compared with its committed counts only")
    rows = script.libcachesim_counts(streams, tmp_path)
    assert rows == counts["rows"]
