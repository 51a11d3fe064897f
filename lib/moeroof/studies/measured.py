"""One measurement against its prediction: the row every validation study shares.

A :class:`Measured` is the quantity, where it was taken (``axis``/``at``), the measured value
(None where the truth is withheld), the prediction, its band where it has one, and what it
was calibrated on; its ``error`` is relative (``predicted / measured − 1``) or in points
(``predicted − measured``, a fraction for a share), as ``error_unit`` says. ``moeroof validate``
prints them as :data:`COLUMNS` (:mod:`moeroof.studies.held_out`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeroof.core.results import Result

__all__ = ["COLUMNS", "Measured"]

#: the columns of every held-out row, in table order
COLUMNS: tuple[str, ...] = ("group", "case", "role", "quantity", "axis", "at", "measured", "predicted", "error")
COLUMNS += ("error_unit", "low", "high", "inside", "calibrated_on", "source")


@dataclass(frozen=True)
class Measured(Result):
    """One measured (or withheld) point against its prediction and band (module docstring)."""

    quantity: str
    at: Any
    measured: float | None
    predicted: float
    low: float | None = None
    high: float | None = None
    role: str = "prediction"
    error_unit: str = "relative"
    axis: str | None = None
    calibrated_on: str = ""
    source: str = ""

    @property
    def error(self) -> float | None:
        """Relative or in points (``error_unit``); None where the measurement is withheld."""
        if self.measured is None:
            return None
        return self.predicted / self.measured - 1.0 if self.error_unit == "relative" else self.predicted - self.measured

    @property
    def inside(self) -> bool | None:
        """Whether the band holds the measurement; None without a band or a measurement."""
        if self.measured is None or self.low is None or self.high is None:
            return None
        return bool(self.low <= self.measured <= self.high)

    def record(self, group: str, case: str) -> dict[str, Any]:
        """The row under :data:`COLUMNS`."""
        own = {"group": group, "case": case, "error": self.error, "inside": self.inside}
        return {k: own[k] if k in own else getattr(self, k) for k in COLUMNS}

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "error": self.error, "inside": self.inside}
