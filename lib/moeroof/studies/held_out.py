"""Every held-out case in one table: what ``moeroof validate`` prints (issue 24).

Each case is fitted only on its named calibration (or on nothing) and predicts the rest; the
error is shown whatever it is. Three groups:

- ``step``: the step model against the published throughput and bytes figures of VALIDATION.md
  (:func:`moeroof.studies.validation.comparisons`; roles ``prediction`` and ``consistency``, the
  latter only reproducing its own calibration point);
- ``cache``: the single-stream cache column of VALIDATION.md, fitted on two sizes and predicting
  the others, and the zero-fit prediction from the embedded trace
  (:func:`moeroof.studies.validation.cache_comparisons`);
- ``locality``: each real decode source predicted from the locality prior of the others
  (:func:`moeroof.studies.locality_prior.study`), with its 5–95 % band; read from the captures
  in ``../shared/data/external`` and skipped, said so, where they are absent.

A row's ``error`` is relative (``predicted / measured − 1``) or in points (hit rates, as a
fraction: 0.05 is 5 points), as ``error_unit`` says; ``low``/``high``/``inside`` are given where
the case has a band.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["GROUPS", "COLUMNS", "held_out_rows", "summarise"]

GROUPS = ("step", "cache", "locality")
#: the columns of every row, in table order
COLUMNS = (
    "group",
    "case",
    "role",
    "quantity",
    "axis",
    "at",
    "measured",
    "predicted",
    "error",
    "error_unit",
    "low",
    "high",
    "inside",
    "calibrated_on",
    "source",
)


def _comparison_rows(group: str, comparisons) -> list[dict[str, Any]]:
    out = []
    for c in comparisons:
        for r in c.rows():
            out.append(
                {
                    "group": group,
                    "case": r["key"],
                    "role": r["role"],
                    "quantity": r["quantity"],
                    "axis": r["axis"],
                    "at": r["B"],
                    "measured": r["measured"],
                    "predicted": r["predicted"],
                    "error": r["error"],
                    "error_unit": r["error_unit"],
                    "low": None,
                    "high": None,
                    "inside": None,
                    "calibrated_on": r["calibrated_on"],
                    "source": r["source"],
                }
            )
    return out


def held_out_rows(
    groups: Sequence[str] = GROUPS,
    *,
    external_dir=None,
    progress: Callable[[int, int, str], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The rows of the chosen groups (module docstring) and, per skipped group, why."""
    from moeroof.studies import validation

    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"groups must be some of {', '.join(GROUPS)}, got {', '.join(unknown)}")
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    total = len(groups)
    for i, group in enumerate(groups):
        if progress is not None:
            progress(i, total, group)
        if group == "step":
            rows += _comparison_rows("step", validation.comparisons())
        elif group == "cache":
            rows += _comparison_rows("cache", validation.cache_comparisons())
        else:
            from moeroof.studies import locality_prior

            try:
                st = locality_prior.study(external_dir)
            except FileNotFoundError as err:
                skipped["locality"] = str(err)
                continue
            for name, why in st.skipped.items():
                skipped[f"locality:{name}"] = why
            for r in st.rows:
                if r.kind not in ("hit_rate", "overlap"):
                    continue
                spec = locality_prior.SOURCES[r.source]
                others = [s for s in st.prior.sources if s != r.source]
                rows.append(
                    {
                        "group": "locality",
                        "case": f"locality-prior:{r.source}",
                        "role": "prediction",
                        "quantity": r.label,
                        "axis": "row",
                        "at": None,
                        "measured": r.measured,
                        "predicted": r.predicted,
                        "error": r.predicted - r.measured,
                        "error_unit": "points",
                        "low": r.low,
                        "high": r.high,
                        "inside": r.inside,
                        "calibrated_on": f"the locality prior of {', '.join(others)}; popularity from the "
                        "source's routing histogram",
                        "source": spec["provenance"],
                    }
                )
    if progress is not None:
        progress(total, total, "done")
    return rows, skipped


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case: rows, mean |error| (its unit), and the share inside its band where it has one."""
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        rs = [r for r in rows if r["case"] == case]
        banded = [r for r in rs if r["inside"] is not None]
        out.append(
            {
                "case": case,
                "group": rs[0]["group"],
                "role": rs[0]["role"],
                "rows": len(rs),
                "mean_abs_error": sum(abs(r["error"]) for r in rs) / len(rs),
                "error_unit": rs[0]["error_unit"],
                "inside_band": None if not banded else sum(bool(r["inside"]) for r in banded) / len(banded),
            }
        )
    return out
