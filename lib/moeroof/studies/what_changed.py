"""What changed with the one step model: the simulated expert cache against the pinned hot set.

Before the one step model, the step saw a hot set pinned from the true routing probabilities (cache policy
``static``: an **oracle**, it knows a popularity no engine has measured). Now the default is a
simulated LRU in steady state on traces drawn from the routing model (``lru``;
:mod:`moeroof.models.expert_cache`). The notebooks open with a paragraph computed from their own
run that says what this changed at their defaults; this module computes those comparisons and
formats them (no new model: every number is :func:`moeroof.models.plan.plan`,
:func:`moeroof.models.levers.lever_factors` or :func:`moeroof.studies.regime_map.regime_map`
evaluated twice, once per policy).

- :func:`compare_policies` / :class:`PolicyComparison`: one plan per policy on the same batch
  grid; the feasible batch where net tok/s differs most, where the binding term differs.
- :func:`plan_paragraph`: the Markdown paragraph for a plan at a few batch sizes.
- :func:`lever_lines`: how each lever's factor moves (L2 against ``uncoalesced`` especially).
- :func:`compare_maps` / :func:`map_paragraph`: best feasible cell and binding terms of two
  regime maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from moeroof.core.results import Result
from moeroof.data.presets import Hardware, MoEModel
from moeroof.models.plan import CACHE_POLICIES, TERMS, Plan, RoutingProbabilities, Workload, plan

__all__ = [
    "DEFAULT_POLICY",
    "ORACLE_POLICY",
    "INTRO",
    "short_label",
    "PolicyComparison",
    "compare_plans",
    "compare_policies",
    "point_sentence",
    "plan_paragraph",
    "lever_lines",
    "MapComparison",
    "compare_maps",
    "map_paragraph",
]

#: the cache the step sees by default since the one step model
DEFAULT_POLICY = "lru"
#: the cache it saw before: a hot set pinned from the true routing probabilities
ORACLE_POLICY = "static"

INTRO = (
    "**What changed with the one step model.** The expert cache the step sees is now a simulated LRU in steady "
    "state on traces drawn from the routing model, not a hot set pinned from the true routing "
    "probabilities (an oracle: no engine knows them)."
)


def short_label(policy: str) -> str:
    """A policy's name inside a sentence: ``LRU`` (simulated) or ``pinned oracle``."""
    if policy not in CACHE_POLICIES:
        raise ValueError(f"cache policy must be one of {', '.join(CACHE_POLICIES)}, got {policy!r}")
    return _LABELS.get(policy, policy)


#: :func:`short_label` of the policies not named as they are spelled
_LABELS = {
    ORACLE_POLICY: "pinned oracle",
    "belady": "Belády (offline optimum)",
    "belady-insert": "Belády, caching every miss (offline)",
    "lfu-perfect": "perfect LFU",
    **{p: p.upper() for p in ("lru", "lfu", "arc")},
}


def _pct(x: float) -> str:
    """A hit rate in percent: one decimal below 10 %, none above (0 and 100 stay whole)."""
    v = 100.0 * float(x)
    return f"{v:.0f} %" if v <= 0.0 or v >= 10.0 else f"{v:.1f} %"


def _num(x: float) -> str:
    """Three significant figures, no exponent for the tok/s range the suite shows."""
    x = float(x)
    return "n/a" if not np.isfinite(x) else (f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}")


