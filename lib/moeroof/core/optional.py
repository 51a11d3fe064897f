"""Optional dependencies: the packages only some commands need, installed with an extra.

The base install is enough for ``plan``, ``union``, ``fit``, ``fit-routing``, ``fit-plan``,
``cache``, ``mrc`` and the reports; ``moeroof sweep`` needs dask (``pip install 'moeroof[sweep]'``)
and Parquet files need pyarrow (``'moeroof[parquet]'``; the sweep extra has it too). A command
that needs one imports it through :func:`require`, which says which extra to install instead of
failing with Python's ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from moeroof.core.errors import MissingDependency

__all__ = ["require"]


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """``import module``, or :class:`MissingDependency` naming ``purpose`` and the ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.split(".", 1)[0]
        raise MissingDependency(
            f"{purpose} needs {package}, an optional dependency: pip install 'moeroof[{extra}]'"
        ) from None
