"""``moeroof trace``: sample a routing trace from knobs and write it.

::

    moeroof trace (--family prior|dirichlet:A|zipf:S|uniform | --routing HIST.csv) --streams M --steps T
                  -o OUT.npz [--rho R | --rho-profile R0,R1,…] [--locality C] [--independent] [--step-context C]
                  [--prompt-tokens P] [--experts E] [--top-k K] [--layers L] [--seed S]
                  [--force] [--format table|json|csv] [--report-output FILE]

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
``--force``. The trace holds every layer of its model, so its first layer, the first MoE layer,
carries no locality: ``--rho`` and ``--locality`` (and the prior's) hold on the others
(:func:`moeroof.models.locality.layer_knobs`, the suite's rule wherever a trace holds a
model's first layer); a ``--rho-profile`` sets every layer's ρ, the first included, and
``--locality`` on all.

Locality when nothing is said about it: with none of ``--rho``, ``--rho-profile`` and
``--locality``, the stickiness and the per-stream hot set are the centre of the locality prior
fitted on real decode (``data/fits/locality-prior.json``, :mod:`moeroof.studies.locality_prior`),
named in the notes and in ``knobs.locality_prior``; ``--independent`` draws independent tokens
(the default before the prior).

``--routing HIST.csv`` (instead of ``--family``) draws the tokens from a histogram's own
per-layer popularity — the way to replay a histogram-only capture (a frequency matrix has no
token order) through ``cache`` and ``mrc``. The histogram's inclusion probabilities π per layer
are :func:`moeroof.models.plan.routing_from_spec`'s (what ``plan --routing`` uses); the
Plackett–Luce weights whose top-K inclusion probabilities are π (:func:`moeroof.models.routing.weights_from_inclusion`,
a fixed point of :func:`moeroof.models.routing.inclusion_probabilities`) are the ``popularity``
of :func:`moeroof.models.routing.sample_trace`, so with no other knob the tokens are independent
and each includes expert i of layer l with probability π_li (``--independent``); ``--rho``, ``--locality`` and
``--step-context`` add stickiness and hot sets around the same weights as for a family. E, K and
the layers (and their ids) are the histogram's. The trace's meta says where it came from:
``derived_from`` (the histogram), ``provenance: projected`` with ``provenance_detail`` "witnessed
popularity, synthetic order" when the histogram is witnessed, the histogram's model. A trace
path works too (its counts are the histogram).

The parser imports no library code beyond :mod:`moeroof.cli.flags` and :mod:`moeroof.cli.output`; ``run`` imports the
sampler.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.cli.flags import EXPERTS, LAYERS, TOP_K, Count, ListOf, Real, UsageError, add_seed, check_replicate_memory
from moeroof.cli.inputs import input_path
from moeroof.cli.output import Progress, add_output_arguments, fmt, jsonable, new_output, runner, table, writing_new

FAMILIES = ("uniform", "zipf:S", "dirichlet:ALPHA")
#: a stickiness ρ (--rho, each of --rho-profile)
UNIT = Real(min=0.0, max=1.0)
#: library parameter → the flag that carries it (moeroof.cli.app prints ParameterErrors with it)
PARAMETER_FLAGS = {"prompt_tokens": "--prompt-tokens", "groups": "--streams"}
PARAMETER_FLAGS.update(scope="--step-context", c_step="--step-context")
# a guard against a typo in --steps or --streams filling the disk: 2^31 ids are 8 GiB of int32
MAX_IDS = 2**31


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trace",
        help="sample a routing trace from knobs (family, stickiness, per-stream locality, prompt) and write it",
        description=(
            "Sample a synthetic routing trace (steps × streams × layers × K expert ids) from routing knobs "
            "(--family), or from a histogram's own per-layer popularity (--routing HIST.csv: a histogram-only "
            "capture's way to `cache` and `mrc`), and write it as .npz (or .npy + .json sidecar), provenance "
            "'projected'. Replay it with `moeroof cache`, measure its union with `moeroof union`."
        ),
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--family", help="popularity per layer: prior (the skew prior), uniform, zipf:S or dirichlet:A")
    source.add_argument(
        "--routing",
        metavar="HIST.csv",
        help="draw from a histogram's own per-layer popularity (its E, K and layers): each token includes "
        "expert i of layer l with the histogram's frequency π_li, independently unless --rho/--locality/"
        "--step-context; how to replay a histogram-only capture through cache and mrc",
    )
    p.add_argument("--streams", required=True, type=Count(min=1), help="concurrent streams M")
    p.add_argument("--steps", required=True, type=Count(min=1), help="decode steps T (after the prompt)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="trace to write (.npz, .npy with a .json sidecar, or .parquet: one row per token, read in row groups); "
        "the printed report goes to --report-output",
    )
    _add_locality_arguments(p)
    p.add_argument(
        "--prompt-tokens",
        default="0",
        type=Count(min=0),
        help="prompt tokens P routed before the decode steps; the trace has P + T steps, the first P the prompt",
    )
    p.add_argument(
        "--experts", type=EXPERTS, help="routed experts per layer E (default 256; --routing: the histogram's)"
    )
    p.add_argument("--top-k", type=TOP_K, help="experts per token K (default 8; --routing: the histogram's)")
    p.add_argument(
        "--layers",
        type=LAYERS,
        help="MoE layers L (default 8, or the length of --rho-profile; --routing: the histogram's)",
    )
    add_seed(p, "the draw")
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    add_output_arguments(p, output=False)


def _add_locality_arguments(p: Any) -> None:
    """``trace``'s flags of one stream's locality (stickiness, per-stream hot sets, step context)."""
    p.add_argument(
        "--rho",
        type=UNIT,
        help="stickiness in [0, 1]: each previous expert kept with probability ρ; none in layer 0 (default: the prior's)",
    )
    p.add_argument(
        "--rho-profile",
        type=ListOf(UNIT, example="0.1,0.3,0.6"),
        help="stickiness per layer, comma-separated, layer 0 too (and --locality on all; sets --layers if not given)",
    )
    p.add_argument(
        "--locality",
        type=Real(min=0.0, open_low=True),
        help="per-stream hot set: each stream routes by its own q ~ Dirichlet(C·w), drawn once, none in layer 0 "
        "(smaller C: hotter, more private hot sets; default: the locality prior's c/E times E)",
    )
    p.add_argument(
        "--independent",
        action="store_true",
        help="tokens independent of one another (no stickiness, no per-stream hot sets) instead of the "
        "locality prior fitted on real decode",
    )
    p.add_argument(
        "--step-context",
        type=Real(min=0.0, open_low=True),
        help="shared step context: the streams of a step share r ~ Dirichlet(C·w), redrawn every step; with "
        "--locality, on top of each stream's lasting hot set",
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
        skew = math.nan  # not a number: refused as one out of range
    if not math.isfinite(skew) or skew < 0 or (name == "dirichlet" and skew == 0):
        raise UsageError(f"--family: {need}, got {text!r}")
    return name, skew


@dataclass(frozen=True)
class HistogramRouting:
    """``--routing PATH``: the histogram (or trace) read, and its inclusion probabilities per layer."""

    path: Path
    experts: int
    top_k: int
    layer_ids: tuple[int, ...]
    pi: np.ndarray  # (layers, E), rows summing to K: routing_from_spec's
    meta: dict[str, Any]
    notes: tuple[str, ...]
    pooled: bool = False  # one row standing for every layer (a histogram summed over layers)

    @property
    def holds_first_layer(self) -> bool:
        """Whether the trace's first layer is the model's first MoE layer, which has no locality:
        the histogram's layer 0, not a pooled row standing for every layer or a capture that
        starts deeper."""
        return bool(self.layer_ids[0] == 0 and not self.pooled)

    @property
    def layers(self) -> int:
        return int(self.pi.shape[0])

    @property
    def provenance(self) -> str:
        return str(self.meta.get("provenance") or "unknown")


def load_routing(path_text: str) -> HistogramRouting:
    """Read ``--routing``'s histogram (or trace) and its per-layer π as ``plan --routing`` does."""
    from moeroof.data.io import load_any
    from moeroof.data.presets import bench_model
    from moeroof.models.plan import routing_from_spec

    if path_text.strip().lower() in ("uniform",) or path_text.strip().lower().startswith(("zipf", "dirichlet")):
        raise UsageError(f"--routing: takes a histogram .csv (or a trace); for {path_text!r} give --family {path_text}")
    path = input_path(path_text)
    if path.suffix.lower() == ".parquet":
        raise UsageError(f"--routing: {path}: a Parquet trace is already a trace; give a histogram .csv (or .npz/.npy)")
    data = load_any(path)
    # routing_from_spec checks E and K against a model: one with the file's own (only E, K and
    # the name are read)
    name, layers = str(data.meta.get("model") or path.stem), len(data.layer_ids)
    stand_in = bench_model(
        name, experts=data.experts, top_k=data.top_k, moe_layers=layers, expert_bytes=1, flops_per_token=1
    )
    routing = routing_from_spec(str(path), stand_in)
    pi = np.asarray(routing.pi, dtype=float)
    summed = len(data.layer_ids) != pi.shape[0]  # a histogram summed over layers: one row for all
    ids = tuple(range(pi.shape[0])) if summed else tuple(int(x) for x in data.layer_ids)
    notes = list(routing.notes)
    pooled = summed or bool(getattr(data, "layers_summed", False))
    if pooled:
        notes.append("the histogram is summed over layers: the trace has one layer drawn from the pooled popularity")
    return HistogramRouting(path, int(data.experts), int(data.top_k), ids, pi, dict(data.meta), tuple(notes), pooled)