@dataclass(frozen=True)
class PolicyComparison(Result):
    """The same plan under two cache policies on one batch grid (``policy``: the new default,
    ``reference``: the pinned oracle). Feasible batches are those where both plans fit in RAM
    (feasibility does not depend on the policy)."""

    plans: Mapping[str, Plan]
    policy: str
    reference: str

    @property
    def batch(self) -> np.ndarray:
        return self.plans[self.policy].batch

    @property
    def fits(self) -> np.ndarray:
        return np.logical_and(self.plans[self.policy].fits_in_memory, self.plans[self.reference].fits_in_memory)

    def ratio(self) -> np.ndarray:
        """Net tok/s under ``policy`` over net tok/s under ``reference``, per batch."""
        return self.plans[self.policy].net_tok_s / self.plans[self.reference].net_tok_s

    def largest_gap(self) -> int | None:
        """Index of the feasible batch where net tok/s differs most (in log ratio; the smallest
        such B on a tie); None when no batch is feasible."""
        ok = np.flatnonzero(self.fits)
        return int(ok[int(np.argmax(np.abs(np.log(self.ratio()[ok]))))]) if ok.size else None

    def largest_feasible(self) -> int | None:
        """Index of the largest feasible batch; None when none is."""
        ok = np.flatnonzero(self.fits)
        return int(ok[-1]) if ok.size else None

    def points(self) -> list[int]:
        """The batches a paragraph reports: the largest gap and the largest feasible B (sorted)."""
        return sorted({i for i in (self.largest_gap(), self.largest_feasible()) if i is not None})

    def bound_changes(self) -> list[dict[str, Any]]:
        """Feasible batches whose binding term differs: ``{batch, <policy>: term, <reference>: term}``."""
        a, r = self.plans[self.policy].bound, self.plans[self.reference].bound
        return [
            {"batch": int(b), self.policy: a[i], self.reference: r[i]}
            for i, b in enumerate(self.batch)
            if self.fits[i] and a[i] != r[i]
        ]

    def at(self, i: int) -> dict[str, Any]:
        """Net tok/s, pooled hit rate, binding term and L2 multiple (against ``uncoalesced``) of
        each policy at batch index ``i``."""
        out: dict[str, Any] = {"batch": int(self.batch[i]), "fits": bool(self.fits[i])}
        for pol in (self.policy, self.reference):
            p = self.plans[pol]
            out[pol] = {
                "net_tok_s": float(p.net_tok_s[i]),
                "hit_rate": float(p.cache_hit_rate[i]),
                "bound": p.bound[i],
                "l2_vs_uncoalesced": float(p.baselines["uncoalesced"]["multiple"][i]),
            }
        return out


def compare_plans(plans: Mapping[str, Plan], policy: str = DEFAULT_POLICY, reference: str = ORACLE_POLICY):
    """A :class:`PolicyComparison` of plans already evaluated (keys: the two policies)."""
    for pol in (policy, reference):
        if pol not in plans:
            raise ValueError(f"no plan for cache policy {pol!r}")
        if plans[pol].cache_policy != pol:
            raise ValueError(f"the plan under key {pol!r} was evaluated with cache policy {plans[pol].cache_policy!r}")
    if not np.array_equal(plans[policy].batch, plans[reference].batch):
        raise ValueError("the two plans must share one batch grid")
    return PolicyComparison(dict(plans), policy, reference)


def compare_policies(
    model: MoEModel,
    hardware: Hardware,
    workload: Workload,
    routing: RoutingProbabilities,
    batch,
    *,
    policy: str | None = None,
    reference: str = ORACLE_POLICY,
) -> PolicyComparison:
    """The plan under ``policy`` (default: the workload's own) and under ``reference`` (default:
    the pinned oracle), everything else unchanged."""
    pol = workload.cache_policy if policy is None else policy
    plans = {
        p: plan(model, hardware, replace(workload, cache_policy=p), routing, batch)
        for p in dict.fromkeys((pol, reference))
    }
    return compare_plans(plans, pol, reference)


def point_sentence(c: PolicyComparison, i: int) -> str:
    """One batch point: net tok/s and hit rate under each policy, their ratio, and the binding
    term when it differs."""
    d = c.at(i)
    new, ref = d[c.policy], d[c.reference]
    text = (
        f"at B = {d['batch']}: net tok/s {_num(new['net_tok_s'])} ({short_label(c.policy)}, hit "
        f"{_pct(new['hit_rate'])}) against {_num(ref['net_tok_s'])} ({short_label(c.reference)}, hit "
        f"{_pct(ref['hit_rate'])}), {new['net_tok_s'] / ref['net_tok_s']:.2f}×"
    )
    if new["bound"] != ref["bound"]:
        text += f"; {new['bound']} binds instead of {ref['bound']}"
    return text


