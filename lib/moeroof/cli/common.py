"""Shared pieces of the ``moeroof`` subcommands: the usage error, flag-value parsers, and the
JSON / table emitters.

Every flag value arrives as text and is parsed here, so that a bad value reads
``error: --flag: what is wrong`` (:class:`UsageError`, exit 2 in :mod:`moeroof.cli.app`).
This module imports only numpy and :mod:`moeroof.data.io`; a subcommand imports its library
modules inside its own functions.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.data.io import InputError, Trace

__all__ = [
    "check_output_file",
    "check_report_target",
    "REPORT_OUTPUT_HELP",
    "add_meta_arguments",
    "load_input",
    "Progress",
    "FORMATS",
    "add_output_arguments",
    "csv_columns",
    "dumps",
    "output_format",
    "BATCH_HELP",
    "CACHE_POLICIES",
    "input_path",
    "EXIT_INTERRUPTED",
    "PARTITIONS",
    "READ_PATHS",
    "add_step_arguments",
    "step_options",
    "UsageError",
    "emit",
    "fmt",
    "interrupted",
    "jsonable",
    "non_negative_float",
    "non_negative_int",
    "parse_batch",
    "positive_float",
    "positive_int",
    "parse_rank_speed",
    "read_trace_arg",
    "resolve_auto_cache",
    "routing_knobs_arg",
    "table",
]

EXIT_INTERRUPTED = 130

# How `calibrate` and `bench` bypass the page cache: moeroof.witness.measure.READ_PATHS, spelled
# out here so that building the parser imports no measurement code (tests check they agree).
READ_PATHS = ("auto", "o_direct", "fadvise")


# The step model's choices (moeroof.models.expert_cache.POLICIES, moeroof.models.plan.PARTITIONS),
# spelled out so that building the parser imports no model code (tests check they agree).
CACHE_POLICIES = ("lru", "lfu", "lfu-perfect", "s3fifo", "arc", "belady", "belady-insert", "static")
PARTITIONS = ("id", "lpt", "weighted", "bytes")


class UsageError(ValueError):
    """A bad flag value; printed as ``error: <message>``."""


# ----------------------------------------------------------------------------- flag values


def start_cache_kernels() -> None:
    """Before ``cache`` / ``mrc`` simulate: load the C kernels (built on first use); where they
    cannot load, start numba without its BLAS probe (:mod:`moeroof.core.numba_start`: these
    commands' compiled work is the suite's own kernels, no BLAS)."""
    from moeroof.models import cache_native

    if cache_native.library() is None:
        from moeroof.core.numba_start import skip_blas_probe

        skip_blas_probe()


def positive_int(text: str, flag: str) -> int:
    t = text.strip()
    if not t.lstrip("+").isdigit() or int(t) < 1:
        raise UsageError(f"{flag}: {text!r} is not a positive integer")
    return int(t)


def non_negative_int(text: str, flag: str) -> int:
    t = text.strip()
    if not t.lstrip("+").isdigit():
        raise UsageError(f"{flag}: {text!r} is not a non-negative integer")
    return int(t)


def non_negative_float(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{flag}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag}: must be a finite number >= 0, got {text!r}")
    return value


def positive_float(text: str, flag: str) -> float:
    value = non_negative_float(text, flag)
    if value <= 0:
        raise UsageError(f"{flag}: must be > 0, got {text!r}")
    return value


def replicates(text: str, flag: str) -> int:
    """A count of replicates, draws or simulations: an integer in 0 … MAX_REPLICATES."""
    from moeroof.core.limits import MAX_REPLICATES

    n = non_negative_int(text, flag)
    if n > MAX_REPLICATES:
        raise UsageError(f"{flag}: {n} is more than the {MAX_REPLICATES} allowed")
    return n


def check_replicate_memory(flag: str, count: int, per_replicate: int, what: str) -> None:
    """Refuse ``flag``'s ``count`` replicates of ``per_replicate`` 8-byte entries (``what``
    names one replicate in the user's terms) when they would not fit in available memory."""
    from moeroof.core.limits import check_allocation

    try:
        check_allocation(int(count) * int(per_replicate), 8, f"{count} × {what}", limit=None)
    except ValueError as err:
        raise UsageError(f"{flag}: {err}") from None


def byte_size(text: str, flag: str) -> float:
    """A size in bytes: finite and at least 1 (``1e-300`` bytes per expert would make a
    capacity of 1 GiB hold 10^309 experts)."""
    value = non_negative_float(text, flag)
    if value < 1:
        raise UsageError(f"{flag}: a size in bytes must be at least 1, got {text!r}")
    return value


