"""Model and hardware presets: TOML files in which every number carries its provenance.

A preset file names its kind and gives each quantity as an inline table::

    kind = "model"
    name = "glm-5.2"
    description = "GLM-5.2, int4 experts streamed from SSD"
    precision = "int4"
    experts = { value = 256, source = "seed 000; colibri docs/benchmarks.md", witnessed = true }
    expert_bytes = { value = 19, unit = "MB", source = "colibri docs: ~19 MB per expert per layer" }
    kv_bytes_per_token = { value = 70, unit = "KiB", assumed = true, note = "not published" }

Each quantity has ``value`` (a number, or a list for curves), ``unit`` where it has a dimension
(converted to SI through :mod:`moeroof.core.units`, and checked against the dimension the field
needs), and exactly one of ``source = "…"`` or ``assumed = true``. ``witnessed = true`` (with
a source) marks a measured number. The tag of each field:

- ``witnessed`` — measured, with its source;
- ``projected`` — sourced but derived (e.g. bytes per expert computed from a config);
- ``assumed`` — a placeholder someone chose.

Results computed from any non-witnessed input are ``projected`` (docs/models.md, provenance). A user's own TOML
works the same way as the shipped ones (``load_model(path)`` / ``load_hardware(path)``); a
bad file gets ``FILE:-: KEY: what is wrong`` (:class:`moeroof.data.io.InputError`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from moeroof.core.input_files import read_input_bytes
from moeroof.core.limits import (
    MAX_EXPERTS,
    MAX_HIDDEN_SIZE,
    MAX_LAYERS,
    MAX_PARAMS,
    MAX_PRESET_BYTES,
    MAX_PRESET_BYTES_PER_S,
    MAX_PRESET_FLOP,
    MAX_PRESET_FLOP_PER_S,
    MAX_PRESET_SECONDS,
    MAX_RECLAIM_EXPONENT,
    MAX_RECLAIM_PENALTY,
    MAX_TOML_BYTES,
    LongNumberError,
    check_allocation,
    check_document,
    parse_toml,
    plain_value_error,
)
from moeroof.core.paths import DATA_DIR
from moeroof.core.units import dimension_of, to_si
from moeroof.data.io import InputError

__all__ = [
    "PRESETS_DIR",
    "MoEModel",
    "Hardware",
    "load_model",
    "load_hardware",
    "bench_model",
    "list_presets",
    "MODEL_FIELDS",
    "HARDWARE_FIELDS",
    "PRIOR_FIELDS",
    "EFFICIENCY_FIELDS",
    "FIELD_MAX",
    "DEFAULT_PRIORS",
    "NAMED_PRIORS",
    "FIELD_HELP",
    "DEFAULTS",
    "LINK_NAMES",
    "PresetError",
    "with_overrides",
    "parse_quantity",
    "schema_rows",
]

PRESETS_DIR = DATA_DIR / "presets"

#: field → (dimension, required); dimension "count" fields take no unit
MODEL_FIELDS: dict[str, tuple[str, bool]] = {
    "experts": ("count", True),
    "top_k": ("count", True),
    "moe_layers": ("count", True),
    "expert_bytes": ("bytes", True),
    "non_routed_bytes": ("bytes", True),
    "kv_bytes_per_token": ("bytes", True),
    "flops_per_token": ("flop", True),
    "attn_flops_per_context_token": ("flop", False),
    "hidden_size": ("count", False),
    "activation_bytes": ("bytes", False),
    "total_params": ("count", False),
    "active_params": ("count", False),
    "dense_layers": ("count", False),
    "shared_experts": ("count", False),
}

HARDWARE_FIELDS: dict[str, tuple[str, bool]] = {
    "ram_bytes": ("bytes", True),
    "bw_mem_bytes_per_s": ("bytes_per_s", True),
    "flops_per_s": ("flop_per_s", True),
    "ssd_read_size_bytes": ("bytes", True),
    "bw_ssd_bytes_per_s": ("bytes_per_s", True),
    "bw_link_bytes_per_s": ("bytes_per_s", False),
    "os_reserve_bytes": ("bytes", False),
    "engine_seconds_per_step": ("seconds", False),
    "engine_seconds_per_agent_token": ("seconds", False),
    "engine_seconds_per_touched_expert": ("seconds", False),
    "mem_efficiency": ("count", False),
    "compute_efficiency": ("count", False),
    "link_efficiency": ("count", False),
    "reclaim_penalty": ("count", False),
    "reclaim_exponent": ("count", False),
}

#: the fields that are a share of a peak: in (0, 1]
EFFICIENCY_FIELDS = ("mem_efficiency", "compute_efficiency", "link_efficiency")
#: the model's whole-number fields and the least each may be; the other dimensionless fields
#: (shares, the reclaim knobs) are real numbers
INTEGER_FIELDS = {"experts": 1, "top_k": 1, "moe_layers": 1, "hidden_size": 1, "dense_layers": 0, "shared_experts": 0}
#: the range a real field keeps (beyond :data:`FIELD_MAX`): field → (test, what a value outside is told)
_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    **dict.fromkeys(EFFICIENCY_FIELDS, (lambda v: 0 < v <= 1, "is a share of a peak: must be in (0, 1]")),
    "reclaim_exponent": (lambda v: v >= 1, "must be >= 1 (1: the queueing form)"),
}

#: the largest value (SI) each field may take (:mod:`moeroof.core.limits`): far above any published
#: model or box, so that a typo or a hostile file (``expert_bytes = 2^70``, which ``plan`` took
#: and answered with a step of 10^14 s, exit 0) is refused naming the file, the field and its
#: line; the efficiencies are shares, bounded by 1 where they are read
_DIMENSION_MAX = {
    "bytes": MAX_PRESET_BYTES,
    "bytes_per_s": MAX_PRESET_BYTES_PER_S,
    "flop": MAX_PRESET_FLOP,
    "flop_per_s": MAX_PRESET_FLOP_PER_S,
    "seconds": MAX_PRESET_SECONDS,
}
_COUNT_MAX = {
    **dict.fromkeys(("experts", "top_k", "shared_experts"), MAX_EXPERTS),
    **dict.fromkeys(("moe_layers", "dense_layers"), MAX_LAYERS),
    **dict.fromkeys(("total_params", "active_params"), MAX_PARAMS),
    "hidden_size": MAX_HIDDEN_SIZE,
    "reclaim_penalty": MAX_RECLAIM_PENALTY,
    "reclaim_exponent": MAX_RECLAIM_EXPONENT,
}
FIELD_MAX: dict[str, float] = {
    key: _COUNT_MAX[key] if dimension == "count" else _DIMENSION_MAX[dimension]
    for key, (dimension, _) in {**MODEL_FIELDS, **HARDWARE_FIELDS}.items()
    if dimension != "count" or key in _COUNT_MAX
}

#: the SI unit a message gives each dimension in
_SI_UNIT = {
    "bytes": " B",
    "bytes_per_s": " B/s",
    "flop": " FLOP",
    "flop_per_s": " FLOP/s",
    "seconds": " s",
    "count": "",
}


def _magnitude(x: float) -> str:
    """A bound or value for a message: ``2^50`` for a power of two past 2^10, else 4 digits."""
    if x == int(x) and x >= 2048 and int(x) & (int(x) - 1) == 0:
        return f"2^{int(x).bit_length() - 1}"
    return f"{x:.4g}"


def _beyond_bound(key: str, si: Any) -> str | None:
    """What is wrong with field ``key``'s SI value(s) past :data:`FIELD_MAX` (None when within)."""
    bound = FIELD_MAX.get(key)
    values = si if isinstance(si, (list, tuple)) else [si]
    if bound is None or not values or max(float(v) for v in values) <= bound:
        return None
    unit = _SI_UNIT[{**MODEL_FIELDS, **HARDWARE_FIELDS}[key][0]]
    worst = max(values, key=float)
    shown = (
        str(int(worst)) if not unit and float(worst) == int(worst) and float(worst) < 1e15 else f"{float(worst):.4g}"
    )
    return f"{shown}{unit} is more than the {_magnitude(bound)}{unit} a preset's {key} may be (far above any published model or box)"


