"""Where the suite's files live (resolved from the package), and how a user's data path is found:
from the working directory first, then under the suite's ``data/`` (:func:`resolve_data`)."""

from __future__ import annotations

import os
from pathlib import Path

#: repository root when installed in editable mode from a checkout (lib/moeroof/core/paths.py → ../..)
REPO_ROOT = Path(__file__).resolve().parents[3]
DATA_DIR = REPO_ROOT / "data"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
REPORTS_DIR = REPO_ROOT / "reports"
#: real captured routing data of others (no license): read in place, never copied
EXTERNAL_DIR = REPO_ROOT.parent / "shared" / "data" / "external"


#: the figures committed for design docs: only ``make figures`` writes here
COMMITTED_FIGURES_DIR = REPO_ROOT / "figures"


def figures_dir() -> Path:
    """Where renders save figures: ``reports/figures`` (a render writes only under ``reports/``;
    ``make figures`` copies what changed into the committed ``figures/``).
    ``MOEROOF_FIGURES_DIR`` overrides it (tests write to a temp dir)."""
    return Path(os.environ.get("MOEROOF_FIGURES_DIR", REPORTS_DIR / "figures"))


class DataPathError(FileNotFoundError, ValueError):
    """A data path that is in none of the places looked in; ``str(err)`` names each of them.

    Both a :class:`FileNotFoundError` (for code that catches ``OSError``) and a
    :class:`ValueError` (bad input: the command line prints ``error: …`` and exits 2)."""


def resolve_data(path: str | os.PathLike[str]) -> Path:
    """A user-given data path, as the user means it.

    - absolute (or ``~/…``): as given (its reader says when it is missing);
    - relative and present from the current working directory: that file (the user's own
      ``histograms/x.csv`` wins over the suite's);
    - otherwise relative to the suite's ``data/`` (the embedded names notebooks and examples
      use: ``histograms/deepseek-v3-like.csv``, ``traces/qwen3-30b-a3b-like.npz``).

    A relative path found in neither place raises :class:`DataPathError` naming every place tried.
    """
    p = Path(path).expanduser()
    if p.is_absolute():
        return p  # the reader says when it is missing
    if p.exists():
        return p.resolve()
    embedded = DATA_DIR / p
    if embedded.exists():
        return embedded
    raise DataPathError(f"{path}:-: file: no such file (looked in {Path.cwd() / p} and in the suite's {embedded})")
