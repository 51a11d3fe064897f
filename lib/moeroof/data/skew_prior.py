"""The committed skew prior, ``data/fits/skew-prior.json`` (written by
``scripts/fit_skew_prior.py`` from :func:`moeroof.studies.skew_prior.study`).

A clone without the Qwen3 capture (``../shared/data/external``) still needs the prior for its
zero-fit routing, so its summary figures — the Dirichlet concentration α of a layer's expert
popularity, its 5 % and 95 % quantiles, the models it was fitted on — are committed; the
capture's rows are not. :func:`read_skew_prior` checks every field and names the file and field
of what is wrong.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from moeroof.core import paths
from moeroof.data.io import InputError, read_json_object

__all__ = ["SKEW_PRIOR_FILE", "SkewPriorSummary", "read_skew_prior", "committed_skew_prior", "prior_sources"]

#: the committed prior, relative to the data folder
SKEW_PRIOR_FILE = "fits/skew-prior.json"
#: the fewest experts of a model the fine-grained prior is for (fewer: the coarse one)
FINE_GRAINED_EXPERTS = 64


@dataclass(frozen=True)
class SkewPriorSummary:
    """The prior's median α, its 5 % and 95 % quantiles, the models and the file."""

    alpha: float
    alpha_range: tuple[float, float]
    sources: tuple[str, ...]
    provenance: str
    path: Path
    #: each model predicted by the others' prior, as the study wrote it (model → its record)
    held_out: dict = field(default_factory=dict, compare=False, hash=False)
    #: models of fewer than ``FINE_GRAINED_EXPERTS`` experts: their α, range and sources (None: absent)
    coarse: tuple[float, tuple[float, float], tuple[str, ...]] | None = None
    #: what ``alpha_range`` is
    range_name: str = "5–95 %"

    def for_experts(self, experts: int) -> SkewPriorSummary:
        """The prior for a model of ``experts`` experts: this one, or for a coarse model (fewer than
        :data:`FINE_GRAINED_EXPERTS`) the coarse models' own where the file has it."""
        if experts >= FINE_GRAINED_EXPERTS or self.coarse is None:
            return self
        alpha, rng, sources = self.coarse
        return replace(self, alpha=alpha, alpha_range=rng, sources=sources, coarse=None, range_name="coarse sources'")

    def label(self) -> str:
        """One line for notes and provenance: the centre, the range, the sources."""
        return (
            f"skew prior Dirichlet α = {self.alpha:.2g} ({self.range_name} {self.alpha_range[0]:.2g}–"
            f"{self.alpha_range[1]:.2g}) "
            f"fitted on {', '.join(self.sources)} ({self.path.name}; assumed for this model)"
        )


def _alpha(path: Path, value: object, field: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 1e-3 <= float(value) <= 1e6:
        raise InputError(path, "-", field, f"expected a number in [0.001, 1e6], got {value!r}")
    return float(value)


def prior_sources(path: Path, data: dict, names: str) -> tuple[tuple[str, ...], str]:
    """A committed prior's ``sources`` (a non-empty list of ``names``) and ``provenance`` (a string)."""
    sources = data.get("sources")
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources):
        raise InputError(path, "-", "sources", f"expected a non-empty list of {names}")
    prov = data.get("provenance")
    if not isinstance(prov, str) or not prov:
        raise InputError(path, "-", "provenance", "expected the sources' provenance, a string")
    return tuple(sources), prov


def read_skew_prior(path: str | os.PathLike[str] | None = None) -> SkewPriorSummary:
    """The committed prior (default :data:`SKEW_PRIOR_FILE` under ``data/``). Raises
    :class:`InputError` naming the file and field."""
    p = Path(path) if path is not None else paths.DATA_DIR / SKEW_PRIOR_FILE
    data = read_json_object(p, "the committed skew prior")
    alpha = _alpha(p, data.get("alpha"), "alpha")
    q = data.get("quantiles")
    if not isinstance(q, dict) or not isinstance(q.get("alpha"), list) or len(q["alpha"]) != 3:
        raise InputError(p, "-", "quantiles.alpha", "expected three quantiles (5, 50, 95 %)")
    lo, _, hi = (_alpha(p, x, "quantiles.alpha") for x in q["alpha"])
    if not lo <= alpha <= hi:
        raise InputError(p, "-", "quantiles.alpha", f"expected 5 % <= alpha <= 95 %, got {lo:g}, {alpha:g}, {hi:g}")
    sources, prov = prior_sources(p, data, "model names")
    held = data.get("held_out", {})
    if not isinstance(held, dict) or not all(isinstance(v, dict) for v in held.values()):
        raise InputError(p, "-", "held_out", "expected an object of held-out models")
    coarse = None
    c = data.get("coarse")
    if isinstance(c, dict) and c.get("alpha") is not None:
        rng = c.get("range")
        names = c.get("sources")
        if not isinstance(rng, list) or len(rng) != 2 or not isinstance(names, list) or not names:
            raise InputError(p, "-", "coarse", "expected alpha, range (two numbers) and sources")
        lo_c, hi_c = (_alpha(p, x, "coarse.range") for x in rng)
        coarse = (_alpha(p, c["alpha"], "coarse.alpha"), (lo_c, hi_c), tuple(str(n) for n in names))
    return SkewPriorSummary(alpha, (lo, hi), sources, prov, p, held, coarse)


@functools.lru_cache(maxsize=1)
def committed_skew_prior() -> SkewPriorSummary:
    """:func:`read_skew_prior` of the committed file, read once per process."""
    return read_skew_prior()
