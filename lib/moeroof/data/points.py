"""POINTS files: measured (or wanted) cache and routing points for ``moeroof fit-routing``.

A POINTS file is a CSV with a header row; lines whose first non-blank character is ``#`` are
comments (provenance, units) and blank lines are skipped, before or after the header. Columns:

- ``kind`` (required): ``hit_rate`` (hits per requested (layer, expert) item, a fraction 0–1),
  ``gib_per_step`` (GiB streamed per rank per decode step), ``union`` (distinct experts per
  layer and step across the batch) or ``overlap`` (experts a stream's token shares with the
  stream's previous token, as a fraction of K);
- ``batch`` (required): concurrent streams M, a positive integer;
- ``capacity_experts_per_layer`` (experts per layer, per rank) or ``capacity_gib`` (GiB per rank; needs
  the expert size in bytes): exactly one for ``hit_rate`` and ``gib_per_step`` rows, neither
  for ``union`` and ``overlap`` rows (they see no cache);
- ``policy``: ``lru`` (default), ``lfu``, ``s3fifo``, ``arc``, ``belady`` or ``static``;
- ``scope``: ``global`` (default: one cache for all layers) or ``layer``;
- ``ranks``: boxes the experts are split over (default 1), each with its own cache;
- ``partition``: ``lpt`` (default: equal-cardinality LPT on the layer's popularity) or ``id``
  (contiguous id ranges);
- ``value``: the measurement; empty = predict this row;
- ``note``: free text, ignored.

Rows with a value calibrate, rows without are predicted. :func:`read_points` refuses, with one
:class:`~moeroof.data.io.InputError` ``FILE:ROW: FIELD: what is wrong`` (ROW the file's line
number, the header being line 1 when no comment precedes it): an empty file or one without a
calibration row, an unknown column, kind, policy, scope or partition, a malformed number, a hit
rate or overlap outside 0–1, a capacity given twice (or missing, or given to a row that sees no
cache), ``capacity_gib`` or ``gib_per_step`` without the expert size, and two rows with the
same conditions whose values differ by more than :data:`NOISE` (contradictory).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import cast

from moeroof.core.input_files import open_input
from moeroof.core.limits import MAX_BATCH, MAX_GIB, MAX_POINTS_BYTES, MAX_POINTS_ROWS
from moeroof.data.io import InputError, csv_cells

__all__ = [
    "KINDS",
    "POLICIES",
    "SCOPES",
    "PARTITIONS",
    "COLUMNS",
    "CONDITION_COLUMNS",
    "NOISE",
    "MEASUREMENT_SIGMA",
    "measurement_sigma",
    "Point",
    "noise",
    "read_points",
    "check_points",
    "refuse_past_most",
    "cell_number",
]

KINDS = ("hit_rate", "gib_per_step", "union", "overlap")
#: the cache simulator's policies (moeroof.cachesim.POLICIES, spelled out: data sits below models)
POLICIES = ("lru", "lfu", "lfu-perfect", "static", "belady", "belady-insert", "s3fifo", "arc")
SCOPES = ("global", "layer")
PARTITIONS = ("lpt", "id")
REQUIRED = ("kind", "batch", "value")
#: the columns of a row's conditions, in the order of :attr:`Point.conditions`
CONDITION_COLUMNS = (
    "kind",
    "batch",
    "capacity_experts_per_layer",
    "capacity_gib",
    "policy",
    "scope",
    "ranks",
    "partition",
)
COLUMNS = (*CONDITION_COLUMNS, "value", "note")
#: what two measurements of the same conditions may differ by before they contradict each other:
#: (absolute, relative) — hit rates and overlaps 3 points, a union 5 %, GiB per step 10 %
NOISE = {"hit_rate": (0.03, 0.0), "overlap": (0.05, 0.0), "union": (0.0, 0.05), "gib_per_step": (0.0, 0.10)}
#: the noise of one measurement (σ: absolute, relative) that a band of a new measurement carries
#: beside the model's own spread — fit-plan's on a hit rate (2 points; its 5 % on tok/s for the
#: streamed GiB and the union). Seed 003's one published replicate of a row (52.5 % and 7.02 GiB
#: per step in one table, 53.8 % and 6.62 in another) reads about 0.9 points and 4 % a measurement.
MEASUREMENT_SIGMA = {"hit_rate": (0.02, 0.0), "overlap": (0.02, 0.0), "union": (0.0, 0.05), "gib_per_step": (0.0, 0.05)}


@dataclass(frozen=True)
class Point:
    """One POINTS row. ``capacity_experts`` per layer per rank or ``capacity_gib`` per rank (the
    other None; both None for ``union`` / ``overlap``); ``value`` None = to be predicted;
    ``row`` the line number in the file (0 for points built in code)."""

    kind: str
    batch: int
    capacity_experts: float | None = None
    capacity_gib: float | None = None
    policy: str = "lru"
    scope: str = "global"
    ranks: int = 1
    partition: str = "lpt"
    value: float | None = None
    row: int = 0

    @property
    def calibrates(self) -> bool:
        return self.value is not None

    @property
    def conditions(self) -> tuple:
        """Everything but the value (and the row): two points with equal conditions measure the same thing."""
        return astuple(self)[: len(CONDITION_COLUMNS)]

    def label(self) -> str:
        cap = ""
        if self.capacity_experts is not None:
            cap = f" C={self.capacity_experts:g}/layer"
        elif self.capacity_gib is not None:
            cap = f" C={self.capacity_gib:g} GiB"
        extra = ""
        if self.kind in ("hit_rate", "gib_per_step"):
            extra = f" {self.policy}/{self.scope}"
            if self.ranks > 1:
                extra += f" R={self.ranks} {self.partition}"
        return f"{self.kind} M={self.batch}{cap}{extra}"


def measurement_sigma(kind: str, value: float) -> float:
    """The σ :data:`MEASUREMENT_SIGMA` gives one measurement of ``kind`` near ``value``."""
    absolute, relative = MEASUREMENT_SIGMA[kind]
    return max(absolute, relative * abs(value))


def noise(kind: str, value: float) -> float:
    """The tolerance :data:`NOISE` allows a measurement of ``kind`` near ``value``."""
    absolute, relative = NOISE[kind]
    return max(absolute, relative * abs(value))


#: the most a batch and a cache may be (:mod:`moeroof.core.limits`), as a message says them
_MOST = {"batch": (MAX_BATCH, f"{MAX_BATCH} streams a batch"), "gib": (MAX_GIB, f"{MAX_GIB:.4g} GiB a cache")}


def refuse_past_most(value: float, kind: str, text: str, path: Path, row: int, field: str) -> None:
    """Refuses a batch or a cache in GiB (``kind``) past its bound, ``text`` the cell as written:
    a cache of 1e300 GiB (finite, but not in bytes) printed a 300-digit cache and predicted 100 % hits."""
    most, what = _MOST[kind]
    if value > most:
        raise InputError(path, row, field, f"{text.strip()!r} is more than the {what} may be")


def cell_number(text: str, path: Path, row: int, name: str, finite: str = "expected a finite number") -> float:
    """The number in a POINTS cell, finite (an error quotes ``text`` as written; ``finite``: what
    it says of an infinite or NaN one)."""
    try:
        x = float(text.strip())
    except ValueError:
        raise InputError(path, row, name, f"expected a number, got {text!r}") from None
    if not math.isfinite(x):
        raise InputError(path, row, name, f"{finite}, got {text!r}")
    return x


def _positive_int(text: str, path: Path, row: int, name: str) -> int:
    x = cell_number(text, path, row, name)
    if x != int(x) or x < 1:
        raise InputError(path, row, name, f"expected a positive integer, got {text!r}")
    return int(x)


def _choice(text: str, choices: Sequence[str], default: str, path: Path, row: int, name: str) -> str:
    t = text.strip().lower() or default
    if t not in choices:
        raise InputError(path, row, name, f"unknown {name} {text.strip()!r}; expected one of {', '.join(choices)}")
    return t


def _capacity(
    cells: dict[str, str], kind: str, path: Path, row: int, experts: int | None
) -> tuple[float | None, float | None]:
    """(capacity in experts per layer, in GiB): one of them for a row that sees the cache, else neither."""
    cap_e_text = cells.get("capacity_experts_per_layer", "").strip()
    cap_g_text = cells.get("capacity_gib", "").strip()
    cap_e = cap_g = None
    if cap_e_text and cap_g_text:
        raise InputError(
            path, row, "capacity_gib", "capacity given twice (capacity_experts_per_layer and capacity_gib): give one"
        )
    if kind not in ("hit_rate", "gib_per_step"):
        if cap_e_text or cap_g_text:
            name = "capacity_experts_per_layer" if cap_e_text else "capacity_gib"
            raise InputError(path, row, name, f"a {kind} row sees no cache: leave the capacity empty")
        return None, None
    if not cap_e_text and not cap_g_text:
        raise InputError(
            path, row, "capacity_experts_per_layer", f"a {kind} row needs capacity_experts_per_layer or capacity_gib"
        )
    if cap_e_text:
        cap_e = cell_number(cap_e_text, path, row, "capacity_experts_per_layer")
        if cap_e < 0 or (experts is not None and cap_e > experts):
            bound = f" and <= experts ({experts})" if experts is not None else ""
            raise InputError(path, row, "capacity_experts_per_layer", f"must be >= 0{bound}, got {cap_e_text!r}")
    else:
        cap_g = cell_number(cap_g_text, path, row, "capacity_gib")
        if cap_g < 0:
            raise InputError(path, row, "capacity_gib", f"must be >= 0, got {cap_g_text!r}")
        refuse_past_most(cap_g, "gib", cap_g_text, path, row, "capacity_gib")
    return cap_e, cap_g


def _value(value_text: str, kind: str, path: Path, row: int, experts: int | None) -> float | None:
    """A row's measured value within its kind's range (None: empty, to predict)."""
    if not value_text:
        return None
    value = cell_number(value_text, path, row, "value")
    if kind in ("hit_rate", "overlap") and not 0.0 <= value <= 1.0:
        raise InputError(path, row, "value", f"a {kind} is a fraction in 0–1, got {value_text!r}")
    if kind == "gib_per_step" and not 0 <= value <= MAX_GIB:
        raise InputError(path, row, "value", f"GiB per step must be in 0 … {MAX_GIB:.4g}, got {value_text!r}")
    if kind == "union" and (value < 0 or (experts is not None and value > experts)):
        bound = f" and <= experts ({experts})" if experts is not None else ""
        raise InputError(path, row, "value", f"a union (distinct experts per layer) must be >= 0{bound}")
    return value


def _parse_row(cells: dict[str, str], path: Path, row: int, experts: int | None) -> Point:
    """One data row's :class:`Point`, its fields checked in column order."""
    kind_text = cells.get("kind", "").strip()
    if not kind_text:
        raise InputError(path, row, "kind", f"missing; expected one of {', '.join(KINDS)}")
    kind = _choice(kind_text, KINDS, "", path, row, "kind")
    batch_text = cells.get("batch", "").strip()
    if not batch_text:
        raise InputError(path, row, "batch", "missing; expected the number of concurrent streams")
    batch = _positive_int(batch_text, path, row, "batch")
    refuse_past_most(batch, "batch", batch_text, path, row, "batch")
    cap_e, cap_g = _capacity(cells, kind, path, row, experts)
    policy = _choice(cells.get("policy", ""), POLICIES, "lru", path, row, "policy")
    scope = _choice(cells.get("scope", ""), SCOPES, "global", path, row, "scope")
    ranks_text = cells.get("ranks", "").strip()
    ranks = _positive_int(ranks_text, path, row, "ranks") if ranks_text else 1
    if experts is not None and ranks > experts:
        raise InputError(path, row, "ranks", f"more ranks ({ranks}) than experts ({experts})")
    partition = _choice(cells.get("partition", ""), PARTITIONS, "lpt", path, row, "partition")
    value = _value(cells.get("value", "").strip(), kind, path, row, experts)
    return Point(kind, batch, cap_e, cap_g, policy, scope, ranks, partition, value, row)


