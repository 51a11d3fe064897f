"""Routing models: which experts the tokens of B agents select (docs/models.md, routing).

Per MoE layer there are E routed experts and each token selects K distinct ones. A layer's
*popularity* ``w`` (non-negative, Σ w = 1) drives a Plackett–Luce draw of K experts without
replacement, sampled with the Gumbel-top-K trick: add i.i.d. Gumbel noise to ``log w`` and keep
the K largest (Kool, van Hoof & Welling 2019, "Stochastic beams and where to find them"). The
*inclusion probability* ``π_i = P(i ∈ top-K)`` is what the union and the cache see; Σ π = K.

Popularity models:

- :class:`Uniform` — ``w_i = 1/E``; then ``π_i = K/E`` exactly.
- :class:`Zipf` — ``w ∝ rank^-s`` with an independent random permutation of the ranks per layer.
- :class:`Dirichlet` — ``w ~ Dirichlet(α·1)`` per layer (small α: strong skew).

Two correlation knobs that real fleets have:

- heterogeneity ``c``: the streams of one task group share a popularity ``q ~ Dirichlet(c·w)``
  drawn once per group and layer, so agents on the same task overlap more than independent
  agents would. ``c = inf`` means no heterogeneity (``q = w``). When every stream is its own
  group the expected one-step union of B streams equals the independent plug-in (the streams
  are still independent); the knob lowers the cross-agent union only when streams share a group.
- stickiness ``ρ``: each of a stream's K experts at step t is kept from its step t−1 selection
  with probability ρ, independently; the remaining slots are refilled by Plackett–Luce over the
  experts not kept. ``ρ`` drives cache hits and the union over time, not the one-step union.

Both may be given per layer (a stickiness profile over depth); ``c`` with ``groups = streams``
and ``scope="trace"`` is a per-stream hot set, ``c_step`` adds a context that the streams of a
step share on top of it (a lasting per-stream bias and a cross-agent correlation in one trace),
and ``prompt_tokens`` prepends a cold-started prompt (:func:`sample_trace`).

Every random draw takes an explicit :class:`numpy.random.Generator`. :func:`sample_trace`
draws its popularities by inversion (:func:`log_gamma_from_uniforms`) from child streams that
leave the generator's own stream alone: at one seed a trace moves smoothly with ``c`` and
``c_step`` (common random numbers for fits over them); :func:`log_dirichlet` (numpy's
rejection sampler) serves the other callers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np

from moeroof.core.errors import ParameterError
from moeroof.core.limits import check_allocation
from moeroof.core.masks import live_tokens

__all__ = [
    "weights_from_inclusion",
    "Uniform",
    "Zipf",
    "Dirichlet",
    "PopularityModel",
    "zipf_weights",
    "zipf_log_weights",
    "inclusion_probabilities",
    "sample_topk",
    "sample_trace",
    "gumbel_uniforms",
    "histogram_from_trace",
    "inclusion_from_counts",
    "unseen_mass_note",
    "sample_histogram",
    "log_dirichlet",
    "log_gamma_from_uniforms",
    "part_concentrations",
    "softmax",
    "pair_overlap",
    "consecutive_overlap",
]


def _check_experts_top_k(experts: int, top_k: int) -> None:
    if int(experts) != experts or experts < 1:
        raise ValueError(f"experts must be a positive integer, got {experts!r}")
    if int(top_k) != top_k or not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be an integer in [1, experts={experts}], got {top_k!r}")


class PopularityModel(Protocol):
    # read-only: the models are frozen dataclasses
    @property
    def experts(self) -> int: ...

    @property
    def top_k(self) -> int: ...

    def popularity(self, layers: int, rng: np.random.Generator | None = None) -> np.ndarray: ...


@dataclass(frozen=True)
class Uniform:
    """Every expert equally popular: ``w_i = 1/E``, ``π_i = K/E``."""

    experts: int
    top_k: int

    def __post_init__(self) -> None:
        _check_experts_top_k(self.experts, self.top_k)

    def popularity(self, layers: int = 1, rng: np.random.Generator | None = None) -> np.ndarray:
        return np.full((layers, self.experts), 1.0 / self.experts)


def zipf_log_weights(experts: int, s: float) -> np.ndarray:
    """log of the Zipf popularity in rank order, ``log w_r = −s·log r − log Σ_j j^-s``, computed
    in log space: finite for every finite s (``r^-s`` underflows to 0 from s ≈ 700/log r)."""
    log_r = np.log(np.arange(1, experts + 1, dtype=float))
    a = -float(s) * log_r
    return a - np.logaddexp.reduce(a)


def zipf_weights(experts: int, s: float) -> np.ndarray:
    """Zipf popularity in rank order: ``w_r = r^-s / Σ_j j^-s`` for ranks r = 1…E.

    Computed in log space (:func:`zipf_log_weights`); at a large s the tail underflows to 0, so
    pass the log weights to :func:`inclusion_probabilities` (``log=True``) there.
    """
    return np.exp(zipf_log_weights(experts, s))


@dataclass(frozen=True)
class Zipf:
    """Popularity ∝ rank^-s; each layer gets an independent random permutation of the ranks.

    With ``rng=None`` the ranks are not permuted (expert 0 is the hottest in every layer).
    """

    experts: int
    top_k: int
    s: float

    def __post_init__(self) -> None:
        _check_experts_top_k(self.experts, self.top_k)
        if not np.isfinite(self.s) or self.s < 0:
            raise ValueError(f"Zipf exponent s must be finite and >= 0, got {self.s!r}")

    def popularity(self, layers: int = 1, rng: np.random.Generator | None = None) -> np.ndarray:
        return np.exp(self.log_popularity(layers, rng))

    def log_popularity(self, layers: int = 1, rng: np.random.Generator | None = None) -> np.ndarray:
        """log of :meth:`popularity` (the same permutations from the same ``rng``), finite at
        every s where the weights themselves underflow."""
        a = zipf_log_weights(self.experts, self.s)
        if rng is None:
            return np.tile(a, (layers, 1))
        return np.stack([a[rng.permutation(self.experts)] for _ in range(layers)])


@dataclass(frozen=True)
class Dirichlet:
    """Popularity ``w ~ Dirichlet(α·1_E)`` drawn independently per layer.

    Mean share 1/E; the coefficient of variation of the shares is ``sqrt((E−1)/(Eα+1))``.
    """

    experts: int
    top_k: int
    alpha: float

    def __post_init__(self) -> None:
        _check_experts_top_k(self.experts, self.top_k)
        if not np.isfinite(self.alpha) or self.alpha <= 0:
            raise ValueError(f"Dirichlet alpha must be finite and > 0, got {self.alpha!r}")

    def popularity(self, layers: int = 1, rng: np.random.Generator | None = None) -> np.ndarray:
        if rng is None:
            raise ValueError("Dirichlet popularity is random: pass a numpy Generator as rng")
        logw = log_dirichlet(np.full((layers, self.experts), float(self.alpha)), rng)
        return softmax(logw)


def softmax(logw: np.ndarray) -> np.ndarray:
    """Normalized weights ``exp(logw)`` along the last axis, shifted by the row max first."""
    z = logw - logw.max(axis=-1, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=-1, keepdims=True)


def log_dirichlet(concentration: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """log of a Dirichlet draw along the last axis, stable for tiny concentrations.

    Uses ``Gamma(a) =d Gamma(a+1) · U^(1/a)`` so that ``log X`` never underflows to −inf
    (numpy's gamma returns exact zeros for shapes far below 1).
    """
    a = np.asarray(concentration, dtype=float)
    log_g = np.log(rng.standard_gamma(a + 1.0)) + np.log(rng.random(a.shape)) / a
    return log_g - np.logaddexp.reduce(log_g, axis=-1, keepdims=True)


#: smallest uniform fed to the inversion (``rng.random`` can return an exact 0)
_U_FLOOR = 2.0**-60
#: floor of a Gamma shape: ``log(u)/a`` stays finite (|log u| <= 42, so >= -4.2e301)
_SHAPE_FLOOR = 1e-300


def log_gamma_from_uniforms(shape: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``log G``, ``G ~ Gamma(shape, 1)``, by inversion from two uniforms per element.

    ``u`` has shape ``(2, *shape.shape)``; ``log G = log P⁻¹(a + 1, u₀) + log(u₁) / a`` with
    ``P⁻¹`` the inverse regularised lower incomplete gamma
    (:func:`scipy.special.gammaincinv`) and ``Gamma(a) =d Gamma(a+1)·U^(1/a)`` (as
    :func:`log_dirichlet`, without its rejection sampler). A fixed number of uniforms per
    element, and ``log G`` is continuous and non-decreasing in ``a`` and in each uniform, so a
    draw at ``a`` and at ``a(1 + ε)`` from the same uniforms differ by O(ε): common random
    numbers across a concentration. Shapes are floored at 1e-300 (``log G`` stays finite,
    about ``-1e300·|log u₁|``); large shapes are fine (``P⁻¹`` is accurate past 1e12).
    """
    from scipy.special import gammaincinv  # scipy loads only for the Dirichlet draw

    a = np.maximum(np.asarray(shape, dtype=float), _SHAPE_FLOOR)
    u = np.maximum(np.asarray(u, dtype=float), _U_FLOOR)
    if u.shape != (2,) + a.shape:
        raise ValueError(f"u must have shape {(2,) + a.shape}, got {u.shape}")
    g1 = np.maximum(gammaincinv(a + 1.0, u[0]), 1e-300)
    return np.log(g1) + np.log(u[1]) / a


def _state_words(state) -> list[int]:
    """A bit generator's state (nested dict of ints, arrays, strings) as non-negative ints."""
    if isinstance(state, dict):
        return [w for key in sorted(state) for w in (*_state_words(key), *_state_words(state[key]))]
    if isinstance(state, str):
        return [int.from_bytes(state.encode(), "little")]
    if isinstance(state, np.ndarray):
        return [w for x in state.ravel().tolist() for w in _state_words(x)]
    if isinstance(state, float):
        return [int.from_bytes(np.float64(state).tobytes(), "little")]
    value = int(state)
    return [2 * value if value >= 0 else -2 * value - 1]


#: spawn keys of the child streams of :func:`sample_trace`
_GROUP_STREAM, _STEP_STREAM, _KEEP_STREAM = 1, 2, 3
#: doubles of uniforms :func:`sample_trace` draws at a time (1 MiB; a step at least)
_BLOCK_DOUBLES = 1 << 17


def _child_generator(rng: np.random.Generator, key: int) -> np.random.Generator:
    """A generator seeded by ``rng``'s current state and ``key``, drawing nothing from ``rng``:
    the same state gives the same child, and ``rng``'s own stream does not move."""
    seq = np.random.SeedSequence(_state_words(rng.bit_generator.state), spawn_key=(key,))
    return np.random.Generator(np.random.PCG64(seq))


def _normalize(popularity: np.ndarray) -> np.ndarray:
    w = np.asarray(popularity, dtype=float)
    if w.ndim < 1 or w.shape[-1] < 1:
        raise ValueError("popularity must have an expert axis")
    if np.any(~np.isfinite(w)) or np.any(w < 0):
        raise ValueError("popularity must be finite and non-negative")
    total = w.sum(axis=-1, keepdims=True)
    if np.any(total <= 0):
        raise ValueError("popularity must have a positive sum in every layer")
    return w / total


def inclusion_probabilities(popularity: np.ndarray, top_k: int, *, log: bool = False) -> np.ndarray:
    """Inclusion probabilities ``π_i = P(i ∈ top-K)`` of a Plackett–Luce draw without replacement.

    Exact for uniform rows (``K/E``). Otherwise from the exponential-clock representation of
    Plackett–Luce: give expert j an arrival time ``X_j ~ Exp(w_j)``; the top-K are the first K
    arrivals, so

        π_i = ∫_0^∞ w_i e^{−w_i t} · P(N_{−i}(t) < K) dt,

    where ``N_{−i}(t)`` counts the other experts arrived by t, a Poisson-binomial with
    ``p_j = 1 − e^{−w_j t}``. Its first K probabilities come from prefix/suffix dynamic
    programmes (no division, so no cancellation) and the integral from composite Gauss–Legendre
    in log t, ``max(10, 3·sqrt(K))`` nodes per unit of log t (the
    step of P(N < K) sharpens like 1/sqrt(K)) between ``1e-10/w_max`` and
    ``80/w_(K+1)`` (below: closed form; above: nothing left). Σ π = K to about 1e-9 even when the
    weights span hundreds of orders of magnitude. ``popularity`` has shape (..., E).

    ``log=True``: ``popularity`` holds log weights (``-inf`` = weight 0), for weights too skewed
    to hold as floats (Zipf at s ≳ 300: :func:`zipf_log_weights`). A row whose (K+1)-th weight
    is below 1e-250 of its largest is split into tiers at gaps where everything ranked below an
    expert weighs less than 1e-16 of it: such an expert is drawn before any of those below with
    probability ``1 − O(E·1e-16)``, so a tier that fits in the K slots left is included with
    probability 1, the tier that straddles them gets the remaining slots by the integral above
    (Plackett–Luce restricted to it), and the tiers after it 0. As s → ∞ a Zipf row's top K
    ranks are then included with probability 1 (every token picks them). Experts of weight
    exactly 0 come after every positive one (chosen uniformly among themselves when fewer than
    K weights are positive), so Σ π = K in every row.
    """
    if log:
        a = np.asarray(popularity, dtype=float)
        if a.ndim < 1 or a.shape[-1] < 1:
            raise ValueError("popularity must have an expert axis")
        if np.any(np.isnan(a)) or np.any(a == np.inf):
            raise ValueError("log popularity must be finite or -inf")
        top = a.max(axis=-1, keepdims=True)
        if np.any(top == -np.inf):
            raise ValueError("popularity must have a positive sum in every layer")
        a = a - top
        w = _normalize(np.exp(a))
    else:
        w = _normalize(popularity)
        with np.errstate(divide="ignore"):
            a = np.log(w)
    e = w.shape[-1]
    _check_experts_top_k(e, top_k)
    if top_k == e:
        return np.ones_like(w)
    w2, a2 = w.reshape(-1, e), a.reshape(-1, e)
    out = np.empty_like(w2)
    uniform_rows = np.all(np.isclose(w2, 1.0 / e, rtol=1e-12, atol=0), axis=1)
    out[uniform_rows] = top_k / e
    rows = np.flatnonzero(~uniform_rows)
    nodes_per_efold = max(10, int(np.ceil(3.0 * np.sqrt(top_k))))
    wsorted = -np.sort(-w2[rows], axis=1)
    # the (K+1)-th weight against the largest: below the floor the integral's range is lost
    if top_k == 1:
        out[rows] = w2[rows]
        return out.reshape(w.shape)
    steep = wsorted[:, top_k] < _REGULAR_FLOOR * wsorted[:, 0]
    for r in rows[steep]:
        out[r] = _inclusion_tiered(a2[r], top_k, nodes_per_efold)
    rows = rows[~steep]
    if rows.size:
        out[rows] = _inclusion_regular(w2[rows], top_k, nodes_per_efold)
    return out.reshape(w.shape)


#: a row whose (K+1)-th weight is below this share of its largest goes to the tiers
_REGULAR_FLOOR = 1e-250
#: a tier ends at an expert whose lower-ranked experts together weigh less than this share of it
_TIER_GAP = 1e-16


def _inclusion_regular(w2: np.ndarray, top_k: int, nodes_per_efold: int) -> np.ndarray:
    """The exponential-clock integral for rows (m, E) of normalized weights."""
    e = w2.shape[1]
    out = np.empty_like(w2)
    wsorted = -np.sort(-w2, axis=1)
    lo_all = np.log(1e-10 / wsorted[:, 0])
    # the (K+1)-th largest weight sets when K others have surely arrived
    hi_all = np.log(80.0 / np.maximum(wsorted[:, top_k], 1e-300))
    x_gl, wt_gl = np.polynomial.legendre.leggauss(nodes_per_efold)
    # rows with similar log-t ranges share a chunk, so panel counts stay tight
    rows = np.argsort(hi_all - lo_all)
    start = 0
    while start < rows.size:
        panels = int(np.ceil(hi_all[rows[start]] - lo_all[rows[start]]))
        chunk = max(1, int(4_000_000 // (e * panels * nodes_per_efold * top_k)))
        idx = rows[start : start + chunk]
        panels = int(np.ceil(np.max(hi_all[idx] - lo_all[idx])))
        out[idx] = _inclusion_rows(w2[idx], top_k, lo_all[idx], hi_all[idx], panels, x_gl, wt_gl)
        start += chunk
    return out


def _inclusion_tiered(a: np.ndarray, k: int, nodes_per_efold: int) -> np.ndarray:
    """One row of log weights ``a`` (E,) split into tiers (see :func:`inclusion_probabilities`)."""
    e = a.size
    out = np.zeros(e)
    finite = np.isfinite(a)
    n = int(finite.sum())
    if n <= k:
        out[finite] = 1.0
        if n < k:
            out[~finite] = (k - n) / (e - n)
        return out
    idx = np.flatnonzero(finite)
    order = idx[np.argsort(-a[idx], kind="stable")]
    s = a[order]
    # below[i] = log Σ_{j>i} exp(s_j): the weight ranked below expert i
    below = np.full(n, -np.inf)
    below[:-1] = np.logaddexp.accumulate(s[::-1])[::-1][1:]
    cut = below - s < np.log(_TIER_GAP)
    start, left = 0, k
    while left > 0:
        end = start + int(np.argmax(cut[start:]))  # cut[n - 1] is True: always found
        size = end - start + 1
        members = order[start : end + 1]
        if size <= left:
            out[members] = 1.0
            left -= size
            start = end + 1
            continue
        block = np.exp(s[start : end + 1] - s[start])[None, :]
        if left == 1:
            pi = block[0] / block.sum()
        else:
            pi = _inclusion_regular(block / block.sum(), left, nodes_per_efold)[0]
            # within a tier the weights span at most ~(1e-16/E)^(K+1), so the integral's range
            # holds; what the 1e-300 floor could lose in a pathological tier is put back in scale
            pi = pi * (left / pi.sum())
        out[members] = np.clip(pi, 0.0, 1.0)
        break
    return out


def _inclusion_rows(w, k, lo, hi, panels, x_gl, wt_gl) -> np.ndarray:
    m, e = w.shape
    width = (hi - lo) / panels  # (m,)
    centres = lo[:, None] + width[:, None] * (np.arange(panels)[None, :] + 0.5)  # (m, P)
    log_t = (centres[:, :, None] + 0.5 * width[:, None, None] * x_gl[None, None, :]).reshape(m, -1)
    t = np.exp(log_t)  # (m, n)
    quad_w = np.tile(0.5 * width[:, None] * wt_gl[None, :], (1, panels)) * t  # dt = t dx
    p = -np.expm1(-w[:, :, None] * t[:, None, :])  # (m, e, n): P(expert j arrived by t)
    if k <= _KERNEL_MAX_K:
        from moeroof.kernels import routing as routing_kernels  # the C library loads only when a kernel runs

        # the programmes below, compiled: the same operations in the same order, bit for bit
        below_k = routing_kernels.inclusion_below_k(p, k)
    else:
        below_k = _below_k_numpy(p, k)
    integrand = w[:, :, None] * np.exp(-w[:, :, None] * t[:, None, :]) * below_k
    # below t_min nothing else has arrived: that piece is 1 − e^{−w_i t_min}
    head = -np.expm1(-w * np.exp(lo)[:, None])
    return np.clip(head + np.einsum("men,mn->me", integrand, quad_w), 0.0, 1.0)


#: the largest K :func:`moeroof.kernels.routing.inclusion_below_k` takes (numpy sums K
#: products pairwise, in one block up to 128 terms; the kernel copies that block)
_KERNEL_MAX_K = 128


def _below_k_numpy(p: np.ndarray, k: int) -> np.ndarray:
    """``P(N_{-j}(t) < K)`` (m, e, n) from ``p`` (m, e, n) by the prefix/suffix programmes in
    numpy (what the kernel computes; kept for K above 128)."""
    m, e, n = p.shape
    # prefix[j] = distribution of arrivals among experts < j, counts 0..k-1
    prefix = np.zeros((e + 1, m, n, k))
    prefix[0, :, :, 0] = 1.0
    for j in range(e):
        pj = p[:, j, :, None]
        cur = prefix[j]
        nxt = cur * (1.0 - pj)
        nxt[:, :, 1:] += cur[:, :, :-1] * pj
        prefix[j + 1] = nxt
    suffix = np.zeros((m, n, k))
    suffix[:, :, 0] = 1.0
    below_k = np.empty((m, e, n))
    for j in range(e - 1, -1, -1):
        # P(N_{-j} < K) = Σ_{a+b<K} prefix_j[a] · suffix_{j+1}[b]
        cum_suffix = np.cumsum(suffix, axis=-1)
        below_k[:, j, :] = np.sum(prefix[j] * cum_suffix[:, :, ::-1], axis=-1)
        pj = p[:, j, :, None]
        nxt = suffix * (1.0 - pj)
        nxt[:, :, 1:] += suffix[:, :, :-1] * pj
        suffix = nxt
    return below_k


def sample_topk(
    popularity: np.ndarray, top_k: int, size: int | tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """Draw K distinct experts per token by Gumbel-top-K on ``log w`` (Plackett–Luce).

    ``popularity`` has shape (layers, E); returns int32 ids of shape (*size, layers, K), the K
    picks of each token in descending order of their perturbed score (first = top-1).
    """
    w = _normalize(np.atleast_2d(popularity))
    _check_experts_top_k(w.shape[-1], top_k)
    shape = cast(tuple[int, ...], (size,) if np.isscalar(size) else tuple(cast(tuple[int, ...], size)))
    # Experts of zero weight would score −inf and tie, and numpy's partition and sort order ties by
    # the CPU's SIMD path: they get distinct finite log weights below every positive weight's score,
    # lower ids higher, so where fewer than K weights are positive the picks are the same on every
    # machine (the Gumbel scores of positive weights never tie; a Gumbel draw, O(10), cannot
    # reorder values 1e294 apart).
    e = w.shape[-1]
    with np.errstate(divide="ignore"):
        logw = np.where(w > 0, np.log(w), -_TIE_FLOOR * (1.0 + 1e-6 * np.arange(e)))
    scores = logw + rng.gumbel(size=shape + w.shape)
    part = np.argpartition(-scores, top_k - 1, axis=-1)[..., :top_k]
    order = np.argsort(-np.take_along_axis(scores, part, axis=-1), axis=-1)
    return np.take_along_axis(part, order, axis=-1).astype(np.int32)


#: below any Gumbel score of a positive weight (log w ≥ −745 for doubles): zero weights' scores,
#: by id
_TIE_FLOOR = 1e300


def _per_layer(value, layers: int, name: str) -> np.ndarray:
    """A scalar or a per-layer array of shape (layers,) as a float array (layers,)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return np.full(layers, float(arr))
    if arr.shape != (layers,):
        raise ParameterError(
            name, f"expected a scalar or one value per layer, shape ({layers},), got shape {arr.shape}"
        )
    return arr


def part_concentrations(c: np.ndarray, c_step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the concentrations ``(a_group, a_step)`` of :func:`sample_trace`'s lasting
    and step parts: ``1/A = 1/c + 1/c_step``, ``a_group = A²/c = c·(c_step/(c + c_step))²``,
    ``a_step = A²/c_step``, so ``a_group + a_step = A``; ``c = inf`` → ``(0, c_step)``,
    ``c_step = inf`` → ``(c, 0)`` exactly, both inf → ``(0, 0)`` (route by w)."""
    fin_c, fin_s = np.isfinite(c), np.isfinite(c_step)
    cc = np.where(fin_c, c, 1.0)
    ss = np.where(fin_s, c_step, 1.0)
    both = fin_c & fin_s
    a_group = np.where(both, cc / (1.0 + cc / ss) ** 2, np.where(fin_c, cc, 0.0))
    a_step = np.where(both, ss / (1.0 + ss / cc) ** 2, np.where(fin_s, ss, 0.0))
    return a_group, a_step


def sample_trace(
    model: PopularityModel,
    steps: int,
    streams: int,
    layers: int,
    rng: np.random.Generator,
    *,
    c: float | np.ndarray = np.inf,
    c_step: float | np.ndarray = np.inf,
    rho: float | np.ndarray = 0.0,
    groups: int = 1,
    scope: str = "trace",
    popularity: np.ndarray | None = None,
    prompt_tokens: int = 0,
) -> np.ndarray:
    """Sample a routing trace of shape (prompt_tokens + steps, streams, layers, K), int32 ids.

    ``popularity`` (layers, E) overrides the model's draw (for a fitted or measured layer).
    ``c`` is the heterogeneity concentration: stream s belongs to task group
    ``s * groups // streams`` and each group routes by ``q ~ Dirichlet(c·w)`` (per layer, drawn
    once with ``scope="trace"``: a task's lasting bias; with ``scope="step"`` it is redrawn at
    every step: the streams of a step share a context, so they overlap more with each other
    than with the trace's own marginal histogram — the cross-agent correlation that a trace's
    measured union shows against its independent plug-in). ``rho`` is the stickiness: each
    expert of the previous step is kept with probability ρ and the rest of the K slots are
    refilled by Plackett–Luce among the others.

    Per-layer knobs: ``rho`` and ``c`` are each a scalar or an array of shape (layers,) — a
    stickiness profile over depth (real models keep few experts in the first layer and many
    deeper: Qwen3-30B-A3B shares 7.9 % of its 8 experts between consecutive tokens in layer 0
    and 59.7 % in layer 7) and a heterogeneity per layer (``inf`` entries: that layer routes
    by ``w``). Layer l keeps each previous expert with probability ``rho[l]``; its consecutive
    overlap is ``ρK`` plus what the refilled ``(1 − ρ)K`` slots hit by chance among the
    ``(1 − ρ)K`` previous experts not kept, about ``(1 − ρ)²·C₀ / (1 − ρ·C₀/K)`` where ``C₀``
    is the chance overlap at ρ = 0 (exact for uniform popularity).

    Per-stream hot set (stream-level heterogeneity): ``groups=streams, scope="trace"`` gives
    every stream its own lasting popularity ``q_s ~ Dirichlet(c·w)`` around the layer
    popularity ``w`` (mean ``w``; smaller c, hotter and more private hot sets). One step of B
    such streams touches as many experts as B independent tokens at the marginal inclusion
    ``E[π(q_s)]`` (the plug-in), but a stream's tokens over time concentrate on its own hot set,
    so a single stream's cache hits more, and the experts a batch touches over a window of
    steps stay below the plug-in of as many independent tokens.

    Step context on top of lasting hot sets (``c_step``, shared by the streams of one step) and
    the common random numbers that keep a trace smooth in ``c`` and ``c_step``: see
    :class:`StepWeights`, which draws them.

    Prompt cold start: ``prompt_tokens = P`` makes every stream route P prompt tokens first
    (one per step, nothing carried into the first; stickiness along the prompt as along the
    decode) and the returned trace begins with those P steps: rows ``[:P]`` are the prompt,
    rows ``[P:]`` the ``steps`` decode steps, so a cache simulation sees the cold start (or
    skips it with ``warmup_steps=P``). Its draw is the draw of ``P + steps`` steps without a
    prompt. Knobs left at their defaults (scalar ρ, scalar c, P = 0) draw no random numbers
    of their own: earlier calls give the same trace, byte for byte.
    """
    rho_l, c_l = _checked_knobs(steps, streams, layers, prompt_tokens, rho, c, groups)
    w, logw = _layer_popularity(model, layers, rng, popularity)
    if scope not in ("trace", "step"):
        raise ParameterError("scope", f"scope must be 'trace' or 'step', got {scope!r}")
    cs_l = _per_layer(c_step, layers, "c_step")
    if not np.all(cs_l > 0):
        raise ParameterError("c_step", f"step-context concentration must be > 0 (inf for none), got {c_step!r}")
    if logw is None:
        with np.errstate(divide="ignore"):
            logw = np.log(w)
    weights = StepWeights(w, logw, c_l, cs_l, groups, streams, rng)
    return _draw_steps(weights, rng, int(prompt_tokens) + steps, streams, layers, model.top_k, rho_l, scope)


def _checked_knobs(steps, streams, layers, prompt_tokens, rho, c, groups) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sample_trace`'s sizes and knobs checked: (ρ per layer, c per layer)."""
    if steps < 1 or streams < 1 or layers < 1:
        raise ValueError("steps, streams and layers must be >= 1")
    if int(prompt_tokens) != prompt_tokens or prompt_tokens < 0:
        raise ParameterError("prompt_tokens", f"must be an integer >= 0, got {prompt_tokens!r}")
    rho_l = _per_layer(rho, layers, "rho")
    if not np.all((rho_l >= 0.0) & (rho_l <= 1.0)):
        raise ParameterError("rho", f"stickiness must be in [0, 1], got {rho!r}")
    c_l = _per_layer(c, layers, "c")
    if not np.all(c_l > 0):
        raise ParameterError("c", f"heterogeneity c must be > 0 (inf for none), got {c!r}")
    if not 1 <= groups <= streams:
        raise ParameterError("groups", f"groups must be in [1, streams={streams}], got {groups!r}")
    return rho_l, c_l


def _layer_popularity(model, layers: int, rng, popularity) -> tuple[np.ndarray, np.ndarray | None]:
    """The layers' popularity w (layers, E): given, or the model's draw from ``rng``; and its
    logs where the model gives them (a Zipf at a large s: the weights underflow, their logs,
    what the Gumbel top-K sees, do not), else None."""
    logw = None
    if popularity is not None:
        w = _normalize(popularity)
    elif hasattr(model, "log_popularity"):
        logw = model.log_popularity(layers, rng)
        w = np.exp(logw)
    else:
        w = model.popularity(layers, rng)
    if w.shape != (layers, model.experts):
        raise ValueError(f"popularity must have shape {(layers, model.experts)}, got {w.shape}")
    return w, logw


class StepWeights:
    """The log popularity of every (stream, layer, expert) at a step of :func:`sample_trace`:
    the layer's ``logw``, or the log of its groups' lasting parts G plus the step's shared
    context H.

    Step context on top of lasting hot sets: ``c_step`` (scalar or per layer; ``inf``, the
    default, is none) adds a context that the streams of one step share, redrawn every step,
    while each group keeps its own part. Per layer, with independent Gamma vectors

        G_g,i ~ Gamma(a_g·w_i)   (group g's part: drawn once, or every step with scope="step")
        H_t,i ~ Gamma(a_t·w_i)   (step t's context: shared by every stream of step t)
        q_s,t = (G_g + H_t) / Σ_i (G_g,i + H_t,i),     g = s * groups // streams,
        1/A = 1/c + 1/c_step,   a_g = A²/c = c·(c_step/(c + c_step))²,   a_t = A²/c_step,

    so ``a_g + a_t = A`` and, by gamma additivity, every stream and step routes marginally by
    ``q_s,t ~ Dirichlet(A·w)``: ``E[q_s,t] = w`` exactly, ``Var q_s,t,i = w_i(1 − w_i)/(A + 1)``.
    Equivalently ``q_s,t = λ·q_g + (1 − λ)·r_t`` with ``q_g ~ Dirichlet(a_g·w)`` (the lasting
    hot set), ``r_t ~ Dirichlet(a_t·w)`` (the step context) and ``λ ~ Beta(a_g, a_t)``
    independent of both; a share ``a_g/A = c_step/(c + c_step)`` of that variance persists in a
    stream over time and ``a_t/A = c/(c + c_step)`` is shared by the streams of a step (which
    then overlap more than the plug-in at the marginal ``E[π(q)]``). Each knob keeps roughly
    its meaning alone: the covariance of a stream with itself at two steps is about
    ``w_i(1 − w_i)/(c + 1)`` and of two streams (other groups) at one step about
    ``w_i(1 − w_i)/(c_step + 1)`` (Monte Carlo: within 20 % for c, c_step >= 10, exact as both
    grow; lower when the other knob is much smaller). The step context is fresh variation in
    every token, so at a fixed c a finite c_step lowers a single stream's cache hit rate, and
    at a fixed c_step a finite c raises the one-step union: fit the two together. ``c_step = inf`` is exactly
    the group part alone (``a_g = c``: the traces are the same, byte for byte); ``c = inf`` with
    finite ``c_step`` is the step context alone, ``Dirichlet(c_step·w)`` shared by all streams
    (what ``c=c_step, groups=1, scope="step"`` draws, from another child stream).

    Common random numbers: the popularity parts are Gamma draws by inversion from two uniforms
    each (:func:`log_gamma_from_uniforms`: continuous and monotone in the shape) taken from
    child streams of ``rng`` that are seeded by its state and draw nothing from it (one for the
    group parts, one for the step contexts), so the Gumbel and stickiness draws are the same at
    every ``c`` and ``c_step``, and at the same seed a small change of ``c`` or ``c_step``
    changes few entries of the trace (a cache hit rate moves smoothly, and as ``c → inf`` the
    trace tends to the ``c = inf`` trace of the same seed).
    """

    def __init__(self, w, logw, c_l, cs_l, groups: int, streams: int, rng) -> None:
        a_group, a_step = part_concentrations(c_l, cs_l)
        self.w, self.logw, self.groups, self.streams = w, logw, groups, streams
        self.has_group, self.has_step = a_group > 0, a_step > 0
        self.neither = ~(self.has_group | self.has_step)
        self.group_of = np.arange(streams) * groups // streams
        self.child_group = _child_generator(rng, _GROUP_STREAM) if np.any(self.has_group) else None
        self.child_step = _child_generator(rng, _STEP_STREAM) if np.any(self.has_step) else None
        # stand-in shapes on layers without the part: drawn (a fixed count of uniforms), then masked
        self.shape_group = np.where(self.has_group, a_group, 1.0)[:, None] * w
        self.shape_step = np.where(self.has_step, a_step, 1.0)[:, None] * w
        self.log_group: np.ndarray | None = None
        self.logw_streams = np.broadcast_to(logw, (streams,) + w.shape)

    def _draw_log_group(self) -> np.ndarray:
        w = self.w
        assert self.child_group is not None  # drawn only where some layer has a group part
        u = self.child_group.random((2, self.groups) + w.shape)
        lg = log_gamma_from_uniforms(np.broadcast_to(self.shape_group, (self.groups,) + w.shape), u)
        return np.where(self.has_group[:, None], lg, -np.inf)

    def draw(self, redraw_group: bool) -> np.ndarray:
        """The log weights of the next step (the group parts redrawn when ``redraw_group``)."""
        w = self.w
        if not (np.any(self.has_group) or np.any(self.has_step)):
            return self.logw_streams  # the same object every step: prepared once
        if self.child_group is not None and (self.log_group is None or redraw_group):
            self.log_group = self._draw_log_group()
        mass = None if self.log_group is None else self.log_group[self.group_of]
        if self.child_step is not None:
            lh = log_gamma_from_uniforms(self.shape_step, self.child_step.random((2,) + w.shape))
            lh = np.where(self.has_step[:, None], lh, -np.inf)
            if mass is None:
                mass = np.broadcast_to(lh, (self.streams,) + w.shape)
            else:  # log(G + H), as np.logaddexp but twice as fast; NaN only where both are -inf
                with np.errstate(invalid="ignore"):
                    mass = np.maximum(mass, lh) + np.log1p(np.exp(-np.abs(mass - lh)))
        # experts with zero popularity stay unreachable; layers with neither part route by w. The
        # log mass is log q up to a constant per row, which the Gumbel top-K does not see.
        assert mass is not None  # some layer has a part (else the early return above)
        return np.where(self.neither[:, None], self.logw, np.where(w > 0, mass, -np.inf))


def _draw_steps(weights: StepWeights, rng, total: int, streams: int, layers: int, k: int, rho_l, scope: str):
    """The trace (total, streams, layers, K) int32 of :func:`sample_trace`.

    Each step draws, from rng, the Gumbel noise of every (stream, layer, expert) as the
    uniforms Generator.gumbel turns into it (gumbel_uniforms: the nonzero doubles of the stream,
    in order) and, with stickiness, from a child stream one uniform per previous pick (kept
    when below ρ of its layer; drawn at every step, the first included, so that the Gumbel
    draws are the same at every ρ). The kernel (routing_kernels.top_k_steps) puts the kept
    experts first in their previous slots' order, then the largest scores in descending
    order, equal scores by expert id: one trace on every machine. The draws are taken a block
    of steps at a time: both are plain sequences, so the block's length changes nothing."""
    from moeroof.kernels import routing as routing_kernels  # the C library loads only when a trace is drawn

    rows, e = streams * layers, weights.w.shape[-1]
    # bounded before the trace and a step's scores are made (the allocation limits); Python ints, no overflow
    check_allocation(total * streams * layers * k, 4, "trace steps × streams × layers × K")
    check_allocation(rows * e, 40, "one step's scores, streams × layers × experts")
    rho_row = np.ascontiguousarray(np.broadcast_to(rho_l, (streams, layers)).reshape(rows))
    sticky = bool(np.any(rho_l > 0))
    child_keep = _child_generator(rng, _KEEP_STREAM) if sticky else None
    out = np.empty((total, streams, layers, k), dtype=np.int32)
    out_rows = out.reshape(total, rows, k)  # a view
    block = max(1, min(total, _BLOCK_DOUBLES // (rows * e)))
    u_buf = np.empty((block, rows, e))
    keep_buf = np.empty((block, rows, k if sticky else 0))
    fixed = not (scope == "step" or weights.child_step is not None)

    def prepare(logq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lq = np.ascontiguousarray(np.broadcast_to(logq, (streams, layers, e)), dtype=float).reshape(rows, e)
        if np.isnan(lq).any():  # numpy's sorts put a NaN score last: as unreachable as -inf
            lq = np.where(np.isnan(lq), -np.inf, lq)
        return (lq, *routing_kernels.log_weight_rows(lq))

    prepared = prepare(weights.draw(True))
    for start in range(0, total, block):
        n = min(block, total - start)
        u = gumbel_uniforms(rng, u_buf[:n].shape, out=u_buf[:n])
        keep_u = keep_buf[:n]
        if child_keep is not None:  # sticky
            child_keep.random(out=keep_u.reshape(-1))
        if fixed:
            routing_kernels.top_k_steps(*prepared, u, keep_u, rho_row, out_rows, start, k)
            continue
        for t in range(n):
            if start + t:
                prepared = prepare(weights.draw(scope == "step"))
            routing_kernels.top_k_steps(*prepared, u[t : t + 1], keep_u[t : t + 1], rho_row, out_rows, start + t, k)
    return out


def gumbel_uniforms(rng: np.random.Generator, shape: tuple[int, ...], *, out: np.ndarray | None = None) -> np.ndarray:
    """The doubles ``rng.gumbel(size=shape)`` consumes, in its order: one ``rng.random()`` per
    draw, a draw of exactly 0 skipped (numpy's Gumbel rejects ``U = 1 - 0``), so the noise is
    ``routing_kernels.gumbel_from_uniforms`` of these and rng ends in the same state. ``out``: a
    C-contiguous float64 array of ``shape`` to draw into (returned), else a new array."""
    n = math.prod(shape)
    if out is None:
        out = np.empty(shape)
    elif out.shape != tuple(shape) or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float64 array of shape {tuple(shape)}")
    flat = out.reshape(n)  # a view: out is contiguous
    rng.random(out=flat)
    if not flat.all():  # exact zeros dropped, the end filled with fresh nonzero draws, in numpy's Gumbel order
        u = flat[flat != 0.0]
        while u.size < n:
            more = rng.random(n - u.size)
            u = np.concatenate([u, more[more != 0.0]])
        flat[:] = u
    return out


def inclusion_from_counts(counts: np.ndarray, tokens, top_k: int) -> tuple[np.ndarray, float]:
    """Inclusion probabilities π (H, E) from a sample's firing counts — ``count / tokens`` per
    row, rescaled so each row sums to K, with the experts the sample never saw fire given the
    Good–Turing estimate of the unseen mass — and the largest such mass over the rows.

    Per layer of ``counts`` (picks per expert; N picks, N₁ experts picked once, n₀ never): the
    probability that the next pick is of an unseen expert is N₁ / N (Good 1953, "The population
    frequencies of species and the estimation of population parameters", Biometrika 40). The seen
    experts' π is scaled by 1 − N₁/N and each unseen one gets K·(N₁/N)/n₀, so a layer's π still
    sums to K. A layer with no unseen expert, or no singleton, is unchanged: a long capture moves
    nothing, a short one (128 tokens of 288 experts) stops promising that a cache holding every
    expert it saw never misses."""
    c = np.atleast_2d(np.asarray(counts, dtype=float))
    pi = c / np.maximum(np.asarray(tokens, dtype=float), 1.0).reshape(-1, 1)
    pi = pi * (top_k / np.maximum(pi.sum(axis=1, keepdims=True), 1e-300))
    n = c.sum(axis=1)
    n1 = (c == 1).sum(axis=1)
    n0 = (c == 0).sum(axis=1)
    p0 = np.where((n > 0) & (n0 > 0), n1 / np.maximum(n, 1.0), 0.0)
    unseen = c == 0
    pi *= (1.0 - p0)[:, None]
    pi = np.where(unseen, (top_k * p0 / np.maximum(n0, 1))[:, None], pi)
    return np.clip(pi, 0.0, 1.0), float(p0.max(initial=0.0))


def unseen_mass_note(unseen: float) -> str | None:
    """What a run says when :func:`inclusion_from_counts` gave unseen experts a share (``unseen``,
    its largest per-layer mass), or None where it gave none."""
    if unseen <= 0.0:
        return None
    return (
        f"experts the file never saw fire in a row (a layer, or all layers where it is summed) get the "
        f"Good–Turing share of that row's picks that fired once (at most {unseen:.1%} of a row's picks), spread "
        "evenly over them: a sample's zero is not a probability of zero"
    )


def histogram_from_trace(topk: np.ndarray, experts: int) -> np.ndarray:
    """Incidence counts per (layer, expert) from a trace (..., layers, K); ``-1`` is padding.

    Counted a block of the first axis at a time through
    :func:`moeroof.data.safe_read.checked_blocks`: a memory-mapped trace cut short while it is
    counted is a :class:`ValueError`, not SIGBUS, and a map is never held resident whole."""
    from moeroof.data.safe_read import checked_blocks

    arr = topk if hasattr(topk, "shape") and hasattr(topk, "dtype") else np.asarray(topk)
    layers = arr.shape[-2]
    counts = np.zeros((layers, experts), dtype=np.int64)
    blocks = checked_blocks(arr) if len(arr.shape) > 2 else [(0, np.asarray(arr))]
    for _, block in blocks:
        flat = block.reshape(-1, layers, block.shape[-1])
        for layer in range(layers):
            ids = flat[:, layer, :].ravel()
            ids = ids[ids >= 0]
            counts[layer] += np.bincount(ids, minlength=experts)[:experts]
    return counts


def sample_histogram(
    popularity: np.ndarray, top_k: int, tokens: int, rng: np.random.Generator, chunk: int = 2000
) -> np.ndarray:
    """Incidence counts (layers, E) of ``tokens`` tokens routed by Gumbel-top-K, drawn in chunks
    of tokens so memory stays at ``chunk × layers × E`` scores."""
    w = np.atleast_2d(popularity)
    counts = np.zeros(w.shape, dtype=np.int64)
    for start in range(0, tokens, chunk):
        n = min(chunk, tokens - start)
        counts += histogram_from_trace(sample_topk(w, top_k, n, rng), w.shape[1])
    return counts


#: (token, slot, slot) comparisons of :func:`pair_overlap` made at once (16 MiB of booleans)
OVERLAP_CHUNK = 1 << 24
#: above this K a pair's shared experts are counted by sorting (K log K) rather than comparing
#: every slot with every slot (K²: 4.3 · 10^9 comparisons per pair at K = 65536)
OVERLAP_SORT_K = 64


def _shared_by_comparing(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Rows (n, K) each: how many entries of ``prev``'s row occur in ``cur``'s row, every slot
    compared with every slot."""
    return (prev[:, :, None] == cur[:, None, :]).any(axis=-1).sum(axis=-1)


def _shared_by_sorting(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Rows (n, K) each: how many entries of ``prev``'s row occur in ``cur``'s row (with ``prev``'s
    multiplicity), by dense ids and one sorted membership test over the chunk."""
    n, k = prev.shape
    both = np.concatenate([prev.ravel(), cur.ravel()]).astype(np.int64)
    _, dense = np.unique(both, return_inverse=True)  # ids < 2nK: row · 2nK + id cannot overflow
    span = 2 * n * k
    rows = np.repeat(np.arange(n, dtype=np.int64), k) * span
    p_keys = rows + dense[: n * k]
    c_keys = rows + dense[n * k :]
    return np.isin(p_keys, c_keys).reshape(n, k).sum(axis=1)


def pair_overlap(topk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per consecutive pair of a stream's tokens (steps−1, streams, layers): the experts the two
    share (0 where the pair is not valid) and whether both tokens are live.

    Shared = the previous token's picks found among the current token's. Counted in chunks of
    pairs with at most :data:`OVERLAP_CHUNK` slot comparisons at once (K ≤
    :data:`OVERLAP_SORT_K`), or by sorting for a larger K, so the memory is bounded by the trace
    whatever K is (K = 65536 once asked for a 32 GiB K × K array)."""
    arr = np.asarray(topk)
    if arr.ndim != 4:
        raise ValueError("trace must have shape (steps, streams, layers, K)")
    prev, cur = arr[:-1], arr[1:]
    valid = live_tokens(prev) & live_tokens(cur)  # (steps-1, streams, layers)
    k = arr.shape[-1]
    p2, c2 = prev.reshape(-1, k), cur.reshape(-1, k)
    shared = np.zeros(p2.shape[0], dtype=np.int64)
    if k <= OVERLAP_SORT_K:
        step, count = max(1, OVERLAP_CHUNK // max(k * k, 1)), _shared_by_comparing
    else:  # about 16 int64 working copies per slot
        step, count = max(1, OVERLAP_CHUNK // (16 * k)), _shared_by_sorting
    for a in range(0, p2.shape[0], step):
        shared[a : a + step] = count(p2[a : a + step], c2[a : a + step])
    return np.where(valid, shared.reshape(valid.shape), 0), valid


def consecutive_overlap(topk: np.ndarray) -> np.ndarray:
    """Mean number of experts a stream shares with its own previous token, per layer.

    ``topk`` is (steps, streams, layers, K); pairs where either token is padding are skipped
    (:func:`pair_overlap`). Returns an array (layers,) with NaN where no pair exists.
    """
    shared, valid = pair_overlap(topk)
    num = shared.sum(axis=(0, 1)).astype(float)
    den = valid.sum(axis=(0, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def weights_from_inclusion(
    pi: np.ndarray, top_k: int, *, tol: float = 1e-9, max_iter: int = 300
) -> tuple[np.ndarray, float]:
    """Plackett–Luce weights ``w`` (rows sum to 1) whose top-K inclusion probabilities
    (:func:`moeroof.models.routing.inclusion_probabilities`) are ``pi`` (rows summing to K,
    entries in [0, 1]), and the largest ``|π(w) − π|`` reached.

    A damped fixed point in log weights, ``log w ← log w + d·(logit π − logit π(w))``, row by
    row until ``tol``: π(w) increases in each w_i, so an expert drawn too rarely gains weight
    (the logit moves an expert near π = 1 as fast as a rare one; ``d`` starts at 0.7 and halves
    in a row whose error grew). An expert with π = 0 gets weight 0 (never drawn); one with
    π = 1 ends far above the rest (drawn by every token up to ``tol``). ``moeroof trace --routing
    HIST`` draws from these weights; :func:`moeroof.fit.skew.popularity_from_inclusion` is the
    fit's own older inversion (targets clipped into (0, 1), a multiplicative fixed point)."""
    pi = np.clip(np.atleast_2d(np.asarray(pi, dtype=float)), 0.0, 1.0)
    p = np.minimum(pi, 1.0 - 1e-13)
    with np.errstate(divide="ignore"):
        a = np.log(p)
    target = a - np.log1p(-p)
    err = np.full(pi.shape[0], np.inf)
    damp = np.full(pi.shape[0], 0.7)
    active = np.arange(pi.shape[0])
    for _ in range(max_iter):
        got = inclusion_probabilities(a[active], top_k, log=True)
        new = np.max(np.abs(got - pi[active]), axis=1)
        damp[active] = np.where(new > err[active], np.maximum(damp[active] / 2, 0.02), damp[active])
        err[active] = new
        done = new <= tol
        if done.all():
            break
        rows = active[~done]
        g = np.clip(got[~done], 1e-300, 1.0 - 1e-16)
        step = target[rows] - (np.log(g) - np.log1p(-g))
        a[rows] = np.where(pi[rows] > 0, a[rows] + damp[rows, None] * step, -np.inf)
        a[rows] -= a[rows].max(axis=1, keepdims=True)
        active = rows
    w = np.exp(a - a.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True), float(err.max())
