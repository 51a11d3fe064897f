"""``make figures``: update the committed ``figures/`` from a render, deliberately.

A render (``make report``) writes only under ``reports/``; its figures land in
``reports/figures/``, each ``NAME.svg`` + ``NAME.png`` with ``NAME.json``, what it plots
(:func:`moeroof.present.plots.figure_data`). This copies a figure into ``figures/`` only when
what it plots differs from the committed copy's data (or there is none), so a render on another
machine — whose SVG bytes differ in clip ids and last digits — leaves ``figures/`` as it is,
and a real change shows up as a diff of its data file. Committed figures that no render wrote
are listed, not deleted. ``python -m moeroof.present.figures [--from DIR] [--to DIR] [--check]``
(``--check``: change nothing; exit 1 when any figure would be copied or is stale).
"""

from __future__ import annotations

import argparse
import json
import operator
import sys
from dataclasses import dataclass
from pathlib import Path

from moeroof.core import atomic, paths
from moeroof.present.plots import FORMATS, figure_data_differences

__all__ = ["Sync", "compare", "sync", "main"]


@dataclass(frozen=True)
class Sync:
    """What :func:`compare` found: figure stems to copy (new or changed, with their first
    differences), unchanged ones, and committed stems that the render did not write."""

    changed: dict[str, list[str]]
    unchanged: tuple[str, ...]
    stale: tuple[str, ...]


def _data(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def compare(src: Path, dst: Path) -> Sync:
    """Compare each rendered figure in ``src`` (its ``NAME.json``) with the committed one in ``dst``."""
    changed: dict[str, list[str]] = {}
    unchanged = []
    rendered = sorted(p.stem for p in Path(src).glob("*.json"))
    for stem in rendered:
        new = _data(Path(src) / f"{stem}.json")
        old = _data(Path(dst) / f"{stem}.json")
        missing = [f for f in FORMATS if not (Path(dst) / f"{stem}.{f}").is_file()]
        if old is None or missing:
            changed[stem] = ["not committed yet" if old is None else f"no {', '.join(missing)} committed"]
            continue
        diff = figure_data_differences(old, new)
        if diff:
            changed[stem] = diff[:3]
        else:
            unchanged.append(stem)
    committed = sorted({p.stem for f in FORMATS for p in Path(dst).glob(f"*.{f}")})
    stale = tuple(s for s in committed if s not in rendered)
    return Sync(changed, tuple(unchanged), stale)


def sync(src: Path, dst: Path) -> Sync:
    """Copy the changed figures (every format and the data file) from ``src`` to ``dst``,
    each file atomically; return what :func:`compare` found."""
    found = compare(src, dst)
    Path(dst).mkdir(parents=True, exist_ok=True)
    for stem in found.changed:
        for ext in (*FORMATS, "json"):
            source = Path(src) / f"{stem}.{ext}"
            atomic.write_via(Path(dst) / source.name, operator.methodcaller("write", source.read_bytes()))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moeroof.present.figures", description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", type=Path, default=None, help="rendered figures (default reports/figures)")
    ap.add_argument("--to", dest="dst", type=Path, default=paths.COMMITTED_FIGURES_DIR, help="default figures/")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if any figure differs or is stale")
    args = ap.parse_args(argv)
    src = args.src if args.src is not None else paths.figures_dir()
    if not any(Path(src).glob("*.json")):
        print(f"figures: no rendered figures in {src} (run make report first)", file=sys.stderr)
        return 2
    found = compare(src, args.dst) if args.check else sync(src, args.dst)
    verb = "differs" if args.check else "updated"
    for stem, why in found.changed.items():
        print(f"figures: {stem} {verb}: {'; '.join(why)}")
    for stem in found.stale:
        print(f"figures: {stem} is committed but no render wrote it (left in place)")
    print(f"figures: {len(found.changed)} {verb}, {len(found.unchanged)} plot the same, {len(found.stale)} stale")
    return 1 if args.check and (found.changed or found.stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
