"""``moeroof trace``: sample a routing trace from knobs and write it (issue 11).

::

    moeroof trace --family dirichlet:A|zipf:S|uniform --streams M --steps T -o OUT.npz
                  [--rho R | --rho-profile R0,R1,…] [--locality C] [--step-context C]
                  [--prompt-tokens P] [--experts E] [--top-k K] [--layers L] [--seed S]
                  [--force] [--json]

The knobs are those of :func:`moeroof.models.routing.sample_trace`: the popularity family per
layer, the stickiness ρ (one value, or one per layer with ``--rho-profile``), the per-stream hot
set ``--locality C`` (each stream routes by its own ``q_s ~ Dirichlet(C·w)``, drawn once:
``c=C, groups=streams, scope="trace"``), the shared step context ``--step-context CS`` (the
streams of a step share a context ``r_t ~ Dirichlet(CS·w)``, redrawn every step:
``c_step=CS``) or both (each stream's lasting hot set and the step's shared context, split as
the ``c``/``c_step`` construction of ``sample_trace`` says: every stream and step routes by a
``Dirichlet(A·w)`` draw, ``1/A = 1/C + 1/CS``), and a prompt of P tokens routed before the T
decode steps (the trace has P + T steps; the first P are the prompt). The trace is written with
:func:`moeroof.data.io.write_trace` (atomic, byte-stable: the same knobs and seed give the same
bytes) with meta ``model`` ``synthetic``, ``provenance`` ``projected``, ``source`` (the knobs as
a command line) and ``knobs`` (the same as JSON). An existing file is replaced only with
``--force``.

The parser imports no library code beyond :mod:`moeroof.cli.common`; ``run`` imports the
sampler.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from moeroof.cli.common import (
    UsageError,
    add_output_arguments,
    check_replicate_memory,
    emit,
    fmt,
    jsonable,
    non_negative_int,
    positive_float,
    positive_int,
    table,
)

FAMILIES = ("uniform", "zipf:S", "dirichlet:ALPHA")
# a guard against a typo in --steps or --streams filling the disk: 2^31 ids are 8 GiB of int32
MAX_IDS = 2**31


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trace",
        help="sample a routing trace from knobs (family, stickiness, per-stream locality, prompt) and write it",
        description=(
            "Sample a synthetic routing trace (steps × streams × layers × K expert ids) from routing knobs "
            "and write it as .npz (or .npy + .json sidecar), provenance 'projected'. Replay it with "
            "`moeroof cache`, measure its union with `moeroof union`."
        ),
    )
    p.add_argument("--family", required=True, help="popularity per layer: uniform, zipf:S or dirichlet:ALPHA")
    p.add_argument("--streams", required=True, help="concurrent streams M")
    p.add_argument("--steps", required=True, help="decode steps T (after the prompt)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="trace to write (.npz, .npy with a .json sidecar, or .parquet: one row per token, read in row groups)",
    )
    p.add_argument("--rho", default=None, help="stickiness in [0, 1]: each previous expert kept with probability ρ")
    p.add_argument(
        "--rho-profile",
        default=None,
        help="stickiness per layer, comma-separated (one per layer; sets --layers when that is not given)",
    )
    p.add_argument(
        "--locality",
        default=None,
        help="per-stream hot set: each stream routes by its own q ~ Dirichlet(C·w), drawn once (smaller C: "
        "hotter, more private hot sets)",
    )
    p.add_argument(
        "--step-context",
        default=None,
        help="shared step context: the streams of a step share r ~ Dirichlet(C·w), redrawn every step; with "
        "--locality, on top of each stream's lasting hot set",
    )
    p.add_argument(
        "--prompt-tokens",
        default="0",
        help="prompt tokens P routed before the decode steps; the trace has P + T steps, the first P the prompt",
    )
    p.add_argument("--experts", default="256", help="routed experts per layer E (default 256)")
    p.add_argument("--top-k", default="8", help="experts per token K (default 8)")
    p.add_argument("--layers", default=None, help="MoE layers L (default 8, or the length of --rho-profile)")
    p.add_argument("--seed", default="0", help="seed of the draw (default 0)")
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    add_output_arguments(p, output=False)
    p.set_defaults(
        func=run,
        parameter_flags={
            "prompt_tokens": "--prompt-tokens",
            "groups": "--streams",
            "scope": "--step-context",
            "c_step": "--step-context",
        },
    )


def parse_family(text: str) -> tuple[str, float | None]:
    """``uniform`` → ("uniform", None); ``zipf:0.9`` → ("zipf", 0.9); ``dirichlet:0.4`` → ("dirichlet", 0.4)."""
    t = text.strip().lower()
    if t == "uniform":
        return "uniform", None
    name, sep, value = t.partition(":")
    if name not in ("zipf", "dirichlet") or not sep:
        raise UsageError(f"--family: expected one of {', '.join(FAMILIES)}, got {text!r}")
    need = "zipf:S needs a finite S >= 0" if name == "zipf" else "dirichlet:ALPHA needs a finite ALPHA > 0"
    try:
        skew = float(value)
    except ValueError:
        raise UsageError(f"--family: {need}, got {text!r}") from None
    if not math.isfinite(skew) or skew < 0 or (name == "dirichlet" and skew == 0):
        raise UsageError(f"--family: {need}, got {text!r}")
    return name, skew


def unit_interval(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{flag}: expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise UsageError(f"{flag}: must be in [0, 1], got {text!r}")
    return value


def parse_profile(text: str) -> list[float]:
    parts = text.split(",")
    if not text.strip() or any(not q.strip() for q in parts):
        raise UsageError(f"--rho-profile: expected comma-separated numbers in [0, 1] like 0.1,0.3,0.6, got {text!r}")
    return [unit_interval(q, "--rho-profile") for q in parts]


def trace_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed knobs (plain JSON values), every flag checked before anything is sampled."""
    family, skew = parse_family(args.family)
    streams = positive_int(args.streams, "--streams")
    steps = positive_int(args.steps, "--steps")
    experts = positive_int(args.experts, "--experts")
    top_k = positive_int(args.top_k, "--top-k")
    if top_k > experts:
        raise UsageError(f"--top-k: {top_k} exceeds --experts {experts}")
    if args.rho is not None and args.rho_profile is not None:
        raise UsageError("--rho-profile: give --rho (one value) or --rho-profile (one per layer), not both")
    profile = None if args.rho_profile is None else parse_profile(args.rho_profile)
    if args.layers is not None:
        layers = positive_int(args.layers, "--layers")
    else:
        layers = 8 if profile is None else len(profile)
    if profile is not None and len(profile) != layers:
        raise UsageError(f"--rho-profile: {len(profile)} values but --layers is {layers} (one value per layer)")
    rho: float | list[float] = (
        profile if profile is not None else (0.0 if args.rho is None else unit_interval(args.rho, "--rho"))
    )
    locality = None if args.locality is None else positive_float(args.locality, "--locality")
    context = None if args.step_context is None else positive_float(args.step_context, "--step-context")
    prompt = non_negative_int(args.prompt_tokens, "--prompt-tokens")
    seed = non_negative_int(args.seed, "--seed")
    # one step's Gumbel scores and popularity parts: a few (streams × layers × experts) arrays
    check_replicate_memory("--experts", experts, 4 * streams * layers, "4 × streams × layers")
    ids = (prompt + steps) * streams * layers * top_k
    if ids > MAX_IDS:
        raise UsageError(
            f"--steps: (P + T)·M·L·K = {ids} expert ids ({ids * 4 / 2**30:.1f} GiB) is more than this command "
            f"writes ({MAX_IDS}); fewer steps, streams or layers"
        )
    return {
        "family": family,
        "skew": skew,
        "rho": rho,
        "locality_c": locality,
        "step_context_c": context,
        "prompt_tokens": prompt,
        "streams": streams,
        "steps": steps,
        "experts": experts,
        "top_k": top_k,
        "layers": layers,
        "seed": seed,
    }


