"""Numba's start-up without its BLAS probe, for the command line's short runs.

The first compiled call in a process makes numba load its typing registries, and one of them
(``numba.np.arraymath``) probes for BLAS by importing ``scipy.linalg.cython_blas`` — which pulls
in all of ``scipy.linalg``: ~0.2 s of a ``moeroof cache`` or ``mrc`` run on a 10^6-request trace
that itself simulates in a tenth of that (whole commands timed against libCacheSim). The
suite's kernels use no BLAS (no ``np.dot``, no ``np.linalg``), so :func:`skip_blas_probe` lets
the probe fail fast: it hides that one module while numba loads its registries, then un-hides
it, so ``scipy.linalg`` still imports normally afterwards.

The cost: numba in this process believes it has no BLAS, and a later kernel that calls
``np.dot`` or ``np.linalg`` would fail to compile. The command line calls this only in commands
whose compiled work is the suite's own kernels; the library never calls it (a notebook or a
user's script keeps numba as it is).
"""

from __future__ import annotations

import sys

__all__ = ["skip_blas_probe"]

_PROBED = "scipy.linalg.cython_blas"


def skip_blas_probe() -> bool:
    """Load numba's CPU registries with the BLAS probe failing fast; True when it was skipped.

    Does nothing (False) when ``scipy.linalg`` is already loaded (the probe is then cheap) or
    numba's registries are already loaded (the probe already ran)."""
    if _PROBED in sys.modules or "numba.np.arraymath" in sys.modules:
        return False
    sys.modules[_PROBED] = None  # type: ignore[assignment]  # "import" of it raises ImportError
    try:
        from numba.core.registry import cpu_target

        cpu_target.target_context.refresh()  # loads numba.np.arraymath, whose probe fails at once
    finally:
        del sys.modules[_PROBED]
    return True
