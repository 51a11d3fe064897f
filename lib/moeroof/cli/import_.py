"""``moeroof import FORMAT SRC -o OUT``: someone else's routing capture as the suite's trace or
histogram, with a sidecar recording the source, the import command and ``provenance: witnessed``.

::

    moeroof import table SRC -o OUT.npz --columns stream=COL[+COL],step=COL[,layer=COL]
        (--expert-cols COL,COL,… | --expert-col COL --slot-col COL) [--filter COL=VALUE …]
        --experts E --top-k K [--model NAME]
    moeroof import matrix SRC -o OUT.csv (--layer-col COL --expert-prefix PREFIX | SRC.npy)
        [--filter COL=VALUE …] --top-k K [--tokens T | T,T,…] [--kind auto|counts|frequency]
        [--shares] [--experts E] [--model NAME]
    moeroof import sglang SRC -o OUT.csv|OUT.npz --top-k K [--experts E] [--model NAME]
    moeroof import hf-router-logits SRC -o OUT.npz|OUT.csv --top-k K [--batch B] [--model NAME]

Every format takes ``--force`` (replace OUT), ``--format table|json|csv`` (``--json``) and
``--report-output FILE`` (the printed report to FILE; ``-o`` is the data written). Without
``--model`` the meta's model reads "unknown (not given at import)" (every format alike, so a
trace's histogram names it too). The formats, what each reads and where the formats were looked
up: :mod:`moeroof.data.importers`. The source is only read; OUT is written whole or not at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from moeroof.cli.flags import EXPERTS, TOKENS, TOP_K, Count, ListOf, UsageError
from moeroof.cli.output import add_output_arguments, new_output, print_notes, runner, spelled, writing_new

FORMATS = ("table", "matrix", "sglang", "hf-router-logits")

# library parameter → the flag that carries it where it is not the parameter's own name
# (moeroof.cli.app prints ParameterErrors with it)
PARAMETER_FLAGS = {"filters": "--filter", "out": "-o"}


def _common(p: argparse.ArgumentParser, out_help: str) -> None:
    p.add_argument("src", metavar="SRC", help="the capture to import (only read)")
    p.add_argument("-o", "--output", required=True, help=out_help + "; the printed report goes to --report-output")
    p.add_argument(
        "--model", help="model name for the meta (e.g. Mixtral-8x7B; default: 'unknown (not given at import)')"
    )
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    add_output_arguments(p, output=False)


def _add_table(sub: Any) -> None:
    """``import table``'s parser."""
    t = sub.add_parser(
        "table",
        help="one row per token (wide) or per routed slot (long), CSV or Parquet → trace",
        description=(
            "Per-token routing table → trace. Streams and steps are relabelled 0..n-1 in sorted key order "
            "(the original keys are kept in the meta); a missing (step, stream) is -1 padding; no layer "
            "column means one layer. Writing .csv gives the histogram of the imported trace instead."
        ),
    )
    _common(t, "trace to write (.npz or .npy; .csv writes its histogram)")
    t.add_argument(
        "--columns",
        required=True,
        help="stream=COL[+COL…],step=COL[+COL…][,layer=COL]; A+B joins columns into one key (stream=dataset+problem_id)",
    )
    ids = t.add_mutually_exclusive_group(required=True)
    ids.add_argument("--expert-cols", help="wide table: the K expert-id columns of a token, comma-separated")
    ids.add_argument("--expert-col", help="long table: the expert-id column (one row per slot; needs --slot-col)")
    t.add_argument("--slot-col", help="long table: the slot column, 0..K-1")
    t.add_argument(
        "--filter", action="append", metavar="COL=VALUE", help="keep rows where COL equals VALUE (repeatable)"
    )
    t.add_argument("--experts", required=True, type=EXPERTS, help="routed experts E of the model")
    t.add_argument("--top-k", required=True, type=TOP_K, help="experts per token K")


