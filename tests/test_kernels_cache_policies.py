"""The C heap, S3-FIFO and ARC kernels (kernels/native/policies.c) against the pure-Python
references of tests/cache_refs.py, through their wrappers in moeroof.kernels.cache.

Each kernel must give the reference's hits, misses and streamed bytes per step (the bytes added
in request order: bit for bit) and its hit flags, for every combination of the flags (per
request or per lookup, weighted or not, hit flags kept or not), one group or several, unit or
fractional sizes, capacities 0, tiny and above the item count, empty streams and lookups of
steps outside 0..steps-1. Hand cases, hypothesis-drawn streams (derandomized by
tests/conftest.py), a longer seeded stream, and simulate() end to end.

Fractional sizes are multiples of 1/8: their running sums are exact, as unit sizes and integer
byte counts are. Belady's choice among items never requested again is arbitrary (any of them
gives the same hits at unit sizes, not at unequal ones), so Belady is compared at unit sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache_refs import kernel_pass, ref_next_use
from moeroof.cachesim import requests_from_trace, simulate
from moeroof.kernels import cache as cn

SETTINGS = settings(max_examples=60, deadline=None)

MODES = (cn.HEAP_LFU, cn.HEAP_LFU_PERFECT, cn.HEAP_BELADY, cn.HEAP_BELADY_INSERT)
MODE_NAMES = {
    cn.HEAP_LFU: "lfu",
    cn.HEAP_LFU_PERFECT: "lfu-perfect",
    cn.HEAP_BELADY: "belady",
    cn.HEAP_BELADY_INSERT: "belady-insert",
}
WRAPPERS = {"heap": cn.heap_pass, "s3fifo": cn.s3fifo_pass, "arc": cn.arc_pass}


def compare(kind: str, head: tuple, off, cstep, per_request, steps, wsize, weighted, keep_hits):
    """Run the C kernel and the reference on the same inputs; assert identical outputs; return C's."""
    n = int(off[-1]) if len(off) else 0
    tail = (np.asarray(off, np.int64), np.asarray(cstep, np.int64), bool(per_request), int(steps))
    wsize = np.asarray(wsize, np.float64) if weighted else np.zeros(1)
    hc = np.zeros(n if keep_hits else 0, bool)
    got = WRAPPERS[kind](*head, *tail, wsize, bool(weighted), hc)
    want = reference(kind, head, *tail, wsize, bool(weighted))
    for g, w, what in zip(got, want, ("hits", "misses", "streamed")):
        assert g.dtype == w.dtype and g.shape == w.shape, what
        np.testing.assert_array_equal(g, w, err_msg=what)
        assert g.tobytes() == w.tobytes(), f"{what}: not bit for bit"
    if keep_hits:
        np.testing.assert_array_equal(hc, want[3], err_msg="hit flags")
    return got, want[3]


def reference(kind, head, off, cstep, per_request, steps, wsize, weighted):
    if kind == "heap":
        items, group, cap, size, mode, _ = head
        return kernel_pass(MODE_NAMES[mode], items, group, cap, size, off, cstep, per_request, steps, wsize, weighted)
    if kind == "s3fifo":
        items, group, cap, size, frac, threshold = head
        return kernel_pass(
            "s3fifo", items, group, cap, size, off, cstep, per_request, steps, wsize, weighted,
            threshold=threshold, small_fraction=frac,
        )  # fmt: skip
    items, group, cap = head
    return kernel_pass("arc", items, group, cap, np.ones(group.size), off, cstep, per_request, steps, wsize, weighted)


def heap_head(items, group, cap, size, mode):
    items = np.asarray(items, np.int32)
    nexts = ref_next_use(items).astype(np.int32) if mode >= cn.HEAP_BELADY else np.zeros(1, np.int64)
    if mode >= cn.HEAP_BELADY:
        size = np.ones(len(size))  # see the top: Belady at unit sizes
    return (items, np.asarray(group, np.int64), np.asarray(cap, float), np.asarray(size, float), mode, nexts)


def s3_head(items, group, cap, size, frac, threshold):
    return (np.asarray(items, np.int32), np.asarray(group, np.int64), np.asarray(cap, float), np.asarray(size, float), float(frac), int(threshold))  # fmt: skip


def arc_head(items, group, cap):
    return (np.asarray(items, np.int32), np.asarray(group, np.int64), np.asarray(cap, float))


FLAGS = [(p, w, k) for p in (False, True) for w in (False, True) for k in (False, True)]


# ----------------------------------------------------------------------------- hand cases


def one_per_lookup(n):
    return np.arange(n + 1), np.zeros(n, np.int64)


def flags_of(kind, head, items, per_request=True, off=None, cstep=None):
    if off is None:
        off, cstep = one_per_lookup(len(items))
    _, hit = compare(kind, head, off, cstep, per_request, 1, np.ones(max(len(items), 1)), False, True)
    return hit.tolist()


