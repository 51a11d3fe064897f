#!/usr/bin/env python
"""Performance benchmarks (docs/benchmarks.md), on ONE pinned core (`make bench`).

Items (floors as docs/benchmarks.md states them; each measured as a ratio against a stated reference):

1. plug-in U(B) for 80 layers x E=256, B = 1..4096 (every integer): floor 50 ms.
   Library ``moeroof.models.union.union_plugin(pi, batch)``; reference the direct numpy expression
   ``(1 - (1 - pi[..., None]) ** b).sum(axis=1)``, chunked over layers.
   ``inclusion_probabilities`` (computing pi) is timed separately, with no floor.
2. rarefaction U(B) with a 200-replicate bootstrap band, 80 layers, T = 5000 tokens,
   24 log-spaced batch sizes in 1..4096: floor 2 s.
   Library ``moeroof.models.union.union_histogram(..., bootstrap=200, rng=rng)``; reference a
   per-layer, per-replicate loop of gammaln rarefaction on the same bootstrap replicate counts
   (timed on a subset of replicates and scaled linearly; the full reference is also run once,
   untimed by the floor, to check the library's band).

3. the roofline plan: 1024 batch sizes x 80 layers, floor 100 ms (pinned hot set).
3b. the plan with a simulated LRU cache: 16 batch sizes, a redraw after a control that
   leaves the simulations alone (memoised) under 1 s; the cold run is the reference.
4. exact LRU miss-ratio curve (every capacity, one pass: ``moeroof.cachesim.lru_hit_curve``) of
   10^7 requests over 80 layers x 256 experts = 20 480 items: floor 3 s.
5. LRU simulation at one capacity (``moeroof.cachesim.simulate``), same requests: floor
   5 million requests per second.
   Items 4 and 5 are compared with a C implementation of the same algorithm
   (``benchmarks/cache_ref.c``, compiled with ``cc -O2`` into a temp dir at run time and run on
   the same request array written to a temp file); skipped with a note when no C compiler is
   found. The first call (the C library's load) is excluded from the timings and reported.

Exit status: 0 all floors met, 1 a floor missed, 3 library and reference disagree
(beyond 1e-9 relative for item 1, 1e-6 for item 2). ``--quick`` runs small sizes (a smoke run);
Results go to ``reports/benchmarks/results.json`` (not tracked: a run on your machine leaves
``git status`` clean); ``--record`` writes ``benchmarks/results.json``, the committed record the
docs/benchmarks.md quotes; ``--no-write`` writes nothing.
"""

from __future__ import annotations

import dataclasses
import os

# Pin one core before numpy (and its BLAS) is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_PINNED = None
if hasattr(os, "sched_setaffinity"):
    try:
        os.sched_setaffinity(0, {0})
        _PINNED = sorted(os.sched_getaffinity(0))
    except OSError:  # pragma: no cover - e.g. CPU 0 not in our cpuset
        _PINNED = None

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy  # noqa: E402
from scipy.special import gammaln, ndtri  # noqa: E402

import moeroof  # noqa: E402
from moeroof.models import (
    routing,
    union,  # noqa: E402
)

HERE = Path(__file__).resolve().parent
RECORD = HERE / "results.json"
RESULTS = HERE.parent / "reports" / "benchmarks" / "results.json"

EXPERTS = 256
TOP_K = 8
TOKENS = 5000
SEED = 20240610
TOL_PLUGIN = 1e-9
TOL_RAREFACTION = 1e-6


# --------------------------------------------------------------------------------------------
# timing


def timeit(fn, repeats: int, setup=None, warmup: int = 1):
    """Best-of-N wall times (time.perf_counter) of ``fn(*setup())``, after ``warmup`` calls.

    ``setup`` runs untimed before each call (e.g. a fresh seeded rng); gc is off while timing.
    Returns (list of seconds, the last result).
    """
    out = None
    for _ in range(warmup):
        out = fn(*(setup() if setup else ()))
    times = []
    gc_was = gc.isenabled()
    try:
        for _ in range(repeats):
            args = setup() if setup else ()
            gc.collect()
            gc.disable()
            t0 = time.perf_counter()
            out = fn(*args)
            times.append(time.perf_counter() - t0)
            if gc_was:
                gc.enable()
    finally:
        if gc_was:
            gc.enable()
    return times, out