def knobs_command_line(k: dict[str, Any]) -> str:
    """The knobs as the command line that reproduces them (output path left out)."""
    fam = k["family"] if k["skew"] is None else f"{k['family']}:{k['skew']:g}"
    parts = ["moeroof trace", f"--family {fam}"]
    if isinstance(k["rho"], list):
        parts.append("--rho-profile " + ",".join(f"{r:g}" for r in k["rho"]))
    else:
        parts.append(f"--rho {k['rho']:g}")
    if k["locality_c"] is not None:
        parts.append(f"--locality {k['locality_c']:g}")
    if k["step_context_c"] is not None:
        parts.append(f"--step-context {k['step_context_c']:g}")
    if k["prompt_tokens"]:
        parts.append(f"--prompt-tokens {k['prompt_tokens']}")
    parts += [
        f"--streams {k['streams']}",
        f"--steps {k['steps']}",
        f"--experts {k['experts']}",
        f"--top-k {k['top_k']}",
        f"--layers {k['layers']}",
        f"--seed {k['seed']}",
    ]
    return " ".join(parts)


def sample_from_knobs(k: dict[str, Any]) -> Any:
    """The trace (prompt_tokens + steps, streams, layers, K) the knobs describe."""
    import numpy as np

    from moeroof.models.routing import Dirichlet, Uniform, Zipf, sample_trace

    if k["family"] == "uniform":
        model: Any = Uniform(k["experts"], k["top_k"])
    elif k["family"] == "zipf":
        model = Zipf(k["experts"], k["top_k"], k["skew"])
    else:
        model = Dirichlet(k["experts"], k["top_k"], k["skew"])
    extra: dict[str, Any] = {}
    if k["locality_c"] is not None:
        extra.update(c=k["locality_c"], groups=k["streams"], scope="trace")
    if k["step_context_c"] is not None:
        extra.update(c_step=k["step_context_c"])
    rho = np.asarray(k["rho"], dtype=float) if isinstance(k["rho"], list) else k["rho"]
    rng = np.random.default_rng(k["seed"])
    return sample_trace(
        model,
        k["steps"],
        k["streams"],
        k["layers"],
        rng,
        rho=rho,
        prompt_tokens=k["prompt_tokens"],
        **extra,
    )


