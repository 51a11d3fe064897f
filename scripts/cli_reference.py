#!/usr/bin/env python
"""Rewrite docs/cli.md from the parsers (moeroof.cli.reference); the page is written whole."""

from __future__ import annotations

import sys

from moeroof.cli.reference import reference_markdown
from moeroof.core.atomic import write_text
from moeroof.core.paths import REPO_ROOT


def main() -> int:
    path = REPO_ROOT / "docs" / "cli.md"
    write_text(path, reference_markdown())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
