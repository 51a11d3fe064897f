"""Where the suite's files live, resolved from the package (not from the working directory)."""

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


def figures_dir() -> Path:
    """Figures directory; ``MOEROOF_FIGURES_DIR`` overrides it (tests write to a temp dir)."""
    return Path(os.environ.get("MOEROOF_FIGURES_DIR", REPO_ROOT / "figures"))


def resolve_data(path: str | os.PathLike[str]) -> Path:
    """A user-given data path: absolute as given, otherwise relative to ``data/``.

    Notebook parameters name embedded files as ``histograms/x.csv``; a user's own file is
    passed as an absolute path (or relative to the current directory when it exists there).
    """
    p = Path(path)
    if p.is_absolute():
        return p
    return p.resolve() if p.exists() and not (DATA_DIR / p).exists() else DATA_DIR / p
