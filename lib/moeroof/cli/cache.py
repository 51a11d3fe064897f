"""``moeroof cache``: replay a trace's expert requests through one cache policy (docs/models.md, caches):
hits, misses, hit rate and bytes streamed per step.

::

    moeroof cache TRACE --policy lru|lfu|lfu-perfect|static|belady|belady-insert|s3fifo|arc
                  (--capacity-experts N | --capacity-gib X --expert-bytes N) [--scope global|layer]
                  [--warmup S] [--histogram PATH] [--streams I,J,…] [--lookup layer|request]
                  [--s3fifo-threshold N] [--scheduler ADDRESS | --workers N]
                  [--format table|json|csv] [--output FILE]

The policies are documented in :mod:`moeroof.cachesim`: ``lfu`` is in-cache LFU (libCacheSim's
LFU: an evicted expert's count is forgotten), ``lfu-perfect`` keeps every count; ``belady`` is the
offline optimum (it may decline to cache an expert), ``belady-insert`` caches every miss
(libCacheSim's Belady); ``--s3fifo-threshold`` is S3-FIFO's move-to-main threshold (default 1;
libCacheSim's S3FIFOv0 uses 2).

With ``--scheduler`` or ``--workers`` (scope layer only) the layers are sharded over
dask.distributed workers (:mod:`moeroof.run.shard`); the answer is the same, exactly.

The simulator (:mod:`moeroof.cachesim`, its loops in C) is imported only when the
command runs; the parser reads the policy and scope names from the constants below.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.cli.flags import GIB, WORKERS, Bytes, Count, ListOf, UsageError, add_default, start_cache_kernels
from moeroof.cli.inputs import add_meta_arguments, input_path, read_trace_arg
from moeroof.cli.output import Progress, add_output_arguments, fmt, jsonable, percent, print_notes, runner, table
from moeroof.data.io import InputError, Trace, read_histogram

# moeroof.cachesim.POLICIES and .SCOPES, spelled out so that building the parser does not
# import (and compile) the simulator; tests/test_cli.py checks that they agree.
POLICIES = ("lru", "lfu", "lfu-perfect", "static", "belady", "belady-insert", "s3fifo", "arc")
#: moeroof.cachesim.S3FIFO_MOVE_TO_MAIN_THRESHOLD, spelled out for the same reason
S3FIFO_THRESHOLD = 1
POLICY_HELP = (
    "eviction policy: lru; lfu (in-cache, as libCacheSim) or lfu-perfect (counts survive eviction); "
    "static (pinned hot set); belady (offline optimum, may bypass) or belady-insert (offline, caches "
    "every miss, as libCacheSim); s3fifo; arc"
)
SCOPES = ("global", "layer")
LOOKUPS = ("layer", "request")
LOOKUP_HELP = (
    "when a request is judged a hit: 'layer' (default) as its (step, layer) starts, as an engine "
    "that serves a layer's cached experts before fetching its misses; 'request' in its own turn, "
    "as libCacheSim replays the same order (a miss may evict an expert the layer needs next)"
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cache",
        help="simulate an expert cache policy on a trace: hits, misses, bytes streamed per step",
        description=(
            "Replay a trace's request stream (each step requests the batch's union of experts "
            "layer by layer, ascending id within a layer) through one cache policy (the cache models: docs/models.md)."
        ),
    )
    add_trace_argument(p)
    p.add_argument("--policy", required=True, choices=POLICIES, help=POLICY_HELP)
    p.add_argument(
        "--capacity-experts", type=Count(min=0), help="cache capacity in experts (one (layer, expert) item each)"
    )
    p.add_argument("--capacity-gib", type=GIB, help="cache capacity in GiB (needs --expert-bytes)")
    p.add_argument("--expert-bytes", type=Bytes(), help="bytes per expert (streamed per miss)")
    add_default(p, "--scope", "global", "one shared cache or one per layer", choices=SCOPES)
    add_default(p, "--warmup", "0", "steps simulated but not counted", type=Count(min=0))
    p.add_argument("--histogram", help="histogram .csv to pin the static hot set from (default: the trace's own)")
    p.add_argument(
        "--streams",
        type=ListOf(Count(min=0), example="0,3", distinct=True),
        help="replay only these streams of the trace, comma-separated indices from 0 (default: all)",
    )
    p.add_argument("--lookup", default="layer", choices=LOOKUPS, help=LOOKUP_HELP)
    p.add_argument(
        "--s3fifo-threshold",
        metavar="N",
        type=Count(min=1),
        help=(
            f"--policy s3fifo: hits in the small queue that move an expert to the main queue "
            f"(default {S3FIFO_THRESHOLD}; libCacheSim's S3FIFOv0 uses 2)"
        ),
    )
    add_cluster_arguments(p, "shard the layers over {} (scope layer only; exact)")
    add_meta_arguments(p)
    add_output_arguments(p)


def add_trace_argument(p: Any) -> None:
    """TRACE, the trace ``cache`` and ``mrc`` replay."""
    p.add_argument(
        "path",
        metavar="TRACE",
        help="trace .npz / .npy / .parquet (a histogram has no token order: `moeroof trace --routing HIST.csv` "
        "draws a trace from it)",
    )


def add_cluster_arguments(p: Any, help: str) -> None:
    """``--scheduler ADDRESS`` and ``--workers N``, each helped by ``help`` with where the tasks run
    in its ``{}``."""
    p.add_argument("--scheduler", metavar="ADDRESS", help=help.format("the dask.distributed cluster at ADDRESS"))
    p.add_argument("--workers", type=WORKERS, help=help.format("a local cluster of N worker processes"))


def check_streams(ids: list[int], n_streams: int) -> list[int]:
    """``--streams 0,3`` (distinct indices from 0, as declared) held to a trace of ``n_streams``
    streams; in the order given."""
    bad = [i for i in ids if i >= n_streams]
    if bad:
        raise UsageError(
            f"--streams: stream {bad[0]} is outside 0..{n_streams - 1} (the trace has {n_streams} streams)"
        )
    return ids


def trace_requests(trace: Trace, **kw: Any):
    """``requests_from_trace(trace.topk, trace.experts, **kw)``, checking every id when the trace
    was read without (``Trace.ids_checked`` False); a bad id is an :class:`InputError` worded as
    ``read_trace``'s (``FILE:topk[s,t,l,k]: topk: …``)."""
    from moeroof.cachesim import TraceIdError, requests_from_trace

    try:
        return requests_from_trace(trace.topk, trace.experts, validate=not trace.ids_checked, **kw)
    except TraceIdError as err:
        raise InputError(trace.path, err.index, "topk", err.reason) from None