def _source_knobs(args: argparse.Namespace, routing: HistogramRouting | None):
    """``(family, skew, experts, top_k, skew_prior)`` of ``--family`` (``prior``: the skew prior
    for E experts) or of the ``--routing`` histogram, whose E, K and layers no flag may contradict."""
    skew_prior = None
    skew: float | None
    if routing is None:
        experts = 256 if args.experts is None else args.experts
        top_k = 8 if args.top_k is None else args.top_k
        if args.family.strip().lower() == "prior":
            from moeroof.data.skew_prior import committed_skew_prior

            # the skew prior's median α for a model of this many experts (moeroof.studies.skew_prior)
            skew_prior = committed_skew_prior().for_experts(experts)
            family, skew = "dirichlet", float(skew_prior.alpha)
        else:
            family, skew = parse_family(args.family)
    else:
        family, skew = "histogram", None
        experts, top_k = routing.experts, routing.top_k
        for flag, given, own in (
            ("--experts", args.experts, experts),
            ("--top-k", args.top_k, top_k),
            ("--layers", args.layers, routing.layers),
        ):
            if given is not None and given != own:
                raise UsageError(
                    f"{flag}: {given} disagrees with --routing {routing.path} ({own}): --routing takes E, K and "
                    "the layers from the histogram; leave the flag out"
                )
    return family, skew, experts, top_k, skew_prior


