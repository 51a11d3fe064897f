"""core.native: the C kernels are built once per source hash, reused by the next process, and a
machine without a compiler (or MOEROOF_NATIVE=0) runs the numba kernels with the same results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moeroof.core import native

# a process that simulates every policy and reports which kernels ran and whether numba loaded
_PROBE = (
    "import json, sys, numpy as np; from moeroof.models import cache, cache_native; "
    "from moeroof.core import native; "
    "r = cache.requests_from_trace(np.array([[[[0, 1]]], [[[1, 2]]], [[[2, 0]]]]), 4); "
    "hits = [cache.simulate(r, 2, policy=p).hits for p in cache.POLICIES]; "
    "curve = cache.lru_hit_curve(r)[1].tolist(); "
    "print(json.dumps({'hits': hits, 'curve': curve, 'numba': 'numba' in sys.modules, "
    "'c': cache_native.library() is not None, 'status': native.status('moeroof_cache')}))"
)


def _probe(env: dict[str, str]) -> dict:
    full = {**os.environ, **env}
    done = subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on PATH")


@needs_cc
@pytest.mark.slow
def test_built_once_then_loaded_by_the_next_process_without_numba(tmp_path):
    env = {"MOEROOF_CACHE_DIR": str(tmp_path / "cache"), "MOEROOF_NATIVE": ""}
    first = _probe(env)
    assert first["c"] and not first["numba"]  # every policy simulated, numba never imported
    libs = list((tmp_path / "cache" / "native").glob("libmoeroof_cache-*.so"))
    assert len(libs) == 1 and first["status"] == str(libs[0])
    stamp = libs[0].stat().st_mtime_ns
    second = _probe(env)
    assert second == first
    assert libs[0].stat().st_mtime_ns == stamp  # loaded, not rebuilt
    assert not [p for p in (tmp_path / "cache" / "native").iterdir() if p.name.startswith(".")]  # no temp left


@pytest.mark.slow
def test_without_a_compiler_the_numba_kernels_give_the_same_numbers(tmp_path):
    env = {"MOEROOF_CACHE_DIR": str(tmp_path / "cache"), "MOEROOF_NATIVE": "", "CC": "no-such-compiler-here"}
    fallback = _probe({**env, "PATH": str(tmp_path)})  # no cc, gcc or clang either
    assert not fallback["c"] and fallback["numba"]
    assert "no C compiler" in fallback["status"]
    off = _probe({"MOEROOF_CACHE_DIR": str(tmp_path / "cache2"), "MOEROOF_NATIVE": "0"})
    assert not off["c"] and "MOEROOF_NATIVE=0" in off["status"]
    assert off["hits"] == fallback["hits"] and off["curve"] == fallback["curve"]
    if shutil.which("cc"):
        built = _probe({"MOEROOF_CACHE_DIR": str(tmp_path / "cache3"), "MOEROOF_NATIVE": ""})
        assert built["c"] and built["hits"] == off["hits"] and built["curve"] == off["curve"]


def test_a_failed_build_falls_back_or_raises_when_required(tmp_path, monkeypatch):
    src = tmp_path / "bad.c"
    src.write_text("this is not C;\n")
    monkeypatch.setenv("MOEROOF_CACHE_DIR", str(tmp_path / "cache"))
    if shutil.which("cc") is None:
        pytest.skip("no C compiler on PATH")
    monkeypatch.setenv(native.ENV, "")
    assert native.build("bad", [src], []) is None
    assert "failed" in native.status("bad")
    monkeypatch.setenv(native.ENV, "1")
    with pytest.raises(native.NativeBuildError, match="bad"):
        native.build("bad", [src], [])
    assert not list((tmp_path / "cache" / "native").glob("*.so"))  # nothing half-written left


@needs_cc
def test_an_edit_builds_a_new_library(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEROOF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(native.ENV, "")
    src = tmp_path / "k.c"
    src.write_text("int answer(void) { return 41; }\n")
    assert native.build("k", [src], []).answer() == 41
    src.write_text("int answer(void) { return 42; }\n")
    assert native.build("k", [src], []).answer() == 42
    assert len(list((tmp_path / "cache" / "native").glob("libk-*.so"))) == 2


@needs_cc
@pytest.mark.slow
def test_processes_starting_together_build_once(tmp_path):
    # a report renders notebooks side by side: the first builds, the others wait and load
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "cc-logged"
    wrapper.write_text(f'#!/bin/sh\necho built >> "{log}"\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "MOEROOF_CACHE_DIR": str(tmp_path / "cache"), "MOEROOF_NATIVE": "1", "CC": str(wrapper)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _PROBE], env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(o["c"] and o["hits"] == outs[0]["hits"] for o in outs)
    assert log.read_text().count("built") == 1
    assert [p.name for p in (tmp_path / "cache" / "native").iterdir()] == [Path(outs[0]["status"]).name]
