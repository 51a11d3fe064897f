"""The cache simulator's kernels, in C (``kernels/native/*.c``), typed for :mod:`ctypes`.

:mod:`moeroof.cachesim` calls these; each one takes numpy arrays, hands the C its inputs as
the C reads them (C-contiguous, of the C's types: item ids int32, which ``requests_from_trace``
writes, the key space being below 2^31 items) and returns what the C wrote. The library is
compiled at install (:mod:`moeroof.kernels.loader`); without it the first call raises
:class:`moeroof.kernels.loader.NativeBuildError`, saying what builds it. The algorithms are
documented in the C and in docs/models.md; the tests hold each kernel against a pure-Python
reference (tests/cache_refs.py).
"""

from __future__ import annotations

import functools

import numpy as np

from moeroof.kernels import loader

__all__ = [
    "ID_OK",
    "ID_RANGE",
    "ID_PARTIAL",
    "ID_DUPLICATE",
    "HEAP_LFU",
    "HEAP_LFU_PERFECT",
    "HEAP_BELADY",
    "HEAP_BELADY_INSERT",
    "library",
    "c_function",
    "scan_block",
    "emit_block",
    "runs_kernel",
    "offsets_from_starts",
    "starts_from_offsets",
    "subset_offsets",
    "count_items",
    "next_use_kernel",
    "lru_pass",
    "static_pass",
    "heap_pass",
    "s3fifo_pass",
    "arc_pass",
    "stack_kernel",
]

# the values of cache.h's MR_ID_* and MR_HEAP_*
ID_OK, ID_RANGE, ID_PARTIAL, ID_DUPLICATE = 0, 1, 2, 3
HEAP_LFU, HEAP_LFU_PERFECT, HEAP_BELADY, HEAP_BELADY_INSERT = 0, 1, 2, 3


#: argument codes of each C function and its result's (:func:`moeroof.kernels.loader.typed`)
_SIGNATURES = {
    "mr_count_runs": ("PI", "I"),
    "mr_offsets_from_starts": ("PIP", None),
    "mr_starts_from_offsets": ("PIIP", None),
    "mr_subset_offsets": ("PIPP", None),
    "mr_count_items": ("PIP", None),
    "mr_next_use": ("PIIP", "i"),
    "mr_lru_pass": ("PPIPIPPIPiIPiPPPP", "i"),
    "mr_static_pass": ("PPIPIPIPiPPPP", "i"),
    "mr_heap_pass": ("PPIPIPiPPIPiIPiPPPP", "i"),
    "mr_s3fifo_pass": ("PPIPIPDIPIPiIPiPPPP", "i"),
    "mr_arc_pass": ("PPIPIPIPiIPiPPPP", "i"),
    "mr_stack_kernel": ("PPIIPIPiIPP", "i"),
}
#: the suffix of the block kernels of each id type they take (``mr_scan_block_i8``, …)
_BLOCK_SUFFIX = {np.dtype(t): f"_i{8 * np.dtype(t).itemsize}" for t in (np.int8, np.int16, np.int32, np.int64)}
for _suf in _BLOCK_SUFFIX.values():
    _SIGNATURES["mr_scan_block" + _suf] = ("PIIIIIPIPiiPPPPIP", "i")
    _SIGNATURES["mr_emit_block" + _suf] = ("PIIIIIPIPiPIPI", "I")


#: the loaded C library, its functions typed (:class:`moeroof.kernels.loader.NativeBuildError` when it is not
#: built, or built from other sources); loaded once a process
library = functools.cache(functools.partial(loader.typed, _SIGNATURES))


def c_function(name: str):
    """The loaded C function ``name``, typed."""
    return getattr(library(), name)


def _p(a: np.ndarray | None):
    """The data pointer of an array the C reads or writes in place (checked by the callers)."""
    return None if a is None else a.ctypes.data


def _in(a, dtype) -> np.ndarray:
    """An input as the C reads it: C-contiguous of ``dtype`` (a copy only when it is not)."""
    return np.ascontiguousarray(a, dtype=dtype)


