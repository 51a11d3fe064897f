"""moeroof.core helpers: atomic writes, seeded generators, bootstrap intervals, live-token masks."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from moeroof.core import atomic, masks, rng, stats

# ----------------------------------------------------------------------------- atomic


def test_atomic_writes_whole_files_with_a_readable_mode(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    assert atomic.write_text(target, "a\nb\n") == target
    assert target.read_bytes() == b"a\nb\n"
    assert stat.S_IMODE(target.stat().st_mode) == atomic.FILE_MODE
    atomic.write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    atomic.write_via(target, lambda fh: fh.write("x,y\r\n"), binary=False, newline="")
    assert target.read_bytes() == b"x,y\r\n"
    copy = atomic.copy_file(target, tmp_path / "copy.csv")
    assert copy.read_bytes() == b"x,y\r\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["copy.csv", "out.txt", "sub"]


@pytest.mark.parametrize("how", ["writer", "check"])
def test_atomic_write_that_fails_leaves_the_old_file_and_no_temp(tmp_path, how):
    target = tmp_path / "out.txt"
    target.write_text("old\n")

    def writer(fh):
        fh.write(b"half")
        if how == "writer":
            raise RuntimeError("disk full")

    def check(path):
        assert path.read_bytes() == b"half" and path.parent == tmp_path
        raise ValueError("not valid")

    with pytest.raises((RuntimeError, ValueError)):
        atomic.write_via(target, writer, check=check if how == "check" else None)
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


# ----------------------------------------------------------------------------- rng


def test_generators_are_the_streams_they_replace():
    def same(a, b):
        return np.array_equal(a.integers(0, 2**62, size=8), b.integers(0, 2**62, size=8))

    assert same(rng.generator(7), np.random.default_rng(7))
    assert same(rng.generator("deepseek-v3-like"), np.random.default_rng(sum(map(ord, "deepseek-v3-like"))))
    assert same(rng.generator(3, 8), np.random.default_rng([3, 8]))
    assert same(rng.generator(3, "a"), np.random.default_rng([3, 97]))
    assert not same(rng.generator(3, 8), rng.generator(3, 9))
    assert rng.seed_of("ab") == 97 + 98 and rng.seed_of(5) == 5
    with pytest.raises(ValueError, match="seed"):
        rng.generator(-1)


# ----------------------------------------------------------------------------- stats


def test_percentile_interval_is_what_the_folded_copies_computed():
    x = np.random.default_rng(0).normal(size=(200, 3))
    for level in (0.95, 0.9):
        alpha, q = (1.0 - level) / 2.0, 50.0 * (1.0 - level)  # union's and fit's spelling
        got = stats.percentile_interval(x, level)
        np.testing.assert_array_equal([got.low, got.high], np.quantile(x, [alpha, 1.0 - alpha], axis=0))
        np.testing.assert_array_equal([got.low, got.high], np.percentile(x, [q, 100.0 - q], axis=0))
        assert got.level == level and got.method == "percentile bootstrap, 200 replicates"
    x[0, 0] = np.nan
    q = 50.0 * (1.0 - 0.95)
    got = stats.percentile_interval(x, 0.95, ignore_nan=True)
    np.testing.assert_array_equal([got.low, got.high], np.nanpercentile(x, [q, 100.0 - q], axis=0))
    assert stats.tail_probabilities(0.95) == pytest.approx((0.025, 0.975))
    with pytest.raises(ValueError, match="level"):
        stats.tail_probabilities(1.0)


def test_percentile_interval_of_a_known_sample():
    """1..101: the linear 2.5 % and 97.5 % points are 3.5 and 98.5; two named tails are numpy's
    quantiles at exactly those probabilities (the 5–95 % bands), a 0.9 interval."""
    iv = stats.percentile_interval(np.arange(1.0, 102.0), 0.95)
    assert (iv.low, iv.high) == pytest.approx((3.5, 98.5))
    assert isinstance(iv.low, float) and isinstance(iv.high, float)
    x = np.random.default_rng(4).lognormal(size=(37, 5))
    band = stats.percentile_interval(x, (0.05, 0.95), resampling="draws")
    np.testing.assert_array_equal(band.low, np.quantile(x, 0.05, axis=0))
    np.testing.assert_array_equal(band.high, np.quantile(x, 0.95, axis=0))
    assert band.level == 0.9 and stats.confidence_of((0.05, 0.95)) == 0.9
    assert band.method == "percentile draws, 37 replicates"
    with pytest.raises(ValueError, match="tail"):
        stats.tail_probabilities((0.95, 0.05))


def test_basic_and_order_statistic_intervals():
    reps = np.arange(101, dtype=float)  # percentiles 2.5 and 97.5 are 2.5 and 97.5
    lo, hi = stats.basic_interval(60.0, reps, 0.95)
    assert (lo, hi) == pytest.approx((2 * 60 - 97.5, 2 * 60 - 2.5))
    with_inf = np.concatenate([reps, [np.inf] * 10, [np.nan]])
    iv = stats.order_statistic_interval(with_inf, 0.95)
    assert iv.low == 2.0 and iv.high == np.inf
    assert iv.contains(1e300) and not iv.contains(1.0)
    assert np.isnan(stats.order_statistic_interval([np.nan], 0.95).as_tuple()).all()


def test_interval_contains_and_entries():
    iv = stats.Interval(1.0, 3.0, 0.95, "by hand")
    assert iv.contains(1.0) and iv.contains(2.5) and iv.contains(3.0)
    assert not iv.contains(0.999) and not iv.contains(3.001) and not iv.contains(np.nan)
    assert isinstance(iv.contains(2.0), bool)
    assert iv.as_tuple() == (1.0, 3.0)
    low, high = iv
    assert (low, high) == (1.0, 3.0)
    assert not stats.Interval(np.nan, np.nan, 0.95, "none").contains(0.0)
    rows = stats.Interval(np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.5, 4.0]), 0.9, "per layer")
    assert rows.contains(np.array([0.5, 2.0, 4.0])).tolist() == [True, False, True]
    assert rows.contains(1.0).tolist() == [True, True, False]
    one = rows.at(2)
    assert one == stats.Interval(2.0, 4.0, 0.9, "per layer") and isinstance(one.low, float)
    clipped = rows.clip(0.5, 3.0)
    assert clipped.low.tolist() == [0.5, 1.0, 2.0] and clipped.high.tolist() == [1.0, 1.5, 3.0]
    with pytest.raises(ValueError, match="level"):
        stats.Interval(0.0, 1.0, 0.0, "no level")
    with pytest.raises(AttributeError):
        iv.low = 0.0  # frozen


def _same_state(a: np.random.Generator, b: np.random.Generator) -> bool:
    return a.bit_generator.state == b.bit_generator.state


def test_bootstrap_replicates_is_the_hand_written_loop_over_indices():
    """The helper draws the index rows exactly as the loops it replaced did (one call for all
    replicates), whatever the chunk, and leaves the generator where the loop left it."""
    x = np.random.default_rng(1).normal(size=(23, 4))
    hand, helper = np.random.default_rng(7), np.random.default_rng(7)
    idx = hand.integers(0, x.shape[0], size=(50, x.shape[0]))
    expected = np.concatenate([x[idx[i : i + 16]].mean(axis=1) for i in range(0, 50, 16)])
    for chunk in (None, 16, 7):
        helper = np.random.default_rng(7)
        got = stats.bootstrap_replicates(lambda rows: x[rows].mean(axis=1), 50, n=x.shape[0], rng=helper, chunk=chunk)
        assert got.shape == (50, 4)
        np.testing.assert_array_equal(got, expected)
        assert _same_state(hand, helper)


def test_bootstrap_replicates_blocks_is_the_hand_written_loop():
    """Blocks of 5 over 23 ordered units: per replicate ⌈23/5⌉ = 5 block starts, the last block cut
    at 23, drawn as each replicate is asked for."""
    steps, block, reps = 23, 5, 30
    y = np.random.default_rng(2).exponential(size=steps)
    hand, helper = np.random.default_rng(11), np.random.default_rng(11)
    nb = -(-steps // block)
    expected, lengths = [], []
    for _ in range(reps):
        pick = hand.integers(0, nb, size=nb) * block
        sel = np.concatenate([np.arange(s, min(s + block, steps)) for s in pick])
        lengths.append(sel.size)
        expected.append(y[sel].sum() / sel.size)
    seen = []

    def statistic(sel):
        seen.append(sel)
        return y[sel].sum() / sel.size

    got = stats.bootstrap_replicates(statistic, reps, n=steps, rng=helper, block=block)
    np.testing.assert_array_equal(got, expected)
    assert [s.size for s in seen] == lengths and all(s.max() < steps for s in seen)
    assert _same_state(hand, helper)


def test_bootstrap_replicates_parametric_draws():
    """A caller's own draw: one at a time, each just before its statistic (the refits of a
    parametric bootstrap replay in that order), or all at once (``batched``)."""
    calls = []

    def draw(b):
        calls.append(("draw", b))
        return np.random.default_rng(100 + b).normal(size=3)

    def statistic(sample):
        calls.append(("statistic", len(sample)))
        return sample.max()

    got = stats.bootstrap_replicates(statistic, 4, draw=draw)
    np.testing.assert_array_equal(got, [np.random.default_rng(100 + b).normal(size=3).max() for b in range(4)])
    assert calls == [c for b in range(4) for c in (("draw", b), ("statistic", 3))]
    # objects (a fitted knob set) come back as an object array, in order
    words = stats.bootstrap_replicates(lambda b: {"replicate": b}, 3, draw=lambda b: b)
    assert words.dtype == object and [w["replicate"] for w in words] == [0, 1, 2]
    # batched: one draw of every resample, the statistic over chunks of them
    gen = np.random.default_rng(5)
    batch = stats.bootstrap_replicates(
        lambda ys: ys.sum(axis=1), 9, draw=lambda r: gen.poisson(3.0, size=(r, 6)), batched=True, chunk=4
    )
    np.testing.assert_array_equal(batch, np.random.default_rng(5).poisson(3.0, size=(9, 6)).sum(axis=1))


def test_bootstrap_replicates_refuses_unclear_resamples():
    with pytest.raises(ValueError, match="either n"):
        stats.bootstrap_replicates(np.mean, 5)
    with pytest.raises(ValueError, match="either n"):
        stats.bootstrap_replicates(np.mean, 5, n=3, draw=lambda b: b, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        stats.bootstrap_replicates(np.mean, 5, n=3)
    with pytest.raises(ValueError, match="replicates"):
        stats.bootstrap_replicates(np.mean, 0, n=3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="block goes with n"):
        stats.bootstrap_replicates(np.mean, 5, draw=lambda b: b, block=2)
    with pytest.raises(ValueError, match="batched with draw"):
        stats.bootstrap_replicates(np.mean, 5, n=3, rng=np.random.default_rng(0), batched=True)


# ----------------------------------------------------------------------------- masks


def test_live_tokens_streams_and_partial_tokens():
    topk = np.array(
        [
            [[[0, 1], [2, 3]], [[-1, -1], [4, 5]], [[6, 7], [-1, -1]]],  # step 0: streams 1, 2 miss a layer
            [[[0, -1], [2, 3]], [[1, 2], [3, 4]], [[-1, -1], [-1, -1]]],  # step 1: stream 0 partly padded
        ]
    )
    assert masks.live_tokens(topk).tolist() == [
        [[True, True], [False, True], [True, False]],
        [[False, True], [True, True], [False, False]],
    ]
    assert masks.live_streams(topk).tolist() == [[True, False, False], [False, True, False]]
    assert np.argwhere(masks.partial_tokens(topk)).tolist() == [[1, 0, 0]]
    assert masks.ids_or(topk, 9)[0, 1, 0].tolist() == [9, 9]


def test_student_t_quantile_is_scipy_stats_ppf():
    """core.stats.student_t_quantile (scipy.special, no scipy.stats import) equals
    scipy.stats.t.ppf, and norm.ppf for dof 0, everywhere including q = 0, 1 and outside [0, 1]."""
    from scipy.stats import norm, t

    from moeroof.core.stats import student_t_quantile

    q = np.concatenate([np.linspace(-0.25, 1.25, 3001), [0.0, 1.0, 0.05, 0.95, 1e-300]])
    for dof in (1, 2.5, 6, 30.0, 1e4):
        np.testing.assert_array_equal(student_t_quantile(q, dof), t.ppf(q, dof))
    np.testing.assert_array_equal(student_t_quantile(q, 0), norm.ppf(q))


def test_exclusive_refuses_a_second_holder_then_frees_the_output(tmp_path):
    out = tmp_path / "run.parquet"
    with atomic.exclusive(out):
        assert (tmp_path / ".run.parquet.lock").exists()
        # flock binds an open file: a second open in this process is a second holder
        with pytest.raises(atomic.OutputBusyError, match="another run is writing it now") as exc:
            with atomic.exclusive(out, "another run"):
                pass
        assert exc.value.filename == str(out)
    assert list(tmp_path.iterdir()) == []  # the lock file is removed with the lock
    with atomic.exclusive(out):  # free again
        pass


def test_exclusive_takes_a_lock_file_its_holder_left_behind(tmp_path):
    # a holder killed with SIGKILL leaves the file; the kernel released its lock
    out = tmp_path / "o.parquet"
    (tmp_path / ".o.parquet.lock").write_text("")
    with atomic.exclusive(out):
        pass
    assert not (tmp_path / ".o.parquet.lock").exists()


def test_open_input_refuses_what_is_not_a_regular_file_without_blocking(tmp_path):
    import socket

    from moeroof.core.input_files import NotRegularFileError, check_regular, open_input, read_input_bytes

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # no writer: a plain open() would wait forever
    sock_path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        for path, kind in [
            (fifo, "a FIFO"),
            (sock_path, "a socket"),
            (type(tmp_path)(os.devnull), "a character device"),
        ]:
            with pytest.raises(NotRegularFileError) as exc:
                check_regular(path)
            assert str(exc.value) == f"not a regular file ({kind})" and exc.value.filename == str(path)
            if kind != "a socket":  # open() of a socket file is refused by the system itself
                with pytest.raises(NotRegularFileError, match=kind):
                    open_input(path)
    with pytest.raises(IsADirectoryError):
        open_input(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_input(tmp_path / "missing")
    good = tmp_path / "good.txt"
    good.write_text("\ufeffab\ncd\n", encoding="utf-8")
    with open_input(good, text=True, encoding="utf-8-sig") as fh:
        assert fh.read() == "ab\ncd\n"
    assert read_input_bytes(good, 4) == good.read_bytes()[:5]  # one byte over the limit tells it is longer


def _texts(folder):
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("fails", ["first", "second"])
def test_write_together_leaves_every_target_as_it_was_when_a_part_fails(tmp_path, fails):
    import errno

    a, b = tmp_path / "h.json", tmp_path / "h.csv"
    a.write_text("old meta")
    before = _texts(tmp_path)

    def full(fh):
        fh.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    parts = [
        atomic.Part(a, full if fails == "first" else lambda fh: fh.write(b"new meta")),
        atomic.Part(b, full if fails == "second" else lambda fh: fh.write(b"new rows")),
    ]
    with pytest.raises(OSError) as exc:
        atomic.write_together(parts)
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(a if fails == "first" else b)
    assert _texts(tmp_path) == before  # no new file, no temp file, the old one untouched


def test_write_together_puts_back_what_a_rename_had_replaced(tmp_path):
    # the second target is a folder: both parts stage fine, the second rename fails after the
    # first has replaced its file
    a, b = tmp_path / "t.json", tmp_path / "t.npy"
    a.write_text("old meta")
    b.mkdir()
    (b / "inside").write_text("x")
    with pytest.raises(OSError):
        atomic.write_together(
            [atomic.Part(a, lambda fh: fh.write(b"new")), atomic.Part(b, lambda fh: fh.write(b"ids"))]
        )
    assert a.read_text() == "old meta" and (b / "inside").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.npy"]
    written = atomic.write_together(
        [atomic.Part(a, lambda fh: fh.write(b"new")), atomic.Part(tmp_path / "u", lambda fh: fh.write(b"u"))]
    )
    assert written == [a, tmp_path / "u"] and a.read_text() == "new" and (tmp_path / "u").read_text() == "u"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.npy", "u"]  # no kept link left


def test_bootstrap_replicates_drawn_a_chunk_at_a_time_are_the_same_draws():
    def resamples(chunked: bool, chunk: int):
        rng = np.random.default_rng(11)
        probs = np.linspace(0.01, 0.9, 37).reshape(1, 37)
        return stats.bootstrap_replicates(
            lambda reps: reps.sum(axis=-1),
            23,
            draw=lambda r: rng.binomial(10, probs[None], size=(r, *probs.shape)),
            batched=True,
            chunk=chunk,
            draw_in_chunks=chunked,
        )

    whole = resamples(False, 23)
    for chunk in (1, 4, 22, 23, 50):
        np.testing.assert_array_equal(resamples(True, chunk), whole)


def test_a_cluster_share_interval_matches_the_enumerated_resamples():
    """Three clusters of unequal size: the 27 equally likely resamples enumerated by hand give the
    share's exact distribution; the bootstrap's ends lie between its 2 % and 8 % (92 % and 98 %)
    quantiles, and the share of clusters all inside is one."""
    import itertools

    from moeroof.core.stats import cluster_share_interval

    flags = [[True, True, True], [False, False], [True, False, True, True]]
    inside, rows = [sum(f) for f in flags], [len(f) for f in flags]
    exact = np.sort(
        [sum(inside[i] for i in pick) / sum(rows[i] for i in pick) for pick in itertools.product(range(3), repeat=3)]
    )

    def q(p):  # the discrete distribution's inverse CDF
        return exact[min(int(np.ceil(p * exact.size)) - 1, exact.size - 1)]

    got = cluster_share_interval(flags)
    assert got.level == pytest.approx(0.9) and "3 clusters" in got.method
    assert q(0.02) - 1e-12 <= got.low <= q(0.08) + 1e-12
    assert q(0.92) - 1e-12 <= got.high <= q(0.98) + 1e-12
    assert cluster_share_interval([[True] * 4, [True]]).low == 1.0
    with pytest.raises(ValueError, match="cluster"):
        cluster_share_interval([])
