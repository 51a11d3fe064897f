"""``moeroof mrc``: the LRU hit rate at every cache capacity of a trace in one pass (Mattson
stack distances), or the SHARDS sampling estimate, with the Che approximation beside it.

::

    moeroof mrc TRACE [--scope global|layer] [--sample-rate R [--slices S]] [--seed 0]
                [--lookup layer|request] [--che grid|all] [--scheduler ADDRESS | --workers N]
                [--format table|json|csv] [--output FILE]

The table prints hit rates in % (the JSON and the CSV keep fractions).

Scope global (default): one LRU cache shared by all layers, capacity in experts. The exact
curve is one pass in one process (a request's stack distance counts every layer's items, so it
does not split); ``--sample-rate R`` estimates it by SHARDS, and with ``--slices S``,
``--workers N`` or ``--scheduler`` the sampled hash range is cut into S disjoint slices, one
task each, whose spread states the error (:func:`moeroof.run.shard.shards_curve_sharded`).
Scope layer: one LRU cache per layer, the same C experts in each: ``capacity_experts`` is the
whole cache (L·C, as ``cache --capacity-experts`` reads it), ``capacity_experts_per_layer`` is C; exact, its layers sharded
over the workers (:func:`moeroof.run.shard.lru_curve_by_layer`).

The Che approximation beside the curve is solved at every capacity up to 256 and at 200
log-spaced capacities above, linearly interpolated between (``--che all``: at every capacity,
20 481 solves on an 80 × 256 trace). The trace's ids are checked by the compiled pass that builds
the requests (:func:`moeroof.cli.cache.trace_requests`) and let go once it has.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from moeroof.cli.cache import (
    LOOKUP_HELP,
    LOOKUPS,
    SCOPES,
    TraceInfo,
    add_cluster_arguments,
    add_trace_argument,
    cluster,
    trace_requests,
    where,
)
from moeroof.cli.flags import Count, Real, UsageError, add_default, add_seed, start_cache_kernels
from moeroof.cli.inputs import add_meta_arguments, read_trace_arg
from moeroof.cli.output import add_output_arguments, jsonable, percent, print_notes, runner, table
from moeroof.core.limits import MAX_SHARDS_SLICES
from moeroof.data.io import InputError

_NO_REQUESTS = "the trace requests no expert (all padding)"
_GLOBAL_NOTE = (
    "one LRU cache shared by all layers (scope global), capacity in experts, unit sizes, every request counted "
    "(no warm-up)"
)
#: trace cells (step, layer, expert) turned into requests at a time when counting per item
_COUNT_CHUNK_CELLS = 1 << 22
#: Che's curve: exact at every capacity up to this, then at CHE_LOG_POINTS log-spaced
#: capacities up to the largest, linearly interpolated between (``--che all``: every capacity)
CHE_EXACT_UP_TO = 256
CHE_LOG_POINTS = 200
CHE_MODES = ("grid", "all")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "mrc",
        help="LRU hit rate at every capacity in one pass (stack distances), or a SHARDS estimate",
        description=(
            "Exact LRU hit-rate curve for every capacity in experts (Mattson stack distances; one "
            "cache shared by all layers, or with --scope layer one per layer; every request counted), "
            "or with --sample-rate the SHARDS spatial-sampling estimate (scope global), its error "
            "stated from --slices S disjoint hash slices; the Che approximation from the trace's "
            "request counts beside it."
        ),
    )
    add_trace_argument(p)
    add_default(
        p,
        "--scope",
        "global",
        "one cache shared by all layers, or one per layer (the same C in each; capacity_experts is the "
        "whole cache, L·C, and capacity_experts_per_layer C; exact, no sampling)",
        choices=SCOPES,
    )
    p.add_argument(
        "--sample-rate",
        type=Real(min=0.0, max=1.0, open_low=True),
        help="SHARDS sampling rate R in (0, 1] (default: exact)",
    )
    p.add_argument(
        "--slices",
        type=Count(min=1, max=MAX_SHARDS_SLICES),
        help="SHARDS: cut the sampled hash range into S disjoint slices, one task each; the "
        "estimate and its stated error come from their spread (default: the workers)",
    )
    add_seed(p, "the SHARDS hash")
    p.add_argument(
        "--che",
        default="grid",
        choices=CHE_MODES,
        help=f"the Che approximation at every capacity up to {CHE_EXACT_UP_TO} and {CHE_LOG_POINTS} log-spaced "
        "ones above, interpolated between ('grid', default), or solved at every capacity ('all')",
    )
    p.add_argument("--lookup", default="layer", choices=LOOKUPS, help=LOOKUP_HELP)
    add_cluster_arguments(p, "run the tasks (layers for --scope layer, SHARDS slices for --sample-rate) on {}")
    add_meta_arguments(p)
    add_output_arguments(p)


def _options(args: argparse.Namespace) -> tuple[int, bool]:
    """``(workers, sharded)``, the flags checked against each other."""
    rate, slices = args.sample_rate, args.slices
    workers, sharded = cluster(args)
    if args.scope == "layer":
        if rate is not None:
            raise UsageError(
                "--sample-rate applies to --scope global: the per-layer curve is exact and its layers "
                "shard over --workers/--scheduler without sampling"
            )
        if slices is not None:
            raise UsageError("--slices cuts a SHARDS sample: it needs --sample-rate R (scope global)")
    elif rate is None and (sharded or slices is not None):
        raise UsageError(
            "--workers/--scheduler/--slices with --scope global need --sample-rate R: the exact curve of "
            "one cache shared by all layers is one pass that does not split (every request's stack "
            "distance counts every layer); SHARDS sampling splits into hash slices, with its error "
            "stated — or give --scope layer (one cache per layer, exact, sharded by layer)"
        )
    return workers, sharded


def _item_counts(trace: Any) -> np.ndarray:
    """Requests per item (layers·experts,) of a trace, chunk by chunk over steps."""
    from moeroof.cachesim import requests_from_trace

    n_items = trace.layers * trace.experts
    counts = np.zeros(n_items, np.int64)
    chunk = max(1, _COUNT_CHUNK_CELLS // max(1, n_items))
    for s0 in range(0, trace.steps, chunk):
        req = requests_from_trace(trace.topk[s0 : s0 + chunk], trace.experts)
        counts += np.bincount(req.items, minlength=n_items)
    return counts


def che_grid(cap: np.ndarray) -> np.ndarray:
    """The capacities Che is solved at for a curve over ``cap`` (ascending): every one up to
    :data:`CHE_EXACT_UP_TO`, :data:`CHE_LOG_POINTS` log-spaced above, and the largest."""
    cap = np.asarray(cap)
    if cap.size == 0:
        return cap
    lo, hi = float(cap[0]), float(cap[-1])
    dense = cap[cap <= CHE_EXACT_UP_TO]
    logs: Any = (
        np.geomspace(max(CHE_EXACT_UP_TO, lo, 1.0), max(hi, 1.0), CHE_LOG_POINTS) if hi > CHE_EXACT_UP_TO else []
    )
    return np.unique(np.concatenate([dense, np.round(logs), [lo, hi]]).astype(cap.dtype))


def che_curve(fn: Any, cap: np.ndarray, mode: str) -> tuple[np.ndarray, str]:
    """``fn(capacities)`` (a Che curve) at every capacity of ``cap`` (``mode="all"``), or at
    :func:`che_grid`'s and linearly interpolated between (``"grid"``: a few hundred solves
    instead of one per capacity, 20 481 on an 80 × 256 trace); and the note that says which."""
    cap = np.asarray(cap)
    if mode == "all" or cap.size <= CHE_EXACT_UP_TO + CHE_LOG_POINTS:
        return fn(cap), "che solved at every capacity"
    grid = che_grid(cap)
    note = (
        f"che solved at every capacity up to {CHE_EXACT_UP_TO} and at {CHE_LOG_POINTS} log-spaced capacities "
        "above, linearly interpolated between (--che all solves it at every capacity)"
    )
    return np.interp(cap, grid, fn(grid)), note


def _che_per_layer(counts: np.ndarray, layers: int, cap: np.ndarray) -> np.ndarray:
    """Che's hit rate with one cache of each capacity per layer, weighted by the layers' requests."""
    from moeroof.cachesim import che_hit_curve

    per = counts.reshape(layers, -1)
    total = per.sum()
    out = np.zeros(cap.shape)
    for row in per:
        if row.sum():
            out += row.sum() / total * che_hit_curve(row, cap)
    return out


def mrc_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``mrc`` JSON object for parsed arguments."""
    start_cache_kernels()
    from moeroof.cachesim import che_hit_curve, lru_hit_curve, request_histogram, shards_hit_curve

    workers, sharded = _options(args)
    rate = args.sample_rate
    sliced = rate is not None and (sharded or args.slices is not None)  # SHARDS over hash slices
    one_pass = args.scope != "layer" and not sliced
    # one pass here: the request pass checks the ids itself; sharded, the tasks read what read_trace checked
    trace: Any = read_trace_arg(args.path, args, lazy=one_pass, check_ids=False)
    lookup_note = (
        "hits judged as each (step, layer) lookup starts"
        if args.lookup == "layer"
        else "hits judged request by request in ascending expert id"
    )
    if args.scope == "layer":
        return _layer_report(args, trace, workers, lookup_note)
    if sliced:
        return _sharded_shards_report(args, trace, workers, lookup_note)
    requests = trace_requests(trace)
    trace = TraceInfo.of(trace)  # the ids are in the requests now
    if len(requests) == 0:
        raise InputError(trace.path, "-", "topk", _NO_REQUESTS)
    notes = [_GLOBAL_NOTE, lookup_note]
    if rate is None:
        cap, hit = lru_hit_curve(requests, lookup=args.lookup)
        method = "exact-lru (Mattson stack distances)"
    else:
        cap, hit = shards_hit_curve(requests, rate, seed=args.seed, lookup=args.lookup)
        method = "shards"
        notes.append(
            f"SHARDS estimate at rate {rate:g}: capacities below {math.ceil(1 / rate)} experts are not resolved; "
            "no error stated (--slices S states one from S disjoint hash slices)"
        )
    counts = request_histogram(requests)  # requests per item: Che's rates and the distinct count
    n_requests = len(requests)
    del requests  # its items are as long as the trace; only the curve and the counts remain
    che = lambda c: che_hit_curve(counts, c)
    return _finish(args, trace, cap, hit, che, method, rate, n_requests, counts, notes)


