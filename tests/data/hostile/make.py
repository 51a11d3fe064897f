"""Write the crafted hostile inputs of tests/test_fuzz.py: ``python tests/data/hostile/make.py``.

Each file is small; what makes it hostile is what it declares. The script is the source of
truth: the committed files are its output, byte for byte (tests/test_fuzz.py checks that).
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GOOD_TRACE_META = {"model": "hostile", "experts": 8, "top_k": 2, "source": "tests/data/hostile/make.py"}


def _sidecar(meta: dict) -> str:
    return json.dumps({"model": "hostile", "source": "tests/data/hostile/make.py", **meta}, sort_keys=True) + "\n"


def npy_header(shape: tuple[int, ...], descr: str) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def files() -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    # a header that asks for 1e6 × 1e6 × 4 × 8 int64 (about 232 PiB) over 64 bytes of data
    out["huge-header.npy"] = npy_header((10**6, 10**6, 4, 8), "<i8") + bytes(64)
    out["huge-header.json"] = json.dumps(GOOD_TRACE_META, sort_keys=True).encode() + b"\n"
    # an .npz whose topk member declares 2^20 × 2^20 × 64 × 8 int8 (1.46 TiB... and more) over 64 bytes
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        info = zipfile.ZipInfo("topk.npy", date_time=(2026, 1, 1, 0, 0, 0))
        z.writestr(info, npy_header((2**20, 2**20, 64, 8), "|i1") + bytes(64))
        info = zipfile.ZipInfo("meta.npy", date_time=(2026, 1, 1, 0, 0, 0))
        z.writestr(info, npy_bytes(np.array(json.dumps(GOOD_TRACE_META, sort_keys=True))))
    out["huge-member.npz"] = buf.getvalue()
    # a valid header for 4 × 2 × 2 × 2 int16 with only half the data (a copy cut short)
    full = npy_bytes(np.zeros((4, 2, 2, 2), dtype=np.int16))
    out["truncated.npy"] = full[: len(full) - 32]
    out["truncated.json"] = out["huge-header.json"]
    # histograms: the counts are plausible, the sidecar is not
    rows = "layer,expert,count\n0,0,5\n0,1,3\n0,2,2\n"
    deep = "[" * 50_000 + "]" * 50_000
    out["deep-sidecar.csv"] = rows.encode()
    out["deep-sidecar.json"] = (
        '{"model": "hostile", "experts": 4, "top_k": 1, "layers": 1, "tokens": 10, "layers_summed": false, '
        f'"source": {deep}}}\n'
    ).encode()
    # one row of counts against 1000 tokens × K = 2: the counts say 0.5 % of the picks were recorded
    out["one-row.csv"] = b"layer,expert,count\n0,0,1\n"
    out["one-row.json"] = _sidecar(
        {"experts": 8, "top_k": 2, "layers": 1, "tokens": 1000, "layers_summed": False}
    ).encode()
    out["header-only.csv"] = b"layer,expert,count\n"
    out["header-only.json"] = out["one-row.json"]
    out["all-zeros.csv"] = b"layer,expert,count\n0,0,0\n0,1,0\n"
    out["all-zeros.json"] = out["one-row.json"]
    # tokens = 2^62: every product with it overflows int64
    out["tokens-2-62.csv"] = b"layer,expert,count\n0,0,4\n0,1,4\n"
    out["tokens-2-62.json"] = _sidecar(
        {"experts": 8, "top_k": 2, "layers": 1, "tokens": 2**62, "layers_summed": False}
    ).encode()
    # experts × layers = 10^12 × 10^6 declared by the sidecar for a two-row histogram
    out["huge-dims.csv"] = b"layer,expert,count\n0,0,4\n0,1,4\n"
    out["huge-dims.json"] = _sidecar(
        {"experts": 10**12, "top_k": 2, "layers": 10**6, "tokens": 4, "layers_summed": False}
    ).encode()
    return out


def main() -> int:
    for name, data in files().items():
        (HERE / name).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
