"""moeroof.data.importers: each format on tiny files written here, expected values counted by hand.

Nothing here is copied from the importers' output: every expected trace or histogram is written
out from the rows of the small input the test itself made.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from moeroof.core.errors import ParameterError
from moeroof.data.importers import (
    ImportedTrace,
    import_table,
    parse_columns,
    parse_filters,
    trace_counts,
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
    pytest.importorskip("pyarrow", reason="Parquet needs pyarrow")
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


def test_trace_counts_by_hand():
    topk = np.full((1, 1, 2, 2), -1)  # one step, one stream, two layers; layer 1 has no token
    topk[0, 0, 0] = [0, 1]
    counts, tokens = trace_counts(topk, 3)
    assert counts.tolist() == [[1, 1, 0], [0, 0, 0]] and tokens.tolist() == [1, 0]