def _out(a: np.ndarray, dtype, what: str) -> np.ndarray:
    """An array the C writes in place: C-contiguous, writeable, of ``dtype`` (a caller's bug
    otherwise, said as a TypeError)."""
    if not (isinstance(a, np.ndarray) and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable):
        raise TypeError(f"{what}: the C kernels write a C-contiguous {np.dtype(dtype)} array here")
    return a


def _ids(items) -> np.ndarray:
    """Item ids as the C reads them: int32 (the key space is below 2^31 items: ``requests_from_trace``
    refuses a larger one)."""
    items = np.asarray(items)
    if items.dtype != np.int32:
        if items.size and (int(items.max()) >= 2**31 or int(items.min()) < -(2**31)):
            raise ValueError("item ids must lie below 2^31: the cache simulator keys its tables by int32 ids")
        items = items.astype(np.int32)
    return np.ascontiguousarray(items)


def _opt(a: np.ndarray):
    """An optional output: None (NULL) when empty."""
    return None if a.size == 0 else a


def _check(rc: int) -> None:
    if rc != 0:
        raise MemoryError("the cache simulator could not allocate its tables")


# ----------------------------------------------------------------------------- the request stream


def _plain(block: np.ndarray) -> np.ndarray:
    """A block as the C reads it: C-contiguous (a copy of the chunk of steps when the trace is a
    view, e.g. its first B streams), its ids of one of the four signed types (unsigned ones are
    read as int64: the same values)."""
    if block.dtype not in _BLOCK_SUFFIX:
        block = block.astype(np.int64)
    return np.ascontiguousarray(block)


def _c(a):
    """An argument as ctypes takes it: an array by its data pointer, a number as it is."""
    return _p(a) if isinstance(a, np.ndarray) else a


def _block_call(kind: str, block, experts, sel, keep, use_keep, *rest) -> int:
    """``mr_<kind>_block_<type>`` on a block of a trace: the arguments :func:`scan_block` and
    :func:`emit_block` share, then ``rest`` (arrays by their pointer)."""
    block = _plain(block)
    fn = c_function(f"mr_{kind}_block" + _BLOCK_SUFFIX[block.dtype])
    sel, keep = _in(sel, np.int64), np.ascontiguousarray(keep)
    keep = keep.view(np.uint8) if keep.dtype == np.bool_ else keep.astype(np.uint8)  # no copy of a bool array
    return int(
        fn(_p(block), *block.shape, int(experts), _p(sel), sel.size, _p(keep), int(bool(use_keep)), *map(_c, rest))
    )


def scan_block(block, experts, sel, keep, use_keep, strict, mark, tmark, ctr, cells, c0, err):
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
    _out(cells, np.int32, "cells")
    for a in (mark, tmark, ctr, err):
        _out(a, np.int64, "marks, counter, error")
    return _block_call(
        "scan", block, experts, sel, keep, use_keep, int(bool(strict)), mark, tmark, ctr, cells, int(c0), err
    )


def emit_block(block, experts, sel, keep, use_keep, mark, c0, out, pos):
    """Write the requests of a block (validated by :func:`scan_block`) into ``out`` from ``pos``:
    per step, per layer, the distinct experts of the streams ``sel`` in ascending id, as items
    ``layer · experts + expert``. ``mark`` as in :func:`scan_block` (zero again). Returns the
    position after the block's last request."""
    _out(out, np.int32, "items")
    _out(mark, np.int64, "marks")
    return _block_call("emit", block, experts, sel, keep, use_keep, mark, int(c0), out, int(pos))


def runs_kernel(step, layer):
    """Lookups of a stream given per request, by numpy: the offsets (runs + 1,) of its runs of
    equal (step, layer) and each run's step."""
    step = np.asarray(step)
    layer = np.asarray(layer)
    n = step.size
    if n == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, (step[1:] != step[:-1]) | (layer[1:] != layer[:-1])])
    return np.append(starts, n).astype(np.int64), step[starts].astype(np.int64)


