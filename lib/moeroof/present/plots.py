"""One place that saves figures, so every figure is byte-stable on one machine, labelled, and
comparable by what it plots on any other.

Design docs link the committed SVG/PNG files in ``figures/``; a re-render that changes bytes
without changing the picture makes noisy diffs and hides real changes. So the saver pins
everything matplotlib would otherwise vary between runs: the SVG id hash salt, the date and
creator metadata, the PNG software tag and the dpi. Beside each figure it writes ``NAME.json``:
what the figure plots (:func:`figure_data`: every line, marker, bar, span, image and text, the
numbers to :data:`DATA_DIGITS` significant digits), so that two renders on different CPUs —
whose last digits and SVG clip ids differ — are compared by what they show
(:func:`figure_data_differences`), not by their bytes. It writes each file atomically
(:mod:`moeroof.core.atomic`: temp file in the same directory, then ``os.replace``) so a crash
mid-render leaves the old figure or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from moeroof.core import atomic, paths

#: resolution of the PNG copy; fixed so the bytes do not depend on the user's rc settings
DPI = 120
#: matplotlib hashes this salt into SVG element ids; fixed salt → same ids on every run
SVG_HASHSALT = "moeroof"
#: metadata matplotlib would otherwise stamp with a date or its version
SVG_METADATA = {"Date": None, "Creator": None}
PNG_METADATA = {"Software": None}
FORMATS = ("svg", "png")
#: significant digits of the numbers in a figure's data file (NAME.json)
DATA_DIGITS = 6
#: two figures plot the same when every number agrees to this relative tolerance (plus
#: :data:`DATA_ATOL` absolute) and every text is equal: far above the last-digit noise of
#: another CPU's libm or BLAS, far below anything a reader can see
DATA_RTOL = 1e-4
DATA_ATOL = 1e-9

#: house look for figures; applied by :func:`style` (optional, notebooks opt in)
STYLE_RC = {
    "svg.hashsalt": SVG_HASHSALT,
    "figure.figsize": (7.0, 4.3),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
}

#: what each provenance tag means on a figure (non-witnessed inputs make results projected)
_PROVENANCE_LABELS = {
    "witnessed": "witnessed (measured)",
    "projected": "projected (model, not measured)",
    "assumed": "projected (from assumed inputs)",
    "witnessed-inputs": "model on witnessed inputs (not itself measured)",
}


@contextmanager
def style() -> Iterator[None]:
    """Apply the house rc settings for the duration of a ``with`` block."""
    with mpl.rc_context(cast(Any, STYLE_RC)):
        yield


def provenance_label(provenance: str) -> str:
    """Text to put in a title or legend saying whether a curve is measured or modelled.

    An ``assumed`` input makes the result ``projected``: only witnessed numbers are served as
    measurements.
    """
    try:
        return _PROVENANCE_LABELS[provenance]
    except KeyError:
        known = ", ".join(sorted(_PROVENANCE_LABELS))
        raise ValueError(f"unknown provenance {provenance!r}; expected one of: {known}") from None


def label_with_baseline(text: str, baseline: str) -> str:
    """``text`` with its baseline named, e.g. ``"coalescing ratio B·K/U (baseline: uncoalesced)"``.

    A multiple without its baseline is not a number anyone can check, so an empty
    baseline is an error rather than a silently bare label.
    """
    if not baseline or not baseline.strip():
        raise ValueError("a baseline is required: name what the multiple is measured against")
    return f"{text} (baseline: {baseline})"


def _check_name(name: str) -> str:
    """A figure name is a bare file stem, so it cannot escape the figures directory."""
    if not name or name in {".", ".."} or Path(name).name != name or "/" in name or "\\" in name:
        raise ValueError(f"figure name must be a plain file stem, got {name!r}")
    return name


def save_figure(fig: Figure, name: str, *, directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Write ``name.svg`` and ``name.png`` for ``fig`` and return their paths.

    ``directory`` defaults to :func:`moeroof.core.paths.figures_dir` (``MOEROOF_FIGURES_DIR``
    overrides it, which is how tests keep committed figures untouched). Saving the same figure
    twice gives identical bytes.
    """
    _check_name(name)
    out_dir = Path(directory) if directory is not None else paths.figures_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with mpl.rc_context({"svg.hashsalt": SVG_HASHSALT}):
        for fmt in FORMATS:
            metadata = SVG_METADATA if fmt == "svg" else PNG_METADATA
            save = lambda handle, fmt=fmt, metadata=metadata: fig.savefig(
                handle, format=fmt, dpi=DPI, metadata=metadata
            )
            written.append(atomic.write_via(out_dir / f"{name}.{fmt}", save))
    text = json.dumps(figure_data(fig), indent=1, sort_keys=True, allow_nan=False) + "\n"
    written.append(atomic.write_text(out_dir / f"{name}.json", text))
    return written