def _layer_report(args, trace, workers, lookup_note) -> dict[str, Any]:
    """``--scope layer``: the exact per-layer curve, layers sharded over the tasks."""
    from moeroof.run.shard import lru_curve_by_layer

    counts = _item_counts(trace)
    if not counts.any():
        raise InputError(trace.path, "-", "topk", _NO_REQUESTS)
    res = lru_curve_by_layer(trace, lookup=args.lookup, scheduler=args.scheduler, workers=workers)
    cap = res.capacity_per_layer
    notes = [
        f"one LRU cache per layer (scope layer): the same capacity C in each of the {trace.layers} layers; "
        f"capacity_experts is the whole cache, {trace.layers}·C experts in all (as cache --capacity-experts "
        "reads it), capacity_experts_per_layer is C; unit sizes, every request counted (no warm-up)",
        lookup_note,
        f"exact per layer; {res.tasks} task(s) of layers on {where(args, workers)} "
        "(per-layer caches are independent: the same curve however sharded)",
        "che: per layer from the layer's request counts, weighted by its requests",
    ]
    che = lambda c: _che_per_layer(counts, trace.layers, c)
    method = "exact-lru per layer (Mattson stack distances)"
    return _finish(args, trace, cap, res.hit_rate, che, method, None, res.requests, counts, notes)


