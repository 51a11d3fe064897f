"""Where a model's published single streams lie on the locality prior: a model's own centre.

The locality prior (:mod:`moeroof.studies.locality_prior`, ``data/fits/locality-prior.json``) is
fitted on the stream sources that measure locality itself (a capture's consecutive overlap and
its cache curve: Mixtral 8x7B, Qwen3-30B-A3B). Engines also publish one model's single-stream
hit rates without its routing; those rows cannot tell stickiness from a hot set, but they can
say where on the prior the model's streams lie. The prior pairs its two knobs by strength
(:meth:`moeroof.models.locality.Locality.paired`: ρ at its quantile ``u``, the hot set at its
``1 − u``), so one number does: the **strength** ``u`` at which ``moeroof plan`` at B = 1, on the
skew prior's routing and the row's own box and cache, meets the measured hit rates (least
squares over a source's rows, ``u`` on a grid of 0.001 between the bands' ends 0.05 and 0.95,
the hit rate linear between :data:`STRENGTHS`).

A zero-fit default of a model whose streams have been published takes the prior centred at the
mean of its sources' strengths (:meth:`moeroof.models.locality.Locality.committed_for`; its
spread, the prior's, still in the bands); any other model keeps the prior's own centre (0.5).

**Sources** (:func:`sources`), both GLM-5.2 (docs/sources.md):

- ``colibri-i5``: colibri's i5-13600K box (62 GB, PCIe 4 NVMe), one LRU per layer over what its
  RAM leaves (:func:`moeroof.studies.validation.colibri_i5_cache`), 54.7 % hits (a hobby project);
- ``mlx-lm-1438``: mlx-lm#1438's Apple M5 Max (128 GB, ``apple-m4-max``), one global LRU, the
  three measured rows of ``data/points/mlx-lm-1438.plan-points`` (10, 20 and 75 GB: 0, 24 and
  60 %); the thread's sweep at 30–60 GB is not used here (``moeroof validate`` holds it out).

**Held out** (:func:`study`): each source predicted at the strength of the model's *other*
sources, against the prior's own centre: the error a user of that engine would see from a
default that knows only the other engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from moeroof.core.paths import DATA_DIR
from moeroof.core.results import Result
from moeroof.core.units import GiB
from moeroof.data.locality import SHAPE_FIELDS, model_shape
from moeroof.data.presets import Hardware, MoEModel, load_hardware, load_model
from moeroof.models.locality import Locality
from moeroof.models.plan import Workload

__all__ = [
    "STRENGTHS",
    "StrengthSource",
    "SourceFit",
    "StrengthStudy",
    "sources",
    "hit_rates",
    "strength_of",
    "study",
    "strength_record",
]

#: the strengths ``plan`` is run at: the bands' ends, the centre and 16 between (every 0.05)
STRENGTHS = tuple(float(u) for u in np.round(np.linspace(0.05, 0.95, 19), 2))
#: the grid the strength is read off (the hit rate linear between :data:`STRENGTHS`)
FINE = np.round(np.linspace(0.05, 0.95, 901), 3)


@dataclass(frozen=True)
class StrengthSource:
    """One published single stream: its model and box, a workload per measured row (B = 1), the
    measured hit rates and where they come from."""

    name: str
    model: MoEModel
    hardware: Hardware
    workloads: tuple[Workload, ...]
    measured: tuple[float, ...]
    provenance: str


def sources() -> dict[str, StrengthSource]:
    """The published single streams of the module docstring, by name."""
    from moeroof.data.plan_points import read_plan_points
    from moeroof.studies.validation import SINGLE_STREAM, colibri_i5_cache

    glm = load_model("glm-5.2")
    gen4, mac = load_hardware("nvme-gen4"), load_hardware("apple-m4-max")
    ref = SINGLE_STREAM["colibri-i5"]
    i5 = Workload(context_tokens=512, cache_bytes=colibri_i5_cache(glm, gen4), cache_policy="lru", cache_scope="layer")
    points = read_plan_points(DATA_DIR / "points" / "mlx-lm-1438.plan-points")
    rows = [(p.cache_gib, p.policy, float(p.hit_rate)) for p in points if p.hit_rate is not None]
    return {
        "colibri-i5": StrengthSource(
            "colibri-i5",
            glm,
            gen4,
            (i5,),
            (float(ref.value["hit"]),),
            f"{ref.source} (a hobby project): GLM-5.2 on an i5-13600K 62 GB, one LRU per layer, "
            f"{float(ref.value['hit']):.1%} hits",
        ),
        "mlx-lm-1438": StrengthSource(
            "mlx-lm-1438",
            glm,
            mac,
            tuple(Workload(cache_bytes=gib * GiB, cache_policy=policy) for gib, policy, _ in rows),
            tuple(hit for _, _, hit in rows),
            "mlx-lm#1438: GLM-5.2 4-bit on an Apple M5 Max 128 GB, one global LRU, the measured rows of "
            "data/points/mlx-lm-1438.plan-points ("
            + ", ".join(f"{gib:.3g} GiB {hit:.0%}" for gib, _, hit in rows)
            + ")",
        ),
    }


def hit_rates(src: StrengthSource, prior: Locality) -> np.ndarray:
    """``plan``'s hit rate at B = 1 of each of the source's rows (axis 0) at each of
    :data:`STRENGTHS` (axis 1): the skew prior's routing with one stream's locality at the
    prior's pairing at that strength."""
    from moeroof.models.local_routing import with_locality
    from moeroof.models.plan import plan, prior_routing

    model = src.model
    centre = prior_routing(model)
    rho, c_e = prior.paired_for(list(STRENGTHS), model.experts, model.top_k)
    routes = [with_locality(model, centre, (float(r), float(c), prior.label)) for r, c in zip(rho, c_e)]
    return np.array(
        [[float(plan(model, src.hardware, w, r, [1]).cache_hit_rate[0]) for r in routes] for w in src.workloads]
    )


