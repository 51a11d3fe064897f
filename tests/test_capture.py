"""``moeroof capture`` on tiny random checkpoints of every family.

Each checkpoint is built from transformers' own config class by
:func:`moeroof.measure.tiny_models.tiny_checkpoint` (the configs of ``tests/test_preset_from_hf.py``:
2 layers, 8 experts, K = 2; DeepSeek-V3 and GLM-4-MoE 16 experts in 4 groups, 2 kept, K = 4) and
saved to a temporary folder; nothing is downloaded. A second
forward hook, set here on the same router modules, keeps each call's router logits; the ids the
capture recorded must equal the top-K recomputed here from those logits — softmax / plain top-K
for Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE and GPT-OSS, the group-limited choice (sigmoid + score
correction bias, best ``topk_group`` of ``n_group`` groups) for DeepSeek-V3 and GLM-4-MoE,
where a plain top-K of the logits is shown to differ.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import csvout  # noqa: I001  (tests/csvout.py: CSV output past its run record)
from moeroof.cli import main
from test_preset_from_hf import FAMILIES, TINY, config_class

torch = pytest.importorskip("torch", reason="needs the capture extra: pip install 'moeroof[capture]'")
transformers = pytest.importorskip("transformers", reason="needs the capture extra: pip install 'moeroof[capture]'")

from moeroof.measure.capture import capture_routing, load_checkpoint  # noqa: E402
from moeroof.measure.tiny_models import tiny_checkpoint  # noqa: E402

PROMPTS = [[5, 9, 13, 21, 34], [7, 3, 60], [11, 12, 13, 14, 15, 16, 17], [40, 2]]
NEW_TOKENS = 8
GROUP_LIMITED = ("deepseek_v3", "glm4_moe")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {f: tiny_checkpoint(f, root / f) for f in FAMILIES if getattr(transformers, TINY[f][0], None) is not None}


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


def routers_of(model) -> dict[int, torch.nn.Module]:
    """The router module of each layer, found here by class name."""
    out = {}
    for name, module in model.named_modules():
        if type(module).__name__.lower().endswith("topkrouter"):
            out[int(name.split("layers.")[1].split(".")[0])] = module
    return out


def expected_ids(family: str, logits: np.ndarray, router, k: int) -> np.ndarray:
    """Each row's K chosen experts (sorted), recomputed from the router logits."""
    if family in GROUP_LIMITED:
        scores = 1 / (1 + np.exp(-logits.astype(np.float64)))
        choice = scores + router.e_score_correction_bias.detach().double().numpy()
        groups, keep = router.num_group, router.topk_group
        per = choice.reshape(len(choice), groups, -1)
        group_score = np.sort(per, axis=-1)[..., -2:].sum(-1)
        best = np.argsort(-group_score, axis=-1)[:, :keep]
        masked = np.full_like(per, -np.inf)
        rows = np.arange(len(choice))[:, None]
        masked[rows, best] = per[rows, best]
        choice = masked.reshape(len(choice), -1)
        return np.sort(np.argsort(-choice, axis=-1)[:, :k], axis=-1)
    return np.sort(np.argsort(-logits, axis=-1)[:, :k], axis=-1)


def plain_ids(logits: np.ndarray, k: int) -> np.ndarray:
    return np.sort(np.argsort(-logits, axis=-1)[:, :k], axis=-1)


