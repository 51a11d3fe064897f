"""environment.yml (conda users) must agree with pyproject.toml (pip users, CI).

Two dependency lists drift apart silently: a package added to pyproject for a notebook works in
CI and fails for the conda user. This test parses both and checks names and the Python version.
YAML is parsed by hand (the file is a flat list) so the test needs no extra dependency.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from moeroof.core.paths import REPO_ROOT

PYPROJECT = REPO_ROOT / "pyproject.toml"
ENVIRONMENT = REPO_ROOT / "environment.yml"
#: extras the suite installs (`pip install -e '.[notebooks,test,capture,docs,sweep,parquet]'`, as the Makefile does)
EXTRAS = ("notebooks", "test", "capture", "docs", "sweep", "parquet")


def test_the_makefile_installs_every_extra():
    makefile = (PYPROJECT.parent / "Makefile").read_text(encoding="utf-8")
    assert f"-e '.[{','.join(EXTRAS)}]'" in makefile
    assert f"-c constraints.txt -e '.[{','.join(EXTRAS)}]'" in makefile, "installs the pinned versions"


CONSTRAINTS = REPO_ROOT / "constraints.txt"


def constraints() -> dict[str, str]:
    """constraints.txt as {canonical name: pinned version}; each line pins with ==."""
    pins = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"constraints.txt: {line!r} does not pin one version (NAME==VERSION)"
        pins[canonical(name)] = version
    return pins


def test_every_dependency_is_pinned_and_installed_at_its_pin(pyproject):
    """A fresh install resolves the same versions: every dependency and extra is pinned, and the
    venv the tests run in has exactly those versions (local labels such as +cpu aside)."""
    from importlib.metadata import PackageNotFoundError, version

    pins = constraints()
    wanted = list(pyproject["project"]["dependencies"])
    for extra in EXTRAS:
        wanted += pyproject["project"]["optional-dependencies"][extra]
    missing = sorted({requirement_name(r) for r in wanted} - set(pins))
    assert not missing, f"not pinned in constraints.txt: {missing}"
    wrong = []
    for name, pinned in pins.items():
        try:
            have = version(name).split("+", 1)[0]
        except PackageNotFoundError:
            continue  # a platform-only dependency of another machine's resolution
        if have != pinned:
            wrong.append(f"{name} {have} (pinned {pinned})")
    assert not wrong, f"installed versions differ from constraints.txt: {wrong}"


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """PEP 503 normalisation, so `Foo_Bar` and `foo-bar` compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """Distribution name of a PEP 508 / conda match spec (`numpy>=1.26`, `python=3.11`)."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"cannot read a package name from {requirement!r}")
    return canonical(match.group(1))


def conda_dependencies(text: str) -> tuple[list[str], list[str]]:
    """(conda specs, pip specs) from the `dependencies:` list of a simple environment.yml.

    Handles the flat form only: `- spec` items, and one nested `- pip:` list of `- spec` items.
    """
    conda, pip = [], []
    in_deps, in_pip, pip_indent = False, False, 0
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if indent == 0:
            in_deps, in_pip = stripped == "dependencies:", False
            continue
        if not in_deps or not stripped.startswith("- "):
            continue
        item = stripped[2:].strip()
        if in_pip and indent > pip_indent:
            pip.append(item)
            continue
        in_pip = False
        if item == "pip:":
            in_pip, pip_indent = True, indent
        else:
            conda.append(item)
    return conda, pip


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def environment() -> tuple[list[str], list[str]]:
    return conda_dependencies(ENVIRONMENT.read_text(encoding="utf-8"))


def test_every_pyproject_dependency_is_in_environment_yml(pyproject, environment):
    project = pyproject["project"]
    required = list(project["dependencies"])
    for extra in EXTRAS:
        required += project["optional-dependencies"][extra]
    conda, pip = environment
    listed = {requirement_name(spec) for spec in conda + pip if not spec.startswith("-")}
    missing = sorted({requirement_name(r) for r in required} - listed)
    assert not missing, f"in pyproject.toml but not environment.yml: {missing}"


def test_environment_installs_the_package_editable(environment):
    _, pip = environment
    assert "-e ." in pip


def test_environment_brings_the_c_compiler_the_install_needs(environment):
    # setup.py compiles the kernels; conda's python does not bring a compiler
    conda, _ = environment
    assert "c-compiler" in {requirement_name(spec) for spec in conda}


def major_minor(spec: str) -> tuple[int, int]:
    """First `X.Y` in a version spec (`python=3.11`, `>=3.11`)."""
    match = re.search(r"(\d+)\.(\d+)", spec)
    if match is None:
        raise ValueError(f"no X.Y version in {spec!r}")
    return int(match.group(1)), int(match.group(2))


def test_python_versions_agree(pyproject, environment):
    """Conda pins the minimum Python pyproject allows: the oldest supported version is the one tested."""
    conda, _ = environment
    pins = [spec for spec in conda if requirement_name(spec) == "python"]
    assert len(pins) == 1, "environment.yml must pin python once"
    requires = pyproject["project"]["requires-python"]
    assert requires.strip().startswith(">="), f"requires-python should state a minimum, got {requires!r}"
    assert major_minor(pins[0]) == major_minor(requires), f"environment.yml {pins[0]} vs requires-python {requires}"


def test_parser_reads_nested_pip_list():
    text = "name: x\ndependencies:\n  - python=3.11\n  - numpy>=1.26  # comment\n  - pip:\n      - -e .\n      - foo\n  - bar\n"
    assert conda_dependencies(text) == (["python=3.11", "numpy>=1.26", "bar"], ["-e .", "foo"])
