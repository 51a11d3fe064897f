"""A Hugging Face checkpoint's own files → a model preset's numbers, with their sources.

Reads ``config.json`` and the safetensors *headers* (``model.safetensors``, or the shards named
by ``model.safetensors.index.json``): the 8-byte length and the JSON table of tensor names,
dtypes and shapes at the front of each file. No weight is ever read, and nothing is imported
beyond the standard library and numpy, so this works on a machine without torch.

Families (``config.json``'s ``model_type``) and the keys read for each:

============  =====================  ====================  =========================================
family        routed experts         experts per token     MoE layers
============  =====================  ====================  =========================================
mixtral       num_local_experts      num_experts_per_tok   every layer
qwen2_moe     num_experts            num_experts_per_tok   (i+1) % decoder_sparse_step == 0, not in
                                                           mlp_only_layers; + one shared expert of
                                                           shared_expert_intermediate_size
qwen3_moe     num_experts            num_experts_per_tok   as qwen2_moe, no shared expert
deepseek_v3   n_routed_experts       num_experts_per_tok   i >= first_k_dense_replace
                                                           (moe_layer_freq is ignored, as transformers'
                                                           DeepseekV3DecoderLayer does); n_shared_experts;
                                                           MLA attention
olmoe         num_experts            num_experts_per_tok   every layer
gpt_oss       num_local_experts      num_experts_per_tok   every layer (experts with biases)
glm4_moe      n_routed_experts       num_experts_per_tok   as deepseek_v3, GQA attention
============  =====================  ====================  =========================================

Bytes come from the headers when every file is present (the sum of each tensor's elements ×
its dtype's size; routed experts are the tensors under ``.experts.``, not ``shared_expert``),
else from ``config.json``'s shapes × its ``dtype`` (an index without its shards: the index's
``total_size`` then gives the non-routed rest). Layers past ``num_hidden_layers`` (DeepSeek's
multi-token-prediction module) are not part of a decode step and are left out.

What the file does not say is *assumed*, never silently filled in. A key a real ``config.json``
may leave out (``num_key_value_heads``, ``head_dim``, ``decoder_sparse_step``,
``mlp_only_layers``, ``first_k_dense_replace``, ``n_shared_experts``, the MLA ranks, GPT-OSS's
``layer_types``, …) takes the default of transformers' own config class for the family
(:data:`TRANSFORMERS_DEFAULTS`, read from ``models/<family>/configuration_<family>.py`` of
transformers 5), so the preset describes the model transformers would build from that file, and
every field it feeds is written ``assumed = true`` with a ``note`` naming the key and the
default. The KV cache's dtype is never in ``config.json``: ``kv_bytes_per_token`` takes the
activations' dtype (transformers' ``DynamicCache`` keeps K and V in it) and is always assumed.
A config without ``torch_dtype``/``dtype`` takes the stored dtype from the safetensors headers.
Every header entry's shape must agree with its ``data_offsets`` and lie inside its file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moeroof.core.input_files import open_input, read_input_bytes
from moeroof.core.limits import MAX_JSON_BYTES, check_document
from moeroof.data.io import InputError

__all__ = [
    "FAMILIES",
    "CONFIG_NAME",
    "INDEX_NAME",
    "SINGLE_NAME",
    "DTYPE_BYTES",
    "MoELayout",
    "TensorTable",
    "read_config",
    "moe_layout",
    "read_tensor_table",
    "checkpoint_hash",
    "HASH_MODES",
    "weight_files",
    "missing_shards",
    "config_value",
    "TRANSFORMERS_DEFAULTS",
    "DENSE_MODEL_TYPES",
    "preset_fields",
    "preset_toml",
]

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

#: model_type → (routed-experts keys, the first present wins; family's readable name; transformers'
#: config class). Hub configs spell the count as the family's own key; transformers 5 may save it
#: under the alias it maps.
FAMILIES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "mixtral": (("num_local_experts", "num_experts"), "Mixtral", "MixtralConfig"),
    "qwen2_moe": (("num_experts", "num_local_experts"), "Qwen2-MoE", "Qwen2MoeConfig"),
    "qwen3_moe": (("num_experts", "num_local_experts"), "Qwen3-MoE", "Qwen3MoeConfig"),
    "deepseek_v3": (("n_routed_experts", "num_local_experts"), "DeepSeek-V3", "DeepseekV3Config"),
    "olmoe": (("num_experts", "num_local_experts"), "OLMoE", "OlmoeConfig"),
    "gpt_oss": (("num_local_experts", "num_experts"), "GPT-OSS", "GptOssConfig"),
    "glm4_moe": (("n_routed_experts", "num_local_experts"), "GLM-4-MoE", "Glm4MoeConfig"),
}
#: experts per token (gpt-oss's released config also says experts_per_token)
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token")

#: safetensors dtype → bytes per element
DTYPE_BYTES: dict[str, float] = {
    **dict.fromkeys(("F64", "I64", "U64"), 8),
    **dict.fromkeys(("F32", "I32", "U32"), 4),
    **dict.fromkeys(("F16", "BF16", "I16", "U16"), 2),
    **dict.fromkeys(("F8_E4M3", "F8_E5M2", "F8_E8M0", "I8", "U8", "BOOL"), 1),
}

#: config.json's dtype names → bytes per element
_CONFIG_DTYPES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8}

#: the most bytes a safetensors header may hold (the format's own limit is 100 MB)
MAX_HEADER_BYTES = 100_000_000
#: a model.safetensors.index.json (one entry per tensor: ~14 MB for a 1T-parameter MoE)
MAX_INDEX_BYTES = 256 << 20

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_PER_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_FUSED_EXPERTS = re.compile(r"\.experts\.[A-Za-z0-9_]+$")


# ----------------------------------------------------------------------------- config


def read_config(model_dir: str | Path) -> dict[str, Any]:
    """``MODEL_DIR/config.json`` as a dict; an :class:`InputError` when it is missing or not JSON."""
    path = Path(model_dir) / CONFIG_NAME
    if not Path(model_dir).is_dir():
        raise InputError(model_dir, None, "folder", "no such folder (a local Hugging Face checkpoint is a folder)")
    if not path.exists():
        raise InputError(path, None, "file", "no config.json in the checkpoint folder")
    try:
        # a FIFO refused, never waited on; bounded: check_document refuses a longer file
        text = read_input_bytes(path, MAX_JSON_BYTES).decode("utf-8")
        check_document(text, "config.json", max_bytes=MAX_JSON_BYTES)  # size and nesting, before parsing
        doc = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(path, None, "file", f"not valid JSON ({err})") from None
    except ValueError as err:
        raise InputError(path, None, "file", str(err)) from None
    except OSError as err:  # a folder or a FIFO named config.json
        raise InputError(path, None, "file", f"cannot read: {err.strerror or err}") from None
    if not isinstance(doc, dict):
        raise InputError(path, None, "file", "expected a JSON object")
    return doc


def _int(config: dict[str, Any], key: str, path: Path) -> int:
    return _count(config.get(key), key, path)


def _count(value: Any, key: str, path: Path) -> int:
    """``value`` as a non-negative integer, or an :class:`InputError` naming ``key``."""
    if value is None or isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(path, None, key, f"expected a non-negative integer, got {value!r}")
    return int(value)


#: a default computed from the file: num_attention_heads, or hidden_size // num_attention_heads
PER_HEAD, HEADS, ALTERNATING = "hidden_size // num_attention_heads", "num_attention_heads", "alternating"

#: transformers' defaults (the config classes of transformers 5,
#: ``models/<family>/configuration_<family>.py``; ``head_dim``: the modeling files'
#: ``getattr(config, "head_dim", None) or hidden_size // num_attention_heads``) for the keys a
#: preset reads that a real config.json may leave out. A key taken from here is *assumed*.
#: Qwen2-MoE's and OLMoE's configs have no ``head_dim`` at all (their attention is always
#: hidden_size // num_attention_heads wide), so its absence there is the file's own.
TRANSFORMERS_DEFAULTS: dict[str, dict[str, Any]] = {
    "mixtral": {"num_key_value_heads": 8, "head_dim": PER_HEAD},
    "qwen2_moe": {
        "num_key_value_heads": 16,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "shared_expert_intermediate_size": 5632,
    },
    "qwen3_moe": {"num_key_value_heads": 4, "head_dim": PER_HEAD, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "deepseek_v3": {
        "first_k_dense_replace": 3,
        "n_shared_experts": 1,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
    },
    "olmoe": {"num_key_value_heads": HEADS},
    "gpt_oss": {"num_key_value_heads": 8, "head_dim": 64, "layer_types": ALTERNATING},
    "glm4_moe": {"num_key_value_heads": 8, "head_dim": PER_HEAD, "first_k_dense_replace": 1, "n_shared_experts": 1},
}

#: model types transformers builds without routed experts: refused as "not a Mixture-of-Experts model"
DENSE_MODEL_TYPES = frozenset(
    "llama mistral mistral3 ministral qwen2 qwen3 gemma gemma2 gemma3 gemma3_text phi phi3 gpt2 gpt_neox gptj "
    "falcon olmo olmo2 olmo3 glm glm4 starcoder2 cohere cohere2 granite opt bloom stablelm mpt exaone4 "
    "smollm3 internlm2".split()
)


def config_value(config: dict[str, Any], key: str, family: str) -> tuple[Any, str | None]:
    """``config[key]``, or transformers' default for ``family`` when the file leaves it out:
    ``(value, None)`` from the file, ``(value, note)`` assumed, the note saying what and why.
    A key present as ``null`` is the file's own (transformers reads null as "derive it")."""
    if key in config:
        return config[key], None
    default = TRANSFORMERS_DEFAULTS.get(family, {}).get(key)
    if default is None:
        return None, None
    cls = FAMILIES[family][2] if family in FAMILIES else family
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if default == PER_HEAD:
        if not (isinstance(heads, int) and isinstance(hidden, int) and heads > 0):
            return None, None
        return (
            hidden // heads,
            f"{key} is not in config.json: taken as hidden_size // num_attention_heads = {hidden // heads}, as transformers' modeling code does",
        )
    if default == HEADS:
        return heads, f"{key} is not in config.json: taken as num_attention_heads = {heads} ({cls}'s default)"
    if default == ALTERNATING:
        return None, f"{key} is not in config.json: {cls}'s default, sliding and full attention alternating"
    return default, f"{key} is not in config.json: {cls}'s default {default!r} (transformers 5)"


