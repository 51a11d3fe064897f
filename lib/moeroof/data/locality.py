"""The committed locality prior, ``data/fits/locality-prior.json`` (written by
``scripts/fit_locality_prior.py`` from :func:`moeroof.studies.locality_prior.study`).

A clone without the real captures (``../shared/data/external``) still needs the prior for its
zero-fit defaults, so its summary figures — the centre and spread of the stickiness ρ and the
per-stream hot set ``h`` (its size in a token's picks: :mod:`moeroof.models.locality`), with
the sources they came from — are committed; the captures'
rows are not. :func:`read_locality_prior` checks every field and names the file and field of
what is wrong.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from moeroof.core import paths
from moeroof.data.io import InputError, read_json_object
from moeroof.data.skew_prior import prior_sources

__all__ = [
    "LOCALITY_PRIOR_FILE",
    "LOCALITY_STRENGTH_FILE",
    "LocalityPriorSummary",
    "SourceStrength",
    "ModelStrengths",
    "read_locality_prior",
    "read_locality_strengths",
    "SHAPE_FIELDS",
    "model_shape",
]

#: the committed prior, relative to the data folder
LOCALITY_PRIOR_FILE = "fits/locality-prior.json"
#: where models' published single streams lie on the prior (written by
#: ``scripts/locality_strength.py --write``), relative to the data folder
LOCALITY_STRENGTH_FILE = "fits/locality-strength.json"


@dataclass(frozen=True)
class LocalityPriorSummary:
    """The prior's centre (``rho``, ``hot_set``: the hot set in a token's picks, h = W/K), its 5 %
    and 95 % quantiles, the sources and the file it was read from."""

    rho: float
    hot_set: float
    rho_range: tuple[float, float]
    hot_set_range: tuple[float, float]
    #: the spread on the scales logit ρ and log h, and the degrees of freedom of its t
    logit_rho_scale: float
    log_hot_set_scale: float
    dof: int
    sources: tuple[str, ...]
    provenance: str
    path: Path

    def label(self) -> str:
        """One line for notes and provenance: the centre, the range, the sources."""
        return (
            f"locality prior ρ = {self.rho:.2f} (5–95 % {self.rho_range[0]:.2g}–{self.rho_range[1]:.2g}), "
            f"per-stream hot set of {self.hot_set:.3g}·K experts (5–95 % {self.hot_set_range[0]:.2g}–"
            f"{self.hot_set_range[1]:.2g}·K), fitted on {', '.join(self.sources)} ({self.path.name}; assumed for this model)"
        )


def _number(path: Path, data: dict, key: str, lo: float, hi: float) -> float:
    v = data.get(key)
    if isinstance(v, str) and v.lower() in ("inf", "infinity"):
        v = math.inf
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= float(v) <= hi:
        raise InputError(path, "-", key, f"expected a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


def read_locality_prior(path: str | os.PathLike[str] | None = None) -> LocalityPriorSummary:
    """The committed prior (default :data:`LOCALITY_PRIOR_FILE` under ``data/``). Raises
    :class:`InputError` naming the file and field."""
    p = Path(path) if path is not None else paths.DATA_DIR / LOCALITY_PRIOR_FILE
    data = read_json_object(p, "the committed locality prior")
    rho = _number(p, data, "rho", 0.0, 1.0)
    h = _number(p, data, "hot_set", 0.0, math.inf)
    q = data.get("quantiles")
    if not isinstance(q, dict) or not all(isinstance(q.get(k), list) and len(q[k]) == 3 for k in ("rho", "hot_set")):
        raise InputError(p, "-", "quantiles", "expected rho and hot_set, three quantiles each")
    rq = [_number(p, {"quantiles.rho": x}, "quantiles.rho", 0.0, 1.0) for x in q["rho"]]
    hq = [_number(p, {"quantiles.hot_set": x}, "quantiles.hot_set", 0.0, math.inf) for x in q["hot_set"]]
    sc = data.get("scale")
    if not isinstance(sc, dict):
        raise InputError(p, "-", "scale", "expected logit_rho, log_hot_set and dof")
    s_rho = _number(p, sc, "logit_rho", 0.0, 1e3)
    s_h = _number(p, sc, "log_hot_set", 0.0, 1e3)
    dof = sc.get("dof")
    if not isinstance(dof, int) or isinstance(dof, bool) or dof < 0:
        raise InputError(p, "-", "scale.dof", f"expected an integer >= 0, got {dof!r}")
    sources, prov = prior_sources(p, data, "source names")
    return LocalityPriorSummary(rho, h, (rq[0], rq[2]), (hq[0], hq[2]), s_rho, s_h, dof, sources, prov, p)


@dataclass(frozen=True)
class SourceStrength:
    """One published single stream of a model: where its measured hit rates lie on the locality
    prior (``strength``, a quantile of its pairing: :meth:`moeroof.models.locality.Locality.paired`)
    and where the measurement comes from."""

    name: str
    strength: float
    provenance: str


@dataclass(frozen=True)
class ModelStrengths:
    """A model preset's published single streams (:class:`SourceStrength`), the model's shape
    (experts, top-K, MoE layers, expert bytes) they were measured on, and the file."""

    model: str
    shape: tuple[int, int, int, float]
    sources: tuple[SourceStrength, ...]
    path: Path


#: a model's shape in the strengths file, in :class:`ModelStrengths`' order
SHAPE_FIELDS = ("experts", "top_k", "moe_layers", "expert_bytes")


def model_shape(model) -> tuple[int, int, int, float]:
    """A model's (a :class:`moeroof.data.presets.MoEModel`'s) :data:`SHAPE_FIELDS`, as
    :class:`ModelStrengths` holds them."""
    e, k, layers, size = (getattr(model, f) for f in SHAPE_FIELDS)
    return int(e), int(k), int(layers), float(size)


def read_locality_strengths(path: str | os.PathLike[str] | None = None) -> dict[str, ModelStrengths]:
    """Model preset name → its published single streams' strengths, from
    :data:`LOCALITY_STRENGTH_FILE` (default, under ``data/``): ``{"models": {MODEL: {"shape":
    {"experts", "top_k", "moe_layers", "expert_bytes"}, "sources": {NAME: {"strength": u,
    "provenance": "…"}}}}}``, each ``u`` in (0, 1). Raises
    :class:`InputError` naming the file and field."""
    p = Path(path) if path is not None else paths.DATA_DIR / LOCALITY_STRENGTH_FILE
    data = read_json_object(p, "the committed locality strengths")
    models = data.get("models")
    if not isinstance(models, dict):
        raise InputError(p, "-", "models", "expected an object of model preset names")
    out = {}
    for model, entry in models.items():
        sources = entry.get("sources") if isinstance(entry, dict) else None
        if not isinstance(sources, dict) or not sources:
            raise InputError(p, "-", f"models.{model}.sources", "expected a non-empty object of sources")
        sh = entry.get("shape")
        if not isinstance(sh, dict):
            raise InputError(p, "-", f"models.{model}.shape", "expected experts, top_k, moe_layers and expert_bytes")
        dims = [
            _number(p, {f"models.{model}.shape.{k}": sh.get(k)}, f"models.{model}.shape.{k}", 1, 1e15)
            for k in SHAPE_FIELDS
        ]
        shape = (int(dims[0]), int(dims[1]), int(dims[2]), float(dims[3]))
        got = []
        for name, src in sources.items():
            field = f"models.{model}.sources.{name}"
            if not isinstance(src, dict):
                raise InputError(p, "-", field, "expected an object with strength and provenance")
            u = _number(p, {f"{field}.strength": src.get("strength")}, f"{field}.strength", 1e-6, 1.0 - 1e-6)
            prov = src.get("provenance")
            if not isinstance(prov, str) or not prov:
                raise InputError(p, "-", f"{field}.provenance", "expected where the measurement comes from, a string")
            got.append(SourceStrength(str(name), u, prov))
        out[str(model)] = ModelStrengths(str(model), shape, tuple(got), p)
    return out
