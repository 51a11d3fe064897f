"""Import routing captures in other people's formats as the suite's trace or histogram.

Each importer reads its source read-only, validates it, and returns an :class:`ImportedTrace`
or :class:`ImportedHistogram`; :func:`write_imported` writes it through
:func:`moeroof.data.io.write_trace` / :func:`~moeroof.data.io.write_histogram` (atomic, and
refusing to replace a file unless asked). Every import records ``provenance: witnessed``, the
source path and the import command in the meta. A bad input raises
:class:`moeroof.data.io.InputError` as ``FILE:ROW: FIELD: what is wrong`` — ROW is the line
the user sees in a CSV (header = line 1), ``row N`` (1-based) in a Parquet file, an array
index for arrays, ``-`` where no row applies.

**table** (:func:`import_table`) — one row per token (wide: K expert-id columns) or one row
per routed slot (long: an expert-id column and a slot column ``0..K-1``), CSV or Parquet (the
latter through pandas with pyarrow). ``stream``, ``step`` and ``layer`` name columns; ``A+B``
joins several into one key (``stream=dataset+problem_id``). Streams and steps are relabelled
densely ``0..n-1`` in sorted key order (numeric where every value of a column is a number), the
meta keeps the original keys (up to :data:`MAX_KEYS_IN_META`) and their count; a missing
(step, stream) cell is ``-1`` padding; a table without a layer column is one layer (id 0). A
row whose K expert ids are all ``-1`` or empty is a padding row and skipped.

**matrix** (:func:`import_matrix`) — per-layer count or frequency matrices: a wide CSV (a
layer column, one column per expert named ``PREFIX<id>``) or a 2-D ``.npy`` (layers ×
experts). Integer values whose row sums are not ≈ K or ≈ 1 are counts. Otherwise they are
frequencies: row sums ≈ K are *inclusion* frequencies (fraction of tokens whose top-K holds the
expert, e.g. the Qwen3 ``*_avg_activation.csv``), counts = frequency × T; row sums ≈ 1 are
either shares of picks (counts = share × K × T, needs ``shares=True``) or mean router
probabilities (softmax averages such as ``*_avg_dist.csv``), which are not incidence and are
refused. A frequency matrix needs the token count T from the caller: it is the histogram's
sample size and so sets the width of every bootstrap band computed from it; the sidecar says
that T was user-given.

**sglang** (:func:`import_sglang`) — SGLang's expert-distribution recorder. Looked up in
sgl-project/sglang (``python/sglang/srt/eplb/expert_distribution.py``, and before it
``python/sglang/srt/managers/expert_distribution.py``):

- v0.4-era recorder (``/dump_expert_distribution_record``): a CSV
  ``expert_distribution_rank{R}_timestamp{T}.csv``, header ``layer_id,expert_id,count``, one
  row per (layer, expert) that fired; every token adds 1 to each of its K experts, so the
  tokens of a layer are its counts' sum / K (checked to divide).
- current recorder (``--expert-distribution-recorder-mode``), ``torch.save`` of a dict:
  ``stat`` mode ``{"rank", "logical_count": (passes, layers, logical experts) int,
  "average_utilization_rate_over_window"}`` — summed over passes into a histogram (tokens = sum
  / K again); ``per_token`` / ``per_pass`` mode ``{"records": [{"forward_pass_id", "rank",
  "topk_ids_of_layer": (layers, tokens, 8) physical ids, -1 padded, "positions",
  "forward_mode", …}], "last_physical_to_logical_map": (layers, physical experts)}`` — a trace
  with one step per forward pass and one stream per token row of the pass, physical ids mapped
  to logical ones (a histogram when the output is ``.csv``).

  ``.pt`` files need torch (imported only then, ``weights_only=True``);
  :func:`sglang_from_object` takes the loaded object, so the conversion itself runs without it.

**hf-router-logits** (:func:`import_hf_router_logits`) — Hugging Face transformers'
``output_router_logits=True``: ``MoeModelOutputWithPast.router_logits`` /
``MoeCausalLMOutputWithPast.router_logits`` is a tuple with one tensor per MoE layer; the
Mixtral/Qwen-MoE ``load_balancing_loss_func`` documents them as "a tuple of
model.config.num_hidden_layers tensors of shape [batch_size X sequence_length, num_experts]"
(some models keep (batch, sequence, experts)). Accepted saved forms: ``.npy`` (layers, tokens,
E) or (layers, batch, seq, E); ``.npz`` with one such array, or one 2-D/3-D array per layer
(``np.savez(f, *logits)`` → ``arr_0 …``; keys taken in natural order) and optionally an
``attention_mask`` (batch, seq) whose zeros become padding; ``.pt`` (torch, lazily imported)
holding the tuple, a list, a stacked tensor or a dict with ``router_logits``. Each token's
top-K is the K largest logits (softmax is monotone, so the same as the K largest
probabilities; ties go to the lower id). That is the routing of top-K-softmax models
(Mixtral, Qwen-MoE, OLMoE); a model whose router adds a bias or group limit before its top-K
(DeepSeek-V3's ``e_score_correction_bias``) selects differently, and the import says it is
logits-based. Flattened (B·S, E) logits are split into B streams with ``batch`` (row
``b·S + s``, as the loss function's reshape); steps are the sequence positions.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from moeroof.core.errors import ParameterError
from moeroof.core.input_files import open_input
from moeroof.core.limits import MAX_EXPERTS, check_allocation
from moeroof.core.masks import trace_counts
from moeroof.data.io import InputError, check_counts, check_npz_members, check_readable, write_histogram, write_trace

__all__ = [
    "ImportedTrace",
    "ImportedHistogram",
    "MAX_KEYS_IN_META",
    "MAX_TRACE_CELLS",
    "parse_columns",
    "parse_filters",
    "import_table",
    "import_matrix",
    "import_sglang",
    "sglang_from_object",
    "import_hf_router_logits",
    "hf_router_logits_from_arrays",
    "write_imported",
]

#: original stream / step keys kept in the meta up to this many (beyond it: the count and ends)
MAX_KEYS_IN_META = 10_000
#: a dense trace larger than this many ids is refused (steps × streams × layers × K)
MAX_TRACE_CELLS = 2_000_000_000
#: peak bytes a row costs through ``import table`` above the interpreter: :data:`ROW_BYTES` for
#: the row (its order, its token's slot), and per column :data:`INT_CELL_BYTES` for an integer
#: (int64, and the keys' codes), :data:`TEXT_CELL_BYTES` for any other (a Python string a cell).
#: Measured peaks of Parquet imports above the interpreter's 124 MB (2-core VM, 2026-12-07):
#: 20M rows of 5 integer columns (3 keys, K = 2) 2.42 GB, 121 B a row; 20M rows of 3 (K = 1)
#: 1.78 GB, 89 B; 5M rows of 11 (K = 8) 1.11 GB, 229 B; a fit of 43 B a row, 14 B a key cell
#: and 18 B an id cell, which 48 + 20 B a cell bounds within 1.2×. (48 B a cell refused the 20M
#: rows of 5, at 4.47 GiB, under a 4 GB address-space cap that imports them.) 5M rows of 2 text
#: and 1 integer column took 1.2 GB (100 B a text cell)
ROW_BYTES = 48
INT_CELL_BYTES = 16
TEXT_CELL_BYTES = 128
#: rows of a CSV table read (as text) at a time: ~60 bytes a cell while a chunk is converted
CSV_CHUNK_ROWS = 65_536
#: a histogram sidecar needs a model name; an import that was not given one says so
UNKNOWN_MODEL = "unknown (not given at import)"
#: tolerance of "row sums ≈ K" / "≈ 1" (bf16-averaged frequencies sum to K within ~0.1 %)
SUM_TOLERANCE = 0.02


@dataclass
class ImportedTrace:
    """A trace ready for :func:`moeroof.data.io.write_trace`: ``topk`` (steps, streams, layers, K)."""

    topk: np.ndarray
    meta: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass
class ImportedHistogram:
    """A histogram ready for :func:`moeroof.data.io.write_histogram`."""

    counts: np.ndarray  # (L, E) int64
    tokens: list[int]
    experts: int
    top_k: int
    layer_ids: list[int]
    model: str | None
    source: str
    extra: dict[str, Any]
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- shared pieces


def _base_meta(src: Path, fmt: str, command: str | None, model: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"source": str(src.resolve()), "provenance": "witnessed", "imported_from": fmt}
    if command:
        meta["import_command"] = command
    if model:
        meta["model"] = model
    return meta


def _check_experts_top_k(experts: int | None, top_k: int, src: Path) -> None:
    """Refuses E below 1 or past :data:`~moeroof.core.limits.MAX_EXPERTS` (given, or the largest id
    a capture holds + 1: it sizes what the import allocates) and K outside 1..E."""
    if experts is not None and experts < 1:
        raise InputError(src, "-", "experts", f"expected a positive integer, got {experts}")
    if experts is not None and experts > MAX_EXPERTS:
        why = f"{experts:,} experts (the largest id + 1 where E is not given) is past the {MAX_EXPERTS:,} a model may have"
        raise InputError(src, "-", "experts", why)
    if top_k < 1:
        raise InputError(src, "-", "top_k", f"expected a positive integer, got {top_k}")
    if experts is not None and top_k > experts:
        raise InputError(src, "-", "top_k", f"top_k K={top_k} exceeds experts E={experts}")


def _id_dtype(experts: int) -> np.dtype:
    return np.dtype(np.int16) if experts <= np.iinfo(np.int16).max else np.dtype(np.int32)


def _keys_for_meta(keys: Any) -> dict[str, Any]:
    """The keys as text in the meta, up to :data:`MAX_KEYS_IN_META` (beyond it: the count and ends;
    only those are made text: 10^7 keys as strings would take a gigabyte)."""
    if len(keys) <= MAX_KEYS_IN_META:
        return {"count": len(keys), "keys": [str(k) for k in keys]}
    return {"count": len(keys), "first": str(keys[0]), "last": str(keys[-1]), "keys_omitted": True}


# ----------------------------------------------------------------------------- table


def parse_columns(text: str) -> dict[str, list[str]]:
    """``"stream=a+b,step=c,layer=d"`` → ``{"stream": ["a", "b"], "step": ["c"], "layer": ["d"]}``.

    ``stream`` and ``step`` are required, ``layer`` optional; raises ParameterError("columns", …).
    """
    out: dict[str, list[str]] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ParameterError("columns", f"expected ROLE=COL[+COL…], got {part!r}")
        role, cols = (s.strip() for s in part.split("=", 1))
        if role not in ("stream", "step", "layer"):
            raise ParameterError("columns", f"unknown role {role!r} (expected stream, step, layer)")
        if role in out:
            raise ParameterError("columns", f"{role} given twice")
        names = [c.strip() for c in cols.split("+")]
        if not all(names):
            raise ParameterError("columns", f"empty column name in {part!r}")
        out[role] = names
    for role in ("stream", "step"):
        if role not in out:
            raise ParameterError("columns", f"missing {role}=COL (got {text!r})")
    return out


def parse_filters(items: Sequence[str] | None) -> list[tuple[str, str]]:
    """``["phase=decode", …]`` → ``[("phase", "decode"), …]`` (values compared as text)."""
    out = []
    for item in items or ():
        if "=" not in item:
            raise ParameterError("filters", f"expected COL=VALUE, got {item!r}")
        col, value = item.split("=", 1)
        if not col.strip():
            raise ParameterError("filters", f"empty column name in {item!r}")
        out.append((col.strip(), value.strip()))
    return out


def _read_frame(src: Path, columns: Sequence[str], int_columns: Mapping[str, bool] | None = None) -> tuple[Any, str]:
    """The named columns of a CSV or Parquet file; (frame, row kind: 'csv' | 'parquet'). Integer
    Parquet columns stay int64; of a CSV, the ``int_columns`` (name → whether an empty cell is the
    padding id −1) whose every cell is an integer are read as int64 (:func:`_read_csv_frame`), the
    rest as text."""

    suffix = src.suffix.lower()
    wanted = list(dict.fromkeys(columns))
    if suffix in (".parquet", ".pq"):
        try:
            import pyarrow  # noqa: F401  (pandas' Parquet engine)
        except ImportError:
            why = "reading Parquet needs pyarrow, an optional dependency (pip install 'moeroof[parquet]'), or convert the table to CSV"
            raise InputError(src, "-", "file", why) from None
        import pyarrow.parquet as pq

        with open_input(src) as fh, _system_memory_pool():  # one open: the footer's schema and rows, then the columns
            try:
                pf = pq.ParquetFile(fh)
                have, schema, rows = list(pf.schema_arrow.names), pf.schema_arrow, pf.metadata.num_rows
                _check_columns(src, "-", have, wanted)
                _check_parquet_rows(src, wanted, schema, rows)
                table = pf.read(columns=wanted)
            except InputError:
                raise
            except Exception as exc:  # pyarrow raises its own error types for a bad file
                raise InputError(src, "-", "file", f"not a readable Parquet file: {exc}") from None
            # the Arrow buffers freed as each column moves to pandas: one copy of the data, not two
            frame = table.to_pandas(self_destruct=True, split_blocks=True)
            del table
        # integer columns stay integers (8 bytes a cell, where a cell as text is a Python string
        # of ~60): their text would only be parsed back; the rest is text, a null as ""
        for c in wanted:
            if not _is_int_column(frame[c]):
                frame[c] = frame[c].astype(str).where(frame[c].notna(), "")
        return frame, "parquet"
    have = _csv_header(src)
    if not have or not any(have):
        raise InputError(src, 1, "header", "empty file or empty header line")
    _check_columns(src, 1, have, wanted)
    return _read_csv_frame(src, wanted, int_columns or {}), "csv"


@contextlib.contextmanager
def _system_memory_pool() -> Iterator[None]:
    """Arrow allocates from the C library's ``malloc`` while a table is read and converted, not from
    its default pool (mimalloc here), which reserves address space far beyond what it holds and keeps
    freed buffers mapped: 20M rows of 5 integer columns peaked at 2.4 GB resident but 4 GB of
    address space, and ran out of memory under a 4 GB ``ulimit -v`` that the system pool imports
    them under (2.2 GB resident, 2.7 GB of address space). Buffers keep the pool they came from,
    so the default is restored after."""
    import pyarrow as pa

    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


#: pandas reads a CSV table's cells as the text written (a blank line kept as a row, dropped after)
_CSV_AS_TEXT: dict[str, Any] = dict(dtype=str, keep_default_na=False, skip_blank_lines=False, encoding="utf-8-sig")


def _read_csv_frame(src: Path, wanted: Sequence[str], int_columns: Mapping[str, bool]) -> Any:
    """The ``wanted`` columns of a CSV file, read :data:`CSV_CHUNK_ROWS` rows at a time.

    Each chunk is read as text (ids are checked as integers later, keys stay as the user wrote
    them); a blank line is dropped, and a row keeps its index, so that index + 2 is its line. An
    ``int_columns`` column whose every cell reads as one integer (``pd.to_numeric``: the value the
    text would give; an empty cell the padding id −1 where its flag says so) is kept as int64, 8
    bytes a cell where its text took ~60; one that does not, in any chunk, is read again whole as
    text. After each chunk the rows the whole file would hold, at its bytes so far, are checked
    against available memory (at :data:`ROW_BYTES` a row and :data:`INT_CELL_BYTES` or
    :data:`TEXT_CELL_BYTES` a cell, as for Parquet), so a table too large for this machine is refused before it is held."""
    import pandas as pd

    text_cols = set(wanted) - set(int_columns)
    parts: dict[str, list[np.ndarray]] = {c: [] for c in wanted}
    index: list[np.ndarray] = []
    size, rows = max(src.stat().st_size, 1), 0
    try:
        with open_input(src) as fh:
            reader = pd.read_csv(fh, usecols=lambda c: c.strip() in wanted, chunksize=CSV_CHUNK_ROWS, **_CSV_AS_TEXT)
            for chunk in reader:
                chunk.columns = [c.strip() for c in chunk.columns]
                chunk = chunk[~(chunk == "").all(axis=1)]  # skip_blank_lines=False kept a blank line as a row
                index.append(chunk.index.to_numpy())
                for c in wanted:
                    ints = None if c in text_cols else _int_cells(chunk[c], int_columns[c])
                    if ints is None:
                        text_cols.add(c)
                    parts[c].append(chunk[c].to_numpy(dtype=object) if ints is None else ints)
                rows += len(chunk)
                per_row = ROW_BYTES + sum(TEXT_CELL_BYTES if c in text_cols else INT_CELL_BYTES for c in wanted)
                try:
                    check_allocation(rows * size // max(fh.tell(), 1), per_row, f"~{rows:,} rows so far", limit=None)
                except ValueError as exc:
                    raise InputError(src, "-", "rows", f"{exc} × {len(wanted)} columns to import") from None
    except InputError:
        raise
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise InputError(src, "-", "file", f"not a readable CSV table: {exc}") from None
    rows_index = np.concatenate(index) if index else np.zeros(0, dtype=np.int64)
    columns = {}
    for c in wanted:
        if c in text_cols and any(p.dtype != object for p in parts[c]):
            parts[c] = [_csv_text_column(src, c, rows_index)]  # int in some chunks: their text as written
        # each column's chunks freed as it is joined, and no block of all columns built: one copy held
        columns[c] = np.concatenate(parts.pop(c)) if index else np.zeros(0, dtype=object)
    return pd.DataFrame(columns, index=pd.Index(rows_index), copy=False)


def _int_cells(column: Any, empty_is_padding: bool) -> np.ndarray | None:
    """A text column's cells as int64 where each is one integer (an empty one −1 where
    ``empty_is_padding``), else None."""
    import pandas as pd

    num = pd.to_numeric(column, errors="coerce")
    if num.dtype.kind == "f" and empty_is_padding:
        missing = num.isna().to_numpy()
        if missing.any() and (column[missing].str.strip() == "").all():
            num = pd.to_numeric(column.where(~missing, "-1"), errors="coerce")
    return num.to_numpy() if num.dtype.kind == "i" else None


def _csv_text_column(src: Path, name: str, rows_index: np.ndarray) -> np.ndarray:
    """One column of a CSV file as text, at the rows ``rows_index`` (the first read's, blank lines
    dropped)."""
    import pandas as pd

    with open_input(src) as fh:
        col = pd.read_csv(fh, usecols=lambda c: c.strip() == name, **_CSV_AS_TEXT)
    return col.iloc[:, 0].to_numpy(dtype=object)[rows_index]


def _is_int_column(series: Any) -> bool:
    """Whether a column holds integers numpy's int64 keeps exactly (no nulls: those read as float)."""
    dtype = series.dtype
    return isinstance(dtype, np.dtype) and (dtype.kind == "i" or (dtype.kind == "u" and dtype.itemsize < 8))


