"""``moeroof`` command line: the union curve and skew fits from the shell.

::

    moeroof union --uniform E K --batch 1,8,64 [--layers L] [--json]
    moeroof union PATH --batch 1,8,64 [--bootstrap 200] [--seed 0] [--draws 4] [--json]
    moeroof fit HISTOGRAM [--bootstrap 100] [--gof-sims 99] [--seed 0] [--json]
    moeroof plan --model PRESET|FILE --hardware PRESET|FILE --batch 1,8,64 [--cache-gib X]
                 [--context N] [--overlap max|sum] [--routing uniform|zipf:S|PATH] [--json]
    moeroof presets [--json]
    moeroof split HISTOGRAM --ranks R --method id|lpt|weighted|bytes [--rank-speed 1,0.6] [--json]
    moeroof cache TRACE --policy lru|lfu|static|belady|s3fifo|arc
                  (--capacity-experts N | --capacity-gib X --expert-bytes N) [--scope global|layer]
                  [--warmup S] [--histogram PATH] [--json]
    moeroof mrc TRACE [--sample-rate R] [--json]
    moeroof calibrate [--output calibrated.toml] [--file-mib 2048] [--seconds 30] [--scratch-dir D] [--json]
    moeroof bench [--experts 32 --layers 4 --top-k 4 --d-model 1024 --d-ff 1024] [--batch 1,2,4,8,16,32]
                  [--mode both|coalesced|uncoalesced] [--routing uniform|zipf:S | --trace PATH] [--json] [--output F]

PATH is a histogram ``.csv`` (rarefaction / extrapolation, :func:`moeroof.models.union.union_histogram`)
or a trace ``.npz`` / ``.npy`` (measured, :func:`moeroof.models.union.union_from_trace`). Every
coalescing ratio is ``B·K / U(B)`` against the ``uncoalesced`` baseline. Random draws use
``numpy.random.default_rng(seed)`` (default seed 0), so outputs are reproducible.

Bad input prints ``error: FILE:ROW: FIELD: what is wrong`` (or ``error: <message>`` for a bad
flag) on stderr and exits with status 2; argparse usage errors exit 2 as well.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moeroof import __version__
from moeroof.data.io import Histogram, InputError, Trace, load_any, read_histogram

__all__ = ["main", "build_parser", "union_report"]

EXIT_USAGE = 2


class UsageError(ValueError):
    """A bad flag value; printed as ``error: <message>``."""


# ----------------------------------------------------------------------------- flag parsing


def _positive_int(text: str, flag: str) -> int:
    t = text.strip()
    if not t.lstrip("+").isdigit() or int(t) < 1:
        raise UsageError(f"{flag}: {text!r} is not a positive integer")
    return int(t)


def _non_negative_int(text: str, flag: str) -> int:
    t = text.strip()
    if not t.lstrip("+").isdigit():
        raise UsageError(f"{flag}: {text!r} is not a non-negative integer")
    return int(t)


def parse_batch(text: str) -> list[int]:
    """``"1,8,64"`` → ``[1, 8, 64]`` (sorted, duplicates dropped); positive integers only."""
    parts = [p for p in text.split(",")]
    if not text.strip() or any(not p.strip() for p in parts):
        raise UsageError(f"--batch: expected comma-separated positive integers like 1,8,64, got {text!r}")
    return sorted({_positive_int(p, "--batch") for p in parts})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moeroof",
        description="MoE inference analysis: expert union U(B), routing-skew fits, the net tok/s roofline and presets.",
    )
    parser.add_argument("--version", action="version", version=f"moeroof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    pu = sub.add_parser(
        "union",
        help="expected distinct experts U(B) per layer and the coalescing ratio B·K/U",
        description=(
            "Expected distinct experts per layer U(B) for batches of B tokens, from the uniform "
            "closed form, a histogram (rarefaction/extrapolation) or a trace (measured)."
        ),
    )
    pu.add_argument("path", nargs="?", metavar="PATH", help="histogram .csv or trace .npz/.npy")
    pu.add_argument(
        "--uniform", nargs=2, metavar=("E", "K"), help="closed form for uniform routing over E experts, top-K"
    )
    pu.add_argument("--batch", required=True, help="batch sizes, comma-separated (e.g. 1,8,64)")
    pu.add_argument("--layers", help="layers for --uniform (default 1)")
    pu.add_argument("--bootstrap", default="200", help="bootstrap replicates for the band (default 200; 0 = none)")
    pu.add_argument("--draws", default="4", help="random stream subsets per step for a trace (default 4)")
    pu.add_argument("--level", default="0.95", help="confidence level of the band (default 0.95)")
    pu.add_argument("--seed", default="0", help="seed of numpy.random.default_rng (default 0)")
    pu.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    pu.set_defaults(func=_cmd_union)

    pf = sub.add_parser(
        "fit",
        help="fit Zipf / Dirichlet skew models to a histogram (MLE, AIC, goodness of fit)",
        description="Fit routing-skew models to a per-layer histogram by maximum likelihood.",
    )
    pf.add_argument("path", metavar="HISTOGRAM", help="histogram .csv with its sidecar .json")
    pf.add_argument("--bootstrap", default="100", help="bootstrap replicates for parameter CIs (default 100)")
    pf.add_argument("--gof-sims", default="99", help="simulations for the goodness-of-fit p-value (default 99)")
    pf.add_argument("--seed", default="0", help="seed of numpy.random.default_rng (default 0)")
    pf.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    pf.set_defaults(func=_cmd_fit)

    pl = sub.add_parser(
        "plan",
        help="net tok/s of B agents: the step roofline, what binds, and multiples against named baselines",
        description=(
            "Evaluate the decode-step roofline (SSD, memory, compute, fabric) for a model and a box "
            "at each batch size; every multiple names its baseline (uncoalesced, single, "
            "independent-boxes) and the result says whether any input is not witnessed (projected)."
        ),
    )
    pl.add_argument("--model", required=True, help="model preset name (see `moeroof presets`) or a TOML path")
    pl.add_argument("--hardware", required=True, help="hardware preset name or a TOML path")
    pl.add_argument("--batch", required=True, help="batch sizes, comma-separated (e.g. 1,8,64)")
    pl.add_argument("--cache-gib", default="0", help="expert cache in GiB (default 0)")
    pl.add_argument("--context", default="4096", help="context tokens per agent (default 4096)")
    pl.add_argument(
        "--overlap", default="max", choices=("max", "sum"), help="combine the terms by max (overlap) or sum (serial)"
    )
    pl.add_argument(
        "--routing", default="uniform", help="uniform, zipf:S, or a histogram .csv / trace .npz path (default uniform)"
    )
    pl.add_argument("--read-size-kib", default=None, help="SSD read size in KiB (default: one expert per read)")
    pl.add_argument("--ranks", default="1", help="ranks the experts are split over (fabric term when > 1; default 1)")
    pl.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    pl.set_defaults(func=_cmd_plan)

    pp = sub.add_parser(
        "presets",
        help="list the model and hardware presets with their key numbers and sources",
        description=(
            "List the shipped model and hardware presets (data/presets/): key numbers in "
            "readable units with each number's provenance (witnessed / projected / assumed)."
        ),
    )
    pp.add_argument(
        "--json", action="store_true", help="print one JSON object (SI units, provenance and sources per field)"
    )
    pp.set_defaults(func=_cmd_presets)
    _add_cache_parsers(sub)
    _add_witness_parsers(sub)

    ps = sub.add_parser(
        "split",
        help="partition experts over ranks (id, lpt, weighted, bytes) and predict each rank's step",
        description=(
            "Split a firing histogram's experts over ranks: contiguous ids, equal-cardinality LPT "
            "(DeepSeek EPLB's balanced_packing), weighted by per-rank speed, or balancing expected "
            "streamed bytes; reports per-rank load, imbalance and the predicted per-rank step."
        ),
    )
    ps.add_argument("path", metavar="HISTOGRAM", help="histogram .csv with its sidecar .json")
    ps.add_argument("--ranks", required=True, help="number of ranks")
    ps.add_argument("--method", required=True, choices=("id", "lpt", "weighted", "bytes"), help="partition method")
    ps.add_argument("--rank-speed", default=None, help="relative speed per rank, comma-separated (e.g. 1,0.6)")
    ps.add_argument("--batch", default="8", help="concurrent streams M for the step model (default 8)")
    ps.add_argument("--cache-gib", default="0", help="expert cache per rank in GiB (default 0)")
    ps.add_argument(
        "--model", default="glm-5-nvfp4", help="model preset or TOML for the step model (default glm-5-nvfp4)"
    )
    ps.add_argument("--hardware", default="gb10", help="hardware preset or TOML per rank (default gb10)")
    ps.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ps.set_defaults(func=_cmd_split)
    return parser


# ----------------------------------------------------------------------------- helpers


def _num(x: Any) -> Any:
    """JSON-safe number: NaN / inf → None, numpy scalars → Python."""
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    return x


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return _num(obj)


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "-"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.{digits}f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """Fixed-width table; ``align`` has one of ``<`` / ``>`` per column."""
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(headers)]
    lines = ["  ".join(f"{h:{a}{w}}" for h, a, w in zip(headers, align, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(f"{c:{a}{w}}" for c, a, w in zip(r, align, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _emit(rep: dict[str, Any], as_json: bool, printer) -> int:
    """Print a report as one JSON object (NaN refused: the library reports missing values as
    None) or as the command's readable table; exit status 0."""
    if as_json:
        print(json.dumps(rep, indent=2, allow_nan=False))
    else:
        printer(rep)
    return 0


