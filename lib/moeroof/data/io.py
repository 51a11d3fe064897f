"""Read and write routing data: per-layer histograms and top-K traces (formats: docs/data.md).

Every reader validates what it reads and fails with an :class:`InputError` whose text is
``FILE:ROW: FIELD: what is wrong`` — ROW is the 1-based CSV line (header = line 1), an array
index such as ``topk[3,1,0,2]`` for traces, or ``-`` where no row applies; FIELD is the CSV
column or the JSON / npz key. Readers open inputs read-only and never modify them.

**Histogram** — ``foo.csv`` with header ``layer,expert,count`` (optional ``rank`` column), one
row per (layer, expert); a missing row means count 0. Counts are *incidence* counts: a token
counts an expert at most once per layer, so ``count ≤ T`` and ``Σ_i count_i ≤ K·T`` (equal for
complete data, not required). The sidecar ``foo.json`` holds::

    model: str, experts: int E, top_k: int K (≤ E), layers: int and/or layer_ids: [int],
    tokens: int T or [T per layer], source: str, layers_summed: bool,
    provenance: str (optional), generator: {...} (optional)

A ``layers_summed`` histogram is one pseudo-layer summed over the model's layers: it hides the
per-layer skew. Its ``tokens`` counts (token, layer) pairs, so the same bounds hold.

**Trace** — ``foo.npz`` holding ``topk`` (integer, shape (steps, streams, layers, K), ``-1``
where a stream has no token), optional ``weights`` of the same shape, and ``meta``, a JSON
string with ``experts``, ``top_k`` and optionally ``model``, ``layer_ids``, ``axes``,
``source``, ``provenance``. Or ``foo.npy`` (memory-mapped on read) with the meta in ``foo.json``.
A token is either K distinct expert ids or K padding values.

A caller that has the meta but no sidecar (a capture's own file, flags on a command line)
passes it: ``read_histogram(path, meta={...})`` / ``read_trace(path, meta={...})`` use it
instead of the sidecar or the ``.npz``'s ``meta`` array, validated the same way. A missing
sidecar's error names the commands that write one (``moeroof import …``, ``moeroof histogram``).

Writers (:func:`write_histogram`, :func:`write_trace`) validate first, then write a temp file in
the destination folder and ``os.replace`` it (:mod:`moeroof.core.atomic`), so a reader never sees
half a file.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from moeroof.core import atomic
from moeroof.core.input_files import NotRegularFileError, check_regular, open_input
from moeroof.core.limits import (
    MAX_CELLS,
    MAX_EXPERTS,
    MAX_JSON_BYTES,
    MAX_LAYERS,
    MAX_TOKENS,
    TRACE_KEY_BYTES,
    LongNumberError,
    bounded_int,
    check_allocation,
    check_document,
    human_bytes,
    parse_json,
)
from moeroof.core.masks import PAD, partial_tokens

__all__ = [
    "InputError",
    "guard_target",
    "Histogram",
    "Trace",
    "read_histogram",
    "read_trace",
    "load_any",
    "check_incidence_sums",
    "INCIDENCE_SHARE_MIN",
    "write_histogram",
    "write_trace",
    "trace_parts",
    "histogram_parts",
    "sidecar_path",
    "HISTOGRAM_COLUMNS",
    "HISTOGRAM_META_HINT",
    "TRACE_META_HINT",
    "TRACE_AXES",
    "TOPK_RANGE",
    "TOPK_PARTIAL",
    "TOPK_DUPLICATE",
    "TOPK_CHUNK_ELEMENTS",
    "NpySteps",
    "OutputExistsError",
    "check_npz_members",
    "csv_cells",
    "check_counts",
    "check_input_allocation",
    "repeated_expert",
]

HISTOGRAM_COLUMNS = ("layer", "expert", "count")
_OPTIONAL_COLUMNS = ("rank",)
TRACE_AXES = ("step", "stream", "layer", "k")
#: elements of ``topk`` validated per chunk of a memory-mapped trace (≈ 64 MiB of int64); the
#: compiled pass of ``moeroof.cachesim.requests_from_trace`` checks the same chunks, so both
#: name the same first error
TOPK_CHUNK_ELEMENTS = 8_000_000
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")


class InputError(ValueError):
    """A bad input file: ``str(err) == "FILE:ROW: FIELD: what is wrong"``."""

    def __init__(self, path: str | os.PathLike[str], row: int | str | None, field: str, message: str):
        self.path = Path(path)
        self.row = "-" if row is None else row
        self.field = field
        self.message = _shortened(message)
        super().__init__(f"{self.path}:{self.row}: {field}: {self.message}")


#: a run of this many characters without a space in an error's message is a quoted value, cut
_LONG_WORD = re.compile(r"\S{240,}")


def csv_cells(line: str, path: str | os.PathLike[str], row: int, columns: Sequence[str] | None = None) -> list[str]:
    """One line of a CSV file as its cells (``csv.reader``). A line the csv module refuses (a
    cell past its field limit, 131,072 characters; a stray quote) is an :class:`InputError`
    naming the file, the line and, where the header tells it, the column (``columns``): it was
    ``csv.Error`` (exit 70, "internal error") from the POINTS readers."""
    try:
        return next(csv.reader([line]))
    except csv.Error as exc:
        raise _csv_error(exc, path, row, _cells_unlimited(line), columns) from None


def _cells_unlimited(line: str) -> list[str]:
    """``line``'s cells read without the field limit (an error path only: which cell is long)."""
    old = csv.field_size_limit(len(line) + 1)
    try:
        return next(csv.reader([line]), [])
    except csv.Error:
        return []
    finally:
        csv.field_size_limit(old)


def _csv_error(
    exc: csv.Error, path: str | os.PathLike[str], row: int | str, cells: Sequence[str], columns: Sequence[str] | None
) -> InputError:
    """``exc`` said in the user's terms; ``cells``: the line's cells where known, to tell which
    one is past the limit."""
    limit = csv.field_size_limit()
    if "field larger than field limit" not in str(exc):
        return InputError(path, row, "row", f"not a CSV line: {exc}")
    at = next((i for i, cell in enumerate(cells) if len(cell) > limit), None)
    if at is None:
        return InputError(path, row, "row", f"a cell of more than the {limit:,} characters a CSV cell may hold")
    field = columns[at] if columns is not None and at < len(columns) else f"column {at + 1}"
    return InputError(
        path, row, field, f"a cell of {len(cells[at]):,} characters: more than the {limit:,} a CSV cell may hold"
    )


