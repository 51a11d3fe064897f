"""A trace truncated while a command reads it is an error, never SIGBUS (once, ``histogram``
and ``fit`` on a > 512 MiB ``.npy`` cut short a second into the run died with status 135).

Each case runs in a child process (a SIGBUS would kill the test runner) with the module's
thresholds lowered, so a small file takes the path of a large one."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from moeroof.data import safe_read


def child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


def write_trace(tmp_path, steps=4000, streams=4, layers=4, k=2, experts=16):
    path = tmp_path / "t.npy"
    topk = np.random.default_rng(0).integers(0, experts, size=(steps, streams, layers, k), dtype=np.int32)
    topk.sort(axis=-1)
    topk[..., 1] = np.where(topk[..., 1] == topk[..., 0], (topk[..., 0] + 1) % experts, topk[..., 1])
    np.save(path, topk)
    path.with_suffix(".json").write_text(json.dumps({"model": "m", "source": "s", "experts": experts, "top_k": k}))
    return path, topk


def test_a_file_above_the_fixed_limit_is_copied_while_memory_allows(tmp_path):
    path, topk = write_trace(tmp_path)
    code = (
        "import os, sys\n"
        "from moeroof.data import safe_read\n"
        "safe_read.COPY_LIMIT_BYTES = 1  # the file is 'large'; the memory share still copies it\n"
        "a = safe_read.load_npy(sys.argv[1])\n"
        "assert type(a).__name__ == 'ndarray', type(a)\n"
        "os.truncate(sys.argv[1], 200)\n"
        "print(int(a.sum()))\n"
    )
    proc = child(code, str(path))
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # -7 would be SIGBUS
    assert int(proc.stdout) == int(topk.sum())


def test_histogram_counting_a_truncated_map_is_an_error(tmp_path):
    path, _ = write_trace(tmp_path)
    code = (
        "import os, sys\n"
        "from moeroof.data import safe_read\n"
        "from moeroof.models.routing import histogram_from_trace\n"
        "safe_read.COPY_LIMIT_BYTES, safe_read.COPY_MEMORY_SHARE = 1, 0.0  # map it\n"
        "a = safe_read.load_npy(sys.argv[1])\n"
        "assert type(a).__name__ == 'memmap'\n"
        "os.truncate(sys.argv[1], 4096)\n"
        "try:\n"
        "    histogram_from_trace(a, 16)\n"
        "except safe_read.TruncatedError as exc:\n"
        "    print('refused:', exc)\n"
    )
    proc = child(code, str(path))
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout.startswith("refused:") and "truncated while being read" in proc.stdout


@pytest.mark.parametrize("command", ["histogram", "fit"])
def test_commands_on_a_large_trace_truncated_after_opening_do_not_die(tmp_path, command):
    """The audit's commands with the fixed threshold lowered below the file: the trace is cut
    short as soon as it is open (another program rewriting it); the command finishes on what it
    read (status 0) or says so (status 2), and is never killed by SIGBUS (status -7)."""
    path, _ = write_trace(tmp_path)
    argv = (
        ["histogram", str(path), "-o", str(tmp_path / "h.csv"), "--force"]
        if command == "histogram"
        else ["fit", str(path), "--bootstrap", "2", "--gof-sims", "2"]
    )
    code = (
        "import os, sys\n"
        "from moeroof.data import io, safe_read\n"
        "safe_read.COPY_LIMIT_BYTES = 1  # the file is above the fixed limit, as the audit's 600 MB\n"
        "read = io.read_trace\n"
        "def read_then_cut(*a, **k):\n"
        "    tr = read(*a, **k)\n"
        "    os.truncate(sys.argv[1], 4096)\n"
        "    return tr\n"
        "io.read_trace = read_then_cut\n"
        "from moeroof.cli.app import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    proc = child(code, str(path))
    assert proc.returncode in (0, 2), (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr


def test_checked_blocks_cover_the_array_in_order(tmp_path):
    path, topk = write_trace(tmp_path, steps=37)
    mm = safe_read.load_npy(path, copy_limit=0)
    assert isinstance(mm, np.memmap)
    for arr in (mm, topk):
        blocks = list(safe_read.checked_blocks(arr, block_bytes=5 * 4 * 4 * 2 * 4))
        assert [s for s, _ in blocks] == list(range(0, 37, 5))
        assert all(not isinstance(b, np.memmap) for _, b in blocks)
        np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), topk)


def test_the_memory_share_default_is_bounded_by_available_memory(monkeypatch, tmp_path):
    path, _ = write_trace(tmp_path, steps=64)
    import moeroof.core.limits as limits

    monkeypatch.setattr(safe_read, "COPY_LIMIT_BYTES", 1)
    monkeypatch.setattr(limits, "available_memory", lambda: 1000)  # less than twice the data
    assert isinstance(safe_read.load_npy(path), np.memmap)
    monkeypatch.setattr(limits, "available_memory", lambda: 1 << 30)
    assert not isinstance(safe_read.load_npy(path), np.memmap)