@pytest.mark.parametrize("family", FAMILIES)
def test_captured_ids_are_the_routers_choice(family, checkpoints, prompt_file, tmp_path, capsys):
    config_class(family)
    folder = checkpoints[family]
    model, layout = load_checkpoint(folder, device="cpu")
    routers = routers_of(model)
    seen: dict[int, list[np.ndarray]] = {lay: [] for lay in routers}
    hooks = [
        r.register_forward_hook(lambda m, i, o, lay=lay: seen[lay].append(o[0].detach().float().numpy().copy()))
        for lay, r in routers.items()
    ]
    try:
        result = capture_routing(model, layout, PROMPTS, max_new_tokens=NEW_TOKENS, eos_token_ids=[])
    finally:
        for h in hooks:
            h.remove()
    k, streams = layout.top_k, len(PROMPTS)
    assert result.layer_ids == sorted(routers) == list(layout.moe_layer_ids)
    assert result.topk.shape == (NEW_TOKENS - 1, streams, len(routers), k)
    length = max(map(len, PROMPTS))
    mask = np.zeros((streams, length), bool)
    for s, p in enumerate(PROMPTS):
        mask[s, length - len(p) :] = True
    differs = 0
    for pos, lay in enumerate(result.layer_ids):
        calls = seen[lay]
        assert len(calls) == NEW_TOKENS  # one prefill, then N - 1 decode steps
        # prefill: the counts of the real prompt tokens (padding left out)
        pre = calls[0].reshape(streams, length, -1)[mask]
        want = expected_ids(family, pre, routers[lay], k)
        assert np.array_equal(result.counts(result.prefill)[pos], np.bincount(want.ravel(), minlength=layout.experts))
        # the prefill ids themselves: each real prompt token's K ids, -1 on the left padding
        got = result.prefill[:, :, pos, :]
        assert np.array_equal(np.sort(got[mask].astype(np.int64), axis=-1), want)
        assert (got[~mask] == -1).all()
        assert result.prefill_tokens[pos] == mask.sum()
        differs += int((plain_ids(pre, k) != want).any(axis=1).sum())
        for t, logits in enumerate(calls[1:]):
            want = expected_ids(family, logits, routers[lay], k)
            got = np.sort(result.topk[t, :, pos, :].astype(np.int64), axis=-1)
            assert np.array_equal(got, want), (family, lay, t)
            differs += int((plain_ids(logits, k) != want).any(axis=1).sum())
    if family in GROUP_LIMITED:
        assert differs > 0, "group-limited routing never differed from a plain top-K: the test would not bite"

    # distinct prompts, distinct routings, compared as sets of expert ids per (token, layer) so
    # that an order of the same experts does not count: no two streams share a decode routing,
    # and the sets vary across tokens (a router that picks one expert set for every token fails)
    def sets(ids: np.ndarray) -> tuple[frozenset, ...]:
        return tuple(frozenset(row.tolist()) for row in ids.reshape(-1, k))

    per_stream = {sets(result.topk[:, s]) for s in range(streams)}
    assert len(per_stream) == streams
    for pos in range(len(result.layer_ids)):
        distinct = {frozenset(r.tolist()) for r in result.topk[:, :, pos, :].reshape(-1, k)}
        assert len(distinct) > 2, (family, pos, distinct)

    # the command: trace + histogram with the witnessed meta
    from moeroof.data.io import read_histogram, read_trace

    out = tmp_path / "cap.npz"
    args = ["capture", str(folder), "--prompts", str(prompt_file), "--streams", "4", "--max-new-tokens"]
    assert main([*args, str(NEW_TOKENS), "-o", str(out), "--ignore-eos", "--device", "cpu", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    trace = read_trace(out)
    assert np.array_equal(np.asarray(trace.topk), result.topk)  # greedy: the same routing again
    meta = trace.meta
    assert meta["provenance"] == "witnessed" and meta["phase"] == "decode" and meta["family"] == family
    assert meta["checkpoint_hash"].startswith("sha256:") and meta["prompts_sha256"].startswith("sha256:")
    assert meta["checkpoint_hash_mode"] == "full" and "every byte" in meta["checkpoint_hash_covers"]
    # the source is the whole command line, every option spelled out
    for word in ("-o", str(out), "--dtype auto", "--device cpu", "--checkpoint-hash full", "--ignore-eos"):
        assert word in meta["source"], word
    # the prefill ids are in the .npz beside topk, as the meta says
    with np.load(out) as npz:
        assert np.array_equal(npz["prefill"], result.prefill)
    assert meta["prefill"]["array"] == "prefill" and meta["prefill"]["shape"] == list(result.prefill.shape)
    for key in ("model", "dtype", "device", "date"):
        assert meta[key]
    hist = read_histogram(out.with_suffix(".csv"))
    counts, tokens = result.histogram()
    assert np.array_equal(np.asarray(hist.counts), counts)
    assert list(hist.tokens) == [int(mask.sum()) + (NEW_TOKENS - 1) * streams] * len(routers)
    assert hist.meta["provenance"] == "witnessed"
    assert rep["decode_steps"] == NEW_TOKENS - 1


def test_finished_streams_pad_with_minus_one_and_padding_changes_nothing(checkpoints):
    model, layout = load_checkpoint(checkpoints["qwen3_moe"])
    free = capture_routing(model, layout, PROMPTS, max_new_tokens=6, eos_token_ids=[])
    eos = free.generated[1][1]  # stream 1's second token becomes the EOS
    stopped = capture_routing(model, layout, PROMPTS, max_new_tokens=6, eos_token_ids=[eos])
    for s, row in enumerate(free.generated):
        end = next((i for i, t in enumerate(row) if t == eos), None)
        live = stopped.topk.shape[0] if end is None else min(end, stopped.topk.shape[0])
        assert np.array_equal(stopped.topk[:live, s], free.topk[:live, s])
        assert (stopped.topk[live:, s] == -1).all()
    assert (stopped.topk[1:, 1] == -1).all() and (stopped.topk[:1, 1] >= 0).all()
    # a stream decoded alone routes as it does in the left-padded batch
    alone = capture_routing(model, layout, [PROMPTS[1]], max_new_tokens=6, eos_token_ids=[])
    assert np.array_equal(alone.topk[:, 0], free.topk[:, 1])


def test_text_prompts_through_a_tokenizer_in_the_folder(checkpoints, tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = checkpoints["mixtral"]
    words = ["[PAD]", "[UNK]", "the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")
    with_tok = tmp_path / "with-tokenizer"
    with_tok.mkdir()
    for f in folder.iterdir():
        (with_tok / f.name).write_bytes(f.read_bytes())
    fast.save_pretrained(with_tok)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat sat on a mat\n\nthe dog ran far away\na cat ran\n", encoding="utf-8")
    out = tmp_path / "text.npz"
    assert main(["capture", str(with_tok), "--prompts", str(prompts), "--streams", "3", "--max-new-tokens", "3"]
                + ["-o", str(out), "--ignore-eos", "--json"]) == 0  # fmt: skip
    rep = json.loads(capsys.readouterr().out)
    assert rep["prompt_tokens"] == [6, 5, 3] and rep["decode_steps"] == 2
    # without a tokenizer, text prompts are refused with what to do instead
    assert main(["capture", str(folder), "--prompts", str(prompts), "--streams", "2", "--max-new-tokens", "3"]
                + ["-o", str(tmp_path / "x.npz")]) == 2  # fmt: skip
    assert "tokenizer" in capsys.readouterr().err


def test_clear_errors(checkpoints, prompt_file, tmp_path, capsys, monkeypatch):
    folder = checkpoints["olmoe"]
    base = ["--prompts", str(prompt_file), "--max-new-tokens", "3", "-o", str(tmp_path / "o.npz")]

    def err(*args: str) -> str:
        assert main(["capture", *args]) == 2
        text = capsys.readouterr().err
        assert text.startswith("error: ") and text.count("\n") == 1, text
        return text

    assert "holds 4" in err(str(folder), "--streams", "5", *base)
    dup = tmp_path / "dup.jsonl"
    dup.write_text("[1, 2]\n[3]\n[1, 2]\n", encoding="utf-8")
    assert "distinct" in err(str(folder), "--streams", "3", *base[:0], "--prompts", str(dup), *base[2:])
    assert "no config.json" in err(str(tmp_path), "--streams", "2", *base)
    # a real dense checkpoint (transformers' LlamaConfig, tiny): named as not MoE, not as unknown
    dense = tmp_path / "dense"
    llama = transformers.LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4
    )
    transformers.AutoModelForCausalLM.from_config(llama).save_pretrained(dense)
    text = err(str(dense), "--streams", "2", *base)
    assert "not a Mixture-of-Experts model (model_type 'llama' has no routed experts)" in text
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "jamba2", "num_hidden_layers": 2}))
    assert "unknown MoE family 'jamba2'" in err(str(unknown), "--streams", "2", *base)
    shards = tiny_checkpoint("olmoe", tmp_path / "sharded", max_shard_size="20KB")
    gone = sorted(shards.glob("*.safetensors"))[0]
    gone.unlink()
    text = err(str(shards), "--streams", "2", *base)
    assert gone.name in text and "not in the folder" in text
    monkeypatch.setitem(sys.modules, "torch", None)  # as if the capture extra were not installed
    assert "pip install 'moeroof[capture]'" in err(str(folder), "--streams", "2", *base)


