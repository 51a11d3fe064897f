"""A prior for routing skew, fitted on public routing of fine-grained MoE models.

A zero-fit answer needs each layer's expert popularity, and no row of a user's box tells it.
Held at uniform it is a silent zero skew (DeepSeek-V3's hottest expert takes 2.36 % of a
layer's picks, uniform 0.39 %); held at one Zipf exponent it is a guess (``zipf:0.8`` gives
7.0 %). This module fits the popularity's concentration on what public routing the suite can
read and pools it into a distribution, so that a zero-fit answer starts from what real routing
does and its spread widens the band.

**The family.** Each layer's popularity ``w ~ Dirichlet(α·1)`` over its E experts, drawn
afresh per layer (which experts are hot differs from layer to layer); a token's K experts are
its top-K of ``w`` (Plackett–Luce inclusion, :func:`moeroof.models.routing.inclusion_probabilities`).
The popularity's coefficient of variation is about ``1/√α`` whatever E, so α transfers between
models of different E: α → ∞ is uniform.

**Units** (:data:`QWEN3_WORKLOADS`, :data:`DEEPSEEK`): a model on a workload, measured over many
requests (a popularity, not one stream's hot set, which the locality prior carries):

- Qwen3-30B-A3B (128 experts, top-8) on four prompt sets (ARC, COPA, GSM8K, MMLU) in two languages: prefill frequencies
  per layer (``qwen3-30b-a3b-expert-freq-en-he`` under ``../shared/data/external``, read in
  place); α is the pooled Dirichlet-multinomial fit (:func:`moeroof.fit.skew.fit_histogram`)
  at the token counts the capture's meta estimates;
- DeepSeek-V3/R1 (256 experts, top-8) on GPQA: the hottest expert's median share of a layer's
  picks, 2.36 % (johanna-rock/moe-balance, docs/sources.md); α is where the family's median
  hottest share equals it (:func:`alpha_from_hottest_share`).

Left out, and said so (:data:`LEFT_OUT`): models of fewer than :data:`FINE_GRAINED_EXPERTS`
experts (Mixtral 8x7B, α ≈ 18; Qwen1.5-MoE, α ≈ 20: trained with a load-balancing loss that
flattens them, unlike the fine-grained models this suite is for) — they get a coarse prior of
their own, the geometric mean of their α (:func:`coarse_units`), used for a model of fewer
experts — and GLM-5's per-layer
histogram in ``data/histograms`` (synthetic: seed 003 published only the layer-summed one, of
a single 128-token generation, whose skew is one stream's).

**The prior** (:func:`pool`): log α of a new model on a new workload is the mean of the models'
mean log α plus a between-model and a within-model (workload) deviation; the within-model
variance is pooled over models with two or more workloads, the between-model one is the model
means' variance less what the workloads' scatter explains (0 where one model is left). The 5–95 %
range is a Student t with (units − models) degrees of freedom. With two models the between-model
spread rests on one contrast: a third public model would move it most.

**Leave one model out** (:func:`study`): each model's units are predicted by the prior of the
others — whether its α lies inside the 5–95 % range, and for DeepSeek-V3 its hottest share.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats
from scipy.optimize import brentq

from moeroof.core.paths import EXTERNAL_DIR
from moeroof.core.results import Result

# FINE_GRAINED_EXPERTS: the fewest experts the fine-grained prior takes
from moeroof.data.skew_prior import FINE_GRAINED_EXPERTS, committed_skew_prior
from moeroof.fit.routing import RoutingKnobs, layer_popularity
from moeroof.fit.skew import fit_histogram
from moeroof.models.routing import inclusion_probabilities
from moeroof.studies import locality_prior as lp

__all__ = [
    "QWEN3_DIR",
    "QWEN3_WORKLOADS",
    "DEEPSEEK",
    "LEFT_OUT",
    "SkewUnit",
    "SkewPrior",
    "SkewStudy",
    "top_share",
    "hottest_share",
    "alpha_from_hottest_share",
    "qwen3_units",
    "deepseek_unit",
    "pool",
    "study",
    "summary_record",
]


QWEN3_DIR = "qwen3-30b-a3b-expert-freq-en-he"
#: (file stem, language) of the Qwen3 capture's prefill frequencies: the four prompt sets whose
#: token counts its meta estimates (nli and ted have none)
QWEN3_WORKLOADS = tuple(
    (stem, lang)
    for stem in (
        "arc_en_he_500_20250921_090254",
        "copa_en_he_500_20250921_125427",
        "gsm_en_he_500_20250921_115824",
        "mmlu_en_he_500_20250921_123201",
    )
    for lang in ("English", "Hebrew")
)
#: DeepSeek-V3/R1 on GPQA: the hottest expert's share of a layer's picks (min, median, max over layers)
DEEPSEEK: dict[str, Any] = {
    "model": "deepseek-v3",
    "workload": "GPQA",
    "experts": 256,
    "top_k": 8,
    "hottest_share": (0.0125, 0.0236, 0.0519),
    "provenance": "johanna-rock/moe-balance, GPQA, published per-layer shares (docs/sources.md)",
}
#: public routing the prior does not take, and why
LEFT_OUT = {
    "mixtral": "Mixtral 8x7B (8 experts): a coarse MoE with a load-balancing loss, near uniform (the coarse prior)",
    "qwen15": "Qwen1.5-MoE (60 experts): a load-balancing loss, near uniform (the coarse prior)",
    "glm5-seed003": "GLM-5's per-layer histogram in data/histograms is synthetic; seed 003 published only the "
    "layer-summed one, of a single 128-token generation (one stream's hot set, which the locality prior carries)",
}
#: the popularity draws behind a hottest share (layers, at a fixed seed)
HOTTEST_DRAWS = 101


@dataclass(frozen=True)
class SkewUnit(Result):
    """One model on one workload: its Dirichlet α and how it was found."""

    model: str
    workload: str
    experts: int
    top_k: int
    alpha: float
    how: str
    provenance: str


def top_share(alpha: float, experts: int, top_k: int, top: int = 1, q: float | Sequence[float] = 0.5) -> np.ndarray:
    """Quantiles over layers of the ``top`` hottest experts' share of a layer's picks (the
    largest ``top`` of ``π_i / K``, summed), with ``w ~ Dirichlet(α·1)`` per layer
    (:func:`moeroof.fit.routing.layer_popularity`, :data:`HOTTEST_DRAWS` layers at seed 0)
    and π its top-K inclusion probabilities."""

    w = layer_popularity(RoutingKnobs(family="dirichlet", skew=float(alpha)), int(experts), HOTTEST_DRAWS, 0)
    pi = inclusion_probabilities(np.log(np.maximum(w, 1e-300)), int(top_k), log=True)
    shares = -np.sort(-pi, axis=1)[:, : int(top)].sum(axis=1) / top_k
    return np.quantile(shares, q)


def hottest_share(alpha: float, experts: int, top_k: int, q: float | Sequence[float] = 0.5) -> np.ndarray:
    """:func:`top_share` of the hottest expert alone."""
    return top_share(alpha, experts, top_k, 1, q)


def alpha_from_hottest_share(share: float, experts: int, top_k: int) -> float:
    """The α whose median hottest share (:func:`hottest_share`) is ``share``, by Brent's method on
    log α (the share falls as α grows; the draws' uniforms are fixed, so it is monotone)."""

    def gap(log_alpha: float) -> float:
        return float(hottest_share(math.exp(log_alpha), experts, top_k)) - share

    return math.exp(brentq(gap, math.log(0.02), math.log(1e3), xtol=1e-4))


def dirichlet_alpha(counts: np.ndarray, top_k: int) -> float:
    """The pooled Dirichlet-multinomial α of per-layer incidence counts (L, E)
    (:func:`moeroof.fit.skew.fit_histogram`, the ``dirichlet`` model alone)."""
    fit = fit_histogram(counts, top_k, rng=np.random.default_rng(0), bootstrap=0, gof_sims=0, models=("dirichlet",))
    return float(fit.pooled["dirichlet"].params["alpha"])


def qwen3_units(external_dir: str | Path | None = None) -> list[SkewUnit]:
    """Qwen3-30B-A3B's units (:data:`QWEN3_WORKLOADS`); ``FileNotFoundError`` without the capture."""

    root = Path(external_dir or EXTERNAL_DIR) / QWEN3_DIR
    meta_path = root / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{root}: the Qwen3 capture is absent (the external data folder is not in this clone)")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    units = []
    for stem, lang in QWEN3_WORKLOADS:
        dataset = stem.split("_", 1)[0]
        tokens, e, k = int(meta["tokens_per_layer_estimate"][dataset][lang]), int(meta["experts"]), int(meta["top_k"])
        counts = lp.language_counts(root / f"{stem}_avg_activation.csv", lang, k, tokens)
        how = f"Dirichlet-multinomial fit, pooled over {counts.shape[0]} layers, at ~{tokens} prompt tokens"
        src = f"{QWEN3_DIR} (../shared/data/external), prefill frequencies"
        units.append(SkewUnit("qwen3-30b-a3b", f"{dataset} {lang}", e, k, dirichlet_alpha(counts, k), how, src))
    return units


def coarse_units(external_dir: str | Path | None = None) -> list[SkewUnit]:
    """The coarse models' units (fewer than :data:`FINE_GRAINED_EXPERTS` experts: Mixtral 8x7B,
    Qwen1.5-MoE's first layer), from the locality prior's captures' own histograms; a capture that
    is absent is left out."""
    units = []
    for name in ("mixtral", "qwen15"):
        try:
            rows = lp.source_rows(name, external_dir)
        except FileNotFoundError:
            continue
        alpha = dirichlet_alpha(np.asarray(rows.counts), rows.top_k)
        how = f"Dirichlet-multinomial fit, pooled over {rows.layers} layer(s)"
        units.append(
            SkewUnit(name, "decode capture", rows.experts, rows.top_k, alpha, how, lp.SOURCES[name]["provenance"])
        )
    return units


def deepseek_unit() -> SkewUnit:
    """DeepSeek-V3's unit: α at its published median hottest share."""
    d = DEEPSEEK
    share = d["hottest_share"][1]
    alpha = alpha_from_hottest_share(share, d["experts"], d["top_k"])
    how = f"median hottest share {100 * share:.3g} % of a layer's picks"
    return SkewUnit(d["model"], d["workload"], d["experts"], d["top_k"], alpha, how, d["provenance"])


@dataclass(frozen=True)
class SkewPrior(Result):
    """log α ~ centre + scale·t(dof): its median ``alpha``, its 5 and 95 % quantiles, the
    between- and within-model standard deviations of log α, the models and units it pools."""

    alpha: float
    alpha_low: float
    alpha_high: float
    log_alpha_between_sd: float
    log_alpha_within_sd: float
    scale: float
    dof: int
    models: tuple[str, ...]
    units: int
    provenance: str

    def quantile(self, q: float | Sequence[float]) -> np.ndarray:
        return np.exp(math.log(self.alpha) + self.scale * stats.t.ppf(np.asarray(q, dtype=float), self.dof))

    def inside(self, alpha: float) -> bool:
        return bool(self.alpha_low <= alpha <= self.alpha_high)


def pool(units: Sequence[SkewUnit]) -> SkewPrior:
    """The random-effects pool of the units' log α (module docstring)."""
    by_model: dict[str, list[float]] = {}
    for u in units:
        by_model.setdefault(u.model, []).append(math.log(u.alpha))
    if not by_model:
        raise ValueError("no units to pool")
    means = np.array([np.mean(v) for v in by_model.values()])
    sizes = np.array([len(v) for v in by_model.values()])
    resid = [x - np.mean(v) for v in by_model.values() for x in v]
    within_dof = int(sum(n - 1 for n in sizes))
    within_var = float(np.sum(np.square(resid)) / within_dof) if within_dof > 0 else 0.0
    between_var = 0.0
    if means.size >= 2:
        between_var = max(float(np.var(means, ddof=1)) - within_var * float(np.mean(1.0 / sizes)), 0.0)
    n_units = int(sizes.sum())
    dof = max(n_units - means.size, 1)
    # a new model's mean is uncertain too: the centre's variance, between/m + within/(m·n̄)
    centre_var = (between_var + within_var * float(np.mean(1.0 / sizes))) / means.size
    scale = math.sqrt(between_var + within_var + centre_var)
    centre = float(np.mean(means))
    tq = stats.t.ppf([0.05, 0.95], dof)
    provenance = "; ".join(dict.fromkeys(u.provenance for u in units))
    # the median α and its 5 and 95 % quantiles; the between- and within-model sd of log α
    alphas = (math.exp(centre), math.exp(centre + scale * tq[0]), math.exp(centre + scale * tq[1]))
    sds = (math.sqrt(between_var), math.sqrt(within_var))
    return SkewPrior(*alphas, *sds, scale, dof, tuple(by_model), n_units, provenance)


@dataclass(frozen=True)
class SkewStudy(Result):
    """The units, the prior over all of them, and each model predicted by the others' prior
    (``held_out``: model → its prior, the units' α inside it, the hottest share where published)."""

    units: tuple[SkewUnit, ...]
    prior: SkewPrior
    held_out: dict[str, dict[str, Any]]
    skipped: dict[str, str]
    #: models of fewer than FINE_GRAINED_EXPERTS experts: their own, flatter skew
    coarse: tuple[SkewUnit, ...] = ()


def study(external_dir: str | Path | None = None) -> SkewStudy:
    """Units, prior and leave-one-model-out (module docstring); a source whose files are absent
    is skipped and said so."""
    units: list[SkewUnit] = []
    skipped: dict[str, str] = {}
    try:
        units += qwen3_units(external_dir)
    except FileNotFoundError as err:
        skipped["qwen3-30b-a3b"] = str(err)
    units.append(deepseek_unit())
    coarse = [u for u in coarse_units(external_dir) if u.experts < FINE_GRAINED_EXPERTS]
    if not coarse:
        skipped["coarse"] = "the Mixtral and Qwen1.5 captures are absent"
    units = [u for u in units if u.experts >= FINE_GRAINED_EXPERTS]
    prior = pool(units)
    held: dict[str, dict[str, Any]] = {}
    for model in prior.models:
        rest = [u for u in units if u.model != model]
        if not rest:
            continue
        p = pool(rest)
        mine = [u for u in units if u.model == model]
        # one unit left has no spread to estimate: its point alone, said so (no borrowed scale)
        spread = p.scale > 0.0
        row: dict[str, Any] = {
            "prior_alpha": p.alpha,
            "prior_range": [p.alpha_low, p.alpha_high] if spread else None,
            "alpha": [u.alpha for u in mine],
            "inside": sum(p.inside(u.alpha) for u in mine) if spread else None,
            "units": len(mine),
            "from": f"{p.units} unit(s) of {', '.join(p.models)}"
            + ("" if spread else ": one unit has no spread, the point alone"),
        }
        if model == DEEPSEEK["model"]:
            lo, mid, hi = hottest_share(p.alpha, DEEPSEEK["experts"], DEEPSEEK["top_k"], (0.05, 0.5, 0.95))
            row["hottest_share_predicted"] = float(mid)
            row["hottest_share_layers_5_95"] = [float(lo), float(hi)]
            row["hottest_share_measured"] = DEEPSEEK["hottest_share"][1]
            if spread:
                ends = [
                    float(hottest_share(a, DEEPSEEK["experts"], DEEPSEEK["top_k"])) for a in (p.alpha_high, p.alpha_low)
                ]
                row["hottest_share_prior_range"] = ends
        held[model] = row
    return SkewStudy(tuple(units), prior, held, skipped, tuple(coarse))


def summary_record(st: SkewStudy) -> dict[str, Any]:
    """What ``data/fits/skew-prior.json`` holds (:mod:`moeroof.data.skew_prior`): the prior, each
    unit's α, the held-out models and what was left out — summary figures only."""
    p = st.prior
    return {
        "what": "skew prior: the Dirichlet concentration alpha of a layer's expert popularity, "
        "w ~ Dirichlet(alpha), of fine-grained MoE routing (moeroof.studies.skew_prior)",
        "alpha": p.alpha,
        "quantiles": {"q": [0.05, 0.5, 0.95], "alpha": [p.alpha_low, p.alpha, p.alpha_high]},
        "scale": {
            "log_alpha": p.scale,
            "between_models": p.log_alpha_between_sd,
            "within_model": p.log_alpha_within_sd,
            "dof": p.dof,
        },
        "sources": list(p.models),
        "units": [u.to_dict() for u in st.units],
        "provenance": p.provenance,
        "held_out": st.held_out,
        "coarse": {
            "what": f"models of fewer than {FINE_GRAINED_EXPERTS} experts (trained with a load-balancing loss): "
            "their geometric mean alpha, the range their own",
            "alpha": float(np.exp(np.mean([math.log(u.alpha) for u in st.coarse]))) if st.coarse else None,
            "range": [min(u.alpha for u in st.coarse), max(u.alpha for u in st.coarse)] if st.coarse else None,
            "sources": [u.model for u in st.coarse],
            "units": [u.to_dict() for u in st.coarse],
        },
        "left_out": dict(LEFT_OUT),
        "skipped": dict(st.skipped),
    }


#: the locality prior's sources (:data:`moeroof.studies.locality_prior.SOURCES`) as this prior names their models
LOCALITY_SOURCE_MODELS = {"mixtral": "mixtral", "qwen15": "qwen15", "qwen3-moe-trace": "qwen3-30b-a3b"}


def held_out_alpha(model: str) -> tuple[float, str] | None:
    """The skew prior's α for ``model`` from units of other models only, as the committed file
    holds them: a fine-grained model's held-out record (the prior of the others), a coarse one's
    the geometric mean of the other coarse units; with where it came from. None: no other unit."""
    prior = committed_skew_prior()
    record = prior.held_out.get(model)
    if record is not None:
        return float(record["prior_alpha"]), str(record.get("from", "the other models"))
    doc = json.loads(prior.path.read_text(encoding="utf-8"))
    others = [u for u in (doc.get("coarse") or {}).get("units", []) if u["model"] != model]
    if model not in [u["model"] for u in (doc.get("coarse") or {}).get("units", [])] or not others:
        return None
    alpha = float(np.exp(np.mean([math.log(u["alpha"]) for u in others])))
    return alpha, f"the coarse unit(s) of {', '.join(u['model'] for u in others)}"


def zero_fit_rows(st, external_dir: str | Path | None = None) -> list[tuple[Any, str]]:
    """Each locality source's rows predicted from nothing of its model: one stream's locality
    from the locality prior of the *other* pooled sources (``st``, a
    :class:`moeroof.studies.locality_prior.LocalityStudy`, at its settings) and each layer's
    popularity from the skew prior without the model (:func:`held_out_alpha`) instead of the
    source's own histogram — what a zero-fit ``plan`` starts from. Returns (row, what it was
    predicted from) pairs; a source with no other unit of either prior is left out."""

    sim = lp.Sim(**{k: v for k, v in st.settings.items() if k in ("seeds", "timed_steps", "max_sim_layers")})
    out = []
    for fit in st.fits:
        others = [f for f in st.fits if f.name in st.in_prior and f.name != fit.name]
        alpha = held_out_alpha(LOCALITY_SOURCE_MODELS.get(fit.name, fit.name))
        if not others or alpha is None:
            continue
        rows = lp.source_rows(fit.name, external_dir)
        base = RoutingKnobs(family="dirichlet", skew=alpha[0])
        what = (
            f"nothing of the model: the locality prior of {', '.join(f.name for f in others)}; popularity from the "
            f"skew prior of {alpha[1]} (Dirichlet α = {alpha[0]:.2g})"
        )
        out += [(r, what) for r in lp.predict_rows(lp.pool(others), rows, base, sim=sim)]
    return out
