"""kernels.loader: the C kernels are compiled at install (setup.py) into one extension, loaded by
ctypes only while it was built from the sources beside it; a missing or stale library is an
error that says what rebuilds it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moeroof.kernels import loader
from moeroof.kernels.sources import native_files, sources_hash

# a process that simulates every policy and reports where its kernels came from
_PROBE = (
    "import json, sys, numpy as np; from moeroof import cachesim as cache; "
    "from moeroof.kernels import loader; "
    "r = cache.requests_from_trace(np.array([[[[0, 1]]], [[[1, 2]]], [[[2, 0]]]]), 4); "
    "hits = [cache.simulate(r, 2, policy=p).hits for p in cache.POLICIES]; "
    "curve = cache.lru_hit_curve(r)[1].tolist(); "
    "print(json.dumps({'hits': hits, 'curve': curve, 'status': loader.status()}))"
)
SOURCES = Path(loader.__file__).resolve().parent / "native"


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_install_built_the_kernels_from_these_sources_and_a_process_loads_them():
    spec = importlib.util.find_spec(loader.MODULE)
    assert spec is not None and spec.origin is not None, "the install did not build the C kernels"
    got = _probe({})
    assert got["status"] == spec.origin
    # 0 1 | 1 2 | 2 0, one lookup per step: three of six requests are repeats, so an unbounded
    # LRU hits half, and every policy's cache of 2 hits at least one
    assert all(h >= 1 for h in got["hits"]) and got["curve"][-1] == 3 / 6
    # nothing is compiled at run time: no library anywhere but the extension's own file
    assert not list(Path(spec.origin).parent.glob("lib*.so"))


def test_a_library_built_from_other_sources_is_never_used(tmp_path):
    """An editable install whose C was edited since its build: the hash the library carries is
    not that of the sources, so it is refused, saying what rebuilds it."""
    edited = tmp_path / "native"
    shutil.copytree(SOURCES, edited)
    assert sources_hash(edited) == sources_hash(SOURCES)
    assert loader.load(sources=edited) is not None  # the same sources: loaded
    src = edited / "lru.c"
    src.write_text(src.read_text() + "\n/* an edit */\n")
    other = tmp_path / "other"
    shutil.copytree(edited, other)
    with pytest.raises(loader.NativeBuildError, match="stale.*make"):
        loader.load(sources=other)
    assert "stale" in loader.status(sources=other)


def test_a_missing_extension_is_an_error():
    with pytest.raises(loader.NativeBuildError, match="not built"):
        loader.load("moeroof.kernels._no_such_kernels")
    assert "not built" in loader.status("moeroof.kernels._no_such_kernels")


def test_the_hash_covers_every_source_and_header_and_changes_with_any_byte(tmp_path):
    files = native_files(SOURCES)
    assert {f.suffix for f in files} == {".c", ".h"} and any(f.name == "module.c" for f in files)
    copy = tmp_path / "n"
    shutil.copytree(SOURCES, copy)
    before = sources_hash(copy)
    for f in native_files(copy):
        data = f.read_bytes()
        f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        assert sources_hash(copy) != before, f.name
        f.write_bytes(data)
    assert sources_hash(copy) == before
