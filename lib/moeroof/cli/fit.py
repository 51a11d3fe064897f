"""``moeroof fit``: Zipf / Dirichlet / uniform routing-skew models fitted to a histogram by
maximum likelihood, compared by AIC, with a goodness-of-fit p-value.

::

    moeroof fit HISTOGRAM [--bootstrap 100] [--gof-sims 99] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from moeroof.cli.common import emit, fmt, input_path, jsonable, non_negative_int, table
from moeroof.data.io import InputError, load_any, read_histogram


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "fit",
        help="fit Zipf / Dirichlet skew models to a histogram (MLE, AIC, goodness of fit)",
        description="Fit routing-skew models to a per-layer histogram by maximum likelihood.",
    )
    p.add_argument("path", metavar="HISTOGRAM", help="histogram .csv with its sidecar .json")
    p.add_argument("--bootstrap", default="100", help="bootstrap replicates for parameter CIs (default 100)")
    p.add_argument("--gof-sims", default="99", help="simulations for the goodness-of-fit p-value (default 99)")
    p.add_argument("--seed", default="0", help="seed of numpy.random.default_rng (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)


def fit_report(args: argparse.Namespace) -> dict[str, Any]:
    """The ``fit`` JSON object for parsed arguments."""
    bootstrap = non_negative_int(args.bootstrap, "--bootstrap")
    gof_sims = non_negative_int(args.gof_sims, "--gof-sims")
    seed = non_negative_int(args.seed, "--seed")
    path = input_path(args.path)
    if path.suffix.lower() != ".csv":
        data = load_any(path)  # a bad / missing file reports its own error first
        raise InputError(path, "-", "file", f"fit needs a histogram .csv, got a {type(data).__name__.lower()}")
    hist = read_histogram(path)
    from moeroof.models.fit import fit_histogram  # lazily: the union command works without it

    result = fit_histogram(
        hist.counts, hist.top_k, rng=np.random.default_rng(seed), bootstrap=bootstrap, gof_sims=gof_sims
    )
    rep = jsonable(dict(result.to_dict()))
    rep.setdefault("source", str(hist.path))
    rep.setdefault("provenance", hist.meta.get("provenance"))
    rep.setdefault("layers_summed", hist.layers_summed)
    return rep


def _fmt_params(params: Any) -> str:
    if isinstance(params, dict):
        return ", ".join(f"{k}={fmt(v, 3)}" for k, v in params.items()) or "-"
    if isinstance(params, (list, tuple)):
        return ", ".join(fmt(v, 3) for v in params) or "-"
    return fmt(params, 3)


def print_fit(rep: dict[str, Any]) -> None:
    print(f"routing-skew fit — {rep.get('source')}")
    print(
        f"experts E={rep.get('experts')}  top_k K={rep.get('top_k')}  layers={rep.get('layers')}  "
        f"provenance: {rep.get('provenance') or 'unknown'}"
    )
    chosen = rep.get("chosen")
    rows = []
    for name, m in (rep.get("models") or {}).items():
        rows.append(
            [
                ("* " if name == chosen else "  ") + str(name),
                _fmt_params(m.get("params")),
                fmt(m.get("log_likelihood"), 1),
                fmt(m.get("aic"), 1),
                fmt(m.get("gof_pvalue"), 3),
            ]
        )
    print(table(["model", "params", "logL", "AIC", "GoF p"], rows, "<<>>>"))
    print(f"* chosen: {chosen} (lowest AIC)" if chosen else "no model chosen")
    if rep.get("layers_summed"):
        print("note: histogram summed over layers: per-layer skew averages out (SPEC §3)")


def run(args: argparse.Namespace) -> int:
    rep = fit_report(args)
    return emit(rep, args.json, print_fit)
