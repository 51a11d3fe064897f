"""``moeroof calibrate`` on tiny sizes: the TOML it writes, the read paths, bad flags refused
before any work, and scratch files that never outlive the run (interrupts included)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import moeroof.measure.calibrate as cal_mod
from moeroof.cli import main
from moeroof.data.presets import HARDWARE_FIELDS, load_hardware
from moeroof.measure.calibrate import (
    READ_SIZES_BYTES,
    DeviceFile,
    ResourceError,
    aligned_buffer,
    calibrate,
    fit_engine_line,
    measure_reads,
    scratch_space,
    write_scratch_file,
)

TINY = dict(file_bytes=1 << 20, seconds=0.3, mem_bytes=4 << 20, matmul_n=64)


def _empty(d: Path) -> bool:
    return list(d.iterdir()) == []


def test_calibrate_writes_a_witnessed_hardware_toml(tmp_path, rng):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "hw.toml"
    c = calibrate(out, scratch_dir=scratch, name="tiny-box", **TINY)
    hw = load_hardware(out)
    assert hw.name == "tiny-box"
    required = [k for k, (_, req) in HARDWARE_FIELDS.items() if req] + ["os_reserve_bytes"]
    for key in required:
        assert hw.provenance[key] == "witnessed", key
        assert c.date in hw.sources[key] and "moeroof calibrate" in hw.sources[key]
    # read sizes from 128 KiB up to what the 1 MiB file holds, each measured
    assert hw.ssd_read_size_bytes == tuple(float(s) for s in READ_SIZES_BYTES if s <= 1 << 20)
    assert all(b > 0 for b in hw.bw_ssd_bytes_per_s)
    assert hw.bw_mem_bytes_per_s > 0 and hw.flops_per_s > 0 and hw.ram_bytes > hw.os_reserve_bytes >= 0
    text = out.read_text()
    assert f"read path: {c.read_path}" in text and c.read_path in ("o_direct", "fadvise")
    assert "page-cached reads" in text and "sequential reads" in text
    assert any("above the 1 MiB scratch file" in n for n in c.notes)
    assert _empty(scratch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hw.toml", "scratch"]  # no temp file left beside it


def test_default_scratch_goes_beside_the_output_and_is_removed(tmp_path):
    calibrate(tmp_path / "hw.toml", **TINY)
    assert [p.name for p in tmp_path.iterdir()] == ["hw.toml"]


def test_fadvise_path_is_said_in_the_output(tmp_path):
    out = tmp_path / "hw.toml"
    c = calibrate(out, read_path="fadvise", **TINY)
    assert c.read_path == "fadvise"
    assert "read path: fadvise" in out.read_text()
    assert any("posix_fadvise DONTNEED" in n for n in c.notes)


def test_o_direct_refused_falls_back_to_fadvise(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(8192))
    real_open = os.open

    def refusing_open(p, flags, *a, **k):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(p, flags, *a, **k)

    monkeypatch.setattr(os, "open", refusing_open)
    with DeviceFile(path, "auto") as dev:
        assert dev.read_path == "fadvise" and "O_DIRECT refused" in dev.method
        buf = aligned_buffer(4096)
        assert dev.read_into(buf, 4096, 4096) == 4096
        buf.close()
    with pytest.raises(ResourceError, match="refuses O_DIRECT"):
        DeviceFile(path, "o_direct")


def test_measure_reads_counts_bytes_and_stays_in_the_file(tmp_path, rng):
    path = tmp_path / "f.bin"
    write_scratch_file(path, 1 << 20, rng)
    assert path.stat().st_size == 1 << 20
    with DeviceFile(path) as dev:
        for pattern in ("random", "sequential"):
            cell = measure_reads(dev, 1 << 20, 256 << 10, pattern, 0.05, rng)
            assert cell.reads >= 2 and cell.bytes == cell.reads * (256 << 10)
            assert cell.bytes_per_s > 0


def test_scratch_space_is_removed_after_keyboard_interrupt(tmp_path):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(KeyboardInterrupt):
        with scratch_space(tmp_path) as d:
            (d / "x.bin").write_bytes(b"x" * 4096)
            raise KeyboardInterrupt
    assert _empty(tmp_path)
    assert {sig: signal.getsignal(sig) for sig in before} == before  # handlers restored


def test_calibrate_interrupted_mid_run_leaves_no_scratch_and_keeps_the_old_output(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "hw.toml"
    out.write_text("old\n")

    def interrupted(*a, **k):
        assert len(list(scratch.iterdir())) == 1  # the scratch folder exists while measuring
        raise KeyboardInterrupt

    monkeypatch.setattr(cal_mod, "measure_reads", interrupted)
    with pytest.raises(KeyboardInterrupt):
        calibrate(out, scratch_dir=scratch, **TINY)
    assert _empty(scratch)
    assert out.read_text() == "old\n"
    # through the CLI: one error line, status 130, nothing left
    rc = main(
        [
            "calibrate",
            "--output",
            str(out),
            "--file-mib",
            "1",
            "--seconds",
            "0.2",
            "--mem-mib",
            "4",
            "--matmul-n",
            "32",
            "--scratch-dir",
            str(scratch),
            "--quiet",
        ]
    )
    assert rc == 130 and _empty(scratch) and out.read_text() == "old\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_removes_the_scratch_files(tmp_path, sig):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "hw.toml"
    cmd = [
        sys.executable,
        "-m",
        "moeroof.cli",
        "calibrate",
        "--output",
        str(out),
        "--file-mib",
        "64",
        "--seconds",
        "60",
        "--mem-mib",
        "4",
        "--matmul-n",
        "32",
        "--scratch-dir",
        str(scratch),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        # wait until the scratch file exists (the run is measuring), then signal
        while not any(d.glob("*.bin") for d in scratch.iterdir()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the scratch file never appeared"
            time.sleep(0.02)
        time.sleep(0.3)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "error: interrupted" in err and "Traceback" not in err
    assert _empty(scratch)
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, message, named",
    [
        (["--file-mib", "100000000"], "of scratch in", "--file-mib"),
        # a small scratch file: the memory check is the one under test, not the disk's free space
        (["--file-mib", "1", "--mem-mib", "100000000"], "of memory but only", "--mem-mib/--matmul-n"),
        (["--file-mib", "1", "--matmul-n", "10000000"], "of memory but only", "--mem-mib/--matmul-n"),
        (["--seconds", "0"], "--seconds", "--seconds"),
        (["--file-mib", "abc"], "--file-mib", "--file-mib"),
        (["--file-mib", "0.01"], "at least one 128 KiB read", "--file-mib"),
    ],
)
def test_bad_flags_are_refused_before_any_work(tmp_path, capsys, flags, message, named):
    """Refused before anything is written, naming the flags the user typed (the library's
    parameter names, mem_bytes/matmul_n, file_bytes, were said before)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "hw.toml"
    rc = main(["calibrate", "--output", str(out), "--scratch-dir", str(scratch), "--quiet", *flags])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"error: {named}: ") and message in err and len(err.strip().splitlines()) == 1
    assert _empty(scratch) and not out.exists()


