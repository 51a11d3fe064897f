"""``moeroof bench``: grouped (coalesced) compute against per-token serial compute (ticket D's
parity test), the bench on tiny sizes, bad flags refused before any work, no scratch left."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moeroof.witness.bench as bench_mod
from moeroof.cli import main
from moeroof.core.paths import DATA_DIR
from moeroof.models.plan import Workload, plan, routing_from_spec
from moeroof.witness.bench import (
    StackShape,
    bench_model,
    decode_step,
    expert_ffn,
    moe_layer_grouped,
    moe_layer_serial,
    run_bench,
)

TINY = StackShape(experts=8, layers=2, d_model=32, d_ff=64)
TINY_FLAGS = [
    "--experts",
    "8",
    "--layers",
    "2",
    "--top-k",
    "2",
    "--d-model",
    "32",
    "--d-ff",
    "64",
    "--steps",
    "1",
    "--quiet",
]
KEYS = {
    "batch",
    "mode",
    "step_seconds",
    "net_tok_s",
    "per_agent_tok_s",
    "bytes_read_per_step",
    "union_per_layer",
    "coalescing_ratio",
    "read_path",
    "machine",
    "date",
    "command",
}


def _layer_inputs(rng, b, e, k, d, f, integer=False):
    if integer:
        # small integers: every product and partial sum is an integer below 2^24, exact in float32
        h = rng.integers(-3, 4, size=(b, d)).astype(np.float32)
        weights = [
            (rng.integers(-2, 3, size=(d, f)).astype(np.float32), rng.integers(-2, 3, size=(f, d)).astype(np.float32))
            for _ in range(e)
        ]
        gates = rng.choice(np.float32([0.25, 0.5, 1.0]), size=(b, k))  # powers of two: exact products
    else:
        h = rng.standard_normal((b, d), dtype=np.float32)
        weights = [
            (
                rng.standard_normal((d, f), dtype=np.float32) / np.sqrt(d),
                rng.standard_normal((f, d), dtype=np.float32) / np.sqrt(f),
            )
            for _ in range(e)
        ]
        gates = rng.dirichlet(np.ones(k), size=b).astype(np.float32)
    topk = np.stack([rng.choice(e, size=k, replace=False) for _ in range(b)])
    return h, topk, gates, weights


def _rowwise(x, w1, w2):
    """The same FFN computed one row at a time: each row's dot products are summed as in the
    one-row call of the serial path, whatever BLAS does for many rows."""
    return np.concatenate([expert_ffn(x[i : i + 1], w1, w2) for i in range(x.shape[0])], axis=0)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 12), e=st.integers(1, 10), k_frac=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_grouped_equals_serial_exactly_with_the_same_accumulation_order(b, e, k_frac, seed):
    # Ticket D parity: with a row-wise kernel both paths compute each (token, expert) product
    # identically, so equality is exact: the dispatch, the gates and the order in which a
    # token's K contributions are added (ascending expert id) are the same.
    k = 1 + int(k_frac * (e - 1))
    rng = np.random.default_rng(seed)
    h, topk, gates, weights = _layer_inputs(rng, b, e, k, 8, 16)
    load = weights.__getitem__
    np.testing.assert_array_equal(
        moe_layer_grouped(h, topk, gates, load, _rowwise), moe_layer_serial(h, topk, gates, load, _rowwise)
    )


def test_grouped_blas_matches_serial_within_float32_rounding(rng):
    # With numpy's BLAS the grouped matmul (gemm over n rows) and the one-row matmul sum each
    # dot product in a different blocked order, so float32 results differ by rounding only:
    # tolerance 1e-5 relative to the output's scale (d = 256, f = 512: about 50 ε₃₂ of slack
    # over the observed ~5e-7; a wrong expert or gate would be off by O(1)).
    h, topk, gates, weights = _layer_inputs(rng, 24, 16, 4, 256, 512)
    load = weights.__getitem__
    g = moe_layer_grouped(h, topk, gates, load)
    s = moe_layer_serial(h, topk, gates, load)
    assert np.max(np.abs(g - s)) <= 1e-5 * np.max(np.abs(s))


def test_grouped_blas_equals_serial_exactly_on_integer_data(rng):
    # every partial sum is an integer < 2^24, so any summation order gives the same float32
    h, topk, gates, weights = _layer_inputs(rng, 24, 16, 4, 64, 128, integer=True)
    load = weights.__getitem__
    np.testing.assert_array_equal(moe_layer_grouped(h, topk, gates, load), moe_layer_serial(h, topk, gates, load))


def test_loads_per_layer_are_bk_serial_and_the_union_grouped(rng):
    h, topk, gates, weights = _layer_inputs(rng, 16, 8, 3, 8, 8)
    calls = {"serial": [], "grouped": []}
    for name, fn in (("serial", moe_layer_serial), ("grouped", moe_layer_grouped)):
        fn(h, topk, gates, lambda e, c=calls[name]: (c.append(e), weights[e])[1])
    assert len(calls["serial"]) == 16 * 3
    assert calls["grouped"] == sorted(set(topk.ravel().tolist()))  # the union, once each, ascending


def test_decode_step_modes_agree(rng):
    h, topk, gates, weights = _layer_inputs(rng, 6, 8, 2, 16, 32)
    topk3 = np.stack([topk, np.roll(topk, 1, axis=0)], axis=1)
    gates3 = np.stack([gates, gates[::-1]], axis=1)
    load_layer = lambda layer: weights.__getitem__  # noqa: E731
    a = decode_step(h, topk3, gates3, load_layer, "coalesced")
    b = decode_step(h, topk3, gates3, load_layer, "uncoalesced")
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="mode"):
        decode_step(h, topk3, gates3, load_layer, "fused")


def test_stack_shape_sizes():
    s = StackShape(experts=4, layers=3, d_model=10, d_ff=10)
    assert s.expert_bytes == 800 and s.slot_bytes == 4096 and s.file_bytes == 12 * 4096
    assert s.offset(2, 1) == 9 * 4096 and s.flops_per_token_expert == 400
    with pytest.raises(ValueError):
        StackShape(0, 1, 1, 1)


@pytest.mark.parametrize("read_path", ["auto", "fadvise"])
def test_bench_tiny_counts_what_it_reads(tmp_path, read_path):
    rep = run_bench(TINY, 2, [1, 3, 8], steps=2, warmup_steps=1, scratch_dir=tmp_path, read_path=read_path, seed=1)
    assert _empty(tmp_path)
    assert KEYS <= set(rep)
    assert rep["read_path"] == ("fadvise" if read_path == "fadvise" else rep["read_path"])
    assert rep["read_path"] in ("o_direct", "fadvise") and rep["provenance"] == "witnessed"
    for i, b in enumerate(rep["batch"]):
        u = rep["union_per_layer"][i]
        assert 2 <= u <= min(8, 2 * b)
        assert rep["coalescing_ratio"][i] == pytest.approx(b * 2 / u)
        assert rep["net_tok_s"][i] == pytest.approx(b / rep["step_seconds"][i])
        assert rep["per_agent_tok_s"][i] == pytest.approx(1 / rep["step_seconds"][i])
        reads = rep["reads_per_step"][i]
        assert rep["bytes_read_per_step"][i] == pytest.approx(reads * TINY.slot_bytes)
        if rep["mode"][i] == "uncoalesced":
            assert reads == b * 2 * TINY.layers
        else:
            assert reads == pytest.approx(u * TINY.layers)
    assert rep["mode_parity_max_abs_diff"] < 1e-4


def test_bench_from_a_trace(tmp_path):
    from moeroof.data.io import read_trace

    tr = read_trace(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz")
    shape = StackShape(tr.experts, 2, 16, 16)
    rep = run_bench(
        shape,
        tr.top_k,
        [1, 4],
        modes=("coalesced",),
        trace=np.asarray(tr.topk),
        trace_label="qwen",
        steps=1,
        warmup_steps=0,
        scratch_dir=tmp_path,
    )
    assert rep["routing"] == "qwen" and rep["mode"] == ["coalesced", "coalesced"]
    assert _empty(tmp_path)


def test_bench_interrupted_leaves_no_scratch(tmp_path, monkeypatch):
    real = bench_mod.decode_step

    def interrupted(*a, **k):
        assert len(list(tmp_path.iterdir())) == 1
        real(*a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_mod, "decode_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_bench(TINY, 2, [1, 2], scratch_dir=tmp_path)
    assert _empty(tmp_path)
    rc = main(["bench", *TINY_FLAGS, "--scratch-dir", str(tmp_path)])
    assert rc == 130 and _empty(tmp_path)


def _empty(d: Path) -> bool:
    return list(d.iterdir()) == []


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch", "0,2"], "--batch: '0' is not a positive integer"),
        (["--top-k", "9"], "K=9 exceeds --experts E=8"),
        (["--experts", "1000000", "--d-model", "4096", "--d-ff", "4096"], "of scratch in"),
        (["--batch", "100000000", "--d-model", "4096"], "of memory but only"),
        (["--routing", "zipf:x"], "zipf:S"),
        (["--routing", "powerlaw"], "uniform or zipf:S"),
        (["--trace", "x.npz", "--routing", "uniform"], "either --routing or --trace"),
        (["--steps", "0"], "--steps"),
    ],
)
def test_bad_flags_are_refused_before_any_work(tmp_path, capsys, flags, message):
    out = tmp_path / "rep.json"
    base = ["--experts", "8", "--top-k", "2", "--layers", "2", "--d-model", "32", "--d-ff", "64", "--quiet"]
    rc = main(["bench", *base, *flags, "--scratch-dir", str(tmp_path), "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert _empty(tmp_path)


def test_cli_json_and_output_file(tmp_path, capsys):
    scratch = tmp_path / "s"
    scratch.mkdir()
    out = tmp_path / "rep.json"
    rc = main(
        [
            "bench",
            *TINY_FLAGS,
            "--batch",
            "1,4",
            "--routing",
            "zipf:1",
            "--json",
            "--scratch-dir",
            str(scratch),
            "--output",
            str(out),
        ]
    )
    assert rc == 0 and _empty(scratch)
    rep = json.loads(capsys.readouterr().out)
    assert KEYS <= set(rep) and rep == json.loads(out.read_text())
    assert rep["batch"] == [1, 1, 4, 4] and rep["mode"] == ["uncoalesced", "coalesced"] * 2
    assert rep["command"].startswith("moeroof bench --experts 8") and "--routing zipf:1" in rep["command"]
    assert main(["bench", *TINY_FLAGS, "--batch", "2", "--mode", "coalesced", "--scratch-dir", str(scratch)]) == 0
    text = capsys.readouterr().out
    assert "read path:" in text and "B·K/U" in text


def test_bench_model_predicts_through_the_roofline(tmp_path):
    rep = run_bench(TINY, 2, [1, 4], steps=1, warmup_steps=0, scratch_dir=tmp_path)
    m = bench_model(rep)
    assert m.expert_bytes == TINY.expert_bytes and m.flops_per_token == TINY.layers * 2 * 4 * 32 * 64
    from moeroof.data.presets import load_hardware

    p = plan(
        m,
        load_hardware("nvme-gen4"),
        Workload(context_tokens=0, overlap="sum"),
        routing_from_spec("uniform", m),
        [1, 4],
    )
    assert np.all(p.net_tok_s > 0)
    # the model's union for uniform routing: E(1 − (1 − K/E)^B)
    np.testing.assert_allclose(p.union_per_layer, 8 * (1 - (1 - 2 / 8) ** np.array([1, 4])))