def trace_knobs(args: argparse.Namespace, routing: HistogramRouting | None = None) -> dict[str, Any]:
    """The parsed knobs (plain JSON values), every flag checked before anything is sampled;
    ``routing``: the ``--routing`` histogram (E, K and the layers are its own)."""
    family, skew, experts, top_k, skew_prior = _source_knobs(args, routing)
    streams, steps = args.streams, args.steps
    if top_k > experts:
        raise UsageError(f"--top-k: {top_k} exceeds --experts {experts}")
    if args.rho is not None and args.rho_profile is not None:
        raise UsageError("--rho-profile: give --rho (one value) or --rho-profile (one per layer), not both")
    profile = args.rho_profile
    layers = routing.layers if routing is not None else args.layers or (8 if profile is None else len(profile))
    if profile is not None and len(profile) != layers:
        what = f"the histogram has {layers} layers" if routing is not None else f"--layers is {layers}"
        raise UsageError(f"--rho-profile: {len(profile)} values but {what} (one value per layer)")
    given = args.rho is not None or profile is not None or args.locality is not None
    if args.independent and given:
        raise UsageError("--independent: leave out --rho, --rho-profile and --locality (it sets no locality at all)")
    prior = None
    rho: float | list[float] = profile if profile is not None else 0.0 if args.rho is None else args.rho
    locality = args.locality
    if not given and not args.independent:
        # nothing said about locality: what real decode does (the locality prior), said in the notes
        from moeroof.data.locality import read_locality_prior
        from moeroof.models.locality import Locality

        prior = read_locality_prior()
        c_per_expert = Locality.from_summary(prior).centre_for(experts, top_k)[1]
        rho, locality = prior.rho, None if math.isinf(c_per_expert) else c_per_expert * experts
    context, prompt, seed = args.step_context, args.prompt_tokens, args.seed
    # one step's Gumbel scores and popularity parts: a few (streams × layers × experts) arrays
    # the error names the flag that made the product large (--streams 2^40 was said as --experts)
    flag, _ = max((("--streams", streams), ("--layers", layers), ("--experts", experts)), key=lambda f: f[1])
    check_replicate_memory(
        flag, 4, experts * streams * layers, f"{streams} streams × {layers} layers × {experts} experts"
    )
    ids = (prompt + steps) * streams * layers * top_k
    if ids > MAX_IDS:
        flag, _ = max(
            (("--steps", prompt + steps), ("--prompt-tokens", 2 * prompt), ("--streams", streams)), key=lambda f: f[1]
        )
        raise UsageError(
            f"{flag}: (P + T)·M·L·K = {ids} expert ids ({ids * 4 / 2**30:.1f} GiB) is more than this command "
            f"writes ({MAX_IDS}); fewer steps, streams or layers"
        )
    knobs = {"family": family, "skew": skew, "rho": rho, "locality_c": locality, "step_context_c": context}
    knobs.update(prompt_tokens=prompt, streams=streams, steps=steps, experts=experts, top_k=top_k, layers=layers)
    knobs["seed"] = seed
    if routing is not None:  # only then: a family's knobs (and its trace's bytes) are as they were
        knobs.update(routing=str(routing.path), first_layer_without_locality=routing.holds_first_layer)
    if prior is not None:
        knobs["locality_prior"] = prior.label()
    if skew_prior is not None:
        knobs["skew_prior"] = skew_prior.label()
    return knobs


