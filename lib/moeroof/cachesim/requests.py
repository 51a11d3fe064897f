"""The request stream of a trace: what a batch asks the expert cache for, step by step
(docs/models.md, caches).

**Request stream.** A decode step executes layer by layer; at each MoE layer the batch needs the
*union* of the experts its live streams route to. :func:`requests_from_trace` turns a trace
``topk`` (steps, streams, layers, K) with ``-1`` padding into that stream: for every step, for
every layer in layer order, the distinct experts in ascending id. An *item* is one
(layer, expert) pair, ``item = layer_index · E + expert``; a step never requests an item twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "LOOKUPS",
    "MAX_ITEMS",
    "Requests",
    "TraceIdError",
    "requests_from_trace",
    "request_histogram",
    "hot_set_ranking",
    "lookup_starts",
    "next_use",
    "item_counts",
    "check_lookup",
]

#: when a request is judged a hit: as its (step, layer) lookup starts, or in its own turn
LOOKUPS = ("layer", "request")


#: item ids (layers · experts) the simulator keys its tables by: int32 ids, below 2^31
MAX_ITEMS = 2**31


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
    # per request, made from ``_cells`` when first read (or given); ``_lookups`` when first asked
    _step: Any
    _layer: Any
    _cells: Any
    _lookups: Any

    def __init__(self, items, step, layer, steps, layers, experts, *, cells=None):
        steps, layers, experts = int(steps), int(layers), int(experts)
        if cells is None:
            if step is None or layer is None:
                raise ValueError("give step and layer per request, or cells")
        else:
            cells = np.asarray(cells)
            if cells.shape != (steps * layers,):
                raise ValueError(f"cells must have one count per (step, layer), shape ({steps * layers},)")
            if int(cells.sum(dtype=np.int64)) != np.asarray(items).size:
                raise ValueError("cells must sum to the number of requests")
        values = (items, steps, layers, experts, step, layer, cells, None)
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

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
                from moeroof.kernels import cache as kernels

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
        m = int(streams)  # type: ignore[arg-type]  # an int, or a string or float int() reads
        if not 1 <= m <= n_streams:
            raise ValueError(f"streams={m} outside 1..{n_streams}")
        return np.arange(m, dtype=np.int64)
    sel = np.asarray(streams)
    if sel.ndim != 1 or not np.issubdtype(sel.dtype, np.integer) or sel.size == 0:
        raise ValueError("streams must be a non-empty 1-D integer index array")
    if sel.min() < -n_streams or sel.max() >= n_streams:
        raise ValueError(f"stream index out of range for a trace of {n_streams} streams")
    return np.where(sel < 0, sel + n_streams, sel).astype(np.int64)


def requests_from_trace(topk, experts, *, partition=None, rank=None, streams=None, validate: bool = False) -> Requests:
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
    use_keep = partition is not None or rank is not None
    if use_keep and (partition is None or rank is None):
        raise ValueError("give both partition and rank (or neither)")
    keep = _as_partition(partition, layers, experts) == int(rank) if use_keep else np.ones((1, 1), dtype=bool)
    keep = np.ascontiguousarray(keep)
    from moeroof.data.io import TOPK_CHUNK_ELEMENTS  # read_trace's chunks: the same first error
    from moeroof.kernels import cache as kernels

    chunk = max(1, TOPK_CHUNK_ELEMENTS // max(1, int(np.prod(arr.shape[1:]))))
    if layers * experts >= MAX_ITEMS:
        raise ValueError(
            f"layers × experts = {layers} × {experts} items: the cache simulator keys its tables by "
            f"int32 item ids, below 2^31"
        )
    cells = np.zeros(steps * layers, dtype=np.int32)
    mark, tmark, ctr, err = (np.zeros(n, np.int64) for n in (experts, experts, 1, 15))  # the kernels' scratch
    for s0 in range(0, steps, chunk):
        block = _native_block(arr, s0, chunk)
        kind = kernels.scan_block(
            block, experts, sel, keep, use_keep, bool(validate), mark, tmark, ctr, cells, s0 * layers, err
        )
        if kind != kernels.ID_OK:
            _raise_id_error(kind, err, s0, experts)
    items = np.empty(int(cells.sum(dtype=np.int64)), dtype=np.int32)
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
    from moeroof.kernels import cache as kernels

    s, t, l, k, v = (int(x) for x in err[:5])
    reasons = {kernels.ID_RANGE: TOPK_RANGE.format(value=v, experts=experts), kernels.ID_PARTIAL: TOPK_PARTIAL}
    raise TraceIdError(f"topk[{s + s0},{t},{l},{k}]", reasons.get(kind, TOPK_DUPLICATE.format(value=v)))


def request_histogram(requests: Requests) -> np.ndarray:
    """Requests per item (layers·experts,)."""
    return item_counts(requests.items, requests.n_items)


def item_counts(items, minlength: int = 0) -> np.ndarray:
    """``np.bincount(items, minlength=minlength)`` (int64) of integer ids, counted by a kernel:
    ``np.bincount`` first copies the ids to int64, 8 bytes a request (800 MB at 10^8)."""
    items = np.asarray(items)
    if items.size == 0 or items.dtype.kind not in "iu" or int(items.min()) < 0 or int(items.max()) >= MAX_ITEMS:
        return np.bincount(items, minlength=minlength).astype(np.int64)  # its errors, its result
    from moeroof.kernels import cache as kernels

    return kernels.count_items(np.ascontiguousarray(items), max(int(minlength), int(items.max()) + 1))


def hot_set_ranking(popularity) -> np.ndarray:
    """Item ids by decreasing popularity (ties: lower id first); ``popularity`` flattened."""
    pop = np.asarray(popularity, dtype=float).ravel()
    return np.argsort(-pop, kind="stable").astype(np.int64)


def lookup_starts(requests: Requests, lookup: str = "layer") -> np.ndarray:
    """Bool (n,): which requests begin a lookup.

    ``lookup="layer"``: one lookup per (step, layer) — an engine resolves a layer's experts
    together, serving the cached ones and fetching the misses, so a miss never evicts an expert
    the same layer is about to use. ``"request"``: every request is its own lookup (the order a
    trace-driven cache simulator such as libCacheSim sees). The simulators take the lookups as
    :meth:`Requests.lookups` (one offset per lookup); this array is for callers that want flags.
    """
    from moeroof.kernels import cache as kernels

    check_lookup(lookup)
    if lookup == "request":
        return np.ones(len(requests), dtype=bool)
    return kernels.starts_from_offsets(requests.lookups()[0], len(requests))


def check_lookup(lookup: str) -> None:
    if lookup not in LOOKUPS:
        raise ValueError(f"lookup must be one of {', '.join(LOOKUPS)}, got {lookup!r}")


def next_use(items: np.ndarray, dtype=np.int64) -> np.ndarray:
    """Index of each request's next reference to the same item; ``len(items)`` when none.

    One backward pass (no sort); ``dtype`` of the result (int32 when ``len(items) < 2^31``
    halves what Belady keeps per request)."""
    from moeroof.kernels import cache as kernels

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
