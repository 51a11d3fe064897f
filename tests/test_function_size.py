"""A ratchet on function length in lib/: no function over :data:`MAX_LINES` lines but those
:data:`OVER` lists, with their lengths, and those may only shrink. A function split below the cap
must leave the list (a stale entry fails too), so the list only shortens: of the 61 over the cap
on 2026-12-04 none is left (the last, ``fit/plan.py::_fit_one``, was split on 2026-12-06), and the
list is empty. Complexity has its cap in pyproject.toml (ruff's C901, max-complexity 15, with no
``# noqa: C901`` left in lib/)."""

from __future__ import annotations

import ast
from pathlib import Path

from moeroof.core.paths import REPO_ROOT

MAX_LINES = 80
LIB = REPO_ROOT / "lib" / "moeroof"


def function_lengths(root: Path = LIB) -> dict[str, int]:
    """``path::Outer.inner`` → lines (decorators excluded) of every function under ``root``."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, path: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                if not isinstance(child, ast.ClassDef):
                    out[f"{path}::{name}"] = child.end_lineno - child.lineno + 1
                visit(child, name, path)
            else:
                visit(child, prefix, path)

    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(REPO_ROOT if file.is_relative_to(REPO_ROOT) else root)
        visit(ast.parse(file.read_text(encoding="utf-8")), "", rel.as_posix())
    return out


OVER: dict[str, int] = {}


def test_no_function_grows_past_the_cap():
    over = {k: n for k, n in function_lengths().items() if n > MAX_LINES}
    new = sorted(k for k in over if k not in OVER)
    grown = sorted(f"{k}: {over[k]} > {OVER[k]}" for k in over if k in OVER and over[k] > OVER[k])
    stale = sorted(k for k in OVER if k not in over)
    assert not new, f"new functions over {MAX_LINES} lines (split them): {new}"
    assert not grown, f"functions over the cap grew: {grown}"
    assert not stale, f"now under the cap or gone: remove from OVER: {stale}"


def test_the_ratchet_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES + 5))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    return 1\n")
    lengths = {k.split("::")[1]: n for k, n in function_lengths(tmp_path).items()}
    assert lengths["long"] == MAX_LINES + 6 and lengths["short"] == 2
