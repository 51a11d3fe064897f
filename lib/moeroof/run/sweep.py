"""Sweeps: a grid of ``plan`` / ``cache`` / ``union`` / ``fit-routing`` evaluations, serially or on
dask.distributed.

A grid is a TOML file (:func:`read_grid`)::

    command = "plan"                           # plan | cache | union | fit-routing
    model = ["glm-5.2", "deepseek-v3"]         # an axis: a list of values
    cache_gib = {start = 0, stop = 40, step = 20}   # an axis: a range, stop included
    batch = [1, 8, 64]

    [fixed]                                    # inputs every point shares
    routing = "zipf:0.9"

Every top-level key but ``command`` and ``fixed`` is an axis; a scalar is an axis of one value.
:func:`expand` gives the points (the Cartesian product of the axes, in the file's axis order,
each with the fixed inputs); :func:`point_id` names a point by a hash of its command and inputs,
so the id does not depend on the axis order or on which file the point came from.

The commands and their inputs (:data:`KEYS`; a key no command takes is an error naming it):

- ``plan`` (what ``moeroof plan`` computes, one batch size a point): ``model``, ``hardware``,
  ``batch`` (required); ``cache_gib`` (a number or ``"auto"``), ``cache_policy``,
  ``cache_scope``, ``context``, ``overlap``, ``routing``, ``read_size_kib``, ``ranks``,
  ``partition``, ``seed``, ``page_cache``.
- ``union`` (``moeroof union``): ``batch`` (required); ``histogram`` (a path), or ``experts``,
  ``top_k`` and ``layers`` (the uniform closed form).
- ``cache`` (``moeroof cache``): ``capacity`` (experts, required), ``policy``, ``scope``,
  ``warmup_steps``, ``streams`` (the batch B), and the trace: a file, ``trace`` (``streams``
  then takes its first B streams), or a synthetic trace sampled in the point (:func:`synthetic_trace`:
  exactly what ``moeroof trace`` writes for the same knobs): ``routing`` (``uniform``,
  ``zipf:S`` or ``dirichlet:ALPHA``), ``experts``, ``top_k``, ``layers``, ``steps``, ``streams``
  and ``seed`` (all required with ``routing``), ``rho`` (stickiness, default 0). One or the
  other, never both (:data:`SYNTHETIC_KEYS`). The rows add the trace's shape.
- ``fit-routing`` (``moeroof fit-routing``, :func:`moeroof.fit.routing.fit_routing`):
  ``points`` (a POINTS .csv), ``experts``, ``top_k``, ``layers`` (required); ``expert_bytes``,
  ``seeds`` (how many fit seeds, default 4), ``seed`` (the first of them, default 0),
  ``bootstrap`` (default 8), ``timed_steps`` (default 16), ``families`` (comma-separated,
  default both), ``max_sim_layers`` (default 16), ``max_history`` (default 2048) and
  ``calibrate``: ``"all"`` (default: every row with a value calibrates) or the POINTS line
  numbers of the rows that calibrate, comma-separated; the other rows with a value are held
  out — predicted, and scored against their measured value (``holdout_*`` columns). The rows
  give the chosen family, each knob with its 5–95 % interval, the scaled residual and the
  largest miss in tolerances, and every predicted row as JSON text (``rows_json``).

Paths (``trace``, ``histogram``, ``points``) are read as every command reads them
(:func:`moeroof.core.paths.resolve_data`: the working directory, else the suite's ``data/``).

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

import contextlib
import functools
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

from moeroof.core import atomic, limits
from moeroof.core.errors import wraps_interrupt
from moeroof.core.input_files import NotRegularFileError, check_regular, read_input_bytes
from moeroof.core.limits import LongNumberError, check_document, parse_toml
from moeroof.core.optional import require
from moeroof.core.paths import resolve_data
from moeroof.run.cluster import open_client, worker_count

__all__ = [
    "CHECKPOINT_SECONDS",
    "COMMANDS",
    "COUNT_KEYS",
    "KEYS",
    "MAX_POINTS",
    "MAX_SYNTHETIC_IDS",
    "SYNTHETIC_KEYS",
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
    "synthetic_trace",
]

#: the evaluations a grid may sweep
COMMANDS = ("plan", "cache", "union", "fit-routing")

#: a cache point's synthetic trace: these keys, all of them (``rho`` optional), instead of ``trace``
SYNTHETIC_KEYS = ("routing", "experts", "top_k", "layers", "steps", "streams", "seed")
#: keys that only a synthetic trace takes (``streams`` also picks a trace file's first streams)
_SYNTHETIC_ONLY = ("routing", "experts", "top_k", "layers", "steps", "seed", "rho")

#: the inputs each command takes (grid keys), and which of them every point must have
KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "plan": (
        tuple(
            "model hardware batch cache_gib cache_policy cache_scope context overlap routing read_size_kib ranks "
            "partition seed page_cache".split()
        ),
        ("model", "hardware", "batch"),
    ),
    "union": (("batch", "experts", "top_k", "layers", "histogram"), ("batch",)),
    "cache": (
        ("trace", "capacity", "policy", "scope", "warmup_steps", "streams", *_SYNTHETIC_ONLY),
        ("capacity",),  # and trace, or every key of SYNTHETIC_KEYS (_check_cache_source)
    ),
    "fit-routing": (
        tuple(
            "points experts top_k layers expert_bytes seeds seed bootstrap timed_steps families max_sim_layers "
            "max_history calibrate".split()
        ),
        ("points", "experts", "top_k", "layers"),
    ),
}

#: the most points one grid may expand to
MAX_POINTS = 1_000_000

#: the most expert ids (steps · streams · layers · K) one synthetic trace may hold (1 GiB of int32)
MAX_SYNTHETIC_IDS = 2**28

#: how often a running sweep rewrites its Parquet file with the rows done so far
CHECKPOINT_SECONDS = 30.0


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
        if not _number(v) or not math.isfinite(v):
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


#: grid keys that are sizes, with their unit in bytes: finite and at most :data:`MAX_GIB` GiB once
#: converted (``cache_gib = 1e300`` is finite, but 2^30 times it is inf bytes: a sweep of it
#: returned ``cache_gib_used = inf`` with status 0)
_SIZE_KEYS = {"cache_gib": 2**30, "read_size_kib": 2**10, "expert_bytes": 1}


def _check_size(path: Any, key: str, name: str, value: Any) -> None:
    """A size key's value (:data:`_SIZE_KEYS`): a number (``cache_gib`` may be ``"auto"``) whose
    bytes are finite, ≥ 0 (> 0, and ≥ 1 B for ``expert_bytes``) and at most :data:`MAX_GIB` GiB."""
    if name == "cache_gib" and isinstance(value, str) and value.strip().lower() == "auto":
        return
    if not _number(value):
        kinds = 'a number or "auto"' if name == "cache_gib" else "a number"
        raise GridError(path, key, f"must be {kinds}, got {value!r}")
    try:
        nbytes = float(value) * _SIZE_KEYS[name]
    except OverflowError:  # an int beyond a double (TOML ints are 64-bit, a dict's are not)
        nbytes = math.inf
    if not math.isfinite(nbytes) or nbytes > limits.MAX_GIB * 2**30:
        raise GridError(path, key, f"{value!r} is more than the {limits.MAX_GIB:.4g} GiB a size may be")
    if nbytes < 0 or (name != "cache_gib" and nbytes <= 0):
        raise GridError(path, key, f"must be {'>= 0' if name == 'cache_gib' else '> 0'}, got {value!r}")
    if name == "expert_bytes" and nbytes < 1:
        raise GridError(path, key, f"an expert of less than one byte ({value!r}) is not a size")


#: grid keys that are counts, with their range (:mod:`moeroof.core.limits`, as the commands' flags
#: bound them): ``experts = 2^62`` was swept into a union of 2^62 experts, exit 0
COUNT_KEYS: dict[str, tuple[int, int]] = {
    "experts": (1, limits.MAX_EXPERTS),
    "top_k": (1, limits.MAX_EXPERTS),
    "layers": (1, limits.MAX_LAYERS),
    "batch": (1, limits.MAX_BATCH),
    "streams": (1, limits.MAX_BATCH),
    "ranks": (1, limits.MAX_EXPERTS),
    "steps": (1, limits.MAX_TOKENS),
    "warmup_steps": (0, limits.MAX_TOKENS),
    "context": (0, limits.MAX_TOKENS),
    "capacity": (0, limits.MAX_CELLS),
    "seeds": (1, limits.MAX_FIT_SEEDS),
    "seed": (0, (1 << 63) - 1),
    "bootstrap": (0, limits.MAX_REPLICATES),
    "timed_steps": (1, limits.MAX_SIMULATED_STEPS),
    "max_history": (0, limits.MAX_SIMULATED_STEPS),
    "max_sim_layers": (1, limits.MAX_LAYERS),
}


def _number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_values(path: Any, key: str, values: list[Any]) -> None:
    """A key's values: each a number, a string or a boolean, finite; then a size's bounds
    (:func:`_check_size`), or a count's number within its range (:data:`COUNT_KEYS`) before any
    point is made of it (a count that is not a number is left to the point's own check)."""
    for v in values:
        if isinstance(v, (dict, list)):
            raise GridError(path, key, f"a value must be a number, a string or a boolean, got {v!r}")
        if isinstance(v, float) and not math.isfinite(v):
            raise GridError(path, key, f"a value must be finite, got {v!r}")
    name = key.removeprefix("fixed.")
    low, high = COUNT_KEYS.get(name, (-math.inf, math.inf))
    for v in values:
        if name in _SIZE_KEYS:
            _check_size(path, key, name, v)
        elif _number(v) and not low <= v <= high:
            raise GridError(
                path, key, f"{v!r} is outside {low} … {high}, the {name.replace('_', ' ')} a point may have"
            )


def read_grid(path: str | Path) -> Grid:
    """Read and check a grid TOML file (see the module docstring); errors name the file and key.

    The text is bounded before it is parsed (:func:`moeroof.core.limits.check_document`: at most
    :data:`~moeroof.core.limits.MAX_TOML_BYTES` and :data:`~moeroof.core.limits.MAX_NESTING` deep;
    tomllib recurses into nested arrays)."""
    path = Path(path)
    try:
        raw = read_input_bytes(path, limits.MAX_TOML_BYTES)  # a FIFO refused, never waited on
        text = raw.decode("utf-8")
        check_document(text, "the grid", max_bytes=limits.MAX_TOML_BYTES, toml=True)
        doc = parse_toml(text)
    except IsADirectoryError:
        raise GridError(path, None, "is a directory, expected a grid .toml") from None
    except NotRegularFileError as err:
        raise GridError(path, None, f"{err}, expected a grid .toml") from None
    except UnicodeDecodeError:
        raise GridError(path, None, "not UTF-8 text, expected a grid .toml") from None
    except tomllib.TOMLDecodeError as err:
        raise GridError(path, None, f"not a TOML file ({err})") from None
    except LongNumberError as err:  # named: 2^70 experts ran to "a number is too large to compute with"
        raise GridError(path, err.key, f"{err}" + (f" (line {err.line})" if err.line else "")) from None
    except ValueError as err:
        raise GridError(path, None, str(err)) from None
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
    axes = {key: _axis_values(path, key, value) for key, value in doc.items()}
    for key, value in fixed.items():
        _check_values(path, f"fixed.{key}", [value])
        if key in axes:
            raise GridError(path, key, "is both an axis and in [fixed]; give it once")
    for key in [*axes, *fixed]:
        if key not in known:
            raise GridError(path, key, f"is not an input of {command} (known: {', '.join(known)})")
    missing = [k for k in required if k not in axes and k not in fixed]
    if missing:
        raise GridError(path, missing[0], f"{command} needs it (an axis or in [fixed])")
    if command == "cache":
        _check_cache_source(path, [*axes, *fixed])
    grid = Grid(command, axes, fixed, str(path))
    if grid.size > MAX_POINTS:
        raise GridError(path, None, f"the grid has {grid.size} points (at most {MAX_POINTS})")
    return grid


def _axis_values(path: Any, key: str, value: Any) -> tuple[Any, ...]:
    """An axis's values, checked: a range table expanded, a list, or one value; at least one,
    none twice."""
    if isinstance(value, dict):
        values = expand_range(value, path=path, key=key)
    else:  # a list, or one value
        values = value if isinstance(value, list) else [value]
    _check_values(path, key, values)
    if not values:
        raise GridError(path, key, "an axis needs at least one value")
    if len(set(map(json.dumps, values))) != len(values):
        raise GridError(path, key, "an axis lists a value twice")
    return tuple(values)


def _check_cache_source(path: Any, keys: list[str]) -> None:
    """A cache grid reads a trace file (``trace``) or samples one (every key of
    :data:`SYNTHETIC_KEYS`), not both and not neither."""
    synthetic = [k for k in keys if k in _SYNTHETIC_ONLY]
    needs = f"a synthetic trace needs {', '.join(SYNTHETIC_KEYS)} (rho optional)"
    if "trace" in keys and synthetic:
        both = "is an input of a synthetic trace, but the grid also reads a trace file (trace); give one or the other"
        raise GridError(path, synthetic[0], both)
    if "trace" not in keys and not synthetic:
        raise GridError(path, "trace", f"cache needs a trace file (trace) or a synthetic trace: {needs}")
    if synthetic:
        missing = [k for k in SYNTHETIC_KEYS if k not in keys]
        if missing:
            raise GridError(path, missing[0], f"{needs} (an axis or in [fixed])")


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
    inputs = [{**grid.fixed, **dict(zip(names, combo))} for combo in itertools.product(*grid.axes.values())]
    return [{"point_id": point_id(grid.command, i), "command": grid.command, "inputs": i} for i in inputs]


# ----------------------------------------------------------------------------- evaluation


#: the Workload knobs a plan grid may set, each with its default (a value is converted to the default's type)
_PLAN_KNOBS: dict[str, Any] = dict(
    cache_policy="lru", cache_scope="global", overlap="max", ranks=1, partition="lpt", seed=0, page_cache=False
)


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
        cache_bytes = float(auto_cache(model, hardware, [batch], context_tokens=context)["cache_bytes"][0])
    else:
        cache_bytes = float(cache_gib) * 2**30
    read_kib = inputs.get("read_size_kib")
    read_bytes = None if read_kib is None else float(read_kib) * 2**10
    knobs = {k: type(v)(inputs.get(k, v)) for k, v in _PLAN_KNOBS.items()}
    workload = Workload(context_tokens=context, cache_bytes=cache_bytes, read_size_bytes=read_bytes, **knobs)
    routing = routing_from_spec(str(inputs.get("routing", "uniform")), model)
    rep = plan(model, hardware, workload, routing, [batch]).to_dict()
    hit = rep["cache_hit_rate"]
    hit0 = sum(r[0] for r in hit) / len(hit) if isinstance(hit[0], list) else hit[0]
    base = rep["baselines"]

    def first(*keys: str) -> dict[str, Any]:
        return {k: rep[k][0] for k in keys}

    return {
        "cache_gib_used": cache_bytes / 2**30,  # cache_gib is the grid's input (a number or "auto")
        "cache_auto": auto,
        **first("step_seconds", "per_agent_tok_s", "net_tok_s", "bound"),
        "link_name": rep["link_name"],
        **first("ssd_bytes_per_token", "union_per_layer"),
        "cache_hit_rate": hit0,
        **first("coalescing_ratio", "fits_in_memory"),
        **{
            f"multiple_vs_{b.replace('-', '_')}": base[b]["multiple"][0]
            for b in ("uncoalesced", "single", "independent-boxes")
        },
        "result": rep["provenance"].get("result"),
        "non_witnessed": ",".join(rep["provenance"].get("non_witnessed") or []),
    }


def _union_outputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    from moeroof.models.union import union_histogram, union_uniform

    batch = [int(inputs["batch"])]
    if "histogram" in inputs:
        from moeroof.data.io import read_histogram

        hist = read_histogram(resolve_data(str(inputs["histogram"])))
        curve = union_histogram(hist.counts, hist.tokens, batch, top_k=hist.top_k, experts=hist.experts, bootstrap=0)
    else:
        if "experts" not in inputs or "top_k" not in inputs:
            raise ValueError("union needs a histogram, or experts and top_k (the uniform closed form)")
        curve = union_uniform(int(inputs["experts"]), int(inputs["top_k"]), batch, int(inputs.get("layers", 1)))
    return dict(
        union_per_layer=float(curve.mean[0]), coalescing_ratio=float(curve.coalescing_ratio[0]), method=curve.method[0]
    )


def _family(spec: str) -> tuple[str, float | None]:
    """``uniform`` → ("uniform", None); ``zipf:S`` (S >= 0) and ``dirichlet:ALPHA`` (ALPHA > 0)."""
    text = str(spec).strip().lower()
    if text == "uniform":
        return "uniform", None
    name, sep, value = text.partition(":")
    try:
        skew = float(value) if sep and name in ("zipf", "dirichlet") else math.nan
    except ValueError:
        skew = math.nan
    if not math.isfinite(skew) or skew < 0 or (name == "dirichlet" and skew == 0):
        raise ValueError(f"routing: expected uniform, zipf:S (S >= 0) or dirichlet:ALPHA (ALPHA > 0), got {spec!r}")
    return name, skew


def _sampled(family: str, skew: float | None, shape: tuple[int, ...], seed: int, rho: float) -> Any:
    """:func:`synthetic_trace`'s ids; ``shape`` is (experts, top_k, layers, steps, streams)."""
    import numpy as np

    from moeroof.models.locality import layer_knobs
    from moeroof.models.routing import Dirichlet, Uniform, Zipf, sample_trace

    experts, top_k, layers, steps, streams = shape
    model: Any = Uniform(experts, top_k)
    if skew is not None:  # zipf:S or dirichlet:ALPHA
        model = (Zipf if family == "zipf" else Dirichlet)(experts, top_k, skew)
    # the trace holds every layer of its model: the first MoE layer has no locality (as `moeroof trace`)
    rho_l, _ = layer_knobs(rho, np.inf, layers)
    topk = sample_trace(model, steps, streams, layers, np.random.default_rng(seed), rho=rho_l)
    topk.setflags(write=False)  # the memo's copy is shared by the points that sample the same trace
    return topk


#: the last few small traces, per process: the points of a policy × capacity sweep share them
_sampled_memo = functools.lru_cache(maxsize=4)(_sampled)
#: traces up to this many ids (64 MiB of int32) are kept in the memo
_MEMO_IDS = 2**24


def synthetic_trace(
    routing: str, experts: int, top_k: int, layers: int, steps: int, streams: int, seed: int, rho: float = 0.0
) -> Any:
    """The trace (steps, streams, layers, K) of a synthetic cache point: the ``routing`` family's
    popularity per layer (``uniform``, ``zipf:S``, ``dirichlet:ALPHA``), stickiness ``rho``,
    sampled by :func:`moeroof.models.routing.sample_trace` from ``numpy.random.default_rng(seed)``
    — the trace ``moeroof trace --family ROUTING --rho RHO --streams B --steps T --experts E
    --top-k K --layers L --seed S`` writes. Pure: the same inputs give the same ids on any worker
    (the last few small traces are kept per process, read-only)."""
    family, skew = _family(routing)
    sizes = {"experts": experts, "top_k": top_k, "layers": layers, "steps": steps, "streams": streams}
    for name, v in sizes.items():
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if not 0.0 <= float(rho) <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho!r}")
    ids = math.prod(int(v) for k, v in sizes.items() if k != "experts")
    if ids > MAX_SYNTHETIC_IDS:
        raise ValueError(f"steps · streams · layers · top_k = {ids} expert ids, more than {MAX_SYNTHETIC_IDS}")
    sample = _sampled_memo if ids <= _MEMO_IDS else _sampled
    return sample(family, skew, tuple(int(v) for v in (experts, top_k, layers, steps, streams)), int(seed), float(rho))


