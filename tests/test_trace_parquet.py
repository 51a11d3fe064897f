"""moeroof.data.trace_parquet: a trace written as Parquet (live tokens only, row groups of step
ranges, the meta in the schema metadata) reads back equal to the original — whole, by layer
range and by step chunks — row group by row group; bad files are InputErrors naming the file,
the row and the field; a per-layer cache simulation on the layers read equals the original's."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import csvout  # noqa: I001  (tests/csvout.py: results past their run record)
from moeroof import cachesim as cache
from moeroof.core.errors import ParameterError
from moeroof.core.paths import DATA_DIR
from moeroof.data.io import InputError, read_trace, write_trace
from moeroof.data.trace_parquet import (
    FORMAT,
    META_KEY,
    iter_parquet_trace_steps,
    parquet_trace_info,
    read_parquet_trace,
    read_parquet_trace_layers,
    write_parquet_trace,
)

TRACE = DATA_DIR / "traces" / "qwen3-30b-a3b-like.npz"  # E=128, K=8, 48 layers, 96 steps


def random_trace(seed: int, steps: int, streams: int, layers: int, experts: int, k: int, pad: float) -> np.ndarray:
    """(steps, streams, layers, K) int16: K distinct ids per token, a share ``pad`` of tokens -1."""
    rng = np.random.default_rng(seed)
    keys = rng.random((steps, streams, layers, experts))
    topk = np.argsort(keys, axis=-1)[..., :k].astype(np.int16)  # K distinct experts, random order
    topk[rng.random((steps, streams, layers)) < pad] = -1
    return topk


def meta_of(experts: int, k: int, **extra) -> dict:
    return {"experts": experts, "top_k": k, "model": "test", "provenance": "synthetic", **extra}


# ----------------------------------------------------------------------------- round trips

shapes = st.tuples(
    st.integers(0, 2**31 - 1),  # seed
    st.integers(1, 7),  # steps
    st.integers(1, 4),  # streams
    st.integers(1, 5),  # layers
    st.integers(1, 3),  # K
    st.integers(0, 6),  # experts − K
    st.sampled_from([0.0, 0.3, 1.0]),  # padding share
    st.integers(1, 4),  # steps per row group
    st.integers(1, 8),  # steps per chunk
    st.sampled_from([".npz", ".npy"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shapes)
def test_round_trip_equals_the_original(tmp_path_factory, case):
    seed, steps, streams, layers, k, extra, pad, per_group, per_chunk, suffix = case
    experts = k + extra
    topk = random_trace(seed, steps, streams, layers, experts, k, pad)
    folder = tmp_path_factory.mktemp("rt")
    original = read_trace(write_trace(folder / f"t{suffix}", topk, meta_of(experts, k)))
    path = write_parquet_trace(folder / "t.parquet", original.topk, original.meta, steps_per_row_group=per_group)

    info = parquet_trace_info(path)
    assert info.shape == topk.shape
    assert info.rows == int((topk >= 0).all(axis=-1).sum())  # padding rows are not written
    assert info.row_groups <= -(-steps // per_group)
    assert (info.experts, info.top_k, info.layer_ids) == (experts, k, original.layer_ids)
    assert info.meta["provenance"] == "synthetic" and info.meta["format"] == FORMAT

    back = read_parquet_trace(path)
    np.testing.assert_array_equal(back.topk, topk)
    assert (back.experts, back.top_k, back.layer_ids) == (experts, k, original.layer_ids)
    for l0 in range(layers):
        for l1 in range(l0 + 1, layers + 1):
            np.testing.assert_array_equal(read_parquet_trace_layers(path, l0, l1), topk[:, :, l0:l1])
    chunks = list(iter_parquet_trace_steps(path, per_chunk))
    assert len(chunks) == -(-steps // per_chunk)
    assert all(c.shape[0] == per_chunk for c in chunks[:-1])
    np.testing.assert_array_equal(np.concatenate(chunks), topk)


def test_smallest_types_and_the_meta_in_the_schema(tmp_path):
    topk = random_trace(1, 300, 3, 2, 300, 4, 0.2)
    path = write_parquet_trace(tmp_path / "t.parquet", topk, meta_of(300, 4))
    schema = pq.ParquetFile(path).schema_arrow
    assert schema.names == ["step", "stream", "layer", "e0", "e1", "e2", "e3"]
    assert [str(schema.field(n).type) for n in schema.names] == ["uint16", "uint8", "uint8"] + ["uint16"] * 4
    meta = json.loads(schema.metadata[META_KEY])
    assert (meta["steps"], meta["streams"], meta["layers"], meta["experts"], meta["top_k"]) == (300, 3, 2, 300, 4)
    assert meta["layer_ids"] == [0, 1] and meta["pad_value"] == -1


# ----------------------------------------------------------------------------- row groups


class Spy:
    """Records the row groups each ``ParquetFile.iter_batches`` call asks for."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[int, ...]] = []
        real = pq.ParquetFile.iter_batches

        def spy(pf, *args, **kw):
            self.calls.append(tuple(kw.get("row_groups") or ()))
            return real(pf, *args, **kw)

        monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)


