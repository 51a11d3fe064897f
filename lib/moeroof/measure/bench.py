"""``moeroof bench``: a measured decode step of a synthetic MoE whose experts stream from disk
(the net-tok/s replay bench, and grouped compute over the coalesced union with a serial-parity
test: two work items of the engine seed 000 comes from).

The stack: E experts × L layers, each expert two float32 matrices ``W1`` (d × f) and ``W2``
(f × d), stored once in a scratch file, expert (ℓ, e) in a slot of
``slot = ⌈2·d·f·4 / 4096⌉·4096`` bytes at offset ``(ℓ·E + e)·slot``. One expert applied to a
row x (1 × d) is the FFN ``y = relu(x·W1)·W2``: ``4·d·f`` FLOP per token per expert, so
``F_token = L·K·4·d·f``; the expert's bytes are ``e = 2·d·f·4``.

A decode step: B agents, one token each; in every layer each token's K experts (from a trace
or a seeded routing model) are applied with gates g (Σ_j g_j = 1 per token) and the hidden
state moves on as ``h ← rms_normalize(h + Σ_j g_j · FFN_{e_j}(h))``. Two modes, the two
baselines of the step model (docs/models.md):

- ``uncoalesced`` — token by token, each token reads its own K experts from the device and
  applies them (``B·K`` expert reads per layer, duplicates read again):
  :func:`moe_layer_serial`.
- ``coalesced`` — the union of the batch's experts is read once per layer, in ascending id,
  and each expert is applied as one grouped matmul over the tokens routed to it (``U(B)``
  reads per layer): :func:`moe_layer_grouped`.

Both accumulate a token's expert outputs in ascending expert id, so they differ only in how a
matmul's dot products are summed: BLAS blocks a many-row product (gemm) differently from a
one-row one (gemv), which changes float32 rounding, not the result within
``~d·f·ε₃₂`` relative (the parity tests: exact with a row-wise kernel, within a tolerance with
BLAS; exact again when every partial sum is an integer below 2²⁴).

Reads go through :class:`moeroof.measure.calibrate.DeviceFile`, the path ``calibrate`` measured:
``O_DIRECT`` (every read reaches the device), or ``posix_fadvise DONTNEED`` on the whole file
before each step and on each expert's range after it is read. The step is timed by wall clock
around the whole loop: reads, matmuls and Python overhead, serial (no read overlaps compute).
Modes are interleaved per B (B₁ uncoalesced, B₁ coalesced, B₂ …) so that a slow spell of a shared
device falls on both. Reported per (mode, B): mean step seconds over the counted steps (warm-up
steps excluded; the median beside it),
``net tok/s = B / step``, ``per-agent tok/s = 1 / step``, bytes read per step, the measured
union per layer (distinct experts, mean over layers and steps) and the coalescing ratio
``B·K / U`` (baseline: ``uncoalesced``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.core.masks import live_streams
from moeroof.core.rng import generator
from moeroof.measure import calibrate

__all__ = [
    "MODES",
    "StackShape",
    "expert_ffn",
    "moe_layer_serial",
    "moe_layer_grouped",
    "write_stack",
    "StackReader",
    "routing_topk",
    "topk_from_trace",
    "decode_step",
    "ENGINE_BATCH",
    "measure_engine",
    "run_bench",
    "bench_model",
    "predict_bench",
    "median_abs_error",
]

MODES = ("uncoalesced", "coalesced")

Apply = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
Load = Callable[[int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class StackShape:
    """Sizes of the synthetic MoE stack (module docstring)."""

    experts: int
    layers: int
    d_model: int
    d_ff: int

    def __post_init__(self) -> None:
        for name in ("experts", "layers", "d_model", "d_ff"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")

    @property
    def expert_bytes(self) -> int:
        """``e = 2·d·f·4``: W1 and W2 in float32."""
        return 2 * self.d_model * self.d_ff * 4

    @property
    def slot_bytes(self) -> int:
        """An expert's slot in the file, rounded up to :data:`ALIGN` for O_DIRECT."""
        return -(-self.expert_bytes // calibrate.ALIGN) * calibrate.ALIGN

    @property
    def file_bytes(self) -> int:
        return self.experts * self.layers * self.slot_bytes

    @property
    def flops_per_token_expert(self) -> int:
        """``4·d·f``: two matmuls of 2·d·f FLOP each for one row."""
        return 4 * self.d_model * self.d_ff

    def offset(self, layer: int, expert: int) -> int:
        return (layer * self.experts + expert) * self.slot_bytes


# ----------------------------------------------------------------------------- compute


def expert_ffn(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """``relu(x·W1)·W2`` for rows x (n × d): the default expert kernel (numpy's BLAS)."""
    return np.maximum(x @ w1, np.float32(0.0)) @ w2


def _check_layer_inputs(h: np.ndarray, topk: np.ndarray, gates: np.ndarray) -> None:
    if h.ndim != 2 or topk.ndim != 2 or topk.shape != gates.shape or topk.shape[0] != h.shape[0]:
        raise ValueError(f"expected h (B, d), topk and gates (B, K); got {h.shape}, {topk.shape}, {gates.shape}")


def moe_layer_serial(
    h: np.ndarray, topk: np.ndarray, gates: np.ndarray, load: Load, apply: Apply = expert_ffn
) -> np.ndarray:
    """Per-token serial MoE layer: ``out[b] = Σ_j g[b,j] · apply(h[b:b+1], W_{e_j})`` with the
    token's experts taken in ascending id. ``load(e)`` is called once per (token, expert):
    B·K loads — the ``uncoalesced`` baseline's reads."""
    _check_layer_inputs(h, topk, gates)
    out = np.zeros_like(h)
    for b in range(h.shape[0]):
        for j in np.argsort(topk[b], kind="stable"):
            w1, w2 = load(int(topk[b, j]))
            out[b] = out[b] + gates[b, j] * apply(h[b : b + 1], w1, w2)[0]
    return out


def moe_layer_grouped(
    h: np.ndarray, topk: np.ndarray, gates: np.ndarray, load: Load, apply: Apply = expert_ffn
) -> np.ndarray:
    """Coalesced MoE layer (grouped compute): for each expert of the union in ascending id, one
    ``load(e)`` and one grouped ``apply`` over the rows routed to it, scattered back with their
    gates. Each token's contributions therefore add up in ascending expert id, the order of
    :func:`moe_layer_serial`. U(B) loads."""
    _check_layer_inputs(h, topk, gates)
    out = np.zeros_like(h)
    order = np.argsort(topk.ravel(), kind="stable")  # each expert's (token, j) positions, in token order
    ids, starts = np.unique(topk.ravel()[order], return_index=True)
    for expert, pos in zip(ids, np.split(order, starts[1:])):
        rows = pos // topk.shape[1]  # distinct: a token picks K distinct experts
        w1, w2 = load(int(expert))
        out[rows] = out[rows] + gates.ravel()[pos][:, None] * apply(h[rows], w1, w2)
    return out


def _rms_normalize(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + np.float32(1e-6))


def decode_step(
    h0: np.ndarray, topk: np.ndarray, gates: np.ndarray, load_layer: Callable[[int], Load], mode: str
) -> np.ndarray:
    """One decode step through every layer: ``topk`` and ``gates`` (B, L, K), ``h0`` (B, d);
    ``load_layer(ℓ)`` returns the layer's ``load(e)``. Returns the last hidden state."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    layer_fn = moe_layer_grouped if mode == "coalesced" else moe_layer_serial
    h = h0
    for layer in range(topk.shape[1]):
        h = _rms_normalize(h + layer_fn(h, topk[:, layer], gates[:, layer], load_layer(layer)))
    return h


# ----------------------------------------------------------------------------- engine overhead

#: batch sizes at which :func:`measure_engine` times the decode loop
ENGINE_BATCH = (1, 2, 4, 8, 16, 32)


def measure_engine(
    *,
    experts: int = 32,
    layers: int = 4,
    top_k: int = 4,
    batch: Sequence[int] = ENGINE_BATCH,
    mode: str = "uncoalesced",
    width: int = 8,
    repeats: int = 15,
    seed: int = 0,
) -> calibrate.EngineFit:
    """The engine terms of this suite's own decode loop on this box: :func:`decode_step`'s
    per-step and per-agent-token overhead (Python, numpy call and dispatch costs), with
    everything the roofline counts made negligible.

    The stack is tiny and in memory (``d = f = width``, float32; E, L, K as ``moeroof bench``
    uses by default), so a step reads no disk, touches a few KiB and does a few thousand FLOP;
    ``load`` is a closure over the in-memory weights, as :class:`StackReader`'s is over its
    reads. Routing is uniform and gates Dirichlet(1) from ``numpy.random.default_rng(seed)``,
    B taking the first B streams (as :func:`run_bench`). One untimed pass, then ``repeats``
    rounds, each timing one step of every (mode, B) in a fresh random order (slow spells of a
    shared box fall on every cell alike); per cell the median. Both modes are timed;
    :func:`moeroof.measure.calibrate.fit_engine_line` fits ``t(B) = c0 + c1·B`` to each and the fit
    of ``mode`` is returned (the other's goes in ``extra["other_modes"]``).

    Default ``uncoalesced``: its work per step is exactly per-step plus per-token (each token
    applies its own K experts in each of the L layers), the form of the step model's engine
    term. The coalesced loop's overhead follows the union U(B) (one grouped apply per distinct
    expert), which no term of the step model counts; its line is reported with its residual.
    """
    batch = sorted({int(b) for b in batch})
    if len(batch) < 2 or batch[0] < 1:
        raise ValueError("batch: measure_engine needs at least two positive batch sizes")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if int(top_k) != top_k or not 1 <= top_k <= experts or layers < 1 or width < 1 or repeats < 1:
        raise ValueError("measure_engine: need 1 <= K <= E, layers >= 1, width >= 1, repeats >= 1")
    rng = generator(seed)
    t_start = time.perf_counter()
    d = f = int(width)
    other = _fit_modes(rng, batch, experts, top_k, layers, d, repeats)
    chosen = other.pop(mode)  # other: the modes not chosen
    us = lambda x: f"{x * 1e6:.1f}"  # noqa: E731
    source = (
        f"moeroof bench's numpy decode loop ({mode}): L = {layers} layers, K = {top_k}, E = {experts}, "
        f"d = f = {width} float32 experts in memory (no reads), B = {', '.join(map(str, batch))}, "
        f"median of {repeats} steps each; least-squares t = c0 + c1*B (rms residual {us(chosen['rms_residual_seconds'])} us); "
        "the engine overhead of this suite's bench engine on this box, not of another serving engine"
    )
    notes = [
        f"{m} loop: t = {us(v['engine_seconds_per_step'])} us + {us(v['engine_seconds_per_agent_token'])} us x B, "
        f"rms residual {us(v['rms_residual_seconds'])} us (reported, not written: its overhead follows the union U(B))"
        for m, v in other.items()
    ]
    shape = {"experts": experts, "layers": layers, "top_k": int(top_k), "d_model": d, "d_ff": f}
    return calibrate.EngineFit(
        **{k.removeprefix("engine_"): v for k, v in chosen.items()}, batch=list(batch), source=source,
        repeats=int(repeats), wall_seconds=time.perf_counter() - t_start, notes=notes,
        extra={"mode": mode, "shape": shape, "other_modes": other},
    )  # fmt: skip


def _fit_modes(
    rng: np.random.Generator, batch: list[int], experts: int, top_k: int, layers: int, d: int, repeats: int
) -> dict[str, dict[str, Any]]:
    """Per mode, the line ``t = c0 + c1·B`` through the median of the ``repeats`` step times of
    every (mode, B) on :func:`measure_engine`'s in-memory stack (``d = f``, float32), each round
    in a fresh random order after one untimed pass."""
    w = lambda: rng.standard_normal((d, d), dtype=np.float32)  # noqa: E731
    weights = [[(w(), w()) for _ in range(experts)] for _ in range(layers)]
    load_layer = lambda layer: weights[layer].__getitem__  # noqa: E731
    bmax = batch[-1]
    topk_all = routing_topk("uniform", experts, top_k, layers, repeats + 1, bmax, rng).astype(np.int64)
    gates_all = rng.dirichlet(np.ones(top_k), size=(repeats + 1, bmax, layers)).astype(np.float32)
    h_all = rng.standard_normal((repeats + 1, bmax, d), dtype=np.float32)
    cells = [(m, b) for m in MODES for b in batch]
    times: dict[tuple[str, int], list[float]] = {c: [] for c in cells}
    for r in range(repeats + 1):
        for j in rng.permutation(len(cells)):
            m, b = cells[j]
            t0 = time.perf_counter()
            decode_step(h_all[r, :b], topk_all[r, :b], gates_all[r, :b], load_layer, m)
            dt = time.perf_counter() - t0
            if r > 0:  # the first pass warms caches and numpy's dispatch
                times[m, b].append(dt)
    fits = {}
    for m in MODES:
        med = [float(np.median(times[m, b])) for b in batch]
        c0, c1, rms = calibrate.fit_engine_line(batch, med)
        fits[m] = dict(
            engine_seconds_per_step=c0, engine_seconds_per_agent_token=c1, rms_residual_seconds=rms, step_seconds=med
        )
    return fits


# ----------------------------------------------------------------------------- the stack on disk


def write_stack(
    path: Path,
    shape: StackShape,
    rng: np.random.Generator,
    progress: calibrate.Progress | None = None,
    share: float = 0.0,
) -> None:
    """Write the E·L experts, each ``W1`` then ``W2`` (float32, C order) at its slot, and fsync.

    Weights are uniform with standard deviation ``1/sqrt(d)`` (W1) and ``1/sqrt(f)`` (W2), cut
    from one random pool at a random offset per expert (distinct contents without paying the
    generator for every byte)."""
    d, f = shape.d_model, shape.d_ff
    n = d * f
    pool = (rng.random(4 * n + 1024, dtype=np.float32) - np.float32(0.5)) * np.float32(np.sqrt(12.0))
    pad = bytes(shape.slot_bytes - shape.expert_bytes)
    total = shape.experts * shape.layers
    with open(path, "wb") as fh:
        for _ in range(total):
            o1, o2 = (int(x) for x in rng.integers(0, pool.size - n, size=2))
            fh.write((pool[o1 : o1 + n] * np.float32(1.0 / np.sqrt(d))).tobytes())
            fh.write((pool[o2 : o2 + n] * np.float32(1.0 / np.sqrt(f))).tobytes())
            fh.write(pad)
            if progress is not None:
                progress.advance(share / total)
        fh.flush()
        os.fsync(fh.fileno())


class StackReader:
    """Reads experts of a stack file through :class:`DeviceFile` into one aligned buffer;
    :meth:`load` returns ``(W1, W2)`` as views of that buffer, valid until the next load."""

    def __init__(self, path: Path, shape: StackShape, read_path: str = "auto") -> None:
        self.shape = shape
        self.dev = calibrate.DeviceFile(path, read_path)
        self.buf = calibrate.aligned_buffer(shape.slot_bytes)
        d, f = shape.d_model, shape.d_ff
        flat = np.frombuffer(self.buf, dtype=np.float32, count=2 * d * f)
        self.w1 = flat[: d * f].reshape(d, f)
        self.w2 = flat[d * f :].reshape(f, d)

    def load_layer(self, layer: int) -> Load:
        def load(expert: int) -> tuple[np.ndarray, np.ndarray]:
            self.dev.read_into(self.buf, self.shape.offset(layer, expert), self.shape.slot_bytes)
            return self.w1, self.w2

        return load

    def close(self) -> None:
        del self.w1, self.w2
        with contextlib.suppress(BufferError):  # a caller still holds a view of the weights: it goes with that
            self.buf.close()
        self.dev.close()


# ----------------------------------------------------------------------------- routing


def routing_topk(
    spec: str, experts: int, top_k: int, layers: int, steps: int, streams: int, rng: np.random.Generator
) -> np.ndarray:
    """Top-K ids (steps, streams, layers, K) from a routing model: ``uniform`` or ``zipf:S``
    (popularity ∝ rank^−S, an independent permutation per layer), Gumbel-top-K draws
    (:func:`moeroof.models.routing.sample_trace`) from ``rng``."""
    from moeroof.models.routing import Uniform, Zipf, sample_trace

    if spec == "uniform":
        model: Any = Uniform(experts, top_k)
    elif spec.startswith("zipf:"):
        try:
            s = float(spec.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"routing {spec!r}: expected zipf:S with a number S") from None
        model = Zipf(experts, top_k, s)
    else:
        raise ValueError(f"routing {spec!r}: expected uniform or zipf:S (a captured trace is passed as trace)")
    return sample_trace(model, steps, streams, layers, rng)


def topk_from_trace(trace: np.ndarray, shape: StackShape, top_k: int, steps: int, streams: int) -> np.ndarray:
    """(steps, streams, layers, K) from a captured trace (T, S, L', K), checked against the stack:
    the trace's steps in order (cycling) that have at least ``streams`` live streams (no ``-1``
    in any layer), the first ``streams`` live ones, the stack's first ``layers`` layers."""
    arr, layers = np.asarray(trace), shape.layers
    if arr.ndim != 4 or arr.size == 0:
        raise ValueError(f"trace: holds no token (shape {tuple(arr.shape)}: steps × streams × layers × K)")
    if arr.shape[-1] != top_k:
        raise ValueError(f"top_k: K={top_k} does not match the trace's K={arr.shape[-1]}")
    if int(np.max(arr)) >= shape.experts:
        raise ValueError(f"experts: E={shape.experts} but the trace names expert {int(np.max(arr))}")
    if arr.shape[2] < layers:
        raise ValueError(f"layers={layers}: the trace has only {arr.shape[2]} layers")
    live = live_streams(arr[:, :, :layers])  # (T, S)
    usable = np.flatnonzero(live.sum(axis=1) >= streams)
    if usable.size == 0:
        raise ValueError(
            f"batch: no step of the trace has {streams} live streams (at most {int(live.sum(axis=1).max())})"
        )
    out = np.empty((steps, streams, layers, arr.shape[3]), dtype=np.int64)
    for i in range(steps):
        t = usable[i % usable.size]
        ids = np.flatnonzero(live[t])[:streams]
        out[i] = arr[t, ids, :layers]
    return out


# ----------------------------------------------------------------------------- the run


def _check_bench_args(
    shape: StackShape, top_k: int, batch: Sequence[int], modes: Sequence[str], steps: int, warmup_steps: int
) -> list[int]:
    """The batch sizes sorted and deduplicated, the other arguments checked (ValueError)."""
    batch = sorted({int(b) for b in batch})
    if not batch or batch[0] < 1:
        raise ValueError("batch: batch sizes must be positive integers")
    if int(top_k) != top_k or not 1 <= top_k <= shape.experts:
        raise ValueError(f"top_k: K={top_k} must be in [1, E={shape.experts}]")
    if steps < 1 or warmup_steps < 0:
        raise ValueError("steps must be >= 1 and warmup_steps >= 0")
    for m in modes:
        if m not in MODES:
            raise ValueError(f"modes: {m!r} is not one of {MODES}")
    return batch


def _check_resources(
    shape: StackShape, top_k: int, bmax: int, n_steps: int, scratch_dir: str | os.PathLike[str] | None
) -> Path | None:
    """The scratch folder (None: the temporary one), its free disk and the free memory checked
    (ResourceError) before anything is written."""
    base = Path(scratch_dir) if scratch_dir is not None else None
    if base is not None and not base.is_dir():
        raise calibrate.ResourceError(f"scratch_dir: {base} is not a directory")
    # the stack's file: experts × layers × expert bytes (d_model × d_ff)
    what = "experts/layers/d_model/d_ff"
    calibrate.check_disk(base if base is not None else tempfile.gettempdir(), shape.file_bytes, what)
    d, f = shape.d_model, shape.d_ff
    memory = shape.slot_bytes + 8 * bmax * (d + f) * 4 + n_steps * bmax * (d + shape.layers * top_k * 3) * 8
    calibrate.check_memory(memory, "batch/d_model/d_ff/steps")  # steps × batch: the routing and gates drawn
    return base


def _bench_cell(
    reader: StackReader, mode: str, b: int, inputs: tuple[np.ndarray, ...], warmup_steps: int, advance: Callable
) -> tuple[dict[str, Any], np.ndarray]:
    """One (mode, B) row of the report, and the first step's final hidden state: its steps run
    from cold page cache, the warm-up ones not counted; ``advance()`` after each step."""
    topk_all, gates_all, h_all = inputs
    top_k, dev = topk_all.shape[-1], reader.dev
    times, nbytes, nreads, unions = [], [], [], []
    for t in range(topk_all.shape[0]):
        topk, gates = topk_all[t, :b], gates_all[t, :b]
        dev.drop_cache()
        bytes0, reads0 = dev.bytes_read, dev.reads
        t0 = time.perf_counter()
        h = decode_step(h_all[t, :b], topk, gates, reader.load_layer, mode)
        dt = time.perf_counter() - t0
        if t == 0:
            first = h
        advance()
        if t >= warmup_steps:
            times.append(dt)
            nbytes.append(dev.bytes_read - bytes0)
            nreads.append(dev.reads - reads0)
            unions.append(float(np.mean([np.unique(topk[:, layer]).size for layer in range(topk.shape[1])])))
    step, union = float(np.mean(times)), float(np.mean(unions))
    row = {"batch": b, "mode": mode, "step_seconds": step, "step_seconds_median": float(np.median(times))}
    row.update(net_tok_s=b / step, per_agent_tok_s=1.0 / step, bytes_read_per_step=float(np.mean(nbytes)))
    row.update(reads_per_step=float(np.mean(nreads)), union_per_layer=union, coalescing_ratio=b * top_k / union)
    return {**row, "step_seconds_each": times}, first


_BENCH_NOTES = [
    "step_seconds: mean wall time of the counted steps (reads + matmuls + Python, serial, no overlap)",
    "coalescing_ratio = batch·K / measured union per layer, against the uncoalesced baseline",
    "mode_parity_max_abs_diff: largest |coalesced − uncoalesced| of the first step's final hidden state "
    "(float32; BLAS sums gemm and gemv dot products in different orders)",
]

_BENCH_COLUMNS = (
    "batch mode step_seconds step_seconds_median net_tok_s per_agent_tok_s bytes_read_per_step reads_per_step "
    "union_per_layer coalescing_ratio step_seconds_each"
).split()


def run_bench(
    shape: StackShape,
    top_k: int,
    batch: Sequence[int],
    *,
    modes: Sequence[str] = MODES,
    routing: str = "uniform",
    trace: np.ndarray | None = None,
    trace_label: str = "",
    steps: int = 5,
    warmup_steps: int = 1,
    seed: int = 0,
    scratch_dir: str | os.PathLike[str] | None = None,
    read_path: str = "auto",
    command: str = "",
    progress: calibrate.Progress | None = None,
) -> dict[str, Any]:
    """Write the stack to a scratch file, run ``warmup_steps + steps`` decode steps per (mode, B)
    and return the JSON-ready report (keys: the module docstring).

    Routing: ``trace`` (T, S, L', K) when given, else ``routing`` drawn from
    ``numpy.random.default_rng(seed)`` — the same ``warmup_steps + steps`` steps for every B
    and mode, B taking the first B streams. Gates are Dirichlet(1) per token from the same
    generator; the first hidden state is standard normal. All sizes are checked against free
    disk and memory before anything is written; the scratch file is removed on every exit.
    """
    batch = _check_bench_args(shape, top_k, batch, modes, steps, warmup_steps)
    bmax = batch[-1]
    n_steps = warmup_steps + steps
    base = _check_resources(shape, top_k, bmax, n_steps, scratch_dir)
    rng = generator(seed)
    if trace is None:
        topk_all = routing_topk(routing, shape.experts, top_k, shape.layers, n_steps, bmax, rng).astype(np.int64)
    else:
        topk_all = topk_from_trace(trace, shape, top_k, n_steps, bmax)
    routing_label = routing if trace is None else trace_label or "trace"
    gates_all = rng.dirichlet(np.ones(top_k), size=(n_steps, bmax, shape.layers)).astype(np.float32)
    h_all = rng.standard_normal((n_steps, bmax, shape.d_model), dtype=np.float32)
    prog = progress if progress is not None else calibrate.Progress("bench", enabled=False)

    def work(mode: str, b: int) -> int:  # expert reads per layer and step
        return b * top_k if mode == "uncoalesced" else min(b * top_k, shape.experts)

    total_work = float(sum(work(m, b) for m in modes for b in batch)) * n_steps or 1.0
    rows: list[dict[str, Any]] = []
    finals: dict[tuple[str, int], np.ndarray] = {}
    t_start = time.perf_counter()
    with calibrate.scratch_space(base) as scratch:
        path = scratch / "stack.bin"
        prog.phase(f"writing the stack ({shape.file_bytes / 2**20:g} MiB)")
        write_stack(path, shape, rng, prog, share=0.1)
        inputs = (topk_all, gates_all, h_all)
        with contextlib.closing(StackReader(path, shape, read_path)) as reader:
            for b in batch:  # modes interleaved per B, so a slow spell of the device hits both alike
                for mode in modes:
                    prog.phase(f"{mode} B={b}")
                    advance = partial(prog.advance, 0.9 * work(mode, b) / total_work)
                    row, finals[mode, b] = _bench_cell(reader, mode, b, inputs, warmup_steps, advance)
                    rows.append(row)
    both = set(modes) == set(MODES)  # then every B has both final states
    parity = [float(np.max(np.abs(finals["coalesced", b] - finals["uncoalesced", b]))) for b in batch] if both else []
    prog.finish()
    report: dict[str, Any] = {c: [r[c] for r in rows] for c in _BENCH_COLUMNS}
    report.update(_bench_meta(shape, top_k, reader.dev, base, command))
    report.update(routing=routing_label, seed=seed, steps=steps, warmup_steps=warmup_steps)
    report.update(wall_seconds=time.perf_counter() - t_start, mode_parity_max_abs_diff=max(parity) if parity else None)
    return {**report, "notes": list(_BENCH_NOTES)}


def _bench_meta(
    shape: StackShape, top_k: int, dev: calibrate.DeviceFile, base: Path | None, command: str
) -> dict[str, Any]:
    """The report's description of the run: the read path, the machine, the date, the stack."""
    return {
        "what": "moeroof bench: decode steps of a synthetic MoE stack streamed from disk",
        "provenance": "witnessed",
        "read_path": dev.read_path,
        "read_method": dev.method,
        "machine": calibrate.machine_info(base if base is not None else tempfile.gettempdir()),
        "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "command": command or "moeroof bench (library call)",
        "coalescing_baseline": "uncoalesced",
        "shape": asdict(shape),
        **{k: getattr(shape, k) for k in ("experts", "layers")},
        "top_k": int(top_k),
        **{k: getattr(shape, k) for k in ("d_model", "d_ff", "expert_bytes", "slot_bytes", "file_bytes")},
        "flops_per_token": shape.layers * top_k * shape.flops_per_token_expert,
    }


def bench_model(report: dict[str, Any], name: str = "moeroof-bench"):
    """The :class:`moeroof.data.presets.MoEModel` of a bench run, for :func:`moeroof.models.plan.plan`:
    E, K, L and ``expert_bytes = 2·d·f·4`` from the report; ``flops_per_token = L·K·4·d·f``;
    no dense band (the bench has none: ``non_routed_bytes = 0``), no KV cache (no attention);
    every number ``witnessed`` (it is the bench's own size, not an estimate)."""
    from moeroof.data.presets import bench_model as witnessed_model

    sizes = {k: report[k] for k in ("experts", "top_k", "expert_bytes", "flops_per_token")}
    model = witnessed_model(name, moe_layers=report["layers"], **sizes)
    sources = {k: "moeroof bench sizes" for k in model.provenance}
    return replace(model, precision="float32", description="moeroof bench's synthetic stack", sources=sources)


def predict_bench(
    report: dict[str, Any], hardware, *, overlap: str = "sum", routing: str | None = None
) -> dict[str, Any]:
    """The roofline's prediction of every (mode, B) row of a bench report, and its error.

    Model: :func:`bench_model` (E, K, L, ``e = 2·d·f·4``, ``F_token = L·K·4·d·f``, no dense
    band, no KV); ``hardware`` a calibrated :class:`moeroof.data.presets.Hardware` (predict from
    ``calibrate``'s numbers only — never tuned on the bench); ``Workload(context_tokens=0,
    overlap=overlap)``, one read per expert (read size ``e``); routing ``routing`` (default: the
    report's ``uniform`` / ``zipf:S``; a trace-driven report needs the trace path here). Per row::

        coalesced:    T = combine(L·U(B)·e / BW_ssd(e),  L·U(B)·e / BW_mem,  B·F_token / FLOPS,  c0 + c1·B)
        uncoalesced:  T = combine(L·B·K·e / BW_ssd(e),   L·B·K·e / BW_mem,   B·F_token / FLOPS,  c0 + c1·B)
        net tok/s = B / T;   relative error = predicted / measured − 1

    with ``U(B) = Σ_i [1 − (1 − π_i)^B]``, the independent-token union, and the engine term
    ``c0 + c1·B`` from the hardware's ``engine_seconds_per_step`` and
    ``engine_seconds_per_agent_token`` (``moeroof calibrate`` measures them for this suite's
    numpy decode loop; 0 where the calibration did not). ``overlap="sum"`` adds the terms (a
    serial loop: read, then compute), ``"max"`` assumes perfect overlap. The step seconds and the
    binding term are :func:`moeroof.models.plan.step_terms`'s (the one step model). The
    engine terms used and their provenance are reported (``engine``).
    """
    from moeroof.models.plan import Workload, routing_from_spec, step_terms

    model = bench_model(report)
    spec = routing or str(report["routing"])
    if spec.startswith("trace"):
        raise ValueError("a trace-driven bench report needs routing=PATH of the trace for its prediction")
    r = routing_from_spec(spec, model)
    w = Workload(context_tokens=0, overlap=overlap)
    batch = np.asarray(report["batch"], dtype=int)
    grid = np.unique(batch)
    names = "step_seconds net_tok_s bytes_read_per_step union_per_layer coalescing_ratio".split()
    out: dict[str, Any] = {k: [] for k in [f"predicted_{n}" for n in names] + ["bound", "relative_error"]}
    by_mode = {
        mode: step_terms(model, hardware, w, r, grid, coalesced=(mode == "coalesced")) for mode in set(report["mode"])
    }
    terms_rows: dict[str, list[float]] = {}
    for b, mode, measured in zip(batch, report["mode"], report["net_tok_s"]):
        t = by_mode[mode]
        i = int(np.flatnonzero(grid == b)[0])
        step = float(t["step_seconds"][i])
        net = b / step
        row = (step, net, t["ssd_bytes"][i], t["union"][i], b * model.top_k / t["union"][i])
        for n, v in zip(names, row):
            out[f"predicted_{n}"].append(float(v))
        out["bound"].append(str(t["bound"][i]))
        out["relative_error"].append(float(net / measured - 1.0))
        for n, v in t["terms"].items():
            terms_rows.setdefault(n, []).append(float(v[i]))
    keys = ("engine_seconds_per_step", "engine_seconds_per_agent_token")
    engine: dict[str, Any] = {k: float(getattr(hardware, k)) for k in keys}
    engine["provenance"] = {k: hardware.provenance.get(k, "assumed") for k in keys}
    engine["source"] = {k: hardware.sources.get(k, "") for k in keys}
    out.update(batch=batch.tolist(), mode=list(report["mode"]), measured_net_tok_s=list(report["net_tok_s"]))
    out.update(overlap=overlap, hardware=hardware.name, routing=r.label, terms_seconds=terms_rows, engine=engine)
    return out


def median_abs_error(pred: dict[str, Any]) -> dict[str, float]:
    """Median |relative error| of predicted net tok/s, per mode."""
    err = np.abs(np.asarray(pred["relative_error"]))
    modes = np.asarray(pred["mode"])
    return {m: float(np.median(err[modes == m])) for m in MODES if np.any(modes == m)}