@dataclass(frozen=True)
class MoELayout:
    """What ``config.json`` says about a model's layers and experts. ``assumed``: field →
    notes on the defaults it rests on (keys the file leaves out; see :func:`config_value`)."""

    family: str  # model_type
    experts: int
    top_k: int
    layers: int
    moe_layer_ids: tuple[int, ...]
    hidden_size: int
    expert_intermediate: int
    dense_intermediate: int
    shared_experts: int  # shared experts per MoE layer
    shared_intermediate: int  # width of all shared experts of a layer together
    sources: dict[str, str] = field(default_factory=dict)
    assumed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def dense_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.layers) if i not in set(self.moe_layer_ids))

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gate, up and down projections; GPT-OSS adds biases)."""
        h, i = self.hidden_size, self.expert_intermediate
        return 3 * h * i + ((2 * i + h) if self.family == "gpt_oss" else 0)


def _defaulted(config: dict[str, Any], key: str, family: str, notes: dict[str, str]) -> Any:
    """:func:`config_value`'s value; its note, where the default was taken, kept in ``notes[key]``."""
    value, note = config_value(config, key, family)
    if note:
        notes[key] = note
    return value


def _defaulted_int(
    config: dict[str, Any], key: str, family: str, path: Path, notes: dict[str, str], null: Any = 0
) -> Any:
    """An integer key, from the file or transformers' default (:func:`_defaulted`); ``null``: what
    an explicit null means."""
    value = _defaulted(config, key, family, notes)
    return null if value is None else _count(value, key, path)


