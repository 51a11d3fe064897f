#!/usr/bin/env python
"""How long a user's fit takes: ``moeroof fit-plan`` on the shipped points files (`make bench`).

The guide's budget: a fit on a handful of rows answers in under 10 s on a 2-core box. Each case is
one shipped command (its rows and flags as docs/validation.md gives them), timed wall clock over the
library call the CLI makes (:func:`moeroof.fit.plan.fit_plan`, after the presets and
routing are loaded), on ``--cores`` pinned cores (default 2, the guide's box: the CLI's fit runs
``jobs = min(2, cores)``, its second process beside the first; ``--cores 1`` is ``run.py``'s
one pinned core), best of ``--repeats``
after one warm-up (the disk memo of simulated caches fills there: a first fit
on a fresh machine is slower), each run with the process's in-memory memos emptied first. The ratio is the budget over the best time (≥ 1 meets it). A
second check: the repeated fits give the same rows (a fit is deterministic), else exit 3.

Exit status: 0 every case within the budget, 1 one over it, 3 two runs disagree. ``--quick``
runs bigrig's case only (a smoke run); results go to ``reports/benchmarks/fit_plan.json``
(untracked) unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the CPUs this process may use, read before run.py pins it to one of them
_CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None

from run import machine_info  # noqa: E402  (pins this process to one core, as make bench runs)

from moeroof.core.paths import DATA_DIR, REPO_ROOT  # noqa: E402
from moeroof.data.plan_points import read_plan_points  # noqa: E402
from moeroof.data.presets import load_hardware, load_model  # noqa: E402
from moeroof.fit import routing as fit_routing  # noqa: E402
from moeroof.fit.plan import fit_plan  # noqa: E402
from moeroof.models import expert_cache
from moeroof.models.local_routing import spec_skew  # noqa: E402
from moeroof.models.locality import Locality  # noqa: E402
from moeroof.models.plan import routing_from_spec  # noqa: E402

#: the guide's budget for a fit on a handful of rows (seconds, on a 2-core box)
BUDGET_S = 10.0

#: (name, points file, model, box, routing, knobs to fit or None for the default)
CASES = (
    ("bigrig", "bigrig.plan-points", "qwen3-30b-a3b-3bit", "apple-m4", "uniform", None),
    # a newcomer's first fit: the README's command on seed 003's rows, every flag at its default
    # (the skew prior's routing, its skew fitted to the hit rates)
    ("seed003-default", "seed003-public.plan-points", "glm-5-nvfp4", "gb10", "prior", None),
    # the same rows with the page cache's share fitted beside the skew: two cache knobs, each
    # evaluation a trace of its own skew (the slowest of the shipped files' fits)
    (
        "seed003-skew-pressure",
        "seed003-public.plan-points",
        "glm-5-nvfp4",
        "gb10",
        "prior",
        ("skew", "engine", "ssd-scale", "pressure"),
    ),
    (
        "seed003",
        "seed003-public.plan-points",
        "glm-5-nvfp4",
        "gb10",
        "histograms/glm5-seed003-per-layer.csv",
        ("engine", "ssd-scale", "pressure"),
    ),
    ("mlx-lm-1438", "mlx-lm-1438.plan-points", "glm-5.2", "apple-m4-max", "zipf:0.8", ("ssd-scale", "reclaim", "skew")),
    # the same three rows with every flag at its default: the memory knob chosen (the reclaim work
    # with its shape, the engine held at its priors), skew and stickiness fitted to the hit rates
    ("mlx-lm-1438-default", "mlx-lm-1438.plan-points", "glm-5.2", "apple-m4-max", "prior", None),
    (
        "mlx-lm-1438-shape",
        "mlx-lm-1438.plan-points",
        "glm-5.2",
        "apple-m4-max",
        "zipf:0.8",
        ("ssd-scale", "reclaim", "reclaim-shape", "skew", "rho"),
    ),
)


def pin(cores: int) -> int:
    """Pin this process to its first ``cores`` CPUs (of those it could use before ``run.py``
    pinned one); the cores it then has."""
    if _CPUS is None:  # pragma: no cover - no affinity on this platform
        return 1
    os.sched_setaffinity(0, set(_CPUS[: max(1, cores)]))
    return len(os.sched_getaffinity(0))


def run_case(points: str, model_name: str, box: str, spec: str, knobs, jobs: int = 1) -> tuple[float, list]:
    """One fit as the CLI makes it: its seconds and its rows' (predicted, low, high). The
    process's in-memory memos are emptied first, as a user's command starts them: a fit is timed
    with the disk memo filled (a second command on the machine), never on the
    simulated caches an earlier fit of this process left in memory."""
    expert_cache.clear_memo()
    fit_routing.clear_memo()
    pts = read_plan_points(DATA_DIR / "points" / points)
    model, hardware = load_model(model_name), load_hardware(box)
    routing = routing_from_spec(spec, model)
    t = time.perf_counter()
    res = fit_plan(
        pts,
        model,
        hardware,
        routing,
        fit=knobs,
        routing_is_spec=spec_skew(routing) is not None,
        locality=Locality.committed_for(model),
        jobs=jobs,
    )
    seconds = time.perf_counter() - t
    return seconds, [(r["predicted"], r["low"], r["high"]) for r in res.rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="bigrig's case only (a smoke run)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per case after the warm-up (default 2)")
    ap.add_argument("--no-write", action="store_true", help="write no results file")
    ap.add_argument("--case", action="append", default=None, help="only this case (repeatable)")
    ap.add_argument(
        "--cores",
        type=int,
        default=2,
        help="cores to pin to, the fit's jobs = min(2, cores) (default 2: the guide's box)",
    )
    args = ap.parse_args(argv)
    cores = pin(args.cores)
    jobs = min(2, cores)
    info = machine_info()
    if _CPUS is not None:  # run.py's record is its own one-core pinning
        info["affinity"] = sorted(os.sched_getaffinity(0))
    print("# moeroof fit-plan timings" + (" — QUICK smoke run" if args.quick else ""))
    print(f"- machine: {info['cpu_model']}; nproc {info['nproc']}; pinned to CPU(s) {info['affinity']}")
    print(
        f"- fit jobs: {jobs} (the CLI's on this many cores)" + ("" if cores >= args.cores else f"; asked {args.cores}")
    )
    print(f"- budget: {BUDGET_S:g} s a fit (the guide's, on a 2-core box); ratio = budget / best")
    print()
    rows, status = [], 0
    cases = CASES[:1] if args.quick else CASES
    if args.case:
        unknown = sorted(set(args.case) - {c[0] for c in cases})
        if unknown:
            ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(c[0] for c in cases)}")
        cases = [c for c in cases if c[0] in args.case]
    for name, points, model_name, box, spec, knobs in cases:
        _, first = run_case(points, model_name, box, spec, knobs, jobs)  # warm-up
        times = []
        for _ in range(max(1, int(args.repeats))):
            seconds, again = run_case(points, model_name, box, spec, knobs, jobs)
            times.append(seconds)
            if again != first:
                print(f"DISAGREE: {name}: two fits gave different rows")
                status = 3
        best = min(times)
        ok = best <= BUDGET_S
        status = status or (0 if ok else 1)
        rows.append({"case": name, "best_s": best, "times_s": times, "ratio": BUDGET_S / best, "within": ok})
    print("| case | best | ratio (budget / best) | within |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['best_s']:.2f} s | {r['ratio']:.2f} | {'yes' if r['within'] else 'no'} |")
    if not args.no_write:
        out = REPO_ROOT / "reports" / "benchmarks" / "fit_plan.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"machine": info, "jobs": jobs, "budget_s": BUDGET_S, "rows": rows}, indent=1) + "\n")
        tmp.replace(out)
        print(f"\nwrote {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
