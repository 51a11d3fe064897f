"""Compiled kernel behind :func:`moeroof.models.union.power_sums`: C (``kernels/native/union.c``,
compiled at install, :mod:`moeroof.kernels.loader`), called here through :mod:`ctypes`.

:func:`product_sums` returns numpy's bits for the expression it replaces (the same products,
added in numpy's pairwise order; tests/test_kernels_union.py holds it to numpy), without the
product array. There is no fallback: without the C library a call raises
:class:`moeroof.kernels.loader.NativeBuildError`, saying why.
"""

from __future__ import annotations

import functools

import numpy as np

from moeroof.kernels import loader

__all__ = ["library", "product_sums"]

#: argument codes of each C function and its result's (:func:`moeroof.kernels.loader.typed`)
_SIGNATURES = {"mr_product_sums": ("PPPIIIP", None)}


#: the loaded C library, the union's function typed (:class:`moeroof.kernels.loader.NativeBuildError` when it is not
#: built, or built from other sources); loaded once a process
library = functools.cache(functools.partial(loader.typed, _SIGNATURES))


def product_sums(head: np.ndarray, tails: np.ndarray, tail_rows: np.ndarray) -> np.ndarray:
    """``np.stack([(head * tails[t]).sum(axis=-1) for t in tail_rows])``: (n, M) from ``head``
    (M, E), ``tails`` (T, M, E) and ``tail_rows`` (n,) indices into ``tails``, each sum over E in
    numpy's pairwise order from 0, so equal to numpy's bit for bit for products that are not
    negative (a zero's sign may differ otherwise)."""
    head = np.ascontiguousarray(head, dtype=np.float64)
    tails = np.ascontiguousarray(tails, dtype=np.float64)
    rows = np.ascontiguousarray(tail_rows, dtype=np.int64)
    if head.ndim != 2 or tails.ndim != 3 or tails.shape[1:] != head.shape or rows.ndim != 1:
        raise ValueError(
            f"product_sums: head (M, E), tails (T, M, E), rows (n,); got {head.shape}, {tails.shape}, {rows.shape}"
        )
    if rows.size and (rows.min() < 0 or rows.max() >= tails.shape[0]):
        raise IndexError(f"product_sums: a tail row outside [0, {tails.shape[0]})")
    out = np.empty((rows.size, head.shape[0]))
    library().mr_product_sums(
        head.ctypes.data, tails.ctypes.data, rows.ctypes.data, rows.size, head.shape[0], head.shape[1], out.ctypes.data
    )
    return out
