"""The compiled kernels behind :mod:`moeroof.models.cache` (numba, cached on disk).

Kept apart so that importing the cache model (or anything above it: the step model, the
command line's parsers) does not import numba: :mod:`moeroof.models.cache` imports this module
inside the functions that run a kernel. The algorithms are documented there; each kernel here
is the inner loop of one of them.

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
    "starts_kernel",
    "next_use_kernel",
    "first_uses_kernel",
    "per_step_kernel",
    "lru_kernel",
    "sift",
    "HEAP_LFU",
    "HEAP_LFU_PERFECT",
    "HEAP_BELADY",
    "HEAP_BELADY_INSERT",
    "heap_kernel",
    "arc_kernel",
    "stack_kernel",
    "s3fifo_kernel",
]


@numba.njit(cache=True)
def starts_kernel(step, layer):  # pragma: no cover - compiled
    """First request of each (step, layer) run: bool (n,), without the temporaries of a
    vectorised comparison (three arrays as long as the trace)."""
    n = step.size
    out = np.empty(n, np.bool_)
    for t in range(n):
        out[t] = t == 0 or step[t] != step[t - 1] or layer[t] != layer[t - 1]
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


@numba.njit(cache=True)
def first_uses_kernel(items, n_items, hit):  # pragma: no cover - compiled
    """Clear ``hit`` at each item's first request (a cold start); in place."""
    seen = np.zeros(n_items, np.bool_)
    for t in range(items.size):
        x = items[t]
        if not seen[x]:
            seen[x] = True
            hit[t] = False


@numba.njit(cache=True)
def per_step_kernel(step, hit, items, sizes, steps, weighted):  # pragma: no cover - compiled
    """Hits, misses and streamed bytes per step, summed in request order (as ``np.bincount``
    with weights sums: the same floats), without index arrays as long as the trace."""
    hits = np.zeros(steps, np.int64)
    misses = np.zeros(steps, np.int64)
    streamed = np.zeros(steps, np.float64)
    for t in range(step.size):
        s = step[t]
        if s < 0 or s >= steps:
            continue
        if hit[t]:
            hits[s] += 1
        else:
            misses[s] += 1
            if weighted:
                streamed[s] += sizes[items[t]]
    return hits, misses, streamed


@numba.njit(cache=True)
def lru_kernel(items, group, cap, size, start):  # pragma: no cover - compiled
    """LRU with one doubly linked list per group (sentinel node n_items + g); hit flags.

    A request hits when its item is cached as its lookup starts (``start`` marks the first
    request of each lookup, see :func:`lookup_starts`); the list then evolves request by request.
    """
    n = items.size
    n_items = group.size
    n_groups = cap.size
    total = n_items + n_groups
    prv = np.empty(total, np.int64)
    nxt = np.empty(total, np.int64)
    for s in range(n_items, total):
        prv[s] = s
        nxt[s] = s
    cached = np.zeros(n_items, np.bool_)
    used = np.zeros(n_groups)
    hit = np.zeros(n, np.bool_)
    for t in range(n):
        if start[t]:
            u = t
            while True:
                hit[u] = cached[items[u]]
                u += 1
                if u >= n or start[u]:
                    break
        x = items[t]
        g = group[x]
        s = n_items + g
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
                v = prv[s]
                p = prv[v]
                nxt[p] = s
                prv[s] = p
                cached[v] = False
                used[g] -= size[v]
            cached[x] = True
            used[g] += sz
        q = nxt[s]
        nxt[s] = x
        prv[x] = s
        nxt[x] = q
        prv[q] = x
    return hit


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
def heap_kernel(items, group, cap, size, mode, nexts, start):  # pragma: no cover - compiled
    """One min-heap of keys per group; evict the minimum. ``mode`` (the ``HEAP_*`` constants):
    LFU (key = count·2^40 + time of the last request: fewest requests first, ties to the least
    recently used) with counts forgotten on eviction (``HEAP_LFU``) or kept (``HEAP_LFU_PERFECT``);
    Belady MIN (key = −next use: farthest next use first) bypassing the incoming item when its own
    next use is farther still (``HEAP_BELADY``) or inserting it always (``HEAP_BELADY_INSERT``).

    Hits are judged as each lookup starts (``start``), as in :func:`lru_kernel`.
    """
    n = items.size
    n_items = group.size
    n_groups = cap.size
    off = np.zeros(n_groups + 1, np.int64)
    for x in range(n_items):
        off[group[x] + 1] += 1
    for g in range(n_groups):
        off[g + 1] += off[g]
    heap = np.empty(max(n_items, 1), np.int64)
    hsize = np.zeros(n_groups, np.int64)
    hpos = np.full(n_items, -1, np.int64)
    key = np.zeros(n_items, np.int64)
    freq = np.zeros(n_items, np.int64)
    used = np.zeros(n_groups)
    belady = mode >= HEAP_BELADY
    bypass = mode == HEAP_BELADY
    forget = mode == HEAP_LFU
    hit = np.zeros(n, np.bool_)
    for t in range(n):
        if start[t]:
            u = t
            while True:
                hit[u] = hpos[items[u]] >= 0
                u += 1
                if u >= n or start[u]:
                    break
        x = items[t]
        g = group[x]
        base = off[g]
        if belady:
            k = -nexts[t]
        else:
            freq[x] += 1
            k = (freq[x] << 40) | t
        if hpos[x] >= 0:
            key[x] = k
            sift(heap, hpos, key, base, hsize[g], hpos[x])
            continue
        sz = size[x]
        if sz > cap[g]:
            continue
        while used[g] + sz > cap[g]:
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
    return hit