def knobs_command_line(k: dict[str, Any]) -> str:
    """The knobs as the command line that reproduces them (output path left out)."""
    from moeroof.cli.output import spelled

    routing, rho = k.get("routing"), k["rho"]
    # the skew prior by name: its α in full would not fit %g
    family = "prior" if k.get("skew_prior") else k["family"] if k["skew"] is None else f"{k['family']}:{k['skew']:g}"
    options = {"--routing": routing, "--family": None if routing is not None else family}
    if isinstance(rho, list):
        options["--rho-profile"] = ",".join(f"{r:g}" for r in rho)
    else:
        options["--rho"] = f"{rho:g}"
    for flag, c in (("--locality", k["locality_c"]), ("--step-context", k["step_context_c"])):
        options[flag] = None if c is None else f"{c:g}"
    options.update({"--prompt-tokens": k["prompt_tokens"] or None, "--streams": k["streams"], "--steps": k["steps"]})
    if routing is None:  # --routing: the histogram's
        options.update({"--experts": k["experts"], "--top-k": k["top_k"], "--layers": k["layers"]})
    return spelled(["moeroof", "trace"], [*options.items(), ("--seed", k["seed"])])


def sample_from_knobs(k: dict[str, Any], popularity: np.ndarray | None = None) -> Any:
    """The trace (prompt_tokens + steps, streams, layers, K) the knobs describe; ``popularity``
    (layers, E): the Plackett–Luce weights of ``--routing`` (:func:`moeroof.models.routing.weights_from_inclusion`)."""
    from moeroof.models.routing import Dirichlet, Uniform, Zipf, sample_trace

    if popularity is not None or k["family"] == "uniform":
        model: Any = Uniform(k["experts"], k["top_k"])  # with popularity: only E and K are read
    else:
        model = (Zipf if k["family"] == "zipf" else Dirichlet)(k["experts"], k["top_k"], k["skew"])
    from moeroof.models.locality import layer_knobs

    # the knobs hold on every layer but the first MoE layer, which has no locality (as everywhere
    # in the suite: moeroof.models.locality, Depth); with a --rho-profile the layers are the user's
    literal = isinstance(k["rho"], list) or not k.get("first_layer_without_locality", True)
    c = np.inf if k["locality_c"] is None else k["locality_c"]
    rho_l, c_l = (np.asarray(k["rho"], dtype=float), c) if literal else layer_knobs(k["rho"], c, k["layers"])
    extra: dict[str, Any] = {}
    if k["locality_c"] is not None:
        extra.update(c=c_l, groups=k["streams"], scope="trace")
    if k["step_context_c"] is not None:
        extra.update(c_step=k["step_context_c"])
    if popularity is not None:
        extra.update(popularity=popularity)
    rng = np.random.default_rng(k["seed"])
    return sample_trace(
        model, k["steps"], k["streams"], k["layers"], rng, rho=rho_l, prompt_tokens=k["prompt_tokens"], **extra
    )


