"""Fit the skew prior on public routing and commit its summary.

    .venv/bin/python scripts/fit_skew_prior.py     # rewrite data/fits/skew-prior.json

Runs :func:`moeroof.studies.skew_prior.study` on the Qwen3 capture in ``../shared/data/external``
(read in place, never copied) and DeepSeek-V3's published hottest-expert shares
(docs/sources.md), and writes the summary figures (:func:`summary_record`): the prior's centre
and spread, each unit's α, the held-out models. ``tests/test_skew_prior.py`` checks the committed
file against a fresh study where the capture is present.
"""

from __future__ import annotations

import json
import sys

from moeroof.core import atomic, paths
from moeroof.data.skew_prior import SKEW_PRIOR_FILE
from moeroof.studies import skew_prior


def main() -> int:
    st = skew_prior.study()
    if st.skipped:
        print(f"refusing to write the prior without every source: {st.skipped}", file=sys.stderr)
        return 1
    out = paths.DATA_DIR / SKEW_PRIOR_FILE
    atomic.write_text(out, json.dumps(skew_prior.summary_record(st), indent=2) + "\n")
    print(f"wrote {out}: alpha {st.prior.alpha:.3g} (5-95 % {st.prior.alpha_low:.3g}-{st.prior.alpha_high:.3g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
