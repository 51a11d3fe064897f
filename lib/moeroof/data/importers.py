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

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.core.errors import ParameterError
from moeroof.data.io import InputError, write_histogram, write_trace

__all__ = [
    "ImportedTrace",
    "ImportedHistogram",
    "MAX_KEYS_IN_META",
    "MAX_TRACE_CELLS",
    "parse_columns",
    "parse_filters",
    "import_table",
    "trace_counts",
    "write_imported",
]

#: original stream / step keys kept in the meta up to this many (beyond it: the count and ends)
MAX_KEYS_IN_META = 10_000
#: a dense trace larger than this many ids is refused (steps × streams × layers × K)
MAX_TRACE_CELLS = 2_000_000_000
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
    meta: dict[str, Any] = {
        "source": str(src.resolve()),
        "provenance": "witnessed",
        "imported_from": fmt,
    }
    if command:
        meta["import_command"] = command
    if model:
        meta["model"] = model
    return meta


def _check_src(src: Path) -> None:
    if not src.exists():
        raise InputError(src, "-", "file", "no such file")
    if not src.is_file():
        raise InputError(src, "-", "file", "not a regular file")


def _check_experts_top_k(experts: int | None, top_k: int, src: Path) -> None:
    if experts is not None and experts < 1:
        raise InputError(src, "-", "experts", f"expected a positive integer, got {experts}")
    if top_k < 1:
        raise InputError(src, "-", "top_k", f"expected a positive integer, got {top_k}")
    if experts is not None and top_k > experts:
        raise InputError(src, "-", "top_k", f"top_k K={top_k} exceeds experts E={experts}")


def _id_dtype(experts: int) -> np.dtype:
    return np.dtype(np.int16) if experts <= np.iinfo(np.int16).max else np.dtype(np.int32)


