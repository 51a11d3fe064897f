"""moeroof.data.importers: each format on tiny files written here, expected values counted by hand.

Nothing here is copied from the importers' output: every expected trace or histogram is written
out from the rows of the small input the test itself made.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeroof.core.errors import ParameterError
from moeroof.data.importers import (
    ImportedTrace,
    import_hf_router_logits,
    import_matrix,
    import_sglang,
    import_table,
    parse_columns,
    parse_filters,
    sglang_from_object,
    write_imported,
)
from moeroof.data.io import InputError, read_histogram, read_trace


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- table: wide

WIDE = """\
ds,pid,layer,tok,e0,e1,phase
b,1,3,0,2,0,decode
a,10,3,0,1,2,decode
a,10,3,1,3,1,decode
a,10,5,0,0,3,decode
a,2,3,0,2,3,prefill
a,2,3,1,0,1,decode
"""


def test_wide_table_by_hand(tmp_path):
    src = write(tmp_path / "w.csv", WIDE)
    before = src.read_bytes()
    got = import_table(
        src,
        columns=parse_columns("stream=ds+pid,step=tok,layer=layer"),
        expert_cols=["e0", "e1"],
        experts=4,
        top_k=2,
        model="tiny",
    )
    # streams sorted by key, pid numerically: a:2, a:10, b:1; steps 0, 1; layers 3, 5
    want = np.full((2, 3, 2, 2), -1)
    want[0, 1, 0] = [1, 2]  # a,10 layer 3 tok 0
    want[1, 1, 0] = [3, 1]  # a,10 layer 3 tok 1
    want[0, 1, 1] = [0, 3]  # a,10 layer 5 tok 0
    want[0, 0, 0] = [2, 3]  # a,2 layer 3 tok 0
    want[1, 0, 0] = [0, 1]  # a,2 layer 3 tok 1
    want[0, 2, 0] = [2, 0]  # b,1 layer 3 tok 0
    assert np.array_equal(got.topk, want)
    assert got.meta["layer_ids"] == [3, 5]
    assert got.meta["streams_from"] == {"count": 3, "keys": ["a:2", "a:10", "b:1"]}
    assert got.meta["steps_from"] == {"count": 2, "keys": ["0", "1"]}
    assert got.meta["provenance"] == "witnessed" and got.meta["source"] == str(src.resolve())
    assert got.meta["model"] == "tiny" and got.meta["tokens"] == 6
    assert src.read_bytes() == before


def test_filter_and_no_layer_column(tmp_path):
    src = write(tmp_path / "w.csv", WIDE)
    got = import_table(
        src,
        columns=parse_columns("stream=ds+pid,step=tok"),
        expert_cols=["e0", "e1"],
        filters=parse_filters(["phase=decode", "layer=3"]),
        experts=4,
        top_k=2,
    )
    # rows kept: b1 t0 [2,0]; a10 t0 [1,2]; a10 t1 [3,1]; a2 t1 [0,1] — one layer (id 0)
    want = np.full((2, 3, 1, 2), -1)
    want[0, 2, 0] = [2, 0]
    want[0, 1, 0] = [1, 2]
    want[1, 1, 0] = [3, 1]
    want[1, 0, 0] = [0, 1]
    assert np.array_equal(got.topk, want)
    assert got.meta["layer_ids"] == [0]
    assert got.meta["filters"] == {"phase": "decode", "layer": "3"}


def test_padding_rows_are_skipped_and_partial_padding_refused(tmp_path):
    src = write(tmp_path / "p.csv", "s,t,e0,e1\n0,0,1,2\n0,1,-1,-1\n1,0,,\n1,1,3,0\n")
    got = import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e1"], experts=4, top_k=2)
    want = np.full((2, 2, 1, 2), -1)
    want[0, 0, 0] = [1, 2]
    want[1, 1, 0] = [3, 0]
    assert np.array_equal(got.topk, want)
    bad = write(tmp_path / "bad.csv", "s,t,e0,e1\n0,0,1,2\n\n0,1,3,-1\n")
    with pytest.raises(InputError) as err:
        import_table(bad, columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e1"], experts=4, top_k=2)
    assert str(err.value).startswith(f"{bad}:4: e1: padding")  # line 4: the blank line 3 counts


@pytest.mark.parametrize(
    ("body", "line", "field", "words"),
    [
        ("s,t,e0,e1\n0,0,1,2\n0,1,9,1\n", 3, "e0", "expert id 9 not in [0, 4)"),
        ("s,t,e0,e1\n0,0,1,2\n0,1,x,1\n", 3, "e0", "expected an integer, got 'x'"),
        ("s,t,e0,e1\n0,0,1,2\n0,1,2.5,1\n", 3, "e0", "expected an integer"),
        ("s,t,e0,e1\n0,0,1,2\n0,1,3,3\n", 3, "e1", "expert 3 twice in one token"),
        ("s,t,e0,e1\n0,0,1,2\n1,0,1,2\n0,0,3,1\n", 4, "t", "a second token for stream 0, step 0, layer 0 (first at 2)"),
        ("s,t,e0,e1,e0\n0,0,1,2,3\n", 1, "e0", "column given twice (columns 3 and 5)"),
    ],
)
def test_wide_table_errors_name_the_line(tmp_path, body, line, field, words):
    src = write(tmp_path / "e.csv", body)
    with pytest.raises(InputError) as err:
        import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e1"], experts=4, top_k=2)
    assert str(err.value).startswith(f"{src}:{line}: {field}: ")
    assert words in str(err.value)


def test_missing_column_and_empty_filter(tmp_path):
    src = write(tmp_path / "e.csv", "s,t,e0,e1\n0,0,1,2\n")
    with pytest.raises(InputError, match=r":1: e2: no such column \(header has: s, t, e0, e1\)"):
        import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e2"], experts=4, top_k=2)
    with pytest.raises(InputError, match=r"no data rows after --filter s=7 \(1 rows read\)"):
        import_table(
            src,
            columns=parse_columns("stream=s,step=t"),
            expert_cols=["e0", "e1"],
            filters=[("s", "7")],
            experts=4,
            top_k=2,
        )
    with pytest.raises(InputError, match="no such file"):
        import_table(
            tmp_path / "nope.csv", columns={"stream": ["s"], "step": ["t"]}, expert_cols=["a"], experts=4, top_k=1
        )


def test_a_header_the_csv_module_cannot_read_is_the_files_error(tmp_path):
    """A header field past the csv module's limit (128 KiB) is an InputError at line 1, for the
    table and the matrix readers alike (it escaped as an internal error)."""
    src = write(tmp_path / "h.csv", '"' + "s" * 200_000 + '",t,e0,e1\n0,0,1,2\n')
    with pytest.raises(InputError, match=r":1: header: not a CSV header line: field larger than field limit"):
        import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e1"], experts=4, top_k=2)
    with pytest.raises(InputError, match=r":1: header: not a CSV header line"):
        import_matrix(src, top_k=1, layer_col="t", expert_prefix="e")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("stream=a", "missing step=COL"),
        ("stream=a,step=b,rank=c", "unknown role 'rank'"),
        ("stream=a,step=b,step=c", "step given twice"),
        ("stream=a+,step=b", "empty column name"),
        ("stream:a,step=b", "expected ROLE=COL"),
    ],
)
def test_parse_columns_refusals(text, words):
    with pytest.raises(ParameterError) as err:
        parse_columns(text)
    assert err.value.parameter == "columns" and words in str(err.value)


def test_parse_columns_and_filters():
    assert parse_columns("stream=dataset+problem_id, step=token_idx,layer=layer") == {
        "stream": ["dataset", "problem_id"],
        "step": ["token_idx"],
        "layer": ["layer"],
    }
    assert parse_filters(["phase=decode", "Language = English", "x=a=b"]) == [
        ("phase", "decode"),
        ("Language", "English"),
        ("x", "a=b"),
    ]
    with pytest.raises(ParameterError, match="expected COL=VALUE"):
        parse_filters(["phase"])


# ----------------------------------------------------------------------------- table: long

LONG = """\
req,step,layer,slot,expert
r1,0,0,1,3
r1,0,0,0,2
r2,0,0,0,1
r2,0,0,1,0
r1,1,0,0,0
r1,1,0,1,1
"""


def test_long_table_by_hand(tmp_path):
    src = write(tmp_path / "l.csv", LONG)
    got = import_table(
        src,
        columns=parse_columns("stream=req,step=step,layer=layer"),
        expert_col="expert",
        slot_col="slot",
        experts=4,
        top_k=2,
    )
    want = np.full((2, 2, 1, 2), -1)
    want[0, 0, 0] = [2, 3]  # r1 step 0: slot 0 → 2, slot 1 → 3
    want[0, 1, 0] = [1, 0]
    want[1, 0, 0] = [0, 1]
    assert np.array_equal(got.topk, want)


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("req,step,slot,expert\nr1,0,0,2\nr1,0,2,3\n", 3, "slot 2 not in 0..1"),
        ("req,step,slot,expert\nr1,0,0,2\nr1,0,0,3\n", 3, "slot 0 of this token given twice (first at 2)"),
        ("req,step,slot,expert\nr1,0,0,2\nr1,0,1,3\nr2,0,1,1\n", 4, "this token has 1 of its K=2 slots"),
    ],
)
def test_long_table_errors(tmp_path, body, line, words):
    src = write(tmp_path / "l.csv", body)
    with pytest.raises(InputError) as err:
        import_table(
            src, columns=parse_columns("stream=req,step=step"), expert_col="expert", slot_col="slot", experts=4, top_k=2
        )
    assert str(err.value).startswith(f"{src}:{line}: slot: ")
    assert words in str(err.value)


def test_table_parquet(tmp_path):
    pd = pytest.importorskip("pandas")
    import pyarrow  # noqa: F401  (a dependency: the Parquet path must run, not skip)

    src = tmp_path / "w.parquet"
    pd.DataFrame({"s": [0, 0, 1], "t": [0, 1, 0], "e0": [1, 2, 3], "e1": [0, 3, 5]}).to_parquet(src)
    with pytest.raises(InputError) as err:
        import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e1"], experts=4, top_k=2)
    assert str(err.value).startswith(f"{src}:row 3: e1: expert id 5")
    got = import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e1"], experts=6, top_k=2)
    want = np.full((2, 2, 1, 2), -1)
    want[0, 0, 0] = [1, 0]
    want[1, 0, 0] = [2, 3]
    want[0, 1, 0] = [3, 5]
    assert np.array_equal(got.topk, want)


def test_a_parquet_column_named_twice_is_ambiguous(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "d.parquet"
    pq.write_table(pa.table([[0, 1], [0, 0], [1, 2], [3, 0]], names=["s", "t", "e0", "e0"]), src)
    with pytest.raises(InputError, match=r"d.parquet:-: e0: column given twice \(columns 3 and 4\)"):
        import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0"], experts=4, top_k=1)


def test_integer_and_text_parquet_columns_import_the_same_trace(tmp_path):
    """Integer columns are kept as integers (not text) through the import: the same table with
    its columns as text, keys with gaps and out of order, gives the same ids, keys and errors."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    n = 300
    stream = rng.choice([7, 30, 2], n)
    step = rng.permutation(n) * 3 + 11  # distinct, unsorted, gapped
    layer = rng.integers(0, 2, n)
    e0 = rng.integers(0, 8, n)
    e1 = (e0 + 1 + rng.integers(0, 7, n)) % 8
    cols = {"s": stream, "t": step, "l": layer, "e0": e0, "e1": e1}
    args = dict(columns=parse_columns("stream=s,step=t,layer=l"), expert_cols=["e0", "e1"], experts=8, top_k=2)
    got = {}
    for kind in ("int", "text"):
        src = tmp_path / f"{kind}.parquet"
        arrays = {c: (v if kind == "int" else v.astype(str)) for c, v in cols.items()}
        pq.write_table(pa.table(arrays), src)
        got[kind] = import_table(src, **args)
    assert np.array_equal(got["int"].topk, got["text"].topk)
    for key in ("streams_from", "steps_from", "layer_ids", "tokens"):
        assert got["int"].meta[key] == got["text"].meta[key]
    assert got["int"].meta["streams_from"]["keys"] == ["2", "7", "30"]  # numeric order, as written
    # hand-checked against the rows: every row's ids sit at its (step, stream, layer) cell
    steps, streams = sorted(step.tolist()), [2, 7, 30]
    for i in range(n):
        cell = got["int"].topk[steps.index(step[i]), streams.index(stream[i]), layer[i]]
        assert cell.tolist() == [e0[i], e1[i]]


