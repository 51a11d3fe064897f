# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext,-all
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Held out: how far are the suite's predictions from what was measured?
#
# Every validation case of the suite, each fitted only on what it names as calibration (or on
# nothing), predicting the measurements it was not fitted on (`moeroof validate`,
# `moeroof.studies.held_out`): the step model against published throughput and bytes, the
# single-stream cache column, the locality prior predicting each real decode source from the
# others, and fit-plan across regimes (seed 003's public M = 8 rows predicting its withheld rows
# and M sweep; mlx-lm#1438's three cache sizes predicting where tok/s peaks), and fit-routing on
# seed 003's public pair rows predicting its withheld cache rows (one booster at M = 1 among them)
# and the booster table's pair row, measured in another run. The errors are shown
# whatever they are; a withheld truth gets its prediction and band, no error. The answer, computed from this run, opens the
# report (in the notebook it follows the last section).

# %% tags=["parameters"]
# fmt: off
groups: str = "step,cache,skew,locality,regimes,routing"  # which cases, comma separated: step, cache, skew, locality, regimes, routing
tok_s_target: float = 0.20  # the relative error a throughput or bytes prediction should stay within
hit_target: float = 0.05  # the error a hit-rate or overlap prediction should stay within (0.05: 5 points)
coverage_truths: int = 8  # simulated truths drawn from the locality prior for the band coverage check, 0 to skip
plan_coverage_truths: int = 8  # simulated boxes drawn from fit-plan's priors (engine, SSD, locality, reclaim work, page cache, max or sum) for its band coverage check, 0 to skip
curve_coverage_truths: int = 8  # simulated one-stream cache curves (fit-plan's priors, Zipf or Dirichlet, max or sum) at mlx-lm#1438's sizes for its band coverage check, 0 to skip
family_seeds: int = 3  # simulation seeds of the family prior's cross-validation on the published single-stream column, 0 to skip
# fmt: on

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

import moeroof
from moeroof.fit.plan import CURVE_FAMILY_PRIOR
from moeroof.models.locality import Locality
from moeroof.present import answers
from moeroof.present.plots import provenance_label, save_figure, show_table, style
from moeroof.studies import family_prior
from moeroof.studies.curve_coverage import curve_coverage
from moeroof.studies.held_out import held_out_rows, summarise
from moeroof.studies.locality_prior import coverage_check
from moeroof.studies.plan_coverage import plan_coverage

chosen = [g.strip() for g in groups.split(",") if g.strip()]
rows, skipped = held_out_rows(chosen)
cases = summarise(rows)
for what, why in skipped.items():
    print(f"skipped {what}: {why}")

# %% [markdown]
# ## Every held-out point
# `error` is relative (predicted / measured − 1) for throughput and bytes, in points for hit
# rates and overlaps; `inside` says whether the measurement lies in the case's 5–95 % band where
# the case has one. `consistency` rows only reproduce their calibration.

# %%
table = pd.DataFrame(rows)
if not table.empty:
    show_table(table[["case", "role", "quantity", "at", "measured", "predicted", "error", "error_unit", "inside"]])

# %% [markdown]
# ## One line per case

# %%
if cases:
    show_table(pd.DataFrame(cases))

# %% [markdown]
# ## The errors, case by case
# Each dot a held-out point (consistency rows left out); a bar, where the case has a band, the
# band around the prediction seen from the measurement. Shaded: the targets (±`tok_s_target`,
# ±`hit_target`).