def _add_matrix(sub: Any) -> None:
    """``import matrix``'s parser."""
    m = sub.add_parser(
        "matrix",
        help="per-layer count or frequency matrix (wide CSV, or .npy layers × experts) → histogram",
        description=(
            "Per-layer count or frequency matrix → histogram. Integer values are counts (tokens = row sum / K "
            "unless --tokens); non-integer values, or rows summing to ≈ K, are inclusion frequencies and need "
            "--tokens T: counts = round(frequency × T), and T, the histogram's sample size, sets the width of "
            "union's and fit's bootstrap bands. Rows summing to 1 are refused unless --shares: mean router "
            "probabilities (like *_avg_dist.csv) are not incidence."
        ),
    )
    _common(m, "histogram to write (.csv; its .json sidecar beside it)")
    m.add_argument("--layer-col", help="CSV: the layer-id column")
    m.add_argument(
        "--expert-prefix", help="CSV: expert columns are PREFIX<id> (e.g. Expert_ for Expert_0, Expert_1, …)"
    )
    m.add_argument(
        "--filter", action="append", metavar="COL=VALUE", help="keep rows where COL equals VALUE (repeatable)"
    )
    m.add_argument("--top-k", required=True, type=TOP_K, help="experts per token K")
    m.add_argument(
        "--tokens",
        type=ListOf(TOKENS, example="4096 or 4096,4000"),
        help="tokens T behind the matrix: one number or one per layer (T,T,…); required for frequencies",
    )
    m.add_argument(
        "--kind", choices=("auto", "counts", "frequency"), default="auto", help="what the values are (default: detect)"
    )
    m.add_argument("--shares", action="store_true", help="rows summing to 1 are each expert's share of the K·T picks")
    m.add_argument("--experts", type=EXPERTS, help="routed experts E (default: the expert columns / array width)")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "import",
        help="import a routing capture (CSV/Parquet table, count or frequency matrix, SGLang, HF router logits)",
        description=(
            "Turn another tool's routing capture into the suite's trace (.npz) or histogram (.csv + .json "
            "sidecar), recording the source, the import command and provenance: witnessed. Every FORMAT takes "
            "-o OUT, --force (replace OUT), --format table|json|csv (--json) and --report-output FILE (the printed "
            "report to FILE); `moeroof import FORMAT --help` lists the rest."
        ),
    )
    sub = p.add_subparsers(dest="import_format", metavar="FORMAT", required=True)

    _add_table(sub)
    _add_matrix(sub)

    g = sub.add_parser(
        "sglang",
        help="SGLang's expert-distribution recorder dump (.csv of v0.4, or .pt: stat → histogram, per_token → trace)",
        description=(
            "SGLang's expert-distribution recorder output: the v0.4 CSV (layer_id,expert_id,count) or a .pt "
            "dump (torch needed to read it): stat mode (logical_count) gives a histogram, per_token mode "
            "(records) a trace with a step per forward pass (or its histogram with -o .csv)."
        ),
    )
    _common(g, "histogram (.csv) or, for a per_token dump, trace (.npz/.npy)")
    g.add_argument("--top-k", required=True, type=TOP_K, help="experts per token K")
    g.add_argument("--experts", type=EXPERTS, help="routed experts E (default: from the dump, or the largest id + 1)")

    h = sub.add_parser(
        "hf-router-logits",
        help="saved Hugging Face output_router_logits (.npy, .npz, torch .pt) → trace of each token's top-K",
        description=(
            "Hugging Face router logits (output_router_logits=True: one (batch·seq, E) or (batch, seq, E) tensor "
            "per layer), saved as .npy (layers stacked first), .npz (one stacked array, or one array per layer, "
            "optional attention_mask) or torch .pt (needs torch). Each token's top-K is its K largest logits."
        ),
    )
    _common(h, "trace to write (.npz or .npy; .csv writes its histogram)")
    h.add_argument("--top-k", required=True, type=TOP_K, help="experts per token K")
    h.add_argument(
        "--batch", type=Count(min=1), help="sequences B in flattened (B·S, E) logits (row b·S + s); default 1"
    )


#: the flags the import's command line spells out when given, in order (``--kind auto``, the
#: default, left out; ``--filter`` once per item, then ``--shares`` and ``--force``)
COMMAND_FLAGS: tuple[str, ...] = ("columns", "expert_cols", "expert_col", "slot_col", "layer_col", "expert_prefix")
COMMAND_FLAGS += ("experts", "top_k", "tokens", "kind", "batch", "model")


def command_line(args: argparse.Namespace) -> str:
    """The import as a command line, rebuilt from the parsed flags (what the sidecar records)."""
    given = {f: getattr(args, f, None) for f in COMMAND_FLAGS}
    given["kind"] = None if given["kind"] == "auto" else given["kind"]
    options = [("--" + f.replace("_", "-"), value) for f, value in given.items()]
    options += [("--filter", item) for item in getattr(args, "filter", None) or ()]
    options += [("--shares", bool(getattr(args, "shares", False))), ("--force", bool(args.force))]
    return spelled(["moeroof", "import", args.import_format, args.src, "-o", args.output], options)