#: what each field means and the unit it is given in (the schema: ``moeroof presets --schema``,
#: docs/presets.md): field → (meaning, example unit)
FIELD_HELP: dict[str, tuple[str, str]] = {
    "experts": ("routed experts per MoE layer (E)", "count"),
    "top_k": ("experts each token routes to per layer (K)", "count"),
    "moe_layers": ("decoder layers with routed experts (L)", "count"),
    "expert_bytes": ("bytes of one routed expert of one layer, at the stored precision", "MB"),
    "non_routed_bytes": ("the dense band read once per step: attention, shared experts, norms, LM head", "GB"),
    "kv_bytes_per_token": ("KV cache per context token, all layers", "KiB"),
    "flops_per_token": ("forward FLOP per token without attention over the context (≈ 2 × active params)", "GFLOP"),
    "attn_flops_per_context_token": ("extra FLOP per generated token per token of context", "FLOP"),
    "hidden_size": ("hidden dimension (the expert exchange between ranks needs it)", "count"),
    "activation_bytes": ("bytes per activation value exchanged between ranks", "B"),
    "total_params": ("all parameters (informational)", "count"),
    "active_params": ("parameters active per token (informational)", "count"),
    "dense_layers": ("decoder layers without routed experts (their bytes are in non_routed_bytes)", "count"),
    "shared_experts": ("always-active experts per MoE layer (their bytes are in non_routed_bytes)", "count"),
    "ram_bytes": ("memory of the box: the dense band, the KV cache and the expert cache share it", "GB"),
    "bw_mem_bytes_per_s": ("memory bandwidth the step reads at", "GB/s"),
    "flops_per_s": ("compute throughput the step runs at", "TFLOP/s"),
    "ssd_read_size_bytes": ("read sizes of the SSD curve (a list, ascending)", "KiB"),
    "bw_ssd_bytes_per_s": ("SSD bandwidth at each read size of the curve (a list)", "GB/s"),
    "bw_link_bytes_per_s": ("bandwidth between boxes (needed with --ranks > 1)", "GB/s"),
    "os_reserve_bytes": ("RAM the OS and everything else keep (not available to the model)", "GiB"),
    "engine_seconds_per_step": ("engine time per decode step whatever the batch (launches, scheduling)", "ms"),
    "engine_seconds_per_agent_token": ("engine time per token of each agent (sampling, bookkeeping)", "ms"),
    "engine_seconds_per_touched_expert": (
        "engine time per (layer, expert) pair a step touches (launches, dequantisation, routing glue)",
        "ms",
    ),
    "mem_efficiency": ("share of bw_mem_bytes_per_s the engine's reads reach (0–1]", "count"),
    "compute_efficiency": ("share of flops_per_s the engine's kernels reach (0–1]", "count"),
    "link_efficiency": ("share of the streaming tier's bandwidth curve the engine's reads reach (0–1]", "count"),
    "reclaim_penalty": (
        "κ of the OS's reclaim work: reads slow by 1 + κ·u/(1 − u) as the memory the engine holds, u of what "
        "the OS leaves, nears all of it",
        "count",
    ),
    "reclaim_exponent": (
        "n ≥ 1 of the reclaim work's rise, 1 + κ·(u/(1 − u))^n: 1 the queueing form, larger a rise that stays "
        "low while memory is free and steepens near full",
        "count",
    ),
}