def strength_of(measured: Sequence[float], hits: np.ndarray) -> float:
    """The strength on :data:`FINE` whose hit rates (linear between :data:`STRENGTHS` per row of
    ``hits``) meet ``measured`` in least squares; the lowest such where several tie (a row the
    prior cannot move, as a cache smaller than one token's experts, adds the same at every one)."""
    fine = np.stack([np.interp(FINE, STRENGTHS, row) for row in np.atleast_2d(hits)])
    sse = ((fine - np.asarray(measured, dtype=float)[:, None]) ** 2).sum(axis=0)
    return float(FINE[int(np.argmin(sse))])


@dataclass(frozen=True)
class SourceFit(Result):
    """One source: its strength, its hit rates at :data:`STRENGTHS` per row, the measured rates,
    and held out: its rates at the model's other sources' strength (``held_out_strength``; None
    where it has no other source) and at the prior's centre."""

    name: str
    model: str
    #: (field, value) of the model's experts, top_k, moe_layers and expert_bytes
    shape: tuple[tuple[str, float], ...]
    provenance: str
    strength: float
    measured: tuple[float, ...]
    hits: tuple[tuple[float, ...], ...]
    held_out_strength: float | None
    held_out: tuple[float, ...] | None
    at_centre: tuple[float, ...]


@dataclass(frozen=True)
class StrengthStudy(Result):
    """Every source's :class:`SourceFit` and the prior they lie on."""

    prior: str
    fits: tuple[SourceFit, ...]

    def model_strengths(self) -> dict[str, dict[str, dict[str, Any]]]:
        """model → source → ``{"strength", "provenance"}`` (what the committed file holds)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for f in self.fits:
            out.setdefault(f.model, {})[f.name] = {"strength": f.strength, "provenance": f.provenance}
        return out

    def model_shapes(self) -> dict[str, dict[str, float]]:
        """model → its shape (experts, top-K, MoE layers, expert bytes) the sources ran on."""
        return {f.model: dict(f.shape) for f in self.fits}


def _shape(model: MoEModel) -> tuple[tuple[str, float], ...]:
    return tuple(zip(SHAPE_FIELDS, (float(v) for v in model_shape(model))))


def _at(u: float, hits: np.ndarray) -> tuple[float, ...]:
    return tuple(float(np.interp(u, STRENGTHS, row)) for row in hits)


def study(prior: Locality | None = None, progress: Callable[[int, int, str], None] | None = None) -> StrengthStudy:
    """Each of :func:`sources` placed on ``prior`` (default :meth:`Locality.committed`) and
    predicted from the model's other sources (module docstring)."""
    prior = Locality.committed() if prior is None else prior
    srcs = sources()
    grids, strengths = {}, {}
    for i, (name, src) in enumerate(srcs.items()):
        if progress is not None:
            progress(i, len(srcs), name)
        grids[name] = hit_rates(src, prior)
        strengths[name] = strength_of(src.measured, grids[name])
    fits = []
    for name, src in srcs.items():
        others = [strengths[o] for o, s in srcs.items() if o != name and s.model.name == src.model.name]
        u_out = float(np.mean(others)) if others else None
        g = grids[name]
        fits.append(
            SourceFit(
                name, src.model.name, _shape(src.model), src.provenance, strengths[name], src.measured,
                tuple(tuple(float(v) for v in row) for row in g),
                u_out, None if u_out is None else _at(u_out, g), _at(0.5, g),
            )
        )  # fmt: skip
    return StrengthStudy(prior.label, tuple(fits))


def strength_record(st: StrengthStudy) -> dict[str, Any]:
    """What ``data/fits/locality-strength.json`` holds (:func:`moeroof.data.locality.read_locality_strengths`):
    per model its sources' strengths and provenance, and what they were placed on."""
    return {
        "what": (
            "where models' published single streams lie on the locality prior: the strength u (a quantile of "
            "its pairing, rho at u and the hot set at 1 - u) at which plan at B = 1 meets their hit rates "
            "(moeroof.studies.locality_strength)"
        ),
        "prior": st.prior,
        "models": {m: {"shape": st.model_shapes()[m], "sources": s} for m, s in st.model_strengths().items()},
    }
