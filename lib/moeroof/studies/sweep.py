"""Sweeps: a grid of ``plan`` / ``cache`` / ``union`` evaluations, serially or on dask.distributed.

A grid is a TOML file (:func:`read_grid`)::

    command = "plan"                           # plan | cache | union
    model = ["glm-5.2", "deepseek-v3"]         # an axis: a list of values
    cache_gib = {start = 0, stop = 40, step = 20}   # an axis: a range, stop included
    batch = [1, 8, 64]

    [fixed]                                    # inputs every point shares
    routing = "zipf:0.9"

Every top-level key but ``command`` and ``fixed`` is an axis; a scalar is an axis of one value.
:func:`expand` gives the points (the Cartesian product of the axes, in the file's axis order,
each with the fixed inputs); :func:`point_id` names a point by a hash of its command and inputs,
so the id does not depend on the axis order or on which file the point came from.

:func:`evaluate_point` evaluates one point with the library (a pure function: the same inputs
give the same outputs, on any worker) and returns one flat row: the inputs, the outputs and
provenance (``point_id``, ``command``, ``moeroof_version``, ``elapsed_s``); a point that fails
returns its error text in ``error`` instead of outputs and does not stop the sweep.

:func:`run_sweep` evaluates the points not already in the output Parquet file (a resumed run
skips what an earlier run wrote; a point that failed is tried again), serially or as tasks on a
dask.distributed cluster (a ``LocalCluster`` of worker processes, or an existing scheduler by
address), and writes every row to Parquet atomically — after the last point, every
:data:`CHECKPOINT_SECONDS` while it runs, and when it is interrupted.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKPOINT_SECONDS",
    "COMMANDS",
    "KEYS",
    "MAX_POINTS",
    "Grid",
    "GridError",
    "evaluate_point",
    "expand",
    "expand_range",
    "point_id",
    "read_done",
    "read_grid",
    "rows_table",
    "run_sweep",
]

#: the evaluations a grid may sweep
COMMANDS = ("plan", "cache", "union")

#: the inputs each command takes (grid keys), and which of them every point must have
KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "plan": (
        (
            "model",
            "hardware",
            "batch",
            "cache_gib",
            "cache_policy",
            "cache_scope",
            "context",
            "overlap",
            "routing",
            "read_size_kib",
            "ranks",
            "partition",
            "seed",
            "page_cache",
        ),
        ("model", "hardware", "batch"),
    ),
    "union": (("batch", "experts", "top_k", "layers", "histogram"), ("batch",)),
    "cache": (("trace", "capacity", "policy", "scope", "warmup_steps", "streams"), ("trace", "capacity")),
}

#: the most points one grid may expand to
MAX_POINTS = 1_000_000

#: how often a running sweep rewrites its Parquet file with the rows done so far
CHECKPOINT_SECONDS = 30.0

#: provenance columns, first in every row
PROVENANCE = ("point_id", "command")


class GridError(ValueError):
    """A grid file that cannot be swept: ``FILE: KEY: what is wrong``."""

    def __init__(self, path: Any, key: str | None, detail: str) -> None:
        self.path, self.key, self.detail = str(path), key, detail
        super().__init__(f"{path}: {key}: {detail}" if key else f"{path}: {detail}")


@dataclass(frozen=True)
class Grid:
    """A parsed grid: the command, its axes (name → values, in file order) and fixed inputs."""

    command: str
    axes: Mapping[str, tuple[Any, ...]]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    path: str = "<grid>"

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.axes.values())


def expand_range(spec: Mapping[str, Any], *, path: Any = "<grid>", key: str = "?") -> list[Any]:
    """``{start, stop, step}``: start, start + step, … up to stop, stop included when the steps
    reach it; integers stay integers."""
    if set(spec) != {"start", "stop", "step"}:
        raise GridError(path, key, f"a range is {{start, stop, step}}, got keys {sorted(spec)}")
    start, stop, step = spec["start"], spec["stop"], spec["step"]
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise GridError(path, key, f"{name} must be a finite number, got {v!r}")
    if step <= 0:
        raise GridError(path, key, f"step must be > 0, got {step!r}")
    if stop < start:
        raise GridError(path, key, f"stop {stop!r} is below start {start!r}")
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > MAX_POINTS:
        raise GridError(path, key, f"the range has {count} values (at most {MAX_POINTS})")
    if all(isinstance(v, int) for v in (start, stop, step)):
        return list(range(start, stop + 1, step))
    return [round(start + i * step, 12) for i in range(count)]


def _check_value(path: Any, key: str, value: Any) -> Any:
    if isinstance(value, (dict, list)):
        raise GridError(path, key, f"a value must be a number, a string or a boolean, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise GridError(path, key, f"a value must be finite, got {value!r}")
    return value


def read_grid(path: str | Path) -> Grid:
    """Read and check a grid TOML file (see the module docstring); errors name the file and key."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise GridError(path, None, f"not a TOML file ({err})") from None
    return grid_from_dict(doc, path)