def _cache_outputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    from moeroof.cachesim import requests_from_trace, simulate

    streams = inputs.get("streams")
    if "trace" in inputs:
        from moeroof.data.io import read_trace

        trace = read_trace(resolve_data(str(inputs["trace"])))
        topk, experts = trace.topk, trace.experts
        selected = None if streams is None else int(streams)
    else:
        experts = int(inputs["experts"])
        synthetic = {k: inputs[k] for k in SYNTHETIC_KEYS[1:]}  # experts … seed
        topk = synthetic_trace(str(inputs["routing"]), **synthetic, rho=float(inputs.get("rho", 0.0)))
        selected = None  # the trace has exactly the B streams asked for
    requests = requests_from_trace(topk, experts, streams=selected)
    policy, scope = str(inputs.get("policy", "lru")), str(inputs.get("scope", "global"))
    capacity, warmup = float(inputs["capacity"]), int(inputs.get("warmup_steps", 0))
    res = simulate(requests, capacity, policy=policy, scope=scope, warmup_steps=warmup)
    return {
        **{k: int(getattr(res, k)) for k in ("requests", "hits", "misses")},
        "hit_rate": float(res.hit_rate),
        "experts_streamed_per_step": res.mean_bytes_streamed_per_step,
        **{f"trace_{k}": int(n) for k, n in zip(("steps", "streams", "layers", "top_k"), topk.shape)},
        "trace_experts": int(experts),
    }


