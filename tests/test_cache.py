"""Expert cache simulation and miss-ratio curves against pure-Python references.

The references (tests/cache_refs.py) are written independently of moeroof.cachesim: an
OrderedDict LRU, Belady's MIN scanning the future for the farthest next use (with and without
bypass), in-cache and perfect LFU, S3-FIFO (as libCacheSim's S3FIFOv0 runs it) and ARC from its
paper's pseudo-code. Random cases are seeded loops (small traces, many capacities).
tests/test_cache_libcachesim.py checks the same policies against libCacheSim itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cache_refs import (
    judged,
    ref_arc,
    ref_belady,
    ref_belady_insert,
    ref_lfu,
    ref_lfu_perfect,
    ref_lru,
    ref_s3fifo,
)
from conftest import seeded
from moeroof import cachesim as cache
from moeroof.cachesim import Requests, requests_from_trace, simulate

# ----------------------------------------------------------------------------- helpers


def random_trace(rng, steps=24, streams=3, layers=3, experts=8, k=2, pad=0.15, skew=1.0):
    """topk (steps, streams, layers, K): Gumbel-top-K over a Zipf popularity, some padding."""
    w = np.arange(1, experts + 1, dtype=float) ** -skew
    keys = np.log(w) + rng.gumbel(size=(steps, streams, layers, experts))
    topk = np.argsort(-keys, axis=-1)[..., :k].astype(np.int64)
    gone = rng.random((steps, streams)) < pad
    topk[gone] = -1
    return topk


def unit_sizes(n):
    return np.ones(n)


def ref_stream(topk, experts):
    """(step, layer, expert) in request order, written as plain loops over the trace."""
    out = []
    steps, streams, layers, _ = topk.shape
    for s in range(steps):
        for l in range(layers):
            ids = {int(e) for t in range(streams) for e in topk[s, t, l] if e >= 0}
            out += [(s, l, e) for e in sorted(ids)]
    return out


def groups_of(req: Requests, scope, capacity, layers):
    """Reference cache partition: (group of each item, capacity per group)."""
    if scope == "global":
        return (lambda x: 0), {0: capacity}
    per = capacity // layers if isinstance(capacity, int) else capacity / layers
    return (lambda x: x // req.experts), {g: per for g in range(layers)}


def ref_lookup_starts(req: Requests, lookup):
    """First request of each lookup: every request, or the first of each (step, layer) run."""
    keys = list(zip(req.step.tolist(), req.layer.tolist()))
    if lookup == "request":
        return [True] * len(keys)
    return [t == 0 or keys[t] != keys[t - 1] for t in range(len(keys))]


def hits_of(res) -> int:
    return int(res.hits_per_step.sum())


def cases(name, n=12, **kw):
    rng = seeded(name)
    for _ in range(n):
        topk = random_trace(rng, **kw)
        experts = kw.get("experts", 8)
        yield rng, topk, requests_from_trace(topk, experts)


# ----------------------------------------------------------------------------- request stream


def test_request_stream_of_a_hand_made_trace():
    # steps=2, streams=3, layers=2, K=2; -1 = no token; duplicates across streams collapse
    topk = np.array(
        [
            [[[3, 1], [0, 2]], [[1, 3], [2, 0]], [[-1, -1], [-1, -1]]],
            [[[2, 0], [1, 3]], [[-1, -1], [-1, -1]], [[0, 1], [3, 2]]],
        ]
    )
    req = requests_from_trace(topk, experts=4)
    expected = [
        (0, 0, 1),
        (0, 0, 3),
        (0, 1, 0),
        (0, 1, 2),
        (1, 0, 0),
        (1, 0, 1),
        (1, 0, 2),
        (1, 1, 1),
        (1, 1, 2),
        (1, 1, 3),
    ]
    assert list(zip(req.step.tolist(), req.layer.tolist(), (req.items % 4).tolist())) == expected
    assert req.items.tolist() == [l * 4 + e for _, l, e in expected]
    assert req.items.dtype == np.int32 and req.step.dtype == np.int32 and req.layer.dtype == np.int16  # compact
    assert (req.steps, req.layers, req.experts) == (2, 2, 4)
    # a batch of the first stream only, and a rank's share of the experts
    first = requests_from_trace(topk, 4, streams=np.array([0]))
    assert first.items.tolist() == [1, 3, 4, 6, 0, 2, 5, 7]
    part = np.array([0, 0, 1, 1])
    r1 = requests_from_trace(topk, 4, partition=part, rank=1)
    assert [(s, l, e) for s, l, e in expected if part[e] == 1] == list(
        zip(r1.step.tolist(), r1.layer.tolist(), (r1.items % 4).tolist())
    )


def test_request_stream_matches_loops_on_random_traces():
    for _, topk, req in cases("stream", n=6, steps=10, streams=4, layers=3, experts=7, k=3):
        got = list(zip(req.step.tolist(), req.layer.tolist(), (req.items % 7).tolist()))
        assert got == ref_stream(topk, 7)


@pytest.mark.parametrize(
    "topk, match",
    [
        (np.zeros((2, 3, 4)), "4 dims"),
        (np.zeros((2, 1, 1, 2), dtype=float), "integer dtype"),
        (np.full((2, 1, 1, 2), 9), r"expert id 9 not in \[-1, 8\)"),
        (np.full((2, 1, 1, 2), -3), "expert id -3"),
    ],
)
def test_bad_traces_raise(topk, match):
    with pytest.raises(ValueError, match=match):
        requests_from_trace(topk, 8)


def test_bad_arguments_raise():
    req = requests_from_trace(np.zeros((2, 1, 1, 1), dtype=int), 4)
    with pytest.raises(ValueError, match="policy"):
        simulate(req, 2, policy="fifo")
    with pytest.raises(ValueError, match="item_bytes"):
        simulate(req, 2, capacity_unit="bytes")
    with pytest.raises(ValueError, match="capacity"):
        simulate(req, -1)
    with pytest.raises(ValueError, match="scope"):
        simulate(req, 2, scope="rank")
    with pytest.raises(ValueError, match="partition"):
        requests_from_trace(np.zeros((2, 1, 1, 1), dtype=int), 4, partition=np.zeros(3, int), rank=0)


# ----------------------------------------------------------------------------- policies vs references


@pytest.mark.parametrize("lookup", cache.LOOKUPS)
@pytest.mark.parametrize("scope", ["global", "layer"])
def test_lru_lfu_belady_and_variants_equal_references(scope, lookup):
    for _, _topk, req in cases(f"ref-{scope}", n=8):
        items = req.items.tolist()
        starts = ref_lookup_starts(req, lookup)
        size = unit_sizes(req.n_items)
        for cap in (0, 1, 2, 3, 5, 8, 13):
            group_of, cap_of = groups_of(req, scope, cap, req.layers)
            for policy, ref in (
                ("lru", ref_lru),
                ("lfu", ref_lfu),
                ("lfu-perfect", ref_lfu_perfect),
                ("belady", ref_belady),
                ("belady-insert", ref_belady_insert),
            ):
                res = simulate(req, cap, policy=policy, scope=scope, lookup=lookup)
                want = ref(items, cap_of, group_of, size, starts)
                assert hits_of(res) == int(want.sum()), (policy, cap)
                assert res.hits_per_step.tolist() == np.bincount(req.step[want], minlength=req.steps).tolist()


@pytest.mark.parametrize("lookup", cache.LOOKUPS)
def test_s3fifo_and_arc_equal_references(lookup):
    for _, _, req in cases("s3fifo-arc", n=8, experts=10, layers=2):
        items = req.items.tolist()
        st = ref_lookup_starts(req, lookup)
        for cap in (0, 1, 2, 4, 7, 11, 16, 23, 35):
            for th in (1, 2, 3, 5):
                res = simulate(req, cap, policy="s3fifo", lookup=lookup, return_hits=True, s3fifo_threshold=th)
                assert res.request_hits.tolist() == ref_s3fifo(items, cap, st, th).tolist(), (cap, th)
            got = simulate(req, cap, policy="arc", lookup=lookup, return_hits=True).request_hits
            assert got.tolist() == ref_arc(items, cap, st).tolist(), cap


@pytest.mark.parametrize("policy", cache.POLICIES)
@pytest.mark.parametrize("scope", ["global", "layer"])
def test_a_huge_capacity_hits_as_a_cache_of_every_distinct_item(policy, scope):
    # ARC at 2**63 experts once overflowed its integer capacity and hit nothing
    for _, _, req in cases(f"huge-{policy}-{scope}", n=4, experts=10, layers=2):
        distinct = int(np.unique(req.items).size)
        if scope == "layer":  # every layer's cache holds the most distinct items any layer has
            distinct = req.layers * max(int(np.unique(req.items[req.layer == l]).size) for l in range(req.layers))
        full = simulate(req, distinct, policy=policy, scope=scope, return_hits=True)
        for huge in (distinct + 1, 10**6, 2**53, 2**63, 1e300):
            res = simulate(req, huge, policy=policy, scope=scope, return_hits=True)
            assert res.request_hits.tolist() == full.request_hits.tolist(), huge
            assert res.hits == full.hits > 0
        lru = simulate(req, 2**63, policy="lru", scope=scope)
        assert full.hits == lru.hits or policy == "static"  # nothing is evicted: every re-reference hits


def test_a_huge_capacity_in_bytes_never_evicts():
    for _, _, req in cases("huge-bytes", n=3):
        sizes = np.linspace(1.0, 3.7, req.n_items)
        want = simulate(req, 2**63, policy="lru").hits
        for policy in ("lru", "lfu", "lfu-perfect", "belady", "belady-insert", "s3fifo", "static"):
            for cap in (2.0 * float(sizes.sum()), 1e300):
                res = simulate(req, cap, policy=policy, capacity_unit="bytes", item_bytes=sizes)
                assert res.hits == want, (policy, cap)


def test_bytes_capacity_with_unequal_sizes():
    for rng, _, req in cases("bytes", n=8):
        size = rng.integers(1, 6, size=req.experts).astype(float)  # bytes per expert
        per_item = np.tile(size, req.layers)
        items = req.items.tolist()
        starts = ref_lookup_starts(req, "layer")
        for cap in (0.0, 3.0, 7.0, 12.0, 20.0, 40.0):
            for scope in ("global", "layer"):
                group_of, cap_of = groups_of(req, scope, cap, req.layers)
                for policy, ref in (
                    ("lru", ref_lru),
                    ("belady", ref_belady),
                    ("belady-insert", ref_belady_insert),
                    ("lfu", ref_lfu),
                    ("lfu-perfect", ref_lfu_perfect),
                ):
                    res = simulate(req, cap, policy=policy, capacity_unit="bytes", item_bytes=size, scope=scope)
                    want = ref(items, cap_of, group_of, per_item, starts)
                    assert hits_of(res) == int(want.sum()), (policy, scope, cap)
                    streamed = np.bincount(req.step[~want], weights=per_item[req.items[~want]], minlength=req.steps)
                    np.testing.assert_allclose(res.bytes_streamed_per_step, streamed)
                    assert res.bytes_unit == "bytes"


def test_belady_bounds_every_policy_and_curves_are_monotone():
    for _, _topk, req in cases("bound", n=6, steps=30, experts=10, k=3):
        for scope in ("global", "layer"):
            prev = {}
            for cap in range(0, req.n_items + 2):
                rates = {p: simulate(req, cap, policy=p, scope=scope).hit_rate for p in cache.POLICIES}
                for p, r in rates.items():
                    assert 0.0 <= r <= rates["belady"] + 1e-12, (p, scope, cap, rates)
                for p in ("lru", "belady"):  # stack property (LRU) and optimality (MIN)
                    assert rates[p] >= prev.get(p, 0.0) - 1e-12, (p, scope, cap)
                prev = rates


def test_static_pins_the_hot_set():
    for _, _, req in cases("static", n=4):
        counts = cache.request_histogram(req)
        for cap in (0, 3, 6):
            res = simulate(req, cap, policy="static")
            assert "oracle" in res.notes[0]
            top = np.argsort(-counts, kind="stable")[:cap]
            # the pinned set loads on first use (cold start), then always hits
            assert res.hits == int(counts[top].sum() - (counts[top] > 0).sum())
            # a ranking and a popularity array pin the same set
            assert simulate(req, cap, policy="static", pinned=top).hits == res.hits
            assert simulate(req, cap, policy="static", pinned=counts.astype(float)).hits == res.hits
            assert simulate(req, cap, policy="static", pinned=counts).hits == res.hits


# ----------------------------------------------------------------------------- ranks and warm-up


def test_per_rank_partition_is_the_union_of_separate_simulations():
    for rng, topk, req in cases("ranks", n=4, experts=8):
        part = rng.integers(0, 3, size=8)
        part[:3] = [0, 1, 2]
        for policy in ("lru", "belady"):
            ranks = [requests_from_trace(topk, 8, partition=part, rank=r) for r in range(3)]
            results = [simulate(sub, 4, policy=policy, warmup_steps=2) for sub in ranks]
            assert len(results) == 3
            # every request lands on exactly one rank
            assert sum(r.requests for r in results) == int((req.step >= 2).sum())
            per_step = sum(r.hits_per_step + r.misses_per_step for r in results)
            assert per_step.tolist() == np.bincount(req.step, minlength=req.steps).tolist()
            for r, res in enumerate(results):
                mine = part[req.items % 8] == r
                sub = req.items[mine].tolist()
                ref = ref_lru if policy == "lru" else ref_belady
                sub_req = Requests(req.items[mine], req.step[mine], req.layer[mine], req.steps, req.layers, 8)
                starts = ref_lookup_starts(sub_req, "layer")
                want = ref(sub, {0: 4}, lambda x: 0, unit_sizes(req.n_items), starts)
                counted = req.step[mine] >= 2
                assert res.hits == int(want[counted].sum()), (policy, r)


def test_warmup_is_excluded_and_reported():
    _, _, req = next(cases("warmup", n=1, steps=20))
    full = simulate(req, 4, warmup_steps=0)
    warm = simulate(req, 4, warmup_steps=5)
    assert warm.warmup_steps == 5
    # the simulation is the same; only the counting starts later
    assert warm.hits_per_step.tolist() == full.hits_per_step.tolist()
    assert warm.hits == int(full.hits_per_step[5:].sum())
    assert warm.misses == int(full.misses_per_step[5:].sum())
    assert warm.requests == int((req.step >= 5).sum())
    assert warm.hit_rate == pytest.approx(warm.hits / warm.requests)
    assert warm.mean_bytes_streamed_per_step == pytest.approx(full.misses_per_step[5:].mean())
    assert warm.bytes_unit == "experts"


# ----------------------------------------------------------------------------- curves


@pytest.mark.parametrize("lookup", cache.LOOKUPS)
def test_one_pass_curve_equals_lru_at_every_capacity(lookup):
    for _, _, req in cases("mrc", n=5, steps=40, experts=10, k=3):
        cap, rate = cache.lru_hit_curve(req, lookup=lookup)
        assert cap.tolist() == list(range(np.unique(req.items).size + 1))
        for c in cap:
            assert rate[c] == pytest.approx(simulate(req, int(c), lookup=lookup).hit_rate, abs=1e-15)


def test_layer_lookup_never_does_worse_than_request_lookup_for_lru():
    # the contents evolve alike; a request judged at its lookup's start can only have been
    # resident longer (no miss of its own layer has evicted it yet)
    for _, _, req in cases("lookup-dominates", n=6, steps=30, experts=10, k=4):
        for c in range(0, 14):
            layer = simulate(req, c, lookup="layer", return_hits=True).request_hits
            request = simulate(req, c, lookup="request", return_hits=True).request_hits
            assert np.all(layer >= request), c


def test_layer_lookup_cache_of_k_hits_the_consecutive_overlap():
    # one stream, one layer, K = 4 of 12 experts, a cache of exactly K: under the layer lookup
    # the cache always holds the previous token's K experts, so the hits are the overlap of
    # consecutive selections, counted here directly from the trace
    rng = seeded("overlap-k")
    topk = random_trace(rng, steps=200, streams=1, layers=1, experts=12, k=4, pad=0.0, skew=1.2)
    req = requests_from_trace(topk, 12)
    sets = [set(topk[s, 0, 0].tolist()) for s in range(topk.shape[0])]
    overlap = sum(len(sets[s] & sets[s - 1]) for s in range(1, len(sets)))
    layer = simulate(req, 4, lookup="layer")
    assert layer.hits == overlap
    assert simulate(req, 4, lookup="request").hits < overlap  # misses evict later hits


def test_one_pass_curve_after_warmup_equals_lru_simulation():
    # distances over the whole stream (the warm-up fills the stack), hits counted after it
    for _, _, req in cases("mrc-warm", n=3, steps=30, experts=10, k=3):
        cap, rate = cache.lru_hit_curve(req, warmup_steps=7)
        for c in cap:
            assert rate[c] == pytest.approx(simulate(req, int(c), warmup_steps=7).hit_rate, abs=1e-15)
    with pytest.raises(ValueError, match="Requests"):
        cache.lru_hit_curve(req.items, warmup_steps=7)


def test_stack_distances_judged_at_lookup_start():
    # a hand-made stream: lookups [0, 1], [1, 2], [0, 2]
    items = np.array([0, 1, 1, 2, 0, 2])
    starts = np.array([True, False, True, False, True, False])
    # request by request: 0,0 first refs; 1 at distance 1 (itself); 2 first; 0 has {1,2,0}=3; 2 has {0,2}=2
    assert cache.stack_distances(items).tolist() == [0, 0, 1, 0, 3, 2]
    # at the start of [0, 2] the stack is 2,1,0: 0 at depth 3, 2 at depth 1
    assert cache.stack_distances(items, starts).tolist() == [0, 0, 1, 0, 3, 1]
    with pytest.raises(ValueError, match="one flag per request"):
        cache.stack_distances(items, starts[:3])


def test_stack_distances_across_compactions():
    # many requests over few items: the Fenwick window is compacted many times
    rng = seeded("compaction")
    items = rng.integers(0, 37, size=5000)
    dist = cache.stack_distances(items)
    stack: list[int] = []
    for t, x in enumerate(items.tolist()):
        want = stack.index(x) + 1 if x in stack else 0
        assert dist[t] == want
        if x in stack:
            stack.remove(x)
        stack.insert(0, x)


def test_che_approximates_lru_on_an_irm_zipf_stream():
    # IRM: i.i.d. requests from a Zipf(0.8) popularity over 400 items; 200 000 requests.
    # Che's approximation is known to be accurate to about 1e-2 on such streams (Che et al.
    # 2002; Fricker, Robert & Roberts 2012 explain why); tolerance 0.01 absolute.
    rng = seeded("che")
    w = np.arange(1, 401, dtype=float) ** -0.8
    w /= w.sum()
    items = rng.choice(400, size=200_000, p=w)
    cap, exact = cache.lru_hit_curve(items)
    che = cache.che_hit_curve(w, cap)
    assert np.max(np.abs(che - exact)) < 0.01
    assert che[0] == 0.0 and che[-1] == 1.0 and np.all(np.diff(che) >= -1e-12)
    # the characteristic time solves the occupancy equation: check one capacity by brute force
    from scipy.optimize import brentq

    t = brentq(lambda tc: np.sum(-np.expm1(-w * tc)) - 57, 1e-6, 1e9)
    assert cache.che_hit_curve(w, [57])[0] == pytest.approx(np.sum(w * -np.expm1(-w * t)), rel=1e-9)


def test_shards_estimate_error_is_small_on_a_big_random_stream():
    # An MoE-like IRM stream: 80 layers x 256 experts (20 480 items), Zipf(0.7) per layer,
    # 10^6 requests. Fixed-rate SHARDS at R = 0.1 keeps ~2 000 items; its max absolute
    # hit-rate error over all capacities stays below 0.05 for seeds 0..2 (measured 0.014,
    # 0.005, 0.039), mean error below 0.03. Waldspurger et al. (2015) report mean errors
    # of ~0.01 on production traces with millions of items.
    rng = seeded("shards")
    w = np.arange(1, 257, dtype=float) ** -0.7
    w = np.tile(w / w.sum() / 80, 80)
    items = rng.choice(w.size, size=1_000_000, p=w)
    cap, exact = cache.lru_hit_curve(items)
    for seed in range(3):
        scap, est = cache.shards_hit_curve(items, 0.1, seed=seed)
        error = np.abs(est[np.minimum(cap, scap[-1])] - exact)  # the estimate held beyond its range
        assert np.max(error) < 0.05
        assert np.mean(error) < 0.03
    _, est = cache.shards_hit_curve(items, 1.0)
    np.testing.assert_array_equal(est, exact)
    with pytest.raises(ValueError, match="sample rate"):
        cache.shards_hit_curve(items, 0.0)


def test_s3fifo_sanity_on_a_skewed_stream():
    rng = seeded("s3fifo-sanity")
    topk = random_trace(rng, steps=200, streams=4, layers=4, experts=32, k=4, skew=1.2)
    req = requests_from_trace(topk, 32)
    for cap in (8, 32, 64, 96):  # small caches thrash: a step's union cycles through them
        s3 = simulate(req, cap, policy="s3fifo", warmup_steps=10)
        bound = simulate(req, cap, policy="belady", warmup_steps=10)
        assert 0.0 <= s3.hit_rate <= bound.hit_rate
        if cap >= 64:
            assert s3.hit_rate > 0.0


# ----------------------------------------------------------------------------- the embedded trace

# Every policy, scope and lookup on the embedded trace (242 037 requests) against pure-Python
# references: the request stream, the hit flags, the per-step counts and the LRU curve must stay
# exactly what these loops give whatever the simulator does to save memory.
EMBEDDED = Path(__file__).resolve().parents[1] / "data" / "traces" / "qwen3-30b-a3b-like.npz"
EMBEDDED_CAP = {"global": 1000, "layer": 12}  # items per cache: both evict on every step


@pytest.fixture(scope="module")
def embedded():
    from moeroof.data.io import read_trace

    t = read_trace(EMBEDDED)
    return t, requests_from_trace(t.topk, t.experts)


def heap_ref_lfu(items, cap, starts, perfect=False):
    """In-cache (or ``perfect``) LFU, ties to the least recently used: ref_lfu with a lazy heap
    (same choices)."""
    import heapq

    freq, last, cached, heap, hits, pre = {}, {}, set(), [], [], {}
    for t, x in enumerate(items):
        freq[x] = freq.get(x, 0) + 1 if perfect or x in cached else 1
        last[x] = t
        hits.append(judged(items, starts, t, lambda y: y in cached, pre))
        if x not in cached and cap >= 1:
            while len(cached) + 1 > cap:
                f, tl, v = heapq.heappop(heap)
                if v in cached and (f, tl) == (freq[v], last[v]):
                    cached.remove(v)
            cached.add(x)
        if x in cached:
            heapq.heappush(heap, (freq[x], t, x))
    return np.array(hits, dtype=bool)


def heap_ref_belady(items, cap, starts, bypass=True):
    """MIN with bypass (or without): ref_belady with next uses by a backward scan and a lazy
    max-heap."""
    import heapq

    n = len(items)
    nxt, seen = [n] * n, {}
    for t in range(n - 1, -1, -1):
        nxt[t] = seen.get(items[t], n)
        seen[items[t]] = t
    c, heap, hits, pre = {}, [], [], {}
    for t, x in enumerate(items):
        hits.append(judged(items, starts, t, lambda y: y in c, pre))
        if x not in c:
            if cap < 1:
                continue
            while len(c) + 1 > cap:
                while c.get(heap[0][1]) != -heap[0][0]:
                    heapq.heappop(heap)  # stale entry
                if bypass and -heap[0][0] <= nxt[t]:
                    break
                del c[heapq.heappop(heap)[1]]
            if len(c) + 1 > cap:
                continue
        c[x] = nxt[t]
        heapq.heappush(heap, (-nxt[t], x))
    return np.array(hits, dtype=bool)


def ref_static(items, cap, starts):
    """The ``cap`` most requested items (ties: lower id) pinned, each loaded on first use."""
    counts = {}
    for x in items:
        counts[x] = counts.get(x, 0) + 1
    hot = set(sorted(counts, key=lambda x: (-counts[x], x))[: int(cap)])
    seen, hits = set(), []
    for x in items:
        hits.append(x in hot and x in seen)
        seen.add(x)
    return np.array(hits, dtype=bool)


EMBEDDED_REFS = {
    "lru": lambda items, cap, st: ref_lru(items, {0: cap}, lambda x: 0, unit_sizes(max(items) + 1), st),
    "lfu": heap_ref_lfu,
    "lfu-perfect": lambda items, cap, st: heap_ref_lfu(items, cap, st, perfect=True),
    "belady": heap_ref_belady,
    "belady-insert": lambda items, cap, st: heap_ref_belady(items, cap, st, bypass=False),
    "s3fifo": ref_s3fifo,
    "arc": ref_arc,
    "static": ref_static,
}


def test_heap_references_equal_the_plain_ones():
    for _, _, req in cases("heap-refs", n=6):
        items = req.items.tolist()
        size = unit_sizes(req.n_items)
        for lookup in cache.LOOKUPS:
            st = ref_lookup_starts(req, lookup)
            for cap in (0, 1, 3, 8):
                group_of, cap_of = groups_of(req, "global", cap, req.layers)
                for perfect in (False, True):
                    want = ref_lfu(items, cap_of, group_of, size, st, perfect=perfect)
                    assert heap_ref_lfu(items, cap, st, perfect=perfect).tolist() == want.tolist()
                for bypass in (False, True):
                    want = ref_belady(items, cap_of, group_of, size, st, bypass=bypass)
                    assert heap_ref_belady(items, cap, st, bypass=bypass).tolist() == want.tolist()


def embedded_ref_hits(req, policy, scope, lookup) -> np.ndarray:
    """Reference hit flags: one cache, or one per layer run on that layer's sub-stream (a lookup
    never spans two layers, so its sub-stream's lookups are the same)."""
    items = req.items.tolist()
    st = ref_lookup_starts(req, lookup)
    ref = EMBEDDED_REFS[policy]
    if scope == "global":
        return ref(items, EMBEDDED_CAP["global"], st)
    hits = np.zeros(len(items), dtype=bool)
    for layer in range(req.layers):
        idx = np.flatnonzero(req.layer == layer)
        hits[idx] = ref([items[i] for i in idx], EMBEDDED_CAP["layer"], [st[i] for i in idx])
    return hits