def rel_diff(lib: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max abs difference, max relative difference with |ref| floored at 1 expert)."""
    lib = np.asarray(lib, dtype=float)
    ref = np.asarray(ref, dtype=float)
    if lib.shape != ref.shape:
        return float("inf"), float("inf")
    d = np.abs(lib - ref)
    return float(np.max(d)), float(np.max(d / np.maximum(np.abs(ref), 1.0)))


# --------------------------------------------------------------------------------------------
# item 1: plug-in


def reference_plugin(pi: np.ndarray, batch: np.ndarray, chunk: int = 8) -> np.ndarray:
    """The direct expression ``(1 - (1 - pi[..., None]) ** b).sum(axis=1)``, chunked over layers."""
    b = batch.astype(float)
    return np.concatenate(
        [(1.0 - (1.0 - pi[i : i + chunk, :, None]) ** b).sum(axis=1) for i in range(0, pi.shape[0], chunk)]
    )


def bench_plugin(layers: int, repeats: int, ref_repeats: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(SEED)
    popularity = routing.Zipf(EXPERTS, TOP_K, 1.0).popularity(layers, rng)
    batch = np.arange(1, 4097)

    t_pi, pi = timeit(lambda: routing.inclusion_probabilities(popularity, TOP_K), max(1, repeats // 2))
    t_lib, curve = timeit(lambda: union.union_plugin(pi, batch), repeats)
    t_ref, ref = timeit(lambda: reference_plugin(pi, batch), ref_repeats)
    max_abs, max_rel = rel_diff(curve.union_per_layer, ref)

    pi_row = {
        "item": "1b. inclusion_probabilities (pi; no floor)",
        "what": f"moeroof.models.routing.inclusion_probabilities, {layers} layers x E={EXPERTS}, K={TOP_K}, Zipf s=1",
        "floor_s": None,
        "best_s": min(t_pi),
        "median_s": statistics.median(t_pi),
        "repeats": len(t_pi),
        "reference": None,
        "ratio": None,
        "pass": None,
    }
    row = {
        "item": "1. plug-in U(B)",
        "what": f"moeroof.models.union.union_plugin, {layers} layers x E={EXPERTS}, B = 1..4096 (every integer)",
        "floor_s": 0.050,
        "best_s": min(t_lib),
        "median_s": statistics.median(t_lib),
        "repeats": len(t_lib),
        "reference": {
            "what": "numpy (1 - (1 - pi[..., None]) ** b).sum(axis=1), chunked 8 layers at a time",
            "best_s": min(t_ref),
            "median_s": statistics.median(t_ref),
            "repeats": len(t_ref),
            "scaled": False,
        },
        # speed-up: reference time / library time (best of each)
        "ratio": min(t_ref) / min(t_lib),
        "max_abs_diff": max_abs,
        "max_rel_diff": max_rel,
        "tolerance_rel": TOL_PLUGIN,
        "agree": bool(max_rel <= TOL_PLUGIN),
    }
    row["pass"] = bool(row["best_s"] < row["floor_s"])
    return pi_row, row


# --------------------------------------------------------------------------------------------
# item 3: the step roofline (1024 batch sizes x 80 layers under 100 ms)


def reference_plan_net(model, hw, workload, pi: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Net tok/s from the step model's formulas (docs/models.md) with explicit powers (no power-sum tricks)."""
    b = batch.astype(float)
    srt = -np.sort(-pi, axis=1)
    cache_experts = workload.cache_bytes / (model.moe_layers * model.expert_bytes)
    c = int(np.floor(cache_experts))
    keep = (1.0 - srt[:, :, None]) ** b  # (L, E, nB)
    union = (1.0 - keep).sum(axis=1).mean(axis=0)
    misses = (1.0 - keep[:, c:, :]).sum(axis=1).mean(axis=0)
    ssd = model.moe_layers * misses * model.expert_bytes / hw.ssd_bandwidth(model.expert_bytes)
    mem = (
        model.non_routed_bytes
        + model.moe_layers * union * model.expert_bytes
        + b * workload.context_tokens * model.kv_bytes_per_token
    ) / hw.bw_mem_bytes_per_s
    flops = b * (model.flops_per_token + workload.context_tokens * model.attn_flops_per_context_token) / hw.flops_per_s
    return b / np.maximum(np.maximum(ssd, mem), flops)


