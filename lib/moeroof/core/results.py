"""``to_dict()`` for the library's result dataclasses: plain Python, ready for ``json.dumps``.

Arrays become lists, nested results and mappings become dicts, tuples become lists, paths become
text and non-finite floats become ``None`` (JSON has no NaN). A result class inherits
:class:`Result` and stays a frozen dataclass.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Result", "plain", "stage_reporter"]


def plain(obj: Any) -> Any:
    """``obj`` as JSON-ready Python (see the module docstring)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_dict = getattr(obj, "to_dict", None)
        if callable(to_dict):
            return to_dict()
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else None
    if isinstance(obj, Path):
        return str(obj)
    return obj


class Result:
    """Mixin for result dataclasses: :meth:`to_dict` over every field."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


def stage_reporter(progress: Callable[[int, int, str], None] | None, stages: int) -> Callable[[str], None]:
    """``report(what)`` for a computation of ``stages`` stages: calls ``progress(done, stages,
    what)``, when ``progress`` is given, ``done`` the calls before this one (at most ``stages``)."""
    done = itertools.count()

    def report(what: str) -> None:
        stage = next(done)
        if progress is not None:
            progress(min(stage, stages), stages, what)

    return report
