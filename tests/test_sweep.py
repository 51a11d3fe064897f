"""moeroof.run.sweep and `moeroof sweep`: grids, point ids, serial and dask.distributed runs,
failed points, resuming, the Parquet output and the CLI's errors; synthetic-trace cache points and
fit-routing points against the library called directly; the example grids."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeroof.cli import main
from moeroof.core.paths import REPO_ROOT
from moeroof.run import sweep

EXAMPLE = REPO_ROOT / "data" / "sweeps" / "example-plan.toml"
EXAMPLES = ("example-plan.toml", "example-cache-policy.toml", "example-fit-routing.toml")

#: a synthetic-trace cache grid small enough for the quick loop (2 × 2 × 3 × 2 = 24 points)
SYNTH = {
    "command": "cache",
    "routing": ["uniform", "zipf:0.9"],
    "seed": [0, 1],
    "policy": ["lru", "s3fifo", "belady"],
    "capacity": [48, 160],
    "fixed": {"experts": 32, "top_k": 4, "layers": 4, "steps": 48, "streams": 4, "rho": 0.2, "warmup_steps": 8},
}

SMALL = {
    "command": "plan",
    "model": ["qwen3-30b-a3b", "deepseek-v3"],
    "cache_gib": {"start": 0, "stop": 20, "step": 20},
    "batch": [1, 8],
    "fixed": {"hardware": "nvme-gen4", "routing": "zipf:0.9"},
}


def outputs(rows):
    """Rows without the wall time (the only column that differs between runs)."""
    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in rows]


def test_ranges_include_stop_and_keep_integers():
    assert sweep.expand_range({"start": 0, "stop": 40, "step": 20}) == [0, 20, 40]
    assert sweep.expand_range({"start": 0, "stop": 50, "step": 20}) == [0, 20, 40]
    assert sweep.expand_range({"start": 0.5, "stop": 1.0, "step": 0.25}) == [0.5, 0.75, 1.0]
    with pytest.raises(sweep.GridError, match="step must be > 0"):
        sweep.expand_range({"start": 0, "stop": 1, "step": 0}, key="cache_gib")


def test_example_grid_expands_to_36_points_with_stable_distinct_ids():
    grid = sweep.read_grid(EXAMPLE)
    assert grid.command == "plan" and grid.size == 36
    points = sweep.expand(grid)
    ids = [p["point_id"] for p in points]
    assert len(set(ids)) == 36
    assert ids == [p["point_id"] for p in sweep.expand(sweep.read_grid(EXAMPLE))]
    # the id is the point's inputs, not their order in the file, nor int vs float
    p = points[0]
    assert sweep.point_id("plan", dict(reversed(list(p["inputs"].items())))) == p["point_id"]
    floats = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in p["inputs"].items()}
    assert sweep.point_id("plan", floats) == p["point_id"]
    assert sweep.point_id("union", p["inputs"]) != p["point_id"]


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ({"command": "fit", "batch": [1]}, "command"),
        ({"command": "plan", "model": ["glm-5.2"], "hardware": "nvme-gen4", "batch": [1], "colour": [1]}, "colour"),
        ({"command": "plan", "model": "glm-5.2", "hardware": "nvme-gen4"}, "batch"),
        ({"command": "plan", "model": "glm-5.2", "hardware": "x", "batch": [1], "fixed": {"batch": 2}}, "batch"),
        ({"command": "union", "batch": {"start": 1, "stop": 8}}, "batch"),
        ({"command": "union", "batch": [1, 1]}, "batch"),
        # a cache point reads a trace file or samples one: not both, not neither, not half a spec
        (
            {"command": "cache", "trace": "traces/qwen3-30b-a3b-like.npz", "routing": "uniform", "capacity": 8},
            "routing",
        ),
        ({"command": "cache", "capacity": [8, 16], "policy": "lru"}, "trace"),
        (
            {
                "command": "cache",
                "routing": "zipf:0.9",
                "experts": 8,
                "top_k": 2,
                "layers": 2,
                "steps": 4,
                "streams": 2,
                "capacity": 4,
            },
            "seed",
        ),
        ({"command": "cache", "trace": "t.npz", "capacity": 4, "colour": "red"}, "colour"),
        ({"command": "fit-routing", "experts": 64, "top_k": 4, "layers": 8}, "points"),
        (
            {"command": "fit-routing", "points": "p.csv", "experts": 64, "top_k": 4, "layers": 8, "capacity": 1},
            "capacity",
        ),
    ],
)
def test_bad_grids_name_the_key(doc, key):
    with pytest.raises(sweep.GridError) as err:
        sweep.grid_from_dict(doc, "g.toml")
    assert err.value.key == key and str(err.value).startswith(f"g.toml: {key}: ")


def test_serial_run_equals_evaluating_each_point(tmp_path):
    grid = sweep.grid_from_dict(SMALL)
    out = tmp_path / "out.parquet"
    rep = sweep.run_sweep(grid, out)
    assert rep["points"] == rep["evaluated"] == 8 and rep["failed"] == 0 and rep["where"] == "serial"
    rows = pq.read_table(out).to_pylist()
    assert outputs(rows) == outputs([sweep.evaluate_point(p) for p in sweep.expand(grid)])
    assert all(r["error"] is None and r["net_tok_s"] > 0 and r["moeroof_version"] for r in rows)


def test_union_and_cache_points(tmp_path):
    grid = sweep.grid_from_dict({"command": "union", "experts": [64, 128], "top_k": 8, "batch": [1, 8]})
    rows = [sweep.evaluate_point(p) for p in sweep.expand(grid)]
    assert [r["error"] for r in rows] == [None] * 4
    assert rows[0]["union_per_layer"] == pytest.approx(8.0) and rows[0]["coalescing_ratio"] == pytest.approx(1.0)
    hist = sweep.grid_from_dict({"command": "union", "histogram": "histograms/deepseek-v3-like.csv", "batch": 8})
    (row,) = [sweep.evaluate_point(p) for p in sweep.expand(hist)]
    assert row["error"] is None and 8 <= row["union_per_layer"] <= 64
    cache = sweep.grid_from_dict(
        {"command": "cache", "trace": "traces/qwen3-30b-a3b-like.npz", "capacity": [0, 3000], "policy": "lru"}
    )
    zero, big = (sweep.evaluate_point(p) for p in sweep.expand(cache))
    assert zero["error"] is None and big["error"] is None
    assert zero["hit_rate"] == 0.0 and big["hit_rate"] > 0.0


def test_a_failed_point_records_its_error_and_the_others_complete(tmp_path):
    grid = sweep.grid_from_dict({**SMALL, "model": ["qwen3-30b-a3b", "no-such-model"]})
    out = tmp_path / "out.parquet"
    rep = sweep.run_sweep(grid, out)
    assert rep["evaluated"] == 8 and rep["failed"] == 4
    rows = pq.read_table(out).to_pylist()
    bad = [r for r in rows if r["model"] == "no-such-model"]
    good = [r for r in rows if r["model"] != "no-such-model"]
    assert all("no such preset" in r["error"] and r["net_tok_s"] is None for r in bad)
    assert all(r["error"] is None and r["net_tok_s"] > 0 for r in good)


def test_resume_skips_done_points_and_retries_failed_ones(tmp_path):
    grid = sweep.grid_from_dict(SMALL)
    out = tmp_path / "out.parquet"
    calls = []

    def counting(point):
        calls.append(point["point_id"])
        row = sweep.evaluate_point(point)
        if len(calls) == 3:  # one point fails the first time
            row["error"] = "RuntimeError: worker lost"
        return row

    sweep.run_sweep(sweep.grid_from_dict({**SMALL, "batch": [1]}), out, evaluate=counting)
    assert len(calls) == 4
    rep = sweep.run_sweep(grid, out, evaluate=counting)
    assert rep["skipped"] == 3 and rep["evaluated"] == 5 and len(calls) == 9
    rows = pq.read_table(out).to_pylist()
    assert [r["point_id"] for r in rows] == [p["point_id"] for p in sweep.expand(grid)]
    assert all(r["error"] is None for r in rows)
    rep = sweep.run_sweep(grid, out, evaluate=counting)
    assert rep["evaluated"] == 0 and len(calls) == 9


def test_a_sweep_stopped_before_its_first_point_writes_nothing_and_reruns(tmp_path):
    """Ctrl-C inside the very first point: no row to keep, so no file is written (it used to
    write a Parquet file of no columns, which the rerun refused as "not a sweep result"), and
    the rerun evaluates every point."""
    grid = sweep.grid_from_dict({**SMALL, "batch": [1]})
    out = tmp_path / "out.parquet"

    def interrupted(point):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt, match="interrupted: 0 of the 4 points to evaluate are kept"):
        sweep.run_sweep(grid, out, evaluate=interrupted)
    assert not out.exists()
    rep = sweep.run_sweep(grid, out)
    assert rep["evaluated"] == 4 and rep["skipped"] == 0
    assert pq.read_table(out).num_rows == 4


def test_a_local_cluster_of_two_processes_equals_the_serial_run(tmp_path):
    """Two worker processes over loopback TCP give the serial rows point for point."""
    distributed = pytest.importorskip("distributed")
    grid = sweep.read_grid(EXAMPLE)
    serial = tmp_path / "serial.parquet"
    sweep.run_sweep(grid, serial)
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", protocol="tcp", dashboard_address=":0"
    )
    try:
        with distributed.Client(cluster) as client:
            assert len(client.scheduler_info()["workers"]) == 2
            assert client.scheduler.address.startswith("tcp://127.0.0.1:")
            rep = sweep.run_sweep(grid, tmp_path / "cluster.parquet", client=client)
            # several points per task: the same rows (the scheduler's cost paid once per chunk)
            chunked = sweep.run_sweep(grid, tmp_path / "chunked.parquet", client=client, chunk=5)
    finally:
        cluster.close()
    assert chunked["evaluated"] == 36 and outputs(pq.read_table(tmp_path / "chunked.parquet").to_pylist()) == outputs(
        pq.read_table(serial).to_pylist()
    )
    assert rep["evaluated"] == 36 and rep["failed"] == 0 and rep["where"].startswith("scheduler tcp://")
    assert outputs(pq.read_table(tmp_path / "cluster.parquet").to_pylist()) == outputs(
        pq.read_table(serial).to_pylist()
    )


def test_chunk_size_spreads_the_scheduler_cost():
    assert sweep.chunk_size(36, 2) == 1  # small grids: one point per task
    assert sweep.chunk_size(10_000, 2) == 312 and sweep.chunk_size(10_000, 64) == 9
    assert sweep.chunk_size(5, 0) == 1


def test_cli_writes_the_parquet_and_resumes(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text('command = "union"\nexperts = [64, 256]\ntop_k = 8\nbatch = {start = 1, stop = 65, step = 16}\n')
    out = tmp_path / "u.parquet"
    assert main(["sweep", str(grid), "-o", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["points"] == rep["evaluated"] == 10
    assert pq.read_table(out).num_rows == 10
    assert main(["sweep", str(grid), "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == 10


def test_cli_refuses_a_bad_grid_with_one_error_line(tmp_path, capsys):
    grid = tmp_path / "bad.toml"
    grid.write_text('command = "plan"\nmodel = "glm-5.2"\nhardware = "nvme-gen4"\nbatch = [1]\ncolour = ["red"]\n')
    assert main(["sweep", str(grid), "-o", str(tmp_path / "o.parquet")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: ") and str(grid) in err and "colour" in err
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("how", ["kill", "restart"])
def test_killing_a_worker_mid_sweep_loses_no_point_after_resume(tmp_path, how):
    """A worker process killed (SIGKILL) or the cluster restarted partway through a 40-point
    sweep on 2 worker processes: the run still finishes (dask reschedules the dead worker's
    tasks, or records the cancelled points as errors), and a resume leaves every point once,
    in grid order, equal to the serial run."""
    import os
    import signal
    import time

    distributed = pytest.importorskip("distributed")
    grid = sweep.grid_from_dict(
        {"command": "union", "experts": [64, 128, 256, 512], "top_k": 8, "batch": {"start": 1, "stop": 10, "step": 1}}
    )
    points = sweep.expand(grid)
    assert len(points) == 40
    serial = tmp_path / "serial.parquet"
    sweep.run_sweep(grid, serial)

    def slow(point):  # a local function: cloudpickle ships it by value to the workers
        time.sleep(0.1)
        return sweep.evaluate_point(point)

    out = tmp_path / "cluster.parquet"
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", protocol="tcp", dashboard_address=":0"
    )
    try:
        with distributed.Client(cluster) as client:
            fired = []

            def strike(done, total, _pid):
                if done == 8 and not fired:
                    fired.append(done)
                    if how == "kill":
                        pids = client.run(os.getpid)
                        os.kill(next(iter(pids.values())), signal.SIGKILL)
                    else:
                        client.restart()

            first = sweep.run_sweep(grid, out, client=client, evaluate=slow, progress=strike)
            assert fired and first["evaluated"] == 40
            rows = pq.read_table(out).to_pylist()
            assert sorted(r["point_id"] for r in rows) == sorted(p["point_id"] for p in points)
            lost = [r for r in rows if r["error"] is not None]
            if how == "restart":  # the restart cancels the queued tasks: their points are error rows
                assert lost and all("Cancelled" in r["error"] or "Killed" in r["error"] for r in lost)
            client.wait_for_workers(2)
            again = sweep.run_sweep(grid, out, client=client, evaluate=slow)
    finally:
        cluster.close()
    assert again["skipped"] == 40 - len(lost) and again["evaluated"] == len(lost) and again["failed"] == 0
    rows = pq.read_table(out).to_pylist()
    assert [r["point_id"] for r in rows] == [p["point_id"] for p in points]
    assert outputs(rows) == outputs(pq.read_table(serial).to_pylist())


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_grids_parse_and_expand_to_their_stated_counts(name):
    """Each example starts with the command that runs it and states its point count; the count
    holds, and every point has a distinct id."""
    path = REPO_ROOT / "data" / "sweeps" / name
    lines = path.read_text().splitlines()
    assert lines[0].startswith(f"# moeroof sweep data/sweeps/{name} -o ")
    stated = re.search(r"= (\d+) [\w-]+ points", lines[1])
    assert stated, f"{name}: line 2 should state '= N <command> points', got {lines[1]!r}"
    grid = sweep.read_grid(path)
    points = sweep.expand(grid)
    assert grid.size == len(points) == int(stated.group(1))
    assert len({p["point_id"] for p in points}) == len(points)
    assert f"{int(stated.group(1))} {grid.command} points" in lines[1]


def _simulate_directly(topk, experts, inputs):
    from moeroof.cachesim import requests_from_trace, simulate

    return simulate(
        requests_from_trace(topk, experts),
        float(inputs["capacity"]),
        policy=inputs["policy"],
        warmup_steps=inputs["warmup_steps"],
    )


def test_a_synthetic_cache_point_equals_simulating_the_trace_sampled_with_its_seed(tmp_path):
    """Two paths the sweep does not take: the routing library's sampler called here with
    default_rng(seed), and `moeroof trace` writing the trace to a file that a trace-file cache
    point replays."""
    import numpy as np

    from moeroof.models.routing import Zipf, sample_trace

    grid = sweep.grid_from_dict({**SYNTH, "routing": "zipf:0.9", "seed": 7, "policy": ["lru", "belady"]})
    for point in sweep.expand(grid):
        row = sweep.evaluate_point(point)
        inputs = point["inputs"]
        # the first MoE layer has no locality (moeroof.models.locality, Depth)
        topk = sample_trace(Zipf(32, 4, 0.9), 48, 4, 4, np.random.default_rng(7), rho=np.array([0.0, 0.2, 0.2, 0.2]))
        direct = _simulate_directly(topk, 32, inputs)
        assert row["error"] is None
        assert (row["requests"], row["hits"], row["misses"]) == (direct.requests, direct.hits, direct.misses)
        assert row["hit_rate"] == direct.hit_rate and 0 < row["hit_rate"] < 1
        assert (row["trace_steps"], row["trace_streams"], row["trace_layers"], row["trace_top_k"]) == (48, 4, 4, 4)
        assert row["trace_experts"] == 32
    # the same trace written by `moeroof trace`, replayed as a file
    path = tmp_path / "t.npz"
    argv = "trace --family zipf:0.9 --rho 0.2 --streams 4 --steps 48 --experts 32 --top-k 4 --layers 4 --seed 7"
    assert main([*argv.split(), "-o", str(path), "--json"]) == 0
    synth = sweep.evaluate_point(sweep.expand(grid)[0])
    fixed = {"trace": str(path), "capacity": 48, "policy": "lru", "warmup_steps": 8}
    (from_file,) = [sweep.evaluate_point(p) for p in sweep.expand(sweep.grid_from_dict({"command": "cache", **fixed}))]
    for key in ("requests", "hits", "misses", "hit_rate", "experts_streamed_per_step", "trace_steps", "trace_streams"):
        assert from_file[key] == synth[key], key


def test_same_seed_same_row_other_seed_other_trace():
    one = {**SYNTH, "routing": "zipf:0.9", "policy": "lru", "capacity": 48, "seed": 3}
    (first,) = [sweep.evaluate_point(p) for p in sweep.expand(sweep.grid_from_dict(one))]
    (again,) = [sweep.evaluate_point(p) for p in sweep.expand(sweep.grid_from_dict(one))]
    assert outputs([first]) == outputs([again]) and first["error"] is None
    a = sweep.synthetic_trace("zipf:0.9", 32, 4, 4, 48, 4, 3, 0.2)
    b = sweep.synthetic_trace("zipf:0.9", 32, 4, 4, 48, 4, 4, 0.2)
    assert a.shape == b.shape == (48, 4, 4, 4)
    assert (a != b).mean() > 0.5  # another seed: mostly other ids, not a shifted copy
    other = [sweep.evaluate_point(p) for p in sweep.expand(sweep.grid_from_dict({**one, "seed": [4, 5]}))]
    assert len({first["point_id"], *(r["point_id"] for r in other)}) == 3
    assert len({(r["hits"], r["experts_streamed_per_step"]) for r in [first, *other]}) > 1


def test_a_bad_synthetic_spec_is_an_error_row_not_a_crash():
    bad = {**SYNTH, "routing": ["zipf:-1", "pareto:2"], "seed": 0, "policy": "lru", "capacity": 48}
    rows = [sweep.evaluate_point(p) for p in sweep.expand(sweep.grid_from_dict(bad))]
    assert len(rows) == 2
    assert all(r["error"].startswith("ValueError: routing:") and "hit_rate" not in r for r in rows)


FIT = {
    "command": "fit-routing",
    "points": "points/example.points",
    "experts": 64,
    "top_k": 4,
    "layers": 8,
    "expert_bytes": 4194304,
    "seeds": 1,
    "seed": 3,
    "bootstrap": 2,
    "timed_steps": 8,
    "max_sim_layers": 4,
    "calibrate": "9,10",
}


def test_a_fit_routing_point_equals_the_library_called_directly():
    from moeroof.core.paths import resolve_data
    from moeroof.data.points import read_points
    from moeroof.fit.routing import fit_routing

    (point,) = sweep.expand(sweep.grid_from_dict(FIT))
    row = sweep.evaluate_point(point)
    assert row["error"] is None, row["error"]
    points = read_points(resolve_data("points/example.points"), experts=64, expert_bytes=4194304)
    measured = {p.row: p.value for p in points if p.value is not None}
    kept = [p if p.row in (9, 10) else dataclasses.replace(p, value=None) for p in points]
    fit = fit_routing(kept, 64, 4, 8, 4194304, seeds=[3], bootstrap=2, timed_steps=8, max_sim_layers=4)
    assert row["family"] == fit.family and row["fitted"] == ",".join(fit.fitted)
    for name in ("skew", "rho", "locality_c", "history_tokens"):
        k = fit.knobs[name]
        assert (row[name], row[f"{name}_low"], row[f"{name}_high"]) == (k["value"], k["low"], k["high"]), name
    assert row["residual"] == fit.families[fit.family]["residual"]
    assert row["max_abs_z"] == fit.families[fit.family]["max_abs_z"]
    rows = json.loads(row["rows_json"])
    assert [r["predicted"] for r in rows] == [r["predicted"] for r in fit.rows]
    assert [r["row"] for r in rows] == [p.row for p in points]
    # the measured rows left out of calibrate are held out: scored against their value
    held = sorted(set(measured) - {9, 10})
    assert row["calibration_rows"] == 2 and row["holdout_rows"] == len(held) > 0
    assert [r["row"] for r in rows if r["held_out"]] == held
    assert all(r["measured"] == measured[r["row"]] for r in rows if r["held_out"])
    assert 0 <= row["holdout_inside_band"] <= len(held) and row["holdout_max_abs_z"] >= 0


def test_a_bad_calibrate_names_the_line():
    (point,) = sweep.expand(sweep.grid_from_dict({**FIT, "calibrate": "9,99"}))
    row = sweep.evaluate_point(point)
    assert row["error"].startswith("ValueError: calibrate: line 99 ") and row.get("family") is None


def test_a_synthetic_cache_grid_on_two_worker_processes_equals_the_serial_run(tmp_path):
    """Each point samples its own trace from its seed: a worker process gives the serial row."""
    distributed = pytest.importorskip("distributed")
    grid = sweep.grid_from_dict(SYNTH)
    serial = tmp_path / "serial.parquet"
    assert sweep.run_sweep(grid, serial)["failed"] == 0
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", protocol="tcp", dashboard_address=":0"
    )
    try:
        with distributed.Client(cluster) as client:
            rep = sweep.run_sweep(grid, tmp_path / "cluster.parquet", client=client, chunk=5)
    finally:
        cluster.close()
    assert rep["evaluated"] == 24 and rep["failed"] == 0
    rows = pq.read_table(tmp_path / "cluster.parquet").to_pylist()
    assert outputs(rows) == outputs(pq.read_table(serial).to_pylist())
    assert len({r["hit_rate"] for r in rows}) > 12  # the points differ: not one trace replayed


def test_a_second_sweep_onto_an_output_being_written_fails_and_loses_nothing(tmp_path, capsys):
    # a lost update was reported as success: two sweeps onto one -o both said "wrote", and the
    # file kept one of them. Another process holds the output's lock (as a running sweep does).
    import subprocess
    import sys

    grid = tmp_path / "grid.toml"
    grid.write_text('command = "union"\nexperts = [64]\ntop_k = 8\nbatch = [1, 4]\n')
    out = tmp_path / "u.parquet"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom moeroof.core import atomic\n"
            "with atomic.exclusive(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert main(["sweep", str(grid), "-o", str(out)]) == 2
        std, err = capsys.readouterr()
        assert std == "" and len(err.strip().splitlines()) == 1
        assert err.startswith(f"error: {out}: another moeroof sweep is writing it")
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    # the holder is gone (killed, its lock file left behind): the next sweep takes the lock
    assert main(["sweep", str(grid), "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["evaluated"] == 2
    assert not (tmp_path / ".u.parquet.lock").exists()


def test_a_sweep_output_that_is_a_device_is_refused_naming_it(tmp_path, capsys):
    # it was "error: /dev/full" alone: pyarrow's FileNotFoundError reading the device back
    grid = tmp_path / "grid.toml"
    grid.write_text('command = "union"\nexperts = [64]\ntop_k = 8\nbatch = [1]\n')
    fifo = tmp_path / "out.parquet"
    os.mkfifo(fifo)
    for out, kind in [("/dev/full", "a character device"), (str(fifo), "a FIFO")]:
        assert main(["sweep", str(grid), "-o", out]) == 2
        std, err = capsys.readouterr()
        assert std == "" and err == f"error: {out}: not a regular file ({kind})\n"


# ----------------------------------------------------------------------------- Ctrl-C anywhere


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    points=st.integers(1, 12),
    at=st.integers(0, 14),
    how=st.sampled_from(["during a save", "inside a kernel"]),
    checkpoints=st.booleans(),
)
def test_ctrl_c_anywhere_in_a_serial_sweep_exits_130_saying_what_it_kept(
    tmp_path_factory, capsys, points, at, how, checkpoints
):
    """Ctrl-C at any moment of a serial sweep: during any of its saves (a checkpoint every point,
    or only the last one), or inside a point's kernel, where it surfaces as a SystemError. The run
    exits 130 saying how many points it kept, the file holds exactly those, and a rerun evaluates
    the rest; or, the interrupt coming after the last save, it is whole. Before ("Ctrl-C during a
    serial sweep"): one during the last save cut it and lost every point in silence, and
    one inside a kernel became a failed point and the sweep went on to exit 0."""
    d = tmp_path_factory.mktemp("ctrlc")
    grid = d / "g.toml"
    batches = ", ".join(str(b) for b in range(1, points + 1))
    grid.write_text(f'command = "union"\nbatch = [{batches}]\n[fixed]\nexperts = 64\ntop_k = 4\nlayers = 2\n')
    out = d / "s.parquet"
    with pytest.MonkeyPatch.context() as monkeypatch:  # undone after each example
        kept = _interrupted_sweep(monkeypatch, capsys, grid, out, points, at, how, checkpoints)
    if kept is not None:  # the rerun, unpatched, evaluates the rest
        assert main(["sweep", str(grid), "-o", str(out), "--json"]) == 0
        rep = json.loads(capsys.readouterr().out)
        assert rep["evaluated"] == points - kept and rep["skipped"] == kept


def _interrupted_sweep(monkeypatch, capsys, grid, out, points, at, how, checkpoints) -> int | None:
    """Run the sweep with Ctrl-C at call ``at`` of a save or a kernel; check what it says; the
    points it kept (None: the interrupt never came)."""
    import signal

    monkeypatch.setattr(sweep, "CHECKPOINT_SECONDS", -1.0 if checkpoints else 1e9)
    calls: list[int] = []
    if how == "during a save":  # every save of the Parquet goes through atomic.write_via
        from moeroof.core import atomic

        write = atomic.write_via

        def interrupted_write(*args, **kwargs):
            calls.append(1)
            if len(calls) == at + 1:
                signal.raise_signal(signal.SIGINT)  # as a terminal's Ctrl-C: Python's handler raises
            return write(*args, **kwargs)

        monkeypatch.setattr(atomic, "write_via", interrupted_write)
    else:  # a union point's kernel: the closed form, looked up when the point runs
        from moeroof.models import union

        kernel = union.union_uniform

        def interrupted_kernel(*args, **kwargs):
            calls.append(1)
            if len(calls) == at + 1:
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt as exc:
                    raise SystemError("<built-in function kernel> returned a result with an exception set") from exc
            return kernel(*args, **kwargs)

        monkeypatch.setattr(union, "union_uniform", interrupted_kernel)
    rc = main(["sweep", str(grid), "-o", str(out)])
    err = capsys.readouterr().err
    kept = pq.read_table(out).num_rows if out.exists() else 0
    if len(calls) <= at:  # the interrupt never came
        assert rc == 0 and kept == points, err
        return None
    assert rc == 130, f"exit {rc} after Ctrl-C {how}:\n{err}"
    said = re.search(r"error: interrupted: (\d+) of the (\d+) points to evaluate are kept in ", err)
    assert said and int(said[2]) == points, f"Ctrl-C {how} (call {at + 1}): no word of what was kept:\n{err}"
    assert int(said[1]) == kept, f"said {said[1]} kept, the file holds {kept}"
    return kept


#: a valid grid of each command that takes each count key (COUNT_KEYS), every key given
_COUNT_BASES = (
    {"command": "union", "batch": 8, "experts": 64, "top_k": 8, "layers": 4},
    {"command": "cache", "capacity": 4, "routing": "uniform", "experts": 8, "top_k": 2, "layers": 2, "steps": 10,
     "streams": 1, "seed": 0, "warmup_steps": 0},
    {"command": "plan", "model": "glm-5.2", "hardware": "nvme-gen4", "batch": 1, "context": 4096, "ranks": 1},
    {"command": "fit-routing", "points": "p.csv", "experts": 64, "top_k": 4, "layers": 8, "seeds": 4,
     "bootstrap": 8, "timed_steps": 16, "max_history": 2048, "max_sim_layers": 16},
)  # fmt: skip


def _toml_value(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


@pytest.mark.parametrize("key", sorted(sweep.COUNT_KEYS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), fixed=st.booleans())
def test_a_grid_count_outside_its_range_names_the_grid_file_and_key(tmp_path, key, data, fixed):
    """Every count a grid gives (``experts``, ``batch``, ``steps``, ``seeds``, …), fixed or swept,
    past the range its command's flag allows (``core.limits``: 2^20 experts, …) as an integer
    or a float is refused as the grid is read, naming the file and the key: ``experts = 2^62``
    was swept (a union of 2^62 experts, exit 0)."""
    low, high = sweep.COUNT_KEYS[key]
    value = data.draw(
        st.one_of(
            st.integers(high + 1, (1 << 63) - 1) if high < (1 << 63) - 1 else st.nothing(),
            st.floats(float(high) * 1.01, 1e300) if high < 1 << 60 else st.nothing(),
            st.integers(-(1 << 63), low - 1),
        )
    )
    base = dict(next(b for b in _COUNT_BASES if key in b))
    base[key] = value
    top = [f"{k} = {_toml_value(v) if fixed or k == 'command' else f'[{_toml_value(v)}]'}" for k, v in base.items()]
    if fixed:
        top = ["command = " + json.dumps(base["command"]), "[fixed]", *top[1:]]
    path = tmp_path / "g.toml"
    path.write_text("\n".join(top) + "\n")
    with pytest.raises(sweep.GridError) as err:
        sweep.read_grid(path)
    named = f"fixed.{key}" if fixed else key
    assert err.value.key == named and str(err.value).startswith(f"{path}: {named}: "), str(err.value)
    base[key] = high if key != "top_k" else 1  # the range's end is read (K <= E is the point's own check)
    sweep.grid_from_dict(base, path)
