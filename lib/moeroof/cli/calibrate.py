"""``moeroof calibrate``: measure this box (disk reads bypassing the page cache, page-cached
reads, memory copy, float32 FLOP/s, and the engine overhead of the suite's own numpy decode
loop) into a witnessed hardware TOML in the presets schema.

::

    moeroof calibrate [--output calibrated.toml] [--file-mib 2048] [--seconds 30] [--scratch-dir D]
                      [--no-engine] [--format table|json|csv] [--report-output FILE]

The measurements are :func:`moeroof.measure.calibrate.calibrate`; scratch files are removed on
every exit, and an interrupted run ends with one ``error: interrupted`` line and status 130.
``--output`` is the TOML; the printed report goes to stdout or ``--report-output FILE``
(``--format csv``: one row per measured quantity, SI units).
"""

from __future__ import annotations

import argparse
from typing import Any

from moeroof.cli.flags import Count, Real, UsageError, add_default, add_read_arguments, add_seed, flags_named
from moeroof.cli.output import add_output_arguments, check_output_file, emit, fmt, interrupted, jsonable, spelled, table
from moeroof.core.limits import MAX_GIB

#: the time budget ``--seconds`` may ask for (an hour at most: the run is not meant to soak)
SECONDS_RANGE = (0.1, 3600.0)
#: a size in MiB (--file-mib, --mem-mib): disk and memory are checked when the run starts
MIB = Real(min=0.0, max=MAX_GIB * 2**10, open_low=True, unit="MiB")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="measure this box (disk reads bypassing the page cache, memory, float32 FLOP/s) into a hardware TOML",
        description=(
            "Measure random and sequential read bandwidth of a scratch file at 128 KiB to 16 MiB "
            "reads (O_DIRECT, or posix_fadvise DONTNEED where O_DIRECT is refused), page-cached "
            "reads, memory copy bandwidth, float32 matmul FLOP/s, and the per-step and "
            "per-agent-token overhead of moeroof bench's own numpy decode loop (the engine terms); "
            "write them as a witnessed hardware TOML (presets schema). Scratch files are removed "
            "on every exit."
        ),
    )
    p.add_argument(
        "-o",
        "--output",
        default="calibrated.toml",
        help="hardware TOML to write, atomically (default calibrated.toml); the printed report goes to --report-output",
    )
    p.add_argument("--name", help="preset name in the TOML (default calibrated-DATE)")
    add_default(p, "--file-mib", "2048", "scratch file size in MiB", type=MIB)
    p.add_argument(
        "--seconds",
        default="30",
        type=Real(min=SECONDS_RANGE[0], max=SECONDS_RANGE[1]),
        help="time budget of the measurements in seconds, 0.1 to 3600 (default 30; writing the file comes on top)",
    )
    add_default(p, "--mem-mib", "256", "array size of the memory-copy measurement in MiB", type=MIB)
    add_default(p, "--matmul-n", "2048", "matrix size n of the float32 n×n matmul", type=Count(min=1))
    add_read_arguments(p, "where the scratch file goes (default: the output's folder)")
    add_seed(p, "the random read offsets")
    p.add_argument(
        "--no-engine",
        action="store_true",
        help="do not time the bench's decode loop (engine_seconds_per_step/per_agent_token are then left out: "
        "assumed 0); the timing takes a fraction of a second",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_output_arguments(p, output=False)


def check_output(args: argparse.Namespace) -> None:
    """Refuse an ``--output`` that cannot take the TOML before anything is measured: a folder, a
    file in a folder that does not exist or cannot be written; and a ``--scratch-dir`` that
    cannot be written."""
    from pathlib import Path

    from moeroof.core import atomic

    check_output_file(args.output)
    if args.scratch_dir is not None:
        scratch = Path(args.scratch_dir).expanduser()
        if not scratch.is_dir():
            raise UsageError(f"--scratch-dir: {args.scratch_dir} is not a directory")
        try:
            atomic.check_writable_folder(scratch / "scratch")
        except OSError as exc:
            raise UsageError(f"--scratch-dir: cannot write in {args.scratch_dir} ({exc.strerror or exc})") from None


#: the library's parameter names in calibrate's errors → the flags that set them
CALIBRATE_FLAGS = {n: "--" + n.replace("_", "-") for n in ("seconds", "matmul_n", "scratch_dir", "output")}
CALIBRATE_FLAGS.update(file_bytes="--file-mib", mem_bytes="--mem-mib")


def calibrate_report(args: argparse.Namespace) -> dict[str, Any]:
    """Measure, write the hardware TOML (``--output``) and return every measurement as JSON."""
    from moeroof.measure.bench import measure_engine
    from moeroof.measure.calibrate import Progress, calibrate

    file_mib, seconds, mem_mib, matmul_n, seed = args.file_mib, args.seconds, args.mem_mib, args.matmul_n, args.seed
    check_output(args)
    command = {"--output": args.output, "--file-mib": f"{file_mib:g}", "--seconds": f"{seconds:g}"}
    command.update({"--mem-mib": f"{mem_mib:g}", "--matmul-n": matmul_n, "--read-path": args.read_path, "--seed": seed})
    command.update({"--scratch-dir": args.scratch_dir, "--name": args.name, "--no-engine": args.no_engine})
    try:
        cal = calibrate(
            args.output,
            file_bytes=int(file_mib * 2**20),
            seconds=seconds,
            mem_bytes=int(mem_mib * 2**20),
            matmul_n=matmul_n,
            scratch_dir=args.scratch_dir,
            read_path=args.read_path,
            name=args.name,
            seed=seed,
            engine=None if args.no_engine else lambda: measure_engine(seed=seed),
            command=spelled(["moeroof", "calibrate"], command.items()),
            progress=Progress("calibrate", enabled=not args.quiet),
        )
    except ValueError as err:  # a size refused (ResourceError among them): named as the flags that set it
        raise flags_named(err, CALIBRATE_FLAGS) from None
    except OSError as exc:
        raise UsageError(f"calibrate: {exc}") from None
    return jsonable(cal.to_dict())


def print_calibrate(rep: dict[str, Any]) -> None:
    print(f"calibrated {rep['name']} → {rep['output']}  ({rep['date']}, witnessed)")
    print(f"read path: {rep['read_path']} ({rep['read_method']})")
    random, sequential = rep["ssd_random"], rep["ssd_sequential"]
    rows = [
        [f"{size / 2**10:g} KiB" if size < 2**20 else f"{size / 2**20:g} MiB", fmt(r / 1e9, 3), fmt(s / 1e9, 3)]
        for size, r, s in zip(random["read_size_bytes"], random["bytes_per_s"], sequential["bytes_per_s"])
    ]
    print(table(["read size", "random GB/s", "sequential GB/s"], rows, ">>>"))
    print(
        f"page-cached reads: {rep['page_cache_bytes_per_s'] / 1e9:.2f} GB/s at {rep['page_cache_read_size_bytes'] / 2**20:g} MiB"
    )
    print(
        f"memory copy: {rep['bw_mem_bytes_per_s'] / 1e9:.2f} GB/s (read + write)   float32 matmul: {rep['flops_per_s'] / 1e9:.1f} GFLOP/s"
    )
    print(
        f"RAM {rep['ram_bytes'] / 2**30:.2f} GiB, OS reserve {rep['os_reserve_bytes'] / 2**30:.2f} GiB; took {rep['wall_seconds']:.1f} s"
    )
    eng = rep.get("engine")
    if eng is not None:
        print(
            f"engine (moeroof bench's numpy decode loop, {eng['mode']}, this box): "
            f"{eng['engine_seconds_per_step'] * 1e6:.1f} us per step + {eng['engine_seconds_per_agent_token'] * 1e6:.1f} us "
            f"per agent-token (least squares over B = {', '.join(map(str, eng['batch']))}, "
            f"rms residual {eng['rms_residual_seconds'] * 1e6:.1f} us)"
        )
        for note in eng["notes"]:
            print(f"engine note: {note}")
    else:
        print("engine terms not measured (--no-engine): left out of the TOML, assumed 0")
    for note in rep["notes"]:
        print(f"note: {note}")


def calibrate_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per measured quantity (``read_size_bytes`` for the read curves),
    SI units named in the ``unit`` column."""
    curves = [(kind, rep[kind]) for kind in ("ssd_random", "ssd_sequential")]
    rows = [[k, size, bw, "bytes/s"] for k, c in curves for size, bw in zip(c["read_size_bytes"], c["bytes_per_s"])]
    rows.append(["page_cache", rep["page_cache_read_size_bytes"], rep["page_cache_bytes_per_s"], "bytes/s"])
    rows.append(["bw_mem", None, rep["bw_mem_bytes_per_s"], "bytes/s"])
    rows.append(["flops", None, rep["flops_per_s"], "FLOP/s"])
    rows.append(["ram", None, rep["ram_bytes"], "bytes"])
    rows.append(["os_reserve", None, rep["os_reserve_bytes"], "bytes"])
    eng = rep.get("engine")
    if eng is not None:
        rows.append(["engine_per_step", None, eng["engine_seconds_per_step"], "s"])
        rows.append(["engine_per_agent_token", None, eng["engine_seconds_per_agent_token"], "s"])
    return ["quantity", "read_size_bytes", "value", "unit"], rows


def run(args: argparse.Namespace) -> int:
    try:
        rep = calibrate_report(args)
    except KeyboardInterrupt:
        return interrupted()
    return emit(rep, args, print_calibrate, csv_table=calibrate_csv)