#: the engine knobs a preset may carry a prior range for (``prior = [low, centre, high]`` in the
#: field's own unit, ``prior_source = "…"``): what ``moeroof fit-plan`` holds a knob at where the
#: rows cannot identify it, its ends in the bands. A preset without one takes :data:`DEFAULT_PRIORS`.
PRIOR_FIELDS = (
    "engine_seconds_per_step",
    "engine_seconds_per_agent_token",
    "engine_seconds_per_touched_expert",
    *EFFICIENCY_FIELDS,
)

#: the suite's priors (SI), each with its source: (low, centre, high), source
DEFAULT_PRIORS: dict[str, tuple[tuple[float, float, float], str]] = {
    "engine_seconds_per_step": (
        (0.005, 0.02, 0.075),
        "public engines: vLLM on an Arc Pro B70 carries 5–6.6 ms of fixed MoE cost per decode step "
        "(vllm-project/vllm-xpu-kernels#509); bigrig's MLX loop 37 ms at B = 1 (its two end points, docs/sources.md, "
        "fitted with a cost per touched expert); the upper end doubles bigrig's, for a Python loop over the layers",
    ),
    "engine_seconds_per_agent_token": (
        (0.0, 2e-4, 0.013),
        "public engines for its range, the centre assumed: bigrig's MLX loop fitted on its B = 1 and 16 rows "
        "with no per-touched-expert cost carries 13 ms per agent-token (docs/sources.md; the most per-token cost "
        "its rows admit, as its growth with B may instead be the experts a step touches); a compiled scheduler's "
        "per-sequence sampling and bookkeeping take microseconds (0); the centre, 0.2 ms, a Python generate "
        "loop's sampling, assumed",
    ),
    "engine_seconds_per_touched_expert": (
        (0.0, 9e-5, 8e-4),
        "public engines, the middle one the centre: a fused MoE kernel (llama.cpp's mul_mat_id) adds nothing per "
        "(layer, expert) pair beyond the bytes the memory and streaming terms read (0); bigrig's MLX loop at most "
        "0.09 ms per pair (all of its fastest calibration step spread over the pairs the step touches: fit-plan on "
        "its two end points, docs/sources.md); seed "
        "003's GB10 engine 0.6–0.8 ms (fit-plan on its public M = 8 rows, the per-step cost at its 20 ms prior)",
    ),
    "mem_efficiency": (
        (0.4, 0.7, 0.9),
        "public decode kernels: llama.cpp's Metal decode read 167 GB/s, then 275 GB/s with a prefetching kernel, "
        "of an M1 Max's 400 GB/s (0.42 → 0.69; ggml-org/llama.cpp#2188), whose GPU sustains about 340 GB/s "
        "(0.85; #2188, and 317.6 of 409.6 GB/s attainable in #1642)",
    ),
    "compute_efficiency": (
        (0.25, 0.5, 1.0),
        "llm-analysis' note that Megatron-LM reaches about half of the peak FLOP/s (flops_efficiency ≈ 0.5); the "
        "low end assumed for small decode batches, the high end the rated peak",
    ),
    "link_efficiency": (
        (0.5, 1.0, 1.0),
        "assumed: the streaming tier's measured or rated curve as the preset has it, down to half of it for an "
        "engine whose reads queue badly",
    ),
}


#: priors a preset names instead of stating (``prior = "NAME"``, no ``prior_source``): one range
#: and source for every box of a class. field → name → ((low, centre, high), source)
NAMED_PRIORS: dict[str, dict[str, tuple[tuple[float, float, float], str]]] = {
    "mem_efficiency": {
        "cpu-decode": (
            (0.27, 0.55, 1.0),
            "public CPU decode in llama.cpp: DeepSeek-V3 Q8_0 CPU-only on a dual EPYC Genoa (24 channels of "
            "DDR5-4800, 921.6 GB/s rated) at 4-5 and 8-9 tok/s with ~39 GB of weights per token "
            "(ggml-org/llama.cpp#10981): 19-36 % of the rated peak; Llama-3.1-70B f16 on a dual EPYC 9175F "
            "(16 x DDR5-6400, 819 GB/s) at 2.4 and 4.31 tok/s (#11744): 41-74 %; against a STREAM-class "
            "figure (about 71 % of rated: 146.1 of 204.8 GB/s on EPYC Rome, FreeToken#444) 0.27-0.55-1",
        )
    }
}

#: the peak each efficiency multiplies
EFFICIENCY_PEAKS = {
    "mem_efficiency": "bw_mem_bytes_per_s",
    "compute_efficiency": "flops_per_s",
    "link_efficiency": "bw_ssd_bytes_per_s",
}