@dataclass(frozen=True)
class TraceInfo:
    """What a report says of a trace once its requests are built: its ids are let go (a trace
    read into memory holds them: 340 MB at 10^8 requests, as much as the requests' items)."""

    path: Path
    meta: dict
    experts: int
    top_k: int
    steps: int
    streams: int
    layers: int

    @classmethod
    def of(cls, trace: Trace) -> TraceInfo:
        return cls(trace.path, trace.meta, trace.experts, trace.top_k, trace.steps, trace.streams, trace.layers)


def cluster(args: argparse.Namespace) -> tuple[int, bool]:
    """``(workers, sharded)`` of ``--scheduler ADDRESS`` or ``--workers N`` (one of them at most)."""
    if args.scheduler is not None and args.workers is not None:
        raise UsageError("give --scheduler ADDRESS or --workers N, not both")
    workers = 1 if args.workers is None else args.workers
    return workers, args.scheduler is not None or workers > 1


def where(args: argparse.Namespace, workers: int) -> str:
    """Where the tasks run, in words (``--scheduler``, ``--workers``, or serially)."""
    if args.scheduler is not None:
        return f"the scheduler {args.scheduler}"
    return f"a local cluster of {workers} worker processes" if workers > 1 else "one process, serially"


def _check_cache_args(args: argparse.Namespace) -> tuple[int, int, bool]:
    """The option checks that need no trace: ``(s3fifo threshold, workers, sharded)``."""
    if (args.capacity_experts is None) == (args.capacity_gib is None):
        raise UsageError("give exactly one of --capacity-experts N or --capacity-gib X")
    if args.capacity_gib is not None and args.expert_bytes is None:
        raise UsageError("--capacity-gib needs --expert-bytes (bytes per expert)")
    if args.histogram is not None and args.policy != "static":
        raise UsageError("--histogram applies to --policy static only")
    if args.s3fifo_threshold is not None and args.policy != "s3fifo":
        raise UsageError("--s3fifo-threshold applies to --policy s3fifo only")
    threshold = S3FIFO_THRESHOLD if args.s3fifo_threshold is None else args.s3fifo_threshold
    workers, sharded = cluster(args)
    if sharded and threshold != S3FIFO_THRESHOLD:
        raise UsageError(
            f"--s3fifo-threshold other than {S3FIFO_THRESHOLD} runs in one process: drop --scheduler/--workers"
        )
    if sharded and args.scope != "layer":
        raise UsageError(
            "--scheduler/--workers shard per-layer caches by layer: they need --scope layer; one cache "
            "shared by all layers (scope global) does not split by layer — its route to large traces is "
            "SHARDS sampling (moeroof mrc --sample-rate R)"
        )
    return threshold, workers, sharded


