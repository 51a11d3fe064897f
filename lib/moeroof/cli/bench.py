"""``moeroof bench``: time decode steps of a synthetic MoE stack streamed from disk, coalesced
(the batch's union of experts read once per layer) and uncoalesced (each token its own K).

::

    moeroof bench [--experts 32 --layers 4 --top-k 4 --d-model 1024 --d-ff 1024] [--batch 1,2,4,8,16,32]
                  [--mode both|coalesced|uncoalesced] [--routing uniform|zipf:S | --trace PATH]
                  [--calibration calibrated.toml] [--json] [--output F]

The measurement is :func:`moeroof.measure.bench.run_bench`; reads bypass the page cache as in
``moeroof calibrate``, and an interrupted run ends with one ``error: interrupted`` line and
status 130. With ``--calibration`` every row is also predicted from that hardware TOML
(:func:`moeroof.measure.bench.predict_bench`, engine terms included) under ``prediction``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.cli.flags import (
    BATCH_HELP,
    EXPERTS,
    LAYERS,
    TOP_K,
    BatchList,
    Count,
    UsageError,
    add_default,
    add_read_arguments,
    add_seed,
    flags_named,
)
from moeroof.cli.inputs import read_trace_arg
from moeroof.cli.output import (
    add_output_arguments,
    check_output_file,
    dumps,
    emit,
    fmt,
    interrupted,
    jsonable,
    output_format,
    run_record,
    spelled,
    table,
)
from moeroof.core import atomic

EXIT_USAGE = 2


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="measure decode steps of a synthetic MoE streamed from disk, coalesced and uncoalesced",
        description=(
            "Write a synthetic MoE stack (E experts × L layers of float32 d×f and f×d matrices) to a "
            "scratch file and time decode steps of B agents: uncoalesced (each token reads and "
            "applies its own K experts) and coalesced (the union read once per layer, one grouped "
            "matmul per expert). Reads bypass the page cache as in `moeroof calibrate`."
        ),
    )
    p.add_argument("--experts", type=EXPERTS, help="experts per layer E (default 32, or the trace's)")
    add_default(p, "--layers", "4", "MoE layers L", type=LAYERS)
    p.add_argument("--top-k", type=TOP_K, help="experts per token K (default 4, or the trace's)")
    add_default(p, "--d-model", "1024", "hidden size d", type=Count(min=1))
    p.add_argument(
        "--d-ff", default="1024", type=Count(min=1), help="expert width f (default 1024; expert bytes = 2·d·f·4)"
    )
    p.add_argument("--batch", default="1,2,4,8,16,32", type=BatchList(), help=BATCH_HELP + " (default 1,2,4,8,16,32)")
    add_default(p, "--mode", "both", "which mode(s) to run", choices=("both", "uncoalesced", "coalesced"))
    p.add_argument("--routing", help="routing model: uniform or zipf:S (default uniform)")
    p.add_argument("--trace", help="routing from a trace .npz/.npy instead of a model")
    add_default(p, "--steps", "5", "counted decode steps per (mode, B)", type=Count(min=1))
    add_default(p, "--warmup", "1", "uncounted warm-up steps per (mode, B)", type=Count(min=0))
    add_seed(p, "numpy.random.default_rng for routing, gates and weights")
    add_read_arguments(p, "where the stack file goes (default: the system temp dir)")
    p.add_argument(
        "--calibration",
        help="hardware TOML written by `moeroof calibrate` (or a preset name): also predict every row from it, "
        "engine terms included, and report the prediction and the engine terms used",
    )
    p.add_argument(
        "--overlap",
        default="sum",
        choices=("sum", "max"),
        help="how --calibration's prediction combines the terms: sum (serial loop, default) or max",
    )
    p.add_argument(
        "--output", help="also write the report to this file as JSON, atomically (whatever --format prints on stdout)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_output_arguments(p, output=False, report_output=False)


def check_output(args: argparse.Namespace) -> None:
    """Refuse an ``--output`` that cannot take the report before anything is measured: one of the
    inputs (``--trace`` and its sidecar, ``--calibration``), a folder, a file in a folder that
    does not exist or cannot be written."""
    if args.output is None:
        return
    from moeroof.data.io import sidecar_path

    out = Path(args.output).expanduser()
    given = [Path(g).expanduser() for g in (args.trace, args.calibration) if g is not None]
    for inp in [f for g in given if g.exists() for f in (g, sidecar_path(g))]:
        if atomic.same_file(out, inp):
            raise UsageError(
                f"--output: {args.output} is one of this command's inputs ({inp}); refusing to overwrite it"
            )
    check_output_file(args.output)


def _bench_routing(args: argparse.Namespace) -> tuple[np.ndarray | None, str, int, int]:
    """``bench``'s trace (``--trace``, or None: ``--routing`` draws), its label, E and K."""
    if args.trace is None:
        experts = 32 if args.experts is None else args.experts
        top_k = 4 if args.top_k is None else args.top_k
        return None, "", experts, top_k
    if args.routing is not None:
        raise UsageError("give either --routing or --trace, not both")
    tr = read_trace_arg(args.trace)
    if tr.topk.size == 0:
        raise UsageError(f"--trace: {tr.path}: holds no token (shape {tuple(tr.topk.shape)})")
    experts = tr.experts if args.experts is None else args.experts
    top_k = tr.top_k if args.top_k is None else args.top_k
    if experts != tr.experts or top_k != tr.top_k:
        raise UsageError(f"--experts/--top-k: the trace has E={tr.experts}, K={tr.top_k}")
    return np.asarray(tr.topk), f"trace {tr.path.name}", experts, top_k