def trace_report(args: argparse.Namespace) -> dict[str, Any]:
    """Sample, write, and return the ``trace`` JSON object."""
    from moeroof.data.io import write_trace
    from moeroof.models.routing import consecutive_overlap

    knobs = trace_knobs(args)
    out = Path(args.output)
    if out.suffix.lower() not in (".npz", ".npy", ".parquet"):
        raise UsageError(f"-o: expected a .npz, .npy or .parquet path, got {args.output!r}")
    if not args.force and out.exists():
        raise UsageError(f"-o: {out} exists (pass --force to replace it)")
    topk = sample_from_knobs(knobs)
    source = knobs_command_line(knobs)
    meta = {
        "model": "synthetic",
        "experts": knobs["experts"],
        "top_k": knobs["top_k"],
        "layer_ids": list(range(knobs["layers"])),
        "source": source,
        "provenance": "projected",
        "knobs": knobs,
        "prompt_steps": knobs["prompt_tokens"],
    }
    try:
        if out.suffix.lower() == ".parquet":  # one row per live token, row groups by steps
            from moeroof.data.trace_parquet import write_parquet_trace

            write_parquet_trace(out, topk, meta, overwrite=bool(args.force))
        else:
            write_trace(out, topk, meta, overwrite=bool(args.force))
    except FileExistsError:  # created between the check and the write
        raise UsageError(f"-o: {out} exists (pass --force to replace it)") from None
    overlap = consecutive_overlap(topk[knobs["prompt_tokens"] :]) if knobs["steps"] > 1 else None
    return {
        "path": str(out),
        "shape": list(topk.shape),
        "steps": int(topk.shape[0]),
        "prompt_steps": knobs["prompt_tokens"],
        "streams": knobs["streams"],
        "layers": knobs["layers"],
        "experts": knobs["experts"],
        "top_k": knobs["top_k"],
        "knobs": knobs,
        "source": source,
        "provenance": "projected",
        "consecutive_overlap": None if overlap is None else [float(x) for x in overlap],
    }


def print_trace(rep: dict[str, Any]) -> None:
    print(f"wrote {rep['path']}: {' × '.join(map(str, rep['shape']))} (steps × streams × layers × K), projected")
    print(f"knobs: {rep['source']}")
    if rep["prompt_steps"]:
        print(f"the first {rep['prompt_steps']} steps are the prompt (cache --warmup {rep['prompt_steps']} skips them)")
    if rep["consecutive_overlap"] is not None:
        rows = [[str(i), fmt(v, 3)] for i, v in enumerate(rep["consecutive_overlap"])]
        print(table(["layer", "shared with the previous token (decode)"], rows, ">>"))


def run(args: argparse.Namespace) -> int:
    return emit(jsonable(trace_report(args)), args, print_trace)