def _check_parquet_rows(src: Path, wanted: Sequence[str], schema: Any, rows: int) -> None:
    """Refuses, from the file's footer (its ``schema`` and ``rows``) and before a row is read, a
    table whose rows would need more memory to import than this machine has: a few kilobytes of
    Parquet can declare 10^8 rows of one repeated value. A row costs :data:`ROW_BYTES` through
    the import, and each of its integer cells :data:`INT_CELL_BYTES`, any other (held as text)
    :data:`TEXT_CELL_BYTES`."""
    import pyarrow as pa

    per_row = ROW_BYTES + sum(
        INT_CELL_BYTES if pa.types.is_integer(schema.field(c).type) else TEXT_CELL_BYTES for c in dict.fromkeys(wanted)
    )
    try:
        check_allocation(rows, per_row, f"{rows:,} rows × {len(set(wanted))} columns to import", limit=None)
    except ValueError as exc:
        raise InputError(src, "-", "rows", str(exc)) from None


def _check_columns(src: Path, row: int | str, have: Sequence[str], wanted: Sequence[str]) -> None:
    """Refuses a column the import reads that the file (row 1: a CSV's header) does not have, then
    one named twice: that is ambiguous (pandas would read one of them as ``NAME.1`` and the import
    the other, silently), an error naming both places."""
    missing = [c for c in wanted if c not in have]
    if missing:
        raise InputError(
            src, row, missing[0], f"no such column ({'header has' if row == 1 else 'has'}: {', '.join(have)})"
        )
    for name in wanted:
        places = [i + 1 for i, h in enumerate(have) if h == name]
        if len(places) > 1:
            why = f"column given twice (columns {places[0]} and {places[1]}): which one is meant is ambiguous"
            raise InputError(src, row, name, why)


