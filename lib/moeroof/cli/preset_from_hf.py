"""``moeroof preset-from-hf``: a model preset from a Hugging Face checkpoint's own files.

::

    moeroof preset-from-hf MODEL_DIR -o model.toml [--quant BITS] [--quant-dense BITS] [--kv-bits BITS]
                           [--name NAME] [--force] [--json]

A folder with ``config.json`` alone (before the weights are downloaded) works: every byte is
counted from its shapes and the report's ``read`` says which files were read.

Reads ``config.json`` and the safetensors headers (``model.safetensors``, or the shards named by
``model.safetensors.index.json``) — never a weight — and writes a preset that ``moeroof plan
--model model.toml`` takes: experts, K, MoE layers, bytes per routed expert at the stored dtype
(or at ``--quant BITS`` per parameter), the non-routed bytes, KV bytes per token (MLA latent
cache for DeepSeek-V3, 2 × KV heads × head_dim for GQA), FLOP per token and per context token.
Each number names ``config.json`` or the header/index it came from
(:mod:`moeroof.data.hf_config`); a number resting on a key the file leaves out takes
transformers' default for the family and is written ``assumed = true`` with a note saying which
key and why (the KV cache's dtype is never in config.json, so ``kv_bytes_per_token`` always is).
Needs neither torch nor transformers.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from moeroof.cli.flags import Real, UsageError
from moeroof.cli.output import add_output_arguments, new_output, runner, spelled

#: bits per parameter or per value (--quant, --quant-dense, --kv-bits)
BITS = Real(min=0.0, max=64.0, open_low=True)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "preset-from-hf",
        help="write a model preset (.toml) from a Hugging Face checkpoint's config.json and safetensors headers",
        description=(
            "Write a model preset from a local Hugging Face MoE checkpoint (Mixtral, Qwen2-MoE, Qwen3-MoE, "
            "DeepSeek-V3, OLMoE, GPT-OSS, GLM-4-MoE): config.json and the safetensors headers only, no weights. "
            "Every number names its source; one resting on a key config.json leaves out takes transformers' "
            "default and is marked assumed (so are KV bytes: the KV cache's dtype is not in config.json)."
        ),
    )
    p.add_argument(
        "model_dir",
        metavar="MODEL_DIR",
        help="the checkpoint folder: config.json, and the safetensors headers where they are (config.json alone works)",
    )
    p.add_argument("-o", "--output", required=True, help="preset to write (.toml)")
    p.add_argument(
        "--quant",
        metavar="BITS",
        type=BITS,
        help="routed experts at BITS bits per parameter (4, 4.25, 8, …) instead of the stored dtype",
    )
    p.add_argument(
        "--quant-dense",
        metavar="BITS",
        type=BITS,
        help="the non-routed weights (attention, dense and shared MLPs, routers, embedding, LM head) at BITS "
        "bits per parameter, counted from config.json's shapes",
    )
    p.add_argument(
        "--kv-bits",
        metavar="BITS",
        type=BITS,
        help="the KV cache at BITS bits per value (8 for an FP8 cache); default: the activations' dtype, assumed",
    )
    p.add_argument("--name", help="the preset's name (default: the checkpoint's)")
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    add_output_arguments(p, output=False)


def preset_report(args: argparse.Namespace) -> dict[str, Any]:
    from moeroof.core import atomic
    from moeroof.data.hf_config import preset_fields, preset_toml
    from moeroof.data.io import InputError
    from moeroof.data.presets import load_model

    out = new_output(args, (".toml",))
    if out.is_dir():
        raise UsageError(f"-o: {out} is a folder")
    bits, dense_bits, kv_bits = args.quant, args.quant_dense, args.kv_bits
    preset = preset_fields(
        args.model_dir, quant_bits=bits, name=args.name, quant_dense_bits=dense_bits, kv_bits=kv_bits
    )
    bits_given = (("--quant", bits), ("--quant-dense", dense_bits), ("--kv-bits", kv_bits))
    options = [(flag, None if value is None else f"{value:g}") for flag, value in bits_given]
    words = ["moeroof", "preset-from-hf", str(args.model_dir), "-o", str(out)]
    text = preset_toml(preset, spelled(words, [*options, ("--name", args.name or None)]))
    loaded: list[Any] = []
    config = Path(args.model_dir) / "config.json"

    def loads(temp: Path) -> None:
        """What plan will read, checked before the rename: a preset that does not load is not left
        behind (it was, at OUT, and its error named OUT instead of the config that gave it)."""
        try:
            loaded.append(load_model(temp))
        except InputError as err:
            parts = getattr(err, "errors", [err])
            said = "; ".join(f"{e.field}: {e.message}" for e in parts[1:])
            why = parts[0].message + (f"; {said}" if said else "") + " (in the preset this config makes)"
            raise InputError(config, None, parts[0].field, why) from None

    atomic.write_text(out, text, check=loads)
    model = loaded[0]
    fields, layout = preset["fields"], preset["layout"]
    return {
        "path": str(out),
        "name": model.name,
        "family": layout.family,
        **{k: getattr(model, k) for k in ("experts", "top_k", "moe_layers")},
        "moe_layer_ids": list(layout.moe_layer_ids),
        "dense_layer_ids": list(layout.dense_layer_ids),
        "shared_experts": layout.shared_experts,
        **{k: getattr(model, k) for k in ("expert_bytes", "non_routed_bytes", "kv_bytes_per_token", "flops_per_token")},
        "precision": preset["precision"],
        "sources": {k: v.get("source") or f"assumed: {v.get('note', '')}" for k, v in fields.items()},
        "assumed": sorted(k for k, v in fields.items() if v.get("assumed")),
        "read": preset["read"],
    }


def print_preset(rep: dict[str, Any]) -> None:
    print(
        f"wrote {rep['path']}: {rep['name']} ({rep['family']}), {rep['experts']} experts, top-{rep['top_k']}, "
        f"{rep['moe_layers']} MoE layers ({len(rep['dense_layer_ids'])} dense), {rep['shared_experts']} shared"
    )
    print(
        f"  expert {rep['expert_bytes']:,.0f} B, non-routed {rep['non_routed_bytes']:,.0f} B, "
        f"KV {rep['kv_bytes_per_token']:,.0f} B/token, {rep['flops_per_token'] / 1e9:.3g} GFLOP/token "
        f"({rep['precision']})"
    )
    print(f"  read: {', '.join(rep['read'])}")
    if rep["assumed"]:
        print(f"  assumed (not in config.json or the headers; see each field's note): {', '.join(rep['assumed'])}")


def preset_csv(rep: dict) -> tuple[list[str], list[list]]:
    """One row per field of the preset written: its value and unit, whether it is assumed, and
    its source or the assumption (read back from the TOML, so the rows are what was written)."""
    import tomllib

    with open(rep["path"], "rb") as fh:
        doc = tomllib.load(fh)
    rows = [
        [name, entry.get("value", ""), entry.get("unit", ""), bool(entry.get("assumed", False)),
         entry.get("source", entry.get("note", ""))]
        for name, entry in doc.items()
        if isinstance(entry, dict)
    ]  # fmt: skip
    return ["field", "value", "unit", "assumed", "source"], rows


run = runner(preset_report, print_preset, preset_csv)
