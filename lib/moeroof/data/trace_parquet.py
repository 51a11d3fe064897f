"""Routing traces as Parquet, read row group by row group (no worker holds the whole trace).

**Format** — one row per *live* token (padding tokens are not written), columns::

    step, stream, layer, e0, e1, …, e{K-1}

``step``/``stream``/``layer`` are 0-based indices into the dense (steps, streams, layers, K)
array (``layer`` indexes ``layer_ids``; it is not the model's layer id); ``e0…e{K-1}`` are the
token's K distinct expert ids in [0, E), in the order of the dense array's K axis. The writer uses
the smallest unsigned integer type that fits each column (uint8 ids for E ≤ 256). Rows are
sorted by ``step`` (within a step: stream, then layer) and cut into row groups of whole step
ranges (``steps_per_row_group``). The trace's meta — ``experts``, ``top_k``, ``steps``,
``streams``, ``layers``, ``layer_ids``, ``axes``, ``pad_value`` and whatever else the trace
carried (``model``, ``source``, ``provenance``, …) — is a JSON object in the Parquet schema
metadata under the key ``moeroof.trace``, so no sidecar is needed and :func:`parquet_trace_info`
reads the shape without touching the data.

**Reading** — :func:`read_parquet_trace_layers` builds the dense ``(steps, streams, l1 - l0, K)``
array of layers ``l0 … l1-1`` only, and :func:`iter_parquet_trace_steps` yields dense chunks of
steps; both iterate ``ParquetFile.iter_batches`` one row group at a time with only the columns
they need, so the memory held is about one batch plus the output (checked against the memory
available, :func:`moeroof.core.limits.check_allocation`, before the output is made). Every
row that is read is validated; errors are :class:`~moeroof.data.io.InputError` reading
``FILE:ROW: FIELD: what is wrong``, with ROW ``row N (row group G)`` (N counted from 0 over the
whole file) or ``-``, and FIELD the column or meta key. Refused: a missing or non-integer column,
a null, a step / stream / layer outside the meta's shape, rows out of step order, two rows for
one (step, stream, layer), an id outside [0, E), a token partly padding (a row of K times ``-1``
is read as padding), an expert twice in one token. Extra columns are ignored.

A row holds ``3 + K`` small integers, so this file is about as large as the dense ``.npy`` of a
trace without padding; its gain is that any reader — a worker, another language — reads a layer
range or a step range with bounded memory and without a memory map.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.core import atomic
from moeroof.core.errors import ParameterError
from moeroof.core.limits import (
    MAX_EXPERTS,
    MAX_JSON_BYTES,
    MAX_LAYERS,
    check_allocation,
    check_document,
    human_bytes,
    unique_keys,
)
from moeroof.core.masks import PAD
from moeroof.core.optional import require
from moeroof.data.io import TRACE_AXES, InputError, Trace, check_readable, guard_target, is_int, repeated_expert

__all__ = [
    "META_KEY",
    "FORMAT",
    "ROWS_PER_GROUP",
    "BATCH_ROWS",
    "ParquetTraceInfo",
    "write_parquet_trace",
    "parquet_trace_info",
    "read_parquet_trace_layers",
    "read_parquet_trace",
    "iter_parquet_trace_steps",
]

#: the schema-metadata key holding the trace's meta (JSON)
META_KEY = b"moeroof.trace"
#: the value of the meta's ``format`` key this module writes
FORMAT = "moeroof-trace-parquet/1"
#: live rows per row group the writer aims at when ``steps_per_row_group`` is not given
ROWS_PER_GROUP = 1 << 20
#: rows per batch the readers decode at a time (a foreign file's row group may be larger)
BATCH_ROWS = 1 << 20
_INDEX_COLUMNS = ("step", "stream", "layer")


@dataclass(frozen=True, eq=False)
class ParquetTraceInfo:
    """What a Parquet trace holds, read from its footer alone (no data page is read)."""

    path: Path
    steps: int
    streams: int
    layers: int
    top_k: int
    experts: int
    layer_ids: tuple[int, ...]
    meta: dict[str, Any]
    rows: int  # live tokens written
    row_groups: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The dense trace's shape (steps, streams, layers, K)."""
        return (self.steps, self.streams, self.layers, self.top_k)

    @property
    def id_columns(self) -> tuple[str, ...]:
        return tuple(f"e{k}" for k in range(self.top_k))

    @property
    def dtype(self) -> np.dtype:
        """The dense array's dtype: int16 when the ids and ``-1`` fit, else int32."""
        return np.dtype(np.int16) if self.experts <= np.iinfo(np.int16).max else np.dtype(np.int32)


