"""The repository cites nothing a fresh clone does not contain.

Every tracked text file (the binary and figure files aside; the README and docs/ included) is
searched for two kinds of reference:

1. the project's own tracker numbers — an issue or a ticket named by number or letter (a clone
   has no tracker to look them up in);
2. the design documents and seed files kept outside the repository: the spec's sections, the
   spec, style, validation and developer notes by file name, and any path under ``shared/`` but
   the captured-data folder.

Allowed: public upstream references that name their repository (``owner/name#1234``,
``mlx-lm#1438``), and ``../shared/data/external``, the optional folder the tests and studies read
captured data from.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: kept out of the search: this file, which spells the patterns it looks for
EXCLUDED_FILES = {"tests/test_no_outside_refs.py"}
EXCLUDED_DIRS: tuple[str, ...] = ()
BINARY_SUFFIXES = {".png", ".svg", ".npz", ".npy", ".parquet"}

#: (what it is, pattern), matched case-insensitively
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("tracker issue", r"\bissues?\s+#?\d+"),
        ("tracker ticket", r"\btickets?\s+(?:[a-z]|\d+)\b"),
        ("spec section", r"\bspec\s*§"),
        ("spec section", r"§\s*\d+(?:[.–-]\d+)*\s+of\s+the\s+spec\b"),
        ("path under shared/", r"\bshared/(?!data/external)"),
    )
) + (
    # the outside notes by their file names, which are upper case (docs/validation.md is a page here)
    ("outside document", re.compile(r"\b(?:SPEC|STYLE|VALIDATION|DEVELOPERS)\.md\b")),
)

#: a public upstream reference, ``name#1234`` (the number right after a repository's name):
#: blanked before the search, so it never counts as a tracker number
UPSTREAM = re.compile(r"(?<=[\w.\-])#\d+")


def tracked_files(root: Path = REPO_ROOT) -> list[str]:
    """The tracked files to search, relative to ``root`` (``git ls-files``)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, text=True).stdout
    return [path for path in out.split("\0") if path and searched(path)]


def searched(path: str) -> bool:
    """Whether a tracked path is searched: not a binary or figure file."""
    if path in EXCLUDED_FILES or path.startswith(EXCLUDED_DIRS):
        return False
    return Path(path).suffix.lower() not in BINARY_SUFFIXES


def outside_refs(root: Path, paths: list[str]) -> list[str]:
    """``file:line: what: text`` for every match of :data:`PATTERNS` in ``paths`` under ``root``."""
    found = []
    for path in paths:
        try:
            text = (root / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the working tree
        for number, line in enumerate(text.splitlines(), 1):
            cleaned = UPSTREAM.sub("", line)
            for name, pattern in PATTERNS:
                match = pattern.search(cleaned)
                if match:
                    found.append(f"{path}:{number}: {name}: {match.group(0)!r}")
    return found


def test_no_tracked_file_cites_what_a_clone_lacks():
    found = outside_refs(REPO_ROOT, tracked_files())
    assert not found, "references to documents a fresh clone does not contain:\n" + "\n".join(found)


def test_the_search_finds_each_kind_and_allows_the_public_forms(tmp_path):
    # the strings are built in pieces so this file itself stays clean
    bad = {
        "a.py": "# bounded first (iss" + "ue 12)\n",
        "b.py": '"""Fixed in Iss' + "ue #16 and iss" + 'ues 8 and 9."""\n',
        "c.toml": "# see tick" + "et F\n",
        "d.md": "the union formula of SP" + "EC §4\n",
        "e.txt": "read ../shared/se" + "eds/003_x-excerpt.md and VALIDA" + "TION.md\n",
        "f.py": "x = 1  # §2 of the sp" + "ec\n",
    }
    good = {
        "g.py": "# mlx-lm#1438, llama.cpp#2188, antirez/ds4#893, arXiv 2505.16056\n",
        "h.py": 'EXTERNAL = "../shared/data/external"  # seed 003 (docs/sources.md)\n',
        "i.py": "# Davison & Hinkley 1997, §5.2; the issue threads of public projects\n",
        "j.py": "# held-out validation: docs/validation.md\n",
    }
    for name, text in {**bad, **good}.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    found = outside_refs(tmp_path, sorted({**bad, **good}))
    flagged = {line.split(":", 1)[0] for line in found}
    assert flagged == set(bad), found
    assert any("e.txt:1: path under shared/" in line for line in found)
    assert any("e.txt:1: outside document" in line for line in found)


def test_binaries_are_not_searched_and_the_docs_are():
    assert searched("README.md") and searched("docs/sources.md") and searched("mkdocs.yml")
    assert not searched("figures/union.png") and not searched("data/traces/qwen3-30b-a3b-like.npz")
    assert searched("lib/moeroof/models/plan.py") and searched("tests/validation_bands.toml")
    assert searched("figures/union.json") and searched("data/points/bigrig.plan-points")