def test_a_parquet_declaring_more_rows_than_memory_holds_is_refused_unread(tmp_path, monkeypatch):
    """The footer's row count, times what a row costs, is checked before a row is read: a few
    kilobytes of one repeated value can declare rows by the hundred million."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    import moeroof.core.limits as limits
    from moeroof.data import importers

    src = tmp_path / "same.parquet"
    zeros = np.zeros(100_000, dtype=np.int64)
    pq.write_table(pa.table({"s": zeros, "t": zeros, "e": zeros}), src, compression="zstd")
    assert src.stat().st_size < 64 << 10
    need = 100_000 * (importers.ROW_BYTES + 3 * importers.INT_CELL_BYTES)
    monkeypatch.setattr(limits, "available_memory", lambda: need - 1)
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("rows were read"))
    args = dict(columns=parse_columns("stream=s,step=t"), expert_cols=["e"], experts=8, top_k=1)
    with pytest.raises(
        InputError, match=r"same\.parquet:-: rows: 100,000 rows × 3 columns to import = .* this machine"
    ):
        import_table(src, **args)
    monkeypatch.undo()
    with pytest.raises(InputError, match=r"same\.parquet:row 2: t: a second token for stream 0, step 0"):
        import_table(src, **args)  # under the bound it is read, and its real fault named


def test_parquet_without_pyarrow_says_so(tmp_path, monkeypatch):
    import sys

    src = write(tmp_path / "w.parquet", "not really parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow → ImportError
    with pytest.raises(InputError, match="reading Parquet needs pyarrow"):
        import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0"], experts=4, top_k=1)


# ----------------------------------------------------------------------------- writing


def test_write_trace_and_its_histogram(tmp_path):
    topk = np.full((2, 2, 1, 2), -1, dtype=np.int16)
    topk[0, 0, 0] = [2, 3]
    topk[0, 1, 0] = [1, 0]
    topk[1, 0, 0] = [0, 1]
    data = ImportedTrace(
        topk=topk, meta={"experts": 4, "top_k": 2, "layer_ids": [7], "source": "/x.csv", "provenance": "witnessed"}
    )
    out = write_imported(tmp_path / "t.npz", data)
    t = read_trace(out)
    assert np.array_equal(np.asarray(t.topk), topk) and t.provenance == "witnessed"
    with pytest.raises(FileExistsError):
        write_imported(tmp_path / "t.npz", data)
    h = read_histogram(write_imported(tmp_path / "h.csv", data))
    assert np.array_equal(h.counts, [[2, 2, 1, 1]])  # ids 2,3,1,0,0,1
    assert list(h.tokens) == [3] and h.layer_ids == (7,) and h.provenance == "witnessed"
    side = json.loads((tmp_path / "h.json").read_text())
    assert side["source"] == "/x.csv" and "counted_from" in side
    with pytest.raises(ParameterError):
        write_imported(tmp_path / "t.txt", data)


# ----------------------------------------------------------------------------- matrix

FREQ = """\
Layer,Language,Expert_0,Expert_1,Expert_2,Expert_3
1,English,0.5,0.25,0.75,0.5
1,Hebrew,1.0,0.0,0.5,0.5
0,English,0.125,0.875,0.5,0.5
"""


def test_frequency_matrix_by_hand(tmp_path):
    src = write(tmp_path / "f.csv", FREQ)
    got = import_matrix(
        src, layer_col="Layer", expert_prefix="Expert_", filters=[("Language", "English")], top_k=2, tokens=8
    )
    # rows sum to 2 = K: inclusion frequencies; × T = 8 → exact counts, layers sorted
    assert got.layer_ids == [0, 1]
    assert got.counts.tolist() == [[1, 7, 4, 4], [4, 2, 6, 4]]
    assert got.tokens == [8, 8] and got.experts == 4 and got.top_k == 2
    assert got.extra["tokens_user_given"] is True and "sample size" in got.extra["tokens_note"]
    assert got.extra["provenance"] == "witnessed" and got.source == str(src.resolve())
    assert any("user-given" in n for n in got.notes)
    h = read_histogram(write_imported(tmp_path / "h.csv", got))
    assert h.counts.tolist() == [[1, 7, 4, 4], [4, 2, 6, 4]] and h.meta["tokens_user_given"] is True


def test_frequency_rounding_keeps_a_valid_histogram(tmp_path):
    # bf16-like row summing to 2.006 > K: scaled to K, then largest remainder; T = 3
    src = write(tmp_path / "f.csv", "L,E0,E1,E2\n0,1.0,0.503,0.503\n")
    got = import_matrix(src, layer_col="L", expert_prefix="E", top_k=2, tokens=3)
    c = got.counts[0]
    assert c.sum() == 6 and c.max() <= 3 and c[0] == 3  # 3 + 1.5 + 1.5 → 3 + 2 + 1 (ties to the lower id)
    assert c.tolist() == [3, 2, 1]


def test_frequency_needs_tokens_and_avg_dist_is_refused(tmp_path):
    src = write(tmp_path / "f.csv", FREQ)
    with pytest.raises(ParameterError) as err:
        import_matrix(src, layer_col="Layer", expert_prefix="Expert_", filters=[("Language", "English")], top_k=2)
    assert err.value.parameter == "tokens" and "bootstrap band" in str(err.value)
    dist = write(tmp_path / "d.csv", "Layer,Expert_0,Expert_1,Expert_2\n0,0.5,0.25,0.25\n1,0.2,0.3,0.5\n")
    with pytest.raises(ParameterError) as err:
        import_matrix(dist, layer_col="Layer", expert_prefix="Expert_", top_k=2, tokens=4)
    assert err.value.parameter == "shares" and "mean router probabilities" in str(err.value)
    # the same rows read as shares of K·T picks: count = share × K × T
    got = import_matrix(dist, layer_col="Layer", expert_prefix="Expert_", top_k=2, tokens=4, shares=True)
    assert got.counts.tolist() == [[4, 2, 2], [2, 2, 4]]  # 0.5·8, 0.25·8, …; 0.2·8 = 1.6 → 2, 0.3·8 = 2.4 → 2


def test_count_matrix_npy_and_csv(tmp_path):
    arr = np.array([[3, 1, 2, 0], [1, 1, 2, 2]])
    np.save(tmp_path / "c.npy", arr)
    got = import_matrix(tmp_path / "c.npy", top_k=2)
    # counts (integers, row sums 6 ≠ K, ≠ 1): tokens = 6 / 2 = 3 per layer
    assert got.counts.tolist() == arr.tolist() and got.tokens == [3, 3] and got.layer_ids == [0, 1]
    assert "tokens_inferred" in got.extra
    got = import_matrix(tmp_path / "c.npy", top_k=2, tokens=[3, 5])
    assert got.tokens == [3, 5] and got.extra["tokens_user_given"] is True
    src = write(tmp_path / "c.csv", "layer,x,e0,e1,e3\n4,a,5,1,0\n")
    got = import_matrix(src, layer_col="layer", expert_prefix="e", top_k=1)
    assert got.counts.tolist() == [[5, 1, 0, 0]] and got.layer_ids == [4] and got.tokens == [6]
    assert got.extra["experts_without_column"] == [2]


@pytest.mark.parametrize(
    ("body", "where", "words"),
    [
        ("L,E0,E1\n0,1,x\n", ":2: E1: ", "expected a number"),
        ("L,E0,E1\n0,1,2\n0,2,1\n", ":3: L: ", "layer 0 twice (first at 2)"),
        ("L,E0,E1\n0,1,-2\n", ":2: E1: ", "expected a number ≥ 0"),
        ("L,E0,E1\n0,0.9,1.7\n", ":layer 0: value: ", "an inclusion frequency is at most 1"),
        # ambiguous columns: pandas read the second E1 as "E1.1" and the import dropped it
        ("L,E0,E1,E1\n0,1,2,3\n", ":1: E1: ", "column given twice (columns 3 and 4)"),
        ("L,L,E0,E1\n0,0,1,2\n", ":1: L: ", "column given twice (columns 1 and 2)"),
        ("L,E0,E1,E01\n0,1,2,3\n", ":1: E01: ", "names expert 1, as column E1 does"),
        ("L,E0,E\u00b9\n0,1,2\n", ":1: E\u00b9: ", "the id in digits 0-9"),
    ],
)
def test_matrix_errors(tmp_path, body, where, words):
    src = write(tmp_path / "m.csv", body)
    with pytest.raises(InputError) as err:
        import_matrix(src, layer_col="L", expert_prefix="E", top_k=2, tokens=10)
    assert str(err.value).startswith(f"{src}{where}") and words in str(err.value)


# ----------------------------------------------------------------------------- SGLang


def test_sglang_v04_csv_by_hand(tmp_path):
    # as the v0.4 recorder writes it: rows only for experts that fired, layer by layer
    src = write(
        tmp_path / "expert_distribution_rank0_timestamp1.csv", "layer_id,expert_id,count\n0,2,3\n0,0,1\n1,1,2\n1,3,2\n"
    )
    got = import_sglang(src, top_k=2, experts=5)
    assert got.counts.tolist() == [[1, 0, 3, 0, 0], [0, 2, 0, 2, 0]]
    assert got.tokens == [2, 2] and got.layer_ids == [0, 1] and got.experts == 5
    bad = write(tmp_path / "b.csv", "layer_id,expert_id,count\n0,2,3\n")
    with pytest.raises(InputError, match="counts sum to 3, not a multiple of K=2"):
        import_sglang(bad, top_k=2)
    dup = write(tmp_path / "d.csv", "layer_id,expert_id,count\n0,2,3\n0,1,1\n0,2,1\n")
    with pytest.raises(InputError, match=r"d.csv:4: expert_id: a second row"):
        import_sglang(dup, top_k=2)


def test_sglang_stat_dump_by_hand(tmp_path):
    # stat mode: logical_count (passes, layers, experts); layer 0 is a dense layer (never counted)
    logical = np.zeros((3, 3, 4), dtype=np.int32)
    logical[0, 1] = [1, 1, 0, 0]
    logical[2, 1] = [0, 2, 1, 1]
    logical[1, 2] = [2, 0, 0, 2]
    got = sglang_from_object({"rank": 0, "logical_count": logical}, tmp_path / "x.pt", top_k=2)
    assert got.layer_ids == [1, 2] and got.counts.tolist() == [[1, 3, 1, 1], [2, 0, 0, 2]]
    assert got.tokens == [3, 2] and any("dropped 1 layers" in n for n in got.notes)


def test_sglang_per_token_dump_by_hand(tmp_path):
    # per_token mode: physical ids (-1 padded to 8 columns), mapped to logical ids per layer
    p2l = np.array([[0, 1, 2, 3, 0], [3, 2, 1, 0, 3]])  # physical 4 replicates logical 0 / 3

    def rec(pass_id, ids):
        full = np.full((2, len(ids[0]), 8), -1)
        full[:, :, :2] = ids
        return {"forward_pass_id": pass_id, "rank": 0, "topk_ids_of_layer": full, "forward_mode": 2}

    records = [
        rec(7, [[[1, 4]], [[1, 4]]]),  # later pass first in the list
        rec(3, [[[0, 2], [3, 1]], [[0, 2], [3, 1]]]),
    ]
    got = sglang_from_object({"records": records, "last_physical_to_logical_map": p2l}, tmp_path / "x.pt", top_k=2)
    want = np.full((2, 2, 2, 2), -1)
    want[0, 0] = [[0, 2], [3, 1]]  # pass 3, token 0: layer 0 as is; layer 1: 0→3, 2→1
    want[0, 1] = [[3, 1], [0, 2]]
    want[1, 0] = [[1, 0], [2, 3]]  # pass 7: physical 4 → logical 0 (layer 0), 3 (layer 1)
    assert np.array_equal(got.topk, want) and got.meta["experts"] == 4
    bad = [rec(1, [[[1, 2]], [[1, 2]]])]
    bad[0]["topk_ids_of_layer"][0, 0, 2] = 3
    with pytest.raises(InputError, match=r"records\[0\]: topk_ids_of_layer: tokens with more than K=2 ids"):
        sglang_from_object({"records": bad}, tmp_path / "x.pt", top_k=2)


def test_sglang_pt_without_torch_says_so(tmp_path, monkeypatch):
    import sys

    src = write(tmp_path / "expert_distribution_recorder_1.pt", "x")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(InputError, match="needs torch"):
        import_sglang(src, top_k=2)


# ----------------------------------------------------------------------------- HF router logits


def test_hf_router_logits_npz_per_layer_by_hand(tmp_path):
    # np.savez(f, *router_logits): arr_0, arr_1, … one (batch·seq, E) array per layer; batch 2, seq 2
    l0 = np.array([[0.1, 2.0, 1.0], [3.0, -1.0, 0.5], [0.0, 0.0, 1.0], [5.0, 4.0, 4.5]], dtype=np.float32)
    l1 = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 2.0], [2.0, 1.0, 0.0], [0.0, 9.0, 8.0]], dtype=np.float32)
    arrs = [l0, l1] + [l1] * 9  # 11 layers: arr_10 must come after arr_9
    arrs[10] = l0
    np.savez(tmp_path / "rl.npz", *arrs, attention_mask=np.array([[1, 1], [1, 0]]))
    got = import_hf_router_logits(tmp_path / "rl.npz", top_k=2, batch=2)
    t = got.topk  # (seq, batch, layers, K)
    assert t.shape == (2, 2, 11, 2)
    assert t[0, 0, 0].tolist() == [1, 2] and t[1, 0, 0].tolist() == [0, 2]  # row 0, row 1
    assert t[0, 1, 0].tolist() == [2, 0]  # row 2: tie 0.0/0.0 → lower id 0
    assert t[1, 1].tolist() == [[-1, -1]] * 11  # masked position
    assert t[0, 0, 1].tolist() == [0, 1]  # tie 1.0/1.0 → ids 0, 1
    assert t[0, 0, 10].tolist() == [1, 2]  # arr_10 is l0 again
    assert got.meta["experts"] == 3 and "logits" in got.meta["selection"]
    with pytest.raises(ParameterError) as err:
        import_hf_router_logits(tmp_path / "rl.npz", top_k=2, batch=3)
    assert err.value.parameter == "batch"


def test_hf_router_logits_npy_stacked(tmp_path):
    logits = np.zeros((2, 1, 3, 4))  # (layers, batch, seq, E)
    logits[0, 0, :, 3] = 1.0
    logits[1, 0, :, 2] = 1.0
    logits[..., 1] += 0.5
    np.save(tmp_path / "rl.npy", logits)
    got = import_hf_router_logits(tmp_path / "rl.npy", top_k=2)
    assert got.topk.shape == (3, 1, 2, 2)
    assert got.topk[:, 0, 0].tolist() == [[3, 1]] * 3 and got.topk[:, 0, 1].tolist() == [[2, 1]] * 3
    bad = logits.copy()
    bad[1, 0, 2, 0] = np.nan
    np.save(tmp_path / "bad.npy", bad)
    with pytest.raises(InputError, match="layer 1: router_logits: NaN"):
        import_hf_router_logits(tmp_path / "bad.npy", top_k=2)


def test_torch_pt_files_equal_the_same_objects_in_memory(tmp_path):
    """The .pt paths (torch.load, the capture extra installs torch): an SGLang dump and a tuple
    of Hugging Face router logits saved with torch.save import exactly as the same objects do."""
    torch = pytest.importorskip("torch", reason="the capture extra (torch) is not installed")
    logical = np.zeros((2, 2, 4), dtype=np.int32)
    logical[0, 0] = [1, 1, 0, 0]
    logical[1, 1] = [0, 2, 1, 1]
    obj = {"rank": 0, "logical_count": torch.from_numpy(logical)}
    pt = tmp_path / "expert_distribution_recorder_1.pt"
    torch.save(obj, pt)
    from_file = import_sglang(pt, top_k=2)
    in_memory = sglang_from_object({"rank": 0, "logical_count": logical}, pt, top_k=2)
    assert from_file.counts.tolist() == in_memory.counts.tolist() and from_file.tokens == in_memory.tokens
    rng = np.random.default_rng(3)
    layers = [rng.normal(size=(6, 5)).astype(np.float32) for _ in range(3)]
    torch.save(tuple(torch.from_numpy(a) for a in layers), tmp_path / "rl.pt")
    np.savez(tmp_path / "rl.npz", *layers)
    got = import_hf_router_logits(tmp_path / "rl.pt", top_k=2, batch=2)
    want = import_hf_router_logits(tmp_path / "rl.npz", top_k=2, batch=2)
    assert np.array_equal(got.topk, want.topk)
    by_hand = np.argsort(-layers[1][0], kind="stable")[:2]
    assert sorted(got.topk[0, 0, 1].tolist()) == sorted(by_hand.tolist())


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("garbage.pt", b"\x80\x02\xa4" + bytes(range(200)), "Unsupported operand"),
        ("zipless.pt", b"PK\x03\x04garbage", "not a ZIP archive"),
        ("unsafe.pt", None, "Unsupported global"),
    ],
)
def test_an_unreadable_pt_file_is_one_error_line(name, content, why, tmp_path, capsys):
    """torch's weights-only refusal is several paragraphs; the command says one line, the reason kept."""
    torch = pytest.importorskip("torch", reason="the capture extra (torch) is not installed")
    from moeroof.cli import main

    src = tmp_path / name
    if content is None:  # a pickle that calls a global: what weights_only=True exists to refuse
        torch.save({"f": print}, src)
    else:
        src.write_bytes(content)
    assert main(["import", "sglang", str(src), "-o", str(tmp_path / "o.npz"), "--top-k", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "not a torch file moeroof can read safely (weights_only load failed: " in err and why in err
    assert "weights_only` set to `False`" not in err  # torch's advice to load it unsafely is not repeated


# ----------------------------------------------------------------------------- table: CSV read in chunks

_KEY_SPELLINGS = ["1", "01", " 2", "+3", "007", "7", "x"]
_ID_SPELLINGS = ["0", "1", "2", "3", " 1", "03", "+2", "", "9", "-1", "z"]


def _table_imports(tmp_path, rows, blank_after, chunk_rows):
    """The same cells imported from a CSV read ``chunk_rows`` rows at a time, from the CSV read in
    one chunk (blank lines after the rows in ``blank_after``), and from a Parquet file of text
    columns (read whole, as text): each import's (trace, keys) or (field, message) of its error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from moeroof.data import importers

    lines = ["s,t,e0,e1"]
    for i, r in enumerate(rows):
        lines.append(",".join(r))
        lines += [""] * (i in blank_after)
    csv = write(tmp_path / "t.csv", "\n".join(lines) + "\n")
    table = pa.table({c: [r[j] for r in rows] for j, c in enumerate(("s", "t", "e0", "e1"))})
    pq.write_table(table, tmp_path / "t.parquet")
    args = dict(columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e1"], experts=4, top_k=2)
    out = []
    for src, chunk in ((csv, chunk_rows), (csv, 10**6), (tmp_path / "t.parquet", chunk_rows)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(importers, "CSV_CHUNK_ROWS", chunk)
            try:
                got = import_table(src, **args)
            except InputError as exc:
                out.append(("error", exc.field, exc.message))
                continue
        meta = {k: got.meta[k] for k in ("streams_from", "steps_from", "tokens", "rows_read")}
        out.append(("trace", got.topk.tolist(), meta))
    return out


def _spelled(draw, value: int) -> str:
    """An integer as a spreadsheet or a script may write it."""
    return draw(st.sampled_from([str(value), f"0{value}", f" {value}", f"+{value}", f"{value} "]))


@st.composite
def _table_rows(draw):
    """Rows (stream, step, id, id) of a wide table: mostly valid (distinct steps, two distinct
    ids in 0..3), in any spelling, with now and then a padding token, a bad cell or a repeat."""
    rows = []
    for i in range(draw(st.integers(1, 9))):
        stream = draw(st.sampled_from(_KEY_SPELLINGS))
        step = _spelled(draw, i) if draw(st.integers(0, 9)) else draw(st.sampled_from(["x", "1", ""]))
        a, b = draw(st.permutations(range(4)))[:2]
        ids = [_spelled(draw, a), _spelled(draw, b)]
        if not draw(st.integers(0, 4)):
            ids = [draw(st.sampled_from(_ID_SPELLINGS)), draw(st.sampled_from(_ID_SPELLINGS))]
        rows.append((stream, step, *ids))
    return rows


@settings(max_examples=80, deadline=None)
@given(rows=_table_rows(), blank_after=st.sets(st.integers(0, 8), max_size=3), chunk_rows=st.integers(1, 4))
def test_a_csv_read_in_chunks_imports_what_the_same_cells_as_parquet_text_do(
    tmp_path_factory, rows, blank_after, chunk_rows
):
    """Integer columns of a CSV are read as int64, chunk by chunk (a column that is not integer in
    some chunk is read again as text): whatever the chunking, the cells' spellings (" 1", "01",
    "+2", padding "", "x") and blank lines, the import gives the trace and keys — or the error's
    field — of the same cells read as text from a Parquet file, and the same error message,
    naming the same line, as the CSV read in one chunk."""
    pytest.importorskip("pyarrow")
    rows = [r for r in rows if any(c.strip() for c in r)]  # an all-empty CSV row is a blank line
    if not rows:
        return
    chunked, whole, parquet = _table_imports(tmp_path_factory.mktemp("t"), rows, blank_after, chunk_rows)
    assert chunked == whole  # lines named in errors included
    # a Parquet row is named by its place, a CSV one by its line: the same error, not the same words
    assert chunked[:2] == parquet[:2] and (chunked[0] == "error" or chunked == parquet)


def test_keys_integer_in_one_chunk_and_text_in_another_stay_as_written(tmp_path, monkeypatch):
    """A key column whose early chunks hold integers and a later one text is text throughout: "007"
    and "7" are two streams, as the file writes them (read as one integer they would be one)."""
    from moeroof.data import importers

    src = write(tmp_path / "t.csv", "s,t,e\n007,1,0\n7,1,1\n7,2,2\nx,3,3\n")
    monkeypatch.setattr(importers, "CSV_CHUNK_ROWS", 2)
    got = import_table(src, columns=parse_columns("stream=s,step=t"), expert_cols=["e"], experts=4, top_k=1)
    assert got.meta["streams_from"]["keys"] == ["007", "7", "x"]
    assert got.topk[:, :, 0, 0].tolist() == [[0, 1, -1], [-1, 2, -1], [-1, -1, 3]]


def test_a_csv_too_large_for_memory_is_refused_as_it_is_read(tmp_path, monkeypatch):
    """After each chunk the rows the whole file would hold are checked against available memory:
    a table that would not fit is refused naming the file and 'rows', before it is held."""
    import moeroof.core.limits as limits
    from moeroof.data import importers

    n = 3 * importers.CSV_CHUNK_ROWS
    src = tmp_path / "big.csv"
    src.write_text("s,t,e\n" + "".join(f"{i % 4},{i // 4},{i % 8}\n" for i in range(n)), encoding="utf-8")
    need = n * (importers.ROW_BYTES + 3 * importers.INT_CELL_BYTES)
    args = dict(columns=parse_columns("stream=s,step=t"), expert_cols=["e"], experts=8, top_k=1)
    monkeypatch.setattr(limits, "available_memory", lambda: need // 2)
    with pytest.raises(InputError, match=r"big\.csv:-: rows: ~65,536 rows so far = .* this machine has"):
        import_table(src, **args)
    monkeypatch.setattr(limits, "available_memory", lambda: 2 * need)
    assert import_table(src, **args).meta["tokens"] == n


@settings(max_examples=40, deadline=None)
@given(expert_id=st.integers(1 << 20, 1 << 70), layers=st.integers(1, 3))
def test_an_expert_column_id_past_the_limit_is_refused_before_the_matrix_is_allocated(
    tmp_path_factory, expert_id, layers
):
    """A header's expert id sizes the (layers, E) matrix: an id of 2^20 or more (2^32 asked numpy
    for 60 GiB) is refused naming the file, the header line and the column."""
    d = tmp_path_factory.mktemp("m")
    src = write(d / "m.csv", f"layer,Expert_0,Expert_{expert_id}\n" + "".join(f"{i},1,1\n" for i in range(layers)))
    with pytest.raises(InputError) as err:
        import_matrix(src, top_k=1, layer_col="layer", expert_prefix="Expert_")
    assert (err.value.path, err.value.row, err.value.field) == (src, 1, f"Expert_{expert_id}")


def test_a_matrix_too_large_for_memory_is_refused_naming_the_file(tmp_path, monkeypatch):
    import moeroof.core.limits as limits

    src = write(tmp_path / "m.csv", "layer,Expert_0,Expert_99999\n0,1,1\n1,1,1\n")
    monkeypatch.setattr(limits, "available_memory", lambda: 2 * 100_000 * 8 - 1)
    with pytest.raises(InputError, match=r"m\.csv:-: experts: 2 layers × 100,000 experts = .* this machine has"):
        import_matrix(src, top_k=1, layer_col="layer", expert_prefix="Expert_")


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.lists(st.integers(0, 9), min_size=3, max_size=3), min_size=1, max_size=3),
    tokens=st.integers(1, 9),
    top_k=st.integers(1, 3),
)
def test_counts_the_given_tokens_cannot_hold_are_refused_naming_the_matrix(tmp_path_factory, counts, tokens, top_k):
    """Counts against --tokens are checked where they are read: an expert counted more often than a
    layer's T, or counts past K × T, are an error of the matrix (its file and layer), never of the
    histogram it would be written as (the writer named that output file); counts within both import."""
    d = tmp_path_factory.mktemp("m")
    body = "".join(f"{i}," + ",".join(map(str, row)) + "\n" for i, row in enumerate(counts))
    src = write(d / "m.csv", "layer,Expert_0,Expert_1,Expert_2\n" + body)
    c = np.array(counts)
    fits = bool((c <= tokens).all() and (c.sum(axis=1) <= top_k * tokens).all())
    try:
        got = import_matrix(src, top_k=top_k, layer_col="layer", expert_prefix="Expert_", tokens=tokens)
    except InputError as err:
        assert not fits and err.path == src and str(err.row).startswith("layer "), str(err)
        return
    assert fits
    write_imported(d / "h.csv", got)  # the writer's own checks agree


@settings(max_examples=30, deadline=None)
@given(expert_id=st.integers(1 << 20, 1 << 62), row=st.integers(0, 3))
def test_an_sglang_expert_id_past_the_limit_is_refused_naming_its_row(tmp_path_factory, expert_id, row):
    """Without E given, an SGLang v0.4 CSV's largest expert id sizes its (layers, E) counts: an id of
    2^20 or more (4·10^9 asked numpy for 30 GiB, no file named) is refused naming the file, its line
    and expert_id, before anything is allocated."""
    d = tmp_path_factory.mktemp("s")
    ids = [0, 1, 2, 3]
    ids[row] = expert_id
    src = write(d / "s.csv", "layer_id,expert_id,count\n" + "".join(f"0,{e},2\n" for e in ids))
    with pytest.raises(InputError) as err:
        import_sglang(src, top_k=1)
    assert (err.value.path, err.value.row, err.value.field) == (src, row + 2, "expert_id")


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 9), dup_at=st.integers(0, 8), chunk=st.integers(1, 4))
def test_a_repeated_expert_is_found_in_its_token_whatever_the_chunk_of_tokens_sorted(n, dup_at, chunk):
    """Tokens are checked for an expert given twice a chunk at a time (io.DISTINCT_CHUNK_ELEMENTS ids):
    the first such token is named, by its line and the repeating slot's column, for any chunk size."""
    import tempfile
    from pathlib import Path

    from moeroof.data import io

    dup_at = min(dup_at, n - 1)
    rows = [f"{i},0,{i % 4},{(i + 1) % 4},{(i + 2) % 4}" for i in range(n)]
    rows[dup_at] = f"{dup_at},0,1,2,1"
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        src = write(Path(d) / "t.csv", "t,s,e0,e1,e2\n" + "\n".join(rows) + "\n")
        mp.setattr(io, "DISTINCT_CHUNK_ELEMENTS", 3 * chunk)  # K = 3: chunk tokens
        with pytest.raises(InputError) as err:
            import_table(
                src, columns=parse_columns("stream=s,step=t"), expert_cols=["e0", "e1", "e2"], experts=4, top_k=3
            )
    assert (err.value.row, err.value.field) == (dup_at + 2, "e2"), str(err.value)
    assert "expert 1 twice in one token" in err.value.message


