"""U(B): how many distinct experts a batch of B tokens touches per MoE layer (docs/models.md, the union).

The coalescing lever of seed 000 (L2) lives in this number: an expert that several tokens of a
decode step route to is streamed once, so a step of B tokens moves ``U(B)`` experts per layer
instead of ``B·K``. The multiple ``B·K / U(B)`` is always against the ``uncoalesced`` baseline
(B independent streams, each fetching its own K experts per layer).

Estimators, each returning a :class:`UnionCurve` (per layer, with a band):

- :func:`union_uniform` — closed form ``E·(1 − (1 − K/E)^B)`` for uniform routing (exact:
  a uniform K-subset misses a given expert with probability ``1 − K/E``).
- :func:`union_plugin` — ``Σ_i [1 − (1 − π_i)^B]`` for B tokens routed independently with
  inclusion probabilities π (a model, or a fitted histogram).
- :func:`union_histogram` — incidence rarefaction from a histogram of T tokens with incidence
  counts Y_i (Colwell et al. 2012; Chao et al. 2014, the iNEXT method):
  ``U(B) = Σ_i [1 − C(T − Y_i, B) / C(T, B)]`` for B ≤ T (exact and unbiased for B tokens
  drawn without replacement from the T observed), and Chao's extrapolation for B > T
  ``S_obs + Q̂0·[1 − (1 − Q1/(T·Q̂0 + Q1))^(B−T)]``; the unseen count Q̂0 is Chao2
  (capped at ``E − S_obs`` when E is known). Bands by the iNEXT bootstrap.
- :func:`union_from_trace` — measured: at each step draw B of the live streams without
  replacement and count distinct experts per layer (``-1`` padding ignored); the band is a
  bootstrap over steps. The gap between this and the independent plug-in is the cross-agent
  correlation (see :mod:`moeroof.fit.skew`).

The invariants ``K ≤ U(B) ≤ min(E, B·K)``, U increasing and concave in B, and "uniform π
maximizes U for fixed Σπ = K" are checked in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from moeroof.core.masks import ids_or, live_streams, trace_counts
from moeroof.core.results import Result
from moeroof.core.stats import Interval, bootstrap_replicates, percentile_interval
from moeroof.kernels import union as union_kernels
from moeroof.models.routing import inclusion_probabilities, log_dirichlet, softmax

__all__ = [
    "BASELINE",
    "UnionCurve",
    "as_batch",
    "coalescing_ratio",
    "union_uniform",
    "union_plugin",
    "power_sums",
    "rarefaction",
    "union_histogram",
    "union_from_trace",
    "TraceAgainstPlugin",
    "trace_against_plugin",
    "union_correlated",
    "distinct_per_layer",
]

#: the baseline every coalescing ratio is measured against (baseline (a) of docs/models.md)
BASELINE = "uncoalesced"


@dataclass(frozen=True)
class UnionCurve(Result):
    """Expected distinct experts per layer for each batch size, with a band.

    ``union_per_layer`` and the ends of ``band`` (:class:`moeroof.core.stats.Interval`, one per
    layer and batch size) have shape (layers, len(batch)); ``mean_band`` bounds the mean over
    layers, shape (len(batch),) (its own bootstrap, not the mean of the per-layer bands).
    ``method`` names the estimator used at each batch size; the bands' ``method`` says how they
    were made.
    """

    batch: np.ndarray
    union_per_layer: np.ndarray
    band: Interval
    mean_band: Interval
    method: tuple[str, ...]
    experts: int
    top_k: int

    @property
    def layers(self) -> int:
        return int(self.union_per_layer.shape[0])

    @property
    def mean(self) -> np.ndarray:
        """Mean over layers of the expected union, shape (len(batch),)."""
        u = self.union_per_layer
        n = np.sum(~np.isnan(u), axis=0)
        return np.where(n > 0, np.nansum(u, axis=0) / np.maximum(n, 1), np.nan)

    @property
    def total(self) -> np.ndarray:
        """Expected distinct (layer, expert) pairs summed over layers."""
        return np.sum(self.union_per_layer, axis=0)

    @property
    def coalescing_ratio(self) -> np.ndarray:
        """``B·K / U(B)`` against the ``uncoalesced`` baseline (see :attr:`baseline`)."""
        return coalescing_ratio(self.batch, self.top_k, self.mean)

    @property
    def baseline(self) -> str:
        return BASELINE


def as_batch(batch) -> np.ndarray:
    """Validate batch sizes: a positive integer or a 1-D sequence of them."""
    arr = np.atleast_1d(np.asarray(batch))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("batch must be a non-empty 1-D sequence of positive integers")
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu" or np.any(arr < 1):
        raise ValueError(f"batch sizes must be positive integers, got {batch!r}")
    return arr.astype(np.int64)


def coalescing_ratio(batch, top_k: int, union) -> np.ndarray:
    """``B·K / U``: expert fetches saved by coalescing, against the ``uncoalesced`` baseline."""
    return as_batch(batch) * float(top_k) / np.asarray(union, dtype=float)


def _curve(batch, per_layer, band: Interval, mean_band: Interval, method, experts, top_k) -> UnionCurve:
    if isinstance(method, str):
        method = (method,) * len(batch)
    return UnionCurve(batch, per_layer, band, mean_band, tuple(method), int(experts), int(top_k))


def _exact_curve(batch, per_layer, method, experts, top_k, level: float = 1.0, why: str = "exact") -> UnionCurve:
    """A curve whose band is its point (``why``: exact, or no resampling asked for)."""
    mean = per_layer.mean(axis=0)
    band, mean_band = Interval(per_layer, per_layer, level, why), Interval(mean, mean, level, why)
    return _curve(batch, per_layer, band, mean_band, method, experts, top_k)


def _normal_curve(b, point, sd, mean_sd, level: float, how: str, method, experts, top_k, bounds=(-np.inf, np.inf)):
    """A curve whose bands are normal at ``level`` about the estimate, ``± z·sd`` per layer and
    ``± z·mean_sd`` about the mean over layers, each clipped to ``bounds``."""
    from scipy.special import ndtri

    z = float(ndtri(0.5 + level / 2.0))
    band, mean_band = (
        Interval(np.clip(c - z * s, *bounds), np.clip(c + z * s, *bounds), level, how)
        for c, s in ((point, sd), (point.mean(axis=0), mean_sd))
    )
    return _curve(b, point, band, mean_band, method, experts, top_k)


def union_uniform(experts: int, top_k: int, batch, layers: int = 1) -> UnionCurve:
    """Closed form for uniform routing: ``U(B) = E·(1 − (1 − K/E)^B)``; exact."""
    if int(experts) != experts or experts < 1 or int(top_k) != top_k or not 1 <= top_k <= experts:
        raise ValueError(f"need integers 1 <= top_k <= experts, got E={experts!r}, K={top_k!r}")
    if layers < 1:
        raise ValueError("layers must be >= 1")
    b = as_batch(batch)
    u = experts * -np.expm1(b * np.log1p(-top_k / experts)) if top_k < experts else np.full(b.shape, float(experts))
    per_layer = np.tile(u, (layers, 1))
    return _exact_curve(b, per_layer, "closed-form", experts, top_k)


#: cells (replicates × layers × experts × batch sizes) of one chunk of union_histogram's bootstrap
_REPLICATE_CELLS = 1 << 22

#: power_sums splits B = m·q + r with this fixed m, whatever the batch sizes asked for
POWER_SPLIT = 32


def power_sums(x: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """``S[..., j] = Σ_i x_i^{B_j}`` for x in [0, 1], shape (..., E) → (..., len(batch)).

    Splits ``B = m·q + r`` with the fixed ``m =`` :data:`POWER_SPLIT`: ``x^B = x^{m·q} · x^r``,
    so a sweep of B = 1…4096 costs two small power tables (the q and the r present) instead of
    E·len(B) exponentials. Each S[..., j] is the same floating-point sum over E (numpy's
    pairwise order, from the C kernel :func:`moeroof.kernels.union.product_sums`, which adds the
    products without storing them) whatever the other batch sizes: no value depends on the grid
    it is asked in (no BLAS product, whose summation order follows the matrix shapes and the CPU).
    """
    b = as_batch(batch)
    x = np.asarray(x, dtype=float)
    lead, e = x.shape[:-1], x.shape[-1]
    flat = np.ascontiguousarray(x.reshape(-1, e))
    q, r = np.divmod(b, POWER_SPLIT)
    out = np.empty((flat.shape[0], b.size))
    present_r, r_row = np.unique(r, return_inverse=True)
    powers_r = np.stack([np.power(flat, float(v)) for v in present_r])  # as_batch: at least one B
    for qv in np.unique(q):
        sel = np.flatnonzero(q == qv)
        head = np.power(flat, float(POWER_SPLIT * int(qv)))
        out[:, sel] = union_kernels.product_sums(head, powers_r, r_row[sel]).T
    return out.reshape(*lead, b.size)


def union_plugin(pi: np.ndarray, batch, top_k: int | None = None) -> UnionCurve:
    """Independent-token plug-in ``U(B) = Σ_i [1 − (1 − π_i)^B]`` per layer.

    ``pi`` has shape (layers, E) or (E,) with Σ_i π_i = K per layer (checked to 1e-6).
    """
    p = np.atleast_2d(np.asarray(pi, dtype=float))
    if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise ValueError("inclusion probabilities must lie in [0, 1]")
    k_layers = p.sum(axis=1)
    k = int(round(float(k_layers[0]))) if top_k is None else int(top_k)
    if np.any(np.abs(k_layers - k) > 1e-6 * max(k, 1)):
        raise ValueError(f"inclusion probabilities must sum to K={k} in every layer, got {k_layers}")
    b = as_batch(batch)
    per_layer = p.shape[1] - power_sums(1.0 - p, b)
    return _exact_curve(b, per_layer, "plug-in", p.shape[1], k)


def _log_ratio_unseen(t, y, b):
    """``log[C(T − Y, B) / C(T, B)]`` (−inf where T − Y < B), via betaln to avoid cancellation.

    ``C(n, B) = 1 / ((n + 1)·Beta(n − B + 1, B + 1))``; scipy's betaln keeps precision when one
    argument is large, where differences of gammaln lose about log10(T) digits.
    """
    from scipy.special import betaln

    t, y, b = (np.asarray(v, dtype=float) for v in (t, y, b))
    n = t - y
    ok = n >= b
    n_safe = np.where(ok, n, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        val = np.log1p(t) - np.log1p(n_safe) + betaln(t - b + 1.0, b + 1.0) - betaln(n_safe - b + 1.0, b + 1.0)
    val = np.where(y == 0, 0.0, val)
    return np.where(ok, np.minimum(val, 0.0), -np.inf)


def _chao_stats(y: np.ndarray, t: np.ndarray, experts: int | None):
    """Observed species, singletons Q1, doubletons Q2 and Chao2's unseen count Q̂0.

    ``y`` (..., E) incidence counts, ``t`` broadcastable to (...). Chao2 with the
    bias-corrected form when Q2 = 0 (Chao et al. 2014, Eq. 5); capped at ``E − S_obs``.
    """
    s_obs, q1, q2 = (np.sum(m, axis=-1).astype(float) for m in (y > 0, y == 1, y == 2))
    t = np.broadcast_to(np.asarray(t, dtype=float), s_obs.shape)
    f = np.where(t > 1, (t - 1.0) / t, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        q0 = np.where(q2 > 0, f * q1 * q1 / (2.0 * q2), f * q1 * np.maximum(q1 - 1.0, 0.0) / 2.0)
    if experts is not None:
        q0 = np.minimum(q0, experts - s_obs)
    return s_obs, q1, q2, np.maximum(q0, 0.0)


def rarefaction(counts: np.ndarray, tokens, batch, experts: int | None = None):
    """Rarefaction (B ≤ T) and extrapolation (B > T) of expected distinct experts.

    ``counts`` has shape (..., E) (any leading axes, e.g. bootstrap replicate × layer),
    ``tokens`` broadcasts to the leading axes. Returns (U of shape (..., len(batch)),
    a boolean array telling where extrapolation was used).
    """
    import scipy.sparse as sp

    y = np.asarray(counts)
    if y.dtype.kind not in "iu":
        if not np.all(y == np.round(y)):
            raise ValueError("incidence counts must be integers")
        y = y.astype(np.int64)
    b = as_batch(batch)
    lead, e = y.shape[:-1], y.shape[-1]
    t = np.broadcast_to(np.asarray(tokens, dtype=np.int64), lead)
    if np.any(y < 0):
        raise ValueError("incidence counts must be >= 0")
    if np.any(y > t[..., None]):
        raise ValueError("an incidence count exceeds the number of tokens T")
    y2, t2 = y.reshape(-1, e), t.reshape(-1)
    rows = y2.shape[0]
    # U depends on (T, Y) only: evaluate the ratio on unique pairs and sum by a sparse product
    t_max = int(t2.max())
    key = np.repeat(t2, e) * (t_max + 1) + y2.ravel()
    ukey, inv = np.unique(key, return_inverse=True)
    uniq = np.stack(np.divmod(ukey, t_max + 1), axis=1)
    inv = inv.ravel()
    counts_matrix = sp.csr_matrix(
        (np.ones(inv.size), (np.repeat(np.arange(rows), e), inv)), shape=(rows, uniq.shape[0])
    )
    out = np.empty((rows, b.size))
    interp = b[None, :] <= t2[:, None]
    if np.any(interp):
        ratio = np.exp(_log_ratio_unseen(uniq[:, :1], uniq[:, 1:2], b[None, :]))  # (nU, nB)
        seen_mass = counts_matrix @ (1.0 - ratio)  # Σ_i [1 − ratio_i]
        out[interp] = seen_mass[interp]
    extrap = ~interp
    if np.any(extrap):
        s_obs, q1, _, q0 = _chao_stats(y2, t2, experts)
        tt = t2.astype(float)[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            step = np.where(q0[:, None] > 0, q1[:, None] / (tt * q0[:, None] + q1[:, None]), 0.0)
            gain = q0[:, None] * -np.expm1((b[None, :] - tt) * np.log1p(-step))
        ext = s_obs[:, None] + np.where(q0[:, None] > 0, gain, 0.0)
        out[extrap] = ext[extrap]
    return out.reshape(lead + (b.size,)), extrap.reshape(lead + (b.size,))


def _bootstrap_assemblage(y: np.ndarray, t: np.ndarray, experts: int):
    """Detection probabilities of the iNEXT bootstrap assemblage (Chao et al. 2014, App. S2).

    Seen experts: ``π̃_i = (Y_i/T)·(1 − λ̂·(1 − Y_i/T)^T)``; Q̂0 unseen experts share the
    undetected mass ``(U/T)·(1 − Ĉ)`` equally, with ``U = Σ Y`` and Ĉ the sample coverage.
    Returns (layers, E) probabilities.
    """
    layers, e = y.shape
    s_obs, q1, q2, q0 = _chao_stats(y, t, experts)
    tt = t.astype(float)
    u = y.sum(axis=1).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = 1.0 - (q1 / u) * np.where(q1 > 0, (tt - 1.0) * q1 / ((tt - 1.0) * q1 + 2.0 * q2), 0.0)
    cov = np.where(u > 0, np.clip(cov, 0.0, 1.0), 0.0)
    freq = y / tt[:, None]
    decay = np.where(y > 0, (1.0 - freq) ** tt[:, None], 0.0)
    denom = np.sum(freq * decay, axis=1)
    lam = np.where(denom > 0, (1.0 - cov) / np.where(denom > 0, denom, 1.0), 0.0)
    pi = np.clip(freq * (1.0 - lam[:, None] * decay), 0.0, 1.0)
    n_unseen = np.ceil(q0 - 1e-9).astype(int)
    out = np.zeros((layers, e))
    for layer in range(layers):
        seen = np.flatnonzero(y[layer] > 0)
        out[layer, : seen.size] = pi[layer, seen]
        k0 = min(n_unseen[layer], e - seen.size)
        if k0 > 0 and q0[layer] > 0:
            out[layer, seen.size : seen.size + k0] = (u[layer] / tt[layer]) * (1.0 - cov[layer]) / q0[layer]
    return np.clip(out, 0.0, 1.0)


def union_histogram(
    counts: np.ndarray,
    tokens,
    batch,
    *,
    top_k: int | None = None,
    experts: int | None = None,
    bootstrap: int = 200,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
) -> UnionCurve:
    """Expected U(B) per layer from an incidence histogram, with iNEXT bootstrap bands.

    ``counts`` (layers, E) incidence counts over ``tokens`` T routed tokens per layer (scalar
    or (layers,)). Rarefaction for B ≤ T, extrapolation for B > T (see module docstring).
    With ``bootstrap > 0`` the band is ``estimate ± z·sd`` (iNEXT), sd over replicates
    ``Y*_i ~ Binomial(T, π̃_i)`` drawn from the bootstrap assemblage; the band of the mean over
    layers takes the sd of the replicates' layer means.
    """
    y = np.atleast_2d(np.asarray(counts))
    layers, e = y.shape
    experts = e if experts is None else experts
    t = np.broadcast_to(np.asarray(tokens, dtype=np.int64), (layers,)).copy()
    if np.any(t < 1):
        raise ValueError("tokens T must be >= 1 in every layer")
    # without K, complete incidence data: every token counted K experts
    top_k = max(1, int(round(float(y.sum()) / float(t.sum())))) if top_k is None else top_k
    b = as_batch(batch)
    point, extrap = rarefaction(y, t, b, experts)
    method_per_b = tuple("extrapolation" if np.any(extrap[:, j]) else "rarefaction" for j in range(b.size))
    if bootstrap <= 0:
        return _exact_curve(b, point, method_per_b, experts, top_k, level, "no bootstrap: the estimate alone")
    if rng is None:
        raise ValueError("bootstrap bands need an explicit rng")
    probs = _bootstrap_assemblage(y, t, experts)
    boot = bootstrap_replicates(  # (R, layers, nB)
        lambda reps: rarefaction(reps, t[None, :], b, experts)[0],
        bootstrap,
        draw=lambda r: rng.binomial(t[None, :, None], probs[None, :, :], size=(r,) + probs.shape),
        batched=True,
        # replicates drawn a chunk at a time (the same draws: the generator's stream continues),
        # so that a histogram declaring 2^20 experts holds a few chunks, not 200 replicates
        # and rarefaction's temporaries of each (a 40-byte one grew union to 12 GB)
        chunk=max(1, _REPLICATE_CELLS // max(1, probs.size * b.size)),
        draw_in_chunks=True,
    )
    # iNEXT centres the band on the estimate and takes only the spread from the bootstrap:
    # the assemblage's replicates are centred on the (downward-biased) empirical plug-in
    sd, msd = boot.std(axis=0, ddof=1), boot.mean(axis=1).std(axis=0, ddof=1)
    how = f"iNEXT bootstrap, estimate ± z·sd, {bootstrap} replicates"
    return _normal_curve(b, point, sd, msd, level, how, method_per_b, experts, top_k, (0, experts))


def distinct_per_layer(ids: np.ndarray, experts: int) -> np.ndarray:
    """Distinct non-negative ids per layer: ids (n, B, L, K) → counts (n, L); ``-1`` is padding.

    The one counter of a measured union (traces, windows, fits, the seed-003 ladder).
    """
    n, _, layers, _ = ids.shape
    seen = np.zeros((n, layers, experts + 1), dtype=bool)
    safe = ids_or(ids, experts)  # padding goes to a sink column
    rows = np.broadcast_to(np.arange(n)[:, None, None, None], ids.shape)
    lay = np.broadcast_to(np.arange(layers)[None, None, :, None], ids.shape)
    seen[rows, lay, safe] = True
    return seen[:, :, :experts].sum(axis=-1)


def union_from_trace(
    topk: np.ndarray,
    batch,
    *,
    experts: int,
    rng: np.random.Generator,
    draws: int = 4,
    bootstrap: int = 200,
    level: float = 0.95,
    chunk_steps: int = 256,
) -> UnionCurve:
    """Measured U(B) from a trace (steps, streams, layers, K) with ``-1`` padding.

    At each step the live streams are those with a token (ids ≥ 0) in every layer; for each B,
    every step with at
    least B live streams contributes ``draws`` random subsets of B live streams (without
    replacement) and their distinct experts per layer are counted. The point is the mean over
    steps and draws; the band a percentile bootstrap over steps. Batch sizes no step can fill
    get NaN and method ``"none"``. Works on memory-mapped arrays in chunks of steps.
    """
    if topk.ndim != 4:
        raise ValueError("trace must have shape (steps, streams, layers, K)")
    b = as_batch(batch)
    steps, streams, layers, k = topk.shape
    per_step: list[list] = [[] for _ in b]  # per batch size: list of (n_steps_chunk, layers) means
    for start in range(0, steps, chunk_steps):
        block = np.asarray(topk[start : start + chunk_steps])
        # a stream counts at a step only with a token in every layer: captures that dropped a
        # token in one layer would otherwise put fewer than K experts into that layer's union
        live = live_streams(block)  # (s, streams)
        n_live = live.sum(axis=1)
        for j, bj in enumerate(b):
            ok = np.flatnonzero(n_live >= bj)
            if ok.size == 0:
                continue
            keys = rng.random((ok.size, draws, streams))
            keys[~np.broadcast_to(live[ok, None, :], keys.shape)] = np.inf
            chosen = np.argsort(keys, axis=-1)[..., :bj]  # (n, draws, B)
            ids = block[ok[:, None, None], chosen]  # (n, draws, B, layers, K)
            u = distinct_per_layer(ids.reshape((-1,) + ids.shape[2:]), experts)
            per_step[j].append(u.reshape(ok.size, draws, layers).mean(axis=1))
    point = np.full((layers, b.size), np.nan)
    low, high = point.copy(), point.copy()
    mlow, mhigh = np.full(b.size, np.nan), np.full(b.size, np.nan)
    methods = tuple("trace" if parts else "none" for parts in per_step)
    for j, parts in enumerate(per_step):
        if not parts:
            continue
        u = np.concatenate(parts)  # (n_steps_used, layers)
        point[:, j] = u.mean(axis=0)
        if bootstrap > 0 and u.shape[0] > 1:
            # a few replicates at a time: u[rows] whole is R × steps × layers floats (1 GB at
            # 10^8 requests); each replicate's mean is the same either way. boot: (R, layers)
            boot = bootstrap_replicates(partial(_mean_of_rows, u), bootstrap, n=u.shape[0], rng=rng, chunk=16)
            low[:, j], high[:, j] = percentile_interval(boot, level)
            mlow[j], mhigh[j] = percentile_interval(boot.mean(axis=1), level)

        else:
            low[:, j] = high[:, j] = point[:, j]
            mlow[j] = mhigh[j] = point[:, j].mean()
    how = (
        f"percentile bootstrap over steps, {bootstrap} replicates (a batch size one step fills: its mean alone)"
        if bootstrap > 0
        else "no bootstrap: the measured mean alone"
    )
    return _curve(b, point, Interval(low, high, level, how), Interval(mlow, mhigh, level, how), methods, experts, k)


def _mean_of_rows(u: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The mean of ``u``'s rows ``rows`` (r, n) for each of the r index rows: (r, ...)."""
    return u[rows].mean(axis=1)


