"""The command line: a histogram of an import made without ``--model``,
``trace --routing HIST`` (a histogram-only capture's honest way to ``cache`` and ``mrc``), a
proper ``--format csv`` table for every command (checked against the JSON of the same run), hit
rates in % in the ``cache`` / ``mrc`` tables, ``plan``'s infeasible rows without multiples, and
``--report-output`` where ``-o`` is the data a command writes."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest

import csvout  # noqa: I001  (tests/csvout.py: CSV output past its run record)
from moeroof.cli import main
from moeroof.cli.app import build_parser
from moeroof.core.paths import DATA_DIR
from moeroof.data.importers import UNKNOWN_MODEL
from moeroof.data.io import read_histogram, read_trace, write_histogram, write_trace
from moeroof.models.routing import Uniform, histogram_from_trace, sample_trace

HIST = str(DATA_DIR / "histograms" / "deepseek-v3-like.csv")
TRACE = str(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz")


def run(capsys, argv: list[str]) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def run_json(capsys, argv: list[str]) -> dict:
    return csvout.strip_run(json.loads(run(capsys, [*argv, "--json"])))


def run_csv(capsys, argv: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    text = run(capsys, [*argv, "--format", "csv"])
    rows = csvout.rows(text)
    assert rows, "no CSV printed"
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def run_error(capsys, argv: list[str]) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def num(text: str) -> float:
    return float(text)


# ----------------------------------------------------------------------------- gap 1: no --model


def routing_table(tmp_path):
    """A wide per-token table: 2 streams × 3 steps × 2 layers, E = 4, K = 2."""
    src = tmp_path / "routing.csv"
    lines = ["prompt,token,layer,e0,e1"]
    for stream in range(2):
        for step in range(3):
            for layer in range(2):
                a = (stream + step + layer) % 4
                lines.append(f"p{stream},{step},{layer},{a},{(a + 1) % 4}")
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return src


TABLE_ARGS = ["--columns", "stream=prompt,step=token,layer=layer", "--expert-cols", "e0,e1", "--experts", "4"]
TABLE_ARGS += ["--top-k", "2"]


def test_histogram_of_a_trace_imported_without_model(tmp_path, capsys):
    # the audit's reproduction: `import table … -o mx.npz` (no --model), then `histogram mx.npz -o mx.csv`
    src = routing_table(tmp_path)
    trace = tmp_path / "mx.npz"
    run(capsys, ["import", "table", str(src), "-o", str(trace), *TABLE_ARGS])
    assert read_trace(trace).meta["model"] == UNKNOWN_MODEL  # import writes the key whatever the format
    before = trace.read_bytes()
    out = tmp_path / "mx.csv"  # mx.json beside it is the histogram's sidecar, not the .npz's (it has none)
    rep = run_json(capsys, ["histogram", str(trace), "-o", str(out)])
    h = read_histogram(out)
    assert h.meta["model"] == UNKNOWN_MODEL and rep["model"] == UNKNOWN_MODEL
    assert h.tokens.tolist() == [6, 6] and trace.read_bytes() == before


def test_histogram_falls_back_when_the_meta_has_no_model(tmp_path, capsys):
    topk = np.array([[[[0, 1]], [[2, 3]]]], dtype=np.int32)
    imported = tmp_path / "old.npz"  # an import written before every import named a model
    write_trace(imported, topk, {"experts": 4, "top_k": 2, "source": "x", "imported_from": "table"})
    run(capsys, ["histogram", str(imported), "-o", str(tmp_path / "old.csv")])
    assert read_histogram(tmp_path / "old.csv").meta["model"] == UNKNOWN_MODEL
    plain = tmp_path / "plain.npz"
    write_trace(plain, topk, {"experts": 4, "top_k": 2, "source": "x"})
    run(capsys, ["histogram", str(plain), "-o", str(tmp_path / "plain.csv")])
    assert read_histogram(tmp_path / "plain.csv").meta["model"] == "unknown (not in the trace's meta)"


def test_every_import_format_writes_a_model_key(tmp_path, capsys):
    matrix = tmp_path / "m.csv"
    matrix.write_text("Layer,Expert_0,Expert_1,Expert_2,Expert_3\n0,3,1,2,2\n", encoding="utf-8")
    run(
        capsys,
        ["import", "matrix", str(matrix), "-o", str(tmp_path / "mo.csv"), "--layer-col", "Layer"]
        + ["--expert-prefix", "Expert_", "--top-k", "2"],
    )
    sgl = tmp_path / "expert_distribution.csv"
    sgl.write_text("layer_id,expert_id,count\n0,2,3\n0,0,1\n0,1,2\n", encoding="utf-8")
    run(capsys, ["import", "sglang", str(sgl), "-o", str(tmp_path / "so.csv"), "--top-k", "2", "--experts", "4"])
    logits = np.zeros((1, 4, 4), dtype=np.float32)
    logits[0, np.arange(4), np.arange(4)] = 1.0
    np.save(tmp_path / "rl.npy", logits)
    run(
        capsys, ["import", "hf-router-logits", str(tmp_path / "rl.npy"), "-o", str(tmp_path / "ho.npz"), "--top-k", "2"]
    )
    run(capsys, ["import", "table", str(routing_table(tmp_path)), "-o", str(tmp_path / "to.csv"), *TABLE_ARGS])
    for hist in ("mo.csv", "so.csv", "to.csv"):
        assert read_histogram(tmp_path / hist).meta["model"] == UNKNOWN_MODEL, hist
    assert read_trace(tmp_path / "ho.npz").meta["model"] == UNKNOWN_MODEL
    named = tmp_path / "named.npz"
    run(capsys, ["import", "table", str(routing_table(tmp_path)), "-o", str(named), *TABLE_ARGS, "--model", "Mix"])
    assert read_trace(named).meta["model"] == "Mix"


# ----------------------------------------------------------------------------- gap 2: trace --routing


E, K, L = 32, 3, 4


def skewed_histogram(tmp_path):
    """A witnessed-looking histogram with skewed layers: expert 5 never fires in any layer (a
    count of 0) and layer 3 has one very hot expert; counts are the incidence of a drawn trace (exact sums)."""
    rng = np.random.default_rng(11)
    w = rng.gamma(0.3, size=(L, E)) + 1e-3
    w[:, 5] = 0.0
    w[3, 0] = 50.0 * w[3].sum()
    topk = sample_trace(Uniform(E, K), 3000, 1, L, rng, popularity=w)
    counts = histogram_from_trace(topk, E)
    path = tmp_path / "h.csv"
    write_histogram(
        path,
        counts,
        tokens=3000,
        experts=E,
        top_k=K,
        model="skewed-moe",
        source="test",
        layer_ids=[3, 4, 5, 6],
        provenance="witnessed",
    )
    # π as plan reads it: count / T, with the Good–Turing unseen share (N₁/N of a layer's
    # picks, N₁ the experts picked once) spread evenly over the experts never picked
    c = counts.astype(float)
    n, n1, n0 = c.sum(axis=1), (c == 1).sum(axis=1), (c == 0).sum(axis=1)
    p0 = np.where(n0 > 0, n1 / n, 0.0)
    pi = c / 3000.0 * (1.0 - p0)[:, None]
    pi = np.where(c == 0, (K * p0 / np.maximum(n0, 1))[:, None], pi)
    return path, pi


def test_trace_routing_draws_the_histograms_frequencies(tmp_path, capsys):
    """With ``--independent``, every token of the drawn trace includes expert i of layer l with
    probability π_li (the histogram's frequency), independently: the drawn frequency over T tokens is binomial with
    standard error sqrt(π(1 − π)/T). At T = 24,000 every one of the 128 (layer, expert) cells
    lies within 4.5 standard errors (each beyond with probability 6.8e-6, so the family of 128
    with about 1e-3), and the mean squared z-score — a χ² with about 120 degrees of freedom over
    its dof, standard deviation 0.13 — within 0.6 of 1. The seed is fixed, so the test is exact."""
    hist, pi = skewed_histogram(tmp_path)
    out = tmp_path / "drawn.npz"
    rep = run_json(
        capsys,
        ["trace", "--routing", str(hist), "--streams", "16", "--steps", "1500", "--seed", "3", "--independent"]
        + ["-o", str(out)],
    )
    t = read_trace(out)
    assert t.topk.shape == (1500, 16, L, K) and (t.experts, t.top_k) == (E, K)
    tokens = 1500 * 16
    freq = histogram_from_trace(np.asarray(t.topk), E) / tokens
    se = np.sqrt(pi * (1 - pi) / tokens)
    # expert 5 never fired in the file: drawn at its layer's unseen share, never at a raw 0
    assert np.all(pi[:, 5] > 0) and np.all(freq[:, 5] > 0)
    live = se > 0
    z = (freq[live] - pi[live]) / se[live]
    assert np.max(np.abs(z)) < 4.5, np.max(np.abs(z))
    assert abs(np.mean(z**2) - 1.0) < 0.6, np.mean(z**2)
    assert rep["frequencies"]["weights_max_error"] < 1e-6
    assert rep["frequencies"]["max_abs_deviation"] == pytest.approx(np.max(np.abs(freq - pi)), abs=1e-12)
    # the sidecar says where the popularity came from, and what is synthetic
    meta = t.meta
    assert meta["derived_from"] == str(hist) and meta["provenance"] == "projected"
    assert meta["routing_provenance"] == "witnessed"
    assert "witnessed popularity" in meta["provenance_detail"] and "synthetic order" in meta["provenance_detail"]
    assert meta["model"] == "skewed-moe" and list(meta["layer_ids"]) == [3, 4, 5, 6]
    assert meta["source"].startswith(f"moeroof trace --routing {hist}") and "--experts" not in meta["source"]
    assert meta["knobs"]["family"] == "histogram" and meta["knobs"]["routing"] == str(hist)
    # the same knobs and seed give the same bytes; the trace replays through cache and mrc
    again = tmp_path / "again.npz"
    run(
        capsys,
        [
            "trace",
            "--routing",
            str(hist),
            "--streams",
            "16",
            "--steps",
            "1500",
            "--seed",
            "3",
            "--independent",
            "-o",
            str(again),
        ],
    )
    assert again.read_bytes() == out.read_bytes()
    cache = run_json(capsys, ["cache", str(out), "--policy", "lru", "--capacity-experts", "40"])
    assert cache["provenance"] == "projected" and 0 < cache["hit_rate"] < 1


def test_trace_routing_with_stickiness_keeps_the_histogram_shape(tmp_path, capsys):
    hist, _ = skewed_histogram(tmp_path)
    plain, sticky = tmp_path / "p.npz", tmp_path / "s.npz"
    base = ["trace", "--routing", str(hist), "--streams", "4", "--steps", "200"]
    a = run_json(capsys, [*base, "-o", str(plain)])
    b = run_json(capsys, [*base, "--rho", "0.6", "--locality", "5", "-o", str(sticky)])
    assert np.mean(b["consecutive_overlap"]) > np.mean(a["consecutive_overlap"]) + 0.3
    assert read_trace(sticky).meta["knobs"]["rho"] == 0.6 and "--rho 0.6 --locality 5" in b["source"]
    assert any("the frequencies follow the knobs" in n for n in b["notes"])


def test_cache_and_mrc_refuse_a_histogram_and_say_what_to_do(tmp_path, capsys):
    hist, _ = skewed_histogram(tmp_path)
    for argv in (["cache", str(hist), "--policy", "lru", "--capacity-experts", "8"], ["mrc", str(hist)]):
        err = run_error(capsys, argv)
        assert "got a histogram .csv" in err and f"moeroof trace --routing {hist}" in err


def test_trace_routing_refusals(tmp_path, capsys):
    hist, _ = skewed_histogram(tmp_path)
    base = ["trace", "--routing", str(hist), "--streams", "2", "--steps", "3"]
    assert "--experts" in run_error(capsys, [*base, "--experts", "64", "-o", str(tmp_path / "a.npz")])
    assert "--layers" in run_error(capsys, [*base, "--layers", "2", "-o", str(tmp_path / "a.npz")])
    assert "--rho-profile" in run_error(capsys, [*base, "--rho-profile", "0.1,0.2", "-o", str(tmp_path / "a.npz")])
    err = run_error(
        capsys, ["trace", "--routing", "zipf:0.9", "--streams", "2", "--steps", "3", "-o", str(tmp_path / "a.npz")]
    )
    assert "--family zipf:0.9" in err
    # a .npy's sidecar would be the histogram's own
    before = (tmp_path / "h.json").read_bytes()
    assert "-o" in run_error(capsys, [*base, "-o", str(tmp_path / "h.npy"), "--force"])
    assert (tmp_path / "h.json").read_bytes() == before
    assert main(["trace", "--family", "uniform", "--routing", str(hist), "--streams", "2", "--steps", "3"]) == 2
    assert not (tmp_path / "a.npz").exists()
    capsys.readouterr()


# ----------------------------------------------------------------------------- gap 3: --format csv


def test_every_command_takes_a_format_and_a_report_file():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # noqa: SLF001
    parsers = dict(sub.choices)
    imp = parsers.pop("import")
    inner = next(a for a in imp._actions if a.dest == "import_format")  # noqa: SLF001
    parsers.update({f"import {k}": v for k, v in inner.choices.items()})
    parsers.pop("report")  # the report command's owner gives it its own
    for name, p in parsers.items():
        flags = {s for a in p._actions for s in a.option_strings}  # noqa: SLF001
        assert {"--format", "--json"} <= flags, name
        data_out = next((a for a in p._actions if "--output" in a.option_strings and a.dest == "output"), None)  # noqa: SLF001
        if data_out is not None and name != "bench":  # -o is the data written: the report has its own flag
            assert "--report-output" in flags and "--report-output" in p.format_help(), name
        else:
            assert "--output" in flags, name


def test_fit_csv_one_row_per_layer_and_model(capsys):
    argv = ["fit", HIST, "--bootstrap", "5", "--gof-sims", "4"]
    rep = run_json(capsys, argv)
    header, rows = run_csv(capsys, argv)
    assert header[:7] == ["layer", "model", "chosen", "parameter", "estimate", "ci_low", "ci_high"]
    assert {"aic", "gof_pvalue", "log_likelihood"} <= set(header)
    assert len(rows) == 3 * (rep["layers"] + 1)
    pooled = {r["model"]: r for r in rows if r["layer"] == "pooled"}
    z = rep["models"]["zipf"]
    assert num(pooled["zipf"]["estimate"]) == pytest.approx(z["params"]["s"])
    assert [num(pooled["zipf"]["ci_low"]), num(pooled["zipf"]["ci_high"])] == pytest.approx(z["ci"]["s"])
    assert num(pooled["dirichlet"]["aic"]) == pytest.approx(rep["models"]["dirichlet"]["aic"])
    assert pooled[rep["chosen"]]["chosen"] == "True"
    layer0 = {r["model"]: r for r in rows if r["layer"] == "0"}
    assert num(layer0["zipf"]["gof_pvalue"]) == pytest.approx(rep["per_layer"][0]["zipf"]["gof_pvalue"])


def test_cache_csv_and_percent_table(capsys):
    argv = ["cache", TRACE, "--policy", "lru", "--capacity-experts", "3000"]
    rep = run_json(capsys, argv)
    header, rows = run_csv(capsys, argv)
    assert header[:2] == ["policy", "capacity_experts"] and len(rows) == 1
    row = rows[0]
    assert (row["policy"], int(row["hits"]), int(row["misses"])) == ("lru", rep["hits"], rep["misses"])
    assert num(row["hit_rate"]) == pytest.approx(rep["hit_rate"])  # a fraction, as in the JSON
    table = run(capsys, argv)
    assert "hit rate %" in table
    line = table.splitlines()[table.splitlines().index(next(x for x in table.splitlines() if "hit rate %" in x)) + 2]
    assert f"{100 * rep['hit_rate']:.2f}" in line.split()


def test_mrc_table_prints_percent(capsys):
    rep = run_json(capsys, ["mrc", TRACE])
    table = run(capsys, ["mrc", TRACE]).splitlines()
    head = next(i for i, x in enumerate(table) if x.lstrip().startswith("capacity"))
    assert "hit rate %" in table[head] and "che %" in table[head]
    last = table[head + 2 + 10].split()  # the 11th pick is the largest capacity
    assert int(last[0]) == rep["capacity_experts"][-1]
    assert num(last[1]) == pytest.approx(100 * rep["hit_rate"][-1], abs=0.006)
    assert num(last[2]) == pytest.approx(100 * rep["che_hit_rate"][-1], abs=0.006)


def test_presets_csv_one_row_per_preset(capsys):
    rep = run_json(capsys, ["presets"])
    header, rows = run_csv(capsys, ["presets"])
    assert header[:3] == ["kind", "name", "description"] and "not_witnessed" in header
    assert len(rows) == len(rep["models"]) + len(rep["hardware"])
    glm = next(r for r in rows if r["name"] == "glm-5.2")
    assert (glm["kind"], int(glm["experts"]), num(glm["expert_bytes"])) == (
        "model",
        rep["models"]["glm-5.2"]["experts"],
        rep["models"]["glm-5.2"]["expert_bytes"],
    )
    box = next(r for r in rows if r["name"] == "nvme-gen4")
    assert num(box["ram_bytes"]) == rep["hardware"]["nvme-gen4"]["ram_bytes"] and box["link"] == "ssd"


def test_histogram_trace_and_import_csv(tmp_path, capsys):
    rep = run_json(capsys, ["histogram", TRACE, "-o", str(tmp_path / "a.csv")])
    header, rows = run_csv(capsys, ["histogram", TRACE, "-o", str(tmp_path / "b.csv")])
    assert header[:4] == ["layer", "tokens", "picks", "experts_fired"] and len(rows) == rep["layers"]
    assert [int(r["tokens"]) for r in rows] == rep["tokens_per_layer"]
    assert sum(int(r["picks"]) for r in rows) == rep["picks"]

    argv = ["trace", "--family", "zipf:0.9", "--rho", "0.3", "--streams", "2", "--steps", "6", "--layers", "2"]
    rep = run_json(capsys, [*argv, "-o", str(tmp_path / "a.npz")])
    header, rows = run_csv(capsys, [*argv, "-o", str(tmp_path / "b.npz")])
    assert header[:4] == ["path", "steps", "prompt_steps", "streams"] and len(rows) == 1
    row = rows[0]
    assert (int(row["steps"]), int(row["layers"]), int(row["experts"])) == (rep["steps"], 2, 256)
    assert (row["family"], num(row["skew"]), num(row["rho"])) == ("zipf", 0.9, 0.3)
    assert num(row["mean_consecutive_overlap"]) == pytest.approx(np.mean(rep["consecutive_overlap"]))

    src = routing_table(tmp_path)
    rep = run_json(capsys, ["import", "table", str(src), "-o", str(tmp_path / "i.npz"), *TABLE_ARGS])
    header, rows = run_csv(capsys, ["import", "table", str(src), "-o", str(tmp_path / "j.npz"), *TABLE_ARGS])
    assert header[:3] == ["path", "kind", "format"] and len(rows) == 1
    assert (rows[0]["kind"], int(rows[0]["steps"]), int(rows[0]["tokens"])) == ("trace", rep["steps"], rep["tokens"])
    assert rows[0]["model"] == UNKNOWN_MODEL


def test_plan_split_union_csv(capsys):
    argv = ["plan", "--model", "mixtral-8x7b", "--hardware", "apple-m4-max", "--batch", "1,8", "--cache-gib", "20"]
    rep = run_json(capsys, argv)
    header, rows = run_csv(capsys, argv)
    assert header[:5] == ["batch", "cache_gib", "step_seconds", "per_agent_tok_s", "net_tok_s"]
    assert [int(r["batch"]) for r in rows] == [1, 8]
    assert num(rows[1]["net_tok_s"]) == pytest.approx(rep["net_tok_s"][1])
    assert num(rows[1]["multiple_vs_single"]) == pytest.approx(rep["baselines"]["single"]["multiple"][1])

    argv = ["split", str(DATA_DIR / "histograms" / "glm5-seed003-per-layer.csv"), "--ranks", "2", "--method", "lpt"]
    rep = run_json(capsys, argv)
    header, rows = run_csv(capsys, argv)
    assert header[:4] == ["rank", "experts", "load_rows", "predicted_step_seconds"] and len(rows) == 2
    assert [int(r["load_rows"]) for r in rows] == rep["load_rows"]
    assert num(rows[0]["predicted_step_seconds"]) == pytest.approx(rep["predicted_step_seconds"][0])

    argv = ["union", HIST, "--batch", "1,8", "--bootstrap", "10"]
    rep = run_json(capsys, argv)
    header, rows = run_csv(capsys, argv)
    assert header == ["batch", "union_per_layer", "ci_low", "ci_high", "union_total", "coalescing_ratio", "method"]
    assert num(rows[1]["union_per_layer"]) == pytest.approx(rep["union_per_layer"][1])


def test_fit_plan_and_fit_routing_csv(tmp_path, capsys):
    points = tmp_path / "p.csv"
    points.write_text(
        "batch,cache_gib,ranks,policy,net_tok_s,hit_rate\n1,20,1,lru,17.17,\n4,20,1,lru,,\n16,20,1,lru,63.24,\n"
    )
    argv = ["fit-plan", str(points), "--model", "qwen3-30b-a3b-3bit", "--hardware", "apple-m4", "--routing", "zipf:0.8"]
    rep = run_json(capsys, argv)
    header, rows = run_csv(capsys, argv)
    assert header[:3] == ["row", "batch", "cache_gib"] and "predicted" in header and len(rows) == 3
    assert num(rows[1]["predicted"]) == pytest.approx(rep["rows"][1]["predicted"]) and rows[1]["measured"] == ""

    pts = tmp_path / "r.csv"
    pts.write_text("kind,batch,capacity_experts_per_layer,value\nunion,4,,11.5\nhit_rate,4,24,\noverlap,4,,0.45\n")
    argv = ["fit-routing", str(pts), "--experts", "64", "--top-k", "4", "--layers", "4", "--seeds", "1"]
    argv += ["--bootstrap", "2", "--timed-steps", "8"]
    rep = run_json(capsys, argv)
    header, rows = run_csv(capsys, argv)
    assert header[:3] == ["row", "kind", "batch"] and [r["kind"] for r in rows] == ["union", "hit_rate", "overlap"]
    assert num(rows[1]["predicted"]) == pytest.approx(rep["rows"][1]["predicted"])
    assert rows[0]["policy"] == "" and rows[1]["policy"] == "lru"


def test_sweep_csv_and_report_output(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text('command = "union"\nexperts = [8, 16]\ntop_k = 2\nbatch = [1, 4]\n')
    out = tmp_path / "o.parquet"
    header, rows = run_csv(capsys, ["sweep", str(grid), "-o", str(out)])
    assert header[:4] == ["grid", "command", "output", "points"] and len(rows) == 1
    assert (rows[0]["command"], int(rows[0]["points"]), int(rows[0]["evaluated"])) == ("union", 4, 4)
    report = tmp_path / "sweep.json"
    run(capsys, ["sweep", str(grid), "-o", str(out), "--json", "--report-output", str(report)])
    rep = json.loads(report.read_text())
    assert (rep["points"], rep["skipped"]) == (4, 4)  # resumed: the same grid, every point held


def test_calibrate_and_bench_csv_agree_with_the_files_of_the_same_run(tmp_path, capsys):
    toml = tmp_path / "hw.toml"
    argv = ["calibrate", "-o", str(toml), "--file-mib", "4", "--seconds", "0.3", "--mem-mib", "4", "--matmul-n", "32"]
    header, rows = run_csv(capsys, [*argv, "--no-engine", "--quiet"])
    assert header == ["quantity", "read_size_bytes", "value", "unit"]
    written = tomllib.loads(toml.read_text())
    by = {r["quantity"]: r for r in rows if not r["read_size_bytes"]}
    assert num(by["bw_mem"]["value"]) == pytest.approx(written["bw_mem_bytes_per_s"]["value"], rel=1e-6)
    assert num(by["flops"]["value"]) == pytest.approx(written["flops_per_s"]["value"], rel=1e-6)

    report = tmp_path / "bench.json"
    tiny = ["--experts", "4", "--layers", "1", "--top-k", "2", "--d-model", "8", "--d-ff", "8", "--batch", "1,2"]
    header, rows = run_csv(
        capsys, ["bench", *tiny, "--steps", "1", "--warmup", "0", "--quiet", "--output", str(report)]
    )
    rep = json.loads(report.read_text())  # the same run's JSON
    assert header[:3] == ["mode", "batch", "step_seconds"] and len(rows) == len(rep["batch"])
    assert [num(r["step_seconds"]) for r in rows] == pytest.approx(rep["step_seconds"])


# ----------------------------------------------------------------------------- gap 5: plan infeasible rows


def test_plan_infeasible_rows_print_no_multiple_and_no_regime_change(capsys):
    # Mixtral on the Gen4-NVMe desktop (64 GB): from B = 128 the KV cache does not fit, and the
    # infeasible B = 1024 is compute-bound (its "regime change" was printed before)
    argv = ["plan", "--model", "mixtral-8x7b", "--hardware", "nvme-gen4", "--batch", "1-1024", "--cache-gib", "20"]
    rep = run_json(capsys, argv)
    fits = rep["fits_in_memory"]
    assert not all(fits) and fits[0]
    feasible = [b for b, ok in zip(rep["batch"], fits) if ok]
    assert all(t["batch"] in feasible for t in rep["transitions"])
    assert all(r is None for r, ok in zip(rep["coalescing_ratio"], fits) if not ok)
    table = run(capsys, argv).splitlines()
    head = next(i for i, x in enumerate(table) if x.lstrip().startswith("B "))
    for b, ok, line in zip(rep["batch"], fits, table[head + 2 :]):
        cells = line.split()
        assert int(cells[0]) == b
        multiples = cells[-5:-1]  # B·K/U, × uncoalesced, × single, × indep-boxes
        assert (multiples == ["-"] * 4) == (not ok), line
    regimes = [x for x in table if x.startswith("regime change")]
    assert len(regimes) == len(rep["transitions"])
    for x in regimes:
        assert int(x.split("B* = ")[1].split()[0]) in feasible
    header, rows = run_csv(capsys, argv)
    for r in rows:
        assert (r["coalescing_ratio"] == "") == (r["fits_in_memory"] == "False")


def test_plan_regime_changes_among_the_feasible_rows(capsys):
    # the change to compute at B = 1024 on an infeasible row was reported before; the feasible
    # rows' own change (memory → compute at 64 on the EPYC) still is
    rep = run_json(capsys, ["plan", "--model", "mixtral-8x7b", "--hardware", "apple-m4-max", "--batch", "1-1024"])
    assert rep["transitions"] == [] or all(
        fit for t in rep["transitions"] for b, fit in zip(rep["batch"], rep["fits_in_memory"]) if b == t["batch"]
    )
    rep = run_json(capsys, ["plan", "--model", "mixtral-8x7b", "--hardware", "epyc-server", "--batch", "1-1024"])
    assert {"from": "memory", "to": "compute", "batch": 64} in rep["transitions"]
    assert all(t["batch"] != 1024 for t in rep["transitions"])


# ----------------------------------------------------------------------------- --report-output


def test_report_output_of_the_data_writing_commands(tmp_path, capsys):
    data = tmp_path / "t.npz"
    report = tmp_path / "t-report.csv"
    argv = ["trace", "--family", "uniform", "--streams", "2", "--steps", "3", "--layers", "1", "-o", str(data)]
    assert main([*argv, "--format", "csv", "--report-output", str(report)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"wrote {report}" in err
    assert csvout.dict_rows(report.read_text())[0]["path"] == str(data)
    # the report file may not be the data file, nor an input; refused before anything is written
    other = tmp_path / "u.npz"
    err = run_error(capsys, [*argv[:-1], str(other), "--report-output", str(other)])
    assert "--report-output" in err and not other.exists()
    hist = tmp_path / "h.csv"
    err = run_error(capsys, ["histogram", str(data), "-o", str(hist), "--report-output", str(data)])
    assert "one of this command's inputs" in err and not hist.exists()


def test_trace_routing_leaves_the_first_moe_layer_without_locality_only_where_it_holds_it(tmp_path, capsys):
    """The first MoE layer carries no locality (moeroof.models.locality, Depth): a histogram whose
    layers start at id 0 gets a trace whose first layer shares as few experts between consecutive
    tokens as independent tokens do, while its deeper layers keep the stickiness; a capture that
    starts deeper (ids 3–6) keeps the stickiness in every layer, its first included."""
    deep, _ = skewed_histogram(tmp_path)
    data = read_histogram(deep)
    first = tmp_path / "first.csv"
    write_histogram(
        first, np.asarray(data.counts), tokens=3000, experts=E, top_k=K, model="skewed-moe", source="test",
        layer_ids=[0, 1, 2, 3], provenance="witnessed",
    )  # fmt: skip
    sticky = ["--streams", "4", "--steps", "300", "--rho", "0.6", "--seed", "2"]
    plain = ["--streams", "4", "--steps", "300", "--independent", "--seed", "2"]
    got = {}
    for name, hist in (("first", first), ("deep", deep)):
        for kind, knobs in (("sticky", sticky), ("plain", plain)):
            out = tmp_path / f"{name}-{kind}.npz"
            got[name, kind] = run_json(capsys, ["trace", "--routing", str(hist), *knobs, "-o", str(out)])
    f_sticky, f_plain = (np.asarray(got["first", k]["consecutive_overlap"]) for k in ("sticky", "plain"))
    d_sticky, d_plain = (np.asarray(got["deep", k]["consecutive_overlap"]) for k in ("sticky", "plain"))
    assert f_sticky[0] == pytest.approx(f_plain[0], abs=1e-12)  # the same draw: no locality there
    assert np.all(f_sticky[1:] > f_plain[1:] + 0.3) and np.all(d_sticky > d_plain + 0.3)
    assert read_trace(tmp_path / "first-sticky.npz").meta["knobs"]["first_layer_without_locality"] is True
    assert read_trace(tmp_path / "deep-sticky.npz").meta["knobs"]["first_layer_without_locality"] is False