def test_embedded_request_stream_equals_the_loops(embedded):
    t, req = embedded
    want = np.array(ref_stream(np.asarray(t.topk), t.experts), dtype=np.int64)
    assert req.step.tolist() == want[:, 0].tolist()
    assert req.layer.tolist() == want[:, 1].tolist()
    assert req.items.tolist() == (want[:, 1] * t.experts + want[:, 2]).tolist()


@pytest.mark.parametrize("lookup", cache.LOOKUPS)
@pytest.mark.parametrize("scope", ["global", "layer"])
@pytest.mark.parametrize("policy", cache.POLICIES)
def test_embedded_trace_hits_equal_the_references(embedded, policy, scope, lookup):
    _, req = embedded
    cap = EMBEDDED_CAP[scope] * (req.layers if scope == "layer" else 1)
    want = embedded_ref_hits(req, policy, scope, lookup)
    res = simulate(req, cap, policy=policy, scope=scope, lookup=lookup, warmup_steps=5, return_hits=True)
    assert res.request_hits.tolist() == want.tolist()
    assert res.hits_per_step.tolist() == np.bincount(req.step[want], minlength=req.steps).tolist()
    assert res.misses_per_step.tolist() == np.bincount(req.step[~want], minlength=req.steps).tolist()
    assert res.hits == int(want[req.step >= 5].sum()) and res.requests == int((req.step >= 5).sum())
    if policy == "lru" and scope == "global":  # the one-pass curve, at that capacity and after warm-up
        curve = cache.lru_hit_curve(req, lookup=lookup, warmup_steps=5)[1]
        assert curve[cap] == res.hits / res.requests
        assert cache.lru_hit_curve(req, lookup=lookup)[1][cap] == int(want.sum()) / len(req)