def bench_plan_redraw(layers: int, repeats: int) -> dict:
    """Item 3b: ``plan`` with the simulated LRU cache at 16 batch sizes, cold (nothing memoised)
    and redrawn (a control that leaves the simulations' inputs alone, here the SSD bandwidth, as
    the whatif sliders do): floor 1 s for the redraw; the reference is the cold run."""
    from moeroof.data import presets
    from moeroof.models import expert_cache
    from moeroof.models import plan as roofline

    rng = np.random.default_rng(SEED)
    model = presets.load_model("glm-5.2")
    hw = presets.load_hardware("nvme-gen4")
    workload = roofline.Workload(context_tokens=4096, cache_bytes=30 * 2**30, cache_policy="lru")
    pi = routing.inclusion_probabilities(
        routing.Zipf(model.experts, model.top_k, 0.8).popularity(layers, rng), model.top_k
    )
    r = roofline.RoutingProbabilities(pi, "zipf 0.8", "assumed")
    batch = np.unique(np.round(np.geomspace(1, 256, 16)).astype(int))
    os.environ["MOEROOF_CACHE_DIR"] = ""  # a cold start: no results kept on disk by earlier runs
    expert_cache.clear_memo()
    t0 = time.perf_counter()
    cold = roofline.plan(model, hw, workload, r, batch)
    cold_s = time.perf_counter() - t0
    bws = iter(np.linspace(0.5, 2.0, 10 * (repeats + 1)))

    def redraw():
        f = next(bws)
        h = dataclasses.replace(hw, bw_ssd_bytes_per_s=tuple(x * f for x in hw.bw_ssd_bytes_per_s))
        return roofline.plan(model, h, workload, r, batch)

    t_warm, warm = timeit(redraw, repeats)
    row = {
        "item": "3b. plan redraw, simulated LRU",
        "what": f"moeroof.models.plan.plan with cache_policy=lru, glm-5.2 on nvme-gen4, 30 GiB cache, {layers} layer "
        f"shapes, {batch.size} batch sizes 1..256; redraw = new SSD bandwidth, simulations memoised",
        "floor_s": 1.0,
        "best_s": min(t_warm),
        "median_s": statistics.median(t_warm),
        "repeats": len(t_warm),
        "reference": {
            "what": "the same plan cold (memo cleared: every steady-state simulation run)",
            "best_s": cold_s,
            "median_s": cold_s,
            "repeats": 1,
            "scaled": False,
        },
        "ratio": cold_s / min(t_warm),
        "max_abs_diff": 0.0,
        "max_rel_diff": 0.0,
        "agree": bool(np.allclose(cold.cache_hit_rate, warm.cache_hit_rate, rtol=0, atol=0)),
    }
    row["pass"] = bool(row["best_s"] < row["floor_s"])
    return row


def bench_plan(layers: int, repeats: int, ref_repeats: int) -> dict:
    from moeroof.data import presets
    from moeroof.models import plan as roofline

    rng = np.random.default_rng(SEED)
    model = presets.load_model("glm-5.2")
    # RAM raised so no batch size caps the cache (the reference has no memory-pressure model)
    hw = dataclasses.replace(presets.load_hardware("nvme-gen4"), ram_bytes=2e12)
    # a whole number of cached experts per layer so the reference needs no interpolation
    # the reference is the closed-form hot set: the pinned (oracle) policy
    workload = roofline.Workload(
        context_tokens=4096, cache_bytes=20 * model.moe_layers * model.expert_bytes, cache_policy="static"
    )
    pi = routing.inclusion_probabilities(
        routing.Zipf(model.experts, model.top_k, 0.8).popularity(layers, rng), model.top_k
    )
    r = roofline.RoutingProbabilities(pi, "zipf 0.8", "assumed")
    batch = np.arange(1, 1025)
    t_lib, p = timeit(lambda: roofline.plan(model, hw, workload, r, batch), repeats)
    t_ref, ref = timeit(lambda: reference_plan_net(model, hw, workload, pi, batch), ref_repeats)
    max_abs, max_rel = rel_diff(p.net_tok_s, ref)
    row = {
        "item": "3. roofline plan",
        "what": f"moeroof.models.plan.plan (with its 3 baselines), glm-5.2 on nvme-gen4 (2 TB RAM), {layers} layer shapes x E=256, B = 1..1024",
        "floor_s": 0.100,
        "best_s": min(t_lib),
        "median_s": statistics.median(t_lib),
        "repeats": len(t_lib),
        "reference": {
            "what": "the step model's formulas with explicit (1 - pi)^B arrays, net tok/s only (no baselines)",
            "best_s": min(t_ref),
            "median_s": statistics.median(t_ref),
            "repeats": len(t_ref),
            "scaled": False,
        },
        "ratio": min(t_ref) / min(t_lib),
        "max_abs_diff": max_abs,
        "max_rel_diff": max_rel,
        "tolerance_rel": TOL_PLUGIN,
        "agree": bool(max_rel <= TOL_PLUGIN),
    }
    row["pass"] = bool(row["best_s"] < row["floor_s"])
    return row


