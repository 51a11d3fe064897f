"""The figure saver: byte-stable SVG and PNG, written where MOEROOF_FIGURES_DIR points."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # library tests only; report kernels keep the inline backend (STYLE.md)

import matplotlib.pyplot as plt
import numpy as np
import pytest

from moeroof.present import plots


@pytest.fixture
def figure():
    rng = np.random.default_rng(sum(map(ord, "test_plots")))
    with plots.style():
        fig, ax = plt.subplots()
        ax.plot(np.arange(50), rng.normal(size=50).cumsum(), label=plots.provenance_label("projected"))
        ax.set_xscale("log")
        ax.set_xlabel("batch B (agents)")
        ax.set_ylabel(plots.label_with_baseline("coalescing ratio B·K/U", "uncoalesced"))
        ax.set_title("test figure")
        ax.legend()
    yield fig
    plt.close(fig)


def test_same_figure_twice_gives_identical_bytes(figure, tmp_path):
    first = plots.save_figure(figure, "fig", directory=tmp_path / "a")
    second = plots.save_figure(figure, "fig", directory=tmp_path / "b")
    assert [p.name for p in first] == ["fig.svg", "fig.png"]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_overwrite_in_place_is_stable_and_leaves_no_temp_files(figure, tmp_path):
    svg, png = plots.save_figure(figure, "fig", directory=tmp_path)
    before = svg.read_bytes(), png.read_bytes()
    plots.save_figure(figure, "fig", directory=tmp_path)
    assert (svg.read_bytes(), png.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "fig.svg"]


def test_no_timestamp_or_version_in_outputs(figure, tmp_path):
    svg, png = plots.save_figure(figure, "fig", directory=tmp_path)
    text = svg.read_text(encoding="utf-8")
    assert "<dc:date>" not in text
    assert "Matplotlib v" not in text
    assert b"Software" not in png.read_bytes()


def test_lands_in_env_figures_dir(figure, tmp_path, monkeypatch):
    target = tmp_path / "figs"
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(target))
    written = plots.save_figure(figure, "union_curve")
    assert written == [target / "union_curve.svg", target / "union_curve.png"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)


def test_failed_save_leaves_nothing(tmp_path, monkeypatch):
    fig, _ = plt.subplots()

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(fig, "savefig", boom)
    with pytest.raises(RuntimeError):
        plots.save_figure(fig, "fig", directory=tmp_path)
    plt.close(fig)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../escape"])
def test_name_must_be_plain_stem(figure, tmp_path, bad):
    with pytest.raises(ValueError):
        plots.save_figure(figure, bad, directory=tmp_path)


def test_labels():
    assert plots.label_with_baseline("coalescing ratio B·K/U", "uncoalesced") == (
        "coalescing ratio B·K/U (baseline: uncoalesced)"
    )
    with pytest.raises(ValueError):
        plots.label_with_baseline("speedup", "")
    assert "witnessed" in plots.provenance_label("witnessed")
    assert plots.provenance_label("assumed").startswith("projected")
    with pytest.raises(ValueError):
        plots.provenance_label("guessed")


def test_shade_regimes_marks_each_bound_and_infeasible_batches():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moeroof.models.step import TERMS
    from moeroof.present.plots import REGIME_COLORS, shade_regimes

    fig, ax = plt.subplots()
    handles = shade_regimes(ax, [1, 2, 4, 8], ("ssd", "ssd", "memory", "compute"), [True, True, True, False])
    assert [label for _, label in handles] == ["ssd-bound", "memory-bound", "compute-bound"]
    spans = ax.patches
    assert len(spans) == 5  # four regime intervals and one hatched infeasible span
    assert spans[-1].get_hatch() == "//"
    assert set(REGIME_COLORS) == set(TERMS)
    plt.close(fig)


def test_plain_log_ticks_labels_in_plain_numbers():
    fig, ax = plt.subplots()
    ax.plot([1, 300], [0.01, 20])
    ax.set(xscale="log", yscale="log")
    plots.plain_log_ticks(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    ylabels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert {"1", "2", "5", "10", "100"} <= set(labels), labels
    assert {"0.01", "0.1", "1", "10"} <= set(ylabels), ylabels
    assert not any("10^" in x or "times" in x or "×" in x for x in labels + ylabels)
    plt.close(fig)


def test_plain_log_ticks_leaves_a_linear_axis_alone():
    fig, ax = plt.subplots()
    ax.plot([1, 300], [0, 20])
    ax.set_xscale("log")
    before = type(ax.yaxis.get_major_formatter())
    plots.plain_log_ticks(ax)
    assert type(ax.yaxis.get_major_formatter()) is before
    plt.close(fig)


def test_pvalue_text_names_the_simulation_floor():
    assert plots.pvalue_text(1 / 50, 49) == "p ≤ 0.02 (the simulation floor)"
    assert plots.pvalue_text(0.3, 49) == "0.3"
    assert plots.pvalue_text(float("nan"), 49) == "n/a"


def test_show_table_hides_the_index_and_writes_percentages():
    import pandas as pd

    html = plots.show_table(
        pd.DataFrame({"B": [1, 8], "hit rate": [0.5, 0.123], "x": [1.23456, float("nan")]}), percent=["hit rate"]
    ).to_html()
    assert "50.0 %" in html and "12.3 %" in html and "1.23" in html
    assert 'class="row_heading' not in html  # no index column


def test_plain_log_ticks_labels_a_symlog_axis_plainly():
    fig, ax = plt.subplots()
    ax.plot([0, 100], [0, 30])
    ax.set_yscale("symlog")
    plots.plain_log_ticks(ax, "y")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert {"0", "1", "10"} <= set(labels), labels
    assert not any("10^" in x or "×" in x or "$" in x for x in labels)
    plt.close(fig)


def test_show_table_html_is_the_same_on_every_render():
    """pandas gives each Styler a random table id; a report rendered twice must not differ by it."""
    import pandas as pd

    from moeroof.present.plots import show_table

    df = pd.DataFrame({"B": [1, 8], "hit": [0.25, 0.5]})
    first, second = show_table(df, percent=["hit"]).to_html(), show_table(df.copy(), percent=["hit"]).to_html()
    assert first == second
    other = show_table(pd.DataFrame({"B": [1, 8], "hit": [0.25, 0.75]}), percent=["hit"]).to_html()
    assert other != first


def test_show_table_text_form_has_no_memory_address():
    import pandas as pd

    from moeroof.present.plots import show_table

    t = show_table(pd.DataFrame({"B": [1, 8], "hit": [0.25, 0.5]}), percent=["hit"])
    assert " at 0x" not in repr(t) and "25.0 %" in repr(t) and "B" in repr(t)
