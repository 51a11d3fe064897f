"""The cache simulator's kernels in C (``models/native/*.c``), with the numba kernels as fallback.

Every function here has the name, arguments and results of the numba kernel of the same name
in :mod:`moeroof.models.cache_kernels`, and gives the same numbers bit for bit (the tests hold
each pair against each other). :mod:`moeroof.models.cache` calls these; each one runs its C
port when the library is built (:mod:`moeroof.core.native`: compiled at install) and the arguments are of the types the C takes (item ids int32, the usual case:
``requests_from_trace`` writes int32 ids below 2^31 items), and otherwise hands the call to the
numba kernel — so a machine without a C compiler gets the same results, only a slower start.

Why C beside numba: a process that calls one numba kernel pays ~0.45 s of numba
start-up; ``moeroof cache`` on a 10^6-request trace simulates in a hundredth of that. With the
C library loaded by :mod:`ctypes`, the commands that simulate caches never import numba.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from moeroof.core import native

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
    "uses_c",
    "c_function",
    "numba_kernels",
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
    "static_pass",
    "heap_pass",
    "s3fifo_pass",
    "arc_pass",
    "stack_kernel",
]

# the values of cache.h's MR_ID_* and MR_HEAP_* (and of cache_kernels' constants: a test checks)
ID_OK, ID_RANGE, ID_PARTIAL, ID_DUPLICATE = 0, 1, 2, 3
HEAP_LFU, HEAP_LFU_PERFECT, HEAP_BELADY, HEAP_BELADY_INSERT = 0, 1, 2, 3


_I64 = ctypes.c_int64
_INT = ctypes.c_int
_DBL = ctypes.c_double
_PTR = ctypes.c_void_p

#: argument types of each C function (``P`` a pointer, ``I`` int64, ``i`` int, ``D`` double)
_SIGNATURES = {
    "mr_count_runs": ("PI", _I64),
    "mr_offsets_from_starts": ("PIP", None),
    "mr_starts_from_offsets": ("PIIP", None),
    "mr_subset_offsets": ("PIPP", None),
    "mr_count_items": ("PIP", None),
    "mr_next_use": ("PIIP", _INT),
    "mr_longest": ("PI", _I64),
    "mr_lru_pass": ("PPIPIPPIPiIPiPPPP", _INT),
    "mr_static_pass": ("PPIPIPIPiPPPP", _INT),
    "mr_heap_pass": ("PPIPIPiPPIPiIPiPPPP", _INT),
    "mr_s3fifo_pass": ("PPIPIPDIPIPiIPiPPPP", _INT),
    "mr_arc_pass": ("PPIPIPIPiIPiPPPP", _INT),
    "mr_stack_kernel": ("PPIIPIPiIPP", _INT),
}
for _suf in ("_i8", "_i16", "_i32", "_i64"):
    _SIGNATURES["mr_scan_block" + _suf] = ("PIIIIIPIPiiPPPPIP", _INT)
    _SIGNATURES["mr_emit_block" + _suf] = ("PIIIIIPIPiPIPI", _I64)
_CODES = {"P": _PTR, "I": _I64, "i": _INT, "D": _DBL}
_BLOCK_SUFFIX = {
    np.dtype(np.int8): "_i8",
    np.dtype(np.int16): "_i16",
    np.dtype(np.int32): "_i32",
    np.dtype(np.int64): "_i64",
}


@functools.cache
def library():
    """The loaded C library (its functions typed), or None: not built at install, built from
    other sources, or ``MOEROOF_NATIVE=0`` (:func:`moeroof.core.native.status` says which).
    Tried once a process."""
    lib = native.load()
    if lib is not None:
        for fname, (codes, restype) in _SIGNATURES.items():
            fn = getattr(lib, fname, None)
            if fn is not None:
                fn.argtypes = [_CODES[c] for c in codes]
                fn.restype = restype
    return lib


def c_function(name: str):
    """The loaded C function ``name`` (typed), or None (no library, or no such function)."""
    lib = library()
    return None if lib is None else getattr(lib, name, None)


def uses_c(name: str = "mr_lru_pass") -> bool:
    """Whether the C function ``name`` is loaded (else the numba kernel runs)."""
    return c_function(name) is not None


def numba_kernels():
    """:mod:`moeroof.models.cache_kernels`, the fallback (imported, with numba, only when used)."""
    from moeroof.models import cache_kernels  # numba loads only on the fallback

    return cache_kernels


def _p(a: np.ndarray | None):
    """The data pointer of an array the C reads or writes in place (checked by the callers)."""
    return None if a is None else a.ctypes.data


def _in(a, dtype) -> np.ndarray:
    """An input as the C reads it: C-contiguous of ``dtype`` (a copy only when it is not)."""
    return np.ascontiguousarray(a, dtype=dtype)


def _flags(a) -> np.ndarray:
    """Bool flags as the C's uint8: a view of a contiguous bool array (no copy per block)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else a.astype(np.uint8)


