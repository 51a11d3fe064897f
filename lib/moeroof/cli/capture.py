"""``moeroof capture``: routing witnessed on a local Hugging Face MoE checkpoint.

::

    moeroof capture MODEL_DIR --prompts FILE --streams B --max-new-tokens N -o OUT.npz
                    [--histogram OUT.csv] [--dtype auto|float32|bfloat16|float16] [--device auto|cpu|cuda[:i]]
                    [--checkpoint-hash full|headers] [--ignore-eos] [--force] [--json]

Loads the checkpoint (never downloaded), decodes the first B prompts of FILE together (left
padding, greedy) for N new tokens each, and records every token's top-K expert ids per MoE
layer from the model's router modules (:mod:`moeroof.measure.capture`). Writes the trace (the
N − 1 decode steps in ``topk``, ``-1`` where a stream has emitted its EOS; every prompt token's
ids in ``prefill``, streams × longest prompt × layers × K, ``-1`` on the left padding — inside
the ``.npz``, or ``OUT.prefill.npy`` beside a ``.npy``) and a histogram of the prefill and decode
tokens together (``OUT.csv`` beside a ``.npz`` trace, ``OUT.histogram.csv`` beside a ``.npy``
one, whose ``OUT.json`` sidecar the histogram's would be, unless ``--histogram``), both ``provenance:
witnessed`` with the model, the checkpoint's hash (``--checkpoint-hash full``, the default:
sha256 of config.json and every byte of every safetensors file; ``headers``: their headers only,
a weaker id for a checkpoint too large to read twice — the meta says which), dtype, prompt file
hash, device, date and the full command line. Needs the ``capture`` extra (``pip install 'moeroof[capture]'``); the parser imports none
of it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from moeroof.cli.flags import Count, UsageError
from moeroof.cli.output import Progress, add_output_arguments, runner, spelled

DTYPES = ("auto", "float32", "bfloat16", "float16")  # moeroof.measure.capture.DTYPES, without importing it


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "capture",
        help="record top-K expert routing of B concurrent prompts on a local Hugging Face MoE checkpoint",
        description=(
            "Decode B distinct prompts together on a local Hugging Face MoE checkpoint (Mixtral, Qwen2-MoE, "
            "Qwen3-MoE, DeepSeek-V3, OLMoE, GPT-OSS, GLM-4-MoE; never downloaded) and record every token's "
            "top-K expert ids per MoE layer from the router modules: a witnessed trace of the decode steps "
            "(the prompts' own ids in a separate prefill array) plus a histogram of prefill and decode. "
            "Needs: pip install 'moeroof[capture]'."
        ),
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", help="the checkpoint folder (config.json + safetensors)")
    p.add_argument(
        "--prompts",
        required=True,
        metavar="FILE",
        help="prompts: a text file (one a line; needs a tokenizer in MODEL_DIR) or a .jsonl "
        "(one a line: a list of token ids, a string, or {input_ids | prompt | text})",
    )
    p.add_argument(
        "--streams",
        required=True,
        metavar="B",
        type=Count(min=1),
        help="concurrent streams: the first B prompts (distinct)",
    )
    p.add_argument(
        "--max-new-tokens",
        required=True,
        metavar="N",
        type=Count(
            min=2,
            too_small="at least 2 (the first token comes from the prefill, the rest are decode steps), got {text!r}",
        ),
        help="new tokens per stream (>= 2)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="trace to write: .npz (topk = decode steps, prefill = prompt tokens), or .npy + .json + .prefill.npy",
    )
    p.add_argument(
        "--histogram",
        help="histogram to write (.csv; default: the trace's path as .csv, OUT.histogram.csv beside a .npy trace)",
    )
    p.add_argument("--dtype", default="auto", choices=DTYPES, help="weights' dtype (default auto: as stored)")
    p.add_argument("--device", default="auto", help="auto (cuda when available, else cpu), cpu, cuda or cuda:i")
    p.add_argument(
        "--checkpoint-hash",
        default="full",
        choices=("full", "headers"),
        help="what the recorded checkpoint hash covers: full (default; config.json and every weight byte) or "
        "headers (config.json and the safetensors headers only: names, dtypes, shapes — not the weights)",
    )
    p.add_argument("--ignore-eos", action="store_true", help="decode N tokens in every stream, through EOS")
    p.add_argument("--force", action="store_true", help="replace the output files if they exist")
    add_output_arguments(p, output=False)


def _output_paths(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    """``(trace path, histogram path, prompts path)``, checked: distinct, new unless --force, and
    none of them the prompt file."""
    out = Path(args.output)
    if out.suffix.lower() not in (".npz", ".npy"):
        raise UsageError(f"-o: expected a .npz or .npy path, got {args.output!r}")
    # a .npy trace's sidecar is OUT.json, which OUT.csv's would be too: its histogram is OUT.histogram.csv
    default_hist = (
        out.with_suffix(".csv") if out.suffix.lower() == ".npz" else out.with_name(f"{out.stem}.histogram.csv")
    )
    hist = Path(args.histogram) if args.histogram else default_hist
    if hist.suffix.lower() != ".csv":
        raise UsageError(f"--histogram: expected a .csv path, got {args.histogram!r}")
    from moeroof.core import atomic
    from moeroof.data.io import sidecar_path
    from moeroof.measure.capture import prefill_path

    targets = [out, hist, sidecar_path(hist)]
    if out.suffix.lower() == ".npy":
        targets += [sidecar_path(out), prefill_path(out)]
    if len({t.resolve() for t in targets}) != len(targets):
        raise UsageError(f"-o {out} and --histogram {hist} would write the same file (their .json sidecars included)")
    there = [t for t in targets if t.exists()]
    if there and not args.force:
        raise UsageError(f"{there[0]} exists (pass --force to replace it)")
    prompts_path = Path(args.prompts)
    for t in targets:
        if prompts_path.exists() and atomic.same_file(t, prompts_path):
            raise UsageError(f"writing {t} would overwrite the prompt file")
    return out, hist, prompts_path


def _device(args: argparse.Namespace, torch: Any) -> str:
    """The torch device ``--device`` names (auto: CUDA when torch sees one)."""
    device = args.device.strip()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif not (device == "cpu" or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise UsageError(f"--device: expected auto, cpu, cuda or cuda:i, got {args.device!r}")
    elif device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device: {device} asked for, but torch sees no CUDA device")
    return device


def _run_capture(args: argparse.Namespace, prompts: list, prompts_path: Path, device: str) -> tuple[Any, Any]:
    """``(model, capture result)``: the checkpoint loaded and the prompts decoded on ``device``."""
    from moeroof.measure.capture import capture_routing, load_checkpoint, tokenize_prompts

    with Progress("capture") as progress:
        progress(0, args.max_new_tokens, "loading the checkpoint")
        model, layout = load_checkpoint(args.model_dir, dtype=args.dtype, device=device)
        ids = tokenize_prompts(prompts, args.model_dir, int(model.config.vocab_size))
        first: dict[tuple[int, ...], int] = {}
        for i, p in enumerate(map(tuple, ids)):
            if first.setdefault(p, i) != i:
                what = f"prompts {first[p] + 1} and {i + 1} are the same tokens; the streams must be distinct"
                raise UsageError(f"{prompts_path}: {what}")
        result = capture_routing(
            model,
            layout,
            ids,
            max_new_tokens=args.max_new_tokens,
            eos_token_ids=[] if args.ignore_eos else None,
            progress=progress,
        )
    return model, result


def _capture_json(
    result: Any, meta: dict, out: Path, hist: Path, streams: int, stored: str, device: str, source: str
) -> dict[str, Any]:
    """The ``capture`` JSON object of a written capture."""
    rep: dict[str, Any] = {"trace": str(out), "histogram": str(hist), "model": meta["model"], "family": meta["family"]}
    rep.update(experts=result.experts, top_k=result.top_k, layer_ids=list(result.layer_ids), streams=streams)
    rep["decode_steps"] = int(result.topk.shape[0])
    rep.update({k: meta[k] for k in ("prompt_tokens", "generated_tokens", "prefill_tokens_per_layer")})
    rep.update(decode_tokens_per_layer=[int(t) for t in result.decode_tokens], dtype=stored, device=device)
    rep.update({k: meta[k] for k in ("checkpoint_hash", "checkpoint_hash_mode", "checkpoint_hash_covers")})
    rep.update(prefill_shape=meta["prefill"]["shape"], source=source, prompts_sha256=meta["prompts_sha256"])
    return {**rep, "provenance": "witnessed"}


def capture_report(args: argparse.Namespace) -> dict[str, Any]:
    streams = args.streams
    out, hist, prompts_path = _output_paths(args)
    from moeroof.measure.capture import capture_meta, read_prompts, require_capture_packages, write_capture

    prompts = read_prompts(prompts_path)
    if len(prompts) < streams:
        raise UsageError(f"--streams: {streams} streams need {streams} prompts; {prompts_path} holds {len(prompts)}")
    prompts = prompts[:streams]
    torch, _ = require_capture_packages()
    device = _device(args, torch)
    model, result = _run_capture(args, prompts, prompts_path, device)
    if result.topk.shape[0] == 0:
        raise UsageError("every stream ended at its first token (EOS): no decode step to record; try --ignore-eos")
    stored = str(next(model.parameters()).dtype).replace("torch.", "")
    source = command_line(args)
    with Progress("checkpoint hash") as hashing:
        meta = capture_meta(
            result,
            model_dir=args.model_dir,
            prompts_path=prompts_path,
            dtype=stored,
            device=device,
            source=source,
            hash_mode=args.checkpoint_hash,
            hash_progress=lambda done, total, name: hashing(done >> 20, max(total >> 20, 1), f"MiB ({name})"),
        )
    write_capture(result, meta, out, hist, overwrite=bool(args.force))
    return _capture_json(result, meta, out, hist, streams, stored, device, source)


def command_line(args: argparse.Namespace) -> str:
    """The command as given, every option spelled out (defaults included): the trace's ``source``."""
    named = ["prompts", "streams", "max_new_tokens", "output", "histogram", "dtype", "device", "checkpoint_hash"]
    named += ["ignore_eos", "force", "json", "format", "report_output"]  # a flag left out: not given, or False
    options = [("-o" if d == "output" else "--" + d.replace("_", "-"), getattr(args, d) or None) for d in named]
    return spelled(["moeroof", "capture", str(args.model_dir)], options)