def _shortened(message: str) -> str:
    """``message`` on one line, each quoted value thousands of characters long (a 5,000-digit
    cell) cut to its two ends around a count of what was left out: the error stays a line to
    read. Prose is kept whole."""

    def cut(m: re.Match[str]) -> str:
        word = m.group(0)
        return f"{word[:100]}…({len(word) - 140} characters left out)…{word[-40:]}"

    return _LONG_WORD.sub(cut, message.replace("\n", " "))


# ----------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True, eq=False)
class Histogram:
    """Per-layer incidence counts of routed experts.

    ``counts[l, i]`` = number of the ``tokens[l]`` routed tokens of layer ``layer_ids[l]`` that
    selected expert ``i``; ``rank[l, i]`` the rank hosting it (``-1`` unknown) when the CSV has
    a ``rank`` column, else ``None``.
    """

    counts: np.ndarray  # (L, E) int64
    tokens: np.ndarray  # (L,) int64
    experts: int
    top_k: int
    layer_ids: tuple[int, ...]
    layers_summed: bool
    meta: dict[str, Any]
    path: Path
    rank: np.ndarray | None = None

    @property
    def layers(self) -> int:
        return int(self.counts.shape[0])

    @property
    def inclusion(self) -> np.ndarray:
        """Plug-in inclusion probabilities ``π̂[l, i] = Y_i / T`` (L, E); Σ_i π̂ = K for complete data."""
        return self.counts / self.tokens[:, None]

    @property
    def provenance(self) -> str | None:
        return self.meta.get("provenance")


@dataclass(frozen=True, eq=False)
class Trace:
    """Top-K expert ids per (step, stream, layer); ``-1`` where a stream has no token.

    ``topk`` may be a read-only ``np.memmap`` (``.npy`` input), or with ``read_trace(lazy=True)``
    an :class:`NpySteps` that reads the file per block of steps: index it by steps rather than
    converting it whole.
    """

    topk: np.ndarray  # (steps, streams, layers, K) integer
    experts: int
    top_k: int
    layer_ids: tuple[int, ...]
    meta: dict[str, Any]
    path: Path
    weights: np.ndarray | None = None
    #: False for ``read_trace(..., validate=False)``: the ids are for its caller's compiled pass to check
    ids_checked: bool = True

    @property
    def steps(self) -> int:
        return int(self.topk.shape[0])

    @property
    def streams(self) -> int:
        return int(self.topk.shape[1])

    @property
    def layers(self) -> int:
        return int(self.topk.shape[2])

    @property
    def provenance(self) -> str | None:
        return self.meta.get("provenance")


# ----------------------------------------------------------------------------- helpers


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    """``foo.csv`` / ``foo.npy`` → ``foo.json`` (same folder, same stem)."""
    return Path(path).with_suffix(".json")