def _calibrating_rows(spec: Any, rows: list[int]) -> set[int] | None:
    """``calibrate``: None for ``"all"``; else the set of POINTS line numbers (an int, or text
    ``"8,10"``), each a row of the file."""
    if isinstance(spec, str) and spec.strip().lower() == "all":
        return None
    try:
        if isinstance(spec, bool) or not isinstance(spec, (int, str)):
            raise ValueError(spec)
        chosen = {int(t) for t in ([spec] if isinstance(spec, int) else spec.split(","))}  # int() strips spaces
    except ValueError:
        raise ValueError(f"calibrate: expected 'all' or POINTS line numbers like '8,10', got {spec!r}") from None
    unknown = sorted(chosen - set(rows))
    if unknown:
        raise ValueError(f"calibrate: line {unknown[0]} is not a row of the POINTS file (rows: {rows})")
    return chosen


def _fit_routing_outputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    import dataclasses

    from moeroof.data.points import read_points
    from moeroof.fit.routing import FAMILIES, fit_routing, tolerance

    experts, top_k, layers = int(inputs["experts"]), int(inputs["top_k"]), int(inputs["layers"])
    expert_bytes = None if inputs.get("expert_bytes") is None else float(inputs["expert_bytes"])
    n_seeds, first = int(inputs.get("seeds", 4)), int(inputs.get("seed", 0))
    if n_seeds < 1 or first < 0:
        raise ValueError(f"seeds must be >= 1 and seed >= 0, got seeds={n_seeds}, seed={first}")
    families = tuple(f.strip() for f in str(inputs.get("families", ",".join(FAMILIES))).split(","))
    points = read_points(resolve_data(str(inputs["points"])), experts=experts, expert_bytes=expert_bytes)
    chosen = _calibrating_rows(inputs.get("calibrate", "all"), [p.row for p in points])
    held_out = [] if chosen is None else [p for p in points if p.calibrates and p.row not in chosen]
    if chosen is not None:
        if not any(p.calibrates and p.row in chosen for p in points):
            raise ValueError(f"calibrate: none of lines {sorted(chosen)} has a value to calibrate with")
        points = [p if p.row in chosen else dataclasses.replace(p, value=None) for p in points]
    defaults = {"bootstrap": 8, "timed_steps": 16, "max_sim_layers": 16, "max_history": 2048}
    sizes: dict[str, Any] = {k: int(inputs.get(k, v)) for k, v in defaults.items()}
    seeds = range(first, first + n_seeds)
    fit = fit_routing(points, experts, top_k, layers, expert_bytes, families=families, seeds=seeds, **sizes)
    chosen_fit = fit.families[fit.family]
    out: dict[str, Any] = {"family": fit.family, "skew_parameter": fit.knobs["skew"]["parameter"]}
    for name in ("skew", "rho", "locality_c", "history_tokens"):
        k = fit.knobs[name]
        out.update({name: float(k["value"]), f"{name}_low": float(k["low"]), f"{name}_high": float(k["high"])})
    out.update(locality_off=bool(fit.knobs["locality_c"]["off"]), fitted=",".join(fit.fitted))
    out.update({k: float(chosen_fit[k]) for k in ("residual", "max_abs_z")}, fits=bool(chosen_fit["fits"]))
    for name, f in fit.families.items():
        out.update({f"residual_{name}": float(f["residual"]), f"fits_{name}": bool(f["fits"])})
    rows = [dict(r) for r in fit.rows]
    measured_out = {p.row: p.value for p in held_out}
    z, inside = [], 0
    for r in rows:
        r["held_out"] = r["row"] in measured_out
        if r["held_out"]:
            r["measured"] = measured_out[r["row"]]
            z.append((r["predicted"] - r["measured"]) / tolerance(r["kind"], r["measured"]))
            inside += r["low"] <= r["measured"] <= r["high"]
    calibrating = sum(r["calibrates"] for r in rows)
    out.update(calibration_rows=calibrating, predicted_rows=len(rows) - calibrating, holdout_rows=len(z))
    out.update(holdout_max_abs_z=max((abs(v) for v in z), default=None), holdout_inside_band=inside if z else None)
    out["notes"] = " | ".join(fit.notes)
    finite = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]
    out["rows_json"] = json.dumps(finite, separators=(",", ":"), allow_nan=False)
    return out


