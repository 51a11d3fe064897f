"""The figure saver: byte-stable SVG and PNG, written where MOEROOF_FIGURES_DIR points."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # library tests only; report kernels keep the inline backend

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
    assert [p.name for p in first] == ["fig.svg", "fig.png", "fig.json"]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_overwrite_in_place_is_stable_and_leaves_no_temp_files(figure, tmp_path):
    svg, png, data = plots.save_figure(figure, "fig", directory=tmp_path)
    before = svg.read_bytes(), png.read_bytes(), data.read_bytes()
    plots.save_figure(figure, "fig", directory=tmp_path)
    assert (svg.read_bytes(), png.read_bytes(), data.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.json", "fig.png", "fig.svg"]


def test_no_timestamp_or_version_in_outputs(figure, tmp_path):
    svg, png, _ = plots.save_figure(figure, "fig", directory=tmp_path)
    text = svg.read_text(encoding="utf-8")
    assert "<dc:date>" not in text
    assert "Matplotlib v" not in text
    assert b"Software" not in png.read_bytes()


def test_lands_in_env_figures_dir(figure, tmp_path, monkeypatch):
    target = tmp_path / "figs"
    monkeypatch.setenv("MOEROOF_FIGURES_DIR", str(target))
    written = plots.save_figure(figure, "union_curve")
    assert written == [target / "union_curve.svg", target / "union_curve.png", target / "union_curve.json"]
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
    # B = 8 does not fit: no term binds a step that cannot run, so compute is not a regime here
    assert [label for _, label in handles] == ["ssd-bound", "memory-bound"]
    spans = ax.patches
    assert len(spans) == 4  # three feasible regime intervals and one hatched infeasible span
    assert spans[-1].get_hatch() == "//"
    # the boundary is marked where RAM runs out, and says so
    assert [ln.get_xdata()[0] for ln in ax.get_lines()] == [8]
    assert [t.get_text().strip() for t in ax.texts] == ["no fit in RAM from B = 8"]
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


# ----------------------------------------------------------------------------- what a figure plots


def _curve_figure(y, title="t"):
    fig, ax = plt.subplots()
    ax.plot([1, 2, 4, 8], y, label="net tok/s")
    ax.scatter([2, 4], [y[1], y[2]], label="measured")
    ax.fill_between([1, 2, 4, 8], np.asarray(y) * 0.9, np.asarray(y) * 1.1, alpha=0.2)
    ax.bar([1, 2], [3.0, 4.0])
    ax.axvspan(4, 8, color="0.9")
    ax.text(2, 3, "B* = 4")
    ax.set_title(title)
    ax.set_xlabel("batch B")
    ax.legend()
    return fig


def test_figure_data_holds_what_is_plotted():
    fig = _curve_figure([1.0, 2.0, 3.5, 4.0])
    d = plots.figure_data(fig)
    plt.close(fig)
    (ax,) = d["axes"]
    assert ax["title"][1] == "t" and ax["xlabel"] == "batch B"
    assert ax["lines"][0]["label"] == "net tok/s" and ax["lines"][0]["y"] == [1.0, 2.0, 3.5, 4.0]
    kinds = [c["kind"] for c in ax["collections"]]
    assert "PathCollection" in kinds and any("Poly" in k or "Fill" in k for k in kinds)
    scatter = next(c for c in ax["collections"] if c["kind"] == "PathCollection")
    assert scatter["offsets"] == [[2.0, 2.0], [4.0, 3.5]]
    bars = [p for p in ax["patches"] if p.get("size") and p["size"][1] in (3.0, 4.0)]
    assert len(bars) == 2
    assert ax["texts"][0]["text"] == "B* = 4" and ax["legend"] == ["net tok/s", "measured"]


def test_figures_that_differ_in_the_last_digits_plot_the_same():
    y = np.array([1.0, 2.0, 3.5, 4.0])
    a, b = _curve_figure(y), _curve_figure(y * (1 + 3e-13))  # another CPU's libm
    c = _curve_figure(y * np.array([1, 1, 1.01, 1]))  # a real change: one point moves by 1 %
    d = _curve_figure(y, title="other")
    da, db, dc, dd = (plots.figure_data(f) for f in (a, b, c, d))
    for f in (a, b, c, d):
        plt.close(f)
    assert plots.figure_data_differences(da, db) == []
    diff = plots.figure_data_differences(da, dc)
    assert diff and any(".lines[0].y[2]" in x for x in diff)
    assert any("title" in x for x in plots.figure_data_differences(da, dd))


def test_make_figures_copies_only_what_plots_differently(tmp_path):
    from moeroof.present import figures

    rendered, committed = tmp_path / "reports" / "figures", tmp_path / "figures"
    y = np.array([1.0, 2.0, 3.5, 4.0])
    for stem, yy in (("same", y), ("moved", y), ("new", y)):
        fig = _curve_figure(yy)
        plots.save_figure(fig, stem, directory=committed if stem != "new" else tmp_path / "elsewhere")
        plt.close(fig)
    (committed / "orphan.svg").write_text("<svg/>")
    for stem, yy in (("same", y * (1 + 1e-12)), ("moved", y * 1.05), ("new", y)):
        fig = _curve_figure(yy)
        plots.save_figure(fig, stem, directory=rendered)
        plt.close(fig)
    same_svg = (committed / "same.svg").read_bytes()
    assert figures.main(["--from", str(rendered), "--to", str(committed), "--check"]) == 1
    assert not (committed / "new.svg").exists(), "--check changes nothing"
    found = figures.sync(rendered, committed)
    assert set(found.changed) == {"moved", "new"} and found.unchanged == ("same",) and found.stale == ("orphan",)
    assert (committed / "same.svg").read_bytes() == same_svg, "a figure that plots the same keeps its bytes"
    for ext in ("svg", "png", "json"):
        assert (committed / f"moved.{ext}").read_bytes() == (rendered / f"moved.{ext}").read_bytes()
    assert (committed / "orphan.svg").is_file(), "stale figures are listed, not deleted"
    assert figures.compare(rendered, committed).changed == {}