def test_embedded_trace_bytes_streamed_equal_the_reference(embedded):
    _, req = embedded
    sizes = 1.0 + (np.arange(req.n_items) % 7) / 3.0  # unequal, not exactly representable sums
    items = req.items.tolist()
    st = ref_lookup_starts(req, "layer")
    cap = 1500.0
    want = ref_lru(items, {0: cap}, lambda x: 0, sizes, st)
    res = simulate(req, cap, policy="lru", capacity_unit="bytes", item_bytes=sizes, return_hits=True)
    assert res.request_hits.tolist() == want.tolist()
    per_step = [0.0] * req.steps
    for t in np.flatnonzero(~want).tolist():  # summed in request order, as the simulator does
        per_step[int(req.step[t])] += float(sizes[items[t]])
    assert res.bytes_streamed_per_step.tolist() == per_step


# ----------------------------------------------------------------------------- policy variants


def test_belady_insert_is_the_optimum_of_demand_paging():
    # judged request by request, MIN inserting every miss hits at least as often as any policy
    # that inserts every miss (unit sizes), and at most as often as MIN with bypass
    demand = ("lru", "lfu", "lfu-perfect", "s3fifo", "arc")
    for _, _, req in cases("demand-paging", n=6, steps=30, experts=10, k=3):
        for cap in range(0, req.n_items + 2):
            rates = {p: simulate(req, cap, policy=p, lookup="request").hits for p in (*demand, "belady-insert")}
            bound = simulate(req, cap, policy="belady", lookup="request").hits
            assert all(rates[p] <= rates["belady-insert"] for p in demand), (cap, rates)
            assert rates["belady-insert"] <= bound