_EVALUATORS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "plan": _plan_outputs,
    "union": _union_outputs,
    "cache": _cache_outputs,
    "fit-routing": _fit_routing_outputs,
}


def evaluate_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """One row: provenance, the point's inputs, its outputs (or ``error``: the exception's type
    and text) and ``elapsed_s``. Never raises for a bad point."""
    start = time.perf_counter()
    try:
        outputs = _EVALUATORS[point["command"]](point["inputs"])
        clash = set(outputs) & set(point["inputs"])
        return _row(point, {(f"out_{k}" if k in clash else k): v for k, v in outputs.items()}, None, start)
    except Exception as exc:  # a failed point is a row, not the end of the sweep
        if wraps_interrupt(exc):  # Ctrl-C inside a kernel (a SystemError): the sweep's end, not a row
            raise KeyboardInterrupt from None
        return _row(point, {}, f"{type(exc).__name__}: {exc}", start)


def _row(point: Mapping[str, Any], outputs: dict[str, Any], error: str | None, start: float | None) -> dict[str, Any]:
    """A point's row: provenance, its inputs, ``outputs``, ``error``, the suite's version and the
    seconds since ``start`` (0 for None)."""
    from moeroof import __version__

    elapsed = 0.0 if start is None else time.perf_counter() - start
    row = {"point_id": point["point_id"], "command": point["command"], **point["inputs"], **outputs}
    return {**row, "error": error, "moeroof_version": __version__, "elapsed_s": elapsed}