def test_the_library_builder_makes_the_preset_tests_configs():
    """tiny_checkpoint (which the capture notebook uses) builds what tests/test_preset_from_hf.py checks."""
    from moeroof.measure.tiny_models import tiny_config
    from test_preset_from_hf import COMMON

    for family in FAMILIES:
        cls = config_class(family)
        assert tiny_config(family).to_dict() == cls(**{**COMMON, **TINY[family][1]}).to_dict(), family
    wide = tiny_config("qwen3_moe", experts=64, top_k=8, layers=4, hidden=64)
    assert (wide.num_experts, wide.num_experts_per_tok, wide.num_hidden_layers, wide.head_dim) == (64, 8, 4, 16)
    for bad in (dict(family="llama"), dict(family="glm4_moe", experts=10), dict(family="mixtral", top_k=9)):
        with pytest.raises(ValueError):
            tiny_config(**bad)


def test_checkpoint_hash_identifies_the_weights(tmp_path):
    """Seeds 0 and 1 give the same shapes, different weights: the full hash tells them apart,
    the headers-only hash (the weaker id --checkpoint-hash headers asks for) does not."""
    import hashlib

    from moeroof.data.hf_config import checkpoint_hash

    a = tiny_checkpoint("mixtral", tmp_path / "a", seed=0)
    b = tiny_checkpoint("mixtral", tmp_path / "b", seed=1)
    a2 = tiny_checkpoint("mixtral", tmp_path / "a2", seed=0)  # the same files written again
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()
    full = {k: checkpoint_hash(f)["hash"] for k, f in (("a", a), ("b", b), ("a2", a2))}
    assert full["a"] != full["b"] and full["a"] == full["a2"]
    heads = {k: checkpoint_hash(f, mode="headers")["hash"] for k, f in (("a", a), ("b", b))}
    assert heads["a"] == heads["b"] != full["a"]
    # recomputed here: config.json, then the weights file, each as name NUL size NUL bytes
    h = hashlib.sha256()
    for path in (a / "config.json", a / "model.safetensors"):
        raw = path.read_bytes()
        h.update(f"{path.name}\0{len(raw)}\0".encode() + raw)
    assert full["a"] == "sha256:" + h.hexdigest()
    # streamed in chunks with progress, the same hash
    seen = []
    info = checkpoint_hash(a, chunk=4096, progress=lambda done, total, name: seen.append((done, total)))
    assert info["hash"] == full["a"] and len(seen) > 2 and seen[-1][0] == seen[-1][1] == info["bytes"]
    # sharded: every shard's bytes count
    s = tiny_checkpoint("mixtral", tmp_path / "s", seed=0, max_shard_size="20KB")
    before = checkpoint_hash(s)["hash"]
    shard = sorted(s.glob("*.safetensors"))[-1]
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1  # one bit of one weight of the last shard
    shard.write_bytes(bytes(raw))
    assert checkpoint_hash(s)["hash"] != before
    assert checkpoint_hash(s, mode="headers")["hash"] == checkpoint_hash(s, mode="headers")["hash"]


