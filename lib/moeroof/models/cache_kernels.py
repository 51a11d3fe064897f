"""The compiled kernels behind :mod:`moeroof.models.cache` (numba, cached on disk).

The fallback of :mod:`moeroof.models.cache_native` (no C compiler, ``MOEROOF_NATIVE=0``, ids
that are not int32) and the reference its C ports are tested against, bit for bit: an edit to a
kernel here must be made to its port in ``models/native/`` too. Imported only when a fallback
runs, so that importing the cache model does not import numba. The algorithms are documented
in :mod:`moeroof.models.cache`; each kernel here is the inner loop of one of them.

Kernels are compiled by numba on first use and cached on disk (``cache=True``), so only the
first call after an install or an edit pays the compile (about a second per kernel). numba keeps
the cache in ``__pycache__`` beside this file, falls back to a per-user cache directory when that
folder is read-only (an installed package), and honours ``NUMBA_CACHE_DIR``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = [
    "scan_block",
    "emit_block",
    "runs_kernel",
    "offsets_from_starts",
    "starts_from_offsets",
    "subset_offsets",
    "count_items",
    "next_use_kernel",
    "longest",
    "lru_pass",
    "lru_kernel",
    "static_pass",
    "sift",
    "HEAP_LFU",
    "HEAP_LFU_PERFECT",
    "HEAP_BELADY",
    "HEAP_BELADY_INSERT",
    "heap_pass",
    "arc_pass",
    "stack_kernel",
    "s3fifo_pass",
]

#: ``scan_block`` results: the kind of the first bad id of a block (``moeroof.data.io`` words them)
ID_OK = 0
ID_RANGE = 1  # an id outside [-1, E)
ID_PARTIAL = 2  # a token that mixes padding and expert ids
ID_DUPLICATE = 3  # an expert twice in one token


# ----------------------------------------------------------------------------- the request stream


@numba.njit(cache=True)
def scan_block(  # noqa: C901
    block, experts, sel, keep, use_keep, strict, mark, tmark, ctr, cells, c0, err
):  # pragma: no cover - compiled
    """Validate a block of a trace (steps, streams, layers, K) and count its requests per cell.

    Counts, for every step s and layer l of the block, the distinct experts of the streams
    ``sel`` (kept by ``keep[l, e]`` when ``use_keep``) into ``cells[c0 + s · layers + l]``;
    ``mark`` (experts,) is a scratch of cell stamps (cell + 1), zero at the first call.

    ``strict``: every token of every stream is checked as :func:`moeroof.data.io.read_trace`
    checks a block — the first id outside [-1, E) in C order (``ID_RANGE``), else the first token
    that is partly padding (``ID_PARTIAL``, at its first padding), else the first token with an
    expert twice (``ID_DUPLICATE``, at the first repeat); ``tmark``/``ctr`` are the scratch of
    the duplicate check. Otherwise only the ids of the streams ``sel`` are checked, for range.
    Returns the kind (``ID_OK`` when none) with ``err[:5]`` = (step in block, stream, layer, k, id).
    """
    ns, nt, nl, nk = block.shape
    have_partial = False
    have_dup = False
    for s in range(ns):
        if strict:
            for t in range(nt):
                for l in range(nl):
                    npad = 0
                    for k in range(nk):
                        v = block[s, t, l, k]
                        if v < -1 or v >= experts:
                            err[0] = s
                            err[1] = t
                            err[2] = l
                            err[3] = k
                            err[4] = v
                            return ID_RANGE
                        if v == -1:
                            npad += 1
                    if npad > 0:
                        if npad < nk and not have_partial:
                            have_partial = True
                            k = 0
                            while block[s, t, l, k] != -1:
                                k += 1
                            err[5] = s
                            err[6] = t
                            err[7] = l
                            err[8] = k
                            err[9] = -1
                    elif nk > 1 and not have_dup:
                        ctr[0] += 1
                        tok = ctr[0]
                        for k in range(nk):
                            v = block[s, t, l, k]
                            if tmark[v] == tok:
                                have_dup = True
                                err[10] = s
                                err[11] = t
                                err[12] = l
                                err[13] = k
                                err[14] = v
                                break
                            tmark[v] = tok
        for l in range(nl):
            cid = c0 + s * nl + l
            stamp = cid + 1
            cnt = 0
            for i in range(sel.size):
                t = sel[i]
                for k in range(nk):
                    v = block[s, t, l, k]
                    if v < -1 or v >= experts:  # not strict: the first bad id of this step, C order
                        for i2 in range(sel.size):
                            for l2 in range(nl):
                                for k2 in range(nk):
                                    v2 = block[s, sel[i2], l2, k2]
                                    if v2 < -1 or v2 >= experts:
                                        err[0] = s
                                        err[1] = sel[i2]
                                        err[2] = l2
                                        err[3] = k2
                                        err[4] = v2
                                        return ID_RANGE
                    if v < 0:
                        continue
                    if use_keep and not keep[l, v]:
                        continue
                    if mark[v] != stamp:
                        mark[v] = stamp
                        cnt += 1
            cells[cid] = cnt
    if have_partial:
        for j in range(5):
            err[j] = err[5 + j]
        return ID_PARTIAL
    if have_dup:
        for j in range(5):
            err[j] = err[10 + j]
        return ID_DUPLICATE
    return ID_OK


@numba.njit(cache=True)
def emit_block(block, experts, sel, keep, use_keep, mark, c0, out, pos):  # pragma: no cover - compiled
    """Write the requests of a block (validated by :func:`scan_block`) into ``out`` from ``pos``:
    per step, per layer, the distinct experts of the streams ``sel`` in ascending id, as items
    ``layer · experts + expert``. ``mark`` as in :func:`scan_block` (zero again). Returns the
    position after the block's last request."""
    ns, nt, nl, nk = block.shape
    buf = np.empty(max(1, min(experts, sel.size * nk)), np.int64)
    for s in range(ns):
        for l in range(nl):
            stamp = c0 + s * nl + l + 1
            cnt = 0
            for i in range(sel.size):
                t = sel[i]
                for k in range(nk):
                    v = block[s, t, l, k]
                    if v < 0:
                        continue
                    if use_keep and not keep[l, v]:
                        continue
                    if mark[v] != stamp:
                        mark[v] = stamp
                        buf[cnt] = v
                        cnt += 1
            base = l * experts
            if cnt * cnt <= 4 * experts:  # few: an insertion sort
                for j in range(1, cnt):
                    x = buf[j]
                    i = j - 1
                    while i >= 0 and buf[i] > x:
                        buf[i + 1] = buf[i]
                        i -= 1
                    buf[i + 1] = x
                for j in range(cnt):
                    out[pos + j] = base + buf[j]
            else:  # many: a sweep of the layer's experts
                j = 0
                for e in range(experts):
                    if mark[e] == stamp:
                        out[pos + j] = base + e
                        j += 1
            pos += cnt
    return pos