def scaled(value: float, factor: float, flag: str, unit: str) -> float:
    """``value × factor`` (a unit conversion of a flag's value), refused when it overflows."""
    out = value * factor
    if not math.isfinite(out):
        raise UsageError(f"{flag}: {value:g} {unit} is too large to compute with")
    return out


#: the most batch sizes one --batch may expand to
MAX_BATCH_SIZES = 10_000

BATCH_HELP = (
    "batch sizes: a list (1,8,64), a doubling span LO-HI (1-64 = 1,2,4,…,64: the powers of two between, "
    "LO and HI included; 3-20 = 3,4,8,16,20), a geometric range LO:HI:xF (1:256:x2 = 1,2,4,…,256) or an "
    "arithmetic one LO:HI:+D (1:64:+8 = 1,9,…,57); HI is included when the steps reach it; items mix (1,2,8:64:x2)"
)


def _batch_item(item: str) -> list[int]:
    """One comma item of ``--batch`` (see :data:`BATCH_HELP`)."""
    text = item.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise UsageError(f"--batch: {item!r}: a range is LO:HI:xF (geometric) or LO:HI:+D (arithmetic)")
        lo = positive_int(parts[0], "--batch")
        hi = positive_int(parts[1], "--batch")
        if hi < lo:
            raise UsageError(f"--batch: {item!r}: HI = {hi} is below LO = {lo}")
        step = parts[2].strip()
        if step[:1] in ("x", "*", "×"):
            try:
                factor = float(step[1:])
            except ValueError:
                raise UsageError(
                    f"--batch: {item!r}: the factor after 'x' must be a number, got {step[1:]!r}"
                ) from None
            if not math.isfinite(factor) or factor <= 1:
                raise UsageError(f"--batch: {item!r}: the factor must be > 1, got {step[1:]!r}")
            out, x = [], float(lo)
            while round(x) <= hi:
                out.append(int(round(x)))
                if len(out) > MAX_BATCH_SIZES:
                    break
                x *= factor
            return out
        if step[:1] == "+":
            d = positive_int(step[1:], "--batch (the step after '+')")
            count = (hi - lo) // d + 1
            if count > MAX_BATCH_SIZES:
                raise UsageError(f"--batch: {item!r} expands to {count} sizes (at most {MAX_BATCH_SIZES})")
            return list(range(lo, hi + 1, d))
        raise UsageError(
            f"--batch: {item!r}: the step must be xF (geometric, e.g. x2) or +D (arithmetic, e.g. +8), got {step!r}"
        )
    if "-" in text[1:]:
        lo_text, _, hi_text = text.partition("-")
        lo = positive_int(lo_text, "--batch")
        hi = positive_int(hi_text, "--batch")
        if hi < lo:
            raise UsageError(f"--batch: {item!r}: HI = {hi} is below LO = {lo}")
        out = {lo, hi}
        p = 1
        while p < hi:
            if p > lo:
                out.add(p)
            p *= 2
        return sorted(out)
    return [positive_int(text, "--batch")]


def parse_batch(text: str) -> list[int]:
    """``--batch``: ``"1,8,64"`` → ``[1, 8, 64]``; ``"1-64"`` → powers of two from 1 to 64 (the
    ends included); ``"1:256:x2"`` geometric, ``"1:64:+8"`` arithmetic (:data:`BATCH_HELP`).
    Sorted, duplicates dropped; positive integers only."""
    parts = text.split(",")
    if not text.strip() or any(not p.strip() for p in parts):
        raise UsageError(f"--batch: expected comma-separated batch sizes like 1,8,64, 1-64 or 1:256:x2, got {text!r}")
    sizes: set[int] = set()
    for part in parts:
        sizes.update(_batch_item(part))
        if len(sizes) > MAX_BATCH_SIZES:
            raise UsageError(f"--batch: {text!r} expands to more than {MAX_BATCH_SIZES} sizes")
    return sorted(sizes)


