"""Compiled kernels behind :mod:`moeroof.models.partition` and :mod:`moeroof.models.expert_cache`:
C (``kernels/native/plan.c``, compiled at install, :mod:`moeroof.kernels.loader`), called here
through :mod:`ctypes`.

Each kernel replaces a numpy expression and returns the same bits: the same floating-point
operations, in the same order — the sums along an outer axis accumulate sequentially, as numpy's
reduction over an outer axis does (tests/test_kernels_plan.py checks each against the numpy it
replaced), except for a few signs of zero and NaN and the errors (each docstring says which). There
is no fallback: without the C library (not built, or built from other sources) a kernel raises
:class:`moeroof.kernels.loader.NativeBuildError`, saying why.
"""

from __future__ import annotations

import functools

import numpy as np

from moeroof.kernels import loader

__all__ = ["library", "gain_sums", "systematic_flat", "systematic_picks", "pick_counts"]

#: argument codes of each C function and its result's (:func:`moeroof.kernels.loader.typed`)
_SIGNATURES = {
    "mr_gain_sums": ("PPIIIP", None),
    "mr_systematic_flat": ("PIIPIIIIIP", "i"),
    "mr_systematic_picks": ("PIPPIIIIIIP", "i"),
    "mr_pick_counts": ("PiIIIIPIPP", "i"),
}
_NOMEM = -1  # plan.c's MR_PLAN_NOMEM
#: each kernel's other return codes (plan.c's MR_PLAN_*) and the error each stands for
_ERRORS: dict[str, dict[int, tuple[type[Exception], str]]] = {
    "systematic_picks": {1: (IndexError, "systematic_picks: index out of the row")},
    # ZeroDivisionError: Python's k / 0.0 (numpy's gives inf); IndexError where numpy's take
    # would raise
    "systematic_flat": {
        1: (IndexError, "systematic_flat: an order index beyond E"),
        2: (ZeroDivisionError, "division by zero"),
    },
    "pick_counts": {1: (IndexError, "pick_counts: an expert id beyond E")},
}


#: the loaded C library, the plan's functions typed (:class:`moeroof.kernels.loader.NativeBuildError` when it is not
#: built, or built from other sources); loaded once a process
library = functools.cache(functools.partial(loader.typed, _SIGNATURES))


def _check(rc: int, kernel: str) -> None:
    """Raises the error of the C kernel's return code ``rc`` (0: none)."""
    if rc == _NOMEM:
        raise MemoryError(f"{kernel}: the C kernel could not allocate its scratch")
    if rc != 0:
        exc, message = _ERRORS[kernel][rc]
        raise exc(message)