# --------------------------------------------------------------------------------------------
# item 2: rarefaction with bootstrap band


def reference_rarefaction_one(y: np.ndarray, tokens: int, b: np.ndarray) -> np.ndarray:
    """``Σ_i [1 − C(T−Y_i, B)/C(T, B)]`` for one layer via gammaln; the ratio is 0 where T−Y < B."""
    yy = y.astype(float)[:, None]
    t = float(tokens)
    n = t - yy
    ok = n >= b
    n_safe = np.where(ok, n, b)
    log_ratio = gammaln(n_safe + 1.0) - gammaln(n_safe - b + 1.0) - gammaln(t + 1.0) + gammaln(t - b + 1.0)
    return np.where(ok, 1.0 - np.exp(log_ratio), 1.0).sum(axis=0)


def reference_rarefaction(reps: np.ndarray, tokens: int, batch: np.ndarray) -> np.ndarray:
    """Straightforward loop: every replicate, every layer. reps (R, layers, E) → (R, layers, nB)."""
    b = batch.astype(float)[None, :]
    out = np.empty(reps.shape[:2] + (batch.size,))
    for r in range(reps.shape[0]):
        for layer in range(reps.shape[1]):
            out[r, layer] = reference_rarefaction_one(reps[r, layer], tokens, b)
    return out


def replicate_counts(counts: np.ndarray, tokens: int, bootstrap: int, seed: int):
    """The bootstrap replicates union_histogram draws with ``default_rng(seed)``.

    Mirrors union_histogram: the iNEXT assemblage, then one ``rng.binomial`` call. Returns None
    when the library no longer exposes the assemblage (then the band check is skipped).
    """
    assemblage = getattr(union, "_bootstrap_assemblage", None)
    if assemblage is None:
        return None
    layers = counts.shape[0]
    t = np.full(layers, tokens, dtype=np.int64)
    probs = assemblage(counts, t, counts.shape[1])
    rng = np.random.default_rng(seed)
    return rng.binomial(t[None, :, None], probs[None, :, :], size=(bootstrap,) + probs.shape)