def _num(v) -> float | str | None:
    """A plotted number as the data file keeps it: DATA_DIGITS significant digits; NaN (a gap)
    as None, ±inf by name."""
    x = float(v)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(f"{x:.{DATA_DIGITS}g}")


def _nums(a) -> list:
    arr: np.ndarray = np.ma.filled(np.ma.asarray(a, dtype=float), np.nan)
    return [_num(x) for x in arr.ravel()] if arr.ndim <= 1 else [_nums(row) for row in arr]


def figure_data(fig: Figure) -> dict:
    """What a figure plots, as plain JSON: per axes its title, axis labels and scales, limits,
    every line (label, x, y), collection (markers' offsets, filled areas' vertices, mesh
    values), patch (bars, spans), image, text and legend entry; numbers to
    :data:`DATA_DIGITS` significant digits. Two figures with the same data show the same thing;
    SVG ids, font hinting and anti-aliasing are not in it."""
    from matplotlib.collections import PolyCollection, QuadMesh

    suptitle = getattr(fig, "_suptitle", None)
    out: dict = {"suptitle": suptitle.get_text() if suptitle is not None else "", "axes": []}
    for ax in fig.axes:
        item: dict = {
            "title": [ax.get_title(loc) for loc in ("left", "center", "right")],
            "xlabel": ax.get_xlabel(),
            "ylabel": ax.get_ylabel(),
            "xscale": ax.get_xscale(),
            "yscale": ax.get_yscale(),
            "xlim": _nums(ax.get_xlim()),
            "ylim": _nums(ax.get_ylim()),
            "lines": [
                {"label": ln.get_label(), "x": _nums(ln.get_xdata()), "y": _nums(ln.get_ydata())}
                for ln in ax.get_lines()
            ],
            "collections": [],
            "patches": [],
            "images": [{"extent": _nums(im.get_extent()), "values": _nums(im.get_array())} for im in ax.images],
            "texts": [{"text": t.get_text(), "xy": _nums(t.get_position())} for t in ax.texts],
            "legend": [t.get_text() for t in legend.get_texts()] if (legend := ax.get_legend()) is not None else [],
        }
        for c in ax.collections:
            entry: dict = {"kind": type(c).__name__, "label": c.get_label()}
            if isinstance(c, QuadMesh):
                entry["values"] = _nums(c.get_array())
            elif isinstance(c, PolyCollection):
                entry["paths"] = [_nums(path.vertices) for path in c.get_paths()]
            else:
                entry["offsets"] = _nums(c.get_offsets())
                arr = c.get_array()
                if arr is not None:
                    entry["values"] = _nums(arr)
            item["collections"].append(entry)
        for patch in ax.patches:
            entry = {"kind": type(patch).__name__, "label": patch.get_label()}
            if hasattr(patch, "get_xy"):
                entry["xy"] = _nums(cast(Any, patch).get_xy())
                if hasattr(patch, "get_width"):  # Rectangle: a bar or a span
                    entry["size"] = _nums([cast(Any, patch).get_width(), cast(Any, patch).get_height()])
            item["patches"].append(entry)
        out["axes"].append(item)
    return out