def grid_from_dict(doc: Mapping[str, Any], path: Any = "<grid>") -> Grid:
    """A :class:`Grid` from a parsed TOML document (see :func:`read_grid`)."""
    doc = dict(doc)
    command = doc.pop("command", None)
    if command not in COMMANDS:
        raise GridError(path, "command", f"must be one of {', '.join(COMMANDS)}, got {command!r}")
    fixed = doc.pop("fixed", {})
    if not isinstance(fixed, dict):
        raise GridError(path, "fixed", "must be a table of inputs ([fixed])")
    known, required = KEYS[command]
    axes: dict[str, tuple[Any, ...]] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            values = expand_range(value, path=path, key=key)
        elif isinstance(value, list):
            values = [_check_value(path, key, v) for v in value]
        else:
            values = [_check_value(path, key, value)]
        if not values:
            raise GridError(path, key, "an axis needs at least one value")
        if len(set(map(json.dumps, values))) != len(values):
            raise GridError(path, key, "an axis lists a value twice")
        axes[key] = tuple(values)
    for key, value in fixed.items():
        _check_value(path, f"fixed.{key}", value)
        if key in axes:
            raise GridError(path, key, "is both an axis and in [fixed]; give it once")
    for key in [*axes, *fixed]:
        if key not in known:
            raise GridError(path, key, f"is not an input of {command} (known: {', '.join(known)})")
    missing = [k for k in required if k not in axes and k not in fixed]
    if missing:
        raise GridError(path, missing[0], f"{command} needs it (an axis or in [fixed])")
    grid = Grid(command, axes, fixed, str(path))
    if grid.size > MAX_POINTS:
        raise GridError(path, None, f"the grid has {grid.size} points (at most {MAX_POINTS})")
    return grid


