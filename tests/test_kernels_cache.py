"""The C request-stream, LRU, pinned-set and stack kernels (kernels/native/stream.c, lru.c)
against the pure-Python references of tests/cache_refs.py and numpy, through their wrappers in
moeroof.kernels.cache.

The policies of native/policies.c have their own file (test_kernels_cache_policies.py); the
simulator end to end is tests/test_cache.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache_refs import kernel_pass, ref_next_use, ref_scan, ref_stack_distances, ref_stream_of, starts_of
from moeroof import cachesim as cache
from moeroof.kernels import cache as cache_kernels
from moeroof.kernels import loader

CALLED = [
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
    "mr_lru_pass",
    "mr_static_pass",
    "mr_heap_pass",
    "mr_s3fifo_pass",
    "mr_arc_pass",
    "mr_stack_kernel",
]


@pytest.mark.parametrize("name", CALLED)
def test_every_c_function_is_loaded_and_typed(name):
    fn = cache_kernels.c_function(name)
    assert fn.argtypes and len(fn.argtypes) >= 2, name


def test_a_missing_library_is_an_error_that_says_what_builds_it(monkeypatch, tmp_path):
    (tmp_path / "a.c").write_text("int x;\n")
    with pytest.raises(loader.NativeBuildError, match="not built: make"):
        loader.load("moeroof_no_such_extension", tmp_path)
    assert "not built" in loader.status("moeroof_no_such_extension", tmp_path)


def _trace(rng, steps, streams, layers, k, experts, pad, dtype):
    """Random (steps, streams, layers, k) ids: distinct experts per token, some padded tokens."""
    keys = rng.random((steps, streams, layers, experts))
    top = np.argsort(keys, axis=-1)[..., :k]
    top[rng.random((steps, streams, layers)) < pad] = -1
    return top.astype(dtype)


def _scan(block, experts, sel, keep, strict):
    """(kind, err[:5], cells, items) of the C's scan and emit of one block."""
    nl = block.shape[2]
    cells = np.zeros(block.shape[0] * nl, np.int32)
    mark = np.zeros(experts, np.int64)
    tmark = np.zeros(experts, np.int64)
    ctr = np.zeros(1, np.int64)
    err = np.zeros(15, np.int64)
    use_keep = keep is not None
    kp = keep if use_keep else np.ones((1, 1), bool)
    kind = cache_kernels.scan_block(block, experts, sel, kp, use_keep, strict, mark, tmark, ctr, cells, 0, err)
    items = None
    if kind == 0:
        items = np.empty(int(cells.sum()), np.int32)
        mark[:] = 0
        end = cache_kernels.emit_block(block, experts, sel, kp, use_keep, mark, 0, items, 0)
        assert end == items.size
    return int(kind), (tuple(err[:5].tolist()) if kind else None), cells, items


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
def test_request_stream_kernels_equal_the_reference(
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
    kind, _, cells, items = _scan(block, experts, sel.astype(np.int64), keep, strict)
    assert kind == 0
    want_items, want_cells = ref_stream_of(block, experts, sel.tolist(), keep)
    assert cells.tolist() == want_cells.tolist()
    assert items.tolist() == want_items.tolist()


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    "where,value",
    [((1, 2, 0, 1), 7), ((0, 0, 1, 0), -2), ((1, 0, 1, 1), -1), ((1, 1, 0, 1), "dup")],
)
def test_scan_names_the_first_bad_id_as_the_reference(strict, where, value):
    rng = np.random.default_rng(5)
    block = _trace(rng, 3, 3, 2, 2, 6, 0.0, np.int16)
    s, t, l, kk = where
    if value == "dup":
        block[s, t, l, kk] = block[s, t, l, 0]
    else:
        block[s, t, l, kk] = value
    block[2, 0, 0, 0] = 99  # a later range error: the first error reported must be the earlier one
    sel = np.arange(3, dtype=np.int64)
    kind, err, _, _ = _scan(block, 6, sel, None, strict)
    want_kind, want_err = ref_scan(block, 6, sel.tolist(), strict)
    assert kind == want_kind != 0
    assert err == want_err


def test_emit_sorts_short_and_long_cells_alike():
    # a cell of few experts (insertion sort) and one of many (the sweep) give the same ascending ids
    rng = np.random.default_rng(11)
    for experts, streams, k in [(1000, 2, 3), (16, 12, 8), (3, 5, 3)]:
        block = _trace(rng, 4, streams, 3, k, experts, 0.1, np.int32)
        _, _, cells, items = _scan(block, experts, np.arange(streams, dtype=np.int64), None, False)
        want_items, want_cells = ref_stream_of(block, experts)
        assert items.tolist() == want_items.tolist() and cells.tolist() == want_cells.tolist()


