#!/usr/bin/env python
"""Peak memory (max RSS) of ``moeroof cache`` (every policy), ``mrc`` and ``union`` on a big trace.

::

    python benchmarks/memory.py [--big | --margin] [--requests N] [--keep DIR] [--only cache-lru,mrc,…] [--json]

Writes a synthetic ``.npy`` trace (:mod:`make_big_trace`: 80 layers × 256 experts, 32 streams,
top-8) of 10^7 requests (``--big``: 10^8, ~340 MB on disk; check ``df -h`` first) into a temp
folder, runs each command as its own process and reports the child's peak resident set
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` read by a fresh wrapper process per command,
so one command's peak is not another's) in MiB, with its wall time. The commands read the trace
(into memory up to 512 MiB of ids, memory-mapped beyond: either way the ids they read count in
their RSS). The temp folder is deleted at the end unless ``--keep`` names a folder to write the
trace to (and reuse it on the next run).

``--margin`` runs both sizes (10^7 and 10^8 requests, or ``--requests N`` and 10 N) and adds
each command's bytes per request at the margin, (peak₂ − peak₁) / (requests₂ − requests₁): what
one more request costs, the fixed cost of the interpreter, numpy and the C library left out.

Not a test: minutes at 10^8. Targets: every command within 4 GiB at 10^8 requests;
the tighter one, within 1.5 GiB (flagged ``OVER``) and ≤ 12 bytes a request at the margin.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_big_trace  # noqa: E402

POLICIES = ("lru", "lfu", "lfu-perfect", "static", "belady", "belady-insert", "s3fifo", "arc")
CAPACITY = 8192  # experts, of 20 480 items: every policy evicts
LIMIT_MIB = 1536  # the tighter target: 1.5 GiB at 10^8 requests
MARGIN_LIMIT = 12.0  # the tighter target: bytes per request at the margin

WRAPPER = (
    "import resource, subprocess, sys, json; "
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
    "print(json.dumps([p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.stderr[-400:]]))"
)


def commands(trace: Path) -> dict[str, list[str]]:
    exe = str(Path(sys.executable).with_name("moeroof"))
    base = [exe] if Path(exe).exists() else [sys.executable, "-m", "moeroof.cli"]
    out = {
        f"cache-{p}": base + ["cache", str(trace), "--policy", p, "--capacity-experts", str(CAPACITY), "--json"]
        for p in POLICIES
    }
    out["cache-lru-layer-scope"] = base + [
        "cache", str(trace), "--policy", "lru", "--capacity-experts", str(CAPACITY), "--scope", "layer", "--json",
    ]  # fmt: skip
    out["mrc"] = base + ["mrc", str(trace), "--json"]
    out["mrc-shards"] = base + ["mrc", str(trace), "--sample-rate", "0.01", "--json"]
    out["union"] = base + ["union", str(trace), "--batch", "1,8,32", "--json"]
    return out


def measure(cmd: list[str]) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True, check=True)
    rc, kib, err = json.loads(p.stdout)
    return {"rc": rc, "peak_mib": round(kib / 1024, 1), "seconds": round(time.perf_counter() - t0, 2), "stderr": err}


def run_size(n: float, folder: Path, only: list[str] | None, quiet: bool) -> dict:
    """Every command (or ``only`` those) on a trace of about ``n`` requests: the peaks and times."""
    trace = folder / f"big-{n:.0e}.npy".replace("+", "")
    if not trace.exists() or not trace.with_suffix(".json").exists():
        info = make_big_trace.make(trace, n)
    else:
        info = {"path": str(trace), "bytes": trace.stat().st_size, "reused": True}
    info["requests"] = count_requests(trace)
    cmds = commands(trace)
    if only:
        cmds = {k: cmds[k] for k in only}
    if not quiet:
        print(f"# {info['requests']:,} requests, {trace.stat().st_size / 1e6:.0f} MB trace", flush=True)
    results = {}
    for name, cmd in cmds.items():
        results[name] = r = measure(cmd)
        if not quiet:
            flag = "" if r["rc"] == 0 else f"  rc={r['rc']}: {r['stderr'].strip().splitlines()[-1:]}"
            over = "  OVER 1.5 GiB" if r["peak_mib"] > LIMIT_MIB else ""
            print(f"{name:24s} {r['peak_mib']:9.1f} MiB {r['seconds']:8.2f} s{over}{flag}", flush=True)
    return {"requests": n, "trace": info, "results": results}


def count_requests(trace: Path) -> int:
    """The trace's requests (distinct experts per step and layer), counted by the cache model."""
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, numpy as np; from moeroof.cachesim import requests_from_trace; "
            "print(len(requests_from_trace(np.load(sys.argv[1], mmap_mode='r'), int(sys.argv[2]))))",
            str(trace),
            str(json.loads(trace.with_suffix(".json").read_text())["experts"]),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(p.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--big", action="store_true", help="10^8 requests instead of 10^7")
    ap.add_argument("--margin", action="store_true", help="10^7 and 10^8 requests, and bytes/request between")
    ap.add_argument("--requests", type=float, default=None, help="about this many requests (overrides --big)")
    ap.add_argument("--keep", type=Path, default=None, help="folder for the trace, kept (and reused) afterwards")
    ap.add_argument("--only", default=None, help="comma-separated command names (default: all)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args(argv)
    n = a.requests if a.requests is not None else (1e8 if a.big and not a.margin else 1e7)
    only = a.only.split(",") if a.only else None
    unknown = sorted(set(only or ()) - set(commands(Path("t.npy"))))
    if unknown:
        ap.error(f"--only: unknown {', '.join(unknown)} (known: {', '.join(commands(Path('t.npy')))})")
    folder = a.keep if a.keep is not None else Path(tempfile.mkdtemp(prefix="moeroof-memory-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        runs = [run_size(size, folder, only, a.json) for size in ((n, 10 * n) if a.margin else (n,))]
        out: dict = runs[0] if len(runs) == 1 else {"runs": runs}
        if a.margin:
            lo, hi = runs
            dn = hi["trace"]["requests"] - lo["trace"]["requests"]
            margin = {
                k: round((hi["results"][k]["peak_mib"] - lo["results"][k]["peak_mib"]) * 2**20 / dn, 2)
                for k in hi["results"]
            }
            out["bytes_per_request_margin"] = margin
            if not a.json:
                print(f"# bytes per request at the margin ({dn:,} requests more)")
                for k, b in margin.items():
                    print(f"{k:24s} {b:6.2f} B/request{'  OVER 12' if b > MARGIN_LIMIT else ''}")
        if a.json:
            print(json.dumps(out, indent=1))
        bad = [k for run in runs for k, r in run["results"].items() if r["rc"] != 0]
        return 1 if bad else 0
    finally:
        if a.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
