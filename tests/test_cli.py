"""The ``moeroof`` command line: JSON contract, tables, and every error path (exit 2, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import csvout  # noqa: I001  (tests/csvout.py: results past their run record)
from moeroof.cli import main, parse_batch
from moeroof.core.paths import EXTERNAL_DIR
from moeroof.data.io import sidecar_path, write_histogram, write_trace

SEED = sum(map(ord, "test_cli"))

UNION_KEYS = {
    "batch",
    "union_per_layer",
    "union_total",
    "ci_low",
    "ci_high",
    "coalescing_ratio",
    "baseline",
    "method",
    "experts",
    "top_k",
    "layers",
    "provenance",
    "source",
}
METHODS = {"closed-form", "rarefaction", "extrapolation", "trace", "none"}


def uniform_union(e: int, k: int, b: int) -> float:
    """E·(1 − (1 − K/E)^B), written out independently of moeroof.models.union."""
    return e * (1.0 - (1.0 - k / e) ** b)


def run_json(capsys, argv: list[str]) -> dict:
    rc = main(argv + ["--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert err == ""
    return json.loads(out)


def check_union_contract(rep: dict, n_batch: int) -> None:
    assert UNION_KEYS <= set(rep)
    assert isinstance(rep["batch"], list) and all(type(b) is int for b in rep["batch"])
    assert len(rep["batch"]) == n_batch
    for key in ("union_per_layer", "union_total", "ci_low", "ci_high", "coalescing_ratio"):
        assert isinstance(rep[key], list) and len(rep[key]) == n_batch, key
        assert all(v is None or isinstance(v, float) for v in rep[key]), key
    assert rep["baseline"] == "uncoalesced"
    methods = rep["method"] if isinstance(rep["method"], list) else [rep["method"]]
    assert isinstance(rep["method"], str) or len(set(methods)) > 1
    assert set(methods) <= METHODS
    for key in ("experts", "top_k", "layers"):
        assert type(rep[key]) is int and rep[key] >= 1
    assert isinstance(rep["source"], str)
    assert rep["provenance"] is None or isinstance(rep["provenance"], str)
    for j, b in enumerate(rep["batch"]):
        u, lo, hi, r = (rep[k][j] for k in ("union_per_layer", "ci_low", "ci_high", "coalescing_ratio"))
        if u is None:
            continue
        assert rep["top_k"] - 1e-9 <= u <= min(rep["experts"], b * rep["top_k"]) + 1e-9
        assert lo - 1e-9 <= u <= hi + 1e-9
        assert r == pytest.approx(b * rep["top_k"] / u)
        assert rep["union_total"][j] == pytest.approx(u * rep["layers"])


@pytest.fixture
def histogram(tmp_path) -> Path:
    """3 layers, E=16, K=2, T=40 tokens per layer, skewed (Zipf-like) and complete."""
    rng = np.random.default_rng(SEED)
    e, k, t, layers = 16, 2, 40, 3
    w = 1.0 / np.arange(1, e + 1) ** 1.1
    counts = np.zeros((layers, e), dtype=np.int64)
    for layer in range(layers):
        g = np.log(w) + rng.gumbel(size=(t, e))
        np.add.at(counts[layer], np.argsort(-g, axis=1)[:, :k].ravel(), 1)
    return write_histogram(
        tmp_path / "hist.csv",
        counts,
        tokens=t,
        experts=e,
        top_k=k,
        model="toy-zipf",
        source="test_cli",
        provenance="synthetic",
        generator={"zipf_s": 1.1, "seed": SEED},
    )


@pytest.fixture
def trace(tmp_path) -> Path:
    rng = np.random.default_rng(SEED)
    steps, streams, layers, e, k = 12, 6, 2, 8, 2
    topk = np.argsort(rng.random((steps, streams, layers, e)), axis=-1)[..., :k].astype(np.int16)
    topk[8:, 5] = -1  # one stream finishes early
    meta = {"model": "toy", "experts": e, "top_k": k, "source": "test_cli", "provenance": "synthetic"}
    return write_trace(tmp_path / "trace.npz", topk, meta)


# ----------------------------------------------------------------------------- union


def test_union_uniform_json_matches_closed_form(capsys):
    rep = run_json(capsys, ["union", "--uniform", "64", "6", "--batch", "1,8,64", "--layers", "3"])
    check_union_contract(rep, 3)
    assert rep["batch"] == [1, 8, 64]
    assert (rep["experts"], rep["top_k"], rep["layers"]) == (64, 6, 3)
    assert rep["method"] == "closed-form" and rep["provenance"] == "model"
    for j, b in enumerate(rep["batch"]):
        u = uniform_union(64, 6, b)
        assert rep["union_per_layer"][j] == pytest.approx(u, rel=1e-12)
        assert rep["union_total"][j] == pytest.approx(3 * u, rel=1e-12)
        assert rep["coalescing_ratio"][j] == pytest.approx(b * 6 / u, rel=1e-12)
        assert rep["ci_low"][j] == pytest.approx(u) and rep["ci_high"][j] == pytest.approx(u)


def test_union_uniform_table(capsys):
    assert main(["union", "--uniform", "8", "2", "--batch", "4,1"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("B "))
    assert "union/layer" in header and "uncoalesced" in header and "method" in header
    rows = [line.split() for line in lines if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "4"]  # sorted
    assert float(rows[1][1]) == pytest.approx(uniform_union(8, 2, 4), abs=5e-3)
    assert rows[1][-1] == "closed-form"


def test_union_histogram_json(capsys, histogram):
    rep = run_json(capsys, ["union", str(histogram), "--batch", "1,8,40,200", "--bootstrap", "50"])
    check_union_contract(rep, 4)
    assert rep["method"] == ["rarefaction", "rarefaction", "rarefaction", "extrapolation"]
    assert (rep["experts"], rep["top_k"], rep["layers"]) == (16, 2, 3)
    assert rep["provenance"] == "synthetic" and rep["source"] == str(histogram)
    assert rep["union_per_layer"][0] == pytest.approx(2.0)  # one token: exactly K experts
    assert rep["ci_low"][2] < rep["ci_high"][2]
    # same seed, same numbers; another seed moves only the band
    again = run_json(capsys, ["union", str(histogram), "--batch", "1,8,40,200", "--bootstrap", "50"])
    # the run records differ in their UTC second when the two runs straddle one (seen in CI)
    assert csvout.strip_run(dict(again)) == csvout.strip_run(dict(rep))
    other = run_json(capsys, ["union", str(histogram), "--batch", "1,8,40,200", "--bootstrap", "50", "--seed", "7"])
    assert other["union_per_layer"] == rep["union_per_layer"]


def test_union_histogram_table_mentions_summed_layers(capsys, tmp_path):
    path = write_histogram(
        tmp_path / "summed.csv",
        np.array([[30, 20, 10, 0]]),
        tokens=30,
        experts=4,
        top_k=2,
        model="m",
        source="s",
        layers_summed=True,
    )
    assert main(["union", str(path), "--batch", "1,2", "--bootstrap", "0"]) == 0
    out = capsys.readouterr().out
    assert "rarefaction" in out and "summed over layers" in out


def test_union_trace_json(capsys, trace):
    rep = run_json(capsys, ["union", str(trace), "--batch", "1,2,6,7", "--bootstrap", "30"])
    check_union_contract(rep, 4)
    assert rep["method"] == ["trace", "trace", "trace", "none"]  # no step has 7 live streams
    assert rep["union_per_layer"][0] == pytest.approx(2.0)
    assert rep["union_per_layer"][3] is None and rep["coalescing_ratio"][3] is None
    assert (rep["experts"], rep["top_k"], rep["layers"]) == (8, 2, 2)
    assert rep["provenance"] == "synthetic"


def test_union_npy_trace(capsys, tmp_path):
    rng = np.random.default_rng(SEED)
    topk = np.argsort(rng.random((5, 4, 1, 6)), axis=-1)[..., :3]
    path = write_trace(tmp_path / "t.npy", topk, {"experts": 6, "top_k": 3})
    rep = run_json(capsys, ["union", str(path), "--batch", "1,4"])
    check_union_contract(rep, 2)
    assert rep["method"] == "trace" and rep["provenance"] is None
    assert main(["union", str(path), "--batch", "1,4"]) == 0
    assert "trace" in capsys.readouterr().out


def test_installed_script_subprocess(tmp_path, trace):
    """The console script (or ``python -m moeroof.cli``) in a real process: JSON and an error."""
    script = Path(sys.executable).with_name("moeroof")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "moeroof.cli"]
    ok = subprocess.run(
        cmd + ["union", "--uniform", "8", "2", "--batch", "1,8,64", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    rep = json.loads(ok.stdout)
    assert rep["union_per_layer"] == pytest.approx([uniform_union(8, 2, b) for b in (1, 8, 64)])
    bad = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", "union", str(tmp_path / "missing.npz"), "--batch", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr == f"error: {tmp_path / 'missing.npz'}:-: file: no such file\n"
    assert bad.stdout == ""


@pytest.mark.external
@pytest.mark.skipif(not EXTERNAL_DIR.is_dir(), reason=f"captured routing data not present at {EXTERNAL_DIR}")
def test_union_real_serving_trace(capsys):
    """Qwen1.5-MoE layer 0, a real vLLM batch of up to 25 concurrent requests (E=60, K=4)."""
    path = EXTERNAL_DIR / "qwen15moe-a27b-gptq-vllm-layer0" / "trace_decode_layer0.npz"
    rep = run_json(capsys, ["union", str(path), "--batch", "1,4,16", "--bootstrap", "50"])
    check_union_contract(rep, 3)
    assert rep["method"] == "trace" and rep["provenance"] == "witnessed"
    assert (rep["experts"], rep["top_k"], rep["layers"]) == (60, 4, 1)
    assert rep["union_per_layer"][0] == pytest.approx(4.0)
    # real routing is skewed: below the uniform union at B=16
    assert rep["union_per_layer"][2] < uniform_union(60, 4, 16)


# ----------------------------------------------------------------------------- fit


def test_fit_json_and_table(capsys, histogram):
    pytest.importorskip("moeroof.fit.skew", reason="fit.py not written yet")
    rep = run_json(capsys, ["fit", str(histogram), "--bootstrap", "5", "--gof-sims", "9"])
    assert {"experts", "top_k", "layers", "chosen", "models", "per_layer"} <= set(rep)
    assert (rep["experts"], rep["top_k"], rep["layers"]) == (16, 2, 3)
    assert rep["chosen"] in rep["models"]
    for m in rep["models"].values():
        assert {"params", "ci", "log_likelihood", "aic", "gof_statistic", "gof_pvalue"} <= set(m)
    assert rep["source"] == str(histogram)
    assert main(["fit", str(histogram), "--bootstrap", "5", "--gof-sims", "9"]) == 0
    out = capsys.readouterr().out
    assert "AIC" in out and f"* {rep['chosen']}" in out


def test_fit_takes_a_trace_through_its_histogram(capsys, trace, tmp_path):
    """`fit TRACE` fits the counts a hand count of the trace gives, the same as fitting the
    histogram `moeroof histogram` writes from it (same seed, same draws)."""
    topk = np.asarray(np.load(trace)["topk"])
    by_hand = np.zeros((topk.shape[2], 8), dtype=int)
    for step, stream, layer, slot in np.ndindex(topk.shape):
        if topk[step, stream, layer, slot] >= 0:
            by_hand[layer, topk[step, stream, layer, slot]] += 1
    assert main(["histogram", str(trace), "-o", str(tmp_path / "h.csv")]) == 0
    capsys.readouterr()
    argv = ["--bootstrap", "5", "--gof-sims", "9"]
    direct = run_json(capsys, ["fit", str(trace), *argv])
    via_csv = run_json(capsys, ["fit", str(tmp_path / "h.csv"), *argv])
    assert direct["models"] == via_csv["models"] and direct["per_layer"] == via_csv["per_layer"]
    assert direct["source"] == str(trace) and direct["provenance"] == "synthetic"
    assert any("trace's histogram" in note for note in direct["notes"])
    counts = pd.read_csv(tmp_path / "h.csv").pivot(index="layer", columns="expert", values="count").to_numpy()
    assert np.array_equal(counts, by_hand)


def test_fit_progress_goes_to_stderr_only_when_asked(capsys, histogram, monkeypatch):
    monkeypatch.setenv("MOEROOF_PROGRESS", "1")
    assert main(["fit", str(histogram), "--bootstrap", "5", "--gof-sims", "9", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["chosen"] in ("uniform", "zipf", "dirichlet")  # stdout is still the JSON alone
    assert "fit [" in err and "9/9 done" in err and "zipf: bootstrap (5)" in err
    monkeypatch.setenv("MOEROOF_PROGRESS", "0")
    assert main(["fit", str(histogram), "--bootstrap", "5", "--gof-sims", "9", "--json"]) == 0
    assert "fit [" not in capsys.readouterr().err


# ----------------------------------------------------------------------------- errors


def _bad_hist(tmp_path: Path) -> Path:
    path = tmp_path / "bad.csv"
    path.write_text("layer,expert,count\n0,0,1\n0,9,1\n")
    sidecar_path(path).write_text(
        json.dumps(
            {"model": "m", "experts": 4, "top_k": 2, "layers": 1, "tokens": 3, "source": "s", "layers_summed": False}
        )
    )
    return path


def _k_gt_e_hist(tmp_path: Path) -> Path:
    path = tmp_path / "kge.csv"
    path.write_text("layer,expert,count\n0,0,1\n")
    sidecar_path(path).write_text(
        json.dumps(
            {"model": "m", "experts": 2, "top_k": 3, "layers": 1, "tokens": 3, "source": "s", "layers_summed": False}
        )
    )
    return path


def _float_trace(tmp_path: Path) -> Path:
    path = tmp_path / "float.npz"
    with open(path, "wb") as fh:
        np.savez(fh, topk=np.zeros((2, 2, 1, 2)), meta=np.array(json.dumps({"experts": 4, "top_k": 2})))
    return path


@pytest.mark.parametrize(
    "argv, message",
    [
        (["union", "--uniform", "8", "2", "--batch", "0,x"], "error: --batch: '0' is not a positive integer"),
        (["union", "--uniform", "8", "2", "--batch", "1,x"], "error: --batch: 'x' is not a positive integer"),
        (["union", "--uniform", "8", "2", "--batch", "1,,2"], "error: --batch: expected comma-separated"),
        (["union", "--uniform", "8", "2", "--batch", ""], "error: --batch: expected comma-separated"),
        (["union", "--uniform", "2", "4", "--batch", "1"], "error: --uniform: top_k K=4 exceeds experts E=2"),
        (["union", "--uniform", "8", "two", "--batch", "1"], "error: --uniform: 'two' is not a positive integer"),
        (
            ["union", "--uniform", "8", "2", "--batch", "1", "--layers", "0"],
            "error: --layers: '0' is not a positive integer",
        ),
        (
            ["union", "--uniform", "8", "2", "--batch", "1", "--level", "2"],
            "error: --level: '2' is not a number in (0, 1)",
        ),
        (
            ["union", "--uniform", "8", "2", "--batch", "1", "--seed", "-1"],
            "error: --seed: '-1' is not a non-negative integer",
        ),
        (["union", "--batch", "1"], "error: give a histogram/trace PATH or --uniform E K"),
        (
            ["union", "{hist}", "--uniform", "8", "2", "--batch", "1"],
            "error: give either PATH or --uniform E K, not both",
        ),
        (["union", "{hist}", "--batch", "1", "--layers", "2"], "error: --layers applies to --uniform only"),
        (
            ["union", "{hist}", "--batch", "1", "--bootstrap", "many"],
            "error: --bootstrap: 'many' is not a non-negative integer",
        ),
        (["union", "{trace}", "--batch", "1", "--draws", "0"], "error: --draws: '0' is not a positive integer"),
        (["union", "{tmp}/missing.csv", "--batch", "1"], "error: {tmp}/missing.csv:-: file: no such file"),
        (["union", "{bad}", "--batch", "1"], "error: {tmp}/bad.csv:3: expert: expert 9 ≥ experts E=4"),
        (["union", "{kge}", "--batch", "1"], "error: {tmp}/kge.json:-: top_k: top_k K=3 exceeds experts E=2"),
        (
            ["union", "{float}", "--batch", "1"],
            "error: {tmp}/float.npz:-: topk: expected an integer dtype, got float64",
        ),
        (["union", "{tmp}/notes.txt", "--batch", "1"], "error: {tmp}/notes.txt:-: file: unknown suffix '.txt'"),
        (["fit", "{tmp}/missing.csv"], "error: {tmp}/missing.csv:-: file: no such file"),
        (["fit", "{bad}"], "error: {tmp}/bad.csv:3: expert: expert 9 ≥ experts E=4"),
        (["fit", "{hist}", "--bootstrap", "-3"], "error: --bootstrap: '-3' is not a non-negative integer"),
    ],
)
def test_error_paths_exit_2(capsys, tmp_path, histogram, trace, argv, message):
    (tmp_path / "notes.txt").write_text("hello")
    subs = {
        "{hist}": str(histogram),
        "{trace}": str(trace),
        "{bad}": str(_bad_hist(tmp_path)),
        "{kge}": str(_k_gt_e_hist(tmp_path)),
        "{float}": str(_float_trace(tmp_path)),
        "{tmp}": str(tmp_path),
    }

    def sub(s: str) -> str:
        for k, v in subs.items():
            s = s.replace(k, v)
        return s

    rc = main([sub(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.startswith(sub(message)), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nope"],
        ["union"],
        ["union", "--uniform", "8", "--batch", "1"],
        ["fit"],
        ["union", "--batch", "1", "--frobnicate"],
    ],
)
def test_argparse_usage_errors_exit_2(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert "usage:" in err and "Traceback" not in err


def test_help_and_version_exit_0(capsys):
    assert main(["--help"]) == 0
    assert "union" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("moeroof ")


def test_parse_batch():
    assert parse_batch("64, 1,8,8") == [1, 8, 64]
    for bad in ("0", "-1", "1.5", "a", "", "1,", "1e3"):
        with pytest.raises(ValueError):
            parse_batch(bad)


def test_cli_does_not_modify_inputs(capsys, histogram, trace):
    files = [histogram, sidecar_path(histogram), trace]
    before = {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files}
    assert main(["union", str(histogram), "--batch", "1,4", "--bootstrap", "5"]) == 0
    assert main(["union", str(trace), "--batch", "1,4", "--bootstrap", "5"]) == 0
    capsys.readouterr()
    assert {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in files} == before


# ----------------------------------------------------------------------------- layout of moeroof.cli

SUBCOMMANDS = (
    "union",
    "fit",
    "fit-routing",
    "plan",
    "fit-plan",
    "presets",
    "preset-from-hf",
    "trace",
    "histogram",
    "import",
    "capture",
    "cache",
    "mrc",
    "calibrate",
    "bench",
    "split",
    "sweep",
    "report",
    "validate",
)


def test_top_level_help_lists_every_subcommand(capsys):
    from moeroof.cli.app import COMMANDS

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    # a module named after a Python keyword carries a trailing underscore (cli/import_.py)
    assert [c.__name__.rsplit(".", 1)[1].rstrip("_").replace("_", "-") for c in COMMANDS] == list(SUBCOMMANDS)
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and line[4] != " "]
    assert listed == list(SUBCOMMANDS)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_help_exits_0(capsys, command):
    assert main([command, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: moeroof {command} ") and "--json" in out
    assert err == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["cache", "t.npy", "--policy", "arc", "--capacity-experts", "8", "--lookup", "request", "--json"],
        ["mrc", "t.npy", "--sample-rate", "0.1"],
        ["union", "--uniform", "256", "8", "--batch", "1,8"],
        ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1,8"],
        ["import", "matrix", "x.csv", "-o", "y.npz", "--top-k", "8"],
    ],
)
def test_a_named_command_parses_alike_with_its_parser_alone(argv):
    """`moeroof CMD …` builds CMD's parser only; it parses the command line as the full one does."""
    from moeroof.cli.app import build_parser

    alone = vars(build_parser(argv).parse_args(argv))
    full = vars(build_parser().parse_args(argv))
    assert alone == full


