"""Measured points of a box for ``moeroof fit-plan``: a CSV, one row per (batch, cache, ranks,
policy), with the measured net tok/s and hit rate where known (empty: predict it).

Columns (header required, order free): ``batch`` (concurrent agents, integer ≥ 1), ``cache_gib``
(expert cache per box in GiB, ≥ 0), ``ranks`` (boxes, integer ≥ 1; default 1 when the column is
absent), ``policy`` (``lru``, ``lfu``, ``s3fifo``, ``arc``, ``belady`` or ``static``; default
``lru``), ``net_tok_s`` (> 0, or empty), ``hit_rate`` (a fraction in [0, 1], or empty). Lines
starting with ``#`` are comments. A bad file raises :class:`moeroof.data.io.InputError` naming
the file, the row (1-based, header = 1) and the field; nothing is modified.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from moeroof.core.input_files import open_input
from moeroof.core.limits import MAX_POINTS_BYTES, MAX_POINTS_ROWS
from moeroof.data.io import InputError, csv_cells
from moeroof.data.points import cell_number, refuse_past_most

__all__ = ["PLAN_COLUMNS", "POLICIES", "PlanPoint", "read_plan_points"]

PLAN_COLUMNS = ("batch", "cache_gib", "ranks", "policy", "net_tok_s", "hit_rate")
REQUIRED = ("batch", "cache_gib", "net_tok_s")
POLICIES = ("lru", "lfu", "lfu-perfect", "s3fifo", "arc", "belady", "belady-insert", "static")
MAX_ROWS = 10_000


@dataclass(frozen=True)
class PlanPoint:
    """One measured (or to-be-predicted) configuration; ``None`` values are predicted."""

    row: int
    batch: int
    cache_gib: float
    ranks: int
    policy: str
    net_tok_s: float | None
    hit_rate: float | None

    @property
    def calibrates(self) -> bool:
        return self.net_tok_s is not None or self.hit_rate is not None

    @property
    def conditions(self) -> tuple[int, float, int, str]:
        """What sets the configuration measured: (batch, cache_gib, ranks, policy); a file holds
        each once, and repeated runs of one share it."""
        return (self.batch, self.cache_gib, self.ranks, self.policy)


def _number(text: str, path: Path, row: int, field: str) -> float | None:
    """A cell's number (:func:`~moeroof.data.points.cell_number`), None where it is empty."""
    return cell_number(text, path, row, field, finite="must be finite") if text.strip() else None


def _integer(text: str, path: Path, row: int, field: str, default: int | None) -> int:
    x = _number(text, path, row, field)
    if x is None:
        if default is None:
            raise InputError(path, row, field, "missing")
        return default
    if x != int(x) or x < 1:
        raise InputError(path, row, field, f"must be a positive integer, got {text!r}")
    return int(x)


def _point_lines(p: Path) -> list[tuple[int, str]]:
    """(line number, text) of the file's lines that are neither blank nor comments; bounded."""
    try:
        with open_input(p, text=True, encoding="utf-8-sig") as fh:  # a FIFO refused, never waited on
            text = fh.read(MAX_POINTS_BYTES + 1)
    except FileNotFoundError:
        raise InputError(p, None, "file", "no such file") from None
    except UnicodeDecodeError:
        raise InputError(p, None, "file", "not UTF-8 text") from None
    except OSError as exc:
        raise InputError(p, None, "file", f"cannot read: {exc.strerror or exc}") from None
    if len(text) > MAX_POINTS_BYTES:
        raise InputError(p, None, "file", f"larger than the {MAX_POINTS_BYTES >> 20} MiB a POINTS file may be")
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip() and not line.startswith("#")]
    if len(lines) > MAX_POINTS_ROWS + 1:
        raise InputError(
            p, None, "file", f"{len(lines) - 1} rows, more than the {MAX_POINTS_ROWS} a POINTS file may hold"
        )
    if not lines:
        raise InputError(p, None, "file", "empty: expected a header and at least one row")
    return lines


def _point_columns(p: Path, header_row: int, header: str) -> list[str]:
    """The header's column names: known ones, the required ones present, none twice."""
    columns = [c.strip() for c in csv_cells(header, p, header_row)]
    unknown = [c for c in columns if c not in PLAN_COLUMNS]
    if unknown:
        raise InputError(p, header_row, unknown[0], f"unknown column (known: {', '.join(PLAN_COLUMNS)})")
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise InputError(p, header_row, missing[0], "missing column")
    if len(set(columns)) != len(columns):
        raise InputError(p, header_row, "header", "a column appears twice")
    return columns


def _plan_point(rec: dict[str, str], p: Path, row: int) -> PlanPoint:
    """A data row's :class:`PlanPoint`, each field checked against its bounds."""
    batch = _integer(rec["batch"], p, row, "batch", None)
    refuse_past_most(batch, "batch", rec["batch"], p, row, "batch")
    cache = _number(rec["cache_gib"], p, row, "cache_gib")
    if cache is None or cache < 0:
        raise InputError(p, row, "cache_gib", f"must be a number >= 0, got {rec['cache_gib']!r}")
    refuse_past_most(cache, "gib", rec["cache_gib"], p, row, "cache_gib")
    ranks = _integer(rec.get("ranks", ""), p, row, "ranks", 1)
    policy = rec.get("policy", "").strip() or "lru"
    if policy not in POLICIES:
        raise InputError(p, row, "policy", f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    net = _number(rec["net_tok_s"], p, row, "net_tok_s")
    if net is not None and net <= 0:
        raise InputError(p, row, "net_tok_s", f"must be > 0, got {rec['net_tok_s']!r}")
    hit = _number(rec.get("hit_rate", ""), p, row, "hit_rate")
    if hit is not None and not 0.0 <= hit <= 1.0:
        raise InputError(p, row, "hit_rate", f"is a fraction in [0, 1], got {rec['hit_rate']!r}")
    return PlanPoint(row, batch, float(cache), ranks, policy, net, hit)


def read_plan_points(path: str | os.PathLike[str]) -> list[PlanPoint]:
    """Read a fit-plan POINTS file (module docstring), rows in file order."""
    p = Path(path)
    lines = _point_lines(p)
    header_row, header = lines[0]
    columns = _point_columns(p, header_row, header)
    if len(lines) == 1:
        raise InputError(p, None, "file", "no rows after the header")
    if len(lines) - 1 > MAX_ROWS:
        raise InputError(p, None, "file", f"more than {MAX_ROWS} rows")
    points: list[PlanPoint] = []
    seen: dict[tuple, int] = {}
    for row, line in lines[1:]:
        cells = csv_cells(line, p, row, columns)
        if len(cells) != len(columns):
            raise InputError(p, row, "row", f"has {len(cells)} fields, the header has {len(columns)}")
        pt = _plan_point(dict(zip(columns, cells)), p, row)
        key = pt.conditions
        if key in seen:
            raise InputError(
                p, row, "row", f"repeats the conditions of row {seen[key]} (batch, cache_gib, ranks, policy)"
            )
        seen[key] = row
        points.append(pt)
    if not any(pt.calibrates for pt in points):
        raise InputError(p, None, "net_tok_s", "no row has a measured net_tok_s or hit_rate to calibrate on")
    return points
