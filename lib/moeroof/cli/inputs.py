"""The ``moeroof`` subcommands' input files: where a path is looked up, a TRACE or HISTOGRAM
argument read, and the meta a file without it takes from the flags."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.cli.flags import EXPERTS, TOKENS, TOP_K, UsageError

# input_path: a user's input file, from the working directory when it is there, else under the
# suite's data/ (embedded names such as histograms/deepseek-v3-like.csv); a file in neither is an
# error naming both places
from moeroof.core.paths import resolve_data as input_path
from moeroof.data.io import InputError, Trace

__all__ = ["META_FLAGS", "read_routing_knobs", "input_path", "read_trace_arg", "add_meta_arguments", "load_input"]


def read_trace_arg(path_text: str, args: Any = None, *, lazy: bool = False, check_ids: bool = True) -> Trace:
    """A TRACE argument: a histogram ``.csv`` is refused by name before anything is read; a trace
    without its meta takes it from ``--experts``/``--top-k`` (:func:`add_meta_arguments`).

    ``lazy``: a ``.npy`` / ``.npz`` that carries its own meta (no meta flag given) is read with
    ``read_trace(lazy=True)``: a ``.npy``'s ids are read from the file a block of steps at a
    time, never held whole (the cache, mrc and union models go through a trace by blocks of
    steps). ``check_ids=False`` also leaves out that read's pass over the ids
    (``Trace.ids_checked`` False): for a command that builds its requests with
    :func:`moeroof.cli.cache.trace_requests`, whose compiled pass checks every id as ``read_trace`` would."""
    from moeroof.data.io import npz_has_meta, read_trace, sidecar_path

    path = Path(path_text)
    if path.suffix.lower() != ".csv":
        path = input_path(path_text)
    if path.suffix.lower() == ".csv":
        if getattr(args, "command", None) == "histogram":
            why = "it is a histogram already (union, fit, split and plan --routing read it as it is)"
        else:
            why = (
                "a histogram holds each layer's expert counts but no token order; to replay its popularity, "
                f"draw a trace from it: moeroof trace --routing {path_text} --streams M --steps T -o OUT.npz "
                "(independent tokens unless --rho/--locality/--step-context), then pass OUT.npz"
            )
        raise InputError(path, "-", "file", f"expected a trace .npz / .npy / .parquet, got a histogram .csv: {why}")
    if path.suffix.lower() == ".parquet":  # its meta is in its schema: no sidecar, no flags
        from moeroof.data.trace_parquet import read_parquet_trace

        return read_parquet_trace(path)
    suffix = path.suffix.lower()
    if lazy and all(getattr(args, f, None) is None for f in META_FLAGS):
        if suffix == ".npy" and sidecar_path(path).is_file() or suffix == ".npz" and npz_has_meta(path) is True:
            return read_trace(path, validate=check_ids, lazy=True)
    return read_trace(path, meta=_meta_from_flags(path, args))


#: the flags of :func:`add_meta_arguments`, as the parsed arguments name them
META_FLAGS = ("experts", "top_k", "tokens", "provenance")


def add_meta_arguments(p: Any) -> None:
    """``--experts``, ``--top-k``, ``--tokens``, ``--provenance``: what a sidecar would hold, for
    an input that has none (a sidecar that is there wins, and flags that contradict it are an error)."""
    g = p.add_argument_group("an input without its sidecar / meta (what the sidecar would hold)")
    g.add_argument("--experts", type=EXPERTS, help="routed experts per layer (E)")
    g.add_argument("--top-k", type=TOP_K, help="experts per token (K)")
    g.add_argument(
        "--tokens",
        type=TOKENS,
        help="histogram: routed tokens per layer (default: each layer's count sum / K, exact for incidence counts)",
    )
    g.add_argument("--provenance", help="witnessed, projected, assumed or synthetic (default: unknown)")


def load_input(path_text: str, args: Any = None) -> Any:
    """A HISTOGRAM or TRACE argument (:func:`moeroof.data.io.load_any`), its meta from the flags
    of :func:`add_meta_arguments` when the file has none."""
    from moeroof.data.io import load_any, read_histogram, read_trace

    path = input_path(path_text)
    if path.suffix.lower() == ".parquet":
        return read_trace_arg(path_text, args)
    meta = _meta_from_flags(path, args)
    if meta is None:
        return load_any(path)
    return read_histogram(path, meta=meta) if path.suffix.lower() == ".csv" else read_trace(path, meta=meta)


def _has_meta(path: Path) -> bool:
    """Whether the file carries its own meta (sidecar ``.json``, or an ``.npz``'s ``meta`` member)."""
    from moeroof.data.io import npz_has_meta, sidecar_path

    if path.suffix.lower() == ".npz":
        return npz_has_meta(path) is not False  # unreadable (None): the reader reports it in its own words
    return sidecar_path(path).exists()


def _meta_from_flags(path: Path, args: Any) -> dict[str, Any] | None:
    """The meta the flags give for ``path``, or None when the file has its own (or no flag is given).

    With the file's own meta present, a flag that disagrees with it is an error rather than a
    silent override: the sidecar describes the capture, the flag is a guess about it."""
    experts, top_k, tokens, provenance = (getattr(args, f, None) for f in META_FLAGS)
    if experts is None and top_k is None and tokens is None and provenance is None:
        suffix = path.suffix.lower()
        if args is not None and suffix in (".csv", ".npy", ".npz") and path.is_file() and not _has_meta(path):
            what = "sidecar JSON beside it" if suffix != ".npz" else "meta array inside it"
            raise UsageError(
                f"{path}: no {what}: give what it would hold with --experts E --top-k K "
                "(and --tokens, --provenance), or write the file with `moeroof import …` / `moeroof histogram`"
            )
        return None
    if not path.exists() or _has_meta(path):
        if path.exists() and (experts is not None or top_k is not None):
            from moeroof.data.io import load_any

            data = load_any(path)
            for flag, given, own in (("--experts", experts, data.experts), ("--top-k", top_k, data.top_k)):
                if given is not None and given != own:
                    raise UsageError(f"{flag} {given} disagrees with {path}'s own meta ({own}); leave the flag out")
        return None
    if experts is None or top_k is None:
        raise UsageError(f"{path} has no sidecar/meta: give at least --experts and --top-k (what it would hold)")
    meta: dict[str, Any] = dict(model=path.stem, experts=experts, top_k=top_k)
    meta["source"] = f"{path} (meta from the command line)"
    if provenance is not None:
        meta["provenance"] = provenance
    if path.suffix.lower() != ".csv":
        return meta
    import pandas as pd

    try:
        frame = pd.read_csv(path, usecols=["layer", "count"])
        layer = pd.to_numeric(frame["layer"], errors="raise").astype(np.int64)
        count = pd.to_numeric(frame["count"], errors="raise").astype(np.int64)
    except (ValueError, KeyError, OSError) as err:
        raise InputError(path, "-", "file", f"cannot read its layer and count columns ({err})") from None
    sums = count.groupby(layer).sum().sort_index()
    meta.update(layer_ids=[int(v) for v in sums.index], layers_summed=False)
    if tokens is not None:
        meta["tokens"] = tokens
    else:
        k = meta["top_k"]
        bad = [int(lay) for lay, total in sums.items() if total % k]
        if bad:
            raise UsageError(
                f"{path}: the counts of layer {bad[0]} do not divide by K = {k}, so they are not "
                "incidence counts of whole tokens; give --tokens"
            )
        meta["tokens"] = [max(1, int(total) // k) for total in sums.to_numpy()]
    return meta


def read_routing_knobs(path_text: str) -> tuple[str, float, float, float]:
    """``--routing-knobs FILE``: a ``moeroof fit-routing --json`` result, as ``(family, skew, rho,
    c)`` for :func:`moeroof.models.local_routing.routing_from_knobs` (c = inf: no locality)."""
    path = input_path(path_text)
    from moeroof.core.input_files import NotRegularFileError, read_input_bytes
    from moeroof.core.limits import MAX_JSON_BYTES, LongNumberError, check_document, parse_json

    def refused(why: object) -> UsageError:
        return UsageError(f"--routing-knobs: {path}: {why}")

    try:
        text = read_input_bytes(path, MAX_JSON_BYTES).decode("utf-8")  # a FIFO refused, never waited on
        check_document(text, "the JSON", max_bytes=MAX_JSON_BYTES)
        doc = parse_json(text)
    except FileNotFoundError:
        raise refused("no such file") from None
    except NotRegularFileError as err:
        raise refused(err) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise refused(f"not a JSON file ({err})") from None
    except LongNumberError as err:  # a number no knob needs, named by its key
        raise refused(f"{err.key}: {err}") from None
    except ValueError as err:  # check_document, unique_keys
        raise refused(err) from None
    if not isinstance(doc, dict):
        raise refused(f"expected a JSON object (moeroof fit-routing --json), got {type(doc).__name__}")

    def value(name: str, default: float) -> float:
        v = (doc.get("knobs") or {}).get(name, default)
        v = v.get("value", default) if isinstance(v, dict) else v
        try:
            return float(v if v is not None else default)
        except (TypeError, ValueError):
            raise refused(f"knob {name!r} is not a number") from None

    family = doc.get("family")
    if family not in ("zipf", "dirichlet"):
        raise refused(f"family must be zipf or dirichlet, got {family!r}")
    c = value("locality_c", value("c", math.inf))
    return family, value("skew", 0.8), value("rho", 0.0), c if c > 0 else math.inf