def _priors_on_witnessed_peaks(prov: Mapping[str, str]) -> dict[str, tuple[tuple[float, float, float], str]]:
    """The efficiency priors of :data:`DEFAULT_PRIORS` are shares of a rated peak, their high end
    the share an engine sustains; where the preset's peak is witnessed (a rate measured on the box)
    it already is that sustained rate, so the range is rescaled to end at 1 (each end divided by
    the high end): ``mem_efficiency`` 0.4–0.7–0.9 becomes 0.44–0.78–1 (llama.cpp's Metal decode
    reaching 167 and 275 of the ~340 GB/s an M1 Max sustains)."""
    out = {}
    for key, peak in EFFICIENCY_PEAKS.items():
        (lo, mid, hi), source = DEFAULT_PRIORS[key]
        if prov.get(peak) == "witnessed" and hi < 1.0:
            out[key] = (
                (lo / hi, mid / hi, 1.0),
                f"{source}; rescaled to end at 1 because this preset's {peak} is witnessed (a sustained rate "
                f"measured on the box, the prior's high end {hi:g} of a rated peak)",
            )
    return out


def schema_rows() -> list[dict[str, Any]]:
    """The preset schema, one row per field: kind, field, required, dimension, unit example,
    default (for an optional field that has one) and meaning."""
    rows: list[tuple[Any, ...]] = [
        (kind, name, required, dimension, FIELD_HELP[name][1], DEFAULTS.get(name), FIELD_HELP[name][0])
        for kind, fields in (("model", MODEL_FIELDS), ("hardware", HARDWARE_FIELDS))
        for name, (dimension, required) in fields.items()
    ]
    rows += [
        (kind, name, name == "name", "text", "text", default, meaning) for kind, name, default, meaning in _TEXT_FIELDS
    ]
    keys = ("kind", "field", "required", "dimension", "unit", "default", "meaning")
    return [dict(zip(keys, row)) for row in rows]


#: the text keys of a preset: (kind, key, default, meaning)
_TEXT_FIELDS = (
    ("model", "name", None, "the preset's name (what --model takes)"),
    ("model", "description", "", "one line about the model"),
    ("model", "precision", "", "the stored precision of the experts (int4, nvfp4, bf16, …)"),
    ("hardware", "name", None, "the preset's name (what --hardware takes)"),
    ("hardware", "description", "", "one line about the box"),
    ("hardware", "link", "ssd", "what the streaming tier is: ssd, pcie, host-link or page-cache (LINK_NAMES)"),
)


class PresetError(InputError):
    """Every problem of a preset file at once: ``str()`` is ``FILE:-: FIELD: what; FIELD: what``."""

    def __init__(self, path: str | Path, errors: list[InputError]):
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(path, None, first.field, first.message)
        text = "; ".join(f"{e.field}: {e.message}" for e in self.errors)
        self.args = (f"{Path(path)}:-: {text}",)  # str() of a one-argument exception is that argument


#: what a hardware preset's streaming tier is (``link = "pcie"``): the step model's ``ssd`` term
#: is this tier's transfer, named for what it is in tables and notes (JSON keeps ``bound == "ssd"``)
LINK_NAMES = ("ssd", "pcie", "host-link", "page-cache")

_CURVE_FIELDS = ("ssd_read_size_bytes", "bw_ssd_bytes_per_s")


@dataclass(frozen=True)
class MoEModel:
    """An MoE model's streaming-relevant constants, SI units.

    ``expert_bytes``: one routed expert of one layer at the stated precision;
    ``non_routed_bytes``: the dense band read once per decode step (attention, shared experts,
    norms, the LM head — what L1 amortizes); ``kv_bytes_per_token``: KV cache per context token,
    all layers; ``flops_per_token``: forward FLOP per token without attention over the context
    (≈ 2 × active parameters); ``attn_flops_per_context_token``: extra FLOP per generated token
    per token of context. ``dense_layers`` (decoder layers without routed experts) and
    ``shared_experts`` (always-active experts per MoE layer) describe the layout: their bytes are
    already in ``non_routed_bytes``.
    """

    name: str
    experts: int
    top_k: int
    moe_layers: int
    expert_bytes: float
    non_routed_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float
    attn_flops_per_context_token: float = 0.0
    hidden_size: int | None = None
    activation_bytes: float = 2.0
    total_params: float | None = None
    active_params: float | None = None
    dense_layers: int | None = None
    shared_experts: int | None = None
    precision: str = ""
    description: str = ""
    provenance: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    path: Path | None = None

    @property
    def routed_bytes(self) -> float:
        """All routed experts of all MoE layers, bytes."""
        return self.experts * self.moe_layers * self.expert_bytes

    def holds_every_expert(self, cache_bytes: float) -> bool:
        """Whether an expert cache of ``cache_bytes`` holds every routed expert (none streamed once warm)."""
        return float(cache_bytes) >= self.routed_bytes


def bench_model(
    name: str, *, experts: int, top_k: int, moe_layers: int, expert_bytes: float, flops_per_token: float
) -> MoEModel:
    """A measured bench's MoE as the suite's model: routed experts only (no dense band, no KV),
    every constant read from the bench's own config and so tagged ``witnessed``."""
    return MoEModel(
        name=name,
        experts=int(experts),
        top_k=int(top_k),
        moe_layers=int(moe_layers),
        expert_bytes=float(expert_bytes),
        non_routed_bytes=0.0,
        kv_bytes_per_token=0.0,
        flops_per_token=float(flops_per_token),
        provenance={k: "witnessed" for k, (_, required) in MODEL_FIELDS.items() if required},
    )


