"""``moeroof presets``: the shipped model and hardware presets (``data/presets/``), key numbers
in readable units with each number's provenance (w = witnessed, p = projected, a = assumed).

::

    moeroof presets [--schema] [--format table|json|csv] [--output FILE]

``--schema`` prints every field a model or hardware preset may have: unit, whether it is
required, its default (an assumption, tagged so in provenance) and what it means.

``--format csv`` is one row per preset (models, then hardware) with its key numbers in SI units
and the fields that are not witnessed. ``--output`` never writes into the presets folder (it
refuses every file the command reads).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from moeroof.cli.output import add_output_arguments, emit, fmt, jsonable, table


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "presets",
        help="list the model and hardware presets with their key numbers and sources",
        description=(
            "List the shipped model and hardware presets (data/presets/): key numbers in "
            "readable units with each number's provenance (witnessed / projected / assumed)."
        ),
    )
    p.add_argument(
        "--schema",
        action="store_true",
        help="print the preset schema instead: every model and hardware field, its unit, whether it is "
        "required, its default and what it means",
    )
    add_output_arguments(p)
    p.set_defaults(func=run)


SCHEMA_COLUMNS = ("kind", "field", "required", "dimension", "unit", "default", "meaning")


def print_schema(rep: dict[str, Any]) -> None:
    print('Preset schema (TOML: kind = "model" | "hardware", name = "…", then one inline table a field:')
    print('  FIELD = { value = N, unit = "U", source = "…" }  or  { …, assumed = true, note = "…" };')
    print("  witnessed = true (with a source) marks a measured number; counts take no unit)")
    rows = [
        [
            r["kind"],
            r["field"],
            "yes" if r["required"] else "no",
            r["unit"],
            "-"
            if r["default"] in (None, "")
            else f"{r['default']:g} (assumed)"
            if r["dimension"] != "text"
            else r["default"],
            r["meaning"],
        ]
        for r in rep["fields"]
    ]
    print(table(["kind", "field", "required", "unit (e.g.)", "default", "meaning"], rows, "<<<<<<"))
    print("an optional field without a default is needed only where the model uses it (an error names it then)")


def schema_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    return list(SCHEMA_COLUMNS), [[r[c] for c in SCHEMA_COLUMNS] for r in rep["fields"]]


_TAG_LETTER = {"witnessed": "w", "projected": "p", "assumed": "a"}
_TAG_RANK = {"witnessed": 0, "projected": 1, "assumed": 2}


def _preset_entry(obj: Any, fields: Sequence[str]) -> dict[str, Any]:
    """One preset as JSON: description, the fields its file sets (SI), provenance, sources, path."""
    entry: dict[str, Any] = {"description": obj.description}
    if getattr(obj, "precision", ""):
        entry["precision"] = obj.precision
    for key in fields:
        if key in obj.provenance:
            entry[key] = getattr(obj, key)
    entry["provenance"] = dict(obj.provenance)
    entry["sources"] = dict(obj.sources)
    entry["path"] = obj.path
    return entry


def presets_report() -> dict[str, Any]:
    """Every shipped preset, as the ``presets`` subcommand prints it with ``--json``."""
    from moeroof.data.io import InputError
    from moeroof.data.presets import HARDWARE_FIELDS, MODEL_FIELDS, list_presets, load_hardware, load_model

    shipped = list_presets()
    rep: dict[str, Any] = {"models": {}, "hardware": {}}
    broken: dict[str, str] = {}
    # one broken TOML dropped into data/presets is listed with its error; the others still load
    for name, path in shipped["models"].items():
        try:
            rep["models"][name] = _preset_entry(load_model(path), list(MODEL_FIELDS))
        except InputError as err:
            broken[f"models/{name}"] = str(err)
    for name, path in shipped["hardware"].items():
        try:
            hw = load_hardware(path)
        except InputError as err:
            broken[f"hardware/{name}"] = str(err)
            continue
        rep["hardware"][name] = {**_preset_entry(hw, list(HARDWARE_FIELDS)), "link": hw.link}
    if broken:
        rep["broken"] = broken
    return jsonable(rep)


def _cell(value: Any, unit: str | None, tag: str | None, digits: int = 2) -> str:
    """A table cell: the number in ``unit`` (SI → unit through moeroof.core.units) and its tag letter."""
    from moeroof.core.units import from_si

    if value is None or tag is None:
        return "-"
    shown = value if unit is None else from_si(value, unit)
    return f"{fmt(shown, digits)} {_TAG_LETTER[tag]}"


def ssd_cell(entry: dict[str, Any], read_size: float) -> str:
    """SSD bandwidth at one read size (log-log interpolation of the curve, clamped at its ends).

    The tag is the weaker of the curve's two fields; a value read between or beyond the measured
    points is at best ``projected``."""
    from moeroof.core.units import from_si

    sizes, bws = entry["ssd_read_size_bytes"], entry["bw_ssd_bytes_per_s"]
    prov = entry["provenance"]
    tag = max(prov["ssd_read_size_bytes"], prov["bw_ssd_bytes_per_s"], key=_TAG_RANK.__getitem__)
    if tag == "witnessed" and not any(math.isclose(s, read_size) for s in sizes):
        tag = "projected"
    bw = float(np.exp(np.interp(np.log(read_size), np.log(sizes), np.log(bws))))
    return f"{fmt(from_si(bw, 'GB/s'))} {_TAG_LETTER[tag]}"


def print_presets(rep: dict[str, Any]) -> None:
    from moeroof.core.units import KiB, MiB

    def cell(entry: dict[str, Any], key: str, unit: str | None, digits: int = 2) -> str:
        return _cell(entry.get(key), unit, entry["provenance"].get(key), digits)

    rows = []
    for name, m in rep["models"].items():
        rows.append(
            [
                name,
                cell(m, "experts", None),
                cell(m, "top_k", None),
                cell(m, "moe_layers", None),
                cell(m, "expert_bytes", "MB", 1),
                cell(m, "non_routed_bytes", "GB", 1),
                cell(m, "kv_bytes_per_token", "KiB", 1),
                cell(m, "flops_per_token", "GFLOP", 1),
            ]
        )
    print("models (data/presets/models)")
    headers = ["model", "E", "K", "layers", "expert MB", "non-routed GB", "KV KiB/token", "GFLOP/token"]
    print(table(headers, rows, "<>>>>>>>"))
    print()
    rows = []
    for name, h in rep["hardware"].items():
        rows.append(
            [
                name,
                cell(h, "ram_bytes", "GiB", 1),
                cell(h, "bw_mem_bytes_per_s", "GB/s", 1),
                cell(h, "flops_per_s", "TFLOP/s", 1),
                h.get("link", "ssd"),
                ssd_cell(h, 128 * KiB),
                ssd_cell(h, 8 * MiB),
                cell(h, "bw_link_bytes_per_s", "GB/s", 1),
            ]
        )
    print("hardware (data/presets/hardware)")
    headers = [
        "hardware",
        "RAM GiB",
        "mem GB/s",
        "TFLOP/s",
        "experts from",
        "stream GB/s @128KiB",
        "stream GB/s @8MiB",
        "fabric GB/s",
    ]
    print(table(headers, rows, "<>>><>>>"))
    print(
        "experts from: what the step model's streaming term reads through (ssd, pcie, host-link, page-cache); "
        "fabric: the link between boxes of a multi-node run"
    )
    print()
    counts = {tag: 0 for tag in _TAG_LETTER}
    for kind in ("models", "hardware"):
        for entry in rep[kind].values():
            for tag in entry["provenance"].values():
                counts[tag] += 1
    print(
        "provenance: w = witnessed (measured or read off a model card, with source), "
        "p = projected (derived from sourced inputs), a = assumed; "
        + ", ".join(f"{counts[t]} {t}" for t in _TAG_LETTER)
        + " numbers in all"
    )
    print(
        "results derived from any p or a input are projected (never served as measurements); sources: moeroof presets --json"
    )


#: ``--format csv``: one row per preset; numbers in SI units (bytes, bytes/s, FLOP, FLOP/s)
CSV_COLUMNS: tuple[str, ...] = (
    "kind",
    "name",
    "description",
    "precision",
    "experts",
    "top_k",
    "moe_layers",
    "expert_bytes",
)
CSV_COLUMNS += ("non_routed_bytes", "kv_bytes_per_token", "flops_per_token", "ram_bytes", "bw_mem_bytes_per_s")
CSV_COLUMNS += ("flops_per_s", "link", "stream_bytes_per_s_at_128KiB", "stream_bytes_per_s_at_8MiB")
CSV_COLUMNS += ("bw_link_bytes_per_s", "not_witnessed", "path")


def _stream_bw(entry: dict[str, Any], read_size: float) -> float | None:
    """The streaming bandwidth at one read size (log-log interpolation, as the table's cell)."""
    sizes, bws = entry.get("ssd_read_size_bytes"), entry.get("bw_ssd_bytes_per_s")
    if sizes is None or bws is None:
        return None
    sizes = sizes if isinstance(sizes, list) else [sizes]
    bws = bws if isinstance(bws, list) else [bws]
    bw = float(np.exp(np.interp(np.log(read_size), np.log(sizes), np.log(bws))))
    return float(f"{bw:.6g}")  # the interpolation's round-off (1.51e9 read back as 1510000000.0000021)


def presets_csv(rep: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``: one row per preset, models first; ``not_witnessed`` lists the fields
    tagged projected or assumed (``field=tag`` separated by ``;``)."""
    from moeroof.core.units import KiB, MiB

    rows = []
    for kind in ("models", "hardware"):
        for name, entry in rep[kind].items():
            row: dict[str, Any] = {c: entry.get(c) for c in CSV_COLUMNS}
            row.update(kind="model" if kind == "models" else "hardware", name=name)
            if kind == "hardware":
                row["stream_bytes_per_s_at_128KiB"] = _stream_bw(entry, 128 * KiB)
                row["stream_bytes_per_s_at_8MiB"] = _stream_bw(entry, 8 * MiB)
            prov = entry.get("provenance") or {}
            row["not_witnessed"] = ";".join(f"{k}={t}" for k, t in prov.items() if t != "witnessed")
            rows.append([row[c] for c in CSV_COLUMNS])
    return list(CSV_COLUMNS), rows


def run(args: argparse.Namespace) -> int:
    from moeroof.data.presets import list_presets, schema_rows

    if args.schema:
        return emit({"fields": schema_rows()}, args, print_schema, csv_table=schema_csv)
    rep = presets_report()
    # every file this command read is an input (--output glm-5.2.toml once overwrote that preset)
    read = [path for kind in list_presets().values() for path in kind.values()]
    rc = emit(rep, args, print_presets, csv_table=presets_csv, inputs=read)
    # a broken preset: the others are listed (its error under "broken" in the JSON), then one
    # error line each on stderr and exit 2
    for err in rep.get("broken", {}).values():
        print(f"error: {err}", file=sys.stderr)
    return 2 if rep.get("broken") and rc == 0 else rc