def _prior_notes(knobs: dict[str, Any]) -> list[str]:
    """The notes naming the priors a trace's knobs came from (locality, skew)."""
    notes = []
    if knobs.get("locality_prior"):
        notes.append(
            f"stickiness and per-stream hot sets from the {knobs['locality_prior']}; --independent for "
            "independent tokens, --rho / --locality to set them"
        )
    if knobs.get("skew_prior"):
        notes.append(f"each layer's popularity from the {knobs['skew_prior']}: Dirichlet α = {knobs['skew']:.3g}")
    return notes


def _draw(knobs: dict[str, Any], routing: HistogramRouting | None) -> tuple[np.ndarray, float | None]:
    """``(top-k ids, the weights' largest error against π or None)`` drawn from the knobs (and the
    histogram's popularity with ``--routing``)."""
    popularity, weights_error = (None, None)
    with Progress("trace") as progress:
        if routing is not None:
            progress(0, 2, f"the weights of {routing.layers} layers")
            from moeroof.models.routing import weights_from_inclusion

            popularity, weights_error = weights_from_inclusion(routing.pi, routing.top_k)
            progress(1, 2, "drawing the tokens")
        topk = sample_from_knobs(knobs, popularity)
    return topk, weights_error


def _routing_provenance(
    routing: HistogramRouting,
    knobs: dict[str, Any],
    topk: np.ndarray,
    weights_error: float | None,
    meta: dict[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """With ``--routing``: the histogram's provenance into ``meta`` and ``notes``; returns the
    frequency check of the drawn trace."""
    detail = f"{routing.provenance} popularity (the per-layer expert frequencies of {routing.path}), synthetic order"
    meta.update(
        model=str(routing.meta.get("model") or routing.path.stem),
        layer_ids=list(routing.layer_ids),
        derived_from=str(routing.path),
        routing_source=routing.meta.get("source"),
        routing_provenance=routing.provenance,
        provenance_detail=detail,
    )
    notes.extend(routing.notes)
    how = (
        "stickiness / hot sets (--rho, --locality, --step-context) around the histogram's popularity: "
        "the frequencies follow the knobs, not π exactly"
        if _knobs_order_tokens(knobs)
        else "independent tokens, each including expert i of layer l with the histogram's frequency π_li"
    )
    notes.append(f"drawn from {routing.path}: {detail} — {how}")
    frequencies = _frequency_check(topk, routing, knobs["experts"])
    frequencies["weights_max_error"] = weights_error
    if weights_error is not None and weights_error > 1e-6:
        notes.append(
            f"the weights reach the histogram's frequencies within {weights_error:.2g} only (a layer whose "
            "popularity is nearly degenerate); the draw is that close to π"
        )
    return frequencies


def _write(out: Path, topk: np.ndarray, meta: dict[str, Any], force: bool) -> None:
    from moeroof.data.io import write_trace

    with writing_new(out):
        if out.suffix.lower() == ".parquet":  # one row per live token, row groups by steps
            from moeroof.data.trace_parquet import write_parquet_trace

            write_parquet_trace(out, topk, meta, overwrite=force)
        else:
            write_trace(out, topk, meta, overwrite=force)


def trace_report(args: argparse.Namespace) -> dict[str, Any]:
    """Sample, write, and return the ``trace`` JSON object."""
    from moeroof.models.routing import consecutive_overlap

    out = new_output(args, (".npz", ".npy", ".parquet"), ".npz, .npy or .parquet")
    routing = None if args.routing is None else load_routing(args.routing)
    if routing is not None:
        from moeroof.cli.output import refuse_overwriting
        from moeroof.data.io import sidecar_path

        hist = routing.path
        refuse_overwriting(out, [hist, sidecar_path(hist)], f"--routing {hist} (or its sidecar)", name=out)
    knobs = trace_knobs(args, routing)
    topk, weights_error = _draw(knobs, routing)
    source = knobs_command_line(knobs)
    meta: dict[str, Any] = {"model": "synthetic", "experts": knobs["experts"], "top_k": knobs["top_k"]}
    meta.update(layer_ids=list(range(knobs["layers"])), source=source, provenance="projected", knobs=knobs)
    meta["prompt_steps"] = knobs["prompt_tokens"]
    notes = _prior_notes(knobs)
    frequencies: dict[str, Any] = {}
    if routing is not None:
        frequencies = _routing_provenance(routing, knobs, topk, weights_error, meta, notes)
    _write(out, topk, meta, bool(args.force))
    overlap = consecutive_overlap(topk[knobs["prompt_tokens"] :]) if knobs["steps"] > 1 else None
    rep = {
        "path": str(out),
        "shape": list(topk.shape),
        "steps": int(topk.shape[0]),
        "prompt_steps": knobs["prompt_tokens"],
    }
    rep.update({k: knobs[k] for k in ("streams", "layers", "experts", "top_k")})
    rep.update(model=meta["model"], knobs=knobs, source=source, provenance="projected")
    rep.update({k: meta.get(k) for k in ("derived_from", "provenance_detail")})
    rep.update(consecutive_overlap=None if overlap is None else [float(x) for x in overlap], notes=notes)
    if frequencies:
        rep["frequencies"] = frequencies
    return jsonable(rep)


def _knobs_order_tokens(k: dict[str, Any]) -> bool:
    """Whether a knob gives the tokens an order beyond independent draws (stickiness, hot sets)."""
    rho = k["rho"] if isinstance(k["rho"], list) else [k["rho"]]
    return any(r > 0 for r in rho) or k["locality_c"] is not None or k["step_context_c"] is not None


def _frequency_check(topk: np.ndarray, routing: HistogramRouting, experts: int) -> dict[str, Any]:
    """The drawn trace's per-layer inclusion frequencies against the histogram's π: the largest
    gap and the largest binomial standard error sqrt(π(1 − π)/T) at the T tokens drawn."""
    from moeroof.models.routing import histogram_from_trace

    counts = histogram_from_trace(topk, experts).astype(float)
    tokens = float(topk.shape[0] * topk.shape[1])
    freq = counts / tokens
    gap = np.abs(freq - routing.pi)
    se = np.sqrt(routing.pi * (1.0 - routing.pi) / tokens)
    return {
        "tokens_per_layer": int(tokens),
        "max_abs_deviation": float(gap.max()),
        "max_binomial_stderr": float(se.max()),
    }


def print_trace(rep: dict[str, Any]) -> None:
    print(f"wrote {rep['path']}: {' × '.join(map(str, rep['shape']))} (steps × streams × layers × K), projected")
    if rep.get("provenance_detail"):
        print(f"provenance: projected — {rep['provenance_detail']}")
    print(f"knobs: {rep['source']}")
    freq = rep.get("frequencies")
    if freq:
        print(
            f"drawn frequencies against the histogram's: largest gap {fmt(freq['max_abs_deviation'], 4)} over "
            f"{freq['tokens_per_layer']} tokens per layer (binomial standard error up to "
            f"{fmt(freq['max_binomial_stderr'], 4)})"
        )
    if rep["prompt_steps"]:
        print(f"the first {rep['prompt_steps']} steps are the prompt (cache --warmup {rep['prompt_steps']} skips them)")
    if rep["consecutive_overlap"] is not None:
        rows = [[str(i), fmt(v, 3)] for i, v in enumerate(rep["consecutive_overlap"])]
        print(table(["layer", "shared with the previous token (decode)"], rows, ">>"))
    for note in rep.get("notes", []):
        print(f"note: {note}")


#: ``--format csv``: the one row's columns (the written trace's shape and knobs)
CSV_COLUMNS: tuple[str, ...] = ("path", "steps", "prompt_steps", "streams", "layers", "experts", "top_k", "family")
CSV_COLUMNS += ("skew", "routing", "rho", "locality_c", "step_context_c", "seed", "mean_consecutive_overlap", "model")
CSV_COLUMNS += ("provenance",)


def trace_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row, the written trace's shape and knobs (a ρ profile as R0;R1;…)."""
    k = rep["knobs"]
    overlap = rep.get("consecutive_overlap")
    row = {
        **{c: rep.get(c) for c in CSV_COLUMNS},
        **{c: k.get(c) for c in ("family", "skew", "routing", "locality_c", "step_context_c", "seed")},
        "rho": ";".join(f"{r:g}" for r in k["rho"]) if isinstance(k["rho"], list) else k["rho"],
        "mean_consecutive_overlap": None if not overlap else float(np.mean(overlap)),
    }
    return list(CSV_COLUMNS), [[row[c] for c in CSV_COLUMNS]]


run = runner(trace_report, print_trace, trace_csv)