def offsets_from_starts(start):
    """``off`` of the lookups that ``start`` (bool per request) begins; request 0 always begins one."""
    fn = c_function("mr_offsets_from_starts")
    start = _in(start, np.bool_)
    off = np.empty(int(library().mr_count_runs(_p(start), start.size)) + 1, np.int64)
    fn(_p(start), start.size, _p(off))
    return off


def starts_from_offsets(off, n):
    """Bool (n,): the first request of each non-empty lookup of ``off``."""
    fn = c_function("mr_starts_from_offsets")
    off, out = _in(off, np.int64), np.zeros(int(n), np.bool_)
    fn(_p(off), off.size - 1, int(n), _p(out))
    return out


def subset_offsets(off, keep):
    """``off`` of the same lookups in the stream of the requests ``keep`` (bool) keeps."""
    fn = c_function("mr_subset_offsets")
    off, keep = _in(off, np.int64), _in(keep, np.bool_)
    out = np.zeros(off.size, np.int64)
    fn(_p(off), off.size - 1, _p(keep), _p(out))
    return out


def count_items(items, n_items):
    """Requests per item id 0..n_items−1 (int64), as ``np.bincount`` but without its int64 copy
    of the ids (8 bytes a request)."""
    fn = c_function("mr_count_items")
    items, out = _ids(items), np.zeros(int(n_items), np.int64)
    fn(_p(items), items.size, _p(out))
    return out


def next_use_kernel(items, n_items, out):
    """out[t] = index of the next request of items[t], ``n`` when none (a backward pass)."""
    fn = c_function("mr_next_use")
    items = _ids(items)
    if out.dtype == np.int32:
        _check(fn(_p(items), items.size, int(n_items), _p(_out(out, np.int32, "next uses"))))
        return
    if items.size >= 2**31 - 1:
        raise ValueError("next uses of 2^31 requests or more: the C kernel writes int32 indices")
    nxt = np.empty(items.size, np.int32)
    _check(fn(_p(items), items.size, int(n_items), _p(nxt)))
    out[...] = nxt


# ----------------------------------------------------------------------------- the policies


def _pass(name, head, off, cstep, per_request, steps, wsize, weighted, hit_out):
    """Run the replay kernel ``name``: its own leading arguments ``head`` (arrays by their
    pointer), then the lookups (and, unless ``per_request`` is None, whether each request is its
    own lookup) and the inputs every replay shares, as the C takes them (``hit_out``, written in
    place, checked); (hits, misses, streamed) per step."""
    fn = c_function(name)
    if hit_out.size:
        _out(hit_out, np.bool_, "hit flags")
    off, cstep, wsize = _in(off, np.int64), _in(cstep, np.int64), _in(wsize, np.float64)
    hits, misses, streamed = np.zeros(steps, np.int64), np.zeros(steps, np.int64), np.zeros(steps, np.float64)
    lookups = [_p(off), off.size - 1, _p(cstep)] + ([] if per_request is None else [int(bool(per_request))])
    _check(
        fn(*map(_c, head), *lookups, int(steps), _p(wsize), int(bool(weighted)), _p(_opt(hit_out)), _p(hits),
           _p(misses), _p(streamed))
    )  # fmt: skip
    return hits, misses, streamed


def _policy_pass(name, items, group, cap, own, *tail):
    """Run the policy kernel ``name`` (every one but the pinned set's): the items, groups and
    capacities as the C takes them, then ``own``, the kernel's own arguments (arrays by their
    pointer), then ``tail`` as :func:`_pass` takes it."""
    group, cap = _in(group, np.int64), _in(cap, np.float64)
    return _pass(name, [_ids(items), group, group.size, cap, cap.size, *own], *tail)


