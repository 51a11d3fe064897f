"""POINTS files for ``moeroof fit-routing``: the reader keeps input order and refuses empty,
malformed and contradictory files with one ``FILE:ROW: FIELD`` error (CLI: exit 2, one line)."""

from __future__ import annotations

import pytest

from moeroof.cli import main
from moeroof.core.paths import DATA_DIR
from moeroof.data.io import InputError
from moeroof.data.points import POLICIES, Point, read_points

HEADER = "kind,batch,capacity_experts_per_layer,capacity_gib,policy,scope,ranks,value\n"


def _write(tmp_path, text, name="points.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_policies_are_the_cache_simulators():
    from moeroof.cachesim import POLICIES as CACHE_POLICIES

    assert set(POLICIES) == set(CACHE_POLICIES)


def test_rows_come_back_in_input_order_with_defaults_and_line_numbers(tmp_path):
    path = _write(
        tmp_path,
        "# provenance: a comment line\n"
        + HEADER
        + "hit_rate,8,24,,,,,0.8\n"
        + "\n"
        + "union,4,,,,,,11.5\n"
        + "hit_rate,1,8,,lfu,layer,2,\n",
    )
    pts = read_points(path, experts=64)
    assert [p.kind for p in pts] == ["hit_rate", "union", "hit_rate"]
    assert [p.row for p in pts] == [3, 5, 6]
    assert pts[0] == Point("hit_rate", 8, 24.0, None, "lru", "global", 1, "lpt", 0.8, 3)
    assert pts[2].value is None and pts[2].policy == "lfu" and pts[2].scope == "layer" and pts[2].ranks == 2
    assert [p.calibrates for p in pts] == [True, True, False]


def test_the_example_file_reads():
    pts = read_points(DATA_DIR / "points" / "example.points", experts=64, expert_bytes=4 * 2**20)
    assert any(p.calibrates for p in pts) and any(not p.calibrates for p in pts)


BAD = [
    ("", 1, "header", "empty"),
    ("# only a comment\n", 1, "header", "empty"),
    (HEADER, 1, "row", "no data rows"),
    (HEADER + "hit_rate,8,24,,,,,\n", 2, "value", "no calibration row"),
    (HEADER + "hit_rate,8,24,,,,,1.2\n", 2, "value", "0–1"),
    (HEADER + "overlap,8,,,,,,-0.1\n", 2, "value", "0–1"),
    (HEADER + "hit_rate,8,24,1.5,,,,0.5\n", 2, "capacity_gib", "twice"),
    (HEADER + "hit_rate,8,,,,,,0.5\n", 2, "capacity_experts_per_layer", "needs"),
    (HEADER + "union,8,24,,,,,12\n", 2, "capacity_experts_per_layer", "no cache"),
    (HEADER + "hit_rate,8,24,,fifo,,,0.5\n", 2, "policy", "unknown policy"),
    (HEADER + "hit_rate,8,24,,,local,,0.5\n", 2, "scope", "unknown scope"),
    (HEADER + "hitrate,8,24,,,,,0.5\n", 2, "kind", "unknown kind"),
    (HEADER + "hit_rate,eight,24,,,,,0.5\n", 2, "batch", "number"),
    (HEADER + "hit_rate,0,24,,,,,0.5\n", 2, "batch", "positive integer"),
    (HEADER + "hit_rate,8,24,,,,,half\n", 2, "value", "number"),
    (HEADER + "hit_rate,8,24,,,,0.5\n", 2, "row", "fields"),
    (HEADER + "hit_rate,8,24,,,,,0.5\nunion,8,,,,,,12\nhit_rate,8,24,,,,,0.7\n", 4, "value", "contradicts line 2"),
    (HEADER + "hit_rate,8,1.5,,,,,0.5\n".replace(",1.5,,", ",,1.5,"), 2, "capacity_gib", "expert_bytes"),
    (HEADER.replace("value", "valeu") + "hit_rate,8,24,,,,,0.5\n", 1, "header", "unknown column"),
    ("kind,batch\nhit_rate,8\n", 1, "header", "missing column 'value'"),
    (HEADER + "union,8,,,,,,80\n", 2, "value", "experts (64)"),
]


@pytest.mark.parametrize(("text", "row", "field", "words"), BAD, ids=[f"{b[2]}-{b[3]}" for b in BAD])
def test_bad_points_name_file_row_and_field(tmp_path, text, row, field, words):
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        read_points(path, experts=64)
    assert (err.value.row, err.value.field) == (row, field)
    assert str(err.value).startswith(f"{path}:{row}: {field}: ") and words in str(err.value)


def test_duplicates_within_noise_are_kept(tmp_path):
    path = _write(tmp_path, HEADER + "hit_rate,8,24,,,,,0.50\nhit_rate,8,24,,,,,0.52\n")
    assert [p.value for p in read_points(path)] == [0.5, 0.52]


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="file: no such file"):
        read_points(tmp_path / "nope.csv")


@pytest.mark.parametrize(("text", "row", "field"), [(b[0], b[1], b[2]) for b in BAD[:6]])
def test_cli_bad_points_exit_2_with_one_error_line(tmp_path, capsys, text, row, field):
    path = _write(tmp_path, text)
    assert main(["fit-routing", str(path), "--experts", "64", "--top-k", "4", "--layers", "4", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {path}:{row}: {field}: ")


def test_capacity_experts_means_the_whole_cache_so_a_points_file_names_it_per_layer(tmp_path):
    """capacity_experts is the whole cache in cache, mrc and plan: a POINTS column of that name
    (per layer, as it once meant here) is refused with the name to use, never read silently."""
    old = tmp_path / "old.points"
    old.write_text("kind,batch,capacity_experts,value\nhit_rate,1,8,0.4\n")
    with pytest.raises(InputError, match="rename the column capacity_experts_per_layer") as err:
        read_points(old)
    assert str(err.value).startswith(f"{old}:1: header:")
    new = tmp_path / "new.points"
    new.write_text("kind,batch,capacity_experts_per_layer,value\nhit_rate,1,8,0.4\n")
    (p,) = read_points(new)
    assert p.capacity_experts == 8.0 and p.value == 0.4
