#!/usr/bin/env python3
"""A hostile user's audit of the command line: about 60 hostile and unusual inputs and faults.

Usage:  .venv/bin/python scripts/hostile_audit.py [--lib LIB] [--cases DIR] [-k SUBSTRING ...]

The cases are the classes docs/robustness.md promises against (sizes declared past memory, FIFOs,
bombs, damaged archives, over-long cells and numbers, ambiguous columns, concurrent writers, a
full disk, spreadsheet CSVs, Ctrl-C). ``--lib`` runs another checkout's library (default: this
one's ``lib/``). The full-disk cases mount a small tmpfs and need root; elsewhere they say so
and count as holding nothing (skipped).

Each case builds its input in ``--cases``/NN/ (default: a new temporary folder), runs the CLI there as a hostile user would
(`bash -c 'ulimit -v 4000000; timeout 120 python -m moeroof.cli ...'`), then checks the contract
(docs/robustness.md): exit 2 with exactly one stderr line `error: ...` naming the input (and field),
no traceback, no exit 70, inputs byte-identical, no partial output (a sidecar alone, a temp file);
Ctrl-C exits 130; valid-but-unusual input exits 0 with the same answer as its plain twin.
Prints one line per case (HOLDS / FAILS: why) and a summary; exit 1 if any case fails.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import numpy as np

PY = sys.executable
REPO = Path(__file__).resolve().parents[1]
ROOT = Path(tempfile.mkdtemp(prefix="moeroof-hostile-"))
REPO_DATA = REPO / "data"
LIB = str(REPO / "lib")
CACHE = str(ROOT / "cache")
VMEM_KB = 4_000_000
TIMEOUT = 120

CASES: list[tuple[str, object]] = []


def case(name: str):
    def deco(fn):
        CASES.append((name, fn))
        return fn

    return deco


# ----------------------------------------------------------------------------- running


def env(**extra) -> dict:
    e = dict(os.environ)
    e.update(PYTHONPATH=LIB, MOEROOF_CACHE_DIR=CACHE, PYTHONDONTWRITEBYTECODE="1")
    e.pop("MOEROOF_DEBUG", None)
    e.update(extra)
    return e


def shell_cmd(argv: list[str], fsize_kb: int | None = None) -> list[str]:
    lim = f"ulimit -v {VMEM_KB}; " + (f"ulimit -f {fsize_kb}; " if fsize_kb else "")
    return ["bash", "-c", lim + f'exec timeout {TIMEOUT} {PY} -m moeroof.cli "$@"', "moeroof", *argv]


def cli(argv: list[str], cwd: Path, fsize_kb: int | None = None, **extra) -> tuple[int, str, str, float]:
    t0 = time.time()
    p = subprocess.run(shell_cmd(argv, fsize_kb), cwd=cwd, env=env(**extra), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, time.time() - t0


def snapshot(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        if p.is_fifo():
            out[rel] = "fifo"
        elif p.is_dir():
            out[rel] = "dir"
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class Skip(Exception):
    """A case this machine cannot run (its reason)."""


class Fail(Exception):
    pass


def check_error(rc, out, err, names=(), fields=(), anyof=None) -> str:
    """The one-line contract; returns the error line."""
    if "Traceback" in err:
        raise Fail(f"traceback:\n{err[-800:]}")
    if rc == 70 or "internal error" in err:
        raise Fail(f"internal error (rc {rc}): {err.strip()[:400]}")
    if rc == 124 or rc == 137:
        raise Fail(f"timed out / killed (rc {rc}) after {TIMEOUT}s; stderr: {err.strip()[:300]}")
    if rc != 2:
        raise Fail(f"exit {rc}, expected 2; stderr: {err.strip()[:400]!r}; stdout: {out.strip()[:200]!r}")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1 or not lines[0].startswith("error:"):
        raise Fail(f"expected exactly one 'error:' line, got {len(lines)}:\n{err[:1200]}")
    line = lines[0]
    for n in names:
        if n not in line:
            raise Fail(f"error line does not name {n!r}: {line[:400]}")
    for f in fields:
        if f not in line:
            raise Fail(f"error line does not name field {f!r}: {line[:400]}")
    if anyof and not any(a in line for a in anyof):
        raise Fail(f"error line names none of {anyof}: {line[:400]}")
    return line


def check_ok(rc, out, err) -> None:
    if "Traceback" in err or rc != 0:
        raise Fail(f"exit {rc}, expected 0; stderr: {err.strip()[-600:]!r}")
    noisy = [ln for ln in err.splitlines() if "warn" in ln.lower()]
    if noisy:
        raise Fail(f"library warning reached the terminal: {noisy[:3]}")


def no_new_files(before: dict, after: dict, allowed: set[str] = frozenset()) -> None:
    changed = [k for k in before if k in after and before[k] != after[k]]
    gone = [k for k in before if k not in after]
    new = [k for k in after if k not in before and k not in allowed]
    if changed:
        raise Fail(f"input(s) modified: {changed}")
    if gone:
        raise Fail(f"input(s) removed: {gone}")
    if new:
        raise Fail(f"partial output / leftover file(s): {new}")


def error_case(d: Path, argv: list[str], names=(), fields=(), anyof=None, fsize_kb=None, **extra) -> str:
    before = snapshot(d)
    rc, out, err, dt = cli(argv, d, fsize_kb, **extra)
    line = check_error(rc, out, err, names, fields, anyof)
    no_new_files(before, snapshot(d))
    return f"{line[:230]}  [{dt:.1f}s]"


# ----------------------------------------------------------------------------- inputs


def load_embedded_trace() -> tuple[np.ndarray, str]:
    with np.load(REPO_DATA / "traces" / "qwen3-30b-a3b-like.npz") as z:
        return z["topk"], str(z["meta"])


def save_npz(path: Path, topk: np.ndarray, meta: dict | str) -> None:
    meta_s = meta if isinstance(meta, str) else json.dumps(meta)
    np.savez(path, topk=topk, meta=np.array(meta_s))


def small_trace(path: Path, experts=8, top_k=2, steps=6, streams=2, layers=2, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    topk = (
        np.stack([rng.permutation(experts)[:top_k] for _ in range(steps * streams * layers)])
        .reshape(steps, streams, layers, top_k)
        .astype(np.int16)
    )
    save_npz(
        path, topk, {"model": "m", "experts": experts, "top_k": top_k, "source": "audit", "provenance": "synthetic"}
    )
    return path


def hist_meta(experts=8, top_k=2, layers=1, tokens=10) -> dict:
    return {"model": "m", "experts": experts, "top_k": top_k, "layers": layers, "tokens": tokens,
            "source": "audit", "layers_summed": False, "provenance": "synthetic"}  # fmt: skip


def copy_embedded(d: Path, src: str, dst: str) -> Path:
    (d / dst).write_bytes((REPO_DATA / src).read_bytes())
    return d / dst


def matrix_csv(layers=4, experts=8, seed=1, prefix="Expert_") -> str:
    rng = np.random.default_rng(seed)
    rows = ["Layer," + ",".join(f"{prefix}{i}" for i in range(experts))]
    for lay in range(layers):
        c = rng.integers(10, 100, experts)
        rows.append(f"{lay}," + ",".join(str(int(x)) for x in c))
    return "\n".join(rows) + "\n"


def table_csv(n_steps=6, streams=2, layers=2, experts=8, k=2, seed=2) -> str:
    rng = np.random.default_rng(seed)
    rows = ["stream,step,layer," + ",".join(f"e{j}" for j in range(k))]
    for s in range(n_steps):
        for m in range(streams):
            for lay in range(layers):
                ids = rng.permutation(experts)[:k]
                rows.append(f"{m},{s},{lay}," + ",".join(str(int(i)) for i in ids))
    return "\n".join(rows) + "\n"


TABLE_ARGS = [
    "--columns",
    "stream=stream,step=step,layer=layer",
    "--expert-cols",
    "e0,e1",
    "--experts",
    "8",
    "--top-k",
    "2",
]


# ----------------------------------------------------------------------------- 1. allocations


@case("alloc: fit on a 9 KB trace whose meta says E = 2^20")
def _(d):
    t = small_trace(d / "t.npz", experts=8, top_k=2, steps=40, streams=4, layers=4)
    _, _meta = np.load(t)["topk"], None
    with np.load(t) as z:
        topk = z["topk"]
    save_npz(d / "t.npz", topk, {"model": "m", "experts": 1 << 20, "top_k": 2, "source": "audit"})
    return error_case(d, ["fit", "t.npz"], names=["t.npz"], fields=["experts"])


@case("alloc: union on a 40-byte histogram with E = 2^20 in its sidecar")
def _(d):
    (d / "h.csv").write_text("layer,expert,count\n0,0,7\n0,1,3\n")
    (d / "h.json").write_text(json.dumps(hist_meta(experts=1 << 20, top_k=1, tokens=10)))
    before = snapshot(d)
    rc, out, err, dt = cli(["union", "h.csv", "--batch", "1,8,64"], d)
    if rc == 0:
        check_ok(rc, out, err)
    else:
        check_error(rc, out, err, names=["h."])
    no_new_files(before, snapshot(d))
    return f"exit {rc} in {dt:.1f}s (bootstrap drawn in chunks)"


@case("alloc: fit / split / plan --routing on the 40-byte E = 2^20 histogram")
def _(d):
    (d / "h.csv").write_text("layer,expert,count\n0,0,7\n0,1,3\n")
    (d / "h.json").write_text(json.dumps(hist_meta(experts=1 << 20, top_k=1, tokens=10)))
    res = []
    for argv in (
        ["fit", "h.csv"],
        ["split", "h.csv", "--ranks", "2", "--method", "lpt"],
        ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--routing", "h.csv"],
    ):
        before = snapshot(d)
        rc, out, err, dt = cli(argv, d)
        if rc == 0:
            check_ok(rc, out, err)
        else:
            check_error(rc, out, err, names=["h."])
        no_new_files(before, snapshot(d))
        res.append(f"{argv[0]}: exit {rc} {dt:.0f}s")
    return "; ".join(res)


@case("alloc: mrc --slices 2^40")
def _(d):
    copy_embedded(d, "traces/qwen3-30b-a3b-like.npz", "t.npz")
    return error_case(d, ["mrc", "t.npz", "--sample-rate", "0.1", "--slices", str(1 << 40)], fields=["--slices"])


@case("alloc: import table of a 100 KB Parquet of one repeated value (20M rows)")
def _(d):
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 20_000_000
    col = pa.array(np.zeros(n, dtype=np.int64))
    pq.write_table(pa.table({"stream": col, "step": col, "layer": col, "e0": col, "e1": col}), d / "one.parquet")
    size = (d / "one.parquet").stat().st_size
    before = snapshot(d)
    argv = ["import", "table", "one.parquet", "-o", "o.npz", *TABLE_ARGS]
    rc, out, err, dt = cli(argv, d)
    # one value everywhere: every token repeats expert 0 in both slots -> must be refused (not K distinct ids)
    line = check_error(rc, out, err, names=["one.parquet"])
    no_new_files(before, snapshot(d))
    return f"{size // 1024} KB file: {line[:200]} [{dt:.1f}s]"


@case("alloc: a model preset with expert_bytes = 2^70 (an integer, and 1e21 as a float) in plan")
def _(d):
    base = (REPO_DATA / "presets" / "models" / "glm-5.2.toml").read_text().splitlines()
    res = []
    for name, value in (("int.toml", str(1 << 70)), ("float.toml", "1e21")):
        lines = [
            f'expert_bytes = {{ value = {value}, unit = "B", source = "audit" }}'
            if ln.startswith("expert_bytes")
            else ln
            for ln in base
        ]
        (d / name).write_text("\n".join(lines) + "\n")
        argv = ["plan", "--model", name, "--hardware", "nvme-gen4", "--batch", "1,8"]
        res.append(error_case(d, argv, names=[name], fields=["expert_bytes", ":10:"]))
    return "; ".join(res)


@case("alloc: a hardware preset with ram_bytes = 2^70 B in plan")
def _(d):
    base = (REPO_DATA / "presets" / "hardware" / "nvme-gen4.toml").read_text()
    (d / "box.toml").write_text(
        base.replace('ram_bytes = { value = 62, unit = "GB"', f'ram_bytes = {{ value = {1 << 70}, unit = "B"')
    )
    return error_case(
        d,
        ["plan", "--model", "glm-5.2", "--hardware", "box.toml", "--batch", "1"],
        names=["box.toml"],
        fields=["ram_bytes"],
    )


@case("alloc: a sweep grid with experts = 2^62 (fixed, and swept)")
def _(d):
    res = []
    for name, text in (
        ("u.toml", f'command = "union"\nbatch = [1, 8]\n[fixed]\nexperts = {1 << 62}\ntop_k = 8\nlayers = 4\n'),
        (
            "c.toml",
            f'command = "cache"\ncapacity = 8\nexperts = [8, {1 << 62}]\n[fixed]\nrouting = "uniform"\n'
            "top_k = 2\nlayers = 2\nsteps = 10\nstreams = 1\nseed = 0\n",
        ),
    ):
        (d / name).write_text(text)
        res.append(error_case(d, ["sweep", name, "-o", "s.parquet"], names=[name], fields=["experts"]))
    return "; ".join(res)


@case("unusual: import table of 20M Parquet rows (5 integer columns) fits the 4 GB cap; 40M are refused unread")
def _(d):
    import pyarrow as pa
    import pyarrow.parquet as pq

    res = []
    for n_steps, name in ((50_000, "fits.parquet"), (100_000, "big.parquet")):
        streams, layers = 8, 50
        n = n_steps * streams * layers
        low = np.random.default_rng(0).integers(0, 4, n)
        cols = {
            "stream": np.tile(np.repeat(np.arange(streams), layers), n_steps),
            "step": np.repeat(np.arange(n_steps), streams * layers),
            "layer": np.tile(np.arange(layers), n_steps * streams),
            "e0": low,
            "e1": low + 4,
        }
        pq.write_table(pa.table(cols), d / name)
        del cols, low
    args = ["--columns", "stream=stream,step=step,layer=layer", *TABLE_ARGS[2:]]
    before = snapshot(d)
    rc, out, err, dt = cli(["import", "table", "fits.parquet", "-o", "o.npz", *args], d)
    check_ok(rc, out, err)
    no_new_files(before, snapshot(d), allowed={"o.npz"})
    res.append(f"20M rows imported in {dt:.0f}s")
    res.append(
        error_case(d, ["import", "table", "big.parquet", "-o", "b.npz", *args], names=["big.parquet"], fields=["rows"])
    )
    return "; ".join(res)


@case("valid: plan --ranks 17 and 256 (more than numpy broadcasts at once)")
def _(d):
    res = []
    for ranks in ("17", "256"):
        argv = ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--set", "bw_link_bytes_per_s=25GB/s"]
        rc, out, err, dt = cli([*argv, "--batch", "1,8", "--ranks", ranks], d)
        check_ok(rc, out, err)
        res.append(f"--ranks {ranks}: exit 0 in {dt:.1f}s")
    return "; ".join(res)


@case("alloc: calibrate --matmul-n 20000 and bench --steps 200000 under the 4 GB cap")
def _(d):
    calib = ["calibrate", "--matmul-n", "20000", "--seconds", "0.1", "--no-engine", "--file-mib", "1", "-o", "c.toml"]
    res = [error_case(d, calib, fields=["--matmul-n", "available"])]
    bench = ["bench", "--steps", "200000", "--experts", "8", "--layers", "2", "--scratch-dir", "."]
    res.append(error_case(d, bench, fields=["--steps", "available"]))
    return "; ".join(res)


@case("alloc: a 1 KB trace of 65,536 layers declaring E = 2^20 (union, histogram, cache, mrc)")
def _(d):
    topk = np.zeros((2, 1, 65536, 1), dtype=np.int32)
    topk[1] = 1
    meta = {"model": "m", "experts": 1 << 20, "top_k": 1, "source": "audit"}
    np.savez_compressed(d / "wide.npz", topk=topk, meta=np.array(json.dumps(meta)))
    res = []
    for argv in (
        ["union", "wide.npz", "--batch", "1"],
        ["histogram", "wide.npz", "-o", "h.csv"],
        ["cache", "wide.npz", "--policy", "lru", "--capacity-experts", "64"],
        ["mrc", "wide.npz"],
    ):
        res.append(error_case(d, argv, names=["wide.npz"], fields=["experts"]))
    return f"{(d / 'wide.npz').stat().st_size} B: " + res[0]


@case("alloc: preset-from-hf of a config.json with 2^62 experts (no preset left, the config named)")
def _(d):
    (d / "ckpt").mkdir()
    config = {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_local_experts": 1 << 62, "num_experts_per_tok": 2, "vocab_size": 32000, "torch_dtype": "bfloat16",
    }  # fmt: skip
    (d / "ckpt" / "config.json").write_text(json.dumps(config))
    return error_case(d, ["preset-from-hf", "ckpt", "-o", "p.toml"], names=["config.json"], fields=["experts"])


@case("alloc: import hf-router-logits of a 1 MB .npz inflating to 1 GiB")
def _(d):
    logits = np.zeros((8, 1 << 21, 16), np.float32)  # 1 GiB
    buf = io.BytesIO()
    np.save(buf, logits)
    del logits
    with zipfile.ZipFile(d / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("router_logits.npy", buf.getvalue())
    del buf
    size = (d / "bomb.npz").stat().st_size
    line = error_case(d, ["import", "hf-router-logits", "bomb.npz", "-o", "o.npz", "--top-k", "2"], names=["bomb.npz"])
    return f"{size / 1e6:.1f} MB file: {line}"


# ----------------------------------------------------------------------------- 2. hangs


def fifo_case(d: Path, fifo_name: str, argv: list[str], prepare) -> str:
    prepare(d)
    (d / fifo_name).unlink(missing_ok=True)
    os.mkfifo(d / fifo_name)
    freed = []
    stop = threading.Event()

    def free():  # if still blocked after 30 s, open the FIFO for writing so the run ends
        if stop.wait(30):
            return
        freed.append(1)
        while not stop.is_set():
            try:
                os.close(os.open(d / fifo_name, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
            time.sleep(0.05)

    th = threading.Thread(target=free, daemon=True)
    th.start()
    try:
        before = snapshot(d)
        rc, out, err, dt = cli(argv, d)
    finally:
        stop.set()
        th.join()
    if freed:
        raise Fail(f"blocked on the FIFO {fifo_name} for 30 s (freed by a writer); then exit {rc}: {err.strip()[:200]}")
    line = check_error(rc, out, err, names=[fifo_name])
    no_new_files(before, snapshot(d))
    return f"{line[:200]} [{dt:.1f}s]"


@case("hang: a FIFO as a histogram's sidecar (union)")
def _(d):
    return fifo_case(
        d, "h.json", ["union", "h.csv", "--batch", "4"],
        lambda d: copy_embedded(d, "histograms/deepseek-v3-like.csv", "h.csv"),
    )  # fmt: skip


@case("hang: a FIFO as a .npy trace's sidecar (cache)")
def _(d):
    def prep(d):
        topk, _ = load_embedded_trace()
        np.save(d / "t.npy", topk)

    return fifo_case(d, "t.json", ["cache", "t.npy", "--policy", "lru", "--capacity-experts", "64"], prep)


@case("hang: a FIFO as --routing-knobs (plan)")
def _(d):
    argv = ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--routing-knobs", "k.json"]
    return fifo_case(d, "k.json", argv, lambda d: None)


@case("hang: a FIFO as report -f params")
def _(d):
    return fifo_case(d, "p.yaml", ["report", "-f", "p.yaml", "--notebooks", "net_toks", "--out", "r"], lambda d: None)


def yaml_bomb(param: str) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefgh":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
        prev = name
    lines.append(f"{param}: [" + ",".join([f"*{prev}"] * 10) + "]")
    return "\n".join(lines) + "\n"


@case("hang: a YAML alias bomb in report -f (on a declared parameter)")
def _(d):
    text = yaml_bomb("model")
    (d / "p.yaml").write_text("\n".join(x for x in text.splitlines() if not x.startswith(tuple("bcdefgh")) or True))
    # the declared parameter holds the bomb; the helper keys a..h are undeclared parameters too
    return f"{len(text)} bytes: " + error_case(
        d, ["report", "-f", "p.yaml", "--notebooks", "net_toks", "--out", "r"], names=["p.yaml"]
    )


@case("hang: a YAML alias bomb in report -f (only declared parameters, anchors in a list)")
def _(d):
    # every key is one net_toks declares: the bomb hides under `routing` inside one value
    lines = ['routing: [&a ["x","x","x","x","x","x","x","x","x","x"]']
    prev = "a"
    for name in "bcdefgh":
        lines.append(f"  , &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
        prev = name
    lines.append("  ]")
    lines.append("overlap: [" + ",".join([f"*{prev}"] * 10) + "]")
    (d / "p.yaml").write_text("\n".join(lines) + "\n")
    return error_case(d, ["report", "-f", "p.yaml", "--notebooks", "net_toks", "--out", "r"], names=["p.yaml"])


@case("hang: a 1 MB model TOML, one dotted key 500,000 deep (plan --model)")
def _(d):
    key = ".".join(["a"] * 500_000)
    (d / "m.toml").write_text(key + " = 1\n")
    argv = ["plan", "--model", "m.toml", "--hardware", "nvme-gen4", "--batch", "1"]
    line = error_case(d, argv, names=["m.toml"])
    return line


@case("hang: a 1 MB sweep grid TOML, one dotted key 500,000 deep")
def _(d):
    key = ".".join(["a"] * 500_000)
    (d / "g.toml").write_text('command = "union"\n' + key + " = 1\n")
    return error_case(d, ["sweep", "g.toml", "-o", "s.parquet"], names=["g.toml"])


# ----------------------------------------------------------------------------- 3. damaged traces

CMDS = {
    "union": lambda p: ["union", p, "--batch", "1,2"],
    "cache": lambda p: ["cache", p, "--policy", "lru", "--capacity-experts", "64"],
    "mrc": lambda p: ["mrc", p],
    "histogram": lambda p: ["histogram", p, "-o", "h-out.csv"],
    "fit": lambda p: ["fit", p, "--bootstrap", "2", "--gof-sims", "2"],
}


def cut_npz(d: Path) -> Path:
    good = (REPO_DATA / "traces" / "qwen3-30b-a3b-like.npz").read_bytes()
    (d / "half.npz").write_bytes(good[: len(good) // 2])
    return d / "half.npz"


for _cmd in CMDS:

    def _mk(cmd):
        @case(f"traceback: an .npz cut in half in {cmd}")
        def _(d):
            cut_npz(d)
            return error_case(d, CMDS[cmd]("half.npz"), names=["half.npz"])

    _mk(_cmd)


@case("traceback: an .npz truncated while cache reads it")
def _(d):
    base, meta = load_embedded_trace()
    topk = np.tile(base, (125, 1, 1, 1))  # 12,000 steps, 147 MB
    src = d / "src.npz"
    save_npz(src, topk, meta)
    size = src.stat().st_size
    results = []
    for delay in (0.35, 0.5, 0.7, 1.0):
        work = d / "big.npz"
        shutil.copyfile(src, work)
        p = subprocess.Popen(shell_cmd(CMDS["cache"]("big.npz")), cwd=d, env=env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(delay)
        os.truncate(work, size // 2)
        out, err = p.communicate(timeout=180)
        rc = p.returncode
        if rc == 0:
            results.append(f"{delay}s: exit 0 (read before the cut)")
            continue
        line = check_error(rc, out, err, names=["big.npz"])
        results.append(f"{delay}s: {line[:120]}")
    work.unlink()
    src.unlink()
    return f"{size / 1e6:.0f} MB: " + " | ".join(results)


@case("traceback: a .npy renamed .npz (union, cache, fit)")
def _(d):
    topk, _ = load_embedded_trace()
    np.save(d / "x.npy", topk)
    os.rename(d / "x.npy", d / "renamed.npz")
    r = [error_case(d, CMDS[c]("renamed.npz"), names=["renamed.npz"]) for c in ("union", "cache", "fit")]
    return r[0]


@case("unusual: an .npz member without the .npy suffix (read, same answer)")
def _(d):
    topk, meta = load_embedded_trace()
    a, m = io.BytesIO(), io.BytesIO()
    np.save(a, topk)
    np.save(m, np.array(meta))
    with zipfile.ZipFile(d / "odd.npz", "w") as zf:
        zf.writestr("topk", a.getvalue())
        zf.writestr("meta.npy", m.getvalue())
    copy_embedded(d, "traces/qwen3-30b-a3b-like.npz", "good.npz")
    before = snapshot(d)
    rc, out, err, _ = cli(["union", "odd.npz", "--batch", "1,2", "--format", "csv"], d)
    if rc == 2:
        line = check_error(rc, out, err, names=["odd.npz"])
        no_new_files(before, snapshot(d))
        return f"refused cleanly: {line[:200]}"
    check_ok(rc, out, err)
    rc2, out2, _, _ = cli(["union", "good.npz", "--batch", "1,2", "--format", "csv"], d)
    body = lambda s: [ln for ln in s.splitlines() if not ln.startswith("#")]  # noqa: E731
    if body(out) != body(out2):
        raise Fail("read, but its answer differs from the plain .npz's")
    no_new_files(before, snapshot(d))
    return "read; union equals the plain .npz's"


@case("traceback: an .npy with a zip appended (union, cache)")
def _(d):
    topk, meta = load_embedded_trace()
    buf = io.BytesIO()
    np.save(buf, topk)
    (d / "poly.npy").write_bytes(buf.getvalue() + (REPO_DATA / "traces" / "qwen3-30b-a3b-like.npz").read_bytes())
    (d / "poly.json").write_text(meta)
    r = [error_case(d, CMDS[c]("poly.npy"), names=["poly.npy"]) for c in ("union", "cache")]
    return r[0]


@case("traceback: an .npz with a .npy polyglot (npz named .npy without sidecar)")
def _(d):
    copy_embedded(d, "traces/qwen3-30b-a3b-like.npz", "zip.npy")
    return error_case(d, CMDS["union"]("zip.npy"), names=["zip.npy"])


# ----------------------------------------------------------------------------- csv field limit

BIG = "9" * 200_000


@case("traceback: a CSV cell over the csv field limit in a POINTS file (fit-routing)")
def _(d):
    text = (REPO_DATA / "points" / "example.points").read_text().splitlines()
    text.append(f"union,8,,,lru,global,1,lpt,,{BIG}")
    (d / "p.csv").write_text("\n".join(text) + "\n")
    argv = ["fit-routing", "p.csv", "--experts", "64", "--top-k", "4", "--layers", "8"]
    return error_case(d, argv, names=["p.csv"], anyof=["note", str(len(text))])


@case("traceback: a CSV cell over the csv field limit in a plan-points file (fit-plan)")
def _(d):
    text = (REPO_DATA / "points" / "bigrig.plan-points").read_text().splitlines()
    hdr = [i for i, ln in enumerate(text) if ln and not ln.startswith("#")][0]
    ncol = text[hdr].count(",") + 1
    text.append(",".join(["1"] + [BIG] + [""] * (ncol - 2)))
    (d / "pp.csv").write_text("\n".join(text) + "\n")
    argv = ["fit-plan", "pp.csv", "--model", "glm-5.2", "--hardware", "nvme-gen4"]
    return error_case(d, argv, names=["pp.csv"])


@case("traceback: a CSV cell over the csv field limit in import table")
def _(d):
    text = table_csv().splitlines()
    text.append(f"0,99,0,{BIG},1")
    (d / "src.csv").write_text("\n".join(text) + "\n")
    return error_case(d, ["import", "table", "src.csv", "-o", "o.npz", *TABLE_ARGS], names=["src.csv"])


@case("traceback: a CSV cell over the csv field limit in import matrix")
def _(d):
    text = matrix_csv().splitlines()
    text.append("4," + ",".join([BIG] + ["1"] * 7))
    (d / "src.csv").write_text("\n".join(text) + "\n")
    argv = ["import", "matrix", "src.csv", "-o", "o.csv", "--layer-col", "Layer", "--expert-prefix", "Expert_",
            "--top-k", "2"]  # fmt: skip
    return error_case(d, argv, names=["src.csv"])


@case("traceback: a CSV cell over the csv field limit in a histogram (union)")
def _(d):
    (d / "h.csv").write_text(f"layer,expert,count\n0,0,{BIG}\n")
    (d / "h.json").write_text(json.dumps(hist_meta()))
    return error_case(d, ["union", "h.csv", "--batch", "2"], names=["h.csv"])


# ----------------------------------------------------------------------------- silent wrong answers

MATRIX_ARGS = ["--layer-col", "Layer", "--expert-prefix", "Expert_", "--top-k", "2"]


@case("wrong answer: import matrix with a duplicated Expert_1 column")
def _(d):
    text = matrix_csv().splitlines()
    text = [text[0] + ",Expert_1"] + [ln + ",5" for ln in text[1:]]
    (d / "dup.csv").write_text("\n".join(text) + "\n")
    return error_case(d, ["import", "matrix", "dup.csv", "-o", "o.csv", *MATRIX_ARGS], names=["dup.csv", "Expert_1"])


@case("wrong answer: import matrix with Expert_1 and Expert_01")
def _(d):
    text = matrix_csv().splitlines()
    text = [text[0] + ",Expert_01"] + [ln + ",5" for ln in text[1:]]
    (d / "dup.csv").write_text("\n".join(text) + "\n")
    return error_case(d, ["import", "matrix", "dup.csv", "-o", "o.csv", *MATRIX_ARGS], names=["dup.csv"])


def union_grid(batches: list[int], experts: int) -> str:
    return f'command = "union"\nbatch = {batches}\n[fixed]\nexperts = {experts}\ntop_k = 4\nlayers = 2\n'


@case("lost update: two sweeps of different grids onto one -o at the same time")
def _(d):
    (d / "g1.toml").write_text(union_grid(list(range(1, 41)), 64))
    (d / "g2.toml").write_text(union_grid(list(range(1, 41)), 32))
    tries = []
    for _attempt in range(3):
        (d / "s.parquet").unlink(missing_ok=True)
        procs = [
            subprocess.Popen(
                shell_cmd(["sweep", g, "-o", "s.parquet"]),
                cwd=d,
                env=env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for g in ("g1.toml", "g2.toml")
        ]
        res = [(p.wait(timeout=200), *p.communicate()) for p in procs]
        rcs = [r[0] for r in res]
        import pyarrow.parquet as pq

        rows = pq.read_table(d / "s.parquet").to_pandas() if (d / "s.parquet").exists() else None
        n = 0 if rows is None else len(rows)
        if rcs == [0, 0]:
            if n < 80:
                raise Fail(f"both sweeps reported success, the file keeps {n} of 80 rows (lost update)")
            tries.append("both 0, 80 rows (serialised)")
        elif sorted(rcs) == [0, 2]:
            loser = res[rcs.index(2)]
            line = check_error(2, loser[1], loser[2], names=["s.parquet"])
            tries.append(f"one failed: {line[:150]}")
        else:
            raise Fail(f"exit statuses {rcs}: {[r[2][-300:] for r in res]}")
    leftovers = [p.name for p in d.iterdir() if p.name.startswith(".")]
    if leftovers:
        raise Fail(f"left behind: {leftovers}")
    return " | ".join(tries)


# ----------------------------------------------------------------------------- partial outputs


class Tiny:
    """A 64 KiB tmpfs at d/tiny (a full disk once something is written)."""

    def __init__(self, d: Path, kb: int = 256, free_kb: int = 12):
        if os.geteuid() != 0:
            raise Skip("mounting a tmpfs needs root")
        self.path = d / "tiny"
        self.path.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs", str(self.path)], check=True)
        self.free_kb = free_kb

    def __enter__(self):
        # fill it, then free free_kb: a disk with room for a sidecar but not for the data
        filler = self.path / ".filler"
        try:
            with open(filler, "wb") as fh:
                while True:
                    fh.write(b"x" * 4096)
                    fh.flush()
        except OSError:
            pass
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - self.free_kb * 1024))
        return self.path

    def __exit__(self, *exc):
        subprocess.run(["umount", str(self.path)], check=False)


def full_disk_case(d: Path, argv_fn, outputs: list[str], setup=None) -> str:
    if setup:
        setup(d)
    with Tiny(d) as tiny:
        before = snapshot(d)
        rc, out, err, dt = cli(argv_fn(tiny), d)
        line = check_error(rc, out, err, anyof=["space", "full", "large", "whole"])
        left = sorted(p.name for p in tiny.iterdir() if p.name != ".filler")
        if left:
            raise Fail(f"partial output on the full disk: {left} ({line[:150]})")
        no_new_files(before, snapshot(d))
    return f"{line[:200]} [{dt:.1f}s]"


@case("partial: histogram onto a full disk (tmpfs)")
def _(d):
    copy_embedded(d, "traces/qwen3-30b-a3b-like.npz", "t.npz")
    return full_disk_case(d, lambda t: ["histogram", "t.npz", "-o", f"{t}/h.csv"], ["h.csv", "h.json"])


@case("partial: trace onto a full disk (tmpfs, .npy + sidecar)")
def _(d):
    argv = lambda t: ["trace", "--family", "uniform", "--streams", "4", "--steps", "2000", "-o", f"{t}/t.npy"]  # noqa: E731
    return full_disk_case(d, argv, ["t.npy", "t.json"])


@case("partial: import matrix onto a full disk (tmpfs)")
def _(d):
    (d / "m.csv").write_text(matrix_csv(layers=48, experts=128))
    return full_disk_case(d, lambda t: ["import", "matrix", "m.csv", "-o", f"{t}/o.csv", *MATRIX_ARGS], [])


@case("partial: histogram / trace / import matrix under ulimit -f 16 KiB")
def _(d):
    copy_embedded(d, "traces/qwen3-30b-a3b-like.npz", "t.npz")
    (d / "m.csv").write_text(matrix_csv(layers=48, experts=128))
    res = []
    for argv in (
        ["histogram", "t.npz", "-o", "h.csv"],
        ["trace", "--family", "uniform", "--streams", "4", "--steps", "2000", "-o", "tr.npy"],
        ["import", "matrix", "m.csv", "-o", "o.csv", *MATRIX_ARGS],
    ):
        line = error_case(d, argv, fsize_kb=16, anyof=["large", "space", "whole", "limit"])
        res.append(line[:90])
    return " | ".join(res)


@case("partial: histogram -o X.csv where X.csv is a folder")
def _(d):
    copy_embedded(d, "traces/qwen3-30b-a3b-like.npz", "t.npz")
    (d / "X.csv").mkdir()
    return error_case(d, ["histogram", "t.npz", "-o", "X.csv"], names=["X.csv"])


@case("partial: histogram -o X.csv --force where X.csv / X.json is a folder")
def _(d):
    copy_embedded(d, "traces/qwen3-30b-a3b-like.npz", "t.npz")
    (d / "X.csv").mkdir()
    r1 = error_case(d, ["histogram", "t.npz", "-o", "X.csv", "--force"], names=["X.csv"])
    (d / "X.csv").rmdir()
    (d / "X.json").mkdir()
    r2 = error_case(d, ["histogram", "t.npz", "-o", "X.csv", "--force"], names=["X.json"])
    return r1[:120] + " | " + r2[:120]


@case("partial: histogram -o X.csv where X.json (its sidecar) is a folder")
def _(d):
    copy_embedded(d, "traces/qwen3-30b-a3b-like.npz", "t.npz")
    (d / "X.json").mkdir()
    return error_case(d, ["histogram", "t.npz", "-o", "X.csv"], names=["X.json"])


# ----------------------------------------------------------------------------- errors that name the file

HUGE = "1" + "0" * 5000


@case("names: a number past 4,300 digits in a histogram cell")
def _(d):
    (d / "h.csv").write_text(f"layer,expert,count\n0,0,{HUGE}\n0,1,3\n")
    (d / "h.json").write_text(json.dumps(hist_meta()))
    return error_case(d, ["union", "h.csv", "--batch", "2"], names=["h.csv"], fields=["count"])


@case("names: a number past 4,300 digits in a sidecar")
def _(d):
    (d / "h.csv").write_text("layer,expert,count\n0,0,3\n0,1,3\n")
    (d / "h.json").write_text(json.dumps(hist_meta()).replace('"tokens": 10', f'"tokens": {HUGE}'))
    return error_case(d, ["union", "h.csv", "--batch", "2"], names=["h.json"], fields=["tokens"])


@case("names: a number past 4,300 digits in a model TOML")
def _(d):
    text = (REPO_DATA / "presets" / "models" / "qwen3-30b-a3b.toml").read_text()
    import re

    text2, n = re.subn(r"(?m)^(experts = \{ value = )\d+", lambda m: m.group(1) + HUGE, text, count=1)
    if n != 1:
        raise Fail("could not place the number")
    (d / "m.toml").write_text(text2)
    argv = ["plan", "--model", "m.toml", "--hardware", "nvme-gen4", "--batch", "1"]
    return error_case(d, argv, names=["m.toml"], fields=["experts"])


@case("names: a number past 4,300 digits in a POINTS file")
def _(d):
    text = (REPO_DATA / "points" / "example.points").read_text().splitlines()
    text.append(f"union,{HUGE},,,lru,global,1,lpt,3.0,")
    (d / "p.csv").write_text("\n".join(text) + "\n")
    argv = ["fit-routing", "p.csv", "--experts", "64", "--top-k", "4", "--layers", "8"]
    return error_case(d, argv, names=["p.csv"], fields=["batch"])


@case("names: a number past 4,300 digits in --routing-knobs / a grid / a YAML param")
def _(d):
    (d / "k.json").write_text('{"family": "zipf", "skew": ' + HUGE + "}")
    r1 = error_case(d, ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1",
                        "--routing-knobs", "k.json"], names=["k.json"])  # fmt: skip
    (d / "g.toml").write_text(f'command = "union"\nbatch = [{HUGE}]\n[fixed]\nexperts = 8\ntop_k = 2\nlayers = 1\n')
    r2 = error_case(d, ["sweep", "g.toml", "-o", "s.parquet"], names=["g.toml"])
    (d / "p.yaml").write_text(f"b_max: {HUGE}\n")
    r3 = error_case(d, ["report", "-f", "p.yaml", "--notebooks", "net_toks", "--out", "r"], names=["p.yaml"])
    return " | ".join(x[:90] for x in (r1, r2, r3))


@case("names: a number past 4,300 digits as a flag value")
def _(d):
    copy_embedded(d, "histograms/deepseek-v3-like.csv", "h.csv")
    copy_embedded(d, "histograms/deepseek-v3-like.json", "h.json")
    r1 = error_case(d, ["union", "h.csv", "--batch", HUGE], fields=["--batch"])
    r2 = error_case(d, ["union", "h.csv", "--batch", "2", "--seed", HUGE], fields=["--seed"])
    return r1[:100] + " | " + r2[:100]


def deep_json(n=100_000) -> str:
    return "[" * n + "]" * n


@case("names: deep nesting in a sidecar / --routing-knobs / npz meta / model TOML / YAML")
def _(d):
    (d / "h.csv").write_text("layer,expert,count\n0,0,3\n0,1,3\n")
    (d / "h.json").write_text('{"model": "m", "x": ' + deep_json() + "}")
    r = [error_case(d, ["union", "h.csv", "--batch", "2"], names=["h.json"])]
    (d / "k.json").write_text('{"family": ' + deep_json() + "}")
    r.append(error_case(d, ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1",
                            "--routing-knobs", "k.json"], names=["k.json"]))  # fmt: skip
    topk, _ = load_embedded_trace()
    save_npz(d / "t.npz", topk, '{"experts": 128, "top_k": 8, "x": ' + deep_json() + "}")
    r.append(error_case(d, ["union", "t.npz", "--batch", "2"], names=["t.npz"]))
    (d / "m.toml").write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    r.append(error_case(d, ["plan", "--model", "m.toml", "--hardware", "nvme-gen4", "--batch", "1"], names=["m.toml"]))
    (d / "p.yaml").write_text("model: " + "[" * 50_000 + "]" * 50_000 + "\n")
    r.append(error_case(d, ["report", "-f", "p.yaml", "--notebooks", "net_toks", "--out", "r"], names=["p.yaml"]))
    return " | ".join(x[:70] for x in r)


@case("names: 2^70 layers or experts (sidecar, npz meta, model TOML, flags)")
def _(d):
    big = 1 << 70
    (d / "h.csv").write_text("layer,expert,count\n0,0,3\n0,1,3\n")
    (d / "h.json").write_text(json.dumps(hist_meta(experts=big)))
    r = [error_case(d, ["union", "h.csv", "--batch", "2"], names=["h.json"], fields=["experts"])]
    (d / "h.json").write_text(json.dumps(hist_meta(layers=big)))
    r.append(error_case(d, ["union", "h.csv", "--batch", "2"], names=["h.json"], fields=["layers"]))
    topk, _ = load_embedded_trace()
    save_npz(d / "t.npz", topk, {"experts": big, "top_k": 8})
    r.append(error_case(d, ["fit", "t.npz"], names=["t.npz"], fields=["experts"]))
    import re

    text = (REPO_DATA / "presets" / "models" / "qwen3-30b-a3b.toml").read_text()
    for key in ("experts", "moe_layers", "layers"):
        t2, n = re.subn(rf"(?m)^({key} = \{{ value = )\d+", lambda m: m.group(1) + str(big), text, count=1)
        if n:
            (d / f"m-{key}.toml").write_text(t2)
            argv = ["plan", "--model", f"m-{key}.toml", "--hardware", "nvme-gen4", "--batch", "1"]
            r.append(error_case(d, argv, names=[f"m-{key}.toml"], fields=[key]))
    for key in ("experts", "layers", "top_k"):
        fixed = {"experts": "64", "top_k": "4", "layers": "2", key: str(big)}
        (d / f"g-{key}.toml").write_text(
            'command = "union"\nbatch = [1]\n[fixed]\n' + "".join(f"{k} = {v}\n" for k, v in fixed.items())
        )
        r.append(error_case(d, ["sweep", f"g-{key}.toml", "-o", "s.parquet"], names=[f"g-{key}.toml"], fields=[key]))
    r.append(error_case(d, ["union", "--uniform", str(big), "8", "--batch", "2"], anyof=["--uniform"]))
    r.append(
        error_case(d, ["union", "--uniform", "64", "8", "--layers", str(big), "--batch", "2"], fields=["--layers"])
    )
    r.append(error_case(d, ["trace", "--family", "uniform", "--streams", "2", "--steps", "2", "--layers", str(big),
                            "-o", "t2.npz"], fields=["--layers"]))  # fmt: skip
    r.append(error_case(d, ["trace", "--family", "uniform", "--streams", "2", "--steps", "2", "--experts", str(big),
                            "-o", "t2.npz"], fields=["--experts"]))  # fmt: skip
    r.append(error_case(d, ["fit-routing", str(REPO_DATA / "points" / "example.points"), "--experts", str(big),
                            "--top-k", "4", "--layers", "8"], fields=["--experts"]))  # fmt: skip
    return f"{len(r)} cases: " + " | ".join(x[:60] for x in r)


@case("names: --ranks 10^6 (plan, split)")
def _(d):
    copy_embedded(d, "histograms/deepseek-v3-like.csv", "h.csv")
    copy_embedded(d, "histograms/deepseek-v3-like.json", "h.json")
    r1 = error_case(d, ["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1", "--ranks", "1000000"],
                    fields=["--ranks"])  # fmt: skip
    r2 = error_case(d, ["split", "h.csv", "--ranks", "1000000", "--method", "lpt"], fields=["--ranks"])
    return r1[:110] + " | " + r2[:110]


@case("names: sweep -o /dev/full")
def _(d):
    (d / "g.toml").write_text(union_grid([1, 2], 16))
    return error_case(d, ["sweep", "g.toml", "-o", "/dev/full"], names=["/dev/full"], anyof=["space", "full", "device"])


@case("names: --output /dev/full on an ordinary command (union)")
def _(d):
    return error_case(d, ["union", "--uniform", "64", "4", "--batch", "2", "--output", "/dev/full"],
                      names=["/dev/full"], anyof=["space"])  # fmt: skip


@case("names: a superscript digit in a column name (import matrix Expert_¹)")
def _(d):
    text = matrix_csv().splitlines()
    text = [text[0] + ",Expert_¹"] + [ln + ",5" for ln in text[1:]]
    (d / "sup.csv").write_text("\n".join(text) + "\n")
    return error_case(d, ["import", "matrix", "sup.csv", "-o", "o.csv", *MATRIX_ARGS], names=["sup.csv", "Expert_¹"])


@case("names: a superscript digit in a layer cell / histogram id")
def _(d):
    text = matrix_csv().splitlines()
    text[2] = "¹" + text[2][1:]
    (d / "sup.csv").write_text("\n".join(text) + "\n")
    r1 = error_case(d, ["import", "matrix", "sup.csv", "-o", "o.csv", *MATRIX_ARGS], names=["sup.csv"])
    (d / "h.csv").write_text("layer,expert,count\n0,0,3\n0,¹,3\n")
    (d / "h.json").write_text(json.dumps(hist_meta()))
    r2 = error_case(d, ["union", "h.csv", "--batch", "2"], names=["h.csv"], fields=["expert"])
    return r1[:110] + " | " + r2[:110]


@case("names: an error about a bad input must name the input, not the output sidecar")
def _(d):
    # histogram of a .npy trace whose sidecar is bad, and trace --routing of a histogram whose sidecar is bad
    topk, meta = load_embedded_trace()
    np.save(d / "t.npy", topk)
    m = json.loads(meta)
    m["top_k"] = 300
    (d / "t.json").write_text(json.dumps(m))
    r1 = error_case(d, ["histogram", "t.npy", "-o", "out.csv"], names=["t.json"], fields=["top_k"])
    if "out.json" in r1 or "out.csv" in r1:
        raise Fail(f"names the output: {r1}")
    copy_embedded(d, "histograms/deepseek-v3-like.csv", "h.csv")
    hm = json.loads((REPO_DATA / "histograms" / "deepseek-v3-like.json").read_text())
    hm["top_k"] = 999
    (d / "h.json").write_text(json.dumps(hm))
    r2 = error_case(d, ["trace", "--routing", "h.csv", "--streams", "2", "--steps", "4", "-o", "o.npy"],
                    names=["h.json"], fields=["top_k"])  # fmt: skip
    if "o.json" in r2:
        raise Fail(f"names the output: {r2}")
    # import matrix from a .npy (the importer's input) with a bad shape
    np.save(d / "m.npy", np.ones((2, 3, 4)))
    r3 = error_case(d, ["import", "matrix", "m.npy", "-o", "mo.csv", "--top-k", "2"], names=["m.npy"])
    if "mo.json" in r3:
        raise Fail(f"names the output: {r3}")
    return " | ".join(x[:90] for x in (r1, r2, r3))


EVIL_MARK = ROOT / "pwned"


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {EVIL_MARK}",))


@case("names: a torch .pt whose pickle calls os.system (hf-router-logits, sglang)")
def _(d):
    try:
        import torch
    except ImportError:
        return "torch absent: not run"
    EVIL_MARK.unlink(missing_ok=True)
    buf = io.BytesIO()
    torch.save({"x": 1}, buf)
    # a torch zip whose data.pkl is replaced by the evil pickle
    zin = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    with zipfile.ZipFile(d / "evil.pt", "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("data.pkl"):
                data = pickle.dumps(Evil(), protocol=2)
            zout.writestr(info, data)
    (d / "legacy.pt").write_bytes(pickle.dumps(Evil(), protocol=2))  # legacy (non-zip) format
    r = []
    for f in ("evil.pt", "legacy.pt"):
        for fmt in ("hf-router-logits", "sglang"):
            r.append(error_case(d, ["import", fmt, f, "-o", "o.npz", "--top-k", "2"], names=[f]))
            if EVIL_MARK.exists():
                raise Fail(f"os.system ran ({fmt} {f})")
    return f"torch {torch.__version__}: " + r[0][:150]


# ----------------------------------------------------------------------------- valid input refused


def bomify(text: str) -> bytes:
    return b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode()


def body(s: str) -> list[str]:
    return [ln for ln in s.splitlines() if not ln.startswith("#") and ln.strip()]


def twin_case(d: Path, plain: str, text: str, argv_fn, compare_file: str | None = None) -> str:
    (d / f"plain{plain}").write_text(text)
    (d / f"bom{plain}").write_bytes(bomify(text))
    before = snapshot(d)
    rc, out, err, _ = cli(argv_fn("bom"), d)
    check_ok(rc, out, err)
    rc2, out2, err2, _ = cli(argv_fn("plain"), d)
    check_ok(rc2, out2, err2)
    if compare_file:
        a = body((d / compare_file.format("bom")).read_text())
        b = body((d / compare_file.format("plain")).read_text())
    else:
        a, b = body(out), body(out2)
    if a != b:
        raise Fail(f"BOM+CRLF answer differs from the plain file's: {a[:3]} vs {b[:3]}")
    after = snapshot(d)
    for k, v in before.items():
        if after.get(k) != v:
            raise Fail(f"input modified: {k}")
    return "exit 0, same answer as the plain file"


@case("valid: a BOM + CRLF histogram CSV in union")
def _(d):
    src = (REPO_DATA / "histograms" / "deepseek-v3-like.csv").read_text()
    side = (REPO_DATA / "histograms" / "deepseek-v3-like.json").read_text()
    (d / "plain.json").write_text(side)
    (d / "bom.json").write_text(side)
    return twin_case(d, ".csv", src, lambda s: ["union", f"{s}.csv", "--batch", "1,8", "--format", "csv"])


@case("valid: a BOM + CRLF CSV in import table")
def _(d):
    return twin_case(d, ".csv", table_csv(), lambda s: ["import", "table", f"{s}.csv", "-o", f"o-{s}.csv", *TABLE_ARGS],
                     compare_file="o-{}.csv")  # fmt: skip


@case("valid: a BOM + CRLF CSV in import matrix")
def _(d):
    return twin_case(d, ".csv", matrix_csv(), lambda s: ["import", "matrix", f"{s}.csv", "-o", f"o-{s}.csv", *MATRIX_ARGS],
                     compare_file="o-{}.csv")  # fmt: skip


@case("valid: a BOM + CRLF POINTS file in fit-routing (bootstrap 1)")
def _(d):
    text = (REPO_DATA / "points" / "example.points").read_text()
    return twin_case(d, ".csv", text, lambda s: ["fit-routing", f"{s}.csv", "--experts", "64", "--top-k", "4", "--layers",
                     "8", "--expert-bytes", "4194304", "--seeds", "1", "--bootstrap", "1", "--timed-steps", "4", "--format", "csv"])  # fmt: skip


# ----------------------------------------------------------------------------- interrupts


@case("interrupt: Ctrl-C during a serial sweep exits 130")
def _(d):
    copy_embedded(d, "sweeps/example-plan.toml", "g.toml")
    (d / "g.toml").write_text((d / "g.toml").read_text().replace('routing = "uniform"', 'routing = "prior"'))
    p = subprocess.Popen(shell_cmd(["sweep", "g.toml", "-o", "s.parquet"]), cwd=d,
                         env=env(MOEROOF_PROGRESS="1", MOEROOF_CACHE_DIR=str(d / "memo")),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    first = p.stderr.read(1)
    time.sleep(0.3)
    # a terminal's Ctrl-C goes to the foreground process group: signal the python process itself
    kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    target = int(kids[0]) if kids else p.pid  # bash exec'd timeout; timeout's child is python
    kids2 = subprocess.run(["pgrep", "-P", str(target)], capture_output=True, text=True).stdout.split()
    py = int(kids2[0]) if kids2 else target
    os.kill(py, signal.SIGINT)
    out, err = p.communicate(timeout=120)
    err = first + err
    rc = p.returncode
    if "Traceback" in err:
        raise Fail(f"traceback: {err[-500:]}")
    if rc != 130:
        raise Fail(f"exit {rc} after Ctrl-C; stderr tail {err[-300:]!r}")
    # the progress line is cleared with ESC[K before the message: what a terminal shows
    lines = [ln.replace("\x1b[K", "") for ln in err.replace("\r", "\n").splitlines() if "error:" in ln]
    leftovers = [x.name for x in d.iterdir() if x.name.startswith(".") or ".tmp" in x.name]
    if p.returncode == 130 and not any("interrupted" in ln for ln in lines):
        raise Fail("exit 130 but no line saying what was kept")
    if leftovers:
        raise Fail(f"left behind: {leftovers}")
    return f"exit 130; {lines[-1][:160] if lines else '(no message)'}"


@case("interrupt: Ctrl-C (SIGINT to the group) during union / fit-routing exits 130")
def _(d):
    copy_embedded(d, "points/example.points", "p.csv")
    res = []
    for argv in (
        ["fit-routing", "p.csv", "--experts", "64", "--top-k", "4", "--layers", "8", "--expert-bytes", "4194304"],
    ):
        p = subprocess.Popen([PY, "-m", "moeroof.cli", *argv], cwd=d, env=env(MOEROOF_PROGRESS="1"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
        p.stderr.read(1)
        time.sleep(0.5)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
        if p.returncode != 130 or "Traceback" in err:
            raise Fail(f"{argv[0]}: exit {p.returncode}: {err[-300:]}")
        res.append(f"{argv[0]}: 130")
    return "; ".join(res)


# ----------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=LIB, help="the library to run (default: this checkout's lib/)")
    ap.add_argument(
        "--cases", type=Path, default=ROOT, help="where the cases' inputs go (default: a new temporary folder)"
    )
    ap.add_argument("-k", action="append", default=[], help="run only the cases whose name holds this")
    a = ap.parse_args()
    globals()["LIB"] = a.lib
    root = a.cases / "cases"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    fails = skipped = 0
    selected = [(n, f) for n, f in CASES if not a.k or any(k in n for k in a.k)]
    for i, (name, fn) in enumerate(selected, 1):
        d = root / f"{i:02d}"
        d.mkdir()
        t0 = time.time()
        try:
            msg = fn(d)
            status = "HOLDS"
        except Skip as exc:
            msg, status = str(exc), "SKIPS"
            skipped += 1
        except Fail as exc:
            msg, status = str(exc), "FAILS"
            fails += 1
        except Exception as exc:  # the harness itself
            msg, status = f"harness error {type(exc).__name__}: {exc}", "FAILS"
            fails += 1
        print(f"[{i:02d}] {status}  {name}  ({time.time() - t0:.0f}s)\n      {msg}", flush=True)
        if status == "HOLDS":
            shutil.rmtree(d, ignore_errors=True)
    print(f"\n{len(selected) - fails - skipped} of {len(selected)} hold; {fails} fail; {skipped} skipped")
    if fails == 0 and a.cases == ROOT:  # nothing to look at: the temporary folder goes
        shutil.rmtree(ROOT, ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
