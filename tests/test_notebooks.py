"""Every notebook runs through papermill with small parameters and saves at least one figure.

Notebooks are executed the way the report runs them (jupytext → papermill, kernel ``python3``,
working directory pinned to notebooks/), with ``MOEROOF_FIGURES_DIR`` pointed at a temp dir so
the committed figures are never touched by a test run (the kernel inherits the environment).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from moeroof.paths import NOTEBOOKS_DIR, REPO_ROOT

jupytext = pytest.importorskip("jupytext")
pm = pytest.importorskip("papermill")

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.py"))

#: small parameters per notebook so each runs in seconds; a notebook without an entry fails
#: test_every_notebook_has_small_parameters, so adding a notebook means adding its entry here.
SMALL_PARAMETERS: dict[str, dict] = {
    "union_curve": {"b_max": 64, "model_layers": 4, "bootstrap": 10},
    "skew_fit": {"b_max": 64, "fit_bootstrap": 5, "gof_sims": 5, "union_bootstrap": 10, "max_layers": 3},
}


def test_every_notebook_has_small_parameters():
    missing = [p.stem for p in NOTEBOOKS if p.stem not in SMALL_PARAMETERS]
    assert not missing, f"add SMALL_PARAMETERS entries in {__file__} for: {missing}"


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_saves_a_figure(path, tmp_path, monkeypatch):
    figures = tmp_path / "figures"
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(figures))
    parameters = SMALL_PARAMETERS.get(path.stem, {})
    nb = jupytext.read(path)
    out = tmp_path / f"{path.stem}.ipynb"
    pm.execute_notebook(
        nb,
        str(out),
        parameters=parameters,
        kernel_name="python3",
        language="python",  # percent notebooks may carry no kernelspec; papermill needs it to inject parameters
        cwd=str(NOTEBOOKS_DIR),
        progress_bar=False,
    )  # raises PapermillExecutionError on any cell error
    assert out.is_file()
    saved = sorted(p.name for p in figures.glob("*")) if figures.is_dir() else []
    assert saved, f"{path.name} saved no figure through moeroof.plots.save_figure"


def test_no_ipynb_tracked_in_notebooks():
    """Notebooks are committed as .py percent text only; generated .ipynb stay untracked."""
    git = shutil.which("git")
    if git is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(
        [git, "ls-files", "--", "notebooks/*.ipynb"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "", f"committed .ipynb files: {result.stdout.split()}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_parameters_are_typed_and_documented(path, tmp_path):
    """papermill reads `name: type = value  # help` for every parameter (STYLE.md)."""
    ipynb = tmp_path / f"{path.stem}.ipynb"
    jupytext.write(jupytext.read(path), ipynb)
    params = pm.inspect_notebook(str(ipynb))
    assert params, f"{path.name} has no cell tagged 'parameters'"
    for name, spec in params.items():
        assert spec["inferred_type_name"] not in ("None", None), f"{path.name}: {name} has no type hint"
        assert spec["help"], f"{path.name}: {name} has no help comment (or papermill could not parse it)"