def test_npy_output_keeps_the_prefill_beside_it_and_headers_hash_is_recorded(
    checkpoints, prompt_file, tmp_path, capsys
):
    from moeroof.data.io import read_trace
    from moeroof.measure.capture import prefill_path

    out = tmp_path / "cap.npy"
    args = ["capture", str(checkpoints["olmoe"]), "--prompts", str(prompt_file), "--streams", "3"]
    args += ["--max-new-tokens", "4", "-o", str(out), "--ignore-eos", "--checkpoint-hash", "headers", "--json"]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    meta = read_trace(out).meta
    assert meta["checkpoint_hash_mode"] == rep["checkpoint_hash_mode"] == "headers"
    assert "not the weights" in meta["checkpoint_hash_covers"]
    pre = np.load(prefill_path(out))
    lengths = [len(p) for p in PROMPTS[:3]]
    assert pre.shape[:2] == (3, max(lengths)) and meta["prefill"]["array"] == str(prefill_path(out))
    for s, n in enumerate(lengths):  # left padding: -1 before the prompt, ids on it
        assert (pre[s, : max(lengths) - n] == -1).all() and (pre[s, max(lengths) - n :] >= 0).all()
    # a second run refuses to overwrite the prefill file too
    assert main(args[:-1]) == 2
    assert "exists" in capsys.readouterr().err


