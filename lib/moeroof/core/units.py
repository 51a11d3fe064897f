"""The one place where units are converted (SI inside, conversions only at the edges).

Inside the library every quantity is SI: bytes, seconds, bytes/s, FLOP, FLOP/s. Presets, plots
and tables speak GiB, GB/s, TFLOP/s and ms; they convert here, and nowhere else.

Decimal prefixes (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB, GiB, TiB) powers of
1024 — vendors quote SSD and memory bandwidth in GB/s, capacities often in GiB; mixing them up
is a 7 % error at G and 10 % at T.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "DIMENSIONS",
    "UNITS",
    "to_si",
    "from_si",
    "dimension_of",
    "GiB",
    "GB",
    "MiB",
    "MB",
    "KiB",
    "TB",
    "TiB",
    "gib",
    "gb_per_s",
    "ms",
]

KiB = 1024.0
MiB = 1024.0**2
GiB = 1024.0**3
TiB = 1024.0**4
kB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12

#: unit name → (dimension, factor to SI)
UNITS: dict[str, tuple[str, float]] = {
    # bytes
    "B": ("bytes", 1.0),
    "kB": ("bytes", kB),
    "KB": ("bytes", kB),
    "MB": ("bytes", MB),
    "GB": ("bytes", GB),
    "TB": ("bytes", TB),
    "KiB": ("bytes", KiB),
    "MiB": ("bytes", MiB),
    "GiB": ("bytes", GiB),
    "TiB": ("bytes", TiB),
    # bandwidth
    "B/s": ("bytes_per_s", 1.0),
    "kB/s": ("bytes_per_s", kB),
    "MB/s": ("bytes_per_s", MB),
    "GB/s": ("bytes_per_s", GB),
    "TB/s": ("bytes_per_s", TB),
    "KiB/s": ("bytes_per_s", KiB),
    "MiB/s": ("bytes_per_s", MiB),
    "GiB/s": ("bytes_per_s", GiB),
    # work
    "FLOP": ("flop", 1.0),
    "MFLOP": ("flop", 1e6),
    "GFLOP": ("flop", 1e9),
    "TFLOP": ("flop", 1e12),
    # compute rate
    "FLOP/s": ("flop_per_s", 1.0),
    "GFLOP/s": ("flop_per_s", 1e9),
    "TFLOP/s": ("flop_per_s", 1e12),
    "PFLOP/s": ("flop_per_s", 1e15),
    # time
    "s": ("seconds", 1.0),
    "ms": ("seconds", 1e-3),
    "us": ("seconds", 1e-6),
    "ns": ("seconds", 1e-9),
    # dimensionless counts and ratios
    "1": ("count", 1.0),
    "tok/s": ("per_s", 1.0),
}

DIMENSIONS = frozenset(dim for dim, _ in UNITS.values())


def dimension_of(unit: str) -> str:
    """The dimension a unit measures (``"GiB"`` → ``"bytes"``); ValueError for unknown units."""
    try:
        return UNITS[unit][0]
    except KeyError:
        raise ValueError(f"unknown unit {unit!r}; known: {', '.join(UNITS)}") from None


def to_si(value, unit: str):
    """``value`` in ``unit`` → SI (numbers or arrays).

    A finite value whose SI form is not (``1e300 GiB`` is 1.07e309 bytes: inf) raises a
    ValueError naming the value and unit, so no overflowed infinity reaches a model.
    """
    if unit not in UNITS:
        dimension_of(unit)  # raises, naming the known units
    factor = UNITS[unit][1]
    if isinstance(value, (list, tuple, np.ndarray)):
        given = np.asarray(value, dtype=float)
        with np.errstate(over="ignore"):
            out = given * factor
        bad = np.isfinite(given) & ~np.isfinite(out)
        if np.any(bad):
            raise ValueError(f"{given[bad].flat[0]:g} {unit} overflows: too large to compute with in SI units")
        return out
    scalar = float(value)
    product = scalar * factor
    if math.isfinite(scalar) and not math.isfinite(product):
        raise ValueError(f"{scalar:g} {unit} overflows: too large to compute with in SI units")
    return product


def from_si(value, unit: str):
    """SI ``value`` → ``unit`` (for plots and tables)."""
    dimension_of(unit)
    factor = UNITS[unit][1]
    return (
        np.asarray(value, dtype=float) / factor
        if isinstance(value, (list, tuple, np.ndarray))
        else float(value) / factor
    )


def gib(bytes_: float):
    """bytes → GiB, for tables and axes."""
    return from_si(bytes_, "GiB")


def gb_per_s(bytes_per_s: float):
    """bytes/s → GB/s (decimal, as vendors quote bandwidth)."""
    return from_si(bytes_per_s, "GB/s")


def ms(seconds: float):
    return from_si(seconds, "ms")
