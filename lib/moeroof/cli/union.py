"""``moeroof union``: expected distinct experts per layer U(B) and the coalescing ratio B·K/U.

::

    moeroof union --uniform E K --batch 1,8,64 [--layers L] [--json]
    moeroof union PATH --batch 1,8,64 [--bootstrap 200] [--seed 0] [--draws 4] [--level 0.95] [--json]

PATH is a histogram ``.csv`` (rarefaction / extrapolation, :func:`moeroof.models.union.union_histogram`)
or a trace ``.npz`` / ``.npy`` (measured, :func:`moeroof.models.union.union_from_trace`). Every
coalescing ratio is ``B·K / U(B)`` against the ``uncoalesced`` baseline.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.cli.flags import (
    BATCH_HELP,
    EXPERTS,
    LAYERS,
    REPLICATES,
    BatchList,
    Count,
    Real,
    UsageError,
    add_default,
    add_seed,
    check_replicate_memory,
)
from moeroof.cli.inputs import add_meta_arguments, load_input, read_trace_arg
from moeroof.cli.output import add_output_arguments, emit, fmt, jsonable, print_notes, table
from moeroof.core.limits import MAX_BOOTSTRAP_COUNTS, check_allocation
from moeroof.data.io import Histogram, InputError, Trace, check_incidence_sums


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "union",
        help="expected distinct experts U(B) per layer and the coalescing ratio B·K/U",
        description=(
            "Expected distinct experts per layer U(B) for batches of B tokens, from the uniform "
            "closed form, a histogram (rarefaction/extrapolation) or a trace (measured)."
        ),
    )
    p.add_argument("path", nargs="?", metavar="PATH", help="histogram .csv or trace .npz/.npy")
    p.add_argument(
        "--uniform",
        nargs=2,
        type=EXPERTS,
        metavar=("E", "K"),
        help="closed form for uniform routing over E experts, top-K",
    )
    p.add_argument("--batch", required=True, type=BatchList(), help=BATCH_HELP)
    p.add_argument("--layers", type=LAYERS, help="layers for --uniform (default 1)")
    p.add_argument(
        "--bootstrap", default="200", type=REPLICATES, help="bootstrap replicates for the band (default 200; 0 = none)"
    )
    add_default(p, "--draws", "4", "random stream subsets per step for a trace", type=Count(min=1, max=REPLICATES.max))
    add_default(
        p, "--level", "0.95", "confidence level of the band", type=Real(min=0.0, max=1.0, open_low=True, open_high=True)
    )
    add_seed(p, "numpy.random.default_rng")
    add_meta_arguments(p)
    add_output_arguments(p)


def _uniform_curve(args: argparse.Namespace) -> tuple[Any, str, str]:
    """``(curve, provenance, source)`` of ``--uniform E K``: the closed form."""
    from moeroof.models.union import union_uniform

    if args.path is not None:
        raise UsageError("give either PATH or --uniform E K, not both")
    experts, top_k = args.uniform
    if top_k > experts:
        raise UsageError(f"--uniform: top_k K={top_k} exceeds experts E={experts}")
    layers = 1 if args.layers is None else args.layers
    # the closed form holds (layers × batch sizes) arrays: bounded before they are made
    check_replicate_memory("--layers", layers, 4 * len(args.batch), "batch sizes × 4 (the curve and its band)")
    curve = union_uniform(experts, top_k, args.batch, layers=layers)
    return curve, "model", f"uniform routing (E={experts}, K={top_k})"


#: (layers × experts) arrays of 8 bytes that rarefying one chunk of replicates holds at once (its
#: keys, their unique inverse, a sparse count matrix, the draws: about 8; twice that, as margin)
_CELL_TEMPORARIES = 16


def _histogram_curve(data: Histogram, args: argparse.Namespace, rng: np.random.Generator, notes: list[str]) -> Any:
    """The union curve of a histogram (with its notes added to ``notes``)."""
    from moeroof.models.union import union_histogram

    batch, bootstrap = args.batch, args.bootstrap
    notes.extend(check_incidence_sums(data))
    # what union_histogram holds: each replicate's curve (bootstrap × layers × batch sizes), and
    # one chunk of replicates at a time (drawn and rarefied in chunks of at most a few (layers ×
    # experts) arrays, whatever --bootstrap is). This sized every replicate's draws at once, and
    # refused a 40-byte histogram declaring E = 2^20 that runs in 0.15 GB ("--bootstrap: … would
    # need 4.69 GiB" under ulimit -v 4000000): the file's E was blamed on the flag
    check_replicate_memory("--bootstrap", bootstrap, data.layers * max(len(batch), 1), "layers × batch sizes")
    counts = bootstrap * data.layers * data.experts  # drawn in chunks: a bound on the run's time
    if counts > MAX_BOOTSTRAP_COUNTS:
        raise UsageError(
            f"--bootstrap: {bootstrap} replicates × {data.layers} layers × {data.experts} experts of {data.path.name} "
            f"= {counts:.3g} counts to draw and rarefy would need many minutes; at most {MAX_BOOTSTRAP_COUNTS:.3g} "
            "are drawn in one run (give fewer replicates)"
        )
    try:
        check_allocation(_CELL_TEMPORARIES * data.layers * data.experts, 8, "rarefaction's (layers × experts) arrays")
    except ValueError as err:
        raise InputError(data.path, "-", "experts", str(err)) from None
    curve = union_histogram(
        data.counts,
        data.tokens,
        batch,
        top_k=data.top_k,
        experts=data.experts,
        bootstrap=bootstrap,
        rng=rng,
        level=args.level,
    )
    if data.layers_summed:
        notes.append(
            "histogram summed over layers: per-layer skew averages out, so this union "
            "overstates the per-layer union (one pseudo-layer mixes every layer's hot set); prefer per-layer data"
        )
    if any(m == "extrapolation" for m in curve.method):
        notes.append(f"batch sizes above the tokens counted (T = {int(data.tokens.min())}) are extrapolated (Chao)")
    return curve


def _trace_curve(data: Trace, args: argparse.Namespace, rng: np.random.Generator, notes: list[str]) -> Any:
    """The union curve of a trace (with its notes added to ``notes``)."""
    from moeroof.models.union import union_from_trace

    batch, bootstrap, draws = args.batch, args.bootstrap, args.draws
    # one chunk of steps: (steps, draws, B, layers, K) ids; the band: (bootstrap, steps, layers)
    b_max = min(max(batch), data.streams)
    per = min(data.steps, 256) * b_max * data.layers * data.top_k
    check_replicate_memory("--draws", draws, per, "steps (≤ 256) × streams × layers × K")
    check_replicate_memory("--bootstrap", bootstrap, data.steps * data.layers, "steps × layers")
    curve = union_from_trace(
        data.topk, batch, experts=data.experts, rng=rng, draws=draws, bootstrap=bootstrap, level=args.level
    )
    if any(m == "none" for m in curve.method):
        notes.append(f"batch sizes above the live streams of every step (at most {data.streams}) have no estimate")
    return curve


def union_report(args: argparse.Namespace) -> dict[str, Any]:
    """Compute the union curve the ``union`` subcommand prints, as a JSON-ready dict."""
    level = args.level
    rng = np.random.default_rng(args.seed)
    notes: list[str] = []
    provenance: str | None

    if args.uniform is not None:
        curve, provenance, source = _uniform_curve(args)
    else:
        if args.path is None:
            raise UsageError("give a histogram/trace PATH or --uniform E K")
        if args.layers is not None:
            raise UsageError("--layers applies to --uniform only (a file carries its own layers)")
        # a trace is read a block of steps at a time as union_from_trace goes through it (its ids
        # are not held: 340 MB at 10^8 requests); a histogram as load_input reads it
        data = (
            read_trace_arg(args.path, args, lazy=True)
            if Path(args.path).suffix.lower() in (".npy", ".npz")
            else load_input(args.path, args)
        )
        source = str(data.path)
        provenance = data.meta.get("provenance")
        if isinstance(data, Histogram):
            curve = _histogram_curve(data, args, rng, notes)
        else:
            assert isinstance(data, Trace)
            curve = _trace_curve(data, args, rng, notes)
    methods = list(curve.method)
    with warnings.catch_warnings():
        # a batch size no step of a trace can fill is all-NaN: reported as null, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = curve.mean
        ratio = curve.coalescing_ratio
    return jsonable(
        {
            "batch": [int(b) for b in curve.batch],
            "union_per_layer": mean,
            "union_total": curve.total,
            "ci_low": curve.mean_band.low,
            "ci_high": curve.mean_band.high,
            "level": level,
            "coalescing_ratio": ratio,
            "baseline": curve.baseline,
            "method": methods[0] if len(set(methods)) == 1 else methods,
            **{k: getattr(curve, k) for k in ("experts", "top_k", "layers")},
            "provenance": provenance,
            "source": source,
            "notes": notes,
        }
    )


def print_union(rep: dict[str, Any]) -> None:
    pct = f"{rep['level'] * 100:g}%"
    print(f"U(B): distinct experts per layer — {rep['source']}")
    print(
        f"experts E={rep['experts']}  top_k K={rep['top_k']}  layers={rep['layers']}  "
        f"provenance: {rep['provenance'] or 'unknown'}  baseline: {rep['baseline']}"
    )
    rows = [  # the CSV's rows, the band in one cell
        [str(b), fmt(u), "-" if lo is None or hi is None else f"[{fmt(lo)}, {fmt(hi)}]", fmt(total), fmt(ratio), m]
        for b, u, lo, hi, total, ratio, m in union_csv(rep)[1]
    ]
    headers = ["B", "union/layer", f"{pct} CI", "union total", f"B·K/U vs {rep['baseline']}", "method"]
    print(table(headers, rows, ">>>>><"))
    print_notes(rep["notes"])


#: ``--format csv``: one row per batch size
CSV_COLUMNS = ("batch", "union_per_layer", "ci_low", "ci_high", "union_total", "coalescing_ratio", "method")


def union_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per batch size (the band at ``level``; B·K/U against ``baseline``)."""
    n = len(rep["batch"])
    methods = rep["method"] if isinstance(rep["method"], list) else [rep["method"]] * n
    cols = [rep[c] for c in CSV_COLUMNS[:-1]] + [methods]
    return list(CSV_COLUMNS), [[col[i] for col in cols] for i in range(n)]


def run(args: argparse.Namespace) -> int:
    return emit(union_report(args), args, print_union, csv_table=union_csv)