def _is(a, dtype) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable


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
    if block.dtype not in _BLOCK_SUFFIX and block.dtype.kind == "u" and block.dtype.itemsize < 8:
        block = block.astype(np.int64)
    return np.ascontiguousarray(block)


def scan_block(block, experts, sel, keep, use_keep, strict, mark, tmark, ctr, cells, c0, err):
    block = _plain(block)
    fn = c_function("mr_scan_block" + _BLOCK_SUFFIX.get(block.dtype, "?"))
    if fn is None or not _is(cells, np.int32) or not all(_is(a, np.int64) for a in (mark, tmark, ctr, err)):
        return numba_kernels().scan_block(block, experts, sel, keep, use_keep, strict, mark, tmark, ctr, cells, c0, err)
    ns, nt, nl, nk = block.shape
    sel = _in(sel, np.int64)
    keep = _flags(keep)
    return int(
        fn(_p(block), ns, nt, nl, nk, int(experts), _p(sel), sel.size, _p(keep), int(bool(use_keep)),
           int(bool(strict)), _p(mark), _p(tmark), _p(ctr), _p(cells), int(c0), _p(err))
    )  # fmt: skip


def emit_block(block, experts, sel, keep, use_keep, mark, c0, out, pos):
    block = _plain(block)
    fn = c_function("mr_emit_block" + _BLOCK_SUFFIX.get(block.dtype, "?"))
    if fn is None or not (_is(out, np.int32) and _is(mark, np.int64)):
        return numba_kernels().emit_block(block, experts, sel, keep, use_keep, mark, c0, out, pos)
    ns, nt, nl, nk = block.shape
    sel = _in(sel, np.int64)
    keep = _flags(keep)
    return int(
        fn(_p(block), ns, nt, nl, nk, int(experts), _p(sel), sel.size, _p(keep), int(bool(use_keep)),
           _p(mark), int(c0), _p(out), int(pos))
    )  # fmt: skip


def runs_kernel(step, layer):
    """Lookups of a stream given per request (see ``cache_kernels.runs_kernel``), by numpy."""
    step = np.asarray(step)
    layer = np.asarray(layer)
    n = step.size
    if n == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, (step[1:] != step[:-1]) | (layer[1:] != layer[:-1])])
    return np.append(starts, n).astype(np.int64), step[starts].astype(np.int64)


def offsets_from_starts(start):
    fn = c_function("mr_offsets_from_starts")
    if fn is None:
        return numba_kernels().offsets_from_starts(start)
    start = _in(start, np.bool_)
    runs = int(library().mr_count_runs(_p(start), start.size))
    off = np.empty(runs + 1, np.int64)
    fn(_p(start), start.size, _p(off))
    return off


def starts_from_offsets(off, n):
    fn = c_function("mr_starts_from_offsets")
    if fn is None:
        return numba_kernels().starts_from_offsets(off, n)
    off = _in(off, np.int64)
    out = np.zeros(int(n), np.bool_)
    fn(_p(off), off.size - 1, int(n), _p(out))
    return out


