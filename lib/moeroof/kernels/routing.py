"""The compiled kernels behind :mod:`moeroof.models.routing`: C (``kernels/native/routing.c``),
compiled at install and loaded with :mod:`ctypes` by :mod:`moeroof.kernels.loader`.

Each kernel is the inner loop of one of the routing algorithms (documented in
:mod:`moeroof.models.routing`; the algorithms' details are in the C), written to give the same
floating-point results as the numpy code it replaces, bit for bit: the same operations in the
same order (ISO C, no fused multiply-add), numpy's pairwise summation where numpy sums, and the
transcendental functions either left to numpy (its SIMD ``exp``/``expm1`` are not libm's) or,
where libm is what numpy calls (the Gumbel draw of ``Generator.gumbel``), called as libm.

There is no fallback: without the C library (not built, or built from other sources) a kernel
raises :class:`moeroof.kernels.loader.NativeBuildError`, saying why.
Importing this module loads nothing; the library is opened by the first kernel that runs.
"""

from __future__ import annotations

import functools

import numpy as np

from moeroof.kernels import loader

__all__ = [
    "PW_BLOCK",
    "library",
    "pairwise_sum",
    "inclusion_below_k",
    "gumbel_from_uniforms",
    "log_weight_rows",
    "top_k_steps",
]

#: numpy's pairwise summation block (``PW_BLOCKSIZE`` in its loops): the largest K the
#: inclusion kernel takes
PW_BLOCK = 128

#: argument codes of each C function and its result's (routing.h; :func:`moeroof.kernels.loader.typed`)
_SIGNATURES = {
    "mr_pairwise_sum": ("PI", "D"),
    "mr_inclusion_below_k": ("PIIIIP", "i"),
    "mr_gumbel_from_uniforms": ("PIP", None),
    "mr_log_weight_rows": ("PIIPP", None),
    "mr_top_k_steps": ("PPPPIIIPIPPII", "i"),
}


#: the loaded C library, its routing functions typed (:class:`moeroof.kernels.loader.NativeBuildError` when it is not
#: built, or built from other sources); loaded once a process
library = functools.cache(functools.partial(loader.typed, _SIGNATURES))


def _f64(a) -> np.ndarray:
    """An input as the C reads it: C-contiguous float64 (a copy only when it is not)."""
    return np.ascontiguousarray(a, dtype=np.float64)


def _check(rc: int, what: str) -> None:
    if rc == -1:
        raise MemoryError(f"the routing kernel {what} could not allocate its scratch")
    if rc != 0:
        raise ValueError(f"the routing kernel {what} refused its arguments (code {rc})")


def pairwise_sum(a, n):
    """``np.add.reduce`` of ``a[:n]``, ``n <= 128``, as numpy sums a contiguous axis: below 8
    terms a plain loop from 0.0; up to 128 (``PW_BLOCKSIZE``) eight accumulators combined as
    ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the rest in order. (Above 128 numpy splits the
    axis in halves; callers keep such sums in numpy.)"""
    a = _f64(a).reshape(-1)
    n = int(n)
    if not 0 <= n <= a.size:
        raise ValueError(f"n must be in [0, {a.size}], got {n}")
    return float(library().mr_pairwise_sum(a.ctypes.data, n))


def inclusion_below_k(p, k):
    """``P(N_{-j}(t) < K)`` for every row r, expert j and node t of ``p`` (m, e, n), where
    ``p[r, j, t] = P(expert j arrived by t)``: the prefix/suffix Poisson-binomial programmes of
    :func:`moeroof.models.routing._inclusion_rows` with the same operations in the same order
    for each (row, node), ``k <= 128``. With ``prefix_j`` the distribution of the arrivals among
    the experts before j (``prefix_{j+1}[c] = prefix_j[c]·(1 − p_j) + prefix_j[c−1]·p_j``) and
    ``suffix_{j+1}`` among those after j, the result is ``Σ_c prefix_j[c] · cumsum(suffix_{j+1})[K−1−c]``,
    the K products summed as ``np.sum`` sums them (:func:`pairwise_sum`)."""
    p = _f64(p)
    k = int(k)
    if p.ndim != 3:
        raise ValueError(f"p must be (rows, experts, nodes), got shape {p.shape}")
    if not 1 <= k <= PW_BLOCK:
        raise ValueError(f"k must be in [1, {PW_BLOCK}], got {k}")
    m, e, n = p.shape
    out = np.empty((m, e, n))
    _check(library().mr_inclusion_below_k(p.ctypes.data, m, e, n, k, out.ctypes.data), "inclusion_below_k")
    return out