def _shared(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """What every importer takes: K, the model name for the meta (the importers' own wording
    when not given, so that every format writes a model key) and the command line."""
    from moeroof.data.importers import UNKNOWN_MODEL

    model = args.model if args.model is not None and args.model.strip() else UNKNOWN_MODEL
    return {"top_k": args.top_k, "model": model, "command": command}


def _expert_cols(args: argparse.Namespace) -> list[str] | None:
    """``import table``'s id columns (``--expert-cols``, or None for a long table), checked
    against ``--expert-col`` / ``--slot-col``."""
    if args.expert_col is not None and args.slot_col is None:
        raise UsageError("--expert-col: a long table needs --slot-col too (the slot 0..K-1 of each row)")
    if args.expert_cols is not None and args.slot_col is not None:
        raise UsageError("--slot-col: only with --expert-col (a long table); --expert-cols is a wide one")
    if args.expert_cols is None:
        return None
    expert_cols = [c.strip() for c in args.expert_cols.split(",")]
    if not all(expert_cols):
        raise UsageError(f"--expert-cols: empty column name in {args.expert_cols!r}")
    return expert_cols


#: FORMAT → (its importer in moeroof.data.importers, the flags it takes as given, the suffixes -o may have)
IMPORTERS = {
    "table": ("import_table", ("experts", "expert_col", "slot_col"), (".npz", ".npy", ".csv")),
    "matrix": ("import_matrix", ("layer_col", "expert_prefix", "kind", "experts"), (".csv",)),
    "sglang": ("import_sglang", ("experts",), (".csv", ".npz", ".npy")),
    "hf-router-logits": ("import_hf_router_logits", ("batch",), (".npz", ".npy", ".csv")),
}


def _imported(args: argparse.Namespace, command: str) -> Any:
    """``args.src`` read by its FORMAT's importer (the flags it takes parsed first)."""
    from moeroof.data import importers

    name, given, _ = IMPORTERS[args.import_format]
    kw = {flag: getattr(args, flag) for flag in given}
    if args.import_format == "table":
        kw.update(expert_cols=_expert_cols(args), columns=importers.parse_columns(args.columns))
    elif args.import_format == "matrix":
        tokens = args.tokens[0] if args.tokens is not None and len(args.tokens) == 1 else args.tokens
        kw.update(tokens=tokens, shares=bool(args.shares))
    if args.import_format in ("table", "matrix"):
        kw["filters"] = importers.parse_filters(args.filter)
    return getattr(importers, name)(args.src, **kw, **_shared(args, command))


def import_report(args: argparse.Namespace) -> dict[str, Any]:
    """Import ``args.src`` as ``args.import_format`` into ``args.output``; the report as a dict."""
    from moeroof.cli.output import refuse_overwriting
    from moeroof.data.importers import ImportedTrace, write_imported

    out = new_output(args, IMPORTERS[args.import_format][2])
    refuse_overwriting(out, [Path(args.src).expanduser()], "the file it is imported from")
    command = command_line(args)
    data = _imported(args, command)
    with writing_new(out):
        write_imported(out, data, overwrite=bool(args.force))
    rep: dict[str, Any] = {"path": str(out), "source": str(Path(args.src)), "format": args.import_format}
    if isinstance(data, ImportedTrace) and out.suffix.lower() != ".csv":
        steps, streams, layers, k = (int(n) for n in data.topk.shape)
        rep.update(kind="trace", steps=steps, streams=streams, layers=layers, experts=int(data.meta["experts"]))
        rep.update(top_k=k, tokens=int((data.topk[..., 0] >= 0).sum()))
    else:
        from moeroof.data.io import read_histogram

        h = read_histogram(out)
        rep.update(kind="histogram", layers=h.layers, experts=h.experts, top_k=h.top_k)
        rep.update(
            tokens_per_layer=[int(t) for t in h.tokens], tokens_user_given=bool(h.meta.get("tokens_user_given", False))
        )
    model = _shared(args, command)["model"]
    return {**rep, "model": model, "provenance": "witnessed", "command": command, "notes": list(data.notes)}


def print_import(rep: dict[str, Any]) -> None:
    if rep["kind"] == "trace":
        print(
            f"wrote {rep['path']}: trace of {rep['steps']} steps × {rep['streams']} streams × {rep['layers']} layers, "
            f"K = {rep['top_k']} of E = {rep['experts']}, {rep['tokens']} tokens (provenance: witnessed)"
        )
    else:
        toks = rep["tokens_per_layer"]
        span = f"{min(toks)}" if min(toks) == max(toks) else f"{min(toks)}–{max(toks)}"
        print(
            f"wrote {rep['path']}: histogram of {rep['layers']} layers × {rep['experts']} experts, K = {rep['top_k']}, "
            f"{span} tokens per layer{' (user-given)' if rep['tokens_user_given'] else ''} (provenance: witnessed)"
        )
    print_notes(rep["notes"], "  ")


#: ``--format csv``: the columns of the one row (a trace's or a histogram's; "" where not one's)
CSV_COLUMNS: tuple[str, ...] = ("path", "kind", "format", "model", "layers", "experts", "top_k", "steps", "streams")
CSV_COLUMNS += ("tokens", "tokens_per_layer_min", "tokens_per_layer_max", "tokens_user_given", "provenance", "source")


def import_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row, the file written (a trace's shape or a histogram's tokens)."""
    row = dict(rep)
    toks = rep.get("tokens_per_layer")
    if toks:
        row.update(tokens_per_layer_min=min(toks), tokens_per_layer_max=max(toks))
    return list(CSV_COLUMNS), [[row.get(c) for c in CSV_COLUMNS]]


run = runner(import_report, print_import, import_csv)
