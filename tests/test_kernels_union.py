"""The compiled kernel of moeroof.kernels.union held bit for bit to the numpy expression it
replaces, and power_sums (which uses it) to the power table it stands for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeroof.kernels import union as union_kernels
from moeroof.models.union import POWER_SPLIT, power_sums

# row lengths on both sides of numpy's pairwise blocks (fewer than 8, 8 accumulators up to 128,
# split in two beyond) and of the split's rounding to a multiple of 8
LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 136, 255, 256, 257, 300, 1000, 1031]


def numpy_product_sums(head, tails, rows):
    return np.stack([(head * tails[t]).sum(axis=-1) for t in rows]).reshape(len(rows), head.shape[0])


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("e", LENGTHS)
def test_product_sums_equals_numpy_bit_for_bit(e):
    rng = np.random.default_rng(e)
    m, t = 3, 4
    # products spanning many magnitudes, so that a different order of addition changes last bits
    head = rng.random((m, e)) * 10.0 ** rng.integers(-12, 12, size=(m, e))
    tails = rng.random((t, m, e))
    rows = rng.integers(0, t, size=9)
    np.testing.assert_array_equal(
        bits(union_kernels.product_sums(head, tails, rows)), bits(numpy_product_sums(head, tails, rows))
    )


def test_a_changed_order_of_addition_is_caught():
    # the check above can fail: summing the same products left to right gives other bits
    rng = np.random.default_rng(0)
    head = rng.random((1, 300)) * 10.0 ** rng.integers(-12, 12, size=(1, 300))
    tails = rng.random((1, 1, 300))
    sequential = 0.0
    for v in (head[0] * tails[0, 0]).tolist():
        sequential += v
    assert bits(np.array([sequential]))[0] != bits(union_kernels.product_sums(head, tails, [0]))[0, 0]


@settings(max_examples=60, deadline=None)
@given(
    e=st.integers(1, 600),
    m=st.integers(1, 4),
    t=st.integers(1, 5),
    n=st.integers(0, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_product_sums_property(e, m, t, n, seed):
    rng = np.random.default_rng(seed)
    head = rng.random((m, e)) ** rng.uniform(0.1, 30.0)
    tails = rng.random((t, m, e))
    rows = rng.integers(0, t, size=n)
    got = union_kernels.product_sums(head, tails, rows)
    assert got.shape == (n, m)
    if n:
        np.testing.assert_array_equal(bits(got), bits(numpy_product_sums(head, tails, rows)))


def test_product_sums_refuses_bad_rows_and_shapes():
    head, tails = np.ones((2, 5)), np.ones((3, 2, 5))
    with pytest.raises(IndexError):
        union_kernels.product_sums(head, tails, [3])
    with pytest.raises(IndexError):
        union_kernels.product_sums(head, tails, [-1])
    with pytest.raises(ValueError):
        union_kernels.product_sums(head, np.ones((3, 2, 4)), [0])


@pytest.mark.parametrize("e", [7, 128, 256, 257])
def test_power_sums_is_the_power_table_summed_as_numpy_sums(e):
    # the independent statement: S[..., j] = sum_i x_i^B_j; the split x^B = x^(m q) x^r rounds
    # differently from x^B itself, so equality is to rounding, while the order of summation over E
    # is numpy's exactly (checked against the same split products summed by numpy)
    rng = np.random.default_rng(e)
    x = rng.random((2, 3, e))
    b = np.array([1, 2, 31, 32, 33, 64, 100, 1000, 4096])
    got = power_sums(x, b)
    direct = (x[..., None, :] ** b[:, None]).sum(axis=-1)
    np.testing.assert_allclose(got, direct, rtol=1e-12, atol=1e-300)
    q, r = np.divmod(b, POWER_SPLIT)
    split = np.stack([(x ** float(POWER_SPLIT * qv) * x ** float(rv)).sum(axis=-1) for qv, rv in zip(q, r)], axis=-1)
    np.testing.assert_array_equal(bits(got), bits(split))


def test_power_sums_of_one_batch_size_is_the_same_in_any_grid():
    rng = np.random.default_rng(3)
    x = rng.random((4, 256))
    alone = power_sums(x, np.array([777]))[:, 0]
    in_grid = power_sums(x, np.arange(1, 2049))[:, 776]
    np.testing.assert_array_equal(bits(alone), bits(in_grid))