def test_in_cache_lfu_forgets_an_evicted_items_count():
    # cache of 2; item 0 is requested three times, then 1, 2, 1, 2, ... alternate. In-cache LFU
    # forgets the count of the one of 1, 2 it evicts, so each returns with count 1 and evicts
    # the other; perfect LFU remembers, so 1 and 2 climb past 0's count and displace it
    items = np.array([0, 0, 0] + [1, 2] * 6, dtype=np.int64)
    req = Requests(items, np.arange(items.size, dtype=np.int32), np.zeros(items.size, np.int16), items.size, 1, 3)
    perfect = simulate(req, 2, policy="lfu-perfect", lookup="request", return_hits=True).request_hits
    in_cache = simulate(req, 2, policy="lfu", lookup="request", return_hits=True).request_hits
    size = unit_sizes(3)
    for perfect_flag, got in ((True, perfect), (False, in_cache)):
        want = ref_lfu(items.tolist(), {0: 2}, lambda x: 0, size, None, perfect=perfect_flag)
        assert got.tolist() == want.tolist()
    # in-cache LFU: 1 enters with count 1 beside 0 (count 3); 2 evicts 1 (count 1, the lowest),
    # 1 evicts 2, ...: only 0's two repeats hit
    assert int(in_cache.sum()) == 2
    # perfect LFU: 1 and 2 climb to count 3 each while evicting each other, then 0 (count 3,
    # least recently used) goes and both stay: the last requests hit
    assert int(perfect.sum()) > int(in_cache.sum())