def _sharded_shards_report(args, trace, workers, lookup_note) -> dict[str, Any]:
    """``--sample-rate R`` with ``--slices``/``--workers``/``--scheduler``: SHARDS over hash slices."""
    from moeroof.cachesim import che_hit_curve
    from moeroof.run.shard import BAND_SIGMAS, shards_curve_sharded

    rate = args.sample_rate
    res = shards_curve_sharded(
        trace, rate, slices=args.slices, seed=args.seed, lookup=args.lookup, scheduler=args.scheduler, workers=workers
    )
    if res.requests == 0:
        raise InputError(trace.path, "-", "topk", _NO_REQUESTS)
    s = res.slices
    k = f"{BAND_SIGMAS:g}"
    notes = [
        _GLOBAL_NOTE,
        lookup_note,
        f"SHARDS estimate at rate {rate:g} from {s} disjoint hash slices (each a rate {rate / s:g} sample, "
        f"one task each, on {where(args, workers)}); the estimate depends on the slices, not on "
        f"the workers; capacities below {math.ceil(res.resolution)} experts (S/R) are not resolved",
        "error stated: hit_rate_stderr is the sampling standard error from the spread of the slices' "
        "curves (ratio estimator; none with one slice); it misses the estimate's blur at steep parts "
        f"of the curve, so the band hit_rate_lower..hit_rate_upper reads the estimate {k}σ(c) + S/R "
        f"experts either side of c (σ(c) = sqrt(c·(1−p)/p), p = R/S) and widens it by {k} stderr",
    ]
    extra = {"hit_rate_stderr": res.stderr, "hit_rate_lower": res.lower, "hit_rate_upper": res.upper, "slices": s}
    extra.update(seed=args.seed, resolution_experts=res.resolution, slice_requests=res.slice_requests)
    che = lambda c: che_hit_curve(res.item_requests, c)
    method = f"shards over {s} hash slices"
    return _finish(
        args, trace, res.capacity, res.hit_rate, che, method, rate, res.requests, res.item_requests, notes, extra
    )


