"""A notebook's parameters checked together before a kernel starts (moeroof.present.preflight)
and the routing that follows the model (moeroof.data.embedded): every problem in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.core.paths import DATA_DIR, NOTEBOOKS_DIR
from moeroof.data.embedded import FALLBACK_ROUTING, default_routing, routing_shape
from moeroof.data.io import load_any
from moeroof.data.presets import list_presets, load_model
from moeroof.present import preflight, report


def _error(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err and err.startswith("error: ")
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("name", ["histograms/deepseek-v3-like.csv", "traces/qwen3-30b-a3b-like.npz"])
def test_routing_shape_reads_what_the_whole_file_holds(name):
    e, k, model = routing_shape(DATA_DIR / name)
    whole = load_any(DATA_DIR / name)  # the full reader, counts and ids included
    assert (e, k) == (whole.experts, whole.top_k) and model == whole.meta["model"]


def test_routing_shape_of_an_npy_reads_its_sidecar(tmp_path):
    np.save(tmp_path / "t.npy", np.zeros((2, 1, 1, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="sidecar"):
        routing_shape(tmp_path / "t.npy")
    (tmp_path / "t.json").write_text(json.dumps({"experts": 16, "top_k": 2, "model": "m"}))
    assert routing_shape(tmp_path / "t.npy") == (16, 2, "m")
    with pytest.raises(ValueError, match="no such file"):
        routing_shape(tmp_path / "missing.csv")


@pytest.mark.parametrize("name", sorted(list_presets()["models"]))
def test_auto_routing_always_has_the_model_s_shape(name):
    m = load_model(name)
    chosen = default_routing(m.name, m.experts, m.top_k, preferred="histograms/deepseek-v3-like.csv")
    assert chosen.why
    if chosen.spec == FALLBACK_ROUTING:
        assert "no embedded routing data" in chosen.why
    else:
        e, k, _ = routing_shape(DATA_DIR / chosen.spec)
        assert (e, k) == (m.experts, m.top_k)


def test_auto_routing_keeps_the_preferred_file_when_it_fits():
    glm = load_model("glm-5.2")  # E = 256, K = 8: the DeepSeek-V3-like histogram fits
    assert default_routing(glm.name, 256, 8, preferred="histograms/deepseek-v3-like.csv").spec == (
        "histograms/deepseek-v3-like.csv"
    )
    assert default_routing("qwen3-30b-a3b", 128, 8, preferred="histograms/deepseek-v3-like.csv").spec == (
        "traces/qwen3-30b-a3b-like.npz"
    )
    assert default_routing("mixtral", 8, 2).spec == FALLBACK_ROUTING


@pytest.mark.parametrize("path", sorted(NOTEBOOKS_DIR.glob("*.py")), ids=lambda p: p.stem)
def test_every_notebook_s_defaults_pass(path):
    assert preflight.problems(preflight.values_of(report.declared_parameters(path), {})) == []


def test_problems_name_each_parameter_at_once():
    found = preflight.problems(
        {
            "model": "qwen3-30b-a3b",
            "routing": "histograms/deepseek-v3-like.csv",
            "b_min": 300,
            "b_max": 256,
            "cache_gib": -1.0,
            "trace": "zipf:x",
            "seed_name": "whatif",
            "histogram": "no/such.csv",
        }
    )
    text = " | ".join(found)
    assert "E=256, K=8 but model qwen3-30b-a3b has E=128, K=8" in text
    assert "-p b_min 300 is above -p b_max 256" in text and "-p cache_gib: must be >= 0" in text
    assert "-p trace: 'zipf:x'" in text and "-p histogram:" in text and "no/such.csv" in text
    assert len(found) == 5
    assert preflight.problems({"model": "qwen3-30b-a3b", "routing": "auto"}) == []
    assert preflight.problems({"model": "no-such-model"})[0].startswith("-p model:")
    # a cache is a number of GiB or auto (a default that follows the model)
    assert preflight.problems({"model": "glm-5.2", "cache_gib": "auto", "contrast_cache_gib": "AUTO"}) == []
    assert preflight.problems({"cache_gib": "lots"}) == ["-p cache_gib: expected a number or auto, got 'lots'"]


def test_report_refuses_a_bad_combination_before_any_kernel(capsys, tmp_path, monkeypatch):
    """Refused before a notebook executes: the executor is replaced by one that records its
    notebook and stops (it was a wall-clock bound, which a loaded box broke); the same command
    with a good combination reaches it, so the replacement is on the path."""
    started = []

    def no_kernel(path, *args, **kwargs):
        started.append(path)
        raise KeyboardInterrupt  # stops the render where a kernel would start

    monkeypatch.setattr(report, "_execute_once", no_kernel)
    argv = ["report", "--jobs", "1", "--notebooks", "expert_split", "--out", str(tmp_path / "out")]
    err = _error(capsys, *argv, "-p", "model", "qwen3-30b-a3b")
    assert started == [], "checked before a kernel starts"
    assert "expert_split:" in err and "-p histogram:" in err and "-p per_layer_histogram:" in err
    assert not (tmp_path / "out").exists()
    main(argv)
    capsys.readouterr()
    assert [p.stem for p in started] == ["expert_split"]


def test_help_notebook_lists_every_parameter(capsys):
    assert main(["report", "--help-notebook", "net_toks"]) == 0
    out = capsys.readouterr().out
    declared = report.declared_parameters(NOTEBOOKS_DIR / "net_toks.py")
    assert declared and all(f"  {name} " in out for name in declared)
    assert "routing" in out and '(default "auto")' in out
    _error(capsys, "report", "--help-notebook", "no_such_notebook")