# %%
with style():
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.5), constrained_layout=True)
    for ax, unit, scale, target, label in (
        (axes[0], "relative", 100.0, tok_s_target, "relative error, %"),
        (axes[1], "points", 100.0, hit_target, "error, points"),
    ):
        sub = [r for r in rows if r["role"] == "prediction" and r["error_unit"] == unit]
        names = list(dict.fromkeys(r["case"] for r in sub))
        ax.axvspan(-target * scale, target * scale, color="#DDDDDD", zorder=0, label=f"target ±{target * scale:g}")
        for j, name in enumerate(names):
            pts = [r for r in sub if r["case"] == name]
            err = np.array([r["error"] for r in pts]) * scale
            ax.plot(err, np.full(err.size, j), "o", ms=4, color="#4C72B0")
            for r in pts:
                if r["low"] is not None:
                    # the band seen from the measurement, in the row's own error unit
                    ends = (
                        [r["low"] / r["measured"] - 1.0, r["high"] / r["measured"] - 1.0]
                        if unit == "relative"
                        else [r["low"] - r["measured"], r["high"] - r["measured"]]
                    )
                    ax.plot(
                        [e * scale for e in ends],
                        [j, j],
                        "-",
                        lw=1,
                        color="#DD8452",
                        alpha=0.6,
                    )
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.axvline(0, color="k", lw=0.6)
        ax.set_xlabel(label)
        if unit == "relative":
            ax.set_xscale("symlog", linthresh=20)
        n_in = sum(bool(r["inside"]) for r in sub if r["inside"] is not None)
        n_band = sum(r["inside"] is not None for r in sub)
        band = f"; {n_in} of {n_band} inside their band" if n_band else ""
        ax.set_title(f"{len(sub)} held-out points in {len(names)} cases{band}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"predicted − measured, {', '.join(chosen)} cases — {provenance_label('projected')}", fontsize=10)
    save_figure(fig, "validation_errors")
    plt.show()

# %% [markdown]
# ## Do the bands cover? Many streams → one stream on truths the prior allows
# Each truth's stickiness and per-stream locality is a draw of the locality prior; its rows are
# simulated at seeds no fit uses; fit-routing sees only two M = 8 cache rows and predicts one
# stream's cache at three sizes, with the locality prior and with locality held off (the
# suite's old default). A 90 % band should hold about 90 % of the truths.

# %%
coverage = None
if coverage_truths > 0:
    coverage = coverage_check(Locality.committed(), truths=coverage_truths)
    show_table(pd.DataFrame(list(coverage.truths)))
    cov_ci = coverage.interval()
    print(
        f"one-stream rows inside their 5-95 % band: {coverage.inside_with_prior:.0%} with the locality prior "
        f"({cov_ci.low:.0%}-{cov_ci.high:.0%} over the {len(coverage.truths)} truths resampled), "
        f"{coverage.inside_without:.0%} with locality off ({coverage.rows} rows)"
    )

# %% [markdown]
# ## Do fit-plan's bands cover? One concurrency → others on boxes the priors allow
# Each truth is a box drawn from the priors fit-plan holds (per-step, per-token and
# per-touched-expert engine costs, SSD scale, one stream's locality) with its terms combined by
# `max` or `sum` (fit-plan is not told which); its rows are seed 003's settings, simulated at a
# seed no fit uses with 5 % noise. fit-plan sees the M = 8 rows seed 003's points file measures
# and predicts the rows it withholds; a 90 % band should hold about 90 % of new measurements of
# them (each truth here one: its simulated rate with the same noise).

# %%
plan_cov = None
if plan_coverage_truths > 0:
    plan_cov = plan_coverage(plan_coverage_truths)
    show_table(
        pd.DataFrame(
            [
                {"truth": t["truth"], "overlap": t["overlap"], "fit chose": t["overlap_chosen"], **r}
                for t in plan_cov.truths
                for r in t["rows"]
            ]
        )
    )
    plan_ci = plan_cov.interval()
    print(
        f"predicted rows inside their 5-95 % band: {plan_cov.inside:.0%} ({plan_cov.rows} rows; "
        f"{plan_ci.low:.0%}-{plan_ci.high:.0%} over the {len(plan_cov.truths)} truths resampled)"
    )

# %% [markdown]
# ## Do fit-plan's bands cover a cache curve? One stream, the popularity unknown
# Each truth is a box drawn from fit-plan's priors (engine, SSD, locality, the reclaim work and its
# shape) with a popularity of either family, Zipf or Dirichlet, and its terms combined by `max` or
# `sum` (fit-plan is told neither); its rows are mlx-lm#1438's settings (GLM-5.2 on `apple-m4-max`,
# one stream), simulated at a seed no fit uses with noise. fit-plan, every flag at its default, sees
# the three cache sizes that points file measures and predicts the rest of the curve, each
# predicted row's truth a new measurement (its simulated values with the same noise).

# %%
curve_cov = None
if curve_coverage_truths > 0:
    curve_cov = curve_coverage(curve_coverage_truths)
    show_table(
        pd.DataFrame(
            [
                {
                    "truth": t["truth"],
                    "family": t["family"],
                    "fit kept": t["family_chosen"],
                    "overlap": t["overlap"],
                    **r,
                }
                for t in curve_cov.truths
                for r in t["rows"]
            ]
        )
    )
    curve_ci = curve_cov.intervals()
    print(
        f"predicted rows inside their 5-95 % band: tok/s {curve_cov.inside_tok_s:.0%} "
        f"({curve_ci['tok_s'].low:.0%}-{curve_ci['tok_s'].high:.0%} over the {len(curve_cov.truths)} truths "
        f"resampled), hit rates {curve_cov.inside_hit_rate:.0%} ({curve_ci['hit_rate'].low:.0%}-"
        f"{curve_ci['hit_rate'].high:.0%}) ({curve_cov.rows} rows)"
    )

# %% [markdown]
# ## Which family does one stream's hit-rate curve have?
# The published single-stream LRU column (Qwen3-30B-A3B, one LRU per layer at 8 / 16 / 32 / 64
# experts) fitted by fit-routing on each pair of its sizes with both popularity families, each
# predicting the other two (`moeroof.studies.family_prior`). The family whose held-out errors are
# smaller is the prior fit-plan holds where a hit-rate curve's rows cannot tell the two apart.

# %%
if family_seeds > 0:
    family_cv = family_prior.cross_validate(seeds=range(family_seeds))
    show_table(
        pd.DataFrame(
            [
                {
                    "calibrated on": ", ".join(map(str, s.calibrate_on)),
                    "held out": ", ".join(map(str, s.held_out)),
                    **{
                        f"{f} error, points": " / ".join(f"{e:+.1f}" for e in errs)
                        for f, errs in s.errors_points.items()
                    },
                    "fit-routing's choice": s.chosen,
                }
                for s in family_cv.splits
            ]
        )
    )
    means = ", ".join(f"{f} {m:.1f}" for f, m in family_cv.mean_abs_error_points.items())
    agrees = (
        "the family fit-plan holds"
        if family_cv.preferred == CURVE_FAMILY_PRIOR
        else f"not fit-plan's {CURVE_FAMILY_PRIOR}"
    )
    print(f"mean absolute held-out error, points: {means}; closer: {family_cv.preferred} ({agrees})")

# %% tags=["answer"]
display(
    Markdown(
        answers.validation(
            cases=cases,
            rows=rows,
            skipped=skipped,
            groups=chosen,
            tok_s_target=tok_s_target,
            hit_target=hit_target,
            plan_coverage=None
            if plan_cov is None
            else (plan_cov.inside, plan_cov.rows, len(plan_cov.truths), plan_cov.calibration),
            curve_coverage=None
            if curve_cov is None
            else (
                curve_cov.inside_tok_s,
                curve_cov.inside_hit_rate,
                curve_cov.rows,
                len(curve_cov.truths),
                curve_cov.calibration,
            ),
            coverage=None
            if coverage is None
            else (
                coverage.inside_with_prior,
                coverage.inside_without,
                coverage.rows,
                [m for m, _ in coverage.calibration],
            ),
        )
    )
)

# %% [markdown]
# ## Versions and parameters

# %%
print(f"moeroof {moeroof.__version__}, numpy {np.__version__}")
for name, value in {
    "groups": groups,
    "tok_s_target": tok_s_target,
    "hit_target": hit_target,
    "coverage_truths": coverage_truths,
    "plan_coverage_truths": plan_coverage_truths,
    "curve_coverage_truths": curve_coverage_truths,
    "family_seeds": family_seeds,
}.items():
    print(f"{name} = {value}")
