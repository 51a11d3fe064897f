"""``moeroof import``: the three external captures go through ``import`` and then ``union``,
``fit`` and ``cache`` with no hand-written code, and the imports agree with their authors' own
conversions (the ``trace_decode*.npz`` beside each CSV). Plus the command's refusals.

The external files carry no licence: they are read in place (moeroof.core.paths.EXTERNAL_DIR),
never copied, and the tests skip with that reason where the folder is absent.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.core.paths import EXTERNAL_DIR
from moeroof.data.io import read_histogram, read_trace

MIXTRAL_DIR = EXTERNAL_DIR / "mixtral8x7b-instruct-fp8-vllm-traces"
QWEN15_DIR = EXTERNAL_DIR / "qwen15moe-a27b-gptq-vllm-layer0"
QWEN3_DIR = EXTERNAL_DIR / "qwen3-30b-a3b-expert-freq-en-he"
needs_external = pytest.mark.skipif(
    not EXTERNAL_DIR.is_dir(),
    reason=f"captured routing data not present at {EXTERNAL_DIR} (not redistributable; see its README)",
)

MIXTRAL_ARGS = [
    "--columns",
    "stream=dataset+problem_id,step=token_idx,layer=layer",
    "--expert-cols",
    "expert_0,expert_1",
    "--experts",
    "8",
    "--top-k",
    "2",
]
QWEN15_ARGS = [
    "--columns",
    "step=step,stream=row_in_step",
    "--filter",
    "phase=decode",
    "--expert-cols",
    "expert_0,expert_1,expert_2,expert_3",
    "--experts",
    "60",
    "--top-k",
    "4",
]


def run_json(capsys, argv):
    rc = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def authors_trace(path):
    """The capture authors' own conversion, read with numpy alone (not through the suite)."""
    with np.load(path, allow_pickle=False) as z:
        return z["topk"].astype(np.int64), json.loads(z["meta"].item())


def downstream(capsys, path, batch, trace=True):
    """union, fit (histograms) and cache (traces) on an imported file: each exits 0 with JSON."""
    rep = run_json(capsys, ["union", str(path), "--batch", batch])
    assert rep["provenance"] == "witnessed"
    if trace:
        cache = run_json(capsys, ["cache", str(path), "--policy", "lru", "--capacity-experts", "4"])
        assert 0.0 <= cache["hit_rate"] <= 1.0 and cache["requests"] > 0
    else:
        fit = run_json(capsys, ["fit", str(path)])
        assert fit
    return rep


@needs_external
def test_mixtral_table_import_matches_the_authors_trace_and_runs_downstream(tmp_path, capsys):
    src = MIXTRAL_DIR / "decode_routing.csv"
    before = src.stat().st_mtime_ns
    out = tmp_path / "mixtral.npz"
    rep = run_json(capsys, ["import", "table", str(src), "-o", str(out), *MIXTRAL_ARGS, "--model", "Mixtral-8x7B"])
    assert rep["kind"] == "trace" and (rep["steps"], rep["streams"], rep["layers"], rep["top_k"]) == (255, 4, 32, 2)
    want, want_meta = authors_trace(MIXTRAL_DIR / "trace_decode.npz")
    got = read_trace(out)
    assert np.array_equal(np.asarray(got.topk, dtype=np.int64), want)
    assert got.meta["streams_from"]["keys"] == want_meta["streams"]  # gsm8k:0, gsm8k:1, humaneval:0, humaneval:1
    assert got.provenance == "witnessed" and got.meta["source"] == str(src.resolve())
    assert got.meta["import_command"].startswith(f"moeroof import table {src} -o {out} --columns ")
    # the authors' per-layer stream lengths, counted independently from their trace
    live = (want[..., 0] >= 0).sum(axis=0)  # (streams, layers)
    assert live[0].tolist() == want_meta["stream_lengths_per_layer"]["gsm8k:0"]
    assert src.stat().st_mtime_ns == before
    union = downstream(capsys, out, "1,2,4")
    assert union["union_per_layer"][0] == pytest.approx(2.0)
    # the trace's histogram: the authors' trace counted by hand gives the same counts
    hist = tmp_path / "mixtral.csv"
    run_json(capsys, ["import", "table", str(src), "-o", str(hist), *MIXTRAL_ARGS])
    h = read_histogram(hist)
    for layer in (0, 31):
        ids = want[:, :, layer][want[:, :, layer, 0] >= 0].ravel()
        assert np.array_equal(h.counts[layer], np.bincount(ids, minlength=8))
        assert h.tokens[layer] == int((want[:, :, layer, 0] >= 0).sum())
    downstream(capsys, hist, "1,8", trace=False)


