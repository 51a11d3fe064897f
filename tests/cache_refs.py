"""Pure-Python references of the cache simulator, written independently of moeroof.cachesim
and of its C kernels: the tests' oracles (tests/test_cache.py through ``simulate``,
tests/test_kernels_cache*.py kernel by kernel).

The policies: an OrderedDict LRU, Belady's MIN scanning the future for the farthest next use
(with and without bypass), in-cache and perfect LFU, S3-FIFO (as libCacheSim's S3FIFOv0 runs
it) and ARC from its paper's pseudo-code, each judging a request's hit as its lookup starts
(``starts``) or as it comes. :func:`kernel_pass` runs one over the kernels' interface (items,
groups with a capacity each, sizes, lookups counted per step) and returns what a kernel returns;
:func:`ref_stream_of`, :func:`ref_scan` and the small helpers answer the request-stream kernels.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np


def judged(items, starts, t, member, pre):
    """Hit flag of request t: its item's membership now, or as its lookup began (``starts``)."""
    if starts is None:
        return member(items[t])
    if starts[t]:
        pre.clear()
        u = t
        while True:
            pre[u] = member(items[u])
            u += 1
            if u >= len(items) or starts[u]:
                break
    return pre[t]


def ref_lru(items, cap_of, group_of, size, starts=None):
    caches = {}
    used = {}
    hits = []
    pre = {}
    for t, x in enumerate(items):
        g = group_of(x)
        c = caches.setdefault(g, OrderedDict())
        used.setdefault(g, 0.0)
        hits.append(judged(items, starts, t, lambda y: y in caches.get(group_of(y), ()), pre))
        if x in c:
            c.move_to_end(x)
            continue
        if size[x] > cap_of[g]:
            continue
        while used[g] + size[x] > cap_of[g]:
            v, _ = c.popitem(last=False)
            used[g] -= size[v]
        c[x] = True
        used[g] += size[x]
    return np.array(hits, dtype=bool)


def ref_next_uses(items):
    """next[t] = index of the next request of items[t] (len(items) if none), by scanning."""
    n = len(items)
    nxt = []
    for t in range(n):
        j = next((u for u in range(t + 1, n) if items[u] == items[t]), n)
        nxt.append(j)
    return nxt


def ref_belady(items, cap_of, group_of, size, starts=None, bypass=True):
    """MIN: evict the cached item used farthest in the future — unless x is farther still
    (``bypass``: x is not cached) — until x fits."""
    nxt = ref_next_uses(items)
    caches, used, hits, pre = {}, {}, [], {}
    for t, x in enumerate(items):
        g = group_of(x)
        c = caches.setdefault(g, {})  # item -> its next use
        used.setdefault(g, 0.0)
        hits.append(judged(items, starts, t, lambda y: y in caches.get(group_of(y), ()), pre))
        if x in c:
            c[x] = nxt[t]
            continue
        if size[x] > cap_of[g]:
            continue
        while used[g] + size[x] > cap_of[g]:
            far = max(c, key=lambda v: (c[v], -v)) if c else None
            if far is None or (bypass and c[far] <= nxt[t]):
                break
            used[g] -= size[far]
            del c[far]
        if used[g] + size[x] <= cap_of[g]:
            c[x] = nxt[t]
            used[g] += size[x]
    return np.array(hits, dtype=bool)


def ref_belady_insert(items, cap_of, group_of, size, starts=None):
    """MIN inserting every miss (libCacheSim's Belady)."""
    return ref_belady(items, cap_of, group_of, size, starts, bypass=False)


def ref_lfu(items, cap_of, group_of, size, starts=None, perfect=False):
    """In-cache LFU (an evicted item's count is forgotten; ``perfect``: counts survive eviction),
    ties to the least recently used."""
    freq, last = {}, {}
    caches, used, hits, pre = {}, {}, [], {}
    for t, x in enumerate(items):
        g = group_of(x)
        c = caches.setdefault(g, set())
        used.setdefault(g, 0.0)
        freq[x] = freq.get(x, 0) + 1 if perfect or x in c else 1
        last[x] = t
        hits.append(judged(items, starts, t, lambda y: y in caches.get(group_of(y), ()), pre))
        if x in c:
            continue
        if size[x] > cap_of[g]:
            continue
        while used[g] + size[x] > cap_of[g]:
            v = min(c, key=lambda y: (freq[y], last[y]))
            c.remove(v)
            used[g] -= size[v]
            if not perfect:
                del freq[v]
        c.add(x)
        used[g] += size[x]
    return np.array(hits, dtype=bool)


def ref_lfu_perfect(items, cap_of, group_of, size, starts=None):
    """Perfect LFU: counts over the whole stream survive eviction, ties to the least recently used."""
    return ref_lfu(items, cap_of, group_of, size, starts, perfect=True)