@numba.njit(cache=True)
def runs_kernel(step, layer):  # pragma: no cover - compiled
    """Lookups of a stream given per request: (off, cstep), ``off`` the first request of each
    run of equal (step, layer) and the end, ``cstep`` each run's step."""
    n = step.size
    runs = 0
    for t in range(n):
        if t == 0 or step[t] != step[t - 1] or layer[t] != layer[t - 1]:
            runs += 1
    off = np.empty(runs + 1, np.int64)
    cstep = np.empty(runs, np.int64)
    r = 0
    for t in range(n):
        if t == 0 or step[t] != step[t - 1] or layer[t] != layer[t - 1]:
            off[r] = t
            cstep[r] = step[t]
            r += 1
    off[runs] = n
    return off, cstep


@numba.njit(cache=True)
def offsets_from_starts(start):  # pragma: no cover - compiled
    """``off`` of the lookups that ``start`` (bool per request) begins; request 0 always begins one."""
    n = start.size
    runs = 0
    for t in range(n):
        if t == 0 or start[t]:
            runs += 1
    off = np.empty(runs + 1, np.int64)
    r = 0
    for t in range(n):
        if t == 0 or start[t]:
            off[r] = t
            r += 1
    off[runs] = n
    return off


@numba.njit(cache=True)
def starts_from_offsets(off, n):  # pragma: no cover - compiled
    """Bool (n,): the first request of each non-empty lookup of ``off``."""
    out = np.zeros(n, np.bool_)
    for c in range(off.size - 1):
        if off[c] < off[c + 1]:
            out[off[c]] = True
    return out