def _csv_header(src: Path) -> list[str]:
    """The column names (stripped) of a CSV file's first line."""
    import csv

    try:
        with open(src, encoding="utf-8-sig", newline="") as fh:  # read-only
            return [h.strip() for h in next(csv.reader([fh.readline()]), [])]
    except UnicodeDecodeError as exc:
        raise InputError(src, 1, "header", f"not UTF-8 text: {exc}") from None
    except csv.Error as exc:  # a field past the csv module's limit (128 KiB), ...: the user's file, not a bug
        raise InputError(src, 1, "header", f"not a CSV header line: {exc}") from None


def _row_label(kind: str, index: int) -> int | str:
    """What the user sees: a CSV line (header = 1) or a Parquet row (1-based)."""
    return index + 2 if kind == "csv" else f"row {index + 1}"


def _first_repeat(key: np.ndarray, rows: Any, kind: str) -> tuple[np.ndarray, int | None, int | str, int | str]:
    """(the stable order of ``key``; for the first value given twice in that order: its place j,
    the later row's label and the earlier's — j None when every value is there once)."""
    order = np.argsort(key, kind="stable")
    dup = key[order][1:] == key[order][:-1]
    if not dup.any():
        return order, None, "", ""
    j = int(np.argmax(dup))
    first, second = sorted((int(rows[order[j]]), int(rows[order[j + 1]])))
    return order, j, _row_label(kind, second), _row_label(kind, first)


def _refuse_first(bad: Any, rows: Any, src: Path, kind: str, name: str, why: str, values: Any) -> None:
    """Refuses the first of ``rows`` (a frame or column) where ``bad`` holds, at its line or row:
    ``why`` with that row's entry of ``values`` in its ``{}``."""
    bad = np.asarray(bad)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(src, _row_label(kind, int(rows.index[i])), name, why.format(values[i]))


def _as_int(series: Any, src: Path, kind: str, name: str, allow_empty: bool = False) -> np.ndarray:
    """Integer values of a text column, vectorised; the first bad cell named by its row."""
    import pandas as pd

    if _is_int_column(series):
        return series.to_numpy(dtype=np.int64)
    text = series.astype(str).str.strip()
    if allow_empty:
        text = text.where(text != "", "-1")
    num = pd.to_numeric(text, errors="coerce")
    bad = num.isna() | (num != np.floor(num.fillna(0)))
    _refuse_first(bad, series, src, kind, name, "expected an integer, got {!r}", series.iloc)
    return num.to_numpy(dtype=np.float64).astype(np.int64)


def _dense_codes(frame: Any, cols: Sequence[str]) -> tuple[np.ndarray, Any]:
    """Dense codes 0..n-1 of the key made of ``cols`` in sorted key order, and the keys (each
    prints as the user wrote it: a list of text, or one integer column's sorted int64 values).

    A column whose every value is a number sorts numerically (``2 < 10``), others as text; a
    joined key prints as ``a:b``.
    """
    import pandas as pd

    if len(cols) == 1 and _is_int_column(frame[cols[0]]):
        uniq_ids, codes = np.unique(frame[cols[0]].to_numpy(dtype=np.int64), return_inverse=True)
        return codes.astype(np.int64, copy=False), uniq_ids
    parts = {}
    for c in cols:
        s = frame[c].astype(str).str.strip()
        num = pd.to_numeric(s, errors="coerce")
        parts[c] = num if not num.isna().any() else s
    keys = pd.DataFrame(parts, index=frame.index)
    uniq = keys.drop_duplicates().sort_values(list(cols), kind="mergesort").reset_index(drop=True)
    uniq["__code__"] = np.arange(len(uniq), dtype=np.int64)
    codes = keys.merge(uniq, on=list(cols), how="left")["__code__"].to_numpy()

    def fmt(v: Any) -> str:
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)

    labels = [":".join(fmt(v) for v in row) for row in uniq[list(cols)].itertuples(index=False, name=None)]
    return codes, labels


def _check_table_args(
    columns: Mapping[str, Sequence[str]],
    top_k: int,
    expert_cols: Sequence[str] | None,
    expert_col: str | None,
    slot_col: str | None,
) -> None:
    """Refuses a table import whose id and key columns do not make one layout (wide or long)."""
    if (expert_cols is not None) == (expert_col is not None) or (expert_col is None) != (slot_col is None):
        raise ParameterError(
            "expert_cols",
            "give either expert_cols (wide: one row per token) or expert_col and slot_col (long: one row per slot)",
        )
    if expert_cols is not None and len(expert_cols) != top_k:
        raise ParameterError("expert_cols", f"{len(expert_cols)} columns but top_k K={top_k} (one column per slot)")
    for role in ("stream", "step"):
        if role not in columns:
            raise ParameterError("columns", f"missing {role}=COL")


def _filtered_frame(
    src: Path,
    needed: Sequence[str],
    filters: Sequence[tuple[str, str]],
    flag: str,
    int_columns: Mapping[str, bool] | None = None,
) -> tuple[Any, str, int]:
    """(the rows the filters keep, row kind, rows read); refuses a table left without rows. A
    filter's column is compared as text, so it is never among the ``int_columns`` read as integers."""
    ints = {c: pad for c, pad in (int_columns or {}).items() if c not in {c for c, _ in filters}}
    frame, kind = _read_frame(src, needed, ints)
    n_read = len(frame)
    for col, value in filters:
        frame = frame[frame[col].astype(str).str.strip() == value]
    if frame.empty:
        what = f" after {flag} {' '.join(f'{c}={v}' for c, v in filters)}" if filters else ""
        raise InputError(src, "-", "file", f"no data rows{what} ({n_read} rows read)")
    return frame, kind, n_read


def _wide_ids(
    frame: Any, src: Path, kind: str, expert_cols: Sequence[str], key_cols: Sequence[str]
) -> tuple[Any, np.ndarray, np.ndarray]:
    """(the token rows, their K ids, their row index) of a wide table; padding rows dropped, and
    the id columns that are no key column (``key_cols``), which the ids now hold, with them."""
    ids = np.empty((len(frame), len(expert_cols)), dtype=np.int64)
    for k, c in enumerate(expert_cols):  # column by column: no second copy of all ids at once
        ids[:, k] = _as_int(frame[c], src, kind, c, allow_empty=True)
    frame = frame.drop(columns=[c for c in dict.fromkeys(expert_cols) if c not in key_cols])
    keep = ~(ids == -1).all(axis=1)  # a padding row (all slots empty or -1) is no token
    if not keep.all():  # else no copy of a table that may fill much of memory
        frame, ids = frame[keep], ids[keep]
    return frame, ids, frame.index.to_numpy()