@needs_external
def test_qwen15_table_import_matches_the_authors_trace_and_runs_downstream(tmp_path, capsys):
    src = QWEN15_DIR / "layer0_routing_by_step.csv"
    out = tmp_path / "qwen15.npz"
    rep = run_json(capsys, ["import", "table", str(src), "-o", str(out), *QWEN15_ARGS])
    assert (rep["steps"], rep["streams"], rep["layers"]) == (127, 25, 1) and rep["tokens"] == 2913
    want, _ = authors_trace(QWEN15_DIR / "trace_decode_layer0.npz")
    got = read_trace(out)
    assert np.array_equal(np.asarray(got.topk, dtype=np.int64), want)
    assert got.layer_ids == (0,) and got.meta["filters"] == {"phase": "decode"}
    assert got.meta["steps_from"]["keys"][0] == "2" and got.meta["steps_from"]["count"] == 127
    union = downstream(capsys, out, "1,8,16")
    assert union["union_per_layer"][0] == pytest.approx(4.0)
    hist = tmp_path / "qwen15.csv"
    run_json(capsys, ["import", "table", str(src), "-o", str(hist), *QWEN15_ARGS])
    downstream(capsys, hist, "1,8,25", trace=False)


QWEN3_ACT = QWEN3_DIR / "gsm_en_he_500_20250921_115824_avg_activation.csv"
QWEN3_ARGS = ["--layer-col", "Layer", "--expert-prefix", "Expert_", "--filter", "Language=English", "--top-k", "8"]