@numba.njit(cache=True)
def subset_offsets(off, keep):  # pragma: no cover - compiled
    """``off`` of the same lookups in the stream of the requests ``keep`` (bool) keeps."""
    out = np.zeros(off.size, np.int64)
    m = 0
    for c in range(off.size - 1):
        for t in range(off[c], off[c + 1]):
            if keep[t]:
                m += 1
        out[c + 1] = m
    return out


@numba.njit(cache=True)
def count_items(items, n_items):  # pragma: no cover - compiled
    """Requests per item id 0..n_items−1 (int64), as ``np.bincount`` but without its int64 copy
    of the ids (8 bytes a request)."""
    out = np.zeros(n_items, np.int64)
    for t in range(items.size):
        out[items[t]] += 1
    return out


@numba.njit(cache=True)
def next_use_kernel(items, n_items, out):  # pragma: no cover - compiled
    """out[t] = index of the next request of items[t], ``n`` when none (a backward pass)."""
    n = items.size
    last = np.empty(n_items, np.int64)
    last[:] = n
    for t in range(n - 1, -1, -1):
        x = items[t]
        out[t] = last[x]
        last[x] = t


# ----------------------------------------------------------------------------- the policies
#
# Every policy kernel walks the lookups ``off`` (request ``off[c]`` to ``off[c + 1]`` form lookup
# c, of step ``cstep[c]``): a request is judged as its lookup starts, or in its own turn with
# ``per_request`` (a lookup's flags wait in ``hbuf``), and is counted into the per-step hits,
# misses and streamed bytes (``wsize[item]`` per miss when ``weighted``; steps outside
# 0..steps−1 are not counted), in request order, and into ``hit_out`` when that is not empty
# (``simulate(..., return_hits=True)``). They return (hits, misses, streamed) per step. The
# counting is written out in each kernel: a helper called per request cost 20 times the loop.


@numba.njit(cache=True)
def longest(off):  # pragma: no cover - compiled
    """The most requests of one lookup of ``off``."""
    m = 0
    for ci in range(off.size - 1):
        m = max(m, off[ci + 1] - off[ci])
    return m


@numba.njit(cache=True, inline="always")
def tally(
    h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize, streamed
):  # pragma: no cover - compiled
    """One request's outcome: its hit flag (when kept) and, in a counted step, a hit or a miss
    with the bytes the miss streams. Every policy kernel accounts through this one helper."""
    if keep_hits:
        hit_out[t] = h
    if counted:
        if h:
            hits[st] += 1
        else:
            misses[st] += 1
            if weighted:
                streamed[st] += wsize[x]