def plan_paragraph(c: PolicyComparison, *, cache_gib: float, lead: bool = True, l2: bool = True) -> str:
    """The Markdown paragraph for one plan: model, box, cache, then :meth:`PolicyComparison.points`,
    the binding terms and (``l2``) the L2 multiple against ``uncoalesced`` at the largest feasible
    B. ``lead`` prepends :data:`INTRO`."""
    p = c.plans[c.policy]
    head = f"On {p.model} on {p.hardware} with a {cache_gib:g} GiB expert cache ({p.routing} routing)"
    pts = c.points()
    if not pts:
        body = f"{head}, no batch of the grid fits in RAM, so there is nothing to compare."
        return f"{INTRO} {body}" if lead else body
    parts = [point_sentence(c, i) for i in pts]
    body = f"{head}: " + "; ".join(parts) + "."
    changes = c.bound_changes()
    if changes:
        n, b0, b1 = len(changes), changes[0]["batch"], changes[-1]["batch"]
        body += f" The binding term differs at {n} of {int(c.fits.sum())} feasible batch sizes (B = {b0}–{b1})."
    else:
        body += " The binding term is the same at every feasible batch size."
    d = c.at(pts[-1])
    if l2:
        body += (
            f" Coalescing (L2, against `uncoalesced`) at B = {d['batch']}: "
            f"{d[c.policy]['l2_vs_uncoalesced']:.2f}× with {short_label(c.policy)} against "
            f"{d[c.reference]['l2_vs_uncoalesced']:.2f}× with the {short_label(c.reference)}."
        )
    return f"{INTRO} {body}" if lead else body


def lever_lines(
    factors: Mapping[str, Any],
    i: int,
    *,
    policy: str = DEFAULT_POLICY,
    reference: str = ORACLE_POLICY,
    names: Mapping[str, str] | None = None,
    same: float = 0.005,
) -> str:
    """How each lever's factor moves at batch index ``i`` between two
    :class:`moeroof.models.levers.LeverFactors` (keys: the policies): ``L2 (against
    `uncoalesced`) 3.71× with LRU against 2.66× with the pinned oracle; …``. A factor that moves
    by less than ``same`` (relative) is reported once, "under both"."""
    new, ref = factors[policy], factors[reference]
    if not np.array_equal(new.batch, ref.batch):
        raise ValueError("the two lever factors must share one batch grid")
    names = dict(names or {"l2_coalescing": "L2", "l1_dense_amortization": "L1", "l3_prefix_decode": "L3 decode"})
    out = []
    for attr, short in names.items():
        a, r = float(getattr(new, attr)[i]), float(getattr(ref, attr)[i])
        if abs(a - r) <= same * abs(r):
            how = "under both"
        else:
            how = f"with {short_label(policy)} against {r:.2f}× with the {short_label(reference)}"
        out.append(f"{short} (against `{new.baselines[attr]}`) {a:.2f}× {how}")
    return f"at B = {int(new.batch[i])}: " + "; ".join(out)