# ----------------------------------------------------------------------------- meta


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.bool_, np.integer)):
        return obj.item()  # bool or int
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, (Path, os.PathLike)):
        return os.fspath(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _int_key(meta: Mapping[str, Any], key: str, path: Path, lo: int, hi: int) -> int:
    if key not in meta:
        raise InputError(path, "-", key, "missing from the trace meta")
    v = meta[key]
    if not is_int(v) or not lo <= v <= hi:
        raise InputError(path, "-", key, f"expected an integer in {lo} … {hi}, got {v!r:.80}")
    return int(v)


def _check_meta(meta: Mapping[str, Any], path: Path) -> tuple[int, int, int, int, int, tuple[int, ...]]:
    """(steps, streams, layers, experts, top_k, layer_ids) of a complete meta, validated."""
    experts = _int_key(meta, "experts", path, 1, MAX_EXPERTS)
    top_k = _int_key(meta, "top_k", path, 1, experts)
    layers = _int_key(meta, "layers", path, 1, MAX_LAYERS)
    steps = _int_key(meta, "steps", path, 0, 2**40)
    streams = _int_key(meta, "streams", path, 1, 2**40)
    ids = meta.get("layer_ids", list(range(layers)))
    if not isinstance(ids, list) or not all(is_int(v) and v >= 0 for v in ids):
        raise InputError(path, "-", "layer_ids", f"expected a list of non-negative integers, got {ids!r:.80}")
    if len(ids) != layers:
        raise InputError(path, "-", "layer_ids", f"{len(ids)} layer ids but layers={layers}")
    if len(set(ids)) != len(ids):
        raise InputError(path, "-", "layer_ids", "duplicate layer id")
    if "pad_value" in meta and meta["pad_value"] != PAD:
        raise InputError(path, "-", "pad_value", f"only {PAD} is supported, got {meta['pad_value']!r}")
    for key in ("model", "source", "provenance"):
        if key in meta and not isinstance(meta[key], str):
            raise InputError(path, "-", key, f"expected a string, got {meta[key]!r:.80}")
    return steps, streams, layers, experts, top_k, tuple(int(v) for v in ids)


# ----------------------------------------------------------------------------- checks


def _check_tokens(ids: np.ndarray, experts: int, path: Path, where, field) -> np.ndarray:
    """Validate an (n, K) integer id matrix; return the live-row mask (n,).

    ``where(i, k)`` is the ROW text of row ``i``, id column ``k`` for an error, ``field(k)`` the
    FIELD of id column ``k``; errors name ``path``. A row of K padding values is padding, a row
    partly padding is refused, ids must be in [0, E) and distinct in a row.
    """
    pad = ids == PAD
    bad = (ids < PAD) | (ids >= experts)
    if bad.any():
        i, k = np.argwhere(bad)[0]
        raise InputError(
            path, where(i, k), field(k), f"expert id {ids[i, k]} not in [0, {experts}) (experts E={experts})"
        )
    any_pad = pad.any(axis=1)
    if any_pad.any():
        partial = any_pad & ~pad.all(axis=1)
        if partial.any():
            i = int(np.argmax(partial))
            k = int(np.argmax(pad[i]))
            raise InputError(
                path, where(i, k), field(k), "token is partly padding: a token has K expert ids or K times -1"
            )
    found = repeated_expert(ids) if ids.shape[1] > 1 else None
    if found is not None:
        i, k = found
        why = f"expert {ids[i, k]} appears twice in one token (the K experts must be distinct)"
        raise InputError(path, where(i, k), field(k), why)  # the slot naming it again, as read_trace says
    return ~any_pad


@dataclass
class _FileRows:
    """ROW text for a row of a Parquet file: ``row N (row group G)``, N counted over the file."""

    path: Path
    base: int = 0
    group: int = 0

    def __call__(self, i: int, k: int = 0) -> str:
        return f"row {self.base + int(i)} (row group {self.group})"


# ----------------------------------------------------------------------------- writer


def _meta_object(meta: str | bytes, path: Path, what: str) -> dict[str, Any]:
    """A trace's meta given as JSON text (checked against the document limits first); an
    :class:`InputError` naming ``path`` and ``meta`` for text that is not one object."""
    try:
        text = meta.decode("utf-8") if isinstance(meta, bytes) else meta
        check_document(text, what, max_bytes=MAX_JSON_BYTES)
        obj = json.loads(text, object_pairs_hook=unique_keys)
    except (ValueError, RecursionError) as exc:
        raise InputError(path, "-", "meta", f"not a valid JSON object: {exc}") from None
    if not isinstance(obj, dict):
        raise InputError(path, "-", "meta", f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _trace_array(topk: Any, path: Path) -> Any:
    """``topk`` as a 4-D integer array; a memory map (or anything 4-D) is left as it is."""
    if getattr(topk, "ndim", None) != 4:
        topk = np.asarray(topk)
    if topk.ndim != 4:
        raise InputError(path, "-", "topk", f"expected 4 dims (steps, streams, layers, K), got shape {topk.shape}")
    if not np.issubdtype(topk.dtype, np.integer):
        raise InputError(path, "-", "topk", f"expected an integer dtype, got {topk.dtype}")
    return topk


def _file_meta(meta: Mapping[str, Any], shape: tuple[int, int, int], path: Path) -> dict[str, Any]:
    """The file's meta: ``meta`` with the array's (steps, streams, layers) and the defaults set."""
    steps, streams, layers = shape
    full = json.loads(json.dumps(dict(meta), default=_jsonable))
    full.setdefault("layer_ids", list(range(layers)))
    full.setdefault("axes", list(TRACE_AXES))
    full.setdefault("pad_value", PAD)
    for key, value in (("steps", steps), ("streams", streams), ("layers", layers)):
        if key in full and full[key] != value:
            raise InputError(path, "-", key, f"meta says {key}={full[key]!r} but topk has {value}")
        full[key] = value
    full["format"] = FORMAT
    if streams < 1:
        raise InputError(path, "-", "topk", "a trace needs at least one stream")
    return full


def _row_group_steps(steps_per_row_group: Any, per_step: int, top_k: int) -> int:
    """Steps per row group: the number given, else about :data:`ROWS_PER_GROUP` rows' worth."""
    if steps_per_row_group is None:
        steps_per_row_group = max(1, ROWS_PER_GROUP // max(1, per_step))
    if not is_int(steps_per_row_group) or steps_per_row_group < 1:
        raise ParameterError("steps_per_row_group", f"expected a positive integer, got {steps_per_row_group!r}")
    steps_per_row_group = int(steps_per_row_group)
    what = "a row group's steps × streams × layers × K"
    check_allocation(steps_per_row_group * per_step * top_k, 8, what, parameter="steps_per_row_group")
    return steps_per_row_group


def _write_row_groups(
    writer: Any, pa: Any, schema: Any, topk: Any, path: Path, group: int, experts: int, dtypes: tuple[np.dtype, ...]
) -> None:
    """Writes ``topk``'s live tokens as (step, stream, layer, ids…) rows of ``dtypes``, ``group`` steps a row group."""
    steps, top_k = topk.shape[0], topk.shape[3]
    for s0 in range(0, steps, group):
        block = np.asarray(topk[s0 : s0 + group])
        cells = block.reshape(-1, top_k)

        def where(i: int, k: int = 0, shape: tuple[int, ...] = block.shape[:3], s0: int = s0) -> str:
            s, t, l = np.unravel_index(int(i), shape)  # ROW text of a token of the dense array
            return f"topk[{s + s0},{t},{l},{k}]"

        live = _check_tokens(cells, experts, path, where, lambda k: "topk")
        idx = np.flatnonzero(live)
        s, t, l = np.unravel_index(idx, block.shape[:3])
        ids = cells[idx]
        cols = [a.astype(dt) for a, dt in zip((s + s0, t, l), dtypes)]
        cols += [np.ascontiguousarray(ids[:, k]).astype(dtypes[3]) for k in range(top_k)]
        if idx.size:
            table = pa.Table.from_arrays([pa.array(c) for c in cols], schema=schema)
            writer.write_table(table, row_group_size=idx.size)


def write_parquet_trace(
    path: str | os.PathLike[str],
    topk: Any,
    meta: Mapping[str, Any] | str,
    *,
    steps_per_row_group: int | None = None,
    compression: str = "zstd",
    overwrite: bool = True,
) -> Path:
    """Write a trace ``topk`` (steps, streams, layers, K), ``-1`` padding, as Parquet (module docstring).

    ``topk`` may be a memory map: it is read ``steps_per_row_group`` steps at a time (default: as
    many as make about :data:`ROWS_PER_GROUP` rows), each written as one row group of its live
    tokens. ``meta`` needs ``experts`` and ``top_k`` (a :class:`~moeroof.data.io.Trace`'s meta
    will do); ``steps``, ``streams``, ``layers``, ``layer_ids`` (default ``range(layers)``),
    ``axes`` and ``pad_value`` are set from the array. The ids are validated as
    :func:`~moeroof.data.io.read_trace` would (InputError naming ``topk[s,t,l,k]``) before the
    row group holding them is written; the file is written atomically. Returns ``path``.
    """
    pa, pq = _arrow()
    path = Path(path)
    if path.suffix.lower() != ".parquet":
        raise ValueError(f"{path}: a Parquet trace is written as .parquet")
    meta = _meta_object(meta, path, "the meta") if isinstance(meta, str) else meta
    topk = _trace_array(topk, path)
    steps, streams, layers, k_cols = (int(n) for n in topk.shape)
    full = _file_meta(meta, (steps, streams, layers), path)
    _, _, _, experts, top_k, _ = _check_meta(full, path)
    if k_cols != top_k:
        raise InputError(path, "-", "top_k", f"meta top_k={top_k} but topk has K={k_cols} columns")
    group = _row_group_steps(steps_per_row_group, streams * layers, top_k)
    # the smallest unsigned dtype holding each column's largest value
    dtypes = tuple(np.min_scalar_type(n) for n in (max(steps - 1, 0), streams - 1, layers - 1, experts - 1))
    types = [*dtypes[:3], *([dtypes[3]] * top_k)]
    names = [*_INDEX_COLUMNS, *(f"e{k}" for k in range(top_k))]
    schema = pa.schema([pa.field(n, pa.from_numpy_dtype(t), nullable=False) for n, t in zip(names, types)])
    schema = schema.with_metadata({META_KEY: json.dumps(full, ensure_ascii=False).encode("utf-8")})
    guard_target(path, overwrite)

    def write(fh: Any) -> None:
        with pq.ParquetWriter(fh, schema, compression=compression) as writer:
            _write_row_groups(writer, pa, schema, topk, path, group, experts, dtypes)

    atomic.write_via(path, write)
    return path


# ----------------------------------------------------------------------------- readers


def _arrow() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet, or the error saying which extra installs them."""
    return require("pyarrow", "parquet", "a Parquet trace"), require("pyarrow.parquet", "parquet", "a Parquet trace")


def _open(path: Path) -> tuple[Any, ParquetTraceInfo]:
    """The Parquet file at ``path`` and what it holds (its footer's meta and columns checked)."""
    pa, pq = _arrow()
    check_readable(path)
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(path, "-", "file", f"not a readable Parquet file: {exc}") from None
    raw = (pf.schema_arrow.metadata or {}).get(META_KEY)
    if raw is None:
        why = f"no trace meta (schema metadata key {META_KEY.decode()!r}); write_parquet_trace writes it"
        raise InputError(path, "-", "meta", why)
    meta = _meta_object(raw, path, "the trace meta")
    steps, streams, layers, experts, top_k, layer_ids = _check_meta(meta, path)
    schema = pf.schema_arrow
    have = set(schema.names)
    for name in (*_INDEX_COLUMNS, *(f"e{k}" for k in range(top_k))):
        if name not in have:
            raise InputError(path, "-", name, f"missing column (has: {', '.join(schema.names) or 'none'})")
        typ = schema.field(name).type
        if not pa.types.is_integer(typ):
            raise InputError(path, "-", name, f"expected an integer column, got {typ}")
    md = pf.metadata
    rows, groups = int(md.num_rows), int(md.num_row_groups)
    return pf, ParquetTraceInfo(path, steps, streams, layers, top_k, experts, layer_ids, meta, rows, groups)


def parquet_trace_info(path: str | os.PathLike[str]) -> ParquetTraceInfo:
    """Shape, meta, rows and row groups of a Parquet trace, from its footer (no data read)."""
    return _open(Path(path))[1]


def _dense(info: ParquetTraceInfo, steps: int, layers: int, what: str, max_bytes: int | None) -> np.ndarray:
    n = steps * info.streams * layers * info.top_k
    try:
        need = check_allocation(n, info.dtype.itemsize + 1, what)
    except ValueError as exc:
        raise ParameterError("max_bytes", f"{info.path}: {exc}") from None
    if max_bytes is not None and need > max_bytes:
        raise ParameterError(
            "max_bytes",
            f"{info.path}: {what} = {n} entries would need {human_bytes(need)}, more than {human_bytes(max_bytes)}",
        )
    return np.full((steps, info.streams, layers, info.top_k), PAD, dtype=info.dtype)


def _batches(
    pf: Any, info: ParquetTraceInfo, where: _FileRows
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]]:
    """(step, stream, layer) int64 and the K id columns (as stored) of every batch in file order,
    the index columns checked (no nulls, in range, steps non-decreasing); ``where`` tracks the rows."""
    cols = [*_INDEX_COLUMNS, *info.id_columns]
    limits = {"step": info.steps, "stream": info.streams, "layer": info.layers}
    last, base = -1, 0
    for g in range(info.row_groups):
        where.group = g
        try:
            batches = pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[g], columns=cols, use_threads=False)
            for batch in batches:
                where.base = base
                n = batch.num_rows
                arrays = {}
                for name in cols:
                    col = batch.column(name)
                    if col.null_count:
                        i = int(np.argmax(np.asarray(col.is_null())))
                        raise InputError(info.path, where(i), name, "missing value (null)")
                    a = col.to_numpy(zero_copy_only=False)
                    arrays[name] = a.astype(np.int64, copy=False) if name in limits else a  # ids: as stored
                for name, hi in limits.items():
                    a = arrays[name]
                    out = (a < 0) | (a >= hi)
                    if out.any():
                        i = int(np.argmax(out))
                        raise InputError(
                            info.path, where(i), name, f"{name} {a[i]} outside 0 … {hi - 1} (the meta's {name}s={hi})"
                        )
                step = arrays["step"]
                if n:
                    prev = np.concatenate(([last], step[:-1]))
                    back = step < prev
                    if back.any():
                        i = int(np.argmax(back))
                        raise InputError(
                            info.path, where(i), "step", f"rows out of step order (step {step[i]} after step {prev[i]})"
                        )
                    last = int(step[-1])
                yield step, arrays["stream"], arrays["layer"], [arrays[name] for name in info.id_columns]
                base += n
        except InputError:
            raise
        except (OSError, ValueError, TypeError) as exc:  # pyarrow's errors are ValueError / OSError
            raise InputError(info.path, f"row group {g}", "file", f"cannot read: {exc}") from None


def _place(out: np.ndarray, seen: np.ndarray, cell: np.ndarray, ids: np.ndarray, rows: Any, where, index) -> None:
    """Write ``ids`` into the flat cells ``cell`` of ``out`` (padding rows write ``-1`` but still
    take their cell); refuse a cell written before. ``rows[i]`` is the batch row of entry ``i``
    and ``index`` the batch's (step, stream, layer) arrays, for the error."""
    if cell.size == 0:
        return
    flat_seen = seen.reshape(-1)
    dup_before = flat_seen[cell]
    dup_i = int(np.argmax(dup_before)) if dup_before.any() else None
    if cell.size > 1 and not (cell[1:] > cell[:-1]).all():
        order = np.argsort(cell, kind="stable")
        srt = cell[order]
        same = np.flatnonzero(srt[1:] == srt[:-1])
        if same.size:
            i = int(order[1:][same].min())
            dup_i = i if dup_i is None else min(dup_i, i)
    if dup_i is not None:
        r = int(rows[dup_i])
        s, t, l = (int(a[r]) for a in index)
        raise InputError(where.path, where(r), "layer", f"a second row for step {s}, stream {t}, layer {l}")
    flat_seen[cell] = True
    out.reshape(-1, out.shape[3])[cell] = ids


def read_parquet_trace_layers(
    path: str | os.PathLike[str], l0: int, l1: int, *, max_bytes: int | None = None
) -> np.ndarray:
    """The dense ``(steps, streams, l1 - l0, K)`` ids of layers ``l0 … l1-1`` (layer indices, not
    ids), ``-1`` where no token was written; reads the file batch by batch, keeping the rows of
    those layers, so the memory held is about one batch plus the output. ``max_bytes``: refuse
    (ParameterError) an output (plus its one-byte-per-token bookkeeping) larger than this;
    the memory available now is always checked. Every row read is checked (module docstring);
    ids of other layers' rows are not."""
    path = Path(path)
    pf, info = _open(path)
    if not (is_int(l0) and is_int(l1) and 0 <= l0 < l1 <= info.layers):
        raise ParameterError("l0", f"need 0 <= l0 < l1 <= layers={info.layers}, got l0={l0!r}, l1={l1!r}")
    l0, l1 = int(l0), int(l1)
    nl = l1 - l0
    out = _dense(info, info.steps, nl, f"steps × streams × {nl} layers × K", max_bytes)
    seen = np.zeros(out.shape[:3], dtype=bool)
    where = _FileRows(path)
    every = (l0, l1) == (0, info.layers)
    for step, stream, layer, cols in _batches(pf, info, where):
        rows = np.arange(step.size) if every else np.flatnonzero((layer >= l0) & (layer < l1))
        sel = slice(None) if every else rows  # every row: the batch's arrays, not copies of them
        s, t, l, e = step[sel], stream[sel], layer[sel], _id_matrix(cols, sel, info.experts)
        _check_tokens(e, info.experts, path, lambda i, k=0, rows=rows: where(rows[int(i)]), _id_field)
        cell = (s * info.streams + t) * nl + (l - l0)
        _place(out, seen, cell, e, rows, where, (step, stream, layer))
    return out


def _id_field(k: int) -> str:
    return f"e{k}"


def _id_matrix(cols: list[np.ndarray], rows: np.ndarray | slice, experts: int) -> np.ndarray:
    """The (n, K) ids of the batch rows ``rows`` (an index array, or a slice) in one integer dtype."""
    sel = [c[rows] for c in cols]
    sel = [np.minimum(c, experts) if c.dtype == np.uint64 else c for c in sel]  # no wrap to -1 below
    dt = np.result_type(*sel)
    if not np.issubdtype(dt, np.integer):
        dt = np.dtype(np.int64)
    return np.stack([c.astype(dt, copy=False) for c in sel], axis=1)


def read_parquet_trace(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Trace:
    """The whole trace as a :class:`~moeroof.data.io.Trace` (dense, in memory, read-only)."""
    path = Path(path)
    info = parquet_trace_info(path)
    topk = read_parquet_trace_layers(path, 0, info.layers, max_bytes=max_bytes)
    topk.setflags(write=False)
    return Trace(topk, info.experts, info.top_k, info.layer_ids, dict(info.meta), path)


def iter_parquet_trace_steps(
    path: str | os.PathLike[str], steps_per_chunk: int, *, max_bytes: int | None = None
) -> Iterator[np.ndarray]:
    """Dense chunks ``(n, streams, layers, K)`` of steps ``[i·steps_per_chunk, …)``, in order,
    ``-1`` where no token was written; the last chunk may be shorter. One pass over the file
    (its rows are sorted by step), holding one batch and one chunk; ``max_bytes`` bounds a chunk."""
    path = Path(path)
    pf, info = _open(path)
    if not is_int(steps_per_chunk) or steps_per_chunk < 1:
        raise ParameterError("steps_per_chunk", f"expected a positive integer, got {steps_per_chunk!r}")
    n = int(steps_per_chunk)
    n_chunks = math.ceil(info.steps / n)
    if n_chunks == 0:
        return
    where = _FileRows(path)
    per_step = info.streams * info.layers

    def fresh(c: int) -> tuple[np.ndarray, np.ndarray]:
        m = min(n, info.steps - c * n)
        out = _dense(info, m, info.layers, f"{m} steps × streams × layers × K", max_bytes)
        return out, np.zeros(out.shape[:3], dtype=bool)

    c = 0
    out, seen = fresh(c)
    for step, stream, layer, cols in _batches(pf, info, where):
        ids = _id_matrix(cols, slice(None), info.experts)
        _check_tokens(ids, info.experts, path, where, _id_field)
        chunk_of = step // n  # non-decreasing: _batches refuses rows out of step order
        i = 0
        while i < step.size:
            cj = int(chunk_of[i])
            while c < cj:
                yield out
                c += 1
                out, seen = fresh(c)
            j = int(np.searchsorted(chunk_of, cj, side="right"))
            cell = (step[i:j] - c * n) * per_step + stream[i:j] * info.layers + layer[i:j]
            _place(out, seen, cell, ids[i:j], np.arange(i, j), where, (step, stream, layer))
            i = j
    yield out
    for later in range(c + 1, n_chunks):  # steps past the file's last row: chunks of padding
        yield fresh(later)[0]
