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

import pytest

import moeroof.witness.measure as cal_mod
from moeroof.cli import main
from moeroof.data.presets import HARDWARE_FIELDS, load_hardware
from moeroof.witness.measure import (
    READ_SIZES_BYTES,
    DeviceFile,
    ResourceError,
    aligned_buffer,
    calibrate,
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
    "flags, message",
    [
        (["--file-mib", "100000000"], "of scratch in"),
        (["--mem-mib", "100000000"], "of memory but only"),
        (["--matmul-n", "10000000"], "of memory but only"),
        (["--seconds", "0"], "--seconds"),
        (["--file-mib", "abc"], "--file-mib"),
        (["--file-mib", "0.01"], "at least one 128 KiB read"),
    ],
)
def test_bad_flags_are_refused_before_any_work(tmp_path, capsys, flags, message):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "hw.toml"
    rc = main(["calibrate", "--output", str(out), "--scratch-dir", str(scratch), "--quiet", *flags])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
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
