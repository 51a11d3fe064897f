#!/usr/bin/env python
"""How many lines of code the library holds (its weight), counted without what documents it.

A line counts when it holds a token of code: blank lines, comment lines and the lines of
docstrings (a module's, class's or function's first statement, when it is a string) do not.
Prints the largest files and the total for a folder (default ``lib``); ``--raw`` adds the plain
line counts (``wc -l``) beside them.

``.venv/bin/python scripts/code_lines.py`` (the library), ``… scripts/code_lines.py lib/moeroof/cli``.
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from pathlib import Path

#: token types that are layout, not code
_LAYOUT = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers of every docstring in ``tree``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    out.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return out


def code_lines(path: Path) -> int:
    """Lines of ``path`` that hold a code token, docstrings aside."""
    src = path.read_text(encoding="utf-8")
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in _LAYOUT:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstring_lines(ast.parse(src)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default="lib", help="the folder to count (default lib)")
    ap.add_argument("--top", type=int, default=20, help="how many of the largest files to list (default 20)")
    ap.add_argument("--raw", action="store_true", help="also the plain line count of each file")
    args = ap.parse_args(argv)
    files = sorted(Path(args.folder).rglob("*.py"))
    counts = [(code_lines(p), len(p.read_text(encoding="utf-8").splitlines()), p) for p in files]
    for code, raw, p in sorted(counts, key=lambda c: c[0])[-args.top :]:
        print(f"{code:6d}" + (f" {raw:6d}" if args.raw else "") + f"  {p}")
    total = sum(c for c, _, _ in counts)
    raw_total = sum(r for _, r, _ in counts)
    print(f"{total:6d}" + (f" {raw_total:6d}" if args.raw else "") + f"  total ({len(files)} files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
