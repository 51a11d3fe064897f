"""``moeroof preset-from-hf`` on tiny random checkpoints of every family.

Each checkpoint is built here from transformers' own config class (2 layers, 8 experts, tiny
widths) and saved with ``save_pretrained``; nothing is downloaded. The preset's byte counts are
checked against the saved tensors, summed here from the safetensors header independently of
:mod:`moeroof.data.hf_config`. The builders are shared with ``tests/test_capture.py``.
"""

from __future__ import annotations

import json
import struct
import tomllib
from pathlib import Path

import pytest

from moeroof.cli import main

torch = pytest.importorskip("torch", reason="needs the capture extra: pip install 'moeroof[capture]'")
transformers = pytest.importorskip("transformers", reason="needs the capture extra: pip install 'moeroof[capture]'")

COMMON = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)

#: family → (config class name, family keys); 8 experts, K = 2, 2 layers; the group-limited
#: families 16 experts in 4 groups, 2 groups kept, K = 4 (so that the group choice matters)
TINY = {
    "mixtral": ("MixtralConfig", dict(num_local_experts=8, num_experts_per_tok=2, intermediate_size=16)),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=24,
            intermediate_size=40,
        ),
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, intermediate_size=40, head_dim=8),
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        dict(
            n_routed_experts=16,
            num_experts_per_tok=4,
            moe_intermediate_size=16,
            intermediate_size=40,
            first_k_dense_replace=1,
            n_group=4,
            topk_group=2,
            n_shared_experts=1,
            kv_lora_rank=16,
            q_lora_rank=24,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            num_key_value_heads=4,  # MLA: one latent cache shared by every head
        ),
    ),
    "olmoe": ("OlmoeConfig", dict(num_experts=8, num_experts_per_tok=2, intermediate_size=16, eos_token_id=1)),
    "gpt_oss": (
        "GptOssConfig",
        dict(num_local_experts=8, num_experts_per_tok=2, intermediate_size=16, head_dim=8, sliding_window=4),
    ),
    "glm4_moe": (
        "Glm4MoeConfig",
        dict(
            n_routed_experts=16,
            num_experts_per_tok=4,
            moe_intermediate_size=16,
            intermediate_size=40,
            first_k_dense_replace=1,
            n_group=4,
            topk_group=2,
            n_shared_experts=1,
            head_dim=8,
        ),
    ),
}

FAMILIES = list(TINY)