def subset_offsets(off, keep):
    fn = c_function("mr_subset_offsets")
    if fn is None:
        return numba_kernels().subset_offsets(off, keep)
    off = _in(off, np.int64)
    keep = _in(keep, np.bool_)
    out = np.zeros(off.size, np.int64)
    fn(_p(off), off.size - 1, _p(keep), _p(out))
    return out


def count_items(items, n_items):
    fn = c_function("mr_count_items")
    if fn is None or items.dtype != np.int32:
        return numba_kernels().count_items(items, n_items)
    items = _in(items, np.int32)
    out = np.zeros(int(n_items), np.int64)
    fn(_p(items), items.size, _p(out))
    return out


def next_use_kernel(items, n_items, out):
    fn = c_function("mr_next_use")
    if fn is None or items.dtype != np.int32 or not _is(out, np.int32):
        return numba_kernels().next_use_kernel(items, n_items, out)
    items = _in(items, np.int32)
    _check(fn(_p(items), items.size, int(n_items), _p(out)))


def longest(off):
    fn = c_function("mr_longest")
    if fn is None:
        return numba_kernels().longest(off)
    off = _in(off, np.int64)
    return int(fn(_p(off), off.size - 1))


# ----------------------------------------------------------------------------- the policies


def _counts(steps: int):
    return np.zeros(steps, np.int64), np.zeros(steps, np.int64), np.zeros(steps, np.float64)


def _common(items, group, cap, off, cstep, wsize, hit_out):
    """The shared inputs as the C takes them, or None when ``items``/``hit_out`` are not C's types."""
    if items.dtype != np.int32 or not (hit_out.size == 0 or _is(hit_out, np.bool_)):
        return None
    return (_in(items, np.int32), _in(group, np.int64), _in(cap, np.float64), _in(off, np.int64),
            _in(cstep, np.int64), _in(wsize, np.float64))  # fmt: skip


def lru_pass(items, group, cap, size, off, cstep, per_request, steps, wsize, weighted, hit_out):
    fn = c_function("mr_lru_pass")
    c = None if fn is None else _common(items, group, cap, off, cstep, wsize, hit_out)
    if c is None:
        return numba_kernels().lru_pass(
            items, group, cap, size, off, cstep, per_request, steps, wsize, weighted, hit_out
        )
    items, group, cap, off, cstep, wsize = c
    size = _in(size, np.float64)
    hits, misses, streamed = _counts(steps)
    _check(
        fn(_p(items), _p(group), group.size, _p(cap), cap.size, _p(size), _p(off), off.size - 1, _p(cstep),
           int(bool(per_request)), int(steps), _p(wsize), int(bool(weighted)), _p(_opt(hit_out)),
           _p(hits), _p(misses), _p(streamed))
    )  # fmt: skip
    return hits, misses, streamed


def static_pass(items, mask, off, cstep, steps, wsize, weighted, hit_out):
    fn = c_function("mr_static_pass")
    if fn is None or items.dtype != np.int32 or not (hit_out.size == 0 or _is(hit_out, np.bool_)):
        return numba_kernels().static_pass(items, mask, off, cstep, steps, wsize, weighted, hit_out)
    items = _in(items, np.int32)
    mask = _in(mask, np.bool_)
    off = _in(off, np.int64)
    cstep = _in(cstep, np.int64)
    wsize = _in(wsize, np.float64)
    hits, misses, streamed = _counts(steps)
    _check(
        fn(_p(items), _p(mask), mask.size, _p(off), off.size - 1, _p(cstep), int(steps), _p(wsize),
           int(bool(weighted)), _p(_opt(hit_out)), _p(hits), _p(misses), _p(streamed))
    )  # fmt: skip
    return hits, misses, streamed


