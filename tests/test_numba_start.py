"""moeroof.core.numba_start: numba's registries load without the BLAS probe's scipy.linalg."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("numba")

PROBE = """
import sys
import numpy as np
from moeroof.core.numba_start import skip_blas_probe
assert skip_blas_probe() is True
assert "scipy.linalg" not in sys.modules  # the probe did not load it
assert skip_blas_probe() is False  # once per process
from moeroof.models.cache import simulate, Requests
from moeroof.models import cache_kernels as ck
off = ck.offsets_from_starts(np.array([True, False, True, True]))
assert off.tolist() == [0, 2, 3, 4], off
import scipy.linalg  # still importable afterwards
assert scipy.linalg.solve(np.eye(2), np.ones(2)).tolist() == [1.0, 1.0]
print("ok")
"""


def test_kernels_run_and_scipy_linalg_still_imports_after_the_skipped_probe():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_nothing_is_skipped_once_scipy_linalg_is_loaded():
    code = "import scipy.linalg; from moeroof.core.numba_start import skip_blas_probe; print(skip_blas_probe())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False", out.stderr