def gumbel_from_uniforms(u):
    """``Generator.gumbel()`` from the doubles it would draw (flattened): numpy computes
    ``loc - scale * log(-log(1 - U))`` with libm's ``log`` (a draw of exactly 0 is redrawn, which
    the caller handles), and so does this, bit for bit: ``0.0 - 1.0 * log(-log(1.0 - u))``."""
    u = _f64(u).reshape(-1)
    out = np.empty(u.size)
    library().mr_gumbel_from_uniforms(u.ctypes.data, u.size, out.ctypes.data)
    return out


def log_weight_rows(logq):
    """Per row of log weights (rows, E): the largest finite entry (``-inf`` when none) and
    ``exp(logq - max)`` (libm's ``exp``; 0 on a row whose largest is ``-inf``), the relative
    weights the top-K screen of :func:`top_k_steps` uses."""
    logq = _f64(logq)
    if logq.ndim != 2:
        raise ValueError(f"logq must be (rows, experts), got shape {logq.shape}")
    rows, e = logq.shape
    top = np.empty(rows)
    rel = np.empty((rows, e))
    library().mr_log_weight_rows(logq.ctypes.data, rows, e, top.ctypes.data, rel.ctypes.data)
    return top, rel


def top_k_steps(logq, top, rel, u, keep_u, rho, out, first, k):
    """Steps ``first … first + n − 1`` of :func:`moeroof.models.routing.sample_trace` on rows
    (streams·layers) of E at one log weight ``logq`` (rows, E; no NaN): ``u`` (n, rows, E) the
    uniforms of the Gumbel noise, ``keep_u`` (n, rows, K) the stickiness uniforms (no columns:
    nothing kept), ``out`` (steps, rows, K) the trace, read at ``first − 1`` and written on.

    A row keeps slot q of its previous picks when ``keep_u[t, r, q] < rho[r]`` (none at step
    0). Its picks are the kept experts first, in the order of their previous slots, then the
    ``K − kept`` largest scores ``logq + G(u)``, ``G(u) = 0.0 - 1.0 * log(-log(1.0 - u))`` (as
    :func:`gumbel_from_uniforms`), among the others, in descending order, equal scores in
    ascending expert id: one order on every machine (numpy's sorts break ties by their SIMD
    path). Only the scores that can reach the top K+1 are computed (``rel``, ``top`` from
    :func:`log_weight_rows` bound them: see the C); the picks are those of the full sort.
    """
    logq, top, rel, u, keep_u, rho = (_f64(a) for a in (logq, top, rel, u, keep_u, rho))
    n, rows, e = u.shape
    first, k = int(first), int(k)
    shapes = (logq.shape, rel.shape, top.shape, rho.shape, keep_u.shape[:2], out.shape[1:])
    agree = shapes == ((rows, e), (rows, e), (rows,), (rows,), (n, rows), (rows, k)) and keep_u.shape[2] <= k
    if not agree or not 0 <= first <= out.shape[0] - n:
        raise ValueError("top_k_steps: the arrays' shapes do not agree (see its docstring)")
    direct = out.dtype == np.int32 and out.flags.c_contiguous and out.flags.writeable
    buf = out if direct else np.ascontiguousarray(out, dtype=np.int32)
    rc = library().mr_top_k_steps(
        logq.ctypes.data, top.ctypes.data, rel.ctypes.data, u.ctypes.data, n, rows, e,
        keep_u.ctypes.data, keep_u.shape[2], rho.ctypes.data, buf.ctypes.data, first, k,
    )  # fmt: skip
    _check(rc, "top_k_steps")
    if not direct:
        out[first : first + n] = buf[first : first + n]