# ----------------------------------------------------------------------------- Parquet


def rows_table(rows: list[dict[str, Any]]) -> Any:
    """A pyarrow Table of rows (columns in first-seen order; a missing value is null). A column
    whose values mix types (``"auto"`` and numbers) is stored as text; ints and floats as floats."""
    pa = require("pyarrow", "sweep", "a sweep's Parquet results")

    columns = {}
    for name in dict.fromkeys(k for r in rows for k in r):
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
    pq = require("pyarrow.parquet", "sweep", "a sweep's Parquet results")

    table = pq.read_table(out)
    if "point_id" not in table.column_names:
        raise ValueError(f"{out}: not a sweep result (no point_id column); give another output file")
    return table.to_pylist()


#: the Parquet schema metadata key of the run record (version, command line, inputs, UTC time)
RUN_METADATA_KEY = b"moeroof.run"


def _write(out: Path, rows: list[dict[str, Any]], run: Mapping[str, Any] | None = None) -> None:
    pq = require("pyarrow.parquet", "sweep", "a sweep's Parquet results")

    table = rows_table(rows)
    if run is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_METADATA_KEY: json.dumps(run)})
    atomic.write_via(out, lambda handle: pq.write_table(table, handle))


def read_run(out: str | Path) -> dict[str, Any] | None:
    """The run record a sweep's Parquet file carries in its schema metadata (None: none)."""
    pq = require("pyarrow.parquet", "sweep", "a sweep's Parquet results")

    meta = pq.read_schema(out).metadata or {}
    return json.loads(meta[RUN_METADATA_KEY]) if RUN_METADATA_KEY in meta else None


