"""The command-line reference page (``docs/cli.md``), generated from the parsers themselves.

``python scripts/cli_reference.py`` rewrites the page; ``tests/test_docs.py`` holds the committed
page to a fresh generation, so a flag added or changed shows in the docs or the test fails.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from moeroof.cli.app import build_parser
from moeroof.core.paths import REPO_ROOT

__all__ = ["WIDTH", "reference_markdown", "relative_defaults"]

#: the width the help text is wrapped to (argparse reads it from $COLUMNS)
WIDTH = 100

HEADER = """# Command-line reference

Generated from the parsers (`python scripts/cli_reference.py`; `tests/test_docs.py` checks that this
page is current). Every command reads its inputs, never modifies them, and writes its outputs whole
or not at all; bad input ends with one `error:` line naming the file, the row and the field, and exit
status 2 ([what the command line promises](robustness.md)). For the commands by task, with worked
examples, see [the command line, by task](commands.md).
"""


def _subcommands(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(name, parser)`` of every command under ``parser``, depth first, in declaration order."""
    for action in parser._actions:  # argparse keeps its subparsers here and nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix} {name}"
                yield full, sub
                yield from _subcommands(sub, full)


def relative_defaults(parser: argparse.ArgumentParser) -> None:
    """Defaults and help inside this clone written relative to it, before the help is wrapped
    (a longer path would wrap the lines elsewhere)."""
    root = str(REPO_ROOT)
    for action in parser._actions:
        if isinstance(action.default, (str, os.PathLike)) and root in str(action.default):
            action.default = str(action.default).replace(root, ".")
        if isinstance(action.help, str) and root in action.help:
            action.help = action.help.replace(root, ".")


def reference_markdown() -> str:
    """The whole page: the top-level help, then each command's, each in a code block; a default
    inside this clone is written relative to it (``./notebooks``), so the page is one page on
    every machine."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        top = build_parser()
        relative_defaults(top)
        parts = [HEADER, "## moeroof\n", "```text\n" + top.format_help().rstrip() + "\n```\n"]
        for name, sub in _subcommands(top, "moeroof"):
            relative_defaults(sub)
            parts.append(f"## {name}\n")
            parts.append("```text\n" + sub.format_help().rstrip() + "\n```\n")
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(parts)