@dataclass(frozen=True)
class Hardware:
    """A box: memory, compute and an SSD whose bandwidth depends on the read size, SI units.

    ``ssd_read_size_bytes`` / ``bw_ssd_bytes_per_s`` is a curve (moe-fit's lesson: 4.13 GB/s at
    8 MiB reads but 0.028 GB/s at 4 KiB); :meth:`ssd_bandwidth` interpolates it log-log and
    clamps at its ends. For a GPU offloading to host memory the "SSD" is the host link: ``link``
    (:data:`LINK_NAMES`, default ``ssd``; ``link = "pcie"`` in the TOML) names what the
    streaming tier is, so that tables and notes say ``pcie``-bound where the model's term is
    ``ssd``.

    Engine terms (:mod:`moeroof.models.step`): ``engine_seconds_per_step`` is what the serving
    engine spends once per decode step whatever the batch (kernel launches, scheduling, the
    framework's Python), ``engine_seconds_per_agent_token`` what it spends per token of each agent
    (sampling, detokenising, per-sequence bookkeeping), ``engine_seconds_per_touched_expert``
    what it spends per (layer, expert) pair a step touches (a launch, a dequantisation, the
    routing glue: engines run far below their memory roofline and slow with the experts a step
    touches — seed 003's pair at 80 GiB ~25× below its LPDDR bandwidth). Absent from a preset
    they are 0 and tagged ``assumed`` in provenance; ``moeroof calibrate`` measures the first two
    on the box at hand; ``moeroof fit-plan`` fits the third where every measured rate is at one
    batch size, the other two held at priors from public engines
    (:data:`moeroof.fit.plan.PRIOR_SECONDS_PER_STEP`). ``mem_efficiency``,
    ``compute_efficiency`` and ``link_efficiency`` (in (0, 1], default 1, assumed) are the shares
    of the memory, compute and streaming-tier peaks the engine reaches (llm-analysis'
    ``hbm_memory_efficiency`` and ``flops_efficiency``). ``reclaim_penalty`` κ ≥ 0 (default 0,
    assumed) is the OS's reclaim work on the reads (:func:`moeroof.models.plan.reclaim_slowdown`:
    they slow by ``1 + κ·(u/(1 − u))^n`` as the share u of RAM the engine holds nears all the OS
    leaves; ``reclaim_exponent`` n ≥ 1, default 1, assumed).
    """

    name: str
    ram_bytes: float
    bw_mem_bytes_per_s: float
    flops_per_s: float
    ssd_read_size_bytes: tuple[float, ...]
    bw_ssd_bytes_per_s: tuple[float, ...]
    bw_link_bytes_per_s: float | None = None
    os_reserve_bytes: float = 0.0
    engine_seconds_per_step: float = 0.0
    engine_seconds_per_agent_token: float = 0.0
    engine_seconds_per_touched_expert: float = 0.0
    mem_efficiency: float = 1.0
    compute_efficiency: float = 1.0
    link_efficiency: float = 1.0
    reclaim_penalty: float = 0.0
    reclaim_exponent: float = 1.0
    #: the engine knobs' priors (:data:`PRIOR_FIELDS`): field → ((low, centre, high) SI, source)
    priors: Mapping[str, tuple[tuple[float, float, float], str]] = field(
        default_factory=lambda: MappingProxyType(dict(DEFAULT_PRIORS))
    )
    description: str = ""
    provenance: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    path: Path | None = None
    link: str = "ssd"

    def ssd_bandwidth(self, read_size_bytes) -> np.ndarray | float:
        """SSD bandwidth (bytes/s) at a read size, log-log interpolation of the device curve."""
        x = np.log(np.asarray(self.ssd_read_size_bytes, dtype=float))
        y = np.log(np.asarray(self.bw_ssd_bytes_per_s, dtype=float))
        out = np.exp(np.interp(np.log(np.asarray(read_size_bytes, dtype=float)), x, y))
        return float(out) if np.ndim(out) == 0 else out


#: the value an optional field takes when a preset leaves it out (:class:`MoEModel`'s and
#: :class:`Hardware`'s own defaults): never silently — the preset's provenance tags it ``assumed``
#: and its source says it is this default
DEFAULTS: dict[str, float] = {
    f.name: f.default
    for cls, names in ((MoEModel, MODEL_FIELDS), (Hardware, HARDWARE_FIELDS))
    for f in dataclasses.fields(cls)
    if f.name in names and isinstance(f.default, float)
}


def _prior(key: str, raw: dict, dimension: str) -> tuple[tuple[float, float, float], str]:
    """A field's ``prior = [low, centre, high]`` (its own unit) and ``prior_source``, or
    ``prior = "NAME"``: one of :data:`NAMED_PRIORS` for that field, with its own source."""
    if key not in PRIOR_FIELDS:
        raise ValueError(f"takes no prior (only {', '.join(PRIOR_FIELDS)} do)")
    vals = raw.get("prior")
    src = raw.get("prior_source")
    if isinstance(vals, str):
        named = NAMED_PRIORS.get(key, {})
        if vals not in named:
            known = ", ".join(repr(n) for n in named) or "none"
            raise ValueError(f"prior {vals!r} is not a named prior of this field (known: {known})")
        if src is not None:
            raise ValueError(f"a named prior ({vals!r}) carries its own source: drop prior_source")
        return named[vals]
    if not isinstance(src, str) or not src.strip():
        raise ValueError('a prior needs prior_source = "…" (where its range comes from)')
    if (
        not isinstance(vals, list)
        or len(vals) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals)
    ):
        raise ValueError(f"prior must be [low, centre, high], three finite numbers, got {vals!r}")
    lo, mid, hi = (float(v) for v in (to_si(vals, raw["unit"]) if dimension != "count" else vals))
    if not 0 <= lo <= mid <= hi:
        raise ValueError(f"prior must satisfy 0 <= low <= centre <= high, got {vals!r}")
    if key in EFFICIENCY_FIELDS and not (lo > 0 and hi <= 1):
        raise ValueError(f"an efficiency's prior must lie in (0, 1], got {vals!r}")
    return (lo, mid, hi), src.strip()