def test_csv_reports_of_capture_and_preset_from_hf(checkpoints, prompt_file, tmp_path, capsys):
    """--format csv: capture prints one row per stream, preset-from-hf one row per preset field;
    each row agrees with the JSON of the same run (capture) or the TOML written (preset)."""
    import tomllib

    folder = checkpoints["qwen3_moe"]
    base = ["capture", str(folder), "--prompts", str(prompt_file), "--streams", "4", "--max-new-tokens", "4"]
    assert main([*base, "-o", str(tmp_path / "a.npz"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert main([*base, "-o", str(tmp_path / "b.npz"), "--format", "csv"]) == 0
    rows = csvout.dict_rows(capsys.readouterr().out)
    assert [int(r["stream"]) for r in rows] == list(range(4))
    assert [int(r["prompt_tokens"]) for r in rows] == rep["prompt_tokens"] == [len(p) for p in PROMPTS]
    assert [int(r["generated_tokens"]) for r in rows] == rep["generated_tokens"]
    assert {r["checkpoint_hash"] for r in rows} == {rep["checkpoint_hash"]}
    out = tmp_path / "m.toml"
    assert main(["preset-from-hf", str(folder), "-o", str(out), "--format", "csv"]) == 0
    rows = {r["field"]: r for r in csvout.dict_rows(capsys.readouterr().out)}
    doc = tomllib.loads(out.read_text())
    fields = {k: v for k, v in doc.items() if isinstance(v, dict)}
    assert set(rows) == set(fields)
    for name, entry in fields.items():
        assert float(rows[name]["value"]) == entry["value"]
        assert rows[name]["assumed"] == str(bool(entry.get("assumed", False)))


@pytest.mark.parametrize("suffix", [".npz", ".npy"])
def test_a_capture_that_cannot_write_every_file_writes_none(checkpoints, prompt_file, tmp_path, capsys, suffix):
    """The trace, its prefill ids, the histogram and the sidecars are one write: with the
    histogram's sidecar blocked (a folder in its place) a forced rerun fails naming it and leaves
    the earlier run's files as they were (it replaced the trace and its prefill first)."""
    out = tmp_path / f"cap{suffix}"
    args = ["capture", str(checkpoints["olmoe"]), "--prompts", str(prompt_file), "--streams", "2"]
    args += ["-o", str(out), "--ignore-eos"]
    assert main([*args, "--max-new-tokens", "3"]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    hist = "cap" if suffix == ".npz" else "cap.histogram"  # a .npy trace's own sidecar is cap.json
    assert {f"{hist}.csv", f"{hist}.json"} <= set(before) and len(before) == (3 if suffix == ".npz" else 5)
    blocked = tmp_path / f"{hist}.json"
    blocked.unlink()
    blocked.mkdir()
    assert main([*args, "--max-new-tokens", "5", "--force"]) == 2
    err = capsys.readouterr().err
    assert blocked.name in err and err.count("error:") == 1, err
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == {name: data for name, data in before.items() if name != blocked.name}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temp file was left"