def test_heap_hand_outcomes():
    F, T = False, True
    items = [0, 0, 1, 1, 0]  # capacity 1: each new item evicts the other
    for mode in (cn.HEAP_LFU, cn.HEAP_LFU_PERFECT):
        g, c, s = [0, 0], [1.0], [1.0, 1.0]
        assert flags_of("heap", heap_head(items, g, c, s, mode), items) == [F, T, F, T, F]
    # Belady with bypass keeps 0 (needed at t=2) and bypasses 1 (never again); Belady-insert evicts 0
    items = [0, 1, 0]
    g, c, s = [0, 0], [1.0], [1.0, 1.0]
    assert flags_of("heap", heap_head(items, g, c, s, cn.HEAP_BELADY), items) == [F, F, T]
    assert flags_of("heap", heap_head(items, g, c, s, cn.HEAP_BELADY_INSERT), items) == [F, F, F]
    # LFU keeps the frequent item: 0 twice, then 1 and 2 each evict the other, not 0
    items = [0, 0, 1, 2, 1, 0]
    g, c, s = [0, 0, 0], [2.0], [1.0] * 3
    assert flags_of("heap", heap_head(items, g, c, s, cn.HEAP_LFU), items) == [F, T, F, F, F, T]
    # a lookup judges its requests as it starts: the repeat inside one lookup misses too
    items = [0, 0]
    off, cstep = np.array([0, 2]), np.array([0])
    head = heap_head(items, [0], [2.0], [1.0], cn.HEAP_LFU)
    assert flags_of("heap", head, items, per_request=False, off=off, cstep=cstep) == [F, F]
    assert flags_of("heap", head, items, per_request=True, off=off, cstep=cstep) == [F, T]
    # an item larger than its group's capacity is never cached
    head = heap_head([0, 0], [0], [0.5], [1.0], cn.HEAP_LFU_PERFECT)
    assert flags_of("heap", head, [0, 0]) == [F, F]


def test_s3fifo_arc_hand_outcomes():
    F, T = False, True
    head = s3_head([0, 0, 1, 1], [0, 0], [10.0], [1.0, 1.0], 0.1, 1)
    assert flags_of("s3fifo", head, [0, 0, 1, 1]) == [F, T, F, T]
    # capacity 2: 2 evicts 0 (not reused in S) to the ghost queue; 0 comes back from it into M
    # (evicting 1 to G), and hits there
    items = [0, 1, 2, 0, 0, 1]
    head = s3_head(items, [0, 0, 0], [2.0], [1.0] * 3, 0.1, 1)
    assert flags_of("s3fifo", head, items) == [F, F, F, F, T, F]
    # ARC: capacity 1.5 is one slot; 0.5 is none (nothing hits)
    items = [0, 0, 1, 0]
    assert flags_of("arc", arc_head(items, [0, 0], [1.5]), items) == [F, T, F, F]
    assert flags_of("arc", arc_head(items, [0, 0], [0.5]), items) == [F, F, F, F]
    assert flags_of("arc", arc_head(items, [0, 0], [5.0]), items) == [F, T, F, T]


HAND_ITEMS = [0, 1, 2, 0, 1, 3, 0, 3, 1, 2, 4, 0, 0, 2, 5, 1, 3, 0]


def hand_inputs():
    """(items, group, off, cstep, steps): a classic stream, in 1- and 3-request lookups, some of
    steps outside 0..steps-1, one group or two; and empty streams."""
    items = np.array(HAND_ITEMS, np.int32)
    n = items.size
    g1 = np.zeros(6, np.int64)
    g2 = np.array([0, 1, 0, 1, 0, 1], np.int64)
    off1, c1 = np.arange(n + 1), np.arange(n) // 4
    off3 = np.r_[np.arange(0, n, 3), n]
    c3 = np.array([0, -1, 1, 5, 2, 3])
    empty = np.zeros(0, np.int32)
    return [
        (items, g1, off1, c1, 5),
        (items, g2, off1, c1, 5),
        (items, g1, off3, c3, 4),
        (items, g2, off3, c3, 4),
        (items, g1, off3, c3, 0),
        (empty, g1, np.array([0]), np.zeros(0), 3),
        (empty, g2, np.array([0, 0, 0]), np.array([0, 1]), 3),
    ]


