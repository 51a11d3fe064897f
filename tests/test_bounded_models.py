"""Bounds inside the models: the drawn cache traces of ``plan``, the simulated
runs of ``fit-routing``, a trace's consecutive overlap at a huge K — each refused or drawn in
bounded memory before numpy is asked for the array, never an OOM kill."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from moeroof.cli import main
from moeroof.core.errors import ParameterError
from moeroof.core.limits import MAX_DRAWN_KEYS
from moeroof.models import expert_cache, routing
from moeroof.models.routing import inclusion_probabilities

ROOT = Path(__file__).resolve().parents[1]
POINTS = ROOT / "data" / "points" / "example.points"


def capped(argv: list[str], cap_mib: int, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a child process whose address space is capped at ``cap_mib`` MiB."""
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({cap_mib} << 20, {cap_mib} << 20))\n"
        "from moeroof.cli.app import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    env = dict(os.environ)
    # the cap counts address space, and OpenBLAS reserves a buffer and a stack per core at import:
    # on a 16-core box its threads alone fail to start under the cap (seen on a lent 16-core host)
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def one_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# ----------------------------------------------------------------------------- drawn cache traces


def _pi(h: int, e: int, k: int, seed: int = 1) -> np.ndarray:
    w = np.random.default_rng(seed).dirichlet(np.full(e, 0.3), size=h)
    return inclusion_probabilities(w, k)


@pytest.mark.parametrize("h, e, k, steps, streams", [(1, 256, 8, 300, 1), (4, 64, 4, 60, 8), (3, 500, 2, 20, 40)])
def test_systematic_topk_is_the_same_trace_at_any_chunk_size(monkeypatch, h, e, k, steps, streams):
    pi = _pi(h, e, k)
    whole_rng = np.random.default_rng([3, 4])
    whole = expert_cache.systematic_topk(pi, steps, streams, whole_rng)
    for chunk in (1, 1000):
        monkeypatch.setattr(expert_cache, "ORDER_CHUNK_ENTRIES", chunk)
        rng = np.random.default_rng([3, 4])
        assert np.array_equal(expert_cache.systematic_topk(pi, steps, streams, rng), whole)
        assert rng.bit_generator.state == whole_rng.bit_generator.state  # rng ends where one draw leaves it


def test_systematic_topk_refuses_an_unsortable_order_before_drawing():
    e = 1 << 20
    pi = np.full((1, e), 8.0 / e)
    steps = MAX_DRAWN_KEYS // e + 1
    with pytest.raises(ValueError, match=r"random-order keys, more than the .* allowed.*policy static"):
        expert_cache.systematic_topk(pi, steps, 1, np.random.default_rng(0))


def test_plan_with_a_million_experts_exits_2_under_a_memory_cap(tmp_path):
    """The audit's OOM kill at 24 GB: glm-5.2 with experts = 1048576 (within the preset limits)."""
    text = (ROOT / "data" / "presets" / "models" / "glm-5.2.toml").read_text()
    model = tmp_path / "m.toml"
    model.write_text(re.sub(r"^experts = \{ value = 256", "experts = { value = 1048576", text, flags=re.M))
    assert "1048576" in model.read_text()
    # independent tokens: the systematic sampler's bound on the keys it sorts
    proc = capped(
        ["plan", "--model", str(model), "--hardware", "nvme-gen4", "--batch", "1,8", "--independent"]
        + ["--routing", "uniform"],
        1500,
        tmp_path,
    )
    assert "random-order keys" in one_error(proc)
    # the locality prior's sampler, on a uniform routing: its bound on one step's scores
    proc = capped(
        ["plan", "--model", str(model), "--hardware", "nvme-gen4", "--batch", "1,8", "--routing", "uniform"],
        1500,
        tmp_path,
    )
    assert "streams × layers × experts" in one_error(proc)
    # the skew prior (the default routing) and a Zipf routing: the bound on the inclusion probabilities' grid
    for spec in ([], ["--routing", "zipf:0.8"]):
        proc = capped(
            ["plan", "--model", str(model), "--hardware", "nvme-gen4", "--batch", "1,8", *spec], 1500, tmp_path
        )
        assert "experts × inclusion quadrature nodes" in one_error(proc)