def point_id(command: str, inputs: Mapping[str, Any]) -> str:
    """A stable name for a point: the first 16 hex digits of the SHA-256 of its command and
    inputs as canonical JSON (keys sorted; 20 and 20.0 are the same point)."""
    canon = {k: (float(v) if isinstance(v, int) and not isinstance(v, bool) else v) for k, v in inputs.items()}
    text = json.dumps({"command": command, "inputs": canon}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def expand(grid: Grid) -> list[dict[str, Any]]:
    """The grid's points: ``{"point_id", "command", "inputs"}`` in axis order (the last axis
    varies fastest)."""
    names = list(grid.axes)
    out = []
    for combo in itertools.product(*(grid.axes[n] for n in names)):
        inputs = {**grid.fixed, **dict(zip(names, combo))}
        out.append({"point_id": point_id(grid.command, inputs), "command": grid.command, "inputs": inputs})
    return out


# ----------------------------------------------------------------------------- evaluation


def _plan_outputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    from moeroof.data.presets import load_hardware, load_model
    from moeroof.models.plan import Workload, auto_cache, plan, routing_from_spec

    batch = int(inputs["batch"])
    if batch < 1:
        raise ValueError(f"batch must be a positive integer, got {inputs['batch']!r}")
    model = load_model(str(inputs["model"]))
    hardware = load_hardware(str(inputs["hardware"]))
    context = int(inputs.get("context", 4096))
    cache_gib = inputs.get("cache_gib", "auto")
    auto = isinstance(cache_gib, str) and cache_gib.strip().lower() == "auto"
    if auto:
        cache_bytes = float(auto_cache(model, hardware, [batch], context_tokens=context)["cache_bytes"])
    else:
        cache_bytes = float(cache_gib) * 2**30
    read_kib = inputs.get("read_size_kib")
    workload = Workload(
        context_tokens=context,
        cache_bytes=cache_bytes,
        cache_policy=str(inputs.get("cache_policy", "lru")),
        cache_scope=str(inputs.get("cache_scope", "global")),
        overlap=str(inputs.get("overlap", "max")),
        read_size_bytes=None if read_kib is None else float(read_kib) * 2**10,
        ranks=int(inputs.get("ranks", 1)),
        partition=str(inputs.get("partition", "lpt")),
        seed=int(inputs.get("seed", 0)),
        page_cache=bool(inputs.get("page_cache", False)),
    )
    routing = routing_from_spec(str(inputs.get("routing", "uniform")), model)
    rep = plan(model, hardware, workload, routing, [batch]).to_dict()
    hit = rep["cache_hit_rate"]
    hit0 = sum(r[0] for r in hit) / len(hit) if isinstance(hit[0], list) else hit[0]
    base = rep["baselines"]
    return {
        "cache_gib_used": cache_bytes / 2**30,
        "cache_auto": auto,
        "step_seconds": rep["step_seconds"][0],
        "per_agent_tok_s": rep["per_agent_tok_s"][0],
        "net_tok_s": rep["net_tok_s"][0],
        "bound": rep["bound"][0],
        "link_name": rep["link_name"],
        "ssd_bytes_per_token": rep["ssd_bytes_per_token"][0],
        "union_per_layer": rep["union_per_layer"][0],
        "cache_hit_rate": hit0,
        "coalescing_ratio": rep["coalescing_ratio"][0],
        "fits_in_memory": rep["fits_in_memory"][0],
        "x_uncoalesced": base["uncoalesced"]["multiple"][0],
        "x_single": base["single"]["multiple"][0],
        "x_independent_boxes": base["independent-boxes"]["multiple"][0],
        "result": rep["provenance"].get("result"),
        "non_witnessed": ",".join(rep["provenance"].get("non_witnessed") or []),
    }


def _union_outputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    from moeroof.models.union import union_histogram, union_uniform

    batch = [int(inputs["batch"])]
    if "histogram" in inputs:
        from moeroof.core.paths import resolve_data
        from moeroof.data.io import read_histogram

        hist = read_histogram(resolve_data(str(inputs["histogram"])))
        curve = union_histogram(hist.counts, hist.tokens, batch, top_k=hist.top_k, experts=hist.experts, bootstrap=0)
    else:
        if "experts" not in inputs or "top_k" not in inputs:
            raise ValueError("union needs a histogram, or experts and top_k (the uniform closed form)")
        curve = union_uniform(int(inputs["experts"]), int(inputs["top_k"]), batch, int(inputs.get("layers", 1)))
    return {
        "union_per_layer": float(curve.mean[0]),
        "coalescing_ratio": float(curve.coalescing_ratio[0]),
        "method": curve.method[0],
    }


def _cache_outputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    from moeroof.core.paths import resolve_data
    from moeroof.data.io import read_trace
    from moeroof.models.cache import requests_from_trace, simulate

    trace = read_trace(resolve_data(str(inputs["trace"])))
    streams = inputs.get("streams")
    requests = requests_from_trace(trace.topk, trace.experts, streams=None if streams is None else int(streams))
    res = simulate(
        requests,
        float(inputs["capacity"]),
        policy=str(inputs.get("policy", "lru")),
        scope=str(inputs.get("scope", "global")),
        warmup_steps=int(inputs.get("warmup_steps", 0)),
    )
    return {
        "requests": int(res.requests),
        "hits": int(res.hits),
        "misses": int(res.misses),
        "hit_rate": float(res.hit_rate),
        "experts_streamed_per_step": res.mean_bytes_streamed_per_step,
    }


_EVALUATORS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "plan": _plan_outputs,
    "union": _union_outputs,
    "cache": _cache_outputs,
}