def _moe_family(config: dict[str, Any], path: Path) -> str:
    """The config's ``model_type``, one of :data:`FAMILIES`; an :class:`InputError` names a dense
    model type or an unknown family."""
    model_type = config.get("model_type")
    if model_type in FAMILIES:
        return str(model_type)
    if model_type in DENSE_MODEL_TYPES:
        why = f"not a Mixture-of-Experts model (model_type {model_type!r} has no routed experts)"
        raise InputError(path, None, "model_type", why)
    known = ", ".join(f"{name} ({t})" for t, (_, name, _) in FAMILIES.items())
    raise InputError(path, None, "model_type", f"unknown MoE family {model_type!r} (known: {known})")


def moe_layout(config: dict[str, Any], path: str | Path = CONFIG_NAME) -> MoELayout:
    """The MoE layout of a known family; an :class:`InputError` names a dense model type, an
    unknown family or a config without routed experts. MoE layers follow transformers' decoder
    layers (``modeling_<family>.py``): Qwen's ``(i + 1) % decoder_sparse_step == 0`` and not in
    ``mlp_only_layers``; DeepSeek-V3's and GLM-4-MoE's ``i >= first_k_dense_replace`` (their
    ``moe_layer_freq`` is not read by transformers, so not here either)."""
    path = Path(path)
    model_type = _moe_family(config, path)
    keys = FAMILIES[model_type][0]
    experts_key = next((k for k in keys if k in config), keys[0])
    experts = config.get(experts_key) or 0
    if not isinstance(experts, int) or isinstance(experts, bool) or experts < 1:
        raise InputError(path, None, experts_key, f"not an MoE model: {experts_key} is {experts!r}")
    k_key = next((k for k in TOP_K_KEYS if k in config), TOP_K_KEYS[0])
    top_k = _int(config, k_key, path)
    if not 1 <= top_k <= experts:
        raise InputError(path, None, k_key, f"{top_k} is not between 1 and {experts}")
    layers = _int(config, "num_hidden_layers", path)
    hidden = _int(config, "hidden_size", path)
    sources = {"experts": f"config.json: {experts_key} {experts}", "top_k": f"config.json: {k_key} {top_k}"}
    layer_notes: dict[str, str] = {}
    shared_notes: dict[str, str] = {}
    shared, shared_width = 0, 0
    dense_width = int(config.get("intermediate_size") or 0)
    if model_type in ("mixtral", "olmoe", "gpt_oss"):
        moe_ids = tuple(range(layers))
        expert_width = _int(config, "intermediate_size", path)
        rule = "every layer MoE"
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        step = _defaulted_int(config, "decoder_sparse_step", model_type, path, layer_notes) or 1
        only = _defaulted(config, "mlp_only_layers", model_type, layer_notes) or []
        if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
            raise InputError(path, None, "mlp_only_layers", f"expected a list of layer indices, got {only!r}")
        moe_ids = tuple(i for i in range(layers) if i not in only and (i + 1) % step == 0)
        expert_width = _int(config, "moe_intermediate_size", path)
        rule = f"decoder_sparse_step {step}, mlp_only_layers {list(only)}"
        if model_type == "qwen2_moe":
            shared_width = _defaulted_int(config, "shared_expert_intermediate_size", model_type, path, shared_notes)
            shared = 1 if shared_width else 0
    else:  # deepseek_v3, glm4_moe
        first = _defaulted_int(config, "first_k_dense_replace", model_type, path, layer_notes)
        moe_ids = tuple(i for i in range(layers) if i >= first)
        expert_width = _int(config, "moe_intermediate_size", path)
        shared = _defaulted_int(config, "n_shared_experts", model_type, path, shared_notes)
        shared_width = shared * expert_width
        rule = f"first_k_dense_replace {first}"
        freq = config.get("moe_layer_freq")
        if freq not in (None, 1):
            rule += f" (moe_layer_freq {freq!r} ignored, as transformers ignores it)"
    if not moe_ids:
        because = f" ({'; '.join(layer_notes.values())})" if layer_notes else ""
        raise InputError(path, None, "num_hidden_layers", f"not an MoE model: no layer has routed experts{because}")
    sources["moe_layers"] = f"config.json: num_hidden_layers {layers}, {rule} -> {len(moe_ids)} MoE layers"
    assumed = {k: list(v.values()) for k, v in (("moe_layers", layer_notes), ("shared", shared_notes)) if v}
    widths = (hidden, expert_width, dense_width, shared, shared_width)  # in MoELayout's order
    return MoELayout(model_type, experts, top_k, layers, moe_ids, *widths, sources, assumed)


# ----------------------------------------------------------------------------- safetensors headers


@dataclass(frozen=True)
class TensorTable:
    """Tensor name → (dtype, shape), from the safetensors headers; ``files`` the headers read."""

    tensors: dict[str, tuple[str, tuple[int, ...]]]
    files: tuple[Path, ...]

    def nbytes(self, name: str) -> int:
        dtype, shape = self.tensors[name]
        return int(math.prod(shape) * DTYPE_BYTES[dtype])


def _read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The JSON header of one safetensors file (8-byte little-endian length, then JSON). Each
    tensor's ``data_offsets`` must span exactly its shape × dtype and lie inside the file (the
    format's own rule): a header that declares more than its file holds is refused."""
    try:
        size = path.stat().st_size
        with open_input(path) as fh:  # a FIFO refused, never waited on
            head = fh.read(8)
            if len(head) != 8:
                raise InputError(path, None, "header", "shorter than a safetensors header")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES:
                raise InputError(path, None, "header", f"claims a {length}-byte header (more than 100 MB)")
            raw = fh.read(length)
    except OSError as err:
        raise InputError(path, None, "file", f"cannot read: {err.strerror or err}") from None
    if len(raw) != length:
        raise InputError(path, None, "header", "truncated safetensors header")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(path, None, "header", f"not a safetensors JSON header ({err})") from None
    if not isinstance(doc, dict):
        raise InputError(path, None, "header", "not a safetensors JSON header (expected an object)")
    data_bytes = size - 8 - length
    out = {}
    for name, info in doc.items():
        if name == "__metadata__":
            continue
        if (
            not isinstance(info, dict)
            or info.get("dtype") not in DTYPE_BYTES
            or not isinstance(info.get("shape"), list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in info["shape"])
        ):
            raise InputError(path, None, name, f"unknown tensor entry {info!r}")
        shape = tuple(int(d) for d in info["shape"])
        offsets = info.get("data_offsets")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_bytes
        ):
            raise InputError(
                path, None, name, f"data_offsets {offsets!r} do not lie inside the file's {data_bytes} data bytes"
            )
        want = math.prod(shape) * DTYPE_BYTES[info["dtype"]]
        if offsets[1] - offsets[0] != want:
            why = (
                f"shape {list(shape)} of {info['dtype']} is {want:g} B but its data_offsets span "
                f"{offsets[1] - offsets[0]} B"
            )
            raise InputError(path, None, name, why)
        out[name] = (info["dtype"], shape)
    return out


