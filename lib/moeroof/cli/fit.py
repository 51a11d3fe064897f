"""``moeroof fit``: Zipf / Dirichlet / uniform routing-skew models fitted to a histogram by
maximum likelihood, compared by AIC, with a goodness-of-fit p-value.

::

    moeroof fit HISTOGRAM|TRACE [--bootstrap 100] [--gof-sims 99] [--seed 0]
                [--format table|json|csv] [--output FILE]

A trace is fitted through its histogram (its live tokens counted per (layer, expert), as
``moeroof histogram`` writes it). A progress line on stderr when stderr is a terminal.
``--format csv``: one row per (layer, model) — the pooled fit first (layer ``pooled``), then
each layer by its id — with the estimate, its bootstrap interval, logL, AIC and the GoF p-value.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from moeroof.cli.flags import REPLICATES, add_default, add_seed, check_replicate_memory
from moeroof.cli.inputs import add_meta_arguments, load_input
from moeroof.cli.output import Progress, add_output_arguments, fmt, jsonable, print_notes, runner, table
from moeroof.data.io import Histogram, InputError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "fit",
        help="fit Zipf / Dirichlet skew models to a histogram (MLE, AIC, goodness of fit)",
        description="Fit routing-skew models to a per-layer histogram by maximum likelihood.",
    )
    p.add_argument(
        "path",
        metavar="HISTOGRAM|TRACE",
        help="histogram .csv with its sidecar .json, or a trace .npz/.npy (fitted through its histogram)",
    )
    add_default(p, "--bootstrap", "100", "bootstrap replicates for parameter CIs", type=REPLICATES)
    add_default(p, "--gof-sims", "99", "simulations for the goodness-of-fit p-value", type=REPLICATES)
    add_seed(p, "numpy.random.default_rng")
    add_meta_arguments(p)
    add_output_arguments(p)


def fit_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``fit`` JSON object for parsed arguments."""
    bootstrap, gof_sims, seed = args.bootstrap, args.gof_sims, args.seed
    data = load_input(args.path, args)
    from moeroof.fit.skew import check_fit_experts, fit_histogram  # lazily: the union command works without it

    # the file's E first, before the trace is counted and before the replicates are sized from
    # it: a 16 KB trace may declare 2^20 experts, and where memory is short the replicate check
    # blamed --bootstrap (a flag the user did not give) for the file's E
    try:
        check_fit_experts(data.experts)
    except ValueError as err:
        raise InputError(data.path, "-", "experts", str(err)) from None
    # each replicate or simulation draws a (layers × experts) histogram, with temporaries
    per = 4 * len(data.layer_ids) * data.experts
    check_replicate_memory("--bootstrap", bootstrap, per, "layers × experts × 4")
    check_replicate_memory("--gof-sims", gof_sims, per, "layers × experts × 4")

    notes = []
    if isinstance(data, Histogram):
        counts, layers_summed = data.counts, data.layers_summed
    else:
        from moeroof.models.routing import histogram_from_trace

        # the trace as read (a memory-mapped one is counted a checked block at a time)
        counts, layers_summed = histogram_from_trace(data.topk, data.experts), False
        n = counts.shape[0]
        notes.append(
            f"fitted to the trace's histogram: its live tokens counted per (layer, expert) over "
            f"{n} layer{'s' if n != 1 else ''}, as `moeroof histogram` writes it"
        )
    with Progress("fit") as progress:
        rng = np.random.default_rng(seed)
        result = fit_histogram(counts, data.top_k, rng=rng, bootstrap=bootstrap, gof_sims=gof_sims, progress=progress)
    rep = jsonable(result.to_dict())  # HistogramFit's keys, then what the input says of itself
    rep.update(source=str(data.path), provenance=data.meta.get("provenance"), layers_summed=layers_summed)
    rep["layer_ids"] = [int(x) for x in data.layer_ids] if not layers_summed else ["all (summed)"]
    floor = 1.0 / (gof_sims + 1) if gof_sims else None
    rep.update(bootstrap=bootstrap, gof_sims=gof_sims, gof_pvalue_floor=floor)
    pvalues = {m: f.get("gof_pvalue") for m, f in rep["models"].items()}
    at_floor = [m for m, p in pvalues.items() if floor is not None and p is not None and p <= floor + 1e-12]
    if at_floor:
        notes.append(
            f"GoF p-value of {', '.join(at_floor)} is the floor 1/(sims+1) = {floor:.3g} with {gof_sims} simulations: "
            f"no simulated histogram was as far from the model as the data (p ≤ {floor:.3g}; more --gof-sims resolve it)"
        )
    if bootstrap and "zipf" in rep["models"]:
        z = rep["models"]["zipf"]
        notes.append(
            f"Zipf s = {z['params']['s']:.4f} is bias-corrected (the ML fit of sorted counts gives "
            f"{z['ml_params']['s']:.4f}: noise looks like skew); its {bootstrap}-replicate 95 % interval is "
            f"[{z['ci']['s'][0]:.4f}, {z['ci']['s'][1]:.4f}]"
        )
    rep["notes"] = notes
    return rep