def evaluate_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """One row: provenance, the point's inputs, its outputs (or ``error``: the exception's type
    and text) and ``elapsed_s``. Never raises for a bad point."""
    from moeroof import __version__

    start = time.perf_counter()
    row: dict[str, Any] = {"point_id": point["point_id"], "command": point["command"], **point["inputs"]}
    try:
        outputs = _EVALUATORS[point["command"]](point["inputs"])
        clash = set(outputs) & set(point["inputs"])
        row.update({(f"out_{k}" if k in clash else k): v for k, v in outputs.items()})
        row["error"] = None
    except Exception as exc:  # a failed point is a row, not the end of the sweep
        row["error"] = f"{type(exc).__name__}: {exc}"
    row["moeroof_version"] = __version__
    row["elapsed_s"] = time.perf_counter() - start
    return row


# ----------------------------------------------------------------------------- Parquet


def rows_table(rows: list[dict[str, Any]]) -> Any:
    """A pyarrow Table of rows (columns in first-seen order; a missing value is null). A column
    whose values mix types (``"auto"`` and numbers) is stored as text; ints and floats as floats."""
    import pyarrow as pa

    names: list[str] = []
    for r in rows:
        names.extend(k for k in r if k not in names)
    columns = {}
    for name in names:
        values = [r.get(name) for r in rows]
        kinds = {type(v) for v in values if v is not None}
        if kinds == {int, float}:
            values = [None if v is None else float(v) for v in values]
        elif len(kinds) > 1:
            values = [None if v is None else str(v) for v in values]
        columns[name] = pa.array(values) if kinds else pa.nulls(len(values))
    return pa.table(columns)


def read_done(out: str | Path) -> list[dict[str, Any]]:
    """The rows of an existing sweep Parquet file (none when it does not exist)."""
    out = Path(out)
    if not out.exists():
        return []
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    if "point_id" not in table.column_names:
        raise ValueError(f"{out}: not a sweep result (no point_id column); give another output file")
    return table.to_pylist()