#: the library's parameter names in bench's errors → the flags that set them
BENCH_FLAGS = {n: "--" + n.replace("_", "-") for n in ("batch", "d_model", "d_ff", "steps", "experts", "layers")}
BENCH_FLAGS.update(warmup_steps="--warmup", scratch_dir="--scratch-dir")


def bench_report(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark for parsed arguments and return its JSON object."""
    from moeroof.measure.bench import MODES, StackShape, predict_bench, run_bench
    from moeroof.measure.calibrate import Progress, ResourceError

    check_output(args)
    batch, layers, d_model, d_ff = args.batch, args.layers, args.d_model, args.d_ff
    steps, warmup, seed = args.steps, args.warmup, args.seed
    trace, trace_label, experts, top_k = _bench_routing(args)
    if top_k > experts:
        raise UsageError(f"--top-k: K={top_k} exceeds --experts E={experts}")
    routing = args.routing or "uniform"
    modes = MODES if args.mode == "both" else (args.mode,)
    hardware = None
    if args.calibration is not None:
        from moeroof.data.presets import load_hardware

        hardware = load_hardware(args.calibration)  # a bad file is refused before any work
    command = {"--experts": experts, "--layers": layers, "--top-k": top_k, "--d-model": d_model, "--d-ff": d_ff}
    command.update({"--batch": batch, "--mode": args.mode, "--trace": args.trace})
    command.update({"--routing": routing if args.trace is None else None, "--steps": steps, "--warmup": warmup})
    command.update({"--seed": seed, "--read-path": args.read_path, "--scratch-dir": args.scratch_dir})
    if args.calibration is not None:
        command.update({"--calibration": args.calibration, "--overlap": args.overlap})
    try:
        rep = run_bench(
            StackShape(experts, layers, d_model, d_ff),
            top_k,
            batch,
            modes=modes,
            routing=routing,
            trace=trace,
            trace_label=trace_label,
            steps=steps,
            warmup_steps=warmup,
            seed=seed,
            scratch_dir=args.scratch_dir,
            read_path=args.read_path,
            command=spelled(["moeroof", "bench"], command.items()),
            progress=Progress("bench", enabled=not args.quiet),
        )
    except ResourceError as err:  # the library's parameters, named as the flags that set them
        raise flags_named(err, BENCH_FLAGS) from None
    except OSError as exc:
        raise UsageError(f"bench: {exc}") from None
    if hardware is not None:
        rep["prediction"] = predict_bench(
            rep, hardware, overlap=args.overlap, routing=args.trace if args.trace is not None else None
        )
        rep["prediction"]["calibration"] = args.calibration
    return jsonable(rep)


def print_bench(rep: dict[str, Any]) -> None:
    print(
        f"bench — E={rep['experts']} L={rep['layers']} K={rep['top_k']} d={rep['d_model']} f={rep['d_ff']} "
        f"(expert {rep['expert_bytes'] / 2**20:.3g} MiB), "
        f"routing {rep['routing']}, {rep['steps']} steps (+{rep['warmup_steps']} warm-up), witnessed"
    )
    print(f"read path: {rep['read_path']} ({rep['read_method']})")
    pred = rep.get("prediction")
    rows = [  # the CSV's rows
        [mode, str(b), fmt(step, 4), fmt(net, 2), fmt(agent, 2), fmt(read / 1e6, 1), fmt(u, 2), fmt(ratio, 2)]
        + ([fmt(predicted, 2), f"{error:+.1%}"] if pred else [])
        for mode, b, step, net, agent, read, u, ratio, predicted, error in bench_csv(rep)[1]
    ]
    headers = ["mode", "B", "step s", "net tok/s", "tok/s/agent", "MB read/step", "U/layer", "B·K/U"]
    if pred:
        headers += ["predicted net tok/s", "error"]
    print(table(headers, rows, "<" + ">" * (len(headers) - 1)))
    print("B·K/U is the measured coalescing ratio against the uncoalesced baseline")
    if pred:
        eng = pred["engine"]
        tags = set(eng["provenance"].values())
        print(
            f"predicted from {pred['calibration']} ({pred['hardware']}, overlap {pred['overlap']}); error = predicted / measured - 1"
        )
        print(
            f"engine terms used: {eng['engine_seconds_per_step'] * 1e6:.1f} us per step + "
            f"{eng['engine_seconds_per_agent_token'] * 1e6:.1f} us per agent-token ({', '.join(sorted(tags))})"
        )


#: ``--format csv``: one row per (mode, batch)
CSV_COLUMNS: tuple[str, ...] = ("mode", "batch", "step_seconds", "net_tok_s", "per_agent_tok_s", "bytes_read_per_step")
CSV_COLUMNS += ("union_per_layer", "coalescing_ratio", "predicted_net_tok_s", "relative_error")


def bench_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per measured (mode, B); the prediction's columns empty without
    ``--calibration`` (relative_error a fraction: predicted / measured − 1)."""
    pred = rep.get("prediction") or {}
    rows = []
    for i in range(len(rep["batch"])):
        row = [rep[c][i] for c in CSV_COLUMNS[:8]]
        for c in CSV_COLUMNS[8:]:
            values = pred.get(c)
            row.append(values[i] if isinstance(values, list) and i < len(values) else None)
        rows.append(row)
    return list(CSV_COLUMNS), rows


def run(args: argparse.Namespace) -> int:
    try:
        rep = bench_report(args)
    except KeyboardInterrupt:
        return interrupted()
    failed = None
    rep["run"] = run_record(args)  # the file and stdout carry the same record
    if args.output is not None:
        try:
            atomic.write_text(args.output, json.dumps(rep, indent=2, allow_nan=False) + "\n")
        except OSError as exc:  # the measurement is not lost: the JSON goes to stdout below
            failed = f"{exc.filename or args.output} ({exc.strerror or exc})"
    emit(rep, args, print_bench, csv_table=bench_csv)
    if failed is not None:
        if output_format(args) == "table":
            print(f"the report as JSON (--output {args.output} could not be written):")
            print(dumps(rep))
        sys.stdout.flush()
        print(f"error: --output: cannot write {failed}; the report is on stdout", file=sys.stderr)
        return EXIT_USAGE
    if args.output is not None:  # on stderr, as every command says it: stdout is the report alone
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