def _fmt_params(params: dict[str, float] | None) -> str:
    """A fit's parameters (a dict, :meth:`moeroof.fit.skew.ModelFit.to_dict`), ``-`` for none."""
    return ", ".join(f"{k}={fmt(v, 4)}" for k, v in (params or {}).items()) or "-"


def _fmt_ci(ci: Any) -> str:
    if not isinstance(ci, dict) or not ci:
        return "-"
    return ", ".join(f"[{fmt(v[0], 4)}, {fmt(v[1], 4)}]" for v in ci.values())


def print_fit(rep: dict[str, Any]) -> None:
    print(f"routing-skew fit — {rep.get('source')}")
    print(
        f"experts E={rep.get('experts')}  top_k K={rep.get('top_k')}  layers={rep.get('layers')}  "
        f"provenance: {rep.get('provenance') or 'unknown'}"
    )
    chosen = rep.get("chosen")
    rows = [
        [("* " if name == chosen else "  ") + str(name), _fmt_params(m.get("params")), _fmt_ci(m.get("ci"))]
        + [fmt(m.get("log_likelihood"), 1), fmt(m.get("aic"), 1), fmt(m.get("gof_pvalue"), 3)]
        for name, m in (rep.get("models") or {}).items()
    ]
    print(table(["model", "params", "95% CI", "logL", "AIC", "GoF p"], rows, "<<<>>>"))
    print(f"* chosen: {chosen} (lowest AIC)" if chosen else "no model chosen")
    print_notes(rep.get("notes", []))
    if rep.get("layers_summed"):
        print("note: histogram summed over layers: per-layer skew averages out, so the fit understates it")


#: ``--format csv``: one row per (layer, model)
CSV_COLUMNS: tuple[str, ...] = ("layer", "model", "chosen", "parameter", "estimate", "ci_low", "ci_high", "ml_estimate")
CSV_COLUMNS += ("log_likelihood", "aic", "gof_statistic", "gof_pvalue", "gof_pvalue_floor")


def _csv_rows(layer: Any, fits: dict[str, Any], chosen: str | None, floor: Any) -> list[list[Any]]:
    rows = []
    for name, m in fits.items():
        params = m.get("params") or {}
        key = next(iter(params), None)
        ci = ((m.get("ci") or {}).get(key) if key is not None else None) or (None, None)
        estimate = None if key is None else params[key]
        ml = None if key is None else (m.get("ml_params") or {}).get(key)
        rows.append([layer, name, name == chosen, key, estimate, *ci, ml])
        rows[-1] += [m.get(c) for c in ("log_likelihood", "aic", "gof_statistic", "gof_pvalue")] + [floor]
    return rows


def _lowest_aic(fits: dict[str, Any]) -> str | None:
    scored = [(m["aic"], name) for name, m in fits.items() if m.get("aic") is not None]
    return min(scored)[1] if scored else None


def fit_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: the pooled fit (layer ``pooled``, chosen = the report's choice), then
    each layer (chosen = that layer's lowest AIC); one row per model, its one parameter (s for
    Zipf, alpha for Dirichlet, none for uniform) with the bootstrap interval."""
    floor = rep.get("gof_pvalue_floor")
    rows = _csv_rows("pooled", rep.get("models") or {}, rep.get("chosen"), floor)
    ids = rep.get("layer_ids") or []
    for i, fits in enumerate(rep.get("per_layer") or []):
        layer = ids[i] if i < len(ids) else i
        rows += _csv_rows(layer, fits, _lowest_aic(fits), floor)
    return list(CSV_COLUMNS), rows


run = runner(fit_report, print_fit, fit_csv)