def _finish(args, trace, cap, hit, che_fn, method, rate, n_requests, counts, notes, extra=None) -> dict[str, Any]:
    """The report of a curve (``che_fn``: the Che curve at given capacities; ``extra``: a sampled
    curve's error and slices)."""
    che, note = che_curve(che_fn, cap, args.che)
    notes.append(note)
    extra = extra or {"hit_rate_stderr": None, "hit_rate_lower": None, "hit_rate_upper": None}
    notes.append(
        "che: independent-reference approximation from the trace's request counts; "
        "it ignores the step order a trace has (an approximation, not a bound)"
    )
    per_layer = args.scope == "layer"
    total = [int(c) * trace.layers for c in cap] if per_layer else cap
    return jsonable(
        {
            # one meaning everywhere (cache, mrc, plan, sweeps): capacity_experts is the whole
            # cache, all layers together; a per-layer figure is named so
            "capacity_experts": total,
            "capacity_experts_per_layer": cap if per_layer else None,
            "capacity_unit": "experts in all layers",
            "scope": args.scope,
            "hit_rate": hit,
            "che_hit_rate": che,
            **extra,
            "method": method,
            "lookup": args.lookup,
            "sample_rate": rate,
            "requests": n_requests,
            "distinct_items": int(np.count_nonzero(counts)),
            **{k: getattr(trace, k) for k in ("steps", "layers", "experts")},
            "source": str(trace.path),
            "provenance": trace.meta.get("provenance"),
            "notes": notes,
        }
    )


def print_mrc(rep: dict[str, Any]) -> None:
    unit = rep.get("capacity_unit", "experts")
    print(f"LRU hit rate by capacity — {rep['source']} ({rep['method']}, scope {rep.get('scope', 'global')})")
    cap = rep["capacity_experts"]
    per = rep.get("capacity_experts_per_layer")
    picks = sorted({int(round(q * (len(cap) - 1))) for q in np.linspace(0, 1, 11)})
    se, lo, hi = rep.get("hit_rate_stderr"), rep.get("hit_rate_lower"), rep.get("hit_rate_upper")
    headers = [f"capacity ({unit})"] + ["per layer"] * (per is not None) + ["hit rate %"]
    headers += ["± stderr (pp)", "band %"] * (se is not None) + ["che %"]
    rows = []
    for i in picks:
        rows.append([str(cap[i])] + ([str(per[i])] if per is not None else []) + [percent(rep["hit_rate"][i])])
        if se is not None:
            assert lo is not None and hi is not None  # a sampled curve carries its band with its stderr
            rows[-1] += [percent(se[i]), f"{percent(lo[i])}–{percent(hi[i])}"]
        rows[-1].append(percent(rep["che_hit_rate"][i]))
    print(table(headers, rows, ">" * len(headers)))
    print_notes(rep["notes"])


def mrc_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per capacity (the whole curve); the capacity column says its unit."""
    cols = ["capacity_experts", "hit_rate", "che_hit_rate"]
    if rep.get("capacity_experts_per_layer") is not None:
        cols.insert(1, "capacity_experts_per_layer")
    if rep.get("hit_rate_stderr") is not None:
        cols += ["hit_rate_stderr", "hit_rate_lower", "hit_rate_upper"]
    return list(cols), [list(row) for row in zip(*(rep[c] for c in cols))]


run = runner(mrc_report, print_mrc, mrc_csv)