def _write(out: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow.parquet as pq

    from moeroof.core import atomic

    table = rows_table(rows)
    atomic.write_via(out, lambda handle: pq.write_table(table, handle))


# ----------------------------------------------------------------------------- running


def _serial(points: Iterable[Mapping[str, Any]], evaluate: Callable) -> Iterable[dict[str, Any]]:
    for p in points:
        yield evaluate(p)


def _lost_row(point: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
    """The row of a point whose task never returned (its worker died too often, or the cluster
    restarted and cancelled it): the error, so a resumed run evaluates it again."""
    from moeroof import __version__

    text = str(exc) or "the task was lost"
    return {
        "point_id": point["point_id"],
        "command": point["command"],
        **point["inputs"],
        "error": f"{type(exc).__name__}: {text}",
        "moeroof_version": __version__,
        "elapsed_s": 0.0,
    }


def _evaluate_chunk(points: list[dict[str, Any]], evaluate: Callable) -> list[dict[str, Any]]:
    """One task: several points evaluated in order (the scheduler's cost is paid once per task)."""
    return [evaluate(p) for p in points]


def chunk_size(points: int, workers: int) -> int:
    """Points per task: about 16 tasks per worker, so every worker stays busy to the end while
    the scheduler's per-task cost (milliseconds, about a plan point's own cost) is spread over
    many points; one point per task for small grids."""
    return max(1, points // (16 * max(1, workers)))


def _distributed(
    points: list[dict[str, Any]], evaluate: Callable, client: Any, chunk: int | None = None
) -> Iterable[dict[str, Any]]:
    import asyncio
    import concurrent.futures

    from distributed import as_completed

    if chunk is None:
        chunk = chunk_size(len(points), max(1, len(client.scheduler_info().get("workers", {}))))
    chunks = [points[i : i + chunk] for i in range(0, len(points), chunk)]
    # the key names the chunk's first point and its length: stable, distinct, readable
    by_key = {f"sweep-{c[0]['point_id']}-{len(c)}": c for c in chunks}
    futures = [client.submit(_evaluate_chunk, c, evaluate, key=key, pure=False) for key, c in by_key.items()]
    try:
        for future in as_completed(futures):
            try:
                rows = future.result()
            except (Exception, asyncio.CancelledError, concurrent.futures.CancelledError) as exc:
                # KilledWorker (the task's workers died), a cancel by client.restart(): the
                # evaluation itself never raises (evaluate_point catches), so this is the
                # cluster losing the task; its points become error rows, retried on resume
                rows = [_lost_row(p, exc) for p in by_key[future.key]]
            yield from rows
    finally:
        client.cancel([f for f in futures if not f.done()])


def run_sweep(
    grid: Grid,
    out: str | Path,
    *,
    workers: int = 1,
    scheduler: str | None = None,
    client: Any = None,
    evaluate: Callable[[Mapping[str, Any]], dict[str, Any]] = evaluate_point,
    progress: Callable[[int, int, str], None] | None = None,
    chunk: int | None = None,
) -> dict[str, Any]:
    """Evaluate the grid's points not yet in ``out`` and write every row to ``out`` (Parquet).

    Serially when ``workers == 1`` and no ``scheduler`` / ``client`` is given; else on
    dask.distributed: ``client`` as given, a ``Client(scheduler)`` for an address, or a
    ``LocalCluster`` of ``workers`` processes with one thread each. Rows come back in
    completion order and are written sorted by the grid's point order. Returns a summary
    (points, skipped, evaluated, failed, seconds, where).

    On a cluster the points go in tasks of ``chunk`` points (default :func:`chunk_size`: about
    16 tasks per worker), so the scheduler's per-task cost is paid once per chunk.
    """
    out = Path(out)
    points = expand(grid)
    order = {p["point_id"]: i for i, p in enumerate(points)}
    old = read_done(out)
    done = {r["point_id"] for r in old if r.get("error") is None}
    kept = [r for r in old if r["point_id"] in done or r["point_id"] not in order]
    todo = [p for p in points if p["point_id"] not in done]
    new: list[dict[str, Any]] = []
    start = time.perf_counter()

    def save() -> None:
        rows = kept + new
        rows.sort(key=lambda r: (order.get(r["point_id"], len(order)), r["point_id"]))
        _write(out, rows)

    owned: list[Any] = []
    where = "serial"
    try:
        if todo and (client is not None or scheduler is not None or workers > 1):
            from distributed import Client, LocalCluster

            if client is None and scheduler is not None:
                client = Client(scheduler)
                owned.append(client)
                where = f"scheduler {scheduler}"
            elif client is None:
                cluster = LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None)
                client = Client(cluster)
                owned += [client, cluster]
                where = f"LocalCluster of {workers} worker processes"
            else:
                where = f"scheduler {client.scheduler.address}"
            results = _distributed(todo, evaluate, client, chunk)
        else:
            results = _serial(todo, evaluate)
        last = time.monotonic()
        for row in results:
            new.append(row)
            if progress is not None:
                progress(len(new), len(todo), row["point_id"])
            if time.monotonic() - last > CHECKPOINT_SECONDS:
                save()
                last = time.monotonic()
    finally:
        if new or not out.exists():
            save()
        for thing in owned:
            thing.close()
    return {
        "grid": grid.path,
        "command": grid.command,
        "output": str(out),
        "points": len(points),
        "skipped": len(points) - len(todo),
        "evaluated": len(new),
        "failed": sum(r.get("error") is not None for r in new),
        "seconds": time.perf_counter() - start,
        "where": where,
    }