@dataclass(frozen=True)
class TraceAgainstPlugin:
    """A trace's measured U(B) beside the independent plug-in with its own frequencies.

    ``b_top`` is the largest B some step fills; ``union_measured`` / ``union_plugin`` the mean
    over layers there, ``ratio_per_layer`` measured / plug-in per layer at ``b_top``.
    """

    batch: np.ndarray
    measured: UnionCurve
    plugin: UnionCurve
    b_top: int
    union_measured: float
    union_plugin: float
    ratio_per_layer: np.ndarray


def trace_against_plugin(
    topk: np.ndarray, *, experts: int, top_k: int, rng: np.random.Generator, bootstrap: int = 200, points: int = 12
) -> TraceAgainstPlugin:
    """Measured U(B) (:func:`union_from_trace`) at ``points`` log-spaced B up to the trace's
    streams, against ``Σ_i [1 − (1 − π̂_i)^B]`` with π̂ the trace's own inclusion frequencies per
    layer (:func:`union_plugin`). Measured below the plug-in: the streams of a step share experts
    more than independent routing would (the cross-agent correlation)."""
    if topk.ndim != 4:
        raise ValueError("trace must have shape (steps, streams, layers, K)")
    b_max = int(topk.shape[1])
    batch = np.unique(np.r_[np.round(np.logspace(0, np.log10(b_max), points)), [b_max]].astype(int))
    measured = union_from_trace(topk, batch, experts=experts, rng=rng, bootstrap=bootstrap)
    filled = np.flatnonzero(~np.isnan(measured.mean))
    if filled.size == 0:
        raise ValueError("no step of the trace has a live stream: nothing to measure")
    counts, tokens = trace_counts(topk, experts)
    plugin = union_plugin(counts / np.maximum(tokens, 1)[:, None], batch, top_k)
    j = int(filled[-1])
    ratio = measured.union_per_layer[:, j] / plugin.union_per_layer[:, j]
    return TraceAgainstPlugin(
        batch=batch,
        measured=measured,
        plugin=plugin,
        b_top=int(batch[j]),
        union_measured=float(measured.mean[j]),
        union_plugin=float(plugin.mean[j]),
        ratio_per_layer=ratio,
    )