def test_s3fifo_threshold_argument():
    _, _, req = next(cases("s3fifo-threshold", n=1, steps=30, experts=10))
    default = simulate(req, 11, policy="s3fifo", return_hits=True)
    one = simulate(req, 11, policy="s3fifo", s3fifo_threshold=1, return_hits=True)
    assert default.request_hits.tolist() == one.request_hits.tolist() and not default.notes
    two = simulate(req, 11, policy="s3fifo", s3fifo_threshold=cache.LIBCACHESIM_S3FIFO_THRESHOLD)
    assert any("after 2 hits" in n for n in two.notes)
    assert cache.S3FIFO_MOVE_TO_MAIN_THRESHOLD == 1 and cache.LIBCACHESIM_S3FIFO_THRESHOLD == 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="s3fifo_threshold must be an integer"):
            simulate(req, 11, policy="s3fifo", s3fifo_threshold=bad)
    with pytest.raises(ValueError, match="policy='s3fifo' only"):
        simulate(req, 11, policy="lru", s3fifo_threshold=2)


# ----------------------------------------------------------------------------- the compiled request pass


def test_compact_requests_equal_the_stream_given_per_request():
    # requests_from_trace keeps items and per-(step, layer) counts; step, layer and the lookups
    # made from them equal those of the same stream given per request, and every policy counts
    # the same per step either way
    for _, topk, req in cases("compact", n=4, steps=30, streams=3, layers=3, experts=8, k=2):
        assert req.cells is not None and req.cells.shape == (req.steps * req.layers,)
        want = np.array(ref_stream(topk, 8), dtype=np.int64).reshape(-1, 3)
        assert req.step.tolist() == want[:, 0].tolist() and req.layer.tolist() == want[:, 1].tolist()
        loose = Requests(req.items, req.step, req.layer, req.steps, req.layers, req.experts)
        assert loose.cells is None
        off, cstep = req.lookups()
        off2, cstep2 = loose.lookups()
        nonempty = np.diff(off) > 0  # the per-request form has no empty lookups
        assert off[:-1][nonempty].tolist() == off2[:-1].tolist() and cstep[nonempty].tolist() == cstep2.tolist()
        for lookup in cache.LOOKUPS:
            assert cache.lookup_starts(req, lookup).tolist() == ref_lookup_starts(req, lookup)
            assert cache.lookup_starts(loose, lookup).tolist() == ref_lookup_starts(req, lookup)
            for policy in cache.POLICIES:
                a = simulate(req, 5, policy=policy, lookup=lookup, warmup_steps=3, return_hits=True)
                b = simulate(loose, 5, policy=policy, lookup=lookup, warmup_steps=3, return_hits=True)
                assert a.hits_per_step.tolist() == b.hits_per_step.tolist()
                assert a.misses_per_step.tolist() == b.misses_per_step.tolist()
                assert a.request_hits.tolist() == b.request_hits.tolist()
                # the per-step counts the kernels keep are the per-request flags summed by step
                assert a.hits_per_step.tolist() == np.bincount(req.step[a.request_hits], minlength=req.steps).tolist()
            np.testing.assert_array_equal(
                cache.lru_hit_curve(req, lookup=lookup)[1], cache.lru_hit_curve(loose, lookup=lookup)[1]
            )
            np.testing.assert_array_equal(
                cache.shards_hit_curve(req, 0.5, lookup=lookup)[1], cache.shards_hit_curve(loose, 0.5, lookup=lookup)[1]
            )
        assert cache.request_histogram(req).tolist() == cache.request_histogram(loose).tolist()
        with pytest.raises(AttributeError, match="read-only"):
            req.items = req.items[:1]