def _f64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def gain_sums(m_in: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``np.maximum(m_in[:, None, :] - w[:, :, None], 0.0).sum(axis=0)``: (n_out, n_in) from
    ``m_in`` (H, n_in) and ``w`` (H, n_out), without the (H, n_out, n_in) temporary. The sum over
    H runs from the first layer shape to the last, as numpy reduces the outer axis; ``maximum``
    keeps its first argument on NaN, as numpy's does. Two differences from numpy, in signs only
    (kept from the kernel's first, numba version): a gain of −0.0 (``m_in`` −0.0 against ``w`` 0.0) stays
    −0.0, where numpy's ``maximum`` gives +0.0; and where a NaN gain meets a NaN sum (−NaN from
    inf − inf after a +NaN input, say), the sum takes the gain's NaN (numpy keeps the sum's)."""
    fn = library().mr_gain_sums
    m_in, w = _f64(m_in), _f64(w)
    h, n_in = m_in.shape
    if w.ndim != 2 or w.shape[0] != h:
        raise ValueError(f"gain_sums: w {w.shape} must be (H, n_out) with m_in's H = {h}")
    n_out = w.shape[1]
    out = np.empty((n_out, n_in))
    fn(m_in.ctypes.data, w.ctypes.data, h, n_in, n_out, out.ctypes.data)
    return out


def systematic_picks(flat: np.ndarray, u: np.ndarray, order: np.ndarray, row0: int, k: int) -> np.ndarray:
    """One chunk of :func:`moeroof.models.expert_cache.systematic_topk`'s picks.

    ``flat`` (n·H·E,): the chunk's cumulative sums, each row offset by its global row index ×
    (K + 1), sorted; ``u`` (n, streams, H) the uniforms; ``order`` (n, H, E) the random expert
    orders; ``row0`` the global index of the chunk's first row. For pick j of stream s at (step t,
    layer ℓ), the point ``(u + j) + row · (K + 1)`` is searched in ``flat`` (``side="right"``),
    made relative to its row and clamped to E − 1, and names ``order[t, ℓ, pos]`` — numpy's::

        pts = (u[..., None] + arange(K)) + row · (K + 1)
        idx = searchsorted(flat, pts.ravel(), side="right")
        pos = minimum(idx − (t·H + ℓ)·E, E − 1);  take_along_axis(order[:, None], pos, axis=-1)

    A row's points, taken by j and then by u (u < 1), never decrease, so one walk along the row
    counts the entries ≤ each point — once the rows on either side are seen to lie below its
    smallest point and above its largest (always, for a sorted ``flat``); else each point is
    searched over the whole array. Either way the index is the one numpy's search over ``flat``
    returns (for a point that is a number: a NaN one, never drawn, finds the start of the
    range searched). A position before its row counts from the row's end, as numpy's take does, and one
    more than E before it raises IndexError. Returns (n, streams, H, K) int32.
    """
    fn = library().mr_systematic_picks
    flat, u, order = _f64(flat).ravel(), _f64(u), _i64(order)
    n, streams, h = u.shape
    if order.ndim != 3 or order.shape[:2] != (n, h):
        raise ValueError(f"systematic_picks: order {order.shape} must be (n, H, E) with u's n, H = {n}, {h}")
    e, k = order.shape[2], int(k)
    if flat.size < n * h * e:
        raise ValueError(f"systematic_picks: flat holds {flat.size} sums, fewer than n·H·E = {n * h * e}")
    out = np.empty((n, streams, h, k), dtype=np.int32)
    rc = fn(flat.ctypes.data, flat.size, u.ctypes.data, order.ctypes.data, n, streams, h, e, int(row0), k,
            out.ctypes.data)  # fmt: skip
    _check(rc, "systematic_picks")
    return out


def systematic_flat(pi: np.ndarray, order: np.ndarray, row0: int, k: int) -> np.ndarray:
    """The sorted array :func:`systematic_picks` searches, as
    :func:`moeroof.models.expert_cache.systematic_topk` built it in numpy::

        p = take_along_axis(broadcast_to(pi, (n, H, E)), order, axis=-1)
        cs = cumsum(p, axis=-1); cs *= K / cs[..., -1:]
        flat = (cs + row · (K + 1)).ravel()          row = row0 + t·H + ℓ

    ``pi`` (H, E), ``order`` (n, H, E): the running sum in the order's sequence (numpy's cumsum
    accumulates one by one), scaled by ``K / last``, then offset — the same operations. A row
    whose last sum is 0 raises ZeroDivisionError (numpy would give infinities), an order index
    outside [−E, E) IndexError."""
    fn = library().mr_systematic_flat
    pi, order = _f64(pi), _i64(order)
    n, h, e = order.shape
    if pi.ndim != 2 or pi.shape[0] < h:
        raise ValueError(f"systematic_flat: pi {pi.shape} must be (H, E) with order's H = {h}")
    flat = np.empty(n * h * e)
    rc = fn(pi.ctypes.data, pi.shape[0], pi.shape[1], order.ctypes.data, n, h, e, int(row0), int(k), flat.ctypes.data)
    _check(rc, "systematic_flat")
    return flat


def pick_counts(topk: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Tokens per distinct request of one rank: for each (step, layer) in order, the number of
    the step's picks of each owned expert that any token picked, by expert id — ``np.unique``'s
    counts of the keys ``step·H·E + layer·E + expert`` over the owned picks (``-1`` padding, and
    any negative id, skipped), in the same sorted order. ``topk`` (steps, streams, H, K) of
    integer ids, ``own`` (E,) bool. An id ≥ E raises IndexError."""
    fn = library().mr_pick_counts
    topk = np.ascontiguousarray(topk)
    if topk.dtype.kind != "i" or topk.dtype.itemsize not in (1, 2, 4, 8):
        topk = topk.astype(np.int64)  # unsigned ids: the same values as int64
    own = np.ascontiguousarray(own, dtype=np.bool_).ravel().view(np.uint8)
    steps, streams, h, k = topk.shape
    out = np.empty(topk.size, dtype=np.int64)
    n = np.zeros(1, dtype=np.int64)
    rc = fn(topk.ctypes.data, topk.dtype.itemsize, steps, streams, h, k, own.ctypes.data, own.size, out.ctypes.data,
            n.ctypes.data)  # fmt: skip
    _check(rc, "pick_counts")
    return out[: int(n[0])].copy()
