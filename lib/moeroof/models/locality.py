"""Per-stream temporal locality as a distribution: the locality prior's draws.

Two knobs say how local one stream's routing is (:mod:`moeroof.models.routing`'s
``sample_trace``): the stickiness ρ (each of a token's experts kept from its previous token with
probability ρ) and the per-stream hot set ``c`` (each stream routes by its own
``q ~ Dirichlet(c·w)``), carried as ``c/E`` so that it transfers between models of different E.
Where the rows cannot identify them, a prediction draws both from a :class:`Locality` — the
prior fitted on real decode (:mod:`moeroof.studies.locality_prior`, committed as
``data/fits/locality-prior.json``) — rather than holding them at 0.

The distribution lives on the scales ``x = (logit ρ, log(c/E))``: centre ``m``, scale ``s``
and ``dof`` degrees of freedom of a Student's t (0: normal), each knob's draws the quantiles at
``(j + ½)/n`` (deterministic: no Monte Carlo noise), paired by locality strength: the j-th
draw takes ρ at quantile ``u_j`` and ``c/E`` at ``1 − u_j`` (a stickier stream also keeps to a
tighter hot set). The sources cannot estimate the knobs' correlation (two or three models); they
agree in its sign (Mixtral decode: ρ ≈ 0.19 with ``c/E`` ≈ 34, nearly off; Qwen3-30B-A3B: ρ ≈ 0.30
with ``c/E`` ≈ 0.6), and of the pairings this one spans the widest range of a cache's hit rate,
from "locality off" at one end to the most local stream at the other — the end points
``moeroof fit-plan`` also brackets its bands with. ``c/E`` is held in
[:data:`C_PER_EXPERT_FLOOR`, :data:`C_PER_EXPERT_OFF`], the top meaning off (``inf``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "C_PER_EXPERT_OFF",
    "C_PER_EXPERT_FLOOR",
    "RHO_FLOOR",
    "Locality",
    "to_scale",
    "from_scale",
]

#: ``c / E`` at or above this is "off" (a stream routes as the layer does): the log scale's cap
C_PER_EXPERT_OFF = 1e3
#: ``c / E`` below this is held here: a stream that keeps to a handful of experts is already at
#: most as local as one stream can be (the log scale's t tails reach 1e-10 otherwise)
C_PER_EXPERT_FLOOR = 1e-2
#: ρ lives on the logit scale, clipped to [RHO_FLOOR, 1 − RHO_FLOOR]
RHO_FLOOR = 1e-3


def to_scale(rho, c_per_expert) -> np.ndarray:
    """``(..., 2)``: ``logit ρ`` and ``log(c/E)`` (``c/E`` clipped to its floor and cap)."""
    r = np.clip(np.asarray(rho, dtype=float), RHO_FLOOR, 1.0 - RHO_FLOOR)
    c = np.clip(np.asarray(c_per_expert, dtype=float), C_PER_EXPERT_FLOOR, C_PER_EXPERT_OFF)
    return np.stack([np.log(r / (1.0 - r)), np.log(c)], axis=-1)


def from_scale(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ρ and ``c/E`` back from :func:`to_scale`'s scales (``c/E`` at its cap: ``inf``, off)."""
    x = np.asarray(x, dtype=float)
    rho = 1.0 / (1.0 + np.exp(-x[..., 0]))
    c = np.exp(np.maximum(x[..., 1], math.log(C_PER_EXPERT_FLOOR)))
    return rho, np.where(c >= C_PER_EXPERT_OFF * (1 - 1e-9), np.inf, c)


@dataclass(frozen=True)
class Locality:
    """A distribution of ρ and ``c/E`` (module docstring) and where it came from."""

    mean: tuple[float, float]
    scale: tuple[float, float]
    dof: int
    label: str = "locality prior"

    @property
    def centre(self) -> tuple[float, float]:
        """``(rho, c_per_expert)`` at the centre: the point a zero-fit prediction uses."""
        r, c = from_scale(np.asarray(self.mean))
        return float(r), float(c)

    @classmethod
    def from_summary(cls, summary) -> Locality:
        """The committed prior (:func:`moeroof.data.locality.read_locality_prior`) as a distribution;
        its label names the sources and the file, the numbers are said where they are used."""
        mean = to_scale(summary.rho, summary.c_per_expert)
        return cls(
            (float(mean[0]), float(mean[1])),
            (float(summary.logit_rho_scale), float(summary.log_c_per_expert_scale)),
            int(summary.dof),
            f"locality prior fitted on {', '.join(summary.sources)} ({summary.path.name}; assumed for this model)",
        )

    @classmethod
    def committed(cls) -> Locality:
        """The prior every zero-fit default uses: ``data/fits/locality-prior.json``."""
        from moeroof.data.locality import read_locality_prior

        return cls.from_summary(read_locality_prior())

    def quantiles(self, q) -> tuple[np.ndarray, np.ndarray]:
        """ρ and ``c/E`` at the quantiles ``q`` (each knob's own)."""
        from scipy.stats import norm
        from scipy.stats import t as student_t

        z = student_t.ppf(q, self.dof) if self.dof > 0 else norm.ppf(q)
        x = np.asarray(self.mean)[None, :] + np.asarray(z, dtype=float).reshape(-1, 1) * np.asarray(self.scale)[None, :]
        return from_scale(x)

    def draws(self, n: int) -> list[tuple[float, float]]:
        """``n`` pairs ``(rho, c_per_expert)``: ρ at the quantiles ``u_j = (j + ½)/n`` and ``c/E``
        at ``1 − u_j`` (module docstring: paired by locality strength, least local first)."""
        u = (np.arange(n) + 0.5) / n
        rho, _ = self.quantiles(u)
        _, c = self.quantiles(1.0 - u)
        return [(float(r), float(x)) for r, x in zip(rho, c)]