def test_many_experts_mark_one_layer_at_a_time():
    # experts * layers beyond the marks kept at once (2^18): the layers go in groups
    rng = np.random.default_rng(3)
    experts = 70_000
    base = rng.integers(0, experts, size=(2, 3, 5, 1))
    block = ((base + np.arange(4) * 7) % experts).astype(np.int32)  # distinct ids per token
    block[rng.random((2, 3, 5)) < 0.2] = -1
    block[:, 1] = block[:, 0]  # streams that share experts: repeats within a cell
    kind, _, cells, items = _scan(block, experts, np.arange(3, dtype=np.int64), None, True)
    assert kind == 0
    want_items, want_cells = ref_stream_of(block, experts)
    assert items.tolist() == want_items.tolist() and cells.tolist() == want_cells.tolist()


def test_a_key_space_of_2_to_the_31_items_is_refused():
    topk = np.zeros((1, 1, 2**11, 1), np.int32)
    with pytest.raises(ValueError, match="below 2\\^31"):
        cache.requests_from_trace(topk, 2**20)


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
def test_lru_and_static_passes_equal_the_reference(seed, n, n_items, groups, unit, per_request, weighted, flags, big):
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, size=n).astype(np.int32)
    group = rng.integers(0, groups, size=n_items).astype(np.int64)
    cap = rng.uniform(0, n_items * (3 if big else 0.6), size=groups)
    cap[rng.random(groups) < 0.2] = 0.0
    # sizes in multiples of 1/8: sums exact, so "fits" means the same in any order of addition
    size = np.ones(n_items) if unit else rng.integers(2, 24, size=n_items) / 8
    steps = 5
    off, cstep = _lookups(rng, n, steps)
    wsize = rng.uniform(0.5, 2.0, size=n_items) if weighted else np.zeros(1)
    mask = np.zeros(n_items, bool)
    mask[: n_items // 2] = True  # pinned; its items are judged as they come (no lookups)
    tail = (off, cstep, per_request, steps, wsize, weighted)
    for name, run, want in (
        ("lru", lambda h: cache_kernels.lru_pass(items, group, cap, size, *tail, h),
         kernel_pass("lru", items, group, cap, size, *tail)),
        ("static", lambda h: cache_kernels.static_pass(items, mask, off, cstep, steps, wsize, weighted, h),
         kernel_pass("static", items, group, cap, size, off, cstep, True, steps, wsize, weighted, mask=mask)),
    ):  # fmt: skip
        hit = np.zeros(n if flags else 0, bool)
        got = run(hit)
        for x, y, what in zip(got, want, ("hits", "misses", "streamed")):
            assert x.tobytes() == y.tobytes(), (name, what)  # bytes summed in request order
        if flags:
            np.testing.assert_array_equal(hit, want[3], err_msg=name)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 300),
    n_items=st.integers(1, 40),
    per_request=st.booleans(),
    warm=st.integers(0, 3),
)
def test_stack_kernel_equals_the_reference(seed, n, n_items, per_request, warm):
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, size=n).astype(np.int32)
    present = np.bincount(items, minlength=n_items) > 0
    label = np.cumsum(present, dtype=np.int64) - 1
    d = int(present.sum())
    off, cstep = _lookups(rng, n, 4)
    want = ref_stack_distances(items.tolist(), starts_of(off.tolist(), n, per_request))
    out = np.zeros(n, np.int64)
    # a window just above D: compactions happen many times
    cache_kernels.stack_kernel(
        items, label, d, d + 1 + seed % 3, off, cstep, per_request, warm, out, np.zeros(0, np.int64)
    )
    assert out.tolist() == want.tolist()
    hist = np.zeros(d + 1, np.int64)
    cache_kernels.stack_kernel(
        items, label, d, d + 1 + seed % 3, off, cstep, per_request, warm, np.zeros(0, np.int64), hist
    )
    counted = np.ones(n, bool)
    if warm > 0:
        counted = np.repeat(cstep >= warm, np.diff(off))
    assert hist.tolist() == np.bincount(want[counted], minlength=d + 1).tolist()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(0, 200), n_items=st.integers(1, 20))
def test_small_helpers_equal_numpy(seed, n, n_items):
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, size=n).astype(np.int32)
    start = rng.random(n) < 0.3
    keep = rng.random(n) < 0.5
    first = start.copy()
    if n:
        first[0] = True  # request 0 always begins a lookup
    off = np.r_[np.flatnonzero(first), n].astype(np.int64)
    assert cache_kernels.offsets_from_starts(start).tolist() == off.tolist()
    assert cache_kernels.starts_from_offsets(off, n).tolist() == first.tolist()
    # the same lookups in the kept requests: a lookup begins at its first kept request
    lookup_of = np.cumsum(first) - 1
    kept = np.flatnonzero(keep)
    sub_first = np.r_[True, lookup_of[kept][1:] != lookup_of[kept][:-1]] if kept.size else np.zeros(0, bool)
    sub = cache_kernels.subset_offsets(off, keep)
    assert cache_kernels.starts_from_offsets(sub, kept.size).tolist() == sub_first.tolist()
    assert sub[-1] == kept.size and sub.size == off.size
    np.testing.assert_array_equal(cache_kernels.count_items(items, n_items), np.bincount(items, minlength=n_items))
    a = np.empty(n, np.int32)
    cache_kernels.next_use_kernel(items, n_items, a)
    assert a.tolist() == ref_next_use(items).tolist()
    b = np.empty(n, np.int64)
    cache_kernels.next_use_kernel(items.astype(np.int64), n_items, b)  # int64 ids and results too
    assert b.tolist() == a.tolist()
    step = np.sort(rng.integers(0, 3, size=n)).astype(np.int32)
    layer = rng.integers(0, 2, size=n).astype(np.int16)
    roff, rstep = cache_kernels.runs_kernel(step, layer)
    keys = list(zip(step.tolist(), layer.tolist()))
    runs = [t for t in range(n) if t == 0 or keys[t] != keys[t - 1]]
    assert roff.tolist() == (runs + [n] if n else [0]) and rstep.tolist() == [keys[t][0] for t in runs]


