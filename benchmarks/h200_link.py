"""Measure what the h200-pcie-offload preset needs on a real GPU: host→device copy bandwidth
against transfer size (the "SSD" curve of an engine that streams experts from host memory),
device memory bandwidth and the dense bf16 matrix rate.

Run on the device machine (not in CI; it needs CUDA and PyTorch):

    python3 benchmarks/h200_link.py --out "$OUT/h200_link.json"

Each point is the median of several timed repeats after warm-ups, timed with CUDA events.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    sizes = [2**k for k in range(12, 31, 2)]  # 4 KiB … 1 GiB

    def timed(fn, repeats):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        out = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        return statistics.median(out)

    h2d = []
    for pinned in (True, False):
        for n in sizes:
            host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
            host.fill_(1)
            gpu = torch.empty(n, dtype=torch.uint8, device=dev)
            reps = args.repeats if n < 2**28 else max(5, args.repeats // 4)
            t = timed(lambda gpu=gpu, host=host, pinned=pinned: gpu.copy_(host, non_blocking=pinned), reps)
            h2d.append({"pinned": pinned, "bytes": n, "seconds": t, "bytes_per_s": n / t})
            del host, gpu
    n = 2**31
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    t = timed(lambda a=a, b=b: b.copy_(a), 10)
    d2d = {"bytes": n, "seconds": t, "bytes_per_s_read_plus_write": 2 * n / t}
    del a, b
    m = 8192
    x = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    t = timed(lambda: x @ y, 10)
    gemm = {"m": m, "seconds": t, "flop_per_s": 2 * m**3 / t}
    result = {
        "what": "h200-pcie-offload preset measurements (benchmarks/h200_link.py)",
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "h2d": h2d,
        "d2d": d2d,
        "gemm_bf16": gemm,
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    for row in h2d:
        print(f"h2d pinned={row['pinned']!s:5} {row['bytes']:>11} B  {row['bytes_per_s'] / 1e9:8.2f} GB/s")
    print(
        f"d2d {d2d['bytes_per_s_read_plus_write'] / 1e12:.2f} TB/s (read+write); gemm bf16 {gemm['flop_per_s'] / 1e12:.0f} TFLOP/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
