"""The one place where units are converted (SI inside, conversions only at the edges).

Inside the library every quantity is SI: bytes, seconds, bytes/s, FLOP, FLOP/s. Presets, plots
and tables speak GiB, GB/s, TFLOP/s and ms; they convert here, and nowhere else.

Decimal prefixes (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB, GiB, TiB) powers of
1024 — vendors quote SSD and memory bandwidth in GB/s, capacities often in GiB; mixing them up
is a 7 % error at G and 10 % at T.
"""

from __future__ import annotations

import numpy as np

__all__ = [
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
]

KiB = 1024.0
MiB = 1024.0**2
GiB = 1024.0**3
TiB = 1024.0**4
kB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12

#: bytes by each prefix's name (the byte rates take these but ``KB`` and ``TiB``)
_BYTES = {"B": 1.0, "kB": kB, "KB": kB, "MB": MB, "GB": GB, "TB": TB, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB}

#: unit name → (dimension, factor to SI)
UNITS: dict[str, tuple[str, float]] = {
    **{u: ("bytes", f) for u, f in _BYTES.items()},
    **{u + "/s": ("bytes_per_s", f) for u, f in _BYTES.items() if u not in ("KB", "TiB")},
    **{p + "FLOP": ("flop", f) for p, f in (("", 1.0), ("M", 1e6), ("G", 1e9), ("T", 1e12))},
    **{p + "FLOP/s": ("flop_per_s", f) for p, f in (("", 1.0), ("G", 1e9), ("T", 1e12), ("P", 1e15))},
    **{u: ("seconds", f) for u, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))},
    "1": ("count", 1.0),  # dimensionless counts and ratios
    "tok/s": ("per_s", 1.0),
}


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
    dimension_of(unit)  # raises for an unknown unit, naming the known ones
    given = np.asarray(value, dtype=float)
    with np.errstate(over="ignore"):
        out = given * UNITS[unit][1]
    bad = np.isfinite(given) & ~np.isfinite(out)
    if np.any(bad):
        raise ValueError(f"{given[bad].flat[0]:g} {unit} overflows: too large to compute with in SI units")
    return out if isinstance(value, (list, tuple, np.ndarray)) else float(out)


def from_si(value, unit: str):
    """SI ``value`` → ``unit`` (for plots and tables)."""
    dimension_of(unit)
    out = np.asarray(value, dtype=float) / UNITS[unit][1]
    return out if isinstance(value, (list, tuple, np.ndarray)) else float(out)


def gib(bytes_: float):
    """bytes → GiB, for tables and axes."""
    return from_si(bytes_, "GiB")


def gb_per_s(bytes_per_s: float):
    """bytes/s → GB/s (decimal, as vendors quote bandwidth)."""
    return from_si(bytes_per_s, "GB/s")
