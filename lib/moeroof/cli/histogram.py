"""``moeroof histogram``: a trace's expert firing counts per (layer, expert), written as the
suite's histogram (CSV + JSON sidecar) for ``union``, ``fit``, ``split`` and ``plan --routing``.

::

    moeroof histogram TRACE -o OUT.csv [--force] [--format table|json|csv] [--report-output FILE]

Counts every live slot (``-1`` padding skipped); ``tokens`` is per layer (the (step, stream)
pairs with a live token in that layer), so a layer that saw fewer tokens is not diluted. The
sidecar carries the trace's model (a trace without one — an import not given ``--model`` —
gives the importer's wording, "unknown (not given at import)"), top-K, layer ids and provenance
(a histogram of a witnessed trace is witnessed) and names the trace it was made from. The trace
is only read. ``--format csv`` prints one row per layer.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.cli.flags import UsageError
from moeroof.cli.inputs import add_meta_arguments, read_trace_arg
from moeroof.cli.output import add_output_arguments, new_output, refuse_overwriting, runner, writing_new

#: the model a histogram's sidecar names when the trace's meta has none and it was not imported
#: (an import without --model gives moeroof.data.importers.UNKNOWN_MODEL)
UNKNOWN_MODEL_NOT_IMPORTED = "unknown (not in the trace's meta)"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "histogram",
        help="count a trace's expert selections per (layer, expert) into a histogram .csv",
        description=(
            "Turn a trace (.npz/.npy) into the suite's histogram: counts per (layer, expert) over every "
            "live token, tokens per layer, and a sidecar naming the trace and keeping its provenance."
        ),
    )
    p.add_argument("path", metavar="TRACE", help="trace .npz / .npy")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="histogram to write (.csv; its .json sidecar beside it); the printed report goes to --report-output",
    )
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    add_meta_arguments(p)
    add_output_arguments(p, output=False)


def histogram_report(args: argparse.Namespace) -> dict[str, Any]:
    """Write the histogram of ``args.path`` to ``args.output``; the report as a dict."""
    from moeroof.data.io import sidecar_path, write_histogram
    from moeroof.data.safe_read import checked_blocks
    from moeroof.models.routing import histogram_from_trace

    out = new_output(args, (".csv",))
    trace = read_trace_arg(args.path, args)
    # the trace, and its sidecar where its meta is there (a .npy's; an .npz holds its own, a
    # .parquet its schema: a .json beside those is not read, and mixtral.npz → mixtral.csv is fine)
    source = Path(trace.path)
    inputs = [source, sidecar_path(source)] if source.suffix.lower() == ".npy" else [source]
    refuse_overwriting(out, inputs, "the trace it is made from (or its sidecar)")
    topk = trace.topk  # a memory-mapped file is read a block at a time, each block checked first
    counts = histogram_from_trace(topk, trace.experts)
    tokens = np.zeros(topk.shape[2], dtype=np.int64)
    for _, block in checked_blocks(topk):
        tokens += (block[..., 0] >= 0).sum(axis=(0, 1))  # a live token of a stream in that layer
    if not tokens.any():
        raise UsageError(f"{trace.path}: the trace holds no live token (all padding)")
    provenance = trace.meta.get("provenance")
    model = trace.meta.get("model")
    if not isinstance(model, str) or not model.strip():
        from moeroof.data.importers import UNKNOWN_MODEL

        model = UNKNOWN_MODEL if trace.meta.get("imported_from") else UNKNOWN_MODEL_NOT_IMPORTED
    with writing_new(out):
        write_histogram(
            out,
            counts,
            tokens=[int(t) for t in tokens],
            experts=trace.experts,
            top_k=trace.top_k,
            model=model,
            source=f"moeroof histogram {trace.path}",
            layer_ids=list(trace.layer_ids),
            provenance=provenance,
            extra={"derived_from": str(trace.path), "trace_source": trace.meta.get("source")},
            overwrite=bool(args.force),
        )
    return {
        "path": str(out),
        "trace": str(trace.path),
        "layers": int(counts.shape[0]),
        "experts": int(trace.experts),
        "top_k": int(trace.top_k),
        "model": model,
        "layer_ids": [int(x) for x in trace.layer_ids],
        "tokens_per_layer": [int(t) for t in tokens],
        "picks_per_layer": [int(x) for x in counts.sum(axis=1)],
        "experts_fired_per_layer": [int(x) for x in np.count_nonzero(counts, axis=1)],
        "picks": int(counts.sum()),
        "provenance": provenance,
    }


def print_histogram(rep: dict[str, Any]) -> None:
    toks = rep["tokens_per_layer"]
    span = f"{min(toks)}–{max(toks)}" if min(toks) != max(toks) else f"{toks[0]}"
    print(
        f"wrote {rep['path']}: {rep['layers']} layers × {rep['experts']} experts, {rep['picks']} picks "
        f"(K = {rep['top_k']}), {span} tokens per layer, from {rep['trace']} "
        f"(provenance: {rep['provenance'] or 'unknown'})"
    )


def histogram_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per layer of the histogram written."""
    headers = ["layer", "tokens", "picks", "experts_fired", "experts", "top_k", "provenance", "path"]
    rows = [
        [layer, tokens, picks, fired, rep["experts"], rep["top_k"], rep["provenance"], rep["path"]]
        for layer, tokens, picks, fired in zip(
            rep["layer_ids"], rep["tokens_per_layer"], rep["picks_per_layer"], rep["experts_fired_per_layer"]
        )
    ]
    return headers, rows


run = runner(histogram_report, print_histogram, histogram_csv)