def figure_data_differences(a, b, *, rtol: float = DATA_RTOL, atol: float = DATA_ATOL, where: str = "") -> list[str]:
    """Where two :func:`figure_data` documents differ (empty: they plot the same): numbers
    compared to ``rtol`` / ``atol``, texts and structure exactly. Each entry names the place
    (``axes[0].lines[2].y[17]: 0.51 != 0.52``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where or 'figure'}: keys {sorted(set(a) ^ set(b))} in one only"]
        return [
            d
            for k in sorted(a)
            for d in figure_data_differences(a[k], b[k], rtol=rtol, atol=atol, where=f"{where}.{k}")
        ]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items != {len(b)}"]
        out: list[str] = []
        for i, (x, y) in enumerate(zip(a, b)):
            out.extend(figure_data_differences(x, y, rtol=rtol, atol=atol, where=f"{where}[{i}]"))
            if len(out) > 20:
                break
        return out
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return [] if abs(a - b) <= atol + rtol * max(abs(a), abs(b)) else [f"{where}: {a!r} != {b!r}"]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


#: one colour per binding term of the roofline, shared by every figure that shades regimes
REGIME_COLORS = {"ssd": "#d9ead3", "memory": "#cfe2f3", "compute": "#fce5cd", "engine": "#fff2cc", "fabric": "#ead1dc"}


def shade_regimes(ax, batch, bound, fits_in_memory=None) -> list:
    """Shade each batch interval by its binding term and hatch infeasible batches.

    ``batch`` (n,) increasing, ``bound`` the term names per batch (a roofline Plan's ``bound``),
    ``fits_in_memory`` optional booleans. Interval edges are geometric midpoints (log axes). A
    batch that does not fit in RAM gets no regime colour (no term binds a step that cannot
    run): it is hatched, and a vertical line at the first such batch says where RAM runs out
    (:func:`feasibility_boundary`). Returns (handle, label) pairs for the regimes of the
    feasible batches, to append to a legend.
    """
    from matplotlib.patches import Rectangle

    b = np.asarray(batch, dtype=float)
    ok = np.ones(b.size, dtype=bool) if fits_in_memory is None else np.asarray(fits_in_memory, dtype=bool)
    edges = np.r_[b[0], np.sqrt(b[1:] * b[:-1]), b[-1]] if b.size > 1 else np.r_[b * 0.9, b * 1.1]
    for i, term in enumerate(bound):
        if ok[i]:
            ax.axvspan(edges[i], edges[i + 1], color=REGIME_COLORS[term], lw=0)
    if not ok.all():
        first = int(np.argmax(~ok))
        ax.axvspan(edges[first], edges[-1], fill=False, hatch="//", lw=0, label="KV + dense exceed RAM")
        feasibility_boundary(ax, batch, ok)
    seen = [t for t, fit in zip(bound, ok) if fit]
    return [(Rectangle((0, 0), 1, 1, color=REGIME_COLORS[t]), f"{t}-bound") for t in dict.fromkeys(seen)]


def feasibility_boundary(ax, batch, fits_in_memory) -> int | None:
    """Mark where the batches stop fitting in RAM: a dashed line at the first batch that does
    not fit, labelled with it ("no fit in RAM from B = 128"); returns that B (None: all fit).
    Curves stop there by themselves: a plan's rates are NaN where the step does not fit."""
    ok = np.asarray(fits_in_memory, dtype=bool)
    if ok.all():
        return None
    first = int(np.asarray(batch)[int(np.argmax(~ok))])
    ax.axvline(first, color="0.3", ls="--", lw=0.8)
    look = dict(rotation=90, ha="right", va="top", fontsize=7, color="0.2")
    ax.text(first, 0.98, f"no fit in RAM from B = {first} ", transform=ax.get_xaxis_transform(), **look)
    return first


def plain_log_ticks(ax, axis: str = "both") -> None:
    """Label a log axis in plain numbers (1, 2, 5, 10, 100 …), never ``2×10⁰``.

    Major ticks at 1, 2, 5 per decade get plain labels (``ScalarFormatter`` without an offset or
    scientific notation; small values keep their decimals), minor labels are switched off.
    ``axis`` is ``"x"``, ``"y"`` or ``"both"``; a ``symlog`` axis keeps its ticks and gets the
    same plain labels (0 included); a linear axis is left alone.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def plain(value, _pos=None):
        if value <= 0:
            return ""
        if value >= 1:
            return f"{value:,.0f}" if value >= 1e4 else f"{value:g}"
        return f"{value:.6g}"

    def signed(value, _pos=None):
        return "0" if value == 0 else ("−" if value < 0 else "") + plain(abs(value))

    axes = {"x": (ax.xaxis, ax.get_xscale), "y": (ax.yaxis, ax.get_yscale)}
    for name in ("x", "y") if axis == "both" else (axis,):
        which, scale = axes[name]
        if scale() == "symlog":
            # keep matplotlib's symlog ticks (0, ±1, ±10 …), label them plainly, 0 included
            which.set_major_formatter(FuncFormatter(signed))
            which.set_minor_formatter(NullFormatter())
            continue
        if scale() != "log":
            continue
        lo, hi = sorted(ax.get_xlim() if name == "x" else ax.get_ylim())
        decades = math.log10(hi / lo) if lo > 0 else 10
        subs = (1.0, 2.0, 5.0) if decades <= 4 else (1.0,)
        which.set_major_locator(LogLocator(base=10, subs=subs))
        which.set_major_formatter(FuncFormatter(plain))
        which.set_minor_formatter(NullFormatter())


def pvalue_text(p: float, sims: int) -> str:
    """A goodness-of-fit p-value from ``sims`` simulations, saying when it sits at the floor.

    The smallest p a parametric bootstrap of ``sims`` draws can give is 1/(sims+1); a p there means
    no simulated statistic was as extreme, so it is written ``p ≤ floor (the simulation floor)``.
    """
    floor = 1.0 / (int(sims) + 1)
    if p is None or not np.isfinite(p):
        return "n/a"
    if p <= floor * (1 + 1e-9):
        return f"p ≤ {floor:.3g} (the simulation floor)"
    return f"{p:.3g}"


class Table:
    """A formatted table for a notebook: HTML from a pandas Styler, plain text without the index.

    Not the Styler itself, because a Styler's text form carries its memory address, which
    would make every render of a report differ.
    """

    def __init__(self, styler, text: str) -> None:
        self.styler = styler
        self.text = text

    def to_html(self) -> str:
        return self.styler.to_html()

    _repr_html_ = to_html  # how Jupyter shows it

    def __repr__(self) -> str:
        return self.text


def plain_value(value, digits: int = 4) -> str:
    """A value as a reader would write it, never a Python literal: a mapping as ``k: v; k: v``,
    a list, tuple or array as ``a, b, c``, a bool as yes/no, an empty text as ``(empty)``."""
    from collections.abc import Mapping

    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {plain_value(v, digits)}" for k, v in value.items()) or "(none)"
    if isinstance(value, list | tuple | set | frozenset | np.ndarray):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
        return ", ".join(plain_value(v, digits) for v in items) or "(none)"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if value is None:
        return "(none)"
    if isinstance(value, float | np.floating):
        return f"{float(value):.{digits}g}"
    if isinstance(value, str):
        return value if value else "(empty)"
    return str(value)


def show_values(values, *, name: str = "parameter", value: str = "value") -> Table:
    """A mapping as a two-column table (``name``, ``value``), each value in plain words
    (:func:`plain_value`): what a notebook shows instead of printing a dict."""
    import pandas as pd

    df = pd.DataFrame({name: [str(k) for k in values], value: [plain_value(v) for v in values.values()]})
    return show_table(df)


def show_table(df, *, percent=(), digits: int = 3) -> Table:
    """A DataFrame for display: no index column, columns in ``percent`` (shares in [0, 1]) as %,
    floats to ``digits`` significant figures; returns a :class:`Table` (renders as HTML)."""
    import pandas as pd

    from moeroof.present.answers import fmt

    percent = [c for c in percent if c in df.columns]

    def number(x):
        if isinstance(x, bool | np.bool_) or x is None:
            return "" if x is None else ("yes" if x else "no")
        if isinstance(x, float | np.floating):
            return "–" if np.isnan(x) else fmt(x, digits, exponent_from=math.inf)
        return str(x)

    formats = {c: number for c in df.columns}
    formats.update({c: (lambda x: "–" if pd.isna(x) else f"{100 * x:.1f} %") for c in percent})
    # pandas gives every Styler a random table id; a content hash keeps reports byte-stable
    uuid = hashlib.sha256(df.to_csv().encode()).hexdigest()[:10]
    styler = df.style.set_uuid(uuid).format(formats).hide(axis="index")
    text = df.to_string(index=False, formatters=formats)
    return Table(styler, text)
