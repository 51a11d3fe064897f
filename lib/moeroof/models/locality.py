"""Per-stream temporal locality as a distribution: the locality prior's draws.

Two knobs say how local one stream's routing is (:mod:`moeroof.models.routing`'s
``sample_trace``): the stickiness ρ (each of a token's experts kept from its previous token with
probability ρ) and the per-stream hot set ``c`` (each stream routes by its own
``q ~ Dirichlet(c·w)``). Where the rows cannot identify them, a prediction draws both from a
:class:`Locality` — the prior fitted on real decode (:mod:`moeroof.studies.locality_prior`,
committed as ``data/fits/locality-prior.json``) — rather than holding them at 0.

**What transfers between models.** ``c`` is a concentration over E experts, and a model's E and
top-K decide what one value means: ``c = 4.7`` is a stream of a top-2-of-8 model keeping to
about 3.6 experts, ``c = 75`` one of a top-8-of-128 model keeping to about 48. The prior carries
the hot set's size in a token's picks instead,

    W(c) = (c + 1) / (c/E + 1),     h = W / K,

``W`` the number of experts a stream's ``q`` spreads over (``1 / E[Σ q_i²]`` at uniform
popularity: ``E[q_i²] = w_i (c w_i + 1)/(c + 1)``), from 1 (``c → 0``) to E (``c = ∞``, off),
and ``h`` that in units of what one token picks; back for a model of E experts, top-K,
``c = (hK − 1)/(1 − hK/E)``, off (``inf``) where ``hK ≥ E``. Experts are chosen K at a time,
so a topic's working set is counted in picks — as the public finding that a cache of about
twice the active experts is the usual knee across 20 MoE models (arXiv 2505.16056, in
docs/sources.md) counts it. The two stream captures agree on it (h ≈ 3.9 for Mixtral, whose
``c/E`` ≈ 34 is nearly off for 8 experts, and h ≈ 6.0 for Qwen3-30B-A3B, ``c/E`` ≈ 0.59), where
they disagree 57-fold on ``c/E``.

**Depth.** The first MoE layer carries none of a stream's locality: its routing follows the
current token alone. Both stream sources that resolve layers say so — the Mixtral capture's
layer 0 shares 0.52 of its 2 experts between consecutive tokens against 0.50 for independent
uniform picks (0.75 over all 32 layers, 0.59 at the next least local layer), and the Qwen3
table's layer 0 shares 7.9 % of its 8 against 6.25 % (42.7 % over all layers, 59.7 % at layer
7; docs/sources.md). So where a simulation holds every MoE layer of a model, in order (a
``moeroof trace``, a fit-routing simulation of a model of at most ``max_sim_layers`` layers, a
capture of the first layer alone as the Qwen1.5 one), its first layer routes by the layer's
popularity with ρ = 0 and no hot set (:func:`layer_knobs`) and the knobs hold on the others.
Where fewer layers stand for a model's many (the prior's fits, which simulate 8 of Mixtral's 32
and Qwen3's 48; a plan's trace of ``TRACE_LAYERS``), each stands for a typical layer and
carries the knobs: the first layer is 1/L of an all-layer average, which the rule would move by
1/L of its difference.

The distribution lives on the scales ``x = (logit ρ, log h)``: centre ``m``, scale ``s`` and
``dof`` degrees of freedom of a Student's t (0: normal), each knob's draws the quantiles at
``(j + ½)/n`` (deterministic: no Monte Carlo noise), paired by locality strength: the j-th
draw takes ρ at quantile ``u_j`` and ``h`` at ``1 − u_j`` (a stickier stream also keeps to a
tighter hot set). The sources cannot estimate the knobs' correlation (two or three models); they
agree in its sign (Mixtral: ρ ≈ 0.19 with the wider hot set, Qwen3: ρ ≈ 0.30), and of the
pairings this one spans the widest range of a cache's hit rate, from "locality off" at one end
to the most local stream at the other — the end points ``moeroof fit-plan`` also brackets its
bands with. ``h`` is held in [:data:`HOT_SET_FLOOR`, :data:`HOT_SET_CAP`]; a model's ``c/E``
from it in [:data:`C_PER_EXPERT_FLOOR`, ∞].

**A model's own centre.** Where engines have published a model's single-stream hit rates, the
strength ``u`` at which they lie on this pairing is committed (``data/fits/locality-strength.json``,
:mod:`moeroof.studies.locality_strength`), and that model's defaults take the distribution moved
along the pairing to their mean strength (:meth:`Locality.at_strength`,
:meth:`Locality.committed_for`): the same spread, another centre (docs/validation.md, "A model's
own centre").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "C_PER_EXPERT_FLOOR",
    "HOT_SET_FLOOR",
    "HOT_SET_CAP",
    "RHO_FLOOR",
    "Locality",
    "hot_set_from_c",
    "c_per_expert_from_hot_set",
    "to_scale",
    "from_scale",
    "layer_knobs",
]

#: a model's ``c / E`` below this is held here: a stream that keeps to a handful of experts is
#: already at most as local as one stream can be
C_PER_EXPERT_FLOOR = 1e-2
#: ``h`` (hot set in picks) below this is held here: a stream's hot set smaller than a quarter of
#: one token's picks cannot be routed (a token picks K distinct experts)
HOT_SET_FLOOR = 0.25
#: ``h`` above this is held here: off for any model of at most 10⁴·K experts (the log scale's cap)
HOT_SET_CAP = 1e4
#: ρ lives on the logit scale, clipped to [RHO_FLOOR, 1 − RHO_FLOOR]
RHO_FLOOR = 1e-3


def hot_set_from_c(c, experts: int, top_k: int) -> np.ndarray:
    """``h = W/K``, ``W = (c + 1)/(c/E + 1)`` (module docstring); ``c = inf`` (off) gives ``E/K``."""
    c = np.asarray(c, dtype=float)
    e = float(experts)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(np.isinf(c), e, (c + 1.0) / (c / e + 1.0))
    return w / float(top_k)


def c_per_expert_from_hot_set(h, experts: int, top_k: int) -> np.ndarray:
    """A model's ``c/E`` for a hot set of ``h`` picks: ``c = (hK − 1)/(1 − hK/E)``, ``inf`` (off)
    where ``hK ≥ E``, at least :data:`C_PER_EXPERT_FLOOR`."""
    e = float(experts)
    w = np.asarray(h, dtype=float) * float(top_k)
    with np.errstate(invalid="ignore", divide="ignore"):
        # off within rounding: exp(log h) of h = E/K is E/K only to the last bit
        c = np.where(w >= e * (1.0 - 1e-9), np.inf, (w - 1.0) / (1.0 - w / e))
    return np.maximum(c / e, C_PER_EXPERT_FLOOR)


def layer_knobs(rho, c, layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer ``(rho, c)`` arrays of shape (layers,) for a trace whose layer 0 is the model's
    first MoE layer (module docstring, Depth): the knobs (scalars or per-layer arrays) on every
    layer but the first, which gets ρ = 0 and ``c = inf`` (no locality)."""
    r, cc = (np.array(np.broadcast_to(np.asarray(v, dtype=float), (int(layers),))) for v in (rho, c))
    r[0], cc[0] = 0.0, np.inf
    return r, cc