# ----------------------------------------------------------------------------- union


def union_report(args: argparse.Namespace) -> dict[str, Any]:
    """Compute the union curve the ``union`` subcommand prints, as a JSON-ready dict."""
    from moeroof.models.union import union_from_trace, union_histogram, union_uniform

    batch = parse_batch(args.batch)
    bootstrap = _non_negative_int(args.bootstrap, "--bootstrap")
    draws = _positive_int(args.draws, "--draws")
    seed = _non_negative_int(args.seed, "--seed")
    try:
        level = float(args.level)
    except ValueError:
        level = float("nan")
    if not 0.0 < level < 1.0:
        raise UsageError(f"--level: {args.level!r} is not a number in (0, 1)")
    rng = np.random.default_rng(seed)
    notes: list[str] = []

    if args.uniform is not None:
        if args.path is not None:
            raise UsageError("give either PATH or --uniform E K, not both")
        experts = _positive_int(args.uniform[0], "--uniform E")
        top_k = _positive_int(args.uniform[1], "--uniform K")
        if top_k > experts:
            raise UsageError(f"--uniform: top_k K={top_k} exceeds experts E={experts}")
        layers = 1 if args.layers is None else _positive_int(args.layers, "--layers")
        curve = union_uniform(experts, top_k, batch, layers=layers)
        provenance, source = "model", f"uniform routing (E={experts}, K={top_k})"
    else:
        if args.path is None:
            raise UsageError("give a histogram/trace PATH or --uniform E K")
        if args.layers is not None:
            raise UsageError("--layers applies to --uniform only (a file carries its own layers)")
        data = load_any(args.path)
        source = str(data.path)
        provenance = data.meta.get("provenance")
        if isinstance(data, Histogram):
            curve = union_histogram(
                data.counts,
                data.tokens,
                batch,
                top_k=data.top_k,
                experts=data.experts,
                bootstrap=bootstrap,
                rng=rng,
                level=level,
            )
            if data.layers_summed:
                notes.append(
                    "histogram summed over layers: per-layer skew averages out, so this union "
                    "overstates the per-layer union (SPEC §3); prefer per-layer data"
                )
            if any(m == "extrapolation" for m in curve.method):
                notes.append(
                    f"batch sizes above the tokens counted (T = {int(data.tokens.min())}) are extrapolated (Chao)"
                )
        else:
            assert isinstance(data, Trace)
            curve = union_from_trace(
                data.topk,
                batch,
                experts=data.experts,
                rng=rng,
                draws=draws,
                bootstrap=bootstrap,
                level=level,
            )
            if any(m == "none" for m in curve.method):
                notes.append(
                    f"batch sizes above the live streams of every step (at most {data.streams}) have no estimate"
                )
    methods = list(curve.method)
    with warnings.catch_warnings():
        # a batch size no step of a trace can fill is all-NaN: reported as null, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = curve.mean
        ratio = curve.coalescing_ratio
    return _jsonable(
        {
            "batch": [int(b) for b in curve.batch],
            "union_per_layer": mean,
            "union_total": curve.total,
            "ci_low": curve.mean_ci_low,
            "ci_high": curve.mean_ci_high,
            "level": level,
            "coalescing_ratio": ratio,
            "baseline": curve.baseline,
            "method": methods[0] if len(set(methods)) == 1 else methods,
            "experts": curve.experts,
            "top_k": curve.top_k,
            "layers": curve.layers,
            "provenance": provenance,
            "source": source,
            "notes": notes,
        }
    )