# ----------------------------------------------------------------------------- consecutive overlap


def _overlap_by_broadcast(t: np.ndarray) -> np.ndarray:
    prev, cur = t[:-1], t[1:]
    return (prev[..., :, None] == cur[..., None, :]).any(axis=-1).sum(axis=-1)


@pytest.mark.parametrize("k", [1, 4, 64, 65, 200])
def test_pair_overlap_chunked_and_sorted_agree_with_every_slot_compared(monkeypatch, k):
    t = np.random.default_rng(k).integers(-1, 3 * k, size=(6, 3, 2, k))
    shared, valid = routing.pair_overlap(t)
    want = _overlap_by_broadcast(t)
    assert np.array_equal(shared, np.where(valid, want, 0))
    monkeypatch.setattr(routing, "OVERLAP_CHUNK", 7)
    assert np.array_equal(routing.pair_overlap(t)[0], shared)
    monkeypatch.setattr(routing, "OVERLAP_SORT_K", 0)
    assert np.array_equal(routing.pair_overlap(t)[0], shared)


def test_pair_overlap_at_k_65536_needs_no_k_squared_array():
    k = 1 << 16  # a K × K bool array would be 4 GiB per pair
    t = np.broadcast_to(np.arange(k, dtype=np.int32), (3, 1, 1, k))
    shared, valid = routing.pair_overlap(t)
    assert valid.all() and (shared == k).all()


# ----------------------------------------------------------------------------- fit-routing


def _ok_points(tmp_path: Path) -> Path:
    path = tmp_path / "ok.points"
    path.write_text("".join(line for line in POINTS.read_text().splitlines(True) if ",,0.5," not in line))
    return path