# ----------------------------------------------------------------------------- running


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

    as_completed = require("distributed", "sweep", _PURPOSE).as_completed
    if chunk is None:
        chunk = chunk_size(len(points), worker_count(client, 1))
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
                # cluster losing the task (its worker died too often, or the cluster restarted and
                # cancelled it); its points become error rows, evaluated again on resume
                lost = f"{type(exc).__name__}: {str(exc) or 'the task was lost'}"
                rows = [_row(p, {}, lost, None) for p in by_key[future.key]]
            yield from rows
    finally:
        client.cancel([f for f in futures if not f.done()])


#: what a sweep on dask.distributed is called when distributed is not installed
_PURPOSE = "moeroof sweep (dask.distributed)"


def _where(client: Any, scheduler: str | None, workers: int) -> str:
    """Where :func:`run_sweep` runs: the client's scheduler, the address, or a LocalCluster."""
    if client is not None:
        return f"scheduler {client.scheduler.address}"
    return f"scheduler {scheduler}" if scheduler is not None else f"LocalCluster of {workers} worker processes"


def _checked_output(out: str | Path) -> Path:
    """``out``, refused unless it is a regular file or absent: it is read back and rewritten, and
    /dev/full, a FIFO or a folder is no place for that."""
    if Path(out).exists():
        try:
            check_regular(out)
        except IsADirectoryError:
            raise NotRegularFileError(out, "a folder") from None
    return Path(out)


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
    run: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate the grid's points not yet in ``out`` and write every row to ``out`` (Parquet).
    ``run``: the record the file carries in its schema metadata (:func:`read_run`: the suite's
    version, the command line, the inputs' hashes, the UTC time).

    Serially when ``workers == 1`` and no ``scheduler`` / ``client`` is given; else on
    dask.distributed: ``client`` as given, a ``Client(scheduler)`` for an address, or a
    ``LocalCluster`` of ``workers`` processes with one thread each. Rows come back in
    completion order and are written sorted by the grid's point order. Returns a summary
    (points, skipped, evaluated, failed, seconds, where).

    On a cluster the points go in tasks of ``chunk`` points (default :func:`chunk_size`: about
    16 tasks per worker), so the scheduler's per-task cost is paid once per chunk.

    The run holds ``out``'s lock (:func:`moeroof.core.atomic.exclusive`) from reading what is
    done to the last save: a second sweep onto the same file fails at once
    (:class:`moeroof.core.atomic.OutputBusyError`) instead of overwriting the first one's rows.
    """
    out = _checked_output(out)
    with atomic.exclusive(out, "another moeroof sweep"):
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
            _write(out, rows, run)

        on_cluster = bool(todo) and (client is not None or scheduler is not None or workers > 1)
        where = _where(client, scheduler, workers) if on_cluster else "serial"
        with contextlib.ExitStack() as opened:  # the client closes after the last save
            try:
                try:
                    results: Iterable[dict[str, Any]] = map(evaluate, todo)
                    if on_cluster:
                        c = opened.enter_context(open_client(client, scheduler, workers, _PURPOSE))
                        results = _distributed(todo, evaluate, c, chunk)
                    last = time.monotonic()
                    for row in results:
                        new.append(row)
                        if progress is not None:
                            progress(len(new), len(todo), row["point_id"])
                        if time.monotonic() - last > CHECKPOINT_SECONDS:
                            save()
                            last = time.monotonic()
                finally:
                    # nothing new, nothing written: a sweep stopped before its first point left a
                    # Parquet file of no columns, which the rerun refused as "not a sweep result"
                    if new:
                        # whole: a Ctrl-C during the last save cut it, and lost every point silently
                        with atomic.interrupts_held():
                            save()
            except KeyboardInterrupt:  # in the run or held until the save was done: what it kept
                kept_text = f"{len(new)} of the {len(todo)} points to evaluate are kept in {out}"
                raise KeyboardInterrupt(f"interrupted: {kept_text} (run the same command again to resume)") from None
        summary = {"grid": grid.path, "command": grid.command, "output": str(out), "points": len(points)}
        summary.update(skipped=len(points) - len(todo), evaluated=len(new))
        failed = sum(r.get("error") is not None for r in new)
        return {**summary, "failed": failed, "seconds": time.perf_counter() - start, "where": where}