@needs_external
def test_qwen3_frequency_matrix_imports_and_runs_downstream(tmp_path, capsys):
    out = tmp_path / "qwen3.csv"
    # without a token count the import refuses and says what T would set
    assert main(["import", "matrix", str(QWEN3_ACT), "-o", str(out), *QWEN3_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tokens: ") and "bootstrap band" in err and not out.exists()
    # the author's mean router probabilities are not incidence: refused, saying why
    dist = QWEN3_DIR / "gsm_en_he_500_20250921_115824_avg_dist.csv"
    assert main(["import", "matrix", str(dist), "-o", str(out), *QWEN3_ARGS, "--tokens", "94200"]) == 2
    assert "mean router probabilities" in capsys.readouterr().err and not out.exists()

    rep = run_json(capsys, ["import", "matrix", str(QWEN3_ACT), "-o", str(out), *QWEN3_ARGS, "--tokens", "94200"])
    assert rep["kind"] == "histogram" and rep["tokens_user_given"] is True
    assert (rep["layers"], rep["experts"], rep["top_k"]) == (48, 128, 8)
    assert any("sample size" in n for n in rep["notes"])
    h = read_histogram(out)
    assert h.meta["tokens_user_given"] is True and h.provenance == "witnessed"
    # independently: the English row of layer 5 read with the csv module, × T, against the counts
    import csv

    with open(QWEN3_ACT, encoding="utf-8", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["Layer"] == "5" and r["Language"] == "English")
    freq = np.array([float(row[f"Expert_{i}"]) for i in range(128)])
    assert np.abs(h.counts[5] - freq * 94200).max() <= 0.001 * 94200  # bf16 row sums 7.995–8.005
    assert h.counts[5].sum() <= 8 * 94200 and int(np.argmax(h.counts[5])) == int(np.argmax(freq))
    union = run_json(capsys, ["union", str(out), "--batch", "1,8"])
    assert union["union_per_layer"][0] == pytest.approx(8.0, abs=0.01)
    fit = run_json(capsys, ["fit", str(out)])
    alpha = fit["models"]["dirichlet"]["params"]["alpha"]
    # no token order in a frequency matrix: a cache run needs a trace, drawn from the fitted skew
    # (projected), with the hot set pinned from the imported histogram
    trace = tmp_path / "drawn.npz"
    args = ["--experts", "128", "--top-k", "8", "--layers", "48", "--streams", "2", "--steps", "20"]
    assert main(["trace", "--family", f"dirichlet:{alpha}", *args, "-o", str(trace)]) == 0
    capsys.readouterr()
    cache = run_json(
        capsys, ["cache", str(trace), "--policy", "static", "--histogram", str(out), "--capacity-experts", "960"]
    )
    assert 0.0 < cache["hit_rate"] < 1.0


def test_sglang_and_hf_files_through_the_command(tmp_path, capsys):
    src = tmp_path / "expert_distribution_rank0_timestamp1.csv"
    src.write_text("layer_id,expert_id,count\n0,2,3\n0,0,1\n0,1,2\n", encoding="utf-8")
    out = tmp_path / "s.csv"
    rep = run_json(capsys, ["import", "sglang", str(src), "-o", str(out), "--top-k", "2", "--experts", "4"])
    assert rep["tokens_per_layer"] == [3] and read_histogram(out).counts.tolist() == [[1, 2, 3, 0]]
    run_json(capsys, ["union", str(out), "--batch", "1,2"])
    logits = np.zeros((2, 6, 4), dtype=np.float32)  # (layers, tokens, E): token t prefers t % 4, then (t+1) % 4
    for t in range(6):
        logits[:, t, t % 4] = 2.0
        logits[:, t, (t + 1) % 4] = 1.0
    np.save(tmp_path / "rl.npy", logits)
    trace = tmp_path / "rl.npz"
    rep = run_json(
        capsys,
        ["import", "hf-router-logits", str(tmp_path / "rl.npy"), "-o", str(trace), "--top-k", "2", "--batch", "2"],
    )
    assert (rep["steps"], rep["streams"], rep["layers"]) == (3, 2, 2)
    t = read_trace(trace)
    assert np.asarray(t.topk)[:, 1, 0].tolist() == [[3, 0], [0, 1], [1, 2]]  # sequence 1 = tokens 3, 4, 5
    run_json(capsys, ["cache", str(trace), "--policy", "lru", "--capacity-experts", "2"])


# ----------------------------------------------------------------------------- refusals


def test_import_refusals_exit_2_with_one_error_line(tmp_path, capsys):
    src = tmp_path / "t.csv"
    src.write_text("s,t,e0,e1\n0,0,1,2\n0,1,2,9\n", encoding="utf-8")
    out = tmp_path / "t.npz"
    base = ["import", "table", str(src), "-o", str(out), "--columns", "stream=s,step=t", "--experts", "4"]
    cases = [
        ([*base, "--expert-cols", "e0,e1", "--top-k", "2"], f"error: {src}:3: e1: expert id 9 not in [0, 4)"),
        ([*base, "--expert-cols", "e0", "--top-k", "2"], "error: --expert-cols: 1 columns but top_k K=2"),
        ([*base, "--expert-col", "e0", "--top-k", "2"], "error: --expert-col: a long table needs --slot-col"),
        ([*base, "--expert-cols", "e0,e1", "--top-k", "0"], "error: --top-k: '0' is not a positive integer"),
        (
            [
                "import",
                "table",
                str(src),
                "-o",
                str(out),
                "--columns",
                "stream=s",
                "--expert-cols",
                "e0",
                "--experts",
                "4",
                "--top-k",
                "1",
            ],
            "error: --columns: missing step=COL",
        ),
        (
            [*base[:4], str(tmp_path / "t.txt"), *base[5:], "--expert-cols", "e0", "--top-k", "1"],
            "error: -o: expected a .npz",
        ),
    ]
    for argv, want in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(want), (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err
        assert not out.exists()
    ok = [*base, "--expert-cols", "e0,e1", "--top-k", "2", "--filter", "t=0"]
    assert main(ok) == 0
    first = out.read_bytes()
    capsys.readouterr()
    assert main(ok) == 2 and "exists (pass --force" in capsys.readouterr().err
    assert out.read_bytes() == first
    assert main([*ok, "--force"]) == 0
