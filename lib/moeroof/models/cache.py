"""Expert cache: trace-driven simulation and miss-ratio curves (docs/models.md, caches).

**Request stream.** A decode step executes layer by layer; at each MoE layer the batch needs the
*union* of the experts its live streams route to. :func:`requests_from_trace` turns a trace
``topk`` (steps, streams, layers, K) with ``-1`` padding into that stream: for every step, for
every layer in layer order, the distinct experts in ascending id. An *item* is one
(layer, expert) pair, ``item = layer_index · E + expert``; a step never requests an item twice.

**Simulation** (:func:`simulate`): every request is a hit if the item is cached, else a miss
that streams the item's bytes. *When* it is judged is the ``lookup``: by default as its
(step, layer) starts — an engine looks up all of a layer's experts, computes with the cached
ones and fetches the misses, so a miss never evicts an expert the same layer still needs (with
K = 8 and a per-layer cache of 8 experts, the hit rate is then the consecutive-token overlap
of the layer's selections); ``lookup="request"`` judges each request in its own turn, the way a
trace-driven simulator such as libCacheSim replays the same request order (a miss can then
evict an expert requested later in the same layer, so a cache of K experts hits less than the
overlap). Either way the contents evolve request by request in the order below. Capacity
counts experts (each item one slot) or bytes (items may
differ in size); scope ``"global"`` is one cache shared by all layers, ``"layer"`` one cache per
layer with ``capacity / layers`` each (floored to whole experts for an expert capacity). An item
larger than its cache is streamed and never cached. Per-rank ownership
(:func:`simulate_ranks`): a partition maps experts to ranks and each rank caches only its own
experts in its own cache. Policies:

- ``"lru"`` — evict the least recently used item (demand paging: every miss is inserted).
- ``"lfu"`` — *in-cache* LFU, as libCacheSim's ``LFU`` (``cache/eviction/LFU.c``) and most
  engines keep it: evict the cached item with the fewest requests since it entered the cache; an
  evicted item's count is forgotten, so it comes back with a count of 1. Ties go to the item
  that reached its count earliest — the least recently used among equal counts, which is
  libCacheSim's order (a FIFO list per count: an item joins the tail of its new count's list
  on every request and the head of the lowest count's list is evicted).
- ``"lfu-perfect"`` — *perfect* LFU: counts run over every request since the start of the trace,
  an evicted item's history survives its eviction (Breslau et al. 1999, "Web caching and
  Zipf-like distributions", INFOCOM, name the two variants); ties as ``"lfu"``. Under the
  independent reference model it converges to the static hot set; on a stream that cycles
  through more items than fit, it keeps the items that were popular, where in-cache LFU keeps
  recycling the newest arrivals (what our ``moeroof cache`` ``lfu`` once did).
- ``"static"`` — a hot set pinned from a histogram (most popular items that fit, greedily in
  rank order, per cache), loaded on first use (a miss: every policy starts cold) and never
  evicted; other items bypass the cache. With no histogram the
  trace's own request counts are used: an *oracle* hot set (it has seen the future).
- ``"belady"`` — Belady's MIN (Belady 1966) with bypass: on a miss with a full cache, evict the
  cached item whose next use is farthest in the future — or bypass the incoming item when its
  own next use is farther still (the stream is computed from a scratch buffer, as a static hot
  set does). With unit sizes this is the offline optimum over every policy, bypassing or not,
  so it bounds all the others. With unequal sizes optimal caching is NP-hard; the same rule
  (evict farthest first until the item fits, never an item needed sooner than it) is then a
  heuristic, not a bound.
- ``"belady-insert"`` — Belady's MIN as demand paging, libCacheSim's ``Belady``
  (``cache/eviction/Belady.c``): every miss is inserted, evicting the cached items used farthest
  in the future until it fits. With unit sizes it is the optimum among policies that insert
  every miss (Belady 1966; Mattson et al. 1970 prove it), at most ``"belady"``'s hits: an item that is never requested
  again still displaces one that is.
- ``"s3fifo"`` — S3-FIFO (Yang et al. 2023, "FIFO queues are all you need for cache eviction",
  SOSP; the original algorithm, libCacheSim ``S3FIFOv0``, ``cache/eviction/S3FIFOv0.c``): a small
  FIFO S of ``floor(0.1 · capacity)`` (libCacheSim's integer share), a main FIFO M (the rest)
  and a ghost FIFO G of ids (``floor(0.9 · capacity)``). New items enter S, items found in G
  enter M. A counter counts hits. Evicting from S (while M holds no more than its share and S
  is not empty): the tail moves to M with its counter cleared if it was hit at least
  ``s3fifo_threshold`` times (the *move-to-main threshold*), else it leaves for G. Evicting
  from M: the tail is reinserted with its counter ``min(counter, 3) − 1`` (a 2-bit clock) while
  the counter is > 0, else evicted. The threshold defaults to
  :data:`S3FIFO_MOVE_TO_MAIN_THRESHOLD` = 1 — an item is promoted if it was reused while in S,
  as the algorithm's authors describe it, and this simulator's behaviour before the parameter
  existed; libCacheSim's ``S3FIFOv0`` defaults to
  :data:`LIBCACHESIM_S3FIFO_THRESHOLD` = 2 (``move-to-main-threshold=2``). (libCacheSim's
  ``S3FIFO``, without ``v0``, is a later variant and differs.)
- ``"arc"`` — Adaptive Replacement Cache (Megiddo & Modha 2003, FAST, Fig. 4): recency list
  T1, frequency list T2 and their ghosts B1, B2; the target size p of T1 adapts on ghost hits.
  Unit sizes only (capacity in experts).

**Against libCacheSim** (``tests/test_cache_libcachesim.py``): with ``lookup="request"``, unit
sizes and one cache, the hit counts of ``lru``, ``lfu``, ``arc``, ``s3fifo`` (threshold 1 and 2)
and ``belady-insert`` equal libCacheSim's ``LRU``, ``LFU``, ``ARC``, ``S3FIFOv0`` (same
``move-to-main-threshold``) and ``Belady`` on the embedded trace and synthetic streams, at
several capacities (committed counts from ``benchmarks/libcachesim_counts.py``, and live when
the ``libcachesim`` package is installed). ``lfu-perfect`` and ``belady`` have no libCacheSim
counterpart. libCacheSim's S3FIFOv0 refuses a cache of fewer than 10 objects and admits
nothing into a small queue of one object; the comparison starts at 20 experts.

Warm-up steps are simulated but excluded from the counted hits and misses; per-step arrays
cover every step so callers can see the warm-up.

**Miss-ratio curve in one pass** (:func:`lru_hit_curve`): LRU has the stack (inclusion)
property, so a request hits a cache of C items iff its *stack distance* — the number of
distinct items referenced since the item's previous reference, itself included — is ≤ C
(Mattson, Gecsei, Slutz & Traiger 1970, "Evaluation techniques for storage hierarchies").
Distances come from a Fenwick (binary indexed) tree over the positions of each item's last
access (Bennett & Kruskal 1975; Almási, Caşcaval & Padua 2002): the distance is the number of
marks after the item's previous position. Positions are compacted whenever the tree fills, so it
holds about two slots per distinct item and stays in cache: O(n log D) for n requests over D
items. Exact: equal to LRU simulation at every capacity (global scope, unit sizes), for either
lookup (with ``lookup="layer"`` a request's distance is read as its lookup starts: the cache of C
items is the top C of the stack, so it hits iff that distance is ≤ C).

**Che approximation** (:func:`che_hit_curve`; Che, Tung & Wang 2002, IEEE JSAC 20(7)): under the
independent reference model with per-request probabilities λ_i, an LRU cache of C items behaves
as if each item stayed for a characteristic time T_C solving ``Σ_i (1 − e^{−λ_i T_C}) = C``;
item i hits with probability ``1 − e^{−λ_i T_C}`` and the hit rate is their λ-weighted mean.

**SHARDS** (:func:`shards_hit_curve`; Waldspurger, Park, Garthwaite & Ahmad 2015, FAST,
fixed-rate variant): keep the requests of items whose hash satisfies ``hash mod P < R·P``
(spatial sampling: every reference of a sampled item is kept), compute their stack distances
exactly and scale each by ``1/R``. :func:`shards_error` states its error against the exact curve.

The inner loops are C (``models/native/``, compiled at install and loaded by
:mod:`moeroof.models.cache_native`); this module imports them only inside the functions that
run one, so importing it (the step model, the command line's parsers) loads no library.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from moeroof.core.results import Result

__all__ = [
    "POLICIES",
    "Requests",
    "CacheResult",
    "requests_from_trace",
    "request_histogram",
    "hot_set_ranking",
    "next_use",
    "LOOKUPS",
    "lookup_starts",
    "simulate",
    "simulate_ranks",
    "stack_distances",
    "lru_hit_curve",
    "che_hit_curve",
    "shards_hit_curve",
    "item_hash",
    "shards_error",
]

POLICIES = ("lru", "lfu", "lfu-perfect", "static", "belady", "belady-insert", "s3fifo", "arc")
SCOPES = ("global", "layer")
#: when a request is judged a hit: as its (step, layer) lookup starts, or in its own turn
LOOKUPS = ("layer", "request")
UNITS = ("experts", "bytes")
#: item ids (layers · experts) the simulator keys its tables by: int32 ids, below 2^31
MAX_ITEMS = 2**31
#: share of the capacity given to S3-FIFO's small queue (Yang et al. 2023, §4)
S3FIFO_SMALL_FRACTION = 0.1
#: S3-FIFO's default move-to-main threshold: hits in the small queue that move an item to main
S3FIFO_MOVE_TO_MAIN_THRESHOLD = 1
#: libCacheSim S3FIFOv0's default move-to-main threshold (``move-to-main-threshold=2``)
LIBCACHESIM_S3FIFO_THRESHOLD = 2
#: requests hashed at a time by shards_hit_curve
_HASH_CHUNK = 1 << 22


# ----------------------------------------------------------------------------- data classes


class Requests:
    """The request stream of a trace: one entry per (step, layer, distinct expert).

    ``items`` (n,) with ``item = layer · experts + expert``, in request order (step, then
    layer, then ascending expert); ``step`` (n,) and ``layer`` (n,). :func:`requests_from_trace`
    keeps only the items (int32: the key space layers · experts is below 2^31) and ``cells``, the requests
    of each (step, layer) (steps · layers,), 4 bytes a request: ``step`` (int32) and ``layer``
    (int16; int32 from 2^15 layers) are then made when first read (and kept), and the
    simulators never read them. ``Requests(items, step, layer, steps, layers, experts)`` takes
    them given per request instead.
    """

    __slots__ = ("items", "steps", "layers", "experts", "_step", "_layer", "_cells", "_lookups")
    items: np.ndarray
    steps: int
    layers: int
    experts: int

    def __init__(self, items, step, layer, steps, layers, experts, *, cells=None):
        set_ = object.__setattr__
        set_(self, "items", items)
        set_(self, "steps", int(steps))
        set_(self, "layers", int(layers))
        set_(self, "experts", int(experts))
        if cells is None:
            if step is None or layer is None:
                raise ValueError("give step and layer per request, or cells")
        else:
            cells = np.asarray(cells)
            if cells.shape != (self.steps * self.layers,):
                raise ValueError(f"cells must have one count per (step, layer), shape ({self.steps * self.layers},)")
            if int(cells.sum(dtype=np.int64)) != np.asarray(items).size:
                raise ValueError("cells must sum to the number of requests")
        set_(self, "_step", step)
        set_(self, "_layer", layer)
        set_(self, "_cells", cells)
        set_(self, "_lookups", None)

    def __setattr__(self, name, value):
        raise AttributeError(f"Requests is read-only: cannot set {name!r}")

    def __repr__(self) -> str:
        return f"Requests(n={len(self)}, steps={self.steps}, layers={self.layers}, experts={self.experts})"

    @property
    def n_items(self) -> int:
        """Size of the item id space, ``layers · experts``."""
        return int(self.layers * self.experts)

    @property
    def cells(self) -> np.ndarray | None:
        """Requests per (step, layer), C order (steps · layers,); None for a stream given per request."""
        return self._cells

    @property
    def step(self) -> np.ndarray:
        """Step of each request (int32), made from ``cells`` when first read."""
        if self._step is None:
            per_step = self._cells.reshape(self.steps, self.layers).sum(axis=1)
            object.__setattr__(self, "_step", np.repeat(np.arange(self.steps, dtype=np.int32), per_step))
        return self._step

    @property
    def layer(self) -> np.ndarray:
        """Layer of each request (int16; int32 from 2^15 layers), made from ``cells`` when first read."""
        if self._layer is None:
            dt = np.int16 if self.layers < 2**15 else np.int32
            lay = np.repeat(np.tile(np.arange(self.layers, dtype=dt), self.steps), self._cells)
            object.__setattr__(self, "_layer", lay)
        return self._layer

    def lookups(self) -> tuple[np.ndarray, np.ndarray]:
        """(off, cstep): requests ``off[c]`` to ``off[c + 1]`` form the c-th (step, layer) lookup,
        of step ``cstep[c]`` (int64 each, one per cell: no array as long as the stream)."""
        if self._lookups is None:
            if self._cells is not None:
                off = np.zeros(self._cells.size + 1, np.int64)
                np.cumsum(self._cells, out=off[1:])
                cstep = np.repeat(np.arange(self.steps, dtype=np.int64), self.layers)
            else:
                from moeroof.models import cache_native as kernels

                off, cstep = kernels.runs_kernel(np.ascontiguousarray(self._step), np.ascontiguousarray(self._layer))
            object.__setattr__(self, "_lookups", (off, cstep))
        return self._lookups

    def __len__(self) -> int:
        return int(self.items.size)


class TraceIdError(ValueError):
    """A bad id in a trace (:func:`requests_from_trace`): ``index`` names it (``topk[s,t,l,k]``),
    ``reason`` says what is wrong in :func:`moeroof.data.io.read_trace`'s words."""

    def __init__(self, index: str, reason: str):
        super().__init__(f"{index}: {reason}")
        self.index = index
        self.reason = reason


