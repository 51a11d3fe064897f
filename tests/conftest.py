"""Shared test fixtures: seeded generators and the path to the captured external data."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from moeroof.core.memo import ENV as DISK_MEMO_ENV
from moeroof.core.paths import EXTERNAL_DIR

# the step model keeps its simulations on disk between runs (core.memo): the suite's own
# runs keep theirs in a folder of this run's (kernels and workers inherit it), never the user's
os.environ[DISK_MEMO_ENV] = tempfile.mkdtemp(prefix="moeroof-test-memo-")
# a notebook cell in a test runs seconds (the slowest whole test render takes ~13 s on a loaded
# 2-core box): past 90 s its kernel has stopped answering (idle kernel, waiting client; seen with
# ipykernel 6 and 7, once in a full run on 2026-12-06 where it cost the 300 s then allowed), and
# the render is retried once in a fresh kernel
os.environ.setdefault("MOEROOF_CELL_TIMEOUT_S", "90")
# a kernel idle mid-cell (that hang: no CPU in its process tree) is stopped and retried sooner by
# the idle-kernel watch (moeroof.present.kernel_watch); a working cell always uses CPU
os.environ.setdefault("MOEROOF_IDLE_KERNEL_S", "45")

# hypothesis draws the same examples on every run (fixed seeds, as the suite's other randomness):
# a CI run can only fail on a change, never on a new draw. MOEROOF_HYPOTHESIS_RANDOM=1 explores
# fresh examples (and the local example database replays what it finds).
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass
else:
    _explore = os.environ.get("MOEROOF_HYPOTHESIS_RANDOM") == "1"
    _hypothesis_settings.register_profile("moeroof", derandomize=not _explore)
    _hypothesis_settings.load_profile("moeroof")


def seeded(name: str) -> np.random.Generator:
    """A generator derived from a name, so each test's randomness is fixed and independent."""
    return np.random.default_rng(sum(map(ord, name)))


@pytest.fixture
def rng(request) -> np.random.Generator:
    return seeded(request.node.name)


def external(relpath: str):
    """Path into ../shared/data/external, skipping the test when the folder is absent."""
    path = EXTERNAL_DIR / relpath
    if not path.exists():
        pytest.skip(f"captured data not present at {path} (a clone without ../shared)")
    return path
