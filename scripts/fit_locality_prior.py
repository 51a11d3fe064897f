"""Fit the locality prior on the real decode sources and commit its summary.

    .venv/bin/python scripts/fit_locality_prior.py     # rewrite data/fits/locality-prior.json

Runs :func:`moeroof.studies.locality_prior.study` at its default settings on the captures in
``../shared/data/external`` (read in place, never copied) and the published
one-stream table (docs/sources.md), and writes the summary figures (:func:`summary_record`): the prior's centre
and spread, each source's fitted knobs and held-out errors. Nothing row by row from the
captures is written. ``tests/test_locality_prior.py`` checks the committed file against a fresh
study where the captures are present.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from moeroof.core import atomic, paths
from moeroof.data.locality import LOCALITY_PRIOR_FILE
from moeroof.studies import locality_prior


def _finite_json(v: Any) -> Any:
    """inf as the string "inf" (JSON has no infinity), recursively."""
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, dict):
        return {k: _finite_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite_json(x) for x in v]
    return v


def main() -> int:
    def progress(done: int, total: int, what: str) -> None:
        print(f"[{done + 1}/{total}] {what}", file=sys.stderr)

    st = locality_prior.study(progress=progress)
    record = _finite_json(locality_prior.summary_record(st))
    out = paths.DATA_DIR / LOCALITY_PRIOR_FILE
    atomic.write_text(out, json.dumps(record, indent=2, sort_keys=False) + "\n")
    print(
        f"wrote {out}: rho {st.prior.median[0]:.3f}, hot set {st.prior.median[1]:.3g}·K from {', '.join(st.prior.sources)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