@pytest.mark.parametrize(
    "extra, message",
    [
        # the flags declare the library's bounds (MAX_FIT_SEEDS, MAX_SIMULATED_STEPS): refused as parsed
        (["--seeds", "1000000000"], r"^error: --seeds: 1000000000 is more than the 1024 allowed$"),
        (["--timed-steps", "1000000000000"], r"^error: --timed-steps: 1000000000000 is more than the 1048576 allowed$"),
    ],
)
def test_fit_routing_refuses_absurd_seeds_and_steps(tmp_path, capsys, extra, message):
    argv = ["fit-routing", str(_ok_points(tmp_path)), "--experts", "64", "--top-k", "4", "--layers", "8", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err


def test_fit_routing_refuses_a_million_experts_at_once(tmp_path, capsys):
    argv = ["fit-routing", str(_ok_points(tmp_path)), "--experts", "1048576", "--top-k", "8", "--layers", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --experts: 1048576 experts × 8 simulated layers"), err


def test_fit_routing_names_the_row_whose_batch_cannot_be_simulated(tmp_path, capsys):
    path = tmp_path / "big.points"
    path.write_text("kind,batch,capacity_experts_per_layer,value\nhit_rate,4,8,0.5\nhit_rate,10000000,8,0.5\n")
    assert main(["fit-routing", str(path), "--experts", "64", "--top-k", "4", "--layers", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # the library knows the row, the command line adds the file: FILE:ROW as every reader says it
    assert len(err) == 1 and err[0].startswith(f"error: {path}:3 (hit_rate M=10000000"), err
    assert "entries would need" in err[0] and path.read_text().count("\n") == 3


def test_check_sizes_in_the_library():
    from moeroof.data.points import Point
    from moeroof.fit.routing import check_sizes

    pts = [Point("union", 4, value=3.0)]
    check_sizes(pts, 64, 4, 8, seeds=4, timed_steps=16)
    with pytest.raises(ParameterError) as info:
        check_sizes(pts, 64, 4, 8, seeds=0, timed_steps=16)
    assert info.value.parameter == "seeds"
    with pytest.raises(ParameterError) as info:
        check_sizes(pts, 64, 4, 8, seeds=1, timed_steps=2**40)
    assert info.value.parameter == "timed_steps"


# ----------------------------------------------------------------------------- sizes in files


@pytest.mark.parametrize(
    "text, field",
    [
        ("batch,cache_gib,net_tok_s\n1,20,5\n1,1e300,1\n", "cache_gib"),  # 2^30 · 1e300 = inf bytes
        ("batch,cache_gib,net_tok_s\n1e300,20,1\n", "batch"),
    ],
)
def test_plan_points_sizes_are_finite_in_bytes(tmp_path, text, field):
    from moeroof.data.io import InputError
    from moeroof.data.plan_points import read_plan_points

    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=rf"p.csv:\d: {field}: .* is more than the"):
        read_plan_points(path)


def test_fit_plan_refuses_1e300_gib_with_file_row_and_field(tmp_path, capsys):
    path = tmp_path / "p.csv"
    path.write_text("batch,cache_gib,net_tok_s\n1,1e300,1\n")
    assert main(["fit-plan", str(path), "--model", "glm-5.2", "--hardware", "nvme-gen4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:2: cache_gib: "), err


@pytest.mark.parametrize(
    "row, field", [("hit_rate,4,,1e300,0.5", "capacity_gib"), ("hit_rate,400000000,8,,0.5", "batch")]
)
def test_points_sizes_name_file_row_and_field(tmp_path, capsys, row, field):
    path = tmp_path / "g.points"
    path.write_text(f"kind,batch,capacity_experts_per_layer,capacity_gib,value\n{row}\n")
    argv = ["fit-routing", str(path), "--experts", "64", "--top-k", "4", "--layers", "8", "--expert-bytes", "1000"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:2: {field}: ") and "more than the" in err[0], err


@pytest.mark.parametrize(
    "line, key",
    [
        ("cache_gib = [20, 1e300]", "cache_gib"),
        ("cache_gib = -1", "cache_gib"),
        ('cache_gib = "lots"', "cache_gib"),
        ("read_size_kib = 1e300", "read_size_kib"),
    ],
)
def test_sweep_grid_sizes_are_finite_in_bytes(tmp_path, line, key):
    from moeroof.run.sweep import GridError, read_grid

    grid = tmp_path / "g.toml"
    grid.write_text(f'command = "plan"\nmodel = "glm-5.2"\nhardware = "nvme-gen4"\nbatch = 1\n{line}\n')
    with pytest.raises(GridError, match=rf"g.toml: {key}: "):
        read_grid(grid)


def test_sweep_grid_auto_and_sane_sizes_still_read(tmp_path):
    from moeroof.run.sweep import read_grid

    grid = tmp_path / "g.toml"
    grid.write_text(
        'command = "plan"\nmodel = "glm-5.2"\nhardware = "nvme-gen4"\nbatch = 1\ncache_gib = ["auto", 0, 40]\n'
    )
    assert read_grid(grid).axes["cache_gib"] == ("auto", 0, 40)


def test_sweep_refuses_1e300_gib_with_one_error_line(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text('command = "plan"\nmodel = "glm-5.2"\nhardware = "nvme-gen4"\nbatch = 1\ncache_gib = [1e300]\n')
    assert main(["sweep", str(grid), "-o", str(tmp_path / "s.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {grid}: cache_gib: "), err
    assert not (tmp_path / "s.parquet").exists()


def test_sweep_grid_nesting_is_bounded_before_parsing(tmp_path):
    from moeroof.run.sweep import GridError, read_grid

    grid = tmp_path / "deep.toml"
    grid.write_text('command = "plan"\nbatch = ' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(GridError, match=r"deep.toml: the grid nests arrays or tables 100000 deep, more than the 32"):
        read_grid(grid)
    big = tmp_path / "big.toml"
    big.write_text('command = "plan"\n' + "# padding\n" * 200_000)
    with pytest.raises(GridError, match=r"big.toml: the grid is .* more than the 1 MiB allowed"):
        read_grid(big)