def _field_value(raw: Any) -> Any:
    """A quantity's ``value`` as written: a number or a list of numbers, finite, none negative."""
    if not isinstance(raw, dict):
        raise ValueError("must be an inline table { value = …, unit = …, source = … }")
    unknown = set(raw) - {"value", "unit", "source", "assumed", "witnessed", "note", "prior", "prior_source"}
    if unknown:
        raise ValueError(f"unknown entries {sorted(unknown)}")
    if "value" not in raw:
        raise ValueError("missing 'value'")
    value = raw["value"]
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ValueError(f"value must be a number (or a list of numbers), got {value!r}")
    try:
        finite = all(math.isfinite(float(v)) for v in values)
    except OverflowError:  # an integer past 1.8e308
        finite = False
    if not finite:
        raise ValueError("value must be finite (and below 1.8e308)")
    if any(v < 0 for v in values):
        raise ValueError(f"value must not be negative, got {value!r}")
    return value


def _si_value(value: Any, unit: Any, dimension: str) -> Any:
    """``value`` in ``unit`` → SI, the unit checked against the field's dimension."""
    if dimension == "count":
        if unit not in (None, "1"):
            raise ValueError(f"is a count and takes no unit, got unit {unit!r}")
        return value
    if unit is None:
        raise ValueError(f"missing 'unit' (a {dimension.replace('_', ' ')} quantity)")
    got = dimension_of(unit)
    if got != dimension:
        raise ValueError(f"unit {unit!r} measures {got.replace('_', ' ')}, expected {dimension.replace('_', ' ')}")
    si = to_si(value, unit)
    si = [float(v) for v in si] if isinstance(value, list) else si
    if dimension == "bytes" and any(0 < v < 1 for v in (si if isinstance(si, list) else [si])):
        raise ValueError(f"{value!r} {unit} is less than one byte (give 0 or at least 1 B)")
    return si


def _provenance(raw: dict) -> tuple[str, str]:
    """(provenance tag, source text) of a quantity: a source or ``assumed = true``, never both."""
    has_source = isinstance(raw.get("source"), str) and raw["source"].strip() != ""
    assumed = raw.get("assumed", False)
    witnessed = raw.get("witnessed", False)
    if not isinstance(assumed, bool) or not isinstance(witnessed, bool):
        raise ValueError("'assumed' and 'witnessed' must be true or false")
    if has_source == bool(assumed):
        raise ValueError('needs exactly one of source = "…" or assumed = true')
    if witnessed and not has_source:
        raise ValueError("witnessed = true needs a source")
    tag = "witnessed" if witnessed else ("assumed" if assumed else "projected")
    text = raw["source"] if has_source else "assumed" + (f": {raw['note']}" if raw.get("note") else "")
    return tag, text


#: a line that gives a top-level key (``key = …``, ``key.value = …``, ``"key" = …``) or opens its
#: table (``[key]``, ``[key.sub]``): the key is the first group that matched
_KEY_LINE = re.compile(r"""^\s*(?:\[\s*)?(?:"([^"\n]+)"|'([^'\n]+)'|([A-Za-z0-9_-]+))\s*(?:[=.]|\])""")


def _key_lines(text: str) -> dict[str, int]:
    """The line (1-based) on which each top-level key of a preset's text is first given: where a
    message points for a field (the document tomllib returns keeps no positions)."""
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        m = _KEY_LINE.match(line)
        if m is not None:
            lines.setdefault(next(g for g in m.groups() if g is not None), number)
    return lines