def config_class(family: str):
    """transformers' config class of a family, or a skip naming what this version lacks."""
    name = TINY[family][0]
    cls = getattr(transformers, name, None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {name} ({family})")
    return cls


def save_tiny(family: str, folder: Path, *, seed: int = 0, **save_kwargs) -> Path:
    """A random-initialised tiny checkpoint of ``family`` saved (safetensors) into ``folder``."""
    cls = config_class(family)
    config = cls(**{**COMMON, **TINY[family][1]})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # the group-limited routers: a correction bias that changes the choice
        for module in model.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if isinstance(bias, torch.Tensor):
                bias.copy_(torch.randn_like(bias) * 0.1)
    model.save_pretrained(folder, **save_kwargs)
    return folder


def header_tensors(folder: Path) -> dict[str, tuple[str, list[int]]]:
    """Every tensor of every safetensors file in ``folder``: name → (dtype, shape), read here."""
    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        raw = path.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        for name, info in json.loads(raw[8 : 8 + n]).items():
            if name != "__metadata__":
                out[name] = (info["dtype"], info["shape"])
    return out


SIZES = {"F32": 4, "BF16": 2, "F16": 2}


def nbytes(dtype: str, shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * SIZES[dtype]


def routed(name: str) -> bool:
    return ".experts." in name and "shared_expert" not in name


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {f: save_tiny(f, root / f) for f in FAMILIES if getattr(transformers, TINY[f][0], None) is not None}


def _preset(tmp_path: Path, folder: Path, *extra: str) -> tuple[dict, dict]:
    out = tmp_path / "model.toml"
    assert main(["preset-from-hf", str(folder), "-o", str(out), "--json", *extra]) == 0
    return tomllib.loads(out.read_text(encoding="utf-8")), out


@pytest.mark.parametrize("family", FAMILIES)
def test_preset_bytes_equal_the_saved_tensors(family, checkpoints, tmp_path, capsys):
    config_class(family)
    folder = checkpoints[family]
    doc, out = _preset(tmp_path, folder)
    rep = json.loads(capsys.readouterr().out)
    config = json.loads((folder / "config.json").read_text())
    tensors = header_tensors(folder)
    routed_total = sum(nbytes(*v) for k, v in tensors.items() if routed(k))
    rest = sum(nbytes(*v) for k, v in tensors.items() if not routed(k))
    moe_layers = {int(k.split("layers.")[1].split(".")[0]) for k in tensors if routed(k)}
    keys = TINY[family][1]
    experts = next(keys[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if k in keys)
    assert doc["experts"]["value"] == experts and doc["top_k"]["value"] == TINY[family][1]["num_experts_per_tok"]
    assert doc["moe_layers"]["value"] == len(moe_layers)
    assert doc["expert_bytes"]["value"] * experts * len(moe_layers) == routed_total
    assert doc["non_routed_bytes"]["value"] == rest
    assert doc["expert_bytes"]["unit"] == "B" and "model.safetensors header" in doc["expert_bytes"]["source"]
    for key in ("experts", "top_k", "moe_layers", "flops_per_token", "attn_flops_per_context_token"):
        assert doc[key]["source"].startswith("config.json"), key  # the saved config.json has every key
    # the KV cache's dtype is never in config.json: always assumed, the derivation in the note
    assert doc["kv_bytes_per_token"]["assumed"] is True and "source" not in doc["kv_bytes_per_token"]
    assert "KV cache's dtype" in doc["kv_bytes_per_token"]["note"]
    # the layout the capture hooks rely on: first_k_dense_replace makes layer 0 dense
    dense = 1 if family in ("deepseek_v3", "glm4_moe") else 0
    assert rep["dense_layer_ids"] == list(range(dense))
    assert rep["shared_experts"] == (1 if family in ("qwen2_moe", "deepseek_v3", "glm4_moe") else 0)
    # ... and as preset fields with their source: the saved layers without a routed expert tensor
    all_layers = {int(k.split("layers.")[1].split(".")[0]) for k in tensors if "layers." in k}
    assert doc["dense_layers"]["value"] == len(all_layers - moe_layers) == dense
    assert doc["dense_layers"]["source"].startswith("config.json")
    shared_saved = any("shared_expert" in k for k in tensors)
    assert (doc["shared_experts"]["value"] > 0) == shared_saved
    assert doc["shared_experts"]["source"].startswith("config.json")
    # KV per token: MLA latent (kv_lora_rank + rope) or 2 x KV heads x head_dim, float32 here
    if family == "deepseek_v3":
        kv = (config["kv_lora_rank"] + config["qk_rope_head_dim"]) * 2 * 4
    else:
        layers = 2
        if family == "gpt_oss":
            layers = sum(t == "full_attention" for t in config["layer_types"])
        kv = 2 * 2 * 8 * layers * 4
    assert doc["kv_bytes_per_token"]["value"] == kv
    # the preset loads and plans
    from moeroof.data.presets import load_model

    model = load_model(out)
    assert model.expert_bytes == doc["expert_bytes"]["value"]
    assert (model.dense_layers, model.shared_experts) == (dense, doc["shared_experts"]["value"])
    assert main(["plan", "--model", str(out), "--hardware", "nvme-gen4", "--batch", "1,4", "--json"]) == 0
    assert capsys.readouterr().out.strip().startswith("{")


def test_quant_bits_scale_the_experts_only(checkpoints, tmp_path):
    folder = checkpoints["mixtral"]
    doc, _ = _preset(tmp_path, folder, "--quant", "4")
    # 3 x hidden 32 x intermediate 16 params x 4 bits / 8
    assert doc["expert_bytes"]["value"] == 3 * 32 * 16 * 4 // 8
    tensors = header_tensors(folder)
    assert doc["non_routed_bytes"]["value"] == sum(nbytes(*v) for k, v in tensors.items() if not routed(k))


def test_sharded_checkpoint_and_index_without_shards(tmp_path):
    folder = save_tiny("qwen3_moe", tmp_path / "sharded", max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("*.safetensors"))) > 1
    doc, _ = _preset(tmp_path, folder)
    tensors = header_tensors(folder)
    assert doc["non_routed_bytes"]["value"] == sum(nbytes(*v) for k, v in tensors.items() if not routed(k))
    assert "shards" in doc["expert_bytes"]["source"]
    # the index alone (shards not downloaded): config.json's shapes x dtype, the rest from total_size
    for shard in folder.glob("*.safetensors"):
        shard.unlink()
    (tmp_path / "index-only").mkdir()
    doc2, _ = _preset(tmp_path / "index-only", folder)
    assert doc2["expert_bytes"]["value"] == doc["expert_bytes"]["value"]
    assert doc2["non_routed_bytes"]["value"] == doc["non_routed_bytes"]["value"]
    assert doc2["expert_bytes"]["source"].startswith("config.json")


def test_errors_are_one_line(tmp_path, capsys):
    assert main(["preset-from-hf", str(tmp_path / "nope"), "-o", str(tmp_path / "m.toml")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "dense").mkdir()
    (tmp_path / "dense" / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    assert main(["preset-from-hf", str(tmp_path / "dense"), "-o", str(tmp_path / "m.toml")]) == 2
    assert "not a Mixture-of-Experts model (model_type 'llama' has no routed experts)" in capsys.readouterr().err
    (tmp_path / "dense" / "config.json").write_text(json.dumps({"model_type": "jamba2", "num_hidden_layers": 2}))
    assert main(["preset-from-hf", str(tmp_path / "dense"), "-o", str(tmp_path / "m.toml")]) == 2
    assert "unknown MoE family 'jamba2'" in capsys.readouterr().err
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "config.json").write_text(
        json.dumps({"model_type": "qwen2_moe", "num_experts": 0, "num_experts_per_tok": 2, "num_hidden_layers": 2})
    )
    assert main(["preset-from-hf", str(tmp_path / "zero"), "-o", str(tmp_path / "m.toml")]) == 2
    assert "not an MoE model" in capsys.readouterr().err


def test_a_config_json_nested_too_deep_is_one_error_line(tmp_path, capsys):
    """config.json is bounded in size and nesting before json.loads (a 100,000-deep list was a
    RecursionError caught only by the CLI's last resort, without the file's name)."""
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "mixtral", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["preset-from-hf", str(folder), "-o", str(tmp_path / "m.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "config.json" in err[0] and "deep" in err[0], err


@pytest.mark.parametrize("family", FAMILIES)
def test_config_json_alone_before_the_weights(family, checkpoints, tmp_path, capsys):
    """The before-I-download case: a folder with config.json only gives a preset whose expert
    bytes equal the saved tensors' and whose non-routed bytes are within the norms and biases
    it leaves out (summed here from the headers of the full checkpoint)."""
    config_class(family)
    full = checkpoints[family]
    only = tmp_path / "config-only"
    only.mkdir()
    (only / "config.json").write_bytes((full / "config.json").read_bytes())
    doc, _ = _preset(tmp_path, only)
    rep = json.loads(capsys.readouterr().out)
    assert rep["read"] == ["config.json"]
    tensors = header_tensors(full)
    routed_total = sum(nbytes(*v) for k, v in tensors.items() if routed(k))
    rest = sum(nbytes(*v) for k, v in tensors.items() if not routed(k))
    moe_layers = {int(k.split("layers.")[1].split(".")[0]) for k in tensors if routed(k)}
    keys = TINY[family][1]
    experts = next(keys[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if k in keys)
    if family != "gpt_oss":  # its experts' biases and MXFP4 layout are counted by its own rule
        assert doc["expert_bytes"]["value"] * experts * len(moe_layers) == routed_total
    assert doc["non_routed_bytes"]["assumed"] is True and "config.json" in doc["non_routed_bytes"]["note"]
    assert doc["non_routed_bytes"]["value"] == pytest.approx(rest, rel=0.08)
    # --quant-dense and --kv-bits: the widths asked for, said in the sources
    doc8, _ = _preset(tmp_path, only, "--force", "--quant-dense", "8", "--kv-bits", "8")
    capsys.readouterr()
    assert doc8["non_routed_bytes"]["value"] == pytest.approx(doc["non_routed_bytes"]["value"] / 4, rel=1e-6)
    assert "8 bits" in doc8["non_routed_bytes"]["source"]
    assert doc8["kv_bytes_per_token"]["value"] * 4 == doc["kv_bytes_per_token"]["value"]
    assert "source" in doc8["kv_bytes_per_token"] and "KV precision asked for" in doc8["kv_bytes_per_token"]["source"]