@dataclass(frozen=True)
class MapComparison(Result):
    """Two regime maps of one grid under two cache policies (feasible cells: both fit)."""

    maps: Mapping[str, Any]
    policy: str
    reference: str

    @property
    def fits(self) -> np.ndarray:
        return self.maps[self.policy].fits_in_memory & self.maps[self.reference].fits_in_memory

    def best_cell(self, which: str) -> dict[str, Any] | None:
        """The feasible cell of the highest net tok/s under ``which`` (smallest cache, then
        smallest B on a tie): net tok/s, B, requested cache bytes, binding term."""
        r = self.maps[which]
        if not self.fits.any():
            return None
        net = np.where(self.fits, r.net_tok_s, -np.inf)
        i, j = np.unravel_index(int(np.argmax(net)), net.shape)
        return {"net_tok_s": float(net[i, j]), "batch": int(r.batch[j]), "cache_bytes": float(r.cache_bytes[i]),
                "bound": str(r.bound[i, j])}  # fmt: skip

    def bound_counts(self, which: str) -> dict[str, int]:
        """Feasible cells per binding term under ``which`` (in :data:`moeroof.models.plan.TERMS` order)."""
        b = self.maps[which].bound[self.fits]
        return {t: int((b == t).sum()) for t in TERMS if (b == t).any()}

    def changed_share(self) -> float:
        """Share of feasible cells whose binding term differs between the policies."""
        ok = self.fits
        return (
            float(np.mean(self.maps[self.policy].bound[ok] != self.maps[self.reference].bound[ok])) if ok.any() else 0.0
        )

    def ratio_range(self) -> tuple[float, float]:
        """Smallest and largest net tok/s ratio (policy / reference) over feasible cells."""
        ok = self.fits
        if not ok.any():
            return (float("nan"), float("nan"))
        x = self.maps[self.policy].net_tok_s[ok] / self.maps[self.reference].net_tok_s[ok]
        return float(x.min()), float(x.max())

    def transitions_at(self, which: str, row: int = -1) -> str:
        """Where the binding term changes along B at one cache row (default the largest cache)."""
        t = self.maps[which].transitions[row]
        return ", then ".join(f"{x['from']}→{x['to']} at B = {x['batch']}" for x in t) or "none"


def compare_maps(
    maps: Mapping[str, Any], policy: str = DEFAULT_POLICY, reference: str = ORACLE_POLICY
) -> MapComparison:
    """A :class:`MapComparison` of two :class:`moeroof.studies.regime_map.RegimeMap` on one grid."""
    for pol in (policy, reference):
        if pol not in maps:
            raise ValueError(f"no regime map for cache policy {pol!r}")
    a, r = maps[policy], maps[reference]
    if not (np.array_equal(a.batch, r.batch) and np.array_equal(a.cache_bytes, r.cache_bytes)):
        raise ValueError("the two regime maps must share one (cache, batch) grid")
    return MapComparison(dict(maps), policy, reference)


def map_paragraph(c: MapComparison, *, box: str, gib: float = 2.0**30) -> str:
    """One box's sentence: best feasible cell under each policy, binding terms per policy, the
    share of cells whose bound changed, B* at the largest cache, and the ratio range."""
    best = {w: c.best_cell(w) for w in (c.policy, c.reference)}
    if best[c.policy] is None:
        return f"On {box} no cell of the grid fits in RAM."
    cells = int(c.fits.sum())

    def cell(w):
        b = best[w]
        return (
            f"{_num(b['net_tok_s'])} tok/s at B = {b['batch']}, {b['cache_bytes'] / gib:.1f} GiB requested "
            f"({b['bound']} binds)"
        )

    def counts(w):
        return ", ".join(f"{t} {n}" for t, n in c.bound_counts(w).items())

    lo, hi = c.ratio_range()
    big = c.maps[c.policy].cache_bytes[-1] / gib
    return (
        f"On {box}: best feasible cell {cell(c.policy)} with {short_label(c.policy)} against "
        f"{cell(c.reference)} with the {short_label(c.reference)}; of {cells} feasible cells the "
        f"binding term changes in {c.changed_share():.0%} (cells per term: {counts(c.policy)} with "
        f"{short_label(c.policy)}, {counts(c.reference)} pinned); at the largest cache "
        f"({big:.1f} GiB) B* is {c.transitions_at(c.policy)} with {short_label(c.policy)} against "
        f"{c.transitions_at(c.reference)} pinned; net tok/s is {lo:.2f}–{hi:.2f}× the oracle's."
    )