def lru_pass(items, group, cap, size, off, cstep, per_request, steps, wsize, weighted, hit_out):
    """LRU with one doubly linked list per group (sentinel node n_items + g).

    A request hits when its item is cached as its lookup starts; the list then evolves request
    by request. Lookup c (requests ``off[c] … off[c+1] − 1``) counts in step ``cstep[c]`` when
    that lies in 0 … steps − 1: a hit, or a miss and (``weighted``) the bytes ``wsize[item]``
    it streams, added in request order; every request's flag goes to ``hit_out`` when it is not
    empty. Returns (hits, misses, streamed) per step.
    """
    tail = (off, cstep, per_request, steps, wsize, weighted, hit_out)
    return _policy_pass("mr_lru_pass", items, group, cap, [_in(size, np.float64)], *tail)


def static_pass(items, mask, off, cstep, steps, wsize, weighted, hit_out):
    """A pinned set ``mask`` (bool per item), each item loaded on its first request: that
    request misses, later ones of a pinned item hit."""
    mask = _in(mask, np.bool_)
    return _pass("mr_static_pass", [_ids(items), mask, mask.size], off, cstep, None, steps, wsize, weighted, hit_out)


def heap_pass(items, group, cap, size, mode, nexts, *tail):
    """One min-heap of keys per group; evict the minimum. ``mode`` (the ``HEAP_*`` constants):
    LFU (key = count·2^31 + time of the last request — 2^40 on a stream of 2^31 requests or
    more — so that counts up to the stream's length never overflow: fewest requests first, ties to the least
    recently used) with counts forgotten on eviction (``HEAP_LFU``) or kept (``HEAP_LFU_PERFECT``);
    Belady MIN (key = −next use: farthest next use first) bypassing the incoming item when its own
    next use is farther still (``HEAP_BELADY``) or inserting it always (``HEAP_BELADY_INSERT``).

    ``tail``: ``off, cstep, per_request, steps, wsize, weighted, hit_out``; hits are judged and
    counted as in :func:`lru_pass`.
    """
    nexts = _in(nexts, np.int32) if mode >= HEAP_BELADY else np.zeros(1, np.int32)
    return _policy_pass("mr_heap_pass", items, group, cap, [_in(size, np.float64), int(mode), nexts], *tail)


def s3fifo_pass(items, group, cap, size, small_fraction, threshold, *tail):
    """S3-FIFO (Yang et al. 2023, original version: libCacheSim ``S3FIFOv0``); lists S, M, G per
    group; ``tail`` and the hits as in :func:`heap_pass`.

    The small queue's share is ``floor(small_fraction · capacity)`` as libCacheSim sizes it;
    S is evicted from unless M holds more than the rest or S is empty. An item leaves S for M
    after ``threshold`` hits in S; hits are counted up to ``max(3, threshold)`` and an item
    reinserted into M keeps ``min(count, 3) − 1`` (the 2-bit clock)."""
    own = [_in(size, np.float64), float(small_fraction), int(threshold)]
    return _policy_pass("mr_s3fifo_pass", items, group, cap, own, *tail)


def arc_pass(items, group, cap, *tail):
    """ARC (Megiddo & Modha 2003, Fig. 4), unit sizes; lists T1, T2, B1, B2 per group; ``tail``
    and the hits as in :func:`heap_pass`."""
    return _policy_pass("mr_arc_pass", items, group, cap, [], *tail)


def stack_kernel(items, label, n_items, window, off, cstep, per_request, warm, out, hist):
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
    fn = c_function("mr_stack_kernel")
    for a in (out, hist):
        if a.size:
            _out(a, np.int64, "distances, histogram")
    items = _ids(items)
    label = _in(label, np.int64)
    if label.size == int(n_items) and np.array_equal(label, np.arange(label.size)):
        label = None  # every id its own label (the usual stream: every item requested): one load less
    off = _in(off, np.int64)
    cstep = _in(cstep, np.int64)
    _check(
        fn(_p(items), _p(label), int(n_items), int(window), _p(off), off.size - 1, _p(cstep),
           int(bool(per_request)), int(warm), _p(_opt(out)), _p(_opt(hist)))
    )  # fmt: skip
