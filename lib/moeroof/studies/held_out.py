"""Every held-out case in one table: what ``moeroof validate`` prints (docs/validation.md).

Each case is fitted only on its named calibration (or on nothing) and predicts the rest; the
error is shown whatever it is. Six groups:

- ``step``: the step model against the published throughput and bytes figures collected in docs/sources.md
  (:func:`moeroof.studies.validation.comparisons`; roles ``prediction`` and ``consistency``, the
  latter only reproducing its own calibration point);
- ``cache``: the published single-stream cache column (docs/sources.md), fitted on two sizes and predicting
  the others, and the zero-fit prediction from the embedded trace
  (:func:`moeroof.studies.validation.cache_comparisons`);
- ``skew``: the zero-fit routings (``plan``'s uniform default, ``fit-plan``'s ``zipf:0.8``)
  against DeepSeek-V3's published per-layer routing skew (:func:`moeroof.studies.validation.skew_comparisons`);
- ``locality``: each real decode source predicted from the locality prior of the others
  (:func:`moeroof.studies.locality_prior.study`), with its 5–95 % band; read from the captures
  in ``../shared/data/external`` and skipped, said so, where they are absent;
- ``regimes``: ``moeroof fit-plan`` on the shipped points files of cases that cross a regime
  (:data:`REGIME_CASES`): seed 003's public M = 8 rows (the ladder's 40 GiB row among them)
  predicting its withheld rows — tok/s at 60 GiB, the M sweep and one booster at M = 1, hit rates
  at 40 and 60 GiB and over the sweep (role ``withheld``: the truths are not in this repository,
  the prediction and band are shown, no error) — the same rows fitted as a newcomer's first
  ``fit-plan`` does, every flag at its default (``seed003-default``); for each, the public rows
  the file leaves out for an arrangement its columns cannot express (``…-arrangements``,
  :data:`ARRANGED`) — and mlx-lm#1438's three cache sizes (10, 20 and 75 GB) predicting the rest
  of the thread's published sweep (:data:`MLX_1438_SWEEP`): tok/s and hit rates at 30, 35, 40, 50
  and 60 GB (``…-sweep``, ``…-sweep-hit``) and where tok/s peaks (the measured sweep's highest
  size against the predicted curve's, with the band of where a measured peak would fall:
  :mod:`moeroof.models.curve_peak`), fitted as the docs fit them and at every flag's default
  (``mlx-lm-1438-default-…``).

- ``routing``: ``moeroof fit-routing`` on seed 003's public pair rows (M = 8; hit rate and GiB per
  step at 20 and 80 GiB, the union of about 50), the per-stream locality it cannot identify held at
  the locality prior, as the CLI holds it (:func:`routing_rows`, the cache_ladder report's fit):
  the withheld rows — the ladder's 40 and 60 GiB, one booster at M = 8 and at M = 1 (the issue's
  "many streams → one"), the pair at M = 1, 16 and 32 — predicted with bands (role ``withheld``),
  and the booster table's pair row, measured in another run at the 20 GiB row's conditions, held
  out (role ``prediction``).

A row's ``error`` is relative (``predicted / measured − 1``) or in points (hit rates, as a
fraction: 0.05 is 5 points), as ``error_unit`` says; ``low``/``high``/``inside`` are given where
the case has a band.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from moeroof.core.units import GB, GiB
from moeroof.studies import locality_prior, skew_prior, validation
from moeroof.studies.measured import COLUMNS, Measured
from moeroof.studies.validation import MLX_1438_SWEEP, PublishedSweep

__all__ = ["GROUPS", "COLUMNS", "MLX_1438_SWEEP", "ROUTING_SETTINGS", "held_out_rows", "routing_rows", "summarise"]

GROUPS = ("step", "cache", "skew", "locality", "regimes", "routing")


#: (case, points file under data/points, model, hardware, routing, knobs to fit or None for the
#: default, the published sweep the file's empty rows are compared with, or None)
REGIME_CASES = (
    (
        "seed003-m-sweep",
        "seed003-public.plan-points",
        "glm-5-nvfp4",
        "gb10",
        "histograms/glm5-seed003-per-layer.csv",
        # what the four rows identify: the per-touched-expert cost and the SSD scale from their
        # tok/s, and the page cache's share from how the step's cost per streamed GiB grows as
        # the expert cache takes the RAM the page cache had (20 -> 40 -> 80 GiB)
        ("engine", "ssd-scale", "pressure"),
        None,
    ),
    (
        # the same rows as a newcomer fits them, every flag at its default (the skew prior's routing,
        # its skew fitted to the hit rates, the memory knob the rows rule in): shown beside the case
        # above, misses and all, so the default's answer is held to the same rows
        "seed003-default",
        "seed003-public.plan-points",
        "glm-5-nvfp4",
        "gb10",
        "prior",
        None,
        None,
    ),
    (
        "mlx-lm-1438-peak",
        "mlx-lm-1438.plan-points",
        "glm-5.2",
        "apple-m4-max",
        "zipf:0.8",
        # what the three rows identify: skew and stickiness from their hit rates, the SSD scale
        # and the reclaim work's size and shape from their tok/s
        ("ssd-scale", "reclaim", "reclaim-shape", "skew", "rho"),
        MLX_1438_SWEEP,
    ),
    (
        # the same three rows as a newcomer fits them, every flag at its default (the skew prior's
        # routing; skew and stickiness, the engine, the SSD scale and the memory knob the rows rule
        # in — the reclaim work, its shape held at its prior with three rows too few for it): where
        # its curve peaks, held to the same sweep
        "mlx-lm-1438-default-peak",
        "mlx-lm-1438.plan-points",
        "glm-5.2",
        "apple-m4-max",
        "prior",
        None,
        MLX_1438_SWEEP,
    ),
)


def _comparison_rows(group: str, comparisons) -> list[dict[str, Any]]:
    """Each point of each :class:`moeroof.studies.validation.Comparison` under :data:`COLUMNS`
    (``case`` its key)."""
    return [m.record(group, c.key) for c in comparisons for m in c.points()]


def regime_rows(*, jobs: int = 1) -> list[dict[str, Any]]:
    """The ``regimes`` group (module docstring): one fit-plan per :data:`REGIME_CASES` entry
    (``jobs``: :func:`moeroof.fit.plan.fit_plan`'s, the same numbers)."""
    from moeroof.core.paths import DATA_DIR
    from moeroof.data.plan_points import read_plan_points
    from moeroof.data.presets import load_hardware, load_model
    from moeroof.fit.plan import fit_plan
    from moeroof.models.local_routing import spec_skew
    from moeroof.models.locality import Locality
    from moeroof.models.plan import routing_from_spec

    rows: list[dict[str, Any]] = []
    for case, points, model_name, box, spec, knobs, sweep in REGIME_CASES:
        pts, model = read_plan_points(DATA_DIR / "points" / points), load_model(model_name)
        routing = routing_from_spec(spec, model)
        hw, is_spec, prior = load_hardware(box), spec_skew(routing) is not None, Locality.committed_for(model)
        fit = fit_plan(pts, model, hw, routing, fit=knobs, routing_is_spec=is_spec, locality=prior, jobs=jobs)
        cal = f"fit-plan ({', '.join(fit.fitted)}) on the measured rows of data/points/{points}"
        # a case's rows share one role and unit: the peak's calibration rows are a case of their own
        cal_case = case if sweep is None else f"{case}-calibration"
        withheld = f"{points}: the truth is withheld from this repository"
        for r in fit.rows:
            where = f"B = {r['batch']}, {r['cache_gib']:g} GiB, {r['ranks']} rank(s)"
            tok = Measured(f"tok/s, {where}", r["batch"], r["measured"], r["predicted"], r["low"], r["high"])
            tok = replace(tok, axis="batch", calibrated_on=cal)
            if r["role"] == "calibration":
                rows.append(replace(tok, role="consistency", source=points).record("regimes", cal_case))
            elif sweep is None:
                rows.append(replace(tok, measured=None, role="withheld", source=withheld).record("regimes", case))
            if sweep is None and r.get("predicted_hit_rate") is not None:
                # its own case (a case's mean error is in one unit): consistency against a calibration
                # row's measured rate, withheld where the file leaves it empty (hit rates on a rank's
                # cache; one booster's where it holds every expert)
                measured = r.get("measured_hit_rate")
                hit = Measured(f"cache hit rate, {where}", r["batch"], measured, r["predicted_hit_rate"])
                role, src = ("withheld", withheld) if measured is None else ("consistency", points)
                hit = replace(
                    hit, low=r.get("hit_rate_low"), high=r.get("hit_rate_high"), role=role, error_unit="points"
                )
                hit = replace(hit, axis="batch", calibrated_on=cal, source=src)
                rows.append(hit.record("regimes", f"{case}-hit"))
        rows += _arrangement_rows(case, points, fit.rows, cal)
        if sweep is not None:
            rows += _sweep_rows(case, sweep, fit, cal)
    return rows


def _sweep_rows(case: str, sweep: PublishedSweep, fit, cal: str) -> list[dict[str, Any]]:
    """The fit's prediction rows at the sizes ``sweep`` measured (tok/s: ``{case}-sweep``; hit
    rates, in points: ``{case}-sweep-hit``) and where its tok/s peaks against the sweep's highest
    size (``case``; the band: where a measured peak would fall, :mod:`moeroof.models.curve_peak`)."""
    tok_rows, hit_rows = [], []
    for r in fit.rows:
        truth = sweep.at_gib(float(r["cache_gib"]))
        if r["role"] == "calibration" or truth is None:
            continue
        where = f"B = {r['batch']}, {r['cache_gib']:g} GiB, {r['ranks']} rank(s)"
        tok = Measured(f"tok/s, {where}", r["batch"], truth[0], r["predicted"], r["low"], r["high"])
        tok_rows.append(
            replace(tok, axis="batch", calibrated_on=cal, source=sweep.source).record("regimes", f"{case}-sweep")
        )
        hit = Measured(f"cache hit rate, {where}", r["batch"], truth[1], r["predicted_hit_rate"])
        hit = replace(hit, low=r.get("hit_rate_low"), high=r.get("hit_rate_high"), error_unit="points")
        hit = replace(hit, axis="batch", calibrated_on=cal, source=sweep.source)
        hit_rows.append(hit.record("regimes", f"{case}-sweep-hit"))
    pk = fit.peaks[0]
    source = (
        f"{sweep.source}: tok/s highest at {sweep.peak_gib:.1f} GiB ({sweep.peak_gib * GiB / GB:.0f} GB) of the "
        "sizes measured; the band is where a measured peak would fall (5–95 %)"
    )
    peak = Measured("cache (GiB) where tok/s peaks", None, sweep.peak_gib, pk["cache_gib"], pk["low"], pk["high"])
    at_peak = replace(peak, axis="cache", calibrated_on=cal, source=source).record("regimes", case)
    return [*tok_rows, *hit_rows, at_peak]


#: public rows a points file leaves out because they differ from its calibration rows only in an
#: arrangement its columns cannot express (the partition, the exchange): seed 003's pair with the
#: id split at 20 GiB and the ladder's rows 0-2 at 40 GiB (:data:`moeroof.studies.expert_split.TOK_S_ROWS`)
ARRANGED = ("seed003-public.plan-points",)


def _arrangement_rows(case: str, points: str, fit_rows: Sequence[dict[str, Any]], cal: str) -> list[dict[str, Any]]:
    """Each public row :data:`ARRANGED` names for ``points`` against the fit's prediction at its
    batch, cache and ranks (the fit cannot tell its arrangement from the calibration rows'), with
    that row's band: role ``prediction``, case ``{case}-arrangements``."""
    from moeroof.studies.expert_split import TOK_S_ROWS

    if points not in ARRANGED:
        return []
    at = {(r["batch"], float(r["cache_gib"]), r["ranks"]): r for r in fit_rows}
    out = []
    for tr in (t for t in TOK_S_ROWS if t.role == "held-out published"):
        r = at[(tr.batch, tr.cache_gib, tr.ranks)]
        where = f"B = {tr.batch}, {tr.cache_gib:g} GiB, {tr.ranks} rank(s), {tr.source.rsplit(',', 1)[0]}"
        m = Measured(f"tok/s, {where}", tr.batch, tr.witnessed_tok_s, r["predicted"], r["low"], r["high"])
        how = f"{cal}; its prediction at this B, cache and ranks (the file's columns hold no partition or exchange)"
        out.append(
            replace(m, axis="batch", calibrated_on=how, source=tr.source).record("regimes", f"{case}-arrangements")
        )
    return out


#: fit-routing's settings in the ``routing`` group: seeds averaged per knob set, bootstrap draws
#: per family, layers simulated (the cache_ladder report's defaults)
ROUTING_SETTINGS = {"seeds": (0, 1), "bootstrap": 6, "max_sim_layers": 12}


def routing_rows(**settings: Any) -> list[dict[str, Any]]:
    """The ``routing`` group (module docstring): hit rates (in points) and GiB per step per rank
    (relative) of :func:`moeroof.studies.ladder.fit_routing_predictions` at :data:`ROUTING_SETTINGS`
    (``settings`` override them), the calibration rows as ``consistency``, the withheld as
    ``withheld`` and the held-out published row as ``prediction`` — each role and unit a case."""
    from moeroof.models.locality import Locality
    from moeroof.studies import ladder

    pred = ladder.fit_routing_predictions(**{**ROUTING_SETTINGS, **settings}, locality=Locality.committed())
    cal = (
        f"fit-routing ({pred.fit.family}: "
        + ", ".join(n for n, v in pred.fit.knobs.items() if v["fitted"])
        + f") on seed 003's public pair rows at M = 8 (20 and 80 GiB, union {ladder.UNION_PUBLISHED:g}); "
        "per-stream locality held at the locality prior"
    )
    withheld = "seed 003: the truth is withheld from this repository"
    roles = {"calibration": "consistency", "withheld": "withheld", "held-out published": "prediction"}
    suffix = {"consistency": "-calibration", "withheld": "", "prediction": "-held-out"}
    rows = []
    for r in pred.rows:
        role = roles[r["role"]]
        where = f"{r['case']}: {r['ranks']} rank(s), M = {r['streams']}, {r['cache_gib_per_rank']:g} GiB per rank"
        source = withheld if role == "withheld" else "seed 003 (docs/sources.md)"
        for kind, key, lo, hi, unit, what in (
            ("hit", "hit_rate", "hit_rate_low", "hit_rate_high", "points", "cache hit rate"),
            ("gib", "gib_streamed_per_step", "gib_low", "gib_high", "relative", "GiB streamed per step per rank"),
        ):
            measured = None if role == "withheld" else r[f"witnessed_{key}"]
            m = Measured(f"{what}, {where}", r["streams"], measured, r[key], r[lo], r[hi], role=role)
            m = replace(m, error_unit=unit, axis="streams", calibrated_on=cal, source=source)
            rows.append(m.record("routing", f"seed003-fit-routing{suffix[role]}-{kind}"))
    return rows


def held_out_rows(
    groups: Sequence[str] = GROUPS,
    *,
    external_dir=None,
    progress: Callable[[int, int, str], None] | None = None,
    jobs: int = 1,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The rows of the chosen groups (module docstring) and, per skipped group, why (``jobs``:
    :func:`regime_rows`')."""
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"groups must be some of {', '.join(GROUPS)}, got {', '.join(unknown)}")
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    total = len(groups)
    comparisons = {"step": validation.comparisons, "cache": validation.cache_comparisons}
    comparisons["skew"] = validation.skew_comparisons
    for i, group in enumerate(groups):
        if progress is not None:
            progress(i, total, group)
        if group in comparisons:
            rows += _comparison_rows(group, comparisons[group]())
        elif group == "regimes":
            rows += regime_rows(jobs=jobs)
        elif group == "routing":
            rows += routing_rows()
        else:
            try:
                st = locality_prior.study(external_dir)
            except FileNotFoundError as err:
                skipped["locality"] = str(err)
                continue
            for name, why in st.skipped.items():
                skipped[f"locality:{name}"] = why
            for r in st.rows:
                others = [s for s in st.prior.sources if s != r.source]
                what = f"the locality prior of {', '.join(others)}; popularity from the source's routing histogram"
                rows += _prior_row(r, f"locality-prior:{r.source}", what)
            rows += _zero_fit_locality_rows(st, external_dir)
    if progress is not None:
        progress(total, total, "done")
    return rows, skipped


def _zero_fit_locality_rows(st, external_dir) -> list[dict[str, Any]]:
    """The locality sources' rows predicted from nothing of their model
    (:func:`moeroof.studies.skew_prior.zero_fit_rows`: both priors without it)."""
    return [
        row
        for r, what in skew_prior.zero_fit_rows(st, external_dir)
        for row in _prior_row(r, f"zero-fit:{r.source}", what)
    ]


def _prior_row(r, case: str, calibrated_on: str) -> list[dict[str, Any]]:
    """A :class:`moeroof.studies.locality_prior.PriorRow` as a row of :func:`held_out_rows` (in
    points), none for a kind that is not a share (hit rate, overlap)."""
    if r.kind not in ("hit_rate", "overlap"):
        return []
    source = locality_prior.SOURCES[r.source]["provenance"]
    return [replace(r, calibrated_on=calibrated_on, source=source).record("locality", case)]


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case: rows, mean |error| (its unit; over the rows with a measurement: a ``withheld``
    row has none), and the share inside its band where it has one."""
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        rs = [r for r in rows if r["case"] == case]
        banded = [r for r in rs if r["inside"] is not None]
        measured = [r for r in rs if r["error"] is not None]
        out.append(
            {
                "case": case,
                "group": rs[0]["group"],
                "role": rs[0]["role"],
                "rows": len(rs),
                "mean_abs_error": sum(abs(r["error"]) for r in measured) / len(measured) if measured else None,
                "error_unit": rs[0]["error_unit"],
                "inside_band": None if not banded else sum(bool(r["inside"]) for r in banded) / len(banded),
            }
        )
    return out
