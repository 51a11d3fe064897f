"""Memory per request of the big-trace commands.

Each command runs as its own process on two synthetic traces (``benchmarks/make_big_trace.py``, 80
layers × 256 experts, 32 streams, top-8) and its peak resident set is read by a fresh wrapper
process (``benchmarks/memory.py``'s ``measure``). What one more request costs, (peak₂ − peak₁) /
(requests₂ − requests₁), leaves the interpreter's, numpy's and the C library's fixed cost out; an earlier
audit measured ~36 bytes a request (3.7 GB at 10^8, Belady 5.2 GB) before the compact request
lists. Asserted: at most 12 bytes a request at the margin and, extrapolated to 10^8
requests, under 4 GiB. The traces are small (4·10^6 and 1.2·10^7 requests: both past
the 256 steps ``union`` reads at a time, whose buffers would otherwise count as growth), so the
margin is measured over ~64 MB of requests: page-size noise of a few MB moves it by ~1 byte.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import make_big_trace  # noqa: E402
import memory  # noqa: E402

pytestmark = pytest.mark.slow

SIZES = (4e6, 1.2e7)
CHECKED = ("cache-lru", "cache-belady", "cache-arc", "mrc", "union")


@pytest.fixture(scope="module")
def peaks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("memory")
    out = {}
    for n in SIZES:
        trace = folder / f"t{n:.0e}.npy".replace("+", "")
        make_big_trace.make(trace, n)
        requests = memory.count_requests(trace)
        cmds = memory.commands(trace)
        out[n] = (requests, {name: memory.measure(cmds[name]) for name in CHECKED})
    return out


@pytest.mark.parametrize("name", CHECKED)
def test_bytes_per_request_at_the_margin(peaks, name):
    (r1, small), (r2, big) = peaks[SIZES[0]], peaks[SIZES[1]]
    for run in (small[name], big[name]):
        assert run["rc"] == 0, run["stderr"]
    margin = (big[name]["peak_mib"] - small[name]["peak_mib"]) * 2**20 / (r2 - r1)
    assert margin <= 12.0, f"{name}: {margin:.1f} bytes a request at the margin"
    at_1e8 = big[name]["peak_mib"] * 2**20 + max(margin, 0.0) * (1e8 - r2)
    assert at_1e8 < 4 * 2**30, f"{name}: {at_1e8 / 2**30:.2f} GiB extrapolated to 10^8 requests"
