#!/usr/bin/env python
"""Where models' published single streams lie on the locality prior, and the committed file.

    .venv/bin/python scripts/locality_strength.py            # print the table
    .venv/bin/python scripts/locality_strength.py --write    # and rewrite data/fits/locality-strength.json

Runs :func:`moeroof.studies.locality_strength.study` on the committed locality prior
(``data/fits/locality-prior.json``) and prints, per published single stream (GLM-5.2: colibri's
i5 box and mlx-lm#1438's three measured cache sizes), its strength (where on the prior's
pairing ``plan`` meets its hit rates), its rows at the prior's centre, and held out: at the
strength of the model's other source. ``--write`` writes the strengths (summary figures and
provenance only) that :meth:`moeroof.models.locality.Locality.committed_for` centres a model's
zero-fit defaults on; ``tests/test_locality_strength.py`` checks the committed file against a
fresh study. A few seconds on a 2-core box; the prior must be rewritten first when it changes.
"""

from __future__ import annotations

import argparse
import json
import sys

from moeroof.core import atomic, paths
from moeroof.data.locality import LOCALITY_STRENGTH_FILE
from moeroof.studies import locality_strength


def _points(values) -> str:
    return " / ".join(f"{v:.1%}" for v in values)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite data/{LOCALITY_STRENGTH_FILE}")
    args = ap.parse_args(argv)
    st = locality_strength.study(progress=lambda i, n, what: print(f"[{i + 1}/{n}] {what}", file=sys.stderr))
    print(f"# on the {st.prior}")
    print("| source | strength | measured | at the prior's centre | held out: strength | held out: predicted |")
    print("|---|---|---|---|---|---|")
    for f in st.fits:
        held = "-" if f.held_out is None else _points(f.held_out)
        u_out = "-" if f.held_out_strength is None else f"{f.held_out_strength:.3f}"
        print(f"| {f.name} | {f.strength:.3f} | {_points(f.measured)} | {_points(f.at_centre)} | {u_out} | {held} |")
    if args.write:
        out = paths.DATA_DIR / LOCALITY_STRENGTH_FILE
        atomic.write_text(out, json.dumps(locality_strength.strength_record(st), indent=2) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