#: measures, in a process of its own, the resident bytes ``import_table`` adds at its peak on a
#: Parquet table of integer columns (argv: rows, streams, layers, K, folder), and prints them with
#: the import's own estimate of them
_PEAK_SCRIPT = r"""
import json, sys
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from moeroof.data import importers
from moeroof.data.importers import import_table, parse_columns

def rss(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key))

rows, streams, layers, k = map(int, sys.argv[1:5])
folder = Path(sys.argv[5])
steps = rows // (streams * layers)
n = steps * streams * layers
cols = {"stream": np.tile(np.repeat(np.arange(streams), layers), steps),
        "step": np.repeat(np.arange(steps), streams * layers)}
if layers > 1:
    cols["layer"] = np.tile(np.arange(layers), steps * streams)
low = np.random.default_rng(0).integers(0, 64 // k, n)
for j in range(k):
    cols[f"e{j}"] = low + j * (64 // k)
table = pa.table(cols)
pq.write_table(table, folder / "big.parquet")
pq.write_table(table.slice(0, 2 * streams * layers), folder / "small.parquet")
del cols, low, table
spec = "stream=stream,step=step" + (",layer=layer" if layers > 1 else "")
args = dict(columns=parse_columns(spec), expert_cols=[f"e{j}" for j in range(k)], experts=64, top_k=k)
import_table(folder / "small.parquet", **args)  # the libraries loaded and warm
before = rss("VmRSS")
import_table(folder / "big.parquet", **args)
per_row = importers.ROW_BYTES + (len(spec.split(",")) + k) * importers.INT_CELL_BYTES
print(json.dumps({"peak": rss("VmHWM") - before, "estimate": n * per_row}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "streams, layers, k",
    [(8, 1, 1), (8, 50, 2), (8, 50, 8)],
    ids=["3-columns-K1", "5-columns-K2", "11-columns-K8"],
)
def test_a_parquet_imports_memory_estimate_matches_its_measured_peak(tmp_path, streams, layers, k):
    """What ``import table`` checks a Parquet table's rows against before reading them is what the
    import peaks at: 4M rows of integer keys and ids, as 3, 5 and 11 columns, measured in a process
    of their own. The estimate is at least the peak less the readers' fixed 128 MiB (so a table
    too large is refused up front) and at most 1.5× it (48 B a cell, twice the peak, refused 20M
    rows of 5 columns under a 4 GB address-space cap that imports them)."""
    pytest.importorskip("pyarrow")
    import os
    import subprocess
    import sys
    from pathlib import Path

    import moeroof

    env = {**os.environ, "PYTHONPATH": str(Path(moeroof.__file__).parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, "4000000", str(streams), str(layers), str(k), str(tmp_path)],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["peak"] - (128 << 20) <= got["estimate"] <= 1.5 * got["peak"], got