def bench_rarefaction(layers: int, bootstrap: int, ref_subset: int, repeats: int) -> dict:
    rng = np.random.default_rng(SEED + 1)
    popularity = routing.Zipf(EXPERTS, TOP_K, 1.0).popularity(layers, rng)
    # the trace is drawn in chunks of tokens (same distribution, bounded memory); counts add up
    counts = np.zeros((layers, EXPERTS), dtype=np.int64)
    for start in range(0, TOKENS, 500):
        n = min(500, TOKENS - start)
        counts += routing.histogram_from_trace(routing.sample_topk(popularity, TOP_K, n, rng), EXPERTS)
    batch = np.unique(np.round(np.logspace(0.0, np.log10(4096.0), 25)).astype(np.int64))
    assert batch.max() <= TOKENS, "reference covers rarefaction (B <= T) only"
    boot_seed = SEED + 2

    def call(r):
        return union.union_histogram(counts, TOKENS, batch, top_k=TOP_K, bootstrap=bootstrap, rng=r)

    t_lib, curve = timeit(call, repeats, setup=lambda: (np.random.default_rng(boot_seed),))

    checks = {}
    # (a) the point estimate (rarefaction of the observed counts)
    ref_point = reference_rarefaction(counts[None], TOKENS, batch)[0]
    checks["point"] = rel_diff(curve.union_per_layer, ref_point)

    reps = replicate_counts(counts, TOKENS, bootstrap, boot_seed)
    band_checked = reps is not None
    if reps is None:
        reps = np.random.default_rng(boot_seed).binomial(TOKENS, counts / TOKENS, size=(bootstrap,) + counts.shape)
        band_note = "union._bootstrap_assemblage not found: band not checked, replicates from Binomial(T, Y/T)"
    else:
        band_note = "replicates reconstructed as union_histogram draws them (same seed)"
    sub = min(ref_subset, bootstrap)

    # the reference is timed on the point + `sub` replicates and scaled linearly to point + R
    t_ref, ref_sub = timeit(
        lambda: reference_rarefaction(np.concatenate([counts[None], reps[:sub]]), TOKENS, batch), repeats
    )
    scale = (bootstrap + 1) / (sub + 1)

    # (b) library rarefaction vs reference on the same replicate counts
    lib_sub, _ = union.rarefaction(reps[:sub], np.full(layers, TOKENS), batch, EXPERTS)
    checks["replicates"] = rel_diff(lib_sub, ref_sub[1:])

    # (c) the band: the full reference once (untimed by the floor), then iNEXT's estimate ± z·sd
    full_ref_s = None
    if band_checked:
        t0 = time.perf_counter()
        ref_boot = reference_rarefaction(reps, TOKENS, batch)
        full_ref_s = time.perf_counter() - t0
        z = float(ndtri(0.5 + 0.95 / 2.0))
        sd = ref_boot.std(axis=0, ddof=1)
        lo = np.clip(ref_point - z * sd, 0, EXPERTS)
        hi = np.clip(ref_point + z * sd, 0, EXPERTS)
        d_lo = rel_diff(curve.band.low, lo)
        d_hi = rel_diff(curve.band.high, hi)
        checks["band"] = (max(d_lo[0], d_hi[0]), max(d_lo[1], d_hi[1]))

    max_abs = max(v[0] for v in checks.values())
    max_rel = max(v[1] for v in checks.values())
    ref_best = min(t_ref) * scale
    row = {
        "item": "2. rarefaction U(B) + bootstrap band",
        "what": (
            f"moeroof.models.union.union_histogram, {layers} layers x E={EXPERTS}, T={TOKENS}, "
            f"{batch.size} log-spaced B in 1..4096, bootstrap={bootstrap}"
        ),
        "floor_s": 2.0,
        "best_s": min(t_lib),
        "median_s": statistics.median(t_lib),
        "repeats": len(t_lib),
        "reference": {
            "what": (
                "per-layer, per-replicate loop of gammaln rarefaction on the same replicate counts "
                f"(point + {bootstrap} replicates); timed on point + {sub} replicates, scaled x{scale:.3g}"
            ),
            "best_s": ref_best,
            "median_s": statistics.median(t_ref) * scale,
            "repeats": len(t_ref),
            "scaled": sub < bootstrap,
            "subset_replicates": sub,
            "subset_best_s": min(t_ref),
            "full_single_run_s": full_ref_s,
        },
        "ratio": ref_best / min(t_lib),
        "max_abs_diff": max_abs,
        "max_rel_diff": max_rel,
        "checks": {k: {"max_abs_diff": v[0], "max_rel_diff": v[1]} for k, v in checks.items()},
        "check_note": band_note,
        "tolerance_rel": TOL_RAREFACTION,
        "agree": bool(max_rel <= TOL_RAREFACTION),
    }
    row["pass"] = bool(row["best_s"] < row["floor_s"])
    return row


# --------------------------------------------------------------------------------------------
# items 4 and 5: expert cache, against a C implementation of the same algorithm

CACHE_LAYERS = 80
CACHE_EXPERTS = 256
CACHE_UNION = 64  # distinct experts a step requests per layer


