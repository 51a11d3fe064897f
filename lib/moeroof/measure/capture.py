"""Routing witnessed on a real MoE checkpoint: B distinct prompts decoded together, every token's
top-K expert ids per MoE layer recorded from the model's own router modules.

How the routers are hooked. In transformers 5 every supported family routes through one module
per MoE layer whose forward returns ``(router_logits, routing_weights, expert_indices)``:
``MixtralTopKRouter``, ``Qwen2MoeTopKRouter``, ``Qwen3MoeTopKRouter``, ``OlmoeTopKRouter``,
``GptOssTopKRouter`` (``mlp.router``, top-K of the biased logits), ``DeepseekV3TopkRouter`` and
``Glm4MoeTopkRouter`` (``mlp.gate``: sigmoid scores plus the ``e_score_correction_bias``, the
top ``topk_group`` of ``n_group`` groups, then top-K inside them). A forward hook on each
records ``expert_indices`` — the ids the experts module is then called with, so the
group-limited choice of DeepSeek-V3 and GLM-4-MoE is recorded as made, not re-derived from the
logits — ordered by routing weight, largest first. The layer is the ``layers.<i>.`` in the
module's name; the routers found must be exactly the MoE layers ``config.json`` describes.

Phases. ``generate`` runs one prefill forward over the left-padded prompts, then one decode
forward per new token: N new tokens are 1 prefill and N − 1 decode steps, decode step t feeding
the stream's t-th generated token. The trace's ``topk`` (steps × streams × layers × K) holds the
decode steps only (``meta["phase"] = "decode"``); a stream whose EOS came out at or before step
t has ``-1`` there (it would have left the batch). The prefill is not a step of the decode loop:
its ids are stored apart, as the ``prefill`` array of the ``.npz`` (streams × the longest
prompt × layers × K, left-aligned as the prompts were padded: stream s's prompt token j sits at
position ``L − len_s + j``, ``-1`` on the padding; described by ``meta["prefill"]``), and
counted into the histogram, which holds every routed prompt token (padding excluded) and every
live decode token, with the split in its sidecar's ``phases``.

Memory: the decode ids live in one preallocated (N − 1) × B × layers × K int16 array (int32
past 32,767 experts), the prefill ids in one B × L × layers × K array, both sized through
:func:`moeroof.core.limits.check_allocation` before the model runs.
Decoding is greedy (deterministic: the same checkpoint, prompts and dtype give the same trace).

torch and transformers are imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from moeroof.core import atomic
from moeroof.core.input_files import open_input
from moeroof.core.limits import check_allocation
from moeroof.data import hf_config
from moeroof.data.hf_config import MoELayout
from moeroof.data.io import InputError, guard_target, histogram_parts, trace_parts

__all__ = [
    "INSTALL_HINT",
    "DTYPES",
    "CaptureResult",
    "require_capture_packages",
    "read_prompts",
    "tokenize_prompts",
    "load_checkpoint",
    "find_routers",
    "capture_routing",
    "capture_meta",
    "write_capture",
    "prefill_path",
]

INSTALL_HINT = "pip install 'moeroof[capture]'"
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: router modules of the supported families end with this class-name suffix (TopKRouter / TopkRouter)
_ROUTER_CLASS = re.compile(r"Top[Kk]Router$")


def require_capture_packages() -> tuple[Any, Any]:
    """``(torch, transformers)``, or a ValueError saying how to install them."""
    try:
        import torch
        import transformers
    except ImportError as err:
        raise ValueError(
            f"capturing routing needs torch and transformers ({err.name or err} is not installed): {INSTALL_HINT}"
        ) from None
    return torch, transformers


# ----------------------------------------------------------------------------- prompts


def read_prompts(path: str | Path) -> list[str | list[int]]:
    """Prompts from a file: ``.jsonl``/``.json`` (one a line: a list of token ids, a string, or an
    object with ``input_ids`` or ``prompt``/``text``), else plain text (one prompt a non-empty line)."""
    path = Path(path)
    try:
        with open_input(path, text=True) as fh:  # a FIFO refused, never waited on
            text = fh.read()
    except FileNotFoundError:
        raise InputError(path, None, "file", "no such prompt file") from None
    except OSError as err:
        raise InputError(path, None, "file", f"cannot read the prompt file: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise InputError(path, None, "file", f"not UTF-8 text ({err})") from None
    prompts: list[str | list[int]] = []
    jsonl = path.suffix.lower() in (".jsonl", ".json")
    for row, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if not jsonl:
            prompts.append(line)
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(path, row, "prompt", f"not a JSON line ({err})") from None
        if isinstance(item, dict):
            item = item.get("input_ids", item.get("prompt", item.get("text")))
        token_ids = isinstance(item, list) and bool(item) and all(type(t) is int and t >= 0 for t in item)
        if not (token_ids or (isinstance(item, str) and item)):
            raise InputError(
                path, row, "prompt", "expected a list of token ids, a string, or {input_ids | prompt | text}"
            )
        prompts.append([int(t) for t in item] if token_ids else item)
    if not prompts:
        raise InputError(path, None, "prompt", "the file holds no prompt")
    return prompts


def file_sha256(path: str | Path) -> str:
    with Path(path).open("rb") as fh:
        return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()


def tokenize_prompts(prompts: Sequence[str | list[int]], model_dir: str | Path, vocab_size: int) -> list[list[int]]:
    """Token ids of each prompt; text needs a tokenizer saved in ``model_dir``."""
    out: list[list[int]] = []
    tokenizer = None
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if tokenizer is None:
                tokenizer = _load_tokenizer(model_dir)
            ids = list(tokenizer(p)["input_ids"])
            if not ids:
                raise InputError(model_dir, i + 1, "prompt", "the tokenizer makes no token of this prompt")
        else:
            ids = list(p)
        bad = [t for t in ids if t >= vocab_size]
        if bad:
            why = f"token id {bad[0]} is not below the vocabulary ({vocab_size})"
            raise InputError(model_dir, i + 1, "prompt", why)
        out.append(ids)
    return out


def _load_tokenizer(model_dir: str | Path) -> Any:
    _, transformers = require_capture_packages()
    try:
        return transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as err:
        why = f"text prompts need a tokenizer in the checkpoint folder ({str(err).splitlines()[0][:200]}); "
        raise InputError(
            model_dir, None, "tokenizer", why + "or give token ids, a JSON list per line in a .jsonl file"
        ) from None


# ----------------------------------------------------------------------------- model


def load_checkpoint(model_dir: str | Path, *, dtype: str = "auto", device: str = "cpu") -> tuple[Any, MoELayout]:
    """The model of a local checkpoint (never downloaded) in eval mode on ``device``, and its layout.

    Refused before torch is touched: a folder without ``config.json``, a family this module does
    not know, a config without routed experts, a missing safetensors file or shard."""
    folder = Path(model_dir)
    config = hf_config.read_config(folder)
    layout = hf_config.moe_layout(config, folder / "config.json")
    missing = hf_config.missing_shards(folder)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        why = f"the safetensors index names {missing[0]}{more}, which is not in the folder"
        raise InputError(folder, None, "weights", why)
    hf_config.read_tensor_table(folder)  # every header readable, its shapes within its data
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    torch, transformers = require_capture_packages()
    transformers.utils.logging.disable_progress_bar()  # the command shows its own progress line
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), local_files_only=True, dtype=torch_dtype, trust_remote_code=False
        )
    except (OSError, ValueError, KeyError) as err:
        why = f"transformers cannot load it: {str(err).splitlines()[0][:300]}"
        raise InputError(folder, None, "model", why) from None
    return model.to(device).eval(), layout


def find_routers(model: Any, layout: MoELayout) -> dict[int, Any]:
    """Layer id → router module; must be exactly the MoE layers of ``layout``."""
    routers: dict[int, Any] = {}
    for name, module in model.named_modules():
        if _ROUTER_CLASS.search(type(module).__name__):
            lay = hf_config.layer_of(name)
            if lay is not None and lay < layout.layers:
                routers[lay] = module
    want = set(layout.moe_layer_ids)
    if set(routers) != want:
        loaded = (
            f"the loaded {hf_config.FAMILIES[layout.family][1]} model has router modules in layers {sorted(routers)}"
        )
        why = f"config.json describes MoE layers {sorted(want)} (a transformers version whose routers differ?)"
        raise InputError("config.json", None, "model", f"{loaded}, {why}")
    return routers


@dataclass
class CaptureResult:
    """Decode ids (steps × streams × layers × K, -1 where a stream is done), the prefill's ids
    (streams × longest prompt × layers × K, left-padded with -1), and what was generated; the
    counts per (layer, expert) and the tokens per phase are counted from the ids."""

    topk: np.ndarray
    prefill: np.ndarray
    layer_ids: list[int]
    experts: int
    top_k: int
    prompt_tokens: list[int]  # per stream
    generated: list[list[int]]  # per stream, up to and including its EOS
    eos_token_ids: list[int]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def decode_tokens(self) -> np.ndarray:
        return (self.topk[..., 0] >= 0).sum(axis=(0, 1)).astype(np.int64)

    @property
    def prefill_tokens(self) -> np.ndarray:
        """Routed prompt tokens per layer (padding excluded)."""
        return (self.prefill[..., 0] >= 0).sum(axis=(0, 1)).astype(np.int64)

    def counts(self, ids: np.ndarray) -> np.ndarray:
        """Counts per (layer, expert) of ``ids`` (``prefill`` or ``topk``: layers on axis 2), -1 not counted."""
        by_layer = [ids[:, :, pos][ids[:, :, pos] >= 0].astype(np.int64) for pos in range(ids.shape[2])]
        return np.array([np.bincount(x, minlength=self.experts) for x in by_layer], dtype=np.int64)

    def histogram(self) -> tuple[np.ndarray, np.ndarray]:
        """(counts layers × experts, tokens per layer) over prefill and decode."""
        return self.counts(self.prefill) + self.counts(self.topk), self.prefill_tokens + self.decode_tokens


class _Recorder:
    """Forward hooks on the routers: the prefill into ``prefill``, each decode step into ``topk``."""

    def __init__(self, routers: dict[int, Any], layout: MoELayout, steps: int, mask: np.ndarray, progress: Any) -> None:
        (streams, length), experts, top_k = mask.shape, layout.experts, layout.top_k
        self.layer_ids = sorted(routers)
        n_layers = len(self.layer_ids)
        dtype = np.int16 if experts <= np.iinfo(np.int16).max else np.int32
        check_allocation(
            (max(steps, 1) + length) * streams * n_layers * top_k,
            np.dtype(dtype).itemsize,
            "(decode steps + prompt length) × streams × layers × K",
        )
        self.topk = np.full((steps, streams, n_layers, top_k), -1, dtype=dtype)
        self.prefill = np.full((streams, length, n_layers, top_k), -1, dtype=dtype)
        self.calls = np.zeros(n_layers, dtype=np.int64)
        self.mask = mask  # (streams, prompt length): True on real prompt tokens
        self.streams, self.top_k = streams, top_k
        self.progress = progress  # (done, of, phase) after each decode step, or None
        self.handles = [
            routers[lay].register_forward_hook(self._hook(lay, pos)) for pos, lay in enumerate(self.layer_ids)
        ]

    def _hook(self, lay: int, pos: int) -> Callable[..., None]:
        last = pos == len(self.layer_ids) - 1

        def hook(module: Any, inputs: Any, output: Any) -> None:
            import torch

            if not (isinstance(output, tuple) and len(output) >= 3):
                raise TypeError(f"router of layer {lay} returned {type(output).__name__}, not (logits, weights, ids)")
            weights, ids = output[1], output[2]
            order = torch.argsort(weights.detach().float(), dim=-1, descending=True, stable=True)
            ids = ids.detach().gather(-1, order).to("cpu").numpy()
            call = int(self.calls[pos])
            self.calls[pos] += 1
            if call == 0:  # the prefill: every prompt position of every stream
                rows = ids.reshape(self.streams, -1, self.top_k)
                if rows.shape[1] != self.mask.shape[1]:
                    raise RuntimeError(
                        f"prefill of layer {lay} saw {rows.shape[1]} positions, not {self.mask.shape[1]}"
                    )
                self.prefill[:, :, pos, :][self.mask] = rows[self.mask]
                return
            step = call - 1
            if ids.shape[0] != self.streams:
                raise RuntimeError(f"decode step {step} of layer {lay} saw {ids.shape[0]} tokens, not {self.streams}")
            if step < self.topk.shape[0]:
                self.topk[step, :, pos, :] = ids
            if last and self.progress is not None:  # max_new_tokens = decode steps + the prefill
                self.progress(step + 2, self.topk.shape[0] + 1, "decode")

        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def _eos_and_pad(model: Any, eos_token_ids: Sequence[int] | None, pad_token_id: int | None) -> tuple[list[int], int]:
    """The end-of-sequence ids (None: the checkpoint's generation config, else its config) and the
    padding id (None: the generation config's, the config's, the first EOS id, else 0)."""
    gen = model.generation_config
    if eos_token_ids is None:
        eos = gen.eos_token_id if gen.eos_token_id is not None else model.config.eos_token_id
        eos_token_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    eos_list = [int(e) for e in eos_token_ids]
    if pad_token_id is None:
        pad_token_id = next(
            (int(p) for p in (gen.pad_token_id, model.config.pad_token_id, *eos_list) if isinstance(p, int)), 0
        )
    return eos_list, int(pad_token_id)


def _left_padded(prompts: Sequence[Sequence[int]], pad_token_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompts' token ids (streams, longest) padded on the left with ``pad_token_id``, so that
    every stream's next token sits in the last column, and the mask of real tokens."""
    length = max(len(p) for p in prompts)
    ids = np.full((len(prompts), length), pad_token_id, dtype=np.int64)
    mask = np.zeros((len(prompts), length), dtype=bool)
    for s, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {s + 1} is empty")
        ids[s, length - len(p) :] = p
        mask[s, length - len(p) :] = True
    return ids, mask


def capture_routing(
    model: Any,
    layout: MoELayout,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_token_ids: Sequence[int] | None = None,
    pad_token_id: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> CaptureResult:
    """Decode ``prompts`` (token ids, one stream each) together, greedily, ``max_new_tokens``
    each, and record the routing (see the module text). ``eos_token_ids``: None takes the
    checkpoint's generation config; an empty list never stops a stream early."""
    torch, transformers = require_capture_packages()
    streams = len(prompts)
    if streams < 1:
        raise ValueError("no prompt to decode")
    if max_new_tokens < 2:
        raise ValueError(f"max_new_tokens must be at least 2 (1 prefill + 1 decode step), got {max_new_tokens}")
    eos_list, pad_token_id = _eos_and_pad(model, eos_token_ids, pad_token_id)
    ids, mask = _left_padded(prompts, pad_token_id)
    recorder = _Recorder(find_routers(model, layout), layout, max_new_tokens - 1, mask, progress)
    config = transformers.GenerationConfig(
        max_new_tokens=max_new_tokens, min_new_tokens=0 if eos_list else max_new_tokens, do_sample=False,
        eos_token_id=eos_list or None, pad_token_id=pad_token_id, use_cache=True,
    )  # fmt: skip
    device = next(model.parameters()).device
    try:
        if progress is not None:
            progress(0, max_new_tokens, "prefill")
        with torch.inference_mode():
            out = model.generate(
                input_ids=torch.as_tensor(ids, device=device),
                attention_mask=torch.as_tensor(mask.astype(np.int64), device=device),
                generation_config=config,
            )
    finally:
        recorder.close()
    new = out[:, ids.shape[1] :].to("cpu").numpy()
    topk = recorder.topk[: max(int(recorder.calls.min()) - 1, 0)]  # the decode steps done
    generated: list[list[int]] = []
    eos_set = set(eos_list)
    for s in range(streams):
        row = [int(t) for t in new[s]]
        end = next((i for i, t in enumerate(row) if t in eos_set), None)
        if end is not None:
            topk[end:, s] = -1  # decode step t feeds token t: live while tokens 0..t hold no EOS
            row = row[: end + 1]
        generated.append(row)
    return CaptureResult(
        topk=topk, prefill=recorder.prefill, layer_ids=recorder.layer_ids, experts=layout.experts, top_k=layout.top_k,
        prompt_tokens=[len(p) for p in prompts], generated=generated, eos_token_ids=eos_list,
        extra={"pad_token_id": int(pad_token_id)},
    )  # fmt: skip


def capture_meta(
    result: CaptureResult,
    *,
    model_dir: str | Path,
    prompts_path: str | Path,
    dtype: str,
    device: str,
    source: str,
    hash_mode: str = "full",
    hash_progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """The trace's meta: model, checkpoint hash (what it covers: ``hash_mode`` of
    :func:`moeroof.data.hf_config.checkpoint_hash`, ``full`` reads every weight byte), dtype,
    prompt file hash, device, date, versions, and where the prefill ids are."""
    torch, transformers = require_capture_packages()
    folder = Path(model_dir)
    config = hf_config.read_config(folder)
    name = str(config.get("_name_or_path") or folder.resolve().name).rstrip("/").split("/")[-1]
    ident = hf_config.checkpoint_hash(folder, mode=hash_mode, progress=hash_progress)
    meta = {"model": name, "family": config.get("model_type"), "experts": result.experts, "top_k": result.top_k}
    meta.update(layer_ids=list(result.layer_ids), source=source, provenance="witnessed", phase="decode")
    meta["prefill"] = {
        "array": "prefill",
        "shape": list(result.prefill.shape),
        "axes": ["stream", "position", "layer", "k"],
        "layout": "left-padded as decoded: stream s's prompt token j at position L - prompt_tokens[s] + j; "
        "-1 on the padding; ids ordered by routing weight, largest first",
    }
    meta.update(checkpoint=str(folder), checkpoint_hash=ident["hash"], checkpoint_hash_mode=ident["mode"])
    meta.update(checkpoint_hash_covers=ident["covers"], dtype=dtype, device=device, prompts=str(prompts_path))
    meta.update(prompts_sha256=file_sha256(prompts_path), date=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    meta.update(decoding="greedy", streams=len(result.prompt_tokens), prompt_tokens=list(result.prompt_tokens))
    meta.update(generated_tokens=[len(g) for g in result.generated], eos_token_ids=list(result.eos_token_ids))
    meta["prefill_tokens_per_layer"] = result.prefill_tokens.tolist()
    meta["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    return meta


def prefill_path(trace_path: str | Path) -> Path:
    """Where a ``.npy`` trace's prefill ids go (``OUT.prefill.npy``); a ``.npz`` holds them inside."""
    trace_path = Path(trace_path)
    return trace_path.with_name(trace_path.stem + ".prefill.npy")


def write_capture(
    result: CaptureResult, meta: dict[str, Any], trace_path: str | Path, histogram_path: str | Path, *, overwrite: bool
) -> tuple[Path, Path]:
    """The trace (decode steps in ``topk``, the prefill ids in ``prefill``: a member of the
    ``.npz``, or ``OUT.prefill.npy`` beside a ``.npy``) and the histogram (prefill + decode)
    with their meta: every file written together, all or none (a full disk or a folder in the way
    leaves what was there, not a new trace beside an old histogram)."""
    trace_path, histogram_path = Path(trace_path), Path(histogram_path)
    counts, tokens = result.histogram()
    trace_meta = {**meta, "histogram": str(histogram_path)}
    prefill = np.ascontiguousarray(result.prefill)
    if trace_path.suffix.lower() == ".npy":
        trace_meta["prefill"] = {**meta["prefill"], "array": str(prefill_path(trace_path))}
        guard_target(prefill_path(trace_path), overwrite)
        parts = trace_parts(trace_path, result.topk, trace_meta, overwrite=overwrite)
        parts.append(atomic.Part(prefill_path(trace_path), lambda fh: np.save(fh, prefill, allow_pickle=False)))
    else:
        parts = trace_parts(trace_path, result.topk, trace_meta, overwrite=overwrite, extra_arrays={"prefill": prefill})
    kept = "family checkpoint checkpoint_hash checkpoint_hash_mode checkpoint_hash_covers dtype device prompts"
    extra = {k: meta[k] for k in (kept + " prompts_sha256 date").split()}
    note = "tokens per layer: every routed prompt token (padding excluded) and every live decode token"
    extra["phases"] = {"prefill": result.prefill_tokens.tolist(), "decode": result.decode_tokens.tolist(), "note": note}
    extra["trace"] = str(trace_path)
    parts += histogram_parts(
        histogram_path, counts, tokens=[int(t) for t in tokens], experts=result.experts, top_k=result.top_k,
        model=meta["model"], source=meta["source"], layer_ids=list(result.layer_ids), provenance="witnessed",
        extra=extra, overwrite=overwrite,
    )  # fmt: skip
    atomic.write_together(parts)
    return trace_path, histogram_path
