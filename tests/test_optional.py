"""The base install (no extras) runs the core commands; a command that needs an optional package
says which extra installs it, in one error line with exit status 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from moeroof.core.errors import MissingDependency
from moeroof.core.optional import require
from moeroof.core.paths import DATA_DIR, REPO_ROOT

#: run the CLI as if dask, distributed and pyarrow were not installed (the base install)
_WITHOUT_EXTRAS = """
import importlib.abc, sys
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dask", "distributed", "pyarrow"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
from moeroof.cli.app import main
code = main(sys.argv[1:])
assert not any(m.split(".")[0] in ("dask", "distributed", "pyarrow") for m in sys.modules), "imported"
sys.exit(code)
"""


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, *argv], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300
    )


def test_require_names_the_extra():
    with pytest.raises(MissingDependency, match=r"pip install 'moeroof\[sweep\]'") as err:
        require("no_such_package_here.sub", "sweep", "moeroof sweep")
    assert "no_such_package_here" in str(err.value) and "moeroof sweep" in str(err.value)
    assert require("math", "sweep", "x").sqrt(4.0) == 2.0


@pytest.mark.parametrize(
    "argv",
    [
        ("union", "--uniform", "256", "8", "--batch", "1,8,64", "--json"),
        ("fit", str(DATA_DIR / "histograms" / "deepseek-v3-like.csv"), "--json"),
        ("plan", "--model", "qwen3-30b-a3b", "--hardware", "nvme-gen4", "--batch", "1,8", "--independent", "--json"),
        ("cache", str(DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz"), "--policy", "lru", "--capacity-experts", "3000"),
    ],
    ids=["union", "fit", "plan", "cache"],
)
def test_the_core_commands_run_without_the_extras(argv):
    done = _run(*argv)
    assert done.returncode == 0, done.stderr


def test_sweep_without_dask_says_which_extra(tmp_path):
    grid = sorted((DATA_DIR / "sweeps").glob("*.toml"))[0]
    done = _run("sweep", str(grid), "-o", str(tmp_path / "out.parquet"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "moeroof[sweep]" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out.parquet").exists()
