#!/usr/bin/env python
"""Which knob should fit-plan hold when three tok/s rows of one batch size are too few for both
the engine's cost per touched expert and the reclaim work's shape n? (docs/validation.md)

Runs :func:`moeroof.studies.curve_coverage.curve_coverage` — simulated one-stream curves drawn
from fit-plan's priors, fitted every flag at its default on mlx-lm#1438's three cache sizes —
under one rule each and prints, over the predicted rows, how many tok/s and hit rates lie inside
their bands, the mean |log(predicted / truth)| of tok/s and the rows within 20 %:

- ``shape-held`` (fit-plan's rule): n held at :data:`moeroof.fit.plan.PRIOR_RECLAIM_EXPONENT`'s
  centre, the engine fitted;
- ``engine-held`` (the rule before it): the engine's cost held at the box's prior, n fitted;
- ``shape-held:N``: n held at N with the engine fitted, no ends of n in the bands (a sensitivity
  check of the held value).

About 6 minutes a rule for 24 truths on a 2-core box:
``.venv/bin/python scripts/reclaim_shape_rule.py --truths 24 shape-held engine-held shape-held:1.5``.
Each rule runs in its own process (the rules patch fit-plan's choice for that process only).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
from dataclasses import replace

import numpy as np


def _apply(rule: str) -> None:
    """Patch fit-plan's reclaim-shape choice (and, for ``shape-held:N``, the box's n) in this process."""
    from moeroof.fit import plan as fp
    from moeroof.studies import curve_coverage as cc

    if rule == "engine-held":

        def old(setup, base):
            return (*(k for k in base if k != "engine"), "reclaim", "reclaim-shape"), " (the engine held)"

        fp.with_reclaim_shape = old
    elif rule.startswith("shape-held:"):
        n = float(rule.split(":", 1)[1])
        real = cc.load_hardware
        cc.load_hardware = lambda name: replace(real(name), reclaim_exponent=n)
        fp.with_reclaim_shape = lambda setup, base: ((*base, "reclaim"), f" (n held at {n:g})")
    elif rule != "shape-held":
        raise SystemExit(f"unknown rule {rule!r}: shape-held, engine-held or shape-held:N")


def _run(rule: str, truths: int) -> str:
    _apply(rule)
    from moeroof.studies.curve_coverage import curve_coverage

    res = curve_coverage(truths)
    rows = [r for t in res.truths for r in t["rows"]]
    err = np.abs(np.log([r["predicted"] / r["truth"] for r in rows]))
    return (
        f"{rule}: tok/s inside {sum(r['inside'] for r in rows)}/{len(rows)}, hit rates inside "
        f"{sum(r['hit_rate_inside'] for r in rows)}/{len(rows)}; mean |log(pred/truth)| {err.mean():.3f}, "
        f"{int((err < np.log(1.2)).sum())} of {len(rows)} within 20 %"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rules", nargs="*", default=["shape-held", "engine-held"])
    ap.add_argument("--truths", type=int, default=24)
    args = ap.parse_args(argv)
    with mp.get_context("spawn").Pool(min(2, len(args.rules))) as pool:
        for line in pool.starmap(_run, [(r, args.truths) for r in args.rules]):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