@numba.njit(cache=True)
def s3fifo_kernel(items, group, cap, size, small_fraction, threshold, start):  # pragma: no cover - compiled
    """S3-FIFO (Yang et al. 2023, original version: libCacheSim ``S3FIFOv0``); lists S, M, G per
    group; hit flags judged as each lookup starts (``start``), as in :func:`lru_kernel`.

    The small queue's share is ``floor(small_fraction · capacity)`` as libCacheSim sizes it;
    S is evicted from unless M holds more than the rest or S is empty. An item leaves S for M
    after ``threshold`` hits in S; hits are counted up to ``max(3, threshold)`` and an item
    reinserted into M keeps ``min(count, 3) − 1`` (the 2-bit clock)."""
    n = items.size
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
    hit = np.zeros(n, np.bool_)
    for t in range(n):
        if start[t]:
            u = t
            while True:
                wu = where[items[u]]
                hit[u] = wu == 1 or wu == 2
                u += 1
                if u >= n or start[u]:
                    break
        x = items[t]
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
                            u = prv[hg]
                            p = prv[u]
                            nxt[p] = hg
                            prv[hg] = p
                            gb[g] -= size[u]
                            where[u] = 0
            else:
                while True:
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
    return hit


@numba.njit(cache=True)
def arc_kernel(items, group, cap, start):  # pragma: no cover - compiled
    """ARC (Megiddo & Modha 2003, Fig. 4), unit sizes; lists T1, T2, B1, B2 per group; hits
    judged as each lookup starts (``start``), as in :func:`lru_kernel`."""
    n = items.size
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
    hit = np.zeros(n, np.bool_)
    for t in range(n):
        if start[t]:
            u = t
            while True:
                wu = where[items[u]]
                hit[u] = (wu == 1 or wu == 2) and cap[group[items[u]]] >= 1
                u += 1
                if u >= n or start[u]:
                    break
        x = items[t]
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
    return hit


@numba.njit(cache=True)
def stack_kernel(items, label, n_items, window, start, step, warm, out, hist):  # pragma: no cover - compiled
    """LRU stack distances (0 = first reference) by a Fenwick tree over last-access positions.

    Items are relabelled on the fly (``label[item]`` in 0..n_items−1: no dense copy of the
    stream). A request's distance is taken as its lookup starts (``start``): the distinct items
    referenced since its previous reference and before that lookup, itself included. Written
    to ``out`` (one per request) when it is not empty, and counted in ``hist`` (by distance,
    requests with ``step ≥ warm`` only when ``warm > 0``) when that is not empty — the curve
    needs the histogram only, not an array as long as the trace.

    Position slots are compacted (live marks renumbered 0..D−1, tree rebuilt in O(window))
    whenever the clock reaches ``window`` (> distinct items), so the tree stays small.
    """
    n = items.size
    keep_out = out.size > 0
    keep_hist = hist.size > 0
    last = np.full(n_items, -1, np.int64)
    owner = np.full(window, -1, np.int64)
    tree = np.zeros(window + 1, np.int32)
    pos = 0
    live = 0
    for t in range(n):
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
        if start[t]:
            u = t
            while True:
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
                if keep_hist and (warm <= 0 or step[u] >= warm):
                    hist[dist] += 1
                u += 1
                if u >= n or start[u]:
                    break
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
