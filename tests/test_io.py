"""moeroof.data.io: round trips, the real captured traces, and one test per kind of bad input."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from moeroof.core.paths import EXTERNAL_DIR
from moeroof.core.rng import seed_of
from moeroof.data.io import (
    Histogram,
    InputError,
    Trace,
    check_incidence_sums,
    load_any,
    read_histogram,
    read_trace,
    sidecar_path,
    write_histogram,
    write_trace,
)

RNG_SEED = seed_of("test_io")

MIXTRAL = EXTERNAL_DIR / "mixtral8x7b-instruct-fp8-vllm-traces" / "trace_decode.npz"
QWEN = EXTERNAL_DIR / "qwen15moe-a27b-gptq-vllm-layer0" / "trace_decode_layer0.npz"
needs_external = pytest.mark.skipif(
    not EXTERNAL_DIR.is_dir(),
    reason=f"captured routing data not present at {EXTERNAL_DIR} (not redistributable; see its README)",
)


# ----------------------------------------------------------------------------- builders


def _random_trace(rng: np.random.Generator, steps=6, streams=3, layers=2, experts=8, top_k=2) -> np.ndarray:
    """Distinct ids per token (random permutations), with a few padded tokens."""
    keys = rng.random((steps, streams, layers, experts))
    topk = np.argsort(keys, axis=-1)[..., :top_k].astype(np.int16)
    topk[-1, 0] = -1  # stream 0 finished
    topk[0, 2] = -1  # stream 2 not yet started
    return topk


def _hist_from_trace(topk: np.ndarray, experts: int) -> tuple[np.ndarray, np.ndarray]:
    steps, streams, layers, k = topk.shape
    counts = np.zeros((layers, experts), dtype=np.int64)
    tokens = np.zeros(layers, dtype=np.int64)
    for layer in range(layers):
        ids = topk[:, :, layer].reshape(-1, k)
        ids = ids[(ids >= 0).all(axis=1)]
        tokens[layer] = ids.shape[0]
        np.add.at(counts[layer], ids.ravel(), 1)
    return counts, tokens


META = {"model": "toy", "experts": 8, "top_k": 2, "source": "test_io", "provenance": "synthetic"}


def _sidecar(**over):
    meta = {
        "model": "toy",
        "experts": 4,
        "top_k": 2,
        "layers": 2,
        "tokens": 3,
        "source": "hand-written",
        "layers_summed": False,
    }
    meta.update(over)
    return {k: v for k, v in meta.items() if v is not None}


def _write_hist_raw(tmp_path: Path, csv_text: str, meta: dict | str | None = None, name="h.csv") -> Path:
    path = tmp_path / name
    path.write_text(csv_text)
    if meta is not None:
        text = meta if isinstance(meta, str) else json.dumps(meta)
        sidecar_path(path).write_text(text)
    return path


GOOD_CSV = "layer,expert,count\n0,0,3\n0,1,2\n0,3,1\n1,2,3\n1,1,3\n"


def _expect(exc_info, prefix: str) -> None:
    assert str(exc_info.value).startswith(prefix), str(exc_info.value)


# ----------------------------------------------------------------------------- round trips


def test_histogram_round_trip(tmp_path):
    rng = np.random.default_rng(RNG_SEED)
    topk = _random_trace(rng, steps=20, streams=4, layers=3, experts=8, top_k=2)
    counts, tokens = _hist_from_trace(topk, 8)
    rank = np.tile(np.arange(8) // 4, (3, 1))
    path = write_histogram(
        tmp_path / "sub" / "h.csv",
        counts,
        tokens=tokens,
        experts=8,
        top_k=2,
        model="toy",
        source="test",
        layer_ids=[0, 5, 7],
        provenance="synthetic",
        generator={"model": "uniform", "seed": 1},
        rank=rank,
    )
    assert path.exists() and sidecar_path(path).exists()
    h = read_histogram(path)
    assert isinstance(h, Histogram)
    assert h.counts.dtype == np.int64 and h.counts.shape == (3, 8)
    np.testing.assert_array_equal(h.counts, counts)
    np.testing.assert_array_equal(h.tokens, tokens)
    np.testing.assert_array_equal(h.rank, rank)
    assert (h.experts, h.top_k, h.layer_ids, h.layers_summed, h.layers) == (8, 2, (0, 5, 7), False, 3)
    assert h.meta["generator"] == {"model": "uniform", "seed": 1}
    assert h.provenance == "synthetic" and h.path == path
    # complete data: Σ_i Y_i = K·T and the plug-in π sums to K
    np.testing.assert_allclose(h.inclusion.sum(axis=1), 2.0)
    assert load_any(path).counts.tolist() == counts.tolist()
    # no temp files left behind
    assert sorted(p.name for p in path.parent.iterdir()) == ["h.csv", "h.json"]


def test_histogram_missing_rows_are_zero_and_scalar_tokens(tmp_path):
    path = _write_hist_raw(tmp_path, GOOD_CSV, _sidecar())
    h = read_histogram(path)
    assert h.counts.tolist() == [[3, 2, 0, 1], [0, 3, 3, 0]]
    assert h.tokens.tolist() == [3, 3] and h.rank is None
    with pytest.raises(ValueError):
        h.counts[0, 0] = 1  # read-only


def test_histogram_layers_summed(tmp_path):
    path = write_histogram(
        tmp_path / "sum.csv",
        np.array([[5, 3, 0, 2]]),
        tokens=5,
        experts=4,
        top_k=2,
        model="toy",
        source="t",
        layers_summed=True,
    )
    h = read_histogram(path)
    assert h.layers_summed and h.layers == 1


@pytest.mark.parametrize("suffix", [".npz", ".npy"])
def test_trace_round_trip(tmp_path, suffix):
    rng = np.random.default_rng(RNG_SEED)
    topk = _random_trace(rng)
    weights = rng.random(topk.shape).astype(np.float32) if suffix == ".npz" else None
    path = write_trace(tmp_path / f"t{suffix}", topk, META, weights=weights)
    tr = read_trace(path)
    assert isinstance(tr, Trace)
    np.testing.assert_array_equal(tr.topk, topk)
    assert tr.topk.dtype == topk.dtype
    assert (tr.experts, tr.top_k, tr.layer_ids) == (8, 2, (0, 1))
    assert (tr.steps, tr.streams, tr.layers) == topk.shape[:3]
    assert {k: tr.meta[k] for k in META} == META
    assert tr.meta["axes"] == ["step", "stream", "layer", "k"]
    if suffix == ".npy":
        # read into memory (a file truncated later cannot SIGBUS); only a large one is mapped
        assert not isinstance(tr.topk, np.memmap)
        assert not tr.topk.flags.writeable
        assert tr.weights is None
        assert sidecar_path(path).exists()
    else:
        np.testing.assert_array_equal(tr.weights, weights)
        # byte-stable: writing the same trace again gives the same bytes
        again = write_trace(tmp_path / "again.npz", topk, META, weights=weights)
        assert again.read_bytes() == path.read_bytes()
    assert isinstance(load_any(path), Trace)


def test_npy_validation_is_chunked(tmp_path, monkeypatch):
    """A bad id deep in a memory-mapped trace is found with chunks smaller than the array."""
    import moeroof.data.io as mio

    rng = np.random.default_rng(RNG_SEED)
    topk = _random_trace(rng, steps=50)
    path = write_trace(tmp_path / "t.npy", topk, META)
    raw = np.load(path, mmap_mode="r+")
    raw[41, 1, 1, 1] = 8
    raw.flush()
    del raw
    monkeypatch.setattr(mio, "TOPK_CHUNK_ELEMENTS", 3 * 2 * 2)  # 1 step per chunk
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{path}:topk[41,1,1,1]: topk: expert id 8 not in [-1, 8)")


# ----------------------------------------------------------------------------- real traces


@needs_external
@pytest.mark.external
@pytest.mark.parametrize(
    "path, shape, experts, top_k",
    [(MIXTRAL, (255, 4, 32, 2), 8, 2), (QWEN, (127, 25, 1, 4), 60, 4)],
    ids=["mixtral", "qwen"],
)
def test_real_traces(path, shape, experts, top_k):
    before = _fingerprint(path)
    tr = load_any(path)
    assert isinstance(tr, Trace)
    assert tr.topk.shape == shape and (tr.experts, tr.top_k) == (experts, top_k)
    assert len(tr.layer_ids) == shape[2]
    assert tr.weights is not None and tr.weights.shape == shape
    assert tr.meta["provenance"] == "witnessed"
    assert (tr.topk >= 0).any() and (tr.topk == -1).any()
    assert _fingerprint(path) == before


# ----------------------------------------------------------------------------- bad histograms


@pytest.mark.parametrize(
    "csv_text, prefix",
    [
        ("layer,expert,cnt\n0,0,1\n", ":1: header: "),
        ("layer,expert\n0,0\n", ":1: header: "),
        ("", ":1: header: empty file"),
        ("layer,expert,count\n0,0,1\n0,1,1.5\n", ":3: count: expected an integer, got '1.5'"),
        ("layer,expert,count\n0,0,x\n", ":2: count: expected an integer"),
        ("layer,expert,count\n0,0,-1\n", ":2: count: negative value -1"),
        ("layer,expert,count\n0,4,1\n", ":2: expert: expert 4 ≥ experts E=4"),
        ("layer,expert,count\n2,0,1\n", ":2: layer: layer 2 not among"),
        (
            "layer,expert,count\n0,1,1\n1,1,1\n0,1,2\n",
            ":4: expert: duplicate row for layer 0, expert 1 (first at line 2)",
        ),
        ("layer,expert,count\n0,1,4\n", ":2: count: count 4 > tokens T=3"),
        ("layer,expert,count\n0,0,3\n0,1,3\n0,2,1\n", ":4: count: counts of layer 0 sum to 7 > top_k·tokens"),
        ("layer,expert,count\n0,0\n", ":2: row: expected 3 fields, got 2"),
        ("layer,expert,count,rank\n0,0,1,r\n", ":2: rank: expected an integer"),
    ],
    ids=[
        "bad-header",
        "missing-column",
        "empty",
        "non-integer",
        "not-a-number",
        "negative",
        "expert>=E",
        "unknown-layer",
        "duplicate",
        "count>tokens",
        "sum>KT",
        "short-row",
        "bad-rank",
    ],
)
def test_bad_histogram_csv(tmp_path, csv_text, prefix):
    path = _write_hist_raw(tmp_path, csv_text, _sidecar())
    with pytest.raises(InputError) as ei:
        read_histogram(path)
    _expect(ei, f"{path}{prefix}")
    assert ei.value.path == path


@pytest.mark.parametrize(
    "meta, prefix",
    [
        (None, ":-: file: missing sidecar JSON"),
        ("{not json", ":-: file: not valid JSON"),
        ("[1, 2]", ":-: file: expected a JSON object"),
        (_sidecar(experts=None), ":-: experts: missing"),
        (_sidecar(experts="8"), ":-: experts: expected a positive integer"),
        (_sidecar(top_k=5), ":-: top_k: top_k K=5 exceeds experts E=4"),
        (_sidecar(top_k=True), ":-: top_k: expected a positive integer"),
        (_sidecar(tokens=[3]), ":-: tokens: expected 2 entries"),
        (_sidecar(tokens="3"), ":-: tokens: expected an integer or a list"),
        (_sidecar(tokens=0), ":-: tokens: routed tokens must be ≥ 1"),
        (_sidecar(layers=None), ":-: layers: missing"),
        (_sidecar(layer_ids=[0, 1, 2]), ":-: layers: layers=2 but layer_ids has 3 entries"),
        (_sidecar(layers_summed="no"), ":-: layers_summed: expected true or false"),
        (_sidecar(layers_summed=True), ":-: layers_summed: a histogram summed over layers has one pseudo-layer"),
        (_sidecar(model=None), ":-: model: missing"),
        (_sidecar(source=3), ":-: source: expected a string"),
        (_sidecar(generator=[1]), ":-: generator: expected a JSON object"),
    ],
    ids=[
        "missing",
        "not-json",
        "not-object",
        "no-experts",
        "experts-str",
        "K>E",
        "K-bool",
        "tokens-len",
        "tokens-str",
        "tokens-zero",
        "no-layers",
        "layers-mismatch",
        "summed-str",
        "summed-many",
        "no-model",
        "source-int",
        "generator-list",
    ],
)
def test_bad_histogram_sidecar(tmp_path, meta, prefix):
    path = _write_hist_raw(tmp_path, GOOD_CSV, meta)
    with pytest.raises(InputError) as ei:
        read_histogram(path)
    _expect(ei, f"{sidecar_path(path)}{prefix}")


def test_missing_histogram_file(tmp_path):
    path = tmp_path / "nope.csv"
    with pytest.raises(InputError) as ei:
        load_any(path)
    assert str(ei.value) == f"{path}:-: file: no such file"


def test_input_error_is_value_error_with_parts(tmp_path):
    err = InputError(tmp_path / "f.csv", 7, "count", "bad")
    assert isinstance(err, ValueError)
    assert str(err) == f"{tmp_path / 'f.csv'}:7: count: bad"
    assert (err.row, err.field, err.message) == (7, "count", "bad")
    assert str(InputError("f.npz", None, "topk", "x")) == "f.npz:-: topk: x"


def test_writer_rejects_invalid_histogram(tmp_path):
    target = tmp_path / "w.csv"
    with pytest.raises(InputError, match=r"count 4 of layer 0, expert 1 > tokens T=3"):
        write_histogram(target, np.array([[0, 4, 0, 0]]), tokens=3, experts=4, top_k=2, model="m", source="s")
    with pytest.raises(InputError, match=r"top_k: top_k K=5 exceeds experts E=4"):
        write_histogram(target, np.zeros((1, 4), int), tokens=3, experts=4, top_k=5, model="m", source="s")
    assert not list(tmp_path.iterdir()), "nothing written when validation fails"


def test_writer_refuses_external_dir():
    with pytest.raises(ValueError, match="refusing to write"):
        write_trace(EXTERNAL_DIR / "x" / "t.npz", np.zeros((1, 1, 1, 1), np.int16), {"experts": 2, "top_k": 1})


# ----------------------------------------------------------------------------- bad traces


def _npz(tmp_path: Path, name="t.npz", meta=None, **arrays) -> Path:
    """Write an npz by hand (no validation), ``meta`` a dict or a raw string."""
    path = tmp_path / name
    if meta is not None:
        arrays["meta"] = np.array(meta if isinstance(meta, str) else json.dumps(meta))
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def _good_topk() -> np.ndarray:
    return _random_trace(np.random.default_rng(RNG_SEED))


@pytest.mark.parametrize(
    "case, prefix",
    [
        ("3-dims", ":-: topk: expected 4 dims (steps, streams, layers, K), got 3"),
        ("float", ":-: topk: expected an integer dtype, got float64"),
        ("id>=E", ":topk[2,1,0,1]: topk: expert id 8 not in [-1, 8)"),
        ("id<-1", ":topk[3,0,1,0]: topk: expert id -2 not in [-1, 8)"),
        ("duplicate", ":topk[1,2,1,1]: topk: expert 5 appears twice in one token"),
        ("partial-pad", ":topk[4,0,0,1]: topk: token is partly padding"),
        ("meta-not-json", ":-: meta: not valid JSON"),
        ("meta-not-object", ":-: meta: expected a JSON object"),
        ("K-mismatch", ":-: top_k: meta top_k=3 but topk has K=2 columns"),
        ("K>E", ":-: top_k: top_k K=9 exceeds experts E=8"),
        ("no-topk", ":-: topk: missing array"),
        ("no-meta", ":-: meta: missing array"),
        ("no-experts", ":-: experts: missing"),
        ("layer-ids", ":-: layer_ids: 3 layer ids but topk has 2 layers"),
        ("weights-shape", ":-: weights: shape (1,) differs"),
        ("pickled", ":-: file: not a readable .npz without pickles"),
        ("not-zip", ":-: file: not a readable .npz"),
    ],
)
def test_bad_npz_trace(tmp_path, case, prefix):
    topk = _good_topk().astype(np.int64)
    meta = dict(META)
    arrays: dict = {"topk": topk}
    if case == "3-dims":
        arrays["topk"] = topk[:, :, 0]
    elif case == "float":
        arrays["topk"] = topk.astype(np.float64)
    elif case == "id>=E":
        topk[2, 1, 0, 1] = 8
    elif case == "id<-1":
        topk[3, 0, 1, 0] = -2
    elif case == "duplicate":
        topk[1, 2, 1] = [5, 5]
    elif case == "partial-pad":
        topk[4, 0, 0, 1] = -1
    elif case == "meta-not-json":
        meta = "{'model': 'toy'}"
    elif case == "meta-not-object":
        meta = "[8, 2]"
    elif case == "K-mismatch":
        meta["top_k"] = 3
    elif case == "K>E":
        meta["top_k"] = 9
    elif case == "no-topk":
        del arrays["topk"]
        arrays["ids"] = topk
    elif case == "no-meta":
        meta = None
    elif case == "no-experts":
        del meta["experts"]
    elif case == "layer-ids":
        meta["layer_ids"] = [0, 1, 2]
    elif case == "weights-shape":
        arrays["weights"] = np.zeros(1, np.float32)
    if case == "pickled":
        path = tmp_path / "t.npz"
        with open(path, "wb") as fh:
            np.savez(fh, topk=topk, meta=np.array([{"a": 1}], dtype=object))
    elif case == "not-zip":
        path = tmp_path / "t.npz"
        path.write_bytes(b"this is not a zip file")
    else:
        path = _npz(tmp_path, meta=meta, **arrays)
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{path}{prefix}")


def test_bad_npy_trace(tmp_path):
    topk = _good_topk()
    # missing sidecar
    path = tmp_path / "t.npy"
    np.save(path, topk)
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{tmp_path / 't.json'}:-: file: missing sidecar JSON")
    # sidecar not JSON
    sidecar_path(path).write_text("nope")
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{tmp_path / 't.json'}:-: file: not valid JSON")
    # K mismatch is reported against the sidecar
    sidecar_path(path).write_text(json.dumps({**META, "top_k": 4}))
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{tmp_path / 't.json'}:-: top_k: meta top_k=4 but topk has K=2 columns")
    # float dtype, 3 dims
    sidecar_path(path).write_text(json.dumps(META))
    np.save(path, topk.astype(np.float32))
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{path}:-: topk: expected an integer dtype, got float32")
    np.save(path, topk[..., 0])
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{path}:-: topk: expected 4 dims")
    # pickled object array
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{path}:-: file: not a readable .npy without pickles")


def test_writer_rejects_invalid_trace(tmp_path):
    topk = _good_topk()
    topk[0, 1, 0] = [3, 3]
    with pytest.raises(InputError, match=r"topk\[0,1,0,1\]: topk: expert 3 appears twice"):
        write_trace(tmp_path / "t.npz", topk, META)
    with pytest.raises(InputError, match=r":-: experts: missing"):
        write_trace(tmp_path / "t.npz", _good_topk(), {"top_k": 2})
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["data.txt", "data.parquet", "data"])
def test_unknown_suffix(tmp_path, name):
    path = tmp_path / name
    path.write_text("layer,expert,count\n")
    with pytest.raises(InputError) as ei:
        load_any(path)
    _expect(ei, f"{path}:-: file: unknown suffix")
    with pytest.raises(InputError) as ei:
        read_trace(path)
    _expect(ei, f"{path}:-: file: unknown trace suffix")


# ----------------------------------------------------------------------------- read-only


def _fingerprint(path: Path) -> tuple[str, int, int]:
    st = os.stat(path)
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size


def test_readers_do_not_modify_inputs(tmp_path):
    rng = np.random.default_rng(RNG_SEED)
    topk = _random_trace(rng)
    counts, tokens = _hist_from_trace(topk, 8)
    files = [
        write_histogram(tmp_path / "h.csv", counts, tokens=tokens, experts=8, top_k=2, model="m", source="s"),
        write_trace(tmp_path / "t.npz", topk, META),
        write_trace(tmp_path / "m.npy", topk, META),
    ]
    files += [sidecar_path(files[0]), sidecar_path(files[2])]
    bad = _write_hist_raw(tmp_path, "layer,expert,count\n0,9,1\n", _sidecar(), name="bad.csv")
    files += [bad, sidecar_path(bad)]
    for f in files:
        os.utime(f, ns=(1_000_000_000, 1_000_000_000))  # a fixed old mtime: any write would change it
    before = {f: _fingerprint(f) for f in files}
    for f in files[:3]:
        obj = load_any(f)
        if isinstance(obj, Trace):
            np.asarray(obj.topk).sum()
    with pytest.raises(InputError):
        load_any(bad)
    assert {f: _fingerprint(f) for f in files} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for f in files)


# ----------------------------------------------------------------------------- tokens per layer, meta without a sidecar


def test_tokens_per_layer_differ(tmp_path):
    # layer 0 saw 3 tokens, layer 9 saw 5: each bounded by its own T (a count of 4 fits only layer 9)
    counts = np.array([[3, 2, 1], [4, 4, 2]])
    path = write_histogram(
        tmp_path / "h.csv", counts, tokens=[3, 5], experts=3, top_k=2, model="m", source="s", layer_ids=[0, 9]
    )
    assert json.loads(sidecar_path(path).read_text())["tokens"] == [3, 5]
    h = read_histogram(path)
    assert h.tokens.tolist() == [3, 5]
    np.testing.assert_allclose(h.inclusion, [[1, 2 / 3, 1 / 3], [0.8, 0.8, 0.4]])
    with pytest.raises(InputError, match="count 4 of layer 0, expert 0 > tokens T=3"):
        write_histogram(tmp_path / "x.csv", counts[::-1], tokens=[3, 5], experts=3, top_k=2, model="m", source="s")
    meta = json.loads(sidecar_path(path).read_text())
    meta["tokens"] = [3, 3]
    sidecar_path(path).write_text(json.dumps(meta))
    with pytest.raises(InputError) as ei:
        read_histogram(path)
    assert str(ei.value).startswith(f"{path}:5: count: count 4 > tokens T=3 of layer 9")  # header, 3 rows of layer 0


def test_histogram_meta_given_instead_of_a_sidecar(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("layer,expert,count\n0,1,2\n0,0,1\n", encoding="utf-8")
    with pytest.raises(InputError) as ei:
        read_histogram(path)
    msg = str(ei.value)
    assert msg.startswith(f"{tmp_path / 'h.json'}:-: file: missing sidecar JSON")
    assert "moeroof import matrix" in msg and "moeroof histogram" in msg and "meta=" in msg
    meta = {"model": "m", "experts": 3, "top_k": 1, "layers": 1, "tokens": 3, "source": "x", "layers_summed": False}
    h = read_histogram(path, meta=meta)
    assert h.counts.tolist() == [[1, 2, 0]] and h.tokens.tolist() == [3] and h.meta["model"] == "m"
    assert not sidecar_path(path).exists()
    with pytest.raises(InputError) as ei:
        read_histogram(path, meta={**meta, "tokens": 1})
    assert str(ei.value).startswith(f"{path}:2: count: count 2 > tokens T=1")
    with pytest.raises(InputError, match=r"h.csv:-: experts: missing"):
        read_histogram(path, meta={k: v for k, v in meta.items() if k != "experts"})


def test_trace_meta_given_instead_of_sidecar_or_array(tmp_path):
    topk = np.array([[[[0, 2]], [[1, 0]]]], dtype=np.int16)  # (1 step, 2 streams, 1 layer, K 2)
    np.save(tmp_path / "t.npy", topk)
    with pytest.raises(InputError) as ei:
        read_trace(tmp_path / "t.npy")
    assert "missing sidecar JSON" in str(ei.value) and "moeroof import table" in str(ei.value)
    t = read_trace(tmp_path / "t.npy", meta={"experts": 3, "top_k": 2, "provenance": "witnessed"})
    assert np.asarray(t.topk).tolist() == topk.tolist() and t.provenance == "witnessed" and t.layer_ids == (0,)
    np.savez(tmp_path / "bare.npz", topk=topk)  # a capture's own npz without the suite's meta
    with pytest.raises(InputError) as ei:
        read_trace(tmp_path / "bare.npz")
    assert str(ei.value).startswith(f"{tmp_path / 'bare.npz'}:-: meta: missing array") and "meta=" in str(ei.value)
    t = read_trace(tmp_path / "bare.npz", meta={"experts": 3, "top_k": 2})
    assert t.experts == 3 and t.meta == {"experts": 3, "top_k": 2}
    with pytest.raises(InputError, match=r"bare.npz:-: top_k: top_k K=4 exceeds experts E=3"):
        read_trace(tmp_path / "bare.npz", meta={"experts": 3, "top_k": 4})


def _hist_meta(tokens) -> dict:
    return {
        "model": "x",
        "experts": 4,
        "top_k": 2,
        "layers": 2,
        "tokens": tokens,
        "source": "t",
        "layers_summed": False,
    }


def test_incidence_sums_complete_partial_and_far_below(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("layer,expert,count\n0,0,10\n0,1,10\n1,0,10\n1,1,10\n")
    complete = read_histogram(path, meta=_hist_meta(10))
    assert check_incidence_sums(complete) == []
    short = read_histogram(path, meta=_hist_meta([10, 11]))  # layer 1: 20 of 22 = 90.9 %
    (note,) = check_incidence_sums(short)
    assert note.startswith("counts of layer 1 sum to 90.9 % of top_k·tokens")
    far = read_histogram(path, meta=_hist_meta([10, 100]))  # layer 1: 20 of 200
    with pytest.raises(
        InputError, match=r"h.csv:-: count: counts of layer 1 sum to 20, 10 % of top_k·tokens = 2·100 = 200"
    ):
        check_incidence_sums(far)


def test_read_trace_without_the_id_pass(tmp_path):
    """``validate=False`` leaves the ids to the caller's compiled pass (moeroof cache / mrc) and
    says so (``ids_checked``); file, meta, shape and dtype are checked all the same."""
    topk = _good_topk()
    topk[3, 0, 1, 0] = 8  # a bad id
    path = tmp_path / "t.npy"
    np.save(path, topk)
    sidecar_path(path).write_text(json.dumps(META))
    with pytest.raises(InputError, match="expert id 8"):
        read_trace(path)
    t = read_trace(path, validate=False)
    assert not t.ids_checked and t.topk.shape == topk.shape
    assert read_trace(write_trace(tmp_path / "ok.npy", _good_topk(), META)).ids_checked
    sidecar_path(path).write_text(json.dumps({**META, "top_k": 4}))
    with pytest.raises(InputError, match="top_k=4"):
        read_trace(path, validate=False)
    sidecar_path(path).write_text(json.dumps(META))
    np.save(path, topk.astype(np.float32))
    with pytest.raises(InputError, match="integer dtype"):
        read_trace(path, validate=False)
    np.save(path, topk[..., 0])
    with pytest.raises(InputError, match="4 dims"):
        read_trace(path, validate=False)


def test_lazy_npy_reads_blocks_of_steps(tmp_path):
    """``read_trace(lazy=True)``: a .npy's ids come from the file per block of steps, equal to
    the array wherever it is indexed; a .npz (or a Fortran-order .npy) is read as without."""
    from moeroof.data.io import NpySteps

    topk = _random_trace(np.random.default_rng(RNG_SEED), steps=9)
    path = write_trace(tmp_path / "t.npy", topk, META)
    t = read_trace(path, lazy=True)
    assert isinstance(t.topk, NpySteps) and t.ids_checked
    assert (t.steps, t.streams, t.layers, t.topk.dtype, len(t.topk)) == (9, 3, 2, topk.dtype, 9)
    ids = t.topk
    for key in (slice(2, 5), slice(None), slice(7, 20), slice(-3, None), slice(4, 2), 3, -1, (slice(1, 4), 0, 1)):
        np.testing.assert_array_equal(ids[key], topk[key])
    np.testing.assert_array_equal(np.asarray(ids), topk)
    np.testing.assert_array_equal(ids[::2], topk[::2])
    assert not ids[0:2].flags.writeable
    with pytest.raises(IndexError):
        ids[9]
    # cut short after it was opened: an error, not a signal
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 5)
    with pytest.raises(ValueError, match="truncated"):
        ids[7:9]
    assert not isinstance(read_trace(write_trace(tmp_path / "t.npz", topk, META), lazy=True).topk, NpySteps)
    fpath = tmp_path / "f.npy"
    np.save(fpath, np.asfortranarray(topk))
    sidecar_path(fpath).write_text(json.dumps(META))
    assert isinstance(read_trace(fpath, lazy=True).topk, np.ndarray)


def _trace_error(path, topk):
    """read_trace's error for ``topk`` written to ``path`` (None where it reads)."""
    np.savez(path, topk=topk, meta=np.array(json.dumps({"experts": 100, "top_k": 3, "model": "m"})))
    try:
        read_trace(path)
    except InputError as exc:
        return str(exc).replace(str(path), "T")
    return None


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint16])
@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t.__setitem__((3, 1, 0, 2), 100),  # out of range
        lambda t: t.__setitem__((4, 0, 1, 1), t[4, 0, 1, 0]),  # an expert twice in a token
        lambda t: t.__setitem__((2, 1, 1, slice(1, 3)), -1),  # a token partly padding
        lambda t: t.__setitem__((5, 0, 0, 0), -2),  # below the padding id
        lambda t: None,  # none: it reads
    ],
)
def test_trace_ids_are_checked_alike_in_every_integer_width(tmp_path, dtype, damage):
    """The ids are checked in the trace's own integer width (no int64 copy of each block): every
    damage gives the error, at the same place, that the same ids give as int64."""
    rng = np.random.default_rng(3)
    topk = np.stack([rng.permutation(100)[:3] for _ in range(6 * 2 * 2)]).reshape(6, 2, 2, 3).astype(np.int64)
    damage(topk)
    if np.issubdtype(dtype, np.unsignedinteger) and (topk < 0).any():
        return  # an unsigned array cannot hold the padding id
    want = _trace_error(tmp_path / "wide.npz", topk)
    assert _trace_error(tmp_path / "narrow.npz", topk.astype(dtype)) == want
    assert want is None or "topk[" in want


def test_reading_a_trace_holds_it_about_once(tmp_path):
    """Reading and checking a trace peaks below twice its ids' bytes (plus a little): its ids
    are checked a block at a time in their own width (an int64 copy of each block, its sort and
    masks took 4× an int16 trace)."""
    import tracemalloc

    rng = np.random.default_rng(0)
    steps, streams, layers = 2_000, 32, 32
    topk = ((rng.permutation(128)[:8] + rng.integers(0, 128, (steps, streams, layers, 1))) % 128).astype(np.int16)
    path = tmp_path / "t.npz"
    np.savez(path, topk=topk, meta=np.array(json.dumps({"experts": 128, "top_k": 8, "model": "m"})))
    del topk
    tracemalloc.start()
    try:
        t = read_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * t.topk.nbytes + (8 << 20)
