"""The CLI under hostile input and interruption (docs/robustness.md): one ``error:``
line and exit 2 for whatever the machine refuses, exit 70 for a bug, 130 quietly on Ctrl-C,
SIGHUP like SIGTERM, outputs that never overwrite an input, bench's report never lost, stale
scratch swept, a truncated ``.npy`` an error rather than SIGBUS — and no traceback anywhere."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from moeroof.cli import app
from moeroof.cli import union as union_cmd
from moeroof.cli.output import dumps
from moeroof.data.io import write_trace
from moeroof.data.safe_read import load_npy
from moeroof.measure import calibrate as measure

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
META = {"model": "m", "experts": 8, "top_k": 2, "layer_ids": [0], "source": "test", "provenance": "witnessed"}
TINY_BENCH = ["--experts", "4", "--layers", "1", "--top-k", "2", "--d-model", "8", "--d-ff", "8"]
TINY_BENCH += ["--batch", "1,2", "--steps", "1", "--warmup", "0", "--quiet"]


def digest(*paths: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def one_error(err: str) -> str:
    """The single ``error:`` line of a failed run (and nothing else on stderr)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def run_main(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = app.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def small_trace(path: Path) -> Path:
    topk = np.array([[[[0, 1]], [[2, 3]]], [[[1, 4]], [[5, 6]]], [[[0, 7]], [[2, 5]]]], dtype=np.int64)
    return write_trace(path, topk, META)


# ----------------------------------------------------------------------------- app.main


@pytest.mark.parametrize(
    "exc, expected",
    [
        (MemoryError(), "error: out of memory: use a smaller input, batch or sample count"),
        (
            OverflowError("int too large to convert to float"),
            "error: a number is too large to compute with (int too large to convert to float); check the sizes and values given",
        ),
        (RecursionError("maximum recursion depth exceeded"), "error: an input is nested too deeply to read"),
        (
            OSError(errno.ENOSPC, "No space left on device", "/dev/full"),
            "error: /dev/full: no space left on the device",
        ),
        (PermissionError(errno.EACCES, "Permission denied", "/x/y.csv"), "error: /x/y.csv: permission denied"),
        (
            OSError(errno.EROFS, "Read-only file system", "/ro/out.json"),
            "error: /ro/out.json: the file system is read-only",
        ),
        (IsADirectoryError(errno.EISDIR, "Is a directory", "data"), "error: data: is a folder, not a file"),
        (ValueError("zero-size array to reduction operation maximum which has no identity"), None),
        (ValueError("cannot reshape array of size 0 into shape (0,newaxis)"), None),
        (ValueError("Maximum allowed dimension exceeded"), None),
        (ValueError("Out of range float values are not JSON compliant: inf"), None),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_what_the_machine_refuses_is_one_error_line_and_exit_2(monkeypatch, capsys, exc, expected):
    def boom(args):
        raise exc

    monkeypatch.setattr(union_cmd, "run", boom)
    monkeypatch.delenv("MOEROOF_DEBUG", raising=False)
    rc, out, err = run_main(capsys, ["union", "--uniform", "8", "2", "--batch", "1"])
    line = one_error(err)
    assert rc == 2 and out == ""
    if expected is not None:
        assert line == expected
    else:  # numpy's words never reach the user
        for needle in ("zero-size array", "reshape", "Maximum allowed dimension", "JSON compliant"):
            assert needle not in line, line
    print(f"{type(exc).__name__}: {line}", file=sys.__stdout__)


def test_an_unexpected_exception_is_an_internal_error_with_exit_70(monkeypatch, capsys):
    def boom(args):
        raise RuntimeError("something broke\nsecond line")

    monkeypatch.setattr(union_cmd, "run", boom)
    monkeypatch.delenv("MOEROOF_DEBUG", raising=False)
    rc, out, err = run_main(capsys, ["union", "--uniform", "8", "2", "--batch", "1"])
    assert rc == app.EXIT_INTERNAL == 70
    assert one_error(err) == "error: internal error: RuntimeError: something broke (please report)"


@pytest.mark.parametrize("exc", [RuntimeError("x"), OSError(errno.ENOSPC, "No space left on device", "f")])
def test_moeroof_debug_re_raises_for_developers(monkeypatch, exc):
    def boom(args):
        raise exc

    monkeypatch.setattr(union_cmd, "run", boom)
    monkeypatch.setenv("MOEROOF_DEBUG", "1")
    with pytest.raises(type(exc)):
        app.main(["union", "--uniform", "8", "2", "--batch", "1"])


def test_keyboard_interrupt_exits_130_quietly(monkeypatch, capsys):
    def boom(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(union_cmd, "run", boom)
    rc, out, err = run_main(capsys, ["union", "--uniform", "8", "2", "--batch", "1"])
    assert rc == 130 and out == "" and err == ""


def test_numpy_floating_point_warnings_are_not_shown(monkeypatch, capsys):
    def noisy(args):
        np.float64(1.0) / np.float64(0.0)  # RuntimeWarning: divide by zero encountered in scalar divide
        return 0

    monkeypatch.setattr(union_cmd, "run", noisy)
    monkeypatch.delenv("MOEROOF_DEBUG", raising=False)
    rc, _, err = run_main(capsys, ["union", "--uniform", "8", "2", "--batch", "1"])
    assert rc == 0 and err == ""


def test_dumps_turns_inf_and_nan_into_null():
    assert json.loads(dumps({"a": float("inf"), "b": [1.0, float("nan"), -np.inf], "c": {"d": np.float64("inf")}})) == {
        "a": None,
        "b": [1.0, None, None],
        "c": {"d": None},
    }


def test_an_absurd_box_is_refused_and_infinite_results_print_null(tmp_path, capsys):
    # a box whose rates overflow in SI units is refused by the preset reader (one error line) ...
    text = (ROOT / "data/presets/hardware/nvme-gen4.toml").read_text()
    text = text.replace("value = [0.028, 0.85, 4.13, 5.7]", "value = [1e300, 1e300, 1e300, 1e300]")
    text = text.replace("bw_mem_bytes_per_s = { value = 60,", "bw_mem_bytes_per_s = { value = 1e300,")
    text = text.replace("flops_per_s = { value = 1.0,", "flops_per_s = { value = 1e300,")
    hw = tmp_path / "fast.toml"
    hw.write_text(text)
    rc, out, err = run_main(capsys, ["plan", "--model", "glm-5.2", "--hardware", str(hw), "--batch", "1", "--json"])
    assert rc == 2 and "overflows" in one_error(err) and "fast.toml" in err
    assert "Traceback" not in err and "RuntimeWarning" not in err and "JSON compliant" not in err
    # ... and a result that is not finite still prints as strict JSON (null), never a JSON error
    text = dumps({"net_tok_s": [float("inf"), 1.5, float("nan")], "bound": ["ssd"]})
    assert json.loads(text) == {"net_tok_s": [None, 1.5, None], "bound": ["ssd"]}


def test_bench_on_a_zero_length_trace_says_so(tmp_path, capsys):
    path = write_trace(tmp_path / "empty.npz", np.zeros((0, 1, 1, 2), dtype=np.int64), META)
    before = digest(path)
    rc, _, err = run_main(capsys, ["bench", "--trace", str(path), "--batch", "1", "--steps", "1", "--quiet"])
    line = one_error(err)
    assert rc == 2 and "holds no token" in line and str(path) in line
    assert digest(path) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["union", "{d}", "--batch", "1"],
        ["fit", "{d}"],
        ["cache", "{d}", "--policy", "lru", "--capacity-experts", "4"],
        ["histogram", "{d}", "-o", "{d}/h.csv"],
    ],
)
def test_a_folder_given_as_a_file_is_one_error_line(tmp_path, capsys, argv):
    rc, _, err = run_main(capsys, [a.format(d=tmp_path) for a in argv])
    assert rc == 2 and str(tmp_path) in one_error(err)


def test_an_unreadable_input_is_one_error_line(tmp_path, capsys):
    if IS_ROOT:
        pytest.skip("root reads a mode-000 file anyway (permissions do not bind root)")
    path = small_trace(tmp_path / "t.npz")
    path.chmod(0)
    try:
        rc, _, err = run_main(capsys, ["histogram", str(path), "-o", str(tmp_path / "h.csv")])
    finally:
        path.chmod(0o644)
    assert rc == 2 and str(path) in one_error(err)


# ----------------------------------------------------------------------------- --output that cannot be written


def test_output_to_dev_full_is_one_error_line_and_dev_full_stays_a_device(capsys):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    rc, _, err = run_main(capsys, ["union", "--uniform", "8", "2", "--batch", "1", "--output", "/dev/full"])
    line = one_error(err)
    assert rc == 2 and "/dev/full" in line
    import stat

    assert stat.S_ISCHR(os.stat("/dev/full").st_mode), "the device was replaced by a file"


def test_output_to_dev_null_is_written_into_not_replaced(capsys):
    rc, _, err = run_main(capsys, ["union", "--uniform", "8", "2", "--batch", "1", "--output", "/dev/null"])
    assert rc == 0, err
    import stat

    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_output_under_a_file_is_one_error_line(tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    rc, _, err = run_main(
        capsys,
        ["trace", "--family", "uniform", "--experts", "8", "--top-k", "2", "--layers", "1"]
        + ["--streams", "1", "--steps", "2", "-o", str(blocker / "t.npz")],
    )
    line = one_error(err)
    assert rc == 2 and str(blocker) in line and "not a folder" in line
    assert blocker.read_text() == "x"


def test_output_in_a_read_only_folder_is_one_error_line(tmp_path, capsys):
    if IS_ROOT:
        pytest.skip("root writes into a mode-0500 folder anyway (the path-under-a-file case covers the refusal)")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc, _, err = run_main(capsys, ["union", "--uniform", "8", "2", "--batch", "1", "--output", str(ro / "u.json")])
    finally:
        ro.chmod(0o700)
    assert rc == 2 and str(ro) in one_error(err)


# ----------------------------------------------------------------------------- outputs


def test_bench_refuses_to_overwrite_its_trace(tmp_path, capsys):
    for name in ("t.npz", "t.npy"):
        trace = small_trace(tmp_path / name)
        inputs = [trace, trace.with_suffix(".json")]
        before = digest(*inputs)
        for target in inputs:
            if not target.exists():
                continue
            rc, _, err = run_main(capsys, ["bench", "--trace", str(trace), "--output", str(target), *TINY_BENCH[6:]])
            line = one_error(err)
            assert rc == 2 and "one of this command's inputs" in line, line
        assert digest(*inputs) == before


def test_bench_refuses_to_overwrite_its_calibration(tmp_path, capsys):
    cal = tmp_path / "hw.toml"
    cal.write_text((ROOT / "data/presets/hardware/nvme-gen4.toml").read_text())
    before = digest(cal)
    rc, _, err = run_main(capsys, ["bench", "--calibration", str(cal), "--output", str(cal), *TINY_BENCH])
    assert rc == 2 and "one of this command's inputs" in one_error(err)
    assert digest(cal) == before


def test_bench_refuses_a_missing_or_unwritable_output_folder_before_measuring(tmp_path, capsys, monkeypatch):
    """Refused before measuring: the measurement is replaced by one that records the call (it was
    a wall-clock bound, which a loaded box can break); a writable output reaches it."""
    from moeroof.measure import bench

    measured = []
    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: measured.append(1) or {})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for target, words in (
        (tmp_path / "nope" / "r.json", "does not exist"),
        (blocker / "r.json", "not a folder"),
        (tmp_path, "is a folder"),
    ):
        rc, out, err = run_main(capsys, ["bench", "--output", str(target), "--scratch-dir", str(scratch), *TINY_BENCH])
        line = one_error(err)
        assert rc == 2 and words in line, line
        assert out == "" and list(scratch.iterdir()) == [] and measured == []  # nothing measured
    assert not (tmp_path / "nope").exists()
    run_main(capsys, ["bench", "--output", str(tmp_path / "r.json"), "--scratch-dir", str(scratch), *TINY_BENCH])
    assert measured == [1]


def test_bench_still_prints_the_json_when_the_write_fails(tmp_path, monkeypatch, capsys):
    from moeroof.core import atomic

    def full(path, text, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(atomic, "write_text", full)
    target = tmp_path / "r.json"
    rc, out, err = run_main(capsys, ["bench", "--output", str(target), "--json", *TINY_BENCH])
    line = one_error(err)
    assert rc == 2 and str(target) in line and "No space left" in line
    rep = json.loads(out)
    assert rep["experts"] == 4 and set(rep["batch"]) == {1, 2}
    assert not target.exists()
    # as a table: the table, then the JSON, so the measurement is not lost
    rc, out, err = run_main(capsys, ["bench", "--output", str(target), *TINY_BENCH])
    assert rc == 2 and "could not be written" in out
    json.loads(out.split("could not be written):\n", 1)[1])
    one_error(err)


def test_bench_to_dev_full_measures_and_prints_the_json(capsys):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    rc, out, err = run_main(capsys, ["bench", "--output", "/dev/full", "--json", *TINY_BENCH])
    line = one_error(err)
    assert rc == 2 and "/dev/full" in line
    assert json.loads(out)["experts"] == 4


def test_histogram_refuses_to_overwrite_its_traces_sidecar(tmp_path, capsys):
    trace = small_trace(tmp_path / "t.npy")
    side = trace.with_suffix(".json")
    before = digest(trace, side)
    rc, _, err = run_main(capsys, ["histogram", str(trace), "-o", str(tmp_path / "t.csv"), "--force"])
    assert rc == 2 and "would overwrite the trace" in one_error(err)
    assert digest(trace, side) == before and not (tmp_path / "t.csv").exists()


def test_import_refuses_to_overwrite_its_source_through_a_hard_link(tmp_path, capsys):
    src = tmp_path / "src.csv"
    src.write_text("Layer,Expert_0,Expert_1\n0,3,5\n")
    link = tmp_path / "link.csv"
    os.link(src, link)
    before = digest(src)
    argv = ["import", "matrix", str(src), "-o", str(link), "--force", "--layer-col", "Layer"]
    rc, _, err = run_main(capsys, argv + ["--expert-prefix", "Expert_", "--top-k", "1"])
    assert rc == 2 and "overwrite the file it is imported from" in one_error(err)
    assert digest(src) == before


@pytest.mark.parametrize("seconds", ["3601", "1e9", "0.01", "inf", "nan"])
def test_calibrate_seconds_is_bounded(tmp_path, capsys, seconds):
    rc, _, err = run_main(capsys, ["calibrate", "--output", str(tmp_path / "hw.toml"), "--seconds", seconds, "--quiet"])
    assert rc == 2 and "--seconds" in one_error(err)
    assert list(tmp_path.iterdir()) == []


def test_calibrate_refuses_an_output_it_cannot_write_before_measuring(tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for target, words in ((tmp_path, "is a folder"), (blocker / "hw.toml", "not a folder")):
        rc, _, err = run_main(capsys, ["calibrate", "--output", str(target), "--quiet"])
        assert rc == 2 and words in one_error(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


# ----------------------------------------------------------------------------- stale scratch


def _stale(parent: Path, name: str, age_s: float = 3600.0) -> Path:
    d = parent / name
    d.mkdir()
    (d / "stack.bin").write_bytes(b"\0" * 16)
    t = time.time() - age_s
    os.utime(d, (t, t))
    return d


def test_sweep_removes_only_stale_unlocked_scratch_folders(tmp_path):
    import fcntl

    stale = _stale(tmp_path, ".moeroof-scratch-abcd1234")
    held = _stale(tmp_path, ".moeroof-scratch-held_567")
    lock = os.open(held / measure.SCRATCH_LOCK, os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # a live run (this process) still owns it
    os.utime(held, (time.time() - 3600,) * 2)
    fresh = _stale(tmp_path, ".moeroof-scratch-fresh999", age_s=-60)  # newer than this process
    other = _stale(tmp_path, ".moeroof-scratch-toolongname")  # not mkdtemp's 8 characters
    mine = _stale(tmp_path, "moeroof-scratch-abcd1234")  # no leading dot
    plain = tmp_path / ".moeroof-scratch-file0000"
    plain.write_text("a file, not a folder")
    os.utime(plain, (time.time() - 3600,) * 2)
    try:
        removed = measure.sweep_stale_scratch(tmp_path)
    finally:
        os.close(lock)
    assert removed == [stale] and not stale.exists()
    assert held.exists() and fresh.exists() and other.exists() and mine.exists() and plain.exists()


def test_a_run_sweeps_the_scratch_a_killed_run_left(tmp_path, capsys):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    stale = _stale(scratch, ".moeroof-scratch-killed00")
    keep = scratch / "mine.bin"
    keep.write_bytes(b"1")
    rc, _, err = run_main(capsys, ["bench", "--scratch-dir", str(scratch), "--json", *TINY_BENCH])
    assert rc == 0, err
    assert not stale.exists() and keep.read_bytes() == b"1"
    assert sorted(p.name for p in scratch.iterdir()) == ["mine.bin"]


def test_a_live_run_holds_its_scratch_lock(tmp_path):
    with measure.scratch_space(tmp_path) as path:
        os.utime(path, (time.time() - 3600,) * 2)
        assert measure.sweep_stale_scratch(tmp_path) == [] and path.exists()
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- signals (subprocesses)


def _default_signals() -> None:
    # a child inherits ignored signals, and Python then leaves SIGINT ignored (no
    # KeyboardInterrupt): the command must see Ctrl-C as a terminal gives it, whatever the test
    # runner's own disposition (a full-suite run once found SIGINT ignored by then)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _popen(args: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "moeroof.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        preexec_fn=_default_signals,  # noqa: PLW1509 - no threads start before the exec
    )


def test_sighup_mid_calibrate_is_handled_like_sigterm(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "hw.toml"
    proc = _popen(
        ["calibrate", "--output", str(out), "--file-mib", "64", "--seconds", "60", "--mem-mib", "4"]
        + ["--matmul-n", "32", "--scratch-dir", str(scratch), "--quiet"]
    )
    try:
        deadline = time.monotonic() + 30
        while not any(d.glob("*.bin") for d in scratch.iterdir()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the scratch file never appeared"
            time.sleep(0.02)
        time.sleep(0.3)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert one_error(err) == "error: interrupted (scratch files removed)"
    assert list(scratch.iterdir()) == [] and not out.exists()


def _ctrl_c_after_first_progress(argv: list[str], memo: Path) -> tuple[str, str]:
    """Run ``argv`` with its progress line forced on and an empty memo (every step computed, so
    the run is long), send SIGINT half a second after the first progress byte; (stdout, stderr)
    once it has exited (its code in the process's returncode, asserted by the caller)."""
    proc = _popen(argv, MOEROOF_PROGRESS="1", MOEROOF_CACHE_DIR=str(memo))
    try:
        assert proc.stderr.read(1) != "", proc.communicate()  # blocks until the first progress byte
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    return out, err


def test_ctrl_c_in_an_ordinary_command_exits_130_without_a_traceback(tmp_path):
    # fit-routing's example takes ~30 s
    argv = ["fit-routing", "data/points/example.points", "--experts", "64", "--top-k", "4", "--layers", "8"]
    out, err = _ctrl_c_after_first_progress([*argv, "--expert-bytes", "4194304", "--json"], tmp_path / "memo")
    assert "Traceback" not in err and "error:" not in err and out == ""


# ----------------------------------------------------------------------------- truncated .npy


def test_a_truncated_npy_trace_is_an_error_not_sigbus(tmp_path):
    trace = small_trace(tmp_path / "t.npy")
    with open(trace, "r+b") as fh:
        fh.truncate(trace.stat().st_size - 5)
    proc = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", "cache", str(trace), "--policy", "lru", "--capacity-experts", "4"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert "truncated" in one_error(proc.stderr) and str(trace) in proc.stderr


def test_a_trace_truncated_after_it_was_read_cannot_kill_the_process(tmp_path):
    trace = small_trace(tmp_path / "t.npy")
    code = (
        "import os, sys\n"
        "from moeroof.data.io import read_trace\n"
        "tr = read_trace(sys.argv[1])\n"
        "os.truncate(sys.argv[1], 0)\n"
        "print(int(tr.topk.sum()))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # -7 would be SIGBUS
    assert int(proc.stdout) == 36


def test_load_npy_maps_only_above_its_copy_limit(tmp_path):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    np.save(tmp_path / "a.npy", a)
    small = load_npy(tmp_path / "a.npy")
    big = load_npy(tmp_path / "a.npy", copy_limit=0)
    assert not isinstance(small, np.memmap) and isinstance(big, np.memmap)
    np.testing.assert_array_equal(small, a)
    np.testing.assert_array_equal(big, a)
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    np.testing.assert_array_equal(load_npy(tmp_path / "f.npy"), a)
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="objects"):
        load_npy(tmp_path / "o.npy")


# ----------------------------------------------------------------------------- report --out


def test_report_out_sends_the_figures_under_the_out_folder(tmp_path, monkeypatch, capsys):
    import nbformat

    from moeroof.present import report

    seen = {}

    def fake_execute(path, parameters=None, **_):
        seen["figures"] = os.environ.get(report.FIGURES_ENV)
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# x")])

    monkeypatch.setattr(report, "execute", fake_execute)
    out = tmp_path / "my-run"
    rc, stdout, err = run_main(capsys, ["report", "--notebooks", "union_curve", "--out", str(out), "--json"])
    assert rc == 0, err
    rep = json.loads(stdout)
    assert seen["figures"] == str(out / "figures")
    assert rep["runs"][0]["figures"] == str(out / "figures")
    assert (out / "union_curve.html").is_file()


def test_an_npy_longer_than_its_header_declares_is_refused(tmp_path, capsys):
    from moeroof.cli.app import main

    path = tmp_path / "t.npy"
    np.save(path, np.zeros((2, 1, 1, 2), dtype=np.int16))
    path.write_bytes(path.read_bytes() + bytes(16))
    (tmp_path / "t.json").write_text(json.dumps({"model": "m", "experts": 4, "top_k": 2, "source": "s"}))
    assert main(["cache", str(path), "--policy", "lru", "--capacity-experts", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "16 bytes more than its header says" in err


def test_ctrl_c_while_the_suite_is_loading_exits_130_quietly():
    """The console script's main imports the suite itself, so a Ctrl-C during that import is
    caught too (simulated: the import of moeroof.cli.app raises KeyboardInterrupt)."""
    code = (
        "import builtins, sys\n"
        "import moeroof.cli\n"
        "assert 'moeroof.cli.app' not in sys.modules, 'the console entry must not load the suite up front'\n"
        "real = builtins.__import__\n"
        "def imp(name, *a, **k):\n"
        "    if name == 'moeroof.cli.app':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = imp\n"
        "sys.exit(moeroof.cli.main(['--version']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130 and proc.stderr == ""


# ----------------------------------------------------------------------------- --output is an input


def _copy_inputs(tmp_path: Path) -> dict[str, Path]:
    """Copies of a histogram (+ sidecar), a trace, a model and a hardware preset, a POINTS file
    and a sweep grid: the inputs an --output must never overwrite."""
    data = ROOT / "data"
    out = {
        "hist": tmp_path / "h.csv",
        "side": tmp_path / "h.json",
        "trace": tmp_path / "t.npz",
        "model": tmp_path / "m.toml",
        "hardware": tmp_path / "hw.toml",
        "points": tmp_path / "p.csv",
        "grid": tmp_path / "g.toml",
    }
    out["hist"].write_bytes((data / "histograms" / "glm5-seed003-per-layer.csv").read_bytes())
    out["side"].write_bytes((data / "histograms" / "glm5-seed003-per-layer.json").read_bytes())
    out["trace"].write_bytes((data / "traces" / "qwen3-30b-a3b-like.npz").read_bytes())
    out["model"].write_bytes((data / "presets" / "models" / "glm-5-nvfp4.toml").read_bytes())
    out["hardware"].write_bytes((data / "presets" / "hardware" / "gb10.toml").read_bytes())
    out["points"].write_text("batch,cache_gib,ranks,policy,net_tok_s,hit_rate\n1,20,1,lru,17.17,\n4,20,1,lru,,\n")
    out["grid"].write_text('command = "union"\nexperts = [8]\ntop_k = 2\nbatch = [1, 2]\n')
    return out


def _refused(capsys, argv: list[str], protected: list[Path]) -> str:
    before = digest(*protected)
    rc, out, err = run_main(capsys, argv)
    line = one_error(err)
    assert rc == 2, (argv, out, err)
    assert digest(*protected) == before, argv
    return line


def test_output_that_is_an_input_is_refused_by_every_command(tmp_path, capsys):
    f = _copy_inputs(tmp_path)
    everything = list(f.values())
    cases = [
        (["union", str(f["hist"]), "--batch", "1", "--bootstrap", "0"], [f["hist"], f["side"]]),
        (["fit", str(f["hist"]), "--bootstrap", "0", "--gof-sims", "0"], [f["hist"], f["side"]]),
        (["fit", str(f["trace"]), "--bootstrap", "0", "--gof-sims", "0"], [f["trace"]]),
        (
            ["split", str(f["hist"]), "--ranks", "2", "--method", "lpt", "--model", str(f["model"])]
            + ["--hardware", str(f["hardware"])],
            [f["hist"], f["side"], f["model"], f["hardware"]],
        ),
        (["cache", str(f["trace"]), "--policy", "lru", "--capacity-experts", "64"], [f["trace"]]),
        (
            ["cache", str(f["trace"]), "--policy", "static", "--capacity-experts", "64", "--histogram", str(f["hist"])],
            [f["trace"], f["hist"], f["side"]],
        ),
        (["mrc", str(f["trace"])], [f["trace"]]),
        (
            ["plan", "--model", str(f["model"]), "--hardware", str(f["hardware"]), "--batch", "1"]
            + ["--routing", str(f["hist"])],
            [f["model"], f["hardware"], f["hist"], f["side"]],
        ),
        (
            ["fit-plan", str(f["points"]), "--model", str(f["model"]), "--hardware", str(f["hardware"])],
            [f["points"], f["model"], f["hardware"]],
        ),
    ]
    for argv, inputs in cases:
        for target in inputs:
            line = _refused(capsys, [*argv, "--output", str(target)], everything)
            assert line.startswith("error: --output:") and "one of this command's inputs" in line, (argv, line)
    # sweep: its -o is the Parquet data, --report-output the printed summary; neither may be the grid
    line = _refused(capsys, ["sweep", str(f["grid"]), "-o", str(f["grid"])], everything)
    assert "grid file" in line
    out = tmp_path / "o.parquet"
    line = _refused(capsys, ["sweep", str(f["grid"]), "-o", str(out), "--report-output", str(f["grid"])], everything)
    assert line.startswith("error: --report-output:") and not out.exists()


def test_output_onto_a_shipped_preset_is_refused(capsys):
    """`moeroof presets --output data/presets/models/glm-5.2.toml` once overwrote the preset.
    Every command refuses a report file in the presets folder, and a preset it reads by name."""
    presets = ROOT / "data" / "presets"
    glm = presets / "models" / "glm-5.2.toml"
    box = presets / "hardware" / "nvme-gen4.toml"
    saved = {p: p.read_bytes() for p in (glm, box)}
    try:
        for argv, target in [
            (["presets"], glm),
            (["presets", "--format", "csv"], box),
            (["presets", "--json"], presets / "models" / "new.toml"),  # any file there, not only a preset
            (["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1"], glm),
            (["plan", "--model", "glm-5.2", "--hardware", "nvme-gen4", "--batch", "1"], box),
        ]:
            line = _refused(capsys, [*argv, "--output", str(target)], list(saved))
            assert line.startswith("error: --output:"), line
        assert not (presets / "models" / "new.toml").exists()
    finally:  # a regression must not leave the shipped presets broken
        for p, b in saved.items():
            if p.read_bytes() != b:
                p.write_bytes(b)
        (presets / "models" / "new.toml").unlink(missing_ok=True)


def test_ctrl_c_inside_a_compiled_kernel_exits_130_quietly(monkeypatch, capsys):
    """A Ctrl-C that lands while an extension runs can come back as a SystemError whose cause is
    the KeyboardInterrupt (CPython's 'returned a result with an exception set'): exit 130 and
    nothing on stderr, as for a Ctrl-C anywhere else (it was exit 70, 'internal error')."""
    from moeroof.cli import presets as presets_cmd

    def interrupted_in_a_kernel(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise SystemError("CPUDispatcher(<function lru_pass>) returned a result with an exception set") from ki

    monkeypatch.setattr(presets_cmd, "run", interrupted_in_a_kernel)
    code, out, err = run_main(capsys, ["presets"])
    assert code == 130 and err == "" and out == ""


def test_c_kernels_not_built_exit_78_saying_what_builds_them(monkeypatch, capsys):
    from moeroof.cli import presets as presets_cmd
    from moeroof.kernels import loader

    def unbuilt(args):
        loader.load("moeroof.kernels._no_such_kernels")

    monkeypatch.setattr(presets_cmd, "run", unbuilt)
    code, out, err = run_main(capsys, ["presets"])
    assert code == 78 and out == ""
    assert err.startswith("error: the C kernels") and "make" in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- both or neither


def _file_size_cap(limit: int):
    def cap() -> None:  # in the child: writes past `limit` bytes fail with EFBIG, as a full disk fails them
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return cap


@pytest.mark.parametrize(
    ("command", "out", "side"),
    [
        (["histogram", str(ROOT / "data" / "traces" / "qwen3-30b-a3b-like.npz")], "h.csv", "h.json"),
        (
            ["trace", "--family", "zipf:0.9", "--experts", "128", "--top-k", "8", "--layers", "8", "--steps", "64"]
            + ["--streams", "4"],
            "t.npy",
            "t.json",
        ),
    ],
)
def test_a_result_and_its_sidecar_are_written_both_or_neither(tmp_path, command, out, side):
    # the sidecar (a few KB) fits under the cap, the data file does not: once the sidecar was
    # committed and left alone on disk ("histogram onto a full disk leaves the sidecar")
    (tmp_path / out).write_text("old data")
    (tmp_path / side).write_text("old meta")
    done = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", *command, "-o", str(tmp_path / out), "--force"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=_file_size_cap(6000),  # noqa: PLW1509 - no threads start before the exec
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    # EFBIG from Python's writes; numpy's tofile reports a short write without an errno
    assert done.stderr.startswith(f"error: {tmp_path / out}: ") and done.stderr.count("\n") == 1
    assert "the file is too large" in done.stderr or "could not write it whole" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out, side])  # no temp file left
    assert (tmp_path / out).read_text() == "old data" and (tmp_path / side).read_text() == "old meta"


@pytest.mark.parametrize("what", ["result", "sidecar file", "sidecar folder"])
def test_an_existing_output_or_sidecar_is_named_as_it_is(tmp_path, capsys, what):
    """``histogram -o OUT.csv`` writes OUT.csv and OUT.json: whichever is there already is the
    one the refusal names (a sidecar in the way was reported as "OUT.csv exists" when OUT.csv
    was not there), and nothing is written."""
    trace = small_trace(tmp_path / "t.npz")
    out = tmp_path / "h.csv"
    there = out if what == "result" else out.with_suffix(".json")
    if what == "sidecar folder":
        there.mkdir()
    else:
        there.write_text("keep me")
    rc, _, err = run_main(capsys, ["histogram", str(trace), "-o", str(out)])
    assert rc == 2
    named = f"{out}" if what == "result" else f"{out}'s sidecar {there}"
    assert one_error(err) == f"error: -o: {named} exists (pass --force to replace it)"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["t.npz", there.name])
    if what != "sidecar folder":
        assert there.read_text() == "keep me"


def test_ctrl_c_in_a_serial_sweep_says_what_it_kept_and_the_rerun_resumes(tmp_path):
    """A serial sweep stopped by Ctrl-C saves the points it finished (by design: a rerun resumes)
    and exits 130 with one line saying how many it kept and where (it said nothing)."""
    import re

    import pandas as pd

    out = tmp_path / "grid.parquet"
    argv = ["sweep", "data/sweeps/example-fit-routing.toml", "-o", str(out)]
    _, err = _ctrl_c_after_first_progress(argv, tmp_path / "memo")  # every point ~0.7 s uncached
    assert "Traceback" not in err and err.count("error:") == 1, err
    said = re.search(
        rf"error: interrupted: (\d+) of the 12 points to evaluate are kept in {re.escape(str(out))} "
        r"\(run the same command again to resume\)\n$",
        err,
    )
    assert said, err
    kept = int(said.group(1))
    assert len(pd.read_parquet(out)) == kept < 12
    rerun = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", *argv, "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert (summary["skipped"], summary["evaluated"]) == (kept, 12 - kept)