@numba.njit(cache=True)
def lru_pass(
    items, group, cap, size, off, cstep, per_request, steps, wsize, weighted, hit_out
):  # pragma: no cover - compiled
    """LRU with one doubly linked list per group (sentinel node n_items + g).

    A request hits when its item is cached as its lookup starts; the list then evolves request
    by request.
    """
    n_items = group.size
    n_groups = cap.size
    total = n_items + n_groups
    prv = np.empty(total, np.int64)
    nxt = np.empty(total, np.int64)
    for h0 in range(n_items, total):
        prv[h0] = h0
        nxt[h0] = h0
    cached = np.zeros(n_items, np.bool_)
    used = np.zeros(n_groups)
    hits = np.zeros(steps, np.int64)
    misses = np.zeros(steps, np.int64)
    streamed = np.zeros(steps, np.float64)
    hbuf = np.zeros(longest(off), np.bool_)
    keep_hits = hit_out.size > 0
    for ci in range(off.size - 1):
        a = off[ci]
        b = off[ci + 1]
        st = cstep[ci]
        counted = st >= 0 and st < steps
        if not per_request:
            for u in range(a, b):
                hbuf[u - a] = cached[items[u]]
        for t in range(a, b):
            x = items[t]
            h = (cached[x]) if per_request else hbuf[t - a]
            tally(h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize, streamed)
            g = group[x]
            h0 = n_items + g
            if cached[x]:
                p = prv[x]
                q = nxt[x]
                nxt[p] = q
                prv[q] = p
            else:
                sz = size[x]
                if sz > cap[g]:
                    continue
                while used[g] + sz > cap[g]:
                    if prv[h0] == h0:  # empty, the sum a rounding residue of inexact sizes
                        used[g] = 0.0
                        break
                    v = prv[h0]
                    p = prv[v]
                    nxt[p] = h0
                    prv[h0] = p
                    cached[v] = False
                    used[g] -= size[v]
                cached[x] = True
                used[g] += sz
            q = nxt[h0]
            nxt[h0] = x
            prv[x] = h0
            nxt[x] = q
            prv[q] = x
    return hits, misses, streamed


@numba.njit(cache=True)
def lru_kernel(items, group, cap, size, start):  # pragma: no cover - compiled
    """:func:`lru_pass` on lookups given as ``start`` flags (bool per request); hit flags
    (``benchmarks/run.py`` times this)."""
    off = offsets_from_starts(start)
    hit = np.zeros(items.size, np.bool_)
    cstep = np.zeros(max(off.size - 1, 0), np.int64)
    lru_pass(items, group, cap, size, off, cstep, False, 0, np.zeros(1), False, hit)
    return hit


@numba.njit(cache=True)
def static_pass(items, mask, off, cstep, steps, wsize, weighted, hit_out):  # pragma: no cover - compiled
    """A pinned set ``mask`` (bool per item), each item loaded on its first request: that
    request misses, later ones of a pinned item hit."""
    seen = np.zeros(mask.size, np.bool_)
    hits = np.zeros(steps, np.int64)
    misses = np.zeros(steps, np.int64)
    streamed = np.zeros(steps, np.float64)
    keep_hits = hit_out.size > 0
    for ci in range(off.size - 1):
        st = cstep[ci]
        counted = st >= 0 and st < steps
        for t in range(off[ci], off[ci + 1]):
            x = items[t]
            h = mask[x] and seen[x]
            seen[x] = True
            tally(h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize, streamed)
    return hits, misses, streamed


@numba.njit(cache=True)
def sift(heap, hpos, key, base, size, i):  # pragma: no cover - compiled
    """Restore the min-heap order of heap[base : base + size] around local index i."""
    x = heap[base + i]
    kx = key[x]
    while i > 0:  # up
        parent = (i - 1) >> 1
        y = heap[base + parent]
        if key[y] <= kx:
            break
        heap[base + i] = y
        hpos[y] = i
        i = parent
    while True:  # down
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and key[heap[base + c + 1]] < key[heap[base + c]]:
            c += 1
        y = heap[base + c]
        if key[y] >= kx:
            break
        heap[base + i] = y
        hpos[y] = i
        i = c
    heap[base + i] = x
    hpos[x] = i


#: ``heap_kernel`` modes: the policy each one runs (:mod:`moeroof.models.cache` documents them)
HEAP_LFU = 0  # in-cache LFU: an evicted item's count is forgotten (libCacheSim LFU)
HEAP_LFU_PERFECT = 1  # perfect LFU: counts run over the whole stream, evicted or not
HEAP_BELADY = 2  # Belady MIN that may bypass the incoming item
HEAP_BELADY_INSERT = 3  # Belady MIN that inserts every miss (libCacheSim Belady)