def is_int(x: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


#: what a missing meta names: the commands that write the file with it, and the library's way
#: to supply it (the CLI flags are each command's own business, listed in its --help)
HISTOGRAM_META_HINT = (
    "`moeroof import matrix|sglang|table …` writes a capture as a histogram with its sidecar, "
    "`moeroof histogram TRACE` one from a trace; in Python pass meta={…} to read_histogram"
)
TRACE_META_HINT = (
    "`moeroof import table|hf-router-logits|sglang …` writes a capture as a trace with its meta; "
    "in Python pass meta={…} to read_trace"
)


def read_json_object(path: Path, what: str, hint: str | None = None) -> dict[str, Any]:
    """The JSON object in ``path`` (a bounded read, checked as every JSON the suite reads);
    :class:`InputError` naming the file and saying ``what`` it should have been otherwise.
    ``hint``: ``path`` is a sidecar, and a missing one names the commands that write it."""
    try:
        with open_input(path, text=True, encoding="utf-8-sig") as fh:  # read-only; a FIFO refused
            text = fh.read(MAX_JSON_BYTES + 1)  # a bounded read: the size check below refuses more
    except FileNotFoundError:
        missing = f"missing {what} (expected next to the data file, same stem); {hint}" if hint else ""
        raise InputError(path, "-", "file", missing or f"no such file ({what})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, "-", "file", f"cannot read {what}: {exc}") from None
    return _parse_json(text, path, "-", "file")


def _parse_json(text: str, path: Path, row: str, key: str) -> dict[str, Any]:
    try:
        check_document(text, "the JSON", max_bytes=MAX_JSON_BYTES)  # a plain ValueError: too long or deep
        obj = parse_json(text)
    except LongNumberError as exc:  # named by its key: the sidecar's `tokens`, the meta's `experts`
        raise InputError(path, row, exc.key, str(exc)) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            path, row, key, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except ValueError as exc:  # check_document, or unique_keys: a key given twice
        raise InputError(path, row, key, str(exc)) from None
    if not isinstance(obj, dict):
        raise InputError(path, row, key, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def check_input_allocation(
    path: Path, row: int | str, field: str, n_items: int, itemsize: int, what: str, limit: int | None = MAX_CELLS
) -> None:
    """:func:`~moeroof.core.limits.check_allocation`, its refusal an :class:`InputError` at
    ``path:row: field`` (the input whose size asked for the array)."""
    try:
        check_allocation(n_items, itemsize, what, limit=limit)
    except ValueError as exc:
        raise InputError(path, row, field, str(exc)) from None


def _need(meta: Mapping[str, Any], key: str, path: Path, row: str = "-") -> Any:
    if key not in meta:
        raise InputError(path, row, key, "missing")
    return meta[key]


def _check_experts_top_k(meta: Mapping[str, Any], path: Path, row: str = "-") -> tuple[int, int]:
    experts = _need(meta, "experts", path, row)
    if not is_int(experts) or experts < 1:
        raise InputError(path, row, "experts", f"expected a positive integer, got {experts!r}")
    top_k = _need(meta, "top_k", path, row)
    if not is_int(top_k) or top_k < 1:
        raise InputError(path, row, "top_k", f"expected a positive integer, got {top_k!r}")
    if top_k > experts:
        raise InputError(path, row, "top_k", f"top_k K={top_k} exceeds experts E={experts}")
    if experts > MAX_EXPERTS:
        raise InputError(path, row, "experts", f"experts E={experts} is more than the {MAX_EXPERTS} this reader allows")
    return int(experts), int(top_k)


def _check_layer_ids(value: Any, path: Path, row: str = "-") -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(is_int(v) and v >= 0 for v in value):
        raise InputError(path, row, "layer_ids", f"expected a non-empty list of non-negative integers, got {value!r}")
    if len(set(value)) != len(value):
        raise InputError(path, row, "layer_ids", "duplicate layer id")
    return tuple(int(v) for v in value)


def _check_optional_str(meta: Mapping[str, Any], key: str, path: Path, row: str = "-") -> None:
    if key in meta and not isinstance(meta[key], str):
        raise InputError(path, row, key, f"expected a string, got {meta[key]!r}")


def _histogram_layer_ids(meta: Mapping[str, Any], path: Path) -> tuple[int, ...]:
    """A histogram sidecar's layer ids: its ``layer_ids``, else ``range(layers)``."""
    if "layer_ids" in meta:
        layer_ids = _check_layer_ids(meta["layer_ids"], path)
        if "layers" in meta and meta["layers"] != len(layer_ids):
            raise InputError(
                path, "-", "layers", f"layers={meta['layers']!r} but layer_ids has {len(layer_ids)} entries"
            )
        return layer_ids
    if "layers" in meta:
        layers = meta["layers"]
        if not is_int(layers) or layers < 1:
            raise InputError(path, "-", "layers", f"expected a positive integer, got {layers!r}")
        if layers > MAX_LAYERS:
            raise InputError(path, "-", "layers", f"layers={layers} is more than the {MAX_LAYERS} this reader allows")
        return tuple(range(int(layers)))
    raise InputError(path, "-", "layers", "missing (give layers or layer_ids)")


def _histogram_tokens(meta: Mapping[str, Any], path: Path, n_layers: int) -> np.ndarray:
    """A histogram sidecar's routed tokens per layer (one for all, or one each), 1..2^40."""
    tokens = _need(meta, "tokens", path)
    # bounds in Python ints, before any int64 array (K·T of tokens = 2**62 overflows int64)
    if is_int(tokens):
        token_list = [int(tokens)] * n_layers
    elif isinstance(tokens, list) and all(is_int(t) for t in tokens):
        if len(tokens) != n_layers:
            raise InputError(path, "-", "tokens", f"expected {n_layers} entries (one per layer), got {len(tokens)}")
        token_list = [int(t) for t in tokens]
    else:
        raise InputError(path, "-", "tokens", f"expected an integer or a list of integers, got {tokens!r:.80}")
    if any(t < 1 for t in token_list):
        raise InputError(path, "-", "tokens", f"routed tokens must be ≥ 1, got {tokens!r:.80}")
    if any(t > MAX_TOKENS for t in token_list):
        raise InputError(
            path, "-", "tokens", f"routed tokens per layer must be at most 2^40 = {MAX_TOKENS}, got {max(token_list)}"
        )
    return np.asarray(token_list, dtype=np.int64).reshape(n_layers)


def _validate_histogram_meta(meta: Mapping[str, Any], path: Path) -> tuple[int, int, tuple[int, ...], np.ndarray, bool]:
    """Check a histogram sidecar; return (E, K, layer_ids, tokens (L,), layers_summed)."""
    for key in ("model", "source"):
        if not isinstance(_need(meta, key, path), str):
            what = "the model's name, or words saying it is unknown" if key == "model" else "where the counts came from"
            raise InputError(path, "-", key, f"expected a string ({what}), got {meta[key]!r}")
    experts, top_k = _check_experts_top_k(meta, path)
    layer_ids = _histogram_layer_ids(meta, path)
    n_layers = len(layer_ids)
    if n_layers > MAX_LAYERS:
        raise InputError(path, "-", "layer_ids", f"{n_layers} layers is more than the {MAX_LAYERS} this reader allows")
    check_input_allocation(path, "-", "experts", n_layers * experts, 8, "experts × layers")
    tokens_arr = _histogram_tokens(meta, path, n_layers)
    summed = _need(meta, "layers_summed", path)
    if not isinstance(summed, bool):
        raise InputError(path, "-", "layers_summed", f"expected true or false, got {summed!r}")
    if summed and n_layers != 1:
        raise InputError(
            path, "-", "layers_summed", f"a histogram summed over layers has one pseudo-layer, got {n_layers}"
        )
    _check_optional_str(meta, "provenance", path)
    if "generator" in meta and not isinstance(meta["generator"], dict):
        raise InputError(path, "-", "generator", f"expected a JSON object, got {meta['generator']!r}")
    return experts, top_k, layer_ids, tokens_arr, summed


def _validate_trace_meta(
    meta: Mapping[str, Any], n_layers: int, path: Path, row: str
) -> tuple[int, int, tuple[int, ...]]:
    experts, top_k = _check_experts_top_k(meta, path, row)
    if "layer_ids" in meta:
        layer_ids = _check_layer_ids(meta["layer_ids"], path, row)
        if len(layer_ids) != n_layers:
            raise InputError(path, row, "layer_ids", f"{len(layer_ids)} layer ids but topk has {n_layers} layers")
    else:
        layer_ids = tuple(range(n_layers))
    if "layers" in meta and meta["layers"] != n_layers:
        raise InputError(path, row, "layers", f"layers={meta['layers']!r} but topk has {n_layers} layers")
    # the (layers × experts) key space every reader of a trace tabulates, at what the heaviest pays
    # (a 1 KB trace of 65,536 layers declaring 2^20 experts asked numpy for 512 GiB)
    check_input_allocation(path, row, "experts", n_layers * experts, TRACE_KEY_BYTES, "experts × layers")
    if "axes" in meta:
        axes = meta["axes"]
        if not isinstance(axes, list) or len(axes) != 4 or not all(isinstance(a, str) for a in axes):
            raise InputError(path, row, "axes", f"expected 4 axis names, got {axes!r}")
    if "pad_value" in meta and meta["pad_value"] != PAD:
        raise InputError(path, row, "pad_value", f"only {PAD} is supported, got {meta['pad_value']!r}")
    for key in ("model", "source", "provenance"):
        _check_optional_str(meta, key, path, row)
    return experts, top_k, layer_ids


#: what is wrong with a trace's ids, as :func:`_validate_topk` and the compiled pass of
#: :func:`moeroof.cachesim.requests_from_trace` (``validate=True``) both say it
TOPK_RANGE = "expert id {value} not in [-1, {experts}) (experts E={experts}; -1 = no token)"
TOPK_PARTIAL = "token is partly padding: a token has K expert ids or K times -1"
TOPK_DUPLICATE = "expert {value} appears twice in one token (the K experts must be distinct)"


def _validate_topk(topk: np.ndarray, experts: int, top_k: int, path: Path, meta_row: str, *, ids: bool = True) -> None:
    """Shape, dtype and (with ``ids``) ids of a trace; chunked over steps so a memmap is never
    loaded whole; the caller has checked the 4 dims."""
    if not np.issubdtype(topk.dtype, np.integer):
        raise InputError(path, "-", "topk", f"expected an integer dtype, got {topk.dtype}")
    if topk.shape[3] != top_k:
        raise InputError(path, meta_row, "top_k", f"meta top_k={top_k} but topk has K={topk.shape[3]} columns")
    if not ids:
        return
    per_step = max(1, int(np.prod(topk.shape[1:])))
    chunk = max(1, TOPK_CHUNK_ELEMENTS // per_step)
    for s0 in range(0, topk.shape[0], chunk):
        block = np.asarray(topk[s0 : s0 + chunk])
        if block.dtype.kind == "u":  # signed ids are checked in their own width: no int64 copy of each block
            block = block.astype(np.int64)
        if block.size == 0:
            continue
        lo, hi = int(block.min()), int(block.max())  # the masks below only where these say a fault is there
        if lo < PAD or hi >= experts:
            s, t, l, k = np.argwhere((block < PAD) | (block >= experts))[0]
            why = TOPK_RANGE.format(value=block[s, t, l, k], experts=experts)
            raise InputError(path, f"topk[{s + s0},{t},{l},{k}]", "topk", why)
        if lo < 0:  # padding somewhere: each token all padding or none
            partial = partial_tokens(block)
            if partial.any():
                s, t, l = np.argwhere(partial)[0]
                k = int(np.argmax(block[s, t, l] == PAD))
                raise InputError(path, f"topk[{s + s0},{t},{l},{k}]", "topk", TOPK_PARTIAL)
        found = repeated_expert(block.reshape(-1, top_k)) if top_k > 1 else None
        if found is not None:
            (s, t, l), k = np.unravel_index(found[0], block.shape[:3]), found[1]
            why = TOPK_DUPLICATE.format(value=block[s, t, l, k])
            raise InputError(path, f"topk[{s + s0},{t},{l},{k}]", "topk", why)


#: ids whose tokens are sorted at once to find an expert given twice in a token
DISTINCT_CHUNK_ELEMENTS = 1_000_000


def repeated_expert(ids: np.ndarray) -> tuple[int, int] | None:
    """(token, slot) of the first token of the (n, K) ``ids`` that names an expert twice (padding
    aside), the slot the one naming it again; None when none does. Sorts
    :data:`DISTINCT_CHUNK_ELEMENTS` ids at a time: a sorted copy of them all, and its masks,
    would take more memory than the ids themselves."""
    k_cols = ids.shape[1]
    sub = max(1, DISTINCT_CHUNK_ELEMENTS // k_cols)
    for t0 in range(0, len(ids), sub):
        srt = np.sort(ids[t0 : t0 + sub], axis=1)
        dup = ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] != PAD)).any(axis=1)
        if dup.any():
            t = t0 + int(np.argmax(dup))
            return t, next(j for j in range(1, k_cols) if ids[t, j] in ids[t, :j])
    return None


class NpySteps:
    """A C-order ``.npy`` trace's ids, read from its file a block of steps at a time: indexing
    the steps (``ids[s0:s1]``, ``ids[s]``, with any index of the other axes after) reads those
    steps with ordinary reads into a new array; nothing is mapped or held, so the ids a command
    has gone through count in the OS's file cache, not in its resident memory (a memory map's
    pages do; at 10^8 requests the ids are 340 MB). ``np.asarray`` reads them all. A file cut
    short while it is read is a :class:`ValueError`, never a signal. From ``read_trace(lazy=True)``.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype, offset: int):
        self.path = Path(path)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.offset = int(offset)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape))
        self.itemsize = self.dtype.itemsize
        self.nbytes = self.size * self.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"NpySteps({str(self.path)!r}, shape={self.shape}, dtype={self.dtype})"

    def _read(self, s0: int, s1: int) -> np.ndarray:
        out = np.empty((max(s1 - s0, 0),) + self.shape[1:], dtype=self.dtype)
        if out.size:
            view = out.reshape(-1).view(np.uint8).data
            got = 0
            with open(self.path, "rb") as fh:
                fh.seek(self.offset + s0 * (out.nbytes // out.shape[0]))
                while got < out.nbytes:
                    n = fh.readinto(view[got:])
                    if not n:
                        raise ValueError(f"{self.path}: truncated while being read (steps {s0}..{s1 - 1})")
                    got += n
        out.setflags(write=False)
        return out

    def __getitem__(self, key: Any) -> np.ndarray:
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) and key else (key, ())
        if isinstance(first, slice) and first.step in (None, 1):
            s0, s1, _ = first.indices(self.shape[0])
            block = self._read(s0, max(s0, s1))
            return block[(slice(None), *rest)] if rest else block
        if isinstance(first, (int, np.integer)) and not isinstance(first, bool):
            i = int(first) + (self.shape[0] if first < 0 else 0)
            if not 0 <= i < self.shape[0]:
                raise IndexError(f"step {int(first)} out of range for {self.shape[0]} steps")
            return self._read(i, i + 1)[(0, *rest)]
        return np.asarray(self)[key]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._read(0, self.shape[0])
        return out if dtype is None else out.astype(dtype)


def npz_has_meta(path: str | os.PathLike[str]) -> bool | None:
    """Whether the ``.npz`` at ``path`` has a ``meta`` member; None when it cannot be read as an
    ``.npz`` (cut short, a ``.npy`` or anything else under that name, not a regular file): its
    reader then says why in its own words."""
    try:
        with open_input(path) as fh:  # a FIFO refused, never waited on
            z = np.load(fh, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):  # a .npy named .npz
                return None
            with z:
                return "meta" in z.files
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def check_readable(path: Path) -> None:
    """Refuses a path that is no regular file (``FILE:-: file: no such file`` / ``not a regular
    file (a FIFO)``, …: :func:`moeroof.core.input_files.check_regular`)."""
    if not path.exists():
        raise InputError(path, "-", "file", "no such file")
    try:
        check_regular(path)
    except OSError as err:
        raise InputError(
            path, "-", "file", str(err.strerror) if isinstance(err, NotRegularFileError) else "not a regular file"
        ) from None


# ----------------------------------------------------------------------------- readers


def _histogram_columns(header: list[str] | None, path: Path) -> dict[str, int]:
    """Column name → index of a histogram CSV's header; refuses a missing or unknown header."""
    if header is None:
        raise InputError(path, 1, "header", f"empty file; expected header {','.join(HISTOGRAM_COLUMNS)}")
    names = [h.strip() for h in header]
    allowed = set(HISTOGRAM_COLUMNS) | set(_OPTIONAL_COLUMNS)
    if len(set(names)) != len(names) or not set(HISTOGRAM_COLUMNS) <= set(names) or not set(names) <= allowed:
        why = f"expected columns {','.join(HISTOGRAM_COLUMNS)} (optional: rank), got {','.join(header)!r}"
        raise InputError(path, 1, "header", why)
    return {name: j for j, name in enumerate(names)}


def _histogram_row(row: list[str], line_no: int, col: Mapping[str, int], path: Path) -> dict[str, int]:
    """The non-negative integers of one histogram CSV row, by column name."""
    if len(row) != len(col):
        raise InputError(path, line_no, "row", f"expected {len(col)} fields, got {len(row)}")
    vals: dict[str, int] = {}
    for name, j in col.items():
        cell = row[j].strip()
        if not _INT_RE.match(cell):
            raise InputError(path, line_no, name, f"expected an integer, got {row[j]!r}")
        try:
            v = bounded_int(cell)
        except ValueError as exc:
            raise InputError(path, line_no, name, str(exc)) from None
        if v < 0:
            raise InputError(path, line_no, name, f"negative value {v}")
        vals[name] = v
    return vals


def _tally_rows(
    reader: Any, col: Mapping[str, int], path: Path, sidecar: tuple[tuple[int, ...], int, int, np.ndarray]
) -> tuple[np.ndarray, np.ndarray | None]:
    """A histogram's counts (and ranks, -1 unknown, when the CSV has them) filled in from the
    ``reader``'s rows, each row's (layer, expert, count[, rank]) checked as it comes against the
    ``sidecar``'s (layer ids, E, K, tokens)."""
    layer_ids, experts, top_k, tokens = sidecar
    layer_index = {lid: i for i, lid in enumerate(layer_ids)}
    counts = np.zeros((len(layer_ids), experts), dtype=np.int64)
    rank = np.full((len(layer_ids), experts), -1, dtype=np.int64) if "rank" in col else None
    first_line: dict[tuple[int, int], int] = {}
    running = np.zeros(len(layer_ids), dtype=np.int64)
    for line_no, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue  # blank line
        vals = _histogram_row(row, line_no, col, path)
        layer, expert, count = vals["layer"], vals["expert"], vals["count"]
        if layer not in layer_index:
            why = f"layer {layer} not among the sidecar's layer ids {_short(layer_ids)}"
            raise InputError(path, line_no, "layer", why)
        if expert >= experts:
            raise InputError(path, line_no, "expert", f"expert {expert} ≥ experts E={experts}")
        if (layer, expert) in first_line:
            why = f"duplicate row for layer {layer}, expert {expert} (first at line {first_line[layer, expert]})"
            raise InputError(path, line_no, "expert", why)
        first_line[layer, expert] = line_no
        li = layer_index[layer]
        if count > tokens[li]:
            why = f"count {count} > tokens T={tokens[li]} of layer {layer} (a token counts an expert once)"
            raise InputError(path, line_no, "count", why)
        running[li] += count
        if running[li] > top_k * tokens[li]:
            why = f"counts of layer {layer} sum to {running[li]} > top_k·tokens = {top_k}·{tokens[li]} = {top_k * tokens[li]}"
            raise InputError(path, line_no, "count", why)
        counts[li, expert] = count
        if rank is not None:
            rank[li, expert] = vals["rank"]
    return counts, rank


def read_histogram(path: str | os.PathLike[str], meta: Mapping[str, Any] | None = None) -> Histogram:
    """Read ``foo.csv`` and its sidecar ``foo.json``; validate both (see module docstring).

    ``meta``: the sidecar's content supplied by the caller (a dict with the same keys), used
    instead of ``foo.json`` — which then need not exist; errors in it name ``foo.csv``.
    """
    path = Path(path)
    check_readable(path)
    if meta is None:
        side = sidecar_path(path)
        meta = read_json_object(side, "sidecar JSON", HISTOGRAM_META_HINT)
    else:
        side, meta = path, dict(_plain(dict(meta)))
    experts, top_k, layer_ids, tokens, summed = _validate_histogram_meta(meta, side)
    reader = None
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:  # read-only
            reader = csv.reader(fh)
            col = _histogram_columns(next(reader, None), path)
            counts, rank = _tally_rows(reader, col, path, (layer_ids, experts, top_k, tokens))
    except UnicodeDecodeError as exc:
        raise InputError(path, "-", "file", f"not UTF-8 text: {exc}") from None
    except csv.Error as exc:  # the line (a cell past the field limit) where the reader stopped
        raise _csv_error(exc, path, reader.line_num if reader is not None else "-", [], None) from None
    except OSError as exc:
        raise InputError(path, "-", "file", f"cannot read: {exc}") from None
    for arr in (counts, tokens) if rank is None else (counts, tokens, rank):
        arr.setflags(write=False)
    return Histogram(counts, tokens, experts, top_k, layer_ids, summed, dict(meta), path, rank)


def _short(ids: Sequence[int]) -> str:
    ids = list(ids)
    if len(ids) > 8:
        return f"[{ids[0]}, {ids[1]}, …, {ids[-1]}] ({len(ids)} layers)"
    return str(ids)


#: a ``.npz`` member that inflates to more than this many times its stored size (and past
#: :data:`_BOMB_FLOOR` bytes) is refused (the embedded trace: 1.8; a 4.7 MB zip bomb: ~1000)
MAX_COMPRESSION_RATIO = 100
_BOMB_FLOOR = 64 << 20


def check_npz_members(path: Path) -> None:
    """Before anything is loaded: each ``.npy`` member's header (read from the zip stream, its
    data left compressed) must declare exactly the bytes the member holds, inflate at most
    :data:`MAX_COMPRESSION_RATIO` times its stored size, and fit in the memory available."""
    from moeroof.data.safe_read import read_npy_header

    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                key = info.filename[: -len(".npy")]
                with zf.open(info) as fh:
                    shape, _, dtype = read_npy_header(fh)
                    header_len = fh.tell()
                count = math.prod(int(n) for n in shape)  # Python ints: no overflow
                need = count * dtype.itemsize
                held = info.file_size - header_len
                if dtype.hasobject:
                    raise InputError(
                        path, "-", "file", f"not a readable .npz without pickles: {key} holds Python objects"
                    )
                if held != need:
                    why = (
                        f"the header declares shape {tuple(shape)} of {dtype} ({human_bytes(need)}) but the "
                        f"archive member holds {human_bytes(max(held, 0))}"
                    )
                    raise InputError(path, "-", key, why)
                if need > _BOMB_FLOOR and need > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
                    why = (
                        f"inflates from {human_bytes(info.compress_size)} to {human_bytes(need)}, more than "
                        f"{MAX_COMPRESSION_RATIO}× (refused as a zip bomb)"
                    )
                    raise InputError(path, "-", key, why)
                if key == "meta" and need > 4 * MAX_JSON_BYTES:
                    raise InputError(path, "-", key, f"{human_bytes(need)} of meta is more than a JSON meta can be")
                dims = " × ".join(str(int(n)) for n in shape) or "1"
                check_input_allocation(path, "-", key, count, dtype.itemsize, f"{key} ({dims})", limit=None)
    except InputError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, RuntimeError) as exc:
        raise InputError(path, "-", "file", f"not a readable .npz without pickles: {exc}") from None


def _npz_arrays(path: Path, given: dict[str, Any] | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(topk, meta array unless the meta is given, weights if any) of a ``.npz`` trace."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            files = set(npz.files)
            for key in ("topk",) if given is not None else ("topk", "meta"):
                if key not in files:
                    hint = f"; {TRACE_META_HINT}" if key == "meta" else ""
                    raise InputError(path, "-", key, f"missing array (has: {', '.join(sorted(files)) or 'none'}){hint}")
            topk = npz["topk"]
            meta_arr = npz["meta"] if given is None else None
            weights = npz["weights"] if "weights" in files else None
    except InputError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(path, "-", "file", f"not a readable .npz without pickles: {exc}") from None
    return topk, meta_arr, weights


def _npz_meta(meta_arr: np.ndarray, path: Path) -> dict[str, Any]:
    """The meta of a ``.npz`` trace: its ``meta`` array, a 0-d JSON string."""
    if meta_arr.ndim != 0 or meta_arr.dtype.kind not in "US":
        why = f"expected a JSON string (0-d str array), got dtype {meta_arr.dtype} shape {meta_arr.shape}"
        raise InputError(path, "-", "meta", why)
    text = meta_arr.item()
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(path, "-", "meta", "not UTF-8") from None
    return _parse_json(text, path, "-", "meta")


def _npy_trace(path: Path, given: dict[str, Any] | None, lazy: bool) -> tuple[Any, dict[str, Any], Path]:
    """(topk, meta, the meta's path) of a ``.npy`` trace and its sidecar (or the meta given)."""
    side = sidecar_path(path) if given is None else path
    meta = read_json_object(side, "sidecar JSON", TRACE_META_HINT) if given is None else given
    try:
        from moeroof.data.safe_read import load_npy, npy_layout  # truncated: an error, never SIGBUS

        layout = npy_layout(path) if lazy else None
        topk: np.ndarray | NpySteps
        if layout is not None and not layout[2] and len(layout[0]) >= 1:
            topk = NpySteps(path, layout[0], layout[1], layout[3])
        else:
            topk = load_npy(path)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(path, "-", "file", f"not a readable .npy without pickles: {exc}") from None
    return topk, meta, side


def _four_dims(topk: Any, path: Path) -> Any:
    """``topk`` when it has the trace's 4 dims (steps, streams, layers, K); an :class:`InputError` otherwise."""
    if topk.ndim != 4:
        why = f"expected 4 dims (steps, streams, layers, K), got {topk.ndim} with shape {topk.shape}"
        raise InputError(path, "-", "topk", why)
    return topk


def read_trace(
    path: str | os.PathLike[str], meta: Mapping[str, Any] | None = None, *, validate: bool = True, lazy: bool = False
) -> Trace:
    """Read a ``.npz`` trace, or a ``.npy`` trace (memory-mapped) with its sidecar ``.json``.

    ``meta``: the trace's meta supplied by the caller (``experts``, ``top_k``, …), used instead
    of the ``.npz``'s ``meta`` array or the ``.npy``'s sidecar — which then need not exist.

    ``validate=False`` checks the file, the meta, the shape and the dtype but not the ids (a
    pass over the whole array): only for a caller that builds its requests with
    ``moeroof.cachesim.requests_from_trace(..., validate=True)``, whose compiled pass checks
    every id as this would and raises the same errors (``moeroof cache`` and ``moeroof mrc``).
    The trace says so: ``Trace.ids_checked`` is False.

    ``lazy=True``: a C-order ``.npy``'s ``topk`` is an :class:`NpySteps`, its ids read from the
    file a block of steps at a time when indexed by steps (for callers that go through the
    trace by blocks of steps, as the cache, mrc and union models do); otherwise as without.
    """
    path = Path(path)
    check_readable(path)
    given = None if meta is None else dict(_plain(dict(meta)))
    suffix = path.suffix.lower()
    weights = None
    if suffix == ".npz":
        check_npz_members(path)
        topk, meta_arr, weights = _npz_arrays(path, given)
        meta = given if given is not None else _npz_meta(cast(np.ndarray, meta_arr), path)
        meta_path = path
    elif suffix == ".npy":
        topk, meta, meta_path = _npy_trace(path, given, lazy)
    else:
        raise InputError(path, "-", "file", f"unknown trace suffix {path.suffix!r}; expected .npz or .npy")
    experts, top_k, layer_ids = _validate_trace_meta(meta, _four_dims(topk, path).shape[2], meta_path, "-")
    if topk.shape[3] != top_k:
        raise InputError(meta_path, "-", "top_k", f"meta top_k={top_k} but topk has K={topk.shape[3]} columns")
    _validate_topk(topk, experts, top_k, path, "-", ids=validate)
    if weights is not None:  # floats of topk's shape
        if weights.shape != topk.shape:
            raise InputError(path, "-", "weights", f"shape {weights.shape} differs from topk shape {topk.shape}")
        if not np.issubdtype(weights.dtype, np.floating):
            raise InputError(path, "-", "weights", f"expected a float dtype, got {weights.dtype}")
        weights.setflags(write=False)
    if isinstance(topk, np.ndarray) and not isinstance(topk, np.memmap):
        topk.setflags(write=False)
    return Trace(topk, experts, top_k, layer_ids, dict(meta), path, weights, ids_checked=bool(validate))


#: a layer whose counts sum below this share of K·T is refused where the counts are read as
#: inclusion frequencies (union, split, plan --routing): U(1) would come out as Σ count / T, not K
INCIDENCE_SHARE_MIN = 0.5
#: below this share (but above the minimum) the result carries a note
INCIDENCE_SHARE_NOTE = 0.99


def check_incidence_sums(hist: Histogram, min_share: float = INCIDENCE_SHARE_MIN) -> list[str]:
    """Refuse a histogram whose counts sum far below ``K·T`` in some layer; notes for the rest.

    Incidence counts of T tokens sum to K·T in each layer (every token counts its K experts).
    A sum far below it — a histogram with only some rows, a header alone, all zeros, or a
    sidecar ``tokens`` far too large — makes every inclusion frequency ``count / T`` too small
    and the union at B = 1 ``Σ count / T`` instead of K. Raises :class:`InputError` when a
    layer's sum is below ``min_share · K·T``; returns a note for layers between that and 99 %.
    (``fit`` normalizes by the counts themselves and only needs one count per layer.)
    """
    counts = np.asarray(hist.counts)
    sums = [int(x) for x in counts.sum(axis=1)]
    tokens = [int(x) for x in np.asarray(hist.tokens)]
    k = int(hist.top_k)
    lids = list(hist.layer_ids)
    shares = [s / (k * t) if t > 0 else 1.0 for s, t in zip(sums, tokens)]
    worst = int(np.argmin(shares)) if shares else 0
    if shares and shares[worst] < min_share:
        low = sum(1 for x in shares if x < min_share)
        what = f"layer {lids[worst]}" + (f" (and {low - 1} more layers)" if low > 1 else "")
        why = (
            f"counts of {what} sum to {sums[worst]}, {100 * shares[worst]:.3g} % of top_k·tokens = "
            f"{k}·{tokens[worst]} = {k * tokens[worst]}: each of the T tokens counts its K experts, so "
            f"the union at B = 1 would come out as {sums[worst] / max(tokens[worst], 1):.4g} instead of K = {k}; "
            "the histogram is missing rows, or the sidecar's tokens is too large"
        )
        raise InputError(hist.path, "-", "count", why)
    if shares and shares[worst] < INCIDENCE_SHARE_NOTE:
        return [
            f"counts of layer {lids[worst]} sum to {100 * shares[worst]:.3g} % of top_k·tokens (incomplete "
            "incidence counts): the inclusion frequencies count / T, and the union, are that much too low"
        ]
    return []


def load_any(path: str | os.PathLike[str]) -> Histogram | Trace:
    """Histogram for ``.csv``, Trace for ``.npz`` / ``.npy``; anything else is an InputError."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_histogram(path)
    if suffix in (".npz", ".npy"):
        return read_trace(path)
    check_readable(path)
    raise InputError(
        path, "-", "file", f"unknown suffix {path.suffix!r}; expected .csv (histogram), .npz or .npy (trace)"
    )


# ----------------------------------------------------------------------------- writers


class OutputExistsError(FileExistsError):
    """A write refused because ``path`` (a result, or the sidecar beside it) is there already."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path}: exists (pass overwrite=True to replace it)")
        self.path = Path(path)


def guard_target(path: Path, overwrite: bool) -> None:
    """Refuse a write into the external (read-only) data folder, or onto an existing file unless
    ``overwrite``: every writer of the data layer checks its target with this first."""
    from moeroof.core.paths import EXTERNAL_DIR

    try:
        inside = path.resolve().is_relative_to(EXTERNAL_DIR.resolve())
    except OSError:
        inside = False
    if inside:
        raise ValueError(f"{path}: refusing to write into the external data folder {EXTERNAL_DIR} (read-only inputs)")
    if not overwrite and path.exists():
        raise OutputExistsError(path)


def _json_text(meta: Mapping[str, Any]) -> str:
    return json.dumps(_plain(meta), indent=2, ensure_ascii=False) + "\n"


def _plain(obj: Any) -> Any:
    """numpy scalars / arrays → JSON-native values."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, (np.bool_, np.integer)):
        return obj.item()  # bool or int
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _counts_array(counts: Any, path: Path) -> np.ndarray:
    """The counts to write as an (L, E) int64 array (one row: one layer); refuses fractions."""
    counts = np.asarray(counts)
    if counts.ndim == 1:
        counts = counts[None, :]
    if counts.ndim != 2:
        raise InputError(path, "-", "count", f"expected counts of shape (layers, experts), got {counts.shape}")
    if counts.size and not np.issubdtype(counts.dtype, np.integer) and not np.all(np.equal(np.mod(counts, 1), 0)):
        raise InputError(path, "-", "count", f"expected integer counts, got dtype {counts.dtype}")
    return counts.astype(np.int64)


def check_counts(
    counts: np.ndarray, sidecar: tuple[int, int, Sequence[int], np.ndarray], path: str | os.PathLike[str]
) -> None:
    """Counts against their validated sidecar (E, K, layer ids, T): shape, 0 ≤ count ≤ T, Σ ≤ K·T;
    a fault names ``path`` (the histogram written, or the capture an importer read) and its layer."""
    e, k, lids, tok = sidecar
    n_layers, n_exp = counts.shape
    if n_exp != e:
        raise InputError(path, "-", "expert", f"counts have {n_exp} experts but experts E={e}")
    if n_layers != len(lids):
        raise InputError(path, "-", "layer", f"counts have {n_layers} layers but {len(lids)} layer ids")
    if (counts < 0).any():
        raise InputError(path, "-", "count", "negative count")
    over = counts > tok[:, None]
    if over.any():
        l, i = np.argwhere(over)[0]
        why = f"count {counts[l, i]} of layer {lids[l]}, expert {i} > tokens T={tok[l]}"
        raise InputError(path, f"layer {lids[l]}", "count", why)
    sums = counts.sum(axis=1)
    if (sums > k * tok).any():
        l = int(np.argmax(sums > k * tok))
        why = f"counts of layer {lids[l]} sum to {sums[l]} > top_k·tokens = {k * tok[l]}"
        raise InputError(path, f"layer {lids[l]}", "count", why)


def _rank_array(rank: Any, shape: tuple[int, ...], path: Path) -> np.ndarray | None:
    """The ranks to write as int64 of the counts' shape, none negative (None: no rank column)."""
    if rank is None:
        return None
    rank = np.asarray(rank).astype(np.int64)
    if rank.shape != shape:
        raise InputError(path, "-", "rank", f"rank shape {rank.shape} differs from counts shape {shape}")
    if (rank < 0).any():
        raise InputError(path, "-", "rank", "negative rank (every row written needs one)")
    return rank


def _write_histogram_rows(fh: Any, counts: np.ndarray, lids: Sequence[int], rank: np.ndarray | None) -> None:
    """The histogram CSV: the header, then every (layer, expert) row, zeros included."""
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(HISTOGRAM_COLUMNS + (("rank",) if rank is not None else ()))
    for l, lid in enumerate(lids):
        for i in range(counts.shape[1]):
            w.writerow([lid, i, int(counts[l, i]), *(() if rank is None else (int(rank[l, i]),))])


def write_histogram(path: str | os.PathLike[str], counts: np.ndarray, **kwargs: Any) -> Path:
    """Write ``path`` (CSV, every (layer, expert) row incl. zeros) and its sidecar JSON atomically,
    both or neither: :func:`histogram_parts` written together. Returns the CSV path."""
    atomic.write_together(histogram_parts(path, counts, **kwargs))
    return Path(path)


def histogram_parts(
    path: str | os.PathLike[str],
    counts: np.ndarray,
    *,
    tokens: int | Sequence[int] | np.ndarray | None = None,
    experts: int | None = None,
    top_k: int | None = None,
    model: str | None = None,
    source: str | None = None,
    layer_ids: Sequence[int] | None = None,
    layers_summed: bool = False,
    provenance: str | None = None,
    generator: Mapping[str, Any] | None = None,
    rank: np.ndarray | None = None,
    extra: Mapping[str, Any] | None = None,
    overwrite: bool = True,
) -> list[atomic.Part]:
    """The histogram CSV ``path`` (every (layer, expert) row incl. zeros) and its sidecar JSON as
    the parts of one atomic write (:func:`moeroof.core.atomic.write_together`), sidecar first.

    ``counts`` is an (L, E) integer array; ``extra`` adds sidecar keys. The data
    are validated exactly as :func:`read_histogram` would before anything is written, and the
    targets checked (:func:`guard_target`). Raises :class:`InputError` (naming the target) for
    invalid data.
    """
    path = Path(path)
    if path.suffix.lower() != ".csv":
        raise ValueError(f"{path}: a histogram is written as .csv")
    counts = _counts_array(counts, path)
    n_layers, n_exp = counts.shape
    if tokens is None:
        raise ValueError("write_histogram: tokens (routed tokens per layer) is required")
    meta: dict[str, Any] = {
        "model": model,
        "experts": _plain(n_exp if experts is None else experts),
        "top_k": _plain(top_k),
        "layers": n_layers,
        "layer_ids": _plain(list(layer_ids) if layer_ids is not None else list(range(n_layers))),
        "tokens": _plain(tokens),
        "source": source,
        "layers_summed": bool(layers_summed),
    }
    # the optional keys given: provenance, generator, then the extra keys
    if provenance is not None:
        meta["provenance"] = provenance
    if generator is not None:
        meta["generator"] = _plain(dict(generator))
    if extra:
        meta.update(_plain(dict(extra)))
    side = sidecar_path(path)
    e, k, lids, tok, _ = _validate_histogram_meta(meta, side)
    check_counts(counts, (e, k, lids, tok), path)
    rank = _rank_array(rank, counts.shape, path)
    guard_target(path, overwrite)
    guard_target(side, overwrite)
    meta_text = _json_text(meta)
    return [  # the counts and their sidecar: both or neither (a full disk leaves no orphan)
        atomic.Part(side, lambda fh: fh.write(meta_text), binary=False, newline=""),
        atomic.Part(path, lambda fh: _write_histogram_rows(fh, counts, lids, rank), binary=False, newline=""),
    ]


def write_trace(
    path: str | os.PathLike[str],
    topk: np.ndarray,
    meta: Mapping[str, Any] | str,
    weights: np.ndarray | None = None,
    *,
    overwrite: bool = True,
) -> Path:
    """Write a trace atomically: ``.npz`` (topk, meta[, weights]) or ``.npy`` + sidecar ``.json``,
    both or neither (:func:`trace_parts` written together); returns ``path``."""
    atomic.write_together(trace_parts(path, topk, meta, weights, overwrite=overwrite))
    return Path(path)


def trace_parts(
    path: str | os.PathLike[str],
    topk: np.ndarray,
    meta: Mapping[str, Any] | str,
    weights: np.ndarray | None = None,
    *,
    overwrite: bool = True,
    extra_arrays: Mapping[str, np.ndarray] | None = None,
) -> list[atomic.Part]:
    """A trace as the parts of one atomic write: ``.npz`` (topk, meta[, weights], then
    ``extra_arrays`` as members of those names) or ``.npy`` + sidecar ``.json`` (sidecar first).

    ``meta`` needs ``experts`` and ``top_k``; ``layer_ids`` (default ``range(layers)``) and
    ``axes`` (default step, stream, layer, k) are filled in when absent. The ``.npz`` is
    byte-stable: fixed zip timestamps, no compression-level surprises. ``weights`` and
    ``extra_arrays`` cannot be stored with ``.npy`` (raise). Validated as :func:`read_trace`
    would, the targets checked (:func:`guard_target`) before anything is written.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".npy"):
        raise InputError(path, "-", "file", f"unknown trace suffix {path.suffix!r}; expected .npz or .npy")
    meta_d = _parse_json(meta, path, "-", "meta") if isinstance(meta, str) else dict(_plain(dict(meta)))
    topk = _four_dims(np.asarray(topk), path)
    meta_d.setdefault("layer_ids", list(range(topk.shape[2])))
    meta_d.setdefault("axes", list(TRACE_AXES))
    meta_d.setdefault("pad_value", PAD)
    experts, top_k, _ = _validate_trace_meta(meta_d, topk.shape[2], path, "-")
    _validate_topk(topk, experts, top_k, path, "-")
    if extra_arrays and suffix == ".npy":
        raise ValueError(f"{path}: arrays beside topk need the .npz format")
    if weights is not None:
        if suffix == ".npy":
            raise ValueError(f"{path}: weights need the .npz format")
        weights = np.asarray(weights)
        if weights.shape != topk.shape or not np.issubdtype(weights.dtype, np.floating):
            raise InputError(
                path, "-", "weights", f"expected floats of shape {topk.shape}, got {weights.dtype} {weights.shape}"
            )
    guard_target(path, overwrite)
    text = json.dumps(meta_d, ensure_ascii=False)
    if suffix == ".npz":
        arrays = {"topk": topk, "meta": np.array(text)}
        if weights is not None:
            arrays["weights"] = weights
        arrays.update(extra_arrays or {})

        def write_npz(fh: Any) -> None:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                for name, arr in arrays.items():
                    info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    with zf.open(info, "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.asarray(arr), allow_pickle=False)

        return [atomic.Part(path, write_npz)]
    side = sidecar_path(path)
    guard_target(side, overwrite)
    side_text = _json_text(meta_d)
    return [  # the ids and their sidecar: both or neither
        atomic.Part(side, lambda fh: fh.write(side_text), binary=False, newline=""),
        atomic.Part(path, lambda fh: np.lib.format.write_array(fh, topk, allow_pickle=False)),
    ]
