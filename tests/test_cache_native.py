"""The C request-stream, LRU, pinned-set and stack kernels (models/native/stream.c, lru.c) against
the numba kernels they port (models/cache_kernels.py), bit for bit, through cache_native.

The policies of native/policies.c have their own file (test_cache_native_policies.py); the
pure-Python references of every kernel are in test_cache.py, which runs whichever backend loads.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeroof.models import cache, cache_kernels, cache_native

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on PATH: the numba kernels run")

PORTED = [
    "mr_scan_block_i8",
    "mr_scan_block_i16",
    "mr_scan_block_i32",
    "mr_scan_block_i64",
    "mr_emit_block_i16",
    "mr_count_runs",
    "mr_offsets_from_starts",
    "mr_starts_from_offsets",
    "mr_subset_offsets",
    "mr_count_items",
    "mr_next_use",
    "mr_longest",
    "mr_lru_pass",
    "mr_static_pass",
    "mr_stack_kernel",
]


@pytest.mark.parametrize("name", PORTED)
def test_the_c_function_is_loaded(name):
    # with a compiler on PATH the library builds: a missing function would quietly run numba
    assert cache_native.uses_c(name), name


def test_constants_agree_with_the_numba_kernels():
    for name in ("ID_OK", "ID_RANGE", "ID_PARTIAL", "ID_DUPLICATE", "HEAP_LFU", "HEAP_LFU_PERFECT", "HEAP_BELADY"):
        assert getattr(cache_native, name) == getattr(cache_kernels, name)
    assert cache_native.HEAP_BELADY_INSERT == cache_kernels.HEAP_BELADY_INSERT


def _trace(rng, steps, streams, layers, k, experts, pad, dtype):
    """Random (steps, streams, layers, k) ids: distinct experts per token, some padded tokens."""
    keys = rng.random((steps, streams, layers, experts))
    top = np.argsort(keys, axis=-1)[..., :k]
    top[rng.random((steps, streams, layers)) < pad] = -1
    return top.astype(dtype)


def _scan_both(block, experts, sel, keep, strict):
    out = []
    for mod in (cache_native, cache_kernels):
        nl = block.shape[2]
        cells = np.zeros(block.shape[0] * nl, np.int32)
        mark = np.zeros(experts, np.int64)
        tmark = np.zeros(experts, np.int64)
        ctr = np.zeros(1, np.int64)
        err = np.zeros(15, np.int64)
        use_keep = keep is not None
        kp = keep if use_keep else np.ones((1, 1), bool)
        kind = mod.scan_block(block, experts, sel, kp, use_keep, strict, mark, tmark, ctr, cells, 0, err)
        items = None
        if kind == 0:
            items = np.empty(int(cells.sum()), np.int32)
            mark[:] = 0
            end = mod.emit_block(block, experts, sel, kp, use_keep, mark, 0, items, 0)
            assert end == items.size
        out.append((int(kind), err[:5].tolist() if kind else None, cells, items))
    return out


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    steps=st.integers(1, 5),
    streams=st.integers(1, 6),
    layers=st.integers(1, 4),
    k=st.integers(1, 4),
    experts=st.sampled_from([4, 5, 9, 40, 200]),
    pad=st.sampled_from([0.0, 0.3]),
    dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64]),
    subset=st.booleans(),
    partition=st.booleans(),
    strict=st.booleans(),
)
def test_request_stream_kernels_equal_numba(
    seed, steps, streams, layers, k, experts, pad, dtype, subset, partition, strict
):
    rng = np.random.default_rng(seed)
    if dtype == np.int8 and experts > 127:
        experts = 100
    k = min(k, experts)
    block = _trace(rng, steps, streams, layers, k, experts, pad, dtype)
    sel = (
        np.sort(rng.choice(streams, size=rng.integers(1, streams + 1), replace=False)) if subset else np.arange(streams)
    )
    keep = rng.random((layers, experts)) < 0.6 if partition else None
    c, n = _scan_both(block, experts, sel.astype(np.int64), keep, strict)
    assert c[0] == n[0] and c[1] == n[1]
    np.testing.assert_array_equal(c[2], n[2])
    if c[3] is not None:
        np.testing.assert_array_equal(c[3], n[3])


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    "where,value",
    [((1, 2, 0, 1), 7), ((0, 0, 1, 0), -2), ((1, 0, 1, 1), -1), ((1, 1, 0, 1), "dup")],
)
def test_scan_names_the_same_first_bad_id(strict, where, value):
    rng = np.random.default_rng(5)
    block = _trace(rng, 3, 3, 2, 2, 6, 0.0, np.int16)
    s, t, l, kk = where
    if value == "dup":
        block[s, t, l, kk] = block[s, t, l, 0]
    else:
        block[s, t, l, kk] = value
    block[2, 0, 0, 0] = 99  # a later range error: the first error reported must be the earlier one
    c, n = _scan_both(block, 6, np.arange(3, dtype=np.int64), None, strict)
    assert c[0] == n[0] != 0
    assert c[1] == n[1]


def test_emit_sorts_short_and_long_cells_alike():
    # a cell of few experts (insertion sort) and one of many (the sweep) give the same ascending ids
    rng = np.random.default_rng(11)
    for experts, streams, k in [(1000, 2, 3), (16, 12, 8), (3, 5, 3)]:
        block = _trace(rng, 4, streams, 3, k, experts, 0.1, np.int32)
        c, n = _scan_both(block, experts, np.arange(streams, dtype=np.int64), None, False)
        np.testing.assert_array_equal(c[3], n[3])
        # ascending within each cell, each id once
        off = np.r_[0, np.cumsum(c[2])]
        for a, b in zip(off[:-1], off[1:]):
            cell = c[3][a:b]
            assert np.all(np.diff(cell) > 0)


def test_many_experts_mark_one_layer_at_a_time():
    # experts * layers beyond the marks kept at once (2^18): the layers go in groups
    rng = np.random.default_rng(3)
    experts = 70_000
    base = rng.integers(0, experts, size=(2, 3, 5, 1))
    block = ((base + np.arange(4) * 7) % experts).astype(np.int32)  # distinct ids per token
    block[rng.random((2, 3, 5)) < 0.2] = -1
    block[:, 1] = block[:, 0]  # streams that share experts: repeats within a cell
    c, n = _scan_both(block, experts, np.arange(3, dtype=np.int64), None, True)
    assert c[0] == n[0] == 0
    np.testing.assert_array_equal(c[2], n[2])
    np.testing.assert_array_equal(c[3], n[3])


def test_requests_from_trace_equals_the_numba_stream(monkeypatch):
    rng = np.random.default_rng(7)
    topk = _trace(rng, 9, 5, 4, 3, 30, 0.2, np.int16)
    part = rng.integers(0, 2, size=(4, 30))
    native = cache.requests_from_trace(topk, 30, streams=3, partition=part, rank=1, validate=True)
    monkeypatch.setattr(cache_native, "c_function", lambda name: None)  # every call to numba
    numba = cache.requests_from_trace(topk, 30, streams=3, partition=part, rank=1, validate=True)
    np.testing.assert_array_equal(native.items, numba.items)
    np.testing.assert_array_equal(native.cells, numba.cells)


def _lookups(rng, n, steps):
    cuts = np.sort(rng.choice(np.arange(1, max(n, 1)), size=min(max(n - 1, 0), rng.integers(0, 8)), replace=False))
    off = np.r_[0, cuts, n].astype(np.int64)
    cstep = np.sort(rng.integers(-1, steps + 2, size=off.size - 1)).astype(np.int64)
    return off, cstep


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(0, 300),
    n_items=st.integers(1, 30),
    groups=st.integers(1, 3),
    unit=st.booleans(),
    per_request=st.booleans(),
    weighted=st.booleans(),
    flags=st.booleans(),
    big=st.booleans(),
)
def test_lru_and_static_passes_equal_numba(seed, n, n_items, groups, unit, per_request, weighted, flags, big):
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, size=n).astype(np.int32)
    group = rng.integers(0, groups, size=n_items).astype(np.int64)
    cap = rng.uniform(0, n_items * (3 if big else 0.6), size=groups)
    cap[rng.random(groups) < 0.2] = 0.0
    size = np.ones(n_items) if unit else rng.uniform(0.2, 3.0, size=n_items)
    steps = 5
    off, cstep = _lookups(rng, n, steps)
    wsize = rng.uniform(0.5, 2.0, size=n_items) if weighted else np.zeros(1)
    res = []
    for mod in (cache_native, cache_kernels):
        hit = np.zeros(n if flags else 0, bool)
        out = mod.lru_pass(items, group, cap, size, off, cstep, per_request, steps, wsize, weighted, hit)
        mask = np.zeros(n_items, bool)
        mask[: n_items // 2] = True
        hit2 = np.zeros(n if flags else 0, bool)
        out2 = mod.static_pass(items, mask, off, cstep, steps, wsize, weighted, hit2)
        res.append((out, hit, out2, hit2))
    (a, ha, a2, ha2), (b, hb, b2, hb2) = res
    for x, y in zip(a + a2, b + b2):
        np.testing.assert_array_equal(x, y)  # streamed bytes too: the same sums in the same order
    np.testing.assert_array_equal(ha, hb)
    np.testing.assert_array_equal(ha2, hb2)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 400),
    n_items=st.integers(1, 40),
    per_request=st.booleans(),
    warm=st.integers(0, 3),
    distances=st.booleans(),
)
def test_stack_kernel_equals_numba(seed, n, n_items, per_request, warm, distances):
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, size=n).astype(np.int32)
    present = np.bincount(items, minlength=n_items) > 0
    label = np.cumsum(present, dtype=np.int64) - 1
    d = int(present.sum())
    off, cstep = _lookups(rng, n, 4)
    res = []
    for mod in (cache_native, cache_kernels):
        out = np.zeros(n if distances else 0, np.int64)
        hist = np.zeros(0 if distances else d + 1, np.int64)
        # a window just above D: compactions happen many times
        mod.stack_kernel(items, label, d, d + 1 + seed % 3, off, cstep, per_request, warm, out, hist)
        res.append((out, hist))
    np.testing.assert_array_equal(res[0][0], res[1][0])
    np.testing.assert_array_equal(res[0][1], res[1][1])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(0, 200), n_items=st.integers(1, 20))
def test_small_helpers_equal_numba(seed, n, n_items):
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, size=n).astype(np.int32)
    start = rng.random(n) < 0.3
    keep = rng.random(n) < 0.5
    off = cache_kernels.offsets_from_starts(start)
    np.testing.assert_array_equal(cache_native.offsets_from_starts(start), off)
    np.testing.assert_array_equal(cache_native.starts_from_offsets(off, n), cache_kernels.starts_from_offsets(off, n))
    np.testing.assert_array_equal(cache_native.subset_offsets(off, keep), cache_kernels.subset_offsets(off, keep))
    np.testing.assert_array_equal(cache_native.count_items(items, n_items), np.bincount(items, minlength=n_items))
    assert cache_native.longest(off) == cache_kernels.longest(off)
    a = np.empty(n, np.int32)
    b = np.empty(n, np.int32)
    cache_native.next_use_kernel(items, n_items, a)
    cache_kernels.next_use_kernel(items, n_items, b)
    np.testing.assert_array_equal(a, b)
    step = np.sort(rng.integers(0, 3, size=n)).astype(np.int32)
    layer = rng.integers(0, 2, size=n).astype(np.int16)
    for x, y in zip(cache_native.runs_kernel(step, layer), cache_kernels.runs_kernel(step, layer)):
        np.testing.assert_array_equal(x, y)


def test_unsupported_types_fall_back_to_numba():
    # int64 ids or int64 hit flags are not the C's: the numba kernel answers, the same numbers
    items = np.array([0, 1, 0, 2, 1, 0], np.int64)
    group = np.zeros(3, np.int64)
    off = np.array([0, 6], np.int64)
    cstep = np.zeros(1, np.int64)
    args = (group, np.array([2.0]), np.ones(3), off, cstep, True, 1, np.zeros(1), False, np.zeros(0, bool))
    a = cache_native.lru_pass(items, *args)
    b = cache_kernels.lru_pass(items.astype(np.int32), *args)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert a[0][0] == 1  # a cache of 2: 0 1 0 (hit) 2 (evicts 1) 1 (evicts 0) 0 (evicts 2)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 200), n_items=st.integers(2, 12), per_request=st.booleans())
def test_inexact_sizes_stop_evicting_an_empty_cache_alike(seed, n, n_items, per_request):
    """Sizes whose sums round (0.1, 0.3, 0.7 …) can leave a running sum above zero with nothing
    cached: every kernel, C and numba, then resets the sum instead of evicting from an empty
    list (before, numba's S3-FIFO looped forever and its heap read outside its tables)."""
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, size=n).astype(np.int32)
    group = np.zeros(n_items, np.int64)
    size = rng.choice([0.1, 0.2, 0.3, 0.7], size=n_items)
    cap = np.array([rng.choice([0.7, 0.9, 1.1])])
    off = np.array([0, n], np.int64) if per_request else np.r_[0:n:3, n].astype(np.int64)
    off = np.unique(off)
    cstep = np.zeros(off.size - 1, np.int64)
    nexts = np.empty(n, np.int32)
    cache_kernels.next_use_kernel(items, n_items, nexts)
    tail = (off, cstep, per_request, 1, size, True)

    def run(mod, name, hit):
        if name == "lru":
            return mod.lru_pass(items, group, cap, size, *tail, hit)
        if name == "s3fifo":
            return mod.s3fifo_pass(items, group, cap, size, 0.1, 1, *tail, hit)
        return mod.heap_pass(items, group, cap, size, int(name[-1]), nexts, *tail, hit)

    for name in ("lru", "s3fifo", "heap0", "heap1", "heap2", "heap3"):
        hc, hn = np.zeros(n, bool), np.zeros(n, bool)
        for x, y in zip(run(cache_native, name, hc), run(cache_kernels, name, hn)):
            np.testing.assert_array_equal(x, y, err_msg=name)
        np.testing.assert_array_equal(hc, hn, err_msg=name)


