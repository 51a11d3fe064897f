"""``moeroof`` command line: the union curve and skew fits from the shell.

::

    moeroof union --uniform E K --batch 1,8,64 [--layers L] [--json]
    moeroof union PATH --batch 1,8,64 [--bootstrap 200] [--seed 0] [--draws 4] [--json]
    moeroof fit HISTOGRAM [--bootstrap 100] [--gof-sims 99] [--seed 0] [--json]

PATH is a histogram ``.csv`` (rarefaction / extrapolation, :func:`moeroof.union.union_histogram`)
or a trace ``.npz`` / ``.npy`` (measured, :func:`moeroof.union.union_from_trace`). Every
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

from . import __version__
from .io import Histogram, InputError, Trace, load_any, read_histogram

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
        description="MoE inference analysis: expert union U(B) and routing-skew fits.",
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
    pu.add_argument("--uniform", nargs=2, metavar=("E", "K"), help="closed form for uniform routing over E experts, top-K")
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


# ----------------------------------------------------------------------------- union


def union_report(args: argparse.Namespace) -> dict[str, Any]:
    """Compute the union curve the ``union`` subcommand prints, as a JSON-ready dict."""
    from .union import union_from_trace, union_histogram, union_uniform

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
                data.counts, data.tokens, batch, top_k=data.top_k, experts=data.experts,
                bootstrap=bootstrap, rng=rng, level=level,
            )
            if data.layers_summed:
                notes.append(
                    "histogram summed over layers: per-layer skew averages out, so this union "
                    "overstates the per-layer union (SPEC §3); prefer per-layer data"
                )
            if any(m == "extrapolation" for m in curve.method):
                notes.append(f"batch sizes above the tokens counted (T = {int(data.tokens.min())}) are extrapolated (Chao)")
        else:
            assert isinstance(data, Trace)
            curve = union_from_trace(
                data.topk, batch, experts=data.experts, rng=rng, draws=draws,
                bootstrap=bootstrap, level=level,
            )
            if any(m == "none" for m in curve.method):
                notes.append(f"batch sizes above the live streams of every step (at most {data.streams}) have no estimate")
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
        rows.append([str(b), _fmt(rep["union_per_layer"][j]), ci, _fmt(rep["union_total"][j]), _fmt(rep["coalescing_ratio"][j]), methods[j]])
    headers = ["B", "union/layer", f"{pct} CI", "union total", f"B·K/U vs {rep['baseline']}", "method"]
    print(_table(headers, rows, ">>>>><"))
    for note in rep["notes"]:
        print(f"note: {note}")


def _cmd_union(args: argparse.Namespace) -> int:
    rep = union_report(args)
    if args.json:
        print(json.dumps(rep, indent=2, allow_nan=False))
    else:
        _print_union(rep)
    return 0


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
    from .fit import fit_histogram  # lazily: the union command works without it

    result = fit_histogram(hist.counts, hist.top_k, rng=np.random.default_rng(seed), bootstrap=bootstrap, gof_sims=gof_sims)
    rep = _jsonable(dict(result.to_dict()))
    rep.setdefault("source", str(hist.path))
    rep.setdefault("provenance", hist.meta.get("provenance"))
    rep.setdefault("layers_summed", hist.layers_summed)
    if args.json:
        print(json.dumps(rep, indent=2, allow_nan=False))
    else:
        _print_fit(rep)
    return 0


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
