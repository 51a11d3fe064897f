"""Every notebook runs through papermill with small parameters and saves at least one figure.

Notebooks are executed the way the report runs them (jupytext → papermill, kernel ``python3``,
working directory pinned to notebooks/), with ``MOEROOF_FIGURES_DIR`` pointed at a temp dir so
the committed figures are never touched by a test run (the kernel inherits the environment).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from moeroof.core.paths import DATA_DIR, EXTERNAL_DIR, NOTEBOOKS_DIR, REPO_ROOT
from moeroof.data.plan_points import read_plan_points
from moeroof.data.presets import PRESETS_DIR
from moeroof.present.answers import ANSWER_TAG
from moeroof.studies.plan_coverage import POINTS
from test_site import first_text  # the first visible words of a rendered report

jupytext = pytest.importorskip("jupytext")
pm = pytest.importorskip("papermill")
nbformat = pytest.importorskip("nbformat")
from moeroof.present import plots, report  # noqa: E402  (after the notebook stack is known to be there)

#: the rows plan_coverage takes (the validation report's coverage sentence counts its predicted ones)
plan_coverage_rows = read_plan_points(DATA_DIR / "points" / POINTS)

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.py"))

#: small parameters per notebook so each runs in seconds; a notebook without an entry fails
#: test_every_notebook_has_small_parameters, so adding a notebook means adding its entry here.
SMALL_PARAMETERS: dict[str, dict] = {
    # the step cases only (the cache and locality groups simulate for ~35 s; tests/test_held_out.py
    # and tests/test_locality_prior.py hold them), with non-default targets the answer must quote
    "validation": {
        "groups": "step",
        "tok_s_target": 0.25,
        "hit_target": 0.04,
        "coverage_truths": 1,
        "plan_coverage_truths": 1,
        "curve_coverage_truths": 1,
        "family_seeds": 1,
    },
    "union_curve": {"b_max": 64, "model_layers": 4, "bootstrap": 10, "experts": 128, "top_k": 4},
    # only the model changed: the routing default follows it (auto → the embedded trace with its
    # E = 128, K = 8) and so does the cache (auto → the 3-bit model's 11.8 GiB of routed experts,
    # under the preferred 30 GiB); the answer must say both (ANSWER_CHECKS)
    "net_toks": {
        "b_max": 32,
        "claim_b_max": 64,
        "validate": True,
        "model": "qwen3-30b-a3b-3bit",
    },
    "skew_fit": {"b_max": 64, "fit_bootstrap": 5, "gof_sims": 5, "union_bootstrap": 10, "max_layers": 3},
    # non-default model, boxes (the contrast box streams over PCIe), caches and a synthetic trace as routing
    "levers": {
        "b_max": 32,
        "users_max": 8,
        "agents": 8,
        "decode_tokens": 64,
        "prefix_tokens": 256,
        "model": "qwen3-30b-a3b",
        "hardware": "apple-m4-max",
        "contrast_hardware": "h200-pcie-offload",
        "cache_gib": 8.0,
        "contrast_cache_gib": 64.0,
        "routing": "traces/qwen3-30b-a3b-like.npz",
    },
    # non-default model, boxes (the first streams over PCIe, the second from the page cache), routing,
    # overlap and cache policy
    "regime_map": {
        "b_max": 64,
        "n_batch": 8,
        "n_cache": 5,
        "model": "qwen3-30b-a3b",
        "hardware": "h200-pcie-offload",
        "contrast_hardware": "ddr5-desktop",
        "routing": "zipf:0.6",
        "overlap": "sum",
        "cache_policy": "lfu",
    },
    "witness": {"file_mib": 32, "calibrate_seconds": 2.0, "steps": 2, "batch": "1,2,4,8"},
    "cache_ladder": {
        "layers": 4,
        "seeds": 2,
        "fit": True,
        "fit_seeds": 1,
        "fit_layers": 4,
        "bootstrap_replicates": 2,
        "policy_seeds": 1,
        "sensitivity_seeds": 1,
        "sensitivity_layers": 4,
        "routing_fit_seeds": 1,
        "routing_fit_bootstrap": 2,
        "routing_fit_layers": 2,
        "transfer_captures": "mixtral",
        "transfer_bootstrap": 2,
        "big_caches": "84,96",  # not the default 80…120: the answer quotes the largest
    },
    "whatif": {
        "b_max": 32,
        "trace_steps": 16,
        "trace_layers": 2,
        "cache_gib": 12.0,
        "routing": "histograms/deepseek-v3-like.csv",
        "model": "deepseek-v3",
        "hardware": "ddr5-desktop",
    },
    # non-default box (the test writes my-gb10.toml, a renamed GB10: only a GB10 preset has the link
    # between two ranks), streams and caches; the model stays seed 003's (its histograms are GLM-5's)
    "expert_split": {
        "streams": 6,
        "cache_gib": 24.0,
        "ladder_cache_gib": 32.0,
        "relabel_draws": 200,
        "trace_seeds": 2,
        "trace_layers": 6,
        "slowdown_points": 2,
        "bytes_max_iter": 2,
        "curve_seeds": 1,
        "routing_fit_seeds": 1,
        "routing_fit_layers": 2,
        "plan_evaluations": 6,
    },
    # a tiny random checkpoint (2 layers, 8 experts, K = 2), 4 streams × 8 new tokens; one external capture
    "capture": {
        "streams": 4,
        "max_new_tokens": 8,
        "prompt_len": 8,
        "tiny_layers": 2,
        "tiny_experts": 8,
        "tiny_top_k": 2,
        "fit_bootstrap": 3,
        "gof_sims": 3,
        "union_bootstrap": 5,
        "external": "qwen15",
    },
    # a non-default model, box and routing (the answer must name them), 3 cache sizes × 3 B × 6 policies,
    # serially in the kernel; the test writes the Parquet into its temp dir and checks the answer against it
    "sweep": {
        "model": "qwen3-30b-a3b",
        "hardware": "apple-m4-max",
        "routing": "traces/qwen3-30b-a3b-like.npz",
        "cache_gib_max": 16.0,
        "cache_gib_step": 8.0,
        "batch": "1,8,64",
        "tie_tolerance": 0.001,
        "workers": 1,
    },
}


#: the witnessed Mixtral capture (read in place, never copied); skew_fit runs on it when present
MIXTRAL_TRACE = EXTERNAL_DIR / "mixtral8x7b-instruct-fp8-vllm-traces" / "trace_decode.npz"

#: what each notebook's answer must say for its SMALL_PARAMETERS run: ``names`` appear in it;
#: ``synthetic`` / ``projected`` say whether those words must appear (True) or must not (False)
ANSWER_CHECKS: dict[str, dict] = {
    "validation": {
        "names": [
            "Over the step cases",
            "held-out predictions",
            "consistency rows",
            "within 25 %",
            "Worst: `",
            "On 3 one-stream rows of simulated truths",
            "On 1 simulated boxes drawn from fit-plan's priors",
            # one truth: the study's predicted rows, as many as the points file withholds
            f"of {sum(p.net_tok_s is None for p in plan_coverage_rows)} predicted rows lie inside fit-plan's 90 % band",
            "calibrated on 4 of seed 003's rows (M = 8; 20, 40 and 80 GiB)",
            "On 1 simulated one-stream cache curves",
            "calibrated at 9.31, 18.6 and 69.8 GiB as mlx-lm#1438's rows are",
        ],
        "absent": ["locality-prior:", "within 20 %"],
        "synthetic": False,
        "projected": True,
    },
    "net_toks": {
        "names": [
            "qwen3-30b-a3b-3bit",
            "nvme-gen4",
            "11.8 GiB",
            "B = 1…32",
            "seed 000",
            "4×",
            "Defaults that follow the model: routing `auto` → `traces/qwen3-30b-a3b-like.npz`",
            "cache `auto` → 11.8 GiB, every routed expert of qwen3-30b-a3b-3bit",
            "at the box's priors",
        ],
        "synthetic": True,
        "projected": True,
    },
    "union_curve": {
        "names": ["E = 128", "K = 4", "B = 64", "deepseek-v3-like.csv", "glm5-seed003-per-layer.csv"],
        "synthetic": True,
        "projected": True,
    },
    "whatif": {
        "names": ["deepseek-v3", "ddr5-desktop", "from the page cache", "deepseek-v3-like.csv", "12 GiB", "B = 1…32"],
        "absent": ["glm-5.2", "nvme-gen4", "SSD"],
        "synthetic": True,
        "projected": True,
    },
    "levers": {
        "names": [
            "qwen3-30b-a3b",
            "apple-m4-max",
            "h200-pcie-offload",
            "8 GiB expert cache",
            "64 GiB on h200-pcie-offload",
            "qwen3-30b-a3b-like.npz",
            # 64 GiB holds all of qwen3-30b-a3b's routed experts (54 GiB): none streamed once warm
            "every routed expert in its cache: none streamed over the PCIe link once warm",
            "8 agents",
        ],
        "synthetic": True,
        "projected": True,
    },
    "regime_map": {
        "names": [
            "qwen3-30b-a3b",
            "h200-pcie-offload",
            "ddr5-desktop",
            "Zipf s=0.6",
            "`sum`",
            "B = 1…64",
            "PCIe link",
            "page cache",
        ],
        "absent": ["glm-5.2", "nvme-gen4", "epyc-server", "SSD"],
        "synthetic": False,
        "projected": True,
    },
    # layers, seeds and fit are the small run's own; the traces are sampled by the suite, not a data file
    "cache_ladder": {
        "names": [
            "L = 4 layers",
            "over 2 seeds",
            "refitted in this run",
            "pair-m8-40",
            "booster-m8-20",
            "predictions.csv",
            "seed 003 (",
            "LRU falls off its cliff",
            "At 96 GiB per rank",
            "At another M than the calibration's 8",
            "no per-stream locality",
            "booster-m1-20",
            "predictions-fit-routing.csv",
        ],
        "synthetic": False,
        "projected": True,
    },  # fmt: skip
    # relabel_draws, trace_seeds and trace_layers are the small run's own; the histograms are synthetic
    "expert_split": {
        "names": [
            "glm-5-nvfp4",
            "my-gb10",
            "M = 6",
            "24 GiB",
            "32 GiB",
            "glm5-seed003-summed.csv",
            "glm5-seed003-per-layer.csv",
            "200 random relabelings",
            "2 sampled traces of 6 layers",
            "seed 003 (",
            "booster (one GB10",
            "baseline: one booster",
        ],
        "synthetic": True,
        "projected": True,
    },  # fmt: skip
    # the live bench is witnessed; the replayed run's calibration and the H200 preset have assumed engine terms
    "witness": {
        "names": ["B = 1…8", "32 MiB", "2 counted steps", "`uniform`", "`sum`", "`max`", "`uncoalesced`", "H200"],
        "synthetic": False,
        "projected": True,
    },
    # on the embedded files; on the witnessed Mixtral capture when present (see the test)
    "skew_fit": {"names": ["deepseek-v3-like.csv", "qwen3-30b-a3b-like.npz"], "synthetic": True, "projected": True},
    # a random-initialised tiny model: witnessed routing of a model nobody serves, never projected
    "capture": {
        "names": ["Qwen3-MoE", "4 streams", "E = 8, K = 2, 2 MoE layers", "witnessed", "nobody serves", "Qwen1.5-MoE"],
        "synthetic": False,
        "projected": False,
    },
    # the winning policy and "projected" are also checked against the run's own Parquet rows (sweep_checks)
    "sweep": {
        "names": [
            "qwen3-30b-a3b",
            "apple-m4-max",
            "`traces/qwen3-30b-a3b-like.npz`",
            "54 points",
            "cache 0–16 GiB × B = 1…64",
            "one process, serially",
            "against lru at the same cache and B",
        ],
        "synthetic": True,
        "projected": True,
    },
}


def sweep_checks(parquet, parameters: dict, checks: dict) -> dict:
    """ANSWER_CHECKS for the sweep notebook, completed from the Parquet file its run wrote: the
    answer names in bold the policy that wins the most cells there (every policy evaluated and
    fitting in RAM, the best at least ``tie_tolerance`` over the runner-up) and the model, box
    and routing of the rows; "projected" exactly when a row rests on a non-witnessed input."""
    import pandas as pd

    rows = pd.read_parquet(parquet)
    ok = rows[rows["error"].isna()]
    net = ok.pivot(index=["cache_gib", "batch"], columns="cache_policy", values="net_tok_s")
    fits = ok.pivot(index=["cache_gib", "batch"], columns="cache_policy", values="fits_in_memory").eq(True)
    cells = net[net.notna().all(axis=1) & fits.all(axis=1)]
    wins: dict[str, int] = {}
    for _, row in cells.iterrows():
        best, second = row.sort_values(ascending=False, kind="stable").iloc[:2]
        if best >= second * (1 + parameters["tie_tolerance"]):
            winner = row.idxmax()
            wins[winner] = wins.get(winner, 0) + 1
    assert wins, f"{parquet}: no cell with a winner to check the answer against"
    most = max(wins.values())
    winners = [p for p, n in wins.items() if n == most]
    projected = bool((ok["result"] == "projected").any() or (ok["non_witnessed"].fillna("") != "").any())
    assert projected == checks["projected"], f"the Parquet rows say projected={projected}; fix ANSWER_CHECKS"
    names = [*checks["names"], *(f"**{v}**" for col in ("model", "hardware") for v in ok[col].unique())]
    names += [f"`{v}`" for v in ok["routing"].unique()]
    return {**checks, "names": names, "winners": [f"**{p}** gives the most net tok/s in {most} of" for p in winners]}


def answer_text(ipynb) -> str:
    """The Markdown the executed notebook displayed in its cell tagged ``answer`` (exactly one)."""
    nb = json.loads(ipynb.read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if ANSWER_TAG in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{ipynb.name}: {len(cells)} cells tagged {ANSWER_TAG!r}, expected one"
    texts = [
        "".join(o["data"]["text/markdown"]) for o in cells[0].get("outputs", []) if "text/markdown" in o.get("data", {})
    ]
    assert texts, f"{ipynb.name}: the answer cell displayed no Markdown"
    return "\n".join(texts)


def check_answer(stem: str, text: str, checks: dict) -> None:
    assert text.startswith("**Answer"), f"{stem}: answer does not open with **Answer: {text[:80]!r}"
    for name in checks.get("names", []):
        assert name in text, f"{stem}: the answer does not name {name!r}: {text}"
    for name in checks.get("absent", []):  # a default this run replaced, or a word that is not true of it
        assert name not in text, f"{stem}: the answer names {name!r}, which this run does not use: {text}"
    if "winners" in checks:  # one of these (the policies tied for the most cells won) must be named
        assert any(w in text for w in checks["winners"]), (
            f"{stem}: the answer names none of {checks['winners']}: {text}"
        )
    for word in ("synthetic", "projected"):
        if word in checks:
            assert (word in text) == checks[word], (
                f"{stem}: {word!r} {'missing from' if checks[word] else 'in'}: {text}"
            )


def test_every_notebook_has_an_answer_cell_and_answer_checks():
    """Every notebook displays its answer from one cell tagged ``answer``, and the small-parameter
    run checks it (ANSWER_CHECKS): a notebook without either fails here, without running it."""
    no_cell, several = [], []
    for path in NOTEBOOKS:
        tagged = [c for c in jupytext.read(path).cells if ANSWER_TAG in c.get("metadata", {}).get("tags", [])]
        if not tagged:
            no_cell.append(path.stem)
        elif len(tagged) > 1 or tagged[0].cell_type != "code":
            several.append(path.stem)
    assert not no_cell, f"no cell tagged {ANSWER_TAG!r} in: {no_cell}"
    assert not several, f"expected exactly one code cell tagged {ANSWER_TAG!r} in: {several}"
    unchecked = [p.stem for p in NOTEBOOKS if p.stem not in ANSWER_CHECKS]
    assert not unchecked, f"add ANSWER_CHECKS entries in {__file__} for: {unchecked}"
    for stem, checks in ANSWER_CHECKS.items():
        assert checks.get("names") and {"synthetic", "projected"} <= set(checks), (
            f"ANSWER_CHECKS[{stem!r}] must name parameters and say whether 'synthetic' and 'projected' appear"
        )


def test_every_notebook_has_small_parameters():
    missing = [p.stem for p in NOTEBOOKS if p.stem not in SMALL_PARAMETERS]
    assert not missing, f"add SMALL_PARAMETERS entries in {__file__} for: {missing}"


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_saves_a_figure(path, tmp_path, monkeypatch):
    figures = tmp_path / "figures"
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(figures))
    parameters = dict(SMALL_PARAMETERS.get(path.stem, {}))
    checks = dict(ANSWER_CHECKS.get(path.stem, {}))
    if path.stem == "skew_fit" and MIXTRAL_TRACE.is_file():
        # the witnessed capture as trace and (counted by moeroof histogram) as histogram: nothing synthetic
        hist = tmp_path / "mixtral-decode.csv"
        subprocess.run(
            [sys.executable, "-m", "moeroof.cli", "histogram", str(MIXTRAL_TRACE), "-o", str(hist)],
            check=True,
            capture_output=True,
        )
        parameters.update(trace=str(MIXTRAL_TRACE), histogram=str(hist))
        checks.update(names=["trace_decode.npz", "mixtral-decode.csv"], synthetic=False, projected=False)
    if path.stem == "sweep":
        parameters["out"] = str(tmp_path / "sweep.parquet")
    if path.stem == "expert_split":  # a box of the user's own, given as a TOML path
        box = tmp_path / "my-gb10.toml"
        box.write_text(
            (PRESETS_DIR / "hardware" / "gb10.toml").read_text().replace('name = "gb10"', 'name = "my-gb10"')
        )
        parameters["hardware"] = str(box)
    out = tmp_path / f"{path.stem}.ipynb"
    # as make report runs it (papermill, the notebook's folder, a cell timeout with one retry in a
    # fresh kernel); raises NotebookFailed on any cell error
    nb = report.execute(path, parameters)
    nbformat.write(nb, str(out))
    assert out.is_file()
    saved = sorted(p.name for p in figures.glob("*")) if figures.is_dir() else []
    assert saved, f"{path.name} saved no figure through moeroof.present.plots.save_figure"
    if path.stem == "sweep":
        checks = sweep_checks(tmp_path / "sweep.parquet", parameters, checks)
    answer = answer_text(out)
    check_answer(path.stem, answer, checks)
    # the report opens with that answer: the first words of its HTML are the answer's, then the question
    page = report.to_html(report.lift_answer(nb), path.stem)
    opening = first_text(page)
    plain = " ".join(re.sub(r"[*`]", "", answer).split())
    assert opening.startswith(plain[:120]), f"{path.stem}: the report opens with {opening[:160]!r}, not its answer"
    # no raw Python literals in a report: tables and sentences, never a printed dict
    for raw in ("{'", "{&#39;", "': {", "&#39;: "):
        assert raw not in page, (
            f"{path.stem}: a raw dict in the report: ...{page[page.index(raw) - 80 : page.index(raw) + 80]}..."
        )


@pytest.mark.notebook
def test_whatif_runs_with_a_fit_and_says_so(tmp_path, monkeypatch):
    """whatif's ``fit``: a fit-plan result's knobs on the box (as plan --fit), named in the answer."""
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(tmp_path / "figures"))
    fit = tmp_path / "fit.json"
    subprocess.run(
        [sys.executable, "-m", "moeroof.cli", "fit-plan", str(REPO_ROOT / "data" / "points" / "bigrig.plan-points"),
         "--model", "qwen3-30b-a3b-3bit", "--hardware", "apple-m4", "--json", "--output", str(fit)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    small = {"b_max": 16, "trace_steps": 16, "trace_layers": 2, "cache_gib": 8.0}
    params = {**small, "model": "qwen3-30b-a3b-3bit", "hardware": "apple-m4", "fit": str(fit)}
    out = tmp_path / "whatif.ipynb"
    nbformat.write(report.execute(NOTEBOOKS_DIR / "whatif.py", params), str(out))
    answer = answer_text(out)
    assert f"knobs of `{fit}`" in answer and "qwen3-30b-a3b-3bit" in answer
    # the knobs named are the fit's own (bigrig's two end points fit the engine terms)
    assert "engine_seconds_per_step" in answer and "ssd_scale" not in answer


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
    """papermill reads `name: type = value  # help` for every parameter (docs/development.md)."""
    ipynb = tmp_path / f"{path.stem}.ipynb"
    jupytext.write(jupytext.read(path), ipynb)
    params = pm.inspect_notebook(str(ipynb))
    assert params, f"{path.name} has no cell tagged 'parameters'"
    for name, spec in params.items():
        assert spec["inferred_type_name"] not in ("None", None), f"{path.name}: {name} has no type hint"
        assert spec["help"], f"{path.name}: {name} has no help comment (or papermill could not parse it)"


def test_committed_figures_match_a_fresh_default_render(tmp_path, monkeypatch):
    """figures/ plots what a fresh default render plots, on any machine: each figure's data
    (plots.figure_data: lines, markers, bars, spans, images, texts, labels; numbers to 6
    significant digits) equals the committed NAME.json to plots.DATA_RTOL. SVG bytes are not
    compared: clip-path ids and last digits differ across CPUs (make figures updates figures/).

    Renders union_curve (the fast notebook) with its default parameters into a temp dir."""
    figures = tmp_path / "figures"
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(figures))
    nbformat.write(report.execute(NOTEBOOKS_DIR / "union_curve.py"), str(tmp_path / "union_curve.ipynb"))
    fresh = sorted(figures.glob("*.json"))
    assert fresh
    for path in fresh:
        committed = REPO_ROOT / "figures" / path.name
        assert committed.is_file(), f"{path.stem} is rendered but not committed in figures/: run make figures"
        for fmt in plots.FORMATS:
            assert committed.with_suffix(f".{fmt}").is_file(), f"figures/{path.stem}.{fmt} is missing"
        diff = plots.figure_data_differences(json.loads(committed.read_text()), json.loads(path.read_text()))
        assert not diff, f"figures/{path.stem} plots something else than a fresh render: {diff[:3]}; run make figures"


def test_every_committed_figure_has_its_data():
    """Each committed SVG/PNG has the data file its comparison reads."""
    stems = {p.stem for fmt in plots.FORMATS for p in (REPO_ROOT / "figures").glob(f"*.{fmt}")}
    assert stems
    for stem in sorted(stems):
        data = REPO_ROOT / "figures" / f"{stem}.json"
        assert data.is_file(), f"figures/{stem}.json is missing: run make figures"
        assert json.loads(data.read_text())["axes"], stem
