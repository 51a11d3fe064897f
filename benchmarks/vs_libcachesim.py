#!/usr/bin/env python
"""Whole commands side by side: ``moeroof cache`` / ``mrc`` against libCacheSim and the C reference.

For each size N (requests; default 10^6 and 10^7, ``--big`` adds
10^8 — about 2.4 GB of oracleGeneral file and 0.8 GB of C input on disk per 10^8, see ``df -h``):

1. a synthetic ``.npy`` trace (:mod:`make_big_trace`: 80 layers × 256 experts = 20 480 items,
   32 streams, top-8) of about N requests;
2. its request stream (``moeroof.cachesim.requests_from_trace``, the order ``moeroof cache
   --lookup request`` replays) written once as libCacheSim's ``oracleGeneral`` binary trace
   (24 bytes a request: time, id, size 1, next access) and as the C reference's raw int64 items.
   These one-off conversions are timed and reported apart, NOT included in any ratio: moeroof
   reads the ``.npy`` trace itself, libCacheSim and the C reference are given their prepared
   file (the ratio is what a user pays per run once the file exists);
3. each command as a fresh process, wall clock measured around ``subprocess.run`` in a wrapper
   process (as ``benchmarks/memory.py``), best of ``--repeats`` (3), and the child's peak RSS
   (``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of that wrapper, the highest over the repeats):

   - ``moeroof cache TRACE --policy P --capacity-experts C --lookup request --json`` for P in lru,
     lfu, arc, s3fifo (``--s3fifo-threshold 1``), belady-insert;
   - libCacheSim on the same stream: libCacheSim's own CLI (``cachesim``) is not on PyPI, so its
     whole process is a fresh ``python -c`` that imports ``libcachesim`` (0.3.5 from PyPI, its C
     simulator), opens the oracleGeneral file with ``TraceReader`` and runs ``c_process_trace``
     on ``LRU`` / ``LFU`` / ``ARC`` / ``S3FIFOv0 move-to-main-threshold=1`` / ``Belady``, unit
     sizes, a hash table of 2^16 buckets (``hashpower=16``: its default 2^24 costs 128 MiB to
     clear, a handicap on 20 480 ids);
   - ``moeroof mrc TRACE --lookup request --json`` (the exact LRU curve, every capacity) against
     ``benchmarks/cache_ref.c mrc`` (``cc -O2``, built as ``benchmarks/run.py`` does), whose
     whole process reads the int64 file and prints the stack-distance histogram; and the C
     reference's single-capacity LRU (``cache_ref lru``) beside ``moeroof cache --policy lru``.

Agreement is exact and checked at every size: moeroof's hit count equals libCacheSim's for every
policy, the LRU count equals the C reference's and the curve's at C, and the whole curve (hits at
every capacity 0..20 480) equals the C reference's. Any disagreement is printed as DISAGREE and
the exit status is 3; a command that fails exits 2. Slowness is reported, never an error.

The capacity defaults to 12 288 of 20 480 items (60 %): every policy evicts and every policy
hits. (At 8 192, ``benchmarks/memory.py``'s capacity, LRU, LFU and ARC hit nothing on this
stream: a step requests ~12 000 items layer-cyclically, a loop longer than the cache, so 0 = 0
would check nothing.)

::

    .venv/bin/python benchmarks/vs_libcachesim.py [--sizes 1e6,1e7] [--big] [--repeats 3]
        [--capacity 12288] [--keep DIR] [--no-libcachesim] [--no-c] [--no-write]

Writes ``reports/benchmarks/vs_libcachesim.json`` (untracked, as ``benchmarks/run.py``). Bytes
per request "at the margin" are (peak RSS at the larger size − at the smaller) / (the difference
in requests), between consecutive sizes. Every command runs once untimed at the smallest size
first (the page cache). Nothing is pinned: both sides run one thread; a
loaded box slows both (the load average is recorded). Peak RSS has a floor of ~11 MiB, the
wrapper's pages the child holds until it execs (measured with ``true`` and printed); libCacheSim's
includes its memory-mapped input (24 bytes a request), moeroof's the ``.npy`` pages it reads.

moeroof is imported as the venv has it: this checkout's ``lib/``, uncommitted edits included
(a warning says so). To time a commit instead::

    git archive HEAD lib | tar -x -C /tmp/head && PYTHONPATH=/tmp/head/lib .venv/bin/python benchmarks/vs_libcachesim.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = REPO / "reports" / "benchmarks" / "vs_libcachesim.json"
sys.path.insert(0, str(HERE))

import make_big_trace  # noqa: E402

CAPACITY = 12288
#: (moeroof policy, extra moeroof flags, libCacheSim cache, its parameters)
POLICIES = (
    ("lru", (), "LRU", ""),
    ("lfu", (), "LFU", ""),
    ("arc", (), "ARC", ""),
    ("s3fifo", ("--s3fifo-threshold", "1"), "S3FIFOv0", "move-to-main-threshold=1"),
    ("belady-insert", (), "Belady", ""),
)
HASHPOWER = 16
#: the targets, whole process: cache at or below libCacheSim, mrc within 1.5x of the C reference
TARGET_CACHE = 1.0
TARGET_MRC = 1.5

#: the wrapper: runs the command with stdout to a file, prints [rc, wall s, peak RSS KiB, stderr tail]
WRAPPER = (
    "import resource, subprocess, sys, json, time\n"
    "out = open(sys.argv[1], 'wb')\n"
    "t0 = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.PIPE)\n"
    "dt = time.perf_counter() - t0\n"
    "print(json.dumps([p.returncode, dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
    " p.stderr.decode(errors='replace')[-600:]]))\n"
)

#: libCacheSim's whole process: import, open the prepared oracleGeneral file, run, print the hits
LCS_CHILD = (
    "import sys, libcachesim\n"
    "from libcachesim import libcachesim_python as lcs\n"
    "path, n, cap, name, params, hp = sys.argv[1:7]\n"
    "c = getattr(lcs, name + '_init')(lcs.CommonCacheParams(cache_size=int(cap), hashpower=int(hp)), params)\n"
    "r = libcachesim.TraceReader(path, libcachesim.TraceType.ORACLE_GENERAL_TRACE)\n"
    "miss_ratio, _ = lcs.c_process_trace(c, r._reader, 0, -1)\n"
    "print(int(n) - int(round(miss_ratio * int(n))))\n"
)

ORACLE = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


# ----------------------------------------------------------------------------- preparation


def moeroof_exe() -> list[str]:
    exe = Path(sys.executable).with_name("moeroof")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "moeroof.cli"]


def request_items(trace: Path) -> tuple[np.ndarray, int]:
    """The trace's request stream (moeroof's order), and the item id space."""
    from moeroof.cachesim import requests_from_trace

    meta = json.loads(trace.with_suffix(".json").read_text())
    topk = np.load(trace, mmap_mode="r")
    req = requests_from_trace(topk, meta["experts"])
    return np.ascontiguousarray(req.items), req.n_items


def write_oracle_general(items: np.ndarray, path: Path, chunk: int = 1 << 22) -> None:
    """libCacheSim's oracleGeneral trace of ``items`` (ids items + 1, unit sizes, next access as a
    request index, −1 when none): the same bytes as ``libcachesim_counts.write_oracle_general``,
    vectorised and written chunk by chunk (that one loops in Python: minutes at 10^8)."""
    from moeroof.cachesim import next_use

    n = items.size
    if n >= 2**32:
        raise SystemExit("oracleGeneral clock time is uint32: at most 2^32 - 1 requests")
    nxt = next_use(items, np.int64)
    part = path.with_name(path.name + ".part")  # a run stopped half-way leaves no file --keep would reuse
    with open(part, "wb") as fh:
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            rec = np.empty(e - s, dtype=ORACLE)
            rec["t"] = np.arange(s, e, dtype=np.uint32)
            rec["id"] = items[s:e].astype(np.uint64) + np.uint64(1)
            rec["size"] = 1
            nx = nxt[s:e]
            rec["next"] = np.where(nx >= n, -1, nx)
            rec.tofile(fh)
    os.replace(part, path)


def compile_c(tmp: Path) -> tuple[Path | None, str]:
    """``benchmarks/cache_ref.c`` built with ``cc -O2`` by :func:`run.compile_c_reference`;
    (binary, note)."""
    from run import compile_c_reference

    return compile_c_reference(tmp)


# ----------------------------------------------------------------------------- measuring


def measure(cmd: list[str], repeats: int, out: Path, warm: int = 0) -> dict:
    """Best wall time and highest peak RSS of ``cmd`` over ``repeats`` fresh processes, after
    ``warm`` untimed runs (the page cache); the last run's stdout is left
    in ``out``."""
    walls, peaks = [], []
    for i in range(warm + repeats):
        p = subprocess.run([sys.executable, "-c", WRAPPER, str(out), *cmd], capture_output=True, text=True)
        if p.returncode != 0:
            return {"rc": -1, "error": p.stderr[-600:], "wall_s": None, "peak_mib": None}
        rc, wall, kib, err = json.loads(p.stdout)
        if rc != 0:
            return {"rc": rc, "error": err, "wall_s": None, "peak_mib": None}
        if i >= warm:
            walls.append(wall)
            peaks.append(kib / 1024)
    return {"rc": 0, "wall_s": min(walls), "walls_s": walls, "peak_mib": max(peaks), "error": None}


def machine_info() -> dict:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        from importlib.metadata import version

        lcs = version("libcachesim")
    except Exception:  # noqa: BLE001 - not installed
        lcs = None
    try:
        from importlib.metadata import version

        moeroof = version("moeroof")
    except Exception:  # noqa: BLE001
        moeroof = None

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True).stdout.strip()
        except OSError:  # no git
            return ""

    where = subprocess.run(
        [sys.executable, "-c", "import moeroof; print(moeroof.__file__)"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "git_head": git("rev-parse", "HEAD") or None,
        "lib_modified": bool(git("status", "--porcelain", "--", "lib")),
        "moeroof_imported_from": where or None,
        "pythonpath": os.environ.get("PYTHONPATH"),
        "uname": " ".join(platform.uname()),
        "cpu_model": cpu,
        "nproc": os.cpu_count(),
        "mem_total_gib": mem,
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "libcachesim": lcs,
        "moeroof": moeroof,
    }


def libcachesim_available() -> str | None:
    """None when libcachesim imports, else why not."""
    p = subprocess.run([sys.executable, "-c", "import libcachesim"], capture_output=True, text=True)
    if p.returncode == 0:
        return None
    tail = (p.stderr.strip().splitlines() or ["?"])[-1]
    return f"libcachesim is not importable ({tail}; .venv/bin/pip install libcachesim): libCacheSim rows skipped"


# ----------------------------------------------------------------------------- one size


def run_size(n_target: float, folder: Path, args, exe_c: Path | None, use_lcs: bool, warm: int) -> dict:
    trace = folder / f"big-{n_target:.0e}.npy".replace("+", "")
    og = folder / f"{trace.stem}.oracleGeneral"
    raw = folder / f"{trace.stem}.int64"
    # with --keep, files of an earlier run are reused: their times below are then not the cost
    reused = trace.exists() and (og.exists() or not use_lcs) and (raw.exists() or exe_c is None)
    t0 = time.perf_counter()
    if not trace.exists() or not trace.with_suffix(".json").exists():
        make_big_trace.make(trace, n_target)
    make_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    items, n_items = request_items(trace)
    n = int(items.size)
    stream_s = time.perf_counter() - t0
    prep = {"make_trace_s": make_s, "request_stream_s": stream_s, "files_reused": reused}
    if use_lcs:
        t0 = time.perf_counter()
        if not og.exists():
            write_oracle_general(items, og)
        prep["write_oracle_general_s"] = time.perf_counter() - t0
        prep["oracle_general_bytes"] = og.stat().st_size
    if exe_c is not None:
        t0 = time.perf_counter()
        if not raw.exists():
            items.astype("<i8").tofile(raw.with_name(raw.name + ".part"))
            os.replace(raw.with_name(raw.name + ".part"), raw)
        prep["write_c_items_s"] = time.perf_counter() - t0
        prep["c_items_bytes"] = raw.stat().st_size
    del items
    parts = [f"trace {trace.stat().st_size / 2**20:.0f} MiB made in {make_s:.1f} s", f"request stream {stream_s:.1f} s"]
    if use_lcs:
        parts.append(f"oracleGeneral written in {prep['write_oracle_general_s']:.1f} s")
    if exe_c is not None:
        parts.append(f"C int64 file in {prep['write_c_items_s']:.1f} s")
    if reused:
        parts.append("files reused from an earlier run")
    print(f"\n## {n:,} requests over {n_items:,} items ({'; '.join(parts)}) — preparation, in no ratio", flush=True)

    out = folder / "stdout.txt"
    base = moeroof_exe()
    cap = args.capacity
    rows: list[dict] = []
    bad: list[str] = []

    def row(name, side, res, hits=None, **kw):
        r = {"requests": n, "command": name, "side": side, **res, "hits": hits, **kw}
        rows.append(r)
        flag = "" if res["rc"] == 0 else f"  FAILED rc={res['rc']}: {(res['error'] or '').strip()[-200:]}"
        if res["rc"] == 0:
            print(f"{name:48s} {res['wall_s']:9.3f} s {res['peak_mib']:9.1f} MiB  hits {hits}", flush=True)
        else:
            print(f"{name:48s}{flag}", flush=True)
        return r

    for policy, extra, lcs_name, params in POLICIES:
        cmd = base + ["cache", str(trace), "--policy", policy, "--capacity-experts", str(cap), "--lookup", "request"]
        res = measure(cmd + list(extra) + ["--json"], args.repeats, out, warm)
        hits = json.loads(out.read_text())["hits"] if res["rc"] == 0 else None
        ours = row(f"moeroof cache --policy {policy}", "moeroof", res, hits, policy=policy, capacity=cap)
        if use_lcs:
            lres = measure(
                [sys.executable, "-c", LCS_CHILD, str(og), str(n), str(cap), lcs_name, params, str(HASHPOWER)],
                args.repeats,
                out,
                warm,
            )
            lhits = int(out.read_text().split()[-1]) if lres["rc"] == 0 else None
            label = f"libCacheSim {lcs_name}" + (f" {params}" if params else "")
            theirs = row(label, "libcachesim", lres, lhits, policy=policy, capacity=cap)
            if ours["rc"] == 0 and lres["rc"] == 0:
                ours["ratio"] = ours["wall_s"] / lres["wall_s"]
                ours["reference"] = label
                ours["target_ratio"] = TARGET_CACHE
                ours["agree"] = hits == lhits
                if hits != lhits:
                    bad.append(f"{n:,} requests, {policy}: moeroof {hits} hits, libCacheSim {lhits}")
                    print(f"DISAGREE: {bad[-1]}", flush=True)
            theirs["ratio"] = None
        if exe_c is not None and policy == "lru":
            cres = measure([str(exe_c), "lru", str(raw), str(n_items), str(cap), "1"], args.repeats, out, warm)
            chits = int(out.read_text().split()[1]) if cres["rc"] == 0 else None
            row("C cache_ref lru", "c", cres, chits, policy="lru", capacity=cap)
            if ours["rc"] == 0 and cres["rc"] == 0:
                ours["ratio_c"] = ours["wall_s"] / cres["wall_s"]
                if hits != chits:
                    bad.append(f"{n:,} requests, lru: moeroof {hits} hits, C reference {chits}")
                    print(f"DISAGREE: {bad[-1]}", flush=True)

    res = measure(base + ["mrc", str(trace), "--lookup", "request", "--json"], args.repeats, out, warm)
    curve = None
    if res["rc"] == 0:
        doc = json.loads(out.read_text())
        curve = np.rint(np.asarray(doc["hit_rate"], dtype=float) * doc["requests"]).astype(np.int64)
    ours = row("moeroof mrc", "moeroof", res, None if curve is None else int(curve[min(cap, curve.size - 1)]))
    lru_hits = next((r["hits"] for r in rows if r["command"] == "moeroof cache --policy lru"), None)
    if curve is not None and lru_hits is not None and int(curve[cap]) != lru_hits:
        bad.append(f"{n:,} requests: moeroof mrc's curve at {cap} gives {int(curve[cap])} hits, cache lru {lru_hits}")
        print(f"DISAGREE: {bad[-1]}", flush=True)
    if exe_c is not None:
        cres = measure([str(exe_c), "mrc", str(raw), str(n_items), str(2 * n_items + 64), "1"], args.repeats, out, warm)
        c_curve = None
        if cres["rc"] == 0:
            hist = np.array(out.read_text().split()[1:], dtype=np.int64)
            hist[0] = 0  # cold misses
            c_curve = np.cumsum(hist)
        theirs = row("C cache_ref mrc", "c", cres, None if c_curve is None else int(c_curve[cap]))
        if curve is not None and c_curve is not None:
            ours["ratio"] = ours["wall_s"] / cres["wall_s"]
            ours["reference"] = "C cache_ref mrc"
            ours["target_ratio"] = TARGET_MRC
            # moeroof's curve stops at the distinct items seen, the C histogram at N_ITEMS: flat beyond
            m = max(curve.size, c_curve.size)
            a_, b_ = (np.pad(x, (0, m - x.size), mode="edge") for x in (curve, c_curve))
            diff = int(np.max(np.abs(a_ - b_))) if m else 0
            ours["agree"] = diff == 0
            ours["curve_max_abs_diff_hits"] = diff
            if not ours["agree"]:
                bad.append(f"{n:,} requests: mrc curve differs from the C reference's (max {diff} hits)")
                print(f"DISAGREE: {bad[-1]}", flush=True)
        theirs["ratio"] = None
    return {
        "requests": n,
        "n_items": n_items,
        "trace": str(trace),
        "preparation": prep,
        "loadavg_after": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "rows": rows,
        "bad": bad,
    }


# ----------------------------------------------------------------------------- report


def margins(sizes: list[dict]) -> dict:
    """command → [(n0, n1, bytes per request between them)] from the peak RSS."""
    out: dict[str, list] = {}
    for a, b in zip(sizes, sizes[1:]):
        pa = {r["command"]: r["peak_mib"] for r in a["rows"] if r["rc"] == 0}
        for r in b["rows"]:
            if r["rc"] == 0 and r["command"] in pa and b["requests"] > a["requests"]:
                d = (r["peak_mib"] - pa[r["command"]]) * 2**20 / (b["requests"] - a["requests"])
                out.setdefault(r["command"], []).append([a["requests"], b["requests"], d])
    return out


def table(sizes: list[dict], marg: dict) -> str:
    lines = [
        "| requests | command | wall s (best) | peak RSS MiB | moeroof / reference (target) | hits | agree |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for s in sizes:
        for r in s["rows"]:
            if r["rc"] != 0:
                lines.append(f"| {s['requests']:,} | {r['command']} | FAILED rc={r['rc']} | | | | |")
                continue
            ratio = ""
            if r.get("ratio") is not None:
                met = "met" if r["ratio"] <= r["target_ratio"] else "missed"
                ratio = f"{r['ratio']:.2f} (≤ {r['target_ratio']:g}: {met})"
            if r.get("ratio_c") is not None:
                ratio += f" (C lru {r['ratio_c']:.2f})"
            agree = "" if "agree" not in r else ("yes" if r["agree"] else "**DISAGREE**")
            lines.append(
                f"| {s['requests']:,} | {r['command']} | {r['wall_s']:.3f} | {r['peak_mib']:.0f} | {ratio} "
                f"| {'' if r['hits'] is None else format(r['hits'], ',')} | {agree} |"
            )
    if marg:
        lines += ["", "| command | bytes / request at the margin |", "| --- | --- |"]
        for cmd, spans in marg.items():
            parts = ", ".join(f"{d:.1f} ({a:.0e}→{b:.0e})".replace("+0", "") for a, b, d in spans)
            lines.append(f"| {cmd} | {parts} |")
    return "\n".join(lines)


def write_json(path: Path, payload: dict) -> None:
    """The results, written whole (:func:`moeroof.core.atomic.write_text`)."""
    from moeroof.core import atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(payload, indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1e6,1e7", help="request counts, comma-separated (default 1e6,1e7)")
    ap.add_argument("--big", action="store_true", help="add 1e8 (≈ 3.3 GB of files in the temp folder)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per command; the best wall time")
    ap.add_argument("--capacity", type=int, default=CAPACITY, help=f"experts (default {CAPACITY} of 20 480)")
    ap.add_argument("--keep", type=Path, default=None, help="folder for the traces and files, kept and reused")
    ap.add_argument("--no-libcachesim", action="store_true", help="skip libCacheSim")
    ap.add_argument("--no-c", action="store_true", help="skip the C reference")
    ap.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.relative_to(REPO)}")
    a = ap.parse_args(argv)
    sizes = sorted({float(x) for x in a.sizes.split(",") if x.strip()} | ({1e8} if a.big else set()))

    info = machine_info()
    print("# moeroof against libCacheSim and the C reference, whole processes")
    print(f"- machine: {info['uname']}; CPU {info['cpu_model']}; {info['nproc']} cores; {info['mem_total_gib']} GiB")
    print(f"- load average at start: {info['loadavg_at_start']}; python {info['python']}, numpy {info['numpy']}")
    print(f"- moeroof {info['moeroof']}, libcachesim {info['libcachesim']}; capacity {a.capacity} experts")
    inside = str(info["moeroof_imported_from"] or "").startswith(str(REPO / "lib"))
    print(
        f"- moeroof imported from {info['moeroof_imported_from']}; this checkout's HEAD {info['git_head']}"
        + ("" if inside else " (moeroof is not this checkout's lib/: its commit is whatever that copy holds)")
    )
    if info["lib_modified"] and inside:
        print(
            "- WARNING: lib/ has uncommitted changes and the commands import them: these numbers are of the working "
            "tree (to time the commit: git archive HEAD lib | tar -x -C DIR; PYTHONPATH=DIR/lib)"
        )
    notes = []
    why = "--no-libcachesim" if a.no_libcachesim else libcachesim_available()
    use_lcs = why is None
    if not use_lcs:
        notes.append(f"libCacheSim skipped: {why}")
        print(f"- SKIP: {notes[-1]}")
    folder = a.keep if a.keep is not None else Path(tempfile.mkdtemp(prefix="moeroof-vs-lcs-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        exe_c, c_note = (None, "--no-c") if a.no_c else compile_c(folder)
        if exe_c is None:
            notes.append(f"C reference skipped: {c_note}")
            print(f"- SKIP: {notes[-1]}")
        else:
            print(f"- C reference: benchmarks/cache_ref.c, {c_note}")
        floor = measure(["true"], 1, folder / "stdout.txt")["peak_mib"]
        info["rss_floor_mib"] = floor
        print(
            f"- wall clock best of {a.repeats} fresh processes; peak RSS the highest of them (floor {floor:.1f} MiB: "
            "the wrapper's pages the child holds before exec count, as `true` shows)",
            flush=True,
        )
        for i, n in enumerate(sizes):  # one untimed run of every command at the smallest size first
            results.append(run_size(n, folder, a, exe_c, use_lcs, warm=1 if i == 0 else 0))
    finally:
        if a.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    marg = margins(results)
    print()
    print(table(results, marg))
    bad = [b for s in results for b in s["bad"]]
    failed = [f"{s['requests']:,} {r['command']}" for s in results for r in s["rows"] if r["rc"] != 0]
    print()
    print(
        "ratio = moeroof wall / reference wall (below 1: moeroof faster); moeroof reads the .npy trace, "
        "libCacheSim its oracleGeneral file and C its int64 file, prepared beforehand (times above, in no ratio)."
    )
    if bad:
        print("DISAGREE:\n  " + "\n  ".join(bad))
    if failed:
        print("FAILED: " + "; ".join(failed))
    compared = any("agree" in r for s in results for r in s["rows"])
    if not bad and not failed and compared:
        print("every hit count agrees (moeroof = libCacheSim per policy; LRU and the whole curve = C reference)")
    elif not compared:
        print("no reference ran: no hit count compared")
    status = 3 if bad else (2 if failed else 0)
    if not a.no_write:
        write_json(
            RESULTS,
            {
                "command": "benchmarks/vs_libcachesim.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "exit_status": status,
                "machine": info,
                "capacity_experts": a.capacity,
                "repeats": a.repeats,
                "hashpower": HASHPOWER,
                "notes": notes,
                "sizes": results,
                "bytes_per_request_at_margin": marg,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )
        print(f"wrote {RESULTS.relative_to(REPO)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
