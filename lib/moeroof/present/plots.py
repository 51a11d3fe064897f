"""One place that saves figures, so every figure in `figures/` is byte-stable and labelled.

Design docs link the committed SVG/PNG files; a re-render that changes bytes without changing the
picture makes noisy diffs and hides real changes. So the saver pins everything matplotlib would
otherwise vary between runs: the SVG id hash salt, the date and creator metadata, the PNG
software tag and the dpi. It writes each file atomically (:mod:`moeroof.core.atomic`: temp file in
the same directory, then ``os.replace``) so a crash mid-render leaves the old figure or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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

#: what each provenance tag means on a figure (SPEC §2: non-witnessed inputs make results projected)
_PROVENANCE_LABELS = {
    "witnessed": "witnessed (measured)",
    "projected": "projected (model, not measured)",
    "assumed": "projected (from assumed inputs)",
    "witnessed-inputs": "model on witnessed inputs (not itself measured)",
}


@contextmanager
def style() -> Iterator[None]:
    """Apply the house rc settings for the duration of a ``with`` block."""
    with mpl.rc_context(STYLE_RC):
        yield


def provenance_label(provenance: str) -> str:
    """Text to put in a title or legend saying whether a curve is measured or modelled.

    An ``assumed`` input makes the result ``projected``: only witnessed numbers are served as
    measurements (SPEC §2).
    """
    try:
        return _PROVENANCE_LABELS[provenance]
    except KeyError:
        known = ", ".join(sorted(_PROVENANCE_LABELS))
        raise ValueError(f"unknown provenance {provenance!r}; expected one of: {known}") from None


def label_with_baseline(text: str, baseline: str) -> str:
    """``text`` with its baseline named, e.g. ``"coalescing ratio B·K/U (baseline: uncoalesced)"``.

    A multiple without its baseline is not a number anyone can check (SPEC §2), so an empty
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
    return written


#: one colour per binding term of the roofline, shared by every figure that shades regimes
REGIME_COLORS = {
    "ssd": "#d9ead3",
    "memory": "#cfe2f3",
    "compute": "#fce5cd",
    "engine": "#fff2cc",
    "fabric": "#ead1dc",
}


def shade_regimes(ax, batch, bound, fits_in_memory=None) -> list:
    """Shade each batch interval by its binding term and hatch infeasible batches.

    ``batch`` (n,) increasing, ``bound`` the term names per batch (a roofline Plan's ``bound``),
    ``fits_in_memory`` optional booleans. Interval edges are geometric midpoints (log axes).
    Returns (handle, label) pairs for the regimes present, to append to a legend.
    """
    import numpy as np
    from matplotlib.patches import Rectangle

    b = np.asarray(batch, dtype=float)
    edges = np.r_[b[0], np.sqrt(b[1:] * b[:-1]), b[-1]] if b.size > 1 else np.r_[b, b + 1]
    for i, term in enumerate(bound):
        ax.axvspan(edges[i], edges[i + 1], color=REGIME_COLORS[term], lw=0)
    if fits_in_memory is not None:
        bad = ~np.asarray(fits_in_memory, dtype=bool)
        if bad.any():
            ax.axvspan(edges[np.argmax(bad)], edges[-1], fill=False, hatch="//", lw=0, label="KV + dense exceed RAM")
    return [(Rectangle((0, 0), 1, 1, color=REGIME_COLORS[t]), f"{t}-bound") for t in dict.fromkeys(bound)]


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

    def _repr_html_(self) -> str:
        return self.to_html()

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

    percent = [c for c in percent if c in df.columns]

    def number(x):
        if isinstance(x, bool | np.bool_) or x is None:
            return "" if x is None else ("yes" if x else "no")
        if isinstance(x, float | np.floating):
            if not np.isfinite(x):
                return "–" if np.isnan(x) else ("∞" if x > 0 else "−∞")
            if x != 0 and abs(x) < 1e-3:
                return f"{x:.{digits - 1}e}"
            if abs(x) >= 10**digits:
                return f"{x:.0f}"
            return f"{x:.{digits}g}"
        return str(x)

    formats = {c: number for c in df.columns}
    formats.update({c: (lambda x: "–" if pd.isna(x) else f"{100 * x:.1f} %") for c in percent})
    # pandas gives every Styler a random table id; a content hash keeps reports byte-stable
    uuid = hashlib.sha256(df.to_csv().encode()).hexdigest()[:10]
    styler = df.style.set_uuid(uuid).format(formats).hide(axis="index")
    text = df.to_string(index=False, formatters=formats)
    return Table(styler, text)