@dataclass(frozen=True)
class CacheResult(Result):
    """Outcome of one simulation; totals count the steps after warm-up only.

    ``hits_per_step``, ``misses_per_step`` and ``bytes_streamed_per_step`` cover every step,
    warm-up included. ``bytes_streamed_per_step`` counts experts when no item sizes were given.
    """

    policy: str
    capacity: float
    capacity_unit: str
    scope: str
    warmup_steps: int
    requests: int
    hits: int
    misses: int
    hit_rate: float
    hits_per_step: np.ndarray
    misses_per_step: np.ndarray
    bytes_streamed_per_step: np.ndarray
    bytes_unit: str = "bytes"
    notes: tuple[str, ...] = field(default=())
    #: per request, whether it hit (only with ``simulate(..., return_hits=True)``)
    request_hits: np.ndarray | None = None

    @property
    def miss_rate(self) -> float:
        return 1.0 - self.hit_rate

    @property
    def mean_bytes_streamed_per_step(self) -> float:
        """Mean streamed bytes (or experts, see ``bytes_unit``) over the counted steps."""
        counted = self.bytes_streamed_per_step[self.warmup_steps :]
        return float(counted.mean()) if counted.size else float("nan")


# ----------------------------------------------------------------------------- request stream


def _as_partition(partition, layers: int, experts: int) -> np.ndarray:
    part = np.asarray(partition)
    if part.shape not in ((experts,), (layers, experts)):
        raise ValueError(f"partition must have shape ({experts},) or ({layers}, {experts}), got {part.shape}")
    if part.size and not np.issubdtype(part.dtype, np.integer):
        raise ValueError(f"partition must hold integer ranks, got dtype {part.dtype}")
    if part.size and part.min() < 0:
        raise ValueError("partition ranks must be >= 0")
    return np.broadcast_to(part.astype(np.int64), (layers, experts))