def check_points(
    points: Sequence[Point], path: str | os.PathLike[str] = "<points>", *, expert_bytes: float | None = None
) -> None:
    """The checks across rows: at least one calibration row; ``capacity_gib`` and
    ``gib_per_step`` only with the expert size; no two rows with equal conditions whose values
    differ by more than :func:`noise` (the later row is named)."""
    path = Path(path)
    if not points:
        raise InputError(path, 1, "row", "no data rows: expected at least one row with a value")
    if not any(p.calibrates for p in points):
        raise InputError(path, points[0].row, "value", "no calibration row: every value is empty, nothing to fit")
    if expert_bytes is None:
        for p in points:
            if p.capacity_gib is not None:
                raise InputError(path, p.row, "capacity_gib", "needs the expert size in bytes (expert_bytes)")
            if p.kind == "gib_per_step":
                raise InputError(path, p.row, "kind", "gib_per_step needs the expert size in bytes (expert_bytes)")
    seen: dict[tuple, Point] = {}
    for p in points:
        if not p.calibrates:
            continue
        first = seen.setdefault(p.conditions, p)
        # both calibration rows, so both values are there
        before, value = cast(float, first.value), cast(float, p.value)
        if first is not p and abs(before - value) > noise(p.kind, max(abs(before), abs(value))):
            where = f"line {first.row}" if first.row else "an earlier point"
            why = (
                f"contradicts {where} (same conditions, {before:g} against {value:g}, "
                f"beyond the noise {noise(p.kind, max(before, value)):g})"
            )
            raise InputError(path, p.row, "value", why)