def ref_s3fifo(items, cap, starts=None, threshold=1, size=None, small_fraction=0.1):
    """S3-FIFO of Yang et al. (SOSP 2023) as libCacheSim's S3FIFOv0 runs it, one cache of
    ``cap`` (unit sizes, or ``size`` per item); OrderedDicts as FIFOs. M may hold
    cap − floor(small_fraction · cap) before S is evicted from, the ghost queue G holds at most
    (1 − small_fraction) · cap; hits are counted without a cap; an item leaves S for M after
    ``threshold`` hits, M reinserts with min(count, 3) − 1."""
    unit = size is None
    size = (lambda x: 1.0) if unit else size.__getitem__
    main_cap = cap - math.floor(small_fraction * cap)
    S, M, G = OrderedDict(), OrderedDict(), OrderedDict()  # first = tail (oldest)
    freq, hits, pre = {}, [], {}

    def total(q):
        # unit sizes: the count is the sum, exactly (re-adding 1,000 ones per eviction took 35 s)
        return float(len(q)) if unit else sum(size(v) for v in q)

    for t, x in enumerate(items):
        hits.append(judged(items, starts, t, lambda y: y in S or y in M, pre))
        if x in S or x in M:
            freq[x] += 1
            continue
        if size(x) > cap:
            continue
        ghost = G.pop(x, None) is not None
        while total(S) + total(M) + size(x) > cap:
            if total(M) > main_cap or not S:
                while True:
                    v, _ = M.popitem(last=False)
                    if freq[v] > 0:
                        freq[v] = min(freq[v], 3) - 1
                        M[v] = True
                    else:
                        break
            else:
                while S:
                    v, _ = S.popitem(last=False)
                    if freq[v] >= threshold:
                        freq[v] = 0
                        M[v] = True
                    else:
                        G[v] = True
                        while total(G) > (1 - small_fraction) * cap:
                            G.popitem(last=False)
                        break
        (M if ghost else S)[x] = True
        freq[x] = 0
    return np.array(hits, dtype=bool)


def ref_arc(items, c, starts=None):
    """ARC, Megiddo & Modha (FAST 2003) Fig. 4, cases I–IV; OrderedDict first = LRU end."""
    T1, T2, B1, B2 = OrderedDict(), OrderedDict(), OrderedDict(), OrderedDict()
    p = 0.0
    hits, pre = [], {}

    def replace(in_b2):
        if T1 and (len(T1) > p or (in_b2 and len(T1) == p)):
            v, _ = T1.popitem(last=False)
            B1[v] = True
        else:
            v, _ = T2.popitem(last=False)
            B2[v] = True

    for t, x in enumerate(items):
        if c < 1:
            hits.append(False)
            continue
        hits.append(judged(items, starts, t, lambda y: y in T1 or y in T2, pre))
        if x in T1 or x in T2:
            (T1 if x in T1 else T2).pop(x)
            T2[x] = True
            continue
        if x in B1:
            p = min(p + max(len(B2) / len(B1), 1.0), c)
            B1.pop(x)
            replace(False)
            T2[x] = True
        elif x in B2:
            p = max(p - max(len(B1) / len(B2), 1.0), 0.0)
            B2.pop(x)
            replace(True)
            T2[x] = True
        else:
            if len(T1) + len(B1) == c:
                if len(T1) < c:
                    B1.popitem(last=False)
                    replace(False)
                else:
                    T1.popitem(last=False)
            elif len(T1) + len(B1) + len(T2) + len(B2) >= c:
                if len(T1) + len(B1) + len(T2) + len(B2) == 2 * c:
                    B2.popitem(last=False)
                replace(False)
            T1[x] = True
    return np.array(hits, dtype=bool)


# ----------------------------------------------------------------------------- the kernels' interface


def starts_of(off, n, per_request):
    """Lookup-start flags (None: every request judged as it comes) of the lookups ``off``."""
    if per_request:
        return None
    st = [False] * n
    for a, b in zip(off[:-1], off[1:]):
        if b > a:
            st[a] = True
    return st


def policy_hits(kind, items, group, cap, size, starts, **kw):
    """Hit flags of one policy over the stream, each group its own cache of ``cap[group]``
    (``static``: the pinned set ``mask``, each item loaded on its first request)."""
    items = [int(x) for x in items]
    group = [int(g) for g in group]
    if kind == "static":
        seen, hits, pre = set(), [], {}
        for t, x in enumerate(items):
            hits.append(judged(items, starts, t, lambda y: bool(kw["mask"][y]) and y in seen, pre))
            seen.add(x)
        return np.array(hits, dtype=bool)
    if kind in ("lru", "lfu", "lfu-perfect", "belady", "belady-insert"):
        ref = {"lru": ref_lru, "lfu": ref_lfu, "lfu-perfect": ref_lfu_perfect, "belady": ref_belady,
               "belady-insert": ref_belady_insert}[kind]  # fmt: skip
        cap_of = {g: float(c) for g, c in enumerate(cap)}
        return ref(items, cap_of, group.__getitem__, np.asarray(size, float), starts)
    # S3-FIFO and ARC: the groups' caches are independent, so each runs on its own requests, a
    # lookup starting for a group at its first request in the lookup
    lookup = np.cumsum(starts) if starts is not None else None
    hits = np.zeros(len(items), bool)
    for g, c in enumerate(cap):
        idx = [t for t, x in enumerate(items) if group[x] == g]
        sub = [items[t] for t in idx]
        sub_starts = None
        if starts is not None:
            sub_starts = [i == 0 or lookup[idx[i - 1]] != lookup[t] for i, t in enumerate(idx)]
        if kind == "s3fifo":
            got = ref_s3fifo(sub, float(c), sub_starts, kw["threshold"], np.asarray(size, float), kw["small_fraction"])
        elif kind == "arc":
            got = ref_arc(sub, math.floor(c), sub_starts)
        else:
            raise ValueError(kind)
        hits[idx] = got
    return hits