def test_the_s3fifo_rounding_case_that_hung_numba_ends():
    # found by the C port's tests: one cache of 0.9, sizes 0.3, 0.7, 0.1, 0.7 (numba looped forever)
    items = np.array([1, 2, 2, 1, 3, 0, 1, 2, 3, 0, 2, 1], np.int32)
    size = np.array([0.3, 0.7, 0.1, 0.7])
    args = (np.zeros(4, np.int64), np.array([0.9]), size, 0.1, 1, np.array([0, items.size], np.int64))
    tail = (np.zeros(1, np.int64), True, 1, size, True, np.zeros(0, bool))
    a = cache_kernels.s3fifo_pass(items, *args, *tail)
    b = cache_native.s3fifo_pass(items, *args, *tail)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert a[0][0] + a[1][0] == items.size


def test_a_view_of_the_first_streams_and_unsigned_ids_run_in_c(monkeypatch):
    # fit-routing hands the stream a view (trace[:, :B]); uint16 ids come from other tools
    rng = np.random.default_rng(2)
    topk = _trace(rng, 6, 5, 3, 2, 20, 0.0, np.int32)

    def refuse():
        raise AssertionError("fell back to the numba kernels")

    expected = cache.requests_from_trace(topk[:, :3].copy(), 20)
    monkeypatch.setattr(cache_native, "numba_kernels", refuse)
    view = cache.requests_from_trace(topk[:, :3], 20)
    unsigned = cache.requests_from_trace(topk[:, :3].astype(np.uint16), 20)
    for got in (view, unsigned):
        np.testing.assert_array_equal(got.items, expected.items)
        np.testing.assert_array_equal(got.cells, expected.cells)


@pytest.mark.parametrize("mode", [cache_kernels.HEAP_LFU, cache_kernels.HEAP_LFU_PERFECT])
def test_lfu_counts_past_2_to_the_23_do_not_overflow_the_key(mode):
    # the key was count · 2^40 + t: a count of 2^23 wrapped it negative, and the most requested
    # item became the first evicted. 0 requested 2^23 + 1 times, then 1, 2 (a cache of 2 evicts
    # 1, the least requested), then 0 again: a hit
    n0 = 2**23 + 1
    items = np.concatenate([np.zeros(n0, np.int32), np.array([1, 2, 0], np.int32)])
    off = np.array([0, items.size], np.int64)
    args = (np.zeros(3, np.int64), np.array([2.0]), np.ones(3), mode, np.zeros(1, np.int32), off)
    tail = (np.zeros(1, np.int64), True, 1, np.zeros(1), False)
    for mod in (cache_native, cache_kernels):
        hit = np.zeros(items.size, bool)
        mod.heap_pass(items, *args, *tail, hit)
        assert hit[-1], mod.__name__
        assert hit[1:n0].all() and not hit[n0] and not hit[n0 + 1]
