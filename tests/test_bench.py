"""``moeroof bench``: grouped (coalesced) compute against per-token serial compute (the
serial-parity test), the bench on tiny sizes, bad flags refused before any work, no scratch left."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moeroof.measure.bench as bench_mod
from moeroof.cli import main
from moeroof.core.paths import DATA_DIR
from moeroof.measure.bench import (
    StackShape,
    bench_model,
    decode_step,
    expert_ffn,
    moe_layer_grouped,
    moe_layer_serial,
    run_bench,
)
from moeroof.models.plan import Workload, plan, routing_from_spec

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
    # Serial parity: with a row-wise kernel both paths compute each (token, expert) product
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
        # a size the disk or memory cannot hold names the flags that set it (it said
        # "stack size (experts × layers × expert bytes)" and "batch/d_model/d_ff/steps")
        (["--experts", "1000000", "--d-model", "4096", "--d-ff", "4096"], "--experts/--layers/--d-model/--d-ff: "),
        (["--batch", "100000000"], "--batch: 100000000 is more than the 16777216 allowed"),
        (["--batch", "16777216", "--d-model", "4096"], "--batch/--d-model/--d-ff/--steps: needs "),
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


# ----------------------------------------------------------------------------- engine terms


def _report(batch=(1, 2, 4, 8, 16, 32), routing="uniform"):
    """A bench report with only the keys predict_bench reads (the default stack's sizes)."""
    rows = [(b, m) for b in batch for m in ("uncoalesced", "coalesced")]
    shape = StackShape(experts=32, layers=4, d_model=1024, d_ff=1024)
    return {
        "experts": 32,
        "top_k": 4,
        "layers": 4,
        "expert_bytes": shape.expert_bytes,
        "flops_per_token": 4 * 4 * shape.flops_per_token_expert,
        "routing": routing,
        "batch": [b for b, _ in rows],
        "mode": [m for _, m in rows],
        "net_tok_s": [10.0 * b for b, _ in rows],
    }


@settings(max_examples=30, deadline=None)
@given(
    c0=st.floats(0, 1.0),
    c1=st.floats(0, 0.1),
    overlap=st.sampled_from(["sum", "max"]),
    routing=st.sampled_from(["uniform", "zipf:1.2"]),
)
def test_a_prediction_with_engine_terms_is_never_faster(c0, c1, overlap, routing):
    from dataclasses import replace

    from moeroof.data.presets import load_hardware

    hw = load_hardware("nvme-gen4")
    rep = _report(routing=routing)
    bare = bench_mod.predict_bench(rep, hw, overlap=overlap)
    eng = bench_mod.predict_bench(
        rep, replace(hw, engine_seconds_per_step=c0, engine_seconds_per_agent_token=c1), overlap=overlap
    )
    assert np.all(np.asarray(eng["predicted_net_tok_s"]) <= np.asarray(bare["predicted_net_tok_s"]) * (1 + 1e-12))
    assert np.all(np.asarray(eng["predicted_step_seconds"]) >= np.asarray(bare["predicted_step_seconds"]))
    # the engine term reported per row is c0 + c1·B, and the engine terms used are named
    np.testing.assert_allclose(eng["terms_seconds"]["engine"], c0 + c1 * np.asarray(rep["batch"]), rtol=1e-12)
    assert eng["engine"]["engine_seconds_per_step"] == c0 and eng["engine"]["engine_seconds_per_agent_token"] == c1
    assert bare["engine"]["provenance"]["engine_seconds_per_step"] == "assumed"


def test_a_per_step_engine_cost_makes_predicted_tok_s_rise_with_batch():
    from dataclasses import replace

    from moeroof.data.presets import load_hardware

    # a box whose disk and memory are effectively free: the step is the engine term alone
    hw = replace(
        load_hardware("nvme-gen4"),
        bw_ssd_bytes_per_s=(1e30,) * 4,
        bw_mem_bytes_per_s=1e30,
        flops_per_s=1e30,
        engine_seconds_per_step=1e-3,
        engine_seconds_per_agent_token=1e-4,
    )
    p = bench_mod.predict_bench(_report(), hw)
    b = np.asarray(p["batch"])
    np.testing.assert_allclose(p["predicted_net_tok_s"], b / (1e-3 + 1e-4 * b), rtol=1e-9)
    assert set(p["bound"]) == {"engine"}
    for mode in ("uncoalesced", "coalesced"):
        net = np.asarray(p["predicted_net_tok_s"])[np.asarray(p["mode"]) == mode]
        assert np.all(np.diff(net) > 0)


def test_predict_bench_matches_the_step_model(tmp_path):
    from moeroof.data.presets import load_hardware
    from moeroof.models.plan import step_terms

    hw = load_hardware("nvme-gen4")
    rep = _report(batch=(1, 4, 16))
    for overlap in ("sum", "max"):
        p = bench_mod.predict_bench(rep, hw, overlap=overlap)
        model = bench_model(rep)
        for mode in ("uncoalesced", "coalesced"):
            t = step_terms(
                model,
                hw,
                Workload(context_tokens=0, overlap=overlap),
                routing_from_spec("uniform", model),
                [1, 4, 16],
                coalesced=mode == "coalesced",
            )
            rows = np.asarray(p["mode"]) == mode
            np.testing.assert_allclose(np.asarray(p["predicted_step_seconds"])[rows], t["step_seconds"], rtol=1e-12)
            assert list(np.asarray(p["bound"])[rows]) == list(t["bound"])


def test_measure_engine_times_the_bench_loop_at_each_batch():
    from moeroof.measure.bench import ENGINE_BATCH, measure_engine

    e = measure_engine(repeats=2, layers=2, top_k=2, experts=8)
    assert e.batch == list(ENGINE_BATCH) and len(e.step_seconds) == len(ENGINE_BATCH)
    # the terms are the line through its own timings (their values follow the box's load: a busy
    # box can time B = 1 slower than B = 16, and the fit then keeps the slope at 0)
    from moeroof.measure.calibrate import fit_engine_line

    fitted = fit_engine_line(e.batch, e.step_seconds)
    assert (e.seconds_per_step, e.seconds_per_agent_token, e.rms_residual_seconds) == pytest.approx(fitted)
    assert e.seconds_per_step >= 0 and e.seconds_per_agent_token >= 0
    assert all(t > 0 for t in e.step_seconds) and e.wall_seconds < 10
    assert "L = 2 layers, K = 2, E = 8" in e.source and "this box" in e.source
    assert set(e.extra["other_modes"]) == {"coalesced"}
    with pytest.raises(ValueError, match="mode"):
        measure_engine(mode="fused")


def test_cli_bench_predicts_from_a_calibration_and_names_the_engine_terms(tmp_path, capsys):
    preset = (DATA_DIR / "presets" / "hardware" / "nvme-gen4.toml").read_text()
    lines = [ln for ln in preset.splitlines() if not ln.startswith("engine_seconds")]
    lines += [
        'engine_seconds_per_step = { value = 30, unit = "us", source = "a test", witnessed = true }',
        'engine_seconds_per_agent_token = { value = 60, unit = "us", source = "a test", witnessed = true }',
    ]
    cal = tmp_path / "cal.toml"
    cal.write_text("\n".join(lines) + "\n")
    scratch = tmp_path / "s"
    scratch.mkdir()
    flags = ["bench", *TINY_FLAGS, "--batch", "1,4", "--scratch-dir", str(scratch), "--calibration", str(cal)]
    assert main([*flags, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    pred = rep["prediction"]
    assert pred["engine"]["engine_seconds_per_step"] == pytest.approx(30e-6)
    assert pred["engine"]["provenance"]["engine_seconds_per_agent_token"] == "witnessed"
    assert len(pred["predicted_net_tok_s"]) == len(rep["batch"]) and "--calibration" in rep["command"]
    assert main(flags) == 0
    text = capsys.readouterr().out
    assert "predicted net tok/s" in text and "engine terms used: 30.0 us per step + 60.0 us per agent-token" in text
    # a calibration that does not load is refused before any work
    assert main([*flags[:-1], str(tmp_path / "nope.toml")]) == 2 and _empty(scratch)