def kernel_pass(kind, items, group, cap, size, off, cstep, per_request, steps, wsize, weighted, **kw):
    """(hits, misses, streamed, flags): what a policy kernel of moeroof.kernels.cache
    returns, by the references — lookup c (requests off[c] … off[c+1] − 1) counts in step
    cstep[c] when that lies in 0 … steps − 1, a miss streaming wsize[item] when ``weighted``,
    added in request order."""
    n = int(off[-1]) if len(off) else 0
    flags = policy_hits(kind, items[:n], group, cap, size, starts_of(list(off), n, per_request), **kw)
    hits = np.zeros(steps, np.int64)
    misses = np.zeros(steps, np.int64)
    streamed = np.zeros(steps, np.float64)
    for c in range(len(off) - 1):
        st = int(cstep[c])
        if not 0 <= st < steps:
            continue
        for t in range(off[c], off[c + 1]):
            if flags[t]:
                hits[st] += 1
            else:
                misses[st] += 1
                if weighted:
                    streamed[st] += wsize[items[t]]
    return hits, misses, streamed, np.asarray(flags, bool)


def ref_next_use(items) -> np.ndarray:
    """next[t]: the index of the next request of items[t], len(items) when none (a scan)."""
    return np.array(ref_next_uses(list(items)), dtype=np.int64)


def ref_stack_distances(items, starts=None):
    """LRU stack distance of every request, judged as its lookup starts (every request its own
    lookup when ``starts`` is None): the distinct items referenced from its last reference
    before the lookup to the lookup's start, itself included; 0 when it had none."""
    items = list(items)
    out = []
    begin = 0
    for t, x in enumerate(items):
        if starts is None or starts[t]:
            begin = t
        prev = max((u for u in range(begin) if items[u] == x), default=None)
        out.append(0 if prev is None else len(set(items[prev:begin])))
    return np.array(out, dtype=np.int64)


# ----------------------------------------------------------------------------- the request stream


def ref_stream_of(block, experts, sel=None, keep=None):
    """(items, cells) of a trace block (steps, streams, layers, K): per step, per layer, the
    distinct experts of the streams ``sel`` (kept where ``keep[layer, expert]``), ascending, as
    ``layer · experts + expert``; ``cells`` the requests of each (step, layer)."""
    steps, streams, layers, _ = block.shape
    sel = range(streams) if sel is None else sel
    items, cells = [], []
    for s in range(steps):
        for layer in range(layers):
            ids = {int(e) for t in sel for e in block[s, t, layer] if e >= 0}
            if keep is not None:
                ids = {e for e in ids if keep[layer, e]}
            cells.append(len(ids))
            items += [layer * experts + e for e in sorted(ids)]
    return np.array(items, dtype=np.int64), np.array(cells, dtype=np.int64)


def ref_scan(block, experts, sel, strict):
    """The first bad id of a block as read_trace names it: (kind, (step, stream, layer, k, id)),
    kind 0 when none, 1 an id outside [-1, E), 2 a token partly padding (at its first -1),
    3 an expert twice in a token (at the repeat). Lenient (not ``strict``): only the streams
    ``sel``, for range."""
    steps, streams, layers, nk = block.shape
    if not strict:
        for s in range(steps):
            for t in sel:
                for layer in range(layers):
                    for k in range(nk):
                        v = int(block[s, t, layer, k])
                        if v < -1 or v >= experts:
                            return 1, (s, int(t), layer, k, v)
        return 0, None
    cells = [(s, t, layer) for s in range(steps) for t in range(streams) for layer in range(layers)]
    for s, t, layer in cells:
        for k in range(nk):
            v = int(block[s, t, layer, k])
            if v < -1 or v >= experts:
                return 1, (s, t, layer, k, v)
    for s, t, layer in cells:
        tok = [int(v) for v in block[s, t, layer]]
        if -1 in tok and any(v != -1 for v in tok):
            return 2, (s, t, layer, tok.index(-1), -1)
    for s, t, layer in cells:
        tok = [int(v) for v in block[s, t, layer]]
        for k, v in enumerate(tok):
            if v in tok[:k]:
                return 3, (s, t, layer, k, v)
    return 0, None
