"""Compiled kernels behind :mod:`moeroof.models.partition` and :mod:`moeroof.models.expert_cache`
(numba, cached on disk).

Kept apart so that importing the plan (or the command line's parsers) does not import numba:
the callers import this module inside the function that runs a kernel. Each kernel replaces a
numpy expression and returns the same bits: the same floating-point operations, in the same
order — the sums along an outer axis accumulate sequentially, as numpy's reduction over an
outer axis does (tests/test_plan_kernels.py checks each against the numpy it replaced).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["gain_sums", "systematic_flat", "systematic_picks", "pick_counts"]


@numba.njit(cache=True)
def gain_sums(m_in: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``np.maximum(m_in[:, None, :] - w[:, :, None], 0.0).sum(axis=0)``: (n_out, n_in) from
    ``m_in`` (H, n_in) and ``w`` (H, n_out), without the (H, n_out, n_in) temporary. The sum over
    H runs from the first layer shape to the last, as numpy reduces the outer axis; ``maximum``
    keeps its own first argument on ties and NaN, as numpy's does."""
    h, n_in = m_in.shape
    n_out = w.shape[1]
    out = np.zeros((n_out, n_in))
    for k in range(h):
        for i in range(n_out):
            wi = w[k, i]
            for j in range(n_in):
                d = m_in[k, j] - wi
                g = d if (d >= 0.0 or d != d) else 0.0
                if k == 0:
                    out[i, j] = g
                else:
                    out[i, j] += g
    return out


@numba.njit(cache=True)
def _search_right(a: np.ndarray, lo: int, hi: int, v: float) -> int:
    """First index in ``[lo, hi)`` whose value is > ``v`` (``hi`` if none): ``side="right"``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def systematic_picks(flat: np.ndarray, u: np.ndarray, order: np.ndarray, row0: int, k: int) -> np.ndarray:
    """One chunk of :func:`moeroof.models.expert_cache.systematic_topk`'s picks.

    ``flat`` (n·H·E,): the chunk's cumulative sums, each row offset by its global row index ×
    (K + 1), sorted; ``u`` (n, streams, H) the uniforms; ``order`` (n, H, E) the random expert
    orders; ``row0`` the global index of the chunk's first row. For pick j of stream s at (step t,
    layer ℓ), the point ``(u + j) + row · (K + 1)`` is searched in ``flat`` (``side="right"``),
    made relative to its row and clamped to E − 1, and names ``order[t, ℓ, pos]``.

    A row's points, taken by j and then by u, never decrease (u < 1), so one walk along the row
    counts the entries ≤ each point — once the rows on either side are seen to lie below its
    smallest point and above its largest (always, for a sorted ``flat``); else each point is
    searched over the whole array. Either way the index is the one numpy's search over ``flat``
    returns. Returns (n, streams, H, K) int32.
    """
    n, streams, h = u.shape
    e = order.shape[2]
    size = flat.size
    out = np.empty((n, streams, h, k), dtype=np.int32)
    step = k + 1.0
    ub = np.empty(streams)
    for t in range(n):
        for layer in range(h):
            local = t * h + layer
            off = float(row0 + local) * step
            start = local * e
            stop = start + e
            for s in range(streams):
                ub[s] = u[t, s, layer]
            by_u = np.argsort(ub)
            lowest = (ub[by_u[0]] + 0.0) + off
            highest = (ub[by_u[streams - 1]] + float(k - 1)) + off
            inside = (start == 0 or flat[start - 1] <= lowest) and (stop == size or flat[stop] > highest)
            p = start
            prev = -np.inf
            for j in range(k):
                for q in range(streams):
                    s = by_u[q]
                    pt = (u[t, s, layer] + float(j)) + off
                    if not inside:
                        idx = _search_right(flat, 0, size, pt)
                    else:
                        if not pt >= prev:  # out of order (never for uniforms in [0, 1)): search again
                            p = _search_right(flat, start, stop, pt)
                        while p < stop and flat[p] <= pt:
                            p += 1
                        idx = p
                        prev = pt
                    pos = min(idx - start, e - 1)
                    if pos < 0:  # numpy's take_along_axis counts a negative index from the end
                        pos += e
                    if pos < 0:
                        raise IndexError("systematic_picks: index out of the row")
                    out[t, s, layer, j] = order[t, layer, pos]
    return out


@numba.njit(cache=True)
def systematic_flat(pi: np.ndarray, order: np.ndarray, row0: int, k: int) -> np.ndarray:
    """The sorted array :func:`systematic_picks` searches, as
    :func:`moeroof.models.expert_cache.systematic_topk` built it in numpy::

        p = take_along_axis(broadcast_to(pi, (n, H, E)), order, axis=-1)
        cs = cumsum(p, axis=-1); cs *= K / cs[..., -1:]
        flat = (cs + row · (K + 1)).ravel()          row = row0 + t·H + ℓ

    ``pi`` (H, E), ``order`` (n, H, E): the running sum in the order's sequence (numpy's cumsum
    accumulates one by one), scaled by ``K / last``, then offset — the same operations."""
    n, h, e = order.shape
    flat = np.empty(n * h * e)
    step = k + 1.0
    for t in range(n):
        for layer in range(h):
            start = (t * h + layer) * e
            c = 0.0
            for i in range(e):
                v = pi[layer, order[t, layer, i]]
                c = v if i == 0 else c + v
                flat[start + i] = c
            scale = k / flat[start + e - 1]
            off = float(row0 + t * h + layer) * step
            for i in range(e):
                flat[start + i] = flat[start + i] * scale + off
    return flat


@numba.njit(cache=True)
def pick_counts(topk: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Tokens per distinct request of one rank: for each (step, layer) in order, the number of
    the step's picks of each owned expert that any token picked, by expert id — ``np.unique``'s
    counts of the keys ``step·H·E + layer·E + expert`` over the owned picks (``-1`` padding
    skipped), in the same sorted order. ``topk`` (steps, streams, H, K), ``own`` (E,) bool."""
    steps, streams, h, k = topk.shape
    e = own.size
    out = np.empty(steps * streams * h * k, dtype=np.int64)
    seen = np.zeros(e, dtype=np.int64)
    ids = np.empty(streams * k, dtype=np.int64)
    n = 0
    for t in range(steps):
        for layer in range(h):
            m = 0
            for s in range(streams):
                for j in range(k):
                    x = topk[t, s, layer, j]
                    if x >= e:
                        raise IndexError("pick_counts: an expert id beyond E")
                    if x >= 0 and own[x]:
                        if seen[x] == 0:
                            ids[m] = x
                            m += 1
                        seen[x] += 1
            if m * 8 < e:  # few distinct: sort them (insertion) rather than scan all E
                for a in range(1, m):
                    v = ids[a]
                    b = a
                    while b > 0 and ids[b - 1] > v:
                        ids[b] = ids[b - 1]
                        b -= 1
                    ids[b] = v
                for a in range(m):
                    out[n] = seen[ids[a]]
                    n += 1
                    seen[ids[a]] = 0
            else:
                for i in range(e):
                    if seen[i] > 0:
                        out[n] = seen[i]
                        n += 1
                        seen[i] = 0
    return out[:n].copy()