def test_missing_scratch_dir_is_an_error(tmp_path, capsys):
    rc = main(["calibrate", "--output", str(tmp_path / "hw.toml"), "--scratch-dir", str(tmp_path / "nope"), "--quiet"])
    assert rc == 2 and "is not a directory" in capsys.readouterr().err


def test_cli_json_and_table(tmp_path, capsys):
    import json

    out = tmp_path / "hw.toml"
    base = [
        "calibrate",
        "--output",
        str(out),
        "--file-mib",
        "1",
        "--seconds",
        "0.2",
        "--mem-mib",
        "4",
        "--matmul-n",
        "32",
        "--quiet",
    ]
    assert main(base + ["--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["provenance"] == "witnessed" and rep["read_path"] in ("o_direct", "fadvise")
    assert rep["command"].startswith("moeroof calibrate --output")
    assert len(rep["ssd_random"]["bytes_per_s"]) == len(rep["ssd_sequential"]["bytes_per_s"]) == 4
    assert load_hardware(out).name.startswith("calibrated-")
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "read path:" in text and "random GB/s" in text and "float32 matmul" in text


# ----------------------------------------------------------------------------- engine terms


def test_fit_engine_line_recovers_known_c0_and_c1_from_a_noisy_line(rng):
    # t(B) = c0 + c1·B with known values plus 1 µs noise (about the residual seen on a quiet box)
    c0, c1 = 30e-6, 65e-6
    b = np.repeat([1, 2, 4, 8, 16, 32], 5)
    t = c0 + c1 * b + rng.normal(0.0, 1e-6, size=b.size)
    f0, f1, rms = fit_engine_line(b, t)
    # independent check: the textbook closed form of ordinary least squares
    slope = np.sum((b - b.mean()) * (t - t.mean())) / np.sum((b - b.mean()) ** 2)
    assert f1 == pytest.approx(slope, rel=1e-9) and f0 == pytest.approx(t.mean() - slope * b.mean(), rel=1e-9)
    # and the truth, within a few standard errors (σ_c1 ≈ 1e-6 / sqrt(Σ(b − b̄)²) ≈ 1.8e-8)
    assert f1 == pytest.approx(c1, abs=1e-7) and f0 == pytest.approx(c0, abs=1.5e-6)
    assert 0.5e-6 < rms < 1.5e-6
    # noise-free: exact
    e0, e1, erms = fit_engine_line([1, 4, 16], [c0 + c1 * x for x in (1, 4, 16)])
    assert (e0, e1) == (pytest.approx(c0, rel=1e-12), pytest.approx(c1, rel=1e-12)) and erms < 1e-15


def test_fit_engine_line_keeps_both_terms_non_negative():
    # a line through a negative intercept: the best fit with c0 = 0 instead
    b = np.array([1.0, 2.0, 4.0, 8.0])
    c0, c1, _ = fit_engine_line(b, 2.0 * b - 1.0)
    assert c0 == 0.0 and c1 == pytest.approx(float(b @ (2 * b - 1) / (b @ b)))
    # a falling line: constant
    c0, c1, _ = fit_engine_line(b, 10.0 - b)
    assert c1 == 0.0 and c0 == pytest.approx(np.mean(10.0 - b))
    with pytest.raises(ValueError, match="two different batch sizes"):
        fit_engine_line([4, 4], [1.0, 2.0])


def _tiny_engine():
    from moeroof.measure.bench import measure_engine

    return measure_engine(repeats=3)


def test_calibrate_writes_the_engine_terms_witnessed(tmp_path):
    out = tmp_path / "hw.toml"
    c = calibrate(out, engine=_tiny_engine, **TINY)
    hw = load_hardware(out)
    for key, value in (
        ("engine_seconds_per_step", c.engine.seconds_per_step),
        ("engine_seconds_per_agent_token", c.engine.seconds_per_agent_token),
    ):
        assert hw.provenance[key] == "witnessed", key
        assert getattr(hw, key) == pytest.approx(value, rel=1e-12) and value >= 0
        src = hw.sources[key]
        assert c.date in src and "numpy decode loop" in src and "t = c0 + c1*B" in src and "this box" in src
    assert c.hardware().engine_seconds_per_step == hw.engine_seconds_per_step
    assert "engine fit: t = " in out.read_text()
    d = c.to_dict()["engine"]
    assert d["batch"] == [1, 2, 4, 8, 16, 32] and len(d["step_seconds"]) == 6 and "coalesced" in d["other_modes"]
    # without the engine callable the fields are left out: 0, not witnessed
    plain = load_hardware(calibrate(tmp_path / "plain.toml", **TINY).output)
    assert plain.engine_seconds_per_step == 0.0 and plain.provenance.get("engine_seconds_per_step") != "witnessed"


def test_calibrate_interrupted_while_timing_the_engine_keeps_the_old_output(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "hw.toml"
    out.write_text("old\n")

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibrate(out, scratch_dir=scratch, engine=interrupted, **TINY)
    assert _empty(scratch) and out.read_text() == "old\n"


def test_cli_measures_the_engine_unless_told_not_to(tmp_path, capsys):
    import json

    out = tmp_path / "hw.toml"
    base = ["calibrate", "--output", str(out), "--file-mib", "1", "--seconds", "0.2", "--mem-mib", "4"]
    base += ["--matmul-n", "32", "--quiet", "--json"]
    assert main(base) == 0
    rep = json.loads(capsys.readouterr().out)
    # measured (a fitted slope, ≥ 0: on a loaded box it can come out 0, so its size is not asserted)
    assert rep["engine"]["engine_seconds_per_agent_token"] >= 0 and rep["engine"]["mode"] == "uncoalesced"
    assert load_hardware(out).provenance["engine_seconds_per_step"] == "witnessed"
    assert main(base + ["--no-engine"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["engine"] is None and rep["command"].endswith("--no-engine")
    assert load_hardware(out).engine_seconds_per_step == 0.0
    assert main(base[:-1]) == 0
    assert "us per agent-token" in capsys.readouterr().out


#: an address-space limit the sizes below exceed at half of it, while half of MemAvailable holds them
_CAP_BYTES = 3 << 30


@pytest.mark.parametrize(
    "argv, named",
    [
        (["calibrate", "--matmul-n", "14000", "--seconds", "0.1", "--no-engine", "--file-mib", "1"], "--matmul-n"),
        (["calibrate", "--mem-mib", "1200", "--seconds", "0.1", "--no-engine", "--file-mib", "1"], "--mem-mib"),
        (["bench", "--steps", "8000", "--experts", "8", "--layers", "2"], "--steps"),
    ],
    ids=["calibrate-matmul-n", "calibrate-mem-mib", "bench-steps"],
)
def test_memory_checks_hold_under_an_address_space_limit(tmp_path, argv, named):
    """calibrate's and bench's memory check is against what an address-space limit (``ulimit -v``)
    leaves, not ``MemAvailable`` alone: under a 3 GB limit, sizes that need about 2-2.5 GB are
    refused before anything is written, naming their parameter (they passed the check, measured,
    and ran out of memory: 'error: out of memory (Unable to allocate …)', no parameter named)."""
    import resource

    if cal_mod.meminfo()["available"] * cal_mod.MEMORY_SHARE < 2.6 * (1 << 30):
        pytest.skip("this machine's MemAvailable refuses these sizes without the limit")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (_CAP_BYTES, _CAP_BYTES))

    out = tmp_path / "cal.toml"
    extra = ["-o", str(out)] if argv[0] == "calibrate" else ["--scratch-dir", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", "moeroof.cli", *argv, *extra],
        capture_output=True, text=True, preexec_fn=cap, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-600:]
    assert named in lines[0] and "available" in lines[0], lines[0]
    assert not out.exists() and not any(p.name.startswith(".moeroof-scratch") for p in tmp_path.iterdir())