@pytest.mark.parametrize("per_request,weighted,keep_hits", FLAGS)
def test_hand_streams_all_kernels(per_request, weighted, keep_hits):
    wsize = np.array([1.5, 0.1, 2.25, 7.0, 0.3, 11.0])
    for items, group, off, cstep, steps in hand_inputs():
        gs = int(group.max()) + 1
        for c in (0.0, 0.5, 1.0, 2.0, 3.0, 100.0):
            cap = np.full(gs, c)
            tail = (off, cstep, per_request, steps, wsize, weighted, keep_hits)
            for size in (np.ones(6), np.array([0.5, 1.25, 1.0, 2.0, 0.75, 1.5])):
                for mode in MODES:
                    compare("heap", heap_head(items, group, cap, size, mode), *tail)
                for frac, thr in ((0.1, 1), (0.1, 2), (0.5, 3), (0.1, 4), (0.2, 5), (0.0, 1), (1.0, 2)):
                    compare("s3fifo", s3_head(items, group, cap, size, frac, thr), *tail)
            compare("arc", arc_head(items, group, cap), *tail)


def test_flags_do_not_change_counts():
    """The eight specialised loops of one kernel agree with one another where they must."""
    items, group, off, cstep, steps = hand_inputs()[3]
    wsize = np.linspace(0.5, 3.0, 6)
    for kind, head in (
        ("heap", heap_head(items, group, [2.0, 1.0], np.ones(6), cn.HEAP_LFU)),
        ("s3fifo", s3_head(items, group, [2.0, 1.0], np.ones(6), 0.1, 1)),
        ("arc", arc_head(items, group, [2.0, 1.0])),
    ):
        for per_request in (False, True):
            base, flags = compare(kind, head, off, cstep, per_request, steps, wsize, False, True)
            for weighted in (False, True):
                got, _ = compare(kind, head, off, cstep, per_request, steps, wsize, weighted, False)
                np.testing.assert_array_equal(got[0], base[0])
                np.testing.assert_array_equal(got[1], base[1])
            assert int(base[0].sum() + base[1].sum()) == sum(off[c + 1] - off[c] for c in range(len(cstep)) if 0 <= cstep[c] < steps)  # fmt: skip


# ----------------------------------------------------------------------------- random streams


@st.composite
def streams(draw, fractional_sizes: bool):
    """A random stream: items, group (one per layer or random), capacities, sizes, lookups."""
    n_items = draw(st.integers(1, 10))
    n_groups = draw(st.integers(1, 3))
    if draw(st.booleans()):  # scope "layer": contiguous blocks of items, one group per layer
        group = np.arange(n_items) * n_groups // n_items
    else:
        group = np.array(draw(st.lists(st.integers(0, n_groups - 1), min_size=n_items, max_size=n_items)))
    lengths = draw(st.lists(st.integers(0, 5), max_size=12))
    n = sum(lengths)
    items = draw(st.lists(st.integers(0, n_items - 1), min_size=n, max_size=n))
    steps = draw(st.integers(0, 4))
    cstep = draw(st.lists(st.integers(-1, steps + 1), min_size=len(lengths), max_size=len(lengths)))
    cap_one = st.one_of(
        st.sampled_from([0.0, 0.5, 1.0, 1.5]),
        st.integers(0, n_items + 3).map(float),
        st.floats(0.0, 3.0 * n_items + 4.0, allow_nan=False),
    )
    cap = draw(st.lists(cap_one, min_size=n_groups, max_size=n_groups))
    if fractional_sizes and draw(st.booleans()):
        size = [k / 8 for k in draw(st.lists(st.integers(1, 24), min_size=n_items, max_size=n_items))]
    else:
        size = [1.0] * n_items
    wsize = draw(st.lists(st.floats(0.01, 1000.0), min_size=n_items, max_size=n_items))
    flags = draw(st.sampled_from(FLAGS))
    off = np.r_[0, np.cumsum(lengths, dtype=np.int64)]
    return items, group, cap, size, (off, np.array(cstep, np.int64), *flags[:1], steps, wsize, *flags[1:])


@pytest.mark.parametrize("mode", MODES, ids=[MODE_NAMES[m] for m in MODES])
@SETTINGS
@given(case=streams(fractional_sizes=True))
def test_heap_random(mode, case):
    items, group, cap, size, tail = case
    compare("heap", heap_head(items, group, cap, size, mode), *tail)


@SETTINGS
@given(
    case=streams(fractional_sizes=True),
    frac=st.one_of(st.sampled_from([0.1, 0.0, 0.25, 1.0]), st.floats(0.0, 1.0)),
    threshold=st.integers(1, 5),
)
def test_s3fifo_random(case, frac, threshold):
    items, group, cap, size, tail = case
    compare("s3fifo", s3_head(items, group, cap, size, frac, threshold), *tail)


@SETTINGS
@given(case=streams(fractional_sizes=False))
def test_arc_random(case):
    items, group, cap, _, tail = case
    compare("arc", arc_head(items, group, cap), *tail)


