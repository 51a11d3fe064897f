"""``moeroof histogram``: a trace's counts per (layer, expert) written as the suite's histogram."""

from __future__ import annotations

import json

import numpy as np

from moeroof.cli import main
from moeroof.data.io import read_histogram, write_trace


def small_trace(tmp_path, provenance="witnessed"):
    # (steps 3, streams 2, layers 2, K 2) over E = 4; stream 1 has no token at step 2 in layer 1 only
    topk = np.array(
        [
            [[[0, 1], [2, 3]], [[1, 2], [0, 3]]],
            [[[0, 3], [2, 1]], [[1, 0], [3, 2]]],
            [[[2, 3], [0, 1]], [[3, 1], [-1, -1]]],
        ],
        dtype=np.int16,
    )
    path = tmp_path / "t.npz"
    meta = {"model": "tiny", "experts": 4, "top_k": 2, "layer_ids": [5, 7], "provenance": provenance}
    write_trace(path, topk, meta)
    return path, topk


def test_counts_tokens_and_provenance_by_hand(tmp_path, capsys):
    path, topk = small_trace(tmp_path)
    before = path.read_bytes()
    out = tmp_path / "h.csv"
    assert main(["histogram", str(path), "-o", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    h = read_histogram(out)
    want = np.zeros((2, 4), dtype=int)
    for s in range(3):
        for t in range(2):
            for layer in range(2):
                for e in topk[s, t, layer]:
                    if e >= 0:
                        want[layer, e] += 1
    assert np.array_equal(np.asarray(h.counts), want)
    assert rep["tokens_per_layer"] == [6, 5] and rep["picks"] == int(want.sum())
    assert h.meta["provenance"] == "witnessed" and h.meta["derived_from"] == str(path)
    assert list(h.meta["layer_ids"]) == [5, 7] and h.meta["top_k"] == 2
    assert path.read_bytes() == before  # the trace is only read


def test_refuses_to_overwrite_and_bad_targets(tmp_path, capsys):
    path, _ = small_trace(tmp_path, provenance="synthetic")
    out = tmp_path / "h.csv"
    assert main(["histogram", str(path), "-o", str(out)]) == 0
    first = out.read_bytes()
    capsys.readouterr()
    assert main(["histogram", str(path), "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_bytes() == first
    assert main(["histogram", str(path), "-o", str(out), "--force"]) == 0
    assert main(["histogram", str(path), "-o", str(tmp_path / "h.txt")]) == 2
    assert ".csv" in capsys.readouterr().err
    assert main(["histogram", str(tmp_path / "missing.npz"), "-o", str(tmp_path / "m.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "Traceback" not in err


def test_a_mapped_trace_cut_short_after_counting_is_one_error_line(tmp_path, monkeypatch, capsys):
    """Every file mapped (COPY_LIMIT_BYTES = 0, as a trace larger than memory would be); the file
    is truncated right after the counts, while the tokens per layer are still to be read: one
    error line naming the file, exit 2 — touching the map there would have been SIGBUS."""
    import os

    import moeroof.models.routing as routing
    from moeroof.data import safe_read

    rng = np.random.default_rng(5)
    topk = np.stack([rng.permutation(8)[:2] for _ in range(40 * 3 * 2)]).reshape(40, 3, 2, 2).astype(np.int16)
    path = tmp_path / "t.npy"
    np.save(path, topk)
    (tmp_path / "t.json").write_text(json.dumps({"model": "m", "experts": 8, "top_k": 2, "provenance": "synthetic"}))
    monkeypatch.setattr(safe_read, "COPY_LIMIT_BYTES", 0)
    counted = routing.histogram_from_trace

    def count_then_truncate(arr, experts):
        out = counted(arr, experts)
        os.truncate(path, os.path.getsize(path) // 2)
        return out

    monkeypatch.setattr(routing, "histogram_from_trace", count_then_truncate)
    assert main(["histogram", str(path), "-o", str(tmp_path / "h.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "truncated while being read" in err[0], err
    assert not (tmp_path / "h.csv").exists()