def _io_error(tmp_path, topk, experts=8):
    """read_trace's words for a trace's first bad id ('topk[s,t,l,k]: topk: reason'), or None."""
    from moeroof.data.io import InputError, read_trace

    path = tmp_path / "t.npy"
    np.save(path, topk)
    (tmp_path / "t.json").write_text(f'{{"experts": {experts}, "top_k": {topk.shape[3]}}}')
    try:
        read_trace(path)
    except InputError as err:
        return str(err).split(":", 1)[1]
    return None


@pytest.mark.parametrize("chunk", [None, 3 * 2 * 2 * 2, 3 * 3 * 2 * 2 * 2])
def test_validating_pass_names_the_first_error_as_read_trace(tmp_path, monkeypatch, chunk):
    # bad ids of each kind, alone and together in one chunk or in different chunks: the compiled
    # pass names the same first error as read_trace, in its words, whatever the chunks
    import moeroof.data.io as mio

    if chunk is not None:
        monkeypatch.setattr(mio, "TOPK_CHUNK_ELEMENTS", chunk)
    rng = seeded("validate-pass")
    errors = 0
    for trial in range(40):
        topk = random_trace(rng, steps=9, streams=3, layers=2, experts=8, k=2)
        for _ in range(int(rng.integers(1, 4))):
            s, t, l = (int(rng.integers(0, n)) for n in topk.shape[:3])
            kind = int(rng.integers(0, 4))
            if kind == 0:
                topk[s, t, l, int(rng.integers(0, 2))] = rng.choice([8, 9, -2, 100])
            elif kind == 1:
                topk[s, t, l] = [3, -1] if rng.random() < 0.5 else [-1, 3]
            elif kind == 2:
                topk[s, t, l] = [5, 5]
        want = _io_error(tmp_path, topk)
        for dtype in (np.int64, np.int16, np.dtype(">i4")):
            arr = topk.astype(dtype)
            if want is None:
                strict = requests_from_trace(arr, 8, validate=True)
                assert strict.items.tolist() == requests_from_trace(topk, 8).items.tolist()
                continue
            with pytest.raises(cache.TraceIdError) as ei:
                requests_from_trace(arr, 8, validate=True)
            assert f"{ei.value.index}: topk: {ei.value.reason}" == want, (trial, dtype)
            errors += 1
    assert errors > 60  # most trials hold a bad id