@pytest.mark.parametrize("per_request,weighted,keep_hits", FLAGS)
def test_longer_stream(per_request, weighted, keep_hits):
    """2 000 Zipf requests over 120 items in 4 groups: deep heaps, ARC's target moving, S3-FIFO's
    ghosts filling; capacities from tiny to all."""
    rng = np.random.default_rng(1604)
    n_items, n_groups, n = 120, 4, 2000
    p = 1.0 / np.arange(1, n_items + 1) ** 0.9
    items = rng.permutation(n_items)[rng.choice(n_items, size=n, p=p / p.sum())].astype(np.int32)
    group = np.arange(n_items) * n_groups // n_items
    lengths = rng.integers(0, 12, size=300)
    lengths[-1] += n - lengths.sum()  # the rest in one long lookup
    assert lengths[-1] >= 0
    off = np.r_[0, np.cumsum(lengths)]
    steps = 30
    cstep = np.arange(lengths.size) // 10 - 2
    wsize = rng.uniform(0.1, 10.0, n_items)
    fsize = rng.integers(1, 32, n_items) / 8
    tail = (off, cstep, per_request, steps, wsize, weighted, keep_hits)
    for c in (1.0, 7.0, 25.0, 1000.0):
        cap = np.array([c, c + 3, 0.0, c / 2])
        for mode in MODES:
            for size in (np.ones(n_items), fsize):
                compare("heap", heap_head(items, group, cap, size, mode), *tail)
        for size in (np.ones(n_items), fsize):
            for thr in (1, 2, 4):
                compare("s3fifo", s3_head(items, group, cap, size, 0.1, thr), *tail)
        compare("arc", arc_head(items, group, cap), *tail)


# ----------------------------------------------------------------------------- end to end


POLICY_KW = [
    ("lfu", {}, "mr_heap_pass"),
    ("lfu-perfect", {}, "mr_heap_pass"),
    ("belady", {}, "mr_heap_pass"),
    ("belady-insert", {}, "mr_heap_pass"),
    ("s3fifo", {"s3fifo_threshold": 1}, "mr_s3fifo_pass"),
    ("s3fifo", {"s3fifo_threshold": 2}, "mr_s3fifo_pass"),
    ("arc", {}, "mr_arc_pass"),
]


def synthetic_requests():
    rng = np.random.default_rng(77)
    steps, streams_, layers, experts, k = 40, 3, 4, 16, 2
    w = np.arange(1, experts + 1, dtype=float) ** -1.1
    keys = np.log(w) + rng.gumbel(size=(steps, streams_, layers, experts))
    topk = np.argsort(-keys, axis=-1)[..., :k].astype(np.int64)
    topk[rng.random((steps, streams_)) < 0.1] = -1
    return requests_from_trace(topk, experts), layers, experts


@pytest.mark.parametrize(
    "policy,kw,cname", POLICY_KW, ids=[p + str(kw.get("s3fifo_threshold", "")) for p, kw, _ in POLICY_KW]
)
def test_simulate_counts_every_request_once_and_agrees_with_its_flags(policy, kw, cname):
    """simulate() end to end (its C kernel): the per-step counts are the per-request flags
    counted by step, warm-up steps excluded, and the streamed bytes the missed items' bytes."""
    req, layers, experts = synthetic_requests()
    assert req.items.dtype == np.int32
    byte_sizes = np.arange(1, experts + 1, dtype=float) * 3.0
    item_bytes = np.tile(byte_sizes, layers)
    runs = []
    for lookup in ("layer", "request"):
        for scope in ("global", "layer"):
            for capacity in (0, 3, 9, 30, 10_000):
                setups = [dict(capacity_unit="experts")]
                if policy != "arc":
                    setups += [dict(capacity_unit="experts", item_bytes=byte_sizes), dict(capacity_unit="bytes", item_bytes=byte_sizes)]  # fmt: skip
                for extra in setups:
                    cap = capacity * (10.0 if extra["capacity_unit"] == "bytes" else 1.0)
                    args = dict(policy=policy, scope=scope, lookup=lookup, return_hits=True, warmup_steps=3, **kw, **extra)  # fmt: skip
                    got = simulate(req, cap, **args)
                    counted = req.step >= 3
                    hits = np.bincount(req.step[got.request_hits & counted], minlength=req.steps)
                    misses = np.bincount(req.step[~got.request_hits & counted], minlength=req.steps)
                    assert got.hits_per_step[3:].tolist() == hits[3:].tolist(), (args, cap)
                    assert got.misses_per_step[3:].tolist() == misses[3:].tolist(), (args, cap)
                    if "item_bytes" in extra:
                        per_step = [0.0] * req.steps
                        for t in np.flatnonzero(~got.request_hits & counted).tolist():
                            per_step[int(req.step[t])] += float(item_bytes[int(req.items[t])])
                        assert got.bytes_streamed_per_step[3:].tolist() == per_step[3:], (args, cap)
                    runs.append(got.hits)
    assert max(runs) > 0  # the stream exercises the caches