def _read_toml(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """The TOML document of a preset file, bounded in size and depth, and the line of each key
    (:func:`_key_lines`)."""
    try:
        raw = read_input_bytes(path, MAX_TOML_BYTES)  # bounded (check_document refuses more); a FIFO refused
    except FileNotFoundError:
        raise InputError(path, None, "file", "no such file") from None
    except OSError as err:
        raise InputError(path, None, "file", f"cannot read: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
        check_document(text, "the TOML", max_bytes=MAX_TOML_BYTES, toml=True)
        return parse_toml(text, bounded=False), _key_lines(text)  # each field is bounded by its own check
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise InputError(path, None, "toml", f"not valid TOML ({err})") from None
    except LongNumberError as err:  # its line and key: `experts = { value = 10…0 }` said `toml`
        raise InputError(path, err.line, err.key, str(err)) from None
    except ValueError as err:
        raise InputError(path, None, "toml", plain_value_error(err)) from None


def _load_fields(
    path: Path, doc: dict[str, Any], fields: dict[str, tuple[str, bool]], out: dict[str, Any], lines: dict[str, int]
) -> tuple[dict[str, str], dict[str, str], dict[str, tuple[tuple[float, float, float], str]], list[InputError]]:
    """Reads each field (or its default) into ``out``, each within :data:`FIELD_MAX` (an error past
    it names the field's line of ``lines``); (provenance tags, sources, priors, every error met)."""
    prov, sources = {}, {}
    priors: dict[str, tuple[tuple[float, float, float], str]] = {}
    errors: list[InputError] = []  # every bad or missing field, said at once
    for key, (dimension, required) in fields.items():
        if key not in doc:
            if required:
                errors.append(
                    InputError(path, None, key, f"missing ({FIELD_HELP[key][0]}, e.g. unit {FIELD_HELP[key][1]!r})")
                )
            elif key in DEFAULTS:  # a default is an assumption, and says so
                out[key] = DEFAULTS[key]
                prov[key] = "assumed"
                sources[key] = f"assumed: default {DEFAULTS[key]:g} (not in the preset)"
            continue
        # a bad value is one error and its prior is not read; any error fails the file, so what
        # ``out``, ``prov`` and ``sources`` hold by then does not matter. The readers of a field
        # raise ValueError, here named with the file and the field
        try:
            out[key] = _si_value(_field_value(doc[key]), doc[key].get("unit"), dimension)
            prov[key], sources[key] = _provenance(doc[key])
            if isinstance(out[key], list) and key not in _CURVE_FIELDS:
                raise ValueError("must be a single number")
            if (beyond := _beyond_bound(key, out[key])) is not None:
                raise InputError(path, lines.get(key), key, beyond)
            if "prior" in doc[key] or "prior_source" in doc[key]:
                priors[key] = _prior(key, doc[key], dimension)
                if (beyond := _beyond_bound(key, list(priors[key][0]))) is not None:
                    raise InputError(path, lines.get(key), key, f"prior: {beyond}")
        except InputError as err:
            errors.append(err)
        except ValueError as err:
            errors.append(InputError(path, None, key, str(err)))
    return prov, sources, priors, errors


def _load(
    path: str | Path, kind: str, fields: dict[str, tuple[str, bool]], texts: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A preset file of ``kind`` checked against ``fields`` (key → (dimension, required)) and ``texts``."""
    path = Path(path)
    doc, lines = _read_toml(path)
    if doc.get("kind") != kind:
        raise InputError(path, None, "kind", f'must be "{kind}", got {doc.get("kind")!r}')
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(path, None, "name", "missing or not a string")
    known = set(fields) | {"kind", "name", "description", "precision", *texts}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise InputError(path, None, unknown[0], f"unknown key (known: {', '.join(sorted(fields))})")
    out: dict[str, Any] = {"name": name, "description": str(doc.get("description", "")), "path": path}
    prov, sources, priors, errors = _load_fields(path, doc, fields, out, lines)
    if errors:
        raise PresetError(path, errors) if len(errors) > 1 else errors[0]
    out["provenance"] = MappingProxyType(prov)
    out["sources"] = MappingProxyType(sources)
    if kind == "hardware":
        out["priors"] = MappingProxyType({**DEFAULT_PRIORS, **_priors_on_witnessed_peaks(prov), **priors})
    if "precision" in doc:
        out["precision"] = str(doc["precision"])
    for key in texts:
        if key in doc:
            if not isinstance(doc[key], str):
                raise InputError(path, None, key, f"must be a string, got {doc[key]!r}")
            out[key] = doc[key]
    return out


def _resolve(name_or_path: str | Path, sub: str, what: str) -> Path:
    """A path to a TOML (from the working directory when relative), else a shipped preset's name
    (an unknown one is an :class:`InputError` naming ``what``, the known names with it)."""
    p = Path(name_or_path).expanduser()
    if p.suffix == ".toml" or p.is_file():
        return p
    path = PRESETS_DIR / sub / f"{name_or_path}.toml"
    if not path.exists() and path != Path(name_or_path):  # a name, not a path (names may hold dots: glm-5.2)
        known = ", ".join(sorted(list_presets()[sub]))
        raise InputError(name_or_path, None, what, f"no such preset (known: {known})")
    return path


def load_model(name_or_path: str | Path) -> MoEModel:
    """A model preset by name (``glm-5.2``) or a path to a user's TOML."""
    path = _resolve(name_or_path, "models", "model")
    out = _load(path, "model", MODEL_FIELDS)
    for key, minimum in INTEGER_FIELDS.items():
        if key in out:
            v = out[key]
            if float(v) != int(v) or int(v) < minimum:
                what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
                raise InputError(path, None, key, f"must be {what}, got {v!r}")
            out[key] = int(v)  # within FIELD_MAX: checked as it was read
    if out["top_k"] > out["experts"]:
        raise InputError(path, None, "top_k", f"K={out['top_k']} exceeds experts E={out['experts']}")
    try:
        check_allocation(out["experts"] * out["moe_layers"], 8, "experts × moe_layers")
    except ValueError as err:
        raise InputError(path, None, "experts", str(err)) from None
    for key in ("expert_bytes", "flops_per_token"):
        if out[key] <= 0:
            raise InputError(path, None, key, "must be positive")
    return MoEModel(**out)


def load_hardware(name_or_path: str | Path) -> Hardware:
    """A hardware preset by name (``nvme-gen4``) or a path to a user's TOML."""
    path = _resolve(name_or_path, "hardware", "hardware")
    out = _load(path, "hardware", HARDWARE_FIELDS, texts=("link",))
    if out.get("link", "ssd") not in LINK_NAMES:
        raise InputError(path, None, "link", f"must be one of {', '.join(LINK_NAMES)}, got {out['link']!r}")
    for key in ("ram_bytes", "bw_mem_bytes_per_s", "flops_per_s", "bw_link_bytes_per_s"):
        if key in out and out[key] <= 0:
            raise InputError(path, None, key, "must be positive")
    for key, (within, what) in _RANGES.items():
        if not within(out[key]):  # each has a default
            raise InputError(path, None, key, f"{what}, got {out[key]!r}")
    sizes, bws = (v if isinstance(v, list) else [v] for v in (out[key] for key in _CURVE_FIELDS))
    if len(sizes) != len(bws):
        raise InputError(
            path, None, "bw_ssd_bytes_per_s", f"has {len(bws)} points, ssd_read_size_bytes has {len(sizes)}"
        )
    if any(b <= 0 for b in bws) or any(s <= 0 for s in sizes):
        raise InputError(path, None, "bw_ssd_bytes_per_s", "read sizes and bandwidths must be positive")
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise InputError(path, None, "ssd_read_size_bytes", "read sizes must increase")
    out["ssd_read_size_bytes"] = tuple(float(s) for s in sizes)
    out["bw_ssd_bytes_per_s"] = tuple(float(b) for b in bws)
    return Hardware(**out)


def list_presets() -> dict[str, dict[str, Path]]:
    """Shipped presets: ``{"models": {name: path}, "hardware": {name: path}}``."""
    return {sub: {p.stem: p for p in sorted((PRESETS_DIR / sub).glob("*.toml"))} for sub in ("models", "hardware")}


_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")


def parse_quantity(text: str, dimension: str) -> float:
    """``"64GB"``, ``"7 GB/s"``, ``"2ms"`` or a bare count → SI, checked against ``dimension``
    (a count takes no unit; any other quantity needs one). ValueError says what is wrong."""
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"{text!r}: expected a number with a unit, e.g. 64GB or 7GB/s")
    number, unit = float(m.group(1)), m.group(2)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{text!r}: must be a finite number >= 0")
    if dimension == "count":
        if unit not in ("", "1"):
            raise ValueError(f"{text!r}: a count takes no unit")
        return number
    if not unit:
        raise ValueError(
            f"{text!r}: give the unit (a {dimension.replace('_', ' ')} quantity, e.g. {_EXAMPLE[dimension]})"
        )
    got = dimension_of(unit)
    if got != dimension:
        raise ValueError(f"{text!r}: {unit} measures {got.replace('_', ' ')}, expected {dimension.replace('_', ' ')}")
    return float(to_si(number, unit))


_EXAMPLE = {"bytes": "64GB", "bytes_per_s": "7GB/s", "flop": "40GFLOP", "flop_per_s": "10TFLOP/s", "seconds": "2ms"}


def with_overrides(obj: MoEModel | Hardware, overrides: Mapping[str, str]) -> MoEModel | Hardware:
    """``obj`` with fields set for one run (``plan --set ram_bytes=64GB``): each value parsed in
    its field's dimension (:func:`parse_quantity`) and tagged ``assumed`` with the source
    "set on the command line". A curve field (``bw_ssd_bytes_per_s``) given one number keeps its
    shape and is scaled so that its peak is that number (as whatif's SSD control does).
    Unknown fields or bad values raise ValueError naming the field."""
    fields = MODEL_FIELDS if isinstance(obj, MoEModel) else HARDWARE_FIELDS
    changed: dict[str, Any] = {}
    prov, sources = dict(obj.provenance), dict(obj.sources)
    for key, text in overrides.items():
        if key not in fields:
            raise ValueError(
                f"{key}: not a {'model' if fields is MODEL_FIELDS else 'hardware'} field (known: {', '.join(fields)})"
            )
        try:
            value = parse_quantity(str(text), fields[key][0])
        except ValueError as err:
            raise ValueError(f"{key}: {err}") from None
        if (beyond := _beyond_bound(key, value)) is not None:
            raise ValueError(f"{key}: {text}: {beyond}")
        if key == "bw_ssd_bytes_per_s":
            # a hardware field (checked above): the curve scaled to the peak given
            curve = np.asarray(getattr(obj, "bw_ssd_bytes_per_s"), dtype=float)  # noqa: B009
            changed[key] = (
                tuple(float(x) for x in curve * (value / curve.max()))
                if curve.size and curve.max() > 0
                else (value,) * max(curve.size, 1)
            )
        elif key == "ssd_read_size_bytes":
            raise ValueError(f"{key}: the read sizes of a curve are set in the preset, not one number")
        elif key in _RANGES and not _RANGES[key][0](value):  # parse_quantity refused a negative
            raise ValueError(f"{key}: {_RANGES[key][1]}, got {text!r}")
        elif key in INTEGER_FIELDS:
            if value != int(value) or value < INTEGER_FIELDS[key]:
                raise ValueError(f"{key}: must be a positive integer, got {text!r}")
            value = int(value)
        changed.setdefault(key, value)
        prov[key] = "assumed"
        sources[key] = f"set on the command line: {key}={text}"
    if not changed:
        return obj
    return dataclasses.replace(obj, **changed, provenance=MappingProxyType(prov), sources=MappingProxyType(sources))