def add_step_arguments(p: Any) -> None:
    """The flags of the one step model that ``plan`` and ``split`` share, with the same defaults,
    so that the two commands given the same model, box, routing, cache and batch agree."""
    p.add_argument(
        "--cache-gib",
        default="auto",
        help="expert cache per rank (box) in GiB, or auto (the default): at each batch size B, what RAM leaves "
        "after the OS reserve, the dense band and the KV cache of that B",
    )
    p.add_argument(
        "--cache-policy",
        default="lru",
        choices=CACHE_POLICIES,
        help="the cache the step sees: a policy simulated in steady state on a trace drawn from the routing "
        "(default lru), or static: a hot set pinned from the true routing probabilities (an oracle)",
    )
    p.add_argument(
        "--cache-scope",
        default="global",
        choices=("global", "layer"),
        help="one cache shared by the layers (default) or one per layer",
    )
    p.add_argument("--context", default="4096", help="context tokens per agent (default 4096)")
    p.add_argument(
        "--overlap", default="max", choices=("max", "sum"), help="combine the terms by max (overlap) or sum (serial)"
    )
    p.add_argument("--read-size-kib", default=None, help="SSD read size in KiB (default: one expert per read)")
    p.add_argument(
        "--exchange",
        default="overlapped",
        choices=("overlapped", "serial"),
        help="with several ranks: the expert exchange hidden under the slowest rank (default) or added after it",
    )
    p.add_argument("--seed", default="0", help="seed of the simulated cache traces (default 0)")
    p.add_argument(
        "--page-cache",
        action="store_true",
        help="experts are read through the OS page cache (buffered reads, mmap), which gets what RAM leaves "
        "after the expert cache: a larger expert cache can then make a step slower (default: O_DIRECT reads)",
    )


SET_HELP = (
    "override a preset field for this run, FIELD=VALUE with its unit (repeatable): ram_bytes=64GB, "
    "bw_ssd_bytes_per_s=7GB/s (the curve scaled to that peak), os_reserve_bytes=6GiB, "
    "engine_seconds_per_step=2ms, kv_bytes_per_token=64KiB; the field is then assumed in provenance "
    "(moeroof presets --schema lists the fields)"
)


def apply_sets(items: Sequence[str] | None, model: Any, hardware: Any) -> tuple[Any, Any]:
    """``--set FIELD=VALUE`` (``model.FIELD`` / ``hardware.FIELD`` to be explicit): each override
    applied to the preset that has the field (:func:`moeroof.data.presets.with_overrides`)."""
    from moeroof.data.presets import HARDWARE_FIELDS, MODEL_FIELDS, with_overrides

    on_model: dict[str, str] = {}
    on_box: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UsageError(f"--set {item!r}: expected FIELD=VALUE, e.g. ram_bytes=64GB")
        kind, _, name = key.rpartition(".")
        if kind not in ("", "model", "hardware"):
            raise UsageError(f"--set {item!r}: {kind!r} is neither model nor hardware")
        if name in MODEL_FIELDS and kind in ("", "model"):
            on_model[name] = value.strip()
        elif name in HARDWARE_FIELDS and kind in ("", "hardware"):
            on_box[name] = value.strip()
        else:
            known = ", ".join([*MODEL_FIELDS, *HARDWARE_FIELDS])
            raise UsageError(f"--set {item!r}: no preset field {name!r} (fields: {known})")
    try:
        return with_overrides(model, on_model), with_overrides(hardware, on_box)
    except ValueError as err:
        raise UsageError(f"--set {err}") from None


def step_options(args: Any) -> dict[str, Any]:
    """The shared step flags as :class:`moeroof.models.plan.Workload` keywords (SI units);
    ``cache_bytes`` is None for ``--cache-gib auto`` (:func:`resolve_auto_cache` fills it in)."""
    auto = str(args.cache_gib).strip().lower() == "auto"
    cache_gib = None if auto else non_negative_float(args.cache_gib, "--cache-gib")
    read_kib = None if args.read_size_kib is None else positive_float(args.read_size_kib, "--read-size-kib")
    if read_kib is not None and read_kib * 2**10 < 1:
        raise UsageError(f"--read-size-kib: a read of {read_kib:g} KiB is less than one byte")
    return {
        "cache_bytes": None if cache_gib is None else scaled(cache_gib, 2**30, "--cache-gib", "GiB"),
        "cache_policy": args.cache_policy,
        "cache_scope": args.cache_scope,
        "context_tokens": non_negative_int(args.context, "--context"),
        "overlap": args.overlap,
        "read_size_bytes": None if read_kib is None else read_kib * 2**10,
        "fabric_overlapped": args.exchange == "overlapped",
        "seed": non_negative_int(args.seed, "--seed"),
        "page_cache": bool(args.page_cache),
    }