def test_row_groups_are_step_ranges_read_one_at_a_time(tmp_path, monkeypatch):
    topk = random_trace(2, 40, 4, 6, 16, 2, 0.1)
    path = write_parquet_trace(tmp_path / "t.parquet", topk, meta_of(16, 2), steps_per_row_group=7)
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups == 6  # steps 0-6, 7-13, …, 35-39
    for g in range(md.num_row_groups):
        stats = md.row_group(g).column(0).statistics  # the step column
        assert (stats.min, stats.max) == (7 * g, min(7 * g + 6, 39))
    spy = Spy(monkeypatch)
    np.testing.assert_array_equal(read_parquet_trace_layers(path, 2, 4), topk[:, :, 2:4])
    assert spy.calls == [(g,) for g in range(6)]  # every row group, each on its own

    spy.calls.clear()
    chunks = iter_parquet_trace_steps(path, 10)
    np.testing.assert_array_equal(next(chunks), topk[:10])
    chunks.close()
    assert spy.calls == [(0,), (1,)]  # steps 0-9 needed row groups 0 and 1 only; the rest unread


def test_info_reads_no_data(tmp_path, monkeypatch):
    topk = random_trace(3, 5, 2, 3, 8, 2, 0.0)
    path = write_parquet_trace(tmp_path / "t.parquet", topk, meta_of(8, 2))
    spy = Spy(monkeypatch)
    info = parquet_trace_info(path)
    assert info.shape == (5, 2, 3, 2) and info.rows == 30 and spy.calls == []


def test_max_bytes_bounds_the_output(tmp_path):
    topk = random_trace(4, 10, 2, 4, 8, 2, 0.0)
    path = write_parquet_trace(tmp_path / "t.parquet", topk, meta_of(8, 2))
    read_parquet_trace_layers(path, 0, 1, max_bytes=10 * 2 * 2 * 3)  # int16 + a byte of bookkeeping
    with pytest.raises(ParameterError, match="max_bytes"):
        read_parquet_trace_layers(path, 0, 2, max_bytes=10 * 2 * 2 * 3)
    with pytest.raises(ParameterError):
        read_parquet_trace_layers(path, 2, 2)


# ----------------------------------------------------------------------------- bad files

E, K = 10, 3