@numba.njit(cache=True)
def heap_pass(  # noqa: C901
    items, group, cap, size, mode, nexts, off, cstep, per_request, steps, wsize, weighted, hit_out
):  # pragma: no cover - compiled
    """One min-heap of keys per group; evict the minimum. ``mode`` (the ``HEAP_*`` constants):
    LFU (key = count·2^31 + time of the last request — 2^40 on a stream of 2^31 requests or
    more — so that counts up to the stream's length never overflow: fewest requests first, ties to the least
    recently used) with counts forgotten on eviction (``HEAP_LFU``) or kept (``HEAP_LFU_PERFECT``);
    Belady MIN (key = −next use: farthest next use first) bypassing the incoming item when its own
    next use is farther still (``HEAP_BELADY``) or inserting it always (``HEAP_BELADY_INSERT``).

    Hits are judged and counted as in :func:`lru_pass`.
    """
    n_items = group.size
    n_groups = cap.size
    hoff = np.zeros(n_groups + 1, np.int64)
    for x in range(n_items):
        hoff[group[x] + 1] += 1
    for g in range(n_groups):
        hoff[g + 1] += hoff[g]
    heap = np.empty(max(n_items, 1), np.int64)
    hsize = np.zeros(n_groups, np.int64)
    hpos = np.full(n_items, -1, np.int64)
    key = np.zeros(n_items, np.int64)
    freq = np.zeros(n_items, np.int64)
    used = np.zeros(n_groups)
    belady = mode >= HEAP_BELADY
    bypass = mode == HEAP_BELADY
    shift = 31 if items.size < 2**31 else 40  # count · 2^shift + t: the (count, t) order, no overflow
    forget = mode == HEAP_LFU
    hits = np.zeros(steps, np.int64)
    misses = np.zeros(steps, np.int64)
    streamed = np.zeros(steps, np.float64)
    hbuf = np.zeros(longest(off), np.bool_)
    keep_hits = hit_out.size > 0
    for ci in range(off.size - 1):
        a = off[ci]
        b = off[ci + 1]
        st = cstep[ci]
        counted = st >= 0 and st < steps
        if not per_request:
            for u in range(a, b):
                hbuf[u - a] = hpos[items[u]] >= 0
        for t in range(a, b):
            x = items[t]
            h = (hpos[x] >= 0) if per_request else hbuf[t - a]
            tally(h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize, streamed)
            g = group[x]
            base = hoff[g]
            if belady:
                k = -nexts[t]
            else:
                freq[x] += 1
                k = (freq[x] << shift) | t
            if hpos[x] >= 0:
                key[x] = k
                sift(heap, hpos, key, base, hsize[g], hpos[x])
                continue
            sz = size[x]
            if sz > cap[g]:
                continue
            while used[g] + sz > cap[g]:
                if hsize[g] <= 0:  # empty, the sum a rounding residue of inexact sizes
                    used[g] = 0.0
                    break
                top = heap[base]
                if bypass and key[top] >= k:
                    break  # every cached item is needed no later than x: bypass x
                hsize[g] -= 1
                last = heap[base + hsize[g]]
                hpos[top] = -1
                used[g] -= size[top]
                if forget:
                    freq[top] = 0  # in-cache LFU: the item comes back with a count of 1
                if last != top:
                    heap[base] = last
                    hpos[last] = 0
                    sift(heap, hpos, key, base, hsize[g], 0)
            if used[g] + sz > cap[g]:
                continue
            key[x] = k
            i = hsize[g]
            hsize[g] += 1
            heap[base + i] = x
            hpos[x] = i
            used[g] += sz
            sift(heap, hpos, key, base, hsize[g], i)
    return hits, misses, streamed


