"""Tiny random-initialised Hugging Face MoE checkpoints, built from transformers' own config
classes and saved to a folder — the capture pipeline's stand-in for a real model.

The routing :func:`moeroof.measure.capture.capture_routing` records on such a checkpoint is
witnessed routing — really computed by the model's router modules — of a model nobody serves:
random weights, so it says nothing about how a trained model routes. Nothing is downloaded.

The widths follow the tests' tiny configs (``tests/test_preset_from_hf.py``): hidden size 32,
4 attention heads (2 KV heads), a vocabulary of 96, 2 layers, 8 experts, K = 2 unless asked
otherwise. The group-limited families (DeepSeek-V3, GLM-4-MoE) get 16 experts in ``n_group`` = 4
groups of 4, ``topk_group`` = 2 groups kept and K = 4, one dense first layer and a random
score-correction bias (scale 0.1), so the group-limited choice is a real choice: K is smaller
than the 8 experts of the kept groups, the kept groups vary from token to token, and the choice
differs from a plain top-K. transformers' router (``DeepseekV3TopkRouter`` /
``Glm4MoeTopkRouter``, ``modeling_deepseek_v3.py`` / ``modeling_glm4_moe.py``) scores a group by
its top 2 experts, so a group must hold at least 2, and K must not exceed the experts of the
``topk_group`` kept groups. Seeded: the same arguments give the same
weights (``torch.manual_seed``).

torch and transformers are imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["CONFIG_KEYWORDS", "TINY_FAMILIES", "tiny_config", "tiny_checkpoint"]

#: family (``model_type``) → transformers' config class name
TINY_FAMILIES: dict[str, str] = {
    "mixtral": "MixtralConfig",
    "qwen2_moe": "Qwen2MoeConfig",
    "qwen3_moe": "Qwen3MoeConfig",
    "deepseek_v3": "DeepseekV3Config",
    "olmoe": "OlmoeConfig",
    "gpt_oss": "GptOssConfig",
    "glm4_moe": "Glm4MoeConfig",
}


#: the group-limited families: their defaults (E, K) and groups (n_group, topk_group)
GROUP_LIMITED = ("deepseek_v3", "glm4_moe")
GROUP_DEFAULTS = {"experts": 16, "top_k": 4, "n_group": 4, "topk_group": 2}


def _family_keys(family: str, experts: int, top_k: int, moe_width: int, head_dim: int) -> dict[str, Any]:
    """The config keys of ``family`` for E experts, K per token and expert width ``moe_width``."""
    routed = dict(num_experts_per_tok=top_k)
    if family in GROUP_LIMITED:
        keys = dict(n_routed_experts=experts, **routed, moe_intermediate_size=moe_width, intermediate_size=40)
        keys.update(first_k_dense_replace=1, n_group=GROUP_DEFAULTS["n_group"], n_shared_experts=1)
        keys.update(topk_group=GROUP_DEFAULTS["topk_group"])
        if family == "glm4_moe":
            return {**keys, "head_dim": head_dim}
        mla = dict(qk_rope_head_dim=head_dim, qk_nope_head_dim=head_dim, v_head_dim=head_dim)
        # MLA: one latent cache shared by every head
        return {**keys, "kv_lora_rank": 16, "q_lora_rank": 24, **mla, "num_key_value_heads": 4}
    if family in ("mixtral", "gpt_oss"):
        keys = dict(num_local_experts=experts, **routed, intermediate_size=moe_width)
        return {**keys, "head_dim": head_dim, "sliding_window": 4} if family == "gpt_oss" else keys
    if family == "olmoe":
        return dict(num_experts=experts, **routed, intermediate_size=moe_width, eos_token_id=1)
    keys = dict(num_experts=experts, **routed, moe_intermediate_size=moe_width, intermediate_size=40)
    if family == "qwen2_moe":
        return {**keys, "shared_expert_intermediate_size": 24}
    return {**keys, "head_dim": head_dim}  # qwen3_moe


def tiny_config(
    family: str,
    *,
    experts: int | None = None,
    top_k: int | None = None,
    layers: int = 2,
    hidden: int = 32,
    vocab: int = 96,
    moe_width: int = 16,
) -> Any:
    """transformers' config of a tiny ``family`` model (see the module text for the widths;
    ``experts``/``top_k`` default to 8/2, or 16/4 for the group-limited families)."""
    from moeroof.measure.capture import require_capture_packages

    if family not in TINY_FAMILIES:
        raise ValueError(f"family must be one of {', '.join(TINY_FAMILIES)}, got {family!r}")
    grouped = family in GROUP_LIMITED
    experts = (GROUP_DEFAULTS["experts"] if grouped else 8) if experts is None else experts
    top_k = (GROUP_DEFAULTS["top_k"] if grouped else 2) if top_k is None else top_k
    for name, value, low in (("experts", experts, 2), ("top_k", top_k, 1), ("layers", layers, 1)):
        if int(value) < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
    if top_k > experts:
        raise ValueError(f"top_k ({top_k}) must not exceed experts ({experts})")
    if grouped:
        groups, kept = GROUP_DEFAULTS["n_group"], GROUP_DEFAULTS["topk_group"]
        if experts % groups or experts // groups < 2 or top_k > kept * (experts // groups):
            raise ValueError(
                f"{family}: {groups} expert groups scored by their top 2, {kept} kept: experts must be a multiple "
                f"of {groups}, at least {2 * groups}, and top_k at most {kept} x experts/{groups}; "
                f"got {experts} and {top_k}"
            )
        if layers < 2:
            raise ValueError(f"{family}: the first layer is dense, so layers must be at least 2, got {layers}")
    _, transformers = require_capture_packages()
    cls = getattr(transformers, TINY_FAMILIES[family], None)
    if cls is None:
        raise ValueError(f"transformers {transformers.__version__} has no {TINY_FAMILIES[family]} ({family})")
    common = dict(vocab_size=int(vocab), hidden_size=int(hidden), num_hidden_layers=int(layers))
    common.update(num_attention_heads=4, num_key_value_heads=2)
    return cls(**{**common, **_family_keys(family, int(experts), int(top_k), int(moe_width), max(int(hidden) // 4, 8))})


#: the keyword arguments of :func:`tiny_checkpoint` that go to :func:`tiny_config`
CONFIG_KEYWORDS = ("experts", "top_k", "layers", "hidden", "vocab", "moe_width")


def tiny_checkpoint(family: str, folder: str | Path, seed: int = 0, **kwargs: Any) -> Path:
    """A random-initialised tiny checkpoint of ``family`` saved (safetensors, float32) into
    ``folder``; returns the folder. The keywords of :func:`tiny_config` (:data:`CONFIG_KEYWORDS`)
    size the model; the others go to ``save_pretrained`` (e.g. ``max_shard_size``)."""
    from moeroof.measure.capture import require_capture_packages

    config = tiny_config(family, **{k: v for k, v in kwargs.items() if k in CONFIG_KEYWORDS})
    torch, transformers = require_capture_packages()
    torch.manual_seed(int(seed))
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # the group-limited routers: a correction bias that changes the choice
        for module in model.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if isinstance(bias, torch.Tensor):
                bias.copy_(torch.randn_like(bias) * 0.1)
    folder = Path(folder)
    model.save_pretrained(folder, **{k: v for k, v in kwargs.items() if k not in CONFIG_KEYWORDS})
    return folder