def cache_requests(n_requests: int, seed: int):
    """A request stream of ~n_requests: each step requests 64 of 256 experts per layer (80
    layers), drawn by Gumbel-top-64 on a Zipf(0.7) popularity permuted per layer."""
    from moeroof import cachesim as cache

    rng = np.random.default_rng(seed)
    steps = max(1, n_requests // (CACHE_LAYERS * CACHE_UNION))
    logw = np.log(routing.Zipf(CACHE_EXPERTS, CACHE_UNION, 0.7).popularity(CACHE_LAYERS, rng))
    topk = np.empty((steps, 1, CACHE_LAYERS, CACHE_UNION), dtype=np.int16)
    for s0 in range(0, steps, 128):
        n = min(128, steps - s0)
        keys = logw + rng.gumbel(size=(n, CACHE_LAYERS, CACHE_EXPERTS))
        topk[s0 : s0 + n, 0] = np.argpartition(-keys, CACHE_UNION, axis=-1)[..., :CACHE_UNION]
    t0 = time.perf_counter()
    req = cache.requests_from_trace(topk, CACHE_EXPERTS)
    return req, time.perf_counter() - t0


def compile_c_reference(tmp: Path):
    """Compile benchmarks/cache_ref.c with ``cc -O2``; (binary path, note)."""
    import shutil
    import subprocess

    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None, "no C compiler found (cc, gcc, clang): C comparison skipped"
    exe = tmp / "cache_ref"
    proc = subprocess.run([cc, "-O2", "-o", str(exe), str(HERE / "cache_ref.c")], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"C compile failed ({cc}): {proc.stderr.strip()[:200]}; C comparison skipped"
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()
    return exe, f"{cc} -O2 ({version[0] if version else 'unknown version'})"


def run_c(exe: Path, args: list) -> list[str]:
    import subprocess

    out = subprocess.run([str(exe)] + [str(a) for a in args], capture_output=True, text=True, check=True)
    return out.stdout.split()


def bench_cache(n_requests: int, repeats: int) -> tuple[dict, dict]:
    from moeroof import cachesim as cache
    from moeroof.kernels import cache as cache_kernels

    req, build_s = cache_requests(n_requests, SEED + 3)
    items = req.items
    n = items.size
    n_items = req.n_items
    # first-call time of each kernel on a tiny input (loading the C library; the timings exclude it)
    tiny = cache.Requests(
        items[:100].copy(), req.step[:100].copy(), req.layer[:100].copy(), req.steps, req.layers, req.experts
    )
    t0 = time.perf_counter()
    cache.lru_hit_curve(tiny)
    compile_mrc = time.perf_counter() - t0
    t0 = time.perf_counter()
    cache.simulate(tiny, 10)
    compile_lru = time.perf_counter() - t0

    # request-by-request lookup: the order the C reference (and libCacheSim) replays
    t_mrc, (caps, rate) = timeit(lambda: cache.lru_hit_curve(req, lookup="request"), repeats)
    capacity = int(0.25 * n_items)
    t_sim, res = timeit(lambda: cache.simulate(req, capacity, policy="lru", lookup="request"), repeats)
    lib_hits = int(res.hits_per_step.sum())
    # the C kernel alone, as simulate calls it: one
    # lookup per request, hits counted per step (simulate adds its checks and the result record)
    group = np.zeros(n_items, np.int64)
    cap = np.array([float(capacity)])
    off, cstep = req.lookups()
    kernel_args = (items, group, cap, np.ones(n_items), off, cstep, True, req.steps, np.zeros(1), False)
    t_kernel, _ = timeit(lambda: cache_kernels.lru_pass(*kernel_args, np.zeros(0, bool)), repeats)
    curve_hits = int(round(rate[capacity] * n))

    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        exe, c_note = compile_c_reference(tmp)
        c_mrc = c_lru = None
        if exe is not None:
            path = tmp / "items.bin"
            # the C reference takes items relabelled 0..d-1 (any labelling: LRU distances ignore it)
            uniq, dense = np.unique(items, return_inverse=True)
            d = int(uniq.size)
            dense.astype("<i8").tofile(path)
            out = run_c(exe, ["mrc", path, d, 2 * d + 64, repeats])
            c_mrc_s = float(out[0])
            hist = np.array(out[1:], dtype=np.int64)
            hist[0] = 0
            c_rate = np.cumsum(hist)[: d + 1] / n
            c_mrc = (c_mrc_s, c_rate)
            items.astype("<i8").tofile(path)
            out = run_c(exe, ["lru", path, n_items, capacity, repeats])
            c_lru = (float(out[0]), int(out[1]))

    def row(item, what, floor, times, c, c_what, diff, extra):
        r = {
            "item": item,
            "what": what,
            "floor_s": floor,
            "best_s": min(times),
            "median_s": statistics.median(times),
            "repeats": len(times),
            "reference": None,
            "ratio": None,
            "first_call_s": extra,
            "requests": int(n),
            "items": int(n_items),
            "requests_from_trace_s": build_s,
            "c_note": c_note,
        }
        if c is not None:
            r["reference"] = {"what": c_what, "best_s": c, "median_s": None, "repeats": repeats, "scaled": False}
            r["ratio"] = c / min(times)
            r["max_abs_diff"] = diff
            r["max_rel_diff"] = diff
            r["tolerance_rel"] = 0.0
            r["agree"] = bool(diff == 0.0)
        r["pass"] = bool(r["best_s"] < floor)
        return r

    mrc_diff = None if c_mrc is None else float(np.max(np.abs(c_mrc[1] - rate)))
    mrc_row = row(
        "4. exact LRU miss-ratio curve",
        f"moeroof.cachesim.lru_hit_curve: {n:,} requests over {n_items:,} items, hit rate at every capacity 0..{caps[-1]}",
        3.0 * n / 1e7,
        t_mrc,
        None if c_mrc is None else c_mrc[0],
        f"C (benchmarks/cache_ref.c mrc, {c_note}): stack distances by a Fenwick tree over positions, on the "
        "relabelled items (moeroof's C kernel: a Fenwick tree over 64-position words and a bitmap, the same distances)",
        mrc_diff,
        compile_mrc,
    )
    lru_diff = None if c_lru is None else float(abs(c_lru[1] - lib_hits))
    lru_row = row(
        "5. LRU simulation, one capacity",
        f"moeroof.cachesim.simulate(policy='lru', capacity={capacity} experts): {n:,} requests "
        f"(floor = 5 M requests/s); hits equal the curve's: {lib_hits == curve_hits}",
        n / 5e6,
        t_sim,
        None if c_lru is None else c_lru[0],
        f"C (benchmarks/cache_ref.c lru, {c_note}): same linked-list LRU, hit count only",
        lru_diff,
        compile_lru,
    )
    lru_row["requests_per_s"] = n / min(t_sim)
    lru_row["kernel_best_s"] = min(t_kernel)
    lru_row["kernel_ratio"] = None if c_lru is None else c_lru[0] / min(t_kernel)
    mrc_row["requests_per_s"] = n / min(t_mrc)
    if lib_hits != curve_hits:
        lru_row["agree"] = False
    return mrc_row, lru_row


# --------------------------------------------------------------------------------------------
# machine info and output


def machine_info() -> dict:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "platform": platform.platform(),
        "uname": " ".join(platform.uname()),
        "processor": platform.processor() or None,
        "cpu_model": cpu_model,
        "nproc": os.cpu_count(),
        "affinity": _PINNED,
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "moeroof": getattr(moeroof, "__version__", None),
        "env": {
            v: os.environ.get(v)
            for v in (
                "OMP_NUM_THREADS",
                "OPENBLAS_NUM_THREADS",
                "MKL_NUM_THREADS",
                "OPENBLAS_CORETYPE",
                "OPENBLAS_L2_SIZE",
            )
        },
    }
    try:
        import threadpoolctl  # noqa: PLC0415 - optional, never a dependency

        info["threadpoolctl"] = [
            {k: p.get(k) for k in ("user_api", "internal_api", "version", "num_threads", "architecture")}
            for p in threadpoolctl.threadpool_info()
        ]
    except ImportError:
        info["threadpoolctl"] = "not importable"
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.25
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        info["numpy_blas"] = {k: blas.get(k) for k in ("name", "version", "openblas configuration")}
    except Exception:  # noqa: BLE001 - informational only
        pass
    return info


def fmt_s(x) -> str:
    if x is None:
        return "—"
    return f"{x * 1e3:.1f} ms" if x < 1.0 else f"{x:.2f} s"


def table(rows: list[dict]) -> str:
    lines = [
        "| item | floor | best | median | reference (best) | ratio (ref/lib) | agreement | pass |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ref = r.get("reference")
        ref_s = "—" if ref is None else fmt_s(ref["best_s"]) + (" (scaled)" if ref.get("scaled") else "")
        ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.1f}x"
        if "max_rel_diff" in r:
            agree = (
                f"max abs {r['max_abs_diff']:.1e}, rel {r['max_rel_diff']:.1e} ({'ok' if r['agree'] else 'DISAGREE'})"
            )
        else:
            agree = "—"
        ok = "—" if r.get("pass") is None else ("pass" if r["pass"] else "FAIL")
        lines.append(
            f"| {r['item']} | {fmt_s(r.get('floor_s'))} | {fmt_s(r['best_s'])} | {fmt_s(r['median_s'])} "
            f"| {ref_s} | {ratio} | {agree} | {ok} |"
        )
    return "\n".join(lines)


def write_json(path: Path, payload: dict) -> None:
    """The results, written whole (:func:`moeroof.core.atomic.write_text`)."""
    from moeroof.core import atomic

    atomic.write_text(path, json.dumps(payload, indent=2) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: 8 layers, 20 replicates (a smoke run)")
    ap.add_argument("--no-write", action="store_true", help="write no results file")
    ap.add_argument(
        "--record",
        action="store_true",
        help="write benchmarks/results.json (the committed record) instead of reports/benchmarks/results.json",
    )
    args = ap.parse_args(argv)

    if args.quick:
        layers, bootstrap, ref_subset = 8, 20, 20
        rep1, ref_rep1, rep2 = 3, 1, 1
        cache_n, rep_cache = 1_000_000, 2
    else:
        layers, bootstrap, ref_subset = 80, 200, 20
        rep1, ref_rep1, rep2 = 7, 3, 3
        cache_n, rep_cache = 10_000_000, 3

    info = machine_info()
    print(
        "# moeroof benchmarks (docs/benchmarks.md)" + (" — QUICK smoke run, not the full sizes" if args.quick else "")
    )
    print()
    print(f"- machine: {info['uname']}")
    print(f"- processor: {info['processor']!r}; CPU model: {info['cpu_model']}; nproc: {info['nproc']}")
    print(f"- pinned to CPU(s): {info['affinity']}; load average at start: {info['loadavg_at_start']}")
    print(f"- python {info['python']}, numpy {info['numpy']}, scipy {info['scipy']}, moeroof {info['moeroof']}")
    print(f"- env: {', '.join(f'{k}={v}' for k, v in info['env'].items())}")
    print(f"- threadpoolctl: {info['threadpoolctl']}")
    if "numpy_blas" in info:
        print(f"- numpy BLAS: {info['numpy_blas']}")
    print()
    sys.stdout.flush()

    pi_row, plug_row = bench_plugin(layers, rep1, ref_rep1)
    rare_row = bench_rarefaction(layers, bootstrap, ref_subset, rep2)
    plan_row = bench_plan(layers, rep1, ref_rep1)
    redraw_row = bench_plan_redraw(layers, rep1)
    mrc_row, lru_row = bench_cache(cache_n, rep_cache)
    rows = [plug_row, pi_row, rare_row, plan_row, redraw_row, mrc_row, lru_row]

    print(table(rows))
    print()
    print("Notes:")
    print(
        f"- times are wall clock (time.perf_counter), best and median of N after one warm-up; N = {rep1} "
        f"(plug-in), {plug_row['reference']['repeats']} (its reference), {rep2} (rarefaction and its reference)."
    )
    print("- ratio = reference best / library best (higher is faster than the reference).")
    print(f"- plug-in reference: {plug_row['reference']['what']}.")
    ref2 = rare_row["reference"]
    print(f"- rarefaction reference: {ref2['what']}.")
    if ref2["full_single_run_s"] is not None:
        print(
            f"  The full reference run once took {fmt_s(ref2['full_single_run_s'])} "
            f"(scaled estimate {fmt_s(ref2['best_s'])})."
        )
    checks = ", ".join(f"{k} rel {v['max_rel_diff']:.1e}" for k, v in rare_row["checks"].items())
    print(
        "- rarefaction library time includes the bootstrap assemblage and the binomial draws; "
        f"checks: {checks} ({rare_row['check_note']})."
    )
    print(
        f"- tolerances: plug-in {TOL_PLUGIN:g} relative, rarefaction {TOL_RAREFACTION:g} relative "
        "(elementwise, |reference| floored at 1 expert)."
    )
    print(
        f"- cache items 4-5: {mrc_row['requests']:,} requests over {mrc_row['items']:,} (layer, expert) items "
        f"(requests_from_trace took {fmt_s(mrc_row['requests_from_trace_s'])}, untimed); floors scale with the "
        f"request count (3 s per 10^7; 5 M requests/s). Curve {mrc_row['requests_per_s'] / 1e6:.1f} M requests/s, "
        f"LRU simulation {lru_row['requests_per_s'] / 1e6:.1f} M requests/s (its C kernel alone "
        f"{fmt_s(lru_row['kernel_best_s'])}, C/kernel ratio "
        f"{'—' if lru_row['kernel_ratio'] is None else format(lru_row['kernel_ratio'], '.2f')}x). First call (the library's load, "
        f"excluded): curve {fmt_s(mrc_row['first_call_s'])}, LRU {fmt_s(lru_row['first_call_s'])}. "
        f"C reference: {mrc_row['c_note']}; ratio = C time / library time; agreement is exact (hit counts)."
    )

    disagree = [r["item"] for r in rows if r.get("agree") is False]
    missed = [r["item"] for r in rows if r.get("pass") is False]
    status = 3 if disagree else (1 if missed else 0)
    print()
    if disagree:
        print(f"DISAGREE: library and reference differ beyond tolerance for: {', '.join(disagree)}")
    if missed:
        print(f"FLOOR MISSED: {', '.join(missed)}")
    if not disagree and not missed:
        print("all floors met; library and reference agree")

    if not args.no_write:
        target = RECORD if args.record else RESULTS
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json(
            target,
            {
                "quick": args.quick,
                "exit_status": status,
                "machine": info,
                "items": rows,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )
        print(f"wrote {target.relative_to(HERE.parent)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