def resolve_auto_cache(options: dict[str, Any], model: Any, hardware: Any, batch: Any) -> dict[str, Any] | None:
    """Fill in ``--cache-gib auto`` (``options["cache_bytes"] is None``): each batch size gets what
    RAM leaves at that B (:func:`moeroof.models.plan.auto_cache`; ``cache_auto`` in the options,
    and with one B its number in ``cache_bytes`` as well). Returns what it chose and why
    (``note`` says it in words), or None when the user gave a number."""
    if options["cache_bytes"] is not None:
        return None
    from moeroof.models.plan import auto_cache, auto_cache_note

    auto = auto_cache(model, hardware, batch, context_tokens=options["context_tokens"])
    options["cache_bytes"] = auto["cache_bytes"][0] if len(auto["cache_bytes"]) == 1 else 0.0
    options["cache_auto"] = True
    return {**auto, "cache_gib": [c / 2**30 for c in auto["cache_bytes"]], "note": auto_cache_note(auto)}


def parse_rank_speed(text: str | None, ranks: int) -> tuple[float, ...] | None:
    """``--rank-speed 1,0.6``: one positive number per rank (None when not given)."""
    if text is None:
        return None
    from moeroof.core.errors import ParameterError
    from moeroof.models.partition import parse_rank_speed as parse

    try:
        return tuple(float(x) for x in parse(text, ranks))
    except ParameterError as err:
        raise UsageError(f"--rank-speed: {err.detail}") from None


def fit_knobs_arg(path_text: str) -> dict[str, Any]:
    """``--fit FIT.json``: a ``moeroof fit-plan --json`` result as the knobs ``plan`` runs with
    (:func:`moeroof.data.fit_result.read_fit`)."""
    from moeroof.data.fit_result import read_fit

    return read_fit(input_path(path_text))


