"""The documentation: the site builds with warnings as errors, the command-line reference is what
the parsers give today, and the README stays a five-minute page that points into the docs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from moeroof.core.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
MKDOCS = [sys.executable, "-m", "mkdocs"]


def _build(root, out) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MKDOCS, "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(out)],
        capture_output=True,
        text=True,
        cwd=root,
    )


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    done = _build(REPO_ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    for page in ("index", "cli", "models", "validation", "sources"):
        assert (tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")).is_file()


@pytest.mark.parametrize(
    "broken",
    ["See [the models](no-such-page.md).\n", "See [a section](models.md#no-such-anchor).\n"],
)
def test_a_broken_link_fails_the_build(tmp_path, broken):
    """The check can fail: a copy of the docs with one bad link (a page, an anchor) does not build."""
    root = tmp_path / "repo"
    shutil.copytree(DOCS, root / "docs")
    shutil.copy(REPO_ROOT / "mkdocs.yml", root / "mkdocs.yml")
    with open(root / "docs" / "glossary.md", "a", encoding="utf-8") as f:
        f.write("\n" + broken)
    done = _build(root, tmp_path / "site")
    assert done.returncode != 0 and "glossary.md" in done.stderr, done.stderr


def test_every_page_is_in_the_navigation():
    nav = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    missing = [p for p in pages if f": {p}" not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


def test_the_cli_reference_is_current():
    """docs/cli.md is generated from the parsers (scripts/cli_reference.py): a flag added,
    renamed or re-described without regenerating it fails here."""
    from moeroof.cli.app import COMMAND_MODULES
    from moeroof.cli.reference import reference_markdown

    fresh = reference_markdown()
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == fresh, "run: python scripts/cli_reference.py"
    for name, _module in COMMAND_MODULES:
        assert f"\n## moeroof {name}\n" in fresh, name


def test_the_readme_is_short_and_points_into_the_docs():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert "make report" in readme and "make test" in readme
    linked = set(re.findall(r"\]\(docs/([a-z-]+\.md)\)", readme))
    pages = {p.name for p in DOCS.glob("*.md")}
    assert linked <= pages, f"README links to missing pages: {linked - pages}"
    assert pages - {"index.md"} <= linked, f"pages the README does not point to: {pages - linked - {'index.md'}}"


def test_the_reference_is_the_same_wherever_the_clone_lies():
    """A default inside the clone (the notebooks folder) is written relative to it before the
    help is wrapped: the page does not depend on where the repository was cloned."""
    import argparse

    from moeroof.cli.reference import relative_defaults

    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--where", default=str(REPO_ROOT / "notebooks"), help="a folder (default: %(default)s)")
    relative_defaults(parser)
    text = parser.format_help()
    assert "./notebooks" in text and str(REPO_ROOT) not in text
    assert str(REPO_ROOT) not in (DOCS / "cli.md").read_text(encoding="utf-8")