def trace_counts(topk: np.ndarray, experts: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts (L, E), tokens (L,)) of a (steps, streams, layers, K) id array; ``-1`` skipped.

    A token counts each of its K distinct experts once (incidence); tokens per layer are the
    (step, stream) cells with a live token in that layer.
    """
    n_layers = topk.shape[2]
    counts = np.zeros((n_layers, experts), dtype=np.int64)
    tokens = np.zeros(n_layers, dtype=np.int64)
    for l in range(n_layers):
        ids = np.asarray(topk[:, :, l, :])
        live = ids[..., 0] >= 0
        tokens[l] = int(live.sum())
        flat = ids[live].ravel().astype(np.int64)
        counts[l] = np.bincount(flat, minlength=experts)[:experts]
    return counts, tokens


def _keys_for_meta(keys: Sequence[Any]) -> dict[str, Any]:
    keys = [str(k) for k in keys]
    if len(keys) <= MAX_KEYS_IN_META:
        return {"count": len(keys), "keys": keys}
    return {"count": len(keys), "first": keys[0], "last": keys[-1], "keys_omitted": True}


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


def _read_frame(src: Path, columns: Sequence[str]) -> tuple[Any, str]:
    """The named columns of a CSV or Parquet file as text; (frame, row kind: 'csv' | 'parquet')."""
    import pandas as pd

    suffix = src.suffix.lower()
    wanted = list(dict.fromkeys(columns))
    if suffix in (".parquet", ".pq"):
        try:
            import pyarrow  # noqa: F401  (pandas' Parquet engine)
        except ImportError:
            raise InputError(
                src, "-", "file", "reading Parquet needs pyarrow (pip install pyarrow), or convert the table to CSV"
            ) from None
        try:
            import pyarrow.parquet as pq

            have = list(pq.read_schema(src).names)
        except Exception as exc:  # pyarrow raises its own error types for a bad file
            raise InputError(src, "-", "file", f"not a readable Parquet file: {exc}") from None
        missing = [c for c in wanted if c not in have]
        if missing:
            raise InputError(src, "-", missing[0], f"no such column (has: {', '.join(have)})")
        frame = pd.read_parquet(src, columns=wanted)
        return frame.astype(str).where(frame.notna(), ""), "parquet"
    try:
        with open(src, encoding="utf-8", newline="") as fh:  # read-only
            header_line = fh.readline()
    except UnicodeDecodeError as exc:
        raise InputError(src, 1, "header", f"not UTF-8 text: {exc}") from None
    import csv

    header = next(csv.reader([header_line]), [])
    have = [h.strip() for h in header]
    if not have or not any(have):
        raise InputError(src, 1, "header", "empty file or empty header line")
    missing = [c for c in wanted if c not in have]
    if missing:
        raise InputError(src, 1, missing[0], f"no such column (header has: {', '.join(have)})")
    # Read only the named columns, all as text (ids are checked as integers below, keys stay
    # as the user wrote them); blank lines are skipped by pandas, so line numbers come from a
    # second, cheap pass only when the file has blank lines (see _line_numbers).
    try:
        frame = pd.read_csv(
            src,
            usecols=lambda c: c.strip() in wanted,
            dtype=str,
            keep_default_na=False,
            skip_blank_lines=False,
            encoding="utf-8",
        )
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise InputError(src, "-", "file", f"not a readable CSV table: {exc}") from None
    frame.columns = [c.strip() for c in frame.columns]
    # skip_blank_lines=False keeps a blank line as an all-empty row, so index + 2 is the line
    blank = (frame == "").all(axis=1)
    frame = frame[~blank]
    return frame, "csv"


def _row_label(kind: str, index: int) -> int | str:
    """What the user sees: a CSV line (header = 1) or a Parquet row (1-based)."""
    return index + 2 if kind == "csv" else f"row {index + 1}"


def _as_int(series: Any, src: Path, kind: str, name: str, allow_empty: bool = False) -> np.ndarray:
    """Integer values of a text column, vectorised; the first bad cell named by its row."""
    import pandas as pd

    text = series.astype(str).str.strip()
    if allow_empty:
        text = text.where(text != "", "-1")
    num = pd.to_numeric(text, errors="coerce")
    bad = num.isna() | (num != np.floor(num.fillna(0)))
    if bad.any():
        i = int(np.argmax(bad.to_numpy()))
        raise InputError(
            src, _row_label(kind, int(series.index[i])), name, f"expected an integer, got {series.iloc[i]!r}"
        )
    return num.to_numpy(dtype=np.float64).astype(np.int64)


def _dense_codes(frame: Any, cols: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Dense codes 0..n-1 of the key made of ``cols`` in sorted key order, and the keys as text.

    A column whose every value is a number sorts numerically (``2 < 10``), others as text; a
    joined key prints as ``a:b``.
    """
    import pandas as pd

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
        if isinstance(v, float) and v.is_integer():
            return str(int(v))
        return str(v)

    labels = [":".join(fmt(v) for v in row) for row in uniq[list(cols)].itertuples(index=False, name=None)]
    return codes, labels


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
    _check_src(src)
    _check_experts_top_k(experts, top_k, src)
    wide = expert_cols is not None
    if wide == (expert_col is not None) or (expert_col is None) != (slot_col is None):
        raise ParameterError(
            "expert_cols",
            "give either expert_cols (wide: one row per token) or expert_col and slot_col (long: one row per slot)",
        )
    if wide and len(expert_cols) != top_k:
        raise ParameterError("expert_cols", f"{len(expert_cols)} columns but top_k K={top_k} (one column per slot)")
    for role in ("stream", "step"):
        if role not in columns:
            raise ParameterError("columns", f"missing {role}=COL")
    layer_cols = list(columns.get("layer", ()))
    id_cols = list(expert_cols) if wide else [expert_col, slot_col]
    needed = [*columns["stream"], *columns["step"], *layer_cols, *id_cols, *(c for c, _ in filters)]
    frame, kind = _read_frame(src, needed)
    n_read = len(frame)
    for col, value in filters:
        frame = frame[frame[col].astype(str).str.strip() == value]
    if frame.empty:
        what = f" after --filter {' '.join(f'{c}={v}' for c, v in filters)}" if filters else ""
        raise InputError(src, "-", "file", f"no data rows{what} ({n_read} rows read)")

    if wide:
        ids = np.stack([_as_int(frame[c], src, kind, c, allow_empty=True) for c in expert_cols], axis=1)
        keep = ~(ids == -1).all(axis=1)  # a padding row (all slots empty or -1) is no token
        frame, ids = frame[keep], ids[keep]
        row_index = frame.index.to_numpy()
    else:
        eid = _as_int(frame[expert_col], src, kind, expert_col, allow_empty=True)
        slot = _as_int(frame[slot_col], src, kind, slot_col)
        bad = (slot < 0) | (slot >= top_k)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(
                src,
                _row_label(kind, int(frame.index[i])),
                slot_col,
                f"slot {slot[i]} not in 0..{top_k - 1} (K={top_k})",
            )
    if frame.empty:
        raise InputError(src, "-", "file", "every row is padding (all expert ids -1 or empty)")

    stream_code, stream_keys = _dense_codes(frame, columns["stream"])
    step_code, step_keys = _dense_codes(frame, columns["step"])
    if layer_cols:
        if len(layer_cols) != 1:
            raise ParameterError("columns", "layer takes one column (a layer id)")
        lay = _as_int(frame[layer_cols[0]], src, kind, layer_cols[0])
        if (lay < 0).any():
            i = int(np.argmax(lay < 0))
            raise InputError(src, _row_label(kind, int(frame.index[i])), layer_cols[0], f"negative layer id {lay[i]}")
        layer_ids, layer_code = np.unique(lay, return_inverse=True)
    else:
        layer_ids, layer_code = np.array([0]), np.zeros(len(frame), dtype=np.int64)
    n_steps, n_streams, n_layers = len(step_keys), len(stream_keys), len(layer_ids)
    cells = n_steps * n_streams * n_layers * top_k
    if cells > MAX_TRACE_CELLS:
        raise InputError(
            src,
            "-",
            "file",
            f"the dense trace would hold {n_steps} steps × {n_streams} streams × {n_layers} layers × K={top_k} "
            f"= {cells:,} ids (limit {MAX_TRACE_CELLS:,}): are stream and step the right columns?",
        )
    cell = (step_code * n_streams + stream_code) * n_layers + layer_code  # one token cell per row

    if not wide:
        # long → wide: one row per (cell, slot); every cell needs each of its K slots once
        order = np.lexsort((slot, cell))
        c_sorted, s_sorted = cell[order], slot[order]
        dup = (c_sorted[1:] == c_sorted[:-1]) & (s_sorted[1:] == s_sorted[:-1])
        if dup.any():
            j = int(np.argmax(dup))
            first, second = sorted((int(frame.index[order[j]]), int(frame.index[order[j + 1]])))
            raise InputError(
                src,
                _row_label(kind, second),
                slot_col,
                f"slot {s_sorted[j]} of this token given twice (first at {_row_label(kind, first)})",
            )
        uniq_cells, start, count = np.unique(c_sorted, return_index=True, return_counts=True)
        short = count != top_k
        if short.any():
            j = int(np.argmax(short))
            r = int(frame.index[order[start[j]]])
            raise InputError(
                src,
                _row_label(kind, r),
                slot_col,
                f"this token has {count[j]} of its K={top_k} slots (each token needs rows for slots 0..{top_k - 1})",
            )
        ids = eid[order].reshape(len(uniq_cells), top_k)
        row_index = frame.index.to_numpy()[order[start]]
        cell = uniq_cells

    # every token: K ids in [0, E), distinct, not partly padding
    bad = (ids < 0) | (ids >= experts)
    if bad.any():
        t, k = np.argwhere(bad)[0]
        name = expert_cols[k] if wide else expert_col
        what = "padding (-1/empty) in a token that has other ids" if ids[t, k] == -1 else f"expert id {ids[t, k]}"
        raise InputError(src, _row_label(kind, int(row_index[t])), name, f"{what} not in [0, {experts}) (E={experts})")
    if top_k > 1:
        srt = np.sort(ids, axis=1)
        dup = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
        if dup.any():
            t = int(np.argmax(dup))
            row = ids[t]
            k = next(j for j in range(1, top_k) if row[j] in row[:j])
            name = expert_cols[k] if wide else expert_col
            raise InputError(
                src,
                _row_label(kind, int(row_index[t])),
                name,
                f"expert {row[k]} twice in one token (K ids must be distinct)",
            )
    order = np.argsort(cell, kind="stable")
    c_sorted = cell[order]
    dup = c_sorted[1:] == c_sorted[:-1]
    if dup.any():
        j = int(np.argmax(dup))
        first, second = sorted((int(row_index[order[j]]), int(row_index[order[j + 1]])))
        s, rem = divmod(int(c_sorted[j]), n_streams * n_layers)
        t, l = divmod(rem, n_layers)
        raise InputError(
            src,
            _row_label(kind, second),
            "+".join(columns["step"]),
            f"a second token for stream {stream_keys[t]}, step {step_keys[s]}, layer {int(layer_ids[l])} "
            f"(first at {_row_label(kind, first)}): are stream and step the right columns?",
        )
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


