"""core.memo: results kept between runs, salted by the source that computes them; and the
step model reading its steady-state simulations back without simulating again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from moeroof.core import memo as disk_memo
from moeroof.core.memo import DiskMemo, source_salt


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_memo.ENV, str(tmp_path / "memo"))
    return tmp_path / "memo"


def test_round_trip_and_misses(root, tmp_path):
    memo = DiskMemo("t", "salt1")
    assert memo.get(("a", 1, 2.5)) is None
    memo.put(("a", 1, 2.5), [0.25, 0.5])
    assert DiskMemo("t", "salt1").get(("a", 1, 2.5)) == [0.25, 0.5]  # another instance: from disk
    assert DiskMemo("t", "salt2").get(("a", 1, 2.5)) is None  # another salt: the code changed
    assert memo.get(("a", 1, 2.6)) is None
    (entry,) = list((root / "t" / "salt1").glob("*.json"))
    assert json.loads(entry.read_text())["key"] == repr(("a", 1, 2.5))
    entry.write_text('{"key": "something else", "value": [1]}')  # a collision reads as a miss
    assert memo.get(("a", 1, 2.5)) is None
    entry.write_text("{not json")  # so does a damaged file
    assert memo.get(("a", 1, 2.5)) is None
    memo.put(("a", 1, 2.5), [0.75])
    assert memo.get(("a", 1, 2.5)) == [0.75]


def test_entries_are_not_fsynced_and_an_empty_one_is_a_miss(root, monkeypatch):
    # a render writes ~1000 entries: no fsync each (a power cut may leave an empty file: a miss)
    def no_fsync(fd):
        raise AssertionError("the disk memo fsynced an entry")

    monkeypatch.setattr(os, "fsync", no_fsync)
    memo = DiskMemo("t", "salt1")
    memo.put("k", 1.5)
    assert DiskMemo("t", "salt1").get("k") == 1.5
    (entry,) = list((root / "t" / "salt1").glob("*.json"))
    entry.write_text("")
    assert memo.get("k") is None


def test_empty_setting_turns_it_off_and_an_unwritable_folder_is_silent(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_memo.ENV, "")
    memo = DiskMemo("t", "s")
    memo.put("k", [1.0])
    assert memo.get("k") is None and disk_memo.memo_root() is None
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(disk_memo.ENV, str(blocker / "below-a-file"))
    memo = DiskMemo("t", "s")
    memo.put("k", [1.0])  # cannot create the folder: no error, nothing kept
    assert memo.get("k") is None


def test_salt_follows_the_source_bytes(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    a = source_salt([f], "numpy 2")
    assert source_salt([f], "numpy 2") == a and source_salt([f], "numpy 3") != a
    f.write_text("x = 2\n")
    assert source_salt([f], "numpy 2") != a


RUN = """
import json, sys
import numpy as np
from moeroof.models.expert_cache import steady_state_miss_ratio
w = np.arange(1, 65) ** -0.5
pi = (4 * w / w.sum())[None, :]  # inclusion probabilities summing to K = 4, all below 1
out = [steady_state_miss_ratio(pi, b, 12.0, policy=p) for b in (1, 8) for p in ("lru", "arc")]
print(json.dumps({"out": out, "simulated": "moeroof.kernels.cache" in sys.modules}))
"""


def test_a_second_process_reads_the_simulation_back_without_simulating(root):
    env = {**os.environ, disk_memo.ENV: str(root)}

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    first, second = run(), run()
    assert first["simulated"] and not second["simulated"]
    assert first["out"] == second["out"]
    assert len(list(root.glob("steady-state/*/*.json"))) == 4


def test_a_new_salt_keeps_only_the_newest_folders(root):
    """Each edit or upgrade makes a new salt folder; opening one deletes all but the
    KEEP_SALTS - 1 most recently written others, so the memo does not grow without end."""
    import time

    old = [disk_memo.DiskMemo("m", f"salt{i}") for i in range(6)]
    for i, memo in enumerate(old):
        memo.put(("k",), i)
        stamp = time.time() - 1000 + 100 * i  # salt5 written last
        os.utime(memo.folder, (stamp, stamp))
    new = disk_memo.DiskMemo("m", "fresh")
    new.put(("k",), 99)
    kept = sorted(p.name for p in new.folder.parent.iterdir())
    newest = [f"salt{i}" for i in range(6)][-(disk_memo.KEEP_SALTS - 1) :]
    assert kept == sorted(["fresh", *newest])
    assert new.get(("k",)) == 99 and disk_memo.DiskMemo("m", "salt5").get(("k",)) == 5
    assert disk_memo.DiskMemo("m", "salt0").get(("k",)) is None  # deleted: a miss, not an error
    other = disk_memo.DiskMemo("other", "x")  # another memo's folders are its own
    other.put(("k",), 1)
    assert sorted(p.name for p in new.folder.parent.iterdir()) == sorted(["fresh", *newest])


def test_salts_cover_the_c_kernels_the_simulations_run(root):
    """The simulations run C (kernels/native/*.c) where it builds: an edit to a C kernel must
    miss the memo as an edit to a Python one does, in both memos (the step model's and the fits')."""
    from pathlib import Path

    from moeroof.core.memo import source_files
    from moeroof.kernels import cache as cache_kernels
    from moeroof.models import expert_cache

    c_sources = {p.name for p in Path(cache_kernels.__file__).parent.joinpath("native").glob("*.[ch]")}
    assert {"lru.c", "policies.c", "stream.c", "cache.h"} <= c_sources
    assert c_sources <= {p.name for p in source_files(["kernels/"])}
    assert c_sources <= {p.name for p in expert_cache.steady_state_sources()}