def heap_pass(items, group, cap, size, mode, nexts, off, cstep, per_request, steps, wsize, weighted, hit_out):
    fn = c_function("mr_heap_pass")
    belady = mode >= HEAP_BELADY
    c = None if fn is None else _common(items, group, cap, off, cstep, wsize, hit_out)
    if c is None or (belady and nexts.dtype != np.int32):
        return numba_kernels().heap_pass(
            items, group, cap, size, mode, nexts, off, cstep, per_request, steps, wsize, weighted, hit_out
        )
    items, group, cap, off, cstep, wsize = c
    size = _in(size, np.float64)
    nexts = _in(nexts, np.int32) if belady else np.zeros(1, np.int32)
    hits, misses, streamed = _counts(steps)
    _check(
        fn(_p(items), _p(group), group.size, _p(cap), cap.size, _p(size), int(mode), _p(nexts), _p(off),
           off.size - 1, _p(cstep), int(bool(per_request)), int(steps), _p(wsize), int(bool(weighted)),
           _p(_opt(hit_out)), _p(hits), _p(misses), _p(streamed))
    )  # fmt: skip
    return hits, misses, streamed


def s3fifo_pass(
    items, group, cap, size, small_fraction, threshold, off, cstep, per_request, steps, wsize, weighted, hit_out
):
    fn = c_function("mr_s3fifo_pass")
    c = None if fn is None else _common(items, group, cap, off, cstep, wsize, hit_out)
    if c is None:
        return numba_kernels().s3fifo_pass(
            items, group, cap, size, small_fraction, threshold, off, cstep, per_request, steps, wsize, weighted, hit_out
        )
    items, group, cap, off, cstep, wsize = c
    size = _in(size, np.float64)
    hits, misses, streamed = _counts(steps)
    _check(
        fn(_p(items), _p(group), group.size, _p(cap), cap.size, _p(size), float(small_fraction), int(threshold),
           _p(off), off.size - 1, _p(cstep), int(bool(per_request)), int(steps), _p(wsize), int(bool(weighted)),
           _p(_opt(hit_out)), _p(hits), _p(misses), _p(streamed))
    )  # fmt: skip
    return hits, misses, streamed


def arc_pass(items, group, cap, off, cstep, per_request, steps, wsize, weighted, hit_out):
    fn = c_function("mr_arc_pass")
    c = None if fn is None else _common(items, group, cap, off, cstep, wsize, hit_out)
    if c is None:
        return numba_kernels().arc_pass(items, group, cap, off, cstep, per_request, steps, wsize, weighted, hit_out)
    items, group, cap, off, cstep, wsize = c
    hits, misses, streamed = _counts(steps)
    _check(
        fn(_p(items), _p(group), group.size, _p(cap), cap.size, _p(off), off.size - 1, _p(cstep),
           int(bool(per_request)), int(steps), _p(wsize), int(bool(weighted)), _p(_opt(hit_out)),
           _p(hits), _p(misses), _p(streamed))
    )  # fmt: skip
    return hits, misses, streamed


def stack_kernel(items, label, n_items, window, off, cstep, per_request, warm, out, hist):
    fn = c_function("mr_stack_kernel")
    if (
        fn is None
        or items.dtype != np.int32
        or not (out.size == 0 or _is(out, np.int64))
        or not (hist.size == 0 or _is(hist, np.int64))
    ):
        return numba_kernels().stack_kernel(items, label, n_items, window, off, cstep, per_request, warm, out, hist)
    items = _in(items, np.int32)
    label = _in(label, np.int64)
    if label.size == int(n_items) and np.array_equal(label, np.arange(label.size)):
        label = None  # every id its own label (the usual stream: every item requested): one load less
    off = _in(off, np.int64)
    cstep = _in(cstep, np.int64)
    _check(
        fn(_p(items), _p(label), int(n_items), int(window), _p(off), off.size - 1, _p(cstep),
           int(bool(per_request)), int(warm), _p(_opt(out)), _p(_opt(hist)))
    )  # fmt: skip