@numba.njit(cache=True)
def s3fifo_pass(  # noqa: C901
    items, group, cap, size, small_fraction, threshold, off, cstep, per_request, steps, wsize, weighted, hit_out
):  # pragma: no cover - compiled
    """S3-FIFO (Yang et al. 2023, original version: libCacheSim ``S3FIFOv0``); lists S, M, G per
    group; hits judged and counted as in :func:`lru_pass`.

    The small queue's share is ``floor(small_fraction · capacity)`` as libCacheSim sizes it;
    S is evicted from unless M holds more than the rest or S is empty. An item leaves S for M
    after ``threshold`` hits in S; hits are counted up to ``max(3, threshold)`` and an item
    reinserted into M keeps ``min(count, 3) − 1`` (the 2-bit clock)."""
    n_items = group.size
    n_groups = cap.size
    total = n_items + 3 * n_groups
    prv = np.empty(total, np.int64)
    nxt = np.empty(total, np.int64)
    for s in range(n_items, total):
        prv[s] = s
        nxt[s] = s
    where = np.zeros(n_items, np.int8)  # 0 none, 1 S, 2 M, 3 G
    freq = np.zeros(n_items, np.int64)
    sb = np.zeros(n_groups)
    mb = np.zeros(n_groups)
    gb = np.zeros(n_groups)
    fmax = max(3, threshold)
    hits = np.zeros(steps, np.int64)
    misses = np.zeros(steps, np.int64)
    streamed = np.zeros(steps, np.float64)
    hbuf = np.zeros(longest(off), np.bool_)
    keep_hits = hit_out.size > 0
    for ci in range(off.size - 1):
        a = off[ci]
        b = off[ci + 1]
        st = cstep[ci]
        counted = st >= 0 and st < steps
        if not per_request:
            for u in range(a, b):
                hbuf[u - a] = where[items[u]] == 1 or where[items[u]] == 2
        for t in range(a, b):
            x = items[t]
            h = (where[x] == 1 or where[x] == 2) if per_request else hbuf[t - a]
            tally(h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize, streamed)
            g = group[x]
            w = where[x]
            if w == 1 or w == 2:
                if freq[x] < fmax:
                    freq[x] += 1
                continue
            sz = size[x]
            c = cap[g]
            if sz > c:
                continue
            hs = n_items + 3 * g
            hm = hs + 1
            hg = hs + 2
            if w == 3:  # leave the ghost before any eviction can trim it
                p = prv[x]
                q = nxt[x]
                nxt[p] = q
                prv[q] = p
                gb[g] -= size[x]
                where[x] = 0
            main_cap = c - math.floor(small_fraction * c)  # libCacheSim: (int64_t)(size · ratio)
            while sb[g] + mb[g] + sz > c:
                if sb[g] > 0 and mb[g] <= main_cap:
                    evicted = False
                    while not evicted and sb[g] > 0:
                        if prv[hs] == hs:  # S empty, sb a rounding residue of inexact sizes
                            sb[g] = 0.0
                            break
                        v = prv[hs]
                        p = prv[v]
                        nxt[p] = hs
                        prv[hs] = p
                        sb[g] -= size[v]
                        if freq[v] >= threshold:
                            dest = hm
                            where[v] = 2
                            freq[v] = 0
                            mb[g] += size[v]
                        else:
                            dest = hg
                            where[v] = 3
                            gb[g] += size[v]
                            evicted = True
                        q = nxt[dest]
                        nxt[dest] = v
                        prv[v] = dest
                        nxt[v] = q
                        prv[q] = v
                        if evicted:
                            while gb[g] > (1.0 - small_fraction) * c:
                                if prv[hg] == hg:  # G empty (a rounding residue)
                                    gb[g] = 0.0
                                    break
                                u = prv[hg]
                                p = prv[u]
                                nxt[p] = hg
                                prv[hg] = p
                                gb[g] -= size[u]
                                where[u] = 0
                else:
                    while True:
                        if prv[hm] == hm:  # M empty (a rounding residue)
                            mb[g] = 0.0
                            break
                        v = prv[hm]
                        p = prv[v]
                        nxt[p] = hm
                        prv[hm] = p
                        f = freq[v]
                        if f > 0:
                            freq[v] = min(f, 3) - 1
                            q = nxt[hm]
                            nxt[hm] = v
                            prv[v] = hm
                            nxt[v] = q
                            prv[q] = v
                        else:
                            mb[g] -= size[v]
                            where[v] = 0
                            break
            dest = hm if w == 3 else hs
            if w == 3:
                mb[g] += sz
                where[x] = 2
            else:
                sb[g] += sz
                where[x] = 1
            freq[x] = 0
            q = nxt[dest]
            nxt[dest] = x
            prv[x] = dest
            nxt[x] = q
            prv[q] = x
    return hits, misses, streamed


