"""The compiled kernels behind :mod:`moeroof.models.routing` (numba, cached on disk).

Kept apart so that importing the routing models does not import numba:
:mod:`moeroof.models.routing` imports this module inside the functions that run a kernel, as
:mod:`moeroof.models.cache` does with :mod:`moeroof.models.cache_kernels`. The algorithms are
documented there; each kernel here is the inner loop of one of them, written to give the same
floating-point results as the numpy code it replaces, bit for bit: the same operations in the
same order (numba does not contract ``a*b + c*d`` into fused multiply-adds without fastmath),
numpy's pairwise summation where numpy sums, and the transcendental functions either left to
numpy (its SIMD ``exp``/``expm1`` are not libm's) or, where libm is what numpy calls (the
Gumbel draw of ``Generator.gumbel``), called from here as libm.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["pairwise_sum", "inclusion_below_k", "gumbel_from_uniforms", "top_k_steps"]

#: numpy's pairwise summation block (``PW_BLOCKSIZE`` in its loops): the largest K the
#: inclusion kernel takes
PW_BLOCK = 128


@numba.njit(cache=True)
def pairwise_sum(a, n):  # pragma: no cover - compiled
    """``np.add.reduce`` of ``a[:n]``, ``n <= 128``, as numpy sums a contiguous axis: below 8
    terms a plain loop from 0.0; up to 128 (``PW_BLOCKSIZE``) eight accumulators combined as
    ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the rest in order. (Above 128 numpy splits the
    axis in halves; callers keep such sums in numpy: a recursive kernel does not survive
    numba's disk cache.)"""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    r0 = a[0]
    r1 = a[1]
    r2 = a[2]
    r3 = a[3]
    r4 = a[4]
    r5 = a[5]
    r6 = a[6]
    r7 = a[7]
    i = 8
    stop = n - (n % 8)
    while i < stop:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return res


#: nodes processed together by :func:`inclusion_below_k` (the innermost loops, which the
#: compiler vectorises: every node's arithmetic is the same, in the same order, so SIMD across
#: nodes changes no result)
_NODE_BLOCK = 32


@numba.njit(cache=True)
def inclusion_below_k(p, k):  # pragma: no cover - compiled  # noqa: C901
    """``P(N_{-j}(t) < K)`` for every row r, expert j and node t of ``p`` (m, e, n), where
    ``p[r, j, t] = P(expert j arrived by t)``: the prefix/suffix Poisson-binomial programmes of
    :func:`moeroof.models.routing._inclusion_rows` with the same operations in the same order
    for each (row, node), in blocks of nodes side by side; ``k <= 128``."""
    m, e, n = p.shape
    nb = _NODE_BLOCK
    npad = (n + nb - 1) // nb * nb
    pp = np.zeros((m, e, npad))
    pp[:, :, :n] = p
    out = np.empty((m, e, npad))
    pref = np.zeros((e + 1, k, nb))
    suf = np.zeros((k, nb))
    nxt = np.zeros((k, nb))
    cum = np.zeros((k, nb))
    prod = np.zeros((k, nb))
    acc = np.zeros((8, nb))
    res = np.zeros(nb)
    pj = np.zeros(nb)
    q = np.zeros(nb)
    for r in range(m):
        for t0 in range(0, npad, nb):
            # prefix[j] = distribution of arrivals among experts < j, counts 0..k-1
            pref[0, :, :] = 0.0
            pref[0, 0, :] = 1.0
            for j in range(e):
                a = pref[j]
                b = pref[j + 1]
                for tt in range(nb):
                    pj[tt] = pp[r, j, t0 + tt]
                    q[tt] = 1.0 - pj[tt]
                for tt in range(nb):
                    b[0, tt] = a[0, tt] * q[tt]
                for c in range(1, k):
                    for tt in range(nb):
                        b[c, tt] = a[c, tt] * q[tt] + a[c - 1, tt] * pj[tt]
            suf[:, :] = 0.0
            suf[0, :] = 1.0
            for j in range(e - 1, -1, -1):
                # P(N_{-j} < K) = sum_{a+b<K} prefix_j[a] * suffix_{j+1}[b]: np.cumsum, then
                # the products summed as np.sum sums them (see pairwise_sum)
                a = pref[j]
                for tt in range(nb):
                    cum[0, tt] = suf[0, tt]
                for c in range(1, k):
                    for tt in range(nb):
                        cum[c, tt] = cum[c - 1, tt] + suf[c, tt]
                for c in range(k):
                    for tt in range(nb):
                        prod[c, tt] = a[c, tt] * cum[k - 1 - c, tt]
                if k < 8:
                    for tt in range(nb):
                        res[tt] = 0.0
                    for c in range(k):
                        for tt in range(nb):
                            res[tt] = res[tt] + prod[c, tt]
                else:
                    for c in range(8):
                        for tt in range(nb):
                            acc[c, tt] = prod[c, tt]
                    i = 8
                    stop = k - (k % 8)
                    while i < stop:
                        for c in range(8):
                            for tt in range(nb):
                                acc[c, tt] = acc[c, tt] + prod[i + c, tt]
                        i += 8
                    for tt in range(nb):
                        res[tt] = ((acc[0, tt] + acc[1, tt]) + (acc[2, tt] + acc[3, tt])) + (
                            (acc[4, tt] + acc[5, tt]) + (acc[6, tt] + acc[7, tt])
                        )
                    while i < k:
                        for tt in range(nb):
                            res[tt] = res[tt] + prod[i, tt]
                        i += 1
                for tt in range(nb):
                    out[r, j, t0 + tt] = res[tt]
                    pj[tt] = pp[r, j, t0 + tt]
                    q[tt] = 1.0 - pj[tt]
                for tt in range(nb):
                    nxt[0, tt] = suf[0, tt] * q[tt]
                for c in range(1, k):
                    for tt in range(nb):
                        nxt[c, tt] = suf[c, tt] * q[tt] + suf[c - 1, tt] * pj[tt]
                suf[:, :] = nxt
    return out[:, :, :n]


@numba.njit(cache=True)
def gumbel_from_uniforms(u):  # pragma: no cover - compiled
    """``Generator.gumbel()`` from the doubles it would draw: numpy computes
    ``loc - scale * log(-log(1 - U))`` with libm's ``log`` (a draw of exactly 0 is redrawn, which
    the caller handles), and so does this, bit for bit."""
    out = np.empty(u.size)
    for i in range(u.size):
        out[i] = 0.0 - 1.0 * math.log(-math.log(1.0 - u[i]))
    return out


@numba.njit(cache=True)
def log_weight_rows(logq):  # pragma: no cover - compiled
    """Per row of log weights (rows, E): the largest finite entry (``-inf`` when none) and
    ``exp(logq - max)``, the relative weights the top-K screen of :func:`top_k_steps` uses."""
    rows, e = logq.shape
    top = np.full(rows, -np.inf)
    rel = np.zeros((rows, e))
    for r in range(rows):
        m = -np.inf
        for i in range(e):
            if logq[r, i] > m:
                m = logq[r, i]
        top[r] = m
        if m > -np.inf:
            for i in range(e):
                rel[r, i] = math.exp(logq[r, i] - m)
    return top, rel


#: relative weights below this are never screened out (an underflowed or subnormal weight)
_REL_FLOOR = 1e-300


#: the prefilter of :func:`_screen` keeps an expert unless its upper bound falls below this
#: share of a lower bound on the final cut's bound: far below the cut's slack (at most ~1e-5 for
#: ``|top| <= _TOP_SCREENED``) and any rounding, so every expert the cut keeps is a candidate
_RUN_SHARE = 0.999
#: rows whose largest log weight is beyond this skip the prefilter (the cut's slack grows with
#: ``|top|``)
_TOP_SCREENED = 1e9


#: the least uniform whose Gumbel draw :func:`_screen` bounds by :data:`_G_MAX`: 2^-53, the
#: least nonzero double ``Generator.random`` draws (``1 - u`` is then below 1)
_U_LEAST = 2.0**-53
#: above the largest Gumbel draw ``-log(-log(1 - u))`` of any ``u >= _U_LEAST`` (36.74), with room
#: for rounding
_G_MAX = 40.0
#: chunks :func:`_floor_bound` splits a row into, per expert its bound must reach
_CHUNKS_PER_SLOT = 3


@numba.njit(cache=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz", "reassoc"})
def _floor_bound(rel_r, u_r, is_kept, nbuf, maxima):  # pragma: no cover - compiled
    """A lower bound on the ``nbuf``-th largest lower bound ``rel (1 - u) / u`` of
    :func:`_screen` (0 when there is none): the ids in :data:`_CHUNKS_PER_SLOT` · ``nbuf``
    consecutive chunks, the ``nbuf``-th largest of the chunks' largest (into ``maxima``, of at
    least 2·E: the bounds go past its first ``chunks`` entries). Each chunk's largest is a
    different expert's, so ``nbuf`` experts reach it. The bounds are one loop over the row that
    the compiler vectorises (numpy's error model: a division by zero raises no Python exception,
    and ``u > 0``; fast-math only reorders, no approximate division; non-short-circuit ``&``: no
    branch), the chunks' ends are stepped without an integer division; the caller's
    :data:`_RUN_SHARE` leaves room for the rounding."""
    e = rel_r.shape[0]
    chunks = min(_CHUNKS_PER_SLOT * nbuf, e)
    if nbuf > chunks:
        return 0.0
    xbuf = maxima[chunks:]
    for i in range(e):
        ok = (is_kept[i] == False) & (rel_r[i] >= _REL_FLOOR)  # noqa: E712
        xbuf[i] = rel_r[i] * (1.0 - u_r[i]) / u_r[i] if ok else 0.0
    # chunk j is ids j·e//chunks … (j+1)·e//chunks − 1, its ends stepped without a division
    q, rem = divmod(e, chunks)
    lo, acc = 0, 0
    for j in range(chunks):
        acc += rem
        wrap = acc >= chunks
        hi = lo + q + (1 if wrap else 0)
        acc -= chunks if wrap else 0
        m = 0.0
        for i in range(lo, hi):
            x = xbuf[i]
            m = x if x > m else m
        maxima[j] = m
        lo = hi
    # the nbuf-th largest of the chunk maxima: a partial insertion sort, descending
    for j in range(1, chunks):
        x = maxima[j]
        pos = min(j, nbuf)
        if pos == nbuf and not x > maxima[nbuf - 1]:
            continue
        while pos > 0 and maxima[pos - 1] < x:
            if pos < nbuf:
                maxima[pos] = maxima[pos - 1]
            pos -= 1
        maxima[pos] = x
    return maxima[nbuf - 1]


@numba.njit(cache=True)
def _screen(
    logq_r, rel_r, u_r, is_kept, nbuf, top_r, lb_num, lb_den, cand, maxima, keep_mask
):  # pragma: no cover - compiled
    """The first pass of :func:`top_k_steps` on one row: the cut below which an expert's score
    cannot reach the K+1 best, and the candidates, in ascending id, that may pass it (their
    count is returned with the cut).

    With ``G(u) = -log(-log(1 - u))`` and ``u <= -log(1 - u) <= u / (1 - u)``,
    ``rel_i (1 - u_i) / u_i <= exp(s_i - top) <= rel_i / u_i``. The ``nbuf``-th largest lower
    bound bounds the (K+1)-th best score from below, so expert i can be in the top K only if
    ``rel_i / u_i`` reaches it (less a slack far above rounding): a product and a comparison per
    expert, no logarithm. Experts of tiny or zero weight are never screened. The lower bounds
    are kept as fractions ``rel (1 - u) / u``, compared by cross-multiplying.

    A prefilter first drops the experts whose upper bound is below :data:`_RUN_SHARE` of
    :func:`_floor_bound`: their lower bounds are below the ``nbuf``-th largest, which they
    cannot change, and the cut drops them too. Of the experts of tiny weight, it drops those
    whose score cannot reach the prefilter's bound however large their Gumbel draw
    (``logq + G(u) < logq +`` :data:`_G_MAX` ``< top + log(bound)``): ``nbuf`` experts score
    above it. The bounds are then taken among the rest, in the same order: the same cut, the
    same candidates past it, the same K+1 best.
    """
    e = rel_r.shape[0]
    low0 = _floor_bound(rel_r, u_r, is_kept, nbuf, maxima) if abs(top_r) <= _TOP_SCREENED else 0.0
    thr = _RUN_SHARE * low0
    floor_log = top_r + math.log(low0) - _G_MAX if low0 > 0.0 else -np.inf
    # the keep flags in a branch-free loop, then the candidates compacted from them
    mask = keep_mask
    for i in range(e):
        ri = rel_r[i]
        ui = u_r[i]
        tiny = (ri < _REL_FLOOR) & ((logq_r[i] >= floor_log) | (ui < _U_LEAST))
        mask[i] = (is_kept[i] == False) & (tiny | (ri >= thr * ui))  # noqa: E712
    n_cand = 0
    for i in range(e):
        cand[n_cand] = i
        n_cand += mask[i]
    n_lb = 0
    for j in range(n_cand):
        i = cand[j]
        ri = rel_r[i]
        if ri < _REL_FLOOR:
            continue
        ui = u_r[i]
        num = ri * (1.0 - ui)
        if n_lb < nbuf:
            pos = n_lb
            n_lb += 1
        elif num * lb_den[nbuf - 1] > lb_num[nbuf - 1] * ui:
            pos = nbuf - 1
        else:
            continue
        while pos > 0 and lb_num[pos - 1] * ui < num * lb_den[pos - 1]:
            lb_num[pos] = lb_num[pos - 1]
            lb_den[pos] = lb_den[pos - 1]
            pos -= 1
        lb_num[pos] = num
        lb_den[pos] = ui
    cut = 0.0
    if n_lb == nbuf and lb_num[nbuf - 1] > 0.0:
        low = lb_num[nbuf - 1] / lb_den[nbuf - 1]
        slack = 1e-9 + 1e-14 * (abs(top_r) + abs(math.log(low)) + 50.0)
        cut = low * math.exp(-2.0 * slack)
    return n_cand, cut


@numba.njit(cache=True)
def _best_of(logq_r, rel_r, u_r, cand, n_cand, cut, nbuf, vals, ids):  # pragma: no cover - compiled
    """The second pass of :func:`top_k_steps` on one row: the ``nbuf`` best scores
    ``logq + G(u)`` among the candidates past the cut, by insertion in ascending id (an equal
    score goes after), computed as numpy computes them (``Generator.gumbel``'s libm ``log``)."""
    filled = 0
    for j in range(n_cand):
        i = cand[j]
        if rel_r[i] >= _REL_FLOOR and rel_r[i] < cut * u_r[i]:
            continue
        if logq_r[i] == -np.inf:
            s = -np.inf  # -inf + any Gumbel draw
        else:
            s = logq_r[i] + (0.0 - 1.0 * math.log(-math.log(1.0 - u_r[i])))
        if filled == nbuf:
            # at or below the (K+1)-th best: out of the top K whatever ties it has there
            if not s > vals[nbuf - 1]:
                continue
            pos = nbuf - 1
        else:
            pos = filled
            filled += 1
        while pos > 0 and vals[pos - 1] < s:
            vals[pos] = vals[pos - 1]
            ids[pos] = ids[pos - 1]
            pos -= 1
        vals[pos] = s
        ids[pos] = i


@numba.njit(cache=True)
def top_k_steps(logq, top, rel, u, keep_u, rho, out, first, k):  # pragma: no cover - compiled
    """Steps ``first … first + n − 1`` of :func:`moeroof.models.routing.sample_trace` on rows
    (streams·layers) of E at one log weight ``logq`` (rows, E; no NaN): ``u`` (n, rows, E) the
    uniforms of the Gumbel noise, ``keep_u`` (n, rows, K) the stickiness uniforms (no columns:
    nothing kept), ``out`` (steps, rows, K) the trace, read at ``first − 1`` and written on.

    A row keeps slot q of its previous picks when ``keep_u[t, r, q] < rho[r]`` (none at step
    0). Its picks are the kept experts first, in the order of their previous slots, then the
    ``K − kept`` largest scores ``logq + G(u)`` among the others, in descending order, equal
    scores in ascending expert id: one order on every machine (numpy's sorts break ties by
    their SIMD path).

    Only the scores that can reach the top K+1 are computed: with
    ``G(u) = -log(-log(1 - u)) <= -log(u)``, expert i scores below the current (K+1)-th best T
    when ``u_i > exp(logq_i - T)``, a product and a comparison (``rel``, ``top`` from
    :func:`log_weight_rows`, with a slack far above rounding: :func:`_screen`); the rest are
    computed exactly (:func:`_best_of`).
    """
    n, rows, e = u.shape
    n_keep_cols = keep_u.shape[2]
    keep_ids = np.empty(max(k, 1), np.int64)
    is_kept = np.zeros(e, np.bool_)
    vals = np.empty(k + 1)
    lb_num = np.empty(k + 1)
    lb_den = np.empty(k + 1)
    ids = np.empty(k + 1, np.int64)
    cand = np.empty(e, np.int64)
    maxima = np.empty(2 * e)
    keep_mask = np.empty(e, np.int64)
    for t in range(n):
        step = first + t
        for r in range(rows):
            n_keep = 0
            if step > 0:
                for q in range(n_keep_cols):
                    if keep_u[t, r, q] < rho[r]:
                        keep_ids[n_keep] = out[step - 1, r, q]
                        n_keep += 1
            for q in range(n_keep):
                is_kept[keep_ids[q]] = True
            nbuf = min(k + 1 - n_keep, e - n_keep)
            if nbuf > 0:
                u_r = u[t, r]
                n_cand, cut = _screen(
                    logq[r], rel[r], u_r, is_kept, nbuf, top[r], lb_num, lb_den, cand, maxima, keep_mask
                )
                _best_of(logq[r], rel[r], u_r, cand, n_cand, cut, nbuf, vals, ids)
            for q in range(n_keep):
                is_kept[keep_ids[q]] = False
                out[step, r, q] = keep_ids[q]
            for x in range(k - n_keep):
                out[step, r, n_keep + x] = ids[x]
