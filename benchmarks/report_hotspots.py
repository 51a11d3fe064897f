"""Hot spots of the default report renders: each before (the numpy reference) and after.

    .venv/bin/python benchmarks/report_hotspots.py [--repeat N]

Times, on workloads shaped like the notebooks' calls, the functions the profiles of the slow
notebooks put on top and prints the ratio reference / current for each:

- ``inclusion_probabilities`` (skew_fit: fit_correlation, fit_stickiness): the prefix/suffix
  programme compiled (``routing_kernels.inclusion_below_k``) against the numpy programme
  (``routing._below_k_numpy``, which the module keeps for K > 128);
- ``sample_trace`` (cache_ladder, expert_split: fit_routing's simulated points; fit-plan's
  traces at the locality prior): the top-K step kernel (``routing_kernels.top_k_steps``) against
  the same draws and picks in plain numpy.

Each pair is also checked to give identical results (the tests do it on more cases). The first
call of each kernel loads the C library: a warm-up call is not timed.
Timings are the best of ``--repeat`` runs; on a shared box note the load average printed.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import numpy as np

from moeroof.models import routing as R
from moeroof.models.routing import (
    Dirichlet,
    Uniform,
    inclusion_probabilities,
    log_gamma_from_uniforms,
    part_concentrations,
    sample_trace,
)


def sample_trace_reference(model, steps, streams, layers, rng, *, c=np.inf, c_step=np.inf, rho=0.0,
                            groups=1, scope="trace", popularity=None, prompt_tokens=0):  # fmt: skip
    """sample_trace in plain numpy, step by step, argument checks left out; self-contained but
    for the public log_gamma_from_uniforms and part_concentrations. Its picks are defined by a
    stable sort (kept experts first in their previous slots' order, then descending score, equal
    scores by id) and its stickiness draws come from a child stream at every step."""

    def per_layer(value):
        arr = np.asarray(value, dtype=float)
        return np.full(layers, float(arr)) if arr.ndim == 0 else arr

    def child_generator(key):  # a generator seeded by rng's state and key, drawing nothing from it
        def words(state):
            if isinstance(state, dict):
                return [w for key in sorted(state) for w in (*words(key), *words(state[key]))]
            if isinstance(state, str):
                return [int.from_bytes(state.encode(), "little")]
            if isinstance(state, np.ndarray):
                return [w for x in state.ravel().tolist() for w in words(x)]
            if isinstance(state, float):
                return [int.from_bytes(np.float64(state).tobytes(), "little")]
            value = int(state)
            return [2 * value if value >= 0 else -2 * value - 1]

        seq = np.random.SeedSequence(words(rng.bit_generator.state), spawn_key=(key,))
        return np.random.Generator(np.random.PCG64(seq))

    def top_k(scores, kept_slot, k):
        # kept experts first in their previous slots' order, then descending score, equal scores
        # (a NaN as -inf) by ascending id: lexsort is stable, so one order on every machine
        ids = np.broadcast_to(np.arange(scores.shape[-1]), scores.shape)
        neg = np.where(np.isnan(scores), np.inf, -scores)
        return np.lexsort((ids, neg, kept_slot), axis=-1)[..., :k].astype(np.int32)

    rho_l = per_layer(rho)
    c_l = per_layer(c)
    k = model.top_k
    logw = None
    if popularity is not None:
        w = np.asarray(popularity, dtype=float)
        w = w / w.sum(axis=-1, keepdims=True)
    elif hasattr(model, "log_popularity"):
        logw = model.log_popularity(layers, rng)
        w = np.exp(logw)
    else:
        w = model.popularity(layers, rng)
    cs_l = per_layer(c_step)
    if logw is None:
        with np.errstate(divide="ignore"):
            logw = np.log(w)
    a_group, a_step = part_concentrations(c_l, cs_l)
    has_group, has_step = a_group > 0, a_step > 0
    neither = ~(has_group | has_step)
    group_of = np.arange(streams) * groups // streams
    child_group = child_generator(1) if np.any(has_group) else None
    child_step = child_generator(2) if np.any(has_step) else None
    shape_group = np.where(has_group, a_group, 1.0)[:, None] * w
    shape_step = np.where(has_step, a_step, 1.0)[:, None] * w
    log_group = None

    def draw_logq(redraw_group):
        nonlocal log_group
        if not (np.any(has_group) or np.any(has_step)):
            return np.broadcast_to(logw, (streams,) + w.shape)
        if child_group is not None and (log_group is None or redraw_group):
            u = child_group.random((2, groups) + w.shape)
            lg = log_gamma_from_uniforms(np.broadcast_to(shape_group, (groups,) + w.shape), u)
            log_group = np.where(has_group[:, None], lg, -np.inf)
        mass = None if log_group is None else log_group[group_of]
        if child_step is not None:
            lh = log_gamma_from_uniforms(shape_step, child_step.random((2,) + w.shape))
            lh = np.where(has_step[:, None], lh, -np.inf)
            if mass is None:
                mass = np.broadcast_to(lh, (streams,) + w.shape)
            else:
                with np.errstate(invalid="ignore"):
                    mass = np.maximum(mass, lh) + np.log1p(np.exp(-np.abs(mass - lh)))
        return np.where(neither[:, None], logw, np.where(w > 0, mass, -np.inf))

    rho_keep = float(rho_l[0]) if np.ndim(rho) == 0 else rho_l[:, None]
    sticky = bool(np.any(rho_l > 0))
    child_keep = child_generator(3) if sticky else None
    total = int(prompt_tokens) + steps
    logq = draw_logq(True)
    out = np.empty((total, streams, layers, k), dtype=np.int32)
    for step in range(total):
        if step and (scope == "step" or child_step is not None):
            logq = draw_logq(scope == "step")
        scores = logq + rng.gumbel(size=logq.shape)
        kept_slot = np.full(logq.shape, k)
        if sticky:
            keep = child_keep.random((streams, layers, k)) < rho_keep
            if step:
                s_idx, l_idx, q_idx = np.nonzero(keep)
                kept_slot[s_idx, l_idx, out[step - 1][s_idx, l_idx, q_idx]] = q_idx
        out[step] = top_k(scores, kept_slot, k)
    return out
    return out


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _inclusion_reference(*args, **kwargs):
    saved = R._KERNEL_MAX_K
    R._KERNEL_MAX_K = 0  # the numpy programme
    try:
        return inclusion_probabilities(*args, **kwargs)
    finally:
        R._KERNEL_MAX_K = saved


def _trace(fn, model, steps, streams, layers, knobs):
    return fn(model, steps, streams, layers, np.random.default_rng(5), **knobs)


def inclusion_cases():
    rng = np.random.default_rng(0)
    yield "skew_fit rows (48, 128) K=8", (rng.dirichlet(np.full(128, 0.3), size=48), 8)
    yield "skew_fit rows (41, 256) K=8", (rng.dirichlet(np.full(256, 0.5), size=41), 8)
    yield "union rows (12, 288) K=8", (rng.dirichlet(np.full(288, 1.0), size=12), 8)


def trace_cases():
    pop = np.random.default_rng(1).dirichlet(np.full(288, 0.5), size=12)
    for rho in (0.0, 0.1, 0.4, 0.7):
        knobs = {"rho": rho, "groups": 8, "popularity": pop}
        yield f"fit_routing trace 100x8x12, E=288 K=8, rho={rho}", (Uniform(288, 8), 100, 8, 12, knobs)
    yield (
        "ladder trace Dirichlet scope=step 40x16x75",
        (Dirichlet(288, 8, 0.33), 40, 16, 75, {"rho": 0.17, "scope": "step"}),
    )
    # fit-plan's traces at the locality prior's centre (rho 0.25, per-stream hot sets c = 0.149·E),
    # at a mild and at a skewed popularity (many hot-set weights underflow beside the hot set)
    for alpha in (4.94, 0.28):
        knobs = {"rho": 0.25, "c": 0.149 * 288, "groups": 8}
        yield f"fit-plan trace 1024x8x8 Dirichlet {alpha:g}, hot sets", (Dirichlet(288, 8, alpha), 1024, 8, 8, knobs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} cores")
    # warm-up: compile or load the kernels
    inclusion_probabilities(np.arange(1.0, 9.0), 3)
    sample_trace(Uniform(8, 2), 3, 2, 2, np.random.default_rng(0), rho=0.5)
    rows = []
    for name, (w, k) in inclusion_cases():
        t_ref, ref = _best(functools.partial(_inclusion_reference, w, k), args.repeat)
        t_new, new = _best(functools.partial(inclusion_probabilities, w, k), args.repeat)
        assert np.array_equal(ref, new), name
        rows.append(("inclusion_probabilities", name, t_ref, t_new))
    for name, (model, steps, streams, layers, knobs) in trace_cases():
        t_ref, ref = _best(
            functools.partial(_trace, sample_trace_reference, model, steps, streams, layers, knobs), args.repeat
        )
        t_new, new = _best(functools.partial(_trace, sample_trace, model, steps, streams, layers, knobs), args.repeat)
        assert np.array_equal(ref, new), name
        rows.append(("sample_trace", name, t_ref, t_new))
    width = max(len(r[1]) for r in rows)
    print(f"{'function':<24} {'workload':<{width}} {'before s':>9} {'after s':>9} {'ratio':>7}")
    for fn, name, t_ref, t_new in rows:
        print(f"{fn:<24} {name:<{width}} {t_ref:9.3f} {t_new:9.3f} {t_ref / t_new:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