def _stream_selection(streams, n_streams: int) -> np.ndarray:
    """The streams of a trace that form the batch (int64 indices): all, the first M (an int),
    or an index array (negative indices from the end)."""
    if streams is None:
        return np.arange(n_streams, dtype=np.int64)
    if np.isscalar(streams):
        m = int(streams)
        if not 1 <= m <= n_streams:
            raise ValueError(f"streams={m} outside 1..{n_streams}")
        return np.arange(m, dtype=np.int64)
    sel = np.asarray(streams)
    if sel.ndim != 1 or not np.issubdtype(sel.dtype, np.integer) or sel.size == 0:
        raise ValueError("streams must be a non-empty 1-D integer index array")
    if sel.min() < -n_streams or sel.max() >= n_streams:
        raise ValueError(f"stream index out of range for a trace of {n_streams} streams")
    return np.where(sel < 0, sel + n_streams, sel).astype(np.int64)


def requests_from_trace(topk, experts, *, partition=None, rank=None, streams=None, validate: bool = False) -> Requests:  # noqa: C901
    """The request stream of a trace ``topk`` (steps, streams, layers, K), ``-1`` padding.

    ``streams``: optional index array selecting the streams that form the batch (an int M means
    the first M). ``partition``: int array (experts,) or (layers, experts) mapping experts to
    ranks; with ``rank`` given only that rank's experts are kept (item ids stay global).
    One compiled pass over the trace, chunk by chunk over steps (a memory-mapped trace is never
    loaded whole), counts the requests of every (step, layer) and checks the ids; a second
    writes the items into an array of the final size. The stream keeps 4 bytes a request (the
    items; see :class:`Requests`).

    Ids outside ``[-1, experts)`` of the selected streams raise :class:`TraceIdError` (a
    ValueError). ``validate=True`` checks every stream as :func:`moeroof.data.io.read_trace`
    does, with its words and chunks (the same first error): ids in range, no token partly
    padding, no expert twice in a token — for a trace read with ``read_trace(validate=False)``.
    """
    experts = int(experts)
    if experts < 1:
        raise ValueError(f"experts must be >= 1, got {experts}")
    arr = topk
    if getattr(arr, "ndim", None) != 4:
        arr = np.asarray(arr)
        if arr.ndim != 4:
            raise ValueError(f"trace topk must have 4 dims (steps, streams, layers, K), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"trace topk must have an integer dtype, got {arr.dtype}")
    steps, n_streams, layers, _ = arr.shape
    sel = _stream_selection(streams, n_streams)
    keep = None
    if partition is not None or rank is not None:
        if partition is None or rank is None:
            raise ValueError("give both partition and rank (or neither)")
        keep = _as_partition(partition, layers, experts) == int(rank)
    use_keep = keep is not None
    keep = np.ascontiguousarray(keep) if use_keep else np.ones((1, 1), dtype=bool)
    from moeroof.data.io import TOPK_CHUNK_ELEMENTS  # read_trace's chunks: the same first error
    from moeroof.models import cache_native as kernels

    chunk = max(1, TOPK_CHUNK_ELEMENTS // max(1, int(np.prod(arr.shape[1:]))))
    if layers * experts >= MAX_ITEMS:
        raise ValueError(
            f"layers × experts = {layers} × {experts} items: the cache simulator keys its tables by "
            f"int32 item ids, below 2^31"
        )
    item_dt = np.int32
    cells = np.zeros(steps * layers, dtype=np.int32)
    mark = np.zeros(max(experts, 1), np.int64)
    tmark = np.zeros(max(experts, 1), np.int64)
    ctr = np.zeros(1, np.int64)
    err = np.zeros(15, np.int64)
    for s0 in range(0, steps, chunk):
        block = _native_block(arr, s0, chunk)
        kind = kernels.scan_block(
            block, experts, sel, keep, use_keep, bool(validate), mark, tmark, ctr, cells, s0 * layers, err
        )
        if kind != kernels.ID_OK:
            _raise_id_error(kind, err, s0, experts)
    items = np.empty(int(cells.sum(dtype=np.int64)), dtype=item_dt)
    mark[:] = 0
    pos = 0
    for s0 in range(0, steps, chunk):
        pos = kernels.emit_block(
            _native_block(arr, s0, chunk), experts, sel, keep, use_keep, mark, s0 * layers, items, pos
        )
    return Requests(items, None, None, int(steps), int(layers), experts, cells=cells)


def _native_block(arr, s0: int, chunk: int) -> np.ndarray:
    """Steps s0… of a trace as a plain array the kernels take: a view where it can be (a
    memory map's pages), else a copy of the chunk (byte-swapped or unsigned 64-bit ids)."""
    block = np.asarray(arr[s0 : s0 + chunk])
    if not block.dtype.isnative:
        block = block.astype(block.dtype.newbyteorder("="))
    if block.dtype == np.uint64:
        block = block.astype(np.int64)  # as read_trace's checks read it
    return block


def _raise_id_error(kind: int, err: np.ndarray, s0: int, experts: int) -> None:
    from moeroof.data.io import TOPK_DUPLICATE, TOPK_PARTIAL, TOPK_RANGE
    from moeroof.models import cache_native as kernels

    s, t, l, k, v = (int(x) for x in err[:5])
    index = f"topk[{s + s0},{t},{l},{k}]"
    if kind == kernels.ID_RANGE:
        raise TraceIdError(index, TOPK_RANGE.format(value=v, experts=experts))
    if kind == kernels.ID_PARTIAL:
        raise TraceIdError(index, TOPK_PARTIAL)
    raise TraceIdError(index, TOPK_DUPLICATE.format(value=v))


def request_histogram(requests: Requests, *, from_step: int = 0) -> np.ndarray:
    """Requests per item (layers·experts,) over the steps ≥ ``from_step``."""
    items = requests.items
    if from_step > 0:
        if requests.cells is not None:  # the stream is in step order: the steps ≥ from_step are its tail
            first = int(requests.cells[: min(from_step, requests.steps) * requests.layers].sum(dtype=np.int64))
            items = items[first:]
        else:
            items = items[requests.step >= from_step]
    return _bincount(items, requests.n_items)


def _bincount(items, minlength: int = 0) -> np.ndarray:
    """``np.bincount(items, minlength=minlength)`` (int64) of integer ids, counted by a kernel:
    ``np.bincount`` first copies the ids to int64, 8 bytes a request (800 MB at 10^8)."""
    items = np.asarray(items)
    if items.size == 0 or items.dtype.kind not in "iu" or int(items.min()) < 0 or int(items.max()) >= MAX_ITEMS:
        return np.bincount(items, minlength=minlength).astype(np.int64)  # its errors, its result
    from moeroof.models import cache_native as kernels

    return kernels.count_items(np.ascontiguousarray(items), max(int(minlength), int(items.max()) + 1))


def hot_set_ranking(popularity) -> np.ndarray:
    """Item ids by decreasing popularity (ties: lower id first); ``popularity`` flattened."""
    pop = np.asarray(popularity, dtype=float).ravel()
    return np.argsort(-pop, kind="stable").astype(np.int64)


def lookup_starts(requests: Requests, lookup: str = "layer", keep: np.ndarray | None = None) -> np.ndarray:
    """Bool (n,): which requests begin a lookup (of the stream restricted to ``keep``, if given).

    ``lookup="layer"``: one lookup per (step, layer) — an engine resolves a layer's experts
    together, serving the cached ones and fetching the misses, so a miss never evicts an expert
    the same layer is about to use. ``"request"``: every request is its own lookup (the order a
    trace-driven cache simulator such as libCacheSim sees). The simulators take the lookups as
    :meth:`Requests.lookups` (one offset per lookup); this array is for callers that want flags.
    """
    from moeroof.models import cache_native as kernels

    _check_lookup(lookup)
    n = len(requests) if keep is None else int(np.count_nonzero(keep))
    if lookup == "request":
        return np.ones(n, dtype=bool)
    off, _ = requests.lookups()
    if keep is not None:
        off = kernels.subset_offsets(off, np.ascontiguousarray(keep, dtype=bool))
    return kernels.starts_from_offsets(off, n)


def _check_lookup(lookup: str) -> None:
    if lookup not in LOOKUPS:
        raise ValueError(f"lookup must be one of {', '.join(LOOKUPS)}, got {lookup!r}")


def next_use(items: np.ndarray, dtype=np.int64) -> np.ndarray:
    """Index of each request's next reference to the same item; ``len(items)`` when none.

    One backward pass (no sort); ``dtype`` of the result (int32 when ``len(items) < 2^31``
    halves what Belady keeps per request)."""
    from moeroof.models import cache_native as kernels

    items = np.asarray(items)
    n = items.size
    if np.dtype(dtype) == np.int32 and n >= 2**31 - 1:
        dtype = np.int64
    out = np.empty(n, dtype=dtype)
    if n == 0:
        return out
    if items.min() < 0:
        raise ValueError("item ids must be >= 0")
    kernels.next_use_kernel(np.ascontiguousarray(items), int(items.max()) + 1, out)
    return out


# ----------------------------------------------------------------------------- simulation


def _item_sizes(item_bytes, layers: int, experts: int) -> np.ndarray | None:
    if item_bytes is None:
        return None
    b = np.asarray(item_bytes, dtype=float)
    n_items = layers * experts
    if b.ndim == 0:
        b = np.full(n_items, float(b))
    elif b.shape == (experts,):
        b = np.tile(b, layers)
    elif b.shape == (layers, experts):
        b = b.ravel()
    elif b.shape != (n_items,):
        raise ValueError(
            f"item_bytes must be a scalar or have shape ({experts},), ({layers}, {experts}) or ({n_items},), got {b.shape}"
        )
    if not np.all(np.isfinite(b)) or np.any(b <= 0):
        raise ValueError("item_bytes must be finite and > 0")
    return np.ascontiguousarray(b)


def _groups(scope: str, capacity: float, unit: str, layers: int, experts: int):
    n_items = layers * experts
    if scope == "global":
        group = np.zeros(n_items, dtype=np.int64)
        cap = np.array([float(capacity)])
    else:
        group = np.repeat(np.arange(layers, dtype=np.int64), experts)
        per = capacity / layers if layers else 0.0  # a trace of zero layers: no group, nothing to split
        if unit == "experts":
            per = np.floor(per + 1e-9)
        cap = np.full(layers, float(per))
    if unit == "experts":
        cap = np.floor(cap + 1e-9)
    return group, cap


def _clamp_capacity(cap, group, occ, items, n_items, unit, *, everything=False) -> np.ndarray:
    """Each group's capacity, capped at what its distinct requested items occupy (every item of
    the group with ``everything``: a pinned hot set may rank items the stream never requests).

    A cache that holds every item it will ever see never evicts, so any larger capacity gives
    the same hits; the cap keeps the kernels' integer arithmetic in range (a capacity of 2^63
    experts overflowed ARC's list lengths and it hit nothing). In bytes the cap is twice the
    total, so that float rounding in the kernels' running sums can never make it bind.
    """
    present = np.ones(n_items, dtype=bool) if everything else _bincount(items, n_items) > 0
    need = np.bincount(group[present], weights=occ[present], minlength=cap.size)[: cap.size]
    if unit == "bytes":
        need = 2.0 * need
    return np.minimum(cap, need)


def _pinned_mask(pinned, group, cap, occ, n_items) -> np.ndarray:
    """Greedy fill of each group's cache with the top-ranked items that fit."""
    p = np.asarray(pinned)
    is_ranking = (
        p.ndim == 1
        and np.issubdtype(p.dtype, np.integer)
        and (p.size < n_items or np.array_equal(np.sort(p), np.arange(n_items)))
    )
    if is_ranking:
        if p.size and (p.min() < 0 or p.max() >= n_items):
            raise ValueError(f"pinned ranking holds item ids outside [0, {n_items})")
        ranking = p.astype(np.int64)
    else:
        if p.size != n_items:
            raise ValueError(f"pinned popularity must have {n_items} entries (layers·experts), got shape {p.shape}")
        ranking = hot_set_ranking(p)
    mask = np.zeros(n_items, dtype=bool)
    used = np.zeros(cap.size)
    for x in ranking:
        g = group[x]
        if not mask[x] and used[g] + occ[x] <= cap[g]:
            mask[x] = True
            used[g] += occ[x]
    return mask


def _kernel_items(items, n_items: int) -> np.ndarray:
    """The request items as the C kernels read them (int32, contiguous), checked in [0, n_items)."""
    if n_items >= MAX_ITEMS:
        raise ValueError(f"{n_items} items: the cache simulator keys its tables by int32 item ids, below 2^31")
    items = np.ascontiguousarray(items)
    if items.size and (items.min() < 0 or items.max() >= n_items):
        raise ValueError(f"request item ids must lie in [0, {n_items})")
    return items if items.dtype == np.int32 else items.astype(np.int32)


def simulate(  # noqa: C901
    requests: Requests,
    capacity: float,
    *,
    policy: str = "lru",
    capacity_unit: str = "experts",
    item_bytes=None,
    scope: str = "global",
    warmup_steps: int = 0,
    pinned=None,
    return_hits: bool = False,
    lookup: str = "layer",
    s3fifo_threshold: int = S3FIFO_MOVE_TO_MAIN_THRESHOLD,
) -> CacheResult:
    """Simulate one cache policy on a request stream (see the module docstring for policies).

    ``capacity`` in experts (``capacity_unit="experts"``: every item takes one slot) or bytes
    (``"bytes"``: items take ``item_bytes``, required). ``item_bytes`` is a scalar or an array
    (experts,), (layers, experts) or (layers·experts,); it also sets the bytes streamed per miss
    (default 1 per item: the per-step figure then counts experts, ``bytes_unit="experts"``).
    ``scope="layer"``: one cache per layer with ``capacity / layers`` each. ``pinned`` (static
    only): a ranking (item ids, most popular first) or a popularity array (layers·experts,)
    or (layers, experts); default the stream's own request counts (an oracle hot set).
    ``lookup``: ``"layer"`` (default) judges a request a hit if its item is cached when its
    (step, layer) lookup starts, as an engine that serves a layer's cached experts and fetches
    its misses does; ``"request"`` judges each request in its own turn, as libCacheSim does
    (see :func:`lookup_starts`). The cache contents evolve request by request either way.
    ``s3fifo_threshold`` (``policy="s3fifo"`` only): hits in S3-FIFO's small queue that move an
    item to the main queue, an integer ≥ 1 (default 1; libCacheSim's S3FIFOv0 uses 2).
    """
    from moeroof.models import cache_native as kernels

    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if capacity_unit not in UNITS:
        raise ValueError(f"capacity_unit must be 'experts' or 'bytes', got {capacity_unit!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be 'global' or 'layer', got {scope!r}")
    capacity = float(capacity)
    if not np.isfinite(capacity) or capacity < 0:
        raise ValueError(f"capacity must be finite and >= 0, got {capacity!r}")
    warmup_steps = int(warmup_steps)
    if warmup_steps < 0:
        raise ValueError("warmup_steps must be >= 0")
    layers, experts = requests.layers, requests.experts
    if scope == "layer" and layers < 1:
        # a cache per layer of a trace with no layer: there is no cache to split the capacity over
        raise ValueError("the trace has 0 layers: a per-layer cache (scope layer) needs at least one")
    n_items = layers * experts
    sizes = _item_sizes(item_bytes, layers, experts)
    if capacity_unit == "bytes" and sizes is None:
        raise ValueError("capacity_unit='bytes' needs item_bytes (bytes per expert)")
    occ = np.ones(n_items) if capacity_unit == "experts" else sizes
    if policy == "arc" and capacity_unit != "experts":
        raise ValueError("arc is implemented for unit sizes only: give the capacity in experts")
    if policy != "static" and pinned is not None:
        raise ValueError("pinned applies to policy='static' only")
    if isinstance(s3fifo_threshold, bool) or int(s3fifo_threshold) != s3fifo_threshold or s3fifo_threshold < 1:
        raise ValueError(f"s3fifo_threshold must be an integer >= 1, got {s3fifo_threshold!r}")
    s3fifo_threshold = int(s3fifo_threshold)
    if policy != "s3fifo" and s3fifo_threshold != S3FIFO_MOVE_TO_MAIN_THRESHOLD:
        raise ValueError("s3fifo_threshold applies to policy='s3fifo' only")
    group, cap = _groups(scope, capacity, capacity_unit, layers, experts)
    items = _kernel_items(requests.items, n_items)
    cap = _clamp_capacity(cap, group, occ, items, n_items, capacity_unit, everything=policy == "static")
    _check_lookup(lookup)
    off, cstep = requests.lookups()
    steps = int(requests.steps)
    weighted = sizes is not None
    # the kernels count hits, misses and streamed bytes per step; flags per request only on demand
    tail = (
        off,
        cstep,
        lookup == "request",
        steps,
        sizes if weighted else np.zeros(1),
        weighted,
        np.zeros(items.size if return_hits else 0, dtype=bool),
    )
    notes: list[str] = []
    if policy == "lru":
        counts = kernels.lru_pass(items, group, cap, occ, *tail)
    elif policy in ("lfu", "lfu-perfect"):
        mode = kernels.HEAP_LFU if policy == "lfu" else kernels.HEAP_LFU_PERFECT
        counts = kernels.heap_pass(items, group, cap, occ, mode, np.zeros(1, np.int64), *tail)
    elif policy == "belady":
        counts = kernels.heap_pass(items, group, cap, occ, kernels.HEAP_BELADY, next_use(items, np.int32), *tail)
        notes.append(
            "belady: offline optimum (Belady's MIN with bypass); the bound on every policy"
            + ("" if occ.size == 0 or np.all(occ == occ[0]) else " only for equal sizes — a heuristic here")
        )
    elif policy == "belady-insert":
        counts = kernels.heap_pass(items, group, cap, occ, kernels.HEAP_BELADY_INSERT, next_use(items, np.int32), *tail)
        notes.append(
            "belady-insert: offline (Belady's MIN inserting every miss, libCacheSim's Belady); "
            "the optimum of demand paging, at most belady's hits"
        )
    elif policy == "s3fifo":
        counts = kernels.s3fifo_pass(items, group, cap, occ, S3FIFO_SMALL_FRACTION, s3fifo_threshold, *tail)
        if s3fifo_threshold != S3FIFO_MOVE_TO_MAIN_THRESHOLD:
            notes.append(f"s3fifo: an item moves from the small queue to main after {s3fifo_threshold} hits")
    elif policy == "arc":
        counts = kernels.arc_pass(items, group, cap, *tail)
    else:
        if pinned is None:
            pinned = request_histogram(requests)
            notes.append("static: hot set pinned from the trace's own request histogram — an oracle hot set")
        # cold start like every other policy: a pinned item loads on first use
        mask = _pinned_mask(pinned, group, cap, occ, n_items)
        counts = kernels.static_pass(items, mask, off, cstep, *tail[3:])
    res = _result(counts, steps, sizes, policy, capacity, capacity_unit, scope, warmup_steps, tuple(notes))
    return replace(res, request_hits=tail[-1]) if return_hits else res


def _result(counts, steps, sizes, policy, capacity, unit, scope, warmup_steps, notes) -> CacheResult:
    hits_ps, miss_ps, bytes_ps = counts
    if sizes is None:
        bytes_ps = miss_ps.astype(float)
    w = min(warmup_steps, steps)
    hits = int(hits_ps[w:].sum())
    misses = int(miss_ps[w:].sum())
    total = hits + misses
    return CacheResult(
        policy=policy,
        capacity=capacity,
        capacity_unit=unit,
        scope=scope,
        warmup_steps=warmup_steps,
        requests=total,
        hits=hits,
        misses=misses,
        hit_rate=hits / total if total else float("nan"),
        hits_per_step=hits_ps,
        misses_per_step=miss_ps,
        bytes_streamed_per_step=bytes_ps,
        bytes_unit="experts" if sizes is None else "bytes",
        notes=notes,
    )


def simulate_ranks(topk, experts, partition, capacity_per_rank, **kw) -> list[CacheResult]:
    """One cache per rank: rank r caches only the experts ``partition`` maps to it.

    ``partition`` (experts,) or (layers, experts) int ranks 0..R−1; ``capacity_per_rank`` a
    scalar or one value per rank; ``streams`` goes to :func:`requests_from_trace`, every other
    keyword to :func:`simulate`. Returns R results, rank order.
    """
    streams = kw.pop("streams", None)
    part = np.asarray(partition)
    if part.size == 0:
        raise ValueError("partition is empty")
    ranks = int(part.max()) + 1
    caps = np.broadcast_to(np.asarray(capacity_per_rank, dtype=float), (ranks,))
    return [
        simulate(requests_from_trace(topk, experts, partition=part, rank=r, streams=streams), float(caps[r]), **kw)
        for r in range(ranks)
    ]


# ----------------------------------------------------------------------------- curves


def _labels(items: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(ids, label, D): ``label[ids]`` relabels the item ids to 0..D−1 (order kept). O(n) by
    bincount when ids are small (``ids`` is then ``items`` itself, not a copy); else by sorting."""
    items = np.asarray(items)
    if items.size and items.min() >= 0 and items.max() < 4 * items.size + 2**20:
        present = _bincount(items) > 0
        label = np.cumsum(present, dtype=np.int64) - 1
        ids = items if items.dtype in (np.int32, np.int64) else items.astype(np.int64)
        return np.ascontiguousarray(ids), label, int(present.sum())
    uniq, inv = np.unique(items, return_inverse=True)
    return np.ascontiguousarray(inv.ravel(), dtype=np.int64), np.arange(uniq.size, dtype=np.int64), int(uniq.size)


def _stack_pass(items, off, cstep, per_request: bool, *, warm: int = 0, distances: bool = False):
    """Run the stack kernel over the lookups ``off``: (distances or None, histogram by distance 0..D, D)."""
    from moeroof.models import cache_native as kernels

    ids, label, d = _labels(items)
    n = ids.size
    out = np.empty(n if distances else 0, dtype=np.int64)
    hist = np.zeros(0 if distances else d + 1, dtype=np.int64)
    kernels.stack_kernel(ids, label, d, int(2 * d + 64), off, cstep, bool(per_request), int(warm), out, hist)
    return (out if distances else None), hist, d


def _one_lookup(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The lookups of a stream without steps: one span (each request then its own lookup)."""
    return np.array([0, n], dtype=np.int64), np.zeros(1, dtype=np.int64)


def stack_distances(items: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """LRU stack distance of every request (Mattson et al. 1970); 0 marks a first reference.

    ``start`` (bool per request, :func:`lookup_starts`): distances are taken as each lookup
    starts, so a request of a lookup does not count the lookup's earlier requests; default
    every request its own lookup.
    """
    from moeroof.models import cache_native as kernels

    items = np.asarray(items)
    if items.size == 0:
        return np.zeros(0, dtype=np.int64)
    if start is None:
        off, cstep = _one_lookup(items.size)
        return _stack_pass(items, off, cstep, True, distances=True)[0]
    start = np.ascontiguousarray(start, dtype=bool)
    if start.shape != items.shape:
        raise ValueError(f"start must have one flag per request, shape {items.shape}, got {start.shape}")
    off = kernels.offsets_from_starts(start)
    return _stack_pass(items, off, np.zeros(off.size - 1, np.int64), False, distances=True)[0]


def lru_hit_curve(requests, *, warmup_steps: int = 0, lookup: str = "layer") -> tuple[np.ndarray, np.ndarray]:
    """Exact LRU hit rate at every capacity 0..D (D distinct items) in one pass.

    A request hits a cache of C items iff its stack distance is in 1…C (Mattson et al. 1970).
    With ``lookup="layer"`` the distance is taken as the request's (step, layer) lookup starts:
    an LRU cache of C items holds the top C of the stack, so a request hits iff its item is
    among them when its lookup starts — the same hits as :func:`simulate` with that lookup, at
    every capacity. An item-id array carries no steps: each request is its own lookup.
    Global scope, unit sizes. ``requests`` is a :class:`Requests` or an item-id array; with
    ``warmup_steps`` (a :class:`Requests` only) the distances are taken over the whole stream,
    so the warm-up still fills the stack, but only requests of steps ≥ ``warmup_steps`` are
    counted. Returns (capacity_experts int64, hit_rate; NaN when nothing is counted).
    """
    is_req = isinstance(requests, Requests)
    items = requests.items if is_req else np.asarray(requests)
    if warmup_steps and not is_req:
        raise ValueError("warmup_steps needs a Requests stream (item ids carry no steps)")
    _check_lookup(lookup)
    if items.size == 0:
        return np.zeros(1, dtype=np.int64), np.full(1, np.nan)
    off, cstep = requests.lookups() if is_req else _one_lookup(items.size)
    warm = max(int(warmup_steps), 0)
    # the histogram of stack distances straight from the kernel: no array as long as the trace
    _, hist, d = _stack_pass(items, off, cstep, lookup == "request" or not is_req, warm=warm)
    n = int(hist.sum())
    hist[0] = 0  # a first reference misses at every capacity
    cap = np.arange(d + 1, dtype=np.int64)
    return cap, (np.cumsum(hist) / n if n else np.full(d + 1, np.nan))


def che_hit_curve(item_frequencies, capacities) -> np.ndarray:
    """Che et al. (2002) LRU hit rate for each capacity under the independent reference model.

    ``item_frequencies``: request counts or rates per item (zeros ignored; normalized to λ).
    Solves ``Σ_i (1 − e^{−λ_i T}) = C`` for the characteristic time T (log-space Newton from a
    grid start, vectorized over capacities) and returns ``Σ_i λ_i (1 − e^{−λ_i T})``.
    Capacities ≥ the number of items with λ > 0 hit always (1.0); capacity 0 never.
    """
    f = np.asarray(item_frequencies, dtype=float).ravel()
    if np.any(~np.isfinite(f)) or np.any(f < 0):
        raise ValueError("item frequencies must be finite and >= 0")
    caps = np.asarray(capacities, dtype=float)
    out = np.zeros(caps.shape)
    f = f[f > 0]
    if f.size == 0:
        return np.full(caps.shape, np.nan)
    lam_all = f / f.sum()
    lam, mult = np.unique(lam_all, return_counts=True)
    mult = mult.astype(float)
    m = float(lam_all.size)
    flat = caps.ravel()
    res = out.ravel()
    res[flat >= m] = 1.0
    inner = np.flatnonzero((flat > 0) & (flat < m))
    if inner.size:

        def occ(t):  # (nC,) → Σ mult (1 − e^{−λ T}), derivative w.r.t. log T, hit rate
            e = np.exp(-np.outer(t, lam))
            fill = (mult * -np.expm1(-np.outer(t, lam))).sum(axis=1)
            dlog = (mult * lam * e).sum(axis=1) * t
            return fill, dlog

        # start: the occupancy on a log grid of T, inverted by interpolation (occupancy ↑ in T)
        lo = np.log(max(flat[inner].min(), 1e-300))  # T ≥ C since 1 − e^{−x} ≤ x
        c_max = flat[inner].max()
        hi = np.log(-np.log1p(-min(c_max / m, 1 - 1e-16)) / lam.min()) + 1.0
        grid = np.linspace(lo, hi, 512)
        g_fill = np.concatenate([occ(np.exp(grid[i : i + 64]))[0] for i in range(0, grid.size, 64)])
        for j0 in range(0, inner.size, 256):
            idx = inner[j0 : j0 + 256]
            c = flat[idx]
            u = np.interp(c, g_fill, grid)
            for _ in range(8):
                fill, dlog = occ(np.exp(u))
                step = (fill - c) / np.maximum(dlog, 1e-300)
                u = np.clip(u - step, lo - 1.0, hi + 1.0)
                if np.max(np.abs(step)) < 1e-12:
                    break
            t = np.exp(u)
            res[idx] = (mult * lam * -np.expm1(-np.outer(t, lam))).sum(axis=1)
    return res.reshape(caps.shape)


def item_hash(items: np.ndarray, seed: int) -> np.ndarray:
    """The SHARDS hash: splitmix64 of (item, seed) → uniform in [0, 1); numpy uint64 arithmetic wraps."""
    z = np.asarray(items).astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (int(seed) + 1)) % 2**64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53)


def shards_hit_curve(requests, rate, *, seed=0, adjust=False, lookup: str = "layer") -> tuple[np.ndarray, np.ndarray]:
    """SHARDS estimate of the LRU hit-rate curve (Waldspurger et al. 2015, fixed rate R).

    Keeps every request of the items with ``hash(item) < R`` (hash uniform on [0, 1), seeded),
    computes exact stack distances d_s of that sub-stream and scales them by 1/R: the hit rate
    at capacity k/R is the share of sampled requests with d_s ≤ k. With ``adjust=True`` the
    share is taken of the *expected* sample size N·R and the difference to the actual sample
    size is added to the smallest distance (the paper's SHARDS_adj: a sample that missed a hot
    item lost mostly short-distance hits); off by default: on MoE-like streams (20 480 items,
    Zipf 0.7 per layer) it was not more accurate in our checks. Integer capacities in between
    are interpolated linearly (from 0 at capacity 0). Capacities below 1/R are not resolved.
    Returns (capacity_experts 0..⌈D_s/R⌉, hit_rate), D_s the distinct sampled items.
    ``lookup`` as in :func:`lru_hit_curve` (a lookup of the sub-stream is what its sampled
    requests of one (step, layer) form).
    """
    rate = float(rate)
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sample rate must lie in (0, 1], got {rate!r}")
    _check_lookup(lookup)
    is_req = isinstance(requests, Requests)
    items = requests.items if is_req else np.asarray(requests)
    table = is_req and (items.size == 0 or (items.min() >= 0 and items.max() < requests.n_items))
    if table:  # the hash of each item id once, then a table look-up per request
        keep = (item_hash(np.arange(requests.n_items), seed) < rate)[items]
    else:
        keep = np.empty(items.size, dtype=bool)
        for i in range(0, items.size, _HASH_CHUNK):  # the hash's uint64 temporaries, chunk by chunk
            keep[i : i + _HASH_CHUNK] = item_hash(items[i : i + _HASH_CHUNK], seed) < rate
    sub = items[keep]
    if sub.size == 0:
        return np.zeros(1, dtype=np.int64), np.full(1, np.nan)
    if is_req:
        from moeroof.models import cache_native as kernels

        off, cstep = requests.lookups()
        off = kernels.subset_offsets(off, keep)
    else:
        off, cstep = _one_lookup(sub.size)
    del keep
    _, hist, d_s = _stack_pass(sub, off, cstep, lookup == "request" or not is_req)
    hist[0] = 0
    hist = hist.astype(float)
    expected = items.size * rate
    if not adjust:
        expected = float(sub.size)
    elif d_s >= 1 and rate < 1.0:
        hist[1] += expected - sub.size  # SHARDS_adj
    points = np.maximum(np.cumsum(hist) / expected, 0.0)  # hit rate at capacities k/R, k = 0..D_s
    c_max = int(np.ceil(d_s / rate - 1e-9))
    cap = np.arange(c_max + 1, dtype=np.int64)
    est = np.interp(cap, np.arange(d_s + 1) / rate, points)
    return cap, np.clip(est, 0.0, 1.0)


def shards_error(requests, rate, *, seed=0, adjust=False, lookup: str = "layer") -> float:
    """Max absolute hit-rate error of :func:`shards_hit_curve` against :func:`lru_hit_curve`.

    Over capacities 0..D of the exact curve; the estimate is held at its last value beyond
    its own range.
    """
    cap, exact = lru_hit_curve(requests, lookup=lookup)
    scap, est = shards_hit_curve(requests, rate, seed=seed, adjust=adjust, lookup=lookup)
    e = est[np.minimum(cap, scap[-1])]
    return float(np.max(np.abs(e - exact)))
