"""``moeroof preset-from-hf`` marks what config.json leaves out as assumed.

Each case deletes one key from a tiny checkpoint's ``config.json`` (the builders of
``tests/test_preset_from_hf.py``) and checks that every field resting on it is written
``assumed = true`` with a note naming the key, that ``load_model`` tags it ``assumed`` and
``plan`` lists it among the non-witnessed inputs of a ``projected`` result, and that the value
is what transformers itself builds from the same file: recomputed here from
``AutoConfig.from_pretrained`` of the edited folder, not from :mod:`moeroof.data.hf_config`.
"""

from __future__ import annotations

import json
import shutil
import struct
import tomllib
from pathlib import Path

import pytest

from moeroof.cli import main
from test_preset_from_hf import FAMILIES, TINY, save_tiny

transformers = pytest.importorskip("transformers", reason="needs the capture extra: pip install 'moeroof[capture]'")

PROVENANCE_FIELDS = {"kv_bytes_per_token", "flops_per_token", "attn_flops_per_context_token", "moe_layers"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {f: save_tiny(f, root / f) for f in FAMILIES if getattr(transformers, TINY[f][0], None) is not None}


def without(src: Path, dst: Path, *keys: str) -> Path:
    """A copy of the checkpoint ``src`` whose config.json lacks ``keys``."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    for key in keys:
        assert key in config, key  # the case must delete something the file had
        del config[key]
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def preset(folder: Path, out: Path, capsys) -> dict:
    assert main(["preset-from-hf", str(folder), "-o", str(out), "--force"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return tomllib.loads(out.read_text(encoding="utf-8"))


def kv_bytes(cfg, full_layers: int, act: int = 4) -> int:
    """KV per token as transformers builds the attention (GQA): 2 x KV heads x head_dim per layer."""
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_key_value_heads * head_dim * full_layers * act


def moe_layer_count(model_dir: Path) -> int:
    """MoE layers of the model transformers builds from the folder (meta device: no weights)."""
    import torch

    cfg = transformers.AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return len(
        {
            name.split("layers.")[1].split(".")[0]
            for name, m in model.named_modules()
            if type(m).__name__.lower().endswith("topkrouter")
        }
    )


CASES = [
    # (family, deleted keys, fields that must turn assumed, words the note must hold)
    ("mixtral", ("num_key_value_heads",), {"kv_bytes_per_token", "flops_per_token"}, "num_key_value_heads"),
    ("qwen3_moe", ("head_dim",), {"kv_bytes_per_token", "flops_per_token", "attn_flops_per_context_token"}, "head_dim"),
    ("qwen3_moe", ("decoder_sparse_step",), {"moe_layers", "flops_per_token"}, "decoder_sparse_step"),
    ("qwen2_moe", ("mlp_only_layers",), {"moe_layers", "flops_per_token"}, "mlp_only_layers"),
    ("qwen2_moe", ("shared_expert_intermediate_size",), {"flops_per_token"}, "shared_expert_intermediate_size"),
    ("glm4_moe", ("first_k_dense_replace",), {"moe_layers", "flops_per_token"}, "first_k_dense_replace"),
    (
        "glm4_moe",
        ("num_key_value_heads", "head_dim"),
        {"kv_bytes_per_token", "flops_per_token", "attn_flops_per_context_token"},
        "head_dim",
    ),
    ("deepseek_v3", ("n_shared_experts",), {"flops_per_token"}, "n_shared_experts"),
    (
        "deepseek_v3",
        ("kv_lora_rank",),
        {"kv_bytes_per_token", "flops_per_token", "attn_flops_per_context_token"},
        "kv_lora_rank",
    ),
    ("gpt_oss", ("layer_types",), {"kv_bytes_per_token", "attn_flops_per_context_token"}, "layer_types"),
]


@pytest.mark.parametrize(("family", "keys", "assumed", "word"), CASES, ids=[f"{c[0]}-{c[1][0]}" for c in CASES])
def test_a_key_config_json_leaves_out_is_assumed(family, keys, assumed, word, checkpoints, tmp_path, capsys):
    if family not in checkpoints:
        pytest.skip(f"this transformers has no {TINY[family][0]}")
    full = preset(checkpoints[family], tmp_path / "full.toml", capsys)
    for key in PROVENANCE_FIELDS:  # with every key in the file, nothing but the KV dtype is assumed
        assert ("source" in full[key]) == (key != "kv_bytes_per_token"), key
    folder = without(checkpoints[family], tmp_path / "ckpt", *keys)
    doc = preset(folder, tmp_path / "model.toml", capsys)
    for key in PROVENANCE_FIELDS:
        if key in assumed or key == "kv_bytes_per_token":
            assert doc[key].get("assumed") is True and "source" not in doc[key], key
        else:
            assert "source" in doc[key], key
    for key in assumed:
        assert word in doc[key]["note"] and "not in config.json" in doc[key]["note"], (key, doc[key]["note"])
    for key in ("experts", "top_k", "expert_bytes", "non_routed_bytes", "activation_bytes"):
        assert "source" in doc[key], key  # the headers and the rest of the file still say these

    # the values are what transformers builds from the same file
    cfg = transformers.AutoConfig.from_pretrained(str(folder))
    if family == "deepseek_v3":
        assert doc["kv_bytes_per_token"]["value"] == (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * 2 * 4
    else:
        types = getattr(cfg, "layer_types", None) if family == "gpt_oss" else None
        layers = sum(t == "full_attention" for t in types) if types else cfg.num_hidden_layers
        assert doc["kv_bytes_per_token"]["value"] == kv_bytes(cfg, layers)
    assert doc["moe_layers"]["value"] == moe_layer_count(folder)

    # the loaded preset tags them assumed, and a plan on it is projected naming them
    from moeroof.data.presets import load_model

    model = load_model(tmp_path / "model.toml")
    for key in assumed:
        assert model.provenance[key] == "assumed" and model.sources[key].startswith("assumed: "), key
    assert (
        main(["plan", "--model", str(tmp_path / "model.toml"), "--hardware", "nvme-gen4", "--batch", "1", "--json"])
        == 0
    )
    prov = json.loads(capsys.readouterr().out)["provenance"]
    assert prov["result"] == "projected"
    for key in assumed & {"kv_bytes_per_token", "flops_per_token", "moe_layers"}:
        assert prov["inputs"][f"model.{key}"] == "assumed", key


def test_transformers_default_first_k_dense_replace_can_leave_no_moe_layer(checkpoints, tmp_path, capsys):
    """DeepseekV3Config's default first_k_dense_replace is 3: a 2-layer file without the key is dense."""
    folder = without(checkpoints["deepseek_v3"], tmp_path / "ckpt", "first_k_dense_replace")
    assert moe_layer_count(folder) == 0  # what transformers builds
    assert main(["preset-from-hf", str(folder), "-o", str(tmp_path / "m.toml")]) == 2
    err = capsys.readouterr().err
    assert "no layer has routed experts" in err and "first_k_dense_replace" in err and "3" in err


def test_no_dtype_in_config_takes_the_headers(checkpoints, tmp_path, capsys):
    folder = without(checkpoints["qwen3_moe"], tmp_path / "ckpt", "dtype")
    doc = preset(folder, tmp_path / "m.toml", capsys)
    assert doc["activation_bytes"]["value"] == 4 and "model.safetensors header" in doc["activation_bytes"]["source"]
    assert "F32" in doc["activation_bytes"]["source"]
    # bf16 weights: the header says BF16 -> 2 B, KV at 2 B per value
    bf = tmp_path / "bf16"
    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoints["qwen3_moe"]))
    model.to(dtype=__import__("torch").bfloat16).save_pretrained(bf)
    config = json.loads((bf / "config.json").read_text())
    config.pop("dtype", None)
    config.pop("torch_dtype", None)
    (bf / "config.json").write_text(json.dumps(config))
    doc = preset(bf, tmp_path / "bf.toml", capsys)
    assert doc["activation_bytes"]["value"] == 2 and "BF16" in doc["activation_bytes"]["source"]
    assert doc["kv_bytes_per_token"]["value"] == full_kv_at(doc, 2)
    # without the headers either (an index whose shards are absent), it is refused
    for f in bf.glob("*.safetensors"):
        f.unlink()
    (bf / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 1}, "weight_map": {"a": "s1.safetensors"}})
    )
    assert main(["preset-from-hf", str(bf), "-o", str(tmp_path / "x.toml")]) == 2
    assert "no known dtype" in capsys.readouterr().err