def test_the_lenient_pass_checks_the_selected_streams_range_only():
    topk = np.zeros((3, 2, 1, 2), dtype=np.int64)
    topk[..., 1] = 1
    topk[1, 0, 0] = [4, 4]  # an expert twice: not this pass's business
    topk[2, 1, 0] = [2, -1]  # partly padding: ditto
    req = requests_from_trace(topk, 8)
    assert req.items.tolist() == [0, 1, 0, 1, 4, 0, 1, 2]
    topk[2, 1, 0, 0] = 9
    with pytest.raises(cache.TraceIdError, match=r"topk\[2,1,0,0\]: expert id 9 not in \[-1, 8\)"):
        requests_from_trace(topk, 8)
    assert requests_from_trace(topk, 8, streams=np.array([0])).items.tolist() == [0, 1, 4, 0, 1]
    with pytest.raises(ValueError, match="appears twice"):
        requests_from_trace(topk[:2], 8, validate=True)


def test_request_pass_reads_memory_maps_and_odd_dtypes(tmp_path):
    rng = seeded("odd-dtypes")
    topk = random_trace(rng, steps=20, streams=4, layers=3, experts=40, k=3)
    want = requests_from_trace(topk, 40)
    np.save(tmp_path / "t.npy", topk.astype(np.int16))
    mm = np.load(tmp_path / "t.npy", mmap_mode="r")
    for arr in (mm, mm[:, :, 1:], topk.astype(">i8"), topk.astype(np.int32), np.asfortranarray(topk)):
        got = requests_from_trace(arr, 40)
        ref = requests_from_trace(np.ascontiguousarray(arr).astype(np.int64), 40)
        assert got.items.tolist() == ref.items.tolist() and got.cells.tolist() == ref.cells.tolist()
    assert requests_from_trace(mm, 40).items.tolist() == want.items.tolist()
    # many experts per (step, layer): the sweep of the layer's ids instead of the sort
    wide = random_trace(rng, steps=6, streams=30, layers=2, experts=12, k=4)
    assert list(
        zip(
            requests_from_trace(wide, 12).step.tolist(),
            requests_from_trace(wide, 12).layer.tolist(),
            (requests_from_trace(wide, 12).items % 12).tolist(),
        )
    ) == ref_stream(wide, 12)


# ----------------------------------------------------------------------------- empty streams


@pytest.mark.parametrize("shape", [(3, 1, 0, 2), (0, 1, 2, 2), (3, 0, 2, 2), (3, 1, 2, 2)])
@pytest.mark.parametrize("policy", cache.POLICIES)
@pytest.mark.parametrize("scope", ["global", "layer"])
def test_every_policy_on_an_empty_request_stream(shape, policy, scope):
    """Zero layers, zero steps, zero streams or all padding: no request, no hit, no crash (belady
    read ``occ[0]`` of an empty size array; scope layer divided the capacity by zero layers)."""
    trace = np.zeros(shape, dtype=np.int32) if shape != (3, 1, 2, 2) else -np.ones(shape, dtype=np.int32)
    req = requests_from_trace(trace, 4)
    assert req.items.size == 0
    if scope == "layer" and shape[2] == 0:
        with pytest.raises(ValueError, match="0 layers"):
            simulate(req, 2, policy=policy, scope=scope)
        return
    res = simulate(req, 2, policy=policy, scope=scope, return_hits=True)
    assert (res.requests, res.hits, res.misses) == (0, 0, 0)
    assert np.isnan(res.hit_rate) and res.request_hits.size == 0