def _capacity(args: argparse.Namespace) -> tuple[float, str, int, int | None]:
    """``(capacity, its unit, capacity in experts, capacity in bytes or None)``."""
    from moeroof.core.units import to_si

    if args.capacity_experts is not None:
        n, size = args.capacity_experts, args.expert_bytes
        return float(n), "experts", n, None if size is None else n * size
    cap_bytes = to_si(args.capacity_gib, "GiB")
    return cap_bytes, "bytes", int(math.floor(cap_bytes / args.expert_bytes + 1e-9)), cap_bytes


def _pinned(args: argparse.Namespace, trace: Trace, notes: list[str]) -> np.ndarray | None:
    """The static policy's per-(layer, expert) counts from ``--histogram``, or None without one."""
    if args.histogram is None:
        return None
    hist = read_histogram(input_path(args.histogram))
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
    return pinned


def cache_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``cache`` JSON object for parsed arguments."""
    start_cache_kernels()
    from moeroof.cachesim import simulate

    threshold, workers, sharded = _check_cache_args(args)
    warmup = args.warmup
    # sharded, the workers read the trace as read_trace checked it; in one process the request
    # pass checks the ids itself
    trace = read_trace_arg(args.path, args, lazy=not sharded, check_ids=False)
    stream_ids = list(range(trace.streams)) if args.streams is None else check_streams(args.streams, trace.streams)
    if warmup >= trace.steps:
        raise UsageError(f"--warmup: {warmup} leaves no counted step (the trace has {trace.steps} steps)")
    notes: list[str] = []
    capacity, unit, cap_experts, cap_bytes = _capacity(args)
    pinned = _pinned(args, trace, notes)
    prompt_steps = trace.meta.get("prompt_steps")
    if isinstance(prompt_steps, int) and prompt_steps > warmup:
        notes.append(
            f"the trace's first {prompt_steps} steps are a prompt (cold start); --warmup {prompt_steps} skips them"
        )
    if args.streams is not None:
        notes.append(f"streams {','.join(map(str, stream_ids))} of the trace's {trace.streams} replayed")
    streams = None if args.streams is None else np.asarray(stream_ids, dtype=np.int64)
    kw: dict[str, Any] = dict(
        capacity_unit=unit, item_bytes=args.expert_bytes, warmup_steps=warmup, pinned=pinned, lookup=args.lookup
    )
    if sharded:
        from moeroof.run.shard import simulate_by_layer

        res = simulate_by_layer(
            trace, capacity, args.policy, streams=streams, scheduler=args.scheduler, workers=workers, **kw
        )
        notes.append(f"layers sharded over {where(args, workers)} (exact: per-layer caches are independent)")
    else:
        with Progress("cache") as progress:
            progress(0, 2, f"building the requests of {trace.steps} steps")
            requests = trace_requests(trace, streams=streams)
            trace = TraceInfo.of(trace)  # type: ignore[assignment]  # the ids are in the requests now
            progress(1, 2, f"simulating {args.policy} on {len(requests.items):,} requests")
            res = simulate(requests, capacity, policy=args.policy, scope=args.scope, s3fifo_threshold=threshold, **kw)
    return _report(args, trace, stream_ids, res, cap_experts, cap_bytes, unit, pinned, notes, threshold)


def _report(args, trace, stream_ids, res, cap_experts, cap_bytes, unit, pinned, notes, threshold):
    warmup = args.warmup
    notes.extend(res.notes)
    notes.append(
        "hits judged as each (step, layer) lookup starts (an engine serves the cached experts first)"
        if args.lookup == "layer"
        else "hits judged request by request in ascending expert id (libCacheSim's view of the same order)"
    )
    per = None
    if args.scope == "layer":
        per = math.floor(cap_experts / trace.layers + 1e-9) if unit == "experts" else None
        notes.append(
            f"scope layer: --capacity-experts is the whole cache (as in mrc, plan and sweeps), one cache per "
            f"layer with capacity / {trace.layers} each"
            + (f" ({per} experts per layer; the remainder is unused)" if per is not None else "")
        )
        if per == 0:
            notes.append(
                f"{cap_experts} experts in all over {trace.layers} layers is 0 per layer: nothing can be cached "
                f"(give at least {trace.layers}, or mrc --scope layer for every capacity)"
            )
    if warmup:
        notes.append(f"the first {warmup} steps are simulated but not counted (warm-up)")
    if res.bytes_unit == "experts":
        notes.append("no --expert-bytes: streamed volume counted in experts, not bytes")
    rep: dict[str, Any] = {"policy": args.policy, "capacity_experts": cap_experts, "capacity_experts_per_layer": per}
    rep.update(capacity_bytes=cap_bytes, scope=args.scope, lookup=args.lookup, warmup_steps=warmup)
    rep.update(requests=res.requests, hits=res.hits, misses=res.misses, hit_rate=res.hit_rate)
    rep.update(bytes_streamed_per_step=res.mean_bytes_streamed_per_step, unit=res.bytes_unit)
    rep["s3fifo_threshold"] = threshold if args.policy == "s3fifo" else None
    rep["oracle"] = args.policy in ("belady", "belady-insert") or (args.policy == "static" and pinned is None)
    per_step = {"hits": res.hits_per_step, "misses": res.misses_per_step, "bytes_streamed": res.bytes_streamed_per_step}
    rep.update(per_step=per_step, steps=trace.steps, streams=len(stream_ids), stream_ids=stream_ids)
    rep.update(trace_streams=trace.streams, layers=trace.layers, experts=trace.experts, source=str(trace.path))
    rep.update(provenance=trace.meta.get("provenance"), notes=notes)
    return jsonable(rep)


def print_cache(rep: dict[str, Any]) -> None:
    print(f"expert cache — {rep['source']} (provenance: {rep['provenance'] or 'unknown'})")
    print(
        f"policy {rep['policy']}  capacity {rep['capacity_experts']} experts"
        + (f" ({rep['capacity_bytes'] / 2**30:.3g} GiB)" if rep["capacity_bytes"] is not None else "")
        + f"  scope {rep['scope']}  lookup {rep['lookup']}  warm-up {rep['warmup_steps']} of {rep['steps']} steps"
        + (f"  move-to-main threshold {rep['s3fifo_threshold']}" if rep.get("s3fifo_threshold") is not None else "")
    )
    streamed = rep["bytes_streamed_per_step"]
    streamed_cell = fmt(streamed, 1) + " experts" if rep["unit"] == "experts" else f"{streamed / 1e9:.3f} GB"
    row = [str(rep["requests"]), str(rep["hits"]), str(rep["misses"]), percent(rep["hit_rate"]), streamed_cell]
    print(table(["requests", "hits", "misses", "hit rate %", "streamed/step"], [row], ">>>>>"))
    print_notes(rep["notes"])


#: ``--format csv``: the columns of the one row (hit_rate a fraction, as in the JSON)
CSV_COLUMNS: tuple[str, ...] = ("policy", "capacity_experts", "capacity_bytes", "scope", "lookup", "warmup_steps")
CSV_COLUMNS += ("requests", "hits", "misses", "hit_rate", "bytes_streamed_per_step", "unit", "s3fifo_threshold")
CSV_COLUMNS += ("oracle", "steps", "streams", "layers", "experts", "source", "provenance")


def cache_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row for the policy and capacity simulated (the per-step series
    stay in the JSON)."""
    return list(CSV_COLUMNS), [[rep.get(c) for c in CSV_COLUMNS]]


run = runner(cache_report, print_cache, cache_csv)