def test_a_command_imports_no_other_commands_module():
    code = (
        "import json, sys\n"
        "from moeroof.cli.app import main\n"
        "main(['presets', '--json'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('moeroof.cli.'))), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "moeroof.cli.presets" in loaded
    assert not loaded & {"moeroof.cli.cache", "moeroof.cli.bench", "moeroof.cli.report", "moeroof.cli.union"}


def test_importing_the_cli_and_building_its_parser_import_no_library_code():
    """`import moeroof.cli` and the parser of every subcommand stay cheap: the cache simulator
    and its C library (and any subcommand's library code) are imported only when that
    subcommand runs."""
    code = (
        "import json, sys\n"
        "import moeroof.cli\n"
        "after_import = sorted(sys.modules)\n"
        "moeroof.cli.build_parser()\n"
        "print(json.dumps([after_import, sorted(sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    after_import, after_parser = (set(m) for m in json.loads(done.stdout))
    assert not {
        m for m in after_import | after_parser if m.startswith(("moeroof.models", "moeroof.measure", "moeroof.studies"))
    }


def test_parser_name_lists_match_the_library():
    """The choices the parsers spell out (so as not to import the library) are the library's."""
    from moeroof import cachesim as cache
    from moeroof.cli import cache as cli_cache
    from moeroof.cli import split as cli_split
    from moeroof.cli.flags import READ_PATHS
    from moeroof.measure import calibrate as measure
    from moeroof.models import partition

    assert cli_cache.POLICIES == cache.POLICIES
    assert cli_cache.SCOPES == cache.SCOPES
    assert cli_cache.LOOKUPS == cache.LOOKUPS
    assert cli_split.METHODS == partition.METHODS
    assert READ_PATHS == measure.READ_PATHS


def test_keyboard_interrupt_exits_130_quietly(capsys, monkeypatch):
    import moeroof.cli.union as cli_union

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_union, "union_report", interrupted)
    assert main(["union", "--uniform", "8", "2", "--batch", "1"]) == 130
    assert capsys.readouterr() == ("", "")


def test_a_library_value_error_is_one_line_exit_2(capsys, monkeypatch):
    import moeroof.cli.union as cli_union

    def refused(args):
        raise ValueError("--batch: refused by the library")

    monkeypatch.setattr(cli_union, "union_report", refused)
    assert main(["union", "--uniform", "8", "2", "--batch", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "error: --batch: refused by the library\n"


# ----------------------------------------------------------------------------- inputs without a sidecar


def test_a_histogram_without_sidecar_takes_its_meta_from_the_flags(capsys, histogram, tmp_path):
    """The flags stand in for the sidecar: same union as with it; tokens default to count sum / K."""
    bare = tmp_path / "bare.csv"
    bare.write_bytes(histogram.read_bytes())  # the counts alone, no .json beside them
    side = json.loads(sidecar_path(histogram).read_text())
    assert main(["union", str(bare), "--batch", "1,4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bare}: no sidecar JSON") and "--experts E --top-k K" in err
    argv = ["--batch", "1,4,8", "--bootstrap", "20"]
    with_sidecar = run_json(capsys, ["union", str(histogram), *argv])
    flags = ["--experts", str(side["experts"]), "--top-k", str(side["top_k"]), "--tokens", str(side["tokens"])]
    bare_rep = run_json(capsys, ["union", str(bare), *argv, *flags])
    for key in ("union_per_layer", "ci_low", "ci_high"):
        assert bare_rep[key] == with_sidecar[key]
    assert bare_rep["provenance"] is None
    # without --tokens: a layer's incidence counts sum to K per token
    frame = pd.read_csv(histogram)
    by_hand = (frame.groupby("layer")["count"].sum() // side["top_k"]).tolist()
    rep = run_json(
        capsys,
        [
            "fit",
            str(bare),
            "--experts",
            str(side["experts"]),
            "--top-k",
            str(side["top_k"]),
            "--bootstrap",
            "3",
            "--gof-sims",
            "3",
            "--provenance",
            "witnessed",
        ],
    )
    assert rep["provenance"] == "witnessed" and rep["layers"] == frame["layer"].nunique()
    from moeroof.cli.inputs import load_input

    class Args:
        experts, top_k, tokens, provenance = side["experts"], side["top_k"], None, None  # as parsed

    assert load_input(str(bare), Args()).tokens.tolist() == by_hand


def test_a_trace_without_meta_and_flags_that_contradict_a_sidecar(capsys, trace, tmp_path):
    bare = tmp_path / "bare.npz"
    np.savez(bare, topk=np.load(trace)["topk"])
    before = bare.read_bytes()
    assert main(["cache", str(bare), "--policy", "lru", "--capacity-experts", "4"]) == 2
    assert "no meta array inside it" in capsys.readouterr().err
    argv = ["--policy", "lru", "--capacity-experts", "4"]
    want = run_json(capsys, ["cache", str(trace), *argv])
    got = run_json(capsys, ["cache", str(bare), *argv, "--experts", "8", "--top-k", "2"])
    assert (got["hits"], got["misses"]) == (want["hits"], want["misses"])
    assert bare.read_bytes() == before, "the input is only read"
    assert main(["cache", str(trace), *argv, "--experts", "9"]) == 2
    assert "--experts 9 disagrees with" in capsys.readouterr().err
    assert main(["cache", str(bare), *argv, "--experts", "8"]) == 2
    assert "give at least --experts and --top-k" in capsys.readouterr().err


def _undercounted_histogram(tmp_path: Path, name: str, rows: list[str]) -> Path:
    path = tmp_path / f"{name}.csv"
    path.write_text("layer,expert,count\n" + "".join(r + "\n" for r in rows))
    side = {"model": "x", "experts": 256, "top_k": 8, "layers": 1, "tokens": 20000, "source": "t"}
    side.update(layers_summed=False, provenance="witnessed")
    sidecar_path(path).write_text(json.dumps(side))
    return path


@pytest.mark.parametrize("name,rows", [("one-row", ["0,0,1"]), ("header-only", []), ("all-zeros", ["0,0,0", "0,1,0"])])
@pytest.mark.parametrize("command", ["union", "split", "plan"])
def test_histograms_summing_far_below_k_t_are_refused(capsys, tmp_path, name, rows, command):
    # union once gave U(1) = 5e-05 (one row) or 0 (header only, all zeros) with exit 0
    path = _undercounted_histogram(tmp_path, name, rows)
    argv = {
        "union": ["union", str(path), "--batch", "1,8"],
        "split": [
            "split",
            str(path),
            "--ranks",
            "2",
            "--method",
            "lpt",
            "--model",
            "deepseek-v3",
            "--hardware",
            "nvme-gen4",
        ],
        "plan": ["plan", "--routing", str(path), "--model", "deepseek-v3", "--hardware", "nvme-gen4", "--batch", "1"],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:-: count: counts of layer 0 sum to")
    assert "instead of K = 8" in err[0]


def test_a_histogram_a_little_below_k_t_gets_a_note(capsys, tmp_path):
    # 90 % of K·T: read, with a note that the union is that much too low
    path = _undercounted_histogram(tmp_path, "short", [f"0,{i},{9000}" for i in range(16)])
    rep = run_json(capsys, ["union", str(path), "--batch", "1", "--bootstrap", "0"])
    assert rep["union_per_layer"][0] == pytest.approx(16 * 9000 / 20000)
    assert any("90 % of top_k·tokens" in n for n in rep["notes"])