def _long_ids(
    frame: Any, src: Path, kind: str, expert_col: str, slot_col: str, top_k: int
) -> tuple[np.ndarray, np.ndarray]:
    """(expert id, slot) of each row of a long table; a slot outside 0..K-1 refused."""
    eid = _as_int(frame[expert_col], src, kind, expert_col, allow_empty=True)
    slot = _as_int(frame[slot_col], src, kind, slot_col)
    bad = (slot < 0) | (slot >= top_k)
    _refuse_first(bad, frame, src, kind, slot_col, f"slot {{}} not in 0..{top_k - 1} (K={top_k})", slot)
    return eid, slot


def _layer_codes(frame: Any, src: Path, kind: str, layer_cols: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(layer ids, each row's layer code) from the layer column; one layer (id 0) without one."""
    if not layer_cols:
        return np.array([0]), np.zeros(len(frame), dtype=np.int64)
    if len(layer_cols) != 1:
        raise ParameterError("columns", "layer takes one column (a layer id)")
    lay = _as_int(frame[layer_cols[0]], src, kind, layer_cols[0])
    _refuse_first(lay < 0, frame, src, kind, layer_cols[0], "negative layer id {}", lay)
    return np.unique(lay, return_inverse=True)


def _check_trace_cells(src: Path, n_steps: int, n_streams: int, n_layers: int, top_k: int) -> None:
    """Refuses a dense trace past :data:`MAX_TRACE_CELLS` ids."""
    cells = n_steps * n_streams * n_layers * top_k
    if cells > MAX_TRACE_CELLS:
        why = (
            f"the dense trace would hold {n_steps} steps × {n_streams} streams × {n_layers} layers × K={top_k} "
            f"= {cells:,} ids (limit {MAX_TRACE_CELLS:,}): are stream and step the right columns?"
        )
        raise InputError(src, "-", "file", why)


def _long_to_wide(
    frame: Any, src: Path, kind: str, cell: np.ndarray, long: tuple[np.ndarray, np.ndarray], top_k: int, slot_col: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K ids per token, each token's first row, its cell) of a long table's (id, slot) rows."""
    eid, slot = long
    # one row per (cell, slot); every cell needs each of its K slots once
    order, j, row, first = _first_repeat(cell * top_k + slot, frame.index, kind)  # slot is in 0..K-1
    if j is not None:
        raise InputError(src, row, slot_col, f"slot {slot[order[j]]} of this token given twice (first at {first})")
    c_sorted = cell[order]
    uniq_cells, start, count = np.unique(c_sorted, return_index=True, return_counts=True)
    short = count != top_k
    if short.any():
        j = int(np.argmax(short))
        why = f"this token has {count[j]} of its K={top_k} slots (each token needs rows for slots 0..{top_k - 1})"
        raise InputError(src, _row_label(kind, int(frame.index[order[start[j]]])), slot_col, why)
    ids = eid[order].reshape(len(uniq_cells), top_k)
    return ids, frame.index.to_numpy()[order[start]], uniq_cells


def _check_token_ids(
    ids: np.ndarray, row_index: np.ndarray, src: Path, kind: str, experts: int, id_col: Callable[[int], str]
) -> None:
    """Every token: K ids in [0, E), distinct, not partly padding; ``id_col``: slot → column."""
    top_k = ids.shape[1]
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= experts):  # the mask only where a fault is there
        bad = (ids < 0) | (ids >= experts)
        t, k = np.argwhere(bad)[0]
        what = "padding (-1/empty) in a token that has other ids" if ids[t, k] == -1 else f"expert id {ids[t, k]}"
        raise InputError(
            src, _row_label(kind, int(row_index[t])), id_col(k), f"{what} not in [0, {experts}) (E={experts})"
        )
    from moeroof.data.io import repeated_expert

    found = repeated_expert(ids) if top_k > 1 else None
    if found is not None:
        t, k = found
        why = f"expert {ids[t, k]} twice in one token (K ids must be distinct)"
        raise InputError(src, _row_label(kind, int(row_index[t])), id_col(k), why)


def _check_one_token_per_cell(
    cell: np.ndarray,
    row_index: np.ndarray,
    src: Path,
    kind: str,
    step_col: str,
    keys: tuple[Any, Any, np.ndarray],
) -> None:
    """Refuses a second token for one (step, stream, layer); ``keys``: stream keys, step keys, layer ids."""
    stream_keys, step_keys, layer_ids = keys
    n_streams, n_layers = len(stream_keys), len(layer_ids)
    order, j, row, first = _first_repeat(cell, row_index, kind)
    if j is not None:
        s, rem = divmod(int(cell[order[j]]), n_streams * n_layers)
        t, l = divmod(rem, n_layers)
        why = (
            f"a second token for stream {stream_keys[t]}, step {step_keys[s]}, layer {int(layer_ids[l])} "
            f"(first at {first}): are stream and step the right columns?"
        )
        raise InputError(src, row, step_col, why)


def import_table(
    src: str | os.PathLike[str],
    *,
    columns: Mapping[str, Sequence[str]],
    experts: int,
    top_k: int,
    expert_cols: Sequence[str] | None = None,
    expert_col: str | None = None,
    slot_col: str | None = None,
    filters: Sequence[tuple[str, str]] = (),
    model: str | None = None,
    command: str | None = None,
) -> ImportedTrace:
    """A per-token (wide) or per-slot (long) routing table → trace (see the module docstring).

    ``columns`` maps ``stream``, ``step`` and optionally ``layer`` to column names (several
    joined into one key); exactly one of ``expert_cols`` (K names) or ``expert_col`` +
    ``slot_col`` is given; ``filters`` keep rows whose column equals the value (as text).
    """
    src = Path(src)
    check_readable(src)
    _check_experts_top_k(experts, top_k, src)
    _check_table_args(columns, top_k, expert_cols, expert_col, slot_col)
    wide = expert_cols is not None
    layer_cols = list(columns.get("layer", ()))
    # after _check_table_args: K expert columns (wide), or the id and the slot column (long)
    id_cols = list(expert_cols) if expert_cols is not None else [cast(str, expert_col), cast(str, slot_col)]
    key_cols = [*columns["stream"], *columns["step"], *layer_cols]
    needed = [*key_cols, *id_cols, *(c for c, _ in filters)]
    # ids read as integers where every cell is one (an empty id cell is padding), keys too
    ints = {c: False for c in needed} | {c: True for c in (id_cols if wide else id_cols[:1])}
    frame, kind, n_read = _filtered_frame(src, needed, filters, "--filter", ints)
    if wide:
        frame, ids, row_index = _wide_ids(frame, src, kind, id_cols, key_cols)
    else:
        long = _long_ids(frame, src, kind, id_cols[0], id_cols[1], top_k)
    if frame.empty:
        raise InputError(src, "-", "file", "every row is padding (all expert ids -1 or empty)")

    stream_code, stream_keys = _dense_codes(frame, columns["stream"])
    step_code, step_keys = _dense_codes(frame, columns["step"])
    layer_ids, layer_code = _layer_codes(frame, src, kind, layer_cols)
    n_steps, n_streams, n_layers = len(step_keys), len(stream_keys), len(layer_ids)
    _check_trace_cells(src, n_steps, n_streams, n_layers, top_k)
    cell = (step_code * n_streams + stream_code) * n_layers + layer_code  # one token cell per row
    if not wide:
        ids, row_index, cell = _long_to_wide(frame, src, kind, cell, long, top_k, id_cols[1])
    _check_token_ids(ids, row_index, src, kind, experts, lambda k: id_cols[k] if wide else id_cols[0])
    keys = (stream_keys, step_keys, layer_ids)
    _check_one_token_per_cell(cell, row_index, src, kind, "+".join(columns["step"]), keys)
    topk = np.full((n_steps * n_streams * n_layers, top_k), -1, dtype=_id_dtype(experts))
    topk[cell] = ids
    topk = topk.reshape(n_steps, n_streams, n_layers, top_k)

    meta = _base_meta(src, "table", command, model)
    meta.update(
        {
            "experts": int(experts),
            "top_k": int(top_k),
            "layer_ids": [int(x) for x in layer_ids],
            "columns": {role: "+".join(cols) for role, cols in columns.items()},
            "filters": {c: v for c, v in filters},
            "streams_from": _keys_for_meta(stream_keys),
            "steps_from": _keys_for_meta(step_keys),
            "tokens": int(len(cell)),
            "rows_read": int(n_read),
        }
    )
    live = len(cell) / max(1, n_steps * n_streams * n_layers)
    notes = [
        f"{len(cell)} tokens → {n_steps} steps × {n_streams} streams × {n_layers} layers "
        f"({100 * live:.0f} % of the cells live, the rest -1 padding)"
    ]
    if not layer_cols:
        notes.append("no layer column: one layer (id 0)")
    return ImportedTrace(topk=topk, meta=meta, notes=notes)


# ----------------------------------------------------------------------------- matrix


def _tokens_per_layer(tokens: int | Sequence[int], n_layers: int) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(tokens, dtype=np.int64))
    if arr.size == 1:
        arr = np.full(n_layers, int(arr[0]), dtype=np.int64)
    if arr.size != n_layers:
        raise ParameterError("tokens", f"{arr.size} token counts for {n_layers} layers (give one, or one per layer)")
    if (arr < 1).any():
        raise ParameterError("tokens", f"token counts must be ≥ 1, got {arr.tolist()}")
    return arr


def _round_to_counts(incl: np.ndarray, tokens: np.ndarray, top_k: int) -> np.ndarray:
    """Inclusion frequencies π (L, E) × T → integer counts by largest remainder per layer.

    A row summing to more than K (bf16-averaged rows reach K + 0.005) is first scaled down to
    sum to K, so a layer's counts total round(Σπ·T) ≤ K·T and each count is at most T: a valid
    incidence histogram.
    """
    sums = incl.sum(axis=1, keepdims=True)
    incl = np.where(sums > top_k, incl * (top_k / np.where(sums > 0, sums, 1.0)), incl)
    want = incl * tokens[:, None]
    counts = np.minimum(np.floor(want).astype(np.int64), tokens[:, None])
    for l in range(incl.shape[0]):
        target = min(int(round(float(want[l].sum()))), top_k * int(tokens[l]))
        short = target - int(counts[l].sum())  # ≥ 0: the floors never exceed the rounded total
        if short > 0:
            rem = np.where(counts[l] < tokens[l], want[l] - counts[l], -np.inf)
            counts[l, np.argsort(-rem, kind="stable")[:short]] += 1
    return counts


def _read_npy_matrix(
    src: Path, layer_col: str | None, expert_prefix: str | None, filters: Sequence[tuple[str, str]], experts: int | None
) -> tuple[np.ndarray, list[int], dict[str, Any]]:
    """(values (L, E) float, layer ids 0..L-1, no extra meta) of a 2-D .npy of finite values ≥ 0."""
    if layer_col or expert_prefix or filters:
        raise ParameterError(
            "layer_col", "a .npy matrix is layers × experts already: no layer column, prefix or filter"
        )
    vals = _load_numpy(src)
    if vals.ndim != 2 or not np.issubdtype(vals.dtype, np.number):
        raise InputError(
            src, "-", "array", f"expected a 2-D numeric array (layers × experts), got {vals.dtype} {vals.shape}"
        )
    vals = vals.astype(np.float64)
    bad = ~np.isfinite(vals) | (vals < 0)
    if bad.any():
        l, i = np.argwhere(bad)[0]
        raise InputError(src, f"[{l},{i}]", "value", f"expected a finite value ≥ 0, got {vals[l, i]}")
    if experts is not None and experts != vals.shape[1]:
        raise InputError(src, "-", "experts", f"the array has {vals.shape[1]} expert columns but experts E={experts}")
    return vals, list(range(vals.shape[0])), {}


def _matrix_header(
    src: Path, layer_col: str, expert_prefix: str, filters: Sequence[tuple[str, str]]
) -> tuple[list[str], dict[str, int]]:
    """(a CSV matrix's header, expert column → expert id); the layer and filter columns must be there."""
    header = _csv_header(src)
    ids: dict[str, int] = {}
    named: dict[int, str] = {}  # expert id → the column that gave it
    for name in header:
        rest = name[len(expert_prefix) :] if name.startswith(expert_prefix) else ""
        if not rest.isdigit():
            continue
        if not rest.isascii():  # str.isdigit takes ¹ and ٣; int() does not (or reads another number)
            raise InputError(src, 1, name, f"expected {expert_prefix}<id> with the id in digits 0-9")
        e = int(rest)
        if e >= MAX_EXPERTS:  # the id sizes the (layers, E) matrix: bounded before anything is allocated
            raise InputError(src, 1, name, f"expert id {e} is past the {MAX_EXPERTS:,} experts a model may have")
        if e in named and named[e] != name:  # Expert_1 and Expert_01
            raise InputError(
                src, 1, name, f"names expert {e}, as column {named[e]} does: which one is meant is ambiguous"
            )
        named[e] = name
        ids[name] = e
    if not ids:
        raise InputError(src, 1, "header", f"no column named {expert_prefix}<id> (header: {', '.join(header[:8])}…)")
    for col in [layer_col, *(c for c, _ in filters)]:
        if col not in header:
            raise InputError(src, 1, col, f"no such column (header has: {', '.join(header[:8])}…)")
    return header, ids


def _matrix_layers(
    frame: Any, src: Path, kind: str, layer_col: str, others: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(each row's layer id, the rows in layer order): one row per layer, no negative id."""
    lay = _as_int(frame[layer_col], src, kind, layer_col)
    order, j, row, first = _first_repeat(lay, frame.index, kind)
    if j is not None:
        why = (
            f"layer {lay[order[j]]} twice (first at {first}): one row per layer is needed; "
            f"keep one with a filter on {', '.join(others) or 'another column'}"
        )
        raise InputError(src, row, layer_col, why)
    _refuse_first(lay < 0, frame, src, kind, layer_col, "negative layer id {}", lay)
    return lay, order


def _matrix_values(frame: Any, src: Path, kind: str, ids: Mapping[str, int], n_exp: int) -> np.ndarray:
    """The expert columns' values (rows, E) in file order; a cell that is no number ≥ 0 refused."""
    import pandas as pd

    try:
        check_allocation(len(frame), 8 * n_exp, f"{len(frame):,} layers × {n_exp:,} experts", limit=None)
    except ValueError as exc:
        raise InputError(src, "-", "experts", str(exc)) from None
    vals = np.zeros((len(frame), n_exp))
    for name, e in ids.items():
        num = pd.to_numeric(frame[name].astype(str).str.strip(), errors="coerce")
        bad = num.isna() | ~np.isfinite(num) | (num < 0)
        _refuse_first(bad, frame, src, kind, name, "expected a number ≥ 0, got {!r}", frame[name].iloc)
        vals[:, e] = num.to_numpy(dtype=np.float64)
    return vals


def _read_matrix(
    src: Path, layer_col: str | None, expert_prefix: str | None, filters: Sequence[tuple[str, str]], experts: int | None
) -> tuple[np.ndarray, list[int], dict[str, Any]]:
    """(values (L, E) float, layer ids, extra meta) of a wide CSV or a 2-D .npy."""
    if src.suffix.lower() == ".npy":
        return _read_npy_matrix(src, layer_col, expert_prefix, filters, experts)
    if not layer_col or not expert_prefix:
        raise ParameterError("layer_col", "a CSV matrix needs its layer column and the expert columns' name prefix")
    header, ids = _matrix_header(src, layer_col, expert_prefix, filters)
    frame, kind, _ = _filtered_frame(src, [layer_col, *(c for c, _ in filters), *ids], filters, "the filter")
    others = [c for c in header if c != layer_col and c not in ids]
    lay, order = _matrix_layers(frame, src, kind, layer_col, others)
    n_exp = max(ids.values()) + 1
    if experts is not None:
        if experts < n_exp:
            raise InputError(src, 1, "header", f"column {expert_prefix}{n_exp - 1} but experts E={experts}")
        n_exp = experts
    vals = _matrix_values(frame, src, kind, ids, n_exp)
    extra: dict[str, Any] = {"layer_column": layer_col, "expert_prefix": expert_prefix, "filters": dict(filters)}
    if len(ids) < n_exp:
        extra["experts_without_column"] = sorted(set(range(n_exp)) - set(ids.values()))
    return vals[order], [int(x) for x in lay[order]], extra


def _matrix_counts(
    vals: np.ndarray,
    layer_ids: list[int],
    tokens: int | Sequence[int] | None,
    top_k: int,
    src: Path,
    meta: dict[str, Any],
    notes: list[str],
) -> tuple[np.ndarray, np.ndarray]:
    """(counts, tokens per layer) of a matrix of incidence counts; fills in ``meta`` and ``notes``."""
    if not bool(np.all(vals == np.round(vals))):
        l, i = np.argwhere(vals != np.round(vals))[0]
        raise InputError(src, f"layer {layer_ids[l]}", f"expert {i}", f"counts must be integers, got {vals[l, i]}")
    counts = vals.astype(np.int64)
    if tokens is None:
        # every token adds 1 to each of its K experts, so a layer's tokens are its sum / K
        tok = np.ceil(counts.sum(axis=1) / top_k).astype(np.int64)
        if (tok < 1).any():
            l = int(np.argmin(tok))
            raise InputError(src, f"layer {layer_ids[l]}", "count", "a layer with no counts at all")
        over = counts.max(axis=1) > tok
        if over.any():
            l = int(np.argmax(over))
            why = (
                f"an expert counted {counts[l].max()} times but the layer's counts sum to only "
                f"{counts[l].sum()} = K × {counts[l].sum() / top_k:g} tokens: are these incidence counts, and is K right?"
            )
            raise InputError(src, f"layer {layer_ids[l]}", "count", why)
        meta["tokens_inferred"] = "row sum / top_k (each token counts each of its K experts once)"
        notes.append(f"tokens per layer = row sum / K ({_fmt_tokens(tok.tolist())}); give them if they differ")
    else:
        tok = _tokens_per_layer(tokens, vals.shape[0])
        meta["tokens_user_given"] = True
        # the tokens given against the counts, named in the matrix (the writer would name its output)
        check_counts(counts, (counts.shape[1], top_k, layer_ids, tok), src)
    meta["quantity"] = "incidence counts"
    return counts, tok


def _matrix_inclusion(
    vals: np.ndarray,
    layer_ids: list[int],
    near: tuple[bool, bool],
    shares: bool,
    top_k: int,
    src: Path,
    meta: dict[str, Any],
) -> np.ndarray:
    """Inclusion frequencies (L, E) of frequencies or shares of picks (``near``: rows ≈ K, ≈ 1)."""
    near_k, near_1 = near
    sums = vals.sum(axis=1)
    if near_1 and not near_k:
        if not shares:
            raise ParameterError(
                "shares",
                f"the rows of {src} sum to 1, not K={top_k}: mean router probabilities (softmax averages over "
                "all experts, like *_avg_dist.csv) say how much weight an expert got, not which K experts a token "
                "selected, so they are not incidence counts and are refused; if these are instead each expert's "
                "share of the K·T picks (counts / (K·T)), pass this flag",
            )
        incl = vals * top_k
        meta["quantity"] = "shares of the K·T picks (rows sum to 1), read as inclusion = share × K"
    else:
        if shares:
            raise ParameterError("shares", f"rows sum to ≈{np.median(sums):.3g}, not 1: not shares of picks")
        incl = vals
        meta["quantity"] = "inclusion frequency: fraction of tokens whose top-K holds the expert (rows sum to ≈ K)"
    if incl.max() > 1 + SUM_TOLERANCE or (sums > 0).any() and (incl.sum(axis=1) > top_k * (1 + SUM_TOLERANCE)).any():
        l = int(np.argmax(incl.sum(axis=1)))
        why = (
            f"frequencies up to {incl.max():.4g}, row sum {incl[l].sum():.4g}: an inclusion frequency is at most 1 "
            f"and a row sums to at most K={top_k}; are these counts, or is K wrong?"
        )
        raise InputError(src, f"layer {layer_ids[l]}", "value", why)
    return incl


def _matrix_frequency_counts(
    incl: np.ndarray, tokens: int | Sequence[int] | None, top_k: int, src: Path, meta: dict[str, Any], notes: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(counts, tokens per layer) of inclusion frequencies × the tokens T given; fills in ``meta`` and ``notes``."""
    if tokens is None:
        raise ParameterError(
            "tokens",
            f"{src} holds frequencies (rows sum to ≈{np.median(incl.sum(axis=1)):.4g}), not counts: give the number "
            "of tokens T they were averaged over (one, or one per layer). T becomes the histogram's sample size, "
            "so it sets the width of every bootstrap band computed from it",
        )
    tok = _tokens_per_layer(tokens, incl.shape[0])
    counts = _round_to_counts(np.clip(incl, 0.0, 1.0), tok, top_k)
    dev = np.abs(counts - incl * tok[:, None]).max()
    meta["tokens_user_given"] = True
    meta["tokens_note"] = (
        "T is not in the source: it was given at import. counts = round(frequency × T); T is the histogram's "
        "sample size and sets the width of the bootstrap bands of union and fit (they narrow as 1/√T: 4× T halves them)"
    )
    meta["frequency_row_sums"] = [float(incl.sum(axis=1).min()), float(incl.sum(axis=1).max())]
    meta["rounding_max_abs_count"] = float(dev)
    notes.append(
        f"frequencies × T = counts with T = {_fmt_tokens(tok.tolist())} tokens per layer, user-given: T is the "
        "sample size, so it sets the bootstrap band width of union and fit (4× T → bands half as wide)"
    )
    return counts, tok


def import_matrix(
    src: str | os.PathLike[str],
    *,
    top_k: int,
    layer_col: str | None = None,
    expert_prefix: str | None = None,
    filters: Sequence[tuple[str, str]] = (),
    tokens: int | Sequence[int] | None = None,
    kind: str = "auto",
    shares: bool = False,
    experts: int | None = None,
    model: str | None = None,
    command: str | None = None,
) -> ImportedHistogram:
    """A per-layer count or frequency matrix → histogram (see the module docstring).

    ``kind``: ``auto`` (counts when every value is an integer and the row sums are neither ≈ K
    nor ≈ 1), ``counts`` or ``frequency``. Frequencies need ``tokens`` (one T, or one per
    layer); ``shares=True`` reads rows summing to 1 as shares of the K·T picks.
    """
    src = Path(src)
    check_readable(src)
    _check_experts_top_k(experts, top_k, src)
    if kind not in ("auto", "counts", "frequency"):
        raise ParameterError("kind", f"expected auto, counts or frequency, got {kind!r}")
    vals, layer_ids, extra = _read_matrix(src, layer_col, expert_prefix, filters, experts)
    n_exp = vals.shape[1]
    _check_experts_top_k(n_exp, top_k, src)
    sums = vals.sum(axis=1)
    integer = bool(np.all(vals == np.round(vals)))
    near_k, near_1 = _isclose_all(sums, top_k), _isclose_all(sums, 1.0)
    if kind == "auto":
        kind = "frequency" if (not integer or near_k or near_1) else "counts"
    meta = _base_meta(src, "matrix", command, None)
    meta.update(extra)
    notes: list[str] = []
    if kind == "counts":
        counts, tok = _matrix_counts(vals, layer_ids, tokens, top_k, src, meta, notes)
    else:
        incl = _matrix_inclusion(vals, layer_ids, (near_k, near_1), shares, top_k, src, meta)
        counts, tok = _matrix_frequency_counts(incl, tokens, top_k, src, meta, notes)
    meta["kind_detected"] = kind
    tok_list = [int(t) for t in tok]
    return ImportedHistogram(
        counts, tok_list, int(n_exp), int(top_k), layer_ids, model, meta.pop("source"), meta, notes
    )


# ----------------------------------------------------------------------------- SGLang


def _load_torch(src: Path) -> Any:
    """``torch.load`` of a ``.pt`` file, weights only; torch is imported only here."""
    try:
        import torch
    except ImportError:
        why = "a .pt file needs torch to read (pip install torch), or save the arrays with numpy instead"
        raise InputError(src, "-", "file", why) from None
    try:
        return torch.load(src, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a bad or unsafe file
        raise InputError(
            src, "-", "file", f"not a torch file moeroof can read safely (weights_only load failed: {_torch_why(exc)})"
        ) from None


def _torch_why(exc: BaseException) -> str:
    """The one line of a ``torch.load`` error that says what is wrong. A weights-only refusal is
    several paragraphs (torch/_weights_only_unpickler.py's advice to retry unsafely among them):
    keep the unpickler's own reason, the first non-empty line after ``WeightsUnpickler error:``;
    otherwise the error's first line. Either cut at its first sentence (torch goes on with advice)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    for i, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:
            rest = line.split("WeightsUnpickler error:", 1)[1].strip()
            reason = rest or (lines[i + 1] if i + 1 < len(lines) else reason)
            break
    return reason.split(". ", 1)[0].rstrip(".")[:200]


def _np(x: Any) -> np.ndarray:
    """A tensor or array as numpy (torch tensors via .numpy(); bf16 widened to float32)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def _histogram_from_counts(
    counts: np.ndarray,
    layer_ids: list[int],
    top_k: int,
    src: Path,
    meta: dict[str, Any],
    model: str | None,
    notes: list[str],
) -> ImportedHistogram:
    """Per-layer incidence counts whose tokens are sum / K; layers that never fired are dropped."""
    sums = counts.sum(axis=1)
    keep = sums > 0
    if not keep.any():
        raise InputError(src, "-", "count", "every count is 0: nothing was recorded")
    if not keep.all():
        notes.append(f"dropped {int((~keep).sum())} layers with no counts (dense layers, or not recorded)")
    counts, sums = counts[keep], sums[keep]
    layer_ids = [lid for lid, k in zip(layer_ids, keep) if k]
    bad = sums % top_k != 0
    if bad.any():
        l = int(np.argmax(bad))
        raise InputError(
            src, f"layer {layer_ids[l]}", "count", f"counts sum to {sums[l]}, not a multiple of K={top_k}: is K right?"
        )
    meta["tokens_inferred"] = "counts' sum / top_k (the recorder adds 1 per selected expert)"
    tokens = [int(s // top_k) for s in sums]
    source = meta.pop("source")
    return ImportedHistogram(
        counts.astype(np.int64), tokens, int(counts.shape[1]), int(top_k), layer_ids, model, source, meta, notes
    )


def _sglang_stat(
    obj: Mapping[str, Any], src: Path, top_k: int, experts: int | None, meta: dict[str, Any], model: str | None
) -> ImportedHistogram:
    """The histogram of a stat dump: ``logical_count`` (passes, layers, experts) summed over passes."""
    arr = _np(obj["logical_count"])
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise InputError(src, "-", "logical_count", f"expected (passes, layers, experts), got shape {arr.shape}")
    if experts is not None and experts != arr.shape[2]:
        raise InputError(src, "-", "logical_count", f"{arr.shape[2]} logical experts but experts E={experts}")
    _check_experts_top_k(arr.shape[2], top_k, src)
    meta["sglang_mode"] = "stat"
    meta["forward_passes_buffered"] = int(arr.shape[0])
    counts = arr.sum(axis=0).astype(np.int64)
    return _histogram_from_counts(counts, list(range(counts.shape[0])), top_k, src, meta, model, [])


def _sglang_pass_ids(rec: Mapping[str, Any], i: int, src: Path, top_k: int, p2l: np.ndarray | None) -> np.ndarray:
    """The (layers, tokens, K) logical expert ids of record ``i`` (-1: no token)."""
    if "topk_ids_of_layer" not in rec:
        raise InputError(src, f"records[{i}]", "topk_ids_of_layer", "missing (a per_token or per_pass dump has it)")
    ids = _np(rec["topk_ids_of_layer"]).astype(np.int64)
    if ids.ndim != 3 or ids.shape[2] < top_k:
        raise InputError(src, f"records[{i}]", "topk_ids_of_layer", f"expected (layers, tokens, ≥K), got {ids.shape}")
    if (ids[:, :, top_k:] != -1).any():
        raise InputError(src, f"records[{i}]", "topk_ids_of_layer", f"tokens with more than K={top_k} ids: is K right?")
    ids = ids[:, :, :top_k]
    if p2l is None:
        return ids
    if p2l.shape[0] != ids.shape[0]:
        raise InputError(
            src, "-", "last_physical_to_logical_map", f"{p2l.shape[0]} layers, records have {ids.shape[0]}"
        )
    live = ids >= 0
    if (ids >= p2l.shape[1]).any():
        raise InputError(src, f"records[{i}]", "topk_ids_of_layer", f"physical id ≥ {p2l.shape[1]}")
    return np.where(
        live, np.take_along_axis(p2l, np.where(live, ids, 0).reshape(ids.shape[0], -1), axis=1).reshape(ids.shape), -1
    )


def _sglang_topk(per_pass: list[tuple[int, int, np.ndarray, Any]], n_exp: int, top_k: int, src: Path) -> np.ndarray:
    """The (passes, widest pass, layers, K) trace of the sorted passes' ids, -1 padded."""
    n_layers = per_pass[0][2].shape[0]
    width = max(r[2].shape[1] for r in per_pass)
    topk = np.full((len(per_pass), width, n_layers, top_k), -1, dtype=_id_dtype(n_exp))
    for s, (_, i, ids, _) in enumerate(per_pass):
        if ids.shape[0] != n_layers:
            raise InputError(
                src, f"records[{i}]", "topk_ids_of_layer", f"{ids.shape[0]} layers, the first had {n_layers}"
            )
        if ids.max() >= n_exp:
            raise InputError(src, f"records[{i}]", "topk_ids_of_layer", f"expert id {ids.max()} ≥ experts E={n_exp}")
        topk[s, : ids.shape[1]] = ids.transpose(1, 0, 2)
    return topk


def _sglang_per_token(
    obj: Mapping[str, Any], src: Path, top_k: int, experts: int | None, meta: dict[str, Any], model: str | None
) -> ImportedTrace:
    """The trace of a per-token dump: one step per forward pass, one stream per token row."""
    notes: list[str] = []
    records = list(obj["records"])
    if not records:
        raise InputError(src, "-", "records", "no forward pass recorded")
    p2l = _np(obj["last_physical_to_logical_map"]).astype(np.int64) if "last_physical_to_logical_map" in obj else None
    per_pass = []
    for i, rec in enumerate(records):
        ids = _sglang_pass_ids(rec, i, src, top_k, p2l)
        per_pass.append((int(rec.get("forward_pass_id", i)), i, ids, rec.get("forward_mode")))
    per_pass.sort(key=lambda r: (r[0], r[1]))
    n_exp = experts if experts is not None else int(max(r[2].max() for r in per_pass)) + 1
    _check_experts_top_k(n_exp, top_k, src)
    topk = _sglang_topk(per_pass, n_exp, top_k, src)
    live_layer = (topk[..., 0] >= 0).any(axis=(0, 1))
    if not live_layer.any():
        raise InputError(src, "-", "topk_ids_of_layer", "every id is -1: nothing was recorded")
    layer_ids = [int(l) for l in np.flatnonzero(live_layer)]
    if not live_layer.all():
        notes.append(f"dropped {int((~live_layer).sum())} layers without any routed token (dense layers)")
        topk = topk[:, :, live_layer]
    meta.update(
        {
            "experts": int(n_exp),
            "top_k": int(top_k),
            "layer_ids": layer_ids,
            "sglang_mode": "per_token",
            "axes_meaning": "step = forward pass (in forward_pass_id order), stream = token row of the pass",
            "physical_to_logical": p2l is not None,
        }
    )
    if model:
        meta["model"] = model
    modes = [r[3] for r in per_pass]
    if all(isinstance(m, (int, str)) for m in modes) and len(modes) <= MAX_KEYS_IN_META:
        meta["forward_modes"] = modes
    notes.append(
        f"{len(per_pass)} forward passes → steps; token rows → up to {topk.shape[1]} streams (a row is not a request: "
        "SGLang's dump does not name requests)"
    )
    return ImportedTrace(topk=topk, meta=meta, notes=notes)


def sglang_from_object(
    obj: Any,
    src: str | os.PathLike[str],
    *,
    top_k: int,
    experts: int | None = None,
    model: str | None = None,
    command: str | None = None,
) -> ImportedHistogram | ImportedTrace:
    """What SGLang's recorder dumped (the object ``torch.load`` returns, tensors or arrays)."""
    src = Path(src)
    meta = _base_meta(src, "sglang", command, None)
    if not isinstance(obj, Mapping):
        raise InputError(src, "-", "file", f"expected the recorder's dict, got {type(obj).__name__}")
    if "logical_count" in obj:
        return _sglang_stat(obj, src, top_k, experts, meta, model)
    if "records" in obj:
        return _sglang_per_token(obj, src, top_k, experts, meta, model)
    raise InputError(
        src, "-", "file", f"neither a stat dump (logical_count) nor a per-token dump (records); keys: {sorted(obj)[:8]}"
    )


def import_sglang(
    src: str | os.PathLike[str],
    *,
    top_k: int,
    experts: int | None = None,
    model: str | None = None,
    command: str | None = None,
) -> ImportedHistogram | ImportedTrace:
    """SGLang's expert-distribution recorder output (``.csv`` of v0.4, ``.pt`` of the current one)."""
    src = Path(src)
    check_readable(src)
    _check_experts_top_k(experts, top_k, src)
    if src.suffix.lower() == ".pt":
        return sglang_from_object(_load_torch(src), src, top_k=top_k, experts=experts, model=model, command=command)
    if src.suffix.lower() != ".csv":
        raise InputError(
            src, "-", "file", f"unknown suffix {src.suffix!r}: SGLang's recorder writes .csv (v0.4) or .pt"
        )
    names = ("layer_id", "expert_id", "count")
    frame, kind = _read_frame(src, names)
    if frame.empty:
        raise InputError(src, "-", "file", "no data rows")
    lay, eid, cnt = (_as_int(frame[name], src, kind, name) for name in names)  # each column read, then each checked
    for name, arr in zip(names, (lay, eid, cnt)):
        _refuse_first(arr < 0, frame, src, kind, name, "negative value {}", arr)
    if experts is None and int(eid.max()) >= MAX_EXPERTS:  # E from the ids: the row that would size it
        i = int(np.argmax(eid))
        why = f"expert id {eid[i]} is past the {MAX_EXPERTS:,} experts a model may have"
        raise InputError(src, _row_label(kind, int(frame.index[i])), "expert_id", why)
    n_exp = experts if experts is not None else int(eid.max()) + 1
    _refuse_first(eid >= n_exp, frame, src, kind, "expert_id", f"expert {{}} ≥ experts E={n_exp}", eid)
    _check_experts_top_k(n_exp, top_k, src)
    layer_ids, li = np.unique(lay, return_inverse=True)
    _, j, row, first = _first_repeat(li * n_exp + eid, frame.index, kind)
    if j is not None:
        raise InputError(src, row, "expert_id", f"a second row for this (layer, expert) (first at {first})")
    counts = np.zeros((len(layer_ids), n_exp), dtype=np.int64)
    counts[li, eid] = cnt
    meta = _base_meta(src, "sglang", command, None)
    meta["sglang_mode"] = "v0.4 csv (layer_id,expert_id,count)"
    notes = (
        [] if experts is not None else [f"experts E = {n_exp} = the largest id + 1 (give E if higher ids never fired)"]
    )
    return _histogram_from_counts(counts, [int(x) for x in layer_ids], top_k, src, meta, model, notes)


# ----------------------------------------------------------------------------- Hugging Face router logits


def hf_router_logits_from_arrays(
    layers: Sequence[Any],
    src: str | os.PathLike[str],
    *,
    top_k: int,
    batch: int | None = None,
    attention_mask: Any = None,
    model: str | None = None,
    command: str | None = None,
) -> ImportedTrace:
    """Per-layer router logits, each (tokens, E) or (batch, seq, E) → trace of each token's top-K."""
    src = Path(src)
    arrs = [_np(a) for a in layers]
    if not arrs:
        raise InputError(src, "-", "router_logits", "no layer")
    shape = arrs[0].shape
    for l, a in enumerate(arrs):
        if a.shape != shape:
            raise InputError(src, f"layer {l}", "router_logits", f"shape {a.shape} differs from layer 0's {shape}")
        if a.ndim not in (2, 3) or not np.issubdtype(a.dtype, np.floating):
            why = f"expected float (tokens, E) or (batch, seq, E), got {a.dtype} {a.shape}"
            raise InputError(src, f"layer {l}", "router_logits", why)
        if not np.isfinite(a).all():
            raise InputError(src, f"layer {l}", "router_logits", "NaN or infinite logit")
    n_exp = shape[-1]
    _check_experts_top_k(n_exp, top_k, src)
    if len(shape) == 2:
        n_tok = shape[0]
        b = 1 if batch is None else batch
        if b < 1 or n_tok % b:
            raise ParameterError("batch", f"{n_tok} token rows do not split into {b} sequences of equal length")
        arrs = [a.reshape(b, n_tok // b, n_exp) for a in arrs]
    elif batch is not None and batch != shape[0]:
        raise ParameterError("batch", f"the logits are (batch={shape[0]}, seq, E) already, not batch {batch}")
    bsz, seq = arrs[0].shape[:2]
    topk = np.empty((seq, bsz, len(arrs), top_k), dtype=_id_dtype(n_exp))
    for l, a in enumerate(arrs):
        # stable sort of the negated logits: the K largest, ties to the lower expert id
        idx = np.argsort(-a.astype(np.float64), axis=-1, kind="stable")[..., :top_k]
        topk[:, :, l, :] = idx.transpose(1, 0, 2)
    notes = [f"{len(arrs)} layers × {bsz} sequences × {seq} positions; each token's K largest logits"]
    if attention_mask is not None:
        mask = _np(attention_mask)
        if mask.shape != (bsz, seq):
            raise InputError(src, "-", "attention_mask", f"shape {mask.shape}, expected (batch, seq) = {(bsz, seq)}")
        topk[(mask == 0).T] = -1
        notes.append(f"{int((mask == 0).sum())} padded positions (attention_mask 0) → -1")
    meta = _base_meta(src, "hf-router-logits", command, model)
    meta.update(
        {
            "experts": int(n_exp),
            "top_k": int(top_k),
            "layer_ids": list(range(len(arrs))),
            "selection": "top-K of the router logits (= of the softmax); models with a routing bias or group limit select differently",
            "axes_meaning": "step = sequence position, stream = sequence of the batch",
        }
    )
    return ImportedTrace(topk=topk, meta=meta, notes=notes)


def import_hf_router_logits(
    src: str | os.PathLike[str],
    *,
    top_k: int,
    batch: int | None = None,
    model: str | None = None,
    command: str | None = None,
) -> ImportedTrace:
    """Saved ``output_router_logits`` (``.npy``, ``.npz`` or torch ``.pt``) → trace (module docstring)."""
    src = Path(src)
    check_readable(src)
    suffix = src.suffix.lower()
    mask = None
    if suffix in (".pt", ".pth"):
        obj = _load_torch(src)
        if isinstance(obj, Mapping):
            if "router_logits" not in obj:
                raise InputError(src, "-", "router_logits", f"missing (keys: {sorted(obj)[:8]})")
            mask = obj.get("attention_mask")
            obj = obj["router_logits"]
        layers = list(obj) if isinstance(obj, (list, tuple)) else list(_np(obj))
    elif suffix == ".npy":
        arr = _load_numpy(src)
        if arr.ndim not in (3, 4):
            raise InputError(
                src, "-", "router_logits", f"expected (layers, tokens, E) or (layers, batch, seq, E), got {arr.shape}"
            )
        layers = list(arr)
    elif suffix == ".npz":
        arrays = _load_numpy(src)
        mask = arrays.pop("attention_mask", None)
        keys = sorted(arrays, key=_nat_key)
        if not keys:
            raise InputError(src, "-", "router_logits", "no array in the file")
        if len(keys) == 1:  # one array: the layers stacked first, (L, tokens, E) or (L, batch, seq, E)
            arr = arrays[keys[0]]
            if arr.ndim not in (3, 4):
                raise InputError(
                    src, "-", keys[0], f"one array must stack the layers first (3 or 4 dims), got {arr.shape}"
                )
            layers = list(arr)
        else:
            layers = [arrays[k] for k in keys]
    else:
        raise InputError(src, "-", "file", f"unknown suffix {src.suffix!r}: expected .npy, .npz or .pt")
    return hf_router_logits_from_arrays(
        layers, src, top_k=top_k, batch=batch, attention_mask=mask, model=model, command=command
    )


# ----------------------------------------------------------------------------- writing


def write_imported(
    out: str | os.PathLike[str], data: ImportedTrace | ImportedHistogram, *, overwrite: bool = False
) -> Path:
    """Write an import: a trace to ``.npz``/``.npy``, a histogram to ``.csv``; a trace written to
    ``.csv`` becomes its histogram (incidence counts, tokens per layer). Atomic; refuses to
    replace an existing file unless ``overwrite`` (raises FileExistsError)."""
    out = Path(out)
    suffix = out.suffix.lower()
    provenance: str | None = "witnessed"
    if isinstance(data, ImportedTrace):
        if suffix in (".npz", ".npy"):
            return write_trace(out, data.topk, data.meta, overwrite=overwrite)
        if suffix != ".csv":
            raise ParameterError("out", f"{out}: expected .npz or .npy (trace) or .csv (histogram)")
        provenance = data.meta.get("provenance")
        data = _trace_histogram(out, data)
    elif suffix != ".csv":
        raise ParameterError(
            "out", f"{out}: this import is a histogram (per-layer counts, no token order): write it as .csv"
        )
    # the histogram's fields that are write_histogram's keywords of the same name
    same = {key: getattr(data, key) for key in ("tokens", "experts", "top_k", "source", "layer_ids", "extra")}
    return write_histogram(
        out, data.counts, model=data.model or UNKNOWN_MODEL, provenance=provenance, overwrite=overwrite, **same
    )


def _trace_histogram(out: Path, data: ImportedTrace) -> ImportedHistogram:
    """An imported trace as its histogram (incidence counts of the live tokens, tokens per layer),
    refusing a layer without any live token (its T would be 0)."""
    meta = data.meta
    experts, top_k, layer_ids = int(meta["experts"]), int(meta["top_k"]), meta["layer_ids"]
    counts, tokens = trace_counts(data.topk, experts)
    if not tokens.any():
        raise ValueError(f"{out}: the import holds no live token")
    if not tokens.all():
        l = int(np.argmin(tokens))
        raise ValueError(f"{out}: layer {layer_ids[l]} has no live token, so it cannot be a histogram layer")
    dropped = ("experts", "top_k", "layer_ids", "model", "source", "provenance", "tokens")
    keep = {k: v for k, v in meta.items() if k not in dropped}
    keep["counted_from"] = "the imported trace's live tokens (incidence: each of a token's K experts once)"
    tok = [int(t) for t in tokens]
    return ImportedHistogram(counts, tok, experts, top_k, layer_ids, meta.get("model"), meta["source"], keep)


def _load_numpy(src: Path) -> Any:
    """A ``.npy``'s array, or a ``.npz``'s arrays by name; no pickles (an :class:`InputError` otherwise)."""
    from moeroof.data.safe_read import load_npy

    suffix = src.suffix.lower()
    try:
        if suffix == ".npz":
            # every member's header against its stored bytes and the memory available, and no
            # zip bomb, before a member is inflated (as read_trace does)
            check_npz_members(src)
            with np.load(src, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        # the header's shape against the file's bytes before anything is allocated (a 200-byte
        # .npy declaring 2^40 floats was numpy's "Unable to allocate 4.00 TiB", no file named)
        return load_npy(src)
    except InputError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(src, "-", "file", f"not a readable {suffix} without pickles: {exc}") from None


def _nat_key(text: str) -> list[Any]:
    """Natural order: ``arr_2`` before ``arr_10``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _isclose_all(values: np.ndarray, target: float) -> bool:
    return bool(np.all(np.abs(values - target) <= SUM_TOLERANCE * max(1.0, target)))


def _fmt_tokens(tokens: Sequence[int]) -> str:
    lo, hi = min(tokens), max(tokens)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"