def _print_union(rep: dict[str, Any]) -> None:
    methods = rep["method"] if isinstance(rep["method"], list) else [rep["method"]] * len(rep["batch"])
    pct = f"{rep['level'] * 100:g}%"
    print(f"U(B): distinct experts per layer — {rep['source']}")
    print(
        f"experts E={rep['experts']}  top_k K={rep['top_k']}  layers={rep['layers']}  "
        f"provenance: {rep['provenance'] or 'unknown'}  baseline: {rep['baseline']}"
    )
    rows = []
    for j, b in enumerate(rep["batch"]):
        lo, hi = rep["ci_low"][j], rep["ci_high"][j]
        ci = "-" if lo is None or hi is None else f"[{_fmt(lo)}, {_fmt(hi)}]"
        rows.append(
            [
                str(b),
                _fmt(rep["union_per_layer"][j]),
                ci,
                _fmt(rep["union_total"][j]),
                _fmt(rep["coalescing_ratio"][j]),
                methods[j],
            ]
        )
    headers = ["B", "union/layer", f"{pct} CI", "union total", f"B·K/U vs {rep['baseline']}", "method"]
    print(_table(headers, rows, ">>>>><"))
    for note in rep["notes"]:
        print(f"note: {note}")


def _cmd_union(args: argparse.Namespace) -> int:
    rep = union_report(args)
    return _emit(rep, args.json, _print_union)


# ----------------------------------------------------------------------------- fit


def _cmd_fit(args: argparse.Namespace) -> int:
    bootstrap = _non_negative_int(args.bootstrap, "--bootstrap")
    gof_sims = _non_negative_int(args.gof_sims, "--gof-sims")
    seed = _non_negative_int(args.seed, "--seed")
    path = Path(args.path)
    if path.suffix.lower() != ".csv":
        data = load_any(path)  # a bad / missing file reports its own error first
        raise InputError(path, "-", "file", f"fit needs a histogram .csv, got a {type(data).__name__.lower()}")
    hist = read_histogram(path)
    from moeroof.models.fit import fit_histogram  # lazily: the union command works without it

    result = fit_histogram(
        hist.counts, hist.top_k, rng=np.random.default_rng(seed), bootstrap=bootstrap, gof_sims=gof_sims
    )
    rep = _jsonable(dict(result.to_dict()))
    rep.setdefault("source", str(hist.path))
    rep.setdefault("provenance", hist.meta.get("provenance"))
    rep.setdefault("layers_summed", hist.layers_summed)
    return _emit(rep, args.json, _print_fit)


def _fmt_params(params: Any) -> str:
    if isinstance(params, dict):
        return ", ".join(f"{k}={_fmt(v, 3)}" for k, v in params.items()) or "-"
    if isinstance(params, (list, tuple)):
        return ", ".join(_fmt(v, 3) for v in params) or "-"
    return _fmt(params, 3)


def _print_fit(rep: dict[str, Any]) -> None:
    print(f"routing-skew fit — {rep.get('source')}")
    print(
        f"experts E={rep.get('experts')}  top_k K={rep.get('top_k')}  layers={rep.get('layers')}  "
        f"provenance: {rep.get('provenance') or 'unknown'}"
    )
    chosen = rep.get("chosen")
    rows = []
    for name, m in (rep.get("models") or {}).items():
        rows.append(
            [
                ("* " if name == chosen else "  ") + str(name),
                _fmt_params(m.get("params")),
                _fmt(m.get("log_likelihood"), 1),
                _fmt(m.get("aic"), 1),
                _fmt(m.get("gof_pvalue"), 3),
            ]
        )
    print(_table(["model", "params", "logL", "AIC", "GoF p"], rows, "<<>>>"))
    print(f"* chosen: {chosen} (lowest AIC)" if chosen else "no model chosen")
    if rep.get("layers_summed"):
        print("note: histogram summed over layers: per-layer skew averages out (SPEC §3)")


# ----------------------------------------------------------------------------- presets

_TAG_LETTER = {"witnessed": "w", "projected": "p", "assumed": "a"}
_TAG_RANK = {"witnessed": 0, "projected": 1, "assumed": 2}


def _preset_entry(obj: Any, fields: Sequence[str]) -> dict[str, Any]:
    """One preset as JSON: description, the fields its file sets (SI), provenance, sources, path."""
    entry: dict[str, Any] = {"description": obj.description}
    if getattr(obj, "precision", ""):
        entry["precision"] = obj.precision
    for key in fields:
        if key in obj.provenance:
            entry[key] = getattr(obj, key)
    entry["provenance"] = dict(obj.provenance)
    entry["sources"] = dict(obj.sources)
    entry["path"] = obj.path
    return entry


def presets_report() -> dict[str, Any]:
    """Every shipped preset, as the ``presets`` subcommand prints it with ``--json``."""
    from moeroof.data.presets import HARDWARE_FIELDS, MODEL_FIELDS, list_presets, load_hardware, load_model

    shipped = list_presets()
    return _jsonable(
        {
            "models": {
                name: _preset_entry(load_model(path), list(MODEL_FIELDS)) for name, path in shipped["models"].items()
            },
            "hardware": {
                name: _preset_entry(load_hardware(path), list(HARDWARE_FIELDS))
                for name, path in shipped["hardware"].items()
            },
        }
    )


def _cell(value: Any, unit: str | None, tag: str | None, digits: int = 2) -> str:
    """A table cell: the number in ``unit`` (SI → unit through moeroof.core.units) and its tag letter."""
    from moeroof.core.units import from_si

    if value is None or tag is None:
        return "-"
    shown = value if unit is None else from_si(value, unit)
    return f"{_fmt(shown, digits)} {_TAG_LETTER[tag]}"