def union_correlated(
    popularity: np.ndarray,
    top_k: int,
    batch,
    *,
    c: float,
    rng: np.random.Generator,
    draws: int = 32,
    level: float = 0.95,
) -> UnionCurve:
    """U(B) when the B tokens of a step share a context ``q ~ Dirichlet(c·w)``.

    ``E_q[ Σ_i (1 − (1 − π_i(q))^B) ]`` with π(q) the Plackett–Luce inclusion of q: the model
    of :func:`moeroof.models.routing.sample_trace` with ``scope="step"``, in expectation, so it
    extrapolates a trace's measured union (and its fitted c) to batches larger than the
    trace's streams. ``c = inf`` is the independent plug-in. Monte Carlo over ``draws``
    contexts per layer; the band is the Monte Carlo standard error (normal, ``level``).
    """
    w = np.atleast_2d(np.asarray(popularity, dtype=float))
    b = as_batch(batch)
    if not c > 0:
        raise ValueError(f"heterogeneity c must be > 0 (inf for none), got {c!r}")
    if np.isinf(c):
        return union_plugin(inclusion_probabilities(w, top_k), b, top_k)
    if draws < 2:
        raise ValueError("draws must be >= 2 for a Monte Carlo band")
    w = w / w.sum(axis=1, keepdims=True)
    conc = np.maximum(c * w, 1e-300)
    logq = log_dirichlet(np.broadcast_to(conc, (draws,) + w.shape), rng)
    logq = np.where(w > 0, logq, -np.inf)
    pi = inclusion_probabilities(softmax(logq), top_k)  # (draws, layers, E)
    u = pi.shape[-1] - power_sums(1.0 - pi, b)  # (draws, layers, nB)
    se = u.std(axis=0, ddof=1) / np.sqrt(draws)
    mse = u.mean(axis=1).std(axis=0, ddof=1) / np.sqrt(draws)
    how = f"Monte Carlo standard error (normal), {draws} draws"
    return _normal_curve(b, u.mean(axis=0), se, mse, level, how, "correlated-model", w.shape[1], top_k)
