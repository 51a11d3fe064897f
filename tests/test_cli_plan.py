"""`moeroof plan`: its JSON contract for every preset, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.data.presets import list_presets

MODELS = sorted(list_presets()["models"])
HARDWARE = sorted(list_presets()["hardware"])
KEYS = {
    "batch",
    "step_seconds",
    "per_agent_tok_s",
    "net_tok_s",
    "bound",
    "ssd_bytes_per_token",
    "union_per_layer",
    "baselines",
    "provenance",
}


def run_json(capsys, *argv):
    assert main(["plan", *argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def check_contract(rep, batch):
    assert KEYS <= set(rep)
    assert rep["batch"] == batch
    n = len(batch)
    fits = rep["fits_in_memory"]
    assert len(fits) == n and fits[0] is True
    for key in ("ssd_bytes_per_token", "union_per_layer"):
        assert len(rep[key]) == n and all(isinstance(x, float) for x in rep[key])
    # a step that does not fit in RAM has no time, rate or bound: null, never a number
    for key in ("step_seconds", "per_agent_tok_s", "net_tok_s", "bound"):
        assert len(rep[key]) == n and all((x is None) == (not ok) for x, ok in zip(rep[key], fits)), key
    assert all(b in ("ssd", "memory", "compute", "fabric") for b, ok in zip(rep["bound"], fits) if ok)
    ok = np.array(fits)
    np.testing.assert_allclose(
        np.array(rep["net_tok_s"], dtype=float)[ok], (np.array(batch) / np.array(rep["step_seconds"], dtype=float))[ok]
    )
    assert set(rep["baselines"]) == {"uncoalesced", "single", "independent-boxes"}
    for d in rep["baselines"].values():
        assert set(d) == {"net_tok_s", "multiple"} and len(d["multiple"]) == n
    assert rep["provenance"]["result"] in ("projected", "witnessed-inputs")


@pytest.mark.parametrize("model", MODELS)
def test_every_model_preset_answers_the_contract(model, capsys):
    # uniform routing keeps nine presets quick; the default (the skew prior, its ends) has its own tests
    rep = run_json(
        capsys,
        "--model",
        model,
        "--hardware",
        "nvme-gen4",
        "--batch",
        "1,8,64",
        "--cache-gib",
        "4",
        "--routing",
        "uniform",
    )
    check_contract(rep, [1, 8, 64])


@pytest.mark.parametrize("hardware", HARDWARE)
def test_every_hardware_preset_answers_the_contract(hardware, capsys):
    rep = run_json(
        capsys,
        "--model",
        "deepseek-v3",
        "--hardware",
        hardware,
        "--batch",
        "1,16",
        "--context",
        "1024",
        "--overlap",
        "sum",
        "--routing",
        "zipf:0.9",
    )
    check_contract(rep, [1, 16])
    assert rep["overlap"] == "sum"


def test_routing_from_a_histogram_and_a_users_toml(capsys, tmp_path):
    rep = run_json(
        capsys,
        "--model",
        "glm-5.2",
        "--hardware",
        "nvme-gen4",
        "--batch",
        "1,8",
        "--routing",
        "histograms/deepseek-v3-like.csv",
    )
    assert "DeepSeek-V3-like" in rep["routing"]
    assert "routing" in rep["provenance"]["non_witnessed"]  # synthetic data: projected
    from moeroof.data.presets import PRESETS_DIR

    own = tmp_path / "my-box.toml"
    own.write_text(
        (PRESETS_DIR / "hardware" / "nvme-gen4.toml").read_text().replace('name = "nvme-gen4"', 'name = "my-box"')
    )
    rep = run_json(capsys, "--model", "glm-5.2", "--hardware", str(own), "--batch", "4")
    assert rep["hardware"] == "my-box"


def test_table_output_names_baselines(capsys):
    assert main(["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1,8"]) == 0
    out = capsys.readouterr().out
    assert "× uncoalesced" in out and "× single" in out and "result: projected" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--model", "nope", "--hardware", "nvme-gen4", "--batch", "1"], "no such preset"),
        (["--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "0"], "--batch"),
        (["--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--cache-gib", "x"], "--cache-gib"),
        (["--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--routing", "zipf:q"], "zipf"),
        (
            [
                "--model",
                "glm-5.2",
                "--hardware",
                "nvme-gen4",
                "--batch",
                "1",
                "--routing",
                "traces/qwen3-30b-a3b-like.npz",
            ],
            "do not match",
        ),
        (["--model", "glm-5.2", "--hardware", "/nonexistent/box.toml", "--batch", "1"], "no such file"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(["plan", *argv]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_toml_names_file_and_key(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "hardware"\nname = "bad"\nram_bytes = { value = 1, unit = "GB/s", source = "x" }\n')
    assert main(["plan", "--model", "glm-5.2", "--hardware", str(bad), "--batch", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:-: ram_bytes: ")


def test_installed_script_runs_plan():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "moeroof.cli",
            "plan",
            "--model",
            "mixtral-8x7b",
            "--hardware",
            "gb10",
            "--batch",
            "1,4",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    check_contract(json.loads(proc.stdout), [1, 4])


def test_a_zero_fit_plan_shows_its_stages_on_stderr_when_asked(capsys, monkeypatch):
    """The priors' ends make a zero-fit plan take seconds: with MOEROOF_PROGRESS=1 each stage is
    named on stderr, in order, and stdout stays the JSON alone; off, stderr stays empty."""
    import json

    from moeroof.cli import main
    from moeroof.cli.plan import PLAN_STAGES

    monkeypatch.setenv("MOEROOF_PROGRESS", "1")
    argv = ["plan", "--model", "qwen3-30b-a3b", "--hardware", "nvme-gen4", "--batch", "1", "--cache-gib", "2", "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["skew_band"] is not None
    at = [err.index(s) for s in PLAN_STAGES]
    assert at == sorted(at) and err.startswith("\rplan [")
    monkeypatch.setenv("MOEROOF_PROGRESS", "0")
    assert main(argv) == 0
    assert capsys.readouterr().err == ""


def test_a_zero_fit_plan_shows_the_routing_priors_range_beside_each_centre(capsys):
    """Net tok/s and hit % carry their range over the routing priors: every end of the skew and
    locality bands (their per-end rates, not their summaries) and the centre lie inside it, and its
    ends are two of them; the table prints ``centre (low–high)`` and says what the ranges cover;
    with ``--routing uniform --independent`` neither prior applies and the columns are null."""
    argv = ["plan", "--model", "qwen3-30b-a3b", "--hardware", "nvme-gen4", "--batch", "1,4", "--cache-gib", "6.75"]
    assert main([*argv, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    for key in ("net_tok_s", "cache_hit_rate"):
        ends = [e[key] for band in ("skew_band", "locality_band") for e in rep[band]["ends"]]
        for i in range(2):
            vals = [rep[key][i], *(e[i] for e in ends)]
            low, high = rep[f"{key}_routing_low"][i], rep[f"{key}_routing_high"][i]
            assert low == pytest.approx(min(vals)) and high == pytest.approx(max(vals))
            assert low <= rep[key][i] <= high
    assert rep["net_tok_s_routing_high"][0] > rep["net_tok_s_routing_low"][0]  # one stream: the priors matter
    assert main(argv) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.split()[:1] == ["1"])
    lo, hi = rep["cache_hit_rate_routing_low"][0], rep["cache_hit_rate_routing_high"][0]
    assert f"{100 * rep['cache_hit_rate'][0]:.1f} ({100 * lo:.1f}–{100 * hi:.1f})" in row
    assert "ranges: net tok/s and hit % over the routing priors' ends" in text
    assert main([*argv, "--routing", "uniform", "--independent", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["net_tok_s_routing_low"] == [None, None] and rep["cache_hit_rate_routing_high"] == [None, None]


@pytest.mark.parametrize("batch", ["4194304", "16777216"])
def test_a_batch_too_large_for_the_locality_trace_names_batch_and_the_way_out(capsys, batch):
    """At millions of streams the locality prior's trace (B streams × its steps × layers × K) is
    past the allocation limits: one error line naming --batch, the trace and --independent, which
    runs the cache without it — and with --independent the same batch answers (a closed form)."""
    assert main(["plan", "--model", "deepseek-v3", "--hardware", "gb10", "--batch", batch]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --batch: B = {batch} streams: the locality prior's trace steps × streams"), err
    assert "--independent" in err and err.count("\n") == 1
    assert main(["plan", "--model", "deepseek-v3", "--hardware", "gb10", "--batch", batch, "--independent"]) == 0