# ----------------------------------------------------------------------------- writing


def write_imported(
    out: str | os.PathLike[str], data: ImportedTrace | ImportedHistogram, *, overwrite: bool = False
) -> Path:
    """Write an import: a trace to ``.npz``/``.npy``, a histogram to ``.csv``; a trace written to
    ``.csv`` becomes its histogram (incidence counts, tokens per layer). Atomic; refuses to
    replace an existing file unless ``overwrite`` (raises FileExistsError)."""
    out = Path(out)
    suffix = out.suffix.lower()
    if isinstance(data, ImportedTrace):
        if suffix in (".npz", ".npy"):
            return write_trace(out, data.topk, data.meta, overwrite=overwrite)
        if suffix == ".csv":
            counts, tokens = trace_counts(data.topk, int(data.meta["experts"]))
            if not tokens.any():
                raise ValueError(f"{out}: the import holds no live token")
            meta = dict(data.meta)
            keep = {
                k: v
                for k, v in meta.items()
                if k not in ("experts", "top_k", "layer_ids", "model", "source", "provenance", "tokens")
            }
            keep["counted_from"] = "the imported trace's live tokens (incidence: each of a token's K experts once)"
            return write_histogram(
                out,
                counts,
                tokens=_live_tokens(out, tokens, meta),
                experts=int(meta["experts"]),
                top_k=int(meta["top_k"]),
                model=meta.get("model") or UNKNOWN_MODEL,
                source=meta["source"],
                layer_ids=meta["layer_ids"],
                provenance=meta.get("provenance"),
                extra=keep,
                overwrite=overwrite,
            )
        raise ParameterError("out", f"{out}: expected .npz or .npy (trace) or .csv (histogram)")
    if suffix != ".csv":
        raise ParameterError(
            "out", f"{out}: this import is a histogram (per-layer counts, no token order): write it as .csv"
        )
    return write_histogram(
        out,
        data.counts,
        tokens=data.tokens,
        experts=data.experts,
        top_k=data.top_k,
        model=data.model or UNKNOWN_MODEL,
        source=data.source,
        layer_ids=data.layer_ids,
        provenance="witnessed",
        extra=data.extra,
        overwrite=overwrite,
    )


def _live_tokens(out: Path, tokens: np.ndarray, meta: Mapping[str, Any]) -> list[int]:
    """Tokens per layer for a histogram, refusing a layer without any (its T would be 0)."""
    if not tokens.all():
        l = int(np.argmin(tokens))
        raise ValueError(f"{out}: layer {meta['layer_ids'][l]} has no live token, so it cannot be a histogram layer")
    return [int(t) for t in tokens]


def _nat_key(text: str) -> list[Any]:
    """Natural order: ``arr_2`` before ``arr_10``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _isclose_all(values: np.ndarray, target: float) -> bool:
    return bool(np.all(np.abs(values - target) <= SUM_TOLERANCE * max(1.0, target)))


def _fmt_tokens(tokens: Sequence[int]) -> str:
    lo, hi = min(tokens), max(tokens)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"
