"""Two-dimensional regime maps: the step roofline over (expert-cache size, batch B) (docs/models.md).

Each cell is :func:`moeroof.models.plan.plan` evaluated at one cache size and one batch size, so a
map says nothing the roofline does not::

    T_step(C, B) = combine( ssd_bytes(C, B) / BW_ssd, mem_bytes(B) / BW_mem, flops(B) / FLOPS [, fabric] )
    net tok/s(C, B) = B / T_step(C, B)
    bound(C, B)     = argmax of the four terms (the binding resource, even when combine is sum)

with ``ssd_bytes(C, B) = Σ_ℓ misses_ℓ(C_eff, B) · e`` for a static hot set of
``C_eff = min(C, RAM − OS reserve − dense band − B·ctx·kv)`` bytes. The cache axis is the
*requested* cache; where RAM pressure caps it (large B, long context) the map goes flat along
the cache axis. A cell whose dense band and KV cache alone exceed RAM is infeasible as
modelled (``fits_in_memory`` False): a figure must mask or hatch it, not report its tok/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from moeroof.core.results import Result
from moeroof.data.presets import Hardware, MoEModel
from moeroof.models.plan import TERMS, RoutingProbabilities, Workload, plan
from moeroof.models.union import as_batch

__all__ = ["RegimeMap", "regime_map", "BOUND_CODES"]

#: integer code of each binding term, in :data:`moeroof.models.plan.TERMS` order (for categorical colour maps)
BOUND_CODES = {term: i for i, term in enumerate(TERMS)}


@dataclass(frozen=True)
class RegimeMap(Result):
    """The roofline on a (cache, batch) grid. 2-D arrays have shape (len(cache_bytes), len(batch)).

    ``bound`` holds the binding term's name per cell (``bound_code`` the same as
    :data:`BOUND_CODES` integers); ``transitions[i]`` is ``Plan.transitions`` along B at
    ``cache_bytes[i]`` (``{from, to, batch}`` with ``batch`` = B*, the first B of the new regime);
    ``cache_effective_bytes`` is what RAM left for the cache in each cell.
    """

    batch: np.ndarray
    cache_bytes: np.ndarray
    net_tok_s: np.ndarray
    step_seconds: np.ndarray
    bound: np.ndarray
    fits_in_memory: np.ndarray
    cache_effective_bytes: np.ndarray
    transitions: tuple[tuple[dict, ...], ...]
    overlap: str
    provenance: str

    @property
    def bound_code(self) -> np.ndarray:
        """``bound`` as integers (:data:`BOUND_CODES`), for ``pcolormesh`` with a categorical colour map."""
        return np.vectorize(BOUND_CODES.__getitem__, otypes=[int])(self.bound)


def regime_map(
    model: MoEModel, hardware: Hardware, workload: Workload, routing: RoutingProbabilities, batch, cache_bytes
) -> RegimeMap:
    """Evaluate :func:`moeroof.models.plan.plan` at every (cache size, batch) cell (module docstring).

    ``workload`` supplies everything but the cache (its ``cache_bytes`` is replaced per row);
    ``cache_bytes`` is a 1-D sequence of requested cache sizes in bytes (≥ 0). The result's
    ``provenance`` is ``projected`` unless every input is witnessed (then ``witnessed-inputs``),
    as in ``Plan.provenance["result"]``.
    """
    b = as_batch(batch)
    c = np.atleast_1d(np.asarray(cache_bytes, dtype=float))
    if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError(f"cache_bytes must be a non-empty 1-D sequence of finite sizes >= 0, got {cache_bytes!r}")
    shape = (c.size, b.size)
    net, step, eff = np.empty(shape), np.empty(shape), np.empty(shape)
    fits = np.empty(shape, dtype=bool)
    bound = np.empty(shape, dtype="<U7")
    trans: list[tuple[dict, ...]] = []
    prov: Any = None
    for i, ci in enumerate(c):
        p = plan(model, hardware, replace(workload, cache_bytes=float(ci)), routing, b)
        net[i], step[i], fits[i] = p.net_tok_s, p.step_seconds, p.fits_in_memory
        eff[i] = p.cache_experts_per_layer * model.moe_layers * model.expert_bytes
        bound[i] = p.bound
        trans.append(p.transitions)
        prov = p.provenance["result"]
    return RegimeMap(b, c, net, step, bound, fits, eff, tuple(trans), workload.overlap, prov)
