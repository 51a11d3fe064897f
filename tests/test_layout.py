"""The package layout keeps its rules: layers import downward, no cycles, no private names
across modules, no command-line flags in library errors.

Every module under ``lib/moeroof`` is parsed with :mod:`ast` (nothing is imported), and every
import statement counts, including the ones inside functions. The layers, lowest first:

    core ← kernels ← data ← cachesim ← models ← fit ← studies ← run ← measure ← present ← cli

(the package root ``moeroof/__init__.py`` counts as ``core``). A module imports only from its
own layer or a lower one; library modules never import ``moeroof.cli``.

Known exceptions live in files other people are rewriting; each is listed below with what
fixes it. :func:`test_known_exceptions_are_still_needed` reports (as a skip, so it never stops
someone else's quick loop) an entry whose fix has landed: delete it then, and the rule holds
there too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "lib"
TESTS = REPO / "tests"
SCRIPTS = REPO / "scripts"

LAYERS = ("core", "kernels", "data", "cachesim", "models", "fit", "studies", "run", "measure", "present", "cli")

#: (importing module or package, imported module, private name) that other owners still have
#: to fix; a package covers its submodules
KNOWN_PRIVATE: set[tuple[str, str, str]] = set()

#: (module, flag) raised by a library module; the library should name its parameter and
#: moeroof.cli translate it into the flag
KNOWN_FLAG_RAISES: set[tuple[str, str]] = set()

#: import edges (importer, imported) left out of the cycle check until their owners break the cycle
KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()

FLAG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def layer(self) -> int:
        parts = self.name.split(".")
        return LAYERS.index(parts[1]) if len(parts) > 1 else 0

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _parse(paths: list[Path], root: Path) -> list[Module]:
    return [Module(_module_name(p, root), p, ast.parse(p.read_text(encoding="utf-8"), str(p))) for p in paths]


LIBRARY = _parse(sorted((LIB / "moeroof").rglob("*.py")), LIB)
NAMES = {m.name for m in LIBRARY}
CLIENTS = _parse(sorted(TESTS.glob("*.py")), REPO) + _parse(sorted(SCRIPTS.glob("*.py")), REPO)


@dataclass(frozen=True)
class Import:
    node: ast.AST
    target: str  # the moeroof module the statement reaches
    name: str | None  # the name imported from it (None: the module itself)


def _imports(mod: Module) -> Iterator[Import]:
    """Every import of a moeroof module in ``mod``, at any depth; ``from pkg import sub`` reaches
    the submodule ``pkg.sub`` when that is a module."""
    package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "moeroof":
                    yield Import(node, alias.name, None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "moeroof":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(node, sub, None) if sub in NAMES else Import(node, base, alias.name)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(mod: Module) -> Iterator[tuple[ast.AST, str, str]]:
    """(node, module, private name) for ``from moeroof.x import _name`` and ``alias._name``
    where ``alias`` is bound to another moeroof module."""
    aliases: dict[str, str] = {}
    for imp in _imports(mod):
        if imp.target == mod.name:
            continue
        if imp.name is not None and _is_private(imp.name):
            yield imp.node, imp.target, imp.name
        for alias in imp.node.names:
            if imp.name is None and isinstance(imp.node, ast.ImportFrom) and imp.target.endswith(f".{alias.name}"):
                aliases[alias.asname or alias.name] = imp.target
            elif isinstance(imp.node, ast.Import) and alias.asname and alias.name == imp.target:
                aliases[alias.asname] = imp.target
    for node in ast.walk(mod.tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _is_private(node.attr)
        ):
            yield node, aliases[node.value.id], node.attr
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            dotted = _dotted(node.value)
            if dotted in NAMES and dotted != mod.name:  # moeroof.x.y._name
                yield node, dotted, node.attr


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m.name: set() for m in LIBRARY}
    for mod in LIBRARY:
        for imp in _imports(mod):
            if imp.target in NAMES and imp.target != mod.name:
                graph[mod.name].add(imp.target)
    return graph


def _private_violations(modules: list[Module]) -> list[tuple[str, str, str, str]]:
    return [
        (mod.name, target, name, mod.where(node))
        for mod in modules
        for node, target, name in _private_uses(mod)
        if target != mod.name
    ]


def _known_private(violation: tuple[str, ...]) -> tuple[str, str, str] | None:
    """The :data:`KNOWN_PRIVATE` entry covering ``violation`` (module, target, name, …)."""
    mod, target, name = violation[:3]
    for entry in KNOWN_PRIVATE:
        owner, t, n = entry
        if (t, n) == (target, name) and (mod == owner or mod.startswith(owner + ".")):
            return entry
    return None


def _flag_raises() -> list[tuple[str, str, str]]:
    out = []
    for mod in LIBRARY:
        if mod.layer == LAYERS.index("cli"):
            continue
        for node in ast.walk(mod.tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            for const in ast.walk(node.exc):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    out += [(mod.name, flag, mod.where(node)) for flag in FLAG_RE.findall(const.value)]
    return out


# ----------------------------------------------------------------------------- the rules


def test_every_library_module_is_in_a_layer():
    assert len(LIBRARY) > 20
    stray = [m.name for m in LIBRARY if m.name != "moeroof" and m.name.split(".")[1] not in LAYERS]
    assert not stray, f"modules outside the layers {LAYERS}: {stray}"


def test_no_private_name_is_used_across_modules():
    found = _private_violations(LIBRARY + CLIENTS)
    new = [v for v in found if _known_private(v) is None]
    assert not new, "private names used outside their module (make them public, in __all__):\n" + "\n".join(
        f"  {where}: {mod} uses {target}.{name}" for mod, target, name, where in new
    )


def test_import_graph_has_no_cycle():
    graph = _graph()
    for importer, imported in KNOWN_CYCLE_EDGES:
        graph.get(importer, set()).discard(imported)
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_layers_import_only_downward():
    by_name = {m.name: m for m in LIBRARY}
    bad = []
    for mod in LIBRARY:
        for imp in _imports(mod):
            target = imp.target if imp.target in by_name else imp.target.rpartition(".")[0]
            if target in by_name and by_name[target].layer > mod.layer:
                what = imp.target + (f".{imp.name}" if imp.name else "")
                bad.append(
                    f"  {mod.where(imp.node)}: {mod.name} ({LAYERS[mod.layer]}) imports {what} "
                    f"({LAYERS[by_name[target].layer]})"
                )
    assert not bad, f"imports against the layer order {' <- '.join(LAYERS)}:\n" + "\n".join(bad)


def test_library_errors_name_no_command_line_flags():
    found = _flag_raises()
    new = [v for v in found if v[:2] not in KNOWN_FLAG_RAISES]
    assert not new, "library raises that name a CLI flag (name the parameter; the CLI maps it):\n" + "\n".join(
        f"  {where}: {mod} raises with {flag!r}" for mod, flag, where in new
    )


def test_known_exceptions_are_still_needed():
    private = {_known_private(v) for v in _private_violations(LIBRARY + CLIENTS)}
    flags = {v[:2] for v in _flag_raises()}
    graph = _graph()
    edges = {(a, b) for a, b in KNOWN_CYCLE_EDGES if b in graph.get(a, ())}
    stale = sorted(KNOWN_PRIVATE - private) + sorted(KNOWN_FLAG_RAISES - flags) + sorted(KNOWN_CYCLE_EDGES - edges)
    if stale:
        pytest.skip(f"fixed, so delete from tests/test_layout.py's known exceptions: {stale}")


# ----------------------------------------------------------------------------- the checker itself


def _fake(name: str, source: str) -> Module:
    rel = name.replace(".", "/") + ".py"
    return Module(name, LIB / rel, ast.parse(source))


def test_checker_sees_private_imports_and_attributes_inside_functions():
    mod = _fake(
        "moeroof.present.fake",
        "def f():\n"
        "    from moeroof.cachesim import _dense, lru_hit_curve\n"
        "    from moeroof.models import union\n"
        "    return union._chao_stats, lru_hit_curve, moeroof.fit.skew._thin\n",
    )
    found = {(t, n) for _, t, n in _private_uses(mod)}
    assert found == {
        ("moeroof.cachesim", "_dense"),
        ("moeroof.models.union", "_chao_stats"),
        ("moeroof.fit.skew", "_thin"),
    }


def test_checker_resolves_relative_imports_and_finds_flags_in_f_strings():
    mod = _fake("moeroof.models.fake", "from ..studies import ladder\nfrom .cache import simulate\n")
    assert {(i.target, i.name) for i in _imports(mod)} == {
        ("moeroof.studies.ladder", None),
        ("moeroof.models.cache", "simulate"),
    }
    raise_node = ast.parse('raise ValueError(f"--rank-speed: {x!r} is not a number, see --help")').body[0]
    flags = [f for c in ast.walk(raise_node.exc) if isinstance(c, ast.Constant) for f in FLAG_RE.findall(str(c.value))]
    assert flags == ["--rank-speed", "--help"]