def print_capture(rep: dict[str, Any]) -> None:
    print(
        f"wrote {rep['trace']}: {rep['decode_steps']} decode steps × {rep['streams']} streams × "
        f"{len(rep['layer_ids'])} MoE layers × K = {rep['top_k']} of {rep['experts']} experts "
        f"({rep['model']}, {rep['family']}, {rep['dtype']} on {rep['device']}; provenance: witnessed)"
    )
    print(
        f"wrote {rep['histogram']}: prefill {sum(rep['prompt_tokens'])} prompt tokens + decode "
        f"{max(rep['decode_tokens_per_layer'])} live tokens per layer; generated {rep['generated_tokens']}"
    )


def capture_csv(rep: dict) -> tuple[list[str], list[list]]:
    """One row per stream: its prompt tokens and generated tokens, with the files written, the
    model and the checkpoint hash on every row (a CSV has no header block)."""
    rows = [
        [s, p, g, rep["trace"], rep["histogram"], rep["model"], rep["checkpoint_hash"], rep["provenance"]]
        for s, (p, g) in enumerate(zip(rep["prompt_tokens"], rep["generated_tokens"]))
    ]
    headers = ["stream", "prompt_tokens", "generated_tokens", "trace", "histogram", "model", "checkpoint_hash"]
    return [*headers, "provenance"], rows


run = runner(capture_report, print_capture, capture_csv)