def full_kv_at(doc: dict, act: int) -> int:
    """qwen3_moe tiny: 2 KV heads x head_dim 8 x 2 (K, V) x 2 layers x act bytes."""
    return 2 * 2 * 8 * 2 * act


def _header_file(path: Path, entries: dict, data: bytes) -> None:
    head = json.dumps(entries).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)


def test_header_shapes_must_match_their_data_offsets(checkpoints, tmp_path, capsys):
    folder = tmp_path / "bad"
    shutil.copytree(checkpoints["mixtral"], folder)
    raw = (folder / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    name = next(k for k in header if ".experts." in k)
    begin, end = header[name]["data_offsets"]
    # a 16-byte tensor declared 2^40 x 2^40
    header[name]["shape"] = [2**40, 2**40]
    _header_file(folder / "model.safetensors", header, raw[8 + n :])
    assert main(["preset-from-hf", str(folder), "-o", str(tmp_path / "m.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and name in err and "data_offsets" in err
    # offsets past the end of the file
    header[name]["shape"] = [1, (end - begin) // 4]
    header[name]["data_offsets"] = [len(raw), len(raw) + end - begin]
    _header_file(folder / "model.safetensors", header, raw[8 + n :])
    assert main(["preset-from-hf", str(folder), "-o", str(tmp_path / "m.toml")]) == 2
    assert "inside the file" in capsys.readouterr().err


def test_moe_layer_freq_is_ignored_as_transformers_ignores_it(checkpoints, tmp_path, capsys):
    """DeepSeek-V3's config.json carries moe_layer_freq (1 in released checkpoints); transformers'
    decoder layers read only first_k_dense_replace, so the preset's MoE layers must be the routers
    transformers builds whatever the key says (a freq of 2 once made layer 1 dense here)."""
    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoints["deepseek_v3"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["moe_layer_freq"] = 2
    (folder / "config.json").write_text(json.dumps(config))
    doc = preset(folder, tmp_path / "m.toml", capsys)
    assert doc["moe_layers"]["value"] == moe_layer_count(folder) == 1
    assert "moe_layer_freq 2 ignored" in doc["moe_layers"]["source"]