def write_table(path, columns: dict, meta: dict | None = None, *, groups: int = 1):
    """A Parquet file of the given columns (split into ``groups`` equal row groups) and meta."""
    table = pa.table(columns)
    if meta is not None:
        table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    n = table.num_rows
    pq.write_table(table, path, row_group_size=max(1, n // groups))
    return path


def good_columns(steps=4, streams=2, layers=2):
    s, t, l = (a.ravel() for a in np.meshgrid(np.arange(steps), np.arange(streams), np.arange(layers), indexing="ij"))
    n = s.size
    return {
        "step": s.astype(np.int32),
        "stream": t.astype(np.int32),
        "layer": l.astype(np.int32),
        **{f"e{k}": ((np.arange(n) + k) % E).astype(np.int32) for k in range(K)},
    }


GOOD_META = {"experts": E, "top_k": K, "steps": 4, "streams": 2, "layers": 2}


def bad(tmp_path, columns, meta=GOOD_META, groups=2):
    path = write_table(tmp_path / "bad.parquet", columns, meta, groups=groups)
    with pytest.raises(InputError) as err:
        read_parquet_trace_layers(path, 0, 2)
    with pytest.raises(InputError) as err2:
        for _ in iter_parquet_trace_steps(path, 3):
            pass
    assert str(err.value) == str(err2.value)  # both readers name the same row and field
    assert err.value.path == path
    return err.value


def test_a_good_foreign_file_reads(tmp_path):
    cols = good_columns()
    path = write_table(tmp_path / "ok.parquet", cols, GOOD_META, groups=2)
    out = read_parquet_trace_layers(path, 0, 2)
    assert out.shape == (4, 2, 2, K) and (out >= 0).all()
    np.testing.assert_array_equal(out[1, 0, 1], [(5 + k) % E for k in range(K)])  # row 5 = step 1, stream 0, layer 1


def test_missing_column(tmp_path):
    cols = good_columns()
    del cols["e1"]
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("-", "e1") and "missing column" in err.message


def test_missing_meta(tmp_path):
    err = bad(tmp_path, good_columns(), meta=None)
    assert (err.row, err.field) == ("-", "meta")
    err = bad(tmp_path, good_columns(), meta={k: v for k, v in GOOD_META.items() if k != "steps"})
    assert (err.row, err.field) == ("-", "steps")


def test_id_not_below_experts(tmp_path):
    cols = good_columns()
    cols["e2"][11] = E  # row 11 is in the second row group (8 rows each)
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 11 (row group 1)", "e2") and f"not in [0, {E})" in err.message


def test_duplicate_row(tmp_path):
    cols = good_columns()
    cols["layer"][5] = 0  # row 5 = step 1, stream 0, layer 1 → a second (1, 0, 0)
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 5 (row group 0)", "layer")
    assert "second row for step 1, stream 0, layer 0" in err.message


def test_duplicate_row_across_row_groups(tmp_path):
    cols = good_columns()
    for name in ("step", "stream", "layer"):
        cols[name][8] = cols[name][7]  # row 8 (row group 1) repeats row 7 (row group 0)
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 8 (row group 1)", "layer")


def test_step_out_of_range(tmp_path):
    cols = good_columns()
    cols["step"][14:] = 4  # steps are 0 … 3
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 14 (row group 1)", "step") and "outside 0 … 3" in err.message


def test_stream_and_layer_out_of_range(tmp_path):
    cols = good_columns()
    cols["stream"][3] = -1
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 3 (row group 0)", "stream")
    cols = good_columns()
    cols["layer"][9] = 2
    assert (bad(tmp_path, cols).row, bad(tmp_path, cols).field) == ("row 9 (row group 1)", "layer")


def test_rows_out_of_step_order(tmp_path):
    cols = good_columns()
    cols["step"][12] = 0  # rows 8-11 are step 2
    cols["layer"][12] = 1
    cols["stream"][12] = 1
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 12 (row group 1)", "step") and "order" in err.message


def test_partial_padding(tmp_path):
    cols = good_columns()
    cols["e1"][2] = -1
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 2 (row group 0)", "e1") and "partly padding" in err.message


def test_full_padding_row_is_padding(tmp_path):
    cols = good_columns()
    for k in range(K):
        cols[f"e{k}"][2] = -1
    path = write_table(tmp_path / "pad.parquet", cols, GOOD_META)
    out = read_parquet_trace_layers(path, 0, 2)
    assert (out[0, 1, 0] == -1).all() and (out[0, 0, 0] >= 0).all()  # row 2 = step 0, stream 1, layer 0


def test_expert_twice_in_a_token(tmp_path):
    cols = good_columns()
    cols["e2"][4] = cols["e0"][4]
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 4 (row group 0)", "e2") and "twice" in err.message


def test_null_value(tmp_path):
    cols = good_columns()
    arr = cols["e0"].astype(object)
    arr[9] = None
    cols["e0"] = pa.array(list(arr), type=pa.int32())
    err = bad(tmp_path, cols)
    assert (err.row, err.field) == ("row 9 (row group 1)", "e0") and "null" in err.message


def test_not_a_parquet_file(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(InputError) as err:
        parquet_trace_info(path)
    assert (err.value.path, err.value.row, err.value.field) == (path, "-", "file")
    with pytest.raises(InputError, match="no such file"):
        parquet_trace_info(tmp_path / "absent.parquet")


def test_writer_refuses_a_bad_trace_naming_the_token(tmp_path):
    topk = random_trace(5, 6, 2, 3, 8, 3, 0.0)
    topk[4, 1, 2, 1] = -1
    with pytest.raises(InputError) as err:
        write_parquet_trace(tmp_path / "t.parquet", topk, meta_of(8, 3), steps_per_row_group=4)
    assert (err.value.row, err.value.field) == ("topk[4,1,2,1]", "topk")
    assert not (tmp_path / "t.parquet").exists()  # nothing half-written is left
    topk[4, 1, 2, 1] = 8
    with pytest.raises(InputError, match=r"topk\[4,1,2,1\]: topk: expert id 8"):
        write_parquet_trace(tmp_path / "t.parquet", topk, meta_of(8, 3))
    # an expert named twice: the slot naming it again, as read_trace names it (it said slot 0)
    topk[4, 1, 2, 2] = topk[4, 1, 2, 0] = 5
    topk[4, 1, 2, 1] = 6
    with pytest.raises(InputError, match=r"topk\[4,1,2,2\]: topk: expert 5 appears twice"):
        write_parquet_trace(tmp_path / "t.parquet", topk, meta_of(8, 3))


# ----------------------------------------------------------------------------- the cache on it


def same(a, b):
    assert (a.hits, a.misses, a.requests) == (b.hits, b.misses, b.requests)
    np.testing.assert_array_equal(a.hits_per_step, b.hits_per_step)
    np.testing.assert_array_equal(a.misses_per_step, b.misses_per_step)


@pytest.mark.parametrize("l0, l1", [(0, 48), (0, 24), (24, 48), (13, 14)])
def test_per_layer_simulation_on_parquet_layers_equals_the_original(tmp_path, l0, l1):
    original = read_trace(TRACE)
    path = write_parquet_trace(tmp_path / "q.parquet", original.topk, original.meta, steps_per_row_group=17)
    assert parquet_trace_info(path).row_groups == 6
    layers = read_parquet_trace_layers(path, l0, l1)
    want = cache.requests_from_trace(original.topk[:, :, l0:l1], original.experts)
    got = cache.requests_from_trace(layers, original.experts)
    capacity = 12 * (l1 - l0)
    same(
        cache.simulate(got, capacity, policy="lru", scope="layer", warmup_steps=4),
        cache.simulate(want, capacity, policy="lru", scope="layer", warmup_steps=4),
    )


def test_cli_writes_and_reads_parquet_traces_as_it_does_npz(tmp_path, capsys):
    """`moeroof trace -o X.parquet` writes the trace `-o X.npz` writes; cache, mrc and union
    give the same JSON on either (the source path apart)."""
    from moeroof.cli import main

    knobs = ["--family", "zipf:0.9", "--streams", "8", "--steps", "30", "--experts", "32", "--top-k", "4"]
    knobs += ["--layers", "5", "--seed", "3"]
    for suffix in ("npz", "parquet"):
        assert main(["trace", *knobs, "-o", str(tmp_path / f"t.{suffix}")]) == 0
    capsys.readouterr()
    np.testing.assert_array_equal(read_parquet_trace(tmp_path / "t.parquet").topk, read_trace(tmp_path / "t.npz").topk)
    commands = [
        ["cache", "--capacity-experts", "40", "--policy", "lru", "--scope", "layer"],
        ["mrc"],
        ["union", "--batch", "1,4,8", "--seed", "1"],
        ["mrc", "--scope", "layer"],
    ]
    for command in commands:
        got = {}
        for suffix in ("npz", "parquet"):
            path = str(tmp_path / f"t.{suffix}")
            assert main([command[0], path, *command[1:], "--json"]) == 0, command
            rep = csvout.strip_run(json.loads(capsys.readouterr().out))
            got[suffix] = {k: v for k, v in rep.items() if k not in ("source", "path", "trace", "input")}
        assert got["npz"] == got["parquet"], command