def _ssd_cell(entry: dict[str, Any], read_size: float) -> str:
    """SSD bandwidth at one read size (log-log interpolation of the curve, clamped at its ends).

    The tag is the weaker of the curve's two fields; a value read between or beyond the measured
    points is at best ``projected``."""
    from moeroof.core.units import from_si

    sizes, bws = entry["ssd_read_size_bytes"], entry["bw_ssd_bytes_per_s"]
    prov = entry["provenance"]
    tag = max(prov["ssd_read_size_bytes"], prov["bw_ssd_bytes_per_s"], key=_TAG_RANK.__getitem__)
    if tag == "witnessed" and not any(math.isclose(s, read_size) for s in sizes):
        tag = "projected"
    bw = float(np.exp(np.interp(np.log(read_size), np.log(sizes), np.log(bws))))
    return f"{_fmt(from_si(bw, 'GB/s'))} {_TAG_LETTER[tag]}"


def _print_presets(rep: dict[str, Any]) -> None:
    from moeroof.core.units import KiB, MiB

    def cell(entry: dict[str, Any], key: str, unit: str | None, digits: int = 2) -> str:
        return _cell(entry.get(key), unit, entry["provenance"].get(key), digits)

    rows = []
    for name, m in rep["models"].items():
        rows.append(
            [
                name,
                cell(m, "experts", None),
                cell(m, "top_k", None),
                cell(m, "moe_layers", None),
                cell(m, "expert_bytes", "MB", 1),
                cell(m, "non_routed_bytes", "GB", 1),
                cell(m, "kv_bytes_per_token", "KiB", 1),
                cell(m, "flops_per_token", "GFLOP", 1),
            ]
        )
    print("models (data/presets/models)")
    headers = ["model", "E", "K", "layers", "expert MB", "non-routed GB", "KV KiB/token", "GFLOP/token"]
    print(_table(headers, rows, "<>>>>>>>"))
    print()
    rows = []
    for name, h in rep["hardware"].items():
        rows.append(
            [
                name,
                cell(h, "ram_bytes", "GiB", 1),
                cell(h, "bw_mem_bytes_per_s", "GB/s", 1),
                cell(h, "flops_per_s", "TFLOP/s", 1),
                _ssd_cell(h, 128 * KiB),
                _ssd_cell(h, 8 * MiB),
                cell(h, "bw_link_bytes_per_s", "GB/s", 1),
            ]
        )
    print("hardware (data/presets/hardware)")
    headers = ["hardware", "RAM GiB", "mem GB/s", "TFLOP/s", "SSD GB/s @128KiB", "SSD GB/s @8MiB", "link GB/s"]
    print(_table(headers, rows, "<>>>>>>"))
    print()
    counts = {tag: 0 for tag in _TAG_LETTER}
    for kind in ("models", "hardware"):
        for entry in rep[kind].values():
            for tag in entry["provenance"].values():
                counts[tag] += 1
    print(
        "provenance: w = witnessed (measured or read off a model card, with source), "
        "p = projected (derived from sourced inputs), a = assumed; "
        + ", ".join(f"{counts[t]} {t}" for t in _TAG_LETTER)
        + " numbers in all"
    )
    print("results derived from any p or a input are projected (SPEC §2); sources: moeroof presets --json")


def _cmd_presets(args: argparse.Namespace) -> int:
    rep = presets_report()
    return _emit(rep, args.json, _print_presets)


# ----------------------------------------------------------------------------- plan


def _non_negative_float(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{flag}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag}: must be a finite number >= 0, got {text!r}")
    return value


