"""`moeroof split`: its JSON contract and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.core.paths import DATA_DIR
from moeroof.data.io import read_histogram

HIST = DATA_DIR / "histograms" / "glm5-seed003-summed.csv"


def run_json(capsys, *argv):
    assert main(["split", str(HIST), *argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


@pytest.mark.parametrize("method", ["id", "lpt", "weighted", "bytes"])
def test_contract(method, capsys):
    extra = ["--rank-speed", "1,0.6"] if method in ("weighted", "bytes") else []
    rep = run_json(capsys, "--ranks", "2", "--method", method, *extra)
    counts = read_histogram(HIST).counts[0]
    assign = np.array(rep["assignment"])
    assert assign.shape == (288,) and set(assign.tolist()) <= {0, 1}
    # load_rows are the firing counts each rank owns, computed here independently
    np.testing.assert_array_equal(rep["load_rows"], [counts[assign == r].sum() for r in range(2)])
    assert rep["imbalance"] == pytest.approx(max(rep["load_rows"]) / np.mean(rep["load_rows"]))
    if method in ("weighted", "bytes"):
        assert len(rep["predicted_step_seconds"]) == 2
    if method == "id":
        assert rep["assignment"] == [0] * 144 + [1] * 144
    if method == "lpt":
        assert np.bincount(assign).tolist() == [144, 144]
        assert rep["imbalance"] < 1.001  # seed 003: LPT 1.000x on its own histogram


def test_weighted_gives_the_faster_rank_more_experts(capsys):
    rep = run_json(capsys, "--ranks", "2", "--method", "weighted", "--rank-speed", "1,0.5")
    sizes = np.bincount(rep["assignment"], minlength=2)
    assert sizes[0] > sizes[1]


def test_table_output(capsys):
    assert main(["split", str(HIST), "--ranks", "2", "--method", "lpt"]) == 0
    out = capsys.readouterr().out
    assert "imbalance (max/mean load rows)" in out and "predicted step" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--ranks", "2", "--method", "weighted", "--rank-speed", "1"], "--rank-speed"),
        (["--ranks", "2", "--method", "weighted", "--rank-speed", "1,-1"], "--rank-speed"),
        (["--ranks", "2", "--method", "weighted", "--rank-speed", "1,x"], "--rank-speed"),
        (["--ranks", "0", "--method", "lpt"], "--ranks"),
        (["--ranks", "2", "--method", "lpt", "--cache-gib", "-1"], "--cache-gib"),
    ],
)
def test_bad_flags(argv, needle, capsys):
    assert main(["split", str(HIST), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and "Traceback" not in err


def test_bad_histogram(tmp_path, capsys):
    bad = tmp_path / "h.csv"
    bad.write_text("layer,expert,count\n0,0,-5\n")
    (tmp_path / "h.json").write_text(
        json.dumps(
            {
                "model": "x",
                "experts": 4,
                "top_k": 2,
                "layers": 1,
                "tokens": 10,
                "source": "test",
                "layers_summed": False,
            }
        )
    )
    assert main(["split", str(bad), "--ranks", "2", "--method", "lpt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:2: count:")