def missing_shards(model_dir: str | Path) -> list[str]:
    """The shards ``model.safetensors.index.json`` names that are not in the folder (empty
    without an index)."""
    folder = Path(model_dir)
    index = folder / INDEX_NAME
    if not index.is_file():
        return []
    return [s for s in _shards(_read_index(index)) if not (folder / s).is_file()]


def read_tensor_table(model_dir: str | Path) -> TensorTable | None:
    """Every tensor's dtype and shape from the headers, or None when the shards an index names are
    not all present (then only the index's ``total_size`` is known).
    An :class:`InputError` when the folder has neither a single file nor an index."""
    if missing_shards(model_dir):
        return None
    paths = weight_files(model_dir)
    return TensorTable({name: entry for p in paths for name, entry in _read_header(p).items()}, tuple(paths))


def _shards(index: dict[str, Any]) -> list[str]:
    """The file names an index's ``weight_map`` names, each once, sorted."""
    return sorted(set(index["weight_map"].values()))


def _read_index(path: Path) -> dict[str, Any]:
    try:
        # a FIFO refused, never waited on; an index names every tensor (~14 MB for a 1T-parameter
        # model), so it gets more room than a sidecar
        raw = read_input_bytes(path, MAX_INDEX_BYTES)
        if len(raw) > MAX_INDEX_BYTES:
            raise InputError(path, None, "file", f"larger than the {MAX_INDEX_BYTES >> 20} MiB an index may be")
        doc = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(path, None, "file", f"not a readable JSON index ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        raise InputError(path, None, "weight_map", "missing: not a safetensors index")
    return doc


#: what :func:`checkpoint_hash` reads: every byte of the weights, or only their headers
HASH_MODES = ("full", "headers")


def weight_files(model_dir: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint: the shards its index names, else ``model.safetensors``;
    an :class:`InputError` names the first shard missing."""
    folder = Path(model_dir)
    index, single = folder / INDEX_NAME, folder / SINGLE_NAME
    if index.is_file():
        missing = missing_shards(folder)
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise InputError(
                folder, None, "weights", f"{INDEX_NAME} names {missing[0]}{more}, which is not in the folder"
            )
        return [folder / s for s in _shards(_read_index(index))]
    if single.is_file():
        return [single]
    why = f"no {SINGLE_NAME} or {INDEX_NAME} (only safetensors checkpoints are read)"
    raise InputError(folder, None, "weights", why)


def checkpoint_hash(
    model_dir: str | Path, *, mode: str = "full", progress: Any = None, chunk: int = 1 << 24
) -> dict[str, Any]:
    """An identity of the checkpoint: ``{"hash": "sha256:…", "mode", "covers", "bytes"}``.

    One sha256 over ``config.json``, the index if any, then each safetensors file in name order,
    each entered as ``name NUL size NUL`` followed by its bytes. ``mode="full"`` hashes every
    byte of every file (the weights themselves: two checkpoints differing in one weight differ),
    streamed ``chunk`` bytes at a time with ``progress(done_bytes, total_bytes, file_name)``
    after each; ``mode="headers"`` hashes only each safetensors file's 8-byte length and JSON
    header (names, dtypes, shapes and offsets, not the values: a weaker id for a checkpoint too
    large to read, which two checkpoints of the same shapes share)."""
    if mode not in HASH_MODES:
        raise ValueError(f"mode must be one of {', '.join(HASH_MODES)}, got {mode!r}")
    folder = Path(model_dir)
    weights = weight_files(folder)
    meta_files = [folder / CONFIG_NAME] + ([folder / INDEX_NAME] if (folder / INDEX_NAME).is_file() else [])
    h = hashlib.sha256()
    for path in meta_files:
        with open_input(path) as fh:
            raw = fh.read()
        h.update(f"{path.name}\0{len(raw)}\0".encode() + raw)
    sizes = [p.stat().st_size for p in weights]
    total = sum(sizes) if mode == "full" else 0
    done = 0
    for path, size in zip(weights, sizes):
        with open_input(path) as fh:
            if mode == "full":
                h.update(f"{path.name}\0{size}\0".encode())
                for block in iter(functools.partial(fh.read, chunk), b""):
                    h.update(block)
                    done += len(block)
                    if progress is not None:
                        progress(done, total, path.name)
            else:
                head = fh.read(8)
                (length,) = struct.unpack("<Q", head) if len(head) == 8 else (0,)
                raw = head + fh.read(min(length, MAX_HEADER_BYTES))
                h.update(f"{path.name}\0{len(raw)}\0".encode() + raw)
                done += len(raw)
    names = ", ".join(p.name for p in meta_files)
    if mode == "full":
        covers = f"{names} and every byte of {len(weights)} safetensors file(s), {total} B (the weights)"
    else:
        covers = (
            f"{names} and the headers of {len(weights)} safetensors file(s) only: names, dtypes and shapes, "
            "not the weights' values"
        )
    return {"hash": "sha256:" + h.hexdigest(), "mode": mode, "covers": covers, "bytes": done}


def is_routed_expert(name: str) -> bool:
    """A routed expert's tensor: ``….experts.<i>.…`` or a fused ``….experts.<proj>`` (GPT-OSS),
    never a shared expert's."""
    if "shared_expert" in name:
        return False
    return bool(_PER_EXPERT.search(name) or _FUSED_EXPERTS.search(name))


def layer_of(name: str) -> int | None:
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


# ----------------------------------------------------------------------------- the preset


_HEADER_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _dtype_bytes(config: dict[str, Any], path: Path, table: TensorTable | None, where: str) -> tuple[int, str, str]:
    """(bytes per activation, dtype name, source): config.json's ``torch_dtype``/``dtype``, else
    the floating dtype holding most of the non-routed tensors' bytes in the headers."""
    key = "torch_dtype" if config.get("torch_dtype") else "dtype"
    name = config.get(key)
    if isinstance(name, str) and name.replace("torch.", "") in _CONFIG_DTYPES:
        name = name.replace("torch.", "")
        return _CONFIG_DTYPES[name], name, f"config.json: {key} {name}"
    if name is None and table is not None:
        by_dtype: dict[str, int] = {}
        for tname, (dt, _) in table.tensors.items():
            if dt in _HEADER_DTYPES and not is_routed_expert(tname):
                by_dtype[dt] = by_dtype.get(dt, 0) + table.nbytes(tname)
        if by_dtype:
            dt = max(by_dtype, key=lambda d: by_dtype[d])
            total = sum(by_dtype.values())
            return (
                int(DTYPE_BYTES[dt]),
                _HEADER_DTYPES[dt],
                f"{where}: config.json gives no dtype; {by_dtype[dt]} of the {total} B of floating "
                f"non-routed tensors are stored as {dt}",
            )
    raise InputError(
        path, None, "dtype", f"config.json gives no known dtype (got {name!r}) and no safetensors header says one"
    )


def _attention(config: dict[str, Any], layout: MoELayout, path: Path) -> dict[str, Any]:
    """Attention parameters per layer, KV values per token per layer, attention FLOP per context
    token per layer, the number of layers whose KV grows with the context, and ``notes``: key →
    what was assumed for a key config.json leaves out (:func:`config_value`)."""
    h, fam = layout.hidden_size, layout.family
    heads = _int(config, "num_attention_heads", path)
    if heads < 1:
        raise InputError(path, None, "num_attention_heads", "must be at least 1")
    notes: dict[str, str] = {}
    full = layout.layers

    def get(key: str, null: Any = 0) -> Any:
        return _defaulted_int(config, key, fam, path, notes, null)

    if fam == "deepseek_v3":
        rope, nope = get("qk_rope_head_dim"), get("qk_nope_head_dim")
        v_dim, kv_rank = get("v_head_dim"), get("kv_lora_rank")
        q_rank = get("q_lora_rank", None)  # null: queries without a low-rank compression
        q = h * q_rank + q_rank * heads * (rope + nope) if q_rank else h * heads * (rope + nope)
        params = q + h * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * h
        kv_values = kv_rank + rope
        what = f"MLA latent cache (kv_lora_rank {kv_rank} + qk_rope_head_dim {rope})"
        flop = 2 * heads * ((kv_rank + rope) + kv_rank)
        flop_what = f"absorbed-MLA decode: 2 x {heads} heads x ({kv_rank + rope} score + {kv_rank} value)"
        kv_keys: tuple[str, ...] = ("kv_lora_rank", "qk_rope_head_dim")
        flop_keys: tuple[str, ...] = kv_keys
    else:
        kv_heads = get("num_key_value_heads", heads)
        head_dim = get("head_dim", h // heads)
        params = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
        kv_values = 2 * kv_heads * head_dim
        what = f"{kv_heads} KV heads x {head_dim} head_dim x 2 (K, V)"
        flop = 4 * heads * head_dim
        flop_what = f"4 x {heads} heads x {head_dim} head_dim (QK and AV)"
        kv_keys, flop_keys = ("num_key_value_heads", "head_dim", "layer_types"), ("head_dim", "layer_types")
        if fam == "gpt_oss":
            types = _defaulted(config, "layer_types", fam, notes)
            if "layer_types" in notes:  # GptOssConfig: sliding on even i, full on odd i
                types = ["full_attention" if (i + 1) % 2 == 0 else "sliding_attention" for i in range(layout.layers)]
            if isinstance(types, list) and len(types) == layout.layers:
                full = sum(1 for t in types if t == "full_attention")
                what += (
                    f", {full} full-attention layers of {layout.layers} "
                    "(sliding-window layers keep a bounded cache, left out)"
                )
    return {
        "params": params,
        "kv_values": kv_values,
        "kv_what": what,
        "flop": flop,
        "flop_what": flop_what,
        "full_layers": full,
        "notes": notes,
        "kv_notes": [notes[k] for k in kv_keys if k in notes],
        "flop_notes": [notes[k] for k in flop_keys if k in notes],
    }


def _mlp_params(h: int, width: int) -> int:
    return 3 * h * width


def _field(value: float, source: str | None = None, *, unit: str | None = None, note: str | None = None) -> dict:
    out: dict[str, Any] = {"value": value}
    if unit is not None:
        out["unit"] = unit
    if source is None:
        out["assumed"] = True
        if note:
            out["note"] = note
    else:
        out["source"] = source
    return out


def _derived(value: float, text: str, notes: list[str], *, unit: str | None = None) -> dict:
    """A field derived as ``text`` says: sourced, or — when it rests on anything config.json
    leaves out (``notes``) — ``assumed = true`` with the derivation and the assumptions as its note."""
    notes = list(dict.fromkeys(notes))  # each once, in order
    if not notes:
        return _field(value, text, unit=unit)
    return _field(value, None, unit=unit, note=f"{'; '.join(notes)} [{text}]")


@dataclass(frozen=True)
class _Stored:
    """A checkpoint's stored bytes (one routed expert, all non-routed weights) and their sources."""

    expert_bytes: int
    expert_source: str
    non_routed: int
    nonrouted_source: str
    nonrouted_notes: list[str]
    precision: str


def _layout_fields(layout: MoELayout) -> dict[str, Any]:
    """The fields config.json's layout gives: experts, top-K, MoE, dense and shared layers, width."""
    h, n_moe = layout.hidden_size, len(layout.moe_layer_ids)
    layer_notes = layout.assumed.get("moe_layers", [])
    return {
        "experts": _field(layout.experts, layout.sources["experts"]),
        "top_k": _field(layout.top_k, layout.sources["top_k"]),
        "moe_layers": _derived(n_moe, layout.sources["moe_layers"], layer_notes),
        "hidden_size": _field(h, f"config.json: hidden_size {h}"),
        "dense_layers": _derived(
            layout.layers - n_moe,
            f"config.json: num_hidden_layers {layout.layers} - {n_moe} MoE layers "
            f"= layers {list(layout.dense_layer_ids)} without routed experts",
            layer_notes,
        ),
        "shared_experts": _derived(
            layout.shared_experts,
            f"config.json: model_type {layout.family}: {layout.shared_experts} shared expert(s) per MoE layer"
            + (f", {layout.shared_intermediate} wide" if layout.shared_experts else ""),
            layout.assumed.get("shared", []),
        ),
    }


def _headers_where(table: TensorTable | None) -> str:
    """How a source names the safetensors headers read ('' when none were)."""
    if table is None:
        return ""
    if len(table.files) == 1 and table.files[0].name == SINGLE_NAME:
        return f"{SINGLE_NAME} header"
    return f"{INDEX_NAME} and the headers of its {len(table.files)} shards"


def _header_bytes(table: TensorTable, layout: MoELayout) -> tuple[dict[int, int], int, int, set[str]]:
    """(routed bytes per MoE layer, non-routed bytes, bytes past the last layer, routed dtypes)."""
    layer_notes = layout.assumed.get("moe_layers", [])
    routed = {lay: 0 for lay in layout.moe_layer_ids}
    non_routed, skipped, stored = 0, 0, set()
    for tname in table.tensors:
        lay = layer_of(tname)
        size = table.nbytes(tname)
        if lay is not None and lay >= layout.layers:
            skipped += size  # e.g. DeepSeek's multi-token-prediction layer: not in a decode step
            continue
        if is_routed_expert(tname):
            if lay not in routed:
                because = f" ({'; '.join(layer_notes)})" if layer_notes else ""
                why = f"a routed expert in layer {lay}, which config.json makes dense{because}"
                raise InputError(table.files[0], None, tname, why)
            routed[lay] += size
            stored.add(table.tensors[tname][0])
        else:
            non_routed += size
    return routed, non_routed, skipped, stored


def _stored_from_headers(table: TensorTable, layout: MoELayout, where: str, tied: bool) -> _Stored:
    """The stored bytes summed from the safetensors headers (every file present)."""
    experts, n_moe = layout.experts, len(layout.moe_layer_ids)
    routed, non_routed, skipped, stored = _header_bytes(table, layout)
    per_layer = set(routed.values())
    if len(per_layer) != 1 or 0 in per_layer:
        raise InputError(
            table.files[0], None, "experts", f"routed-expert bytes differ between MoE layers: {sorted(per_layer)}"
        )
    layer_bytes = per_layer.pop()
    if layer_bytes % experts:
        raise InputError(
            table.files[0], None, "experts", f"{layer_bytes} B of routed experts per layer do not divide by {experts}"
        )
    stored_bytes = layer_bytes // experts
    dtypes = "/".join(sorted(stored))
    expert_source = (
        f"{where}: routed-expert tensors of {n_moe} MoE layers, {layer_bytes} B per layer / {experts} experts "
        f"= {stored_bytes} B ({dtypes}; config.json: {layout.expert_params} params per expert)"
    )
    skip_note = f"; {skipped} B in layers past num_hidden_layers {layout.layers} left out" if skipped else ""
    nonrouted_source = (
        f"{where}: every tensor not a routed expert (attention, dense and shared MLPs, routers, norms, "
        f"embedding{'' if tied else ' and LM head'}) = {non_routed} B{skip_note}"
    )
    precision = dtypes if len(stored) == 1 else f"experts {dtypes}"
    return _Stored(stored_bytes, expert_source, non_routed, nonrouted_source, [], precision)


def _stored_from_config(
    config: dict[str, Any], layout: MoELayout, attn: dict[str, Any], act: tuple[int, str], vocab: int, tied: bool
) -> _Stored:
    """The stored bytes counted from config.json's shapes alone (no weights in the folder)."""
    act_bytes, act_dtype = act
    e_params = layout.expert_params
    bpp, qnote = _config_bits(config, act_bytes)
    stored_bytes = int(round(e_params * bpp))
    expert_source = (
        f"config.json: {e_params} params per expert x {bpp:g} B ({qnote}); no safetensors header read "
        "(config.json alone)"
    )
    params = _non_routed_params(layout, attn, vocab, tied)
    non_routed = int(round(params * act_bytes))
    nonrouted_source = (
        f"config.json alone: {params} non-routed params (attention of "
        f"{layout.layers} layers, dense and shared MLPs, routers, embedding{'' if tied else ' and LM head'}) x "
        f"{act_bytes} B ({act_dtype})"
    )
    nonrouted_notes = [
        *layout.assumed.get("moe_layers", []),
        "no weights read: the stored bytes are counted from config.json's shapes, norms left out",
    ]
    return _Stored(stored_bytes, expert_source, non_routed, nonrouted_source, nonrouted_notes, qnote)


def _stored_from_index(folder: Path, config: dict[str, Any], layout: MoELayout, act_bytes: int) -> _Stored:
    """Routed bytes from config.json's shapes, the rest from the index's total_size (shards missing)."""
    h, experts, n_moe, e_params = layout.hidden_size, layout.experts, len(layout.moe_layer_ids), layout.expert_params
    total = (_read_index(folder / INDEX_NAME).get("metadata") or {}).get("total_size")  # bytes of every tensor
    bpp, qnote = _config_bits(config, act_bytes)
    stored_bytes = int(round(e_params * bpp))
    missing = missing_shards(folder)
    expert_source = (
        f"config.json: 3 x {h} x {layout.expert_intermediate} params (hidden_size x "
        f"{'intermediate_size' if layout.family in ('mixtral', 'olmoe', 'gpt_oss') else 'moe_intermediate_size'}"
        f"{', plus biases' if layout.family == 'gpt_oss' else ''}) = {e_params} x {bpp:g} B ({qnote}); "
        f"{len(missing)} of the shards named by {INDEX_NAME} are not here to read their headers"
    )
    if not isinstance(total, int) or isinstance(total, bool):
        raise InputError(folder, None, "weights", f"{INDEX_NAME} has no metadata.total_size and no shard is here")
    non_routed = total - stored_bytes * experts * n_moe
    nonrouted_source = (
        f"{INDEX_NAME}: total_size {total} B minus {experts} x {n_moe} routed experts x {stored_bytes} B "
        "(config.json); any multi-token-prediction layer is included"
    )
    if non_routed <= 0:
        raise InputError(folder / INDEX_NAME, None, "total_size", f"{total} B is less than the routed experts alone")
    nonrouted_notes = list(layout.assumed.get("moe_layers", []))
    return _Stored(stored_bytes, expert_source, non_routed, nonrouted_source, nonrouted_notes, qnote)


def _weight_fields(
    stored: _Stored,
    layout: MoELayout,
    attn: dict[str, Any],
    vocab: int,
    tied: bool,
    quant_bits: float | None,
    quant_dense_bits: float | None,
) -> tuple[dict, dict, str]:
    """(expert_bytes, non_routed_bytes, precision): as stored, or at the bit widths asked for."""
    e_params, precision = layout.expert_params, stored.precision
    expert_bytes, expert_source = stored.expert_bytes, stored.expert_source
    if quant_bits is not None:
        expert_bytes = int(math.ceil(e_params * quant_bits / 8))
        expert_source = (
            f"config.json: {e_params} params per expert x {quant_bits:g} bits / 8 = {expert_bytes} B "
            f"(the bit width asked for; stored: {stored.expert_bytes} B)"
        )
        precision = f"{quant_bits:g}-bit experts, {precision} resident"
    non_routed, source, notes = stored.non_routed, stored.nonrouted_source, stored.nonrouted_notes
    if quant_dense_bits is not None:
        params = _non_routed_params(layout, attn, vocab, tied)
        non_routed = int(math.ceil(params * quant_dense_bits / 8))
        source = (
            f"config.json: {params} non-routed params (attention, dense and shared MLPs, routers, embedding"
            f"{'' if tied else ', LM head'}; norms left out) x {quant_dense_bits:g} bits / 8 = {non_routed} B "
            "(the bit width asked for)"
        )
        notes = list(layout.assumed.get("moe_layers", []))
        precision = f"{precision}; {quant_dense_bits:g}-bit non-routed weights"
    return _field(expert_bytes, expert_source, unit="B"), _derived(non_routed, source, notes, unit="B"), precision


def _kv_field(attn: dict[str, Any], kv_bits: float | None, act_bytes: int, act_dtype: str) -> dict:
    """kv_bytes_per_token: at the KV precision asked for, else the activations' dtype (assumed)."""
    # the KV cache's dtype is not in config.json: transformers' DynamicCache stores K and V as the
    # attention computes them, in the activations' dtype
    values, what = (
        attn["kv_values"] * attn["full_layers"],
        f"config.json: {attn['kv_what']} x {attn['full_layers']} layers",
    )
    if kv_bits is not None:  # the precision the engine keeps its KV cache in, as the user says it
        kv = int(math.ceil(values * kv_bits / 8))
        return _derived(
            kv, f"{what} x {kv_bits:g} bits / 8 = {kv} B (the KV precision asked for)", attn["kv_notes"], unit="B"
        )
    kv = values * act_bytes
    kv_dtype_note = (
        f"the KV cache's dtype is not in config.json: taken as the activations' {act_dtype} ({act_bytes} B), "
        "as transformers' DynamicCache keeps it (an engine may store it in FP8; --kv-bits says it)"
    )
    return _derived(kv, f"{what} x {act_bytes} B ({act_dtype}) = {kv} B", [*attn["kv_notes"], kv_dtype_note], unit="B")


def _flop_fields(layout: MoELayout, attn: dict[str, Any], vocab: int) -> dict[str, Any]:
    """flops_per_token and attn_flops_per_context_token from config.json's shapes."""
    # FLOP per token: 2 x the parameters a token multiplies by (the embedding is a lookup)
    h, experts, k, n_moe = layout.hidden_size, layout.experts, layout.top_k, len(layout.moe_layer_ids)
    dense = len(layout.dense_layer_ids)
    router = experts * h + (experts if layout.family == "gpt_oss" else 0)
    shared = _mlp_params(h, layout.shared_intermediate) + (
        h if layout.family == "qwen2_moe" and layout.shared_experts else 0
    )
    active = (
        layout.layers * attn["params"]
        + dense * _mlp_params(h, layout.dense_intermediate)
        + n_moe * (router + shared + k * layout.expert_params)
        + vocab * h
    )
    notes = [
        *layout.assumed.get("moe_layers", []),
        *layout.assumed.get("shared", []),
        *(v for key, v in attn["notes"].items() if key != "layer_types"),
    ]
    attn_flop = attn["flop"] * attn["full_layers"]
    return {
        "flops_per_token": _derived(
            2 * active,
            f"config.json: 2 x {active} params per token (attention of {layout.layers} layers, {dense} dense MLPs, "
            f"{n_moe} x (router + {layout.shared_experts} shared + {k} routed experts), LM head; norms left out)",
            notes,
            unit="FLOP",
        ),
        "attn_flops_per_context_token": _derived(
            attn_flop,
            f"config.json: {attn['flop_what']} x {attn['full_layers']} layers = {attn_flop} FLOP",
            attn["flop_notes"],
            unit="FLOP",
        ),
    }


def _description(layout: MoELayout, folder: Path, has_weights: bool) -> str:
    """The preset's one-line description: family, experts, layers and what was read."""
    shared_text = f" + {layout.shared_experts} shared" if layout.shared_experts else ""
    description = (
        f"{FAMILIES[layout.family][1]}: {layout.experts} routed{shared_text} experts, top-{layout.top_k}, "
        f"{len(layout.moe_layer_ids)} MoE layers of {layout.layers} "
        f"({len(layout.dense_layer_ids)} dense), from {folder.name}'s config.json and safetensors headers"
    )
    if not has_weights:
        description = description.replace("config.json and safetensors headers", "config.json alone (no weights)")
    return description


def _files_read(folder: Path, table: TensorTable | None) -> list[str]:
    """The names of the files read: config.json, the index if any, each header read."""
    read = [CONFIG_NAME]
    if (folder / INDEX_NAME).is_file():
        read.append(INDEX_NAME)
    if table is not None:
        read.extend(f"{p.name} (header)" for p in table.files)
    return read


def preset_fields(
    model_dir: str | Path,
    *,
    quant_bits: float | None = None,
    name: str | None = None,
    quant_dense_bits: float | None = None,
    kv_bits: float | None = None,
) -> dict[str, Any]:
    """The preset of the checkpoint in ``model_dir``: ``{"name", "description", "precision",
    "fields": {field: {value, unit?, source | assumed + note}}, "layout": MoELayout, "read"}``.

    ``quant_bits``: routed experts at that many bits per parameter instead of the stored dtype;
    ``quant_dense_bits``: the non-routed weights (attention, dense and shared MLPs, routers,
    embedding, LM head) at that many bits, counted from config.json's shapes; ``kv_bits``: the KV
    cache at that many bits per value. A folder with ``config.json`` alone (before the weights are
    downloaded) works: the bytes come from config.json's shapes at its dtype (or the bits asked
    for), the non-routed bytes are ``assumed`` (norms left out) unless ``quant_dense_bits`` gives
    their width, and ``read`` says which files were read. A field resting on a key config.json
    leaves out is ``assumed`` (module text)."""
    folder = Path(model_dir)
    config = read_config(folder)
    cpath = folder / CONFIG_NAME
    layout = moe_layout(config, cpath)
    has_weights = (folder / INDEX_NAME).is_file() or (folder / SINGLE_NAME).is_file()
    table = read_tensor_table(folder) if has_weights else None
    vocab = _int(config, "vocab_size", cpath)
    tied = bool(config.get("tie_word_embeddings", False))
    attn = _attention(config, layout, cpath)
    fields = _layout_fields(layout)
    where = _headers_where(table)
    act_bytes, act_dtype, act_source = _dtype_bytes(config, cpath, table, where)

    # routed and non-routed bytes: from the headers when present
    if table is not None:
        stored = _stored_from_headers(table, layout, where, tied)
        if layout.assumed.get("moe_layers"):  # the headers hold routed experts in exactly the layers assumed
            fields["moe_layers"]["note"] += f"; the {where} hold routed experts in exactly these layers"
    elif not has_weights:  # config.json alone: every byte from its shapes
        stored = _stored_from_config(config, layout, attn, (act_bytes, act_dtype), vocab, tied)
    else:
        stored = _stored_from_index(folder, config, layout, act_bytes)
    fields["expert_bytes"], fields["non_routed_bytes"], precision = _weight_fields(
        stored, layout, attn, vocab, tied, quant_bits, quant_dense_bits
    )
    fields["kv_bytes_per_token"] = _kv_field(attn, kv_bits, act_bytes, act_dtype)
    fields.update(_flop_fields(layout, attn, vocab))
    fields["activation_bytes"] = _field(act_bytes, act_source, unit="B")
    label = name or str(config.get("_name_or_path") or folder.resolve().name).rstrip("/").split("/")[-1] or "model"
    return {
        "name": label,
        "description": _description(layout, folder, has_weights),
        "precision": precision,
        "fields": fields,
        "layout": layout,
        "stored_expert_bytes": stored.expert_bytes,
        "assumed": {k: v["note"] for k, v in fields.items() if v.get("assumed")},
        "read": _files_read(folder, table),
    }


def _non_routed_params(layout: MoELayout, attn: dict[str, Any], vocab: int, tied: bool) -> int:
    """Parameters outside the routed experts, from config.json's shapes: attention of every layer,
    the dense layers' MLPs, each MoE layer's router and shared experts, the embedding and (untied)
    the LM head; norms and biases are left out (well under 0.1 % of any MoE here)."""
    h, experts = layout.hidden_size, layout.experts
    router = experts * h
    shared = _mlp_params(h, layout.shared_intermediate)
    dense = len(layout.dense_layer_ids) * _mlp_params(h, layout.dense_intermediate)
    n_moe = len(layout.moe_layer_ids)
    return int(layout.layers * attn["params"] + dense + n_moe * (router + shared) + vocab * h * (1 if tied else 2))


def _config_bits(config: dict[str, Any], act_bytes: int) -> tuple[float, str]:
    """Bytes per expert parameter from config.json alone: its quantization_config, else its dtype."""
    q = config.get("quantization_config")
    if isinstance(q, dict):
        method = str(q.get("quant_method", "")).lower()
        if method == "fp8":
            block = q.get("weight_block_size") or [128, 128]
            scale = 4 / (int(block[0]) * int(block[1]))
            return 1 + scale, f"FP8 with a float32 scale per {block[0]}x{block[1]} block (quantization_config)"
        if method == "mxfp4":
            return 4.25 / 8, "MXFP4: 4-bit codes + an 8-bit scale per 32 (quantization_config)"
        raise InputError(
            CONFIG_NAME, None, "quantization_config", f"quant_method {method!r}: its size needs the shards' headers"
        )
    return float(act_bytes), f"{act_bytes} B per parameter (config.json dtype)"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v), ensure_ascii=False)


def preset_toml(preset: dict[str, Any], command: str = "") -> str:
    """The TOML text of a :func:`preset_fields` result (loads with ``load_model``)."""
    layout: MoELayout = preset["layout"]
    lines = [
        f"# {preset['description']}",
        f"# MoE layers {list(layout.moe_layer_ids)}; dense layers {list(layout.dense_layer_ids)}; "
        f"shared experts per MoE layer: {layout.shared_experts}",
    ]
    if command:
        lines.append(f"# written by: {command}")
    lines.append('kind = "model"')
    lines.extend(f"{key} = {_toml_value(preset[key])}" for key in ("name", "description", "precision"))
    lines.append("")
    for key, entry in preset["fields"].items():
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in entry.items())
        lines.append(f"{key} = {{ {inner} }}")
    return "\n".join(lines) + "\n"