@numba.njit(cache=True)
def arc_pass(  # noqa: C901
    items, group, cap, off, cstep, per_request, steps, wsize, weighted, hit_out
):  # pragma: no cover - compiled
    """ARC (Megiddo & Modha 2003, Fig. 4), unit sizes; lists T1, T2, B1, B2 per group; hits
    judged and counted as in :func:`lru_pass`."""
    n_items = group.size
    n_groups = cap.size
    total = n_items + 4 * n_groups
    prv = np.empty(total, np.int64)
    nxt = np.empty(total, np.int64)
    for s in range(n_items, total):
        prv[s] = s
        nxt[s] = s
    where = np.zeros(n_items, np.int8)  # 0 none, 1 T1, 2 T2, 3 B1, 4 B2
    length = np.zeros(4 * n_groups, np.int64)
    p_target = np.zeros(n_groups)
    hits = np.zeros(steps, np.int64)
    misses = np.zeros(steps, np.int64)
    streamed = np.zeros(steps, np.float64)
    hbuf = np.zeros(longest(off), np.bool_)
    keep_hits = hit_out.size > 0
    for ci in range(off.size - 1):
        a = off[ci]
        b = off[ci + 1]
        st = cstep[ci]
        counted = st >= 0 and st < steps
        if not per_request:
            for u in range(a, b):
                hbuf[u - a] = (where[items[u]] == 1 or where[items[u]] == 2) and cap[group[items[u]]] >= 1
        for t in range(a, b):
            x = items[t]
            h = ((where[x] == 1 or where[x] == 2) and cap[group[x]] >= 1) if per_request else hbuf[t - a]
            tally(h, x, t, st, counted, keep_hits, hit_out, hits, misses, weighted, wsize, streamed)
            g = group[x]
            c = int(cap[g])
            if c <= 0:
                continue
            h0 = n_items + 4 * g  # T1, T2, B1, B2 sentinels at h0 + 0..3
            w = where[x]
            if w == 3:
                d = max(1.0, length[4 * g + 3] / max(length[4 * g + 2], 1))
                p_target[g] = min(p_target[g] + d, float(c))
            elif w == 4:
                d = max(1.0, length[4 * g + 2] / max(length[4 * g + 3], 1))
                p_target[g] = max(p_target[g] - d, 0.0)
            if w != 0:  # unlink from its list
                pp = prv[x]
                q = nxt[x]
                nxt[pp] = q
                prv[q] = pp
                length[4 * g + w - 1] -= 1
            if w == 0:
                l1 = length[4 * g] + length[4 * g + 2]
                if l1 == c:
                    if length[4 * g] < c:  # drop B1's LRU, then REPLACE
                        u = prv[h0 + 2]
                        pp = prv[u]
                        nxt[pp] = h0 + 2
                        prv[h0 + 2] = pp
                        length[4 * g + 2] -= 1
                        where[u] = 0
                        need_replace = True
                    else:  # drop T1's LRU outright
                        u = prv[h0]
                        pp = prv[u]
                        nxt[pp] = h0
                        prv[h0] = pp
                        length[4 * g] -= 1
                        where[u] = 0
                        need_replace = False
                else:
                    tot = l1 + length[4 * g + 1] + length[4 * g + 3]
                    if tot >= c:
                        if tot == 2 * c:  # drop B2's LRU
                            u = prv[h0 + 3]
                            pp = prv[u]
                            nxt[pp] = h0 + 3
                            prv[h0 + 3] = pp
                            length[4 * g + 3] -= 1
                            where[u] = 0
                        need_replace = True
                    else:
                        need_replace = False
            else:
                need_replace = w >= 3
            if need_replace and length[4 * g] + length[4 * g + 1] >= c:
                t1 = length[4 * g]
                if t1 >= 1 and (t1 > p_target[g] or (w == 4 and t1 == p_target[g])):
                    src, dst, wd = h0, h0 + 2, 3
                else:
                    src, dst, wd = h0 + 1, h0 + 3, 4
                u = prv[src]
                pp = prv[u]
                nxt[pp] = src
                prv[src] = pp
                length[4 * g + (src - h0)] -= 1
                q = nxt[dst]
                nxt[dst] = u
                prv[u] = dst
                nxt[u] = q
                prv[q] = u
                length[4 * g + wd - 1] += 1
                where[u] = wd
            dest = h0 if w == 0 else h0 + 1  # new items to T1, everything seen before to T2
            q = nxt[dest]
            nxt[dest] = x
            prv[x] = dest
            nxt[x] = q
            prv[q] = x
            length[4 * g + (dest - h0)] += 1
            where[x] = 1 if w == 0 else 2
    return hits, misses, streamed