def read_routing_knobs(path_text: str) -> tuple[str, float, float, float]:
    """``--routing-knobs FILE``: a ``moeroof fit-routing --json`` result, as ``(family, skew, rho,
    c)`` for :func:`moeroof.models.local_routing.routing_from_knobs` (c = inf: no locality)."""
    path = input_path(path_text)
    from moeroof.core.limits import MAX_JSON_BYTES, check_document

    try:
        text = path.read_text(encoding="utf-8")
        check_document(text, f"--routing-knobs: {path}", max_bytes=MAX_JSON_BYTES)
        doc = json.loads(text)
    except FileNotFoundError:
        raise UsageError(f"--routing-knobs: {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"--routing-knobs: {path}: not a JSON file ({err})") from None
    if not isinstance(doc, dict):
        raise UsageError(
            f"--routing-knobs: {path}: expected a JSON object (moeroof fit-routing --json), got {type(doc).__name__}"
        )

    def value(name: str, default: float) -> float:
        v = (doc.get("knobs") or {}).get(name, default)
        v = v.get("value", default) if isinstance(v, dict) else v
        try:
            x = float(v if v is not None else default)
        except (TypeError, ValueError):
            raise UsageError(f"--routing-knobs: {path}: knob {name!r} is not a number") from None
        return x

    family = doc.get("family")
    if family not in ("zipf", "dirichlet"):
        raise UsageError(f"--routing-knobs: {path}: family must be zipf or dirichlet, got {family!r}")
    c = value("locality_c", value("c", math.inf))
    return family, value("skew", 0.8), value("rho", 0.0), c if c > 0 else math.inf


def routing_knobs_arg(path_text: str, model: Any, streams: int) -> Any:
    """``--routing-knobs FILE``: the routing whose cache runs on a trace sampled from a
    fit-routing result's knobs (:func:`read_routing_knobs`), with ``streams`` streams."""
    from moeroof.models.local_routing import routing_from_knobs

    return routing_from_knobs(model, *read_routing_knobs(path_text), streams=streams)


def input_path(path_text: str) -> Path:
    """A user's input file: from the working directory when it is there, else under the suite's
    ``data/`` (embedded names such as ``histograms/deepseek-v3-like.csv``); a file in neither is
    an error naming both places (:func:`moeroof.core.paths.resolve_data`)."""
    from moeroof.core.paths import resolve_data

    return resolve_data(path_text)


def read_trace_arg(path_text: str, args: Any = None) -> Trace:
    """A TRACE argument: a histogram ``.csv`` is refused by name before anything is read; a trace
    without its meta takes it from ``--experts``/``--top-k`` (:func:`add_meta_arguments`)."""
    from moeroof.data.io import read_trace

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
    return read_trace(path, meta=_meta_from_flags(path, args))


def add_meta_arguments(p: Any) -> None:
    """``--experts``, ``--top-k``, ``--tokens``, ``--provenance``: what a sidecar would hold, for
    an input that has none (a sidecar that is there wins, and flags that contradict it are an error)."""
    g = p.add_argument_group("an input without its sidecar / meta (what the sidecar would hold)")
    g.add_argument("--experts", default=None, help="routed experts per layer (E)")
    g.add_argument("--top-k", default=None, help="experts per token (K)")
    g.add_argument(
        "--tokens",
        default=None,
        help="histogram: routed tokens per layer (default: each layer's count sum / K, exact for incidence counts)",
    )
    g.add_argument("--provenance", default=None, help="witnessed, projected, assumed or synthetic (default: unknown)")


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
    from moeroof.data.io import sidecar_path

    if path.suffix.lower() == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                return "meta" in z.files
        except (OSError, ValueError, EOFError):
            return True  # unreadable: the reader reports it in its own words
    return sidecar_path(path).exists()


def _meta_from_flags(path: Path, args: Any) -> dict[str, Any] | None:
    """The meta the flags give for ``path``, or None when the file has its own (or no flag is given).

    With the file's own meta present, a flag that disagrees with it is an error rather than a
    silent override: the sidecar describes the capture, the flag is a guess about it."""
    experts = getattr(args, "experts", None)
    top_k = getattr(args, "top_k", None)
    tokens = getattr(args, "tokens", None)
    provenance = getattr(args, "provenance", None)
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
                if given is not None and positive_int(given, flag) != own:
                    raise UsageError(f"{flag} {given} disagrees with {path}'s own meta ({own}); leave the flag out")
        return None
    if experts is None or top_k is None:
        raise UsageError(f"{path} has no sidecar/meta: give at least --experts and --top-k (what it would hold)")
    meta: dict[str, Any] = {
        "model": path.stem,
        "experts": positive_int(experts, "--experts"),
        "top_k": positive_int(top_k, "--top-k"),
        "source": f"{path} (meta from the command line)",
    }
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
    meta["layer_ids"] = [int(v) for v in sums.index]
    meta["layers_summed"] = False
    if tokens is not None:
        meta["tokens"] = positive_int(tokens, "--tokens")
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


# ----------------------------------------------------------------------------- output


def _num(x: Any) -> Any:
    """JSON-safe number: NaN / inf → None, numpy scalars → Python."""
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    return x


#: element types a list may hold to be copied as it is (floats checked for NaN / inf)
_PLAIN = {int, float, str, bool, type(None)}


def jsonable(obj: Any) -> Any:
    """JSON-ready copy: numpy arrays and scalars to Python, NaN / inf to None, paths to text."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        kinds = set(map(type, obj))
        if kinds <= _PLAIN:  # a list of plain numbers or strings (a curve): one pass, no call each
            if float in kinds:
                return [x if type(x) is not float or math.isfinite(x) else None for x in obj]
            return list(obj)
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biu":  # Python ints and bools as they are: no walk per element
            return obj.tolist()
        if obj.dtype.kind == "f":
            if np.isfinite(obj).all():
                return obj.tolist()
            return np.where(np.isfinite(obj), obj, None).tolist()  # NaN / inf → None
        return jsonable(obj.tolist())
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return _num(obj)


def fmt(x: Any, digits: int = 2) -> str:
    """A table cell: ``-`` for a missing value, integers as is, others with ``digits`` decimals."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "-"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """Fixed-width table; ``align`` has one of ``<`` / ``>`` per column."""
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(headers)]
    lines = ["  ".join(f"{h:{a}{w}}" for h, a, w in zip(headers, align, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(f"{c:{a}{w}}" for c, a, w in zip(r, align, widths)).rstrip() for r in rows]
    return "\n".join(lines)


FORMATS = ("table", "json", "csv")


#: what ``--report-output`` says in the --help of a command whose own ``-o/--output`` is its data file
REPORT_OUTPUT_HELP = (
    "write the printed report (in the --format chosen) to FILE, atomically, instead of stdout; "
    "-o/--output is the data file the command writes, never the report"
)


def add_output_arguments(p: Any, *, output: bool = True, report_output: bool = True) -> None:
    """``--format table|json|csv`` (``--json`` = ``--format json``) and the file the printed
    report goes to instead of stdout (atomically; never one of the command's inputs):
    ``--output FILE``, or ``--report-output FILE`` where the command's own ``-o/--output`` names
    the data it writes (``output=False``: trace, histogram, import, calibrate, sweep, …).
    ``report_output=False`` (with ``output=False``) adds no report file flag (``bench``, whose
    ``--output`` is its JSON report already)."""
    p.add_argument("--format", default=None, choices=FORMATS, help="output format (default table)")
    p.add_argument("--json", action="store_true", help="print one JSON object (the same as --format json)")
    if output:
        p.add_argument(
            "--output",
            dest="report_output",
            default=None,
            metavar="FILE",
            help="write the report to FILE (atomically; never one of the command's inputs) instead of stdout",
        )
    elif report_output:
        p.add_argument("--report-output", dest="report_output", default=None, metavar="FILE", help=REPORT_OUTPUT_HELP)


def output_format(args: Any) -> str:
    """The chosen format: ``--json`` and ``--format`` must agree."""
    chosen = getattr(args, "format", None)
    if getattr(args, "json", False):
        if chosen not in (None, "json"):
            raise UsageError(f"--json and --format {chosen} disagree: give one")
        return "json"
    return chosen or "table"


def dumps(obj: Any) -> str:
    """JSON with objects indented and every list of numbers or strings on one line (``mrc``'s
    curve is two lines, not 18,000); NaN and ±inf become null (:func:`jsonable`), so no report
    ever fails to print for an out-of-range number."""

    def render(v: Any, ind: int) -> str:
        pad = "  " * (ind + 1)
        if isinstance(v, dict):
            if not v:
                return "{}"
            items = [f"{pad}{json.dumps(str(k))}: {render(x, ind + 1)}" for k, x in v.items()]
            return "{\n" + ",\n".join(items) + "\n" + "  " * ind + "}"
        if isinstance(v, list):
            if set(map(type, v)).isdisjoint((dict, list)):  # every item flat (jsonable made only these)
                return json.dumps(v, allow_nan=False, ensure_ascii=False)
            return "[\n" + ",\n".join(pad + render(x, ind + 1) for x in v) + "\n" + "  " * ind + "]"
        return json.dumps(v, allow_nan=False, ensure_ascii=False)

    return render(jsonable(obj), 0)


def csv_columns(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """A report as one CSV table: the top-level lists of numbers / strings of the most common
    length (one row per entry: per batch size, per capacity, …); a report without such lists
    is ``key,value`` rows of its top-level numbers and strings."""
    lists = {
        k: v for k, v in rep.items() if isinstance(v, list) and v and all(not isinstance(x, (dict, list)) for x in v)
    }
    if lists:
        lengths = [len(v) for v in lists.values()]
        n = max(set(lengths), key=lambda m: (lengths.count(m), m))
        cols = [k for k, v in lists.items() if len(v) == n]
        return cols, [[lists[c][i] for c in cols] for i in range(n)]
    return ["key", "value"], [[k, v] for k, v in rep.items() if not isinstance(v, (dict, list))]


#: an input is hashed whole up to this size; a larger one by its size, first and last MiB
HASH_WHOLE_BYTES = 256 << 20
_HASH_EDGE_BYTES = 1 << 20


def _file_hash(path: Path) -> dict[str, Any]:
    """``{"path", "bytes", "sha256"}`` of an input; past :data:`HASH_WHOLE_BYTES` the hash is of
    its size, first and last MiB (``"sha256_of": "size+head+tail"``), said so, not a whole hash."""
    import hashlib

    size = path.stat().st_size
    h = hashlib.sha256()
    out: dict[str, Any] = {"path": str(path), "bytes": size}
    with open(path, "rb") as fh:  # read-only
        if size <= HASH_WHOLE_BYTES:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        else:
            h.update(str(size).encode())
            h.update(fh.read(_HASH_EDGE_BYTES))
            fh.seek(size - _HASH_EDGE_BYTES)
            h.update(fh.read(_HASH_EDGE_BYTES))
            out["sha256_of"] = "size+head+tail"
    out["sha256"] = h.hexdigest()
    return out


def utc_now() -> str:
    """The run's UTC time, ISO 8601 to the second; ``SOURCE_DATE_EPOCH`` (the reproducible-builds
    convention) fixes it, so two runs can give the same bytes."""
    import datetime

    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    when = (
        datetime.datetime.fromtimestamp(int(epoch), datetime.UTC)
        if epoch.isdigit()
        else datetime.datetime.now(datetime.UTC)
    )
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def run_record(args: Any, inputs: Sequence[str | os.PathLike[str]] = ()) -> dict[str, Any]:
    """What every JSON, CSV and Parquet result carries (vLLM's ``--save-result`` convention):
    the suite's version, the command line, each input file with its size and SHA-256 (what the
    arguments name — data files, their sidecars, preset files — and ``inputs``), and the UTC time."""
    import shlex

    import moeroof

    argv = getattr(args, "argv", None) if not isinstance(args, bool) else None
    files = [] if isinstance(args, bool) else _input_files(args)
    files += [Path(x).expanduser().resolve() for x in inputs if Path(x).expanduser().is_file()]
    seen: dict[str, dict[str, Any]] = {}
    for f in files:
        if str(f) not in seen:
            try:
                seen[str(f)] = _file_hash(f)
            except OSError:
                continue
    return {
        "moeroof_version": moeroof.__version__,
        "command": "moeroof " + shlex.join(argv) if argv is not None else None,
        "inputs": list(seen.values()),
        "utc": utc_now(),
    }


def _csv_comment(record: dict[str, Any]) -> str:
    """The run record as ``#`` comment lines above a CSV's header (pandas: ``comment="#"``; the
    suite's own CSV readers skip them)."""
    lines = [f"# moeroof {record['moeroof_version']}, {record['utc']}: {record['command'] or '(library)'}"]
    lines += [f"# input {i['path']} ({i['bytes']} bytes) sha256 {i['sha256']}" for i in record["inputs"]]
    return "".join(line.replace("\n", " ") + "\n" for line in lines)


def _csv_text(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(headers)
    for r in rows:
        w.writerow(["" if x is None else x for x in r])
    return buf.getvalue()


#: flags whose value names a preset by name as well as by path (the preset file is an input)
_PRESET_FLAGS = {"model": "models", "hardware": "hardware"}
#: flags that are never input files (what a command writes, and argparse's own)
_NOT_INPUTS = ("output", "report_output", "func", "parameter_flags", "command", "format", "import_format")


def _candidates(key: str, text: str) -> list[Path]:
    """The files a flag value may name: the path from the working directory, the suite's
    ``data/`` file of that name (where commands resolve embedded names), and for ``--model`` /
    ``--hardware`` the shipped preset of that name."""
    p = Path(text).expanduser()
    out = [p]
    if not p.is_absolute():
        out.append(_data_dir() / p)
    sub = _PRESET_FLAGS.get(key)
    if sub is not None and p.suffix.lower() != ".toml":
        out.append(_data_dir() / "presets" / sub / f"{text}.toml")
    return out


def _data_dir() -> Path:
    from moeroof.core.paths import DATA_DIR

    return DATA_DIR


def _input_files(args: Any) -> list[Path]:
    """Every existing file a flag or argument of this run names, with the sidecar beside it
    (what a report file must not be): paths as given, embedded ``data/`` names, preset names."""
    out = []
    for key, value in vars(args).items():
        if key in _NOT_INPUTS or not isinstance(value, (str, list)) or not value:
            continue
        texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]
        for whole in texts:
            for text in [whole, *whole.split(",")] if "," in whole else [whole]:
                if not text.strip():
                    continue
                for p in _candidates(key, text.strip()):
                    try:
                        if p.is_file():
                            out.append(p.resolve())
                            side = p.with_suffix(".json")
                            if side.is_file():
                                out.append(side.resolve())
                    except (OSError, ValueError):  # a name too long or holding NUL: not a file
                        continue
    return out


def _written_files(args: Any) -> list[Path]:
    """The data files a command writes with its own ``-o/--output`` (and their sidecars): a
    report file must not be one of them either."""
    if not isinstance(getattr(args, "output", None), str):
        return []
    p = Path(args.output).expanduser()
    return [p.resolve(), p.with_suffix(".json").resolve()]


def check_report_target(target: str, args: Any, inputs: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """The report file ``target`` (``--output`` / ``--report-output``), refused when it is one of
    the command's inputs or their sidecars (``inputs`` adds files the arguments do not name, such
    as the preset files ``presets`` reads), a data file the command writes with ``-o``, anything
    in the shipped presets folder, or a folder."""
    from moeroof.core import atomic

    flag = _report_flag(args)
    path = Path(target).expanduser()
    named = [Path(x).expanduser() for x in inputs]
    named += [x.with_suffix(".json") for x in named]
    if any(atomic.same_file(path, x) for x in [*_input_files(args), *named]):
        raise UsageError(f"{flag}: {target} is one of this command's inputs; refusing to overwrite it")
    if any(atomic.same_file(path, x) for x in _written_files(args)):
        raise UsageError(f"{flag}: {target} is the data file this command writes with -o; give the report another name")
    presets = (_data_dir() / "presets").resolve()
    resolved = path.resolve()
    if resolved == presets or presets in resolved.parents:
        raise UsageError(f"{flag}: {target} is in the shipped presets folder ({presets}); refusing to write there")
    # a folder, or a folder that is not there or cannot be written: said now, before the work
    return check_output_file(target, flag)


def emit(
    rep: dict[str, Any],
    args: Any,
    printer: Callable[[dict[str, Any]], None],
    csv_table: Callable[[dict[str, Any]], tuple[list[str], list[list[Any]]]] | None = None,
    *,
    inputs: Sequence[str | os.PathLike[str]] = (),
) -> int:
    """Print (or with ``--output FILE`` / ``--report-output FILE`` write, atomically) a report as
    JSON (:func:`dumps`), CSV (``csv_table``, the command's own table, or :func:`csv_columns`)
    or the command's readable table; exit status 0.

    ``args`` is the parsed namespace (``--format``, ``--json``, the report file), or a bool for
    callers that only choose JSON. ``inputs``: files the command read that its arguments do not
    name (the report file must not be one of them either: :func:`check_report_target`)."""
    if isinstance(args, bool):
        fmt_name, target = ("json" if args else "table"), None
    else:
        fmt_name = output_format(args)
        target = getattr(args, "report_output", None)
        target = target if isinstance(target, str) else None
    if target is not None:
        path = check_report_target(target, args, inputs)
    # the run record (a command that wrote a file of the same report put it there already)
    record = rep.get("run") if isinstance(rep.get("run"), dict) else None
    if fmt_name == "json":
        text = dumps({**rep, "run": record or run_record(args, inputs)}) + "\n"
    elif fmt_name == "csv":
        headers, rows = (csv_table or csv_columns)(rep)
        text = _csv_comment(record or run_record(args, inputs)) + _csv_text(headers, rows)
    else:
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            printer(rep)
        text = buf.getvalue()
    if target is None:
        sys.stdout.write(text)
        return 0
    from moeroof.core import atomic

    try:
        atomic.write_text(path, text)
    except OSError as err:
        raise UsageError(f"{_report_flag(args)}: cannot write {target} ({err.strerror or err})") from None
    print(f"wrote {target}", file=sys.stderr)
    return 0


def _report_flag(args: Any) -> str:
    return "--report-output" if isinstance(getattr(args, "output", None), str) else "--output"


def check_output_file(text: str, flag: str = "--output") -> Path:
    """An output file that a command will write after it has measured: refused now if it is a
    folder, or its folder does not exist or cannot be written (so no measurement is wasted)."""
    from moeroof.core import atomic

    out = Path(text).expanduser()
    if out.is_dir():
        raise UsageError(f"{flag}: {text} is a folder; give a file name")
    try:
        atomic.check_writable_folder(out)
    except FileNotFoundError:
        raise UsageError(f"{flag}: the folder {out.resolve().parent} does not exist") from None
    except OSError as exc:
        raise UsageError(
            f"{flag}: cannot write in {exc.filename or out.resolve().parent} ({exc.strerror or exc})"
        ) from None
    return out


class Progress:
    """One self-rewriting stderr line while a long command works: ``fit [#####·····] 4/9 zipf: bootstrap``.

    Shown only when stderr is a terminal, so pipes, logs and tests see the command's output
    alone; ``MOEROOF_PROGRESS=1`` forces it on, ``0`` off. Never written to stdout. Call it as
    ``progress(done, total, what)`` (the library's progress callbacks), then :meth:`close`.
    """

    WIDTH = 20

    def __init__(self, label: str, stream: Any = None, enabled: bool | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            forced = os.environ.get("MOEROOF_PROGRESS", "").strip()
            enabled = forced == "1" if forced in ("0", "1") else bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.shown = False

    def __call__(self, done: int, total: int, what: str = "") -> None:
        if not self.enabled or total <= 0:
            return
        filled = min(self.WIDTH, max(0, round(self.WIDTH * done / total)))
        bar = "#" * filled + "·" * (self.WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {what}\x1b[K")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        """Clear the line (the command's own output follows on a clean line)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def interrupted() -> int:
    """A measurement stopped by Ctrl-C or a signal: one line on stderr, exit status 130."""
    print("error: interrupted (scratch files removed)", file=sys.stderr)
    return EXIT_INTERRUPTED