def plan_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``plan`` JSON object (issue 3's contract) for parsed arguments."""
    from moeroof.core.units import to_si
    from moeroof.data.presets import load_hardware, load_model
    from moeroof.models.plan import Workload, plan, routing_from_spec

    batch = parse_batch(args.batch)
    cache = _non_negative_float(args.cache_gib, "--cache-gib")
    context = _non_negative_int(args.context, "--context")
    read_kib = None if args.read_size_kib is None else _non_negative_float(args.read_size_kib, "--read-size-kib")
    if read_kib == 0:
        raise UsageError("--read-size-kib: must be > 0")
    ranks = _positive_int(args.ranks, "--ranks")
    model = load_model(args.model)
    hardware = load_hardware(args.hardware)
    routing = routing_from_spec(args.routing, model)
    workload = Workload(
        context_tokens=context,
        cache_bytes=to_si(cache, "GiB"),
        overlap=args.overlap,
        read_size_bytes=None if read_kib is None else to_si(read_kib, "KiB"),
        ranks=ranks,
    )
    rep = plan(model, hardware, workload, routing, batch).to_dict()
    rep["workload"] = {
        "context_tokens": context,
        "cache_bytes": to_si(cache, "GiB"),
        "overlap": args.overlap,
        "read_size_bytes": workload.read_size_bytes,
        "ranks": ranks,
    }
    return rep


def _print_plan(rep: dict[str, Any]) -> None:
    prov = rep["provenance"]
    print(f"net tok/s — {rep['model']} on {rep['hardware']}, routing {rep['routing']}, overlap {rep['overlap']}")
    print(
        f"result: {prov['result']}"
        + (f" (not witnessed: {', '.join(prov['non_witnessed'])})" if prov["non_witnessed"] else "")
    )
    headers = [
        "B",
        "step s",
        "tok/s/agent",
        "net tok/s",
        "bound",
        "SSD GB/token",
        "U/layer",
        "B·K/U",
        "× uncoalesced",
        "× single",
        "× indep-boxes",
        "fits RAM",
    ]
    rows = []
    for i, b in enumerate(rep["batch"]):
        base = rep["baselines"]
        rows.append(
            [
                str(b),
                _fmt(rep["step_seconds"][i], 3),
                _fmt(rep["per_agent_tok_s"][i], 3),
                _fmt(rep["net_tok_s"][i], 3),
                rep["bound"][i],
                _fmt(rep["ssd_bytes_per_token"][i] / 1e9, 3),
                _fmt(rep["union_per_layer"][i], 1),
                _fmt(rep["coalescing_ratio"][i], 2),
                _fmt(base["uncoalesced"]["multiple"][i], 2),
                _fmt(base["single"]["multiple"][i], 2),
                _fmt(base["independent-boxes"]["multiple"][i], 3),
                "yes" if rep["fits_in_memory"][i] else "NO",
            ]
        )
    print(_table(headers, rows, ">>>><>>>>>><"))
    for t in rep["transitions"]:
        print(f"regime change: {t['from']} → {t['to']} at B* = {t['batch']}")
    for note in rep["notes"]:
        print(f"note: {note}")
    print("multiples: net tok/s against each named baseline; B·K/U is against uncoalesced")


def _cmd_plan(args: argparse.Namespace) -> int:
    rep = plan_report(args)
    return _emit(rep, args.json, _print_plan)


# ----------------------------------------------------------------------------- cache and mrc


def _add_cache_parsers(sub: Any) -> None:
    from moeroof.models.cache import POLICIES

    pc = sub.add_parser(
        "cache",
        help="simulate an expert cache policy on a trace: hits, misses, bytes streamed per step",
        description=(
            "Replay a trace's request stream (each step requests the batch's union of experts "
            "layer by layer, ascending id within a layer) through one cache policy (SPEC §5)."
        ),
    )
    pc.add_argument("path", metavar="TRACE", help="trace .npz / .npy")
    pc.add_argument("--policy", required=True, choices=POLICIES, help="eviction policy (belady = offline optimum)")
    pc.add_argument(
        "--capacity-experts", default=None, help="cache capacity in experts (one (layer, expert) item each)"
    )
    pc.add_argument("--capacity-gib", default=None, help="cache capacity in GiB (needs --expert-bytes)")
    pc.add_argument("--expert-bytes", default=None, help="bytes per expert (streamed per miss)")
    pc.add_argument(
        "--scope",
        default="global",
        choices=("global", "layer"),
        help="one shared cache or one per layer (default global)",
    )
    pc.add_argument("--warmup", default="0", help="steps simulated but not counted (default 0)")
    pc.add_argument(
        "--histogram", default=None, help="histogram .csv to pin the static hot set from (default: the trace's own)"
    )
    pc.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    pc.set_defaults(func=_cmd_cache)

    pm = sub.add_parser(
        "mrc",
        help="LRU hit rate at every capacity in one pass (stack distances), or a SHARDS estimate",
        description=(
            "Exact LRU hit-rate curve for every capacity in experts (Mattson stack distances; one "
            "cache shared by all layers, every request counted), or with --sample-rate the SHARDS "
            "spatial-sampling estimate; the Che approximation from the trace's request counts beside it."
        ),
    )
    pm.add_argument("path", metavar="TRACE", help="trace .npz / .npy")
    pm.add_argument("--sample-rate", default=None, help="SHARDS sampling rate R in (0, 1] (default: exact)")
    pm.add_argument("--seed", default="0", help="seed of the SHARDS hash (default 0)")
    pm.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    pm.set_defaults(func=_cmd_mrc)


def _read_cache_trace(path_text: str) -> Any:
    from moeroof.data.io import read_trace

    path = Path(path_text)
    if path.suffix.lower() == ".csv":
        raise InputError(path, "-", "file", "expected a trace .npz / .npy, got a histogram .csv")
    return read_trace(path)


def _positive_float(text: str, flag: str) -> float:
    value = _non_negative_float(text, flag)
    if value <= 0:
        raise UsageError(f"{flag}: must be > 0, got {text!r}")
    return value


def cache_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``cache`` JSON object for parsed arguments."""
    from moeroof.core.units import to_si
    from moeroof.models.cache import requests_from_trace, simulate

    if (args.capacity_experts is None) == (args.capacity_gib is None):
        raise UsageError("give exactly one of --capacity-experts N or --capacity-gib X")
    expert_bytes = None if args.expert_bytes is None else _positive_float(args.expert_bytes, "--expert-bytes")
    if args.capacity_gib is not None and expert_bytes is None:
        raise UsageError("--capacity-gib needs --expert-bytes (bytes per expert)")
    warmup = _non_negative_int(args.warmup, "--warmup")
    if args.histogram is not None and args.policy != "static":
        raise UsageError("--histogram applies to --policy static only")
    trace = _read_cache_trace(args.path)
    if warmup >= trace.steps:
        raise UsageError(f"--warmup: {warmup} leaves no counted step (the trace has {trace.steps} steps)")
    notes: list[str] = []
    if args.capacity_experts is not None:
        cap_experts = _non_negative_int(args.capacity_experts, "--capacity-experts")
        capacity, unit, cap_bytes = float(cap_experts), "experts", None
        if expert_bytes is not None:
            cap_bytes = cap_experts * expert_bytes
    else:
        cap_bytes = to_si(_non_negative_float(args.capacity_gib, "--capacity-gib"), "GiB")
        capacity, unit = cap_bytes, "bytes"
        cap_experts = int(math.floor(cap_bytes / expert_bytes + 1e-9))
    pinned = None
    if args.histogram is not None:
        hist = read_histogram(args.histogram)
        if hist.experts != trace.experts:
            raise InputError(
                hist.path, "-", "experts", f"histogram has E={hist.experts} but the trace has E={trace.experts}"
            )
        if hist.layers_summed or hist.layers == 1 and trace.layers > 1:
            pinned = np.tile(hist.counts[0], trace.layers).astype(float)
            notes.append("histogram summed over layers: the same experts are ranked hot in every layer")
        elif hist.layers != trace.layers:
            raise InputError(
                hist.path, "-", "layers", f"histogram has {hist.layers} layers but the trace has {trace.layers}"
            )
        else:
            pinned = hist.counts.astype(float).ravel()
        notes.append(f"static: hot set pinned from the histogram {hist.path}")
    requests = requests_from_trace(trace.topk, trace.experts)
    res = simulate(
        requests,
        capacity,
        policy=args.policy,
        capacity_unit=unit,
        item_bytes=expert_bytes,
        scope=args.scope,
        warmup_steps=warmup,
        pinned=pinned,
    )
    notes.extend(res.notes)
    if args.scope == "layer":
        per = math.floor(cap_experts / trace.layers + 1e-9) if unit == "experts" else None
        notes.append(
            f"scope layer: one cache per layer with capacity / {trace.layers} each"
            + (f" ({per} experts; the remainder is unused)" if per is not None else "")
        )
    if warmup:
        notes.append(f"the first {warmup} steps are simulated but not counted (warm-up)")
    bytes_unit = res.bytes_unit
    if bytes_unit == "experts":
        notes.append("no --expert-bytes: streamed volume counted in experts, not bytes")
    rep: dict[str, Any] = {
        "policy": args.policy,
        "capacity_experts": cap_experts,
        "capacity_bytes": cap_bytes,
        "scope": args.scope,
        "warmup_steps": warmup,
        "requests": res.requests,
        "hits": res.hits,
        "misses": res.misses,
        "hit_rate": res.hit_rate,
        "bytes_streamed_per_step": res.mean_bytes_streamed_per_step,
        "unit": bytes_unit,
        "oracle": args.policy == "belady" or (args.policy == "static" and pinned is None),
        "per_step": {
            "hits": res.hits_per_step,
            "misses": res.misses_per_step,
            "bytes_streamed": res.bytes_streamed_per_step,
        },
        "steps": trace.steps,
        "streams": trace.streams,
        "layers": trace.layers,
        "experts": trace.experts,
        "source": str(trace.path),
        "provenance": trace.meta.get("provenance"),
        "notes": notes,
    }
    return _jsonable(rep)


def _print_cache(rep: dict[str, Any]) -> None:
    print(f"expert cache — {rep['source']} (provenance: {rep['provenance'] or 'unknown'})")
    print(
        f"policy {rep['policy']}  capacity {rep['capacity_experts']} experts"
        + (f" ({rep['capacity_bytes'] / 2**30:.3g} GiB)" if rep["capacity_bytes"] is not None else "")
        + f"  scope {rep['scope']}  warm-up {rep['warmup_steps']} of {rep['steps']} steps"
    )
    rows = [
        [
            str(rep["requests"]),
            str(rep["hits"]),
            str(rep["misses"]),
            _fmt(rep["hit_rate"], 4),
            _fmt(rep["bytes_streamed_per_step"], 1) + " experts"
            if rep["unit"] == "experts"
            else f"{rep['bytes_streamed_per_step'] / 1e9:.3f} GB",
        ]
    ]
    print(_table(["requests", "hits", "misses", "hit rate", "streamed/step"], rows, ">>>>>"))
    for note in rep["notes"]:
        print(f"note: {note}")


def _cmd_cache(args: argparse.Namespace) -> int:
    rep = cache_report(args)
    return _emit(rep, args.json, _print_cache)


def mrc_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``mrc`` JSON object for parsed arguments."""
    from moeroof.models.cache import (
        che_hit_curve,
        lru_hit_curve,
        request_histogram,
        requests_from_trace,
        shards_hit_curve,
    )

    rate = None if args.sample_rate is None else _positive_float(args.sample_rate, "--sample-rate")
    if rate is not None and rate > 1:
        raise UsageError(f"--sample-rate: must lie in (0, 1], got {args.sample_rate!r}")
    seed = _non_negative_int(args.seed, "--seed")
    trace = _read_cache_trace(args.path)
    requests = requests_from_trace(trace.topk, trace.experts)
    if len(requests) == 0:
        raise InputError(trace.path, "-", "topk", "the trace requests no expert (all padding)")
    notes = ["one LRU cache shared by all layers, unit sizes, every request counted (no warm-up)"]
    if rate is None:
        cap, hit = lru_hit_curve(requests)
        method = "exact-lru (Mattson stack distances)"
    else:
        cap, hit = shards_hit_curve(requests, rate, seed=seed)
        method = "shards"
        notes.append(
            f"SHARDS estimate at rate {rate:g}: capacities below {math.ceil(1 / rate)} experts are not resolved"
        )
    che = che_hit_curve(request_histogram(requests), cap)
    notes.append(
        "che: independent-reference approximation from the trace's request counts; "
        "it ignores the step order a trace has (an approximation, not a bound)"
    )
    return _jsonable(
        {
            "capacity_experts": cap,
            "hit_rate": hit,
            "che_hit_rate": che,
            "method": method,
            "sample_rate": rate,
            "requests": len(requests),
            "distinct_items": int(np.unique(requests.items).size),
            "steps": trace.steps,
            "layers": trace.layers,
            "experts": trace.experts,
            "source": str(trace.path),
            "provenance": trace.meta.get("provenance"),
            "notes": notes,
        }
    )


def _print_mrc(rep: dict[str, Any]) -> None:
    print(f"LRU hit rate by capacity — {rep['source']} ({rep['method']})")
    cap = rep["capacity_experts"]
    picks = sorted({int(round(q * (len(cap) - 1))) for q in np.linspace(0, 1, 11)})
    rows = [[str(cap[i]), _fmt(rep["hit_rate"][i], 4), _fmt(rep["che_hit_rate"][i], 4)] for i in picks]
    print(_table(["capacity (experts)", "hit rate", "che"], rows, ">>>"))
    for note in rep["notes"]:
        print(f"note: {note}")


def _cmd_mrc(args: argparse.Namespace) -> int:
    rep = mrc_report(args)
    return _emit(rep, args.json, _print_mrc)


# ----------------------------------------------------------------------------- split


def _cmd_split(args: argparse.Namespace) -> int:
    from moeroof.models.partition import split_report

    rep = split_report(
        args.path,
        _positive_int(args.ranks, "--ranks"),
        args.method,
        args.rank_speed,
        batch=_positive_int(args.batch, "--batch"),
        cache_gib_per_rank=_non_negative_float(args.cache_gib, "--cache-gib"),
        model=args.model,
        hardware=args.hardware,
    )
    if args.json:
        print(json.dumps(rep, indent=2, allow_nan=False))
        return 0
    print(f"expert split — {args.path}, {rep['ranks']} ranks, method {rep['method']}")
    headers = ["rank", "experts", "load rows"]
    pred = rep.get("predicted_step_seconds")
    if pred is not None:
        headers.append("predicted step s")
    rows = []
    for r in range(rep["ranks"]):
        row = [str(r), str(rep["experts_per_rank"][r]), str(rep["load_rows"][r])]
        if pred is not None:
            row.append(_fmt(pred[r], 3))
        rows.append(row)
    print(_table(headers, rows, ">" * len(headers)))
    print(f"imbalance (max/mean load rows): {rep['imbalance']:.4f}×")
    for key, value in rep.get("imbalance_by", {}).items():
        print(f"  imbalance by {key}: {value:.4f}×")
    if rep.get("tok_s") is not None:
        print(
            f"predicted step {rep['step_seconds']:.3f} s, {rep['tok_s']:.3f} tok/s (the pair runs at its slowest rank)"
        )
    for note in rep.get("notes", []):
        print(f"note: {note}")
    return 0


# ----------------------------------------------------------------------------- calibrate and bench


def _add_witness_parsers(sub: Any) -> None:
    from moeroof.witness.measure import READ_PATHS

    pk = sub.add_parser(
        "calibrate",
        help="measure this box (disk reads bypassing the page cache, memory, float32 FLOP/s) into a hardware TOML",
        description=(
            "Measure random and sequential read bandwidth of a scratch file at 128 KiB to 16 MiB "
            "reads (O_DIRECT, or posix_fadvise DONTNEED where O_DIRECT is refused), page-cached "
            "reads, memory copy bandwidth and float32 matmul FLOP/s; write them as a witnessed "
            "hardware TOML (presets schema). Scratch files are removed on every exit."
        ),
    )
    pk.add_argument(
        "--output", default="calibrated.toml", help="hardware TOML to write, atomically (default calibrated.toml)"
    )
    pk.add_argument("--name", default=None, help="preset name in the TOML (default calibrated-DATE)")
    pk.add_argument("--file-mib", default="2048", help="scratch file size in MiB (default 2048)")
    pk.add_argument(
        "--seconds",
        default="30",
        help="time budget of the measurements in seconds (default 30; writing the file comes on top)",
    )
    pk.add_argument("--mem-mib", default="256", help="array size of the memory-copy measurement in MiB (default 256)")
    pk.add_argument("--matmul-n", default="2048", help="matrix size n of the float32 n×n matmul (default 2048)")
    pk.add_argument("--scratch-dir", default=None, help="where the scratch file goes (default: the output's folder)")
    pk.add_argument(
        "--read-path",
        default="auto",
        choices=READ_PATHS,
        help="bypass the page cache by O_DIRECT, fadvise, or auto (default)",
    )
    pk.add_argument("--seed", default="0", help="seed of the random read offsets (default 0)")
    pk.add_argument("--quiet", action="store_true", help="no progress on stderr")
    pk.add_argument("--json", action="store_true", help="print one JSON object of every measurement instead of a table")
    pk.set_defaults(func=_cmd_calibrate)

    pb = sub.add_parser(
        "bench",
        help="measure decode steps of a synthetic MoE streamed from disk, coalesced and uncoalesced",
        description=(
            "Write a synthetic MoE stack (E experts × L layers of float32 d×f and f×d matrices) to a "
            "scratch file and time decode steps of B agents: uncoalesced (each token reads and "
            "applies its own K experts) and coalesced (the union read once per layer, one grouped "
            "matmul per expert). Reads bypass the page cache as in `moeroof calibrate`."
        ),
    )
    pb.add_argument("--experts", default=None, help="experts per layer E (default 32, or the trace's)")
    pb.add_argument("--layers", default="4", help="MoE layers L (default 4)")
    pb.add_argument("--top-k", default=None, help="experts per token K (default 4, or the trace's)")
    pb.add_argument("--d-model", default="1024", help="hidden size d (default 1024)")
    pb.add_argument("--d-ff", default="1024", help="expert width f (default 1024; expert bytes = 2·d·f·4)")
    pb.add_argument("--batch", default="1,2,4,8,16,32", help="batch sizes, comma-separated (default 1,2,4,8,16,32)")
    pb.add_argument(
        "--mode",
        default="both",
        choices=("both", "uncoalesced", "coalesced"),
        help="which mode(s) to run (default both)",
    )
    pb.add_argument("--routing", default=None, help="routing model: uniform or zipf:S (default uniform)")
    pb.add_argument("--trace", default=None, help="routing from a trace .npz/.npy instead of a model")
    pb.add_argument("--steps", default="5", help="counted decode steps per (mode, B) (default 5)")
    pb.add_argument("--warmup", default="1", help="uncounted warm-up steps per (mode, B) (default 1)")
    pb.add_argument(
        "--seed", default="0", help="seed of numpy.random.default_rng for routing, gates and weights (default 0)"
    )
    pb.add_argument("--scratch-dir", default=None, help="where the stack file goes (default: the system temp dir)")
    pb.add_argument(
        "--read-path",
        default="auto",
        choices=READ_PATHS,
        help="bypass the page cache by O_DIRECT, fadvise, or auto (default)",
    )
    pb.add_argument("--output", default=None, help="also write the JSON report to this file, atomically")
    pb.add_argument("--quiet", action="store_true", help="no progress on stderr")
    pb.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    pb.set_defaults(func=_cmd_bench)


def _interrupted() -> int:
    print("error: interrupted (scratch files removed)", file=sys.stderr)
    return 130


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from moeroof.witness.measure import Progress, calibrate

    file_mib = _positive_float(args.file_mib, "--file-mib")
    seconds = _positive_float(args.seconds, "--seconds")
    mem_mib = _positive_float(args.mem_mib, "--mem-mib")
    matmul_n = _positive_int(args.matmul_n, "--matmul-n")
    seed = _non_negative_int(args.seed, "--seed")
    command = [
        "moeroof",
        "calibrate",
        "--output",
        args.output,
        "--file-mib",
        f"{file_mib:g}",
        "--seconds",
        f"{seconds:g}",
        "--mem-mib",
        f"{mem_mib:g}",
        "--matmul-n",
        str(matmul_n),
        "--read-path",
        args.read_path,
        "--seed",
        str(seed),
    ]
    if args.scratch_dir is not None:
        command += ["--scratch-dir", args.scratch_dir]
    if args.name is not None:
        command += ["--name", args.name]
    import shlex

    try:
        cal = calibrate(
            args.output,
            file_bytes=int(file_mib * 2**20),
            seconds=seconds,
            mem_bytes=int(mem_mib * 2**20),
            matmul_n=matmul_n,
            scratch_dir=args.scratch_dir,
            read_path=args.read_path,
            name=args.name,
            seed=seed,
            command=shlex.join(command),
            progress=Progress("calibrate", enabled=not args.quiet),
        )
    except KeyboardInterrupt:
        return _interrupted()
    except OSError as exc:
        raise UsageError(f"calibrate: {exc}") from None
    rep = _jsonable(cal.to_dict())
    if args.json:
        print(json.dumps(rep, indent=2, allow_nan=False))
        return 0
    print(f"calibrated {rep['name']} → {rep['output']}  ({rep['date']}, witnessed)")
    print(f"read path: {rep['read_path']} ({rep['read_method']})")
    rows = []
    for i, size in enumerate(rep["ssd_random"]["read_size_bytes"]):
        rows.append(
            [
                f"{size / 2**10:g} KiB" if size < 2**20 else f"{size / 2**20:g} MiB",
                _fmt(rep["ssd_random"]["bytes_per_s"][i] / 1e9, 3),
                _fmt(rep["ssd_sequential"]["bytes_per_s"][i] / 1e9, 3),
            ]
        )
    print(_table(["read size", "random GB/s", "sequential GB/s"], rows, ">>>"))
    print(
        f"page-cached reads: {rep['page_cache_bytes_per_s'] / 1e9:.2f} GB/s at {rep['page_cache_read_size_bytes'] / 2**20:g} MiB"
    )
    print(
        f"memory copy: {rep['bw_mem_bytes_per_s'] / 1e9:.2f} GB/s (read + write)   float32 matmul: {rep['flops_per_s'] / 1e9:.1f} GFLOP/s"
    )
    print(
        f"RAM {rep['ram_bytes'] / 2**30:.2f} GiB, OS reserve {rep['os_reserve_bytes'] / 2**30:.2f} GiB; took {rep['wall_seconds']:.1f} s"
    )
    for note in rep["notes"]:
        print(f"note: {note}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    import shlex

    from moeroof.witness.bench import MODES, StackShape, run_bench
    from moeroof.witness.measure import Progress, _atomic_write_text

    batch = parse_batch(args.batch)
    layers = _positive_int(args.layers, "--layers")
    d_model = _positive_int(args.d_model, "--d-model")
    d_ff = _positive_int(args.d_ff, "--d-ff")
    steps = _positive_int(args.steps, "--steps")
    warmup = _non_negative_int(args.warmup, "--warmup")
    seed = _non_negative_int(args.seed, "--seed")
    trace = None
    trace_label = ""
    if args.trace is not None:
        if args.routing is not None:
            raise UsageError("give either --routing or --trace, not both")
        tr = _read_cache_trace(args.trace)
        trace, trace_label = np.asarray(tr.topk), f"trace {tr.path.name}"
        experts = tr.experts if args.experts is None else _positive_int(args.experts, "--experts")
        top_k = tr.top_k if args.top_k is None else _positive_int(args.top_k, "--top-k")
        if experts != tr.experts or top_k != tr.top_k:
            raise UsageError(f"--experts/--top-k: the trace has E={tr.experts}, K={tr.top_k}")
    else:
        experts = 32 if args.experts is None else _positive_int(args.experts, "--experts")
        top_k = 4 if args.top_k is None else _positive_int(args.top_k, "--top-k")
    if top_k > experts:
        raise UsageError(f"--top-k: K={top_k} exceeds --experts E={experts}")
    routing = args.routing or "uniform"
    modes = MODES if args.mode == "both" else (args.mode,)
    command = [
        "moeroof",
        "bench",
        "--experts",
        str(experts),
        "--layers",
        str(layers),
        "--top-k",
        str(top_k),
        "--d-model",
        str(d_model),
        "--d-ff",
        str(d_ff),
        "--batch",
        ",".join(map(str, batch)),
        "--mode",
        args.mode,
    ]
    command += ["--trace", args.trace] if args.trace is not None else ["--routing", routing]
    command += ["--steps", str(steps), "--warmup", str(warmup), "--seed", str(seed), "--read-path", args.read_path]
    if args.scratch_dir is not None:
        command += ["--scratch-dir", args.scratch_dir]
    try:
        rep = run_bench(
            StackShape(experts, layers, d_model, d_ff),
            top_k,
            batch,
            modes=modes,
            routing=routing,
            trace=trace,
            trace_label=trace_label,
            steps=steps,
            warmup_steps=warmup,
            seed=seed,
            scratch_dir=args.scratch_dir,
            read_path=args.read_path,
            command=shlex.join(command),
            progress=Progress("bench", enabled=not args.quiet),
        )
    except KeyboardInterrupt:
        return _interrupted()
    except OSError as exc:
        raise UsageError(f"bench: {exc}") from None
    rep = _jsonable(rep)
    text = json.dumps(rep, indent=2, allow_nan=False)
    if args.output is not None:
        _atomic_write_text(Path(args.output), text + "\n")
    if args.json:
        print(text)
        return 0
    print(
        f"bench — E={experts} L={layers} K={top_k} d={d_model} f={d_ff} (expert {rep['expert_bytes'] / 2**20:.3g} MiB), "
        f"routing {rep['routing']}, {steps} steps (+{warmup} warm-up), witnessed"
    )
    print(f"read path: {rep['read_path']} ({rep['read_method']})")
    rows = []
    for i, b in enumerate(rep["batch"]):
        rows.append(
            [
                rep["mode"][i],
                str(b),
                _fmt(rep["step_seconds"][i], 4),
                _fmt(rep["net_tok_s"][i], 2),
                _fmt(rep["per_agent_tok_s"][i], 2),
                _fmt(rep["bytes_read_per_step"][i] / 1e6, 1),
                _fmt(rep["union_per_layer"][i], 2),
                _fmt(rep["coalescing_ratio"][i], 2),
            ]
        )
    print(
        _table(
            ["mode", "B", "step s", "net tok/s", "tok/s/agent", "MB read/step", "U/layer", "B·K/U"], rows, "<>>>>>>>"
        )
    )
    print("B·K/U is the measured coalescing ratio against the uncoalesced baseline")
    if args.output is not None:
        print(f"wrote {args.output}")
    return 0


# ----------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or usage)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse usage error (2) or --help / --version (0)
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    try:
        return args.func(args)
    except (InputError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # a library check on the inputs (e.g. batch sizes, K > E)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `moeroof ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
