"""moeroof.core.units: the one conversion module — round trips, binary vs decimal, bad units."""

from __future__ import annotations

import numpy as np
import pytest

from moeroof.core import units
from moeroof.core.units import UNITS, dimension_of, from_si, to_si


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_round_trip_scalar(unit):
    for value in (0.0, 1.0, 3.5, 1234.5678):
        si = to_si(value, unit)
        assert isinstance(si, float)
        assert from_si(si, unit) == pytest.approx(value, rel=1e-15, abs=0.0)


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_round_trip_array(unit):
    values = [0.028, 4.13, 19.0]
    si = to_si(values, unit)
    assert isinstance(si, np.ndarray) and si.shape == (3,)
    np.testing.assert_allclose(from_si(si, unit), values, rtol=1e-15)


def test_binary_and_decimal_prefixes():
    assert to_si(1, "GiB") / to_si(1, "GB") == pytest.approx(1.073741824, rel=1e-15)
    assert to_si(1, "TiB") / to_si(1, "TB") == pytest.approx(1.099511627776, rel=1e-15)
    assert to_si(1, "KiB") == 1024.0 and to_si(1, "kB") == 1000.0 and to_si(1, "KB") == 1000.0
    assert to_si(1, "MiB") == 1024.0**2 and to_si(1, "MB") == 1e6
    assert to_si(1, "GiB/s") / to_si(1, "GB/s") == pytest.approx(1.073741824)
    assert units.GiB == 2**30 and units.GB == 1e9 and units.MiB == 2**20 and units.TB == 1e12


def test_si_factors():
    assert to_si(4.13, "GB/s") == pytest.approx(4.13e9)
    assert to_si(989, "TFLOP/s") == pytest.approx(989e12)
    assert to_si(1, "PFLOP/s") == 1e15
    assert to_si(80, "GFLOP") == pytest.approx(80e9)
    assert to_si(17, "MFLOP") == pytest.approx(17e6)
    assert to_si(250, "ms") == pytest.approx(0.25)
    assert to_si(15, "us") == pytest.approx(15e-6)
    assert to_si(1, "ns") == pytest.approx(1e-9)


def test_dimensions():
    assert dimension_of("GiB") == "bytes"
    assert dimension_of("GB/s") == "bytes_per_s"
    assert dimension_of("TFLOP/s") == "flop_per_s"
    assert dimension_of("GFLOP") == "flop"
    assert dimension_of("ms") == "seconds"
    assert dimension_of("1") == "count"
    assert dimension_of("tok/s") == "per_s"


@pytest.mark.parametrize("bad", ["Gb", "gib", "GiB/h", "", "bytes", "TFLOPS"])
def test_unknown_unit_raises(bad):
    with pytest.raises(ValueError, match="unknown unit"):
        dimension_of(bad)
    with pytest.raises(ValueError, match="unknown unit"):
        to_si(1.0, bad)
    with pytest.raises(ValueError, match="unknown unit"):
        from_si(1.0, bad)


def test_edge_helpers():
    assert units.gib(2**30) == 1.0
    assert units.gb_per_s(4.13e9) == pytest.approx(4.13)
    np.testing.assert_allclose(units.gib([2**30, 2**31]), [1.0, 2.0])