@numba.njit(cache=True)
def stack_kernel(  # noqa: C901
    items, label, n_items, window, off, cstep, per_request, warm, out, hist
):  # pragma: no cover - compiled
    """LRU stack distances (0 = first reference) by a Fenwick tree over last-access positions.

    Items are relabelled on the fly (``label[item]`` in 0..n_items−1: no dense copy of the
    stream). A request's distance is taken as its lookup starts (the lookups ``off``, as in
    :func:`lru_pass`; every request its own with ``per_request``): the distinct items referenced
    since its previous reference and before that lookup, itself included. Written to ``out``
    (one per request) when it is not empty, and counted in ``hist`` (by distance, requests of
    lookups with ``cstep ≥ warm`` only when ``warm > 0``) when that is not empty — the curve
    needs the histogram only, not an array as long as the trace.

    Position slots are compacted (live marks renumbered 0..D−1, tree rebuilt in O(window))
    whenever the clock reaches ``window`` (> distinct items), so the tree stays small.
    """
    keep_out = out.size > 0
    keep_hist = hist.size > 0
    last = np.full(n_items, -1, np.int64)
    owner = np.full(window, -1, np.int64)
    tree = np.zeros(window + 1, np.int32)
    pos = 0
    live = 0
    for ci in range(off.size - 1):
        a = off[ci]
        b = off[ci + 1]
        counted = keep_hist and (warm <= 0 or cstep[ci] >= warm)
        for t in range(a, b):
            x = label[items[t]]
            if pos == window:
                k = 0
                for q in range(window):
                    o = owner[q]
                    if o >= 0:
                        owner[q] = -1
                        owner[k] = o
                        last[o] = k
                        k += 1
                tree[:] = 0
                for i in range(1, window + 1):
                    if i <= k:
                        tree[i] += 1
                    j = i + (i & -i)
                    if j <= window:
                        tree[j] += tree[i]
                pos = k
            if per_request or t == a:
                for u in range(t, t + 1 if per_request else b):
                    pu = last[label[items[u]]]
                    dist = 0
                    if pu >= 0:
                        s = 0
                        i = pu + 1
                        while i > 0:
                            s += tree[i]
                            i -= i & -i
                        dist = live - s + 1
                    if keep_out:
                        out[u] = dist
                    if counted:
                        hist[dist] += 1
            p = last[x]
            if p < 0:
                live += 1
            else:
                i = p + 1
                while i <= window:
                    tree[i] -= 1
                    i += i & -i
                owner[p] = -1
            i = pos + 1
            while i <= window:
                tree[i] += 1
                i += i & -i
            owner[pos] = x
            last[x] = pos
            pos += 1