def test_int64_ids_run_as_int32_with_the_same_numbers():
    items = np.array([0, 1, 0, 2, 1, 0], np.int64)
    group = np.zeros(3, np.int64)
    off = np.array([0, 6], np.int64)
    cstep = np.zeros(1, np.int64)
    args = (group, np.array([2.0]), np.ones(3), off, cstep, True, 1, np.zeros(1), False, np.zeros(0, bool))
    a = cache_kernels.lru_pass(items, *args)
    b = cache_kernels.lru_pass(items.astype(np.int32), *args)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert a[0][0] == 1  # a cache of 2: 0 1 0 (hit) 2 (evicts 1) 1 (evicts 0) 0 (evicts 2)
    with pytest.raises(ValueError, match="below 2\\^31"):
        cache_kernels.lru_pass(np.array([2**31], np.int64), *args)
    with pytest.raises(TypeError, match="hit flags"):
        cache_kernels.lru_pass(items, *args[:-1], np.zeros(6, np.int64))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 200), n_items=st.integers(2, 12), per_request=st.booleans())
def test_inexact_sizes_end_and_count_every_request(seed, n, n_items, per_request):
    """Sizes whose sums round (0.1, 0.3, 0.7 …) can leave a running sum above zero with nothing
    cached: every kernel then resets the sum instead of evicting from an empty list (an S3-FIFO
    of this kind once looped forever, and a heap read outside its tables). Every request is
    counted once, and a request of an item larger than the cache never hits."""
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, size=n).astype(np.int32)
    group = np.zeros(n_items, np.int64)
    size = rng.choice([0.1, 0.2, 0.3, 0.7], size=n_items)
    cap = np.array([rng.choice([0.7, 0.9, 1.1])])
    off = np.array([0, n], np.int64) if per_request else np.r_[0:n:3, n].astype(np.int64)
    off = np.unique(off)
    cstep = np.zeros(off.size - 1, np.int64)
    nexts = ref_next_use(items).astype(np.int32)
    tail = (off, cstep, per_request, 1, size, True)
    for name in ("lru", "s3fifo", "heap0", "heap1", "heap2", "heap3"):
        hit = np.zeros(n, bool)
        if name == "lru":
            h, m, s = cache_kernels.lru_pass(items, group, cap, size, *tail, hit)
        elif name == "s3fifo":
            h, m, s = cache_kernels.s3fifo_pass(items, group, cap, size, 0.1, 1, *tail, hit)
        else:
            h, m, s = cache_kernels.heap_pass(items, group, cap, size, int(name[-1]), nexts, *tail, hit)
        assert h[0] + m[0] == n and h[0] == hit.sum(), name
        assert s[0] == pytest.approx(size[items[~hit]].sum()), name


def test_the_s3fifo_rounding_case_that_once_hung_ends():
    # one cache of 0.9, sizes 0.3, 0.7, 0.1, 0.7 (a kernel of this kind once looped forever)
    items = np.array([1, 2, 2, 1, 3, 0, 1, 2, 3, 0, 2, 1], np.int32)
    size = np.array([0.3, 0.7, 0.1, 0.7])
    args = (np.zeros(4, np.int64), np.array([0.9]), size, 0.1, 1, np.array([0, items.size], np.int64))
    tail = (np.zeros(1, np.int64), True, 1, size, True, np.zeros(0, bool))
    a = cache_kernels.s3fifo_pass(items, *args, *tail)
    assert a[0][0] + a[1][0] == items.size


def test_a_view_of_the_first_streams_and_unsigned_ids_give_the_copys_stream():
    # fit-routing hands the stream a view (trace[:, :B]); uint16 ids come from other tools
    rng = np.random.default_rng(2)
    topk = _trace(rng, 6, 5, 3, 2, 20, 0.0, np.int32)
    want_items, want_cells = ref_stream_of(topk[:, :3], 20)
    view = cache.requests_from_trace(topk[:, :3], 20)
    unsigned = cache.requests_from_trace(topk[:, :3].astype(np.uint16), 20)
    for got in (view, unsigned):
        assert got.items.tolist() == want_items.tolist()
        assert got.cells.tolist() == want_cells.tolist()


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
    hit = np.zeros(items.size, bool)
    cache_kernels.heap_pass(items, *args, *tail, hit)
    assert hit[-1]
    assert hit[1:n0].all() and not hit[n0] and not hit[n0 + 1]