def read_points(
    path: str | os.PathLike[str], *, experts: int | None = None, expert_bytes: float | None = None
) -> list[Point]:
    """Read and check a POINTS file (module docstring); the points in input order.

    ``experts`` (E), when given, bounds ``capacity_experts_per_layer``, ``ranks`` and ``union`` values;
    ``expert_bytes`` (bytes of one expert of one layer) is needed by ``capacity_gib`` and
    ``gib_per_step`` rows. The file is only read.
    """
    path = Path(path)
    try:
        with open_input(path, text=True, encoding="utf-8-sig", newline="") as fh:  # read-only; a FIFO refused
            text = fh.read(MAX_POINTS_BYTES + 1)
            if len(text) > MAX_POINTS_BYTES:
                raise InputError(
                    path, "-", "file", f"larger than the {MAX_POINTS_BYTES >> 20} MiB a POINTS file may be"
                )
            lines = text.splitlines()
    except FileNotFoundError:
        raise InputError(path, "-", "file", "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "-", "file", "is a directory, expected a POINTS .csv") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, "-", "file", f"cannot read: {exc}") from None
    content = [(i, line) for i, line in enumerate(lines, start=1) if line.strip() and not line.lstrip().startswith("#")]
    if len(content) > MAX_POINTS_ROWS + 1:
        raise InputError(
            path, "-", "file", f"{len(content) - 1} rows, more than the {MAX_POINTS_ROWS} a POINTS file may hold"
        )
    if not content:
        raise InputError(path, 1, "header", f"empty file; expected a header with {', '.join(REQUIRED)}")
    header_row, header_line = content[0]
    names = [h.strip().lower() for h in csv_cells(header_line, path, header_row)]
    for name in names:
        if name == "capacity_experts":
            why = (
                "column 'capacity_experts' is the whole cache (all layers) in cache, mrc and plan; a POINTS file "
                "gives the capacity per layer per rank: rename the column capacity_experts_per_layer"
            )
            raise InputError(path, header_row, "header", why)
        if name not in COLUMNS:
            raise InputError(path, header_row, "header", f"unknown column {name!r}; expected {', '.join(COLUMNS)}")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InputError(path, header_row, "header", f"column {dup!r} given twice")
    for name in REQUIRED:
        if name not in names:
            raise InputError(path, header_row, "header", f"missing column {name!r}")
    points = []
    for row, line in content[1:]:
        cells = csv_cells(line, path, row, names)
        if len(cells) != len(names):
            raise InputError(path, row, "row", f"expected {len(names)} fields, got {len(cells)}")
        points.append(_parse_row(dict(zip(names, cells)), path, row, experts))
    check_points(points, path, expert_bytes=expert_bytes)
    return points