def to_scale(rho, hot_set) -> np.ndarray:
    """``(..., 2)``: ``logit ρ`` and ``log h`` (each clipped to its floor and cap)."""
    r = np.clip(np.asarray(rho, dtype=float), RHO_FLOOR, 1.0 - RHO_FLOOR)
    h = np.clip(np.asarray(hot_set, dtype=float), HOT_SET_FLOOR, HOT_SET_CAP)
    return np.stack([np.log(r / (1.0 - r)), np.log(h)], axis=-1)


def from_scale(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ρ and ``h`` back from :func:`to_scale`'s scales (``h`` within its floor and cap)."""
    x = np.asarray(x, dtype=float)
    rho = 1.0 / (1.0 + np.exp(-x[..., 0]))
    h = np.exp(np.clip(x[..., 1], math.log(HOT_SET_FLOOR), math.log(HOT_SET_CAP)))
    return rho, h


@dataclass(frozen=True)
class Locality:
    """A distribution of ρ and the hot set ``h`` (module docstring) and where it came from; the
    ``*_for`` methods give a model's ρ and ``c/E`` (``inf``: off)."""

    mean: tuple[float, float]
    scale: tuple[float, float]
    dof: int
    label: str = "locality prior"

    @property
    def centre(self) -> tuple[float, float]:
        """``(rho, hot_set)`` at the centre: the point a zero-fit prediction uses."""
        r, h = from_scale(np.asarray(self.mean))
        return float(r), float(h)

    def centre_for(self, experts: int, top_k: int) -> tuple[float, float]:
        """``(rho, c_per_expert)`` at the centre for a model of ``experts``, top-``top_k``."""
        r, h = self.centre
        return r, float(c_per_expert_from_hot_set(h, experts, top_k))

    @classmethod
    def from_summary(cls, summary) -> Locality:
        """The committed prior (:func:`moeroof.data.locality.read_locality_prior`) as a distribution;
        its label names the sources and the file, the numbers are said where they are used."""
        mean = to_scale(summary.rho, summary.hot_set)
        return cls(
            (float(mean[0]), float(mean[1])),
            (float(summary.logit_rho_scale), float(summary.log_hot_set_scale)),
            int(summary.dof),
            f"locality prior fitted on {', '.join(summary.sources)} ({summary.path.name}; assumed for this model)",
        )

    @classmethod
    def committed(cls) -> Locality:
        """The prior every zero-fit default uses: ``data/fits/locality-prior.json``."""
        from moeroof.data.locality import read_locality_prior

        return cls.from_summary(read_locality_prior())

    @classmethod
    def committed_for(cls, model: Any, without: Sequence[str] = ()) -> Locality:
        """The prior a zero-fit default of ``model`` (a :class:`moeroof.data.presets.MoEModel`)
        uses: :meth:`committed`, centred where that model's published single streams lie on it
        (:meth:`at_strength` at the mean of their strengths, ``data/fits/locality-strength.json``)
        where the file holds a model of its name *and* shape (experts, top-K, MoE layers, expert
        bytes: a TOML that kept a preset's name but changed the model is another model), less
        the sources named in ``without`` (a held-out check of one of them)."""
        from moeroof.data.locality import model_shape, read_locality_prior, read_locality_strengths

        summary = read_locality_prior()
        prior = cls.from_summary(summary)
        known = read_locality_strengths().get(str(model.name))
        if known is None or known.shape != model_shape(model):
            return prior
        kept = [s for s in known.sources if s.name not in set(without)]
        if not kept:
            return prior
        u = float(np.mean([s.strength for s in kept]))
        names = ", ".join(s.name for s in kept)
        label = (
            f"locality prior fitted on {', '.join(summary.sources)} ({summary.path.name}), centred at strength "
            f"{u:.2f} of its range, where {model.name}'s published single streams lie ({names}; {known.path.name})"
        )
        return prior.at_strength(u, label)

    def at_strength(self, u: float, label: str | None = None) -> Locality:
        """This distribution moved along its pairing (:meth:`paired`) so that its centre is its
        own strength-``u`` point — ρ at its ``u``-quantile, ``h`` at its ``1 − u`` — its scale and
        degrees of freedom unchanged: ``m' = m + z_u·(s_ρ, −s_h)``, ``z_u`` the t quantile. ``u`` =
        ½ is this distribution itself. ``label``: the new one's (default this one's)."""
        from moeroof.core.stats import student_t_quantile

        if not 0.0 < float(u) < 1.0:
            raise ValueError(f"a strength is a quantile in (0, 1), got {u!r}")
        z = float(student_t_quantile(float(u), self.dof))
        mean = (self.mean[0] + z * self.scale[0], self.mean[1] - z * self.scale[1])
        return Locality(mean, self.scale, self.dof, self.label if label is None else label)

    def quantiles(self, q) -> tuple[np.ndarray, np.ndarray]:
        """ρ and ``h`` at the quantiles ``q`` (each knob's own)."""
        from moeroof.core.stats import student_t_quantile

        z = student_t_quantile(q, self.dof)
        x = np.asarray(self.mean)[None, :] + np.asarray(z, dtype=float).reshape(-1, 1) * np.asarray(self.scale)[None, :]
        return from_scale(x)

    def quantiles_for(self, q, experts: int, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """ρ and the model's ``c/E`` at the quantiles ``q`` (each knob's own: ``c/E`` falls as
        ``h`` does, so its q-quantile is ``h``'s)."""
        rho, h = self.quantiles(q)
        return rho, c_per_expert_from_hot_set(h, experts, top_k)

    def paired(self, u) -> tuple[np.ndarray, np.ndarray]:
        """The pairing by locality strength (module docstring): ρ at its quantile ``u`` and ``h``
        at its ``1 − u`` — at u = 5 % the least local end, at 95 % the most local."""
        u = np.asarray(u, dtype=float)
        return self.quantiles(u)[0], self.quantiles(1.0 - u)[1]

    def paired_for(self, u, experts: int, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`paired` as ρ and the ``c/E`` of a model of ``experts``, top-``top_k``."""
        rho, h = self.paired(u)
        return rho, c_per_expert_from_hot_set(h, experts, top_k)

    def draws(self, n: int) -> list[tuple[float, float]]:
        """``n`` pairs ``(rho, hot_set)``: :meth:`paired` at ``u_j = (j + ½)/n``, least local first."""
        rho, h = self.paired((np.arange(n) + 0.5) / n)
        return [(float(r), float(x)) for r, x in zip(rho, h)]

    def draws_for(self, n: int, experts: int, top_k: int) -> list[tuple[float, float]]:
        """:meth:`draws` as ``(rho, c_per_expert)`` of a model of ``experts``, top-``top_k``."""
        return [(r, float(c_per_expert_from_hot_set(h, experts, top_k))) for r, h in self.draws(n)]
